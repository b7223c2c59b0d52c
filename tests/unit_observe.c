/* tests/unit_observe: ir/observe — folding tensors (dense, strided, every
 * numeric type, NaN and infinities) against exact min/max, partial merges,
 * histogram widening (counts kept, edges monotone, old bins whole in new
 * ones), quantization parameters on hand-computed cases, L2/KL ranges on a
 * long-tailed histogram, the writers' exact lines, dump-file naming and
 * periodic dumps, the reference interpreter's hook, and the map from a
 * rewritten graph (examples/cnn.onnx with BatchNorm folded) back to the
 * graph as given. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/observe.h"
#include "ir/onnx_import.h"
#include "ir/rewrite.h"
#include "reference/exec.h"
#include "testutil.h"

static int passed, failed;
#include "tests/check.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static double unif(double lo, double hi) { return lo + (hi - lo) * (double)(next() >> 11) / 9007199254740992.0; }

/* Exact partial by reading every element through kiln_get_f / kiln_get_i. */
static void exact(const kiln_tensor *t, kiln_obs_partial *p) {
  kiln_obs_partial_init(p);
  for (int64_t i = 0; i < t->numel; i++) {
    double v = kiln_dtype_is_int(t->dtype) ? (t->dtype == KILN_U64 ? (double)(uint64_t)kiln_get_i(t, i)
                                                                    : (double)kiln_get_i(t, i))
                                           : kiln_get_f(t, i);
    p->count++;
    if (isnan(v)) {
      p->nan++;
      continue;
    }
    if (v < p->min) p->min = v;
    if (v > p->max) p->max = v;
    if (v == INFINITY) p->pos_inf++;
    if (v == -INFINITY) p->neg_inf++;
  }
}

static bool same_partial(const kiln_obs_partial *a, const kiln_obs_partial *b) {
  return a->min == b->min && a->max == b->max && a->nan == b->nan && a->pos_inf == b->pos_inf &&
         a->neg_inf == b->neg_inf && a->count == b->count;
}

static void fill(kiln_tensor *t, double special_rate) {
  for (int64_t i = 0; i < t->numel; i++) {
    double v = unif(-1000, 1000);
    if (kiln_dtype_is_float(t->dtype) && unif(0, 1) < special_rate) {
      int k = (int)(next() % 3);
      v = k == 0 ? NAN : k == 1 ? INFINITY : -INFINITY;
    }
    if (kiln_dtype_is_int(t->dtype)) {
      if (t->dtype == KILN_I64) kiln_set_i(t, i, (int64_t)(next() >> 1) - (int64_t)(next() >> 2));
      else if (t->dtype == KILN_U64) kiln_set_i(t, i, (int64_t)next());
      else kiln_set_f(t, i, v);
    } else {
      kiln_set_f(t, i, v);
    }
  }
}

static void test_fold_dense(void) {
  const kiln_dtype types[] = {KILN_F32, KILN_F64, KILN_F16, KILN_BF16, KILN_I8, KILN_U8, KILN_I16,
                              KILN_U16, KILN_I32, KILN_U32, KILN_I64, KILN_U64};
  int bad = 0, cases = 0;
  for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++)
    for (int rep = 0; rep < 40; rep++) {
      int64_t n = rep < 20 ? rep : (int64_t)(next() % 3000) + 1;
      kiln_tensor t = {0};
      if (kiln_tensor_alloc(&t, types[ti], 1, &n)) continue;
      fill(&t, rep % 3 == 0 ? 0.0 : rep % 3 == 1 ? 0.01 : 0.5);
      kiln_obs_partial a, b;
      exact(&t, &a);
      kiln_obs_partial_init(&b);
      kiln_obs_partial_fold(&b, &t);
      cases++;
      if (!same_partial(&a, &b)) {
        bad++;
        if (bad < 5)
          printf("  %s n=%lld: fold min %g max %g nan %llu, exact min %g max %g nan %llu\n", kiln_dtype_name(types[ti]),
                 (long long)n, b.min, b.max, (unsigned long long)b.nan, a.min, a.max, (unsigned long long)a.nan);
      }
      /* split in two halves and merged: the same partial */
      if (types[ti] == KILN_F32 && n > 1) {
        kiln_obs_partial l, r;
        kiln_obs_partial_init(&l);
        kiln_obs_partial_init(&r);
        kiln_obs_partial_fold_f32(&l, t.data, n / 2);
        kiln_obs_partial_fold_f32(&r, (float *)t.data + n / 2, n - n / 2);
        kiln_obs_partial_merge(&r, &l);
        if (!same_partial(&a, &r)) bad++;
      }
      kiln_tensor_release(&t);
    }
  CHECK(bad == 0, "fold == exact on %d dense tensors (%d differ)", cases, bad);
  /* all NaN: min/max stay empty, count and NaN count are right */
  int64_t n = 37;
  kiln_tensor t = {0};
  kiln_tensor_alloc(&t, KILN_F32, 1, &n);
  for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = NAN;
  kiln_obs_partial p;
  kiln_obs_partial_init(&p);
  kiln_obs_partial_fold(&p, &t);
  CHECK(p.nan == 37 && p.count == 37 && p.min == INFINITY && p.max == -INFINITY, "all-NaN tensor");
  kiln_tensor_release(&t);
  /* bool is not observed */
  kiln_tensor_alloc(&t, KILN_BOOL, 1, &n);
  kiln_obs_partial_init(&p);
  CHECK(!kiln_obs_partial_fold(&p, &t) && p.count == 0, "bool tensors are not observed");
  kiln_tensor_release(&t);
}

