/* tests/unit_kiln_ops: the operators of kiln's own domain (KILN_DOMAIN,
 * docs/KILN_DOMAIN.md) — the SparseLengths* family over float32, float16
 * and 8-bit rowwise tables, the rowwise (de)quantizers, LSTMUnit:
 *   - the inner loops (cpu_fallback/sls.h), scalar twin and AVX2 version,
 *     against expectations computed here by plain loops, on awkward sizes
 *     (dims not multiples of 8, empty segments, one row);
 *   - each operator through a one-node graph on the reference backend and on
 *     the cpu plan under both instruction sets, against the same
 *     expectations; a table that arrives as a strided view (the cpu kernel
 *     declines it, the reference kernel reads through it);
 *   - the errors: out-of-range indices, lengths or offsets that do not add
 *     up, a newer domain version, an unknown operator of the domain. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_fallback/plan.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/sls.h"
#include "graphbuild.h"
#include "ir/alloc.h"
#include "reference/exec.h"

static int passed, failed;
#include "tests/check.h"

/* ------------------------------------------------------------------ data */

static kiln_tensor make(kiln_dtype dt, int rank, const int64_t *dims) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, dt, rank, dims)) exit(2);
  return t;
}

static kiln_tensor vec_i(kiln_dtype dt, int64_t n, const int64_t *v) {
  kiln_tensor t = make(dt, 1, &n);
  for (int64_t i = 0; i < n; i++) kiln_set_i(&t, i, v[i]);
  return t;
}

/* A random table of rows x dim: float32, float16 or 8-bit rowwise (random
 * bytes with a random scale and bias per row). */
static kiln_tensor table(kiln_sls_table kind, int64_t rows, int64_t dim) {
  if (kind == KILN_SLS_U8ROW) {
    int64_t d[2] = {rows, dim + 8};
    kiln_tensor t = make(KILN_U8, 2, d);
    uint8_t *p = t.data;
    for (int64_t r = 0; r < rows; r++) {
      uint8_t *row = p + r * (dim + 8);
      for (int64_t e = 0; e < dim; e++) row[e] = (uint8_t)((rnd() + 1.0) * 127.99);
      float sb[2] = {(float)(0.01 + 0.02 * (rnd() + 1)), (float)rnd()};
      memcpy(row + dim, sb, 8);
    }
    return t;
  }
  int64_t d[2] = {rows, dim};
  kiln_tensor t = make(kind == KILN_SLS_F32 ? KILN_F32 : KILN_F16, 2, d);
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, rnd() * 2);
  return t;
}

/* Element e of row r of a table, as the definition reads it. */
static double table_at(const kiln_tensor *t, kiln_sls_table kind, int64_t dim, int64_t r, int64_t e) {
  if (kind == KILN_SLS_U8ROW) {
    const uint8_t *row = (const uint8_t *)t->data + r * (dim + 8);
    float sb[2];
    memcpy(sb, row + dim, 8);
    return (double)row[e] * sb[0] + sb[1];
  }
  if (kind == KILN_SLS_F16) return kiln_f16_to_f32(((const uint16_t *)t->data)[r * dim + e]);
  return ((const float *)t->data)[r * dim + e];
}

/* The expected SparseLengths* result, and a tolerance per element (relative
 * to the sum of the terms' magnitudes: the kernels reassociate, fuse). */
static void expect_sls(const kiln_tensor *t, kiln_sls_table kind, int64_t dim, const int64_t *idx, const int64_t *start,
                       int64_t m, const float *w, bool positional, bool mean, double *y, double *tol) {
  for (int64_t s = 0; s < m; s++)
    for (int64_t e = 0; e < dim; e++) {
      double acc = 0, mag = 0;
      for (int64_t k = start[s]; k < start[s + 1]; k++) {
        double wk = w ? w[positional ? k - start[s] : k] : 1.0, v = wk * table_at(t, kind, dim, idx[k], e);
        acc += v;
        mag += fabs(v);
      }
      int64_t len = start[s + 1] - start[s];
      if (mean && len) acc /= (double)len, mag /= (double)len;
      y[s * dim + e] = acc;
      tol[s * dim + e] = 2e-6 * mag + 1e-6;
    }
}

static int close_all(const float *got, const double *want, const double *tol, int64_t n, int64_t *where) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(got[i] - want[i]) <= tol[i])) {
      *where = i;
      return 0;
    }
  return 1;
}

/* --------------------------------------------------- the inner loops (twins) */

static const char *kind_name[3] = {"f32", "f16", "u8row"};

