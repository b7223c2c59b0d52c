/* tests/unit_hazard: the hazard pass — hand-made schedules for each kind, the
 * ScatterND write-after-read case, disjoint regions, views of views, arena reuse
 * and broken plans, and thousands of random schedules checked by brute force. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/hazard.h"
#include "ir/memplan.h"
#include "ir/schedule.h"
#include "ir/views.h"

static int passed, failed;
#include "tests/check.h"

/* ---- deterministic random numbers ---- */
static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int rnd(int lo, int hi) { return lo + (int)(next() % (uint64_t)(hi - lo + 1)); } /* [lo, hi] */

/* ---- schedules ---- */
#define MAXV 160
#define MAXS 48
#define MAXIO 6
typedef struct tb {
  int nv, ns;
  int nr[MAXS], nw[MAXS], r[MAXS][MAXIO], w[MAXS][MAXIO];
} tb;

static int step(tb *t, int nr, const int *r, int nw, const int *w) {
  int s = t->ns++;
  t->nr[s] = nr, t->nw[s] = nw;
  if (nr) memcpy(t->r[s], r, (size_t)nr * sizeof *r);
  if (nw) memcpy(t->w[s], w, (size_t)nw * sizeof *w);
  return s;
}
#define L(...) ((const int[]){__VA_ARGS__})

static kiln_schedule *tb_sched(const tb *t) {
  kiln_schedule *s = NULL;
  kiln_status st = kiln_schedule_new(t->nv, &s);
  for (int i = 0; !st && i < t->ns; i++) st = kiln_schedule_add_step(s, t->r[i], t->nr[i], t->w[i], t->nw[i], i);
  if (st) {
    printf("schedule: %s\n", kiln_last_error());
    kiln_schedule_free(s);
    return NULL;
  }
  return s;
}

static bool has_edge(const kiln_hazards *h, int from, int to, kiln_hazard_kind kind) {
  for (int i = 0; h && i < h->n_edges; i++)
    if (h->edges[i].from == from && h->edges[i].to == to && h->edges[i].kind == kind) return true;
  return false;
}

static bool any_edge(const kiln_hazards *h, int a, int b) {
  for (int i = 0; h && i < h->n_edges; i++)
    if ((h->edges[i].from == a && h->edges[i].to == b) || (h->edges[i].from == b && h->edges[i].to == a)) return true;
  return false;
}

typedef struct xe {
  int from, to;
  kiln_hazard_kind kind;
} xe;

/* h holds exactly the edges x[0..n). */
static void expect_edges(const char *what, const kiln_hazards *h, const xe *x, int n) {
  CHECK(h != NULL, "%s: no hazards (%s)", what, kiln_last_error());
  if (!h) return;
  for (int i = 0; i < n; i++)
    CHECK(has_edge(h, x[i].from, x[i].to, x[i].kind), "%s: missing %s edge %d -> %d", what,
          kiln_hazard_kind_name(x[i].kind), x[i].from, x[i].to);
  CHECK(h->n_edges == n, "%s: %d edges, expected %d", what, h->n_edges, n);
  if (h->n_edges != n) kiln_hazard_dump(h, NULL, NULL, stdout);
}

static kiln_hazards *build(const kiln_hazard_request *q) {
  kiln_hazards *h = NULL;
  kiln_status st = kiln_hazard_build(q, &h);
  if (st) printf("  (build: %s: %s)\n", kiln_status_name(st), kiln_last_error());
  return h;
}

/* ---- regions of views of 2-D storages ---- */
static kiln_view base_view(int64_t rows, int64_t cols) {
  kiln_view v;
  kiln_view_contiguous(2, (const int64_t[]){rows, cols}, &v);
  return v;
}

/* v[r0:r1:rs, c0:c1:cs] */
static kiln_view slice2(const kiln_view *v, int64_t r0, int64_t r1, int64_t rs, int64_t c0, int64_t c1, int64_t cs) {
  kiln_view o;
  kiln_status st =
      kiln_view_slice(v, 2, (const int64_t[]){r0, c0}, (const int64_t[]){r1, c1}, NULL, (const int64_t[]){rs, cs}, &o);
  if (st) printf("slice: %s\n", kiln_last_error());
  return o;
}

static kiln_region reg(const kiln_view *v) {
  kiln_region r;
  kiln_view_region(v, &r);
  return r;
}

static kiln_region dense(int64_t n) {
  kiln_region r;
  kiln_hazard_dense_region(n, &r);
  return r;
}

/* ---- hand-made schedules ---- */

static void test_kinds(void) {
  tb t = {.nv = 4};
  /* RAW: x written, then read */
  step(&t, 0, NULL, 1, L(0));
  step(&t, 1, L(0), 1, L(1));
  kiln_schedule *s = tb_sched(&t);
  kiln_hazard_request q = {.sched = s};
  kiln_hazards *h = build(&q);
  expect_edges("raw", h, (const xe[]){{0, 1, KILN_HAZARD_RAW}}, 1);
  kiln_hazards_free(h);
  kiln_schedule_free(s);

  /* WAW: x written twice (storage NULL, regions NULL: whole storages) */
  t = (tb){.nv = 4};
  step(&t, 0, NULL, 1, L(0));
  step(&t, 0, NULL, 1, L(0));
  s = tb_sched(&t);
  q = (kiln_hazard_request){.sched = s};
  h = build(&q);
  expect_edges("waw", h, (const xe[]){{0, 1, KILN_HAZARD_WAW}}, 1);
  kiln_hazards_free(h);
  kiln_schedule_free(s);

  /* WAR: x written, read into t, then y written over x's storage */
  t = (tb){.nv = 4};
  step(&t, 0, NULL, 1, L(0));
  step(&t, 1, L(0), 1, L(1));
  step(&t, 0, NULL, 1, L(2));
  s = tb_sched(&t);
  int storage[4] = {-1, -1, 0, -1};
  q = (kiln_hazard_request){.sched = s, .storage = storage};
  h = build(&q);
  expect_edges("war", h, (const xe[]){{0, 1, KILN_HAZARD_RAW}, {0, 2, KILN_HAZARD_WAW}, {1, 2, KILN_HAZARD_WAR}}, 3);
  kiln_hazards_free(h);
  /* the same with storage ids given as the values themselves */
  int storage2[4] = {0, 1, 0, 3};
  q.storage = storage2;
  h = build(&q);
  expect_edges("war (own ids)", h,
               (const xe[]){{0, 1, KILN_HAZARD_RAW}, {0, 2, KILN_HAZARD_WAW}, {1, 2, KILN_HAZARD_WAR}}, 3);
  kiln_hazards_free(h);
  /* without the aliasing there is no hazard between 1 and 2 */
  q.storage = NULL;
  h = build(&q);
  expect_edges("no alias", h, (const xe[]){{0, 1, KILN_HAZARD_RAW}}, 1);
  kiln_hazards_free(h);
  kiln_schedule_free(s);
}

