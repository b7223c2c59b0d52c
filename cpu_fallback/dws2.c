/* cpu_fallback/dws2: the scalar twin of the in-place stride-2 depthwise
 * kernels and the choice among them (dws2.h). Built without contraction:
 * the twin's fmaf are the kernels' fmas. */
#include "cpu_fallback/dws2.h"

#include <math.h>

#include "cpu_fallback/sgemm.h"

void kiln_dw_s2_base(float *y, const float *x, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t pt, int64_t pl,
                     const float *w, int KH, int KW, float bias, float lo, float hi) {
  for (int64_t oy = 0; oy < OH; oy++)
    for (int64_t ox = 0; ox < OW; ox++) {
      float acc = bias;
      for (int ky = 0; ky < KH; ky++)
        for (int kx = 0; kx < KW; kx++) {
          int64_t iy = 2 * oy - pt + ky, ix = 2 * ox - pl + kx;
          float v = iy >= 0 && iy < H && ix >= 0 && ix < W ? x[iy * W + ix] : 0.0f;
          acc = fmaf(w[ky * KW + kx], v, acc);
        }
      acc = acc < lo ? lo : acc;
      y[oy * OW + ox] = acc > hi ? hi : acc;
    }
}

kiln_dw_s2_fn kiln_dw_s2(int64_t OW) {
#ifdef KILN_DWS2_HAVE_X86
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && kiln_la_cpu_has_avx512()) return kiln_dw_s2_avx512;
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && OW <= KILN_DW_S2_AVX2_MAX_OW) return kiln_dw_s2_avx2;
#else
  (void)OW;
#endif
  return NULL;
}
