/* tests/unit_cpu_plan: the cpu backend's plan executor on hand-built graphs
 * that exercise its decisions — views as aliases, a reshape of a transpose
 * that must be materialised, Concat written in place by its producers,
 * ScatterND writing into its dead data tensor, and the write-after-read
 * case where that in-place write must be refused, a scatter that makes a
 * graph output running in place in the caller's output memory, Concats of
 * [n,1] columns stored with a stride, the KILN_PROFILE table — each checked
 * against the reference interpreter and against the plan's statistics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_fallback/plan.h"
#include "cpu_fallback/prepack.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "reference/exec.h"

static int passed, failed;
#include "tests/check.h"

/* Adds node op(in...) -> one new value; returns the value. */
static int node(kiln_graph *g, const char *op, int n_in, const int *in, kiln_node **made) {
  int out, idx;
  if (made) *made = NULL;
  if (kiln_edit_add_value(g, op, &out) || kiln_edit_insert_node(g, g->n_nodes, NULL, op, "", n_in, in, 1, &out, &idx))
    return -1;
  if (made) *made = &g->nodes[idx];
  return out;
}

static int const_i64(kiln_graph *g, int rank, const int64_t *dims, const int64_t *vals) {
  kiln_tensor t = {0};
  int v;
  if (kiln_tensor_alloc(&t, KILN_I64, rank, dims)) return -1;
  for (int64_t i = 0; i < t.numel; i++) kiln_set_i(&t, i, vals[i]);
  return kiln_edit_add_const(g, "c", &t, &v) ? -1 : v;
}

static int const_f32(kiln_graph *g, int rank, const int64_t *dims, const float *vals) {
  kiln_tensor t = {0};
  int v;
  if (kiln_tensor_alloc(&t, KILN_F32, rank, dims)) return -1;
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, vals[i]);
  return kiln_edit_add_const(g, "c", &t, &v) ? -1 : v;
}

/* Runs g on cpu and reference with input x (graph input 0) and compares
 * every output (exactly, up to vmath's ulps); returns the plan's statistics. */
static void compare(const char *what, kiln_graph *g, const kiln_tensor *x, kiln_cpu_stats *st) {
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_edit_check(g);
  CHECK(!s, "%s: graph is valid: %s", what, kiln_last_error());
  s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "%s: prepare: %s", what, kiln_last_error());
  if (s) return;
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[g->inputs[0]] = x;
  kiln_tensor oc[4] = {{0}}, orf[4] = {{0}};
  for (int run = 0; run < 2; run++) { /* twice: the arena is reused */
    s = kiln_cpu_run(p, g, bound, oc);
    CHECK(!s, "%s: cpu run %d: %s", what, run, kiln_last_error());
    s = kiln_ref_run(g, bound, orf);
    CHECK(!s, "%s: reference run: %s", what, kiln_last_error());
    for (int o = 0; o < g->n_outputs; o++) {
      int same = oc[o].numel == orf[o].numel && oc[o].rank == orf[o].rank;
      /* exact, except the few ulps of the vectorised exp/tanh/sigmoid/erf
         (cpu_fallback/vmath.h) that the tile executor uses */
      for (int64_t i = 0; same && i < oc[o].numel; i++) {
        double a = kiln_get_f(&oc[o], i), b = kiln_get_f(&orf[o], i);
        same = a == b || fabs(a - b) <= 1e-6 * fabs(b);
      }
      CHECK(same, "%s: output %d differs from the reference (run %d)", what, o, run);
      kiln_tensor_release(&oc[o]);
      kiln_tensor_release(&orf[o]);
    }
  }
  kiln_cpu_plan_stats(p, st);
  kiln_free(bound);
  kiln_cpu_release(p);
}

static kiln_tensor input(int rank, const int64_t *dims) {
  kiln_tensor t = {0};
  kiln_tensor_alloc(&t, KILN_F32, rank, dims);
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, sin(1.3 * (double)i) * 3);
  return t;
}

/* Relu(x), Sigmoid(x) concatenated on axis 1 of [1, 6] then scaled. */
static void test_concat_in_place(void) {
  kiln_graph *g;
  int64_t d[2] = {1, 6}, axis1[1] = {1};
  int x;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, d, &x);
  int a = node(g, "Relu", 1, &x, NULL), b = node(g, "Sigmoid", 1, &x, NULL), ab[2] = {a, b};
  kiln_node *cn;
  int c = node(g, "Concat", 2, ab, &cn);
  kiln_edit_set_int(cn, "axis", axis1[0]);
  float two = 2;
  int64_t sd[1] = {1};
  int k = const_f32(g, 1, sd, &two), ck[2] = {c, k};
  int y = node(g, "Mul", 2, ck, NULL);
  kiln_edit_add_output(g, y);
  kiln_tensor xt = input(2, d);
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  compare("concat in place", g, &xt, &st);
  CHECK(st.concats_in_place == 1, "the Concat is written in place by its producers (%d)", st.concats_in_place);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* Columns of x [70000] (Relu, Sigmoid, Neg, Abs chained: k of them, one tile step)
 * unsqueezed to [1500, 1] and concatenated on axis 1 in the given order,
 * then scaled: the tile step writes each column with a stride of k into
 * the Concat's output (row by row when the stores come in column order,
 * else element by element), and the Concat runs nothing. */
