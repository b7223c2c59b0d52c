/* tests/abi: checks every exported ONNXIFI function of the plugin against the
 * status codes documented in onnx/onnxifi.h (and onnx/onnxifi_ext.h), plus
 * kiln's extensions (include/kiln/kiln_ext.h). The plugin is loaded the way a
 * host loads it: Debian's onnxifi_loader (dlopen) with the path in argv[1];
 * onnxGetExtensionFunctionAddress is fetched with dlsym because the loader is
 * built without ONNXIFI_ENABLE_EXT.
 *
 *   abi PATH/libonnxifi-kiln.so
 *
 * Each check prints one line, "ok   NAME: expected X, got Y" or
 * "FAIL NAME: expected X, got Y"; the last line is "abi: N passed, N failed"
 * and the exit status is 1 when any check failed (2 when the plugin cannot
 * be loaded at all). Test models are built here with protobuf-c, or read
 * from Debian's ONNX node tests. */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/kiln/kiln_ext.h"
#include "onnx/onnx.pb-c.h"
#include "tests/casefile.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------------ */
/* reporting                                                                 */

static int n_pass, n_fail;
static struct onnxifi_library lib;
static onnxGetExtensionFunctionAddressFunction get_ext;
static kilnGetLastErrorMessageFunction last_error;
static kilnGetEventStatusFunction event_status;
static onnxSetIOAndRunGraphFunction set_io_and_run;
static onnxBackendID g_id; /* the first backend ID (the one the tests use) */
static onnxBackend g_be;   /* a backend on g_id */

/* Something that is no ONNXIFI handle of any kind. */
static int bogus_object;
#define BOGUS ((void *)&bogus_object)

static const char *stname(onnxStatus s) {
  switch (s) {
#define S(x) \
  case ONNXIFI_STATUS_##x: return #x;
    S(SUCCESS) S(FALLBACK) S(INVALID_ID) S(INVALID_SIZE) S(INVALID_POINTER) S(INVALID_PROTOBUF) S(INVALID_MODEL)
    S(INVALID_BACKEND) S(INVALID_GRAPH) S(INVALID_EVENT) S(INVALID_STATE) S(INVALID_NAME) S(INVALID_SHAPE)
    S(INVALID_DATATYPE) S(INVALID_MEMORY_TYPE) S(INVALID_MEMORY_LOCATION) S(INVALID_FENCE_TYPE) S(INVALID_PROPERTY)
    S(UNSUPPORTED_TAG) S(UNSUPPORTED_VERSION) S(UNSUPPORTED_OPERATOR) S(UNSUPPORTED_ATTRIBUTE) S(UNSUPPORTED_SHAPE)
    S(UNSUPPORTED_DATATYPE) S(UNSUPPORTED_MEMORY_TYPE) S(UNSUPPORTED_FENCE_TYPE) S(UNSUPPORTED_PROPERTY)
    S(UNIDENTIFIED_NAME) S(MISMATCHING_SHAPE) S(MISMATCHING_DATATYPE) S(NO_SYSTEM_MEMORY) S(NO_DEVICE_MEMORY)
    S(NO_SYSTEM_RESOURCES) S(NO_DEVICE_RESOURCES) S(BACKEND_UNAVAILABLE) S(INTERNAL_ERROR)
#undef S
  }
  static char buf[4][32];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "status 0x%x", (unsigned)s);
  return buf[k];
}

static const char *evstate_name(onnxEventState s) {
  switch (s) {
  case ONNXIFI_EVENT_STATE_INVALID: return "INVALID";
  case ONNXIFI_EVENT_STATE_NONSIGNALLED: return "NONSIGNALLED";
  case ONNXIFI_EVENT_STATE_SIGNALLED: return "SIGNALLED";
  }
  return "(unknown state)";
}

/* printf into one of a few rotating static buffers (for check names). */
static const char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static const char *fmt(const char *f, ...) {
  static char buf[8][512];
  static int k;
  k = (k + 1) % 8;
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf[k], sizeof buf[k], f, ap);
  va_end(ap);
  return buf[k];
}

static bool report(bool ok, const char *name, const char *expected, const char *got) {
  if (ok) n_pass++;
  else n_fail++;
  printf("%s %s: expected %s, got %s\n", ok ? "ok  " : "FAIL", name, expected, got);
  fflush(stdout);
  return ok;
}

static const char *plugin_message(void) {
  const char *m = NULL;
  if (last_error && last_error(&m) == ONNXIFI_STATUS_SUCCESS && m) return m;
  return "";
}

static bool check_st(const char *name, onnxStatus got, onnxStatus want) {
  bool ok = report(got == want, name, stname(want), stname(got));
  if (!ok && got != ONNXIFI_STATUS_SUCCESS && got != ONNXIFI_STATUS_FALLBACK && *plugin_message())
    printf("     (plugin's message: %s)\n", plugin_message());
  return ok;
}

static bool check(const char *name, bool ok, const char *expected, const char *gotfmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool check(const char *name, bool ok, const char *expected, const char *gotfmt, ...) {
  char got[512];
  va_list ap;
  va_start(ap, gotfmt);
  vsnprintf(got, sizeof got, gotfmt, ap);
  va_end(ap);
  return report(ok, name, expected, got);
}

static bool check_size(const char *name, size_t got, size_t want) {
  return check(name, got == want, fmt("%zu", want), "%zu", got);
}

static bool check_null(const char *name, const void *p) {
  return check(name, p == NULL, "NULL", "%p", p);
}

static bool check_floats(const char *name, const float *got, const float *want, int n) {
  for (int i = 0; i < n; i++)
    if (!(got[i] - want[i] <= 1e-6f && want[i] - got[i] <= 1e-6f))
      return check(name, false, fmt("element %d = %g", i, (double)want[i]), "%g", (double)got[i]);
  return check(name, true, fmt("%d values matching", n), "%d matching", n);
}

static bool contains_word(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; *p;) {
    while (*p == ' ') p++;
    const char *e = p;
    while (*e && *e != ' ') e++;
    if ((size_t)(e - p) == n && n && !strncmp(p, word, n)) return true;
    p = e;
  }
  return false;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts)) {
  }
}

/* ------------------------------------------------------------------------ */
/* model building with protobuf-c                                            */

#define MB_N 8
#define T_F32 ONNXIFI_DATATYPE_FLOAT32
#define T_I32 ONNXIFI_DATATYPE_INT32
#define T_STRING 8
#define T_BOOL 9

typedef struct mb_value {
  Onnx__ValueInfoProto vi;
  Onnx__TypeProto tp;
  Onnx__TypeProto__Tensor tt;
  Onnx__TensorShapeProto sh;
  Onnx__TensorShapeProto__Dimension d[MB_N];
  Onnx__TensorShapeProto__Dimension *dp[MB_N];
} mb_value;

typedef struct mb_node {
  Onnx__NodeProto np;
  char *in[MB_N], *out[MB_N];
  Onnx__AttributeProto at[MB_N];
  Onnx__AttributeProto *ap[MB_N];
} mb_node;

typedef struct mb_init {
  Onnx__TensorProto tp;
  int64_t dims[MB_N];
  float data[64];
} mb_init;

/* A ModelProto whose messages all live in this struct (do not copy it). */
typedef struct mb {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
  mb_value ins[MB_N], outs[MB_N];
  Onnx__ValueInfoProto *inp[MB_N], *outp[MB_N];
  mb_node nodes[MB_N];
  Onnx__NodeProto *np[MB_N];
  mb_init inits[MB_N];
  Onnx__TensorProto *ip[MB_N];
} mb;

static void mb_begin(mb *m, int64_t opset) {
  memset(m, 0, sizeof *m);
  m->model = (Onnx__ModelProto)ONNX__MODEL_PROTO__INIT;
  m->model.has_ir_version = 1;
  m->model.ir_version = 8;
  m->model.producer_name = (char *)"kiln-tests-abi";
  m->opset = (Onnx__OperatorSetIdProto)ONNX__OPERATOR_SET_ID_PROTO__INIT;
  m->opset.domain = (char *)"";
  m->opset.has_version = 1;
  m->opset.version = opset;
  m->opsets[0] = &m->opset;
  m->model.n_opset_import = 1;
  m->model.opset_import = m->opsets;
  m->graph = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
  m->graph.name = (char *)"abi";
  m->graph.input = m->inp;
  m->graph.output = m->outp;
  m->graph.node = m->np;
  m->graph.initializer = m->ip;
  m->model.graph = &m->graph;
}

/* A tensor ValueInfo; rank -1: no shape; a dims[i] < 0 is the symbol sym. */
static void mb_value_set(mb_value *v, const char *name, int dtype, int rank, const int64_t *dims, const char *sym) {
  v->vi = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  v->vi.name = (char *)name;
  v->tp = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  v->tp.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  v->tp.tensor_type = &v->tt;
  v->tt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  v->tt.has_elem_type = 1;
  v->tt.elem_type = dtype;
  if (rank >= 0) {
    v->sh = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
    v->sh.n_dim = (size_t)rank;
    v->sh.dim = v->dp;
    for (int i = 0; i < rank; i++) {
      v->d[i] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
      if (dims[i] >= 0) {
        v->d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        v->d[i].dim_value = dims[i];
      } else {
        v->d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        v->d[i].dim_param = (char *)sym;
      }
      v->dp[i] = &v->d[i];
    }
    v->tt.shape = &v->sh;
  }
  v->vi.type = &v->tp;
}

static void mb_input(mb *m, const char *name, int dtype, int rank, const int64_t *dims, const char *sym) {
  size_t k = m->graph.n_input++;
  mb_value_set(&m->ins[k], name, dtype, rank, dims, sym);
  m->inp[k] = &m->ins[k].vi;
}

static void mb_output(mb *m, const char *name, int dtype, int rank, const int64_t *dims, const char *sym) {
  size_t k = m->graph.n_output++;
  mb_value_set(&m->outs[k], name, dtype, rank, dims, sym);
  m->outp[k] = &m->outs[k].vi;
}

/* A node with one or two inputs (in1 may be NULL) and one output. */
static int mb_node_add(mb *m, const char *op, const char *in0, const char *in1, const char *out) {
  int k = (int)m->graph.n_node++;
  mb_node *n = &m->nodes[k];
  n->np = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  n->np.op_type = (char *)op;
  n->np.name = (char *)out; /* node named after its output */
  n->in[0] = (char *)in0;
  n->in[1] = (char *)in1;
  n->np.n_input = in1 ? 2 : 1;
  n->np.input = n->in;
  n->out[0] = (char *)out;
  n->np.n_output = 1;
  n->np.output = n->out;
  n->np.attribute = n->ap;
  m->np[k] = &n->np;
  return k;
}

static void mb_attr_float(mb *m, int node, const char *name, float f) {
  mb_node *n = &m->nodes[node];
  size_t k = n->np.n_attribute++;
  n->at[k] = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
  n->at[k].name = (char *)name;
  n->at[k].has_type = 1;
  n->at[k].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
  n->at[k].has_f = 1;
  n->at[k].f = f;
  n->ap[k] = &n->at[k];
}

static void mb_init_f32(mb *m, const char *name, int rank, const int64_t *dims, const float *data, int n) {
  size_t k = m->graph.n_initializer++;
  mb_init *in = &m->inits[k];
  in->tp = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  in->tp.name = (char *)name;
  in->tp.has_data_type = 1;
  in->tp.data_type = T_F32;
  in->tp.n_dims = (size_t)rank;
  memcpy(in->dims, dims, (size_t)rank * sizeof *dims);
  in->tp.dims = in->dims;
  memcpy(in->data, data, (size_t)n * sizeof *data);
  in->tp.n_float_data = (size_t)n;
  in->tp.float_data = in->data;
  m->ip[k] = &in->tp;
}

/* Serializes the model into a malloc'd buffer. */
static void *mb_pack(mb *m, size_t *size) {
  size_t n = onnx__model_proto__get_packed_size(&m->model);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    fprintf(stderr, "abi: out of memory\n");
    exit(2);
  }
  onnx__model_proto__pack(&m->model, buf);
  *size = n;
  return buf;
}

static const int64_t D23[2] = {2, 3};
static const uint64_t S23[2] = {2, 3};

/* Relu relu_x[n] -> relu_y[n] (or relu_y[out_sym] when out_sym is set). */
static void *model_relu(int n, const char *out_sym, size_t *size) {
  static mb m;
  int64_t d = n, sd = -1;
  mb_begin(&m, 13);
  mb_input(&m, "relu_x", T_F32, 1, &d, NULL);
  mb_output(&m, "relu_y", T_F32, 1, out_sym ? &sd : &d, out_sym);
  mb_node_add(&m, "Relu", "relu_x", NULL, "relu_y");
  return mb_pack(&m, size);
}

/* Relu on a 0-D tensor. */
static void *model_relu_scalar(size_t *size) {
  static mb m;
  mb_begin(&m, 13);
  mb_input(&m, "sx", T_F32, 0, NULL, NULL);
  mb_output(&m, "sy", T_F32, 0, NULL, NULL);
  mb_node_add(&m, "Relu", "sx", NULL, "sy");
  return mb_pack(&m, size);
}

/* Add add_a[2,3] + add_b[2,3] -> add_sum[2,3]. */
static void *model_add(size_t *size) {
  static mb m;
  mb_begin(&m, 13);
  mb_input(&m, "add_a", T_F32, 2, D23, NULL);
  mb_input(&m, "add_b", T_F32, 2, D23, NULL);
  mb_output(&m, "add_sum", T_F32, 2, D23, NULL);
  mb_node_add(&m, "Add", "add_a", "add_b", "add_sum");
  return mb_pack(&m, size);
}

/* Add x[2,3] + w[2,3] -> z[2,3] where w is a graph input meant as a weight.
 * variant 0: no initializers at all;
 * variant 1: w also given as an initializer (and listed in graph.input);
 * variant 2: z = (x + w) + c with c an initializer not listed in graph.input. */
static const float W_INIT[6] = {100, 200, 300, 400, 500, 600};
static const float C_INIT[6] = {1000, 1000, 1000, 1000, 1000, 1000};
static void *model_addw(int variant, size_t *size) {
  static mb m;
  mb_begin(&m, 13);
  mb_input(&m, "x", T_F32, 2, D23, NULL);
  mb_input(&m, "w", T_F32, 2, D23, NULL);
  mb_output(&m, "z", T_F32, 2, D23, NULL);
  if (variant == 2) {
    mb_node_add(&m, "Add", "x", "w", "t");
    mb_node_add(&m, "Add", "t", "c", "z");
    mb_init_f32(&m, "c", 2, D23, C_INIT, 6);
  } else {
    mb_node_add(&m, "Add", "x", "w", "z");
  }
  if (variant == 1) mb_init_f32(&m, "w", 2, D23, W_INIT, 6);
  return mb_pack(&m, size);
}

/* Gather(data[5,4], idx[3] int32) on axis 0 -> rows[3,4]. */
static void *model_gather(size_t *size) {
  static mb m;
  static const int64_t d54[2] = {5, 4}, d3 = 3, d34[2] = {3, 4};
  mb_begin(&m, 13);
  mb_input(&m, "data", T_F32, 2, d54, NULL);
  mb_input(&m, "idx", T_I32, 1, &d3, NULL);
  mb_output(&m, "rows", T_F32, 2, d34, NULL);
  mb_node_add(&m, "Gather", "data", "idx", "rows");
  return mb_pack(&m, size);
}

/* Not flag[4] (bool) -> nflag[4]. */
static void *model_not(size_t *size) {
  static mb m;
  int64_t d = 4;
  mb_begin(&m, 13);
  mb_input(&m, "flag", T_BOOL, 1, &d, NULL);
  mb_output(&m, "nflag", T_BOOL, 1, &d, NULL);
  mb_node_add(&m, "Not", "flag", NULL, "nflag");
  return mb_pack(&m, size);
}

/* Identity on bool (a fallback used when Not is unsupported). */
static void *model_identity_bool(size_t *size) {
  static mb m;
  int64_t d = 4;
  mb_begin(&m, 13);
  mb_input(&m, "flag", T_BOOL, 1, &d, NULL);
  mb_output(&m, "nflag", T_BOOL, 1, &d, NULL);
  mb_node_add(&m, "Identity", "flag", NULL, "nflag");
  return mb_pack(&m, size);
}

/* Models that onnxGetBackendCompatibility / onnxInitGraph must reject. */
enum bad_model {
  BAD_UNKNOWN_OP,
  BAD_UNKNOWN_ATTR,
  BAD_STRING_INPUT,
  BAD_OPSET_99,
  BAD_IR_99,
  BAD_UNDEFINED_INPUT,
  BAD_NO_GRAPH,
  BAD_DUPLICATE_OUTPUT,
  BAD_NO_OPSET
};
#define UNKNOWN_OP_NAME "KilnAbiNoSuchOp"
#define UNKNOWN_ATTR_NAME "kiln_abi_no_such_attr"

