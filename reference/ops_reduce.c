/* reference/ops_reduce: scalar kernels (see reference/ops.h) for the
 * reductions and the ops that scan along an axis:
 *   ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL1 ReduceL2
 *   ReduceLogSum ReduceLogSumExp ReduceSumSquare, ArgMax ArgMin, TopK,
 *   CumSum. (NonZero lives in ops_shape.c.)
 * Floats (f16/bf16 too) accumulate in double and are rounded once on the
 * store; integers accumulate in 64 bits with wrap-around (uint64 arithmetic,
 * so overflow is defined and matches the type's own modular arithmetic once
 * truncated to it).
 *
 * Ordering conventions for NaN (ONNX leaves them open; these follow numpy):
 *   ReduceMax/ReduceMin: a NaN in the set makes the result NaN.
 *   ArgMax/ArgMin: a NaN wins (numpy argmax/argmin), the first one, or the
 *     last with select_last_index.
 *   TopK: NaN orders above every number (so largest=1 picks NaNs first,
 *     largest=0 last); equal values (and NaNs among themselves) keep the
 *     lower index first. */
#include <math.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

/* ---------------------------------------------------------------- helpers */

/* Declared element type of the node's input i, KILN_UNDEFINED if unknown. */
static kiln_dtype declared_type(const kiln_graph *g, const kiln_node *n, int i) {
  if (i >= n->n_in || n->in[i] < 0) return KILN_UNDEFINED;
  const kiln_type *ty = &g->values[n->in[i]].type;
  return ty->kind == KILN_TYPE_TENSOR ? ty->dtype : KILN_UNDEFINED;
}

/* Fails unless t (when known) is in mask: the types op accepts at opset. */
static kiln_status want_type(const char *op, int opset, const char *what, kiln_dtype t, uint32_t mask) {
  if (t == KILN_UNDEFINED || kiln_opc_in_mask(mask, t)) return KILN_OK;
  return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "%s-%d does not accept %s of type %s", op, opset, what,
                   kiln_dtype_name(t));
}

/* Fails unless the index-like input i (when its type is declared) is int64
 * or int32 (what kiln_op_ints reads). */
static kiln_status want_int_input(const kiln_graph *g, const kiln_node *n, int i, const char *what) {
  kiln_dtype t = declared_type(g, n, i);
  if (t == KILN_UNDEFINED || t == KILN_I64 || t == KILN_I32) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d (%s) must be int64, not %s", i, what, kiln_dtype_name(t));
}

/* An int attribute that is a flag, 0 or 1, defined from opset since. */
static kiln_status want_flag(const kiln_node *n, const char *name, int since) {
  kiln_status s = kiln_opc_attr(n, name, KILN_ATTR_INT, since, 0);
  return s ? s : kiln_opc_flag(n, name, 0);
}

