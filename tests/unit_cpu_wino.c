/* unit_cpu_wino: Winograd F(2x2, 3x3) (cpu_fallback/wino.h).
 *  - the scalar twin (transforms + kiln_sgemm) against the direct
 *    definition summed in double, on awkward sizes: odd H/W (tails of
 *    tiles), pads 0/1 and asymmetric ones, C and M not multiples of 16,
 *    several images, bias, Relu/Clip clamps; the max error relative to the
 *    sum of |x·w| printed (GEMM_CONV.md);
 *  - the AVX-512 transforms against the twin, bit for bit (where AVX-512F
 *    runs);
 *  - NaN inputs: the outputs NaN exactly where the direct definition's are;
 * Conv's dispatch to it (KILN_CONV_WINO=1: wherever it applies, U per call)
 * is tested by unit_cpu_gemm_wino (unit_cpu_gemm's Conv cases against the
 * reference kernel); the default rule (a plan's U) by conformance_cpu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_fallback/kernels.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/sgemm.h"
#include "cpu_fallback/wino.h"

static int passed, failed;
static double max_rel;

static unsigned rng = 12345u;
static float frand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

typedef struct wcase {
  int64_t N, C, M, H, W, pt, pl, pb, pr;
  int clamp; /* 0 none, 1 Relu, 2 Clip(-0.5, 0.75) */
  int nan;   /* NaN inputs at a few places */
} wcase;

static void direct(const wcase *c, const float *x, const float *w, const float *b, int64_t OH, int64_t OW, float lo,
                   float hi, double *ref, double *mag) {
  for (int64_t n = 0; n < c->N; n++)
    for (int64_t m = 0; m < c->M; m++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          double s = b[m], a = fabs(b[m]);
          for (int64_t ci = 0; ci < c->C; ci++)
            for (int r = 0; r < 3; r++)
              for (int q = 0; q < 3; q++) {
                int64_t h = oh + r - c->pt, ww = ow + q - c->pl;
                if (h < 0 || h >= c->H || ww < 0 || ww >= c->W) continue;
                double p = (double)x[((n * c->C + ci) * c->H + h) * c->W + ww] * w[((m * c->C + ci) * 3 + r) * 3 + q];
                s += p, a += fabs(p);
              }
          if (c->clamp && !isnan(s)) s = s < lo ? lo : s > hi ? hi : s;
          int64_t i = ((n * c->M + m) * OH + oh) * OW + ow;
          ref[i] = s;
          mag[i] = a;
        }
}

static void run(const wcase *c) {
  int64_t OH = c->H + c->pt + c->pb - 2, OW = c->W + c->pl + c->pr - 2;
  int64_t nx = c->N * c->C * c->H * c->W, nw = c->M * c->C * 9, ny = c->N * c->M * OH * OW;
  float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w), *b = malloc((size_t)c->M * 4);
  float *u = malloc((size_t)(16 * c->M * c->C) * sizeof *u), *y0 = malloc((size_t)ny * 4), *y1 = malloc((size_t)ny * 4);
  double *ref = malloc((size_t)ny * sizeof *ref), *mag = malloc((size_t)ny * sizeof *mag);
  for (int64_t i = 0; i < nx; i++) x[i] = frand();
  for (int64_t i = 0; i < nw; i++) w[i] = frand();
  for (int64_t i = 0; i < c->M; i++) b[i] = frand();
  if (c->nan) x[0] = x[nx / 2 + 1] = x[nx - 1] = NAN;
  float lo = c->clamp == 1 ? 0.0f : -0.5f, hi = c->clamp == 1 ? INFINITY : 0.75f;
  kiln_cpu_epilogue ep = {.clamp = true, .lo = lo, .hi = hi};
  direct(c, x, w, b, OH, OW, lo, hi, ref, mag);
  kiln_wino_weights(w, c->M, c->C, u);
  char what[160];
  snprintf(what, sizeof what, "N %lld C %lld M %lld %lldx%lld pads %lld,%lld,%lld,%lld clamp %d nan %d", (long long)c->N,
           (long long)c->C, (long long)c->M, (long long)c->H, (long long)c->W, (long long)c->pt, (long long)c->pl,
           (long long)c->pb, (long long)c->pr, c->clamp, c->nan);
  for (int64_t i = 0; i < ny; i++) y0[i] = y1[i] = -12345.0f;
  kiln_status s = kiln_wino_conv(c->N, c->C, c->M, c->H, c->W, c->pt, c->pl, OH, OW, x, u, b, y0,
                                 c->clamp ? &ep : NULL, false);
  CHECK(s == KILN_OK, "%s: twin status %d", what, (int)s);
  int bad = 0, nanbad = 0;
  for (int64_t i = 0; i < ny; i++) {
    if (isnan(ref[i]) || isnan(y0[i])) {
      nanbad += isnan(ref[i]) != isnan(y0[i]);
      continue;
    }
    double e = fabs(y0[i] - ref[i]), rel = e / (mag[i] > 1e-30 ? mag[i] : 1e-30);
    if (rel > max_rel) max_rel = rel;
    if (e > 1e-5 * mag[i] + 1e-6) bad++;
  }
  CHECK(!bad, "%s: %d outputs off the direct definition by more than 1e-5 of sum |x w|", what, bad);
  CHECK(!nanbad, "%s: %d outputs NaN in one and not the other", what, nanbad);
  if (kiln_la_cpu_has_avx512()) {
    s = kiln_wino_conv(c->N, c->C, c->M, c->H, c->W, c->pt, c->pl, OH, OW, x, u, b, y1, c->clamp ? &ep : NULL, true);
    CHECK(s == KILN_OK && !memcmp(y0, y1, (size_t)ny * sizeof *y0), "%s: AVX-512 transforms differ from the twin",
          what);
  }
  free(x), free(w), free(b), free(u), free(y0), free(y1), free(ref), free(mag);
}

int main(void) {
  int held = kiln_pool_acquire() == 0; /* as a plan does: the three loops become pool tasks */
  static const wcase cases[] = {
      {1, 3, 5, 7, 9, 1, 1, 1, 1, 0, 0},        /* odd H/W: tails of tiles */
      {2, 17, 19, 8, 8, 1, 1, 1, 1, 1, 0},      /* C, M not multiples of 16; Relu; 2 images */
      {1, 16, 16, 6, 11, 0, 0, 0, 0, 2, 0},     /* no pads, Clip */
      {1, 5, 7, 5, 5, 0, 1, 1, 0, 0, 0},        /* asymmetric pads */
      {1, 33, 20, 37, 35, 1, 1, 1, 1, 1, 0},    /* tile rows over 16 tiles (masked tails) */
      {1, 4, 3, 13, 12, 1, 1, 1, 1, 0, 1},      /* NaN inputs */
      {1, 4, 3, 13, 12, 1, 1, 1, 1, 1, 1},      /* NaN inputs through a clamp */
      {1, 1, 1, 3, 3, 0, 0, 0, 0, 0, 0},        /* one output */
      {1, 32, 64, 32, 32, 1, 1, 1, 1, 1, 0},    /* small_cnn conv2 */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run(&cases[i]);
  printf("unit_cpu_wino: max |error| / sum |x w| against the double direct definition: %.3g\n", max_rel);
  if (held) kiln_pool_release();
  printf("unit_cpu_wino: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
