/* cpu_fallback/nn: internal interface of the pooling, softmax,
 * normalisation, reduction and data-movement kernels (nn.c, nn_move.c).
 * The float loops they share are "primitives" over one row, each written
 * twice: a portable scalar twin (nn_base.c) and an AVX2 version
 * (nn_avx2.c, the only nn file built with -mavx2). Both versions do the
 * same float operations in the same order — sums keep 8 partial sums
 * (lane j takes elements j, j+8, j+16, ...) folded as
 * ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)), no fused multiply-adds — so the twin
 * is a bit-exact reference for the AVX2 path (NaN payloads and the sign of
 * a zero max aside); exp goes through cpu_fallback/vmath's twins. */
#ifndef KILN_CPU_FALLBACK_NN_H
#define KILN_CPU_FALLBACK_NN_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/vmath.h"

typedef struct kiln_nn_prims {
  /* Sum of x[0..n) in the 8-lane order above; sumsq sums x*x. */
  float (*sum)(size_t n, const float *x);
  float (*sumsq)(size_t n, const float *x);
  /* Sum of (x - c)^2. */
  float (*sqdev)(size_t n, const float *x, float c);
  /* out[r] = sum(n, x + r·ldx) and out[r] = sqdev(n, x + r·ldx, c[r]) for
   * r < rows: the same values, bit for bit; the AVX2 versions run four rows'
   * accumulator chains side by side (LayerNormalization's rows: one row's
   * chain alone waits on the add's latency). */
  void (*sums)(size_t rows, size_t n, const float *x, size_t ldx, float *out);
  void (*sqdevs)(size_t rows, size_t n, const float *x, size_t ldx, const float *c, float *out);
  /* Max / min of x[0..n) (n >= 1); NaN when any element is NaN. */
  float (*max)(size_t n, const float *x);
  float (*min)(size_t n, const float *x);
  /* acc[i] op= x[i * stride] for i < n: sum, sum of squares, max, min
   * (max/min: a NaN in either makes acc[i] NaN). */
  void (*acc_add)(size_t n, float *acc, const float *x, size_t stride);
  void (*acc_addsq)(size_t n, float *acc, const float *x, size_t stride);
  void (*acc_max)(size_t n, float *acc, const float *x, size_t stride);
  void (*acc_min)(size_t n, float *acc, const float *x, size_t stride);
  /* MaxPool 2x2, stride 2, no padding or dilation over one plane: y[r·ow
   * + i] = the max (acc_max's rules, taps in the order (0,0) (0,1) (1,0)
   * (1,1) from -inf) of x[2r·ldx + 2i + {0, 1}] and x[(2r + 1)·ldx + 2i +
   * {0, 1}], r < oh, i < ow (ldx >= 2·ow). */
  void (*max2x2s2)(size_t oh, size_t ow, const float *x, size_t ldx, float *y);
  /* MaxPool 3x3, stride 2, no dilation, over one h x w plane padded by pt
   * rows and pl columns (0..2; the bottom and right by the bounds): y[r·ow
   * + i] = the max over kh, kw < 3 of x[(2r − pt + kh)·w + 2i − pl + kw]
   * inside the plane (-inf when none), rows first: per column the max of
   * its rows (kh order), then of the three columns (kw order), acc_max's
   * rules at each step. The same value as the taps in (kh, kw) order; of
   * equal zeros (or of several NaNs) it may keep another one. buf: 2·ow +
   * 18 floats of scratch (the column maxima, -inf past the plane). */
  void (*max3x3s2)(size_t oh, size_t ow, const float *x, size_t h, size_t w, size_t pt, size_t pl, float *y,
                   float *buf);
  /* y[i] = x[i] * a + b (a multiply then an add, not an fma). */
  void (*affine)(size_t n, const float *x, float a, float b, float *y);
  /* y[i] = x[i] - m[i] (y may be x). */
  void (*sub)(size_t n, const float *x, const float *m, float *y);
  /* y[i] = y[i] / d[i]. */
  void (*div)(size_t n, float *y, const float *d);
  /* y[i] = exp(x[i] - m); returns the sum of the y[i]. y may be x. */
  float (*exp_shift_sum)(size_t n, const float *x, float m, float *y);
  /* Softmax of `rows` rows of n floats (x and y rows n apart, y may be x):
   * per row m = max, sum = exp_shift_sum(x, m), y = affine(y, 1/sum, 0) —
   * exactly that composition's results (the AVX2 setting runs
   * nn_avx512.c's kernel where the CPU has AVX-512F: the same bits). */
  void (*softmax_rows)(size_t rows, size_t n, const float *x, float *y);
  /* y[i] = ((x[i] - mean) * inv) * scale[i] (+ bias[i] when bias). */
  void (*norm_apply)(size_t n, const float *x, float mean, float inv, const float *scale, const float *bias, float *y);
  /* dst[a * ldd + b] = src[b * lds + a] for a < rows, b < cols (4-byte
   * elements): the blocked 2-D transpose of a cols x rows source. */
  void (*transpose32)(size_t rows, size_t cols, const uint32_t *src, size_t lds, uint32_t *dst, size_t ldd);
} kiln_nn_prims;

