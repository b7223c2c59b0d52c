/* ir/shape_ops_shape: shape functions (see ir/shape.h) of the shape and
 * data-movement operators: Constant, ConstantOfShape, Shape, Size, Range,
 * Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Expand, Slice, Split,
 * Concat, Gather*, Scatter*, Pad, Tile, DepthToSpace, SpaceToDepth, Trilu,
 * EyeLike, OneHot, Compress, ReverseSequence and NonZero.
 *
 * These ops carry shape computations, so they track the values of small
 * integer tensors (kiln_vshape.vals): Shape produces its input's dims,
 * Gather / Slice / Concat / Split / Squeeze / Unsqueeze / Reshape move them
 * around, and Reshape / Expand / Tile / Pad / ConstantOfShape / Range read
 * them back as dims — so Shape -> Gather -> Unsqueeze -> Concat -> Reshape
 * chains stay exact over symbolic dims.
 *
 * A dim that depends on a value that is neither constant nor tracked is
 * data-dependent: it takes the value the model declares for the output
 * when it declares a number (or a symbol the inputs introduced), else a
 * fresh symbol (kiln_shape_fresh); either way the output is marked
 * data_dependent, so it is checked at run time. The declaration is used
 * here rather than left to the driver's backward pass because symbols
 * stand for dims >= 1, and a declared 0 could not unify with one. Where
 * the output rank itself depends on such a value (a Reshape whose shape
 * input has a symbolic length), the declared rank is used, and the length
 * is unified with it. Outputs of ops with a data-dependent input are
 * data-dependent too. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/shape.h"

/* Constants beyond any tensor's dim: a slice bound at or past them clamps
 * the same as +-infinity. */
#define BIG KILN_MAX_NUMEL

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static kiln_status kconst(kiln_shape_call *c, int64_t v, kiln_dimx *out) { return kiln_dimx_const(c->tab, v, out); }

static bool is_k(const kiln_shape_call *c, kiln_dimx x, int64_t *v) { return kiln_dimx_is_const(c->tab, x, v); }

/* x >= k provably (every symbol >= 1): min(x, k) simplifies to k. */
static bool ge(kiln_shape_call *c, kiln_dimx x, int64_t k) {
  int64_t v;
  if (is_k(c, x, &v)) return v >= k;
  kiln_dimx kx, m;
  if (kconst(c, k, &kx) || kiln_dimx_min(c->tab, x, kx, &m)) {
    kiln_error_clear();
    return false;
  }
  return m == kx;
}

static kiln_status need_rank(int rank) {
  if (rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output rank %d is beyond kiln's maximum of %d", rank, KILN_MAX_RANK);
  return KILN_OK;
}

/* The type the model declares for output k, when it declares a rank. */
static const kiln_type *declared(const kiln_shape_call *c, int k) {
  if (k >= c->node->n_out || c->node->out[k] < 0) return NULL;
  const kiln_type *t = &c->graph->values[c->node->out[k]].type;
  return t->kind != KILN_TYPE_SEQUENCE && t->kind != KILN_TYPE_MAP && t->kind != KILN_TYPE_OPTIONAL &&
                 t->kind != KILN_TYPE_SPARSE && t->rank >= 0
             ? t
             : NULL;
}

/* Dim d of output k (of the given rank) where it depends on data: the
 * declared number or known symbol, else a fresh symbol. Either way the
 * output is marked data-dependent. */
static kiln_status unknown_dim(kiln_shape_call *c, int k, int rank, int d, kiln_dimx *out) {
  const kiln_type *t = declared(c, k);
  c->out[k].data_dependent = true;
  if (t && t->rank == rank && d < rank) {
    if (t->dims[d].value >= 0) return kconst(c, t->dims[d].value, out);
    if (t->dims[d].param && kiln_sym_find(c->tab, t->dims[d].param) >= 0)
      return kiln_dimx_sym(c->tab, t->dims[d].param, out);
  }
  return kiln_shape_fresh(c, k, d, out);
}

/* Every dim of output k unknown. */
static kiln_status all_unknown(kiln_shape_call *c, int k) {
  kiln_vshape *y = &c->out[k];
  for (int d = 0; d < y->rank; d++) {
    kiln_status s = unknown_dim(c, k, y->rank, d, &y->dims[d]);
    if (s) return s;
  }
  return KILN_OK;
}

/* Output k's rank is base + sign * len, where len is the length of an
 * integer list: when len is not a constant, the declared rank decides (and
 * len is unified with what it implies); without one, fails. */
static kiln_status rank_from(kiln_shape_call *c, int k, int base, int sign, kiln_dimx len, const char *what,
                             int *rank) {
  int64_t n;
  if (is_k(c, len, &n)) {
    if (n > KILN_SHAPE_MAX_VALS)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "%s has %lld values, at most %d supported", what, (long long)n,
                       KILN_SHAPE_MAX_VALS);
    *rank = base + sign * (int)n;
    if (*rank < 0) return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has %lld values for rank %d", what, (long long)n, base);
    return need_rank(*rank);
  }
  const kiln_type *t = declared(c, k);
  if (!t) {
    char b[128];
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output rank depends on the length %s of %s, which is not known",
                     kiln_dimx_str(c->tab, len, b, sizeof b), what);
  }
  *rank = t->rank;
  int64_t implied = sign * (int64_t)(t->rank - base);
  kiln_dimx ik, u;
  kiln_status s;
  if (implied >= 1) {
    if ((s = kconst(c, implied, &ik))) return s;
    if (kiln_dim_unify(c->tab, len, ik, &u)) kiln_error_clear(); /* e.g. a data-dependent length */
  }
  return need_rank(*rank);
}

/* An integer list read from an attribute or an input. */
typedef struct ilist {
  bool present;  /* given (attribute present, optional input not omitted) */
  bool known;    /* values known (as expressions) */
  bool consts;   /* known, and all constants (in k) */
  int n;         /* count of values when known */
  kiln_dimx len; /* length as an expression (when present) */
  kiln_dimx v[KILN_SHAPE_MAX_VALS];
  int64_t k[KILN_SHAPE_MAX_VALS];
} ilist;

static kiln_status read_list(kiln_shape_call *c, bool from_attr, const char *name, int idx, ilist *l) {
  kiln_status s;
  memset(l, 0, sizeof *l);
  if (from_attr) {
    const kiln_attr *a = kiln_node_attr(c->node, name);
    if (!a) return KILN_OK;
    if (a->type != KILN_ATTR_INTS && a->type != KILN_ATTR_INT && a->type != KILN_ATTR_UNDEFINED)
      return kiln_fail(KILN_E_MODEL, "attribute '%s' has the wrong type", name);
    size_t n = a->type == KILN_ATTR_INT ? 1 : a->n;
    if (n > KILN_SHAPE_MAX_VALS)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "attribute '%s' has %zu values, at most %d supported", name, n,
                       KILN_SHAPE_MAX_VALS);
    l->present = l->known = l->consts = true;
    l->n = (int)n;
    for (size_t i = 0; i < n; i++) {
      l->k[i] = a->type == KILN_ATTR_INT ? a->i : a->ints[i];
      if ((s = kconst(c, l->k[i], &l->v[i]))) return s;
    }
    return kconst(c, (int64_t)n, &l->len);
  }
  if (idx >= c->n_in || !c->in[idx]) return KILN_OK;
  const kiln_vshape *x = c->in[idx];
  if (x->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d must be 1-D, it has rank %d", idx, x->rank);
  if (x->dtype != KILN_UNDEFINED && !kiln_dtype_is_int(x->dtype))
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d must be integer, it is %s", idx, kiln_dtype_name(x->dtype));
  l->present = true;
  if (x->rank == 0) {
    if ((s = kconst(c, 1, &l->len))) return s;
  } else
    l->len = x->dims[0];
  if (x->nvals >= 0 && x->nvals <= KILN_SHAPE_MAX_VALS) {
    l->known = true;
    l->n = x->nvals;
    memcpy(l->v, x->vals, (size_t)x->nvals * sizeof *l->v);
  } else if (x->konst && x->konst->rank <= 1 && x->konst->numel <= KILN_SHAPE_MAX_VALS &&
             kiln_dtype_is_int(x->konst->dtype)) {
    l->known = true;
    l->n = (int)x->konst->numel;
    for (int i = 0; i < l->n; i++)
      if ((s = kconst(c, kiln_get_i(x->konst, i), &l->v[i]))) return s;
  }
  if (l->known) {
    l->consts = true;
    for (int i = 0; i < l->n && l->consts; i++) l->consts = is_k(c, l->v[i], &l->k[i]);
  }
  return KILN_OK;
}

