/* cpu_fallback/dw_avx512: the AVX-512F depthwise row kernel (sgemm.h
 * kiln_dw_rows; its scalar twin is in sgemm.c, its AVX2 sibling in
 * sgemm_avx2.c). Built with -mavx512f -mfma; called only where
 * kiln_la_cpu_has_avx512() (cpuid + XGETBV) said AVX-512F is usable.
 *
 * Each output is a chain of nk dependent fmas, so eight 16-lane chains are
 * kept in flight: along a row of more than 64 outputs (128 outputs per
 * pass, then one pass with as many chains as the rest needs), across rows
 * for rows of up to 64 (8 / v rows of v vectors at a time: rows of 56 two
 * at a time, of 7 or 14 eight at a time, so 7x7 or 14x14 planes need no
 * flat form). The last vector of a row is loaded and stored by opmask (a
 * masked load reads and faults on no lane outside the mask). The clamp is
 * applied to the accumulators before the store.
 * 3x3 taps at stride 1 on rows of up to 64 take a row-blocked form
 * (dw3_rows): each input row loaded once per column shift for the up to
 * three output rows reading it, the same fmas in the same order.
 *
 * Also the in-place kernel for small stride-1 planes (kiln_dw_plane: taps
 * as shifts of the plane, padding by opmask, no padded copy; planes of up
 * to 4 vectors with shifts of at most 16 held in registers and shifted by
 * vpermt2ps, two channels a call in kiln_dw_plane2) and the two
 * copies around the rows kernel (twins in sgemm.c): the stride-2 split of a
 * row into its even and odd elements in one pass (both phases of a stride-2
 * depthwise plane's row), and a copy of short rows between strides (the
 * input into a padded plane, the flat form's output out of its scratch)
 * without a memcpy call per row. */
#include <immintrin.h>

#include "cpu_fallback/sgemm.h"

/* v < lo ? lo : v, then v > hi ? hi : v, NaN kept (the tile ops' clamp):
 * max_ps(a, b) is a > b ? a : b, min_ps(a, b) a < b ? a : b, each b when
 * unordered. */
static inline __m512 clamp16(__m512 v, __m512 lo, __m512 hi) { return _mm512_min_ps(hi, _mm512_max_ps(lo, v)); }

