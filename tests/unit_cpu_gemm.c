/* tests/unit_cpu_gemm: the cpu backend's MatMul, Gemm and Conv kernels
 * (cpu_fallback/gemm.c, conv.c, sgemm.c) against the reference kernels, on
 * both instruction-set versions (base: kiln's blocked C GEMM and the scalar
 * depthwise twin; avx2: kiln's wide GEMM or OpenBLAS, and the AVX-512
 * depthwise kernels where AVX-512F is usable, else the AVX2 one), on awkward
 * sizes, every attribute, strided (view) inputs, with and without an
 * epilogue, into arena-like reservations prefilled with NaN (so an element
 * not written shows).
 *
 * Tolerance: the kernels sum in float and in another order than the
 * reference (which sums in double), so each output element i must satisfy
 * |got - ref| <= 1e-5 * bound[i] + 1e-30, where bound[i] = sum of |terms|
 * of element i — computed by running the reference kernel on the absolute
 * values of every input (and of alpha, beta). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/dws1.h"
#include "cpu_fallback/dws2.h"
#include "cpu_fallback/kernels.h"
#include "cpu_fallback/sgemm.h"
#include "ir/alloc.h"
#include "ir/views.h"
#include "reference/ops.h"

static int passed, failed;
#include "tests/check.h"

#define TOL 1e-5

static uint32_t rng = 12345;
static float frand(void) {
  rng = rng * 1664525u + 1013904223u;
  return (float)((rng >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* ---- nodes ---- */

typedef struct node_b {
  kiln_node n;
  kiln_attr a[8];
  int64_t ints[8][8];
} node_b;

static void node_init(node_b *b, const char *op, int opset) {
  memset(b, 0, sizeof *b);
  b->n.op_type = (char *)op;
  b->n.domain = (char *)"";
  b->n.opset = opset;
  b->n.attrs = b->a;
}

static void attr_i(node_b *b, const char *name, int64_t v) {
  kiln_attr *a = &b->a[b->n.n_attrs++];
  a->name = (char *)name;
  a->type = KILN_ATTR_INT;
  a->i = v;
}

static void attr_f(node_b *b, const char *name, float v) {
  kiln_attr *a = &b->a[b->n.n_attrs++];
  a->name = (char *)name;
  a->type = KILN_ATTR_FLOAT;
  a->f = v;
}

static void attr_s(node_b *b, const char *name, const char *v) {
  kiln_attr *a = &b->a[b->n.n_attrs++];
  a->name = (char *)name;
  a->type = KILN_ATTR_STRING;
  a->s = (char *)v;
}

static void attr_is(node_b *b, const char *name, int n, const int64_t *v) {
  int k = b->n.n_attrs++;
  kiln_attr *a = &b->a[k];
  a->name = (char *)name;
  a->type = KILN_ATTR_INTS;
  a->n = (size_t)n;
  memcpy(b->ints[k], v, (size_t)n * sizeof *v);
  a->ints = b->ints[k];
}

/* ---- tensors ---- */

static void rand_tensor(kiln_tensor *t, int rank, const int64_t *dims) {
  memset(t, 0, sizeof *t);
  kiln_tensor_alloc(t, KILN_F32, rank, dims);
  for (int64_t i = 0; i < t->numel; i++) ((float *)t->data)[i] = frand();
}

/* A dense copy with |x| of every element (views read through). */
static void abs_copy(kiln_tensor *dst, const kiln_tensor *src) {
  memset(dst, 0, sizeof *dst);
  kiln_tensor_copy(dst, src);
  for (int64_t i = 0; i < dst->numel; i++) ((float *)dst->data)[i] = fabsf(((float *)dst->data)[i]);
}

/* ---- the epilogue under test: y = relu(y) + 0.25, counting calls ---- */

typedef struct epi_ctx {
  int64_t numel;
  int *count;
  float *out; /* the output buffer: y must be out + start */
  int bad_ptr;
} epi_ctx;

static void epi_apply(void *vctx, int64_t start, int64_t n, float *y) {
  epi_ctx *e = vctx;
  if (start < 0 || n < 0 || start + n > e->numel) {
    e->bad_ptr++;
    return;
  }
  if (y != e->out + start) e->bad_ptr++;
  for (int64_t i = 0; i < n; i++) {
    e->count[start + i]++;
    y[i] = (y[i] > 0 ? y[i] : 0.0f) + 0.25f;
  }
}

/* ---- one comparison: kernel (both ISAs, +/- epilogue) vs reference ---- */

static int nisa;

static void run_case(const char *what, const kiln_node *n, int n_in, const kiln_tensor *const *in, int abs_mask) {
  kiln_graph g;
  memset(&g, 0, sizeof g);
  const kiln_op_def *ref = kiln_ref_find_op("", n->op_type);
  const kiln_cpu_kernel_def *own = kiln_cpu_kernel_find("", n->op_type);
  if (!ref || !own) {
    CHECK(0, "%s: no kernel for %s", what, n->op_type);
    return;
  }
  bool used = true;
  kiln_tensor ry, by;
  memset(&ry, 0, sizeof ry);
  memset(&by, 0, sizeof by);
  kiln_op_call rc = {&g, n, n->opset, n_in, in, 1, &ry, &used};
  kiln_status s = ref->run(&rc);
  if (s) {
    CHECK(0, "%s: reference failed: %s", what, kiln_last_error());
    return;
  }
  /* bound: the reference on |inputs| (abs_mask: which inputs to take |x| of) */
  kiln_tensor ab[4];
  const kiln_tensor *abp[4];
  for (int i = 0; i < n_in; i++) {
    memset(&ab[i], 0, sizeof ab[i]);
    abp[i] = in[i];
    if (in[i] && (abs_mask >> i & 1)) {
      abs_copy(&ab[i], in[i]);
      abp[i] = &ab[i];
    }
  }
  kiln_node nb = *n; /* |alpha|, |beta| */
  kiln_attr at[8];
  memcpy(at, n->attrs, (size_t)n->n_attrs * sizeof *at);
  for (int i = 0; i < n->n_attrs; i++)
    if (at[i].type == KILN_ATTR_FLOAT) at[i].f = fabsf(at[i].f);
  nb.attrs = at;
  kiln_op_call bc = {&g, &nb, n->opset, n_in, abp, 1, &by, &used};
  s = ref->run(&bc);
  CHECK(!s, "%s: bound failed", what);
  /* e: 0 no epilogue; 1 the counting relu + 0.25; 2 the same marked as a
   * clamp to [-0.5, 0.75] (kiln_cpu_epilogue.clamp): Conv must clamp its
   * blocks itself and never call apply, the others may call apply once */
  for (int isa = 0; isa < nisa && !s; isa++)
    for (int e = 0; e < 3; e++) {
      kiln_la_force_isa((kiln_vm_isa)isa);
      /* an arena-like reservation full of NaN */
      size_t cap = (size_t)ry.numel * sizeof(float) + 64;
      float *buf = malloc(cap);
      for (size_t i = 0; i < cap / sizeof(float); i++) buf[i] = NAN;
      kiln_tensor y;
      memset(&y, 0, sizeof y);
      y.data = buf;
      y.capacity = cap;
      epi_ctx ec = {ry.numel, calloc((size_t)ry.numel + 1, sizeof(int)), buf, 0};
      kiln_cpu_epilogue ep = {epi_apply, &ec, e == 2, -0.5f, 0.75f, NULL, 0, false, 0.0f, NULL, NULL};
      kiln_op_call kc = {&g, n, n->opset, n_in, in, 1, &y, &used};
      bool declined = true;
      s = own->run(&kc, e ? &ep : NULL, &declined);
      CHECK(!s && !declined, "%s [%s%s]: status %d declined %d (%s)", what, kiln_vm_isa_name((kiln_vm_isa)isa),
            e == 1 ? ", epilogue" : e ? ", clamp epilogue" : "", (int)s, declined, s ? kiln_last_error() : "");
      if (!s && !declined) {
        bool shape = y.dtype == KILN_F32 && y.rank == ry.rank && y.numel == ry.numel;
        for (int d = 0; shape && d < y.rank; d++) shape = y.dims[d] == ry.dims[d];
        CHECK(shape, "%s: output shape differs", what);
        int64_t bad = -1, miscount = -1;
        float want_bad = 0;
        double worst = 0;
        for (int64_t i = 0; shape && i < ry.numel; i++) {
          float r = ((float *)ry.data)[i], got = ((float *)y.data)[i];
          if (e == 1 || (e == 2 && ec.count[i] == 1)) r = (r > 0 ? r : 0.0f) + 0.25f;
          else if (e == 2) r = r < -0.5f ? -0.5f : r > 0.75f ? 0.75f : r;
          double err = fabs((double)got - r), lim = TOL * ((float *)by.data)[i] + 1e-30;
          if (!(err <= lim) && bad < 0) {
            bad = i;
            want_bad = r;
          }
          if (lim > 0 && err / lim > worst) worst = err / lim;
          int want_calls = e == 2 && !strcmp(n->op_type, "Conv") ? 0 : 1;
          if (e && ec.count[i] != want_calls && (e == 1 || ec.count[i] > 1 || !want_calls) && miscount < 0) miscount = i;
        }
        CHECK(bad < 0, "%s [%s%s]: element %lld: got %g, want %g (bound %g)", what,
              kiln_vm_isa_name((kiln_vm_isa)isa), e == 1 ? ", epilogue" : e ? ", clamp epilogue" : "", (long long)bad,
              bad >= 0 ? ((float *)y.data)[bad] : 0.0, (double)want_bad,
              bad >= 0 ? ((float *)by.data)[bad] : 0.0);
        if (e)
          CHECK(miscount < 0 && !ec.bad_ptr, "%s [%s%s]: epilogue covered element %lld %d times (bad calls %d)", what,
                kiln_vm_isa_name((kiln_vm_isa)isa), e == 2 ? ", clamp" : "", (long long)miscount,
                miscount >= 0 ? ec.count[miscount] : 1,
                ec.bad_ptr);
        CHECK(buf[cap / sizeof(float) - 1] != buf[cap / sizeof(float) - 1], "%s: wrote past the output", what);
      }
      free(ec.count);
      free(buf);
    }
  kiln_la_force_isa(KILN_VM_NISA);
  for (int i = 0; i < n_in; i++) kiln_tensor_release(&ab[i]);
  kiln_tensor_release(&ry);
  kiln_tensor_release(&by);
}

