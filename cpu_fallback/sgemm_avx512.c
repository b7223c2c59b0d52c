/* cpu_fallback/sgemm_avx512: the AVX-512F micro-kernel of kiln's wide SGEMM
 * (see sgemm.h; its scalar twin kiln_sgemm_micro_wide_base is in sgemm.c).
 * Built with -mavx512f -mfma; called only after kiln_la_cpu_has_avx512()
 * (cpuid + XGETBV) said AVX-512F is usable.
 *
 * A 12 x 32 tile of C in 24 zmm accumulators: per k, two 16-float loads of
 * the packed B strip and 12 broadcasts of the packed A column, each feeding
 * two fmas. The twin does the same fmaf per element in the same k order,
 * then the same multiply and add for beta, so the two agree bit for bit. */
#include <immintrin.h>

#include "cpu_fallback/sgemm.h"

static __mmask16 mask_of(int n) { return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* The micro-kernel; with post, the bias and clamp are applied to the
 * accumulators before the store (the operations of kiln_sgemm_post_base on
 * the stored values: a float's store and reload are exact, so the bits are
 * those of the store, then the post-op over the tile). */
static inline __attribute__((always_inline)) void micro_rows(int R, bool bmask, bool pf, bool apf, bool xpf, int64_t kc,
                                                              const float *restrict ap,
                                                              const float *A, int64_t lda,
                                                              const float *restrict bp, const int64_t *boff,
                                                              int64_t bhi, float beta, float *C,
                                                              int64_t ldc, int mr, int nr, bool post,
                                                              const float *bias, bool clamp, float lo, float hi,
                                                              const float *cbias, float cscale, const float *spf,
                                                              int64_t spfs) {
  __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a, c3b = c0a;
  __m512 c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a, c7a = c0a, c7b = c0a;
  __m512 c8a = c0a, c8b = c0a, c9a = c0a, c9b = c0a, cAa = c0a, cAb = c0a, cBa = c0a, cBb = c0a;
  const float *ar[KILN_SGEMM_WIDE_MR]; /* A in place (A not NULL): row r at A + r·lda, rows past mr read row 0 */
  for (int r = 0; A && r < KILN_SGEMM_WIDE_MR; r++) ar[r] = A + (r < mr ? r : 0) * lda;
  /* bmask (the direct conv's tiles of fewer than 32 columns): rows of B read only up to column nr (an input read
     in place ends there); full tiles load without masks (the masks cost 3-6 % on ResNet-18's 56 x 56 layers) */
  __mmask16 bm0 = mask_of(nr), bm1 = mask_of(nr - 16);
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; k++) {
    /* boff: row k of B at bp + boff[k], its columns 16..31 at + bhi (the direct conv) */
    const float *bk = boff ? bp + boff[k] : bp;
    /* the direct conv's row k + 16 (another channel or input row: the taps jump about the planes, which the
       hardware prefetchers do not follow), into L1 a few hundred cycles ahead; a hint, never a fault. Distance
       16 measured best on ResNet-18 (8: -1.3 %, 16: another -1 %, 32: +1.6 % against 16; per step, 1 thread) */
    if (pf && k + 16 < kc) _mm_prefetch((const char *)(bp + boff[k + 16]), _MM_HINT_T0);
    /* the pointwise direct path (its rows of B are input channels read in place, K of them, more than the hardware
       prefetchers track): row k's columns two tiles on (64..95) into L2, the same row's tile after next of the
       strip. MobileNetV2's 56 x 56 projections (K 96, 144) 0.72 of their time at 1 thread (one tile on: 0.86-0.91,
       three or more: no better; GEMM_CONV.md "Rows of B ahead"); a hint, never a fault */
    if (xpf) _mm_prefetch((const char *)(bk + 64), _MM_HINT_T1), _mm_prefetch((const char *)(bk + 80), _MM_HINT_T1);
    /* a stream (the _pf kernels): at step k the line at spf + k·spfs into L2 — the caller's share of the next
       block of weights from memory, spread over the call (GEMM_CONV.md "Weights from memory") */
    if (spf && spfs > 0 && spfs <= 16) /* one line at most a step: no loop */
      _mm_prefetch((const char *)(spf + k * spfs), _MM_HINT_T1);
    else
      for (int64_t q = 0; spf && q < spfs; q += 16) /* every line of the step's spfs floats (32 with one row strip) */
        _mm_prefetch((const char *)(spf + k * spfs + q), _MM_HINT_T1);
    if (apf && (k & 15) == 0) /* A's rows in place read from memory (a big W): 4 lines ahead each */
      for (int r = 0; r < R; r++) _mm_prefetch((const char *)(ar[r] + k + 64), _MM_HINT_T0);
    __m512 b0 = bmask ? _mm512_maskz_loadu_ps(bm0, bk) : _mm512_loadu_ps(bk);
    __m512 b1 = bmask ? _mm512_maskz_loadu_ps(bm1, bk + bhi) : _mm512_loadu_ps(bk + bhi);
    __m512 a;
#define ROW(r, x, y)                                         \
  if (r < R) {                                               \
    a = _mm512_set1_ps(A ? ar[r][k] : ap[r]);                \
    x = _mm512_fmadd_ps(a, b0, x);                           \
    y = _mm512_fmadd_ps(a, b1, y);                           \
  }
    ROW(0, c0a, c0b) ROW(1, c1a, c1b) ROW(2, c2a, c2b) ROW(3, c3a, c3b) ROW(4, c4a, c4b) ROW(5, c5a, c5b)
    ROW(6, c6a, c6b) ROW(7, c7a, c7b) ROW(8, c8a, c8b) ROW(9, c9a, c9b) ROW(10, cAa, cAb) ROW(11, cBa, cBb)
#undef ROW
    if (!A) ap += KILN_SGEMM_WIDE_MR;
    if (!boff) bp += KILN_SGEMM_WIDE_NR;
  }
  __m512 acc[KILN_SGEMM_WIDE_MR][2] = {{c0a, c0b}, {c1a, c1b}, {c2a, c2b}, {c3a, c3b}, {c4a, c4b}, {c5a, c5b},
                                       {c6a, c6b}, {c7a, c7b}, {c8a, c8b}, {c9a, c9b}, {cAa, cAb}, {cBa, cBb}};
  __mmask16 m0 = mask_of(nr), m1 = mask_of(nr - 16);
  __m512 vb = _mm512_set1_ps(beta), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  __m512 cb0 = _mm512_setzero_ps(), cb1 = cb0, vsc = _mm512_set1_ps(cscale);
  if (cbias) { /* a bias row (kiln_sgemm_micro_cb_fn): read up to column nr */
    cb0 = _mm512_maskz_loadu_ps(m0, cbias);
    cb1 = _mm512_maskz_loadu_ps(m1, cbias + 16);
  }
  for (int r = 0; r < mr; r++) {
    float *y = C + r * ldc;
    __m512 l = acc[r][0], h = acc[r][1];
    if (beta != 0) {
      l = _mm512_add_ps(l, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m0, y)));
      h = _mm512_add_ps(h, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m1, y + 16)));
    }
    if (cscale != 1.0f) { /* kiln_sgemm_micro_cb_fn: the scale, then the bias row */
      l = _mm512_mul_ps(l, vsc);
      h = _mm512_mul_ps(h, vsc);
    }
    if (cbias) {
      l = _mm512_add_ps(l, cb0);
      h = _mm512_add_ps(h, cb1);
    }
    if (post && bias) {
      __m512 vr = _mm512_set1_ps(bias[r]);
      l = _mm512_add_ps(l, vr);
      h = _mm512_add_ps(h, vr);
    }
    if (post && clamp) { /* max(lo, v) = lo > v ? lo : v and min(hi, v) = hi < v ? hi : v: v stays when NaN */
      l = _mm512_min_ps(vhi, _mm512_max_ps(vlo, l));
      h = _mm512_min_ps(vhi, _mm512_max_ps(vlo, h));
    }
    _mm512_mask_storeu_ps(y, m0, l);
    _mm512_mask_storeu_ps(y + 16, m1, h);
  }
}

