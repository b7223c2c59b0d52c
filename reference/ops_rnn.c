/* reference/ops_rnn: scalar kernels (see reference/ops.h) for the recurrent
 * layers RNN, GRU and LSTM (opsets 1-17; layout from opset 14).
 *
 * Every (direction, batch row) pair is an independent recurrence, so the
 * kernel runs them one at a time: it keeps that row's state (H, and C for
 * LSTM) in doubles, computes each step's gate pre-activations as plain dot
 * products read straight from the input tensors, and rounds only on the store
 * into Y / Y_h / Y_c. Nothing is fused or reordered beyond the equations.
 *
 * Conventions where ONNX leaves a choice (they follow onnxruntime):
 *   - activation_alpha / activation_beta are consumed in order by the
 *     activations that take them (Affine, LeakyRelu, ThresholdedRelu,
 *     ScaledTanh, HardSigmoid, Elu: alpha; Affine, ScaledTanh, HardSigmoid:
 *     beta); when a list runs out the default is LeakyRelu 0.01,
 *     HardSigmoid 0.2 / 0.5, Elu 1.0, and 0 for the others.
 *   - Activation names are matched without regard to case.
 *   - clip bounds every gate's pre-activation (RNN: Ht's; GRU: z, r, h;
 *     LSTM: i, f, c, o, o after its peephole term). The LSTM cell state is
 *     not clipped, neither as stored nor as fed to h.
 *   - LSTM input_forget couples the gates as f = 1 - i.
 *   - A bidirectional node may give one direction's activations; both
 *     directions then use them.
 *   - sequence_lens[b] may be 0..seq_length: rows at or past a sequence's
 *     length get zeros in Y, and Y_h / Y_c hold the state after its last
 *     valid step. A sequence of length 0 has no valid step: its Y_h / Y_c
 *     rows are zero (not the initial state). The reverse direction runs from
 *     step length-1 down to 0. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

/* ---------------------------------------------------------------- helpers */

typedef enum rnn_kind { K_RNN, K_GRU, K_LSTM } rnn_kind;

typedef enum act_fn {
  A_RELU,
  A_TANH,
  A_SIGMOID,
  A_AFFINE,
  A_LEAKYRELU,
  A_THRESHOLDEDRELU,
  A_SCALEDTANH,
  A_HARDSIGMOID,
  A_ELU,
  A_SOFTSIGN,
  A_SOFTPLUS
} act_fn;

static const struct {
  const char *name;
  act_fn fn;
  bool alpha, beta;    /* takes an alpha / beta */
  double def_a, def_b; /* used when the list has run out */
} act_table[] = {
    {"Relu", A_RELU, false, false, 0, 0},
    {"Tanh", A_TANH, false, false, 0, 0},
    {"Sigmoid", A_SIGMOID, false, false, 0, 0},
    {"Affine", A_AFFINE, true, true, 0, 0},
    {"LeakyRelu", A_LEAKYRELU, true, false, 0.01f, 0},
    {"ThresholdedRelu", A_THRESHOLDEDRELU, true, false, 0, 0},
    {"ScaledTanh", A_SCALEDTANH, true, true, 0, 0},
    {"HardSigmoid", A_HARDSIGMOID, true, true, 0.2f, 0.5f},
    {"Elu", A_ELU, true, false, 1.0, 0},
    {"Softsign", A_SOFTSIGN, false, false, 0, 0},
    {"Softplus", A_SOFTPLUS, false, false, 0, 0},
};

typedef struct act {
  act_fn fn;
  double alpha, beta;
} act;

/* Everything the attributes say, decoded and validated. */
typedef struct rnn_cfg {
  rnn_kind kind;
  int gates; /* rows of W per hidden unit: 1 (RNN), 3 (GRU), 4 (LSTM) */
  int nacts; /* activations per direction: 1, 2, 3 */
  int nd;    /* number of directions */
  bool reverse[2];
  bool has_hidden;
  int64_t hidden;
  int layout;
  bool has_clip;
  double clip;
  bool linear_before_reset;
  bool input_forget;
  act acts[2][3];
} rnn_cfg;

