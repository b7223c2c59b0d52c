/* reference/ops_shape: scalar kernels (see reference/ops.h) for the
 * data-movement and shape ops. They are type-generic: elements are moved
 * with kiln_copy_elem / memcpy of kiln_dtype_size bytes, so every storable
 * type works. Shape-setting inputs are read with kiln_op_ints. */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/ops.h"

#define INT_INPUTS_MAX (1 << 30)

/* ------------------------------------------------------------------ */
/* helpers                                                             */
/* ------------------------------------------------------------------ */

static size_t esize(const kiln_tensor *t) { return kiln_dtype_size(t->dtype); }

static char *elem_ptr(kiln_tensor *t, int64_t i) { return (char *)t->data + (size_t)i * esize(t); }

/* Copies n elements from src (from flat index si) to dst (from di): one
 * memcpy when src is dense, a view read through its map
 * (kiln_tensor_read). */
static void copy_run(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si, int64_t n) {
  kiln_tensor_read(elem_ptr(dst, di), src, si, n);
}

/* copy_run of rows runs of n elements, the o-th from src's si + o * ss to
 * dst's di + o * ds (short runs of a dense src as fixed-size copies). */
static void copy_rows(kiln_tensor *dst, int64_t di, int64_t ds, const kiln_tensor *src, int64_t si, int64_t ss,
                      int64_t rows, int64_t n) {
  size_t es = esize(src), b = (size_t)n * es;
  if (src->strided || n <= 0) {
    for (int64_t o = 0; o < rows && n > 0; o++) copy_run(dst, di + o * ds, src, si + o * ss, n);
    return;
  }
  char *d = elem_ptr(dst, di);
  const char *f = (const char *)src->data + (size_t)si * es;
  size_t dstep = (size_t)ds * es, sstep = (size_t)ss * es;
  switch (b) {
  case 4:
    for (int64_t o = 0; o < rows; o++) memcpy(d + (size_t)o * dstep, f + (size_t)o * sstep, 4);
    break;
  case 8:
    for (int64_t o = 0; o < rows; o++) memcpy(d + (size_t)o * dstep, f + (size_t)o * sstep, 8);
    break;
  case 16:
    for (int64_t o = 0; o < rows; o++) memcpy(d + (size_t)o * dstep, f + (size_t)o * sstep, 16);
    break;
  default:
    for (int64_t o = 0; o < rows; o++) memcpy(d + (size_t)o * dstep, f + (size_t)o * sstep, b);
  }
}

static const char *shp(const kiln_tensor *t, char *buf, int size) {
  return kiln_shape_str(t->rank, t->dims, buf, size);
}

/* Product of dims[lo, hi). */
static int64_t prod(const int64_t *dims, int lo, int hi) {
  int64_t p = 1;
  for (int i = lo; i < hi; i++) p *= dims[i];
  return p;
}

/* Fails unless the node's opset is at least since (the op's first version). */
static kiln_status need_opset(const kiln_node *n, int since) {
  if (n->opset < since)
    return kiln_fail(KILN_E_MODEL, "operator %s does not exist before opset %d (node opset %d)", n->op_type, since,
                     n->opset);
  return KILN_OK;
}

/* Fails when attribute name is present outside opsets [since, until]. */
static kiln_status attr_opsets(const kiln_node *n, const char *name, int since, int until) {
  if (kiln_node_attr(n, name) && (n->opset < since || n->opset > until))
    return kiln_fail(KILN_E_MODEL, "attribute '%s' is not part of %s-%d", name, n->op_type, n->opset);
  return KILN_OK;
}

/* Fails unless a present attribute has the given type. */
static kiln_status attr_type(const kiln_node *n, const char *name, kiln_attr_type ty, bool required) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (!a) {
    if (required) return kiln_fail(KILN_E_MODEL, "required attribute '%s' is missing", name);
    return KILN_OK;
  }
  if (a->type != ty) return kiln_fail(KILN_E_MODEL, "attribute '%s' has the wrong type", name);
  return KILN_OK;
}

/* Reads an integer list from attribute name (when from_attr) or from input
 * idx. *present is false when the list is absent (attribute missing or the
 * optional input omitted). */
static kiln_status read_ints(const kiln_op_call *c, bool from_attr, const char *name, int idx, int64_t *vals,
                             int max, int *n, bool *present) {
  *n = 0;
  *present = false;
  if (from_attr) {
    size_t cnt;
    const int64_t *a = kiln_attr_ints(c->node, name, &cnt);
    if (!a) return KILN_OK;
    if (cnt > (size_t)max)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "attribute '%s' has %zu values, at most %d supported", name, cnt,
                       max);
    for (size_t i = 0; i < cnt; i++) vals[i] = a[i];
    *n = (int)cnt;
    *present = true;
    return KILN_OK;
  }
  if (idx >= c->n_in || !c->in[idx]) return KILN_OK;
  *present = true;
  return kiln_op_ints(c, idx, vals, max, n);
}

/* Copies src into dst (already allocated, dense) reading src element
 * base + sum(idx[d] * sstr[d]) for dst's multi-index idx: one gather over
 * src's storage (a view read densely first: fails only when that copy
 * cannot be allocated). */
static kiln_status copy_strided(kiln_tensor *dst, const kiln_tensor *src, int64_t base, const int64_t *sstr) {
  if (!dst->numel) return KILN_OK;
  kiln_tensor dense = {0};
  kiln_status s = src->strided ? kiln_tensor_copy(&dense, src) : KILN_OK;
  if (!s)
    kiln_gather_map(dst->data, src->strided ? dense.data : src->data, esize(src), dst->rank, dst->dims, sstr, base);
  kiln_tensor_release(&dense);
  return s;
}

/* Copies in to out with a new shape (same element count). */
static kiln_status copy_reshaped(const kiln_op_call *c, const kiln_tensor *in, int rank, const int64_t *dims) {
  int64_t n;
  kiln_status s = kiln_shape_numel(rank, dims, &n);
  if (s) return s;
  if (n != in->numel) {
    char a[160], b[160];
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "cannot reshape %s (%lld elements) to %s", shp(in, a, sizeof a),
                     (long long)in->numel, kiln_shape_str(rank, dims, b, sizeof b));
  }
  s = kiln_tensor_alloc(&c->out[0], in->dtype, rank, dims);
  if (s) return s;
  copy_run(&c->out[0], 0, in, 0, in->numel);
  return KILN_OK;
}

/* Reduction of Scatter* ops: none, add, mul (opset 16), max, min (opset 18). */
typedef enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN } red_kind;

static kiln_status check_reduction(const kiln_node *n) {
  kiln_status s = attr_opsets(n, "reduction", 16, INT_MAX);
  if (s) return s;
  if ((s = attr_type(n, "reduction", KILN_ATTR_STRING, false))) return s;
  const char *r = kiln_attr_string(n, "reduction", "none");
  if ((!strcmp(r, "max") || !strcmp(r, "min")) && n->opset < 18)
    return kiln_fail(KILN_E_MODEL, "reduction '%s' is not part of %s-%d (opset 18)", r, n->op_type, n->opset);
  if (strcmp(r, "none") && strcmp(r, "add") && strcmp(r, "mul") && strcmp(r, "max") && strcmp(r, "min"))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "reduction '%s' is not supported (none, add, mul, max, min)", r);
  return KILN_OK;
}

static red_kind get_reduction(const kiln_node *n) {
  const char *r = kiln_attr_string(n, "reduction", "none");
  return !strcmp(r, "add") ? RED_ADD
         : !strcmp(r, "mul") ? RED_MUL
         : !strcmp(r, "max") ? RED_MAX
         : !strcmp(r, "min") ? RED_MIN
                             : RED_NONE;
}

/* dst[di] = src[si] (none), dst[di] + src[si] (add), dst[di] * src[si]
 * (mul), the larger (max) or smaller (min) of the two; same dtype. Integers
 * wrap; bool add is or, mul is and; a NaN on either side of max/min wins
 * (numpy's maximum/minimum, which ONNX's reference implementation uses). */
static void reduce_elem(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si, red_kind r) {
  if (r == RED_NONE) {
    kiln_copy_elem(dst, di, src, si);
  } else if (kiln_dtype_is_float(dst->dtype)) {
    double a = kiln_get_f(dst, di), b = kiln_get_f(src, si);
    double v = r == RED_ADD ? a + b
               : r == RED_MUL ? a * b
               : r == RED_MAX ? (a > b || isnan(a) ? a : b)
                              : (a < b || isnan(a) ? a : b);
    kiln_set_f(dst, di, v);
  } else if (r == RED_MAX || r == RED_MIN) {
    int64_t a = kiln_get_i(dst, di), b = kiln_get_i(src, si);
    kiln_set_i(dst, di, (r == RED_MAX) == (a > b) ? a : b);
  } else {
    uint64_t a = (uint64_t)kiln_get_i(dst, di), b = (uint64_t)kiln_get_i(src, si);
    kiln_set_i(dst, di, (int64_t)(r == RED_ADD ? a + b : a * b));
  }
}

