/* ir/shape_ops_elementwise: shape functions of the elementwise, activation,
 * comparison, logical and cast operators (see ir/shape.h). Values of small
 * integer tensors are tracked through the ops that do arithmetic on shapes
 * (Add Sub Mul Div Mod, Min Max, Neg Abs, Clip, Cast CastLike, Identity)
 * wherever the result is provably exact; elsewhere they stay unknown. */
#include <math.h>
#include <string.h>

#include "ir/shape.h"

/* ---- helpers ---- */

/* Marks every output data-dependent when one of inputs [0, n) is. */
static void inherit_dd(kiln_shape_call *c, int n) {
  bool dd = false;
  for (int i = 0; i < n && i < c->n_in; i++) dd |= c->in[i] && c->in[i]->data_dependent;
  for (int k = 0; k < c->n_out; k++) c->out[k].data_dependent |= dd;
}

/* Gives up tracking y's values (an error from an expression constructor,
 * e.g. an overflow, only means the values stay unknown). */
static kiln_status untracked(kiln_vshape *y) {
  kiln_error_clear();
  y->nvals = -1;
  return KILN_OK;
}

/* x >= k, resp. x <= k: provable by the simplifier (max(x,k) is x, which
 * knows every symbol is >= 1), or from the symbols' bounds. */
static bool provably_ge(kiln_symtab *t, kiln_dimx x, int64_t k) {
  kiln_dimx kk, m;
  int64_t lo, hi;
  if (!kiln_dimx_const(t, k, &kk) && !kiln_dimx_max(t, x, kk, &m) && m == x) return true;
  if (!kiln_dimx_range(t, x, &lo, &hi) && lo >= k) return true;
  kiln_error_clear();
  return false;
}

static bool provably_le(kiln_symtab *t, kiln_dimx x, int64_t k) {
  kiln_dimx kk, m;
  int64_t lo, hi;
  if (!kiln_dimx_const(t, k, &kk) && !kiln_dimx_min(t, x, kk, &m) && m == x) return true;
  if (!kiln_dimx_range(t, x, &lo, &hi) && hi <= k) return true;
  kiln_error_clear();
  return false;
}

/* Integer division (truncating, fmod: the remainder with the dividend's
 * sign) of constants p and q, as the reference computes it; false for a
 * zero divisor. */
static bool const_divmod(kiln_symtab *t, kiln_dimx p, kiln_dimx q, bool rem, kiln_dimx *out) {
  int64_t a, b;
  if (!kiln_dimx_is_const(t, p, &a) || !kiln_dimx_is_const(t, q, &b) || b == 0) return false;
  int64_t r = b == -1 ? (rem ? 0 : (int64_t)(0 - (uint64_t)a)) : rem ? a % b : a / b;
  return !kiln_dimx_const(t, r, out);
}

/* Range of an integer type, with values as kiln_get_i reads them (a u64
 * above INT64_MAX reads negative: such values are left out). */
static void int_range(kiln_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
  case KILN_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
  case KILN_U8: *lo = 0, *hi = UINT8_MAX; break;
  case KILN_I16: *lo = INT16_MIN, *hi = INT16_MAX; break;
  case KILN_U16: *lo = 0, *hi = UINT16_MAX; break;
  case KILN_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
  case KILN_U32: *lo = 0, *hi = UINT32_MAX; break;
  case KILN_U64: *lo = 0, *hi = INT64_MAX; break;
  default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

/* True when every value of x provably fits the integer type t unchanged. */
static bool vals_fit(kiln_symtab *tab, kiln_dtype t, const kiln_vshape *x) {
  if (t == KILN_I64) return true;
  int64_t lo, hi;
  int_range(t, &lo, &hi);
  for (int k = 0; k < x->nvals; k++)
    if (!provably_ge(tab, x->vals[k], lo) || !provably_le(tab, x->vals[k], hi)) return false;
  return true;
}

/* Requires inputs [first, first+n) and, with same, one dtype among them. */
static kiln_status need_inputs(const kiln_shape_call *c, int first, int n, bool same) {
  const kiln_vshape *x, *a;
  kiln_status s = kiln_shape_in(c, first, &a);
  for (int i = first + 1; i < first + n && !s; i++) {
    if ((s = kiln_shape_in(c, i, &x))) break;
    if (same && x->dtype != a->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has data type %s, input %d has %s; they must match", i,
                       kiln_dtype_name(x->dtype), first, kiln_dtype_name(a->dtype));
  }
  return s;
}

/* Requires input i to have dtype t. */
static kiln_status need_dtype(const kiln_shape_call *c, int i, kiln_dtype t) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, i, &x);
  if (!s && x->dtype != t)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has data type %s; %s requires %s", i,
                     kiln_dtype_name(x->dtype), c->node->op_type, kiln_dtype_name(t));
  return s;
}

