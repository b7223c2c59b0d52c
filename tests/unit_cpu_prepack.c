/* tests/unit_cpu_prepack: Conv weights packed once (cpu_fallback/prepack.c,
 * sgemm.c kiln_sgemm_wide_pack_a / kiln_sgemm_wide_pa, conv.c).
 *
 * 1. The wide GEMM from a pre-packed A equals the wide GEMM packing A per
 *    call, bit for bit, on awkward sizes (M not a multiple of 12, M past one
 *    MC block, K tails past KC, N tails, lda > K), with the scalar twin of
 *    the micro-kernel and, where AVX-512F is usable, the AVX-512 one.
 * 2. The Conv kernel run on a node with a pack (kiln_cpu_conv_prepack on a
 *    one-node graph) equals the same node run with no pack, bit for bit:
 *    general, pointwise, grouped and 1-D/3-D shapes, with bias; and under
 *    the base setting (KILN_CPU_ISA=base forced) a pack made for the wide
 *    GEMM is not read (the result equals base without a pack).
 * 3. The same for B packed once (kiln_sgemm_wide_pack_b / kiln_sgemm_wide_pb,
 *    kiln_cpu_gemm_prepack): the GEMM on awkward sizes (N past one NC
 *    block, beta), and MatMul / Gemm nodes run with and without the pack
 *    (a Gemm with alpha 0.5 packs per call: the pack made, not read).
 * Run at 1 and 2 threads (the pool is held, so the tiles are pool tasks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/prepack.h"
#include "cpu_fallback/sgemm.h"
#include "ir/alloc.h"
#include "reference/ops.h"

static int passed, failed;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (cond)                                     \
      passed++;                                   \
    else {                                        \
      failed++;                                   \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

static uint32_t rng = 4242;
static float frand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static float *rand_buf(int64_t n) {
  float *p = malloc((size_t)n * sizeof *p);
  for (int64_t i = 0; i < n; i++) p[i] = frand();
  return p;
}

/* ---- 1. the GEMM ---- */

static void gemm_case(kiln_sgemm_micro_fn micro, const char *mname, int64_t M, int64_t N, int64_t K, int64_t lda) {
  float *A = rand_buf(M * lda), *B = rand_buf(K * N), *C1 = malloc((size_t)(M * N) * sizeof(float)),
        *C2 = malloc((size_t)(M * N) * sizeof(float));
  int64_t np = kiln_sgemm_wide_pack_a_floats(M, K);
  float *pk = malloc((size_t)np * sizeof(float));
  for (int64_t i = 0; i < M * N; i++) C1[i] = C2[i] = frand();
  kiln_sgemm_wide_pack_a(A, lda, M, K, pk);
  float beta = (M + N) % 2 ? 0.0f : 0.5f;
  kiln_status s1 = kiln_sgemm_wide(micro, false, false, M, N, K, 1.0f, A, lda, B, N, beta, C1, N);
  kiln_status s2 = kiln_sgemm_wide_pa(micro, M, N, K, pk, B, N, beta, C2, N);
  CHECK(!s1 && !s2 && !memcmp(C1, C2, (size_t)(M * N) * sizeof(float)),
        "wide GEMM (%s) M %lld N %lld K %lld lda %lld: packed A differs", mname, (long long)M, (long long)N,
        (long long)K, (long long)lda);
  free(A);
  free(B);
  free(C1);
  free(C2);
  free(pk);
}

static void test_gemm(void) {
  static const int64_t Ms[] = {1, 5, 12, 13, 25, 192, 205}, Ns[] = {1, 31, 33, 70}, Ks[] = {1, 7, 256, 257, 600};
  for (int v = 0; v < 2; v++) {
    kiln_sgemm_micro_fn micro = v ? kiln_sgemm_micro_wide_avx512 : kiln_sgemm_micro_wide_base;
    if (v && !kiln_la_cpu_has_avx512()) {
      printf("unit_cpu_prepack: AVX-512F not usable: the scalar twin only\n");
      continue;
    }
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
      for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
        for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
          gemm_case(micro, v ? "avx512" : "base", Ms[a], Ns[b], Ks[c], Ks[c] + (int64_t)(a % 2) * 3);
  }
}