/* Reads index tensor element i (int32/int64) and normalises it against
 * dim, failing when it is outside [-dim, dim). */
static kiln_status get_index(const kiln_tensor *ind, int64_t i, int64_t dim, int64_t *out) {
  int64_t v = kiln_get_i(ind, i);
  if (v < -dim || v >= dim)
    return kiln_fail(KILN_E_INVALID_VALUE, "index %lld is out of range for a dimension of size %lld", (long long)v,
                     (long long)dim);
  *out = v < 0 ? v + dim : v;
  return KILN_OK;
}

/* An index already checked by get_index, normalised. */
static int64_t index_at(const kiln_tensor *ind, int64_t i, int64_t dim) {
  int64_t v = kiln_get_i(ind, i);
  return v < 0 ? v + dim : v;
}

static kiln_status need_index_dtype(const kiln_tensor *t, const char *what) {
  if (t->dtype != KILN_I32 && t->dtype != KILN_I64)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "%s must be int32 or int64, got %s", what, kiln_dtype_name(t->dtype));
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Constant, ConstantOfShape                                           */
/* ------------------------------------------------------------------ */

static const char *const constant_attrs[] = {"value",      "value_float",  "value_floats",  "value_int",
                                             "value_ints", "value_string", "value_strings", "sparse_value"};

static kiln_status check_constant(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  int count = 0;
  for (size_t i = 0; i < sizeof constant_attrs / sizeof *constant_attrs; i++)
    if (kiln_node_attr(n, constant_attrs[i])) count++;
  if (count != 1) return kiln_fail(KILN_E_MODEL, "exactly one value attribute must be given, %d found", count);
  if (kiln_node_attr(n, "value_string") || kiln_node_attr(n, "value_strings"))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "string constants are not supported");
  if (kiln_node_attr(n, "sparse_value"))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "sparse constants are not supported");
  kiln_status s;
  if ((s = attr_opsets(n, "value_float", 12, INT_MAX)) || (s = attr_opsets(n, "value_floats", 12, INT_MAX)) ||
      (s = attr_opsets(n, "value_int", 12, INT_MAX)) || (s = attr_opsets(n, "value_ints", 12, INT_MAX)))
    return s;
  if ((s = attr_type(n, "value", KILN_ATTR_TENSOR, false)) ||
      (s = attr_type(n, "value_float", KILN_ATTR_FLOAT, false)) ||
      (s = attr_type(n, "value_int", KILN_ATTR_INT, false)))
    return s;
  const kiln_attr *a = kiln_node_attr(n, "value_floats");
  if (a && a->type != KILN_ATTR_FLOATS && a->type != KILN_ATTR_UNDEFINED)
    return kiln_fail(KILN_E_MODEL, "attribute 'value_floats' has the wrong type");
  a = kiln_node_attr(n, "value_ints");
  if (a && a->type != KILN_ATTR_INTS && a->type != KILN_ATTR_UNDEFINED)
    return kiln_fail(KILN_E_MODEL, "attribute 'value_ints' has the wrong type");
  const kiln_tensor *t = kiln_attr_tensor(n, "value");
  if (kiln_node_attr(n, "value") && (!t || !kiln_dtype_supported(t->dtype)))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "constant of data type %s is not supported",
                     t ? kiln_dtype_name(t->dtype) : "(none)");
  return KILN_OK;
}

static kiln_status run_constant(const kiln_op_call *c) {
  kiln_status s = check_constant(c->graph, c->node);
  if (s) return s;
  const kiln_node *n = c->node;
  const kiln_attr *a;
  kiln_tensor *o = &c->out[0];
  if ((a = kiln_node_attr(n, "value"))) return kiln_tensor_copy(o, a->t);
  if ((a = kiln_node_attr(n, "value_float"))) {
    if ((s = kiln_tensor_alloc(o, KILN_F32, 0, NULL))) return s;
    ((float *)o->data)[0] = a->f;
    return KILN_OK;
  }
  if ((a = kiln_node_attr(n, "value_int"))) {
    if ((s = kiln_tensor_alloc(o, KILN_I64, 0, NULL))) return s;
    ((int64_t *)o->data)[0] = a->i;
    return KILN_OK;
  }
  if ((a = kiln_node_attr(n, "value_floats"))) {
    int64_t d = (int64_t)a->n;
    if ((s = kiln_tensor_alloc(o, KILN_F32, 1, &d))) return s;
    for (size_t i = 0; i < a->n; i++) ((float *)o->data)[i] = a->floats[i];
    return KILN_OK;
  }
  a = kiln_node_attr(n, "value_ints");
  int64_t d = (int64_t)a->n;
  if ((s = kiln_tensor_alloc(o, KILN_I64, 1, &d))) return s;
  for (size_t i = 0; i < a->n; i++) ((int64_t *)o->data)[i] = a->ints[i];
  return KILN_OK;
}

static kiln_status check_constantofshape(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 9);
  if (s) return s;
  if ((s = attr_type(n, "value", KILN_ATTR_TENSOR, false))) return s;
  const kiln_tensor *t = kiln_attr_tensor(n, "value");
  if (t && t->numel != 1)
    return kiln_fail(KILN_E_MODEL, "attribute 'value' must hold one element, it holds %lld", (long long)t->numel);
  if (t && !kiln_dtype_supported(t->dtype))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "value of data type %s is not supported",
                     kiln_dtype_name(t->dtype));
  return KILN_OK;
}

static kiln_status run_constantofshape(const kiln_op_call *c) {
  kiln_status s = check_constantofshape(c->graph, c->node);
  if (s) return s;
  int64_t dims[KILN_MAX_RANK];
  int r;
  if ((s = kiln_op_ints(c, 0, dims, KILN_MAX_RANK, &r))) return s;
  for (int i = 0; i < r; i++)
    if (dims[i] < 0) return kiln_fail(KILN_E_INVALID_VALUE, "shape value %lld is negative", (long long)dims[i]);
  const kiln_tensor *v = kiln_attr_tensor(c->node, "value");
  kiln_dtype dt = v ? v->dtype : KILN_F32;
  if ((s = kiln_tensor_alloc(&c->out[0], dt, r, dims))) return s;
  if (v)
    for (int64_t i = 0; i < c->out[0].numel; i++) kiln_copy_elem(&c->out[0], i, v, 0);
  return KILN_OK; /* default: zeros of float32 */
}

/* ------------------------------------------------------------------ */
/* Shape, Size, Range                                                  */
/* ------------------------------------------------------------------ */

static kiln_status check_shape(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s;
  if ((s = attr_opsets(n, "start", 15, INT_MAX)) || (s = attr_opsets(n, "end", 15, INT_MAX))) return s;
  if ((s = attr_type(n, "start", KILN_ATTR_INT, false)) || (s = attr_type(n, "end", KILN_ATTR_INT, false)))
    return s;
  return KILN_OK;
}