/* The strip's rows past mr are zero (or not needed): a tile of at most 4
 * or 8 rows (M 64 = 5 x 12 + 4, M 32 = 2 x 12 + 8) computes only those
 * accumulators, a third or two thirds of the fmas. Each element's
 * operations are the same whatever R. */
static inline __attribute__((always_inline)) void micro(int64_t kc, const float *restrict ap, const float *A,
                                                         int64_t lda, const float *restrict bp, const int64_t *boff,
                                                         int64_t bhi, float beta, float *C, int64_t ldc, int mr,
                                                         int nr, bool post, const float *bias, bool clamp, float lo,
                                                         float hi, bool pf, bool apf, const float *spf, int64_t spfs,
                                                         bool xpf) {
#define MICRO_R(R, M)                                                                                               \
  micro_rows(R, M, pf, apf, xpf, kc, ap, A, lda, bp, boff, bhi, beta, C, ldc, mr, nr, post, bias, clamp, lo, hi, NULL, \
             1.0f, spf, spfs)
  if (boff && nr < KILN_SGEMM_WIDE_NR) { /* the direct conv's last tile of a run: B loads masked at nr */
    if (mr <= 4) MICRO_R(4, true);
    else if (mr <= 8) MICRO_R(8, true);
    else MICRO_R(KILN_SGEMM_WIDE_MR, true);
    return;
  }
  if (mr <= 4) MICRO_R(4, false);
  else if (mr <= 8) MICRO_R(8, false);
  else MICRO_R(KILN_SGEMM_WIDE_MR, false);
#undef MICRO_R
}

