/* tests/opencl_transpose: transposed reads tiled through local memory
 * (opencl/codegen.c, tile_plan) on whatever ICD the environment selects
 * (ctest runs it under PoCL and under rusticl). Each case is a Transpose
 * alone (the view copy kernel the engine prints for it) or a Transpose
 * feeding an Add (one fused elementwise kernel reading the transposed
 * input); the kernel is printed tiled and untiled (KILN_CL_TILE=0), both
 * are run — the tiled one with its own local size and with a smaller one,
 * and its untiled twin — and compared with the reference backend (bit for
 * bit: the kernels move or add values, as the reference does), and whether
 * the tiled form was printed is asserted. Exits 77 (skip) when no device is found.
 *   opencl_transpose [-v] [--bench]
 * --bench: the bench shapes, tiled vs untiled vs a plain copy kernel of
 * the same bytes, timed side by side (opencl/ENGINE.md has the numbers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuse/group.h"
#include "fuse/spec.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "opencl/codegen.h"
#include "opencl/device.h"
#include "opencl/runtime.h"
#include "reference/exec.h"
#include "tests/graphbuild.h"
#include "tests/testutil.h"

static int passed, failed, verbose;
#include "tests/check.h"

/* One case: x [rank dims] of dtype, Transpose perm, optionally + b. */
typedef struct tcase {
  const char *name;
  int rank;
  int64_t dims[4], perm[4];
  kiln_dtype dtype;
  bool add;
  bool tiled; /* the tiled form is expected */
  bool deflt; /* printed with the default bound (else KILN_CL_TILE=all) */
} tcase;

/* A graph, its shapes, the fusion plan and the one spec that prints. */
typedef struct built {
  kiln_graph *g;
  kiln_shapes *sh;
  kiln_fuse_ctx *fc;
  kiln_schedule *s;
  kiln_fuse_plan *fp;
  const kiln_fuse_spec *sp;
} built;

static void built_free(built *b) {
  kiln_fuse_plan_free(b->fp);
  kiln_schedule_free(b->s);
  kiln_fuse_ctx_free(b->fc);
  kiln_shapes_free(b->sh);
  kiln_graph_free(b->g);
  memset(b, 0, sizeof *b);
}

static bool build(const tcase *tc, built *b) {
  memset(b, 0, sizeof *b);
  kiln_graph *g = b->g = new_graph(17);
  int64_t td[4];
  for (int d = 0; d < tc->rank; d++) td[d] = tc->dims[tc->perm[d]];
  input(g, "x", tc->dtype, tc->rank, tc->dims);
  int n = gb_add(g, "Transpose", "x", "t");
  if (kiln_edit_set_ints(&g->nodes[n], "perm", tc->perm, (size_t)tc->rank)) return false;
  if (tc->add) {
    input(g, "b", tc->dtype, tc->rank, td);
    gb_add(g, "Add", "t b", "y");
    output(g, "y");
  } else {
    output(g, "t");
  }
  /* as the engine schedules: one step per node, then one reading the outputs */
  kiln_status s = kiln_shapes_infer(g, &b->sh);
  if (!s) s = kiln_fuse_ctx_new(g, b->sh, NULL, &b->fc);
  if (!s) s = kiln_schedule_from_graph(g, &b->s);
  if (!s) s = kiln_schedule_add_step(b->s, g->outputs, g->n_outputs, NULL, 0, -1);
  if (!s) s = kiln_fuse_schedule(b->fc, b->s, &b->fp);
  for (int i = 0; !s && i < b->fp->n_steps; i++) {
    const kiln_fuse_spec *sp = b->fp->spec[i];
    if (sp && sp->bound && sp->n_nodes > 0) b->sp = sp;
  }
  return !s && b->sp && (tc->add ? b->sp->n_store == 1 : b->sp->n_alias == 1);
}

/* Prints the case's kernel as `name` with KILN_CL_TILE=tile (NULL: unset). */
static kiln_status print(const tcase *tc, const built *b, const kiln_cl_device *dev, const char *name,
                         const char *tile, char **src, kiln_cl_kernel_sig *sig) {
  if (tile) setenv("KILN_CL_TILE", tile, 1);
  kiln_status s = tc->add ? kiln_cl_codegen_named(b->sp, dev, name, src, sig)
                          : kiln_cl_codegen_alias(b->sp, 0, dev, name, src, sig);
  unsetenv("KILN_CL_TILE");
  return s;
}