/* One row: y[i] from src[j][off + i], eight chains along it. */
static void dw_row(float *y, int64_t n, const float *const *src, int64_t off, const float *w, int nk, __m512 b,
                   __m512 vlo, __m512 vhi) {
  int64_t i = 0;
#define DW_FULL(k) a##k = _mm512_fmadd_ps(wj, _mm512_loadu_ps(s + 16 * (k)), a##k)
#define DW_STORE(k) _mm512_storeu_ps(y + i + 16 * (k), clamp16(a##k, vlo, vhi))
  for (; i + 128 <= n; i += 128) {
    __m512 a0 = b, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int j = 0; j < nk; j++) {
      __m512 wj = _mm512_set1_ps(w[j]);
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
    DW_STORE(0);
    DW_STORE(1);
    DW_STORE(2);
    DW_STORE(3);
    DW_STORE(4);
    DW_STORE(5);
    DW_STORE(6);
    DW_STORE(7);
  }
#undef DW_FULL
#undef DW_STORE
  if (i == n) return;
  /* 1..127 outputs: chains 0..nv-1, chain nv-1 masked to its r - 16(nv-1) lanes */
  int64_t r = n - i;
  int nv = (int)((r + 15) / 16);
  __mmask16 last = (__mmask16)(0xffffu >> (16 * nv - r));
  __m512 a0 = b, a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
#define DW_PART(k)                                                                                                   \
  if (nv > (k))                                                                                                      \
  a##k = _mm512_fmadd_ps(wj, _mm512_maskz_loadu_ps(nv > (k) + 1 ? (__mmask16)0xffff : last, s + 16 * (k)), a##k)
  for (int j = 0; j < nk; j++) {
    __m512 wj = _mm512_set1_ps(w[j]);
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
  if (nv > (k))     \
  _mm512_mask_storeu_ps(y + i + 16 * (k), nv > (k) + 1 ? (__mmask16)0xffff : last, clamp16(a##k, vlo, vhi))
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

/* R rows of PER (1..4) vectors each, rows r0 .. r0 + R - 1: R · PER <= 8
 * chains, the last vector of each row by opmask. Inlined with constant R
 * and PER, so the slots are fixed: plain loads but for the masked ones. */
static inline __attribute__((always_inline)) void dw_group(float *y, int64_t ys, const float *const *src, int64_t ss,
                                                           int64_t r0, const float *w, int nk, __m512 b, __m512 vlo,
                                                           __m512 vhi, __mmask16 last, const int PER, const int R) {
  __m512 a[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) a[k] = b;
  for (int j = 0; j < nk; j++) {
    __m512 wj = _mm512_set1_ps(w[j]);
    const float *s = src[j] + r0 * ss;
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
      if (k < R * PER) {
        const float *q = s + (k / PER) * ss + 16 * (k % PER);
        __m512 x = k % PER == PER - 1 ? _mm512_maskz_loadu_ps(last, q) : _mm512_loadu_ps(q);
        a[k] = _mm512_fmadd_ps(wj, x, a[k]);
      }
  }
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++)
    if (k < R * PER) {
      float *q = y + (r0 + k / PER) * ys + 16 * (k % PER);
      if (k % PER == PER - 1) _mm512_mask_storeu_ps(q, last, clamp16(a[k], vlo, vhi));
      else _mm512_storeu_ps(q, clamp16(a[k], vlo, vhi));
    }
}

/* Rows of PER vectors, 8 / PER rows at a time, then one at a time. */
#define DW_GROUPS(PER)                                                                                  \
  do {                                                                                                  \
    int64_t r = 0;                                                                                      \
    for (; r + 8 / (PER) <= rows; r += 8 / (PER))                                                       \
      dw_group(y, ys, src, ss, r, w, nk, b, vlo, vhi, last, PER, 8 / (PER));                            \
    for (; r < rows; r++) dw_group(y, ys, src, ss, r, w, nk, b, vlo, vhi, last, PER, 1);                \
  } while (0)

/* 3x3 taps at stride 1 and dilation 1 (src[3·ky + kx] = src[0] + ky·ss + kx,
 * the padded plane of a stride-1 layer): R output rows of V vectors at a
 * time (columns c0 .. c0 + 16V, the last vector by opmask `last`), the nine
 * weights in registers. Input row i (of R + 2) is loaded once per column
 * shift kx and feeds the up to three output rows o = i - ky that read it:
 * (R + 2)·3·V loads instead of 9·R·V. Output row o still gets its taps in
 * order j = 3·ky + kx (input rows in order, kx in order within each), one
 * fma each from the bias: the rows kernel's operations, the same bits. */
static inline __attribute__((always_inline)) void dw3_group(float *y, int64_t ys, const float *s0, int64_t ss,
                                                            const __m512 *wv, __m512 b, __m512 vlo, __m512 vhi,
                                                            __mmask16 last, const int V, const int R) {
  __m512 a[16];
#pragma GCC unroll 16
  for (int k = 0; k < 16; k++) a[k] = b;
#pragma GCC unroll 18
  for (int i = 0; i < 18; i++)
    if (i < R + 2)
#pragma GCC unroll 3
      for (int kx = 0; kx < 3; kx++)
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++)
          if (v < V) {
            const float *q = s0 + i * ss + 16 * v + kx;
            __m512 x = v == V - 1 ? _mm512_maskz_loadu_ps(last, q) : _mm512_loadu_ps(q);
#pragma GCC unroll 3
            for (int ky = 2; ky >= 0; ky--) /* output rows i - 2 .. i: any order, each row's chain is its own */
              if (i - ky >= 0 && i - ky < R) a[(i - ky) * V + v] = _mm512_fmadd_ps(wv[3 * ky + kx], x, a[(i - ky) * V + v]);
          }
#pragma GCC unroll 16
  for (int k = 0; k < 16; k++)
    if (k < R * V) {
      float *q = y + (k / V) * ys + 16 * (k % V);
      if (k % V == V - 1) _mm512_mask_storeu_ps(q, last, clamp16(a[k], vlo, vhi));
      else _mm512_storeu_ps(q, clamp16(a[k], vlo, vhi));
    }
}

/* Rows kernel for 3x3 taps at stride 1 (see dw3_group), rows of up to 64
 * (kiln_dw_rows_avx512 takes it there: on rows of 112, column blocks of 4
 * and 3 vectors were 1.05x slower than the rows kernel, whole rows in
 * groups of 2 1.14x, MobileNetV2 b0.0.dw): column blocks of up
 * to 4 vectors, each down the rows in groups of at most 16 / V rows, the
 * groups balanced (rows of 14: one group of 14; of 28: four of 7). */
#define DW3_R(V, R)                                                                      \
  case R: dw3_group(yb, ys, sb, ss, wv, b, vlo, vhi, m, V, (R) <= 16 / (V) ? (R) : 1); break
#define DW3_V(V)                                                                         \
  case V:                                                                                \
    switch (g) {                                                                         \
      DW3_R(V, 1); DW3_R(V, 2); DW3_R(V, 3); DW3_R(V, 4); DW3_R(V, 5); DW3_R(V, 6);      \
      DW3_R(V, 7); DW3_R(V, 8); DW3_R(V, 9); DW3_R(V, 10); DW3_R(V, 11); DW3_R(V, 12);   \
      DW3_R(V, 13); DW3_R(V, 14); DW3_R(V, 15); DW3_R(V, 16);                            \
    }                                                                                    \
    break
static void dw3_rows(float *y, int64_t ys, const float *s0, int64_t ss, int64_t rows, int64_t n, const float *w,
                     __m512 b, __m512 vlo, __m512 vhi) {
  __m512 wv[9];
  for (int j = 0; j < 9; j++) wv[j] = _mm512_set1_ps(w[j]);
  int64_t per = (n + 15) / 16;
  for (int64_t c = 0; c < per; c += 4) {
    int V = per - c < 4 ? (int)(per - c) : 4;
    __mmask16 m = c + V < per ? (__mmask16)0xffff : (__mmask16)(0xffffu >> (16 * per - n));
    int64_t rmax = 16 / V, groups = (rows + rmax - 1) / rmax;
    for (int64_t r = 0, gi = 0; r < rows; gi++) {
      int64_t g = (rows - r) / (groups - gi); /* rows left shared over the groups left */
      float *yb = y + r * ys + 16 * c;
      const float *sb = s0 + r * ss + 16 * c;
      switch (V) {
        DW3_V(1);
        DW3_V(2);
        DW3_V(3);
        DW3_V(4);
      }
      r += g;
    }
  }
}
#undef DW3_V
#undef DW3_R

void kiln_dw_rows_avx512(float *y, int64_t ys, const float *const *src, int64_t ss, int64_t rows, int64_t n,
                         const float *w, int nk, float bias, float lo, float hi) {
  if (n <= 0 || rows <= 0) return;
  if (nk == 9 && n <= 64) { /* 3x3 at stride 1 and dilation 1 (the taps' rows ss apart, columns 1 apart): dw3_rows */
    bool s1 = true;
    for (int j = 0; j < 9; j++) /* as integers: a tap's row may lie outside src[0]'s array */
      s1 = s1 && (uintptr_t)src[j] == (uintptr_t)src[0] + (uintptr_t)(((j / 3) * ss + j % 3) * (int64_t)sizeof(float));
    if (s1) {
      dw3_rows(y, ys, src[0], ss, rows, n, w, _mm512_set1_ps(bias), _mm512_set1_ps(lo), _mm512_set1_ps(hi));
      return;
    }
  }
  __m512 b = _mm512_set1_ps(bias), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t per = (n + 15) / 16; /* vectors per row */
  __mmask16 last = (__mmask16)(0xffffu >> (16 * per - n));
  switch (per) {
  case 1: DW_GROUPS(1); return;
  case 2: DW_GROUPS(2); return;
  case 3: DW_GROUPS(3); return;
  case 4: DW_GROUPS(4); return;
  default:
    for (int64_t r = 0; r < rows; r++) dw_row(y + r * ys, n, src, r * ss, w, nk, b, vlo, vhi);
  }
}
#undef DW_GROUPS

/* Even elements 0, 2, .. of a 32-float pair (a, b) and odd ones 1, 3, .. */
static const int32_t split_even[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int32_t split_odd[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};

void kiln_la_split2_avx512(float *even, float *odd, const float *src, int64_t n) {
  __m512i ie = _mm512_loadu_si512(split_even), io = _mm512_loadu_si512(split_odd);
  int64_t t = 0; /* outputs done per phase; src[2t..] next */
  for (; 2 * t + 32 <= n; t += 16) {
    __m512 a = _mm512_loadu_ps(src + 2 * t), b = _mm512_loadu_ps(src + 2 * t + 16);
    _mm512_storeu_ps(even + t, _mm512_permutex2var_ps(a, ie, b));
    _mm512_storeu_ps(odd + t, _mm512_permutex2var_ps(a, io, b));
  }
  int64_t r = n - 2 * t; /* 0..31 left: loads and stores by opmask */
  if (r <= 0) return;
  __mmask16 ma = (__mmask16)(r >= 16 ? 0xffffu : (1u << r) - 1), mb = (__mmask16)(r > 16 ? (1u << (r - 16)) - 1 : 0);
  __m512 a = _mm512_maskz_loadu_ps(ma, src + 2 * t), b = _mm512_maskz_loadu_ps(mb, src + 2 * t + 16);
  _mm512_mask_storeu_ps(even + t, (__mmask16)((1u << ((r + 1) / 2)) - 1), _mm512_permutex2var_ps(a, ie, b));
  _mm512_mask_storeu_ps(odd + t, (__mmask16)((1u << (r / 2)) - 1), _mm512_permutex2var_ps(a, io, b));
}

void kiln_la_copy_rows_avx512(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                              int64_t n) {
  __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);
  for (int64_t r = 0; r < rows; r++, dst += dst_stride, src += src_stride) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_loadu_ps(src + i));
    if (i < n) _mm512_mask_storeu_ps(dst + i, tail, _mm512_maskz_loadu_ps(tail, src + i));
  }
}

