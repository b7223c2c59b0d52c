/* cpu_fallback/vmath_avx2: the AVX2/FMA versions (`kiln_vm_*_avx2_fma`) of
 * the vector math kernels, 8 lanes at a time. The only kiln file built with
 * -mavx2 -mfma; nothing here runs unless kiln_vm_cpu_has_avx2() said yes.
 * Each lane function mirrors its scalar twin in vmath.c operation for
 * operation (a branch there is a blend here), so results are bit-identical;
 * the tail (n mod 8) goes through the same lane function on a stack copy. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu_fallback/vmath.h"

#define SET1 _mm256_set1_ps

/* Lanes where x is NaN get x + x (a quiet NaN), like the twins. */
static inline __m256 nan_through(__m256 x, __m256 y) {
  return _mm256_blendv_ps(y, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

static inline __m256 sign_of(__m256 x) { return _mm256_and_ps(x, SET1(-0.0f)); }
static inline __m256 abs_of(__m256 x) { return _mm256_andnot_ps(SET1(-0.0f), x); }

/* 2^n for integer lanes n in [-126, 127]. */
static inline __m256 pow2i8(__m256i n) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

/* The reduction of e^c (vmath.c exp1 between the clamp and the scaling):
 * fn = rint(c·log2e), and exp_poly8 gives e^r for c = fn·ln2 + r. */
static inline __m256 exp_rint8(__m256 c) {
  return _mm256_round_ps(_mm256_mul_ps(c, SET1(KILN_VM_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline __m256 exp_poly8(__m256 c, __m256 fn) {
  __m256 r = _mm256_fnmadd_ps(fn, SET1(KILN_VM_LN2_HI), c);
  r = _mm256_fnmadd_ps(fn, SET1(KILN_VM_LN2_LO), r);
  __m256 p = SET1(KILN_VM_EXP_P0);
  p = _mm256_fmadd_ps(p, r, SET1(KILN_VM_EXP_P1));
  p = _mm256_fmadd_ps(p, r, SET1(KILN_VM_EXP_P2));
  p = _mm256_fmadd_ps(p, r, SET1(KILN_VM_EXP_P3));
  p = _mm256_fmadd_ps(p, r, SET1(KILN_VM_EXP_P4));
  p = _mm256_fmadd_ps(p, r, SET1(KILN_VM_EXP_P5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  return _mm256_add_ps(p, SET1(1.0f));
}

/* p·2^n in two steps, 2^⌊n/2⌋ (an arithmetic shift) then 2^(n−⌊n/2⌋), for
 * n ∈ [-150, 128] (vmath.c exp1's scaling). */
static inline __m256 scale2(__m256 p, __m256i n) {
  __m256i n1 = _mm256_srai_epi32(n, 1);
  __m256i n2 = _mm256_sub_epi32(n, n1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2i8(n1)), pow2i8(n2));
}

/* e^x (vmath.c exp1). */
static inline __m256 exp8(__m256 x) {
  __m256 c = _mm256_min_ps(_mm256_max_ps(x, SET1(KILN_VM_EXP_LO)), SET1(KILN_VM_EXP_HI));
  __m256 fn = exp_rint8(c);
  return nan_through(x, scale2(exp_poly8(c, fn), _mm256_cvtps_epi32(fn)));
}

/* log x (vmath.c log1). */
static inline __m256 log8(__m256 x) {
  __m256 tiny = _mm256_cmp_ps(x, SET1(1.17549435e-38f), _CMP_LT_OQ);
  __m256 xs = _mm256_blendv_ps(x, _mm256_mul_ps(x, SET1(8388608.0f)), tiny);
  __m256 adj = _mm256_and_ps(tiny, SET1(-23.0f));
  __m256i b = _mm256_castps_si256(xs);
  __m256i ei = _mm256_sub_epi32(_mm256_srli_epi32(b, 23), _mm256_set1_epi32(126));
  __m256 e = _mm256_add_ps(_mm256_cvtepi32_ps(ei), adj);
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(0x007fffff)),
                                                 _mm256_set1_epi32(0x3f000000)));
  __m256 lt = _mm256_cmp_ps(m, SET1(KILN_VM_SQRTHF), _CMP_LT_OQ);
  e = _mm256_blendv_ps(e, _mm256_sub_ps(e, SET1(1.0f)), lt);
  __m256 f = _mm256_blendv_ps(_mm256_sub_ps(m, SET1(1.0f)), _mm256_sub_ps(_mm256_add_ps(m, m), SET1(1.0f)), lt);
  __m256 z = _mm256_mul_ps(f, f);
  __m256 p = SET1(KILN_VM_LOG_P0);
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P1));
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P2));
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P3));
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P4));
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P5));
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P6));
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P7));
  p = _mm256_fmadd_ps(p, f, SET1(KILN_VM_LOG_P8));
  __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f), z);
  y = _mm256_fmadd_ps(e, SET1(KILN_VM_LN2_LO), y);
  y = _mm256_fmadd_ps(z, SET1(-0.5f), y);
  __m256 r = _mm256_add_ps(f, y);
  r = _mm256_fmadd_ps(e, SET1(KILN_VM_LN2_HI), r);
  r = _mm256_blendv_ps(r, SET1(INFINITY), _mm256_cmp_ps(x, SET1(INFINITY), _CMP_EQ_OQ));
  r = _mm256_blendv_ps(r, SET1(-INFINITY), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_EQ_OQ));
  r = _mm256_blendv_ps(r, SET1(NAN), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
  return nan_through(x, r);
}

