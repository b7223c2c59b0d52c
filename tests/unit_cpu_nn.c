/* tests/unit_cpu_nn: the cpu_fallback/nn kernels (pooling, softmax,
 * normalisation, reductions, ArgMax/ArgMin, Concat/Gather/Transpose/Tile) against the reference
 * kernels on hand-built nodes: awkward sizes (1, odd, primes, tails of 8),
 * every attribute, both ISAs (forced with kiln_nn_force_isa; the AVX2 result
 * must equal the scalar twin's bit for bit), outputs given as reservations
 * full of garbage (every element must be written), strided view inputs,
 * the reference's errors (Gather's bad indices) and the cases each kernel
 * must decline (outputs untouched, no error set). Also the primitives
 * directly, base against AVX2, on every length up to 70 and odd strides. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/nn.h"
#include "graphbuild.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"

static int passed, failed;
#include "tests/check.h"

static int nisa; /* 1: base only, 2: base and avx2 */

/* ---- a test case: one node, its inputs, run on the reference and ours ---- */

enum { MAXIO = 10 };
typedef struct tc {
  kiln_graph *g;
  kiln_node *n;
  const char *op;
  int n_in, n_out;
  kiln_tensor in[MAXIO]; /* owned dense inputs */
  kiln_tensor view[MAXIO];
  const kiln_tensor *inp[MAXIO];
  bool used[MAXIO];
} tc;

static void tc_begin(tc *t, int opset, const char *op, int n_in, int n_out) {
  memset(t, 0, sizeof *t);
  t->g = new_graph(opset);
  t->op = op;
  t->n_in = n_in, t->n_out = n_out;
  int in[MAXIO], out[MAXIO], idx;
  for (int k = 0; k < n_in; k++)
    if (kiln_edit_add_value(t->g, "in", &in[k])) exit(2);
  for (int k = 0; k < n_out; k++) {
    if (kiln_edit_add_value(t->g, "out", &out[k])) exit(2);
    t->used[k] = true;
  }
  if (kiln_edit_insert_node(t->g, 0, "node", op, "", n_in, in, n_out, out, &idx)) exit(2);
  t->n = &t->g->nodes[idx];
  for (int k = 0; k < n_in; k++) t->inp[k] = &t->in[k];
}

static void tc_omit_out(tc *t, int k) {
  t->used[k] = false;
  t->n->out[k] = -1;
}

static void tc_omit_in(tc *t, int k) {
  t->inp[k] = NULL;
  t->n->in[k] = -1;
}

/* Input k: float32 of the given shape, uniform in [-scale, scale). */
static kiln_tensor *tc_f32(tc *t, int k, int rank, const int64_t *dims, double scale) {
  if (kiln_tensor_alloc(&t->in[k], KILN_F32, rank, dims)) exit(2);
  float *p = t->in[k].data;
  for (int64_t i = 0; i < t->in[k].numel; i++) p[i] = (float)(rnd() * scale);
  return &t->in[k];
}

static kiln_tensor *tc_typed(tc *t, int k, kiln_dtype dt, int rank, const int64_t *dims) {
  if (kiln_tensor_alloc(&t->in[k], dt, rank, dims)) exit(2);
  for (int64_t i = 0; i < t->in[k].numel; i++) kiln_set_f(&t->in[k], i, rnd() * 100);
  return &t->in[k];
}

static kiln_tensor *tc_ints(tc *t, int k, kiln_dtype dt, int rank, const int64_t *dims, const int64_t *vals) {
  if (kiln_tensor_alloc(&t->in[k], dt, rank, dims)) exit(2);
  for (int64_t i = 0; i < t->in[k].numel; i++) kiln_set_i(&t->in[k], i, vals[i]);
  return &t->in[k];
}

/* Input k read through a transposed view (last two dims swapped) of a
 * dense tensor of the swapped shape. */
static void tc_view_t(tc *t, int k, kiln_dtype dt, int rank, const int64_t *dims) {
  int64_t bd[KILN_MAX_RANK], st[KILN_MAX_RANK], bst[KILN_MAX_RANK];
  memcpy(bd, dims, sizeof(int64_t) * (size_t)rank);
  bd[rank - 1] = dims[rank - 2], bd[rank - 2] = dims[rank - 1];
  if (dt == KILN_F32)
    tc_f32(t, k, rank, bd, 1);
  else
    tc_typed(t, k, dt, rank, bd);
  kiln_strides(rank, bd, bst);
  memcpy(st, bst, sizeof st);
  st[rank - 1] = bst[rank - 2], st[rank - 2] = bst[rank - 1];
  kiln_tensor_view(&t->view[k], &t->in[k], rank, dims, st, 0);
  t->inp[k] = &t->view[k];
}

/* Input k read through a view that reverses every dim (negative strides). */
static void tc_view_rev(tc *t, int k, int rank, const int64_t *dims) {
  int64_t st[KILN_MAX_RANK], off = 0;
  tc_f32(t, k, rank, dims, 1);
  kiln_strides(rank, dims, st);
  for (int d = 0; d < rank; d++) off += (dims[d] - 1) * st[d], st[d] = -st[d];
  kiln_tensor_view(&t->view[k], &t->in[k], rank, dims, st, off);
  t->inp[k] = &t->view[k];
}

static void tc_end(tc *t) {
  for (int k = 0; k < MAXIO; k++) kiln_tensor_release(&t->in[k]);
  kiln_graph_free(t->g);
}

static bool close_to(double a, double b, double rtol, double atol) {
  if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
  if (isinf(a) || isinf(b)) return a == b;
  return fabs(a - b) <= atol + rtol * fabs(b);
}

enum { OWN, DECLINE };

/* Runs the case on the reference kernel and on ours under each ISA. OWN:
 * ours must take it, give the reference's status and (within rtol/atol;
 * 0/0: exactly) its outputs, the same under both ISAs bit for bit.
 * DECLINE: ours must decline without touching anything. */
static void tc_run(tc *t, const char *what, int expect, double rtol, double atol) {
  const kiln_op_def *rd = kiln_ref_find_op("", t->op);
  const kiln_cpu_kernel_def *kd = kiln_cpu_kernel_find("", t->op);
  if (!rd || !kd) {
    CHECK(0, "%s: no kernel for %s", what, t->op);
    return;
  }
  kiln_tensor ref[MAXIO], own[2][MAXIO];
  memset(ref, 0, sizeof ref);
  memset(own, 0, sizeof own);
  kiln_op_call rc = {t->g, t->n, t->n->opset, t->n_in, t->inp, t->n_out, ref, t->used};
  kiln_error_clear();
  kiln_status rs = rd->run(&rc);
  char rmsg[512];
  snprintf(rmsg, sizeof rmsg, "%s", kiln_last_error());
  void *slots[2][MAXIO] = {{0}};
  for (int isa = 0; isa < nisa; isa++) {
    kiln_nn_force_isa((kiln_vm_isa)isa);
    for (int k = 0; k < t->n_out; k++) { /* reservations full of garbage */
      size_t cap = (rs == KILN_OK && ref[k].dtype ? kiln_tensor_bytes(&ref[k]) : 256) + 64;
      slots[isa][k] = kiln_malloc(cap);
      if (!slots[isa][k]) exit(2);
      memset(slots[isa][k], 0xff, cap);
      own[isa][k].data = slots[isa][k];
      own[isa][k].capacity = cap;
    }
    kiln_op_call oc = rc;
    oc.out = own[isa];
    bool declined = false;
    kiln_error_clear();
    kiln_status s = kd->run(&oc, NULL, &declined);
    if (expect == DECLINE) {
      bool untouched = true;
      for (int k = 0; k < t->n_out; k++) untouched &= own[isa][k].dtype == KILN_UNDEFINED;
      CHECK(declined && s == KILN_OK && untouched && !*kiln_last_error(), "%s [%s]: declined %d status %s, msg '%s'",
            what, kiln_vm_isa_name((kiln_vm_isa)isa), declined, kiln_status_name(s), kiln_last_error());
    } else {
      CHECK(!declined, "%s [%s]: declined", what, kiln_vm_isa_name((kiln_vm_isa)isa));
      CHECK(s == rs, "%s [%s]: status %s, the reference's %s (%s / %s)", what, kiln_vm_isa_name((kiln_vm_isa)isa),
            kiln_status_name(s), kiln_status_name(rs), kiln_last_error(), rmsg);
      if (s == KILN_E_INVALID_VALUE)
        CHECK(!strcmp(kiln_last_error(), rmsg), "%s: message '%s', the reference's '%s'", what, kiln_last_error(),
              rmsg);
      for (int k = 0; k < t->n_out && !s && !rs && !declined; k++) {
        if (!t->used[k]) continue;
        const kiln_tensor *a = &own[isa][k], *b = &ref[k];
        bool shape = a->dtype == b->dtype && a->rank == b->rank && a->numel == b->numel &&
                     !memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank);
        CHECK(shape, "%s [%s]: output %d dtype/shape differ", what, kiln_vm_isa_name((kiln_vm_isa)isa), k);
        if (!shape) continue;
        int64_t bad = -1;
        for (int64_t i = 0; i < a->numel && bad < 0; i++) {
          if (kiln_dtype_is_float(a->dtype)) {
            double x = kiln_get_f(a, i), y = kiln_get_f(b, i);
            if (rtol == 0 && atol == 0 ? !(x == y || (isnan(x) && isnan(y))) : !close_to(x, y, rtol, atol)) bad = i;
          } else if (kiln_get_i(a, i) != kiln_get_i(b, i)) {
            bad = i;
          }
        }
        CHECK(bad < 0, "%s [%s]: output %d element %lld: %.9g, the reference's %.9g", what,
              kiln_vm_isa_name((kiln_vm_isa)isa), k, (long long)bad, bad >= 0 ? kiln_get_f(a, bad) : 0.0,
              bad >= 0 ? kiln_get_f(b, bad) : 0.0);
        if (isa == 1 && own[0][k].dtype == a->dtype && own[0][k].numel == a->numel) {
          int64_t diff = -1;
          for (int64_t i = 0; i < a->numel && diff < 0; i++) {
            double x = kiln_get_f(a, i), y = kiln_get_f(&own[0][k], i);
            if (!(x == y || (isnan(x) && isnan(y)))) diff = i;
          }
          CHECK(diff < 0, "%s: avx2 differs from base at output %d element %lld", what, k, (long long)diff);
        }
      }
    }
  }
  for (int isa = 0; isa < nisa; isa++)
    for (int k = 0; k < t->n_out; k++) {
      if (own[isa][k].owns) kiln_tensor_release(&own[isa][k]);
      kiln_free(slots[isa][k]);
    }
  for (int k = 0; k < t->n_out; k++) kiln_tensor_release(&ref[k]);
  kiln_nn_force_isa(KILN_VM_NISA);
}

