/* cpu_fallback/vmath_avx512: AVX-512F versions of exp, tanh, sigmoid and erf
 * (`kiln_vm_*_avx512`), 16 lanes at a time. Built with -mavx512f -mfma;
 * used only where kiln_vm_cpu_has_avx512() said yes. Each lane function is
 * vmath_avx2.c's, operation for operation (blends become mask blends, the
 * float and/or/andnot become integer ones on the same bits), so results are
 * bit-identical to the AVX2 kernels and to the scalar twins; the tail
 * (n mod 16) runs the same lane function under a mask. */
#include <immintrin.h>
#include <math.h>

#include "cpu_fallback/vmath.h"
#include "cpu_fallback/vmath_avx512_lanes.h" /* exp16, tanh16, sigmoid16, erf16 */

#define KILN_VM_AVX512(name, lane)                                                       \
  void name(size_t n, const float *x, float *y) {                                        \
    size_t i = 0;                                                                        \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, lane(_mm512_loadu_ps(x + i)));  \
    if (i < n) {                                                                         \
      __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                   \
      _mm512_mask_storeu_ps(y + i, m, lane(_mm512_maskz_loadu_ps(m, x + i)));           \
    }                                                                                    \
  }
KILN_VM_AVX512(kiln_vm_exp_avx512, exp16)
KILN_VM_AVX512(kiln_vm_tanh_avx512, tanh16)
KILN_VM_AVX512(kiln_vm_sigmoid_avx512, sigmoid16)
KILN_VM_AVX512(kiln_vm_erf_avx512, erf16)
#undef KILN_VM_AVX512

/* The tile executor's Gelu chain (cpu_fallback/tile.h KILN_TILE_OP_GELU):
 * per 16 lanes t = x·s or x/s, erf16, then (x·(e + c1))·c2 or
 * (x·c2)·(e + c1) — the chain's operations in its order, erf16 being the
 * erf kernel's lane code: the bits of the chain's ops one by one. */
static inline __m512 gelu_t16(__m512 x, __m512 s, int k) { return k & 1 ? _mm512_mul_ps(x, s) : _mm512_div_ps(x, s); }
static inline __m512 gelu_end16(__m512 x, __m512 e, __m512 c1, __m512 c2, int k) {
  __m512 u = _mm512_add_ps(e, c1);
  return k & 2 ? _mm512_mul_ps(_mm512_mul_ps(x, c2), u) : _mm512_mul_ps(_mm512_mul_ps(x, u), c2);
}
static inline __m512 gelu16(__m512 x, __m512 s, __m512 c1, __m512 c2, int k) {
  return gelu_end16(x, erf16(gelu_t16(x, s, k)), c1, c2, k);
}

/* The chain over blocks of GELU_BLOCK elements, each lane through one of
 * erf's branches instead of both (2026-11-26, issue 6): in a Gelu's
 * inputs most lanes take the small branch but nearly every 16-lane group
 * has a lane that does not (the transformer's ffn1: 81 % and 97 %). Pass 1
 * computes every lane with the small branch and stores it, and packs the
 * x of the other lanes (|t| > split, or NaN) densely into xb
 * (vcompressps), remembering each group's mask; pass 2 runs the big
 * branch, the NaN pass and the chain's end on the packed lanes, 16 at a
 * time; pass 3 puts those results back into their groups (vexpandps). Each
 * lane gets the same operations as in gelu16, so the same bits. */
#define GELU_BLOCK 512

static void gelu_block(size_t n, const float *x, __m512 vs, __m512 v1, __m512 v2, int k, float *y) {
  float xb[GELU_BLOCK + 16]; /* a compressed group is stored whole, pass 3 reads whole vectors: 16 floats of room */
  __mmask16 mb[GELU_BLOCK / 16];
  size_t cnt = 0;
  for (size_t i = 0; i < n; i += 16) {
    __m512 xv = _mm512_loadu_ps(x + i), t = gelu_t16(xv, vs, k);
    __mmask16 big = erf_big_lanes16(t);
    mb[i / 16] = big;
    _mm512_storeu_ps(xb + cnt, _mm512_maskz_compress_ps(big, xv));
    cnt += (size_t)__builtin_popcount(big);
    _mm512_storeu_ps(y + i, gelu_end16(xv, erf_small16(t), v1, v2, k));
  }
  for (size_t j = 0; j < cnt; j += 16) {
    __mmask16 m = cnt - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cnt - j)) - 1u);
    __m512 xv = _mm512_maskz_loadu_ps(m, xb + j), t = gelu_t16(xv, vs, k);
    _mm512_storeu_ps(xb + j, gelu_end16(xv, nan_through(t, erf_big16(t)), v1, v2, k));
  }
  _mm512_storeu_ps(xb + (cnt + 15) / 16 * 16, _mm512_setzero_ps()); /* pass 3 reads 16 from each group's start */
  for (size_t i = 0, j = 0; i < n; i += 16) {
    __mmask16 m = mb[i / 16];
    if (!m) continue;
    _mm512_storeu_ps(y + i, _mm512_mask_expand_ps(_mm512_loadu_ps(y + i), m, _mm512_loadu_ps(xb + j)));
    j += (size_t)__builtin_popcount(m);
  }
}

void kiln_vm_gelu_chain_avx512(size_t n, const float *x, float s, float c1, float c2, int k, float *y) {
  __m512 vs = SET1(s), v1 = SET1(c1), v2 = SET1(c2);
  size_t i = 0;
  for (size_t full = n / 16 * 16; i < full; i += GELU_BLOCK)
    gelu_block(full - i < GELU_BLOCK ? full - i : GELU_BLOCK, x + i, vs, v1, v2, k, y + i);
  i = n / 16 * 16;
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i), vs, v1, v2, k));
  }
}
