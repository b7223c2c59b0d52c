/* tests/unit_limits: the limits a hostile model or descriptor cannot exceed
 * (README "Limits"): tensor rank, element counts, shape products that
 * overflow, data present vs the shape (checked before allocating), message
 * nesting (subgraphs, nested types; protobuf-c itself recurses without
 * limit), attributes per node, graph inputs, named values, and the CPU
 * plan's arena. Each gives its status and a message naming the limit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/plan.h"
#include "ir/alloc.h"
#include "ir/onnx_import.h"
#include "ir/tensor.h"
#include "onnx/onnx.pb-c.h"

static int passed, failed;
#include "tests/check.h"

static bool msg_has(const char *word) { return strstr(kiln_last_error(), word) != NULL; }

/* ---- tensors ---- */

static kiln_status parse_tensor(Onnx__TensorProto *tp, kiln_tensor *t) {
  size_t n = onnx__tensor_proto__get_packed_size(tp);
  uint8_t *buf = malloc(n ? n : 1);
  onnx__tensor_proto__pack(tp, buf);
  memset(t, 0, sizeof *t);
  kiln_error_clear();
  kiln_status s = kiln_tensor_parse(buf, n, t, NULL);
  free(buf);
  return s;
}

static void test_tensors(void) {
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  kiln_tensor t;
  tp.name = "w";
  tp.has_data_type = 1;
  tp.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  int64_t dims[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  float one = 1;
  tp.dims = dims;
  tp.float_data = &one;
  tp.n_float_data = 1;

  tp.n_dims = 9;
  CHECK(parse_tensor(&tp, &t) == KILN_E_UNSUPPORTED_SHAPE && msg_has("rank 9") && msg_has("'w'"),
        "rank 9 refused: %s", kiln_last_error());
  tp.n_dims = 8;
  CHECK(parse_tensor(&tp, &t) == KILN_OK && t.numel == 1, "rank 8 accepted: %s", kiln_last_error());
  kiln_tensor_release(&t);

  /* 2^60 elements: beyond KILN_MAX_NUMEL */
  int64_t big[3] = {(int64_t)1 << 20, (int64_t)1 << 20, (int64_t)1 << 20};
  tp.dims = big;
  tp.n_dims = 3;
  CHECK(parse_tensor(&tp, &t) == KILN_E_UNSUPPORTED_SHAPE && msg_has("more than") && !t.data,
        "2^60 elements refused: %s", kiln_last_error());
  /* a product that wraps 64 bits (2^62 * 2^62 * 16): refused, no UB */
  int64_t wrap[3] = {(int64_t)1 << 62, (int64_t)1 << 62, 16};
  tp.dims = wrap;
  CHECK(parse_tensor(&tp, &t) == KILN_E_UNSUPPORTED_SHAPE && !t.data, "wrapping product refused: %s",
        kiln_last_error());
  int64_t neg[2] = {4, -3};
  tp.dims = neg;
  tp.n_dims = 2;
  CHECK(parse_tensor(&tp, &t) == KILN_E_INVALID_SHAPE && msg_has("negative"), "negative dim refused: %s",
        kiln_last_error());
  /* 2^34 floats (64 GiB) declared, one value stored: refused before any
     allocation (a message about the data, not about memory) */
  int64_t lots[2] = {(int64_t)1 << 31, 8};
  tp.dims = lots;
  CHECK(parse_tensor(&tp, &t) == KILN_E_MODEL && msg_has("1 values stored") && !t.data,
        "64 GiB shape with one value refused: %s", kiln_last_error());
  tp.n_float_data = 0;
  tp.has_raw_data = 1;
  tp.raw_data.len = 4;
  tp.raw_data.data = (uint8_t *)&one;
  CHECK(parse_tensor(&tp, &t) == KILN_E_MODEL && msg_has("raw_data has 4 bytes"),
        "64 GiB shape with 4 raw bytes refused: %s", kiln_last_error());
}

/* ---- models ---- */

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, n++;
  return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v) {
  while (v >= 0x80) *p++ = (uint8_t)(v | 0x80), v >>= 7;
  *p++ = (uint8_t)v;
  return p;
}

/* A model whose graph holds an If node whose then_branch holds an If node
 * ... `levels` graphs deep, written on the wire directly (outermost first,
 * lengths computed inside out) so that any depth can be made without
 * recursion. Returns the bytes (malloc'd). */
