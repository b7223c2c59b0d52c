/* cpu_fallback/nn_avx512: the softmax rows primitive (nn.h softmax_rows)
 * and the 2x2 max pool (max2x2s2, at the end) on 16 lanes with AVX-512F —
 * the only nn file built with -mavx512f,
 * called only where kiln_vm_cpu_has_avx512() is true (nn_avx2.c asks).
 * Bit for bit the scalar twin's composition (nn_base.c: max, x − m, exp,
 * the 8-lane sum and its fold, y·(1/sum) + 0):
 * - the max is taken in another order; only its value is used, and a max
 *   of ±0 gives the same x − m for every x but −0, whose exp is 1 either way;
 * - a row whose max (of its non-NaN elements) is finite takes three passes:
 *   the max, then x − m, exp (exp16's lane code less its upper clamp,
 *   the identity for x − m <= 0) stored and summed in one pass, then the
 *   scale (the + 0 is the identity there). A NaN element gives a NaN sum;
 *   such a row's outputs are then set to the twin's NaNs (row_nan). Rows
 *   whose max is NaN or ±inf take the separate passes with vmath's
 *   AVX-512 exp kernel (bit-identical to its twin);
 * - the sum keeps the twin's 8 partial sums in its order: each 16-float
 *   block adds its low 8 then its high 8 to one 8-lane accumulator; two
 *   rows at a time, so that their chains of dependent adds overlap. */
#include <immintrin.h>
#include <math.h>

#include "cpu_fallback/nn.h"
#include "cpu_fallback/vmath_avx512_lanes.h" /* exp_rint16, exp_poly16, SET1 */

static __mmask16 mask_of(size_t r) { return (__mmask16)((1u << r) - 1u); }

/* max of x[0..n) (n >= 1), NaN when any element is NaN. */
static float row_max(size_t n, const float *x) {
  __m512 m = _mm512_set1_ps(x[0]), a = m;
  __mmask16 nan = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 v = _mm512_loadu_ps(x + i), w = _mm512_loadu_ps(x + i + 16);
    m = _mm512_max_ps(v, m);
    a = _mm512_max_ps(w, a);
    nan |= _mm512_cmp_ps_mask(v, w, _CMP_UNORD_Q);
  }
  for (; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : mask_of(n - i);
    __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(x[0]), k, x + i);
    m = _mm512_max_ps(v, m);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  if (nan) return NAN;
  return _mm512_reduce_max_ps(_mm512_max_ps(m, a));
}

/* y = x - m, then exp in place (the general path: rows whose max is NaN
 * or ±inf, where x − m may be NaN). */
static void row_exp(size_t n, const float *x, float m, float *y) {
  __m512 vm = _mm512_set1_ps(m);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
  if (i < n) {
    __mmask16 k = mask_of(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm));
  }
  kiln_vm_exp_avx512(n, y, y);
}

/* max of x[0..n) (n >= 1) passing over NaN elements but x[0] (a NaN
 * x[0] gives NaN): the fast path's max, which finds NaN rows afterwards. */
static float row_max_fast(size_t n, const float *x) {
  __m512 m = _mm512_set1_ps(x[0]), a = m;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m = _mm512_max_ps(_mm512_loadu_ps(x + i), m); /* a NaN x: m kept */
    a = _mm512_max_ps(_mm512_loadu_ps(x + i + 16), a);
  }
  for (; i < n; i += 16) {
    __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : mask_of(n - i);
    m = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(x[0]), k, x + i), m);
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(m, a));
}

/* exp16 of d = x − m for a finite max m of the non-NaN elements: d <= 0,
 * so exp16's upper clamp min(·, hi) is the identity, and d is NaN only
 * where x is (x = +inf would make m = +inf). The clamp's operand order
 * max(lo, d) lets such a NaN through (x86 max returns its second operand
 * on a NaN) to the sum, which finds the row (see kiln_nn_softmax_rows_avx512);
 * other lanes get exp16's bits. */
