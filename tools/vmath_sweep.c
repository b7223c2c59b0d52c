/* tools/vmath_sweep: runs every one of the 2^32 float bit patterns through
 * each cpu_fallback/vmath kernel, on every ISA this CPU has, and prints the
 * maximum error in ulps against the correctly rounded result computed in
 * double ((float)exp((double)x) …), with the worst input, and how many lanes
 * the avx2 version (and, where the CPU has it, the AVX-512 one) differs from
 * its base twin. Not a test (minutes of CPU);
 * its output is recorded in cpu_fallback/VMATH.md.
 *   vmath-sweep [--stride K]   every K-th pattern (default 1: all)
 *   vmath-sweep --bench        elements/ns for 1M floats per kernel and ISA */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_fallback/vmath.h"

#define BLOCK (1u << 20)

/* The correctly rounded reference: f in double, rounded once to float. */
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

/* Distance in representable floats (±0 are one point); NaN vs NaN is 0,
 * NaN vs a number is UINT32_MAX. */
static uint64_t ulp_dist(float a, float b) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b) ? 0 : UINT32_MAX;
  int32_t ia, ib;
  memcpy(&ia, &a, 4), memcpy(&ib, &b, 4);
  int64_t ka = ia < 0 ? (int64_t)INT32_MIN - ia : ia, kb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
  return (uint64_t)(ka > kb ? ka - kb : kb - ka);
}

typedef struct result {
  uint64_t max_ulp[KILN_VM_NOPS][KILN_VM_NISA];
  float worst_x[KILN_VM_NOPS][KILN_VM_NISA];
  uint64_t twin_diff[KILN_VM_NOPS];   /* avx2 lanes not bit-equal to base */
  uint64_t avx512_diff[KILN_VM_NOPS]; /* avx512 lanes not bit-equal to base */
} result;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t next_block;
static uint64_t stride = 1;
static int nisa;

/* NaN counts as equal to NaN, whatever its payload. */
static uint64_t count_diff(size_t n, const float *a, const float *b) {
  uint64_t d = 0;
  for (size_t i = 0; i < n; i++)
    if (memcmp(&a[i], &b[i], 4) && !(isnan(a[i]) && isnan(b[i]))) d++;
  return d;
}
static result total;

