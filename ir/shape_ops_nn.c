/* ir/shape_ops_nn: shape functions (see ir/shape.h) of the pooling,
 * normalization and softmax families (reference/ops_nn.c) and of the
 * convolutions (Conv, ConvTranspose, ConvInteger, QLinearConv of
 * reference/ops_conv.c), which share the sliding-window size rule. The
 * matrix products are in shape_ops_nn_mm.c, the other ops of
 * reference/ops_extra.c and ops_rnn.c in shape_ops_nn_extra.c.
 *
 * Every rule is the reference kernel's, written with kiln_dimx so that it
 * holds for symbolic dims too; with constant inputs every expression folds
 * to the constant the kernel computes. */
#include <string.h>

#include "ir/shape.h"

#define TRY(x)                                                                                               \
  do {                                                                                                       \
    kiln_status s_ = (x);                                                                                    \
    if (s_) return s_;                                                                                       \
  } while (0)

#define MAXSP (KILN_MAX_RANK - 2)

static const kiln_vshape *opt_in(const kiln_shape_call *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

static bool is_k(const kiln_shape_call *c, kiln_dimx x, int64_t *v) { return kiln_dimx_is_const(c->tab, x, v); }

static bool is_one(const kiln_shape_call *c, kiln_dimx x) {
  int64_t v;
  return is_k(c, x, &v) && v == 1;
}

/* Reads an optional INTS attribute of exactly count values into v (def for
 * each when absent). */
static kiln_status ints_attr(const kiln_node *n, const char *name, int count, int64_t def, int64_t *v) {
  size_t cnt;
  const int64_t *a = kiln_attr_ints(n, name, &cnt);
  if (!a) {
    for (int i = 0; i < count; i++) v[i] = def;
    return KILN_OK;
  }
  if (cnt != (size_t)count)
    return kiln_fail(KILN_E_MODEL, "attribute '%s' has %zu values, %d expected", name, cnt, count);
  for (int i = 0; i < count; i++) v[i] = a[i];
  return KILN_OK;
}

/* Fails unless x has rank r. */
static kiln_status want_rank(const kiln_vshape *x, int r, const char *what) {
  if (x->rank == r) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has rank %d; rank %d expected", what, x->rank, r);
}

/* ------------------------------------------------------------------------ */
/* The sliding-window rule                                                  */

enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID };

static kiln_status pad_mode(const kiln_node *n, int *mode) {
  const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
  if (!*ap || !strcmp(ap, "NOTSET")) *mode = PAD_NOTSET;
  else if (!strcmp(ap, "SAME_UPPER")) *mode = PAD_SAME_UPPER;
  else if (!strcmp(ap, "SAME_LOWER")) *mode = PAD_SAME_LOWER;
  else if (!strcmp(ap, "VALID")) *mode = PAD_VALID;
  else return kiln_fail(KILN_E_MODEL, "auto_pad '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
  return KILN_OK;
}

/* Output length of a window of extent ek = dil*(k-1)+1 sliding with stride
 * st over an input of length in (dim i):
 *   SAME_*: ceil(in / st) (the pads only place the windows);
 *   NOTSET/VALID: floor((in + pb + pe - ek) / st) + 1, or with ceil_mode
 *   ceil(...) + 1 less a last window that would start inside the end
 *   padding — i.e. min(ceil(span/st), floor((in + pb - 1)/st)) + 1, which
 *   is the reference's "increment, then drop the window when
 *   (out-1)*st >= in + pb" since its pads are smaller than ek. */
static kiln_status window_out(kiln_shape_call *c, int mode, int i, kiln_dimx in, kiln_dimx ek, int64_t st,
                              int64_t pb, int64_t pe, bool ceil_mode, kiln_dimx *out) {
  kiln_symtab *t = c->tab;
  kiln_dimx sd, span, a, b;
  TRY(kiln_dimx_const(t, st, &sd));
  if (mode == PAD_SAME_UPPER || mode == PAD_SAME_LOWER) return kiln_dimx_cdiv(t, in, sd, out);
  if (mode == PAD_VALID) pb = pe = 0;
  TRY(kiln_dimx_add_const(t, in, pb + pe, &span));
  TRY(kiln_dimx_sub(t, span, ek, &span));
  int64_t v;
  if (is_k(c, span, &v) && v < 0) {
    char b1[64], b2[64];
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "spatial dim %d: the window extent %s exceeds the padded input %s + %lld + %lld", i,
                     kiln_dimx_str(t, ek, b1, sizeof b1), kiln_dimx_str(t, in, b2, sizeof b2), (long long)pb,
                     (long long)pe);
  }
  if (!ceil_mode) {
    TRY(kiln_dimx_fdiv(t, span, sd, &a));
    return kiln_dimx_add_const(t, a, 1, out);
  }
  TRY(kiln_dimx_cdiv(t, span, sd, &a));
  /* the last window starts at ceil(span/st)*st <= span + st - 1, inside
   * in + pb whenever pe + st <= ek: nothing to drop */
  int64_t ekv;
  if (is_k(c, ek, &ekv) && pe + st <= ekv) return kiln_dimx_add_const(t, a, 1, out);
  TRY(kiln_dimx_add_const(t, in, pb - 1, &b));
  TRY(kiln_dimx_fdiv(t, b, sd, &b));
  TRY(kiln_dimx_min(t, a, b, &a));
  return kiln_dimx_add_const(t, a, 1, out);
}