static void test_sls_twins(void) {
  static const int64_t dims[] = {1, 3, 8, 13, 16, 64, 67, 130};
  static const int64_t lens[] = {3, 0, 1, 5, 0, 2}; /* empty segments, a single index */
  const int64_t m = 6, rows = 11;
  int64_t start[7] = {0};
  for (int s = 0; s < m; s++) start[s + 1] = start[s] + lens[s];
  int64_t n = start[m];
  int64_t idx[16];
  int32_t idx32[16];
  for (int64_t k = 0; k < n; k++) idx[k] = idx32[k] = (int32_t)((k * 7 + 3) % rows);
  idx[0] = idx32[0] = rows - 1;
  idx[1] = idx32[1] = 0;
  float w[16];
  for (int64_t k = 0; k < n; k++) w[k] = (float)rnd();
  for (int kind = 0; kind < 3; kind++)
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
      for (int mode = 0; mode < 4; mode++) /* sum, weighted, positional, mean */
        for (int isa = 0; isa < KILN_VM_NISA; isa++) {
          if (!kiln_sls_isa_ok((kiln_vm_isa)isa)) continue;
          int64_t dim = dims[di];
          kiln_tensor t = table((kiln_sls_table)kind, rows, dim);
          double *want = kiln_calloc((size_t)(m * dim), sizeof *want), *tol = kiln_calloc((size_t)(m * dim), sizeof *tol);
          float *got = kiln_calloc((size_t)(m * dim), sizeof *got);
          const float *wp = mode == 1 || mode == 2 ? w : NULL;
          expect_sls(&t, (kiln_sls_table)kind, dim, idx, start, m, wp, mode == 2, mode == 3, want, tol);
          size_t el = kind == 0 ? 4 : kind == 1 ? 2 : 1;
          kiln_sls_job j = {(kiln_sls_table)kind, t.data, (size_t)(kind == 2 ? dim + 8 : dim) * el, rows, dim,
                            isa ? (const void *)idx32 : (const void *)idx, !isa, start, m, wp, mode == 2, mode == 3,
                            got, 0};
          if (isa) kiln_sls_avx2_fma(&j);
          else kiln_sls_base(&j);
          int64_t at = 0;
          CHECK(j.bad == -1 && close_all(got, want, tol, m * dim, &at),
                "sls twin %s %s dim %lld mode %d: bad %lld, element %lld: %.9g, expected %.9g", kiln_vm_isa_name(isa),
                kind_name[kind], (long long)dim, mode, (long long)j.bad, (long long)at, got[at], want[at]);
          /* an out-of-range index (negative, then one past the end) */
          for (int b = 0; b < 2; b++) {
            idx[4] = idx32[4] = b ? (int32_t)rows : -1;
            if (isa) kiln_sls_avx2_fma(&j);
            else kiln_sls_base(&j);
            CHECK(j.bad == 4, "sls twin %s %s dim %lld: bad index found at %lld, expected at 4", kiln_vm_isa_name(isa),
                  kind_name[kind], (long long)dim, (long long)j.bad);
          }
          idx[4] = idx32[4] = (4 * 7 + 3) % rows;
          kiln_free(want);
          kiln_free(tol);
          kiln_free(got);
          kiln_tensor_release(&t);
        }
}

/* An 8-bit table of rows with no values (D = 0, only scale and bias): the
 * output has no lanes, the indices are still checked. */
static void test_sls_no_lanes(void) {
  kiln_tensor t = table(KILN_SLS_U8ROW, 3, 0);
  int64_t idx[3] = {0, 2, 1}, start[3] = {0, 1, 3};
  float out[1];
  for (int isa = 0; isa < KILN_VM_NISA; isa++) {
    if (!kiln_sls_isa_ok((kiln_vm_isa)isa)) continue;
    for (int bad = 0; bad < 2; bad++) {
      idx[2] = bad ? 3 : 1;
      kiln_sls_job j = {KILN_SLS_U8ROW, t.data, 8, 3, 0, idx, true, start, 2, NULL, false, false, out, 0};
      if (isa) kiln_sls_avx2_fma(&j);
      else kiln_sls_base(&j);
      CHECK(j.bad == (bad ? 2 : -1), "D = 0 on %s: bad index at %lld", kiln_vm_isa_name(isa), (long long)j.bad);
    }
  }
  kiln_tensor_release(&t);
}

/* Caffe2's FloatToFused8BitRowwiseQuantized, as Caffe2 writes it. */
static void quant_row_c2(const float *x, int64_t d, uint8_t *y) {
  float lo = x[0], hi = x[0];
  for (int64_t e = 1; e < d; e++) lo = x[e] < lo ? x[e] : lo, hi = x[e] > hi ? x[e] : hi;
  float range = hi - lo, scale = range / 255.0f, inv = 255.0f / (range + 1e-8f);
  for (int64_t e = 0; e < d; e++) y[e] = (uint8_t)lrintf((x[e] - lo) * inv);
  memcpy(y + d, &scale, 4);
  memcpy(y + d + 4, &lo, 4);
}

static void test_quant_twins(void) {
  static const int64_t dims[] = {1, 7, 8, 9, 16, 33, 100};
  const int64_t rows = 3;
  for (size_t di = 0; di < sizeof dims / sizeof *dims; di++) {
    int64_t d = dims[di];
    float *x = kiln_calloc((size_t)(rows * d), sizeof *x), *y = kiln_calloc((size_t)(rows * d), sizeof *y);
    uint8_t *want = kiln_calloc((size_t)(rows * (d + 8)), 1), *got = kiln_calloc((size_t)(rows * (d + 8)), 1);
    for (int64_t i = 0; i < rows * d; i++) x[i] = (float)(rnd() * 5 + (i % 3));
    for (int64_t i = 0; i < d; i++) x[2 * d + i] = 0.25f; /* a constant row: range 0 */
    for (int64_t r = 0; r < rows; r++) quant_row_c2(x + r * d, d, want + r * (d + 8));
    for (int isa = 0; isa < KILN_VM_NISA; isa++) {
      if (!kiln_sls_isa_ok((kiln_vm_isa)isa)) continue;
      memset(got, 0xee, (size_t)(rows * (d + 8)));
      if (isa) kiln_rowwise_quant_avx2_fma(x, rows, d, got);
      else kiln_rowwise_quant_base(x, rows, d, got);
      CHECK(!memcmp(got, want, (size_t)(rows * (d + 8))), "quant twin %s d %lld differs from Caffe2's arithmetic",
            kiln_vm_isa_name(isa), (long long)d);
      memset(y, 0, (size_t)(rows * d) * sizeof *y);
      if (isa) kiln_rowwise_dequant_avx2_fma(want, rows, d, y);
      else kiln_rowwise_dequant_base(want, rows, d, y);
      int ok = 1;
      for (int64_t r = 0; r < rows && ok; r++) {
        float sb[2];
        memcpy(sb, want + r * (d + 8) + d, 8);
        for (int64_t e = 0; e < d && ok; e++) {
          float p = (float)want[r * (d + 8) + e] * sb[0];
          ok = y[r * d + e] == p + sb[1] && fabsf(y[r * d + e] - x[r * d + e]) <= sb[0] * 0.5f + 1e-6f;
        }
      }
      CHECK(ok, "dequant twin %s d %lld: not q*scale + bias, or more than half a step from the input",
            kiln_vm_isa_name(isa), (long long)d);
    }
    kiln_free(x);
    kiln_free(y);
    kiln_free(want);
    kiln_free(got);
  }
}

