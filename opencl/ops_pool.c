/* opencl/ops_pool: MaxPool (dilations, ceil_mode, storage_order, the
 * optional Indices output), AveragePool (count_include_pad, ceil_mode) —
 * one work-item per output element, window loops with literal bounds, or
 * on a device preferring wide vectors 8 outputs of a 2-D row per item in a
 * float8 (pool_vec_src) — and
 * GlobalAveragePool / GlobalMaxPool as reductions over the spatial dims.
 * float32; geometry and NaN rules of reference/ops_nn.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opencl/ops_int.h"

#define MAXSP (KILN_MAX_RANK - 2)

static bool ints_of(const kiln_node *n, const char *name, int count, int64_t def, int64_t *v) {
  size_t cnt;
  const int64_t *a = kiln_attr_ints(n, name, &cnt);
  for (int i = 0; i < count; i++) v[i] = a ? a[i] : def;
  return !a || cnt == (size_t)count;
}

bool kiln_clop_pool_geo_make(const op_ctx *c, bool dil, kiln_clop_pool_geo *g) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0], *y = &c->out[0];
  size_t nk;
  if (!kiln_attr_ints(n, "kernel_shape", &nk) || nk < 1 || nk > MAXSP || x->rank != (int)nk + 2 || y->rank != x->rank)
    return false;
  memset(g, 0, sizeof *g);
  g->nsp = (int)nk;
  int64_t pads[2 * MAXSP];
  if (!ints_of(n, "kernel_shape", g->nsp, 1, g->k) || !ints_of(n, "strides", g->nsp, 1, g->s) ||
      !ints_of(n, "pads", 2 * g->nsp, 0, pads) || !ints_of(n, "dilations", g->nsp, 1, g->d))
    return false;
  const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
  bool same = !strncmp(ap, "SAME_", 5), lower = !strcmp(ap, "SAME_LOWER"), valid = !strcmp(ap, "VALID");
  g->in_plane = g->out_plane = 1;
  for (int i = 0; i < g->nsp; i++) {
    if (!dil && g->d[i] != 1) return false;
    if (g->k[i] < 1 || g->s[i] < 1 || g->d[i] < 1) return false;
    int64_t in = x->dims[2 + i], ek = (g->k[i] - 1) * g->d[i] + 1, st = g->s[i];
    g->in[i] = in;
    if (same) {
      int64_t out = (in + st - 1) / st, total = (out - 1) * st + ek - in;
      if (total < 0) total = 0;
      g->pb[i] = lower ? total - total / 2 : total / 2;
      g->pe[i] = total - g->pb[i];
    } else if (!valid) {
      g->pb[i] = pads[i];
      g->pe[i] = pads[g->nsp + i];
      /* the reference refuses pads at or beyond the dilated kernel extent */
      if (g->pb[i] < 0 || g->pe[i] < 0 || g->pb[i] >= ek || g->pe[i] >= ek) return false;
    }
    g->out[i] = y->dims[2 + i];
    g->in_plane *= in;
    g->out_plane *= g->out[i];
  }
  g->planes = x->dims[0] * x->dims[1];
  return y->dims[0] == x->dims[0] && y->dims[1] == x->dims[1];
}

/* The vector form of a 2-D MaxPool (without Indices) / AveragePool with
 * output rows of at least 8: KILN_CL_POOL_VEC=0 never, =1 wherever the shape
 * allows; by default on a device whose preferred float width is at least 8
 * (PoCL runs the one-output kernel's window loops scalar per work-item: a
 * 2x2/2 MaxPool over 32 planes of 64x64 took 180-400 us there). */
static bool pool_vec_ok(const op_ctx *c, const kiln_clop_pool_geo *g, bool want_idx) {
  const char *e = getenv("KILN_CL_POOL_VEC");
  if (g->nsp != 2 || want_idx || g->out[1] < 8 || (e && !strcmp(e, "0"))) return false;
  return (e && !strcmp(e, "1")) || c->dev->pref_vec_float >= 8;
}

/* A work-item per (plane, output row, block of 8 outputs of the row), the 8
 * in one float8: per window position the 8 inputs are one vector load where
 * the row is inside and all 8 columns are (column stride 1: vload8; 2: the
 * even lanes of a vload16), else lane by lane (a column outside is not
 * taken, as the one-output kernel skips it). The same taps in the same
 * order per output, the same NaN rule, sums and counts as the one-output
 * kernel: the same bits. */
