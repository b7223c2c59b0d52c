/* tests/observe_abi: observers through the real ONNXIFI path (the plugin
 * loaded with Debian's onnxifi_loader, the extension functions of
 * include/kiln/kiln_ext.h), on the backend KILN_DEVICE selects. For the
 * bench CNN (examples/cnn.onnx) and three views-suite graphs, with and
 * without KILN_OBSERVE_ALL, with and without histograms, three runs on
 * different inputs (the data set's, ×1.5, ×-0.5 for float inputs); every
 * record is compared
 *  - exactly with the min/max (NaN/±inf and element counts, runs) of the
 *    backend's own tensors: the model with every still-existing observed
 *    tensor made a graph output, run on the same backend with the same
 *    inputs (see check_model);
 *  - within the output tolerance with the reference interpreter's tensors,
 *    computed in this process.
 * Also: records folded by rewrites, dumps every 2 runs, totals and
 * histograms at stop, qparams files, stop/resume and the status codes.
 *
 *   observe_abi PATH/libonnxifi-kiln.so
 *
 * Prints "FAIL ..." lines and "observe_abi: N passed, N failed". */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/kiln/kiln_ext.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/onnx_import.h"
#include "onnx/onnx.pb-c.h"
#include "reference/exec.h"
#include "tests/testutil.h"

static int passed, failed;
#include "tests/check.h"

static struct onnxifi_library lib;
static onnxBackend backend;
static kilnStartObservingFunction start_obs;
static kilnStopObservingFunction stop_obs;
static kilnGetObservedRangesFunction get_ranges;
static kilnDumpObservedRangesFunction dump_ranges;
static kilnWriteObservedHistogramsFunction write_hist;
static kilnWriteQuantizationParamsFunction write_qparams;
static kilnGetLastErrorMessageFunction last_error;

static void source_path(char *buf, size_t size, const char *rel) {
  const char *root = getenv("KILN_SOURCE_DIR");
  if (root) {
    snprintf(buf, size, "%s/%s", root, rel);
    return;
  }
  const char *f = __FILE__, *t = strstr(f, "tests/observe_abi.c");
  snprintf(buf, size, "%.*s%s", t ? (int)(t - f) : 0, f, rel);
}

/* Exact since-reset and total partials per original value, by name. */
typedef struct expect {
  double min, max, tmin, tmax;
  uint64_t nan, tnan, pinf, ninf, n, tn;
  int runs, truns;
  bool observable;
} expect;

static void exp_reset(expect *e, int nv) {
  for (int v = 0; v < nv; v++) {
    e[v].min = INFINITY;
    e[v].max = -INFINITY;
    e[v].nan = e[v].n = e[v].pinf = e[v].ninf = 0;
    e[v].runs = 0;
  }
}

static void exp_add(expect *e, const kiln_tensor *t) {
  if (!kiln_dtype_is_float(t->dtype) && !kiln_dtype_is_int(t->dtype)) return;
  e->observable = true;
  e->runs++;
  e->truns++;
  for (int64_t i = 0; i < t->numel; i++) {
    double v = kiln_dtype_is_int(t->dtype) ? (double)kiln_get_i(t, i) : kiln_get_f(t, i);
    e->n++;
    e->tn++;
    if (isnan(v)) {
      e->nan++;
      e->tnan++;
      continue;
    }
    if (v == INFINITY) e->pinf++;
    if (v == -INFINITY) e->ninf++;
    e->min = fmin(e->min, v);
    e->max = fmax(e->max, v);
    e->tmin = fmin(e->tmin, v);
    e->tmax = fmax(e->tmax, v);
  }
}

#define MAX_IO 512