/* A kernel bound to its buffers: the inputs written from vals (per value). */
typedef struct bound_k {
  kiln_cl_kernel k;
  kiln_cl_buffer buf[4];
  int n, out;
} bound_k;

static void bound_free(bound_k *k) {
  for (int a = 0; a < k->n; a++) kiln_cl_buffer_free(&k->buf[a]);
  kiln_cl_kernel_free(&k->k);
}

static kiln_status bind(kiln_cl_context *c, cl_program p, const kiln_cl_kernel_sig *sig, const kiln_tensor *vals,
                        bound_k *k) {
  memset(k, 0, sizeof *k);
  if (sig->n_args > 4) return kiln_fail(KILN_E_INTERNAL, "%d kernel arguments", sig->n_args);
  kiln_status s = kiln_cl_kernel_create(c, p, sig->name, &k->k);
  for (int a = 0; a < sig->n_args && !s; a++) {
    const kiln_cl_sig_arg *ar = &sig->args[a];
    size_t bytes = (size_t)ar->numel * kiln_dtype_size(ar->dtype);
    s = kiln_cl_buffer_create(c, bytes, &k->buf[a]);
    k->n = a + 1;
    if (!s && !ar->output) s = kiln_cl_buffer_write(c, &k->buf[a], 0, vals[ar->value].data, bytes);
    if (ar->output) k->out = a;
    if (!s) s = kiln_cl_kernel_arg_buffer(&k->k, (cl_uint)a, &k->buf[a]);
  }
  return s;
}

/* Runs k: n_items / sig->local groups of `local` items (a tiled kernel;
 * lowered to the kernel's limit, as the engine's launcher does), or
 * n_items with the driver's local size. */
static kiln_status launch(kiln_cl_context *c, const kiln_cl_kernel_sig *sig, bound_k *k, size_t local) {
  size_t n = (size_t)sig->n_items;
  while (local > 1 && local > k->k.wg_size) local /= 2;
  if (sig->local) n = n / sig->local * local;
  return kiln_cl_launch_1d(c, &k->k, n, sig->local ? local : 0, NULL);
}

static kiln_status read_out(kiln_cl_context *c, bound_k *k, const kiln_tensor *like, kiln_tensor *out) {
  kiln_status s = kiln_tensor_alloc(out, like->dtype, like->rank, like->dims);
  if (!s) s = kiln_cl_buffer_read(c, &k->buf[k->out], 0, out->data, (size_t)out->numel * kiln_dtype_size(like->dtype));
  return s;
}

/* Distinct values (a float's 24 bits, an integer's wrap) in x's order. */
static void fill(kiln_tensor *t, int64_t seed) {
  for (int64_t i = 0; i < t->numel; i++) {
    int64_t v = (i * 7919 + seed) % 1000003;
    if (kiln_dtype_is_float(t->dtype)) kiln_set_f(t, i, (double)v / 1024.0 - 300.0);
    else kiln_set_i(t, i, v - 500000);
  }
}

