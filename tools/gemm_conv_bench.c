/* tools/gemm-conv-bench: times the cpu backend's MatMul and Conv kernels
 * (cpu_fallback/gemm.c, conv.c) side by side in one run: GEMM 1024^3
 * through the MatMul kernel (the call the plan makes, output into an
 * arena-like reservation) against cblas_sgemm called directly; the conv
 * layers of bench/make_models.py's ResNet-18 and MobileNetV2 through the
 * kernel (avx2 and base versions) against the reference kernel. Best of
 * interleaved repetitions (the machine may be shared); threads as KILN_NUM_THREADS (default: all
 * online CPUs); "openblas" runs the same kernels with KILN_SGEMM=blas. Run by
 * hand; results in cpu_fallback/GEMM_CONV.md. At 2 threads run it with
 * OPENBLAS_THREAD_TIMEOUT=4: OpenBLAS's server threads otherwise spin for
 * ~0.1 s after each direct call and take a core from kiln's pool in the
 * next timing (on the 2-core Xeon VM kiln then measured 45-49 % of direct
 * in about half the runs, of both this build and stop 21's; with the
 * variable 90-95 %, bench/README.md stop 22).
 * Usage: gemm-conv-bench [REPS] [conv|direct|pool]: no mode, the GEMM and
 * the conv layers; "conv" the layers alone; "direct" the direct path's
 * layers; "pool" the cost of back-to-back parallel loops on kiln's pool
 * against threads that only spin (GEMM_CONV.md "Sixteen threads"). */
#include <cblas.h>
#include <math.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pthread.h>
#include <stdatomic.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/prepack.h"
#include "cpu_fallback/sgemm.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The best of n: on a shared machine the least disturbed run. */
static double best(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmpd);
  return v[0];
}

static void fill(kiln_tensor *t, int rank, const int64_t *dims) {
  memset(t, 0, sizeof *t);
  kiln_tensor_alloc(t, KILN_F32, rank, dims);
  unsigned r = 1;
  for (int64_t i = 0; i < t->numel; i++) {
    r = r * 1664525u + 1013904223u;
    ((float *)t->data)[i] = (float)((r >> 8) & 0xffff) / 32768.0f - 1.0f;
  }
}

static void relu_apply(void *ctx, int64_t start, int64_t n, float *y) {
  (void)ctx;
  (void)start;
  int64_t i = 0; /* branch-free (random signs), and no libm call per element */
#ifdef __SSE__
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_max_ps(_mm_loadu_ps(y + i), _mm_setzero_ps()));
#endif
  for (; i < n; i++) y[i] = fmaxf(y[i], 0.0f);
}

/* Runs a kernel once into out (a reservation of cap bytes); seconds. */
static double run_once(kiln_cpu_kernel_fn fn, const kiln_node *n, int n_in, const kiln_tensor *const *in, float *out,
                       size_t cap, const kiln_cpu_epilogue *ep) {
  kiln_graph g;
  memset(&g, 0, sizeof g);
  kiln_tensor y;
  memset(&y, 0, sizeof y);
  y.data = out;
  y.capacity = cap;
  bool used = true, declined = true;
  kiln_op_call c = {&g, n, n->opset, n_in, in, 1, &y, &used};
  double t = now();
  kiln_status s = fn(&c, ep, &declined);
  t = now() - t;
  if (s || declined) fprintf(stderr, "kernel failed or declined\n");
  return t;
}

static double run_ref(const kiln_node *n, int n_in, const kiln_tensor *const *in, float *out, size_t cap) {
  kiln_graph g;
  memset(&g, 0, sizeof g);
  kiln_tensor y;
  memset(&y, 0, sizeof y);
  y.data = out;
  y.capacity = cap;
  bool used = true;
  kiln_op_call c = {&g, n, n->opset, n_in, in, 1, &y, &used};
  double t = now();
  kiln_status s = kiln_ref_find_op("", n->op_type)->run(&c);
  t = now() - t;
  if (s) fprintf(stderr, "reference failed\n");
  return t;
}