static kiln_status run_shape(const kiln_op_call *c) {
  kiln_status s = check_shape(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int64_t r = x->rank;
  int64_t start = kiln_attr_int(c->node, "start", 0);
  int64_t end = kiln_attr_int(c->node, "end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = start < 0 ? 0 : start > r ? r : start;
  end = end < 0 ? 0 : end > r ? r : end;
  int64_t len = end > start ? end - start : 0;
  if ((s = kiln_tensor_alloc(&c->out[0], KILN_I64, 1, &len))) return s;
  for (int64_t i = 0; i < len; i++) ((int64_t *)c->out[0].data)[i] = x->dims[start + i];
  return KILN_OK;
}

static kiln_status run_size(const kiln_op_call *c) {
  kiln_status s = kiln_tensor_alloc(&c->out[0], KILN_I64, 0, NULL);
  if (s) return s;
  ((int64_t *)c->out[0].data)[0] = c->in[0]->numel;
  return KILN_OK;
}

static kiln_status check_range(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return need_opset(n, 11);
}

static kiln_status run_range(const kiln_op_call *c) {
  kiln_status s = check_range(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *st = c->in[0], *li = c->in[1], *de = c->in[2];
  for (int i = 0; i < 3; i++) {
    if ((s = kiln_op_need(c, i))) return s;
    if (c->in[i]->numel != 1 || c->in[i]->rank > 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d must be a scalar", i);
    if (c->in[i]->dtype != st->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has type %s, input 0 has %s", i,
                       kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(st->dtype));
  }
  int64_t n;
  if (kiln_dtype_is_float(st->dtype)) {
    double a = kiln_get_f(st, 0), b = kiln_get_f(li, 0), d = kiln_get_f(de, 0);
    if (d == 0 || isnan(d) || isnan(a) || isnan(b))
      return kiln_fail(KILN_E_INVALID_VALUE, "delta is zero or a value is NaN");
    double cnt =
        st->dtype == KILN_F64 ? ceil((b - a) / d) : (double)ceilf((float)(((float)b - (float)a) / (float)d));
    if (!(cnt <= (double)KILN_MAX_NUMEL))
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "range of %g elements is too large", cnt);
    n = cnt > 0 ? (int64_t)cnt : 0;
    if ((s = kiln_tensor_alloc(&c->out[0], st->dtype, 1, &n))) return s;
    for (int64_t i = 0; i < n; i++) {
      if (st->dtype == KILN_F64)
        kiln_set_f(&c->out[0], i, a + (double)i * d);
      else
        kiln_set_f(&c->out[0], i, (double)((float)a + (float)i * (float)d));
    }
    return KILN_OK;
  }
  int64_t a = kiln_get_i(st, 0), b = kiln_get_i(li, 0), d = kiln_get_i(de, 0);
  if (d == 0) return kiln_fail(KILN_E_INVALID_VALUE, "delta is zero");
  n = 0;
  /* a, b, d fit in int32 or are int64: compute the count in long double-free
   * integer arithmetic, guarding the difference against overflow. */
  int64_t diff;
  if (__builtin_sub_overflow(b, a, &diff)) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "range is too large");
  if ((diff > 0 && d > 0) || (diff < 0 && d < 0)) {
    if (d == INT64_MIN)
      n = 1;
    else
      n = diff / d + (diff % d != 0);
  }
  if (n > KILN_MAX_NUMEL)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "range of %lld elements is too large", (long long)n);
  if ((s = kiln_tensor_alloc(&c->out[0], st->dtype, 1, &n))) return s;
  for (int64_t i = 0; i < n; i++) kiln_set_i(&c->out[0], i, (int64_t)((uint64_t)a + (uint64_t)i * (uint64_t)d));
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Reshape, Flatten, Squeeze, Unsqueeze                                */
/* ------------------------------------------------------------------ */

static kiln_status check_reshape(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = attr_opsets(n, "allowzero", 14, INT_MAX);
  if (s) return s;
  if ((s = attr_type(n, "allowzero", KILN_ATTR_INT, false))) return s;
  int64_t az = kiln_attr_int(n, "allowzero", 0);
  if (az != 0 && az != 1) return kiln_fail(KILN_E_MODEL, "allowzero must be 0 or 1, got %lld", (long long)az);
  return KILN_OK;
}

static kiln_status run_reshape(const kiln_op_call *c) {
  kiln_status s = check_reshape(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int64_t dims[KILN_MAX_RANK];
  int r;
  if ((s = kiln_op_ints(c, 1, dims, KILN_MAX_RANK, &r))) return s;
  bool allowzero = kiln_attr_int(c->node, "allowzero", 0) != 0;
  int infer = -1;
  bool has_zero = false;
  int64_t known = 1;
  for (int i = 0; i < r; i++) {
    if (dims[i] == -1) {
      if (infer >= 0) return kiln_fail(KILN_E_INVALID_VALUE, "shape has more than one -1");
      infer = i;
      continue;
    }
    if (dims[i] < -1) return kiln_fail(KILN_E_INVALID_VALUE, "shape value %lld is invalid", (long long)dims[i]);
    if (dims[i] == 0) {
      has_zero = true;
      if (!allowzero) {
        if (i >= x->rank)
          return kiln_fail(KILN_E_INVALID_VALUE,
                           "shape value 0 at index %d copies a dimension the input (rank %d) lacks", i, x->rank);
        dims[i] = x->dims[i];
      }
    }
    if (dims[i] > 0 && known > KILN_MAX_NUMEL / dims[i])
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "shape has more elements than the input");
    known *= dims[i];
  }
  if (allowzero && has_zero && infer >= 0)
    return kiln_fail(KILN_E_INVALID_VALUE, "shape has both 0 and -1 with allowzero set");
  if (infer >= 0) {
    if (known == 0 || x->numel % known) {
      char a[160];
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "cannot infer the -1 dimension reshaping %s", shp(x, a, sizeof a));
    }
    dims[infer] = x->numel / known;
  }
  return copy_reshaped(c, x, r, dims);
}

static kiln_status check_flatten(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return attr_type(n, "axis", KILN_ATTR_INT, false);
}

static kiln_status run_flatten(const kiln_op_call *c) {
  kiln_status s = check_flatten(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int64_t axis = kiln_attr_int(c->node, "axis", 1);
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis > x->rank)
    return kiln_fail(KILN_E_MODEL, "axis %lld is out of range for rank %d",
                     (long long)kiln_attr_int(c->node, "axis", 1), x->rank);
  int64_t dims[2] = {prod(x->dims, 0, (int)axis), prod(x->dims, (int)axis, x->rank)};
  return copy_reshaped(c, x, 2, dims);
}

/* Squeeze / Unsqueeze axes: attribute before opset 13, input after. */
static kiln_status check_axes_op(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = attr_opsets(n, "axes", 1, 12);
  if (s) return s;
  if (n->opset < 13 && n->n_in > 1)
    return kiln_fail(KILN_E_MODEL, "axes is an attribute before opset 13, not an input");
  if (n->opset < 13) {
    const kiln_attr *a = kiln_node_attr(n, "axes");
    if (a && a->type != KILN_ATTR_INTS && a->type != KILN_ATTR_UNDEFINED)
      return kiln_fail(KILN_E_MODEL, "attribute 'axes' has the wrong type");
  }
  if (!strcmp(n->op_type, "Unsqueeze")) {
    if (n->opset < 13 && !kiln_node_attr(n, "axes"))
      return kiln_fail(KILN_E_MODEL, "required attribute 'axes' is missing");
    if (n->opset >= 13 && (n->n_in < 2 || n->in[1] < 0))
      return kiln_fail(KILN_E_MODEL, "required input 'axes' is missing");
  }
  return KILN_OK;
}

static kiln_status run_squeeze(const kiln_op_call *c) {
  kiln_status s = check_axes_op(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int64_t axes[KILN_MAX_RANK];
  int na;
  bool present;
  if ((s = read_ints(c, c->opset < 13, "axes", 1, axes, KILN_MAX_RANK, &na, &present))) return s;
  bool drop[KILN_MAX_RANK] = {false};
  if (!present || na == 0) {
    for (int i = 0; i < x->rank; i++) drop[i] = x->dims[i] == 1;
  } else {
    for (int i = 0; i < na; i++) {
      int ax;
      if ((s = kiln_norm_axis(axes[i], x->rank, &ax))) return s;
      if (drop[ax]) return kiln_fail(KILN_E_INVALID_VALUE, "axis %lld is repeated", (long long)axes[i]);
      if (x->dims[ax] != 1) {
        char a[160];
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "cannot squeeze axis %d of shape %s: its size is not 1", ax,
                         shp(x, a, sizeof a));
      }
      drop[ax] = true;
    }
  }
  int64_t dims[KILN_MAX_RANK];
  int r = 0;
  for (int i = 0; i < x->rank; i++)
    if (!drop[i]) dims[r++] = x->dims[i];
  return copy_reshaped(c, x, r, dims);
}

static kiln_status run_unsqueeze(const kiln_op_call *c) {
  kiln_status s = check_axes_op(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int64_t axes[KILN_MAX_RANK];
  int na;
  bool present;
  if ((s = read_ints(c, c->opset < 13, "axes", 1, axes, KILN_MAX_RANK, &na, &present))) return s;
  if (!present) return kiln_fail(KILN_E_MODEL, "axes are missing");
  int r = x->rank + na;
  if (r > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output rank %d is beyond kiln's maximum of %d", r, KILN_MAX_RANK);
  bool ins[KILN_MAX_RANK] = {false};
  for (int i = 0; i < na; i++) {
    int ax;
    if ((s = kiln_norm_axis(axes[i], r, &ax))) return s;
    if (ins[ax]) return kiln_fail(KILN_E_INVALID_VALUE, "axis %lld is repeated", (long long)axes[i]);
    ins[ax] = true;
  }
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0, k = 0; i < r; i++) dims[i] = ins[i] ? 1 : x->dims[k++];
  return copy_reshaped(c, x, r, dims);
}

/* ------------------------------------------------------------------ */
/* Transpose, Expand, Tile                                             */
/* ------------------------------------------------------------------ */

static kiln_status run_transpose(const kiln_op_call *c) {
  const kiln_tensor *x = c->in[0];
  int r = x->rank;
  size_t np;
  const int64_t *p = kiln_attr_ints(c->node, "perm", &np);
  int perm[KILN_MAX_RANK];
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
  int64_t istr[KILN_MAX_RANK], dims[KILN_MAX_RANK], sstr[KILN_MAX_RANK];
  kiln_strides(r, x->dims, istr);
  for (int i = 0; i < r; i++) {
    dims[i] = x->dims[perm[i]];
    sstr[i] = istr[perm[i]];
  }
  kiln_status s = kiln_tensor_alloc(&c->out[0], x->dtype, r, dims);
  if (s) return s;
  return copy_strided(&c->out[0], x, 0, sstr);
}

static kiln_status run_expand(const kiln_op_call *c) {
  kiln_status s = need_opset(c->node, 8);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int64_t shape[KILN_MAX_RANK], dims[KILN_MAX_RANK], sstr[KILN_MAX_RANK];
  int n, r;
  if ((s = kiln_op_ints(c, 1, shape, KILN_MAX_RANK, &n))) return s;
  for (int i = 0; i < n; i++)
    if (shape[i] < 0) return kiln_fail(KILN_E_INVALID_VALUE, "shape value %lld is negative", (long long)shape[i]);
  if ((s = kiln_broadcast_shape(x->rank, x->dims, n, shape, &r, dims))) return s;
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, r, dims))) return s;
  kiln_broadcast_strides(x, r, dims, sstr);
  return copy_strided(&c->out[0], x, 0, sstr);
}

