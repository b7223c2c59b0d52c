/* tests/unit_vmath: the cpu_fallback/vmath kernels. For each function and
 * each ISA this CPU has: a dense sample of all float bit patterns against
 * double-precision libm within the documented ulp bound; the special values
 * (NaN, ±inf, ±0, denormals, overflow/underflow and saturation edges); the
 * AVX2 version bit-equal to its base twin on awkward sizes, unaligned
 * pointers and in place; and KILN_CPU_ISA (through a re-run of this program). */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_fallback/vmath.h"

static int passed, failed;
#include "tests/check.h"

static int nisa; /* 1: base only, 2: base and avx2 */

/* ---- the reference and the error measure ---- */

/* f in double, rounded once to float: the correctly rounded result (up to
 * the rare double-rounding tie). */
static float reference(kiln_vm_op op, float x) {
  double d = x;
  switch (op) {
  case KILN_VM_EXP: return (float)exp(d);
  case KILN_VM_LOG: return (float)log(d);
  case KILN_VM_TANH: return (float)tanh(d);
  case KILN_VM_SIGMOID: return (float)(1.0 / (1.0 + exp(-d)));
  case KILN_VM_ERF: return (float)erf(d);
  default: return NAN;
  }
}

static float from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* Distance in representable floats (±0 one point); NaN/NaN 0, NaN/number huge. */
static uint64_t ulp_dist(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : UINT32_MAX;
  int32_t ia = (int32_t)bits_of(a), ib = (int32_t)bits_of(b);
  int64_t ka = ia < 0 ? (int64_t)INT32_MIN - ia : ia, kb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
  return (uint64_t)(ka > kb ? ka - kb : kb - ka);
}

/* Bit-equal, or both NaN. */
static int same(float a, float b) { return bits_of(a) == bits_of(b) || (isnan(a) && isnan(b)); }

/* ---- dense sample: every 4096th bit pattern (low 12 bits varied) ---- */

static void test_dense(void) {
  const size_t n = 1u << 20;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *ref = malloc(n * sizeof *ref);
  for (size_t i = 0; i < n; i++) x[i] = from_bits((uint32_t)(i << 12 | ((i * 2897u) & 4095u)));
  for (int op = 0; op < KILN_VM_NOPS; op++) {
    for (size_t i = 0; i < n; i++) ref[i] = reference((kiln_vm_op)op, x[i]);
    for (int k = 0; k < nisa; k++) {
      kiln_vm_kernel((kiln_vm_op)op, (kiln_vm_isa)k)(n, x, y);
      uint64_t worst = 0;
      float wx = 0, wy = 0;
      for (size_t i = 0; i < n; i++) {
        uint64_t d = ulp_dist(y[i], ref[i]);
        if (d > worst) worst = d, wx = x[i], wy = y[i];
      }
      int bound = kiln_vm_max_ulp((kiln_vm_op)op);
      printf("  dense %-7s %-4s max %llu ulp (bound %d) at x=%a\n", kiln_vm_op_name((kiln_vm_op)op),
             kiln_vm_isa_name((kiln_vm_isa)k), (unsigned long long)worst, bound, (double)wx);
      CHECK(worst <= (uint64_t)bound, "%s/%s: %llu ulp at x=%a (ref %a got %a)", kiln_vm_op_name((kiln_vm_op)op),
            kiln_vm_isa_name((kiln_vm_isa)k), (unsigned long long)worst, (double)wx,
            (double)reference((kiln_vm_op)op, wx), (double)wy);
    }
  }
  free(x), free(y), free(ref);
}

/* ---- special values ---- */

