/* tests/symbolic_batch: a model with a symbolic batch N (dim_param, bound
 * 64 in metadata_props "kiln.bound.N") runs through the ONNXIFI ABI at batch
 * 1, 7 and 64 with one memory plan on the cpu backend, and at 65 with one
 * more; outputs match the reference backend at every batch. A second model
 * without a bound plans at its first batch and again only when a later
 * batch exceeds it. Both backends report the symbolic-size capabilities.
 * With BACKEND (kiln-opencl: the first backend whose name starts so) the
 * same on that backend (memoryPlans = its variants), plus a model whose
 * Softmax over the batch axis mixes rows: one variant per batch there (the
 * fallback), and a CNN (Conv, MaxPool, GlobalAveragePool: one plan on
 * every backend); --bench times batch 64 / 1000 / 4000 at the bound (4096)
 * against the exact size, both on BACKEND.
 * The sequence models (make_seq) put a symbolic S after a dim of 1 and
 * inside [4,S,16] (one variant), or reduce or normalise over it (a variant
 * per size on opencl); --bench seq times the first two. The two-symbol
 * models (make_two: x[N,S,16]) get one plan per pair of bounds on every
 * backend, except one with a Softmax over S (a variant per size on
 * opencl); --bench two times them.
 *   symbolic_batch PLUGIN [BACKEND [--bench [seq|two [S_BOUND]]]] */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdbool.h>

#include "include/kiln/kiln_ext.h"
#include "onnx/onnx.pb-c.h"

static struct onnxifi_library lib;
static kilnGetGraphStatisticsFunction graph_stats;
static int passed, failed;

#include "tests/check.h"

enum { IN = 16, HID = 32, OUT = 8 };
static float w1[IN * HID], b1[HID], w2[HID * OUT], w3[8 * OUT];

static float cw1[32 * 9], cb1[32], cw2[16 * 32 * 9], w4[16 * OUT];

static const char *bound_text = "64", *bound_key = "kiln.bound.N";
static double tol = 1e-5;

/* The graphs' input x[N,16] and output y[N,8], float32, N the symbolic
 * batch (used in place: the fields point at each other). */
typedef struct io_decl {
  Onnx__TensorShapeProto__Dimension dn, di, dout, *xd[2], *yd[2];
  Onnx__TensorShapeProto xs, ys;
  Onnx__TypeProto__Tensor xt, yt;
  Onnx__TypeProto xty, yty;
  Onnx__ValueInfoProto x, y, *ins[1], *outs[1];
} io_decl;

static void io_decl_init(io_decl *d) {
  d->dn = d->di = d->dout = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
  d->dn.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM, d->dn.dim_param = "N";
  d->di.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, d->di.dim_value = IN;
  d->dout.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, d->dout.dim_value = OUT;
  d->xd[0] = d->yd[0] = &d->dn, d->xd[1] = &d->di, d->yd[1] = &d->dout;
  d->xs = d->ys = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  d->xs.n_dim = 2, d->xs.dim = d->xd, d->ys.n_dim = 2, d->ys.dim = d->yd;
  d->xt = d->yt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  d->xt.has_elem_type = d->yt.has_elem_type = 1, d->xt.elem_type = d->yt.elem_type = 1;
  d->xt.shape = &d->xs, d->yt.shape = &d->ys;
  d->xty = d->yty = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  d->xty.value_case = d->yty.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  d->xty.tensor_type = &d->xt, d->yty.tensor_type = &d->yt;
  d->x = d->y = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  d->x.name = "x", d->x.type = &d->xty, d->y.name = "y", d->y.type = &d->yty;
  d->ins[0] = &d->x, d->outs[0] = &d->y;
}

/* Graph g as an opset-13 model (with the kiln.bound.N property when
 * with_bound), packed (malloc'd). */
static void *pack_model(Onnx__GraphProto *g, bool with_bound, size_t *size) {
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  os.domain = "", os.has_version = 1, os.version = 13;
  Onnx__OperatorSetIdProto *oss[1] = {&os};
  Onnx__StringStringEntryProto bound = ONNX__STRING_STRING_ENTRY_PROTO__INIT;
  bound.key = (char *)bound_key, bound.value = (char *)bound_text;
  Onnx__StringStringEntryProto *props[1] = {&bound};
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 8, m.n_opset_import = 1, m.opset_import = oss, m.graph = g;
  if (with_bound) m.n_metadata_props = 1, m.metadata_props = props;
  *size = onnx__model_proto__get_packed_size(&m);
  void *buf = malloc(*size);
  onnx__model_proto__pack(&m, buf);
  return buf;
}

/* x[N,16] -> Gemm(w1,b1) -> Relu -> MatMul(w2) -> Sigmoid -> y[N,8]
 * (with_bound 2: -> Softmax(axis 0) -> y, rows mixed; 3: between Relu and
 * MatMul Reshape [-1,4,8] -> Softmax(axis -1) -> Transpose [0,2,1] ->
 * Flatten: every row kept apart, through copies, views and a row reduction;
 * 4: Relu -> Reshape [-1,4,8] -> ReduceMean(axes 1) -> MatMul(w3 [8,8])) */