/* The record keeps only the nearest edges: a full write cuts off what was before it. */
static void test_nearest(void) {
  tb t = {.nv = 8};
  step(&t, 0, NULL, 1, L(0)); /* 0: W x */
  step(&t, 1, L(0), 1, L(1)); /* 1: R x */
  step(&t, 1, L(0), 1, L(2)); /* 2: R x */
  step(&t, 0, NULL, 1, L(0)); /* 3: W x */
  step(&t, 1, L(0), 1, L(3)); /* 4: R x */
  step(&t, 0, NULL, 1, L(0)); /* 5: W x */
  kiln_schedule *s = tb_sched(&t);
  kiln_region region[8];
  for (int v = 0; v < 8; v++) region[v] = dense(24);
  for (int pass = 0; pass < 2; pass++) { /* whole storages, then dense regions */
    kiln_hazard_request q = {.sched = s, .region = pass ? region : NULL};
    kiln_hazards *h = build(&q);
    expect_edges(pass ? "nearest (regions)" : "nearest", h,
                 (const xe[]){{0, 1, KILN_HAZARD_RAW},
                              {0, 2, KILN_HAZARD_RAW},
                              {0, 3, KILN_HAZARD_WAW},
                              {1, 3, KILN_HAZARD_WAR},
                              {2, 3, KILN_HAZARD_WAR},
                              {3, 4, KILN_HAZARD_RAW},
                              {3, 5, KILN_HAZARD_WAW},
                              {4, 5, KILN_HAZARD_WAR}},
                 8);
    CHECK(h && !has_edge(h, 0, 4, KILN_HAZARD_RAW) && !has_edge(h, 1, 5, KILN_HAZARD_WAR),
          "edges past a covering write");
    if (h)
      CHECK(h->n_kind[KILN_HAZARD_RAW] == 3 && h->n_kind[KILN_HAZARD_WAR] == 3 && h->n_kind[KILN_HAZARD_WAW] == 2,
            "kind counts %d %d %d", h->n_kind[0], h->n_kind[1], h->n_kind[2]);
    kiln_hazards_free(h);
  }
  kiln_schedule_free(s);

  /* a partial write does not cut off the write before it */
  t = (tb){.nv = 4};
  step(&t, 0, NULL, 1, L(0)); /* 0: W x (all) */
  step(&t, 0, NULL, 1, L(1)); /* 1: W x[0:2] */
  step(&t, 1, L(0), 1, L(2)); /* 2: R x (all) */
  step(&t, 1, L(1), 1, L(3)); /* 3: R x[0:2] */
  s = tb_sched(&t);
  kiln_view x = base_view(4, 6), top = slice2(&x, 0, 2, 1, 0, 6, 1);
  kiln_region r4[4] = {reg(&x), reg(&top), dense(1), dense(1)};
  int st4[4] = {0, 0, -1, -1};
  kiln_hazard_request q = {.sched = s, .storage = st4, .region = r4};
  kiln_hazards *h = build(&q);
  /* 0 -> 2 and 0 -> 3 are implied by 0 -> 1 -> 2 and 0 -> 1 -> 3 */
  expect_edges("partial write", h,
               (const xe[]){{0, 1, KILN_HAZARD_WAW}, {1, 2, KILN_HAZARD_RAW}, {1, 3, KILN_HAZARD_RAW}}, 3);
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){1, 0, 2, 3}, 4, NULL), "partial write: WAW reordered");
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 2, 1, 3}, 4, NULL), "partial write: read reordered");
  kiln_hazards_free(h);
  kiln_schedule_free(s);
}

/* A step that reads x and writes y over it (elementwise in place). */
static void test_same_step(void) {
  tb t = {.nv = 3};
  step(&t, 0, NULL, 1, L(0));
  step(&t, 1, L(0), 1, L(1));
  step(&t, 1, L(1), 1, L(2));
  step(&t, 1, L(0), 1, L(0)); /* reads and writes the same value */
  kiln_schedule *s = tb_sched(&t);
  int storage[3] = {-1, 0, -1};
  kiln_hazard_request q = {.sched = s, .storage = storage};
  kiln_hazards *h = build(&q);
  expect_edges("in place", h,
               (const xe[]){{0, 1, KILN_HAZARD_RAW},
                            {0, 1, KILN_HAZARD_WAW},
                            {1, 2, KILN_HAZARD_RAW},
                            {1, 3, KILN_HAZARD_RAW},
                            {1, 3, KILN_HAZARD_WAW},
                            {2, 3, KILN_HAZARD_WAR}},
               6);
  for (int i = 0; h && i < h->n_edges; i++)
    CHECK(h->edges[i].from < h->edges[i].to, "edge %d: %d -> %d", i, h->edges[i].from, h->edges[i].to);
  kiln_hazards_free(h);
  kiln_schedule_free(s);
}

/* The write-after-read case: one branch reads a slice of x (ReduceMax), the
 * other writes x in place (ScatterND). */
static void test_scatter_war(void) {
  enum { X, XS, M, IDX, UPD, Y, OUT, NV };
  tb t = {.nv = NV};
  step(&t, 0, NULL, 1, L(X));           /* 0: produce x [4,6] */
  step(&t, 1, L(XS), 1, L(M));          /* 1: ReduceMax(x[:, 0]) */
  step(&t, 3, L(X, IDX, UPD), 1, L(Y)); /* 2: ScatterND(x) in place */
  step(&t, 2, L(Y, M), 1, L(OUT));      /* 3: consumer */
  kiln_schedule *s = tb_sched(&t);
  kiln_view x = base_view(4, 6), col0 = slice2(&x, 0, 4, 1, 0, 1, 1), row0 = slice2(&x, 0, 1, 1, 0, 6, 1);
  kiln_view rows01 = slice2(&x, 0, 2, 1, 0, 6, 1), rows23 = slice2(&x, 2, 4, 1, 0, 6, 1);
  int storage[NV] = {-1, X, -1, -1, -1, X, -1};
  kiln_region region[NV] = {reg(&x), reg(&col0), dense(4), dense(2), dense(6), reg(&x), dense(4)};
  kiln_hazard_access_region ov = {.step = 2, .value = Y, .write = true, .region = reg(&row0)};
  kiln_hazard_request q = {
      .sched = s, .storage = storage, .region = region, .access_region = &ov, .n_access_region = 1};
  kiln_hazards *h = build(&q);
  expect_edges("scatter war", h,
               (const xe[]){{0, 1, KILN_HAZARD_RAW},
                            {0, 2, KILN_HAZARD_RAW},
                            {0, 2, KILN_HAZARD_WAW},
                            {1, 2, KILN_HAZARD_WAR},
                            {1, 3, KILN_HAZARD_RAW}, /* 0 -> 3 is implied by 0 -> 2 -> 3 */
                            {2, 3, KILN_HAZARD_RAW}},
               6);
  int violated = -2;
  CHECK(h && kiln_hazard_check_order(h, (const int[]){0, 1, 2, 3}, 4, &violated) && violated == -1,
        "schedule order rejected: %s", kiln_last_error());
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 2, 1, 3}, 4, &violated), "scatter before the read accepted");
  CHECK(h && violated >= 0 && violated < h->n_edges && h->edges[violated].from == 1 && h->edges[violated].to == 2 &&
            h->edges[violated].kind == KILN_HAZARD_WAR,
        "violated edge %d", violated);
  CHECK(strstr(kiln_last_error(), "WAR") != NULL, "message: %s", kiln_last_error());
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 1, 1, 3}, 4, &violated) && violated == -1,
        "a repeated step accepted");
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 1, 2}, 3, &violated), "a short order accepted");
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 1, 2, 4}, 4, &violated), "a step out of range accepted");

  /* the dump, with names */
  kiln_value vals[NV] = {{.name = "x"},   {.name = "xs"}, {.name = "m"},  {.name = "idx"},
                         {.name = "upd"}, {.name = "y"},  {.name = "out"}};
  kiln_node nodes[4] = {{.name = "prod", .op_type = "Relu"},
                        {.name = "rm", .op_type = "ReduceMax"},
                        {.name = "sc", .op_type = "ScatterND"},
                        {.name = "", .op_type = "Add", .src = 3}};
  kiln_graph g = {.n_values = NV, .values = vals, .n_nodes = 4, .nodes = nodes};
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (h && f) kiln_hazard_dump(h, s, &g, f);
  if (f) fclose(f);
  CHECK(buf && strstr(buf, "6 edges (4 RAW, 1 WAR, 1 WAW)"), "dump summary: %s", buf ? buf : "");
  CHECK(buf && strstr(buf, "step 1 (ReduceMax rm) -> step 2 (ScatterND sc) WAR v1 \"xs\" -> v5 \"y\" storage 0"),
        "dump line: %s", buf ? buf : "");
  CHECK(buf && strstr(buf, "step 2 (ScatterND sc) -> step 3 (Add #3) RAW"), "dump label of an unnamed node: %s",
        buf ? buf : "");
  free(buf);
  kiln_hazards_free(h);

  /* the scatter writes all of x: still a WAR edge */
  q.n_access_region = 0;
  h = build(&q);
  CHECK(h && has_edge(h, 1, 2, KILN_HAZARD_WAR), "whole scatter: no WAR edge");
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 2, 1, 3}, 4, NULL), "whole scatter: reorder accepted");
  kiln_hazards_free(h);

  /* the reader reads rows 0-1, the scatter writes rows 2-3: independent */
  region[XS] = reg(&rows01);
  ov.region = reg(&rows23);
  q.n_access_region = 1;
  h = build(&q);
  CHECK(h && !any_edge(h, 1, 2), "disjoint scatter: an edge between the reader and the scatter");
  CHECK(h && kiln_hazard_check_order(h, (const int[]){0, 2, 1, 3}, 4, NULL), "disjoint scatter: reorder rejected: %s",
        kiln_last_error());
  kiln_hazards_free(h);

  /* a later override for the same access wins */
  kiln_hazard_access_region ovs[2] = {ov, ov};
  ovs[1].region = reg(&rows01);
  q.access_region = ovs, q.n_access_region = 2;
  h = build(&q);
  CHECK(h && has_edge(h, 1, 2, KILN_HAZARD_WAR), "the later override should win");
  kiln_hazards_free(h);
  kiln_schedule_free(s);
}