static const float specials[] = {
    /* NaN, inf, zero, denormal, extremes */
    NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.4e-45f, -1.4e-45f, 1e-40f, -1e-40f, 1.1754942e-38f,
    FLT_MIN, -FLT_MIN, FLT_MAX, -FLT_MAX, 1.0f, -1.0f, 0.5f, 2.0f,
    /* exp overflow / underflow / denormal-result edges */
    88.72283f, 88.722832f, 88.722839f, 88.7229f, 89.0f, 100.0f, -87.33654f, -87.336548f, -87.34f,
    -103.2789f, -103.972076f, -103.97208f, -103.98f, -104.0f, -150.0f, -1000.0f,
    /* log: around 1 and the √½ split */
    0.70710677f, 0.70710683f, 0.9999999f, 1.0000001f, 3.0e38f,
    /* tanh / sigmoid / erf: branch splits and saturation */
    0.625f, 0.62499994f, -0.625f, 9.01f, 9.02f, -9.02f, 10.0f, 17.32f, 17.33f, 17.34f, -17.34f, -88.0f,
    -88.8f, -103.0f, -104.5f, 0.927734375f, 0.92773443f, -0.927734375f, 3.91f, 3.92f, 3.93f, -3.93f, 4.0f,
    4.5f, -4.5f};

static void test_specials(void) {
  size_t n = sizeof specials / sizeof *specials;
  float y[sizeof specials / sizeof *specials];
  for (int op = 0; op < KILN_VM_NOPS; op++)
    for (int k = 0; k < nisa; k++) {
      kiln_vm_kernel((kiln_vm_op)op, (kiln_vm_isa)k)(n, specials, y);
      for (size_t i = 0; i < n; i++) {
        float r = reference((kiln_vm_op)op, specials[i]);
        /* exact where the C library's answer is exact (NaN, ±inf, ±0 with
         * its sign, saturated ±1); within the bound elsewhere */
        int exact = isnan(r) || isinf(r) || r == 0.0f || fabsf(r) == 1.0f;
        int ok = exact ? same(y[i], r) : ulp_dist(y[i], r) <= (uint64_t)kiln_vm_max_ulp((kiln_vm_op)op);
        CHECK(ok, "%s/%s(%a) = %a, libm %a", kiln_vm_op_name((kiln_vm_op)op), kiln_vm_isa_name((kiln_vm_isa)k),
              (double)specials[i], (double)y[i], (double)r);
      }
    }
  /* the named cases of the brief, spelled out */
  float v;
  v = INFINITY;
  kiln_vm_exp(1, &v, &v);
  CHECK(v == INFINITY, "exp(inf)");
  v = 88.73f;
  kiln_vm_exp(1, &v, &v);
  CHECK(v == INFINITY, "exp(88.73)");
  v = -103.98f;
  kiln_vm_exp(1, &v, &v);
  CHECK(v == 0.0f && !signbit(v), "exp(-103.98) = %a", (double)v);
  v = -0.0f;
  kiln_vm_log(1, &v, &v);
  CHECK(v == -INFINITY, "log(-0)");
  v = -1e-40f;
  kiln_vm_log(1, &v, &v);
  CHECK(isnan(v), "log(-denormal)");
  v = -0.0f;
  kiln_vm_tanh(1, &v, &v);
  CHECK(v == 0.0f && signbit(v), "tanh(-0)");
  v = -50.0f;
  kiln_vm_tanh(1, &v, &v);
  CHECK(v == -1.0f, "tanh(-50)");
  v = -200.0f;
  kiln_vm_sigmoid(1, &v, &v);
  CHECK(v == 0.0f, "sigmoid(-200)");
  v = 200.0f;
  kiln_vm_sigmoid(1, &v, &v);
  CHECK(v == 1.0f, "sigmoid(200)");
  v = -INFINITY;
  kiln_vm_erf(1, &v, &v);
  CHECK(v == -1.0f, "erf(-inf)");
  v = NAN;
  kiln_vm_erf(1, &v, &v);
  CHECK(isnan(v), "erf(nan)");
}

/* ---- avx2 vs its base twin: sizes, alignment, in place ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* Inputs a kernel has interesting work on: mostly [-120, 120], some any
 * bit pattern (NaN, inf, denormals included). */
static float input(void) {
  uint64_t r = next();
  if (r % 8 == 0) return from_bits((uint32_t)(r >> 32));
  return (float)((double)(r >> 11) / 9007199254740992.0 * 240.0 - 120.0);
}