#define D(...) ((const int64_t[]){__VA_ARGS__})
#define I(...) ((const int64_t[]){__VA_ARGS__}), (sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

/* ---- pooling ---- */

typedef struct pool_case {
  const char *name;
  int rank;
  int64_t dims[5];
  int nsp;
  int64_t k[2], s[2], pads[4], dil[2];
  int ceil, cip;
  const char *auto_pad;
} pool_case;

static void pool_attrs(tc *t, const pool_case *p, bool dil) {
  kiln_edit_set_ints(t->n, "kernel_shape", p->k, (size_t)p->nsp);
  if (p->s[0]) kiln_edit_set_ints(t->n, "strides", p->s, (size_t)p->nsp);
  if (p->pads[0] || p->pads[1] || p->pads[2] || p->pads[3])
    kiln_edit_set_ints(t->n, "pads", p->pads, 2 * (size_t)p->nsp);
  if (dil && p->dil[0]) kiln_edit_set_ints(t->n, "dilations", p->dil, (size_t)p->nsp);
  if (p->ceil) kiln_edit_set_int(t->n, "ceil_mode", 1);
  if (p->auto_pad) kiln_edit_set_string(t->n, "auto_pad", p->auto_pad);
}

static void test_pool(void) {
  static const pool_case cases[] = {
      {"k3 s1", 4, {1, 3, 7, 9}, 2, {3, 3}, {0}, {0}, {0}, 0, 0, NULL},
      {"resnet k3 s2 p1", 4, {1, 2, 28, 28}, 2, {3, 3}, {2, 2}, {1, 1, 1, 1}, {0}, 0, 0, NULL},
      {"k3 s2 p1 odd", 4, {2, 3, 13, 37}, 2, {3, 3}, {2, 2}, {1, 1, 1, 1}, {0}, 0, 1, NULL},
      {"k2 s2", 4, {1, 4, 8, 8}, 2, {2, 2}, {2, 2}, {0}, {0}, 0, 0, NULL},
      {"k2 s2 wide", 4, {1, 2, 6, 53}, 2, {2, 2}, {2, 2}, {0}, {0}, 0, 0, NULL},
      {"ceil k3 s2", 4, {1, 1, 10, 10}, 2, {3, 3}, {2, 2}, {0}, {0}, 1, 0, NULL},
      {"ceil k3 s2 pads", 4, {1, 2, 11, 12}, 2, {3, 3}, {2, 2}, {1, 0, 1, 1}, {0}, 1, 1, NULL},
      {"asym pads", 4, {1, 2, 9, 11}, 2, {3, 2}, {1, 1}, {0, 1, 2, 0}, {0}, 0, 0, NULL},
      {"stride 3", 4, {1, 3, 17, 29}, 2, {4, 3}, {3, 3}, {1, 2, 2, 1}, {0}, 0, 1, NULL},
      {"k1", 4, {1, 2, 5, 7}, 2, {1, 1}, {1, 1}, {0}, {0}, 0, 0, NULL},
      {"SAME_UPPER", 4, {1, 2, 10, 13}, 2, {3, 4}, {2, 3}, {0}, {0}, 0, 0, "SAME_UPPER"},
      {"SAME_LOWER", 4, {1, 2, 10, 13}, 2, {3, 4}, {2, 3}, {0}, {0}, 0, 1, "SAME_LOWER"},
      {"VALID", 4, {1, 2, 10, 13}, 2, {3, 3}, {2, 2}, {0}, {0}, 0, 0, "VALID"},
      /* a stride over the kernel: SAME's total pad comes out negative, taken as 0 */
      {"SAME_UPPER stride over kernel", 4, {1, 2, 11, 11}, 2, {1, 2}, {4, 4}, {0}, {0}, 0, 0, "SAME_UPPER"},
      {"SAME_LOWER stride over kernel", 4, {1, 2, 11, 10}, 2, {1, 1}, {2, 4}, {0}, {0}, 0, 0, "SAME_LOWER"},
      {"1-D", 3, {2, 3, 17}, 1, {3}, {2}, {1, 1}, {0}, 0, 0, NULL},
      {"1-D ceil", 3, {1, 2, 23}, 1, {4}, {3}, {0, 2}, {0}, 1, 1, NULL},
      {"one pixel", 4, {1, 1, 1, 1}, 2, {1, 1}, {0}, {0}, {0}, 0, 0, NULL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    const pool_case *p = &cases[i];
    char what[128];
    tc t;
    for (int idx = 0; idx < 3; idx++) { /* no Indices; Indices row-major; column-major */
      tc_begin(&t, 12, "MaxPool", 1, 2);
      if (!idx) tc_omit_out(&t, 1);
      kiln_tensor *x = tc_f32(&t, 0, p->rank, p->dims, 1);
      if (idx && x->numel > 20) { /* ties and NaNs for the index rules */
        float *d = x->data;
        for (int64_t k = 0; k < x->numel; k += 3) d[k] = 0.5f;
        d[7] = d[9] = NAN;
      }
      pool_attrs(&t, p, false);
      if (idx == 2) kiln_edit_set_int(t.n, "storage_order", 1);
      snprintf(what, sizeof what, "MaxPool %s%s", p->name, idx == 0 ? "" : idx == 1 ? " Indices" : " Indices col-major");
      tc_run(&t, what, OWN, 0, 0);
      tc_end(&t);
    }

    tc_begin(&t, 11, "AveragePool", 1, 1);
    tc_f32(&t, 0, p->rank, p->dims, 1);
    pool_attrs(&t, p, false);
    if (p->cip) kiln_edit_set_int(t.n, "count_include_pad", 1);
    snprintf(what, sizeof what, "AveragePool %s", p->name);
    tc_run(&t, what, OWN, 1e-5, 1e-6);
    tc_end(&t);
  }
  /* dilations, NaN, storage_order, Indices */
  tc t;
  tc_begin(&t, 12, "MaxPool", 1, 1);
  tc_f32(&t, 0, 4, D(1, 2, 12, 19), 1);
  kiln_edit_set_ints(t.n, "kernel_shape", I(3, 2));
  kiln_edit_set_ints(t.n, "dilations", I(2, 3));
  kiln_edit_set_ints(t.n, "pads", I(2, 1, 1, 2));
  kiln_edit_set_ints(t.n, "strides", I(1, 2));
  kiln_edit_set_int(t.n, "storage_order", 1);
  ((float *)t.in[0].data)[40] = NAN;
  ((float *)t.in[0].data)[41] = INFINITY;
  tc_run(&t, "MaxPool dilations NaN storage_order", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 12, "MaxPool", 1, 2);
  tc_f32(&t, 0, 4, D(1, 2, 8, 8), 1);
  kiln_edit_set_ints(t.n, "kernel_shape", I(2, 2));
  kiln_edit_set_ints(t.n, "dilations", I(2, 1));
  kiln_edit_set_int(t.n, "ceil_mode", 1);
  tc_run(&t, "MaxPool with Indices, dilations, ceil_mode", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 12, "MaxPool", 1, 1);
  tc_f32(&t, 0, 5, D(1, 2, 4, 4, 4), 1);
  kiln_edit_set_ints(t.n, "kernel_shape", I(2, 2, 2));
  tc_run(&t, "MaxPool 3-D", DECLINE, 0, 0);
  tc_end(&t);
  tc_begin(&t, 12, "MaxPool", 1, 1);
  tc_typed(&t, 0, KILN_F64, 4, D(1, 2, 8, 8));
  kiln_edit_set_ints(t.n, "kernel_shape", I(2, 2));
  tc_run(&t, "MaxPool float64", DECLINE, 0, 0);
  tc_end(&t);
  tc_begin(&t, 12, "MaxPool", 1, 1);
  tc_f32(&t, 0, 4, D(1, 2, 3, 3), 1);
  kiln_edit_set_ints(t.n, "kernel_shape", I(5, 5));
  tc_run(&t, "MaxPool kernel larger than the input", DECLINE, 0, 0);
  tc_end(&t);

  /* global pools */
  static const struct {
    int rank;
    int64_t dims[5];
  } gs[] = {{4, {1, 5, 7, 7}}, {4, {2, 3, 1, 1}}, {5, {1, 2, 3, 5, 2}}, {3, {1, 2, 100}}, {4, {1, 3, 13, 17}}};
  for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) {
    tc_begin(&t, 13, "GlobalAveragePool", 1, 1);
    tc_f32(&t, 0, gs[i].rank, gs[i].dims, 1);
    tc_run(&t, "GlobalAveragePool", OWN, 1e-5, 1e-6);
    tc_end(&t);
    tc_begin(&t, 13, "GlobalMaxPool", 1, 1);
    tc_f32(&t, 0, gs[i].rank, gs[i].dims, 1);
    if (i == 4) ((float *)t.in[0].data)[250] = NAN;
    tc_run(&t, "GlobalMaxPool", OWN, 0, 0);
    tc_end(&t);
  }
}

