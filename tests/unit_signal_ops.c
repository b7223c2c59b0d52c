/* tests/unit_signal_ops: DFT, STFT, MelWeightMatrix and TfIdfVectorizer
 * (reference/ops_signal.c, reference/ops_text.c, ir/shape_ops_signal.c)
 * beyond what the node tests and tests/signal cover:
 *   - every bad attribute, type or shape the static check can see is an
 *     error with the right status and a message naming the node ("n0") and
 *     what was wrong;
 *   - bad run-time values (lengths, steps, edges) likewise, on the reference
 *     backend and through the cpu plan (which runs the same kernels);
 *   - shape inference over symbolic dims: the output dims, evaluated with
 *     the symbols bound, equal the shapes the kernels produce. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cpu_fallback/plan.h"
#include "graphbuild.h"
#include "ir/alloc.h"
#include "ir/shape.h"
#include "reference/exec.h"

static int passed, failed;
#include "tests/check.h"

/* ---- graph pieces ---- */

static kiln_tensor scalar_i64(int64_t v) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, KILN_I64, 0, NULL)) exit(2);
  kiln_set_i(&t, 0, v);
  return t;
}

static kiln_tensor scalar_f32(double v) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, KILN_F32, 0, NULL)) exit(2);
  kiln_set_f(&t, 0, v);
  return t;
}

static kiln_tensor ramp(kiln_dtype dt, int rank, const int64_t *dims) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, dt, rank, dims)) exit(2);
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, (double)(i % 7) - 2.5);
  return t;
}

/* A graph with graph inputs in0.. of the given tensors' types and shapes
 * (NULL: an omitted optional input) and one node n0 = op(in...) -> y. */
static kiln_graph *one_node(int64_t opset, const char *op, int n_in, kiln_tensor *const *in) {
  kiln_graph *g = new_graph(opset);
  char ins[128] = "";
  for (int i = 0; i < n_in; i++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    if (in[i]) input(g, name, in[i]->dtype, in[i]->rank, in[i]->dims);
    strcat(ins, i ? " " : "");
    strcat(ins, in[i] ? name : "-");
  }
  gb_add(g, op, ins, "y");
  output(g, "y");
  return g;
}

/* Runs g on the reference backend (cpu: through the cpu plan). */
static kiln_status run(kiln_graph *g, kiln_tensor *const *in, int n_in, bool cpu, kiln_tensor *out) {
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  for (int i = 0; i < n_in; i++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    if (in[i]) bound[val(g, name)] = in[i];
  }
  kiln_status s = kiln_ref_check_graph(g);
  if (!s && !cpu) s = kiln_ref_run(g, bound, out);
  if (!s && cpu) {
    kiln_cpu_plan *p = NULL;
    s = kiln_cpu_prepare(g, &p);
    if (!s) s = kiln_cpu_run(p, g, bound, out);
    kiln_cpu_release(p);
  }
  kiln_free(bound);
  return s;
}

/* Expects status want with a message naming n0 and containing phrase. */
static void expect(kiln_graph *g, kiln_tensor *const *in, int n_in, bool cpu, kiln_status want, const char *phrase,
                   const char *what) {
  kiln_tensor out = {0};
  kiln_status s = run(g, in, n_in, cpu, &out);
  const char *m = kiln_last_error();
  CHECK(s == want && strstr(m, "n0") && strstr(m, phrase), "%s (%s): status %d (want %d), message '%s' (want '%s')",
        what, cpu ? "cpu" : "reference", (int)s, (int)want, s ? m : "", phrase);
  kiln_tensor_release(&out);
}

static kiln_node *node0(kiln_graph *g) { return &g->nodes[0]; }

/* ---- static checks ---- */