/* ------------------------------------------------------ one-node graphs */

enum { B_REF, B_CPU_BASE, B_CPU_AVX2, NB };
static const char *bname[NB] = {"reference", "cpu/base", "cpu/avx2"};

typedef struct attrs {
  int n;
  const char *name[4];
  int64_t v[4];
  bool has_fb;
  float forget_bias;
} attrs;

/* A graph of one node `op` of KILN_DOMAIN (named "kiln_node") over graph
 * inputs in[] (NULL: an omitted input). */
static kiln_graph *one_node(const char *op, int n_in, kiln_tensor *const *in, int n_out, const attrs *a,
                            int64_t version) {
  kiln_graph *g = new_graph(17);
  g->opsets = kiln_realloc(g->opsets, 2 * sizeof *g->opsets);
  g->opsets[1].domain = kiln_strdup(KILN_DOMAIN);
  g->opsets[1].version = version;
  g->n_opsets = 2;
  int ins[8], outs[4];
  for (int i = 0; i < n_in; i++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    ins[i] = in[i] ? input(g, name, in[i]->dtype, in[i]->rank, in[i]->dims) : -1;
  }
  for (int k = 0; k < n_out; k++)
    if (kiln_edit_add_value(g, "y", &outs[k])) exit(2);
  int at;
  if (kiln_edit_insert_node(g, 0, "kiln_node", op, KILN_DOMAIN, n_in, ins, n_out, outs, &at)) {
    printf("cannot insert %s: %s\n", op, kiln_last_error());
    exit(2);
  }
  for (int i = 0; a && i < a->n; i++) kiln_edit_set_int(&g->nodes[at], a->name[i], a->v[i]);
  if (a && a->has_fb) kiln_edit_set_float(&g->nodes[at], "forget_bias", a->forget_bias);
  for (int k = 0; k < n_out; k++) kiln_edit_add_output(g, outs[k]);
  return g;
}

/* Runs the graph on backend b; outs get the results. */
static kiln_status run_on(int b, kiln_graph *g, kiln_tensor *const *in, int n_in, kiln_tensor *outs) {
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  int gi = 0;
  for (int i = 0; i < n_in; i++)
    if (in[i]) bound[g->inputs[gi++]] = in[i];
  kiln_status s = kiln_ref_check_graph(g);
  if (!s) {
    if (b == B_REF) {
      s = kiln_ref_run(g, bound, outs);
    } else {
      kiln_sls_force_isa(b == B_CPU_BASE ? KILN_VM_ISA_BASE : KILN_VM_ISA_AVX2);
      kiln_cpu_plan *p = NULL;
      s = kiln_cpu_prepare(g, &p);
      if (!s) s = kiln_cpu_run(p, g, bound, outs);
      kiln_cpu_stats st;
      if (!s) {
        kiln_cpu_plan_stats(p, &st);
        CHECK(st.own_calls >= 1, "%s: the cpu plan ran kiln's own kernel (own %ld, reference %ld)", g->nodes[0].op_type,
              st.own_calls, st.ref_calls);
      }
      kiln_cpu_release(p);
      kiln_sls_force_isa(KILN_VM_NISA);
    }
  }
  kiln_free(bound);
  return s;
}

static bool backend_ok(int b) { return b != B_CPU_AVX2 || kiln_sls_isa_ok(KILN_VM_ISA_AVX2); }

/* SparseLengths* on every backend, every table kind, both index types,
 * lengths and offsets. */
