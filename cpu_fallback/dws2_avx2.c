/* cpu_fallback/dws2_avx2: the in-place stride-2 depthwise kernel with
 * AVX2/FMA (dws2.h; twin kiln_dw_s2_base in dws2.c), 8 outputs per vector:
 * the 16 input columns under them split into even and odd ones with
 * vshufps + vpermpd, loads masked (vmaskmovps: no fault on masked lanes)
 * where a vector reaches the padding. Built with -mavx2 -mfma. */
#include <immintrin.h>

#include "cpu_fallback/dws2.h"

/* Columns c .. c + 7 of row r (NULL: zero), masked to [0, W) unless inside. */
static inline __m256 cols8(const float *r, int64_t c, int64_t W, bool inside) {
  if (!r) return _mm256_setzero_ps();
  if (inside) return _mm256_loadu_ps(r + c);
  __m256i j = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)c));
  __m256i m = _mm256_and_si256(_mm256_cmpgt_epi32(j, _mm256_set1_epi32(-1)),
                               _mm256_cmpgt_epi32(_mm256_set1_epi32((int)W), j));
  return _mm256_maskload_ps((const float *)((uintptr_t)r + (uintptr_t)(c * (int64_t)sizeof(float))), m);
}

static inline __m256 even8(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
}
static inline __m256 odd8(__m256 a, __m256 b) {
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

void kiln_dw_s2_avx2(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt, int64_t pl,
                     const float *w, int KH, int KW, float bias, float lo, float hi) {
  if (KH > 8 || KW > 8) return;
  __m256 vb = _mm256_set1_ps(bias), vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
  const float *rows[8];
  int64_t reach = 2 * ((KW - 1) / 2) + 16;
  for (int64_t oy = 0; oy < OH; oy++) {
    for (int ky = 0; ky < KH; ky++) {
      int64_t iy = 2 * oy - pt + ky;
      rows[ky] = iy >= 0 && iy < H ? x + iy * W : NULL;
    }
    for (int64_t ox = 0; ox < OW; ox += 8) {
      int64_t bx = 2 * ox - pl;
      bool inside = bx >= 0 && bx + reach <= W;
      __m256 acc = vb;
      for (int ky = 0; ky < KH; ky++)
        for (int m = 0; 2 * m < KW; m++) {
          __m256 a = cols8(rows[ky], bx + 2 * m, W, inside), b = cols8(rows[ky], bx + 2 * m + 8, W, inside);
          acc = _mm256_fmadd_ps(_mm256_set1_ps(w[ky * KW + 2 * m]), even8(a, b), acc);
          if (2 * m + 1 < KW) acc = _mm256_fmadd_ps(_mm256_set1_ps(w[ky * KW + 2 * m + 1]), odd8(a, b), acc);
        }
      acc = _mm256_min_ps(vhi, _mm256_max_ps(vlo, acc)); /* v stays when NaN, as the twin's compares */
      float out[8];
      _mm256_storeu_ps(out, acc);
      for (int64_t i = 0; i < 8 && ox + i < OW; i++) y[oy * OW + ox + i] = out[i];
    }
  }
}