static onnxStatus run_abi(onnxGraph graph, const kiln_graph *g, kiln_tensor *ins, const int *in_val, int nin,
                          kiln_tensor *outs) {
  static onnxTensorDescriptorV1 din[MAX_IO], dout[MAX_IO];
  static uint64_t shp[2 * MAX_IO][KILN_MAX_RANK];
  if (nin > MAX_IO || g->n_outputs > MAX_IO) return ONNXIFI_STATUS_UNSUPPORTED_SHAPE;
  for (int k = 0; k < nin + g->n_outputs; k++) {
    bool is_in = k < nin;
    kiln_tensor *t = is_in ? &ins[k] : &outs[k - nin];
    int v = is_in ? in_val[k] : g->outputs[k - nin];
    for (int d = 0; d < t->rank; d++) shp[k][d] = (uint64_t)t->dims[d];
    onnxTensorDescriptorV1 desc = {ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, g->values[v].name, (onnxEnum)t->dtype,
                                   ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)t->rank, shp[k], (onnxPointer)(uintptr_t)t->data};
    if (is_in) din[k] = desc;
    else dout[k - nin] = desc;
  }
  onnxStatus st = lib.onnxSetGraphIO(graph, (uint32_t)nin, din, (uint32_t)g->n_outputs, dout);
  if (st) return st;
  onnxEvent in_ev;
  if ((st = lib.onnxInitEvent(backend, &in_ev))) return st;
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {in_ev}};
  onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  st = lib.onnxRunGraph(graph, &fin, &fout);
  onnxStatus sst = lib.onnxSignalEvent(in_ev);
  if (!st) st = sst;
  if (!st) st = lib.onnxWaitEvent(fout.event);
  if (fout.event) lib.onnxReleaseEvent(fout.event);
  lib.onnxReleaseEvent(in_ev);
  return st;
}

static int count_lines(const char *path, int fields_per_line, bool *fields_ok) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  char line[1 << 16];
  int n = 0;
  *fields_ok = true;
  while (fgets(line, sizeof line, f)) {
    int fields = 0;
    for (char *tok = strtok(line, " \n"); tok; tok = strtok(NULL, " \n")) fields++;
    if (fields_per_line > 0 && fields != fields_per_line) *fields_ok = false;
    n++;
  }
  fclose(f);
  return n;
}

/* The files print a float value (a float tensor's min or max) with the
 * fewest digits that read back to that float, others to that double. */
static bool reads_back(const char *text, double v) {
  if ((double)(float)v == v && strtof(text, NULL) == (float)v) return true;
  return strtod(text, NULL) == v;
}

/* The model's bytes with the values add[] marks added to graph.output,
 * typed as t[v] (the reference interpreter's tensors). malloc'd; NULL on
 * failure. */
typedef struct xtype {
  Onnx__TypeProto tp;
  Onnx__TypeProto__Tensor tt;
  Onnx__TensorShapeProto sh;
  Onnx__TensorShapeProto__Dimension d[KILN_MAX_RANK], *dp[KILN_MAX_RANK];
} xtype;

static void *expose(const void *bytes, size_t size, const kiln_graph *g, const bool *add, const kiln_tensor *t,
                    size_t *out_size) {
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, size, bytes);
  if (!mp || !mp->graph) return NULL;
  Onnx__GraphProto *gp = mp->graph;
  size_t n_add = 0;
  for (int v = 0; v < g->n_values; v++) n_add += add[v] && !g->values[v].is_output;
  Onnx__ValueInfoProto **outs = calloc(gp->n_output + n_add + 1, sizeof *outs);
  Onnx__ValueInfoProto *vi = calloc(n_add + 1, sizeof *vi);
  xtype *xt = calloc(n_add + 1, sizeof *xt);
  size_t k = gp->n_output;
  memcpy(outs, gp->output, gp->n_output * sizeof *outs);
  for (int v = 0, j = 0; v < g->n_values; v++) {
    if (!add[v] || g->values[v].is_output) continue;
    vi[j] = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
    vi[j].name = g->values[v].name;
    xtype *x = &xt[j];
    x->tp = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
    x->tt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
    x->sh = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
    x->tp.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    x->tp.tensor_type = &x->tt;
    x->tt.has_elem_type = 1;
    x->tt.elem_type = (int32_t)t[v].dtype;
    x->tt.shape = &x->sh;
    for (int d = 0; d < t[v].rank; d++) {
      x->d[d] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
      x->d[d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      x->d[d].dim_value = t[v].dims[d];
      x->dp[d] = &x->d[d];
    }
    x->sh.n_dim = (size_t)t[v].rank;
    x->sh.dim = x->dp;
    vi[j].type = &x->tp;
    outs[k++] = &vi[j++];
  }
  Onnx__ValueInfoProto **old = gp->output;
  size_t old_n = gp->n_output;
  gp->output = outs;
  gp->n_output = k;
  *out_size = onnx__model_proto__get_packed_size(mp);
  void *buf = malloc(*out_size + 1);
  if (buf) onnx__model_proto__pack(mp, buf);
  gp->output = old;
  gp->n_output = old_n;
  free(outs);
  free(vi);
  free(xt);
  onnx__model_proto__free_unpacked(mp, NULL);
  return buf;
}

