/* cpu_fallback/sgemm: dispatch, thread count, the portable blocked SGEMM
 * and the depthwise row kernel's scalar twin (see sgemm.h). */
#include "cpu_fallback/sgemm.h"

#include <cblas.h>
#include <stdint.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/nn.h"
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

/* ---- which SGEMM ---- */

int kiln_la_cpu_has_avx512(void) {
#if defined(KILN_LA_HAVE_AVX512)
  static int cached = -1; /* cpuid traps under a hypervisor: asked once */
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v < 0) __atomic_store_n(&cached, v = kiln_vm_cpu_has_avx512(), __ATOMIC_RELAXED);
  return v;
#else
  return 0;
#endif
}

static int sgemm_forced = -1;

void kiln_sgemm_force(int impl) { sgemm_forced = impl; }

static pthread_once_t sgemm_once = PTHREAD_ONCE_INIT;
static bool sgemm_env_blas;

static void read_sgemm_env(void) {
  const char *e = getenv("KILN_SGEMM");
  if (e && *e && strcmp(e, "blas") && strcmp(e, "auto"))
    fprintf(stderr, "kiln[warn]: KILN_SGEMM=%s is not auto or blas: using auto\n", e);
  sgemm_env_blas = e && !strcmp(e, "blas");
}

kiln_sgemm_impl kiln_sgemm_active(void) {
  int f = sgemm_forced;
  if (f == KILN_SGEMM_BLAS) return KILN_SGEMM_BLAS;
  if (f == KILN_SGEMM_AVX512) return kiln_la_cpu_has_avx512() ? KILN_SGEMM_AVX512 : KILN_SGEMM_BLAS;
  pthread_once(&sgemm_once, read_sgemm_env);
  return !sgemm_env_blas && kiln_la_cpu_has_avx512() ? KILN_SGEMM_AVX512 : KILN_SGEMM_BLAS;
}

kiln_status kiln_sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (kiln_la_isa() == KILN_VM_ISA_BASE)
    return kiln_sgemm_base(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_sgemm_active() == KILN_SGEMM_AVX512)
    return kiln_sgemm_wide(kiln_sgemm_micro_wide_avx512, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
#endif
  return kiln_sgemm_blas(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

kiln_status kiln_sgemm_blas(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  if (M <= 0 || N <= 0) return KILN_OK;
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX || ldc > INT32_MAX)
    return kiln_sgemm_base(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc); /* blasint is 32-bit */
  kiln_cpu_blas_threads();
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

/* ---- the wide blocked SGEMM ---- */

enum { WMR = KILN_SGEMM_WIDE_MR, WNR = KILN_SGEMM_WIDE_NR, WMC = 16 * WMR, WNC = 2048 };

/* y = acc + beta·y as the vector kernels round it (beta·y first, then the
 * add; y not read when beta is 0), for the scalar twins. */
static inline void store_beta(float *y, float acc, float beta) {
  if (beta == 0) *y = acc;
  else {
    float t = beta * *y;
    *y = acc + t;
  }
}

static void store_tile(float acc[WMR][WNR], float beta, float *C, int64_t ldc, int mr, int nr) {
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < nr; c++) store_beta(&C[r * ldc + c], acc[r][c], beta);
}

void kiln_sgemm_micro_wide_base(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                int64_t ldc, int mr, int nr) {
  float acc[WMR][WNR];
  memset(acc, 0, sizeof acc);
  for (int64_t k = 0; k < kc; k++) {
    for (int r = 0; r < WMR; r++)
      for (int c = 0; c < WNR; c++) acc[r][c] = fmaf(ap[r], bp[c], acc[r][c]);
    ap += WMR;
    bp += WNR;
  }
  store_tile(acc, beta, C, ldc, mr, nr);
}

void kiln_sgemm_rows_base(bool transA, int64_t M, int64_t j0, int64_t j1, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, float *acc) {
  (void)acc;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = j0; j < j1; j++)
      for (int64_t p0 = 0, kc; p0 < K; p0 += kc) {
        kc = kiln_sgemm_wide_kc(K, p0);
        float acc = 0.0f, *y = &C[i * ldc + j], b = p0 == 0 ? beta : 1.0f;
        for (int64_t k = p0; k < p0 + kc; k++) {
          float a = transA ? A[k * lda + i] : A[i * lda + k];
          acc = fmaf(alpha != 1.0f ? alpha * a : a, B[k * ldb + j], acc);
        }
        store_beta(y, acc, b);
      }
}

void kiln_sgemm_micro_a_base(int64_t kc, const float *A, int64_t lda, const float *restrict bp, float beta, float *C,
                             int64_t ldc, int mr, int nr) {
  float acc[WMR][WNR];
  memset(acc, 0, sizeof acc);
  for (int64_t k = 0; k < kc; k++) {
    for (int r = 0; r < mr; r++)
      for (int c = 0; c < WNR; c++) acc[r][c] = fmaf(A[r * lda + k], bp[c], acc[r][c]);
    bp += WNR;
  }
  store_tile(acc, beta, C, ldc, mr, nr);
}

static bool direct_a_on = true;

void kiln_sgemm_direct_a_enable(bool on) { direct_a_on = on; }

static void wpack_a(const float *A, int64_t lda, bool trans, int64_t i0, int64_t mc, int64_t p0, int64_t kc,
                    float alpha, float *restrict ap, const kiln_nn_prims *P) {
  for (int64_t i = 0; i < mc; i += WMR) {
    int64_t rows = mc - i < WMR ? mc - i : WMR;
    if (!trans) { /* A stored M x K: the strip is a blocked transpose of rows x kc (then times alpha) */
      P->transpose32((size_t)kc, (size_t)rows, (const uint32_t *)(const void *)(A + (i0 + i) * lda + p0), (size_t)lda,
                     (uint32_t *)(void *)ap, WMR);
      for (int64_t k = 0; k < kc && (alpha != 1.0f || rows < WMR); k++) {
        float *a = ap + k * WMR;
        if (alpha != 1.0f)
          for (int64_t r = 0; r < rows; r++) a[r] = alpha * a[r];
        for (int64_t r = rows; r < WMR; r++) a[r] = 0.0f;
      }
      ap += kc * WMR;
      continue;
    }
    for (int64_t k = 0; k < kc; k++) { /* A stored K x M: rows of the strip are contiguous */
      int64_t kk = p0 + k;
      int64_t r = 0;
      for (; r < rows; r++) ap[r] = alpha * A[kk * lda + i0 + i + r];
      for (; r < WMR; r++) ap[r] = 0.0f;
      ap += WMR;
    }
  }
}

