/* tests/unit_cpu_pool: the cpu backend's thread pool (cpu_fallback/pool)
 * and what runs on it.
 *
 * - the pool itself: with no reference held every loop runs on the caller
 *   in order; held, every task runs exactly once, worker ids stay below the
 *   caller's bound, a nested loop and a loop from a second thread while the
 *   pool is busy run on their callers, acquire/release cycles join cleanly
 *   (ASan/TSan);
 * - kiln's wide SGEMM: the AVX-512 micro-kernel against its scalar twin bit
 *   for bit (only where cpuid + XGETBV say AVX-512F is usable), the wide
 *   GEMM with either micro-kernel bit-equal, split over the pool or not, and
 *   close to the portable blocked GEMM;
 * - whole graphs through the plan executor (fused tile chains, Conv general /
 *   pointwise / depthwise with epilogues, MatMul, Gemm, pooling, softmax rows
 *   and columns, norms, reductions): a run on the pool against a run with
 *   every loop on one thread (the plan run inside a task of a busy pool,
 *   where loops run serially) — bit-identical — and against the reference.
 *
 * KILN_NUM_THREADS is 2 unless the environment sets it (ctest also runs
 * this with KILN_NUM_THREADS=1, where both runs are serial). */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_fallback/plan.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/sgemm.h"
#include "graphbuild.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "reference/exec.h"

static int passed, failed;
#include "tests/check.h"

/* ---- the pool ---- */

enum { NT = 1000 };
typedef struct count_ctx {
  atomic_int hits[NT];
  atomic_int bad_worker, nested_done;
  int max_workers;
  bool nest;
} count_ctx;

static void nested_task(void *arg, int64_t t, int worker) {
  count_ctx *c = arg;
  (void)t;
  if (worker != 0) atomic_fetch_add(&c->bad_worker, 1); /* nested: on its caller */
  atomic_fetch_add(&c->nested_done, 1);
}

static void count_task(void *arg, int64_t t, int worker) {
  count_ctx *c = arg;
  atomic_fetch_add(&c->hits[t], 1);
  if (worker < 0 || worker >= c->max_workers) atomic_fetch_add(&c->bad_worker, 1);
  if (c->nest && t % 100 == 0) {
    count_ctx *n = c; /* reuse the counters of the outer loop for the nested one */
    kiln_pool_for(5, 2, nested_task, n);
  }
}

static bool all_once(count_ctx *c, int n) {
  for (int i = 0; i < n; i++)
    if (atomic_load(&c->hits[i]) != 1) return false;
  return true;
}

/* kiln_pool_for_shares: who ran what, in the order claimed */
typedef struct share_ctx {
  atomic_int hits[NT], n_log;
  int log_task[NT], log_worker[NT];
  int slow_below; /* tasks below this take ~20 us (the caller's share: the others steal from it) */
} share_ctx;

static void share_task(void *arg, int64_t t, int worker) {
  share_ctx *c = arg;
  atomic_fetch_add(&c->hits[t], 1);
  int k = atomic_fetch_add(&c->n_log, 1);
  c->log_task[k] = (int)t, c->log_worker[k] = worker;
  if (t < c->slow_below) {
    struct timespec d = {0, 20000};
    nanosleep(&d, NULL);
  }
}

/* Every task once, on a thread below w; each thread's tasks of its own
 * share in increasing order, and of every other share in decreasing order
 * (taken from its back). */
static bool shares_ok(share_ctx *c, int n, int w) {
  for (int i = 0; i < n; i++)
    if (atomic_load(&c->hits[i]) != 1) return false;
  if (atomic_load(&c->n_log) != n) return false;
  for (int id = 0; id < w; id++)
    for (int sh = 0; sh < w; sh++) {
      int64_t lo = (int64_t)n * sh / w, hi = (int64_t)n * (sh + 1) / w, last = -1;
      for (int k = 0; k < n; k++) {
        int t = c->log_task[k];
        if (c->log_worker[k] < 0 || c->log_worker[k] >= w) return false;
        if (c->log_worker[k] != id || t < lo || t >= hi) continue;
        if (last >= 0 && (sh == id ? t < last : t > last)) return false;
        last = t;
      }
    }
  return true;
}

static void *second_caller(void *arg) {
  count_ctx *c = arg;
  kiln_pool_for(NT, c->max_workers, count_task, c);
  return NULL;
}

static void test_pool(void) {
  static count_ctx c;
  memset(&c, 0, sizeof c);
  c.max_workers = 4;
  CHECK(kiln_pool_threads() == 1, "no reference held: 1 thread (got %d)", kiln_pool_threads());
  kiln_pool_for(NT, 4, count_task, &c);
  CHECK(all_once(&c, NT) && !atomic_load(&c.bad_worker), "without a pool: every task once, on the caller");

  CHECK(kiln_pool_acquire() == 0, "acquire");
  int th = kiln_pool_threads();
  CHECK(th == kiln_cpu_num_threads(), "the pool has KILN_NUM_THREADS threads (%d, %d)", th, kiln_cpu_num_threads());
  for (int max = 1; max <= 3; max++) {
    memset(&c, 0, sizeof c);
    c.max_workers = max;
    kiln_pool_for(NT, max, count_task, &c);
    CHECK(all_once(&c, NT) && !atomic_load(&c.bad_worker), "held, max_workers %d: every task once, ids below it", max);
  }
  memset(&c, 0, sizeof c);
  c.max_workers = th;
  c.nest = true;
  kiln_pool_for(NT, th, count_task, &c);
  CHECK(all_once(&c, NT) && !atomic_load(&c.bad_worker) && atomic_load(&c.nested_done) == 50,
        "nested loops run on their callers (%d nested tasks)", atomic_load(&c.nested_done));

  /* shares: counts around the thread count, with the caller's share slow (the others take from its back) */
  static share_ctx sc;
  int share_bad = 0, share_cases = 0, stolen = 0;
  for (int max = 1; max <= 3; max++)
    for (int n = 1; n <= NT; n = n < 9 ? n + 1 : n < 225 ? n * 5 : n < NT ? NT : NT + 1) {
      for (int slow = 0; slow < 2; slow++) {
        memset(&sc, 0, sizeof sc);
        sc.slow_below = slow ? n / (max < th ? max : th) : 0;
        kiln_pool_for_shares(n, max, share_task, &sc);
        share_bad += !shares_ok(&sc, n, max < th ? max : th);
        share_cases++;
        for (int k = 0; k < n; k++) { /* a task of share 0 run by another thread: taken from its back */
          int w = max < th ? max : th;
          if (w > 1 && sc.log_worker[k] != 0 && (int64_t)sc.log_task[k] < (int64_t)n / w) stolen++;
        }
      }
    }
  CHECK(!share_bad, "kiln_pool_for_shares: every task once, each share from its front by its thread and from its "
                    "back by the others (%d of %d loops wrong)",
        share_bad, share_cases);
  CHECK(th < 2 || stolen > 0, "kiln_pool_for_shares: with the caller's share slow, another thread took some of it "
                              "(%d tasks over the loops)",
        stolen);

  /* two callers at once: one gets the pool, the other runs its loop itself */
  static count_ctx c2;
  memset(&c, 0, sizeof c);
  memset(&c2, 0, sizeof c2);
  c.max_workers = c2.max_workers = th;
  pthread_t t;
  CHECK(!pthread_create(&t, NULL, second_caller, &c2), "second thread");
  kiln_pool_for(NT, th, count_task, &c);
  pthread_join(t, NULL);
  CHECK(all_once(&c, NT) && all_once(&c2, NT) && !atomic_load(&c.bad_worker) && !atomic_load(&c2.bad_worker),
        "two callers at once: both loops complete");

  /* nested acquire/release, then the last release joins; a new pool after */
  CHECK(kiln_pool_acquire() == 0, "second reference");
  kiln_pool_release();
  CHECK(kiln_pool_threads() == th, "still held after one of two releases");
  kiln_pool_release();
  CHECK(kiln_pool_threads() == 1, "the last release drops the pool");
  for (int i = 0; i < 20; i++) {
    if (kiln_pool_acquire()) break;
    memset(&c, 0, sizeof c);
    c.max_workers = th;
    kiln_pool_for(50, th, count_task, &c);
    kiln_pool_release();
    if (!all_once(&c, 50)) break;
    if (i == 19) CHECK(1, "20 start / loop / join cycles");
  }
  CHECK(kiln_pool_tasks(100, 10, 4) == 4 && kiln_pool_tasks(5, 10, 4) == 1 && kiln_pool_tasks(30, 10, 8) == 3,
        "kiln_pool_tasks");
}

