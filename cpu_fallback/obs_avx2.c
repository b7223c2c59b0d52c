/* cpu_fallback/obs_avx2: the observers' float32 fold (min/max, NaN/±inf
 * counts) with AVX2, called only after vmath's cpuid check. Same result as
 * kiln_obs_partial_fold_f32: minps/maxps keep the accumulator when the
 * element is NaN (NaN ignored, ±inf included); when a lane saw a value
 * that is not finite, one scalar pass counts NaN and infinities. */
#include <float.h>
#include <immintrin.h>

#include "ir/observe.h"

void kiln_cpu_obs_fold_f32_avx2(kiln_obs_partial *p, const float *x, int64_t n);

void kiln_cpu_obs_fold_f32_avx2(kiln_obs_partial *p, const float *x, int64_t n) {
  __m256 mn0 = _mm256_set1_ps(__builtin_inff()), mx0 = _mm256_set1_ps(-__builtin_inff());
  __m256 mn1 = mn0, mx1 = mx0, bad = _mm256_setzero_ps();
  const __m256 big = _mm256_set1_ps(FLT_MAX), sign = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    mn0 = _mm256_min_ps(a, mn0); /* a NaN in a: mn0 is kept */
    mx0 = _mm256_max_ps(a, mx0);
    mn1 = _mm256_min_ps(b, mn1);
    mx1 = _mm256_max_ps(b, mx1);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_andnot_ps(sign, a), big, _CMP_NLE_UQ));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_andnot_ps(sign, b), big, _CMP_NLE_UQ));
  }
  mn0 = _mm256_min_ps(mn0, mn1);
  mx0 = _mm256_max_ps(mx0, mx1);
  float lo[8], hi[8];
  _mm256_storeu_ps(lo, mn0);
  _mm256_storeu_ps(hi, mx0);
  int any = _mm256_movemask_ps(bad) != 0;
  float l = lo[0], h = hi[0];
  for (int k = 1; k < 8; k++) {
    l = lo[k] < l ? lo[k] : l;
    h = hi[k] > h ? hi[k] : h;
  }
  for (; i < n; i++) {
    float v = x[i];
    l = v < l ? v : l;
    h = v > h ? v : h;
    any |= !(v <= FLT_MAX && v >= -FLT_MAX);
  }
  if ((double)l < p->min) p->min = l;
  if ((double)h > p->max) p->max = h;
  if (any)
    for (int64_t j = 0; j < n; j++) {
      float v = x[j];
      if (v != v) p->nan++;
      else if (v == __builtin_inff()) p->pos_inf++;
      else if (v == -__builtin_inff()) p->neg_inf++;
    }
  p->count += (uint64_t)(n > 0 ? n : 0);
}