static void bench_gemm(int reps) {
  const int64_t n = 1024, d[2] = {n, n};
  kiln_tensor a, b;
  fill(&a, 2, d);
  fill(&b, 2, d);
  size_t cap = (size_t)(n * n) * sizeof(float);
  float *c = malloc(cap), *y = malloc(cap);
  kiln_node nd;
  memset(&nd, 0, sizeof nd);
  nd.op_type = (char *)"MatMul";
  nd.domain = (char *)"";
  nd.opset = 13;
  const kiln_tensor *in[2] = {&a, &b};
  kiln_cpu_kernel_fn fn = kiln_cpu_kernel_find("", "MatMul")->run;
  kiln_cpu_epilogue ep = {relu_apply, NULL, false, 0.0f, 0.0f, NULL, 0, false, 0.0f, NULL, NULL};
  kiln_cpu_num_threads(); /* sets OpenBLAS's thread count before the direct calls too */
  double *tb = malloc(sizeof(double) * (size_t)reps), *tk = malloc(sizeof(double) * (size_t)reps),
         *te = malloc(sizeof(double) * (size_t)reps), *tbase = malloc(sizeof(double) * (size_t)reps),
         *tbl = malloc(sizeof(double) * (size_t)reps);
  for (int r = 0; r < reps + 1; r++) {
    double t = now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a.data, (int)n, b.data,
                (int)n, 0.0f, c, (int)n);
    t = now() - t;
    double k = run_once(fn, &nd, 2, in, y, cap, NULL);
    double e = run_once(fn, &nd, 2, in, y, cap, &ep);
    kiln_sgemm_force(KILN_SGEMM_BLAS);
    double bl = run_once(fn, &nd, 2, in, y, cap, NULL);
    kiln_sgemm_force(-1);
    kiln_la_force_isa(KILN_VM_ISA_BASE);
    double bs = r < 3 ? run_once(fn, &nd, 2, in, y, cap, NULL) : 0;
    kiln_la_force_isa(KILN_VM_NISA);
    if (r == 0) continue; /* warm-up */
    tb[r - 1] = t;
    tk[r - 1] = k;
    te[r - 1] = e;
    tbl[r - 1] = bl;
    tbase[r - 1] = bs;
  }
  double mbl = best(tbl, reps), mb = best(tb, reps), mk = best(tk, reps), me = best(te, reps), mbase = best(tbase, 2);
  double fl = 2.0 * (double)(n * n * n);
  printf("GEMM 1024^3 (%d threads, best of %d interleaved; kiln SGEMM: %s)\n", kiln_pool_threads(), reps,
         kiln_sgemm_active() == KILN_SGEMM_AVX512 ? "kiln AVX-512" : "OpenBLAS");
  printf("  cblas_sgemm direct        %8.2f ms %6.1f GFLOP/s\n", mb * 1e3, fl / mb * 1e-9);
  printf("  kiln MatMul kernel        %8.2f ms %6.1f GFLOP/s  = %.1f%% of direct\n", mk * 1e3, fl / mk * 1e-9,
         100 * mb / mk);
  printf("  kiln MatMul + relu epi.   %8.2f ms %6.1f GFLOP/s  = %.1f%% of direct\n", me * 1e3, fl / me * 1e-9,
         100 * mb / me);
  printf("  kiln MatMul, OpenBLAS     %8.2f ms %6.1f GFLOP/s  = %.1f%% of direct\n", mbl * 1e3, fl / mbl * 1e-9,
         100 * mb / mbl);
  printf("  kiln MatMul, base GEMM    %8.2f ms %6.1f GFLOP/s  (best of 2)\n", mbase * 1e3, fl / mbase * 1e-9);
  free(tb);
  free(tk);
  free(te);
  free(tbase);
  free(tbl);
  free(c);
  free(y);
  kiln_tensor_release(&a);
  kiln_tensor_release(&b);
}

typedef struct layer {
  const char *name;
  int64_t C, M, HW, k, s, G;
} layer;