static void test_fold_strided(void) {
  int bad = 0, cases = 0;
  for (int rep = 0; rep < 60; rep++) {
    kiln_dtype dt = rep % 3 == 0 ? KILN_F32 : rep % 3 == 1 ? KILN_F16 : KILN_I32;
    int64_t dims[3] = {(int64_t)(next() % 7) + 1, (int64_t)(next() % 9) + 1, (int64_t)(next() % 33) + 1};
    kiln_tensor base = {0};
    if (kiln_tensor_alloc(&base, dt, 3, dims)) continue;
    fill(&base, 0.05);
    int64_t st[3];
    kiln_strides(3, dims, st);
    kiln_tensor v = {0};
    int kind = rep % 4;
    if (kind == 0) { /* transpose (2,0,1) */
      int64_t vd[3] = {dims[2], dims[0], dims[1]}, vs[3] = {st[2], st[0], st[1]};
      kiln_tensor_view(&v, &base, 3, vd, vs, 0);
    } else if (kind == 1) { /* reversed last axis, every other row */
      int64_t vd[3] = {dims[0], (dims[1] + 1) / 2, dims[2]}, vs[3] = {st[0], 2 * st[1], -1};
      kiln_tensor_view(&v, &base, 3, vd, vs, dims[2] - 1);
    } else if (kind == 2) { /* broadcast (stride 0) over a new axis */
      int64_t vd[4] = {dims[0], 5, dims[1], dims[2]}, vs[4] = {st[0], 0, st[1], st[2]};
      kiln_tensor_view(&v, &base, 4, vd, vs, 0);
    } else { /* a slice with an offset */
      int64_t vd[2] = {dims[1], dims[2] > 1 ? dims[2] - 1 : 1}, vs[2] = {st[1], 1};
      kiln_tensor_view(&v, &base, 2, vd, vs, (dims[0] - 1) * st[0] + (dims[2] > 1 ? 1 : 0));
    }
    kiln_obs_partial a, b;
    exact(&v, &a);
    kiln_obs_partial_init(&b);
    kiln_obs_partial_fold(&b, &v);
    cases++;
    if (!same_partial(&a, &b)) {
      bad++;
      printf("  view kind %d %s: fold [%g, %g] n=%llu, exact [%g, %g] n=%llu\n", kind, kiln_dtype_name(dt), b.min,
             b.max, (unsigned long long)b.count, a.min, a.max, (unsigned long long)a.count);
    }
    kiln_tensor_release(&base);
  }
  CHECK(bad == 0, "fold == exact on %d strided views (%d differ)", cases, bad);
}

/* ---- histograms ---- */

