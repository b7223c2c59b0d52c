/* ir/shape_ops_reduce: shape functions of the reductions and the ops that
 * scan along an axis: Reduce*, ArgMax ArgMin, TopK, CumSum (see ir/shape.h). */
#include <string.h>

#include "ir/shape.h"

/* Marks every output data-dependent when input 0 is. */
static void inherit_dd(kiln_shape_call *c) {
  for (int k = 0; k < c->n_out; k++) c->out[k].data_dependent |= c->in[0]->data_dependent;
}

/* Normalises axis into [0, rank); fails naming what. */
static kiln_status norm_axis(int64_t axis, int rank, const char *what, int *out) {
  *out = 0;
  if (axis < -rank || axis >= rank)
    return kiln_fail(KILN_E_MODEL, "%s %lld is out of range for an input of rank %d", what, (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return KILN_OK;
}

/* ---- Reduce* ---- */

/* The axes of a reduction. Before `since` (13 for ReduceSum, 18 for the
 * others) the attribute, from then on the optional input 1. *known is false
 * when the input is not a compile-time constant: then *na is the number of
 * axes when its length is a constant, else -1. */
static kiln_status red_axes(kiln_shape_call *c, int64_t *axes, int *na, bool *known) {
  int since = !strcmp(c->node->op_type, "ReduceSum") ? 13 : 18;
  *known = true;
  *na = 0;
  if (c->opset < since) {
    if (c->n_in > 1)
      return kiln_fail(KILN_E_MODEL, "%s-%d takes its axes as an attribute, not as input 1", c->node->op_type,
                       c->opset);
    size_t n = 0;
    const int64_t *av = kiln_attr_ints(c->node, "axes", &n);
    if (n > KILN_SHAPE_MAX_VALS) return kiln_fail(KILN_E_MODEL, "attribute 'axes' holds %zu axes", n);
    for (size_t i = 0; i < n; i++) axes[i] = av[i];
    *na = (int)n;
    return KILN_OK;
  }
  if (kiln_node_attr(c->node, "axes"))
    return kiln_fail(KILN_E_MODEL, "%s-%d takes its axes as input 1, not as an attribute", c->node->op_type,
                     c->opset);
  if (c->n_in < 2 || !c->in[1]) return KILN_OK;
  const kiln_vshape *a = c->in[1];
  if (a->dtype != KILN_I64 && a->dtype != KILN_I32)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input 1 (axes) must be int64, not %s", kiln_dtype_name(a->dtype));
  if (a->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (axes) must be 1-D, not of rank %d", a->rank);
  if (kiln_shape_const_ints(c, 1, axes, KILN_SHAPE_MAX_VALS, na)) return KILN_OK;
  int64_t len = 1;
  if (a->rank == 1 && !kiln_dimx_is_const(c->tab, a->dims[0], &len)) len = -1;
  *na = (int)len;
  *known = len == 0; /* an empty axes input needs no value */
  return KILN_OK;
}

/* The output shape when the axes are not known at compile time: with
 * keepdims each dim is x's or 1 (fresh symbols, except dims that are 1
 * anyway, and all-1 when every dim is reduced); without, the rank is
 * x's less the number of axes (or, when that is not a constant, the rank
 * the model declares for the output). */
static kiln_status red_unknown(kiln_shape_call *c, int na, bool keep) {
  const kiln_vshape *x = c->in[0];
  kiln_vshape *y = &c->out[0];
  kiln_status s;
  int r = x->rank, orank = r;
  if (na > r) return kiln_fail(KILN_E_MODEL, "input 1 (axes) holds %d axes for an input of rank %d", na, r);
  if (!keep && na >= 0) orank = r - na;
  if (!keep && na < 0) {
    int v = c->node->out[0];
    const kiln_type *ty = v >= 0 ? &c->graph->values[v].type : NULL;
    if (!ty || ty->kind != KILN_TYPE_TENSOR || ty->rank < 0 || ty->rank > r)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE,
                       "with keepdims=0 the output rank depends on the length of the axes input, "
                       "which is not known at compile time");
    orank = ty->rank;
  }
  y->rank = orank;
  for (int d = 0; d < orank; d++) {
    int64_t one;
    if (keep && (na == r || (kiln_dimx_is_const(c->tab, x->dims[d], &one) && one == 1)))
      s = kiln_dimx_const(c->tab, 1, &y->dims[d]);
    else s = kiln_shape_fresh(c, 0, d, &y->dims[d]);
    if (s) return s;
  }
  return KILN_OK;
}

/* Values of a reduced 0-D/1-D int64 vector: Sum, Prod, Max, Min of all its
 * elements (every dim reduced), or the vector itself (none reduced). */
static void red_vals(kiln_shape_call *c, int nred) {
  const kiln_vshape *x = c->in[0];
  kiln_vshape *y = &c->out[0];
  const char *op = c->node->op_type + 6;
  bool sum = !strcmp(op, "Sum"), prod = !strcmp(op, "Prod"), mx = !strcmp(op, "Max"), mn = !strcmp(op, "Min");
  if (x->dtype != KILN_I64 || x->nvals < 0 || !(sum || prod || mx || mn)) return;
  if (nred == 0 || x->rank == 0) {
    for (int k = 0; k < x->nvals; k++) y->vals[k] = x->vals[k];
    y->nvals = x->nvals;
    return;
  }
  if (x->nvals == 0 && (mx || mn)) return;
  kiln_dimx acc;
  kiln_status s = kiln_dimx_const(c->tab, prod ? 1 : 0, &acc);
  for (int k = 0; k < x->nvals && !s; k++) {
    kiln_dimx v = x->vals[k];
    if (sum) s = kiln_dimx_add(c->tab, acc, v, &acc);
    else if (prod) s = kiln_dimx_mul(c->tab, acc, v, &acc);
    else if (k == 0) acc = v;
    else if (mx) s = kiln_dimx_max(c->tab, acc, v, &acc);
    else s = kiln_dimx_min(c->tab, acc, v, &acc);
  }
  if (s) {
    kiln_error_clear(); /* e.g. an overflow: the value stays unknown */
    return;
  }
  y->vals[0] = acc;
  y->nvals = 1;
}

static kiln_status reduce(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  inherit_dd(c);
  int64_t kd = kiln_attr_int(c->node, "keepdims", 1), noop = kiln_attr_int(c->node, "noop_with_empty_axes", 0);
  if ((kd != 0 && kd != 1) || (noop != 0 && noop != 1))
    return kiln_fail(KILN_E_MODEL, "keepdims and noop_with_empty_axes must be 0 or 1");
  int64_t axes[KILN_SHAPE_MAX_VALS];
  int na;
  bool known;
  if ((s = red_axes(c, axes, &na, &known))) return s;
  if (!known) return red_unknown(c, na, kd != 0);
  if (na > x->rank)
    return kiln_fail(KILN_E_MODEL, "%d axes given for an input of rank %d", na, x->rank);
  bool red[KILN_MAX_RANK];
  for (int d = 0; d < x->rank; d++) red[d] = na == 0 && !noop;
  for (int i = 0; i < na; i++) {
    int a;
    if ((s = norm_axis(axes[i], x->rank, "axis", &a))) return s;
    if (red[a]) return kiln_fail(KILN_E_MODEL, "axis %lld is given twice", (long long)axes[i]);
    red[a] = true;
  }
  int r = 0, nred = 0;
  for (int d = 0; d < x->rank; d++) {
    nred += red[d];
    if (!red[d]) y->dims[r++] = x->dims[d];
    else if (kd && (s = kiln_dimx_const(c->tab, 1, &y->dims[r++]))) return s;
  }
  y->rank = r;
  red_vals(c, nred);
  return KILN_OK;
}

/* ---- ArgMax, ArgMin ---- */

static kiln_status argmaxmin(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  kiln_vshape *y = &c->out[0];
  int axis;
  if ((s = norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, "axis", &axis))) return s;
  bool keep = kiln_attr_int(c->node, "keepdims", 1) != 0;
  y->dtype = KILN_I64;
  y->rank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != axis) y->dims[y->rank++] = x->dims[d];
    else if (keep && (s = kiln_dimx_const(c->tab, 1, &y->dims[y->rank++]))) return s;
  inherit_dd(c);
  return KILN_OK;
}

