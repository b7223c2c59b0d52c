/* cpu_fallback/dws1: the 3 x 3 stride-1 'same' depthwise convolution (pads
 * 1 on every side, dilation 1: the output plane is the input's size) on one
 * channel plane, reading the input in place (GEMM_CONV.md, "Stride-1
 * depthwise 3x3 in place").
 *
 * The depthwise path's general form copies each input plane into a padded
 * plane and runs the rows kernel over it: two of each output vector's three
 * column shifts are loads across cache lines. Here the AVX-512 kernel walks
 * strips of up to 4 vectors of 16 columns down the plane: each input row's
 * vectors are loaded once (from the row's start: aligned where W is a
 * multiple of 16), the columns one left and one right made in registers
 * (valignd with the neighbouring vector, or with a broadcast of the column
 * just outside the strip, zero outside the row), and fed to the three
 * output rows under them; no copy of the plane.
 *
 * y[oy·W + ox] = clamp(bias + sum over ky < 3, kx < 3, in that order, of
 * w[3·ky + kx] · X(oy - 1 + ky, ox - 1 + kx)), X zero outside the H x W
 * input, one fma per tap (a tap in the padding adds w · 0), then
 * v < lo ? lo : v and v > hi ? hi : v (NaN kept): the operations of
 * sgemm.h kiln_dw_rows on the padded plane, so the same bits. */
#ifndef KILN_CPU_FALLBACK_DWS1_H
#define KILN_CPU_FALLBACK_DWS1_H
#include <stdint.h>

/* Output rows [r0, r1) of the plane (0 <= r0 <= r1 <= H; y and x are the
 * planes' starts): a thread's part of the plane (GEMM_CONV.md, "Parts of the
 * image"). Each output's operations do not depend on the range. */
typedef void (*kiln_dw_s1_fn)(float *y, const float *x, int64_t H, int64_t W, int64_t r0, int64_t r1, const float *w,
                              float bias, float lo, float hi);
void kiln_dw_s1_base(float *y, const float *x, int64_t H, int64_t W, int64_t r0, int64_t r1, const float *w,
                     float bias, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true (dws1_avx512.c). */
void kiln_dw_s1_avx512(float *y, const float *x, int64_t H, int64_t W, int64_t r0, int64_t r1, const float *w,
                       float bias, float lo, float hi);
/* The AVX-512 kernel under the AVX2 setting where AVX-512F is usable, else
 * NULL (the padded plane and the rows kernel). */
kiln_dw_s1_fn kiln_dw_s1(void);

#endif
