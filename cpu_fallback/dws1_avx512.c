/* cpu_fallback/dws1_avx512: the in-place stride-1 3 x 3 'same' depthwise
 * kernel with AVX-512F (dws1.h; its twin kiln_dw_s1_base is in dws1.c).
 * Built with -mavx512f -mfma; called only where kiln_la_cpu_has_avx512().
 *
 * The plane's columns in strips of up to 4 vectors of 16 (balanced: rows of
 * 112 as 3 + 4 vectors, of 56 as one strip of 3.5), each strip walked down
 * the rows once. Input row i (rows -1 and H: the padding, zero vectors, no
 * read) is loaded once, vector by vector from column 16·v of the row (the
 * last vector by opmask where the row ends inside it), and each vector's
 * columns shifted one left and one right in registers: valignd with the
 * neighbouring vector of the strip, or at the strip's edges with a
 * broadcast of the column just outside it (zero outside the row). The
 * three vectors feed output row i + 1 (tap row 0: its chain starts from the
 * bias), row i (tap row 1) and row i - 1 (tap row 2: then clamped and
 * stored). Three accumulators per vector, in rotation (the row loop
 * unrolled by three so each has a fixed register). Each output still gets
 * its nine taps in order from the bias, one fma each (w · 0 in the
 * padding), then the clamp: the twin's operations, the same bits. */
#include <immintrin.h>
#include <stdbool.h>

#include "cpu_fallback/dws1.h"

/* The lanes j with c + j < W (c < W). */
static inline __mmask16 cols(int64_t c, int64_t W) {
  return W - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (W - c)) - 1u);
}

/* Input row `row` (NULL: a padding row) of the strip of V vectors from
 * column c0 (FULL: its last vector inside the row) into the accumulators
 * of the output rows under it: A (row i + 1, from the bias) where doA, B
 * (row i) where doB, C (row i - 1, then stored to yc) where yc. */
static inline __attribute__((always_inline)) void step(const float *row, int64_t c0, int64_t W, const __m512 *wv,
                                                       __m512 vb, __m512 vlo, __m512 vhi, __m512 *A, __m512 *B,
                                                       __m512 *C, bool doA, bool doB, float *yc, const int V,
                                                       const bool FULL) {
  __m512 X[4], left, right;
  if (row) {
#pragma GCC unroll 4
    for (int v = 0; v < V; v++)
      X[v] = FULL || v < V - 1 ? _mm512_loadu_ps(row + c0 + 16 * v)
                               : _mm512_maskz_loadu_ps(cols(c0 + 16 * v, W), row + c0 + 16 * v);
    left = c0 > 0 ? _mm512_set1_ps(row[c0 - 1]) : _mm512_setzero_ps();
    right = c0 + 16 * V < W ? _mm512_set1_ps(row[c0 + 16 * V]) : _mm512_setzero_ps();
  } else {
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) X[v] = _mm512_setzero_ps();
    left = right = _mm512_setzero_ps();
  }
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) {
    /* columns c - 1 (lane 0 from the vector before) and c + 1 (lane 15 from the vector after) */
    __m512i xv = _mm512_castps_si512(X[v]);
    __m512 l = _mm512_castsi512_ps(_mm512_alignr_epi32(xv, _mm512_castps_si512(v > 0 ? X[v - 1] : left), 15));
    __m512 r = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v < V - 1 ? X[v + 1] : right), xv, 1));
    if (yc) {
      __m512 a = _mm512_fmadd_ps(wv[6], l, C[v]);
      a = _mm512_fmadd_ps(wv[7], X[v], a);
      a = _mm512_fmadd_ps(wv[8], r, a);
      a = _mm512_min_ps(vhi, _mm512_max_ps(vlo, a)); /* v stays when NaN, as the twin's compares */
      if (FULL || v < V - 1) _mm512_storeu_ps(yc + c0 + 16 * v, a);
      else _mm512_mask_storeu_ps(yc + c0 + 16 * v, cols(c0 + 16 * v, W), a);
    }
    if (doB) {
      B[v] = _mm512_fmadd_ps(wv[3], l, B[v]);
      B[v] = _mm512_fmadd_ps(wv[4], X[v], B[v]);
      B[v] = _mm512_fmadd_ps(wv[5], r, B[v]);
    }
    if (doA) {
      A[v] = _mm512_fmadd_ps(wv[0], l, vb);
      A[v] = _mm512_fmadd_ps(wv[1], X[v], A[v]);
      A[v] = _mm512_fmadd_ps(wv[2], r, A[v]);
    }
  }
}