static void test_sls_ops(void) {
  static const int64_t dims[] = {1, 5, 8, 67};
  static const int64_t lens[] = {2, 0, 4, 1, 0};
  const int64_t m = 5, rows = 7;
  int64_t start[6] = {0}, offs[5];
  for (int s = 0; s < m; s++) offs[s] = start[s], start[s + 1] = start[s] + lens[s];
  const int64_t n = start[m];
  int64_t idx[7] = {6, 0, 3, 3, 1, 5, 2};
  float w[7];
  for (int k = 0; k < n; k++) w[k] = (float)rnd();
  static const char *ops[4] = {"SparseLengthsSum", "SparseLengthsWeightedSum", "SparseLengthsWeightedSum",
                               "SparseLengthsMean"};
  for (int kind = 0; kind < 3; kind++)
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
      for (int mode = 0; mode < 4; mode++)
        for (int it = 0; it < 2; it++) /* int32 indices + lengths, int64 indices + offsets */
          for (int b = 0; b < NB; b++) {
            if (!backend_ok(b)) continue;
            int64_t dim = dims[di];
            kiln_tensor t = table((kiln_sls_table)kind, rows, dim);
            kiln_tensor ti = vec_i(it ? KILN_I64 : KILN_I32, n, idx);
            kiln_tensor tl = it ? vec_i(KILN_I64, m, offs) : vec_i(KILN_I32, m, lens);
            kiln_tensor tw = make(KILN_F32, 1, &n);
            memcpy(tw.data, w, sizeof w);
            bool weighted = mode == 1 || mode == 2;
            kiln_tensor *in4[4] = {&t, &tw, &ti, &tl}, *in3[3] = {&t, &ti, &tl};
            attrs a = {0};
            if (it) a.name[a.n] = "offsets", a.v[a.n++] = 1;
            if (mode == 2) a.name[a.n] = "positional", a.v[a.n++] = 1;
            kiln_graph *g = one_node(ops[mode], weighted ? 4 : 3, weighted ? in4 : in3, 1, &a, 1);
            kiln_tensor out = {0};
            kiln_status s = run_on(b, g, weighted ? in4 : in3, weighted ? 4 : 3, &out);
            double want[5 * 67], tol[5 * 67];
            expect_sls(&t, (kiln_sls_table)kind, dim, idx, start, m, weighted ? w : NULL, mode == 2, mode == 3, want,
                       tol);
            int64_t at = 0;
            CHECK(!s && out.dtype == KILN_F32 && out.rank == 2 && out.dims[0] == m && out.dims[1] == dim &&
                      close_all(out.data, want, tol, m * dim, &at),
                  "%s on %s, %s table, dim %lld, %s: %s (element %lld)", ops[mode], bname[b], kind_name[kind],
                  (long long)dim, it ? "offsets" : "lengths", s ? kiln_last_error() : "wrong values", (long long)at);
            kiln_tensor_release(&out);
            kiln_graph_free(g);
            kiln_tensor_release(&t);
            kiln_tensor_release(&ti);
            kiln_tensor_release(&tl);
            kiln_tensor_release(&tw);
          }
  /* The Caffe2 names of the 8-bit rowwise ops, and a float table of rank 3 */
  for (int b = 0; b < NB; b++) {
    if (!backend_ok(b)) continue;
    kiln_tensor t = table(KILN_SLS_U8ROW, rows, 9), ti = vec_i(KILN_I64, n, idx), tl = vec_i(KILN_I64, m, lens);
    kiln_tensor *in3[3] = {&t, &ti, &tl};
    kiln_graph *g = one_node("SparseLengthsSumFused8BitRowwise", 3, in3, 1, NULL, 1);
    kiln_tensor out = {0};
    kiln_status s = run_on(b, g, in3, 3, &out);
    double want[5 * 9], tol[5 * 9];
    expect_sls(&t, KILN_SLS_U8ROW, 9, idx, start, m, NULL, false, false, want, tol);
    int64_t at;
    CHECK(!s && out.numel == m * 9 && close_all(out.data, want, tol, m * 9, &at),
          "SparseLengthsSumFused8BitRowwise on %s: %s", bname[b], s ? kiln_last_error() : "wrong values");
    kiln_tensor_release(&out);
    kiln_graph_free(g);
    kiln_tensor_release(&t);
    int64_t d3[3] = {rows, 2, 3};
    t = make(KILN_F32, 3, d3);
    for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, rnd());
    g = one_node("SparseLengthsMean", 3, in3, 1, NULL, 1);
    s = run_on(b, g, in3, 3, &out);
    double want3[5 * 6], tol3[5 * 6];
    expect_sls(&t, KILN_SLS_F32, 6, idx, start, m, NULL, false, true, want3, tol3);
    CHECK(!s && out.rank == 3 && out.dims[0] == m && out.dims[1] == 2 && out.dims[2] == 3 &&
              close_all(out.data, want3, tol3, m * 6, &at),
          "SparseLengthsMean over a [7,2,3] table on %s: %s", bname[b], s ? kiln_last_error() : "wrong result");
    kiln_tensor_release(&out);
    kiln_graph_free(g);
    kiln_tensor_release(&t);
    kiln_tensor_release(&ti);
    kiln_tensor_release(&tl);
  }
}

/* A table that reaches SparseLengthsSum as a strided view (the Transpose of
 * a graph input, which the cpu plan runs as an alias): the cpu kernel
 * declines it and the reference kernel reads through the view. */
static void test_sls_view_input(void) {
  const int64_t rows = 6, dim = 5, m = 3;
  int64_t tdims[2] = {dim, rows}, idx[4] = {5, 0, 2, 5}, lens[3] = {1, 0, 3}, start[4] = {0, 1, 1, 4};
  kiln_tensor xt = make(KILN_F32, 2, tdims), table_rows = make(KILN_F32, 2, (int64_t[]){rows, dim});
  for (int64_t i = 0; i < xt.numel; i++) kiln_set_f(&xt, i, rnd());
  for (int64_t r = 0; r < rows; r++)
    for (int64_t e = 0; e < dim; e++) kiln_set_f(&table_rows, r * dim + e, kiln_get_f(&xt, e * rows + r));
  kiln_tensor ti = vec_i(KILN_I64, 4, idx), tl = vec_i(KILN_I64, m, lens);
  for (int b = 0; b < NB; b++) {
    if (!backend_ok(b)) continue;
    kiln_graph *g = new_graph(17);
    g->opsets = kiln_realloc(g->opsets, 2 * sizeof *g->opsets);
    g->opsets[1].domain = kiln_strdup(KILN_DOMAIN);
    g->opsets[1].version = 1;
    g->n_opsets = 2;
    int x = input(g, "xt", KILN_F32, 2, tdims), iv = input(g, "idx", KILN_I64, 1, (int64_t[]){4}),
        lv = input(g, "len", KILN_I64, 1, (int64_t[]){m}), t, y, at;
    int64_t perm[2] = {1, 0};
    if (kiln_edit_add_value(g, "table", &t) || kiln_edit_insert_node(g, 0, "tr", "Transpose", "", 1, &x, 1, &t, &at) ||
        kiln_edit_set_ints(&g->nodes[at], "perm", perm, 2) || kiln_edit_add_value(g, "y", &y) ||
        kiln_edit_insert_node(g, 1, "kiln_node", "SparseLengthsSum", KILN_DOMAIN, 3, (int[]){t, iv, lv}, 1, &y, NULL) ||
        kiln_edit_add_output(g, y))
      exit(2);
    kiln_tensor *in[3] = {&xt, &ti, &tl}, out = {0};
    const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
    for (int i = 0; i < 3; i++) bound[g->inputs[i]] = in[i];
    kiln_status s;
    if (b == B_REF) {
      s = kiln_ref_run(g, bound, &out);
    } else {
      kiln_sls_force_isa(b == B_CPU_BASE ? KILN_VM_ISA_BASE : KILN_VM_ISA_AVX2);
      kiln_cpu_plan *p = NULL;
      s = kiln_cpu_prepare(g, &p);
      if (!s) s = kiln_cpu_run(p, g, bound, &out);
      if (!s) {
        kiln_cpu_stats st;
        kiln_cpu_plan_stats(p, &st);
        CHECK(st.views == 1 && st.ref_calls == 1 && st.own_calls == 0,
              "the transposed table is a view the cpu kernel declines (views %d, own %ld, reference %ld)", st.views,
              st.own_calls, st.ref_calls);
      }
      kiln_cpu_release(p);
      kiln_sls_force_isa(KILN_VM_NISA);
    }
    double want[15], tol[15];
    expect_sls(&table_rows, KILN_SLS_F32, dim, idx, start, m, NULL, false, false, want, tol);
    int64_t where = 0;
    CHECK(!s && out.numel == m * dim && close_all(out.data, want, tol, m * dim, &where),
          "SparseLengthsSum over a transposed (view) table on %s: %s", bname[b], s ? kiln_last_error() : "wrong values");
    kiln_tensor_release(&out);
    kiln_free(bound);
    kiln_graph_free(g);
  }
  kiln_tensor_release(&xt);
  kiln_tensor_release(&table_rows);
  kiln_tensor_release(&ti);
  kiln_tensor_release(&tl);
}