/* ------------------------------------------------------------------------ */
/* Pooling                                                                   */

enum { POOL_DIL = 1, POOL_CEIL = 2 };

/* MaxPool / AveragePool / LpPool: N x C x out... for output 0 (and
 * MaxPool's Indices, int64). Dilations and ceil_mode where the reference
 * honours them (flags). */
static kiln_status pool_shape(kiln_shape_call *c, int flags) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  const kiln_node *n = c->node;
  size_t nk;
  const int64_t *ks = kiln_attr_ints(n, "kernel_shape", &nk);
  if (!ks) return kiln_fail(KILN_E_MODEL, "required attribute 'kernel_shape' is missing");
  if (nk < 1 || nk > MAXSP)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "kernel_shape has %zu values; 1 to %d spatial dims supported", nk,
                     MAXSP);
  int nsp = (int)nk;
  if (x->rank != nsp + 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input has rank %d; N x C x D1 ... Dn of rank %d expected (kernel_shape)",
                     x->rank, nsp + 2);
  int64_t st[MAXSP], dl[MAXSP], pads[2 * MAXSP];
  int mode;
  TRY(ints_attr(n, "strides", nsp, 1, st));
  TRY(ints_attr(n, "pads", 2 * nsp, 0, pads));
  if (flags & POOL_DIL) TRY(ints_attr(n, "dilations", nsp, 1, dl));
  else
    for (int i = 0; i < nsp; i++) dl[i] = 1;
  TRY(pad_mode(n, &mode));
  bool ceil_mode = (flags & POOL_CEIL) && kiln_attr_int(n, "ceil_mode", 0) == 1;
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = x->rank;
  y->dims[0] = x->dims[0];
  y->dims[1] = x->dims[1];
  for (int i = 0; i < nsp; i++) {
    if (ks[i] < 1 || st[i] < 1 || dl[i] < 1 || pads[i] < 0 || pads[nsp + i] < 0)
      return kiln_fail(KILN_E_MODEL, "spatial dim %d: kernel %lld, stride %lld, dilation %lld, pads %lld/%lld", i,
                       (long long)ks[i], (long long)st[i], (long long)dl[i], (long long)pads[i],
                       (long long)pads[nsp + i]);
    kiln_dimx ek;
    TRY(kiln_dimx_const(c->tab, (ks[i] - 1) * dl[i] + 1, &ek));
    TRY(window_out(c, mode, i, x->dims[2 + i], ek, st[i], pads[i], pads[nsp + i], ceil_mode, &y->dims[2 + i]));
  }
  if (c->n_out > 1) {
    kiln_shape_copy(&c->out[1], y);
    c->out[1].dtype = KILN_I64;
  }
  return KILN_OK;
}

