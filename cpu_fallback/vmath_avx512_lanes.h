/* cpu_fallback/vmath_avx512_lanes: the lane code of vmath's AVX-512F
 * kernels (exp16, tanh16, sigmoid16, erf16 and their helpers) as static
 * inline functions, for vmath_avx512.c's kernels and for tile_avx512.c,
 * whose fused passes call them inside their strip loops (the same
 * operations, so the same bits as the kernels). Include only from files
 * built with -mavx512f -ffp-contract=off. */
#ifndef KILN_CPU_FALLBACK_VMATH_AVX512_LANES_H
#define KILN_CPU_FALLBACK_VMATH_AVX512_LANES_H
#include <immintrin.h>
#include <math.h>

#include "cpu_fallback/vmath.h"

#define SET1 _mm512_set1_ps
#define AS_I _mm512_castps_si512
#define AS_F _mm512_castsi512_ps

static inline __m512 or_ps(__m512 a, __m512 b) { return AS_F(_mm512_or_si512(AS_I(a), AS_I(b))); }
static inline __m512 sign_of(__m512 x) { return AS_F(_mm512_and_si512(AS_I(x), AS_I(SET1(-0.0f)))); }
static inline __m512 abs_of(__m512 x) { return AS_F(_mm512_andnot_si512(AS_I(SET1(-0.0f)), AS_I(x))); }

/* Lanes where x is NaN get x + x (a quiet NaN), like the twins. */
static inline __m512 nan_through(__m512 x, __m512 y) {
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, _mm512_add_ps(x, x));
}

/* The reduction of e^c (vmath.c exp1 between the clamp and the scaling):
 * fn = rint(c·log2e), and exp_poly16 gives e^r for c = fn·ln2 + r. */