static void test_concat_columns(int k, const int *order) {
  static const char *const ops[] = {"Relu", "Sigmoid", "Neg", "Abs"};
  kiln_graph *g;
  int64_t d[1] = {70000}, one[1] = {1}; /* over 4 chunks of the pool: split on 2 threads */
  int x, cols[4], in[4];
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 1, d, &x);
  int axes = const_i64(g, 1, one, one);
  for (int j = 0, prev = x; j < k; j++) { /* a chain: one fused group with k stores */
    int c = node(g, ops[j], 1, &prev, NULL), ua[2] = {c, axes};
    cols[j] = node(g, "Unsqueeze", 2, ua, NULL);
    prev = c;
  }
  for (int j = 0; j < k; j++) in[j] = cols[order[j]];
  kiln_node *cn;
  int c = node(g, "Concat", k, in, &cn);
  kiln_edit_set_int(cn, "axis", 1);
  float two = 2;
  int kc = const_f32(g, 1, one, &two), ck[2] = {c, kc};
  int y = node(g, "Mul", 2, ck, NULL);
  kiln_edit_add_output(g, y);
  kiln_tensor xt = input(1, d);
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  char what[64];
  snprintf(what, sizeof what, "concat of %d columns (order %d%d..)", k, order[0], order[1]);
  compare(what, g, &xt, &st);
  CHECK(st.concats_in_place == 1, "%s: the Concat is written in place by the tile step (%d)", what,
        st.concats_in_place);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* [2,3] -> Relu -> Transpose -> Reshape [6] -> Relu: the reshape of the
 * transpose is not one strided map: it becomes a stack of two views that
 * the next kernel reads through, nothing is copied; and
 * [2,3,4] -> Relu -> Transpose(2,0,1) -> Reshape [4,6] -> Relu, whose
 * reshape merges into one strided view (strides [1,4]): no copy. */
static void test_views(void) {
  kiln_graph *g;
  int64_t d[2] = {2, 3}, shp[1] = {6}, one[1] = {1};
  int x;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, d, &x);
  int r0 = node(g, "Relu", 1, &x, NULL);
  int t = node(g, "Transpose", 1, &r0, NULL);
  int s = const_i64(g, 1, one, shp), ts[2] = {t, s};
  int r = node(g, "Reshape", 2, ts, NULL);
  int y = node(g, "Relu", 1, &r, NULL);
  kiln_edit_add_output(g, y);
  kiln_tensor xt = input(2, d);
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  compare("reshape of a transpose", g, &xt, &st);
  CHECK(st.views == 2 && st.kernels == 2, "two views, two kernels (%d, %d)", st.views, st.kernels);
  CHECK(st.materialized == 0, "read through a view stack, nothing materialised (%ld)", st.materialized);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);

  int64_t d3[3] = {2, 3, 4}, perm[3] = {2, 0, 1}, shp2[2] = {4, 6}, two[1] = {2};
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 3, d3, &x);
  r0 = node(g, "Relu", 1, &x, NULL);
  kiln_node *tn;
  t = node(g, "Transpose", 1, &r0, &tn);
  kiln_edit_set_ints(tn, "perm", perm, 3);
  s = const_i64(g, 1, two, shp2);
  int ts2[2] = {t, s};
  r = node(g, "Reshape", 2, ts2, NULL);
  y = node(g, "Relu", 1, &r, NULL);
  kiln_edit_add_output(g, y);
  xt = input(3, d3);
  memset(&st, 0, sizeof st);
  compare("mergeable reshape of a transpose", g, &xt, &st);
  CHECK(st.views == 2 && st.materialized == 0, "two views, nothing materialised (%d, %ld)", st.views, st.materialized);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* r = Relu(x) [4,4]; optionally m = ReduceMax(Slice(r)) read AFTER the
 * ScatterND that clamps column 0 of r: then r's old contents are still
 * needed and the scatter must not write in place. */
static void test_scatter(int read_after) {
  kiln_graph *g;
  int64_t d[2] = {4, 4}, idd[2] = {4, 2}, idx[8] = {0, 0, 1, 0, 2, 0, 3, 0}, ud[1] = {4};
  int x;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, d, &x);
  int r = node(g, "Relu", 1, &x, NULL);
  float upd[4] = {-1, -2, -3, -4};
  int ind = const_i64(g, 2, idd, idx), u = const_f32(g, 1, ud, upd);
  int sin3[3] = {r, ind, u};
  int sc = node(g, "ScatterND", 3, sin3, NULL);
  int y = node(g, "Neg", 1, &sc, NULL);
  kiln_edit_add_output(g, y);
  if (read_after) {
    int64_t one[1] = {1}, st0[1] = {0}, en[1] = {2}, ax[1] = {1};
    int a = const_i64(g, 1, one, st0), b = const_i64(g, 1, one, en), c = const_i64(g, 1, one, ax);
    int sl_in[4] = {r, a, b, c};
    int sl = node(g, "Slice", 4, sl_in, NULL);
    kiln_node *rm;
    int m = node(g, "ReduceMax", 1, &sl, &rm);
    kiln_edit_set_int(rm, "keepdims", 0);
    kiln_edit_add_output(g, m);
  }
  kiln_tensor xt = input(2, d);
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  compare(read_after ? "scatter with a later reader" : "scatter in place", g, &xt, &st);
  /* (Neg writes the graph output, which lives in host memory: never in place) */
  CHECK(st.inplace == (read_after ? 0 : 1), "%s: %d in-place steps, expected %d",
        read_after ? "the scatter must copy (r is read later)" : "the scatter writes into r", st.inplace,
        read_after ? 0 : 1);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* x [64,4] -> Relu -> ScatterND or ScatterElements (rows 5 and 60) ->
 * graph output y, run with
 * the caller's memory for y (a reservation full of garbage, as the plugin
 * passes it): Relu writes straight into it and the scatter runs there in
 * place (no copy). With read_after, a Slice of the Relu output is read
 * after the scatter (a second output): the storage must stay in the arena. */