static kiln_status pool_vec_src(kiln_cl_src *src, const char *kname, const kiln_clop_pool_geo *g, bool is_max,
                                bool include_pad, int64_t *items) {
  const int64_t OH = g->out[0], OW = g->out[1], H = g->in[0], W = g->in[1], S1 = g->s[1];
  const int64_t OWB = (OW + 7) / 8, total = g->planes * OH * OWB;
  *items = total;
  const bool small = g->planes * g->in_plane < INT32_MAX && g->planes * g->out_plane < INT32_MAX && total < INT32_MAX;
  const char *it = small ? "int" : "long", *sf = small ? "" : "L";
  const int64_t span = S1 == 1 ? 7 : S1 == 2 ? 15 : -1; /* the last column a vector load reads; -1: none */
  kiln_status s = kiln_cl_src_printf(
      src,
      "__kernel void %s(__global const float *x_, ulong xo, __global float *y_, ulong yo) {\n"
      "  if (get_global_id(0) >= %lldUL) return;\n"
      "  const %s i = (%s)get_global_id(0);\n"
      "  const %s owb = i %% %lld%s, t0 = i / %lld%s, oh = t0 %% %lld%s, pl = t0 / %lld%s;\n"
      "  __global const float *x = x_ + xo + pl * %lld%s;\n"
      "  const %s ow0 = owb * 8;\n%s"
      "  for (%s kh = 0; kh < %lld; kh++) {\n"
      "    const %s ih = oh * %lld - %lld + kh * %lld;\n"
      "    const bool rin = ih >= 0 && ih < %lld;\n",
      kname, (long long)total, it, it, it, (long long)OWB, sf, (long long)OWB, sf, (long long)OH, sf, (long long)OH, sf,
      (long long)g->in_plane, sf, it,
      is_max ? "  float8 best = (float8)(-INFINITY);\n  int8 found = (int8)(0);\n"
             : "  float8 sum = (float8)(0.0f);\n  int8 n_in = (int8)(0), n_pad = (int8)(0);\n",
      it, (long long)g->k[0], it, (long long)g->s[0], (long long)g->pb[0], (long long)g->d[0], (long long)H);
  if (!s && is_max) s = kiln_cl_src_printf(src, "    if (!rin) continue;\n");
  if (!s && !is_max)
    s = kiln_cl_src_printf(src, "    if (ih < -%lld || ih >= %lld) continue; /* not even in the padding */\n",
                           (long long)g->pb[0], (long long)(H + g->pe[0]));
  if (!s)
    s = kiln_cl_src_printf(src,
                           "    __global const float *xr = x + (rin ? ih : 0) * %lld%s;\n"
                           "    for (%s kw = 0; kw < %lld; kw++) {\n"
                           "      const %s iws = ow0 * %lld - %lld + kw * %lld;\n"
                           "      float8 v;\n      int8 ok;\n",
                           (long long)W, sf, it, (long long)g->k[1], it, (long long)S1, (long long)g->pb[1],
                           (long long)g->d[1]);
  if (!s && span >= 0)
    s = kiln_cl_src_printf(src,
                           "      if (rin && iws >= 0 && iws + %lld < %lld) {\n"
                           "        v = %s;\n        ok = (int8)(-1);\n      } else {\n",
                           (long long)span, (long long)W, S1 == 1 ? "vload8(0, xr + iws)" : "vload16(0, xr + iws).even");
  else if (!s)
    s = kiln_cl_src_printf(src, "      {\n");
  for (int l = 0; l < 8 && !s; l++)
    s = kiln_cl_src_printf(src,
                           "        { const %s c_ = iws + %lld; const bool u_ = rin && c_ >= 0 && c_ < %lld;\n"
                           "          ok.s%d = u_ ? -1 : 0; v.s%d = u_ ? xr[c_] : 0.0f; }\n",
                           it, (long long)(l * S1), (long long)W, l, l);
  if (!s) s = kiln_cl_src_printf(src, "      }\n");
  if (!s && is_max)
    s = kiln_cl_src_printf(src, "      const int8 take = ok & (~found | (v > best) | (isnan(v) & ~isnan(best)));\n"
                                "      best = select(best, v, take);\n      found |= ok;\n");
  if (!s && !is_max) {
    s = kiln_cl_src_printf(src, "      int8 pd;\n");
    for (int l = 0; l < 8 && !s; l++)
      s = kiln_cl_src_printf(src, "      { const %s c_ = iws + %lld; pd.s%d = c_ >= -%lld && c_ < %lld ? -1 : 0; }\n", it,
                             (long long)(l * S1), l, (long long)g->pb[1], (long long)(W + g->pe[1]));
    if (!s)
      s = kiln_cl_src_printf(src, "      sum = select(sum, sum + v, ok);\n      n_in -= ok;\n      n_pad -= pd;\n");
  }
  if (!s) s = kiln_cl_src_printf(src, "    }\n  }\n");
  if (!s && is_max) s = kiln_cl_src_printf(src, "  const float8 r = best;\n");
  if (!s && !is_max)
    s = kiln_cl_src_printf(src, "  const int8 dv = %s;\n"
                                "  const float8 r = select((float8)(NAN), sum / convert_float8(dv), dv != 0);\n",
                           include_pad ? "n_pad" : "n_in");
  if (!s)
    s = kiln_cl_src_printf(src,
                           "  __global float *y = y_ + yo + (pl * %lld%s + oh) * %lld%s + ow0;\n"
                           "  if (ow0 + 8 <= %lld) { vstore8(r, 0, y); return; }\n",
                           (long long)OH, sf, (long long)OW, sf, (long long)OW);
  for (int l = 0; l < 8 && !s; l++)
    s = kiln_cl_src_printf(src, "  if (ow0 + %d < %lld) y[%d] = r.s%d;\n", l, (long long)OW, l, l);
  if (!s) s = kiln_cl_src_printf(src, "}\n");
  return s;
}

