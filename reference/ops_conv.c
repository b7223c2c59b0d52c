/* reference/ops_conv: scalar kernels (see reference/ops.h) for the
 * matrix-product and convolution family: MatMul, Gemm, Conv, ConvTranspose,
 * MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, Einsum and Det.
 *
 * Floating-point work reads every element as double, accumulates in double
 * and rounds once when writing the output. Integer MatMul / Gemm / Einsum
 * accumulate in 64-bit two's complement (wrapping, like numpy) and the
 * result is narrowed to the output type. The quantized ops subtract zero
 * points exactly, accumulate exactly and requantize in double, rounding half
 * to even and saturating. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

#define MAXSP (KILN_MAX_RANK - 2) /* most spatial dims of a convolution */

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */

static const char *shp(const kiln_tensor *t, char *buf, int size) {
  return kiln_shape_str(t->rank, t->dims, buf, size);
}
#define SHAPE(t, b) shp((t), (b), (int)sizeof(b))

static bool mul_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_mul_overflow(a, b, r); }
static bool add_ovf(int64_t a, int64_t b, int64_t *r) { return __builtin_add_overflow(a, b, r); }

/* Floor division and the matching split of a (possibly negative) total. */
static int64_t floordiv2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }


/* Attribute getters that reject an attribute of the wrong type instead of
 * silently using the default. */
static kiln_status attr_ints(const kiln_node *n, const char *name, const int64_t **v, size_t *cnt) {
  const kiln_attr *a = kiln_node_attr(n, name);
  *v = NULL;
  *cnt = 0;
  if (!a) return KILN_OK;
  if (a->type != KILN_ATTR_INTS)
    return kiln_fail(KILN_E_MODEL, "attribute '%s' must be a list of ints (type %d given)", name, (int)a->type);
  *v = kiln_attr_ints(n, name, cnt);
  return KILN_OK;
}

static kiln_status attr_int(const kiln_node *n, const char *name, int64_t def, int64_t *out) {
  const kiln_attr *a = kiln_node_attr(n, name);
  *out = def;
  if (!a) return KILN_OK;
  if (a->type != KILN_ATTR_INT)
    return kiln_fail(KILN_E_MODEL, "attribute '%s' must be an int (type %d given)", name, (int)a->type);
  *out = a->i;
  return KILN_OK;
}

static kiln_status attr_float(const kiln_node *n, const char *name, double def, double *out) {
  const kiln_attr *a = kiln_node_attr(n, name);
  *out = def;
  if (!a) return KILN_OK;
  if (a->type == KILN_ATTR_FLOAT) *out = a->f;
  else if (a->type == KILN_ATTR_INT) *out = (double)a->i;
  else return kiln_fail(KILN_E_MODEL, "attribute '%s' must be a float (type %d given)", name, (int)a->type);
  return KILN_OK;
}

static kiln_status attr_string(const kiln_node *n, const char *name, const char *def, const char **out) {
  const kiln_attr *a = kiln_node_attr(n, name);
  *out = def;
  if (!a) return KILN_OK;
  if (a->type != KILN_ATTR_STRING)
    return kiln_fail(KILN_E_MODEL, "attribute '%s' must be a string (type %d given)", name, (int)a->type);
  *out = a->s ? a->s : "";
  return KILN_OK;
}

static kiln_status need_type(const kiln_tensor *t, uint32_t mask, const char *what) {
  if ((unsigned)t->dtype < 32 && (mask & KILN_T(t->dtype))) return KILN_OK;
  return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "%s has data type %s, which this operator does not accept", what,
                   kiln_dtype_name(t->dtype));
}

static kiln_status same_type(const kiln_tensor *a, const char *an, const kiln_tensor *b, const char *bn) {
  if (a->dtype == b->dtype) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_DTYPE, "%s has data type %s but %s has %s; they must match", bn,
                   kiln_dtype_name(b->dtype), an, kiln_dtype_name(a->dtype));
}

/* Fails unless the node's opset has the operator. */
static kiln_status need_opset(const kiln_node *n, int since) {
  if (n->opset >= since) return KILN_OK;
  return kiln_fail(KILN_E_MODEL, "%s does not exist before opset %d (the node imports opset %d)", n->op_type, since,
                   n->opset);
}

/* MatMul and Gemm gained integer types in opset 9 and bfloat16 in 13. */
static kiln_status opset_types(const kiln_op_call *c, const kiln_tensor *t) {
  bool bad = (kiln_dtype_is_int(t->dtype) && c->opset < 9) || (t->dtype == KILN_BF16 && c->opset < 13);
  if (!bad) return KILN_OK;
  return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "%s accepts %s only from opset %d (the node imports opset %d)",
                   c->node->op_type, kiln_dtype_name(t->dtype), t->dtype == KILN_BF16 ? 13 : 9, c->opset);
}

/* A copy of t's elements as double / int64 (NULL with a message on OOM). */
static double *dup_f(const kiln_tensor *t) {
  size_t n = t->numel > 0 ? (size_t)t->numel : 1;
  double *p = kiln_malloc(n * sizeof *p);
  if (!p) {
    kiln_fail(KILN_E_NOMEM, "out of memory converting %lld elements to double", (long long)t->numel);
    return NULL;
  }
  if (!t->strided && t->dtype == KILN_F32) /* the same values, without the per-element dispatch */
    for (int64_t i = 0; i < t->numel; i++) p[i] = ((const float *)t->data)[i];
  else
    for (int64_t i = 0; i < t->numel; i++) p[i] = kiln_get_f(t, i);
  return p;
}

/* y's elements from the doubles v, rounded to its dtype (kiln_set_f). */
static void put_f(kiln_tensor *y, const double *v) {
  if (y->dtype == KILN_F32)
    for (int64_t i = 0; i < y->numel; i++) ((float *)y->data)[i] = (float)v[i];
  else
    for (int64_t i = 0; i < y->numel; i++) kiln_set_f(y, i, v[i]);
}

static int64_t *dup_i(const kiln_tensor *t) {
  size_t n = t->numel > 0 ? (size_t)t->numel : 1;
  int64_t *p = kiln_malloc(n * sizeof *p);
  if (!p) {
    kiln_fail(KILN_E_NOMEM, "out of memory converting %lld elements to int64", (long long)t->numel);
    return NULL;
  }
  for (int64_t i = 0; i < t->numel; i++) p[i] = kiln_get_i(t, i);
  return p;
}

static void *scratch(int64_t count, size_t size, const char *what) {
  void *p = kiln_calloc(count > 0 ? (size_t)count : 1, size);
  if (!p) kiln_fail(KILN_E_NOMEM, "out of memory allocating %lld elements for %s", (long long)count, what);
  return p;
}

/* Strides (in elements of a row-major tensor of shape d, rank r) for reading
 * it broadcast to shape D of rank R >= r; broadcast dims get stride 0. */
static void bcast_strides(int r, const int64_t *d, int R, const int64_t *D, int64_t *s) {
  int64_t own = 1;
  for (int i = R - 1; i >= 0; i--) {
    int j = i - (R - r);
    if (j < 0) {
      s[i] = 0;
      continue;
    }
    s[i] = (d[j] == 1 && D[i] != 1) ? 0 : own;
    own *= d[j];
  }
}

/* True when shape (r, d) broadcasts unidirectionally to (R, D). */
static bool unidir(int r, const int64_t *d, int R, const int64_t *D) {
  if (r > R) return false;
  for (int j = 0; j < r; j++) {
    int64_t a = d[j], b = D[j + (R - r)];
    if (a != b && a != 1) return false;
  }
  return true;
}

/* A scale / zero-point vector: one element, or a 1-D tensor of len. */
static kiln_status check_vec(const kiln_tensor *t, int64_t len, const char *what, const char *of) {
  if (t->numel == 1) return KILN_OK;
  if (t->rank == 1 && t->dims[0] == len) return KILN_OK;
  char b[160];
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has shape %s; expected a scalar or a 1-D tensor of %lld (%s)", what,
                   SHAPE(t, b), (long long)len, of);
}

static double vec_f(const kiln_tensor *t, int64_t i) { return kiln_get_f(t, t->numel == 1 ? 0 : i); }
static int64_t vec_i(const kiln_tensor *t, int64_t i) { return kiln_get_i(t, t->numel == 1 ? 0 : i); }