/* The kernel declines the call and leaves the output untouched. */
static void expect_decline(const char *what, const kiln_node *n, int n_in, const kiln_tensor *const *in) {
  kiln_graph g;
  memset(&g, 0, sizeof g);
  kiln_tensor y;
  memset(&y, 0, sizeof y);
  bool used = true, declined = false;
  kiln_op_call kc = {&g, n, n->opset, n_in, in, 1, &y, &used};
  kiln_status s = kiln_cpu_kernel_find("", n->op_type)->run(&kc, NULL, &declined);
  CHECK(!s && declined && y.dtype == KILN_UNDEFINED && !y.data, "%s: status %d declined %d", what, (int)s, declined);
}

/* ---- MatMul ---- */

static void mm_dense(int ra, const int64_t *da, int rb, const int64_t *db) {
  kiln_tensor a, b;
  rand_tensor(&a, ra, da);
  rand_tensor(&b, rb, db);
  node_b nb;
  node_init(&nb, "MatMul", 13);
  const kiln_tensor *in[2] = {&a, &b};
  char what[128], s1[64], s2[64];
  snprintf(what, sizeof what, "MatMul %s x %s", kiln_shape_str(ra, da, s1, 64), kiln_shape_str(rb, db, s2, 64));
  run_case(what, &nb.n, 2, in, 3);
  kiln_tensor_release(&a);
  kiln_tensor_release(&b);
}

static void test_matmul(void) {
#define MM(ra, rb, ...)                              \
  do {                                               \
    int64_t d[] = {__VA_ARGS__};                     \
    mm_dense(ra, d, rb, d + (ra));                   \
  } while (0)
  MM(2, 2, 1, 1, 1, 1);
  MM(1, 1, 7, 7);
  MM(1, 2, 5, 5, 3);
  MM(2, 1, 4, 5, 5);
  MM(1, 3, 6, 2, 6, 3);
  MM(3, 1, 2, 3, 6, 6);
  MM(4, 3, 3, 1, 4, 5, 2, 5, 6);
  MM(4, 2, 2, 3, 17, 33, 33, 9);   /* B shared: one GEMM of 102 rows */
  MM(3, 3, 2, 8, 16, 1, 16, 24);   /* B broadcast over batch */
  MM(2, 2, 3, 1000, 1000, 7);      /* big K */
  MM(2, 2, 9, 17, 17, 23);
  MM(2, 2, 67, 129, 129, 131);     /* past the base GEMM's block sizes */
  MM(3, 3, 1, 13, 261, 1, 261, 8); /* K past one KC slice */
#undef MM

  /* strided views */
  node_b nb;
  node_init(&nb, "MatMul", 13);
  int64_t M = 19, K = 37, N = 11;
  kiln_tensor ta, tb, va, vb;
  {
    int64_t d[2] = {K, M}, e[2] = {N, K};
    rand_tensor(&ta, 2, d); /* A^T stored */
    rand_tensor(&tb, 2, e); /* B^T stored */
    int64_t ad[2] = {M, K}, as[2] = {1, M}, bd[2] = {K, N}, bs[2] = {1, K};
    kiln_tensor_view(&va, &ta, 2, ad, as, 0);
    kiln_tensor_view(&vb, &tb, 2, bd, bs, 0);
    const kiln_tensor *in[2] = {&va, &vb};
    run_case("MatMul transposed views", &nb.n, 2, in, 3);
    kiln_tensor_release(&ta);
    kiln_tensor_release(&tb);
  }
  {
    int64_t d[2] = {M + 3, K + 5}, e[2] = {K, N};
    rand_tensor(&ta, 2, d);
    rand_tensor(&tb, 2, e);
    int64_t ad[2] = {M, K}, as[2] = {K + 5, 1};
    kiln_tensor_view(&va, &ta, 2, ad, as, 2 * (K + 5) + 3); /* a slice: lda > K */
    int64_t bd[2] = {K, N}, bs[2] = {-N, 1};
    kiln_tensor_view(&vb, &tb, 2, bd, bs, (K - 1) * N); /* rows reversed: copied */
    const kiln_tensor *in[2] = {&va, &vb};
    run_case("MatMul sliced / reversed views", &nb.n, 2, in, 3);
    int64_t cd[2] = {K, N}, cs[2] = {N, 2};
    kiln_tensor tc, vc;
    int64_t dd[2] = {K, 2 * N};
    rand_tensor(&tc, 2, dd);
    kiln_tensor_view(&vc, &tc, 2, cd, cs, 1); /* column step 2: copied */
    const kiln_tensor *in2[2] = {&va, &vc};
    run_case("MatMul column-step view", &nb.n, 2, in2, 3);
    kiln_tensor_release(&tc);
    kiln_tensor_release(&ta);
    kiln_tensor_release(&tb);
  }
  {
    int64_t d[2] = {M, K}, e[3] = {3, N, K};
    rand_tensor(&ta, 2, d);
    rand_tensor(&tb, 3, e);
    int64_t ad[3] = {4, M, K}, as[3] = {0, K, 1}; /* Expand: batch stride 0 */
    kiln_tensor_view(&va, &ta, 3, ad, as, 0);
    int64_t bd[3] = {3, K, N}, bs[3] = {N * K, 1, K}; /* batched transpose */
    kiln_tensor_view(&vb, &tb, 3, bd, bs, 0);
    int64_t vd2[4] = {4, 1, M, K}, vs2[4] = {0, 0, K, 1};
    kiln_tensor va2;
    kiln_tensor_view(&va2, &ta, 4, vd2, vs2, 0);
    const kiln_tensor *in[2] = {&va2, &vb};
    run_case("MatMul broadcast + batched transposed views", &nb.n, 2, in, 3);
    (void)va;
    int64_t vd1[1] = {K}, vs1[1] = {M}; /* a strided vector */
    kiln_tensor_view(&va, &ta, 1, vd1, vs1, 0);
    const kiln_tensor *in1[2] = {&va, &vb};
    run_case("MatMul strided 1-D A", &nb.n, 2, in1, 3);
    kiln_tensor_release(&ta);
    kiln_tensor_release(&tb);
  }
  /* declines: another dtype, mismatched K */
  {
    int64_t d[2] = {2, 3};
    kiln_tensor ia, ib;
    memset(&ia, 0, sizeof ia);
    memset(&ib, 0, sizeof ib);
    kiln_tensor_alloc(&ia, KILN_I64, 2, d);
    kiln_tensor_alloc(&ib, KILN_I64, 2, d);
    const kiln_tensor *in[2] = {&ia, &ib};
    expect_decline("MatMul int64", &nb.n, 2, in);
    rand_tensor(&ta, 2, d);
    rand_tensor(&tb, 2, d);
    const kiln_tensor *in2[2] = {&ta, &tb};
    expect_decline("MatMul K mismatch", &nb.n, 2, in2);
    kiln_tensor_release(&ia);
    kiln_tensor_release(&ib);
    kiln_tensor_release(&ta);
    kiln_tensor_release(&tb);
  }
}

