/* reference/ops_train: the optimizer operators of the ONNX training preview
 * domain (KILN_DOMAIN_TRAINING, "ai.onnx.preview.training", version 1):
 * Adagrad, Adam and Momentum. Each takes a learning rate R and an update
 * count T (one element each), then n tensors to optimise X1..Xn, their
 * gradients G1..Gn and the optimizer's state per tensor (Adagrad: the
 * accumulated squared gradients H; Momentum: the momentum V; Adam: V and
 * H), and returns the updated tensors and state, group by group: X_new1..n,
 * then each state's new values. Each element is updated on its own (an
 * elementwise map per tensor), in double, rounded once to the tensor's
 * type. The formulas are the operators' definitions (onnx/defs/training):
 *   G' = norm_coefficient * X + G                   (all three)
 *   Adagrad: r = R / (1 + T * decay_factor); H_new = H + G'^2;
 *            X_new = X - r * G' / (sqrt(H_new) + epsilon)
 *   Momentum: beta' = T > 0 ? beta : 1; V_new = alpha * V + beta' * G';
 *            standard X_new = X - R * V_new,
 *            nesterov X_new = X - R * (G' + alpha * V_new)
 *   Adam:    V_new = alpha * V + (1 - alpha) * G';
 *            H_new = beta * H + (1 - beta) * G'^2;
 *            r = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R;
 *            X_new = (1 - norm_coefficient_post) *
 *                    (X - r * V_new / (sqrt(H_new) + epsilon)) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reference/opcheck.h"
#include "reference/ops.h"

#define FL (KILN_T(KILN_F32) | KILN_T(KILN_F64))

enum { ADAGRAD, MOMENTUM, ADAM };

/* Inputs per optimised tensor: X, G and the state tensors. */
static int groups_of(int op) { return op == ADAM ? 4 : 3; }

static int op_of(const kiln_node *n) {
  return !strcmp(n->op_type, "Adagrad") ? ADAGRAD : !strcmp(n->op_type, "Momentum") ? MOMENTUM : ADAM;
}

/* The counts (2 + m * n inputs, (m - 1) * n outputs, n >= 1), the
 * attributes' types (mode a string, the rest floats) and, for Momentum, its
 * required attributes and mode. */
static kiln_status check_train(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  int op = op_of(n), m = groups_of(op), k = n->n_in - 2;
  if (k < m || k % m)
    return kiln_fail(KILN_E_MODEL, "%d inputs: R, T and %d tensors per optimised tensor (X, G%s) expected", n->n_in, m,
                     op == ADAGRAD ? ", H" : op == MOMENTUM ? ", V" : ", V, H");
  if (n->n_out != (m - 1) * (k / m))
    return kiln_fail(KILN_E_MODEL, "%d outputs for %d optimised tensors; %d expected", n->n_out, k / m,
                     (m - 1) * (k / m));
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] < 0) return kiln_fail(KILN_E_MODEL, "input %d is empty; every input is required", i);
  for (int a = 0; a < n->n_attrs; a++) { /* (the registry admits only the op's own names) */
    const char *nm = n->attrs[a].name;
    kiln_status s = kiln_opc_attr(n, nm, strcmp(nm, "mode") ? KILN_ATTR_FLOAT : KILN_ATTR_STRING, 1, 0);
    if (s) return s;
  }
  if (op == MOMENTUM) {
    static const char *const req[] = {"alpha", "beta", "mode", "norm_coefficient"};
    for (int i = 0; i < 4; i++)
      if (!kiln_node_attr(n, req[i])) return kiln_fail(KILN_E_MODEL, "attribute '%s' is required", req[i]);
    const char *mode = kiln_attr_string(n, "mode", "");
    if (strcmp(mode, "standard") && strcmp(mode, "nesterov"))
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "mode '%s' is not 'standard' or 'nesterov'", mode);
  }
  return KILN_OK;
}