static void test_twins(void) {
  if (nisa < 2) return;
  static const size_t sizes[] = {0, 1, 7, 8, 9, 31, 33, 1000003};
  const float sentinel = -12345.0f;
  for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
    size_t n = sizes[si];
    float *xb = malloc((n + 16) * sizeof *xb), *yb = malloc((n + 16) * sizeof *yb);
    float *ya = malloc((n + 16) * sizeof *ya), *in = malloc((n + 16) * sizeof *in);
    float *x = xb + 1; /* 4 mod 32 bytes: unaligned for AVX */
    for (size_t i = 0; i < n + 15; i++) xb[i] = input();
    for (int op = 0; op < KILN_VM_NOPS; op++) {
      kiln_vm_fn base = kiln_vm_kernel((kiln_vm_op)op, KILN_VM_ISA_BASE);
      kiln_vm_fn avx2 = kiln_vm_kernel((kiln_vm_op)op, KILN_VM_ISA_AVX2);
      for (size_t i = 0; i < n + 16; i++) yb[i] = ya[i] = sentinel;
      base(n, x, yb + 3);
      avx2(n, x, ya + 3);
      size_t diff = 0, first = 0;
      for (size_t i = 0; i < n; i++)
        if (!same(yb[3 + i], ya[3 + i]) && diff++ == 0) first = i;
      CHECK(diff == 0, "%s n=%zu: %zu lanes differ, first x=%a base %a avx2 %a", kiln_vm_op_name((kiln_vm_op)op), n,
            diff, (double)x[first], (double)yb[3 + first], (double)ya[3 + first]);
      CHECK(ya[2] == sentinel && ya[3 + n] == sentinel && yb[2] == sentinel && yb[3 + n] == sentinel,
            "%s n=%zu: wrote outside [0, n)", kiln_vm_op_name((kiln_vm_op)op), n);
      /* in place, at another misalignment */
      memcpy(in + 2, x, n * sizeof *x);
      avx2(n, in + 2, in + 2);
      diff = 0;
      for (size_t i = 0; i < n; i++) diff += !same(in[2 + i], yb[3 + i]);
      CHECK(diff == 0, "%s n=%zu in place: %zu lanes differ", kiln_vm_op_name((kiln_vm_op)op), n, diff);
      /* the AVX-512F version (exp, tanh, sigmoid, erf), where the CPU has it */
      kiln_vm_fn w = kiln_vm_kernel_avx512((kiln_vm_op)op);
      if (w) {
        for (size_t i = 0; i < n + 16; i++) ya[i] = sentinel;
        w(n, x, ya + 3);
        diff = 0;
        for (size_t i = 0; i < n; i++) diff += !same(yb[3 + i], ya[3 + i]);
        CHECK(diff == 0 && ya[2] == sentinel && ya[3 + n] == sentinel,
              "%s n=%zu: avx512 = base twin (%zu lanes differ), nothing written outside", kiln_vm_op_name((kiln_vm_op)op),
              n, diff);
      }
    }
    free(xb), free(yb), free(ya), free(in);
  }
}

/* The AVX-512 erf's big branch (|x| past KILN_VM_ERF_SPLIT up to the
 * saturation at 4 and beyond), where it takes e^q without exp's clamp and
 * NaN pass: bit-equal to the base twin on every 16th float bit pattern of
 * [0.5, 8] and of [-8, -0.5], and on the special values. */
static void test_erf_avx512_sweep(void) {
  kiln_vm_fn w = kiln_vm_kernel_avx512(KILN_VM_ERF), base = kiln_vm_kernel(KILN_VM_ERF, KILN_VM_ISA_BASE);
  if (!w) return;
  float lo = 0.5f, hi = 8.0f;
  uint32_t ulo, uhi;
  memcpy(&ulo, &lo, 4), memcpy(&uhi, &hi, 4);
  size_t n = (size_t)(uhi - ulo) / 16 + 1, k = sizeof specials / sizeof *specials;
  float *x = malloc((2 * n + k) * sizeof *x), *a = malloc((2 * n + k) * sizeof *a), *b = malloc((2 * n + k) * sizeof *b);
  for (size_t i = 0; i < n; i++) {
    uint32_t u = ulo + (uint32_t)(16 * i);
    memcpy(&x[i], &u, 4);
    x[n + i] = -x[i];
  }
  memcpy(x + 2 * n, specials, sizeof specials);
  n = 2 * n + k;
  w(n, x, a);
  base(n, x, b);
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < n; i++)
    if (!same(a[i], b[i]) && diff++ == 0) first = i;
  CHECK(diff == 0, "erf avx512 sweep: %zu of %zu differ from the base twin, first x=%a avx512 %a base %a", diff, n,
        (double)x[first], (double)a[first], (double)b[first]);
  CHECK(a[0] > 0.5f && a[n - k - 1] == -1.0f, "erf avx512 sweep: erf(0.5) %a, erf(-8) %a", (double)a[0],
        (double)a[n - k - 1]);
  free(x), free(a), free(b);
}