static inline __m512 exp_le0_16(__m512 d) {
  __m512 c = _mm512_max_ps(SET1(KILN_VM_EXP_LO), d);
  __m512 fn = exp_rint16(c);
  return _mm512_scalef_ps(exp_poly16(c, fn), fn);
}

/* One pass for a row whose max m is finite: y = exp(x − m) stored, and the
 * twin's 8-lane sum (each 16-float block its low 8 then its high 8; a tail
 * of r < 16 with zeros past r) added to s. */
static inline __m256 add_lo_hi(__m256 s, __m512 v) {
  s = _mm256_add_ps(s, _mm512_castps512_ps256(v));
  return _mm256_add_ps(s, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

static __m256 row_exp_sum(size_t n, const float *x, float m, float *y) {
  __m512 vm = _mm512_set1_ps(m);
  __m256 s = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 e = exp_le0_16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
    _mm512_storeu_ps(y + i, e);
    s = add_lo_hi(s, e);
  }
  if (i < n) {
    __mmask16 k = mask_of(n - i);
    __m512 e = _mm512_maskz_mov_ps(k, exp_le0_16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
    _mm512_mask_storeu_ps(y + i, k, e);
    s = _mm256_add_ps(s, _mm512_castps512_ps256(e));
    if (n - i > 8) s = _mm256_add_ps(s, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  }
  return s;
}

/* ((s0+s4)+(s2+s6))+((s1+s5)+(s3+s7)), as nn_avx2.c fold8. */
static float fold8(__m256 v) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

/* The 8-lane sum of a tail of r < 16 floats after the blocks: its low 8
 * (zeros past r) then its high 8, as the twin's lanes take them. */
static __m256 sum_tail(__m256 s, const float *y, size_t r) {
  __m512 v = _mm512_maskz_loadu_ps(mask_of(r), y);
  s = _mm256_add_ps(s, _mm512_castps512_ps256(v));
  if (r > 8) s = _mm256_add_ps(s, _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return s;
}

static void row_scale(size_t n, float *y, float a) {
  __m512 va = _mm512_set1_ps(a), zero = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(y + i), va), zero));
  if (i < n) {
    __mmask16 k = mask_of(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_add_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), va), zero));
  }
}

/* y·a for y >= +0 and a finite > 0 (a fast row: y = exp(d) is never −0
 * and the sum is >= 1, the max's own exp being 1): the twin's y·a + 0 is
 * y·a there, so the + 0 is dropped. */
static void row_scale_pos(size_t n, float *y, float a) {
  __m512 va = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_loadu_ps(y + i), va));
  if (i < n) {
    __mmask16 k = mask_of(n - i);
    _mm512_mask_storeu_ps(y + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, y + i), va));
  }
}

/* A fast row whose sum came out NaN had NaN elements: the twin's max is
 * then NaN and so is every output. Where x was NaN, y holds its quiet NaN
 * already (as the general path leaves it: exp16 gives x − m = x's quiet
 * NaN, then y·a keeps y's); elsewhere the general path gives NAN's bits
 * (x − NAN, exp, ·NaN keep the first NaN operand): the same bits, with no
 * second read of x (y may be x). */
static void row_nan(size_t n, float *y) {
  for (size_t i = 0; i < n; i++)
    if (!isnan(y[i])) y[i] = NAN;
}

/* Ends a fast row from its 8-lane sum s. */
static void row_finish(size_t n, float *y, __m256 s) {
  float f = fold8(s);
  if (isnan(f)) row_nan(n, y);
  else row_scale_pos(n, y, 1.0f / f);
}

/* The general row (max NaN or ±inf): the separate passes. */
static void row_general(size_t n, const float *x, float m, float *y) {
  row_exp(n, x, m, y);
  __m256 s0 = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(y + i));
    s0 = _mm256_add_ps(s0, _mm256_loadu_ps(y + i + 8));
  }
  if (i < n) s0 = sum_tail(s0, y + i, n - i);
  row_scale(n, y, 1.0f / fold8(s0));
}

