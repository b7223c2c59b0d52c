/* reference/ops_nn: scalar kernels (see reference/ops.h) for the pooling,
 * normalization and softmax families: MaxPool, AveragePool, LpPool, the
 * Global*Pool ops, MaxRoiPool, MaxUnpool, BatchNormalization,
 * InstanceNormalization, LayerNormalization, LpNormalization, LRN,
 * MeanVarianceNormalization, Softmax, LogSoftmax and Hardmax, opsets 7-17.
 *
 * Every kernel reads elements as double (kiln_get_f), accumulates in double
 * and writes through kiln_set_f: plain loops over dense row-major tensors.
 * Each run function first repeats its op's static check, so a kernel never
 * trusts a node that skipped kiln_ref_check_node. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

/* ------------------------------------------------------------------------ */
/* Shared helpers                                                            */

#define F3 (KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_F16))
#define F4 (F3 | KILN_T(KILN_BF16))

/* Formats a tensor's shape into a caller buffer. */
#define SHP(t, buf) kiln_shape_str((t)->rank, (t)->dims, (buf), (int)sizeof(buf))

/* Largest kernel/stride/dilation value and pad accepted by the pooling ops:
 * keeps every window computation far from int64 overflow. */
#define POOL_MAX_K ((int64_t)1 << 31)
#define POOL_MAX_PAD ((int64_t)1 << 40)

static const char *attr_type_word(kiln_attr_type t) {
  switch (t) {
  case KILN_ATTR_FLOAT: return "float";
  case KILN_ATTR_INT: return "int";
  case KILN_ATTR_STRING: return "string";
  case KILN_ATTR_TENSOR: return "tensor";
  case KILN_ATTR_FLOATS: return "floats";
  case KILN_ATTR_INTS: return "ints";
  case KILN_ATTR_STRINGS: return "strings";
  default: return "another type";
  }
}

/* Checks the types of the node's attributes against spec, a space-separated
 * list of name:t with t one of i (int), f (float, an int is accepted too),
 * s (string), I (ints). Names not in spec are left to the registry. */
static kiln_status attr_types(const kiln_node *n, const char *spec) {
  for (int a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    size_t len = strlen(at->name);
    char want = 0;
    for (const char *p = spec; *p;) {
      while (*p == ' ') p++;
      const char *colon = strchr(p, ':');
      if (!colon || !colon[1]) break;
      if ((size_t)(colon - p) == len && !strncmp(p, at->name, len)) {
        want = colon[1];
        break;
      }
      p = colon + 2;
    }
    if (!want) continue;
    bool ok = false;
    const char *wname = "";
    switch (want) {
    case 'i': ok = at->type == KILN_ATTR_INT; wname = "int"; break;
    case 'f': ok = at->type == KILN_ATTR_FLOAT || at->type == KILN_ATTR_INT; wname = "float"; break;
    case 's': ok = at->type == KILN_ATTR_STRING; wname = "string"; break;
    case 'I': ok = at->type == KILN_ATTR_INTS; wname = "ints"; break;
    default: break;
    }
    if (!ok)
      return kiln_fail(KILN_E_MODEL, "attribute '%s' has type %s, %s expected", at->name, attr_type_word(at->type),
                       wname);
  }
  return KILN_OK;
}

/* Fails unless t's dtype is in mask. */
static kiln_status want_type(const kiln_tensor *t, uint32_t mask, const char *what, int opset) {
  if ((unsigned)t->dtype < 32 && (mask & KILN_T(t->dtype))) return KILN_OK;
  return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "%s has data type %s, not accepted by this operator at opset %d", what,
                   kiln_dtype_name(t->dtype), opset);
}

/* Static form of want_type: fails when input 0's declared type is known and
 * not in mask (the table's mask is the union over opsets; this refines it). */
static kiln_status decl_type(const kiln_graph *g, const kiln_node *n, uint32_t mask) {
  if (!g || n->n_in < 1 || n->in[0] < 0 || n->in[0] >= g->n_values) return KILN_OK;
  const kiln_type *ty = &g->values[n->in[0]].type;
  if (ty->kind != KILN_TYPE_TENSOR || ty->dtype == KILN_UNDEFINED) return KILN_OK;
  if ((unsigned)ty->dtype < 32 && (mask & KILN_T(ty->dtype))) return KILN_OK;
  return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "input type %s is not accepted by %s at opset %d",
                   kiln_dtype_name(ty->dtype), n->op_type, n->opset);
}

/* Fails unless the op exists at the node's opset. */
static kiln_status need_opset(const kiln_node *n, int since) {
  if (n->opset >= since) return KILN_OK;
  return kiln_fail(KILN_E_MODEL, "%s is defined from opset %d; the model imports opset %d", n->op_type, since,
                   n->opset);
}

/* Product of t's dims [from, to). kiln_shape_numel bounds every prefix
 * product but stops checking after a zero dim, so a product not starting at
 * dim 0 is taken as 0 for an empty tensor (it could overflow otherwise). */
static int64_t dims_prod(const kiln_tensor *t, int from, int to) {
  if (from > 0 && t->numel == 0) return 0;
  int64_t p = 1;
  for (int i = from; i < to; i++) p *= t->dims[i];
  return p;
}

/* Allocates out[k] like x (same dtype and shape). */
static kiln_status alloc_like(const kiln_op_call *c, int k, const kiln_tensor *x) {
  return kiln_tensor_alloc(&c->out[k], x->dtype, x->rank, x->dims);
}

/* Fails unless p is a 1-D tensor of n elements. */
static kiln_status need_vec(const kiln_tensor *p, int64_t n, const char *what, const kiln_tensor *x) {
  char b1[160], b2[160];
  if (p->rank != 1 || p->dims[0] != n)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has shape %s; [%lld] expected for input of shape %s", what,
                     SHP(p, b1), (long long)n, SHP(x, b2));
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Pooling geometry                                                          */

typedef struct pool_geo {
  int nsp;                        /* number of spatial dims */
  int64_t in[KILN_MAX_RANK];      /* input spatial dims */
  int64_t out[KILN_MAX_RANK];     /* output spatial dims */
  int64_t k[KILN_MAX_RANK];       /* kernel */
  int64_t s[KILN_MAX_RANK];       /* strides */
  int64_t d[KILN_MAX_RANK];       /* dilations */
  int64_t pb[KILN_MAX_RANK];      /* pad at the beginning */
  int64_t pe[KILN_MAX_RANK];      /* pad at the end */
  int64_t in_plane, out_plane, k_count;
} pool_geo;

enum {
  POOL_DILATIONS = 1, /* honours dilations */
  POOL_DIL_ONE = 2,   /* accepts dilations only when all 1 */
  POOL_CEIL = 4       /* honours ceil_mode */
};

/* Reads an optional INTS attribute of exactly n values, each in [lo, hi],
 * into v (def when absent). */
static kiln_status pool_ints(const kiln_node *n, const char *name, int count, int64_t lo, int64_t hi, int64_t def,
                             int64_t *v) {
  size_t cnt;
  const int64_t *a = kiln_attr_ints(n, name, &cnt);
  if (!a) {
    for (int i = 0; i < count; i++) v[i] = def;
    return KILN_OK;
  }
  if (cnt != (size_t)count)
    return kiln_fail(KILN_E_MODEL, "attribute '%s' has %zu values, %d expected", name, cnt, count);
  for (int i = 0; i < count; i++) {
    if (a[i] < lo || a[i] > hi)
      return kiln_fail(a[i] < lo ? KILN_E_MODEL : KILN_E_UNSUPPORTED_ATTR,
                       "attribute '%s' value %lld at position %d is outside [%lld, %lld]", name, (long long)a[i], i,
                       (long long)lo, (long long)hi);
    v[i] = a[i];
  }
  return KILN_OK;
}