/* ---- the wide SGEMM ---- */

static float *rand_buf(size_t n) {
  float *p = malloc(n * sizeof *p + 1);
  for (size_t i = 0; i < n; i++) p[i] = (float)rnd();
  return p;
}

static void test_micro(void) {
  if (!kiln_la_cpu_has_avx512()) {
    printf("unit_cpu_pool: AVX-512F not usable on this CPU: micro-kernel twin comparison skipped\n");
    return;
  }
  int bad = 0, cases = 0;
  static const int64_t kcs[] = {1, 2, 7, 64, 257};
  static const float betas[] = {0.0f, 1.0f, -0.75f};
  for (size_t ki = 0; ki < sizeof kcs / sizeof *kcs; ki++)
    for (int mr = 1; mr <= KILN_SGEMM_WIDE_MR; mr++) /* every row count: the kernel keeps 4, 8 or 12 rows */
      for (int nr = 1; nr <= KILN_SGEMM_WIDE_NR; nr++)
        for (int bi = 0; bi < 3; bi++) {
          int64_t kc = kcs[ki], ldc = 40;
          float *ap = rand_buf((size_t)(kc * KILN_SGEMM_WIDE_MR)), *bp = rand_buf((size_t)(kc * KILN_SGEMM_WIDE_NR));
          float *c1 = rand_buf((size_t)(KILN_SGEMM_WIDE_MR * ldc));
          float *c2 = malloc((size_t)(KILN_SGEMM_WIDE_MR * ldc) * 4);
          memcpy(c2, c1, (size_t)(KILN_SGEMM_WIDE_MR * ldc) * 4);
          kiln_sgemm_micro_wide_base(kc, ap, bp, betas[bi], c1, ldc, mr, nr);
          kiln_sgemm_micro_wide_avx512(kc, ap, bp, betas[bi], c2, ldc, mr, nr);
          if (memcmp(c1, c2, (size_t)(KILN_SGEMM_WIDE_MR * ldc) * 4)) bad++;
          cases++;
          free(ap);
          free(bp);
          free(c1);
          free(c2);
        }
  CHECK(!bad, "AVX-512 micro-kernel = scalar twin bit for bit, tails and beta included (%d of %d differ)", bad, cases);
}

/* The micro-kernel reading A in place (sgemm.h kiln_sgemm_micro_a_fn):
 * AVX-512 = its twin = the packed twin on the same rows, bit for bit, every
 * row and column count; then the wide GEMM with A read in place (the
 * default where it applies) = the same GEMM packing A, whole C compared
 * (the columns between N and ldc untouched). */
static void test_direct_a(void) {
  bool avx512 = kiln_la_cpu_has_avx512();
  int bad = 0, cases = 0;
  static const int64_t kcs[] = {1, 7, 257};
  for (size_t ki = 0; ki < sizeof kcs / sizeof *kcs; ki++)
    for (int mr = 1; mr <= KILN_SGEMM_WIDE_MR; mr++)
      for (int nr = 1; nr <= KILN_SGEMM_WIDE_NR; nr += 3)
        for (int bi = 0; bi < 2; bi++) {
          int64_t kc = kcs[ki], lda = kc + 5, ldc = 40;
          size_t cn = (size_t)(KILN_SGEMM_WIDE_MR * ldc);
          float *A = rand_buf((size_t)(mr * lda)), *bp = rand_buf((size_t)(kc * KILN_SGEMM_WIDE_NR));
          float *ap = calloc((size_t)(kc * KILN_SGEMM_WIDE_MR), sizeof *ap); /* the strip a pack holds */
          for (int64_t k = 0; k < kc; k++)
            for (int r = 0; r < mr; r++) ap[k * KILN_SGEMM_WIDE_MR + r] = A[r * lda + k];
          float *c[3];
          c[0] = rand_buf(cn);
          for (int v = 1; v < 3; v++) c[v] = malloc(cn * sizeof(float)), memcpy(c[v], c[0], cn * sizeof(float));
          float beta = bi ? -0.75f : 0.0f;
          kiln_sgemm_micro_wide_base(kc, ap, bp, beta, c[0], ldc, mr, nr);
          kiln_sgemm_micro_a_base(kc, A, lda, bp, beta, c[1], ldc, mr, nr);
          if (avx512) kiln_sgemm_micro_a_avx512(kc, A, lda, bp, beta, c[2], ldc, mr, nr);
          bad += memcmp(c[0], c[1], cn * sizeof(float)) != 0 || (avx512 && memcmp(c[0], c[2], cn * sizeof(float)));
          cases++;
          for (int v = 0; v < 3; v++) free(c[v]);
          free(A), free(bp), free(ap);
        }
  CHECK(!bad, "micro-kernel reading A in place (twin%s) = the packed twin bit for bit (%d of %d differ)",
        avx512 ? " and AVX-512" : "", bad, cases);
  static const int64_t shapes[][3] = {{5, 33, 7}, {13, 64, 300}, {37, 256, 600}, {128, 129, 64}, {128, 512, 257}};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
    int64_t M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], lda = K + 3, ldc = N + 2;
    size_t cn = (size_t)(M * ldc);
    float *A = rand_buf((size_t)(M * lda)), *B = rand_buf((size_t)(K * N)), *C0 = rand_buf(cn), *C[4];
    float *bpk = malloc((size_t)kiln_sgemm_wide_pack_b_floats(K, N) * sizeof(float) + 1);
    kiln_sgemm_wide_pack_b(B, N, K, N, bpk);
    kiln_status s = KILN_OK;
    for (int v = 0; v < 4; v++) { /* packed twin, direct twin, direct AVX-512, direct AVX-512 from a B pack */
      C[v] = malloc(cn * sizeof(float));
      memcpy(C[v], C0, cn * sizeof(float));
      if (v >= 2 && !avx512) continue;
      kiln_sgemm_direct_a_enable(v > 0);
      kiln_sgemm_micro_fn micro = v >= 2 ? kiln_sgemm_pack_reader() : kiln_sgemm_micro_wide_base;
      if (v == 3) s |= kiln_sgemm_wide_pb(micro, M, N, K, A, lda, NULL, bpk, -0.5f, C[v], ldc);
      else s |= kiln_sgemm_wide(micro, false, false, M, N, K, 1.0f, A, lda, B, N, -0.5f, C[v], ldc);
    }
    kiln_sgemm_direct_a_enable(true);
    CHECK(!s, "direct A %zu: runs", i);
    for (int v = 1; v < (avx512 ? 4 : 2); v++)
      CHECK(!memcmp(C[0], C[v], cn * sizeof(float)), "direct A %lldx%lldx%lld: version %d = packing A, bit for bit",
            (long long)M, (long long)N, (long long)K, v);
    for (int v = 0; v < 4; v++) free(C[v]);
    free(A), free(B), free(C0), free(bpk);
  }
}

/* The KC slicing every wide-GEMM path shares (sgemm.h): slices tile [0, K)
 * in order, 256 rows each but a last one of at most 320 (K 257..320 is one
 * slice, K 288 no longer 256 + 32), and kiln_sgemm_wide_slice finds the
 * slice holding any row. */