void kiln_sgemm_micro_wide_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                  int64_t ldc, int mr, int nr) {
  micro(kc, ap, NULL, 0, bp, NULL, 16, beta, C, ldc, mr, nr, false, NULL, false, 0.0f, 0.0f, false, false, NULL, 0,
        false);
}

void kiln_sgemm_micro_post_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                  int64_t ldc, int mr, int nr, const float *bias, bool clamp, float lo, float hi) {
  micro(kc, ap, NULL, 0, bp, NULL, 16, beta, C, ldc, mr, nr, true, bias, clamp, lo, hi, false, false, NULL, 0, false);
}

void kiln_conv_direct_micro_avx512(int64_t kc, const float *restrict ap, const float *x, const int64_t *off,
                                   int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr, const float *bias,
                                   bool clamp, float lo, float hi) {
  if (!off) __builtin_unreachable(); /* the offsets are always given: no test of boff in the loop */
  micro(kc, ap, NULL, 0, x, off, xhi, beta, C, ldc, mr, nr, true, bias, clamp, lo, hi, true, false, NULL, 0, false);
}

void kiln_conv_direct_micro_stream_avx512(int64_t kc, const float *restrict ap, const float *x, const int64_t *off,
                                          int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                          const float *bias, bool clamp, float lo, float hi) {
  if (!off) __builtin_unreachable();
  micro(kc, ap, NULL, 0, x, off, xhi, beta, C, ldc, mr, nr, true, bias, clamp, lo, hi, false, false, NULL, 0, true);
}

void kiln_conv_direct_micro_a_avx512(int64_t kc, const float *A, int64_t lda, const float *x, const int64_t *off,
                                     int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                     const float *bias, bool clamp, float lo, float hi) {
  if (!off || !A) __builtin_unreachable();
  micro(kc, NULL, A, lda, x, off, xhi, beta, C, ldc, mr, nr, true, bias, clamp, lo, hi, true, false, NULL, 0, false);
}

void kiln_conv_direct_micro_a_far_avx512(int64_t kc, const float *A, int64_t lda, const float *x, const int64_t *off,
                                         int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                         const float *bias, bool clamp, float lo, float hi) {
  if (!off || !A) __builtin_unreachable();
  micro(kc, NULL, A, lda, x, off, xhi, beta, C, ldc, mr, nr, true, bias, clamp, lo, hi, true, true, NULL, 0, false);
}

void kiln_conv_direct_micro_a_stream_avx512(int64_t kc, const float *A, int64_t lda, const float *x,
                                            const int64_t *off, int64_t xhi, float beta, float *C, int64_t ldc,
                                            int mr, int nr, const float *bias, bool clamp, float lo, float hi) {
  if (!off || !A) __builtin_unreachable();
  micro(kc, NULL, A, lda, x, off, xhi, beta, C, ldc, mr, nr, true, bias, clamp, lo, hi, false, false, NULL, 0, true);
}

/* The micro-kernel reading A in place (sgemm.h kiln_sgemm_micro_a_fn):
 * row r of the strip is A + r·lda (rows past mr read row 0, their
 * accumulators never stored), so broadcast k of row r is A[r·lda + k] —
 * the value the packed strip holds (alpha 1), the same fmas in the same
 * order: the packed kernel's bits. */