static kiln_status window_pool(const op_ctx *c, kiln_cl_op **out, bool is_max) {
  const kiln_node *n = c->n;
  bool want_idx = is_max && n->n_out > 1 && n->out[1] >= 0 && kiln_clop_present(&c->out[1]);
  if (!kiln_clop_is_f32(&c->in[0]) || !kiln_clop_is_f32(&c->out[0]) || (want_idx && c->out[1].dtype != KILN_I64))
    return KILN_OK;
  kiln_clop_pool_geo g;
  if (!kiln_clop_pool_geo_make(c, is_max, &g)) return KILN_OK;
  bool col = kiln_attr_int(n, "storage_order", 0) == 1, include_pad = kiln_attr_int(n, "count_include_pad", 0) == 1;
  int64_t total = g.planes * g.out_plane;
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  if (!s) s = kiln_clop_kernel(op, is_max ? "maxpool" : "avgpool", &k);
  kiln_cl_src *src = c->src;
  if (!s && pool_vec_ok(c, &g, want_idx)) {
    int64_t items;
    s = pool_vec_src(src, kiln_clop_kname(op, k), &g, is_max, include_pad, &items);
    if (!s) s = kiln_clop_launch(op, k, (size_t)items, 2, (opb[]){IN(0), OUT(0)});
    if (s) return kiln_clop_fail_free(op, s);
    char sk[64];
    snprintf(op->desc, sizeof op->desc, "%s %lld planes k%s, 8 outputs per item", n->op_type, (long long)g.planes,
             kiln_shape_str(g.nsp, g.k, sk, sizeof sk));
    *out = op;
    return KILN_OK;
  }
  if (!s)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const float *x_, ulong xo, __global float *y_, ulong yo%s) {\n"
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                           "  const ulong pl = i / %lldUL, o = i %% %lldUL;\n"
                           "  __global const float *x = x_ + xo + pl * %lldUL;\n  long o0",
                           kiln_clop_kname(op, k), want_idx ? ", __global long *ix_, ulong ixo" : "", (long long)total,
                           (long long)g.out_plane, (long long)g.out_plane, (long long)g.in_plane);
  for (int d = 1; d < g.nsp && !s; d++) s = kiln_cl_src_printf(src, ", o%d", d);
  if (!s) s = kiln_cl_src_printf(src, ";\n  { ulong t_ = o;\n");
  for (int d = g.nsp - 1; d >= 0 && !s; d--)
    s = kiln_cl_src_printf(src, "    o%d = (long)(t_ %% %lldUL); t_ /= %lldUL;\n", d, (long long)g.out[d],
                           (long long)g.out[d]);
  if (!s)
    s = kiln_cl_src_printf(src, "  }\n%s",
                           is_max ? (want_idx ? "  float best = -INFINITY; long bi = -1; int found = 0;\n"
                                              : "  float best = -INFINITY; int found = 0;\n")
                                  : "  float sum = 0.0f; long n_in = 0, n_pad = 0;\n");
  for (int d = 0; d < g.nsp && !s; d++) {
    s = kiln_cl_src_printf(src,
                           "  for (long k%d = 0; k%d < %lldL; k%d++) {\n"
                           "    const long p%d = o%d * %lldL - %lldL + k%d * %lldL;\n",
                           d, d, (long long)g.k[d], d, d, d, (long long)g.s[d], (long long)g.pb[d], d,
                           (long long)g.d[d]);
    if (!s && is_max)
      s = kiln_cl_src_printf(src, "    if (p%d < 0 || p%d >= %lldL) continue;\n", d, d, (long long)g.in[d]);
  }
  if (s) return kiln_clop_fail_free(op, s);
  /* the innermost body */
  s = kiln_cl_src_printf(src, "    long off = 0;\n");
  for (int d = 0; d < g.nsp && !s; d++)
    s = kiln_cl_src_printf(src, "    off = off * %lldL + p%d;\n", (long long)g.in[d], d);
  if (!s && is_max) {
    s = kiln_cl_src_printf(src,
                           "    const float v = x[off];\n"
                           "    if (!found || v > best || (isnan(v) && !isnan(best))) {\n"
                           "      found = 1; best = v;\n");
    if (!s && want_idx && col) {
      s = kiln_cl_src_printf(src, "      long co = 0;\n");
      for (int d = g.nsp - 1; d >= 0 && !s; d--)
        s = kiln_cl_src_printf(src, "      co = co * %lldL + p%d;\n", (long long)g.in[d], d);
      if (!s) s = kiln_cl_src_printf(src, "      bi = (long)pl * %lldL + co;\n", (long long)g.in_plane);
    } else if (!s && want_idx) {
      s = kiln_cl_src_printf(src, "      bi = (long)pl * %lldL + off;\n", (long long)g.in_plane);
    }
    if (!s) s = kiln_cl_src_printf(src, "    }\n");
  } else if (!s) {
    s = kiln_cl_src_printf(src, "    bool inside = true, padded = true;\n");
    for (int d = 0; d < g.nsp && !s; d++)
      s = kiln_cl_src_printf(src,
                             "    inside = inside && p%d >= 0 && p%d < %lldL;\n"
                             "    padded = padded && p%d >= -%lldL && p%d < %lldL;\n",
                             d, d, (long long)g.in[d], d, (long long)g.pb[d], d, (long long)(g.in[d] + g.pe[d]));
    if (!s) s = kiln_cl_src_printf(src, "    if (padded) n_pad++;\n    if (inside) { sum += x[off]; n_in++; }\n");
  }
  for (int d = 0; d < g.nsp && !s; d++) s = kiln_cl_src_printf(src, "  }\n");
  if (!s && is_max)
    s = kiln_cl_src_printf(src, "  y_[yo + i] = best;\n%s}\n", want_idx ? "  ix_[ixo + i] = bi;\n" : "");
  else if (!s)
    s = kiln_cl_src_printf(src, "  const long dv = %s;\n  y_[yo + i] = dv ? sum / (float)dv : NAN;\n}\n",
                           include_pad ? "n_pad" : "n_in");
  if (!s) {
    opb a3[] = {IN(0), OUT(0), OUT(1)};
    s = kiln_clop_launch(op, k, (size_t)total, want_idx ? 3 : 2, a3);
  }
  if (s) return kiln_clop_fail_free(op, s);
  char sk[64];
  snprintf(op->desc, sizeof op->desc, "%s %lld planes k%s%s", n->op_type, (long long)g.planes,
           kiln_shape_str(g.nsp, g.k, sk, sizeof sk), want_idx ? " +indices" : "");
  *out = op;
  return KILN_OK;
}

static kiln_status global_pool(const op_ctx *c, kiln_cl_op **out, bool is_max) {
  const kiln_cl_ttype *x = &c->in[0];
  if (!kiln_clop_is_f32(x) || !kiln_clop_is_f32(&c->out[0]) || x->rank < 3) return KILN_OK;
  bool red[KILN_MAX_RANK];
  for (int d = 0; d < x->rank; d++) red[d] = d >= 2;
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  if (!s) s = kiln_clop_reduce_emit(c, op, is_max ? RK_MAX : RK_MEAN, x->rank, x->dims, red);
  if (s) return kiln_clop_fail_free(op, s);
  *out = op;
  return KILN_OK;
}

kiln_status kiln_clop_pool_prepare(const op_ctx *c, kiln_cl_op **op) {
  const char *t = c->n->op_type;
  if (!strcmp(t, "MaxPool")) return window_pool(c, op, true);
  if (!strcmp(t, "AveragePool")) return window_pool(c, op, false);
  if (!strcmp(t, "GlobalMaxPool")) return global_pool(c, op, true);
  return global_pool(c, op, false);
}
