/* cpu_fallback/sls: kiln's custom-domain kernels (no kernels yet). */
#include "cpu_fallback/kernels.h"

const kiln_cpu_kernel_def kiln_cpu_kernels_ext[] = {{NULL, NULL, NULL, false}};
