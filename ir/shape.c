/* ir/shape: the inference driver and the helpers shape functions share. */
#include "ir/shape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"

#define MAX_ROUNDS 4

static const kiln_shape_def *const tables[] = {kiln_shape_ops_elementwise, kiln_shape_ops_shape,
                                                kiln_shape_ops_nn, kiln_shape_ops_nn_mm,
                                                kiln_shape_ops_nn_extra, kiln_shape_ops_reduce,
                                                kiln_shape_ops_signal};

/* The domains besides ONNX's default one, each with its table only. */
static const struct {
  const char *domain;
  const kiln_shape_def *ops;
} domains[] = {{KILN_DOMAIN, kiln_shape_ops_kiln}, {KILN_DOMAIN_TRAINING, kiln_shape_ops_train}};

const kiln_shape_def *kiln_shape_find(const char *domain, const char *op_type) {
  for (size_t k = 0; domain && k < sizeof domains / sizeof *domains; k++) {
    if (strcmp(domain, domains[k].domain)) continue;
    for (const kiln_shape_def *d = domains[k].ops; d->op_type; d++)
      if (!strcmp(d->op_type, op_type)) return d;
    return NULL;
  }
  if (domain && *domain && strcmp(domain, "ai.onnx")) return NULL;
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (const kiln_shape_def *d = tables[t]; d->op_type; d++)
      if (!strcmp(d->op_type, op_type)) return d;
  return NULL;
}

void kiln_shapes_free(kiln_shapes *s) {
  if (!s) return;
  kiln_symtab_free(s->tab);
  kiln_free(s->v);
  kiln_free(s);
}

/* ---- helpers ---- */

void kiln_shape_copy(kiln_vshape *out, const kiln_vshape *in) {
  out->dtype = in->dtype;
  out->rank = in->rank;
  for (int d = 0; d < in->rank; d++) out->dims[d] = in->dims[d];
}

kiln_status kiln_shape_set(kiln_shape_call *c, kiln_vshape *out, kiln_dtype dt, int rank, const int64_t *dims) {
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "rank %d is beyond kiln's maximum of %d", rank, KILN_MAX_RANK);
  out->dtype = dt;
  out->rank = rank;
  for (int d = 0; d < rank; d++) {
    kiln_status s = kiln_dimx_const(c->tab, dims[d], &out->dims[d]);
    if (s) return s;
  }
  return KILN_OK;
}

kiln_status kiln_shape_in(const kiln_shape_call *c, int i, const kiln_vshape **out) {
  if (i >= c->n_in || !c->in[i]) return kiln_fail(KILN_E_MODEL, "required input %d is missing", i);
  *out = c->in[i];
  return KILN_OK;
}

kiln_status kiln_shape_unify(kiln_shape_call *c, const char *what, int d, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  kiln_status s = kiln_dim_unify(c->tab, a, b, out);
  if (s) kiln_error_prefix("%s, dim %d", what, d);
  return s;
}

kiln_status kiln_shape_broadcast(kiln_shape_call *c, int n, const kiln_vshape *const *ins, kiln_vshape *out) {
  int r = 0;
  for (int i = 0; i < n; i++)
    if (ins[i] && ins[i]->rank > r) r = ins[i]->rank;
  kiln_dimx one;
  kiln_status s = kiln_dimx_const(c->tab, 1, &one);
  if (s) return s;
  for (int d = 0; d < r; d++) {
    kiln_dimx acc = one;
    for (int i = 0; i < n; i++) {
      const kiln_vshape *x = ins[i];
      if (!x) continue;
      int k = d - (r - x->rank);
      if (k < 0) continue;
      kiln_dimx v = x->dims[k];
      if (v == one) continue;
      if (acc == one) {
        acc = v;
        continue;
      }
      if (acc == v) continue;
      char what[64];
      snprintf(what, sizeof what, "broadcasting input %d", i);
      if ((s = kiln_shape_unify(c, what, k, acc, v, &acc))) return s;
    }
    out->dims[d] = acc;
  }
  out->rank = r;
  return KILN_OK;
}

