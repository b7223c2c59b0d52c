/* cpu_fallback/tile_avx2: the tile ops with AVX2/FMA — the only tile file
 * built with -mavx2 -mfma, called only after the cpuid check
 * (kiln_vm_isa_active). The hot ops are written with intrinsics, keeping
 * the scalar twin's results bit for bit (NaN propagation of min/max/relu/
 * clip included); the rest are tile_ops.inc's loops, vectorised by the
 * compiler. */
#include <immintrin.h>
#include <stdint.h>

#define TILE_SUFFIX avx2
#define TILE_VM(f) kiln_vm_##f /* the entry point: AVX-512F where usable (the same bits), else AVX2 */
#include "cpu_fallback/tile_ops.inc"

#define LANES 8

/* y = f(a, b) over 8 lanes at a time, the tail by the generic loop. */
#define BINARY(expr)                                 \
  for (; i + LANES <= n; i += LANES) {               \
    __m256 x = _mm256_loadu_ps(a + i);               \
    __m256 z = _mm256_loadu_ps(b + i);               \
    (void)z;                                         \
    _mm256_storeu_ps(y + i, (expr));                 \
  }
#define UNARY(expr)                                  \
  for (; i + LANES <= n; i += LANES) {               \
    __m256 x = _mm256_loadu_ps(a + i);               \
    _mm256_storeu_ps(y + i, (expr));                 \
  }

/* 1.0f where the mask is set, 0 elsewhere. */
static inline __m256 bool01(__m256 m) { return _mm256_and_ps(m, _mm256_set1_ps(1.0f)); }

/* min/max as the twin: NaN when either is NaN, else the comparison's pick. */
static inline __m256 min_nan(__m256 x, __m256 z) {
  __m256 r = _mm256_blendv_ps(z, x, _mm256_cmp_ps(x, z, _CMP_LT_OQ));
  return _mm256_blendv_ps(r, _mm256_set1_ps(NAN), _mm256_cmp_ps(x, z, _CMP_UNORD_Q));
}
static inline __m256 max_nan(__m256 x, __m256 z) {
  __m256 r = _mm256_blendv_ps(z, x, _mm256_cmp_ps(x, z, _CMP_GT_OQ));
  return _mm256_blendv_ps(r, _mm256_set1_ps(NAN), _mm256_cmp_ps(x, z, _CMP_UNORD_Q));
}

void kiln_tile_eval_avx2(const kiln_tile_op *o, int n, const float *a, const float *b, const float *c, float *y) {
  int i = 0;
  const __m256 zero = _mm256_setzero_ps(), p0 = _mm256_set1_ps(o->p[0]), p1 = _mm256_set1_ps(o->p[1]);
  switch ((kiln_fuse_op)o->op) {
  case KILN_FUSE_ADD: BINARY(_mm256_add_ps(x, z)); break;
  case KILN_FUSE_SUB: BINARY(_mm256_sub_ps(x, z)); break;
  case KILN_FUSE_MUL: BINARY(_mm256_mul_ps(x, z)); break;
  case KILN_FUSE_DIV: BINARY(_mm256_div_ps(x, z)); break;
  case KILN_FUSE_MIN: BINARY(min_nan(x, z)); break;
  case KILN_FUSE_MAX: BINARY(max_nan(x, z)); break;
  case KILN_FUSE_EQ: BINARY(bool01(_mm256_cmp_ps(x, z, _CMP_EQ_OQ))); break;
  case KILN_FUSE_GT: BINARY(bool01(_mm256_cmp_ps(x, z, _CMP_GT_OQ))); break;
  case KILN_FUSE_LT: BINARY(bool01(_mm256_cmp_ps(x, z, _CMP_LT_OQ))); break;
  case KILN_FUSE_GE: BINARY(bool01(_mm256_cmp_ps(x, z, _CMP_GE_OQ))); break;
  case KILN_FUSE_LE: BINARY(bool01(_mm256_cmp_ps(x, z, _CMP_LE_OQ))); break;
  case KILN_FUSE_PRELU:
    BINARY(_mm256_blendv_ps(x, _mm256_mul_ps(x, z), _mm256_cmp_ps(x, zero, _CMP_LT_OQ)));
    break;
  /* x < 0 ? 0 : x keeps NaN and -0: vmaxps gives its second operand, x,
     when either is NaN or both are zeros (as for Clip below) */
  case KILN_FUSE_RELU: UNARY(_mm256_max_ps(zero, x)); break;
  case KILN_FUSE_LEAKY_RELU:
    UNARY(_mm256_blendv_ps(x, _mm256_mul_ps(p0, x), _mm256_cmp_ps(x, zero, _CMP_LT_OQ)));
    break;
  case KILN_FUSE_NEG: UNARY(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f))); break;
  case KILN_FUSE_ABS: UNARY(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x)); break;
  case KILN_FUSE_SQRT: UNARY(_mm256_sqrt_ps(x)); break;
  case KILN_FUSE_HARD_SIGMOID: {
    const __m256 one = _mm256_set1_ps(1.0f);
    /* clamp01(p0 * x + p1): mul then add, rounded twice like the twin */
    UNARY(_mm256_blendv_ps(
        _mm256_blendv_ps(_mm256_add_ps(_mm256_mul_ps(p0, x), p1), one,
                         _mm256_cmp_ps(_mm256_add_ps(_mm256_mul_ps(p0, x), p1), one, _CMP_GT_OQ)),
        zero, _mm256_cmp_ps(_mm256_add_ps(_mm256_mul_ps(p0, x), p1), zero, _CMP_LT_OQ)));
    break;
  }
  case KILN_FUSE_WHERE:
    for (; i + LANES <= n; i += LANES) {
      __m256 m = _mm256_cmp_ps(_mm256_loadu_ps(a + i), zero, _CMP_NEQ_UQ);
      _mm256_storeu_ps(y + i, _mm256_blendv_ps(_mm256_loadu_ps(c + i), _mm256_loadu_ps(b + i), m));
    }
    break;
  case KILN_FUSE_CLIP:
    /* v < lo ? lo : v, then v > hi ? hi : v, one vmaxps / vminps each: they
       give their second operand, v, when either is NaN (in v or the bound)
       or both are zeros of either sign — the twin's bits */
    for (; i + LANES <= n; i += LANES) {
      __m256 v = _mm256_max_ps(_mm256_loadu_ps(b + i), _mm256_loadu_ps(a + i));
      _mm256_storeu_ps(y + i, _mm256_min_ps(_mm256_loadu_ps(c + i), v));
    }
    break;
  default: generic_avx2(o, n, a, b, c, y); return;
  }
  if (i < n) { /* the tail */
    const float *bt = b ? b + i : NULL, *ct = c ? c + i : NULL;
    generic_avx2(o, n - i, a + i, bt, ct, y + i);
  }
}

void kiln_tile_store_avx2(float *dst, const float *src, int n, bool stream) {
  if (dst == src) return;
  int i = 0;
  if (stream) {
    for (; i < n && ((uintptr_t)(dst + i) & 31); i++) dst[i] = src[i];
    for (; i + LANES <= n; i += LANES) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
  } else {
    for (; i + LANES <= n; i += LANES) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(src + i));
  }
  for (; i < n; i++) dst[i] = src[i];
}

void kiln_tile_fence_avx2(void) { _mm_sfence(); }