static void test_hist(void) {
  kiln_obs_hist h;
  CHECK(kiln_obs_hist_init(&h, 64) == KILN_OK, "hist init");
  uint64_t added = 0;
  bool edges_ok = true, covered = true, total_ok = true;
  double all_lo = INFINITY, all_hi = -INFINITY;
  double prev_lo = INFINITY, prev_hi = -INFINITY;
  double *vals = NULL;
  size_t nvals = 0;
  for (int rep = 0; rep < 30; rep++) {
    int64_t n = (int64_t)(next() % 500) + 1;
    double c = unif(-50, 50) * (rep + 1), w = unif(0.001, 10) * (rep + 1);
    kiln_tensor t = {0};
    kiln_tensor_alloc(&t, KILN_F32, 1, &n);
    for (int64_t i = 0; i < n; i++) kiln_set_f(&t, i, rep == 0 ? 3.0 : unif(c - w, c + w)); /* rep 0: a point */
    ((float *)t.data)[0] = rep == 5 ? NAN : ((float *)t.data)[0];
    vals = realloc(vals, (nvals + (size_t)n) * sizeof *vals);
    for (int64_t i = 0; i < n; i++) {
      double v = kiln_get_f(&t, i);
      if (!isfinite(v)) continue;
      vals[nvals++] = v;
      added++;
      all_lo = fmin(all_lo, v);
      all_hi = fmax(all_hi, v);
    }
    kiln_obs_hist_add(&h, &t);
    kiln_tensor_release(&t);
    uint64_t sum = 0;
    for (int k = 0; k < h.nbins; k++) sum += h.counts[k];
    total_ok &= sum == added && h.total == added;
    edges_ok &= h.lo <= h.hi && h.lo <= prev_lo && h.hi >= prev_hi;
    covered &= h.lo <= all_lo && h.hi >= all_hi;
    prev_lo = h.lo;
    prev_hi = h.hi;
  }
  CHECK(total_ok, "widening keeps every count");
  CHECK(edges_ok, "the range only widens (monotone edges)");
  CHECK(covered, "the range covers every value seen");
  /* exact rebinning: binning all values once on the final grid gives the
   * same counts, up to values on a bin edge */
  double w = kiln_obs_hist_width(&h);
  uint64_t *brute = calloc((size_t)h.nbins, sizeof *brute);
  size_t near_edge = 0;
  for (size_t i = 0; i < nvals; i++) {
    double q = (vals[i] - h.lo) / w;
    int k = (int)floor(q);
    k = k < 0 ? 0 : k >= h.nbins ? h.nbins - 1 : k;
    brute[k]++;
    if (fabs(q - nearbyint(q)) < 1e-6) near_edge++;
  }
  uint64_t diff = 0;
  for (int k = 0; k < h.nbins; k++) diff += brute[k] > h.counts[k] ? brute[k] - h.counts[k] : h.counts[k] - brute[k];
  CHECK(diff <= 2 * near_edge, "old bins fall whole into new bins: %llu differences, %zu values on edges",
        (unsigned long long)diff, near_edge);
  free(brute);
  free(vals);
  kiln_obs_hist_free(&h);

  /* widening by hand: [0, 4) in 4 bins, then a value at -3 and at 9 */
  kiln_obs_hist_init(&h, 4);
  kiln_obs_hist_widen(&h, 0, 4);
  for (int k = 0; k < 4; k++) h.counts[k] = (uint64_t)(k + 1), h.total += (uint64_t)(k + 1);
  kiln_obs_hist_widen(&h, -3, 9);
  /* a = 3 old bins below, width 3 (f = 3): bins [-3,0) [0,3) [3,6) [6,9);
   * old bins 0,1,2 -> new bin 1, old bin 3 -> new bin 2 */
  CHECK(h.lo == -3 && h.hi == 9 && h.counts[0] == 0 && h.counts[1] == 6 && h.counts[2] == 4 && h.counts[3] == 0,
        "hand widening: lo %g hi %g counts %llu %llu %llu %llu", h.lo, h.hi, (unsigned long long)h.counts[0],
        (unsigned long long)h.counts[1], (unsigned long long)h.counts[2], (unsigned long long)h.counts[3]);
  kiln_obs_hist_free(&h);
}

/* ---- quantization parameters ---- */