static void *worker(void *arg) {
  (void)arg;
  float *x = malloc(BLOCK * sizeof *x), *y[KILN_VM_NISA], *ref = malloc(BLOCK * sizeof *ref);
  for (int k = 0; k < KILN_VM_NISA; k++) y[k] = malloc(BLOCK * sizeof *y[k]);
  float *y512 = malloc(BLOCK * sizeof *y512);
  result mine;
  memset(&mine, 0, sizeof mine);
  for (;;) {
    pthread_mutex_lock(&lock);
    uint64_t first = next_block;
    next_block += (uint64_t)BLOCK * stride;
    pthread_mutex_unlock(&lock);
    if (first >= (1ull << 32)) break;
    size_t n = 0;
    for (uint64_t b = first; b < (1ull << 32) && n < BLOCK; b += stride) {
      uint32_t u = (uint32_t)b;
      memcpy(&x[n++], &u, 4);
    }
    for (int op = 0; op < KILN_VM_NOPS; op++) {
      for (size_t i = 0; i < n; i++) ref[i] = reference((kiln_vm_op)op, x[i]);
      for (int k = 0; k < nisa; k++) {
        kiln_vm_kernel((kiln_vm_op)op, (kiln_vm_isa)k)(n, x, y[k]);
        for (size_t i = 0; i < n; i++) {
          uint64_t d = ulp_dist(y[k][i], ref[i]);
          if (d > mine.max_ulp[op][k]) mine.max_ulp[op][k] = d, mine.worst_x[op][k] = x[i];
        }
      }
      if (nisa > 1) mine.twin_diff[op] += count_diff(n, y[0], y[1]);
      kiln_vm_fn f512 = kiln_vm_kernel_avx512((kiln_vm_op)op);
      if (f512) {
        f512(n, x, y512);
        mine.avx512_diff[op] += count_diff(n, y[0], y512);
      }
    }
  }
  pthread_mutex_lock(&lock);
  for (int op = 0; op < KILN_VM_NOPS; op++) {
    for (int k = 0; k < KILN_VM_NISA; k++)
      if (mine.max_ulp[op][k] > total.max_ulp[op][k])
        total.max_ulp[op][k] = mine.max_ulp[op][k], total.worst_x[op][k] = mine.worst_x[op][k];
    total.twin_diff[op] += mine.twin_diff[op];
    total.avx512_diff[op] += mine.avx512_diff[op];
  }
  pthread_mutex_unlock(&lock);
  for (int k = 0; k < KILN_VM_NISA; k++) free(y[k]);
  free(x), free(ref), free(y512);
  return NULL;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* elements/ns of each kernel on 1M floats in [-10, 10] (log: (0, 20]),
 * best of 20 runs. */
static int bench(void) {
  enum { N = 1 << 20 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  for (int op = 0; op < KILN_VM_NOPS; op++) {
    for (int i = 0; i < N; i++) {
      float u = (float)((i * 2654435761u) % 1000003u) / 1000003.0f;
      x[i] = op == KILN_VM_LOG ? 20.0f * u + 1e-6f : 20.0f * u - 10.0f;
    }
    printf("%-8s", kiln_vm_op_name((kiln_vm_op)op));
    for (int k = 0; k < nisa; k++) {
      kiln_vm_fn f = kiln_vm_kernel((kiln_vm_op)op, (kiln_vm_isa)k);
      double best = 1e9;
      for (int r = 0; r < 20; r++) {
        double t0 = now();
        f(N, x, y);
        double t = now() - t0;
        if (t < best) best = t;
      }
      printf("  %s %.3f elem/ns (%.2f ms)", kiln_vm_isa_name((kiln_vm_isa)k), N / (best * 1e9), best * 1e3);
    }
    printf("\n");
  }
  free(x), free(y);
  return 0;
}

int main(int argc, char **argv) {
  nisa = kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2) ? 2 : 1;
  if (nisa == 1) printf("avx2 not available: base only\n");
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--bench")) return bench();
    if (!strcmp(argv[i], "--stride") && i + 1 < argc)
      stride = strtoull(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: vmath-sweep [--stride K] | --bench\n");
      return 2;
    }
  }
  if (stride < 1) stride = 1;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int nthreads = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (int)ncpu;
  pthread_t th[64];
  double t0 = now();
  for (int t = 0; t < nthreads; t++) pthread_create(&th[t], NULL, worker, NULL);
  for (int t = 0; t < nthreads; t++) pthread_join(th[t], NULL);
  printf("vmath-sweep: %s floats (stride %llu), %d threads, %.0f s\n", stride == 1 ? "all 2^32" : "sampled",
         (unsigned long long)stride, nthreads, now() - t0);
  int bad = 0;
  for (int op = 0; op < KILN_VM_NOPS; op++) {
    printf("%-8s bound %d ulp:", kiln_vm_op_name((kiln_vm_op)op), kiln_vm_max_ulp((kiln_vm_op)op));
    for (int k = 0; k < nisa; k++) {
      printf("  %s max %llu ulp (x=%a)", kiln_vm_isa_name((kiln_vm_isa)k),
             (unsigned long long)total.max_ulp[op][k], (double)total.worst_x[op][k]);
      if (total.max_ulp[op][k] > (uint64_t)kiln_vm_max_ulp((kiln_vm_op)op)) bad = 1;
    }
    if (nisa > 1) printf("  avx2!=base: %llu", (unsigned long long)total.twin_diff[op]);
    if (kiln_vm_kernel_avx512((kiln_vm_op)op))
      printf("  avx512!=base: %llu", (unsigned long long)total.avx512_diff[op]);
    printf("\n");
  }
  return bad;
}
