/* tests/abi_clmem: OpenCL interop through the real ONNXIFI path — a host
 * that already uses OpenCL hands kiln its cl_context
 * (ONNXIFI_BACKEND_OPENCL_CONTEXT) and binds cl_mem tensors
 * (ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER). The plugin is loaded with Debian's
 * onnxifi_loader (dlopen), as tests/abi.c does; the host side (context,
 * queue, buffers, clEnqueueWriteBuffer / clEnqueueReadBuffer) is this
 * program's own OpenCL code. Every graph result read back from the host's
 * buffers is compared with the `reference` backend run on host memory
 * (rtol 1e-4, atol 1e-5, as the conformance runners).
 *
 *   abi_clmem PATH/libonnxifi-kiln.so [SOURCE_DIR] [--bench] [--two-drivers] [--suite DIR]...
 *
 * SOURCE_DIR (default: from __FILE__) holds examples/mlp.onnx and cnn.onnx.
 * KILN_DEVICE defaults to opencl,reference here. No OpenCL platform or no
 * device kiln can use: prints the reason and exits 77 (skip). --bench adds
 * a timing of a 4M-element elementwise chain with host-memory IO against
 * cl_mem IO. --two-drivers: the ICD loader must offer a device of a second
 * platform (else skip, 77), whose context must be refused for the backend.
 * --suite DIR: every node-test style case under DIR (tests/views,
 * tests/fusion) with all its inputs and outputs in cl_mem, against its
 * expected outputs.
 * Prints "ok"/"FAIL" lines and "abi_clmem: N passed, N failed". */
#include <CL/cl.h>
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/kiln/kiln_ext.h"
#include "onnx/onnx.pb-c.h"
#include "tests/casefile.h"
#include "tests/testutil.h"

static int n_pass, n_fail;
static struct onnxifi_library lib;
static kilnGetLastErrorMessageFunction last_error;
static onnxBackendID id_cl, id_ref;
static cl_platform_id plat;
static cl_device_id dev;
static cl_context hctx;    /* the host's context, handed to kiln */
static cl_command_queue hq; /* the host's own queue */
static onnxBackend be_cl, be_ref;
static bool two_drivers;

static const char *msg(void) {
  const char *m = NULL;
  if (last_error && last_error(&m) == ONNXIFI_STATUS_SUCCESS && m) return m;
  return "";
}

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

/* A status check; on a status check of a failure, the plugin's message must
 * be non-empty and contain want_msg (when given). */
static bool check_st(const char *what, onnxStatus got, onnxStatus want, const char *want_msg) {
  const char *m = msg();
  bool ok = got == want;
  if (ok && want != ONNXIFI_STATUS_SUCCESS && want != ONNXIFI_STATUS_FALLBACK)
    ok = *m && (!want_msg || strstr(m, want_msg));
  return check(ok, "%s: expected status 0x%x%s%s, got 0x%x (%s)", what, (unsigned)want, want_msg ? " with " : "",
               want_msg ? want_msg : "", (unsigned)got, m);
}

static void die(const char *what) {
  printf("FAIL %s (cannot go on)\nabi_clmem: %d passed, %d failed\n", what, n_pass, n_fail + 1);
  exit(1);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ------------------------------------------------------------------------ */
/* models (protobuf-c); every message is calloc'd into a pool freed at exit */

static void *pool[8192];
static int npool;
static void *palloc(size_t n) {
  void *p = calloc(1, n ? n : 1);
  if (!p || npool == (int)(sizeof pool / sizeof *pool)) die("out of memory building a model");
  pool[npool++] = p;
  return p;
}
static void pool_free(void) {
  while (npool) free(pool[--npool]);
}

typedef struct mb {
  Onnx__ModelProto model;
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opsets[1];
} mb;

enum { F32 = 1, I64 = 7 };

static mb *mb_new(const char *name) {
  mb *m = palloc(sizeof *m);
  m->model = (Onnx__ModelProto)ONNX__MODEL_PROTO__INIT;
  m->model.has_ir_version = 1;
  m->model.ir_version = 8;
  m->opset = (Onnx__OperatorSetIdProto)ONNX__OPERATOR_SET_ID_PROTO__INIT;
  m->opset.domain = (char *)"";
  m->opset.has_version = 1;
  m->opset.version = 13;
  m->opsets[0] = &m->opset;
  m->model.n_opset_import = 1;
  m->model.opset_import = m->opsets;
  m->graph = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
  m->graph.name = (char *)name;
  m->graph.input = palloc(16 * sizeof(void *));
  m->graph.output = palloc(16 * sizeof(void *));
  m->graph.node = palloc(16 * sizeof(void *));
  m->graph.initializer = palloc(16 * sizeof(void *));
  m->model.graph = &m->graph;
  return m;
}

/* A tensor ValueInfo; a dim < 0 is a symbol "n<i>"; rank < 0: no shape. */
static Onnx__ValueInfoProto *vinfo(const char *name, int dt, int rank, const int64_t *dims) {
  Onnx__ValueInfoProto *v = palloc(sizeof *v);
  *v = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  v->name = (char *)name;
  Onnx__TypeProto *tp = palloc(sizeof *tp);
  *tp = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  Onnx__TypeProto__Tensor *tt = palloc(sizeof *tt);
  *tt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  tt->has_elem_type = 1;
  tt->elem_type = dt;
  if (rank >= 0) {
    Onnx__TensorShapeProto *sh = palloc(sizeof *sh);
    *sh = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
    sh->n_dim = (size_t)rank;
    sh->dim = palloc((size_t)rank * sizeof(void *));
    for (int i = 0; i < rank; i++) {
      Onnx__TensorShapeProto__Dimension *d = palloc(sizeof *d);
      *d = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
      if (dims[i] >= 0) {
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d->dim_value = dims[i];
      } else {
        char *p = palloc(8);
        snprintf(p, 8, "n%d", i);
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        d->dim_param = p;
      }
      sh->dim[i] = d;
    }
    tt->shape = sh;
  }
  tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tp->tensor_type = tt;
  v->type = tp;
  return v;
}

static void mb_in(mb *m, const char *name, int dt, int rank, const int64_t *dims) {
  m->graph.input[m->graph.n_input++] = vinfo(name, dt, rank, dims);
}
static void mb_out(mb *m, const char *name, int dt, int rank, const int64_t *dims) {
  m->graph.output[m->graph.n_output++] = vinfo(name, dt, rank, dims);
}

/* A node: ins/outs are space-separated names. */
static void mb_node(mb *m, const char *op, const char *ins, const char *outs) {
  Onnx__NodeProto *n = palloc(sizeof *n);
  *n = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  n->op_type = (char *)op;
  const char *lists[2] = {ins, outs};
  for (int k = 0; k < 2; k++) {
    char **arr = palloc(8 * sizeof *arr);
    size_t c = 0;
    for (const char *p = lists[k]; *p;) {
      while (*p == ' ') p++;
      const char *e = p;
      while (*e && *e != ' ') e++;
      if (e > p) {
        char *s = palloc((size_t)(e - p) + 1);
        memcpy(s, p, (size_t)(e - p));
        arr[c++] = s;
      }
      p = e;
    }
    if (!k) n->input = arr, n->n_input = c;
    else n->output = arr, n->n_output = c;
  }
  n->name = n->output[0];
  m->graph.node[m->graph.n_node++] = n;
}

static void mb_init_f(mb *m, const char *name, int rank, const int64_t *dims, const float *data) {
  Onnx__TensorProto *t = palloc(sizeof *t);
  *t = (Onnx__TensorProto)ONNX__TENSOR_PROTO__INIT;
  t->name = (char *)name;
  t->has_data_type = 1;
  t->data_type = F32;
  t->n_dims = (size_t)rank;
  t->dims = palloc((size_t)rank * sizeof *t->dims);
  size_t n = 1;
  for (int i = 0; i < rank; i++) n *= (size_t)(t->dims[i] = dims[i]);
  t->float_data = palloc(n * sizeof(float));
  memcpy(t->float_data, data, n * sizeof(float));
  t->n_float_data = n;
  m->graph.initializer[m->graph.n_initializer++] = t;
}

static void *mb_pack(mb *m, size_t *size) {
  *size = onnx__model_proto__get_packed_size(&m->model);
  uint8_t *b = palloc(*size);
  onnx__model_proto__pack(&m->model, b);
  return b;
}

static void *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void *b = n > 0 ? palloc((size_t)n) : NULL;
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) b = NULL;
  fclose(f);
  *size = b ? (size_t)n : 0;
  return b;
}