static void test_qparams(void) {
  kiln_obs_qparams q;
  kiln_obs_choose_qparams(-1, 3, KILN_OBS_AFFINE_U8, 8, &q);
  CHECK(q.scale == 4.0 / 255 && q.zero_point == 64, "[-1,3] u8: scale 4/255, zero point 64 (63.75 nudged): %g %d",
        q.scale, q.zero_point);
  kiln_obs_choose_qparams(2, 5, KILN_OBS_AFFINE_U8, 8, &q);
  CHECK(q.scale == 5.0 / 255 && q.zero_point == 0, "[2,5] u8: zero included, scale 5/255, zp 0: %g %d", q.scale,
        q.zero_point);
  kiln_obs_choose_qparams(-4, -1, KILN_OBS_AFFINE_U8, 8, &q);
  CHECK(q.scale == 4.0 / 255 && q.zero_point == 255, "[-4,-1] u8: scale 4/255, zp 255: %g %d", q.scale, q.zero_point);
  kiln_obs_choose_qparams(-1.5, 2, KILN_OBS_AFFINE_U8, 8, &q);
  CHECK(q.scale == 3.5 / 255 && q.zero_point == 109, "[-1.5,2] u8: zp 109.29 -> 109: %d", q.zero_point);
  kiln_obs_choose_qparams(0, 0, KILN_OBS_AFFINE_U8, 8, &q);
  CHECK(q.scale == 0.1 && q.zero_point == 0, "[0,0]: scale 0.1, zp 0");
  kiln_obs_choose_qparams(-2, 1, KILN_OBS_SYMMETRIC_I8, 8, &q);
  CHECK(q.scale == 2.0 / 127 && q.zero_point == 0, "[-2,1] int8 symmetric: scale 2/127, zp 0: %g", q.scale);
  kiln_obs_choose_qparams(0.5, 6.35, KILN_OBS_SYMMETRIC_I8, 8, &q);
  CHECK(q.scale == 6.35 / 127 && q.zero_point == 0, "[0.5,6.35] int8 symmetric: scale 0.05");

  /* long tail: 200000 values in [-1, 1], 20 outliers near 50 */
  kiln_obs_hist h;
  kiln_obs_hist_init(&h, 2048);
  int64_t n = 200020;
  kiln_tensor t = {0};
  kiln_tensor_alloc(&t, KILN_F32, 1, &n);
  for (int64_t i = 0; i < n; i++) {
    double v = i < 200000 ? (unif(-1, 1) + unif(-1, 1)) / 2 : unif(49, 50);
    ((float *)t.data)[i] = (float)v;
  }
  kiln_obs_hist_add(&h, &t);
  kiln_tensor_release(&t);
  double lo, hi;
  /* L2 keeps a few far outliers (clipping 20 values by 48 costs more than
   * the coarser step over 200000); KL drops them */
  CHECK(kiln_obs_hist_l2_range(&h, 8, &lo, &hi) && lo < -0.5 && hi > 0.5, "L2 range [%g, %g] of [%g, %g]", lo, hi,
        h.lo, h.hi);
  CHECK(kiln_obs_hist_kl_range(&h, 8, &lo, &hi) && hi < 25 && lo < -0.5 && hi > 0.5,
        "KL clips the outliers: [%g, %g] of [%g, %g]", lo, hi, h.lo, h.hi);
  kiln_obs_hist_free(&h);
  /* a long exponential tail (Laplace, b = 1, 10^6 values: the extremes
   * near ±14): the L2 optimum for 8 bits is near ±10 (Banner et al.), KL
   * clips more */
  kiln_obs_hist_init(&h, 2048);
  n = 1000000;
  kiln_tensor_alloc(&t, KILN_F32, 1, &n);
  for (int64_t i = 0; i < n; i++) {
    double v = -log(unif(1e-300, 1));
    ((float *)t.data)[i] = (float)(next() & 1 ? v : -v);
  }
  kiln_obs_hist_add(&h, &t);
  kiln_tensor_release(&t);
  CHECK(kiln_obs_hist_l2_range(&h, 8, &lo, &hi) && hi - lo < 0.9 * (h.hi - h.lo) && lo < -5 && hi > 5,
        "L2 clips the long tail: [%g, %g] of [%g, %g]", lo, hi, h.lo, h.hi);
  CHECK(kiln_obs_hist_kl_range(&h, 8, &lo, &hi) && hi - lo < 0.9 * (h.hi - h.lo) && lo < -2 && hi > 2,
        "KL clips the long tail: [%g, %g] of [%g, %g]", lo, hi, h.lo, h.hi);
  printf("  Laplace 10^6: full [%g, %g]", h.lo, h.hi);
  kiln_obs_hist_l2_range(&h, 8, &lo, &hi);
  printf(", L2 [%g, %g]", lo, hi);
  kiln_obs_hist_kl_range(&h, 8, &lo, &hi);
  printf(", KL [%g, %g]\n", lo, hi);
  kiln_obs_hist_free(&h);
  /* no tail: L2 keeps (nearly) the full range */
  kiln_obs_hist_init(&h, 256);
  n = 100000;
  kiln_tensor_alloc(&t, KILN_F32, 1, &n);
  for (int64_t i = 0; i < n; i++) ((float *)t.data)[i] = (float)unif(-1, 1);
  kiln_obs_hist_add(&h, &t);
  kiln_tensor_release(&t);
  CHECK(kiln_obs_hist_l2_range(&h, 8, &lo, &hi) && lo < -0.9 && hi > 0.9, "uniform: L2 keeps the range: [%g, %g]", lo,
        hi);
  kiln_obs_hist_free(&h);
  kiln_obs_hist_init(&h, 16);
  CHECK(!kiln_obs_hist_l2_range(&h, 8, &lo, &hi), "empty histogram: no range");
  kiln_obs_hist_free(&h);

  /* a record that saw -inf: no finite range, unless a histogram has one */
  kiln_obs_record rec;
  memset(&rec, 0, sizeof rec);
  rec.name = "t";
  kiln_obs_partial_init(&rec.total);
  rec.total.min = -INFINITY;
  rec.total.max = 3;
  CHECK(!kiln_obs_record_range(&rec, KILN_OBS_MINMAX, &lo, &hi) &&
            kiln_obs_record_qparams(&rec, KILN_OBS_MINMAX, KILN_OBS_AFFINE_U8, &q) != KILN_OK,
        "-inf seen, no histogram: no qparams");
  kiln_error_clear();
  kiln_obs_hist_init(&rec.hist, 8);
  kiln_obs_hist_widen(&rec.hist, -1, 3);
  rec.hist.counts[0] = rec.hist.counts[7] = 1000; /* mass at both ends */
  rec.hist.total = 2000;
  CHECK(kiln_obs_record_range(&rec, KILN_OBS_MINMAX, &lo, &hi) && lo == -1 && hi == 3,
        "-inf seen: the histogram's finite range [%g, %g]", lo, hi);
  CHECK(kiln_obs_record_qparams(&rec, KILN_OBS_L2, KILN_OBS_AFFINE_U8, &q) == KILN_OK && q.zero_point == 64,
        "L2 with mass at both ends keeps the range: zp %d", q.zero_point);
  kiln_obs_hist_free(&rec.hist);
}