static void wpack_b(const float *B, int64_t ldb, bool trans, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                    float *restrict bp, const kiln_nn_prims *P) {
  int64_t full = trans ? 0 : nc / WNR * WNR;
  if (full) { /* the full strips row by row: B is read in its storage order (the prefetcher streams it) */
    for (int64_t k = 0; k < kc; k++) {
      const float *row = B + (p0 + k) * ldb + j0;
      for (int64_t j = 0; j < full; j += WNR) memcpy(bp + j * kc + k * WNR, row + j, WNR * sizeof *bp); /* fixed size: vector moves */
    }
    bp += full * kc;
  }
  for (int64_t j = full; j < nc; j += WNR) {
    int64_t cols = nc - j < WNR ? nc - j : WNR;
    if (trans) { /* B stored N x K: column c of the strip is row j0 + j + c of B; a blocked transpose */
      P->transpose32((size_t)kc, (size_t)cols, (const uint32_t *)(const void *)(B + (j0 + j) * ldb + p0), (size_t)ldb,
                     (uint32_t *)(void *)bp, WNR);
      for (int64_t c = cols; c < WNR; c++)
        for (int64_t k = 0; k < kc; k++) bp[k * WNR + c] = 0.0f;
    } else { /* the last, partial strip */
      for (int64_t k = 0; k < kc; k++) {
        memcpy(bp + k * WNR, B + (p0 + k) * ldb + j0 + j, (size_t)cols * sizeof *bp);
        for (int64_t c = cols; c < WNR; c++) bp[k * WNR + c] = 0.0f;
      }
    }
    bp += kc * WNR;
  }
}

/* One block of C: rows [i0, i1), columns [j0, j1), all of K, into the
 * packing buffers ap (WMC x KC) and bp (KC x WNC), KC up to KILN_SGEMM_WIDE_KC_LAST. */
typedef struct wide_job {
  kiln_sgemm_micro_fn micro;
  bool transA, transB;
  int64_t M, N, K;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int64_t lda, ldb, ldc;
  int64_t tm, tn, bm, bn; /* the grid of blocks: tm x tn blocks of bm rows x bn columns */
  float **ap, **bp;       /* per worker */
  const kiln_nn_prims *P; /* the blocked transpose for a transposed B */
  const float *apack;     /* A pre-packed (kiln_sgemm_wide_pack_a) or NULL */
  int64_t mpad;           /* M rounded up to WMR (with apack) */
  const float *bpack;     /* B pre-packed (kiln_sgemm_wide_pack_b layout) or NULL */
  int64_t npad;           /* N rounded up to WNR (with bpack) */
  const kiln_sgemm_post *post; /* at the last KC slice of each tile, or NULL */
  kiln_sgemm_micro_post_fn micro_post;
  kiln_sgemm_micro_a_fn micro_a; /* A read in place (no pack), or NULL */
  const float *cbias;            /* a bias row added at each tile's last KC slice (micro_cb), or NULL */
  float cscale;                  /* a scale applied there first (1: none) */
  bool cpost;                    /* cbias or cscale: micro_cb at the last slice */
  kiln_sgemm_micro_cb_fn micro_cb;
  /* with B packed ahead and the AVX-512 kernels: micro / micro_cb with a prefetch stream (NULL otherwise) */
  kiln_sgemm_micro_pf_fn micro_pf;
  kiln_sgemm_micro_cb_pf_fn micro_cb_pf;
} wide_job;

static void wide_block(const wide_job *w, float *ap, float *bp, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t jc = j0; jc < j1; jc += WNC) {
    int64_t nc = j1 - jc < WNC ? j1 - jc : WNC;
    for (int64_t p0 = 0, kc; p0 < w->K; p0 += kc) {
      kc = kiln_sgemm_wide_kc(w->K, p0);
      float b = p0 == 0 ? w->beta : 1.0f;
      const float *bpk = bp;
      if (w->bpack) bpk = w->bpack + p0 * w->npad + jc * kc; /* jc is a multiple of WNR */
      else wpack_b(w->B, w->ldb, w->transB, p0, kc, jc, nc, bp, w->P);
      for (int64_t ic = i0; ic < i1; ic += WMC) {
        int64_t mc = i1 - ic < WMC ? i1 - ic : WMC;
        const float *apk = ap;
        if (w->apack) apk = w->apack + p0 * w->mpad + ic * kc; /* ic is a multiple of WMR */
        else if (!w->micro_a) wpack_a(w->A, w->lda, w->transA, ic, mc, p0, kc, w->alpha, ap, w->P);
        for (int64_t j = 0; j < nc; j += WNR)
          for (int64_t i = 0; i < mc; i += WMR) {
            if (w->apack && j == 0) /* the pack's next strip (the bytes after this one: a hint, never a fault; also across blocks) */
              for (int64_t q = 0; q < WMR * kc; q += 16) __builtin_prefetch(apk + (i + WMR) * kc + q);
            /* B packed ahead (weights, from memory when big): each row strip's call fetches its share of the next
               strip into L2 inside its k loop (GEMM_CONV.md "Weights from memory"); hints only */
            const float *spf = NULL;
            int64_t spfs = 0;
            if (w->micro_pf && j + WNR < nc) {
              int64_t ns = (mc + WMR - 1) / WMR, len = WNR * kc, q0 = len * (i / WMR) / ns,
                      q1 = len * (i / WMR + 1) / ns;
              spf = bpk + (j + WNR) * kc + q0, spfs = (q1 - q0 + kc - 1) / kc;
            }
            float *c = w->C + (ic + i) * w->ldc + jc + j;
            int mr = (int)(mc - i < WMR ? mc - i : WMR), nr = (int)(nc - j < WNR ? nc - j : WNR);
            if (w->cpost && p0 + kc == w->K && spf)
              w->micro_cb_pf(kc, apk + i * kc, NULL, w->lda, bpk + j * kc, b, c, w->ldc, mr, nr,
                             w->cbias ? w->cbias + jc + j : NULL, w->cscale, spf, spfs);
            else if (w->cpost && p0 + kc == w->K)
              w->micro_cb(kc, w->micro_a ? NULL : apk + i * kc, w->micro_a ? w->A + (ic + i) * w->lda + p0 : NULL,
                          w->lda, bpk + j * kc, b, c, w->ldc, mr, nr, w->cbias ? w->cbias + jc + j : NULL, w->cscale);
            else if (w->micro_a)
              w->micro_a(kc, w->A + (ic + i) * w->lda + p0, w->lda, bpk + j * kc, b, c, w->ldc, mr, nr);
            else if (w->post && p0 + kc == w->K)
              w->micro_post(kc, apk + i * kc, bpk + j * kc, b, c, w->ldc, mr, nr,
                            w->post->bias ? w->post->bias + ic + i : NULL, w->post->clamp, w->post->lo, w->post->hi);
            else if (spf) w->micro_pf(kc, apk + i * kc, bpk + j * kc, b, c, w->ldc, mr, nr, spf, spfs);
            else w->micro(kc, apk + i * kc, bpk + j * kc, b, c, w->ldc, mr, nr);
          }
      }
    }
  }
}