/* Requantizes v (already scaled) into an 8-bit tensor: round half to even,
 * add the zero point, saturate. */
static void put_q(kiln_tensor *y, int64_t i, double v, int64_t zp) {
  double r = nearbyint(v) + (double)zp;
  double lo = y->dtype == KILN_U8 ? 0 : -128, hi = y->dtype == KILN_U8 ? 255 : 127;
  if (isnan(r)) r = (double)zp;
  if (r < lo) r = lo;
  if (r > hi) r = hi;
  kiln_set_i(y, i, (int64_t)r);
}

/* ------------------------------------------------------------------------ */
/* MatMul family                                                            */

typedef struct mm_plan {
  int64_t M, K, N;
  int nb;                       /* batch rank after broadcasting */
  int64_t bdims[KILN_MAX_RANK]; /* broadcast batch shape */
  int64_t bcount;               /* number of matrices in the output */
  int64_t astr[KILN_MAX_RANK];  /* batch strides of A, in matrices */
  int64_t bstr[KILN_MAX_RANK];
  int out_rank;
  int64_t out_dims[KILN_MAX_RANK];
} mm_plan;

/* numpy matmul shapes: a 1-D A is [1,K] (the 1 dropped from the result), a
 * 1-D B is [K,1] (likewise); leading dims broadcast. */
static kiln_status mm_plan_make(const kiln_tensor *a, const kiln_tensor *b, mm_plan *p) {
  char sa[160], sb[160];
  int ra = a->rank, rb = b->rank;
  if (ra < 1 || rb < 1)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "matrix product of A %s and B %s: inputs must have rank >= 1",
                     SHAPE(a, sa), SHAPE(b, sb));
  int64_t ka, kb;
  if (ra == 1) {
    p->M = 1;
    ka = a->dims[0];
  } else {
    p->M = a->dims[ra - 2];
    ka = a->dims[ra - 1];
  }
  if (rb == 1) {
    p->N = 1;
    kb = b->dims[0];
  } else {
    kb = b->dims[rb - 2];
    p->N = b->dims[rb - 1];
  }
  if (ka != kb)
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "matrix product of A %s and B %s: inner dimensions differ (%lld vs %lld)", SHAPE(a, sa),
                     SHAPE(b, sb), (long long)ka, (long long)kb);
  p->K = ka;
  int na = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
  kiln_status s = kiln_broadcast_shape(na, a->dims, nbb, b->dims, &p->nb, p->bdims);
  if (s) {
    kiln_error_prefix("batch dimensions of A %s and B %s", SHAPE(a, sa), SHAPE(b, sb));
    return s;
  }
  bcast_strides(na, a->dims, p->nb, p->bdims, p->astr);
  bcast_strides(nbb, b->dims, p->nb, p->bdims, p->bstr);
  p->bcount = 1;
  for (int i = 0; i < p->nb; i++) p->bcount *= p->bdims[i];
  p->out_rank = p->nb;
  for (int i = 0; i < p->nb; i++) p->out_dims[i] = p->bdims[i];
  if (ra > 1) p->out_dims[p->out_rank++] = p->M;
  if (rb > 1) p->out_dims[p->out_rank++] = p->N;
  int64_t n;
  return kiln_shape_numel(p->out_rank, p->out_dims, &n);
}

static void mm_offsets(const mm_plan *p, int64_t bi, int64_t *ao, int64_t *bo) {
  int64_t idx[KILN_MAX_RANK];
  kiln_unravel(bi, p->nb, p->bdims, idx);
  *ao = *bo = 0;
  for (int d = 0; d < p->nb; d++) {
    *ao += idx[d] * p->astr[d];
    *bo += idx[d] * p->bstr[d];
  }
}

/* y[bi][m][n] = sum_k a[..][m][k] * b[..][k][n], in double, each sum in k
 * order from 0 (row by row: B read along its rows, the same additions). */
static void mm_f(const mm_plan *p, const double *a, const double *b, double *y) {
  int64_t M = p->M, K = p->K, N = p->N;
  for (int64_t bi = 0; bi < p->bcount; bi++) {
    int64_t ao, bo;
    mm_offsets(p, bi, &ao, &bo);
    const double *A = a + ao * M * K, *B = b + bo * K * N;
    double *Y = y + bi * M * N;
    for (int64_t m = 0; m < M; m++) {
      double *yr = Y + m * N;
      for (int64_t n = 0; n < N; n++) yr[n] = 0;
      for (int64_t k = 0; k < K; k++) {
        const double av = A[m * K + k], *br = B + k * N;
        for (int64_t n = 0; n < N; n++) yr[n] += av * br[n];
      }
    }
  }
}

/* The same in wrapping 64-bit integer arithmetic. */
static void mm_i(const mm_plan *p, const int64_t *a, const int64_t *b, int64_t *y) {
  int64_t M = p->M, K = p->K, N = p->N;
  for (int64_t bi = 0; bi < p->bcount; bi++) {
    int64_t ao, bo;
    mm_offsets(p, bi, &ao, &bo);
    const int64_t *A = a + ao * M * K, *B = b + bo * K * N;
    int64_t *Y = y + bi * M * N;
    for (int64_t m = 0; m < M; m++) {
      uint64_t *yr = (uint64_t *)(Y + m * N);
      for (int64_t n = 0; n < N; n++) yr[n] = 0;
      for (int64_t k = 0; k < K; k++) {
        const uint64_t av = (uint64_t)A[m * K + k];
        const int64_t *br = B + k * N;
        for (int64_t n = 0; n < N; n++) yr[n] += av * (uint64_t)br[n];
      }
    }
  }
}

#define MATMUL_TYPES                                                                                         \
  (KILN_TS_FLOAT | KILN_T(KILN_I32) | KILN_T(KILN_I64) | KILN_T(KILN_U32) | KILN_T(KILN_U64))

static kiln_status op_matmul(const kiln_op_call *c) {
  const kiln_tensor *a = c->in[0], *b = c->in[1];
  kiln_status s = need_type(a, MATMUL_TYPES, "A");
  if (!s) s = opset_types(c, a);
  if (!s) s = same_type(a, "A", b, "B");
  mm_plan p;
  if (!s) s = mm_plan_make(a, b, &p);
  if (!s) s = kiln_tensor_alloc(&c->out[0], a->dtype, p.out_rank, p.out_dims);
  if (s) return s;
  kiln_tensor *y = &c->out[0];
  if (kiln_dtype_is_float(a->dtype)) {
    double *A = dup_f(a), *B = A ? dup_f(b) : NULL, *Y = B ? scratch(y->numel, sizeof *Y, "MatMul") : NULL;
    if (Y) {
      mm_f(&p, A, B, Y);
      put_f(y, Y);
    } else {
      s = kiln_fail(KILN_E_NOMEM, "out of memory in MatMul");
    }
    kiln_free(A);
    kiln_free(B);
    kiln_free(Y);
  } else {
    int64_t *A = dup_i(a), *B = A ? dup_i(b) : NULL, *Y = B ? scratch(y->numel, sizeof *Y, "MatMul") : NULL;
    if (Y) {
      mm_i(&p, A, B, Y);
      for (int64_t i = 0; i < y->numel; i++) kiln_set_i(y, i, Y[i]);
    } else {
      s = kiln_fail(KILN_E_NOMEM, "out of memory in MatMul");
    }
    kiln_free(A);
    kiln_free(B);
    kiln_free(Y);
  }
  if (s) kiln_tensor_release(y);
  return s;
}

/* x - zp as int64. zp is absent (0), one element, or broadcast over x:
 * for A (rows), a 1-D zp has one value per row (shape [M] read as [M,1]) and
 * an N-D zp has shape [..., M, 1]; for B (columns), a 1-D zp has one value
 * per column ([N]) and an N-D zp has shape [..., 1, N]. */
