/* tests/unit_ir: unit tests of ir/ — dtypes and half conversions, tensor
 * shape helpers, broadcasting, the error channel, and the ONNX importer's
 * handling of malformed models. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/onnx_import.h"
#include "ir/tensor.h"
#include "ir/views.h"
#include "onnx/onnx.pb-c.h"

static int passed, failed;
#include "tests/check.h"

/* kiln_tensor_read of v over whole and partial runs (every start, lengths
 * 1, 2, 3, 7 and to the end) against kiln_copy_elem element by element,
 * and nothing written past a run. */
static void read_runs(const char *what, const kiln_tensor *v) {
  unsigned char buf[64 * 8 + 8];
  size_t es = kiln_dtype_size(v->dtype);
  kiln_tensor e = {0};
  int64_t n1 = v->numel;
  CHECK(kiln_tensor_alloc(&e, v->dtype, 1, &n1) == KILN_OK, "%s: alloc", what);
  for (int64_t i = 0; i < v->numel && e.data; i++) kiln_copy_elem(&e, i, v, i);
  int bad = 0, runs = 0;
  for (int64_t at = 0; at < v->numel && e.data; at++) {
    const int64_t lens[5] = {1, 2, 3, 7, v->numel - at};
    for (int k = 0; k < 5; k++) {
      int64_t n = lens[k] < v->numel - at ? lens[k] : v->numel - at;
      if (n > 64) continue;
      memset(buf, 0x5a, sizeof buf);
      kiln_tensor_read(buf, v, at, n);
      bad += memcmp(buf, (const char *)e.data + (size_t)at * es, (size_t)n * es) != 0;
      for (size_t b = (size_t)n * es; b < (size_t)n * es + es; b++) bad += buf[b] != 0x5a;
      runs++;
    }
  }
  CHECK(!bad && runs > 0, "%s: kiln_tensor_read: %d wrong runs or bytes past one, of %d runs", what, bad, runs);
  kiln_tensor_release(&e);
}

static void test_views(void) {
  /* a [3,4] int32 arange read as its transpose, a negative-step slice and a broadcast */
  kiln_tensor base = {0}, v = {0}, copy = {0};
  int64_t d[2] = {3, 4};
  CHECK(kiln_tensor_alloc(&base, KILN_I32, 2, d) == KILN_OK, "alloc");
  for (int64_t i = 0; i < 12; i++) kiln_set_i(&base, i, i);
  int64_t td[2] = {4, 3}, ts[2] = {1, 4};
  kiln_tensor_view(&v, &base, 2, td, ts, 0);
  int bad = 0;
  for (int64_t r = 0; r < 4; r++)
    for (int64_t c = 0; c < 3; c++) bad += kiln_get_i(&v, r * 3 + c) != c * 4 + r;
  CHECK(!bad && v.numel == 12 && !v.owns, "transposed view reads");
  read_runs("transposed view", &v);
  read_runs("dense tensor", &base);
  CHECK(kiln_tensor_copy(&copy, &v) == KILN_OK && !copy.strided && kiln_get_i(&copy, 1) == 4 &&
            kiln_get_f(&copy, 11) == 11.0,
        "copy of a view is dense and right");
  kiln_tensor_release(&copy);
  int64_t sd[1] = {2}, ss[1] = {-2};
  kiln_tensor_view(&v, &base, 1, sd, ss, 11); /* base.flat[11:8:-2] */
  CHECK(kiln_get_i(&v, 0) == 11 && kiln_get_i(&v, 1) == 9 && kiln_get_f(&v, 1) == 9.0, "negative stride");
  read_runs("negative stride", &v);
  int64_t bd[2] = {5, 4}, bs[2] = {0, 1};
  kiln_tensor_view(&v, &base, 2, bd, bs, 8); /* row 2 broadcast to 5 rows */
  kiln_tensor dst = {0};
  CHECK(kiln_tensor_alloc(&dst, KILN_I32, 2, bd) == KILN_OK, "alloc dst");
  for (int64_t i = 0; i < 20; i++) kiln_copy_elem(&dst, i, &v, i);
  CHECK(kiln_get_i(&dst, 19) == 11 && kiln_get_i(&dst, 4) == 8, "copy_elem through a broadcast view");
  read_runs("broadcast view", &v);
  /* kiln_gather_map: [2,3,2] over base's storage, strides {-4, 0, 2} from 9
     (rows reversed, the middle dim repeated, every second column) */
  int32_t g[12];
  int64_t gd[3] = {2, 3, 2}, gs[3] = {-4, 0, 2};
  kiln_gather_map(g, base.data, 4, 3, gd, gs, 9);
  bad = 0;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int e = 0; e < 2; e++) bad += g[(a * 3 + b) * 2 + e] != 9 - 4 * a + 2 * e;
  CHECK(!bad, "kiln_gather_map: reversed, repeated and stepped dims");
  int64_t md[3] = {3, 2, 2}, ms[3] = {4, 2, 1}; /* mergeable: rows of 4 read as [2,2] */
  kiln_gather_map(g, base.data, 4, 3, md, ms, 0);
  bad = 0;
  for (int i = 0; i < 12; i++) bad += g[i] != i;
  CHECK(!bad, "kiln_gather_map: merged dims read the storage in order");
  kiln_tensor_release(&dst);
  kiln_tensor_release(&v);
  kiln_tensor_release(&base);
}