static void test_scatter_into_output(int read_after, bool elements) {
  kiln_graph *g;
  int64_t d[2] = {64, 4}, idd[2] = {2, 1}, idx[8] = {5, 60}, ud[2] = {2, 4};
  if (elements) { /* ScatterElements (the reference kernel) along axis 0: the same rows */
    idd[1] = 4;
    for (int i = 0; i < 8; i++) idx[i] = i < 4 ? 5 : 60;
  }
  int x;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, d, &x);
  int r = node(g, "Relu", 1, &x, NULL);
  float upd[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
  int sin3[3] = {r, const_i64(g, 2, idd, idx), const_f32(g, 2, ud, upd)};
  int y = node(g, elements ? "ScatterElements" : "ScatterND", 3, sin3, NULL);
  kiln_edit_add_output(g, y);
  if (read_after) {
    int64_t one[1] = {1}, st0[1] = {0}, en[1] = {8};
    int sl_in[3] = {r, const_i64(g, 1, one, st0), const_i64(g, 1, one, en)};
    int sl = node(g, "Slice", 3, sl_in, NULL);
    kiln_edit_add_output(g, node(g, "Neg", 1, &sl, NULL));
  }
  kiln_tensor xt = input(2, d);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[g->inputs[0]] = &xt;
  const char *what = read_after ? (elements ? "ScatterElements into the output, input read later"
                                            : "ScatterND into the output, input read later")
                                 : (elements ? "ScatterElements into the output" : "ScatterND into the output");
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "%s: prepare: %s", what, kiln_last_error());
  static float mem[2][256 + 64];
  for (int run = 0; run < 2 && !s; run++) {
    kiln_tensor oc[2] = {{0}}, orf[2] = {{0}};
    for (int o = 0; o < g->n_outputs; o++) {
      memset(mem[o], 0xff, sizeof mem[o]);
      oc[o].data = mem[o];
      oc[o].capacity = sizeof mem[o];
    }
    s = kiln_cpu_run(p, g, bound, oc);
    CHECK(!s, "%s: cpu run %d: %s", what, run, kiln_last_error());
    CHECK(!kiln_ref_run(g, bound, orf), "%s: reference run: %s", what, kiln_last_error());
    for (int o = 0; o < g->n_outputs && !s; o++) {
      bool same = oc[o].numel == orf[o].numel && oc[o].data == mem[o];
      for (int64_t i = 0; same && i < oc[o].numel; i++) same = kiln_get_f(&oc[o], i) == kiln_get_f(&orf[o], i);
      CHECK(same, "%s: output %d differs from the reference or is not in the caller's memory (run %d)", what, o, run);
      if (oc[o].owns) kiln_tensor_release(&oc[o]);
      kiln_tensor_release(&orf[o]);
    }
  }
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  if (p) kiln_cpu_plan_stats(p, &st);
  CHECK(st.outputs_in_place == (read_after ? 0 : 2), "%s: %ld runs in place in the output, expected %d", what,
        st.outputs_in_place, read_after ? 0 : 2);
  kiln_cpu_release(p);
  kiln_free(bound);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* Stores around the caches (detection_post's shape, > 1 MiB each): x [n]
 * -> Relu -> Neg -> Abs -> Floor, each a column -> Concat [n,4] -> ScatterND
 * (rows 5 and n-1) -> graph output y in the caller's memory, and a constant
 * [n,4] graph output k. The tile step writes y's rows with non-temporal
 * stores (kiln_tile_set_stream) and k is copied with them
 * (kiln_tile_copy_stream) under AVX2; the results must be the reference's
 * bit for bit, at both ends of the buffers included. */
static void test_stream_into_output(void) {
  static const char *const ops[] = {"Relu", "Neg", "Abs", "Floor"};
  enum { N = 70001 }; /* 1.07 MiB per output, an odd row count: a partial last tile */
  kiln_graph *g;
  int64_t d[1] = {N}, one[1] = {1}, d4[2] = {N, 4}, idd[2] = {2, 1}, idx[2] = {5, N - 1}, ud[2] = {2, 4};
  int x, in[4];
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 1, d, &x);
  int axes = const_i64(g, 1, one, one);
  for (int j = 0, prev = x; j < 4; j++) { /* a chain: one fused group with 4 stores */
    int c = node(g, ops[j], 1, &prev, NULL), ua[2] = {c, axes};
    in[j] = node(g, "Unsqueeze", 2, ua, NULL);
    prev = c;
  }
  kiln_node *cn;
  int c = node(g, "Concat", 4, in, &cn);
  kiln_edit_set_int(cn, "axis", 1);
  float upd[8] = {-1, -2, -3, -4, -5, -6, -7, -8};
  int sin3[3] = {c, const_i64(g, 2, idd, idx), const_f32(g, 2, ud, upd)};
  kiln_edit_add_output(g, node(g, "ScatterND", 3, sin3, NULL));
  float *kv = kiln_malloc(sizeof *kv * 4 * N);
  for (int64_t i = 0; kv && i < 4 * N; i++) kv[i] = (float)i * 0.25f - 7.0f;
  kiln_edit_add_output(g, kv ? const_f32(g, 2, d4, kv) : -1);
  kiln_free(kv);
  kiln_tensor xt = input(1, d);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[g->inputs[0]] = &xt;
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "stream into the output: prepare: %s", kiln_last_error());
  size_t cap = sizeof(float) * (4 * N + 3); /* room past the end: must stay untouched */
  float *mem[2] = {kiln_malloc(cap + 4), kiln_malloc(cap + 4)};
  for (int run = 0; run < 2 && !s && mem[0] && mem[1]; run++) {
    kiln_tensor oc[2] = {{0}}, orf[2] = {{0}};
    for (int o = 0; o < 2; o++) {
      memset(mem[o], 0xff, cap);
      oc[o].data = (char *)mem[o] + 4 * run; /* aligned to 16 bytes, then not */
      oc[o].capacity = cap - 4 * (size_t)run;
    }
    s = kiln_cpu_run(p, g, bound, oc);
    CHECK(!s, "stream into the output: cpu run %d: %s", run, kiln_last_error());
    CHECK(!kiln_ref_run(g, bound, orf), "stream into the output: reference run: %s", kiln_last_error());
    for (int o = 0; o < 2 && !s; o++) {
      bool same = oc[o].numel == orf[o].numel && oc[o].data == (char *)mem[o] + 4 * run;
      for (int64_t i = 0; same && i < oc[o].numel; i++) same = kiln_get_f(&oc[o], i) == kiln_get_f(&orf[o], i);
      const unsigned char *past = (const unsigned char *)oc[o].data + sizeof(float) * 4 * N;
      for (const unsigned char *q = past; same && q < (const unsigned char *)mem[o] + cap; q++) same = *q == 0xff;
      CHECK(same, "stream into the output: output %d differs from the reference, is not in the caller's memory or "
                  "wrote past its end (run %d)", o, run);
      if (oc[o].owns) kiln_tensor_release(&oc[o]);
      kiln_tensor_release(&orf[o]);
    }
  }
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  if (p) kiln_cpu_plan_stats(p, &st);
  CHECK(st.concats_in_place == 1 && st.outputs_in_place == 2,
        "stream into the output: the columns are written in place in the output (%d concats, %ld runs in place)",
        st.concats_in_place, st.outputs_in_place);
  kiln_free(mem[0]);
  kiln_free(mem[1]);
  kiln_cpu_release(p);
  kiln_free(bound);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* A dense streamed output at every 4-byte position in a 64-byte line:
 * y = Relu(Sigmoid(x) * 1.5 + w) over N > 2^20 elements (x and w read in
 * place, their next tiles fetched ahead; a partial last tile), written
 * into the caller's memory at 0, 4, ..., 60 bytes past a line. The tile
 * executor cuts its first tile where y reaches a line (stream_head in
 * tile.c); where the tiles start must change no value and write nothing
 * outside y: every position gives the aligned run's bits, the reference's
 * values (within vmath's sigmoid bound, scaled), and the guard bytes on both sides
 * stay as they were. */
static void test_stream_dense_output(void) {
  enum { N = (1 << 20) + 4099 };
  kiln_graph *g;
  int64_t d[1] = {N}, one[1] = {1};
  int x, w;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 1, d, &x);
  kiln_edit_add_input(g, "w", KILN_F32, 1, d, &w);
  float k = 1.5f;
  int sg = node(g, "Sigmoid", 1, &x, NULL), m2[2] = {sg, const_f32(g, 1, one, &k)};
  int a2[2] = {node(g, "Mul", 2, m2, NULL), w};
  int r = node(g, "Add", 2, a2, NULL);
  kiln_edit_add_output(g, node(g, "Relu", 1, &r, NULL));
  kiln_tensor xt = input(1, d), wt = input(1, d);
  for (int64_t i = 0; i < wt.numel; i++) kiln_set_f(&wt, i, cosf(0.7f * (float)i) - 0.25f);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[g->inputs[0]] = &xt, bound[g->inputs[1]] = &wt;
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "dense streamed output: prepare: %s", kiln_last_error());
  kiln_tensor orf[1] = {{0}};
  CHECK(!kiln_ref_run(g, bound, orf), "dense streamed output: reference run: %s", kiln_last_error());
  size_t bytes = sizeof(float) * N, cap = bytes + 256;
  unsigned char *mem = kiln_malloc(cap), *first = kiln_malloc(bytes);
  int bad_pos = -1, bad_guard = -1, bad_ref = -1, ran = 0;
  for (int off = 0; off < 64 && !s && mem && first && orf[0].numel == N; off += 4) {
    unsigned char *line = mem + 64 + (64 - (uintptr_t)(mem + 64) % 64) % 64, *data = line + off;
    memset(mem, 0xa5, cap);
    kiln_tensor oc[1] = {{0}};
    oc[0].data = data, oc[0].capacity = cap - (size_t)(data - mem);
    s = kiln_cpu_run(p, g, bound, oc);
    CHECK(!s, "dense streamed output: cpu run at %d bytes past a line: %s", off, kiln_last_error());
    if (s) break;
    ran++;
    if (oc[0].data != data || oc[0].numel != N) bad_pos = off; /* not in the caller's memory */
    for (const unsigned char *q = mem; q < data && bad_guard < 0; q++)
      if (*q != 0xa5) bad_guard = off;
    for (const unsigned char *q = data + bytes; q < mem + cap && bad_guard < 0; q++)
      if (*q != 0xa5) bad_guard = off;
    if (off == 0) memcpy(first, data, bytes);
    else if (memcmp(first, data, bytes)) bad_pos = off;
    for (int64_t i = 0; i < N && bad_ref < 0; i++) {
      double a = ((const float *)(const void *)data)[i], b = kiln_get_f(&orf[0], i);
      if (!(fabs(a - b) <= 1e-6)) bad_ref = off; /* values 0 .. 2.5; the sigmoid's few ulps, scaled */
    }
    if (oc[0].owns) kiln_tensor_release(&oc[0]);
  }
  CHECK(ran == 16, "dense streamed output: ran at %d of the 16 positions", ran);
  CHECK(bad_pos < 0, "dense streamed output: at %d bytes past a line the output is not the aligned run's bits, or "
                     "not in the caller's memory", bad_pos);
  CHECK(bad_guard < 0, "dense streamed output: at %d bytes past a line the run wrote outside the output", bad_guard);
  CHECK(bad_ref < 0, "dense streamed output: at %d bytes past a line the output differs from the reference", bad_ref);
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  if (p) kiln_cpu_plan_stats(p, &st);
  CHECK(st.tile_steps == 1 && st.fused_nodes == 4, "dense streamed output: one tile step of the 4 nodes (%d steps, "
        "%d nodes fused)", st.tile_steps, st.fused_nodes);
  kiln_free(mem);
  kiln_free(first);
  kiln_tensor_release(&orf[0]);
  kiln_cpu_release(p);
  kiln_free(bound);
  kiln_tensor_release(&xt);
  kiln_tensor_release(&wt);
  kiln_graph_free(g);
}