/* tanh x (vmath.c tanh1). The clamp is written min(clamp, x) then
 * max(−clamp, ·), which keeps a NaN (vminps/vmaxps return the second operand
 * when either is NaN); the rest propagates it. */
static inline __m256 tanh8(__m256 x) {
  __m256 c = _mm256_max_ps(SET1(-KILN_VM_TANH_R_CLAMP), _mm256_min_ps(SET1(KILN_VM_TANH_R_CLAMP), x));
  __m256 z = _mm256_mul_ps(c, c);
  __m256 p = SET1(KILN_VM_TANH_RP4);
  p = _mm256_fmadd_ps(p, z, SET1(KILN_VM_TANH_RP3));
  p = _mm256_fmadd_ps(p, z, SET1(KILN_VM_TANH_RP2));
  p = _mm256_fmadd_ps(p, z, SET1(KILN_VM_TANH_RP1));
  p = _mm256_fmadd_ps(p, z, SET1(1.0f));
  __m256 q = SET1(KILN_VM_TANH_RQ4);
  q = _mm256_fmadd_ps(q, z, SET1(KILN_VM_TANH_RQ3));
  q = _mm256_fmadd_ps(q, z, SET1(KILN_VM_TANH_RQ2));
  q = _mm256_fmadd_ps(q, z, SET1(KILN_VM_TANH_RQ1));
  q = _mm256_fmadd_ps(q, z, SET1(1.0f));
  return _mm256_div_ps(_mm256_mul_ps(c, p), q);
}

/* sigmoid x (vmath.c sigmoid1). −|x| ≤ 0 needs only the lower exp clamp;
 * max(lo, −|x|) keeps a NaN (vmaxps returns its second operand when either
 * is NaN), which then propagates to the result: no fix-up blend. */
static inline __m256 sigmoid8(__m256 x) {
  __m256 c = _mm256_max_ps(SET1(KILN_VM_EXP_LO), _mm256_or_ps(x, SET1(-0.0f)));
  __m256 fn = exp_rint8(c);
  __m256 t = scale2(exp_poly8(c, fn), _mm256_cvtps_epi32(fn)); /* e^{-|x|} */
  __m256 d = _mm256_add_ps(SET1(1.0f), t);
  __m256 num = _mm256_blendv_ps(t, SET1(1.0f), _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ));
  return _mm256_div_ps(num, d);
}

/* erf x (vmath.c erf1): both branches, blended. */
static inline __m256 erf8(__m256 x) {
  __m256 a = abs_of(x);
  __m256 s = _mm256_mul_ps(x, x);
  __m256 r = SET1(KILN_VM_ERF_S0);
  r = _mm256_fmadd_ps(r, s, SET1(KILN_VM_ERF_S1));
  r = _mm256_fmadd_ps(r, s, SET1(KILN_VM_ERF_S2));
  r = _mm256_fmadd_ps(r, s, SET1(KILN_VM_ERF_S3));
  r = _mm256_fmadd_ps(r, s, SET1(KILN_VM_ERF_S4));
  r = _mm256_fmadd_ps(r, s, SET1(KILN_VM_ERF_S5));
  __m256 small = _mm256_fmadd_ps(r, x, x);
  __m256 t = _mm256_min_ps(a, SET1(KILN_VM_ERF_CLAMP));
  __m256 t2 = _mm256_mul_ps(t, t);
  __m256 q = _mm256_fmadd_ps(SET1(KILN_VM_ERF_L0), t, SET1(KILN_VM_ERF_L1));
  __m256 u = _mm256_fmadd_ps(SET1(KILN_VM_ERF_L2), t, SET1(KILN_VM_ERF_L3));
  q = _mm256_fmadd_ps(q, t2, u);
  q = _mm256_fmadd_ps(q, t, SET1(KILN_VM_ERF_L4));
  q = _mm256_fmadd_ps(q, t, SET1(KILN_VM_ERF_L5));
  q = _mm256_fmadd_ps(q, t, SET1(KILN_VM_ERF_L6));
  q = _mm256_fmsub_ps(q, t, t);
  __m256 big = _mm256_or_ps(_mm256_sub_ps(SET1(1.0f), exp8(q)), sign_of(x));
  r = _mm256_blendv_ps(big, small, _mm256_cmp_ps(a, SET1(KILN_VM_ERF_SPLIT), _CMP_LE_OQ));
  return nan_through(x, r);
}

/* ---- array kernels: 8 at a time, the tail through a stack copy ---- */

#define KILN_VM_AVX2(name, lane)                                      \
  void name(size_t n, const float *x, float *y) {                     \
    size_t i = 0;                                                     \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, lane(_mm256_loadu_ps(x + i))); \
    if (i < n) {                                                      \
      float buf[8] = {0};                                             \
      memcpy(buf, x + i, (n - i) * sizeof *x);                        \
      _mm256_storeu_ps(buf, lane(_mm256_loadu_ps(buf)));              \
      memcpy(y + i, buf, (n - i) * sizeof *y);                        \
    }                                                                 \
  }
KILN_VM_AVX2(kiln_vm_exp_avx2_fma, exp8)
KILN_VM_AVX2(kiln_vm_log_avx2_fma, log8)
KILN_VM_AVX2(kiln_vm_tanh_avx2_fma, tanh8)
KILN_VM_AVX2(kiln_vm_sigmoid_avx2_fma, sigmoid8)
KILN_VM_AVX2(kiln_vm_erf_avx2_fma, erf8)
#undef KILN_VM_AVX2