/* Runs a one-node SparseLengthsSum / WeightedSum (positional) whose data is
 * wrong and expects KILN_E_INVALID_VALUE with the node's name and `what`
 * in the message. */
static void expect_invalid(const char *why, const int64_t *idx, int64_t n, const int64_t *seg, int64_t m, bool offsets,
                           bool positional, int64_t nw, const char *what) {
  for (int b = 0; b < NB; b++) {
    if (!backend_ok(b)) continue;
    for (int kind = 0; kind < 3; kind++) {
      kiln_tensor t = table((kiln_sls_table)kind, 4, 10), ti = vec_i(KILN_I64, n, idx), tl = vec_i(KILN_I32, m, seg);
      kiln_tensor tw = make(KILN_F32, 1, &nw);
      kiln_tensor *in4[4] = {&t, &tw, &ti, &tl};
      attrs a = {0};
      if (offsets) a.name[a.n] = "offsets", a.v[a.n++] = 1;
      if (positional) a.name[a.n] = "positional", a.v[a.n++] = 1;
      kiln_graph *g = one_node("SparseLengthsWeightedSum", 4, in4, 1, &a, 1);
      kiln_tensor out = {0};
      kiln_error_clear();
      kiln_status s = run_on(b, g, in4, 4, &out);
      const char *msg = kiln_last_error();
      CHECK(s == KILN_E_INVALID_VALUE && msg && strstr(msg, "kiln_node") && strstr(msg, what),
            "%s on %s (%s table): status %d, message '%s'", why, bname[b], kind_name[kind], (int)s, msg ? msg : "");
      kiln_tensor_release(&out);
      kiln_graph_free(g);
      kiln_tensor_release(&t);
      kiln_tensor_release(&ti);
      kiln_tensor_release(&tl);
      kiln_tensor_release(&tw);
    }
  }
}

static void test_sls_errors(void) {
  int64_t idx[5] = {0, 1, 2, 3, 1}, len[3] = {2, 0, 3}, off[3] = {0, 2, 2};
  expect_invalid("index past the table", (int64_t[]){0, 1, 2, 4, 1}, 5, len, 3, false, false, 5, "INDICES[3] = 4");
  expect_invalid("negative index", (int64_t[]){0, 1, -1, 3, 1}, 5, len, 3, false, false, 5, "INDICES[2] = -1");
  expect_invalid("lengths add up to less", idx, 5, (int64_t[]){2, 0, 2}, 3, false, false, 5, "add up to 4");
  expect_invalid("lengths add up to more", idx, 5, (int64_t[]){2, 4, 0}, 3, false, false, 5, "more than the 5");
  expect_invalid("negative length", idx, 5, (int64_t[]){2, -1, 4}, 3, false, false, 5, "negative");
  expect_invalid("offsets not starting at 0", idx, 5, (int64_t[]){1, 2, 2}, 3, true, false, 5, "OFFSETS[0]");
  expect_invalid("decreasing offsets", idx, 5, (int64_t[]){0, 3, 2}, 3, true, false, 5, "OFFSETS[2]");
  expect_invalid("offset past the indices", idx, 5, (int64_t[]){0, 2, 6}, 3, true, false, 5, "OFFSETS[2]");
  expect_invalid("weights count", idx, 5, len, 3, false, false, 4, "WEIGHTS has 4");
  expect_invalid("positional weights too short", idx, 5, off, 3, true, true, 2, "positional");
}

/* Bags enough for several tasks on the cpu pool (sls.c sls_run: a task per
 * ~2048 indices): 400 bags of 0..40 indices, empty ones inside and at the
 * end, every table kind, on every backend against the expectation, and the
 * cpu plan's output bit for bit against the serial kernel called here on
 * the whole job (a bag's sum does not depend on the split). A bad index in
 * a late task alone, then also one in an earlier task: the error names the
 * earlier one, as the serial kernel (and the reference) does. */