static kiln_status sub_zp(const kiln_tensor *x, const kiln_tensor *zp, bool rows, const char *xn, const char *zn,
                          int64_t **out) {
  char sx[160], sz[160];
  *out = NULL;
  if (zp) {
    kiln_status s = same_type(x, xn, zp, zn);
    if (s) return s;
  }
  int64_t *v = dup_i(x);
  if (!v) return KILN_E_NOMEM;
  if (!zp) {
    *out = v;
    return KILN_OK;
  }
  if (zp->numel == 1) {
    int64_t z = kiln_get_i(zp, 0);
    for (int64_t i = 0; i < x->numel; i++) v[i] -= z;
    *out = v;
    return KILN_OK;
  }
  int vr = zp->rank;
  int64_t vd[KILN_MAX_RANK];
  for (int i = 0; i < vr; i++) vd[i] = zp->dims[i];
  if (vr == 1 && rows) {
    vr = 2;
    vd[1] = 1;
  }
  bool ok = x->rank >= 2 && unidir(vr, vd, x->rank, x->dims);
  if (ok && rows) ok = vd[vr - 1] == 1;
  if (ok && !rows && vr >= 2) ok = vd[vr - 2] == 1;
  if (!ok) {
    kiln_free(v);
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "%s has shape %s, which is neither a scalar nor a per-%s zero point for %s %s", zn,
                     SHAPE(zp, sz), rows ? "row" : "column", xn, SHAPE(x, sx));
  }
  int64_t str[KILN_MAX_RANK], idx[KILN_MAX_RANK];
  bcast_strides(vr, vd, x->rank, x->dims, str);
  for (int64_t i = 0; i < x->numel; i++) {
    kiln_unravel(i, x->rank, x->dims, idx);
    int64_t o = 0;
    for (int d = 0; d < x->rank; d++) o += idx[d] * str[d];
    v[i] -= kiln_get_i(zp, o);
  }
  *out = v;
  return KILN_OK;
}

/* Exact integer product of (a - a_zp) and (b - b_zp); *yv gets the bcount *
 * M * N accumulators. */
static kiln_status qmm(const kiln_tensor *a, const kiln_tensor *azp, const kiln_tensor *b, const kiln_tensor *bzp,
                       mm_plan *p, int64_t **yv) {
  *yv = NULL;
  kiln_status s = need_type(a, KILN_T(KILN_U8) | KILN_T(KILN_I8), "A");
  if (!s) s = need_type(b, KILN_T(KILN_U8) | KILN_T(KILN_I8), "B");
  if (!s) s = mm_plan_make(a, b, p);
  if (s) return s;
  int64_t *A = NULL, *B = NULL, *Y = NULL;
  s = sub_zp(a, azp, true, "A", "a_zero_point", &A);
  if (!s) s = sub_zp(b, bzp, false, "B", "b_zero_point", &B);
  if (!s) {
    Y = scratch(p->bcount * p->M * p->N, sizeof *Y, "an integer matrix product");
    if (!Y) s = KILN_E_NOMEM;
  }
  if (!s) mm_i(p, A, B, Y);
  kiln_free(A);
  kiln_free(B);
  *yv = Y;
  return s;
}

static kiln_status op_matmulinteger(const kiln_op_call *c) {
  mm_plan p;
  int64_t *Y;
  kiln_status s = qmm(c->in[0], kiln_opc_opt_in(c, 2), c->in[1], kiln_opc_opt_in(c, 3), &p, &Y);
  if (!s) s = kiln_tensor_alloc(&c->out[0], KILN_I32, p.out_rank, p.out_dims);
  if (!s)
    for (int64_t i = 0; i < c->out[0].numel; i++) kiln_set_i(&c->out[0], i, Y[i]);
  kiln_free(Y);
  return s;
}

static kiln_status op_qlinearmatmul(const kiln_op_call *c) {
  const kiln_tensor *a = c->in[0], *as = c->in[1], *az = c->in[2], *b = c->in[3], *bs = c->in[4], *bz = c->in[5],
                    *ys = c->in[6], *yz = c->in[7];
  kiln_status s = need_type(as, KILN_TS_FLOAT, "a_scale");
  if (!s) s = need_type(bs, KILN_TS_FLOAT, "b_scale");
  if (!s) s = need_type(ys, KILN_TS_FLOAT, "y_scale");
  if (!s) s = need_type(yz, KILN_T(KILN_U8) | KILN_T(KILN_I8), "y_zero_point");
  if (s) return s;
  mm_plan p;
  int64_t *Y = NULL;
  s = qmm(a, az, b, bz, &p, &Y);
  if (!s) s = check_vec(as, p.M, "a_scale", "one per row of A");
  if (!s) s = check_vec(bs, p.N, "b_scale", "one per column of B");
  if (!s) s = check_vec(ys, p.M, "y_scale", "one per row of Y");
  if (!s) s = check_vec(yz, p.M, "y_zero_point", "one per row of Y");
  if (!s) s = kiln_tensor_alloc(&c->out[0], yz->dtype, p.out_rank, p.out_dims);
  if (!s) {
    kiln_tensor *y = &c->out[0];
    for (int64_t bi = 0; bi < p.bcount; bi++)
      for (int64_t m = 0; m < p.M; m++)
        for (int64_t n = 0; n < p.N; n++) {
          int64_t i = (bi * p.M + m) * p.N + n;
          double scale = vec_f(as, m) * vec_f(bs, n) / vec_f(ys, m);
          put_q(y, i, (double)Y[i] * scale, vec_i(yz, m));
        }
  }
  kiln_free(Y);
  return s;
}

/* ------------------------------------------------------------------------ */
/* Gemm                                                                     */

#define GEMM_TYPES MATMUL_TYPES

static kiln_status gemm_check(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  int64_t t;
  double f;
  kiln_status s = attr_int(n, "transA", 0, &t);
  if (!s) s = attr_int(n, "transB", 0, &t);
  if (!s) s = attr_int(n, "broadcast", 0, &t);
  if (!s) s = attr_float(n, "alpha", 1, &f);
  if (!s) s = attr_float(n, "beta", 1, &f);
  if (!s && n->opset < 11 && (n->n_in < 3 || n->in[2] < 0))
    s = kiln_fail(KILN_E_MODEL, "input C is required before opset 11 (node has opset %d)", n->opset);
  return s;
}

static kiln_status op_gemm(const kiln_op_call *c) {
  const kiln_node *nd = c->node;
  const kiln_tensor *a = c->in[0], *b = c->in[1], *cc = kiln_opc_opt_in(c, 2);
  char sa[160], sb[160], sc[160];
  kiln_status s = gemm_check(c->graph, nd);
  if (!s) s = need_type(a, GEMM_TYPES, "A");
  if (!s) s = opset_types(c, a);
  if (!s) s = same_type(a, "A", b, "B");
  if (!s && cc) s = same_type(a, "A", cc, "C");
  if (s) return s;
  int64_t ta, tb, bc;
  double alpha, beta;
  attr_int(nd, "transA", 0, &ta);
  attr_int(nd, "transB", 0, &tb);
  attr_int(nd, "broadcast", 0, &bc);
  attr_float(nd, "alpha", 1, &alpha);
  attr_float(nd, "beta", 1, &beta);
  if (a->rank != 2 || b->rank != 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "A %s and B %s must both be 2-D", SHAPE(a, sa), SHAPE(b, sb));
  int64_t M = ta ? a->dims[1] : a->dims[0], K = ta ? a->dims[0] : a->dims[1];
  int64_t Kb = tb ? b->dims[1] : b->dims[0], N = tb ? b->dims[0] : b->dims[1];
  if (K != Kb)
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "A %s (transA=%d) and B %s (transB=%d): inner dimensions differ (%lld vs %lld)",
                     SHAPE(a, sa), ta != 0, SHAPE(b, sb), tb != 0, (long long)K, (long long)Kb);
  int64_t od[2] = {M, N}, cs[2] = {0, 0};
  if (cc) {
    bool ok = unidir(cc->rank, cc->dims, 2, od);
    if (ok && c->opset < 7 && !bc) ok = cc->rank == 2 && cc->dims[0] == M && cc->dims[1] == N;
    if (!ok)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "C %s cannot be broadcast to the output shape [%lld,%lld]%s",
                       SHAPE(cc, sc), (long long)M, (long long)N,
                       c->opset < 7 && !bc ? " (broadcast=0 needs exactly that shape)" : "");
    bcast_strides(cc->rank, cc->dims, 2, od, cs);
  }
  s = kiln_tensor_alloc(&c->out[0], a->dtype, 2, od);
  if (s) return s;
  kiln_tensor *y = &c->out[0];
  bool fl = kiln_dtype_is_float(a->dtype);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      int64_t ci = m * cs[0] + n * cs[1];
      if (fl) {
        double acc = 0;
        for (int64_t k = 0; k < K; k++)
          acc += kiln_get_f(a, ta ? k * M + m : m * K + k) * kiln_get_f(b, tb ? n * K + k : k * N + n);
        double v = alpha * acc;
        if (cc) v += beta * kiln_get_f(cc, ci);
        kiln_set_f(y, m * N + n, v);
      } else {
        uint64_t acc = 0;
        for (int64_t k = 0; k < K; k++)
          acc += (uint64_t)kiln_get_i(a, ta ? k * M + m : m * K + k) *
                 (uint64_t)kiln_get_i(b, tb ? n * K + k : k * N + n);
        if (alpha == 1 && (beta == 1 || !cc)) {
          if (cc) acc += (uint64_t)kiln_get_i(cc, ci);
          kiln_set_i(y, m * N + n, (int64_t)acc);
        } else {
          double v = alpha * (double)(int64_t)acc;
          if (cc) v += beta * (double)kiln_get_i(cc, ci);
          kiln_set_f(y, m * N + n, v);
        }
      }
    }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Convolution geometry (Conv, ConvTranspose, ConvInteger, QLinearConv)     */

