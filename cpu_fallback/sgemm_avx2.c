/* cpu_fallback/sgemm_avx2: the AVX2/FMA versions of the depthwise row kernel
 * and of the strided gather (see sgemm.h; their twins are in sgemm.c). Built with -mavx2
 * -mfma; called only after kiln_la_isa() said AVX2.
 *
 * Each output is a chain of nk dependent fmas (nk = 9 for 3x3), so the
 * kernel keeps eight 8-lane chains in flight: 64 outputs per pass, and the
 * rest of the row (1..63 outputs) in one more pass with masked loads and
 * stores (a mask of 0 touches no memory). The clamp is applied to the
 * accumulators before the store. */
#include <immintrin.h>

#include "cpu_fallback/sgemm.h"

static __m256i lanes_below(int64_t r) { /* lanes l with l < r */
  int k = r < 0 ? 0 : r > 8 ? 8 : (int)r;
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* v < lo ? lo : v, then v > hi ? hi : v, NaN kept (the tile ops' clamp):
 * max_ps(a, b) is a > b ? a : b, min_ps(a, b) a < b ? a : b, each b when
 * unordered. */
static inline __m256 clamp8(__m256 v, __m256 lo, __m256 hi) { return _mm256_min_ps(hi, _mm256_max_ps(lo, v)); }

/* One row: y[i] from src[j][off + i]. */
static void dw_row(float *y, int64_t n, const float *const *src, int64_t off, const float *w, int nk, float bias,
                   float lo, float hi) {
  __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  int64_t i = 0;
#define DW_FULL(k) a##k = _mm256_fmadd_ps(wj, _mm256_loadu_ps(s + 8 * (k)), a##k)
  for (; i + 64 <= n; i += 64) {
    __m256 a0 = _mm256_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int j = 0; j < nk; j++) {
      __m256 wj = _mm256_broadcast_ss(&w[j]);
      const float *s = src[j] + off + i;
      DW_FULL(0);
      DW_FULL(1);
      DW_FULL(2);
      DW_FULL(3);
      DW_FULL(4);
      DW_FULL(5);
      DW_FULL(6);
      DW_FULL(7);
    }
    _mm256_storeu_ps(y + i, clamp8(a0, vlo, vhi));
    _mm256_storeu_ps(y + i + 8, clamp8(a1, vlo, vhi));
    _mm256_storeu_ps(y + i + 16, clamp8(a2, vlo, vhi));
    _mm256_storeu_ps(y + i + 24, clamp8(a3, vlo, vhi));
    _mm256_storeu_ps(y + i + 32, clamp8(a4, vlo, vhi));
    _mm256_storeu_ps(y + i + 40, clamp8(a5, vlo, vhi));
    _mm256_storeu_ps(y + i + 48, clamp8(a6, vlo, vhi));
    _mm256_storeu_ps(y + i + 56, clamp8(a7, vlo, vhi));
  }
#undef DW_FULL
  if (i < n) { /* 1..63 outputs: up to 8 chains, masked */
    int64_t r = n - i;
    __m256i m0 = lanes_below(r), m1 = lanes_below(r - 8), m2 = lanes_below(r - 16), m3 = lanes_below(r - 24);
    __m256i m4 = lanes_below(r - 32), m5 = lanes_below(r - 40), m6 = lanes_below(r - 48), m7 = lanes_below(r - 56);
    __m256 a0 = _mm256_set1_ps(bias), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
#define DW_PART(k)                                                                        \
  if (r > 8 * (k)) a##k = _mm256_fmadd_ps(wj, _mm256_maskload_ps(s + 8 * (k), m##k), a##k)
    for (int j = 0; j < nk; j++) {
      __m256 wj = _mm256_broadcast_ss(&w[j]);
      const float *s = src[j] + off + i;
      DW_PART(0);
      DW_PART(1);
      DW_PART(2);
      DW_PART(3);
      DW_PART(4);
      DW_PART(5);
      DW_PART(6);
      DW_PART(7);
    }
#undef DW_PART
#define DW_STORE(k) \
  if (r > 8 * (k)) _mm256_maskstore_ps(y + i + 8 * (k), m##k, clamp8(a##k, vlo, vhi))
    DW_STORE(0);
    DW_STORE(1);
    DW_STORE(2);
    DW_STORE(3);
    DW_STORE(4);
    DW_STORE(5);
    DW_STORE(6);
    DW_STORE(7);
#undef DW_STORE
  }
}

void kiln_dw_rows_avx2_fma(float *y, int64_t ys, const float *const *src, int64_t ss, int64_t rows, int64_t n,
                           const float *w, int nk, float bias, float lo, float hi) {
  for (int64_t r = 0; r < rows; r++) dw_row(y + r * ys, n, src, r * ss, w, nk, bias, lo, hi);
}

void kiln_la_gather_avx2(float *dst, const float *src, int64_t n, int64_t stride) {
  int64_t i = 0;
  if (stride == 2)
    for (; i + 9 <= n; i += 8) { /* reads src[2i .. 2i + 15] <= src[2(n - 1)] */
      __m256 a = _mm256_loadu_ps(src + 2 * i), b = _mm256_loadu_ps(src + 2 * i + 8);
      __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
      _mm256_storeu_ps(dst + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
    }
  if (stride == 2 && i < n) { /* the last 1..8: masked loads of src[2i .. 2(n - 1)], a masked store */
    int64_t r = n - i;
    __m256 a = _mm256_maskload_ps(src + 2 * i, lanes_below(2 * r - 1));
    __m256 b = _mm256_maskload_ps(src + 2 * i + 8, lanes_below(2 * r - 9));
    __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    _mm256_maskstore_ps(dst + i, lanes_below(r),
                        _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
    return;
  }
  for (; i < n; i++) dst[i] = src[i * stride];
}