/* A or B packed once for all blocks (wide_run), on the pool: task t packs KC slice t / nch (slices start at
   multiples of KC: kiln_sgemm_wide_slice), of B columns (t % nch)·BONCE_NC.. (a multiple of the strips' 32), of A
   rows (t % nch)·AONCE_MC.. (whole strips of 12), into the layout a pack made ahead has. */
enum { BONCE_NC = 512, AONCE_MC = 4 * WMR };
typedef struct once_job {
  bool a; /* packing A (wpack_a, times alpha) or B (wpack_b) */
  const float *src;
  int64_t ld, K, n, pad, nch, chunk; /* n: A's rows or B's columns, pad: n rounded up to the strips */
  bool trans;
  float alpha;
  const kiln_nn_prims *P;
  float *dst;
} once_job;

static void once_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  const once_job *o = ctx;
  int64_t p0 = t / o->nch * KILN_SGEMM_WIDE_KC, c0 = t % o->nch * o->chunk;
  int64_t len = o->n - c0 < o->chunk ? o->n - c0 : o->chunk, kc = kiln_sgemm_wide_kc(o->K, p0);
  float *d = o->dst + p0 * o->pad + c0 * kc;
  if (o->a) wpack_a(o->src, o->ld, o->trans, c0, len, p0, kc, o->alpha, d, o->P);
  else wpack_b(o->src, o->ld, o->trans, p0, kc, c0, len, d, o->P);
}

static void wide_task(void *ctx, int64_t t, int worker) {
  const wide_job *w = ctx;
  int64_t bi = t / w->tn, bj = t % w->tn;
  int64_t i0 = bi * w->bm, j0 = bj * w->bn;
  int64_t i1 = i0 + w->bm < w->M ? i0 + w->bm : w->M, j1 = j0 + w->bn < w->N ? j0 + w->bn : w->N;
  if (i0 < i1 && j0 < j1) wide_block(w, w->ap[worker], w->bp[worker], i0, i1, j0, j1);
}

static kiln_status wide_run(kiln_sgemm_micro_fn micro, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                            int64_t ldc, const float *apack, const float *bpack, const kiln_sgemm_post *post,
                            const float *cbias, float cscale);

kiln_status kiln_sgemm_wide(kiln_sgemm_micro_fn micro, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                            int64_t ldc) {
  return wide_run(micro, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, NULL, NULL, NULL, NULL, 1.0f);
}

kiln_status kiln_sgemm_wide_pa(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *apack,
                               const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
  return wide_run(micro, false, false, M, N, K, 1.0f, NULL, K, B, ldb, beta, C, ldc, apack, NULL, NULL, NULL, 1.0f);
}

kiln_status kiln_sgemm_wide_post(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *A,
                                 int64_t lda, const float *apack, const float *B, int64_t ldb, const float *bpack,
                                 float beta, float *C, int64_t ldc, const kiln_sgemm_post *post) {
  return wide_run(micro, false, false, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc, apack, bpack, post, NULL, 1.0f);
}

void kiln_sgemm_post_base(float *C, int64_t ldc, int mr, int nr, const float *bias, bool clamp, float lo, float hi) {
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < nr; c++) {
      float v = C[r * ldc + c];
      if (bias) v = v + bias[r];
      if (clamp) {
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
      }
      C[r * ldc + c] = v;
    }
}

void kiln_sgemm_micro_post_base(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                int64_t ldc, int mr, int nr, const float *bias, bool clamp, float lo, float hi) {
  kiln_sgemm_micro_wide_base(kc, ap, bp, beta, C, ldc, mr, nr);
  kiln_sgemm_post_base(C, ldc, mr, nr, bias, clamp, lo, hi);
}

/* The direct conv twins' tile: A's element (r, k) at A[r * rs + k * ks]
 * (a packed strip: rs 1, ks WMR; W read in place: rs lda, ks 1). */
static void direct_tile_base(int64_t kc, const float *A, int64_t rs, int64_t ks, const float *x, const int64_t *off,
                             int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr, const float *bias,
                             bool clamp, float lo, float hi) {
  float acc[WMR][WNR];
  memset(acc, 0, sizeof acc);
  for (int64_t k = 0; k < kc; k++) {
    const float *bp = x + off[k];
    for (int r = 0; r < mr; r++)
      for (int c = 0; c < nr; c++) acc[r][c] = fmaf(A[r * rs + k * ks], c < 16 ? bp[c] : bp[xhi + c - 16], acc[r][c]);
  }
  store_tile(acc, beta, C, ldc, mr, nr);
  kiln_sgemm_post_base(C, ldc, mr, nr, bias, clamp, lo, hi);
}

void kiln_conv_direct_micro_base(int64_t kc, const float *restrict ap, const float *x, const int64_t *off,
                                 int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr, const float *bias,
                                 bool clamp, float lo, float hi) {
  direct_tile_base(kc, ap, 1, WMR, x, off, xhi, beta, C, ldc, mr, nr, bias, clamp, lo, hi);
}

