/* ir/shape_ops_nn_extra: shape functions (see ir/shape.h) of the ops of
 * reference/ops_extra.c (losses, Resize/Upsample, (de)quantization, signal
 * windows, NonMaxSuppression, RoiAlign, GridSample, Unique) and of the
 * recurrent layers of reference/ops_rnn.c (RNN, GRU, LSTM). */
#include <math.h>
#include <string.h>

#include "ir/shape.h"

#define TRY(x)                                                                                               \
  do {                                                                                                       \
    kiln_status s_ = (x);                                                                                    \
    if (s_) return s_;                                                                                       \
  } while (0)

static const kiln_vshape *opt_in(const kiln_shape_call *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

static kiln_status want_rank(const kiln_vshape *x, int r, const char *what) {
  if (x->rank == r) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has rank %d; rank %d expected", what, x->rank, r);
}

static kiln_status unify_k(kiln_shape_call *c, const char *what, int d, kiln_dimx a, int64_t k) {
  kiln_dimx kk, u;
  TRY(kiln_dimx_const(c->tab, k, &kk));
  return kiln_shape_unify(c, what, d, a, kk, &u);
}

/* True when x is provably an empty 1-D tensor (an omitted "" input is
 * NULL and handled by the caller). */
static bool is_empty(const kiln_shape_call *c, const kiln_vshape *x) {
  int64_t v;
  if (x->konst) return x->konst->numel == 0;
  for (int d = 0; d < x->rank; d++)
    if (kiln_dimx_is_const(c->tab, x->dims[d], &v) && v == 0) return true;
  return false;
}

/* ------------------------------------------------------------------------ */
/* NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss                        */

/* input (N, C, d1..dk), target (N, d1..dk): the loss is target-shaped for
 * reduction 'none', else a scalar; SCE's log_prob is input-shaped. */
static kiln_status loss(kiln_shape_call *c) {
  const kiln_vshape *x, *t, *w = opt_in(c, 2);
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &t));
  if (x->rank < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 has rank %d; (N, C, d1, ..., dk) expected", x->rank);
  TRY(want_rank(t, x->rank - 1, "input 1 (target)"));
  kiln_dimx u;
  for (int d = 0; d < t->rank; d++)
    TRY(kiln_shape_unify(c, "input 1 (target) vs input 0", d, t->dims[d], x->dims[d ? d + 1 : 0], &u));
  if (w) {
    TRY(want_rank(w, 1, "input 2 (weight)"));
    TRY(kiln_shape_unify(c, "input 2 (weight) vs C", 0, w->dims[0], x->dims[1], &u));
  }
  const char *red = kiln_attr_string(c->node, "reduction", "mean");
  kiln_vshape *y = &c->out[0];
  if (!strcmp(red, "none")) kiln_shape_copy(y, t);
  else y->rank = 0;
  y->dtype = x->dtype;
  if (c->n_out > 1) kiln_shape_copy(&c->out[1], x);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Resize, Upsample                                                          */

/* Output dim d = floor((float)in * scale), in float32 as the reference. A
 * symbolic in times an integer scale k is in*k; times a dyadic scale
 * p / 2^e (0.5, 0.25, 1.5…) floor(in*p / 2^e), exact while in*p stays within
 * float32's exact integers (2^24; the reference's float product rounds
 * beyond). A symbolic dim times any other non-integer float scale (0.6,
 * 0.8…) cannot be expressed exactly with kiln_dimx (floor of a rounded
 * float32 product): that dim gets a fresh data-dependent symbol, resolved at
 * run time. */
static kiln_status scaled_dim(kiln_shape_call *c, int d, kiln_dimx in, double sc, bool upsample, kiln_dimx *out) {
  if (!(sc > 0) || !isfinite(sc) || (upsample && sc < 1))
    return kiln_fail(KILN_E_INVALID_VALUE, "scale %g of dim %d is invalid; it must be finite and %s", sc, d,
                     upsample ? ">= 1" : "> 0");
  int64_t v;
  if (kiln_dimx_is_const(c->tab, in, &v)) {
    float f = floorf((float)v * (float)sc);
    if (!(f < 4.6e18f)) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "scale %g makes dim %d too large", sc, d);
    return kiln_dimx_const(c->tab, (int64_t)f, out);
  }
  float s = (float)sc;
  for (int e = 0; e <= 8; e++) {
    double p = ldexp((double)s, e);
    if (p != floor(p) || p > (e ? 256 : 1 << 20)) continue;
    kiln_dimx m, k;
    TRY(kiln_dimx_mul_const(c->tab, in, (int64_t)p, &m));
    if (!e) return *out = m, KILN_OK;
    TRY(kiln_dimx_const(c->tab, (int64_t)1 << e, &k));
    return kiln_dimx_fdiv(c->tab, m, k, out);
  }
  return kiln_shape_fresh(c, 0, d, out);
}