static kiln_status run_tile(const kiln_op_call *c) {
  const kiln_tensor *x = c->in[0];
  int64_t rep[KILN_MAX_RANK], dims[KILN_MAX_RANK], idx[KILN_MAX_RANK], istr[KILN_MAX_RANK];
  int n;
  kiln_status s = kiln_op_ints(c, 1, rep, KILN_MAX_RANK, &n);
  if (s) return s;
  if (n != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "repeats has %d values, the input has rank %d", n, x->rank);
  for (int i = 0; i < n; i++) {
    if (rep[i] < 0) return kiln_fail(KILN_E_INVALID_VALUE, "repeats value %lld is negative", (long long)rep[i]);
    if (rep[i] && x->dims[i] > KILN_MAX_NUMEL / rep[i])
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "tiled shape is too large");
    dims[i] = x->dims[i] * rep[i];
  }
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, n, dims))) return s;
  kiln_strides(n, x->dims, istr);
  for (int64_t i = 0; i < c->out[0].numel; i++) {
    kiln_unravel(i, n, dims, idx);
    int64_t off = 0;
    for (int d = 0; d < n; d++) off += (idx[d] % x->dims[d]) * istr[d];
    kiln_copy_elem(&c->out[0], i, x, off);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Slice                                                               */
/* ------------------------------------------------------------------ */

static kiln_status check_slice(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s;
  if ((s = attr_opsets(n, "starts", 1, 9)) || (s = attr_opsets(n, "ends", 1, 9)) ||
      (s = attr_opsets(n, "axes", 1, 9)))
    return s;
  if (n->opset < 10) {
    if (n->n_in != 1) return kiln_fail(KILN_E_MODEL, "Slice-%d takes one input", n->opset);
    if (!kiln_node_attr(n, "starts") || !kiln_node_attr(n, "ends"))
      return kiln_fail(KILN_E_MODEL, "attributes 'starts' and 'ends' are required");
  } else if (n->n_in < 3 || n->in[1] < 0 || n->in[2] < 0) {
    return kiln_fail(KILN_E_MODEL, "inputs 'starts' and 'ends' are required");
  }
  return KILN_OK;
}

static kiln_status run_slice(const kiln_op_call *c) {
  kiln_status s = check_slice(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int r = x->rank;
  bool old = c->opset < 10, present;
  int64_t starts[KILN_MAX_RANK], ends[KILN_MAX_RANK], axes[KILN_MAX_RANK], steps[KILN_MAX_RANK];
  int ns, ne, na, nst;
  if ((s = read_ints(c, old, "starts", 1, starts, KILN_MAX_RANK, &ns, &present))) return s;
  if ((s = read_ints(c, old, "ends", 2, ends, KILN_MAX_RANK, &ne, &present))) return s;
  if (ns != ne) return kiln_fail(KILN_E_MISMATCH_SHAPE, "starts has %d values, ends %d", ns, ne);
  if ((s = read_ints(c, old, "axes", 3, axes, KILN_MAX_RANK, &na, &present))) return s;
  if (!present) {
    if (ns > r) return kiln_fail(KILN_E_MISMATCH_SHAPE, "%d starts given for rank %d", ns, r);
    for (int i = 0; i < ns; i++) axes[i] = i;
    na = ns;
  }
  if (na != ns) return kiln_fail(KILN_E_MISMATCH_SHAPE, "axes has %d values, starts %d", na, ns);
  present = false;
  if (!old && (s = read_ints(c, false, NULL, 4, steps, KILN_MAX_RANK, &nst, &present))) return s;
  if (!present) {
    for (int i = 0; i < ns; i++) steps[i] = 1;
    nst = ns;
  }
  if (nst != ns) return kiln_fail(KILN_E_MISMATCH_SHAPE, "steps has %d values, starts %d", nst, ns);

  int64_t dims[KILN_MAX_RANK], istr[KILN_MAX_RANK], sstr[KILN_MAX_RANK], base = 0;
  bool seen[KILN_MAX_RANK] = {false};
  kiln_strides(r, x->dims, istr);
  for (int d = 0; d < r; d++) {
    dims[d] = x->dims[d];
    sstr[d] = istr[d];
  }
  for (int i = 0; i < ns; i++) {
    int ax;
    if ((s = kiln_norm_axis(axes[i], r, &ax))) return s;
    if (seen[ax]) return kiln_fail(KILN_E_INVALID_VALUE, "axis %lld is repeated", (long long)axes[i]);
    seen[ax] = true;
    int64_t dim = x->dims[ax], st = starts[i], en = ends[i], step = steps[i], cnt = 0;
    if (step == 0) return kiln_fail(KILN_E_INVALID_VALUE, "step of axis %d is 0", ax);
    if (st < 0) st += dim;
    if (en < 0) en += dim;
    if (dim == 0) {
      step = 1;
    } else if (step > 0) {
      st = st < 0 ? 0 : st > dim ? dim : st;
      en = en < 0 ? 0 : en > dim ? dim : en;
      if (step > dim) step = dim; /* at most one element either way */
      if (en > st) cnt = (en - st - 1) / step + 1;
    } else {
      st = st < 0 ? 0 : st > dim - 1 ? dim - 1 : st;
      en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
      if (step < -dim) step = -dim;
      if (st > en) cnt = (st - en - 1) / -step + 1;
    }
    dims[ax] = cnt;
    if (cnt > 0) base += st * istr[ax];
    sstr[ax] = istr[ax] * step;
  }
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, r, dims))) return s;
  return copy_strided(&c->out[0], x, base, sstr);
}

/* ------------------------------------------------------------------ */
/* Split, Concat                                                       */
/* ------------------------------------------------------------------ */

static kiln_status check_split(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = attr_opsets(n, "split", 1, 12);
  if (s) return s;
  if (n->opset < 13 && n->n_in > 1)
    return kiln_fail(KILN_E_MODEL, "split is an attribute before opset 13, not an input");
  if ((s = attr_type(n, "axis", KILN_ATTR_INT, false))) return s;
  return KILN_OK;
}

