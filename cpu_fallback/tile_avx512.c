/* cpu_fallback/tile_avx512: the cheap tile ops of an elementwise chain
 * (add, sub, mul, div, min, max, relu, clip) and the Gelu chain
 * (KILN_TILE_OP_GELU, one pass through vmath_avx512.c) on 16 lanes with AVX-512F —
 * the only tile file built with -mavx512f, called only where
 * kiln_vm_cpu_has_avx512() is true. Each is one IEEE operation or a
 * comparison and blend per lane, the same as the AVX2 intrinsics and the
 * scalar twin (tile_ops.inc), NaN and -0 included: the results are the
 * same bits. Every other op, and each op's tail under 16 elements, goes to
 * kiln_tile_eval_avx2. The linear runs (kiln_tile_seq): those ops and
 * vmath's sigmoid/tanh/exp/erf lanes, a strip of 4 vectors through every
 * step in registers. Also the box columns' moves (data only, the same
 * values as their twins in tile.c): the stride-4 column load and the
 * interleaving of four columns into rows. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "cpu_fallback/tile.h"
#include "cpu_fallback/vmath_avx512_lanes.h" /* the runs' sigmoid16, tanh16, exp16, erf16 */

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

/* v < lo ? lo : v and v > hi ? hi : v in one instruction each: vmaxps /
 * vminps return their second operand when either is NaN or both are zeros
 * of either sign, and v is the second here — so NaN in v or in the bound,
 * and -0 against 0, give v, as the twin's comparison does: the same bits
 * as a compare and a blend. */
static inline __m512 max_low(__m512 lo, __m512 v) { return _mm512_max_ps(lo, v); }
static inline __m512 min_high(__m512 hi, __m512 v) { return _mm512_min_ps(hi, v); }

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
  case KILN_FUSE_RELU: /* x < 0 ? 0 : x (NaN and -0 kept): max_low */
    for (; i + LANES <= n; i += LANES) _mm512_storeu_ps(y + i, max_low(zero, _mm512_loadu_ps(a + i)));
    break;
  case KILN_FUSE_CLIP: /* v < lo ? lo : v, then v > hi ? hi : v (NaN in v stays) */
    for (; i + LANES <= n; i += LANES) {
      __m512 v = max_low(_mm512_loadu_ps(b + i), _mm512_loadu_ps(a + i));
      _mm512_storeu_ps(y + i, min_high(_mm512_loadu_ps(c + i), v));
    }
    break;
  default: kiln_tile_eval_avx2(o, n, a, b, c, y); return;
  }
  if (i < n) /* the tail, and the ops above under 16 elements */
    kiln_tile_eval_avx2(o, n - i, a + i, b ? b + i : NULL, c ? c + i : NULL, y + i);
}

/* ---- linear runs in registers (kiln_tile_seq) ---- */

/* A strip is 4 vectors (independent chains for the out-of-order core),
 * held in four variables, not an array: gcc kept an array on the stack,
 * a store and a load per vector at every step (the 16M chain 18.2 → 15.0
 * ms at 1 thread, TILE.md "Runs in registers"). The tail runs a vector at
 * a time under a mask. ON4(E) / ON1(E) set each vector to E, with X its
 * value and J its offset from element i. */
#define ON_(V, OFF, E)  \
  do {                  \
    const __m512 X = V; \
    const int J = OFF;  \
    (void)J;            \
    V = (E);            \
  } while (0)
#define ON4(E)             \
  do {                     \
    ON_(v0, 0, E);         \
    ON_(v1, 16, E);        \
    ON_(v2, 32, E);        \
    ON_(v3, 48, E);        \
  } while (0)
#define ON1(E) ON_(v0, 0, E)
#define LOAD4(p) _mm512_loadu_ps(p)
#define LOAD1(p) _mm512_maskz_loadu_ps(m, p) /* lanes outside m read as 0 */

/* Step s of the run on the strip's vectors at element i: one switch per
 * strip, the operand's kind (uniform or a tile, which side) decided once
 * per strip; each case is the lane code of kiln_tile_eval_avx512 /
 * vmath's kernels. */
#define SEQ_BIN(ON, LOAD, F)                         \
  do {                                               \
    int k = 1 - s->pos;                              \
    if (s->uniform[k]) {                             \
      const __m512 o = _mm512_set1_ps(s->a[k][0]);   \
      if (k == 1) ON(F(X, o));                       \
      else ON(F(o, X));                              \
    } else {                                         \
      const float *p = s->a[k] + i;                  \
      if (k == 1) ON(F(X, LOAD(p + J)));             \
      else ON(F(LOAD(p + J), X));                    \
    }                                                \
  } while (0)
