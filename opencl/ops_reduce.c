/* opencl/ops_reduce: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/
 * SumSquare (axes as attribute or constant input, keepdims,
 * noop_with_empty_axes) and ArgMax/ArgMin, float32. A reduction over many
 * elements gets one work-group per output (a strided loop, then a tree in
 * local memory) — on a GPU or with few outputs (kiln_clop_row_group); a
 * short one, or many on a CPU device, one work-item per output. NaN handling
 * and the empty-set identities follow reference/ops_reduce.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl/ops_int.h"

/* Per kind: identity, how an element enters (v), how two partials combine
 * (a, b), what the total becomes (a; n is the set's size). */
static const struct {
  const char *name, *init, *map, *comb, *fin;
} kinds[] = {
    [RK_SUM] = {"sum", "0.0f", "v", "a + b", "a"},
    [RK_MEAN] = {"mean", "0.0f", "v", "a + b", "a / (float)n"},
    [RK_MAX] = {"max", "-INFINITY", "v", "(isnan(b) || b > a) ? b : a", "a"},
    [RK_MIN] = {"min", "INFINITY", "v", "(isnan(b) || b < a) ? b : a", "a"},
    [RK_PROD] = {"prod", "1.0f", "v", "a * b", "a"},
    [RK_L1] = {"l1", "0.0f", "fabs(v)", "a + b", "a"},
    [RK_L2] = {"l2", "0.0f", "v * v", "a + b", "sqrt(a)"},
    [RK_LOGSUM] = {"logsum", "0.0f", "v", "a + b", "log(a)"},
    [RK_LOGSUMEXP] = {"logsumexp", "0.0f", "exp(v - sh_)", "a + b", "sh_ + log(a)"},
    [RK_SUMSQUARE] = {"sumsquare", "0.0f", "v * v", "a + b", "a"},
};

kiln_status kiln_clop_emit_group_reduce(kiln_cl_src *s, const char *var, const char *comb) {
  return kiln_cl_src_printf(s,
                            "  sh[lid] = %s;\n  barrier(CLK_LOCAL_MEM_FENCE);\n"
                            "  for (uint h = lsz / 2; h > 0; h >>= 1) {\n"
                            "    if (lid < h) sh[lid] = %s(sh[lid], sh[lid + h]);\n"
                            "    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n"
                            "  %s = sh[0];\n  barrier(CLK_LOCAL_MEM_FENCE);\n",
                            var, comb, var);
}

bool kiln_clop_row_group(const kiln_cl_device *dev, int64_t rows) {
  const char *e = getenv("KILN_CL_ROW_ITEM");
  if (e && !strcmp(e, "0")) return true;
  int64_t cu = dev->compute_units ? (int64_t)dev->compute_units : 1;
  return !(dev->type & CL_DEVICE_TYPE_CPU) || rows < KILN_CLOP_ROW_ITEM_PER_CU * cu;
}