/* Normalises axis into [0, rank) (rank >= 1); fails naming what. */
static kiln_status norm_axis(int64_t axis, int rank, kiln_status err, const char *what, int *out) {
  *out = 0;
  if (rank < 1 || axis < -rank || axis >= rank)
    return kiln_fail(err, "%s %lld is out of range for an input of rank %d", what, (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return KILN_OK;
}

/* Smallest and largest value of an integer type, as int64 bit patterns
 * (uint64's largest is all ones). */
static void int_limits(kiln_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
  case KILN_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
  case KILN_U8: *lo = 0, *hi = UINT8_MAX; break;
  case KILN_I16: *lo = INT16_MIN, *hi = INT16_MAX; break;
  case KILN_U16: *lo = 0, *hi = UINT16_MAX; break;
  case KILN_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
  case KILN_U32: *lo = 0, *hi = UINT32_MAX; break;
  case KILN_U64: *lo = 0, *hi = -1; break;
  case KILN_BOOL: *lo = 0, *hi = 1; break;
  default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

/* Three-way comparison of elements a and b of t (-1, 0, 1), NaN above
 * every number and equal to NaN. */
static int cmp_elems(const kiln_tensor *t, int64_t a, int64_t b) {
  if (kiln_dtype_is_float(t->dtype)) {
    double x = kiln_get_f(t, a), y = kiln_get_f(t, b);
    int nx = isnan(x) != 0, ny = isnan(y) != 0;
    if (nx || ny) return nx - ny;
    return (x > y) - (x < y);
  }
  if (t->dtype == KILN_U64) {
    uint64_t x = (uint64_t)kiln_get_i(t, a), y = (uint64_t)kiln_get_i(t, b);
    return (x > y) - (x < y);
  }
  int64_t x = kiln_get_i(t, a), y = kiln_get_i(t, b);
  return (x > y) - (x < y);
}

static bool elem_is_nan(const kiln_tensor *t, int64_t i) {
  return kiln_dtype_is_float(t->dtype) && isnan(kiln_get_f(t, i));
}

/* Splits t's shape around axis: outer (dims before), n (dims[axis]),
 * inner (dims after). Element (o, j, i) is at (o * n + j) * inner + i. */
static void split_axis(const kiln_tensor *t, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
  *outer = 1, *inner = 1;
  for (int d = 0; d < axis; d++) *outer *= t->dims[d];
  for (int d = axis + 1; d < t->rank; d++) *inner *= t->dims[d];
  *n = t->dims[axis];
}

#define T_F (KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_F16))
#define T_BF KILN_T(KILN_BF16)
#define T_I32_64 (KILN_T(KILN_I32) | KILN_T(KILN_I64) | KILN_T(KILN_U32) | KILN_T(KILN_U64))
#define T_I8_16 (KILN_T(KILN_I8) | KILN_T(KILN_U8) | KILN_T(KILN_I16) | KILN_T(KILN_U16))

/* -------------------------------------------------------------- Reduce* */

typedef enum red_kind {
  R_SUM,
  R_MEAN,
  R_MAX,
  R_MIN,
  R_PROD,
  R_L1,
  R_L2,
  R_LOGSUM,
  R_LOGSUMEXP,
  R_SUMSQUARE
} red_kind;

/* Input-0 types of a Reduce* op at an opset. */
static uint32_t red_types(red_kind k, int opset) {
  uint32_t m = T_F | T_I32_64;
  if ((k == R_MAX || k == R_MIN) && opset >= 12) m |= KILN_T(KILN_I8) | KILN_T(KILN_U8);
  if (opset >= 13) m |= T_BF;
  return m;
}

/* Since which opset the axes are input 1 rather than an attribute (and
 * noop_with_empty_axes exists). */
static int red_axes_input_since(red_kind k) { return k == R_SUM ? 13 : 18; }

static red_kind red_kind_of(const char *op) {
  static const struct {
    const char *name;
    red_kind kind;
  } map[] = {{"ReduceSum", R_SUM},       {"ReduceMean", R_MEAN},     {"ReduceMax", R_MAX},
             {"ReduceMin", R_MIN},       {"ReduceProd", R_PROD},     {"ReduceL1", R_L1},
             {"ReduceL2", R_L2},         {"ReduceLogSum", R_LOGSUM}, {"ReduceLogSumExp", R_LOGSUMEXP},
             {"ReduceSumSquare", R_SUMSQUARE}};
  for (size_t i = 0; i < sizeof map / sizeof *map; i++)
    if (!strcmp(op, map[i].name)) return map[i].kind;
  return R_SUM; /* not reached: only the table's Reduce* entries get here */
}

static kiln_status red_check(const kiln_graph *g, const kiln_node *n) {
  red_kind k = red_kind_of(n->op_type);
  int since = red_axes_input_since(k);
  kiln_status s = want_type(n->op_type, n->opset, "input", declared_type(g, n, 0), red_types(k, n->opset));
  if (!s) s = want_flag(n, "keepdims", 1);
  if (!s) s = kiln_opc_attr(n, "axes", KILN_ATTR_INTS, 1, since);
  if (!s) s = want_flag(n, "noop_with_empty_axes", since);
  if (s) return s;
  if (n->n_in > 1 && n->opset < since)
    return kiln_fail(KILN_E_MODEL, "%s takes its axes as an attribute before opset %d, not as input 1",
                     n->op_type, since);
  if (n->n_in > 1) s = want_int_input(g, n, 1, "axes");
  if (s) return s;
  /* axes in the attribute: each within [-r, r-1] for the declared rank,
   * none repeated. */
  size_t na = 0;
  const int64_t *axes = kiln_attr_ints(n, "axes", &na);
  int r = n->in[0] >= 0 && g->values[n->in[0]].type.kind == KILN_TYPE_TENSOR ? g->values[n->in[0]].type.rank
                                                                               : -1;
  for (size_t i = 0; i < na; i++) {
    if (r >= 0 && (axes[i] < -r || axes[i] >= r))
      return kiln_fail(KILN_E_MODEL, "axis %lld is out of range for an input of rank %d", (long long)axes[i], r);
    for (size_t j = 0; j < i; j++) {
      int64_t a = axes[i], b = axes[j];
      if (r >= 0) a = a < 0 ? a + r : a, b = b < 0 ? b + r : b;
      if (a == b) return kiln_fail(KILN_E_MODEL, "axis %lld is given twice in 'axes'", (long long)axes[i]);
    }
  }
  return KILN_OK;
}

/* Marks the dims of x to reduce in red[]. No axes (absent attribute, empty
 * or omitted input) reduces every dim, unless noop_with_empty_axes is set:
 * then nothing is reduced (each output element "reduces" the one input
 * element at its place). */
static kiln_status red_axes(const kiln_op_call *c, red_kind k, const kiln_tensor *x, bool *red) {
  int r = x->rank;
  int64_t axes[64];
  int na = 0;
  kiln_status err = KILN_E_MODEL;
  bool noop = false;
  if (c->opset >= red_axes_input_since(k)) {
    noop = kiln_attr_int(c->node, "noop_with_empty_axes", 0) != 0;
    if (c->n_in > 1 && c->in[1]) {
      err = KILN_E_INVALID_VALUE;
      const kiln_tensor *a = c->in[1];
      if (a->numel > r)
        return kiln_fail(KILN_E_INVALID_VALUE, "input 1 (axes) holds %lld axes for an input of rank %d",
                         (long long)a->numel, r);
      kiln_status s = kiln_op_ints(c, 1, axes, 64, &na);
      if (s) return s;
    }
  } else {
    size_t n = 0;
    const int64_t *av = kiln_attr_ints(c->node, "axes", &n);
    if (n > (size_t)r)
      return kiln_fail(KILN_E_MODEL, "attribute 'axes' holds %zu axes for an input of rank %d", n, r);
    for (size_t i = 0; i < n; i++) axes[i] = av[i];
    na = (int)n;
  }
  for (int d = 0; d < r; d++) red[d] = na == 0 && !noop;
  for (int i = 0; i < na; i++) {
    int a;
    kiln_status s = norm_axis(axes[i], r, err, "axis", &a);
    if (s) return s;
    if (red[a]) return kiln_fail(err, "axis %lld is given twice in the axes", (long long)axes[i]);
    red[a] = true;
  }
  return KILN_OK;
}

/* Flat index over a sub-shape (n dims) -> offset through strides. */
static int64_t sub_offset(int n, const int64_t *dims, const int64_t *strides, int64_t flat) {
  int64_t off = 0;
  for (int i = n - 1; i >= 0; i--) {
    off += (flat % dims[i]) * strides[i];
    flat /= dims[i];
  }
  return off;
}

/* The set one output element reduces: the nred elements
 * x[base + sub_offset(nr, rdim, rstride, r)], r in [0, nred). */
typedef struct red_set {
  const kiln_tensor *x;
  int64_t base, nred;
  int nr;
  const int64_t *rdim, *rstride;
} red_set;

static int64_t set_at(const red_set *p, int64_t r) { return p->base + sub_offset(p->nr, p->rdim, p->rstride, r); }

/* A reduction computed in double: every kind for float inputs, and L2,
 * LogSum, LogSumExp for integer inputs (stored back truncated toward zero,
 * as numpy's astype does). An empty set gives the identity: 0 (sum, L1,
 * L2, sum of squares), 1 (prod), -inf/+inf (max/min), -inf (log-sums),
 * NaN (mean). */
static double red_float(red_kind k, const red_set *p) {
  double acc = 0;
  bool nan = false;
  switch (k) {
  case R_SUM:
  case R_MEAN:
    for (int64_t r = 0; r < p->nred; r++) acc += kiln_get_f(p->x, set_at(p, r));
    if (k == R_MEAN) return p->nred ? acc / (double)p->nred : NAN;
    return acc;
  case R_PROD:
    acc = 1;
    for (int64_t r = 0; r < p->nred; r++) acc *= kiln_get_f(p->x, set_at(p, r));
    return acc;
  case R_MAX:
  case R_MIN:
    acc = k == R_MAX ? -INFINITY : INFINITY;
    for (int64_t r = 0; r < p->nred; r++) {
      double v = kiln_get_f(p->x, set_at(p, r));
      if (isnan(v)) nan = true;
      else if (k == R_MAX ? v > acc : v < acc) acc = v;
    }
    return nan ? NAN : acc;
  case R_L1:
    for (int64_t r = 0; r < p->nred; r++) acc += fabs(kiln_get_f(p->x, set_at(p, r)));
    return acc;
  case R_L2:
  case R_SUMSQUARE:
    for (int64_t r = 0; r < p->nred; r++) {
      double v = kiln_get_f(p->x, set_at(p, r));
      acc += v * v;
    }
    return k == R_L2 ? sqrt(acc) : acc;
  case R_LOGSUM:
    for (int64_t r = 0; r < p->nred; r++) acc += kiln_get_f(p->x, set_at(p, r));
    return log(acc);
  case R_LOGSUMEXP: {
    /* max + log(sum(exp(v - max))), or the plain formula when the max is
     * not finite (empty set, all -inf, some +inf). NaN propagates. */
    double m = -INFINITY;
    for (int64_t r = 0; r < p->nred; r++) {
      double v = kiln_get_f(p->x, set_at(p, r));
      if (v > m) m = v;
    }
    double sh = isfinite(m) ? m : 0;
    for (int64_t r = 0; r < p->nred; r++) acc += exp(kiln_get_f(p->x, set_at(p, r)) - sh);
    return sh + log(acc);
  }
  }
  return NAN;
}

/* The other kinds for integer inputs, in 64-bit integers; the caller
 * stores the result with kiln_set_i (truncating to the type, i.e.
 * wrapping). Mean truncates toward zero (0 for an empty set); max/min of
 * an empty set give the type's smallest/largest value. */
static int64_t red_int(red_kind k, const red_set *p) {
  kiln_dtype t = p->x->dtype;
  bool uns = !kiln_dtype_is_signed(t);
  uint64_t acc = 0;
  switch (k) {
  case R_SUM:
  case R_MEAN:
    for (int64_t r = 0; r < p->nred; r++) acc += (uint64_t)kiln_get_i(p->x, set_at(p, r));
    if (k == R_SUM) return (int64_t)acc;
    if (!p->nred) return 0;
    return uns ? (int64_t)(acc / (uint64_t)p->nred) : (int64_t)acc / p->nred;
  case R_PROD:
    acc = 1;
    for (int64_t r = 0; r < p->nred; r++) acc *= (uint64_t)kiln_get_i(p->x, set_at(p, r));
    return (int64_t)acc;
  case R_L1:
    for (int64_t r = 0; r < p->nred; r++) {
      int64_t v = kiln_get_i(p->x, set_at(p, r));
      acc += uns || v >= 0 ? (uint64_t)v : -(uint64_t)v;
    }
    return (int64_t)acc;
  case R_SUMSQUARE:
    for (int64_t r = 0; r < p->nred; r++) {
      uint64_t v = (uint64_t)kiln_get_i(p->x, set_at(p, r));
      acc += v * v;
    }
    return (int64_t)acc;
  case R_MAX:
  case R_MIN: {
    int64_t lo, hi, best;
    int_limits(t, &lo, &hi);
    best = k == R_MAX ? lo : hi;
    for (int64_t r = 0; r < p->nred; r++) {
      int64_t v = kiln_get_i(p->x, set_at(p, r));
      bool gt = t == KILN_U64 ? (uint64_t)v > (uint64_t)best : v > best;
      bool lt = t == KILN_U64 ? (uint64_t)v < (uint64_t)best : v < best;
      if (k == R_MAX ? gt : lt) best = v;
    }
    return best;
  }
  default: return 0; /* L2, LogSum, LogSumExp go through red_float */
  }
}

static kiln_status red_run(const kiln_op_call *c) {
  red_kind k = red_kind_of(c->node->op_type);
  kiln_status s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  s = want_type(c->node->op_type, c->opset, "input", x->dtype, red_types(k, c->opset));
  if (s) return s;
  bool red[KILN_MAX_RANK];
  s = red_axes(c, k, x, red);
  if (s) return s;
  bool keep = kiln_attr_int(c->node, "keepdims", 1) != 0;

  int64_t strides[KILN_MAX_RANK], kdim[KILN_MAX_RANK], kstr[KILN_MAX_RANK], rdim[KILN_MAX_RANK],
      rstr[KILN_MAX_RANK], odims[KILN_MAX_RANK];
  int nk = 0, nr = 0, orank = 0;
  int64_t nout = 1, nred = 1;
  kiln_strides(x->rank, x->dims, strides);
  for (int d = 0; d < x->rank; d++) {
    if (red[d]) {
      rdim[nr] = x->dims[d], rstr[nr++] = strides[d];
      nred *= x->dims[d];
      if (keep) odims[orank++] = 1;
    } else {
      kdim[nk] = x->dims[d], kstr[nk++] = strides[d];
      nout *= x->dims[d];
      odims[orank++] = x->dims[d];
    }
  }
  kiln_tensor *y = &c->out[0];
  s = kiln_tensor_alloc(y, x->dtype, orank, odims);
  if (s) return s;
  bool by_float = kiln_dtype_is_float(x->dtype) || k == R_L2 || k == R_LOGSUM || k == R_LOGSUMEXP;
  red_set p = {x, 0, nred, nr, rdim, rstr};
  for (int64_t o = 0; o < nout; o++) {
    p.base = sub_offset(nk, kdim, kstr, o);
    if (by_float) kiln_set_f(y, o, red_float(k, &p));
    else kiln_set_i(y, o, red_int(k, &p));
  }
  return KILN_OK;
}

/* ------------------------------------------------------- ArgMax ArgMin */

static uint32_t arg_types(int opset) { return T_F | T_I32_64 | T_I8_16 | (opset >= 13 ? T_BF : 0); }

static kiln_status arg_check(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = want_type(n->op_type, n->opset, "input", declared_type(g, n, 0), arg_types(n->opset));
  if (!s) s = kiln_opc_attr(n, "axis", KILN_ATTR_INT, 1, 0);
  if (!s) s = want_flag(n, "keepdims", 1);
  if (!s) s = want_flag(n, "select_last_index", 12);
  if (s) return s;
  const kiln_type *ty = n->in[0] >= 0 ? &g->values[n->in[0]].type : NULL;
  if (ty && ty->kind == KILN_TYPE_TENSOR && ty->rank >= 0) {
    int a;
    s = norm_axis(kiln_attr_int(n, "axis", 0), ty->rank, KILN_E_MODEL, "axis", &a);
  }
  return s;
}

static kiln_status arg_run(const kiln_op_call *c) {
  bool is_max = !strcmp(c->node->op_type, "ArgMax");
  kiln_status s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  s = want_type(c->node->op_type, c->opset, "input", x->dtype, arg_types(c->opset));
  if (s) return s;
  int axis;
  s = norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, KILN_E_MODEL, "axis", &axis);
  if (s) return s;
  bool keep = kiln_attr_int(c->node, "keepdims", 1) != 0;
  bool last = kiln_attr_int(c->node, "select_last_index", 0) != 0;
  int64_t outer, n, inner, odims[KILN_MAX_RANK];
  split_axis(x, axis, &outer, &n, &inner);
  if (n == 0 && outer * inner > 0)
    return kiln_fail(KILN_E_INVALID_VALUE, "%s over axis %d of length 0 has no answer", c->node->op_type, axis);
  int orank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != axis) odims[orank++] = x->dims[d];
    else if (keep) odims[orank++] = 1;
  kiln_tensor *y = &c->out[0];
  s = kiln_tensor_alloc(y, KILN_I64, orank, odims);
  if (s) return s;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      int64_t best = 0;
      for (int64_t j = 1; j < n; j++) {
        int64_t a = (o * n + j) * inner + i, b = (o * n + best) * inner + i;
        /* NaN wins for both ops; otherwise the larger (ArgMax) or smaller
         * (ArgMin) value; a tie moves to j only with select_last_index. */
        bool na = elem_is_nan(x, a), nb = elem_is_nan(x, b);
        int c3 = na || nb ? (int)na - (int)nb : is_max ? cmp_elems(x, a, b) : cmp_elems(x, b, a);
        if (c3 > 0 || (c3 == 0 && last)) best = j;
      }
      kiln_set_i(y, o * inner + i, best);
    }
  return KILN_OK;
}