static void bench_conv(int reps) {
  static const layer L[] = {
      {"resnet18 conv1 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 1},
      {"resnet18 l1 3x3 64->64 @56", 64, 64, 56, 3, 1, 1},
      {"resnet18 l2.0.conv1 3x3/2 64->128 @56", 64, 128, 56, 3, 2, 1},
      {"resnet18 l2.0.down 1x1/2 64->128 @56", 64, 128, 56, 1, 2, 1},
      {"resnet18 l2 3x3 128->128 @28", 128, 128, 28, 3, 1, 1},
      {"resnet18 l3 3x3 256->256 @14", 256, 256, 14, 3, 1, 1},
      {"resnet18 l4 3x3 512->512 @7", 512, 512, 7, 3, 1, 1},
      {"mobilenetv2 stem 3x3/2 3->32 @224", 3, 32, 224, 3, 2, 1},
      {"mobilenetv2 b1 expand 1x1 16->96 @112", 16, 96, 112, 1, 1, 1},
      {"mobilenetv2 b1 dw 3x3/2 96 @112", 96, 96, 112, 3, 2, 96},
      {"mobilenetv2 b1 project 1x1 96->24 @56", 96, 24, 56, 1, 1, 1},
      {"mobilenetv2 b2 dw 3x3 144 @56", 144, 144, 56, 3, 1, 144},
      {"mobilenetv2 b4 expand 1x1 64->384 @14", 64, 384, 14, 1, 1, 1},
      {"mobilenetv2 b4 dw 3x3 384 @14", 384, 384, 14, 3, 1, 384},
      {"mobilenetv2 head 1x1 320->1280 @7", 320, 1280, 7, 1, 1, 1},
  };
  kiln_cpu_kernel_fn fn = kiln_cpu_kernel_find("", "Conv")->run;
  printf("\nConv layers, batch 1 (ms; best of %d interleaved; reference: 1 run)\n", reps);
  printf("  %-42s %9s %9s %9s %9s %7s %9s\n", "layer", "kiln", "kiln+epi", "openblas", "reference", "GF/s", "ref/kiln");
  for (size_t l = 0; l < sizeof L / sizeof *L; l++) {
    const layer *y = &L[l];
    int64_t xd[4] = {1, y->C, y->HW, y->HW}, wd[4] = {y->M, y->C / y->G, y->k, y->k}, bd[1] = {y->M};
    kiln_tensor x, w, b;
    fill(&x, 4, xd);
    fill(&w, 4, wd);
    fill(&b, 1, bd);
    int64_t pad = y->k / 2, o = (y->HW + 2 * pad - y->k) / y->s + 1;
    size_t cap = (size_t)(y->M * o * o) * sizeof(float);
    float *out = malloc(cap);
    kiln_node nd;
    kiln_attr at[4];
    int64_t ks[2] = {y->k, y->k}, st[2] = {y->s, y->s}, pads[4] = {pad, pad, pad, pad};
    memset(&nd, 0, sizeof nd);
    memset(at, 0, sizeof at);
    nd.op_type = (char *)"Conv";
    nd.domain = (char *)"";
    nd.opset = 11;
    nd.attrs = at;
    nd.n_attrs = 4;
    at[0] = (kiln_attr){.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = ks};
    at[1] = (kiln_attr){.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = st};
    at[2] = (kiln_attr){.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads};
    at[3] = (kiln_attr){.name = (char *)"group", .type = KILN_ATTR_INT, .i = y->G};
    const kiln_tensor *in[3] = {&x, &w, &b};
    kiln_cpu_epilogue ep = {relu_apply, NULL, false, 0.0f, 0.0f, NULL, 0, false, 0.0f, NULL, NULL};
    double ta[64], te[64], tb[64];
    int n = reps < 64 ? reps : 64;
    for (int r = 0; r <= n; r++) {
      double a = run_once(fn, &nd, 3, in, out, cap, NULL);
      double e = run_once(fn, &nd, 3, in, out, cap, &ep);
      kiln_sgemm_force(KILN_SGEMM_BLAS);
      double bs = run_once(fn, &nd, 3, in, out, cap, NULL);
      kiln_sgemm_force(-1);
      if (r) {
        ta[r - 1] = a;
        te[r - 1] = e;
        tb[r - 1] = bs;
      }
    }
    double rf = run_ref(&nd, 3, in, out, cap);
    double ma = best(ta, n), me = best(te, n), mb = best(tb, n);
    double fl = 2.0 * (double)(y->M * o * o) * (double)(y->C / y->G * y->k * y->k);
    printf("  %-42s %9.3f %9.3f %9.3f %9.2f %7.1f %8.0fx\n", y->name, ma * 1e3, me * 1e3, mb * 1e3, rf * 1e3,
           fl / ma * 1e-9, rf / ma);
    free(out);
    kiln_tensor_release(&x);
    kiln_tensor_release(&w);
    kiln_tensor_release(&b);
  }
}

/* `gemm-conv-bench REPS direct`: the conv layers of small_cnn, ResNet-18
 * and MobileNetV2's stem (not the pointwise or depthwise ones), the direct path (conv.c) against im2col + GEMM, both with W
 * packed once as a plan packs it (kiln_cpu_conv_prepack, no size limit
 * unless KILN_CONV_PREPACK says),
 * bias and a Relu clamp; medians and bests of REPS interleaved runs. */
static void bench_direct(int reps) {
  static const layer L[] = {
      {"small_cnn conv1 3x3 3->32 @32", 3, 32, 32, 3, 1, 1},
      {"small_cnn conv2 3x3 32->64 @32", 32, 64, 32, 3, 1, 1},
      {"small_cnn conv3 3x3 64->128 @16", 64, 128, 16, 3, 1, 1},
      {"resnet18 l1 3x3 64->64 @56", 64, 64, 56, 3, 1, 1},
      {"resnet18 l2 3x3 128->128 @28", 128, 128, 28, 3, 1, 1},
      {"resnet18 l3 3x3 256->256 @14", 256, 256, 14, 3, 1, 1},
      {"resnet18 l4 3x3 512->512 @7", 512, 512, 7, 3, 1, 1},
      {"3x3 128->128 @14", 128, 128, 14, 3, 1, 1},
      {"3x3 256->256 @7", 256, 256, 7, 3, 1, 1},
      {"3x3 64->64 @28", 64, 64, 28, 3, 1, 1},
      {"resnet18 conv1 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 1},
      {"resnet18 l2.0.conv1 3x3/2 64->128 @56", 64, 128, 56, 3, 2, 1},
      {"resnet18 l3.0.conv1 3x3/2 128->256 @28", 128, 256, 28, 3, 2, 1},
      {"resnet18 l4.0.conv1 3x3/2 256->512 @14", 256, 512, 14, 3, 2, 1},
      {"resnet18 l2.0.down 1x1/2 64->128 @56", 64, 128, 56, 1, 2, 1},
      {"resnet18 l4.0.down 1x1/2 256->512 @14", 256, 512, 14, 1, 2, 1},
      {"mobilenetv2 stem 3x3/2 3->32 @224", 3, 32, 224, 3, 2, 1},
  };
  setenv("KILN_CONV_PREPACK", "all", 0); /* KILN_CONV_PREPACK=2: the default limit */
  kiln_cpu_kernel_fn fn = kiln_cpu_kernel_find("", "Conv")->run;
  printf("\nDirect conv vs im2col + GEMM, W packed, bias + relu clamp (ms; %d interleaved runs)\n", reps);
  printf("  %-36s %9s %9s %9s %9s %8s\n", "layer", "gemm med", "dir med", "gemm best", "dir best", "dir/gemm");
  for (size_t l = 0; l < sizeof L / sizeof *L; l++) {
    const layer *y = &L[l];
    int64_t xd[4] = {1, y->C, y->HW, y->HW}, wd[4] = {y->M, y->C, y->k, y->k}, bd[1] = {y->M};
    kiln_tensor x, w, b;
    fill(&x, 4, xd);
    fill(&w, 4, wd);
    fill(&b, 1, bd);
    int64_t pad = y->k / 2, o = (y->HW + 2 * pad - y->k) / y->s + 1;
    size_t cap = (size_t)(y->M * o * o) * sizeof(float);
    float *out = malloc(cap);
    kiln_attr at[3];
    int64_t ks[2] = {y->k, y->k}, pads[4] = {pad, pad, pad, pad}, st[2] = {y->s, y->s};
    memset(at, 0, sizeof at);
    at[0] = (kiln_attr){.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = ks};
    at[1] = (kiln_attr){.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads};
    at[2] = (kiln_attr){.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = 2, .ints = st};
    int ins[3] = {0, 1, 2}, outs[1] = {3};
    kiln_node nd = {(char *)"conv0", (char *)"Conv", (char *)"", 11, 3, 1, 3, ins, outs, at, -1};
    kiln_value vals[4];
    memset(vals, 0, sizeof vals);
    for (int i = 0; i < 4; i++) vals[i].producer = -1;
    vals[1].init = &w;
    vals[3].producer = 0;
    kiln_graph g;
    memset(&g, 0, sizeof g);
    g.n_values = 4, g.values = vals, g.n_nodes = 1, g.nodes = &nd;
    kiln_cpu_conv_packs *pk = NULL;
    kiln_cpu_conv_prepack(&g, NULL, NULL, &pk, NULL);
    const kiln_tensor *in[3] = {&x, &w, &b};
    kiln_cpu_epilogue ep = {relu_apply, NULL, true, 0.0f, INFINITY, NULL, 0, false, 0.0f, NULL, NULL};
    double tg[64], td[64];
    int n = reps < 64 ? reps : 64;
    for (int r = 0; r <= n; r++) {
      kiln_conv_direct_force(r % 2 ? 0 : 1); /* ABBA-ish: alternate which goes first */
      double a = run_once(fn, &nd, 3, in, out, cap, &ep);
      kiln_conv_direct_force(r % 2 ? 1 : 0);
      double d = run_once(fn, &nd, 3, in, out, cap, &ep);
      if (r) {
        tg[r - 1] = r % 2 ? a : d;
        td[r - 1] = r % 2 ? d : a;
      }
    }
    kiln_conv_direct_force(-1);
    double bg = best(tg, n), bd2 = best(td, n);
    qsort(tg, (size_t)n, sizeof *tg, cmpd);
    qsort(td, (size_t)n, sizeof *td, cmpd);
    printf("  %-36s %9.3f %9.3f %9.3f %9.3f %8.2f\n", y->name, tg[n / 2] * 1e3, td[n / 2] * 1e3, bg * 1e3, bd2 * 1e3,
           td[n / 2] / tg[n / 2]);
    kiln_cpu_conv_packs_free(pk);
    free(out);
    kiln_tensor_release(&x);
    kiln_tensor_release(&w);
    kiln_tensor_release(&b);
  }
}

/* ---- "pool": the cost of a parallel loop ----
 * Back-to-back loops of T tasks of about W ns of arithmetic each (a
 * network's steps, a few microseconds apart), through kiln's pool, against
 * the least a loop can cost: a pool of threads that spin on one counter
 * (no lock, no yield, no sleep) and claim tasks from another. Per loop, the
 * mean wall time and the ideal, T·W / threads (or W when T < threads). */
static volatile float pool_sink;

static void spin_work(int64_t iters) { /* a dependent chain: a few ns an iteration (calibrated) */
  float x = 1.0f;
  for (int64_t i = 0; i < iters; i++) x = x * 0.999999f + 1e-7f;
  pool_sink = x;
}

typedef struct pw_ctx {
  int64_t iters;
} pw_ctx;

static void pool_work_task(void *ctx, int64_t t, int worker) {
  (void)t;
  (void)worker;
  spin_work(((pw_ctx *)ctx)->iters);
}

typedef struct spin_pool {
  atomic_long gen, next, done;
  atomic_bool stop;
  atomic_long n_tasks; /* read by a late thread of the last loop while the next one is set up */
  atomic_llong iters;
} spin_pool;

static void spin_pool_take(spin_pool *sp) {
  for (;;) {
    long t = atomic_fetch_add(&sp->next, 1);
    if (t >= sp->n_tasks) break;
    spin_work(sp->iters);
    atomic_fetch_add(&sp->done, 1);
  }
}

static void *spin_pool_main(void *arg) {
  spin_pool *sp = arg;
  long seen = 0;
  for (;;) {
    long g;
    while ((g = atomic_load(&sp->gen)) == seen && !atomic_load(&sp->stop)) {
#ifdef __SSE__
      _mm_pause();
#endif
    }
    if (atomic_load(&sp->stop)) return NULL;
    seen = g;
    spin_pool_take(sp);
  }
}

static void spin_pool_loop(spin_pool *sp, long n_tasks, int64_t iters) {
  atomic_store(&sp->n_tasks, n_tasks);
  atomic_store(&sp->iters, (long long)iters);
  atomic_store(&sp->done, 0); /* before next: a late thread of the last loop may claim a task at once */
  atomic_store(&sp->next, 0);
  atomic_fetch_add(&sp->gen, 1);
  spin_pool_take(sp);
  while (atomic_load(&sp->done) < n_tasks) {
#ifdef __SSE__
    _mm_pause();
#endif
  }
}

static void bench_pool(int reps) {
  int threads = kiln_pool_threads();
  /* calibrate: nanoseconds an iteration on this thread */
  double t0 = now();
  spin_work(1 << 22);
  double ns_it = (now() - t0) * 1e9 / (double)(1 << 22);
  printf("Parallel loops on %d threads (%.2f ns an iteration of the task's chain; mean of %d loops, best of %d)\n",
         threads, ns_it, 2000, reps);
  printf("  tasks  task_us   ideal_us    kiln_us  spinpool_us\n");
  const long task_counts[] = {1L * threads, 4L * threads};
  const double task_us[] = {0.0, 2.0, 10.0, 50.0};
  double res[2][4][2];
  for (int which = 0; which < 2; which++) { /* kiln's pool, then the spin pool (its threads spin all along) */
    spin_pool sp = {0};
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    if (!th) exit(2);
    if (which)
      for (int i = 1; i < threads; i++)
        if (pthread_create(&th[i], NULL, spin_pool_main, &sp)) {
          fprintf(stderr, "gemm-conv-bench: could not start thread %d\n", i);
          exit(2);
        }
    for (size_t a = 0; a < 2; a++)
      for (size_t b = 0; b < 4; b++) {
        long T = task_counts[a];
        pw_ctx c = {(int64_t)(task_us[b] * 1000.0 / ns_it)};
        int loops = task_us[b] >= 50 ? 400 : 2000;
        double v[64];
        int n = reps < 64 ? reps : 64;
        for (int r = 0; r < n; r++) {
          double s = now();
          for (int i = 0; i < loops; i++)
            if (which) spin_pool_loop(&sp, T, c.iters);
            else kiln_pool_for(T, threads, pool_work_task, &c);
          v[r] = (now() - s) / loops;
        }
        res[a][b][which] = best(v, n);
      }
    atomic_store(&sp.stop, true);
    if (which)
      for (int i = 1; i < threads; i++) pthread_join(th[i], NULL);
    free(th);
  }
  for (size_t a = 0; a < 2; a++)
    for (size_t b = 0; b < 4; b++) {
      long T = task_counts[a];
      double ideal = task_us[b] * (double)((T + threads - 1) / threads);
      printf("  %5ld  %7.1f  %9.1f  %9.2f  %11.2f\n", T, task_us[b], ideal, res[a][b][0] * 1e6, res[a][b][1] * 1e6);
    }
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 9;
  if (reps < 2) reps = 2;
  kiln_pool_acquire(); /* KILN_NUM_THREADS threads, as a cpu plan holds them */
  if (argc > 2 && !strcmp(argv[2], "direct")) bench_direct(reps);
  else if (argc > 2 && !strcmp(argv[2], "pool")) bench_pool(reps);
  else {
    if (!(argc > 2 && !strcmp(argv[2], "conv"))) bench_gemm(reps);
    bench_conv(reps);
  }
  kiln_pool_release();
  return 0;
}