/* A view no single strided map holds: base [a, b] transposed to [b, a]
 * and reshaped to (rank, dims) — a stack of two views over base. */
static void stacked_view(kiln_tensor *t, kiln_views *st, const kiln_tensor *base, int rank, const int64_t *dims) {
  kiln_view v;
  kiln_view_contiguous(base->rank, base->dims, &v);
  kiln_views_init(st, &v);
  kiln_view_op op;
  memset(&op, 0, sizeof op);
  op.kind = KILN_VOP_TRANSPOSE;
  kiln_views_push(st, &op);
  memset(&op, 0, sizeof op);
  op.kind = KILN_VOP_RESHAPE;
  op.n = rank;
  memcpy(op.shape, dims, (size_t)rank * sizeof *dims);
  kiln_views_push(st, &op);
  memset(t, 0, sizeof *t);
  t->dtype = KILN_F32;
  t->rank = rank;
  memcpy(t->dims, dims, (size_t)rank * sizeof *dims);
  t->numel = base->numel;
  t->data = base->data;
  t->strided = true;
  t->stack = st;
}

static void test_stacked(void) {
  kiln_tensor base, v, b;
  kiln_views st;
  int64_t bd[2] = {6, 10}, vd[2] = {4, 15}, wd[2] = {15, 7};
  rand_tensor(&base, 2, bd);
  rand_tensor(&b, 2, wd);
  stacked_view(&v, &st, &base, 2, vd);
  CHECK(!kiln_views_single(&st), "the reshape of a transpose should be a stack");
  node_b nb;
  node_init(&nb, "MatMul", 13);
  const kiln_tensor *in[2] = {&v, &b};
  run_case("MatMul with a stacked view (reshape of a transpose)", &nb.n, 2, in, 3);
  /* Conv with X a stacked view [1, 2, 5, 6] of a transposed [6, 10] */
  int64_t xd[4] = {1, 2, 5, 6}, kd[4] = {3, 2, 2, 2};
  kiln_tensor x, w;
  stacked_view(&x, &st, &base, 4, xd);
  rand_tensor(&w, 4, kd);
  node_b nc;
  node_init(&nc, "Conv", 11);
  const kiln_tensor *cin[2] = {&x, &w};
  run_case("Conv with a stacked view X", &nc.n, 2, cin, 3);
  kiln_tensor_release(&base);
  kiln_tensor_release(&b);
  kiln_tensor_release(&w);
}

/* ---- Gemm ---- */

static void test_gemm(void) {
  static const struct {
    int r;
    int64_t d[2]; /* of C, relative: -1 = M, -2 = N */
  } cshapes[] = {{-1, {0, 0}}, {0, {0, 0}}, {1, {1, 0}}, {1, {-2, 0}}, {2, {-1, 1}}, {2, {1, -2}}, {2, {-1, -2}}};
  static const float ab[][2] = {{1, 1}, {0.5f, -2}, {-1.5f, 0}};
  int64_t sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 130}, {3, 300, 9}};
  char what[160];
  for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
    for (int tA = 0; tA < 2; tA++)
      for (int tB = 0; tB < 2; tB++)
        for (size_t ci = 0; ci < sizeof cshapes / sizeof *cshapes; ci++)
          for (size_t k = 0; k < sizeof ab / sizeof *ab; k++) {
            if (z != 1 && (ci % 3 || k)) continue; /* all combinations on one size only */
            int64_t M = sizes[z][0], N = sizes[z][1], K = sizes[z][2];
            int64_t ad[2] = {tA ? K : M, tA ? M : K}, bd[2] = {tB ? N : K, tB ? K : N}, cd[2];
            for (int j = 0; j < 2; j++)
              cd[j] = cshapes[ci].d[j] == -1 ? M : cshapes[ci].d[j] == -2 ? N : cshapes[ci].d[j];
            kiln_tensor a, b, c;
            rand_tensor(&a, 2, ad);
            rand_tensor(&b, 2, bd);
            if (cshapes[ci].r >= 0) rand_tensor(&c, cshapes[ci].r, cd);
            node_b nb;
            node_init(&nb, "Gemm", 13);
            if (tA) attr_i(&nb, "transA", 1);
            if (tB) attr_i(&nb, "transB", 1);
            attr_f(&nb, "alpha", ab[k][0]);
            attr_f(&nb, "beta", ab[k][1]);
            const kiln_tensor *in[3] = {&a, &b, cshapes[ci].r >= 0 ? &c : NULL};
            snprintf(what, sizeof what, "Gemm M%lld N%lld K%lld tA%d tB%d C#%zu alpha %g beta %g", (long long)M,
                     (long long)N, (long long)K, tA, tB, ci, ab[k][0], ab[k][1]);
            run_case(what, &nb.n, cshapes[ci].r >= 0 ? 3 : 2, in, 7);
            kiln_tensor_release(&a);
            kiln_tensor_release(&b);
            if (cshapes[ci].r >= 0) kiln_tensor_release(&c);
          }
  /* strided: transA over a transposed view = a plain operand; C a view */
  {
    int64_t M = 10, N = 6, K = 21;
    kiln_tensor a, b, c, va, vc;
    int64_t ad[2] = {M, K}, bd[2] = {N, K}, cdd[2] = {N, M};
    rand_tensor(&a, 2, ad);
    rand_tensor(&b, 2, bd);
    rand_tensor(&c, 2, cdd);
    int64_t vd[2] = {K, M}, vs[2] = {1, K}, cvd[2] = {M, N}, cvs[2] = {1, M};
    kiln_tensor_view(&va, &a, 2, vd, vs, 0);
    kiln_tensor_view(&vc, &c, 2, cvd, cvs, 0);
    node_b nb;
    node_init(&nb, "Gemm", 13);
    attr_i(&nb, "transA", 1);
    attr_i(&nb, "transB", 1);
    attr_f(&nb, "beta", 0.5f);
    const kiln_tensor *in[3] = {&va, &b, &vc};
    run_case("Gemm views (transposed A view, transposed C view)", &nb.n, 3, in, 7);
    kiln_tensor_release(&a);
    kiln_tensor_release(&b);
    kiln_tensor_release(&c);
  }
  /* 1024-wide epilogue panels: N large, M past one panel */
  {
    int64_t ad[2] = {300, 40}, bd[2] = {40, 700};
    kiln_tensor a, b;
    rand_tensor(&a, 2, ad);
    rand_tensor(&b, 2, bd);
    node_b nb;
    node_init(&nb, "Gemm", 13);
    const kiln_tensor *in[2] = {&a, &b};
    run_case("Gemm 300x700x40 (several epilogue panels)", &nb.n, 2, in, 3);
    kiln_tensor_release(&a);
    kiln_tensor_release(&b);
  }
}

/* ---- Conv ---- */

typedef struct conv_case {
  const char *name;
  int nsp;
  int64_t N, C, M, G;
  int64_t in[3], k[3];
  int64_t st[3], dl[3], pads[6]; /* 0: attribute absent */
  const char *auto_pad;
  int bias;
} conv_case;

/* A case's random X, W and bias (whether the node reads it or not) and its
 * Conv node: group where not 1, the strides and dilations given (0:
 * absent), pads or auto_pad, kernel_shape. */
static void conv_case_init(const conv_case *c, kiln_tensor *x, kiln_tensor *w, kiln_tensor *b, node_b *nb) {
  int nsp = c->nsp;
  int64_t xd[5] = {c->N, c->C}, wd[5] = {c->M, c->C / c->G}, bd[1] = {c->M};
  for (int d = 0; d < nsp; d++) xd[2 + d] = c->in[d], wd[2 + d] = c->k[d];
  rand_tensor(x, nsp + 2, xd);
  rand_tensor(w, nsp + 2, wd);
  rand_tensor(b, 1, bd);
  node_init(nb, "Conv", 11);
  if (c->G != 1) attr_i(nb, "group", c->G);
  if (c->st[0]) attr_is(nb, "strides", nsp, c->st);
  if (c->dl[0]) attr_is(nb, "dilations", nsp, c->dl);
  if (c->pads[0] >= 0 && !c->auto_pad) attr_is(nb, "pads", 2 * nsp, c->pads);
  if (c->auto_pad) attr_s(nb, "auto_pad", c->auto_pad);
  attr_is(nb, "kernel_shape", nsp, c->k);
}

