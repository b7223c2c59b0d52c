/* cpu_fallback/wino_avx512.c: Winograd's tile-row transforms (wino.h) with
 * AVX-512F, 16 tiles a vector (a masked tail); the same adds in the same
 * order as the scalar twin (wino_tf.inc), so the same bits. */
#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>

#include "cpu_fallback/wino.h"

static inline __mmask16 lanes(int64_t n) { return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1); }

/* Lanes i of [max(0, -pos), W - pos): the columns pos + i inside the row. */
static inline __mmask16 inside(int64_t pos, int64_t W) {
  return (__mmask16)(lanes(W - pos) & (pos < 0 ? ~lanes(-pos) : 0xffff));
}

/* 16 columns from pos of row (NULL: zeros), zeros outside [0, W). Left of the row (the padding) an expanding
   load: the row's first columns into the lanes from -pos, no address before the row formed. */
static inline __m512 cols16(const float *row, int64_t pos, int64_t W) {
  if (!row) return _mm512_setzero_ps();
  __mmask16 m = inside(pos, W);
  return pos >= 0 ? _mm512_maskz_loadu_ps(m, row + pos) : _mm512_maskz_expandloadu_ps(m, row);
}

void kiln_wino_in_row_avx512(const float *const *rows, int64_t x0, int64_t W, int64_t TW, float *o, int64_t CT) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t t = 0; t < TW; t += 16) {
    int64_t pos = x0 + 2 * t;
    __mmask16 k = lanes(TW - t);
    __m512 d[4][4];
    for (int r = 0; r < 4; r++) {
      const float *q = rows[r];
      __m512 a = cols16(q, pos, W), b = cols16(q, pos + 16, W);
      __m512 a2 = cols16(q, pos + 2, W), b2 = cols16(q, pos + 18, W);
      d[r][0] = _mm512_permutex2var_ps(a, ev, b);
      d[r][1] = _mm512_permutex2var_ps(a, od, b);
      d[r][2] = _mm512_permutex2var_ps(a2, ev, b2);
      d[r][3] = _mm512_permutex2var_ps(a2, od, b2);
    }
    __m512 e[4][4];
    for (int q = 0; q < 4; q++) {
      e[0][q] = _mm512_sub_ps(d[0][q], d[2][q]);
      e[1][q] = _mm512_add_ps(d[1][q], d[2][q]);
      e[2][q] = _mm512_sub_ps(d[2][q], d[1][q]);
      e[3][q] = _mm512_sub_ps(d[1][q], d[3][q]);
    }
    for (int r = 0; r < 4; r++) {
      float *w = o + 4 * r * CT + t;
      _mm512_mask_storeu_ps(w, k, _mm512_sub_ps(e[r][0], e[r][2]));
      _mm512_mask_storeu_ps(w + CT, k, _mm512_add_ps(e[r][1], e[r][2]));
      _mm512_mask_storeu_ps(w + 2 * CT, k, _mm512_sub_ps(e[r][2], e[r][1]));
      _mm512_mask_storeu_ps(w + 3 * CT, k, _mm512_sub_ps(e[r][1], e[r][3]));
    }
  }
}

static inline __m512 clamp16(__m512 v, __m512 lo, __m512 hi) {
  v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), v, lo);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);
}

void kiln_wino_out_row_avx512(const float *s, int64_t MT, int64_t TW, float b, bool clamp, float lo, float hi,
                              float *y0, float *y1) {
  const __m512i il = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i ih = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  __m512 vb = _mm512_set1_ps(b), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  for (int64_t t = 0; t < TW; t += 16) {
    __mmask16 k = lanes(TW - t), k0 = lanes(2 * (TW - t)), k1 = lanes(2 * (TW - t) - 16);
    __m512 a0[4], a1[4];
    for (int q = 0; q < 4; q++) {
      __m512 s0 = _mm512_maskz_loadu_ps(k, s + q * MT + t), s1 = _mm512_maskz_loadu_ps(k, s + (4 + q) * MT + t);
      __m512 s2 = _mm512_maskz_loadu_ps(k, s + (8 + q) * MT + t), s3 = _mm512_maskz_loadu_ps(k, s + (12 + q) * MT + t);
      a0[q] = _mm512_add_ps(_mm512_add_ps(s0, s1), s2);
      a1[q] = _mm512_sub_ps(_mm512_sub_ps(s1, s2), s3);
    }
    __m512 v00 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0[0], a0[1]), a0[2]), vb);
    __m512 v01 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(a0[1], a0[2]), a0[3]), vb);
    __m512 v10 = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a1[0], a1[1]), a1[2]), vb);
    __m512 v11 = _mm512_add_ps(_mm512_sub_ps(_mm512_sub_ps(a1[1], a1[2]), a1[3]), vb);
    if (clamp) v00 = clamp16(v00, vlo, vhi), v01 = clamp16(v01, vlo, vhi), v10 = clamp16(v10, vlo, vhi),
               v11 = clamp16(v11, vlo, vhi);
    _mm512_mask_storeu_ps(y0 + 2 * t, k0, _mm512_permutex2var_ps(v00, il, v01));
    _mm512_mask_storeu_ps(y0 + 2 * t + 16, k1, _mm512_permutex2var_ps(v00, ih, v01));
    _mm512_mask_storeu_ps(y1 + 2 * t, k0, _mm512_permutex2var_ps(v10, il, v11));
    _mm512_mask_storeu_ps(y1 + 2 * t + 16, k1, _mm512_permutex2var_ps(v10, ih, v11));
  }
}