void kiln_sgemm_micro_a_avx512(int64_t kc, const float *A, int64_t lda, const float *restrict bp, float beta,
                               float *C, int64_t ldc, int mr, int nr) {
#define MICRO_A(R)                                                                                            \
  micro_rows(R, false, false, false, false, kc, NULL, A, lda, bp, NULL, 16, beta, C, ldc, mr, nr, false, NULL, false, \
             0.0f, 0.0f, NULL, 1.0f, NULL, 0)
  if (mr <= 4) MICRO_A(4);
  else if (mr <= 8) MICRO_A(8);
  else MICRO_A(KILN_SGEMM_WIDE_MR);
#undef MICRO_A
}

/* A scale and a bias row in the store (sgemm.h kiln_sgemm_micro_cb_fn): A
 * in place or packed, the other kernels' fmas, both applied after the beta
 * step. */
static inline __attribute__((always_inline)) void micro_cb(int64_t kc, const float *ap, const float *A, int64_t lda,
                                                            const float *restrict bp, float beta, float *C, int64_t ldc,
                                                            int mr, int nr, const float *cbias, float scale,
                                                            const float *spf, int64_t spfs) {
#define MICRO_CB(R, AP, AA)                                                                                  \
  micro_rows(R, false, false, false, false, kc, AP, AA, lda, bp, NULL, 16, beta, C, ldc, mr, nr, false, NULL, false, \
             0.0f, 0.0f, cbias, scale, spf, spfs)
  if (A) {
    if (mr <= 4) MICRO_CB(4, NULL, A);
    else if (mr <= 8) MICRO_CB(8, NULL, A);
    else MICRO_CB(KILN_SGEMM_WIDE_MR, NULL, A);
  } else {
    if (mr <= 4) MICRO_CB(4, ap, NULL);
    else if (mr <= 8) MICRO_CB(8, ap, NULL);
    else MICRO_CB(KILN_SGEMM_WIDE_MR, ap, NULL);
  }
#undef MICRO_CB
}

void kiln_sgemm_micro_cb_avx512(int64_t kc, const float *ap, const float *A, int64_t lda, const float *restrict bp,
                                float beta, float *C, int64_t ldc, int mr, int nr, const float *cbias, float scale) {
  micro_cb(kc, ap, A, lda, bp, beta, C, ldc, mr, nr, cbias, scale, NULL, 0);
}

/* The wide and scale/bias-row kernels with a prefetch stream (sgemm.h
 * kiln_sgemm_micro_pf_fn): the same operations, plus the hints. */
void kiln_sgemm_micro_wide_pf_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float beta,
                                     float *C, int64_t ldc, int mr, int nr, const float *pf, int64_t pfs) {
  micro(kc, ap, NULL, 0, bp, NULL, 16, beta, C, ldc, mr, nr, false, NULL, false, 0.0f, 0.0f, false, false, pf, pfs,
        false);
}

void kiln_sgemm_micro_cb_pf_avx512(int64_t kc, const float *ap, const float *A, int64_t lda, const float *restrict bp,
                                   float beta, float *C, int64_t ldc, int mr, int nr, const float *cbias, float scale,
                                   const float *pf, int64_t pfs) {
  micro_cb(kc, ap, A, lda, bp, beta, C, ldc, mr, nr, cbias, scale, pf, pfs);
}

/* The few-rows kernel (sgemm.h kiln_sgemm_rows_fn). Every element gets the
 * wide GEMM's operations: per KC slice, fmas in k order from zero, then
 * acc + beta·C at the first slice and acc + C after. Two loop orders:
 * - up to 64 columns: MR rows (1..4) x 64 columns in 16 zmm accumulators;
 * - wider: the slice's rows of B read in storage order (one row of B at a
 *   time across all the columns, accumulators in an L1-resident buffer).
 *   Reading B column block by column block (64 floats of each row, the row
 *   pitch apart) ran 1.3-1.7x slower on a 1280 x 1000 B read from memory
 *   (MobileNetV2's classifier): the hardware prefetcher streams rows. */
