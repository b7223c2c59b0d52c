/* tests/fuzz/fuzz_setio: libFuzzer target — tensor descriptors at
 * onnxSetGraphIO (and the run that follows) against two fixed small graphs,
 * through the real ONNXIFI entry points (plugin/onnxifi.c linked into the
 * fuzzer):
 *   A: Z[N,3] = Relu(X[N,3] + Y[3])            (a symbolic batch)
 *   B: Z[c,d] = Reshape(X[a,b], S[2] int64)    (a size tensor fed at run time)
 * on each backend. The input bytes choose, per descriptor, the tag, name,
 * data type, memory type, rank, dims (small, 0, huge, 2^63, UINT64_MAX),
 * a NULL shape or buffer, and the counts; a zero byte always picks the
 * well-formed choice, so the empty input is a valid binding that runs.
 * When every buffer could be allocated at the size its descriptor claims
 * (at most 64 KiB), the graph runs (onnxRunGraph + onnxWaitEvent) with
 * input data (S's values included) from the fuzzer. A mismatching output
 * descriptor must fail the run with a message, never write past a buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.pb-c.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the two models, built with protobuf-c ---- */

typedef struct vinfo {
  Onnx__ValueInfoProto vi;
  Onnx__TypeProto tp;
  Onnx__TypeProto__Tensor tt;
  Onnx__TensorShapeProto sh;
  Onnx__TensorShapeProto__Dimension d[2], *dp[2];
} vinfo;