static uint8_t *nested_model(int levels, size_t *size) {
  size_t *graph = malloc((size_t)(levels + 1) * sizeof *graph), *node = malloc((size_t)(levels + 1) * sizeof *node),
         *attr = malloc((size_t)(levels + 1) * sizeof *attr);
  graph[0] = 0; /* the innermost graph is empty */
  for (int k = 1; k < levels; k++) {
    attr[k] = 3 /* name "a" */ + 1 + varint_len(graph[k - 1]) + graph[k - 1];
    node[k] = 4 /* op_type "If" */ + 1 + varint_len(attr[k]) + attr[k];
    graph[k] = 1 + varint_len(node[k]) + node[k];
  }
  size_t top = graph[levels - 1];
  size_t opset = 2; /* version 13 */
  *size = 2 /* ir_version 7 */ + 1 + varint_len(top) + top + 1 + varint_len(opset) + opset;
  uint8_t *buf = malloc(*size), *p = buf;
  *p++ = 0x08, *p++ = 7;                    /* ir_version = 7 */
  *p++ = 0x42, p = put_varint(p, opset);    /* opset_import (8) */
  *p++ = 0x10, *p++ = 13;                   /*   version = 13 */
  *p++ = 0x3a, p = put_varint(p, top);      /* graph (7) */
  for (int k = levels - 1; k >= 1; k--) {
    *p++ = 0x0a, p = put_varint(p, node[k]); /* GraphProto.node (1) */
    *p++ = 0x22, *p++ = 2, *p++ = 'I', *p++ = 'f'; /* NodeProto.op_type (4) */
    *p++ = 0x2a, p = put_varint(p, attr[k]); /* NodeProto.attribute (5) */
    *p++ = 0x0a, *p++ = 1, *p++ = 'a';       /* AttributeProto.name (1) */
    *p++ = 0x32, p = put_varint(p, graph[k - 1]); /* AttributeProto.g (6) */
  }
  free(graph);
  free(node);
  free(attr);
  return buf;
}

static void test_nesting(void) {
  size_t n;
  uint8_t *m;
  /* model(1) > graph(2) > node(3) > attribute(4) > graph(5) ...: g graphs nest 3g - 1 deep */
  for (int g = 1; g <= 5; g++) {
    m = nested_model(g, &n);
    int d = kiln_onnx_nesting(m, n, KILN_MAX_PROTO_DEPTH);
    CHECK(d == 3 * g - 1, "%d nested graphs: depth %d, expected %d", g, d, 3 * g - 1);
    free(m);
  }
  /* 33 graphs (depth 98): within the limit, imported */
  kiln_graph *gr = NULL;
  m = nested_model(33, &n);
  kiln_error_clear();
  kiln_status s = kiln_onnx_import(m, n, &gr);
  CHECK(s == KILN_OK && gr, "33 nested graphs import: %s", kiln_last_error());
  kiln_graph_free(gr);
  free(m);
  /* 34 (depth 101): refused */
  m = nested_model(34, &n);
  s = kiln_onnx_import(m, n, &gr);
  CHECK(s == KILN_E_PROTOBUF && msg_has("deeper than 100"), "34 nested graphs refused: %s", kiln_last_error());
  free(m);
  /* 50 000 (1.1 MB): protobuf-c alone overflows the stack on this */
  m = nested_model(50000, &n);
  s = kiln_onnx_import(m, n, &gr);
  CHECK(s == KILN_E_PROTOBUF && msg_has("deeper than 100"), "50000 nested graphs refused: %s", kiln_last_error());
  free(m);

  /* a graph input typed sequence(sequence(...(tensor))) 60 deep */
  Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
  Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
  Onnx__ValueInfoProto vi = ONNX__VALUE_INFO_PROTO__INIT, *vip = &vi;
  Onnx__TypeProto types[61];
  Onnx__TypeProto__Sequence seqs[60];
  for (int k = 0; k <= 60; k++) {
    types[k] = (Onnx__TypeProto)ONNX__TYPE_PROTO__INIT;
    if (k < 60) {
      seqs[k] = (Onnx__TypeProto__Sequence)ONNX__TYPE_PROTO__SEQUENCE__INIT;
      seqs[k].elem_type = &types[k + 1];
      types[k].value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
      types[k].sequence_type = &seqs[k];
    }
  }
  vi.name = "x";
  vi.type = &types[0];
  gp.n_input = 1;
  gp.input = &vip;
  mp.has_ir_version = 1;
  mp.ir_version = 7;
  mp.graph = &gp;
  n = onnx__model_proto__get_packed_size(&mp);
  m = malloc(n);
  onnx__model_proto__pack(&mp, m);
  int d = kiln_onnx_nesting(m, n, 1000);
  CHECK(d == 4 + 2 * 60, "60 nested sequence types: depth %d, expected %d", d, 4 + 2 * 60);
  s = kiln_onnx_import(m, n, &gr);
  CHECK(s == KILN_E_PROTOBUF && msg_has("nest deeper"), "60 nested sequence types refused: %s", kiln_last_error());
  free(m);
  /* malformed wire data is the parser's to report */
  static const uint8_t junk[] = {0x3a, 0xff, 0xff, 0x01};
  CHECK(kiln_onnx_nesting(junk, sizeof junk, 100) == 1, "truncated field ends the scan");
  CHECK(kiln_onnx_import(junk, sizeof junk, &gr) == KILN_E_PROTOBUF, "truncated model is a protobuf error");
}