/* Two ranges agree within the output tolerance (rtol 1e-4, atol 1e-5,
 * scaled by the tensor's magnitude: intermediates are compared as the
 * outputs are). */
static bool close_to(double a, double b, double scale) {
  if (a == b) return true;
  if (isnan(a) || isnan(b) || isinf(a) || isinf(b)) return false;
  return fabs(a - b) <= 1e-5 + 1e-4 * scale;
}

static const double scale_of_run[3] = {1.0, 1.5, -0.5};

/* Whether run 1's float inputs carry NaN and ±inf (not with histograms,
 * whose bins need finite ranges). */
static bool nonfinite_run1;

/* The three runs' inputs (the data set's, ×1.5, ×-0.5 for float inputs);
 * with nonfinite_run1, run 1 also has NaN, +inf and -inf scattered through
 * each float input (so the totals count them: the reductions' NaN/inf paths
 * at every position of their chunks and vectors). */
static void make_inputs(kiln_tensor *ins, const kiln_tensor *base, int nin, int run) {
  for (int i = 0; i < nin; i++)
    if (kiln_dtype_is_float(base[i].dtype))
      for (int64_t j = 0; j < base[i].numel; j++) {
        double x = kiln_get_f(&base[i], j) * scale_of_run[run];
        if (run == 1 && nonfinite_run1)
          x = j % 29 == 3 ? NAN : j % 31 == 5 ? INFINITY : j % 37 == 7 ? -INFINITY : x;
        kiln_set_f(&ins[i], j, x);
      }
}

/* One model: dir holds model.onnx (or is the .onnx's stem) and
 * test_data_set_0. Observes three runs on the backend under test, then
 * checks every record:
 *  - exactly against this backend's own tensors: the same model with every
 *    still-existing observed tensor (records not folded or erased) made a
 *    graph output, run on the same backend (through the ABI, the same three
 *    inputs). Exposing those tensors keeps the rewrites (a folded Conv
 *    output is not exposed, so BatchNorm still folds) and the fused groups'
 *    arithmetic (a fused value that becomes a graph output is stored by the
 *    same tile/kernel expression). With observe all, the exposing graph is
 *    observed with KILN_OBSERVE_ALL too, so that it is compiled with the
 *    same rewrite options (no constant folding either).
 *  - within the output tolerance against the reference interpreter run in
 *    this process (every node output exposed);
 *  - records a rewrite erased: listed as folded into an existing record or
 *    erased, with nothing recorded. */
