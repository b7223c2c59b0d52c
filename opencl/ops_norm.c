/* opencl/ops_norm: Softmax, LogSoftmax and Hardmax (before opset 13 over the input
 * flattened to 2-D at axis, from 13 along the single axis) and
 * LayerNormalization (axis, epsilon, optional Mean / InvStdDev outputs),
 * float32. A long row gets a work-group (reductions in local memory), a
 * short one a work-item, as does every row on a CPU device with enough rows
 * (kiln_clop_row_group). Semantics of reference/ops_nn.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl/ops_int.h"

#define GROUP_MIN 128 /* rows at least this long get a work-group */

/* Emits the loop head "for (j over the row) {" for group or item mode. */
static const char *loop_head(bool group) {
  return group ? "  for (ulong j = lid; j < len; j += lsz) {\n" : "  for (ulong j = 0; j < len; j++) {\n";
}

/* Floats per vector load of a contiguous row taken by one work item: the
 * widest of 16, 8, 4, 2 dividing the row, up to the device's preferred
 * width where it is 8 or more (PoCL: 16; it runs an item's vector as SIMD
 * and does not vectorise across items), else 0: one float at a time
 * (llvmpipe, which vectorises across items: float4 loads measured no faster
 * there); KILN_CL_VEC=0: 0, =4|8|16: at most that, on any device. */
static int row_width(const kiln_cl_device *dev, int64_t len) {
  const char *e = getenv("KILN_CL_VEC");
  int force = e && *e ? atoi(e) : -1;
  if (force == 0 || (dev->pref_vec_float < 8 && force != 4 && force != 8 && force != 16)) return 0;
  int w = dev->pref_vec_float >= 16 ? 16 : 8;
  if (force == 4 || force == 8 || force == 16) w = force;
  while (w > 1 && len % w) w /= 2;
  return w > 1 ? w : 0;
}

/* Writes "f(f(f(init, v.s0), v.s1) ...)" folding the w lanes of vector v
 * in lane order with the two-argument function f, or with "+" when f is
 * NULL. */
static kiln_status fold_lanes(kiln_cl_src *src, const char *dst, const char *init, const char *v, int w,
                              const char *f) {
  static const char lane[] = "0123456789abcdef";
  kiln_status s = kiln_cl_src_printf(src, "  %s = %s;\n", dst, init);
  for (int i = 0; i < w && !s; i++)
    s = f ? kiln_cl_src_printf(src, "  %s = %s(%s, %s.s%c);\n", dst, f, dst, v, lane[i])
          : kiln_cl_src_printf(src, "  %s += %s.s%c;\n", dst, v, lane[i]);
  return s;
}

static kiln_status head(kiln_cl_src *src, bool group, int64_t rows) {
  if (group)
    return kiln_cl_src_printf(src,
                              "  __local float sh[%d];\n  const ulong r = get_group_id(0);\n"
                              "  const uint lid = get_local_id(0), lsz = get_local_size(0);\n",
                              OP_RED_WG);
  return kiln_cl_src_printf(src, "  const ulong r = get_global_id(0);\n  if (r >= %lldUL) return;\n", (long long)rows);
}

/* Hardmax: 1 at the row's first largest element (the first NaN when there
 * is one, as the reference), 0 elsewhere; a work-item per row. */
static kiln_status hardmax(const op_ctx *c, kiln_cl_op **out, int64_t rows, int64_t len, int64_t inner) {
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  if (!s) s = kiln_clop_kernel(op, "hardmax", &k);
  if (!s)
    s = kiln_cl_src_printf(c->src,
                           "__kernel void %s(__global const float *x_, ulong xo, __global float *y_, ulong yo) {\n"
                           "  const ulong r = get_global_id(0);\n  if (r >= %lldUL) return;\n"
                           "  const ulong base = (r / %lldUL) * %lldUL + r %% %lldUL;\n"
                           "  __global const float *x = x_ + xo + base;\n  __global float *y = y_ + yo + base;\n"
                           "  float mx = x[0]; ulong arg = 0;\n"
                           "  for (ulong j = 1; j < %lldUL; j++) {\n    const float v = x[j * %lldUL];\n"
                           "    if (v > mx || (isnan(v) && !isnan(mx))) { mx = v; arg = j; }\n  }\n"
                           "  for (ulong j = 0; j < %lldUL; j++) y[j * %lldUL] = j == arg ? 1.0f : 0.0f;\n}\n",
                           kiln_clop_kname(op, k), (long long)rows, (long long)inner, (long long)(len * inner),
                           (long long)inner, (long long)len, (long long)inner, (long long)len, (long long)inner);
  if (!s) s = kiln_clop_launch(op, k, (size_t)rows, 2, (opb[]){IN(0), OUT(0)});
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "Hardmax %lld rows of %lld (stride %lld)", (long long)rows, (long long)len,
           (long long)inner);
  *out = op;
  return KILN_OK;
}

