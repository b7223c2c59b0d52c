/* ir/rewrite: graph-to-graph rewrites run before scheduling (prefix
 * kiln_rewrite_) — dead code elimination, Identity / inference Dropout
 * removal, common subexpression elimination, Transpose merging,
 * BatchNormalization folding into Conv / Gemm, constant folding — and a
 * driver that runs them to a fixed point on a private copy of the graph.
 *
 * Every pass keeps the graph valid (kiln_edit_check holds after it), keeps
 * the graph inputs and outputs (same names, same order, same values
 * computed) and counts what it did in a kiln_rewrite_stats. A pass that
 * fails has left the graph freeable but possibly half-rewritten: run
 * passes on a copy you can drop (kiln_rewrite_run does). ir/ knows no
 * backend: constant folding evaluates nodes through a callback. A graph
 * with subgraph attributes (If, Loop, Scan) is left as it is: kiln keeps
 * no subgraph bodies, so it cannot tell which outer values they read. */
#ifndef KILN_IR_REWRITE_H
#define KILN_IR_REWRITE_H
#include <stdbool.h>
#include <stddef.h>

#include "ir/graph.h"

/* What the passes did. Counters add up over passes and driver rounds. */
typedef struct kiln_rewrite_stats {
  int dead_nodes;         /* DCE: nodes whose outputs reach no graph output */
  int dead_values;        /* values dropped: orphans and unused initializers */
  int identities;         /* Identity nodes removed */
  int dropouts;           /* inference Dropout nodes removed */
  int cse_nodes;          /* nodes merged into an equal earlier node */
  int cse_consts;         /* constants merged into an equal constant */
  int transposes_merged;  /* Transpose(Transpose(x)) composed into one */
  int transposes_removed; /* Transposes with an identity permutation removed */
  int bn_conv;            /* BatchNormalizations folded into a Conv */
  int bn_gemm;            /* BatchNormalizations folded into a Gemm */
  int folded;             /* nodes evaluated once and replaced by constants */
  /* Nodes with constant inputs left alone in the last folding run: */
  int fold_too_big;       /* the result would exceed the size cap */
  int fold_declined;      /* the evaluator failed or does not know the op */
  int fold_views_kept;    /* its result would be a view of a constant graph
                             output (kiln_rewrite_opts.keep_output_views) */
  int rounds;             /* driver rounds run */
} kiln_rewrite_stats;

/* Evaluates node n of g on constant inputs: in[k] (n->n_in entries) is the
 * tensor of input k, NULL for an omitted optional input; out[k] (n->n_out
 * entries, empty on entry) receives output k, filled with kiln_tensor_alloc
 * (owned, dense) for every k with n->out[k] >= 0. A failure (any status)
 * only means "do not fold this node": the pass clears the message and
 * releases whatever out holds. */
typedef kiln_status (*kiln_rewrite_eval_fn)(void *ctx, const kiln_graph *g, const kiln_node *n,
                                            const kiln_tensor *const *in, kiln_tensor *out);

/* Passes, as bits of kiln_rewrite_opts.passes. */
enum {
  KILN_RW_DCE = 1u << 0,
  KILN_RW_NOOPS = 1u << 1,     /* Identity and inference Dropout */
  KILN_RW_CSE = 1u << 2,
  KILN_RW_TRANSPOSE = 1u << 3,
  KILN_RW_FOLD_BN = 1u << 4,
  KILN_RW_FOLD_CONST = 1u << 5, /* only with an evaluator */
  KILN_RW_ALL = (1u << 6) - 1
};

/* Default cap on one folded tensor's size, and on driver rounds. */
#define KILN_REWRITE_FOLD_MAX_BYTES ((size_t)64 << 20)
#define KILN_REWRITE_MAX_ROUNDS 16

typedef struct kiln_rewrite_opts {
  unsigned passes;            /* KILN_RW_* bits; 0 means KILN_RW_ALL */
  kiln_rewrite_eval_fn eval;  /* NULL: no constant folding */
  void *eval_ctx;
  size_t fold_max_bytes;      /* 0: KILN_REWRITE_FOLD_MAX_BYTES */
  int max_rounds;             /* 0: KILN_REWRITE_MAX_ROUNDS */
  const char *dump_stem;      /* KILN_DUMP stem (ir/dump): the graph after each
                                 pass that changed it is written as
                                 <stem>.1-r<round>-<k>-<pass>.dot; NULL: none */
  bool keep_outputs;          /* observers' "observe all" (ir/observe.h): run no
                                 pass that erases a node output computed at run
                                 time — every pass does (DCE, folding, no-op
                                 removal, CSE, Transpose merging, BN folding),
                                 so the driver only copies and checks the graph */
  bool keep_output_views;     /* folding leaves alone a node whose result would
                                 be a view of a constant graph output (a
                                 Reshape, a strided Slice of it): that output's
                                 data is kept anyway, and a dense copy would
                                 double the bytes a run reads (the cpu plan
                                 reads the view in place) */
  bool share_constants;       /* the result borrows g's dense constant tensors
                                 (kiln_edit_clone_shared) instead of copying
                                 them: g must outlive it, its tensors unchanged */
} kiln_rewrite_opts;