static void check_model(const char *model_rel, const char *data_rel, bool observe_all, int nbins, const char *tmp) {
  char path[1024], what[256], sfx[32];
  snprintf(sfx, sizeof sfx, "%s%s", observe_all ? "_all" : "", nbins ? "_h" : "");
  snprintf(what, sizeof what, "%s%s%s", model_rel, observe_all ? " (observe all)" : "", nbins ? " (histograms)" : "");
  nonfinite_run1 = nbins == 0;
  source_path(path, sizeof path, model_rel);
  size_t size;
  void *bytes = tu_read_file(path, &size);
  kiln_graph *g = NULL;
  CHECK(bytes && kiln_onnx_import(bytes, size, &g) == KILN_OK, "%s: import", what);
  if (!g) {
    free(bytes);
    return;
  }
  int nv = g->n_values;
  /* inputs and expected-output shapes from the data set */
  kiln_tensor ins[16] = {{0}}, base[16] = {{0}}, outs[MAX_IO] = {{0}};
  kiln_tensor *refs[3] = {NULL, NULL, NULL}; /* per run, per value: the reference interpreter's tensor */
  int in_val[16], nin = 0;
  onnxGraph graph = NULL, xgraph = NULL;
  kiln_graph *all = NULL, *xg = NULL;
  void *xbytes = NULL;
  kilnObservedRange *r = NULL;
  expect *ex = NULL, *own = NULL;
  bool *add = NULL;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    if (g->values[v].init) continue;
    snprintf(path, sizeof path, "%s/input_%d.pb", data_rel, nin);
    char full[1200];
    source_path(full, sizeof full, path);
    size_t n;
    void *b = tu_read_file(full, &n);
    CHECK(b && kiln_tensor_parse(b, n, &base[nin], NULL) == KILN_OK, "%s: read %s", what, full);
    free(b);
    kiln_tensor_copy(&ins[nin], &base[nin]);
    in_val[nin++] = v;
  }
  /* the reference interpreter in this process: every node output exposed */
  kiln_edit_clone(g, &all);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) {
      int v = g->nodes[i].out[k];
      if (v >= 0 && !all->values[v].is_output) kiln_edit_add_output(all, v);
    }
  ex = kiln_calloc((size_t)nv, sizeof *ex);
  own = kiln_calloc((size_t)nv, sizeof *own);
  for (int v = 0; v < nv; v++) ex[v].tmin = own[v].tmin = INFINITY, ex[v].tmax = own[v].tmax = -INFINITY;
  exp_reset(ex, nv);
  exp_reset(own, nv);
  for (int run = 0; run < 3; run++) {
    make_inputs(ins, base, nin, run);
    refs[run] = kiln_calloc((size_t)nv, sizeof *refs[run]);
    const kiln_tensor **bound = kiln_calloc((size_t)all->n_values, sizeof *bound);
    kiln_tensor *res = kiln_calloc((size_t)all->n_outputs, sizeof *res);
    for (int i = 0; i < nin; i++) bound[in_val[i]] = &ins[i];
    kiln_status ks = kiln_ref_run(all, bound, res);
    CHECK(ks == KILN_OK, "%s: in-process reference run: %s", what, kiln_last_error());
    if (run == 2) exp_reset(ex, nv); /* the dump after run 2 (dump frequency 2) reset the ranges */
    for (int o = 0; !ks && o < all->n_outputs; o++) {
      int v = all->outputs[o];
      if (all->values[v].producer >= 0) exp_add(&ex[v], &res[o]);
      refs[run][v] = res[o];
    }
    kiln_free(res);
    kiln_free(bound);
  }

  /* the observed runs on the backend under test */
  onnxStatus st = lib.onnxInitGraph(backend, NULL, size, bytes, 0, NULL, &graph);
  const char *msg = "";
  if (st) last_error(&msg);
  CHECK(st == ONNXIFI_STATUS_SUCCESS, "%s: onnxInitGraph: %d %s", what, (int)st, msg);
  if (st) goto out;
  char dump[512];
  snprintf(dump, sizeof dump, "%s/ranges%s.txt", tmp, sfx);
  kilnObserverOptions opts = {sizeof opts, observe_all ? KILN_OBSERVE_ALL : 0, (uint32_t)nbins, 2, dump, 0};
  CHECK(start_obs(graph, &opts) == ONNXIFI_STATUS_SUCCESS, "%s: start", what);
  for (int o = 0; o < g->n_outputs; o++) {
    const kiln_tensor *t = &refs[0][g->outputs[o]];
    kiln_tensor_alloc(&outs[o], t->dtype, t->rank, t->dims);
  }
  for (int run = 0; run < 3; run++) {
    make_inputs(ins, base, nin, run);
    st = run_abi(graph, g, ins, in_val, nin, outs);
    if (st) last_error(&msg);
    CHECK(st == ONNXIFI_STATUS_SUCCESS, "%s: run %d: %d %s", what, run, (int)st, st ? msg : "");
  }
  for (int o = 0; o < g->n_outputs; o++) kiln_tensor_release(&outs[o]);

  /* the records */
  size_t count = 0;
  CHECK(get_ranges(graph, NULL, &count) == ONNXIFI_STATUS_FALLBACK && count > 0, "%s: count query", what);
  r = kiln_calloc(count + 1, sizeof *r);
  size_t small = 1;
  CHECK(count < 2 || get_ranges(graph, r, &small) == ONNXIFI_STATUS_FALLBACK, "%s: too small an array: FALLBACK",
        what);
  CHECK(get_ranges(graph, r, &count) == ONNXIFI_STATUS_SUCCESS, "%s: get ranges", what);

  /* this backend's own tensors: the exposing copy, run on the same backend */
  add = kiln_calloc((size_t)nv + 1, sizeof *add);
  int n_exposed = 0;
  for (size_t i = 0; i < count; i++) {
    int v = kiln_graph_find_value(g, r[i].tensorName);
    if (v >= 0 && r[i].foldedInto < 0 && !r[i].erased && ex[v].observable && n_exposed < MAX_IO - 16) {
      add[v] = true;
      n_exposed++;
    }
  }
  size_t xsize = 0;
  xbytes = expose(bytes, size, g, add, refs[0], &xsize);
  CHECK(xbytes && kiln_onnx_import(xbytes, xsize, &xg) == KILN_OK, "%s: the exposing copy", what);
  if (!xg) goto out;
  st = lib.onnxInitGraph(backend, NULL, xsize, xbytes, 0, NULL, &xgraph);
  if (st) last_error(&msg);
  CHECK(st == ONNXIFI_STATUS_SUCCESS, "%s: onnxInitGraph (exposing copy): %d %s", what, (int)st, st ? msg : "");
  if (st) goto out;
  if (observe_all) {
    kilnObserverOptions xo = {sizeof xo, KILN_OBSERVE_ALL, 0, 0, NULL, 0};
    CHECK(start_obs(xgraph, &xo) == ONNXIFI_STATUS_SUCCESS, "%s: observe the exposing copy", what);
  }
  for (int o = 0; o < xg->n_outputs; o++) {
    int v = kiln_graph_find_value(g, xg->values[xg->outputs[o]].name);
    const kiln_tensor *t = &refs[0][v];
    kiln_tensor_alloc(&outs[o], t->dtype, t->rank, t->dims);
  }
  for (int run = 0; run < 3; run++) {
    make_inputs(ins, base, nin, run);
    st = run_abi(xgraph, xg, ins, in_val, nin, outs);
    CHECK(st == ONNXIFI_STATUS_SUCCESS, "%s: exposing copy, run %d: %d", what, run, (int)st);
    if (run == 2) exp_reset(own, nv);
    for (int o = 0; !st && o < xg->n_outputs; o++) {
      int v = kiln_graph_find_value(g, xg->values[xg->outputs[o]].name);
      if (v >= 0 && g->values[v].producer >= 0) exp_add(&own[v], &outs[o]);
    }
  }
  for (int o = 0; o < xg->n_outputs; o++) kiln_tensor_release(&outs[o]);

  int exact = 0, wrong = 0, observed_records = 0, folded = 0, close = 0, far = 0;
  for (size_t i = 0; i < count; i++) {
    int v = kiln_graph_find_value(g, r[i].tensorName);
    if (v < 0 || g->values[v].producer != (int)r[i].nodeIndex) {
      wrong++;
      printf("  %s: record %zu '%s' names no node output\n", what, i, r[i].tensorName);
      continue;
    }
    if (!ex[v].observable) {
      if (r[i].totalRuns) wrong++;
      continue;
    }
    if (r[i].foldedInto >= 0 || r[i].erased) { /* erased by a rewrite: listed, nothing recorded */
      bool ok = !observe_all && r[i].totalRuns == 0 &&
                (r[i].erased || ((size_t)r[i].foldedInto < count && r[i].foldedInto != (int32_t)i));
      if (ok) folded++;
      else {
        wrong++;
        printf("  %s: %s (%s): folded into %d, erased %u, %llu runs\n", what, r[i].tensorName, r[i].opType,
               r[i].foldedInto, r[i].erased, (unsigned long long)r[i].totalRuns);
      }
      continue;
    }
    observed_records++;
    const expect *e = &own[v];
    bool ok = r[i].min == e->min && r[i].max == e->max && r[i].totalMin == e->tmin && r[i].totalMax == e->tmax &&
              r[i].nanCount == e->nan && r[i].totalNanCount == e->tnan && r[i].posInfCount == e->pinf &&
              r[i].negInfCount == e->ninf && r[i].runs == (uint64_t)e->runs && r[i].totalRuns == (uint64_t)e->truns &&
              r[i].elements == e->n && r[i].totalElements == e->tn &&
              !strcmp(r[i].opType, g->nodes[r[i].nodeIndex].op_type);
    if (ok) exact++;
    else {
      wrong++;
      if (wrong < 6)
        printf("  %s: %s (%s): got [%.9g, %.9g] total [%.9g, %.9g] runs %llu/%llu n %llu nan %llu, own tensors "
               "[%.9g, %.9g] total [%.9g, %.9g] runs %d/%d n %llu nan %llu\n",
               what, r[i].tensorName, r[i].opType, r[i].min, r[i].max, r[i].totalMin, r[i].totalMax,
               (unsigned long long)r[i].runs, (unsigned long long)r[i].totalRuns,
               (unsigned long long)r[i].elements, (unsigned long long)r[i].nanCount, e->min, e->max, e->tmin,
               e->tmax, e->runs, e->truns, (unsigned long long)e->n, (unsigned long long)e->nan);
    }
    /* across backends: the reference's exact ranges, within tolerance */
    const expect *x = &ex[v];
    double sc = fmax(fmax(fabs(x->tmin), fabs(x->tmax)), 1e-30);
    if (isinf(sc)) sc = 0;
    bool near = close_to(r[i].min, x->min, sc) && close_to(r[i].max, x->max, sc) &&
                close_to(r[i].totalMin, x->tmin, sc) && close_to(r[i].totalMax, x->tmax, sc) &&
                r[i].nanCount == x->nan && r[i].posInfCount == x->pinf && r[i].negInfCount == x->ninf &&
                r[i].elements == x->n;
    if (near) close++;
    else {
      far++;
      printf("  %s: %s (%s): [%.9g, %.9g] total [%.9g, %.9g], reference [%.9g, %.9g] total [%.9g, %.9g]\n", what,
             r[i].tensorName, r[i].opType, r[i].min, r[i].max, r[i].totalMin, r[i].totalMax, x->min, x->max, x->tmin,
             x->tmax);
    }
  }
  int node_outputs = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_out; k++) node_outputs += g->nodes[i].out[k] >= 0;
  CHECK((int)count == node_outputs, "%s: one record per node output (%zu of %d)", what, count, node_outputs);
  CHECK(wrong == 0 && exact == observed_records && exact > 0,
        "%s: recorded min/max equal the exact min/max of the backend's own tensors: %d exact, %d wrong", what, exact,
        wrong);
  CHECK(far == 0 && close == observed_records, "%s: within the output tolerance of the reference: %d, %d not", what,
        close, far);
  if (observe_all) CHECK(folded == 0, "%s: observe all: no record folded (%d)", what, folded);
  printf("  %s: %d node outputs observed, all exact on this backend (since reset and totals, NaN/inf counts), "
         "%d within tolerance of the reference, %d folded by rewrites\n",
         what, exact, close, folded);

  /* files: the periodic dump after run 2, the totals and histograms at stop */
  char file[600];
  bool fields_ok;
  snprintf(file, sizeof file, "%s/ranges%s_1.txt", tmp, sfx);
  CHECK(count_lines(file, 6, &fields_ok) == observed_records && fields_ok, "%s: %s has a 6-field line per record",
        what, file);
  snprintf(file, sizeof file, "%s/q%s.txt", tmp, sfx);
  CHECK(write_qparams(graph, file, KILN_QPARAMS_KL, KILN_QPARAMS_AFFINE_UINT8) == ONNXIFI_STATUS_SUCCESS,
        "%s: qparams (KL)", what);
  int ql = count_lines(file, 9, &fields_ok);
  CHECK(ql > 0 && ql <= observed_records && fields_ok, "%s: qparams lines have 9 fields (%d lines)", what, ql);
  CHECK(write_qparams(graph, file, 7, 0) == ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, "%s: unknown method", what);
  snprintf(file, sizeof file, "%s/d%s.txt", tmp, sfx);
  CHECK(dump_ranges(graph, file) == ONNXIFI_STATUS_SUCCESS &&
            count_lines(file, 6, &fields_ok) == observed_records && fields_ok,
        "%s: dump-and-reset", what);
  count = node_outputs;
  get_ranges(graph, r, &count);
  bool reset = true;
  for (size_t i = 0; i < count; i++) reset &= r[i].runs == 0 && r[i].min == INFINITY;
  CHECK(reset, "%s: the dump reset the since-reset ranges", what);
  CHECK(dump_ranges(graph, "/nonexistent-dir/x.txt") == ONNXIFI_STATUS_INVALID_NAME, "%s: unwritable file", what);
  CHECK(stop_obs(graph) == ONNXIFI_STATUS_SUCCESS, "%s: stop", what);
  CHECK(count_lines(dump, 6, &fields_ok) == observed_records && fields_ok, "%s: totals written at stop", what);
  /* totals file values read back to the recorded totals */
  FILE *f = fopen(dump, "r");
  int back = 0;
  char line[4096];
  while (f && fgets(line, sizeof line, f)) {
    int node, out;
    char op[128], name[512], a[64], b[64];
    if (sscanf(line, "%d %127s %d %511s %63s %63s", &node, op, &out, name, a, b) != 6) continue;
    for (size_t i = 0; i < count; i++)
      if (!strcmp(r[i].tensorName, name) && reads_back(a, r[i].totalMin) && reads_back(b, r[i].totalMax) &&
          (int)r[i].nodeIndex == node)
        back++;
  }
  if (f) fclose(f);
  CHECK(back == observed_records, "%s: the totals file reads back to the recorded totals (%d)", what, back);
  snprintf(file, sizeof file, "%s/ranges%s_hist.txt", tmp, sfx);
  if (nbins) {
    CHECK(count_lines(file, 6 + 1 + nbins, &fields_ok) == observed_records && fields_ok,
          "%s: histograms (%d bins) of every observed record written at stop", what, nbins);
  } else {
    CHECK(access(file, F_OK) != 0, "%s: no histogram file without histograms", what);
  }
  CHECK(stop_obs(graph) == ONNXIFI_STATUS_INVALID_STATE, "%s: a second stop", what);
  CHECK(get_ranges(graph, r, &count) == ONNXIFI_STATUS_SUCCESS, "%s: ranges stay readable after stop", what);
  /* after stop, runs are not recorded */
  for (int o = 0; o < g->n_outputs; o++) {
    const kiln_tensor *t = &refs[0][g->outputs[o]];
    kiln_tensor_alloc(&outs[o], t->dtype, t->rank, t->dims);
  }
  run_abi(graph, g, ins, in_val, nin, outs);
  get_ranges(graph, r, &count);
  bool still = true;
  for (size_t i = 0; i < count; i++) still &= r[i].runs == 0;
  CHECK(still, "%s: nothing recorded after stop", what);
  /* resume: the records and options go on (totals over 4 observed runs;
   * the 4th is a dump-frequency multiple: dumped to <stem>_2, reset) */
  kilnObserverOptions ro = {sizeof ro, KILN_OBSERVE_RESUME, 0, 0, NULL, 0};
  CHECK(start_obs(graph, &ro) == ONNXIFI_STATUS_SUCCESS, "%s: resume", what);
  run_abi(graph, g, ins, in_val, nin, outs);
  get_ranges(graph, r, &count);
  bool resumed = true;
  for (size_t i = 0; i < count; i++)
    resumed &= !ex[kiln_graph_find_value(g, r[i].tensorName)].observable || r[i].foldedInto >= 0 || r[i].erased ||
               (r[i].runs == 0 && r[i].totalRuns == 4);
  CHECK(resumed, "%s: resumed records count on", what);
  snprintf(file, sizeof file, "%s/ranges%s_2.txt", tmp, sfx);
  CHECK(count_lines(file, 6, &fields_ok) == observed_records && fields_ok, "%s: the resumed observer dumps %s", what,
        file);
  CHECK(stop_obs(graph) == ONNXIFI_STATUS_SUCCESS, "%s: stop after resume", what);
