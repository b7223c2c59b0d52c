/* cpu_fallback/pwt_avx512: the AVX-512F tile of the lanes-over-channels
 * pointwise convolution (pwt.h; its scalar twin kiln_pwt_tile_base is in
 * pwt.c). Built with -mavx512f -mfma; called only where
 * kiln_sgemm_pack_reader() is set (AVX-512F usable).
 *
 * 12 pixels x 32 channels in 24 zmm accumulators: per k, two loads of the
 * pack's row and 12 broadcasts of X's pixels (in place, k·ldx apart), each
 * feeding two fmas (the wide GEMM's tile turned round). A KC slice's sums
 * are added to the tile's totals (the caller's, between slices); then,
 * after the last slice, bias (a vector over
 * the channels), clamp, and each 16-channel half transposed in registers
 * (12 x 16 -> 16 x 12) and stored as 16 rows of mr pixels by opmask. */
#include <immintrin.h>

#include "cpu_fallback/pwt.h"
#include "cpu_fallback/sgemm.h"

static __mmask16 mask_of(int n) { return n <= 0 ? 0 : n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1u); }

/* t[l] lane r = v[r] lane l, r < 12 (lanes 12..15 zero). */
static inline void transpose12(const __m512 *v, __m512 *t) {
  __m512 a[12], u[3][4], z = _mm512_setzero_ps();
  for (int i = 0; i < 6; i++) { /* per 128-bit lane q: (v0[4q], v1[4q], v0[4q+1], v1[4q+1]) and the upper pair */
    a[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  for (int g = 0; g < 3; g++) { /* u[g][j]: rows 4g..4g+3 of column 4q + j, per 128-bit lane q */
    __m512d p = _mm512_castps_pd(a[4 * g]), q = _mm512_castps_pd(a[4 * g + 2]);
    __m512d r = _mm512_castps_pd(a[4 * g + 1]), s = _mm512_castps_pd(a[4 * g + 3]);
    u[g][0] = _mm512_castpd_ps(_mm512_unpacklo_pd(p, q));
    u[g][1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p, q));
    u[g][2] = _mm512_castpd_ps(_mm512_unpacklo_pd(r, s));
    u[g][3] = _mm512_castpd_ps(_mm512_unpackhi_pd(r, s));
  }
  for (int j = 0; j < 4; j++) { /* column 4q + j: lane q of u[0][j], u[1][j], u[2][j], then zero */
    __m512 s0 = _mm512_shuffle_f32x4(u[0][j], u[1][j], 0x44), s1 = _mm512_shuffle_f32x4(u[0][j], u[1][j], 0xEE);
    __m512 s2 = _mm512_shuffle_f32x4(u[2][j], z, 0x44), s3 = _mm512_shuffle_f32x4(u[2][j], z, 0xEE);
    t[j] = _mm512_shuffle_f32x4(s0, s2, 0x88);
    t[4 + j] = _mm512_shuffle_f32x4(s0, s2, 0xDD);
    t[8 + j] = _mm512_shuffle_f32x4(s1, s3, 0x88);
    t[12 + j] = _mm512_shuffle_f32x4(s1, s3, 0xDD);
  }
}

/* R (4, 8 or 12) accumulator rows; FULL: mr == R (constant offsets into
 * X); else rows past mr read pixel 0 and are not stored. */
static inline __attribute__((always_inline)) void tile_rows(int R, bool FULL, int64_t K, int64_t p0, const float *x,
                                                             int64_t ldx, const float *wt, float *tot, float *y,
                                                             int64_t ldy, int mr, int nr, const float *bias,
                                                             bool clamp, float lo, float hi, const float *pf,
                                                             int64_t pfs) {
  int64_t kc = kiln_sgemm_wide_kc(K, p0), xo[KILN_PWT_MR];
  for (int r = 0; r < KILN_PWT_MR; r++) xo[r] = FULL || r < mr ? r : 0;
  __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a, c3b = c0a;
  __m512 c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a, c7a = c0a, c7b = c0a;
  __m512 c8a = c0a, c8b = c0a, c9a = c0a, c9b = c0a, cAa = c0a, cAb = c0a, cBa = c0a, cBb = c0a;
  const float *xk = x + p0 * ldx, *wk = wt + p0 * KILN_PWT_NR;
  for (int64_t k = 0; k < kc; k++, xk += ldx, wk += KILN_PWT_NR) {
    /* the pack's row k + 24 into L1, and the stream of the next slice's share into L2: hints, never a fault */
    _mm_prefetch((const char *)(wk + 24 * KILN_PWT_NR), _MM_HINT_T0);
    _mm_prefetch((const char *)(wk + 24 * KILN_PWT_NR + 16), _MM_HINT_T0);
    for (int64_t q = 0; pf && q < pfs; q += 16) /* every line of the step's pfs floats (up to 40 a step) */
      _mm_prefetch((const char *)(pf + k * pfs + q), _MM_HINT_T1);
    __m512 b0 = _mm512_loadu_ps(wk), b1 = _mm512_loadu_ps(wk + 16), a;
#define ROW(r, p, q)                                 \
  if (r < R) {                                       \
    a = _mm512_set1_ps(xk[FULL ? r : xo[r]]);        \
    p = _mm512_fmadd_ps(a, b0, p);                   \
    q = _mm512_fmadd_ps(a, b1, q);                   \
  }
    ROW(0, c0a, c0b) ROW(1, c1a, c1b) ROW(2, c2a, c2b) ROW(3, c3a, c3b) ROW(4, c4a, c4b) ROW(5, c5a, c5b)
    ROW(6, c6a, c6b) ROW(7, c7a, c7b) ROW(8, c8a, c8b) ROW(9, c9a, c9b) ROW(10, cAa, cAb) ROW(11, cBa, cBb)
#undef ROW
  }
  __m512 acc[KILN_PWT_MR][2] = {{c0a, c0b}, {c1a, c1b}, {c2a, c2b}, {c3a, c3b}, {c4a, c4b}, {c5a, c5b},
                                {c6a, c6b}, {c7a, c7b}, {c8a, c8b}, {c9a, c9b}, {cAa, cAb}, {cBa, cBb}};
  bool one = p0 == 0 && kc == K, last = p0 + kc == K;
  if (!one) /* the slices' sums in order: the wide GEMM's acc + 1·C */
    for (int r = 0; r < R; r++)
      for (int h = 0; h < 2; h++) {
        float *t = tot + r * KILN_PWT_NR + 16 * h;
        acc[r][h] = p0 ? _mm512_add_ps(acc[r][h], _mm512_loadu_ps(t)) : acc[r][h];
        if (!last) _mm512_storeu_ps(t, acc[r][h]);
      }
  if (!last) return;
  __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi), z = _mm512_setzero_ps();
  __mmask16 rm = mask_of(mr);
  for (int h = 0; h < 2 && 16 * h < nr; h++) {
    __mmask16 cm = mask_of(nr - 16 * h);
    __m512 vb = bias ? _mm512_maskz_loadu_ps(cm, bias + 16 * h) : z, v[KILN_PWT_MR], t[16];
    for (int r = 0; r < KILN_PWT_MR; r++) {
      __m512 e = r < R ? acc[r][h] : z;
      if (bias) e = _mm512_add_ps(e, vb);
      if (clamp) e = _mm512_min_ps(vhi, _mm512_max_ps(vlo, e)); /* v stays when NaN, as the twin's compares */
      v[r] = e;
    }
    transpose12(v, t);
    int cn = nr - 16 * h < 16 ? nr - 16 * h : 16;
    float *yh = y + 16 * h * ldy;
    for (int c = 0; c < cn; c++) _mm512_mask_storeu_ps(yh + c * ldy, rm, t[c]);
  }
}

void kiln_pwt_tile_avx512(int64_t K, int64_t p0, const float *x, int64_t ldx, const float *wt, float *tot, float *y,
                          int64_t ldy, int mr, int nr, const float *bias, bool clamp, float lo, float hi, const float *pf,
                          int64_t pfs) {
#define TILE(R, F) tile_rows(R, F, K, p0, x, ldx, wt, tot, y, ldy, mr, nr, bias, clamp, lo, hi, pf, pfs)
  if (mr == KILN_PWT_MR) TILE(KILN_PWT_MR, true);
  else if (mr <= 4) TILE(4, false);
  else if (mr <= 8) TILE(8, false);
  else TILE(KILN_PWT_MR, false);
#undef TILE
}