void kiln_conv_direct_micro_a_base(int64_t kc, const float *A, int64_t lda, const float *x, const int64_t *off,
                                   int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr, const float *bias,
                                   bool clamp, float lo, float hi) {
  direct_tile_base(kc, A, lda, 1, x, off, xhi, beta, C, ldc, mr, nr, bias, clamp, lo, hi);
}

void kiln_conv_ct_micro_base(int64_t kc, const float *wt, const float *x, const int64_t *off, int64_t jump,
                             const float *pf, int64_t pfs, float *T, bool add) {
  enum { PX = KILN_CONV_CT_PX, HALF = KILN_CONV_CT_HALF };
  (void)pf, (void)pfs; /* hints only */
  float acc[PX][WNR];
  memset(acc, 0, sizeof acc);
  for (int64_t k = 0; k < kc; k++, wt += WNR) {
    const float *xk = x + off[k];
    for (int p = 0; p < PX; p++)
      for (int c = 0; c < WNR; c++) acc[p][c] = fmaf(wt[c], xk[p < HALF ? p : p + jump], acc[p][c]);
  }
  for (int p = 0; p < PX; p++)
    for (int c = 0; c < WNR; c++) store_beta(&T[p * WNR + c], acc[p][c], add ? 1.0f : 0.0f);
}

void kiln_conv_ct_store_base(const float *T, int64_t nc, int px, const float *bias, bool clamp, float lo, float hi,
                             float *y, int64_t ldy) {
  for (int64_t c = 0; c < nc; c++) { /* the bias and clamp of kiln_sgemm_post_base, stored transposed */
    float *yc = y + c * ldy, bc = bias ? bias[c] : 0.0f;
    for (int p = 0; p < px; p++) {
      float v = T[p * WNR + c];
      if (bias) v = v + bc;
      if (clamp) {
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
      }
      yc[p] = v;
    }
  }
}

kiln_conv_ct_store_fn kiln_conv_ct_store(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_conv_ct_micro() == kiln_conv_ct_micro_avx512) return kiln_conv_ct_store_avx512;
#endif
  return kiln_conv_ct_store_base;
}

int64_t kiln_conv_ct_pack_floats(int64_t Mg, int64_t Kc) { return (Mg + WNR - 1) / WNR * WNR * Kc; }

void kiln_conv_ct_pack(const float *W, int64_t Mg, int64_t Kc, float *dst) {
  int64_t blocks = (Mg + WNR - 1) / WNR, Mpad = blocks * WNR;
  for (int64_t p0 = 0, kc; p0 < Kc; p0 += kc) {
    kc = kiln_sgemm_wide_kc(Kc, p0);
    for (int64_t s = 0; s < blocks; s++) {
      float *d = dst + p0 * Mpad + s * kc * WNR;
      for (int64_t c = 0; c < WNR; c++) {
        int64_t m = s * WNR + c;
        for (int64_t k = 0; k < kc; k++) d[k * WNR + c] = m < Mg ? W[m * Kc + p0 + k] : 0.0f;
      }
    }
  }
}

kiln_conv_ct_fn kiln_conv_ct_micro(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_conv_direct_micro() == kiln_conv_direct_micro_avx512) return kiln_conv_ct_micro_avx512;
#endif
  return NULL;
}

kiln_conv_direct_a_fn kiln_conv_direct_micro_a(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_conv_direct_micro() == kiln_conv_direct_micro_avx512) return kiln_conv_direct_micro_a_avx512;
#endif
  return NULL;
}

void kiln_conv_direct_streams(kiln_conv_direct_fn *micro, kiln_conv_direct_a_fn *amicro) {
#ifdef KILN_LA_HAVE_AVX512
  if (*micro == kiln_conv_direct_micro_avx512) *micro = kiln_conv_direct_micro_stream_avx512;
  if (*amicro == kiln_conv_direct_micro_a_avx512) *amicro = kiln_conv_direct_micro_a_stream_avx512;
#else
  (void)micro, (void)amicro;
#endif
}

kiln_conv_direct_a_fn kiln_conv_direct_far(kiln_conv_direct_a_fn amicro) {
#ifdef KILN_LA_HAVE_AVX512
  if (amicro == kiln_conv_direct_micro_a_avx512) return kiln_conv_direct_micro_a_far_avx512;
#endif
  return amicro;
}

kiln_conv_direct_fn kiln_conv_direct_micro(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_sgemm_pack_reader() == kiln_sgemm_micro_wide_avx512) return kiln_conv_direct_micro_avx512;
#endif
  return NULL;
}

kiln_status kiln_sgemm_wide_pb(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *A,
                               int64_t lda, const float *apack, const float *bpack, float beta, float *C,
                               int64_t ldc) {
  return wide_run(micro, false, false, M, N, K, 1.0f, A, lda, NULL, N, beta, C, ldc, apack, bpack, NULL, NULL, 1.0f);
}

kiln_status kiln_sgemm_wide_pb_cb(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *A,
                                  int64_t lda, const float *apack, const float *bpack, float *C, int64_t ldc,
                                  const float *cbias, float scale) {
  return wide_run(micro, false, false, M, N, K, 1.0f, A, lda, NULL, N, 0.0f, C, ldc, apack, bpack, NULL, cbias,
                  scale);
}

kiln_status kiln_sgemm_wide_cb(kiln_sgemm_micro_fn micro, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                               const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                               const float *cbias, float scale) {
  return wide_run(micro, transA, transB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc, NULL, NULL, NULL, cbias, scale);
}

void kiln_sgemm_micro_cb_base(int64_t kc, const float *ap, const float *A, int64_t lda, const float *restrict bp,
                              float beta, float *C, int64_t ldc, int mr, int nr, const float *cbias, float scale) {
  if (A) kiln_sgemm_micro_a_base(kc, A, lda, bp, beta, C, ldc, mr, nr);
  else kiln_sgemm_micro_wide_base(kc, ap, bp, beta, C, ldc, mr, nr);
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < nr; c++) {
      float v = C[r * ldc + c];
      if (scale != 1.0f) v = v * scale;
      if (cbias) v = v + cbias[c];
      C[r * ldc + c] = v;
    }
}

int64_t kiln_sgemm_wide_pack_b_floats(int64_t K, int64_t N) { return (N + WNR - 1) / WNR * WNR * K; }

