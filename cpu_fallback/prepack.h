/* cpu_fallback/prepack: weight layout changes made once when a plan is
 * compiled, so that kernels do not redo them on every run.
 *
 * kiln_cpu_pretranspose: a Gemm with transB = 1 whose B is a float32
 * initializer read by that node alone (not a graph input or output) gets B
 * stored transposed ([K, N]) and transB = 0. The GEMM then packs B panels
 * with row copies instead of a blocked transpose per call (onnxruntime
 * pre-packs its weights once; kiln packs per call). The result is the same
 * product: kiln's wide SGEMM sums each element in k order either way. g is
 * the plan's own copy of the model (kiln_rewrite_run's), never the
 * caller's. *count (optional) gets the number of nodes changed. */
#ifndef KILN_CPU_FALLBACK_PREPACK_H
#define KILN_CPU_FALLBACK_PREPACK_H
#include "ir/graph.h"
#include "ir/status.h"

kiln_status kiln_cpu_pretranspose(kiln_graph *g, int *count);

#endif