static void conv_run(const conv_case *cc, bool strided_x) {
  kiln_tensor x, w, b, base, xv;
  node_b nb;
  conv_case_init(cc, &x, &w, &b, &nb);
  const kiln_tensor *xp = &x;
  if (strided_x) { /* X as a view: the last two dims swapped in storage */
    int64_t sd[5], ss[5], vs[5], *xd = x.dims;
    memcpy(sd, xd, sizeof sd);
    int r = cc->nsp + 2;
    sd[r - 1] = xd[r - 2];
    sd[r - 2] = xd[r - 1];
    rand_tensor(&base, r, sd);
    kiln_strides(r, sd, ss);
    memcpy(vs, ss, sizeof vs);
    vs[r - 1] = ss[r - 2];
    vs[r - 2] = ss[r - 1];
    kiln_tensor_view(&xv, &base, r, xd, vs, 0);
    xp = &xv;
  }
  const kiln_tensor *in[3] = {xp, &w, cc->bias ? &b : NULL};
  char what[160];
  snprintf(what, sizeof what, "Conv %s%s", cc->name, strided_x ? " (strided X)" : "");
  run_case(what, &nb.n, cc->bias ? 3 : 2, in, 7);
  kiln_tensor_release(&x);
  kiln_tensor_release(&w);
  kiln_tensor_release(&b);
  if (strided_x) kiln_tensor_release(&base);
}

static void test_conv(void) {
  static const conv_case cases[] = {
      {"2-D 3x3 pad 1", 2, 2, 3, 5, 1, {7, 9}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"2-D stride 2 dilation 2 asymmetric pads",
       2,
       1,
       3,
       4,
       1,
       {11, 10},
       {3, 2},
       {2, 2},
       {2, 2},
       {0, 1, 2, 1},
       NULL,
       1},
      {"2-D stride (3,1) no pads", 2, 1, 2, 3, 1, {8, 13}, {2, 3}, {3, 1}, {0}, {-1}, NULL, 0},
      {"2-D SAME_UPPER stride 2", 2, 1, 3, 4, 1, {9, 10}, {3, 4}, {2, 2}, {0}, {-1}, "SAME_UPPER", 1},
      {"2-D SAME_LOWER stride 2 dilation 2", 2, 1, 3, 4, 1, {9, 10}, {3, 4}, {2, 2}, {2, 1}, {-1}, "SAME_LOWER", 1},
      {"2-D VALID", 2, 1, 3, 2, 1, {6, 7}, {3, 3}, {0}, {0}, {-1}, "VALID", 0},
      {"2-D group 2", 2, 2, 4, 6, 2, {7, 8}, {3, 3}, {0}, {0}, {1, 0, 1, 2}, NULL, 1},
      {"2-D 1x1 pointwise", 2, 2, 16, 24, 1, {7, 7}, {1, 1}, {0}, {0}, {-1}, NULL, 1},
      {"2-D 1x1 pointwise group 4", 2, 1, 16, 8, 4, {5, 3}, {1, 1}, {0}, {0}, {-1}, NULL, 1},
      {"2-D 1x1 stride 2", 2, 1, 8, 5, 1, {9, 9}, {1, 1}, {2, 2}, {0}, {-1}, NULL, 0},
      {"2-D 1x1 with pads", 2, 1, 3, 2, 1, {4, 5}, {1, 1}, {0}, {0}, {1, 0, 0, 1}, NULL, 1},
      {"2-D tiled im2col (K 288, 1600 positions)", 2, 1, 32, 16, 1, {40, 40}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"2-D K 630 (KC slices 256, 256, 118), stride (2,1) dilation (1,2) pads", 2, 1, 70, 13, 1, {11, 37}, {3, 3}, {2, 1}, {1, 2}, {1, 2, 0, 1}, NULL, 1},
      {"3-D K 360 (KC slices 256 + 104)", 3, 1, 20, 14, 1, {4, 6, 9}, {2, 3, 3}, {1, 1, 1}, {0}, {0, 1, 1, 1, 0, 1}, NULL, 0},
      {"depthwise 3x3 pad 1", 2, 2, 8, 8, 8, {9, 11}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"depthwise 3x3 stride 2", 2, 1, 5, 5, 5, {12, 19}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"depthwise multiplier 2 stride (1,3)", 2, 1, 3, 6, 3, {7, 23}, {3, 2}, {1, 3}, {0}, {0, 2, 1, 0}, NULL, 0},
      {"depthwise 5x5 dilation 2 SAME_UPPER", 2, 1, 4, 4, 4, {13, 21}, {5, 5}, {0}, {2, 2}, {-1}, "SAME_UPPER", 1},
      {"depthwise width 1", 2, 1, 3, 3, 3, {5, 1}, {3, 1}, {0}, {0}, {1, 0, 1, 0}, NULL, 1},
      {"depthwise wide rows (tails of 16 and 8)", 2, 1, 2, 2, 2, {3, 61}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"depthwise 7x7 planes, 200 channels (channel blocks, flat plane)", 2, 2, 200, 200, 200, {7, 7}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"depthwise multiplier 3 stride (2,3) dilation (2,1) (phases in both dims, flat)", 2, 1, 90, 270, 90, {15, 14}, {3, 3}, {2, 3}, {2, 1}, {1, 0, 2, 1}, NULL, 1},
      {"depthwise stride (3,2) wide rows (phases in both dims, by rows)", 2, 1, 3, 3, 3, {20, 90}, {3, 3}, {3, 2}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"depthwise stride 2 no pads, last column unread (split clipped)", 2, 1, 3, 3, 3, {9, 20}, {3, 3}, {2, 2}, {0}, {-1}, NULL, 1},
      {"depthwise 5x5 stride 2 pads (2,3,1,0), wide rows (split clipped, phases swapped)", 2, 1, 3, 3, 3, {6, 77}, {5, 5}, {2, 2}, {0}, {2, 3, 1, 0}, NULL, 1},
      {"depthwise stride 9 (the general path)", 2, 1, 2, 2, 2, {10, 20}, {2, 3}, {9, 9}, {0}, {0, 1, 0, 1}, NULL, 1},
      {"1-D k3 stride 2 pad 1", 1, 2, 3, 4, 1, {17}, {3}, {2}, {0}, {1, 1}, NULL, 1},
      {"1-D depthwise dilation 3", 1, 1, 4, 4, 4, {29}, {3}, {0}, {3}, {2, 2}, NULL, 1},
      {"1-D SAME_LOWER", 1, 1, 2, 3, 1, {10}, {4}, {3}, {0}, {-1}, "SAME_LOWER", 0},
      {"3-D", 3, 1, 2, 3, 1, {4, 5, 6}, {3, 2, 3}, {1, 2, 1}, {0}, {1, 0, 1, 1, 1, 0}, NULL, 1},
      {"3-D group 2 depthwise-like", 3, 1, 2, 2, 2, {3, 4, 5}, {2, 2, 2}, {0}, {0}, {-1}, NULL, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    conv_run(&cases[i], false);
    if (i % 4 == 0) conv_run(&cases[i], true);
  }
  /* declines: W channels that do not match, a kernel larger than the padded input */
  {
    int64_t xd[4] = {1, 3, 5, 5}, wd[4] = {2, 2, 3, 3}, wd2[4] = {2, 3, 7, 7};
    kiln_tensor x, w, w2;
    rand_tensor(&x, 4, xd);
    rand_tensor(&w, 4, wd);
    rand_tensor(&w2, 4, wd2);
    node_b nb;
    node_init(&nb, "Conv", 11);
    const kiln_tensor *in[2] = {&x, &w}, *in2[2] = {&x, &w2};
    expect_decline("Conv channel mismatch", &nb.n, 2, in);
    expect_decline("Conv kernel larger than input", &nb.n, 2, in2);
    kiln_tensor_release(&x);
    kiln_tensor_release(&w);
    kiln_tensor_release(&w2);
  }
}

/* ---- the SGEMM versions against each other on raw strides ---- */

static void test_sgemm_raw(void) {
  int64_t M = 37, N = 29, K = 300, ld = 311;
  float *A = malloc(sizeof(float) * (size_t)(ld * ld)), *B = malloc(sizeof(float) * (size_t)(ld * ld));
  float *C1 = malloc(sizeof(float) * (size_t)(M * ld)), *C2 = malloc(sizeof(float) * (size_t)(M * ld));
  for (int64_t i = 0; i < ld * ld; i++) {
    A[i] = frand();
    B[i] = frand();
  }
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    for (int64_t i = 0; i < M * ld; i++) C1[i] = C2[i] = frand();
    kiln_status s1 = kiln_sgemm_base(ta, tb, M, N, K, 0.75f, A, ld, B, ld, -0.5f, C1, ld);
    kiln_status s2 = kiln_sgemm_blas(ta, tb, M, N, K, 0.75f, A, ld, B, ld, -0.5f, C2, ld);
    double worst = 0;
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < ld; j++) {
        double e = fabs((double)C1[i * ld + j] - C2[i * ld + j]);
        if (j >= N && e != 0) worst = 1e9; /* outside the matrix: untouched */
        if (e > worst) worst = e;
      }
    CHECK(!s1 && !s2 && worst < 1e-3, "sgemm base vs blas ta %d tb %d: max diff %g", ta, tb, worst);
  }
  /* K = 0: C = beta·C */
  C1[0] = 2.0f;
  kiln_sgemm_base(false, false, 1, 1, 0, 1.0f, A, 1, B, 1, 3.0f, C1, 1);
  C2[0] = 2.0f;
  kiln_sgemm_blas(false, false, 1, 1, 0, 1.0f, A, 1, B, 1, 3.0f, C2, 1);
  CHECK(C1[0] == 6.0f && C2[0] == 6.0f, "K = 0: %g %g", C1[0], C2[0]);
  free(A);
  free(B);
  free(C1);
  free(C2);
}

