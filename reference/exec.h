/* reference/exec: runs a kiln_graph as imported, node by node, with the
 * scalar kernels of reference/ops_*.c. No rewrites, no views, no plan:
 * every intermediate is a fresh dense tensor, freed after its last use.
 * Shapes are computed from the actual inputs at each run, so shape-setting
 * inputs fed at run time need no special handling here. */
#ifndef KILN_REFERENCE_EXEC_H
#define KILN_REFERENCE_EXEC_H
#include "ir/graph.h"
#include "ir/shape.h"

/* Checks every node of g against the reference op tables. */
kiln_status kiln_ref_check_graph(const kiln_graph *g);
/* Checks each node's input 0 against its operator's accepted data types with
 * the types shape inference gave the values (sh, ir/shape.h): what kiln_ref_check_graph checks of declared types, and the
 * reference kernels of every value at run time — for the backends whose
 * fused kernels never call those (an Add of two bools is refused at init,
 * not computed). */
kiln_status kiln_ref_check_types(const kiln_graph *g, const kiln_shapes *sh);

/* Runs g. bound[v] (indexed by value) gives the tensor for each graph input
 * that has no initializer; other entries are NULL. On success outs[i]
 * (g->n_outputs entries, empty on entry) hold owned results. */
kiln_status kiln_ref_run(const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs);

/* The same, reporting every node output to obs (ir/observe.h) right after
 * the node computed it; obs may be NULL, and must describe g. kiln_ref_run
 * observes with kiln_obs_run_current() when that describes g (the plugin
 * sets it for the run), so the reference engine needs no other wiring. */
struct kiln_obs;
kiln_status kiln_ref_run_observed(const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs,
                                  struct kiln_obs *obs);

/* Runs one node n of g on the reference kernel, with the signature of
 * kiln_rewrite_eval_fn (ctx unused): out[k] empty on entry, filled for each
 * output the node has. What constant folding evaluates with. */
kiln_status kiln_ref_eval_node(void *ctx, const kiln_graph *g, const kiln_node *n, const kiln_tensor *const *in,
                               kiln_tensor *out);

#endif