void kiln_sgemm_wide_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, float *dst) {
  int64_t npad = (N + WNR - 1) / WNR * WNR;
  for (int64_t p0 = 0, kc; p0 < K; p0 += kc) {
    kc = kiln_sgemm_wide_kc(K, p0);
    float *d = dst + p0 * npad;
    wpack_b(B, ldb, false, p0, kc, 0, N, d, NULL); /* zeroes the last strip's columns past N */
  }
}

int64_t kiln_sgemm_wide_pack_a_floats(int64_t M, int64_t K) { return (M + WMR - 1) / WMR * WMR * K; }

void kiln_sgemm_wide_pack_a(const float *A, int64_t lda, int64_t M, int64_t K, float *dst) {
  int64_t mpad = (M + WMR - 1) / WMR * WMR;
  const kiln_nn_prims *P = kiln_nn_prims_active();
  for (int64_t p0 = 0, kc; p0 < K; p0 += kc) {
    kc = kiln_sgemm_wide_kc(K, p0);
    wpack_a(A, lda, false, 0, M, p0, kc, 1.0f, dst + p0 * mpad, P);
  }
}

kiln_sgemm_micro_fn kiln_sgemm_pack_reader(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_la_isa() != KILN_VM_ISA_BASE && kiln_sgemm_active() == KILN_SGEMM_AVX512)
    return kiln_sgemm_micro_wide_avx512;
#endif
  return NULL;
}

/* The few-rows kernel over column blocks of 64 on the pool (each element
 * gets the same operations whichever block holds it), or, where K has a KC
 * slice for each thread at least and a slice's sums fit L1, over its
 * slices (rows_slices). */
typedef struct rows_job {
  kiln_sgemm_rows_fn rows;
  bool transA;
  int64_t M, N, K, bn;
  float alpha, beta;
  const float *A, *B;
  float *C;
  int64_t lda, ldb, ldc;
  float *acc;  /* M x bn per worker (by slices: M x N) */
  float *part; /* by slices: slice s's sums at part + s·M·N (M x N, rows N apart); else NULL */
  int64_t cb;  /* by slices: column blocks of bn a slice */
} rows_job;

static void rows_task(void *ctx, int64_t t, int worker) {
  const rows_job *r = ctx;
  int64_t j0 = t * r->bn, j1 = j0 + r->bn < r->N ? j0 + r->bn : r->N;
  r->rows(r->transA, r->M, j0, j1, r->K, r->alpha, r->A, r->lda, r->B, r->ldb, r->beta, r->C, r->ldc,
          r->acc + (size_t)worker * (size_t)(r->M * r->bn));
}

/* Task t: column block t % cb of KC slice s = t / cb, its sums alone — the
 * kernel on rows [p0, p0 + kc) of B (columns of A) with beta 0, one slice
 * for it: the fmas of that slice in k order from zero, stored. */
static void rows_slice_task(void *ctx, int64_t t, int worker) {
  const rows_job *r = ctx;
  int64_t s = t / r->cb, j0 = t % r->cb * r->bn, j1 = j0 + r->bn < r->N ? j0 + r->bn : r->N;
  int64_t p0 = s * KILN_SGEMM_WIDE_KC, kc = kiln_sgemm_wide_kc(r->K, p0); /* every slice but the last is KC long */
  if (j0 < j1)
    r->rows(r->transA, r->M, j0, j1, kc, r->alpha, r->A + (r->transA ? p0 * r->lda : p0), r->lda, r->B + p0 * r->ldb,
            r->ldb, 0.0f, r->part + (size_t)(s * r->M * r->N), r->N, r->acc + (size_t)worker * (size_t)(r->M * r->N));
}

/* The largest M x N of sums (bytes) split by KC slices (rows_run). */
#define KILN_SGEMM_ROWS_SLICE_BYTES (32 * 1024)

/* By KC slices, on the pool: each task reads whole rows of B (by columns,
 * each thread read part of every row of a B from memory: MobileNetV2's
 * 1280 x 1000 classifier took 0.198-0.203 ms at 2 threads, 0.160 on one,
 * by slices 0.150; GEMM_CONV.md "The classifier by slices"), then the
 * slices' sums are added in slice order as the kernel adds them (C = slice
 * 0's + beta·C, C untouched where beta is 0, then C = slice s's + 1·C:
 * store_beta): the same bits. A Gemm's bias comes as beta 1 over C filled
 * with it. KILN_E_NOMEM (nothing written, no message) where the sums'
 * memory is short. */
static kiln_status rows_slices(kiln_sgemm_rows_fn rows, bool transA, int64_t M, int64_t N, int64_t K, int64_t S,
                               float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta,
                               float *C, int64_t ldc, int threads) {
  /* fewer slices than threads: each slice in column blocks (of 64), enough for a task a thread (ResNet-18's
     512 x 1000 classifier, 2 slices, on 16 threads) */
  int64_t blocks = (N + 63) / 64, cb = S >= threads ? 1 : (threads + S - 1) / S;
  if (cb > blocks) cb = blocks;
  rows_job r = {rows, transA, M, N, K, (blocks + cb - 1) / cb * 64, alpha, 0.0f, A, B, C, lda, ldb, ldc, NULL, NULL, 1};
  r.cb = (N + r.bn - 1) / r.bn;
  r.acc = kiln_malloc((size_t)(M * N) * sizeof(float) * (size_t)threads);
  r.part = kiln_malloc((size_t)(S * M * N) * sizeof(float));
  if (!r.acc || !r.part) { /* the split by columns needs less */
    kiln_free(r.acc);
    kiln_free(r.part);
    return KILN_E_NOMEM;
  }
  kiln_pool_for(S * r.cb, threads, rows_slice_task, &r);
  for (int64_t i = 0; i < M; i++) {
    float *c = C + i * ldc;
    const float *p = r.part + i * N;
    for (int64_t j = 0; j < N; j++) store_beta(&c[j], p[j], beta);
    for (int64_t s = 1; s < S; s++) {
      p += M * N;
      for (int64_t j = 0; j < N; j++) store_beta(&c[j], p[j], 1.0f);
    }
  }
  kiln_free(r.acc);
  kiln_free(r.part);
  return KILN_OK;
}