/* Disjoint regions of one storage give no edges. */
static void test_disjoint(void) {
  kiln_view x = base_view(4, 6);
  kiln_view even = slice2(&x, 0, 4, 1, 0, 6, 2), odd = slice2(&x, 0, 4, 1, 1, 6, 2);
  kiln_view r0 = slice2(&x, 0, 2, 1, 0, 6, 1), r1 = slice2(&x, 2, 4, 1, 0, 6, 1);
  kiln_region re = reg(&even), ro = reg(&odd), rr0 = reg(&r0), rr1 = reg(&r1);
  CHECK(!kiln_region_may_overlap(&re, &ro) && !kiln_region_may_overlap(&rr0, &rr1), "premise: disjoint regions");
  for (int pass = 0; pass < 2; pass++) {
    enum { X, A, B, O1, O2, NV };
    tb t = {.nv = NV};
    step(&t, 0, NULL, 1, L(A));  /* 0: W a */
    step(&t, 0, NULL, 1, L(B));  /* 1: W b */
    step(&t, 1, L(A), 1, L(O1)); /* 2: R a */
    step(&t, 1, L(B), 1, L(O2)); /* 3: R b */
    kiln_schedule *s = tb_sched(&t);
    int storage[NV] = {-1, X, X, -1, -1};
    kiln_region region[NV] = {reg(&x), pass ? rr0 : re, pass ? rr1 : ro, dense(4), dense(4)};
    kiln_hazard_request q = {.sched = s, .storage = storage, .region = region};
    kiln_hazards *h = build(&q);
    expect_edges(pass ? "row slices" : "even/odd columns", h,
                 (const xe[]){{0, 2, KILN_HAZARD_RAW}, {1, 3, KILN_HAZARD_RAW}}, 2);
    CHECK(h && kiln_hazard_check_order(h, (const int[]){1, 3, 0, 2}, 4, NULL), "independent halves reordered");
    CHECK(h && !kiln_hazard_check_order(h, (const int[]){2, 0, 1, 3}, 4, NULL), "a read before its write accepted");
    kiln_hazards_free(h);
    kiln_schedule_free(s);
  }

  /* Concat along axis 0: each producer writes its row block of the output */
  enum { OUT, S0, S1, RES, NV };
  tb t = {.nv = NV};
  step(&t, 0, NULL, 1, L(S0));
  step(&t, 0, NULL, 1, L(S1));
  step(&t, 1, L(OUT), 1, L(RES));
  kiln_schedule *s = tb_sched(&t);
  int storage[NV] = {-1, OUT, OUT, -1};
  kiln_region region[NV] = {reg(&x), rr0, rr1, dense(24)};
  kiln_hazard_request q = {.sched = s, .storage = storage, .region = region};
  kiln_hazards *h = build(&q);
  expect_edges("concat", h, (const xe[]){{0, 2, KILN_HAZARD_RAW}, {1, 2, KILN_HAZARD_RAW}}, 2);
  kiln_hazards_free(h);
  kiln_schedule_free(s);
}

/* Views of views: regions of slices of slices, a transpose, and a view stack. */
static void test_views_of_views(void) {
  enum { X, V2, V3, V5, V6, V7, O, NV };
  kiln_view x = base_view(8, 8), v1 = slice2(&x, 2, 6, 1, 0, 8, 1);
  kiln_view v2 = slice2(&v1, 0, 4, 1, 0, 8, 2), v3 = slice2(&v1, 0, 4, 1, 1, 8, 2), v4, v5, v6;
  kiln_view_transpose(&v1, NULL, 0, &v4); /* [8, 4] */
  v5 = slice2(&v4, 0, 8, 2, 0, 4, 1);     /* columns 0::2 of v1: v2's elements */
  v6 = slice2(&x, 6, 8, 1, 0, 8, 1);      /* rows 6-7: outside v1 */
  kiln_views st;                          /* reshape of v3 transposed to [16]: a stack */
  kiln_views_init(&st, &v3);
  kiln_view_op tr = {.kind = KILN_VOP_TRANSPOSE}, op = {.kind = KILN_VOP_RESHAPE, .n = 1, .shape = {16}};
  kiln_status vs = kiln_views_push(&st, &tr);
  if (vs == KILN_OK) vs = kiln_views_push(&st, &op);
  CHECK(vs == KILN_OK && st.depth == 2, "premise: the reshape needs a stack (depth %d)", st.depth);
  kiln_region r7;
  kiln_views_region(&st, &r7);
  CHECK(!r7.exact, "premise: the stack's region is a superset");
  int storage[NV] = {-1, X, X, X, X, X, -1};
  kiln_region region[NV] = {reg(&x), reg(&v2), reg(&v3), reg(&v5), reg(&v6), r7, dense(1)};
  tb t = {.nv = NV};
  step(&t, 0, NULL, 1, L(X));  /* 0: W x */
  step(&t, 0, NULL, 1, L(V2)); /* 1: W v2 */
  step(&t, 1, L(V3), 1, L(O)); /* 2: R v3 */
  step(&t, 1, L(V5), 1, L(O)); /* 3: R v5 (= v2's elements, transposed) */
  step(&t, 1, L(V6), 1, L(O)); /* 4: R v6 */
  step(&t, 0, NULL, 1, L(V7)); /* 5: W reshape(v3) */
  step(&t, 1, L(V2), 1, L(O)); /* 6: R v2 */
  kiln_schedule *s = tb_sched(&t);
  kiln_hazard_request q = {.sched = s, .storage = storage, .region = region};
  kiln_hazards *h = build(&q);
  expect_edges("views of views", h,
               (const xe[]){{0, 1, KILN_HAZARD_WAW},
                            {0, 2, KILN_HAZARD_RAW}, /* v3 is disjoint from v2: only step 0 wrote it */
                            {1, 3, KILN_HAZARD_RAW}, /* v5 is v2 (0 -> 3 implied through 1) */
                            {0, 4, KILN_HAZARD_RAW}, /* v6 is outside v1 */
                            {0, 5, KILN_HAZARD_WAW},
                            {2, 5, KILN_HAZARD_WAR}, /* not 3 or 4: disjoint */
                            {1, 6, KILN_HAZARD_RAW}, /* not 5: disjoint */
                            /* the scratch value o: written by 2, 3, 4, 6 */
                            {2, 3, KILN_HAZARD_WAW},
                            {3, 4, KILN_HAZARD_WAW},
                            {4, 6, KILN_HAZARD_WAW}},
               10);
  kiln_hazards_free(h);
  kiln_schedule_free(s);
}