/* The wide GEMM from a pre-packed B equals the wide GEMM packing B per
 * call, bit for bit (beta 0 and not). */
static void gemm_case_b(kiln_sgemm_micro_fn micro, const char *mname, int64_t M, int64_t N, int64_t K) {
  int64_t lda = K + 1;
  float *A = rand_buf(M * lda), *B = rand_buf(K * N), *C1 = malloc((size_t)(M * N) * sizeof(float)),
        *C2 = malloc((size_t)(M * N) * sizeof(float));
  int64_t np = kiln_sgemm_wide_pack_b_floats(K, N);
  float *pk = malloc((size_t)np * sizeof(float));
  for (int64_t i = 0; i < M * N; i++) C1[i] = C2[i] = frand();
  kiln_sgemm_wide_pack_b(B, N, K, N, pk);
  float beta = (M + K) % 2 ? 0.0f : 0.5f;
  kiln_status s1 = kiln_sgemm_wide(micro, false, false, M, N, K, 1.0f, A, lda, B, N, beta, C1, N);
  kiln_status s2 = kiln_sgemm_wide_pb(micro, M, N, K, A, lda, NULL, pk, beta, C2, N);
  CHECK(!s1 && !s2 && !memcmp(C1, C2, (size_t)(M * N) * sizeof(float)),
        "wide GEMM (%s) M %lld N %lld K %lld: packed B differs", mname, (long long)M, (long long)N, (long long)K);
  free(A);
  free(B);
  free(C1);
  free(C2);
  free(pk);
}

static void test_gemm_b(void) {
  /* N past one NC block (2048) and N tails; K tails past KC (256) */
  static const int64_t Ms[] = {1, 13, 64, 205}, Ns[] = {1, 31, 33, 2100}, Ks[] = {1, 7, 257, 600};
  for (int v = 0; v < 2; v++) {
    kiln_sgemm_micro_fn micro = v ? kiln_sgemm_micro_wide_avx512 : kiln_sgemm_micro_wide_base;
    if (v && !kiln_la_cpu_has_avx512()) continue;
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
      for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
        for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
          gemm_case_b(micro, v ? "avx512" : "base", Ms[a], Ns[b], Ks[c]);
  }
}

/* MatMul and Gemm nodes whose B is a constant: the kernel run with the
 * plan's B pack (kiln_cpu_gemm_prepack) equals the run without, bit for
 * bit; the pack is read (spoiling it changes the result); freed, it is no
 * longer found; under the base setting it is not read. */
static kiln_status run_node(const kiln_graph *g, const kiln_tensor *const *in, int n_in, kiln_tensor *y) {
  const kiln_node *n = &g->nodes[0];
  const kiln_cpu_kernel_def *k = kiln_cpu_kernel_find("", n->op_type);
  bool used = true, declined = false;
  memset(y, 0, sizeof *y);
  kiln_op_call c = {g, n, 13, n_in, in, 1, y, &used};
  kiln_status s = k ? k->run(&c, NULL, &declined) : KILN_E_UNSUPPORTED_OP;
  return s ? s : declined ? KILN_E_UNSUPPORTED_OP : KILN_OK;
}