/* The list's count when known: from its values or a constant length. */
static bool list_count(const kiln_shape_call *c, const ilist *l, int *n) {
  int64_t v;
  if (l->known) return *n = l->n, true;
  if (l->present && is_k(c, l->len, &v) && v >= 0 && v <= KILN_SHAPE_MAX_VALS) return *n = (int)v, true;
  return false;
}

/* y keeps x's values when it holds the same elements in the same order. */
static void keep_vals(kiln_vshape *y, const kiln_vshape *x) {
  if (x->nvals < 0 || y->rank > 1 || !kiln_dtype_is_int(y->dtype)) return;
  y->nvals = x->nvals;
  memcpy(y->vals, x->vals, (size_t)x->nvals * sizeof *y->vals);
}

/* Product of dims[lo, hi). */
static kiln_status prod(kiln_shape_call *c, const kiln_dimx *dims, int lo, int hi, kiln_dimx *out) {
  kiln_status s = kconst(c, 1, out);
  for (int d = lo; d < hi && !s; d++) s = kiln_dimx_mul(c->tab, *out, dims[d], out);
  return s;
}

static kiln_status axis_attr(kiln_shape_call *c, const char *name, int64_t def, int rank, int *ax) {
  const kiln_attr *a = kiln_node_attr(c->node, name);
  if (a && a->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "attribute '%s' has the wrong type", name);
  return kiln_norm_axis(a ? a->i : def, rank, ax);
}

static kiln_status need_int_index(const kiln_vshape *x, const char *what) {
  if (x->dtype != KILN_I32 && x->dtype != KILN_I64)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "%s must be int32 or int64, got %s", what, kiln_dtype_name(x->dtype));
  return KILN_OK;
}

/* Normalises constant axes against rank into ax, failing on a repeat. */
static kiln_status norm_axes(const int64_t *axes, int n, int rank, int *ax) {
  bool seen[KILN_MAX_RANK] = {false};
  for (int i = 0; i < n; i++) {
    kiln_status s = kiln_norm_axis(axes[i], rank, &ax[i]);
    if (s) return s;
    if (seen[ax[i]]) return kiln_fail(KILN_E_MODEL, "axis %lld is repeated", (long long)axes[i]);
    seen[ax[i]] = true;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Constant, ConstantOfShape                                           */
/* ------------------------------------------------------------------ */

static kiln_status constant_fn(kiln_shape_call *c) {
  const kiln_node *n = c->node;
  kiln_vshape *y = &c->out[0];
  const kiln_attr *a;
  kiln_status s;
  if ((a = kiln_node_attr(n, "value"))) {
    const kiln_tensor *t = kiln_attr_tensor(n, "value");
    if (a->type != KILN_ATTR_TENSOR || !t) return kiln_fail(KILN_E_MODEL, "attribute 'value' is not a tensor");
    if (!kiln_dtype_supported(t->dtype))
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "constant of data type %s is not supported",
                       kiln_dtype_name(t->dtype));
    y->dtype = t->dtype;
    y->rank = t->rank;
    for (int d = 0; d < t->rank; d++)
      if ((s = kconst(c, t->dims[d], &y->dims[d]))) return s;
    y->konst = t;
    if (kiln_dtype_is_int(t->dtype) && t->rank <= 1 && t->numel <= KILN_SHAPE_MAX_VALS) {
      for (int64_t i = 0; i < t->numel; i++)
        if ((s = kconst(c, kiln_get_i(t, i), &y->vals[i]))) return s;
      y->nvals = (int)t->numel;
    }
    return KILN_OK;
  }
  if ((a = kiln_node_attr(n, "value_int"))) {
    if (a->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "attribute 'value_int' has the wrong type");
    y->dtype = KILN_I64;
    y->rank = 0;
    y->nvals = 1;
    return kconst(c, a->i, &y->vals[0]);
  }
  if ((a = kiln_node_attr(n, "value_ints"))) {
    if (a->type != KILN_ATTR_INTS && a->type != KILN_ATTR_UNDEFINED)
      return kiln_fail(KILN_E_MODEL, "attribute 'value_ints' has the wrong type");
    int64_t len = a->type == KILN_ATTR_INTS ? (int64_t)a->n : 0;
    if ((s = kiln_shape_set(c, y, KILN_I64, 1, &len))) return s;
    if (len <= KILN_SHAPE_MAX_VALS) {
      for (int64_t i = 0; i < len; i++)
        if ((s = kconst(c, a->ints[i], &y->vals[i]))) return s;
      y->nvals = (int)len;
    }
    return KILN_OK;
  }
  if ((a = kiln_node_attr(n, "value_float"))) {
    if (a->type != KILN_ATTR_FLOAT) return kiln_fail(KILN_E_MODEL, "attribute 'value_float' has the wrong type");
    return kiln_shape_set(c, y, KILN_F32, 0, NULL);
  }
  if ((a = kiln_node_attr(n, "value_floats"))) {
    if (a->type != KILN_ATTR_FLOATS && a->type != KILN_ATTR_UNDEFINED)
      return kiln_fail(KILN_E_MODEL, "attribute 'value_floats' has the wrong type");
    int64_t len = a->type == KILN_ATTR_FLOATS ? (int64_t)a->n : 0;
    return kiln_shape_set(c, y, KILN_F32, 1, &len);
  }
  if (kiln_node_attr(n, "value_string") || kiln_node_attr(n, "value_strings"))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "string constants are not supported");
  if (kiln_node_attr(n, "sparse_value"))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "sparse constants are not supported");
  return kiln_fail(KILN_E_MODEL, "Constant has no value attribute");
}