/* MaxPool by bands (nn.h kiln_nn_pool_bands): a finished block that starts and ends inside rows, over an argument
 * whose other elements are NaN (not made yet), makes exactly the output rows whose windows (clipped to the plane)
 * lie in the block's whole rows, the reference's values, and touches nothing else; _finish then makes the rest: the
 * reference's output, bit for bit, under each ISA. */
static void test_pool_bands(void) {
  static const pool_case cases[] = {
      {"3x3 s2 pads 1 (max3x3s2)", 4, {2, 3, 15, 13}, 2, {3, 3}, {2, 2}, {1, 1, 1, 1}, {0}, 0, 0, NULL},
      {"2x2 s2 (max2x2s2)", 4, {1, 3, 15, 13}, 2, {2, 2}, {2, 2}, {0}, {0}, 0, 0, NULL},
      {"k3 s1 pads 1", 4, {1, 3, 15, 13}, 2, {3, 3}, {0}, {1, 1, 1, 1}, {0}, 0, 0, NULL},
      {"k2 dilation 2 pads 0,1,1,0", 4, {1, 3, 15, 13}, 2, {2, 2}, {0}, {0, 1, 1, 0}, {2, 2}, 0, 0, NULL},
      {"3x3 s2 ceil_mode", 4, {1, 3, 15, 13}, 2, {3, 3}, {2, 2}, {0}, {0}, 1, 0, NULL},
  };
  for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
    const pool_case *pc = &cases[ci];
    for (int isa = 0; isa < nisa; isa++) {
      kiln_nn_force_isa((kiln_vm_isa)isa);
      tc t;
      tc_begin(&t, 17, "MaxPool", 1, 1);
      kiln_tensor *x = tc_f32(&t, 0, 4, pc->dims, 2.0);
      pool_attrs(&t, pc, true);
      kiln_tensor ref = {0};
      bool used = true;
      kiln_op_call rc = {t.g, t.n, t.n->opset, 1, t.inp, 1, &ref, &used};
      const kiln_op_def *rd = kiln_ref_find_op("", "MaxPool");
      if (!rd || rd->run(&rc)) {
        CHECK(0, "%s: the reference MaxPool ran", pc->name);
        tc_end(&t);
        continue;
      }
      int64_t H = pc->dims[2], W = pc->dims[3], OH = ref.dims[2], OW = ref.dims[3], HW = H * W;
      float *xb = kiln_malloc((size_t)x->numel * sizeof *xb), *y = kiln_malloc((size_t)ref.numel * sizeof *y);
      if (!xb || !y) exit(2);
      for (int64_t i = 0; i < x->numel; i++) xb[i] = NAN;
      for (int64_t i = 0; i < ref.numel; i++) y[i] = 12345.0f;
      kiln_nn_pool_bands *b = kiln_nn_pool_bands_new(t.n, x->dims, xb, y, ref.dims);
      CHECK(b != NULL, "%s: bands made", pc->name);
      if (b) {
        /* plane 1, from row 1 column 3 to row 10 column 5: whole rows [2, 10) */
        int64_t start = HW + W + 3, n = 9 * W + 2, r0 = 2, r1 = 10;
        const float *xd = x->data, *rd_y = ref.data;
        memcpy(xb + start, xd + start, (size_t)n * sizeof *xb);
        kiln_nn_pool_bands_done(b, start, n, NULL);
        int64_t sh = pc->s[0] ? pc->s[0] : 1, dh = pc->dil[0] ? pc->dil[0] : 1;
        int wrong = 0, made = 0;
        for (int64_t p = 0; p < ref.numel / (OH * OW); p++)
          for (int64_t oh = 0; oh < OH; oh++) {
            int64_t lo = oh * sh - pc->pads[0], hi = lo + (pc->k[0] - 1) * dh + 1;
            lo = lo < 0 ? 0 : lo, hi = hi > H ? H : hi;
            bool inside = p == 1 && lo >= r0 && hi <= r1;
            for (int64_t ow = 0; ow < OW; ow++) {
              float v = y[(p * OH + oh) * OW + ow];
              wrong += inside ? v != rd_y[(p * OH + oh) * OW + ow] : v != 12345.0f;
            }
            made += inside;
          }
        CHECK(made > 0 && !wrong, "%s (isa %d): a block made its %d rows, the reference's, and nothing else (%d wrong)",
              pc->name, isa, made, wrong);
        memcpy(xb, xd, (size_t)x->numel * sizeof *xb);
        int64_t banded = kiln_nn_pool_bands_finish(b);
        CHECK(banded == made, "%s (isa %d): finish counts the rows the bands made (%lld, %d)", pc->name, isa,
              (long long)banded, made);
        CHECK(!memcmp(y, ref.data, (size_t)ref.numel * sizeof *y), "%s (isa %d): then the rest: the reference's output",
              pc->name, isa);
        kiln_nn_pool_bands_free(b);
      }
      kiln_free(xb);
      kiln_free(y);
      kiln_tensor_release(&ref);
      tc_end(&t);
    }
  }
  kiln_nn_force_isa(KILN_VM_NISA);
}

/* MaxPool by bands on random geometry (kernel, stride, dilation 1-3, pads, ceil_mode, planes of 1-12 x 1-20, 1-6
 * planes): the argument cut into random blocks (up to 3 planes, starting and ending anywhere) finished in a random
 * order, every element not finished yet NaN; then _finish: the reference's output bit for bit (a row pooled before
 * its inputs were final would keep a NaN). */
static uint64_t rnd_u(void) { return (uint64_t)((rnd() + 1.0) * 1e9); } /* uniform in [0, 2e9) */

