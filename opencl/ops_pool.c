/* opencl/ops_pool: MaxPool (dilations, ceil_mode, storage_order, the
 * optional Indices output), AveragePool (count_include_pad, ceil_mode) —
 * one work-item per output element, window loops with literal bounds — and
 * GlobalAveragePool / GlobalMaxPool as reductions over the spatial dims.
 * float32; geometry and NaN rules of reference/ops_nn.c. */
#include <stdio.h>
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