static void run_case(kiln_cl_context *c, const kiln_cl_device *dev, const tcase *tc) {
  built b;
  char *src[2] = {NULL, NULL};
  kiln_cl_kernel_sig sig[2];
  cl_program p = NULL;
  bound_k k[2];
  memset(k, 0, sizeof k);
  kiln_tensor x = {0}, bb = {0}, ref = {0}, got = {0};
  kiln_tensor *vals = NULL;
  if (!build(tc, &b)) {
    CHECK(0, "%s: cannot build and fuse: %s", tc->name, kiln_last_error());
    goto done;
  }
  kiln_status s = print(tc, &b, dev, "kt", tc->deflt ? NULL : "all", &src[0], &sig[0]);
  if (!s) s = print(tc, &b, dev, "ku", "0", &src[1], &sig[1]);
  if (s) {
    CHECK(0, "%s: codegen: %s", tc->name, kiln_last_error());
    goto done;
  }
  bool tiled = strstr(src[0], "kiln_tile") != NULL;
  CHECK(tiled == tc->tiled, "%s: printed %s, expected %s", tc->name, tiled ? "tiled" : "untiled",
        tc->tiled ? "tiled" : "untiled");
  CHECK(!strstr(src[1], "kiln_tile"), "%s: KILN_CL_TILE=0 still tiles", tc->name);
  CHECK(!tiled || (sig[0].local > 0 && sig[0].local <= dev->max_work_group_size &&
                   sig[0].n_items % (int64_t)sig[0].local == 0 && sig[0].twin[0] && strstr(src[0], sig[0].twin)),
        "%s: tiled launch: %lld items, local %zu, twin '%s'", tc->name, (long long)sig[0].n_items, sig[0].local,
        sig[0].twin);
  CHECK(tiled || (!sig[0].local && !sig[0].twin[0]), "%s: an untiled kernel with a local size or a twin", tc->name);
  if (verbose) printf("%s", src[0]);
  size_t l0 = strlen(src[0]), l1 = strlen(src[1]);
  char *both = kiln_malloc(l0 + l1 + 1);
  if (!both) goto done;
  memcpy(both, src[0], l0);
  memcpy(both + l0, src[1], l1 + 1);
  s = kiln_cl_program_build(c, both, "-cl-std=CL1.2", &p);
  kiln_free(both);
  if (s) {
    CHECK(0, "%s: build: %.600s\n%s", tc->name, kiln_last_error(), src[0]);
    goto done;
  }
  /* the inputs and the reference */
  kiln_graph *g = b.g;
  vals = calloc((size_t)g->n_values, sizeof *vals);
  const kiln_tensor **bound = calloc((size_t)g->n_values, sizeof *bound);
  s = kiln_tensor_alloc(&x, tc->dtype, tc->rank, tc->dims);
  if (!s) fill(&x, 1), vals[val(g, "x")] = x, bound[val(g, "x")] = &x;
  if (!s && tc->add) {
    const kiln_vshape *bs = &b.sh->v[val(g, "b")];
    int64_t bd[4];
    for (int d = 0; d < bs->rank; d++) bd[d] = tc->dims[tc->perm[d]];
    s = kiln_tensor_alloc(&bb, tc->dtype, tc->rank, bd);
    if (!s) fill(&bb, 77), vals[val(g, "b")] = bb, bound[val(g, "b")] = &bb;
  }
  if (!s) s = kiln_ref_run(g, bound, &ref);
  free(bound);
  if (s) {
    CHECK(0, "%s: reference: %s", tc->name, kiln_last_error());
    goto done;
  }
  char m[400];
  if (tiled) { /* the twin in the tiled kernel's source, as the engine launches it */
    kiln_cl_kernel_sig tw = sig[0];
    snprintf(tw.name, sizeof tw.name, "%s", sig[0].twin);
    tw.n_items = sig[0].twin_items;
    tw.local = 0;
    bound_k kt;
    s = bind(c, p, &tw, vals, &kt);
    if (!s) s = launch(c, &tw, &kt, 0);
    if (!s) s = read_out(c, &kt, &ref, &got);
    if (!s) CHECK(tu_compare(&got, &ref, 0, 0, m, sizeof m, NULL, NULL), "%s (twin) vs reference: %s", tc->name, m);
    else CHECK(0, "%s: twin: %s", tc->name, kiln_last_error());
    kiln_tensor_release(&got);
    bound_free(&kt);
  }
  for (int v = 0; v < 2; v++) {
    s = bind(c, p, &sig[v], vals, &k[v]);
    /* the tiled kernel with its local size, then a smaller one (the
       launcher may lower it to the kernel's limit) */
    size_t locals[2] = {sig[v].local, sig[v].local > 64 ? 64 : sig[v].local};
    for (int l = 0; l < (sig[v].local ? 2 : 1) && !s; l++) {
      s = launch(c, &sig[v], &k[v], locals[l]);
      if (!s) s = read_out(c, &k[v], &ref, &got);
      if (!s)
        CHECK(tu_compare(&got, &ref, 0, 0, m, sizeof m, NULL, NULL), "%s (%s, local %zu) vs reference: %s", tc->name,
              v ? "untiled" : "tiled", locals[l], m);
      kiln_tensor_release(&got);
    }
    if (s) CHECK(0, "%s: run: %s", tc->name, kiln_last_error());
  }
  if (verbose) printf("  ok %s (%s)\n", tc->name, tiled ? "tiled" : "untiled");
done:
  kiln_error_clear();
  for (int v = 0; v < 2; v++) bound_free(&k[v]), kiln_free(src[v]);
  kiln_cl_program_free(p);
  kiln_tensor_release(&x);
  kiln_tensor_release(&bb);
  kiln_tensor_release(&ref);
  free(vals);
  built_free(&b);
}

