/* cpu_fallback/dws2_avx512: the in-place stride-2 depthwise kernel with
 * AVX-512F (dws2.h; its twin kiln_dw_s2_base is in dws2.c). Built with
 * -mavx512f -mfma; called only where kiln_la_cpu_has_avx512() is true.
 *
 * Per vector of 16 outputs of a row, per tap row: two loads of the 32
 * input columns under the taps kx = 0, 1 (even and odd columns split by
 * vpermt2ps) and two more, 2 columns on, for kx = 2 (and so on for wider
 * kernels); the loads by opmask (a masked load reads and faults on no lane
 * outside its mask: the padding). The fmas in tap order from the bias, the
 * clamp, a store by opmask. Each output vector is one chain of KH·KW
 * fmas: eight chains in flight on rows of 1 or 2 vectors (8 / vectors rows
 * at a time, as the rows kernel); wider rows vector after vector.
 * 3 x 3 kernels (MobileNetV2's) take plane3_strips instead: strips of up
 * to 4 vectors walked down the plane, each input row loaded and split once
 * and fed to the one or two output rows it is under; on output rows of at
 * most 8 from input rows of at most 16, plane3_pairs: two output rows a
 * vector. */
#include <immintrin.h>

#include "cpu_fallback/dws2.h"

static const int32_t even_idx[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int32_t odd_idx[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
static const int32_t lanes16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

/* The lanes j with 0 <= c + j < W. */
static inline __mmask16 cols(int64_t c, int64_t W) {
  int64_t lo = c < 0 ? -c : 0, hi = W - c < 16 ? W - c : 16;
  return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* R output rows from oy0 x PER vectors of 16 outputs from vector v0: R ·
 * PER <= 8 chains in flight, the tap loop outermost. Per chain, per tap
 * row, per pair of taps (kx = 2m, 2m + 1): the 32 columns from bx + 2m
 * (bx = 2 · 16 · vector - pl) loaded by opmask (the columns inside the
 * input; none on a padding row: a zero vector, nothing read) and split
 * into even and odd ones. Inlined with constant R, PER (and KH, KW for
 * 3 x 3): the chains' slots are fixed. */
static inline __attribute__((always_inline)) void group(float *y, const float *x, int64_t H, int64_t W, int64_t OW,
                                                         int64_t pt, int64_t pl, int64_t oy0, int64_t v0,
                                                         const float *w, const int KH, const int KW, __m512 vb,
                                                         __m512 vlo, __m512 vhi, __m512i ie, __m512i io,
                                                         const int PER, const int R) {
  __m512 acc[8];
  __mmask16 ma[4][4], mb[4][4];
  int64_t bx[4];
  uintptr_t xa = (uintptr_t)x; /* addresses as integers: a masked load's column may be negative */
#pragma GCC unroll 4
  for (int p = 0; p < PER; p++) {
    bx[p] = 32 * (v0 + p) - pl;
    for (int m = 0; 2 * m < KW; m++) ma[p][m] = cols(bx[p] + 2 * m, W), mb[p][m] = cols(bx[p] + 2 * m + 16, W);
  }
#pragma GCC unroll 8
  for (int k = 0; k < R * PER; k++) acc[k] = vb;
  for (int ky = 0; ky < KH; ky++) {
    uintptr_t ra[8];
    __mmask16 rm[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      int64_t iy = 2 * (oy0 + r) - pt + ky;
      bool in = iy >= 0 && iy < H;
      ra[r] = xa + (uintptr_t)((in ? iy : 0) * W * (int64_t)sizeof(float));
      rm[r] = in ? (__mmask16)0xffff : 0;
    }
    for (int m = 0; 2 * m < KW; m++) {
      __m512 w0 = _mm512_set1_ps(w[ky * KW + 2 * m]), w1 = _mm512_set1_ps(2 * m + 1 < KW ? w[ky * KW + 2 * m + 1] : 0);
#pragma GCC unroll 8
      for (int k = 0; k < R * PER; k++) {
        int r = k / PER, p = k % PER;
        uintptr_t c = ra[r] + (uintptr_t)((bx[p] + 2 * m) * (int64_t)sizeof(float));
        __m512 a = _mm512_maskz_loadu_ps(ma[p][m] & rm[r], (const void *)c);
        __m512 b = _mm512_maskz_loadu_ps(mb[p][m] & rm[r], (const void *)(c + 16 * sizeof(float)));
        acc[k] = _mm512_fmadd_ps(w0, _mm512_permutex2var_ps(a, ie, b), acc[k]);
        if (2 * m + 1 < KW) acc[k] = _mm512_fmadd_ps(w1, _mm512_permutex2var_ps(a, io, b), acc[k]);
      }
    }
  }
#pragma GCC unroll 8
  for (int k = 0; k < R * PER; k++) {
    int r = k / PER, p = k % PER;
    int64_t ox = 16 * (v0 + p);
    __m512 v = _mm512_min_ps(vhi, _mm512_max_ps(vlo, acc[k])); /* v stays when NaN, as the twin's compares */
    _mm512_mask_storeu_ps(y + (oy0 + r) * OW + ox, cols(0, OW - ox), v);
  }
}

/* One vector of 16 outputs of one row from column bx on (the form for
 * rows of 3 or more vectors, one vector after another: on MobileNetV2's
 * 112 -> 56 layer the grouped form above was 1.3x slower, its sixteen
 * masks past the eight mask registers; consecutive vectors are
 * independent chains, overlapped by the out-of-order core): per tap row,
 * per pair of taps, the 32 columns from bx + 2m, plain loads where the
 * vector's columns are all inside the input (inside), else by masks ma,
 * mb; a padding row (NULL) gives zero. */
static inline __attribute__((always_inline)) __m512 out16(const float *const *rows, int64_t bx, const __mmask16 *ma,
                                                           const __mmask16 *mb, bool inside, const float *w,
                                                           const int KH, const int KW, __m512 acc, __m512i ie,
                                                           __m512i io) {
  for (int ky = 0; ky < KH; ky++)
    for (int m = 0; 2 * m < KW; m++) {
      __m512 a, b;
      if (!rows[ky]) {
        a = b = _mm512_setzero_ps();
      } else if (inside) {
        a = _mm512_loadu_ps(rows[ky] + bx + 2 * m), b = _mm512_loadu_ps(rows[ky] + bx + 2 * m + 16);
      } else {
        uintptr_t c = (uintptr_t)rows[ky] + (uintptr_t)((bx + 2 * m) * (int64_t)sizeof(float));
        a = _mm512_maskz_loadu_ps(ma[m], (const void *)c);
        b = _mm512_maskz_loadu_ps(mb[m], (const void *)(c + 16 * sizeof(float)));
      }
      acc = _mm512_fmadd_ps(_mm512_set1_ps(w[ky * KW + 2 * m]), _mm512_permutex2var_ps(a, ie, b), acc);
      if (2 * m + 1 < KW)
        acc = _mm512_fmadd_ps(_mm512_set1_ps(w[ky * KW + 2 * m + 1]), _mm512_permutex2var_ps(a, io, b), acc);
    }
  return acc;
}

static inline __attribute__((always_inline)) void rows_wide(float *y, const float *x, int64_t H, int64_t W, int64_t OH,
                                                             int64_t OW, int64_t pt, int64_t pl, const float *w,
                                                             const int KH, const int KW, __m512 vb, __m512 vlo,
                                                             __m512 vhi, __m512i ie, __m512i io) {
  const float *rows[8];
  int64_t reach = 2 * ((KW - 1) / 2) + 32; /* columns a vector's loads span from bx */
  for (int64_t oy = 0; oy < OH; oy++) {
    for (int ky = 0; ky < KH; ky++) {
      int64_t iy = 2 * oy - pt + ky;
      rows[ky] = iy >= 0 && iy < H ? x + iy * W : NULL;
    }
    for (int64_t ox = 0; ox < OW; ox += 16) {
      int64_t bx = 2 * ox - pl;
      __m512 acc;
      if (bx >= 0 && bx + reach <= W) {
        acc = out16(rows, bx, NULL, NULL, true, w, KH, KW, vb, ie, io);
      } else {
        __mmask16 ma[4], mb[4];
        for (int m = 0; 2 * m < KW; m++) ma[m] = cols(bx + 2 * m, W), mb[m] = cols(bx + 2 * m + 16, W);
        acc = out16(rows, bx, ma, mb, false, w, KH, KW, vb, ie, io);
      }
      acc = _mm512_min_ps(vhi, _mm512_max_ps(vlo, acc)); /* v stays when NaN, as the twin's compares */
      _mm512_mask_storeu_ps(y + oy * OW + ox, cols(0, OW - ox), acc);
    }
  }
}

/* 3 x 3 only: input row iy (outside the input: zero vectors, nothing read)
 * split for the strip of V vectors of 16 outputs from the one whose taps
 * start at column bx0: per vector, the 32 columns from bx0 + 32v loaded by
 * the masks ma, mb (the columns inside the row) and split by two vpermt2ps
 * into E (kx = 0: the even ones) and O (kx = 1); E2 (kx = 2) is E moved
 * down a lane with the next vector's first even column last (valignd), at
 * the strip's end a broadcast of column bx0 + 32V (0 outside the row). */
static inline __attribute__((always_inline)) void split3(const float *x, int64_t H, int64_t W, int64_t iy, int64_t bx0,
                                                          const __mmask16 *ma, const __mmask16 *mb, __m512i ie,
                                                          __m512i io, __m512 *E, __m512 *O, __m512 *E2, const int V) {
  if (iy < 0 || iy >= H) {
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) E[v] = O[v] = E2[v] = _mm512_setzero_ps();
    return;
  }
  uintptr_t row = (uintptr_t)x + (uintptr_t)(iy * W * (int64_t)sizeof(float)); /* a column may be negative */
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) {
    uintptr_t c = row + (uintptr_t)((bx0 + 32 * v) * (int64_t)sizeof(float));
    __m512 a = _mm512_maskz_loadu_ps(ma[v], (const void *)c);
    __m512 b = _mm512_maskz_loadu_ps(mb[v], (const void *)(c + 16 * sizeof(float)));
    E[v] = _mm512_permutex2var_ps(a, ie, b), O[v] = _mm512_permutex2var_ps(a, io, b);
  }
  int64_t cl = bx0 + 32 * V;
  __m512 last = cl >= 0 && cl < W ? _mm512_set1_ps(x[iy * W + cl]) : _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int v = 0; v < V; v++)
    E2[v] = _mm512_castsi512_ps(
        _mm512_alignr_epi32(_mm512_castps_si512(v < V - 1 ? E[v + 1] : last), _mm512_castps_si512(E[v]), 1));
}

