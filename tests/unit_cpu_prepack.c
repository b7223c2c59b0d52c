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
 *    (a Gemm with alpha 0.5 packs per call: the pack made, not read). A
 *    scale and a bias row applied in the store (kiln_sgemm_wide_pb_cb,
 *    kiln_sgemm_wide_cb) equal the GEMM then the passes (test_gemm_cb).
 * 4. The direct convolution (conv.c, stride 1, no im2col): its AVX-512
 *    kernel equals the GEMM path (kiln_conv_direct_force 0) and its scalar
 *    twin (force 2) bit for bit, with and without a pack, bias, a clamp
 *    epilogue and a counted apply epilogue, on awkward sizes (C_in 1, 3,
 *    17; C_out not a multiple of 12 or 16; row tails; asymmetric pads,
 *    dilation, 1-D, 5x5, 1x3, groups, batch 2; row tiles where the output
 *    row is a multiple of 16 wide); where it cannot run (no
 *    AVX-512F, base setting) the twin is within tolerance of the GEMM path.
 *    Without a pack the kernel reads W's rows in place: that kernel, its
 *    twin and the packed kernel bit-equal on every row count and column
 *    tail (test_direct_a_kernel). Pointwise convs through the direct
 *    kernel (the input read in place) the same way; strided 1x1 convs
 *    (sampled rows, then that path); channel tiles (output rows a multiple
 *    of 14: 14 pixels x 32 channels, W's transposed pack; also that pack
 *    alone, for a W over the A pack's limit), and their kernel against its
 *    twin (test_ct_kernel).
 * 5. Pointwise convs on small planes with lanes over output channels
 *    (pwt.h): the tile kernels (AVX-512, AVX2) bit-equal to their twin on
 *    every pixel and channel tail and K in 1-3 KC slices; the Conv kernel
 *    through that path (forced, its twin, the default rule) bit-equal to
 *    the GEMM / direct path it replaces, with each epilogue kind.
 * Run at 1 and 2 threads (the pool is held, so the tiles are pool tasks). */
#define _GNU_SOURCE /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/prepack.h"
#include "cpu_fallback/pwt.h"
#include "cpu_fallback/sgemm.h"
#include "ir/alloc.h"
#include "reference/ops.h"

static int passed, failed;
#include "tests/check.h"

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

/* g: the one node `node` over values 0..2 (inputs; value 1 holds the
 * initializer w) and 3 (its output). */
static void one_node_graph(kiln_graph *g, kiln_value vals[4], kiln_node *node, kiln_tensor *w) {
  memset(vals, 0, 4 * sizeof *vals);
  for (int i = 0; i < 4; i++) vals[i].producer = -1;
  vals[1].init = w;
  vals[3].producer = 0;
  memset(g, 0, sizeof *g);
  g->n_values = 4;
  g->values = vals;
  g->n_nodes = 1;
  g->nodes = node;
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

/* A scale and a bias row applied in the store (kiln_sgemm_wide_pb_cb,
 * kiln_sgemm_wide_cb: MatMul epilogues y * s and y + bias) equal the GEMM
 * followed by the passes y = y * s, y = y + bias[c], bit for bit: B packed
 * ahead or per call (also transposed, as the attention scores' K), A in
 * place (lda not a multiple of 512, the direct path) and from a pack, M and
 * N tails, K in 1-3 KC slices, with the twin and, where usable, the
 * AVX-512 kernel; each row's columns past N (ldc wider than N) untouched. */
static void gemm_case_cb(kiln_sgemm_micro_fn micro, const char *mname, int64_t M, int64_t N, int64_t K, int form) {
  /* form: 0 B packed, A in place; 1 B packed, A packed; 2 B per call, transposed */
  int64_t lda = K + 3, ldc = N + 5, ldb = form == 2 ? K + 1 : N;
  float *A = rand_buf(M * lda), *B = rand_buf(form == 2 ? N * ldb : K * N), *bias = rand_buf(N);
  float *C1 = malloc((size_t)(M * ldc) * sizeof(float)), *C2 = malloc((size_t)(M * ldc) * sizeof(float));
  float *pk = malloc((size_t)kiln_sgemm_wide_pack_b_floats(K, N) * sizeof(float));
  float *ap = form == 1 ? malloc((size_t)kiln_sgemm_wide_pack_a_floats(M, K) * sizeof(float)) : NULL;
  bias[0] = -0.0f;
  if (form < 2) kiln_sgemm_wide_pack_b(B, N, K, N, pk);
  if (ap) kiln_sgemm_wide_pack_a(A, lda, M, K, ap);
  static const float scales[] = {1.0f, 0.125f, -0.3f};
  for (int v = 0; v < 6; v++) {
    float sc = scales[v % 3];
    const float *cb = v >= 3 ? bias : NULL;
    if (sc == 1.0f && !cb) continue;
    for (int64_t i = 0; i < M * ldc; i++) C1[i] = C2[i] = frand();
    kiln_status s1 = form == 2 ? kiln_sgemm_wide(micro, false, true, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C1, ldc)
                               : kiln_sgemm_wide_pb(micro, M, N, K, A, lda, ap, pk, 0.0f, C1, ldc);
    for (int64_t r = 0; r < M; r++)
      for (int64_t c = 0; c < N; c++) {
        float y = C1[r * ldc + c];
        if (sc != 1.0f) y = y * sc;
        if (cb) y = y + cb[c];
        C1[r * ldc + c] = y;
      }
    kiln_status s2 = form == 2 ? kiln_sgemm_wide_cb(micro, false, true, M, N, K, A, lda, B, ldb, C2, ldc, cb, sc)
                               : kiln_sgemm_wide_pb_cb(micro, M, N, K, A, lda, ap, pk, C2, ldc, cb, sc);
    CHECK(!s1 && !s2 && !memcmp(C1, C2, (size_t)(M * ldc) * sizeof(float)),
          "wide GEMM * %g%s (%s, %s) M %lld N %lld K %lld: differs from the GEMM then the passes", sc,
          cb ? " + bias row" : "", mname, form == 0 ? "A in place" : form == 1 ? "A packed" : "B transposed",
          (long long)M, (long long)N, (long long)K);
  }
  free(A), free(B), free(bias), free(C1), free(C2), free(pk), free(ap);
}

static void test_gemm_cb(void) {
  static const int64_t Ms[] = {5, 12, 13, 128, 205}, Ns[] = {1, 31, 33, 256}, Ks[] = {1, 64, 257, 600};
  for (int v = 0; v < 2; v++) {
    kiln_sgemm_micro_fn micro = v ? kiln_sgemm_micro_wide_avx512 : kiln_sgemm_micro_wide_base;
    if (v && !kiln_la_cpu_has_avx512()) continue;
    for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++)
      for (size_t b = 0; b < sizeof Ns / sizeof *Ns; b++)
        for (size_t c = 0; c < sizeof Ks / sizeof *Ks; c++)
          for (int form = 0; form < 3; form++) gemm_case_cb(micro, v ? "avx512" : "base", Ms[a], Ns[b], Ks[c], form);
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
  kiln_node node = {(char *)"g0", (char *)op, (char *)"", 13, n_in, 1, gemm ? 1 : 0, ins, outs, gemm ? at : NULL, -1};
  kiln_value vals[4];
  kiln_graph g;
  one_node_graph(&g, vals, &node, &b);
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
static kiln_status run_conv_ep(const kiln_graph *g, const kiln_tensor *x, const kiln_tensor *w, const kiln_tensor *b,
                               kiln_tensor *y, const kiln_cpu_epilogue *ep) {
  const kiln_cpu_kernel_def *k = kiln_cpu_kernel_find("", "Conv");
  bool used = true, declined = false;
  const kiln_tensor *in[3] = {x, w, b};
  memset(y, 0, sizeof *y);
  kiln_op_call c = {g, &g->nodes[0], 11, 3, in, 1, y, &used};
  kiln_status s = k->run(&c, ep, &declined);
  return s ? s : declined ? KILN_E_UNSUPPORTED_OP : KILN_OK;
}

static kiln_status run_conv(const kiln_graph *g, const kiln_tensor *x, const kiln_tensor *w, const kiln_tensor *b,
                            kiln_tensor *y) {
  return run_conv_ep(g, x, w, b, y, NULL);
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
  kiln_node node = {(char *)"conv0", (char *)"Conv", (char *)"", 11, 3, 1, 4, ins, outs, at, -1};
  kiln_value vals[4];
  kiln_graph g;
  one_node_graph(&g, vals, &node, &w);

  kiln_tensor y0, y1, y2, y3;
  kiln_status s0 = run_conv(&g, &x, &w, &b, &y0); /* no pack */
  kiln_cpu_conv_packs *pk = NULL;
  size_t bytes = 0;
  kiln_status sp = kiln_cpu_conv_prepack(&g, NULL, NULL, &pk, &bytes);
  CHECK(!s0 && !sp, "%s: run %d, prepack %d", cc->name, (int)s0, (int)sp);
  bool reader = kiln_sgemm_pack_reader() != NULL;
  bool pw = cc->G == 1 && w.numel / cc->M == cc->C && cc->st == 1 && cc->pad == 0;
  bool treader = kiln_pwt_tile() != NULL && pw; /* W^T (pwt.h): with the A pack, or alone under AVX2 only */
  CHECK((reader || treader) == (pk != NULL), "%s: a pack made (%d) where the wide GEMM reads packs (%d) or the tiles (%d)",
        cc->name, pk != NULL, reader, treader);
  if (pk) {
    int64_t Mg = cc->M / cc->G, Kc = w.numel / cc->M, ksp = Kc / (w.dims[1]);
    /* the channel tiles' transposed pack too, where the A pack is: kernels wider than 1x1 on at most 2 spatial
       dims, K >= 288 */
    bool ct = reader && w.rank <= 4 && ksp > 1 && Kc >= KILN_CONV_CT_MIN_K;
    size_t want = reader ? (size_t)((kiln_sgemm_wide_pack_a_floats(Mg, Kc) + (ct ? kiln_conv_ct_pack_floats(Mg, Kc) : 0)) *
                                    cc->G) * sizeof(float)
                         : 0;
    if (treader) /* a 1x1 with group 1: also W in the lanes-over-channels layout (pwt.h) */
      want += (size_t)kiln_pwt_pack_floats(Mg, Kc) * sizeof(float);
    const kiln_cpu_conv_pack *q = kiln_cpu_conv_pack_find(&node);
    CHECK(bytes == want && q && (q->ctdata != NULL) == ct, "%s: pack of %zu bytes, want %zu (transposed %d)",
          cc->name, bytes, want, ct);
  }
  kiln_status s1 = run_conv(&g, &x, &w, &b, &y1); /* with the pack */
  if (treader && !reader) { /* AVX2 without AVX-512F: the tiles against OpenBLAS, within tolerance */
    int64_t bad = s1 || y0.numel != y1.numel;
    for (int64_t i = 0; !bad && i < y0.numel; i++) {
      float a = ((float *)y0.data)[i], t = ((float *)y1.data)[i];
      bad += !(fabsf(a - t) <= 1e-4f * (1.0f + fabsf(a)) * (float)cc->C);
    }
    CHECK(!bad, "%s: packed (the tiles) and unpacked (OpenBLAS) Conv differ", cc->name);
  } else
    CHECK(!s1 && y0.numel == y1.numel && !memcmp(y0.data, y1.data, (size_t)y0.numel * sizeof(float)),
          "%s: packed and unpacked Conv differ", cc->name);
  if (pk) { /* the packs are what the kernels read: changing them changes the result */
    const kiln_cpu_conv_pack *q = kiln_cpu_conv_pack_find(&node);
    for (int t = q->data ? 0 : 1; t < (q->tdata ? 2 : 1); t++) { /* the A pack (lanes over channels off), W^T (on) */
      float *d = t ? q->tdata : q->data, keep = d[0];
      float *c = t ? NULL : q->ctdata, ckeep = c ? c[0] : 0.0f; /* the channel tiles read theirs instead */
      d[0] = 1e30f;
      if (c) c[0] = 1e30f;
      kiln_conv_pwt_force(t);
      kiln_tensor yz;
      kiln_status sz = run_conv(&g, &x, &w, &b, &yz);
      CHECK(!sz && memcmp(y0.data, yz.data, (size_t)y0.numel * sizeof(float)), "%s: the pack (%d) was not read",
            cc->name, t);
      d[0] = keep;
      if (c) c[0] = ckeep;
      kiln_tensor_release(&yz);
    }
    kiln_conv_pwt_force(-1);
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


/* ---- 4. the direct convolution ---- */

typedef struct direct_case {
  const char *name;
  int nsp;
  int64_t N, C, M, G, H, W, KH, KW, pads[4], dil; /* pads: top, left, bottom, right (1-D: left, right) */
  int64_t sh, sw;                                  /* strides (0: 1) */
} direct_case;

typedef struct count_ep {
  int64_t n, calls;
  int64_t *seen; /* per output element: times apply saw it */
} count_ep;

static void count_apply(void *ctx, int64_t start, int64_t n, float *y) {
  count_ep *c = ctx;
  c->calls++;
  for (int64_t i = 0; i < n; i++) {
    if (start + i >= 0 && start + i < c->n) c->seen[start + i]++;
    y[i] = y[i] * 0.5f + 0.25f;
  }
}

static void direct_case_run(const direct_case *dc) {
  int nsp = dc->nsp, r = nsp + 2;
  int64_t xd[4] = {dc->N, dc->C, nsp == 2 ? dc->H : dc->W, dc->W}, wd[4] = {dc->M, dc->C / dc->G},
          bd[1] = {dc->M};
  int64_t ks[2], dl[2] = {dc->dil, dc->dil}, pads[4], st[2] = {dc->sh ? dc->sh : 1, dc->sw ? dc->sw : 1};
  if (nsp == 2) {
    wd[2] = ks[0] = dc->KH, wd[3] = ks[1] = dc->KW;
    for (int i = 0; i < 4; i++) pads[i] = dc->pads[i];
  } else {
    wd[2] = ks[0] = dc->KW;
    pads[0] = dc->pads[1], pads[1] = dc->pads[3];
    st[0] = st[1];
  }
  kiln_tensor x = {0}, w = {0}, b = {0};
  kiln_tensor_alloc(&x, KILN_F32, r, xd);
  kiln_tensor_alloc(&w, KILN_F32, r, wd);
  kiln_tensor_alloc(&b, KILN_F32, 1, bd);
  for (int64_t i = 0; i < x.numel; i++) ((float *)x.data)[i] = frand();
  for (int64_t i = 0; i < w.numel; i++) ((float *)w.data)[i] = frand();
  for (int64_t i = 0; i < b.numel; i++) ((float *)b.data)[i] = frand();
  kiln_attr at[5];
  memset(at, 0, sizeof at);
  at[4] = (kiln_attr){.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = (size_t)nsp, .ints = st};
  at[0] = (kiln_attr){.name = (char *)"group", .type = KILN_ATTR_INT, .i = dc->G};
  at[1] = (kiln_attr){.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = (size_t)nsp, .ints = ks};
  at[2] = (kiln_attr){.name = (char *)"dilations", .type = KILN_ATTR_INTS, .n = (size_t)nsp, .ints = dl};
  at[3] = (kiln_attr){.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 2 * (size_t)nsp, .ints = pads};
  int ins[3] = {0, 1, 2}, outs[1] = {3};
  kiln_node node = {(char *)"conv0", (char *)"Conv", (char *)"", 11, 3, 1, 5, ins, outs, at, -1};
  kiln_value vals[4];
  kiln_graph g;
  one_node_graph(&g, vals, &node, &w);
  bool avx512 = kiln_conv_direct_micro() != NULL;
  int64_t Kc = w.numel / dc->M;
  for (int packed = 0; packed < 2; packed++) {
    kiln_cpu_conv_packs *pk = NULL;
    if (packed) CHECK(!kiln_cpu_conv_prepack(&g, NULL, NULL, &pk, NULL), "%s: prepack", dc->name);
    for (int e = 0; e < 3; e++) { /* no epilogue, a clamp, a counted apply */
      kiln_tensor y[3];
      count_ep cnt[3];
      kiln_status st[3];
      for (int mode = 0; mode < 3; mode++) {
        kiln_cpu_epilogue ep = {count_apply, &cnt[mode], e == 1, -0.5f, 0.75f, NULL, 0, false, 0.0f, NULL, NULL};
        memset(&cnt[mode], 0, sizeof cnt[mode]);
        kiln_conv_direct_force(mode);
        st[mode] = run_conv_ep(&g, &x, &w, &b, &y[mode], e ? &ep : NULL);
        if (!st[mode] && e == 2) { /* every element passed to apply exactly once */
          cnt[mode].n = y[mode].numel;
          cnt[mode].seen = calloc((size_t)y[mode].numel, sizeof(int64_t));
          kiln_tensor_release(&y[mode]);
          st[mode] = run_conv_ep(&g, &x, &w, &b, &y[mode], &ep);
          int64_t bad = 0;
          for (int64_t i = 0; i < cnt[mode].n; i++) bad += cnt[mode].seen[i] != 1;
          CHECK(!bad, "%s: mode %d: %lld elements not applied exactly once", dc->name, mode, (long long)bad);
          free(cnt[mode].seen);
        }
        if (e == 1) CHECK(cnt[mode].calls == 0, "%s: mode %d: apply called with a clamp", dc->name, mode);
      }
      kiln_conv_direct_force(-1);
      CHECK(!st[0] && !st[1] && !st[2], "%s: run %d %d %d", dc->name, (int)st[0], (int)st[1], (int)st[2]);
      if (st[0] || st[1] || st[2]) continue;
      size_t bytes = (size_t)y[0].numel * sizeof(float);
      if (avx512) { /* mode 1 ran the GEMM path too where the AVX-512 kernel is not usable */
        CHECK(!memcmp(y[1].data, y[2].data, bytes), "%s (pack %d, epilogue %d): direct AVX-512 != its twin",
              dc->name, packed, e);
        CHECK(!memcmp(y[0].data, y[1].data, bytes), "%s (pack %d, epilogue %d): direct != the GEMM path", dc->name,
              packed, e);
      } else { /* the GEMM path is another GEMM here: within tolerance (|x|, |w|, |b| <= 1) */
        float worst = 0;
        for (int64_t i = 0; i < y[0].numel; i++) {
          float d = fabsf(((float *)y[0].data)[i] - ((float *)y[2].data)[i]);
          if (d > worst) worst = d;
        }
        CHECK(worst <= 1e-5f * (float)(Kc + 1), "%s (pack %d, epilogue %d): twin vs GEMM path %g", dc->name, packed,
              e, (double)worst);
      }
      for (int mode = 0; mode < 3; mode++) kiln_tensor_release(&y[mode]);
    }
    kiln_cpu_conv_packs_free(pk);
  }
  kiln_tensor_release(&x);
  kiln_tensor_release(&w);
  kiln_tensor_release(&b);
}

static void test_direct(void) {
  static const direct_case cases[] = {
      {"C 1, M 7, 3x3 pad 1, 5x37", 2, 1, 1, 7, 1, 5, 37, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"C 3, M 32, 3x3 pad 1, 32x32 (small_cnn conv1)", 2, 1, 3, 32, 1, 32, 32, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"C 17, M 20, 3x3 asymmetric pads, batch 2", 2, 2, 17, 20, 1, 9, 11, 3, 3, {0, 2, 1, 0}, 1, 1, 1},
      {"C 32, M 64, 3x3 pad 1, 16x16 (K 288, one slice)", 2, 1, 32, 64, 1, 16, 16, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"C 64, M 13, 3x3, 7x7 (K 576: slices 256 + 320), no pads", 2, 2, 64, 13, 1, 7, 7, 3, 3, {0, 0, 0, 0}, 1, 1, 1},
      {"C 71, M 24, 3x3 (K 639: 3 slices), 10x13", 2, 1, 71, 24, 1, 10, 13, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"C 5, M 17, 5x5 pad 2, dilation 2, 12x40", 2, 1, 5, 17, 1, 12, 40, 5, 5, {2, 2, 2, 2}, 2, 1, 1},
      {"C 6, M 9, 1x3 pad (0,1), 4x70 (row tails)", 2, 2, 6, 9, 1, 4, 70, 1, 3, {0, 1, 0, 1}, 1, 1, 1},
      {"group 2, C 6, M 26, 3x3", 2, 1, 6, 26, 2, 8, 7, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"1-D k3 pad (2, 0), C 17, M 33, width 50", 1, 2, 17, 33, 1, 1, 50, 1, 3, {0, 2, 0, 0}, 1, 1, 1},
      {"C 8, M 12, 3x3 pad 1, 1x1 plane", 2, 1, 8, 12, 1, 1, 1, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"stride 2, C 3, M 32, 3x3 pad 1, 33x30 (odd height)", 2, 2, 3, 32, 1, 33, 30, 3, 3, {1, 1, 1, 1}, 1, 2, 2},
      {"stride 2, C 19, M 14, 3x3 pads (0, 1, 1, 0), 14x14", 2, 1, 19, 14, 1, 14, 14, 3, 3, {0, 1, 1, 0}, 1, 2, 2},
      {"stride 2, 1x1 (strided pointwise), C 17, M 25, 13x16", 2, 1, 17, 25, 1, 13, 16, 1, 1, {0, 0, 0, 0}, 1, 2, 2},
      {"stride 2, C 3, M 20, 7x7 pad 3, 23x23", 2, 1, 3, 20, 1, 23, 23, 7, 7, {3, 3, 3, 3}, 1, 2, 2},
      {"strides (3, 2), dilation 2, C 4, M 13, 3x3 pad 2, 20x21", 2, 2, 4, 13, 1, 20, 21, 3, 3, {2, 2, 2, 2}, 2, 3, 2},
      {"1-D stride 2, C 5, M 7, k 4, width 31", 1, 1, 5, 7, 1, 1, 31, 1, 4, {0, 1, 0, 2}, 1, 1, 2},
      {"C 32, M 40, 3x3 pad 1, 40x40 (row chunks on the pool)", 2, 1, 32, 40, 1, 40, 40, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      /* row tiles (output rows a multiple of 16): halves from two rows, an odd count of halves, slices of K
         stored and reloaded in Y, chunks on the pool, stride 2, 1-D */
      {"row tiles: C 64, M 20, 3x3 pad 1, 16x16 (K 576: 2 slices in Y)",
       2, 2, 64, 20, 1, 16, 16, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"row tiles: C 5, M 13, 3x3 pad 1, 3x48 (9 halves)", 2, 1, 5, 13, 1, 3, 48, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"row tiles: C 24, M 40, 3x3 pad 1, 48x48 (chunks on the pool)",
       2, 1, 24, 40, 1, 48, 48, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"row tiles: stride 2, C 3, M 28, 3x3 pad 1, 31x64", 2, 1, 3, 28, 1, 31, 64, 3, 3, {1, 1, 1, 1}, 1, 2, 2},
      {"row tiles: 1-D k3 pad (1, 1), C 9, M 14, width 80", 1, 2, 9, 14, 1, 1, 80, 1, 3, {0, 1, 0, 1}, 1, 1, 1},
      /* pointwise through the direct kernel: the input read in place to its last element (column tails masked),
         M tails, KC slices, column blocks, groups, batch 2, 1-D */
      {"pointwise: C 17, M 25, 13x16, batch 2", 2, 2, 17, 25, 1, 13, 16, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      {"pointwise: C 300 (K: 2 slices), M 13, 7x7", 2, 1, 300, 13, 1, 7, 7, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      {"pointwise: C 640 (K: 3 slices), M 20, 5x9", 2, 1, 640, 20, 1, 5, 9, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      {"pointwise: C 600, M 12, 20x20 (blocks of 96 columns)", 2, 1, 600, 12, 1, 20, 20, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      {"pointwise: group 2, C 10, M 14, 9x9", 2, 1, 10, 14, 2, 9, 9, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      {"pointwise: C 16, M 40, 1x1 plane, batch 2", 2, 2, 16, 40, 1, 1, 1, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      {"pointwise: 1-D, C 5, M 7, width 100", 1, 1, 5, 7, 1, 1, 100, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      {"pointwise: C 24, M 30, 48x48 (pool tasks)", 2, 1, 24, 30, 1, 48, 48, 1, 1, {0, 0, 0, 0}, 1, 1, 1},
      /* strided 1x1 (sampled planes in rows of 16, then the pointwise direct path): odd sizes (the last row and
         column sampled), batch 2, groups, strides (1, 3), 1-D, K in 2 slices, pool tasks; pads at the end (the
         padding read: the direct path instead) */
      {"strided pointwise: stride 2, C 19, M 26, 57x57, batch 2", 2, 2, 19, 26, 1, 57, 57, 1, 1, {0, 0, 0, 0}, 1,
       2, 2},
      {"strided pointwise: strides (1, 3), group 2, C 10, M 14, 9x20", 2, 1, 10, 14, 2, 9, 20, 1, 1, {0, 0, 0, 0},
       1, 1, 3},
      {"strided pointwise: 1-D stride 2, C 300 (K: 2 slices), M 13, width 64", 1, 1, 300, 13, 1, 1, 64, 1, 1,
       {0, 0, 0, 0}, 1, 1, 2},
      {"strided pointwise: stride 2, C 24, M 40, 64x64 (pool tasks)", 2, 1, 24, 40, 1, 64, 64, 1, 1, {0, 0, 0, 0},
       1, 2, 2},
      {"strided 1x1 with end pads (padding read: not the sampled path), 8x8", 2, 1, 5, 7, 1, 8, 8, 1, 1,
       {0, 0, 1, 1}, 1, 2, 2},
      /* channel tiles (output rows a multiple of 14, K >= 288, with the pack): a channel block of 8 after 32,
         K in 1-3 slices, stride 2, groups, batch 2, dilation, 1-D, row chunks on the pool; without the pack
         the 12 x 32 tile */
      {"channel tiles: C 32, M 40, 3x3 pad 1, 14x28 (K 288)", 2, 1, 32, 40, 1, 14, 28, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      {"channel tiles: stride 2, C 64, M 20, 3x3 pad 1, 28x28 (K 576: 2 slices)", 2, 2, 64, 20, 1, 28, 28, 3, 3,
       {1, 1, 1, 1}, 1, 2, 2},
      {"channel tiles: group 2, C 80, M 70, 3x3 no pads, 6x16 (K 360)", 2, 1, 80, 70, 2, 6, 16, 3, 3,
       {0, 0, 0, 0}, 1, 1, 1},
      {"channel tiles: C 72, M 33, 3x3 pad 2 dilation 2, 9x42 (K 648: 3 slices)", 2, 1, 72, 33, 1, 9, 42, 3, 3,
       {2, 2, 2, 2}, 2, 1, 1},
      {"channel tiles: 1-D k3 pad (1, 1), C 100, M 45, width 56", 1, 2, 100, 45, 1, 1, 56, 1, 3, {0, 1, 0, 1}, 1, 1,
       1},
      {"channel tiles: C 32, M 64, 3x3 pad 1, 28x28 (row chunks on the pool)", 2, 1, 32, 64, 1, 28, 28, 3, 3,
       {1, 1, 1, 1}, 1, 1, 1},
      /* rows of 7 (two rows a tile; an odd count's last row alone): 7x7 with K in 1 and 3 slices, stride 2 to 7x7,
         an even row count, batch 2 with groups, asymmetric pads, row chunks on the pool */
      {"channel tiles, rows of 7: C 32, M 40, 3x3 pad 1, 7x7 (K 288)", 2, 1, 32, 40, 1, 7, 7, 3, 3, {1, 1, 1, 1}, 1,
       1, 1},
      {"channel tiles, rows of 7: C 72, M 70, 3x3 pad 1, 7x7 (K 648: 3 slices)", 2, 1, 72, 70, 1, 7, 7, 3, 3,
       {1, 1, 1, 1}, 1, 1, 1},
      {"channel tiles, rows of 7: stride 2, C 64, M 33, 3x3 pad 1, 14x14 (K 576)", 2, 1, 64, 33, 1, 14, 14, 3, 3,
       {1, 1, 1, 1}, 1, 2, 2},
      {"channel tiles, rows of 7: group 2, batch 2, C 80, M 40, 3x3 pad 1, 8x7 (K 360)", 2, 2, 80, 40, 2, 8, 7, 3, 3,
       {1, 1, 1, 1}, 1, 1, 1},
      {"channel tiles, rows of 7: C 40, M 24, 3x3 pads (0, 1, 2, 1), 11x7", 2, 1, 40, 24, 1, 11, 7, 3, 3,
       {0, 1, 2, 1}, 1, 1, 1},
      {"channel tiles, rows of 7: C 48, M 16, 3x3 pad 1, 40x7 (40 rows, 20 tiles a task: tile by tile)", 2, 1, 48, 16,
       1, 40, 7, 3, 3, {1, 1, 1, 1}, 1, 1, 1},
      /* row chunks on the pool (2 threads: 4 chunks; 5 rows a chunk rounded up to whole pairs, 6, 6, 6, 1 — without
         the rounding a chunk's odd last row is a tile alone: the same values either way) */
      {"channel tiles, rows of 7: C 256, M 64, 3x3 pad 1, 19x7 (row chunks on the pool)", 2, 1, 256, 64, 1, 19, 7, 3,
       3, {1, 1, 1, 1}, 1, 1, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) direct_case_run(&cases[i]);
  /* a W over the A pack's limit (KILN_CONV_PREPACK=1: 1 MiB; W 1.25 MB) gets the transposed pack alone: the
     channel tiles read it (a last block of 16 channels), the other paths no pack */
  static const direct_case ct_alone = {"channel tiles, transposed pack alone: C 128, M 272, 3x3 pad 1, 7x14",
                                       2, 1, 128, 272, 1, 7, 14, 3, 3, {1, 1, 1, 1}, 1, 1, 1};
  setenv("KILN_CONV_PREPACK", "1", 1);
  direct_case_run(&ct_alone);
  unsetenv("KILN_CONV_PREPACK");
  kiln_la_force_isa(KILN_VM_ISA_BASE); /* the twin against the portable GEMM */
  direct_case_run(&cases[2]);
  direct_case_run(&cases[5]);
  kiln_la_force_isa(KILN_VM_NISA);
}

/* The direct micro-kernel reading A in place (kiln_conv_direct_micro_a_*):
 * AVX-512 (and its form prefetching A's rows) = its twin = the packed
 * kernel on a strip packed from the same rows, bit for bit, on every row count (rows past mr never read: A is
 * allocated to its last element read), column tails, kc 1/5/33/257, odd
 * lda, xhi 16 and a split, beta 0 and 1 (Y reloaded), bias and clamp with
 * NaN and -0 in the input. */
static void test_direct_a_kernel(void) {
  enum { MR = KILN_SGEMM_WIDE_MR, NR = KILN_SGEMM_WIDE_NR };
  static const int64_t kcs[] = {1, 5, 33, 257};
  bool avx512 = kiln_la_cpu_has_avx512();
  int64_t bad = 0, runs = 0;
  for (size_t ki = 0; ki < sizeof kcs / sizeof *kcs; ki++)
    for (int mr = 1; mr <= MR; mr++)
      for (int nr = 1; nr <= NR; nr += nr < 3 || nr > 29 || nr == 15 || nr == 16 ? 1 : 6) {
        int64_t kc = kcs[ki], lda = kc + 3, xhi = (mr + nr) % 2 ? 16 : 21, na = (mr - 1) * lda + kc;
        int64_t nx = kc * 2 + xhi + 16, *off = malloc((size_t)kc * sizeof *off);
        float *A = rand_buf(na), *x = rand_buf(nx), *ap = calloc((size_t)(MR * kc), sizeof(float));
        float bias[MR], y[5][MR * NR + 1];
        for (int64_t k = 0; k < kc; k++) off[k] = (k * 7) % (kc + 1); /* taps revisit the plane, out of order */
        x[0] = NAN, x[nx - 1] = -0.0f;
        for (int r = 0; r < MR; r++) bias[r] = frand();
        for (int64_t k = 0; k < kc; k++)
          for (int r = 0; r < mr; r++) ap[k * MR + r] = A[r * lda + k]; /* the packed strip of the same rows */
        for (int beta = 0; beta < 2; beta++)
          for (int clamp = 0; clamp < 2; clamp++) {
            for (int v = 0; v < 5; v++)
              for (int i = 0; i < MR * NR + 1; i++) y[v][i] = (float)(i % 13) - 6.0f;
            float b = (float)beta;
            kiln_conv_direct_micro_a_base(kc, A, lda, x, off, xhi, b, y[0], NR, mr, nr, bias, clamp, -0.5f, 0.75f);
            kiln_conv_direct_micro_base(kc, ap, x, off, xhi, b, y[1], NR, mr, nr, bias, clamp, -0.5f, 0.75f);
            int nv = 2;
            if (avx512) {
              kiln_conv_direct_micro_a_avx512(kc, A, lda, x, off, xhi, b, y[2], NR, mr, nr, bias, clamp, -0.5f,
                                              0.75f);
              kiln_conv_direct_micro_avx512(kc, ap, x, off, xhi, b, y[3], NR, mr, nr, bias, clamp, -0.5f, 0.75f);
              kiln_conv_direct_micro_a_far_avx512(kc, A, lda, x, off, xhi, b, y[4], NR, mr, nr, bias, clamp, -0.5f,
                                                  0.75f); /* the prefetching form: the same results */
              nv = 5;
            }
            for (int v = 1; v < nv; v++) bad += memcmp(y[0], y[v], sizeof y[0]) != 0;
            runs++;
          }
        free(A), free(x), free(ap), free(off);
      }
  CHECK(runs > 0 && bad == 0, "direct micro-kernel with A in place: %lld of %lld runs differ (twin, packed%s)",
        (long long)bad, (long long)runs, avx512 ? ", AVX-512" : "");
}

/* ---- 5. pointwise on small planes, lanes over output channels (pwt.h) ---- */

/* The tile kernels: AVX-512 and AVX2 bit-equal to the scalar twin on every
 * pixel count 1..12, channel tails, K in 1-3 KC slices (the totals
 * carried between calls), odd ldx, bias and clamp, NaN and -0 in X and W;
 * X allocated to its last element read (ASan), outputs outside the tile
 * untouched. */
static void test_pwt_kernel(void) {
  enum { MR = KILN_PWT_MR, NR = KILN_PWT_NR };
  static const int64_t Ks[] = {1, 5, 33, 257, 320, 321, 700};
  static const int nrs[] = {1, 2, 15, 16, 17, 31, 32};
  bool avx512 = kiln_la_cpu_has_avx512(), avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  int64_t bad = 0, runs = 0, touched = 0;
  for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
    for (int mr = 1; mr <= MR; mr++)
      for (size_t ni = 0; ni < sizeof nrs / sizeof *nrs; ni++) {
        int64_t K = Ks[ki], ldx = mr + 2 * (int64_t)(ki % 3) + 1, ldy = mr + 3, nr = nrs[ni];
        int64_t nx = (K - 1) * ldx + mr; /* the last element read */
        float *x = rand_buf(nx), *wt = rand_buf(K * NR), bias[NR], tot[3][MR * NR];
        x[0] = NAN, x[nx - 1] = -0.0f, wt[K * NR - 1] = -0.0f;
        for (int c = 0; c < NR; c++) bias[c] = frand();
        for (int bi = 0; bi < 2; bi++)
          for (int clamp = 0; clamp < 2; clamp++) {
            float y[3][NR * (MR + 3) + 1];
            kiln_pwt_fn fns[3] = {kiln_pwt_tile_base, avx512 ? kiln_pwt_tile_avx512 : NULL,
                                  avx2 ? kiln_pwt_tile_avx2 : NULL};
            for (int v = 0; v < 3; v++) {
              for (int i = 0; i < NR * (MR + 3) + 1; i++) y[v][i] = 1000.0f + (float)i;
              for (int64_t p0 = 0; fns[v] && p0 < K; p0 += kiln_sgemm_wide_kc(K, p0))
                fns[v](K, p0, x, ldx, wt, tot[v], y[v], ldy, mr, (int)nr, bi ? bias : NULL, clamp, -0.5f, 0.75f,
                       clamp ? wt + K * NR : NULL, 8); /* a prefetch stream past the pack: a hint */
            }
            for (int v = 1; v < 3; v++) bad += fns[v] && memcmp(y[0], y[v], sizeof y[0]) != 0;
            for (int i = 0; i < NR * (MR + 3) + 1; i++) /* outside the tile: c >= nr or r >= mr */
              touched += (i / ldy >= nr || i % ldy >= mr) && y[0][i] != 1000.0f + (float)i;
            runs++;
          }
        free(x), free(wt);
      }
  CHECK(runs > 0 && bad == 0, "pointwise lanes-over-channels tiles: %lld of %lld runs differ from the twin%s%s",
        (long long)bad, (long long)runs, avx512 ? " (AVX-512" : " (", avx2 ? ", AVX2)" : ")");
  CHECK(touched == 0, "pointwise lanes-over-channels twin wrote %lld elements outside its tiles", (long long)touched);
}

typedef struct pwt_case {
  const char *name;
  int nsp;
  int64_t N, C, M, H, W; /* H x W: the output plane */
  int64_t s, extra;      /* stride (0: 1), input rows / columns past the last one the output reads */
} pwt_case;

/* The Conv kernel on a 1x1 node with its packs: the lanes-over-channels
 * path (kiln_conv_pwt_force 1: AVX-512; 2: its twin; -1: the default
 * rule) bit-equal to the path it replaces (force 0: the GEMM or direct
 * path), with no epilogue, a clamp (apply never called) and a counted
 * apply (each element exactly once); under the base setting no pack is
 * read (the twin within tolerance of the portable GEMM). */
static void pwt_case_run(const pwt_case *pc) {
  int nsp = pc->nsp, r = nsp + 2;
  int64_t sd = pc->s > 1 ? pc->s : 1, ih = (pc->H - 1) * sd + 1 + pc->extra, iw = (pc->W - 1) * sd + 1 + pc->extra;
  int64_t xd[4] = {pc->N, pc->C, nsp == 2 ? ih : iw, iw}, wd[4] = {pc->M, pc->C, 1, 1}, bd[1] = {pc->M};
  int64_t ks[2] = {1, 1}, ss[2] = {sd, sd}, plane = nsp == 2 ? pc->H * pc->W : pc->W;
  kiln_tensor x = {0}, w = {0}, b = {0};
  kiln_tensor_alloc(&x, KILN_F32, r, xd);
  kiln_tensor_alloc(&w, KILN_F32, r, wd);
  kiln_tensor_alloc(&b, KILN_F32, 1, bd);
  for (int64_t i = 0; i < x.numel; i++) ((float *)x.data)[i] = frand();
  for (int64_t i = 0; i < w.numel; i++) ((float *)w.data)[i] = frand();
  for (int64_t i = 0; i < b.numel; i++) ((float *)b.data)[i] = frand();
  ((float *)x.data)[x.numel - 1] = NAN;
  kiln_attr at[2] = {{.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = (size_t)nsp, .ints = ks},
                     {.name = (char *)"strides", .type = KILN_ATTR_INTS, .n = (size_t)nsp, .ints = ss}};
  int ins[3] = {0, 1, 2}, outs[1] = {3};
  kiln_node node = {(char *)"pw0", (char *)"Conv", (char *)"", 11, 3, 1, sd > 1 ? 2 : 1, ins, outs, at, -1};
  kiln_value vals[4];
  kiln_graph g;
  one_node_graph(&g, vals, &node, &w);
  kiln_cpu_conv_packs *pk = NULL;
  /* strided: W^T only where the output plane is known to pass the rule and the AVX-512 wide GEMM runs */
  CHECK(!kiln_cpu_conv_prepack(&g, sd > 1 ? &plane : NULL, NULL, &pk, NULL), "%s: prepack", pc->name);
  const kiln_cpu_conv_pack *p = kiln_cpu_conv_pack_find(&node);
  if (kiln_pwt_tile() && (sd == 1 || kiln_sgemm_pack_reader()))
    CHECK(p && p->tdata, "%s: no lanes-over-channels pack made", pc->name);
  /* the path replaced: bit-equal where it is kiln's wide GEMM / direct path or no pack is read (base); under
     AVX2 without AVX-512F it is OpenBLAS: the tiles bit-equal to their twin there, OpenBLAS within tolerance */
  bool blas = !kiln_sgemm_pack_reader() && kiln_pwt_tile();
  static const int modes[4] = {0, 1, 2, -1};
  for (int e = 0; e < 3; e++) { /* no epilogue, a clamp, a counted apply */
    kiln_tensor y[4];
    kiln_status st[4];
    for (int mi = 0; mi < 4; mi++) {
      count_ep cnt = {0};
      kiln_cpu_epilogue ep = {count_apply, &cnt, e == 1, -0.5f, 0.75f, NULL, 0, false, 0.0f, NULL, NULL};
      kiln_conv_pwt_force(modes[mi]);
      st[mi] = run_conv_ep(&g, &x, &w, &b, &y[mi], e ? &ep : NULL);
      if (!st[mi] && e == 2) { /* every element passed to apply exactly once */
        cnt.n = y[mi].numel;
        cnt.seen = calloc((size_t)y[mi].numel, sizeof(int64_t));
        kiln_tensor_release(&y[mi]);
        st[mi] = run_conv_ep(&g, &x, &w, &b, &y[mi], &ep);
        int64_t bad = 0;
        for (int64_t i = 0; i < cnt.n; i++) bad += cnt.seen[i] != 1;
        CHECK(!bad, "%s: mode %d: %lld elements not applied exactly once", pc->name, modes[mi], (long long)bad);
        free(cnt.seen);
      }
      if (e == 1) CHECK(cnt.calls == 0, "%s: mode %d: apply called with a clamp", pc->name, modes[mi]);
    }
    kiln_conv_pwt_force(-1);
    CHECK(!st[0] && !st[1] && !st[2] && !st[3], "%s: run %d %d %d %d", pc->name, (int)st[0], (int)st[1], (int)st[2],
          (int)st[3]);
    if (st[0] || st[1] || st[2] || st[3]) continue;
    size_t bytes = (size_t)y[0].numel * sizeof(float);
    for (int mi = 1; mi < 4; mi++)
      if (!blas || mi == 2)
        CHECK(!memcmp(y[blas ? 1 : 0].data, y[mi].data, bytes), "%s (epilogue %d): mode %d != the %s", pc->name, e,
              modes[mi], blas ? "tiles' twin" : "GEMM/direct path");
    if (blas) {
      int d = sd == 1 && kiln_pwt_plane_wanted(plane, pc->C) ? 1 : 0; /* the AVX2 tiles' rule; strided: none */
      CHECK(!memcmp(y[d].data, y[3].data, bytes), "%s (epilogue %d): the default rule != %s", pc->name, e,
            d ? "the tiles" : "OpenBLAS");
      int64_t bad = 0;
      for (int64_t i = 0; i < y[0].numel; i++) {
        float a = ((float *)y[0].data)[i], t = ((float *)y[1].data)[i];
        bad += !(isnan(a) ? isnan(t) : fabsf(a - t) <= 1e-4f * (1.0f + fabsf(a)) * (float)pc->C);
      }
      CHECK(!bad, "%s (epilogue %d): %lld outputs of the tiles off OpenBLAS's", pc->name, e, (long long)bad);
    }
    for (int mi = 0; mi < 4; mi++) kiln_tensor_release(&y[mi]);
  }
  kiln_cpu_conv_packs_free(pk);
  kiln_tensor_release(&x);
  kiln_tensor_release(&w);
  kiln_tensor_release(&b);
}

/* W^T is packed only for the 1x1 Convs whose plane (kiln_cpu_conv_prepack's
 * planes, from the plan's shapes) passes the tiles' size rule or is not
 * known; KILN_CONV_PWT's modes 1 / 2 pack it everywhere, 0 nowhere. The A
 * pack (where the wide GEMM reads packs) only where the plane is not known
 * to take the tiles; a run with the tiles off then reads neither. */
static void test_pwt_planes(void) {
  static const struct {
    int64_t C, P;
    int mode;
    bool want, want2; /* with the AVX-512 tiles, with the AVX2 ones (K >= 128 only) */
  } cases[] = {{32, 3136, -1, false, false}, {32, 196, -1, true, false},   {32, 49, -1, true, false},
               {160, 49, -1, true, true},    {130, 784, -1, true, true},    {32, 784, -1, false, false},
               {200, 1024, -1, false, false}, {32, 511, -1, true, false},  {128, 1023, -1, true, true},
               {32, -1, -1, true, true},     {32, 3136, 1, true, true},    {32, 3136, 2, true, true},
               {32, 196, 0, false, false}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int64_t wd[4] = {24, cases[i].C, 1, 1}, ks[2] = {1, 1};
    kiln_tensor w = {0};
    kiln_tensor_alloc(&w, KILN_F32, 4, wd);
    for (int64_t k = 0; k < w.numel; k++) ((float *)w.data)[k] = frand();
    kiln_attr at[1] = {{.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = ks}};
    int ins[3] = {0, 1, 2}, outs[1] = {3};
    kiln_node node = {(char *)"pw0", (char *)"Conv", (char *)"", 11, 3, 1, 1, ins, outs, at, -1};
    kiln_value vals[4];
    kiln_graph g;
    one_node_graph(&g, vals, &node, &w);
    kiln_cpu_conv_packs *pk = NULL;
    size_t bytes = 0;
    kiln_conv_pwt_force(cases[i].mode);
    kiln_status s = kiln_cpu_conv_prepack(&g, &cases[i].P, NULL, &pk, &bytes);
    kiln_conv_pwt_force(-1);
    const kiln_cpu_conv_pack *q = kiln_cpu_conv_pack_find(&node);
    kiln_pwt_fn tile = kiln_pwt_tile();
    bool want = tile && (tile == kiln_pwt_tile_avx2 ? cases[i].want2 : cases[i].want);
    bool reader = kiln_sgemm_pack_reader() && !(want && cases[i].P >= 0);
    size_t wb = (reader ? (size_t)kiln_sgemm_wide_pack_a_floats(24, cases[i].C) * sizeof(float) : 0) +
                (want ? (size_t)kiln_pwt_pack_floats(24, cases[i].C) * sizeof(float) : 0);
    CHECK(!s && (q != NULL) == (reader || want) && (!q || ((q->tdata != NULL) == want && (q->data != NULL) == reader)) &&
              bytes == wb,
          "pwt planes: K %lld, plane %lld, mode %d: pack %d (A %d, W^T %d, want %d), %zu bytes, want %zu",
          (long long)cases[i].C, (long long)cases[i].P, cases[i].mode, q != NULL, q && q->data, q && q->tdata, want,
          bytes, wb);
    int64_t side = (int64_t)sqrt((double)cases[i].P);
    if (q && side > 1 && side * side == cases[i].P && cases[i].mode < 0) { /* W^T alone: the tiles, and with them */
      int64_t xd[4] = {1, cases[i].C, side, side}, bd[1] = {24}; /* off the GEMM without a pack: the same bits */
      kiln_tensor x = {0}, b = {0}, y[2];
      kiln_tensor_alloc(&x, KILN_F32, 4, xd);
      kiln_tensor_alloc(&b, KILN_F32, 1, bd);
      for (int64_t k = 0; k < x.numel; k++) ((float *)x.data)[k] = frand();
      for (int64_t k = 0; k < b.numel; k++) ((float *)b.data)[k] = frand();
      kiln_status s0 = run_conv(&g, &x, &w, &b, &y[0]);
      kiln_conv_pwt_force(0);
      kiln_status s1 = run_conv(&g, &x, &w, &b, &y[1]);
      kiln_conv_pwt_force(-1);
      CHECK(!s0 && !s1, "pwt planes: plane %lld: run %d %d", (long long)cases[i].P, (int)s0, (int)s1);
      if (!s0 && !s1 && kiln_sgemm_pack_reader())
        CHECK(!memcmp(y[0].data, y[1].data, (size_t)y[0].numel * sizeof(float)),
              "pwt planes: plane %lld: the tiles != the GEMM without a pack", (long long)cases[i].P);
      for (int k = 0; k < 2; k++)
        if (k ? !s1 : !s0) kiln_tensor_release(&y[k]);
      kiln_tensor_release(&x);
      kiln_tensor_release(&b);
    }
    kiln_cpu_conv_packs_free(pk);
    kiln_tensor_release(&w);
  }
}

static void test_pwt(void) {
  static const pwt_case cases[] = {
      {"pwt: C 1, M 1, 7x7", 2, 1, 1, 1, 7, 7, 0, 0},
      {"pwt: C 17, M 33 (channel tail), 5x9, batch 2", 2, 2, 17, 33, 5, 9, 0, 0},
      {"pwt: C 300 (K: 2 slices), M 64, 14x14", 2, 1, 300, 64, 14, 14, 0, 0},
      {"pwt: C 700 (K: 3 slices), M 64, 14x14 (pixel groups on the pool)", 2, 1, 700, 64, 14, 14, 0, 0},
      {"pwt: C 160, M 100, 7x7, batch 2 (pool tasks)", 2, 2, 160, 100, 7, 7, 0, 0},
      {"pwt: C 24, M 40, 1x1 plane", 2, 1, 24, 40, 1, 1, 0, 0},
      {"pwt: C 130, M 24, 28x28 (the default rule: K >= 128)", 2, 1, 130, 24, 28, 28, 0, 0},
      {"pwt: 1-D, C 5, M 7, width 100", 1, 1, 5, 7, 1, 100, 0, 0},
      /* strided 1x1s (ResNet's downsampling): the input sampled, then the tiles, against the GEMM path */
      {"pwt: stride 2, C 128, M 256, 14x14 (l3.0.down)", 2, 1, 128, 256, 14, 14, 2, 1},
      {"pwt: stride 2, C 256, M 40, 7x7, batch 2, odd input", 2, 2, 256, 40, 7, 7, 2, 0},
      {"pwt: stride 3, C 300, M 33, 5x9", 2, 1, 300, 33, 5, 9, 3, 2},
      {"pwt: 1-D, stride 2, C 130, M 17, width 45", 1, 1, 130, 17, 1, 45, 2, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) pwt_case_run(&cases[i]);
  kiln_la_force_isa(KILN_VM_ISA_BASE); /* no pack read: the same graph through the portable GEMM, all modes equal */
  pwt_case_run(&cases[1]);
  kiln_la_force_isa(KILN_VM_NISA);
}

/* The channel tile (kiln_conv_ct_micro_*): AVX-512 = its twin bit for bit
 * on kc 1/5/33/257, T overwritten or added to, taps out of order, NaN and
 * -0 in the input, pixels 7..13 read 0, 9 or -7 floats further on (one
 * row of 14, two rows of 7, a last row of 7 alone), nothing written past
 * the 14 x 32 tile. */
static void test_ct_kernel(void) {
  enum { PX = KILN_CONV_CT_PX, NR = KILN_SGEMM_WIDE_NR };
  static const int64_t kcs[] = {1, 5, 33, 257};
  kiln_conv_ct_fn simd = kiln_conv_ct_micro();
  int64_t bad = 0, runs = 0;
  static const int64_t jumps[] = {0, 9, -KILN_CONV_CT_HALF};
  for (size_t ki = 0; ki < sizeof kcs / sizeof *kcs; ki++)
    for (int add = 0; add < 4; add++) {
      int64_t kc = kcs[ki], nx = kc * 3 + PX + 9, *off = malloc((size_t)kc * sizeof *off), jump = jumps[add % 3];
      float *wt = rand_buf(kc * NR), *x = rand_buf(nx), T[2][PX * NR + 1];
      for (int64_t k = 0; k < kc; k++) off[k] = (k * 7) % (kc * 3 + 1);
      x[0] = NAN, x[nx - 1] = -0.0f, wt[kc * NR - 1] = -0.0f;
      for (int v = 0; v < 2; v++)
        for (int i = 0; i < PX * NR + 1; i++) T[v][i] = (float)(i % 13) - 6.0f;
      kiln_conv_ct_micro_base(kc, wt, x, off, jump, NULL, 0, T[0], add & 1);
      if (simd) { /* with a prefetch stream (a hint: the same values), past the buffers too */
        simd(kc, wt, x, off, jump, add & 2 ? wt + kc * NR : NULL, 8, T[1], add & 1);
        bad += memcmp(T[0], T[1], sizeof T[0]) != 0;
      }
      bad += T[0][PX * NR] != (float)((PX * NR) % 13) - 6.0f; /* the element after the tile untouched */
      runs++;
      free(wt), free(x), free(off);
    }
  CHECK(runs > 0 && bad == 0, "channel tile: %lld of %lld runs differ from the twin%s", (long long)bad,
        (long long)runs, simd ? " (AVX-512)" : "");
}

/* The channel tile's store (kiln_conv_ct_store_*): AVX-512 = its twin bit
 * for bit for 32, 17, 16 and 5 channels, 14 or 7 pixels, with and without
 * bias and clamp, NaN and -0 in T; the twin = the definition (bias, then
 * v < lo ? lo : v, v > hi ? hi : v); nothing written past px pixels a row
 * or nc rows. */
static void test_ct_store(void) {
  enum { PX = KILN_CONV_CT_PX, NR = KILN_SGEMM_WIDE_NR, LDY = 19 };
  static const int64_t ncs[] = {32, 17, 16, 5};
  kiln_conv_ct_store_fn simd = kiln_conv_ct_store();
  if (simd == kiln_conv_ct_store_base) simd = NULL;
  float *T = rand_buf(PX * NR), *bias = rand_buf(NR);
  T[3] = NAN, T[NR + 1] = -0.0f, T[5 * NR + 20] = 2.0f;
  int64_t bad = 0, wrong = 0, runs = 0;
  for (size_t ni = 0; ni < sizeof ncs / sizeof *ncs; ni++)
    for (int v = 0; v < 8; v++) {
      int64_t nc = ncs[ni];
      int px = v & 4 ? KILN_CONV_CT_HALF : PX;
      const float *b = v & 1 ? bias : NULL;
      bool clamp = v & 2;
      float lo = -0.25f, hi = 0.5f, y[2][(NR + 1) * LDY];
      for (int u = 0; u < 2; u++)
        for (int i = 0; i < (NR + 1) * LDY; i++) y[u][i] = 7.0f;
      kiln_conv_ct_store_base(T, nc, px, b, clamp, lo, hi, y[0], LDY);
      if (simd) {
        simd(T, nc, px, b, clamp, lo, hi, y[1], LDY);
        bad += memcmp(y[0], y[1], sizeof y[0]) != 0;
      }
      for (int64_t c = 0; c <= nc && c < NR + 1; c++)
        for (int p = 0; p < LDY; p++) {
          float want = 7.0f;
          if (c < nc && p < px) {
            want = T[p * NR + c] + (b ? b[c] : 0.0f);
            if (clamp) want = want < lo ? lo : want > hi ? hi : want;
          }
          float got = y[0][c * LDY + p];
          wrong += !(got == want || (isnan(got) && isnan(want)));
        }
      runs++;
    }
  free(T), free(bias);
  CHECK(runs > 0 && bad == 0 && wrong == 0,
        "channel tile store: %lld of %lld runs differ from the twin%s, %lld values wrong", (long long)bad,
        (long long)runs, simd ? " (AVX-512)" : "", (long long)wrong);
}

/* Which packs a 3x3 stride-1 Conv gets with Winograd on: up to the A
 * pack's limit (2 MiB) the A pack, W^T (K >= 288) and U; above it up to
 * KILN_CONV_WINO_PACK_MAX U alone (ResNet-18's l3), above that W^T alone
 * up to KILN_CONV_CT_PACK_MAX (16 MiB); with Winograd off no U. Where U is made
 * alone the Conv through it equals Winograd with U made per call
 * (KILN_CONV_WINO=2) bit for bit, and the direct path without a pack is
 * within the reference's tolerance. */
static void test_wino_packs(void) {
  if (!kiln_sgemm_pack_reader()) return; /* no packs made for the wide GEMM here */
  static const struct {
    int64_t M, C;
    int wino;
    bool a, ct, u;
  } cases[] = {{64, 64, 1, true, true, true},     /* 147 KB */
               {256, 256, 1, false, false, true}, /* 2.36 MB: U alone */
               {256, 256, 0, false, true, false}, /* Winograd off: W^T alone, as before */
               {448, 256, 1, false, false, true}, /* 4.13 MB: U alone (the limit is 4 MiB of W) */
               {512, 256, 1, false, true, false},  /* 4.72 MB: W^T alone (ResNet-18's l4.0.conv1) */
               {1024, 512, 1, false, false, false}}; /* 18.9 MB: nothing */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    int64_t wd[4] = {cases[i].M, cases[i].C, 3, 3}, ks[2] = {3, 3}, pads[4] = {1, 1, 1, 1};
    kiln_tensor w = {0};
    kiln_tensor_alloc(&w, KILN_F32, 4, wd);
    for (int64_t k = 0; k < w.numel; k++) ((float *)w.data)[k] = frand() * 0.05f;
    kiln_attr at[2] = {{.name = (char *)"kernel_shape", .type = KILN_ATTR_INTS, .n = 2, .ints = ks},
                       {.name = (char *)"pads", .type = KILN_ATTR_INTS, .n = 4, .ints = pads}};
    int ins[3] = {0, 1, 2}, outs[1] = {3};
    kiln_node node = {(char *)"w3", (char *)"Conv", (char *)"", 11, 3, 1, 2, ins, outs, at, -1};
    kiln_value vals[4];
    kiln_graph g;
    one_node_graph(&g, vals, &node, &w);
    kiln_cpu_conv_packs *pk = NULL;
    kiln_conv_wino_force(cases[i].wino);
    kiln_status s = kiln_cpu_conv_prepack(&g, NULL, NULL, &pk, NULL);
    const kiln_cpu_conv_pack *q = kiln_cpu_conv_pack_find(&node);
    bool want = cases[i].a || cases[i].ct || cases[i].u;
    CHECK(!s && (q != NULL) == want &&
              (!q || ((q->data != NULL) == cases[i].a && (q->ctdata != NULL) == cases[i].ct &&
                      (q->wdata != NULL) == cases[i].u)),
          "wino packs: M %lld, C %lld, wino %d: pack %d (A %d, W^T %d, U %d)", (long long)cases[i].M,
          (long long)cases[i].C, cases[i].wino, q != NULL, q && q->data, q && q->ctdata, q && q->wdata);
    if (q && q->wdata && !cases[i].a) {
      int64_t xd[4] = {1, cases[i].C, 6, 7}, bd[1] = {cases[i].M};
      kiln_tensor x = {0}, b = {0}, y[3];
      kiln_tensor_alloc(&x, KILN_F32, 4, xd);
      kiln_tensor_alloc(&b, KILN_F32, 1, bd);
      for (int64_t k = 0; k < x.numel; k++) ((float *)x.data)[k] = frand();
      for (int64_t k = 0; k < b.numel; k++) ((float *)b.data)[k] = frand();
      kiln_status st[3];
      kiln_conv_wino_force(1); /* the plan's U */
      st[0] = run_conv(&g, &x, &w, &b, &y[0]);
      kiln_conv_wino_force(2); /* U made per call */
      st[1] = run_conv(&g, &x, &w, &b, &y[1]);
      kiln_conv_wino_force(0); /* the direct path, no pack read */
      st[2] = run_conv(&g, &x, &w, &b, &y[2]);
      CHECK(!st[0] && !st[1] && !st[2], "wino packs: M %lld: run %d %d %d", (long long)cases[i].M, (int)st[0],
            (int)st[1], (int)st[2]);
      if (!st[0] && !st[1] && !st[2]) {
        size_t bytes = (size_t)y[0].numel * sizeof(float);
        CHECK(!memcmp(y[0].data, y[1].data, bytes), "wino packs: M %lld: the plan's U != U made per call",
              (long long)cases[i].M);
        CHECK(memcmp(y[0].data, y[2].data, bytes) != 0, "wino packs: M %lld: the plan's U did not run Winograd",
              (long long)cases[i].M);
        int64_t bad = 0;
        for (int64_t k = 0; k < y[0].numel; k++) {
          float a = ((float *)y[0].data)[k], d = ((float *)y[2].data)[k];
          bad += !(fabsf(a - d) <= 1e-4f * (1.0f + fabsf(d)));
        }
        CHECK(!bad, "wino packs: M %lld: %lld outputs off the direct path's", (long long)cases[i].M, (long long)bad);
      }
      for (int k = 0; k < 3; k++)
        if (!st[k]) kiln_tensor_release(&y[k]);
      kiln_tensor_release(&x);
      kiln_tensor_release(&b);
    }
    kiln_conv_wino_force(0);
    kiln_cpu_conv_packs_free(pk);
    if (cases[i].M == 512) { /* over 4 MiB: W^T only where the known row width is one the channel tiles take */
      static const int64_t ows[] = {7, 14, 28, -1, 13, 21, 0};
      for (size_t o = 0; o < sizeof ows / sizeof *ows; o++) {
        int64_t wid[1] = {ows[o]};
        bool want_ct = ows[o] == 7 || ows[o] == 14 || ows[o] == 28 || ows[o] < 0;
        kiln_cpu_conv_packs *pw = NULL;
        kiln_conv_wino_force(1);
        kiln_status sw = kiln_cpu_conv_prepack(&g, NULL, wid, &pw, NULL);
        const kiln_cpu_conv_pack *qw = kiln_cpu_conv_pack_find(&node);
        CHECK(!sw && (qw && qw->ctdata) == want_ct, "wino packs: M 512, output width %lld: W^T %d, want %d",
              (long long)ows[o], qw && qw->ctdata, want_ct);
        kiln_conv_wino_force(0);
        kiln_cpu_conv_packs_free(pw);
      }
    }
    kiln_tensor_release(&w);
  }
}

int main(void) {
  int held = kiln_pool_acquire() == 0; /* as a plan does: the tiles become pool tasks */
  /* these cases compare packed and unpacked runs bit for bit on the other
     paths: Winograd (its own U pack, other rounding) is unit_cpu_wino's */
  kiln_conv_wino_force(0);
  printf("unit_cpu_prepack: %d thread(s), wide GEMM packs %s\n", kiln_pool_threads(),
         kiln_sgemm_pack_reader() ? "read (AVX-512)" : "not read here (base setting, OpenBLAS or no AVX-512F)");
  test_gemm();
  test_gemm_b();
  test_gemm_cb();
  test_conv();
  test_gemm_nodes();
  test_direct();
  test_direct_a_kernel();
  test_pwt_kernel();
  test_pwt();
  test_pwt_planes();
  test_ct_kernel();
  test_ct_store();
  test_wino_packs();
  if (held) kiln_pool_release();
  printf("unit_cpu_prepack: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