static kiln_status run_split(const kiln_op_call *c) {
  kiln_status s = check_split(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int ax, no = c->n_out;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, &ax))) return s;
  int64_t dim = x->dims[ax];
  int64_t *sizes = kiln_calloc((size_t)no, sizeof *sizes);
  if (!sizes) return kiln_fail(KILN_E_NOMEM, "out of memory");
  int64_t given = -1; /* count of split values given, -1 when absent */
  if (c->opset < 13) {
    size_t cnt;
    const int64_t *a = kiln_attr_ints(c->node, "split", &cnt);
    if (a) {
      given = (int64_t)cnt;
      for (size_t i = 0; i < cnt && i < (size_t)no; i++) sizes[i] = a[i];
    }
  } else if (c->n_in > 1 && c->in[1] && c->in[1]->numel > 0) {
    const kiln_tensor *sp = c->in[1];
    if ((s = need_index_dtype(sp, "split")) || sp->rank > 1) {
      kiln_free(sizes);
      return s ? s : kiln_fail(KILN_E_MISMATCH_SHAPE, "split must be 1-D");
    }
    given = sp->numel;
    for (int64_t i = 0; i < sp->numel && i < no; i++) sizes[i] = kiln_get_i(sp, i);
  }
  if (given >= 0) {
    int64_t sum = 0;
    if (given != no)
      s = kiln_fail(KILN_E_MISMATCH_SHAPE, "split has %lld values for %d outputs", (long long)given, no);
    for (int i = 0; i < no && !s; i++) {
      if (sizes[i] < 0 || sizes[i] > dim - sum)
        s = kiln_fail(KILN_E_INVALID_VALUE, "split sizes do not add up to the axis size %lld", (long long)dim);
      else
        sum += sizes[i];
    }
    if (!s && sum != dim)
      s = kiln_fail(KILN_E_INVALID_VALUE, "split sizes add up to %lld, the axis size is %lld", (long long)sum,
                    (long long)dim);
  } else if (dim % no) {
    s = kiln_fail(KILN_E_INVALID_VALUE, "axis size %lld cannot be split evenly into %d outputs", (long long)dim,
                  no);
  } else {
    for (int i = 0; i < no; i++) sizes[i] = dim / no;
  }
  int64_t outer = prod(x->dims, 0, ax), inner = prod(x->dims, ax + 1, x->rank), at = 0;
  for (int k = 0; k < no && !s; k++) {
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, x->dims, sizeof dims);
    dims[ax] = sizes[k];
    if ((s = kiln_tensor_alloc(&c->out[k], x->dtype, x->rank, dims))) break;
    copy_rows(&c->out[k], 0, sizes[k] * inner, x, at * inner, dim * inner, outer, sizes[k] * inner);
    at += sizes[k];
  }
  kiln_free(sizes);
  return s;
}

static kiln_status check_concat(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return attr_type(n, "axis", KILN_ATTR_INT, true);
}

static kiln_status run_concat(const kiln_op_call *c) {
  kiln_status s = check_concat(c->graph, c->node);
  if (s) return s;
  for (int i = 0; i < c->n_in; i++)
    if ((s = kiln_op_need(c, i))) return s;
  const kiln_tensor *x0 = c->in[0];
  int r = x0->rank, ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", 0), r, &ax))) return s;
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x0->dims, sizeof dims);
  dims[ax] = 0;
  for (int i = 0; i < c->n_in; i++) {
    const kiln_tensor *x = c->in[i];
    if (x->dtype != x0->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has type %s, input 0 has %s", i, kiln_dtype_name(x->dtype),
                       kiln_dtype_name(x0->dtype));
    bool ok = x->rank == r;
    for (int d = 0; d < r && ok; d++) ok = d == ax || x->dims[d] == x0->dims[d];
    if (!ok) {
      char a[160], b[160];
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d has shape %s, input 0 has %s (concat axis %d)", i,
                       shp(x, a, sizeof a), shp(x0, b, sizeof b), ax);
    }
    if (x->dims[ax] > KILN_MAX_NUMEL - dims[ax])
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "concatenation is too large");
    dims[ax] += x->dims[ax];
  }
  if ((s = kiln_tensor_alloc(&c->out[0], x0->dtype, r, dims))) return s;
  int64_t outer = prod(dims, 0, ax), inner = prod(dims, ax + 1, r), at = 0;
  for (int i = 0; i < c->n_in; i++) {
    const kiln_tensor *x = c->in[i];
    copy_rows(&c->out[0], at * inner, dims[ax] * inner, x, 0, x->dims[ax] * inner, outer, x->dims[ax] * inner);
    at += x->dims[ax];
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Gather, GatherElements, GatherND                                    */
/* ------------------------------------------------------------------ */

static kiln_status check_axis_attr(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return attr_type(n, "axis", KILN_ATTR_INT, false);
}

static kiln_status run_gather(const kiln_op_call *c) {
  kiln_status s = check_axis_attr(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *ind = c->in[1];
  if ((s = need_index_dtype(ind, "indices"))) return s;
  int ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, &ax))) return s;
  int r = x->rank - 1 + ind->rank;
  if (r > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output rank %d is beyond kiln's maximum of %d", r, KILN_MAX_RANK);
  int64_t dims[KILN_MAX_RANK];
  int k = 0;
  for (int d = 0; d < ax; d++) dims[k++] = x->dims[d];
  for (int d = 0; d < ind->rank; d++) dims[k++] = ind->dims[d];
  for (int d = ax + 1; d < x->rank; d++) dims[k++] = x->dims[d];
  int64_t n = x->dims[ax], idx;
  for (int64_t j = 0; j < ind->numel; j++)
    if ((s = get_index(ind, j, n, &idx))) return s;
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, r, dims))) return s;
  int64_t outer = prod(x->dims, 0, ax), inner = prod(x->dims, ax + 1, x->rank);
  size_t chunk = (size_t)inner * esize(x);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < ind->numel; j++) {
      idx = index_at(ind, j, n);
      copy_run(&c->out[0], (o * ind->numel + j) * inner, x, (o * n + idx) * inner, (int64_t)(chunk / esize(x)));
    }
  return KILN_OK;
}

/* Shared checks of GatherElements / ScatterElements: indices (and updates)
 * of data's rank, no larger than data off the axis. */
static kiln_status elements_shapes(const kiln_tensor *x, const kiln_tensor *ind, int ax) {
  char a[160], b[160];
  if (ind->rank != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "indices %s and data %s differ in rank", shp(ind, a, sizeof a),
                     shp(x, b, sizeof b));
  for (int d = 0; d < x->rank; d++)
    if (d != ax && ind->dims[d] > x->dims[d])
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "indices %s exceed data %s on axis %d", shp(ind, a, sizeof a),
                       shp(x, b, sizeof b), d);
  return KILN_OK;
}

static kiln_status run_gather_elements(const kiln_op_call *c) {
  kiln_status s = need_opset(c->node, 11);
  if (s || (s = check_axis_attr(c->graph, c->node))) return s;
  const kiln_tensor *x = c->in[0], *ind = c->in[1];
  if ((s = need_index_dtype(ind, "indices"))) return s;
  int ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, &ax))) return s;
  if ((s = elements_shapes(x, ind, ax))) return s;
  int64_t xstr[KILN_MAX_RANK], idx[KILN_MAX_RANK], v;
  kiln_strides(x->rank, x->dims, xstr);
  for (int64_t i = 0; i < ind->numel; i++)
    if ((s = get_index(ind, i, x->dims[ax], &v))) return s;
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, ind->rank, ind->dims))) return s;
  for (int64_t i = 0; i < ind->numel; i++) {
    kiln_unravel(i, ind->rank, ind->dims, idx);
    v = index_at(ind, i, x->dims[ax]);
    idx[ax] = v;
    int64_t off = 0;
    for (int d = 0; d < x->rank; d++) off += idx[d] * xstr[d];
    kiln_copy_elem(&c->out[0], i, x, off);
  }
  return KILN_OK;
}

static kiln_status check_gathernd(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 11);
  if (s || (s = attr_opsets(n, "batch_dims", 12, INT_MAX))) return s;
  return attr_type(n, "batch_dims", KILN_ATTR_INT, false);
}

static kiln_status run_gathernd(const kiln_op_call *c) {
  kiln_status s = check_gathernd(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *ind = c->in[1];
  if ((s = need_index_dtype(ind, "indices"))) return s;
  int64_t b = kiln_attr_int(c->node, "batch_dims", 0);
  int r = x->rank, q = ind->rank;
  char sa[160], sb[160];
  if (r < 1 || q < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "data and indices must have rank >= 1");
  if (b < 0 || b >= q || b >= r)
    return kiln_fail(KILN_E_MODEL, "batch_dims %lld is out of range for ranks %d and %d", (long long)b, r, q);
  int64_t k = ind->dims[q - 1];
  if (k < 1 || k > r - b)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "indices %s: last dimension must be in 1..%lld",
                     shp(ind, sa, sizeof sa), (long long)(r - b));
  for (int d = 0; d < b; d++)
    if (x->dims[d] != ind->dims[d])
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "batch dimensions of data %s and indices %s differ",
                       shp(x, sa, sizeof sa), shp(ind, sb, sizeof sb));
  int orank = q - 1 + r - (int)b - (int)k;
  if (orank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output rank %d is beyond kiln's maximum of %d", orank,
                     KILN_MAX_RANK);
  int64_t dims[KILN_MAX_RANK];
  int o = 0;
  for (int d = 0; d < q - 1; d++) dims[o++] = ind->dims[d];
  for (int d = (int)(b + k); d < r; d++) dims[o++] = x->dims[d];
  int64_t nbatch = prod(x->dims, 0, (int)b);
  int64_t per_batch = prod(ind->dims, (int)b, q - 1); /* index tuples per batch */
  int64_t slice = prod(x->dims, (int)(b + k), r);
  int64_t xbatch = prod(x->dims, (int)b, r);
  int64_t xstr[KILN_MAX_RANK], v;
  kiln_strides(r, x->dims, xstr);
  for (int64_t t = 0; t < nbatch * per_batch; t++)
    for (int64_t j = 0; j < k; j++)
      if ((s = get_index(ind, t * k + j, x->dims[b + j], &v))) return s;
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, orank, dims))) return s;
  size_t chunk = (size_t)slice * esize(x);
  for (int64_t bi = 0; bi < nbatch; bi++)
    for (int64_t p = 0; p < per_batch; p++) {
      int64_t t = bi * per_batch + p, off = bi * xbatch;
      for (int64_t j = 0; j < k; j++) {
        v = index_at(ind, t * k + j, x->dims[b + j]);
        off += v * xstr[b + j];
      }
      copy_run(&c->out[0], t * slice, x, off, (int64_t)(chunk / esize(x)));
    }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* ScatterElements, Scatter, ScatterND                                 */