out:
  if (graph) lib.onnxReleaseGraph(graph);
  if (xgraph) lib.onnxReleaseGraph(xgraph);
  kiln_free(r);
  kiln_free(ex);
  kiln_free(own);
  kiln_free(add);
  free(xbytes);
  free(bytes);
  for (int run = 0; run < 3; run++) {
    for (int v = 0; refs[run] && v < nv; v++) kiln_tensor_release(&refs[run][v]);
    kiln_free(refs[run]);
  }
  for (int i = 0; i < 16; i++) {
    kiln_tensor_release(&ins[i]);
    kiln_tensor_release(&base[i]);
  }
  for (int i = 0; i < MAX_IO; i++) kiln_tensor_release(&outs[i]);
  kiln_graph_free(all);
  kiln_graph_free(xg);
  kiln_graph_free(g);
}

static void check_statuses(const char *tmp) {
  char path[1024];
  source_path(path, sizeof path, "examples/mlp.onnx");
  size_t size;
  void *bytes = tu_read_file(path, &size);
  onnxGraph graph = NULL;
  CHECK(bytes && lib.onnxInitGraph(backend, NULL, size, bytes, 0, NULL, &graph) == ONNXIFI_STATUS_SUCCESS, "mlp");
  free(bytes);
  if (!graph) return;
  int bogus;
  size_t count = 0;
  CHECK(start_obs(&bogus, NULL) == ONNXIFI_STATUS_INVALID_GRAPH, "start on a bogus graph");
  CHECK(stop_obs(graph) == ONNXIFI_STATUS_INVALID_STATE, "stop before start");
  CHECK(get_ranges(graph, NULL, &count) == ONNXIFI_STATUS_INVALID_STATE, "ranges before start");
  CHECK(get_ranges(graph, NULL, NULL) == ONNXIFI_STATUS_INVALID_POINTER, "NULL count");
  kilnObserverOptions o = {8, 0, 0, 0, NULL, 0};
  CHECK(start_obs(graph, &o) == ONNXIFI_STATUS_INVALID_SIZE, "options->size too small");
  o = (kilnObserverOptions){sizeof o, 0, 0, 5, NULL, 0};
  CHECK(start_obs(graph, &o) == ONNXIFI_STATUS_INVALID_POINTER, "dumpFrequency without dumpFile");
  o = (kilnObserverOptions){sizeof o, 0x80, 0, 0, NULL, 0};
  CHECK(start_obs(graph, &o) == ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, "unknown flags");
  CHECK(start_obs(graph, NULL) == ONNXIFI_STATUS_SUCCESS, "start with no options");
  CHECK(dump_ranges(graph, NULL) == ONNXIFI_STATUS_INVALID_POINTER, "NULL path");
  char file[600];
  snprintf(file, sizeof file, "%s/h.txt", tmp);
  CHECK(write_hist(graph, file) == ONNXIFI_STATUS_INVALID_STATE, "histograms not requested");
  CHECK(start_obs(graph, NULL) == ONNXIFI_STATUS_SUCCESS, "a second start replaces the observer");
  CHECK(stop_obs(graph) == ONNXIFI_STATUS_SUCCESS, "stop with no files");
  CHECK(start_obs(graph, NULL) == ONNXIFI_STATUS_SUCCESS, "start again; released while observing");
  lib.onnxReleaseGraph(graph);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: observe_abi PATH/libonnxifi-kiln.so\n");
    return 2;
  }
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, argv[1], &lib)) {
    fprintf(stderr, "observe_abi: cannot load %s\n", argv[1]);
    return 2;
  }
  onnxGetExtensionFunctionAddressFunction get_ext =
      (onnxGetExtensionFunctionAddressFunction)(uintptr_t)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  onnxBackendID ids[8];
  size_t n = 8;
  if (!get_ext || lib.onnxGetBackendIDs(ids, &n) || !n || lib.onnxInitBackend(ids[0], NULL, &backend)) {
    fprintf(stderr, "observe_abi: no backend\n");
    return 2;
  }
  char name[64];
  size_t sz = sizeof name;
  if (lib.onnxGetBackendInfo(ids[0], ONNXIFI_BACKEND_NAME, name, &sz)) strcpy(name, "?");
  printf("observe_abi: backend %s\n", name);
  onnxExtensionFunctionPointer fp;