/* Input row i of the walk for output rows [r0, r1), any i in [r0 - 1,
 * r1]: output row o's accumulators are a[o % 3]. */
static inline __attribute__((always_inline)) void step_at(float *y, const float *x, int64_t H, int64_t W, int64_t r0,
                                                          int64_t r1, int64_t i, int64_t c0, const __m512 *wv,
                                                          __m512 vb, __m512 vlo, __m512 vhi, __m512 *a0, __m512 *a1,
                                                          __m512 *a2, const int V, const bool FULL) {
  const float *row = i >= 0 && i < H ? x + i * W : NULL;
  float *yc = i - 1 >= r0 ? y + (i - 1) * W : NULL;
  bool doA = i + 1 < r1, doB = i >= r0 && i < r1;
  switch ((i + 3) % 3) {
  case 0: step(row, c0, W, wv, vb, vlo, vhi, a1, a0, a2, doA, doB, yc, V, FULL); break;
  case 1: step(row, c0, W, wv, vb, vlo, vhi, a2, a1, a0, doA, doB, yc, V, FULL); break;
  default: step(row, c0, W, wv, vb, vlo, vhi, a0, a2, a1, doA, doB, yc, V, FULL); break;
  }
}

/* Output rows [r0, r1): input rows r0 - 1 .. r1 (a row outside the plane
 * is padding). */
static inline __attribute__((always_inline)) void strip(float *y, const float *x, int64_t H, int64_t W, int64_t r0,
                                                        int64_t r1, int64_t c0, const __m512 *wv, __m512 vb,
                                                        __m512 vlo, __m512 vhi, const int V, const bool FULL) {
  __m512 a0[4], a1[4], a2[4];
#pragma GCC unroll 4
  for (int v = 0; v < 4; v++) a0[v] = a1[v] = a2[v] = vb; /* each set before it is read; for the compiler */
  int64_t i = r0 - 1;
  for (; i <= r1 && (i < r0 + 1 || (i % 3 + 3) % 3 != 1); i++)
    step_at(y, x, H, W, r0, r1, i, c0, wv, vb, vlo, vhi, a0, a1, a2, V, FULL);
  for (; i + 3 < r1; i += 3) { /* i % 3 == 1: rows i .. i + 2, all three output rows under each inside */
    step(x + i * W, c0, W, wv, vb, vlo, vhi, a2, a1, a0, true, true, y + (i - 1) * W, V, FULL);
    step(x + (i + 1) * W, c0, W, wv, vb, vlo, vhi, a0, a2, a1, true, true, y + i * W, V, FULL);
    step(x + (i + 2) * W, c0, W, wv, vb, vlo, vhi, a1, a0, a2, true, true, y + (i + 1) * W, V, FULL);
  }
  for (; i <= r1; i++) step_at(y, x, H, W, r0, r1, i, c0, wv, vb, vlo, vhi, a0, a1, a2, V, FULL);
}

#define DWS1_STRIP(V)                                                                           \
  case V:                                                                                       \
    if (full) strip(y, x, H, W, r0, r1, 16 * v, wv, vb, vlo, vhi, V, true);                     \
    else strip(y, x, H, W, r0, r1, 16 * v, wv, vb, vlo, vhi, V, false);                         \
    break

void kiln_dw_s1_avx512(float *y, const float *x, int64_t H, int64_t W, int64_t r0, int64_t r1, const float *w,
                       float bias, float lo, float hi) {
  if (r0 < 0) r0 = 0;
  if (r1 > H) r1 = H;
  if (r1 <= r0 || W <= 0) return;
  __m512 wv[9], vb = _mm512_set1_ps(bias), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  for (int j = 0; j < 9; j++) wv[j] = _mm512_set1_ps(w[j]);
  int64_t nv = (W + 15) / 16, ns = (nv + 3) / 4; /* strips of at most 4 vectors, balanced */
  for (int64_t v = 0, s = 0; s < ns; s++) {
    int V = (int)((nv - v) / (ns - s));
    bool full = 16 * (v + V) <= W;
    switch (V) {
      DWS1_STRIP(1);
      DWS1_STRIP(2);
      DWS1_STRIP(3);
      DWS1_STRIP(4);
    }
    v += V;
  }
}
#undef DWS1_STRIP