#define P2 {1, 0}
static const tcase cases[] = {
    /* 2-D, float32: exact tiles, tiles not dividing, thin planes */
    {"64x64", 2, {64, 64}, P2, KILN_F32, false, true, false},
    {"7x33", 2, {7, 33}, P2, KILN_F32, false, true, false},
    {"33x7 (j stride 28 bytes)", 2, {33, 7}, P2, KILN_F32, false, false, false},
    {"33x100", 2, {33, 100}, P2, KILN_F32, false, true, false},
    {"100x3 (j stride 12 bytes)", 2, {100, 3}, P2, KILN_F32, false, false, false},
    {"3x100 (a plane 3 wide)", 2, {3, 100}, P2, KILN_F32, false, false, false},
    {"1x7 (a reshape)", 2, {1, 7}, P2, KILN_F32, false, false, false},
    {"1x1", 2, {1, 1}, P2, KILN_F32, false, false, false},
    /* batch dims, perm variants */
    {"batch 3x33x65 (0,2,1)", 3, {3, 33, 65}, {0, 2, 1}, KILN_F32, false, true, false},
    {"3x33x65 (1,2,0): j 3 wide", 3, {3, 33, 65}, {1, 2, 0}, KILN_F32, false, false, false},
    {"3x33x65 (2,0,1): a rest dim between", 3, {3, 33, 65}, {2, 0, 1}, KILN_F32, false, true, false},
    {"5x33x65 (2,1,0)", 3, {5, 33, 65}, {2, 1, 0}, KILN_F32, false, true, false},
    {"3x33x65 (1,0,2): inner kept", 3, {3, 33, 65}, {1, 0, 2}, KILN_F32, false, false, false},
    {"attention [1,37,4,20] (0,2,1,3)", 4, {1, 37, 4, 20}, {0, 2, 1, 3}, KILN_F32, false, false, false},
    {"attention [2,37,4,20] (0,2,3,1)", 4, {2, 37, 4, 20}, {0, 2, 3, 1}, KILN_F32, false, true, false},
    {"[2,5,7,9] (0,3,1,2)", 4, {2, 5, 7, 9}, {0, 3, 1, 2}, KILN_F32, false, true, false},
    {"[5,2,7,9] (3,2,1,0)", 4, {5, 2, 7, 9}, {3, 2, 1, 0}, KILN_F32, false, true, false},
    {"[5,1,9,6] (2,1,3,0): a size-1 dim", 4, {5, 1, 9, 6}, {2, 1, 3, 0}, KILN_F32, false, true, false},
    /* other dtypes (bit copies of 1, 4 and 8 bytes) */
    {"int32 33x65", 2, {33, 65}, P2, KILN_I32, false, true, false},
    {"int64 3x40x9 (0,2,1)", 3, {3, 40, 9}, {0, 2, 1}, KILN_I64, false, true, false},
    {"uint8 40x70", 2, {40, 70}, P2, KILN_U8, false, true, false},
    {"uint8 40x20 (j stride 20 bytes)", 2, {40, 20}, P2, KILN_U8, false, false, false},
    /* fused: Transpose + Add, the transposed input tiled */
    {"fused 33x100 + b", 2, {33, 100}, P2, KILN_F32, true, true, false},
    {"fused 64x64 + b (float4 otherwise)", 2, {64, 64}, P2, KILN_F32, true, true, false},
    {"fused batch 3x33x65 (0,2,1) + b", 3, {3, 33, 65}, {0, 2, 1}, KILN_F32, true, true, false},
    {"fused int32 [2,37,4,20] (0,2,3,1) + b", 4, {2, 37, 4, 20}, {0, 2, 3, 1}, KILN_I32, true, true, false},
    {"fused int64 7x33 + b", 2, {7, 33}, P2, KILN_I64, true, true, false},
    {"fused 100x3 + b (untiled)", 2, {100, 3}, P2, KILN_F32, true, false, false},
    /* the default bounds: a stride of 4 KiB along j, j 1024 and q 32 wide */
    {"1030x1027 (j stride 4108 bytes)", 2, {1030, 1027}, P2, KILN_F32, false, true, true},
    {"1030x1000 (j stride 4000 bytes)", 2, {1030, 1000}, P2, KILN_F32, false, false, true},
    {"1000x1030 (j 1000 wide)", 2, {1000, 1030}, P2, KILN_F32, false, false, true},
    {"1030x31 int64 (q 31 wide)", 2, {1030, 31}, P2, KILN_I64, false, false, true},
    {"fused int64 [2,1025,513] (0,2,1) + b", 3, {2, 1025, 513}, {0, 2, 1}, KILN_I64, true, true, true},
};

