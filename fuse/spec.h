/* fuse/spec: the kernel spec — one fused group described once, for every
 * backend: an iteration domain, input accessors (index maps from ir/views),
 * an expression DAG, output stores, optional reductions and an optional
 * anchor (Conv, MatMul, Gemm) with its epilogue and pooling. Plus a text
 * printer (KILN_DUMP) and a scalar evaluator, the oracle for backends. */
#ifndef KILN_FUSE_SPEC_H
#define KILN_FUSE_SPEC_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/graph.h"
#include "ir/shape.h"
#include "ir/views.h"

/* Expression op codes. Leaves first; then the ops, mirroring the ONNX
 * elementwise operators (reference/ops_elementwise.c gives the semantics). */
typedef enum kiln_fuse_op {
  KILN_FUSE_LOAD = 0, /* ref: accessor index */
  KILN_FUSE_CONST,    /* f[0] (float types) or i (integer types) */
  KILN_FUSE_ANCHOR,   /* the anchor's output at this element */
  KILN_FUSE_REDUCE,   /* ref: reduction index; the result for this element's reduced index */
  /* unary; f[] holds the attributes (alpha, beta, gamma as ONNX names them) */
  KILN_FUSE_ABS, KILN_FUSE_NEG, KILN_FUSE_SQRT, KILN_FUSE_EXP, KILN_FUSE_LOG, KILN_FUSE_RECIP, KILN_FUSE_FLOOR,
  KILN_FUSE_CEIL, KILN_FUSE_RELU, KILN_FUSE_LEAKY_RELU, KILN_FUSE_ELU, KILN_FUSE_SELU, KILN_FUSE_SIGMOID,
  KILN_FUSE_HARD_SIGMOID, KILN_FUSE_TANH, KILN_FUSE_SOFTPLUS, KILN_FUSE_ERF, KILN_FUSE_SIGN, KILN_FUSE_SOFTSIGN,
  KILN_FUSE_HARD_SWISH, KILN_FUSE_THRESHOLDED_RELU, KILN_FUSE_CELU, KILN_FUSE_ROUND, KILN_FUSE_SIN, KILN_FUSE_COS,
  KILN_FUSE_TAN, KILN_FUSE_ASIN, KILN_FUSE_ACOS, KILN_FUSE_ATAN, KILN_FUSE_SINH, KILN_FUSE_COSH, KILN_FUSE_ASINH,
  KILN_FUSE_ACOSH, KILN_FUSE_ATANH, KILN_FUSE_SHRINK, KILN_FUSE_NOT, KILN_FUSE_ISNAN,
  KILN_FUSE_ISINF, /* i: bit 0 detect_negative, bit 1 detect_positive */
  KILN_FUSE_CAST,  /* to the expression's dtype, as ONNX Cast converts */
  KILN_FUSE_COPY,  /* the argument unchanged */
  /* binary (both arguments of one type, except Pow's exponent) */
  KILN_FUSE_ADD, KILN_FUSE_SUB, KILN_FUSE_MUL, KILN_FUSE_DIV, KILN_FUSE_MOD, KILN_FUSE_FMOD, KILN_FUSE_MIN,
  KILN_FUSE_MAX, KILN_FUSE_EQ, KILN_FUSE_GT, KILN_FUSE_LT, KILN_FUSE_GE, KILN_FUSE_LE, KILN_FUSE_AND, KILN_FUSE_OR,
  KILN_FUSE_XOR, KILN_FUSE_SHL, KILN_FUSE_SHR, KILN_FUSE_PRELU, KILN_FUSE_POW,
  /* ternary */
  KILN_FUSE_WHERE, /* cond, then, else */
  KILN_FUSE_CLIP,  /* x, lo, hi: min(max(x, lo), hi), NaN kept */
  KILN_FUSE_OP_COUNT
} kiln_fuse_op;

/* Name ("add") and argument count of an op code; "?" and -1 when unknown. */
const char *kiln_fuse_op_name(kiln_fuse_op op);
int kiln_fuse_op_arity(kiln_fuse_op op);

/* One step of the index map from the iteration domain back to a memory
 * value, kept symbolically; applied in order from the value upward. */