/* The tile executor's Gelu chain under AVX-512 (kiln_vm_gelu_chain_avx512:
 * each lane through one of erf's branches, the big-branch lanes packed
 * and put back) against the chain's ops one by one on the scalar twin's
 * erf, bit for bit: every variant k, inputs whose 16-lane groups are all
 * small-branch, all big-branch, mixed (the Gelu's usual case) and the
 * special values, at sizes around its 16-lane groups and 512-element
 * blocks, out of place and in place, nothing written past n. */
static void test_gelu_chain_avx512(void) {
  if (!kiln_vm_kernel_avx512(KILN_VM_ERF)) return;
  kiln_vm_fn erf_base = kiln_vm_kernel(KILN_VM_ERF, KILN_VM_ISA_BASE);
  static const size_t sizes[] = {1, 15, 16, 17, 511, 512, 513, 1040, 4099};
  const size_t cap = 4099 + 16, k_specials = sizeof specials / sizeof *specials;
  const float sentinel = -12345.0f;
  float *x = malloc(cap * sizeof *x), *t = malloc(cap * sizeof *t), *want = malloc(cap * sizeof *want);
  float *y = malloc(cap * sizeof *y), *in = malloc(cap * sizeof *in);
  for (int kind = 0; kind < 4; kind++) {
    for (size_t i = 0; i < cap; i++) {
      double u = (double)(next() >> 11) / 9007199254740992.0;
      switch (kind) {
      case 0: x[i] = (float)(2.6 * u - 1.3); break;                           /* |x/√2| < 0.93: small */
      case 1: x[i] = (float)((1.4 + 6.0 * u) * (next() % 2 ? 1 : -1)); break; /* |x/√2| > 0.98: big */
      case 2: x[i] = (float)(8.0 * u - 4.0); break;                           /* mixed */
      default: x[i] = i % 3 ? (float)(8.0 * u - 4.0) : specials[(i / 3) % k_specials]; break;
      }
    }
    for (int k = 0; k < 4; k++) {
      float s = k & 1 ? 0.70710677f : 1.41421354f, c1 = 1.0f, c2 = k & 2 ? 0.45f : 0.5f;
      for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        size_t n = sizes[si];
        for (size_t i = 0; i < n; i++) t[i] = k & 1 ? x[i] * s : x[i] / s;
        erf_base(n, t, want);
        for (size_t i = 0; i < n; i++) {
          float u = want[i] + c1;
          want[i] = k & 2 ? (x[i] * c2) * u : (x[i] * u) * c2;
        }
        for (size_t i = 0; i < n + 2; i++) y[i] = sentinel;
        kiln_vm_gelu_chain_avx512(n, x, s, c1, c2, k, y + 1);
        size_t diff = 0, first = 0;
        for (size_t i = 0; i < n; i++)
          if (!same(y[1 + i], want[i]) && diff++ == 0) first = i;
        CHECK(diff == 0 && y[0] == sentinel && y[n + 1] == sentinel,
              "gelu chain avx512 (inputs %d, k %d, n %zu): %zu lanes differ from the ops on the twin (first x=%a: %a, "
              "want %a), nothing written outside",
              kind, k, n, diff, (double)x[first], (double)y[1 + first], (double)want[first]);
        memcpy(in + 3, x, n * sizeof *x);
        kiln_vm_gelu_chain_avx512(n, in + 3, s, c1, c2, k, in + 3);
        diff = 0;
        for (size_t i = 0; i < n; i++) diff += !same(in[3 + i], want[i]);
        CHECK(diff == 0, "gelu chain avx512 (inputs %d, k %d, n %zu) in place: %zu lanes differ", kind, k, n, diff);
      }
    }
  }
  free(x), free(t), free(want), free(y), free(in);
}