static uint8_t *pack_graph(Onnx__GraphProto *gp, size_t *n) {
  Onnx__ModelProto mp = ONNX__MODEL_PROTO__INIT;
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT, *osp = &os;
  mp.has_ir_version = 1;
  mp.ir_version = 7;
  os.domain = "";
  os.has_version = 1;
  os.version = 13;
  mp.n_opset_import = 1;
  mp.opset_import = &osp;
  mp.graph = gp;
  *n = onnx__model_proto__get_packed_size(&mp);
  uint8_t *m = malloc(*n);
  onnx__model_proto__pack(&mp, m);
  return m;
}

static void test_graph_size(void) {
  size_t n;
  kiln_graph *gr = NULL;
  /* KILN_MAX_NODE_ATTRS + 1 attributes on one node */
  Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
  Onnx__NodeProto node = ONNX__NODE_PROTO__INIT, *np = &node;
  int na = KILN_MAX_NODE_ATTRS + 1;
  Onnx__AttributeProto *attrs = calloc((size_t)na, sizeof *attrs), **ap = calloc((size_t)na, sizeof *ap);
  char(*names)[16] = calloc((size_t)na, sizeof *names);
  for (int k = 0; k < na; k++) {
    attrs[k] = (Onnx__AttributeProto)ONNX__ATTRIBUTE_PROTO__INIT;
    snprintf(names[k], sizeof names[k], "a%d", k);
    attrs[k].name = names[k];
    attrs[k].has_type = 1;
    attrs[k].type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    attrs[k].has_i = 1;
    ap[k] = &attrs[k];
  }
  node.name = "many";
  node.op_type = "Relu";
  node.n_attribute = (size_t)na;
  node.attribute = ap;
  gp.n_node = 1;
  gp.node = &np;
  uint8_t *m = pack_graph(&gp, &n);
  kiln_status s = kiln_onnx_import(m, n, &gr);
  CHECK(s == KILN_E_UNSUPPORTED_ATTR && msg_has("1025 attributes") && msg_has("'many'"),
        "1025 attributes refused: %s", kiln_last_error());
  free(m);
  free(attrs);
  free(ap);
  free(names);

  /* KILN_MAX_GRAPH_IO + 1 graph inputs */
  gp = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
  size_t ni = KILN_MAX_GRAPH_IO + 1;
  Onnx__ValueInfoProto *vis = calloc(ni, sizeof *vis), **vip = calloc(ni, sizeof *vip);
  for (size_t k = 0; k < ni; k++) {
    vis[k] = (Onnx__ValueInfoProto)ONNX__VALUE_INFO_PROTO__INIT;
    vis[k].name = "x";
    vip[k] = &vis[k];
  }
  gp.n_input = ni;
  gp.input = vip;
  m = pack_graph(&gp, &n);
  s = kiln_onnx_import(m, n, &gr);
  CHECK(s == KILN_E_UNSUPPORTED_SHAPE && msg_has("graph too large") && msg_has("100001 inputs"),
        "100001 graph inputs refused: %s", kiln_last_error());
  free(m);
  free(vis);
  free(vip);

  /* one node with KILN_MAX_VALUES + 1 outputs */
  gp = (Onnx__GraphProto)ONNX__GRAPH_PROTO__INIT;
  node = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
  size_t no = (size_t)KILN_MAX_VALUES + 1;
  char **outs = calloc(no, sizeof *outs);
  for (size_t k = 0; k < no; k++) outs[k] = "";
  node.op_type = "Split";
  node.n_output = no;
  node.output = outs;
  gp.n_node = 1;
  gp.node = &np;
  m = pack_graph(&gp, &n);
  s = kiln_onnx_import(m, n, &gr);
  CHECK(s == KILN_E_UNSUPPORTED_SHAPE && msg_has("named values"), "4000001 values refused: %s", kiln_last_error());
  free(m);
  free(outs);
}

/* The CPU plan's arena: x[1] double expanded (a view) to [2^17, 2^17] and
 * negated: the Neg output has 2^34 elements (within KILN_MAX_NUMEL) of 8
 * bytes, a 128 GiB arena slot beyond KILN_MAX_ALLOC; the run refuses the
 * plan with a message, without asking malloc (fusion off, so that the
 * intermediate exists). */
