/* cpu_fallback/nn_base: the portable scalar twins of the nn primitives
 * (nn.h). Built with -ffp-contract=off: every operation rounds as written,
 * in the order nn_avx2.c does it, 8 lanes at a time. */
#include <math.h>

#include "cpu_fallback/nn.h"

/* The fold of 8 partial sums shared with nn_avx2.c. */
static float fold8(const float *s) { return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7])); }

static float sum_base(size_t n, const float *x) {
  float s[8] = {0};
  for (size_t i = 0; i < n; i++) s[i & 7] += x[i];
  return fold8(s);
}

static float sumsq_base(size_t n, const float *x) {
  float s[8] = {0};
  for (size_t i = 0; i < n; i++) s[i & 7] += x[i] * x[i];
  return fold8(s);
}

static float sqdev_base(size_t n, const float *x, float c) {
  float s[8] = {0};
  for (size_t i = 0; i < n; i++) {
    float d = x[i] - c;
    s[i & 7] += d * d;
  }
  return fold8(s);
}

static void sums_base(size_t rows, size_t n, const float *x, size_t ldx, float *out) {
  for (size_t r = 0; r < rows; r++) out[r] = sum_base(n, x + r * ldx);
}

static void sqdevs_base(size_t rows, size_t n, const float *x, size_t ldx, const float *c, float *out) {
  for (size_t r = 0; r < rows; r++) out[r] = sqdev_base(n, x + r * ldx, c[r]);
}

static float max_base(size_t n, const float *x) {
  float m = x[0];
  bool nan = false;
  for (size_t i = 0; i < n; i++) {
    if (x[i] > m) m = x[i];
    nan |= x[i] != x[i];
  }
  return nan ? NAN : m;
}

static float min_base(size_t n, const float *x) {
  float m = x[0];
  bool nan = false;
  for (size_t i = 0; i < n; i++) {
    if (x[i] < m) m = x[i];
    nan |= x[i] != x[i];
  }
  return nan ? NAN : m;
}

static void acc_add_base(size_t n, float *acc, const float *x, size_t stride) {
  for (size_t i = 0; i < n; i++) acc[i] += x[i * stride];
}

static void acc_addsq_base(size_t n, float *acc, const float *x, size_t stride) {
  for (size_t i = 0; i < n; i++) acc[i] += x[i * stride] * x[i * stride];
}

/* acc keeps its value on ties (so the first of equal values stays) and
 * becomes NaN when either is NaN. */
static void acc_max_base(size_t n, float *acc, const float *x, size_t stride) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i * stride];
    if (v > acc[i] || v != v) acc[i] = v;
  }
}

static void max3x3s2_base(size_t oh, size_t ow, const float *x, size_t h, size_t w, size_t pt, size_t pl, float *y,
                          float *buf) {
  for (size_t r = 0; r < oh; r++) {
    for (size_t j = 0; j < 2 * ow + 1; j++) { /* padded column j is input column j - pl */
      float a = -INFINITY;
      for (size_t kh = 0; kh < 3 && j >= pl && j - pl < w; kh++) {
        size_t row = 2 * r + kh;
        if (row < pt || row - pt >= h) continue;
        float v = x[(row - pt) * w + j - pl];
        if (v > a || v != v) a = v;
      }
      buf[j] = a;
    }
    for (size_t i = 0; i < ow; i++) {
      float a = buf[2 * i];
      for (size_t t = 1; t < 3; t++)
        if (buf[2 * i + t] > a || buf[2 * i + t] != buf[2 * i + t]) a = buf[2 * i + t];
      y[r * ow + i] = a;
    }
  }
}

static void max2x2s2_base(size_t oh, size_t ow, const float *x, size_t ldx, float *y) {
  for (size_t r = 0; r < oh; r++) {
    const float *r0 = x + 2 * r * ldx, *r1 = r0 + ldx;
    for (size_t i = 0; i < ow; i++) {
      float a = -INFINITY, v[4] = {r0[2 * i], r0[2 * i + 1], r1[2 * i], r1[2 * i + 1]};
      for (int t = 0; t < 4; t++)
        if (v[t] > a || v[t] != v[t]) a = v[t];
      y[r * ow + i] = a;
    }
  }
}

static void acc_min_base(size_t n, float *acc, const float *x, size_t stride) {
  for (size_t i = 0; i < n; i++) {
    float v = x[i * stride];
    if (v < acc[i] || v != v) acc[i] = v;
  }
}

static void affine_base(size_t n, const float *x, float a, float b, float *y) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] * a + b;
}

static void sub_base(size_t n, const float *x, const float *m, float *y) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] - m[i];
}

static void div_base(size_t n, float *y, const float *d) {
  for (size_t i = 0; i < n; i++) y[i] = y[i] / d[i];
}

static float exp_shift_sum_base(size_t n, const float *x, float m, float *y) {
  for (size_t i = 0; i < n; i++) y[i] = x[i] - m;
  kiln_vm_exp_base(n, y, y);
  return sum_base(n, y);
}

static void norm_apply_base(size_t n, const float *x, float mean, float inv, const float *scale, const float *bias,
                            float *y) {
  if (bias)
    for (size_t i = 0; i < n; i++) y[i] = ((x[i] - mean) * inv) * scale[i] + bias[i];
  else
    for (size_t i = 0; i < n; i++) y[i] = ((x[i] - mean) * inv) * scale[i];
}

static void transpose32_base(size_t rows, size_t cols, const uint32_t *src, size_t lds, uint32_t *dst, size_t ldd) {
  enum { B = 16 };
  for (size_t a0 = 0; a0 < rows; a0 += B)
    for (size_t b0 = 0; b0 < cols; b0 += B) {
      size_t a1 = a0 + B < rows ? a0 + B : rows, b1 = b0 + B < cols ? b0 + B : cols;
      for (size_t a = a0; a < a1; a++)
        for (size_t b = b0; b < b1; b++) dst[a * ldd + b] = src[b * lds + a];
    }
}

static void softmax_rows_base(size_t rows, size_t n, const float *x, float *y) {
  for (size_t r = 0; r < rows; r++) {
    const float *xr = x + r * n;
    float *yr = y + r * n;
    float sum = exp_shift_sum_base(n, xr, max_base(n, xr), yr);
    affine_base(n, yr, 1.0f / sum, 0.0f, yr);
  }
}

const kiln_nn_prims kiln_nn_prims_base = {
    .sum = sum_base,
    .sumsq = sumsq_base,
    .sqdev = sqdev_base,
    .sums = sums_base,
    .sqdevs = sqdevs_base,
    .max = max_base,
    .min = min_base,
    .acc_add = acc_add_base,
    .acc_addsq = acc_addsq_base,
    .acc_max = acc_max_base,
    .max2x2s2 = max2x2s2_base,
    .max3x3s2 = max3x3s2_base,
    .acc_min = acc_min_base,
    .affine = affine_base,
    .sub = sub_base,
    .div = div_base,
    .exp_shift_sum = exp_shift_sum_base,
    .softmax_rows = softmax_rows_base,
    .norm_apply = norm_apply_base,
    .transpose32 = transpose32_base,
};