static void test_half(void) {
  /* every half converts to float and back unchanged (NaNs stay NaN) */
  int bad = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = kiln_f16_to_f32((uint16_t)h);
    uint16_t back = kiln_f32_to_f16(f);
    if (isnan(f) ? !isnan(kiln_f16_to_f32(back)) : back != h) bad++;
  }
  CHECK(bad == 0, "%d halfs do not round-trip", bad);
  CHECK(kiln_f16_to_f32(0x3c00) == 1.0f, "half 0x3c00 is not 1");
  CHECK(kiln_f16_to_f32(0x0001) == 5.9604644775390625e-8f, "smallest subnormal half");
  CHECK(kiln_f32_to_f16(65520.0f) == 0x7c00, "65520 rounds to inf");
  CHECK(kiln_f32_to_f16(65519.0f) == 0x7bff, "65519 rounds to max half");
  CHECK(kiln_f32_to_f16(1.0f + 1.0f / 2048) == 0x3c00, "tie rounds to even (down)");
  CHECK(kiln_f32_to_f16(1.0f + 3.0f / 2048) == 0x3c02, "tie rounds to even (up)");
  CHECK(kiln_f32_to_f16(-0.0f) == 0x8000, "negative zero");
  CHECK(kiln_bf16_to_f32(0x3f80) == 1.0f, "bf16 one");
  CHECK(kiln_f32_to_bf16(1.0f) == 0x3f80, "bf16 from one");
  CHECK(isnan(kiln_bf16_to_f32(kiln_f32_to_bf16(NAN))), "bf16 NaN stays NaN");
  CHECK(kiln_dtype_size(KILN_STRING) == 0 && kiln_dtype_size(KILN_F16) == 2 && kiln_dtype_size(KILN_BOOL) == 1,
        "dtype sizes");
}

/* The half (or bfloat16, when bf) nearest to v, ties to even, by comparing
 * v with the neighbours of a first guess in double: the oracle for a double
 * stored in a 16-bit float (kiln_set_f), rounded once. */
static uint16_t nearest16(double v, bool bf) {
  float (*to)(uint16_t) = bf ? kiln_bf16_to_f32 : kiln_f16_to_f32;
  uint16_t g = bf ? kiln_f32_to_bf16((float)v) : kiln_f32_to_f16((float)v), best = g;
  double bd = INFINITY;
  for (int d = -2; d <= 2; d++) {
    int c = (int)(g & 0x7fff) + d;
    if (c < 0 || c > (bf ? 0x7f80 : 0x7c00)) continue;
    uint16_t h = (uint16_t)((g & 0x8000) | c);
    double e = fabs((double)to(h) - v);
    if (isinf((double)to(h))) e = fabs(v) >= (bf ? 3.396169e38 : 65520.0) ? 0 : INFINITY; /* past the last midpoint */
    if (e < bd || (e == bd && !(h & 1))) bd = e, best = h;
  }
  return best;
}