/* The elementwise chain: a = x + y; z = Sigmoid(Tanh(a * x)); w = a - y;
 * q = Neg(x); all [2,3,n] float. */
static void *model_chain(int64_t n, size_t *size) {
  int64_t d[3] = {2, 3, n};
  mb *m = mb_new("chain");
  mb_in(m, "x", F32, 3, d);
  mb_in(m, "y", F32, 3, d);
  mb_out(m, "z", F32, 3, d);
  mb_out(m, "w", F32, 3, d);
  mb_out(m, "q", F32, 3, d);
  mb_node(m, "Add", "x y", "a");
  mb_node(m, "Mul", "a x", "b");
  mb_node(m, "Tanh", "b", "c");
  mb_node(m, "Sigmoid", "c", "z");
  mb_node(m, "Sub", "a y", "w");
  mb_node(m, "Neg", "x", "q");
  return mb_pack(m, size);
}

/* ------------------------------------------------------------------------ */
/* the host side                                                             */

/* One tensor of a run: host memory, or the host's cl_mem (offset into it
 * only for reading back and writing in). */
typedef struct io {
  const char *name;
  int dt;
  int rank;
  uint64_t shape[6];
  void *host;  /* host data (input) or result (output) */
  cl_mem mem;  /* NULL: host memory */
} io;

static size_t io_bytes(const io *t) {
  size_t n = t->dt == I64 ? 8 : 4;
  for (int i = 0; i < t->rank; i++) n *= (size_t)t->shape[i];
  return n;
}

static void fill(float *p, size_t n, unsigned seed) {
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < n; i++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    p[i] = (float)((double)(s >> 11) / (double)(1ull << 53) * 4.0 - 2.0);
  }
}

static cl_mem new_buf(size_t bytes) {
  cl_int e;
  cl_mem m = clCreateBuffer(hctx, CL_MEM_READ_WRITE, bytes, NULL, &e);
  if (!m || e) die("clCreateBuffer on the host's context");
  return m;
}

static void descs(const io *t, int n, onnxTensorDescriptorV1 *d) {
  for (int i = 0; i < n; i++) {
    memset(&d[i], 0, sizeof d[i]);
    d[i].tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
    d[i].name = t[i].name;
    d[i].dataType = (onnxEnum)t[i].dt;
    d[i].memoryType = t[i].mem ? ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER : ONNXIFI_MEMORY_TYPE_CPU;
    d[i].dimensions = (uint32_t)t[i].rank;
    d[i].shape = t[i].shape;
    d[i].buffer = t[i].mem ? (onnxPointer)(uintptr_t)t[i].mem : (onnxPointer)(uintptr_t)t[i].host;
  }
}

/* Binds and runs once; device inputs are written by the host (its own
 * queue, blocking) first, device outputs read back (its own queue) after
 * the output fence. in_event: the run waits for a host event that is
 * signalled after a non-blocking write and clFinish (checks the input
 * fence). Returns the run's status. */
static onnxStatus run(onnxBackend be, onnxGraph g, io *in, int nin, io *out, int nout, bool in_event) {
  onnxTensorDescriptorV1 di[8], dout[8];
  descs(in, nin, di);
  descs(out, nout, dout);
  onnxStatus st = lib.onnxSetGraphIO(g, (uint32_t)nin, di, (uint32_t)nout, dout);
  if (st) return st;
  for (int i = 0; i < nout; i++) /* poison first (an output may share an input's buffer): a stale result cannot pass */
    if (out[i].mem) {
      float nan = NAN;
      if (clEnqueueFillBuffer(hq, out[i].mem, &nan, sizeof nan, 0, io_bytes(&out[i]), 0, NULL, NULL)) die("fill");
    }
  for (int i = 0; i < nin; i++)
    if (in[i].mem && clEnqueueWriteBuffer(hq, in[i].mem, in_event ? CL_FALSE : CL_TRUE, 0, io_bytes(&in[i]), in[i].host,
                                          0, NULL, NULL))
      die("host clEnqueueWriteBuffer");
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  if (!in_event) clFinish(hq);
  if ((st = lib.onnxInitEvent(be, &fin.event))) return st;
  if (!in_event) st = lib.onnxSignalEvent(fin.event);
  if (!st) st = lib.onnxRunGraph(g, &fin, &fout);
  if (!st && in_event) {
    clFinish(hq); /* the host's writes are done: now the run may read them */
    st = lib.onnxSignalEvent(fin.event);
  }
  if (!st) st = lib.onnxWaitEvent(fout.event);
  if (fout.event) lib.onnxReleaseEvent(fout.event);
  lib.onnxReleaseEvent(fin.event);
  for (int i = 0; i < nout && !st; i++)
    if (out[i].mem && clEnqueueReadBuffer(hq, out[i].mem, CL_TRUE, 0, io_bytes(&out[i]), out[i].host, 0, NULL, NULL))
      die("host clEnqueueReadBuffer");
  return st;
}

/* The same graph on the reference backend, host memory only: outputs into
 * ref[k] (malloc'd, caller frees). */
static onnxStatus run_ref(const void *model, size_t size, const io *in, int nin, const io *out, int nout, void **ref) {
  onnxGraph g = NULL;
  onnxStatus st = lib.onnxInitGraph(be_ref, NULL, size, model, 0, NULL, &g);
  if (st) return st;
  io hi[8], ho[8];
  for (int i = 0; i < nin; i++) hi[i] = in[i], hi[i].mem = NULL;
  for (int i = 0; i < nout; i++) {
    ho[i] = out[i];
    ho[i].mem = NULL;
    ho[i].host = ref[i] = malloc(io_bytes(&out[i]));
  }
  st = run(be_ref, g, hi, nin, ho, nout, false);
  lib.onnxReleaseGraph(g);
  return st;
}

/* got against want: floats within rtol 1e-4 + atol 1e-5 (both NaN-free);
 * int64 exactly. */
static bool same(const io *t, const void *got, const void *want, const char *what) {
  size_t n = io_bytes(t) / (t->dt == I64 ? 8 : 4);
  for (size_t i = 0; i < n; i++) {
    if (t->dt == I64) {
      int64_t a = ((const int64_t *)got)[i], b = ((const int64_t *)want)[i];
      if (a != b) return check(false, "%s '%s': element %zu is %lld, want %lld", what, t->name, i, (long long)a, (long long)b);
      continue;
    }
    double a = ((const float *)got)[i], b = ((const float *)want)[i];
    if (!(fabs(a - b) <= 1e-5 + 1e-4 * fabs(b)))
      return check(false, "%s '%s': element %zu is %.8g, want %.8g", what, t->name, i, a, b);
  }
  return check(true, "%s '%s': %zu values match the reference", what, t->name, n);
}

/* Runs model on be_cl with the given IO and on the reference, compares. */
static void run_and_compare(const char *what, const void *model, size_t size, io *in, int nin, io *out, int nout,
                            bool in_event) {
  onnxGraph g = NULL;
  onnxStatus st = lib.onnxInitGraph(be_cl, NULL, size, model, 0, NULL, &g);
  if (!check_st(what, st, ONNXIFI_STATUS_SUCCESS, NULL)) return;
  st = run(be_cl, g, in, nin, out, nout, in_event);
  void *ref[8] = {0};
  if (check_st(what, st, ONNXIFI_STATUS_SUCCESS, NULL) &&
      check_st("reference run", run_ref(model, size, in, nin, out, nout, ref), ONNXIFI_STATUS_SUCCESS, NULL))
    for (int k = 0; k < nout; k++) same(&out[k], out[k].host, ref[k], what);
  for (int k = 0; k < nout; k++) free(ref[k]);
  lib.onnxReleaseGraph(g);
}

/* ------------------------------------------------------------------------ */
/* the tests                                                                 */

