/* ir/rewrite_impl: what the rewrite passes (ir/rewrite*.c) share — a
 * replacement map for rewiring many uses in one sweep, the "this node just
 * forwards its input" step, and the end-of-pass cleanup. Not public. */
#ifndef KILN_IR_REWRITE_IMPL_H
#define KILN_IR_REWRITE_IMPL_H
#include <stdbool.h>

#include "ir/graph.h"
#include "ir/rewrite.h"

/* Per-pass scratch: repl[v] = the value that replaces v, or -1 (a forest
 * whose roots are the surviving values); drop[i] marks nodes to remove;
 * uses[v] = node input slots reading v when the pass started. Values a
 * pass adds (new constants) are never replaced and have no use count. */
typedef struct kiln_rw_pass {
  kiln_graph *g;
  int n_values; /* values when the pass began: repl and uses cover these */
  int *repl;
  bool *drop;
  int *uses;
  kiln_rewrite_stats *st;
} kiln_rw_pass;

/* Allocates the scratch for g (uses counted now). */
kiln_status kiln_rw_begin(kiln_rw_pass *p, kiln_graph *g, kiln_rewrite_stats *st);
/* Resolves every node input through repl, removes the dropped nodes and,
 * when s is KILN_OK, drops orphaned values (counted in dead_values). Frees
 * the scratch. Returns s, or the cleanup's own failure. The graph is valid
 * afterwards whatever s was, as long as the pass only marked nodes whose
 * outputs it had rewired. */
kiln_status kiln_rw_end(kiln_rw_pass *p, kiln_status s);

/* The value v stands for now (v itself when not replaced; -1 stays -1). */
int kiln_rw_find(kiln_rw_pass *p, int v);
/* Resolves node i's inputs through repl, in place. */
void kiln_rw_resolve(kiln_rw_pass *p, int i);

/* Node i computes y equal to x (x already resolved): makes every reader of
 * y read x and marks i for removal. When y is a graph output, the node
 * writing x is made to write y instead (and readers of x read y). Returns
 * false, changing nothing, when that cannot be done: y is a graph output
 * and x is a graph input, a constant or a graph output itself. */
bool kiln_rw_forward(kiln_rw_pass *p, int i, int x, int y);

/* True when some node has a graph-valued attribute (If, Loop, Scan). kiln
 * keeps no subgraph bodies, so it cannot see which outer values they read:
 * every pass leaves such a graph as it is. */
bool kiln_rw_has_subgraphs(const kiln_graph *g);

/* kiln_rewrite_fold_constants; keep_output_views: kiln_rewrite_opts's. */
kiln_status kiln_rw_fold(kiln_graph *g, kiln_rewrite_eval_fn eval, void *ctx, size_t max_bytes, bool keep_output_views,
                         kiln_rewrite_stats *st);

/* True when n is op_type of the default domain. */
bool kiln_rw_is(const kiln_node *n, const char *op_type);
/* True for a Dropout known to run in inference mode (a copy of its input,
 * an all-true mask): opset 7+ and training_mode absent or a constant false. */
bool kiln_rw_dropout_inference(const kiln_graph *g, const kiln_node *n);
/* True for ops whose result may differ between two runs on equal inputs:
 * the Random* ops, Multinomial, Bernoulli, a Dropout that may train. */
bool kiln_rw_maybe_random(const kiln_graph *g, const kiln_node *n);
/* Rank of value v from its constant data or declared type; -1 unknown. */
int kiln_rw_rank(const kiln_graph *g, int v);

#endif