enum { PAD_NOTSET, PAD_SAME_UPPER, PAD_SAME_LOWER, PAD_VALID };
static const char *const pad_names[] = {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};

typedef struct conv_attrs {
  int pad_mode;
  int64_t group;
  const int64_t *ks, *st, *dl, *pads, *opad, *oshape;
  size_t nks, nst, ndl, npads, nopad, noshape;
} conv_attrs;

/* Reads and checks the attributes on their own (no input shapes). */
static kiln_status conv_attrs_read(const kiln_node *n, bool transposed, conv_attrs *a) {
  memset(a, 0, sizeof *a);
  const char *ap;
  kiln_status s = attr_string(n, "auto_pad", "NOTSET", &ap);
  if (s) return s;
  if (!strcmp(ap, "NOTSET") || !*ap) a->pad_mode = PAD_NOTSET;
  else if (!strcmp(ap, "SAME_UPPER")) a->pad_mode = PAD_SAME_UPPER;
  else if (!strcmp(ap, "SAME_LOWER")) a->pad_mode = PAD_SAME_LOWER;
  else if (!strcmp(ap, "VALID")) a->pad_mode = PAD_VALID;
  else
    return kiln_fail(KILN_E_MODEL, "auto_pad '%s' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", ap);
  s = attr_int(n, "group", 1, &a->group);
  if (!s && a->group < 1) s = kiln_fail(KILN_E_MODEL, "group %lld must be >= 1", (long long)a->group);
  if (!s) s = attr_ints(n, "kernel_shape", &a->ks, &a->nks);
  if (!s) s = attr_ints(n, "strides", &a->st, &a->nst);
  if (!s) s = attr_ints(n, "dilations", &a->dl, &a->ndl);
  if (!s) s = attr_ints(n, "pads", &a->pads, &a->npads);
  if (!s && transposed) s = attr_ints(n, "output_padding", &a->opad, &a->nopad);
  if (!s && transposed) s = attr_ints(n, "output_shape", &a->oshape, &a->noshape);
  if (s) return s;
  /* an empty list is an absent one: its readers test the pointer */
  if (!a->nks) a->ks = NULL;
  if (!a->nst) a->st = NULL;
  if (!a->ndl) a->dl = NULL;
  if (!a->npads) a->pads = NULL;
  if (!a->nopad) a->opad = NULL;
  if (!a->noshape) a->oshape = NULL;
  struct {
    const char *name;
    const int64_t *v;
    size_t n;
    int64_t min;
  } lists[] = {{"kernel_shape", a->ks, a->nks, 1}, {"strides", a->st, a->nst, 1},
               {"dilations", a->dl, a->ndl, 1},    {"pads", a->pads, a->npads, 0},
               {"output_padding", a->opad, a->nopad, 0}, {"output_shape", a->oshape, a->noshape, 0}};
  long nsp = -1;
  for (size_t l = 0; l < sizeof lists / sizeof *lists; l++) {
    if (!lists[l].v) continue;
    for (size_t i = 0; i < lists[l].n; i++)
      if (lists[l].v[i] < lists[l].min)
        return kiln_fail(KILN_E_MODEL, "%s[%zu] = %lld; it must be >= %lld", lists[l].name, i,
                         (long long)lists[l].v[i], (long long)lists[l].min);
    if (l == 5) continue; /* output_shape may also carry N and C */
    size_t k = lists[l].n;
    if (l == 3) {
      if (k % 2)
        return kiln_fail(KILN_E_MODEL, "pads has %zu values; it needs two per spatial dimension", k);
      k /= 2;
    }
    if (k > MAXSP)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "%s has %zu spatial values; at most %d spatial dims supported",
                       lists[l].name, k, MAXSP);
    if (nsp >= 0 && (long)k != nsp)
      return kiln_fail(KILN_E_MODEL, "%s covers %zu spatial dims but another attribute covers %ld",
                       lists[l].name, k, nsp);
    nsp = (long)k;
  }
  /* ConvTranspose: each output_padding value "must be less than the
     corresponding stride/dilation dimension" (onnxruntime: less than the
     larger of the two) */
  for (size_t i = 0; a->opad && i < a->nopad; i++) {
    int64_t st = a->st ? a->st[i] : 1, dl = a->dl ? a->dl[i] : 1, lim = st > dl ? st : dl;
    if (a->opad[i] >= lim)
      return kiln_fail(KILN_E_MODEL, "output_padding[%zu] = %lld; it must be less than the larger of strides[%zu] "
                       "= %lld and dilations[%zu] = %lld", i, (long long)a->opad[i], i, (long long)st, i,
                       (long long)dl);
  }
  if (a->pad_mode != PAD_NOTSET && a->pads)
    for (size_t i = 0; i < a->npads; i++)
      if (a->pads[i])
        return kiln_fail(KILN_E_MODEL, "explicit pads cannot be combined with auto_pad %s",
                         pad_names[a->pad_mode]);
  return KILN_OK;
}

static kiln_status conv_check(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  conv_attrs a;
  kiln_status s = conv_attrs_read(n, false, &a);
  if (!s && strcmp(n->op_type, "Conv")) s = need_opset(n, 10); /* ConvInteger, QLinearConv */
  return s;
}

static kiln_status convt_check(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  conv_attrs a;
  return conv_attrs_read(n, true, &a);
}

typedef struct conv_geom {
  int nsp;
  int64_t N, C, M, G; /* batch, input channels, output channels, groups */
  int64_t in[MAXSP], k[MAXSP], out[MAXSP], s[MAXSP], d[MAXSP], pb[MAXSP], pe[MAXSP];
  int64_t in_sp, k_sp, out_sp; /* spatial element counts */
  int out_rank;
  int64_t out_dims[KILN_MAX_RANK];
} conv_geom;

#define TOO_BIG(what, i)                                                                                     \
  kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "spatial dim %d: %s overflows 64-bit arithmetic", (i), (what))

/* Shapes of a convolution (W is [M, C/group, k...]) or a transposed one (W
 * is [C, M/group, k...]), with pads resolved and the output shape. */
