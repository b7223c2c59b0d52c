/* cpu_fallback/gemm: MatMul and Gemm (no kernels yet). */
#include "cpu_fallback/kernels.h"

const kiln_cpu_kernel_def kiln_cpu_kernels_gemm[] = {{NULL, NULL, NULL, false}};