/* Arena reuse: storages at overlapping bytes alias; assert mode catches a broken plan. */
static void test_arena(void) {
  enum { P, Q, R, NV };
  tb t = {.nv = NV};
  step(&t, 0, NULL, 1, L(P)); /* 0: W p */
  step(&t, 1, L(P), 1, L(R)); /* 1: R p, W r */
  step(&t, 0, NULL, 1, L(Q)); /* 2: W q (reuses p's bytes) */
  step(&t, 1, L(Q), 0, NULL); /* 3: R q */
  kiln_schedule *s = tb_sched(&t);
  int64_t off[NV] = {0, 0, 256};
  uint64_t bytes[NV] = {256, 128, 64};
  kiln_hazard_request q = {.sched = s};
  kiln_hazards *h = build(&q);
  expect_edges("no arena", h, (const xe[]){{0, 1, KILN_HAZARD_RAW}, {2, 3, KILN_HAZARD_RAW}}, 2);
  kiln_hazards_free(h);
  q.arena_offset = off, q.arena_bytes = bytes;
  for (int a = 0; a < 2; a++) {
    q.arena_assert = a;
    h = build(&q);
    expect_edges(
        a ? "arena (assert)" : "arena", h,
        (const xe[]){
            {0, 1, KILN_HAZARD_RAW}, {2, 3, KILN_HAZARD_RAW}, {0, 2, KILN_HAZARD_WAW}, {1, 2, KILN_HAZARD_WAR}},
        4);
    CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 2, 1, 3}, 4, NULL), "reuse before the last read accepted");
    kiln_hazards_free(h);
  }
  /* q moved to its own bytes: no reuse edges */
  off[Q] = 512;
  h = build(&q);
  expect_edges("arena apart", h, (const xe[]){{0, 1, KILN_HAZARD_RAW}, {2, 3, KILN_HAZARD_RAW}}, 2);
  kiln_hazards_free(h);
  /* outside the arena, or empty: no aliasing */
  off[Q] = 0, bytes[Q] = 0;
  h = build(&q);
  CHECK(h && h->n_edges == 2, "an empty storage aliases (%d edges)", h ? h->n_edges : -1);
  kiln_hazards_free(h);
  off[Q] = KILN_MEMPLAN_NONE, bytes[Q] = 128;
  h = build(&q);
  CHECK(h && h->n_edges == 2, "a storage outside the arena aliases (%d edges)", h ? h->n_edges : -1);
  kiln_hazards_free(h);
  /* r placed over p while both live (step 1): a broken plan */
  off[Q] = 512, off[R] = 128;
  q.arena_assert = true;
  kiln_status st = kiln_hazard_build(&q, &h);
  CHECK(st == KILN_E_INTERNAL && h == NULL, "broken plan accepted (%s)", kiln_status_name(st));
  CHECK(strstr(kiln_last_error(), "storages 0 (steps 0..1, bytes [0, 256)) and 2 (steps 1..1, bytes [128, 192))"),
        "message: %s", kiln_last_error());
  q.arena_assert = false;
  h = build(&q);
  CHECK(h && has_edge(h, 0, 1, KILN_HAZARD_WAW), "overlapping storages without assert: no edge");
  kiln_hazards_free(h);
  kiln_schedule_free(s);

  /* q [4,6] reuses p's bytes in two row halves: the first half does not
   * cover all of q, so p's accesses stay in the record for the second; a
   * full write of q then covers p's bytes, and p's accesses leave it */
  enum { QA = 2, QB, QF, NV2 };
  t = (tb){.nv = NV2};
  step(&t, 0, NULL, 1, L(P));  /* 0: W p */
  step(&t, 1, L(P), 0, NULL);  /* 1: R p */
  step(&t, 0, NULL, 1, L(QA)); /* 2: W q[0:2] */
  step(&t, 0, NULL, 1, L(QB)); /* 3: W q[2:4] */
  step(&t, 0, NULL, 1, L(QF)); /* 4: W q */
  step(&t, 0, NULL, 1, L(QA)); /* 5: W q[0:2] */
  s = tb_sched(&t);
  kiln_view qv = base_view(4, 6), qa = slice2(&qv, 0, 2, 1, 0, 6, 1), qb = slice2(&qv, 2, 4, 1, 0, 6, 1);
  int storage[NV2] = {-1, -1, Q, Q, Q};
  kiln_region region[NV2] = {dense(16), reg(&qv), reg(&qa), reg(&qb), reg(&qv)};
  int64_t off2[NV2] = {0, 0, KILN_MEMPLAN_NONE, KILN_MEMPLAN_NONE, KILN_MEMPLAN_NONE};
  uint64_t bytes2[NV2] = {64, 96, 0, 0, 0};
  q = (kiln_hazard_request){
      .sched = s, .storage = storage, .region = region, .arena_offset = off2, .arena_bytes = bytes2};
  h = build(&q);
  expect_edges("arena, partial reuse", h,
               (const xe[]){{0, 1, KILN_HAZARD_RAW},
                            {0, 2, KILN_HAZARD_WAW},
                            {1, 2, KILN_HAZARD_WAR},
                            {0, 3, KILN_HAZARD_WAW},
                            {1, 3, KILN_HAZARD_WAR},
                            {2, 4, KILN_HAZARD_WAW},
                            {3, 4, KILN_HAZARD_WAW},
                            {4, 5, KILN_HAZARD_WAW}},
               8);
  CHECK(h && !kiln_hazard_check_order(h, (const int[]){0, 3, 1, 2, 4, 5}, 6, NULL),
        "the second half moved before the last read of p");
  kiln_hazards_free(h);
  kiln_schedule_free(s);
}

/* Bad requests fail with a message and no result. */
static void test_errors(void) {
  tb t = {.nv = 3};
  step(&t, 0, NULL, 1, L(0));
  step(&t, 1, L(0), 1, L(1));
  kiln_schedule *s = tb_sched(&t);
  static kiln_hazards sentinel;
  kiln_hazards *h = &sentinel;
  kiln_status st = kiln_hazard_build(&(kiln_hazard_request){0}, &h);
  CHECK(st == KILN_E_INTERNAL && h == NULL, "no schedule: %s", kiln_status_name(st));
  int bad_storage[3] = {0, 3, -1};
  st = kiln_hazard_build(&(kiln_hazard_request){.sched = s, .storage = bad_storage}, &h);
  CHECK(st == KILN_E_INTERNAL && h == NULL && strstr(kiln_last_error(), "value 1 has storage 3"), "bad storage: %s",
        kiln_last_error());
  kiln_region region[3] = {dense(4), dense(4), dense(4)};
  region[1].hi = 7; /* inconsistent with its shape */
  st = kiln_hazard_build(&(kiln_hazard_request){.sched = s, .region = region}, &h);
  CHECK(st == KILN_E_INTERNAL && h == NULL, "malformed region accepted");
  region[1] = dense(4);
  kiln_hazard_access_region ov = {.step = 0, .value = 1, .write = true, .region = dense(2)};
  st = kiln_hazard_build(
      &(kiln_hazard_request){.sched = s, .region = region, .access_region = &ov, .n_access_region = 1}, &h);
  CHECK(st == KILN_E_INTERNAL && h == NULL && strstr(kiln_last_error(), "step 0 does not write value 1"),
        "override of no access: %s", kiln_last_error());
  int64_t off[3] = {0, 0, 0};
  st = kiln_hazard_build(&(kiln_hazard_request){.sched = s, .arena_offset = off}, &h);
  CHECK(st == KILN_E_INTERNAL && h == NULL, "offsets without sizes accepted");
  off[2] = -5;
  uint64_t bytes[3] = {4, 4, 4};
  st = kiln_hazard_build(&(kiln_hazard_request){.sched = s, .arena_offset = off, .arena_bytes = bytes}, &h);
  CHECK(st == KILN_E_INTERNAL && h == NULL, "negative offset accepted");
  /* an empty region touches nothing */
  region[0] = dense(0);
  h = build(&(kiln_hazard_request){.sched = s, .region = region});
  CHECK(h && h->n_edges == 0 && h->n_accesses == 1, "empty region: %d edges, %d accesses", h ? h->n_edges : -1,
        h ? h->n_accesses : -1);
  kiln_hazards_free(h);
  kiln_hazards_free(NULL);
  kiln_schedule_free(s);

  /* storage ids from a plan and alias chains */
  int alias[5] = {-1, 0, 1, -1, 3}, ids[5];
  CHECK(kiln_hazard_storage_ids(NULL, alias, 5, ids) == KILN_OK && ids[0] == 0 && ids[1] == 0 && ids[2] == 0 &&
            ids[3] == 3 && ids[4] == 3,
        "alias roots %d %d %d %d %d", ids[0], ids[1], ids[2], ids[3], ids[4]);
  int cyc[3] = {1, 2, 0};
  CHECK(kiln_hazard_storage_ids(NULL, cyc, 3, ids) == KILN_E_INTERNAL, "a cycle of views accepted");
  int far[2] = {-1, 7};
  CHECK(kiln_hazard_storage_ids(NULL, far, 2, ids) == KILN_E_INTERNAL, "an alias out of range accepted");
  CHECK(kiln_hazard_storage_ids(NULL, NULL, 2, ids) == KILN_OK && ids[0] == 0 && ids[1] == 1, "no aliases");

  /* the dense region is what kiln_view_region gives for a contiguous view */
  for (int64_t n = 0; n < 70; n += n < 3 ? 1 : 17) {
    kiln_view v;
    kiln_view_contiguous(1, &n, &v);
    kiln_region a = reg(&v), b = dense(n);
    CHECK(a.empty == b.empty &&
              (a.empty || (a.rank == b.rank && a.lo == b.lo && a.hi == b.hi && a.offset == b.offset &&
                           (a.rank == 0 || (a.shape[0] == b.shape[0] && a.strides[0] == b.strides[0])))),
          "dense region of %" PRId64, n);
  }
  CHECK(!strcmp(kiln_hazard_kind_name(KILN_HAZARD_RAW), "RAW") &&
            !strcmp(kiln_hazard_kind_name(KILN_HAZARD_WAR), "WAR") &&
            !strcmp(kiln_hazard_kind_name(KILN_HAZARD_WAW), "WAW"),
        "kind names");
}