/* A Reshape whose shape is a graph input: each new value of it gets a plan
 * of its own (compiled once, then reused), with the Relu's output planned
 * in the arena instead of on the heap. */
static void test_specialise(void) {
  kiln_graph *g;
  int64_t d[2] = {3, 4}, two[1] = {2};
  int x, shp;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, d, &x);
  kiln_edit_add_input(g, "shape", KILN_I64, 1, two, &shp);
  int xs[2] = {x, shp};
  int r = node(g, "Reshape", 2, xs, NULL);
  int a = node(g, "Relu", 1, &r, NULL);
  int y = node(g, "Neg", 1, &a, NULL);
  kiln_edit_add_output(g, y);
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "prepare: %s", kiln_last_error());
  if (s) {
    kiln_graph_free(g);
    return;
  }
  kiln_tensor xt = input(2, d), st = {0};
  kiln_tensor_alloc(&st, KILN_I64, 1, two);
  static const int64_t shapes[4][2] = {{2, 6}, {6, 2}, {2, 6}, {12, 1}};
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[x] = &xt;
  bound[shp] = &st;
  for (int k = 0; k < 4; k++) {
    kiln_set_i(&st, 0, shapes[k][0]);
    kiln_set_i(&st, 1, shapes[k][1]);
    kiln_tensor oc = {0}, orf = {0};
    CHECK(!kiln_cpu_run(p, g, bound, &oc) && !kiln_ref_run(g, bound, &orf), "run with shape %lld,%lld: %s",
          (long long)shapes[k][0], (long long)shapes[k][1], kiln_last_error());
    int same = oc.rank == 2 && oc.dims[0] == shapes[k][0] && oc.numel == orf.numel;
    for (int64_t i = 0; same && i < oc.numel; i++) same = kiln_get_f(&oc, i) == kiln_get_f(&orf, i);
    CHECK(same, "shape %lld,%lld: output matches the reference", (long long)shapes[k][0], (long long)shapes[k][1]);
    kiln_tensor_release(&oc);
    kiln_tensor_release(&orf);
  }
  kiln_cpu_stats cs;
  kiln_cpu_plan_stats(p, &cs);
  CHECK(cs.variants == 3 && cs.plans == 3, "three shape values, three specialised plans (%d variants, %d plans)",
        cs.variants, cs.plans);
  kiln_free(bound);
  kiln_tensor_release(&xt);
  kiln_tensor_release(&st);
  kiln_cpu_release(p);
  kiln_graph_free(g);
}