static void test_dft_checks(void) {
  int64_t real[3] = {2, 8, 1}, cplx[3] = {2, 8, 2};
  kiln_tensor xr = ramp(KILN_F32, 3, real), xc = ramp(KILN_F32, 3, cplx), xi = ramp(KILN_I32, 3, real);
  kiln_tensor *r1[1] = {&xr}, *i1[1] = {&xi};
  struct {
    kiln_tensor **in;
    const char *attr[2];
    int64_t v[2];
    kiln_status want;
    const char *phrase;
  } cases[] = {
      {r1, {"axis"}, {-1}, KILN_E_UNSUPPORTED_ATTR, "'axis' is -1"},
      {r1, {"axis"}, {2}, KILN_E_UNSUPPORTED_ATTR, "'axis' is 2"},
      {r1, {"axis"}, {-4}, KILN_E_UNSUPPORTED_ATTR, "'axis' is -4"},
      {r1, {"onesided"}, {2}, KILN_E_UNSUPPORTED_ATTR, "'onesided' is 2"},
      {r1, {"inverse"}, {-1}, KILN_E_UNSUPPORTED_ATTR, "'inverse' is -1"},
      {i1, {NULL}, {0}, KILN_E_UNSUPPORTED_DTYPE, "int32"},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    kiln_graph *g = one_node(17, "DFT", 1, cases[k].in);
    for (int a = 0; a < 2 && cases[k].attr[a]; a++) kiln_edit_set_int(node0(g), cases[k].attr[a], cases[k].v[a]);
    expect(g, cases[k].in, 1, false, cases[k].want, cases[k].phrase, "DFT check");
    kiln_graph_free(g);
  }
  kiln_graph *g = one_node(16, "DFT", 1, r1);
  expect(g, r1, 1, false, KILN_E_MODEL, "opset 17", "DFT at opset 16");
  kiln_graph_free(g);
  /* opset 20 moved 'axis' to input 2 (default -2): kiln refuses the node
     rather than run it by opset 17's rules */
  g = one_node(20, "DFT", 1, r1);
  expect(g, r1, 1, false, KILN_E_VERSION, "opset 20 is newer", "DFT at opset 20");
  kiln_graph_free(g);
  kiln_tensor_release(&xr);
  kiln_tensor_release(&xc);
  kiln_tensor_release(&xi);
}

static void test_stft_mel_checks(void) {
  int64_t sc[3] = {1, 16, 2}, w2[2] = {4, 4};
  kiln_tensor x = ramp(KILN_F32, 3, sc), step = scalar_i64(4), w = ramp(KILN_F32, 2, w2);
  kiln_tensor *in2[2] = {&x, &step};
  kiln_graph *g = one_node(17, "STFT", 2, in2);
  expect(g, in2, 2, false, KILN_E_MISMATCH_SHAPE, "onesided=1 (the default) needs a real signal", "STFT complex");
  kiln_graph_free(g);
  x.dims[2] = 1, x.numel = 16;
  kiln_tensor *in3[3] = {&x, &step, &w};
  g = one_node(17, "STFT", 3, in3);
  expect(g, in3, 3, false, KILN_E_MISMATCH_SHAPE, "1-D window", "STFT window of rank 2");
  kiln_graph_free(g);
  kiln_tensor m = scalar_i64(8), lo = scalar_f32(0), hi = scalar_f32(100);
  kiln_tensor *mel[5] = {&m, &m, &m, &lo, &hi};
  g = one_node(17, "MelWeightMatrix", 5, mel);
  kiln_edit_set_int(node0(g), "output_datatype", KILN_STRING);
  expect(g, mel, 5, false, KILN_E_UNSUPPORTED_ATTR, "'output_datatype' is 8", "MelWeightMatrix string output");
  kiln_graph_free(g);
  kiln_tensor_release(&x);
  kiln_tensor_release(&step);
  kiln_tensor_release(&w);
  kiln_tensor_release(&m);
  kiln_tensor_release(&lo);
  kiln_tensor_release(&hi);
}