static void test_info(void) {
  uint64_t mt = 0;
  size_t sz = sizeof mt;
  onnxStatus st = lib.onnxGetBackendInfo(id_cl, ONNXIFI_BACKEND_MEMORY_TYPES, &mt, &sz);
  check(!st && mt == (ONNXIFI_MEMORY_TYPE_CPU | ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER),
        "MEMORY_TYPES of the OpenCL backend: CPU | OPENCL_BUFFER (got status 0x%x, 0x%llx)", (unsigned)st,
        (unsigned long long)mt);
  sz = sizeof mt;
  st = lib.onnxGetBackendInfo(id_ref, ONNXIFI_BACKEND_MEMORY_TYPES, &mt, &sz);
  check(!st && mt == ONNXIFI_MEMORY_TYPE_CPU, "MEMORY_TYPES of reference: CPU only (got 0x%llx)",
        (unsigned long long)mt);
  sz = 0;
  st = lib.onnxGetBackendInfo(id_cl, ONNXIFI_BACKEND_OPENCL_PLATFORM_ID, NULL, &sz);
  check(st == ONNXIFI_STATUS_FALLBACK && sz == sizeof(cl_platform_id),
        "OPENCL_PLATFORM_ID with no buffer: FALLBACK and size %zu (got 0x%x, %zu)", sizeof(cl_platform_id),
        (unsigned)st, sz);
  cl_platform_id dp = NULL;
  clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof dp, &dp, NULL);
  check(dp == plat, "OPENCL_DEVICE_ID is a device of OPENCL_PLATFORM_ID");
  cl_device_type ty = 0;
  check(!clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof ty, &ty, NULL), "OPENCL_DEVICE_ID is a valid cl_device_id");
  sz = sizeof dp;
  check_st("OPENCL_PLATFORM_ID of reference", lib.onnxGetBackendInfo(id_ref, ONNXIFI_BACKEND_OPENCL_PLATFORM_ID, &dp, &sz),
           ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, "not an OpenCL device");
  sz = sizeof dp;
  check_st("OPENCL_DEVICE_ID of reference", lib.onnxGetBackendInfo(id_ref, ONNXIFI_BACKEND_OPENCL_DEVICE_ID, &dp, &sz),
           ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, "not an OpenCL device");
}

static cl_uint ctx_refs(cl_context c) {
  cl_uint r = 0;
  clGetContextInfo(c, CL_CONTEXT_REFERENCE_COUNT, sizeof r, &r, NULL);
  return r;
}

static void test_init_backend(void) {
  onnxBackend b = (onnxBackend)&b;
  uint64_t null_ctx[] = {ONNXIFI_BACKEND_OPENCL_CONTEXT, 0, ONNXIFI_BACKEND_PROPERTY_NONE};
  check_st("InitBackend(OPENCL_CONTEXT = NULL)", lib.onnxInitBackend(id_cl, null_ctx, &b),
           ONNXIFI_STATUS_INVALID_PROPERTY, "NULL");
  check(b == NULL, "a failed InitBackend leaves the handle NULL");
  uint64_t twice[] = {ONNXIFI_BACKEND_OPENCL_CONTEXT, (uint64_t)(uintptr_t)hctx, ONNXIFI_BACKEND_OPENCL_CONTEXT,
                      (uint64_t)(uintptr_t)hctx, ONNXIFI_BACKEND_PROPERTY_NONE};
  check_st("InitBackend(OPENCL_CONTEXT twice)", lib.onnxInitBackend(id_cl, twice, &b), ONNXIFI_STATUS_INVALID_PROPERTY,
           "twice");
  uint64_t good[] = {ONNXIFI_BACKEND_OPENCL_CONTEXT, (uint64_t)(uintptr_t)hctx, ONNXIFI_BACKEND_PROPERTY_NONE};
  check_st("InitBackend(reference, OPENCL_CONTEXT)", lib.onnxInitBackend(id_ref, good, &b),
           ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, "not an OpenCL device");
  uint64_t unknown[] = {ONNXIFI_BACKEND_CUDA_STREAM, 1, ONNXIFI_BACKEND_PROPERTY_NONE};
  check_st("InitBackend(CUDA_STREAM) on OpenCL", lib.onnxInitBackend(id_cl, unknown, &b),
           ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, NULL);

  /* a context without the backend's device: one on another platform's
     device (when the ICD loader offers two drivers), and one on a
     sub-device (when the driver partitions its device and does not list
     the parent device in such a context: PoCL 3.1 lists it) */
  int lacking = 0;
  cl_platform_id ps[8];
  cl_uint np = 0;
  if (clGetPlatformIDs(8, ps, &np)) np = 0;
  for (cl_uint i = 0; i < np && i < 8; i++) {
    cl_device_id od;
    cl_int e;
    if (ps[i] == plat || clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 1, &od, NULL)) continue;
    cl_context oc = clCreateContext(NULL, 1, &od, NULL, NULL, &e);
    if (!oc || e) continue;
    uint64_t other[] = {ONNXIFI_BACKEND_OPENCL_CONTEXT, (uint64_t)(uintptr_t)oc, ONNXIFI_BACKEND_PROPERTY_NONE};
    check_st("InitBackend(context of another platform's device)", lib.onnxInitBackend(id_cl, other, &b),
             ONNXIFI_STATUS_INVALID_PROPERTY, "does not contain the backend's device");
    if (b) lib.onnxReleaseBackend(b), b = NULL;
    clReleaseContext(oc);
    lacking++;
    break;
  }
  cl_device_partition_property pp[] = {CL_DEVICE_PARTITION_EQUALLY, 1, 0};
  cl_device_id sub[64];
  cl_uint nsub = 0;
  cl_uint max_sub = 0; /* ask only a driver that partitions (rusticl's ICD entry is NULL) */
  if (clGetDeviceInfo(dev, CL_DEVICE_PARTITION_MAX_SUB_DEVICES, sizeof max_sub, &max_sub, NULL)) max_sub = 0;
  if (max_sub > 1 && !clCreateSubDevices(dev, pp, 64, sub, &nsub) && nsub > 0) {
    cl_int e;
    cl_context sc = clCreateContext(NULL, 1, &sub[0], NULL, NULL, &e);
    cl_device_id listed = NULL;
    if (sc && !e && !clGetContextInfo(sc, CL_CONTEXT_DEVICES, sizeof listed, &listed, NULL) && listed != dev) {
      uint64_t other[] = {ONNXIFI_BACKEND_OPENCL_CONTEXT, (uint64_t)(uintptr_t)sc, ONNXIFI_BACKEND_PROPERTY_NONE};
      check_st("InitBackend(context of a sub-device only)", lib.onnxInitBackend(id_cl, other, &b),
               ONNXIFI_STATUS_INVALID_PROPERTY, "does not contain the backend's device");
      if (b) lib.onnxReleaseBackend(b), b = NULL;
      lacking++;
    }
    if (sc) clReleaseContext(sc);
    for (cl_uint i = 0; i < nsub && i < 64; i++) clReleaseDevice(sub[i]);
  }
  check(lacking || !two_drivers, "--two-drivers: a context lacking the device was checked");
  if (!lacking)
    printf("note: one driver and no sub-device context without the device here: a context lacking the backend's "
           "device is not checked in this run (abi_clmem_two_drivers checks it)\n");

  /* kiln holds its own reference to the host's context while the backend lives */
  cl_uint r0 = ctx_refs(hctx);
  onnxBackend b2 = NULL;
  if (check_st("InitBackend(host's context)", lib.onnxInitBackend(id_cl, good, &b2), ONNXIFI_STATUS_SUCCESS, NULL)) {
    cl_uint r1 = ctx_refs(hctx);
    check(r1 > r0, "the backend holds the host's context (references %u -> %u: its retain and queue)", r0, r1);
    lib.onnxReleaseBackend(b2);
    cl_uint r2 = ctx_refs(hctx);
    check(r2 == r0, "ReleaseBackend releases it (references %u)", r2);
  }
}

/* The chain with mixed IO, three runs with new data; then all on the
 * device with the input fence signalled after the host's writes. */
