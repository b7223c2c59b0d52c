/* cpu_fallback/kernels: kiln's own CPU kernels, by operator (prefix
 * kiln_cpu_). The plan executor (cpu_fallback/plan.c) runs a node with the
 * kernel found here when there is one and it accepts the call, else with
 * the reference backend's scalar kernel. Each family file (gemm.c, conv.c,
 * nn.c, ...) exports one table; kernels.c joins them.
 *
 * Calling convention: exactly the reference kernels' kiln_op_call
 * (reference/ops.h) — inputs may be read-only strided views (t->strided),
 * outputs are empty tensors or arena reservations (data preset, capacity,
 * keep) that the kernel fills with kiln_tensor_alloc. A kernel that does
 * not handle a call (a dtype, a strided input, an attribute value it has no
 * fast path for) sets *declined = true and returns KILN_OK without having
 * touched any output or set an error: the reference kernel then runs. A
 * kernel that handles the call gives the reference kernel's result (within
 * the float tolerance of reassociated sums; bit-exact where stated) and the
 * same errors, with a message.
 *
 * Instruction sets: every kernel with an AVX2/FMA version has a portable
 * scalar twin, chosen by kiln_vm_isa_active() (cpu_fallback/vmath.h:
 * cpuid + OS state, KILN_CPU_ISA=base|avx2 forces one). */
#ifndef KILN_CPU_FALLBACK_KERNELS_H
#define KILN_CPU_FALLBACK_KERNELS_H
#include <stdbool.h>
#include <stdint.h>

#include "reference/ops.h"

/* An elementwise epilogue a fused group hands to an anchor kernel (Conv,
 * MatMul, Gemm): the anchor calls apply() on each block of its output while
 * the block is still in cache. y holds elements [start, start + n) of the
 * anchor's output in row-major (flat) order, just computed; apply rewrites
 * them in place into the group's result at the same positions. Calls may
 * come from several threads at once for disjoint ranges. */
typedef struct kiln_cpu_epilogue {
  void (*apply)(void *ctx, int64_t start, int64_t n, float *y);
  void *ctx;
  /* clamp: the epilogue is exactly y = clip(y, lo, hi) in place with the
   * tile ops' rules (v < lo ? lo : v, then v > hi ? hi : v; NaN stays;
   * Relu is lo 0, hi +inf). A kernel may then clamp its blocks itself (in
   * the pass that adds the bias, say) instead of calling apply: the same
   * values. kiln_cpu_clamp does it. */
  bool clamp;
  float lo, hi;
  /* col_bias: the epilogue is exactly y[f] = y[f] + col_bias[f % col_bias_n]
   * (a MatMul's bias row over the last dim; kiln_tile_col_bias). A GEMM
   * whose rows are col_bias_n wide may add it in its store instead of
   * calling apply: the same values. NULL: not so. */
  const float *col_bias;
  int64_t col_bias_n;
  /* scaled: the epilogue is exactly y[f] = y[f] * scale (the attention
   * scores' 1/sqrt(d) as a Mul; kiln_tile_scale). A GEMM may multiply in
   * its store instead of calling apply: the same values. */
  bool scaled;
  float scale;
  /* done: where set, a kernel may call it once a block's values are final
   * (after apply, or its own clamp, bias or scale), with the same block,
   * from the thread that made it (plan.c: a pooling after the anchor pools
   * the rows the block completes, nn.h kiln_nn_pool_bands). A kernel that
   * never calls it is correct too. */
  void (*done)(void *ctx, int64_t start, int64_t n, float *y);
  void *done_ctx;
} kiln_cpu_epilogue;

/* ep->done for a finished block, where ep and its done are set. */
static inline void kiln_cpu_ep_done(const kiln_cpu_epilogue *ep, int64_t start, int64_t n, float *y) {
  if (ep && ep->done && n > 0) ep->done(ep->done_ctx, start, n, y);
}

/* y[i] = clip(y[i] + *bias, lo, hi) for i < n, with the rules above
 * (bias NULL: the clip alone, no addition). */