static kiln_status constantofshape_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  if (x->rank != 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "the shape input must be 1-D, it has rank %d", x->rank);
  const kiln_attr *a = kiln_node_attr(c->node, "value");
  const kiln_tensor *t = a ? kiln_attr_tensor(c->node, "value") : NULL;
  if (a && (a->type != KILN_ATTR_TENSOR || !t || t->numel != 1))
    return kiln_fail(KILN_E_MODEL, "attribute 'value' must be a tensor of one element");
  kiln_vshape *y = &c->out[0];
  y->dtype = t ? t->dtype : KILN_F32;
  ilist l;
  if ((s = read_list(c, false, NULL, 0, &l))) return s;
  if (l.known) {
    if ((s = need_rank(l.n))) return s;
    y->rank = l.n;
    for (int d = 0; d < l.n; d++) {
      int64_t v;
      if (is_k(c, l.v[d], &v) && v < 0)
        return kiln_fail(KILN_E_MODEL, "shape value %lld is negative", (long long)v);
      y->dims[d] = l.v[d];
    }
  } else {
    if ((s = rank_from(c, 0, 0, 1, l.len, "the shape input", &y->rank))) return s;
    if ((s = all_unknown(c, 0))) return s;
  }
  /* values: a short integer vector of one repeated value */
  int64_t len = 1;
  if (t && kiln_dtype_is_int(t->dtype) && y->rank <= 1 && (y->rank == 0 || is_k(c, y->dims[0], &len)) &&
      len <= KILN_SHAPE_MAX_VALS) {
    kiln_dimx v;
    if ((s = kconst(c, kiln_get_i(t, 0), &v))) return s;
    for (int64_t i = 0; i < len; i++) y->vals[i] = v;
    y->nvals = (int)len;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Shape, Size, Range                                                  */
/* ------------------------------------------------------------------ */

static kiln_status shape_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  int64_t r = x->rank;
  int64_t start = kiln_attr_int(c->node, "start", 0), end = kiln_attr_int(c->node, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  int64_t len = end > start ? end - start : 0;
  kiln_vshape *y = &c->out[0];
  if ((s = kiln_shape_set(c, y, KILN_I64, 1, &len))) return s;
  for (int64_t i = 0; i < len; i++) y->vals[i] = x->dims[start + i];
  y->nvals = (int)len;
  return KILN_OK;
}

static kiln_status size_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  kiln_vshape *y = &c->out[0];
  if ((s = kiln_shape_set(c, y, KILN_I64, 0, NULL))) return s;
  if (prod(c, x->dims, 0, x->rank, &y->vals[0])) {
    kiln_error_clear(); /* e.g. an overflow: the value stays unknown */
    return KILN_OK;
  }
  y->nvals = 1;
  return KILN_OK;
}

/* The single value of a scalar input, as an expression. */
static bool scalar_val(kiln_shape_call *c, int i, kiln_dimx *v) {
  ilist l;
  if (read_list(c, false, NULL, i, &l)) {
    kiln_error_clear();
    return false;
  }
  if (!l.known || l.n != 1) return false;
  *v = l.v[0];
  return true;
}

static kiln_status range_fn(kiln_shape_call *c) {
  const kiln_vshape *in[3];
  kiln_status s;
  for (int i = 0; i < 3; i++) {
    if ((s = kiln_shape_in(c, i, &in[i]))) return s;
    if (in[i]->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d must be a scalar", i);
    if (in[i]->dtype != in[0]->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has type %s, input 0 has %s", i,
                       kiln_dtype_name(in[i]->dtype), kiln_dtype_name(in[0]->dtype));
  }
  kiln_vshape *y = &c->out[0];
  kiln_dtype dt = in[0]->dtype;
  y->dtype = dt;
  y->rank = 1;
  if (kiln_dtype_is_float(dt)) {
    if (!in[0]->konst || !in[1]->konst || !in[2]->konst) return all_unknown(c, 0);
    double a = kiln_get_f(in[0]->konst, 0), b = kiln_get_f(in[1]->konst, 0), d = kiln_get_f(in[2]->konst, 0);
    if (d == 0 || d != d || a != a || b != b) return kiln_fail(KILN_E_MODEL, "delta is zero or a value is NaN");
    /* as the reference computes it: in the input's precision */
    double cnt = dt == KILN_F64 ? ceil((b - a) / d) : (double)ceilf((float)(((float)b - (float)a) / (float)d));
    if (!(cnt <= (double)KILN_MAX_NUMEL))
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "range of %g elements is too large", cnt);
    return kconst(c, cnt > 0 ? (int64_t)cnt : 0, &y->dims[0]);
  }
  kiln_dimx st, li, de, diff, q, zero;
  int64_t dk;
  if (!scalar_val(c, 0, &st) || !scalar_val(c, 1, &li) || !scalar_val(c, 2, &de) || !is_k(c, de, &dk))
    return all_unknown(c, 0);
  if (dk == 0) return kiln_fail(KILN_E_MODEL, "delta is zero");
  if ((s = kconst(c, 0, &zero))) return s;
  if ((s = kiln_dimx_sub(c->tab, li, st, &diff)) || (s = kiln_dimx_cdiv(c->tab, diff, de, &q)) ||
      (s = kiln_dimx_max(c->tab, q, zero, &y->dims[0])))
    return s;
  int64_t n;
  if (kiln_dtype_is_int(dt) && is_k(c, y->dims[0], &n) && n <= KILN_SHAPE_MAX_VALS) {
    for (int64_t i = 0, step; i < n; i++)
      if (__builtin_mul_overflow(i, dk, &step) || kiln_dimx_add_const(c->tab, st, step, &y->vals[i])) {
        kiln_error_clear(); /* values beyond int64: left untracked */
        return KILN_OK;
      }
    y->nvals = (int)n;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Reshape, Flatten, Transpose, Squeeze, Unsqueeze                     */
/* ------------------------------------------------------------------ */

static kiln_status reshape_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *shp;
  kiln_status s;
  bool old = c->opset < 5; /* Reshape-1: the shape is an attribute */
  if ((s = kiln_shape_in(c, 0, &x)) || (!old && (s = kiln_shape_in(c, 1, &shp)))) return s;
  if (!old && shp->rank != 1)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "the shape input must be 1-D, it has rank %d", shp->rank);
  const kiln_attr *az = kiln_node_attr(c->node, "allowzero");
  if (az && az->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "attribute 'allowzero' has the wrong type");
  bool allowzero = az && az->i != 0;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  ilist l;
  if ((s = read_list(c, old, "shape", 1, &l))) return s;
  if (!l.present) return kiln_fail(KILN_E_MODEL, "the shape is missing");
  if (!l.known) {
    if ((s = rank_from(c, 0, 0, 1, l.len, "the shape input", &y->rank))) return s;
    return all_unknown(c, 0);
  }
  if ((s = need_rank(l.n))) return s;
  int r = y->rank = l.n;
  int infer = -1;
  bool unknown[KILN_MAX_RANK] = {false}, any_unknown = false, has_zero = false;
  for (int i = 0; i < r; i++) {
    int64_t v;
    if (is_k(c, l.v[i], &v)) {
      if (v == -1) {
        if (infer >= 0) return kiln_fail(KILN_E_MODEL, "the shape has more than one -1");
        infer = i;
      } else if (v < -1) {
        return kiln_fail(KILN_E_MODEL, "shape value %lld is invalid", (long long)v);
      } else if (v == 0 && !allowzero) {
        if (i >= x->rank)
          return kiln_fail(KILN_E_MODEL, "shape value 0 at index %d copies a dimension the input (rank %d) lacks", i,
                           x->rank);
        y->dims[i] = x->dims[i];
      } else {
        has_zero |= v == 0;
        y->dims[i] = l.v[i];
      }
    } else if (ge(c, l.v[i], 1) || (allowzero && ge(c, l.v[i], 0))) {
      y->dims[i] = l.v[i];
    } else { /* may be 0 or -1 at run time */
      unknown[i] = any_unknown = true;
    }
  }
  if (allowzero && has_zero && infer >= 0)
    return kiln_fail(KILN_E_MODEL, "the shape has both 0 and -1 with allowzero set");
  kiln_dimx total, known;
  bool counts = !any_unknown && !prod(c, x->dims, 0, x->rank, &total) && !kconst(c, 1, &known);
  if (!counts) kiln_error_clear();
  for (int i = 0; i < r && counts; i++)
    if (i != infer && kiln_dimx_mul(c->tab, known, y->dims[i], &known)) {
      kiln_error_clear();
      counts = false;
    }
  if (infer >= 0) {
    int64_t kt, kk;
    bool done = false;
    if (counts && is_k(c, known, &kk) && kk == 0)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "cannot infer the -1 dimension: the other dims hold no elements");
    if (counts && is_k(c, known, &kk) && is_k(c, total, &kt) && kt % kk)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "cannot reshape %lld elements with %lld per -1 step", (long long)kt,
                       (long long)kk);
    if (counts) {
      if (kiln_dimx_fdiv(c->tab, total, known, &y->dims[infer])) kiln_error_clear();
      else done = true;
    }
    if (!done) unknown[infer] = true;
  } else if (counts) {
    int64_t kt, kk;
    if (is_k(c, known, &kk) && is_k(c, total, &kt) && kt != kk)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "cannot reshape %lld elements to %lld", (long long)kt, (long long)kk);
  }
  for (int i = 0; i < r; i++)
    if (unknown[i] && (s = unknown_dim(c, 0, r, i, &y->dims[i]))) return s;
  keep_vals(y, x);
  return KILN_OK;
}