/* ---- the observer on a small graph ---- */

/* x -> Relu -> y -> Neg -> z -> Identity -> w (output); Relu(x) again -> y2 */
static kiln_graph *small_graph(void) {
  kiln_graph *g;
  int x, y, z, w, y2, idx;
  int64_t d = 3;
  if (kiln_edit_new_graph(17, &g)) return NULL;
  kiln_edit_add_input(g, "x", KILN_F32, 1, &d, &x);
  kiln_edit_add_value(g, "y", &y);
  kiln_edit_add_value(g, "z", &z);
  kiln_edit_add_value(g, "w", &w);
  kiln_edit_add_value(g, "y2", &y2);
  kiln_edit_insert_node(g, g->n_nodes, "r", "Relu", "", 1, &x, 1, &y, &idx);
  kiln_edit_insert_node(g, g->n_nodes, "n", "Neg", "", 1, &y, 1, &z, &idx);
  kiln_edit_insert_node(g, g->n_nodes, "i", "Identity", "", 1, &z, 1, &w, &idx);
  kiln_edit_insert_node(g, g->n_nodes, "r2", "Relu", "", 1, &x, 1, &y2, &idx);
  kiln_edit_add_output(g, w);
  kiln_edit_add_output(g, y2);
  return g;
}

static char *print_to_string(const kiln_obs *o, int what, kiln_obs_qmethod m, kiln_obs_qscheme s) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (what == 0) kiln_obs_print_minmax(o, f, false);
  else if (what == 1) kiln_obs_print_minmax(o, f, true);
  else if (what == 2) kiln_obs_print_hist(o, f);
  else kiln_obs_print_qparams(o, f, m, s);
  fclose(f);
  return buf;
}

static void wrap(kiln_tensor *t, float *v, int64_t n) { kiln_tensor_wrap(t, KILN_F32, 1, &n, n, v); }

static char *slurp(const char *path) {
  size_t n;
  char *s = tu_read_file(path, &n);
  if (!s) return NULL;
  char *z = realloc(s, n + 1);
  z[n] = 0;
  return z;
}