static void test_sls_tasks(void) {
  enum { M = 400, ROWS = 1000, DIM = 19 };
  static int64_t lens[M], start[M + 1], idx[M * 40], bad[M * 40];
  static float w[M * 40], serial[M * DIM];
  static double want[M * DIM], tol[M * DIM];
  for (int s = 0; s < M; s++) {
    lens[s] = s >= M - 5 || s % 11 == 3 ? 0 : (s * 37) % 41;
    start[s + 1] = start[s] + lens[s];
  }
  const int64_t n = start[M], m = M;
  for (int64_t k = 0; k < n; k++) idx[k] = (k * 7919) % ROWS, w[k] = (float)rnd();
  unsigned long long hash = 1469598103934665603ull;
  for (int kind = 0; kind < 3; kind++) {
    kiln_tensor t = table((kiln_sls_table)kind, ROWS, DIM), ti = vec_i(KILN_I64, n, idx), tl = vec_i(KILN_I64, m, lens);
    kiln_tensor tw = make(KILN_F32, 1, &n);
    memcpy(tw.data, w, sizeof *w * (size_t)n);
    kiln_tensor *in4[4] = {&t, &tw, &ti, &tl};
    expect_sls(&t, (kiln_sls_table)kind, DIM, idx, start, m, w, false, false, want, tol);
    for (int b = 0; b < NB; b++) {
      if (!backend_ok(b)) continue;
      kiln_graph *g = one_node("SparseLengthsWeightedSum", 4, in4, 1, NULL, 1);
      kiln_tensor out = {0};
      kiln_status s = run_on(b, g, in4, 4, &out);
      int64_t at = 0;
      CHECK(!s && out.numel == m * DIM && close_all(out.data, want, tol, m * DIM, &at),
            "%lld indices in %d bags on %s, %s table: %s (element %lld)", (long long)n, M, bname[b], kind_name[kind],
            s ? kiln_last_error() : "wrong values", (long long)at);
      if (!s && b != B_REF) {
        size_t el = kind == KILN_SLS_F32 ? 4 : kind == KILN_SLS_F16 ? 2 : 1;
        kiln_sls_job j = {(kiln_sls_table)kind, t.data, (size_t)(kind == KILN_SLS_U8ROW ? DIM + 8 : DIM) * el,
                          ROWS, DIM, ti.data, true, start, m, w, false, false, serial, -1};
        if (b == B_CPU_AVX2) kiln_sls_avx2_fma(&j);
        else kiln_sls_base(&j);
        CHECK(j.bad < 0 && out.numel == m * DIM && !memcmp(out.data, serial, sizeof serial),
              "%s table on %s: the plan's bags are the serial kernel's bits", kind_name[kind], bname[b]);
        const unsigned char *p = out.data;
        for (size_t i = 0; i < sizeof serial && out.numel == m * DIM; i++) hash = (hash ^ p[i]) * 1099511628211ull;
      }
      kiln_tensor_release(&out);
      kiln_graph_free(g);
      for (int twice = 0; twice < 2; twice++) { /* a bad index late, then one earlier too */
        memcpy(bad, idx, sizeof *idx * (size_t)n);
        int64_t late = n - 3, early = n / 5;
        bad[late] = ROWS + 5;
        if (twice) bad[early] = -2;
        kiln_tensor tb = vec_i(KILN_I64, n, bad);
        kiln_tensor *inb[4] = {&t, &tw, &tb, &tl};
        g = one_node("SparseLengthsWeightedSum", 4, inb, 1, NULL, 1);
        kiln_error_clear();
        s = run_on(b, g, inb, 4, &out);
        char need[64];
        snprintf(need, sizeof need, "INDICES[%lld] = %lld", (long long)(twice ? early : late),
                 (long long)(twice ? -2 : ROWS + 5));
        const char *msg = kiln_last_error();
        CHECK(s == KILN_E_INVALID_VALUE && msg && strstr(msg, need), "%s on %s (%s table): status %d, message '%s'",
              need, bname[b], kind_name[kind], (int)s, msg ? msg : "");
        kiln_tensor_release(&out);
        kiln_graph_free(g);
        kiln_tensor_release(&tb);
      }
    }
    kiln_tensor_release(&t);
    kiln_tensor_release(&ti);
    kiln_tensor_release(&tl);
    kiln_tensor_release(&tw);
  }
  /* kiln_sls_run itself on the pool, into NaN-filled rows: every bag
     written (the empty ones inside and at the end too), bit for bit the
     serial kernel's */
  bool pool = kiln_pool_acquire() == 0;
  CHECK(kiln_cpu_num_threads() < 2 || (pool && kiln_pool_threads() > 1),
        "kiln_sls_run has a pool of %d threads to split over (KILN_NUM_THREADS %d)", pool ? kiln_pool_threads() : 0,
        kiln_cpu_num_threads());
  kiln_tensor t = table(KILN_SLS_F32, ROWS, DIM);
  static float par[M * DIM];
  for (int isa = 0; isa < 2; isa++) {
    if (isa && !kiln_sls_isa_ok(KILN_VM_ISA_AVX2)) continue;
    kiln_sls_job j = {KILN_SLS_F32, t.data, DIM * sizeof(float), ROWS, DIM, idx, true, start, m, w, false, false,
                      serial, -1};
    if (isa) kiln_sls_avx2_fma(&j);
    else kiln_sls_base(&j);
    for (int i = 0; i < M * DIM; i++) par[i] = NAN;
    kiln_sls_job jp = j;
    jp.out = par, jp.bad = -1;
    kiln_sls_run(&jp, isa == 1);
    CHECK(jp.bad < 0 && !memcmp(par, serial, sizeof par), "kiln_sls_run (%s, %d pool threads): the serial bits",
          isa ? "avx2" : "base", kiln_pool_threads());
  }
  if (pool) kiln_pool_release();
  kiln_tensor_release(&t);
  printf("sls tasks: %d threads, %lld indices\nsls tasks output hash %016llx\n", kiln_cpu_num_threads(), (long long)n,
         hash);
}