/* A double stored in float16 / bfloat16 is rounded once: 1 + 2^-11 + 2^-40
 * is nearer 1 + 2^-10 than 1 (through float it became the tie 1 + 2^-11 and
 * went down to even). */
static void test_half_from_double(void) {
  kiln_tensor t = {0};
  int64_t one = 1;
  if (kiln_tensor_alloc(&t, KILN_F16, 1, &one)) return;
  kiln_set_f(&t, 0, 1.0 + ldexp(1, -11) + ldexp(1, -40));
  CHECK(((uint16_t *)t.data)[0] == 0x3c01, "1+2^-11+2^-40 -> 0x%04x, want 0x3c01", ((uint16_t *)t.data)[0]);
  kiln_set_f(&t, 0, 1.0 + 3 * ldexp(1, -11) - ldexp(1, -40));
  CHECK(((uint16_t *)t.data)[0] == 0x3c01, "1+3*2^-11-2^-40 -> 0x%04x, want 0x3c01", ((uint16_t *)t.data)[0]);
  int bad = 0, n = 0;
  uint64_t x = 88172645463325252ull;
  for (int bf = 0; bf < 2; bf++) {
    t.dtype = bf ? KILN_BF16 : KILN_F16;
    for (int i = 0; i < 200000; i++, n++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      /* a 16-bit value's midpoint nudged by a few units of a double, or any value */
      uint16_t h = (uint16_t)(x & (bf ? 0x7f7f : 0x7bff)) | (uint16_t)((x >> 16) & 0x8000);
      double a = bf ? kiln_bf16_to_f32(h) : kiln_f16_to_f32(h);
      double b = bf ? kiln_bf16_to_f32((uint16_t)(h + 1)) : kiln_f16_to_f32((uint16_t)(h + 1));
      double v = i % 3 ? (a + b) / 2 + ldexp((double)((int)(x >> 40 & 15) - 7), -45) * fmax(fabs(a), 1e-300)
                       : a + (b - a) * (double)(x >> 11 & 1023) / 1024.0;
      if (!isfinite(v)) continue;
      kiln_set_f(&t, 0, v);
      if (((uint16_t *)t.data)[0] != nearest16(v, bf)) {
        if (bad++ < 3)
          printf("  %s: %.17g -> 0x%04x, nearest 0x%04x\n", bf ? "bf16" : "f16", v, ((uint16_t *)t.data)[0],
                 nearest16(v, bf));
      }
    }
  }
  CHECK(bad == 0, "%d of %d doubles not rounded once to the nearest 16-bit float", bad, n);
  kiln_tensor_release(&t);
}

static void test_tensor(void) {
  int64_t big[3] = {1 << 20, 1 << 20, 1 << 20}, n;
  CHECK(kiln_shape_numel(3, big, &n) == KILN_E_UNSUPPORTED_SHAPE, "huge shape accepted");
  CHECK(strstr(kiln_last_error(), "[1048576,1048576,1048576]") != NULL, "message names the shape: %s",
        kiln_last_error());
  int64_t neg[1] = {-2};
  CHECK(kiln_shape_numel(1, neg, &n) == KILN_E_INVALID_SHAPE, "negative dim accepted");
  int64_t a[2] = {3, 1}, b[3] = {2, 1, 4}, o[KILN_MAX_RANK];
  int r;
  CHECK(kiln_broadcast_shape(2, a, 3, b, &r, o) == KILN_OK && r == 3 && o[0] == 2 && o[1] == 3 && o[2] == 4,
        "broadcast [3,1] x [2,1,4]");
  int64_t c[1] = {5};
  CHECK(kiln_broadcast_shape(2, a, 1, c, &r, o) == KILN_OK && o[1] == 5, "broadcast [3,1] x [5]");
  int64_t d[2] = {3, 2}, e[1] = {3};
  CHECK(kiln_broadcast_shape(2, d, 1, e, &r, o) == KILN_E_MISMATCH_SHAPE, "[3,2] x [3] must not broadcast");
  kiln_tensor t = {0};
  int64_t s[2] = {2, 3};
  CHECK(kiln_tensor_alloc(&t, KILN_I8, 2, s) == KILN_OK && t.numel == 6, "alloc");
  kiln_set_f(&t, 0, 300.7);
  kiln_set_f(&t, 1, -300.7);
  kiln_set_f(&t, 2, -2.9);
  kiln_set_f(&t, 3, NAN);
  CHECK(kiln_get_i(&t, 0) == 127 && kiln_get_i(&t, 1) == -128 && kiln_get_i(&t, 2) == -2 && kiln_get_i(&t, 3) == 0,
        "saturating, truncating stores");
  int64_t strides[3];
  kiln_tensor bt = t;
  bt.rank = 2, bt.dims[0] = 1, bt.dims[1] = 3;
  int64_t od[3] = {4, 2, 3};
  kiln_broadcast_strides(&bt, 3, od, strides);
  CHECK(strides[0] == 0 && strides[1] == 0 && strides[2] == 1, "broadcast strides");
  kiln_tensor_release(&t);
  CHECK(t.data == NULL && t.numel == 0, "release resets");
  int ax;
  CHECK(kiln_norm_axis(-1, 3, &ax) == KILN_OK && ax == 2, "axis -1");
  CHECK(kiln_norm_axis(3, 3, &ax) != KILN_OK, "axis 3 of rank 3");
}