static void test_pool_bands_random(void) {
  int runs = 0, bad = 0, skipped = 0;
  for (int it = 0; it < 400; it++) {
    pool_case pc = {"random", 4, {1 + it % 2, 1 + it % 3, 1 + (int64_t)(rnd_u() % 12), 1 + (int64_t)(rnd_u() % 20)}, 2,
                    {1 + (int64_t)(rnd_u() % 3), 1 + (int64_t)(rnd_u() % 3)},
                    {1 + (int64_t)(rnd_u() % 3), 1 + (int64_t)(rnd_u() % 3)},
                    {0},
                    {1 + (int64_t)(rnd_u() % 3), 1 + (int64_t)(rnd_u() % 3)},
                    (int)(rnd_u() % 2),
                    0,
                    NULL};
    for (int i = 0; i < 4; i++) pc.pads[i] = (int64_t)(rnd_u() % (uint64_t)pc.k[i % 2]);
    tc t;
    tc_begin(&t, 17, "MaxPool", 1, 1);
    kiln_tensor *x = tc_f32(&t, 0, 4, pc.dims, 2.0);
    pool_attrs(&t, &pc, true);
    kiln_tensor ref = {0};
    bool used = true;
    kiln_op_call rc = {t.g, t.n, t.n->opset, 1, t.inp, 1, &ref, &used};
    const kiln_op_def *rd = kiln_ref_find_op("", "MaxPool");
    kiln_error_clear();
    float *xb = NULL, *y = NULL;
    kiln_nn_pool_bands *b = NULL;
    if (!rd || rd->run(&rc) || ref.numel == 0) {
      skipped++; /* geometry the reference refuses (no output) */
      kiln_error_clear();
      goto next;
    }
    xb = kiln_malloc((size_t)x->numel * sizeof *xb), y = kiln_malloc((size_t)ref.numel * sizeof *y);
    if (!xb || !y) exit(2);
    for (int64_t i = 0; i < x->numel; i++) xb[i] = NAN;
    for (int64_t i = 0; i < ref.numel; i++) y[i] = 12345.0f;
    b = kiln_nn_pool_bands_new(t.n, x->dims, xb, y, ref.dims);
    if (!b) {
      bad++;
      CHECK(0, "random bands %d: not made for a geometry the reference runs", it);
      goto next;
    }
    {
      int64_t starts[64], n = 0, plane = pc.dims[2] * pc.dims[3];
      for (int64_t at = 0; at < x->numel && n < 63; n++) {
        starts[n] = at;
        at += 1 + (int64_t)(rnd_u() % (uint64_t)(3 * plane));
      }
      starts[n] = x->numel;
      int order[64];
      for (int i = 0; i < n; i++) order[i] = i;
      for (int i = (int)n - 1; i > 0; i--) { /* a random order */
        int r = (int)(rnd_u() % (uint64_t)(i + 1)), tmp = order[i];
        order[i] = order[r], order[r] = tmp;
      }
      const float *xd = x->data;
      for (int i = 0; i < n; i++) {
        int64_t a = starts[order[i]], e = order[i] + 1 < n ? starts[order[i] + 1] : x->numel;
        memcpy(xb + a, xd + a, (size_t)(e - a) * sizeof *xb);
        kiln_nn_pool_bands_done(b, a, e - a, NULL);
      }
      memcpy(xb, xd, (size_t)x->numel * sizeof *xb); /* (already all of it: the last block's end is numel) */
      kiln_nn_pool_bands_finish(b);
      runs++;
      if (memcmp(y, ref.data, (size_t)ref.numel * sizeof *y)) {
        bad++;
        CHECK(0, "random bands %d: k %lldx%lld s %lldx%lld d %lldx%lld pads %lld,%lld,%lld,%lld ceil %d on %lldx%lld: "
                 "not the reference's output", it, (long long)pc.k[0], (long long)pc.k[1], (long long)pc.s[0],
              (long long)pc.s[1], (long long)pc.dil[0], (long long)pc.dil[1], (long long)pc.pads[0],
              (long long)pc.pads[1], (long long)pc.pads[2], (long long)pc.pads[3], pc.ceil, (long long)pc.dims[2],
              (long long)pc.dims[3]);
      }
    }
  next:
    kiln_nn_pool_bands_free(b);
    kiln_free(xb);
    kiln_free(y);
    kiln_tensor_release(&ref);
    tc_end(&t);
  }
  printf("unit_cpu_nn: MaxPool by bands on %d random geometries (%d the reference refused)\n", runs, skipped);
  CHECK(runs >= 300 && !bad, "random bands: %d geometries in random blocks the reference's output (%d skipped)", runs,
        skipped);
}

/* ---- softmax ---- */

static void test_softmax(void) {
  static const struct {
    int opset, rank;
    int64_t dims[4];
    int64_t axis; /* 99: default */
    int expect;
  } cs[] = {
      {13, 2, {7, 33}, 99, OWN},   {13, 2, {64, 1000}, -1, OWN},   {13, 2, {1, 1}, 99, OWN},
      {13, 3, {2, 3, 1}, 1, OWN},  {11, 3, {3, 4, 5}, 99, OWN},    {11, 3, {3, 4, 5}, 0, OWN},
      {11, 3, {3, 4, 5}, -1, OWN}, {13, 4, {1, 4, 9, 17}, 3, OWN}, {13, 3, {2, 3, 4}, 1, OWN}, {13, 4, {2, 7, 5, 600}, 1, OWN}, {13, 3, {3, 5, 9}, 0, OWN},
      {13, 1, {9}, 0, OWN},
  };
  for (int log_form = 0; log_form < 2; log_form++)
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
      tc t;
      char what[96];
      snprintf(what, sizeof what, "%s opset %d case %zu", log_form ? "LogSoftmax" : "Softmax", cs[i].opset, i);
      tc_begin(&t, cs[i].opset, log_form ? "LogSoftmax" : "Softmax", 1, 1);
      kiln_tensor *x = tc_f32(&t, 0, cs[i].rank, cs[i].dims, 8);
      if (cs[i].axis != 99) kiln_edit_set_int(t.n, "axis", cs[i].axis);
      if (i == 0) { /* extremes in one row: -inf, a huge value */
        ((float *)x->data)[3] = -INFINITY;
        ((float *)x->data)[40] = 80.0f;
        ((float *)x->data)[41] = -90.0f;
      }
      tc_run(&t, what, cs[i].expect, 2e-5, 1e-6);
      tc_end(&t);
    }
  tc t;
  tc_begin(&t, 13, "Softmax", 1, 1);
  tc_f32(&t, 0, 2, D(3, 20), 1);
  ((float *)t.in[0].data)[25] = NAN;
  tc_run(&t, "Softmax with NaN", OWN, 2e-5, 1e-6);
  tc_end(&t);
  tc_begin(&t, 13, "Softmax", 1, 1);
  tc_view_t(&t, 0, KILN_F32, 2, D(5, 6));
  tc_run(&t, "Softmax of a view", DECLINE, 0, 0);
  tc_end(&t);
}

/* ---- normalisation ---- */

static void test_norm(void) {
  static const struct {
    int rank;
    int64_t dims[4];
    int64_t axis;
    int srank;
    int64_t sdims[4];
    bool bias, stats;
    int expect;
  } cs[] = {
      {2, {5, 768}, -1, 1, {768}, true, false, OWN},       {2, {4, 37}, 99, 1, {37}, true, true, OWN},
      {3, {2, 3, 5}, 1, 2, {3, 5}, false, true, OWN},      {3, {2, 3, 5}, 1, 3, {1, 3, 5}, true, false, OWN},
      {3, {2, 3, 5}, 0, 3, {2, 3, 5}, true, true, OWN},    {2, {1, 1}, -1, 1, {1}, true, true, OWN},
      {3, {2, 3, 5}, 1, 1, {5}, true, false, DECLINE},     {3, {2, 3, 5}, -1, 2, {1, 5}, true, false, OWN},
      {3, {2, 3, 5}, -1, 2, {3, 5}, true, false, DECLINE},
  };
  for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
    tc t;
    char what[64];
    snprintf(what, sizeof what, "LayerNormalization case %zu", i);
    tc_begin(&t, 17, "LayerNormalization", i == 2 ? 2 : 3, 3); /* no B: absent or omitted */
    if (!cs[i].bias && i != 2) tc_omit_in(&t, 2);
    tc_f32(&t, 0, cs[i].rank, cs[i].dims, 3);
    tc_f32(&t, 1, cs[i].srank, cs[i].sdims, 2);
    if (cs[i].bias) tc_f32(&t, 2, cs[i].srank, cs[i].sdims, 1);
    if (cs[i].axis != 99) kiln_edit_set_int(t.n, "axis", cs[i].axis);
    if (i == 1) kiln_edit_set_float(t.n, "epsilon", 1e-3f);
    if (!cs[i].stats) tc_omit_out(&t, 1), tc_omit_out(&t, 2);
    tc_run(&t, what, cs[i].expect, 1e-4, 2e-5);
    tc_end(&t);
  }
  tc t;
  tc_begin(&t, 17, "LayerNormalization", 3, 3);
  tc_f32(&t, 0, 2, D(3, 8), 1);
  tc_f32(&t, 1, 1, D(8), 1);
  tc_f32(&t, 2, 1, D(8), 1);
  kiln_edit_set_int(t.n, "stash_type", KILN_F64);
  tc_run(&t, "LayerNormalization stash float64 with stats", DECLINE, 0, 0);
  tc_omit_out(&t, 1), tc_omit_out(&t, 2);
  tc_run(&t, "LayerNormalization stash float64, no stats", OWN, 1e-4, 2e-5);
  tc_end(&t);

  static const struct {
    int opset, rank;
    int64_t dims[4];
  } bn[] = {{15, 4, {2, 3, 5, 7}}, {7, 3, {2, 3, 4}}, {9, 2, {4, 6}}, {14, 4, {1, 9, 1, 1}}};
  for (size_t i = 0; i < sizeof bn / sizeof *bn; i++) {
    tc_begin(&t, bn[i].opset, "BatchNormalization", 5, 1);
    tc_f32(&t, 0, bn[i].rank, bn[i].dims, 2);
    int64_t C = bn[i].dims[1];
    tc_f32(&t, 1, 1, &C, 1);
    tc_f32(&t, 2, 1, &C, 1);
    tc_f32(&t, 3, 1, &C, 1);
    kiln_tensor *v = tc_f32(&t, 4, 1, &C, 1);
    for (int64_t c = 0; c < C; c++) ((float *)v->data)[c] = fabsf(((float *)v->data)[c]) + 0.1f;
    kiln_edit_set_float(t.n, "epsilon", 1e-3f);
    tc_run(&t, "BatchNormalization", OWN, 1e-5, 1e-5);
    tc_end(&t);
  }
  static const int64_t in_dims[][4] = {{2, 3, 11, 1}, {1, 4, 5, 7}, {3, 1, 1, 1}};
  for (int i = 0; i < 3; i++) {
    tc_begin(&t, 6, "InstanceNormalization", 3, 1);
    tc_f32(&t, 0, 4, in_dims[i], 2);
    tc_f32(&t, 1, 1, &in_dims[i][1], 1);
    tc_f32(&t, 2, 1, &in_dims[i][1], 1);
    tc_run(&t, "InstanceNormalization", OWN, 1e-4, 2e-5);
    tc_end(&t);
  }
  /* instances far from zero (1e5 + deviations of ~1): the deviations are
     kept; x * a + (B - mean * a) was off by up to 0.016 here */
  static const int64_t far_dims[] = {1, 2, 4, 9};
  tc_begin(&t, 6, "InstanceNormalization", 3, 1);
  kiln_tensor *fx = tc_f32(&t, 0, 4, far_dims, 1);
  for (int64_t i = 0; i < fx->numel; i++) ((float *)fx->data)[i] += i < fx->numel / 2 ? 1e5f : -3e4f;
  tc_f32(&t, 1, 1, &far_dims[1], 1);
  tc_f32(&t, 2, 1, &far_dims[1], 1);
  tc_run(&t, "InstanceNormalization far from zero", OWN, 1e-4, 1e-4);
  tc_end(&t);
}