static kiln_status rows_run(kiln_sgemm_rows_fn rows, bool transA, int64_t M, int64_t N, int64_t K, float alpha,
                            const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                            int64_t ldc) {
  int threads = kiln_pool_threads();
  /* a few rows cost B's reads (as wide_run: a strip's): ResNet-18's 1 x 512 x 1000 classifier, 2 MB of B, ran on
     one thread */
  double work = (double)(M < KILN_SGEMM_WIDE_MR ? KILN_SGEMM_WIDE_MR : M) * (double)N * (double)K;
  int64_t blocks = (N + 63) / 64;
  int64_t tasks = threads > 1 ? kiln_pool_tasks(work > 1e15 ? (int64_t)1e15 : (int64_t)work, 1 << 19, 4 * (int64_t)threads) : 1;
  int64_t S = kiln_sgemm_wide_slices(K);
  /* by slices (with more threads than slices, each in column blocks) where a slice's M x N sums fit L1 (the
     kernel's accumulators when wider than 64 columns): a wide vocabulary projection with few slices keeps the
     column split */
  if (tasks > 1 && S >= 2 && M * N * (int64_t)sizeof(float) <= KILN_SGEMM_ROWS_SLICE_BYTES &&
      rows_slices(rows, transA, M, N, K, S, alpha, A, lda, B, ldb, beta, C, ldc, threads) == KILN_OK)
    return KILN_OK;
  if (tasks > blocks) tasks = blocks;
  int workers = tasks > 1 ? threads : 1;
  rows_job r = {rows, transA, M, N, K, (blocks + tasks - 1) / tasks * 64, alpha, beta, A, B, C, lda, ldb, ldc, NULL,
                NULL, 0};
  if (!(r.acc = kiln_malloc((size_t)(M * r.bn) * sizeof(float) * (size_t)workers)))
    return kiln_fail(KILN_E_NOMEM, "out of memory for the GEMM's accumulators");
  kiln_pool_for((N + r.bn - 1) / r.bn, workers, rows_task, &r);
  kiln_free(r.acc);
  return KILN_OK;
}

/* B packs of at most this size are split by rows first (wide_run): L2's
 * size here, so each row block re-reads it from the caches. */
#define KILN_SGEMM_ROWS_FIRST_BYTES ((double)(2 << 20))
/* B not packed ahead is packed once for all blocks (wide_run) only up to this size: a weight over the prepack
   limit (prepack.h, 16 MiB) or with KILN_GEMM_PREPACK=0 is left unpacked to save its memory. */
#define KILN_SGEMM_B_ONCE_MAX_BYTES ((double)(16 << 20))
/* A not packed ahead is packed once for all column blocks (wide_run) up to this size: an A this small is read from
   L2 or L3 by every block, and a block packing its own copy packed as many bytes (GEMM_CONV.md "Sixteen threads"). */
#define KILN_SGEMM_A_ONCE_MAX_BYTES ((double)(2 << 20))
/* A B pack of this many bytes or more is read from L3 or memory on every call (wide_run: fewer blocks). */
#define KILN_SGEMM_BIG_B_BYTES ((double)(2 << 20))

