/* cpu_fallback/nn_avx2: the AVX2 versions of the nn primitives (nn.h).
 * The only nn file built with -mavx2 -mfma; called only after the cpuid
 * check (kiln_nn_prims_for). Same operations in the same order as the
 * scalar twins in nn_base.c (no fmas), so results are bit-identical. */
#include <immintrin.h>
#include <math.h>

#include "cpu_fallback/nn.h"

/* Lanes [0, r) set, for a tail of r < 8 elements. */
static __m256i tail_mask(size_t r) {
  static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256((const __m256i *)(m + 8 - r));
}

static float fold8(__m256 v) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* s0+s4 .. s3+s7 */
  __m128 h = _mm_add_ps(q, _mm_movehl_ps(q, q));                                 /* (s0+s4)+(s2+s6), (s1+s5)+(s3+s7) */
  return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
}

static float sum_avx2(size_t n, const float *x) {
  __m256 s = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + i));
  if (i < n) s = _mm256_add_ps(s, _mm256_maskload_ps(x + i, tail_mask(n - i)));
  return fold8(s);
}

static float sumsq_avx2(size_t n, const float *x) {
  __m256 s = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    s = _mm256_add_ps(s, _mm256_mul_ps(v, v));
  }
  if (i < n) {
    __m256 v = _mm256_maskload_ps(x + i, tail_mask(n - i));
    s = _mm256_add_ps(s, _mm256_mul_ps(v, v));
  }
  return fold8(s);
}

/* sqdev's steps: s + (v - c)^2 over 8 elements, and over the tail's
 * lanes m (the others' differences zeroed). */
static inline __m256 sqdev_step(__m256 s, const float *x, __m256 c) {
  __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x), c);
  return _mm256_add_ps(s, _mm256_mul_ps(d, d));
}

static inline __m256 sqdev_tail(__m256 s, const float *x, __m256 c, __m256i m) {
  __m256 d = _mm256_and_ps(_mm256_sub_ps(_mm256_maskload_ps(x, m), c), _mm256_castsi256_ps(m));
  return _mm256_add_ps(s, _mm256_mul_ps(d, d));
}

static float sqdev_avx2(size_t n, const float *x, float c) {
  __m256 s = _mm256_setzero_ps(), vc = _mm256_set1_ps(c);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) s = sqdev_step(s, x + i, vc);
  if (i < n) s = sqdev_tail(s, x + i, vc, tail_mask(n - i));
  return fold8(s);
}

/* sum_avx2 and sqdev_avx2 on four rows at once: each row's chain gets the
 * same operations in the same order (its own accumulator, the same tail and
 * fold), the four chains interleaved so that the core overlaps their adds'
 * latencies; rows past a multiple of four go one by one. */
static void sums_avx2(size_t rows, size_t n, const float *x, size_t ldx, float *out) {
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float *x0 = x + r * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      s0 = _mm256_add_ps(s0, _mm256_loadu_ps(x0 + i));
      s1 = _mm256_add_ps(s1, _mm256_loadu_ps(x1 + i));
      s2 = _mm256_add_ps(s2, _mm256_loadu_ps(x2 + i));
      s3 = _mm256_add_ps(s3, _mm256_loadu_ps(x3 + i));
    }
    if (i < n) {
      __m256i m = tail_mask(n - i);
      s0 = _mm256_add_ps(s0, _mm256_maskload_ps(x0 + i, m));
      s1 = _mm256_add_ps(s1, _mm256_maskload_ps(x1 + i, m));
      s2 = _mm256_add_ps(s2, _mm256_maskload_ps(x2 + i, m));
      s3 = _mm256_add_ps(s3, _mm256_maskload_ps(x3 + i, m));
    }
    out[r] = fold8(s0), out[r + 1] = fold8(s1), out[r + 2] = fold8(s2), out[r + 3] = fold8(s3);
  }
  for (; r < rows; r++) out[r] = sum_avx2(n, x + r * ldx);
}