/* Static attribute check shared by the windowed pools (no shapes needed). */
static kiln_status pool_check_attrs(const kiln_node *n, int flags) {
  kiln_status s = attr_types(n, "kernel_shape:I strides:I pads:I dilations:I auto_pad:s ceil_mode:i "
                                "count_include_pad:i storage_order:i p:f");
  if (s) return s;
  size_t nk;
  const int64_t *k = kiln_attr_ints(n, "kernel_shape", &nk);
  if (!k) return kiln_fail(KILN_E_MODEL, "required attribute 'kernel_shape' is missing");
  if (nk < 1 || nk > KILN_MAX_RANK - 2)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "kernel_shape has %zu values; 1 to %d spatial dims supported", nk,
                     KILN_MAX_RANK - 2);
  int64_t tmp[KILN_MAX_RANK * 2];
  if ((s = pool_ints(n, "kernel_shape", (int)nk, 1, POOL_MAX_K, 1, tmp))) return s;
  if ((s = pool_ints(n, "strides", (int)nk, 1, POOL_MAX_K, 1, tmp))) return s;
  if ((s = pool_ints(n, "pads", 2 * (int)nk, 0, POOL_MAX_PAD, 0, tmp))) return s;
  if (flags & (POOL_DILATIONS | POOL_DIL_ONE)) {
    if ((s = pool_ints(n, "dilations", (int)nk, 1, POOL_MAX_K, 1, tmp))) return s;
    if (flags & POOL_DIL_ONE)
      for (size_t i = 0; i < nk; i++)
        if (tmp[i] != 1)
          return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                           "dilations %lld at position %zu: only dilations of 1 are supported for %s",
                           (long long)tmp[i], i, n->op_type);
  }
  const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
  if (*ap && strcmp(ap, "NOTSET") && strcmp(ap, "VALID") && strcmp(ap, "SAME_UPPER") && strcmp(ap, "SAME_LOWER"))
    return kiln_fail(KILN_E_MODEL, "auto_pad '%s' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER", ap);
  if (*ap && strcmp(ap, "NOTSET")) {
    size_t np;
    const int64_t *p = kiln_attr_ints(n, "pads", &np);
    for (size_t i = 0; p && i < np; i++)
      if (p[i])
        return kiln_fail(KILN_E_MODEL, "explicit non-zero pads cannot be combined with auto_pad '%s'", ap);
  }
  if (flags & POOL_CEIL) {
    int64_t cm = kiln_attr_int(n, "ceil_mode", 0);
    if (cm != 0 && cm != 1) return kiln_fail(KILN_E_MODEL, "ceil_mode %lld is not 0 or 1", (long long)cm);
  }
  return KILN_OK;
}

/* Computes the window geometry of a pooling op over input x (N x C x D...).
 * Output size per spatial dim, with ek = (k-1)*d + 1 the dilated extent:
 *   NOTSET/VALID: floor or (ceil_mode) ceil of (in + pb + pe - ek) / s, + 1;
 *     in ceil mode a last window that would start inside the end padding
 *     (no input element under its start) is dropped, as PyTorch does;
 *   SAME_UPPER/SAME_LOWER: ceil(in / s), total pad (out-1)*s + ek - in split
 *     with the odd element at the end (UPPER) or the beginning (LOWER); a
 *     negative total (a stride over the dilated kernel, e.g. in 11, k 1,
 *     s 4) is 0, as Conv's SAME is in kiln, onnxruntime and the ONNX
 *     reference evaluator. For pooling those two disagree there:
 *     onnxruntime 1.32 refuses a MaxPool or AveragePool node ("padding
 *     values must be non-negative") but starts the windows inside for
 *     LpPool and for MaxPool with Indices, as onnx 1.23's evaluator does for
 *     MaxPool (with SAME_LOWER, k 1, s 2, in 11 it returns 5 of the 6
 *     outputs its own shape rule gives; AveragePool fails there); the spec
 *     says "pad the input", which a negative amount does not. */
static kiln_status pool_geometry(const kiln_node *n, const kiln_tensor *x, int flags, pool_geo *g) {
  kiln_status s = pool_check_attrs(n, flags);
  if (s) return s;
  char b[160];
  size_t nk;
  kiln_attr_ints(n, "kernel_shape", &nk);
  if (x->rank != (int)nk + 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "input shape %s must be N x C x D1 ... Dn with rank %zu to match kernel_shape of %zu values",
                     SHP(x, b), nk + 2, nk);
  memset(g, 0, sizeof *g);
  g->nsp = (int)nk;
  int64_t pads[KILN_MAX_RANK * 2];
  pool_ints(n, "kernel_shape", g->nsp, 1, POOL_MAX_K, 1, g->k);
  pool_ints(n, "strides", g->nsp, 1, POOL_MAX_K, 1, g->s);
  pool_ints(n, "pads", 2 * g->nsp, 0, POOL_MAX_PAD, 0, pads);
  if (flags & POOL_DILATIONS) pool_ints(n, "dilations", g->nsp, 1, POOL_MAX_K, 1, g->d);
  else
    for (int i = 0; i < g->nsp; i++) g->d[i] = 1;
  const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
  bool same = !strncmp(ap, "SAME_", 5), lower = !strcmp(ap, "SAME_LOWER");
  bool ceil_mode = (flags & POOL_CEIL) && kiln_attr_int(n, "ceil_mode", 0) == 1;
  g->in_plane = g->out_plane = g->k_count = 1;
  for (int i = 0; i < g->nsp; i++) {
    int64_t in = x->dims[2 + i], ek = (g->k[i] - 1) * g->d[i] + 1, st = g->s[i], out;
    g->in[i] = in;
    if (in > KILN_MAX_NUMEL / g->in_plane)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "input shape %s has more than %lld elements per plane", SHP(x, b),
                       (long long)KILN_MAX_NUMEL);
    if (in < 1)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "input shape %s has an empty spatial dimension", SHP(x, b));
    if (same) {
      out = (in + st - 1) / st;
      int64_t total = (out - 1) * st + ek - in;
      if (total < 0) total = 0;
      g->pb[i] = lower ? total - total / 2 : total / 2;
      g->pe[i] = total - g->pb[i];
    } else {
      if (!strcmp(ap, "VALID")) g->pb[i] = g->pe[i] = 0;
      else {
        g->pb[i] = pads[i];
        g->pe[i] = pads[g->nsp + i];
        if (g->pb[i] >= ek || g->pe[i] >= ek)
          return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                           "pads %lld/%lld on spatial dim %d must be smaller than the (dilated) kernel extent %lld",
                           (long long)g->pb[i], (long long)g->pe[i], i, (long long)ek);
      }
      int64_t span = in + g->pb[i] + g->pe[i] - ek;
      if (span < 0)
        return kiln_fail(KILN_E_MISMATCH_SHAPE,
                         "kernel extent %lld on spatial dim %d exceeds the padded input size %lld (input shape %s)",
                         (long long)ek, i, (long long)(in + g->pb[i] + g->pe[i]), SHP(x, b));
      out = span / st + 1;
      if (ceil_mode && span % st) {
        out++;
        if ((out - 1) * st >= in + g->pb[i]) out--;
      }
    }
    g->out[i] = out;
    g->in_plane *= in;
    if (out > KILN_MAX_NUMEL / g->out_plane)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "the pooled output for input shape %s has more than %lld elements",
                       SHP(x, b), (long long)KILN_MAX_NUMEL);
    g->out_plane *= out;
    if (g->k[i] > KILN_MAX_NUMEL / g->k_count)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "kernel_shape has more than %lld elements", (long long)KILN_MAX_NUMEL);
    g->k_count *= g->k[i];
  }
  return KILN_OK;
}