static bool same_name_nocase(const char *a, const char *b) {
  for (; *a && *b; a++, b++) {
    char x = *a, y = *b;
    if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
    if (x != y) return false;
  }
  return *a == *b;
}

static double act_apply(const act *a, double x) {
  switch (a->fn) {
  case A_RELU: return x > 0 ? x : 0;
  case A_TANH: return tanh(x);
  case A_SIGMOID: return 1.0 / (1.0 + exp(-x));
  case A_AFFINE: return a->alpha * x + a->beta;
  case A_LEAKYRELU: return x >= 0 ? x : a->alpha * x;
  case A_THRESHOLDEDRELU: return x >= a->alpha ? x : 0;
  case A_SCALEDTANH: return a->alpha * tanh(a->beta * x);
  case A_HARDSIGMOID: {
    double y = a->alpha * x + a->beta;
    return y < 0 ? 0 : y > 1 ? 1 : y;
  }
  case A_ELU: return x >= 0 ? x : a->alpha * (exp(x) - 1.0);
  case A_SOFTSIGN: return x / (1.0 + fabs(x));
  case A_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  }
  return x; /* not reached */
}

/* Applies the activation to x after the clip (when there is one). */
static double act_clip(const rnn_cfg *cfg, const act *a, double x) {
  if (cfg->has_clip) x = x > cfg->clip ? cfg->clip : x < -cfg->clip ? -cfg->clip : x;
  return act_apply(a, x);
}

/* Declared element type of the node's input i, KILN_UNDEFINED if unknown. */
static kiln_dtype declared_type(const kiln_graph *g, const kiln_node *n, int i, bool output) {
  int cnt = output ? n->n_out : n->n_in;
  const int *idx = output ? n->out : n->in;
  if (i >= cnt || idx[i] < 0) return KILN_UNDEFINED;
  const kiln_type *ty = &g->values[idx[i]].type;
  return ty->kind == KILN_TYPE_TENSOR ? ty->dtype : KILN_UNDEFINED;
}

static rnn_kind kind_of(const char *op) {
  if (!strcmp(op, "GRU")) return K_GRU;
  if (!strcmp(op, "LSTM")) return K_LSTM;
  return K_RNN;
}

/* Decodes and validates the node's attributes into cfg. Used both by the
 * static check and by the kernel (which cannot assume the check ran). */