static void gemm_node_case(const char *op, int64_t M, int64_t K, int64_t N, bool with_c, float alpha) {
  int64_t ad[2] = {M, K}, bd[2] = {K, N}, cd[1] = {N};
  kiln_tensor a = {0}, b = {0}, cc = {0};
  kiln_tensor_alloc(&a, KILN_F32, 2, ad);
  kiln_tensor_alloc(&b, KILN_F32, 2, bd);
  kiln_tensor_alloc(&cc, KILN_F32, 1, cd);
  for (int64_t i = 0; i < a.numel; i++) ((float *)a.data)[i] = frand();
  for (int64_t i = 0; i < b.numel; i++) ((float *)b.data)[i] = frand();
  for (int64_t i = 0; i < cc.numel; i++) ((float *)cc.data)[i] = frand();
  kiln_attr at[1];
  memset(at, 0, sizeof at);
  at[0] = (kiln_attr){.name = (char *)"alpha", .type = KILN_ATTR_FLOAT, .f = alpha};
  bool gemm = !strcmp(op, "Gemm");
  int n_in = gemm && with_c ? 3 : 2, ins[3] = {0, 1, 2}, outs[1] = {3};
  kiln_node node = {(char *)"g0", (char *)op, (char *)"", 13, n_in, 1, gemm ? 1 : 0, ins, outs, gemm ? at : NULL};
  kiln_value vals[4];
  memset(vals, 0, sizeof vals);
  for (int i = 0; i < 4; i++) vals[i].producer = -1;
  vals[1].init = &b;
  vals[3].producer = 0;
  kiln_graph g;
  memset(&g, 0, sizeof g);
  g.n_values = 4;
  g.values = vals;
  g.n_nodes = 1;
  g.nodes = &node;
  const kiln_tensor *in[3] = {&a, &b, &cc};
  char what[96];
  snprintf(what, sizeof what, "%s %lldx%lldx%lld%s alpha %g", op, (long long)M, (long long)K, (long long)N,
           n_in > 2 ? " +C" : "", alpha);
  kiln_tensor y0, y1, y2, y3;
  kiln_status s0 = run_node(&g, in, n_in, &y0); /* no pack */
  kiln_cpu_gemm_packs *pk = NULL;
  size_t bytes = 0;
  kiln_status sp = kiln_cpu_gemm_prepack(&g, &pk, &bytes);
  CHECK(!s0 && !sp, "%s: run %d, prepack %d", what, (int)s0, (int)sp);
  bool reader = kiln_sgemm_pack_reader() != NULL;
  CHECK(reader == (pk != NULL), "%s: a pack made (%d) where the wide GEMM reads packs (%d)", what, pk != NULL, reader);
  const float *q = kiln_cpu_gemm_pack_find(b.data, K, N, N);
  if (pk)
    CHECK(q && bytes == (size_t)kiln_sgemm_wide_pack_b_floats(K, N) * sizeof(float), "%s: pack of %zu bytes", what,
          bytes);
  kiln_status s1 = run_node(&g, in, n_in, &y1); /* with the pack */
  CHECK(!s1 && y0.numel == y1.numel && !memcmp(y0.data, y1.data, (size_t)y0.numel * sizeof(float)),
        "%s: packed and unpacked B differ", what);
  if (q) { /* the pack is what the kernel reads (alpha 1; another alpha: the per-call packing) */
    float *d = (float *)q, keep = d[0];
    d[0] = 1e30f;
    kiln_tensor yz;
    kiln_status sz = run_node(&g, in, n_in, &yz);
    bool differs = memcmp(y0.data, yz.data, (size_t)y0.numel * sizeof(float)) != 0;
    CHECK(!sz && differs == (alpha == 1.0f), "%s: the pack was %sread", what, differs ? "" : "not ");
    d[0] = keep;
    kiln_tensor_release(&yz);
  }
  kiln_la_force_isa(KILN_VM_ISA_BASE);
  kiln_status s2 = run_node(&g, in, n_in, &y2);
  kiln_cpu_gemm_packs_free(pk);
  CHECK(!kiln_cpu_gemm_pack_find(b.data, K, N, N), "%s: pack still registered after free", what);
  kiln_status s3 = run_node(&g, in, n_in, &y3);
  kiln_la_force_isa(KILN_VM_NISA);
  CHECK(!s2 && !s3 && !memcmp(y2.data, y3.data, (size_t)y2.numel * sizeof(float)),
        "%s: base setting with a pack made differs from base without", what);
  kiln_tensor_release(&y0);
  kiln_tensor_release(&y1);
  kiln_tensor_release(&y2);
  kiln_tensor_release(&y3);
  kiln_tensor_release(&a);
  kiln_tensor_release(&b);
  kiln_tensor_release(&cc);
}

static void test_gemm_nodes(void) {
  gemm_node_case("MatMul", 64, 300, 70, false, 1.0f);
  gemm_node_case("MatMul", 5, 33, 2100, false, 1.0f);
  gemm_node_case("Gemm", 64, 257, 45, true, 1.0f);
  gemm_node_case("Gemm", 13, 16, 31, false, 0.5f);
}

/* ---- 2. the Conv kernel ---- */

