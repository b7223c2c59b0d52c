/* ir/rewrite_bn: inference BatchNormalization folded into the Conv or Gemm
 * that feeds it (see rewrite.h for the conditions and formulas). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/rewrite.h"
#include "ir/rewrite_impl.h"

/* The BN's per-channel scale c = scale / sqrt(var + eps), in double. */
typedef struct bn_params {
  kiln_dtype dtype;
  int64_t channels;
  double *c;
  const kiln_tensor *mean, *bias; /* for b' = (b - mean)·c + bias */
} bn_params;

static bool float_type(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64; }

/* A constant 1-D tensor of dtype with n elements, or NULL. */
static const kiln_tensor *const_vec(const kiln_graph *g, int v, kiln_dtype dtype, int64_t n) {
  if (!kiln_edit_is_const(g, v)) return NULL;
  const kiln_tensor *t = g->values[v].init;
  return t->dtype == dtype && t->rank == 1 && (n < 0 || t->dims[0] == n) ? t : NULL;
}

/* Whether BN node n runs in inference mode with Y as its only output. */
static bool bn_foldable(const kiln_rw_pass *p, const kiln_node *n) {
  const kiln_graph *g = p->g;
  if (n->n_in != 5 || n->n_out < 1 || n->out[0] < 0) return false;
  for (int k = 0; k < 5; k++)
    if (n->in[k] < 0) return false;
  if (n->opset < 7 && kiln_attr_int(n, "is_test", 0) == 0) return false;
  if (n->opset < 9 && kiln_attr_int(n, "spatial", 1) != 1) return false;
  if (kiln_attr_int(n, "training_mode", 0) != 0) return false;
  for (int k = 1; k < n->n_out; k++) {
    int v = n->out[k];
    if (v >= 0 && (p->uses[v] || g->values[v].is_output)) return false;
  }
  return true;
}

/* Reads scale, bias, mean, var; *ok false when they do not qualify. */
static kiln_status bn_read(const kiln_graph *g, const kiln_node *n, bn_params *bp, bool *ok) {
  *ok = false;
  if (!kiln_edit_is_const(g, n->in[1])) return KILN_OK;
  const kiln_tensor *scale = g->values[n->in[1]].init;
  if (!float_type(scale->dtype) || scale->rank != 1) return KILN_OK;
  bp->dtype = scale->dtype;
  bp->channels = scale->dims[0];
  const kiln_tensor *bias = const_vec(g, n->in[2], bp->dtype, bp->channels);
  const kiln_tensor *mean = const_vec(g, n->in[3], bp->dtype, bp->channels);
  const kiln_tensor *var = const_vec(g, n->in[4], bp->dtype, bp->channels);
  if (!bias || !mean || !var) return KILN_OK;
  bp->c = kiln_malloc(((size_t)bp->channels + 1) * sizeof *bp->c);
  if (!bp->c) return kiln_fail(KILN_E_NOMEM, "out of memory folding a BatchNormalization");
  double eps = kiln_attr_float(n, "epsilon", 1e-5f); /* a float attribute, as the reference reads it */
  for (int64_t k = 0; k < bp->channels; k++) {
    bp->c[k] = kiln_get_f(scale, k) / sqrt(kiln_get_f(var, k) + eps);
  }
  bp->mean = mean;
  bp->bias = bias;
  *ok = true;
  return KILN_OK;
}

/* Makes node n have at least count input slots (new ones omitted). */
static kiln_status grow_inputs(kiln_node *n, int count) {
  if (n->n_in >= count) return KILN_OK;
  int *in = kiln_realloc(n->in, (size_t)count * sizeof *in);
  if (!in) return kiln_fail(KILN_E_NOMEM, "out of memory folding a BatchNormalization");
  for (int k = n->n_in; k < count; k++) in[k] = -1;
  n->in = in;
  n->n_in = count;
  return KILN_OK;
}

/* Adds *t as a constant named after value `like`; t is released on failure. */
static kiln_status add_const_like(kiln_graph *g, int like, const char *suffix, kiln_tensor *t, int *out) {
  char base[400];
  snprintf(base, sizeof base, "%s%s", like >= 0 ? g->values[like].name : "bn", suffix);
  kiln_status s = kiln_edit_add_const(g, base, t, out);
  if (s) kiln_tensor_release(t);
  return s;
}