static kiln_status wide_run(kiln_sgemm_micro_fn micro, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                            int64_t ldc, const float *apack, const float *bpack, const kiln_sgemm_post *post,
                            const float *cbias, float cscale) {
  if (M <= 0 || N <= 0) return KILN_OK;
  if (K <= 0) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0 ? 0.0f : beta * C[i * ldc + j];
    return KILN_OK;
  }
  bool cpost = cbias || cscale != 1.0f;
  if (!apack && !bpack && !post && !cpost && !transB && M <= KILN_SGEMM_ROWS_MAX) {
    kiln_sgemm_rows_fn rows = micro == kiln_sgemm_micro_wide_base ? kiln_sgemm_rows_base : NULL;
#ifdef KILN_LA_HAVE_AVX512
    if (micro == kiln_sgemm_micro_wide_avx512) rows = kiln_sgemm_rows_avx512;
#endif
    if (rows) return rows_run(rows, transA, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  wide_job w = {micro, transA, transB, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc, 1, 1, M, N, NULL, NULL,
                kiln_nn_prims_active(), apack, (M + WMR - 1) / WMR * WMR, bpack, (N + WNR - 1) / WNR * WNR, post,
                kiln_sgemm_micro_post_base, NULL, cbias, cscale, cpost, kiln_sgemm_micro_cb_base, NULL, NULL};
  if (cpost && micro != kiln_sgemm_micro_wide_base) {
    w.micro_cb = NULL;
#ifdef KILN_LA_HAVE_AVX512
    if (micro == kiln_sgemm_micro_wide_avx512) w.micro_cb = kiln_sgemm_micro_cb_avx512;
#endif
    if (!w.micro_cb) return kiln_fail(KILN_E_INTERNAL, "wide GEMM: no scale/bias-row micro-kernel for this micro-kernel");
  }
  /* A row-major, alpha 1, not packed ahead, at most 2 MiB (activations,
     not weights streamed from memory), at most 512 columns of C (a pack
     read by at most 16 column strips: wider, the pack is cheap beside the
     GEMM and direct reads measured 0-2 % slower), rows not a multiple of
     2 KiB apart (rows 2 KiB or more apart share L1 sets: no gain): the
     micro-kernel reads A's rows in place (the pack would be a copy of the
     same values) */
  bool direct_a = direct_a_on && !transA && alpha == 1.0f && !apack && !post && lda % 512 != 0 &&
                  N <= KILN_SGEMM_DIRECT_A_MAX_N && (double)M * (double)lda * sizeof(float) <= KILN_SGEMM_DIRECT_A_BYTES;
  if (direct_a && micro == kiln_sgemm_micro_wide_base) w.micro_a = kiln_sgemm_micro_a_base;
#ifdef KILN_LA_HAVE_AVX512
  if (micro == kiln_sgemm_micro_wide_avx512) w.micro_post = kiln_sgemm_micro_post_avx512;
  if (direct_a && micro == kiln_sgemm_micro_wide_avx512) w.micro_a = kiln_sgemm_micro_a_avx512;
#endif
  /* the split: about 4 blocks per thread (the machine may be shared) of
     at least ~2 MFLOP each, a whole number of blocks per thread (3 blocks
     on 2 threads took as long as 4), columns first (each block packs its
     own B panel and re-packs A) unless B is packed ahead and small (below);
     any split gives the same bits */
  int threads = kiln_pool_threads();
  /* no int64 overflow on huge shapes; a few rows cost a strip's B reads (a classifier's M = 1 reads all of B) */
  double work = (double)(M < WMR ? WMR : M) * (double)N * (double)K;
  int64_t tasks =
      threads > 1 ? kiln_pool_tasks(work > 1e15 ? (int64_t)1e15 : (int64_t)work, 1 << 20, 4 * (int64_t)threads) : 1;
  /* B not packed ahead, on several threads, with rows for several row blocks: each row block would pack its
     columns of B again (GEMM 1024^3 at 2 threads: B packed 4 times); B is packed once, on the pool, and read as a
     pack made ahead (the same values: wpack_b). GEMM 1024^3 at 2 threads 86-90 -> 93-95 % of OpenBLAS
     (GEMM_CONV.md "B packed once on the pool"). Not inside a pool task (a conv's tile GEMMs: the pack would be
     made on one thread, in every task) nor over KILN_SGEMM_B_ONCE_MAX_BYTES; on out of memory, per block */
  float *bown = NULL;
  int64_t bnpad = (N + WNR - 1) / WNR * WNR;
  if (!bpack && tasks > 1 && M >= 4 * WMR && (double)K * (double)N >= (double)(1 << 18) &&
      (double)K * (double)bnpad * sizeof(float) <= KILN_SGEMM_B_ONCE_MAX_BYTES && kiln_pool_free()) {
    if ((bown = kiln_malloc((size_t)(K * bnpad + 16) * sizeof(float)))) {
      float *dst = (float *)(((uintptr_t)bown + 63) & ~(uintptr_t)63);
      once_job o = {false, B, ldb, K, N, bnpad, (N + BONCE_NC - 1) / BONCE_NC, BONCE_NC, transB, 1.0f, w.P, dst};
      kiln_pool_for(kiln_sgemm_wide_slices(K) * o.nch, threads, once_task, &o);
      bpack = dst, w.bpack = dst, w.npad = bnpad;
    }
  }
#ifdef KILN_LA_HAVE_AVX512
  /* B packed (ahead or just now), A packed: the kernels that stream the next strip of B into L2 */
  if (bpack && !w.micro_a && !post && micro == kiln_sgemm_micro_wide_avx512)
    w.micro_pf = kiln_sgemm_micro_wide_pf_avx512, w.micro_cb_pf = kiln_sgemm_micro_cb_pf_avx512;
#endif
  /* B packed ahead and big (weights read from L3 or memory: the mlp's 2, 8 and 16 MiB): 2 blocks a thread, not 4,
     on fewer than 8 threads. Every block packs A again (or, rows first, reads B again) and starts each KC slice's
     strips cold; at 2 threads the mlp's fc1 and fc2 took 0.93, its fc3 0.80 of their time (GEMM_CONV.md "Big packed
     B in fewer blocks, B packed once"), and still ~0.98 with A packed once. On 16 threads (a 16-core Xeon, A packed
     once) 4 blocks a thread balance better: the mlp 1.53-1.61 -> 1.39-1.50 ms (GEMM_CONV.md "Sixteen threads") */
  if (bpack && (double)K * (double)bnpad * sizeof(float) >= KILN_SGEMM_BIG_B_BYTES && threads < 8 &&
      tasks > 2 * (int64_t)threads)
    tasks = 2 * (int64_t)threads;
  if (tasks > 1) tasks = (tasks + threads - 1) / threads * threads; /* whole rounds of the threads */
  int64_t nstrips = (N + WNR - 1) / WNR, mstrips = (M + WMR - 1) / WMR;
  if (bpack && !w.micro_a && tasks >= 4 &&
      (double)K * (double)w.npad * sizeof(float) <= KILN_SGEMM_ROWS_FIRST_BYTES) {
    /* B packed ahead and small, A packed per block: rows first, at least
       2 column blocks. A column block packs all of A's rows again, a row
       block only re-reads the B pack from the caches (at 2 threads: the
       bench transformer's FFN2, 128 x 256 x 1024, 190 -> 152 us; the mlp's
       fc3, 64 x 256 x 2048, 239 -> 191 us) */
    w.tm = tasks / 2 < mstrips ? tasks / 2 : mstrips;
    int64_t per = (mstrips + w.tm - 1) / w.tm; /* strips per row block */
    w.tm = (mstrips + per - 1) / per;          /* the row blocks they make */
    w.tn = (tasks + w.tm - 1) / w.tm;
    while ((w.tm * w.tn) % threads) w.tn++; /* whole rounds of the threads */
    if (w.tn > nstrips) w.tn = nstrips;
  } else {
    /* the split that packs least: a column block packs its rows of A, a
       row block its columns of B, so tm x tn blocks pack about tn·M·K +
       tm·N·K floats; on a tie the one with more row blocks. GEMM 1024^3 at
       2 threads (8 tasks) on a Xeon where 1 thread is at 100 % of
       OpenBLAS: 1 x 8 (all of A packed eight times) 78-82 %, 2 x 4 86-92 %,
       4 x 2 91-93 % (chrt -f 1, alternated) */
    w.tn = tasks < nstrips ? tasks : nstrips;
    w.tm = (tasks + w.tn - 1) / w.tn;
    if (w.tm > mstrips) w.tm = mstrips;
    double best = (double)w.tn * (double)M + (double)w.tm * (double)N;
    for (int64_t tm = 2; tm <= tasks && tm <= mstrips; tm++) {
      int64_t tn = (tasks + tm - 1) / tm;
      if (tn > nstrips) tn = nstrips;
      if ((tm * tn) % threads) continue; /* whole rounds of the threads */
      double cost = (double)tn * (double)M + (double)tm * (double)N;
      if (cost <= best) best = cost, w.tm = tm, w.tn = tn;
    }
  }
  w.bn = (nstrips + w.tn - 1) / w.tn * WNR;
  w.bm = (mstrips + w.tm - 1) / w.tm * WMR;
  w.tn = (N + w.bn - 1) / w.bn;
  w.tm = (M + w.bm - 1) / w.bm;
  /* A not packed ahead, small, and packed again by each of tn column blocks (the mlp's fc2 at 16 threads: 32
     blocks of 64 columns, each packing the whole 64 x 2048 A, as many bytes as the B pack they read): packed once,
     on the pool, and read as a pack made ahead (the same values). Not inside a pool task (as B above) */
  float *aown = NULL;
  if (!apack && !w.micro_a && w.tn > 1 && (double)w.mpad * (double)K * sizeof(float) <= KILN_SGEMM_A_ONCE_MAX_BYTES &&
      kiln_pool_free() && (aown = kiln_malloc((size_t)(w.mpad * K + 16) * sizeof(float)))) {
    float *dst = (float *)(((uintptr_t)aown + 63) & ~(uintptr_t)63);
    once_job o = {true, A, lda, K, M, w.mpad, (M + AONCE_MC - 1) / AONCE_MC, AONCE_MC, transA, alpha, w.P, dst};
    kiln_pool_for(kiln_sgemm_wide_slices(K) * o.nch, threads, once_task, &o);
    w.apack = dst;
  }
  int workers = w.tm * w.tn > 1 ? threads : 1;
  int64_t kcap = K < KILN_SGEMM_WIDE_KC_LAST ? K : KILN_SGEMM_WIDE_KC_LAST, ncap = w.bn < WNC ? w.bn : WNC, mcap = w.bm < WMC ? w.bm : WMC;
  size_t abytes = (size_t)((mcap + WMR) * kcap) * sizeof(float), bbytes = (size_t)((ncap + WNR) * kcap) * sizeof(float);
  float *ptrs[2 * 1024];
  char *mem = kiln_malloc((abytes + bbytes + 128) * (size_t)workers);
  if (!mem) {
    kiln_free(aown);
    kiln_free(bown);
    return kiln_fail(KILN_E_NOMEM, "out of memory for the GEMM packing buffers");
  }
  for (int t = 0; t < workers; t++) {
    char *base = mem + (abytes + bbytes + 128) * (size_t)t;
    base += (64 - ((uintptr_t)base & 63)) % 64;
    ptrs[t] = (float *)(void *)base;
    ptrs[1024 + t] = (float *)(void *)(base + abytes + ((64 - (abytes & 63)) % 64));
  }
  w.ap = ptrs;
  w.bp = ptrs + 1024;
  kiln_pool_for(w.tm * w.tn, workers, wide_task, &w);
  kiln_free(mem);
  kiln_free(aown);
  kiln_free(bown);
  return KILN_OK;
}

/* ---- depthwise rows: the scalar twin ---- */

void kiln_dw_rows_base(float *y, int64_t ys, const float *const *src, int64_t ss, int64_t rows, int64_t n,
                       const float *w, int nk, float bias, float lo, float hi) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t i = 0; i < n; i++) {
      float acc = bias;
      for (int j = 0; j < nk; j++) acc = fmaf(w[j], src[j][r * ss + i], acc);
      acc = acc < lo ? lo : acc;
      y[r * ys + i] = acc > hi ? hi : acc;
    }
}

