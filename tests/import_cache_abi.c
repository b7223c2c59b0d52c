/* tests/import_cache_abi: the graph as imported, from the kiln cache
 * (opencl/import_cache), through the real ONNXIFI path on the OpenCL
 * backend. A cold onnxInitGraph stores a record keyed by the raw inputs (the
 * model bytes, the weight descriptors' names, types, shapes and bytes); a
 * warm one reads it instead of parsing (kilnGraphStatistics'
 * importedFromCache) and must give the cold run's outputs bit for bit, the
 * same IO checks and messages, the same symbolic batch and the same observed
 * ranges. A changed weight in the model bytes, a changed weight descriptor
 * with the same model bytes, and a changed model are misses; a corrupted or
 * truncated record is detected and rewritten; KILN_CACHE_DIR=off and an
 * unusable directory store nothing and still run. Every result is checked
 * against y = relu(x W + b) computed here.
 *
 *   import_cache_abi PATH/libonnxifi-kiln.so
 *
 * KILN_DEVICE defaults to opencl. The cache directory is made here (under
 * $TMPDIR), KILN_CL_IMPORT_CACHE=1 (every record stored: the test graph
 * parses in well under the 2 ms the default asks). Exits 77 without an
 * OpenCL backend. Prints "ok"/"FAIL" lines and a summary. */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/kiln/kiln_ext.h"
#include "onnx/onnx.pb-c.h"
#include "opencl/cache.h"
#include "opencl/import_cache.h"

enum { K = 64, M = 32, NMAX = 4, F32 = 1 };

static int n_pass, n_fail;
static struct onnxifi_library lib;
static kilnGetLastErrorMessageFunction last_error;
static kilnGetGraphStatisticsFunction graph_stats;
static kilnStartObservingFunction obs_start;
static kilnGetObservedRangesFunction obs_ranges;
static onnxBackend be;

static bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool check(bool ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  if (ok) n_pass++;
  else n_fail++;
  fflush(stdout);
  return ok;
}

static void die(const char *what) {
  printf("FAIL %s\n", what);
  exit(1);
}

static const char *msg(void) {
  const char *m = NULL;
  if (last_error && !last_error(&m) && m) return m;
  return "";
}

/* ---- the model: y = Relu(MatMul(x, W) + b), x [N, K] with N symbolic ---- */

static float W[K * M], B[M], X[NMAX * K];

static void fill(float *p, size_t n, unsigned seed) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = (float)((double)(s >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
  }
}