static kiln_status conv_geom_make(const kiln_node *nd, bool transposed, const kiln_tensor *x, const kiln_tensor *w,
                                  conv_geom *g) {
  char sx[160], sw[160];
  conv_attrs a;
  kiln_status s = conv_attrs_read(nd, transposed, &a);
  if (s) return s;
  memset(g, 0, sizeof *g);
  if (x->rank < 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "X %s must have rank >= 3 (N, C, spatial dims...)", SHAPE(x, sx));
  if (w->rank != x->rank)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "W %s must have the rank of X %s", SHAPE(w, sw), SHAPE(x, sx));
  int nsp = x->rank - 2;
  g->nsp = nsp;
  struct {
    const char *name;
    size_t n, want;
  } lens[] = {{"kernel_shape", a.nks, (size_t)nsp}, {"strides", a.nst, (size_t)nsp},
              {"dilations", a.ndl, (size_t)nsp},    {"pads", a.npads, 2 * (size_t)nsp},
              {"output_padding", a.nopad, (size_t)nsp}};
  for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
    if (lens[l].n && lens[l].n != lens[l].want)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has %zu values but X %s has %d spatial dims (%zu expected)",
                       lens[l].name, lens[l].n, SHAPE(x, sx), nsp, lens[l].want);
  if (a.oshape && a.noshape != (size_t)nsp && a.noshape != (size_t)nsp + 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "output_shape has %zu values but X %s has %d spatial dims",
                     a.noshape, SHAPE(x, sx), nsp);
  g->N = x->dims[0];
  g->C = x->dims[1];
  g->G = a.group;
  if (!transposed) {
    int64_t cw;
    if (mul_ovf(w->dims[1], g->G, &cw) || cw != g->C)
      return kiln_fail(KILN_E_MISMATCH_SHAPE,
                       "X %s has %lld channels but W %s with group %lld expects %lld * %lld", SHAPE(x, sx),
                       (long long)g->C, SHAPE(w, sw), (long long)g->G, (long long)w->dims[1], (long long)g->G);
    g->M = w->dims[0];
    if (g->M % g->G)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "W %s has %lld output channels, not divisible by group %lld",
                       SHAPE(w, sw), (long long)g->M, (long long)g->G);
  } else {
    if (w->dims[0] != g->C)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "X %s has %lld channels but W %s has %lld input channels",
                       SHAPE(x, sx), (long long)g->C, SHAPE(w, sw), (long long)w->dims[0]);
    if (g->C % g->G)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "X %s has %lld channels, not divisible by group %lld", SHAPE(x, sx),
                       (long long)g->C, (long long)g->G);
    if (mul_ovf(w->dims[1], g->G, &g->M)) return TOO_BIG("output channels", -1);
  }
  if (a.oshape && a.noshape == (size_t)nsp + 2 && (a.oshape[0] != g->N || a.oshape[1] != g->M))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "output_shape starts [%lld,%lld] but the output has N=%lld, M=%lld",
                     (long long)a.oshape[0], (long long)a.oshape[1], (long long)g->N, (long long)g->M);
  for (int i = 0; i < nsp; i++) {
    int64_t in = x->dims[2 + i], k = w->dims[2 + i];
    g->in[i] = in;
    g->k[i] = k;
    if (a.ks && a.ks[i] != k) {
      char sk[160];
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "kernel_shape %s disagrees with W %s",
                       kiln_shape_str(nsp, a.ks, sk, sizeof sk), SHAPE(w, sw));
    }
    if (k < 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "W %s has an empty kernel dimension", SHAPE(w, sw));
    int64_t st = a.st ? a.st[i] : 1, dl = a.dl ? a.dl[i] : 1;
    g->s[i] = st;
    g->d[i] = dl;
    int64_t eff; /* extent of the dilated kernel */
    if (mul_ovf(k - 1, dl, &eff) || add_ovf(eff, 1, &eff)) return TOO_BIG("the dilated kernel", i);
    if (!transposed) {
      int64_t pb = 0, pe = 0, out;
      if (a.pad_mode == PAD_SAME_UPPER || a.pad_mode == PAD_SAME_LOWER) {
        out = in / st + (in % st != 0);
        int64_t need;
        if (out > 0) {
          if (mul_ovf(out - 1, st, &need) || add_ovf(need, eff, &need)) return TOO_BIG("padding", i);
          need -= in;
        } else {
          need = 0;
        }
        if (need < 0) need = 0;
        if (a.pad_mode == PAD_SAME_UPPER) {
          pb = need / 2;
          pe = need - pb;
        } else {
          pe = need / 2;
          pb = need - pe;
        }
      } else {
        if (a.pad_mode == PAD_NOTSET && a.pads) {
          pb = a.pads[i];
          pe = a.pads[i + nsp];
        }
        int64_t span;
        if (add_ovf(in, pb, &span) || add_ovf(span, pe, &span)) return TOO_BIG("the padded input", i);
        if (span < eff) {
          char sk[160];
          return kiln_fail(KILN_E_MISMATCH_SHAPE,
                           "spatial dim %d: input %lld padded by %lld+%lld is smaller than the kernel extent "
                           "%lld (X %s, W %s, dilation %lld)",
                           i, (long long)in, (long long)pb, (long long)pe, (long long)eff, SHAPE(x, sx),
                           shp(w, sk, sizeof sk), (long long)dl);
        }
        out = (span - eff) / st + 1;
      }
      g->pb[i] = pb;
      g->pe[i] = pe;
      g->out[i] = out;
    } else {
      int64_t op = a.opad ? a.opad[i] : 0, full, out, total;
      if (in < 1)
        return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "X %s has an empty spatial dim", SHAPE(x, sx));
      if (mul_ovf(in - 1, st, &full) || add_ovf(full, op, &full) || add_ovf(full, eff, &full))
        return TOO_BIG("the output size", i);
      if (a.oshape || a.pad_mode == PAD_SAME_UPPER || a.pad_mode == PAD_SAME_LOWER) {
        if (a.oshape) out = a.oshape[i + (a.noshape == (size_t)nsp + 2 ? 2 : 0)];
        else if (mul_ovf(in, st, &out)) return TOO_BIG("the output size", i);
        total = full - out;
        if (a.pad_mode == PAD_SAME_UPPER) {
          g->pb[i] = floordiv2(total);
          g->pe[i] = total - g->pb[i];
        } else {
          g->pe[i] = floordiv2(total);
          g->pb[i] = total - g->pe[i];
        }
      } else {
        if (a.pad_mode == PAD_NOTSET && a.pads) {
          g->pb[i] = a.pads[i];
          g->pe[i] = a.pads[i + nsp];
        }
        out = full - g->pb[i] - g->pe[i];
        if (out < 0)
          return kiln_fail(KILN_E_MISMATCH_SHAPE,
                           "spatial dim %d: pads %lld+%lld exceed the full output size %lld (X %s, W %s)", i,
                           (long long)g->pb[i], (long long)g->pe[i], (long long)full, SHAPE(x, sx),
                           SHAPE(w, sw));
      }
      g->out[i] = out;
    }
  }
  g->out_rank = x->rank;
  g->out_dims[0] = g->N;
  g->out_dims[1] = g->M;
  for (int i = 0; i < nsp; i++) g->out_dims[2 + i] = g->out[i];
  int64_t n;
  s = kiln_shape_numel(g->out_rank, g->out_dims, &n);
  if (s) return s;
  g->in_sp = g->k_sp = g->out_sp = 1;
  for (int i = 0; i < nsp; i++) {
    g->in_sp *= g->in[i];
    g->k_sp *= g->k[i];
    g->out_sp *= g->out[i];
  }
  return KILN_OK;
}

static void odo_next(int64_t *idx, const int64_t *dims, int n) {
  for (int i = n - 1; i >= 0; i--) {
    if (++idx[i] < dims[i]) return;
    idx[i] = 0;
  }
}

/* y[n][m][o] = sum_{c in m's group, k} x[n][c][o*s - pb + k*d] * w[m][c][k],
 * out-of-range input positions reading 0 (multiplied, as the spec's zero
 * padding is: a non-finite weight over the padding gives NaN). */
static void conv_fwd(const conv_geom *g, const double *x, const double *w, double *y) {
  int64_t Cg = g->C / g->G, Mg = g->M / g->G;
  int64_t oi[MAXSP], ki[MAXSP];
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t m = 0; m < g->M; m++) {
      int64_t grp = m / Mg;
      const double *xg = x + (n * g->C + grp * Cg) * g->in_sp;
      const double *wm = w + m * Cg * g->k_sp;
      double *ym = y + (n * g->M + m) * g->out_sp;
      memset(oi, 0, sizeof oi);
      for (int64_t o = 0; o < g->out_sp; o++) {
        double acc = 0;
        memset(ki, 0, sizeof ki);
        for (int64_t kp = 0; kp < g->k_sp; kp++) {
          int64_t flat = 0;
          bool inside = true;
          for (int d = 0; d < g->nsp && inside; d++) {
            int64_t p = oi[d] * g->s[d] - g->pb[d] + ki[d] * g->d[d];
            inside = p >= 0 && p < g->in[d];
            flat = flat * g->in[d] + p;
          }
          if (inside)
            for (int64_t cc = 0; cc < Cg; cc++) acc += xg[cc * g->in_sp + flat] * wm[cc * g->k_sp + kp];
          else /* a zero of the padding times the weight: 0 * inf is NaN (a sum of finite products is unchanged) */
            for (int64_t cc = 0; cc < Cg; cc++) acc += 0.0 * wm[cc * g->k_sp + kp];
          odo_next(ki, g->k, g->nsp);
        }
        ym[o] = acc;
        odo_next(oi, g->out, g->nsp);
      }
    }
}

