/* ir/rewrite_const: constant folding through an evaluator callback, with a
 * cap on the size of what it stores (see rewrite.h). */
#include <math.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/rewrite.h"
#include "ir/rewrite_impl.h"

/* The constant tensor of node input k, or NULL. */
static const kiln_tensor *cin(const kiln_graph *g, const kiln_node *n, int k) {
  return k < n->n_in && n->in[k] >= 0 && kiln_edit_is_const(g, n->in[k]) ? g->values[n->in[k]].init : NULL;
}

static double esize(kiln_dtype t) {
  size_t s = kiln_dtype_size(t);
  return s ? (double)s : 8.0;
}

/* Up to KILN_MAX_RANK (or max) integers of a constant input; -1 if unreadable. */
static int cints(const kiln_graph *g, const kiln_node *n, int k, int64_t *vals, int max) {
  const kiln_tensor *t = cin(g, n, k);
  int count;
  if (!t || t->rank > 1 || t->numel > max) return -1;
  if (kiln_tensor_ints(t, vals, max, &count)) {
    kiln_error_clear();
    return -1;
  }
  return count;
}

/* Ops whose output has the broadcast shape of their inputs. */
static bool broadcasting(const kiln_node *n) {
  static const char *const ops[] = {"Add",     "Sub",     "Mul",     "Div",     "Pow",          "Mod",
                                    "And",     "Or",      "Xor",     "Equal",   "Greater",      "Less",
                                    "GreaterOrEqual",     "LessOrEqual",        "Where",        "Max",
                                    "Min",     "Sum",     "Mean",    "BitShift", "PRelu",       "BitwiseAnd",
                                    "BitwiseOr",          "BitwiseXor"};
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
    if (kiln_rw_is(n, ops[k])) return true;
  return false;
}

/* Elements of the broadcast of all constant inputs (*es: the largest
 * element size), or -1 when they do not broadcast. */
static double broadcast_numel(const kiln_graph *g, const kiln_node *n, double *es) {
  int r = 0;
  int64_t dims[KILN_MAX_RANK];
  *es = 1;
  for (int k = 0; k < n->n_in; k++) {
    const kiln_tensor *t = cin(g, n, k);
    if (!t) continue;
    if (esize(t->dtype) > *es) *es = esize(t->dtype);
    if (kiln_broadcast_shape(r, dims, t->rank, t->dims, &r, dims)) {
      kiln_error_clear();
      return -1;
    }
  }
  double numel = 1;
  for (int d = 0; d < r; d++) numel *= (double)dims[d];
  return numel;
}

/* Elements of a MatMul / Gemm result, or -1. */
static double matmul_numel(const kiln_node *n, const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || a->rank < 1 || b->rank < 1) return -1;
  if (kiln_rw_is(n, "Gemm")) {
    if (a->rank != 2 || b->rank != 2) return -1;
    bool ta = kiln_attr_int(n, "transA", 0), tb = kiln_attr_int(n, "transB", 0);
    return (double)a->dims[ta ? 1 : 0] * (double)b->dims[tb ? 0 : 1];
  }
  double m = a->rank >= 2 ? (double)a->dims[a->rank - 2] : 1, nn = b->rank >= 2 ? (double)b->dims[b->rank - 1] : 1;
  int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0, r;
  int64_t batch[KILN_MAX_RANK];
  if (kiln_broadcast_shape(ra, a->dims, rb, b->dims, &r, batch)) {
    kiln_error_clear();
    return -1;
  }
  for (int d = 0; d < r; d++) m *= (double)batch[d];
  return m * nn;
}

/* Product of x's dims scaled per axis (Resize / Upsample), or -1. */
static double scaled_numel(const kiln_tensor *x, const kiln_tensor *scales) {
  if (!x || !scales || scales->numel != x->rank || !kiln_dtype_is_float(scales->dtype)) return -1;
  double n = 1;
  for (int d = 0; d < x->rank; d++) n *= floor((double)x->dims[d] * kiln_get_f(scales, d));
  return n;
}