/* ------------------------------------------------------------------ */

static kiln_status check_scatter_elements(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s;
  if (!strcmp(n->op_type, "Scatter"))
    s = need_opset(n, 9);
  else
    s = need_opset(n, 11);
  if (s || (s = check_axis_attr(g, n))) return s;
  return check_reduction(n);
}

static kiln_status run_scatter_elements(const kiln_op_call *c) {
  kiln_status s = check_scatter_elements(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *ind = c->in[1], *upd = c->in[2];
  if ((s = need_index_dtype(ind, "indices"))) return s;
  if (upd->dtype != x->dtype)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "updates have type %s, data %s", kiln_dtype_name(upd->dtype),
                     kiln_dtype_name(x->dtype));
  int ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, &ax))) return s;
  if ((s = elements_shapes(x, ind, ax))) return s;
  bool same = upd->rank == ind->rank;
  for (int d = 0; d < ind->rank && same; d++) same = upd->dims[d] == ind->dims[d];
  if (!same) {
    char a[160], b[160];
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "updates %s and indices %s differ in shape", shp(upd, a, sizeof a),
                     shp(ind, b, sizeof b));
  }
  int64_t xstr[KILN_MAX_RANK], idx[KILN_MAX_RANK], v;
  kiln_strides(x->rank, x->dims, xstr);
  for (int64_t i = 0; i < ind->numel; i++)
    if ((s = get_index(ind, i, x->dims[ax], &v))) return s;
  if ((s = kiln_tensor_copy(&c->out[0], x))) return s;
  red_kind red = get_reduction(c->node);
  for (int64_t i = 0; i < ind->numel; i++) {
    kiln_unravel(i, ind->rank, ind->dims, idx);
    v = index_at(ind, i, x->dims[ax]);
    idx[ax] = v;
    int64_t off = 0;
    for (int d = 0; d < x->rank; d++) off += idx[d] * xstr[d];
    reduce_elem(&c->out[0], off, upd, i, red);
  }
  return KILN_OK;
}

static kiln_status check_scatternd(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 11);
  if (s) return s;
  return check_reduction(n);
}

static kiln_status run_scatternd(const kiln_op_call *c) {
  kiln_status s = check_scatternd(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *ind = c->in[1], *upd = c->in[2];
  char sa[160], sb[160], sc[160];
  if ((s = need_index_dtype(ind, "indices"))) return s;
  if (upd->dtype != x->dtype)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "updates have type %s, data %s", kiln_dtype_name(upd->dtype),
                     kiln_dtype_name(x->dtype));
  int r = x->rank, q = ind->rank;
  if (r < 1 || q < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "data and indices must have rank >= 1");
  int64_t k = ind->dims[q - 1];
  if (k < 1 || k > r)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "indices %s: last dimension must be in 1..%d", shp(ind, sa, sizeof sa),
                     r);
  /* updates: indices.shape[:-1] + data.shape[k:] */
  bool ok = upd->rank == q - 1 + r - (int)k;
  for (int d = 0; d < q - 1 && ok; d++) ok = upd->dims[d] == ind->dims[d];
  for (int d = (int)k; d < r && ok; d++) ok = upd->dims[q - 1 + d - k] == x->dims[d];
  if (!ok)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "updates %s do not fit data %s and indices %s",
                     shp(upd, sa, sizeof sa), shp(x, sb, sizeof sb), shp(ind, sc, sizeof sc));
  int64_t m = prod(ind->dims, 0, q - 1), slice = prod(x->dims, (int)k, r), xstr[KILN_MAX_RANK], v;
  kiln_strides(r, x->dims, xstr);
  for (int64_t t = 0; t < m; t++)
    for (int64_t j = 0; j < k; j++)
      if ((s = get_index(ind, t * k + j, x->dims[j], &v))) return s;
  if ((s = kiln_tensor_copy(&c->out[0], x))) return s;
  red_kind red = get_reduction(c->node);
  for (int64_t t = 0; t < m; t++) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; j++) {
      v = index_at(ind, t * k + j, x->dims[j]);
      off += v * xstr[j];
    }
    for (int64_t e = 0; e < slice; e++) reduce_elem(&c->out[0], off + e, upd, t * slice + e, red);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Pad                                                                 */
/* ------------------------------------------------------------------ */

static kiln_status check_pad(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s;
  if ((s = attr_opsets(n, "pads", 1, 10)) || (s = attr_opsets(n, "value", 1, 10))) return s;
  if ((s = attr_type(n, "mode", KILN_ATTR_STRING, false))) return s;
  const char *m = kiln_attr_string(n, "mode", "constant");
  if (strcmp(m, "constant") && strcmp(m, "reflect") && strcmp(m, "edge"))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "mode '%s' is not supported (constant, reflect, edge)", m);
  if (n->opset < 11) {
    if (n->n_in != 1) return kiln_fail(KILN_E_MODEL, "Pad-%d takes one input", n->opset);
    if (!kiln_node_attr(n, "pads")) return kiln_fail(KILN_E_MODEL, "required attribute 'pads' is missing");
  } else if (n->n_in < 2 || n->in[1] < 0) {
    return kiln_fail(KILN_E_MODEL, "required input 'pads' is missing");
  }
  return KILN_OK;
}

/* Reflects i into [0, d) without repeating the edge (numpy 'reflect'). */
static int64_t reflect_index(int64_t i, int64_t d) {
  if (d == 1) return 0;
  int64_t p = 2 * (d - 1);
  i %= p;
  if (i < 0) i += p;
  return i < d ? i : p - i;
}

static kiln_status run_pad(const kiln_op_call *c) {
  kiln_status s = check_pad(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int r = x->rank, np;
  bool present;
  int64_t pads[2 * KILN_MAX_RANK];
  if ((s = read_ints(c, c->opset < 11, "pads", 1, pads, 2 * KILN_MAX_RANK, &np, &present))) return s;
  if (np != 2 * r) return kiln_fail(KILN_E_MISMATCH_SHAPE, "pads has %d values, the input has rank %d", np, r);
  const char *mode = kiln_attr_string(c->node, "mode", "constant");
  int m = !strcmp(mode, "reflect") ? 1 : !strcmp(mode, "edge") ? 2 : 0;
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < r; d++) {
    int64_t lo = pads[d], hi = pads[d + r];
    if (lo > KILN_MAX_NUMEL || hi > KILN_MAX_NUMEL || lo < -KILN_MAX_NUMEL || hi < -KILN_MAX_NUMEL ||
        x->dims[d] + lo + hi < 0)
      return kiln_fail(KILN_E_INVALID_VALUE, "pads %lld, %lld are invalid for axis %d of size %lld", (long long)lo,
                       (long long)hi, d, (long long)x->dims[d]);
    dims[d] = x->dims[d] + lo + hi;
    if (m && x->dims[d] == 0 && dims[d] > 0)
      return kiln_fail(KILN_E_INVALID_VALUE, "mode %s cannot pad axis %d of size 0", mode, d);
  }
  /* the constant: one element of x's type */
  unsigned char cval[16] = {0};
  kiln_tensor cv;
  int64_t one = 1;
  kiln_tensor_wrap(&cv, x->dtype, 1, &one, 1, cval);
  if (c->opset < 11) {
    kiln_set_f(&cv, 0, kiln_attr_float(c->node, "value", 0.0f));
  } else if (c->n_in > 2 && c->in[2]) {
    const kiln_tensor *v = c->in[2];
    if (v->dtype != x->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "constant_value has type %s, data %s", kiln_dtype_name(v->dtype),
                       kiln_dtype_name(x->dtype));
    if (v->numel != 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "constant_value must be a scalar");
    kiln_copy_elem(&cv, 0, v, 0);
  }
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, r, dims))) return s;
  int64_t xstr[KILN_MAX_RANK], idx[KILN_MAX_RANK];
  kiln_strides(r, x->dims, xstr);
  for (int64_t i = 0; i < c->out[0].numel; i++) {
    kiln_unravel(i, r, dims, idx);
    int64_t off = 0;
    bool inside = true;
    for (int d = 0; d < r; d++) {
      int64_t j = idx[d] - pads[d], n = x->dims[d];
      if (j < 0 || j >= n) {
        if (m == 0)
          inside = false;
        else if (m == 1)
          j = reflect_index(j, n);
        else
          j = j < 0 ? 0 : n - 1;
      }
      off += j * xstr[d];
    }
    if (inside)
      kiln_copy_elem(&c->out[0], i, x, off);
    else
      kiln_copy_elem(&c->out[0], i, &cv, 0);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* DepthToSpace, SpaceToDepth                                          */
/* ------------------------------------------------------------------ */

static kiln_status check_blocksize(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = attr_type(n, "blocksize", KILN_ATTR_INT, true);
  if (s) return s;
  if (kiln_attr_int(n, "blocksize", 0) < 1)
    return kiln_fail(KILN_E_MODEL, "blocksize %lld must be positive", (long long)kiln_attr_int(n, "blocksize", 0));
  if (!strcmp(n->op_type, "DepthToSpace")) {
    if ((s = attr_opsets(n, "mode", 11, INT_MAX)) || (s = attr_type(n, "mode", KILN_ATTR_STRING, false))) return s;
    const char *m = kiln_attr_string(n, "mode", "DCR");
    if (strcmp(m, "DCR") && strcmp(m, "CRD"))
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "mode '%s' is not supported (DCR, CRD)", m);
  }
  return KILN_OK;
}