/* The depthwise rows kernels: bit-equal to their twin (same fmas in the
 * same order, the same clamp) on every row length 0..300 (the AVX2 kernel's
 * 64-output passes and every tail; the AVX-512 one's groups of eight
 * 16-lane vectors, within a row or across rows), 1..3 rows with gaps between
 * output rows and input rows at odd strides, 1..9 taps at odd offsets,
 * without and with a clamp (an input row holds NaN and -0); the gaps and
 * the element after the last row left alone. */
static void test_dw_rows(void) {
  if (nisa < 2) return;
  enum { L = 300, B = 4 * (L + 4) };
  static float taps[9][B], y1[B], y2[B];
  float w[9];
  const float *src[9];
  for (int j = 0; j < 9; j++) {
    for (int i = 0; i < B; i++) taps[j][i] = frand();
    w[j] = frand();
    src[j] = taps[j] + j % 3;
  }
  taps[4][7] = NAN;
  taps[4][40] = -0.0f;
  w[4] = 1.0f; /* tap 4 alone from a bias of -0: y = -0 and NaN (below) */
  const float clamps[3][2] = {{-INFINITY, INFINITY}, {0.0f, 0.3f}, {-0.25f, 0.5f}};
  int bad = 0, cases = 0, versions = kiln_la_cpu_has_avx512() ? 2 : 1;
  for (int v = 0; v < versions; v++)
    for (int64_t n = 0; n <= L; n++)
      for (int64_t rows = 1; rows <= 3; rows++)
        for (int nk = 1; nk <= 9; nk += (n % 2 ? 4 : 2))
          for (int c = 0; c < 3; c++) {
            int64_t ys = n + (rows + n) % 4, ss = n + 1 + n % 3, end = (rows - 1) * ys + n;
            for (int i = 0; i < B; i++) y1[i] = y2[i] = 42.0f;
            kiln_dw_rows_base(y1, ys, src, ss, rows, n, w, nk, 0.5f, clamps[c][0], clamps[c][1]);
            if (v == 0) kiln_dw_rows_avx2_fma(y2, ys, src, ss, rows, n, w, nk, 0.5f, clamps[c][0], clamps[c][1]);
            else kiln_dw_rows_avx512(y2, ys, src, ss, rows, n, w, nk, 0.5f, clamps[c][0], clamps[c][1]);
            if (memcmp(y1, y2, sizeof y1) || y2[end] != 42.0f) bad++;
            for (int64_t r = 0; r < rows; r++)
              for (int64_t i = 0; i < ys && r * ys + i < end; i++) {
                float e = y1[r * ys + i];
                if (i >= n ? e != 42.0f : c > 0 && (e < clamps[c][0] || e > clamps[c][1])) bad++;
              }
            cases++;
          }
  CHECK(!bad, "depthwise rows kernels differ from the twin in %d of %d cases", bad, cases);
  /* 3x3 taps at stride 1 on one padded plane (src[3ky + kx] = plane + ky·ss + kx: the AVX-512 kernel's
     row-blocked form, dw3_rows): rows 1..33 (groups of up to 16 / V rows, balanced), row lengths 1..150 (column
     blocks of 4 vectors and every tail), the plane allocated to its last element read, NaN and -0 in it */
  bad = cases = 0;
  for (int v = 0; v < versions; v++)
    for (int64_t n = 1; n <= 150; n += n < 40 ? 1 : 7)
      for (int64_t rows = 1; rows <= 33; rows += rows < 18 ? 1 : 5)
        for (int c = 0; c < 3; c += 1 + (int)(n % 2)) {
          int64_t ss = n + 2 + n % 3, ys = n + rows % 3, psz = (rows + 1) * ss + n + 2, end = (rows - 1) * ys + n;
          float *plane = malloc((size_t)psz * sizeof *plane), *o1 = malloc((size_t)(end + 1) * sizeof *o1),
                *o2 = malloc((size_t)(end + 1) * sizeof *o2);
          if (!plane || !o1 || !o2) {
            bad++;
            free(plane);
            free(o1);
            free(o2);
            continue;
          }
          for (int64_t i = 0; i < psz; i++) plane[i] = frand();
          plane[psz / 2] = NAN;
          plane[psz / 3] = -0.0f;
          for (int j = 0; j < 9; j++) src[j] = plane + (j / 3) * ss + j % 3;
          for (int64_t i = 0; i <= end; i++) o1[i] = o2[i] = 42.0f;
          kiln_dw_rows_base(o1, ys, src, ss, rows, n, w, 9, 0.5f, clamps[c][0], clamps[c][1]);
          if (v == 0) kiln_dw_rows_avx2_fma(o2, ys, src, ss, rows, n, w, 9, 0.5f, clamps[c][0], clamps[c][1]);
          else kiln_dw_rows_avx512(o2, ys, src, ss, rows, n, w, 9, 0.5f, clamps[c][0], clamps[c][1]);
          if (memcmp(o1, o2, (size_t)(end + 1) * sizeof *o1) || o2[end] != 42.0f) bad++;
          for (int64_t r = 0; r < rows; r++) /* the definition at one output a row, the gaps untouched */
            for (int64_t i = 0; i < ys && r * ys + i < end; i++) {
              float e = o1[r * ys + i], acc = 0.5f;
              if (i >= n) {
                bad += e != 42.0f;
                continue;
              }
              if (i != (r + n) % n) continue;
              for (int j = 0; j < 9; j++) acc = fmaf(w[j], plane[(r + j / 3) * ss + i + j % 3], acc);
              acc = acc < clamps[c][0] ? clamps[c][0] : acc;
              acc = acc > clamps[c][1] ? clamps[c][1] : acc;
              bad += !(memcmp(&acc, &e, sizeof e) == 0 || (isnan(acc) && isnan(e)));
            }
          cases++;
          free(plane);
          free(o1);
          free(o2);
        }
  CHECK(!bad && cases > 500, "3x3 stride-1 plane: depthwise rows kernels differ from the twin in %d of %d cases", bad,
        cases);
  /* the twin itself: tap 4 alone at its NaN and -0, two rows */
  const float *one[1] = {taps[4] + 1};
  float t[128];
  kiln_dw_rows_base(t, 64, one, 33, 2, 64, &w[4], 1, -0.0f, -INFINITY, INFINITY);
  CHECK(isnan(t[6]) && t[39] == 0.0f && signbit(t[39]) && t[64] == taps[4][34], "twin: NaN %g, -0 %g, row 2 %g", t[6],
        t[39], t[64]);
  kiln_dw_rows_base(t, 64, one, 33, 1, 64, &w[4], 1, -0.0f, 0.0f, 6.0f);
  CHECK(isnan(t[6]) && signbit(t[39]), "twin clamp keeps NaN and -0: %g %g", t[6], t[39]);
}