static kiln_status softmax(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0];
  if (!kiln_clop_is_f32(x) || !kiln_clop_is_f32(&c->out[0])) return KILN_OK;
  bool v13 = n->opset >= 13, is_log = !strcmp(n->op_type, "LogSoftmax");
  int r = x->rank;
  int64_t ax = kiln_attr_int(n, "axis", v13 ? -1 : 1);
  if (r == 0) return KILN_OK;
  if (ax < 0) ax += r;
  if (ax < 0 || ax >= r) return KILN_OK;
  int64_t outer = kiln_clop_numel((int)ax, x->dims), len, inner;
  if (v13) {
    len = x->dims[ax];
    inner = kiln_clop_numel(r - (int)ax - 1, x->dims + ax + 1);
  } else {
    len = kiln_clop_numel(r - (int)ax, x->dims + ax);
    inner = 1;
  }
  int64_t rows = outer * inner;
  if (!strcmp(n->op_type, "Hardmax")) return hardmax(c, out, rows, len, inner);
  bool group = len >= GROUP_MIN && kiln_clop_row_group(c->dev, rows);
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  if (!s) s = kiln_clop_kernel(op, is_log ? "logsoftmax" : "softmax", &k);
  kiln_cl_src *src = c->src;
  const char *kn = kiln_clop_kname(op, k);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "float %s_mx(float a, float b) { return (isnan(b) || b > a) ? b : a; }\n"
                           "float %s_add(float a, float b) { return a + b; }\n"
                           "__kernel void %s(__global const float *x_, ulong xo, __global float *y_, ulong yo) {\n"
                           "  const ulong len = %lldUL;\n",
                           kn, kn, kn, (long long)len);
  if (!s) s = head(src, group, rows);
  const int w = !group && inner == 1 ? row_width(c->dev, len) : 0;
  if (!s && w) {
    /* a contiguous row per item, w floats per load: w lanes of max and sum, folded in lane order */
    char mx[96];
    snprintf(mx, sizeof mx, "%s_mx", kn);
    s = kiln_cl_src_printf(src,
                           "  __global const float *x = x_ + xo + r * len;\n  __global float *y = y_ + yo + r * len;\n"
                           "  float%d mv = (float%d)(-INFINITY);\n"
                           "  for (ulong j = 0; j < len; j += %d) {\n    const float%d v = vload%d(0, x + j);\n"
                           "    mv = select(mv, v, isnan(v) | (v > mv));\n  }\n  float mx;\n",
                           w, w, w, w, w);
    if (!s) s = fold_lanes(src, "mx", "-INFINITY", "mv", w, mx);
    if (!s)
      s = kiln_cl_src_printf(src,
                             "  float%d sv = (float%d)(0.0f);\n"
                             "  for (ulong j = 0; j < len; j += %d) sv += exp(vload%d(0, x + j) - mx);\n  float sum;\n",
                             w, w, w, w);
    if (!s) s = fold_lanes(src, "sum", "0.0f", "sv", w, NULL);
    if (!s && is_log)
      s = kiln_cl_src_printf(src,
                             "  const float ls = log(sum);\n"
                             "  for (ulong j = 0; j < len; j += %d)\n"
                             "    vstore%d((vload%d(0, x + j) - mx) - ls, 0, y + j);\n}\n",
                             w, w, w);
    else if (!s)
      s = kiln_cl_src_printf(src,
                             "  for (ulong j = 0; j < len; j += %d)\n"
                             "    vstore%d(exp(vload%d(0, x + j) - mx) / sum, 0, y + j);\n}\n",
                             w, w, w);
  }
  if (!s && !w)
    s = kiln_cl_src_printf(src,
                           "  const ulong base = (r / %lldUL) * %lldUL + r %% %lldUL;\n"
                           "  __global const float *x = x_ + xo + base;\n  __global float *y = y_ + yo + base;\n"
                           "  float mx = -INFINITY;\n%s    mx = %s_mx(mx, x[j * %lldUL]);\n  }\n",
                           (long long)inner, (long long)(len * inner), (long long)inner, loop_head(group), kn,
                           (long long)inner);
  char comb[96];
  snprintf(comb, sizeof comb, "%s_mx", kn);
  if (!s && group) s = kiln_clop_emit_group_reduce(src, "mx", comb);
  if (!s && !w)
    s = kiln_cl_src_printf(src, "  float sum = 0.0f;\n%s    sum += exp(x[j * %lldUL] - mx);\n  }\n", loop_head(group),
                           (long long)inner);
  snprintf(comb, sizeof comb, "%s_add", kn);
  if (!s && group) s = kiln_clop_emit_group_reduce(src, "sum", comb);
  if (!s && !w && is_log)
    s = kiln_cl_src_printf(src,
                           "  const float ls = log(sum);\n%s    y[j * %lldUL] = (x[j * %lldUL] - mx) - ls;\n  }\n}\n",
                           loop_head(group), (long long)inner, (long long)inner);
  else if (!s && !w)
    s = kiln_cl_src_printf(src, "%s    y[j * %lldUL] = exp(x[j * %lldUL] - mx) / sum;\n  }\n}\n", loop_head(group),
                           (long long)inner, (long long)inner);
  opb args[] = {IN(0), OUT(0)};
  if (!s)
    s = group ? kiln_clop_launch_groups(op, k, (size_t)rows, 2, args) : kiln_clop_launch(op, k, (size_t)rows, 2, args);
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "%s %lld rows of %lld (stride %lld, %s)", n->op_type, (long long)rows,
           (long long)len, (long long)inner,
           group ? "group per row" : w ? "item per row, vector loads" : "item per row");
  *out = op;
  return KILN_OK;
}