/* ----------------------------------------------------------------- TopK */

static uint32_t topk_types(int opset) { return T_F | (opset >= 11 ? T_I32_64 | T_I8_16 : 0); }

static kiln_status topk_check(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = want_type(n->op_type, n->opset, "input", declared_type(g, n, 0), topk_types(n->opset));
  if (!s) s = kiln_opc_attr(n, "axis", KILN_ATTR_INT, 1, 0);
  if (!s) s = kiln_opc_attr(n, "k", KILN_ATTR_INT, 1, 10);
  if (!s) s = want_flag(n, "largest", 11);
  if (!s) s = want_flag(n, "sorted", 11);
  if (s) return s;
  if (n->opset < 10) {
    if (!kiln_node_attr(n, "k")) return kiln_fail(KILN_E_MODEL, "TopK-%d needs the attribute 'k'", n->opset);
    if (kiln_attr_int(n, "k", 0) < 0)
      return kiln_fail(KILN_E_MODEL, "attribute 'k' is %lld; it must not be negative",
                       (long long)kiln_attr_int(n, "k", 0));
    if (n->n_in > 1) return kiln_fail(KILN_E_MODEL, "TopK-%d takes k as an attribute, not as input 1", n->opset);
  } else {
    if (n->n_in < 2 || n->in[1] < 0) return kiln_fail(KILN_E_MODEL, "TopK-%d needs input 1 (K)", n->opset);
    s = want_int_input(g, n, 1, "K");
    if (s) return s;
  }
  const kiln_type *ty = n->in[0] >= 0 ? &g->values[n->in[0]].type : NULL;
  if (ty && ty->kind == KILN_TYPE_TENSOR && ty->rank >= 0) {
    int a;
    s = norm_axis(kiln_attr_int(n, "axis", -1), ty->rank, KILN_E_MODEL, "axis", &a);
  }
  return s;
}