/* Transposed: y[n][m][o] = sum x[n][c][i] * w[c][m'][k] over o + pb = i*s + k*d,
 * c in m's group, m' = m mod (M/group). */
static void conv_bwd(const conv_geom *g, const double *x, const double *w, double *y) {
  int64_t Cg = g->C / g->G, Mg = g->M / g->G;
  int64_t oi[MAXSP], ki[MAXSP];
  for (int64_t n = 0; n < g->N; n++)
    for (int64_t m = 0; m < g->M; m++) {
      int64_t grp = m / Mg, mm = m % Mg;
      const double *xg = x + (n * g->C + grp * Cg) * g->in_sp;
      const double *wg = w + (grp * Cg * Mg + mm) * g->k_sp; /* w[grp*Cg + cc][mm] */
      double *ym = y + (n * g->M + m) * g->out_sp;
      memset(oi, 0, sizeof oi);
      for (int64_t o = 0; o < g->out_sp; o++) {
        double acc = 0;
        memset(ki, 0, sizeof ki);
        for (int64_t kp = 0; kp < g->k_sp; kp++) {
          int64_t flat = 0;
          bool inside = true;
          for (int d = 0; d < g->nsp && inside; d++) {
            int64_t t = oi[d] + g->pb[d] - ki[d] * g->d[d];
            inside = t >= 0 && t % g->s[d] == 0 && t / g->s[d] < g->in[d];
            flat = flat * g->in[d] + t / g->s[d];
          }
          if (inside)
            for (int64_t cc = 0; cc < Cg; cc++) acc += xg[cc * g->in_sp + flat] * wg[cc * Mg * g->k_sp + kp];
          odo_next(ki, g->k, g->nsp);
        }
        ym[o] = acc;
        odo_next(oi, g->out, g->nsp);
      }
    }
}

static kiln_status check_bias(const kiln_tensor *b, int64_t M, const char *name) {
  char sb[160];
  if (b->rank == 1 && b->dims[0] == M) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has shape %s; expected [%lld] (one per output channel)", name,
                   SHAPE(b, sb), (long long)M);
}

#define CONV_TYPES (KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_F16))

static kiln_status run_conv(const kiln_op_call *c, bool transposed) {
  const kiln_tensor *x = c->in[0], *w = c->in[1], *b = kiln_opc_opt_in(c, 2);
  kiln_status s = need_type(x, CONV_TYPES, "X");
  if (!s) s = same_type(x, "X", w, "W");
  if (!s && b) s = same_type(x, "X", b, "B");
  conv_geom g;
  if (!s) s = conv_geom_make(c->node, transposed, x, w, &g);
  if (!s && b) s = check_bias(b, g.M, "B");
  if (!s) s = kiln_tensor_alloc(&c->out[0], x->dtype, g.out_rank, g.out_dims);
  if (s) return s;
  kiln_tensor *y = &c->out[0];
  double *X = dup_f(x), *W = X ? dup_f(w) : NULL, *Y = W ? scratch(y->numel, sizeof *Y, "a convolution") : NULL;
  if (Y) {
    (transposed ? conv_bwd : conv_fwd)(&g, X, W, Y);
    for (int64_t i = 0; i < y->numel; i++) {
      double v = Y[i];
      if (b) v += kiln_get_f(b, (i / g.out_sp) % g.M);
      kiln_set_f(y, i, v);
    }
  } else {
    s = KILN_E_NOMEM;
    kiln_tensor_release(y);
  }
  kiln_free(X);
  kiln_free(W);
  kiln_free(Y);
  return s;
}

static kiln_status op_conv(const kiln_op_call *c) { return run_conv(c, false); }
static kiln_status op_convtranspose(const kiln_op_call *c) { return run_conv(c, true); }

/* Quantized convolution: (x - x_zp) * (w - w_zp[m]) accumulated exactly
 * (padding contributes 0 after the zero point is removed). *yv gets the
 * accumulators, laid out as the output. */
static kiln_status qconv(const kiln_op_call *c, const kiln_tensor *x, const kiln_tensor *xz, const kiln_tensor *w,
                         const kiln_tensor *wz, conv_geom *g, double **yv) {
  *yv = NULL;
  kiln_status s = need_type(x, KILN_T(KILN_U8) | KILN_T(KILN_I8), "x");
  if (!s) s = need_type(w, KILN_T(KILN_U8) | KILN_T(KILN_I8), "w");
  if (!s && xz) s = same_type(x, "x", xz, "x_zero_point");
  if (!s && wz) s = same_type(w, "w", wz, "w_zero_point");
  if (!s) s = conv_geom_make(c->node, false, x, w, g);
  if (!s && xz) s = check_vec(xz, 1, "x_zero_point", "per-tensor");
  if (!s && wz) s = check_vec(wz, g->M, "w_zero_point", "one per output channel");
  if (s) return s;
  double *X = dup_f(x), *W = X ? dup_f(w) : NULL;
  double *Y = W ? scratch(g->N * g->M * g->out_sp, sizeof *Y, "a convolution") : NULL;
  if (!Y) {
    kiln_free(X);
    kiln_free(W);
    return KILN_E_NOMEM;
  }
  double z = xz ? (double)kiln_get_i(xz, 0) : 0;
  for (int64_t i = 0; i < x->numel; i++) X[i] -= z;
  int64_t per_m = w->numel / (w->dims[0] ? w->dims[0] : 1);
  if (wz)
    for (int64_t i = 0; i < w->numel; i++) W[i] -= (double)vec_i(wz, i / per_m);
  conv_fwd(g, X, W, Y);
  kiln_free(X);
  kiln_free(W);
  *yv = Y;
  return KILN_OK;
}

static kiln_status op_convinteger(const kiln_op_call *c) {
  conv_geom g;
  double *Y;
  kiln_status s = qconv(c, c->in[0], kiln_opc_opt_in(c, 2), c->in[1], kiln_opc_opt_in(c, 3), &g, &Y);
  if (!s) s = kiln_tensor_alloc(&c->out[0], KILN_I32, g.out_rank, g.out_dims);
  if (!s)
    for (int64_t i = 0; i < c->out[0].numel; i++) kiln_set_i(&c->out[0], i, (int64_t)Y[i]);
  kiln_free(Y);
  return s;
}

static kiln_status op_qlinearconv(const kiln_op_call *c) {
  const kiln_tensor *x = c->in[0], *xs = c->in[1], *xz = c->in[2], *w = c->in[3], *ws = c->in[4],
                    *wz = c->in[5], *ys = c->in[6], *yz = c->in[7], *b = kiln_opc_opt_in(c, 8);
  kiln_status s = need_type(xs, KILN_TS_FLOAT, "x_scale");
  if (!s) s = need_type(ws, KILN_TS_FLOAT, "w_scale");
  if (!s) s = need_type(ys, KILN_TS_FLOAT, "y_scale");
  if (!s) s = need_type(yz, KILN_T(KILN_U8) | KILN_T(KILN_I8), "y_zero_point");
  if (!s && b) s = need_type(b, KILN_T(KILN_I32), "B");
  if (s) return s;
  conv_geom g;
  double *Y = NULL;
  s = qconv(c, x, xz, w, wz, &g, &Y);
  if (!s) s = check_vec(xs, 1, "x_scale", "per-tensor");
  if (!s) s = check_vec(ws, g.M, "w_scale", "one per output channel");
  if (!s) s = check_vec(ys, 1, "y_scale", "per-tensor");
  if (!s) s = check_vec(yz, 1, "y_zero_point", "per-tensor");
  if (!s && b) s = check_bias(b, g.M, "B");
  if (!s) s = kiln_tensor_alloc(&c->out[0], yz->dtype, g.out_rank, g.out_dims);
  if (!s) {
    kiln_tensor *y = &c->out[0];
    double xsc = kiln_get_f(xs, 0), ysc = kiln_get_f(ys, 0);
    int64_t zp = kiln_get_i(yz, 0);
    for (int64_t i = 0; i < y->numel; i++) {
      int64_t m = (i / g.out_sp) % g.M;
      double acc = Y[i] + (b ? (double)kiln_get_i(b, m) : 0);
      put_q(y, i, acc * (xsc * vec_f(ws, m) / ysc), zp);
    }
  }
  kiln_free(Y);
  return s;
}