/* Gemm(x, W, c, transB = 1) with W a constant read by that node alone: the
 * plan stores W transposed once (cpu_fallback/prepack.h) and clears transB;
 * a second Gemm sharing its W with a third keeps its layout. Integer values:
 * every sum is exact, so cpu and reference agree bit for bit. */
static void test_pretranspose(void) {
  kiln_graph *g;
  int64_t xd[2] = {3, 5}, wd[2] = {4, 5}, cd[1] = {4};
  float w[20], cv[4] = {1, -2, 3, -4};
  for (int i = 0; i < 20; i++) w[i] = (float)((i * 7) % 11 - 5);
  int x;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, xd, &x);
  int wv = const_f32(g, 2, wd, w), ws = const_f32(g, 2, wd, w), c = const_f32(g, 1, cd, cv);
  int in1[3] = {x, wv, c}, in2[3] = {x, ws, c}, in3[2] = {x, ws};
  kiln_node *n1, *n2, *n3;
  int y1 = node(g, "Gemm", 3, in1, &n1);
  kiln_edit_set_int(n1, "transB", 1);
  int y2 = node(g, "Gemm", 3, in2, &n2);
  kiln_edit_set_int(n2, "transB", 1);
  int y3 = node(g, "Gemm", 2, in3, &n3);
  kiln_edit_set_int(n3, "transB", 1);
  kiln_edit_add_output(g, y1);
  kiln_edit_add_output(g, y2);
  kiln_edit_add_output(g, y3);
  kiln_tensor xt = {0};
  kiln_tensor_alloc(&xt, KILN_F32, 2, xd);
  for (int64_t i = 0; i < xt.numel; i++) kiln_set_f(&xt, i, (double)(i % 5 - 2));
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  compare("pre-transposed Gemm weights", g, &xt, &st);
  CHECK(st.own_calls == 6 && st.ref_calls == 0, "the Gemms run on kiln's kernel (own %ld, ref %ld)", st.own_calls,
        st.ref_calls);
  /* the shared W (80 bytes) and c (16) read from g's tensors; the transposed W is the plan's own */
  CHECK(st.weights_borrowed == 96, "the plan borrows the weights it keeps as given (%llu bytes)",
        (unsigned long long)st.weights_borrowed);
  int count = -1;
  kiln_status s = kiln_cpu_pretranspose(g, &count);
  const float *t = g->values[wv].init ? g->values[wv].init->data : NULL;
  CHECK(!s && count == 1 && kiln_attr_int(&g->nodes[0], "transB", -1) == 0 &&
            kiln_attr_int(&g->nodes[1], "transB", -1) == 1 && t && g->values[wv].init->dims[0] == 5 &&
            g->values[wv].init->dims[1] == 4 && t[1 * 4 + 2] == w[2 * 5 + 1],
        "only the unshared W is transposed (count %d)", count);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* The embedding bag: table [50,8] (a constant), indices [6,5] and a 0/1
 * mask [6,5,1] (graph inputs): Gather -> Mul -> ReduceSum(axis 1) runs as
 * one SparseLengthsWeightedSum (bags.h) with negative indices wrapped as
 * Gather wraps them, against the reference on the graph as given. Not
 * rewritten when the Gather's rows are also a graph output (keep); a bad
 * index gives Gather's error either way. */
