/* cpu_fallback/gemm: MatMul and Gemm over float32 through kiln_sgemm
 * (cpu_fallback/sgemm.h: OpenBLAS, or kiln's blocked C GEMM under
 * KILN_CPU_ISA=base). Other dtypes, and calls the reference kernel would
 * reject (shape or attribute errors, old opsets), are declined: the
 * reference kernel then runs and reports the error.
 *
 * Views: an input that is a strided view with one map (t->strided, no
 * stack) is read in place when each matrix of it is row-major or
 * column-major with positive leading stride — a Transpose feeding MatMul
 * becomes a transposed operand, a Slice of rows a larger lda, batch dims
 * any strides (broadcast ones 0). Any other view is copied densely first.
 *
 * Epilogue: with one, the output is computed in row panels of about
 * KILN_LA_EPILOGUE_BLOCK bytes (one panel per matrix when smaller), and
 * the epilogue is applied to each panel right after its GEMM. */
#include <stdatomic.h>
#include <string.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/prepack.h"
#include "cpu_fallback/sgemm.h"
#include "ir/alloc.h"

/* A float32 operand: element idx at base[sum idx[d] * str[d]]. */
typedef struct operand {
  const float *base;
  int rank;
  int64_t dims[KILN_MAX_RANK], str[KILN_MAX_RANK];
  kiln_tensor tmp; /* a dense copy when the input's view has no single map */
} operand;

static kiln_status operand_make(const kiln_tensor *t, operand *o) {
  memset(o, 0, sizeof *o);
  o->rank = t->rank;
  for (int d = 0; d < t->rank; d++) o->dims[d] = t->dims[d];
  if (t->strided && t->stack) {
    kiln_status s = kiln_tensor_copy(&o->tmp, t);
    if (s) return s;
    t = &o->tmp;
  }
  if (t->strided) {
    o->base = (const float *)t->data + t->offset;
    for (int d = 0; d < t->rank; d++) o->str[d] = t->strides[d];
  } else {
    o->base = t->data;
    kiln_strides(t->rank, t->dims, o->str);
  }
  return KILN_OK;
}

/* Makes o a dense copy of itself (row-major strides). */
static kiln_status operand_densify(const kiln_tensor *t, operand *o) {
  if (o->tmp.data) return KILN_OK; /* already dense */
  kiln_status s = kiln_tensor_copy(&o->tmp, t);
  if (s) return s;
  o->base = o->tmp.data;
  kiln_strides(t->rank, t->dims, o->str);
  return KILN_OK;
}

static void operand_free(operand *o) { kiln_tensor_release(&o->tmp); }

/* The BLAS layout of a rows x cols matrix with element strides (sr, sc):
 * row-major (trans false, ld = sr) or column-major (trans true, ld = sc),
 * leading dimension positive and large enough; false when neither. */
static bool mat_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool *trans, int64_t *ld) {
  int64_t c1 = cols > 1 ? cols : 1, r1 = rows > 1 ? rows : 1;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= c1)) {
    *trans = false;
    *ld = rows == 1 ? c1 : sr;
    return true;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= r1)) {
    *trans = true;
    *ld = cols == 1 ? r1 : sc;
    return true;
  }
  return false;
}

/* Rows of the output computed per GEMM call when an epilogue is applied. */
static int64_t panel_rows(int64_t rows, int64_t N) {
  if (N < 1) N = 1;
  int64_t p = KILN_LA_EPILOGUE_BLOCK / ((int64_t)sizeof(float) * N);
  if (p < 16) p = 16;
  return p < rows ? p : rows;
}

/* Y (rows x N, dense, flat index of its first element y0) = op(A)·op(B)
 * (+ what Y holds when accumulate), in row panels with the epilogue after
 * each. fill, when set, writes the panel's initial values first. */
typedef void (*fill_fn)(const void *ctx, int64_t row0, int64_t rows, float *y);