static kiln_status maxpool(kiln_shape_call *c) { return pool_shape(c, POOL_DIL | POOL_CEIL); }
static kiln_status averagepool(kiln_shape_call *c) { return pool_shape(c, POOL_DIL | POOL_CEIL); }
static kiln_status lppool(kiln_shape_call *c) { return pool_shape(c, 0); }

/* Global*Pool: N x C x 1 ... 1. */
static kiln_status globalpool(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  if (x->rank < 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input has rank %d; N x C x D1 ... Dn (rank >= 3) expected", x->rank);
  kiln_vshape *y = &c->out[0];
  kiln_shape_copy(y, x);
  for (int d = 2; d < x->rank; d++) TRY(kiln_dimx_const(c->tab, 1, &y->dims[d]));
  return KILN_OK;
}

/* MaxRoiPool: [num_rois, C, pooled_h, pooled_w]. */
static kiln_status maxroipool(kiln_shape_call *c) {
  const kiln_vshape *x, *r;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &r));
  TRY(want_rank(x, 4, "input X"));
  TRY(want_rank(r, 2, "input rois"));
  size_t np;
  const int64_t *ps = kiln_attr_ints(c->node, "pooled_shape", &np);
  if (!ps || np != 2 || ps[0] < 1 || ps[1] < 1)
    return kiln_fail(KILN_E_MODEL, "attribute 'pooled_shape' must be two positive values");
  kiln_dimx five, u;
  TRY(kiln_dimx_const(c->tab, 5, &five));
  TRY(kiln_shape_unify(c, "input rois", 1, r->dims[1], five, &u));
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = 4;
  y->dims[0] = r->dims[0];
  y->dims[1] = x->dims[1];
  TRY(kiln_dimx_const(c->tab, ps[0], &y->dims[2]));
  TRY(kiln_dimx_const(c->tab, ps[1], &y->dims[3]));
  return KILN_OK;
}

/* MaxUnpool: N x C x ((in-1)*stride + kernel - pad_begin - pad_end), or the
 * output_shape input (each spatial dim at least that, checked at run time):
 * its values when known at compile time (constants or tracked expressions),
 * else fresh data-dependent spatial dims. */