/* Depthwise on a small plane in place (sgemm.h kiln_dw_plane_fn): per
 * vector of 16 outputs one chain of nk fmas, the tap's input loaded by
 * its mask (zero lanes for the padding, no read there: a masked load
 * faults on no lane outside the mask, so a tap's shift may point before x
 * or past its end). Vectors two at a time: two chains in flight each, the
 * out-of-order window overlaps the pairs. */
/* The first min(r, 16) lanes (r >= 1). */
static inline __mmask16 first16(int64_t r) { return (__mmask16)(r >= 16 ? 0xffffu : (1u << r) - 1u); }

/* Planes of at most 4 vectors (7x7) whose taps all shift by at most 16:
 * the plane is loaded once into registers (r1..r4, zero vectors r0 and r5
 * on either side) and each tap's shift is made in registers, one
 * vpermt2ps of two neighbouring vectors per (tap, vector), zeroing the
 * lanes its mask leaves out, instead of a masked load per (tap, vector),
 * which at a shift not a multiple of 16 floats spans two cache lines.
 * Four chains, one per vector. A lane under a set mask bit gets the same
 * x[p + toff[j]] (it lies in the register window: -16 <= toff <= 16), the
 * others 0: the same operations, the same bits. */
static void plane4(float *y, const float *x, int64_t n, int64_t nv, const int64_t *toff, const uint16_t *masks,
                   const float *w, int nk, __m512 vb, __m512 vlo, __m512 vhi) {
  __m512 z = _mm512_setzero_ps();
  __m512 r1 = _mm512_maskz_loadu_ps(first16(n), x);
  __m512 r2 = nv > 1 ? _mm512_maskz_loadu_ps(first16(n - 16), x + 16) : z;
  __m512 r3 = nv > 2 ? _mm512_maskz_loadu_ps(first16(n - 32), x + 32) : z;
  __m512 r4 = nv > 3 ? _mm512_maskz_loadu_ps(first16(n - 48), x + 48) : z;
  __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 a0 = vb, a1 = vb, a2 = vb, a3 = vb;
  for (int j = 0; j < nk; j++) {
    int64_t s = toff[j];
    const uint16_t *m = masks + j * nv;
    __mmask16 m0 = (__mmask16)m[0], m1 = nv > 1 ? (__mmask16)m[1] : 0, m2 = nv > 2 ? (__mmask16)m[2] : 0,
              m3 = nv > 3 ? (__mmask16)m[3] : 0;
    __m512 wj = _mm512_set1_ps(w[j]);
    if (s >= 0) { /* vector v's lanes from vectors v, v + 1 */
      __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32((int)s));
      a0 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m0, r1, idx, r2), a0);
      a1 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m1, r2, idx, r3), a1);
      a2 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m2, r3, idx, r4), a2);
      a3 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m3, r4, idx, z), a3);
    } else { /* from vectors v - 1, v */
      __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32((int)s + 16));
      a0 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m0, z, idx, r1), a0);
      a1 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m1, r1, idx, r2), a1);
      a2 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m2, r2, idx, r3), a2);
      a3 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m3, r3, idx, r4), a3);
    }
  }
  _mm512_mask_storeu_ps(y, first16(n), clamp16(a0, vlo, vhi));
  if (nv > 1) _mm512_mask_storeu_ps(y + 16, first16(n - 16), clamp16(a1, vlo, vhi));
  if (nv > 2) _mm512_mask_storeu_ps(y + 32, first16(n - 32), clamp16(a2, vlo, vhi));
  if (nv > 3) _mm512_mask_storeu_ps(y + 48, first16(n - 48), clamp16(a3, vlo, vhi));
}