/* Order of TopK: true when slice element a comes before element b. */
typedef struct topk_ord {
  const kiln_tensor *x;
  int64_t base, stride;
  bool largest;
} topk_ord;

static bool topk_before(const topk_ord *t, int64_t a, int64_t b) {
  int c3 = cmp_elems(t->x, t->base + a * t->stride, t->base + b * t->stride);
  if (!t->largest) c3 = -c3;
  return c3 != 0 ? c3 > 0 : a < b;
}

/* Bottom-up merge sort of idx[0..n) (tmp: scratch of n). */
static void topk_sort(int64_t *idx, int64_t *tmp, int64_t n, const topk_ord *t) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = topk_before(t, idx[j], idx[i]) ? idx[j++] : idx[i++];
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
  }
}

static kiln_status topk_run(const kiln_op_call *c) {
  kiln_status s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  s = want_type("TopK", c->opset, "input", x->dtype, topk_types(c->opset));
  if (s) return s;
  int axis;
  s = norm_axis(kiln_attr_int(c->node, "axis", -1), x->rank, KILN_E_MODEL, "axis", &axis);
  if (s) return s;
  int64_t k;
  if (c->opset < 10) {
    k = kiln_attr_int(c->node, "k", -1);
  } else {
    int nk = 0;
    s = kiln_op_need(c, 1);
    if (s) return s;
    if (c->in[1]->numel != 1)
      return kiln_fail(KILN_E_INVALID_VALUE, "input 1 (K) must hold one value, not %lld",
                       (long long)c->in[1]->numel);
    s = kiln_op_ints(c, 1, &k, 1, &nk);
    if (s) return s;
  }
  if (k < 0 || k > x->dims[axis])
    return kiln_fail(KILN_E_INVALID_VALUE, "k = %lld is out of range for axis %d of length %lld", (long long)k,
                     axis, (long long)x->dims[axis]);
  bool largest = c->opset < 11 || kiln_attr_int(c->node, "largest", 1) != 0;
  /* sorted=0 leaves the order open; returning it sorted is valid. */
  int64_t outer, n, inner, odims[KILN_MAX_RANK];
  split_axis(x, axis, &outer, &n, &inner);
  for (int d = 0; d < x->rank; d++) odims[d] = d == axis ? k : x->dims[d];
  s = kiln_tensor_alloc(&c->out[0], x->dtype, x->rank, odims);
  if (!s && c->n_out > 1) s = kiln_tensor_alloc(&c->out[1], KILN_I64, x->rank, odims);
  if (s) return s;
  int64_t *idx = kiln_calloc((size_t)n, sizeof *idx), *tmp = kiln_calloc((size_t)n, sizeof *tmp);
  if (!idx || !tmp) {
    kiln_free(idx);
    kiln_free(tmp);
    return kiln_fail(KILN_E_NOMEM, "out of memory sorting %lld elements", (long long)n);
  }
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      topk_ord ord = {x, o * n * inner + i, inner, largest};
      for (int64_t j = 0; j < n; j++) idx[j] = j;
      topk_sort(idx, tmp, n, &ord);
      for (int64_t j = 0; j < k; j++) {
        int64_t at = (o * k + j) * inner + i;
        kiln_copy_elem(&c->out[0], at, x, ord.base + idx[j] * inner);
        if (c->n_out > 1) kiln_set_i(&c->out[1], at, idx[j]);
      }
    }
  kiln_free(idx);
  kiln_free(tmp);
  return KILN_OK;
}

