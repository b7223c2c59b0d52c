/* cpu_fallback/pwt: 1x1 stride-1 convolutions on small planes with the
 * vector lanes over OUTPUT CHANNELS (GEMM_CONV.md, "Pointwise convolutions
 * on small planes, lanes over channels").
 *
 * Y[m][p] = sum_k W[m][k] · X[k][p] on a plane of P pixels. The wide GEMM's
 * tiles put 32 pixels in the lanes: on 14 x 14 (196) and 7 x 7 (49) planes
 * they compute 224 and 64 columns. Here a tile is 12 pixels x 32 output
 * channels: X's 12 pixels of channel k are 12 consecutive floats of its
 * row (broadcast in place, no panel packed per call), W^T's 32 channels of
 * row k come from a pack made once per plan (kiln_pwt_pack), and the tile
 * is stored transposed into Y (NCHW): 196 or 52 pixels computed.
 *
 * Each output element gets the operations of the wide GEMM path (sgemm.h):
 * per KC slice (kiln_sgemm_wide_kc) a chain of fmas in k order from zero,
 * the slices' sums added in order, then + bias, then the clamp (v < lo ?
 * lo : v, then v > hi ? hi : v, NaN kept) — so the same bits. */
#ifndef KILN_CPU_FALLBACK_PWT_H
#define KILN_CPU_FALLBACK_PWT_H
#include <stdbool.h>
#include <stdint.h>

#include "cpu_fallback/kernels.h"
#include "ir/status.h"

enum { KILN_PWT_MR = 12, KILN_PWT_NR = 32 }; /* pixels, output channels per tile */

/* The pack of W (M rows of K floats): per block b of 32 output channels,
 * K rows of 32 floats, dst[(b·K + k)·32 + c] = W[(32b + c)·K + k], zero for
 * channels past M. */
int64_t kiln_pwt_pack_floats(int64_t M, int64_t K);
void kiln_pwt_pack(const float *w, int64_t M, int64_t K, float *dst);

/* One KC slice of one tile: for r < mr (1..12) pixels and c < nr (1..32)
 * channels, the slice's sums acc[r][c] = sum over k in [p0, p0 + kc) of
 * x[k·ldx + r] · wt[k·32 + c] (kc = kiln_sgemm_wide_kc(K, p0)); tot (12 x
 * 32 floats, the tile's running totals) = acc for the first slice, acc +
 * tot after; after the last slice y[c·ldy + r] = clamp(total + bias[c])
 * (bias NULL: none; clamp false: none). Slice by slice, the caller running
 * every strip of a channel block through one slice before the next, so
 * the slice's 32-channel pack rows stay in L1. With one slice (K <= 320)
 * tot is not used. Reads x[k·ldx + r] only for r < mr and the pack's 32
 * columns; writes only those outputs. pf (not NULL): at the slice's step k
 * the line at pf + k·pfs is fetched into L2 (a hint: the caller's share of
 * the pack's next slice, spread over the call; never a fault, no value
 * changes; the twin ignores it, the AVX2 tile fetches the share's lines
 * in one burst before its passes). */
typedef void (*kiln_pwt_fn)(int64_t K, int64_t p0, const float *x, int64_t ldx, const float *wt, float *tot, float *y,
                            int64_t ldy, int mr, int nr, const float *bias, bool clamp, float lo, float hi,
                            const float *pf, int64_t pfs);
void kiln_pwt_tile_base(int64_t K, int64_t p0, const float *x, int64_t ldx, const float *wt, float *tot, float *y,
                        int64_t ldy, int mr, int nr, const float *bias, bool clamp, float lo, float hi,
                        const float *pf, int64_t pfs);
/* Only callable where kiln_la_cpu_has_avx512() is true (pwt_avx512.c). */
void kiln_pwt_tile_avx512(int64_t K, int64_t p0, const float *x, int64_t ldx, const float *wt, float *tot, float *y,
                          int64_t ldy, int mr, int nr, const float *bias, bool clamp, float lo, float hi,
                          const float *pf, int64_t pfs);
/* Only callable where AVX2 and FMA are (pwt_avx2.c): 6 x 16 sub-tiles. */
void kiln_pwt_tile_avx2(int64_t K, int64_t p0, const float *x, int64_t ldx, const float *wt, float *tot, float *y,
                        int64_t ldy, int mr, int nr, const float *bias, bool clamp, float lo, float hi,
                        const float *pf, int64_t pfs);
/* The tile kernel of the active setting: the AVX-512 one where
 * kiln_sgemm_pack_reader() is set, the AVX2 one under the AVX2 setting
 * without AVX-512F; else NULL (the base setting: no pack made or read). */
kiln_pwt_fn kiln_pwt_tile(void);

/* The default size rule (GEMM_CONV.md): planes of P output pixels under
 * 512, and under 1024 with K >= 128 input channels (28 x 28 projections);
 * with the AVX2 tiles (whose bias, clamp and transposed store are scalar)
 * planes under 1024 with K >= 128 only: with K 64 or 96 on 14 x 14 they
 * tied OpenBLAS. The Conv kernel takes the tiles there;
 * kiln_cpu_conv_prepack makes W's pack for them only where the plan's
 * shapes pass it (or are unknown). */
enum { KILN_PWT_MAX_PLANE = 1024, KILN_PWT_MIN_K = 128 };
bool kiln_pwt_plane_wanted(int64_t P, int64_t K);
/* KILN_CONV_PWT / kiln_conv_pwt_force (kernels.h): 0 off, 1 on every plane
 * where the pack exists, 2 the twin there, -2 the default rule. */
int kiln_pwt_mode(void);

/* The convolution: N images, K input and M output channels, P pixels, x
 * [N][K][P], y [N][M][P], wt the pack of W, bias (M) or NULL, the
 * epilogue (a clamp on the tiles' accumulators; any other applied once per
 * block of 32 output channels, while it is in cache). Tasks on the pool:
 * (image, channel block, group of pixel strips). */
kiln_status kiln_pwt_conv(int64_t N, int64_t K, int64_t M, int64_t P, const float *x, const float *wt,
                          const float *bias, float *y, const kiln_cpu_epilogue *ep, kiln_pwt_fn fn);

#endif