static inline __m512 exp_rint16(__m512 c) {
  return _mm512_roundscale_ps(_mm512_mul_ps(c, SET1(KILN_VM_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static inline __m512 exp_poly16(__m512 c, __m512 fn) {
  __m512 r = _mm512_fnmadd_ps(fn, SET1(KILN_VM_LN2_HI), c);
  r = _mm512_fnmadd_ps(fn, SET1(KILN_VM_LN2_LO), r);
  __m512 p = SET1(KILN_VM_EXP_P0);
  p = _mm512_fmadd_ps(p, r, SET1(KILN_VM_EXP_P1));
  p = _mm512_fmadd_ps(p, r, SET1(KILN_VM_EXP_P2));
  p = _mm512_fmadd_ps(p, r, SET1(KILN_VM_EXP_P3));
  p = _mm512_fmadd_ps(p, r, SET1(KILN_VM_EXP_P4));
  p = _mm512_fmadd_ps(p, r, SET1(KILN_VM_EXP_P5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
  return _mm512_add_ps(p, SET1(1.0f));
}

/* e^x (vmath.c exp1). The twin's p·2^⌊n/2⌋·2^(n−⌊n/2⌋) rounds once (the
 * first product is exact: p ≥ 0.7 and ⌊n/2⌋ ≥ −75), and so does
 * vscalefps p·2^n, overflow and denormal results included: same bits. */
static inline __m512 exp16(__m512 x) {
  __m512 c = _mm512_min_ps(_mm512_max_ps(x, SET1(KILN_VM_EXP_LO)), SET1(KILN_VM_EXP_HI));
  __m512 fn = exp_rint16(c);
  return nan_through(x, _mm512_scalef_ps(exp_poly16(c, fn), fn));
}

/* tanh x (vmath.c tanh1; vmath_avx2.c tanh8 on 16 lanes, NaN kept by the
 * operand order of the clamp). */
static inline __m512 tanh16(__m512 x) {
  __m512 c = _mm512_max_ps(SET1(-KILN_VM_TANH_R_CLAMP), _mm512_min_ps(SET1(KILN_VM_TANH_R_CLAMP), x));
  __m512 z = _mm512_mul_ps(c, c);
  __m512 p = SET1(KILN_VM_TANH_RP4);
  p = _mm512_fmadd_ps(p, z, SET1(KILN_VM_TANH_RP3));
  p = _mm512_fmadd_ps(p, z, SET1(KILN_VM_TANH_RP2));
  p = _mm512_fmadd_ps(p, z, SET1(KILN_VM_TANH_RP1));
  p = _mm512_fmadd_ps(p, z, SET1(1.0f));
  __m512 q = SET1(KILN_VM_TANH_RQ4);
  q = _mm512_fmadd_ps(q, z, SET1(KILN_VM_TANH_RQ3));
  q = _mm512_fmadd_ps(q, z, SET1(KILN_VM_TANH_RQ2));
  q = _mm512_fmadd_ps(q, z, SET1(KILN_VM_TANH_RQ1));
  q = _mm512_fmadd_ps(q, z, SET1(1.0f));
  return _mm512_div_ps(_mm512_mul_ps(c, p), q);
}

/* sigmoid x (vmath.c sigmoid1). −|x| ≤ 0 needs only the lower exp clamp;
 * max(lo, −|x|) keeps a NaN (vmaxps returns its second operand when either
 * is NaN), which then propagates to the result: no fix-up blend. */
static inline __m512 sigmoid16(__m512 x) {
  __m512 c = _mm512_max_ps(SET1(KILN_VM_EXP_LO), or_ps(x, SET1(-0.0f)));
  __m512 fn = exp_rint16(c);
  __m512 t = _mm512_scalef_ps(exp_poly16(c, fn), fn); /* e^{-|x|} */
  __m512 d = _mm512_add_ps(SET1(1.0f), t);
  __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ), t, SET1(1.0f));
  return _mm512_div_ps(num, d);
}

/* erf's two branches (vmath.c erf1): the small one, x + x·P5(x²), for
 * |x| <= KILN_VM_ERF_SPLIT, and the big one, sign(x)·(1 − e^{Q6(t)}) with
 * t = min(|x|, 4), for the rest, without the NaN pass. The big branch's e^q
 * is exp16 without its clamp and NaN pass: t is never NaN (vminps returns
 * the clamp when |x| is NaN) and q(t) for t in [0, 4] lies in [-18, 0],
 * inside [KILN_VM_EXP_LO, KILN_VM_EXP_HI], so both were identities. */
static inline __m512 erf_small16(__m512 x) {
  __m512 s = _mm512_mul_ps(x, x);
  __m512 r = SET1(KILN_VM_ERF_S0);
  r = _mm512_fmadd_ps(r, s, SET1(KILN_VM_ERF_S1));
  r = _mm512_fmadd_ps(r, s, SET1(KILN_VM_ERF_S2));
  r = _mm512_fmadd_ps(r, s, SET1(KILN_VM_ERF_S3));
  r = _mm512_fmadd_ps(r, s, SET1(KILN_VM_ERF_S4));
  r = _mm512_fmadd_ps(r, s, SET1(KILN_VM_ERF_S5));
  return _mm512_fmadd_ps(r, x, x);
}

static inline __m512 erf_big16(__m512 x) {
  __m512 t = _mm512_min_ps(abs_of(x), SET1(KILN_VM_ERF_CLAMP));
  __m512 t2 = _mm512_mul_ps(t, t);
  __m512 q = _mm512_fmadd_ps(SET1(KILN_VM_ERF_L0), t, SET1(KILN_VM_ERF_L1));
  __m512 u = _mm512_fmadd_ps(SET1(KILN_VM_ERF_L2), t, SET1(KILN_VM_ERF_L3));
  q = _mm512_fmadd_ps(q, t2, u);
  q = _mm512_fmadd_ps(q, t, SET1(KILN_VM_ERF_L4));
  q = _mm512_fmadd_ps(q, t, SET1(KILN_VM_ERF_L5));
  q = _mm512_fmadd_ps(q, t, SET1(KILN_VM_ERF_L6));
  q = _mm512_fmsub_ps(q, t, t);
  __m512 fn = exp_rint16(q);
  return or_ps(_mm512_sub_ps(SET1(1.0f), _mm512_scalef_ps(exp_poly16(q, fn), fn)), sign_of(x));
}

/* The lanes that take erf's big branch: |x| > KILN_VM_ERF_SPLIT, or NaN. */
static inline __mmask16 erf_big_lanes16(__m512 x) {
  return _mm512_cmp_ps_mask(abs_of(x), SET1(KILN_VM_ERF_SPLIT), _CMP_NLE_UQ);
}

/* erf x (vmath_avx2.c erf8, operation for operation, less two no-ops):
 * both branches, blended, a NaN x passed through at the end. The big
 * branch without exp's clamp and NaN pass was checked on all 2^32 inputs
 * against the version with them, bit for bit (GEMM_CONV.md, the
 * transformer, 2026-11-26); tests/unit_vmath compares it with the scalar
 * twin on a dense sweep of the big branch. */
static inline __m512 erf16(__m512 x) {
  return nan_through(x, _mm512_mask_blend_ps(erf_big_lanes16(x), erf_small16(x), erf_big16(x)));
}

#endif