static void *model_bad(enum bad_model kind, size_t *size) {
  static mb m;
  int64_t d = 4;
  mb_begin(&m, kind == BAD_OPSET_99 ? 99 : 13);
  int dt = kind == BAD_STRING_INPUT ? T_STRING : T_F32;
  mb_input(&m, "bx", dt, 1, &d, NULL);
  mb_output(&m, "by", dt, 1, &d, NULL);
  switch (kind) {
  case BAD_UNKNOWN_OP: mb_node_add(&m, UNKNOWN_OP_NAME, "bx", NULL, "by"); break;
  case BAD_UNKNOWN_ATTR: mb_attr_float(&m, mb_node_add(&m, "Relu", "bx", NULL, "by"), UNKNOWN_ATTR_NAME, 1.0f); break;
  case BAD_STRING_INPUT: mb_node_add(&m, "Identity", "bx", NULL, "by"); break;
  case BAD_UNDEFINED_INPUT: mb_node_add(&m, "Add", "bx", "never_defined", "by"); break;
  case BAD_DUPLICATE_OUTPUT:
    mb_node_add(&m, "Relu", "bx", NULL, "by");
    mb_node_add(&m, "Relu", "bx", NULL, "by");
    break;
  default: mb_node_add(&m, "Relu", "bx", NULL, "by"); break;
  }
  if (kind == BAD_IR_99) m.model.ir_version = 99;
  if (kind == BAD_NO_GRAPH) m.model.graph = NULL;
  if (kind == BAD_NO_OPSET) m.model.n_opset_import = 0;
  return mb_pack(&m, size);
}

/* ------------------------------------------------------------------------ */
/* ABI helpers                                                               */

static onnxTensorDescriptorV1 td(const char *name, onnxEnum dtype, uint32_t rank, const uint64_t *shape,
                                 const void *buf) {
  onnxTensorDescriptorV1 d;
  memset(&d, 0, sizeof d);
  d.tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
  d.name = name;
  d.dataType = dtype;
  d.memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  d.dimensions = rank;
  d.shape = shape;
  d.buffer = (onnxPointer)(uintptr_t)buf;
  return d;
}

static onnxMemoryFenceV1 fence(onnxEvent e) {
  onnxMemoryFenceV1 f;
  memset(&f, 0, sizeof f);
  f.tag = ONNXIFI_TAG_MEMORY_FENCE_V1;
  f.type = ONNXIFI_SYNCHRONIZATION_EVENT;
  f.event = e;
  return f;
}

static onnxEvent new_event(void) {
  onnxEvent e = NULL;
  if (lib.onnxInitEvent(g_be, &e) != ONNXIFI_STATUS_SUCCESS) return NULL;
  return e;
}

static onnxEvent new_signalled_event(void) {
  onnxEvent e = new_event();
  if (e && lib.onnxSignalEvent(e) != ONNXIFI_STATUS_SUCCESS) {
    onnxStatus st = lib.onnxReleaseEvent(e);
    (void)st;
    return NULL;
  }
  return e;
}

static void release_event(onnxEvent e) {
  if (!e) return;
  onnxStatus st = lib.onnxReleaseEvent(e);
  (void)st;
}

/* After a RunGraph that should have failed: if it ran anyway, finish it. */
static void drop_run(onnxStatus st, onnxMemoryFenceV1 *out) {
  if (st == ONNXIFI_STATUS_SUCCESS && out->event) {
    onnxStatus w = lib.onnxWaitEvent(out->event);
    (void)w;
    release_event(out->event);
  }
  out->event = NULL;
}

static void drop_graph(onnxGraph *g) {
  if (*g) {
    onnxStatus st = lib.onnxReleaseGraph(*g);
    (void)st;
  }
  *g = NULL;
}

static onnxGraph init_graph(const void *model, size_t size) {
  onnxGraph g = NULL;
  if (lib.onnxInitGraph(g_be, NULL, size, model, 0, NULL, &g) != ONNXIFI_STATUS_SUCCESS) return NULL;
  return g;
}

/* One synchronous run: a fresh input event, signalled after RunGraph
 * returned (as ONNX's driver does), then a wait on the output event.
 * Returns RunGraph's status; *wait_st gets WaitEvent's. */
static onnxStatus run_once(onnxGraph g, onnxStatus *wait_st) {
  *wait_st = ONNXIFI_STATUS_INTERNAL_ERROR;
  onnxEvent in = new_event();
  if (!in) return ONNXIFI_STATUS_INTERNAL_ERROR;
  onnxMemoryFenceV1 fin = fence(in), fout = fence(NULL);
  onnxStatus st = lib.onnxRunGraph(g, &fin, &fout);
  onnxStatus sig = lib.onnxSignalEvent(in);
  (void)sig;
  if (st == ONNXIFI_STATUS_SUCCESS) {
    *wait_st = lib.onnxWaitEvent(fout.event);
    release_event(fout.event);
  }
  release_event(in);
  return st;
}

/* A thread that signals an event after a delay unless cancelled first. */
typedef struct delayed_signal {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  onnxEvent event;
  int delay_ms;
  bool cancelled, fired;
  onnxStatus status; /* onnxSignalEvent's result when fired */
  double fired_at;   /* now_ms() when fired */
} delayed_signal;

static void *delayed_signal_main(void *arg) {
  delayed_signal *d = arg;
  struct timespec until;
  clock_gettime(CLOCK_MONOTONIC, &until);
  until.tv_sec += d->delay_ms / 1000;
  until.tv_nsec += (long)(d->delay_ms % 1000) * 1000000L;
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&d->mu);
  while (!d->cancelled) {
    if (pthread_cond_timedwait(&d->cv, &d->mu, &until)) break; /* timed out */
  }
  bool fire = !d->cancelled;
  pthread_mutex_unlock(&d->mu);
  if (fire) {
    d->fired_at = now_ms();
    d->status = lib.onnxSignalEvent(d->event);
    d->fired = true;
  }
  return NULL;
}

static bool delayed_signal_start(delayed_signal *d, onnxEvent e, int delay_ms) {
  memset(d, 0, sizeof *d);
  d->event = e;
  d->delay_ms = delay_ms;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_mutex_init(&d->mu, NULL);
  pthread_cond_init(&d->cv, &ca);
  pthread_condattr_destroy(&ca);
  if (pthread_create(&d->thread, NULL, delayed_signal_main, d)) {
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    return false;
  }
  return true;
}

/* Cancels (if not fired yet) and joins; returns whether it fired. */
static bool delayed_signal_finish(delayed_signal *d) {
  pthread_mutex_lock(&d->mu);
  d->cancelled = true;
  pthread_cond_broadcast(&d->cv);
  pthread_mutex_unlock(&d->mu);
  pthread_join(d->thread, NULL);
  pthread_cond_destroy(&d->cv);
  pthread_mutex_destroy(&d->mu);
  return d->fired;
}

/* ------------------------------------------------------------------------ */
/* onnxGetBackendIDs / onnxReleaseBackendID                                  */

static size_t g_count; /* number of backends with KILN_DEVICE as given */

static onnxStatus ids_with_device(const char *device, onnxBackendID *ids, size_t *n) {
  const char *old = getenv("KILN_DEVICE");
  char *saved = old ? strdup(old) : NULL;
  setenv("KILN_DEVICE", device, 1);
  onnxStatus st = lib.onnxGetBackendIDs(ids, n);
  if (saved) setenv("KILN_DEVICE", saved, 1);
  else unsetenv("KILN_DEVICE");
  free(saved);
  return st;
}

static void test_backend_ids(void) {
  onnxStatus st;
  size_t n;
  onnxBackendID ids[8];

  check_st("GetBackendIDs(ids, numBackends=NULL)", lib.onnxGetBackendIDs(ids, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  check_st("GetBackendIDs(NULL, NULL)", lib.onnxGetBackendIDs(NULL, NULL), ONNXIFI_STATUS_INVALID_POINTER);

  n = 0;
  check_st("GetBackendIDs(NULL array) status", lib.onnxGetBackendIDs(NULL, &n), ONNXIFI_STATUS_FALLBACK);
  check("GetBackendIDs(NULL array) count", n == g_count, fmt("%zu (the backend count)", g_count), "%zu", n);
  n = 5;
  check_st("GetBackendIDs(NULL array, capacity 5) status", lib.onnxGetBackendIDs(NULL, &n), ONNXIFI_STATUS_FALLBACK);
  check_size("GetBackendIDs(NULL array, capacity 5) count", n, g_count);

  for (int i = 0; i < 8; i++) ids[i] = BOGUS;
  n = g_count - 1;
  check_st("GetBackendIDs(capacity count-1) status", lib.onnxGetBackendIDs(ids, &n), ONNXIFI_STATUS_FALLBACK);
  check_size("GetBackendIDs(capacity count-1) count", n, g_count);
  bool untouched = true;
  for (int i = 0; i < 8; i++) untouched &= ids[i] == BOGUS;
  check("GetBackendIDs(capacity count-1) leaves the array alone", untouched, "array untouched", "%s",
        untouched ? "array untouched" : "array written");

  n = 8;
  st = lib.onnxGetBackendIDs(ids, &n);
  check_st("GetBackendIDs(capacity 8) status", st, ONNXIFI_STATUS_SUCCESS);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    check_size("GetBackendIDs(capacity 8) count", n, g_count);
    bool ok = n <= 8;
    for (size_t i = 0; ok && i < n; i++) ok = ids[i] && ids[i] != BOGUS && ids[i] != g_id;
    for (size_t i = n; ok && i < 8; i++) ok = ids[i] == BOGUS;
    check("GetBackendIDs(capacity 8) gives fresh non-NULL IDs, the rest untouched", ok, "fresh IDs", "%s",
          ok ? "fresh IDs" : "NULL, reused or extra IDs");
    onnxBackendID first = n ? ids[0] : NULL;
    for (size_t i = 1; i < n && i < 8; i++) (void)lib.onnxReleaseBackendID(ids[i]);
    if (first) {
      char buf[64];
      size_t sz = sizeof buf;
      check_st("GetBackendInfo(NAME) on a second ID", lib.onnxGetBackendInfo(first, ONNXIFI_BACKEND_NAME, buf, &sz),
               ONNXIFI_STATUS_SUCCESS);
      check_st("ReleaseBackendID(fresh ID)", lib.onnxReleaseBackendID(first), ONNXIFI_STATUS_SUCCESS);
      check_st("ReleaseBackendID(same ID again)", lib.onnxReleaseBackendID(first), ONNXIFI_STATUS_INVALID_ID);
      sz = sizeof buf;
      check_st("GetBackendInfo(released ID)", lib.onnxGetBackendInfo(first, ONNXIFI_BACKEND_NAME, buf, &sz),
               ONNXIFI_STATUS_INVALID_ID);
      onnxBackend be = BOGUS;
      check_st("InitBackend(released ID)", lib.onnxInitBackend(first, NULL, &be), ONNXIFI_STATUS_INVALID_ID);
      check_null("InitBackend(released ID) sets *backend to NULL", be);
    }
  }
  check_st("ReleaseBackendID(unknown pointer)", lib.onnxReleaseBackendID(BOGUS), ONNXIFI_STATUS_INVALID_ID);
  check_st("ReleaseBackendID(NULL)", lib.onnxReleaseBackendID(NULL), ONNXIFI_STATUS_INVALID_ID);
  check_st("ReleaseBackendID(a backend handle)", lib.onnxReleaseBackendID(g_be), ONNXIFI_STATUS_INVALID_ID);

  /* KILN_DEVICE selects what is offered: a bad value must be an error. */
  static const char *bad_devices[] = {"bogus", "opencl:x:y"}; /* malformed: refused before any driver loads */
  for (int k = 0; k < 2; k++) {
    const char *dev = bad_devices[k];
    n = 8;
    for (int i = 0; i < 8; i++) ids[i] = NULL;
    st = ids_with_device(dev, ids, &n);
    bool err = st != ONNXIFI_STATUS_SUCCESS && st != ONNXIFI_STATUS_FALLBACK;
    check(fmt("GetBackendIDs with KILN_DEVICE=%s", dev), err, "an error status", "%s", stname(st));
    check(fmt("GetBackendIDs with KILN_DEVICE=%s gives a documented code", dev),
          st == ONNXIFI_STATUS_INTERNAL_ERROR || st == ONNXIFI_STATUS_BACKEND_UNAVAILABLE,
          "INTERNAL_ERROR or BACKEND_UNAVAILABLE", "%s", stname(st));
    if (st == ONNXIFI_STATUS_SUCCESS)
      for (size_t i = 0; i < n && i < 8; i++) (void)lib.onnxReleaseBackendID(ids[i]);
    n = 0;
    st = ids_with_device(dev, NULL, &n);
    check(fmt("GetBackendIDs(NULL array) with KILN_DEVICE=%s", dev),
          st != ONNXIFI_STATUS_SUCCESS && st != ONNXIFI_STATUS_FALLBACK, "an error status", "%s", stname(st));
  }
  n = 8;
  st = ids_with_device("reference", ids, &n);
  check_st("GetBackendIDs with KILN_DEVICE=reference", st, ONNXIFI_STATUS_SUCCESS);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    check_size("GetBackendIDs with KILN_DEVICE=reference count", n, 1);
    for (size_t i = 0; i < n && i < 8; i++) (void)lib.onnxReleaseBackendID(ids[i]);
  }
}

/* ------------------------------------------------------------------------ */
/* onnxGetBackendInfo                                                        */

enum info_kind { INFO_STRING, INFO_U64 };
static const struct {
  onnxBackendInfo type;
  const char *name;
  enum info_kind kind;
} infos[] = {
    {ONNXIFI_BACKEND_ONNXIFI_VERSION, "ONNXIFI_VERSION", INFO_U64},
    {ONNXIFI_BACKEND_NAME, "NAME", INFO_STRING},
    {ONNXIFI_BACKEND_VENDOR, "VENDOR", INFO_STRING},
    {ONNXIFI_BACKEND_VERSION, "VERSION", INFO_STRING},
    {ONNXIFI_BACKEND_EXTENSIONS, "EXTENSIONS", INFO_STRING},
    {ONNXIFI_BACKEND_DEVICE, "DEVICE", INFO_STRING},
    {ONNXIFI_BACKEND_DEVICE_TYPE, "DEVICE_TYPE", INFO_U64},
    {ONNXIFI_BACKEND_ONNX_IR_VERSION, "ONNX_IR_VERSION", INFO_STRING},
    {ONNXIFI_BACKEND_OPSET_VERSION, "OPSET_VERSION", INFO_STRING},
    {ONNXIFI_BACKEND_CAPABILITIES, "CAPABILITIES", INFO_U64},
    {ONNXIFI_BACKEND_INIT_PROPERTIES, "INIT_PROPERTIES", INFO_U64},
    {ONNXIFI_BACKEND_MEMORY_TYPES, "MEMORY_TYPES", INFO_U64},
    {ONNXIFI_BACKEND_GRAPH_INIT_PROPERTIES, "GRAPH_INIT_PROPERTIES", INFO_U64},
    {ONNXIFI_BACKEND_SYNCHRONIZATION_TYPES, "SYNCHRONIZATION_TYPES", INFO_U64},
    {ONNXIFI_BACKEND_MEMORY_SIZE, "MEMORY_SIZE", INFO_U64},
    {ONNXIFI_BACKEND_MAX_GRAPH_SIZE, "MAX_GRAPH_SIZE", INFO_U64},
    {ONNXIFI_BACKEND_MAX_GRAPH_COUNT, "MAX_GRAPH_COUNT", INFO_U64},
};

/* Checks a space-separated list whose every word passes word_ok. */
static bool words_ok(const char *s, bool (*word_ok)(const char *w, size_t n)) {
  int words = 0;
  for (const char *p = s; *p;) {
    if (*p == ' ') {
      p++;
      continue;
    }
    const char *e = p;
    while (*e && *e != ' ') e++;
    if (!word_ok(p, (size_t)(e - p))) return false;
    words++;
    p = e;
  }
  return words > 0;
}

static bool is_decimal(const char *w, size_t n) {
  if (!n) return false;
  for (size_t i = 0; i < n; i++)
    if (w[i] < '0' || w[i] > '9') return false;
  return true;
}

static bool is_domain_version(const char *w, size_t n) {
  const char *colon = memchr(w, ':', n);
  if (!colon) return false;
  return is_decimal(colon + 1, n - (size_t)(colon + 1 - w));
}