static void test_tfidf_checks(void) {
  int64_t d2[2] = {2, 6};
  kiln_tensor x = ramp(KILN_I64, 2, d2), xf = ramp(KILN_F32, 2, d2);
  kiln_tensor *in[1] = {&x}, *inf[1] = {&xf};
  static const int64_t pool[] = {1, 2, 3, 4, 5, 6}, counts2[] = {0, 2}, idx4[] = {0, 1, 2, 3};
  static const float w2[] = {1, 2};
  enum { OK, STRINGS, MODE, LENGTHS, SKIP, WHOLE, NIDX, WEIGHTS, ORDER, FLOAT_IN, N_CASES };
  static const char *phrase[] = {"", "cannot cross the ONNXIFI ABI", "'mode' is 'BM25'", "1 <= min <= max",
                                 "'max_skip_count' is -1", "whole number of 3-grams", "one entry each",
                                 "one weight each", "non-decreasing", "int32 or int64 expected"};
  for (int k = 0; k < N_CASES; k++) {
    kiln_graph *g = one_node(9, "TfIdfVectorizer", 1, k == FLOAT_IN ? inf : in);
    kiln_node *n = node0(g);
    kiln_edit_set_string(n, "mode", k == MODE ? "BM25" : "TFIDF");
    kiln_edit_set_int(n, "min_gram_length", k == LENGTHS ? 3 : 1);
    kiln_edit_set_int(n, "max_gram_length", k == WHOLE ? 3 : 2);
    kiln_edit_set_int(n, "max_skip_count", k == SKIP ? -1 : 1);
    /* 2 1-grams + 2 2-grams, or (WHOLE) 1-grams 0..1, 2-grams 2..3, 3-grams 4..5: 2 items */
    static const int64_t counts3[] = {0, 2, 4}, bad_order[] = {0, 4, 2};
    kiln_edit_set_ints(n, "ngram_counts", k == WHOLE ? counts3 : k == ORDER ? bad_order : counts2,
                       k == WHOLE || k == ORDER ? 3 : 2);
    kiln_edit_set_ints(n, "ngram_indexes", idx4, k == NIDX ? 3 : 4);
    kiln_edit_set_ints(n, "pool_int64s", pool, 6);
    if (k == WEIGHTS) kiln_edit_set_floats(n, "weights", w2, 2);
    if (k == STRINGS) {
      kiln_attr *a = kiln_realloc(n->attrs, (size_t)(n->n_attrs + 1) * sizeof *a);
      if (!a) exit(2);
      n->attrs = a;
      memset(&a[n->n_attrs], 0, sizeof *a);
      a[n->n_attrs].name = kiln_strdup("pool_strings");
      a[n->n_attrs].type = KILN_ATTR_STRINGS;
      n->n_attrs++;
    }
    kiln_tensor out = {0};
    kiln_status s = run(g, k == FLOAT_IN ? inf : in, 1, false, &out);
    if (k == OK) {
      CHECK(!s && out.rank == 2 && out.dims[0] == 2 && out.dims[1] == 4, "TfIdfVectorizer valid: %d '%s'", (int)s,
            s ? kiln_last_error() : "");
    } else {
      const char *m = kiln_last_error();
      CHECK(s && strstr(m, "n0") && strstr(m, phrase[k]), "TfIdfVectorizer case %d: status %d, message '%s' (want '%s')",
            k, (int)s, s ? m : "", phrase[k]);
    }
    kiln_tensor_release(&out);
    kiln_graph_free(g);
  }
  /* a string X (the graph would need string tensors at the ABI) */
  kiln_tensor xs = {0};
  xs.dtype = KILN_STRING, xs.rank = 1, xs.dims[0] = 6, xs.numel = 6;
  kiln_tensor *ins[1] = {&xs};
  kiln_graph *g = one_node(9, "TfIdfVectorizer", 1, ins);
  kiln_status s = kiln_ref_check_graph(g);
  CHECK(s == KILN_E_UNSUPPORTED_DTYPE && strstr(kiln_last_error(), "n0") &&
            strstr(kiln_last_error(), "cannot cross the ONNXIFI ABI"),
        "TfIdfVectorizer over strings: status %d, message '%s'", (int)s, s ? kiln_last_error() : "");
  kiln_graph_free(g);
  kiln_tensor_release(&x);
  kiln_tensor_release(&xf);
}

/* The weight of the i-th n-gram of the pool is weights[i] (ONNX's text,
 * onnxruntime 1.32), whatever coordinate ngram_indexes gives it: 1-grams 0
 * and 1 at coordinates 1 and 0, weights 2 and 3, X = [0, 0, 1] (and the
 * same row twice, [2, 3]): TFIDF [1 * 3, 2 * 2] = [3, 4], IDF [3, 2], TF [1,
 * 2]; with both 1-grams at coordinate 0 their terms add up there (TFIDF 2 *
 * 2 + 1 * 3 = 7). On reference and cpu. */
