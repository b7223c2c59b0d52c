/* bench/nn_kernels: times the cpu_fallback/nn kernels side by side, in one
 * run, against the reference kernel of the same node and against memcpy of
 * the output's bytes (the memory-bound floor), on the shapes the benchmark
 * models use. Outputs are preset arena-like reservations, as in the plan.
 * Build (after building build-nn):
 *   cc -O2 -I. -Ibuild-nn bench/nn_kernels.c build-nn/cpu_fallback/libkiln_cpu.a \
 *      build-nn/fuse/libkiln_fuse.a build-nn/reference/libkiln_reference.a build-nn/ir/libkiln_ir.a \
 *      -lm -lpthread -o /tmp/nn_kernels
 * Prints one line per case: milliseconds (median) for reference, base,
 * avx2 and memcpy, and the ratios. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/nn.h"
#include "ir/graph_edit.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef struct bc {
  kiln_graph *g;
  kiln_node *n;
  const char *op;
  int n_in;
  kiln_tensor in[6];
  const kiln_tensor *inp[6];
} bc;

static void bc_begin(bc *b, int opset, const char *op, int n_in) {
  memset(b, 0, sizeof *b);
  kiln_edit_new_graph(opset, &b->g);
  b->op = op, b->n_in = n_in;
  int in[6], out, idx;
  for (int k = 0; k < n_in; k++) kiln_edit_add_value(b->g, "in", &in[k]), b->inp[k] = &b->in[k];
  kiln_edit_add_value(b->g, "out", &out);
  kiln_edit_insert_node(b->g, 0, "node", op, "", n_in, in, 1, &out, &idx);
  b->n = &b->g->nodes[idx];
}

static void bc_f32(bc *b, int k, int rank, const int64_t *dims) {
  kiln_tensor_alloc(&b->in[k], KILN_F32, rank, dims);
  float *p = b->in[k].data;
  for (int64_t i = 0; i < b->in[k].numel; i++) p[i] = (float)((double)rand() / RAND_MAX * 2 - 1);
}

static void bc_i64(bc *b, int k, int rank, const int64_t *dims, int64_t mod) {
  kiln_tensor_alloc(&b->in[k], KILN_I64, rank, dims);
  int64_t *p = b->in[k].data;
  for (int64_t i = 0; i < b->in[k].numel; i++) p[i] = rand() % mod;
}

/* Median time of reps calls of run (mode 0 reference, 1 base, 2 avx2, 3 memcpy). */
static double time_mode(bc *b, int mode, int reps, void *slot, size_t cap, size_t out_bytes, const void *src) {
  const kiln_op_def *rd = kiln_ref_find_op("", b->op);
  const kiln_cpu_kernel_def *kd = kiln_cpu_kernel_find("", b->op);
  if (mode == 1 || mode == 2) kiln_nn_force_isa(mode == 1 ? KILN_VM_ISA_BASE : KILN_VM_ISA_AVX2);
  double t[64];
  bool used = true;
  for (int r = 0; r < reps + 1; r++) {
    kiln_tensor out = {0};
    out.data = slot;
    out.capacity = cap;
    kiln_op_call c = {b->g, b->n, b->n->opset, b->n_in, b->inp, 1, &out, &used};
    double t0 = now();
    bool declined = false;
    if (mode == 0)
      rd->run(&c);
    else if (mode == 3)
      memcpy(slot, src, out_bytes);
    else if (kd->run(&c, NULL, &declined) || declined) {
      printf("%s: declined or failed\n", b->op);
      return NAN;
    }
    double dt = now() - t0;
    if (r) t[r - 1] = dt; /* the first call warms up */
  }
  kiln_nn_force_isa(KILN_VM_NISA);
  qsort(t, (size_t)reps, sizeof *t, cmp_d);
  return t[reps / 2];
}