bool kiln_shape_const_ints(const kiln_shape_call *c, int i, int64_t *vals, int max, int *n) {
  if (i >= c->n_in || !c->in[i]) return false;
  const kiln_vshape *x = c->in[i];
  if (x->konst) {
    const kiln_tensor *t = x->konst;
    if (!kiln_dtype_is_int(t->dtype) || t->rank > 1 || t->numel > max) return false;
    for (int64_t k = 0; k < t->numel; k++) vals[k] = kiln_get_i(t, k);
    *n = (int)t->numel;
    return true;
  }
  if (x->nvals < 0 || x->nvals > max) return false;
  for (int k = 0; k < x->nvals; k++)
    if (!kiln_dimx_is_const(c->tab, x->vals[k], &vals[k])) return false;
  *n = x->nvals;
  return true;
}

kiln_status kiln_shape_fresh(kiln_shape_call *c, int k, int d, kiln_dimx *out) {
  char name[300];
  int v = k < c->node->n_out ? c->node->out[k] : -1;
  const char *vn = v >= 0 ? c->graph->values[v].name : "?";
  snprintf(name, sizeof name, "?%.200s:%d", vn, d);
  c->out[k].data_dependent = true;
  return kiln_dimx_sym_data(c->tab, name, out);
}

/* ---- the driver ---- */

static kiln_status init_values(const kiln_graph *g, kiln_shapes *sh) {
  kiln_symtab *tab = sh->tab;
  kiln_status s;
  for (int v = 0; v < g->n_values; v++) {
    kiln_vshape *x = &sh->v[v];
    x->rank = -1;
    x->nvals = -1;
  }
  /* symbol bounds from metadata_props: kiln.bound.<dim_param> = max */
  for (int i = 0; i < g->n_props; i++) {
    const char *k = g->prop_keys[i];
    if (strncmp(k, "kiln.bound.", 11) || !k[11]) continue;
    char *end;
    long long m = strtoll(g->prop_vals[i], &end, 10);
    if (*end || m < 1)
      return kiln_fail(KILN_E_MODEL, "metadata %s = '%s' is not a positive integer", k, g->prop_vals[i]);
    kiln_dimx x;
    if ((s = kiln_dimx_sym(tab, k + 11, &x))) return s;
    if ((s = kiln_sym_set_max(tab, kiln_dimx_as_sym(tab, x), m))) return s;
  }
  for (int v = 0; v < g->n_values; v++) {
    const kiln_value *val = &g->values[v];
    kiln_vshape *x = &sh->v[v];
    if (val->init) {
      const kiln_tensor *t = val->init;
      x->konst = t;
      x->dtype = t->dtype;
      x->rank = t->rank;
      for (int d = 0; d < t->rank; d++)
        if ((s = kiln_dimx_const(tab, t->dims[d], &x->dims[d]))) return s;
      if (kiln_dtype_is_int(t->dtype) && t->rank <= 1 && t->numel <= KILN_SHAPE_MAX_VALS) {
        x->nvals = (int)t->numel;
        for (int64_t k = 0; k < t->numel; k++)
          if ((s = kiln_dimx_const(tab, kiln_get_i(t, k), &x->vals[k]))) return s;
      }
      continue;
    }
    if (!val->is_input) continue;
    const kiln_type *ty = &val->type;
    if (ty->kind != KILN_TYPE_TENSOR || ty->dtype == KILN_UNDEFINED || ty->rank < 0)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "graph input '%s' has no declared tensor type and rank", val->name);
    x->dtype = ty->dtype;
    x->rank = ty->rank;
    for (int d = 0; d < ty->rank; d++) {
      if (ty->dims[d].value >= 0) s = kiln_dimx_const(tab, ty->dims[d].value, &x->dims[d]);
      else if (ty->dims[d].param) s = kiln_dimx_sym(tab, ty->dims[d].param, &x->dims[d]);
      else {
        char name[300];
        snprintf(name, sizeof name, "%.200s:%d", val->name, d);
        s = kiln_dimx_sym(tab, name, &x->dims[d]);
      }
      if (s) return s;
    }
  }
  return KILN_OK;
}

/* Replaces symbols that unification gave values by those values. */
static kiln_status subst_value(kiln_symtab *tab, kiln_vshape *x) {
  kiln_status s;
  for (int d = 0; d < x->rank; d++)
    if ((s = kiln_dimx_subst(tab, x->dims[d], NULL, 0, &x->dims[d]))) return s;
  for (int k = 0; k < x->nvals; k++)
    if ((s = kiln_dimx_subst(tab, x->vals[k], NULL, 0, &x->vals[k]))) return s;
  return KILN_OK;
}

