/* unit_cpu_wino: Winograd F(2x2, 3x3) (cpu_fallback/wino.h).
 *  - the scalar twin (transforms + the GEMM micro-kernel's twin) against the direct
 *    definition summed in double, on awkward sizes: odd H/W (tails of
 *    tiles), pads 0/1 and asymmetric ones, C and M not multiples of 16,
 *    several images, bias, Relu/Clip clamps; the max error relative to the
 *    sum of |x·w| printed (GEMM_CONV.md);
 *  - the AVX-512 transforms and micro-kernel against the twin, bit for bit
 *    (where AVX-512F runs); two KC slices of C (C > 320); chunks of tile
 *    rows (several images, large planes), strips of 32 tiles across tile
 *    rows, and U over 2 MiB (the whole chunk's V at once);
 *  - the partition on the pool (KILN_NUM_THREADS=2 in ctest: chunks of
 *    tile rows on two threads) against one thread, bit for bit;
 *  - NaN inputs: the outputs NaN exactly where the direct definition's are;
 * Conv's dispatch to it (KILN_CONV_WINO=2: wherever it applies, U per call)
 * is tested by unit_cpu_gemm_wino (unit_cpu_gemm's Conv cases against the
 * reference kernel); the default rule (a plan's U) by conformance_cpu, and
 * KILN_CONV_WINO=0 (the direct paths) by conformance_cpu_nowino. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_fallback/kernels.h"
#include "cpu_fallback/plan.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/sgemm.h"
#include "cpu_fallback/wino.h"
#include "graphbuild.h"
#include "ir/alloc.h"
#include "ir/status.h"

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

static void run(const wcase *c, int *held) {
  int64_t OH = c->H + c->pt + c->pb - 2, OW = c->W + c->pl + c->pr - 2;
  int64_t nx = c->N * c->C * c->H * c->W, nw = c->M * c->C * 9, ny = c->N * c->M * OH * OW;
  float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)nw * sizeof *w), *b = malloc((size_t)c->M * 4);
  float *u = malloc((size_t)kiln_wino_pack_floats(c->M, c->C) * sizeof *u), *y0 = malloc((size_t)ny * 4),
        *y1 = malloc((size_t)ny * 4);
  double *ref = malloc((size_t)ny * sizeof *ref), *mag = malloc((size_t)ny * sizeof *mag);
  for (int64_t i = 0; i < nx; i++) x[i] = frand();
  for (int64_t i = 0; i < nw; i++) w[i] = frand();
  for (int64_t i = 0; i < c->M; i++) b[i] = frand();
  if (c->nan) x[0] = x[nx / 2 + 1] = x[nx - 1] = NAN;
  float lo = c->clamp == 1 ? 0.0f : -0.5f, hi = c->clamp == 1 ? INFINITY : 0.75f;
  kiln_cpu_epilogue ep = {.clamp = true, .lo = lo, .hi = hi};
  direct(c, x, w, b, OH, OW, lo, hi, ref, mag);
  CHECK(kiln_wino_pack(w, c->M, c->C, u) == KILN_OK, "U packed");
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
  if (*held && kiln_pool_threads() > 1) { /* another partition: one thread */
    kiln_pool_release();
    *held = 0;
    for (int64_t i = 0; i < ny; i++) y1[i] = -12345.0f;
    s = kiln_wino_conv(c->N, c->C, c->M, c->H, c->W, c->pt, c->pl, OH, OW, x, u, b, y1, c->clamp ? &ep : NULL, true);
    CHECK(s == KILN_OK && !memcmp(y0, y1, (size_t)ny * sizeof *y0), "%s: one thread differs from the pool", what);
    *held = kiln_pool_acquire() == 0;
  }
  free(x), free(w), free(b), free(u), free(y0), free(y1), free(ref), free(mag);
}

/* A plan (U packed at plan time, Winograd by its default rule): conv 3x3
 * 32 -> 64 + bias + Relu on 32x32, MaxPool, conv 3x3 64 -> 128 (bias, no
 * clamp) on 16x16, Sigmoid. With Winograd (the default) and with
 * KILN_CONV_WINO=0's direct paths (kiln_conv_wino_force(0)): both within
 * tolerance of each other, and not the same bits (the default did take
 * Winograd, which rounds differently). Prints an FNV-1a hash of the
 * default's output bits: tests/CMakeLists.txt's unit_cpu_wino_threads
 * compares it between KILN_NUM_THREADS=1 and 2 (one process per count). */
