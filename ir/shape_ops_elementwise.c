/* ir/shape_ops_elementwise: shape functions of the elementwise, activation,
 * comparison, logical and cast operators (see ir/shape.h). */
#include "ir/shape.h"

/* y has x's type and shape. */
static kiln_status same(kiln_shape_call *c) {
  const kiln_vshape *x;
  kiln_status s = kiln_shape_in(c, 0, &x);
  if (s) return s;
  kiln_shape_copy(&c->out[0], x);
  return KILN_OK;
}

/* Numpy-broadcast binary arithmetic; tracks values of small int tensors. */
static kiln_status arith(kiln_shape_call *c) {
  const kiln_vshape *a, *b;
  kiln_status s;
  if ((s = kiln_shape_in(c, 0, &a)) || (s = kiln_shape_in(c, 1, &b))) return s;
  const kiln_vshape *ins[2] = {a, b};
  kiln_vshape *y = &c->out[0];
  y->dtype = a->dtype;
  if ((s = kiln_shape_broadcast(c, 2, ins, y))) return s;
  /* values: elementwise on tracked int vectors of equal length or a scalar */
  if (kiln_dtype_is_int(a->dtype) && a->nvals >= 0 && b->nvals >= 0 && y->rank <= 1) {
    int n = a->nvals > b->nvals ? a->nvals : b->nvals;
    if ((a->nvals == n || a->nvals == 1) && (b->nvals == n || b->nvals == 1)) {
      const char *op = c->node->op_type;
      for (int k = 0; k < n; k++) {
        kiln_dimx p = a->vals[a->nvals == 1 ? 0 : k], q = b->vals[b->nvals == 1 ? 0 : k], r;
        if (op[0] == 'A') s = kiln_dimx_add(c->tab, p, q, &r);
        else if (op[0] == 'S') s = kiln_dimx_sub(c->tab, p, q, &r);
        else if (op[0] == 'M') s = kiln_dimx_mul(c->tab, p, q, &r);
        else { /* Div on integers truncates toward zero: exact only for non-negative values */
          int64_t lo, hi, lo2, hi2;
          if (kiln_dimx_range(c->tab, p, &lo, &hi) || kiln_dimx_range(c->tab, q, &lo2, &hi2) || lo < 0 || lo2 < 1)
            goto untracked;
          s = kiln_dimx_fdiv(c->tab, p, q, &r);
        }
        if (s) goto untracked; /* e.g. an overflow: values just stay unknown */
        y->vals[k] = r;
      }
      y->nvals = n;
    }
  }
  return KILN_OK;
untracked:
  kiln_error_clear();
  y->nvals = -1;
  return KILN_OK;
}

const kiln_shape_def kiln_shape_ops_elementwise[] = {
    {"Relu", same},
    {"Add", arith},
    {"Sub", arith},
    {"Mul", arith},
    {"Div", arith},
    {NULL, NULL},
};