static void test_tfidf_weights(void) {
  static const int64_t pool[] = {0, 1}, counts[] = {0}, swap[] = {1, 0}, same[] = {0, 0};
  static const float w[] = {2, 3};
  static const char *const modes[] = {"TFIDF", "IDF", "TF", "TFIDF"};
  static const float want[4][2] = {{3, 4}, {3, 2}, {1, 2}, {7, 0}};
  for (int m = 0; m < 4; m++)
    for (int cpu = 0; cpu < 2; cpu++) {
      int64_t d2[2] = {2, 3};
      kiln_tensor x = {0};
      if (kiln_tensor_alloc(&x, KILN_I64, 2, d2)) exit(2);
      for (int64_t i = 0; i < 6; i++) kiln_set_i(&x, i, i % 3 == 2 ? 1 : 0);
      kiln_tensor *in[1] = {&x};
      kiln_graph *g = one_node(9, "TfIdfVectorizer", 1, in);
      kiln_node *n = node0(g);
      kiln_edit_set_string(n, "mode", modes[m]);
      kiln_edit_set_int(n, "min_gram_length", 1);
      kiln_edit_set_int(n, "max_gram_length", 1);
      kiln_edit_set_int(n, "max_skip_count", 0);
      kiln_edit_set_ints(n, "ngram_counts", counts, 1);
      kiln_edit_set_ints(n, "ngram_indexes", m == 3 ? same : swap, 2);
      kiln_edit_set_ints(n, "pool_int64s", pool, 2);
      kiln_edit_set_floats(n, "weights", w, 2);
      kiln_tensor out = {0};
      kiln_status s = run(g, in, 1, cpu, &out);
      int64_t cols = m == 3 ? 1 : 2;
      bool ok = !s && out.rank == 2 && out.dims[0] == 2 && out.dims[1] == cols;
      for (int64_t i = 0; ok && i < out.numel; i++) ok = kiln_get_f(&out, i) == want[m][i % cols];
      CHECK(ok, "TfIdfVectorizer %s%s weights by pool n-gram on %s: %s", modes[m], m == 3 ? " (one coordinate)" : "",
            cpu ? "cpu" : "reference", s ? kiln_last_error() : "values");
      kiln_tensor_release(&out);
      kiln_tensor_release(&x);
      kiln_graph_free(g);
    }
}

/* A window cast to an integer type is the cast of its float value:
 * BlackmanWindow of size 2, periodic, int32, is [0, 1] (0.42 + 0.5 + 0.08
 * cos(2 pi) came out as 1 - 1e-16 in double and truncated to 0). */
static void test_window_int(void) {
  for (int cpu = 0; cpu < 2; cpu++) {
    kiln_tensor two = scalar_i64(2);
    kiln_tensor *in[1] = {&two};
    kiln_graph *g = one_node(17, "BlackmanWindow", 1, in);
    kiln_edit_set_int(node0(g), "output_datatype", KILN_I32);
    kiln_tensor out = {0};
    kiln_status s = run(g, in, 1, cpu, &out);
    CHECK(!s && out.dtype == KILN_I32 && out.numel == 2 && kiln_get_i(&out, 0) == 0 && kiln_get_i(&out, 1) == 1,
          "BlackmanWindow(2) as int32 on %s: [0, 1] (%s)", cpu ? "cpu" : "reference", s ? kiln_last_error() : "");
    kiln_tensor_release(&out);
    kiln_tensor_release(&two);
    kiln_graph_free(g);
  }
}

/* ---- run-time values ---- */