/* --------------------------------------------------------------- CumSum */

static uint32_t cumsum_types(int opset) { return T_I32_64 | KILN_T(KILN_F32) | KILN_T(KILN_F64) |
                                                 (opset >= 14 ? KILN_T(KILN_F16) | T_BF : 0); }

static kiln_status cumsum_check(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = kiln_opc_opset(n, 11, 0, KILN_E_MODEL);
  if (!s) s = want_type(n->op_type, n->opset, "input", declared_type(g, n, 0), cumsum_types(n->opset));
  if (!s) s = want_flag(n, "exclusive", 11);
  if (!s) s = want_flag(n, "reverse", 11);
  if (!s) s = want_int_input(g, n, 1, "axis");
  return s;
}

static kiln_status cumsum_run(const kiln_op_call *c) {
  kiln_status s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  s = want_type("CumSum", c->opset, "input", x->dtype, cumsum_types(c->opset));
  if (s) return s;
  int64_t av;
  int na = 0;
  s = kiln_op_need(c, 1);
  if (s) return s;
  if (c->in[1]->numel != 1)
    return kiln_fail(KILN_E_INVALID_VALUE, "input 1 (axis) must hold one value, not %lld",
                     (long long)c->in[1]->numel);
  s = kiln_op_ints(c, 1, &av, 1, &na);
  if (s) return s;
  int axis;
  s = norm_axis(av, x->rank, KILN_E_INVALID_VALUE, "axis", &axis);
  if (s) return s;
  bool excl = kiln_attr_int(c->node, "exclusive", 0) != 0;
  bool rev = kiln_attr_int(c->node, "reverse", 0) != 0;
  kiln_tensor *y = &c->out[0];
  s = kiln_tensor_alloc(y, x->dtype, x->rank, x->dims);
  if (s) return s;
  int64_t outer, n, inner;
  split_axis(x, axis, &outer, &n, &inner);
  bool fl = kiln_dtype_is_float(x->dtype);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      double facc = 0;
      uint64_t iacc = 0;
      for (int64_t step = 0; step < n; step++) {
        int64_t j = rev ? n - 1 - step : step, at = (o * n + j) * inner + i;
        if (excl) {
          if (fl) kiln_set_f(y, at, facc);
          else kiln_set_i(y, at, (int64_t)iacc);
        }
        if (fl) facc += kiln_get_f(x, at);
        else iacc += (uint64_t)kiln_get_i(x, at);
        if (!excl) {
          if (fl) kiln_set_f(y, at, facc);
          else kiln_set_i(y, at, (int64_t)iacc);
        }
      }
    }
  return KILN_OK;
}

