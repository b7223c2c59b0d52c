/* fuse/opinfo: what fusion needs to know of single nodes — which inputs are
 * data, the axes a reduction reduces, whether a view is an index map and its
 * concrete movement op — and symbolic shape comparisons. */
#include <stdio.h>
#include <string.h>

#include "fuse/fuse_impl.h"

static void say(char *why, size_t size, const char *fmt, const char *a, const char *b) {
  if (why && size) snprintf(why, size, fmt, a, b);
}

bool kiln_fuse_data_input(const kiln_node *n, int k) {
  static const char *const first_only[] = {"Reshape", "Expand",  "Slice",   "Gather",   "Split", "Squeeze",
                                           "Unsqueeze", "Pad",   "Tile",    "CastLike", "Dropout", "Resize",
                                           "Upsample", "TopK",   "OneHot",  "ConstantOfShape"};
  if (k < 0 || k >= n->n_in || n->in[k] < 0) return false;
  if (k == 0) return true;
  if (!strncmp(n->op_type, "Reduce", 6)) return false;
  for (size_t i = 0; i < sizeof first_only / sizeof *first_only; i++)
    if (!strcmp(n->op_type, first_only[i])) return false;
  return true;
}

/* The integer values of value v, when known: a constant, or tracked
 * symbolic values evaluated at vals. */
static bool known_ints(const kiln_shapes *sh, const int64_t *vals, int n_vals, int v, int64_t *out, int max,
                       int *cnt) {
  const kiln_vshape *x = &sh->v[v];
  if (x->konst) {
    if (!kiln_dtype_is_int(x->konst->dtype) || kiln_tensor_ints(x->konst, out, max, cnt)) {
      kiln_error_clear();
      return false;
    }
    return true;
  }
  if (x->nvals < 0 || x->nvals > max) return false;
  for (int i = 0; i < x->nvals; i++)
    if (kiln_dimx_eval(sh->tab, x->vals[i], vals, n_vals, &out[i])) {
      kiln_error_clear();
      return false;
    }
  *cnt = x->nvals;
  return true;
}

/* Whether value v's integer values are known at compile time (possibly as
 * symbolic expressions). */
static bool ints_known(const kiln_shapes *sh, int v) {
  const kiln_vshape *x = &sh->v[v];
  return (x->konst && kiln_dtype_is_int(x->konst->dtype) && x->konst->rank <= 1) || x->nvals >= 0;
}

static bool range_axes(int rank, int64_t axis, bool *red, char *why, size_t size, const char *op) {
  int a;
  if (kiln_norm_axis(axis, rank, &a)) {
    kiln_error_clear();
    say(why, size, "%s: axis out of range%s", op, "");
    return false;
  }
  for (int d = 0; d < rank; d++) red[d] = d >= a;
  return true;
}