static kiln_status flatten_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  const kiln_attr *a = kiln_node_attr(c->node, "axis");
  if (a && a->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "attribute 'axis' has the wrong type");
  int64_t axis = a ? a->i : 1;
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis > x->rank)
    return kiln_fail(KILN_E_MODEL, "axis %lld is out of range for rank %d", (long long)(a ? a->i : 1), x->rank);
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = 2;
  if ((s = prod(c, x->dims, 0, (int)axis, &y->dims[0])) || (s = prod(c, x->dims, (int)axis, x->rank, &y->dims[1])))
    return s;
  return KILN_OK;
}

static kiln_status transpose_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  int r = x->rank, perm[KILN_MAX_RANK];
  size_t np;
  const int64_t *p = kiln_attr_ints(c->node, "perm", &np);
  if (p) {
    if (np != (size_t)r) return kiln_fail(KILN_E_MODEL, "perm has %zu entries, the input has rank %d", np, r);
    bool seen[KILN_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) {
      if (p[i] < 0 || p[i] >= r || seen[p[i]])
        return kiln_fail(KILN_E_MODEL, "perm is not a permutation of 0..%d", r - 1);
      seen[p[i]] = true;
      perm[i] = (int)p[i];
    }
  } else {
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  }
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = r;
  for (int i = 0; i < r; i++) y->dims[i] = x->dims[perm[i]];
  keep_vals(y, x);
  return KILN_OK;
}

/* Squeeze / Unsqueeze axes: attribute before opset 13, input after. */
static kiln_status read_axes(kiln_shape_call *c, ilist *l) {
  if (c->opset < 13 && c->n_in > 1 && c->in[1])
    return kiln_fail(KILN_E_MODEL, "axes is an attribute before opset 13, not an input");
  return read_list(c, c->opset < 13, "axes", 1, l);
}

static kiln_status squeeze_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  ilist l;
  if ((s = read_axes(c, &l))) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  bool drop[KILN_MAX_RANK] = {false};
  int n;
  if (!l.present || (list_count(c, &l, &n) && n == 0)) {
    /* every dim of size 1; symbolic dims are taken as not 1 */
    for (int d = 0; d < x->rank; d++) {
      int64_t v;
      drop[d] = is_k(c, x->dims[d], &v) && v == 1;
    }
  } else if (!l.consts) {
    if ((s = rank_from(c, 0, x->rank, -1, l.len, "axes", &y->rank))) return s;
    return all_unknown(c, 0);
  } else {
    int ax[KILN_SHAPE_MAX_VALS];
    if (l.n > x->rank) return kiln_fail(KILN_E_MODEL, "%d axes given for rank %d", l.n, x->rank);
    if ((s = norm_axes(l.k, l.n, x->rank, ax))) return s;
    kiln_dimx one;
    if ((s = kconst(c, 1, &one))) return s;
    for (int i = 0; i < l.n; i++) {
      kiln_dimx u, dim = x->dims[ax[i]];
      int64_t v;
      /* a symbol is recorded as 1; another expression is left to the run-time checks */
      if (dim != one && (s = kiln_shape_unify(c, "squeezed axis", ax[i], dim, one, &u))) {
        if (is_k(c, dim, &v) || kiln_dimx_as_sym(c->tab, dim) >= 0) return s;
        kiln_error_clear();
      }
      drop[ax[i]] = true;
    }
  }
  y->rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (!drop[d]) y->dims[y->rank++] = x->dims[d];
  keep_vals(y, x);
  return KILN_OK;
}

static kiln_status unsqueeze_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  ilist l;
  if ((s = read_axes(c, &l))) return s;
  if (!l.present) return kiln_fail(KILN_E_MODEL, "required axes are missing");
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  if (!l.consts) {
    if ((s = rank_from(c, 0, x->rank, 1, l.len, "axes", &y->rank))) return s;
    return all_unknown(c, 0);
  }
  int r = x->rank + l.n, ax[KILN_SHAPE_MAX_VALS];
  if ((s = need_rank(r))) return s;
  if ((s = norm_axes(l.k, l.n, r, ax))) return s;
  bool ins[KILN_MAX_RANK] = {false};
  for (int i = 0; i < l.n; i++) ins[ax[i]] = true;
  kiln_dimx one;
  if ((s = kconst(c, 1, &one))) return s;
  y->rank = r;
  for (int d = 0, k = 0; d < r; d++) y->dims[d] = ins[d] ? one : x->dims[k++];
  keep_vals(y, x);
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Expand, Tile                                                        */
/* ------------------------------------------------------------------ */

/* The broadcast of dims a and b (Expand's rule: equal, or one is 1). */
static kiln_status expand_dim(kiln_shape_call *c, int d, kiln_dimx a, kiln_dimx b, kiln_dimx *out, bool *known) {
  int64_t ka, kb;
  bool ca = is_k(c, a, &ka), cb = is_k(c, b, &kb);
  *known = true;
  if (ca && ka == 1) return *out = b, KILN_OK;
  if (cb && kb == 1) return *out = a, KILN_OK;
  if (a == b) return *out = a, KILN_OK;
  if (ca && cb)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "dim %d: input size %lld cannot be expanded to %lld", d, (long long)ka,
                     (long long)kb);
  /* one side a constant other than 1: the other must be 1 or equal to it */
  if (ca) return *out = a, KILN_OK;
  if (cb) return *out = b, KILN_OK;
  /* both symbolic, both >= 1: the larger (they are equal or one is 1) */
  if (ge(c, a, 1) && ge(c, b, 1)) {
    if (kiln_dimx_max(c->tab, a, b, out) == KILN_OK) return KILN_OK;
    kiln_error_clear();
  }
  *known = false;
  return KILN_OK;
}

static kiln_status expand_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *shp;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &x)) || (s = kiln_shape_in(c, 1, &shp))) return s;
  if (shp->rank != 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "the shape input must be 1-D, it has rank %d", shp->rank);
  ilist l;
  if ((s = read_list(c, false, NULL, 1, &l))) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  kiln_dimx one;
  if ((s = kconst(c, 1, &one))) return s;
  int n;
  if (!list_count(c, &l, &n)) {
    const kiln_type *t = declared(c, 0);
    if (!t || t->rank < x->rank)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output rank depends on the shape input's length, which is not known");
    n = t->rank;
  }
  int r = n > x->rank ? n : x->rank;
  if ((s = need_rank(r))) return s;
  y->rank = r;
  for (int d = 0; d < r; d++) {
    int i = d - (r - x->rank), j = d - (r - n);
    kiln_dimx a = i >= 0 ? x->dims[i] : one;
    bool known = true;
    if (j < 0) {
      y->dims[d] = a;
    } else if (l.known) {
      int64_t v;
      if (is_k(c, l.v[j], &v) && v < 0) return kiln_fail(KILN_E_MODEL, "shape value %lld is negative", (long long)v);
      if ((s = expand_dim(c, d, a, l.v[j], &y->dims[d], &known))) return s;
    } else { /* an unknown value: the input dim stays when it is a constant other than 1 */
      int64_t v;
      known = is_k(c, a, &v) && v != 1;
      y->dims[d] = a;
    }
    if (!known && (s = unknown_dim(c, 0, r, d, &y->dims[d]))) return s;
  }
  /* values: a vector expanded from one value, or kept */
  int64_t len;
  if (x->nvals >= 0 && kiln_dtype_is_int(y->dtype) && y->rank <= 1) {
    if (y->rank == 0 || (is_k(c, y->dims[0], &len) && len == x->nvals)) {
      keep_vals(y, x);
    } else if (x->nvals == 1 && is_k(c, y->dims[0], &len) && len <= KILN_SHAPE_MAX_VALS) {
      for (int64_t i = 0; i < len; i++) y->vals[i] = x->vals[0];
      y->nvals = (int)len;
    }
  }
  return KILN_OK;
}