static void test_chain(void) {
  const int64_t n = 37;
  size_t size;
  void *model = model_chain(n, &size);
  size_t cnt = (size_t)(6 * n), bytes = cnt * sizeof(float);
  float *xh = palloc(bytes), *yh = palloc(bytes), *z = palloc(bytes), *w = palloc(bytes), *q = palloc(bytes);
  cl_mem xm = new_buf(bytes), ym = new_buf(bytes), zm = new_buf(bytes), wm = new_buf(bytes);
  /* q into a sub-buffer of a larger buffer, at the device's alignment */
  cl_uint align_bits = 0;
  clGetDeviceInfo(dev, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL);
  size_t off = align_bits / 8 ? align_bits / 8 : 128;
  cl_mem big = new_buf(off + bytes + 64);
  cl_buffer_region reg = {off, bytes};
  cl_int e;
  cl_mem qm = clCreateSubBuffer(big, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
  if (!qm || e) die("clCreateSubBuffer");
  for (int r = 0; r < 3; r++) {
    fill(xh, cnt, (unsigned)r);
    fill(yh, cnt, (unsigned)(r + 10));
    io in[2] = {{"x", F32, 3, {2, 3, (uint64_t)n}, xh, xm}, {"y", F32, 3, {2, 3, (uint64_t)n}, yh, NULL}};
    io out[3] = {{"z", F32, 3, {2, 3, (uint64_t)n}, z, zm},
                 {"w", F32, 3, {2, 3, (uint64_t)n}, w, NULL},
                 {"q", F32, 3, {2, 3, (uint64_t)n}, q, qm}};
    char what[96];
    snprintf(what, sizeof what, "chain, mixed IO (x, z, q on the device; q a sub-buffer), run %d", r);
    run_and_compare(what, model, size, in, 2, out, 3, false);
  }
  io in[2] = {{"x", F32, 3, {2, 3, (uint64_t)n}, xh, xm}, {"y", F32, 3, {2, 3, (uint64_t)n}, yh, ym}};
  io out[3] = {{"z", F32, 3, {2, 3, (uint64_t)n}, z, zm},
               {"w", F32, 3, {2, 3, (uint64_t)n}, w, wm},
               {"q", F32, 3, {2, 3, (uint64_t)n}, q, qm}};
  fill(xh, cnt, 77);
  fill(yh, cnt, 78);
  run_and_compare("chain, all IO on the device, input fence after the host's writes", model, size, in, 2, out, 3, true);

  /* the host's output buffer is its input buffer (in place for the host):
     z overwrites x only after every read of x */
  {
    io i3[2] = {{"x", F32, 3, {2, 3, (uint64_t)n}, xh, xm}, {"y", F32, 3, {2, 3, (uint64_t)n}, yh, ym}};
    io o3[3] = {{"z", F32, 3, {2, 3, (uint64_t)n}, z, xm},
                {"w", F32, 3, {2, 3, (uint64_t)n}, w, wm},
                {"q", F32, 3, {2, 3, (uint64_t)n}, q, qm}};
    fill(xh, cnt, 41);
    run_and_compare("chain, output z into x's own cl_mem", model, size, i3, 2, o3, 3, false);
  }
  /* one graph, several runs and rebinding between host and device */
  onnxGraph g = NULL;
  if (check_st("InitGraph(chain)", lib.onnxInitGraph(be_cl, NULL, size, model, 0, NULL, &g), ONNXIFI_STATUS_SUCCESS,
               NULL)) {
    void *ref[3] = {0};
    fill(xh, cnt, 5);
    fill(yh, cnt, 6);
    check_st("reference run", run_ref(model, size, in, 2, out, 3, ref), ONNXIFI_STATUS_SUCCESS, NULL);
    for (int r = 0; r < 4; r++) {
      io i2[2], o2[3];
      memcpy(i2, in, sizeof i2);
      memcpy(o2, out, sizeof o2);
      if (r & 1) i2[0].mem = NULL, o2[1].mem = NULL;
      if (r & 2) i2[1].mem = NULL, o2[0].mem = NULL;
      if (check_st("chain on one graph, rebound", run(be_cl, g, i2, 2, o2, 3, false), ONNXIFI_STATUS_SUCCESS, NULL))
        for (int k = 0; k < 3; k++) same(&o2[k], o2[k].host, ref[k], r & 1 ? "rebound (x on the host)" : "rebound");
    }
    for (int k = 0; k < 3; k++) free(ref[k]);
    lib.onnxReleaseGraph(g);
  }
  clReleaseMemObject(qm);
  clReleaseMemObject(big);
  clReleaseMemObject(xm);
  clReleaseMemObject(ym);
  clReleaseMemObject(zm);
  clReleaseMemObject(wm);
}

/* Every case of a node-test style suite (tests/views, tests/fusion) with
 * every input and output in the host's cl_mem, against the case's
 * expected outputs (the conformance runners' tolerances). */
static void test_suite(const char *root) {
  char **names = NULL;
  int n = tu_list_cases(root, &names), pass = 0, fail = 0, skip = 0;
  for (int ci = 0; ci < n; ci++) {
    tu_case c;
    memset(&c, 0, sizeof c);
    if (strncmp(names[ci], "test_", 5)) continue; /* the generator script, a README */
    if (!tu_case_load(&c, root, names[ci]) || !c.graph || tu_abi_limit(c.graph) || tu_case_erratum(names[ci])) {
      printf("skip %s: %s\n", names[ci],
             !c.graph ? "cannot load its model" : tu_abi_limit(c.graph) ? tu_abi_limit(c.graph) : tu_case_erratum(names[ci]));
      skip++;
      tu_case_free(&c);
      continue;
    }
    const kiln_graph *g = c.graph;
    int nin = 0, nout = g->n_outputs, bad = 0;
    kiln_tensor ins[16], exp[16], got[16];
    cl_mem mi[16] = {0}, mo[16] = {0};
    uint64_t shp[32][KILN_MAX_RANK];
    onnxTensorDescriptorV1 di[16], dout[16];
    memset(ins, 0, sizeof ins);
    memset(exp, 0, sizeof exp);
    memset(got, 0, sizeof got);
    kiln_status ks = KILN_OK;
    if (g->n_inputs > 16 || nout > 16) bad = 2;
    for (int i = 0; i < g->n_inputs && !bad; i++) {
      int v = g->inputs[i];
      if (g->values[v].init) continue;
      kiln_tensor *t = &ins[nin];
      if (!tu_case_tensor(&c, 0, "input", nin, t, &ks) || ks) bad = 1;
      if (bad) break;
      tu_fix_dtype(t, g->values[v].type.dtype);
      size_t bytes = kiln_tensor_bytes(t);
      for (int k = 0; k < t->rank; k++) shp[nin][k] = (uint64_t)t->dims[k];
      if (!bytes || tu_data_disagrees(&g->values[v].type, t)) bad = 2;
      if (bad) break;
      mi[nin] = new_buf(bytes);
      if (clEnqueueWriteBuffer(hq, mi[nin], CL_TRUE, 0, bytes, t->data, 0, NULL, NULL)) die("host write");
      di[nin] = (onnxTensorDescriptorV1){ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, g->values[v].name, (onnxEnum)t->dtype,
                                         ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER, (uint32_t)t->rank, shp[nin],
                                         (onnxPointer)(uintptr_t)mi[nin]};
      nin++;
    }
    for (int o = 0; o < nout && !bad; o++) {
      kiln_tensor *t = &exp[o];
      if (!tu_case_tensor(&c, 0, "output", o, t, &ks) || ks) bad = 1;
      if (bad) break;
      tu_fix_dtype(t, g->values[g->outputs[o]].type.dtype);
      size_t bytes = kiln_tensor_bytes(t);
      if (!bytes || kiln_tensor_alloc(&got[o], t->dtype, t->rank, t->dims)) bad = 2;
      if (bad) break;
      for (int k = 0; k < t->rank; k++) shp[16 + o][k] = (uint64_t)t->dims[k];
      mo[o] = new_buf(bytes);
      dout[o] = (onnxTensorDescriptorV1){ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, g->values[g->outputs[o]].name,
                                         (onnxEnum)t->dtype, ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER, (uint32_t)t->rank,
                                         shp[16 + o], (onnxPointer)(uintptr_t)mo[o]};
    }
    onnxGraph gr = NULL;
    onnxStatus st = ONNXIFI_STATUS_SUCCESS;
    char why[600] = "";
    if (bad == 1) snprintf(why, sizeof why, "cannot read its data");
    if (!bad) st = lib.onnxInitGraph(be_cl, NULL, c.model_size, c.model, 0, NULL, &gr);
    if (!bad && (st == ONNXIFI_STATUS_UNSUPPORTED_OPERATOR || st == ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE)) {
      printf("skip %s: not supported (status 0x%x): %s\n", c.name, (unsigned)st, msg());
      bad = 3; /* as the conformance runners count it */
    }
    if (!bad && !st) st = lib.onnxSetGraphIO(gr, (uint32_t)nin, di, (uint32_t)nout, dout);
    if (!bad && !st) {
      onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}}, fout = fin;
      st = lib.onnxInitEvent(be_cl, &fin.event);
      if (!st) st = lib.onnxRunGraph(gr, &fin, &fout);
      if (!st) st = lib.onnxSignalEvent(fin.event);
      if (!st) st = lib.onnxWaitEvent(fout.event);
      if (st) snprintf(why, sizeof why, "status 0x%x: %s", (unsigned)st, msg());
      if (fout.event && lib.onnxReleaseEvent(fout.event)) st = ONNXIFI_STATUS_INTERNAL_ERROR;
      if (fin.event && lib.onnxReleaseEvent(fin.event)) st = ONNXIFI_STATUS_INTERNAL_ERROR;
    } else if (!bad && st) {
      snprintf(why, sizeof why, "status 0x%x: %s", (unsigned)st, msg());
    }
    for (int o = 0; o < nout && !bad && !st && !*why; o++) {
      if (clEnqueueReadBuffer(hq, mo[o], CL_TRUE, 0, kiln_tensor_bytes(&got[o]), got[o].data, 0, NULL, NULL))
        die("host read");
      double rtol, atol;
      tu_tolerance(c.name, exp[o].dtype, &rtol, &atol);
      char m[512];
      if (!tu_compare(&got[o], &exp[o], rtol, atol, m, sizeof m, NULL, NULL))
        snprintf(why, sizeof why, "output %d: %s", o, m);
    }
    if (bad == 3) {
      skip++;
    } else if (bad == 2) {
      skip++;
      printf("skip %s: a zero-sized tensor, data that disagrees with its model, or over 16 inputs/outputs\n", c.name);
    }
    else if (*why) {
      fail++;
      printf("FAIL %s on cl_mem: %s\n", c.name, why);
    } else {
      pass++;
    }
    if (gr && lib.onnxReleaseGraph(gr)) die("ReleaseGraph");
    for (int i = 0; i < 16; i++) {
      kiln_tensor_release(&ins[i]);
      kiln_tensor_release(&exp[i]);
      kiln_tensor_release(&got[i]);
      if (mi[i]) clReleaseMemObject(mi[i]);
      if (mo[i]) clReleaseMemObject(mo[i]);
    }
    tu_case_free(&c);
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  check(n > 0 && !fail && pass > 0, "suite %s with all IO in cl_mem: %d passed, %d failed, %d skipped", root, pass, fail,
        skip);
}