static void test_runtime_errors(void) {
  for (int cpu = 0; cpu < 2; cpu++) {
    int64_t d[3] = {1, 16, 1}, d1[3] = {1, 1, 2}, w8 = 8;
    kiln_tensor x = ramp(KILN_F32, 3, d), zero = scalar_i64(0), x1 = ramp(KILN_F32, 3, d1);
    kiln_tensor *dft_in[2] = {&x, &zero};
    kiln_graph *g = one_node(17, "DFT", 2, dft_in);
    expect(g, dft_in, 2, cpu, KILN_E_INVALID_VALUE, "(dft_length) is 0", "DFT length 0");
    kiln_graph_free(g);
    kiln_tensor *irf[1] = {&x1};
    g = one_node(17, "DFT", 1, irf);
    kiln_edit_set_int(node0(g), "inverse", 1);
    kiln_edit_set_int(node0(g), "onesided", 1);
    expect(g, irf, 1, cpu, KILN_E_INVALID_VALUE, "2 * (1 - 1)", "IRFFT of one bin");
    kiln_graph_free(g);
    kiln_tensor step = scalar_i64(4), big = scalar_i64(20), ten = scalar_i64(10), w = ramp(KILN_F32, 1, &w8);
    kiln_tensor *st0[2] = {&x, &zero}, *st_big[4] = {&x, &step, NULL, &big}, *st_mis[4] = {&x, &step, &w, &ten};
    g = one_node(17, "STFT", 2, st0);
    expect(g, st0, 2, cpu, KILN_E_INVALID_VALUE, "(frame_step) is 0", "STFT step 0");
    kiln_graph_free(g);
    g = one_node(17, "STFT", 4, st_big);
    expect(g, st_big, 4, cpu, KILN_E_INVALID_VALUE, "frame length 20 is outside [1, 16]", "STFT frame too long");
    kiln_graph_free(g);
    g = one_node(17, "STFT", 4, st_mis);
    expect(g, st_mis, 4, cpu, KILN_E_MISMATCH_SHAPE, "(window)", "STFT window vs frame_length");
    kiln_graph_free(g);
    kiln_tensor m = scalar_i64(8), L = scalar_i64(64), sr = scalar_i64(8000), lo = scalar_f32(0), hi = scalar_f32(7900);
    kiln_tensor *mel[5] = {&m, &L, &sr, &lo, &hi}, *mel0[5] = {&zero, &L, &sr, &lo, &hi};
    g = one_node(17, "MelWeightMatrix", 5, mel);
    expect(g, mel, 5, cpu, KILN_E_INVALID_VALUE, "outside [0, 32]", "MelWeightMatrix upper edge");
    kiln_graph_free(g);
    g = one_node(17, "MelWeightMatrix", 5, mel0);
    expect(g, mel0, 5, cpu, KILN_E_INVALID_VALUE, "(num_mel_bins) is 0", "MelWeightMatrix no bins");
    kiln_graph_free(g);
    /* sizes whose product would overflow int64: a clean error */
    kiln_tensor mbig = scalar_i64((int64_t)1 << 30), Lbig = scalar_i64((int64_t)1 << 40);
    kiln_tensor mmid = scalar_i64((int64_t)1 << 20), Lmid = scalar_i64((int64_t)1 << 30);
    kiln_tensor *mel_big[5] = {&mbig, &Lbig, &sr, &lo, &hi}, *mel_mid[5] = {&mmid, &Lmid, &sr, &lo, &hi};
    g = one_node(17, "MelWeightMatrix", 5, mel_big);
    /* (2^39 + 1) x 2^30: the cpu plan's shape inference refuses it like any output past 2^63
       elements; the reference interpreter (no shape pass) by the kernel's own size check */
    expect(g, mel_big, 5, cpu, cpu ? KILN_E_UNSUPPORTED_SHAPE : KILN_E_INVALID_VALUE,
           cpu ? "multiply past 2^63" : "beyond 2^40", "MelWeightMatrix 2^30 bins, length 2^40");
    kiln_graph_free(g);
    g = one_node(17, "MelWeightMatrix", 5, mel_mid);
    expect(g, mel_mid, 5, cpu, KILN_E_INVALID_VALUE, "beyond 2^40", "MelWeightMatrix 2^20 bins, length 2^30");
    kiln_graph_free(g);
    /* length 2^22 (hours as an O(L^2) sum) runs by the radix-2 FFT: bin 0 is
       the sum of x, bin 2^21 its alternating sum */
    kiln_tensor L22 = scalar_i64((int64_t)1 << 22), out = {0};
    kiln_tensor *dft_long[2] = {&x, &L22};
    g = one_node(17, "DFT", 2, dft_long);
    kiln_status st = run(g, dft_long, 2, cpu, &out);
    double sum = 0, alt = 0;
    for (int64_t k = 0; k < x.numel; k++) sum += kiln_get_f(&x, k), alt += (k % 2 ? -1 : 1) * kiln_get_f(&x, k);
    CHECK(!st && out.rank == 3 && out.dims[1] == ((int64_t)1 << 22) && out.dims[2] == 2 &&
              fabs(kiln_get_f(&out, 0) - sum) < 1e-4 && fabs(kiln_get_f(&out, ((int64_t)1 << 22)) - alt) < 1e-4,
          "DFT of length 2^22 (%s): status %d, bin 0 %g (want %g)", cpu ? "cpu" : "reference", (int)st,
          st ? 0.0 : kiln_get_f(&out, 0), sum);
    kiln_tensor_release(&out);
    kiln_graph_free(g);
    /* 4096 rows of length 2^24 (2^24 * 24 each): beyond the work cap */
    int64_t dr[4] = {1, 1, 4096, 1};
    kiln_tensor xr = ramp(KILN_F32, 4, dr), L24 = scalar_i64((int64_t)1 << 24);
    kiln_tensor *dft_rows[2] = {&xr, &L24};
    g = one_node(17, "DFT", 2, dft_rows);
    expect(g, dft_rows, 2, cpu, KILN_E_UNSUPPORTED_SHAPE, "beyond kiln's cap of 2^36", "DFT 4096 rows of 2^24");
    kiln_graph_free(g);
    int64_t ds[3] = {1, (int64_t)1 << 19, 1};
    kiln_tensor xs = ramp(KILN_F32, 3, ds), one = scalar_i64(1), F18 = scalar_i64((int64_t)1 << 18);
    kiln_tensor *st_long[4] = {&xs, &one, NULL, &F18};
    g = one_node(17, "STFT", 4, st_long);
    expect(g, st_long, 4, cpu, KILN_E_UNSUPPORTED_SHAPE, "beyond kiln's cap of 2^36", "STFT of 2^18-long frames");
    kiln_graph_free(g);
    kiln_tensor *all[] = {&x,    &zero, &x1,  &step, &big, &ten, &w,   &m,  &L,  &sr, &lo,
                          &hi,   &mbig, &Lbig, &mmid, &Lmid, &L22, &xs, &one, &F18, &xr, &L24};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) kiln_tensor_release(all[k]);
  }
}