/* ------------------------------------------------------------------ */
/* --bench                                                             */

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The fastest of `reps` launches of k on queue q (profiling): OpenCL event
 * times, or the launch's wall time (enqueue to completion) where the
 * driver's are not meaningful (rusticl: 0 or ~1 ns apart). */
static double time_reps(cl_command_queue q, const kiln_cl_kernel_sig *sig, bound_k *k, int reps) {
  size_t local = sig->local;
  while (local > 1 && local > k->k.wg_size) local /= 2;
  size_t n = sig->local ? (size_t)sig->n_items / sig->local * local : (size_t)sig->n_items;
  size_t g = (n + (local ? local : KILN_CL_GLOBAL_PAD) - 1) / (local ? local : KILN_CL_GLOBAL_PAD) *
             (local ? local : KILN_CL_GLOBAL_PAD);
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    cl_event ev = NULL;
    double w0 = now_ms();
    if (clEnqueueNDRangeKernel(q, k->k.k, 1, NULL, &g, local ? &local : NULL, 0, NULL, &ev) || clWaitForEvents(1, &ev))
      return -1;
    double w = now_ms() - w0;
    cl_ulong t0 = 0, t1 = 0;
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    clReleaseEvent(ev);
    double t = t1 > t0 + 100 ? (double)(t1 - t0) * 1e-6 : w; /* rusticl: 0 or ~1 ns apart */
    if (t < best) best = t;
  }
  return best;
}

/* Tiled (KILN_CL_TILE=all) vs untiled vs copy of one shape: ROUNDS rounds
 * in ABBA order (tiled, untiled, copy, then copy, untiled, tiled), each the
 * fastest of a few launches; medians over the rounds. Whether the default
 * bound tiles the shape is printed. */