static void sqdevs_avx2(size_t rows, size_t n, const float *x, size_t ldx, const float *c, float *out) {
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float *x0 = x + r * ldx, *x1 = x0 + ldx, *x2 = x1 + ldx, *x3 = x2 + ldx;
    __m256 c0 = _mm256_set1_ps(c[r]), c1 = _mm256_set1_ps(c[r + 1]), c2 = _mm256_set1_ps(c[r + 2]),
           c3 = _mm256_set1_ps(c[r + 3]);
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      s0 = sqdev_step(s0, x0 + i, c0);
      s1 = sqdev_step(s1, x1 + i, c1);
      s2 = sqdev_step(s2, x2 + i, c2);
      s3 = sqdev_step(s3, x3 + i, c3);
    }
    if (i < n) {
      __m256i m = tail_mask(n - i);
      s0 = sqdev_tail(s0, x0 + i, c0, m);
      s1 = sqdev_tail(s1, x1 + i, c1, m);
      s2 = sqdev_tail(s2, x2 + i, c2, m);
      s3 = sqdev_tail(s3, x3 + i, c3, m);
    }
    out[r] = fold8(s0), out[r + 1] = fold8(s1), out[r + 2] = fold8(s2), out[r + 3] = fold8(s3);
  }
  for (; r < rows; r++) out[r] = sqdev_avx2(n, x + r * ldx, c[r]);
}