void kiln_cpu_clamp(float *y, int64_t n, const float *bias, float lo, float hi);

/* y[i] = clip(y[i] + r[i], lo, hi) for i < n, the same rules (a residual
 * branch added in the epilogue: kiln_tile_residual). */
void kiln_cpu_residual(float *y, const float *r, int64_t n, float lo, float hi);

/* For tests and benches (conv.c, GEMM_CONV.md "Direct convolution"): -1 the
 * default rule, 0 never the direct path, 1 the direct path wherever it
 * applies (AVX-512 kernel, where usable), 2 the same with its scalar twin
 * (any setting). Not thread-safe against running kernels. */
void kiln_conv_direct_force(int mode);
/* For tests (conv.c, GEMM_CONV.md "Winograd F(2x2, 3x3)"), the values of
 * KILN_CONV_WINO: 0 never Winograd, 1 (the default; -1 the same) where a
 * plan made U and C, M >= 16, 2 wherever it applies (U made per call
 * without a plan's pack), 3 the same with the scalar twins (transforms
 * and micro-kernel). Not thread-safe against running kernels. */
void kiln_conv_wino_force(int mode);
/* Whether Winograd may run (not forced or set off): prepack.c makes U. */
bool kiln_conv_wino_on(void);
/* Tests only: false sends small stride-1 depthwise planes through the
 * padded-plane rows kernel instead of kiln_dw_plane (true: the default). */
void kiln_conv_dw_plane_enable(bool on);
/* Tests only: stride-2 depthwise in place (dws2.h) -1 where it applies
 * (the default), 0 never (the padded phase planes), 2 with its twin. */
void kiln_conv_dw_s2_force(int mode);
/* Tests only: the 3x3 stride-1 'same' depthwise in place (dws1.h) -1 where
 * it applies (the default), 0 never (the padded plane), 2 with its twin. */
void kiln_conv_dw_s1_force(int mode);
/* Tests only: the lanes-over-channels pointwise path (pwt.h) -1 by the
 * default rule (pwt.h kiln_pwt_plane_wanted; KILN_CONV_PWT=0|1 sets 0 or 1
 * for benches), 0 never, 1 on every plane where W^T was packed, 2 the same
 * with the scalar twin. Set before a plan is made it also says which 1x1
 * Convs get W^T (kiln_cpu_conv_prepack: -1 those the rule takes, 0 none,
 * 1 and 2 all). */
void kiln_conv_pwt_force(int mode);

/* A kernel: see the calling convention above. ep is NULL except for
 * kernels whose table entry says takes_epilogue. */
typedef kiln_status (*kiln_cpu_kernel_fn)(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined);

typedef struct kiln_cpu_kernel_def {
  const char *op_type; /* an operator of the default ONNX domain, or of kiln's own domain (domain below) */
  const char *domain;  /* NULL: the default ONNX domain ("" or "ai.onnx") */
  kiln_cpu_kernel_fn run;
  bool takes_epilogue; /* run() applies a kiln_cpu_epilogue on its output blocks */
} kiln_cpu_kernel_def;

/* The family tables, each terminated by an entry with op_type NULL. */
extern const kiln_cpu_kernel_def kiln_cpu_kernels_gemm[]; /* gemm.c: MatMul, Gemm (CBLAS) */
extern const kiln_cpu_kernel_def kiln_cpu_kernels_conv[]; /* conv.c: Conv (im2col + GEMM, depthwise, 1x1) */
extern const kiln_cpu_kernel_def kiln_cpu_kernels_nn[];   /* nn.c: pooling, softmax, normalisation, reductions */
extern const kiln_cpu_kernel_def kiln_cpu_kernels_ext[];  /* sls.c: kiln's custom domain */

/* The kernel for an operator, or NULL. KILN_CPU_KERNELS=reference makes
 * every lookup NULL (the plan then runs the reference kernels: for
 * comparisons and bisecting). */
const kiln_cpu_kernel_def *kiln_cpu_kernel_find(const char *domain, const char *op_type);

#endif