/* ---- symbolic shapes ---- */

/* Makes dim d of graph input `name` the symbol sym. */
static void symbolic(kiln_graph *g, const char *name, int d, const char *sym) {
  kiln_value *v = &g->values[val(g, name)];
  kiln_free(v->type.dims[d].param);
  v->type.dims[d].param = kiln_strdup(sym);
  v->type.dims[d].value = -1;
}

/* Infers g's shapes, binds the symbols to vals and compares output 0's
 * dims with want. */
static void expect_dims(kiln_graph *g, int n_sym, const char *const *syms, const int64_t *vals, int rank,
                        const int64_t *want, const char *what) {
  kiln_shapes *sh = NULL;
  kiln_status s = kiln_shapes_infer(g, &sh);
  CHECK(!s, "%s: inference failed: %s", what, kiln_last_error());
  if (s) return;
  const kiln_vshape *y = &sh->v[g->outputs[0]];
  int nsym = kiln_symtab_nsyms(sh->tab);
  int64_t bind[64];
  for (int k = 0; k < nsym && k < 64; k++) bind[k] = KILN_DIM_UNSET;
  for (int k = 0; k < n_sym; k++) {
    int id = kiln_sym_find(sh->tab, syms[k]);
    if (id >= 0 && id < 64) bind[id] = vals[k];
  }
  bool ok = y->rank == rank;
  char b[128] = "";
  for (int d = 0; ok && d < rank; d++) {
    int64_t got;
    ok = !kiln_dimx_eval(sh->tab, y->dims[d], bind, nsym, &got) && got == want[d];
    if (!ok) kiln_dimx_str(sh->tab, y->dims[d], b, sizeof b);
  }
  CHECK(ok && !y->data_dependent, "%s: rank %d (want %d), a dim is %s", what, y->rank, rank, b);
  kiln_shapes_free(sh);
}