bool kiln_fuse_red_axes(const kiln_graph *g, const kiln_shapes *sh, const kiln_node *n, bool *red, int *n_red,
                        char *why, size_t size) {
  (void)g;
  if (n->n_in < 1 || n->in[0] < 0) {
    say(why, size, "%s has no data input%s", n->op_type, "");
    return false;
  }
  int rank = sh->v[n->in[0]].rank;
  if (rank < 0 || rank > KILN_MAX_RANK) {
    say(why, size, "%s: input rank unknown%s", n->op_type, "");
    return false;
  }
  for (int d = 0; d < KILN_MAX_RANK; d++) red[d] = false;
  *n_red = 2;
  const char *op = n->op_type;
  if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) {
    if (rank < 1) {
      say(why, size, "%s of a scalar%s", op, "");
      return false;
    }
    if (n->opset >= 13) {
      int a;
      if (kiln_norm_axis(kiln_attr_int(n, "axis", -1), rank, &a)) {
        kiln_error_clear();
        say(why, size, "%s: axis out of range%s", op, "");
        return false;
      }
      red[a] = true;
      return true;
    }
    return range_axes(rank, kiln_attr_int(n, "axis", 1), red, why, size, op);
  }
  if (!strcmp(op, "LayerNormalization")) return rank >= 1 && range_axes(rank, kiln_attr_int(n, "axis", -1), red, why, size, op);
  if (!strcmp(op, "InstanceNormalization")) {
    if (rank < 3) {
      say(why, size, "%s needs rank >= 3%s", op, "");
      return false;
    }
    return range_axes(rank, 2, red, why, size, op);
  }
  if (strncmp(op, "Reduce", 6)) {
    say(why, size, "%s is not a reduction with a kernel-spec form%s", op, "");
    return false;
  }
  *n_red = !strcmp(op, "ReduceLogSumExp") ? 2 : 1;
  int since = !strcmp(op, "ReduceSum") ? 13 : 18;
  int64_t axes[KILN_SHAPE_MAX_VALS];
  int na = 0;
  bool noop = false;
  if (n->opset >= since) {
    noop = kiln_attr_int(n, "noop_with_empty_axes", 0) != 0;
    if (n->n_in > 1 && n->in[1] >= 0 && !known_ints(sh, NULL, 0, n->in[1], axes, KILN_SHAPE_MAX_VALS, &na)) {
      say(why, size, "%s: axes not known at compile time%s", op, "");
      return false;
    }
  } else {
    size_t cnt = 0;
    const int64_t *av = kiln_attr_ints(n, "axes", &cnt);
    if (cnt > KILN_SHAPE_MAX_VALS) return false;
    for (size_t i = 0; i < cnt; i++) axes[i] = av[i];
    na = (int)cnt;
  }
  for (int d = 0; d < rank; d++) red[d] = na == 0 && !noop;
  for (int i = 0; i < na; i++) {
    int a;
    if (kiln_norm_axis(axes[i], rank, &a) || red[a]) {
      kiln_error_clear();
      say(why, size, "%s: bad axes%s", op, "");
      return false;
    }
    red[a] = true;
  }
  return true;
}

bool kiln_fuse_view_known(const kiln_graph *g, const kiln_shapes *sh, const kiln_node *n, char *why, size_t size) {
  (void)g;
  const char *op = n->op_type;
  if (!strcmp(op, "Gather")) {
    const kiln_tensor *k = n->n_in > 1 && n->in[1] >= 0 ? sh->v[n->in[1]].konst : NULL;
    if (k && k->rank == 0 && kiln_dtype_is_int(k->dtype)) return true;
    say(why, size, "%s with indices that are not one constant scalar is not an index map%s", op, "");
    return false;
  }
  if (!strcmp(op, "Slice")) {
    if (n->opset < 10) return kiln_node_attr(n, "starts") && kiln_node_attr(n, "ends");
    for (int k = 1; k < n->n_in && k < 5; k++)
      if (n->in[k] >= 0 && !ints_known(sh, n->in[k])) {
        say(why, size, "%s with run-time starts, ends, axes or steps is not an index map%s", op, "");
        return false;
      }
    return true;
  }
  if (!strcmp(op, "Split")) {
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] < 0) {
        say(why, size, "%s with an omitted output is not an index map%s", op, "");
        return false;
      }
    return true;
  }
  if (!strcmp(op, "Pad")) {
    const char *mode = kiln_attr_string(n, "mode", "constant");
    bool ok = !strcmp(mode, "constant");
    if (ok && n->opset < 11) ok = kiln_node_attr(n, "pads") != NULL;
    if (ok && n->opset >= 11) {
      ok = n->n_in > 1 && n->in[1] >= 0 && ints_known(sh, n->in[1]);
      if (ok && n->n_in > 2 && n->in[2] >= 0) ok = sh->v[n->in[2]].konst && sh->v[n->in[2]].konst->numel == 1;
      if (ok && n->n_in > 3 && n->in[3] >= 0) ok = false;
    }
    if (!ok) say(why, size, "%s (mode %s, or run-time pads) is not an index map", op, mode);
    return ok;
  }
  return true;
}

/* Concrete dims of value v at vals. */
static kiln_status dims_of(const kiln_shapes *sh, const int64_t *vals, int n_vals, int v, int64_t *dims) {
  const kiln_vshape *x = &sh->v[v];
  for (int d = 0; d < x->rank; d++) {
    kiln_status s = kiln_dimx_eval(sh->tab, x->dims[d], vals, n_vals, &dims[d]);
    if (s) return s;
  }
  return KILN_OK;
}