/* out[0] = broadcast of inputs [first, first+n) (all required; one dtype
 * with same), of dtype dt. */
static kiln_status bcast(kiln_shape_call *c, int first, int n, bool same, kiln_dtype dt) {
  kiln_status s = need_inputs(c, first, n, same);
  if (s) return s;
  c->out[0].dtype = dt;
  if ((s = kiln_shape_broadcast(c, n, c->in + first, &c->out[0]))) return s;
  inherit_dd(c, first + n);
  return KILN_OK;
}

/* Value vectors of a and b broadcast against each other (equal lengths, or
 * one of length 1) into y, when both are tracked and y is 0-D/1-D:
 * returns their common length, or -1. */
static int vals_pair(const kiln_vshape *a, const kiln_vshape *b, const kiln_vshape *y) {
  if (!kiln_dtype_is_int(a->dtype) || a->nvals < 0 || b->nvals < 0 || y->rank > 1) return -1;
  int n = a->nvals > b->nvals ? a->nvals : b->nvals;
  if ((a->nvals != n && a->nvals != 1) || (b->nvals != n && b->nvals != 1)) return -1;
  return n;
}

static kiln_dimx val_at(const kiln_vshape *x, int k) { return x->vals[x->nvals == 1 ? 0 : k]; }

/* ---- unary ---- */

/* y has x's type and shape. */
static kiln_status same(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  kiln_shape_copy(&c->out[0], x);
  inherit_dd(c, 1);
  return KILN_OK;
}

/* Predicates (IsNaN, IsInf): x's shape, bool. */
static kiln_status predicate(kiln_shape_call *c) {
  kiln_status s = same(c);
  if (!s) c->out[0].dtype = KILN_BOOL;
  return s;
}

static kiln_status logical_not(kiln_shape_call *c) {
  kiln_status s = need_dtype(c, 0, KILN_BOOL);
  return s ? s : same(c);
}

/* Identity: the value itself, with its tracked values and constant data. */
static kiln_status identity(kiln_shape_call *c) {
  kiln_status s = same(c);
  if (s) return s;
  const kiln_vshape *x = c->in[0];
  kiln_vshape *y = &c->out[0];
  y->konst = x->konst;
  y->nvals = x->nvals;
  for (int k = 0; k < x->nvals; k++) y->vals[k] = x->vals[k];
  return KILN_OK;
}

/* Neg and Abs; values where the result provably does not wrap. */
static kiln_status neg_abs(kiln_shape_call *c) {
  kiln_status s = same(c);
  if (s) return s;
  const kiln_vshape *x = c->in[0];
  kiln_vshape *y = &c->out[0];
  if (!kiln_dtype_is_int(x->dtype) || x->nvals < 0) return KILN_OK;
  bool is_abs = c->node->op_type[0] == 'A';
  int64_t lo, hi;
  int_range(x->dtype, &lo, &hi);
  if (!kiln_dtype_is_signed(x->dtype) && !is_abs) return KILN_OK; /* unsigned Neg wraps */
  for (int k = 0; k < x->nvals; k++) {
    kiln_dimx v = x->vals[k];
    bool flip;
    if (!kiln_dtype_is_signed(x->dtype)) flip = false; /* unsigned Abs: x */
    else if (!is_abs || provably_le(c->tab, v, 0)) flip = true;
    else if (provably_ge(c->tab, v, 0)) flip = false;
    else return untracked(y);
    if (flip && !provably_ge(c->tab, v, -hi)) return untracked(y); /* -MIN wraps */
    if (!flip) y->vals[k] = v;
    else if ((s = kiln_dimx_mul_const(c->tab, v, -1, &y->vals[k]))) return untracked(y);
  }
  y->nvals = x->nvals;
  return KILN_OK;
}