/* The entry points run the active ISA's kernels. */
static void test_entry_points(void) {
  static const kiln_vm_fn entry[KILN_VM_NOPS] = {kiln_vm_exp, kiln_vm_log, kiln_vm_tanh, kiln_vm_sigmoid,
                                                 kiln_vm_erf};
  float x[37], a[37], b[37];
  for (int i = 0; i < 37; i++) x[i] = input();
  for (int op = 0; op < KILN_VM_NOPS; op++) {
    entry[op](37, x, a);
    kiln_vm_kernel((kiln_vm_op)op, kiln_vm_isa_active())(37, x, b);
    int ok = 1;
    for (int i = 0; i < 37; i++) ok &= same(a[i], b[i]);
    CHECK(ok, "kiln_vm_%s differs from its %s kernel", kiln_vm_op_name((kiln_vm_op)op),
          kiln_vm_isa_name(kiln_vm_isa_active()));
  }
  CHECK(kiln_vm_kernel(KILN_VM_NOPS, KILN_VM_ISA_BASE) == NULL, "out-of-range op gives NULL");
  CHECK((kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2) != NULL) == kiln_vm_cpu_has_avx2(),
        "avx2 kernels offered iff the CPU has AVX2+FMA");
  if (!getenv("KILN_CPU_ISA"))
    CHECK(kiln_vm_isa_active() == (kiln_vm_cpu_has_avx2() ? KILN_VM_ISA_AVX2 : KILN_VM_ISA_BASE),
          "default ISA is avx2 exactly where available");
}

/* KILN_CPU_ISA, seen by a fresh process (the choice is made once). */
static void expect_isa(const char *self, const char *env, const char *want) {
  char cmd[4200], got[64] = "";
  snprintf(cmd, sizeof cmd, "KILN_CPU_ISA=%s '%s' --isa 2>/dev/null", env, self);
  FILE *p = popen(cmd, "r");
  if (p) {
    if (!fgets(got, sizeof got, p)) got[0] = 0;
    pclose(p);
  }
  got[strcspn(got, "\n")] = 0;
  CHECK(!strcmp(got, want), "KILN_CPU_ISA=%s: active %s, want %s", env, got, want);
}

static void test_env(void) {
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0) {
    printf("  /proc/self/exe unavailable: KILN_CPU_ISA not tested\n");
    return;
  }
  self[len] = 0;
  const char *best = nisa == 2 ? "avx2" : "base";
  expect_isa(self, "base", "base");
  expect_isa(self, "avx2", best); /* falls back to base (with a warning); never AVX-512 */
  /* avx512 and an unknown value: the default, AVX-512 where this process
     (unless its own KILN_CPU_ISA says otherwise) finds it usable */
  if (getenv("KILN_CPU_ISA")) {
    printf("  KILN_CPU_ISA set for this run: the default setting not tested\n");
    return;
  }
  const char *full = nisa < 2 ? "base" : kiln_vm_cpu_has_avx512() ? "avx2+avx512" : "avx2";
  expect_isa(self, "avx512", full);
  expect_isa(self, "bogus", full);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "--isa")) {
    kiln_vm_isa isa = kiln_vm_isa_active();
    printf("%s%s\n", kiln_vm_isa_name(isa), isa == KILN_VM_ISA_AVX2 && kiln_vm_cpu_has_avx512() ? "+avx512" : "");
    return 0;
  }
  nisa = kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2) ? 2 : 1;
  if (nisa == 1) printf("avx2 not available: base only\n");
  if (!kiln_vm_kernel_avx512(KILN_VM_EXP)) printf("avx512f not usable here: the avx512 twins are not compared\n");
  test_dense();
  test_specials();
  test_twins();
  test_erf_avx512_sweep();
  test_gelu_chain_avx512();
  test_entry_points();
  test_env();
  printf("unit_vmath: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