static kiln_status tile_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *rep;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &x)) || (s = kiln_shape_in(c, 1, &rep))) return s;
  ilist l;
  if ((s = read_list(c, false, NULL, 1, &l))) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = x->rank;
  int n;
  if (list_count(c, &l, &n) && n != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "repeats has %d values, the input has rank %d", n, x->rank);
  if (!l.known) return all_unknown(c, 0);
  for (int d = 0; d < x->rank; d++) {
    int64_t v;
    if (is_k(c, l.v[d], &v) && v < 0) return kiln_fail(KILN_E_MODEL, "repeats value %lld is negative", (long long)v);
    if ((s = kiln_dimx_mul(c->tab, x->dims[d], l.v[d], &y->dims[d]))) return s;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Slice                                                               */
/* ------------------------------------------------------------------ */

/* A slice bound v (a constant, or an expression >= 0) with a negative
 * value counting from the end, clamped to [lo, hi] where hi is dim D or
 * D - 1 (ONNX's rule). *ok false when v's sign is not known. */
static kiln_status slice_bound(kiln_shape_call *c, kiln_dimx D, kiln_dimx v, int64_t lo, kiln_dimx hi, bool *ok,
                               kiln_dimx *out) {
  int64_t k;
  kiln_dimx kx;
  kiln_status s;
  *ok = true;
  if (is_k(c, v, &k)) {
    if (k <= -BIG) return kconst(c, lo, out);
    if (k >= BIG) return *out = hi, KILN_OK;
    if (k < 0) { /* k + D <= D - 1 <= hi: only the lower clamp */
      kiln_dimx sum;
      if ((s = kiln_dimx_add_const(c->tab, D, k, &sum)) || (s = kconst(c, lo, &kx))) return s;
      return kiln_dimx_max(c->tab, sum, kx, out);
    }
    if ((s = kconst(c, k, &kx))) return s;
    return kiln_dimx_min(c->tab, kx, hi, out);
  }
  if (!ge(c, v, 0)) {
    *ok = false;
    return KILN_OK;
  }
  return kiln_dimx_min(c->tab, v, hi, out);
}

/* Length of a slice of a dim D from start to end by a constant step. */
static kiln_status slice_len(kiln_shape_call *c, kiln_dimx D, kiln_dimx start, kiln_dimx end, int64_t step, bool *ok,
                             kiln_dimx *out) {
  kiln_dimx hi, st, en, diff, q, zero;
  kiln_status s;
  bool ok1, ok2;
  if (step > BIG) step = BIG; /* past any dim: one element either way */
  if (step < -BIG) step = -BIG;
  if (step > 0) hi = D;
  else if ((s = kiln_dimx_add_const(c->tab, D, -1, &hi)))
    return s;
  if ((s = slice_bound(c, D, start, 0, hi, &ok1, &st))) return s;
  if ((s = slice_bound(c, D, end, step > 0 ? 0 : -1, hi, &ok2, &en))) return s;
  *ok = ok1 && ok2;
  if (!*ok) return KILN_OK;
  if ((s = step > 0 ? kiln_dimx_sub(c->tab, en, st, &diff) : kiln_dimx_sub(c->tab, st, en, &diff))) return s;
  kiln_dimx sk;
  if ((s = kconst(c, step > 0 ? step : -step, &sk)) || (s = kiln_dimx_cdiv(c->tab, diff, sk, &q)) ||
      (s = kconst(c, 0, &zero)) || (s = kiln_dimx_max(c->tab, q, zero, out)))
    return s;
  if (!ge(c, D, 1)) s = kiln_dimx_min(c->tab, *out, D, out); /* a dim of 0 slices to nothing */
  return s;
}

static kiln_status slice_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  bool old = c->opset < 10;
  if (old && c->n_in > 1) return kiln_fail(KILN_E_MODEL, "Slice-%d takes one input", c->opset);
  ilist st, en, ax, sp;
  if ((s = read_list(c, old, "starts", 1, &st)) || (s = read_list(c, old, "ends", 2, &en)) ||
      (s = read_list(c, old, "axes", 3, &ax)))
    return s;
  memset(&sp, 0, sizeof sp);
  if (!old && (s = read_list(c, false, NULL, 4, &sp))) return s;
  if (!st.present || !en.present) return kiln_fail(KILN_E_MODEL, "starts and ends are required");
  int r = x->rank;
  kiln_vshape *y = &c->out[0];
  kiln_shape_copy(y, x);
  /* the count of sliced axes */
  int ns = -1, n;
  const ilist *ls[4] = {&st, &en, &ax, &sp};
  for (int i = 0; i < 4; i++) {
    if (!ls[i]->present || !list_count(c, ls[i], &n)) continue;
    if (ns >= 0 && n != ns)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "starts, ends, axes and steps differ in length (%d vs %d)", ns, n);
    ns = n;
  }
  int axes[KILN_SHAPE_MAX_VALS];
  if (ax.present ? !ax.consts : ns < 0) return all_unknown(c, 0); /* which axes is not known */
  if (ax.present) {
    if ((s = norm_axes(ax.k, ax.n, r, axes))) return s;
  } else {
    if (ns > r) return kiln_fail(KILN_E_MISMATCH_SHAPE, "%d starts given for rank %d", ns, r);
    for (int i = 0; i < ns; i++) axes[i] = i;
  }
  bool vals_ok = x->nvals >= 0 && r == 1;
  int64_t vstart = 0, vstep = 1;
  for (int i = 0; i < ns; i++) {
    int a = axes[i];
    int64_t step = 1;
    bool ok = st.known && en.known && (!sp.present || (sp.known && is_k(c, sp.v[i], &step)));
    if (ok && step == 0) return kiln_fail(KILN_E_MODEL, "step of axis %d is 0", a);
    if (ok && (s = slice_len(c, x->dims[a], st.v[i], en.v[i], step, &ok, &y->dims[a]))) return s;
    if (!ok) {
      vals_ok = false;
      if ((s = unknown_dim(c, 0, r, a, &y->dims[a]))) return s;
      continue;
    }
    /* values of a 1-D tensor: its elements start, start + step, … */
    int64_t D = x->nvals, k0, len;
    if (vals_ok && is_k(c, st.v[i], &k0) && is_k(c, y->dims[a], &len)) {
      if (k0 < 0) k0 = k0 <= -BIG ? 0 : k0 + D;
      if (step > 0) k0 = k0 < 0 ? 0 : k0 > D ? D : k0;
      else k0 = k0 < 0 ? 0 : k0 > D - 1 ? D - 1 : k0;
      vstart = k0;
      vstep = step;
    } else {
      vals_ok = false;
    }
  }
  int64_t len = 0;
  if (vals_ok && kiln_dtype_is_int(y->dtype) && is_k(c, y->dims[0], &len) && len <= x->nvals) {
    for (int64_t i = 0; i < len && vals_ok; i++) {
      int64_t j = vstart + i * vstep;
      vals_ok = j >= 0 && j < x->nvals;
      if (vals_ok) y->vals[i] = x->vals[j];
    }
    if (vals_ok) y->nvals = (int)len;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Split, Concat                                                       */
/* ------------------------------------------------------------------ */

static kiln_status split_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  if (c->opset < 13 && c->n_in > 1 && c->in[1])
    return kiln_fail(KILN_E_MODEL, "split is an attribute before opset 13, not an input");
  int ax, no = c->n_out;
  if ((s = axis_attr(c, "axis", 0, x->rank, &ax))) return s;
  ilist l;
  if ((s = read_list(c, c->opset < 13, "split", 1, &l))) return s;
  int n;
  if (l.present && list_count(c, &l, &n) && n == 0) l.present = false; /* an empty split: equal parts */
  kiln_dimx D = x->dims[ax], chunk = D, last = D;
  bool known = true;
  int64_t kd, kp;
  bool dconst = is_k(c, D, &kd);
  if (l.present) {
    if (list_count(c, &l, &n) && n != no)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "split has %d values for %d outputs", n, no);
    if (l.known) {
      int64_t sum = 0;
      for (int k = 0; k < no; k++)
        if (is_k(c, l.v[k], &kp) && kp < 0)
          return kiln_fail(KILN_E_MODEL, "split value %lld is negative", (long long)kp);
      if (l.consts && dconst) {
        for (int k = 0; k < no; k++) {
          if (l.k[k] > kd - sum) /* the values are >= 0: no sum past the axis, none that overflows */
            return kiln_fail(KILN_E_MISMATCH_SHAPE, "split sizes add up to more than the axis size %lld",
                             (long long)kd);
          sum += l.k[k];
        }
        if (sum != kd)
          return kiln_fail(KILN_E_MISMATCH_SHAPE, "split sizes add up to %lld, the axis size is %lld", (long long)sum,
                           (long long)kd);
      }
    } else {
      known = false;
    }
  } else {
    const kiln_attr *na = kiln_node_attr(c->node, "num_outputs");
    if (na && (na->type != KILN_ATTR_INT || na->i != no))
      return kiln_fail(KILN_E_MODEL, "num_outputs %lld does not match the %d outputs", (long long)na->i, no);
    if (no < 1) return kiln_fail(KILN_E_MODEL, "Split has no outputs");
    kiln_dimx kn, used;
    if ((s = kconst(c, no, &kn))) return s;
    if (c->opset >= 18) { /* ceil(D/n) each, the last one the rest */
      if ((s = kiln_dimx_cdiv(c->tab, D, kn, &chunk)) || (s = kiln_dimx_mul_const(c->tab, chunk, no - 1, &used)) ||
          (s = kiln_dimx_sub(c->tab, D, used, &last)))
        return s;
      if (is_k(c, last, &kp) && kp < 0)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "axis size %lld cannot be split into %d outputs", (long long)kd, no);
    } else {
      if (dconst && kd % no)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "axis size %lld cannot be split evenly into %d outputs",
                         (long long)kd, no);
      if ((s = kiln_dimx_fdiv(c->tab, D, kn, &chunk))) return s;
      last = chunk;
    }
  }
  int64_t at = 0;
  bool vals_ok = x->nvals >= 0 && x->rank == 1 && known;
  for (int k = 0; k < no; k++) {
    kiln_vshape *y = &c->out[k];
    kiln_shape_copy(y, x);
    if (known) y->dims[ax] = l.present ? l.v[k] : k == no - 1 ? last : chunk;
    else if ((s = unknown_dim(c, k, y->rank, ax, &y->dims[ax])))
      return s;
    if (vals_ok && is_k(c, y->dims[ax], &kp) && kp >= 0 && at + kp <= x->nvals) {
      memcpy(y->vals, x->vals + at, (size_t)kp * sizeof *y->vals);
      y->nvals = (int)kp;
      at += kp;
    } else {
      vals_ok = false;
    }
  }
  return KILN_OK;
}