static void test_slices(void) {
  int bad = 0;
  for (int64_t K = 1; K <= 2100; K++) {
    int64_t p0 = 0, n = 0;
    while (p0 < K) {
      int64_t kc = kiln_sgemm_wide_kc(K, p0);
      bool last = p0 + kc == K;
      if (kc <= 0 || p0 + kc > K || (!last && kc != KILN_SGEMM_WIDE_KC) || kc > KILN_SGEMM_WIDE_KC_LAST) bad++;
      if (last && K - p0 > KILN_SGEMM_WIDE_KC && kc != K - p0) bad++;
      for (int64_t r = p0; r < p0 + kc; r++) bad += kiln_sgemm_wide_slice(K, r) != p0;
      p0 += kc;
      n++;
    }
    if (n != (K <= KILN_SGEMM_WIDE_KC_LAST ? 1 : 1 + (K - KILN_SGEMM_WIDE_KC_LAST + KILN_SGEMM_WIDE_KC - 1) / KILN_SGEMM_WIDE_KC))
      bad++;
  }
  CHECK(!bad && kiln_sgemm_wide_kc(288, 0) == 288 && kiln_sgemm_wide_kc(576, 256) == 320 &&
            kiln_sgemm_wide_kc(600, 512) == 88,
        "KC slices: 256 each, the last up to 320, rows found in their slice (%d faults)", bad);
}

/* The micro-kernel with the post-op on one tile: AVX-512 (bias and clamp in
 * the accumulators) = twin (store, then kiln_sgemm_post_base) bit for bit,
 * NaN and -0 in C and the bias (beta 1 and -0.75 carry them in), every row
 * and column tail, with and without bias and clamp. */
static void test_post(void) {
  if (!kiln_la_cpu_has_avx512()) return;
  int bad = 0, cases = 0;
  static const int64_t kcs[] = {1, 5, 33};
  static const float betas[] = {0.0f, 1.0f, -0.75f};
  float bias[KILN_SGEMM_WIDE_MR];
  for (int r = 0; r < KILN_SGEMM_WIDE_MR; r++) bias[r] = r == 3 ? -0.0f : r == 7 ? NAN : (float)(rnd() - 0.5);
  for (size_t ki = 0; ki < sizeof kcs / sizeof *kcs; ki++)
    for (int bi = 0; bi < 3; bi++)
      for (int mr = 1; mr <= KILN_SGEMM_WIDE_MR; mr++)
        for (int nr = 1; nr <= KILN_SGEMM_WIDE_NR; nr++)
          for (int v = 0; v < 4; v++) {
            enum { LD = 40 };
            int64_t kc = kcs[ki];
            float c1[KILN_SGEMM_WIDE_MR * LD], c2[KILN_SGEMM_WIDE_MR * LD];
            float *ap = rand_buf((size_t)(kc * KILN_SGEMM_WIDE_MR)), *bp = rand_buf((size_t)(kc * KILN_SGEMM_WIDE_NR));
            for (int64_t q = 0; q < kc * KILN_SGEMM_WIDE_MR; q++) ap[q] = q % 9 == 2 ? -0.0f : ap[q] - 0.5f;
            for (int q = 0; q < KILN_SGEMM_WIDE_MR * LD; q++)
              c1[q] = q % 13 == 4 ? NAN : q % 11 == 2 ? -0.0f : q % 7 == 1 ? 0.0f : (float)(rnd() * 2 - 1);
            memcpy(c2, c1, sizeof c1);
            kiln_sgemm_micro_post_base(kc, ap, bp, betas[bi], c1, LD, mr, nr, v & 1 ? bias : NULL, v & 2, 0.0f, 0.5f);
            kiln_sgemm_micro_post_avx512(kc, ap, bp, betas[bi], c2, LD, mr, nr, v & 1 ? bias : NULL, v & 2, 0.0f,
                                         0.5f);
            bad += memcmp(c1, c2, sizeof c1) != 0;
            cases++;
            free(ap);
            free(bp);
          }
  CHECK(!bad, "micro-kernel with the post-op: AVX-512 = scalar twin bit for bit (%d of %d cases differ)", bad, cases);
}

typedef struct gemm_case {
  bool ta, tb;
  int64_t M, N, K;
  float alpha, beta;
} gemm_case;

static void test_wide(void) {
  static const gemm_case cases[] = {
      {false, false, 1, 1, 1, 1.0f, 0.0f},     {false, false, 13, 33, 5, 1.0f, 0.0f},
      {true, false, 37, 70, 300, 0.5f, 1.0f},  {false, true, 200, 45, 513, 1.0f, -0.5f},
      {true, true, 97, 130, 260, 2.0f, 0.25f}, {false, false, 250, 600, 64, 1.0f, 0.0f},
      {false, false, 4, 3000, 20, 1.0f, 1.0f},  {false, false, 30, 2100, 600, 1.0f, -1.0f},
      /* B packed once on the pool for all blocks (M >= 48, K·N >= 2^18): one KC slice of 300 over 5 column
         chunks of 512, slices 256 + 256 + 88 and 256 + 320, transposed A and B, A read in place (alpha 1, N <=
         512), and (alpha 1, not transposed) the post-op variants on the pool */
      {false, false, 60, 2100, 300, 1.0f, 0.5f}, {false, true, 60, 530, 600, 0.5f, 0.0f},
      {true, false, 64, 600, 576, 2.0f, 1.0f},   {false, false, 60, 512, 600, 1.0f, 0.0f},
      /* few rows by KC slices (2, 5 and 3 of them), each slice in column blocks where the threads outnumber the
         slices (KILN_NUM_THREADS=16), transposed A, tail columns */
      {false, false, 1, 1000, 512, 1.0f, 0.0f},  {true, false, 3, 700, 1300, 0.5f, 1.0f},
      {false, false, 4, 90, 600, 1.0f, -1.0f},
  };
  bool avx512 = kiln_la_cpu_has_avx512();
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const gemm_case *k = &cases[i];
    int64_t lda = (k->ta ? k->M : k->K) + 3, ldb = (k->tb ? k->K : k->N) + 1, ldc = k->N + 2;
    float *A = rand_buf((size_t)((k->ta ? k->K : k->M) * lda)), *B = rand_buf((size_t)((k->tb ? k->N : k->K) * ldb));
    size_t cn = (size_t)(k->M * ldc);
    float *C0 = rand_buf(cn), *C[4];
    for (int v = 0; v < 4; v++) {
      C[v] = malloc(cn * sizeof(float));
      memcpy(C[v], C0, cn * sizeof(float));
    }
    /* 0: twin, serial; 1: twin on the pool; 2: AVX-512 on the pool; 3: the portable GEMM */
    kiln_status s = KILN_OK;
    s |= kiln_sgemm_wide(kiln_sgemm_micro_wide_base, k->ta, k->tb, k->M, k->N, k->K, k->alpha, A, lda, B, ldb,
                         k->beta, C[0], ldc);
    kiln_pool_acquire();
    s |= kiln_sgemm_wide(kiln_sgemm_micro_wide_base, k->ta, k->tb, k->M, k->N, k->K, k->alpha, A, lda, B, ldb,
                         k->beta, C[1], ldc);
    if (avx512)
      s |= kiln_sgemm_wide(kiln_sgemm_micro_wide_avx512, k->ta, k->tb, k->M, k->N, k->K, k->alpha, A, lda, B, ldb,
                           k->beta, C[2], ldc);
    kiln_pool_release();
    s |= kiln_sgemm_base(k->ta, k->tb, k->M, k->N, k->K, k->alpha, A, lda, B, ldb, k->beta, C[3], ldc);
    CHECK(!s, "case %zu runs", i);
    CHECK(!memcmp(C[0], C[1], cn * sizeof(float)), "case %zu: the wide GEMM on the pool = serial, bit for bit", i);
    if (avx512)
      CHECK(!memcmp(C[0], C[2], cn * sizeof(float)), "case %zu: AVX-512 wide GEMM = its scalar twin, bit for bit", i);
    if (!k->ta && !k->tb && k->alpha == 1.0f) { /* B packed beforehand (conv's im2col layout): the same bits */
      float *bpk = malloc((size_t)kiln_sgemm_wide_pack_b_floats(k->K, k->N) * sizeof(float) + 1);
      float *Cp = malloc(cn * sizeof(float));
      kiln_sgemm_wide_pack_b(B, ldb, k->K, k->N, bpk);
      for (int mi = 0; mi < (avx512 ? 2 : 1); mi++) {
        memcpy(Cp, C0, cn * sizeof(float));
        s = kiln_sgemm_wide_pb(mi ? kiln_sgemm_micro_wide_avx512 : kiln_sgemm_micro_wide_base, k->M, k->N, k->K, A,
                               lda, NULL, bpk, k->beta, Cp, ldc);
        CHECK(!s && !memcmp(Cp, C[0], cn * sizeof(float)), "case %zu: wide GEMM from a packed B (%s) = packing per call",
              i, mi ? "AVX-512" : "twin");
      }
      /* the post-op (bias per row, clamp) inside the GEMM = the GEMM, then the bias and clamp over C */
      float *bias = rand_buf((size_t)k->M), *Cq = malloc(cn * sizeof(float));
      memcpy(Cq, C[0], cn * sizeof(float));
      for (int64_t r = 0; r < k->M; r++) kiln_sgemm_post_base(Cq + r * ldc, ldc, 1, (int)k->N, bias + r, true, -0.3f, 0.4f);
      kiln_sgemm_post post = {bias, true, -0.3f, 0.4f};
      kiln_pool_acquire(); /* on the pool (KILN_NUM_THREADS): B packed once where the GEMM is big enough */
      for (int v = 0; v < (avx512 ? 4 : 2); v++) { /* micro x (B packed or not) */
        memcpy(Cp, C0, cn * sizeof(float));
        s = kiln_sgemm_wide_post(v & 2 ? kiln_sgemm_micro_wide_avx512 : kiln_sgemm_micro_wide_base, k->M, k->N, k->K,
                                 A, lda, NULL, v & 1 ? NULL : B, ldb, v & 1 ? bpk : NULL, k->beta, Cp, ldc, &post);
        CHECK(!s && !memcmp(Cp, Cq, cn * sizeof(float)), "case %zu: GEMM + bias + clamp in the tiles (%s%s) = after it",
              i, v & 2 ? "AVX-512" : "twin", v & 1 ? ", B packed" : "");
      }
      kiln_pool_release();
      free(bias);
      free(Cq);
      free(bpk);
      free(Cp);
    }
    double worst = 0;
    for (int64_t r = 0; r < k->M; r++)
      for (int64_t j = 0; j < ldc; j++) {
        size_t e = (size_t)(r * ldc + j);
        double d = fabs((double)C[0][e] - (double)C[3][e]);
        if (j >= k->N) d = C[0][e] == C0[e] ? 0 : 1e9; /* the padding columns stay untouched */
        double tol = 1e-5 * (double)(k->K + 2) * (fabs(k->alpha) + fabs(k->beta) + 1);
        if (d / tol > worst) worst = d / tol;
      }
    CHECK(worst <= 1.0, "case %zu: wide GEMM within tolerance of the portable one (%.3g of it)", i, worst);
    for (int v = 0; v < 4; v++) free(C[v]);
    free(C0);
    free(A);
    free(B);
  }
}