/* ---- binary and variadic ---- */

/* Add, Sub, Mul, Div: numpy broadcasting; tracks values of small int
 * tensors (Div, which truncates, on constants, else only where floor
 * division agrees: a dividend >= 0 and a divisor >= 1). */
static kiln_status arith(kiln_shape_call *c) {
  kiln_status s = bcast(c, 0, 2, true, KILN_UNDEFINED);
  if (s) return s;
  const kiln_vshape *a = c->in[0], *b = c->in[1];
  kiln_vshape *y = &c->out[0];
  y->dtype = a->dtype;
  int n = vals_pair(a, b, y);
  const char *op = c->node->op_type;
  for (int k = 0; k < n; k++) {
    kiln_dimx p = val_at(a, k), q = val_at(b, k), r;
    if (op[0] == 'A') s = kiln_dimx_add(c->tab, p, q, &r);
    else if (op[0] == 'S') s = kiln_dimx_sub(c->tab, p, q, &r);
    else if (op[0] == 'M') s = kiln_dimx_mul(c->tab, p, q, &r);
    else if (const_divmod(c->tab, p, q, false, &r)) s = KILN_OK;
    else if (!provably_ge(c->tab, p, 0) || !provably_ge(c->tab, q, 1)) return untracked(y);
    else s = kiln_dimx_fdiv(c->tab, p, q, &r);
    if (s) return untracked(y);
    y->vals[k] = r;
  }
  y->nvals = n;
  if (n >= 0 && !vals_fit(c->tab, y->dtype, y)) return untracked(y);
  return KILN_OK;
}

/* Mod: fmod=0 is the floor remainder (the divisor's sign), as kiln_dimx_mod;
 * fmod=1 (truncated) agrees with it for a non-negative dividend and a
 * positive divisor. */
static kiln_status mod(kiln_shape_call *c) {
  kiln_status s = bcast(c, 0, 2, true, KILN_UNDEFINED);
  if (s) return s;
  const kiln_vshape *a = c->in[0], *b = c->in[1];
  kiln_vshape *y = &c->out[0];
  y->dtype = a->dtype;
  int64_t fm = kiln_attr_int(c->node, "fmod", 0);
  if (fm != 0 && fm != 1) return kiln_fail(KILN_E_MODEL, "fmod must be 0 or 1, not %lld", (long long)fm);
  if (!fm && kiln_dtype_is_float(a->dtype))
    return kiln_fail(KILN_E_MODEL, "Mod of %s values needs fmod=1", kiln_dtype_name(a->dtype));
  int n = vals_pair(a, b, y);
  for (int k = 0; k < n; k++) {
    kiln_dimx p = val_at(a, k), q = val_at(b, k);
    if (fm && const_divmod(c->tab, p, q, true, &y->vals[k])) continue;
    if (fm && (!provably_ge(c->tab, p, 0) || !provably_ge(c->tab, q, 1))) return untracked(y);
    if (!provably_ge(c->tab, q, 1) && !provably_le(c->tab, q, -1)) return untracked(y);
    if ((s = kiln_dimx_mod(c->tab, p, q, &y->vals[k]))) return untracked(y);
  }
  y->nvals = n;
  return KILN_OK;
}

/* Pow: the exponent may have another type; y has the base's. */
static kiln_status power(kiln_shape_call *c) {
  kiln_status s = bcast(c, 0, 2, false, KILN_UNDEFINED);
  if (!s) c->out[0].dtype = c->in[0]->dtype;
  return s;
}