#define GET(var, type, nm) CHECK(!get_ext(ids[0], nm, &fp) && (var = (type)(uintptr_t)fp), "extension %s", nm)
  GET(start_obs, kilnStartObservingFunction, "kilnStartObserving");
  GET(stop_obs, kilnStopObservingFunction, "kilnStopObserving");
  GET(get_ranges, kilnGetObservedRangesFunction, "kilnGetObservedRanges");
  GET(dump_ranges, kilnDumpObservedRangesFunction, "kilnDumpObservedRanges");
  GET(write_hist, kilnWriteObservedHistogramsFunction, "kilnWriteObservedHistograms");
  GET(write_qparams, kilnWriteQuantizationParamsFunction, "kilnWriteQuantizationParams");
  GET(last_error, kilnGetLastErrorMessageFunction, "kilnGetLastErrorMessage");
#undef GET
  if (failed) return 1;
  char tmp[] = "/tmp/kiln_obs_abi_XXXXXX";
  if (!mkdtemp(tmp)) return 2;
  check_statuses(tmp);
  const char *models[][2] = {
      {"examples/cnn.onnx", "examples/cnn/test_data_set_0"},
      {"tests/views/test_views_box_decode/model.onnx", "tests/views/test_views_box_decode/test_data_set_0"},
      {"tests/views/test_views_misc/model.onnx", "tests/views/test_views_misc/test_data_set_0"},
      {"tests/views/test_views_clamp_scatternd/model.onnx", "tests/views/test_views_clamp_scatternd/test_data_set_0"},
  };
  for (size_t m = 0; m < sizeof models / sizeof *models; m++)
    for (int all = 0; all < 2; all++)
      for (int h = 0; h < 2; h++) check_model(models[m][0], models[m][1], all, h ? 32 : 0, tmp);
  lib.onnxReleaseBackend(backend);
  for (size_t i = 0; i < n; i++) lib.onnxReleaseBackendID(ids[i]);
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
  if (system(cmd)) printf("  (could not remove %s)\n", tmp);
  printf("observe_abi: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