/* The few-rows kernel (M <= KILN_SGEMM_ROWS_MAX, B not transposed): its
 * rows bit-equal to the same rows of a product of KILN_SGEMM_WIDE_MR more
 * rows (the packed path: row r of C depends only on row r of op(A)), the
 * AVX-512 version to its twin, serial (one task over all N columns: B's
 * rows four at a time, then K's remainder) and on the pool, on the pool to
 * serial; columns past N untouched. */
static void test_rows(void) {
  /* N 1000 with K 600..4100, N 64 with K 4100 (16 slices, the last of 260): work enough for two tasks, by KC
     slices (sgemm.c rows_slices) whatever beta (0: C holds NaNs, the split must not read it; 1 and -0.75: slice
     0's sums + beta·C first, as the kernel adds them) */
  static const int64_t Ns[] = {1, 10, 17, 64, 65, 200, 1000}, Ks[] = {1, 255, 257, 600, 1100, 1280, 4100};
  static const float alphas[] = {1.0f, 0.5f}, betas[] = {0.0f, 1.0f, -0.75f};
  bool avx512 = kiln_la_cpu_has_avx512();
  int bad_packed = 0, bad_twin = 0, bad_pool = 0, bad_pad = 0, cases = 0;
  for (int64_t M = 1; M <= KILN_SGEMM_ROWS_MAX; M++)
    for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
      for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
        for (int ta = 0; ta < 2; ta++) {
          int64_t N = Ns[ni], K = Ks[ki], Mb = M + KILN_SGEMM_WIDE_MR;
          int64_t lda = (ta ? Mb : K) + 3, ldb = N + 5, ldc = N + 2;
          float alpha = alphas[(ni + ki) % 2], beta = betas[(ni + ki + (size_t)M) % 3];
          float *A = rand_buf((size_t)((ta ? K : Mb) * lda)), *B = rand_buf((size_t)(K * ldb));
          size_t cn = (size_t)(Mb * ldc);
          float *C0 = rand_buf(cn), *C[5];
          for (size_t q = 0; beta == 0.0f && q < cn; q += 7) C0[q] = NAN; /* beta 0: never read */
          for (int v = 0; v < 5; v++) {
            C[v] = malloc(cn * sizeof(float));
            memcpy(C[v], C0, cn * sizeof(float));
          }
          /* 0: packed twin (Mb rows); 1: rows twin; 2: rows AVX-512 on the pool; 3: rows twin on the pool;
             4: rows AVX-512 serial */
          kiln_status s = kiln_sgemm_wide(kiln_sgemm_micro_wide_base, ta, false, Mb, N, K, alpha, A, lda, B, ldb,
                                          beta, C[0], ldc);
          s |= kiln_sgemm_wide(kiln_sgemm_micro_wide_base, ta, false, M, N, K, alpha, A, lda, B, ldb, beta, C[1], ldc);
          if (avx512)
            s |= kiln_sgemm_wide(kiln_sgemm_micro_wide_avx512, ta, false, M, N, K, alpha, A, lda, B, ldb, beta, C[4],
                                 ldc);
          kiln_pool_acquire();
          if (avx512)
            s |= kiln_sgemm_wide(kiln_sgemm_micro_wide_avx512, ta, false, M, N, K, alpha, A, lda, B, ldb, beta, C[2],
                                 ldc);
          s |= kiln_sgemm_wide(kiln_sgemm_micro_wide_base, ta, false, M, N, K, alpha, A, lda, B, ldb, beta, C[3], ldc);
          kiln_pool_release();
          CHECK(!s, "rows case M %lld N %lld K %lld runs", (long long)M, (long long)N, (long long)K);
          size_t rn = (size_t)(M * ldc) * sizeof(float);
          for (int64_t r = 0; r < M; r++) /* C[0]'s padding columns of these rows as they were */
            for (int64_t j = N; j < ldc; j++) /* bits: NaN where beta is 0 */
              bad_pad += memcmp(&C[1][r * ldc + j], &C0[r * ldc + j], sizeof(float)) != 0;
          bad_packed += memcmp(C[0], C[1], rn) != 0;
          bad_twin += avx512 && (memcmp(C[1], C[2], rn) != 0 || memcmp(C[1], C[4], rn) != 0);
          bad_pool += memcmp(C[1], C[3], rn) != 0;
          cases++;
          for (int v = 0; v < 5; v++) free(C[v]);
          free(C0);
          free(A);
          free(B);
        }
  CHECK(!bad_packed, "few-rows kernel = the packed wide GEMM's rows, bit for bit (%d of %d differ)", bad_packed, cases);
  CHECK(!bad_twin, "few-rows AVX-512 kernel = its scalar twin, bit for bit (%d of %d differ)", bad_twin, cases);
  CHECK(!bad_pool, "few-rows kernel on the pool = serial, bit for bit (%d of %d differ)", bad_pool, cases);
  CHECK(!bad_pad, "few-rows kernel leaves the columns past N alone (%d elements changed)", bad_pad);
}

