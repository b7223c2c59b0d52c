/* ir/shape: types and symbolic shapes of every value of a graph. Dimensions
 * are kiln_dimx expressions (ir/symdim) over the graph inputs' dim_params;
 * small integer tensors that compute shapes (Shape -> Gather -> Concat ->
 * Reshape) also carry their values as expressions, so such chains stay
 * exact. Inference runs forward over the nodes, then unifies with every shape
 * the model declares (graph outputs, value_info), and repeats while that
 * teaches it new symbol values (Caffe2's forward/backward bound inference). */
#ifndef KILN_IR_SHAPE_H
#define KILN_IR_SHAPE_H
#include <stdbool.h>

#include "ir/graph.h"
#include "ir/symdim.h"

/* Longest integer tensor whose values are tracked symbolically. */
#define KILN_SHAPE_MAX_VALS 64

typedef struct kiln_vshape {
  kiln_dtype dtype; /* KILN_UNDEFINED until inferred */
  int rank;         /* -1 until inferred */
  kiln_dimx dims[KILN_MAX_RANK];
  /* For 0-D/1-D integer tensors of at most KILN_SHAPE_MAX_VALS elements:
   * the elements as expressions (nvals >= 0), else nvals = -1. */
  int nvals;
  kiln_dimx vals[KILN_SHAPE_MAX_VALS];
  /* The value's data when it is a constant known at compile time
   * (initializer, Constant, or folded); not owned. */
  const kiln_tensor *konst;
  /* The shape depends on run-time data (NonZero, Unique, a shape read from
   * a non-constant tensor…): its dims hold fresh symbols without bounds. */
  bool data_dependent;
} kiln_vshape;

typedef struct kiln_shapes {
  kiln_symtab *tab; /* owned */
  int n;            /* == graph->n_values */
  kiln_vshape *v;
} kiln_shapes;

/* Infers every value's dtype and shape. Graph inputs take their declared
 * shapes: a dim_param becomes a symbol of that name (with its bound when
 * the model's metadata_props has "kiln.bound.<name>"), an unnamed unknown
 * dim a fresh symbol "<input>:<d>". Initializers are constants. Fails with
 * KILN_E_MISMATCH_SHAPE / _DTYPE naming tensor, node and dim on a conflict,
 * KILN_E_UNSUPPORTED_OP for an op without a shape function. */
kiln_status kiln_shapes_infer(const kiln_graph *g, kiln_shapes **out);
void kiln_shapes_free(kiln_shapes *s);

/* ---- the per-op interface (ir/shape_ops_*.c) ---- */

typedef struct kiln_shape_call {
  const kiln_graph *graph;
  const kiln_node *node;
  int opset;
  kiln_symtab *tab;
  int n_in;
  const kiln_vshape *const *in; /* NULL for omitted optional inputs */
  int n_out;
  kiln_vshape *out;             /* preset: rank -1, nvals -1; fill dtype, rank, dims */
} kiln_shape_call;

typedef kiln_status (*kiln_shape_fn)(kiln_shape_call *c);

typedef struct kiln_shape_def {
  const char *op_type;
  kiln_shape_fn fn;
} kiln_shape_def;

/* Tables, one per family, terminated by {NULL, NULL}. */
extern const kiln_shape_def kiln_shape_ops_elementwise[];
extern const kiln_shape_def kiln_shape_ops_shape[];
extern const kiln_shape_def kiln_shape_ops_nn[];
extern const kiln_shape_def kiln_shape_ops_nn_mm[];
extern const kiln_shape_def kiln_shape_ops_nn_extra[];
extern const kiln_shape_def kiln_shape_ops_reduce[];
extern const kiln_shape_def kiln_shape_ops_signal[]; /* DFT, STFT, MelWeightMatrix, TfIdfVectorizer */
extern const kiln_shape_def kiln_shape_ops_kiln[]; /* domain KILN_DOMAIN (ir/graph.h) */
extern const kiln_shape_def kiln_shape_ops_train[]; /* domain KILN_DOMAIN_TRAINING: Adagrad, Adam, Momentum */

/* The shape function of an op of the default domain, of KILN_DOMAIN or of KILN_DOMAIN_TRAINING, or NULL. */
const kiln_shape_def *kiln_shape_find(const char *domain, const char *op_type);

/* ---- helpers for shape functions ---- */

/* out = in (dtype, rank, dims; not values). */
void kiln_shape_copy(kiln_vshape *out, const kiln_vshape *in);
/* Sets out's dtype and rank with constant dims. */
kiln_status kiln_shape_set(kiln_shape_call *c, kiln_vshape *out, kiln_dtype dt, int rank, const int64_t *dims);
/* Numpy broadcast of the given inputs' shapes into out->rank/dims. */
kiln_status kiln_shape_broadcast(kiln_shape_call *c, int n, const kiln_vshape *const *ins, kiln_vshape *out);
/* Requires input i (present) and returns it, or fails. */
kiln_status kiln_shape_in(const kiln_shape_call *c, int i, const kiln_vshape **out);
/* The integer values of input i when known (constant, or tracked values
 * that are all constants): *n values into vals (at most max). Returns false
 * when they are not known at compile time. */
bool kiln_shape_const_ints(const kiln_shape_call *c, int i, int64_t *vals, int max, int *n);
/* A fresh data-dependent symbol (no bound) for output k, dim d. */
kiln_status kiln_shape_fresh(kiln_shape_call *c, int k, int d, kiln_dimx *out);
/* Unifies a and b as dim d of input/output `what`, adding context. */
kiln_status kiln_shape_unify(kiln_shape_call *c, const char *what, int d, kiln_dimx a, kiln_dimx b, kiln_dimx *out);

#endif