/* out from the float scales of a constant tensor (or NULL: sc given). */
static kiln_status from_scales(kiln_shape_call *c, const kiln_vshape *x, const kiln_tensor *t, const float *sc, int n,
                               bool upsample) {
  if (n != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "scales has %d values; %d (the rank of X) expected", n, x->rank);
  kiln_vshape *y = &c->out[0];
  for (int d = 0; d < x->rank; d++)
    TRY(scaled_dim(c, d, x->dims[d], t ? kiln_get_f(t, d) : (double)sc[d], upsample, &y->dims[d]));
  return KILN_OK;
}

/* Every dim from run-time data. */
static kiln_status all_fresh(kiln_shape_call *c, int rank) {
  for (int d = 0; d < rank; d++) TRY(kiln_shape_fresh(c, 0, d, &c->out[0].dims[d]));
  return KILN_OK;
}

/* Resize: the sizes input when given (its values when known at compile
 * time, constants or tracked expressions), else floor(dim * scale) with
 * constant scales (roi does not enter the size, as in the reference); a
 * size or scale only known at run time gives data-dependent dims. */
static kiln_status resize(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = x->rank;
  const kiln_vshape *ts = opt_in(c, c->opset < 11 ? 1 : 2), *tz = c->opset < 11 ? NULL : opt_in(c, 3);
  if (ts && is_empty(c, ts)) ts = NULL;
  if (tz && is_empty(c, tz)) tz = NULL;
  if (tz) {
    int64_t v[KILN_MAX_RANK];
    int n;
    if (kiln_shape_const_ints(c, 3, v, KILN_MAX_RANK, &n)) {
      if (n != x->rank)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "sizes has %d values; %d (the rank of X) expected", n, x->rank);
      for (int d = 0; d < n; d++) {
        if (v[d] < 0) return kiln_fail(KILN_E_INVALID_VALUE, "sizes[%d] is %lld; sizes must not be negative", d,
                                       (long long)v[d]);
        TRY(kiln_dimx_const(c->tab, v[d], &y->dims[d]));
      }
      return KILN_OK;
    }
    if (tz->nvals >= 0) {
      if (tz->nvals != x->rank)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "sizes has %d values; %d (the rank of X) expected", tz->nvals,
                         x->rank);
      for (int d = 0; d < x->rank; d++) y->dims[d] = tz->vals[d];
      return KILN_OK;
    }
    return all_fresh(c, x->rank);
  }
  if (ts && ts->konst && kiln_dtype_is_float(ts->konst->dtype))
    return from_scales(c, x, ts->konst, NULL, (int)ts->konst->numel, false);
  return all_fresh(c, x->rank);
}

/* Upsample: floor(dim * scale), scales from the attribute (opset 7) or a
 * constant input (opset 9). */
static kiln_status upsample(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = x->rank;
  if (c->opset < 9) {
    size_t ns = 0;
    const float *f = kiln_attr_floats(c->node, "scales", &ns);
    if (!f) return kiln_fail(KILN_E_MODEL, "Upsample-7 requires attribute 'scales'");
    return from_scales(c, x, NULL, f, (int)ns, true);
  }
  const kiln_vshape *ts;
  TRY(kiln_shape_in(c, 1, &ts));
  if (ts->konst && kiln_dtype_is_float(ts->konst->dtype))
    return from_scales(c, x, ts->konst, NULL, (int)ts->konst->numel, true);
  return all_fresh(c, x->rank);
}

