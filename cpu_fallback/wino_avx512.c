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

/* 16 columns from pos of row, lanes outside m zero; no address outside the row formed: none at all where no lane
   is inside (right of the row, or all padding), left of the row an expanding load (the row's first columns into the
   lanes from -pos). */
static inline __m512 cols16(const float *row, int64_t pos, __mmask16 m) {
  if (!m) return _mm512_setzero_ps();
  return pos >= 0 ? _mm512_maskz_loadu_ps(m, row + pos) : _mm512_maskz_expandloadu_ps(m, row);
}

/* B^T's row combination (rows 0..3 of a tile) on raw vectors of the 4 input rows: e0 = d0 - d2, e1 = d1 + d2,
   e2 = d2 - d1, e3 = d1 - d3 — lane by lane, so before the even/odd split the same values as after it. */
#define ROWS_BT(v0, v1, v2, v3)                                                                                \
  do {                                                                                                         \
    __m512 t0 = _mm512_sub_ps(v0, v2), t1 = _mm512_add_ps(v1, v2), t2 = _mm512_sub_ps(v2, v1);                 \
    v3 = _mm512_sub_ps(v1, v3), v0 = t0, v1 = t1, v2 = t2;                                                       \
  } while (0)

void kiln_wino_in_row_avx512(const float *const *rows, int64_t x0, int64_t W, int64_t TW, float *o, int64_t CT) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 z = _mm512_setzero_ps();
  for (int64_t t = 0; t < TW; t += 16) {
    int64_t pos = x0 + 2 * t;
    __mmask16 k = lanes(TW - t), m0 = inside(pos, W), m1 = inside(pos + 16, W), m2 = inside(pos + 2, W),
              m3 = inside(pos + 18, W);
    /* per input row: columns pos.. (a), pos+16.. (b), pos+2.. (a2), pos+18.. (b2) */
    __m512 a[4], b[4], a2[4], b2[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
      const float *q = rows[r];
      a[r] = q ? cols16(q, pos, m0) : z, b[r] = q ? cols16(q, pos + 16, m1) : z;
      a2[r] = q ? cols16(q, pos + 2, m2) : z, b2[r] = q ? cols16(q, pos + 18, m3) : z;
    }
    ROWS_BT(a[0], a[1], a[2], a[3]);
    ROWS_BT(b[0], b[1], b[2], b[3]);
    ROWS_BT(a2[0], a2[1], a2[2], a2[3]);
    ROWS_BT(b2[0], b2[1], b2[2], b2[3]);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) { /* tile row r: its 4 columns (even/odd splits), then B's column combination */
      __m512 e0 = _mm512_permutex2var_ps(a[r], ev, b[r]), e1 = _mm512_permutex2var_ps(a[r], od, b[r]);
      __m512 e2 = _mm512_permutex2var_ps(a2[r], ev, b2[r]), e3 = _mm512_permutex2var_ps(a2[r], od, b2[r]);
      float *w = o + 4 * r * CT + t;
      _mm512_mask_storeu_ps(w, k, _mm512_sub_ps(e0, e2));
      _mm512_mask_storeu_ps(w + CT, k, _mm512_add_ps(e1, e2));
      _mm512_mask_storeu_ps(w + 2 * CT, k, _mm512_sub_ps(e2, e1));
      _mm512_mask_storeu_ps(w + 3 * CT, k, _mm512_sub_ps(e1, e3));
    }
  }
}
#undef ROWS_BT

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
#pragma GCC unroll 4
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