/* Packs a one-node model: y = op(x) over float [2,3]. */
static size_t pack_model(uint8_t *buf, size_t cap, const char *op, const char *in_name, int64_t opset,
                         int with_graph, const char *out_name) {
  Onnx__TensorShapeProto__Dimension d0 = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT, d1 = d0;
  d0.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, d0.dim_value = 2;
  d1.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE, d1.dim_value = 3;
  Onnx__TensorShapeProto__Dimension *dims[2] = {&d0, &d1};
  Onnx__TensorShapeProto shape = ONNX__TENSOR_SHAPE_PROTO__INIT;
  shape.n_dim = 2, shape.dim = dims;
  Onnx__TypeProto__Tensor tt = ONNX__TYPE_PROTO__TENSOR__INIT;
  tt.has_elem_type = 1, tt.elem_type = 1, tt.shape = &shape;
  Onnx__TypeProto ty = ONNX__TYPE_PROTO__INIT;
  ty.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE, ty.tensor_type = &tt;
  Onnx__ValueInfoProto x = ONNX__VALUE_INFO_PROTO__INIT, y = ONNX__VALUE_INFO_PROTO__INIT;
  x.name = "x", x.type = &ty, y.name = (char *)out_name, y.type = &ty;
  Onnx__ValueInfoProto *ins[1] = {&x}, *outs[1] = {&y};
  char *nin[1] = {(char *)in_name}, *nout[1] = {"y"};
  Onnx__NodeProto node = ONNX__NODE_PROTO__INIT;
  node.op_type = (char *)op, node.n_input = 1, node.input = nin, node.n_output = 1, node.output = nout;
  Onnx__NodeProto *nodes[1] = {&node};
  Onnx__GraphProto g = ONNX__GRAPH_PROTO__INIT;
  g.name = "g", g.n_node = 1, g.node = nodes, g.n_input = 1, g.input = ins, g.n_output = 1, g.output = outs;
  Onnx__OperatorSetIdProto os = ONNX__OPERATOR_SET_ID_PROTO__INIT;
  os.domain = "", os.has_version = 1, os.version = opset;
  Onnx__OperatorSetIdProto *oss[1] = {&os};
  Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
  m.has_ir_version = 1, m.ir_version = 8, m.n_opset_import = 1, m.opset_import = oss;
  m.graph = with_graph ? &g : NULL;
  size_t n = onnx__model_proto__get_packed_size(&m);
  if (n > cap) return 0;
  return onnx__model_proto__pack(&m, buf);
}

