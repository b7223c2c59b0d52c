/* cpu_fallback/dws1: the scalar twin of the in-place stride-1 3 x 3
 * depthwise kernel and the choice of it (dws1.h). Built without
 * contraction: the twin's fmaf are the kernel's fmas. */
#include "cpu_fallback/dws1.h"

#include <math.h>
#include <stddef.h>

#include "cpu_fallback/sgemm.h"

void kiln_dw_s1_base(float *y, const float *x, int64_t H, int64_t W, int64_t r0, int64_t r1, const float *w,
                     float bias, float lo, float hi) {
  for (int64_t oy = r0; oy < r1; oy++)
    for (int64_t ox = 0; ox < W; ox++) {
      float acc = bias;
      for (int ky = 0; ky < 3; ky++)
        for (int kx = 0; kx < 3; kx++) {
          int64_t iy = oy - 1 + ky, ix = ox - 1 + kx;
          float v = iy >= 0 && iy < H && ix >= 0 && ix < W ? x[iy * W + ix] : 0.0f;
          acc = fmaf(w[3 * ky + kx], v, acc);
        }
      acc = acc < lo ? lo : acc;
      y[oy * W + ox] = acc > hi ? hi : acc;
    }
}

kiln_dw_s1_fn kiln_dw_s1(void) {
#ifdef KILN_DWS1_HAVE_AVX512
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && kiln_la_cpu_has_avx512()) return kiln_dw_s1_avx512;
#endif
  return NULL;
}
