/* cpu_fallback/sgemm: dispatch, thread count, the portable blocked SGEMM
 * and the depthwise row kernel's scalar twin (see sgemm.h). */
#include "cpu_fallback/sgemm.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"

/* ---- dispatch and threads ---- */

static int forced = KILN_VM_NISA;

void kiln_la_force_isa(kiln_vm_isa isa) { forced = (int)isa; }

kiln_vm_isa kiln_la_isa(void) {
  int f = forced;
  if (f == KILN_VM_ISA_BASE) return KILN_VM_ISA_BASE;
  if (f == KILN_VM_ISA_AVX2 && kiln_vm_cpu_has_avx2()) return KILN_VM_ISA_AVX2;
  return kiln_vm_isa_active();
}

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int n_threads = 1;

static void read_threads(void) {
  const char *env = getenv("KILN_NUM_THREADS");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 1 || v > 1024)
      fprintf(stderr, "kiln[warn]: KILN_NUM_THREADS=%s is not an integer in [1, 1024]: using 1\n", env);
    else
      n_threads = (int)v;
  }
  openblas_set_num_threads(n_threads);
}

int kiln_cpu_num_threads(void) {
  pthread_once(&threads_once, read_threads);
  return n_threads;
}

kiln_status kiln_sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (kiln_la_isa() == KILN_VM_ISA_BASE)
    return kiln_sgemm_base(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return kiln_sgemm_blas(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

kiln_status kiln_sgemm_blas(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return KILN_OK;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX)
    return kiln_sgemm_base(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); /* blasint is 32-bit */
  kiln_cpu_num_threads();
  if (K == 0) { /* BLAS may skip the scaling; do it here */
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return KILN_OK;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, (int)M,
              (int)N, (int)K, alpha, A, (int)(lda < 1 ? 1 : lda), B, (int)(ldb < 1 ? 1 : ldb), beta, C, (int)ldc);
  return KILN_OK;
}

/* ---- the portable blocked SGEMM ----
 * Goto's loop order: for each NC-column panel of B and KC-deep slice, pack
 * B into NR-wide strips; for each MC-row block of A, pack it (times alpha)
 * into MR-tall strips and run the MR x NR micro-kernel over the block. */

enum { MR = 4, NR = 8, KC = 256, MC = 96, NC = 2048 };

static void pack_a(const float *A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                   float alpha, float *restrict ap) {
  for (int64_t i = 0; i < mc; i += MR)
    for (int64_t k = 0; k < kc; k++)
      for (int64_t r = 0; r < MR; r++) {
        int64_t ii = i0 + i + r, kk = p0 + k;
        float v = 0.0f;
        if (i + r < mc) v = alpha * (trans ? A[kk * lda + ii] : A[ii * lda + kk]);
        *ap++ = v;
      }
}

static void pack_b(const float *B, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                   float *restrict bp) {
  for (int64_t j = 0; j < nc; j += NR)
    for (int64_t k = 0; k < kc; k++) {
      int64_t kk = p0 + k;
      if (!trans && j + NR <= nc) {
        memcpy(bp, B + kk * ldb + j0 + j, NR * sizeof *bp);
        bp += NR;
        continue;
      }
      for (int64_t c = 0; c < NR; c++) {
        int64_t jj = j0 + j + c;
        *bp++ = j + c < nc ? (trans ? B[jj * ldb + kk] : B[kk * ldb + jj]) : 0.0f;
      }
    }
}

/* C[0..mr)[0..nr) = acc + beta·C (beta 0: C not read), acc = ap' · bp. */
static void micro(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C, int64_t ldc,
                  int64_t mr, int64_t nr) {
  float acc[MR][NR];
  memset(acc, 0, sizeof acc);
  for (int64_t k = 0; k < kc; k++) {
    for (int r = 0; r < MR; r++)
      for (int c = 0; c < NR; c++) acc[r][c] += ap[r] * bp[c];
    ap += MR;
    bp += NR;
  }
  for (int64_t r = 0; r < mr; r++)
    for (int64_t c = 0; c < nr; c++) {
      float *y = &C[r * ldc + c];
      *y = beta == 0 ? acc[r][c] : acc[r][c] + beta * *y;
    }
}

kiln_status kiln_sgemm_base(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return KILN_OK;
  if (K <= 0) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return KILN_OK;
  }
  int64_t ncap = N < NC ? (N + NR - 1) / NR * NR : NC, mcap = M < MC ? (M + MR - 1) / MR * MR : MC;
  int64_t kcap = K < KC ? K : KC;
  float *ap = kiln_malloc((size_t)(mcap * kcap) * sizeof *ap), *bp = kiln_malloc((size_t)(ncap * kcap) * sizeof *bp);
  if (!ap || !bp) {
    kiln_free(ap);
    kiln_free(bp);
    return kiln_fail(KILN_E_NOMEM, "out of memory for the GEMM packing buffers");
  }
  for (int64_t j0 = 0; j0 < N; j0 += NC) {
    int64_t nc = N - j0 < NC ? N - j0 : NC;
    for (int64_t p0 = 0; p0 < K; p0 += KC) {
      int64_t kc = K - p0 < KC ? K - p0 : KC;
      float b = p0 == 0 ? beta : 1.0f;
      pack_b(B, ldb, transB, p0, kc, j0, nc, bp);
      for (int64_t i0 = 0; i0 < M; i0 += MC) {
        int64_t mc = M - i0 < MC ? M - i0 : MC;
        pack_a(A, lda, transA, i0, mc, p0, kc, alpha, ap);
        for (int64_t j = 0; j < nc; j += NR)
          for (int64_t i = 0; i < mc; i += MR)
            micro(kc, ap + i * kc, bp + j * kc, b, C + (i0 + i) * ldc + j0 + j, ldc, mc - i < MR ? mc - i : MR,
                  nc - j < NR ? nc - j : NR);
      }
    }
  }
  kiln_free(ap);
  kiln_free(bp);
  return KILN_OK;
}

/* ---- depthwise rows: the scalar twin ---- */

void kiln_dw_row_base(float *y, int64_t n, const float *const *src, const float *w, int nk, float bias) {
  for (int64_t i = 0; i < n; i++) {
    float acc = bias;
    for (int j = 0; j < nk; j++) acc = fmaf(w[j], src[j][i], acc);
    y[i] = acc;
  }
}

void kiln_la_gather_base(float *dst, const float *src, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; i++) dst[i] = src[i * stride];
}

kiln_la_gather_fn kiln_la_gather(void) {
#ifdef KILN_LA_HAVE_AVX2
  if (kiln_la_isa() == KILN_VM_ISA_AVX2) return kiln_la_gather_avx2;
#endif
  return kiln_la_gather_base;
}

kiln_dw_row_fn kiln_dw_row(void) {
#ifdef KILN_LA_HAVE_AVX2
  if (kiln_la_isa() == KILN_VM_ISA_AVX2) return kiln_dw_row_avx2_fma;
#endif
  return kiln_dw_row_base;
}

/* ---- helpers ---- */

kiln_status kiln_la_alloc_out(kiln_tensor *t, int rank, const int64_t *dims) {
  int64_t n;
  kiln_status s = kiln_shape_numel(rank, dims, &n);
  if (s) return s;
  if (!t->data || t->owns || t->capacity < (size_t)n * sizeof(float)) return kiln_tensor_alloc(t, KILN_F32, rank, dims);
  t->dtype = KILN_F32; /* a reserved slot: what kiln_tensor_alloc does, without the memset */
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  t->numel = n;
  t->strided = false;
  t->stack = NULL;
  t->offset = 0;
  return KILN_OK;
}