#define SEQ_ARG(LOAD, k, J) (s->uniform[k] ? _mm512_set1_ps(s->a[k][0]) : LOAD(s->a[k] + i + (J)))
#define SEQ_STEP(ON, LOAD)                                                                \
  switch (s->op.op) {                                                                     \
  case KILN_FUSE_ADD: SEQ_BIN(ON, LOAD, _mm512_add_ps); break;                            \
  case KILN_FUSE_SUB: SEQ_BIN(ON, LOAD, _mm512_sub_ps); break;                            \
  case KILN_FUSE_MUL: SEQ_BIN(ON, LOAD, _mm512_mul_ps); break;                            \
  case KILN_FUSE_DIV: SEQ_BIN(ON, LOAD, _mm512_div_ps); break;                            \
  case KILN_FUSE_MIN: SEQ_BIN(ON, LOAD, min_nan); break;                                  \
  case KILN_FUSE_MAX: SEQ_BIN(ON, LOAD, max_nan); break;                                  \
  case KILN_FUSE_RELU: ON(max_low(zero, X)); break;                                       \
  case KILN_FUSE_CLIP: /* the value is argument 0 (kiln_tile_bind) */                     \
    if (s->uniform[1] && s->uniform[2]) {                                                 \
      const __m512 lo = _mm512_set1_ps(s->a[1][0]), hi = _mm512_set1_ps(s->a[2][0]);      \
      ON(min_high(hi, max_low(lo, X)));                                                   \
    } else {                                                                              \
      ON(min_high(SEQ_ARG(LOAD, 2, J), max_low(SEQ_ARG(LOAD, 1, J), X)));                 \
    }                                                                                     \
    break;                                                                                \
  case KILN_FUSE_SIGMOID: ON(sigmoid16(X)); break;                                        \
  case KILN_FUSE_TANH: ON(tanh16(X)); break;                                              \
  case KILN_FUSE_EXP: ON(exp16(X)); break;                                                \
  case KILN_FUSE_ERF: ON(erf16(X)); break;                                                \
  default: break; /* kiln_tile_seq_op refuses every other op */                           \
  }

void kiln_tile_seq_avx512(const kiln_tile_seq *q, int n, float *y) {
  const __m512 zero = _mm512_setzero_ps();
  int i = 0;
  for (; i + 64 <= n; i += 64) {
    __m512 v0 = _mm512_loadu_ps(q->x + i), v1 = _mm512_loadu_ps(q->x + i + 16);
    __m512 v2 = _mm512_loadu_ps(q->x + i + 32), v3 = _mm512_loadu_ps(q->x + i + 48);
    for (int k = 0; k < q->n; k++) {
      const kiln_tile_seq_step *s = &q->s[k];
      SEQ_STEP(ON4, LOAD4)
    }
    if (q->stream && !((uintptr_t)(y + i) & 63)) { /* four whole lines, around the caches */
      _mm512_stream_ps(y + i, v0);
      _mm512_stream_ps(y + i + 16, v1);
      _mm512_stream_ps(y + i + 32, v2);
      _mm512_stream_ps(y + i + 48, v3);
    } else {
      _mm512_storeu_ps(y + i, v0);
      _mm512_storeu_ps(y + i + 16, v1);
      _mm512_storeu_ps(y + i + 32, v2);
      _mm512_storeu_ps(y + i + 48, v3);
    }
  }
  for (; i < n; i += 16) { /* the tail, a vector at a time */
    int c = n - i < 16 ? n - i : 16;
    __mmask16 m = (__mmask16)((1u << c) - 1u);
    __m512 v0 = _mm512_maskz_loadu_ps(m, q->x + i);
    for (int k = 0; k < q->n; k++) {
      const kiln_tile_seq_step *s = &q->s[k];
      SEQ_STEP(ON1, LOAD1)
    }
    _mm512_mask_storeu_ps(y + i, m, v0);
  }
}
#undef SEQ_STEP
#undef SEQ_ARG
#undef SEQ_BIN
#undef LOAD1
#undef LOAD4
#undef ON1
#undef ON4
#undef ON_

/* dst[i] = s[4 i]: per 16 outputs, four loads of 16 and three permutes.
 * Reads s[0 .. 4 (n - 1)] only: the last block loads its fourth vector
 * under a mask (the column's last element is the tensor's last but up to
 * three). */
void kiln_tile_load_s4_avx512(float *dst, const float *s, int64_t n) {
  const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES) {
    const float *p = s + 4 * i;
    __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16), c = _mm512_loadu_ps(p + 32);
    __m512 d = i + LANES < n ? _mm512_loadu_ps(p + 48) : _mm512_maskz_loadu_ps(0x1fff, p + 48);
    __m512 ab = _mm512_permutex2var_ps(a, pick, b), cd = _mm512_permutex2var_ps(c, pick, d);
    _mm512_storeu_ps(dst + i, _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)));
  }
  for (; i < n; i++) dst[i] = s[4 * i];
}