static float maxmin_avx2(size_t n, const float *x, bool is_max) {
  __m256 first = _mm256_set1_ps(x[0]), m = first, nan = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    m = is_max ? _mm256_max_ps(v, m) : _mm256_min_ps(v, m);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (i < n) {
    __m256i k = tail_mask(n - i);
    __m256 v = _mm256_blendv_ps(first, _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
    m = is_max ? _mm256_max_ps(v, m) : _mm256_min_ps(v, m);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  if (_mm256_movemask_ps(nan)) return NAN;
  float l[8];
  _mm256_storeu_ps(l, m);
  float r = l[0];
  for (int j = 1; j < 8; j++) r = is_max ? (l[j] > r ? l[j] : r) : (l[j] < r ? l[j] : r);
  return r;
}

static float max_avx2(size_t n, const float *x) { return maxmin_avx2(n, x, true); }
static float min_avx2(size_t n, const float *x) { return maxmin_avx2(n, x, false); }

/* 8 elements x[0], x[stride], ... x[7 * stride]. */
static inline __m256 load_strided(const float *x, size_t stride, __m256i idx) {
  if (stride == 1) return _mm256_loadu_ps(x);
  if (stride == 2) {
    __m256 a = _mm256_loadu_ps(x), b = _mm256_loadu_ps(x + 8);
    __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); /* a0 a2 b0 b2 | a4 a6 b4 b6 */
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
  }
  return _mm256_i32gather_ps(x, idx, 4);
}

enum { ACC_ADD, ACC_ADDSQ, ACC_MAX, ACC_MIN };

static inline __m256 acc_op(__m256 a, __m256 v, int op) {
  switch (op) {
  case ACC_ADD: return _mm256_add_ps(a, v);
  case ACC_ADDSQ: return _mm256_add_ps(a, _mm256_mul_ps(v, v));
  case ACC_MAX: return _mm256_blendv_ps(_mm256_max_ps(v, a), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  default: return _mm256_blendv_ps(_mm256_min_ps(v, a), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
}

static inline void acc_avx2(size_t n, float *acc, const float *x, size_t stride, int op) {
  size_t i = 0;
  if (stride < ((size_t)1 << 27)) {
    __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32((int)stride));
    /* stride 2 reads 16 floats for 8 results: the 16th (x[2i + 15]) must
       exist too, so that block needs a 9th element */
    size_t need = stride == 2 ? 9 : 8;
    for (; i + need <= n; i += 8)
      _mm256_storeu_ps(acc + i, acc_op(_mm256_loadu_ps(acc + i), load_strided(x + i * stride, stride, idx), op));
    if (i < n) { /* the tail (up to 8 for stride 2): masked loads and a masked gather */
      __m256i m = n - i >= 8 ? _mm256_set1_epi32(-1) : tail_mask(n - i);
      __m256 v = stride == 1
                     ? _mm256_maskload_ps(x + i, m)
                     : _mm256_mask_i32gather_ps(_mm256_setzero_ps(), x + i * stride, idx, _mm256_castsi256_ps(m), 4);
      _mm256_maskstore_ps(acc + i, m, acc_op(_mm256_maskload_ps(acc + i, m), v, op));
      return;
    }
  }
  for (; i < n; i++) {
    float v = x[i * stride];
    switch (op) {
    case ACC_ADD: acc[i] += v; break;
    case ACC_ADDSQ: acc[i] += v * v; break;
    case ACC_MAX:
      if (v > acc[i] || v != v) acc[i] = v;
      break;
    default:
      if (v < acc[i] || v != v) acc[i] = v;
      break;
    }
  }
}

static void acc_add_avx2(size_t n, float *acc, const float *x, size_t stride) { acc_avx2(n, acc, x, stride, ACC_ADD); }
static void acc_addsq_avx2(size_t n, float *acc, const float *x, size_t stride) {
  acc_avx2(n, acc, x, stride, ACC_ADDSQ);
}
static void acc_max_avx2(size_t n, float *acc, const float *x, size_t stride) { acc_avx2(n, acc, x, stride, ACC_MAX); }
/* even and odd elements of a|b (16 floats) */
static inline void deinterleave(__m256 a, __m256 b, __m256 *even, __m256 *odd) {
  __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
  *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
  *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

/* 8 outputs from 16 floats of each row; the tail (r < 8 outputs) reads
 * 2r floats of each with masked loads and writes r */
void kiln_nn_max2x2s2_avx2_only(size_t oh, size_t ow, const float *x, size_t ldx, float *y) {
  __m256 ninf = _mm256_set1_ps(-INFINITY);
  size_t r = ow % 8;
  __m256i ma = tail_mask(2 * r < 8 ? 2 * r : 8), mb = tail_mask(2 * r > 8 ? 2 * r - 8 : 0), my = tail_mask(r);
  for (size_t row = 0; row < oh; row++) {
    const float *r0 = x + 2 * row * ldx, *r1 = r0 + ldx;
    float *yr = y + row * ow;
    size_t i = 0;
    __m256 e0, o0, e1, o1;
    for (; i + 8 <= ow; i += 8) {
      deinterleave(_mm256_loadu_ps(r0 + 2 * i), _mm256_loadu_ps(r0 + 2 * i + 8), &e0, &o0);
      deinterleave(_mm256_loadu_ps(r1 + 2 * i), _mm256_loadu_ps(r1 + 2 * i + 8), &e1, &o1);
      __m256 a = acc_op(acc_op(acc_op(acc_op(ninf, e0, ACC_MAX), o0, ACC_MAX), e1, ACC_MAX), o1, ACC_MAX);
      _mm256_storeu_ps(yr + i, a);
    }
    if (r) {
      deinterleave(_mm256_maskload_ps(r0 + 2 * i, ma), _mm256_maskload_ps(r0 + 2 * i + 8, mb), &e0, &o0);
      deinterleave(_mm256_maskload_ps(r1 + 2 * i, ma), _mm256_maskload_ps(r1 + 2 * i + 8, mb), &e1, &o1);
      __m256 a = acc_op(acc_op(acc_op(acc_op(ninf, e0, ACC_MAX), o0, ACC_MAX), e1, ACC_MAX), o1, ACC_MAX);
      _mm256_maskstore_ps(yr + i, my, a);
    }
  }
}

/* The AVX2 kernel, or nn_avx512.c's for rows of at least 16 outputs where
 * the CPU has AVX-512F (the same bits; 1.2-1.3x faster there, slower on
 * rows of 8: GEMM_CONV.md "small_cnn: the 2x2 max pool on 16 lanes"). */
static kiln_vm_fn exp_kernel(void);
static void max2x2s2_avx2(size_t oh, size_t ow, const float *x, size_t ldx, float *y) {
#ifdef KILN_NN_HAVE_AVX512
  if (ow >= 16 && exp_kernel() != kiln_vm_exp_avx2_fma) { /* AVX-512F usable (asked once) */
    kiln_nn_max2x2s2_avx512(oh, ow, x, ldx, y);
    return;
  }
#endif
  kiln_nn_max2x2s2_avx2_only(oh, ow, x, ldx, y);
}

/* Rows first into buf (8 columns a step, the tail masked, -inf outside
 * the plane and past it), then per 8 outputs the even, odd and next even
 * column maxima (two deinterleaves) in kw order: max3x3s2_base's steps. */
static void max3x3s2_avx2(size_t oh, size_t ow, const float *x, size_t h, size_t w, size_t pt, size_t pl, float *y,
                          float *buf) {
  __m256 ninf = _mm256_set1_ps(-INFINITY);
  size_t nb = 2 * ow + 1, j0 = pl < nb ? pl : nb, j1 = pl + w < nb ? pl + w : nb; /* input columns: [j0, j1) */
  for (size_t j = 0; j < j0; j++) buf[j] = -INFINITY;
  for (size_t j = j1; j < nb + 17; j++) buf[j] = -INFINITY;
  for (size_t r = 0; r < oh; r++) {
    const float *rows[3];
    size_t nr = 0;
    for (size_t kh = 0; kh < 3; kh++)
      if (2 * r + kh >= pt && 2 * r + kh - pt < h) rows[nr++] = x + (2 * r + kh - pt) * w;
    size_t j = j0;
    for (; j + 8 <= j1; j += 8) {
      __m256 a = ninf;
      for (size_t k = 0; k < nr; k++) a = acc_op(a, _mm256_loadu_ps(rows[k] + (j - pl)), ACC_MAX);
      _mm256_storeu_ps(buf + j, a);
    }
    if (j < j1) {
      __m256i m = tail_mask(j1 - j);
      __m256 a = ninf;
      for (size_t k = 0; k < nr; k++) a = acc_op(a, _mm256_maskload_ps(rows[k] + (j - pl), m), ACC_MAX);
      _mm256_maskstore_ps(buf + j, m, a);
    }
    float *yr = y + r * ow;
    size_t i = 0;
    for (; i < ow; i += 8) {
      __m256 e, o, e2, o2;
      deinterleave(_mm256_loadu_ps(buf + 2 * i), _mm256_loadu_ps(buf + 2 * i + 8), &e, &o);
      deinterleave(_mm256_loadu_ps(buf + 2 * i + 2), _mm256_loadu_ps(buf + 2 * i + 10), &e2, &o2);
      __m256 a = acc_op(acc_op(e, o, ACC_MAX), e2, ACC_MAX);
      if (i + 8 <= ow) _mm256_storeu_ps(yr + i, a);
      else _mm256_maskstore_ps(yr + i, tail_mask(ow - i), a);
    }
  }
}

static void acc_min_avx2(size_t n, float *acc, const float *x, size_t stride) { acc_avx2(n, acc, x, stride, ACC_MIN); }

static void affine_avx2(size_t n, const float *x, float a, float b, float *y) {
  __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), va), vb));
  for (; i < n; i++) y[i] = x[i] * a + b;
}