/* ---- reductions ---- */

static void test_reduce(void) {
  static const char *const ops[] = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceSumSquare", "ReduceL2"};
  static const struct {
    int rank;
    int64_t dims[4];
    int na; /* -1: no axes */
    int64_t axes[3];
    int keep;
    int expect;
  } cs[] = {
      {3, {5, 7, 9}, 1, {1}, 1, OWN},        {3, {5, 7, 9}, 1, {2}, 0, OWN},      {3, {5, 7, 9}, 1, {0}, 1, OWN},
      {3, {5, 7, 9}, 1, {-1}, 0, OWN},       {3, {5, 7, 9}, -1, {0}, 1, OWN},     {3, {5, 7, 9}, 2, {1, 2}, 0, OWN},
      {3, {5, 7, 9}, 2, {0, 2}, 1, DECLINE}, {4, {2, 1, 40, 64}, 1, {2}, 0, OWN}, {2, {1, 1}, 1, {0}, 1, DECLINE},
      {2, {3, 1000}, 1, {1}, 1, OWN},        {3, {4, 3, 1500}, 1, {1}, 1, OWN},   {2, {17, 1}, 2, {0, 1}, 0, OWN},
  };
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++)
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
      for (int form = 0; form < 2; form++) { /* attribute (opset 11) or input (13, ReduceSum only) */
        bool input = form == 1;
        if (input && o != 0) continue;
        tc t;
        char what[96];
        snprintf(what, sizeof what, "%s case %zu (%s)", ops[o], i, input ? "axes input" : "axes attribute");
        int opset = input ? 13 : o == 0 ? 11 : 13;
        tc_begin(&t, opset, ops[o], input && cs[i].na >= 0 ? 2 : 1, 1);
        kiln_tensor *x = tc_f32(&t, 0, cs[i].rank, cs[i].dims, 1);
        if (i == 1 && (o == 2 || o == 3)) ((float *)x->data)[17] = NAN;
        if (cs[i].na >= 0) {
          if (input) {
            int64_t na = cs[i].na;
            tc_ints(&t, 1, KILN_I64, 1, &na, cs[i].axes);
          } else {
            kiln_edit_set_ints(t.n, "axes", cs[i].axes, (size_t)cs[i].na);
          }
        }
        if (!cs[i].keep) kiln_edit_set_int(t.n, "keepdims", 0);
        bool exact = o == 2 || o == 3;
        tc_run(&t, what, cs[i].expect, exact ? 0 : 1e-5, exact ? 0 : 1e-5);
        tc_end(&t);
      }
  tc t;
  tc_begin(&t, 13, "ReduceSum", 1, 1);
  tc_f32(&t, 0, 2, D(3, 4), 1);
  kiln_edit_set_int(t.n, "noop_with_empty_axes", 1);
  tc_run(&t, "ReduceSum noop_with_empty_axes", DECLINE, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "ReduceSum", 2, 1);
  tc_f32(&t, 0, 2, D(3, 4), 1);
  tc_ints(&t, 1, KILN_I32, 1, D(1), D(-2));
  tc_run(&t, "ReduceSum int32 axes", OWN, 1e-5, 1e-5);
  tc_end(&t);
  tc_begin(&t, 13, "ReduceSum", 2, 1);
  tc_typed(&t, 0, KILN_I64, 2, D(3, 4));
  tc_ints(&t, 1, KILN_I64, 1, D(1), D(1));
  tc_run(&t, "ReduceSum int64 data", DECLINE, 0, 0);
  tc_end(&t);
}

/* ---- ArgMax, ArgMin ---- */

static void test_arg(void) {
  static const struct {
    int rank;
    int64_t dims[3];
    int64_t axis;
    int keep, last;
  } cs[] = {{2, {5, 37}, 1, 1, 0}, {2, {5, 37}, -1, 0, 1}, {3, {4, 9, 3}, 1, 1, 0}, {3, {4, 9, 3}, 0, 0, 1},
            {1, {1}, 0, 1, 0},     {2, {6, 8}, 1, 1, 1},   {3, {2, 3, 17}, 2, 0, 0}};
  for (int mx = 0; mx < 2; mx++)
    for (size_t i = 0; i < sizeof cs / sizeof *cs; i++)
      for (int ties = 0; ties < 2; ties++) {
        tc t;
        char what[96];
        snprintf(what, sizeof what, "%s case %zu%s", mx ? "ArgMax" : "ArgMin", i, ties ? " ties+NaN" : "");
        tc_begin(&t, 13, mx ? "ArgMax" : "ArgMin", 1, 1);
        kiln_tensor *x = tc_f32(&t, 0, cs[i].rank, cs[i].dims, 1);
        float *p = x->data;
        if (ties) { /* few distinct values, and NaNs in some rows */
          for (int64_t k = 0; k < x->numel; k++) p[k] = (float)(k * 7 % 3);
          if (x->numel > 10) p[3] = p[10] = NAN;
        }
        kiln_edit_set_int(t.n, "axis", cs[i].axis);
        if (!cs[i].keep) kiln_edit_set_int(t.n, "keepdims", 0);
        if (cs[i].last) kiln_edit_set_int(t.n, "select_last_index", 1);
        tc_run(&t, what, OWN, 0, 0);
        tc_end(&t);
      }
}

/* ---- data movement ---- */

