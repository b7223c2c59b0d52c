/* cpu_fallback/wino.h: Winograd F(2x2, 3x3) convolution (wino.c). */
#ifndef KILN_CPU_FALLBACK_WINO_H
#define KILN_CPU_FALLBACK_WINO_H
#include <stdbool.h>
#include <stdint.h>

#include "cpu_fallback/kernels.h"

/* U (16 x M x C floats) = G g G^T of W (M x C x 3 x 3). */
void kiln_wino_weights(const float *w, int64_t M, int64_t C, float *u);
/* U packed for the GEMMs: the 16 U[xi] (M x C) one after another, each in
 * the wide GEMM's A-panel layout (sgemm.h kiln_sgemm_wide_pack_a),
 * kiln_wino_pack_floats(M, C) floats in all. Fails only on out of memory. */
int64_t kiln_wino_pack_floats(int64_t M, int64_t C);
kiln_status kiln_wino_pack(const float *w, int64_t M, int64_t C, float *up);
/* Y = conv(X, W) + bias, then the epilogue, for stride 1, dilation 1,
 * group 1, 3x3, pads ph/pw at the start; up from kiln_wino_pack. simd:
 * the AVX-512 transforms and micro-kernel where kiln_sgemm_pack_reader()
 * is set, else (and when false) the scalar twins; the same bits either way
 * and for any thread count. */
kiln_status kiln_wino_conv(int64_t N, int64_t C, int64_t M, int64_t H, int64_t W, int64_t ph, int64_t pw,
                           int64_t OH, int64_t OW, const float *x, const float *up, const float *bias, float *y,
                           const kiln_cpu_epilogue *ep, bool simd);
/* Frees the tile scratch kept between calls (the idle buffers; the cpu
 * plan's release calls it). */
void kiln_wino_scratch_trim(void);
/* The tile-row transforms (wino_tf.inc): base (scalar twin) and AVX-512F.
 * in_row: one channel's row of TW tiles, read in place: rows[r] is input
 * row r of the tiles (W floats) or NULL (outside the image: zeros); the
 * tiles read columns x0 .. x0 + 2·TW + 1 (x0 may be negative: the left
 * padding), zeros outside [0, W); V to o[xi·CT + tw]. */
typedef void (*kiln_wino_in_row_fn)(const float *const *rows, int64_t x0, int64_t W, int64_t TW, float *o,
                                    int64_t CT);
typedef void (*kiln_wino_out_row_fn)(const float *s, int64_t MT, int64_t TW, float b, bool clamp, float lo, float hi,
                                     float *y0, float *y1);
void kiln_wino_in_row_base(const float *const *rows, int64_t x0, int64_t W, int64_t TW, float *o, int64_t CT);
void kiln_wino_in_row_avx512(const float *const *rows, int64_t x0, int64_t W, int64_t TW, float *o, int64_t CT);
void kiln_wino_out_row_base(const float *s, int64_t MT, int64_t TW, float b, bool clamp, float lo, float hi, float *y0,
                            float *y1);
void kiln_wino_out_row_avx512(const float *s, int64_t MT, int64_t TW, float b, bool clamp, float lo, float hi,
                              float *y0, float *y1);
#endif