/* A backend on the host's context released while its graph lives: the
 * graph keeps running in that context; the context reference goes with
 * the graph. */
/* A symbolic batch (dim_param n0, no bound: the first run's 8): one graph
 * run at 8, 3, 8, 5 with every tensor in cl_mem; the smaller runs use the
 * variant compiled at 8 with fewer rows (opencl/engine_sym.c), so their
 * device buffers are copied, not bound. Compared with the reference each.
 * ax 1: the symbol inside [3,n1,5] (a padded layout: the smaller runs'
 * buffers copied as rectangles); ax 2: two symbols, [n0,n1,8] (bounds
 * the first run's 4 and 6; the run's first blocks, each copied, the
 * kernels launched per block). */
static void test_symbolic(int ax) {
  int64_t inner = ax == 2 ? 8 : 5, d[3] = {ax == 1 ? 3 : -1, ax == 0 ? 3 : -1, inner};
  mb *m = mb_new("sym_chain");
  mb_in(m, "x", F32, 3, d);
  mb_in(m, "y", F32, 3, d);
  mb_out(m, "z", F32, 3, d);
  mb_out(m, "w", F32, 3, d);
  mb_node(m, "Add", "x y", "a");
  mb_node(m, "Mul", "a x", "b");
  mb_node(m, "Tanh", "b", "z");
  mb_node(m, "Sub", "a y", "w");
  size_t size;
  void *model = mb_pack(m, &size);
  onnxGraph g = NULL;
  if (!check_st("InitGraph(symbolic chain)", lib.onnxInitGraph(be_cl, NULL, size, model, 0, NULL, &g),
                ONNXIFI_STATUS_SUCCESS, NULL))
    return;
  static const int batches[] = {8, 3, 8, 5}, two[][2] = {{4, 6}, {2, 3}, {4, 6}, {3, 5}};
  for (int r = 0; r < 4; r++) {
    uint64_t nb = (uint64_t)batches[r];
    uint64_t d0 = ax == 2 ? (uint64_t)two[r][0] : ax ? 3 : nb, d1 = ax == 2 ? (uint64_t)two[r][1] : ax ? nb : 3;
    size_t cnt = (size_t)(d0 * d1 * (uint64_t)inner), bytes = cnt * sizeof(float);
    float *xh = palloc(bytes), *yh = palloc(bytes), *z = palloc(bytes), *w = palloc(bytes);
    fill(xh, cnt, (unsigned)(40 + r));
    fill(yh, cnt, (unsigned)(50 + r));
    cl_mem xm = new_buf(bytes), ym = new_buf(bytes), zm = new_buf(bytes), wm = new_buf(bytes);
    uint64_t d2 = (uint64_t)inner;
    io in[2] = {{"x", F32, 3, {d0, d1, d2}, xh, xm}, {"y", F32, 3, {d0, d1, d2}, yh, ym}};
    io out[2] = {{"z", F32, 3, {d0, d1, d2}, z, zm}, {"w", F32, 3, {d0, d1, d2}, w, wm}};
    char what[96];
    snprintf(what, sizeof what, "symbolic chain, all IO on the device, %s %d x %d",
             ax == 2 ? "two symbols" : ax ? "dim 1" : "batch", (int)d0, (int)d1);
    void *ref[2] = {0};
    if (check_st(what, run(be_cl, g, in, 2, out, 2, false), ONNXIFI_STATUS_SUCCESS, NULL) &&
        check_st("reference run", run_ref(model, size, in, 2, out, 2, ref), ONNXIFI_STATUS_SUCCESS, NULL))
      for (int k = 0; k < 2; k++) same(&out[k], out[k].host, ref[k], what);
    for (int k = 0; k < 2; k++) free(ref[k]);
    clReleaseMemObject(xm);
    clReleaseMemObject(ym);
    clReleaseMemObject(zm);
    clReleaseMemObject(wm);
  }
  lib.onnxReleaseGraph(g);
}

static void test_backend_released_first(void) {
  uint64_t props[] = {ONNXIFI_BACKEND_OPENCL_CONTEXT, (uint64_t)(uintptr_t)hctx, ONNXIFI_BACKEND_PROPERTY_NONE};
  onnxBackend b = NULL;
  const int64_t n = 11;
  size_t size;
  void *model = model_chain(n, &size);
  onnxGraph g = NULL;
  if (!check_st("InitBackend(host's context), second backend", lib.onnxInitBackend(id_cl, props, &b),
                ONNXIFI_STATUS_SUCCESS, NULL))
    return;
  cl_uint r0 = ctx_refs(hctx);
  onnxStatus st = lib.onnxInitGraph(b, NULL, size, model, 0, NULL, &g);
  check_st("ReleaseBackend with a live graph", lib.onnxReleaseBackend(b), ONNXIFI_STATUS_SUCCESS, NULL);
  if (!check_st("InitGraph(chain) on it", st, ONNXIFI_STATUS_SUCCESS, NULL)) return;
  size_t cnt = (size_t)(6 * n), bytes = cnt * sizeof(float);
  float *xh = palloc(bytes), *yh = palloc(bytes), *z = palloc(bytes), *w = palloc(bytes), *q = palloc(bytes);
  fill(xh, cnt, 21);
  fill(yh, cnt, 22);
  cl_mem m[5];
  for (int i = 0; i < 5; i++) m[i] = new_buf(bytes);
  io in[2] = {{"x", F32, 3, {2, 3, n}, xh, m[0]}, {"y", F32, 3, {2, 3, n}, yh, m[1]}};
  io out[3] = {{"z", F32, 3, {2, 3, n}, z, m[2]}, {"w", F32, 3, {2, 3, n}, w, m[3]}, {"q", F32, 3, {2, 3, n}, q, m[4]}};
  void *ref[3] = {0};
  if (check_st("run after its backend was released", run(be_cl, g, in, 2, out, 3, false), ONNXIFI_STATUS_SUCCESS,
               NULL) &&
      check_st("reference run", run_ref(model, size, in, 2, out, 3, ref), ONNXIFI_STATUS_SUCCESS, NULL))
    for (int k = 0; k < 3; k++) same(&out[k], out[k].host, ref[k], "run after its backend was released");
  for (int k = 0; k < 3; k++) free(ref[k]);
  for (int i = 0; i < 5; i++) clReleaseMemObject(m[i]);
  lib.onnxReleaseGraph(g);
  /* a driver may drop the references its objects hold on the context a
     little after their release (rusticl under load): wait up to 5 s */
  cl_uint r1 = ctx_refs(hctx);
  for (int t = 0; t < 500 && r1 >= r0; t++) {
    nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    r1 = ctx_refs(hctx);
  }
  check(r1 < r0, "the context's references drop when the last graph goes (%u -> %u)", r0, r1);
}