/* ---- graphs: pool vs one thread vs reference ---- */

static int cst(kiln_graph *g, const char *name, int rank, const int64_t *dims, double lo, double scale) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, KILN_F32, rank, dims)) exit(2);
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, lo + scale * rnd());
  int v;
  if (kiln_edit_add_const(g, name, &t, &v)) exit(2);
  return v;
}

static int add(kiln_graph *g, const char *op, const char *ins, const char *outs) {
  int in[16], out[16], ni = 0, no = 0;
  char buf[512], *save;
  snprintf(buf, sizeof buf, "%s", ins);
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) in[ni++] = val(g, t);
  snprintf(buf, sizeof buf, "%s", outs);
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
    if (kiln_edit_add_value(g, t, &out[no++])) exit(2);
  char name[64];
  snprintf(name, sizeof name, "n%d", g->n_nodes);
  int idx;
  if (kiln_edit_insert_node(g, g->n_nodes, name, op, "", ni, in, no, out, &idx)) exit(2);
  return idx;
}

static void seti(kiln_graph *g, int node, const char *name, int64_t v) {
  if (kiln_edit_set_int(&g->nodes[node], name, v)) exit(2);
}
static void setints(kiln_graph *g, int node, const char *name, int n, const int64_t *v) {
  if (kiln_edit_set_ints(&g->nodes[node], name, v, (size_t)n)) exit(2);
}
/* Conv node c's attributes: kernel_shape k x k, pads of pad on every side
 * (where pad > 0), strides s x s (where s > 1), group (where above 1). */
static void conv_attrs(kiln_graph *g, int c, int64_t k, int64_t pad, int64_t s, int64_t group) {
  int64_t ks[2] = {k, k}, ps[4] = {pad, pad, pad, pad}, ss[2] = {s, s};
  setints(g, c, "kernel_shape", 2, ks);
  if (pad > 0) setints(g, c, "pads", 4, ps);
  if (s > 1) setints(g, c, "strides", 2, ss);
  if (group > 1) seti(g, c, "group", group);
}

typedef struct run_ctx {
  kiln_cpu_plan *p;
  const kiln_graph *g;
  const kiln_tensor *const *bound;
  kiln_tensor *outs;
  kiln_status s;
} run_ctx;

static void run_task(void *arg, int64_t t, int worker) {
  (void)worker;
  run_ctx *r = arg;
  if (t == 0) r->s = kiln_cpu_run(r->p, r->g, r->bound, r->outs);
}

/* Runs graph g (one float input x of the given shape, every output float)
 * three ways and compares. */
static void check_graph(const char *what, kiln_graph *g, int rank, const int64_t *dims, double rtol) {
  int x = val(g, "x");
  kiln_tensor xt = {0};
  if (kiln_tensor_alloc(&xt, KILN_F32, rank, dims)) exit(2);
  for (int64_t i = 0; i < xt.numel; i++) kiln_set_f(&xt, i, 2 * rnd());
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[x] = &xt;
  int no = g->n_outputs;
  kiln_tensor *par = kiln_calloc((size_t)no, sizeof *par), *ser = kiln_calloc((size_t)no, sizeof *ser),
              *ref = kiln_calloc((size_t)no, sizeof *ref);
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "%s: prepare: %s", what, s ? kiln_last_error() : "");
  if (!s) {
    s = kiln_cpu_run(p, g, bound, par);
    CHECK(!s, "%s: run on the pool: %s", what, s ? kiln_last_error() : "");
    /* the serial run: inside task 0 of a loop that keeps the pool busy */
    run_ctx rc = {p, g, bound, ser, KILN_OK};
    kiln_pool_for(2, 2, run_task, &rc);
    CHECK(!rc.s, "%s: run on one thread: %s", what, rc.s ? kiln_last_error() : "");
    s = kiln_ref_run(g, bound, ref);
    CHECK(!s, "%s: reference run", what);
    for (int o = 0; o < no && !s && !rc.s; o++) {
      bool same = par[o].numel == ser[o].numel && par[o].numel == ref[o].numel;
      size_t bytes = (size_t)par[o].numel * sizeof(float);
      CHECK(same && !memcmp(par[o].data, ser[o].data, bytes), "%s: output %d on %d threads = on one, bit for bit",
            what, o, kiln_pool_threads());
      double worst = 0;
      for (int64_t i = 0; same && i < ref[o].numel; i++) {
        double a = kiln_get_f(&par[o], i), b = kiln_get_f(&ref[o], i);
        double e = fabs(a - b) / (1e-5 + rtol * fabs(b));
        if (e > worst || isnan(e)) worst = isnan(e) ? 1e9 : e;
      }
      CHECK(same && worst <= 1.0, "%s: output %d within tolerance of the reference (%.3g of it)", what, o, worst);
    }
  }
  for (int o = 0; o < no; o++) {
    kiln_tensor_release(&par[o]);
    kiln_tensor_release(&ser[o]);
    kiln_tensor_release(&ref[o]);
  }
  kiln_free(par);
  kiln_free(ser);
  kiln_free(ref);
  kiln_free(bound);
  kiln_cpu_release(p);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* Tanh(x + b) -> Sigmoid -> · x over rows x cols, b a row of cols. */
static void check_chain(const char *what, int64_t rows, int64_t cols) {
  kiln_graph *g = new_graph(17);
  int64_t d[2] = {rows, cols}, bd[1] = {cols};
  input(g, "x", KILN_F32, 2, d);
  cst(g, "b", 1, bd, 0, 1);
  add(g, "Add", "x b", "a");
  add(g, "Tanh", "a", "t");
  add(g, "Sigmoid", "t", "s");
  add(g, "Mul", "s x", "y");
  output(g, "y");
  check_graph(what, g, 2, d, 1e-5);
}