extern const kiln_nn_prims kiln_nn_prims_base;
/* nn_avx512.c: softmax_rows on 16 lanes; only where kiln_vm_cpu_has_avx512(). */
void kiln_nn_softmax_rows_avx512(size_t rows, size_t n, const float *x, float *y);
/* nn_avx512.c: max2x2s2 on 16 lanes (nn_base.c's bits); only where
 * kiln_vm_cpu_has_avx512(). The AVX2 setting runs it there on rows of >= 16. */
void kiln_nn_max2x2s2_avx512(size_t oh, size_t ow, const float *x, size_t ldx, float *y);
/* Tests only: max2x2s2 of the AVX2 primitives, never the AVX-512 kernel. */
void kiln_nn_max2x2s2_avx2_only(size_t oh, size_t ow, const float *x, size_t ldx, float *y);
/* Tests only: softmax_rows of the AVX2 primitives, never the AVX-512 kernel. */
void kiln_nn_softmax_rows_avx2_only(size_t rows, size_t n, const float *x, float *y);
/* Only usable where kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2) != NULL. */
extern const kiln_nn_prims kiln_nn_prims_avx2;

/* The primitives for isa, or NULL when this CPU / build cannot run it. */
const kiln_nn_prims *kiln_nn_prims_for(kiln_vm_isa isa);
/* The primitives the kernels use: kiln_vm_isa_active()'s, unless a test
 * forced an ISA with kiln_nn_force_isa (KILN_VM_NISA: back to automatic). */
const kiln_nn_prims *kiln_nn_prims_active(void);
void kiln_nn_force_isa(kiln_vm_isa isa);

/* Fills out[k] (dtype, shape) over its reservation without zeroing it
 * first: for kernels that then write every element. */
kiln_status kiln_nn_alloc(kiln_tensor *t, kiln_dtype dtype, int rank, const int64_t *dims);

/* A MaxPool (2-D, NCHW float32, its Indices unused) run by bands of output
 * rows while its argument X (dims, 4 of them) is made into Y (ydims)
 * (plan.c: a tile step whose anchor reports its finished blocks,
 * kiln_cpu_epilogue.done): _new, NULL where the node is not such a
 * MaxPool, ydims are not its output's, its rows are wider than
 * KILN_NN_BAND_MAX_OW, or memory is short (the caller then runs the
 * kernel); _done (a kiln_cpu_epilogue.done, ctx the bands), from any
 * thread for disjoint blocks: the output rows whose windows lie in the
 * input rows the finished block [start, start + n) of X holds whole;
 * _finish, after the last block: every other row (on the pool's threads),
 * returning the rows the bands made. The same operations per output as
 * the kernel, the same bits. */
#define KILN_NN_BAND_MAX_OW 1024
typedef struct kiln_nn_pool_bands kiln_nn_pool_bands;
kiln_nn_pool_bands *kiln_nn_pool_bands_new(const kiln_node *n, const int64_t *dims, const float *x, float *y,
                                           const int64_t *ydims);
void kiln_nn_pool_bands_done(void *ctx, int64_t start, int64_t n, float *y);
int64_t kiln_nn_pool_bands_finish(kiln_nn_pool_bands *b);
void kiln_nn_pool_bands_free(kiln_nn_pool_bands *b);

/* The data-movement kernels (nn_move.c), any dtype by element size. */
kiln_status kiln_nn_concat(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined);
kiln_status kiln_nn_gather(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined);
kiln_status kiln_nn_transpose(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined);
kiln_status kiln_nn_tile(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined);
kiln_status kiln_nn_scatternd(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined);

/* Copies the strided source (element size es, base pointer src, element
 * strides sstr of the destination's shape) into the dense row-major dst of
 * shape (rank, dims). Rows with unit stride are memcpy'd, a unit stride on
 * the second-last dim becomes a blocked transpose. */
void kiln_nn_strided_copy(void *dst, const void *src, size_t es, int rank, const int64_t *dims, const int64_t *sstr);

#endif
