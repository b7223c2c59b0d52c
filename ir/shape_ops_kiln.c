/* ir/shape_ops_kiln: shape functions (see ir/shape.h) of the operators of
 * kiln's own domain, KILN_DOMAIN (reference/ops_kiln.c, docs/KILN_DOMAIN.md).
 * What depends on values (index ranges, lengths adding up) is checked by
 * the kernels at run time; the shapes here depend only on shapes. */
#include <string.h>

#include "ir/shape.h"

#define TRY(x)            \
  do {                    \
    kiln_status s_ = (x); \
    if (s_) return s_;    \
  } while (0)

static kiln_status want_rank(const kiln_vshape *x, int r, const char *what) {
  if (x->rank == r) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has rank %d; rank %d expected", what, x->rank, r);
}

static kiln_status want_int(const kiln_vshape *x, const char *what) {
  if (x->dtype == KILN_I32 || x->dtype == KILN_I64) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_DTYPE, "%s has type %s; int32 or int64 expected", what, kiln_dtype_name(x->dtype));
}

/* The last dim of x plus k (k = ±8 for the rowwise scale and bias), which
 * must stay >= 0 when it is a constant. */
static kiln_status last_plus(kiln_shape_call *c, const kiln_vshape *x, int64_t k, kiln_dimx *out) {
  int64_t v;
  kiln_dimx last = x->dims[x->rank - 1];
  if (kiln_dimx_is_const(c->tab, last, &v) && v + k < 0)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "rows of %lld bytes cannot hold the float scale and bias (8 bytes)",
                     (long long)v);
  return kiln_dimx_add_const(c->tab, last, k, out);
}

/* SparseLengths{Sum,WeightedSum,Mean}[Fused8BitRowwise]: [M, d1..dk] (float
 * tables) or [M, D] (8-bit rowwise [R, D + 8]), float32; M = LENGTHS (or
 * OFFSETS) count. */
static kiln_status sls(kiln_shape_call *c) {
  const char *op = c->node->op_type;
  bool weighted = strstr(op, "Weighted") != NULL;
  int ix = weighted ? 2 : 1;
  const kiln_vshape *data, *idx, *seg;
  TRY(kiln_shape_in(c, 0, &data));
  TRY(kiln_shape_in(c, ix, &idx));
  TRY(kiln_shape_in(c, ix + 1, &seg));
  if (weighted) {
    const kiln_vshape *w;
    TRY(kiln_shape_in(c, 1, &w));
    TRY(want_rank(w, 1, "WEIGHTS"));
    if (w->dtype != KILN_F32)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "WEIGHTS has type %s; float expected", kiln_dtype_name(w->dtype));
  }
  TRY(want_rank(idx, 1, "INDICES"));
  TRY(want_int(idx, "INDICES"));
  TRY(want_rank(seg, 1, "LENGTHS/OFFSETS"));
  TRY(want_int(seg, "LENGTHS/OFFSETS"));
  kiln_vshape *y = &c->out[0];
  y->dtype = KILN_F32;
  y->dims[0] = seg->dims[0];
  if (data->dtype == KILN_U8) {
    TRY(want_rank(data, 2, "an 8-bit rowwise DATA table"));
    y->rank = 2;
    return last_plus(c, data, -8, &y->dims[1]);
  }
  if (data->dtype != KILN_F32 && data->dtype != KILN_F16)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "DATA has type %s; float, float16 or uint8 (8-bit rowwise) expected",
                     kiln_dtype_name(data->dtype));
  if (data->rank < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "DATA is a scalar; a table [rows, ...] expected");
  y->rank = data->rank;
  for (int d = 1; d < data->rank; d++) y->dims[d] = data->dims[d];
  return KILN_OK;
}

/* FloatToFused8BitRowwiseQuantized: [..., D] float -> [..., D + 8] uint8. */
static kiln_status quant(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  if (x->rank < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input is a scalar; rows [..., D] expected");
  kiln_shape_copy(&c->out[0], x);
  c->out[0].dtype = KILN_U8;
  return last_plus(c, x, 8, &c->out[0].dims[x->rank - 1]);
}

/* Fused8BitRowwiseQuantizedToFloat: [..., D + 8] uint8 -> [..., D] float. */
static kiln_status dequant(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  if (x->rank < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input is a scalar; rows [..., D + 8] expected");
  kiln_shape_copy(&c->out[0], x);
  c->out[0].dtype = KILN_F32;
  return last_plus(c, x, -8, &c->out[0].dims[x->rank - 1]);
}

/* LSTMUnit: HIDDEN_T and CELL_T are shaped as CELL_T_M_1 (GATES: [..., 4·D]). */
static kiln_status lstmu(kiln_shape_call *c) {
  const kiln_vshape *h, *cp, *g;
  TRY(kiln_shape_in(c, 0, &h));
  TRY(kiln_shape_in(c, 1, &cp));
  TRY(kiln_shape_in(c, 2, &g));
  if (cp->rank < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "CELL_T_M_1 is a scalar; [..., N, D] expected");
  TRY(want_rank(h, cp->rank, "HIDDEN_T_M_1"));
  TRY(want_rank(g, cp->rank, "GATES"));
  kiln_dimx u, d4;
  for (int d = 0; d < cp->rank; d++) {
    TRY(kiln_shape_unify(c, "HIDDEN_T_M_1", d, h->dims[d], cp->dims[d], &u));
    if (d < cp->rank - 1) TRY(kiln_shape_unify(c, "GATES", d, g->dims[d], cp->dims[d], &u));
  }
  TRY(kiln_dimx_mul_const(c->tab, cp->dims[cp->rank - 1], 4, &d4));
  TRY(kiln_shape_unify(c, "GATES (4·D)", cp->rank - 1, g->dims[cp->rank - 1], d4, &u));
  for (int k = 0; k < 2 && k < c->n_out; k++) {
    kiln_shape_copy(&c->out[k], cp);
    c->out[k].dtype = KILN_F32;
  }
  return KILN_OK;
}

const kiln_shape_def kiln_shape_ops_kiln[] = {
    {"SparseLengthsSum", sls},
    {"SparseLengthsWeightedSum", sls},
    {"SparseLengthsMean", sls},
    {"SparseLengthsSumFused8BitRowwise", sls},
    {"SparseLengthsWeightedSumFused8BitRowwise", sls},
    {"SparseLengthsMeanFused8BitRowwise", sls},
    {"FloatToFused8BitRowwiseQuantized", quant},
    {"Fused8BitRowwiseQuantizedToFloat", dequant},
    {"LSTMUnit", lstmu},
    {NULL, NULL},
};