kiln_status kiln_clop_reduce_emit(const op_ctx *c, kiln_cl_op *op, int kind, int rank, const int64_t *dims,
                                  const bool *red) {
  int64_t st[KILN_MAX_RANK], kd[KILN_MAX_RANK], ks[KILN_MAX_RANK], rd[KILN_MAX_RANK], rs[KILN_MAX_RANK];
  kiln_strides(rank, dims, st);
  int nk = 0, nr = 0;
  for (int d = 0; d < rank; d++) {
    if (red[d])
      rd[nr] = dims[d], rs[nr++] = st[d];
    else
      kd[nk] = dims[d], ks[nk++] = st[d];
  }
  int64_t nout = kiln_clop_numel(nk, kd), nred = kiln_clop_numel(nr, rd);
  int64_t *p1[1] = {ks}, *p2[1] = {rs};
  nk = kiln_clop_collapse(nk, kd, 1, p1);
  nr = kiln_clop_collapse(nr, rd, 1, p2);
  bool group = nred >= 128 && kiln_clop_row_group(c->dev, nout);
  int k;
  kiln_status s = kiln_clop_kernel(op, kinds[kind].name, &k);
  if (s) return s;
  kiln_cl_src *src = c->src;
  const char *kn = kiln_clop_kname(op, k);
  s = kiln_cl_src_printf(src, "float %s_c(float a, float b) { return %s; }\n", kn, kinds[kind].comb);
  if (!s && kind == RK_LOGSUMEXP)
    s = kiln_cl_src_printf(src, "float %s_m(float a, float b) { return b > a ? b : a; }\n", kn);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const float *x_, ulong xo, __global float *y_, ulong yo) {\n"
                           "  __global const float *x = x_ + xo;\n  const ulong n = %lldUL;\n  long base, ro;\n",
                           kn, (long long)nred);
  if (s) return s;
  if (group)
    s = kiln_cl_src_printf(src,
                           "  __local float sh[%d];\n  const ulong o = get_group_id(0);\n"
                           "  const uint lid = get_local_id(0), lsz = get_local_size(0);\n",
                           OP_RED_WG);
  else
    s = kiln_cl_src_printf(src,
                           "  const ulong o = get_global_id(0);\n  if (o >= %lldUL) return;\n"
                           "  const uint lid = 0, lsz = 1;\n",
                           (long long)nout);
  if (!s) s = kiln_clop_emit_offset(src, "o", nk, kd, ks, "base");
  if (!s && kind == RK_LOGSUMEXP) {
    /* the largest element (NaN ignored), then the sum shifted by it */
    s = kiln_cl_src_printf(src, "  float sh_ = -INFINITY;\n  for (ulong r = lid; r < n; r += lsz) {\n");
    if (!s) s = kiln_clop_emit_offset(src, "r", nr, rd, rs, "ro");
    if (!s) s = kiln_cl_src_printf(src, "    const float v = x[base + ro];\n    sh_ = %s_m(sh_, v);\n  }\n", kn);
    if (!s && group) {
      char comb[80];
      snprintf(comb, sizeof comb, "%s_m", kn);
      s = kiln_clop_emit_group_reduce(src, "sh_", comb);
    }
    if (!s) s = kiln_cl_src_printf(src, "  if (!isfinite(sh_)) sh_ = 0.0f;\n");
  }
  if (!s) s = kiln_cl_src_printf(src, "  float a = %s;\n  for (ulong r = lid; r < n; r += lsz) {\n", kinds[kind].init);
  if (!s) s = kiln_clop_emit_offset(src, "r", nr, rd, rs, "ro");
  if (!s)
    s = kiln_cl_src_printf(src, "    const float v = x[base + ro];\n    a = %s_c(a, %s);\n  }\n", kn, kinds[kind].map);
  if (!s && group) {
    char comb[80];
    snprintf(comb, sizeof comb, "%s_c", kn);
    s = kiln_clop_emit_group_reduce(src, "a", comb);
    if (!s) s = kiln_cl_src_printf(src, "  if (lid == 0) y_[yo + o] = %s;\n}\n", kinds[kind].fin);
  } else if (!s) {
    s = kiln_cl_src_printf(src, "  y_[yo + o] = %s;\n}\n", kinds[kind].fin);
  }
  if (s) return s;
  opb args[] = {IN(0), OUT(0)};
  s = group ? kiln_clop_launch_groups(op, k, (size_t)nout, 2, args) : kiln_clop_launch(op, k, (size_t)nout, 2, args);
  if (!s)
    snprintf(op->desc, sizeof op->desc, "reduce %s %lld x %lld (%s)", kinds[kind].name, (long long)nout,
             (long long)nred, group ? "group per output" : "item per output");
  return s;
}