/* The driver. Copies g (its constants too, unless share_constants), runs
 * the selected passes in rounds (DCE, constant
 * folding, Identity/Dropout, Transpose, BN folding, CSE, DCE) until a
 * round changes nothing or max_rounds is reached, checks the result
 * (kiln_edit_check) and hands it over in *out. g is not modified. opts may
 * be NULL (all passes, no folding). st (optional) is zeroed and filled. On
 * failure *out is NULL. */
kiln_status kiln_rewrite_run(const kiln_graph *g, const kiln_rewrite_opts *opts, kiln_graph **out,
                             kiln_rewrite_stats *st);

/* The passes, each in place on a graph the caller owns (st may be NULL).
 * Each drops the values it orphaned (and unused initializers), counted in
 * dead_values; nodes it made dead are left to kiln_rewrite_dce. */

/* Removes every node none of whose outputs reaches a graph output. */
kiln_status kiln_rewrite_dce(kiln_graph *g, kiln_rewrite_stats *st);

/* Removes Identity nodes, and Dropout nodes in inference mode (opset 7+,
 * training_mode absent or a constant false) whose mask output is unused:
 * readers of the output read the input instead. When the output is a
 * graph output, the node producing the input is made to write the graph
 * output directly; when that is impossible (the input is a graph input, a
 * constant or itself a graph output) the node stays. */
kiln_status kiln_rewrite_noops(kiln_graph *g, kiln_rewrite_stats *st);

/* Merges each node into an earlier node with the same op_type, domain,
 * opset, inputs, output arity and attributes (compared by value: ints,
 * floats bit for bit, strings, lists, tensors; graph-valued attributes
 * never compare equal), and each constant into an earlier constant of the
 * same type, shape and bytes. Nodes that may be random (Random*,
 * Multinomial, Bernoulli, a Dropout that may train) and nodes of other
 * domains are kept. */
kiln_status kiln_rewrite_cse(kiln_graph *g, kiln_rewrite_stats *st);

/* Transpose(Transpose(x, p1), p2) becomes Transpose(x, q), q[i] = p1[p2[i]];
 * a Transpose whose permutation is the identity is removed like an
 * Identity. A default (reversing) perm needs the rank: from the declared
 * types, a constant input, or the other perm. */
kiln_status kiln_rewrite_transposes(kiln_graph *g, kiln_rewrite_stats *st);

/* Folds an inference BatchNormalization into the Conv or Gemm (opset 7+)
 * feeding it, when the Conv/Gemm output has no other reader and is no
 * graph output, and the weights, bias and BN parameters are constants of
 * the same type, float32 or float64: with c = scale / sqrt(var + eps),
 * W'[k] = W[k]·c[k] and b' = (b - mean)·c + bias (for Gemm per output
 * column, B scaled along N whatever transB, C' = (beta·C - mean)·c + bias
 * and beta set to 1). Computed in double, stored in the weights' type, as
 * new constants (shared weights are not changed). */
kiln_status kiln_rewrite_fold_bn(kiln_graph *g, kiln_rewrite_stats *st);

/* Replaces each default-domain, deterministic node (as for CSE) whose
 * inputs are all constants (initializers or results of nodes folded
 * before it) by constants computed once with eval. A node is left when eval fails, or
 * when an output would exceed max_bytes (0: the default cap) — checked
 * before evaluating from the declared output types and, for ops that can
 * expand (ConstantOfShape, Expand, Tile, Range, Pad, OneHot, Resize,
 * Upsample, broadcasting elementwise ops, MatMul, Gemm), from their
 * constant inputs, and again on the result. Folded outputs that are graph
 * outputs become constant graph outputs. */
kiln_status kiln_rewrite_fold_constants(kiln_graph *g, kiln_rewrite_eval_fn eval, void *ctx, size_t max_bytes,
                                        kiln_rewrite_stats *st);

/* Formats the non-zero counters of st as "name=N name=N ..." into buf. */
const char *kiln_rewrite_stats_str(const kiln_rewrite_stats *st, char *buf, size_t size);

#endif