static kiln_status gemm_panels(bool ta, bool tb, int64_t rows, int64_t N, int64_t K, float alpha, const float *A,
                               int64_t lda, const float *B, int64_t ldb, float *Y, int64_t y0, fill_fn fill,
                               const void *fctx, const kiln_cpu_epilogue *ep) {
  int64_t pr = ep ? panel_rows(rows, N) : rows;
  /* a constant B packed when the plan was made (prepack.h), read by the
     micro-kernel it was packed for (A plain, alpha 1: the pack path's form).
     Not for at most KILN_SGEMM_ROWS_MAX rows: kiln_sgemm's few-rows kernel
     reads B in place with four slices' fma chains at once, the same bits
     (small_cnn's 1 x 8192 x 10 classifier: ~10 us, ~37 us from the pack's
     12 x 32 tiles, one fma chain per accumulator, GEMM_CONV.md) */
  kiln_sgemm_micro_fn micro = tb || ta || alpha != 1.0f ? NULL : kiln_sgemm_pack_reader();
  const float *bpack = micro && rows > KILN_SGEMM_ROWS_MAX ? kiln_cpu_gemm_pack_find(B, K, N, ldb) : NULL;
  /* the epilogue exactly a bias row as wide as Y, or exactly a scale: done
     in the wide GEMM's store (sgemm.h kiln_sgemm_wide_pb_cb / _cb; the same
     values, no pass over Y) */
  kiln_sgemm_micro_fn wide = kiln_sgemm_pack_reader();
  bool cbias = ep && ep->col_bias && ep->col_bias_n == N, cscale = ep && ep->scaled;
  /* not for at most KILN_SGEMM_ROWS_MAX rows: the few-rows kernel (B in
     place) and the pass beat the wide tiles there (see above) */
  if (wide && !fill && alpha == 1.0f && N > 0 && rows > KILN_SGEMM_ROWS_MAX && (cbias || cscale)) {
    const float *cb = cbias ? ep->col_bias : NULL;
    float sc = cscale ? ep->scale : 1.0f;
    return bpack ? kiln_sgemm_wide_pb_cb(micro, rows, N, K, A, lda, NULL, bpack, Y, N, cb, sc)
                 : kiln_sgemm_wide_cb(wide, ta, tb, rows, N, K, A, lda, B, ldb, Y, N, cb, sc);
  }
  for (int64_t r0 = 0; r0 < rows; r0 += pr) {
    int64_t r = rows - r0 < pr ? rows - r0 : pr;
    float *y = Y + r0 * N;
    if (fill) fill(fctx, r0, r, y);
    kiln_status s = bpack ? kiln_sgemm_wide_pb(micro, r, N, K, A + r0 * lda, lda, NULL, bpack, fill ? 1.0f : 0.0f, y,
                                               N)
                          : kiln_sgemm(ta, tb, r, N, K, alpha, A + r0 * (ta ? 1 : lda), lda, B, ldb,
                                       fill ? 1.0f : 0.0f, y, N);
    if (s) return s;
    if (ep && r * N > 0) ep->apply(ep->ctx, y0 + r0 * N, r * N, y);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* MatMul (numpy matmul: 1-D operands, broadcast batch dims)                */

/* MatMul's matrices: matrix m of the broadcast batch (row-major over bd). */
typedef struct batch_job {
  bool ta, tb;
  int64_t rows, M, N, K;
  const float *A;
  int64_t lda;
  const float *B;
  int64_t ldb;
  float *Y;
  int nb;
  int64_t bd[KILN_MAX_RANK], as[KILN_MAX_RANK], bs[KILN_MAX_RANK];
  const kiln_cpu_epilogue *ep;
  atomic_int status; /* the first failure on the pool */
} batch_job;

/* Matrices of at most this many multiply-adds each (rows counted as at
 * least 12: the micro-kernel's height) run one per pool task when there
 * are several: below about 4 of the GEMM's own blocks (sgemm.c: ~2^20
 * each) its split leaves a thread idle or pays a wake-up per matrix. */
#define KILN_GEMM_BATCH_PAR_WORK ((double)(1 << 22))

static kiln_status batch_gemm(const batch_job *j, int64_t m) {
  int64_t ao = 0, bo = 0, r = m;
  for (int i = j->nb - 1; i >= 0; i--) {
    int64_t k = r % j->bd[i];
    r /= j->bd[i];
    ao += k * j->as[i];
    bo += k * j->bs[i];
  }
  return gemm_panels(j->ta, j->tb, j->rows, j->N, j->K, 1.0f, j->A + ao, j->lda, j->B + bo, j->ldb,
                     j->Y + m * j->M * j->N, m * j->M * j->N, NULL, NULL, j->ep);
}

static void batch_task(void *ctx, int64_t m, int worker) {
  (void)worker;
  batch_job *j = ctx;
  kiln_status s = batch_gemm(j, m);
  if (s) {
    kiln_error_clear();
    int zero = 0;
    atomic_compare_exchange_strong(&j->status, &zero, (int)s);
  }
}

static kiln_status run_matmul(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  const kiln_tensor *a = c->n_in > 0 ? c->in[0] : NULL, *b = c->n_in > 1 ? c->in[1] : NULL;
  *declined = true;
  if (!a || !b || a->dtype != KILN_F32 || b->dtype != KILN_F32 || a->rank < 1 || b->rank < 1) return KILN_OK;
  int ra = a->rank, rb = b->rank;
  int64_t M = ra == 1 ? 1 : a->dims[ra - 2], K = a->dims[ra - 1];
  int64_t Kb = rb == 1 ? b->dims[0] : b->dims[rb - 2], N = rb == 1 ? 1 : b->dims[rb - 1];
  if (K != Kb) return KILN_OK;
  int na = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0, nb = na > nbb ? na : nbb;
  int64_t bd[KILN_MAX_RANK], od[KILN_MAX_RANK];
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - na), ib = i - (nb - nbb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return KILN_OK;
    bd[i] = da == 1 ? db : da;
  }
  int orank = nb;
  memcpy(od, bd, (size_t)nb * sizeof *od);
  if (ra > 1) od[orank++] = M;
  if (rb > 1) od[orank++] = N;
  int64_t numel;
  if (kiln_shape_numel(orank, od, &numel) || numel == 0) return KILN_OK;

  operand A, B;
  memset(&B, 0, sizeof B);
  kiln_status s = operand_make(a, &A);
  if (!s) s = operand_make(b, &B);
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  if (!s && !mat_layout(M, K, ra == 1 ? 0 : A.str[ra - 2], A.str[ra - 1], &ta, &lda)) {
    s = operand_densify(a, &A);
    if (!s) mat_layout(M, K, ra == 1 ? 0 : A.str[ra - 2], A.str[ra - 1], &ta, &lda);
  }
  if (!s && !mat_layout(K, N, rb == 1 ? B.str[0] : B.str[rb - 2], rb == 1 ? 0 : B.str[rb - 1], &tb, &ldb)) {
    s = operand_densify(b, &B);
    if (!s) mat_layout(K, N, rb == 1 ? B.str[0] : B.str[rb - 2], rb == 1 ? 0 : B.str[rb - 1], &tb, &ldb);
  }
  *declined = false;
  if (!s) s = kiln_la_alloc_out(&c->out[0], orank, od);
  if (s) goto done;
  float *Y = c->out[0].data;
  /* batch strides of each operand over the broadcast batch shape */
  int64_t as[KILN_MAX_RANK], bs[KILN_MAX_RANK], bcount = 1;
  bool b_shared = true;
  for (int i = 0; i < nb; i++) {
    int ia = i - (nb - na), ib = i - (nb - nbb);
    as[i] = ia >= 0 && a->dims[ia] != 1 ? A.str[ia] : 0;
    bs[i] = ib >= 0 && b->dims[ib] != 1 ? B.str[ib] : 0;
    if (bs[i] && bd[i] > 1) b_shared = false;
    bcount *= bd[i];
  }
  /* B the same matrix for every batch, A row-major with its batch rows
   * evenly spaced: one GEMM of bcount·M rows */
  int64_t rows = M, mats = bcount;
  if (b_shared && !ta && bcount > 1) {
    int64_t want = M * lda;
    bool even = true;
    for (int i = nb - 1; i >= 0 && even; i--) {
      if (bd[i] == 1) continue;
      even = as[i] == want;
      want *= bd[i];
    }
    if (even && M > 0) {
      rows = bcount * M;
      mats = 1;
    }
  }
  batch_job bj = {ta, tb, rows, M, N, K, A.base, lda, B.base, ldb, Y, nb, {0}, {0}, {0}, ep, 0};
  memcpy(bj.bd, bd, sizeof bd);
  memcpy(bj.as, as, sizeof as);
  memcpy(bj.bs, bs, sizeof bs);
  atomic_init(&bj.status, 0);
  /* small matrices (the attention's heads: 128 x 64 x 128, one task of the
     GEMM's own split): one matrix per task on the pool, each GEMM on its
     task's thread (its own loop then nested: on that thread), the same
     values as one after another */
  double work = (double)(rows < 12 ? 12 : rows) * (double)N * (double)K;
  if (mats > 1 && kiln_pool_threads() > 1 && work < KILN_GEMM_BATCH_PAR_WORK) {
    kiln_pool_for(mats, kiln_pool_threads(), batch_task, &bj);
    s = (kiln_status)atomic_load(&bj.status);
    if (s) s = kiln_fail(s, "MatMul: a batch GEMM failed on a pool thread (%s)",
                         s == KILN_E_NOMEM ? "out of memory" : "internal error");
  } else {
    for (int64_t m = 0; m < mats && !s; m++) s = batch_gemm(&bj, m);
  }
done:
  operand_free(&A);
  operand_free(&B);
  return s;
}

/* ------------------------------------------------------------------------ */
/* Gemm: Y = alpha·op(A)·op(B) + beta·C, C broadcast to [M, N]               */

typedef struct cfill {
  const float *c;
  int64_t s0, s1, N;
  float beta;
} cfill;

static void fill_c(const void *ctx, int64_t row0, int64_t rows, float *y) {
  const cfill *f = ctx;
  for (int64_t i = 0; i < rows; i++) {
    const float *cr = f->c + (row0 + i) * f->s0;
    float *yr = y + i * f->N;
    if (f->s1 == 1)
      for (int64_t j = 0; j < f->N; j++) yr[j] = f->beta * cr[j];
    else
      for (int64_t j = 0; j < f->N; j++) yr[j] = f->beta * cr[j * f->s1];
  }
}

static bool attr_is(const kiln_node *n, const char *name, kiln_attr_type t1, kiln_attr_type t2) {
  const kiln_attr *at = kiln_node_attr(n, name);
  return !at || at->type == t1 || at->type == t2;
}

static double attr_num(const kiln_node *n, const char *name, double def) {
  const kiln_attr *at = kiln_node_attr(n, name);
  if (!at) return def;
  return at->type == KILN_ATTR_INT ? (double)at->i : (double)at->f;
}

static kiln_status run_gemm(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  const kiln_node *nd = c->node;
  const kiln_tensor *a = c->n_in > 0 ? c->in[0] : NULL, *b = c->n_in > 1 ? c->in[1] : NULL;
  const kiln_tensor *cc = c->n_in > 2 ? c->in[2] : NULL;
  *declined = true;
  if (!a || !b || a->dtype != KILN_F32 || b->dtype != KILN_F32 || (cc && cc->dtype != KILN_F32)) return KILN_OK;
  if (a->rank != 2 || b->rank != 2 || c->opset < 7 || (c->opset < 11 && !cc)) return KILN_OK;
  if (!attr_is(nd, "transA", KILN_ATTR_INT, KILN_ATTR_INT) || !attr_is(nd, "transB", KILN_ATTR_INT, KILN_ATTR_INT) ||
      !attr_is(nd, "alpha", KILN_ATTR_FLOAT, KILN_ATTR_INT) || !attr_is(nd, "beta", KILN_ATTR_FLOAT, KILN_ATTR_INT) ||
      !attr_is(nd, "broadcast", KILN_ATTR_INT, KILN_ATTR_INT))
    return KILN_OK;
  bool tA = attr_num(nd, "transA", 0) != 0, tB = attr_num(nd, "transB", 0) != 0;
  float alpha = (float)attr_num(nd, "alpha", 1), beta = (float)attr_num(nd, "beta", 1);
  int64_t M = tA ? a->dims[1] : a->dims[0], K = tA ? a->dims[0] : a->dims[1];
  int64_t Kb = tB ? b->dims[1] : b->dims[0], N = tB ? b->dims[0] : b->dims[1];
  if (K != Kb || M == 0 || N == 0) return KILN_OK;
  int64_t od[2] = {M, N};
  if (cc) { /* unidirectional broadcast to [M, N] */
    if (cc->rank > 2) return KILN_OK;
    for (int j = 0; j < cc->rank; j++) {
      int64_t want = od[j + 2 - cc->rank];
      if (cc->dims[j] != want && cc->dims[j] != 1) return KILN_OK;
    }
  }
  operand A, B, C;
  memset(&B, 0, sizeof B);
  memset(&C, 0, sizeof C);
  kiln_status s = operand_make(a, &A);
  if (!s) s = operand_make(b, &B);
  if (!s && cc) s = operand_make(cc, &C);
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  /* op(A) is M x K: element (m, k) at A[m·sr + k·sc] */
  int64_t asr = tA ? A.str[1] : A.str[0], asc = tA ? A.str[0] : A.str[1];
  if (!s && !mat_layout(M, K, asr, asc, &ta, &lda)) {
    s = operand_densify(a, &A);
    if (!s) mat_layout(M, K, tA ? A.str[1] : A.str[0], tA ? A.str[0] : A.str[1], &ta, &lda);
  }
  int64_t bsr = tB ? B.str[1] : B.str[0], bsc = tB ? B.str[0] : B.str[1];
  if (!s && !mat_layout(K, N, bsr, bsc, &tb, &ldb)) {
    s = operand_densify(b, &B);
    if (!s) mat_layout(K, N, tB ? B.str[1] : B.str[0], tB ? B.str[0] : B.str[1], &tb, &ldb);
  }
  *declined = false;
  if (!s) s = kiln_la_alloc_out(&c->out[0], 2, od);
  if (!s) {
    cfill f = {0};
    if (cc) {
      int r = cc->rank;
      f.c = C.base;
      f.s0 = r == 2 && cc->dims[0] != 1 ? C.str[0] : 0;
      f.s1 = r >= 1 && cc->dims[r - 1] != 1 ? C.str[r - 1] : 0;
      f.N = N;
      f.beta = beta;
    }
    s = gemm_panels(ta, tb, M, N, K, alpha, A.base, lda, B.base, ldb, c->out[0].data, 0, cc ? fill_c : NULL, &f,
                    ep);
  }
  operand_free(&A);
  operand_free(&B);
  operand_free(&C);
  return s;
}

const kiln_cpu_kernel_def kiln_cpu_kernels_gemm[] = {
    {"MatMul", NULL, run_matmul, true},
    {"Gemm", NULL, run_gemm, true},
    {NULL, NULL, NULL, false},
};