/* Two channels of plane4 at once (x, x + n into y, y + n, weights w and
 * w + nk, biases b0, b1): eight chains, each tap's masks and index vector
 * shared. Each channel's operations are plane4's: the same bits. */
static void plane4x2(float *y, const float *x, int64_t n, int64_t nv, const int64_t *toff, const uint16_t *masks,
                     const float *w, int nk, float b0, float b1, __m512 vlo, __m512 vhi) {
  __m512 z = _mm512_setzero_ps();
  const float *x1 = x + n;
  __m512 p1 = _mm512_maskz_loadu_ps(first16(n), x);
  __m512 p2 = nv > 1 ? _mm512_maskz_loadu_ps(first16(n - 16), x + 16) : z;
  __m512 p3 = nv > 2 ? _mm512_maskz_loadu_ps(first16(n - 32), x + 32) : z;
  __m512 p4 = nv > 3 ? _mm512_maskz_loadu_ps(first16(n - 48), x + 48) : z;
  __m512 q1 = _mm512_maskz_loadu_ps(first16(n), x1);
  __m512 q2 = nv > 1 ? _mm512_maskz_loadu_ps(first16(n - 16), x1 + 16) : z;
  __m512 q3 = nv > 2 ? _mm512_maskz_loadu_ps(first16(n - 32), x1 + 32) : z;
  __m512 q4 = nv > 3 ? _mm512_maskz_loadu_ps(first16(n - 48), x1 + 48) : z;
  __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512 vb0 = _mm512_set1_ps(b0), vb1 = _mm512_set1_ps(b1);
  __m512 a0 = vb0, a1 = vb0, a2 = vb0, a3 = vb0, c0 = vb1, c1 = vb1, c2 = vb1, c3 = vb1;
  for (int j = 0; j < nk; j++) {
    int64_t s = toff[j];
    const uint16_t *m = masks + j * nv;
    __mmask16 m0 = (__mmask16)m[0], m1 = nv > 1 ? (__mmask16)m[1] : 0, m2 = nv > 2 ? (__mmask16)m[2] : 0,
              m3 = nv > 3 ? (__mmask16)m[3] : 0;
    __m512 wj = _mm512_set1_ps(w[j]), wk = _mm512_set1_ps(w[nk + j]);
    if (s >= 0) {
      __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32((int)s));
      a0 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m0, p1, idx, p2), a0);
      c0 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m0, q1, idx, q2), c0);
      a1 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m1, p2, idx, p3), a1);
      c1 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m1, q2, idx, q3), c1);
      a2 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m2, p3, idx, p4), a2);
      c2 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m2, q3, idx, q4), c2);
      a3 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m3, p4, idx, z), a3);
      c3 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m3, q4, idx, z), c3);
    } else {
      __m512i idx = _mm512_add_epi32(iota, _mm512_set1_epi32((int)s + 16));
      a0 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m0, z, idx, p1), a0);
      c0 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m0, z, idx, q1), c0);
      a1 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m1, p1, idx, p2), a1);
      c1 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m1, q1, idx, q2), c1);
      a2 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m2, p2, idx, p3), a2);
      c2 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m2, q2, idx, q3), c2);
      a3 = _mm512_fmadd_ps(wj, _mm512_maskz_permutex2var_ps(m3, p3, idx, p4), a3);
      c3 = _mm512_fmadd_ps(wk, _mm512_maskz_permutex2var_ps(m3, q3, idx, q4), c3);
    }
  }
  float *y1 = y + n;
  _mm512_mask_storeu_ps(y, first16(n), clamp16(a0, vlo, vhi));
  _mm512_mask_storeu_ps(y1, first16(n), clamp16(c0, vlo, vhi));
  if (nv > 1) _mm512_mask_storeu_ps(y + 16, first16(n - 16), clamp16(a1, vlo, vhi));
  if (nv > 1) _mm512_mask_storeu_ps(y1 + 16, first16(n - 16), clamp16(c1, vlo, vhi));
  if (nv > 2) _mm512_mask_storeu_ps(y + 32, first16(n - 32), clamp16(a2, vlo, vhi));
  if (nv > 2) _mm512_mask_storeu_ps(y1 + 32, first16(n - 32), clamp16(c2, vlo, vhi));
  if (nv > 3) _mm512_mask_storeu_ps(y + 48, first16(n - 48), clamp16(a3, vlo, vhi));
  if (nv > 3) _mm512_mask_storeu_ps(y1 + 48, first16(n - 48), clamp16(c3, vlo, vhi));
}