/* Allocates out[k] with shape N x C x out... and the given dtype. */
static kiln_status pool_alloc(const kiln_op_call *c, int k, const kiln_tensor *x, const pool_geo *g,
                              kiln_dtype dt) {
  int64_t dims[KILN_MAX_RANK];
  dims[0] = x->dims[0];
  dims[1] = x->dims[1];
  for (int i = 0; i < g->nsp; i++) dims[2 + i] = g->out[i];
  return kiln_tensor_alloc(&c->out[k], dt, x->rank, dims);
}

/* For output position oi and kernel offset kk: the input coordinate of
 * each spatial dim in pos. Returns true when all lie inside the input. */
static bool pool_pos(const pool_geo *g, const int64_t *oi, int64_t kk, int64_t *pos) {
  int64_t ki[KILN_MAX_RANK];
  kiln_unravel(kk, g->nsp, g->k, ki);
  bool inside = true;
  for (int i = 0; i < g->nsp; i++) {
    pos[i] = oi[i] * g->s[i] - g->pb[i] + ki[i] * g->d[i];
    if (pos[i] < 0 || pos[i] >= g->in[i]) inside = false;
  }
  return inside;
}

/* Row-major offset of pos inside one spatial plane. */
static int64_t plane_off(const pool_geo *g, const int64_t *pos) {
  int64_t off = 0;
  for (int i = 0; i < g->nsp; i++) off = off * g->in[i] + pos[i];
  return off;
}

/* ------------------------------------------------------------------------ */
/* MaxPool                                                                   */

static uint32_t maxpool_types(int opset) {
  return opset >= 12 ? F3 | KILN_T(KILN_I8) | KILN_T(KILN_U8) : F3;
}

static kiln_status check_maxpool(const kiln_graph *gr, const kiln_node *n) {
  kiln_status s = pool_check_attrs(n, POOL_DILATIONS | POOL_CEIL);
  if (!s) s = decl_type(gr, n, maxpool_types(n->opset));
  if (s) return s;
  int64_t so = kiln_attr_int(n, "storage_order", 0);
  if (so != 0 && so != 1) return kiln_fail(KILN_E_MODEL, "storage_order %lld is not 0 or 1", (long long)so);
  return KILN_OK;
}

/* Max over each window; padding never wins. NaN propagates (the first NaN
 * of a window is its max); ties keep the first element in row-major window
 * order. Indices: flat index into X (N, C and spatial), the spatial part
 * row-major (storage_order 0) or column-major (storage_order 1). */