static void test_bags(bool keep) {
  kiln_graph *g;
  int64_t td[2] = {50, 8}, id[2] = {6, 5}, md[3] = {6, 5, 1}, one[1] = {1};
  float tab[400];
  for (int i = 0; i < 400; i++) tab[i] = (float)sin(0.37 * i);
  int idx, mask;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "idx", KILN_I64, 2, id, &idx);
  kiln_edit_add_input(g, "mask", KILN_F32, 3, md, &mask);
  int t = const_f32(g, 2, td, tab), gin[2] = {t, idx};
  int rows = node(g, "Gather", 2, gin, NULL), min[2] = {rows, mask};
  int masked = node(g, "Mul", 2, min, NULL), rin[2] = {masked, const_i64(g, 1, one, one)};
  kiln_node *rs;
  int y = node(g, "ReduceSum", 2, rin, &rs);
  kiln_edit_set_int(rs, "keepdims", 0);
  kiln_edit_add_output(g, y);
  if (keep) kiln_edit_add_output(g, rows);
  int64_t iv[30], bad[30];
  kiln_tensor ti = {0}, tb = {0}, tm = {0};
  kiln_tensor_alloc(&ti, KILN_I64, 2, id);
  kiln_tensor_alloc(&tb, KILN_I64, 2, id);
  kiln_tensor_alloc(&tm, KILN_F32, 3, md);
  for (int i = 0; i < 30; i++) {
    iv[i] = (i * 17) % 100 - 50; /* -50 .. 49 */
    bad[i] = i == 13 ? 50 : iv[i];
    ((float *)tm.data)[i] = i % 5 < 1 + i / 5 % 5 ? 1.0f : 0.0f;
  }
  memcpy(ti.data, iv, sizeof iv);
  memcpy(tb.data, bad, sizeof bad);
  const char *what = keep ? "bags, Gather rows kept as an output" : "bags";
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[mask] = &tm;
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "%s: prepare: %s", what, kiln_last_error());
  for (int run = 0; run < 2 && !s; run++) {
    bound[idx] = run ? &tb : &ti;
    kiln_tensor oc[2] = {{0}}, orf[2] = {{0}};
    kiln_error_clear();
    kiln_status cs = kiln_cpu_run(p, g, bound, oc);
    char cmsg[512];
    snprintf(cmsg, sizeof cmsg, "%s", kiln_last_error());
    kiln_error_clear();
    kiln_status rs2 = kiln_ref_run(g, bound, orf);
    if (run) {
      CHECK(cs == KILN_E_INVALID_VALUE && rs2 == cs && strstr(cmsg, "index 50 is out of range for a dimension of size 50"),
            "%s: a bad index: status %d (reference %d), '%s'", what, (int)cs, (int)rs2, cmsg);
    } else {
      CHECK(!cs && !rs2, "%s: runs: %s", what, cmsg);
      for (int o = 0; o < g->n_outputs && !cs && !rs2; o++) {
        bool same = oc[o].numel == orf[o].numel && oc[o].rank == orf[o].rank;
        for (int64_t i = 0; same && i < oc[o].numel; i++) {
          double a = kiln_get_f(&oc[o], i), b = kiln_get_f(&orf[o], i);
          same = fabs(a - b) <= 1e-6 + 1e-5 * fabs(b);
        }
        CHECK(same, "%s: output %d differs from the reference", what, o);
      }
    }
    for (int o = 0; o < 2; o++) kiln_tensor_release(&oc[o]), kiln_tensor_release(&orf[o]);
  }
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  if (p) kiln_cpu_plan_stats(p, &st);
  CHECK(st.bags == (keep ? 0 : 1), "%s: %d bags rewritten, expected %d", what, st.bags, keep ? 0 : 1);
  kiln_cpu_release(p);
  kiln_free(bound);
  kiln_tensor_release(&ti);
  kiln_tensor_release(&tb);
  kiln_tensor_release(&tm);
  kiln_graph_free(g);
}

/* KILN_PROFILE=1: releasing a plan run 3 times prints its steps' table
 * to stderr (captured here in a temporary file): the run count, the tile
 * step and the kernel node by name. */
static void test_profile(void) {
  kiln_graph *g;
  int64_t d[2] = {4, 4}, idd[2] = {1, 1}, idx[1] = {2}, ud[2] = {1, 4};
  int x;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, d, &x);
  int r = node(g, "Relu", 1, &x, NULL);
  float upd[4] = {1, 2, 3, 4};
  int sin3[3] = {r, const_i64(g, 2, idd, idx), const_f32(g, 2, ud, upd)};
  int y = node(g, "ScatterND", 3, sin3, NULL);
  kiln_edit_add_output(g, y);
  kiln_tensor xt = input(2, d);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[g->inputs[0]] = &xt;
  FILE *cap = tmpfile();
  int saved = dup(2);
  setenv("KILN_PROFILE", "1", 1);
  kiln_cpu_plan *p = NULL;
  bool ok = cap && saved >= 0 && !kiln_cpu_prepare(g, &p);
  for (int run = 0; run < 3 && ok; run++) {
    kiln_tensor out = {0};
    ok = !kiln_cpu_run(p, g, bound, &out);
    kiln_tensor_release(&out);
  }
  fflush(stderr);
  if (cap && saved >= 0) dup2(fileno(cap), 2);
  kiln_cpu_release(p);
  fflush(stderr);
  if (saved >= 0) dup2(saved, 2), close(saved);
  unsetenv("KILN_PROFILE");
  char text[4096] = "";
  if (cap) {
    rewind(cap);
    text[fread(text, 1, sizeof text - 1, cap)] = 0;
    fclose(cap);
  }
  CHECK(ok, "profile: runs failed: %s", kiln_last_error());
  CHECK(strstr(text, "3 runs") && strstr(text, "(Relu)") && strstr(text, "(ScatterND)") && strstr(text, "tile") &&
            strstr(text, "kernel") && strstr(text, "graph outputs to the caller") && strstr(text, "median ms") &&
            !strstr(text, " - "),
        "profile: the table lacks something:\n%s", text);
  kiln_free(bound);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* Concat in place whose parts' producers run out of input order: b =
 * Neg(x) (node 0) before a = Relu(x) (node 1), c = Concat(a, b): b's slice
 * starts after a's, whose slot is still empty when Neg writes. */