static inline __attribute__((always_inline)) void rows_block(int MR, bool transA, int64_t j, int64_t p0, int64_t kc,
                                                              float alpha, const float *A, int64_t lda,
                                                              const float *B, int64_t ldb, float beta, float *C,
                                                              int64_t ldc, const __mmask16 *m) {
  __m512 acc[4][4];
  for (int i = 0; i < MR; i++)
    for (int v = 0; v < 4; v++) acc[i][v] = _mm512_setzero_ps();
  for (int64_t k = p0; k < p0 + kc; k++) {
    const float *bk = B + k * ldb + j;
    __m512 b[4] = {_mm512_maskz_loadu_ps(m[0], bk), _mm512_maskz_loadu_ps(m[1], bk + 16),
                   _mm512_maskz_loadu_ps(m[2], bk + 32), _mm512_maskz_loadu_ps(m[3], bk + 48)};
    for (int i = 0; i < MR; i++) {
      float ai = transA ? A[k * lda + i] : A[i * lda + k];
      __m512 a = _mm512_set1_ps(alpha != 1.0f ? alpha * ai : ai);
      for (int v = 0; v < 4; v++) acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
    }
  }
  __m512 vb = _mm512_set1_ps(p0 == 0 ? beta : 1.0f);
  for (int i = 0; i < MR; i++)
    for (int v = 0; v < 4; v++) {
      float *y = C + i * ldc + j + 16 * v;
      __m512 r = acc[i][v];
      if (p0 > 0 || beta != 0) r = _mm512_add_ps(r, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m[v], y)));
      _mm512_mask_storeu_ps(y, m[v], r);
    }
}

static inline __attribute__((always_inline)) void rows_stream(int MR, bool transA, int64_t j0, int64_t n, int64_t p0,
                                                               int64_t kc, float alpha, const float *A, int64_t lda,
                                                               const float *B, int64_t ldb, float beta, float *C,
                                                               int64_t ldc, float *acc) {
  __mmask16 mt = mask_of((int)(n % 16));
  int64_t nf = n / 16 * 16;
  for (int64_t q = 0; q < MR * n; q++) acc[q] = 0.0f;
  int64_t k = p0, kend = p0 + kc;
  /* Four rows of B a pass over the sums: each sum's fmas in the same k order (the same bits), a quarter of the
     sums' loads and stores, which bound one row a pass. The next four rows into L2 (a hint): into L1, or 8-16
     rows ahead, was slower (GEMM_CONV.md "The classifier four rows a pass") */
  for (; k + 4 <= kend; k += 4) {
    const float *bk = B + k * ldb + j0;
    __m512 a[4][4];
    for (int i = 0; i < MR; i++)
      for (int u = 0; u < 4; u++) {
        float ai = transA ? A[(k + u) * lda + i] : A[i * lda + k + u];
        a[i][u] = _mm512_set1_ps(alpha != 1.0f ? alpha * ai : ai);
      }
    bool ahead = k + 8 <= kend;
    for (int64_t jj = 0; jj < nf; jj += 16) {
      if (ahead)
        for (int u = 0; u < 4; u++) _mm_prefetch((const char *)(bk + (4 + u) * ldb + jj), _MM_HINT_T1);
      __m512 b0 = _mm512_loadu_ps(bk + jj), b1 = _mm512_loadu_ps(bk + ldb + jj);
      __m512 b2 = _mm512_loadu_ps(bk + 2 * ldb + jj), b3 = _mm512_loadu_ps(bk + 3 * ldb + jj);
      for (int i = 0; i < MR; i++) {
        __m512 r = _mm512_fmadd_ps(a[i][0], b0, _mm512_loadu_ps(acc + i * n + jj));
        r = _mm512_fmadd_ps(a[i][1], b1, r);
        r = _mm512_fmadd_ps(a[i][2], b2, r);
        _mm512_storeu_ps(acc + i * n + jj, _mm512_fmadd_ps(a[i][3], b3, r));
      }
    }
    if (mt) {
      __m512 b0 = _mm512_maskz_loadu_ps(mt, bk + nf), b1 = _mm512_maskz_loadu_ps(mt, bk + ldb + nf);
      __m512 b2 = _mm512_maskz_loadu_ps(mt, bk + 2 * ldb + nf), b3 = _mm512_maskz_loadu_ps(mt, bk + 3 * ldb + nf);
      for (int i = 0; i < MR; i++) {
        __m512 r = _mm512_fmadd_ps(a[i][0], b0, _mm512_maskz_loadu_ps(mt, acc + i * n + nf));
        r = _mm512_fmadd_ps(a[i][1], b1, r);
        r = _mm512_fmadd_ps(a[i][2], b2, r);
        _mm512_mask_storeu_ps(acc + i * n + nf, mt, _mm512_fmadd_ps(a[i][3], b3, r));
      }
    }
  }
  for (; k < kend; k++) {
    const float *bk = B + k * ldb + j0;
    __m512 a[4];
    for (int i = 0; i < MR; i++) {
      float ai = transA ? A[k * lda + i] : A[i * lda + k];
      a[i] = _mm512_set1_ps(alpha != 1.0f ? alpha * ai : ai);
    }
    /* B's row k + 4 into L1 (a hint): a classifier's B comes from memory once a run, and the hardware prefetcher
       alone left MobileNetV2's 1280 x 1000 at ~204 us a run, 167 with the hint (onnxruntime 168; ResNet-18's
       512 x 1000 93 -> 84; 8 rows ahead measured the same as 4) */
    bool ahead = k + 4 < p0 + kc;
    for (int64_t jj = 0; jj < nf; jj += 16) {
      if (ahead) _mm_prefetch((const char *)(bk + 4 * ldb + jj), _MM_HINT_T0);
      __m512 b = _mm512_loadu_ps(bk + jj);
      for (int i = 0; i < MR; i++)
        _mm512_storeu_ps(acc + i * n + jj, _mm512_fmadd_ps(a[i], b, _mm512_loadu_ps(acc + i * n + jj)));
    }
    if (mt) {
      __m512 b = _mm512_maskz_loadu_ps(mt, bk + nf);
      for (int i = 0; i < MR; i++)
        _mm512_mask_storeu_ps(acc + i * n + nf, mt,
                              _mm512_fmadd_ps(a[i], b, _mm512_maskz_loadu_ps(mt, acc + i * n + nf)));
    }
  }
  __m512 vb = _mm512_set1_ps(p0 == 0 ? beta : 1.0f);
  for (int i = 0; i < MR; i++)
    for (int64_t jj = 0; jj < n; jj += 16) {
      __mmask16 m = jj < nf ? (__mmask16)0xffff : mt;
      float *y = C + i * ldc + j0 + jj;
      __m512 r = _mm512_maskz_loadu_ps(m, acc + i * n + jj);
      if (p0 > 0 || beta != 0) r = _mm512_add_ps(r, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, y)));
      _mm512_mask_storeu_ps(y, m, r);
    }
}