static void test_move(void) {
  tc t;
  /* Gather */
  static const kiln_dtype dts[] = {KILN_F32, KILN_I64, KILN_U8, KILN_F16, KILN_F64};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    tc_begin(&t, 13, "Gather", 2, 1);
    tc_typed(&t, 0, dts[d], 2, D(50, 9));
    tc_ints(&t, 1, KILN_I64, 2, D(3, 4), D(0, 49, -1, -50, 7, 7, 3, 12, 48, 1, 2, 30));
    tc_run(&t, "Gather rows", OWN, 0, 0);
    tc_end(&t);
  }
  tc_begin(&t, 13, "Gather", 2, 1);
  tc_f32(&t, 0, 3, D(3, 5, 4), 1);
  tc_ints(&t, 1, KILN_I32, 1, D(6), D(4, -5, 0, 2, 2, -1));
  kiln_edit_set_int(t.n, "axis", 1);
  tc_run(&t, "Gather axis 1 int32", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "Gather", 2, 1);
  tc_f32(&t, 0, 3, D(3, 5, 4), 1);
  tc_ints(&t, 1, KILN_I64, 0, NULL, D(-2));
  kiln_edit_set_int(t.n, "axis", -1);
  tc_run(&t, "Gather scalar index, last axis", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "Gather", 2, 1);
  tc_f32(&t, 0, 2, D(10, 3), 1);
  tc_ints(&t, 1, KILN_I64, 1, D(3), D(1, 10, 2));
  tc_run(&t, "Gather index out of range", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "Gather", 2, 1);
  tc_f32(&t, 0, 2, D(10, 3), 1);
  tc_ints(&t, 1, KILN_I32, 1, D(2), D(-11, 0));
  tc_run(&t, "Gather negative index out of range", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "Gather", 2, 1);
  tc_view_t(&t, 0, KILN_F32, 2, D(4, 6));
  tc_ints(&t, 1, KILN_I64, 1, D(2), D(1, 0));
  tc_run(&t, "Gather from a view", DECLINE, 0, 0);
  tc_end(&t);

  /* Concat */
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    tc_begin(&t, 13, "Concat", 3, 1);
    tc_typed(&t, 0, dts[d], 3, D(2, 3, 4));
    tc_typed(&t, 1, dts[d], 3, D(2, 1, 4));
    tc_typed(&t, 2, dts[d], 3, D(2, 5, 4));
    kiln_edit_set_int(t.n, "axis", 1);
    tc_run(&t, "Concat axis 1", OWN, 0, 0);
    tc_end(&t);
  }
  tc_begin(&t, 13, "Concat", 2, 1);
  tc_f32(&t, 0, 2, D(3, 7), 1);
  tc_view_t(&t, 1, KILN_F32, 2, D(3, 5));
  kiln_edit_set_int(t.n, "axis", -1);
  tc_run(&t, "Concat with a view, axis -1", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "Concat", 2, 1);
  tc_f32(&t, 0, 2, D(3, 7), 1);
  tc_f32(&t, 1, 2, D(0, 7), 1);
  kiln_edit_set_int(t.n, "axis", 0);
  tc_run(&t, "Concat with an empty input", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "Concat", 2, 1);
  tc_f32(&t, 0, 2, D(3, 7), 1);
  tc_f32(&t, 1, 2, D(3, 6), 1);
  kiln_edit_set_int(t.n, "axis", 0);
  tc_run(&t, "Concat shape mismatch", DECLINE, 0, 0);
  tc_end(&t);

  /* Transpose */
  static const struct {
    int rank;
    int64_t dims[4];
    int np;
    int64_t perm[4];
  } tr[] = {
      {2, {5, 7}, 0, {0}},
      {2, {17, 33}, 2, {1, 0}},
      {2, {40, 72}, 2, {1, 0}},
      {4, {1, 9, 3, 11}, 4, {0, 2, 1, 3}},
      {4, {1, 9, 3, 11}, 4, {0, 2, 3, 1}},
      {4, {2, 5, 7, 3}, 4, {3, 1, 0, 2}},
      {3, {1, 1, 1}, 3, {2, 0, 1}},
      {1, {13}, 1, {0}},
      {3, {8, 8, 8}, 3, {2, 1, 0}},
  };
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (size_t i = 0; i < sizeof tr / sizeof *tr; i++) {
      char what[64];
      snprintf(what, sizeof what, "Transpose %s case %zu", kiln_dtype_name(dts[d]), i);
      tc_begin(&t, 13, "Transpose", 1, 1);
      tc_typed(&t, 0, dts[d], tr[i].rank, tr[i].dims);
      if (tr[i].np) kiln_edit_set_ints(t.n, "perm", tr[i].perm, (size_t)tr[i].np);
      tc_run(&t, what, OWN, 0, 0);
      tc_end(&t);
    }
  tc_begin(&t, 13, "Transpose", 1, 1);
  tc_view_t(&t, 0, KILN_F32, 3, D(3, 10, 9));
  kiln_edit_set_ints(t.n, "perm", I(0, 2, 1));
  tc_run(&t, "Transpose of a transposed view", OWN, 0, 0);
  tc_end(&t);
  /* Tile */
  static const struct {
    int rank;
    int64_t dims[3], rep[3];
  } ti[] = {
      {1, {5}, {3}}, {2, {3, 4}, {2, 3}}, {3, {2, 1, 3}, {1, 4, 2}}, {2, {3, 4}, {0, 2}}, {3, {2, 3, 5}, {1, 1, 1}}};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++)
    for (size_t i = 0; i < sizeof ti / sizeof *ti; i++) {
      tc_begin(&t, 13, "Tile", 2, 1);
      tc_typed(&t, 0, dts[d], ti[i].rank, ti[i].dims);
      int64_t r = ti[i].rank;
      tc_ints(&t, 1, KILN_I64, 1, &r, ti[i].rep);
      tc_run(&t, "Tile", OWN, 0, 0);
      tc_end(&t);
    }
  tc_begin(&t, 13, "Tile", 2, 1);
  tc_f32(&t, 0, 2, D(3, 4), 1);
  tc_ints(&t, 1, KILN_I64, 1, D(2), D(2, -1));
  tc_run(&t, "Tile negative repeat", DECLINE, 0, 0);
  tc_end(&t);

  static const int64_t rp[][3] = {{0, 2, 1}, {1, 0, 2}, {2, 1, 0}};
  for (int i = 0; i < 3; i++) {
    tc_begin(&t, 13, "Transpose", 1, 1);
    tc_view_rev(&t, 0, 3, D(4, 9, 10));
    kiln_edit_set_ints(t.n, "perm", rp[i], 3);
    tc_run(&t, "Transpose of a reversed view", OWN, 0, 0);
    tc_end(&t);
  }
  tc_begin(&t, 13, "Concat", 2, 1);
  tc_view_rev(&t, 0, 2, D(3, 5));
  tc_f32(&t, 1, 2, D(3, 2), 1);
  kiln_edit_set_int(t.n, "axis", 1);
  tc_run(&t, "Concat of a reversed view", OWN, 0, 0);
  tc_end(&t);

  tc_begin(&t, 13, "Transpose", 1, 1);
  tc_f32(&t, 0, 2, D(3, 4), 1);
  kiln_edit_set_ints(t.n, "perm", I(0, 0));
  tc_run(&t, "Transpose bad perm", DECLINE, 0, 0);
  tc_end(&t);

  /* Concat of narrow slices (the 4-, 8- and 16-byte row copies) */
  static const int64_t widths[] = {1, 2, 4, 3};
  for (size_t w = 0; w < sizeof widths / sizeof *widths; w++) {
    tc_begin(&t, 13, "Concat", 3, 1);
    for (int k = 0; k < 3; k++) tc_f32(&t, k, 2, D(37, widths[w]), 1);
    kiln_edit_set_int(t.n, "axis", 1);
    tc_run(&t, "Concat of narrow columns", OWN, 0, 0);
    tc_end(&t);
  }
  for (int k = 2; k <= 9; k++) { /* the one-pass interleave of 4-byte columns (up to 8), then the general copy */
    tc_begin(&t, 13, "Concat", k, 1);
    for (int i = 0; i < k; i++) tc_f32(&t, i, 2, D(29, 1), 1);
    kiln_edit_set_int(t.n, "axis", -1);
    tc_run(&t, "Concat of k one-float columns", OWN, 0, 0);
    tc_end(&t);
  }
}

/* ---- ScatterND ---- */

static void test_scatternd(void) {
  tc t;
  /* whole rows and single elements (duplicates: the last one wins), any dtype */
  static const kiln_dtype dts[] = {KILN_F32, KILN_I64, KILN_U8, KILN_F16};
  for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
    tc_begin(&t, 11, "ScatterND", 3, 1);
    tc_typed(&t, 0, dts[d], 2, D(10, 4));
    tc_ints(&t, 1, KILN_I64, 2, D(3, 1), D(7, -1, 0));
    tc_typed(&t, 2, dts[d], 2, D(3, 4));
    tc_run(&t, "ScatterND rows", OWN, 0, 0);
    tc_end(&t);
    tc_begin(&t, 13, "ScatterND", 3, 1);
    tc_typed(&t, 0, dts[d], 2, D(10, 4));
    tc_ints(&t, 1, KILN_I32, 2, D(4, 2), D(1, 2, -3, -1, 1, 2, 9, 0));
    tc_typed(&t, 2, dts[d], 1, D(4));
    tc_run(&t, "ScatterND elements, duplicate, int32 indices", OWN, 0, 0);
    tc_end(&t);
  }
  /* the reductions, float32, duplicates accumulate in index order, NaN */
  static const char *const reds[] = {"none", "add", "mul", "max", "min"};
  for (int r = 0; r < 5; r++) {
    tc_begin(&t, 18, "ScatterND", 3, 1);
    kiln_tensor *x = tc_f32(&t, 0, 3, D(4, 3, 5), 1);
    ((float *)x->data)[5] = NAN;
    tc_ints(&t, 1, KILN_I64, 3, D(2, 3, 2), D(0, 1, 3, 2, 0, 1, 1, 0, 0, 1, 2, 2));
    kiln_tensor *u = tc_f32(&t, 2, 3, D(2, 3, 5), 2);
    ((float *)u->data)[12] = NAN;
    kiln_edit_set_string(t.n, "reduction", reds[r]);
    tc_run(&t, reds[r], OWN, 0, 0);
    tc_end(&t);
  }
  tc_begin(&t, 16, "ScatterND", 3, 1);
  tc_ints(&t, 0, KILN_I64, 1, D(5), D(1, 2, 3, 4, 5));
  tc_ints(&t, 1, KILN_I64, 2, D(2, 1), D(1, 1));
  tc_ints(&t, 2, KILN_I64, 1, D(2), D(7, 8));
  kiln_edit_set_string(t.n, "reduction", "add");
  tc_run(&t, "ScatterND add on int64", DECLINE, 0, 0);
  tc_end(&t);
  tc_begin(&t, 16, "ScatterND", 3, 1);
  tc_f32(&t, 0, 1, D(5), 1);
  tc_ints(&t, 1, KILN_I64, 2, D(1, 1), D(0));
  tc_f32(&t, 2, 1, D(1), 1);
  kiln_edit_set_string(t.n, "reduction", "max");
  tc_run(&t, "ScatterND max before opset 18", DECLINE, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "ScatterND", 3, 1);
  tc_f32(&t, 0, 2, D(6, 2), 1);
  tc_ints(&t, 1, KILN_I64, 2, D(2, 1), D(2, 6));
  tc_f32(&t, 2, 2, D(2, 2), 1);
  tc_run(&t, "ScatterND index out of range", OWN, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "ScatterND", 3, 1);
  tc_f32(&t, 0, 2, D(6, 2), 1);
  tc_ints(&t, 1, KILN_I64, 2, D(2, 1), D(2, 3));
  tc_f32(&t, 2, 2, D(3, 2), 1);
  tc_run(&t, "ScatterND updates of the wrong shape", DECLINE, 0, 0);
  tc_end(&t);
  tc_begin(&t, 13, "ScatterND", 3, 1);
  tc_view_t(&t, 0, KILN_F32, 2, D(4, 6));
  tc_ints(&t, 1, KILN_I64, 2, D(1, 1), D(1));
  tc_f32(&t, 2, 2, D(1, 6), 1);
  tc_run(&t, "ScatterND into a view", DECLINE, 0, 0);
  tc_end(&t);

  /* in place, as the plan runs it: the output reservation is the data's
     memory (keep), the result the reference's */
  for (int r = 0; r < 2; r++) {
    tc_begin(&t, 16, "ScatterND", 3, 1);
    tc_f32(&t, 0, 2, D(50, 4), 1);
    tc_ints(&t, 1, KILN_I64, 2, D(3, 2), D(4, 0, 49, 3, 4, 0));
    tc_f32(&t, 2, 1, D(3), 1);
    kiln_edit_set_string(t.n, "reduction", reds[r]);
    kiln_tensor ref = {0}, own = {0}, buf = {0};
    kiln_op_call rc = {t.g, t.n, t.n->opset, 3, t.inp, 1, &ref, t.used};
    CHECK(!kiln_ref_find_op("", "ScatterND")->run(&rc), "ScatterND in place: reference failed");
    if (kiln_tensor_copy(&buf, &t.in[0])) exit(2);
    const kiln_tensor *ins[3] = {&buf, t.inp[1], t.inp[2]};
    own.data = buf.data;
    own.capacity = kiln_tensor_bytes(&buf);
    own.keep = true;
    kiln_op_call oc = {t.g, t.n, t.n->opset, 3, ins, 1, &own, t.used};
    bool declined = false;
    kiln_status s = kiln_cpu_kernel_find("", "ScatterND")->run(&oc, NULL, &declined);
    CHECK(!s && !declined && own.data == buf.data && !own.owns, "ScatterND in place: status %s declined %d moved %d",
          kiln_status_name(s), declined, own.data != buf.data);
    CHECK(!s && !memcmp(own.data, ref.data, kiln_tensor_bytes(&ref)), "ScatterND in place (%s): result differs",
          reds[r]);
    kiln_tensor_release(&buf);
    kiln_tensor_release(&ref);
    tc_end(&t);
  }
}