/* A real memory plan: an in-place write over a value another branch still read. */
static void test_memplan_inplace(void) {
  enum { X, A, T, B, C, NV };
  tb t = {.nv = NV};
  step(&t, 1, L(X), 1, L(A));    /* 0 */
  step(&t, 1, L(A), 1, L(T));    /* 1: a reader of a */
  step(&t, 1, L(A), 1, L(B));    /* 2: b written over a */
  step(&t, 2, L(B, T), 1, L(C)); /* 3 */
  kiln_schedule *s = tb_sched(&t);
  uint64_t size[NV] = {256, 256, 256, 256, 256};
  bool ext[NV] = {true, false, false, false, true};
  int alias[NV] = {-1, -1, -1, -1, -1};
  kiln_memplan_inplace ip = {2, B, A};
  for (int pass = 0; pass < 2; pass++) {
    kiln_memplan_request mr = {s, size, ext, alias, pass ? NULL : &ip, pass ? 0 : 1};
    kiln_memplan *p = NULL;
    kiln_status st = kiln_memplan_build(&mr, &p);
    CHECK(st == KILN_OK, "memplan: %s", kiln_last_error());
    if (st) continue;
    CHECK(p->n_inplace == (pass ? 0 : 1) && (p->storage[B] == p->storage[A]) == !pass, "in place: %d, storages %d %d",
          p->n_inplace, p->storage[A], p->storage[B]);
    int ids[NV];
    CHECK(kiln_hazard_storage_ids(p, alias, NV, ids) == KILN_OK, "storage ids");
    kiln_hazard_request q = {
        .sched = s, .storage = ids, .arena_offset = p->offset, .arena_bytes = size, .arena_assert = true};
    kiln_hazards *h = build(&q);
    CHECK(h != NULL, "a correct plan fails the assertion");
    bool reorder = h && kiln_hazard_check_order(h, (const int[]){0, 2, 1, 3}, 4, NULL);
    if (!pass) {
      CHECK(h && has_edge(h, 1, 2, KILN_HAZARD_WAR), "no WAR edge before the in-place write");
      CHECK(!reorder, "the in-place write moved before a reader of the old contents");
    } else {
      CHECK(reorder, "without in place the two readers are independent");
    }
    CHECK(h && kiln_hazard_check_order(h, (const int[]){0, 1, 2, 3}, 4, NULL), "schedule order rejected");
    kiln_hazards_free(h);
    kiln_memplan_free(p);
  }
  kiln_schedule_free(s);
}

/* A long chain planned with buffer reuse: full writes of a reusing storage
 * clear the old storage's accesses from the record, so it stays small. */
static void test_long_chain(void) {
  enum { N = 3000 };
  kiln_schedule *s = NULL;
  kiln_status st = kiln_schedule_new(N + 1, &s);
  for (int i = 0; !st && i < N; i++) st = kiln_schedule_add_step(s, (const int[]){i}, 1, (const int[]){i + 1}, 1, i);
  CHECK(st == KILN_OK, "chain schedule: %s", kiln_last_error());
  static uint64_t size[N + 1];
  static bool ext[N + 1];
  static int alias[N + 1], ids[N + 1];
  static kiln_region region[N + 1];
  for (int v = 0; v <= N; v++) size[v] = 4096, alias[v] = -1, region[v] = dense(1024);
  ext[0] = ext[N] = true;
  kiln_memplan_request mr = {s, size, ext, alias, NULL, 0};
  kiln_memplan *p = NULL;
  if (!st) st = kiln_memplan_build(&mr, &p);
  CHECK(st == KILN_OK && p->arena_size <= 2 * 4096, "chain plan: %s", kiln_last_error());
  if (!st) st = kiln_hazard_storage_ids(p, alias, N + 1, ids);
  for (int pass = 0; !st && pass < 2; pass++) { /* whole storages, then dense regions */
    kiln_hazard_request q = {.sched = s,
                             .storage = ids,
                             .region = pass ? region : NULL,
                             .arena_offset = p->offset,
                             .arena_bytes = size,
                             .arena_assert = true};
    kiln_hazards *h = build(&q);
    CHECK(h && h->max_live <= 4, "chain: the record held %d accesses", h ? h->max_live : -1);
    /* each step: RAW from its producer; WAW and WAR from the previous user of its buffer */
    CHECK(h && h->n_edges <= 3 * N, "chain: %d edges", h ? h->n_edges : -1);
    /* step N-2 writes over the buffer step N-4 wrote and step N-3 read */
    CHECK(h && has_edge(h, N - 4, N - 2, KILN_HAZARD_WAW) && has_edge(h, N - 3, N - 2, KILN_HAZARD_WAR) &&
              has_edge(h, N - 3, N - 2, KILN_HAZARD_RAW) && !any_edge(h, N - 5, N - 2),
          "chain: reuse edges at the end");
    kiln_hazards_free(h);
  }
  kiln_memplan_free(p);
  kiln_schedule_free(s);
}

/* ---- random schedules against brute force ---- */

/* One access as the brute force sees it. */
typedef struct bacc {
  int step, value, storage;
  bool write;
  kiln_region region;
  uint64_t mask; /* storage elements really touched (storages have <= 64) */
} bacc;

typedef struct rcase {
  int nv, ns;
  int storage[MAXV]; /* as given to the pass (-1: own) */
  kiln_region region[MAXV];
  uint64_t mask[MAXV];
  int nov;
  kiln_hazard_access_region ov[2 * MAXS * MAXIO];
  uint64_t ovmask[2 * MAXS * MAXIO];
  int64_t off[MAXV];
  uint64_t bytes[MAXV];
  bool arena, whole;
  int nacc;
  bacc acc[2 * MAXS * MAXIO];
} rcase;

typedef struct stats {
  int cases, failed_build, bad_edges, unordered, unsound_region, bad_assert, bad_identity, bad_swap, swaps, bad_perm,
      perms_ok, perms_bad, bad_topo, asserts, plans, corruptions, bad_corruption;
  long edges, conflicting_pairs, real_overlaps;
  char msg[600];
} stats;

static void note(stats *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(stats *st, const char *fmt, ...) {
  if (st->msg[0]) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->msg, sizeof st->msg, fmt, ap);
  va_end(ap);
}