static void test_import(void) {
  uint8_t buf[4096];
  kiln_graph *g = NULL;
  size_t n = pack_model(buf, sizeof buf, "Relu", "x", 13, 1, "y");
  CHECK(n && kiln_onnx_import(buf, n, &g) == KILN_OK, "import a Relu model: %s", kiln_last_error());
  if (g) {
    CHECK(g->n_nodes == 1 && g->n_inputs == 1 && g->n_outputs == 1 && g->nodes[0].opset == 13, "graph shape");
    CHECK(g->values[g->inputs[0]].type.rank == 2 && g->values[g->inputs[0]].type.dims[1].value == 3,
          "declared input shape");
    kiln_graph_free(g);
  }
  static const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x01};
  CHECK(kiln_onnx_import(junk, sizeof junk, &g) == KILN_E_PROTOBUF && !g, "junk is not a model");
  n = pack_model(buf, sizeof buf, "Relu", "nope", 13, 1, "y");
  CHECK(kiln_onnx_import(buf, n, &g) == KILN_E_MODEL && strstr(kiln_last_error(), "'nope'"),
        "undefined node input: %s", kiln_last_error());
  n = pack_model(buf, sizeof buf, "Relu", "x", 13, 0, "y");
  CHECK(kiln_onnx_import(buf, n, &g) == KILN_E_MODEL, "model without a graph");
  n = pack_model(buf, sizeof buf, "Relu", "x", 13, 1, "zz");
  CHECK(kiln_onnx_import(buf, n, &g) == KILN_E_MODEL && strstr(kiln_last_error(), "'zz'"),
        "graph output never produced: %s", kiln_last_error());
  /* every truncation of a valid model fails cleanly (or parses), never crashes */
  n = pack_model(buf, sizeof buf, "Relu", "x", 13, 1, "y");
  int crashed_or_ok = 0;
  for (size_t k = 1; k < n; k++) {
    kiln_status s = kiln_onnx_import(buf, k, &g);
    if (s == KILN_OK) kiln_graph_free(g);
    else crashed_or_ok += s == KILN_E_PROTOBUF || s == KILN_E_MODEL;
  }
  CHECK(crashed_or_ok > 0, "truncated models are rejected");
}

static void test_tensor_parse(void) {
  Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
  int64_t dims[2] = {2, 2};
  float vals[4] = {1, 2, 3, 4};
  tp.n_dims = 2, tp.dims = dims, tp.has_data_type = 1, tp.data_type = 1, tp.n_float_data = 4, tp.float_data = vals;
  tp.name = "w";
  uint8_t buf[256];
  size_t n = onnx__tensor_proto__pack(&tp, buf);
  kiln_tensor t = {0};
  char *name = NULL;
  CHECK(kiln_tensor_parse(buf, n, &t, &name) == KILN_OK && t.numel == 4 && kiln_get_f(&t, 3) == 4.0 && name &&
            !strcmp(name, "w"),
        "float_data tensor");
  kiln_tensor_release(&t);
  kiln_free(name);
  tp.n_float_data = 3;
  n = onnx__tensor_proto__pack(&tp, buf);
  CHECK(kiln_tensor_parse(buf, n, &t, NULL) == KILN_E_MODEL && strstr(kiln_last_error(), "'w'"),
        "too few values: %s", kiln_last_error());
  tp.n_float_data = 0;
  tp.has_raw_data = 1, tp.raw_data.len = 15, tp.raw_data.data = (uint8_t *)vals;
  n = onnx__tensor_proto__pack(&tp, buf);
  CHECK(kiln_tensor_parse(buf, n, &t, NULL) == KILN_E_MODEL, "raw_data of the wrong size");
  tp.has_raw_data = 0, tp.data_type = 8;
  n = onnx__tensor_proto__pack(&tp, buf);
  CHECK(kiln_tensor_parse(buf, n, &t, NULL) == KILN_E_UNSUPPORTED_DTYPE, "string tensor");
}

/* kiln_tensor_copy of view stacks (gathered level by level) against the
 * per-element map kiln_views_offset, over op sequences that leave 1 to 3
 * levels: reshapes of transposes, negative and step-2 slices, a prefix
 * slice of a reshape, broadcasts; float32 and int64. */