static kiln_status maxunpool(kiln_shape_call *c) {
  const kiln_vshape *x, *ix;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &ix));
  const kiln_node *n = c->node;
  size_t nk;
  const int64_t *ks = kiln_attr_ints(n, "kernel_shape", &nk);
  if (!ks) return kiln_fail(KILN_E_MODEL, "required attribute 'kernel_shape' is missing");
  if (nk < 1 || nk > MAXSP)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "kernel_shape has %zu values; 1 to %d spatial dims supported", nk,
                     MAXSP);
  int nsp = (int)nk;
  if (x->rank != nsp + 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input has rank %d; rank %d expected (kernel_shape)", x->rank, nsp + 2);
  if (ix->rank != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input I has rank %d; it must match X's rank %d", ix->rank, x->rank);
  kiln_dimx u;
  for (int d = 0; d < x->rank; d++) TRY(kiln_shape_unify(c, "input I", d, ix->dims[d], x->dims[d], &u));
  int64_t st[MAXSP], pads[2 * MAXSP];
  TRY(ints_attr(n, "strides", nsp, 1, st));
  TRY(ints_attr(n, "pads", 2 * nsp, 0, pads));
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = x->rank;
  y->dims[0] = x->dims[0];
  y->dims[1] = x->dims[1];
  for (int i = 0; i < nsp; i++) {
    kiln_dimx v;
    TRY(kiln_dimx_add_const(c->tab, x->dims[2 + i], -1, &v));
    TRY(kiln_dimx_mul_const(c->tab, v, st[i], &v));
    TRY(kiln_dimx_add_const(c->tab, v, ks[i] - pads[i] - pads[nsp + i], &y->dims[2 + i]));
  }
  const kiln_vshape *os = opt_in(c, 2);
  if (!os) return KILN_OK;
  int64_t vals[KILN_MAX_RANK];
  int nv;
  if (kiln_shape_const_ints(c, 2, vals, KILN_MAX_RANK, &nv)) {
    if (nv != x->rank)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "output_shape has %d values; X has rank %d", nv, x->rank);
    for (int d = 2; d < x->rank; d++) TRY(kiln_dimx_const(c->tab, vals[d], &y->dims[d]));
  } else if (os->nvals == x->rank) {
    for (int d = 2; d < x->rank; d++) y->dims[d] = os->vals[d];
  } else {
    for (int d = 2; d < x->rank; d++) TRY(kiln_shape_fresh(c, 0, d, &y->dims[d]));
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Normalization and softmax                                                 */

/* Fails unless p is 1-D with p[0] unifying with dim. */
static kiln_status want_vec(kiln_shape_call *c, const kiln_vshape *p, kiln_dimx dim, const char *what) {
  TRY(want_rank(p, 1, what));
  kiln_dimx u;
  return kiln_shape_unify(c, what, 0, p->dims[0], dim, &u);
}

/* BatchNormalization: Y like X; the training-mode outputs (running or
 * saved mean / variance, per channel) like input_mean (1, 3) and
 * input_var (2, 4). */
static kiln_status batchnorm(kiln_shape_call *c) {
  const kiln_vshape *x, *p[5];
  TRY(kiln_shape_in(c, 0, &x));
  for (int i = 1; i < 5; i++) TRY(kiln_shape_in(c, i, &p[i]));
  if (x->rank < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input X has rank %d; N x C x D1 ... Dn (rank >= 2) expected", x->rank);
  static const char *const names[5] = {"X", "scale", "B", "input_mean", "input_var"};
  bool spatial = c->opset >= 9 || kiln_attr_int(c->node, "spatial", 1) == 1;
  for (int i = 1; i < 5; i++) {
    if (spatial) {
      TRY(want_vec(c, p[i], x->dims[1], names[i]));
    } else {
      if (p[i]->rank != x->rank - 1)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has rank %d; with spatial=0 X's shape without N is expected",
                         names[i], p[i]->rank);
      kiln_dimx u;
      for (int d = 0; d < p[i]->rank; d++) TRY(kiln_shape_unify(c, names[i], d, p[i]->dims[d], x->dims[d + 1], &u));
    }
  }
  kiln_shape_copy(&c->out[0], x);
  for (int k = 1; k < c->n_out && k < 5; k++) kiln_shape_copy(&c->out[k], p[k % 2 ? 3 : 4]);
  return KILN_OK;
}

/* InstanceNormalization: Y like X; scale and B are [C]. */
static kiln_status instancenorm(kiln_shape_call *c) {
  const kiln_vshape *x, *sc, *b;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &sc));
  TRY(kiln_shape_in(c, 2, &b));
  if (x->rank < 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input X has rank %d; N x C x D1 ... Dn (rank >= 3) expected", x->rank);
  TRY(want_vec(c, sc, x->dims[1], "scale"));
  TRY(want_vec(c, b, x->dims[1], "B"));
  kiln_shape_copy(&c->out[0], x);
  return KILN_OK;
}

/* Fails unless p broadcasts unidirectionally to x. */
static kiln_status bcast_to(kiln_shape_call *c, const kiln_vshape *p, const kiln_vshape *x, const char *what) {
  if (p->rank > x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has rank %d, more than the input's %d", what, p->rank, x->rank);
  kiln_dimx u;
  for (int i = 0; i < p->rank; i++) {
    kiln_dimx pd = p->dims[i];
    if (is_one(c, pd)) continue;
    TRY(kiln_shape_unify(c, what, i, pd, x->dims[x->rank - p->rank + i], &u));
  }
  return KILN_OK;
}

/* LayerNormalization: Y like X; Mean and InvStdDev have X's dims before
 * axis then 1s, of type stash_type. */
static kiln_status layernorm(kiln_shape_call *c) {
  const kiln_vshape *x, *sc, *b = opt_in(c, 2);
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &sc));
  int ax;
  TRY(kiln_norm_axis(kiln_attr_int(c->node, "axis", -1), x->rank, &ax));
  TRY(bcast_to(c, sc, x, "Scale"));
  if (b) TRY(bcast_to(c, b, x, "B"));
  kiln_shape_copy(&c->out[0], x);
  kiln_dtype st = (kiln_dtype)kiln_attr_int(c->node, "stash_type", KILN_F32);
  for (int k = 1; k < c->n_out && k < 3; k++) {
    kiln_vshape *o = &c->out[k];
    kiln_shape_copy(o, x);
    o->dtype = st;
    for (int d = ax; d < x->rank; d++) TRY(kiln_dimx_const(c->tab, 1, &o->dims[d]));
  }
  return KILN_OK;
}