/* ---- the primitives, base against AVX2 ---- */

static bool same(float a, float b) { return a == b || (isnan(a) && isnan(b)); }

/* sums and sqdevs (four rows' chains side by side in the AVX2 versions)
 * give each row's sum and sqdev bit for bit, in every prims table this CPU
 * has, and the AVX2 ones the base twin's: rows 1..9 (groups of four and
 * the rest), n 1..40 (8-lane blocks and tails), rows ldx = n + 3 apart,
 * some NaN, inf and -0 among the values. */
static void test_row_sums(void) {
  enum { RMAX = 9, NMAX = 40 };
  const kiln_nn_prims *T[2] = {kiln_nn_prims_for(KILN_VM_ISA_BASE), kiln_nn_prims_for(KILN_VM_ISA_AVX2)};
  float x[RMAX * (NMAX + 3)], c[RMAX], out[2][2][RMAX];
  int bad = 0, cases = 0;
  for (size_t i = 0; i < sizeof x / sizeof *x; i++)
    x[i] = i % 53 == 7 ? NAN : i % 61 == 11 ? INFINITY : i % 17 == 3 ? -0.0f : (float)(rnd() * 8 - 3);
  for (size_t rows = 1; rows <= RMAX; rows++)
    for (size_t n = 1; n <= NMAX; n++) {
      size_t ldx = n + 3;
      for (size_t r = 0; r < rows; r++) c[r] = (float)(rnd() * 2 - 1);
      for (int t = 0; t < 2; t++) {
        if (!T[t]) continue;
        T[t]->sums(rows, n, x, ldx, out[t][0]);
        T[t]->sqdevs(rows, n, x, ldx, c, out[t][1]);
        for (size_t r = 0; r < rows; r++) {
          float s = T[t]->sum(n, x + r * ldx), q = T[t]->sqdev(n, x + r * ldx, c[r]);
          bad += memcmp(&s, &out[t][0][r], sizeof s) != 0 && !(isnan(s) && isnan(out[t][0][r]));
          bad += memcmp(&q, &out[t][1][r], sizeof q) != 0 && !(isnan(q) && isnan(out[t][1][r]));
          if (t == 1) bad += !same(out[0][0][r], out[1][0][r]) + !same(out[0][1][r], out[1][1][r]);
          cases++;
        }
      }
    }
  CHECK(bad == 0 && cases > 0, "sums/sqdevs: %d of %d row results differ from sum/sqdev row by row or from base", bad,
        cases);
}