static kiln_status parse_cfg(const kiln_node *n, rnn_cfg *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->kind = kind_of(n->op_type);
  cfg->gates = cfg->kind == K_RNN ? 1 : cfg->kind == K_GRU ? 3 : 4;
  cfg->nacts = cfg->kind == K_RNN ? 1 : cfg->kind == K_GRU ? 2 : 3;

  kiln_status s = kiln_opc_attr(n, "direction", KILN_ATTR_STRING, 1, 0);
  if (!s) s = kiln_opc_attr(n, "hidden_size", KILN_ATTR_INT, 1, 0);
  if (!s) s = kiln_opc_attr(n, "activations", KILN_ATTR_STRINGS, 1, 0);
  if (!s) s = kiln_opc_attr(n, "activation_alpha", KILN_ATTR_FLOATS, 1, 0);
  if (!s) s = kiln_opc_attr(n, "activation_beta", KILN_ATTR_FLOATS, 1, 0);
  if (!s) s = kiln_opc_attr(n, "clip", KILN_ATTR_FLOAT, 1, 0);
  if (!s) s = kiln_opc_attr(n, "layout", KILN_ATTR_INT, 14, 0);
  if (!s) s = kiln_opc_attr(n, "output_sequence", KILN_ATTR_INT, 1, 7);
  if (!s && cfg->kind == K_GRU) s = kiln_opc_attr(n, "linear_before_reset", KILN_ATTR_INT, 3, 0);
  if (!s && cfg->kind == K_LSTM) s = kiln_opc_attr(n, "input_forget", KILN_ATTR_INT, 1, 0);
  if (s) return s;

  const char *dir = kiln_attr_string(n, "direction", "forward");
  if (!strcmp(dir, "forward")) {
    cfg->nd = 1;
  } else if (!strcmp(dir, "reverse")) {
    cfg->nd = 1;
    cfg->reverse[0] = true;
  } else if (!strcmp(dir, "bidirectional")) {
    cfg->nd = 2;
    cfg->reverse[1] = true;
  } else {
    return kiln_fail(KILN_E_MODEL, "direction '%s' is not one of forward, reverse, bidirectional", dir);
  }

  const kiln_attr *hs = kiln_node_attr(n, "hidden_size");
  if (hs) {
    if (hs->i <= 0 || hs->i > KILN_MAX_NUMEL)
      return kiln_fail(KILN_E_MODEL, "hidden_size is %lld; it must be positive (and at most 2^34)",
                       (long long)hs->i);
    cfg->has_hidden = true;
    cfg->hidden = hs->i;
  }

  int64_t layout = kiln_attr_int(n, "layout", 0);
  if (layout != 0 && layout != 1)
    return kiln_fail(KILN_E_MODEL, "layout is %lld; it must be 0 or 1", (long long)layout);
  cfg->layout = (int)layout;

  const kiln_attr *cl = kiln_node_attr(n, "clip");
  if (cl) {
    if (!(cl->f > 0))
      return kiln_fail(KILN_E_MODEL, "clip is %g; it must be a positive threshold", (double)cl->f);
    cfg->has_clip = true;
    cfg->clip = cl->f;
  }
  cfg->linear_before_reset = cfg->kind == K_GRU && kiln_attr_int(n, "linear_before_reset", 0) != 0;
  cfg->input_forget = cfg->kind == K_LSTM && kiln_attr_int(n, "input_forget", 0) != 0;

  /* Activations: defaults, or the given list. */
  static const act_fn defaults[3][3] = {
      {A_TANH}, {A_SIGMOID, A_TANH}, {A_SIGMOID, A_TANH, A_TANH}};
  size_t na = 0, nalpha = 0, nbeta = 0;
  const kiln_attr *aa = kiln_node_attr(n, "activations");
  na = aa ? aa->n : 0;
  const float *alphas = kiln_attr_floats(n, "activation_alpha", &nalpha);
  const float *betas = kiln_attr_floats(n, "activation_beta", &nbeta);
  size_t per = (size_t)cfg->nacts, total = per * (size_t)cfg->nd;
  if (!aa) {
    for (int d = 0; d < cfg->nd; d++)
      for (int k = 0; k < cfg->nacts; k++) cfg->acts[d][k].fn = defaults[cfg->kind][k];
    return KILN_OK;
  }
  if (na != total && !(cfg->nd == 2 && na == per))
    return kiln_fail(KILN_E_MODEL, "%zu activations given; %s with direction %s takes %zu", na, n->op_type, dir,
                     total);
  size_t ia = 0, ib = 0;
  for (size_t k = 0; k < na; k++) {
    const char *name = aa->strings[k];
    size_t e = 0;
    while (e < sizeof act_table / sizeof *act_table && !same_name_nocase(name, act_table[e].name)) e++;
    if (e == sizeof act_table / sizeof *act_table)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                       "activation '%s' is not one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, ThresholdedRelu, "
                       "ScaledTanh, HardSigmoid, Elu, Softsign, Softplus",
                       name);
    act *a = &cfg->acts[k / per][k % per];
    a->fn = act_table[e].fn;
    if (act_table[e].alpha) a->alpha = ia < nalpha ? (double)alphas[ia++] : act_table[e].def_a;
    if (act_table[e].beta) a->beta = ib < nbeta ? (double)betas[ib++] : act_table[e].def_b;
  }
  if (cfg->nd == 2 && na == per)
    for (size_t k = 0; k < per; k++) cfg->acts[1][k] = cfg->acts[0][k];
  return KILN_OK;
}