/* negative_indices = 1 (the cpu plan's embedding-bag rewrite, Gather's
 * indices): an index in [-rows, 0) counts from the end, on every backend and
 * table kind; one outside [-rows, rows) gives Gather's error. */
static void test_sls_negative(void) {
  const int64_t m = 3, rows = 7, n = 6;
  int64_t idx[6] = {-1, 0, 3, -7, 6, -3}, wrapped[6] = {6, 0, 3, 0, 6, 4}, lens[3] = {2, 3, 1}, start[4] = {0, 2, 5, 6};
  float w[6];
  for (int k = 0; k < n; k++) w[k] = (float)rnd();
  for (int kind = 0; kind < 3; kind++)
    for (int b = 0; b < NB; b++) {
      if (!backend_ok(b)) continue;
      kiln_tensor t = table((kiln_sls_table)kind, rows, 9), ti = vec_i(KILN_I32, n, idx), tl = vec_i(KILN_I64, m, lens);
      kiln_tensor tw = make(KILN_F32, 1, &n);
      memcpy(tw.data, w, sizeof w);
      kiln_tensor *in4[4] = {&t, &tw, &ti, &tl};
      attrs a = {1, {"negative_indices"}, {1}, false, 0};
      kiln_graph *g = one_node("SparseLengthsWeightedSum", 4, in4, 1, &a, 1);
      kiln_tensor out = {0};
      kiln_status s = run_on(b, g, in4, 4, &out);
      double want[3 * 9], tol[3 * 9];
      expect_sls(&t, (kiln_sls_table)kind, 9, wrapped, start, m, w, false, false, want, tol);
      int64_t at = 0;
      CHECK(!s && out.numel == m * 9 && close_all(out.data, want, tol, m * 9, &at),
            "negative_indices on %s, %s table: %s (element %lld)", bname[b], kind_name[kind],
            s ? kiln_last_error() : "wrong values", (long long)at);
      kiln_tensor_release(&out);
      kiln_graph_free(g);
      kiln_tensor_release(&ti);
      ti = vec_i(KILN_I64, n, (int64_t[]){0, 1, -8, 2, 3, 4});
      g = one_node("SparseLengthsWeightedSum", 4, in4, 1, &a, 1);
      kiln_error_clear();
      s = run_on(b, g, in4, 4, &out);
      const char *msg = kiln_last_error();
      CHECK(s == KILN_E_INVALID_VALUE && msg && strstr(msg, "index -8 is out of range for a dimension of size 7"),
            "negative_indices, index -8 on %s (%s table): status %d, message '%s'", bname[b], kind_name[kind], (int)s,
            msg ? msg : "");
      kiln_tensor_release(&out);
      kiln_graph_free(g);
      kiln_tensor_release(&t);
      kiln_tensor_release(&ti);
      kiln_tensor_release(&tl);
      kiln_tensor_release(&tw);
    }
}

static double sigm(double x) { return 1 / (1 + exp(-x)); }

static void test_lstm_unit(void) {
  const int64_t n = 4;
  static const int64_t ds[] = {1, 5, 8, 19};
  for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
    for (int mode = 0; mode < 3; mode++) /* no sequence lengths; keep states; drop states */
      for (int b = 0; b < NB; b++) {
        if (!backend_ok(b)) continue;
        int64_t d = ds[di], sh[3] = {1, n, d}, gsh[3] = {1, n, 4 * d}, seqv[4] = {3, 1, 0, 2}, tv = 1, one = 1;
        kiln_tensor h = make(KILN_F32, 3, sh), cp = make(KILN_F32, 3, sh), gt = make(KILN_F32, 3, gsh);
        kiln_tensor seq = vec_i(KILN_I32, n, seqv), ts = make(KILN_I32, 1, &one);
        kiln_set_i(&ts, 0, tv);
        for (int64_t i = 0; i < h.numel; i++) kiln_set_f(&h, i, rnd()), kiln_set_f(&cp, i, rnd() * 2);
        for (int64_t i = 0; i < gt.numel; i++) kiln_set_f(&gt, i, rnd() * 4);
        kiln_tensor *in[5] = {&h, &cp, &gt, &seq, &ts};
        attrs a = {0};
        a.has_fb = true;
        a.forget_bias = 0.75f;
        if (mode == 0) a.name[a.n] = "sequence_lengths", a.v[a.n++] = 0;
        if (mode == 2) a.name[a.n] = "drop_states", a.v[a.n++] = 1;
        kiln_graph *g = one_node("LSTMUnit", mode ? 5 : 3, in, 2, &a, 1);
        kiln_tensor out[2] = {{0}};
        kiln_status s = run_on(b, g, in, mode ? 5 : 3, out);
        int ok = !s && out[0].numel == n * d && out[1].numel == n * d && out[0].rank == 3;
        for (int64_t r = 0; r < n && ok; r++)
          for (int64_t e = 0; e < d && ok; e++) {
            const float *x = (const float *)gt.data + r * 4 * d;
            double hw, cw;
            if (mode && !(tv < seqv[r])) {
              hw = mode == 2 ? 0 : ((float *)h.data)[r * d + e];
              cw = mode == 2 ? 0 : ((float *)cp.data)[r * d + e];
            } else {
              double ig = sigm(x[e]), fg = sigm(x[d + e] + 0.75), og = sigm(x[2 * d + e]), gg = tanh(x[3 * d + e]);
              cw = fg * ((float *)cp.data)[r * d + e] + ig * gg;
              hw = og * tanh(cw);
            }
            ok = fabs(((float *)out[0].data)[r * d + e] - hw) <= 1e-5 * (1 + fabs(hw)) &&
                 fabs(((float *)out[1].data)[r * d + e] - cw) <= 1e-5 * (1 + fabs(cw));
          }
        CHECK(ok, "LSTMUnit on %s, D %lld, mode %d: %s", bname[b], (long long)d, mode, s ? kiln_last_error() : "wrong values");
        kiln_tensor_release(&out[0]);
        kiln_tensor_release(&out[1]);
        kiln_graph_free(g);
        kiln_tensor *all[5] = {&h, &cp, &gt, &seq, &ts};
        for (int i = 0; i < 5; i++) kiln_tensor_release(all[i]);
      }
}

