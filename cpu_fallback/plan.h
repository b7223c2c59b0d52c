/* cpu_fallback/plan: the cpu backend's plan executor. A graph is rewritten
 * (constant folding, BatchNorm folding, CSE, DCE…), its shapes inferred
 * symbolically, view ops turned into strided aliases that launch nothing,
 * and its intermediates placed in one arena by the static memory planner,
 * sized at the symbols' bounds: any run within the bounds reuses the plan,
 * a run beyond them plans again at the larger bounds. Fusion (fuse/)
 * groups the schedule; each elementwise group (and each anchor + epilogue)
 * runs through the tile executor (cpu_fallback/tile), other nodes through
 * kiln's own kernels (cpu_fallback/kernels) or the reference kernels. */
#ifndef KILN_CPU_FALLBACK_PLAN_H
#define KILN_CPU_FALLBACK_PLAN_H
#include <stdint.h>

#include "ir/graph.h"

typedef struct kiln_cpu_plan kiln_cpu_plan;

/* What the plan did and costs: filled by kiln_cpu_plan_stats. */
typedef struct kiln_cpu_stats {
  int nodes_in, nodes_out;   /* before / after rewrites */
  int views;                 /* nodes run as strided aliases (no kernel) */
  int kernels;               /* nodes run by a kernel */
  int plans;                 /* memory plans made (1 + re-plans beyond bounds) */
  uint64_t arena_bytes;      /* planned peak of the arena */
  uint64_t lower_bound;      /* liveness lower bound */
  uint64_t no_reuse;         /* bytes with one buffer per value */
  int inplace;               /* steps writing output 0 over their dead input 0 */
  int concats_in_place;      /* Concats whose producers write their slices */
  int variants;              /* plans specialised on shape-setting input values (cached) */
  int hazard_edges;          /* read/write ordering edges of the current plan (ir/hazard) */
  int folded, bn_folded, cse, noops, transposes, dead; /* what the rewrites did */
  long materialized;         /* views copied to dense memory, over all runs */
  long own_calls, ref_calls; /* kernel calls run by kiln's own kernels / by the reference kernels, over all runs */
  /* fusion (KILN_FUSION=0: none) and the tile executor (cpu_fallback/tile) */
  int fused_groups;          /* steps running two or more nodes as one tile program */
  int fused_nodes;           /* nodes in those steps */
  int tile_steps;            /* steps run by the tile executor (fused or one elementwise node) */
  long tile_runs;            /* tile steps run, over all runs */
  long epilogues_fused;      /* anchor groups whose kernel applied the epilogue on its blocks, over all runs */
  long epilogues_separate;   /* anchor groups run as the anchor, then one tile pass, over all runs */
  long epilogues_residual;   /* of epilogues_fused: a residual Add (+ Relu / Clip) as a plain loop, over all runs */
  long pool_band_rows;       /* output rows of a MaxPool after an anchor pooled by bands as the anchor finished its
                                blocks (nn.h kiln_nn_pool_bands), over all runs */
  uint64_t weights_borrowed; /* bytes of constant tensors the plan reads from the caller's graph (not copied) */
  uint64_t conv_pack_bytes;  /* Conv weights packed once for the wide SGEMM (prepack.h), besides the weights */
  uint64_t gemm_pack_bytes;  /* MatMul / Gemm B packed once for the wide SGEMM (prepack.h), besides the weights */
  int bags;                  /* Gather -> Mul(mask) -> ReduceSum patterns run as one SparseLengthsWeightedSum (bags.h) */
  long outputs_in_place;     /* graph outputs whose kernel ran in place over its input, that input's storage moved
                                into the caller's output memory (no copy into it), over all runs */
} kiln_cpu_stats;

/* Checks that the cpu backend can run g (every op has a kernel and a shape
 * function, shapes are consistent). */
kiln_status kiln_cpu_check(const kiln_graph *g);
/* Compiles g into a plan. The plan borrows g's constant tensors (weights
 * are not copied): g must outlive the plan, its tensors unchanged, and be
 * the g of every kiln_cpu_run of it. */
kiln_status kiln_cpu_prepare(const kiln_graph *g, kiln_cpu_plan **out);
/* Runs the plan: bound[v] holds the tensor of each graph input of g without
 * an initializer (indexed by g's value numbering, as for kiln_ref_run);
 * outs[i] (g->n_outputs entries) receive owned dense results. */
kiln_status kiln_cpu_run(kiln_cpu_plan *p, const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs);
void kiln_cpu_plan_stats(const kiln_cpu_plan *p, kiln_cpu_stats *st);
void kiln_cpu_release(kiln_cpu_plan *p);

#endif