/* examples/<name>.onnx with one input and one output (float). */
static void test_example(const char *src, const char *name, const char *in_name, int in_rank, const uint64_t *in_shape,
                         const char *out_name, int out_rank, const uint64_t *out_shape) {
  char path[4096];
  snprintf(path, sizeof path, "%s/examples/%s.onnx", src, name);
  size_t size = 0;
  void *model = read_file(path, &size);
  if (!check(model != NULL, "read %s", path)) return;
  io in = {in_name, F32, in_rank, {0}, NULL, NULL}, out = {out_name, F32, out_rank, {0}, NULL, NULL};
  memcpy(in.shape, in_shape, (size_t)in_rank * sizeof *in_shape);
  memcpy(out.shape, out_shape, (size_t)out_rank * sizeof *out_shape);
  in.host = palloc(io_bytes(&in));
  out.host = palloc(io_bytes(&out));
  fill(in.host, io_bytes(&in) / 4, 3);
  in.mem = new_buf(io_bytes(&in));
  out.mem = new_buf(io_bytes(&out));
  char what[96];
  snprintf(what, sizeof what, "examples/%s.onnx, cl_mem input and output", name);
  double t0 = now_ms();
  run_and_compare(what, model, size, &in, 1, &out, 1, false);
  printf("     (%s: %.0f ms including compile)\n", name, now_ms() - t0);
  clReleaseMemObject(in.mem);
  clReleaseMemObject(out.mem);
}

/* Device ops on the host's buffers: a MatMul (CLBlast) and a Conv with
 * inputs and outputs in cl_mem (one-node graphs: the outputs' arena bytes
 * are their own, so they are made in the host's buffers). */
static void test_ops(void) {
  float wconv[3 * 2 * 3 * 3];
  fill(wconv, 54, 31);
  int64_t da[2] = {8, 16}, db[2] = {16, 12}, dy[2] = {8, 12};
  int64_t dx[4] = {1, 2, 9, 9}, dw[4] = {3, 2, 3, 3}, dc[4] = {1, 3, 7, 7};
  mb *m = mb_new("matmul");
  mb_in(m, "a", F32, 2, da);
  mb_in(m, "b", F32, 2, db);
  mb_out(m, "y", F32, 2, dy);
  mb_node(m, "MatMul", "a b", "y");
  size_t size;
  void *model = mb_pack(m, &size);
  float a[128], b[192], y[96], x[162], c[147];
  fill(a, 128, 32);
  fill(b, 192, 33);
  cl_mem am = new_buf(sizeof a), bm = new_buf(sizeof b), ym = new_buf(sizeof y);
  io in[2] = {{"a", F32, 2, {8, 16}, a, am}, {"b", F32, 2, {16, 12}, b, bm}};
  io out = {"y", F32, 2, {8, 12}, y, ym};
  run_and_compare("MatMul [8,16]x[16,12] on cl_mem", model, size, in, 2, &out, 1, false);
  in[1].mem = NULL;
  run_and_compare("MatMul [8,16]x[16,12], b on the host", model, size, in, 2, &out, 1, false);
  m = mb_new("conv");
  mb_in(m, "x", F32, 4, dx);
  mb_out(m, "c", F32, 4, dc);
  mb_init_f(m, "w", 4, dw, wconv);
  mb_node(m, "Conv", "x w", "c");
  model = mb_pack(m, &size);
  fill(x, 162, 34);
  cl_mem xm = new_buf(sizeof x), cm = new_buf(sizeof c);
  io cin = {"x", F32, 4, {1, 2, 9, 9}, x, xm}, cout = {"c", F32, 4, {1, 3, 7, 7}, c, cm};
  run_and_compare("Conv 2->3 3x3 on cl_mem", model, size, &cin, 1, &cout, 1, false);
  clReleaseMemObject(am);
  clReleaseMemObject(bm);
  clReleaseMemObject(ym);
  clReleaseMemObject(xm);
  clReleaseMemObject(cm);
}

/* Outputs that are an input (Identity) or a weight; a shape input on the
 * device (Reshape); a graph with data-dependent shapes (NonZero, run on
 * the host). */
static void test_special(void) {
  int64_t d4[1] = {4}, d26[2] = {2, 6}, d2[1] = {2}, dq[2] = {-1, -1}, d23[2] = {2, 3}, dnz[2] = {2, -1};
  static const float cw[4] = {1.5f, -2, 3, 0.25f};
  float xh[12], y[12], k[4];
  fill(xh, 12, 9);
  cl_mem xm = new_buf(sizeof xh), ym = new_buf(sizeof y), km = new_buf(sizeof k);
  {
    mb *m = mb_new("ident");
    mb_in(m, "x", F32, 1, d4);
    mb_out(m, "y", F32, 1, d4);
    mb_out(m, "k", F32, 1, d4);
    mb_init_f(m, "c", 1, d4, cw);
    mb_node(m, "Identity", "x", "y");
    mb_node(m, "Identity", "c", "k");
    size_t size;
    void *model = mb_pack(m, &size);
    for (int r = 0; r < 3; r++) {
      io in = {"x", F32, 1, {4}, xh, r == 2 ? NULL : xm};
      io out[2] = {{"y", F32, 1, {4}, y, r == 1 ? NULL : ym}, {"k", F32, 1, {4}, k, km}};
      run_and_compare(r == 0 ? "Identity graph: input and weight as outputs, all on the device"
                      : r == 1 ? "Identity graph: device input to a host output"
                               : "Identity graph: host input to device outputs",
                      model, size, &in, 1, out, 2, false);
    }
  }
  {
    mb *m = mb_new("unused");
    mb_in(m, "x", F32, 1, d4);
    mb_in(m, "u", F32, 1, d4);
    mb_out(m, "y", F32, 1, d4);
    mb_node(m, "Relu", "x", "y");
    size_t size;
    void *model = mb_pack(m, &size);
    io in[2] = {{"x", F32, 1, {4}, xh, xm}, {"u", F32, 1, {4}, xh, km}};
    io out = {"y", F32, 1, {4}, y, ym};
    run_and_compare("an unused input in a cl_mem", model, size, in, 2, &out, 1, false);
  }
  {
    mb *m = mb_new("reshape");
    mb_in(m, "x", F32, 2, d26);
    mb_in(m, "s", I64, 1, d2);
    mb_out(m, "y", F32, 2, dq);
    mb_node(m, "Reshape", "x s", "y");
    size_t size;
    void *model = mb_pack(m, &size);
    cl_mem sm = new_buf(2 * sizeof(int64_t));
    int64_t s1[2] = {3, 4}, s2[2] = {4, 3};
    io in[2] = {{"x", F32, 2, {2, 6}, xh, xm}, {"s", I64, 1, {2}, s1, sm}};
    io out = {"y", F32, 2, {3, 4}, y, ym};
    run_and_compare("Reshape with its shape input in a cl_mem", model, size, in, 2, &out, 1, false);
    in[1].host = s2;
    out.shape[0] = 4, out.shape[1] = 3;
    run_and_compare("Reshape with its shape input in a cl_mem, new shape values", model, size, in, 2, &out, 1, false);
    clReleaseMemObject(sm);
  }
  {
    mb *m = mb_new("nonzero");
    mb_in(m, "x", F32, 2, d23);
    mb_out(m, "y", I64, 2, dnz);
    mb_node(m, "NonZero", "x", "y");
    size_t size;
    void *model = mb_pack(m, &size);
    float xz[6] = {0, 1, 0, 2, 0, 3};
    int64_t yi[6];
    cl_mem ymi = new_buf(sizeof yi);
    io in = {"x", F32, 2, {2, 3}, xz, xm};
    io out = {"y", I64, 2, {2, 3}, yi, ymi};
    run_and_compare("NonZero (data-dependent shape, host path) with cl_mem IO", model, size, &in, 1, &out, 1, false);
    clReleaseMemObject(ymi);
  }
  clReleaseMemObject(xm);
  clReleaseMemObject(ym);
  clReleaseMemObject(km);
}