void kiln_la_gather_base(float *dst, const float *src, int64_t n, int64_t stride) {
  for (int64_t i = 0; i < n; i++) dst[i] = src[i * stride];
}

void kiln_la_split2_base(float *even, float *odd, const float *src, int64_t n) {
  for (int64_t i = 0; i + 1 < n; i += 2) {
    even[i / 2] = src[i];
    odd[i / 2] = src[i + 1];
  }
  if (n % 2) even[n / 2] = src[n - 1];
}

void kiln_la_copy_rows_base(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                            int64_t n) {
  for (int64_t r = 0; r < rows; r++) memcpy(dst + r * dst_stride, src + r * src_stride, (size_t)n * sizeof *dst);
}

kiln_la_copy_rows_fn kiln_la_copy_rows(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && kiln_la_cpu_has_avx512()) return kiln_la_copy_rows_avx512;
#endif
  return kiln_la_copy_rows_base;
}

kiln_la_split2_fn kiln_la_split2(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && kiln_la_cpu_has_avx512()) return kiln_la_split2_avx512;
#endif
  return NULL;
}

kiln_la_gather_fn kiln_la_gather(void) {
#ifdef KILN_LA_HAVE_AVX2
  if (kiln_la_isa() == KILN_VM_ISA_AVX2) return kiln_la_gather_avx2;
#endif
  return kiln_la_gather_base;
}

void kiln_dw_plane_base(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                        const float *w, int nk, float bias, float lo, float hi) {
  int64_t nv = (n + 15) / 16;
  for (int64_t p = 0; p < n; p++) {
    float acc = bias;
    for (int j = 0; j < nk; j++) {
      float v = masks[j * nv + p / 16] >> (p % 16) & 1 ? x[p + toff[j]] : 0.0f;
      acc = fmaf(w[j], v, acc);
    }
    acc = acc < lo ? lo : acc;
    y[p] = acc > hi ? hi : acc;
  }
}

void kiln_dw_plane2_base(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                         const float *w, int nk, float b0, float b1, float lo, float hi) {
  kiln_dw_plane_base(y, x, n, toff, masks, w, nk, b0, lo, hi);
  kiln_dw_plane_base(y + n, x + n, n, toff, masks, w + nk, nk, b1, lo, hi);
}

kiln_dw_plane2_fn kiln_dw_plane2(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_dw_plane() == kiln_dw_plane_avx512) return kiln_dw_plane2_avx512;
#endif
  return NULL;
}

kiln_dw_plane_fn kiln_dw_plane(void) {
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && kiln_la_cpu_has_avx512()) return kiln_dw_plane_avx512;
#endif
  return NULL;
}

kiln_dw_rows_fn kiln_dw_rows(bool *across) {
  *across = false;
#ifdef KILN_LA_HAVE_AVX512
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && kiln_la_cpu_has_avx512()) {
    *across = true;
    return kiln_dw_rows_avx512;
  }
#endif
#ifdef KILN_LA_HAVE_AVX2
  if (kiln_la_isa() == KILN_VM_ISA_AVX2) return kiln_dw_rows_avx2_fma;
#endif
  return kiln_dw_rows_base;
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