/* ------------------------------------------------------------------------ */
/* Quantization                                                              */

/* QuantizeLinear: x's shape, y_zero_point's type (uint8 without one). */
static kiln_status quantize(kiln_shape_call *c) {
  const kiln_vshape *x, *zp = opt_in(c, 2);
  TRY(kiln_shape_in(c, 0, &x));
  kiln_shape_copy(&c->out[0], x);
  c->out[0].dtype = zp ? zp->dtype : KILN_U8;
  return KILN_OK;
}

/* DequantizeLinear: x's shape, float32. */
static kiln_status dequantize(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  kiln_shape_copy(&c->out[0], x);
  c->out[0].dtype = KILN_F32;
  return KILN_OK;
}

/* DynamicQuantizeLinear: y (uint8, x's shape), y_scale (float32 scalar),
 * y_zero_point (uint8 scalar). */
static kiln_status dynquantize(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  kiln_shape_copy(&c->out[0], x);
  c->out[0].dtype = KILN_U8;
  if (c->n_out > 1) c->out[1].dtype = KILN_F32, c->out[1].rank = 0;
  if (c->n_out > 2) c->out[2].dtype = KILN_U8, c->out[2].rank = 0;
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Windows                                                                   */

/* [size] of output_datatype: the size input's value when known at compile
 * time (constant or tracked), else a data-dependent dim. */
static kiln_status window(kiln_shape_call *c) {
  const kiln_vshape *sz;
  TRY(kiln_shape_in(c, 0, &sz));
  if (sz->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (size) has rank %d; a scalar is expected", sz->rank);
  kiln_vshape *y = &c->out[0];
  y->dtype = (kiln_dtype)kiln_attr_int(c->node, "output_datatype", KILN_F32);
  y->rank = 1;
  int64_t v;
  int n;
  if (kiln_shape_const_ints(c, 0, &v, 1, &n) && n == 1) {
    if (v < 0) return kiln_fail(KILN_E_INVALID_VALUE, "window size %lld is negative", (long long)v);
    return kiln_dimx_const(c->tab, v, &y->dims[0]);
  }
  if (sz->nvals == 1) return y->dims[0] = sz->vals[0], KILN_OK;
  return kiln_shape_fresh(c, 0, 0, &y->dims[0]);
}

/* ------------------------------------------------------------------------ */
/* Detection and sampling                                                    */

/* NonMaxSuppression: [num_selected, 3] int64, num_selected from the data. */
static kiln_status nms(kiln_shape_call *c) {
  const kiln_vshape *boxes, *scores;
  TRY(kiln_shape_in(c, 0, &boxes));
  TRY(kiln_shape_in(c, 1, &scores));
  TRY(want_rank(boxes, 3, "input 0 (boxes)"));
  TRY(want_rank(scores, 3, "input 1 (scores)"));
  kiln_dimx u;
  TRY(unify_k(c, "input 0 (boxes)", 2, boxes->dims[2], 4));
  TRY(kiln_shape_unify(c, "input 1 (scores) vs boxes (batch)", 0, scores->dims[0], boxes->dims[0], &u));
  TRY(kiln_shape_unify(c, "input 1 (scores) vs boxes (boxes)", 2, scores->dims[2], boxes->dims[1], &u));
  kiln_vshape *y = &c->out[0];
  y->dtype = KILN_I64;
  y->rank = 2;
  TRY(kiln_shape_fresh(c, 0, 0, &y->dims[0]));
  return kiln_dimx_const(c->tab, 3, &y->dims[1]);
}

/* RoiAlign: X (N, C, H, W), rois (R, 4), batch_indices (R) ->
 * (R, C, output_height, output_width). */
static kiln_status roialign(kiln_shape_call *c) {
  const kiln_vshape *x, *rois, *bi;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &rois));
  TRY(kiln_shape_in(c, 2, &bi));
  TRY(want_rank(x, 4, "input 0 (X)"));
  TRY(want_rank(rois, 2, "input 1 (rois)"));
  TRY(want_rank(bi, 1, "input 2 (batch_indices)"));
  TRY(unify_k(c, "input 1 (rois)", 1, rois->dims[1], 4));
  kiln_dimx r;
  TRY(kiln_shape_unify(c, "input 2 (batch_indices) vs rois", 0, bi->dims[0], rois->dims[0], &r));
  int64_t oh = kiln_attr_int(c->node, "output_height", 1), ow = kiln_attr_int(c->node, "output_width", 1);
  if (oh < 1 || ow < 1)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "output_height %lld / output_width %lld must be >= 1", (long long)oh,
                     (long long)ow);
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = 4;
  y->dims[0] = r;
  y->dims[1] = x->dims[1];
  TRY(kiln_dimx_const(c->tab, oh, &y->dims[2]));
  return kiln_dimx_const(c->tab, ow, &y->dims[3]);
}

