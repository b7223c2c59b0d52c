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

/* The tile executor's Gelu chain (cpu_fallback/tile.h KILN_TILE_OP_GELU) in
 * one pass: per 16 lanes t = x·s or x/s, erf16, then (x·(e + c1))·c2 or
 * (x·c2)·(e + c1) — the chain's operations in its order, erf16 being the
 * erf kernel's lane code: the bits of the chain's ops one by one. */
static inline __m512 gelu16(__m512 x, __m512 s, __m512 c1, __m512 c2, int k) {
  __m512 e = erf16(k & 1 ? _mm512_mul_ps(x, s) : _mm512_div_ps(x, s));
  __m512 u = _mm512_add_ps(e, c1);
  return k & 2 ? _mm512_mul_ps(_mm512_mul_ps(x, c2), u) : _mm512_mul_ps(_mm512_mul_ps(x, u), c2);
}

void kiln_vm_gelu_chain_avx512(size_t n, const float *x, float s, float c1, float c2, int k, float *y) {
  __m512 vs = SET1(s), v1 = SET1(c1), v2 = SET1(c2);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i), vs, v1, v2, k));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i), vs, v1, v2, k));
  }
}