static void *make_model(int with_bound, size_t *size) {
  io_decl io;
  io_decl_init(&io);
  Onnx__TensorProto t1 = ONNX__TENSOR_PROTO__INIT, tb = t1, t2 = t1;
  int64_t d1[2] = {IN, HID}, db[1] = {HID}, d2[2] = {HID, OUT};
  t1.name = "w1", t1.n_dims = 2, t1.dims = d1, t1.has_data_type = 1, t1.data_type = 1, t1.n_float_data = IN * HID,
  t1.float_data = w1;
  tb.name = "b1", tb.n_dims = 1, tb.dims = db, tb.has_data_type = 1, tb.data_type = 1, tb.n_float_data = HID,
  tb.float_data = b1;
  t2.name = "w2", t2.n_dims = 2, t2.dims = d2, t2.has_data_type = 1, t2.data_type = 1, t2.n_float_data = HID * OUT,
  t2.float_data = w2;
  Onnx__TensorProto *inits[3] = {&t1, &tb, &t2};
  char *gi[3] = {"x", "w1", "b1"}, *go[1] = {"h"}, *ri[1] = {"h"}, *ro[1] = {"r"}, *mi[2] = {"r", "w2"},
       *mo[1] = {"m"}, *si[1] = {"m"}, *so[1] = {"y"};
  Onnx__NodeProto gemm = ONNX__NODE_PROTO__INIT, relu = gemm, mm = gemm, sig = gemm, sm = gemm;
  char *smi[1] = {"s"};
  Onnx__AttributeProto ax = ONNX__ATTRIBUTE_PROTO__INIT;
  Onnx__AttributeProto *axs[1] = {&ax};
  ax.name = "axis", ax.has_type = 1, ax.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, ax.has_i = 1, ax.i = 0;
  gemm.op_type = "Gemm", gemm.n_input = 3, gemm.input = gi, gemm.n_output = 1, gemm.output = go;
  relu.op_type = "Relu", relu.n_input = 1, relu.input = ri, relu.n_output = 1, relu.output = ro;
  mm.op_type = "MatMul", mm.n_input = 2, mm.input = mi, mm.n_output = 1, mm.output = mo;
  sig.op_type = "Sigmoid", sig.n_input = 1, sig.input = si, sig.n_output = 1, sig.output = so;
  sm.op_type = "Softmax", sm.n_input = 1, sm.input = so, sm.n_output = 1, sm.output = smi, sm.n_attribute = 1,
  sm.attribute = axs;
  if (with_bound == 2) sig.output = smi, sm.input = smi, sm.output = so, smi[0] = "s";
  Onnx__NodeProto rs = ONNX__NODE_PROTO__INIT, sm2 = rs, tr = rs, fl = rs;
  char *rsi[2] = {"r", "shp"}, *rso[1] = {"r1"}, *sm2o[1] = {"r2"}, *tro[1] = {"r3"}, *flo[1] = {"r4"};
  Onnx__AttributeProto ax2 = ONNX__ATTRIBUTE_PROTO__INIT, perm = ax2;
  Onnx__AttributeProto *ax2s[1] = {&ax2}, *perms[1] = {&perm};
  int64_t pv[3] = {0, 2, 1}, shv[3] = {-1, 4, 8}, dsh[1] = {3};
  ax2.name = "axis", ax2.has_type = 1, ax2.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, ax2.has_i = 1, ax2.i = -1;
  perm.name = "perm", perm.has_type = 1, perm.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, perm.n_ints = 3,
  perm.ints = pv;
  rs.op_type = "Reshape", rs.n_input = 2, rs.input = rsi, rs.n_output = 1, rs.output = rso;
  sm2.op_type = "Softmax", sm2.n_input = 1, sm2.input = rso, sm2.n_output = 1, sm2.output = sm2o, sm2.n_attribute = 1,
  sm2.attribute = ax2s;
  tr.op_type = "Transpose", tr.n_input = 1, tr.input = sm2o, tr.n_output = 1, tr.output = tro, tr.n_attribute = 1,
  tr.attribute = perms;
  fl.op_type = "Flatten", fl.n_input = 1, fl.input = tro, fl.n_output = 1, fl.output = flo;
  Onnx__TensorProto tsh = ONNX__TENSOR_PROTO__INIT;
  tsh.name = "shp", tsh.n_dims = 1, tsh.dims = dsh, tsh.has_data_type = 1, tsh.data_type = 7, tsh.n_int64_data = 3,
  tsh.int64_data = shv;
  Onnx__TensorProto t3 = ONNX__TENSOR_PROTO__INIT;
  int64_t d3[2] = {8, OUT};
  t3.name = "w3", t3.n_dims = 2, t3.dims = d3, t3.has_data_type = 1, t3.data_type = 1, t3.n_float_data = 8 * OUT,
  t3.float_data = w3;
  Onnx__TensorProto *inits4[5] = {&t1, &tb, &t2, &tsh, &t3};
  Onnx__NodeProto rm = ONNX__NODE_PROTO__INIT;
  char *rmo[1] = {"r5"};
  Onnx__AttributeProto axes = ONNX__ATTRIBUTE_PROTO__INIT, kd = axes;
  Onnx__AttributeProto *rmattr[2] = {&axes, &kd};
  int64_t axv[1] = {1};
  axes.name = "axes", axes.has_type = 1, axes.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, axes.n_ints = 1,
  axes.ints = axv;
  kd.name = "keepdims", kd.has_type = 1, kd.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, kd.has_i = 1, kd.i = 0;
  rm.op_type = "ReduceMean", rm.n_input = 1, rm.input = rso, rm.n_output = 1, rm.output = rmo, rm.n_attribute = 2,
  rm.attribute = rmattr;
  Onnx__NodeProto *nodes4[6] = {&gemm, &relu, &rs, &rm, &mm, &sig};
  char *mi4[2] = {"r5", "w3"};
  if (with_bound == 4) mm.input = mi4;
  Onnx__NodeProto *nodes3[8] = {&gemm, &relu, &rs, &sm2, &tr, &fl, &mm, &sig};
  if (with_bound == 3) mi[0] = "r4";
  Onnx__NodeProto *nodes[5] = {&gemm, &relu, &mm, &sig, &sm};
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "mlp", g.n_node = with_bound == 2 ? 5 : 4, g.node = nodes, g.n_input = 1, g.input = io.ins, g.n_output = 1, g.output = io.outs;
  g.n_initializer = 3, g.initializer = inits;
  if (with_bound == 3) g.n_node = 8, g.node = nodes3, g.n_initializer = 4, g.initializer = inits4;
  if (with_bound == 4) g.n_node = 6, g.node = nodes4, g.n_initializer = 5, g.initializer = inits4;
  return pack_model(&g, with_bound != 0, size);
}

static onnxBackendID find_backend(onnxBackendID *ids, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++) {
    char b[64];
    size_t sz = sizeof b;
    if (!lib.onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_NAME, b, &sz) && !strncmp(b, name, strlen(name)))
      return ids[i];
  }
  return NULL;
}

static uint64_t plans_of(onnxGraph g) {
  kilnGraphStatistics s;
  memset(&s, 0, sizeof s);
  s.size = sizeof s;
  return graph_stats && !graph_stats(g, &s) ? s.memoryPlans : (uint64_t)-1;
}

/* One synchronous run with an input event signalled after RunGraph: x
 * (rank dims xs) in, y (rank dims ys) out. */
static int run_io(onnxBackend be, onnxGraph g, int rank, const uint64_t *xs, const float *x, const uint64_t *ys,
                  float *y) {
  onnxTensorDescriptorV1 in = {ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, "x", ONNXIFI_DATATYPE_FLOAT32,
                               ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)rank, xs, (onnxPointer)x};
  onnxTensorDescriptorV1 out = {ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, "y", ONNXIFI_DATATYPE_FLOAT32,
                                ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)rank, ys, (onnxPointer)y};
  if (lib.onnxSetGraphIO(g, 1, &in, 1, &out)) return 0;
  onnxEvent ev = NULL;
  if (lib.onnxInitEvent(be, &ev)) return 0;
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {ev}};
  onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  int ok = !lib.onnxRunGraph(g, &fin, &fout);
  ok = !lib.onnxSignalEvent(ev) && ok;
  if (ok) ok = !lib.onnxWaitEvent(fout.event);
  if (fout.event && lib.onnxReleaseEvent(fout.event)) ok = 0;
  if (lib.onnxReleaseEvent(ev)) ok = 0;
  return ok;
}

static int run_sync(onnxBackend be, onnxGraph g, int n, const float *x, float *y) {
  uint64_t xs[2] = {(uint64_t)n, IN}, ys[2] = {(uint64_t)n, OUT};
  return run_io(be, g, 2, xs, x, ys, y);
}