/* A random view (a stack of movement ops) of a rows x cols storage: its region and the elements it reads. */
static void rand_view(int64_t rows, int64_t cols, kiln_region *r, uint64_t *mask) {
  kiln_view b = base_view(rows, cols);
  kiln_views s;
  kiln_views_init(&s, &b);
  int n_ops = rnd(0, 4);
  for (int k = 0; k < n_ops; k++) {
    const kiln_view *top = kiln_views_top(&s);
    kiln_view_op op;
    memset(&op, 0, sizeof op);
    int rank = top->rank, pick = rnd(0, 9);
    if (rank == 0) pick = 9;
    if (pick <= 3) { /* slice */
      int64_t ax = rnd(0, rank - 1), dim = top->shape[ax];
      int64_t steps[] = {1, 1, 2, 3, -1, -2};
      op.kind = KILN_VOP_SLICE, op.n = 1, op.has_axes = op.has_steps = true;
      op.axes[0] = ax, op.steps[0] = steps[rnd(0, 5)];
      op.starts[0] = rnd(-1, (int)dim), op.ends[0] = rnd(-1, (int)dim + 1);
      if (op.steps[0] < 0 && rnd(0, 1)) op.starts[0] = dim - 1, op.ends[0] = INT64_MIN;
    } else if (pick == 4) {
      op.kind = KILN_VOP_TRANSPOSE;
    } else if (pick == 5) { /* reshape to [n] or [a, n / a] */
      op.kind = KILN_VOP_RESHAPE;
      int64_t n = top->numel, a = rnd(1, 4);
      if (n % a || rnd(0, 2) == 0)
        op.n = 1, op.shape[0] = n;
      else
        op.n = 2, op.shape[0] = a, op.shape[1] = n / a;
    } else if (pick == 6) {
      op.kind = KILN_VOP_GATHER, op.axis = rnd(0, rank - 1);
      if (top->shape[op.axis] == 0) continue;
      op.index = rnd(0, (int)top->shape[op.axis] - 1);
    } else if (pick == 7) { /* broadcast: a new leading dim of 2 */
      if (rank >= KILN_MAX_RANK || top->numel > 32) continue;
      op.kind = KILN_VOP_EXPAND, op.n = rank + 1, op.shape[0] = 2;
      for (int d = 0; d < rank; d++) op.shape[d + 1] = top->shape[d];
    } else if (pick == 8) { /* pad (masked elements read nothing) */
      op.kind = KILN_VOP_PAD;
      for (int d = 0; d < 2 * rank; d++) op.pads[d] = rnd(-1, 1);
    } else {
      op.kind = KILN_VOP_UNSQUEEZE, op.n = 1, op.axes[0] = 0;
    }
    if (kiln_views_push(&s, &op) != KILN_OK) continue;
  }
  kiln_views_region(&s, r);
  *mask = 0;
  const kiln_view *top = kiln_views_top(&s);
  for (int64_t i = 0; i < top->numel; i++) {
    bool valid;
    int64_t e = kiln_views_offset(&s, i, &valid);
    if (valid) *mask |= (uint64_t)1 << e;
  }
}

static int resolve(const rcase *c, int v) { return c->storage[v] >= 0 ? c->storage[v] : v; }

static bool bf_alias(const rcase *c, int s, int t) {
  if (!c->arena || c->off[s] < 0 || c->off[t] < 0 || !c->bytes[s] || !c->bytes[t]) return false;
  uint64_t a = (uint64_t)c->off[s], b = (uint64_t)c->off[t];
  return a < b + c->bytes[t] && b < a + c->bytes[s];
}

static bool bf_conflict(const rcase *c, const bacc *p, const bacc *q) {
  if (!p->write && !q->write) return false;
  if (p->storage != q->storage) return bf_alias(c, p->storage, q->storage);
  if (c->whole) return true;
  return kiln_region_may_overlap(&p->region, &q->region);
}

/* Lists the accesses of the schedule independently of the pass. */
static void bf_accesses(rcase *c, const kiln_schedule *s) {
  c->nacc = 0;
  for (int i = 0; i < s->n_steps; i++)
    for (int pass = 0; pass < 2; pass++) {
      const kiln_step *sp = &s->steps[i];
      int n = pass ? sp->n_writes : sp->n_reads;
      for (int k = 0; k < n; k++) {
        int v = pass ? sp->writes[k] : sp->reads[k];
        bacc a = {i, v, resolve(c, v), pass == 1, c->region[v], c->mask[v]};
        for (int o = 0; o < c->nov; o++)
          if (c->ov[o].step == i && c->ov[o].value == v && c->ov[o].write == a.write)
            a.region = c->ov[o].region, a.mask = c->ovmask[o];
        if (!c->whole && a.region.empty) continue;
        c->acc[c->nacc++] = a;
      }
    }
}

/* reach[a]: bit b set when the edges order step a before step b (transitively). */
static void closure(const kiln_hazards *h, int ns, uint64_t *reach) {
  for (int a = ns - 1; a >= 0; a--) {
    reach[a] = 0;
    for (int i = 0; i < h->n_edges; i++)
      if (h->edges[i].from == a) reach[a] |= ((uint64_t)1 << h->edges[i].to) | reach[h->edges[i].to];
  }
}

/* pred[b]: the steps a < b with an access conflicting with one of b's (brute force). */
static void bf_pred(const rcase *c, int ns, uint64_t *pred) {
  for (int b = 0; b < ns; b++) pred[b] = 0;
  for (int i = 0; i < c->nacc; i++)
    for (int j = 0; j < c->nacc; j++)
      if (c->acc[i].step < c->acc[j].step && bf_conflict(c, &c->acc[i], &c->acc[j]))
        pred[c->acc[j].step] |= (uint64_t)1 << c->acc[i].step;
}

/* Whether order respects every conflicting pair of accesses. */
static bool bf_respects(const uint64_t *pred, const int *order, int ns) {
  uint64_t done = 0;
  for (int i = 0; i < ns; i++) {
    int b = order[i];
    /* every predecessor of b must be done; a later step cannot be one */
    for (int a = 0; a < ns; a++)
      if ((pred[b] >> a & 1) && !(done >> a & 1)) return false;
    done |= (uint64_t)1 << b;
  }
  return true;
}