#define T_RNN (KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_F16))

static const char *const in_names[8] = {"X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"};
static const char *const out_names[3] = {"Y", "Y_h", "Y_c"};

static kiln_status rnn_check(const kiln_graph *g, const kiln_node *n) {
  rnn_cfg cfg;
  kiln_status s = parse_cfg(n, &cfg);
  if (s) return s;
  kiln_dtype t0 = declared_type(g, n, 0, false);
  for (int i = 1; i < n->n_in; i++) {
    kiln_dtype t = declared_type(g, n, i, false);
    if (t == KILN_UNDEFINED) continue;
    if (i == 4) {
      if (t != KILN_I32 && t != KILN_I64)
        return kiln_fail(KILN_E_MISMATCH_DTYPE, "input 4 (sequence_lens) must be int32, not %s",
                         kiln_dtype_name(t));
    } else if (t0 != KILN_UNDEFINED && t != t0) {
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d (%s) has type %s, X has type %s", i, in_names[i],
                       kiln_dtype_name(t), kiln_dtype_name(t0));
    }
  }
  for (int i = 0; i < n->n_out; i++) {
    kiln_dtype t = declared_type(g, n, i, true);
    if (t != KILN_UNDEFINED && t0 != KILN_UNDEFINED && t != t0)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "output %d (%s) is declared %s, X has type %s", i, out_names[i],
                       kiln_dtype_name(t), kiln_dtype_name(t0));
  }
  return KILN_OK;
}

/* Fails unless t has the given rank and dims; ctx says where the expected
 * dims come from. */
static kiln_status want_shape(const kiln_tensor *t, int i, int rank, const int64_t *dims, const char *ctx) {
  bool ok = t->rank == rank;
  for (int k = 0; ok && k < rank; k++) ok = t->dims[k] == dims[k];
  if (ok) return KILN_OK;
  char a[128], b[128];
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d (%s) has shape %s; expected %s (%s)", i, in_names[i],
                   kiln_shape_str(t->rank, t->dims, a, sizeof a), kiln_shape_str(rank, dims, b, sizeof b), ctx);
}

/* ---------------------------------------------------------------- kernel */

/* Geometry of one call. */
typedef struct rnn_dims {
  int64_t seq, batch, input, hidden;
} rnn_dims;

/* Flat indices for the layout: X (t, b, i); states (d, b, j); Y (t, d, b, j). */
static int64_t x_at(const rnn_cfg *cfg, const rnn_dims *D, int64_t t, int64_t b, int64_t i) {
  return (cfg->layout ? b * D->seq + t : t * D->batch + b) * D->input + i;
}
static int64_t st_at(const rnn_cfg *cfg, const rnn_dims *D, int64_t d, int64_t b, int64_t j) {
  return (cfg->layout ? b * cfg->nd + d : d * D->batch + b) * D->hidden + j;
}
static int64_t y_at(const rnn_cfg *cfg, const rnn_dims *D, int64_t t, int64_t d, int64_t b, int64_t j) {
  return (cfg->layout ? (b * D->seq + t) * cfg->nd + d : (t * cfg->nd + d) * D->batch + b) * D->hidden + j;
}

/* Runs one direction d over one batch row b. Work buffers (doubles): h, c,
 * hn (H each), xw, rh (gates * H each). */