/* ---------------------------------------------------------------- table */

#define RED_ATTRS "axes keepdims noop_with_empty_axes"
#define RED_TYPES (T_F | T_BF | T_I32_64)
#define RED(name, types) {name, 1, 2, 1, 1, RED_ATTRS, types, red_run, red_check}

const kiln_op_def kiln_ref_ops_reduce[] = {
    RED("ReduceSum", RED_TYPES),
    RED("ReduceMean", RED_TYPES),
    RED("ReduceMax", RED_TYPES | KILN_T(KILN_I8) | KILN_T(KILN_U8)),
    RED("ReduceMin", RED_TYPES | KILN_T(KILN_I8) | KILN_T(KILN_U8)),
    RED("ReduceProd", RED_TYPES),
    RED("ReduceL1", RED_TYPES),
    RED("ReduceL2", RED_TYPES),
    RED("ReduceLogSum", RED_TYPES),
    RED("ReduceLogSumExp", RED_TYPES),
    RED("ReduceSumSquare", RED_TYPES),
    {"ArgMax", 1, 1, 1, 1, "axis keepdims select_last_index", T_F | T_BF | T_I32_64 | T_I8_16, arg_run,
     arg_check},
    {"ArgMin", 1, 1, 1, 1, "axis keepdims select_last_index", T_F | T_BF | T_I32_64 | T_I8_16, arg_run,
     arg_check},
    {"TopK", 1, 2, 2, 2, "axis k largest sorted", T_F | T_I32_64 | T_I8_16, topk_run, topk_check},
    {"CumSum", 2, 2, 1, 1, "exclusive reverse", T_F | T_BF | T_I32_64, cumsum_run, cumsum_check},
    {0},
};