/* ---- TopK ---- */

/* TopK's k as an expression: the attribute before opset 10, else input 1
 * (its tracked value, or a fresh data-dependent symbol for dim axis). */
static kiln_status topk_k(kiln_shape_call *c, int axis, kiln_dimx *k) {
  if (c->opset < 10) {
    const kiln_attr *a = kiln_node_attr(c->node, "k");
    if (!a || a->type != KILN_ATTR_INT) return kiln_fail(KILN_E_MODEL, "TopK-%d needs the attribute 'k'", c->opset);
    if (a->i < 0) return kiln_fail(KILN_E_MODEL, "attribute 'k' is %lld; it must not be negative", (long long)a->i);
    return kiln_dimx_const(c->tab, a->i, k);
  }
  const kiln_vshape *kin;
  kiln_status s = kiln_shape_in(c, 1, &kin);
  if (s) return s;
  if (kin->dtype != KILN_I64 && kin->dtype != KILN_I32)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input 1 (K) must be int64, not %s", kiln_dtype_name(kin->dtype));
  int64_t v;
  if (kin->rank > 1 || (kin->rank == 1 && kiln_dimx_is_const(c->tab, kin->dims[0], &v) && v != 1))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (K) must hold one value");
  int n;
  if (kiln_shape_const_ints(c, 1, &v, 1, &n) && n == 1) {
    if (v < 0) return kiln_fail(KILN_E_MODEL, "k is %lld; it must not be negative", (long long)v);
    return kiln_dimx_const(c->tab, v, k);
  }
  if (kin->nvals == 1) return *k = kin->vals[0], KILN_OK;
  if ((s = kiln_shape_fresh(c, 0, axis, k))) return s;
  if (c->n_out > 1) c->out[1].data_dependent = true;
  return KILN_OK;
}