static void test_concat_producer_order(void) {
  kiln_graph *g;
  int64_t d[1] = {4};
  int x;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 1, d, &x);
  int b = node(g, "Neg", 1, &x, NULL);
  int a = node(g, "Relu", 1, &x, NULL);
  int ab[2] = {a, b};
  kiln_node *cn;
  int c = node(g, "Concat", 2, ab, &cn);
  kiln_edit_set_int(cn, "axis", 0);
  kiln_edit_add_output(g, node(g, "Relu", 1, &c, NULL));
  kiln_tensor xt = input(1, d);
  kiln_cpu_stats st;
  memset(&st, 0, sizeof st);
  compare("concat in place, parts made out of order", g, &xt, &st);
  CHECK(st.concats_in_place == 1, "the Concat runs in place (%d), so the offsets are tested", st.concats_in_place);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* A kernel that may write over its input 0 (ScatterND, ScatterElements)
 * reading a view that re-lays out its storage (a Transpose, a reversed
 * Slice): never in place over that storage, as an intermediate (then Neg)
 * or as a graph output in the caller's memory. */
static void test_inplace_over_view(int view, bool elements, bool as_output) {
  kiln_graph *g;
  int64_t d[2] = {3, 3};
  int x;
  kiln_edit_new_graph(16, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, d, &x);
  int r = node(g, "Relu", 1, &x, NULL);
  int v;
  if (view == 0) {
    kiln_node *tn;
    v = node(g, "Transpose", 1, &r, &tn);
    kiln_edit_set_ints(tn, "perm", (const int64_t[]){1, 0}, 2);
  } else {
    int64_t one[1] = {1}, st0[1] = {-1}, en[1] = {INT64_MIN}, ax[1] = {1}, sp[1] = {-1};
    int sl_in[5] = {r, const_i64(g, 1, one, st0), const_i64(g, 1, one, en), const_i64(g, 1, one, ax),
                    const_i64(g, 1, one, sp)};
    v = node(g, "Slice", 5, sl_in, NULL);
  }
  int sc;
  if (elements) { /* row 0 of every column */
    int64_t id[2] = {1, 3}, zero[3] = {0, 0, 0};
    float upd[3] = {100, 200, 300};
    int in3[3] = {v, const_i64(g, 2, id, zero), const_f32(g, 2, id, upd)};
    sc = node(g, "ScatterElements", 3, in3, NULL);
  } else { /* row 1 */
    int64_t id[2] = {1, 1}, one[1] = {1}, ud[2] = {1, 3};
    float upd[3] = {100, 200, 300};
    int in3[3] = {v, const_i64(g, 2, id, one), const_f32(g, 2, ud, upd)};
    sc = node(g, "ScatterND", 3, in3, NULL);
  }
  int y = as_output ? sc : node(g, "Neg", 1, &sc, NULL);
  kiln_edit_add_output(g, y);
  char what[128];
  snprintf(what, sizeof what, "%s over a %s view%s", elements ? "ScatterElements" : "ScatterND",
           view ? "reversed Slice" : "Transpose", as_output ? ", into the output" : "");
  kiln_tensor xt = input(2, d);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[g->inputs[0]] = &xt;
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "%s: prepare: %s", what, kiln_last_error());
  static float mem[64];
  for (int run = 0; run < 2 && !s; run++) {
    kiln_tensor oc[1] = {{0}}, orf[1] = {{0}};
    if (as_output) { /* the caller's memory, as the plugin passes it */
      memset(mem, 0xff, sizeof mem);
      oc[0].data = mem;
      oc[0].capacity = sizeof mem;
    }
    s = kiln_cpu_run(p, g, bound, oc);
    CHECK(!s, "%s: cpu run %d: %s", what, run, kiln_last_error());
    CHECK(!kiln_ref_run(g, bound, orf), "%s: reference run: %s", what, kiln_last_error());
    bool same = !s && oc[0].numel == orf[0].numel;
    for (int64_t i = 0; same && i < oc[0].numel; i++) same = kiln_get_f(&oc[0], i) == kiln_get_f(&orf[0], i);
    CHECK(same, "%s: the output differs from the reference (run %d)", what, run);
    if (oc[0].owns) kiln_tensor_release(&oc[0]);
    kiln_tensor_release(&orf[0]);
  }
  kiln_cpu_release(p);
  kiln_free(bound);
  kiln_tensor_release(&xt);
  kiln_graph_free(g);
}

/* An operator's accepted types hold for intermediates too: Greater makes a
 * bool, and Add does not take bools. The reference refuses it at the run
 * (its kernel's check); the plan, whose fused tile would compute it, at
 * prepare (kiln_ref_check_types) — with Relu on the bool, and Sum. */