static void test_writers(void) {
  kiln_graph *g = small_graph();
  CHECK(g != NULL, "small graph");
  if (!g) return;
  kiln_obs *o;
  kiln_obs_options opts = {.nbins = 4};
  CHECK(kiln_obs_new(g, &opts, &o) == KILN_OK && kiln_obs_count(o) == 4, "observer over 4 node outputs");
  CHECK(kiln_obs_slot(o, 0, 0) == 0 && kiln_obs_slot(o, 2, 0) == 2 && kiln_obs_slot(o, 4, 0) == -1 &&
            kiln_obs_slot(o, 0, 1) == -1 && kiln_obs_slot_by_name(o, "z") == 1,
        "slots by node/output and by name");
  float y[3] = {-1.5f, 2.0f, 0.25f}, z[3] = {1.5f, -2.0f, NAN};
  kiln_tensor ty, tz;
  wrap(&ty, y, 3);
  wrap(&tz, z, 3);
  kiln_obs_begin_run(o);
  CHECK(kiln_obs_run_current() == o, "begin_run makes the observer current");
  kiln_obs_tensor(o, kiln_obs_slot(o, 0, 0), &ty);
  kiln_obs_tensor(o, kiln_obs_slot(o, 1, 0), &tz);
  kiln_obs_tensor(o, kiln_obs_slot(o, 1, 0), &tz); /* twice in one run: one run */
  kiln_obs_end_run(o);
  CHECK(kiln_obs_run_current() == NULL, "end_run clears it");
  const kiln_obs_record *rz = kiln_obs_record_at(o, 1);
  CHECK(rz->runs == 1 && rz->total_runs == 1 && rz->cur.nan == 2 && rz->cur.count == 6,
        "a record reported twice in a run counts one run, every element");
  char *s = print_to_string(o, 0, 0, 0);
  CHECK(!strcmp(s, "0 Relu 0 y -1.5 2\n1 Neg 0 z -2 1.5\n"), "minmax lines: '%s'", s);
  free(s);
  s = print_to_string(o, 2, 0, 0);
  CHECK(!strcmp(s, "0 Relu 0 y -1.5 2 4 1 0 1 1\n1 Neg 0 z -2 1.5 4 2 0 0 2\n"), "histogram lines: '%s'", s);
  free(s);
  s = print_to_string(o, 3, KILN_OBS_MINMAX, KILN_OBS_AFFINE_U8);
  CHECK(!strcmp(s, "0 Relu 0 y -1.5 2 0.013725490196078431 109 8\n1 Neg 0 z -2 1.5 0.013725490196078431 146 8\n"),
        "qparams lines: '%s'", s);
  free(s);
  s = print_to_string(o, 3, KILN_OBS_MINMAX, KILN_OBS_SYMMETRIC_I8);
  CHECK(!strcmp(s, "0 Relu 0 y -1.5 2 0.015748031496062992 0 8\n1 Neg 0 z -2 1.5 0.015748031496062992 0 8\n"),
        "symmetric qparams lines: '%s'", s);
  free(s);
  /* summary path + reset */
  kiln_obs_reset(o);
  s = print_to_string(o, 0, 0, 0);
  CHECK(!strcmp(s, ""), "after a reset nothing since the reset: '%s'", s);
  free(s);
  kiln_obs_begin_run(o);
  kiln_obs_partial p;
  kiln_obs_partial_init(&p);
  p.min = -7;
  p.max = 0.5;
  p.count = 10;
  kiln_obs_summary(o, 0, &p);
  kiln_obs_end_run(o);
  s = print_to_string(o, 0, 0, 0);
  CHECK(!strcmp(s, "0 Relu 0 y -7 0.5\n"), "summary path: '%s'", s);
  free(s);
  s = print_to_string(o, 1, 0, 0);
  CHECK(!strcmp(s, "0 Relu 0 y -7 2\n1 Neg 0 z -2 1.5\n"), "totals: '%s'", s);
  free(s);
  CHECK(kiln_obs_record_at(o, 0)->hist_missed == 1, "a summary with histograms on is counted as missed");
  kiln_obs_free(o);

  /* delimiter */
  opts = (kiln_obs_options){.delim = ','};
  kiln_obs_new(g, &opts, &o);
  kiln_obs_tensor(o, 0, &ty);
  s = print_to_string(o, 0, 0, 0);
  CHECK(!strcmp(s, "0,Relu,0,y,-1.5,2\n"), "delimiter ',': '%s'", s);
  free(s);
  kiln_obs_free(o);
  kiln_graph_free(g);
}

