/* cpu_fallback/kernels: the registry of kiln's own CPU kernels. */
#include "cpu_fallback/kernels.h"

#include <stdlib.h>
#include <string.h>

static const kiln_cpu_kernel_def *const tables[] = {kiln_cpu_kernels_gemm, kiln_cpu_kernels_conv, kiln_cpu_kernels_nn,
                                                    kiln_cpu_kernels_ext};

static bool default_domain(const char *d) { return !d || !*d || !strcmp(d, "ai.onnx"); }

const kiln_cpu_kernel_def *kiln_cpu_kernel_find(const char *domain, const char *op_type) {
  const char *env = getenv("KILN_CPU_KERNELS");
  if (env && !strcmp(env, "reference")) return NULL;
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (const kiln_cpu_kernel_def *d = tables[t]; d->op_type; d++) {
      bool same_domain = default_domain(domain) ? default_domain(d->domain) : d->domain && !strcmp(d->domain, domain);
      if (same_domain && !strcmp(d->op_type, op_type)) return d;
    }
  return NULL;
}

/* y = clip(y (+ b), lo, hi) over n elements, groups of 8 in straight lines
 * (vectorised at -O2: v < lo ? lo : v is maxps(lo, v), NaN kept) */
#define CLAMP_LOOP(ADD)                                                         \
  do {                                                                          \
    int64_t i = 0;                                                              \
    for (; i + 8 <= n; i += 8) {                                                \
      float *q = y + i, v[8];                                                   \
      for (int l = 0; l < 8; l++) v[l] = q[l] ADD;                              \
      for (int l = 0; l < 8; l++) v[l] = v[l] < lo ? lo : v[l];                \
      for (int l = 0; l < 8; l++) q[l] = v[l] > hi ? hi : v[l];                \
    }                                                                           \
    for (; i < n; i++) {                                                        \
      float v = y[i] ADD;                                                       \
      v = v < lo ? lo : v;                                                      \
      y[i] = v > hi ? hi : v;                                                   \
    }                                                                           \
  } while (0)

void kiln_cpu_clamp(float *y, int64_t n, const float *bias, float lo, float hi) {
  if (bias) {
    float b = *bias;
    CLAMP_LOOP(+b);
  } else {
    CLAMP_LOOP();
  }
}

void kiln_cpu_residual(float *y, const float *r, int64_t n, float lo, float hi) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) { /* groups of 8 in straight lines, as CLAMP_LOOP */
    float *q = y + i, v[8];
    for (int l = 0; l < 8; l++) v[l] = q[l] + r[i + l];
    for (int l = 0; l < 8; l++) v[l] = v[l] < lo ? lo : v[l];
    for (int l = 0; l < 8; l++) q[l] = v[l] > hi ? hi : v[l];
  }
  for (; i < n; i++) {
    float v = y[i] + r[i];
    v = v < lo ? lo : v;
    y[i] = v > hi ? hi : v;
  }
}