/* dst[i] = src[i]·c[i / per] over rows·per elements, rounded to the dtype
 * once (as kiln_set_f of the double product): dense float32 and float64
 * directly, anything else element by element. */
static void scale_rows(kiln_tensor *dst, const kiln_tensor *src, int64_t rows, int64_t per, const double *c) {
  if (!src->strided && src->dtype == KILN_F32) {
    const float *x = src->data;
    float *y = dst->data;
    for (int64_t k = 0; k < rows; k++)
      for (int64_t j = 0; j < per; j++) y[k * per + j] = (float)((double)x[k * per + j] * c[k]);
  } else if (!src->strided && src->dtype == KILN_F64) {
    const double *x = src->data;
    double *y = dst->data;
    for (int64_t k = 0; k < rows; k++)
      for (int64_t j = 0; j < per; j++) y[k * per + j] = x[k * per + j] * c[k];
  } else {
    for (int64_t k = 0; k < rows; k++)
      for (int64_t j = 0; j < per; j++) kiln_set_f(dst, k * per + j, kiln_get_f(src, k * per + j) * c[k]);
  }
}

/* Conv: W' = W·c per output channel (dim 0), b' = (b - mean)·c + bias. */
static kiln_status fold_conv(kiln_graph *g, int ci, const bn_params *bp, bool *done) {
  *done = false;
  const kiln_node *conv = &g->nodes[ci];
  if (conv->n_in < 2 || conv->in[1] < 0 || !kiln_edit_is_const(g, conv->in[1])) return KILN_OK;
  int wv = conv->in[1], bv = conv->n_in > 2 ? conv->in[2] : -1;
  const kiln_tensor *w = g->values[wv].init, *b = NULL;
  if (w->dtype != bp->dtype || w->rank < 3 || w->dims[0] != bp->channels) return KILN_OK;
  if (bv >= 0 && !(b = const_vec(g, bv, bp->dtype, bp->channels))) return KILN_OK;
  kiln_tensor nw = {0}, nb = {0};
  kiln_status s = kiln_tensor_alloc(&nw, w->dtype, w->rank, w->dims);
  if (!s) s = kiln_tensor_alloc(&nb, w->dtype, 1, &bp->channels);
  if (s) {
    kiln_tensor_release(&nw);
    kiln_tensor_release(&nb);
    return s;
  }
  int64_t per = bp->channels ? w->numel / bp->channels : 0;
  scale_rows(&nw, w, bp->channels, per, bp->c);
  for (int64_t k = 0; k < bp->channels; k++) {
    double bk = b ? kiln_get_f(b, k) : 0.0;
    kiln_set_f(&nb, k, (bk - kiln_get_f(bp->mean, k)) * bp->c[k] + kiln_get_f(bp->bias, k));
  }
  int nwv, nbv;
  s = add_const_like(g, wv, "_bn", &nw, &nwv);
  if (s) {
    kiln_tensor_release(&nb);
    return s;
  }
  if ((s = add_const_like(g, bv >= 0 ? bv : wv, bv >= 0 ? "_bn" : "_bias_bn", &nb, &nbv))) return s;
  kiln_node *c = &g->nodes[ci];
  if ((s = grow_inputs(c, 3))) return s;
  c->in[1] = nwv;
  c->in[2] = nbv;
  *done = true;
  return KILN_OK;
}

/* Gemm (opset 7+): Y = alpha·A·B + beta·C, BN per column j of Y:
 * B' = B·c along N, C' = (beta·C - mean)·c + bias over C's rows, beta' = 1. */