/* Checks h against brute force over c's accesses. */
static void verify(rcase *c, const kiln_schedule *s, const kiln_hazards *h, stats *st) {
  int ns = s->n_steps;
  bf_accesses(c, s);
  int at[65]; /* the accesses of step i are acc[at[i] .. at[i + 1]) */
  for (int i = 0, k = 0; i <= ns; i++) {
    while (k < c->nacc && c->acc[k].step < i) k++;
    at[i] = k;
  }
  uint64_t pred[64];
  bf_pred(c, ns, pred);
  /* edges: well formed, unique, and each joining two conflicting accesses of its kind */
  for (int i = 0; i < h->n_edges; i++) {
    const kiln_hazard_edge *e = &h->edges[i];
    bool ok = e->from >= 0 && e->from < e->to && e->to < ns;
    if (ok && i > 0) {
      const kiln_hazard_edge *p = &h->edges[i - 1];
      ok = p->to < e->to || (p->to == e->to && (p->from < e->from || (p->from == e->from && p->kind < e->kind)));
    }
    bool justified = false;
    for (int a = ok ? at[e->from] : 0; ok && !justified && a < at[e->from + 1]; a++)
      for (int b = at[e->to]; !justified && b < at[e->to + 1]; b++) {
        const bacc *p = &c->acc[a], *q = &c->acc[b];
        bool kind = e->kind == KILN_HAZARD_RAW   ? p->write && !q->write
                    : e->kind == KILN_HAZARD_WAR ? !p->write && q->write
                                                 : p->write && q->write;
        justified = p->value == e->from_value && q->value == e->to_value && q->storage == e->storage && kind &&
                    bf_conflict(c, p, q);
      }
    if (!ok || !justified) {
      st->bad_edges++;
      note(st, "case %d: edge %d (%d -> %d %s, values %d -> %d) %s", st->cases, i, e->from, e->to,
           kiln_hazard_kind_name(e->kind), e->from_value, e->to_value,
           ok ? "joins no conflicting accesses" : "malformed");
    }
  }
  st->edges += h->n_edges;
  /* the closure orders every conflicting pair */
  uint64_t reach[64];
  closure(h, ns, reach);
  for (int a = 0; a < c->nacc; a++)
    for (int b = 0; b < c->nacc; b++) {
      const bacc *p = &c->acc[a], *q = &c->acc[b];
      if (p->step >= q->step) continue;
      if (p->storage == q->storage && (p->mask & q->mask) && (p->write || q->write)) {
        st->real_overlaps++;
        if (!c->whole && !kiln_region_may_overlap(&p->region, &q->region)) {
          st->unsound_region++;
          note(st, "case %d: accesses at steps %d and %d share elements but their regions may not overlap", st->cases,
               p->step, q->step);
        }
      }
      if (!bf_conflict(c, p, q)) continue;
      st->conflicting_pairs++;
      if (!(reach[p->step] >> q->step & 1)) {
        st->unordered++;
        note(st, "case %d: %s of v%d at step %d and %s of v%d at step %d (storages %d, %d) are not ordered", st->cases,
             p->write ? "write" : "read", p->value, p->step, q->write ? "write" : "read", q->value, q->step, p->storage,
             q->storage);
      }
    }
  /* the schedule order passes */
  int order[64];
  for (int i = 0; i < ns; i++) order[i] = i;
  if (!kiln_hazard_check_order(h, order, ns, NULL)) {
    st->bad_identity++;
    note(st, "case %d: schedule order rejected: %s", st->cases, kiln_last_error());
  }
  /* swapping a conflicting pair fails */
  for (int k = 0, done = 0; k < 16 && done < 2 && c->nacc > 1; k++) {
    const bacc *p = &c->acc[rnd(0, c->nacc - 1)], *q = &c->acc[rnd(0, c->nacc - 1)];
    if (p->step >= q->step || !bf_conflict(c, p, q)) continue;
    st->swaps++, done++;
    order[p->step] = q->step, order[q->step] = p->step;
    int violated = -1;
    if (kiln_hazard_check_order(h, order, ns, &violated) || violated < 0) {
      st->bad_swap++;
      note(st, "case %d: swapping steps %d and %d accepted", st->cases, p->step, q->step);
    }
    order[p->step] = p->step, order[q->step] = q->step;
  }
  /* random permutations: the check agrees with brute force */
  for (int k = 0; k < 4; k++) {
    for (int i = ns - 1; i > 0; i--) {
      int j = rnd(0, i), x = order[i];
      order[i] = order[j], order[j] = x;
    }
    bool got = kiln_hazard_check_order(h, order, ns, NULL), want = bf_respects(pred, order, ns);
    if (got != want) {
      st->bad_perm++;
      note(st, "case %d: check_order says %d, brute force %d", st->cases, got, want);
    }
    if (want)
      st->perms_ok++;
    else
      st->perms_bad++;
  }
  /* random orders that respect every conflicting pair pass */
  uint64_t placed = 0;
  for (int i = 0; i < ns; i++) {
    int cand[64], nc = 0;
    for (int b = 0; b < ns; b++)
      if (!(placed >> b & 1) && !(pred[b] & ~placed)) cand[nc++] = b;
    order[i] = cand[rnd(0, nc - 1)];
    placed |= (uint64_t)1 << order[i];
  }
  if (!kiln_hazard_check_order(h, order, ns, NULL)) {
    st->bad_topo++;
    note(st, "case %d: a conflict-respecting order rejected: %s", st->cases, kiln_last_error());
  }
  st->perms_ok++;
}

/* Whether two used storages share arena bytes while both live (brute force). */
static bool bf_broken(const rcase *c, const kiln_schedule *s) {
  int first[MAXV], last[MAXV];
  for (int v = 0; v < c->nv; v++) first[v] = last[v] = -1;
  for (int i = 0; i < s->n_steps; i++)
    for (int k = 0; k < s->steps[i].n_reads + s->steps[i].n_writes; k++) {
      int v = k < s->steps[i].n_reads ? s->steps[i].reads[k] : s->steps[i].writes[k - s->steps[i].n_reads];
      int id = resolve(c, v);
      if (first[id] < 0) first[id] = i;
      last[id] = i;
    }
  for (int a = 0; a < c->nv; a++)
    for (int b = a + 1; b < c->nv; b++)
      if (first[a] >= 0 && first[b] >= 0 && bf_alias(c, a, b) && first[a] <= last[b] && first[b] <= last[a])
        return true;
  return false;
}

static void test_random_regions(void) {
  enum { CASES = 6000 };
  stats st = {0};
  static rcase c;
  for (int ci = 0; ci < CASES; ci++) {
    memset(&c, 0, sizeof c);
    st.cases = ci;
    int S = rnd(1, 3), nviews = rnd(1, 9);
    int64_t rows[3], cols[3];
    c.nv = S + nviews;
    for (int b = 0; b < S; b++) {
      rows[b] = rnd(1, 8), cols[b] = rnd(1, 8);
      c.storage[b] = rnd(0, 1) ? -1 : b;
      c.region[b] = dense(rows[b] * cols[b]);
      c.mask[b] = rows[b] * cols[b] == 64 ? ~(uint64_t)0 : ((uint64_t)1 << (rows[b] * cols[b])) - 1;
    }
    for (int v = S; v < c.nv; v++) {
      int b = rnd(0, S - 1);
      c.storage[v] = b;
      rand_view(rows[b], cols[b], &c.region[v], &c.mask[v]);
    }
    tb t = {.nv = c.nv};
    int ns = rnd(2, 12);
    for (int i = 0; i < ns; i++) {
      int r[MAXIO], w[MAXIO], nr = rnd(0, 3), nw = rnd(0, 2);
      for (int k = 0; k < nr; k++) r[k] = rnd(0, c.nv - 1);
      for (int k = 0; k < nw; k++) w[k] = rnd(0, c.nv - 1);
      step(&t, nr, r, nw, w);
    }
    kiln_schedule *s = tb_sched(&t);
    if (!s) {
      st.failed_build++;
      continue;
    }
    /* per-access regions: a ScatterND-like box write, a narrower read */
    for (int i = 0; i < s->n_steps; i++)
      for (int pass = 0; pass < 2; pass++) {
        const kiln_step *sp = &s->steps[i];
        int n = pass ? sp->n_writes : sp->n_reads;
        for (int k = 0; k < n; k++) {
          int v = pass ? sp->writes[k] : sp->reads[k];
          if (rnd(0, pass ? 3 : 7)) continue;
          int b = resolve(&c, v);
          kiln_hazard_access_region *o = &c.ov[c.nov];
          *o = (kiln_hazard_access_region){.step = i, .value = v, .write = pass == 1};
          rand_view(rows[b], cols[b], &o->region, &c.ovmask[c.nov]);
          c.nov++;
        }
      }
    kiln_hazard_request q = {
        .sched = s, .storage = c.storage, .region = c.region, .access_region = c.ov, .n_access_region = c.nov};
    c.arena = rnd(0, 1);
    if (c.arena) {
      for (int v = 0; v < c.nv; v++) c.off[v] = KILN_MEMPLAN_NONE, c.bytes[v] = 0;
      for (int b = 0; b < S; b++) {
        c.off[b] = rnd(0, 4) ? 64 * rnd(0, 3) : KILN_MEMPLAN_NONE;
        c.bytes[b] = (uint64_t)(64 * rnd(0, 3));
      }
      q.arena_offset = c.off, q.arena_bytes = c.bytes, q.arena_assert = rnd(0, 1);
    }
    kiln_hazards *h = NULL;
    kiln_status rc = kiln_hazard_build(&q, &h);
    if (q.arena_assert) {
      bool broken = bf_broken(&c, s);
      st.asserts += broken;
      if ((rc == KILN_E_INTERNAL) != broken || (rc && h)) {
        st.bad_assert++;
        note(&st, "case %d: assertion %s (%s), brute force says %s", ci, rc ? "failed" : "passed", kiln_last_error(),
             broken ? "broken" : "fine");
      }
    } else if (rc) {
      st.failed_build++;
      note(&st, "case %d: %s", ci, kiln_last_error());
    }
    if (h) verify(&c, s, h, &st);
    kiln_hazards_free(h);
    kiln_schedule_free(s);
  }
  printf(
      "  random regions: %d cases, %ld edges for %ld conflicting access pairs (%ld sharing elements), %d swaps, "
      "%d/%d orders respecting/violating, %d broken arenas\n",
      CASES, st.edges, st.conflicting_pairs, st.real_overlaps, st.swaps, st.perms_ok, st.perms_bad, st.asserts);
  if (st.msg[0]) printf("  first problem: %s\n", st.msg);
  CHECK(st.failed_build == 0, "%d builds failed", st.failed_build);
  CHECK(st.bad_edges == 0, "%d edges not justified by brute force", st.bad_edges);
  CHECK(st.unordered == 0, "%d conflicting pairs not ordered by the closure", st.unordered);
  CHECK(st.unsound_region == 0, "%d pairs sharing elements with regions that may not overlap", st.unsound_region);
  CHECK(st.bad_assert == 0, "%d arena assertions disagree with brute force", st.bad_assert);
  CHECK(st.bad_identity == 0, "%d schedule orders rejected", st.bad_identity);
  CHECK(st.bad_swap == 0 && st.swaps > CASES, "%d of %d swapped conflicting pairs accepted", st.bad_swap, st.swaps);
  CHECK(st.bad_perm == 0, "%d permutations judged unlike brute force", st.bad_perm);
  CHECK(st.bad_topo == 0, "%d conflict-respecting orders rejected", st.bad_topo);
  CHECK(st.perms_ok > CASES && st.perms_bad > CASES && st.asserts > 100 && st.real_overlaps > CASES,
        "coverage: %d respecting, %d violating orders, %d broken arenas, %ld overlapping pairs", st.perms_ok,
        st.perms_bad, st.asserts, st.real_overlaps);
}