static void test_files(void) {
  char buf[256];
  CHECK(!strcmp(kiln_obs_dump_name("out/mm.txt", 3, buf, sizeof buf), "out/mm_3.txt"), "dump name: %s", buf);
  CHECK(!strcmp(kiln_obs_dump_name("a.b/file", 12, buf, sizeof buf), "a.b/file_12"), "dump name: %s", buf);
  CHECK(!strcmp(kiln_obs_dump_name("ranges", 1, buf, sizeof buf), "ranges_1"), "dump name: %s", buf);
  CHECK(!strcmp(kiln_obs_file_name("x/r.v1.log", "hist", buf, sizeof buf), "x/r.v1_hist.log"), "file name: %s", buf);
  CHECK(kiln_obs_dump_name("ranges.txt", 1, buf, 8) == NULL, "too small a buffer");

  char dir[] = "/tmp/kiln_obs_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "temp dir");
  kiln_graph *g = small_graph();
  char file[300];
  snprintf(file, sizeof file, "%s/mm.txt", dir);
  kiln_obs_options opts = {.dump_freq = 2, .dump_file = file};
  kiln_obs *o;
  kiln_obs_new(g, &opts, &o);
  for (int run = 1; run <= 5; run++) {
    float y[2] = {(float)-run, (float)run};
    kiln_tensor t;
    wrap(&t, y, 2);
    kiln_obs_begin_run(o);
    kiln_obs_tensor(o, 0, &t);
    CHECK(kiln_obs_end_run(o) == KILN_OK, "end_run %d", run);
  }
  char path[320];
  snprintf(path, sizeof path, "%s/mm_1.txt", dir);
  char *s = slurp(path);
  CHECK(s && !strcmp(s, "0 Relu 0 y -2 2\n"), "mm_1.txt after runs 1-2: '%s'", s ? s : "(missing)");
  free(s);
  snprintf(path, sizeof path, "%s/mm_2.txt", dir);
  s = slurp(path);
  CHECK(s && !strcmp(s, "0 Relu 0 y -4 4\n"), "mm_2.txt: runs 3-4 only (reset): '%s'", s ? s : "(missing)");
  free(s);
  snprintf(path, sizeof path, "%s/mm_3.txt", dir);
  CHECK(access(path, F_OK) != 0, "no third dump after 5 runs");
  CHECK(kiln_obs_write_minmax(o, file, true) == KILN_OK, "totals");
  s = slurp(file);
  CHECK(s && !strcmp(s, "0 Relu 0 y -5 5\n"), "totals file: '%s'", s ? s : "(missing)");
  free(s);
  CHECK(kiln_obs_write_qparams(o, "/nonexistent-dir/q.txt", KILN_OBS_L2, KILN_OBS_AFFINE_U8) != KILN_OK &&
            strstr(kiln_last_error(), "/nonexistent-dir/q.txt"),
        "an unwritable file is an error naming it");
  kiln_error_clear();
  kiln_obs_free(o);
  kiln_graph_free(g);
  /* no temporaries left behind */
  char cmd[400];
  snprintf(cmd, sizeof cmd, "ls %s | grep -c tmp > /dev/null", dir);
  CHECK(system(cmd) != 0, "no temporary files left");
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) printf("  (could not remove %s)\n", dir);
}

/* ---- the reference interpreter's hook and the map of a rewritten graph ---- */

static void source_path(char *buf, size_t size, const char *rel) {
  const char *root = getenv("KILN_SOURCE_DIR");
  if (root) {
    snprintf(buf, size, "%s/%s", root, rel);
    return;
  }
  const char *f = __FILE__, *t = strstr(f, "tests/unit_observe.c");
  snprintf(buf, size, "%.*s%s", t ? (int)(t - f) : 0, f, rel);
}