typedef struct conv_case {
  const char *name;
  int nsp;
  int64_t N, C, M, G;
  int64_t in[3], k[3], st, pad; /* stride and pad on every spatial dim */
} conv_case;

/* Runs the kernel on node n of g (X, W = g's initializer, B) into y. */
static kiln_status run_conv(const kiln_graph *g, const kiln_tensor *x, const kiln_tensor *w, const kiln_tensor *b,
                            kiln_tensor *y) {
  const kiln_cpu_kernel_def *k = kiln_cpu_kernel_find("", "Conv");
  bool used = true, declined = false;
  const kiln_tensor *in[3] = {x, w, b};
  memset(y, 0, sizeof *y);
  kiln_op_call c = {g, &g->nodes[0], 11, 3, in, 1, y, &used};
  kiln_status s = k->run(&c, NULL, &declined);
  return s ? s : declined ? KILN_E_UNSUPPORTED_OP : KILN_OK;
}

static void conv_case_run(const conv_case *cc) {
  int nsp = cc->nsp, r = nsp + 2;
  int64_t xd[5] = {cc->N, cc->C}, wd[5] = {cc->M, cc->C / cc->G}, bd[1] = {cc->M};
  int64_t ks[3], st[3], pads[6];
  for (int i = 0; i < nsp; i++) {
    xd[2 + i] = cc->in[i];
    wd[2 + i] = cc->k[i];
    ks[i] = cc->k[i];
    st[i] = cc->st;
    pads[i] = pads[i + nsp] = cc->pad;
  }
  kiln_tensor x = {0}, w = {0}, b = {0};
  kiln_tensor_alloc(&x, KILN_F32, r, xd);
  kiln_tensor_alloc(&w, KILN_F32, r, wd);
  kiln_tensor_alloc(&b, KILN_F32, 1, bd);
  for (int64_t i = 0; i < x.numel; i++) ((float *)x.data)[i] = frand();
  for (int64_t i = 0; i < w.numel; i++) ((float *)w.data)[i] = frand();
  for (int64_t i = 0; i < b.numel; i++) ((float *)b.data)[i] = frand();
  /* a one-node graph: values x, w (initializer), b, y */
  kiln_attr at[4];
  memset(at, 0, sizeof at);
  at[0] = (kiln_attr){.name = (char *)"group", .type = KILN_ATTR_INT, .i = cc->G};
  at[1] = (kiln_attr){.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = (size_t)nsp, .ints = ks};
  at[2] = (kiln_attr){.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = (size_t)nsp, .ints = st};
  at[3] = (kiln_attr){.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 2 * (size_t)nsp, .ints = pads};
  int ins[3] = {0, 1, 2}, outs[1] = {3};
  kiln_node node = {(char *)"conv0", (char *)"Conv", (char *)"", 11, 3, 1, 4, ins, outs, at};
  kiln_value vals[4];
  memset(vals, 0, sizeof vals);
  for (int i = 0; i < 4; i++) vals[i].producer = -1;
  vals[1].init = &w;
  vals[3].producer = 0;
  kiln_graph g;
  memset(&g, 0, sizeof g);
  g.n_values = 4;
  g.values = vals;
  g.n_nodes = 1;
  g.nodes = &node;

  kiln_tensor y0, y1, y2, y3;
  kiln_status s0 = run_conv(&g, &x, &w, &b, &y0); /* no pack */
  kiln_cpu_conv_packs *pk = NULL;
  size_t bytes = 0;
  kiln_status sp = kiln_cpu_conv_prepack(&g, &pk, &bytes);
  CHECK(!s0 && !sp, "%s: run %d, prepack %d", cc->name, (int)s0, (int)sp);
  bool reader = kiln_sgemm_pack_reader() != NULL;
  CHECK(reader == (pk != NULL), "%s: a pack made (%d) where the wide GEMM reads packs (%d)", cc->name, pk != NULL,
        reader);
  if (pk) {
    int64_t Mg = cc->M / cc->G, Kc = w.numel / cc->M;
    size_t want = (size_t)(kiln_sgemm_wide_pack_a_floats(Mg, Kc) * cc->G) * sizeof(float);
    CHECK(bytes == want && kiln_cpu_conv_pack_find(&node), "%s: pack of %zu bytes, want %zu", cc->name, bytes, want);
  }
  kiln_status s1 = run_conv(&g, &x, &w, &b, &y1); /* with the pack */
  CHECK(!s1 && y0.numel == y1.numel && !memcmp(y0.data, y1.data, (size_t)y0.numel * sizeof(float)),
        "%s: packed and unpacked Conv differ", cc->name);
  if (pk) { /* the pack is what the kernel reads: zeroing it changes the result */
    const kiln_cpu_conv_pack *q = kiln_cpu_conv_pack_find(&node);
    float keep = q->data[0];
    q->data[0] = 1e30f;
    kiln_tensor yz;
    kiln_status sz = run_conv(&g, &x, &w, &b, &yz);
    CHECK(!sz && memcmp(y0.data, yz.data, (size_t)y0.numel * sizeof(float)), "%s: the pack was not read",
          cc->name);
    q->data[0] = keep;
    kiln_tensor_release(&yz);
  }
  /* the base setting: the pack is not read; equals base without one */
  kiln_la_force_isa(KILN_VM_ISA_BASE);
  kiln_status s2 = run_conv(&g, &x, &w, &b, &y2);
  kiln_cpu_conv_packs_free(pk);
  CHECK(!kiln_cpu_conv_pack_find(&node), "%s: pack still registered after free", cc->name);
  kiln_status s3 = run_conv(&g, &x, &w, &b, &y3);
  kiln_la_force_isa(KILN_VM_NISA);
  CHECK(!s2 && !s3 && !memcmp(y2.data, y3.data, (size_t)y2.numel * sizeof(float)),
        "%s: base setting with a pack made differs from base without", cc->name);
  kiln_tensor_release(&y0);
  kiln_tensor_release(&y1);
  kiln_tensor_release(&y2);
  kiln_tensor_release(&y3);
  kiln_tensor_release(&x);
  kiln_tensor_release(&w);
  kiln_tensor_release(&b);
}

