/* cpu_fallback/pwt_avx2: the AVX2/FMA tile of the lanes-over-channels
 * pointwise convolution (pwt.h; twin kiln_pwt_tile_base in pwt.c). Built
 * with -mavx2 -mfma; callable only where both are usable. Chosen by
 * kiln_pwt_tile() under the AVX2 setting without AVX-512F (W^T packed
 * alone there, by its own size rule: pwt.h kiln_pwt_plane_wanted).
 *
 * The 12 x 32 tile as sub-tiles of 6 pixels x 16 channels (12 ymm
 * accumulators: per k two loads of the pack's row and six broadcasts of X
 * in place); each KC slice's sums are added into the totals, then the
 * bias, clamp and the transposed store in scalar code (the twin's
 * operations). */
#include <immintrin.h>

#include "cpu_fallback/pwt.h"
#include "cpu_fallback/sgemm.h"

void kiln_pwt_tile_avx2(int64_t K, int64_t p0, const float *x, int64_t ldx, const float *wt, float *tot, float *y,
                        int64_t ldy, int mr, int nr, const float *bias, bool clamp, float lo, float hi, const float *pf,
                        int64_t pfs) {
  int64_t kc = kiln_sgemm_wide_kc(K, p0);
  /* the stream's lines as one burst before the passes (what pwt_task issued before the AVX-512 tile took the
     stream into its k loop; this tile's passes over k are up to four, not measured apart): hints only */
  for (int64_t q = 0; pf && q < pfs * kc; q += 16) __builtin_prefetch(pf + q);
  float own[KILN_PWT_MR * KILN_PWT_NR];
  if (p0 == 0 && kc == K) tot = own; /* one slice: the caller's totals are not used */
  for (int r0 = 0; r0 < mr; r0 += 6)
    for (int h = 0; h < 2 && 16 * h < nr; h++) {
      int64_t xo[6];
      for (int r = 0; r < 6; r++) xo[r] = r0 + r < mr ? r0 + r : r0; /* rows past mr: read pixel r0, not stored */
      __m256 acc[6][2];
      for (int r = 0; r < 6; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
      const float *xk = x + p0 * ldx, *wk = wt + p0 * KILN_PWT_NR + 16 * h;
      for (int64_t k = 0; k < kc; k++, xk += ldx, wk += KILN_PWT_NR) {
        __m256 b0 = _mm256_loadu_ps(wk), b1 = _mm256_loadu_ps(wk + 8);
#pragma GCC unroll 6
        for (int r = 0; r < 6; r++) {
          __m256 a = _mm256_broadcast_ss(xk + xo[r]);
          acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
          acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
      }
      for (int r = 0; r < 6 && r0 + r < mr; r++)
        for (int e = 0; e < 2; e++) {
          float *t = tot + (r0 + r) * KILN_PWT_NR + 16 * h + 8 * e;
          _mm256_storeu_ps(t, p0 ? _mm256_add_ps(acc[r][e], _mm256_loadu_ps(t)) : acc[r][e]);
        }
    }
  if (p0 + kc < K) return;
  for (int r = 0; r < mr; r++) /* the twin's operations, in scalar code */
    for (int c = 0; c < nr; c++) {
      float v = tot[r * KILN_PWT_NR + c];
      if (bias) v = v + bias[c];
      if (clamp) {
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
      }
      y[c * ldy + r] = v;
    }
}