static double max_diff(const float *a, const float *b, int n) {
  double m = 0;
  for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Batch nb on two graphs of the same model: one compiled at nb exactly
 * (kiln.bound.N = nb), one at the bound 4096 run with nb rows; alternated
 * run by run (after 3 warm-up runs each), median and min of 41 each; the
 * MLP and the model with the row Softmax / Transpose (kind 3). */
enum { BENCH_RUNS = 41 };
static void *make_cnn(size_t *size);
static void *make_seq(int kind, int *rank, size_t *size);
enum { SEQ_BATCH = 4, SEQ_HID = 32 };

static void bench(onnxBackendID id, bool seq_only) {
  onnxBackend be;
  if (lib.onnxInitBackend(id, NULL, &be)) return;
  static const int sizes[] = {64, 1000, 4000};
  static const int kinds[] = {1, 3, 5, 12, 13}; /* 12, 13: make_seq 2 ([1,S,16]) and 3 ([4,S,16], padded) */
  for (int ki = seq_only ? 3 : 0; ki < 5; ki++)
    for (int si = 0; si < 3; si++) {
      int kind = kinds[ki], rank = 2;
      int nb = sizes[si];
      char exact[16];
      snprintf(exact, sizeof exact, "%d", nb);
      onnxGraph g[2] = {NULL, NULL};
      for (int k = 0; k < 2; k++) {
        size_t msize;
        bound_text = k ? "4096" : exact;
        void *model = kind > 10  ? make_seq(kind - 10, &rank, &msize)
                      : kind == 5 ? make_cnn(&msize)
                                  : make_model(kind, &msize);
        if (lib.onnxInitGraph(be, NULL, msize, model, 0, NULL, &g[k])) g[k] = NULL;
        free(model);
      }
      int lead = kind == 13 ? SEQ_BATCH : 1;
      uint64_t xs[3] = {(uint64_t)lead, (uint64_t)nb, IN}, ys[3] = {(uint64_t)lead, (uint64_t)nb, OUT};
      size_t rows = (size_t)lead * (size_t)nb;
      float *x = malloc(sizeof(float) * rows * IN), *y = malloc(sizeof(float) * rows * OUT);
      for (int i = 0; i < lead * nb * IN; i++) x[i] = (float)sin(0.37 * i);
      double t[2][BENCH_RUNS];
      for (int r = 0; r < BENCH_RUNS + 3 && g[0] && g[1]; r++)
        for (int k = 0; k < 2; k++) {
          double t0 = now_ms();
          if (!(kind > 10 ? run_io(be, g[k], 3, xs, x, ys, y) : run_sync(be, g[k], nb, x, y)))
            printf("bench: run failed\n");
          if (r >= 3) t[k][r - 3] = now_ms() - t0;
        }
      if (g[0] && g[1]) {
        qsort(t[0], BENCH_RUNS, sizeof(double), cmp_d);
        qsort(t[1], BENCH_RUNS, sizeof(double), cmp_d);
        printf("bench %s batch %4d: exact %.3f ms (min %.3f), bound 4096 %.3f ms (min %.3f): bound/exact median %.2f, "
               "min %.2f\n",
               kind == 1 ? "mlp " : kind == 3 ? "rows" : kind == 5 ? "cnn " : kind == 12 ? "seq1" : "seq4", nb,
               t[0][BENCH_RUNS / 2], t[0][0], t[1][BENCH_RUNS / 2], t[1][0],
               t[1][BENCH_RUNS / 2] / t[0][BENCH_RUNS / 2], t[1][0] / t[0][0]);
      }
      for (int k = 0; k < 2; k++)
        if (g[k]) lib.onnxReleaseGraph(g[k]);
      free(x);
      free(y);
    }
  bound_text = "64";
  lib.onnxReleaseBackend(be);
}

static Onnx__AttributeProto ints_attr(const char *name, int64_t *v, size_t n) {
  Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
  a.name = (char *)name, a.has_type = 1, a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, a.n_ints = n, a.ints = v;
  return a;
}

static Onnx__TensorProto float_init(const char *name, int64_t *dims, size_t nd, float *data) {
  Onnx__TensorProto t = ONNX__TENSOR_PROTO__INIT;
  size_t n = 1;
  for (size_t d = 0; d < nd; d++) n *= (size_t)dims[d];
  t.name = (char *)name, t.n_dims = nd, t.dims = dims, t.has_data_type = 1, t.data_type = 1, t.n_float_data = n,
  t.float_data = data;
  return t;
}

/* A CNN over the same x[N,16] and y[N,8]: Reshape [-1,1,4,4] -> Conv 1->32
 * 3x3 pad 1 (+bias) -> Relu -> Conv 32->16 3x3 pad 1 (a reduction of 288:
 * im2col + CLBlast on opencl, then its Relu as an epilogue kernel) -> Relu
 * -> MaxPool 2x2 -> GlobalAveragePool ->
 * Flatten -> MatMul [16,8] -> Sigmoid: every op keeps the images apart. */
static void *make_cnn(size_t *size) {
  io_decl io;
  io_decl_init(&io);
  int64_t shv[4] = {-1, 1, 4, 4}, dsh[1] = {4}, dw1[4] = {32, 1, 3, 3}, db1[1] = {32}, dw2[4] = {16, 32, 3, 3},
          dw4[2] = {16, OUT};
  Onnx__TensorProto tsh = ONNX__TENSOR_PROTO__INIT;
  tsh.name = "shp", tsh.n_dims = 1, tsh.dims = dsh, tsh.has_data_type = 1, tsh.data_type = 7, tsh.n_int64_data = 4,
  tsh.int64_data = shv;
  Onnx__TensorProto t1 = float_init("cw1", dw1, 4, cw1), t2 = float_init("cb1", db1, 1, cb1),
                    t3 = float_init("cw2", dw2, 4, cw2), t4 = float_init("w4", dw4, 2, w4);
  Onnx__TensorProto *inits[5] = {&tsh, &t1, &t2, &t3, &t4};
  int64_t pads[4] = {1, 1, 1, 1}, k2[2] = {2, 2};
  Onnx__AttributeProto ap = ints_attr("pads", pads, 4), ak = ints_attr("kernel_shape", k2, 2),
                       as = ints_attr("strides", k2, 2);
  Onnx__AttributeProto *conv_at[1] = {&ap}, *pool_at[2] = {&ak, &as};
  char *rsi[2] = {"x", "shp"}, *rso[1] = {"a"}, *c1i[3] = {"a", "cw1", "cb1"}, *c1o[1] = {"b"}, *rlo[1] = {"c"},
       *c2i[2] = {"c", "cw2"}, *c2o[1] = {"d0"}, *r2o[1] = {"d"}, *mpo[1] = {"e"}, *gpo[1] = {"f"}, *flo[1] = {"g"},
       *mmi[2] = {"g", "w4"}, *mmo[1] = {"h"}, *sgo[1] = {"y"};
  Onnx__NodeProto nd[10];
  for (int k = 0; k < 10; k++) nd[k] = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  nd[0].op_type = "Reshape", nd[0].n_input = 2, nd[0].input = rsi, nd[0].n_output = 1, nd[0].output = rso;
  nd[1].op_type = "Conv", nd[1].n_input = 3, nd[1].input = c1i, nd[1].n_output = 1, nd[1].output = c1o;
  nd[1].n_attribute = 1, nd[1].attribute = conv_at;
  nd[2].op_type = "Relu", nd[2].n_input = 1, nd[2].input = c1o, nd[2].n_output = 1, nd[2].output = rlo;
  nd[3].op_type = "Conv", nd[3].n_input = 2, nd[3].input = c2i, nd[3].n_output = 1, nd[3].output = c2o;
  nd[3].n_attribute = 1, nd[3].attribute = conv_at;
  nd[4].op_type = "MaxPool", nd[4].n_input = 1, nd[4].input = c2o, nd[4].n_output = 1, nd[4].output = mpo;
  nd[4].n_attribute = 2, nd[4].attribute = pool_at;
  nd[5].op_type = "GlobalAveragePool", nd[5].n_input = 1, nd[5].input = mpo, nd[5].n_output = 1, nd[5].output = gpo;
  nd[6].op_type = "Flatten", nd[6].n_input = 1, nd[6].input = gpo, nd[6].n_output = 1, nd[6].output = flo;
  nd[7].op_type = "MatMul", nd[7].n_input = 2, nd[7].input = mmi, nd[7].n_output = 1, nd[7].output = mmo;
  nd[8].op_type = "Sigmoid", nd[8].n_input = 1, nd[8].input = mmo, nd[8].n_output = 1, nd[8].output = sgo;
  nd[9].op_type = "Relu", nd[9].n_input = 1, nd[9].input = c2o, nd[9].n_output = 1, nd[9].output = r2o;
  Onnx__NodeProto *nodes[10] = {&nd[0], &nd[1], &nd[2], &nd[3], &nd[9], &nd[4], &nd[5], &nd[6], &nd[7], &nd[8]};
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "cnn", g.n_node = 10, g.node = nodes, g.n_input = 1, g.input = io.ins, g.n_output = 1, g.output = io.outs;
  g.n_initializer = 5, g.initializer = inits;
  return pack_model(&g, true, size);
}

/* ---- a symbolic sequence dim S, not always outermost ---- */

static float sb1[SEQ_HID];

static Onnx__NodeProto mk_node(const char *op, char **in, size_t nin, char **out, Onnx__AttributeProto **at,
                               size_t nat) {
  Onnx__NodeProto n = ONNX__NODE_PROTO__INIT;
  n.op_type = (char *)op, n.n_input = nin, n.input = in, n.n_output = 1, n.output = out, n.n_attribute = nat,
  n.attribute = at;
  return n;
}

static Onnx__AttributeProto int_attr(const char *name, int64_t v) {
  Onnx__AttributeProto a = ONNX__ATTRIBUTE_PROTO__INIT;
  a.name = (char *)name, a.has_type = 1, a.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, a.has_i = 1, a.i = v;
  return a;
}

/* x -> y over a sequence dim S (bound "kiln.bound.S" = bound_text), float32:
 * 1: x[S,16] -> MatMul w1 [16,32] -> Add b [32] -> Relu -> MatMul w2 [32,8]
 *    -> Softmax(-1) -> y[S,8] (S outermost: launched over the run's rows);
 * 2: the same over x[1,S,16] -> y[1,S,8] (S after a dim of 1: still a prefix);
 * 3: x[4,S,16] -> MatMul w1 -> Add b -> Relu -> Sub its ReduceMean over -1
 *    -> Reshape [4,-1,4,8] -> Softmax(-1) -> Reshape [4,-1,32] -> Transpose
 *    [1,0,2] -> MatMul w2 -> Tanh -> Transpose [1,0,2] -> y[4,S,8] (the
 *    padded layout: S inner);
 * 4: x[4,S,16] -> MatMul w1 -> Relu -> Softmax(axis 1, over S) -> MatMul w2
 *    -> y[4,S,8]: mixes S (declined);
 * 5: x[4,S,16] -> MatMul w1 -> h; ReduceMax(h, axes [1], keepdims) -> Add h
 *    -> MatMul w2 -> y[4,S,8]: a reduction over S (declined);
 * 6: kind 1's chain over x[N,S,16] -> y[N,S,8], N a second dim_param
 *    (run at 4): two symbols (declined on opencl). */
static void *make_seq(int kind, int *rank, size_t *size) {
  *rank = kind == 1 ? 2 : 3;
  int64_t lead = kind == 2 ? 1 : SEQ_BATCH;
  Onnx__TensorShapeProto__Dimension dl = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT, ds = dl, di = dl, dout = dl;
  dl.value_case = di.value_case = dout.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  dl.dim_value = lead, di.dim_value = IN, dout.dim_value = OUT;
  if (kind == 6) dl.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM, dl.dim_param = "N";
  ds.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM, ds.dim_param = "S";
  Onnx__TensorShapeProto__Dimension *xd[3] = {&dl, &ds, &di}, *yd[3] = {&dl, &ds, &dout};
  Onnx__TensorShapeProto xs = ONNX__TENSOR_SHAPE_PROTO__INIT, ys = xs;
  xs.n_dim = ys.n_dim = (size_t)*rank, xs.dim = *rank == 2 ? xd + 1 : xd, ys.dim = *rank == 2 ? yd + 1 : yd;
  Onnx__TypeProto__Tensor xt = ONNX__TYPE_PROTO__TENSOR__INIT, yt = xt;
  xt.has_elem_type = yt.has_elem_type = 1, xt.elem_type = yt.elem_type = 1, xt.shape = &xs, yt.shape = &ys;
  Onnx__TypeProto xty = ONNX__TYPE_PROTO__INIT, yty = xty;
  xty.value_case = yty.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, xty.tensor_type = &xt, yty.tensor_type = &yt;
  Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, y = x, *ins[1] = {&x}, *outs[1] = {&y};
  x.name = "x", x.type = &xty, y.name = "y", y.type = &yty;
  int64_t dw1[2] = {IN, SEQ_HID}, db[1] = {SEQ_HID}, dw2[2] = {SEQ_HID, OUT}, dsh[1] = {4};
  int64_t sh1[4] = {SEQ_BATCH, -1, 4, 8}, sh2[3] = {SEQ_BATCH, -1, SEQ_HID};
  Onnx__TensorProto tw1 = float_init("w1", dw1, 2, w1), tb = float_init("b", db, 1, sb1),
                    tw2 = float_init("w2", dw2, 2, w2), ts1 = ONNX__TENSOR_PROTO__INIT, ts2 = ts1;
  ts1.name = "sh1", ts1.n_dims = 1, ts1.dims = dsh, ts1.has_data_type = 1, ts1.data_type = 7, ts1.n_int64_data = 4,
  ts1.int64_data = sh1;
  ts2 = ts1, ts2.name = "sh2", ts2.n_int64_data = 3, ts2.int64_data = sh2;
  int64_t dsh2[1] = {3};
  ts2.dims = dsh2;
  Onnx__TensorProto *inits[5] = {&tw1, &tb, &tw2, &ts1, &ts2};
  int64_t axl[1] = {-1}, ax1[1] = {1}, perm[3] = {1, 0, 2};
  Onnx__AttributeProto a_last = int_attr("axis", -1), a_one = int_attr("axis", 1), axes_l = ints_attr("axes", axl, 1),
                       axes_1 = ints_attr("axes", ax1, 1), a_perm = ints_attr("perm", perm, 3),
                       kd = int_attr("keepdims", 1);
  Onnx__AttributeProto *at_last[1] = {&a_last}, *at_one[1] = {&a_one}, *at_rl[2] = {&axes_l, &kd},
                       *at_r1[2] = {&axes_1, &kd}, *at_perm[1] = {&a_perm};
  char *i_mm1[2] = {"x", "w1"}, *o_mm1[1] = {"h0"}, *i_add[2] = {"h0", "b"}, *o_add[1] = {"h1"}, *i_relu[1] = {"h1"},
       *o_relu[1] = {"h2"}, *i_mm2[2] = {"h2", "w2"}, *o_mm2[1] = {"h3"}, *i_sm[1] = {"h3"}, *o_y[1] = {"y"};
  char *i_rm[1] = {"h2"}, *o_rm[1] = {"m"}, *i_sub[2] = {"h2", "m"}, *o_sub[1] = {"c"}, *i_rs1[2] = {"c", "sh1"},
       *o_rs1[1] = {"c4"}, *i_sm4[1] = {"c4"}, *o_sm4[1] = {"p4"}, *i_rs2[2] = {"p4", "sh2"}, *o_rs2[1] = {"p"},
       *i_t1[1] = {"p"}, *o_t1[1] = {"t"}, *i_mmt[2] = {"t", "w2"}, *o_mmt[1] = {"u"}, *i_th[1] = {"u"},
       *o_th[1] = {"v"}, *i_t2[1] = {"v"};
  char *i_relu4[1] = {"h0"}, *i_sm5[1] = {"h2"}, *o_sm5[1] = {"s"}, *i_mm5[2] = {"s", "w2"};
  char *i_rx[1] = {"h0"}, *o_rx[1] = {"mx"}, *i_ad6[2] = {"h0", "mx"}, *o_ad6[1] = {"h6"}, *i_mm6[2] = {"h6", "w2"};
  Onnx__NodeProto nd[12];
  int nn = 0;
  nd[nn++] = mk_node("MatMul", i_mm1, 2, o_mm1, NULL, 0);
  if (kind <= 3 || kind == 6) {
    nd[nn++] = mk_node("Add", i_add, 2, o_add, NULL, 0);
    nd[nn++] = mk_node("Relu", i_relu, 1, o_relu, NULL, 0);
  }
  if (kind <= 2 || kind == 6) {
    nd[nn++] = mk_node("MatMul", i_mm2, 2, o_mm2, NULL, 0);
    nd[nn++] = mk_node("Softmax", i_sm, 1, o_y, at_last, 1);
  } else if (kind == 3) {
    nd[nn++] = mk_node("ReduceMean", i_rm, 1, o_rm, at_rl, 2);
    nd[nn++] = mk_node("Sub", i_sub, 2, o_sub, NULL, 0);
    nd[nn++] = mk_node("Reshape", i_rs1, 2, o_rs1, NULL, 0);
    nd[nn++] = mk_node("Softmax", i_sm4, 1, o_sm4, at_last, 1);
    nd[nn++] = mk_node("Reshape", i_rs2, 2, o_rs2, NULL, 0);
    nd[nn++] = mk_node("Transpose", i_t1, 1, o_t1, at_perm, 1);
    nd[nn++] = mk_node("MatMul", i_mmt, 2, o_mmt, NULL, 0);
    nd[nn++] = mk_node("Tanh", i_th, 1, o_th, NULL, 0);
    nd[nn++] = mk_node("Transpose", i_t2, 1, o_y, at_perm, 1);
  } else if (kind == 4) {
    nd[nn++] = mk_node("Relu", i_relu4, 1, o_relu, NULL, 0);
    nd[nn++] = mk_node("Softmax", i_sm5, 1, o_sm5, at_one, 1);
    nd[nn++] = mk_node("MatMul", i_mm5, 2, o_y, NULL, 0);
  } else {
    nd[nn++] = mk_node("ReduceMax", i_rx, 1, o_rx, at_r1, 2);
    nd[nn++] = mk_node("Add", i_ad6, 2, o_ad6, NULL, 0);
    nd[nn++] = mk_node("MatMul", i_mm6, 2, o_y, NULL, 0);
  }
  Onnx__NodeProto *nodes[12];
  for (int k = 0; k < nn; k++) nodes[k] = &nd[k];
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "seq", g.n_node = (size_t)nn, g.node = nodes, g.n_input = 1, g.input = ins, g.n_output = 1, g.output = outs;
  g.n_initializer = kind == 3 ? 5 : 3, g.initializer = inits;
  bound_key = "kiln.bound.S";
  void *m = pack_model(&g, true, size);
  bound_key = "kiln.bound.N";
  return m;
}

/* make_seq(kind) at each S of seqs (bound 12) on BACKEND and reference:
 * the outputs agree, and BACKEND has want_plans[k] plans after run k. */
static void seq_scenario(onnxBackendID be_id, onnxBackendID ref_id, int kind, const int *seqs, int ns,
                         const uint64_t *want_plans) {
  onnxBackend be, ref;
  onnxGraph gb = NULL, gr = NULL;
  size_t msize;
  int rank;
  bound_text = "12";
  void *model = make_seq(kind, &rank, &msize);
  bound_text = "64";
  CHECK(!lib.onnxInitBackend(be_id, NULL, &be) && !lib.onnxInitBackend(ref_id, NULL, &ref), "init backends");
  CHECK(!lib.onnxInitGraph(be, NULL, msize, model, 0, NULL, &gb), "seq %d: init graph on the backend", kind);
  CHECK(!lib.onnxInitGraph(ref, NULL, msize, model, 0, NULL, &gr), "seq %d: init graph on reference", kind);
  free(model);
  int64_t lead = rank == 2 ? 1 : kind == 2 ? 1 : SEQ_BATCH;
  size_t cap = (size_t)SEQ_BATCH * 16;
  float *x = malloc(sizeof(float) * cap * IN), *yb = malloc(sizeof(float) * cap * OUT),
        *yr = malloc(sizeof(float) * cap * OUT);
  for (int k = 0; k < ns && gb && gr; k++) {
    int n = seqs[k], rows = (int)lead * n;
    uint64_t xs[3] = {(uint64_t)lead, (uint64_t)n, IN}, ys[3] = {(uint64_t)lead, (uint64_t)n, OUT};
    for (int i = 0; i < rows * IN; i++) x[i] = (float)sin(0.37 * i + n);
    memset(yb, 0xff, sizeof(float) * (size_t)rows * OUT);
    const uint64_t *xd = rank == 2 ? xs + 1 : xs, *yd = rank == 2 ? ys + 1 : ys;
    CHECK(run_io(be, gb, rank, xd, x, yd, yb), "seq %d: backend run at S = %d", kind, n);
    CHECK(run_io(ref, gr, rank, xd, x, yd, yr), "seq %d: reference run at S = %d", kind, n);
    double d = max_diff(yb, yr, rows * OUT);
    CHECK(d <= tol, "seq %d, S = %d: backend and reference differ by %g", kind, n, d);
    uint64_t p = plans_of(gb);
    CHECK(p == want_plans[k], "seq %d, after S = %d: %llu memory plans, expected %llu", kind, n, (unsigned long long)p,
          (unsigned long long)want_plans[k]);
    printf("seq %d: S %2d ok (max |backend - reference| %.2g, %llu plan(s))\n", kind, n, d, (unsigned long long)p);
  }
  free(x);
  free(yb);
  free(yr);
  if (gb) CHECK(!lib.onnxReleaseGraph(gb), "release backend graph");
  if (gr) CHECK(!lib.onnxReleaseGraph(gr), "release reference graph");
  CHECK(!lib.onnxReleaseBackend(be) && !lib.onnxReleaseBackend(ref), "release backends");
}

static void scenario(onnxBackendID cpu_id, onnxBackendID ref_id, int with_bound, const int *batches, int nb,
                     const uint64_t *want_plans) {
  onnxBackend cpu, ref;
  onnxGraph gc = NULL, gr = NULL;
  size_t msize;
  void *model = with_bound == 5 ? make_cnn(&msize) : make_model(with_bound, &msize);
  CHECK(!lib.onnxInitBackend(cpu_id, NULL, &cpu) && !lib.onnxInitBackend(ref_id, NULL, &ref), "init backends");
  CHECK(!lib.onnxInitGraph(cpu, NULL, msize, model, 0, NULL, &gc), "init graph on cpu");
  CHECK(!lib.onnxInitGraph(ref, NULL, msize, model, 0, NULL, &gr), "init graph on reference");
  free(model);
  float *x = malloc(sizeof(float) * 100 * IN), *yc = malloc(sizeof(float) * 100 * OUT),
        *yr = malloc(sizeof(float) * 100 * OUT);
  for (int k = 0; k < nb && gc && gr; k++) {
    int n = batches[k];
    for (int i = 0; i < n * IN; i++) x[i] = (float)sin(0.37 * i + n);
    memset(yc, 0xff, sizeof(float) * (size_t)n * OUT);
    CHECK(run_sync(cpu, gc, n, x, yc), "%s bound: backend run at batch %d", with_bound ? "with" : "without", n);
    CHECK(run_sync(ref, gr, n, x, yr), "%s bound: reference run at batch %d", with_bound ? "with" : "without", n);
    double d = max_diff(yc, yr, n * OUT);
    CHECK(d <= tol, "%s bound, batch %d: backend and reference differ by %g", with_bound ? "with" : "without", n, d);
    uint64_t p = plans_of(gc);
    CHECK(p == want_plans[k], "%s bound, after batch %d: %llu memory plans, expected %llu", with_bound ? "with" : "without",
          n, (unsigned long long)p, (unsigned long long)want_plans[k]);
    printf("%s bound: batch %2d ok (max |backend - reference| %.2g, %llu plan(s))\n", with_bound ? "with" : "without", n, d,
           (unsigned long long)p);
  }
  free(x);
  free(yc);
  free(yr);
  if (gc) CHECK(!lib.onnxReleaseGraph(gc), "release cpu graph");
  if (gr) CHECK(!lib.onnxReleaseGraph(gr), "release reference graph");
  CHECK(!lib.onnxReleaseBackend(cpu) && !lib.onnxReleaseBackend(ref), "release backends");
}

/* ---- two symbols: x[N,S,16], N the batch, S a sequence dim ---- */

static float lng[SEQ_HID], lnb[SEQ_HID];
static const char *two_bn = "3", *two_bs = "12"; /* make_two's bounds */

/* A float32 value info's storage; dims: a size, or -1 for N, -2 for S, -3
 * for M. */
typedef struct vi_buf {
  Onnx__TensorShapeProto__Dimension d[4], *dp[4];
  Onnx__TensorShapeProto s;
  Onnx__TypeProto__Tensor t;
  Onnx__TypeProto ty;
  Onnx__ValueInfoProto v;
} vi_buf;

static Onnx__ValueInfoProto *vi_make(vi_buf *b, const char *name, int rank, const int64_t *dims) {
  for (int k = 0; k < rank; k++) {
    b->d[k] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    if (dims[k] > 0)
      b->d[k].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, b->d[k].dim_value = dims[k];
    else
      b->d[k].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM,
      b->d[k].dim_param = dims[k] == -1 ? "N" : dims[k] == -2 ? "S" : "M";
    b->dp[k] = &b->d[k];
  }
  b->s = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  b->s.n_dim = (size_t)rank, b->s.dim = b->dp;
  b->t = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  b->t.has_elem_type = 1, b->t.elem_type = 1, b->t.shape = &b->s;
  b->ty = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  b->ty.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, b->ty.tensor_type = &b->t;
  b->v = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  b->v.name = (char *)name, b->v.type = &b->ty;
  return &b->v;
}

/* The outputs of make_two(kind): names and dims (-1 N, -2 S). */
enum { TWO_OUTS = 3 };
static const char *const two_out[TWO_OUTS] = {"y", "z", "q"};
static const int64_t two_dims[TWO_OUTS][3] = {{-1, -2, OUT}, {-1, SEQ_HID, -2}, {-2, -1, SEQ_HID}};
static int two_nout(int kind) { return kind == 2 ? 3 : 1; }

/* x[N,S,16] -> y[N,S,8], float32, opset 17; with_bound: kiln.bound.N = 3
 * and kiln.bound.S = 12:
 * 1: MatMul w1 [16,32] -> Add b -> Relu -> LayerNormalization(-1) ->
 *    MatMul w2 [32,8] -> Softmax(-1) (N outer, S inner: padded);
 * 2: MatMul w1 -> h0 -> Transpose [0,2,1] -> Tanh -> z[N,32,S] (an output:
 *    S moved innermost) -> Transpose [0,2,1] -> Add h0 -> Transpose [1,0,2]
 *    -> Sigmoid -> q[S,N,32] (an output: S outer, N inner) -> Transpose
 *    [1,0,2] -> MatMul w2 -> y;
 * 3: MatMul w1 -> Softmax(axis 1, over S) -> MatMul w2: mixes S (declined
 *    on opencl);
 * 4: Reshape [-1,16] (N and S merged: [N*S,16]) -> MatMul w1 -> Relu ->
 *    MatMul w2 -> y[M,8] (declined on opencl). */
static void *make_two(int kind, bool with_bound, size_t *size) {
  vi_buf bx, bo[TWO_OUTS];
  static const int64_t xdims[3] = {-1, -2, IN}, mdims[2] = {-3, OUT};
  Onnx__ValueInfoProto *ins[1] = {vi_make(&bx, "x", 3, xdims)}, *outs[TWO_OUTS];
  for (int o = 0; o < TWO_OUTS; o++) outs[o] = vi_make(&bo[o], two_out[o], 3, two_dims[o]);
  if (kind == 4) outs[0] = vi_make(&bo[0], "y", 2, mdims);
  int64_t dw1[2] = {IN, SEQ_HID}, db[1] = {SEQ_HID}, dw2[2] = {SEQ_HID, OUT};
  Onnx__TensorProto tw1 = float_init("w1", dw1, 2, w1), tb = float_init("b", db, 1, sb1),
                    tw2 = float_init("w2", dw2, 2, w2), tg = float_init("g", db, 1, lng), tbe = float_init("be", db, 1, lnb);
  Onnx__TensorProto *inits[5] = {&tw1, &tw2, &tb, &tg, &tbe};
  int64_t p021[3] = {0, 2, 1}, p102[3] = {1, 0, 2};
  Onnx__AttributeProto a_last = int_attr("axis", -1), a_one = int_attr("axis", 1), a_p021 = ints_attr("perm", p021, 3),
                       a_p102 = ints_attr("perm", p102, 3);
  Onnx__AttributeProto *at_last[1] = {&a_last}, *at_one[1] = {&a_one}, *at_021[1] = {&a_p021}, *at_102[1] = {&a_p102};
  char *i_mm1[2] = {"x", "w1"}, *o_h0[1] = {"h0"}, *i_add[2] = {"h0", "b"}, *o_h1[1] = {"h1"}, *i_relu[1] = {"h1"},
       *o_h2[1] = {"h2"}, *i_ln[3] = {"h2", "g", "be"}, *o_h3[1] = {"h3"}, *i_mm2[2] = {"h3", "w2"}, *o_h4[1] = {"h4"},
       *i_sm[1] = {"h4"}, *o_y[1] = {"y"};
  char *i_t1[1] = {"h0"}, *o_t[1] = {"t"}, *i_th[1] = {"t"}, *o_z[1] = {"z"}, *i_t2[1] = {"z"}, *o_u[1] = {"u"},
       *i_ad2[2] = {"u", "h0"}, *i_t3[1] = {"h1"}, *o_p[1] = {"p"}, *i_sg[1] = {"p"}, *o_q[1] = {"q"}, *i_t4[1] = {"q"},
       *o_r[1] = {"r"}, *i_mm4[2] = {"r", "w2"};
  char *i_sm3[1] = {"h0"}, *o_s[1] = {"s"}, *i_mm3[2] = {"s", "w2"};
  char *i_rs[2] = {"x", "shp"}, *o_xr[1] = {"xr"}, *i_mr[2] = {"xr", "w1"}, *i_rl4[1] = {"h0"}, *i_mm42[2] = {"h2", "w2"};
  int64_t dshp[1] = {2}, shp[2] = {-1, IN};
  Onnx__TensorProto tshp = ONNX__TENSOR_PROTO__INIT;
  tshp.name = "shp", tshp.n_dims = 1, tshp.dims = dshp, tshp.has_data_type = 1, tshp.data_type = 7,
  tshp.n_int64_data = 2, tshp.int64_data = shp;
  Onnx__NodeProto nd[12];
  int nn = 0;
  nd[nn++] = mk_node("MatMul", i_mm1, 2, o_h0, NULL, 0);
  if (kind == 1) {
    nd[nn++] = mk_node("Add", i_add, 2, o_h1, NULL, 0);
    nd[nn++] = mk_node("Relu", i_relu, 1, o_h2, NULL, 0);
    nd[nn++] = mk_node("LayerNormalization", i_ln, 3, o_h3, at_last, 1);
    nd[nn++] = mk_node("MatMul", i_mm2, 2, o_h4, NULL, 0);
    nd[nn++] = mk_node("Softmax", i_sm, 1, o_y, at_last, 1);
  } else if (kind == 2) {
    nd[nn++] = mk_node("Transpose", i_t1, 1, o_t, at_021, 1);
    nd[nn++] = mk_node("Tanh", i_th, 1, o_z, NULL, 0);
    nd[nn++] = mk_node("Transpose", i_t2, 1, o_u, at_021, 1);
    nd[nn++] = mk_node("Add", i_ad2, 2, o_h1, NULL, 0);
    nd[nn++] = mk_node("Transpose", i_t3, 1, o_p, at_102, 1);
    nd[nn++] = mk_node("Sigmoid", i_sg, 1, o_q, NULL, 0);
    nd[nn++] = mk_node("Transpose", i_t4, 1, o_r, at_102, 1);
    nd[nn++] = mk_node("MatMul", i_mm4, 2, o_y, NULL, 0);
  } else if (kind == 3) {
    nd[nn++] = mk_node("Softmax", i_sm3, 1, o_s, at_one, 1);
    nd[nn++] = mk_node("MatMul", i_mm3, 2, o_y, NULL, 0);
  } else {
    nn = 0;
    nd[nn++] = mk_node("Reshape", i_rs, 2, o_xr, NULL, 0);
    nd[nn++] = mk_node("MatMul", i_mr, 2, o_h0, NULL, 0);
    nd[nn++] = mk_node("Relu", i_rl4, 1, o_h2, NULL, 0);
    nd[nn++] = mk_node("MatMul", i_mm42, 2, o_y, NULL, 0);
    inits[2] = &tshp;
  }
  Onnx__NodeProto *nodes[12];
  for (int k = 0; k < nn; k++) nodes[k] = &nd[k];
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "two", g.n_node = (size_t)nn, g.node = nodes, g.n_input = 1, g.input = ins;
  g.n_output = (size_t)two_nout(kind), g.output = outs, g.n_initializer = kind == 1 ? 5 : kind == 4 ? 3 : 2;
  g.initializer = inits;
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  os.domain = "", os.has_version = 1, os.version = 17;
  Onnx__OperatorSetIdProto *oss[1] = {&os};
  Onnx__StringStringEntryProto bn = ONNX__STRING_STRING_ENTRY_PROTO__INIT, bs = bn;
  bn.key = "kiln.bound.N", bn.value = (char *)two_bn, bs.key = "kiln.bound.S", bs.value = (char *)two_bs;
  Onnx__StringStringEntryProto *props[2] = {&bn, &bs};
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 8, m.n_opset_import = 1, m.opset_import = oss, m.graph = &g;
  if (with_bound) m.n_metadata_props = 2, m.metadata_props = props;
  *size = onnx__model_proto__get_packed_size(&m);
  void *buf = malloc(*size);
  onnx__model_proto__pack(&m, buf);
  return buf;
}

/* One synchronous run of make_two(kind) at (n, s): x in, the outputs in y[o]. */
static int run_two(onnxBackend be, onnxGraph g, int kind, int n, int s, const float *x, float *const *y) {
  uint64_t xs[3] = {(uint64_t)n, (uint64_t)s, IN}, ys[TWO_OUTS][3];
  onnxTensorDescriptorV1 in = {ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, "x", ONNXIFI_DATATYPE_FLOAT32,
                               ONNXIFI_MEMORY_TYPE_CPU, 3, xs, (onnxPointer)x};
  onnxTensorDescriptorV1 out[TWO_OUTS];
  for (int o = 0; o < two_nout(kind); o++) {
    for (int d = 0; d < 3; d++)
      ys[o][d] = two_dims[o][d] == -1 ? (uint64_t)n : two_dims[o][d] == -2 ? (uint64_t)s : (uint64_t)two_dims[o][d];
    out[o] = (onnxTensorDescriptorV1){ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, two_out[o], ONNXIFI_DATATYPE_FLOAT32,
                                      ONNXIFI_MEMORY_TYPE_CPU, 3, ys[o], (onnxPointer)y[o]};
  }
  if (kind == 4) /* y[N*S,8] */
    ys[0][0] = (uint64_t)n * (uint64_t)s, ys[0][1] = OUT, out[0].dimensions = 2;
  if (lib.onnxSetGraphIO(g, 1, &in, (uint32_t)two_nout(kind), out)) return 0;
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  if (lib.onnxInitEvent(be, &fin.event)) return 0;
  int ok = !lib.onnxSignalEvent(fin.event) && !lib.onnxRunGraph(g, &fin, &fout);
  if (ok) ok = !lib.onnxWaitEvent(fout.event);
  if (fout.event && lib.onnxReleaseEvent(fout.event)) ok = 0;
  if (lib.onnxReleaseEvent(fin.event)) ok = 0;
  return ok;
}

/* make_two(kind) at each (N, S) of runs on BACKEND and reference: every
 * output agrees, and BACKEND has want_plans[k] plans after run k. */
static void two_scenario(onnxBackendID be_id, onnxBackendID ref_id, int kind, bool with_bound, const int (*runs)[2],
                         int nr, const uint64_t *want_plans) {
  onnxBackend be, ref;
  onnxGraph gb = NULL, gr = NULL;
  size_t msize;
  void *model = make_two(kind, with_bound, &msize);
  CHECK(!lib.onnxInitBackend(be_id, NULL, &be) && !lib.onnxInitBackend(ref_id, NULL, &ref), "init backends");
  CHECK(!lib.onnxInitGraph(be, NULL, msize, model, 0, NULL, &gb), "two %d: init graph on the backend", kind);
  CHECK(!lib.onnxInitGraph(ref, NULL, msize, model, 0, NULL, &gr), "two %d: init graph on reference", kind);
  free(model);
  enum { CAP = 8 * 16 * SEQ_HID };
  float *x = malloc(sizeof(float) * CAP), *yb[TWO_OUTS], *yr[TWO_OUTS];
  for (int o = 0; o < TWO_OUTS; o++) yb[o] = malloc(sizeof(float) * CAP), yr[o] = malloc(sizeof(float) * CAP);
  for (int k = 0; k < nr && gb && gr; k++) {
    int n = runs[k][0], s = runs[k][1];
    for (int i = 0; i < n * s * IN; i++) x[i] = (float)sin(0.37 * i + n + 3 * s);
    for (int o = 0; o < TWO_OUTS; o++) memset(yb[o], 0xff, sizeof(float) * CAP);
    CHECK(run_two(be, gb, kind, n, s, x, yb), "two %d: backend run at N = %d, S = %d", kind, n, s);
    CHECK(run_two(ref, gr, kind, n, s, x, yr), "two %d: reference run at N = %d, S = %d", kind, n, s);
    double d = 0;
    for (int o = 0; o < two_nout(kind); o++) {
      int cnt = n * s * (o == 0 ? OUT : SEQ_HID);
      d = fmax(d, max_diff(yb[o], yr[o], cnt));
      CHECK(yb[o][cnt] != yb[o][cnt], "two %d, N = %d, S = %d: output %s written past its %d elements", kind, n, s,
            two_out[o], cnt);
    }
    CHECK(d <= tol, "two %d, N = %d, S = %d: backend and reference differ by %g", kind, n, s, d);
    uint64_t p = plans_of(gb);
    CHECK(p == want_plans[k], "two %d, after N = %d, S = %d: %llu memory plans, expected %llu", kind, n, s,
          (unsigned long long)p, (unsigned long long)want_plans[k]);
    printf("two %d%s: N %d S %2d ok (max |backend - reference| %.2g, %llu plan(s))\n", kind, with_bound ? "" : " (no bound)",
           n, s, d, (unsigned long long)p);
  }
  free(x);
  for (int o = 0; o < TWO_OUTS; o++) free(yb[o]), free(yr[o]);
  if (gb) CHECK(!lib.onnxReleaseGraph(gb), "release backend graph");
  if (gr) CHECK(!lib.onnxReleaseGraph(gr), "release reference graph");
  CHECK(!lib.onnxReleaseBackend(be) && !lib.onnxReleaseBackend(ref), "release backends");
}

/* --bench two [SB]: make_two(kind 1, 2) at (N, S) on two graphs, one with
 * its bounds exactly there, one under the bounds N = 8, S = SB (128; a smaller run
 * of the bounds' variant: per-block launches and copies, whole blocks of
 * padding in the prefix steps); alternated run by run as bench() does.
 * First a sweep: one graph (bounds 8, 128) run once at each of 8 sizes,
 * the total wall time with its compiles (compare a process with
 * KILN_CL_SYMBOLIC=0: a variant per size; KILN_CACHE_DIR=off for both). */
static void bench_two(onnxBackendID id, int sb) {
  onnxBackend be;
  if (lib.onnxInitBackend(id, NULL, &be)) return;
  static const int sizes[][2] = {{1, 16}, {8, 32}, {4, 64}, {8, 100}, {8, 256}, {8, 512}, {8, 1000}};
  char sbt[16];
  snprintf(sbt, sizeof sbt, "%d", sb);
  size_t CAP = (size_t)8 * (size_t)(sb > 128 ? sb : 128) * SEQ_HID;
  float *x = malloc(sizeof(float) * CAP), *y[TWO_OUTS];
  for (int o = 0; o < TWO_OUTS; o++) y[o] = malloc(sizeof(float) * CAP);
  for (size_t i = 0; i < CAP; i++) x[i] = (float)sin(0.37 * (double)i);
  static const int sweep[][2] = {{1, 16}, {2, 32}, {3, 48}, {4, 64}, {5, 80}, {6, 96}, {7, 112}, {8, 128}};
  for (int kind = 1; kind <= 2; kind++) {
    size_t msize;
    two_bn = "8", two_bs = "128";
    void *model = make_two(kind, true, &msize);
    onnxGraph g = NULL;
    if (lib.onnxInitGraph(be, NULL, msize, model, 0, NULL, &g)) g = NULL;
    free(model);
    double t0 = now_ms();
    for (int r = 0; r < 8 && g; r++)
      if (!run_two(be, g, kind, sweep[r][0], sweep[r][1], x, y)) printf("bench: run failed\n");
    if (g) printf("bench two %d sweep of 8 sizes: %.1f ms, %llu variant(s)\n", kind, now_ms() - t0,
                  (unsigned long long)plans_of(g));
    if (g) lib.onnxReleaseGraph(g);
  }
  for (int kind = 1; kind <= 2; kind++)
    for (int si = 0; si < 7 && sizes[si][1] <= sb; si++) {
      int n = sizes[si][0], sq = sizes[si][1];
      char en[16], es[16];
      snprintf(en, sizeof en, "%d", n);
      snprintf(es, sizeof es, "%d", sq);
      onnxGraph g[2] = {NULL, NULL};
      for (int k = 0; k < 2; k++) {
        size_t msize;
        two_bn = k ? "8" : en, two_bs = k ? sbt : es;
        void *model = make_two(kind, true, &msize);
        if (lib.onnxInitGraph(be, NULL, msize, model, 0, NULL, &g[k])) g[k] = NULL;
        free(model);
      }
      double t[2][BENCH_RUNS];
      for (int r = 0; r < BENCH_RUNS + 3 && g[0] && g[1]; r++)
        for (int k = 0; k < 2; k++) {
          double t0 = now_ms();
          if (!run_two(be, g[k], kind, n, sq, x, y)) printf("bench: run failed\n");
          if (r >= 3) t[k][r - 3] = now_ms() - t0;
        }
      if (g[0] && g[1]) {
        qsort(t[0], BENCH_RUNS, sizeof(double), cmp_d);
        qsort(t[1], BENCH_RUNS, sizeof(double), cmp_d);
        printf("bench two %d N %d S %4d: exact %.3f ms (min %.3f), bounds 8,%d %.3f ms (min %.3f): bound/exact "
               "median %.2f, min %.2f\n",
               kind, n, sq, t[0][BENCH_RUNS / 2], t[0][0], sb, t[1][BENCH_RUNS / 2], t[1][0],
               t[1][BENCH_RUNS / 2] / t[0][BENCH_RUNS / 2], t[1][0] / t[0][0]);
      }
      for (int k = 0; k < 2; k++)
        if (g[k]) lib.onnxReleaseGraph(g[k]);
    }
  two_bn = "3", two_bs = "12";
  free(x);
  for (int o = 0; o < TWO_OUTS; o++) free(y[o]);
  lib.onnxReleaseBackend(be);
}

int main(int argc, char **argv) {
  if (argc < 2 || !onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, argv[1], &lib)) {
    printf("symbolic_batch: cannot load the plugin\n");
    return 2;
  }
  for (int i = 0; i < IN * HID; i++) w1[i] = (float)cos(0.11 * i) * 0.3f;
  for (int i = 0; i < HID; i++) b1[i] = (float)sin(0.7 * i) * 0.1f;
  for (int i = 0; i < HID * OUT; i++) w2[i] = (float)sin(0.05 * i + 1) * 0.4f;
  for (int i = 0; i < 8 * OUT; i++) w3[i] = (float)cos(0.3 * i + 2) * 0.5f;
  for (int i = 0; i < 32 * 9; i++) cw1[i] = (float)sin(0.21 * i + 0.5) * 0.4f;
  for (int i = 0; i < 32; i++) cb1[i] = (float)cos(0.9 * i) * 0.1f;
  for (int i = 0; i < 16 * 32 * 9; i++) cw2[i] = (float)cos(0.013 * i + 0.3) * 0.08f;
  for (int i = 0; i < 16 * OUT; i++) w4[i] = (float)sin(0.17 * i + 1.5) * 0.5f;
  for (int i = 0; i < SEQ_HID; i++) sb1[i] = (float)cos(0.4 * i + 0.2) * 0.2f;
  for (int i = 0; i < SEQ_HID; i++) lng[i] = 1.0f + (float)sin(0.3 * i) * 0.2f, lnb[i] = (float)cos(0.6 * i) * 0.1f;
  onnxGetExtensionFunctionAddressFunction get_ext =
      (onnxGetExtensionFunctionAddressFunction)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  onnxBackendID ids[8];
  size_t n = 8;
  CHECK(!lib.onnxGetBackendIDs(ids, &n), "backend IDs (KILN_DEVICE=cpu,reference expected)");
  const char *be_name = argc > 2 ? argv[2] : "kiln-cpu";
  bool opencl = !strncmp(be_name, "kiln-opencl", 11);
  if (opencl) tol = 1e-4; /* CLBlast's summation order, OpenCL's exp */
  onnxBackendID cpu = find_backend(ids, n, be_name), ref = find_backend(ids, n, "kiln-reference");
  CHECK(cpu && ref, "both the %s and the reference backend are offered", be_name);
  if (opencl && argc > 3 && !strcmp(argv[3], "--bench") && cpu && ref) {
    onnxExtensionFunctionPointer bfp;
    if (get_ext && !get_ext(cpu, "kilnGetGraphStatistics", &bfp))
      graph_stats = (kilnGetGraphStatisticsFunction)(void (*)(void))bfp;
    if (argc > 4 && !strcmp(argv[4], "two")) bench_two(cpu, argc > 5 ? atoi(argv[5]) : 128);
    else bench(cpu, argc > 4 && !strcmp(argv[4], "seq"));
    for (size_t i = 0; i < n; i++) (void)lib.onnxReleaseBackendID(ids[i]);
    onnxifi_unload(&lib);
    return 0;
  }
  onnxExtensionFunctionPointer fp;
  if (cpu && get_ext && !get_ext(cpu, "kilnGetGraphStatistics", &fp))
    graph_stats = (kilnGetGraphStatisticsFunction)(void (*)(void))fp;
  CHECK(graph_stats != NULL, "kilnGetGraphStatistics");
  for (int b = 0; b < 2 && cpu && ref; b++) {
    uint64_t caps = 0;
    size_t sz = sizeof caps;
    CHECK(!lib.onnxGetBackendInfo(b ? ref : cpu, ONNXIFI_BACKEND_CAPABILITIES, &caps, &sz) &&
              (caps & ONNXIFI_CAPABILITY_SYMBOLIC_BATCH_SIZE) && (caps & ONNXIFI_CAPABILITY_SYMBOLIC_SIZE_TENSORS),
          "%s backend reports SYMBOLIC_BATCH_SIZE and SYMBOLIC_SIZE_TENSORS (caps 0x%llx)", b ? "reference" : "cpu",
          (unsigned long long)caps);
  }
  if (cpu && ref) {
    /* bound 64 from the model: one plan for 1, 7, 64; one more for 65 (beyond) */
    static const int b1s[] = {1, 7, 64, 65, 7};
    static const uint64_t p1s[] = {1, 1, 1, 2, 2};
    scenario(cpu, ref, 1, b1s, 5, p1s);
    /* no bound: planned at the first batch (7), again only beyond it */
    static const int b2s[] = {7, 3, 7, 9, 1};
    static const uint64_t p2s[] = {1, 1, 1, 2, 2};
    scenario(cpu, ref, 0, b2s, 5, p2s);
  }
  if (cpu && ref && opencl) {
    /* rows mixed (Softmax over the batch): compiled at the bound 64 (kept
       for batch 64), found not resizable, then a variant per batch */
    static const int b3s[] = {1, 7, 64, 7};
    static const uint64_t p3s[] = {2, 3, 3, 3};
    scenario(cpu, ref, 2, b3s, 4, p3s);
  }
  if (cpu && ref) {
    /* rows kept apart through a reshape, a row softmax, a transpose of the
       inner dims and a flatten: one plan for 1, 7, 64 */
    static const int b4s[] = {1, 7, 64, 3};
    static const uint64_t p4s[] = {1, 1, 1, 1};
    scenario(cpu, ref, 3, b4s, 4, p4s);
    /* a row reduction (ReduceMean over an inner axis) feeding a MatMul */
    scenario(cpu, ref, 4, b4s, 4, p4s);
    /* a CNN: Conv (direct and im2col + GEMM), MaxPool, GlobalAveragePool */
    scenario(cpu, ref, 5, b4s, 4, p4s);
  }
  if (cpu && ref) {
    /* a sequence dim S (bound 12): S outermost, after a dim of 1, inner
       (padded); one plan for 5, 12, 1, one more for 13 (beyond) */
    static const int ss[] = {5, 12, 1, 13, 5};
    static const uint64_t ps[] = {1, 1, 1, 2, 2};
    for (int kind = 1; kind <= 3; kind++) seq_scenario(cpu, ref, kind, ss, 5, ps);
  }
  if (cpu && ref && opencl) {
    /* S mixed (Softmax over S, ReduceMax over S): the bound's variant (12)
       and one per size after it */
    static const int ss[] = {5, 12, 1, 13, 5};
    static const uint64_t ps[] = {2, 2, 3, 4, 4};
    for (int kind = 4; kind <= 5; kind++) seq_scenario(cpu, ref, kind, ss, 5, ps);
  }
  if (cpu && ref) {
    /* two symbols (N: the first run's 4, S: 12): one plan at the bounds, one
       more at S = 13 */
    static const int ss[] = {5, 12, 1, 13, 5};
    static const uint64_t ps[] = {1, 1, 1, 2, 2};
    seq_scenario(cpu, ref, 6, ss, 5, ps);
    /* [N,S,H] under kiln.bound.N = 3, kiln.bound.S = 12: sizes below and at
       both bounds in mixed order with one plan; beyond N (4: planned at
       N = 4, S = 12), then beyond S (13: at 4, 13), then within both */
    static const int r2[][2] = {{2, 5}, {3, 12}, {1, 1}, {3, 7}, {1, 12}, {2, 12}, {4, 5}, {2, 13}, {3, 9}, {1, 1}};
    static const uint64_t p2[] = {1, 1, 1, 1, 1, 1, 2, 3, 3, 3};
    for (int kind = 1; kind <= 2; kind++) two_scenario(cpu, ref, kind, true, r2, 10, p2);
    /* no bounds: the first run's sizes (N = 1 first), raised one symbol at
       a time */
    static const int r3[][2] = {{1, 5}, {1, 3}, {2, 4}, {1, 5}, {2, 6}, {2, 2}};
    static const uint64_t p3[] = {1, 1, 2, 2, 3, 3};
    for (int kind = 1; kind <= 2; kind++) two_scenario(cpu, ref, kind, false, r3, 6, p3);
    /* a Softmax over S: the bound's variant, then one per size on opencl
       (right answers all the same); cpu plans it once (at the bounds) */
    static const int r4[][2] = {{2, 5}, {3, 12}, {1, 1}, {2, 5}};
    static const uint64_t p4o[] = {2, 2, 3, 3}, p4c[] = {1, 1, 1, 1};
    two_scenario(cpu, ref, 3, true, r4, 4, opencl ? p4o : p4c);
    /* a Reshape merging N and S ([N*S,16]): the same */
    two_scenario(cpu, ref, 4, true, r4, 4, opencl ? p4o : p4c);
  }
  for (size_t i = 0; i < n; i++) (void)lib.onnxReleaseBackendID(ids[i]);
  onnxifi_unload(&lib);
  printf("symbolic_batch: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