static kiln_status run_depthtospace(const kiln_op_call *c) {
  kiln_status s = check_blocksize(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char a[160];
  if (x->rank != 4) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %s must be 4-D", shp(x, a, sizeof a));
  int64_t b = kiln_attr_int(c->node, "blocksize", 1);
  bool crd = !strcmp(kiln_attr_string(c->node, "mode", "DCR"), "CRD");
  int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  if (C % b || (C / b) % b || H > KILN_MAX_NUMEL / b || W > KILN_MAX_NUMEL / b)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "channels of %s are not divisible by blocksize^2 (%lld)",
                     shp(x, a, sizeof a), (long long)b);
  int64_t oc = C / b / b;
  int64_t dims[4] = {N, oc, H * b, W * b};
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, 4, dims))) return s;
  int64_t i = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < oc; ch++)
      for (int64_t oh = 0; oh < H * b; oh++)
        for (int64_t ow = 0; ow < W * b; ow++, i++) {
          int64_t h = oh / b, bi = oh % b, w = ow / b, bj = ow % b;
          int64_t ic = crd ? ch * b * b + bi * b + bj : (bi * b + bj) * oc + ch;
          kiln_copy_elem(&c->out[0], i, x, ((n * C + ic) * H + h) * W + w);
        }
  return KILN_OK;
}

static kiln_status run_spacetodepth(const kiln_op_call *c) {
  kiln_status s = check_blocksize(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char a[160];
  if (x->rank != 4) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %s must be 4-D", shp(x, a, sizeof a));
  int64_t b = kiln_attr_int(c->node, "blocksize", 1);
  int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3];
  if (H % b || W % b || (C && (b > KILN_MAX_NUMEL / C || b > KILN_MAX_NUMEL / (C * b))))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "spatial dims of %s are not divisible by blocksize %lld",
                     shp(x, a, sizeof a), (long long)b);
  int64_t dims[4] = {N, C * b * b, H / b, W / b};
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, 4, dims))) return s;
  int64_t i = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t oc = 0; oc < C * b * b; oc++)
      for (int64_t oh = 0; oh < H / b; oh++)
        for (int64_t ow = 0; ow < W / b; ow++, i++) {
          int64_t bi = oc / (b * C), bj = (oc / C) % b, ch = oc % C;
          kiln_copy_elem(&c->out[0], i, x, ((n * C + ch) * H + oh * b + bi) * W + ow * b + bj);
        }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Trilu, EyeLike, OneHot                                              */
/* ------------------------------------------------------------------ */

static kiln_status check_trilu(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 14);
  if (s) return s;
  return attr_type(n, "upper", KILN_ATTR_INT, false);
}

static kiln_status run_trilu(const kiln_op_call *c) {
  kiln_status s = check_trilu(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char a[160];
  if (x->rank < 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %s must have rank >= 2", shp(x, a, sizeof a));
  int64_t k = 0;
  if (c->n_in > 1 && c->in[1]) {
    const kiln_tensor *kt = c->in[1];
    if (kt->dtype != KILN_I64 || kt->numel != 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "k must be an int64 scalar");
    k = kiln_get_i(kt, 0);
  }
  bool upper = kiln_attr_int(c->node, "upper", 1) != 0;
  if ((s = kiln_tensor_copy(&c->out[0], x))) return s;
  int64_t R = x->dims[x->rank - 2], C = x->dims[x->rank - 1];
  size_t es = esize(x);
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t col = i % C, row = (i / C) % R;
    bool keep = upper ? col - row >= k : col - row <= k;
    if (!keep) memset(elem_ptr(&c->out[0], i), 0, es);
  }
  return KILN_OK;
}

static kiln_status check_eyelike(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 9);
  if (s || (s = attr_type(n, "dtype", KILN_ATTR_INT, false)) || (s = attr_type(n, "k", KILN_ATTR_INT, false)))
    return s;
  int64_t dt = kiln_attr_int(n, "dtype", KILN_F32);
  if (dt < 0 || dt >= KILN_DTYPE_COUNT || !kiln_dtype_supported((kiln_dtype)dt))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "dtype %lld is not supported", (long long)dt);
  return KILN_OK;
}

static kiln_status run_eyelike(const kiln_op_call *c) {
  kiln_status s = check_eyelike(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char a[160];
  if (x->rank != 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %s must be 2-D", shp(x, a, sizeof a));
  kiln_dtype dt = (kiln_dtype)kiln_attr_int(c->node, "dtype", x->dtype);
  int64_t k = kiln_attr_int(c->node, "k", 0);
  if ((s = kiln_tensor_alloc(&c->out[0], dt, 2, x->dims))) return s;
  int64_t rows = x->dims[0], cols = x->dims[1];
  if (k >= cols || k <= -rows) return KILN_OK; /* the diagonal misses the matrix */
  for (int64_t i = k < 0 ? -k : 0; i < rows && i + k < cols; i++) kiln_set_i(&c->out[0], i * cols + i + k, 1);
  return KILN_OK;
}

static kiln_status check_onehot(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 9);
  if (s) return s;
  return attr_type(n, "axis", KILN_ATTR_INT, false);
}

static kiln_status run_onehot(const kiln_op_call *c) {
  kiln_status s = check_onehot(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *ind = c->in[0], *dep = c->in[1], *val = c->in[2];
  if (!kiln_dtype_is_float(ind->dtype) && !kiln_dtype_is_int(ind->dtype))
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "indices must be numeric, got %s", kiln_dtype_name(ind->dtype));
  if (!kiln_dtype_is_float(dep->dtype) && !kiln_dtype_is_int(dep->dtype))
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "depth must be numeric, got %s", kiln_dtype_name(dep->dtype));
  if (dep->numel != 1 || dep->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "depth must be a scalar");
  if (val->numel != 2 || val->rank != 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "values must hold 2 elements");
  double df = kiln_get_f(dep, 0);
  if (!(df >= 1) || df > (double)KILN_MAX_NUMEL) return kiln_fail(KILN_E_INVALID_VALUE, "depth %g is invalid", df);
  int64_t depth = (int64_t)df;
  int r = ind->rank + 1;
  if (r > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output rank %d is beyond kiln's maximum of %d", r, KILN_MAX_RANK);
  int ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", -1), r, &ax))) return s;
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0, k = 0; d < r; d++) dims[d] = d == ax ? depth : ind->dims[k++];
  if ((s = kiln_tensor_alloc(&c->out[0], val->dtype, r, dims))) return s;
  int64_t outer = prod(dims, 0, ax), inner = prod(dims, ax + 1, r);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < depth; j++)
      for (int64_t i = 0; i < inner; i++) {
        int64_t v = kiln_get_i(ind, o * inner + i);
        if (v < 0) v += depth;
        kiln_copy_elem(&c->out[0], (o * depth + j) * inner + i, val, v == j ? 1 : 0);
      }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* Compress, ReverseSequence, NonZero                                  */