/* BitShift: unsigned integers of one type. */
static kiln_status bitshift(kiln_shape_call *c) {
  kiln_status s = bcast(c, 0, 2, true, KILN_UNDEFINED);
  if (s) return s;
  c->out[0].dtype = c->in[0]->dtype;
  const char *dir = kiln_attr_string(c->node, "direction", NULL);
  if (!dir || (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT")))
    return kiln_fail(KILN_E_MODEL, "BitShift needs direction LEFT or RIGHT");
  return KILN_OK;
}

/* PRelu: slope broadcasts to X (unidirectionally); y has X's shape. */
static kiln_status prelu(kiln_shape_call *c) {
  kiln_status s = bcast(c, 0, 2, true, KILN_UNDEFINED);
  if (s) return s;
  const kiln_vshape *x = c->in[0];
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  if (y->rank != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "slope of rank %d does not broadcast to X of rank %d", c->in[1]->rank,
                     x->rank);
  for (int d = 0; d < x->rank; d++)
    if ((s = kiln_shape_unify(c, "slope broadcast to X", d, x->dims[d], y->dims[d], &y->dims[d]))) return s;
  return KILN_OK;
}

/* Comparisons: one input type, bool result. */
static kiln_status compare(kiln_shape_call *c) { return bcast(c, 0, 2, true, KILN_BOOL); }

/* And, Or, Xor: bool inputs and result. */
static kiln_status logic(kiln_shape_call *c) {
  kiln_status s = need_dtype(c, 0, KILN_BOOL);
  if (!s) s = need_dtype(c, 1, KILN_BOOL);
  return s ? s : bcast(c, 0, 2, true, KILN_BOOL);
}

/* Min, Max, Sum, Mean: any number of inputs of one type; Min/Max track
 * values. */
static kiln_status variadic(kiln_shape_call *c) {
  if (c->n_in < 1) return kiln_fail(KILN_E_MODEL, "%s needs at least one input", c->node->op_type);
  kiln_status s = bcast(c, 0, c->n_in, true, KILN_UNDEFINED);
  if (s) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = c->in[0]->dtype;
  const char *op = c->node->op_type;
  if (strcmp(op, "Min") && strcmp(op, "Max")) return KILN_OK;
  y->nvals = c->in[0]->nvals;
  if (y->rank > 1 || !kiln_dtype_is_int(y->dtype)) return untracked(y);
  for (int k = 0; k < y->nvals; k++) y->vals[k] = c->in[0]->vals[k];
  for (int i = 1; i < c->n_in && y->nvals >= 0; i++) {
    const kiln_vshape *b = c->in[i];
    int n = vals_pair(y, b, y);
    if (n < 0) return untracked(y);
    kiln_dimx acc[KILN_SHAPE_MAX_VALS];
    for (int k = 0; k < n; k++) {
      s = op[1] == 'i' ? kiln_dimx_min(c->tab, val_at(y, k), val_at(b, k), &acc[k])
                       : kiln_dimx_max(c->tab, val_at(y, k), val_at(b, k), &acc[k]);
      if (s) return untracked(y);
    }
    for (int k = 0; k < n; k++) y->vals[k] = acc[k];
    y->nvals = n;
  }
  return KILN_OK;
}

/* Where: bool condition; X and Y of one type; all three broadcast. */
static kiln_status where(kiln_shape_call *c) {
  kiln_status s = need_dtype(c, 0, KILN_BOOL);
  if (!s) s = need_inputs(c, 1, 2, true);
  if (!s) s = bcast(c, 0, 3, false, c->in[1]->dtype);
  return s;
}

/* ---- Clip, Cast, CastLike, Dropout ---- */

/* Clip: y has x's shape; from opset 11 the optional min/max inputs are
 * scalars of x's type. Tracks int values through min(max(x, lo), hi). */
static kiln_status clip(kiln_shape_call *c) {
  kiln_status s = same(c);
  if (s) return s;
  const kiln_vshape *x = c->in[0];
  kiln_vshape *y = &c->out[0];
  if (c->opset < 11) {
    if (c->n_in > 1) return kiln_fail(KILN_E_MODEL, "Clip before opset 11 takes one input (min/max are attributes)");
    return KILN_OK;
  }
  bool track = kiln_dtype_is_int(x->dtype) && x->nvals >= 0;
  if (track) {
    y->nvals = x->nvals;
    for (int k = 0; k < x->nvals; k++) y->vals[k] = x->vals[k];
  }
  for (int i = 1; i < 3 && i < c->n_in; i++) {
    const kiln_vshape *b = c->in[i];
    if (!b) continue;
    if (b->dtype != x->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "Clip %s has data type %s, the input %s", i == 1 ? "min" : "max",
                       kiln_dtype_name(b->dtype), kiln_dtype_name(x->dtype));
    for (int d = 0; d < b->rank; d++) {
      int64_t v;
      if (kiln_dimx_is_const(c->tab, b->dims[d], &v) && v != 1)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "Clip %s must be a scalar; dim %d is %lld", i == 1 ? "min" : "max",
                         d, (long long)v);
    }
    if (!track) continue;
    if (b->nvals != 1) return untracked(y);
    for (int k = 0; k < y->nvals; k++) {
      s = i == 1 ? kiln_dimx_max(c->tab, y->vals[k], b->vals[0], &y->vals[k])
                 : kiln_dimx_min(c->tab, y->vals[k], b->vals[0], &y->vals[k]);
      if (s) return untracked(y);
    }
  }
  return KILN_OK;
}

/* An integer value v converted to integer type t as kiln_set_i then
 * kiln_get_i would (wrapping). */
static int64_t wrap_int(kiln_dtype t, int64_t v) {
  switch (t) {
  case KILN_I8: return (int8_t)v;
  case KILN_U8: return (uint8_t)v;
  case KILN_I16: return (int16_t)v;
  case KILN_U16: return (uint16_t)v;
  case KILN_I32: return (int32_t)v;
  case KILN_U32: return (uint32_t)v;
  default: return v;
  }
}

/* A float converted to integer type t: truncated toward zero, saturated,
 * NaN to 0 (exactly as kiln_set_f stores it), read back as kiln_get_i. */
static int64_t float_to_int(kiln_dtype t, double v) {
  double lo, hi;
  switch (t) {
  case KILN_I8: lo = -128, hi = 127; break;
  case KILN_U8: lo = 0, hi = 255; break;
  case KILN_I16: lo = -32768, hi = 32767; break;
  case KILN_U16: lo = 0, hi = 65535; break;
  case KILN_I32: lo = -2147483648.0, hi = 2147483647.0; break;
  case KILN_U32: lo = 0, hi = 4294967295.0; break;
  case KILN_U64: lo = 0, hi = 1.8446744073709550e19; break;
  default: lo = -9.2233720368547758e18, hi = 9.2233720368547748e18; break;
  }
  if (isnan(v)) return 0;
  v = trunc(v);
  v = v < lo ? lo : v > hi ? hi : v;
  return t == KILN_U64 ? (int64_t)(uint64_t)v : (int64_t)v;
}

/* Values of x converted to integer type t into y, where exact. */
static kiln_status cast_vals(kiln_shape_call *c, const kiln_vshape *x, kiln_vshape *y, kiln_dtype t) {
  if (!kiln_dtype_is_int(t) || y->rank > 1) return KILN_OK;
  const kiln_tensor *k = x->konst;
  if (k && kiln_dtype_is_float(k->dtype) && k->rank <= 1 && k->numel <= KILN_SHAPE_MAX_VALS) {
    for (int64_t i = 0; i < k->numel; i++)
      if (kiln_dimx_const(c->tab, float_to_int(t, kiln_get_f(k, i)), &y->vals[i])) return untracked(y);
    y->nvals = (int)k->numel;
    return KILN_OK;
  }
  kiln_vshape kx; /* an int constant whose values were not tracked yet */
  if (k && kiln_dtype_is_int(k->dtype) && x->nvals < 0 && k->rank <= 1 && k->numel <= KILN_SHAPE_MAX_VALS) {
    kx = *x;
    kx.nvals = (int)k->numel;
    for (int64_t i = 0; i < k->numel; i++)
      if (kiln_dimx_const(c->tab, kiln_get_i(k, i), &kx.vals[i])) return untracked(y);
    x = &kx;
  }
  if (!kiln_dtype_is_int(x->dtype) || x->nvals < 0) return KILN_OK;
  bool fit = t == KILN_I64 || t == KILN_U64 || vals_fit(c->tab, t, x); /* 64 bits: the same bits */
  for (int i = 0; i < x->nvals; i++) {
    int64_t v;
    if (fit) y->vals[i] = x->vals[i];
    else if (!kiln_dimx_is_const(c->tab, x->vals[i], &v) || kiln_dimx_const(c->tab, wrap_int(t, v), &y->vals[i]))
      return untracked(y);
  }
  y->nvals = x->nvals;
  return KILN_OK;
}

static kiln_status cast_to(kiln_shape_call *c, kiln_dtype t) {
  kiln_status s = same(c);
  if (s) return s;
  c->out[0].dtype = t;
  return cast_vals(c, c->in[0], &c->out[0], t);
}

static kiln_status cast(kiln_shape_call *c) {
  const kiln_attr *a = kiln_node_attr(c->node, "to");
  if (!a || a->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "Cast needs the int attribute 'to'");
  if (a->i == KILN_STRING) return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "casting to strings is not supported");
  if (a->i <= 0 || a->i >= KILN_DTYPE_COUNT || !kiln_dtype_supported((kiln_dtype)a->i))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "cast target type %lld is not supported", (long long)a->i);
  return cast_to(c, (kiln_dtype)a->i);
}