static kiln_status run_maxpool(const kiln_op_call *c) {
  kiln_status s = check_maxpool(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  if ((s = want_type(x, maxpool_types(c->opset), "input X", c->opset))) return s;
  pool_geo g;
  if ((s = pool_geometry(c->node, x, POOL_DILATIONS | POOL_CEIL, &g))) return s;
  bool col = kiln_attr_int(c->node, "storage_order", 0) == 1;
  bool want_idx = kiln_opc_out_wanted(c, 1);
  if ((s = pool_alloc(c, 0, x, &g, x->dtype))) return s;
  if (want_idx && (s = pool_alloc(c, 1, x, &g, KILN_I64))) return s;
  int64_t planes = dims_prod(x, 0, 2);
  int64_t oi[KILN_MAX_RANK], pos[KILN_MAX_RANK];
  for (int64_t p = 0; p < planes; p++) {
    for (int64_t o = 0; o < g.out_plane; o++) {
      kiln_unravel(o, g.nsp, g.out, oi);
      double best = -INFINITY;
      int64_t best_i = -1;
      bool found = false;
      for (int64_t kk = 0; kk < g.k_count; kk++) {
        if (!pool_pos(&g, oi, kk, pos)) continue;
        int64_t off = plane_off(&g, pos);
        double v = kiln_get_f(x, p * g.in_plane + off);
        if (found && !(v > best) && !(isnan(v) && !isnan(best))) continue;
        found = true;
        best = v;
        if (col) {
          off = 0;
          for (int i = g.nsp - 1; i >= 0; i--) off = off * g.in[i] + pos[i];
        }
        best_i = p * g.in_plane + off;
      }
      kiln_set_f(&c->out[0], p * g.out_plane + o, best);
      if (want_idx) kiln_set_i(&c->out[1], p * g.out_plane + o, best_i);
    }
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* AveragePool                                                               */

static kiln_status check_averagepool(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  kiln_status s = pool_check_attrs(n, POOL_DIL_ONE | POOL_CEIL);
  if (s) return s;
  int64_t cip = kiln_attr_int(n, "count_include_pad", 0);
  if (cip != 0 && cip != 1) return kiln_fail(KILN_E_MODEL, "count_include_pad %lld is not 0 or 1", (long long)cip);
  return KILN_OK;
}

/* Mean over each window. count_include_pad=0 divides by the number of input
 * elements under the window; 1 by the number of window positions inside the
 * padded input [-pad_begin, in + pad_end) (a ceil-mode window reaching past
 * the end padding is clipped there, as in PyTorch and onnxruntime). */
static kiln_status run_averagepool(const kiln_op_call *c) {
  kiln_status s = check_averagepool(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  if ((s = want_type(x, F3, "input X", c->opset))) return s;
  pool_geo g;
  if ((s = pool_geometry(c->node, x, POOL_DIL_ONE | POOL_CEIL, &g))) return s;
  bool include_pad = kiln_attr_int(c->node, "count_include_pad", 0) == 1;
  if ((s = pool_alloc(c, 0, x, &g, x->dtype))) return s;
  int64_t planes = dims_prod(x, 0, 2);
  int64_t oi[KILN_MAX_RANK], pos[KILN_MAX_RANK];
  for (int64_t p = 0; p < planes; p++) {
    for (int64_t o = 0; o < g.out_plane; o++) {
      kiln_unravel(o, g.nsp, g.out, oi);
      double sum = 0;
      int64_t n_in = 0, n_pad = 0;
      for (int64_t kk = 0; kk < g.k_count; kk++) {
        bool inside = pool_pos(&g, oi, kk, pos);
        bool in_padded = true;
        for (int i = 0; i < g.nsp; i++)
          if (pos[i] < -g.pb[i] || pos[i] >= g.in[i] + g.pe[i]) in_padded = false;
        if (in_padded) n_pad++;
        if (!inside) continue;
        sum += kiln_get_f(x, p * g.in_plane + plane_off(&g, pos));
        n_in++;
      }
      int64_t div = include_pad ? n_pad : n_in;
      kiln_set_f(&c->out[0], p * g.out_plane + o, div ? sum / (double)div : NAN);
    }
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* LpPool                                                                    */

static kiln_status check_lppool(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  kiln_status s = pool_check_attrs(n, 0);
  if (s) return s;
  double p = kiln_attr_float(n, "p", 2.0f);
  if (!(p > 0) || isinf(p)) return kiln_fail(KILN_E_MODEL, "p %g must be a positive finite number", p);
  return KILN_OK;
}

/* (sum over the window of |x|^p)^(1/p); padding contributes 0. */
static kiln_status run_lppool(const kiln_op_call *c) {
  kiln_status s = check_lppool(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  if ((s = want_type(x, F3, "input X", c->opset))) return s;
  pool_geo g;
  if ((s = pool_geometry(c->node, x, 0, &g))) return s;
  double pw = kiln_attr_float(c->node, "p", 2.0f);
  if ((s = pool_alloc(c, 0, x, &g, x->dtype))) return s;
  int64_t planes = dims_prod(x, 0, 2);
  int64_t oi[KILN_MAX_RANK], pos[KILN_MAX_RANK];
  for (int64_t p = 0; p < planes; p++) {
    for (int64_t o = 0; o < g.out_plane; o++) {
      kiln_unravel(o, g.nsp, g.out, oi);
      double sum = 0;
      for (int64_t kk = 0; kk < g.k_count; kk++) {
        if (!pool_pos(&g, oi, kk, pos)) continue;
        sum += pow(fabs(kiln_get_f(x, p * g.in_plane + plane_off(&g, pos))), pw);
      }
      kiln_set_f(&c->out[0], p * g.out_plane + o, pow(sum, 1.0 / pw));
    }
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* GlobalAveragePool, GlobalMaxPool, GlobalLpPool                            */

enum { GLOBAL_AVG, GLOBAL_MAX, GLOBAL_LP };

static kiln_status check_globallppool(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  kiln_status s = attr_types(n, "p:f");
  if (s) return s;
  double p = kiln_attr_float(n, "p", 2.0f);
  if (!(p > 0) || isinf(p)) return kiln_fail(KILN_E_MODEL, "p %g must be a positive finite number", p);
  return KILN_OK;
}

/* Reduces every (n, c) plane over all spatial dims; the output keeps the
 * rank with spatial dims 1. */
static kiln_status run_global(const kiln_op_call *c, int kind) {
  kiln_status s = kind == GLOBAL_LP ? check_globallppool(c->graph, c->node) : KILN_OK;
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char b[160];
  if ((s = want_type(x, F3, "input X", c->opset))) return s;
  if (x->rank < 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input shape %s must be N x C x D1 ... Dn (rank >= 3)", SHP(x, b));
  int64_t dims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, x->rank, dims))) return s;
  double pw = kind == GLOBAL_LP ? kiln_attr_float(c->node, "p", 2.0f) : 2.0;
  int64_t planes = dims_prod(x, 0, 2), sp = dims_prod(x, 2, x->rank);
  for (int64_t p = 0; p < planes; p++) {
    double acc = kind == GLOBAL_MAX ? -INFINITY : 0;
    for (int64_t i = 0; i < sp; i++) {
      double v = kiln_get_f(x, p * sp + i);
      if (kind == GLOBAL_MAX) {
        if (v > acc || (isnan(v) && !isnan(acc))) acc = v;
      } else if (kind == GLOBAL_AVG) {
        acc += v;
      } else {
        acc += pow(fabs(v), pw);
      }
    }
    if (kind == GLOBAL_AVG) acc = sp ? acc / (double)sp : NAN;
    if (kind == GLOBAL_LP) acc = pow(acc, 1.0 / pw);
    kiln_set_f(&c->out[0], p, acc);
  }
  return KILN_OK;
}

static kiln_status run_globalaveragepool(const kiln_op_call *c) { return run_global(c, GLOBAL_AVG); }
static kiln_status run_globalmaxpool(const kiln_op_call *c) { return run_global(c, GLOBAL_MAX); }
static kiln_status run_globallppool(const kiln_op_call *c) { return run_global(c, GLOBAL_LP); }

/* ------------------------------------------------------------------------ */
/* MaxRoiPool                                                                */

static kiln_status check_maxroipool(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  kiln_status s = attr_types(n, "pooled_shape:I spatial_scale:f");
  if (s) return s;
  size_t np;
  const int64_t *ps = kiln_attr_ints(n, "pooled_shape", &np);
  if (!ps) return kiln_fail(KILN_E_MODEL, "required attribute 'pooled_shape' is missing");
  if (np != 2) return kiln_fail(KILN_E_MODEL, "pooled_shape has %zu values, 2 expected", np);
  if (ps[0] < 1 || ps[1] < 1 || ps[0] > POOL_MAX_K || ps[1] > POOL_MAX_K)
    return kiln_fail(KILN_E_MODEL, "pooled_shape [%lld,%lld] must be positive", (long long)ps[0],
                     (long long)ps[1]);
  double sc = kiln_attr_float(n, "spatial_scale", 1.0f);
  if (!isfinite(sc)) return kiln_fail(KILN_E_MODEL, "spatial_scale %g is not finite", sc);
  return KILN_OK;
}

/* Converts a ROI coordinate, clamped far outside any tensor extent so the
 * integer arithmetic on it cannot overflow. */
static int64_t roi_coord(double v) {
  const double lim = (double)((int64_t)1 << 40);
  if (isnan(v)) return 0;
  if (v > lim) return (int64_t)lim;
  if (v < -lim) return (int64_t)-lim;
  return (int64_t)v;
}

/* Caffe2/onnxruntime RoIPool: ROI corners are rounded after scaling, the
 * ROI is at least 1x1, bin (ph, pw) covers rows
 * [floor(ph*bh), ceil((ph+1)*bh)) offset by the ROI start and clipped to the
 * input; an empty bin gives 0. */
static kiln_status run_maxroipool(const kiln_op_call *c) {
  kiln_status s = check_maxroipool(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (!s) s = kiln_op_need(c, 1);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *r = c->in[1];
  char b1[160], b2[160];
  if ((s = want_type(x, F3, "input X", c->opset))) return s;
  if ((s = want_type(r, F3, "input rois", c->opset))) return s;
  if (x->rank != 4)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input X has shape %s; N x C x H x W expected", SHP(x, b1));
  if (r->rank != 2 || r->dims[1] != 5)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "rois has shape %s; [num_rois,5] expected (X is %s)", SHP(r, b1),
                     SHP(x, b2));
  size_t np;
  const int64_t *ps = kiln_attr_ints(c->node, "pooled_shape", &np);
  double scale = kiln_attr_float(c->node, "spatial_scale", 1.0f);
  int64_t N = x->dims[0], C = x->dims[1], H = x->dims[2], W = x->dims[3], PH = ps[0], PW = ps[1];
  int64_t dims[4] = {r->dims[0], C, PH, PW};
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, 4, dims))) return s;
  for (int64_t ri = 0; ri < r->dims[0]; ri++) {
    double bd = kiln_get_f(r, ri * 5);
    if (!(bd >= 0 && bd < (double)N)) {
      kiln_tensor_release(&c->out[0]);
      return kiln_fail(KILN_E_INVALID_VALUE, "roi %lld has batch index %g, outside [0, %lld) for X of shape %s",
                       (long long)ri, bd, (long long)N, SHP(x, b1));
    }
    int64_t bi = (int64_t)bd;
    int64_t ws = roi_coord(round(kiln_get_f(r, ri * 5 + 1) * scale));
    int64_t hs = roi_coord(round(kiln_get_f(r, ri * 5 + 2) * scale));
    int64_t we = roi_coord(round(kiln_get_f(r, ri * 5 + 3) * scale));
    int64_t he = roi_coord(round(kiln_get_f(r, ri * 5 + 4) * scale));
    int64_t rh = he - hs + 1 > 1 ? he - hs + 1 : 1, rw = we - ws + 1 > 1 ? we - ws + 1 : 1;
    double bh = (double)rh / (double)PH, bw = (double)rw / (double)PW;
    for (int64_t ch = 0; ch < C; ch++) {
      int64_t base = (bi * C + ch) * H * W;
      for (int64_t ph = 0; ph < PH; ph++) {
        for (int64_t pw = 0; pw < PW; pw++) {
          /* bin offsets lie within [0, roi size], at most 2^41 + 1 */
          int64_t h0 = (int64_t)floor((double)ph * bh) + hs, h1 = (int64_t)ceil((double)(ph + 1) * bh) + hs;
          int64_t w0 = (int64_t)floor((double)pw * bw) + ws, w1 = (int64_t)ceil((double)(pw + 1) * bw) + ws;
          h0 = h0 < 0 ? 0 : h0 > H ? H : h0;
          h1 = h1 < 0 ? 0 : h1 > H ? H : h1;
          w0 = w0 < 0 ? 0 : w0 > W ? W : w0;
          w1 = w1 < 0 ? 0 : w1 > W ? W : w1;
          double m = 0;
          if (h1 > h0 && w1 > w0) {
            m = -INFINITY;
            for (int64_t h = h0; h < h1; h++)
              for (int64_t w = w0; w < w1; w++) {
                double v = kiln_get_f(x, base + h * W + w);
                if (v > m || (isnan(v) && !isnan(m))) m = v;
              }
          }
          kiln_set_f(&c->out[0], ((ri * C + ch) * PH + ph) * PW + pw, m);
        }
      }
    }
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* MaxUnpool                                                                 */

static kiln_status check_maxunpool(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  kiln_status s = need_opset(n, 9);
  if (!s) s = pool_check_attrs(n, 0);
  if (s) return s;
  if (kiln_node_attr(n, "auto_pad") || kiln_node_attr(n, "ceil_mode") || kiln_node_attr(n, "dilations"))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "MaxUnpool takes no auto_pad, ceil_mode or dilations");
  return KILN_OK;
}

/* Y is zero except for the values of X scattered to the flat positions I
 * names (MaxPool's Indices) within the inferred unpooled shape
 * N x C x ((in-1)*stride + kernel - pad_begin - pad_end). An output_shape
 * input, as in onnx.reference and the ONNX node test, re-frames that block:
 * the output has output_shape (each dim at least the inferred one) with the
 * inferred block at its origin and zeros elsewhere. (onnxruntime instead
 * indexes output_shape directly; onnx/onnx#2398.) */
static kiln_status run_maxunpool(const kiln_op_call *c) {
  kiln_status s = check_maxunpool(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (!s) s = kiln_op_need(c, 1);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *ix = c->in[1];
  char b1[160], b2[160];
  if ((s = want_type(x, F3, "input X", c->opset))) return s;
  if (ix->dtype != KILN_I64)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input I has data type %s; int64 expected", kiln_dtype_name(ix->dtype));
  if (ix->rank != x->rank || memcmp(ix->dims, x->dims, sizeof(int64_t) * (size_t)x->rank))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input I has shape %s; it must match X's shape %s", SHP(ix, b1),
                     SHP(x, b2));
  size_t nk;
  kiln_attr_ints(c->node, "kernel_shape", &nk);
  if (x->rank != (int)nk + 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input shape %s must have rank %zu to match kernel_shape", SHP(x, b1),
                     nk + 2);
  int nsp = (int)nk;
  int64_t k[KILN_MAX_RANK], st[KILN_MAX_RANK], pads[2 * KILN_MAX_RANK], inf[KILN_MAX_RANK], dims[KILN_MAX_RANK];
  pool_ints(c->node, "kernel_shape", nsp, 1, POOL_MAX_K, 1, k);
  pool_ints(c->node, "strides", nsp, 1, POOL_MAX_K, 1, st);
  pool_ints(c->node, "pads", 2 * nsp, 0, POOL_MAX_PAD, 0, pads);
  inf[0] = x->dims[0];
  inf[1] = x->dims[1];
  for (int i = 0; i < nsp; i++) {
    if (x->dims[2 + i] - 1 > KILN_MAX_NUMEL / st[i])
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "unpooling input shape %s with stride %lld is too large", SHP(x, b1),
                       (long long)st[i]);
    inf[2 + i] = (x->dims[2 + i] - 1) * st[i] + k[i] - pads[i] - pads[nsp + i];
    if (inf[2 + i] < 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE,
                       "output spatial dim %d would be %lld for input shape %s with these kernel/strides/pads", i,
                       (long long)inf[2 + i], SHP(x, b1));
  }
  int64_t inf_numel;
  if ((s = kiln_shape_numel(x->rank, inf, &inf_numel))) return s;
  memcpy(dims, inf, sizeof(int64_t) * (size_t)x->rank);
  if (c->n_in > 2 && c->in[2]) {
    int n = 0;
    if ((s = kiln_op_ints(c, 2, dims, KILN_MAX_RANK, &n))) return s;
    bool ok = n == x->rank;
    for (int i = 0; ok && i < n; i++) ok = i < 2 ? dims[i] == inf[i] : dims[i] >= inf[i];
    if (!ok)
      return kiln_fail(KILN_E_MISMATCH_SHAPE,
                       "output_shape %s must have rank %d, X's N and C and spatial dims no smaller than the "
                       "unpooled shape %s",
                       kiln_shape_str(n, dims, b1, sizeof b1), x->rank, kiln_shape_str(x->rank, inf, b2, sizeof b2));
  }
  if ((s = kiln_tensor_alloc(&c->out[0], x->dtype, x->rank, dims))) return s;
  kiln_tensor *y = &c->out[0];
  int64_t idx[KILN_MAX_RANK];
  for (int64_t j = 0; j < x->numel; j++) {
    int64_t t = kiln_get_i(ix, j);
    if (t < 0 || t >= inf_numel) {
      kiln_tensor_release(y);
      return kiln_fail(KILN_E_INVALID_VALUE, "index %lld at position %lld of I is outside [0, %lld) for the unpooled "
                       "shape %s", (long long)t, (long long)j, (long long)inf_numel,
                       kiln_shape_str(x->rank, inf, b1, sizeof b1));
    }
    kiln_unravel(t, x->rank, inf, idx);
    int64_t off = 0;
    for (int d = 0; d < x->rank; d++) off = off * dims[d] + idx[d];
    kiln_set_f(y, off, kiln_get_f(x, j));
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* BatchNormalization                                                        */

static kiln_status check_batchnorm(const kiln_graph *gr, const kiln_node *n) {
  kiln_status s = attr_types(n, "epsilon:f is_test:i momentum:f spatial:i training_mode:i");
  if (!s) s = decl_type(gr, n, n->opset >= 14 ? F4 : F3);
  if (s) return s;
  if (kiln_node_attr(n, "is_test") && n->opset >= 7)
    return kiln_fail(KILN_E_MODEL, "attribute 'is_test' was removed in opset 7; the model imports opset %d",
                     n->opset);
  if (n->opset < 7 && kiln_attr_int(n, "is_test", 0) == 0)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                     "is_test=0 (training mode, the default before opset 7) is not supported; only inference is");
  int64_t tm = kiln_attr_int(n, "training_mode", 0);
  if (tm != 0 && tm != 1) return kiln_fail(KILN_E_MODEL, "training_mode %lld is not 0 or 1", (long long)tm);
  if (kiln_node_attr(n, "training_mode") && n->opset < 14)
    return kiln_fail(KILN_E_MODEL, "attribute 'training_mode' exists from opset 14; the model imports opset %d",
                     n->opset);
  if (kiln_node_attr(n, "spatial")) {
    if (n->opset >= 9)
      return kiln_fail(KILN_E_MODEL, "attribute 'spatial' was removed in opset 9; the model imports opset %d",
                       n->opset);
    int64_t sp = kiln_attr_int(n, "spatial", 1);
    if (sp != 0 && sp != 1) return kiln_fail(KILN_E_MODEL, "spatial %lld is not 0 or 1", (long long)sp);
  }
  for (int k = 1; k < n->n_out; k++) {
    if (n->out[k] < 0) continue;
    if (tm && k > 2)
      return kiln_fail(KILN_E_MODEL, "output %d: BatchNormalization-%d has 3 outputs (Y, running_mean, running_var)", k,
                       n->opset);
    if (!tm)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                       "output %d (a running or saved mean/variance) is produced only in training mode, which %s", k,
                       n->opset >= 14 ? "training_mode=1 selects (it is 0 here)"
                                      : "before opset 14 is not supported; only inference (output Y alone) is");
  }
  return KILN_OK;
}

/* Training mode (training_mode=1, opset 14+): per channel, the batch's mean
 * and (population) variance over N and the spatial dims normalise X, and
 * the running statistics are updated from them:
 *   running_mean = input_mean * momentum + mean * (1 - momentum),
 *   running_var = input_var * momentum + var * (1 - momentum). */
static kiln_status batchnorm_training(const kiln_op_call *c, double eps) {
  const kiln_tensor *x = c->in[0];
  double mom = kiln_attr_float(c->node, "momentum", 0.9f);
  int64_t N = x->dims[0], C = x->dims[1], sp = dims_prod(x, 2, x->rank), cnt = N * sp;
  kiln_status s = alloc_like(c, 0, x);
  for (int k = 1; k < 3 && !s; k++)
    if (kiln_opc_out_wanted(c, k)) s = alloc_like(c, k, c->in[2 + k]);
  for (int64_t ch = 0; ch < C && !s; ch++) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < sp; i++) mean += kiln_get_f(x, (n * C + ch) * sp + i);
    mean /= (double)cnt;
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < sp; i++) {
        double d = kiln_get_f(x, (n * C + ch) * sp + i) - mean;
        var += d * d;
      }
    var /= (double)cnt;
    double sc = kiln_get_f(c->in[1], ch), bb = kiln_get_f(c->in[2], ch), inv = 1.0 / sqrt(var + eps);
    for (int64_t n = 0; n < N; n++)
      for (int64_t i = 0; i < sp; i++) {
        int64_t e = (n * C + ch) * sp + i;
        kiln_set_f(&c->out[0], e, sc * (kiln_get_f(x, e) - mean) * inv + bb);
      }
    if (kiln_opc_out_wanted(c, 1)) kiln_set_f(&c->out[1], ch, kiln_get_f(c->in[3], ch) * mom + mean * (1 - mom));
    if (kiln_opc_out_wanted(c, 2)) kiln_set_f(&c->out[2], ch, kiln_get_f(c->in[4], ch) * mom + var * (1 - mom));
  }
  return s;
}

/* Y = scale * (X - mean) / sqrt(var + epsilon) + B, per channel (or, for
 * spatial=0 before opset 9, per element of C x D1 ... Dn); with
 * training_mode=1 (opset 14+) the batch's statistics and the running-stat
 * outputs (batchnorm_training). Before opset 14, is_test=0 (opset 6) and
 * the training-only outputs (mean, var, saved_mean, saved_var) are
 * refused. */
static kiln_status run_batchnorm(const kiln_op_call *c) {
  kiln_status s = check_batchnorm(c->graph, c->node);
  for (int i = 0; i < 5 && !s; i++) s = kiln_op_need(c, i);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  static const char *const names[5] = {"input X", "scale", "B", "input_mean", "input_var"};
  char b1[160], b2[160];
  for (int i = 0; i < 5; i++)
    if ((s = want_type(c->in[i], i ? F4 : c->opset >= 14 ? F4 : F3, names[i], c->opset))) return s;
  if (x->rank < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input X has shape %s; N x C x D1 ... Dn (rank >= 2) expected",
                     SHP(x, b1));
  bool spatial = c->opset >= 9 || kiln_attr_int(c->node, "spatial", 1) == 1;
  int64_t C = x->dims[1], sp = dims_prod(x, 2, x->rank), per_n = dims_prod(x, 1, x->rank);
  for (int i = 1; i < 5; i++) {
    const kiln_tensor *p = c->in[i];
    if (spatial) {
      if ((s = need_vec(p, C, names[i], x))) return s;
    } else if (p->rank != x->rank - 1 || memcmp(p->dims, x->dims + 1, sizeof(int64_t) * (size_t)p->rank)) {
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has shape %s; with spatial=0 it must be X's shape %s without N",
                       names[i], SHP(p, b1), SHP(x, b2));
    }
  }
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  if (kiln_attr_int(c->node, "training_mode", 0)) return batchnorm_training(c, eps);
  if ((s = alloc_like(c, 0, x))) return s;
  for (int64_t i = 0; i < x->numel; i++) {
    int64_t e = i % per_n, pi = spatial ? e / sp : e;
    double sc = kiln_get_f(c->in[1], pi), bb = kiln_get_f(c->in[2], pi);
    double m = kiln_get_f(c->in[3], pi), v = kiln_get_f(c->in[4], pi);
    kiln_set_f(&c->out[0], i, sc * (kiln_get_f(x, i) - m) / sqrt(v + eps) + bb);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* InstanceNormalization                                                     */

static kiln_status check_instancenorm(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  return attr_types(n, "epsilon:f");
}

/* Per (n, c): Y = scale[c] * (X - mean) / sqrt(var + epsilon) + B[c], with
 * mean and (population) variance over the spatial dims. */
static kiln_status run_instancenorm(const kiln_op_call *c) {
  kiln_status s = check_instancenorm(c->graph, c->node);
  for (int i = 0; i < 3 && !s; i++) s = kiln_op_need(c, i);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char b[160];
  if ((s = want_type(x, F3, "input X", c->opset))) return s;
  if ((s = want_type(c->in[1], F3, "scale", c->opset))) return s;
  if ((s = want_type(c->in[2], F3, "B", c->opset))) return s;
  if (x->rank < 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input X has shape %s; N x C x D1 ... Dn (rank >= 3) expected",
                     SHP(x, b));
  int64_t C = x->dims[1], sp = dims_prod(x, 2, x->rank), planes = dims_prod(x, 0, 2);
  if ((s = need_vec(c->in[1], C, "scale", x)) || (s = need_vec(c->in[2], C, "B", x))) return s;
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  if ((s = alloc_like(c, 0, x)) || x->numel == 0) return s;
  for (int64_t p = 0; p < planes; p++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < sp; i++) mean += kiln_get_f(x, p * sp + i);
    mean /= (double)sp;
    for (int64_t i = 0; i < sp; i++) {
      double d = kiln_get_f(x, p * sp + i) - mean;
      var += d * d;
    }
    var /= (double)sp;
    double sc = kiln_get_f(c->in[1], p % C), bb = kiln_get_f(c->in[2], p % C), inv = 1.0 / sqrt(var + eps);
    for (int64_t i = 0; i < sp; i++)
      kiln_set_f(&c->out[0], p * sp + i, sc * (kiln_get_f(x, p * sp + i) - mean) * inv + bb);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* LayerNormalization                                                        */

static kiln_status check_layernorm(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  kiln_status s = need_opset(n, 17);
  if (!s) s = attr_types(n, "axis:i epsilon:f stash_type:i");
  if (s) return s;
  int64_t st = kiln_attr_int(n, "stash_type", 1);
  if (st != KILN_F32 && st != KILN_F64 && st != KILN_F16 && st != KILN_BF16)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "stash_type %lld is not a floating-point data type", (long long)st);
  return KILN_OK;
}

/* Checks that p broadcasts unidirectionally to x's shape and sets its read
 * strides against x's shape. */
static kiln_status bcast_to(const kiln_tensor *p, const kiln_tensor *x, const char *what, int64_t *strides) {
  char b1[160], b2[160];
  bool ok = p->rank <= x->rank;
  for (int i = 0; ok && i < p->rank; i++) {
    int64_t pd = p->dims[p->rank - 1 - i], xd = x->dims[x->rank - 1 - i];
    if (pd != 1 && pd != xd) ok = false;
  }
  if (!ok)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s of shape %s does not broadcast to input shape %s", what, SHP(p, b1),
                     SHP(x, b2));
  kiln_broadcast_strides(p, x->rank, x->dims, strides);
  return KILN_OK;
}

/* Offset of flat element i of shape (rank, dims) read through strides. */
static int64_t bcast_off(int64_t i, int rank, const int64_t *dims, const int64_t *strides) {
  int64_t idx[KILN_MAX_RANK], off = 0;
  kiln_unravel(i, rank, dims, idx);
  for (int d = 0; d < rank; d++) off += idx[d] * strides[d];
  return off;
}

/* Over the trailing dims from axis: Mean, InvStdDev = 1/sqrt(var + eps),
 * Y = (X - Mean) * InvStdDev * Scale + B (Scale and B broadcast to X).
 * Mean and InvStdDev have X's leading dims then 1s, of type stash_type. */
static kiln_status run_layernorm(const kiln_op_call *c) {
  kiln_status s = check_layernorm(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (!s) s = kiln_op_need(c, 1);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *sc = c->in[1], *bb = c->n_in > 2 ? c->in[2] : NULL;
  if ((s = want_type(x, F4, "input X", c->opset)) || (s = want_type(sc, F4, "Scale", c->opset)) ||
      (bb && (s = want_type(bb, F4, "B", c->opset))))
    return s;
  int ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", -1), x->rank, &ax))) return s;
  int64_t ss[KILN_MAX_RANK], bs[KILN_MAX_RANK];
  if ((s = bcast_to(sc, x, "Scale", ss))) return s;
  if (bb && (s = bcast_to(bb, x, "B", bs))) return s;
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  kiln_dtype st = (kiln_dtype)kiln_attr_int(c->node, "stash_type", 1);
  int64_t outer = dims_prod(x, 0, ax), inner = dims_prod(x, ax, x->rank);
  int64_t rdims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) rdims[i] = i < ax ? x->dims[i] : 1;
  if ((s = alloc_like(c, 0, x))) return s;
  for (int k = 1; k < 3; k++)
    if (kiln_opc_out_wanted(c, k) && (s = kiln_tensor_alloc(&c->out[k], st, x->rank, rdims))) return s;
  for (int64_t o = 0; o < outer; o++) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < inner; i++) mean += kiln_get_f(x, o * inner + i);
    mean /= (double)inner;
    for (int64_t i = 0; i < inner; i++) {
      double d = kiln_get_f(x, o * inner + i) - mean;
      var += d * d;
    }
    var /= (double)inner;
    double inv = 1.0 / sqrt(var + eps);
    for (int64_t i = 0; i < inner; i++) {
      int64_t e = o * inner + i;
      double y = (kiln_get_f(x, e) - mean) * inv * kiln_get_f(sc, bcast_off(e, x->rank, x->dims, ss));
      if (bb) y += kiln_get_f(bb, bcast_off(e, x->rank, x->dims, bs));
      kiln_set_f(&c->out[0], e, y);
    }
    if (kiln_opc_out_wanted(c, 1)) kiln_set_f(&c->out[1], o, mean);
    if (kiln_opc_out_wanted(c, 2)) kiln_set_f(&c->out[2], o, inv);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Softmax, LogSoftmax, Hardmax                                              */

enum { SM_SOFTMAX, SM_LOG, SM_HARD };

static kiln_status check_softmax(const kiln_graph *gr, const kiln_node *n) {
  kiln_status s = attr_types(n, "axis:i");
  if (!s) s = decl_type(gr, n, n->opset >= 13 ? F4 : F3);
  return s;
}

/* Before opset 13 the input is coerced to 2-D [prod(dims[:axis]),
 * prod(dims[axis:])] (axis default 1) and each row is normalised; from 13
 * on the op works along the single axis (default -1). */
static kiln_status run_softmax_family(const kiln_op_call *c, int kind) {
  kiln_status s = check_softmax(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  bool v13 = c->opset >= 13;
  if ((s = want_type(x, v13 ? F4 : F3, "input", c->opset))) return s;
  int ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", v13 ? -1 : 1), x->rank, &ax))) return s;
  int64_t outer = dims_prod(x, 0, ax), len, inner;
  if (v13) {
    len = x->rank ? x->dims[ax] : 1;
    inner = dims_prod(x, ax + 1, x->rank);
  } else {
    len = dims_prod(x, ax, x->rank);
    inner = 1;
  }
  if ((s = alloc_like(c, 0, x)) || x->numel == 0) return s;
  kiln_tensor *y = &c->out[0];
  for (int64_t o = 0; o < outer; o++) {
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in;
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t j = 0; j < len; j++) {
        double v = kiln_get_f(x, base + j * inner);
        if (j == 0 || v > mx || (isnan(v) && !isnan(mx))) {
          mx = v;
          arg = j;
        }
      }
      if (kind == SM_HARD) {
        for (int64_t j = 0; j < len; j++) kiln_set_f(y, base + j * inner, j == arg ? 1.0 : 0.0);
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < len; j++) sum += exp(kiln_get_f(x, base + j * inner) - mx);
      for (int64_t j = 0; j < len; j++) {
        double d = kiln_get_f(x, base + j * inner) - mx;
        kiln_set_f(y, base + j * inner, kind == SM_LOG ? d - log(sum) : exp(d) / sum);
      }
    }
  }
  return KILN_OK;
}