typedef enum kiln_fuse_xform_kind {
  KILN_FUSE_XF_VIEW,    /* view node `node`, output `out` (Transpose, Slice, Reshape, Pad, ...) */
  KILN_FUSE_XF_BCAST,   /* numpy broadcast to dims */
  KILN_FUSE_XF_RESHAPE  /* row-major reshape to dims */
} kiln_fuse_xform_kind;

typedef struct kiln_fuse_xform {
  kiln_fuse_xform_kind kind;
  int node, out;
  int rank;
  kiln_dimx dims[KILN_MAX_RANK];
} kiln_fuse_xform;

#define KILN_FUSE_MAX_CHAIN 16

/* An input accessor: memory value `value` (dense, row-major) read through
 * the chain; `map` (when the spec is bound) takes a flat index of the
 * domain (the reduced one when `reduced`) to a storage element, or to
 * nothing where a Pad's mask hides it: then the element reads `pad`. */
typedef struct kiln_fuse_access {
  int value;
  bool reduced;
  bool own_shape; /* an alias's map: its top is the value's own shape, not the domain */
  int n_xf;
  kiln_fuse_xform xf[KILN_FUSE_MAX_CHAIN];
  double pad;
  kiln_views map;
  int64_t numel; /* elements of the value (bound) */
} kiln_fuse_access;

/* One expression: args are earlier expressions (the array is in
 * topological order). A `reduced` expression depends only on the indices
 * of the domain's kept axes (it is evaluated once per reduced element). */
typedef struct kiln_fuse_expr {
  kiln_fuse_op op;
  kiln_dtype dtype; /* the type the result is rounded to (F64: kept in double) */
  bool reduced;
  int n_args;
  int args[3];
  int ref;      /* LOAD: accessor; REDUCE: reduction */
  double f[3];  /* attributes; CONST's value (float types) */
  int64_t i;    /* CONST's value (integer types); ISINF flags */
  int node;     /* the graph node it comes from, -1 when none */
} kiln_fuse_expr;

typedef enum kiln_fuse_red_kind {
  KILN_FUSE_RED_SUM = 0,
  KILN_FUSE_RED_MAX,
  KILN_FUSE_RED_MIN,
  KILN_FUSE_RED_MEAN,
  KILN_FUSE_RED_PROD
} kiln_fuse_red_kind;

/* A reduction of expression `arg` (over the full domain: its prologue)
 * over the spec's reduced axes. Later reductions may read earlier ones
 * (Softmax: max, then the sum of exp(x - max)). */
typedef struct kiln_fuse_reduce {
  kiln_fuse_red_kind kind;
  int arg;
  kiln_dtype dtype;
  int node;
} kiln_fuse_reduce;

/* A store: expression `expr` over the domain (the reduced domain when
 * `reduced`) written to memory value `value` through `map` (bound: flat
 * domain index -> element of the value; row-major, so far always the
 * identity). `pool` marks the store of the pooling's result: expr is the
 * pooled argument, laid out by map, and the pool node makes the value. */
typedef struct kiln_fuse_store {
  int value;
  int expr;
  bool reduced;
  bool pool;
  int rank; /* bound: the value's shape (for a pool store: the pooled input's) */
  int64_t shape[KILN_MAX_RANK];
  kiln_views map;
} kiln_fuse_store;

/* A value the group writes that is only a view of memory: no kernel store;
 * the executor binds it as a view through accessor `access`'s map, or copies
 * it when `copy` (graph outputs need their own storage). */
typedef struct kiln_fuse_alias {
  int value;
  int access;
  bool copy;
} kiln_fuse_alias;

typedef enum kiln_fuse_group_kind {
  KILN_FUSE_G_NONE = 0,  /* not a group (a schedule step that covers no node) */
  KILN_FUSE_G_VIEW,      /* views only: nothing to launch */
  KILN_FUSE_G_ELEMWISE,  /* elementwise / broadcast / injective chain */
  KILN_FUSE_G_REDUCE,    /* reductions with prologue and epilogue */
  KILN_FUSE_G_ANCHOR,    /* anchor + epilogue (+ pooling) */
  KILN_FUSE_G_OPAQUE     /* one node run as it is */
} kiln_fuse_group_kind;

/* "view", "elementwise", "reduce", "anchor", "opaque" or "none". */
const char *kiln_fuse_group_kind_name(kiln_fuse_group_kind k);