static void sub_avx2(size_t n, const float *x, const float *m, float *y) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(m + i)));
  for (; i < n; i++) y[i] = x[i] - m[i];
}

static void div_avx2(size_t n, float *y, const float *d) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_div_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(d + i)));
  for (; i < n; i++) y[i] = y[i] / d[i];
}

/* The exp of the AVX2 setting: vmath's AVX-512 kernel where the CPU has
 * AVX-512F (bit-identical to the AVX2 one, about 1.4x faster), asked once. */
static kiln_vm_fn exp_kernel(void) {
  static kiln_vm_fn known; /* a race only asks twice */
  kiln_vm_fn f = __atomic_load_n(&known, __ATOMIC_RELAXED);
  if (!f) {
    f = kiln_vm_cpu_has_avx512() ? kiln_vm_kernel_avx512(KILN_VM_EXP) : NULL;
    if (!f) f = kiln_vm_exp_avx2_fma;
    __atomic_store_n(&known, f, __ATOMIC_RELAXED);
  }
  return f;
}

static float exp_shift_sum_avx2(size_t n, const float *x, float m, float *y) {
  __m256 vm = _mm256_set1_ps(m);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
  for (; i < n; i++) y[i] = x[i] - m;
  exp_kernel()(n, y, y);
  return sum_avx2(n, y);
}

static void norm_apply_avx2(size_t n, const float *x, float mean, float inv, const float *scale, const float *bias,
                            float *y) {
  __m256 vm = _mm256_set1_ps(mean), vi = _mm256_set1_ps(inv);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vi), _mm256_loadu_ps(scale + i));
    if (bias) t = _mm256_add_ps(t, _mm256_loadu_ps(bias + i));
    _mm256_storeu_ps(y + i, t);
  }
  for (; i < n; i++) {
    float t = ((x[i] - mean) * inv) * scale[i];
    y[i] = bias ? t + bias[i] : t;
  }
}