/* ------------------------------------------------------------------------ */
/* Einsum                                                                   */

#define EIN_MAXOP 64
#define EIN_LETTERS 52                        /* A-Z then a-z, in ASCII order */
#define EIN_LABELS (EIN_LETTERS + KILN_MAX_RANK) /* letters, then ellipsis dims */
#define EIN_ELL (-1)

typedef struct ein_term {
  int n;                        /* tokens */
  int tok[KILN_MAX_RANK + 1];   /* letter ids, EIN_ELL for "..." */
  bool ell;
} ein_term;

static int ein_letter(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + ch - 'a';
  return -1;
}

static char ein_char(int id) { return (char)(id < 26 ? 'A' + id : 'a' + id - 26); }

/* Parses one term from p up to a ',' '-' or NUL; returns the end. */
static kiln_status ein_term_parse(const char *eq, const char **pp, ein_term *t) {
  const char *p = *pp;
  memset(t, 0, sizeof *t);
  for (;;) {
    while (*p == ' ') p++;
    if (!*p || *p == ',' || *p == '-') break;
    if (*p == '.') {
      if (strncmp(p, "...", 3) || t->ell)
        return kiln_fail(KILN_E_MODEL, "einsum equation '%s': bad or repeated ellipsis", eq);
      t->ell = true;
      if (t->n > KILN_MAX_RANK) goto too_long;
      t->tok[t->n++] = EIN_ELL;
      p += 3;
      continue;
    }
    int id = ein_letter(*p);
    if (id < 0) return kiln_fail(KILN_E_MODEL, "einsum equation '%s': unexpected character '%c'", eq, *p);
    if (t->n > KILN_MAX_RANK) goto too_long;
    t->tok[t->n++] = id;
    p++;
  }
  *pp = p;
  return KILN_OK;
too_long:
  return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "einsum equation '%s': a term has more than %d subscripts", eq,
                   KILN_MAX_RANK);
}

typedef struct ein_eq {
  int nops;
  ein_term in[EIN_MAXOP];
  bool explicit_out;
  ein_term out;
} ein_eq;

static kiln_status ein_parse(const char *eq, ein_eq *e) {
  memset(e, 0, sizeof *e);
  const char *p = eq;
  for (;;) {
    if (e->nops == EIN_MAXOP)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "einsum equation '%s' has more than %d operands", eq, EIN_MAXOP);
    kiln_status s = ein_term_parse(eq, &p, &e->in[e->nops++]);
    if (s) return s;
    if (*p == ',') {
      p++;
      continue;
    }
    break;
  }
  if (*p == '-') {
    if (p[1] != '>') return kiln_fail(KILN_E_MODEL, "einsum equation '%s': '-' not followed by '>'", eq);
    p += 2;
    e->explicit_out = true;
    kiln_status s = ein_term_parse(eq, &p, &e->out);
    if (s) return s;
    if (*p) return kiln_fail(KILN_E_MODEL, "einsum equation '%s': unexpected '%c' in the output", eq, *p);
    for (int i = 0; i < e->out.n; i++)
      for (int j = 0; j < i; j++)
        if (e->out.tok[i] >= 0 && e->out.tok[i] == e->out.tok[j])
          return kiln_fail(KILN_E_MODEL, "einsum equation '%s': output subscript '%c' repeated", eq,
                           ein_char(e->out.tok[i]));
  }
  if (*p) return kiln_fail(KILN_E_MODEL, "einsum equation '%s': unexpected '%c'", eq, *p);
  return KILN_OK;
}

static kiln_status einsum_check(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  const char *eq;
  kiln_status s = need_opset(n, 12);
  if (!s) s = attr_string(n, "equation", NULL, &eq);
  if (s) return s;
  if (!eq) return kiln_fail(KILN_E_MODEL, "attribute 'equation' is required");
  ein_eq *e = kiln_malloc(sizeof *e);
  if (!e) return kiln_fail(KILN_E_NOMEM, "out of memory parsing an einsum equation");
  s = ein_parse(eq, e);
  if (!s && e->nops != n->n_in)
    s = kiln_fail(KILN_E_MODEL, "einsum equation '%s' has %d operands but the node has %d inputs", eq, e->nops,
                  n->n_in);
  kiln_free(e);
  return s;
}

#define EINSUM_TYPES (KILN_TS_INT | KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_F16))

