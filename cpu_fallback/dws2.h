/* cpu_fallback/dws2: depthwise convolution with stride 2 (both dims,
 * dilation 1) on one channel plane, reading the input in place
 * (GEMM_CONV.md, "Stride-2 depthwise in place").
 *
 * The depthwise path's general form copies each input plane into a padded
 * plane split by stride phase, then runs the rows kernel over it. Here a
 * vector of 16 outputs of a row takes, for each tap row, the input row's
 * 32 (+ kw - 1) columns under it by masked loads (the padding: zero lanes,
 * never read) and splits them into even and odd columns in registers
 * (tap kx: the even columns from column 2·ox - pl + kx & ~1 when kx is
 * even, the odd ones when odd): no copy of the plane.
 *
 * y[oy·OW + ox] = clamp(bias + sum over ky < KH, kx < KW, in that order, of
 * w[ky·KW + kx] · X(2·oy - pt + ky, 2·ox - pl + kx)), X zero outside the H
 * x W input, one fma per tap (a tap in the padding adds w · 0), then
 * v < lo ? lo : v and v > hi ? hi : v (NaN kept): the operations of
 * sgemm.h kiln_dw_rows on the padded plane, so the same bits. The AVX-512
 * kernel's 3 x 3 forms: strips of up to 4 vectors walked down the plane
 * (each input row split once), and on output rows of at most 8 (14 -> 7)
 * two output rows a vector. */
#ifndef KILN_CPU_FALLBACK_DWS2_H
#define KILN_CPU_FALLBACK_DWS2_H
#include <stdbool.h>
#include <stdint.h>

typedef void (*kiln_dw_s2_fn)(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt,
                              int64_t pl, const float *w, int KH, int KW, float bias, float lo, float hi);
void kiln_dw_s2_base(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt, int64_t pl,
                     const float *w, int KH, int KW, float bias, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true (dws2_avx512.c). */
void kiln_dw_s2_avx512(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt, int64_t pl,
                       const float *w, int KH, int KW, float bias, float lo, float hi);
/* Only callable where AVX2 and FMA are (dws2_avx2.c): one chain, vector
 * by vector. Chosen without AVX-512F on output rows of at most 16 (two
 * vectors): there it beat the padded planes and the AVX2 rows kernel
 * (MobileNetV2, 1 thread: 14 -> 7 0.48, 28 -> 14 0.74 of their time),
 * on rows of 28 it lost (1.05-1.07), on 56 it tied (GEMM_CONV.md). */
enum { KILN_DW_S2_AVX2_MAX_OW = 16 };
void kiln_dw_s2_avx2(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt, int64_t pl,
                     const float *w, int KH, int KW, float bias, float lo, float hi);
/* For output rows of OW: the AVX-512 kernel under the AVX2 setting where
 * AVX-512F is usable; the AVX2 one where it is not and OW <= 16; else NULL
 * (the padded-plane path). */
kiln_dw_s2_fn kiln_dw_s2(int64_t OW);

#endif