static void test_errors(void) {
  const int64_t n = 5;
  size_t size;
  void *model = model_chain(n, &size);
  size_t bytes = 6 * n * sizeof(float);
  float h[30] = {0};
  float o1[30], o2[30], o3[30];
  cl_mem good = new_buf(bytes), small = new_buf(bytes - 4), outm = new_buf(bytes);
  cl_int e;
  cl_context other = clCreateContext(NULL, 1, &dev, NULL, NULL, &e);
  cl_mem foreign = other ? clCreateBuffer(other, CL_MEM_READ_WRITE, bytes, NULL, &e) : NULL;
  onnxGraph g = NULL;
  if (!check_st("InitGraph(chain)", lib.onnxInitGraph(be_cl, NULL, size, model, 0, NULL, &g), ONNXIFI_STATUS_SUCCESS,
                NULL))
    return;
  io in[2] = {{"x", F32, 3, {2, 3, n}, h, good}, {"y", F32, 3, {2, 3, n}, h, NULL}};
  io out[3] = {{"z", F32, 3, {2, 3, n}, o1, outm}, {"w", F32, 3, {2, 3, n}, o2, NULL}, {"q", F32, 3, {2, 3, n}, o3, NULL}};
  onnxTensorDescriptorV1 di[2], dout[3];
  descs(in, 2, di);
  descs(out, 3, dout);
  di[0].buffer = 0;
  check_st("SetGraphIO(cl_mem input NULL)", lib.onnxSetGraphIO(g, 2, di, 3, dout), ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
           "'x'");
  descs(in, 2, di);
  di[0].buffer = (onnxPointer)(uintptr_t)small;
  check_st("SetGraphIO(cl_mem input 4 bytes too small)", lib.onnxSetGraphIO(g, 2, di, 3, dout),
           ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, "the tensor needs");
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  onnxMemoryFenceV1 fout = fin;
  if (!lib.onnxInitEvent(be_cl, &fin.event)) {
    check_st("RunGraph after a failed SetGraphIO", lib.onnxRunGraph(g, &fin, &fout), ONNXIFI_STATUS_UNIDENTIFIED_NAME,
             NULL);
    lib.onnxReleaseEvent(fin.event);
  }
  descs(in, 2, di);
  dout[0].buffer = (onnxPointer)(uintptr_t)small;
  check_st("SetGraphIO(cl_mem output too small)", lib.onnxSetGraphIO(g, 2, di, 3, dout),
           ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, "'z'");
  descs(out, 3, dout);
  if (foreign) {
    di[0].buffer = (onnxPointer)(uintptr_t)foreign;
    check_st("SetGraphIO(cl_mem of another context)", lib.onnxSetGraphIO(g, 2, di, 3, dout),
             ONNXIFI_STATUS_INVALID_MEMORY_LOCATION, "another OpenCL context");
    descs(in, 2, di);
  }
  di[0].memoryType = ONNXIFI_MEMORY_TYPE_CUDA_BUFFER;
  check_st("SetGraphIO(CUDA buffer) on OpenCL", lib.onnxSetGraphIO(g, 2, di, 3, dout),
           ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE, NULL);
  di[0].memoryType = 0x40;
  check_st("SetGraphIO(unknown memory type)", lib.onnxSetGraphIO(g, 2, di, 3, dout), ONNXIFI_STATUS_INVALID_MEMORY_TYPE,
           NULL);
  descs(in, 2, di);
  check_st("SetGraphIO(valid cl_mem) after the failures", lib.onnxSetGraphIO(g, 2, di, 3, dout), ONNXIFI_STATUS_SUCCESS,
           NULL);
  lib.onnxReleaseGraph(g);

  /* an OpenCL backend without the host's context: its cl_mem cannot be kiln's */
  onnxBackend plain = NULL;
  if (check_st("InitBackend(OpenCL, no context)", lib.onnxInitBackend(id_cl, NULL, &plain), ONNXIFI_STATUS_SUCCESS,
               NULL)) {
    if (check_st("InitGraph(chain) without context", lib.onnxInitGraph(plain, NULL, size, model, 0, NULL, &g),
                 ONNXIFI_STATUS_SUCCESS, NULL)) {
      check_st("SetGraphIO(cl_mem) on a backend without ONNXIFI_BACKEND_OPENCL_CONTEXT",
               lib.onnxSetGraphIO(g, 2, di, 3, dout), ONNXIFI_STATUS_INVALID_MEMORY_LOCATION,
               "ONNXIFI_BACKEND_OPENCL_CONTEXT");
      lib.onnxReleaseGraph(g);
    }
    lib.onnxReleaseBackend(plain);
  }
  /* the reference backend takes CPU memory only */
  if (check_st("InitGraph(chain) on reference", lib.onnxInitGraph(be_ref, NULL, size, model, 0, NULL, &g),
               ONNXIFI_STATUS_SUCCESS, NULL)) {
    check_st("SetGraphIO(cl_mem) on reference", lib.onnxSetGraphIO(g, 2, di, 3, dout),
             ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE, "CPU memory only");
    lib.onnxReleaseGraph(g);
  }
  /* weights must be CPU memory */
  {
    int64_t d[1] = {4};
    mb *m = mb_new("weights");
    mb_in(m, "x", F32, 1, d);
    mb_in(m, "wt", F32, 1, d);
    mb_out(m, "y", F32, 1, d);
    mb_node(m, "Add", "x wt", "y");
    size_t ws;
    void *wm = mb_pack(m, &ws);
    uint64_t shape[1] = {4};
    onnxTensorDescriptorV1 wd = {ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, "wt", ONNXIFI_DATATYPE_FLOAT32,
                                 ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER, 1, shape, (onnxPointer)(uintptr_t)good};
    g = NULL;
    check_st("InitGraph(weight as a cl_mem)", lib.onnxInitGraph(be_cl, NULL, ws, wm, 1, &wd, &g),
             ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE, "weights");
    if (g) lib.onnxReleaseGraph(g);
  }
  if (foreign) clReleaseMemObject(foreign);
  if (other) clReleaseContext(other);
  clReleaseMemObject(good);
  clReleaseMemObject(small);
  clReleaseMemObject(outm);
}

/* The same 4M-element chain with host-memory IO and with cl_mem IO (the
 * host's writes and reads excluded: only the run; the modes alternate,
 * medians of 11). */