/* Tap row ky of the split row into the V accumulators, kx in order. */
static inline __attribute__((always_inline)) void taps3(__m512 *acc, const __m512 *wv, int ky, const __m512 *E,
                                                         const __m512 *O, const __m512 *E2, const int V) {
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) {
    acc[v] = _mm512_fmadd_ps(wv[3 * ky], E[v], acc[v]);
    acc[v] = _mm512_fmadd_ps(wv[3 * ky + 1], O[v], acc[v]);
    acc[v] = _mm512_fmadd_ps(wv[3 * ky + 2], E2[v], acc[v]);
  }
}

/* 3 x 3 only: the strip of V vectors of 16 outputs from column ox0 walked
 * down the plane. Output row o reads input rows 2o - pt + ky; row 2o - pt +
 * 2 is also row o + 1's tap row 0, so each input row is split once: per
 * output row two splits (tap rows 1 and 2; tap row 0 came with the row
 * before), its V chains stored (clamped, by opmask) as soon as tap row 2
 * is in, and row o + 1's chains started from the same split. Each output
 * gets its taps in order from the bias (tap rows in order, kx in order
 * within each), one fma each: the operations of group / out16, the same
 * bits. (Walking two or more bands of rows in lockstep, for more chains in
 * flight, was slower: GEMM_CONV.md.) */