/* Softmax, LogSoftmax, Hardmax, LpNormalization: X's shape; the axis must
 * exist. */
static kiln_status along_axis(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  const char *op = c->node->op_type;
  int64_t def = strcmp(op, "LpNormalization") && c->opset < 13 ? 1 : -1;
  int ax;
  TRY(kiln_norm_axis(kiln_attr_int(c->node, "axis", def), x->rank, &ax));
  kiln_shape_copy(&c->out[0], x);
  return KILN_OK;
}

/* LRN: X's shape, rank >= 2. */
static kiln_status lrn(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  if (x->rank < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input X has rank %d; N x C x D1 ... Dn (rank >= 2) expected", x->rank);
  kiln_shape_copy(&c->out[0], x);
  return KILN_OK;
}

/* MeanVarianceNormalization: X's shape; the axes must exist. */
static kiln_status mvn(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  size_t na;
  const int64_t *axes = kiln_attr_ints(c->node, "axes", &na);
  static const int64_t def_axes[3] = {0, 2, 3};
  if (!axes) axes = def_axes, na = 3;
  for (size_t i = 0; i < na; i++) {
    int a;
    TRY(kiln_norm_axis(axes[i], x->rank, &a));
  }
  kiln_shape_copy(&c->out[0], x);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Convolutions                                                              */

/* Conv-family output shape. x is N x C x D..., w is [M, C/group, k...]
 * (transposed: [C, M/group, k...]); b the optional bias [M]. */
static kiln_status conv_shape(kiln_shape_call *c, const kiln_vshape *x, const kiln_vshape *w, const kiln_vshape *b,
                              bool transposed, kiln_dtype dt) {
  const kiln_node *n = c->node;
  kiln_symtab *t = c->tab;
  if (x->rank < 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "X has rank %d; N x C x D1 ... Dn (rank >= 3) expected", x->rank);
  if (w->rank != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "W has rank %d; it must have X's rank %d", w->rank, x->rank);
  int nsp = x->rank - 2;
  int64_t ks[MAXSP], st[MAXSP], dl[MAXSP], pads[2 * MAXSP], opad[MAXSP];
  bool have_ks = kiln_node_attr(n, "kernel_shape") != NULL;
  TRY(ints_attr(n, "kernel_shape", nsp, 1, ks));
  TRY(ints_attr(n, "strides", nsp, 1, st));
  TRY(ints_attr(n, "dilations", nsp, 1, dl));
  TRY(ints_attr(n, "pads", 2 * nsp, 0, pads));
  if (transposed) {
    TRY(ints_attr(n, "output_padding", nsp, 0, opad));
    for (int i = 0; i < nsp; i++) /* less than the stride or the dilation, whichever is larger */
      if (opad[i] >= (st[i] > dl[i] ? st[i] : dl[i]))
        return kiln_fail(KILN_E_MODEL, "output_padding[%d] = %lld; it must be less than the larger of strides[%d] = "
                         "%lld and dilations[%d] = %lld", i, (long long)opad[i], i, (long long)st[i], i,
                         (long long)dl[i]);
  }
  int mode;
  TRY(pad_mode(n, &mode));
  int64_t group = kiln_attr_int(n, "group", 1);
  if (group < 1) return kiln_fail(KILN_E_MODEL, "group %lld must be >= 1", (long long)group);
  size_t nos = 0;
  const int64_t *os = transposed ? kiln_attr_ints(n, "output_shape", &nos) : NULL;
  if (os && nos != (size_t)nsp && nos != (size_t)nsp + 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "output_shape has %zu values but X has %d spatial dims", nos, nsp);
  kiln_dimx m, u;
  int64_t v;
  if (!transposed) {
    /* C = W[1] * group: with a constant C, W[1] = C / group (so that a
     * symbolic W[1] learns its value) */
    if (is_k(c, x->dims[1], &v) && !is_k(c, w->dims[1], NULL)) {
      if (v % group)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "X has %lld channels, not divisible by group %lld", (long long)v,
                         (long long)group);
      TRY(kiln_dimx_const(t, v / group, &m));
      TRY(kiln_shape_unify(c, "W (channels per group)", 1, w->dims[1], m, &u));
    } else {
      TRY(kiln_dimx_mul_const(t, w->dims[1], group, &m));
      kiln_status s = kiln_shape_unify(c, "X channels vs W[1] * group", 1, x->dims[1], m, &u);
      /* C and W[1] both symbolic with group > 1: C = group * W[1] cannot be
       * recorded; the run-time shape check decides */
      if (s && group > 1 && !is_k(c, x->dims[1], NULL) && !is_k(c, w->dims[1], NULL)) kiln_error_clear();
      else if (s) return s;
    }
    m = w->dims[0];
    if (is_k(c, m, &v) && v % group)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "W has %lld output channels, not divisible by group %lld", (long long)v,
                       (long long)group);
  } else {
    TRY(kiln_shape_unify(c, "W (input channels) vs X channels", 0, w->dims[0], x->dims[1], &u));
    if (is_k(c, x->dims[1], &v) && v % group)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "X has %lld channels, not divisible by group %lld", (long long)v,
                       (long long)group);
    TRY(kiln_dimx_mul_const(t, w->dims[1], group, &m));
  }
  if (b) {
    TRY(want_rank(b, 1, "B"));
    TRY(kiln_shape_unify(c, "B", 0, b->dims[0], m, &u));
  }
  kiln_vshape *y = &c->out[0];
  y->dtype = dt;
  y->rank = x->rank;
  y->dims[0] = x->dims[0];
  y->dims[1] = m;
  if (os && nos == (size_t)nsp + 2) {
    kiln_dimx k0, k1;
    TRY(kiln_dimx_const(t, os[0], &k0));
    TRY(kiln_dimx_const(t, os[1], &k1));
    TRY(kiln_shape_unify(c, "output_shape (N)", 0, k0, x->dims[0], &u));
    TRY(kiln_shape_unify(c, "output_shape (M)", 1, k1, m, &u));
  }
  for (int i = 0; i < nsp; i++) {
    if (st[i] < 1 || dl[i] < 1 || pads[i] < 0 || pads[nsp + i] < 0 || (have_ks && ks[i] < 1))
      return kiln_fail(KILN_E_MODEL, "spatial dim %d: stride %lld, dilation %lld, pads %lld/%lld", i,
                       (long long)st[i], (long long)dl[i], (long long)pads[i], (long long)pads[nsp + i]);
    kiln_dimx k = w->dims[2 + i], ek, in = x->dims[2 + i];
    if (have_ks) {
      kiln_dimx kk;
      TRY(kiln_dimx_const(t, ks[i], &kk));
      TRY(kiln_shape_unify(c, "W (kernel_shape)", 2 + i, k, kk, &k));
    }
    TRY(kiln_dimx_add_const(t, k, -1, &ek));
    TRY(kiln_dimx_mul_const(t, ek, dl[i], &ek));
    TRY(kiln_dimx_add_const(t, ek, 1, &ek));
    if (!transposed) {
      TRY(window_out(c, mode, i, in, ek, st[i], pads[i], pads[nsp + i], false, &y->dims[2 + i]));
      continue;
    }
    /* transposed: full = (in - 1) * stride + output_padding + ek; the
     * output is output_shape, in * stride (SAME_*), or full - pads */
    if (os) {
      TRY(kiln_dimx_const(t, os[i + (nos == (size_t)nsp + 2 ? 2 : 0)], &y->dims[2 + i]));
    } else if (mode == PAD_SAME_UPPER || mode == PAD_SAME_LOWER) {
      TRY(kiln_dimx_mul_const(t, in, st[i], &y->dims[2 + i]));
    } else {
      int64_t pb = mode == PAD_VALID ? 0 : pads[i], pe = mode == PAD_VALID ? 0 : pads[nsp + i];
      kiln_dimx full;
      TRY(kiln_dimx_add_const(t, in, -1, &full));
      TRY(kiln_dimx_mul_const(t, full, st[i], &full));
      TRY(kiln_dimx_add(t, full, ek, &full));
      TRY(kiln_dimx_add_const(t, full, opad[i] - pb - pe, &y->dims[2 + i]));
      if (is_k(c, y->dims[2 + i], &v) && v < 0)
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "spatial dim %d: pads %lld+%lld exceed the full output size", i,
                         (long long)pb, (long long)pe);
    }
  }
  return KILN_OK;
}