static void bc_run(bc *b, const char *what, size_t out_bytes, int ref_reps, int reps) {
  size_t cap = out_bytes + 64;
  void *slot = malloc(cap), *src = malloc(out_bytes);
  memset(slot, 0, cap);
  memset(src, 1, out_bytes);
  double tr = time_mode(b, 0, ref_reps, slot, cap, out_bytes, src);
  double tb = time_mode(b, 1, reps, slot, cap, out_bytes, src);
  double ta = kiln_nn_prims_for(KILN_VM_ISA_AVX2) ? time_mode(b, 2, reps, slot, cap, out_bytes, src) : NAN;
  double tm = time_mode(b, 3, reps, slot, cap, out_bytes, src);
  printf("| %-44s | %9.3f | %8.3f | %8.3f | %8.3f | %7.1fx | %5.2f | %5.2f |\n", what, tr, tb, ta, tm, tr / ta, tb / ta,
         ta / tm);
  free(slot);
  free(src);
  for (int k = 0; k < 6; k++) kiln_tensor_release(&b->in[k]);
  kiln_graph_free(b->g);
}

#define D(...) ((const int64_t[]){__VA_ARGS__})

int main(void) {
  printf("| case | reference ms | base ms | avx2 ms | memcpy ms | ref/avx2 | base/avx2 | avx2/memcpy |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  bc b;
  bc_begin(&b, 13, "Softmax", 1);
  bc_f32(&b, 0, 2, D(64, 1000));
  bc_run(&b, "Softmax [64,1000] axis -1", 64 * 1000 * 4, 5, 31);
  bc_begin(&b, 13, "LogSoftmax", 1);
  bc_f32(&b, 0, 2, D(64, 1000));
  bc_run(&b, "LogSoftmax [64,1000] axis -1", 64 * 1000 * 4, 5, 31);
  bc_begin(&b, 13, "Softmax", 1);
  bc_f32(&b, 0, 4, D(1, 4, 128, 128));
  bc_run(&b, "Softmax [1,4,128,128] (transformer scores)", 4 * 128 * 128 * 4, 5, 31);
  bc_begin(&b, 13, "Softmax", 1);
  bc_f32(&b, 0, 3, D(8, 100, 80));
  kiln_edit_set_int(b.n, "axis", 1);
  bc_run(&b, "Softmax [8,100,80] axis 1 (columns)", 8 * 100 * 80 * 4, 5, 31);
  bc_begin(&b, 17, "LayerNormalization", 3);
  bc_f32(&b, 0, 2, D(128, 768));
  bc_f32(&b, 1, 1, D(768));
  bc_f32(&b, 2, 1, D(768));
  bc_run(&b, "LayerNormalization [128,768]", 128 * 768 * 4, 5, 31);
  bc_begin(&b, 17, "LayerNormalization", 3);
  bc_f32(&b, 0, 3, D(1, 128, 256));
  bc_f32(&b, 1, 1, D(256));
  bc_f32(&b, 2, 1, D(256));
  bc_run(&b, "LayerNormalization [1,128,256] (transformer)", 128 * 256 * 4, 5, 31);
  bc_begin(&b, 12, "MaxPool", 1);
  bc_f32(&b, 0, 4, D(1, 64, 112, 112));
  kiln_edit_set_ints(b.n, "kernel_shape", D(3, 3), 2);
  kiln_edit_set_ints(b.n, "strides", D(2, 2), 2);
  kiln_edit_set_ints(b.n, "pads", D(1, 1, 1, 1), 4);
  bc_run(&b, "MaxPool [1,64,112,112] k3 s2 p1 (ResNet-18)", 64 * 56 * 56 * 4, 3, 21);
  bc_begin(&b, 12, "MaxPool", 1);
  bc_f32(&b, 0, 4, D(1, 32, 64, 64));
  kiln_edit_set_ints(b.n, "kernel_shape", D(2, 2), 2);
  kiln_edit_set_ints(b.n, "strides", D(2, 2), 2);
  bc_run(&b, "MaxPool [1,32,64,64] k2 s2 (small CNN)", 32 * 32 * 32 * 4, 3, 31);
  bc_begin(&b, 11, "AveragePool", 1);
  bc_f32(&b, 0, 4, D(1, 64, 56, 56));
  kiln_edit_set_ints(b.n, "kernel_shape", D(3, 3), 2);
  kiln_edit_set_ints(b.n, "pads", D(1, 1, 1, 1), 4);
  bc_run(&b, "AveragePool [1,64,56,56] k3 s1 p1", 64 * 56 * 56 * 4, 3, 21);
  bc_begin(&b, 13, "GlobalAveragePool", 1);
  bc_f32(&b, 0, 4, D(1, 512, 7, 7));
  bc_run(&b, "GlobalAveragePool [1,512,7,7]", 512 * 49 * 4, 5, 51);
  bc_begin(&b, 13, "GlobalAveragePool", 1);
  bc_f32(&b, 0, 4, D(1, 1280, 7, 7));
  bc_run(&b, "GlobalAveragePool [1,1280,7,7]", 1280 * 49 * 4, 5, 51);
  bc_begin(&b, 15, "BatchNormalization", 5);
  bc_f32(&b, 0, 4, D(1, 64, 56, 56));
  for (int k = 1; k < 5; k++) bc_f32(&b, k, 1, D(64));
  for (int c = 0; c < 64; c++) ((float *)b.in[4].data)[c] = 1.0f;
  bc_run(&b, "BatchNormalization [1,64,56,56]", 64 * 56 * 56 * 4, 3, 21);
  bc_begin(&b, 13, "ReduceSum", 2);
  bc_f32(&b, 0, 3, D(512, 40, 64));
  bc_i64(&b, 1, 1, D(1), 1);
  ((int64_t *)b.in[1].data)[0] = 1;
  bc_run(&b, "ReduceSum [512,40,64] axis 1 (embedding bag)", 512 * 40 * 64 * 4, 3, 21);
  bc_begin(&b, 13, "ReduceSum", 2);
  bc_f32(&b, 0, 2, D(64, 1000));
  bc_i64(&b, 1, 1, D(1), 1);
  ((int64_t *)b.in[1].data)[0] = 1;
  bc_run(&b, "ReduceSum [64,1000] axis 1", 64 * 1000 * 4, 5, 31);
  bc_begin(&b, 13, "ReduceMax", 1);
  bc_f32(&b, 0, 2, D(64, 1000));
  kiln_edit_set_ints(b.n, "axes", D(1), 1);
  bc_run(&b, "ReduceMax [64,1000] axis 1", 64 * 1000 * 4, 5, 31);
  bc_begin(&b, 13, "ArgMax", 1);
  bc_f32(&b, 0, 2, D(64, 1000));
  kiln_edit_set_int(b.n, "axis", 1);
  bc_run(&b, "ArgMax [64,1000] axis 1", 64 * 8, 5, 31);
  bc_begin(&b, 13, "Gather", 2);
  bc_f32(&b, 0, 2, D(50000, 64));
  bc_i64(&b, 1, 2, D(512, 40), 50000);
  bc_run(&b, "Gather [50000,64] by [512,40] (embedding)", 512 * 40 * 64 * 4, 3, 21);
  bc_begin(&b, 13, "Concat", 4);
  for (int k = 0; k < 4; k++) bc_f32(&b, k, 2, D(512, 64));
  kiln_edit_set_int(b.n, "axis", 1);
  bc_run(&b, "Concat 4x[512,64] axis 1", 4 * 512 * 64 * 4, 5, 31);
  bc_begin(&b, 13, "Transpose", 1);
  bc_f32(&b, 0, 4, D(1, 128, 4, 64));
  kiln_edit_set_ints(b.n, "perm", D(0, 2, 1, 3), 4);
  bc_run(&b, "Transpose [1,128,4,64] perm 0,2,1,3", 128 * 256 * 4, 5, 31);
  bc_begin(&b, 13, "Transpose", 1);
  bc_f32(&b, 0, 4, D(1, 128, 4, 64));
  kiln_edit_set_ints(b.n, "perm", D(0, 2, 3, 1), 4);
  bc_run(&b, "Transpose [1,128,4,64] perm 0,2,3,1", 128 * 256 * 4, 5, 31);
  bc_begin(&b, 13, "Tile", 2);
  bc_f32(&b, 0, 3, D(1, 128, 256));
  bc_i64(&b, 1, 1, D(3), 1);
  ((int64_t *)b.in[1].data)[0] = 8, ((int64_t *)b.in[1].data)[1] = 1, ((int64_t *)b.in[1].data)[2] = 1;
  bc_run(&b, "Tile [1,128,256] x [8,1,1]", 8 * 128 * 256 * 4, 5, 31);
  bc_begin(&b, 13, "Transpose", 1);
  bc_f32(&b, 0, 2, D(1024, 1024));
  bc_run(&b, "Transpose [1024,1024]", 1024 * 1024 * 4, 3, 21);
  return 0;
}
