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