/* Case c through kiln's own Conv kernel (inputs in, node nb), with a
 * Clip [-0.5, 0.75] epilogue when clamp, into *y (zeroed first); a kernel
 * that declines the node is KILN_E_INTERNAL. */
static kiln_status run_own_conv(const conv_case *c, node_b *nb, const kiln_tensor **in, bool clamp, kiln_tensor *y) {
  const kiln_cpu_kernel_def *own = kiln_cpu_kernel_find("", "Conv");
  kiln_graph g;
  memset(&g, 0, sizeof g);
  bool used = true, declined = true;
  kiln_cpu_epilogue ep = {NULL, NULL, true, -0.5f, 0.75f, NULL, 0, false, 0.0f, NULL, NULL};
  memset(y, 0, sizeof *y);
  kiln_op_call kc = {&g, &nb->n, 11, c->bias ? 3 : 2, in, 1, y, &used};
  kiln_status st = own->run(&kc, clamp ? &ep : NULL, &declined);
  return declined ? KILN_E_INTERNAL : st;
}

/* The in-place depthwise plane kernel (kiln_dw_plane_*): AVX-512 = twin
 * bit for bit on n 1..256, 1..9 taps, shifts either way, masks that say
 * where each tap falls inside (a generated 'same' geometry: rows of 1..23),
 * NaN and -0 in the input, clamps; nothing written past n; the same for
 * the two-channel form (kiln_dw_plane2_*: AVX-512 = its twin = the
 * one-channel twin per channel, nothing past 2n). Then Conv with
 * the plane kernel on and off (the padded-plane rows kernel) bit-equal on
 * small depthwise planes: 7x7 3x3 pad 1, 5x5 taps pad 2, dilation 2,
 * multiplier 2, 1x3 taps, SAME_UPPER over 300 channels (channel blocks),
 * batch 2, with and without bias, clamp epilogue. */
static void test_dw_plane(void) {
  if (nisa < 2 || !kiln_la_cpu_has_avx512()) return;
  enum { M = 40 };
  static float xb[512 + 2 * M], y1[257], y2[257], z1[513], z2[513];
  for (int i = 0; i < 512 + 2 * M; i++) xb[i] = frand();
  const float *x = xb + M;
  xb[M + 5] = NAN, xb[M + 9] = -0.0f;
  float w[18];
  for (int j = 0; j < 18; j++) w[j] = frand();
  xb[M + 256 + 3] = NAN, xb[M + 256 + 20] = -0.0f;
  const float clamps[2][2] = {{-INFINITY, INFINITY}, {-0.25f, 0.5f}};
  int bad = 0, cases = 0, bad2 = 0;
  for (int64_t n = 1; n <= 256; n += n < 20 ? 1 : 7)
    for (int64_t W = 1; W <= 23; W += 5) {
      if (n % W) continue; /* a plane of n / W rows of W */
      int64_t H = n / W, nv = (n + 15) / 16, toff[9];
      uint16_t masks[9 * 16] = {0};
      for (int nk = 1; nk <= 9; nk += 4)
        for (int c = 0; c < 2; c++) {
          for (int j = 0; j < nk; j++) { /* tap j: shift (dy, dx) in [-2, 2] */
            int64_t dy = j % 5 - 2, dx = (j * 3 + 1) % 5 - 2;
            toff[j] = dy * W + dx;
            for (int64_t v = 0; v < nv; v++) masks[j * nv + v] = 0;
            for (int64_t p = 0; p < n; p++)
              if (p / W + dy >= 0 && p / W + dy < H && p % W + dx >= 0 && p % W + dx < W)
                masks[j * nv + p / 16] |= (uint16_t)(1u << (p % 16));
          }
          for (int i = 0; i < 257; i++) y1[i] = y2[i] = 42.0f;
          kiln_dw_plane_base(y1, x, n, toff, masks, w, nk, 0.5f, clamps[c][0], clamps[c][1]);
          kiln_dw_plane_avx512(y2, x, n, toff, masks, w, nk, 0.5f, clamps[c][0], clamps[c][1]);
          if (memcmp(y1, y2, sizeof y1) || y2[n] != 42.0f) bad++;
          /* two channels a call (x, x + n; weights w, w + nk) against the twin's two calls */
          for (int i = 0; i < 513; i++) z1[i] = z2[i] = 42.0f;
          kiln_dw_plane2_base(z1, x, n, toff, masks, w, nk, 0.5f, -1.5f, clamps[c][0], clamps[c][1]);
          kiln_dw_plane2_avx512(z2, x, n, toff, masks, w, nk, 0.5f, -1.5f, clamps[c][0], clamps[c][1]);
          /* y1: the first channel alone (a twin wrong the same way would pass the first compare) */
          if (memcmp(z1, z2, 2 * (size_t)n * sizeof(float)) || memcmp(z1, y1, (size_t)n * sizeof(float)) ||
              z2[2 * n] != 42.0f)
            bad2++;
          cases++;
        }
    }
  CHECK(!bad && cases > 100, "depthwise plane kernel differs from its twin in %d of %d cases", bad, cases);
  CHECK(!bad2, "two-channel depthwise plane kernel differs from its twin in %d of %d cases", bad2, cases);
  /* Conv: plane kernel on and off */
  static const conv_case cc[] = {
      {"dw 7x7 3x3 pad 1, 40 channels", 2, 1, 40, 40, 40, {7, 7}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"dw 6x5 5x5 pad 2, batch 2, no bias", 2, 2, 9, 9, 9, {6, 5}, {5, 5}, {0}, {0}, {2, 2, 2, 2}, NULL, 0},
      {"dw 8x8 3x3 dilation 2 pad 2, multiplier 2", 2, 1, 6, 12, 6, {8, 8}, {3, 3}, {0}, {2, 2}, {2, 2, 2, 2}, NULL, 1},
      {"dw 5x3 1x3 pads (0, 1, 0, 1)", 2, 1, 5, 5, 5, {5, 3}, {1, 3}, {0}, {0}, {0, 1, 0, 1}, NULL, 1},
      {"dw 4x6 3x3 SAME_UPPER, 300 channels", 2, 1, 300, 300, 300, {4, 6}, {3, 3}, {0}, {0}, {-1}, "SAME_UPPER", 1},
  };
  for (size_t i = 0; i < sizeof cc / sizeof *cc; i++) {
    kiln_tensor xt, wt, bt;
    node_b nb;
    conv_case_init(&cc[i], &xt, &wt, &bt, &nb);
    const kiln_tensor *in[3] = {&xt, &wt, cc[i].bias ? &bt : NULL};
    for (int e = 0; e < 2; e++) {
      kiln_tensor y[2];
      kiln_status st[2];
      for (int on = 0; on < 2; on++) {
        kiln_conv_dw_plane_enable(on);
        kiln_conv_dw_s1_force(0); /* off: the padded plane (dws1 has test_dw_s1) */
        st[on] = run_own_conv(&cc[i], &nb, in, e, &y[on]);
      }
      kiln_conv_dw_plane_enable(true);
      kiln_conv_dw_s1_force(-1);
      CHECK(!st[0] && !st[1] && y[0].numel == y[1].numel &&
                !memcmp(y[0].data, y[1].data, (size_t)y[0].numel * sizeof(float)),
            "Conv %s (clamp %d): plane kernel != padded-plane rows kernel", cc[i].name, e);
      kiln_tensor_release(&y[0]);
      kiln_tensor_release(&y[1]);
    }
    kiln_tensor_release(&xt);
    kiln_tensor_release(&wt);
    kiln_tensor_release(&bt);
  }
}

/* Each Conv case with a depthwise path forced off (mode 0), on (the
 * default) and to its scalar twin (2), with and without a clamp epilogue:
 * the three outputs bit for bit. */