typedef struct kiln_fuse_spec {
  kiln_fuse_group_kind kind;
  const kiln_graph *g;    /* borrowed */
  const kiln_shapes *sh;  /* borrowed */
  int n_nodes;
  int *nodes; /* the graph nodes covered, in execution order */
  /* iteration domain (symbolic) and reduced axes */
  int rank;
  kiln_dimx dims[KILN_MAX_RANK];
  bool red_axes[KILN_MAX_RANK];
  int n_access, n_expr, n_red, n_store, n_alias;
  kiln_fuse_access *access;
  kiln_fuse_expr *expr;
  kiln_fuse_reduce *red;
  kiln_fuse_store *store;
  kiln_fuse_alias *alias;
  int anchor;      /* the anchor node, -1 when none */
  int pool;        /* the pooling node, -1 when none */
  int opaque;      /* KILN_FUSE_G_OPAQUE: the node */
  /* concrete sizes, valid when bound */
  bool bound;
  uint64_t bind_gen; /* counts kiln_fuse_spec_bind calls: a binding's maps stay as they are until it changes */
  int64_t shape[KILN_MAX_RANK];
  int64_t red_shape[KILN_MAX_RANK]; /* shape with the reduced axes at 1 */
  int64_t numel, red_numel;
  /* observers (ir/observe.h): per value a node of the group computes over
     the full domain (not reduced, not a view of memory), the expression
     holding it at each element; views of computed values share their
     input's expression: an engine checks that the value has the domain's
     element count (a Slice/Expand of a computed value has not); a view of
     memory has the load that reads it through the view as its last step */
  int n_vexpr;
  struct kiln_fuse_vexpr {
    int value, expr;
  } *vexpr;
} kiln_fuse_spec;

/* Whether a node of the group reads or writes a float64 value of the graph
 * (a model that casts to double asks for double's range and precision):
 * the backends that keep the spec's own float64 intermediates in float32
 * (the cpu tiles; OpenCL when no buffer is float64) must not do so here. */
bool kiln_fuse_spec_f64_values(const kiln_fuse_spec *sp);

/* Makes the concrete maps and sizes at symbol values vals (indexed by
 * symbol id, KILN_DIM_UNSET for none; NULL: only values the model fixes).
 * On failure (an unknown dim, a map deeper than KILN_VIEWS_MAX_DEPTH, a map
 * that does not cover the domain) bound is false and the message says why. */
kiln_status kiln_fuse_spec_bind(kiln_fuse_spec *sp, const int64_t *vals, int n_vals);

/* Frees the spec and everything it owns (not g, sh). NULL is fine. */
void kiln_fuse_spec_free(kiln_fuse_spec *sp);

/* The spec as text, one item a line (domain, accessors with their maps,
 * expressions, reductions, stores, aliases): a kiln_malloc'd string in
 * *out, to kiln_free. */
kiln_status kiln_fuse_spec_print(const kiln_fuse_spec *sp, char **out);

/* Runs one graph node (anchors, pooling, opaque groups), with the
 * signature of kiln_rewrite_eval_fn: out[k] empty on entry, filled (owned,
 * dense) for each output the node has. */
typedef kiln_status (*kiln_fuse_node_fn)(void *ctx, const kiln_graph *g, const kiln_node *n,
                                         const kiln_tensor *const *in, kiln_tensor *out);

typedef struct kiln_fuse_eval_hooks {
  kiln_fuse_node_fn run_node; /* may be NULL when the spec has no anchor, pool or opaque node */
  void *ctx;
} kiln_fuse_eval_hooks;

/* Evaluates a bound spec element by element in double precision, rounding
 * each expression to its dtype as the unfused ops would store it (integers
 * in 64-bit arithmetic), so that it matches the reference backend: the
 * oracle for backends' printers. vals (g->n_values entries) holds a dense
 * tensor for every value the spec reads (accessors, and the inputs of its
 * anchor, pool or opaque node); on success every store and alias value gets
 * an owned dense tensor in vals[v] (a previous one is released). Fails on an
 * unbound spec, a missing input, integer division by zero, or a hook
 * failure; values already written stay. */
kiln_status kiln_fuse_eval_spec(const kiln_fuse_spec *sp, kiln_tensor *vals, const kiln_fuse_eval_hooks *hooks);

#endif