static bool plane4_fits(int64_t nv, const int64_t *toff, int nk) {
  bool near = nv <= 4;
  for (int j = 0; j < nk && near; j++) near = toff[j] >= -16 && toff[j] <= 16;
  return near;
}

void kiln_dw_plane2_avx512(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                           const float *w, int nk, float b0, float b1, float lo, float hi) {
  int64_t nv = (n + 15) / 16;
  if (plane4_fits(nv, toff, nk)) {
    plane4x2(y, x, n, nv, toff, masks, w, nk, b0, b1, _mm512_set1_ps(lo), _mm512_set1_ps(hi));
    return;
  }
  kiln_dw_plane_avx512(y, x, n, toff, masks, w, nk, b0, lo, hi);
  kiln_dw_plane_avx512(y + n, x + n, n, toff, masks, w + nk, nk, b1, lo, hi);
}

void kiln_dw_plane_avx512(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                          const float *w, int nk, float bias, float lo, float hi) {
  int64_t nv = (n + 15) / 16;
  __m512 vb = _mm512_set1_ps(bias), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  if (nv <= 4) {
    bool near = true;
    for (int j = 0; j < nk; j++) near = near && toff[j] >= -16 && toff[j] <= 16;
    if (near) {
      plane4(y, x, n, nv, toff, masks, w, nk, vb, vlo, vhi);
      return;
    }
  }
  uintptr_t xa = (uintptr_t)x; /* the shifted addresses as integers: a shift may leave the array */
  int64_t v = 0;
  for (; v + 2 <= nv; v += 2) {
    __m512 a0 = vb, a1 = vb;
    for (int j = 0; j < nk; j++) {
      __m512 wj = _mm512_set1_ps(w[j]);
      const uint16_t *m = masks + j * nv + v;
      uintptr_t s = xa + (uintptr_t)((16 * v + toff[j]) * (int64_t)sizeof(float));
      a0 = _mm512_fmadd_ps(wj, _mm512_maskz_loadu_ps((__mmask16)m[0], (const void *)s), a0);
      a1 = _mm512_fmadd_ps(wj, _mm512_maskz_loadu_ps((__mmask16)m[1], (const void *)(s + 64)), a1);
    }
    _mm512_storeu_ps(y + 16 * v, clamp16(a0, vlo, vhi));
    _mm512_mask_storeu_ps(y + 16 * v + 16, first16(n - 16 * v - 16), clamp16(a1, vlo, vhi));
  }
  if (v < nv) {
    __m512 a0 = vb;
    for (int j = 0; j < nk; j++) {
      uintptr_t s = xa + (uintptr_t)((16 * v + toff[j]) * (int64_t)sizeof(float));
      __m512 xv = _mm512_maskz_loadu_ps((__mmask16)masks[j * nv + v], (const void *)s);
      a0 = _mm512_fmadd_ps(_mm512_set1_ps(w[j]), xv, a0);
    }
    _mm512_mask_storeu_ps(y + 16 * v, first16(n - 16 * v), clamp16(a0, vlo, vhi));
  }
}