static void bench_case(kiln_cl_context *c, const kiln_cl_device *dev, const tcase *tc) {
  enum { ROUNDS = 6 };
  built b;
  char *src[2] = {NULL, NULL};
  kiln_cl_kernel_sig sig[3];
  bound_k k[3];
  memset(k, 0, sizeof k);
  cl_program p = NULL;
  kiln_tensor x = {0};
  kiln_tensor *vals = NULL;
  char *dflt = NULL;
  kiln_cl_kernel_sig dsig;
  if (!build(tc, &b) || print(tc, &b, dev, "kt", "all", &src[0], &sig[0]) ||
      print(tc, &b, dev, "ku", "0", &src[1], &sig[1]) || print(tc, &b, dev, "kd", NULL, &dflt, &dsig)) {
    CHECK(0, "bench %s: %s", tc->name, kiln_last_error());
    goto done;
  }
  /* the copy: the same element type and count, one element per item */
  const char *T = kiln_dtype_size(tc->dtype) == 8 ? "ulong" : kiln_dtype_size(tc->dtype) == 4 ? "uint" : "uchar";
  int64_t numel = 1;
  for (int d = 0; d < tc->rank; d++) numel *= tc->dims[d];
  char copy[400];
  snprintf(copy, sizeof copy,
           "__kernel void kc(__global const %s *restrict a0, __global %s *s0) {\n"
           "  if (get_global_id(0) >= %lld) return;\n  s0[get_global_id(0)] = a0[get_global_id(0)];\n}\n",
           T, T, (long long)numel);
  sig[2] = sig[1]; /* x in, the output out */
  snprintf(sig[2].name, sizeof sig[2].name, "kc");
  sig[2].n_args = 2;
  for (int a = 0; a < sig[1].n_args; a++) {
    if (sig[1].args[a].output) sig[2].args[1] = sig[1].args[a];
    else if (sig[1].args[a].value == val(b.g, "x")) sig[2].args[0] = sig[1].args[a];
  }
  sig[2].n_items = numel;
  sig[2].local = 0;
  size_t l0 = strlen(src[0]), l1 = strlen(src[1]), l2 = strlen(copy);
  char *all = kiln_malloc(l0 + l1 + l2 + 1);
  if (!all) goto done;
  memcpy(all, src[0], l0);
  memcpy(all + l0, src[1], l1);
  memcpy(all + l0 + l1, copy, l2 + 1);
  kiln_status s = kiln_cl_program_build(c, all, "-cl-std=CL1.2", &p);
  kiln_free(all);
  vals = calloc((size_t)b.g->n_values, sizeof *vals);
  if (!s) s = kiln_tensor_alloc(&x, tc->dtype, tc->rank, tc->dims);
  if (!s) fill(&x, 1), vals[val(b.g, "x")] = x;
  kiln_tensor bb = {0};
  if (!s && tc->add) s = kiln_tensor_alloc(&bb, tc->dtype, tc->rank, tc->dims); /* b: the output's numel */
  if (!s && tc->add) fill(&bb, 77), vals[val(b.g, "b")] = bb;
  for (int v = 0; v < 3 && !s; v++) s = bind(c, p, &sig[v], vals, &k[v]);
  kiln_tensor_release(&bb);
  if (s) {
    CHECK(0, "bench %s: %s", tc->name, kiln_last_error());
    goto done;
  }
  int reps = numel >= (1 << 22) ? 3 : numel >= (1 << 18) ? 10 : 30;
  double t[3][ROUNDS];
  cl_int e = 0;
  cl_command_queue q = clCreateCommandQueue(c->ctx, c->device, CL_QUEUE_PROFILING_ENABLE, &e);
  if (e) {
    CHECK(0, "bench %s: a profiling queue: %d", tc->name, e);
    goto done;
  }
  for (int v = 0; v < 3; v++) time_reps(q, &sig[v], &k[v], 1); /* first launches: PoCL compiles */
  for (int r = 0; r < ROUNDS; r++)
    for (int i = 0; i < 3; i++) {
      int v = r % 2 ? 2 - i : i;
      t[v][r] = time_reps(q, &sig[v], &k[v], reps);
    }
  clReleaseCommandQueue(q);
  double med[3];
  for (int v = 0; v < 3; v++) {
    qsort(t[v], ROUNDS, sizeof(double), cmp_double);
    med[v] = (t[v][ROUNDS / 2 - 1] + t[v][ROUNDS / 2]) / 2;
  }
  if (verbose) printf("  kernel limits: tiled %zu (printed for %zu), untiled %zu\n", k[0].k.wg_size, sig[0].local,
                     k[1].k.wg_size);
  printf("  %-34s %s: tiled %8.3f ms, untiled %8.3f ms, copy %8.3f ms: untiled/copy %5.2f, tiled/copy %5.2f, "
         "untiled/tiled %5.2f\n",
         tc->name, strstr(dflt, "kiln_tile") ? "tiled  " : "untiled", med[0], med[1], med[2], med[1] / med[2],
         med[0] / med[2], med[1] / med[0]);
  CHECK(med[0] > 0 && med[1] > 0 && med[2] > 0, "bench %s: timings", tc->name);
done:
  kiln_error_clear();
  for (int v = 0; v < 3; v++) bound_free(&k[v]);
  for (int v = 0; v < 2; v++) kiln_free(src[v]);
  kiln_free(dflt);
  kiln_cl_program_free(p);
  kiln_tensor_release(&x);
  free(vals);
  built_free(&b);
}