static kiln_status op_einsum(const kiln_op_call *c) {
  const char *eq;
  kiln_status s = einsum_check(c->graph, c->node);
  if (s) return s;
  attr_string(c->node, "equation", NULL, &eq);
  ein_eq *e = kiln_calloc(1, sizeof *e);
  /* per operand: axis label ids; label -> stride (summed for repeats) */
  int64_t(*str)[EIN_LABELS] = kiln_calloc(EIN_MAXOP, sizeof *str);
  void **data = kiln_calloc(EIN_MAXOP, sizeof *data);
  if (!e || !str || !data) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory in Einsum");
    goto done;
  }
  s = ein_parse(eq, e);
  if (s) goto done;
  const kiln_tensor *x0 = c->in[0];
  s = need_type(x0, EINSUM_TYPES, "input 0");
  for (int i = 1; i < e->nops && !s; i++) {
    if (!c->in[i]) s = kiln_op_need(c, i);
    else if (c->in[i]->dtype != x0->dtype)
      s = kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has data type %s but input 0 has %s", i,
                    kiln_dtype_name(c->in[i]->dtype), kiln_dtype_name(x0->dtype));
  }
  if (s) goto done;
  /* ellipsis widths and the broadcast ellipsis shape */
  int E = 0, ew[EIN_MAXOP];
  for (int i = 0; i < e->nops; i++) {
    const kiln_tensor *t = c->in[i];
    int letters = e->in[i].n - (e->in[i].ell ? 1 : 0);
    ew[i] = t->rank - letters;
    char sb[160];
    if ((e->in[i].ell && ew[i] < 0) || (!e->in[i].ell && ew[i] != 0)) {
      s = kiln_fail(KILN_E_MISMATCH_SHAPE,
                    "einsum equation '%s': operand %d has shape %s but its term has %d subscripts%s",
                    eq, i, SHAPE(t, sb), letters, e->in[i].ell ? " plus an ellipsis" : "");
      goto done;
    }
    if (ew[i] > E) E = ew[i];
  }
  int64_t size[EIN_LABELS];
  int count[EIN_LABELS] = {0};
  bool used[EIN_LABELS] = {0};
  for (int l = 0; l < EIN_LABELS; l++) size[l] = 1;
  for (int i = 0; i < e->nops; i++) {
    const kiln_tensor *t = c->in[i];
    int64_t ts[KILN_MAX_RANK];
    kiln_strides(t->rank, t->dims, ts);
    int ax = 0;
    for (int k = 0; k < e->in[i].n; k++) {
      int id = e->in[i].tok[k];
      int nax = id == EIN_ELL ? ew[i] : 1;
      for (int j = 0; j < nax; j++, ax++) {
        int l = id == EIN_ELL ? EIN_LETTERS + (E - ew[i]) + j : id;
        int64_t dim = t->dims[ax];
        char sb[160];
        if (id != EIN_ELL) count[l]++;
        /* sizes must agree, except that 1 broadcasts (as in numpy) */
        if (used[l] && dim != size[l] && dim != 1 && size[l] != 1) {
          if (id == EIN_ELL)
            s = kiln_fail(KILN_E_MISMATCH_SHAPE,
                          "einsum equation '%s': ellipsis dims of operand %d %s do not broadcast", eq, i,
                          SHAPE(t, sb));
          else
            s = kiln_fail(KILN_E_MISMATCH_SHAPE,
                          "einsum equation '%s': subscript '%c' has sizes %lld and %lld (operand %d %s)", eq,
                          ein_char(l), (long long)size[l], (long long)dim, i, SHAPE(t, sb));
          goto done;
        }
        if (!used[l] || size[l] == 1) size[l] = dim;
        used[l] = true;
        if (dim != 1) str[i][l] += ts[ax]; /* a size-1 axis reads index 0 */
      }
    }
  }
  /* output labels */
  int out_lab[EIN_LABELS], nout = 0;
  if (e->explicit_out) {
    if (E > 0 && !e->out.ell) {
      s = kiln_fail(KILN_E_MODEL,
                    "einsum equation '%s': the inputs have %d broadcast (ellipsis) dims but the output has no '...'",
                    eq, E);
      goto done;
    }
    for (int k = 0; k < e->out.n; k++) {
      int id = e->out.tok[k];
      if (id == EIN_ELL) {
        for (int j = 0; j < E; j++) out_lab[nout++] = EIN_LETTERS + j;
      } else {
        if (!used[id]) {
          s = kiln_fail(KILN_E_MODEL, "einsum equation '%s': output subscript '%c' appears in no input", eq,
                        ein_char(id));
          goto done;
        }
        out_lab[nout++] = id;
      }
    }
  } else {
    for (int j = 0; j < E; j++) out_lab[nout++] = EIN_LETTERS + j;
    for (int l = 0; l < EIN_LETTERS; l++)
      if (count[l] == 1) out_lab[nout++] = l;
  }
  if (nout > KILN_MAX_RANK) {
    s = kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "einsum equation '%s': output rank %d exceeds %d", eq, nout,
                  KILN_MAX_RANK);
    goto done;
  }
  bool in_out[EIN_LABELS] = {0};
  int64_t out_dims[KILN_MAX_RANK];
  for (int k = 0; k < nout; k++) {
    in_out[out_lab[k]] = true;
    out_dims[k] = size[out_lab[k]];
  }
  int sum_lab[EIN_LABELS], nsum = 0;
  int64_t sum_dims[EIN_LABELS], sum_count = 1;
  for (int l = 0; l < EIN_LABELS; l++)
    if (used[l] && !in_out[l]) {
      sum_lab[nsum] = l;
      sum_dims[nsum++] = size[l];
      if (size[l] && sum_count > KILN_MAX_NUMEL / size[l]) {
        s = kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "einsum equation '%s': the summation is too large", eq);
        goto done;
      }
      sum_count *= size[l];
    }
  s = kiln_tensor_alloc(&c->out[0], x0->dtype, nout, out_dims);
  if (s) goto done;
  kiln_tensor *y = &c->out[0];
  bool fl = kiln_dtype_is_float(x0->dtype);
  for (int i = 0; i < e->nops; i++) {
    data[i] = fl ? (void *)dup_f(c->in[i]) : (void *)dup_i(c->in[i]);
    if (!data[i]) {
      s = KILN_E_NOMEM;
      kiln_tensor_release(y);
      goto done;
    }
  }
  int64_t val[EIN_LABELS] = {0}, oidx[KILN_MAX_RANK], sidx[EIN_LABELS];
  int ul[EIN_LABELS], nul = 0; /* the labels in use */
  for (int l = 0; l < EIN_LABELS; l++)
    if (used[l]) ul[nul++] = l;
  for (int64_t o = 0; o < y->numel; o++) {
    kiln_unravel(o, nout, out_dims, oidx);
    for (int k = 0; k < nout; k++) val[out_lab[k]] = oidx[k];
    double facc = 0;
    uint64_t iacc = 0;
    memset(sidx, 0, sizeof sidx);
    for (int64_t si = 0; si < sum_count; si++) {
      for (int k = 0; k < nsum; k++) val[sum_lab[k]] = sidx[k];
      double fp = 1;
      uint64_t ip = 1;
      for (int i = 0; i < e->nops; i++) {
        int64_t off = 0;
        for (int u = 0; u < nul; u++) off += val[ul[u]] * str[i][ul[u]];
        if (fl) fp *= ((const double *)data[i])[off];
        else ip *= (uint64_t)((const int64_t *)data[i])[off];
      }
      facc += fp;
      iacc += ip;
      odo_next(sidx, sum_dims, nsum);
    }
    if (fl) kiln_set_f(y, o, facc);
    else kiln_set_i(y, o, (int64_t)iacc);
  }
done:
  if (data)
    for (int i = 0; i < EIN_MAXOP; i++) kiln_free(data[i]);
  kiln_free(data);
  kiln_free(str);
  kiln_free(e);
  return s;
}

/* ------------------------------------------------------------------------ */
/* Det                                                                      */

static kiln_status det_check(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return need_opset(n, 11);
}

static kiln_status q10_check(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  return need_opset(n, 10);
}

static kiln_status op_det(const kiln_op_call *c) {
  const kiln_tensor *x = c->in[0];
  char sx[160];
  kiln_status s = need_type(x, CONV_TYPES, "X");
  if (s) return s;
  if (x->rank < 2 || x->dims[x->rank - 1] != x->dims[x->rank - 2])
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "X %s must be [*, M, M] (square matrices)", SHAPE(x, sx));
  int64_t n = x->dims[x->rank - 1];
  s = kiln_tensor_alloc(&c->out[0], x->dtype, x->rank - 2, x->dims);
  if (s) return s;
  kiln_tensor *y = &c->out[0];
  double *a = scratch(n * n, sizeof *a, "Det");
  if (!a) {
    kiln_tensor_release(y);
    return KILN_E_NOMEM;
  }
  for (int64_t b = 0; b < y->numel; b++) {
    for (int64_t i = 0; i < n * n; i++) a[i] = kiln_get_f(x, b * n * n + i);
    double det = 1;
    for (int64_t col = 0; col < n && det != 0; col++) {
      int64_t piv = col;
      for (int64_t r = col + 1; r < n; r++)
        if (fabs(a[r * n + col]) > fabs(a[piv * n + col])) piv = r;
      if (a[piv * n + col] == 0) {
        det = 0;
        break;
      }
      if (piv != col) {
        for (int64_t k = 0; k < n; k++) {
          double t = a[col * n + k];
          a[col * n + k] = a[piv * n + k];
          a[piv * n + k] = t;
        }
        det = -det;
      }
      double p = a[col * n + col];
      det *= p;
      for (int64_t r = col + 1; r < n; r++) {
        double f = a[r * n + col] / p;
        for (int64_t k = col; k < n; k++) a[r * n + k] -= f * a[col * n + k];
      }
    }
    kiln_set_f(y, b, det);
  }
  kiln_free(a);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */

#define CONV_ATTRS "auto_pad dilations group kernel_shape pads strides"
#define Q8 (KILN_T(KILN_U8) | KILN_T(KILN_I8))

const kiln_op_def kiln_ref_ops_conv[] = {
    {"MatMul", 2, 2, 1, 1, "", MATMUL_TYPES, op_matmul, NULL},
    {"Gemm", 2, 3, 1, 1, "alpha beta transA transB broadcast", GEMM_TYPES, op_gemm, gemm_check},
    {"Conv", 2, 3, 1, 1, CONV_ATTRS, CONV_TYPES, op_conv, conv_check},
    {"ConvTranspose", 2, 3, 1, 1, CONV_ATTRS " output_padding output_shape", CONV_TYPES, op_convtranspose,
     convt_check},
    {"MatMulInteger", 2, 4, 1, 1, "", Q8, op_matmulinteger, q10_check},
    {"ConvInteger", 2, 4, 1, 1, CONV_ATTRS, Q8, op_convinteger, conv_check},
    {"QLinearMatMul", 8, 8, 1, 1, "", Q8, op_qlinearmatmul, q10_check},
    {"QLinearConv", 8, 9, 1, 1, CONV_ATTRS, Q8, op_qlinearconv, conv_check},
    {"Einsum", 1, EIN_MAXOP, 1, 1, "equation", EINSUM_TYPES, op_einsum, einsum_check},
    {"Det", 1, 1, 1, 1, "", CONV_TYPES, op_det, det_check},
    {0},
};