/* One row, one vector of columns: four KC slices summed at once (four
 * independent fma chains instead of one: a GEMV like 8192 x 10 is bound by
 * the chain's latency), then added to C in slice order. */
static void rows_one_vector(bool transA, int64_t j, int64_t n, int64_t K, float alpha, const float *A, int64_t lda,
                            const float *B, int64_t ldb, float beta, float *C) {
  __mmask16 m = mask_of((int)n);
  for (int64_t p0 = 0; p0 < K;) {
    int64_t start[4], len[4], longest = 0; /* up to four slices (kiln_sgemm_wide_kc) */
    int ns = 0;
    while (ns < 4 && p0 < K) {
      start[ns] = p0;
      len[ns] = kiln_sgemm_wide_kc(K, p0);
      if (len[ns] > longest) longest = len[ns];
      p0 += len[ns++];
    }
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t k = 0; k < longest; k++)
      for (int s = 0; s < ns; s++) {
        if (k >= len[s]) continue;
        int64_t kk = start[s] + k;
        float a = transA ? A[kk * lda] : A[kk];
        acc[s] = _mm512_fmadd_ps(_mm512_set1_ps(alpha != 1.0f ? alpha * a : a),
                                 _mm512_maskz_loadu_ps(m, B + kk * ldb + j), acc[s]);
      }
    for (int s = 0; s < ns; s++) {
      __m512 r = acc[s];
      float b = start[s] == 0 ? beta : 1.0f;
      if (b != 0) r = _mm512_add_ps(r, _mm512_mul_ps(_mm512_set1_ps(b), _mm512_maskz_loadu_ps(m, C + j)));
      _mm512_mask_storeu_ps(C + j, m, r);
    }
  }
}