static void bench(void) {
  const int64_t n = 4 << 20;
  size_t size;
  void *model = model_chain(n / 6 + 1, &size);
  uint64_t last = (uint64_t)(n / 6 + 1);
  size_t cnt = 6 * (size_t)last, bytes = cnt * sizeof(float);
  float *buf[5];
  cl_mem mem[5];
  for (int i = 0; i < 5; i++) {
    buf[i] = malloc(bytes);
    if (!buf[i]) die("out of memory");
    fill(buf[i], cnt, (unsigned)i);
    mem[i] = new_buf(bytes);
    clEnqueueWriteBuffer(hq, mem[i], CL_TRUE, 0, bytes, buf[i], 0, NULL, NULL);
  }
  onnxGraph g = NULL;
  if (lib.onnxInitGraph(be_cl, NULL, size, model, 0, NULL, &g)) die("bench InitGraph");
  /* the two modes alternate run by run (a loaded machine drifts) */
  enum { RUNS = 11 };
  double t[2][RUNS], med[2];
  onnxTensorDescriptorV1 di[2][2], dout[2][3];
  io ins[2][2], outs[2][3]; /* the descriptors point at their shapes */
  for (int mode = 0; mode < 2; mode++) {
    io *in = ins[mode], *out = outs[mode];
    in[0] = (io){"x", F32, 3, {2, 3, last}, buf[0], NULL};
    in[1] = (io){"y", F32, 3, {2, 3, last}, buf[1], NULL};
    out[0] = (io){"z", F32, 3, {2, 3, last}, buf[2], NULL};
    out[1] = (io){"w", F32, 3, {2, 3, last}, buf[3], NULL};
    out[2] = (io){"q", F32, 3, {2, 3, last}, buf[4], NULL};
    if (mode) {
      for (int i = 0; i < 2; i++) in[i].mem = mem[i];
      for (int i = 0; i < 3; i++) out[i].mem = mem[2 + i];
    }
    descs(in, 2, di[mode]);
    descs(out, 3, dout[mode]);
  }
  for (int r = -1; r < RUNS; r++) /* run -1: a warm-up of each mode */
    for (int mode = 0; mode < 2; mode++) {
      if (lib.onnxSetGraphIO(g, 2, di[mode], 3, dout[mode])) die("bench SetGraphIO");
      onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}}, fout = fin;
      if (lib.onnxInitEvent(be_cl, &fin.event) || lib.onnxSignalEvent(fin.event)) die("bench event");
      double t0 = now_ms();
      if (lib.onnxRunGraph(g, &fin, &fout) || lib.onnxWaitEvent(fout.event)) die("bench run");
      if (r >= 0) t[mode][r] = now_ms() - t0;
      if (lib.onnxReleaseEvent(fout.event) || lib.onnxReleaseEvent(fin.event)) die("bench event release");
    }
  for (int mode = 0; mode < 2; mode++) {
    for (int a = 0; a < RUNS; a++)
      for (int b = a + 1; b < RUNS; b++)
        if (t[mode][b] < t[mode][a]) {
          double x = t[mode][a];
          t[mode][a] = t[mode][b], t[mode][b] = x;
        }
    med[mode] = t[mode][RUNS / 2];
  }
  printf("bench: chain of %zu floats x2 in, x3 out: host-memory IO %.1f ms, cl_mem IO %.1f ms per run (x%.2f)\n", cnt,
         med[0], med[1], med[0] / med[1]);
  lib.onnxReleaseGraph(g);
  for (int i = 0; i < 5; i++) {
    free(buf[i]);
    clReleaseMemObject(mem[i]);
  }
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: abi_clmem PATH/libonnxifi-kiln.so [SOURCE_DIR] [--bench]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  char src[4096];
  bool do_bench = false;
  const char *f = __FILE__, *t = strstr(f, "tests/abi_clmem.c");
  snprintf(src, sizeof src, "%.*s.", t ? (int)(t - f) : 0, f);
  const char *suites[8];
  int nsuites = 0;
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "--bench")) do_bench = true;
    else if (!strcmp(argv[i], "--suite") && i + 1 < argc && nsuites < 8) suites[nsuites++] = argv[++i];
    else if (!strcmp(argv[i], "--two-drivers")) two_drivers = true;
    else snprintf(src, sizeof src, "%s", argv[i]);
  }
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(0, NULL, &np);
  if (e || !np) {
    printf("skipped: no OpenCL platform (clGetPlatformIDs: %d, %u platforms; OCL_ICD_VENDORS=%s)\n", (int)e, np,
           getenv("OCL_ICD_VENDORS") ? getenv("OCL_ICD_VENDORS") : "(unset)");
    return 77;
  }
  if (two_drivers) {
    cl_platform_id ps[8];
    cl_uint with_dev = 0;
    if (np > 8) np = 8;
    if (clGetPlatformIDs(np, ps, NULL)) np = 0;
    for (cl_uint i = 0; i < np; i++) {
      cl_uint nd = 0;
      if (!clGetDeviceIDs(ps[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) && nd) with_dev++;
    }
    if (with_dev < 2) {
      printf("skipped: --two-drivers needs two OpenCL platforms with a device, the ICD loader offers %u\n", with_dev);
      return 77;
    }
  }
  setenv("KILN_DEVICE", "opencl,reference", 0);
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, argv[1], &lib)) {
    printf("FAIL onnxifi_load(%s)\n", argv[1]);
    return 2;
  }
  onnxGetExtensionFunctionAddressFunction get_ext =
      (onnxGetExtensionFunctionAddressFunction)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  size_t nid = 0;
  onnxStatus st = lib.onnxGetBackendIDs(NULL, &nid);
  onnxBackendID ids[16];
  if (st == ONNXIFI_STATUS_FALLBACK && nid <= 16) st = lib.onnxGetBackendIDs(ids, &nid);
  if (st) {
    printf("skipped: kiln offers no backends for KILN_DEVICE=%s (status 0x%x): no usable OpenCL device\n",
           getenv("KILN_DEVICE"), (unsigned)st);
    onnxifi_unload(&lib);
    return 77;
  }
  for (size_t i = 0; i < nid; i++) {
    char name[64] = "";
    size_t sz = sizeof name;
    if (lib.onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_NAME, name, &sz)) name[0] = 0;
    void *p = NULL, *d = NULL;
    sz = sizeof p;
    if (!id_cl && !lib.onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_OPENCL_PLATFORM_ID, &p, &sz)) {
      sz = sizeof d;
      if (!lib.onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_OPENCL_DEVICE_ID, &d, &sz)) {
        id_cl = ids[i];
        plat = p;
        dev = d;
        printf("OpenCL backend: %s\n", name);
      }
    }
    if (!strcmp(name, "kiln-reference")) id_ref = ids[i];
  }
  if (!id_cl || !id_ref) {
    printf("skipped: KILN_DEVICE=%s gives %s\n", getenv("KILN_DEVICE"),
           !id_cl ? "no OpenCL backend (no usable device)" : "no reference backend to compare with");
    for (size_t i = 0; i < nid; i++) lib.onnxReleaseBackendID(ids[i]);
    onnxifi_unload(&lib);
    return 77;
  }
  onnxExtensionFunctionPointer fp;
  if (get_ext && !get_ext(id_cl, "kilnGetLastErrorMessage", &fp))
    last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
  /* the host's own context and queue on the backend's device */
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)plat, 0};
  hctx = clCreateContext(props, 1, &dev, NULL, NULL, &e);
  if (!hctx || e) die("clCreateContext on the backend's device");
  hq = clCreateCommandQueue(hctx, dev, 0, &e);
  if (!hq || e) die("clCreateCommandQueue");

  test_info();
  test_init_backend();
  uint64_t props_k[] = {ONNXIFI_BACKEND_OPENCL_CONTEXT, (uint64_t)(uintptr_t)hctx, ONNXIFI_BACKEND_PROPERTY_NONE};
  if (lib.onnxInitBackend(id_cl, props_k, &be_cl)) die("InitBackend with the host's context");
  if (lib.onnxInitBackend(id_ref, NULL, &be_ref)) die("InitBackend(reference)");
  test_chain();
  test_symbolic(0);
  test_symbolic(1);
  test_symbolic(2);
  test_special();
  test_ops();
  test_errors();
  test_backend_released_first();
  static const uint64_t mlp_in[2] = {4, 64}, mlp_out[2] = {4, 10}, cnn_in[4] = {1, 3, 32, 32}, cnn_out[2] = {1, 10};
  test_example(src, "mlp", "x", 2, mlp_in, "logits", 2, mlp_out);
  test_example(src, "cnn", "input", 4, cnn_in, "probabilities", 2, cnn_out);
  for (int i = 0; i < nsuites; i++) test_suite(suites[i]);
  if (do_bench) bench();

  /* the host lets go of its context first: kiln's reference keeps it */
  clReleaseCommandQueue(hq);
  clReleaseContext(hctx);
  lib.onnxReleaseBackend(be_cl);
  lib.onnxReleaseBackend(be_ref);
  for (size_t i = 0; i < nid; i++) lib.onnxReleaseBackendID(ids[i]);
  onnxifi_unload(&lib);
  pool_free();
  printf("abi_clmem: %d passed, %d failed\n", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