/* Bytes the ops that can expand small inputs into a large output would
 * produce (generators, broadcasting and matrix products), from their
 * constant inputs; -1 when not such an op or unknown (the evaluator then
 * reports any error itself). */
static double expanding_bytes(const kiln_graph *g, const kiln_node *n) {
  const kiln_tensor *x = cin(g, n, 0);
  int64_t v[KILN_MAX_RANK * 2];
  double numel = -1, es = x ? esize(x->dtype) : 4;
  int count;
  if (kiln_rw_is(n, "ConstantOfShape")) {
    const kiln_tensor *val = kiln_attr_tensor(n, "value");
    es = val ? esize(val->dtype) : 4;
    if ((count = cints(g, n, 0, v, KILN_MAX_RANK)) >= 0) {
      numel = 1;
      for (int i = 0; i < count; i++) numel *= (double)v[i];
    }
  } else if (kiln_rw_is(n, "Expand") && x && (count = cints(g, n, 1, v, KILN_MAX_RANK)) >= 0) {
    int r;
    int64_t out[KILN_MAX_RANK];
    if (!kiln_broadcast_shape(x->rank, x->dims, count, v, &r, out)) {
      numel = 1;
      for (int i = 0; i < r; i++) numel *= (double)out[i];
    } else {
      kiln_error_clear(); /* the evaluator will say what is wrong */
    }
  } else if (kiln_rw_is(n, "Tile") && x && (count = cints(g, n, 1, v, KILN_MAX_RANK)) >= 0) {
    numel = (double)x->numel;
    for (int i = 0; i < count; i++) numel *= (double)v[i];
  } else if (kiln_rw_is(n, "Range") && x) {
    const kiln_tensor *lim = cin(g, n, 1), *delta = cin(g, n, 2);
    if (lim && delta && x->numel == 1 && lim->numel == 1 && delta->numel == 1 && kiln_get_f(delta, 0) != 0)
      numel = fmax(ceil((kiln_get_f(lim, 0) - kiln_get_f(x, 0)) / kiln_get_f(delta, 0)), 0);
  } else if (kiln_rw_is(n, "Pad") && x) {
    size_t np = 0;
    const int64_t *ap = n->opset < 11 ? kiln_attr_ints(n, "pads", &np) : NULL;
    if (ap && np <= KILN_MAX_RANK * 2) memcpy(v, ap, np * sizeof *v);
    count = ap ? (int)np : cints(g, n, 1, v, KILN_MAX_RANK * 2);
    if (count == 2 * x->rank) {
      numel = 1;
      for (int d = 0; d < x->rank; d++) numel *= fmax((double)(x->dims[d] + v[d] + v[d + x->rank]), 0);
    }
  } else if (kiln_rw_is(n, "OneHot")) {
    const kiln_tensor *depth = cin(g, n, 1), *vals = cin(g, n, 2);
    if (x && depth && depth->numel == 1) numel = (double)x->numel * fabs(kiln_get_f(depth, 0));
    es = vals ? esize(vals->dtype) : 8;
  } else if (kiln_rw_is(n, "Upsample") && x) {
    size_t ns;
    const float *sc = kiln_attr_floats(n, "scales", &ns);
    if (sc && ns == (size_t)x->rank) {
      numel = 1;
      for (int d = 0; d < x->rank; d++) numel *= floor((double)x->dims[d] * sc[d]);
    } else {
      numel = scaled_numel(x, cin(g, n, 1));
    }
  } else if (broadcasting(n)) {
    numel = broadcast_numel(g, n, &es);
  } else if (kiln_rw_is(n, "MatMul") || kiln_rw_is(n, "Gemm") || kiln_rw_is(n, "MatMulInteger")) {
    numel = matmul_numel(n, x, cin(g, n, 1));
    if (kiln_rw_is(n, "MatMulInteger")) es = 4;
  } else if (kiln_rw_is(n, "Resize") && x) {
    if (n->opset >= 11 && (count = cints(g, n, 3, v, KILN_MAX_RANK)) > 0) {
      numel = 1;
      for (int i = 0; i < count; i++) numel *= (double)v[i];
    } else {
      numel = scaled_numel(x, cin(g, n, n->opset >= 11 ? 2 : 1));
    }
  }
  return numel < 0 ? -1 : numel * es;
}