static void test_prims(void) {
  const kiln_nn_prims *B = kiln_nn_prims_for(KILN_VM_ISA_BASE), *A = kiln_nn_prims_for(KILN_VM_ISA_AVX2);
  if (!A) {
    printf("unit_cpu_nn: no AVX2 on this CPU: primitives checked on base only\n");
    return;
  }
  enum { NMAX = 70, SMAX = 5 };
  float x[NMAX * SMAX + 16], s1[NMAX], b1[NMAX], a0[NMAX], a1[NMAX], y0[NMAX], y1[NMAX];
  for (int i = 0; i < NMAX * SMAX + 16; i++) x[i] = (float)(rnd() * 4);
  for (int i = 0; i < NMAX; i++) s1[i] = (float)rnd(), b1[i] = (float)rnd();
  int bad = 0;
  for (size_t n = 1; n <= NMAX; n++) {
    bad += !same(B->sum(n, x + 1), A->sum(n, x + 1)) + !same(B->sumsq(n, x), A->sumsq(n, x)) +
           !same(B->sqdev(n, x + 3, 0.25f), A->sqdev(n, x + 3, 0.25f)) + !same(B->max(n, x), A->max(n, x)) +
           !same(B->min(n, x + 2), A->min(n, x + 2));
    for (size_t st = 1; st <= SMAX; st++)
      for (int op = 0; op < 4; op++) {
        for (size_t i = 0; i < n; i++) a0[i] = a1[i] = (float)rnd();
        void (*fb)(size_t, float *, const float *, size_t) = op == 0   ? B->acc_add
                                                             : op == 1 ? B->acc_addsq
                                                             : op == 2 ? B->acc_max
                                                                       : B->acc_min;
        void (*fa)(size_t, float *, const float *, size_t) = op == 0   ? A->acc_add
                                                             : op == 1 ? A->acc_addsq
                                                             : op == 2 ? A->acc_max
                                                                       : A->acc_min;
        fb(n, a0, x + 1, st);
        fa(n, a1, x + 1, st);
        for (size_t i = 0; i < n; i++) bad += !same(a0[i], a1[i]);
      }
    float e0 = B->exp_shift_sum(n, x, 1.5f, y0), e1 = A->exp_shift_sum(n, x, 1.5f, y1);
    bad += !same(e0, e1);
    for (size_t i = 0; i < n; i++) bad += !same(y0[i], y1[i]);
    B->norm_apply(n, x, 0.3f, 1.7f, s1, n & 1 ? b1 : NULL, y0);
    A->norm_apply(n, x, 0.3f, 1.7f, s1, n & 1 ? b1 : NULL, y1);
    B->affine(n, x + 5, 0.7f, -0.2f, a0);
    A->affine(n, x + 5, 0.7f, -0.2f, a1);
    for (size_t i = 0; i < n; i++) bad += !same(y0[i], y1[i]) + !same(a0[i], a1[i]);
  }
  /* NaN anywhere in max/min and in the accumulators */
  float z[19];
  for (int p = 0; p < 19; p++) {
    for (int i = 0; i < 19; i++) z[i] = (float)i;
    z[p] = NAN;
    bad += !isnan(A->max(19, z)) + !isnan(B->max(19, z)) + !isnan(A->min(19, z)) + !isnan(B->min(19, z));
    for (int i = 0; i < 19; i++) a0[i] = a1[i] = 0;
    A->acc_max(19, a1, z, 1);
    B->acc_max(19, a0, z, 1);
    bad += !isnan(a1[p]) + !isnan(a0[p]);
  }
  CHECK(bad == 0, "primitives: %d differences between base and avx2", bad);
  /* max2x2s2 on planes of 1..3 x 1..40 outputs (AVX2 tails of 1..7,
   * AVX-512 blocks of 16 and tails of 1..15, rows with and without a spare
   * column), sources of exactly their size (ASan), some NaN and ties of
   * -0/+0: base = the AVX2 setting (the AVX-512 kernel where the CPU has
   * it and ow >= 16) = the AVX2 kernel alone = the AVX-512 kernel on every
   * width, bit for bit, = the plain max */
  int pbad = 0;
  for (size_t oh = 1; oh <= 3; oh++)
    for (size_t ow = 1; ow <= 40; ow++) {
      size_t ldx = 2 * ow + ow % 2, nx = 2 * oh * ldx - (ldx - 2 * ow); /* the last row ends at its last tap */
      float *xs = malloc(nx * sizeof *xs), *p0 = malloc(oh * ow * sizeof *p0), *p1 = malloc(oh * ow * sizeof *p1);
      float *p2 = malloc(oh * ow * sizeof *p2), *p3 = malloc(oh * ow * sizeof *p3);
      for (size_t i = 0; i < nx; i++) xs[i] = i % 11 == 5 ? NAN : i % 7 == 3 ? -0.0f : (float)(rnd() * 4 - 2);
      B->max2x2s2(oh, ow, xs, ldx, p0);
      A->max2x2s2(oh, ow, xs, ldx, p1);
      kiln_nn_max2x2s2_avx2_only(oh, ow, xs, ldx, p2);
      if (kiln_vm_cpu_has_avx512()) kiln_nn_max2x2s2_avx512(oh, ow, xs, ldx, p3); /* every width, tails alone too */
      else memcpy(p3, p0, oh * ow * sizeof *p3);
      for (size_t r = 0; r < oh; r++)
        for (size_t i = 0; i < ow; i++) {
          const float *q = xs + 2 * r * ldx + 2 * i;
          float want = fmaxf(fmaxf(q[0], q[1]), fmaxf(q[ldx], q[ldx + 1]));
          if (isnan(q[0]) || isnan(q[1]) || isnan(q[ldx]) || isnan(q[ldx + 1])) want = NAN;
          size_t e = r * ow + i;
          pbad += !same(p0[e], want) + (memcmp(&p1[e], &p0[e], sizeof *p0) != 0) +
                  (memcmp(&p2[e], &p0[e], sizeof *p0) != 0) + (memcmp(&p3[e], &p0[e], sizeof *p0) != 0);
        }
      free(xs);
      free(p0);
      free(p1);
      free(p2);
      free(p3);
    }
  CHECK(pbad == 0, "max2x2s2: %d wrong outputs (base vs avx2 vs avx2 alone vs avx-512%s vs the plain max)", pbad,
        kiln_vm_cpu_has_avx512() ? "" : " (not on this CPU)");
  /* max3x3s2 on h x w planes of 1..9 x 1..40 (vector tails), pads 0..2 top and left, outputs past the bottom and
     right edges (ceil mode), sources of exactly their size (ASan), NaN and -0/+0 ties: base = avx2 bit for bit,
     both = the max of the taps inside the plane (NaN when one is NaN) */
  int mbad = 0, mcases = 0;
  for (size_t h = 1; h <= 9; h++)
    for (size_t w = 1; w <= 40; w += w < 12 ? 1 : 7)
      for (size_t pt = 0; pt <= 2; pt++)
        for (size_t pl = 0; pl <= 2; pl++) {
          size_t oh = (h + pt + 1) / 2, ow = (w + pl + 1) / 2; /* up to ceil((h + pt - 3) / 2) + 1 */
          float *xs = malloc(h * w * sizeof *xs), *p0 = malloc(oh * ow * sizeof *p0);
          float *p1 = malloc(oh * ow * sizeof *p1), *b0 = malloc((2 * ow + 18) * sizeof *b0);
          float *b1 = malloc((2 * ow + 18) * sizeof *b1);
          for (size_t i = 0; i < h * w; i++)
            xs[i] = i % 13 == 6 ? NAN : i % 5 == 2 ? -0.0f : i % 5 == 4 ? 0.0f : (float)(rnd() * 4 - 2);
          B->max3x3s2(oh, ow, xs, h, w, pt, pl, p0, b0);
          A->max3x3s2(oh, ow, xs, h, w, pt, pl, p1, b1);
          mbad += memcmp(p0, p1, oh * ow * sizeof *p0) != 0;
          for (size_t r = 0; r < oh; r++)
            for (size_t i = 0; i < ow; i++) {
              float want = -INFINITY;
              bool nan = false;
              for (size_t kh = 0; kh < 3; kh++)
                for (size_t kw = 0; kw < 3; kw++) {
                  long y = (long)(2 * r + kh) - (long)pt, x = (long)(2 * i + kw) - (long)pl;
                  if (y < 0 || y >= (long)h || x < 0 || x >= (long)w) continue;
                  float v = xs[(size_t)y * w + (size_t)x];
                  nan |= isnan(v);
                  if (v > want) want = v;
                }
              float got = p0[r * ow + i];
              mbad += nan ? !isnan(got) : got != want;
            }
          mcases++;
          free(xs), free(p0), free(p1), free(b0), free(b1);
        }
  CHECK(mbad == 0 && mcases > 500, "max3x3s2: %d wrong (base vs avx2 vs the plain max) in %d planes", mbad, mcases);
  /* transpose32 on sizes around the 8x8 and 32x32 blocks */
  static const size_t sz[] = {1, 3, 8, 9, 31, 32, 33, 70};
  uint32_t src[70 * 75], d0[70 * 72], d1[70 * 72];
  for (size_t i = 0; i < sizeof src / sizeof *src; i++) src[i] = (uint32_t)i * 2654435761u;
  int tbad = 0;
  for (size_t i = 0; i < 8; i++)
    for (size_t j = 0; j < 8; j++) {
      size_t rows = sz[i], cols = sz[j];
      memset(d0, 0, sizeof d0);
      memset(d1, 0, sizeof d1);
      B->transpose32(rows, cols, src, 75, d0, 72);
      A->transpose32(rows, cols, src, 75, d1, 72);
      for (size_t a = 0; a < rows; a++)
        for (size_t b = 0; b < cols; b++) tbad += d0[a * 72 + b] != src[b * 75 + a] || d1[a * 72 + b] != d0[a * 72 + b];
    }
  CHECK(tbad == 0, "transpose32: %d wrong elements", tbad);
  /* softmax_rows: 1..3 rows of lengths 1..40, 127..129, 257 (the AVX-512
     kernel's blocks, tails and row pairs), with NaN, -0, +-inf and large
     values in some rows, rows of +inf and all -inf, in place and not: base = AVX2 primitives = the
     AVX2 setting's kernel (AVX-512 where usable), bit for bit */
  static const size_t lens[] = {1, 2, 7, 8, 9, 15, 16, 17, 23, 31, 32, 33, 40, 127, 128, 129, 257};
  int sbad = 0, scases = 0;
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
    for (size_t rows = 1; rows <= 3; rows++)
      for (int kind = 0; kind < 5; kind++) {
        size_t n = lens[li], tot = rows * n;
        float *xs = malloc(tot * sizeof *xs), *o[4];
        for (size_t i = 0; i < tot; i++) {
          xs[i] = (float)(rnd() * 8 - 4);
          if (kind == 1 && i % 13 == 4) xs[i] = -0.0f;
          if (kind == 1 && i % 17 == 2) xs[i] = 0.0f;
          if (kind == 2 && i == tot / 2) xs[i] = NAN;
          if (kind == 2 && i % 11 == 3) xs[i] = -INFINITY;
          if (kind == 3) xs[i] *= 30.0f; /* exp underflows to 0 and denormals */
          /* rows whose max is not finite (the kernel's general path) beside
             finite ones where x - m overflows to -inf */
          if (kind == 4 && i / n == 0 && i % n == n / 2) xs[i] = INFINITY;
          if (kind == 4 && rows > 1 && i / n == rows - 1) xs[i] = -INFINITY;
          if (kind == 4 && rows == 3 && i / n == 1 && i % 3 == 0) xs[i] = i % 2 ? 3e38f : -3e38f;
        }
        for (int v = 0; v < 4; v++) o[v] = malloc(tot * sizeof *xs);
        B->softmax_rows(rows, n, xs, o[0]);
        kiln_nn_softmax_rows_avx2_only(rows, n, xs, o[1]);
        A->softmax_rows(rows, n, xs, o[2]);
        memcpy(o[3], xs, tot * sizeof *xs);
        A->softmax_rows(rows, n, o[3], o[3]); /* in place */
        for (size_t i = 0; i < tot; i++)
          for (int v = 1; v < 4; v++) sbad += !same(o[0][i], o[v][i]) || signbit(o[0][i]) != signbit(o[v][i]);
        for (size_t i = 0; i < tot; i++) /* the AVX2 setting's NaNs too: the primitives' bits */
          for (int v = 2; v < 4; v++) sbad += memcmp(&o[1][i], &o[v][i], sizeof(float)) != 0;
        for (size_t i = 0; i < tot && kind == 0; i++) { /* and a softmax: rows sum to 1 */
          if (i % n == 0) {
            double t = 0;
            for (size_t j = 0; j < n; j++) t += o[0][i + j];
            sbad += fabs(t - 1) > 1e-5;
          }
        }
        scases++;
        for (int v = 0; v < 4; v++) free(o[v]);
        free(xs);
      }
  CHECK(sbad == 0, "softmax_rows: %d differences between base, the AVX2 primitives and the AVX2 setting%s (%d cases)",
        sbad, kiln_vm_cpu_has_avx512() ? " (AVX-512)" : "", scases);
}

int main(void) {
  nisa = kiln_nn_prims_for(KILN_VM_ISA_AVX2) ? 2 : 1;
  test_prims();
  test_row_sums();
  test_pool();
  test_pool_bands();
  test_pool_bands_random();
  test_softmax();
  test_norm();
  test_reduce();
  test_arg();
  test_move();
  test_scatternd();
  printf("unit_cpu_nn: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