static kiln_status run_softmax(const kiln_op_call *c) { return run_softmax_family(c, SM_SOFTMAX); }
static kiln_status run_logsoftmax(const kiln_op_call *c) { return run_softmax_family(c, SM_LOG); }
static kiln_status run_hardmax(const kiln_op_call *c) { return run_softmax_family(c, SM_HARD); }

/* ------------------------------------------------------------------------ */
/* LpNormalization                                                           */

static kiln_status check_lpnorm(const kiln_graph *gr, const kiln_node *n) {
  (void)gr;
  kiln_status s = attr_types(n, "axis:i p:i");
  if (s) return s;
  int64_t p = kiln_attr_int(n, "p", 2);
  if (p != 1 && p != 2) return kiln_fail(KILN_E_MODEL, "p %lld is not 1 or 2", (long long)p);
  return KILN_OK;
}

/* Y = X / ||X||_p along axis; a zero norm gives zeros (as onnxruntime). */
static kiln_status run_lpnorm(const kiln_op_call *c) {
  kiln_status s = check_lpnorm(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  if ((s = want_type(x, F3, "input", c->opset))) return s;
  int ax;
  if ((s = kiln_norm_axis(kiln_attr_int(c->node, "axis", -1), x->rank, &ax))) return s;
  bool p1 = kiln_attr_int(c->node, "p", 2) == 1;
  int64_t outer = dims_prod(x, 0, ax), len = x->rank ? x->dims[ax] : 1,
          inner = dims_prod(x, ax + 1, x->rank);
  if ((s = alloc_like(c, 0, x)) || x->numel == 0) return s;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t in = 0; in < inner; in++) {
      int64_t base = o * len * inner + in;
      double nrm = 0;
      for (int64_t j = 0; j < len; j++) {
        double v = kiln_get_f(x, base + j * inner);
        nrm += p1 ? fabs(v) : v * v;
      }
      if (!p1) nrm = sqrt(nrm);
      for (int64_t j = 0; j < len; j++)
        kiln_set_f(&c->out[0], base + j * inner, nrm != 0 ? kiln_get_f(x, base + j * inner) / nrm : 0.0);
    }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* LRN                                                                       */

static kiln_status check_lrn(const kiln_graph *gr, const kiln_node *n) {
  kiln_status s = attr_types(n, "alpha:f beta:f bias:f size:i");
  if (!s) s = decl_type(gr, n, n->opset >= 13 ? F4 : F3);
  if (s) return s;
  if (!kiln_node_attr(n, "size")) return kiln_fail(KILN_E_MODEL, "required attribute 'size' is missing");
  int64_t sz = kiln_attr_int(n, "size", 1);
  if (sz < 1 || sz > POOL_MAX_K) return kiln_fail(KILN_E_MODEL, "size %lld must be positive", (long long)sz);
  return KILN_OK;
}

/* square_sum[n,c,...] = sum of X[n,i,...]^2 for i in
 * [c - floor((size-1)/2), c + ceil((size-1)/2)] within [0, C);
 * Y = X / (bias + alpha / size * square_sum)^beta. */
static kiln_status run_lrn(const kiln_op_call *c) {
  kiln_status s = check_lrn(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char b[160];
  if ((s = want_type(x, c->opset >= 13 ? F4 : F3, "input X", c->opset))) return s;
  if (x->rank < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input X has shape %s; N x C x D1 ... Dn (rank >= 2) expected",
                     SHP(x, b));
  double alpha = kiln_attr_float(c->node, "alpha", 1e-4f), beta = kiln_attr_float(c->node, "beta", 0.75f);
  double bias = kiln_attr_float(c->node, "bias", 1.0f);
  int64_t size = kiln_attr_int(c->node, "size", 1);
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  int64_t N = x->dims[0], C = x->dims[1], sp = dims_prod(x, 2, x->rank);
  if ((s = alloc_like(c, 0, x)) || x->numel == 0) return s;
  for (int64_t n = 0; n < N; n++)
    for (int64_t ch = 0; ch < C; ch++)
      for (int64_t i = 0; i < sp; i++) {
        double sq = 0;
        int64_t c0 = ch - lo < 0 ? 0 : ch - lo, c1 = ch + hi > C - 1 ? C - 1 : ch + hi;
        for (int64_t k = c0; k <= c1; k++) {
          double v = kiln_get_f(x, (n * C + k) * sp + i);
          sq += v * v;
        }
        int64_t e = (n * C + ch) * sp + i;
        kiln_set_f(&c->out[0], e, kiln_get_f(x, e) / pow(bias + alpha / (double)size * sq, beta));
      }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* MeanVarianceNormalization                                                 */

static kiln_status check_mvn(const kiln_graph *gr, const kiln_node *n) {
  kiln_status s = need_opset(n, 9);
  if (!s) s = attr_types(n, "axes:I");
  if (!s) s = decl_type(gr, n, n->opset >= 13 ? F4 : F3);
  return s;
}

/* Y = (X - mean) / (sqrt(var) + 1e-9), mean and population variance over
 * axes (default [0, 2, 3]), as the ONNX function body computes it. */
static kiln_status run_mvn(const kiln_op_call *c) {
  kiln_status s = check_mvn(c->graph, c->node);
  if (!s) s = kiln_op_need(c, 0);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  char b[160];
  if ((s = want_type(x, c->opset >= 13 ? F4 : F3, "input X", c->opset))) return s;
  static const int64_t def_axes[3] = {0, 2, 3};
  size_t na;
  const int64_t *axes = kiln_attr_ints(c->node, "axes", &na);
  if (!axes) {
    axes = def_axes;
    na = 3;
  }
  bool red[KILN_MAX_RANK] = {false};
  for (size_t i = 0; i < na; i++) {
    int a;
    if (axes[i] < 0 && c->opset < 13)
      return kiln_fail(KILN_E_MODEL, "negative axis %lld is allowed from opset 13", (long long)axes[i]);
    if ((s = kiln_norm_axis(axes[i], x->rank, &a))) {
      kiln_error_prefix("axes (input shape %s)", SHP(x, b));
      return s;
    }
    if (red[a]) return kiln_fail(KILN_E_MODEL, "axis %lld appears twice in axes", (long long)axes[i]);
    red[a] = true;
  }
  /* groups: the shape with the reduced dims set to 1 */
  int64_t gdims[KILN_MAX_RANK], gstr[KILN_MAX_RANK], idx[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) gdims[i] = red[i] ? 1 : x->dims[i];
  kiln_strides(x->rank, gdims, gstr);
  if ((s = alloc_like(c, 0, x)) || x->numel == 0) return s;
  int64_t ng = 1;
  for (int i = 0; i < x->rank; i++) ng *= gdims[i];
  int64_t per = x->numel / ng;
  double *mean = kiln_calloc((size_t)ng, sizeof *mean);
  double *var = kiln_calloc((size_t)ng, sizeof *var);
  if (!mean || !var) {
    kiln_free(mean);
    kiln_free(var);
    return kiln_fail(KILN_E_NOMEM, "out of memory for %lld group statistics", (long long)ng);
  }
  for (int pass = 0; pass < 3; pass++) {
    for (int64_t i = 0; i < x->numel; i++) {
      kiln_unravel(i, x->rank, x->dims, idx);
      int64_t gi = 0;
      for (int d = 0; d < x->rank; d++) gi += red[d] ? 0 : idx[d] * gstr[d];
      double v = kiln_get_f(x, i);
      if (pass == 0) mean[gi] += v;
      else if (pass == 1) var[gi] += (v - mean[gi]) * (v - mean[gi]);
      else kiln_set_f(&c->out[0], i, (v - mean[gi]) / (sqrt(var[gi]) + 1e-9));
    }
    for (int64_t g = 0; g < ng && pass < 2; g++) {
      if (pass == 0) mean[g] /= (double)per;
      else var[g] /= (double)per;
    }
  }
  kiln_free(mean);
  kiln_free(var);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Table                                                                     */

#define POOL_ATTRS "auto_pad kernel_shape pads strides"

const kiln_op_def kiln_ref_ops_nn[] = {
    {"MaxPool", 1, 1, 1, 2, POOL_ATTRS " ceil_mode dilations storage_order", F3 | KILN_T(KILN_I8) | KILN_T(KILN_U8),
     run_maxpool, check_maxpool},
    {"AveragePool", 1, 1, 1, 1, POOL_ATTRS " ceil_mode count_include_pad dilations", F3, run_averagepool,
     check_averagepool},
    {"LpPool", 1, 1, 1, 1, POOL_ATTRS " p", F3, run_lppool, check_lppool},
    {"GlobalAveragePool", 1, 1, 1, 1, "", F3, run_globalaveragepool, NULL},
    {"GlobalMaxPool", 1, 1, 1, 1, "", F3, run_globalmaxpool, NULL},
    {"GlobalLpPool", 1, 1, 1, 1, "p", F3, run_globallppool, check_globallppool},
    {"MaxRoiPool", 2, 2, 1, 1, "pooled_shape spatial_scale", F3, run_maxroipool, check_maxroipool},
    {"MaxUnpool", 2, 3, 1, 1, "kernel_shape pads strides", F3, run_maxunpool, check_maxunpool},
    {"BatchNormalization", 5, 5, 1, 5, "epsilon is_test momentum spatial training_mode", F4, run_batchnorm,
     check_batchnorm},
    {"InstanceNormalization", 3, 3, 1, 1, "epsilon", F3, run_instancenorm, check_instancenorm},
    {"LayerNormalization", 2, 3, 1, 3, "axis epsilon stash_type", F4, run_layernorm, check_layernorm},
    {"Softmax", 1, 1, 1, 1, "axis", F4, run_softmax, check_softmax},
    {"LogSoftmax", 1, 1, 1, 1, "axis", F4, run_logsoftmax, check_softmax},
    {"Hardmax", 1, 1, 1, 1, "axis", F4, run_hardmax, check_softmax},
    {"LpNormalization", 1, 1, 1, 1, "axis p", F3, run_lpnorm, check_lpnorm},
    {"LRN", 1, 1, 1, 1, "alpha beta bias size", F4, run_lrn, check_lrn},
    {"MeanVarianceNormalization", 1, 1, 1, 1, "axes", F4, run_mvn, check_mvn},
    {0},
};