static kiln_status fold_gemm(kiln_graph *g, int gi, const bn_params *bp, bool *done) {
  *done = false;
  const kiln_node *gm = &g->nodes[gi];
  if (gm->opset < 7 || gm->n_in < 2 || gm->in[1] < 0 || !kiln_edit_is_const(g, gm->in[1])) return KILN_OK;
  int bv = gm->in[1], cv = gm->n_in > 2 ? gm->in[2] : -1;
  const kiln_tensor *b = g->values[bv].init, *c = NULL;
  bool tb = kiln_attr_int(gm, "transB", 0) != 0;
  int64_t N = bp->channels;
  if (b->dtype != bp->dtype || b->rank != 2 || (tb ? b->dims[0] : b->dims[1]) != N) return KILN_OK;
  int64_t rows = 1; /* C' is [N], or [rows, N] when C has rows */
  if (cv >= 0) {
    if (!kiln_edit_is_const(g, cv)) return KILN_OK;
    c = g->values[cv].init;
    if (c->dtype != bp->dtype || c->rank > 2) return KILN_OK;
    if (c->rank >= 1 && c->dims[c->rank - 1] != 1 && c->dims[c->rank - 1] != N) return KILN_OK;
    if (c->rank == 2) rows = c->dims[0];
  }
  double beta = kiln_attr_float(gm, "beta", 1.0f);
  int64_t cdims[2] = {rows, N};
  int crank = c && c->rank == 2 ? 2 : 1;
  kiln_tensor nb = {0}, nc = {0};
  kiln_status s = kiln_tensor_alloc(&nb, b->dtype, 2, b->dims);
  if (!s) s = kiln_tensor_alloc(&nc, b->dtype, crank, crank == 2 ? cdims : cdims + 1);
  if (s) {
    kiln_tensor_release(&nb);
    kiln_tensor_release(&nc);
    return s;
  }
  int64_t K = tb ? b->dims[1] : b->dims[0];
  if (tb) /* [N, K]: row j scaled by c[j] */
    scale_rows(&nb, b, N, K, bp->c);
  else
    for (int64_t k = 0; k < K; k++)
      for (int64_t j = 0; j < N; j++) kiln_set_f(&nb, k * N + j, kiln_get_f(b, k * N + j) * bp->c[j]);
  int64_t clast = c && c->rank >= 1 ? c->dims[c->rank - 1] : 1;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t j = 0; j < N; j++) {
      double cj = c ? kiln_get_f(c, r * clast + (clast == 1 ? 0 : j)) : 0.0;
      kiln_set_f(&nc, r * N + j, (beta * cj - kiln_get_f(bp->mean, j)) * bp->c[j] + kiln_get_f(bp->bias, j));
    }
  int nbv, ncv;
  s = add_const_like(g, bv, "_bn", &nb, &nbv);
  if (s) {
    kiln_tensor_release(&nc);
    return s;
  }
  if ((s = add_const_like(g, cv >= 0 ? cv : bv, cv >= 0 ? "_bn" : "_bias_bn", &nc, &ncv))) return s;
  kiln_node *n = &g->nodes[gi];
  if ((s = grow_inputs(n, 3)) || (s = kiln_edit_set_float(n, "beta", 1.0f))) return s;
  n->in[1] = nbv;
  n->in[2] = ncv;
  *done = true;
  return KILN_OK;
}

kiln_status kiln_rewrite_fold_bn(kiln_graph *g, kiln_rewrite_stats *st) {
  if (kiln_rw_has_subgraphs(g)) return KILN_OK;
  kiln_rw_pass p;
  kiln_status s = kiln_rw_begin(&p, g, st);
  if (s) return s;
  for (int i = 0; i < g->n_nodes && !s; i++) {
    const kiln_node *n = &g->nodes[i];
    if (!kiln_rw_is(n, "BatchNormalization") || !bn_foldable(&p, n)) continue;
    int x = n->in[0], y = n->out[0], w = g->values[x].producer;
    if (x >= p.n_values || w < 0 || p.drop[w] || g->values[x].is_output || p.uses[x] != 1) continue;
    const kiln_node *prod = &g->nodes[w];
    bool conv = kiln_rw_is(prod, "Conv"), gemm = kiln_rw_is(prod, "Gemm");
    if ((!conv && !gemm) || prod->n_out != 1 || prod->out[0] != x) continue;
    bn_params bp = {0};
    bool ok, done = false;
    s = bn_read(g, n, &bp, &ok);
    if (!s && ok) s = conv ? fold_conv(g, w, &bp, &done) : fold_gemm(g, w, &bp, &done);
    kiln_free(bp.c);
    if (s || !done) continue;
    g->nodes[w].out[0] = y; /* the Conv / Gemm now writes the BN's output */
    g->values[y].producer = w;
    g->values[x].producer = -1;
    p.drop[i] = true;
    if (st) *(conv ? &st->bn_conv : &st->bn_gemm) += 1;
  }
  return kiln_rw_end(&p, s);
}