static void test_intermediate_types(void) {
  const char *ops[] = {"Add", "Relu", "Sum"};
  for (int k = 0; k < 3; k++) {
    kiln_graph *g;
    int64_t d[1] = {4};
    int x, y;
    kiln_edit_new_graph(13, &g);
    kiln_edit_add_input(g, "x", KILN_F32, 1, d, &x);
    kiln_edit_add_input(g, "y", KILN_F32, 1, d, &y);
    int xi = node(g, "Identity", 1, &x, NULL); /* removed by the rewrites: later nodes move up */
    int xy[2] = {xi, y};
    int b = node(g, "Greater", 2, xy, NULL);
    int bb[2] = {b, b};
    int a = node(g, ops[k], k == 1 ? 1 : 2, bb, NULL);
    kiln_node *c;
    int out = node(g, "Cast", 1, &a, &c);
    kiln_edit_set_int(c, "to", KILN_F32);
    kiln_edit_add_output(g, out);
    for (int i = 0; i < g->n_nodes; i++) g->nodes[i].src = i; /* as the importer numbers them */
    kiln_cpu_plan *p = NULL;
    kiln_status s = kiln_cpu_prepare(g, &p);
    char want[96]; /* named by its index in the model, not in the rewritten graph */
    snprintf(want, sizeof want, "node #2 (%s): input 0 has data type bool, which %s does not accept", ops[k], ops[k]);
    CHECK(s == KILN_E_UNSUPPORTED_DTYPE && strstr(kiln_last_error(), want), "%s of bools refused at prepare: %s (%s)",
          ops[k], kiln_status_name(s), kiln_last_error());
    kiln_error_clear();
    kiln_cpu_release(p);
    kiln_graph_free(g);
  }
}

/* The spec's zero padding is multiplied like any input: a non-finite weight
 * over the padding gives NaN. Conv 1-D and 2-D depthwise (group 2), x > 0,
 * the first tap inf and padding 1 at the start: the first output of each
 * channel is 0 * inf + ... = NaN, the next ones inf, on cpu and reference. */
static void test_conv_pad_nonfinite(void) {
  for (int depthwise = 0; depthwise < 2; depthwise++) {
    kiln_graph *g;
    int x;
    const int64_t xd1[3] = {1, 1, 4}, xd2[4] = {1, 2, 1, 4}, wd1[3] = {1, 1, 2}, wd2[4] = {2, 1, 1, 2};
    const float w[4] = {INFINITY, 1.0f, INFINITY, 2.0f};
    kiln_edit_new_graph(13, &g);
    kiln_edit_add_input(g, "x", KILN_F32, depthwise ? 4 : 3, depthwise ? xd2 : xd1, &x);
    int wv = const_f32(g, depthwise ? 4 : 3, depthwise ? wd2 : wd1, w), in[2] = {x, wv};
    kiln_node *cn;
    int y = node(g, "Conv", 2, in, &cn);
    const int64_t pads1[2] = {1, 0}, pads2[4] = {0, 1, 0, 0};
    kiln_edit_set_ints(cn, "pads", depthwise ? pads2 : pads1, depthwise ? 4 : 2);
    if (depthwise) kiln_edit_set_int(cn, "group", 2);
    kiln_edit_add_output(g, y);
    kiln_tensor xt = {0};
    kiln_tensor_alloc(&xt, KILN_F32, depthwise ? 4 : 3, depthwise ? xd2 : xd1);
    for (int64_t i = 0; i < xt.numel; i++) kiln_set_f(&xt, i, 0.5 + (double)i);
    kiln_cpu_plan *p = NULL;
    kiln_status s = kiln_cpu_prepare(g, &p);
    CHECK(!s, "conv pad nonfinite: prepare: %s", kiln_last_error());
    const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
    bound[g->inputs[0]] = &xt;
    for (int b = 0; b < 2 && !s; b++) {
      kiln_tensor out[1] = {{0}};
      s = b ? kiln_ref_run(g, bound, out) : kiln_cpu_run(p, g, bound, out);
      CHECK(!s, "conv pad nonfinite %s: %s", b ? "reference" : "cpu", kiln_last_error());
      int64_t per = 4; /* outputs per channel: 4 + 1 - 2 + 1 */
      bool ok = !s && out[0].numel == (depthwise ? 2 : 1) * per;
      for (int64_t i = 0; ok && i < out[0].numel; i++) {
        double v = kiln_get_f(&out[0], i);
        ok = i % per == 0 ? isnan(v) : isinf(v) && v > 0;
      }
      CHECK(ok, "conv pad nonfinite (%s) on %s: NaN over the padding, inf after", depthwise ? "depthwise 2-D" : "1-D",
            b ? "reference" : "cpu");
      kiln_tensor_release(&out[0]);
    }
    kiln_free(bound);
    kiln_cpu_release(p);
    kiln_tensor_release(&xt);
    kiln_graph_free(g);
  }
}

int main(void) {
  test_conv_pad_nonfinite();
  test_intermediate_types();
  test_concat_producer_order();
  for (int view = 0; view < 2; view++)
    for (int el = 0; el < 2; el++)
      for (int out = 0; out < 2; out++) test_inplace_over_view(view, el, out);
  test_specialise();
  test_pretranspose();
  test_concat_in_place();
  test_concat_columns(4, (const int[]){0, 1, 2, 3});
  test_concat_columns(3, (const int[]){0, 1, 2});
  test_concat_columns(4, (const int[]){3, 1, 0, 2});
  test_concat_columns(2, (const int[]){1, 0});
  test_views();
  test_scatter(0);
  test_scatter(1);
  test_scatter_into_output(0, false);
  test_scatter_into_output(1, false);
  test_scatter_into_output(0, true);
  test_scatter_into_output(1, true);
  test_stream_into_output();
  test_stream_dense_output();
  test_bags(false);
  test_bags(true);
  test_profile();
  printf("unit_cpu_plan: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
