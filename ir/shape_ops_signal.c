/* ir/shape_ops_signal: shape functions (see ir/shape.h) of the ops of
 * reference/ops_signal.c (DFT, STFT, MelWeightMatrix) and
 * reference/ops_text.c (TfIdfVectorizer). A length given by a scalar input
 * is that input's value when known at compile time (a constant or a tracked
 * expression: Shape -> Gather chains stay symbolic), else a data-dependent
 * dim resolved at run time. */
#include <string.h>

#include "ir/shape.h"

#define TRY(x)                                                                                               \
  do {                                                                                                       \
    kiln_status s_ = (x);                                                                                    \
    if (s_) return s_;                                                                                       \
  } while (0)

static const kiln_vshape *opt_in(const kiln_shape_call *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

/* The value of scalar input i as a dim: known (constant or tracked) or a
 * fresh symbol for output 0, dim d. *known is false for the latter. */
static kiln_status scalar_dim(kiln_shape_call *c, int i, const char *what, int d, kiln_dimx *out, bool *known) {
  const kiln_vshape *v = c->in[i];
  if (v->rank > 1 || (v->rank == 1 && !kiln_dimx_is_const(c->tab, v->dims[0], &(int64_t){0})))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d (%s) has rank %d; a scalar is expected", i, what, v->rank);
  int64_t val;
  int n;
  *known = true;
  if (kiln_shape_const_ints(c, i, &val, 1, &n) && n == 1) {
    if (val < 1) return kiln_fail(KILN_E_INVALID_VALUE, "input %d (%s) is %lld; it must be positive", i, what, (long long)val);
    return kiln_dimx_const(c->tab, val, out);
  }
  if (v->nvals == 1) return *out = v->vals[0], KILN_OK;
  *known = false;
  return kiln_shape_fresh(c, 0, d, out);
}

/* The last dim of x must be 1 or 2 when known; *cplx is 1 (complex), 0
 * (real) or -1 (unknown). */
static kiln_status complex_dim(kiln_shape_call *c, const kiln_vshape *x, const char *what, int *cplx) {
  int64_t v;
  *cplx = -1;
  if (!kiln_dimx_is_const(c->tab, x->dims[x->rank - 1], &v)) return KILN_OK;
  if (v != 1 && v != 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has a last dim of %lld; 1 (real) or 2 (complex) expected", what,
                     (long long)v);
  *cplx = v == 2;
  return KILN_OK;
}

/* floor(n / 2) + 1: the bins of a one-sided spectrum of length n. */
static kiln_status half_plus_one(kiln_shape_call *c, kiln_dimx n, kiln_dimx *out) {
  kiln_dimx two, h;
  TRY(kiln_dimx_const(c->tab, 2, &two));
  TRY(kiln_dimx_fdiv(c->tab, n, two, &h));
  return kiln_dimx_add_const(c->tab, h, 1, out);
}

/* ------------------------------------------------------------------------ */

static kiln_status dft(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  int r = x->rank;
  if (r < 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 has rank %d; [..., signal, 1 or 2] expected", r);
  int64_t axis = kiln_attr_int(c->node, "axis", 1);
  if (axis < -r || axis > r - 2 || axis == -1)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'axis' is %lld; for an input of rank %d it must be in [%d, -2] or [0, %d]",
                     (long long)axis, r, -r, r - 2);
  int a = (int)(axis < 0 ? axis + r : axis), cplx;
  TRY(complex_dim(c, x, "input 0", &cplx));
  bool inv = kiln_attr_int(c->node, "inverse", 0), one = kiln_attr_int(c->node, "onesided", 0);
  kiln_vshape *y = &c->out[0];
  kiln_shape_copy(y, x);
  y->dtype = x->dtype;
  kiln_dimx L;
  bool known = true; /* L is an expression of the input's dims unless dft_length is unknown */
  if (opt_in(c, 1)) {
    TRY(scalar_dim(c, 1, "dft_length", a, &L, &known));
  } else if (one && inv) {
    TRY(kiln_dimx_add_const(c->tab, x->dims[a], -1, &L));
    TRY(kiln_dimx_mul_const(c->tab, L, 2, &L));
  } else {
    L = x->dims[a];
  }
  if (one && !inv && known) TRY(half_plus_one(c, L, &y->dims[a]));
  else y->dims[a] = L; /* a fresh symbol stands for the output dim itself */
  return kiln_dimx_const(c->tab, one && inv ? 1 : 2, &y->dims[r - 1]);
}

static kiln_status stft(kiln_shape_call *c) {
  const kiln_vshape *x, *w = opt_in(c, 2);
  TRY(kiln_shape_in(c, 0, &x));
  if (x->rank != 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (signal) has rank %d; [batch, length, 1 or 2] expected", x->rank);
  int cplx;
  TRY(complex_dim(c, x, "input 0 (signal)", &cplx));
  const kiln_vshape *st;
  TRY(kiln_shape_in(c, 1, &st));
  kiln_dimx F = x->dims[1], step, u;
  bool known, f_known = true;
  if (w) {
    if (w->rank != 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (window) has rank %d; a 1-D window is expected", w->rank);
    F = w->dims[0];
  }
  if (opt_in(c, 3)) {
    kiln_dimx fl;
    TRY(scalar_dim(c, 3, "frame_length", 2, &fl, &f_known));
    if (w && f_known) TRY(kiln_shape_unify(c, "input 2 (window) vs frame_length", 0, w->dims[0], fl, &u));
    F = fl;
  }
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = 4;
  y->dims[0] = x->dims[0];
  TRY(scalar_dim(c, 1, "frame_step", 1, &step, &known));
  if (!known || !f_known) {
    TRY(kiln_shape_fresh(c, 0, 1, &y->dims[1]));
  } else { /* (length - F) / step + 1 */
    kiln_dimx d;
    TRY(kiln_dimx_sub(c->tab, x->dims[1], F, &d));
    TRY(kiln_dimx_fdiv(c->tab, d, step, &d));
    TRY(kiln_dimx_add_const(c->tab, d, 1, &y->dims[1]));
  }
  if (kiln_attr_int(c->node, "onesided", 1) && f_known) TRY(half_plus_one(c, F, &y->dims[2]));
  else y->dims[2] = F; /* a fresh F stands for the output dim itself */
  return kiln_dimx_const(c->tab, 2, &y->dims[3]);
}

static kiln_status melweights(kiln_shape_call *c) {
  for (int i = 0; i < 5; i++) {
    const kiln_vshape *v;
    TRY(kiln_shape_in(c, i, &v));
  }
  kiln_vshape *y = &c->out[0];
  y->dtype = (kiln_dtype)kiln_attr_int(c->node, "output_datatype", KILN_F32);
  y->rank = 2;
  kiln_dimx L;
  bool known;
  TRY(scalar_dim(c, 1, "dft_length", 0, &L, &known));
  if (known) TRY(half_plus_one(c, L, &y->dims[0]));
  else y->dims[0] = L;
  return scalar_dim(c, 0, "num_mel_bins", 1, &y->dims[1], &known);
}

static kiln_status tfidf(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  if (x->rank > 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (X) has rank %d; [C] or [N, C] expected", x->rank);
  size_t n;
  const int64_t *idx = kiln_attr_ints(c->node, "ngram_indexes", &n);
  int64_t size = 0;
  for (size_t i = 0; idx && i < n; i++)
    if (idx[i] + 1 > size) size = idx[i] + 1;
  if (size < 1) return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'ngram_indexes' is missing or empty");
  kiln_vshape *y = &c->out[0];
  y->dtype = KILN_F32;
  y->rank = x->rank == 2 ? 2 : 1;
  if (x->rank == 2) y->dims[0] = x->dims[0];
  return kiln_dimx_const(c->tab, size, &y->dims[y->rank - 1]);
}

const kiln_shape_def kiln_shape_ops_signal[] = {
    {"DFT", dft},
    {"STFT", stft},
    {"MelWeightMatrix", melweights},
    {"TfIdfVectorizer", tfidf},
    {NULL, NULL},
};