static kiln_status topk(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  int axis;
  if ((s = norm_axis(kiln_attr_int(c->node, "axis", -1), x->rank, "axis", &axis))) return s;
  kiln_dimx k;
  if ((s = topk_k(c, axis, &k))) return s;
  int64_t kv, dv;
  if (kiln_dimx_is_const(c->tab, k, &kv) && kiln_dimx_is_const(c->tab, x->dims[axis], &dv) && kv > dv)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "k = %lld is larger than axis %d's length %lld", (long long)kv, axis,
                     (long long)dv);
  for (int o = 0; o < c->n_out && o < 2; o++) {
    kiln_shape_copy(&c->out[o], x);
    c->out[o].dims[axis] = k;
  }
  if (c->n_out > 1) c->out[1].dtype = KILN_I64;
  inherit_dd(c);
  return KILN_OK;
}

/* ---- CumSum ---- */

static kiln_status cumsum(kiln_shape_call *c) {
  const kiln_vshape *x, *a;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (!s) s = kiln_shape_in(c, 1, &a);
  if (s) return s;
  if (a->dtype != KILN_I64 && a->dtype != KILN_I32)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input 1 (axis) must be int64, not %s", kiln_dtype_name(a->dtype));
  if (a->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 1 (axis) must be a scalar, not of rank %d", a->rank);
  int64_t v;
  int n, axis;
  if (kiln_shape_const_ints(c, 1, &v, 1, &n) && n == 1 && (s = norm_axis(v, x->rank, "axis", &axis))) return s;
  kiln_shape_copy(&c->out[0], x);
  inherit_dd(c);
  return KILN_OK;
}

const kiln_shape_def kiln_shape_ops_reduce[] = {
    {"ReduceSum", reduce},
    {"ReduceMean", reduce},
    {"ReduceMax", reduce},
    {"ReduceMin", reduce},
    {"ReduceProd", reduce},
    {"ReduceL1", reduce},
    {"ReduceL2", reduce},
    {"ReduceLogSum", reduce},
    {"ReduceLogSumExp", reduce},
    {"ReduceSumSquare", reduce},
    {"ArgMax", argmaxmin},
    {"ArgMin", argmaxmin},
    {"TopK", topk},
    {"CumSum", cumsum},
    {NULL, NULL},
};
