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

void kiln_sgemm_micro_wide_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                  int64_t ldc, int mr, int nr) {
  __m512 c0a = _mm512_setzero_ps(), c0b = c0a, c1a = c0a, c1b = c0a, c2a = c0a, c2b = c0a, c3a = c0a, c3b = c0a;
  __m512 c4a = c0a, c4b = c0a, c5a = c0a, c5b = c0a, c6a = c0a, c6b = c0a, c7a = c0a, c7b = c0a;
  __m512 c8a = c0a, c8b = c0a, c9a = c0a, c9b = c0a, cAa = c0a, cAb = c0a, cBa = c0a, cBb = c0a;
  for (int64_t k = 0; k < kc; k++) {
    __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
    __m512 a;
#define ROW(r, x, y)                  \
  a = _mm512_set1_ps(ap[r]);          \
  x = _mm512_fmadd_ps(a, b0, x);      \
  y = _mm512_fmadd_ps(a, b1, y);
    ROW(0, c0a, c0b) ROW(1, c1a, c1b) ROW(2, c2a, c2b) ROW(3, c3a, c3b) ROW(4, c4a, c4b) ROW(5, c5a, c5b)
    ROW(6, c6a, c6b) ROW(7, c7a, c7b) ROW(8, c8a, c8b) ROW(9, c9a, c9b) ROW(10, cAa, cAb) ROW(11, cBa, cBb)
#undef ROW
    ap += KILN_SGEMM_WIDE_MR;
    bp += KILN_SGEMM_WIDE_NR;
  }
  __m512 acc[KILN_SGEMM_WIDE_MR][2] = {{c0a, c0b}, {c1a, c1b}, {c2a, c2b}, {c3a, c3b}, {c4a, c4b}, {c5a, c5b},
                                       {c6a, c6b}, {c7a, c7b}, {c8a, c8b}, {c9a, c9b}, {cAa, cAb}, {cBa, cBb}};
  __mmask16 m0 = mask_of(nr), m1 = mask_of(nr - 16);
  __m512 vb = _mm512_set1_ps(beta);
  for (int r = 0; r < mr; r++) {
    float *y = C + r * ldc;
    __m512 lo = acc[r][0], hi = acc[r][1];
    if (beta != 0) {
      lo = _mm512_add_ps(lo, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m0, y)));
      hi = _mm512_add_ps(hi, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m1, y + 16)));
    }
    _mm512_mask_storeu_ps(y, m0, lo);
    _mm512_mask_storeu_ps(y + 16, m1, hi);
  }
}