static void test_graphs(void) {
  /* elementwise chain over 2M elements: the tile executor's chunks */
  check_chain("elementwise chain 512x4096", 512, 4096);
  /* the same over 16.8 MB: a streamed output (tile.c: each call's first tile cut where the output reaches a 64-byte
     line, the last run writing it with non-temporal stores), the calls' tiles starting elsewhere on 1 and 2 threads */
  check_chain("elementwise chain 1024x4100, streamed", 1024, 4100);
  { /* Conv 3x3 + bias + Relu (epilogue) + MaxPool; 1x1 Conv; depthwise s2 + Clip */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {1, 16, 64, 64}, wd[4] = {32, 16, 3, 3}, bd[1] = {32}, pd[4] = {32, 32, 1, 1},
            dwd[4] = {32, 1, 3, 3}, k2[2] = {2, 2};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "w", 4, wd, 0, 0.3);
    cst(g, "b", 1, bd, 0, 0.5);
    cst(g, "pw", 4, pd, 0, 0.3);
    cst(g, "dw", 4, dwd, 0, 0.5);
    int c = add(g, "Conv", "x w b", "c");
    conv_attrs(g, c, 3, 1, 1, 1);
    add(g, "Relu", "c", "r");
    int mp = add(g, "MaxPool", "r", "m");
    setints(g, mp, "kernel_shape", 2, k2);
    setints(g, mp, "strides", 2, k2);
    add(g, "Conv", "r pw", "q");
    int dc = add(g, "Conv", "q dw", "dq");
    conv_attrs(g, dc, 3, 1, 2, 32);
    add(g, "Relu", "dq", "y");
    output(g, "m");
    output(g, "y");
    check_graph("conv / pointwise / depthwise / maxpool", g, 4, d, 1e-4);
  }
  { /* ResNet-18's l2.0 downsampling: a strided 1x1 (64 -> 128, 56x56 -> 28x28: 6.4 M multiply-adds, split over
       the pool above 2^21, below the stride-1 bound of 2^23) + bias, a residual Add and Relu (the epilogue's
       apply, per strip of a task), beside a 3x3 stride-2 conv (the direct path) */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {1, 64, 56, 56}, dd[4] = {128, 64, 1, 1}, wd[4] = {128, 64, 3, 3}, bd[1] = {128};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "dw", 4, dd, 0, 0.2);
    cst(g, "db", 1, bd, 0, 0.5);
    cst(g, "w", 4, wd, 0, 0.05);
    int c = add(g, "Conv", "x w", "c");
    conv_attrs(g, c, 3, 1, 2, 1);
    int dn = add(g, "Conv", "x dw db", "dn");
    conv_attrs(g, dn, 1, 0, 2, 1);
    add(g, "Add", "dn c", "a");
    add(g, "Relu", "a", "y");
    output(g, "y");
    check_graph("downsampling: strided 1x1 + residual Add + Relu, 3x3 stride 2", g, 4, d, 1e-4);
  }
  { /* ResNet-18's l4.0.conv1 narrowed: a 3x3 stride-2 conv to 7x7 (the 12 x 32 direct tile's q space, not the
       channel tiles) with 256 input channels (14.4 M multiply-adds: on the pool, each worker's tasks reading
       its own padded copy of the input, conv.c direct_own) + bias + Relu */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {1, 256, 14, 14}, wd[4] = {128, 256, 3, 3}, bd[1] = {128};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "w", 4, wd, 0, 0.03);
    cst(g, "b", 1, bd, 0, 0.5);
    int c = add(g, "Conv", "x w b", "c");
    conv_attrs(g, c, 3, 1, 2, 1);
    add(g, "Relu", "c", "y");
    output(g, "y");
    check_graph("3x3 stride 2 to 7x7, 256 channels in + Relu", g, 4, d, 1e-4);
  }
  { /* an inverted residual (MobileNetV2): 1x1 + Clip(0, 6) from scalar initializers, depthwise 3x3 on 14x14
       (flat planes) + Clip, 1x1 + Relu: the epilogues the convolutions clamp themselves (kiln_tile_clamp) */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {1, 16, 14, 14}, ed[4] = {96, 16, 1, 1}, bd[1] = {96}, dwd[4] = {96, 1, 3, 3},
            pd[4] = {24, 96, 1, 1};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "ew", 4, ed, 0, 0.4);
    cst(g, "eb", 1, bd, 0, 1);
    cst(g, "dw", 4, dwd, 0, 0.5);
    cst(g, "db", 1, bd, -0.5, 1);
    cst(g, "pw", 4, pd, 0, 0.3);
    cst(g, "lo", 0, NULL, 0, 0);
    cst(g, "hi", 0, NULL, 6, 0);
    cst(g, "lo2", 0, NULL, -0.25, 0);
    cst(g, "hi2", 0, NULL, 0.5, 0);
    add(g, "Conv", "x ew eb", "e");
    add(g, "Clip", "e lo hi", "ec");
    int dc = add(g, "Conv", "ec dw db", "dq");
    conv_attrs(g, dc, 3, 1, 1, 96);
    add(g, "Clip", "dq lo2 hi2", "dc");
    add(g, "Conv", "dc pw", "p");
    add(g, "Relu", "p", "y");
    output(g, "y");
    check_graph("inverted residual: conv + Clip / depthwise + Clip / conv + Relu", g, 4, d, 1e-4);
  }
  { /* parts of the image (GEMM_CONV.md): a 1x1 (pointwise direct, its blocks a whole number per thread), a 3x3
       stride-1 depthwise by parts of the rows + Sigmoid (applied per part of each plane), a 5x5 stride-2
       depthwise with pads of 2 by parts (the second part's plane starts on an input row inside) + Clip, on odd
       planes (29x29 -> 15x15: parts of 7 and 8 rows) */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {1, 48, 29, 29}, ed[4] = {96, 48, 1, 1}, bd[1] = {96}, d3[4] = {96, 1, 3, 3}, d5[4] = {96, 1, 5, 5};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "ew", 4, ed, 0, 0.3);
    cst(g, "eb", 1, bd, 0, 1);
    cst(g, "w3", 4, d3, 0, 0.5);
    cst(g, "b3", 1, bd, 0, 0.5);
    cst(g, "w5", 4, d5, 0, 0.3);
    cst(g, "lo", 0, NULL, -0.25, 0);
    cst(g, "hi", 0, NULL, 0.75, 0);
    add(g, "Conv", "x ew eb", "e");
    int c3 = add(g, "Conv", "e w3 b3", "d");
    conv_attrs(g, c3, 3, 1, 1, 96);
    add(g, "Sigmoid", "d", "s");
    int c5 = add(g, "Conv", "s w5", "f");
    conv_attrs(g, c5, 5, 2, 2, 96);
    add(g, "Clip", "f lo hi", "y");
    output(g, "s");
    output(g, "y");
    check_graph("parts of the image: 1x1, depthwise 3x3 + Sigmoid, depthwise 5x5 stride 2 + Clip", g, 4, d, 1e-4);
  }
  { /* parts of the image with a batch of 2 and a channel multiplier of 2: depthwise 3x3 stride 1 (48 -> 96 channels)
       + a residual Add + Relu (the epilogue per part of each plane, kiln_tile_residual), depthwise 3x3 stride 2 */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {2, 48, 30, 30}, d3[4] = {96, 1, 3, 3}, bd[1] = {96}, rd[4] = {2, 96, 30, 30},
            s3[4] = {96, 1, 3, 3};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "w3", 4, d3, 0, 0.5);
    cst(g, "b3", 1, bd, 0, 0.5);
    cst(g, "r", 4, rd, 0, 1);
    cst(g, "w2", 4, s3, 0, 0.5);
    int c3 = add(g, "Conv", "x w3 b3", "d");
    conv_attrs(g, c3, 3, 1, 1, 48);
    add(g, "Add", "d r", "a");
    add(g, "Relu", "a", "s");
    int c2 = add(g, "Conv", "s w2", "y");
    conv_attrs(g, c2, 3, 1, 2, 96);
    output(g, "s");
    output(g, "y");
    check_graph("parts of the image: batch 2, multiplier 2, depthwise + residual + Relu, depthwise stride 2", g, 4, d,
                1e-4);
  }
  { /* a classifier head (MobileNetV2's): 1x1 Conv 320 -> 1280 on a 7x7 plane (one tile: its GEMM splits
       itself over the pool) + a Sigmoid epilogue applied per block, GlobalAveragePool, Flatten, Gemm of one
       row with B packed once (the wide GEMM's split weighs M = 1 as a 12-row strip) */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {1, 320, 7, 7}, wd[4] = {1280, 320, 1, 1}, bd[1] = {1280}, fd[2] = {1000, 1280}, fb[1] = {1000};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "w", 4, wd, 0, 0.05);
    cst(g, "b", 1, bd, 0, 1);
    cst(g, "fw", 2, fd, 0, 0.05);
    cst(g, "fb", 1, fb, 0, 1);
    add(g, "Conv", "x w b", "c");
    add(g, "Sigmoid", "c", "s");
    add(g, "GlobalAveragePool", "s", "p");
    add(g, "Flatten", "p", "f");
    int ge = add(g, "Gemm", "f fw fb", "y");
    seti(g, ge, "transB", 1);
    output(g, "s");
    output(g, "y");
    check_graph("classifier head: 1x1 conv on 7x7 + Sigmoid, pool, Gemm of one row", g, 4, d, 1e-4);
  }
  { /* MatMul + bias + Sigmoid, Gemm transB */
    kiln_graph *g = new_graph(17);
    int64_t d[2] = {300, 260}, wd[2] = {260, 190}, bd[1] = {190}, gd[2] = {70, 190};
    input(g, "x", KILN_F32, 2, d);
    cst(g, "w", 2, wd, 0, 0.1);
    cst(g, "b", 1, bd, 0, 1);
    cst(g, "gw", 2, gd, 0, 0.1);
    add(g, "MatMul", "x w", "mm");
    add(g, "Add", "mm b", "a");
    add(g, "Sigmoid", "a", "s");
    int ge = add(g, "Gemm", "s gw", "y");
    seti(g, ge, "transB", 1);
    output(g, "y");
    check_graph("MatMul + epilogue, Gemm", g, 2, d, 1e-4);
  }
  { /* MatMul on a B pack over 4 MiB (1100 x 1040: the wide GEMM's fewer blocks), + bias + Relu */
    kiln_graph *g = new_graph(17);
    int64_t d[2] = {40, 1100}, wd[2] = {1100, 1040}, bd[1] = {1040};
    input(g, "x", KILN_F32, 2, d);
    cst(g, "w", 2, wd, 0, 0.05);
    cst(g, "b", 1, bd, 0, 1);
    add(g, "MatMul", "x w", "mm");
    add(g, "Add", "mm b", "a");
    add(g, "Relu", "a", "y");
    output(g, "y");
    check_graph("MatMul on a B pack over 4 MiB + bias + Relu", g, 2, d, 1e-4);
  }
  { /* attention's batched MatMuls (one matrix per pool task, gemm.c): scores of 6 heads [6, 40, 16] x
       [6, 16, 40] with a Mul epilogue, softmax, context [6, 40, 40] x [6, 40, 16]; and a batch broadcast
       against one B of shape [3, 1, 16, 24] ([2, 16, 24] rows per head) */
    kiln_graph *g = new_graph(17);
    int64_t d[3] = {6, 40, 16}, kd[3] = {6, 16, 40}, vd[3] = {6, 40, 16}, bd[4] = {3, 1, 16, 24};
    input(g, "x", KILN_F32, 3, d);
    cst(g, "k", 3, kd, 0, 1);
    cst(g, "v", 3, vd, 0, 1);
    cst(g, "sc", 0, NULL, 0.25, 0);
    cst(g, "w", 4, bd, 0, 0.5);
    add(g, "MatMul", "x k", "s");
    add(g, "Mul", "s sc", "ss");
    add(g, "Softmax", "ss", "p");
    add(g, "MatMul", "p v", "y");
    add(g, "MatMul", "y w", "z");
    output(g, "y");
    output(g, "z");
    check_graph("attention: batched MatMuls + Mul epilogue, softmax; a broadcast batch", g, 3, d, 1e-4);
  }
  { /* softmax rows and columns, LayerNorm, ReduceSum columns, ReduceMax rows */
    kiln_graph *g = new_graph(17);
    int64_t d[3] = {40, 100, 80}, sd[1] = {80};
    input(g, "x", KILN_F32, 3, d);
    cst(g, "sc", 1, sd, 1, 0.5);
    cst(g, "sb", 1, sd, 0, 0.5);
    add(g, "Softmax", "x", "y0");
    int s1 = add(g, "LogSoftmax", "x", "y1");
    seti(g, s1, "axis", 1);
    add(g, "LayerNormalization", "x sc sb", "y2");
    int r1 = add(g, "ReduceMax", "x", "y3");
    int64_t ax2[1] = {2}, ax1[1] = {1};
    setints(g, r1, "axes", 1, ax2);
    int64_t one = 1;
    kiln_tensor at = {0};
    if (kiln_tensor_alloc(&at, KILN_I64, 1, &one)) exit(2);
    ((int64_t *)at.data)[0] = ax1[0];
    int av;
    if (kiln_edit_add_const(g, "axes", &at, &av)) exit(2);
    add(g, "ReduceSum", "x axes", "y4");
    for (int i = 0; i < 5; i++) {
      char nm[8];
      snprintf(nm, sizeof nm, "y%d", i);
      output(g, nm);
    }
    check_graph("softmax / logsoftmax cols / layernorm / reductions", g, 3, d, 1e-4);
  }
  { /* pooling and norms on planes */
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {2, 64, 30, 30}, cd[1] = {64}, k3[2] = {3, 3}, p1[4] = {1, 1, 1, 1};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "s", 1, cd, 1, 0.5);
    cst(g, "b", 1, cd, 0, 0.5);
    cst(g, "m", 1, cd, 0, 0.5);
    cst(g, "v", 1, cd, 1.5, 0.5);
    int ap = add(g, "AveragePool", "x", "y0");
    setints(g, ap, "kernel_shape", 2, k3);
    setints(g, ap, "pads", 4, p1);
    add(g, "GlobalAveragePool", "x", "y1");
    add(g, "GlobalMaxPool", "x", "y2");
    add(g, "BatchNormalization", "x s b m v", "y3");
    add(g, "InstanceNormalization", "x s b", "y4");
    for (int i = 0; i < 5; i++) {
      char nm[8];
      snprintf(nm, sizeof nm, "y%d", i);
      output(g, nm);
    }
    check_graph("pools / batchnorm / instancenorm", g, 4, d, 1e-4);
  }
}