static void stack_case(const char *what, kiln_dtype dt, const kiln_view_op *ops, int nops) {
  int64_t bd[3] = {2, 3, 4};
  kiln_tensor base = {0}, v = {0}, copy = {0};
  CHECK(kiln_tensor_alloc(&base, dt, 3, bd) == KILN_OK, "%s: alloc", what);
  for (int64_t i = 0; i < base.numel; i++) kiln_set_i(&base, i, 100 + i);
  kiln_view c;
  kiln_views st;
  kiln_view_contiguous(3, bd, &c);
  kiln_views_init(&st, &c);
  kiln_status s = KILN_OK;
  for (int i = 0; i < nops && !s; i++) s = kiln_views_push(&st, &ops[i]);
  CHECK(s == KILN_OK, "%s: push", what);
  const kiln_view *top = kiln_views_top(&st);
  v.dtype = dt;
  v.rank = top->rank;
  memcpy(v.dims, top->shape, sizeof v.dims);
  v.numel = top->numel;
  v.data = base.data;
  v.strided = true;
  v.stack = &st;
  CHECK(kiln_tensor_copy(&copy, &v) == KILN_OK && !copy.strided && copy.numel == v.numel, "%s: copy", what);
  int bad = 0;
  for (int64_t i = 0; i < v.numel && copy.data; i++)
    bad += kiln_get_i(&copy, i) != 100 + kiln_views_offset(&st, i, NULL);
  CHECK(!bad, "%s: %d of %lld elements differ (depth %d)", what, bad, (long long)v.numel, st.depth);
  read_runs(what, &v);
  kiln_tensor_release(&copy);
  kiln_tensor_release(&base);
}

static void test_stack_copy(void) {
  kiln_view_op o[4];
  memset(o, 0, sizeof o);
  o[0].kind = KILN_VOP_TRANSPOSE; /* [3,2,4] */
  o[0].n = 3;
  o[0].perm[0] = 1, o[0].perm[1] = 0, o[0].perm[2] = 2;
  o[1].kind = KILN_VOP_RESHAPE;
  o[1].n = 2;
  o[1].shape[0] = 3, o[1].shape[1] = 8;
  stack_case("transpose, reshape", KILN_F32, o, 2);
  stack_case("transpose, reshape (int64)", KILN_I64, o, 2);
  memset(o, 0, sizeof o);
  o[0].kind = KILN_VOP_TRANSPOSE; /* reversed: [4,3,2] */
  o[1].kind = KILN_VOP_RESHAPE;
  o[1].n = 1;
  o[1].shape[0] = 24;
  o[2].kind = KILN_VOP_SLICE; /* [23:0:-3] */
  o[2].n = 1;
  o[2].starts[0] = 23, o[2].ends[0] = 0, o[2].steps[0] = -3, o[2].has_steps = true;
  o[3].kind = KILN_VOP_RESHAPE;
  o[3].n = 2;
  o[3].shape[0] = 2, o[3].shape[1] = 4;
  stack_case("transpose, reshape, negative slice, reshape", KILN_F32, o, 4);
  memset(o, 0, sizeof o);
  o[0].kind = KILN_VOP_SLICE; /* [2,3,2], step 2 */
  o[0].n = 1;
  o[0].starts[0] = 0, o[0].ends[0] = 4, o[0].steps[0] = 2, o[0].axes[0] = 2, o[0].has_steps = o[0].has_axes = true;
  o[1].kind = KILN_VOP_TRANSPOSE;
  o[2].kind = KILN_VOP_RESHAPE;
  o[2].n = 1;
  o[2].shape[0] = 12;
  o[3].kind = KILN_VOP_SLICE; /* a prefix of the reshape */
  o[3].n = 1;
  o[3].starts[0] = 0, o[3].ends[0] = 5;
  stack_case("strided slice, transpose, reshape, prefix slice", KILN_F32, o, 4);
  memset(o, 0, sizeof o);
  o[0].kind = KILN_VOP_TRANSPOSE; /* [3,2,4] */
  o[0].n = 3;
  o[0].perm[0] = 1, o[0].perm[1] = 0, o[0].perm[2] = 2;
  o[1].kind = KILN_VOP_RESHAPE;
  o[1].n = 3;
  o[1].shape[0] = 1, o[1].shape[1] = 3, o[1].shape[2] = 8;
  o[2].kind = KILN_VOP_EXPAND; /* broadcast to [2,3,8] */
  o[2].n = 3;
  o[2].shape[0] = 2, o[2].shape[1] = 3, o[2].shape[2] = 8;
  stack_case("transpose, reshape, expand", KILN_F32, o, 3);
}

int main(void) {
  test_half();
  test_half_from_double();
  test_views();
  test_stack_copy();
  test_tensor();
  test_import();
  test_tensor_parse();
  printf("unit_ir: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