static void test_symbolic(void) {
  static const char *const NT[2] = {"N", "T"};
  int64_t d3[3] = {2, 10, 1}, d3c[3] = {2, 10, 2};
  kiln_tensor x = ramp(KILN_F32, 3, d3), xc = ramp(KILN_F32, 3, d3c);
  kiln_tensor *in[1] = {&x}, *inc[1] = {&xc};
  /* RFFT [N, T, 1] -> [N, T/2 + 1, 2] at N = 3, T = 11 */
  kiln_graph *g = one_node(17, "DFT", 1, in);
  kiln_edit_set_int(node0(g), "onesided", 1);
  symbolic(g, "in0", 0, "N"), symbolic(g, "in0", 1, "T");
  expect_dims(g, 2, NT, (int64_t[]){3, 11}, 3, (int64_t[]){3, 6, 2}, "RFFT symbolic");
  kiln_graph_free(g);
  /* IRFFT [N, T, 2] -> [N, 2 (T - 1), 1] */
  g = one_node(17, "DFT", 1, inc);
  kiln_edit_set_int(node0(g), "onesided", 1), kiln_edit_set_int(node0(g), "inverse", 1);
  kiln_edit_set_int(node0(g), "axis", -2);
  symbolic(g, "in0", 0, "N"), symbolic(g, "in0", 1, "T");
  expect_dims(g, 2, NT, (int64_t[]){4, 6}, 3, (int64_t[]){4, 10, 1}, "IRFFT symbolic");
  kiln_graph_free(g);
  /* STFT [N, T, 1], constant step 3 and frame_length 8 -> [N, (T-8)/3 + 1, 5, 2] */
  g = new_graph(17);
  input(g, "sig", KILN_F32, 3, d3);
  gb_cst_i64(g, "step", -1, (int64_t[]){3});
  gb_cst_i64(g, "flen", -1, (int64_t[]){8});
  gb_add(g, "STFT", "sig step - flen", "y");
  output(g, "y");
  symbolic(g, "sig", 0, "N"), symbolic(g, "sig", 1, "T");
  expect_dims(g, 2, NT, (int64_t[]){2, 30}, 4, (int64_t[]){2, 8, 5, 2}, "STFT symbolic");
  kiln_graph_free(g);
  /* TfIdfVectorizer [N, C] -> [N, max(ngram_indexes) + 1] */
  int64_t d2[2] = {2, 6};
  kiln_tensor t = ramp(KILN_I64, 2, d2);
  kiln_tensor *tin[1] = {&t};
  g = one_node(9, "TfIdfVectorizer", 1, tin);
  kiln_edit_set_string(node0(g), "mode", "TF");
  kiln_edit_set_int(node0(g), "min_gram_length", 1), kiln_edit_set_int(node0(g), "max_gram_length", 1);
  kiln_edit_set_int(node0(g), "max_skip_count", 0);
  kiln_edit_set_ints(node0(g), "ngram_counts", (int64_t[]){0}, 1);
  kiln_edit_set_ints(node0(g), "ngram_indexes", (int64_t[]){4, 0}, 2);
  kiln_edit_set_ints(node0(g), "pool_int64s", (int64_t[]){7, 9}, 2);
  symbolic(g, "in0", 0, "N"), symbolic(g, "in0", 1, "T");
  expect_dims(g, 2, NT, (int64_t[]){5, 9}, 2, (int64_t[]){5, 5}, "TfIdfVectorizer symbolic");
  kiln_graph_free(g);
  kiln_tensor_release(&x);
  kiln_tensor_release(&xc);
  kiln_tensor_release(&t);
}

int main(void) {
  test_dft_checks();
  test_stft_mel_checks();
  test_tfidf_checks();
  test_tfidf_weights();
  test_window_int();
  test_runtime_errors();
  test_symbolic();
  printf("unit_signal_ops: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