static kiln_status concat_fn(kiln_shape_call *c) {
  const kiln_vshape *x0, *x;
  kiln_status s;
  if (c->n_in < 1) return kiln_fail(KILN_E_MODEL, "Concat has no inputs");
  for (int i = 0; i < c->n_in; i++)
    if ((s = kiln_shape_in(c, i, &x))) return s;
  x0 = c->in[0];
  const kiln_attr *a = kiln_node_attr(c->node, "axis");
  if (!a) return kiln_fail(KILN_E_MODEL, "required attribute 'axis' is missing");
  int r = x0->rank, ax;
  if ((s = axis_attr(c, "axis", 0, r, &ax))) return s;
  if (r < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "cannot concatenate scalars");
  kiln_vshape *y = &c->out[0];
  kiln_shape_copy(y, x0);
  bool vals_ok = r == 1 && kiln_dtype_is_int(x0->dtype);
  int nv = 0;
  for (int i = 0; i < c->n_in; i++) {
    x = c->in[i];
    if (x->dtype != x0->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has type %s, input 0 has %s", i, kiln_dtype_name(x->dtype),
                       kiln_dtype_name(x0->dtype));
    if (x->rank != r) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d has rank %d, input 0 has %d", i, x->rank, r);
    for (int d = 0; d < r && i > 0; d++) {
      if (d == ax || x->dims[d] == y->dims[d]) continue;
      char what[48];
      snprintf(what, sizeof what, "input %d", i);
      kiln_dimx u;
      if ((s = kiln_shape_unify(c, what, d, y->dims[d], x->dims[d], &u))) {
        if (!x->data_dependent && !x0->data_dependent) return s;
        kiln_error_clear(); /* data-dependent dims: checked at run time */
        continue;
      }
      y->dims[d] = u;
    }
    if (i > 0 && (s = kiln_dimx_add(c->tab, y->dims[ax], x->dims[ax], &y->dims[ax]))) return s;
    if (vals_ok && x->nvals >= 0 && nv + x->nvals <= KILN_SHAPE_MAX_VALS) {
      memcpy(y->vals + nv, x->vals, (size_t)x->nvals * sizeof *y->vals);
      nv += x->nvals;
    } else {
      vals_ok = false;
    }
  }
  if (vals_ok) y->nvals = nv;
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Gather, GatherElements, GatherND, Scatter*                          */
/* ------------------------------------------------------------------ */

static kiln_status gather_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *ind;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &x)) || (s = kiln_shape_in(c, 1, &ind))) return s;
  if ((s = need_int_index(ind, "indices"))) return s;
  int ax;
  if ((s = axis_attr(c, "axis", 0, x->rank, &ax))) return s;
  int r = x->rank - 1 + ind->rank, k = 0;
  if ((s = need_rank(r))) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = r;
  for (int d = 0; d < ax; d++) y->dims[k++] = x->dims[d];
  for (int d = 0; d < ind->rank; d++) y->dims[k++] = ind->dims[d];
  for (int d = ax + 1; d < x->rank; d++) y->dims[k++] = x->dims[d];
  /* values: elements of a tracked vector at constant indices */
  int64_t idx[KILN_SHAPE_MAX_VALS];
  int n;
  if (x->nvals >= 0 && x->rank == 1 && ind->rank <= 1 && kiln_shape_const_ints(c, 1, idx, KILN_SHAPE_MAX_VALS, &n)) {
    for (int i = 0; i < n; i++) {
      if (idx[i] < -x->nvals || idx[i] >= x->nvals)
        return kiln_fail(KILN_E_MODEL, "index %lld is out of range for a dimension of size %d", (long long)idx[i],
                         x->nvals);
      y->vals[i] = x->vals[idx[i] < 0 ? idx[i] + x->nvals : idx[i]];
    }
    y->nvals = n;
  }
  return KILN_OK;
}