kiln_status kiln_fuse_view_op(const kiln_graph *g, const kiln_shapes *sh, const int64_t *vals, int n_vals,
                              const kiln_node *n, int k, kiln_view_op *op, double *pad) {
  (void)g;
  memset(op, 0, sizeof *op);
  *pad = 0;
  const char *t = n->op_type;
  kiln_status s;
  int w = k < n->n_out ? n->out[k] : -1;
  if (w < 0) return kiln_fail(KILN_E_INTERNAL, "%s: output %d is not a view", t, k);
  int orank = sh->v[w].rank;
  if (!strcmp(t, "Reshape") || !strcmp(t, "Flatten") || !strcmp(t, "Squeeze") || !strcmp(t, "Unsqueeze") ||
      !strcmp(t, "Identity") || !strcmp(t, "Expand")) {
    op->kind = !strcmp(t, "Expand") ? KILN_VOP_EXPAND : KILN_VOP_RESHAPE;
    op->n = orank;
    return dims_of(sh, vals, n_vals, w, op->shape);
  }
  if (!strcmp(t, "Transpose")) {
    size_t np;
    const int64_t *perm = kiln_attr_ints(n, "perm", &np);
    if (np > KILN_MAX_RANK) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Transpose: perm too long");
    op->kind = KILN_VOP_TRANSPOSE;
    op->n = perm ? (int)np : 0;
    if (perm) memcpy(op->perm, perm, sizeof(int64_t) * np);
    return KILN_OK;
  }
  if (!strcmp(t, "Gather")) {
    op->kind = KILN_VOP_GATHER;
    op->axis = kiln_attr_int(n, "axis", 0);
    const kiln_tensor *ix = n->n_in > 1 && n->in[1] >= 0 ? sh->v[n->in[1]].konst : NULL;
    if (!ix || ix->numel != 1) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Gather: index is not a constant scalar");
    op->index = kiln_get_i(ix, 0);
    return KILN_OK;
  }
  if (!strcmp(t, "Split")) {
    int axis;
    if ((s = kiln_norm_axis(kiln_attr_int(n, "axis", 0), orank, &axis))) return s;
    int64_t dims[KILN_MAX_RANK];
    int64_t start = 0;
    for (int j = 0; j <= k; j++) {
      if (n->out[j] < 0) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Split: output %d omitted", j);
      if ((s = dims_of(sh, vals, n_vals, n->out[j], dims))) return s;
      if (j < k) start += dims[axis];
    }
    op->kind = KILN_VOP_SPLIT;
    op->axis = axis;
    op->start = start;
    op->len = dims[axis];
    return KILN_OK;
  }
  if (!strcmp(t, "Slice")) {
    int ns = 0, ne = 0, na = -1, nsp = -1;
    op->kind = KILN_VOP_SLICE;
    if (n->opset < 10) {
      size_t c1, c2, c3;
      const int64_t *a1 = kiln_attr_ints(n, "starts", &c1), *a2 = kiln_attr_ints(n, "ends", &c2),
                    *a3 = kiln_attr_ints(n, "axes", &c3);
      if (!a1 || !a2 || c1 != c2 || c1 > KILN_MAX_RANK || (a3 && c3 != c1))
        return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Slice: bad starts/ends/axes");
      ns = ne = (int)c1;
      memcpy(op->starts, a1, c1 * sizeof(int64_t));
      memcpy(op->ends, a2, c2 * sizeof(int64_t));
      if (a3) {
        na = (int)c3;
        memcpy(op->axes, a3, c3 * sizeof(int64_t));
      }
    } else {
      int64_t *dst[4] = {op->starts, op->ends, op->axes, op->steps};
      int *cnt[4] = {&ns, &ne, &na, &nsp};
      for (int i = 0; i < 4; i++) {
        int v = i + 1 < n->n_in ? n->in[i + 1] : -1;
        if (v < 0) {
          if (i < 2) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Slice: starts or ends omitted");
          continue;
        }
        if (!known_ints(sh, vals, n_vals, v, dst[i], KILN_MAX_RANK, cnt[i]))
          return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Slice: input %d not known", i + 1);
      }
    }
    if (ns != ne || (na >= 0 && na != ns) || (nsp >= 0 && nsp != ns))
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Slice: starts, ends, axes and steps differ in length");
    op->n = ns;
    op->has_axes = na >= 0;
    op->has_steps = nsp >= 0;
    return KILN_OK;
  }
  if (!strcmp(t, "Pad")) {
    int r = sh->v[n->in[0]].rank, np = 0;
    op->kind = KILN_VOP_PAD;
    if (n->opset < 11) {
      size_t c;
      const int64_t *p = kiln_attr_ints(n, "pads", &c);
      if (!p || c != (size_t)(2 * r)) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Pad: bad pads");
      memcpy(op->pads, p, c * sizeof(int64_t));
      *pad = kiln_attr_float(n, "value", 0.0f);
      return KILN_OK;
    }
    if (!known_ints(sh, vals, n_vals, n->in[1], op->pads, 2 * KILN_MAX_RANK, &np) || np != 2 * r)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Pad: pads not known");
    if (n->n_in > 2 && n->in[2] >= 0) {
      const kiln_tensor *cv = sh->v[n->in[2]].konst;
      if (!cv || cv->numel != 1) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "Pad: constant_value not known");
      *pad = kiln_get_f(cv, 0);
    }
    return KILN_OK;
  }
  return kiln_fail(KILN_E_INTERNAL, "%s is not a view", t);
}