static inline __attribute__((always_inline)) void strip3(float *y, const float *x, int64_t H, int64_t W, int64_t OH,
                                                          int64_t OW, int64_t pt, int64_t pl, int64_t ox0,
                                                          const __m512 *wv, __m512 vb, __m512 vlo, __m512 vhi,
                                                          __m512i ie, __m512i io, const int V) {
  __mmask16 ma[4], mb[4];
  int64_t bx0 = 2 * ox0 - pl;
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) ma[v] = cols(bx0 + 32 * v, W), mb[v] = cols(bx0 + 32 * v + 16, W);
  __m512 A[4], E[4], O[4], E2[4];
  split3(x, H, W, -pt, bx0, ma, mb, ie, io, E, O, E2, V);
#pragma GCC unroll 4
  for (int v = 0; v < V; v++) A[v] = vb;
  taps3(A, wv, 0, E, O, E2, V);
  for (int64_t o = 0; o < OH; o++) {
    int64_t iy = 2 * o - pt;
    split3(x, H, W, iy + 1, bx0, ma, mb, ie, io, E, O, E2, V);
    taps3(A, wv, 1, E, O, E2, V);
    split3(x, H, W, iy + 2, bx0, ma, mb, ie, io, E, O, E2, V);
    taps3(A, wv, 2, E, O, E2, V);
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) /* v stays when NaN, as the twin's compares */
      _mm512_mask_storeu_ps(y + o * OW + ox0 + 16 * v, cols(ox0 + 16 * v, OW), _mm512_min_ps(vhi, _mm512_max_ps(vlo, A[v])));
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) A[v] = vb;
    taps3(A, wv, 0, E, O, E2, V); /* row o + 1's tap row 0 (unused after the last row) */
  }
}