static void test_arena(void) {
  Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
  Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, y = ONNX__VALUE_INFO_PROTO__INIT, *in = &x, *out = &y;
  Onnx__TypeProto tx = ONNX__TYPE_PROTO__INIT, ty = ONNX__TYPE_PROTO__INIT;
  Onnx__TypeProto__Tensor ttx = ONNX__TYPE_PROTO__TENSOR__INIT, tty = ONNX__TYPE_PROTO__TENSOR__INIT;
  Onnx__TensorShapeProto sh = ONNX__TENSOR_SHAPE_PROTO__INIT, shy = ONNX__TENSOR_SHAPE_PROTO__INIT;
  Onnx__TensorShapeProto__Dimension d = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT, *dp = &d;
  d.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
  d.dim_value = 1;
  sh.n_dim = 1;
  sh.dim = &dp;
  ttx.has_elem_type = tty.has_elem_type = 1;
  ttx.elem_type = tty.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE;
  ttx.shape = &sh;
  tty.shape = &shy; /* a scalar */
  tx.value_case = ty.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  tx.tensor_type = &ttx;
  ty.tensor_type = &tty;
  x.name = "x";
  x.type = &tx;
  y.name = "y";
  y.type = &ty;
  Onnx__TensorProto shape = ONNX__TENSOR_PROTO__INIT, *init = &shape;
  int64_t two = 2, big[2] = {(int64_t)1 << 17, (int64_t)1 << 17};
  shape.name = "shape";
  shape.has_data_type = 1;
  shape.data_type = ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  shape.n_dims = 1;
  shape.dims = &two;
  shape.n_int64_data = 2;
  shape.int64_data = big;
  Onnx__NodeProto nodes[3], *np[3];
  static char *i0[2] = {"x", "shape"}, *o0[1] = {"e"}, *i1[1] = {"e"}, *o1[1] = {"n"}, *i2[1] = {"n"},
              *o2[1] = {"y"};
  static char *const ops[3] = {"Expand", "Neg", "ReduceSum"};
  char **ins[3] = {i0, i1, i2}, **outs[3] = {o0, o1, o2};
  for (int k = 0; k < 3; k++) {
    nodes[k] = (Onnx__NodeProto)ONNX__NODE_PROTO__INIT;
    nodes[k].op_type = ops[k];
    nodes[k].n_input = k ? 1 : 2;
    nodes[k].input = ins[k];
    nodes[k].n_output = 1;
    nodes[k].output = outs[k];
    np[k] = &nodes[k];
  }
  Onnx__AttributeProto keep = ONNX__ATTRIBUTE_PROTO__INIT, *kp = &keep;
  keep.name = "keepdims";
  keep.has_type = keep.has_i = 1;
  keep.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  keep.i = 0;
  nodes[2].n_attribute = 1;
  nodes[2].attribute = &kp;
  gp.n_node = 3;
  gp.node = np;
  gp.n_input = 1;
  gp.input = &in;
  gp.n_output = 1;
  gp.output = &out;
  gp.n_initializer = 1;
  gp.initializer = &init;
  size_t n;
  uint8_t *m = pack_graph(&gp, &n);
  kiln_graph *g = NULL;
  kiln_status s = kiln_onnx_import(m, n, &g);
  free(m);
  CHECK(s == KILN_OK, "arena model imports: %s", kiln_last_error());
  if (s) return;
  setenv("KILN_FUSION", "0", 1);
  kiln_cpu_plan *p = NULL;
  s = kiln_cpu_prepare(g, &p);
  CHECK(s == KILN_OK, "arena model prepares: %s", kiln_last_error());
  if (!s) {
    double one = 1;
    int64_t d1 = 1;
    kiln_tensor xt, yt;
    memset(&yt, 0, sizeof yt);
    kiln_tensor_wrap(&xt, KILN_F64, 1, &d1, 1, &one);
    const kiln_tensor **bound = calloc((size_t)g->n_values, sizeof *bound);
    bound[kiln_graph_find_value(g, "x")] = &xt;
    kiln_error_clear();
    s = kiln_cpu_run(p, g, bound, &yt);
    CHECK(s == KILN_E_NOMEM && msg_has("arena") && msg_has("limit"), "128 GiB arena refused: %s (%s)",
          kiln_status_name(s), kiln_last_error());
    kiln_tensor_release(&yt);
    free(bound);
    kiln_cpu_release(p);
  }
  unsetenv("KILN_FUSION");
  kiln_graph_free(g);
}

int main(void) {
  test_tensors();
  test_nesting();
  test_graph_size();
  test_arena();
  printf("unit_limits: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