static void check_info_value(const char *nm, onnxBackendInfo type, const void *buf, size_t size) {
  uint64_t v = 0;
  if (size == sizeof v) memcpy(&v, buf, sizeof v);
  const char *s = buf;
  switch (type) {
  case ONNXIFI_BACKEND_ONNXIFI_VERSION:
    check(fmt("GetBackendInfo(%s) value", nm), v == UINT64_C(0x0000000100000000), "0x0000000100000000 (1.0)",
          "0x%016llx", (unsigned long long)v);
    break;
  case ONNXIFI_BACKEND_NAME:
    check(fmt("GetBackendInfo(%s) fits a 50-byte buffer", nm), size <= 50 && size > 1, "1 < size <= 50",
          "size %zu (\"%s\")", size, s);
    break;
  case ONNXIFI_BACKEND_VENDOR:
  case ONNXIFI_BACKEND_VERSION:
  case ONNXIFI_BACKEND_DEVICE:
    check(fmt("GetBackendInfo(%s) non-empty", nm), size > 1, "a non-empty string", "\"%s\"", s);
    break;
  case ONNXIFI_BACKEND_EXTENSIONS: {
    char names[] = KILN_EXTENSION_NAMES;
    for (char *save = NULL, *w = strtok_r(names, " ", &save); w; w = strtok_r(NULL, " ", &save))
      check(fmt("GetBackendInfo(EXTENSIONS) lists %s (kiln_ext.h)", w), contains_word(s, w),
            fmt("\"%s\" in the list", w), "\"%s\"", s);
    /* onnx/onnxifi_ext.h: a backend implementing
     * onnxGetExtensionFunctionAddress MUST list "onnx_extension_function". */
    check("GetBackendInfo(EXTENSIONS) lists onnx_extension_function (onnxifi_ext.h MUST)",
          contains_word(s, "onnx_extension_function"), "\"onnx_extension_function\" in the list", "\"%s\"", s);
    break;
  }
  case ONNXIFI_BACKEND_DEVICE_TYPE:
    check(fmt("GetBackendInfo(%s) is one device type", nm),
          v == ONNXIFI_DEVICE_TYPE_NPU || v == ONNXIFI_DEVICE_TYPE_DSP || v == ONNXIFI_DEVICE_TYPE_GPU ||
              v == ONNXIFI_DEVICE_TYPE_CPU || v == ONNXIFI_DEVICE_TYPE_FPGA ||
              v == ONNXIFI_DEVICE_TYPE_HETEROGENEOUS,
          "an ONNXIFI_DEVICE_TYPE_* value", "0x%llx", (unsigned long long)v);
    break;
  case ONNXIFI_BACKEND_ONNX_IR_VERSION:
    check(fmt("GetBackendInfo(%s) is a list of decimal versions", nm), words_ok(s, is_decimal),
          "e.g. \"3 4 5\"", "\"%s\"", s);
    break;
  case ONNXIFI_BACKEND_OPSET_VERSION:
    check(fmt("GetBackendInfo(%s) is a list of domain:version", nm), words_ok(s, is_domain_version),
          "e.g. \"ai.onnx:7\"", "\"%s\"", s);
    break;
  case ONNXIFI_BACKEND_CAPABILITIES: {
    uint64_t lo = v & 0xffffffffu;
    bool ok = !(lo & ~(uint64_t)0x3f);
    if (lo & ONNXIFI_CAPABILITY_SYMBOLIC_SIZE_TENSORS) ok &= !!(lo & ONNXIFI_CAPABILITY_SYMBOLIC_BATCH_SIZE);
    if (lo & ONNXIFI_CAPABILITY_VARIABLE_BATCH_SIZE) ok &= !!(lo & ONNXIFI_CAPABILITY_SYMBOLIC_BATCH_SIZE);
    if (lo & ONNXIFI_CAPABILITY_VARIABLE_SIZE_OUTPUTS)
      ok &= (lo & ONNXIFI_CAPABILITY_SYMBOLIC_SIZE_TENSORS) && (lo & ONNXIFI_CAPABILITY_VARIABLE_BATCH_SIZE);
    check(fmt("GetBackendInfo(%s) known, consistent flags", nm), ok, "defined flags with their prerequisites",
          "0x%llx", (unsigned long long)v);
    break;
  }
  case ONNXIFI_BACKEND_INIT_PROPERTIES:
  case ONNXIFI_BACKEND_GRAPH_INIT_PROPERTIES:
    check(fmt("GetBackendInfo(%s) only vendor (high 32) bits", nm), !(v & 0xffffffffu), "low 32 bits 0",
          "0x%llx", (unsigned long long)v);
    break;
  case ONNXIFI_BACKEND_MEMORY_TYPES:
    check(fmt("GetBackendInfo(%s) known flags", nm), !(v & 0xffffffffu & ~(uint64_t)0xf),
          "a combination of ONNXIFI_MEMORY_TYPE_* flags", "0x%llx", (unsigned long long)v);
    break;
  case ONNXIFI_BACKEND_SYNCHRONIZATION_TYPES:
    check(fmt("GetBackendInfo(%s) known flags", nm), !(v & 0xffffffffu & ~(uint64_t)ONNXIFI_SYNCHRONIZATION_IMPLICIT),
          "EVENT (0) or IMPLICIT", "0x%llx", (unsigned long long)v);
    break;
  case ONNXIFI_BACKEND_MEMORY_SIZE:
  case ONNXIFI_BACKEND_MAX_GRAPH_SIZE:
  case ONNXIFI_BACKEND_MAX_GRAPH_COUNT:
    check(fmt("GetBackendInfo(%s) > 0", nm), v > 0, "> 0", "%llu", (unsigned long long)v);
    break;
  default: break;
  }
}

static uint64_t g_sync_types; /* ONNXIFI_BACKEND_SYNCHRONIZATION_TYPES */

static void test_backend_info(void) {
  for (size_t k = 0; k < sizeof infos / sizeof *infos; k++) {
    const char *nm = infos[k].name;
    onnxBackendInfo type = infos[k].type;
    size_t sz = 12345;
    onnxStatus st = lib.onnxGetBackendInfo(g_id, type, NULL, &sz);
    check_st(fmt("GetBackendInfo(%s, NULL value)", nm), st, ONNXIFI_STATUS_FALLBACK);
    size_t need = sz;
    if (infos[k].kind == INFO_U64) check_size(fmt("GetBackendInfo(%s, NULL value) size", nm), need, 8);
    else check(fmt("GetBackendInfo(%s, NULL value) size", nm), need >= 1 && need < 4096, "1..4095", "%zu", need);
    if (st != ONNXIFI_STATUS_FALLBACK || need == 0 || need >= 4096) continue;

    /* Too small: FALLBACK, the needed size, and nothing written. */
    unsigned char *buf = malloc(need + 16);
    memset(buf, 0xAB, need + 16);
    sz = need - 1;
    st = lib.onnxGetBackendInfo(g_id, type, buf, &sz);
    check_st(fmt("GetBackendInfo(%s, buffer of %zu)", nm, need - 1), st, ONNXIFI_STATUS_FALLBACK);
    check_size(fmt("GetBackendInfo(%s, buffer of %zu) size", nm, need - 1), sz, need);
    bool untouched = true;
    for (size_t i = 0; i < need + 16; i++) untouched &= buf[i] == 0xAB;
    check(fmt("GetBackendInfo(%s, small buffer) writes nothing", nm), untouched, "buffer untouched", "%s",
          untouched ? "buffer untouched" : "buffer written");
    free(buf);

    /* Exactly the size (a malloc of that size: ASan sees any overrun). */
    buf = malloc(need);
    sz = need;
    st = lib.onnxGetBackendInfo(g_id, type, buf, &sz);
    check_st(fmt("GetBackendInfo(%s, exact buffer)", nm), st, ONNXIFI_STATUS_SUCCESS);
    check_size(fmt("GetBackendInfo(%s, exact buffer) size", nm), sz, need);
    if (st == ONNXIFI_STATUS_SUCCESS) {
      if (infos[k].kind == INFO_STRING) {
        bool term = buf[need - 1] == 0 && strlen((char *)buf) == need - 1;
        check(fmt("GetBackendInfo(%s) NUL-terminated", nm), term, fmt("strlen %zu + NUL", need - 1), "%s",
              term ? fmt("strlen %zu + NUL", need - 1) : "no NUL at the end");
        if (term) check_info_value(nm, type, buf, need);
      } else {
        check_info_value(nm, type, buf, need);
        if (type == ONNXIFI_BACKEND_SYNCHRONIZATION_TYPES) memcpy(&g_sync_types, buf, sizeof g_sync_types);
      }
    }
    free(buf);

    /* A larger buffer: SUCCESS and the actual size. */
    buf = malloc(need + 64);
    sz = need + 64;
    st = lib.onnxGetBackendInfo(g_id, type, buf, &sz);
    check_st(fmt("GetBackendInfo(%s, larger buffer)", nm), st, ONNXIFI_STATUS_SUCCESS);
    check_size(fmt("GetBackendInfo(%s, larger buffer) gives the actual size", nm), sz, need);
    free(buf);
  }

  char name[50];
  size_t sz = sizeof name;
  check_st("GetBackendInfo(NAME) into a 50-byte buffer (ONNX driver)",
           lib.onnxGetBackendInfo(g_id, ONNXIFI_BACKEND_NAME, name, &sz), ONNXIFI_STATUS_SUCCESS);

  /* Every name EXTENSIONS lists resolves. */
  char ext[1024];
  sz = sizeof ext;
  if (lib.onnxGetBackendInfo(g_id, ONNXIFI_BACKEND_EXTENSIONS, ext, &sz) == ONNXIFI_STATUS_SUCCESS && get_ext) {
    for (char *save = NULL, *w = strtok_r(ext, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
      if (!strcmp(w, "onnx_extension_function")) continue; /* names the mechanism, not a function */
      onnxExtensionFunctionPointer fp = NULL;
      onnxStatus st = get_ext(g_id, w, &fp);
      check_st(fmt("GetExtensionFunctionAddress(\"%s\") listed in EXTENSIONS", w), st, ONNXIFI_STATUS_SUCCESS);
    }
  }

  uint64_t v;
  sz = sizeof v;
  check_st("GetBackendInfo(unknown info type 9999)", lib.onnxGetBackendInfo(g_id, 9999, &v, &sz),
           ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE);
  sz = sizeof v;
  check_st("GetBackendInfo(info type -1)", lib.onnxGetBackendInfo(g_id, -1, &v, &sz),
           ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE);
  /* Optional queries: answered (FALLBACK for a NULL value) or UNSUPPORTED_ATTRIBUTE. */
  static const struct {
    onnxBackendInfo t;
    const char *n;
  } optional[] = {{ONNXIFI_BACKEND_MACS_FP32, "MACS_FP32"},
                  {ONNXIFI_BACKEND_MEMORY_BANDWIDTH, "MEMORY_BANDWIDTH"},
                  {ONNXIFI_BACKEND_PCI_BUS_ID, "PCI_BUS_ID"},
                  {ONNXIFI_BACKEND_CUDA_INDEX, "CUDA_INDEX"}};
  for (size_t k = 0; k < sizeof optional / sizeof *optional; k++) {
    sz = 0;
    onnxStatus st = lib.onnxGetBackendInfo(g_id, optional[k].t, NULL, &sz);
    check(fmt("GetBackendInfo(optional %s, NULL value)", optional[k].n),
          st == ONNXIFI_STATUS_FALLBACK || st == ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE,
          "FALLBACK or UNSUPPORTED_ATTRIBUTE", "%s", stname(st));
  }
  sz = sizeof v;
  check_st("GetBackendInfo(unknown ID)", lib.onnxGetBackendInfo(BOGUS, ONNXIFI_BACKEND_NAME, &v, &sz),
           ONNXIFI_STATUS_INVALID_ID);
  sz = sizeof v;
  check_st("GetBackendInfo(NULL ID)", lib.onnxGetBackendInfo(NULL, ONNXIFI_BACKEND_NAME, &v, &sz),
           ONNXIFI_STATUS_INVALID_ID);
  sz = sizeof v;
  check_st("GetBackendInfo(a backend handle as ID)", lib.onnxGetBackendInfo(g_be, ONNXIFI_BACKEND_NAME, &v, &sz),
           ONNXIFI_STATUS_INVALID_ID);
  check_st("GetBackendInfo(NAME, infoValueSize=NULL)", lib.onnxGetBackendInfo(g_id, ONNXIFI_BACKEND_NAME, &v, NULL),
           ONNXIFI_STATUS_INVALID_POINTER);
  check_st("GetBackendInfo(MEMORY_SIZE, NULL value, NULL size)",
           lib.onnxGetBackendInfo(g_id, ONNXIFI_BACKEND_MEMORY_SIZE, NULL, NULL), ONNXIFI_STATUS_INVALID_POINTER);
}

/* ------------------------------------------------------------------------ */
/* onnxGetBackendCompatibility                                               */

static const unsigned char garbage[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                          0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

static void check_compat_model(const char *name, enum bad_model kind, onnxStatus want, const char *msg_word) {
  size_t size;
  void *model = model_bad(kind, &size);
  check_st(name, lib.onnxGetBackendCompatibility(g_id, size, model), want);
  if (msg_word) {
    const char *m = plugin_message();
    check(fmt("%s: kilnGetLastErrorMessage names %s", name, msg_word), strstr(m, msg_word) != NULL,
          fmt("a message containing \"%s\"", msg_word), "\"%s\"", m);
  }
  free(model);
}

static void test_compatibility(void) {
  size_t size;
  void *model = model_relu(6, NULL, &size);
  check_st("GetBackendCompatibility(model=NULL)", lib.onnxGetBackendCompatibility(g_id, size, NULL),
           ONNXIFI_STATUS_INVALID_POINTER);
  check_st("GetBackendCompatibility(size 0)", lib.onnxGetBackendCompatibility(g_id, 0, model),
           ONNXIFI_STATUS_INVALID_SIZE);
  check_st("GetBackendCompatibility(garbage bytes)", lib.onnxGetBackendCompatibility(g_id, sizeof garbage, garbage),
           ONNXIFI_STATUS_INVALID_PROTOBUF);
  check_st("GetBackendCompatibility(unknown ID)", lib.onnxGetBackendCompatibility(BOGUS, size, model),
           ONNXIFI_STATUS_INVALID_ID);
  check_st("GetBackendCompatibility(NULL ID)", lib.onnxGetBackendCompatibility(NULL, size, model),
           ONNXIFI_STATUS_INVALID_ID);
  check_st("GetBackendCompatibility(one Relu node)", lib.onnxGetBackendCompatibility(g_id, size, model),
           ONNXIFI_STATUS_SUCCESS);
  free(model);
  model = model_add(&size);
  check_st("GetBackendCompatibility(one Add node)", lib.onnxGetBackendCompatibility(g_id, size, model),
           ONNXIFI_STATUS_SUCCESS);
  free(model);
  /* Compatibility must not need the weights: Add(x, w) with w a bare input. */
  model = model_addw(0, &size);
  check_st("GetBackendCompatibility(Add with a weight input, no initializers)",
           lib.onnxGetBackendCompatibility(g_id, size, model), ONNXIFI_STATUS_SUCCESS);
  free(model);

  static const char *node_models[] = {"test_relu", "test_add"};
  for (int i = 0; i < 2; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/model.onnx", KILN_NODE_TEST_DIR, node_models[i]);
    void *bytes = tu_read_file(path, &size);
    if (!check(fmt("read %s", path), bytes != NULL, "readable", "%s", bytes ? "readable" : "missing")) continue;
    check_st(fmt("GetBackendCompatibility(%s/model.onnx)", node_models[i]),
             lib.onnxGetBackendCompatibility(g_id, size, bytes), ONNXIFI_STATUS_SUCCESS);
    free(bytes);
  }

  check_compat_model("GetBackendCompatibility(unknown op " UNKNOWN_OP_NAME ")", BAD_UNKNOWN_OP,
                     ONNXIFI_STATUS_UNSUPPORTED_OPERATOR, UNKNOWN_OP_NAME);
  check_compat_model("GetBackendCompatibility(Relu with an unknown attribute)", BAD_UNKNOWN_ATTR,
                     ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, UNKNOWN_ATTR_NAME);
  check_compat_model("GetBackendCompatibility(string-typed graph input)", BAD_STRING_INPUT,
                     ONNXIFI_STATUS_UNSUPPORTED_DATATYPE, NULL);
  check_compat_model("GetBackendCompatibility(opset 99)", BAD_OPSET_99, ONNXIFI_STATUS_UNSUPPORTED_VERSION, NULL);
  check_compat_model("GetBackendCompatibility(IR version 99)", BAD_IR_99, ONNXIFI_STATUS_UNSUPPORTED_VERSION, NULL);
  check_compat_model("GetBackendCompatibility(node input never defined)", BAD_UNDEFINED_INPUT,
                     ONNXIFI_STATUS_INVALID_MODEL, "never_defined");
  check_compat_model("GetBackendCompatibility(model without a graph)", BAD_NO_GRAPH, ONNXIFI_STATUS_INVALID_MODEL,
                     NULL);
  check_compat_model("GetBackendCompatibility(two nodes write one output)", BAD_DUPLICATE_OUTPUT,
                     ONNXIFI_STATUS_INVALID_MODEL, NULL);
  check_compat_model("GetBackendCompatibility(IR 8 model importing no opset)", BAD_NO_OPSET,
                     ONNXIFI_STATUS_INVALID_MODEL, NULL);
}

/* ------------------------------------------------------------------------ */
/* onnxInitBackend / onnxReleaseBackend                                      */

static void test_backends(void) {
  onnxBackend be = BOGUS;
  check_st("InitBackend(unknown ID)", lib.onnxInitBackend(BOGUS, NULL, &be), ONNXIFI_STATUS_INVALID_ID);
  check_null("InitBackend(unknown ID) sets *backend to NULL", be);
  be = BOGUS;
  check_st("InitBackend(NULL ID)", lib.onnxInitBackend(NULL, NULL, &be), ONNXIFI_STATUS_INVALID_ID);
  check_st("InitBackend(backend=NULL)", lib.onnxInitBackend(g_id, NULL, NULL), ONNXIFI_STATUS_INVALID_POINTER);

  static const uint64_t unknown_prop[] = {0x7654321, 1, ONNXIFI_BACKEND_PROPERTY_NONE};
  be = BOGUS;
  onnxStatus st = lib.onnxInitBackend(g_id, unknown_prop, &be);
  check_st("InitBackend(unknown property)", st, ONNXIFI_STATUS_UNSUPPORTED_PROPERTY);
  check_null("InitBackend(unknown property) sets *backend to NULL", be);
  if (st == ONNXIFI_STATUS_SUCCESS && be) (void)lib.onnxReleaseBackend(be);

  static const uint64_t empty_props[] = {ONNXIFI_BACKEND_PROPERTY_NONE};
  be = NULL;
  st = lib.onnxInitBackend(g_id, empty_props, &be);
  check_st("InitBackend(empty property list)", st, ONNXIFI_STATUS_SUCCESS);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    check("InitBackend(empty property list) gives a handle", be != NULL, "non-NULL", "%p", be);
    check_st("ReleaseBackend(that backend)", lib.onnxReleaseBackend(be), ONNXIFI_STATUS_SUCCESS);
    check_st("ReleaseBackend(same backend again)", lib.onnxReleaseBackend(be), ONNXIFI_STATUS_INVALID_BACKEND);
    onnxEvent ev = BOGUS;
    check_st("InitEvent(released backend)", lib.onnxInitEvent(be, &ev), ONNXIFI_STATUS_INVALID_BACKEND);
    check_null("InitEvent(released backend) sets *event to NULL", ev);
  }
  be = NULL;
  st = lib.onnxInitBackend(g_id, NULL, &be);
  check_st("InitBackend(no properties) second backend on one ID", st, ONNXIFI_STATUS_SUCCESS);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    check("two backends on one ID are distinct", be && be != g_be, "distinct handles", "%p and %p", be, g_be);
    check_st("ReleaseBackend(second backend)", lib.onnxReleaseBackend(be), ONNXIFI_STATUS_SUCCESS);
  }
  check_st("ReleaseBackend(unknown pointer)", lib.onnxReleaseBackend(BOGUS), ONNXIFI_STATUS_INVALID_BACKEND);
  check_st("ReleaseBackend(NULL)", lib.onnxReleaseBackend(NULL), ONNXIFI_STATUS_INVALID_BACKEND);
  check_st("ReleaseBackend(a backend ID)", lib.onnxReleaseBackend(g_id), ONNXIFI_STATUS_INVALID_BACKEND);
}