static void test_conv(void) {
  static const conv_case cases[] = {
      {"2-D 3x3 pad 1, M 13 (not a multiple of 12)", 2, 2, 5, 13, 1, {9, 11}, {3, 3}, 1, 1},
      {"2-D 3x3 K tail (C 31: K 279), M 40, stride 2", 2, 1, 31, 40, 1, {17, 15}, {3, 3}, 2, 1},
      {"2-D 3x3 K 576 (KC slices 256 + 320), M 64, 28x28 (pool tiles)", 2, 1, 64, 64, 1, {28, 28}, {3, 3}, 1, 1},
      {"2-D 3x3 K 639 (KC slices 256, 256, 127), M 24, 10x13", 2, 1, 71, 24, 1, {10, 13}, {3, 3}, 1, 1},
      {"2-D M 200 (past one MC block) 1x1 pointwise", 2, 1, 24, 200, 1, {7, 9}, {1, 1}, 1, 0},
      {"2-D group 2, M 26, 3x3", 2, 2, 6, 26, 2, {8, 7}, {3, 3}, 1, 1},
      {"2-D group 4 pointwise, Mg 5", 2, 1, 16, 20, 4, {6, 6}, {1, 1}, 1, 0},
      {"2-D group 3, Cg 2 (not depthwise), 5x5", 2, 1, 6, 9, 3, {12, 10}, {5, 5}, 2, 2},
      {"1-D k3 stride 2, M 17", 1, 2, 7, 17, 1, {40}, {3}, 2, 1},
      {"3-D 2x2x2, M 14", 3, 1, 3, 14, 1, {4, 5, 6}, {2, 2, 2}, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) conv_case_run(&cases[i]);
}

int main(void) {
  int held = kiln_pool_acquire() == 0; /* as a plan does: the tiles become pool tasks */
  printf("unit_cpu_prepack: %d thread(s), wide GEMM packs %s\n", kiln_pool_threads(),
         kiln_sgemm_pack_reader() ? "read (AVX-512)" : "not read here (base setting, OpenBLAS or no AVX-512F)");
  test_gemm();
  test_gemm_b();
  test_conv();
  test_gemm_nodes();
  if (held) kiln_pool_release();
  printf("unit_cpu_prepack: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