/* cj[i] = s[4 i + j] for j < 4: the four columns of n rows in one pass —
 * per 16 rows four loads, four two-source permutes (columns a b and c d
 * of 8 rows each) and four 128-bit shuffles (the two halves joined). The
 * last block loads under masks, so nothing past s[4 n - 1] is read. */
void kiln_tile_load_cols4_avx512(float *c0, float *c1, float *c2, float *c3, const float *s, int64_t n) {
  const __m512i ab = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i cd = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
  for (int64_t i = 0; i < n; i += LANES) {
    const float *p = s + 4 * i;
    int64_t left = 4 * (n - i); /* floats of this block's rows */
    __m512 r[4];
    __mmask16 m = 0xffff;
    if (left >= 64) {
      for (int k = 0; k < 4; k++) r[k] = _mm512_loadu_ps(p + 16 * k);
    } else {
      for (int k = 0; k < 4; k++) {
        int64_t c = left - 16 * k;
        __mmask16 mk = c >= 16 ? (__mmask16)0xffff : c <= 0 ? (__mmask16)0 : (__mmask16)((1u << c) - 1u);
        r[k] = _mm512_maskz_loadu_ps(mk, p + 16 * k);
      }
      m = (__mmask16)((1u << (n - i)) - 1u);
    }
    __m512 ab0 = _mm512_permutex2var_ps(r[0], ab, r[1]), ab1 = _mm512_permutex2var_ps(r[2], ab, r[3]);
    __m512 cd0 = _mm512_permutex2var_ps(r[0], cd, r[1]), cd1 = _mm512_permutex2var_ps(r[2], cd, r[3]);
    _mm512_mask_storeu_ps(c0 + i, m, _mm512_shuffle_f32x4(ab0, ab1, _MM_SHUFFLE(1, 0, 1, 0)));
    _mm512_mask_storeu_ps(c1 + i, m, _mm512_shuffle_f32x4(ab0, ab1, _MM_SHUFFLE(3, 2, 3, 2)));
    _mm512_mask_storeu_ps(c2 + i, m, _mm512_shuffle_f32x4(cd0, cd1, _MM_SHUFFLE(1, 0, 1, 0)));
    _mm512_mask_storeu_ps(c3 + i, m, _mm512_shuffle_f32x4(cd0, cd1, _MM_SHUFFLE(3, 2, 3, 2)));
  }
}

/* rows[4 i + j] = column j at i: per 16 rows, pairs (a b), (c d) by four
 * 32-bit permutes, then the pairs interleaved by four 64-bit permutes. */
void kiln_tile_rows4_avx512(float *rows, const float *a, const float *b, const float *c, const float *d, int n) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i q0 = _mm512_setr_epi64(0, 8, 1, 9, 2, 10, 3, 11), q1 = _mm512_setr_epi64(4, 12, 5, 13, 6, 14, 7, 15);
  int i = 0;
  for (; i + LANES <= n; i += LANES) {
    __m512 va = _mm512_loadu_ps(a + i), vb = _mm512_loadu_ps(b + i);
    __m512 vc = _mm512_loadu_ps(c + i), vd = _mm512_loadu_ps(d + i);
    __m512d ab0 = _mm512_castps_pd(_mm512_permutex2var_ps(va, lo, vb));
    __m512d ab1 = _mm512_castps_pd(_mm512_permutex2var_ps(va, hi, vb));
    __m512d cd0 = _mm512_castps_pd(_mm512_permutex2var_ps(vc, lo, vd));
    __m512d cd1 = _mm512_castps_pd(_mm512_permutex2var_ps(vc, hi, vd));
    float *r = rows + 4 * i;
    _mm512_storeu_ps(r, _mm512_castpd_ps(_mm512_permutex2var_pd(ab0, q0, cd0)));
    _mm512_storeu_ps(r + 16, _mm512_castpd_ps(_mm512_permutex2var_pd(ab0, q1, cd0)));
    _mm512_storeu_ps(r + 32, _mm512_castpd_ps(_mm512_permutex2var_pd(ab1, q0, cd1)));
    _mm512_storeu_ps(r + 48, _mm512_castpd_ps(_mm512_permutex2var_pd(ab1, q1, cd1)));
  }
  for (; i < n; i++) {
    float *r = rows + 4 * i;
    r[0] = a[i], r[1] = b[i], r[2] = c[i], r[3] = d[i];
  }
}