/* ------------------------------------------------------------------ */

static kiln_status check_compress(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 9);
  if (s) return s;
  return attr_type(n, "axis", KILN_ATTR_INT, false);
}

static kiln_status run_compress(const kiln_op_call *c) {
  kiln_status s = check_compress(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *cond = c->in[1];
  if (cond->dtype != KILN_BOOL) return kiln_fail(KILN_E_MISMATCH_DTYPE, "condition must be bool");
  if (cond->rank != 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "condition must be 1-D");
  bool has_axis = kiln_node_attr(c->node, "axis") != NULL;
  int ax = 0, r;
  int64_t dims[KILN_MAX_RANK], outer, inner, n;
  if (has_axis) {
    if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, &ax))) return s;
    r = x->rank;
    memcpy(dims, x->dims, sizeof dims);
    n = x->dims[ax];
    outer = prod(x->dims, 0, ax);
    inner = prod(x->dims, ax + 1, x->rank);
  } else {
    r = 1;
    n = x->numel;
    outer = inner = 1;
  }
  /* condition entries beyond the axis are ignored (as onnxruntime does) */
  int64_t len = cond->numel < n ? cond->numel : n, cnt = 0;
  for (int64_t j = 0; j < len; j++) cnt += kiln_get_i(cond, j) != 0;
  dims[ax] = cnt;
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, r, dims))) return s;
  size_t chunk = (size_t)inner * esize(x);
  int64_t w = 0;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < len; j++)
      if (kiln_get_i(cond, j)) {
        copy_run(&c->out[0], w * inner, x, (o * n + j) * inner, (int64_t)(chunk / esize(x)));
        w++;
      }
  return KILN_OK;
}

static kiln_status check_reversesequence(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  kiln_status s = need_opset(n, 10);
  if (s || (s = attr_type(n, "batch_axis", KILN_ATTR_INT, false)) ||
      (s = attr_type(n, "time_axis", KILN_ATTR_INT, false)))
    return s;
  int64_t b = kiln_attr_int(n, "batch_axis", 1), t = kiln_attr_int(n, "time_axis", 0);
  if ((b != 0 && b != 1) || (t != 0 && t != 1) || b == t)
    return kiln_fail(KILN_E_MODEL, "batch_axis %lld and time_axis %lld must be 0 and 1 in some order",
                     (long long)b, (long long)t);
  return KILN_OK;
}

static kiln_status run_reversesequence(const kiln_op_call *c) {
  kiln_status s = check_reversesequence(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *lens = c->in[1];
  char a[160];
  if (x->rank < 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %s must have rank >= 2", shp(x, a, sizeof a));
  if ((s = need_index_dtype(lens, "sequence_lens"))) return s;
  int bax = (int)kiln_attr_int(c->node, "batch_axis", 1), tax = (int)kiln_attr_int(c->node, "time_axis", 0);
  int64_t B = x->dims[bax], T = x->dims[tax];
  if (lens->rank != 1 || lens->numel != B)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "sequence_lens must hold %lld values", (long long)B);
  for (int64_t i = 0; i < B; i++) {
    int64_t l = kiln_get_i(lens, i);
    if (l < 0 || l > T)
      return kiln_fail(KILN_E_INVALID_VALUE, "sequence length %lld is out of range 0..%lld", (long long)l,
                       (long long)T);
  }
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, x->rank, x->dims))) return s;
  int64_t str[KILN_MAX_RANK], idx[KILN_MAX_RANK];
  kiln_strides(x->rank, x->dims, str);
  for (int64_t i = 0; i < x->numel; i++) {
    kiln_unravel(i, x->rank, x->dims, idx);
    int64_t l = kiln_get_i(lens, idx[bax]), t = idx[tax];
    int64_t src = i + (t < l ? (l - 1 - t - t) * str[tax] : 0);
    kiln_copy_elem(&c->out[0], i, x, src);
  }
  return KILN_OK;
}

static kiln_status check_nonzero(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return need_opset(n, 9);
}

static kiln_status run_nonzero(const kiln_op_call *c) {
  kiln_status s = check_nonzero(c->graph, c->node);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  bool fl = kiln_dtype_is_float(x->dtype);
  int64_t nnz = 0;
  for (int64_t i = 0; i < x->numel; i++) nnz += fl ? kiln_get_f(x, i) != 0 : kiln_get_i(x, i) != 0;
  int r = x->rank ? x->rank : 1; /* a scalar is treated as shape [1] */
  int64_t dims[2] = {r, nnz}, idx[KILN_MAX_RANK];
  if ((s = kiln_tensor_alloc(&c->out[0], KILN_I64, 2, dims))) return s;
  int64_t *o = c->out[0].data, k = 0;
  for (int64_t i = 0; i < x->numel; i++) {
    if (!(fl ? kiln_get_f(x, i) != 0 : kiln_get_i(x, i) != 0)) continue;
    kiln_unravel(i, x->rank, x->dims, idx);
    for (int d = 0; d < r; d++) o[d * nnz + k] = x->rank ? idx[d] : 0;
    k++;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* table                                                               */
/* ------------------------------------------------------------------ */

#define RANGE_TYPES (KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_I16) | KILN_T(KILN_I32) | KILN_T(KILN_I64))

const kiln_op_def kiln_ref_ops_shape[] = {
    {"Constant", 0, 0, 1, 1,
     "value value_float value_floats value_int value_ints value_string value_strings sparse_value", 0,
     run_constant, check_constant},
    {"ConstantOfShape", 1, 1, 1, 1, "value", KILN_T(KILN_I64), run_constantofshape, check_constantofshape},
    {"Shape", 1, 1, 1, 1, "start end", 0, run_shape, check_shape},
    {"Size", 1, 1, 1, 1, "", 0, run_size, NULL},
    {"Range", 3, 3, 1, 1, "", RANGE_TYPES, run_range, check_range},
    {"Reshape", 2, 2, 1, 1, "allowzero", 0, run_reshape, check_reshape},
    {"Flatten", 1, 1, 1, 1, "axis", 0, run_flatten, check_flatten},
    {"Transpose", 1, 1, 1, 1, "perm", 0, run_transpose, NULL},
    {"Squeeze", 1, 2, 1, 1, "axes", 0, run_squeeze, check_axes_op},
    {"Unsqueeze", 1, 2, 1, 1, "axes", 0, run_unsqueeze, check_axes_op},
    {"Expand", 2, 2, 1, 1, "", 0, run_expand, NULL},
    {"Slice", 1, 5, 1, 1, "starts ends axes", 0, run_slice, check_slice},
    {"Split", 1, 2, 1, INT_INPUTS_MAX, "axis split", 0, run_split, check_split},
    {"Concat", 1, INT_INPUTS_MAX, 1, 1, "axis", 0, run_concat, check_concat},
    {"Gather", 2, 2, 1, 1, "axis", 0, run_gather, check_axis_attr},
    {"GatherElements", 2, 2, 1, 1, "axis", 0, run_gather_elements, check_axis_attr},
    {"GatherND", 2, 2, 1, 1, "batch_dims", 0, run_gathernd, check_gathernd},
    {"ScatterND", 3, 3, 1, 1, "reduction", 0, run_scatternd, check_scatternd},
    {"ScatterElements", 3, 3, 1, 1, "axis reduction", 0, run_scatter_elements, check_scatter_elements},
    {"Scatter", 3, 3, 1, 1, "axis", 0, run_scatter_elements, check_scatter_elements},
    {"Pad", 1, 3, 1, 1, "mode pads value", 0, run_pad, check_pad},
    {"Tile", 2, 2, 1, 1, "", 0, run_tile, NULL},
    {"DepthToSpace", 1, 1, 1, 1, "blocksize mode", 0, run_depthtospace, check_blocksize},
    {"SpaceToDepth", 1, 1, 1, 1, "blocksize", 0, run_spacetodepth, check_blocksize},
    {"Trilu", 1, 2, 1, 1, "upper", 0, run_trilu, check_trilu},
    {"EyeLike", 1, 1, 1, 1, "dtype k", 0, run_eyelike, check_eyelike},
    {"OneHot", 3, 3, 1, 1, "axis", 0, run_onehot, check_onehot},
    {"Compress", 2, 2, 1, 1, "axis", 0, run_compress, check_compress},
    {"ReverseSequence", 2, 2, 1, 1, "batch_axis time_axis", 0, run_reversesequence, check_reversesequence},
    {"NonZero", 1, 1, 1, 1, "", 0, run_nonzero, check_nonzero},
    {0},
};