/* Random SSA schedules planned by memplan (views, in place, reuse): the
 * assertion holds for the real plan, fails for a corrupted one, and the
 * closure orders every access pair that shares a storage or arena bytes. */
static void test_random_plans(void) {
  enum { CASES = 2000 };
  stats st = {0};
  static rcase c;
  for (int ci = 0; ci < CASES; ci++) {
    memset(&c, 0, sizeof c);
    st.cases = ci;
    tb t = {0};
    static uint64_t size[MAXV];
    static bool ext[MAXV];
    static int alias[MAXV];
    static kiln_memplan_inplace ip[MAXS * 2];
    int nip = 0, avail[MAXV], na = 0;
    int n_in = rnd(1, 3);
    for (int i = 0; i < n_in; i++) {
      int v = t.nv++;
      size[v] = (uint64_t)rnd(1, 512), ext[v] = true, alias[v] = -1;
      avail[na++] = v;
    }
    int ns = rnd(1, 40);
    for (int i = 0; i < ns && t.nv < MAXV - 4; i++) {
      int r[MAXIO], w[MAXIO], nr = rnd(1, 3), nw = rnd(0, 3) == 0 ? 2 : 1;
      for (int k = 0; k < nr; k++)
        r[k] = avail[na - 1 - (rnd(0, 6) == 0 ? rnd(0, na - 1) : rnd(0, na < 3 ? na - 1 : 2))];
      for (int k = 0; k < nw; k++) {
        int v = t.nv++;
        w[k] = v;
        ext[v] = false, alias[v] = -1;
        size[v] = (uint64_t)rnd(1, 512);
        int kind = rnd(0, 9);
        if (kind == 0) {
          alias[v] = r[0];
        } else if (kind <= 3) {
          int in = r[rnd(0, nr - 1)];
          int root = in;
          while (alias[root] >= 0) root = alias[root];
          if (rnd(0, 1)) size[v] = size[root];
          ip[nip++] = (kiln_memplan_inplace){i, v, in};
        }
      }
      step(&t, nr, r, nw, w);
      for (int k = 0; k < nw; k++) avail[na++] = w[k];
    }
    ext[t.nv - 1] = alias[t.nv - 1] < 0;
    kiln_schedule *s = tb_sched(&t);
    if (!s) {
      st.failed_build++;
      continue;
    }
    kiln_memplan_request mr = {s, size, ext, alias, ip, nip};
    kiln_memplan *p = NULL;
    if (kiln_memplan_build(&mr, &p) != KILN_OK) { /* a request memplan refuses: not ours */
      kiln_schedule_free(s);
      continue;
    }
    st.plans++;
    c.nv = t.nv;
    c.whole = true, c.arena = true;
    if (kiln_hazard_storage_ids(p, alias, c.nv, c.storage) != KILN_OK) {
      st.failed_build++;
      note(&st, "case %d: storage ids: %s", ci, kiln_last_error());
    }
    for (int v = 0; v < c.nv; v++) c.off[v] = p->offset[v], c.bytes[v] = size[v];
    kiln_hazard_request q = {
        .sched = s, .storage = c.storage, .arena_offset = c.off, .arena_bytes = c.bytes, .arena_assert = true};
    kiln_hazards *h = NULL;
    if (kiln_hazard_build(&q, &h) != KILN_OK) {
      st.bad_assert++;
      note(&st, "case %d: a correct plan fails: %s", ci, kiln_last_error());
    } else {
      verify(&c, s, h, &st);
    }
    kiln_hazards_free(h);
    /* corrupt: put a storage over another that is live at the same time */
    int first[MAXV], last[MAXV];
    for (int v = 0; v < c.nv; v++) first[v] = last[v] = -1;
    for (int i = 0; i < s->n_steps; i++)
      for (int k = 0; k < s->steps[i].n_reads + s->steps[i].n_writes; k++) {
        int v = k < s->steps[i].n_reads ? s->steps[i].reads[k] : s->steps[i].writes[k - s->steps[i].n_reads];
        int id = c.storage[v];
        if (first[id] < 0) first[id] = i;
        last[id] = i;
      }
    int a = -1, b = -1;
    for (int x = 0; x < c.nv && a < 0; x++)
      for (int y = x + 1; y < c.nv && a < 0; y++)
        if (first[x] >= 0 && first[y] >= 0 && c.off[x] >= 0 && c.off[y] >= 0 && c.bytes[x] && c.bytes[y] &&
            first[x] <= last[y] && first[y] <= last[x])
          a = x, b = y;
    if (a >= 0) {
      st.corruptions++;
      c.off[b] = c.off[a];
      if (kiln_hazard_build(&q, &h) != KILN_E_INTERNAL || h) {
        st.bad_corruption++;
        note(&st, "case %d: storages %d and %d at one offset, both live, accepted", ci, a, b);
      }
      kiln_hazards_free(h);
      h = NULL;
    }
    kiln_memplan_free(p);
    kiln_schedule_free(s);
  }
  printf("  random plans: %d planned of %d, %ld edges for %ld conflicting access pairs, %d corrupted plans\n", st.plans,
         CASES, st.edges, st.conflicting_pairs, st.corruptions);
  if (st.msg[0]) printf("  first problem: %s\n", st.msg);
  CHECK(st.plans > CASES * 9 / 10, "only %d of %d plans built", st.plans, CASES);
  CHECK(st.failed_build == 0, "%d builds failed", st.failed_build);
  CHECK(st.bad_assert == 0, "%d correct plans failed the assertion", st.bad_assert);
  CHECK(st.bad_edges == 0, "%d edges not justified by brute force", st.bad_edges);
  CHECK(st.unordered == 0, "%d conflicting pairs not ordered by the closure", st.unordered);
  CHECK(st.bad_identity == 0 && st.bad_swap == 0 && st.bad_perm == 0 && st.bad_topo == 0,
        "orders: %d identity, %d swaps, %d permutations, %d respecting orders judged wrongly", st.bad_identity,
        st.bad_swap, st.bad_perm, st.bad_topo);
  CHECK(st.corruptions > CASES / 2 && st.bad_corruption == 0, "%d of %d corrupted plans accepted", st.bad_corruption,
        st.corruptions);
}

int main(void) {
  test_kinds();
  test_nearest();
  test_same_step();
  test_scatter_war();
  test_disjoint();
  test_views_of_views();
  test_arena();
  test_errors();
  test_memplan_inplace();
  test_long_chain();
  test_random_regions();
  test_random_plans();
  printf("unit_hazard: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