/* 3 x 3 planes: the columns in strips of up to 4 vectors (balanced: rows
 * of 56 as one strip of 3.5 vectors, of 28 as one of 2), each walked down
 * the plane (strip3). */
static void plane3_strips(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt,
                          int64_t pl, const float *w, float bias, float lo, float hi) {
  __m512i ie = _mm512_loadu_si512(even_idx), io = _mm512_loadu_si512(odd_idx);
  __m512 vb = _mm512_set1_ps(bias), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi), wv[9];
  for (int j = 0; j < 9; j++) wv[j] = _mm512_set1_ps(w[j]);
  int64_t nv = (OW + 15) / 16, ns = (nv + 3) / 4;
  for (int64_t v = 0, s = 0; s < ns; s++) {
    int V = (int)((nv - v) / (ns - s));
    switch (V) {
    case 1: strip3(y, x, H, W, OH, OW, pt, pl, 16 * v, wv, vb, vlo, vhi, ie, io, 1); break;
    case 2: strip3(y, x, H, W, OH, OW, pt, pl, 16 * v, wv, vb, vlo, vhi, ie, io, 2); break;
    case 3: strip3(y, x, H, W, OH, OW, pt, pl, 16 * v, wv, vb, vlo, vhi, ie, io, 3); break;
    default: strip3(y, x, H, W, OH, OW, pt, pl, 16 * v, wv, vb, vlo, vhi, ie, io, 4); break;
    }
    v += V;
  }
}

/* 3 x 3 planes with output rows of at most 8 from input rows of at most
 * 16 (MobileNetV2's 14 -> 7): a vector holds two output rows, lanes 0..7
 * row 2p and lanes 8..15 row 2p + 1, instead of one row in 7 of 16 lanes.
 * Each input row is one vector (loaded by opmask once per pair that reads
 * it; a padding row is a zero vector); tap (ky, kx) of the pair is one
 * vpermt2ps of the rows under it (row 4p - pt + ky for lanes 0..7, two
 * rows further for lanes 8..15) by an index picking column 2·ox - pl + kx,
 * zeroing (by mask) the lanes whose column is outside the input. One fma
 * per tap in tap order from the bias, the clamp, the two rows packed
 * together (vpermps) and stored by opmask: the operations of the kernels
 * above (an input element or 0 per tap), the same bits. Pairs go two at a
 * time (eight chains of nine fmas would leave two of the four pairs of a
 * 7-row plane waiting on latency anyway; four in flight). */
static void plane3_pairs(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt,
                         int64_t pl, const float *w, float bias, float lo, float hi) {
  /* lane j: output column ox = j mod 8 of the pair's row j / 8; tap kx reads column c = 2·ox - pl + kx of the
     row (index c + 16 for the second row, c clamped into the vector; lanes with c outside [0, W) or ox >= OW
     masked to zero); computed in vectors (per call: a table per call cost more than the plane) */
  __m512i lane = _mm512_loadu_si512(lanes16), ox = _mm512_and_si512(lane, _mm512_set1_epi32(7));
  __m512i hi16 = _mm512_and_si512(lane, _mm512_set1_epi32(8)), c0 = _mm512_sub_epi32(_mm512_add_epi32(ox, ox),
                                                                                      _mm512_set1_epi32((int)pl));
  __mmask16 live = _mm512_cmplt_epi32_mask(ox, _mm512_set1_epi32((int)OW));
  __m512i vW = _mm512_set1_epi32((int)W), zero = _mm512_setzero_si512(), top = _mm512_set1_epi32(15), ix[3];
  __mmask16 mk[3];
  for (int kx = 0; kx < 3; kx++) {
    __m512i c = _mm512_add_epi32(c0, _mm512_set1_epi32(kx));
    mk[kx] = live & _mm512_cmpge_epi32_mask(c, zero) & _mm512_cmplt_epi32_mask(c, vW);
    ix[kx] = _mm512_add_epi32(_mm512_min_epi32(_mm512_max_epi32(c, zero), top), _mm512_add_epi32(hi16, hi16));
  }
  __m512i i0 = ix[0], i1 = ix[1], i2 = ix[2];
  /* the two rows packed together for the store: lane j < OW from lane j, OW <= j < 2·OW from lane 8 + j - OW */
  __m512i ipk = _mm512_mask_add_epi32(lane, _mm512_cmpge_epi32_mask(lane, _mm512_set1_epi32((int)OW)), lane,
                                      _mm512_set1_epi32(8 - (int)OW));
  __m512 vb = _mm512_set1_ps(bias), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi), wv[9];
  for (int j = 0; j < 9; j++) wv[j] = _mm512_set1_ps(w[j]);
  __mmask16 rm = (__mmask16)(W >= 16 ? 0xffffu : (1u << W) - 1u);