/* FloatToFused8BitRowwiseQuantized then Fused8BitRowwiseQuantizedToFloat
 * (two one-node graphs) on each backend against Caffe2's arithmetic. */
static void test_quant_ops(void) {
  static const int64_t ds[] = {1, 6, 8, 21};
  for (size_t di = 0; di < sizeof ds / sizeof *ds; di++)
    for (int b = 0; b < NB; b++) {
      if (!backend_ok(b)) continue;
      int64_t d = ds[di], sh[3] = {2, 3, d};
      kiln_tensor x = make(KILN_F32, 3, sh);
      for (int64_t i = 0; i < x.numel; i++) kiln_set_f(&x, i, rnd() * 3);
      kiln_tensor *in[1] = {&x};
      kiln_graph *g = one_node("FloatToFused8BitRowwiseQuantized", 1, in, 1, NULL, 1);
      kiln_tensor q = {0};
      kiln_status s = run_on(b, g, in, 1, &q);
      uint8_t want[6 * 29];
      for (int r = 0; r < 6; r++) quant_row_c2((const float *)x.data + r * d, d, want + r * (d + 8));
      CHECK(!s && q.dtype == KILN_U8 && q.rank == 3 && q.dims[2] == d + 8 && !memcmp(q.data, want, (size_t)(6 * (d + 8))),
            "FloatToFused8BitRowwiseQuantized on %s, D %lld: %s", bname[b], (long long)d, s ? kiln_last_error() : "wrong bytes");
      kiln_graph_free(g);
      if (!s) {
        kiln_tensor *qin[1] = {&q};
        g = one_node("Fused8BitRowwiseQuantizedToFloat", 1, qin, 1, NULL, 1);
        kiln_tensor y = {0};
        s = run_on(b, g, qin, 1, &y);
        int ok = !s && y.dtype == KILN_F32 && y.numel == x.numel && y.dims[2] == d;
        for (int64_t r = 0; r < 6 && ok; r++) {
          float sb[2];
          memcpy(sb, want + r * (d + 8) + d, 8);
          for (int64_t e = 0; e < d && ok; e++) {
            float p = (float)want[r * (d + 8) + e] * sb[0];
            ok = ((float *)y.data)[r * d + e] == p + sb[1];
          }
        }
        CHECK(ok, "Fused8BitRowwiseQuantizedToFloat on %s, D %lld: %s", bname[b], (long long)d,
              s ? kiln_last_error() : "wrong values");
        kiln_tensor_release(&y);
        kiln_graph_free(g);
      }
      kiln_tensor_release(&q);
      kiln_tensor_release(&x);
    }
}

/* Static checks: a newer version of the domain, an unknown operator of it,
 * a bad flag. */
static void test_checks(void) {
  int64_t dims[2] = {3, 4}, three = 3;
  kiln_tensor t = make(KILN_F32, 2, dims), ti = make(KILN_I64, 1, &three), tl = make(KILN_I64, 1, &three);
  kiln_tensor *in3[3] = {&t, &ti, &tl};
  kiln_graph *g = one_node("SparseLengthsSum", 3, in3, 1, NULL, 2);
  kiln_status s = kiln_ref_check_graph(g);
  CHECK(s == KILN_E_VERSION && strstr(kiln_last_error(), "ai.kiln"), "version 2 of the domain: %d '%s'", (int)s,
        kiln_last_error());
  kiln_graph_free(g);
  g = one_node("SparseLengthsMax", 3, in3, 1, NULL, 1);
  s = kiln_ref_check_graph(g);
  CHECK(s == KILN_E_UNSUPPORTED_OP && strstr(kiln_last_error(), "SparseLengthsMax") &&
            strstr(kiln_last_error(), "ai.kiln"),
        "unknown op of the domain: %d '%s'", (int)s, kiln_last_error());
  kiln_graph_free(g);
  attrs a = {1, {"offsets"}, {2}, false, 0};
  g = one_node("SparseLengthsSum", 3, in3, 1, &a, 1);
  s = kiln_ref_check_graph(g);
  CHECK(s == KILN_E_UNSUPPORTED_ATTR && strstr(kiln_last_error(), "kiln_node"), "offsets = 2: %d '%s'", (int)s,
        kiln_last_error());
  kiln_graph_free(g);
  /* a default-domain op is not found in the kiln domain and vice versa */
  CHECK(!kiln_ref_find_op(KILN_DOMAIN, "Relu") && !kiln_ref_find_op("", "SparseLengthsSum") &&
            kiln_ref_find_op(KILN_DOMAIN, "LSTMUnit"),
        "domains are kept apart");
  kiln_tensor_release(&t);
  kiln_tensor_release(&ti);
  kiln_tensor_release(&tl);
}

int main(void) {
  printf("isa: avx2 kernels %s\n", kiln_sls_isa_ok(KILN_VM_ISA_AVX2) ? "available" : "not available (base only)");
  test_sls_twins();
  test_sls_no_lanes();
  test_quant_twins();
  test_sls_ops();
  test_sls_view_input();
  test_sls_errors();
  test_sls_negative();
  test_sls_tasks();
  test_lstm_unit();
  test_quant_ops();
  test_checks();
  printf("unit_kiln_ops: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