static kiln_status gather_elements_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *ind;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &x)) || (s = kiln_shape_in(c, 1, &ind))) return s;
  if ((s = need_int_index(ind, "indices"))) return s;
  int ax;
  if ((s = axis_attr(c, "axis", 0, x->rank, &ax))) return s;
  if (ind->rank != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "indices have rank %d, data rank %d", ind->rank, x->rank);
  kiln_shape_copy(&c->out[0], ind);
  c->out[0].dtype = x->dtype;
  return KILN_OK;
}

static kiln_status gathernd_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *ind;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &x)) || (s = kiln_shape_in(c, 1, &ind))) return s;
  if ((s = need_int_index(ind, "indices"))) return s;
  const kiln_attr *ba = kiln_node_attr(c->node, "batch_dims");
  if (ba && ba->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "attribute 'batch_dims' has the wrong type");
  int64_t b = ba ? ba->i : 0;
  int r = x->rank, q = ind->rank;
  if (r < 1 || q < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "data and indices must have rank >= 1");
  if (b < 0 || b >= q || b >= r)
    return kiln_fail(KILN_E_MODEL, "batch_dims %lld is out of range for ranks %d and %d", (long long)b, r, q);
  int64_t k;
  kiln_dimx kx, u;
  if (!is_k(c, ind->dims[q - 1], &k)) { /* the output rank decides it */
    const kiln_type *t = declared(c, 0);
    if (!t)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "the indices' last dim is not known, so neither is the output rank");
    k = q - 1 + r - b - t->rank;
    if (k >= 1 && k <= r - b) {
      if ((s = kconst(c, k, &kx))) return s;
      if ((s = kiln_shape_unify(c, "indices", q - 1, ind->dims[q - 1], kx, &u))) return s;
    }
  }
  if (k < 1 || k > r - b)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "the indices' last dim %lld must be in 1..%lld", (long long)k,
                     (long long)(r - b));
  for (int d = 0; d < b; d++)
    if (x->dims[d] != ind->dims[d] && (s = kiln_shape_unify(c, "batch dims", d, x->dims[d], ind->dims[d], &u)))
      return s;
  int orank = q - 1 + r - (int)b - (int)k, o = 0;
  if ((s = need_rank(orank))) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = orank;
  for (int d = 0; d < q - 1; d++) y->dims[o++] = ind->dims[d];
  for (int d = (int)(b + k); d < r; d++) y->dims[o++] = x->dims[d];
  return KILN_OK;
}

/* Scatter, ScatterElements, ScatterND: the data's type and shape. */
static kiln_status scatter_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *ind, *upd;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &x)) || (s = kiln_shape_in(c, 1, &ind)) || (s = kiln_shape_in(c, 2, &upd))) return s;
  if ((s = need_int_index(ind, "indices"))) return s;
  if (upd->dtype != x->dtype)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "updates have type %s, data %s", kiln_dtype_name(upd->dtype),
                     kiln_dtype_name(x->dtype));
  kiln_shape_copy(&c->out[0], x);
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Pad, DepthToSpace, SpaceToDepth                                     */
/* ------------------------------------------------------------------ */

static kiln_status pad_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  bool old = c->opset < 11;
  if (old && c->n_in > 1 && c->in[1]) return kiln_fail(KILN_E_MODEL, "Pad-%d takes one input", c->opset);
  ilist pads, axl;
  if ((s = read_list(c, old, c->opset < 2 && !kiln_node_attr(c->node, "pads") ? "paddings" : "pads", 1, &pads)))
    return s;
  if (!pads.present) return kiln_fail(KILN_E_MODEL, "pads are required");
  memset(&axl, 0, sizeof axl);
  if (!old && (s = read_list(c, false, NULL, 3, &axl))) return s;
  int r = x->rank, na = r, axes[KILN_SHAPE_MAX_VALS];
  kiln_vshape *y = &c->out[0];
  kiln_shape_copy(y, x);
  if (axl.present) {
    if (!axl.consts) return all_unknown(c, 0);
    if ((s = norm_axes(axl.k, axl.n, r, axes))) return s;
    na = axl.n;
  } else {
    for (int d = 0; d < r; d++) axes[d] = d;
  }
  int n;
  if (list_count(c, &pads, &n) && n != 2 * na)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "pads has %d values for %d axes", n, na);
  for (int i = 0; i < na; i++) {
    int a = axes[i];
    if (!pads.known) {
      if ((s = unknown_dim(c, 0, r, a, &y->dims[a]))) return s;
      continue;
    }
    int64_t v;
    if ((s = kiln_dimx_add(c->tab, x->dims[a], pads.v[i], &y->dims[a])) ||
        (s = kiln_dimx_add(c->tab, y->dims[a], pads.v[i + na], &y->dims[a])))
      return s;
    if (is_k(c, y->dims[a], &v) && v < 0)
      return kiln_fail(KILN_E_MODEL, "pads make axis %d of size %lld", a, (long long)v);
  }
  return KILN_OK;
}

static kiln_status blocksize(kiln_shape_call *c, const kiln_vshape *x, int64_t *b) {
  const kiln_attr *a = kiln_node_attr(c->node, "blocksize");
  if (!a || a->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "required attribute 'blocksize' is missing");
  if (a->i < 1 || a->i > BIG) return kiln_fail(KILN_E_MODEL, "blocksize %lld must be positive", (long long)a->i);
  if (x->rank != 4) return kiln_fail(KILN_E_MISMATCH_SHAPE, "the input must be 4-D, it has rank %d", x->rank);
  *b = a->i;
  return KILN_OK;
}

/* *out = a / k, failing when a is a constant k does not divide. */
static kiln_status exact_div(kiln_shape_call *c, kiln_dimx a, int64_t k, const char *what, kiln_dimx *out) {
  int64_t v;
  if (is_k(c, a, &v) && v % k)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s %lld is not divisible by %lld", what, (long long)v, (long long)k);
  kiln_dimx kx;
  kiln_status s = kconst(c, k, &kx);
  return s ? s : kiln_dimx_fdiv(c->tab, a, kx, out);
}

static kiln_status depthtospace_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  int64_t b = 0;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s || (s = blocksize(c, x, &b))) return s;
  if (b > 3037000499) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "blocksize %lld is too large", (long long)b);
  kiln_vshape *y = &c->out[0];
  kiln_shape_copy(y, x);
  if ((s = exact_div(c, x->dims[1], b * b, "channel count", &y->dims[1])) ||
      (s = kiln_dimx_mul_const(c->tab, x->dims[2], b, &y->dims[2])) ||
      (s = kiln_dimx_mul_const(c->tab, x->dims[3], b, &y->dims[3])))
    return s;
  return KILN_OK;
}

static kiln_status spacetodepth_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  int64_t b = 0;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s || (s = blocksize(c, x, &b))) return s;
  if (b > 3037000499) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "blocksize %lld is too large", (long long)b);
  kiln_vshape *y = &c->out[0];
  kiln_shape_copy(y, x);
  if ((s = kiln_dimx_mul_const(c->tab, x->dims[1], b * b, &y->dims[1])) ||
      (s = exact_div(c, x->dims[2], b, "height", &y->dims[2])) ||
      (s = exact_div(c, x->dims[3], b, "width", &y->dims[3])))
    return s;
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Trilu, EyeLike, ReverseSequence, OneHot                             */
/* ------------------------------------------------------------------ */

/* y has input 0's type and shape, which has at least min_rank dims. */
static kiln_status keep_shape(kiln_shape_call *c, int min_rank) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  if (x->rank < min_rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "the input must have rank >= %d, it has %d", min_rank, x->rank);
  kiln_shape_copy(&c->out[0], x);
  return KILN_OK;
}

static kiln_status trilu_fn(kiln_shape_call *c) { return keep_shape(c, 2); }