/* Runs g on a plan made with KILN_POOL_BANDS_MIN=min (on the pool) into out[0]; *rows: the plan's
 * pool_band_rows. */
static kiln_status run_bands(kiln_graph *g, const kiln_tensor **bound, const char *min, kiln_tensor *out, long *rows) {
  setenv("KILN_POOL_BANDS_MIN", min, 1);
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  unsetenv("KILN_POOL_BANDS_MIN");
  if (s) return s;
  s = kiln_cpu_run(p, g, bound, out);
  kiln_cpu_stats st;
  kiln_cpu_plan_stats(p, &st);
  *rows = st.pool_band_rows;
  kiln_cpu_release(p);
  return s;
}

/* A MaxPool after a Conv (+ Relu) pooled by bands as the conv finishes its blocks (plan.c pool_bands, nn.h
 * kiln_nn_pool_bands; by default only over 2 MiB arguments, here forced with KILN_POOL_BANDS_MIN=0): bit for bit
 * the pool node's pass after the conv (a plan with the bands off), rows made by bands counted, and check_graph's
 * pool / one thread / reference comparison with the bands on. The convs take the direct path (rows of 16 and
 * not), the channel tiles (rows of 14, K = C·9 >= 288 for their pack) and Winograd; the pools max3x3s2, max2x2s2
 * and the general rows; the epilogues a clamp (Relu, in the kernel), a Sigmoid and a residual Add + Relu (apply,
 * before done). */