static kiln_status forward(const kiln_graph *g, kiln_shapes *sh) {
  kiln_status s = KILN_OK;
  for (int i = 0; i < g->n_nodes && !s; i++) {
    const kiln_node *n = &g->nodes[i];
    char lbl[256];
    kiln_node_label(g, n, lbl, sizeof lbl);
    const kiln_shape_def *d = kiln_shape_find(n->domain, n->op_type);
    if (!d) return kiln_fail(KILN_E_UNSUPPORTED_OP, "node %s: no shape inference for operator %s", lbl, n->op_type);
    const kiln_vshape **ins = kiln_calloc((size_t)n->n_in + 1, sizeof *ins);
    kiln_vshape *outs = kiln_calloc((size_t)n->n_out + 1, sizeof *outs);
    if (!ins || !outs) s = kiln_fail(KILN_E_NOMEM, "out of memory inferring shapes");
    for (int k = 0; k < n->n_in && !s; k++) {
      int v = n->in[k];
      if (v < 0) continue;
      if ((s = subst_value(sh->tab, &sh->v[v]))) break;
      if (sh->v[v].rank < 0)
        s = kiln_fail(KILN_E_INTERNAL, "input '%s' has no shape yet", g->values[v].name);
      ins[k] = &sh->v[v];
    }
    for (int k = 0; k < n->n_out && !s; k++) {
      outs[k].rank = -1;
      outs[k].nvals = -1;
    }
    if (!s) {
      kiln_shape_call c = {g, n, n->opset, sh->tab, n->n_in, ins, n->n_out, outs};
      s = d->fn(&c);
    }
    for (int k = 0; k < n->n_out && !s; k++) {
      int v = n->out[k];
      if (v < 0) continue;
      if (outs[k].rank < 0 || outs[k].dtype == KILN_UNDEFINED) {
        s = kiln_fail(KILN_E_INTERNAL, "the shape function left output %d undefined", k);
        break;
      }
      /* no tensor holds 2^63 elements: an output whose known dims multiply
         past that (a Reshape to a huge dim whose product a shape function
         could not compare) is refused here, before any later pass counts
         its elements in an int64 */
      int64_t numel = 1, d;
      bool all_known = true;
      for (int i = 0; i < outs[k].rank && all_known; i++)
        if ((all_known = kiln_dimx_is_const(sh->tab, outs[k].dims[i], &d)) && d >= 0 &&
            __builtin_mul_overflow(numel, d, &numel)) {
          s = kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "output %d's dimensions multiply past 2^63 elements", k);
          break;
        }
      if (s) break;
      sh->v[v] = outs[k];
    }
    if (s) kiln_error_prefix("node %s (%s)", lbl, n->op_type);
    kiln_free(ins);
    kiln_free(outs);
  }
  return s;
}

/* When a - b depends on exactly one symbol without a value, linearly
 * (c*s + k, c != 0), and has an integer root s >= 1 within the symbol's
 * bound, records s: the backward step that learns, say, a Concat input's
 * unknown dim from its output's declared size. Returns whether it did. */
static bool solve_linear(kiln_symtab *tab, kiln_dimx a, kiln_dimx b) {
  kiln_dimx diff;
  if (kiln_dimx_sub(tab, a, b, &diff)) {
    kiln_error_clear();
    return false;
  }
  int n = kiln_symtab_nsyms(tab);
  int64_t *vals = kiln_calloc((size_t)n + 1, sizeof *vals);
  if (!vals) return false;
  bool solved = false;
  for (int k = 0; k < n && !solved; k++) {
    int64_t known, f1, f2, f3;
    if (kiln_sym_value(tab, k, &known)) continue;
    for (int j = 0; j < n; j++) vals[j] = KILN_DIM_UNSET;
    vals[k] = 1;
    if (kiln_dimx_eval(tab, diff, vals, n, &f1)) continue; /* another free symbol: not ours to solve */
    vals[k] = 2;
    if (kiln_dimx_eval(tab, diff, vals, n, &f2)) continue;
    vals[k] = 3;
    if (kiln_dimx_eval(tab, diff, vals, n, &f3)) continue;
    int64_t c = f2 - f1;
    if (c == 0 || f3 - f2 != c || f1 % c) continue; /* constant in s, not linear, or no integer root */
    int64_t root = 1 - f1 / c, max, check;
    if (root < 1 || (kiln_sym_max(tab, k, &max) && root > max)) continue;
    vals[k] = root;
    if (kiln_dimx_eval(tab, diff, vals, n, &check) || check != 0) continue;
    kiln_dimx sym, val, u;
    if (kiln_dimx_sym(tab, kiln_sym_name(tab, k), &sym) || kiln_dimx_const(tab, root, &val) ||
        kiln_dim_unify(tab, sym, val, &u))
      continue;
    solved = true;
  }
  kiln_error_clear();
  kiln_free(vals);
  return solved;
}