/* Read strides of p broadcast (right-aligned, unidirectionally) to x; false
 * when it does not broadcast. */
static bool bcast(const kiln_cl_ttype *p, const kiln_cl_ttype *x, int64_t *st) {
  if (p->rank > x->rank) return false;
  int64_t s = 1;
  for (int d = x->rank - 1; d >= 0; d--) {
    int pd = d - (x->rank - p->rank);
    if (pd < 0) {
      st[d] = 0;
      continue;
    }
    if (p->dims[pd] != 1 && p->dims[pd] != x->dims[d]) return false;
    st[d] = p->dims[pd] == 1 ? 0 : s;
    s *= p->dims[pd];
  }
  return true;
}

static kiln_status layernorm(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0], *sc = &c->in[1];
  bool has_b = n->n_in > 2 && n->in[2] >= 0 && kiln_clop_present(&c->in[2]);
  bool has_m = n->n_out > 1 && n->out[1] >= 0 && kiln_clop_present(&c->out[1]);
  bool has_v = n->n_out > 2 && n->out[2] >= 0 && kiln_clop_present(&c->out[2]);
  if (n->opset < 17 || !kiln_clop_is_f32(x) || !kiln_clop_is_f32(sc) || !kiln_clop_is_f32(&c->out[0]) ||
      (has_b && !kiln_clop_is_f32(&c->in[2])) || (has_m && !kiln_clop_is_f32(&c->out[1])) ||
      (has_v && !kiln_clop_is_f32(&c->out[2])) || x->rank < 1)
    return KILN_OK;
  int r = x->rank;
  int64_t ax = kiln_attr_int(n, "axis", -1);
  if (ax < 0) ax += r;
  if (ax < 0 || ax >= r) return KILN_OK;
  float eps = kiln_attr_float(n, "epsilon", 1e-5f);
  int64_t ss[KILN_MAX_RANK], bs[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  if (!bcast(sc, x, ss) || (has_b && !bcast(&c->in[2], x, bs))) return KILN_OK;
  if (!has_b) memset(bs, 0, sizeof bs);
  int64_t outer = kiln_clop_numel((int)ax, x->dims), len = kiln_clop_numel(r - (int)ax, x->dims + ax);
  memcpy(dims, x->dims, sizeof dims);
  int64_t *strides[2] = {ss, bs};
  int cr = kiln_clop_collapse(r, dims, 2, strides);
  bool group = len >= GROUP_MIN && kiln_clop_row_group(c->dev, outer);
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  if (!s) s = kiln_clop_kernel(op, "layernorm", &k);
  kiln_cl_src *src = c->src;
  const char *kn = kiln_clop_kname(op, k);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "float %s_add(float a, float b) { return a + b; }\n"
                           "__kernel void %s(__global const float *x_, ulong xo, __global const float *s_, ulong so, "
                           "%s__global float *y_, ulong yo%s%s) {\n  const ulong len = %lldUL;\n",
                           kn, kn, has_b ? "__global const float *b_, ulong bo, " : "",
                           has_m ? ", __global float *m_, ulong mo" : "", has_v ? ", __global float *v_, ulong vo" : "",
                           (long long)len);
  if (!s) s = head(src, group, outer);
  const int w = group ? 0 : row_width(c->dev, len);
  /* Scale (and B) one row long, read at j: the vector form stores w at a time */
  bool row_sb = (cr == 2 && dims[1] == len && ss[0] == 0 && ss[1] == 1 && (!has_b || (bs[0] == 0 && bs[1] == 1))) ||
                (cr == 1 && dims[0] == len && ss[0] == 1 && (!has_b || bs[0] == 1));
  if (!s && w) {
    /* a row per item, w floats per load: w lanes of each sum, added in lane order */
    s = kiln_cl_src_printf(src,
                           "  __global const float *x = x_ + xo + r * len;\n  float%d a = (float%d)(0.0f);\n"
                           "  for (ulong j = 0; j < len; j += %d) a += vload%d(0, x + j);\n  float mean;\n",
                           w, w, w, w);
    if (!s) s = fold_lanes(src, "mean", "0.0f", "a", w, NULL);
    if (!s)
      s = kiln_cl_src_printf(src,
                             "  mean /= (float)len;\n  a = (float%d)(0.0f);\n"
                             "  for (ulong j = 0; j < len; j += %d) {\n"
                             "    const float%d d = vload%d(0, x + j) - mean;\n"
                             "    a += d * d;\n  }\n  float var;\n",
                             w, w, w, w);
    if (!s) s = fold_lanes(src, "var", "0.0f", "a", w, NULL);
  } else if (!s) {
    s = kiln_cl_src_printf(
        src, "  __global const float *x = x_ + xo + r * len;\n  float mean = 0.0f;\n%s    mean += x[j];\n  }\n",
        loop_head(group));
    char comb[96];
    snprintf(comb, sizeof comb, "%s_add", kn);
    if (!s && group) s = kiln_clop_emit_group_reduce(src, "mean", comb);
    if (!s)
      s = kiln_cl_src_printf(src,
                             "  mean /= (float)len;\n  float var = 0.0f;\n"
                             "%s    const float d = x[j] - mean;\n    var += d * d;\n  }\n",
                             loop_head(group));
    if (!s && group) s = kiln_clop_emit_group_reduce(src, "var", comb);
  }
  char fe[48];
  if (!s)
    s = kiln_cl_src_printf(src, "  var /= (float)len;\n  const float inv = 1.0f / sqrt(var + %s);\n",
                           kiln_clop_flit(eps, fe, sizeof fe));
  if (!s && w && row_sb) {
    char bt[48] = "";
    if (has_b) snprintf(bt, sizeof bt, " + vload%d(0, b_ + bo + j)", w);
    s = kiln_cl_src_printf(src,
                           "  for (ulong j = 0; j < len; j += %d)\n"
                           "    vstore%d((vload%d(0, x + j) - mean) * inv * vload%d(0, s_ + so + j)%s, 0,\n"
                           "             y_ + yo + r * len + j);\n",
                           w, w, w, w, bt);
  } else if (!s) {
    s = kiln_cl_src_printf(src, "%s    const ulong e = r * len + j;\n    long soff%s;\n", loop_head(group),
                           has_b ? ", boff" : "");
    if (!s) s = kiln_clop_emit_offset(src, "e", cr, dims, ss, "soff");
    if (!s && has_b) s = kiln_clop_emit_offset(src, "e", cr, dims, bs, "boff");
    if (!s)
      s = kiln_cl_src_printf(src, "    y_[yo + e] = (x[j] - mean) * inv * s_[so + soff]%s;\n  }\n",
                             has_b ? " + b_[bo + boff]" : "");
  }
  if (!s && (has_m || has_v)) {
    s = kiln_cl_src_printf(src, "  if (%s) {\n%s%s  }\n", group ? "lid == 0" : "1",
                           has_m ? "    m_[mo + r] = mean;\n" : "", has_v ? "    v_[vo + r] = inv;\n" : "");
  }
  if (!s) s = kiln_cl_src_printf(src, "}\n");
  opb args[6];
  int na = 0;
  args[na++] = IN(0);
  args[na++] = IN(1);
  if (has_b) args[na++] = IN(2);
  args[na++] = OUT(0);
  if (has_m) args[na++] = OUT(1);
  if (has_v) args[na++] = OUT(2);
  if (!s)
    s = group ? kiln_clop_launch_groups(op, k, (size_t)outer, na, args)
              : kiln_clop_launch(op, k, (size_t)outer, na, args);
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "LayerNormalization %lld rows of %lld (%s)", (long long)outer, (long long)len,
           group ? "group per row" : w ? "item per row, vector loads" : "item per row");
  *out = op;
  return KILN_OK;
}

kiln_status kiln_clop_norm_prepare(const op_ctx *c, kiln_cl_op **op) {
  return strcmp(c->n->op_type, "LayerNormalization") ? softmax(c, op) : layernorm(c, op);
}