static kiln_status reversesequence_fn(kiln_shape_call *c) {
  const kiln_vshape *lens;
  kiln_status s = kiln_shape_in(c, 1, &lens);
  if (s || (s = need_int_index(lens, "sequence_lens"))) return s;
  return keep_shape(c, 2);
}

static kiln_status eyelike_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  if (x->rank != 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "the input must be 2-D, it has rank %d", x->rank);
  kiln_shape_copy(&c->out[0], x);
  const kiln_attr *a = kiln_node_attr(c->node, "dtype");
  if (a) {
    if (a->type != KILN_ATTR_INT || a->i <= 0 || a->i >= KILN_DTYPE_COUNT || !kiln_dtype_supported((kiln_dtype)a->i))
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "dtype %lld is not supported", (long long)a->i);
    c->out[0].dtype = (kiln_dtype)a->i;
  }
  return KILN_OK;
}

static kiln_status onehot_fn(kiln_shape_call *c) {
  const kiln_vshape *ind, *dep, *val;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &ind)) || (s = kiln_shape_in(c, 1, &dep)) || (s = kiln_shape_in(c, 2, &val))) return s;
  if (dep->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "depth must be a scalar");
  int r = ind->rank + 1, ax;
  if ((s = need_rank(r))) return s;
  if ((s = axis_attr(c, "axis", -1, r, &ax))) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = val->dtype;
  y->rank = r;
  for (int d = 0, k = 0; d < r; d++)
    if (d != ax) y->dims[d] = ind->dims[k++];
  if (dep->konst && dep->konst->numel == 1) {
    double df = kiln_get_f(dep->konst, 0);
    if (!(df >= 1) || df > (double)KILN_MAX_NUMEL) return kiln_fail(KILN_E_MODEL, "depth %g is invalid", df);
    return kconst(c, (int64_t)df, &y->dims[ax]);
  }
  kiln_dimx v;
  if (kiln_dtype_is_int(dep->dtype) && scalar_val(c, 1, &v)) return y->dims[ax] = v, KILN_OK;
  return unknown_dim(c, 0, r, ax, &y->dims[ax]);
}

/* ------------------------------------------------------------------ */
/* Compress, NonZero                                                   */
/* ------------------------------------------------------------------ */

static kiln_status compress_fn(kiln_shape_call *c) {
  const kiln_vshape *x, *cond;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &x)) || (s = kiln_shape_in(c, 1, &cond))) return s;
  if (cond->dtype != KILN_BOOL) return kiln_fail(KILN_E_MISMATCH_DTYPE, "condition must be bool");
  if (cond->rank != 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "condition must be 1-D");
  kiln_vshape *y = &c->out[0];
  kiln_dimx n;
  int ax = 0;
  y->dtype = x->dtype;
  if (kiln_node_attr(c->node, "axis")) {
    if ((s = axis_attr(c, "axis", 0, x->rank, &ax))) return s;
    kiln_shape_copy(y, x);
    n = x->dims[ax];
  } else {
    y->rank = 1;
    if ((s = prod(c, x->dims, 0, x->rank, &n))) return s;
  }
  /* a constant condition: its true entries (those beyond the axis ignored) */
  const kiln_tensor *t = cond->konst;
  int64_t len, cnt = 0;
  if (t && (is_k(c, n, &len) || ge(c, n, t->numel))) {
    if (!is_k(c, n, &len) || len > t->numel) len = t->numel;
    for (int64_t j = 0; j < len; j++) cnt += kiln_get_i(t, j) != 0;
    return kconst(c, cnt, &y->dims[ax]);
  }
  if (t) { /* a symbolic axis size n: each run [a, b) of true entries adds min(n, b) - min(n, a) */
    kiln_dimx sum, lo, hi, ka, kb;
    int runs = 0;
    bool ok = !kconst(c, 0, &sum);
    for (int64_t j = 0; j < t->numel && ok; j++) {
      if (!kiln_get_i(t, j) || (j > 0 && kiln_get_i(t, j - 1))) continue;
      int64_t b = j;
      while (b < t->numel && kiln_get_i(t, b)) b++;
      ok = ++runs <= KILN_SYMDIM_MAX_TERMS / 2 && !kconst(c, j, &ka) && !kconst(c, b, &kb) &&
           !kiln_dimx_min(c->tab, n, ka, &lo) && !kiln_dimx_min(c->tab, n, kb, &hi) &&
           !kiln_dimx_add(c->tab, sum, hi, &sum) && !kiln_dimx_sub(c->tab, sum, lo, &sum);
    }
    if (ok) return y->dims[ax] = sum, KILN_OK;
    kiln_error_clear();
  }
  return unknown_dim(c, 0, y->rank, ax, &y->dims[ax]);
}

static kiln_status nonzero_fn(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  kiln_vshape *y = &c->out[0];
  int64_t r = x->rank ? x->rank : 1; /* a scalar counts as shape [1] */
  y->dtype = KILN_I64;
  y->rank = 2;
  if ((s = kconst(c, r, &y->dims[0]))) return s;
  const kiln_tensor *t = x->konst;
  if (t) {
    bool fl = kiln_dtype_is_float(t->dtype);
    int64_t cnt = 0;
    for (int64_t i = 0; i < t->numel; i++) cnt += fl ? kiln_get_f(t, i) != 0 : kiln_get_i(t, i) != 0;
    return kconst(c, cnt, &y->dims[1]);
  }
  return unknown_dim(c, 0, 2, 1, &y->dims[1]);
}

/* ------------------------------------------------------------------ */
/* table                                                               */
/* ------------------------------------------------------------------ */

/* Each op's outputs depend on data when one of its inputs does. */
#define OP(name)                                                      \
  static kiln_status name##_op(kiln_shape_call *c) {                  \
    kiln_status s = name##_fn(c);                                     \
    bool dd = false;                                                  \
    for (int i = 0; i < c->n_in; i++) dd |= c->in[i] && c->in[i]->data_dependent; \
    for (int k = 0; k < c->n_out && dd && !s; k++) c->out[k].data_dependent = true; \
    return s;                                                         \
  }
OP(constant)
OP(constantofshape)
OP(shape)
OP(size)
OP(range)
OP(reshape)
OP(flatten)
OP(transpose)
OP(squeeze)
OP(unsqueeze)
OP(expand)
OP(slice)
OP(split)
OP(concat)
OP(gather)
OP(gather_elements)
OP(gathernd)
OP(scatter)
OP(pad)
OP(tile)
OP(depthtospace)
OP(spacetodepth)
OP(trilu)
OP(eyelike)
OP(onehot)
OP(compress)
OP(reversesequence)
OP(nonzero)
#undef OP

const kiln_shape_def kiln_shape_ops_shape[] = {
    {"Constant", constant_op},
    {"ConstantOfShape", constantofshape_op},
    {"Shape", shape_op},
    {"Size", size_op},
    {"Range", range_op},
    {"Reshape", reshape_op},
    {"Flatten", flatten_op},
    {"Transpose", transpose_op},
    {"Squeeze", squeeze_op},
    {"Unsqueeze", unsqueeze_op},
    {"Expand", expand_op},
    {"Slice", slice_op},
    {"Split", split_op},
    {"Concat", concat_op},
    {"Gather", gather_op},
    {"GatherElements", gather_elements_op},
    {"GatherND", gathernd_op},
    {"ScatterND", scatter_op},
    {"ScatterElements", scatter_op},
    {"Scatter", scatter_op},
    {"Pad", pad_op},
    {"Tile", tile_op},
    {"DepthToSpace", depthtospace_op},
    {"SpaceToDepth", spacetodepth_op},
    {"Trilu", trilu_op},
    {"EyeLike", eyelike_op},
    {"OneHot", onehot_op},
    {"Compress", compress_op},
    {"ReverseSequence", reversesequence_op},
    {"NonZero", nonzero_op},
    {NULL, NULL},
};