static void run_row(const kiln_op_call *c, const rnn_cfg *cfg, const rnn_dims *D, int64_t d, int64_t b, int64_t len,
                    double *h, double *cst, double *hn, double *xw, double *rh, kiln_tensor *Y, kiln_tensor *Yh,
                    kiln_tensor *Yc) {
  const kiln_tensor *X = c->in[0], *W = c->in[1], *R = c->in[2];
  const kiln_tensor *B = kiln_opc_opt_in(c, 3), *H0 = kiln_opc_opt_in(c, 5);
  const kiln_tensor *C0 = cfg->kind == K_LSTM ? kiln_opc_opt_in(c, 6) : NULL;
  const kiln_tensor *P = cfg->kind == K_LSTM ? kiln_opc_opt_in(c, 7) : NULL;
  const int64_t H = D->hidden, IN = D->input, GH = cfg->gates * H;
  const act *acts = cfg->acts[d];

  for (int64_t j = 0; j < H; j++) {
    h[j] = H0 ? kiln_get_f(H0, st_at(cfg, D, d, b, j)) : 0.0;
    cst[j] = C0 ? kiln_get_f(C0, st_at(cfg, D, d, b, j)) : 0.0;
  }
  for (int64_t s = 0; s < len; s++) {
    int64_t t = cfg->reverse[d] ? len - 1 - s : s;
    /* xw = X_t W^T + Wb, rh = H_{t-1} R^T + Rb, for every gate row (the
     * GRU hidden gate's rh is recomputed below unless linear_before_reset). */
    for (int64_t r = 0; r < GH; r++) {
      double accx = B ? kiln_get_f(B, d * 2 * GH + r) : 0.0;
      for (int64_t i = 0; i < IN; i++)
        accx += kiln_get_f(X, x_at(cfg, D, t, b, i)) * kiln_get_f(W, (d * GH + r) * IN + i);
      double acch = B ? kiln_get_f(B, d * 2 * GH + GH + r) : 0.0;
      for (int64_t i = 0; i < H; i++) acch += h[i] * kiln_get_f(R, (d * GH + r) * H + i);
      xw[r] = accx;
      rh[r] = acch;
    }
    switch (cfg->kind) {
    case K_RNN:
      for (int64_t j = 0; j < H; j++) hn[j] = act_clip(cfg, &acts[0], xw[j] + rh[j]);
      break;
    case K_GRU: {
      /* gates z, r, h; z in xw[0..H), r in xw[H..2H) after activation */
      for (int64_t j = 0; j < 2 * H; j++) xw[j] = act_clip(cfg, &acts[0], xw[j] + rh[j]);
      const double *z = xw, *rg = xw + H;
      for (int64_t j = 0; j < H; j++) {
        double pre;
        if (cfg->linear_before_reset) {
          pre = xw[2 * H + j] + rg[j] * rh[2 * H + j];
        } else {
          double acc = B ? kiln_get_f(B, d * 2 * GH + GH + 2 * H + j) : 0.0;
          for (int64_t i = 0; i < H; i++) acc += rg[i] * h[i] * kiln_get_f(R, (d * GH + 2 * H + j) * H + i);
          pre = xw[2 * H + j] + acc;
        }
        double ht = act_clip(cfg, &acts[1], pre);
        hn[j] = (1.0 - z[j]) * ht + z[j] * h[j];
      }
      break;
    }
    case K_LSTM:
      /* gates i, o, f, c at offsets 0, H, 2H, 3H; P holds i, o, f */
      for (int64_t j = 0; j < H; j++) {
        double pi = P ? kiln_get_f(P, d * 3 * H + j) : 0.0;
        double po = P ? kiln_get_f(P, d * 3 * H + H + j) : 0.0;
        double pf = P ? kiln_get_f(P, d * 3 * H + 2 * H + j) : 0.0;
        double ig = act_clip(cfg, &acts[0], xw[j] + rh[j] + pi * cst[j]);
        double fg = cfg->input_forget ? 1.0 - ig : act_clip(cfg, &acts[0], xw[2 * H + j] + rh[2 * H + j] + pf * cst[j]);
        double cg = act_clip(cfg, &acts[1], xw[3 * H + j] + rh[3 * H + j]);
        double cn = fg * cst[j] + ig * cg;
        double og = act_clip(cfg, &acts[0], xw[H + j] + rh[H + j] + po * cn);
        hn[j] = og * act_apply(&acts[2], cn);
        cst[j] = cn; /* row j of C is read only by row j */
      }
      break;
    }
    memcpy(h, hn, (size_t)H * sizeof *h);
    if (Y)
      for (int64_t j = 0; j < H; j++) kiln_set_f(Y, y_at(cfg, D, t, d, b, j), h[j]);
  }
  if (len == 0) return; /* no valid step: Y_h and Y_c rows stay zero */
  if (Yh)
    for (int64_t j = 0; j < H; j++) kiln_set_f(Yh, st_at(cfg, D, d, b, j), h[j]);
  if (Yc)
    for (int64_t j = 0; j < H; j++) kiln_set_f(Yc, st_at(cfg, D, d, b, j), cst[j]);
}