static kiln_status conv(kiln_shape_call *c) {
  const kiln_vshape *x, *w;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &w));
  return conv_shape(c, x, w, opt_in(c, 2), false, x->dtype);
}

static kiln_status convtranspose(kiln_shape_call *c) {
  const kiln_vshape *x, *w;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &w));
  return conv_shape(c, x, w, opt_in(c, 2), true, x->dtype);
}

/* ConvInteger: x, w, x_zero_point, w_zero_point; int32 output. */
static kiln_status convinteger(kiln_shape_call *c) {
  const kiln_vshape *x, *w;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 1, &w));
  return conv_shape(c, x, w, NULL, false, KILN_I32);
}

/* QLinearConv: x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B; the
 * output has y_zero_point's type. */
static kiln_status qlinearconv(kiln_shape_call *c) {
  const kiln_vshape *x, *w, *yz;
  TRY(kiln_shape_in(c, 0, &x));
  TRY(kiln_shape_in(c, 3, &w));
  TRY(kiln_shape_in(c, 7, &yz));
  return conv_shape(c, x, w, opt_in(c, 8), false, yz->dtype);
}

const kiln_shape_def kiln_shape_ops_nn[] = {
    {"MaxPool", maxpool},
    {"AveragePool", averagepool},
    {"LpPool", lppool},
    {"GlobalAveragePool", globalpool},
    {"GlobalMaxPool", globalpool},
    {"GlobalLpPool", globalpool},
    {"MaxRoiPool", maxroipool},
    {"MaxUnpool", maxunpool},
    {"BatchNormalization", batchnorm},
    {"InstanceNormalization", instancenorm},
    {"LayerNormalization", layernorm},
    {"Softmax", along_axis},
    {"LogSoftmax", along_axis},
    {"Hardmax", along_axis},
    {"LpNormalization", along_axis},
    {"LRN", lrn},
    {"MeanVarianceNormalization", mvn},
    {"Conv", conv},
    {"ConvTranspose", convtranspose},
    {"ConvInteger", convinteger},
    {"QLinearConv", qlinearconv},
    {NULL, NULL},
};