void kiln_sgemm_rows_avx512(bool transA, int64_t M, int64_t j0, int64_t j1, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, float *acc) {
  if (M == 1 && j1 - j0 <= 16 && K > KILN_SGEMM_WIDE_KC_LAST) {
    rows_one_vector(transA, j0, j1 - j0, K, alpha, A, lda, B, ldb, beta, C);
    return;
  }
  if (j1 - j0 > 64) {
    for (int64_t p0 = 0, kc, n = j1 - j0; p0 < K; p0 += kc) {
      kc = kiln_sgemm_wide_kc(K, p0);
      switch (M) {
      case 1: rows_stream(1, transA, j0, n, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, acc); break;
      case 2: rows_stream(2, transA, j0, n, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, acc); break;
      case 3: rows_stream(3, transA, j0, n, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, acc); break;
      default: rows_stream(4, transA, j0, n, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, acc); break;
      }
    }
    return;
  }
  for (int64_t p0 = 0, kc; p0 < K; p0 += kc) {
    kc = kiln_sgemm_wide_kc(K, p0);
    for (int64_t j = j0; j < j1; j += 64) {
      int r = j1 - j < 64 ? (int)(j1 - j) : 64;
      __mmask16 m[4] = {mask_of(r), mask_of(r - 16), mask_of(r - 32), mask_of(r - 48)};
      switch (M) {
      case 1: rows_block(1, transA, j, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, m); break;
      case 2: rows_block(2, transA, j, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, m); break;
      case 3: rows_block(3, transA, j, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, m); break;
      default: rows_block(4, transA, j, p0, kc, alpha, A, lda, B, ldb, beta, C, ldc, m); break;
      }
    }
  }
}

/* The channel tile (sgemm.h kiln_conv_ct_fn): 14 pixels x 32 channels in
 * 28 accumulators; per k two aligned loads of W's transposed pack, 14
 * broadcasts of the pixels' inputs (one or two cache lines), and the
 * pixels' row k + 16 prefetched into L1 as the 12 x 32 direct tile does. */
void kiln_conv_ct_micro_avx512(int64_t kc, const float *wt, const float *x, const int64_t *off, int64_t jump,
                               const float *pf, int64_t pfs, float *T, bool add) {
  __m512 a0 = _mm512_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0, a4 = a0, b4 = a0;
  __m512 a5 = a0, b5 = a0, a6 = a0, b6 = a0, a7 = a0, b7 = a0, a8 = a0, b8 = a0, a9 = a0, b9 = a0, aA = a0, bA = a0;
  __m512 aB = a0, bB = a0, aC = a0, bC = a0, aD = a0, bD = a0;
  for (int64_t k = 0; k < kc; k++, wt += KILN_SGEMM_WIDE_NR) {
    const float *xk = x + off[k], *xj = xk + jump; /* pixels 7..13 at xj (KILN_CONV_CT_HALF) */
    if (k + 16 < kc) _mm_prefetch((const char *)(x + off[k + 16]), _MM_HINT_T0);
    /* W^T's row k + 24 (two lines) into L1: a W too big for the caches (ResNet-18's l4, 9.4 MB) streams from
       memory; a hint, never a fault (past the slice it touches the next one's or the pack's neighbours) */
    _mm_prefetch((const char *)(wt + 24 * KILN_SGEMM_WIDE_NR), _MM_HINT_T0);
    _mm_prefetch((const char *)(wt + 24 * KILN_SGEMM_WIDE_NR + 16), _MM_HINT_T0);
    for (int64_t q = 0; pf && q < pfs; q += 16) /* the next slice's share into L2: every line of the step's pfs */
      _mm_prefetch((const char *)(pf + k * pfs + q), _MM_HINT_T1);
    __m512 w0 = _mm512_loadu_ps(wt), w1 = _mm512_loadu_ps(wt + 16), v;
#define PX(src, p, lo, hi)               \
  v = _mm512_set1_ps(src[p]);            \
  lo = _mm512_fmadd_ps(v, w0, lo);       \
  hi = _mm512_fmadd_ps(v, w1, hi);
    PX(xk, 0, a0, b0) PX(xk, 1, a1, b1) PX(xk, 2, a2, b2) PX(xk, 3, a3, b3) PX(xk, 4, a4, b4) PX(xk, 5, a5, b5)
    PX(xk, 6, a6, b6) PX(xj, 7, a7, b7) PX(xj, 8, a8, b8) PX(xj, 9, a9, b9) PX(xj, 10, aA, bA) PX(xj, 11, aB, bB)
    PX(xj, 12, aC, bC) PX(xj, 13, aD, bD)
#undef PX
  }
  __m512 acc[KILN_CONV_CT_PX][2] = {{a0, b0}, {a1, b1}, {a2, b2}, {a3, b3}, {a4, b4}, {a5, b5}, {a6, b6},
                                    {a7, b7}, {a8, b8}, {a9, b9}, {aA, bA}, {aB, bB}, {aC, bC}, {aD, bD}};
  for (int p = 0; p < KILN_CONV_CT_PX; p++) {
    float *t = T + p * KILN_SGEMM_WIDE_NR;
    __m512 l = acc[p][0], h = acc[p][1];
    if (add) { /* acc + 1·T, as the 12 x 32 tile's beta 1 */
      l = _mm512_add_ps(l, _mm512_loadu_ps(t));
      h = _mm512_add_ps(h, _mm512_loadu_ps(t + 16));
    }
    _mm512_storeu_ps(t, l);
    _mm512_storeu_ps(t + 16, h);
  }
}