/* Unifies inferred shapes with every shape the model declares for a value
 * it does not feed in: graph outputs and value_info. Declared dim_params
 * are unified only when they name a symbol the inputs introduced (export
 * tools invent names for outputs). */
static kiln_status backward(const kiln_graph *g, kiln_shapes *sh) {
  kiln_status s;
  for (int v = 0; v < g->n_values; v++) {
    const kiln_value *val = &g->values[v];
    const kiln_type *ty = &val->type;
    kiln_vshape *x = &sh->v[v];
    if (val->is_input || val->init || ty->kind != KILN_TYPE_TENSOR || x->rank < 0) continue;
    if (ty->dtype != KILN_UNDEFINED && ty->dtype != x->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "tensor '%s': inferred %s, the model declares %s", val->name,
                       kiln_dtype_name(x->dtype), kiln_dtype_name(ty->dtype));
    if (ty->rank < 0) continue;
    if (ty->rank != x->rank)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "tensor '%s': inferred rank %d, the model declares rank %d", val->name,
                       x->rank, ty->rank);
    for (int d = 0; d < x->rank; d++) {
      kiln_dimx decl;
      if (ty->dims[d].value >= 0) s = kiln_dimx_const(sh->tab, ty->dims[d].value, &decl);
      else if (ty->dims[d].param && kiln_sym_find(sh->tab, ty->dims[d].param) >= 0)
        s = kiln_dimx_sym(sh->tab, ty->dims[d].param, &decl);
      else continue;
      if (s) return s;
      kiln_dimx u;
      if ((s = kiln_dim_unify(sh->tab, x->dims[d], decl, &u))) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        if (solve_linear(sh->tab, x->dims[d], decl)) { /* e.g. a Concat input's dim from its output */
          kiln_error_clear();
          continue;
        }
        kiln_error_set_message(msg);
        kiln_error_prefix("tensor '%s', dim %d (inferred vs declared)", val->name, d);
        return s;
      }
      x->dims[d] = u;
    }
  }
  return KILN_OK;
}

static int known_values(const kiln_symtab *tab) {
  int n = 0;
  int64_t v;
  for (int k = 0; k < kiln_symtab_nsyms(tab); k++) n += kiln_sym_value(tab, k, &v);
  return n;
}

kiln_status kiln_shapes_infer(const kiln_graph *g, kiln_shapes **out) {
  *out = NULL;
  kiln_shapes *sh = kiln_calloc(1, sizeof *sh);
  kiln_status s = KILN_OK;
  if (!sh || !(sh->v = kiln_calloc((size_t)g->n_values + 1, sizeof *sh->v))) {
    kiln_free(sh);
    return kiln_fail(KILN_E_NOMEM, "out of memory inferring shapes");
  }
  sh->n = g->n_values;
  if ((s = kiln_symtab_create(&sh->tab))) goto fail;
  if ((s = init_values(g, sh))) goto fail;
  for (int round = 0; round < MAX_ROUNDS; round++) {
    int before = known_values(sh->tab);
    if ((s = forward(g, sh))) goto fail;
    if ((s = backward(g, sh))) goto fail;
    if (known_values(sh->tab) == before) break;
  }
  for (int v = 0; v < g->n_values; v++)
    if ((s = subst_value(sh->tab, &sh->v[v]))) goto fail;
  *out = sh;
  return KILN_OK;
fail:
  kiln_shapes_free(sh);
  return s;
}