static Onnx__ValueInfoProto *vinfo(const char *name, int rank, const int64_t *dims) {
  static Onnx__ValueInfoProto v[8];
  static Onnx__TypeProto tp[8];
  static Onnx__TypeProto__Tensor tt[8];
  static Onnx__TensorShapeProto sh[8];
  static Onnx__TensorShapeProto__Dimension dim[8][2], *dimp[8][2];
  static int n;
  int i = n++ % 8;
  v[i] = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  v[i].name = (char *)name;
  tp[i] = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  tt[i] = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  tt[i].has_elem_type = 1;
  tt[i].elem_type = F32;
  sh[i] = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  sh[i].n_dim = (size_t)rank;
  sh[i].dim = dimp[i];
  for (int d = 0; d < rank; d++) {
    dim[i][d] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    if (dims[d] >= 0) {
      dim[i][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dim[i][d].dim_value = dims[d];
    } else {
      dim[i][d].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      dim[i][d].dim_param = (char *)"N";
    }
    dimp[i][d] = &dim[i][d];
  }
  tt[i].shape = &sh[i];
  tp[i].value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp[i].tensor_type = &tt[i];
  v[i].type = &tp[i];
  return &v[i];
}

/* The serialized model (malloc'd): W and b as initializers (with_init) or
 * as graph inputs given by descriptors; name: the graph's name. */
static void *model(bool with_init, const char *name, size_t *size) {
  static const int64_t dx[2] = {-1, K}, dw[2] = {K, M}, db[1] = {M}, dy[2] = {-1, M};
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto op = ONNX__OPERATOR_SET_ID_PROTO__INIT, *ops[1] = {&op};
  op.domain = (char *)"";
  op.has_version = 1;
  op.version = 13;
  m.has_ir_version = 1;
  m.ir_version = 8;
  m.n_opset_import = 1;
  m.opset_import = ops;
  g.name = (char *)name;
  Onnx__ValueInfoProto *in[3] = {vinfo("x", 2, dx), vinfo("W", 2, dw), vinfo("b", 1, db)}, *out[1] = {vinfo("y", 2, dy)};
  g.n_input = 3;
  g.input = in;
  g.n_output = 1;
  g.output = out;
  Onnx__TensorProto tw = ONNX__TENSOR_PROTO__INIT, tb = ONNX__TENSOR_PROTO__INIT, *inits[2] = {&tw, &tb};
  int64_t wdims[2] = {K, M}, bdims[1] = {M};
  tw.name = (char *)"W";
  tw.has_data_type = tb.has_data_type = 1;
  tw.data_type = tb.data_type = F32;
  tw.n_dims = 2;
  tw.dims = wdims;
  tw.has_raw_data = 1;
  tw.raw_data = (ProtobufCBinaryData){sizeof W, (uint8_t *)W};
  tb.name = (char *)"b";
  tb.n_dims = 1;
  tb.dims = bdims;
  tb.has_raw_data = 1;
  tb.raw_data = (ProtobufCBinaryData){sizeof B, (uint8_t *)B};
  if (with_init) {
    g.n_initializer = 2;
    g.initializer = inits;
  }
  const char *ni[3][3] = {{"x", "W", NULL}, {"xw", "b", NULL}, {"z", NULL, NULL}};
  const char *no[3] = {"xw", "z", "y"}, *opn[3] = {"MatMul", "Add", "Relu"}, *nn[3] = {"mm", "bias", "act"};
  Onnx__NodeProto nodes[3], *np[3];
  char *nin[3][2], *nout[3][1];
  for (int i = 0; i < 3; i++) {
    nodes[i] = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
    nodes[i].op_type = (char *)opn[i];
    nodes[i].name = (char *)nn[i];
    nodes[i].n_input = ni[i][1] ? 2 : 1;
    for (int k = 0; k < 2; k++) nin[i][k] = (char *)ni[i][k];
    nodes[i].input = nin[i];
    nout[i][0] = (char *)no[i];
    nodes[i].n_output = 1;
    nodes[i].output = nout[i];
    np[i] = &nodes[i];
  }
  g.n_node = 3;
  g.node = np;
  m.graph = &g;
  *size = onnx__model_proto__get_packed_size(&m);
  void *buf = malloc(*size);
  if (!buf) die("out of memory");
  onnx__model_proto__pack(&m, buf);
  return buf;
}

/* weight descriptors of W and b (over w, bb: the host's copies) */
static onnxTensorDescriptorV1 wdesc[2];
static const uint64_t wshape[2] = {K, M}, bshape[1] = {M};
static void make_wdesc(const float *w, const float *bb) {
  memset(wdesc, 0, sizeof wdesc);
  for (int i = 0; i < 2; i++) {
    wdesc[i].tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
    wdesc[i].dataType = ONNXIFI_DATATYPE_FLOAT32;
    wdesc[i].memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  }
  wdesc[0].name = "W";
  wdesc[0].dimensions = 2;
  wdesc[0].shape = wshape;
  wdesc[0].buffer = (onnxPointer)(uintptr_t)w;
  wdesc[1].name = "b";
  wdesc[1].dimensions = 1;
  wdesc[1].shape = bshape;
  wdesc[1].buffer = (onnxPointer)(uintptr_t)bb;
}

/* y = relu(x W + b) in double, against out (rows n) */
static bool matches_ref(const float *out, int n, const float *w, const float *bb) {
  for (int r = 0; r < n; r++)
    for (int c = 0; c < M; c++) {
      double s = bb[c];
      for (int k = 0; k < K; k++) s += (double)X[r * K + k] * w[k * M + c];
      double want = s > 0 ? s : 0;
      if (!(fabs(out[r * M + c] - want) <= 1e-4 + 1e-4 * fabs(want))) {
        printf("     y[%d,%d] = %.7g, want %.7g\n", r, c, (double)out[r * M + c], want);
        return false;
      }
    }
  return true;
}

static onnxStatus run(onnxGraph g, int n, float *out, const char *in_name, onnxEnum in_type) {
  uint64_t xs[2] = {(uint64_t)n, K}, ys[2] = {(uint64_t)n, M};
  onnxTensorDescriptorV1 di = {0}, dout = {0};
  di.tag = dout.tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
  di.name = in_name;
  dout.name = "y";
  di.dataType = in_type;
  dout.dataType = ONNXIFI_DATATYPE_FLOAT32;
  di.memoryType = dout.memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  di.dimensions = dout.dimensions = 2;
  di.shape = xs;
  dout.shape = ys;
  di.buffer = (onnxPointer)(uintptr_t)X;
  dout.buffer = (onnxPointer)(uintptr_t)out;
  onnxStatus st = lib.onnxSetGraphIO(g, 1, &di, 1, &dout);
  if (st) return st;
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  if ((st = lib.onnxInitEvent(be, &fin.event))) return st;
  st = lib.onnxSignalEvent(fin.event);
  if (!st) st = lib.onnxRunGraph(g, &fin, &fout);
  if (!st) st = lib.onnxWaitEvent(fout.event); /* a failed run leaves the NaNs init_run wrote */
  lib.onnxReleaseEvent(fin.event);
  if (fout.event) lib.onnxReleaseEvent(fout.event);
  return st;
}

/* One init + runs at N = 4 and N = 2: out4 / out2 (may be NULL). Returns
 * importedFromCache, or -1 when the init failed. */
static int init_run(const char *what, const void *m, size_t size, uint32_t nw, const onnxTensorDescriptorV1 *wd,
                    const float *w, const float *bb, float *out4, float *out2, onnxGraph *keep) {
  onnxGraph g = NULL;
  onnxStatus st = lib.onnxInitGraph(be, NULL, size, m, nw, wd, &g);
  if (!check(!st, "%s: onnxInitGraph: status 0x%x %s", what, (unsigned)st, st ? msg() : "")) return -1;
  float o4[NMAX * M], o2[NMAX * M];
  for (int n = 4; n >= 2; n -= 2) {
    float *o = n == 4 ? o4 : o2;
    memset(o, 0xff, sizeof o4); /* NaN: a result not written cannot pass */
    st = run(g, n, o, "x", ONNXIFI_DATATYPE_FLOAT32);
    if (check(!st, "%s: run at N=%d: status 0x%x %s", what, n, (unsigned)st, st ? msg() : ""))
      check(matches_ref(o, n, w, bb), "%s: N=%d: y = relu(x W + b)", what, n);
  }
  kilnGraphStatistics gs; /* after the runs: a symbolic plan compiles at its first */
  memset(&gs, 0, sizeof gs);
  gs.size = sizeof gs;
  st = graph_stats(g, &gs);
  check(!st && gs.nodesImported == 3, "%s: statistics: %llu nodes imported", what, (unsigned long long)gs.nodesImported);
  if (out4) memcpy(out4, o4, sizeof o4);
  if (out2) memcpy(out2, o2, sizeof o2);
  if (keep) *keep = g;
  else lib.onnxReleaseGraph(g);
  return (int)gs.importedFromCache;
}

static char dir[512];

/* the raw key's entry file of these inputs */
static void entry_path(const void *m, size_t size, uint32_t nw, const float *w, const float *bb, char *path, size_t n) {
  kiln_cl_raw_weight rw[2] = {{"W", ONNXIFI_DATATYPE_FLOAT32, 2, wshape, w, sizeof W},
                              {"b", ONNXIFI_DATATYPE_FLOAT32, 1, bshape, bb, sizeof B}};
  if (!kiln_cl_cache_path(kiln_cl_import_key(m, size, nw, rw), path, n)) die("the entry path");
}

static long file_size(const char *p) {
  struct stat sb;
  return stat(p, &sb) ? -1 : (long)sb.st_size;
}

/* flips a byte at `at` bytes from the end (truncate: cuts that many off) */
static void damage(const char *path, long at, bool truncate_it) {
  long n = file_size(path);
  if (n < at) die("damage: the entry is too short");
  if (truncate_it) {
    if (truncate(path, n - at)) die("truncate");
    return;
  }
  FILE *f = fopen(path, "r+b");
  if (!f || fseek(f, n - at, SEEK_SET)) die("open the entry");
  int c = fgetc(f);
  fseek(f, n - at, SEEK_SET);
  fputc(c ^ 0x5a, f);
  fclose(f);
}

static void test_initializers(void) {
  size_t size;
  void *m = model(true, "imp", &size);
  char path[700];
  entry_path(m, size, 0, W, B, path, sizeof path);
  float c4[NMAX * M], c2[NMAX * M], w4[NMAX * M], w2[NMAX * M];
  check(init_run("cold", m, size, 0, NULL, W, B, c4, c2, NULL) == 0, "cold init: parsed (no record yet)");
  check(file_size(path) > (long)sizeof W, "cold init stored the record (%ld bytes)", file_size(path));
  onnxGraph g;
  check(init_run("warm", m, size, 0, NULL, W, B, w4, w2, &g) == 1, "warm init: the graph read from the record");
  check(!memcmp(c4, w4, 4 * M * sizeof(float)) && !memcmp(c2, w2, 2 * M * sizeof(float)),
        "warm outputs equal the cold ones bit for bit (N=4 and N=2)");
  /* the ABI's checks work from the record */
  float o[NMAX * M];
  onnxStatus st = run(g, 4, o, "q", ONNXIFI_DATATYPE_FLOAT32);
  check(st == ONNXIFI_STATUS_INVALID_NAME && strstr(msg(), "'q'"), "warm: an unknown input name: 0x%x '%s'",
        (unsigned)st, msg());
  st = run(g, 4, o, "W", ONNXIFI_DATATYPE_FLOAT32);
  check(st == ONNXIFI_STATUS_INVALID_NAME && strstr(msg(), "weights"), "warm: a weight bound as input: 0x%x '%s'",
        (unsigned)st, msg());
  st = run(g, 4, o, "x", ONNXIFI_DATATYPE_INT32);
  check(st == ONNXIFI_STATUS_MISMATCHING_DATATYPE && strstr(msg(), "'x'"), "warm: a wrong input type: 0x%x '%s'",
        (unsigned)st, msg());
  /* observers: one record per node output, named as in the model */
  if (obs_start && obs_ranges) {
    st = obs_start(g, NULL);
    if (!st) st = run(g, 4, o, "x", ONNXIFI_DATATYPE_FLOAT32);
    kilnObservedRange r[8];
    size_t n = 8;
    if (!st) st = obs_ranges(g, r, &n);
    bool ok = !st && n == 3;
    for (size_t i = 0; ok && i < n; i++) ok = !strcmp(r[i].opType, i == 0 ? "MatMul" : i == 1 ? "Add" : "Relu");
    float ymax = 0;
    for (int i = 0; i < 4 * M; i++) ymax = o[i] > ymax ? o[i] : ymax;
    check(ok && r[2].max == ymax && r[2].min == 0 && !strcmp(r[2].tensorName, "y"),
          "warm: observed ranges of MatMul, Add, Relu (y max %g = %g)", ok ? r[2].max : -1.0, (double)ymax);
  }
  lib.onnxReleaseGraph(g);

  /* another weight value in the model bytes: another key */
  float w2v[K * M];
  memcpy(w2v, W, sizeof W);
  W[5] += 0.25f;
  size_t size2;
  void *m2 = model(true, "imp", &size2);
  check(init_run("changed initializer", m2, size2, 0, NULL, W, B, NULL, NULL, NULL) == 0,
        "a changed weight in the model bytes is a miss");
  check(init_run("changed initializer, again", m2, size2, 0, NULL, W, B, NULL, NULL, NULL) == 1,
        "... and has its own record next time");
  memcpy(W, w2v, sizeof W);
  free(m2);
  /* another model (the graph's name): another key */
  m2 = model(true, "imp2", &size2);
  check(init_run("changed model", m2, size2, 0, NULL, W, B, NULL, NULL, NULL) == 0, "a changed model is a miss");
  free(m2);

  /* a damaged record: detected (a miss), the init right, the record rewritten */
  for (int k = 0; k < 3; k++) {
    const char *what = k == 0 ? "a byte flipped in a weight" : k == 1 ? "a byte flipped in the head" : "truncated";
    long n = file_size(path);
    damage(path, k == 0 ? 4096 : k == 1 ? n - 60 : 1000, k == 2);
    char t[96];
    snprintf(t, sizeof t, "record %s", what);
    check(init_run(t, m, size, 0, NULL, W, B, w4, NULL, NULL) == 0, "%s: detected, the graph parsed", t);
    check(!memcmp(c4, w4, 4 * M * sizeof(float)), "%s: outputs equal the cold ones", t);
    check(file_size(path) == n, "%s: the record rewritten (%ld bytes)", t, file_size(path));
    check(init_run(t, m, size, 0, NULL, W, B, NULL, NULL, NULL) == 1, "%s: the rewritten record is read next time", t);
  }
  free(m);
}

static void test_descriptors(void) {
  size_t size;
  void *m = model(false, "impd", &size);
  float hw[K * M], hb[M];
  memcpy(hw, W, sizeof W);
  memcpy(hb, B, sizeof B);
  make_wdesc(hw, hb);
  char path[700];
  entry_path(m, size, 2, hw, hb, path, sizeof path);
  float c4[NMAX * M], c2[NMAX * M], w4[NMAX * M], w2[NMAX * M];
  check(init_run("descriptors cold", m, size, 2, wdesc, W, B, c4, c2, NULL) == 0, "weights by descriptor: cold init");
  check(file_size(path) > (long)sizeof W, "weights by descriptor: the record stored (%ld bytes)", file_size(path));
  onnxGraph g;
  check(init_run("descriptors warm", m, size, 2, wdesc, W, B, w4, w2, &g) == 1,
        "weights by descriptor: warm init from the record");
  check(!memcmp(c4, w4, 4 * M * sizeof(float)) && !memcmp(c2, w2, 2 * M * sizeof(float)),
        "weights by descriptor: warm outputs equal the cold ones bit for bit");
  /* the host may free its weights after onnxInitGraph: the graph does not read them */
  memset(hw, 0, sizeof hw);
  float o[NMAX * M];
  onnxStatus st = run(g, 4, o, "x", ONNXIFI_DATATYPE_FLOAT32);
  check(!st && matches_ref(o, 4, W, B), "weights by descriptor: the host's weights overwritten after init: results kept");
  lib.onnxReleaseGraph(g);
  /* the same model bytes, another weight value: a miss */
  memcpy(hw, W, sizeof W);
  hw[7] -= 0.5f;
  check(init_run("descriptor changed", m, size, 2, wdesc, hw, hb, NULL, NULL, NULL) == 0,
        "a changed weight descriptor (same model bytes) is a miss, its results its own");
  hw[7] += 0.5f;
  /* another shape for the same bytes count is another key: b as [1, M] is
     refused by the model's declared rank (no record of it is read) */
  static const uint64_t b2[2] = {1, M};
  wdesc[1].dimensions = 2;
  wdesc[1].shape = b2;
  onnxGraph bad = NULL;
  st = lib.onnxInitGraph(be, NULL, size, m, 2, wdesc, &bad);
  check(st == ONNXIFI_STATUS_MISMATCHING_SHAPE && strstr(msg(), "'b'"),
        "a weight of another shape (same bytes): refused as without a cache: 0x%x '%s'", (unsigned)st, msg());
  if (!st) lib.onnxReleaseGraph(bad);
  make_wdesc(hw, hb);
  free(m);
}

static int count_entries(const char *d) {
  char cmd[700];
  snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null | grep -c '\\.kc$'", d);
  FILE *p = popen(cmd, "r");
  int n = -1;
  if (p && fscanf(p, "%d", &n) != 1) n = -1;
  if (p) pclose(p);
  return n;
}

static void test_no_cache(void) {
  size_t size;
  void *m = model(true, "impoff", &size);
  setenv("KILN_CACHE_DIR", "off", 1);
  check(init_run("cache off", m, size, 0, NULL, W, B, NULL, NULL, NULL) == 0 &&
            init_run("cache off, again", m, size, 0, NULL, W, B, NULL, NULL, NULL) == 0,
        "KILN_CACHE_DIR=off: never from a record");
  char bad[600], afile[600]; /* a directory below a plain file: cannot be made */
  snprintf(afile, sizeof afile, "%s/afile", dir);
  snprintf(bad, sizeof bad, "%s/afile/kiln", dir);
  FILE *a = fopen(afile, "w");
  if (!a) die("a file in the test directory");
  fclose(a);
  setenv("KILN_CACHE_DIR", bad, 1);
  check(init_run("unusable dir", m, size, 0, NULL, W, B, NULL, NULL, NULL) == 0 &&
            init_run("unusable dir, again", m, size, 0, NULL, W, B, NULL, NULL, NULL) == 0,
        "an unusable cache directory: runs, never from a record");
  char cd[600];
  snprintf(cd, sizeof cd, "%s/kiln", dir);
  setenv("KILN_CACHE_DIR", cd, 1);
  free(m);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: import_cache_abi PATH/libonnxifi-kiln.so\n");
    return 2;
  }
  setenv("KILN_DEVICE", "opencl", 0);
  setenv("KILN_CL_IMPORT_CACHE", "1", 1);
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/kiln-import-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) die("mkdtemp");
  char cd[600];
  snprintf(cd, sizeof cd, "%s/kiln", dir);
  setenv("KILN_CACHE_DIR", cd, 1);
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, argv[1], &lib)) die("onnxifi_load");
  onnxGetExtensionFunctionAddressFunction get_ext =
      (onnxGetExtensionFunctionAddressFunction)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  onnxBackendID ids[8];
  size_t nid = 8;
  onnxStatus st = lib.onnxGetBackendIDs(ids, &nid);
  if (st || !nid) {
    printf("skipped: kiln offers no backends for KILN_DEVICE=%s (status 0x%x)\n", getenv("KILN_DEVICE"), (unsigned)st);
    return 77;
  }
  onnxExtensionFunctionPointer fp;
  if (!get_ext || get_ext(ids[0], "kilnGetGraphStatistics", &fp)) die("kilnGetGraphStatistics");
  graph_stats = (kilnGetGraphStatisticsFunction)(void (*)(void))fp;
  if (!get_ext(ids[0], "kilnGetLastErrorMessage", &fp)) last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
  if (!get_ext(ids[0], "kilnStartObserving", &fp)) obs_start = (kilnStartObservingFunction)(void (*)(void))fp;
  if (!get_ext(ids[0], "kilnGetObservedRanges", &fp)) obs_ranges = (kilnGetObservedRangesFunction)(void (*)(void))fp;
  if (lib.onnxInitBackend(ids[0], NULL, &be)) die("onnxInitBackend");
  fill(W, K * M, 1);
  fill(B, M, 2);
  fill(X, NMAX * K, 3);
  test_initializers();
  test_descriptors();
  test_no_cache();
  check(count_entries(cd) >= 4, "the cache directory holds the records (%d entries)", count_entries(cd));
  lib.onnxReleaseBackend(be);
  for (size_t i = 0; i < nid; i++) lib.onnxReleaseBackendID(ids[i]);
  onnxifi_unload(&lib);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd)) printf("note: could not remove %s\n", dir);
  printf("import_cache_abi: %d passed, %d failed\n", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