static void test_pool_bands(void) {
  static const struct {
    const char *what;
    int64_t n, c, m, h, w, k, pad, s;     /* the conv: x n x c x h x w, W m x c x k x k, pads, strides */
    int64_t pk, ps, ppad, pdil, ceil;     /* the MaxPool: kernel pk x pk, strides, pads, dilations, ceil_mode */
    int epi;    /* between conv and pool: 0 nothing, 1 Relu (a clamp), 2 Sigmoid, 3 Add(constant) + Relu (residual) */
    bool banded; /* some rows made by bands at 1 or 2 threads (on more, a task's block of rows may hold no whole
                    window: at 16 threads the direct path's tasks are single rows of these small images) */
  } cases[] = {
      {"7x7/2 stem + MaxPool 3x3/2 (direct, rows of 16)", 1, 3, 16, 64, 64, 7, 3, 2, 3, 2, 1, 1, 0, 1, true},
      {"3x3 + MaxPool 3x3/2 (Winograd)", 2, 16, 32, 30, 30, 3, 1, 1, 3, 2, 1, 1, 0, 1, true},
      {"3x3/2 + MaxPool 2x2/2 (channel tiles, rows of 14)", 1, 32, 32, 56, 56, 3, 1, 2, 2, 2, 0, 1, 0, 1, true},
      {"3x3 + MaxPool 2x2/2, no Relu (no tile step: the pool node)", 1, 16, 16, 20, 20, 3, 1, 1, 2, 2, 0, 1, 0, 0,
       false},
      {"3x3 odd rows + MaxPool 2x2 dilation 2 pads 1 (direct)", 1, 4, 5, 23, 21, 3, 1, 1, 2, 1, 1, 2, 0, 1, true},
      {"3x3/2 + MaxPool 3x3/2 ceil_mode (direct)", 1, 6, 7, 40, 37, 3, 1, 2, 3, 2, 0, 1, 1, 1, true},
      /* epilogues applied by the kernel's apply before done: a Sigmoid, a residual */
      {"7x7/2 + Sigmoid + MaxPool 3x3/2 (direct)", 1, 3, 16, 64, 64, 7, 3, 2, 3, 2, 1, 1, 0, 2, true},
      {"3x3 + Sigmoid + MaxPool 2x2/2 (Winograd)", 1, 16, 32, 30, 30, 3, 1, 1, 2, 2, 0, 1, 0, 2, true},
      {"3x3/2 + Sigmoid + MaxPool 3x3/2 (channel tiles)", 1, 32, 32, 56, 56, 3, 1, 2, 3, 2, 1, 1, 0, 2, true},
      {"3x3 + residual + Relu + MaxPool 3x3/2 (Winograd)", 2, 16, 16, 30, 30, 3, 1, 1, 3, 2, 1, 1, 0, 3, true},
      {"3x3/2 + residual + Relu + MaxPool 2x2/2 (channel tiles)", 1, 32, 32, 56, 56, 3, 1, 2, 2, 2, 0, 1, 0, 3, true},
      {"5x5 odd + residual + Relu + MaxPool 3x3/2 (direct)", 1, 4, 6, 33, 29, 5, 2, 1, 3, 2, 1, 1, 0, 3, true},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    kiln_graph *g = new_graph(17);
    int64_t d[4] = {cases[i].n, cases[i].c, cases[i].h, cases[i].w};
    int64_t wd[4] = {cases[i].m, cases[i].c, cases[i].k, cases[i].k}, bd[1] = {cases[i].m};
    int64_t pk[2] = {cases[i].pk, cases[i].pk}, ps[2] = {cases[i].ps, cases[i].ps};
    int64_t pp[4] = {cases[i].ppad, cases[i].ppad, cases[i].ppad, cases[i].ppad};
    int64_t pd[2] = {cases[i].pdil, cases[i].pdil};
    input(g, "x", KILN_F32, 4, d);
    cst(g, "w", 4, wd, 0, 0.3);
    cst(g, "b", 1, bd, 0, 0.5);
    int c = add(g, "Conv", "x w b", "c");
    conv_attrs(g, c, cases[i].k, cases[i].pad, cases[i].s, 1);
    int64_t oh = (cases[i].h + 2 * cases[i].pad - cases[i].k) / cases[i].s + 1;
    int64_t ow = (cases[i].w + 2 * cases[i].pad - cases[i].k) / cases[i].s + 1;
    int64_t rd[4] = {cases[i].n, cases[i].m, oh, ow};
    if (cases[i].epi == 1) add(g, "Relu", "c", "r");
    if (cases[i].epi == 2) add(g, "Sigmoid", "c", "r");
    if (cases[i].epi == 3) {
      cst(g, "res", 4, rd, -0.5, 1.0);
      add(g, "Add", "c res", "a");
      add(g, "Relu", "a", "r");
    }
    int mp = add(g, "MaxPool", cases[i].epi ? "r" : "c", "y");
    setints(g, mp, "kernel_shape", 2, pk);
    setints(g, mp, "strides", 2, ps);
    if (cases[i].ppad) setints(g, mp, "pads", 4, pp);
    if (cases[i].pdil > 1) setints(g, mp, "dilations", 2, pd);
    if (cases[i].ceil) seti(g, mp, "ceil_mode", 1);
    output(g, "y");
    kiln_tensor xt = {0}, on = {0}, off = {0};
    if (kiln_tensor_alloc(&xt, KILN_F32, 4, d)) exit(2);
    for (int64_t e = 0; e < xt.numel; e++) kiln_set_f(&xt, e, 2 * rnd());
    const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
    bound[val(g, "x")] = &xt;
    long rows_on = 0, rows_off = 0;
    kiln_status s = run_bands(g, bound, "0", &on, &rows_on);
    CHECK(!s, "%s: run with bands: %s", cases[i].what, s ? kiln_last_error() : "");
    kiln_status s2 = run_bands(g, bound, "1e18", &off, &rows_off);
    CHECK(!s2, "%s: run without bands: %s", cases[i].what, s2 ? kiln_last_error() : "");
    if (!s && !s2) {
      CHECK(on.numel == off.numel && !memcmp(on.data, off.data, (size_t)on.numel * sizeof(float)),
            "%s: pooled by bands = the pool node's pass, bit for bit", cases[i].what);
      CHECK(rows_off == 0 && (!cases[i].banded || kiln_cpu_num_threads() > 2 || rows_on > 0),
            "%s: rows made by bands: %ld with them on (of %lld), %ld off", cases[i].what, rows_on,
            (long long)(on.numel / on.dims[3]), rows_off);
    }
    kiln_tensor_release(&on);
    kiln_tensor_release(&off);
    kiln_tensor_release(&xt);
    kiln_free(bound);
    setenv("KILN_POOL_BANDS_MIN", "0", 1);
    check_graph(cases[i].what, g, 4, d, 1e-4); /* frees g */
    unsetenv("KILN_POOL_BANDS_MIN");
  }
}

int main(void) {
  setenv("KILN_NUM_THREADS", "2", 0);
  test_pool();
  test_micro();
  test_wide();
  test_direct_a();
  test_slices();
  test_post();
  test_rows();
  CHECK(kiln_pool_acquire() == 0, "acquire for the graphs");
  test_graphs();
  test_pool_bands();
  /* kiln sets OpenBLAS's thread count before its first OpenBLAS call, not
     when it reads KILN_NUM_THREADS (pool.h: OpenBLAS's server threads spin
     ~0.1 s after they start); CMake runs this test with
     OPENBLAS_NUM_THREADS=1, so graphs on kiln's own SGEMM leave it at 1 */
  const char *ob = getenv("OPENBLAS_NUM_THREADS");
  bool own_sgemm = kiln_la_isa() == KILN_VM_ISA_BASE || kiln_sgemm_active() == KILN_SGEMM_AVX512;
  if (ob && !strcmp(ob, "1") && own_sgemm)
    CHECK(openblas_get_num_threads() == 1, "no OpenBLAS call yet: OpenBLAS still at 1 thread (got %d)",
          openblas_get_num_threads());
  kiln_sgemm_force(KILN_SGEMM_BLAS); /* the same graphs with OpenBLAS under the GEMMs */
  test_graphs();
  if (kiln_la_isa() != KILN_VM_ISA_BASE)
    CHECK(openblas_get_num_threads() == kiln_cpu_num_threads(), "after OpenBLAS GEMMs: OpenBLAS at %d threads (got %d)",
          kiln_cpu_num_threads(), openblas_get_num_threads());
  kiln_sgemm_force(-1);
  kiln_pool_release();
  printf("unit_cpu_pool (%d threads): %d passed, %d failed\n", kiln_cpu_num_threads(), passed, failed);
  return failed ? 1 : 0;
}
