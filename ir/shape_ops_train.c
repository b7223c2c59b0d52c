/* ir/shape_ops_train: shape functions (see ir/shape.h) of the optimizers of
 * ONNX's training preview domain, KILN_DOMAIN_TRAINING (reference/ops_train.c):
 * Adagrad, Adam and Momentum. Inputs R, T, then m groups of n tensors (X,
 * G and the state: m = 3, or 4 for Adam); outputs m - 1 groups of n: the
 * new X (like X) and the new state (like that state's input). Every tensor
 * of a group position has X's shape; the values' types are the inputs'. */
#include <string.h>

#include "ir/shape.h"

static kiln_status optimizer(kiln_shape_call *c) {
  int m = strcmp(c->node->op_type, "Adam") ? 3 : 4, k = c->n_in - 2, n = k / m;
  if (k < m || k % m || c->n_out != (m - 1) * n)
    return kiln_fail(KILN_E_MODEL, "%d inputs and %d outputs: R, T, then %d groups of n tensors in, %d groups out",
                     c->n_in, c->n_out, m, m - 1);
  const kiln_vshape *r, *t;
  kiln_status s = kiln_shape_in(c, 0, &r);
  if (!s) s = kiln_shape_in(c, 1, &t);
  if (s) return s;
  if (r->rank > 1 || t->rank > 1)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "R and T are one element each; ranks %d and %d given", r->rank, t->rank);
  for (int j = 0; j < n && !s; j++) {
    const kiln_vshape *x, *o;
    if ((s = kiln_shape_in(c, 2 + j, &x))) break;
    for (int q = 1; q < m && !s; q++) {
      if ((s = kiln_shape_in(c, 2 + q * n + j, &o))) break;
      if (o->rank != x->rank) {
        s = kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d has rank %d; X%d's rank %d expected", 2 + q * n + j, o->rank,
                      j + 1, x->rank);
        break;
      }
      kiln_dimx u;
      for (int d = 0; d < x->rank && !s; d++) s = kiln_shape_unify(c, "an optimised tensor's group", d, o->dims[d], x->dims[d], &u);
      if (!s && q >= 2) kiln_shape_copy(&c->out[(q - 1) * n + j], o);
    }
    if (!s) kiln_shape_copy(&c->out[j], x);
  }
  return s;
}

const kiln_shape_def kiln_shape_ops_train[] = {
    {"Adagrad", optimizer},
    {"Momentum", optimizer},
    {"Adam", optimizer},
    {NULL, NULL},
};