static const tcase bench_cases[] = {
    {"4096x4096 (1,0)", 2, {4096, 4096}, P2, KILN_F32, false, true, false},
    {"2048x2048 (1,0)", 2, {2048, 2048}, P2, KILN_F32, false, true, false},
    {"1024x1024 (1,0)", 2, {1024, 1024}, P2, KILN_F32, false, true, false},
    {"512x512 (1,0)", 2, {512, 512}, P2, KILN_F32, false, true, false},
    {"[8,512,512] (0,2,1)", 3, {8, 512, 512}, {0, 2, 1}, KILN_F32, false, true, false},
    {"[1,128,4,64] (0,2,1,3)", 4, {1, 128, 4, 64}, {0, 2, 1, 3}, KILN_F32, false, false, false},
    {"[1,128,4,64] (0,2,3,1)", 4, {1, 128, 4, 64}, {0, 2, 3, 1}, KILN_F32, false, true, false},
    {"[1,512,8,64] (0,2,3,1)", 4, {1, 512, 8, 64}, {0, 2, 3, 1}, KILN_F32, false, true, false},
    {"7x65536 (1,0): j 7 wide", 2, {7, 65536}, P2, KILN_F32, false, true, false},
    {"16x65536 (1,0): j 16 wide", 2, {16, 65536}, P2, KILN_F32, false, true, false},
    {"32x65536 (1,0): j 32 wide", 2, {32, 65536}, P2, KILN_F32, false, true, false},
    {"256x16384 (1,0): j 256 wide", 2, {256, 16384}, P2, KILN_F32, false, true, false},
    {"[1024,64,16] (2,1,0): q 16 wide", 3, {1024, 64, 16}, {2, 1, 0}, KILN_F32, false, true, false},
    {"[1024,64,4] (2,1,0): q 4 wide", 3, {1024, 64, 4}, {2, 1, 0}, KILN_F32, false, true, false},
    {"[64,1024,8] (2,1,0): q 8 wide", 3, {64, 1024, 8}, {2, 1, 0}, KILN_F32, false, true, false},
    {"[64,1024,16] (2,1,0): q 16 wide", 3, {64, 1024, 16}, {2, 1, 0}, KILN_F32, false, true, false},
    {"fused 2048x2048 + b", 2, {2048, 2048}, P2, KILN_F32, true, true, false},
};

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  bool bench = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "--bench")) bench = true;
  }
  kiln_cl_device_list l;
  if (kiln_cl_devices_enumerate(&l)) {
    printf("opencl_transpose: enumerate failed: %s\nopencl_transpose: 0 passed, 1 failed\n", kiln_last_error());
    return 1;
  }
  if (!l.n) {
    const char *icd = getenv("OCL_ICD_VENDORS");
    printf("opencl_transpose: SKIP: no usable OpenCL device under OCL_ICD_VENDORS=%s (%s)\n", icd ? icd : "(unset)",
           *l.notes ? l.notes : "no reason given");
    kiln_cl_devices_free(&l);
    return 77;
  }
  const kiln_cl_device *dev = &l.devices[0];
  kiln_cl_context *c = NULL;
  if (kiln_cl_context_create(dev, &c)) {
    printf("opencl_transpose: context: %s\nopencl_transpose: 0 passed, 1 failed\n", kiln_last_error());
    kiln_cl_devices_free(&l);
    return 1;
  }
  printf("device %s (%s), max work-group %zu\n", dev->name, dev->version, dev->max_work_group_size);
  if (bench) {
    for (size_t i = 0; i < sizeof bench_cases / sizeof *bench_cases; i++) bench_case(c, dev, &bench_cases[i]);
  } else {
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(c, dev, &cases[i]);
  }
  kiln_cl_context_free(c);
  kiln_cl_devices_free(&l);
  printf("opencl_transpose: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