static void test_reference_and_map(void) {
  char path[1024];
  source_path(path, sizeof path, "examples/cnn.onnx");
  size_t n;
  void *bytes = tu_read_file(path, &n);
  kiln_graph *g = NULL;
  CHECK(bytes && kiln_onnx_import(bytes, n, &g) == KILN_OK, "import %s", path);
  free(bytes);
  if (!g) return;
  source_path(path, sizeof path, "examples/cnn/test_data_set_0/input_0.pb");
  bytes = tu_read_file(path, &n);
  kiln_tensor in = {0};
  CHECK(bytes && kiln_tensor_parse(bytes, n, &in, NULL) == KILN_OK, "input");
  free(bytes);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  bound[g->inputs[0]] = &in;
  kiln_obs *o;
  kiln_obs_new(g, NULL, &o);
  kiln_tensor out = {0};
  kiln_obs_begin_run(o);
  CHECK(kiln_ref_run(g, bound, &out) == KILN_OK, "reference run, observed through the run's current observer");
  kiln_obs_end_run(o);
  kiln_tensor_release(&out);
  int seen = 0;
  for (int i = 0; i < kiln_obs_count(o); i++) seen += kiln_obs_record_at(o, i)->total_runs == 1;
  CHECK(seen == g->n_nodes && seen == kiln_obs_count(o), "every node output recorded once: %d of %d", seen,
        kiln_obs_count(o));
  /* the softmax output lies in (0, 1] */
  const kiln_obs_record *last = kiln_obs_record_at(o, kiln_obs_count(o) - 1);
  CHECK(!strcmp(last->op_type, "Softmax") && last->total.min > 0 && last->total.max <= 1, "Softmax range [%g, %g]",
        last->total.min, last->total.max);
  /* an observer of another graph is not fed */
  kiln_graph *g2 = small_graph();
  kiln_obs *o2;
  kiln_obs_new(g2, NULL, &o2);
  kiln_obs_begin_run(o2);
  kiln_ref_run(g, bound, &out);
  kiln_obs_end_run(o2);
  kiln_tensor_release(&out);
  CHECK(kiln_obs_record_at(o2, 0)->total_runs == 0, "a run of another graph does not feed the observer");
  kiln_obs_free(o2);
  kiln_graph_free(g2);

  /* BatchNorm folded into Conv: the Conv outputs are folded into the BN outputs */
  kiln_graph *rw = NULL;
  kiln_rewrite_stats st;
  CHECK(kiln_rewrite_run(g, NULL, &rw, &st) == KILN_OK && st.bn_conv == 2, "rewrite folds 2 BNs");
  int *map = kiln_calloc((size_t)rw->n_values + 1, sizeof *map);
  CHECK(kiln_obs_map_graph(o, rw, map) == KILN_OK, "map_graph");
  int folded = 0, bad = 0;
  for (int i = 0; i < kiln_obs_count(o); i++) {
    const kiln_obs_record *r = kiln_obs_record_at(o, i);
    if (!strcmp(r->op_type, "Conv")) {
      const kiln_obs_record *into = kiln_obs_record_at(o, r->folded_into);
      if (into && !strcmp(into->op_type, "BatchNormalization") && into->node == r->node + 1) folded++;
      else bad++;
    } else if (r->folded_into >= 0 || r->erased) {
      bad++;
    }
  }
  CHECK(folded == 2 && bad == 0, "2 Conv outputs folded into their BN outputs (%d folded, %d wrong)", folded, bad);
  int mapped = 0;
  for (int v = 0; v < rw->n_values; v++) mapped += map[v] >= 0;
  CHECK(mapped == kiln_obs_count(o) - 2, "every other node output maps to an executed value: %d", mapped);
  kiln_graph_free(rw);
  /* keep_outputs: nothing rewritten */
  kiln_rewrite_opts ro = {.keep_outputs = true};
  CHECK(kiln_rewrite_run(g, &ro, &rw, &st) == KILN_OK && st.bn_conv == 0 && rw->n_nodes == g->n_nodes,
        "keep_outputs runs no erasing pass");
  kiln_free(map);
  map = kiln_calloc((size_t)rw->n_values + 1, sizeof *map);
  kiln_obs_map_graph(o, rw, map);
  bad = 0;
  for (int i = 0; i < kiln_obs_count(o); i++) bad += kiln_obs_record_at(o, i)->folded_into >= 0;
  CHECK(bad == 0, "with keep_outputs no record is folded");
  kiln_graph_free(rw);
  kiln_free(map);

  /* Identity and CSE on the small graph: exec keeps x, y, z, and y2's
   * twin is merged into y; w (Identity) into z */
  kiln_graph *s = small_graph();
  kiln_obs *os;
  kiln_obs_new(s, NULL, &os);
  kiln_graph *ex = NULL;
  int vx, vy, vz, idx;
  int64_t d = 3;
  kiln_edit_new_graph(17, &ex);
  kiln_edit_add_input(ex, "x", KILN_F32, 1, &d, &vx);
  kiln_edit_add_value(ex, "y", &vy);
  kiln_edit_add_value(ex, "z", &vz);
  kiln_edit_insert_node(ex, 0, "r", "Relu", "", 1, &vx, 1, &vy, &idx);
  kiln_edit_insert_node(ex, 1, "n", "Neg", "", 1, &vy, 1, &vz, &idx);
  int map2[8];
  kiln_obs_map_graph(os, ex, map2);
  const kiln_obs_record *rw_ = kiln_obs_record_at(os, kiln_obs_slot_by_name(os, "w"));
  const kiln_obs_record *ry2 = kiln_obs_record_at(os, kiln_obs_slot_by_name(os, "y2"));
  CHECK(rw_->folded_into == kiln_obs_slot_by_name(os, "z"), "Identity output folded into its input");
  CHECK(ry2->folded_into == kiln_obs_slot_by_name(os, "y"), "CSE twin folded into the equal node's output");
  CHECK(map2[vy] == kiln_obs_slot_by_name(os, "y") && map2[vx] == -1, "exec values map by name");
  kiln_graph_free(ex);
  kiln_obs_free(os);
  kiln_graph_free(s);

  kiln_obs_free(o);
  kiln_free(bound);
  kiln_tensor_release(&in);
  kiln_graph_free(g);
}

int main(void) {
  test_fold_dense();
  test_fold_strided();
  test_hist();
  test_qparams();
  test_writers();
  test_files();
  test_reference_and_map();
  printf("unit_observe: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