static kiln_status run_train(const kiln_op_call *c) {
  kiln_status s = check_train(c->graph, c->node);
  if (s) return s;
  int op = op_of(c->node), m = groups_of(op), nt = (c->n_in - 2) / m;
  double R;
  int64_t T;
  if ((s = kiln_opc_need(c, 0, "R", FL, "float or double")) || (s = kiln_opc_scalar_f(c->in[0], 0, "R", &R)) ||
      (s = kiln_opc_need(c, 1, "T", KILN_T(KILN_I64), "int64")) || (s = kiln_opc_scalar_i(c->in[1], 1, "T", &T)))
    return s;
  const kiln_node *n = c->node;
  double nc = kiln_attr_float(n, "norm_coefficient", 0.0f), eps = kiln_attr_float(n, "epsilon", 1e-6f);
  double alpha = kiln_attr_float(n, "alpha", op == ADAM ? 0.9f : 0.0f);
  double beta = kiln_attr_float(n, "beta", op == ADAM ? 0.999f : 0.0f);
  double r = R;
  if (op == ADAGRAD) r = R / (1 + (double)T * kiln_attr_float(n, "decay_factor", 0.0f));
  if (op == ADAM && T > 0) r = R * sqrt(1 - pow(beta, (double)T)) / (1 - pow(alpha, (double)T));
  double post = op == ADAM ? kiln_attr_float(n, "norm_coefficient_post", 0.0f) : 0;
  bool nesterov = op == MOMENTUM && !strcmp(kiln_attr_string(n, "mode", ""), "nesterov");
  double beta_t = T > 0 ? beta : 1;
  for (int t = 0; t < nt; t++) {
    const kiln_tensor *in[4];
    char what[32];
    for (int q = 0; q < m; q++) {
      static const char *const names[3][4] = {{"X", "G", "H"}, {"X", "G", "V"}, {"X", "G", "V", "H"}};
      snprintf(what, sizeof what, "%s%d", names[op][q], t + 1);
      if ((s = kiln_opc_need(c, 2 + q * nt + t, what, FL, "float or double"))) return s;
      in[q] = c->in[2 + q * nt + t];
      char b1[160], b2[160];
      if (q && (in[q]->rank != in[0]->rank || memcmp(in[q]->dims, in[0]->dims, sizeof(int64_t) * (size_t)in[0]->rank)))
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has shape %s; X%d's shape %s expected", what,
                         kiln_shape_str(in[q]->rank, in[q]->dims, b1, sizeof b1), t + 1,
                         kiln_shape_str(in[0]->rank, in[0]->dims, b2, sizeof b2));
    }
    /* outputs: X_new (group 0), then each state (group q - 1 for input group q >= 2) */
    kiln_tensor *out[3] = {NULL, NULL, NULL};
    for (int q = 0; q < m - 1; q++) {
      int k = q * nt + t;
      if (!kiln_opc_out_wanted(c, k)) continue;
      const kiln_tensor *like = in[q ? q + 1 : 0];
      if ((s = kiln_tensor_alloc(&c->out[k], like->dtype, like->rank, like->dims))) return s;
      out[q] = &c->out[k];
    }
    for (int64_t i = 0; i < in[0]->numel; i++) {
      double x = kiln_get_f(in[0], i), g = nc * x + kiln_get_f(in[1], i), xn, s1, s2 = 0;
      if (op == ADAGRAD) {
        s1 = kiln_get_f(in[2], i) + g * g;
        xn = x - r * g / (sqrt(s1) + eps);
      } else if (op == MOMENTUM) {
        s1 = alpha * kiln_get_f(in[2], i) + beta_t * g;
        xn = x - R * (nesterov ? g + alpha * s1 : s1);
      } else {
        s1 = alpha * kiln_get_f(in[2], i) + (1 - alpha) * g;
        s2 = beta * kiln_get_f(in[3], i) + (1 - beta) * g * g;
        xn = (1 - post) * (x - r * s1 / (sqrt(s2) + eps));
      }
      if (out[0]) kiln_set_f(out[0], i, xn);
      if (out[1]) kiln_set_f(out[1], i, s1);
      if (out[2]) kiln_set_f(out[2], i, s2);
    }
  }
  return KILN_OK;
}

/* 2 + m * n inputs for n up to 1024 tensors */
const kiln_op_def kiln_ref_ops_train[] = {
    {"Adagrad", 5, 2 + 3 * 1024, 2, 2 * 1024, "decay_factor epsilon norm_coefficient", FL, run_train, check_train},
    {"Momentum", 5, 2 + 3 * 1024, 2, 2 * 1024, "alpha beta mode norm_coefficient", FL, run_train, check_train},
    {"Adam", 6, 2 + 4 * 1024, 3, 3 * 1024, "alpha beta epsilon norm_coefficient norm_coefficient_post", FL, run_train,
     check_train},
    {0},
};