static kiln_status castlike(kiln_shape_call *c) {
  const kiln_vshape *like;
  kiln_status s = kiln_shape_in(c, 1, &like);
  return s ? s : cast_to(c, like->dtype);
}

/* Dropout (inference): y = x; the optional mask has x's shape, bool from
 * opset 10 on (before, x's type). */
static kiln_status dropout(kiln_shape_call *c) {
  kiln_status s = same(c);
  if (s) return s;
  if (c->n_out > 1) {
    kiln_shape_copy(&c->out[1], c->in[0]);
    if (c->opset >= 10) c->out[1].dtype = KILN_BOOL;
  }
  return KILN_OK;
}

const kiln_shape_def kiln_shape_ops_elementwise[] = {
    /* unary: x's type and shape */
    {"Sqrt", same},
    {"Exp", same},
    {"Log", same},
    {"Reciprocal", same},
    {"Floor", same},
    {"Ceil", same},
    {"Relu", same},
    {"LeakyRelu", same},
    {"Elu", same},
    {"Selu", same},
    {"Sigmoid", same},
    {"HardSigmoid", same},
    {"Tanh", same},
    {"Softplus", same},
    {"Softsign", same},
    {"Erf", same},
    {"Sign", same},
    {"HardSwish", same},
    {"ThresholdedRelu", same},
    {"Celu", same},
    {"Round", same},
    {"Sin", same},
    {"Cos", same},
    {"Tan", same},
    {"Asin", same},
    {"Acos", same},
    {"Atan", same},
    {"Sinh", same},
    {"Cosh", same},
    {"Asinh", same},
    {"Acosh", same},
    {"Atanh", same},
    {"Shrink", same},
    {"Abs", neg_abs},
    {"Neg", neg_abs},
    {"IsNaN", predicate},
    {"IsInf", predicate},
    {"Not", logical_not},
    /* binary and variadic, numpy broadcasting */
    {"Add", arith},
    {"Sub", arith},
    {"Mul", arith},
    {"Div", arith},
    {"Mod", mod},
    {"Pow", power},
    {"PRelu", prelu},
    {"BitShift", bitshift},
    {"Min", variadic},
    {"Max", variadic},
    {"Sum", variadic},
    {"Mean", variadic},
    {"Equal", compare},
    {"Greater", compare},
    {"Less", compare},
    {"GreaterOrEqual", compare},
    {"LessOrEqual", compare},
    {"And", logic},
    {"Or", logic},
    {"Xor", logic},
    /* other */
    {"Where", where},
    {"Clip", clip},
    {"Cast", cast},
    {"CastLike", castlike},
    {"Identity", identity},
    {"Dropout", dropout},
    {NULL, NULL},
};