/* Largest output size the declared (fully static) output types promise. */
static double declared_bytes(const kiln_graph *g, const kiln_node *n) {
  double most = 0;
  for (int k = 0; k < n->n_out; k++) {
    if (n->out[k] < 0) continue;
    const kiln_type *ty = &g->values[n->out[k]].type;
    if (ty->kind != KILN_TYPE_TENSOR || ty->rank < 0) continue;
    double numel = 1;
    for (int d = 0; d < ty->rank && numel >= 0; d++)
      numel = ty->dims[d].value < 0 ? -1 : numel * (double)ty->dims[d].value;
    if (numel * esize(ty->dtype) > most) most = numel * esize(ty->dtype);
  }
  return most;
}

/* Whether node n may be folded: deterministic, default domain, every input
 * constant, at least one output wanted, no non-tensor output. */
static bool foldable(const kiln_graph *g, const kiln_node *n) {
  if (!kiln_edit_default_domain(n->domain) || kiln_rw_maybe_random(g, n)) return false;
  bool wanted = false;
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v < 0) continue;
    wanted = true;
    kiln_type_kind kind = g->values[v].type.kind;
    if (kind != KILN_TYPE_TENSOR && kind != KILN_TYPE_UNKNOWN) return false;
  }
  if (!wanted) return false;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && !kiln_edit_is_const(g, n->in[k])) return false;
  return true;
}

/* Stores the evaluated outputs on the node's output values (moving them);
 * allocates first, so that it either installs all of them or none. */
static kiln_status install(kiln_graph *g, const kiln_node *n, kiln_tensor *res) {
  kiln_tensor **box = kiln_calloc((size_t)n->n_out + 1, sizeof *box);
  bool ok = box != NULL;
  for (int k = 0; k < n->n_out && ok; k++)
    if (n->out[k] >= 0) ok = (box[k] = kiln_malloc(sizeof **box)) != NULL;
  if (!ok) {
    for (int k = 0; box && k < n->n_out; k++) kiln_free(box[k]);
    kiln_free(box);
    return kiln_fail(KILN_E_NOMEM, "out of memory folding constants");
  }
  for (int k = 0; k < n->n_out; k++) {
    int v = n->out[k];
    if (v < 0) continue;
    kiln_tensor *t = box[k];
    *t = res[k];
    memset(&res[k], 0, sizeof res[k]);
    kiln_value *val = &g->values[v];
    val->init = t;
    val->producer = -1;
    kiln_type *ty = &val->type;
    if (!val->is_output || ty->kind == KILN_TYPE_UNKNOWN || ty->rank < 0) {
      /* the data now says exactly what the value is; a graph output keeps
       * the type it declared */
      for (int d = 0; d < KILN_MAX_RANK; d++) {
        kiln_free(ty->dims[d].param);
        ty->dims[d].param = NULL;
        ty->dims[d].value = d < t->rank ? t->dims[d] : 0;
      }
      ty->kind = KILN_TYPE_TENSOR;
      ty->dtype = t->dtype;
      ty->rank = t->rank;
    }
  }
  kiln_free(box);
  return KILN_OK;
}

/* Whether node n only rearranges elements of its input 0 (the cpu plan
 * runs it as a view) and that input is a constant float graph output of at
 * least 64 KiB (small ones, shapes among them, still fold). */