/* GridSample: X (N, C, H, W), grid (N, H_out, W_out, 2) -> (N, C, H_out, W_out). */
static kiln_status gridsample(kiln_shape_call *c) {
  const kiln_vshape *x, *g;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &g));
  TRY(want_rank(x, 4, "input 0 (X)"));
  TRY(want_rank(g, 4, "input 1 (grid)"));
  kiln_dimx n;
  TRY(kiln_shape_unify(c, "input 1 (grid) vs X", 0, g->dims[0], x->dims[0], &n));
  TRY(unify_k(c, "input 1 (grid)", 3, g->dims[3], 2));
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = 4;
  y->dims[0] = n;
  y->dims[1] = x->dims[1];
  y->dims[2] = g->dims[1];
  y->dims[3] = g->dims[2];
  return KILN_OK;
}

/* Unique: Y has G (the number of distinct elements or slices, known only
 * at run time) along the axis (or is [G] without one); indices and counts
 * are [G], inverse_indices has one entry per element (per slice). */
static kiln_status unique(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  bool has_axis = kiln_node_attr(c->node, "axis") != NULL;
  int axis = 0;
  if (has_axis) TRY(kiln_norm_axis(kiln_attr_int(c->node, "axis", 0), x->rank, &axis));
  kiln_vshape *y = &c->out[0];
  kiln_dimx g, m;
  y->dtype = x->dtype;
  if (has_axis) {
    kiln_shape_copy(y, x);
    TRY(kiln_shape_fresh(c, 0, axis, &g));
    y->dims[axis] = g;
    m = x->dims[axis];
  } else {
    y->rank = 1;
    TRY(kiln_shape_fresh(c, 0, 0, &g));
    y->dims[0] = g;
    TRY(kiln_dimx_const(c->tab, 1, &m));
    for (int d = 0; d < x->rank; d++) TRY(kiln_dimx_mul(c->tab, m, x->dims[d], &m));
  }
  for (int k = 1; k < c->n_out && k < 4; k++) {
    kiln_vshape *o = &c->out[k];
    o->dtype = KILN_I64;
    o->rank = 1;
    o->dims[0] = k == 2 ? m : g;
    o->data_dependent = k != 2;
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* RNN, GRU, LSTM                                                            */

/* X is [seq, batch, input] (layout 0) or [batch, seq, input] (layout 1);
 * hidden_size H from the attribute or R's last dim; num_directions 2 for
 * bidirectional. Y is [seq, nd, batch, H] / [batch, seq, nd, H]; Y_h and
 * Y_c are [nd, batch, H] / [batch, nd, H]. */
static kiln_status rnn(kiln_shape_call *c) {
  const kiln_vshape *x, *w, *r;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &w));
  TRY(kiln_shape_in(c, 2, &r));
  const char *op = c->node->op_type;
  int gates = !strcmp(op, "RNN") ? 1 : !strcmp(op, "GRU") ? 3 : 4;
  const char *dir = kiln_attr_string(c->node, "direction", "forward");
  int64_t nd;
  if (!strcmp(dir, "forward") || !strcmp(dir, "reverse")) nd = 1;
  else if (!strcmp(dir, "bidirectional")) nd = 2;
  else return kiln_fail(KILN_E_MODEL, "direction '%s' is not one of forward, reverse, bidirectional", dir);
  int64_t layout = kiln_attr_int(c->node, "layout", 0);
  if (layout != 0 && layout != 1) return kiln_fail(KILN_E_MODEL, "layout is %lld; it must be 0 or 1", (long long)layout);
  TRY(want_rank(x, 3, "input 0 (X)"));
  TRY(want_rank(w, 3, "input 1 (W)"));
  TRY(want_rank(r, 3, "input 2 (R)"));
  kiln_symtab *t = c->tab;
  kiln_dimx seq = x->dims[layout ? 1 : 0], batch = x->dims[layout ? 0 : 1], H = r->dims[2], ndx, gh, u;
  const kiln_attr *hs = kiln_node_attr(c->node, "hidden_size");
  if (hs) {
    if (hs->i < 1) return kiln_fail(KILN_E_MODEL, "hidden_size is %lld; it must be positive", (long long)hs->i);
    TRY(unify_k(c, "input 2 (R) vs hidden_size", 2, r->dims[2], hs->i));
    TRY(kiln_dimx_const(t, hs->i, &H));
  }
  TRY(kiln_dimx_const(t, nd, &ndx));
  TRY(kiln_dimx_mul_const(t, H, gates, &gh));
  TRY(kiln_shape_unify(c, "input 1 (W) vs num_directions", 0, w->dims[0], ndx, &u));
  TRY(kiln_shape_unify(c, "input 1 (W) vs input_size", 2, w->dims[2], x->dims[2], &u));
  TRY(kiln_shape_unify(c, "input 2 (R) vs num_directions", 0, r->dims[0], ndx, &u));
  /* W[1] = R[1] = gates * H: with a symbolic H (R's last dim) that relation
   * cannot be recorded, and the run-time shape check decides */
  bool hk = kiln_dimx_is_const(t, H, NULL);
  kiln_status s = kiln_shape_unify(c, "input 1 (W) vs gates * hidden_size", 1, w->dims[1], gh, &u);
  if (!s) s = kiln_shape_unify(c, "input 2 (R) vs gates * hidden_size", 1, r->dims[1], gh, &u);
  if (s && hk) return s;
  if (s) kiln_error_clear();
  int nouts = gates == 4 ? 3 : 2;
  for (int k = 0; k < nouts && k < c->n_out; k++) {
    kiln_vshape *o = &c->out[k];
    o->dtype = x->dtype;
    if (k == 0) {
      o->rank = 4;
      kiln_dimx ly[4] = {batch, seq, ndx, H}, l0[4] = {seq, ndx, batch, H};
      memcpy(o->dims, layout ? ly : l0, sizeof ly);
    } else {
      o->rank = 3;
      kiln_dimx ly[3] = {batch, ndx, H}, l0[3] = {ndx, batch, H};
      memcpy(o->dims, layout ? ly : l0, sizeof ly);
    }
  }
  return KILN_OK;
}

const kiln_shape_def kiln_shape_ops_nn_extra[] = {
    {"NegativeLogLikelihoodLoss", loss},
    {"SoftmaxCrossEntropyLoss", loss},
    {"Resize", resize},
    {"Upsample", upsample},
    {"QuantizeLinear", quantize},
    {"DequantizeLinear", dequantize},
    {"DynamicQuantizeLinear", dynquantize},
    {"HannWindow", window},
    {"HammingWindow", window},
    {"BlackmanWindow", window},
    {"NonMaxSuppression", nms},
    {"RoiAlign", roialign},
    {"GridSample", gridsample},
    {"Unique", unique},
    {"RNN", rnn},
    {"GRU", rnn},
    {"LSTM", rnn},
    {NULL, NULL},
};