/* 16 x 16 floats transposed in registers: o[j] lane i = r[i] lane j
 * (unpack pairs, shuffle quads, then the 4 x 4 transpose of 128-bit
 * lanes). */
static inline __attribute__((always_inline)) void transpose16(const __m512 r[16], __m512 o[16]) {
  __m512 a[16], b[16];
  for (int k = 0; k < 8; k++) {
    a[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    a[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  for (int m = 0; m < 4; m++) { /* b[4m + q] lane L: channel 4L + q of pixels 4m..4m+3 */
    b[4 * m] = _mm512_shuffle_ps(a[4 * m], a[4 * m + 2], 0x44);
    b[4 * m + 1] = _mm512_shuffle_ps(a[4 * m], a[4 * m + 2], 0xEE);
    b[4 * m + 2] = _mm512_shuffle_ps(a[4 * m + 1], a[4 * m + 3], 0x44);
    b[4 * m + 3] = _mm512_shuffle_ps(a[4 * m + 1], a[4 * m + 3], 0xEE);
  }
  for (int q = 0; q < 4; q++) {
    __m512 c0 = _mm512_shuffle_f32x4(b[q], b[4 + q], 0x44), c1 = _mm512_shuffle_f32x4(b[q], b[4 + q], 0xEE);
    __m512 c2 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], 0x44), c3 = _mm512_shuffle_f32x4(b[8 + q], b[12 + q], 0xEE);
    o[q] = _mm512_shuffle_f32x4(c0, c2, 0x88);
    o[4 + q] = _mm512_shuffle_f32x4(c0, c2, 0xDD);
    o[8 + q] = _mm512_shuffle_f32x4(c1, c3, 0x88);
    o[12 + q] = _mm512_shuffle_f32x4(c1, c3, 0xDD);
  }
}

/* The tile's store (sgemm.h kiln_conv_ct_store_fn): each pixel's two
 * vectors of 32 channels loaded, the bias added and the clamp applied
 * (max(lo, v) then min(hi, v): v < lo ? lo : v and v > hi ? hi : v, NaN
 * kept, as the twin), each half of 16 channels transposed in registers
 * (pixels 14 and 15 zero) and stored as rows of px <= 14 lanes of Y. */
void kiln_conv_ct_store_avx512(const float *T, int64_t nc, int px, const float *bias, bool clamp, float lo,
                               float hi, float *y, int64_t ldy) {
  enum { PX = KILN_CONV_CT_PX, NR = KILN_SGEMM_WIDE_NR };
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  const __mmask16 m = mask_of(px < PX ? px : PX);
  for (int h = 0; h * 16 < nc; h++) {
    __m512 r[16], o[16];
    __m512 b = bias ? _mm512_maskz_loadu_ps(mask_of((int)nc - 16 * h), bias + 16 * h) : _mm512_setzero_ps();
    for (int p = 0; p < 16; p++) {
      __m512 v = p < PX ? _mm512_loadu_ps(T + p * NR + 16 * h) : _mm512_setzero_ps();
      if (bias) v = _mm512_add_ps(v, b);
      if (clamp) v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, v));
      r[p] = v;
    }
    transpose16(r, o);
    int n = nc - 16 * h < 16 ? (int)(nc - 16 * h) : 16;
    for (int c = 0; c < n; c++) _mm512_mask_storeu_ps(y + (16 * h + c) * ldy, m, o[c]);
  }
}