bool kiln_fuse_dim_eq(kiln_symtab *tab, kiln_dimx a, kiln_dimx b) {
  if (a == b) return true;
  kiln_dimx x, y;
  if (kiln_dimx_subst(tab, a, NULL, 0, &x) || kiln_dimx_subst(tab, b, NULL, 0, &y)) {
    kiln_error_clear();
    return false;
  }
  return x == y;
}

bool kiln_fuse_dim_is(kiln_symtab *tab, kiln_dimx a, int64_t v) {
  int64_t c;
  if (kiln_dimx_is_const(tab, a, &c)) return c == v;
  kiln_dimx x;
  if (kiln_dimx_subst(tab, a, NULL, 0, &x)) {
    kiln_error_clear();
    return false;
  }
  return kiln_dimx_is_const(tab, x, &c) && c == v;
}

bool kiln_fuse_shape_eq(kiln_symtab *tab, int ra, const kiln_dimx *a, int rb, const kiln_dimx *b) {
  if (ra != rb) return false;
  for (int d = 0; d < ra; d++)
    if (!kiln_fuse_dim_eq(tab, a[d], b[d])) return false;
  return true;
}

bool kiln_fuse_numel(kiln_symtab *tab, int rank, const kiln_dimx *dims, kiln_dimx *out) {
  kiln_dimx x;
  if (kiln_dimx_const(tab, 1, &x)) {
    kiln_error_clear();
    return false;
  }
  for (int d = 0; d < rank; d++)
    if (kiln_dimx_mul(tab, x, dims[d], &x)) {
      kiln_error_clear();
      return false;
    }
  *out = x;
  return true;
}

const char *kiln_fuse_dims_str(kiln_symtab *tab, int rank, const kiln_dimx *dims, char *buf, size_t size) {
  size_t at = 0;
  if (!size) return buf;
  buf[0] = 0;
  at += (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < rank && at < size; d++) {
    char one[64];
    at += (size_t)snprintf(buf + at, size - at, "%s%s", d ? "," : "", kiln_dimx_str(tab, dims[d], one, sizeof one));
  }
  if (at < size) snprintf(buf + at, size - at, "]");
  return buf;
}

const char *kiln_fuse_node_str(const kiln_graph *g, int node, char *buf, size_t size) {
  char lbl[96];
  const kiln_node *n = &g->nodes[node];
  if (n->name && *n->name) snprintf(lbl, sizeof lbl, "'%s'", n->name);
  else snprintf(lbl, sizeof lbl, "#%d", node);
  snprintf(buf, size, "%s %s", n->op_type, lbl);
  return buf;
}