static void check_dw_force(const conv_case *cc, size_t n, void (*force)(int), const char *path) {
  for (size_t i = 0; i < n; i++) {
    kiln_tensor xt, wt, bt;
    node_b nb;
    conv_case_init(&cc[i], &xt, &wt, &bt, &nb);
    const kiln_tensor *in[3] = {&xt, &wt, cc[i].bias ? &bt : NULL};
    for (int e = 0; e < 2; e++) {
      kiln_tensor y[3];
      kiln_status st[3];
      for (int mode = 0; mode < 3; mode++) { /* off, on (the default), the twin */
        force(mode == 1 ? -1 : mode);
        st[mode] = run_own_conv(&cc[i], &nb, in, e, &y[mode]);
      }
      force(-1);
      for (int mode = 1; mode < 3; mode++)
        CHECK(!st[0] && !st[mode] && y[0].numel == y[mode].numel &&
                  !memcmp(y[0].data, y[mode].data, (size_t)y[0].numel * sizeof(float)),
              "Conv %s (clamp %d): %s (mode %d) != the padded copy", cc[i].name, e, path, mode);
      for (int mode = 0; mode < 3; mode++) kiln_tensor_release(&y[mode]);
    }
    kiln_tensor_release(&xt);
    kiln_tensor_release(&wt);
    kiln_tensor_release(&bt);
  }
}

/* Stride-2 depthwise in place (dws2.h): the AVX-512 and AVX2 kernels
 * bit-equal to their twin on input sizes 1..40 x 1..140 (odd and even;
 * output rows of 1 to 5 vectors), pads 0..2 (top and left; outputs past the right and bottom edge
 * reading padding), kernels 3x3, 1x1, 2x4, 5x3, clamps, NaN and -0 in
 * the input; the input allocated to its exact size (ASan: no lane read
 * outside it), nothing written past the output. Then Conv with it on (the
 * default), forced to the twin and off (the padded phase planes) bit-equal
 * on awkward depthwise layers, with and without a clamp epilogue. */
static void test_dw_s2(void) {
  if (nisa < 2) return;
  bool avx512 = kiln_la_cpu_has_avx512();
  static const int ks[4][2] = {{3, 3}, {1, 1}, {2, 4}, {5, 3}};
  const float clamps[2][2] = {{-INFINITY, INFINITY}, {-0.25f, 0.5f}};
  float w[15];
  for (int j = 0; j < 15; j++) w[j] = frand();
  int bad = 0, cases = 0;
  for (int64_t H = 1; H <= 120; H += H < 6 ? 1 : H < 34 ? 7 : 79) /* up to 57 output rows: 3 x 3 in groups of <= 8 */
    for (int64_t W = 1; W <= 140; W += W < 4 ? 1 : W < 37 ? 3 : W < 67 ? 29 : 31) /* rows of 1 .. 5 vectors */
      for (int ki = 0; ki < 4; ki++)
        for (int64_t pad = 0; pad <= 2; pad++) {
          int KH = ks[ki][0], KW = ks[ki][1];
          int64_t pt = pad < KH ? pad : 0, pl = (pad + 1) % 3 < KW ? (pad + 1) % 3 : 0; /* unequal top and left */
          int64_t OH = (H + 2 * pt - KH) / 2 + 1, OW = (W + 2 * pl - KW) / 2 + 1;
          if (H + 2 * pt < KH || W + 2 * pl < KW) continue;
          float *x = malloc(sizeof(float) * (size_t)(H * W)), *y[3];
          for (int64_t i = 0; i < H * W; i++) x[i] = frand();
          x[0] = NAN, x[H * W - 1] = -0.0f;
          for (int c = 0; c < 2; c++) {
            for (int v = 0; v < 3; v++) {
              y[v] = malloc(sizeof(float) * (size_t)(OH * OW + 1));
              for (int64_t i = 0; i <= OH * OW; i++) y[v][i] = 42.0f;
            }
            kiln_dw_s2_base(y[0], x, H, W, OH, OW, pt, pl, w, KH, KW, 0.5f, clamps[c][0], clamps[c][1]);
            kiln_dw_s2_avx2(y[1], x, H, W, OH, OW, pt, pl, w, KH, KW, 0.5f, clamps[c][0], clamps[c][1]);
            if (avx512) kiln_dw_s2_avx512(y[2], x, H, W, OH, OW, pt, pl, w, KH, KW, 0.5f, clamps[c][0], clamps[c][1]);
            size_t bytes = sizeof(float) * (size_t)(OH * OW + 1);
            if (memcmp(y[0], y[1], bytes) || (avx512 && memcmp(y[0], y[2], bytes)) || y[0][OH * OW] != 42.0f) bad++;
            cases++;
            for (int v = 0; v < 3; v++) free(y[v]);
          }
          free(x);
        }
  CHECK(!bad && cases > 1000, "stride-2 depthwise kernels differ from their twin in %d of %d cases", bad, cases);
  static const conv_case cc[] = {
      {"dw s2 3x3 pad 1, 112x112 -> 56, 5 channels", 2, 1, 5, 5, 5, {112, 112}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"dw s2 3x3 pad 1, 15x29 (odd), batch 2", 2, 2, 7, 7, 7, {15, 29}, {3, 3}, {2, 2}, {0}, {1, 1, 1, 1}, NULL, 0},
      {"dw s2 3x3 SAME_UPPER (pads 0 / 1), 14x14, 40 channels", 2, 1, 40, 40, 40, {14, 14}, {3, 3}, {2, 2}, {0}, {-1},
       "SAME_UPPER", 1},
      {"dw s2 5x5 pads (2, 1, 0, 2), multiplier 2, 23x38", 2, 1, 3, 6, 3, {23, 38}, {5, 5}, {2, 2}, {0},
       {2, 1, 0, 2}, NULL, 1},
      {"dw s2 3x3 no pads, 9x9 (last column unread)", 2, 1, 4, 4, 4, {9, 9}, {3, 3}, {2, 2}, {0}, {0, 0, 0, 0}, NULL, 1},
      {"dw s2 1-D k3 pad 1, width 61", 1, 1, 6, 6, 6, {61}, {3}, {2}, {0}, {1, 1}, NULL, 1},
  };
  check_dw_force(cc, sizeof cc / sizeof *cc, kiln_conv_dw_s2_force, "stride-2 in place");
}

/* 3x3 stride-1 'same' depthwise in place (dws1.h): the AVX-512 kernel
 * bit-equal to its twin on planes 1..37 high x 1..130 wide (strips of 1..4
 * vectors, full and part-filled, the rows loop's every remainder), clamps,
 * NaN and -0 in the input, -0 as the bias (a padding tap's w · 0 turns it
 * into +0 or keeps it: the fma is kept); the input allocated to its exact
 * size (ASan), nothing written past the output; the twin against the
 * definition on one output. Then Conv with it on (the default), forced to
 * the twin and off (the padded plane) bit-equal on awkward layers. */