static bool views_output(const kiln_graph *g, const kiln_node *n) {
  static const char *const ops[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Transpose"};
  int v = n->n_in > 0 ? n->in[0] : -1;
  const kiln_tensor *t = v >= 0 ? g->values[v].init : NULL;
  if (!t || !g->values[v].is_output || t->dtype != KILN_F32 || kiln_tensor_bytes(t) < ((size_t)64 << 10)) return false;
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
    if (kiln_rw_is(n, ops[k])) return true;
  return false;
}

/* Evaluates node i; *folded tells whether it was replaced. */
static kiln_status fold_node(kiln_rw_pass *p, int i, kiln_rewrite_eval_fn eval, void *ctx, double cap,
                             bool keep_views, bool *folded) {
  kiln_graph *g = p->g;
  const kiln_node *n = &g->nodes[i];
  *folded = false;
  if (keep_views && views_output(g, n)) {
    if (p->st) p->st->fold_views_kept++;
    return KILN_OK;
  }
  if (declared_bytes(g, n) > cap || expanding_bytes(g, n) > cap) {
    if (p->st) p->st->fold_too_big++;
    return KILN_OK;
  }
  const kiln_tensor **in = kiln_calloc((size_t)n->n_in + 1, sizeof *in);
  kiln_tensor *res = kiln_calloc((size_t)n->n_out + 1, sizeof *res);
  kiln_status s = KILN_OK;
  if (!in || !res) s = kiln_fail(KILN_E_NOMEM, "out of memory folding constants");
  for (int k = 0; k < n->n_in && !s; k++) in[k] = n->in[k] >= 0 ? g->values[n->in[k]].init : NULL;
  bool ok = false;
  if (!s) {
    ok = eval(ctx, g, n, in, res) == KILN_OK;
    bool big = false;
    for (int k = 0; k < n->n_out && ok; k++) {
      if (n->out[k] < 0) continue;
      if (res[k].dtype == KILN_UNDEFINED || (res[k].numel && !res[k].data)) ok = false;
      else if ((double)kiln_tensor_bytes(&res[k]) > cap) big = true;
      else if (!res[k].owns) { /* keep data the graph owns, dense */
        kiln_tensor own = {0};
        if ((s = kiln_tensor_copy(&own, &res[k]))) break;
        kiln_tensor_release(&res[k]);
        res[k] = own;
      }
    }
    if (!s && !ok) {
      kiln_error_clear();
      if (p->st) p->st->fold_declined++;
    } else if (!s && big) {
      ok = false;
      if (p->st) p->st->fold_too_big++;
    }
  }
  if (!s && ok) {
    s = install(g, n, res);
    if (!s) {
      p->drop[i] = true;
      *folded = true;
    }
  }
  for (int k = 0; res && k < n->n_out; k++) kiln_tensor_release(&res[k]);
  kiln_free(res);
  kiln_free(in);
  return s;
}

kiln_status kiln_rewrite_fold_constants(kiln_graph *g, kiln_rewrite_eval_fn eval, void *ctx, size_t max_bytes,
                                        kiln_rewrite_stats *st) {
  return kiln_rw_fold(g, eval, ctx, max_bytes, false, st);
}

kiln_status kiln_rw_fold(kiln_graph *g, kiln_rewrite_eval_fn eval, void *ctx, size_t max_bytes, bool keep_output_views,
                         kiln_rewrite_stats *st) {
  if (!eval) return kiln_fail(KILN_E_INTERNAL, "constant folding needs an evaluator");
  if (kiln_rw_has_subgraphs(g)) return KILN_OK;
  double cap = (double)(max_bytes ? max_bytes : KILN_REWRITE_FOLD_MAX_BYTES);
  kiln_rw_pass p;
  kiln_status s = kiln_rw_begin(&p, g, st);
  if (s) return s;
  for (int i = 0; i < g->n_nodes && !s; i++) {
    if (!foldable(g, &g->nodes[i])) continue;
    bool folded;
    s = fold_node(&p, i, eval, ctx, cap, keep_output_views, &folded);
    if (!s && folded && st) st->folded++;
  }
  return kiln_rw_end(&p, s);
}