/* One 8x8 block: dst row a = source column a. */
static inline void tr8x8(const float *s, size_t lds, float *d, size_t ldd) {
  __m256 r0 = _mm256_loadu_ps(s), r1 = _mm256_loadu_ps(s + lds), r2 = _mm256_loadu_ps(s + 2 * lds),
         r3 = _mm256_loadu_ps(s + 3 * lds), r4 = _mm256_loadu_ps(s + 4 * lds), r5 = _mm256_loadu_ps(s + 5 * lds),
         r6 = _mm256_loadu_ps(s + 6 * lds), r7 = _mm256_loadu_ps(s + 7 * lds);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1), t2 = _mm256_unpacklo_ps(r2, r3),
         t3 = _mm256_unpackhi_ps(r2, r3), t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
         t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)),
         u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2)),
         u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)),
         u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2)),
         u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)),
         u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2)),
         u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)),
         u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(d, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(d + ldd, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(d + 2 * ldd, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(d + 3 * ldd, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(d + 4 * ldd, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(d + 5 * ldd, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(d + 6 * ldd, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(d + 7 * ldd, _mm256_permute2f128_ps(u3, u7, 0x31));
}

/* Panels of 16 destination rows (one 64-byte line of each source row),
 * walked along the whole destination row: 8 source rows at a time, so the
 * source lines in flight stay few (rows 4 KiB apart share L1 sets). */
/* dst[j][i] = src[i][j] for a 4 x 4 block (the SGEMM's 12-row A strips
 * are 8 + 4 columns here). */
static void tr4x4(const float *src, size_t lds, float *dst, size_t ldd) {
  __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + lds), r2 = _mm_loadu_ps(src + 2 * lds),
         r3 = _mm_loadu_ps(src + 3 * lds);
  _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
  _mm_storeu_ps(dst, r0);
  _mm_storeu_ps(dst + ldd, r1);
  _mm_storeu_ps(dst + 2 * ldd, r2);
  _mm_storeu_ps(dst + 3 * ldd, r3);
}

static void transpose32_avx2(size_t rows, size_t cols, const uint32_t *src, size_t lds, uint32_t *dst, size_t ldd) {
  size_t a = 0;
  for (; a + 16 <= rows; a += 16) {
    size_t b = 0;
    for (; b + 8 <= cols; b += 8) {
      tr8x8((const float *)(src + b * lds + a), lds, (float *)(dst + a * ldd + b), ldd);
      tr8x8((const float *)(src + b * lds + a + 8), lds, (float *)(dst + (a + 8) * ldd + b), ldd);
    }
    for (; b + 4 <= cols; b += 4)
      for (size_t aa = a; aa < a + 16; aa += 4)
        tr4x4((const float *)(src + b * lds + aa), lds, (float *)(dst + aa * ldd + b), ldd);
    for (size_t aa = a; aa < a + 16; aa++)
      for (size_t bb = b; bb < cols; bb++) dst[aa * ldd + bb] = src[bb * lds + aa];
  }
  for (; a + 8 <= rows; a += 8) {
    size_t b = 0;
    for (; b + 8 <= cols; b += 8) tr8x8((const float *)(src + b * lds + a), lds, (float *)(dst + a * ldd + b), ldd);
    for (size_t aa = a; aa < a + 8; aa++)
      for (size_t bb = b; bb < cols; bb++) dst[aa * ldd + bb] = src[bb * lds + aa];
  }
  for (; a < rows; a++)
    for (size_t b = 0; b < cols; b++) dst[a * ldd + b] = src[b * lds + a];
}

/* The composition with the AVX2 primitives, or nn_avx512.c's kernel where
 * the CPU has AVX-512F (the same bits). */
static void softmax_rows_avx2(size_t rows, size_t n, const float *x, float *y) {
#ifdef KILN_NN_HAVE_AVX512
  if (exp_kernel() != kiln_vm_exp_avx2_fma) { /* AVX-512F usable (asked once) */
    kiln_nn_softmax_rows_avx512(rows, n, x, y);
    return;
  }
#endif
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float sum = exp_shift_sum_avx2(n, xr, max_avx2(n, xr), yr);
    affine_avx2(n, yr, 1.0f / sum, 0.0f, yr);
  }
}

/* Tests only: the composition of the AVX2 primitives, never the AVX-512 kernel. */
void kiln_nn_softmax_rows_avx2_only(size_t rows, size_t n, const float *x, float *y) {
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float sum = exp_shift_sum_avx2(n, xr, max_avx2(n, xr), yr);
    affine_avx2(n, yr, 1.0f / sum, 0.0f, yr);
  }
}

const kiln_nn_prims kiln_nn_prims_avx2 = {
    .sum = sum_avx2,
    .sumsq = sumsq_avx2,
    .sqdev = sqdev_avx2,
    .sums = sums_avx2,
    .sqdevs = sqdevs_avx2,
    .max = max_avx2,
    .min = min_avx2,
    .acc_add = acc_add_avx2,
    .acc_addsq = acc_addsq_avx2,
    .acc_max = acc_max_avx2,
    .max2x2s2 = max2x2s2_avx2,
    .max3x3s2 = max3x3s2_avx2,
    .acc_min = acc_min_avx2,
    .affine = affine_avx2,
    .sub = sub_avx2,
    .div = div_avx2,
    .exp_shift_sum = exp_shift_sum_avx2,
    .softmax_rows = softmax_rows_avx2,
    .norm_apply = norm_apply_avx2,
    .transpose32 = transpose32_avx2,
};