void kiln_nn_softmax_rows_avx512(size_t rows, size_t n, const float *x, float *y) {
  size_t r = 0;
  for (; r + 2 <= rows; r += 2) {
    const float *x0 = x + r * n, *x1 = x0 + n;
    float *y0 = y + r * n, *y1 = y0 + n;
    float m0 = row_max_fast(n, x0), m1 = row_max_fast(n, x1);
    if (!isfinite(m0) || !isfinite(m1)) {
      row_general(n, x0, row_max(n, x0), y0);
      row_general(n, x1, row_max(n, x1), y1);
      continue;
    }
    /* the two rows' passes back to back: their add chains overlap */
    __m256 s0 = row_exp_sum(n, x0, m0, y0), s1 = row_exp_sum(n, x1, m1, y1);
    row_finish(n, y0, s0);
    row_finish(n, y1, s1);
  }
  for (; r < rows; r++) {
    const float *x0 = x + r * n;
    float *y0 = y + r * n;
    float m0 = row_max_fast(n, x0);
    if (!isfinite(m0)) row_general(n, x0, row_max(n, x0), y0);
    else row_finish(n, y0, row_exp_sum(n, x0, m0, y0));
  }
}

/* acc_max's rule for one step: v where v > a or v is NaN, else a (x86 max
 * returns its second operand on a NaN or a tie). */
static inline __m512 max_step(__m512 a, __m512 v) {
  return _mm512_mask_mov_ps(_mm512_max_ps(v, a), _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

/* MaxPool 2x2 stride 2 (nn.h max2x2s2) on 16 lanes: 16 outputs from 32
 * floats of each row, the even and odd columns taken with two-source
 * permutes; per output the taps in the twin's order (0,0) (0,1) (1,0)
 * (1,1) by acc_max's rule, starting from the first tap (the twin's -inf
 * then tap (0,0) gives that tap's bits): nn_base.c's bits. A tail of r <
 * 16 outputs reads 2r floats of each row (masked) and writes r. nn_avx2.c
 * sends it rows of at least 16 outputs only (GEMM_CONV.md "small_cnn: the
 * 2x2 max pool on 16 lanes"). */
void kiln_nn_max2x2s2_avx512(size_t oh, size_t ow, const float *x, size_t ldx, float *y) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  size_t r = ow % 16;
  __mmask16 ma = mask_of(2 * r < 16 ? 2 * r : 16), mb = mask_of(2 * r > 16 ? 2 * r - 16 : 0), my = mask_of(r);
  for (size_t row = 0; row < oh; row++) {
    const float *r0 = x + 2 * row * ldx, *r1 = r0 + ldx;
    float *yr = y + row * ow;
    size_t i = 0;
    for (; i + 16 <= ow; i += 16) {
      __m512 a0 = _mm512_loadu_ps(r0 + 2 * i), b0 = _mm512_loadu_ps(r0 + 2 * i + 16);
      __m512 a1 = _mm512_loadu_ps(r1 + 2 * i), b1 = _mm512_loadu_ps(r1 + 2 * i + 16);
      __m512 m = _mm512_permutex2var_ps(a0, ie, b0);
      m = max_step(m, _mm512_permutex2var_ps(a0, io, b0));
      m = max_step(m, _mm512_permutex2var_ps(a1, ie, b1));
      m = max_step(m, _mm512_permutex2var_ps(a1, io, b1));
      _mm512_storeu_ps(yr + i, m);
    }
    if (r) {
      __m512 a0 = _mm512_maskz_loadu_ps(ma, r0 + 2 * i), b0 = _mm512_maskz_loadu_ps(mb, r0 + 2 * i + 16);
      __m512 a1 = _mm512_maskz_loadu_ps(ma, r1 + 2 * i), b1 = _mm512_maskz_loadu_ps(mb, r1 + 2 * i + 16);
      __m512 m = _mm512_permutex2var_ps(a0, ie, b0);
      m = max_step(m, _mm512_permutex2var_ps(a0, io, b0));
      m = max_step(m, _mm512_permutex2var_ps(a1, ie, b1));
      m = max_step(m, _mm512_permutex2var_ps(a1, io, b1));
      _mm512_mask_storeu_ps(yr + i, my, m);
    }
  }
}