/* dims: a value >= 0, or -1 with a name in params */
static void make_vi(vinfo *v, const char *name, int elem, int rank, const int64_t *dims, const char *const *params) {
  memset(v, 0, sizeof *v);
  v->vi = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
  v->tp = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
  v->tt = (Onnx__TypeProto__Tensor)ONNX__TYPE_PROTO__TENSOR__INIT;
  v->sh = (Onnx__TensorShapeProto)ONNX__TENSOR_SHAPE_PROTO__INIT;
  v->vi.name = (char *)name;
  v->vi.type = &v->tp;
  v->tp.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  v->tp.tensor_type = &v->tt;
  v->tt.has_elem_type = 1;
  v->tt.elem_type = elem;
  v->tt.shape = &v->sh;
  v->sh.n_dim = (size_t)rank;
  v->sh.dim = v->dp;
  for (int i = 0; i < rank; i++) {
    v->d[i] = (Onnx__TensorShapeProto__Dimension)ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT;
    if (dims[i] >= 0) {
      v->d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      v->d[i].dim_value = dims[i];
    } else {
      v->d[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      v->d[i].dim_param = (char *)params[i];
    }
    v->dp[i] = &v->d[i];
  }
}

static void *pack_model(int which, size_t *size) {
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *osp = &os;
  Onnx__NodeProto n1 = ONNX__NODE_PROTO__INIT, n2 = ONNX__NODE_PROTO__INIT, *np[2] = {&n1, &n2};
  vinfo x, y, z;
  Onnx__ValueInfoProto *in[2] = {&x.vi, &y.vi}, *out[1] = {&z.vi};
  m.has_ir_version = 1;
  m.ir_version = 7;
  os.domain = "";
  os.has_version = 1;
  os.version = 13;
  m.n_opset_import = 1;
  m.opset_import = &osp;
  m.graph = &g;
  g.name = which ? "fuzz_reshape" : "fuzz_add_relu";
  g.n_input = 2;
  g.input = in;
  g.n_output = 1;
  g.output = out;
  g.node = np;
  if (!which) {
    static const int64_t xd[2] = {-1, 3}, yd[1] = {3};
    static const char *const xp[2] = {"N", NULL};
    make_vi(&x, "X", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, xd, xp);
    make_vi(&y, "Y", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 1, yd, NULL);
    make_vi(&z, "Z", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, xd, xp);
    static char *i1[2] = {"X", "Y"}, *o1[1] = {"T"}, *i2[1] = {"T"}, *o2[1] = {"Z"};
    n1.name = "add";
    n1.op_type = "Add";
    n1.n_input = 2;
    n1.input = i1;
    n1.n_output = 1;
    n1.output = o1;
    n2.name = "relu";
    n2.op_type = "Relu";
    n2.n_input = 1;
    n2.input = i2;
    n2.n_output = 1;
    n2.output = o2;
    g.n_node = 2;
  } else {
    static const int64_t xd[2] = {-1, -1}, sd[1] = {2};
    static const char *const xp[2] = {"a", "b"}, *const zp[2] = {"c", "d"};
    make_vi(&x, "X", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, xd, xp);
    make_vi(&y, "S", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, sd, NULL);
    make_vi(&z, "Z", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 2, xd, zp);
    static char *i1[2] = {"X", "S"}, *o1[1] = {"Z"};
    n1.name = "reshape";
    n1.op_type = "Reshape";
    n1.n_input = 2;
    n1.input = i1;
    n1.n_output = 1;
    n1.output = o1;
    g.n_node = 1;
  }
  *size = onnx__model_proto__get_packed_size(&m);
  void *buf = malloc(*size);
  if (!buf) fuzz_abort("out of memory packing a model");
  onnx__model_proto__pack(&m, buf);
  return buf;
}

/* ---- graphs, made once per backend ---- */

static onnxGraph graphs[FUZZ_MAX_BACKENDS][2];

static void setup_graphs(fuzz_backends *fb) {
  static int done;
  if (done) return;
  done = 1;
  for (int w = 0; w < 2; w++) {
    size_t sz;
    void *m = pack_model(w, &sz);
    for (size_t b = 0; b < fb->n; b++)
      if (onnxInitGraph(fb->backends[b], NULL, sz, m, 0, NULL, &graphs[b][w]) != ONNXIFI_STATUS_SUCCESS) {
        fprintf(stderr, "fuzz: cannot make graph %d on %s: %s\n", w, fb->names[b], fuzz_last_error());
        abort();
      }
    free(m);
  }
}

/* ---- descriptors from bytes ---- */

#define MAX_DESC 6
#define MAX_BUF (64 * 1024)

static const char *const names[] = {"X", "Y", "S", "Z", "T", "", "x", "XX"};
static const onnxEnum dtypes[] = {
    ONNXIFI_DATATYPE_FLOAT32, ONNXIFI_DATATYPE_INT64,  ONNXIFI_DATATYPE_FLOAT16, ONNXIFI_DATATYPE_FLOAT64,
    ONNXIFI_DATATYPE_INT8,    ONNXIFI_DATATYPE_INT16,  ONNXIFI_DATATYPE_INT32,   ONNXIFI_DATATYPE_UINT8,
    ONNXIFI_DATATYPE_UINT16,  ONNXIFI_DATATYPE_UINT32, ONNXIFI_DATATYPE_UINT64,  ONNXIFI_DATATYPE_BFLOAT16,
    9 /* bool */,             ONNXIFI_DATATYPE_UNDEFINED, 8 /* string */, 0xdeadbeefu};
static const onnxEnum memtypes[] = {ONNXIFI_MEMORY_TYPE_CPU, ONNXIFI_MEMORY_TYPE_CUDA_BUFFER,
                                    ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER, ONNXIFI_MEMORY_TYPE_OPENGLES_TEXTURE_2D,
                                    ONNXIFI_MEMORY_TYPE_D3D_RESOURCE, 0x77};
static const uint64_t special_dims[] = {1, 2, 3, 4, 6, 0, 5, 7, 9, 12, 1u << 16, 1u << 31, (uint64_t)1 << 33,
                                        (uint64_t)1 << 34, (uint64_t)1 << 35, (uint64_t)1 << 62,
                                        (uint64_t)1 << 63, UINT64_MAX, 0x100000001ull};

typedef struct desc_slot {
  onnxTensorDescriptorV1 d;
  uint64_t shape[10];
  void *mem;
} desc_slot;

static size_t dsize(onnxEnum t) {
  switch (t) {
  case ONNXIFI_DATATYPE_FLOAT64: case ONNXIFI_DATATYPE_INT64: case ONNXIFI_DATATYPE_UINT64: return 8;
  case ONNXIFI_DATATYPE_FLOAT32: case ONNXIFI_DATATYPE_INT32: case ONNXIFI_DATATYPE_UINT32: return 4;
  case ONNXIFI_DATATYPE_FLOAT16: case ONNXIFI_DATATYPE_BFLOAT16: case ONNXIFI_DATATYPE_INT16:
  case ONNXIFI_DATATYPE_UINT16: return 2;
  default: return 1;
  }
}

/* The well-formed descriptor of name at slot k for graph w (batch n). */
static void default_desc(int w, const char *nm, uint64_t batch, desc_slot *s) {
  onnxTensorDescriptorV1 *d = &s->d;
  d->tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
  d->name = nm;
  d->memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  d->shape = s->shape;
  if (!strcmp(nm, "S")) {
    d->dataType = ONNXIFI_DATATYPE_INT64;
    d->dimensions = 1;
    s->shape[0] = 2;
  } else if (!strcmp(nm, "Y")) {
    d->dataType = ONNXIFI_DATATYPE_FLOAT32;
    d->dimensions = 1;
    s->shape[0] = 3;
  } else {
    d->dataType = ONNXIFI_DATATYPE_FLOAT32;
    d->dimensions = 2;
    s->shape[0] = batch;
    s->shape[1] = w ? 4 : 3;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_backends *fb = fuzz_setup();
  setup_graphs(fb);
  fuzz_reader r = {data, size};
  uint8_t sel = fr_u8(&r);
  int w = sel & 1;
  size_t b = (size_t)(sel >> 1) % fb->n;
  onnxGraph graph = graphs[b][w];
  uint64_t batch = 1 + fr_u8(&r) % 8;
  /* counts: 0 = as the graph wants */
  uint8_t cnt = fr_u8(&r);
  uint32_t nin = cnt & 15 ? (uint32_t)((cnt & 15) - 1) % (MAX_DESC + 1) : 2;
  uint32_t nout = cnt >> 4 ? (uint32_t)((cnt >> 4) - 1) % (MAX_DESC + 1) : 1;
  desc_slot slots[2 * MAX_DESC];
  memset(slots, 0, sizeof slots);
  bool runnable = true;
  for (uint32_t k = 0; k < nin + nout; k++) {
    desc_slot *s = &slots[k];
    bool is_in = k < nin;
    /* name: 0 = the k-th of the graph's own */
    uint8_t nb = fr_u8(&r);
    const char *def = is_in ? (w ? (k == 0 ? "X" : "S") : (k == 0 ? "X" : "Y")) : "Z";
    const char *nm = nb ? names[(nb - 1) % (sizeof names / sizeof *names)] : def;
    default_desc(w, nm, batch, s);
    onnxTensorDescriptorV1 *d = &s->d;
    uint8_t flags = fr_u8(&r);
    if (flags & 1) d->tag = (uint32_t)fr_u64(&r);
    if (flags & 2) d->name = (fr_u8(&r) & 1) ? NULL : nm;
    if (flags & 4) d->dataType = dtypes[fr_u8(&r) % (sizeof dtypes / sizeof *dtypes)];
    if (flags & 8) d->memoryType = memtypes[fr_u8(&r) % (sizeof memtypes / sizeof *memtypes)];
    if (flags & 16) d->dimensions = fr_u8(&r) % 11; /* 0..10: beyond KILN_MAX_RANK too */
    if (flags & 32)
      for (uint32_t i = 0; i < d->dimensions && i < 10; i++) {
        uint8_t v = fr_u8(&r);
        s->shape[i] = v < 0xf0 ? special_dims[v % (sizeof special_dims / sizeof *special_dims)] : fr_u64(&r);
      }
    if (flags & 64) d->shape = NULL;
    bool null_buffer = flags & 128;
    /* the bytes the descriptor claims, when small enough to provide */
    size_t bytes = dsize(d->dataType);
    bool fits = d->shape || !d->dimensions;
    for (uint32_t i = 0; i < d->dimensions && d->shape && fits; i++) {
      uint64_t v = s->shape[i];
      if (!v) bytes = 0;
      else if (bytes && v > MAX_BUF / bytes) fits = false;
      else bytes *= (size_t)v;
    }
    if (fits && bytes <= MAX_BUF) {
      s->mem = calloc(bytes ? bytes : 1, 1);
      if (!s->mem) fuzz_abort("out of memory");
      /* inputs: data from the fuzzer (S's values drive the Reshape) */
      if (is_in) {
        uint8_t fill = fr_u8(&r);
        if (fill) {
          size_t take = bytes < r.n ? bytes : r.n;
          if (take > 64) take = 64;
          memcpy(s->mem, r.p, take);
          r.p += take;
          r.n -= take;
        } else if (!strcmp(nm, "S") && d->dataType == ONNXIFI_DATATYPE_INT64 && bytes >= 16) {
          int64_t sv[2] = {(int64_t)(batch * 2), -1};
          memcpy(s->mem, sv, sizeof sv);
        }
      }
      d->buffer = (onnxPointer)(uintptr_t)s->mem;
    } else {
      /* a buffer too small for its claim: kiln may accept the binding
         (it cannot know), so this set must not run */
      static uint64_t small[4];
      d->buffer = (onnxPointer)(uintptr_t)small;
      runnable = false;
    }
    if (null_buffer) d->buffer = 0;
  }
  onnxTensorDescriptorV1 in[MAX_DESC], out[MAX_DESC];
  for (uint32_t k = 0; k < nin; k++) in[k] = slots[k].d;
  for (uint32_t k = 0; k < nout; k++) out[k] = slots[nin + k].d;
  uint8_t ptrs = fr_u8(&r);
  onnxStatus st = onnxSetGraphIO(graph, nin, (ptrs & 1) ? NULL : in, nout, (ptrs & 2) ? NULL : out);
  fuzz_check_status("onnxSetGraphIO", st);
  if (st == ONNXIFI_STATUS_SUCCESS && runnable) {
    onnxEvent ev = NULL;
    if (onnxInitEvent(fb->backends[b], &ev) != ONNXIFI_STATUS_SUCCESS) fuzz_abort("onnxInitEvent failed");
    if (onnxSignalEvent(ev) != ONNXIFI_STATUS_SUCCESS) fuzz_abort("onnxSignalEvent failed");
    onnxMemoryFenceV1 fin = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT, .event = ev};
    onnxMemoryFenceV1 fout = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
    uint8_t fence = fr_u8(&r);
    if (fence & 1) fout.tag = 0x1234;
    if (fence & 2) fout.type = (fence & 4) ? ONNXIFI_SYNCHRONIZATION_IMPLICIT : 0x55;
    if (fence & 8) fin.tag = 0;
    st = onnxRunGraph(graph, &fin, &fout);
    fuzz_check_status("onnxRunGraph", st);
    if (st == ONNXIFI_STATUS_SUCCESS) {
      onnxStatus ws = onnxWaitEvent(fout.event);
      /* a failed run reads INTERNAL_ERROR at the wait (README); it must
         carry a message */
      if (ws != ONNXIFI_STATUS_SUCCESS && (ws != ONNXIFI_STATUS_INTERNAL_ERROR || !*fuzz_last_error()))
        fuzz_abort("onnxWaitEvent: a failed run without its message");
      if (onnxReleaseEvent(fout.event) != ONNXIFI_STATUS_SUCCESS) fuzz_abort("onnxReleaseEvent failed");
    }
    if (onnxReleaseEvent(ev) != ONNXIFI_STATUS_SUCCESS) fuzz_abort("onnxReleaseEvent failed");
  }
  /* the binding points at this call's buffers: drop it before freeing them
     (a failed SetGraphIO invalidates the previous binding) */
  onnxTensorDescriptorV1 none;
  memset(&none, 0, sizeof none);
  if (onnxSetGraphIO(graph, 0, NULL, 0, &none) == ONNXIFI_STATUS_SUCCESS) fuzz_abort("an empty binding succeeded");
  for (uint32_t k = 0; k < nin + nout; k++) free(slots[k].mem);
  return 0;
}
