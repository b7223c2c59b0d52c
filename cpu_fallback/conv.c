/* cpu_fallback/conv: convolution (no kernels yet). */
#include "cpu_fallback/kernels.h"

const kiln_cpu_kernel_def kiln_cpu_kernels_conv[] = {{NULL, NULL, NULL, false}};
