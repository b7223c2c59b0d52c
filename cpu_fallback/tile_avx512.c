/* cpu_fallback/tile_avx512: the cheap tile ops of an elementwise chain
 * (add, sub, mul, div, min, max, relu, clip) and the Gelu chain
 * (KILN_TILE_OP_GELU, one pass through vmath_avx512.c) on 16 lanes with AVX-512F —
 * the only tile file built with -mavx512f, called only where
 * kiln_vm_cpu_has_avx512() is true. Each is one IEEE operation or a
 * comparison and blend per lane, the same as the AVX2 intrinsics and the
 * scalar twin (tile_ops.inc), NaN and -0 included: the results are the
 * same bits. Every other op, and each op's tail under 16 elements, goes to
 * kiln_tile_eval_avx2. */
#include <immintrin.h>
#include <math.h>

#include "cpu_fallback/tile.h"

#define LANES 16

#define BINARY(expr)                                 \
  for (; i + LANES <= n; i += LANES) {               \
    __m512 x = _mm512_loadu_ps(a + i);               \
    __m512 z = _mm512_loadu_ps(b + i);               \
    _mm512_storeu_ps(y + i, (expr));                 \
  }

/* min/max as the twin: NaN when either is NaN, else the comparison's pick. */
static inline __m512 min_nan(__m512 x, __m512 z) {
  __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, z, _CMP_LT_OQ), z, x);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, z, _CMP_UNORD_Q), r, _mm512_set1_ps(NAN));
}
static inline __m512 max_nan(__m512 x, __m512 z) {
  __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, z, _CMP_GT_OQ), z, x);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, z, _CMP_UNORD_Q), r, _mm512_set1_ps(NAN));
}

void kiln_tile_eval_avx512(const kiln_tile_op *o, int n, const float *a, const float *b, const float *c, float *y) {
  int i = 0;
  const __m512 zero = _mm512_setzero_ps();
  if (o->op == KILN_TILE_OP_GELU) { /* one pass, erf inline (vmath_avx512.c) */
    kiln_vm_gelu_chain_avx512((size_t)n, a, o->p[0], o->p[1], o->p[2], (int)o->k, y);
    return;
  }
  switch (o->op) {
  case KILN_FUSE_ADD: BINARY(_mm512_add_ps(x, z)); break;
  case KILN_FUSE_SUB: BINARY(_mm512_sub_ps(x, z)); break;
  case KILN_FUSE_MUL: BINARY(_mm512_mul_ps(x, z)); break;
  case KILN_FUSE_DIV: BINARY(_mm512_div_ps(x, z)); break;
  case KILN_FUSE_MIN: BINARY(min_nan(x, z)); break;
  case KILN_FUSE_MAX: BINARY(max_nan(x, z)); break;
  case KILN_FUSE_RELU: /* x < 0 ? 0 : x keeps NaN and -0 */
    for (; i + LANES <= n; i += LANES) {
      __m512 x = _mm512_loadu_ps(a + i);
      _mm512_storeu_ps(y + i, _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), x, zero));
    }
    break;
  case KILN_FUSE_CLIP: /* v < lo ? lo : v, then v > hi ? hi : v (NaN in v stays) */
    for (; i + LANES <= n; i += LANES) {
      __m512 v = _mm512_loadu_ps(a + i), lo = _mm512_loadu_ps(b + i), hi = _mm512_loadu_ps(c + i);
      v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), v, lo);
      v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), v, hi);
      _mm512_storeu_ps(y + i, v);
    }
    break;
  default: kiln_tile_eval_avx2(o, n, a, b, c, y); return;
  }
  if (i < n) /* the tail, and the ops above under 16 elements */
    kiln_tile_eval_avx2(o, n - i, a + i, b ? b + i : NULL, c ? c + i : NULL, y + i);
}