static kiln_status rnn_run(const kiln_op_call *c) {
  rnn_cfg cfg;
  kiln_status s = parse_cfg(c->node, &cfg);
  if (!s) s = kiln_op_need(c, 0);
  if (!s) s = kiln_op_need(c, 1);
  if (!s) s = kiln_op_need(c, 2);
  if (s) return s;
  const kiln_tensor *X = c->in[0], *W = c->in[1], *R = c->in[2];
  const kiln_tensor *B = kiln_opc_opt_in(c, 3), *SL = kiln_opc_opt_in(c, 4), *H0 = kiln_opc_opt_in(c, 5);
  const kiln_tensor *C0 = cfg.kind == K_LSTM ? kiln_opc_opt_in(c, 6) : NULL;
  const kiln_tensor *P = cfg.kind == K_LSTM ? kiln_opc_opt_in(c, 7) : NULL;
  const char *op = c->node->op_type;
  char a[128], b2[128];

  /* types */
  kiln_dtype dt = X->dtype;
  if (dt != KILN_F32 && dt != KILN_F64 && dt != KILN_F16)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "%s takes float16, float or double X, not %s", op,
                     kiln_dtype_name(dt));
  const kiln_tensor *same[8] = {X, W, R, B, NULL, H0, C0, P};
  for (int i = 1; i < 8; i++)
    if (same[i] && same[i]->dtype != dt)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d (%s) has type %s, X has type %s", i, in_names[i],
                       kiln_dtype_name(same[i]->dtype), kiln_dtype_name(dt));
  if (SL && SL->dtype != KILN_I32 && SL->dtype != KILN_I64)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input 4 (sequence_lens) must be int32, not %s",
                     kiln_dtype_name(SL->dtype));

  /* shapes */
  if (X->rank != 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (X) has shape %s; it must be 3-D %s",
                     kiln_shape_str(X->rank, X->dims, a, sizeof a),
                     cfg.layout ? "[batch_size, seq_length, input_size]" : "[seq_length, batch_size, input_size]");
  rnn_dims D;
  D.seq = cfg.layout ? X->dims[1] : X->dims[0];
  D.batch = cfg.layout ? X->dims[0] : X->dims[1];
  D.input = X->dims[2];
  if (R->rank != 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "input 2 (R) has shape %s; it must be 3-D [num_directions, %d*hidden_size, hidden_size]",
                     kiln_shape_str(R->rank, R->dims, a, sizeof a), cfg.gates);
  if (!cfg.has_hidden && (R->dims[2] < 0 || R->dims[2] > KILN_MAX_NUMEL))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (R) has shape %s; its last dim (hidden_size) is out of range",
                     kiln_shape_str(R->rank, R->dims, a, sizeof a));
  D.hidden = cfg.has_hidden ? cfg.hidden : R->dims[2];
  const int64_t nd = cfg.nd, H = D.hidden, GH = cfg.gates * D.hidden;
  {
    char ctx[200];
    snprintf(ctx, sizeof ctx, "num_directions %lld, hidden_size %lld%s, batch_size %lld, input_size %lld, layout %d",
             (long long)nd, (long long)H, cfg.has_hidden ? "" : " from R", (long long)D.batch, (long long)D.input,
             cfg.layout);
    int64_t rd[3] = {nd, GH, H};
    if ((s = want_shape(R, 2, 3, rd, ctx))) return s;
    int64_t wd[3] = {nd, GH, D.input};
    if ((s = want_shape(W, 1, 3, wd, ctx))) return s;
    int64_t bd[2] = {nd, 2 * GH};
    if (B && (s = want_shape(B, 3, 2, bd, ctx))) return s;
    int64_t sd[1] = {D.batch};
    if (SL && (s = want_shape(SL, 4, 1, sd, ctx))) return s;
    int64_t hd[3] = {cfg.layout ? D.batch : nd, cfg.layout ? nd : D.batch, H};
    if (H0 && (s = want_shape(H0, 5, 3, hd, ctx))) return s;
    if (C0 && (s = want_shape(C0, 6, 3, hd, ctx))) return s;
    int64_t pd[2] = {nd, 3 * H};
    if (P && (s = want_shape(P, 7, 2, pd, ctx))) return s;
  }
  if (SL)
    for (int64_t b = 0; b < D.batch; b++) {
      int64_t L = kiln_get_i(SL, b);
      if (L < 0 || L > D.seq)
        return kiln_fail(KILN_E_INVALID_VALUE,
                         "sequence_lens[%lld] is %lld; it must be in [0, %lld] (seq_length of X %s)", (long long)b,
                         (long long)L, (long long)D.seq, kiln_shape_str(X->rank, X->dims, b2, sizeof b2));
    }

  /* outputs */
  kiln_tensor *outs[3] = {NULL, NULL, NULL};
  int nouts = cfg.kind == K_LSTM ? 3 : 2;
  for (int k = 0; k < nouts && k < c->n_out; k++) {
    if (!c->out_used[k]) continue;
    int64_t dims[4];
    int rank;
    if (k == 0) {
      rank = 4;
      if (cfg.layout) dims[0] = D.batch, dims[1] = D.seq, dims[2] = nd, dims[3] = H;
      else dims[0] = D.seq, dims[1] = nd, dims[2] = D.batch, dims[3] = H;
    } else {
      rank = 3;
      if (cfg.layout) dims[0] = D.batch, dims[1] = nd, dims[2] = H;
      else dims[0] = nd, dims[1] = D.batch, dims[2] = H;
    }
    if ((s = kiln_tensor_alloc(&c->out[k], dt, rank, dims))) {
      kiln_error_prefix("output %d (%s)", k, out_names[k]);
      return s;
    }
    outs[k] = &c->out[k];
  }

  /* work: h, c, hn (H each), xw, rh (GH each) */
  size_t nwork = (size_t)(3 * H + 2 * GH) + 1;
  double *work = kiln_calloc(nwork, sizeof *work);
  if (!work) return kiln_fail(KILN_E_NOMEM, "out of memory for %s work buffers (hidden_size %lld)", op, (long long)H);
  double *h = work, *cst = h + H, *hn = cst + H, *xw = hn + H, *rh = xw + GH;
  for (int64_t d = 0; d < nd; d++)
    for (int64_t b = 0; b < D.batch; b++) {
      int64_t len = SL ? kiln_get_i(SL, b) : D.seq;
      run_row(c, &cfg, &D, d, b, len, h, cst, hn, xw, rh, outs[0], outs[1], outs[2]);
    }
  kiln_free(work);
  return KILN_OK;
}

#define RNN_ATTRS "activation_alpha activation_beta activations clip direction hidden_size layout output_sequence"

const kiln_op_def kiln_ref_ops_rnn[] = {
    {"RNN", 3, 6, 0, 2, RNN_ATTRS, T_RNN, rnn_run, rnn_check},
    {"GRU", 3, 6, 0, 2, RNN_ATTRS " linear_before_reset", T_RNN, rnn_run, rnn_check},
    {"LSTM", 3, 8, 0, 3, RNN_ATTRS " input_forget", T_RNN, rnn_run, rnn_check},
    {0},
};