static void run_plan(float *out, int64_t n_out) {
  kiln_graph *g = new_graph(17);
  rng_state = 88172645463325252ull;
  int64_t d[4] = {1, 32, 32, 32}, w1[4] = {64, 32, 3, 3}, b1[1] = {64}, w2[4] = {128, 64, 3, 3}, b2[1] = {128},
          k3[2] = {3, 3}, p1[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
  input(g, "x", KILN_F32, 4, d);
  gb_cst(g, "w1", 4, w1, NULL, 0);
  gb_cst(g, "b1", 1, b1, NULL, 0);
  gb_cst(g, "w2", 4, w2, NULL, 0);
  gb_cst(g, "b2", 1, b2, NULL, 0);
  int c1 = gb_add(g, "Conv", "x w1 b1", "c1");
  if (kiln_edit_set_ints(&g->nodes[c1], "kernel_shape", k3, 2) || kiln_edit_set_ints(&g->nodes[c1], "pads", p1, 4))
    exit(2);
  gb_add(g, "Relu", "c1", "r1");
  int mp = gb_add(g, "MaxPool", "r1", "m1");
  if (kiln_edit_set_ints(&g->nodes[mp], "kernel_shape", k2, 2) || kiln_edit_set_ints(&g->nodes[mp], "strides", k2, 2))
    exit(2);
  int c2 = gb_add(g, "Conv", "m1 w2 b2", "c2");
  if (kiln_edit_set_ints(&g->nodes[c2], "kernel_shape", k3, 2) || kiln_edit_set_ints(&g->nodes[c2], "pads", p1, 4))
    exit(2);
  gb_add(g, "Sigmoid", "c2", "y");
  output(g, "y");
  kiln_tensor xt = {0};
  if (kiln_tensor_alloc(&xt, KILN_F32, 4, d)) exit(2);
  for (int64_t i = 0; i < xt.numel; i++) ((float *)xt.data)[i] = (float)rnd();
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[val(g, "x")] = &xt;
  kiln_tensor y = {0};
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  if (!s) s = kiln_cpu_run(p, g, bound, &y);
  CHECK(!s && y.numel == n_out, "plan: prepare and run (%s)", s ? kiln_last_error() : "");
  if (!s && y.numel == n_out) memcpy(out, y.data, (size_t)n_out * sizeof *out);
  kiln_cpu_release(p);
  kiln_tensor_release(&y);
  kiln_tensor_release(&xt);
  kiln_free(bound);
  kiln_graph_free(g);
}

static void test_plan(void) {
  int64_t n = 128 * 16 * 16;
  float *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
  run_plan(a, n);
  kiln_conv_wino_force(0);
  run_plan(b, n);
  kiln_conv_wino_force(1);
  double worst = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)a[i] - b[i]);
    if (!(e <= worst)) worst = e;
  }
  /* conv2's sums: 576 terms of |x w| up to ~1 after conv1's ~290 (sum |x w| ~1e3): float rounding ~1e-4 */
  CHECK(worst <= 2e-4, "plan: Winograd within 2e-4 of the direct paths (max |diff| %.3g)", worst);
  if (kiln_la_cpu_has_avx512() && kiln_sgemm_pack_reader())
    CHECK(memcmp(a, b, (size_t)n * sizeof *a) != 0, "plan: the default took Winograd (bits differ from the direct)");
  uint64_t h = 1469598103934665603ull;
  const unsigned char *q = (const unsigned char *)a;
  for (size_t i = 0; i < (size_t)n * sizeof *a; i++) h = (h ^ q[i]) * 1099511628211ull;
  printf("unit_cpu_wino: plan output hash %016llx\n", (unsigned long long)h);
  free(a), free(b);
}

int main(void) {
  int held = kiln_pool_acquire() == 0; /* as a plan does: the tasks on the pool */
  static const wcase cases[] = {
      {1, 3, 5, 7, 9, 1, 1, 1, 1, 0, 0},        /* odd H/W: tails of tiles */
      {2, 17, 19, 8, 8, 1, 1, 1, 1, 1, 0},      /* C, M not multiples of 16; Relu; 2 images */
      {1, 16, 16, 6, 11, 0, 0, 0, 0, 2, 0},     /* no pads, Clip */
      {1, 5, 7, 5, 5, 0, 1, 1, 0, 0, 0},        /* asymmetric pads */
      {1, 33, 20, 37, 35, 1, 1, 1, 1, 1, 0},    /* tile rows over 16 tiles (masked tails) */
      {1, 4, 3, 13, 12, 1, 1, 1, 1, 0, 1},      /* NaN inputs */
      {1, 4, 3, 13, 12, 1, 1, 1, 1, 1, 1},      /* NaN inputs through a clamp */
      {1, 1, 1, 3, 3, 0, 0, 0, 0, 0, 0},        /* one output */
      {1, 3, 4, 9, 40, 2, 3, 2, 3, 0, 0},       /* pads 2-3: tile rows start left of the input row */
      {1, 2, 3, 5, 6, 3, 18, 0, 17, 1, 0},      /* pads over 16: a vector all padding, rows above the input */
      {1, 32, 64, 32, 32, 1, 1, 1, 1, 1, 0},    /* small_cnn conv2 */
      {1, 64, 128, 16, 16, 1, 1, 1, 1, 1, 0},   /* small_cnn conv3: two chunks of two tile rows */
      {1, 330, 13, 6, 7, 1, 1, 1, 1, 2, 0},     /* C in two KC slices */
      {2, 16, 40, 57, 56, 1, 0, 1, 2, 0, 0},    /* many chunks (and a short last one), 2 images */
      {1, 192, 200, 14, 14, 1, 1, 1, 1, 1, 0},  /* U over 2 MiB, one strip of V (ResNet-18's l3: chunks of 21 and
                                                   28 tiles), M 200 = 16 x 12 + 8: the stream of U's next strip */
      {1, 192, 176, 32, 32, 1, 1, 1, 1, 0, 0},  /* U over 2 MiB, two strips of V (chunks of 64 tiles): U's strips
                                                   reused over them (the swapped loops) */
      {1, 192, 176, 47, 47, 1, 1, 1, 1, 0, 0},  /* U over 2 MiB, 3+ strips a chunk (the chunk's V at once), odd
                                                   right and bottom edges */
      {1, 330, 100, 9, 21, 1, 1, 1, 1, 1, 0},   /* U over 2 MiB with C in two KC slices, odd edges */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run(&cases[i], &held);
  test_plan();
  printf("unit_cpu_wino: max |error| / sum |x w| against the double direct definition: %.3g\n", max_rel);
  if (held) kiln_pool_release();
  printf("unit_cpu_wino: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