static void test_dw_s1(void) {
  if (nisa < 2) return;
  bool avx512 = kiln_la_cpu_has_avx512();
  const float clamps[2][2] = {{-INFINITY, INFINITY}, {-0.25f, 0.5f}};
  float w[9];
  for (int j = 0; j < 9; j++) w[j] = frand();
  w[4] = -w[4]; /* both signs among the taps */
  int bad = 0, cases = 0, def = 0, parts_bad = 0, parts_cases = 0;
  for (int64_t H = 1; H <= 37; H += H < 9 ? 1 : 7)
    for (int64_t W = 1; W <= 130; W += W < 4 ? 1 : W < 36 ? 5 : W < 66 ? 13 : 15) {
      float *x = malloc(sizeof(float) * (size_t)(H * W)), *y[2];
      for (int64_t i = 0; i < H * W; i++) x[i] = frand();
      x[0] = NAN, x[H * W - 1] = -0.0f;
      for (int c = 0; c < 3; c++) {
        float bias = c == 2 ? -0.0f : 0.5f;
        for (int v = 0; v < 2; v++) {
          y[v] = malloc(sizeof(float) * (size_t)(H * W + 1));
          for (int64_t i = 0; i <= H * W; i++) y[v][i] = 42.0f;
        }
        kiln_dw_s1_base(y[0], x, H, W, 0, H, w, bias, clamps[c % 2][0], clamps[c % 2][1]);
        if (avx512) kiln_dw_s1_avx512(y[1], x, H, W, 0, H, w, bias, clamps[c % 2][0], clamps[c % 2][1]);
        size_t bytes = sizeof(float) * (size_t)(H * W + 1);
        if ((avx512 && memcmp(y[0], y[1], bytes)) || y[0][H * W] != 42.0f) bad++;
        /* output (H - 1, W / 2) by the definition (its right neighbour inside where W > 1) */
        int64_t oy = H - 1, ox = W / 2;
        float acc = bias;
        for (int ky = 0; ky < 3; ky++)
          for (int kx = 0; kx < 3; kx++) {
            int64_t iy = oy - 1 + ky, ix = ox - 1 + kx;
            acc = fmaf(w[3 * ky + kx], iy >= 0 && iy < H && ix >= 0 && ix < W ? x[iy * W + ix] : 0.0f, acc);
          }
        acc = acc < clamps[c % 2][0] ? clamps[c % 2][0] : acc;
        acc = acc > clamps[c % 2][1] ? clamps[c % 2][1] : acc;
        if (memcmp(&acc, &y[0][oy * W + ox], sizeof acc)) def++;
        cases++;
        /* parts of the rows (GEMM_CONV.md "Parts of the image"): rows [r0, r1) from each, the rows outside untouched,
           and the parts together the whole plane's bits */
        for (int np = 2; np <= 3 && H >= np; np++) {
          for (int v = 0; v < 2; v++) {
            float *z = malloc(sizeof(float) * (size_t)(H * W + 1));
            for (int64_t i = 0; i <= H * W; i++) z[i] = 42.0f;
            for (int part = 0; part < np; part++) {
              int64_t r0 = H * part / np, r1 = H * (part + 1) / np;
              if (v == 0) kiln_dw_s1_base(z, x, H, W, r0, r1, w, bias, clamps[c % 2][0], clamps[c % 2][1]);
              else if (avx512) kiln_dw_s1_avx512(z, x, H, W, r0, r1, w, bias, clamps[c % 2][0], clamps[c % 2][1]);
              for (int64_t i = r1 * W; i <= H * W; i++)
                if (z[i] != 42.0f) {
                  parts_bad++;
                  break;
                }
            }
            if ((v == 0 || avx512) && memcmp(z, y[0], bytes)) parts_bad++;
            parts_cases++;
            free(z);
          }
        }
        for (int v = 0; v < 2; v++) free(y[v]);
      }
      free(x);
    }
  CHECK(!bad && cases > 300, "stride-1 3x3 depthwise kernel differs from its twin in %d of %d cases", bad, cases);
  CHECK(!def, "stride-1 3x3 depthwise twin differs from the definition in %d of %d cases", def, cases);
  CHECK(!parts_bad && parts_cases > 300, "stride-1 3x3 depthwise by parts of the rows: %d wrong of %d", parts_bad,
        parts_cases);
  static const conv_case cc[] = {
      {"dw 3x3 pad 1, 112x112, 3 channels", 2, 1, 3, 3, 3, {112, 112}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"dw 3x3 pad 1, 15x29 (odd), batch 2, no bias", 2, 2, 7, 7, 7, {15, 29}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 0},
      {"dw 3x3 SAME_UPPER, 28x28, 40 channels", 2, 1, 40, 40, 40, {28, 28}, {3, 3}, {0}, {0}, {-1}, "SAME_UPPER", 1},
      {"dw 3x3 pad 1, multiplier 2, 14x20", 2, 1, 3, 6, 3, {14, 20}, {3, 3}, {0}, {0}, {1, 1, 1, 1}, NULL, 1},
      {"dw 3x3 pads (1, 1, 2, 2) (not 'same': the padded plane)", 2, 1, 4, 4, 4, {9, 11}, {3, 3}, {0}, {0},
       {1, 1, 2, 2}, NULL, 1},
      {"dw 3x3 pad 1, 1x1 plane", 2, 1, 2, 2, 2, {1, 1}, {3, 3}, {0}, {0}, {1, 1, 1, 1},
       NULL, 1},
  };
  check_dw_force(cc, sizeof cc / sizeof *cc, kiln_conv_dw_s1_force, "stride-1 in place");
}

/* The strided gathers: equal, and no read past the last element of the
 * source nor write past the last of the destination (both allocated to
 * exactly their size, for ASan; the stride-2 tail is masked). */
static void test_gather(void) {
  if (nisa < 2) return;
  int bad = 0;
  for (int64_t st = 1; st <= 3; st++)
    for (int64_t n = 1; n <= 40; n++) {
      int64_t len = (n - 1) * st + 1;
      float *src = malloc(sizeof(float) * (size_t)len), d1[40], *d2 = malloc(sizeof(float) * (size_t)n);
      for (int64_t i = 0; i < len; i++) src[i] = frand();
      kiln_la_gather_base(d1, src, n, st);
      kiln_la_gather_avx2(d2, src, n, st);
      if (memcmp(d1, d2, (size_t)n * sizeof(float))) bad++;
      for (int64_t i = 0; i < n; i++)
        if (d1[i] != src[i * st]) bad++;
      free(src);
      free(d2);
    }
  CHECK(!bad, "strided gathers: %d mismatches", bad);
}

/* The stride-2 split: the AVX-512 one equal to its twin and to the
 * definition on n = 0..100 (every tail of its 32-element steps), source and
 * both destinations allocated to exactly their size (ASan: no read or
 * write outside them). */
static void test_split2(void) {
  if (nisa < 2 || !kiln_la_cpu_has_avx512()) return;
  int bad = 0;
  for (int64_t n = 0; n <= 100; n++) {
    int64_t ne = (n + 1) / 2, no = n / 2;
    float *src = malloc(sizeof(float) * (size_t)n), e1[50], o1[50];
    float *e2 = malloc(sizeof(float) * (size_t)ne), *o2 = malloc(sizeof(float) * (size_t)no);
    for (int64_t i = 0; i < n; i++) src[i] = frand();
    kiln_la_split2_base(e1, o1, src, n);
    kiln_la_split2_avx512(e2, o2, src, n);
    if (memcmp(e1, e2, (size_t)ne * sizeof(float)) || memcmp(o1, o2, (size_t)no * sizeof(float))) bad++;
    for (int64_t t = 0; t < ne; t++)
      if (e1[t] != src[2 * t]) bad++;
    for (int64_t t = 0; t < no; t++)
      if (o1[t] != src[2 * t + 1]) bad++;
    free(src);
    free(e2);
    free(o2);
  }
  CHECK(!bad, "stride-2 split: %d mismatches", bad);
}

/* The row copy: the AVX-512 one equal to its twin on n = 0..50 (every tail
 * of 16), 1..3 rows, dense and padded strides on either side, source and
 * destination allocated to exactly the elements a copy may touch (ASan),
 * destination gaps left alone. */
static void test_copy_rows(void) {
  if (nisa < 2 || !kiln_la_cpu_has_avx512()) return;
  int bad = 0;
  for (int64_t n = 0; n <= 50; n++)
    for (int64_t rows = 1; rows <= 3; rows++)
      for (int64_t gap = 0; gap <= 3; gap += 3) {
        int64_t ss = n + gap, ds = n + 3 - gap, sl = (rows - 1) * ss + n, dl = (rows - 1) * ds + n;
        float *src = malloc(sizeof(float) * (size_t)(sl ? sl : 1));
        float *d1 = malloc(sizeof(float) * (size_t)(dl ? dl : 1)), *d2 = malloc(sizeof(float) * (size_t)(dl ? dl : 1));
        for (int64_t i = 0; i < sl; i++) src[i] = frand();
        for (int64_t i = 0; i < dl; i++) d1[i] = d2[i] = 42.0f;
        kiln_la_copy_rows_base(d1, ds, src, ss, rows, n);
        kiln_la_copy_rows_avx512(d2, ds, src, ss, rows, n);
        if (memcmp(d1, d2, (size_t)dl * sizeof(float))) bad++;
        for (int64_t r = 0; r < rows; r++)
          for (int64_t i = 0; i < ds && r * ds + i < dl; i++)
            if (d1[r * ds + i] != (i < n ? src[r * ss + i] : 42.0f)) bad++;
        free(src);
        free(d1);
        free(d2);
      }
  CHECK(!bad, "row copies: %d mismatches", bad);
}

int main(void) {
  nisa = kiln_vm_cpu_has_avx2() ? 2 : 1;
  if (nisa < 2) printf("unit_cpu_gemm: no AVX2 on this CPU: base version only\n");
  test_sgemm_raw();
  test_dw_rows();
  test_dw_plane();
  test_dw_s2();
  test_dw_s1();
  test_gather();
  test_split2();
  test_copy_rows();
  test_matmul();
  test_stacked();
  test_gemm();
  test_conv();
  printf("unit_cpu_gemm: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