#define ROWV(iy) ((iy) >= 0 && (iy) < H ? _mm512_maskz_loadu_ps(rm, x + (iy) * W) : _mm512_setzero_ps())
  for (int64_t p = 0; 2 * p < OH; p++) {
    int64_t iy = 4 * p - pt; /* the pair's first input row */
    __m512 r0 = ROWV(iy), r1 = ROWV(iy + 1), r2 = ROWV(iy + 2), r3 = ROWV(iy + 3), r4 = ROWV(iy + 4);
    __m512 acc = vb;
    acc = _mm512_fmadd_ps(wv[0], _mm512_maskz_permutex2var_ps(mk[0], r0, i0, r2), acc);
    acc = _mm512_fmadd_ps(wv[1], _mm512_maskz_permutex2var_ps(mk[1], r0, i1, r2), acc);
    acc = _mm512_fmadd_ps(wv[2], _mm512_maskz_permutex2var_ps(mk[2], r0, i2, r2), acc);
    acc = _mm512_fmadd_ps(wv[3], _mm512_maskz_permutex2var_ps(mk[0], r1, i0, r3), acc);
    acc = _mm512_fmadd_ps(wv[4], _mm512_maskz_permutex2var_ps(mk[1], r1, i1, r3), acc);
    acc = _mm512_fmadd_ps(wv[5], _mm512_maskz_permutex2var_ps(mk[2], r1, i2, r3), acc);
    acc = _mm512_fmadd_ps(wv[6], _mm512_maskz_permutex2var_ps(mk[0], r2, i0, r4), acc);
    acc = _mm512_fmadd_ps(wv[7], _mm512_maskz_permutex2var_ps(mk[1], r2, i1, r4), acc);
    acc = _mm512_fmadd_ps(wv[8], _mm512_maskz_permutex2var_ps(mk[2], r2, i2, r4), acc);
    acc = _mm512_min_ps(vhi, _mm512_max_ps(vlo, acc)); /* v stays when NaN, as the twin's */
    int64_t rows = OH - 2 * p < 2 ? 1 : 2;
    _mm512_mask_storeu_ps(y + 2 * p * OW, (__mmask16)((1u << (rows * OW)) - 1u), _mm512_permutexvar_ps(ipk, acc));
  }
#undef ROWV
}

/* Rows of PER vectors (from v0), 8 / PER rows at a time, then one at a time. */
#define S2_GROUPS(PER)                                                                                         \
  do {                                                                                                         \
    int64_t oy = 0;                                                                                            \
    for (; oy + 8 / (PER) <= OH; oy += 8 / (PER))                                                              \
      group(y, x, H, W, OW, pt, pl, oy, v0, w, KH, KW, vb, vlo, vhi, ie, io, PER, 8 / (PER));                  \
    for (; oy < OH; oy++) group(y, x, H, W, OW, pt, pl, oy, v0, w, KH, KW, vb, vlo, vhi, ie, io, PER, 1);      \
  } while (0)

/* Rows of 1 or 2 vectors (outputs up to 32 wide) in groups of 8 chains;
 * wider rows vector by vector. */
static inline __attribute__((always_inline)) void plane(float *y, const float *x, int64_t H, int64_t W, int64_t OH,
                                                         int64_t OW, int64_t pt, int64_t pl, const float *w,
                                                         const int KH, const int KW, float bias, float lo, float hi) {
  __m512i ie = _mm512_loadu_si512(even_idx), io = _mm512_loadu_si512(odd_idx);
  __m512 vb = _mm512_set1_ps(bias), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  int64_t nv = (OW + 15) / 16, v0 = 0;
  if (nv == 1) S2_GROUPS(1);
  else if (nv == 2) S2_GROUPS(2);
  else rows_wide(y, x, H, W, OH, OW, pt, pl, w, KH, KW, vb, vlo, vhi, ie, io);
}
#undef S2_GROUPS

void kiln_dw_s2_avx512(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt, int64_t pl,
                       const float *w, int KH, int KW, float bias, float lo, float hi) {
  if (KH == 3 && KW == 3 && OW <= 8 && W <= 16) plane3_pairs(y, x, H, W, OH, OW, pt, pl, w, bias, lo, hi);
  else if (KH == 3 && KW == 3) plane3_strips(y, x, H, W, OH, OW, pt, pl, w, bias, lo, hi);
  else if (KH <= 8 && KW <= 8) plane(y, x, H, W, OH, OW, pt, pl, w, KH, KW, bias, lo, hi);
}