/* ------------------------------------------------------------------------ */
/* events                                                                    */

static void test_events(void) {
  onnxEvent ev = BOGUS;
  check_st("InitEvent(unknown backend)", lib.onnxInitEvent(BOGUS, &ev), ONNXIFI_STATUS_INVALID_BACKEND);
  check_null("InitEvent(unknown backend) sets *event to NULL", ev);
  check_st("InitEvent(NULL backend)", lib.onnxInitEvent(NULL, &ev), ONNXIFI_STATUS_INVALID_BACKEND);
  check_st("InitEvent(event=NULL)", lib.onnxInitEvent(g_be, NULL), ONNXIFI_STATUS_INVALID_POINTER);

  ev = NULL;
  onnxStatus st = lib.onnxInitEvent(g_be, &ev);
  if (!check_st("InitEvent", st, ONNXIFI_STATUS_SUCCESS) || !ev) return;
  onnxEventState state = 0;
  check_st("GetEventState(new event)", lib.onnxGetEventState(ev, &state), ONNXIFI_STATUS_SUCCESS);
  check("GetEventState(new event) state", state == ONNXIFI_EVENT_STATE_NONSIGNALLED, "NONSIGNALLED", "%s",
        evstate_name(state));
  check_st("GetEventState(state=NULL)", lib.onnxGetEventState(ev, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  if (event_status) {
    onnxStatus rs = ONNXIFI_STATUS_INTERNAL_ERROR;
    const char *m = NULL;
    check_st("kilnGetEventStatus(caller's event)", event_status(ev, &rs, &m), ONNXIFI_STATUS_SUCCESS);
    check("kilnGetEventStatus(caller's event) run status and message", rs == ONNXIFI_STATUS_SUCCESS && m && !*m,
          "SUCCESS and \"\"", "%s and \"%s\"", stname(rs), m ? m : "(NULL)");
  }
  check_st("SignalEvent", lib.onnxSignalEvent(ev), ONNXIFI_STATUS_SUCCESS);
  state = 0;
  check_st("GetEventState(signalled event)", lib.onnxGetEventState(ev, &state), ONNXIFI_STATUS_SUCCESS);
  check("GetEventState(signalled event) state", state == ONNXIFI_EVENT_STATE_SIGNALLED, "SIGNALLED", "%s",
        evstate_name(state));
  check_st("SignalEvent(already signalled)", lib.onnxSignalEvent(ev), ONNXIFI_STATUS_INVALID_STATE);
  check_st("WaitEvent(signalled event)", lib.onnxWaitEvent(ev), ONNXIFI_STATUS_SUCCESS);
  check_st("WaitEvent(signalled event) again", lib.onnxWaitEvent(ev), ONNXIFI_STATUS_SUCCESS);
  check_st("ReleaseEvent", lib.onnxReleaseEvent(ev), ONNXIFI_STATUS_SUCCESS);

  /* A released event and never-events: INVALID_EVENT everywhere. */
  void *bad[3] = {ev, BOGUS, NULL};
  const char *bad_name[3] = {"released event", "unknown pointer", "NULL event"};
  for (int i = 0; i < 3; i++) {
    check_st(fmt("SignalEvent(%s)", bad_name[i]), lib.onnxSignalEvent(bad[i]), ONNXIFI_STATUS_INVALID_EVENT);
    state = ONNXIFI_EVENT_STATE_SIGNALLED;
    check_st(fmt("GetEventState(%s)", bad_name[i]), lib.onnxGetEventState(bad[i], &state),
             ONNXIFI_STATUS_INVALID_EVENT);
    check(fmt("GetEventState(%s) sets state to INVALID", bad_name[i]), state == ONNXIFI_EVENT_STATE_INVALID,
          "INVALID", "%s", evstate_name(state));
    check_st(fmt("WaitEvent(%s)", bad_name[i]), lib.onnxWaitEvent(bad[i]), ONNXIFI_STATUS_INVALID_EVENT);
    check_st(fmt("ReleaseEvent(%s)", bad_name[i]), lib.onnxReleaseEvent(bad[i]), ONNXIFI_STATUS_INVALID_EVENT);
    if (event_status) {
      onnxStatus rs;
      check_st(fmt("kilnGetEventStatus(%s)", bad_name[i]), event_status(bad[i], &rs, NULL),
               ONNXIFI_STATUS_INVALID_EVENT);
    }
  }
  check_st("SignalEvent(a backend handle)", lib.onnxSignalEvent(g_be), ONNXIFI_STATUS_INVALID_EVENT);

  /* An unsignalled event can be released. */
  ev = new_event();
  if (ev) check_st("ReleaseEvent(never signalled)", lib.onnxReleaseEvent(ev), ONNXIFI_STATUS_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* onnxInitGraph and weights                                                 */

/* InitGraph(variant-0 model, one weight descriptor) expecting a failure. */
static void check_weight_failure(const char *name, onnxTensorDescriptorV1 wd, onnxStatus want) {
  size_t size;
  void *model = model_addw(0, &size);
  onnxGraph g = BOGUS;
  onnxStatus st = lib.onnxInitGraph(g_be, NULL, size, model, 1, &wd, &g);
  free(model);
  check_st(name, st, want);
  if (st == ONNXIFI_STATUS_SUCCESS) drop_graph(&g);
  else check_null(fmt("%s sets *graph to NULL", name), g);
}

static void test_init_graph(void) {
  size_t size;
  void *model = model_relu(6, NULL, &size);
  onnxGraph g = BOGUS;
  onnxStatus st = lib.onnxInitGraph(BOGUS, NULL, size, model, 0, NULL, &g);
  check_st("InitGraph(unknown backend)", st, ONNXIFI_STATUS_INVALID_BACKEND);
  check_null("InitGraph(unknown backend) sets *graph to NULL", g);
  drop_graph(&g);
  check_st("InitGraph(NULL backend)", lib.onnxInitGraph(NULL, NULL, size, model, 0, NULL, &g),
           ONNXIFI_STATUS_INVALID_BACKEND);
  drop_graph(&g);
  check_st("InitGraph(a backend ID as backend)", lib.onnxInitGraph(g_id, NULL, size, model, 0, NULL, &g),
           ONNXIFI_STATUS_INVALID_BACKEND);
  drop_graph(&g);
  check_st("InitGraph(model=NULL)", lib.onnxInitGraph(g_be, NULL, size, NULL, 0, NULL, &g),
           ONNXIFI_STATUS_INVALID_POINTER);
  drop_graph(&g);
  check_st("InitGraph(graph=NULL)", lib.onnxInitGraph(g_be, NULL, size, model, 0, NULL, NULL),
           ONNXIFI_STATUS_INVALID_POINTER);
  check_st("InitGraph(weightsCount=1, weightDescriptors=NULL)",
           lib.onnxInitGraph(g_be, NULL, size, model, 1, NULL, &g), ONNXIFI_STATUS_INVALID_POINTER);
  drop_graph(&g);
  g = BOGUS;
  st = lib.onnxInitGraph(g_be, NULL, 0, model, 0, NULL, &g);
  check_st("InitGraph(size 0)", st, ONNXIFI_STATUS_INVALID_SIZE);
  check_null("InitGraph(size 0) sets *graph to NULL", g);
  drop_graph(&g);
  check_st("InitGraph(garbage bytes)", lib.onnxInitGraph(g_be, NULL, sizeof garbage, garbage, 0, NULL, &g),
           ONNXIFI_STATUS_INVALID_PROTOBUF);
  drop_graph(&g);
  static const uint64_t unknown_prop[] = {0x7654321, 1, ONNXIFI_GRAPH_PROPERTY_NONE};
  check_st("InitGraph(unknown property)", lib.onnxInitGraph(g_be, unknown_prop, size, model, 0, NULL, &g),
           ONNXIFI_STATUS_UNSUPPORTED_PROPERTY);
  drop_graph(&g);
  static const uint64_t empty_props[] = {ONNXIFI_GRAPH_PROPERTY_NONE};
  check_st("InitGraph(empty property list)", lib.onnxInitGraph(g_be, empty_props, size, model, 0, NULL, &g),
           ONNXIFI_STATUS_SUCCESS);
  drop_graph(&g);
  free(model);

  static const struct {
    enum bad_model kind;
    const char *name;
    onnxStatus want;
  } bad[] = {
      {BAD_UNKNOWN_OP, "InitGraph(unknown op)", ONNXIFI_STATUS_UNSUPPORTED_OPERATOR},
      {BAD_UNKNOWN_ATTR, "InitGraph(unknown attribute)", ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE},
      {BAD_STRING_INPUT, "InitGraph(string-typed input)", ONNXIFI_STATUS_UNSUPPORTED_DATATYPE},
      {BAD_OPSET_99, "InitGraph(opset 99)", ONNXIFI_STATUS_UNSUPPORTED_VERSION},
      {BAD_UNDEFINED_INPUT, "InitGraph(node input never defined)", ONNXIFI_STATUS_INVALID_MODEL},
      {BAD_NO_GRAPH, "InitGraph(model without a graph)", ONNXIFI_STATUS_INVALID_MODEL},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    model = model_bad(bad[i].kind, &size);
    g = BOGUS;
    st = lib.onnxInitGraph(g_be, NULL, size, model, 0, NULL, &g);
    free(model);
    check_st(bad[i].name, st, bad[i].want);
    if (st == ONNXIFI_STATUS_SUCCESS) drop_graph(&g);
    else check_null(fmt("%s sets *graph to NULL", bad[i].name), g);
  }

  /* Weights given as descriptors for names in graph.input (no initializers). */
  float w[6] = {10, 20, 30, 40, 50, 60};
  float x[6] = {1, 2, 3, 4, 5, 6}, z[6] = {0};
  model = model_addw(0, &size);
  onnxTensorDescriptorV1 wd = td("w", T_F32, 2, S23, w);
  g = NULL;
  st = lib.onnxInitGraph(g_be, NULL, size, model, 1, &wd, &g);
  memset(model, 0, size); /* the model need not outlive InitGraph */
  free(model);
  check_st("InitGraph(Add(x, w), w as a weight descriptor)", st, ONNXIFI_STATUS_SUCCESS);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    for (int i = 0; i < 6; i++) w[i] = -1000; /* the backend must have copied w */
    onnxTensorDescriptorV1 in = td("x", T_F32, 2, S23, x), out = td("z", T_F32, 2, S23, z);
    check_st("SetGraphIO(x only; the weight w left out)", lib.onnxSetGraphIO(g, 1, &in, 1, &out), ONNXIFI_STATUS_SUCCESS);
    onnxStatus wst;
    st = run_once(g, &wst);
    check_st("RunGraph(Add with a descriptor weight)", st, ONNXIFI_STATUS_SUCCESS);
    check_st("WaitEvent(Add with a descriptor weight)", wst, ONNXIFI_STATUS_SUCCESS);
    static const float want[6] = {11, 22, 33, 44, 55, 66};
    check_floats("Add with a descriptor weight uses the weight's values at InitGraph time", z, want, 6);
    drop_graph(&g);
  }

  /* Weights both in the model and as descriptors. */
  model = model_addw(1, &size);
  wd = td("w", T_F32, 2, S23, w);
  g = BOGUS;
  st = lib.onnxInitGraph(g_be, NULL, size, model, 1, &wd, &g);
  free(model);
  check_st("InitGraph(w both an initializer and a weight descriptor)", st, ONNXIFI_STATUS_INVALID_MODEL);
  if (st == ONNXIFI_STATUS_SUCCESS) drop_graph(&g);
  model = model_addw(2, &size);
  g = BOGUS;
  st = lib.onnxInitGraph(g_be, NULL, size, model, 1, &wd, &g);
  free(model);
  check_st("InitGraph(weight descriptors with a non-empty graph.initializer)", st, ONNXIFI_STATUS_INVALID_MODEL);
  if (st == ONNXIFI_STATUS_SUCCESS) drop_graph(&g);
  /* ... while the initializer model alone is fine. */
  model = model_addw(1, &size);
  g = init_graph(model, size);
  free(model);
  check("InitGraph(w as an initializer listed in graph.input)", g != NULL, "SUCCESS", "%s",
        g ? "SUCCESS" : "failure");
  if (g) {
    /* Hosts bind only the non-weight inputs (Caffe2 does); whether a host
     * may also override an initializer-backed input is not checked here. */
    onnxTensorDescriptorV1 in = td("x", T_F32, 2, S23, x), out = td("z", T_F32, 2, S23, z);
    memset(z, 0, sizeof z);
    st = lib.onnxSetGraphIO(g, 1, &in, 1, &out);
    check_st("SetGraphIO(initializer-backed graph input left out, as Caffe2 does)", st, ONNXIFI_STATUS_SUCCESS);
    onnxStatus wst;
    if (st == ONNXIFI_STATUS_SUCCESS && run_once(g, &wst) == ONNXIFI_STATUS_SUCCESS && !wst) {
      static const float want[6] = {101, 202, 303, 404, 505, 606};
      check_floats("Add with w from the initializer", z, want, 6);
    } else {
      check("Add with w from the initializer runs", false, "SUCCESS", "a failure");
    }
    drop_graph(&g);
  }

  /* Bad weight descriptors. */
  static const uint64_t zero_dim[2] = {2, 0}, wrong_shape[2] = {3, 2}, bad_rank[1] = {6};
  int32_t wi[6] = {0};
  wd = td("w", T_F32, 2, S23, w);
  wd.tag = 0x12345678;
  check_weight_failure("InitGraph(weight descriptor with a bad tag)", wd, ONNXIFI_STATUS_UNSUPPORTED_TAG);
  check_weight_failure("InitGraph(weight descriptor with a zero dim)", td("w", T_F32, 2, zero_dim, w),
                       ONNXIFI_STATUS_INVALID_SHAPE);
  check_weight_failure("InitGraph(weight descriptor with data type 9999)", td("w", 9999, 2, S23, w),
                       ONNXIFI_STATUS_INVALID_DATATYPE);
  wd = td("w", T_F32, 2, S23, w);
  wd.memoryType = ONNXIFI_MEMORY_TYPE_CUDA_BUFFER;
  check_weight_failure("InitGraph(weight descriptor in CUDA memory)", wd, ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE);
  wd.memoryType = 12345;
  check_weight_failure("InitGraph(weight descriptor with memory type 12345)", wd, ONNXIFI_STATUS_INVALID_MEMORY_TYPE);
  check_weight_failure("InitGraph(weight descriptor with a NULL buffer)", td("w", T_F32, 2, S23, NULL),
                       ONNXIFI_STATUS_INVALID_MEMORY_LOCATION);
  check_weight_failure("InitGraph(weight shape [3,2], model says [2,3])", td("w", T_F32, 2, wrong_shape, w),
                       ONNXIFI_STATUS_MISMATCHING_SHAPE);
  check_weight_failure("InitGraph(weight rank 1, model says rank 2)", td("w", T_F32, 1, bad_rank, w),
                       ONNXIFI_STATUS_MISMATCHING_SHAPE);
  check_weight_failure("InitGraph(weight int32, model says float)", td("w", T_I32, 2, S23, wi),
                       ONNXIFI_STATUS_MISMATCHING_DATATYPE);
  {
    size_t sz;
    void *m = model_addw(0, &sz);
    onnxTensorDescriptorV1 nw = td("not_an_input", T_F32, 2, S23, w);
    g = BOGUS;
    st = lib.onnxInitGraph(g_be, NULL, sz, m, 1, &nw, &g);
    free(m);
    check("InitGraph(weight named after no graph input)", st != ONNXIFI_STATUS_SUCCESS && st != ONNXIFI_STATUS_FALLBACK,
          "an error status", "%s", stname(st));
    if (st == ONNXIFI_STATUS_SUCCESS) drop_graph(&g);
  }
}

/* ------------------------------------------------------------------------ */
/* onnxSetGraphIO                                                            */

static void test_set_graph_io(void) {
  size_t size;
  void *model = model_add(&size);
  onnxGraph g = init_graph(model, size);
  free(model);
  if (!check("InitGraph(Add) for SetGraphIO tests", g != NULL, "a graph", "%s", g ? "a graph" : "failure")) return;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {10, 20, 30, 40, 50, 60}, sum[6];
  int32_t ai[6] = {0};
  static const uint64_t zero_dim[2] = {2, 0}, wrong_dim[2] = {2, 4}, rank1[1] = {6};
  onnxTensorDescriptorV1 good_in[2] = {td("add_a", T_F32, 2, S23, a), td("add_b", T_F32, 2, S23, b)};
  onnxTensorDescriptorV1 good_out[1] = {td("add_sum", T_F32, 2, S23, sum)};
  onnxTensorDescriptorV1 in[3], out[2];
  onnxMemoryFenceV1 fin, fout;
  onnxStatus st;

  /* RunGraph before any SetGraphIO. */
  onnxEvent ready = new_signalled_event();
  fin = fence(ready);
  fout = fence(NULL);
  st = lib.onnxRunGraph(g, &fin, &fout);
  check_st("RunGraph before any SetGraphIO", st, ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  drop_run(st, &fout);

  check_st("SetGraphIO(unknown graph)", lib.onnxSetGraphIO(BOGUS, 2, good_in, 1, good_out),
           ONNXIFI_STATUS_INVALID_GRAPH);
  check_st("SetGraphIO(NULL graph)", lib.onnxSetGraphIO(NULL, 2, good_in, 1, good_out), ONNXIFI_STATUS_INVALID_GRAPH);
  check_st("SetGraphIO(outputDescriptors=NULL)", lib.onnxSetGraphIO(g, 2, good_in, 1, NULL),
           ONNXIFI_STATUS_INVALID_POINTER);
  check_st("SetGraphIO(inputsCount=2, inputDescriptors=NULL)", lib.onnxSetGraphIO(g, 2, NULL, 1, good_out),
           ONNXIFI_STATUS_INVALID_POINTER);

  memcpy(in, good_in, sizeof good_in);
  in[1].name = "no_such_input";
  check_st("SetGraphIO(unknown input name)", lib.onnxSetGraphIO(g, 2, in, 1, good_out), ONNXIFI_STATUS_INVALID_NAME);
  out[0] = good_out[0];
  out[0].name = "no_such_output";
  check_st("SetGraphIO(unknown output name)", lib.onnxSetGraphIO(g, 2, good_in, 1, out), ONNXIFI_STATUS_INVALID_NAME);
  memcpy(in, good_in, sizeof good_in);
  in[2] = good_in[0];
  check_st("SetGraphIO(input named twice)", lib.onnxSetGraphIO(g, 3, in, 1, good_out), ONNXIFI_STATUS_INVALID_NAME);
  out[0] = out[1] = good_out[0];
  check_st("SetGraphIO(output named twice)", lib.onnxSetGraphIO(g, 2, good_in, 2, out), ONNXIFI_STATUS_INVALID_NAME);
  check_st("SetGraphIO(one input missing)", lib.onnxSetGraphIO(g, 1, good_in, 1, good_out),
           ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  check_st("SetGraphIO(no inputs at all)", lib.onnxSetGraphIO(g, 0, NULL, 1, good_out),
           ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  check_st("SetGraphIO(outputsCount=0)", lib.onnxSetGraphIO(g, 2, good_in, 0, good_out),
           ONNXIFI_STATUS_UNIDENTIFIED_NAME);

  struct {
    const char *name;
    int which; /* 0: input 1, 1: output */
    onnxTensorDescriptorV1 d;
    onnxStatus want;
  } cases[] = {
      {"SetGraphIO(input with a zero dim)", 0, td("add_b", T_F32, 2, zero_dim, b), ONNXIFI_STATUS_INVALID_SHAPE},
      {"SetGraphIO(output with a zero dim)", 1, td("add_sum", T_F32, 2, zero_dim, sum), ONNXIFI_STATUS_INVALID_SHAPE},
      {"SetGraphIO(input with a bad tag)", 0, td("add_b", T_F32, 2, S23, b), ONNXIFI_STATUS_UNSUPPORTED_TAG},
      {"SetGraphIO(output with a bad tag)", 1, td("add_sum", T_F32, 2, S23, sum), ONNXIFI_STATUS_UNSUPPORTED_TAG},
      {"SetGraphIO(input int32, model says float)", 0, td("add_b", T_I32, 2, S23, ai),
       ONNXIFI_STATUS_MISMATCHING_DATATYPE},
      {"SetGraphIO(output int32, model says float)", 1, td("add_sum", T_I32, 2, S23, ai),
       ONNXIFI_STATUS_MISMATCHING_DATATYPE},
      {"SetGraphIO(input data type 9999)", 0, td("add_b", 9999, 2, S23, b), ONNXIFI_STATUS_INVALID_DATATYPE},
      {"SetGraphIO(input rank 1, model says rank 2)", 0, td("add_b", T_F32, 1, rank1, b),
       ONNXIFI_STATUS_MISMATCHING_SHAPE},
      {"SetGraphIO(input [2,4], model says [2,3])", 0, td("add_b", T_F32, 2, wrong_dim, b),
       ONNXIFI_STATUS_MISMATCHING_SHAPE},
      {"SetGraphIO(output [2,4], model says [2,3])", 1, td("add_sum", T_F32, 2, wrong_dim, sum),
       ONNXIFI_STATUS_MISMATCHING_SHAPE},
      {"SetGraphIO(input with a NULL buffer)", 0, td("add_b", T_F32, 2, S23, NULL),
       ONNXIFI_STATUS_INVALID_MEMORY_LOCATION},
      {"SetGraphIO(output with a NULL buffer)", 1, td("add_sum", T_F32, 2, S23, NULL),
       ONNXIFI_STATUS_INVALID_MEMORY_LOCATION},
      {"SetGraphIO(input in CUDA memory)", 0, td("add_b", T_F32, 2, S23, b), ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE},
      {"SetGraphIO(input with memory type 12345)", 0, td("add_b", T_F32, 2, S23, b),
       ONNXIFI_STATUS_INVALID_MEMORY_TYPE},
  };
  cases[2].d.tag = cases[3].d.tag = 0x12345678;
  cases[12].d.memoryType = ONNXIFI_MEMORY_TYPE_CUDA_BUFFER;
  cases[13].d.memoryType = 12345;
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    memcpy(in, good_in, sizeof good_in);
    out[0] = good_out[0];
    if (cases[k].which == 0) in[1] = cases[k].d;
    else out[0] = cases[k].d;
    check_st(cases[k].name, lib.onnxSetGraphIO(g, 2, in, 1, out), cases[k].want);
  }
  /* limits (README "Limits"): rank, one dim, the element count, a shape
     product that overflows 64 bits — refused before anything is sized */
  static const uint64_t rank9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 6}, huge_dim[2] = {2, (uint64_t)1 << 40},
                        wrap[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32}, too_many[2] = {(uint64_t)1 << 20, (uint64_t)1 << 15};
  const struct {
    const char *name;
    onnxTensorDescriptorV1 d;
  } limits[] = {
      {"SetGraphIO(input rank 9, beyond KILN_MAX_RANK)", td("add_b", T_F32, 9, rank9, b)},
      {"SetGraphIO(input dim 2^40)", td("add_b", T_F32, 2, huge_dim, b)},
      {"SetGraphIO(input [2^32, 2^32]: the product wraps)", td("add_b", T_F32, 2, wrap, b)},
      {"SetGraphIO(input of 2^35 elements)", td("add_b", T_F32, 2, too_many, b)},
  };
  for (size_t k = 0; k < sizeof limits / sizeof *limits; k++) {
    memcpy(in, good_in, sizeof good_in);
    in[1] = limits[k].d;
    check_st(limits[k].name, lib.onnxSetGraphIO(g, 2, in, 1, good_out), ONNXIFI_STATUS_UNSUPPORTED_SHAPE);
  }

  /* A good binding, then a failed one: RunGraph must refuse. */
  st = lib.onnxSetGraphIO(g, 2, good_in, 1, good_out);
  check_st("SetGraphIO(good)", st, ONNXIFI_STATUS_SUCCESS);
  memcpy(in, good_in, sizeof good_in);
  in[1].name = "no_such_input";
  check_st("SetGraphIO(unknown name) after a good one", lib.onnxSetGraphIO(g, 2, in, 1, good_out),
           ONNXIFI_STATUS_INVALID_NAME);
  fin = fence(ready);
  fout = fence(NULL);
  st = lib.onnxRunGraph(g, &fin, &fout);
  check_st("RunGraph after a failed SetGraphIO", st, ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  drop_run(st, &fout);
  /* ... and a new good binding makes it run again. */
  st = lib.onnxSetGraphIO(g, 2, good_in, 1, good_out);
  check_st("SetGraphIO(good) after a failed one", st, ONNXIFI_STATUS_SUCCESS);
  onnxStatus wst = ONNXIFI_STATUS_INTERNAL_ERROR;
  memset(sum, 0, sizeof sum);
  st = run_once(g, &wst);
  check_st("RunGraph after rebinding", st, ONNXIFI_STATUS_SUCCESS);
  check_st("WaitEvent after rebinding", wst, ONNXIFI_STATUS_SUCCESS);
  static const float want[6] = {11, 22, 33, 44, 55, 66};
  check_floats("Add after rebinding", sum, want, 6);
  release_event(ready);
  drop_graph(&g);

  /* A 0-D tensor: shape may be NULL. */
  model = model_relu_scalar(&size);
  g = init_graph(model, size);
  free(model);
  if (check("InitGraph(Relu on a scalar)", g != NULL, "a graph", "%s", g ? "a graph" : "failure")) {
    float sx = -2.5f, sy = 7;
    onnxTensorDescriptorV1 di = td("sx", T_F32, 0, NULL, &sx), dout = td("sy", T_F32, 0, NULL, &sy);
    check_st("SetGraphIO(0-D tensors with shape=NULL)", lib.onnxSetGraphIO(g, 1, &di, 1, &dout),
             ONNXIFI_STATUS_SUCCESS);
    st = run_once(g, &wst);
    check("Relu on a scalar runs", st == ONNXIFI_STATUS_SUCCESS && wst == ONNXIFI_STATUS_SUCCESS, "SUCCESS, SUCCESS",
          "%s, %s", stname(st), stname(wst));
    static const float zero = 0;
    check_floats("Relu on a scalar", &sy, &zero, 1);
    drop_graph(&g);
  }
}

/* ------------------------------------------------------------------------ */
/* onnxRunGraph                                                              */

static void test_run_graph(void) {
  size_t size;
  void *model = model_add(&size);
  onnxGraph g = init_graph(model, size);
  free(model);
  if (!check("InitGraph(Add) for RunGraph tests", g != NULL, "a graph", "%s", g ? "a graph" : "failure")) return;
  float a[6] = {0}, b[6] = {0}, sum[6] = {0};
  /* Names and shapes in storage we clobber after SetGraphIO: the header lets
   * the caller invalidate everything but the buffers once it returns. */
  char name_a[16] = "add_a", name_b[16] = "add_b", name_sum[16] = "add_sum";
  uint64_t sa[2] = {2, 3}, sb[2] = {2, 3}, ss[2] = {2, 3};
  onnxTensorDescriptorV1 in[2] = {td(name_a, T_F32, 2, sa, a), td(name_b, T_F32, 2, sb, b)};
  onnxTensorDescriptorV1 out = td(name_sum, T_F32, 2, ss, sum);
  onnxStatus st = lib.onnxSetGraphIO(g, 2, in, 1, &out);
  check_st("SetGraphIO(Add)", st, ONNXIFI_STATUS_SUCCESS);
  memset(name_a, 'X', sizeof name_a - 1);
  memset(name_b, 'Y', sizeof name_b - 1);
  memset(name_sum, 'Z', sizeof name_sum - 1);
  sa[0] = sb[1] = ss[0] = 77;
  memset(in, 0, sizeof in);
  memset(&out, 0, sizeof out);

  onnxEvent ready = new_signalled_event(), released = new_event();
  onnxEvent released_copy = released;
  release_event(released);
  onnxMemoryFenceV1 fin = fence(ready), fout = fence(NULL);

  check_st("RunGraph(unknown graph)", lib.onnxRunGraph(BOGUS, &fin, &fout), ONNXIFI_STATUS_INVALID_GRAPH);
  check_st("RunGraph(NULL graph)", lib.onnxRunGraph(NULL, &fin, &fout), ONNXIFI_STATUS_INVALID_GRAPH);
  st = lib.onnxRunGraph(g, NULL, &fout);
  check_st("RunGraph(inputFence=NULL)", st, ONNXIFI_STATUS_INVALID_POINTER);
  drop_run(st, &fout);
  st = lib.onnxRunGraph(g, &fin, NULL);
  check_st("RunGraph(outputFence=NULL)", st, ONNXIFI_STATUS_INVALID_POINTER);

  struct {
    const char *name;
    int which; /* 0: input fence, 1: output fence */
    int32_t tag;
    onnxEnum type;
    onnxEvent event;
    onnxStatus want;
  } cases[] = {
      {"RunGraph(input fence with a bad tag)", 0, 0x12345678, ONNXIFI_SYNCHRONIZATION_EVENT, ready,
       ONNXIFI_STATUS_UNSUPPORTED_TAG},
      {"RunGraph(output fence with a bad tag)", 1, 0x12345678, ONNXIFI_SYNCHRONIZATION_EVENT, NULL,
       ONNXIFI_STATUS_UNSUPPORTED_TAG},
      {"RunGraph(input fence IMPLICIT)", 0, ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_IMPLICIT, ready,
       ONNXIFI_STATUS_UNSUPPORTED_FENCE_TYPE},
      {"RunGraph(output fence IMPLICIT)", 1, ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_IMPLICIT, NULL,
       ONNXIFI_STATUS_UNSUPPORTED_FENCE_TYPE},
      {"RunGraph(input fence type 77)", 0, ONNXIFI_TAG_MEMORY_FENCE_V1, 77, ready, ONNXIFI_STATUS_INVALID_FENCE_TYPE},
      {"RunGraph(output fence type 77)", 1, ONNXIFI_TAG_MEMORY_FENCE_V1, 77, NULL, ONNXIFI_STATUS_INVALID_FENCE_TYPE},
      {"RunGraph(input fence with a released event)", 0, ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT,
       released_copy, ONNXIFI_STATUS_INVALID_EVENT},
      {"RunGraph(input fence with an unknown event)", 0, ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT,
       BOGUS, ONNXIFI_STATUS_INVALID_EVENT},
      {"RunGraph(input fence with a NULL event)", 0, ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, NULL,
       ONNXIFI_STATUS_INVALID_EVENT},
  };
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    if (cases[k].type == ONNXIFI_SYNCHRONIZATION_IMPLICIT && (g_sync_types & ONNXIFI_SYNCHRONIZATION_IMPLICIT))
      continue; /* advertised: then it is no error */
    onnxMemoryFenceV1 f = fence(cases[k].event);
    f.tag = cases[k].tag;
    f.type = cases[k].type;
    fin = fence(ready);
    fout = fence(NULL);
    if (cases[k].which == 0) fin = f;
    else fout = f;
    st = lib.onnxRunGraph(g, &fin, &fout);
    check_st(cases[k].name, st, cases[k].want);
    drop_run(st, &fout);
  }

  /* Asynchrony: RunGraph returns before the input event is signalled, the
   * inputs are read only after it is, and the output event stays
   * unsignalled until then. A watchdog signals after 3 s so that a
   * blocking RunGraph fails this check instead of hanging. */
  onnxEvent in_ev = new_event();
  fin = fence(in_ev);
  fout = fence(NULL);
  delayed_signal watchdog;
  bool have_watchdog = in_ev && delayed_signal_start(&watchdog, in_ev, 3000);
  double t0 = now_ms();
  st = lib.onnxRunGraph(g, &fin, &fout);
  double took = now_ms() - t0;
  bool fired = have_watchdog ? delayed_signal_finish(&watchdog) : true;
  check_st("RunGraph(input event not yet signalled)", st, ONNXIFI_STATUS_SUCCESS);
  check("RunGraph returns without waiting for the input event", !fired && took < 1000, "returns at once",
        "returned after %.0f ms%s", took, fired ? " (only once the watchdog signalled the input)" : "");
  if (st == ONNXIFI_STATUS_SUCCESS) {
    check("RunGraph stores the output event in outputFence", fout.event != NULL, "non-NULL", "%p", fout.event);
    sleep_ms(50);
    onnxEventState state = 0;
    onnxStatus gs = lib.onnxGetEventState(fout.event, &state);
    check("output event while the input event is unsignalled",
          gs == ONNXIFI_STATUS_SUCCESS && state == ONNXIFI_EVENT_STATE_NONSIGNALLED, "SUCCESS, NONSIGNALLED",
          "%s, %s", stname(gs), evstate_name(state));
    for (int i = 0; i < 6; i++) {
      a[i] = (float)(i + 1);
      b[i] = (float)(i + 1) * 10;
    }
    if (!fired) check_st("SignalEvent(input) after RunGraph", lib.onnxSignalEvent(in_ev), ONNXIFI_STATUS_SUCCESS);
    check_st("WaitEvent(output)", lib.onnxWaitEvent(fout.event), ONNXIFI_STATUS_SUCCESS);
    state = 0;
    gs = lib.onnxGetEventState(fout.event, &state);
    check("output event after the wait", gs == ONNXIFI_STATUS_SUCCESS && state == ONNXIFI_EVENT_STATE_SIGNALLED,
          "SUCCESS, SIGNALLED", "%s, %s", stname(gs), evstate_name(state));
    static const float want[6] = {11, 22, 33, 44, 55, 66};
    check_floats("Add reads the inputs written after RunGraph, before the signal", sum, want, 6);
    if (event_status) {
      onnxStatus rs = ONNXIFI_STATUS_INTERNAL_ERROR;
      const char *m = NULL;
      check_st("kilnGetEventStatus(output event of a good run)", event_status(fout.event, &rs, &m),
               ONNXIFI_STATUS_SUCCESS);
      check("kilnGetEventStatus(output event of a good run) run status", rs == ONNXIFI_STATUS_SUCCESS && m && !*m,
            "SUCCESS and \"\"", "%s and \"%s\"", stname(rs), m ? m : "(NULL)");
    }
    check_st("ReleaseEvent(output event)", lib.onnxReleaseEvent(fout.event), ONNXIFI_STATUS_SUCCESS);
  }
  release_event(in_ev);

  /* Two runs queued back to back, then the output events released before
   * the runs finish (the backend must keep what it needs). */
  in_ev = new_event();
  onnxMemoryFenceV1 f1 = fence(NULL), f2 = fence(NULL);
  fin = fence(in_ev);
  onnxStatus s1 = lib.onnxRunGraph(g, &fin, &f1), s2 = lib.onnxRunGraph(g, &fin, &f2);
  check("two RunGraph calls on one input event", s1 == ONNXIFI_STATUS_SUCCESS && s2 == ONNXIFI_STATUS_SUCCESS,
        "SUCCESS, SUCCESS", "%s, %s", stname(s1), stname(s2));
  check("two runs get distinct output events", !s1 && !s2 && f1.event && f2.event && f1.event != f2.event,
        "distinct events", "%p and %p", f1.event, f2.event);
  if (!s1) check_st("ReleaseEvent(output event of a pending run)", lib.onnxReleaseEvent(f1.event),
                    ONNXIFI_STATUS_SUCCESS);
  check_st("SignalEvent(input of two runs)", lib.onnxSignalEvent(in_ev), ONNXIFI_STATUS_SUCCESS);
  if (!s2) {
    check_st("WaitEvent(second run)", lib.onnxWaitEvent(f2.event), ONNXIFI_STATUS_SUCCESS);
    release_event(f2.event);
  }
  release_event(in_ev);
  release_event(ready);
  drop_graph(&g);
}

/* A run that fails at run time: the output's declared shape is symbolic, so
 * SetGraphIO cannot see that the bound shape is wrong. */
static void test_run_failure(void) {
  size_t size;
  void *model = model_relu(3, "M", &size);
  onnxGraph g = init_graph(model, size);
  free(model);
  if (!check("InitGraph(Relu with a symbolic output shape)", g != NULL, "a graph", "%s", g ? "a graph" : "failure"))
    return;
  float x[3] = {-1, 0, 1}, y[4] = {9, 9, 9, 9};
  static const uint64_t s3[1] = {3}, s4[1] = {4};
  onnxTensorDescriptorV1 in = td("relu_x", T_F32, 1, s3, x), out = td("relu_y", T_F32, 1, s4, y);
  check_st("SetGraphIO(output [4] for a symbolic output that will be [3])", lib.onnxSetGraphIO(g, 1, &in, 1, &out),
           ONNXIFI_STATUS_SUCCESS);
  onnxEvent in_ev = new_signalled_event();
  onnxMemoryFenceV1 fin = fence(in_ev), fout = fence(NULL);
  onnxStatus st = lib.onnxRunGraph(g, &fin, &fout);
  check_st("RunGraph(run that will fail)", st, ONNXIFI_STATUS_SUCCESS);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    onnxStatus wst = lib.onnxWaitEvent(fout.event);
    check("WaitEvent(failed run)", wst != ONNXIFI_STATUS_SUCCESS && wst != ONNXIFI_STATUS_FALLBACK,
          "an error status", "%s", stname(wst));
    check("WaitEvent(failed run) gives a documented code",
          wst == ONNXIFI_STATUS_INTERNAL_ERROR || wst == ONNXIFI_STATUS_BACKEND_UNAVAILABLE,
          "INTERNAL_ERROR (onnxWaitEvent's list)", "%s", stname(wst));
    const char *lm = plugin_message();
    check("kilnGetLastErrorMessage after the failed wait names the output", strstr(lm, "relu_y") != NULL,
          "a message containing \"relu_y\"", "\"%s\"", lm);
    onnxEventState state = 0;
    onnxStatus gs = lib.onnxGetEventState(fout.event, &state);
    check("output event of a failed run", gs == ONNXIFI_STATUS_SUCCESS && state == ONNXIFI_EVENT_STATE_SIGNALLED,
          "SUCCESS, SIGNALLED", "%s, %s", stname(gs), evstate_name(state));
    if (check("kilnGetEventStatus available", event_status != NULL, "resolved", "%s",
              event_status ? "resolved" : "missing")) {
      onnxStatus rs = ONNXIFI_STATUS_SUCCESS;
      const char *m = NULL;
      check_st("kilnGetEventStatus(failed run)", event_status(fout.event, &rs, &m), ONNXIFI_STATUS_SUCCESS);
      check_st("kilnGetEventStatus(failed run) run status", rs, ONNXIFI_STATUS_MISMATCHING_SHAPE);
      check("kilnGetEventStatus(failed run) message names the output", m && strstr(m, "relu_y"),
            "a message containing \"relu_y\"", "\"%s\"", m ? m : "(NULL)");
      rs = ONNXIFI_STATUS_SUCCESS;
      check_st("kilnGetEventStatus(failed run, message=NULL)", event_status(fout.event, &rs, NULL),
               ONNXIFI_STATUS_SUCCESS);
      check_st("kilnGetEventStatus(runStatus=NULL)", event_status(fout.event, NULL, &m),
               ONNXIFI_STATUS_INVALID_POINTER);
    }
    release_event(fout.event);
  }
  /* The right shape then works. */
  float y3[3] = {9, 9, 9};
  onnxTensorDescriptorV1 out3 = td("relu_y", T_F32, 1, s3, y3);
  check_st("SetGraphIO(symbolic output bound as [3])", lib.onnxSetGraphIO(g, 1, &in, 1, &out3),
           ONNXIFI_STATUS_SUCCESS);
  onnxStatus wst;
  st = run_once(g, &wst);
  check("Relu with a symbolic output runs", st == ONNXIFI_STATUS_SUCCESS && wst == ONNXIFI_STATUS_SUCCESS,
        "SUCCESS, SUCCESS", "%s, %s", stname(st), stname(wst));
  static const float want[3] = {0, 0, 1};
  check_floats("Relu with a symbolic output", y3, want, 3);
  release_event(in_ev);
  drop_graph(&g);
}

/* A run-time index out of range fails the run on every backend with the
 * same message (on OpenCL the Gather kernel flags it and the run reads the
 * flag back), and the next run with good indices succeeds. */
static void test_run_bad_index(void) {
  size_t size;
  void *model = model_gather(&size);
  onnxGraph g = init_graph(model, size);
  free(model);
  if (!check("InitGraph(Gather)", g != NULL, "a graph", "%s", g ? "a graph" : "failure")) return;
  float data[20], rows[12];
  for (int i = 0; i < 20; i++) data[i] = (float)i;
  int32_t idx[3] = {4, -1, 0};
  static const uint64_t s54[2] = {5, 4}, s3[1] = {3}, s34[2] = {3, 4};
  onnxTensorDescriptorV1 in[2] = {td("data", T_F32, 2, s54, data), td("idx", T_I32, 1, s3, idx)};
  onnxTensorDescriptorV1 out = td("rows", T_F32, 2, s34, rows);
  check_st("SetGraphIO(Gather)", lib.onnxSetGraphIO(g, 2, in, 1, &out), ONNXIFI_STATUS_SUCCESS);
  for (int run = 0; run < 3; run++) {
    idx[1] = run == 1 ? 7 : -1;
    onnxStatus wst = ONNXIFI_STATUS_INTERNAL_ERROR;
    onnxEvent in_ev = new_signalled_event();
    onnxMemoryFenceV1 fin = fence(in_ev), fout = fence(NULL);
    onnxStatus st = lib.onnxRunGraph(g, &fin, &fout);
    char lm[512] = "";
    if (st == ONNXIFI_STATUS_SUCCESS) {
      wst = lib.onnxWaitEvent(fout.event);
      snprintf(lm, sizeof lm, "%s", plugin_message()); /* before the next call replaces it */
      release_event(fout.event);
    }
    release_event(in_ev);
    if (run == 1) {
      check("Gather with index 7 of 5 fails at the wait",
            st == ONNXIFI_STATUS_SUCCESS && wst == ONNXIFI_STATUS_INTERNAL_ERROR, "SUCCESS, INTERNAL_ERROR", "%s, %s",
            stname(st), stname(wst));
      check("the failed run's message names the index and the node",
            strstr(lm, "index 7 is out of range for a dimension of size 5") && strstr(lm, "Gather"),
            "\"... Gather ... index 7 is out of range for a dimension of size 5\"", "\"%s\"", lm);
    } else {
      check("Gather with good indices runs", st == ONNXIFI_STATUS_SUCCESS && wst == ONNXIFI_STATUS_SUCCESS,
            "SUCCESS, SUCCESS", "%s, %s", stname(st), stname(wst));
      float want[12];
      for (int c = 0; c < 4; c++) want[c] = data[16 + c], want[4 + c] = data[16 + c], want[8 + c] = data[c];
      check_floats(run ? "Gather after the failed run" : "Gather", rows, want, 12);
    }
  }
  drop_graph(&g);
}

/* ------------------------------------------------------------------------ */
/* onnxReleaseGraph                                                          */

static void test_release_graph(void) {
  size_t size;
  void *model = model_relu(6, NULL, &size);
  onnxGraph g = init_graph(model, size);
  if (check("InitGraph(Relu) to release twice", g != NULL, "a graph", "%s", g ? "a graph" : "failure")) {
    check_st("ReleaseGraph", lib.onnxReleaseGraph(g), ONNXIFI_STATUS_SUCCESS);
    check_st("ReleaseGraph(same graph again)", lib.onnxReleaseGraph(g), ONNXIFI_STATUS_INVALID_GRAPH);
    float x[6] = {0}, y[6];
    static const uint64_t s6[1] = {6};
    onnxTensorDescriptorV1 in = td("relu_x", T_F32, 1, s6, x), out = td("relu_y", T_F32, 1, s6, y);
    check_st("SetGraphIO(released graph)", lib.onnxSetGraphIO(g, 1, &in, 1, &out), ONNXIFI_STATUS_INVALID_GRAPH);
    onnxEvent ready = new_signalled_event();
    onnxMemoryFenceV1 fin = fence(ready), fout = fence(NULL);
    onnxStatus st = lib.onnxRunGraph(g, &fin, &fout);
    check_st("RunGraph(released graph)", st, ONNXIFI_STATUS_INVALID_GRAPH);
    drop_run(st, &fout);
    release_event(ready);
  }
  check_st("ReleaseGraph(unknown pointer)", lib.onnxReleaseGraph(BOGUS), ONNXIFI_STATUS_INVALID_GRAPH);
  check_st("ReleaseGraph(NULL)", lib.onnxReleaseGraph(NULL), ONNXIFI_STATUS_INVALID_GRAPH);
  check_st("ReleaseGraph(a backend handle)", lib.onnxReleaseGraph(g_be), ONNXIFI_STATUS_INVALID_GRAPH);

  /* ReleaseGraph while a run waits for its input event: it must block until
   * the run is done; a second thread signals the input after 100 ms. */
  g = init_graph(model, size);
  free(model);
  if (!check("InitGraph(Relu) to release during a run", g != NULL, "a graph", "%s", g ? "a graph" : "failure"))
    return;
  float x[6] = {-3, -1, 0, 1, 2, 5}, y[6] = {9, 9, 9, 9, 9, 9};
  static const uint64_t s6[1] = {6};
  onnxTensorDescriptorV1 in = td("relu_x", T_F32, 1, s6, x), out = td("relu_y", T_F32, 1, s6, y);
  check_st("SetGraphIO(Relu)", lib.onnxSetGraphIO(g, 1, &in, 1, &out), ONNXIFI_STATUS_SUCCESS);
  onnxEvent in_ev = new_event();
  onnxMemoryFenceV1 fin = fence(in_ev), fout = fence(NULL);
  onnxStatus st = lib.onnxRunGraph(g, &fin, &fout);
  check_st("RunGraph(input to be signalled by another thread)", st, ONNXIFI_STATUS_SUCCESS);
  delayed_signal sig;
  if (st != ONNXIFI_STATUS_SUCCESS || !delayed_signal_start(&sig, in_ev, 100)) {
    release_event(in_ev);
    drop_graph(&g);
    return;
  }
  double t0 = now_ms();
  st = lib.onnxReleaseGraph(g);
  double t1 = now_ms();
  bool fired = delayed_signal_finish(&sig);
  check_st("ReleaseGraph(run pending)", st, ONNXIFI_STATUS_SUCCESS);
  check("ReleaseGraph blocks until the pending run finished", fired && t1 >= sig.fired_at,
        "returns after the input is signalled (~100 ms)", "returned after %.0f ms, signal %s", t1 - t0,
        fired ? fmt("at %.0f ms", sig.fired_at - t0) : "not sent");
  check_st("SignalEvent from the second thread", fired ? sig.status : ONNXIFI_STATUS_INTERNAL_ERROR,
           ONNXIFI_STATUS_SUCCESS);
  onnxEventState state = 0;
  onnxStatus gs = lib.onnxGetEventState(fout.event, &state);
  check("output event right after ReleaseGraph returned",
        gs == ONNXIFI_STATUS_SUCCESS && state == ONNXIFI_EVENT_STATE_SIGNALLED, "SUCCESS, SIGNALLED", "%s, %s",
        stname(gs), evstate_name(state));
  check_st("WaitEvent(output of the run the release waited for)", lib.onnxWaitEvent(fout.event),
           ONNXIFI_STATUS_SUCCESS);
  static const float want[6] = {0, 0, 0, 1, 2, 5};
  check_floats("Relu finished by ReleaseGraph", y, want, 6);
  release_event(fout.event);
  release_event(in_ev);
}

/* The backend released while one of its graphs lives: kiln documents that
 * the graph keeps working until it is released (plugin/onnxifi.c). */
static void test_backend_release_with_graph(void) {
  onnxBackend be = NULL;
  onnxStatus st = lib.onnxInitBackend(g_id, NULL, &be);
  if (!check_st("InitBackend(for a graph that outlives it)", st, ONNXIFI_STATUS_SUCCESS)) return;
  size_t size;
  void *model = model_relu(6, NULL, &size);
  onnxGraph g = NULL;
  st = lib.onnxInitGraph(be, NULL, size, model, 0, NULL, &g);
  check_st("InitGraph(Relu) on that backend", st, ONNXIFI_STATUS_SUCCESS);
  check_st("ReleaseBackend(with a live graph)", lib.onnxReleaseBackend(be), ONNXIFI_STATUS_SUCCESS);
  onnxGraph g2 = BOGUS;
  st = lib.onnxInitGraph(be, NULL, size, model, 0, NULL, &g2);
  check_st("InitGraph(released backend)", st, ONNXIFI_STATUS_INVALID_BACKEND);
  if (st == ONNXIFI_STATUS_SUCCESS) drop_graph(&g2);
  free(model);
  if (!g) return;
  float x[6] = {-3, -1, 0, 1, 2, 5}, y[6] = {9, 9, 9, 9, 9, 9};
  static const uint64_t s6[1] = {6};
  onnxTensorDescriptorV1 in = td("relu_x", T_F32, 1, s6, x), out = td("relu_y", T_F32, 1, s6, y);
  check_st("SetGraphIO(graph of a released backend)", lib.onnxSetGraphIO(g, 1, &in, 1, &out), ONNXIFI_STATUS_SUCCESS);
  onnxStatus wst;
  st = run_once(g, &wst);
  check("RunGraph + WaitEvent(graph of a released backend)",
        st == ONNXIFI_STATUS_SUCCESS && wst == ONNXIFI_STATUS_SUCCESS, "SUCCESS, SUCCESS", "%s, %s", stname(st),
        stname(wst));
  static const float want[6] = {0, 0, 0, 1, 2, 5};
  check_floats("Relu on a graph of a released backend", y, want, 6);
  check_st("ReleaseGraph(graph of a released backend)", lib.onnxReleaseGraph(g), ONNXIFI_STATUS_SUCCESS);
}

/* ------------------------------------------------------------------------ */
/* extensions                                                                */

static void test_extensions(void) {
  if (!check("onnxGetExtensionFunctionAddress is exported", get_ext != NULL, "found by dlsym", "%s",
             get_ext ? "found by dlsym" : "missing"))
    return;
  char names[] = KILN_EXTENSION_NAMES;
  for (char *save = NULL, *w = strtok_r(names, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
    if (!strcmp(w, "onnx_extension_function")) continue; /* names the mechanism, not a function */
    onnxExtensionFunctionPointer fp = NULL;
    onnxStatus st = get_ext(g_id, w, &fp);
    check_st(fmt("GetExtensionFunctionAddress(\"%s\")", w), st, ONNXIFI_STATUS_SUCCESS);
    check(fmt("GetExtensionFunctionAddress(\"%s\") pointer", w), fp != NULL, "non-NULL", "%s",
          fp ? "non-NULL" : "NULL");
  }
  onnxExtensionFunctionPointer fp = (onnxExtensionFunctionPointer)(void (*)(void))test_extensions;
  check_st("GetExtensionFunctionAddress(unknown name)", get_ext(g_id, "kilnNoSuchFunction", &fp),
           ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  check_null("GetExtensionFunctionAddress(unknown name) sets *function to NULL", (const void *)(uintptr_t)fp);
  check_st("GetExtensionFunctionAddress(\"\")", get_ext(g_id, "", &fp), ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  check_st("GetExtensionFunctionAddress(name=NULL)", get_ext(g_id, NULL, &fp), ONNXIFI_STATUS_INVALID_POINTER);
  check_st("GetExtensionFunctionAddress(function=NULL)", get_ext(g_id, "kilnGetEventStatus", NULL),
           ONNXIFI_STATUS_INVALID_POINTER);
  check_st("GetExtensionFunctionAddress(unknown ID)", get_ext(BOGUS, "kilnGetEventStatus", &fp),
           ONNXIFI_STATUS_INVALID_ID);
  check_st("GetExtensionFunctionAddress(NULL ID)", get_ext(NULL, "kilnGetEventStatus", &fp), ONNXIFI_STATUS_INVALID_ID);

  /* kilnGetLastErrorMessage */
  if (check("kilnGetLastErrorMessage resolved", last_error != NULL, "resolved", "%s",
            last_error ? "resolved" : "missing")) {
    check_st("kilnGetLastErrorMessage(message=NULL)", last_error(NULL), ONNXIFI_STATUS_INVALID_POINTER);
    size_t size;
    void *model = model_bad(BAD_UNKNOWN_OP, &size);
    onnxStatus st = lib.onnxGetBackendCompatibility(g_id, size, model);
    free(model);
    const char *m = NULL;
    onnxStatus ls = last_error(&m);
    check("kilnGetLastErrorMessage after UNSUPPORTED_OPERATOR names the op",
          st == ONNXIFI_STATUS_UNSUPPORTED_OPERATOR && ls == ONNXIFI_STATUS_SUCCESS && m &&
              strstr(m, UNKNOWN_OP_NAME),
          "a message containing \"" UNKNOWN_OP_NAME "\"", "%s, \"%s\"", stname(st), m ? m : "(NULL)");
    m = NULL;
    st = lib.onnxReleaseGraph(BOGUS);
    ls = last_error(&m);
    check("kilnGetLastErrorMessage after INVALID_GRAPH is non-empty",
          st == ONNXIFI_STATUS_INVALID_GRAPH && ls == ONNXIFI_STATUS_SUCCESS && m && *m, "a non-empty message",
          "%s, \"%s\"", stname(st), m ? m : "(NULL)");
  }

  /* onnxSetIOAndRunGraph end to end. */
  if (!check("onnxSetIOAndRunGraph resolved", set_io_and_run != NULL, "resolved", "%s",
             set_io_and_run ? "resolved" : "missing"))
    return;
  size_t size;
  void *model = model_add(&size);
  onnxGraph g = init_graph(model, size);
  free(model);
  if (!check("InitGraph(Add) for onnxSetIOAndRunGraph", g != NULL, "a graph", "%s", g ? "a graph" : "failure"))
    return;
  float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, sum[6] = {0};
  onnxTensorDescriptorV1 in[2] = {td("add_a", T_F32, 2, S23, a), td("add_b", T_F32, 2, S23, b)};
  onnxTensorDescriptorV1 out = td("add_sum", T_F32, 2, S23, sum);
  onnxMemoryFenceV1 fout = fence(NULL);
  onnxStatus st = set_io_and_run(BOGUS, 2, in, 1, &out, &fout);
  check_st("onnxSetIOAndRunGraph(unknown graph)", st, ONNXIFI_STATUS_INVALID_GRAPH);
  drop_run(st, &fout);
  check_st("onnxSetIOAndRunGraph(outputFence=NULL)", set_io_and_run(g, 2, in, 1, &out, NULL),
           ONNXIFI_STATUS_INVALID_POINTER);
  fout = fence(NULL);
  st = set_io_and_run(g, 2, in, 1, NULL, &fout);
  check_st("onnxSetIOAndRunGraph(outputDescriptors=NULL)", st, ONNXIFI_STATUS_INVALID_POINTER);
  drop_run(st, &fout);
  fout = fence(NULL);
  st = set_io_and_run(g, 1, in, 1, &out, &fout);
  check_st("onnxSetIOAndRunGraph(one input missing)", st, ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  drop_run(st, &fout);
  fout = fence(NULL);
  st = set_io_and_run(g, 2, in, 1, &out, &fout);
  check_st("onnxSetIOAndRunGraph", st, ONNXIFI_STATUS_SUCCESS);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    check("onnxSetIOAndRunGraph stores the output event", fout.event != NULL, "non-NULL", "%p", fout.event);
    check_st("WaitEvent(onnxSetIOAndRunGraph output)", lib.onnxWaitEvent(fout.event), ONNXIFI_STATUS_SUCCESS);
    static const float want[6] = {1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f};
    check_floats("onnxSetIOAndRunGraph result", sum, want, 6);
    release_event(fout.event);
  }
  drop_graph(&g);
}

/* ------------------------------------------------------------------------ */
/* BOOL (TensorProto type 9) across the ABI                                  */

/* kilnGetGraphStatistics on a live graph, and its error codes. */
static void test_graph_statistics(void) {
  onnxExtensionFunctionPointer fp = NULL;
  onnxStatus st = get_ext ? get_ext(g_id, "kilnGetGraphStatistics", &fp) : ONNXIFI_STATUS_INTERNAL_ERROR;
  if (!check_st("GetExtensionFunctionAddress(kilnGetGraphStatistics)", st, ONNXIFI_STATUS_SUCCESS)) return;
  kilnGetGraphStatisticsFunction stats = (kilnGetGraphStatisticsFunction)(void (*)(void))fp;
  size_t msize;
  void *model = model_relu(4, NULL, &msize);
  onnxGraph g = model ? init_graph(model, msize) : NULL;
  free(model);
  if (!check("InitGraph(relu for statistics)", g != NULL, "a graph", "%s", "NULL")) return;
  kilnGraphStatistics gs;
  memset(&gs, 0xff, sizeof gs);
  gs.size = sizeof gs;
  check_st("kilnGetGraphStatistics(relu graph)", stats(g, &gs), ONNXIFI_STATUS_SUCCESS);
  check("kilnGetGraphStatistics counts the one node", gs.size == sizeof gs && gs.nodesImported == 1 &&
        gs.nodesPlanned == 1 && gs.kernelNodes + gs.viewNodes == 1 && gs.materializedViews == 0,
        "size set, 1 node imported and planned, 1 kernel or view, nothing materialised",
        "size %llu, %llu imported, %llu planned, %llu kernels, %llu views, %llu materialised",
        (unsigned long long)gs.size, (unsigned long long)gs.nodesImported, (unsigned long long)gs.nodesPlanned,
        (unsigned long long)gs.kernelNodes, (unsigned long long)gs.viewNodes, (unsigned long long)gs.materializedViews);
  gs.size = offsetof(kilnGraphStatistics, runsOnWorker) - 8; /* shorter than the struct ever was */
  check_st("kilnGetGraphStatistics(size too small)", stats(g, &gs), ONNXIFI_STATUS_INVALID_SIZE);
  check_st("kilnGetGraphStatistics(NULL stats)", stats(g, NULL), ONNXIFI_STATUS_INVALID_POINTER);
  check_st("kilnGetGraphStatistics(unknown graph)", stats(BOGUS, &gs), ONNXIFI_STATUS_INVALID_GRAPH);
  check_st("ReleaseGraph(statistics graph)", lib.onnxReleaseGraph(g), ONNXIFI_STATUS_SUCCESS);
  gs.size = sizeof gs;
  check_st("kilnGetGraphStatistics(released graph)", stats(g, &gs), ONNXIFI_STATUS_INVALID_GRAPH);
}

/* Where runs run: a host thread waiting on the output of a run that has
 * not started (input signalled) runs it itself (KILN_RUN_ON_WAIT, read at
 * graph init). Each run is counted once, by the thread that ran it; the
 * results are the worker's; runs queued behind an unsignalled input wait
 * for it, in order. */
static bool stats_of(kilnGetGraphStatisticsFunction stats, onnxGraph g, kilnGraphStatistics *gs) {
  memset(gs, 0, sizeof *gs);
  gs->size = sizeof *gs;
  return stats(g, gs) == ONNXIFI_STATUS_SUCCESS;
}

static void run_on_wait_case(kilnGetGraphStatisticsFunction stats, bool on_wait) {
  const char *tag = on_wait ? "run on wait" : "KILN_RUN_ON_WAIT=0";
  setenv("KILN_RUN_ON_WAIT", on_wait ? "1" : "0", 1);
  size_t size;
  void *model = model_add(&size);
  onnxGraph g = model ? init_graph(model, size) : NULL;
  free(model);
  unsetenv("KILN_RUN_ON_WAIT");
  if (!check(fmt("InitGraph(Add, %s)", tag), g != NULL, "a graph", "%s", "NULL")) return;
  enum { RUNS = 200, QUEUED = 3 };
  uint64_t s23[2] = {2, 3};
  float a[QUEUED][6], b[6], sum[QUEUED][6];
  for (int i = 0; i < 6; i++) b[i] = (float)i;
  int bad = 0;
  /* the host pattern of ONNX's driver and Caffe2: RunGraph, SignalEvent(input), WaitEvent(output) */
  for (int r = 0; r < RUNS && !bad; r++) {
    for (int i = 0; i < 6; i++) a[0][i] = (float)(r * 6 + i);
    onnxTensorDescriptorV1 in[2] = {td("add_a", T_F32, 2, s23, a[0]), td("add_b", T_F32, 2, s23, b)};
    onnxTensorDescriptorV1 out = td("add_sum", T_F32, 2, s23, sum[0]);
    onnxStatus ws = ONNXIFI_STATUS_INTERNAL_ERROR;
    if (lib.onnxSetGraphIO(g, 2, in, 1, &out) || run_once(g, &ws) || ws) bad = 1;
    for (int i = 0; i < 6 && !bad; i++)
      if (sum[0][i] != (float)(r * 6 + 2 * i)) bad = 2;
  }
  check(fmt("%d runs RunGraph/SignalEvent/WaitEvent (%s)", RUNS, tag), !bad, "every run succeeds with a+b",
        "%s", bad == 1 ? "a failed call" : "a wrong sum");
  kilnGraphStatistics gs;
  if (stats_of(stats, g, &gs))
    check(fmt("each run counted once, by the thread that ran it (%s)", tag),
          gs.runsOnWorker + gs.runsOnWaitingThread == RUNS &&
              (on_wait ? gs.runsOnWaitingThread > 0 : gs.runsOnWaitingThread == 0),
          on_wait ? "200 in all, some on the waiting thread" : "200 in all, none on the waiting thread",
          "%llu on the worker, %llu on the waiting thread", (unsigned long long)gs.runsOnWorker,
          (unsigned long long)gs.runsOnWaitingThread);
  /* three runs queued behind unsignalled inputs, signalled last to first;
     the host waits on the last run's output first (not next in line: it
     waits), then on the others */
  onnxEvent ins[QUEUED] = {0}, outs[QUEUED] = {0};
  bool queued = true;
  for (int q = 0; q < QUEUED && queued; q++) {
    for (int i = 0; i < 6; i++) a[q][i] = (float)(100 * (q + 1) + i), sum[q][i] = -1.0f;
    onnxTensorDescriptorV1 in[2] = {td("add_a", T_F32, 2, s23, a[q]), td("add_b", T_F32, 2, s23, b)};
    onnxTensorDescriptorV1 out = td("add_sum", T_F32, 2, s23, sum[q]);
    ins[q] = new_event();
    onnxMemoryFenceV1 fin = fence(ins[q]), fout = fence(NULL);
    queued = ins[q] && !lib.onnxSetGraphIO(g, 2, in, 1, &out) && !lib.onnxRunGraph(g, &fin, &fout);
    outs[q] = fout.event;
  }
  if (check(fmt("three runs queued behind unsignalled inputs (%s)", tag), queued, "queued", "%s", "a failure")) {
    onnxEventState es = ONNXIFI_EVENT_STATE_INVALID;
    check("the first queued run waits for its input", !lib.onnxGetEventState(outs[0], &es) &&
          es == ONNXIFI_EVENT_STATE_NONSIGNALLED, "NONSIGNALLED", "%s", evstate_name(es));
    for (int q = QUEUED - 1; q >= 0; q--)
      check_st(fmt("SignalEvent(input of queued run %d)", q), lib.onnxSignalEvent(ins[q]), ONNXIFI_STATUS_SUCCESS);
    check_st("WaitEvent(last queued run) first", lib.onnxWaitEvent(outs[QUEUED - 1]), ONNXIFI_STATUS_SUCCESS);
    for (int q = 0; q < QUEUED - 1; q++)
      check_st(fmt("WaitEvent(queued run %d)", q), lib.onnxWaitEvent(outs[q]), ONNXIFI_STATUS_SUCCESS);
    bool right = true;
    for (int q = 0; q < QUEUED; q++)
      for (int i = 0; i < 6; i++) right = right && sum[q][i] == (float)(100 * (q + 1) + 2 * i);
    check(fmt("each queued run wrote its own a+b (%s)", tag), right, "three right sums", "%s", "a wrong sum");
    if (stats_of(stats, g, &gs))
      check(fmt("queued runs counted once each (%s)", tag), gs.runsOnWorker + gs.runsOnWaitingThread == RUNS + QUEUED,
            "203 in all", "%llu", (unsigned long long)(gs.runsOnWorker + gs.runsOnWaitingThread));
  }
  for (int q = 0; q < QUEUED; q++) {
    release_event(ins[q]);
    release_event(outs[q]);
  }
  /* a host built with the struct as first published (ending at fusedNodes) */
  memset(&gs, 0xab, sizeof gs);
  gs.size = offsetof(kilnGraphStatistics, runsOnWorker);
  check("kilnGetGraphStatistics(the older, shorter struct)",
        stats(g, &gs) == ONNXIFI_STATUS_SUCCESS && gs.size == offsetof(kilnGraphStatistics, runsOnWorker) &&
            gs.nodesImported == 1 && gs.runsOnWorker == 0xababababababababull,
        "success, its size kept, nothing written past it", "size %llu, runsOnWorker %llx",
        (unsigned long long)gs.size, (unsigned long long)gs.runsOnWorker);
  drop_graph(&g);
}

/* A run queued behind another graph's run (its input fence is that run's
 * output event, its input that run's output buffer): the first run, woken
 * by the host's signal of its own input, signals the second run's input on
 * its worker, which must wake the second graph's worker (kiln_graph_notify);
 * the host waits on the second run's output only. */
static void chained_case(bool on_wait) {
  const char *tag = on_wait ? "run on wait" : "KILN_RUN_ON_WAIT=0";
  setenv("KILN_RUN_ON_WAIT", on_wait ? "1" : "0", 1);
  size_t size;
  void *model = model_add(&size);
  onnxGraph ga = model ? init_graph(model, size) : NULL, gb = model ? init_graph(model, size) : NULL;
  free(model);
  unsetenv("KILN_RUN_ON_WAIT");
  if (check(fmt("InitGraph(Add) twice (%s)", tag), ga && gb, "two graphs", "%s", "NULL")) {
    uint64_t s23[2] = {2, 3};
    float a[6], b[6], mid[6], out[6];
    for (int i = 0; i < 6; i++) a[i] = (float)(10 * i), b[i] = (float)i, mid[i] = out[i] = -1.0f;
    onnxTensorDescriptorV1 ina[2] = {td("add_a", T_F32, 2, s23, a), td("add_b", T_F32, 2, s23, b)};
    onnxTensorDescriptorV1 outa = td("add_sum", T_F32, 2, s23, mid);
    onnxTensorDescriptorV1 inb[2] = {td("add_a", T_F32, 2, s23, mid), td("add_b", T_F32, 2, s23, b)};
    onnxTensorDescriptorV1 outb = td("add_sum", T_F32, 2, s23, out);
    onnxEvent in = new_event();
    onnxMemoryFenceV1 fin = fence(in), fmid = fence(NULL), fout = fence(NULL);
    bool queued = in && !lib.onnxSetGraphIO(ga, 2, ina, 1, &outa) && !lib.onnxRunGraph(ga, &fin, &fmid);
    onnxMemoryFenceV1 fmid_in = fence(fmid.event);
    queued = queued && !lib.onnxSetGraphIO(gb, 2, inb, 1, &outb) && !lib.onnxRunGraph(gb, &fmid_in, &fout);
    if (check(fmt("a run queued behind another graph's run (%s)", tag), queued, "queued", "%s", "a failure")) {
      check_st(fmt("SignalEvent(input of the first run) (%s)", tag), lib.onnxSignalEvent(in), ONNXIFI_STATUS_SUCCESS);
      check_st(fmt("WaitEvent(output of the second run) (%s)", tag), lib.onnxWaitEvent(fout.event),
               ONNXIFI_STATUS_SUCCESS);
      bool right = true;
      for (int i = 0; i < 6; i++) right = right && out[i] == (float)(10 * i + 2 * i);
      check(fmt("the second run read the first run's output (%s)", tag), right, "a + 2b", "%s", "a wrong sum");
    }
    release_event(fout.event);
    release_event(fmid.event);
    release_event(in);
  }
  drop_graph(&gb);
  drop_graph(&ga);
}

/* A run made ready while nobody waits on its output owes its worker a
 * wake (plugin/graph.c, "deferred wakes"); a host that only polls the
 * output's state pays it, so the run completes on the worker. */
static void polled_case(kilnGetGraphStatisticsFunction stats) {
  size_t size;
  void *model = model_add(&size);
  onnxGraph g = model ? init_graph(model, size) : NULL;
  free(model);
  if (!check("InitGraph(Add) for polling", g != NULL, "a graph", "%s", "NULL")) return;
  uint64_t s23[2] = {2, 3};
  float a[6], b[6], sum[6];
  for (int i = 0; i < 6; i++) a[i] = (float)(7 * i), b[i] = (float)i, sum[i] = -1.0f;
  onnxTensorDescriptorV1 in[2] = {td("add_a", T_F32, 2, s23, a), td("add_b", T_F32, 2, s23, b)};
  onnxTensorDescriptorV1 out = td("add_sum", T_F32, 2, s23, sum);
  /* one run waited on first: the worker is started and then asleep (a
     worker just starting would find the next run ready by itself) */
  onnxStatus ws = ONNXIFI_STATUS_INTERNAL_ERROR;
  bool first = !lib.onnxSetGraphIO(g, 2, in, 1, &out) && !run_once(g, &ws) && !ws;
  check("a first run, waited on", first, "success", "%s", "a failure");
  sleep_ms(20);
  onnxEvent ev = new_event();
  onnxMemoryFenceV1 fin = fence(ev), fout = fence(NULL);
  if (first && check("a run queued for polling", ev && !lib.onnxRunGraph(g, &fin, &fout), "queued", "%s", "a failure")) {
    check_st("SignalEvent(input of the polled run)", lib.onnxSignalEvent(ev), ONNXIFI_STATUS_SUCCESS);
    onnxEventState es = ONNXIFI_EVENT_STATE_NONSIGNALLED;
    double until = now_ms() + 10000;
    while (es == ONNXIFI_EVENT_STATE_NONSIGNALLED && now_ms() < until) {
      if (lib.onnxGetEventState(fout.event, &es)) break;
      if (es == ONNXIFI_EVENT_STATE_NONSIGNALLED) sleep_ms(1);
    }
    check("a run polled with onnxGetEventState only completes", es == ONNXIFI_EVENT_STATE_SIGNALLED,
          "SIGNALLED within 10 s", "%s", evstate_name(es));
    bool right = true;
    for (int i = 0; i < 6; i++) right = right && sum[i] == (float)(8 * i);
    check("the polled run wrote a+b", right, "a+b", "%s", "a wrong sum");
    kilnGraphStatistics gs;
    if (stats_of(stats, g, &gs))
      check("the polled run ran on the worker", gs.runsOnWorker == 1 && gs.runsOnWaitingThread == 1,
            "1 on the worker (the first on the waiting thread)", "%llu on the worker, %llu on the waiting thread",
            (unsigned long long)gs.runsOnWorker, (unsigned long long)gs.runsOnWaitingThread);
    if (es != ONNXIFI_EVENT_STATE_SIGNALLED) {
      onnxStatus w = lib.onnxWaitEvent(fout.event);
      (void)w;
    }
  }
  release_event(fout.event);
  release_event(ev);
  drop_graph(&g);
}

static void test_run_on_wait(void) {
  onnxExtensionFunctionPointer fp = NULL;
  if (!get_ext || get_ext(g_id, "kilnGetGraphStatistics", &fp)) {
    check("kilnGetGraphStatistics for the run-on-wait tests", false, "the extension", "%s", "none");
    return;
  }
  kilnGetGraphStatisticsFunction stats = (kilnGetGraphStatisticsFunction)(void (*)(void))fp;
  run_on_wait_case(stats, true);
  run_on_wait_case(stats, false);
  chained_case(true);
  chained_case(false);
  polled_case(stats);
}

static void test_bool(void) {
  size_t size;
  void *model = model_not(&size);
  bool is_not = true;
  onnxStatus st = lib.onnxGetBackendCompatibility(g_id, size, model);
  if (st != ONNXIFI_STATUS_SUCCESS) { /* no Not kernel: Identity on bool */
    free(model);
    model = model_identity_bool(&size);
    is_not = false;
    st = lib.onnxGetBackendCompatibility(g_id, size, model);
  }
  const char *op = is_not ? "Not" : "Identity";
  check_st(fmt("GetBackendCompatibility(%s on bool)", op), st, ONNXIFI_STATUS_SUCCESS);
  onnxGraph g = init_graph(model, size);
  free(model);
  if (!check(fmt("InitGraph(%s on bool)", op), g != NULL, "a graph", "%s", g ? "a graph" : "failure")) return;
  uint8_t flag[4] = {1, 0, 0, 1}, nflag[4] = {7, 7, 7, 7};
  static const uint64_t s4[1] = {4};
  onnxTensorDescriptorV1 in = td("flag", T_BOOL, 1, s4, flag), out = td("nflag", T_BOOL, 1, s4, nflag);
  check_st("SetGraphIO(bool descriptors, data type 9)", lib.onnxSetGraphIO(g, 1, &in, 1, &out),
           ONNXIFI_STATUS_SUCCESS);
  onnxStatus wst;
  st = run_once(g, &wst);
  check(fmt("%s on bool runs", op), st == ONNXIFI_STATUS_SUCCESS && wst == ONNXIFI_STATUS_SUCCESS,
        "SUCCESS, SUCCESS", "%s, %s", stname(st), stname(wst));
  bool ok = true;
  for (int i = 0; i < 4; i++) ok &= nflag[i] == (is_not ? !flag[i] : flag[i]);
  check(fmt("%s on bool result", op), ok, is_not ? "{0,1,1,0}" : "{1,0,0,1}", "{%d,%d,%d,%d}", nflag[0], nflag[1],
        nflag[2], nflag[3]);
  drop_graph(&g);
}

/* ------------------------------------------------------------------------ */
/* real ONNX node tests through the whole ABI                                */

static void test_node_case(const char *name) {
  tu_case c;
  bool loaded = tu_case_load(&c, KILN_NODE_TEST_DIR, name);
  if (!check(fmt("node test %s: model.onnx", name), loaded, "readable", "%s", loaded ? "readable" : "missing"))
    return;
  const kiln_graph *kg = c.graph;
  onnxGraph g = NULL;
  onnxStatus st = lib.onnxGetBackendCompatibility(g_id, c.model_size, c.model);
  check_st(fmt("node test %s: GetBackendCompatibility", name), st, ONNXIFI_STATUS_SUCCESS);
  if (!kg || kg->n_inputs > 8 || kg->n_outputs > 8) {
    check(fmt("node test %s: model imports", name), false, "an importable model", "%s", "an import failure");
    tu_case_free(&c);
    return;
  }
  st = lib.onnxInitGraph(g_be, NULL, c.model_size, c.model, 0, NULL, &g);
  check_st(fmt("node test %s: InitGraph", name), st, ONNXIFI_STATUS_SUCCESS);
  kiln_tensor ins[8], exp[8], got[8];
  onnxTensorDescriptorV1 din[8], dout[8];
  uint64_t shp[16][KILN_MAX_RANK];
  memset(ins, 0, sizeof ins);
  memset(exp, 0, sizeof exp);
  memset(got, 0, sizeof got);
  int nin = 0, nout = kg->n_outputs;
  bool ok = st == ONNXIFI_STATUS_SUCCESS;
  kiln_status ks = KILN_OK;
  for (int i = 0; i < kg->n_inputs && ok; i++) {
    int v = kg->inputs[i];
    if (kg->values[v].init) continue;
    ok = tu_case_tensor(&c, 0, "input", nin, &ins[nin], &ks) && !ks;
    if (!ok) break;
    for (int k = 0; k < ins[nin].rank; k++) shp[nin][k] = (uint64_t)ins[nin].dims[k];
    din[nin] = td(kg->values[v].name, (onnxEnum)ins[nin].dtype, (uint32_t)ins[nin].rank, shp[nin], ins[nin].data);
    nin++;
  }
  for (int o = 0; o < nout && ok; o++) {
    ok = tu_case_tensor(&c, 0, "output", o, &exp[o], &ks) && !ks &&
         !kiln_tensor_alloc(&got[o], exp[o].dtype, exp[o].rank, exp[o].dims);
    if (!ok) break;
    for (int k = 0; k < exp[o].rank; k++) shp[8 + o][k] = (uint64_t)exp[o].dims[k];
    dout[o] = td(kg->values[kg->outputs[o]].name, (onnxEnum)exp[o].dtype, (uint32_t)exp[o].rank, shp[8 + o],
                 got[o].data);
  }
  if (st == ONNXIFI_STATUS_SUCCESS)
    check(fmt("node test %s: test data", name), ok, "readable .pb tensors", "%s", ok ? "readable" : "unreadable");
  if (ok) {
    st = lib.onnxSetGraphIO(g, (uint32_t)nin, din, (uint32_t)nout, dout);
    check_st(fmt("node test %s: SetGraphIO", name), st, ONNXIFI_STATUS_SUCCESS);
    onnxStatus wst = ONNXIFI_STATUS_INTERNAL_ERROR;
    if (st == ONNXIFI_STATUS_SUCCESS) st = run_once(g, &wst);
    check(fmt("node test %s: RunGraph + WaitEvent", name), st == ONNXIFI_STATUS_SUCCESS && wst == ONNXIFI_STATUS_SUCCESS,
          "SUCCESS, SUCCESS", "%s, %s", stname(st), stname(wst));
    for (int o = 0; o < nout; o++) {
      char msg[512] = "";
      int same = tu_compare(&got[o], &exp[o], 1e-5, 1e-6, msg, sizeof msg, NULL, NULL);
      check(fmt("node test %s: output %d matches output_%d.pb", name, o, o), same, "a match", "%s",
            same ? "a match" : msg);
    }
  }
  for (int i = 0; i < 8; i++) {
    kiln_tensor_release(&ins[i]);
    kiln_tensor_release(&exp[i]);
    kiln_tensor_release(&got[i]);
  }
  drop_graph(&g);
  tu_case_free(&c);
}

/* ------------------------------------------------------------------------ */

static int finish(int code) {
  printf("abi: %d passed, %d failed\n", n_pass, n_fail);
  if (code) return code;
  return n_fail ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: abi PATH/libonnxifi-kiln.so\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, argv[1], &lib)) {
    report(false, fmt("onnxifi_load(%s)", argv[1]), "the 15 ONNXIFI 1.0 functions", "a load failure");
    return finish(2);
  }
  report(true, "onnxifi_load", "the 15 ONNXIFI 1.0 functions", "all 15");
  get_ext = (onnxGetExtensionFunctionAddressFunction)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");

  size_t n = 0;
  onnxStatus st = lib.onnxGetBackendIDs(NULL, &n);
  if (!check("GetBackendIDs(NULL, &n) before anything else", st == ONNXIFI_STATUS_FALLBACK && n >= 1,
             "FALLBACK and n >= 1", "%s and n = %zu", stname(st), n)) {
    onnxifi_unload(&lib);
    return finish(1);
  }
  g_count = n;
  onnxBackendID *ids = calloc(n, sizeof *ids);
  st = lib.onnxGetBackendIDs(ids, &n);
  if (!check_st("GetBackendIDs(array of the count)", st, ONNXIFI_STATUS_SUCCESS) || !ids[0]) {
    free(ids);
    onnxifi_unload(&lib);
    return finish(1);
  }
  g_id = ids[0];
  onnxExtensionFunctionPointer fp;
  if (get_ext && get_ext(g_id, "kilnGetLastErrorMessage", &fp) == ONNXIFI_STATUS_SUCCESS)
    last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
  if (get_ext && get_ext(g_id, "kilnGetEventStatus", &fp) == ONNXIFI_STATUS_SUCCESS)
    event_status = (kilnGetEventStatusFunction)(void (*)(void))fp;
  if (get_ext && get_ext(g_id, "onnxSetIOAndRunGraph", &fp) == ONNXIFI_STATUS_SUCCESS)
    set_io_and_run = (onnxSetIOAndRunGraphFunction)(void (*)(void))fp;
  st = lib.onnxInitBackend(g_id, NULL, &g_be);
  if (!check_st("InitBackend(first ID)", st, ONNXIFI_STATUS_SUCCESS) || !g_be) {
    for (size_t i = 0; i < n; i++) (void)lib.onnxReleaseBackendID(ids[i]);
    free(ids);
    onnxifi_unload(&lib);
    return finish(1);
  }

  test_backend_ids();
  test_backend_info();
  test_compatibility();
  test_backends();
  test_events();
  test_init_graph();
  test_set_graph_io();
  test_run_graph();
  test_run_failure();
  test_run_bad_index();
  test_release_graph();
  test_backend_release_with_graph();
  test_extensions();
  test_bool();
  test_graph_statistics();
  test_run_on_wait();
  test_node_case("test_relu");
  test_node_case("test_add");
  test_node_case("test_not_2d");

  check_st("ReleaseBackend(main backend)", lib.onnxReleaseBackend(g_be), ONNXIFI_STATUS_SUCCESS);
  for (size_t i = 0; i < n; i++)
    check_st(fmt("ReleaseBackendID(#%zu)", i), lib.onnxReleaseBackendID(ids[i]), ONNXIFI_STATUS_SUCCESS);
  free(ids);
  onnxifi_unload(&lib);
  return finish(0);
}