static int kind_of(const char *op) {
  static const char *const names[] = {"ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",
                                      "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  for (int i = 0; i < 10; i++)
    if (!strcmp(op, names[i])) return i;
  return -1;
}

static kiln_status reduce(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0];
  int kind = kind_of(n->op_type);
  if (kind < 0 || !kiln_clop_is_f32(x) || !kiln_clop_is_f32(&c->out[0])) return KILN_OK;
  int since = kind == RK_SUM ? 13 : 18, r = x->rank;
  int64_t axes[KILN_MAX_RANK];
  int na = 0;
  bool noop = false;
  if (n->opset >= since) {
    noop = kiln_attr_int(n, "noop_with_empty_axes", 0) != 0;
    if (n->n_in > 1 && n->in[1] >= 0) {
      const kiln_tensor *a = c->konst ? c->konst[1] : NULL;
      if (!a) return KILN_OK; /* axes known only at run time: the host */
      if (a->numel > r) return KILN_OK;
      if (kiln_tensor_ints(a, axes, KILN_MAX_RANK, &na)) return KILN_OK;
    }
  } else {
    size_t cnt = 0;
    const int64_t *av = kiln_attr_ints(n, "axes", &cnt);
    if (cnt > (size_t)r) return KILN_OK;
    for (size_t i = 0; i < cnt; i++) axes[i] = av[i];
    na = (int)cnt;
  }
  bool red[KILN_MAX_RANK];
  for (int d = 0; d < r; d++) red[d] = na == 0 && !noop;
  for (int i = 0; i < na; i++) {
    int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
    if (a < 0 || a >= r || red[a]) return KILN_OK; /* the host reports it */
    red[a] = true;
  }
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  if (!s) s = kiln_clop_reduce_emit(c, op, kind, r, x->dims, red);
  if (s) return kiln_clop_fail_free(op, s);
  *out = op;
  return KILN_OK;
}

/* ArgMax/ArgMin: one work-item per output; NaN wins (the first, or the
 * last with select_last_index), ties keep the first unless
 * select_last_index. */
static kiln_status argminmax(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0];
  if (!kiln_clop_is_f32(x) || c->out[0].dtype != KILN_I64 || x->rank < 1) return KILN_OK;
  int64_t axis = kiln_attr_int(n, "axis", 0);
  if (axis < 0) axis += x->rank;
  if (axis < 0 || axis >= x->rank) return KILN_OK;
  bool is_max = !strcmp(n->op_type, "ArgMax"), last = kiln_attr_int(n, "select_last_index", 0) != 0;
  int64_t outer = kiln_clop_numel((int)axis, x->dims), len = x->dims[axis],
          inner = kiln_clop_numel(x->rank - (int)axis - 1, x->dims + axis + 1);
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  if (!s) s = kiln_clop_kernel(op, is_max ? "argmax" : "argmin", &k);
  if (!s)
    s = kiln_cl_src_printf(c->src,
                           "__kernel void %s(__global const float *x_, ulong xo, __global long *y_, ulong yo) {\n"
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                           "  __global const float *x = x_ + xo + (i / %lldUL) * %lldUL + i %% %lldUL;\n"
                           "  long best = 0; float bv = x[0];\n"
                           "  for (long j = 1; j < %lldL; j++) {\n"
                           "    const float v = x[j * %lldL];\n"
                           "    const int na = isnan(v), nb = isnan(bv);\n"
                           "    const int c3 = (na || nb) ? na - nb : (v %s bv) - (v %s bv);\n"
                           "    if (c3 %s 0) { best = j; bv = v; }\n  }\n"
                           "  y_[yo + i] = best;\n}\n",
                           kiln_clop_kname(op, k), (long long)(outer * inner), (long long)inner,
                           (long long)(len * inner), (long long)inner, (long long)len, (long long)inner,
                           is_max ? ">" : "<", is_max ? "<" : ">", last ? ">=" : ">");
  if (!s) s = kiln_clop_launch(op, k, (size_t)(outer * inner), 2, (opb[]){IN(0), OUT(0)});
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "%s %lld x %lld", n->op_type, (long long)(outer * inner), (long long)len);
  *out = op;
  return KILN_OK;
}

kiln_status kiln_clop_reduce_prepare(const op_ctx *c, kiln_cl_op **op) {
  if (!strcmp(c->n->op_type, "ArgMax") || !strcmp(c->n->op_type, "ArgMin")) return argminmax(c, op);
  return reduce(c, op);
}
