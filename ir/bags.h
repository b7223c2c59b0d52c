/* ir/bags: the embedding-bag pattern of a graph (the cpu plan's, and the
 * OpenCL engine's rewrite, kiln_cl_rewrite) —
 * Gather(table, indices [B, L], axis 0) → Mul by a float mask [B, L, 1] →
 * ReduceSum over axis 1 (keepdims 0) — rewritten into one
 * SparseLengthsWeightedSum of kiln's domain (ai.kiln, docs/KILN_DOMAIN.md)
 * over the flattened indices and mask, bags of L, with negative_indices = 1
 * (Gather's wrap and its error message): the [B, L, D] rows are never
 * materialised (cpu_fallback/NN.md, "Box decoding and embedding bags"). */
#ifndef KILN_IR_BAGS_H
#define KILN_IR_BAGS_H

#include "ir/graph.h"

/* Rewrites every such pattern of g in place (the Gather and Mul outputs
 * read by nothing else, float32 table [R, D] and mask, static B and L).
 * *count (optional) gets the number rewritten. Fails only when memory runs
 * out (g is then unusable). */
kiln_status kiln_embedding_bags(kiln_graph *g, int *count);

#endif
