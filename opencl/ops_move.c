/* opencl/ops_move: data movement the engine would otherwise do on the
 * host — Concat (one copy kernel per input into its slice, or one kernel
 * per short output row), Gather (any
 * axis, int32/int64 indices, negative indices; a row copied W elements per
 * work item; a run-time index out of range fails the run), Transpose (dims collapsed;
 * when the innermost dim moves, 16x16 tiles through local memory so both
 * reads and writes are contiguous), Where (broadcast), Pad (constant,
 * reflect, edge; float32), ScatterND (every reduction; the tuples in order),
 * and kiln's SparseLengthsSum / WeightedSum / Mean (float32, float16 and
 * 8-bit rowwise tables).
 * Element types are copied as bits of their size,
 * so every dtype of 1, 2, 4 or 8 bytes works (Pad: float32 only). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/ops_int.h"
#include "reference/ops_kiln.h"

#define TILE 16

static const char *bits_type(kiln_dtype t) {
  switch (kiln_dtype_size(t)) {
    case 1:
      return "uchar";
    case 2:
      return "ushort";
    case 4:
      return "uint";
    case 8:
      return "ulong";
    default:
      return NULL;
  }
}

/* ---- Concat ---- */

static kiln_status concat(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *y = &c->out[0];
  const char *T = bits_type(y->dtype);
  if (!T || y->rank < 1 || n->n_in > OP_MAX_KERNELS) return KILN_OK;
  int r = y->rank;
  int64_t ax = kiln_attr_int(n, "axis", 1);
  if (ax < 0) ax += r;
  if (ax < 0 || ax >= r) return KILN_OK;
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] < 0 || c->in[i].dtype != y->dtype || c->in[i].rank != r) return KILN_OK;
  int64_t inner = kiln_clop_numel(r - (int)ax - 1, y->dims + ax + 1), total = y->dims[ax], off = 0;
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  /* short output rows (total * inner of 2 to 16 elements; at most
     OP_MAX_ARGS - 1 inputs that are not empty): one kernel, a work item per
     row gathering its elements from every input — a copy kernel per input
     would write every R-th element, R launches of scalar stores on PoCL
     (detection_post's four [200000,1] columns into [200000,4]: 612 us) */
  int64_t R = total * inner, outer = R ? kiln_clop_numel(r, y->dims) / R : 0;
  int nz = 0, zin[OP_MAX_ARGS];
  bool rows = R >= 2 && R <= 16 && outer > 0;
  for (int i = 0; i < n->n_in && rows; i++)
    if (c->in[i].dims[ax] > 0) {
      if (nz == OP_MAX_ARGS - 1) rows = false;
      else zin[nz++] = i;
    }
  if (!s && rows) {
    int k;
    bool vec = R == 2 || R == 4 || R == 8 || R == 16;
    s = kiln_clop_kernel(op, "concat_rows", &k);
    if (!s) s = kiln_cl_src_printf(c->src, "__kernel void %s(", kiln_clop_kname(op, k));
    for (int j = 0; j < nz && !s; j++) s = kiln_cl_src_printf(c->src, "__global const %s *x%d_, ulong x%do, ", T, j, j);
    if (!s)
      s = kiln_cl_src_printf(c->src, "__global %s *y_, ulong yo) {\n  const ulong o = get_global_id(0);\n"
                                     "  if (o >= %lldUL) return;\n",
                             T, (long long)outer);
    if (!s && vec) s = kiln_cl_src_printf(c->src, "  vstore%lld((%s%lld)(", (long long)R, T, (long long)R);
    int64_t col = 0;
    for (int j = 0; j < nz && !s; j++) {
      int64_t run = c->in[zin[j]].dims[ax] * inner;
      for (int64_t e = 0; e < run && !s; e++, col++)
        s = vec ? kiln_cl_src_printf(c->src, "%sx%d_[x%do + o * %lldUL + %lldUL]", col ? ", " : "", j, j, (long long)run,
                                     (long long)e)
                : kiln_cl_src_printf(c->src, "  y_[yo + o * %lldUL + %lldUL] = x%d_[x%do + o * %lldUL + %lldUL];\n",
                                     (long long)R, (long long)col, j, j, (long long)run, (long long)e);
    }
    if (!s && vec) s = kiln_cl_src_printf(c->src, "), 0, y_ + yo + o * %lldUL);\n", (long long)R);
    if (!s) s = kiln_cl_src_printf(c->src, "}\n");
    opb args[OP_MAX_ARGS];
    for (int j = 0; j < nz; j++) args[j] = IN(zin[j]);
    args[nz] = OUT(0);
    if (!s) s = kiln_clop_launch(op, k, (size_t)outer, nz + 1, args);
    if (s) return kiln_clop_fail_free(op, s);
    snprintf(op->desc, sizeof op->desc, "Concat %d inputs on axis %lld (rows of %lld)", n->n_in, (long long)ax,
             (long long)R);
    *out = op;
    return KILN_OK;
  }
  /* a copy kernel per input; consecutive inputs of one length share one
     kernel, the output's offset its argument (OUT_AT): embedding_bag's Concat of four
     [512, 64] bags made four kernels, and on rusticl each clCreateKernel of
     a warm init costs ~0.2 ms (opencl/ENGINE.md "One Concat kernel") */
  int k = -1;
  int64_t k_len = -1;
  for (int i = 0; i < n->n_in && !s; i++) {
    int64_t len = c->in[i].dims[ax], numel = kiln_clop_numel(r, c->in[i].dims);
    if (numel == 0) continue;
    if (len != k_len) {
      char suf[32];
      snprintf(suf, sizeof suf, "concat%d", i);
      s = kiln_clop_kernel(op, suf, &k);
      if (!s)
        s = kiln_cl_src_printf(c->src,
                               "__kernel void %s(__global const %s *x_, ulong xo, __global %s *y_, ulong yo) {\n"
                               "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                               "  y_[yo + (i / %lldUL) * %lldUL + i %% %lldUL] = x_[xo + i];\n}\n",
                               kiln_clop_kname(op, k), T, T, (long long)numel, (long long)(len * inner),
                               (long long)(total * inner), (long long)(len * inner));
      k_len = len;
    }
    if (!s) s = kiln_clop_launch(op, k, (size_t)numel, 2, (opb[]){IN(i), OUT_AT(0, off * inner)});
    off += len;
  }
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "Concat %d inputs on axis %lld", n->n_in, (long long)ax);
  *out = op;
  return KILN_OK;
}

/* ---- Gather ---- */

/* Elements of a gathered row per work item: the widest of 16, 8, 4, 2 that
 * divides the row (inner) and the device takes as one vector — PoCL
 * (preferred float width 16) runs a work item's vector as SIMD and does not
 * vectorise across work items, so one element per item was a scalar loop
 * (embedding_bag's 20480 rows of 64 floats: 1.3 ms a Gather); llvmpipe
 * (width 1) vectorises across invocations: 4, as the generated kernels.
 * KILN_CL_VEC=0: one element per item; =4|8|16: at most that many. */
static int gather_width(const kiln_cl_device *dev, int64_t inner) {
  const char *e = getenv("KILN_CL_VEC");
  unsigned pref = dev ? dev->pref_vec_float : 0;
  int w = pref >= 16 ? 16 : pref >= 8 ? 8 : 4;
  int force = e && *e ? atoi(e) : -1; /* read as the generated kernels read it */
  if (force == 0) return 1;
  if (force == 4 || force == 8 || force == 16) w = force;
  while (w > 1 && inner % w) w /= 2;
  return w;
}

static kiln_status gather(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0], *ind = &c->in[1];
  const char *T = bits_type(x->dtype);
  if (!T || x->rank < 1 || (ind->dtype != KILN_I32 && ind->dtype != KILN_I64) || c->out[0].dtype != x->dtype)
    return KILN_OK;
  int64_t ax = kiln_attr_int(n, "axis", 0);
  if (ax < 0) ax += x->rank;
  if (ax < 0 || ax >= x->rank) return KILN_OK;
  int64_t len = x->dims[ax], outer = kiln_clop_numel((int)ax, x->dims),
          inner = kiln_clop_numel(x->rank - (int)ax - 1, x->dims + ax + 1);
  int64_t K = kiln_clop_numel(ind->rank, ind->dims), total = outer * K * inner;
  /* constant indices are checked here, as the host would at run time;
     run-time ones by the kernel (CHK) */
  const kiln_tensor *ki = c->konst ? c->konst[1] : NULL;
  for (int64_t j = 0; ki && j < ki->numel; j++) {
    int64_t v = kiln_get_i(ki, j);
    if (v < -len || v >= len) return KILN_OK; /* the host reports it */
  }
  if ((ind->dtype == KILN_I32 && len > INT32_MAX) || K > INT32_MAX) return KILN_OK;
  const char *it = ind->dtype == KILN_I32 ? "int" : "long", *sfx = ind->dtype == KILN_I32 ? "" : "L";
  int w = gather_width(c->dev, inner);
  char vt[16];
  snprintf(vt, sizeof vt, w > 1 ? "%s%d" : "%s", T, w);
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  if (!s) s = kiln_clop_kernel(op, "gather", &k);
  /* w elements of a row per work item (vloadW / vstoreW: element alignment
     is enough); the index arithmetic is on the first of them */
  if (!s)
    s = kiln_cl_src_printf(
        c->src,
        "__kernel void %s(__global const %s *x_, ulong xo, __global const %s *ind_, ulong io, "
        "__global %s *y_, ulong yo, __global int *chk_, ulong co) {\n"
        "  const ulong i = get_global_id(0) * %dUL;\n  if (i >= %lldUL) return;\n"
        "  const ulong in_ = i %% %lldUL, t = i / %lldUL, kk = t %% %lldUL, o = t / %lldUL;\n"
        "  /* int32 indices stay int: Mesa 22.3 rusticl miscompiles their widening to long here */\n"
        "  const %s j0 = ind_[io + kk];\n  const %s j = j0 < 0 ? j0 + %lld%s : j0;\n"
        "  /* an index out of range reads 0 and fails the run (kiln_cl_op_checked), naming the first\n"
        "     one, as the host does: the lowest position kk kept as K - kk (its value read back) */\n"
        "  if (!(j >= 0 && j < %lld%s)) {\n",
        kiln_clop_kname(op, k), T, it, T, w, (long long)total, (long long)inner, (long long)inner, (long long)K,
        (long long)K, it, it, (long long)len, sfx, (long long)len, sfx);
  if (!s) s = kiln_clop_first_bad_src(c->src, "(chk_ + co)", "kk", K);
  if (!s) s = kiln_cl_src_printf(c->src, "  }\n");
  if (!s && w > 1)
    s = kiln_cl_src_printf(c->src,
                           "  const %s v = (j >= 0 && j < %lld%s) ? vload%d(0, x_ + xo + (o * %lldUL + (ulong)j) * %lldUL + "
                           "in_) : (%s)(0);\n  vstore%d(v, 0, y_ + yo + i);\n}\n",
                           vt, (long long)len, sfx, w, (long long)len, (long long)inner, vt, w);
  else if (!s)
    s = kiln_cl_src_printf(c->src,
                           "  y_[yo + i] = (j >= 0 && j < %lld%s) ? x_[xo + (o * %lldUL + (ulong)j) * %lldUL + in_] : 0;\n}\n",
                           (long long)len, sfx, (long long)len, (long long)inner);
  if (!s) kiln_clop_checks(op, 1, &len);
  if (!s) s = kiln_clop_launch(op, k, (size_t)(total / w), 4, (opb[]){IN(0), IN(1), OUT(0), CHK});
  if (!s) s = kiln_clop_first_bad(op, c->src, IN(1), it, K);
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "Gather axis %lld: %lld x %lld of %lld x %lld", (long long)ax, (long long)outer,
           (long long)K, (long long)len, (long long)inner);
  *out = op;
  return KILN_OK;
}

/* ---- SparseLengthsSum / WeightedSum / Mean (kiln's domain) ---- */

/* docs/KILN_DOMAIN.md over a table of R rows of D values:
 * lengths or offsets, constant or given at run time, int32 or int64
 * indices, negative_indices 0 or 1, weights by index or positional. A work
 * item sums W floats of one output row over its segment, in index order.
 * Constant segments are checked here as the host kernel checks them (a
 * mistake: declined, the host reports it) and become m·L when every length
 * is L, else a __constant table of the M + 1 starts (M <= SLS_MAX_TABLE).
 * Run-time segments: a first kernel (one work item) walks LENGTHS /
 * OFFSETS in order with the host decoder's checks, writes the starts into
 * the workspace, and at the first mistake leaves its code and numbers in
 * the check words; the sum kernel then does nothing. An index out of range
 * reads nothing and fails the run. The messages are the host backends'
 * (sls_msg). Tables: float32, float16 (vload_half), 8-bit rowwise (uint8
 * [R, D + 8], Caffe2's Fused8BitRowwise layout; the cpu kernel's order of
 * operations). Declined: WEIGHTS of the wrong length (a static shape: the
 * host reports it). */
#define SLS_MAX_TABLE 1024 /* 8 KiB of __constant a node: several fit a device's 64 KiB */

/* Check-word codes (word 3; 1, 2 = a, 4, 5 = b, 6, 7 = c, each low, high):
 * 0 a bad index, else the host decoder's kiln_sls_seg_error. */
enum {
  SLS_BAD_INDEX = 0,
  SLS_NEG_LENGTH = KILN_SLS_NEG_LENGTH,
  SLS_LENGTHS_OVER = KILN_SLS_LENGTHS_OVER,
  SLS_LENGTHS_SUM = KILN_SLS_LENGTHS_SUM,
  SLS_OFFSET0 = KILN_SLS_OFFSET0,
  SLS_OFFSET_RANGE = KILN_SLS_OFFSET_RANGE,
  SLS_POSITIONAL = KILN_SLS_POSITIONAL
};

static long long sls_word(const cl_int *w, int k) {
  return (long long)(((uint64_t)(uint32_t)w[k + 1] << 32) | (uint32_t)w[k]);
}

/* chk_aux: N, R, the WEIGHTS count, negative_indices. */
static kiln_status sls_msg(const kiln_cl_op *op, const cl_int *w) {
  long long a = sls_word(w, 1), b = sls_word(w, 4), c = sls_word(w, 6), R = op->chk_aux[1];
  if (w[3] != SLS_BAD_INDEX) /* a segment's mistake: the host decoder's message */
    return kiln_sls_seg_fail((kiln_sls_seg_error)w[3], a, b, c, op->chk_aux[0], op->chk_aux[2]);
  if (op->chk_aux[3])
    return kiln_fail(KILN_E_INVALID_VALUE, "index %lld is out of range for a dimension of size %lld", a, R);
  const kiln_sls_spec sp = {.rows = R};
  return kiln_sls_bad_index(&sp, b, a);
}

/* The segments' kernel: LENGTHS / OFFSETS (type lt) in order, the host
 * decoder's checks, the starts into st_ (the workspace). int32 segments are
 * worked in int (N <= INT32_MAX): Mesa 22.3 rusticl miscompiles an int
 * widened to long in these kernels, as Gather's indices. */
static kiln_status sls_seg_src(kiln_cl_src *src, const char *kname, const char *lt, bool offsets, int64_t M, int64_t N,
                               int64_t wn) {
  bool i32 = !strcmp(lt, "int");
  const char *sf = i32 ? "" : "L";
  kiln_status s = kiln_cl_src_printf(
      src,
      "#define SLS_HI(x) %s\n"
      "#define SLS_ERR(code, a, b, c) { chk_[1] = (int)((a) & 0xffffffff%s); chk_[2] = SLS_HI(a); "
      "chk_[3] = code; chk_[4] = (int)((b) & 0xffffffff%s); chk_[5] = SLS_HI(b); "
      "chk_[6] = (int)((c) & 0xffffffff%s); chk_[7] = SLS_HI(c); chk_[0] = 1; return; }\n"
      "__kernel void %s(__global const %s *sg_, ulong so, __global %s *st0_, ulong sto, __global int *chk0_, "
      "ulong co0) {\n"
      "  if (get_global_id(0) != 0) return;\n"
      "  __global const %s *sg = sg_ + so;\n  __global %s *st_ = st0_ + sto;\n  __global int *chk_ = chk0_ + co0;\n"
      "  %s at = 0, longest = 0;\n"
      "  for (%s m = 0; m < %lld%s; m++) {\n    const %s v = sg[m];\n",
      i32 ? "((x) < 0 ? -1 : 0)" : "((int)((x) >> 32))", sf, sf, sf, kname, lt, lt, lt, lt, lt, lt, (long long)M, sf,
      lt);
  if (!s && offsets)
    s = kiln_cl_src_printf(src,
                           "    if (m == 0 && v != 0) SLS_ERR(%d, v, 0, 0)\n"
                           "    if (v < at || v > %lld%s) SLS_ERR(%d, v, m, at)\n"
                           "    if (m > 0 && v - at > longest) longest = v - at;\n"
                           "    st_[m] = at = v;\n  }\n"
                           "  if (%lld%s - at > longest) longest = %lld%s - at;\n",
                           SLS_OFFSET0, (long long)N, sf, SLS_OFFSET_RANGE, (long long)N, sf, (long long)N, sf);
  else if (!s)
    s = kiln_cl_src_printf(src,
                           "    if (v < 0) SLS_ERR(%d, v, m, 0)\n"
                           "    if (v > %lld%s - at) SLS_ERR(%d, 0, m, 0)\n"
                           "    st_[m] = at;\n    at += v;\n    if (v > longest) longest = v;\n  }\n"
                           "  if (at != %lld%s) SLS_ERR(%d, at, 0, 0)\n",
                           SLS_NEG_LENGTH, (long long)N, sf, SLS_LENGTHS_OVER, (long long)N, sf, SLS_LENGTHS_SUM);
  if (!s && wn >= 0)
    s = kiln_cl_src_printf(src, "  if (longest > %lld%s) SLS_ERR(%d, longest, 0, 0)\n", (long long)wn, sf,
                           SLS_POSITIONAL);
  if (!s)
    s = kiln_cl_src_printf(src, "  st_[%lld] = %lld%s;\n}\n#undef SLS_ERR\n#undef SLS_HI\n", (long long)M, (long long)N,
                           sf);
  return s;
}

static kiln_status sls(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const char *t = n->op_type;
  bool weighted = strstr(t, "WeightedSum") != NULL, mean = strstr(t, "Mean") != NULL;
  bool fused8 = strstr(t, "Fused8BitRowwise") != NULL; /* Caffe2's names: DATA must be uint8 */
  int xi = 0, wi = weighted ? 1 : -1, ii = weighted ? 2 : 1, li = weighted ? 3 : 2;
  if (n->n_in != li + 1 || n->n_out != 1) return KILN_OK;
  const kiln_cl_ttype *x = &c->in[xi], *ind = &c->in[ii], *len = &c->in[li];
  const kiln_tensor *lk = c->konst ? c->konst[li] : NULL;
  bool offsets = kiln_attr_int(n, "offsets", 0) != 0, positional = weighted && kiln_attr_int(n, "positional", 0) != 0;
  bool neg = kiln_attr_int(n, "negative_indices", 0) != 0;
  /* the table: float32 or float16 [R, d1..dk], or 8-bit rowwise uint8 [R, D + 8] */
  bool u8 = x->dtype == KILN_U8, f16 = x->dtype == KILN_F16;
  if ((fused8 && !u8) || (u8 && (x->rank != 2 || x->dims[1] < 8))) return KILN_OK;
  if ((x->dtype != KILN_F32 && !f16 && !u8) || x->rank < 1 || (ind->dtype != KILN_I32 && ind->dtype != KILN_I64) ||
      ind->rank != 1 ||
      len->rank != 1 || (len->dtype != KILN_I32 && len->dtype != KILN_I64) || (lk && lk->strided) ||
      c->out[0].dtype != KILN_F32)
    return KILN_OK;
  if (weighted && (c->in[wi].dtype != KILN_F32 || c->in[wi].rank != 1)) return KILN_OK;
  int64_t R = x->dims[0], D = u8 ? x->dims[1] - 8 : kiln_clop_numel(x->rank - 1, x->dims + 1), N = ind->dims[0],
          M = len->dims[0];
  const int64_t RB = u8 ? x->dims[1] : D; /* a row's elements in the buffer */
  int64_t WN = weighted ? c->in[wi].dims[0] : 0;
  if (M < 1 || D < 1 || M > INT64_MAX / D || (lk && lk->numel != M) || (weighted && !positional && WN != N) ||
      N > INT32_MAX || (ind->dtype == KILN_I32 && R > INT32_MAX))
    return KILN_OK;
  /* constant segments, checked by the host kernels' decoder (a mistake:
     declined, the host reports it) */
  int64_t *st = NULL, longest = 0;
  bool uniform = false;
  if (lk) {
    if (!(st = kiln_malloc(sizeof *st * (size_t)(M + 1)))) return kiln_fail(KILN_E_NOMEM, "out of memory compiling %s", t);
    if (kiln_sls_segments(lk, offsets, N, positional ? WN : -1, st, &longest)) {
      kiln_error_clear();
      kiln_free(st);
      return KILN_OK;
    }
    uniform = true;
    for (int64_t m = 0; m < M; m++) uniform = uniform && st[m + 1] - st[m] == st[1] - st[0];
    if (!uniform && M > SLS_MAX_TABLE) {
      kiln_free(st);
      return KILN_OK;
    }
  }
  int w = gather_width(c->dev, D);
  char vt[16];
  snprintf(vt, sizeof vt, w > 1 ? "float%d" : "float", w);
  const char *it = ind->dtype == KILN_I32 ? "int" : "long";
  /* the segments' type: int for run-time int32 segments (sls_seg_src) */
  const char *sty = !lk && len->dtype == KILN_I32 ? "int" : "long";
  char wrap[96]; /* negative_indices: [-R, 0) counts from the end */
  if (neg) snprintf(wrap, sizeof wrap, "j0 < 0 ? j0 + %lld%s : j0", (long long)R, ind->dtype == KILN_I32 ? "" : "L");
  else snprintf(wrap, sizeof wrap, "j0");
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int ks = -1, k = 0, scr = 0;
  if (!s && !lk) s = kiln_clop_scratch(op, sizeof(int64_t) * (size_t)(M + 1), &scr);
  if (!s && !lk) s = kiln_clop_kernel(op, "seg", &ks);
  if (!s && !lk)
    s = sls_seg_src(c->src, kiln_clop_kname(op, ks), sty, offsets, M, N, positional ? WN : -1);
  if (!s) s = kiln_clop_kernel(op, "sls", &k);
  if (!s && lk && !uniform) { /* the starts, before the kernel */
    s = kiln_cl_src_printf(c->src, "__constant long %s_st[%lld] = {", kiln_clop_kname(op, k), (long long)(M + 1));
    for (int64_t m = 0; m <= M && !s; m++)
      s = kiln_cl_src_printf(c->src, "%s%lld", m ? (m % 16 ? ", " : ",\n  ") : "", (long long)st[m]);
    if (!s) s = kiln_cl_src_printf(c->src, "};\n");
  }
  if (!s)
    s = kiln_cl_src_printf(c->src,
                           "__kernel void %s(__global const %s *x_, ulong xo, %s__global const %s *ind_, ulong io, "
                           "%s%s%s__global float *y_, ulong yo, __global int *chk0_, ulong co0) {\n"
                           "  const ulong i = get_global_id(0) * %dUL;\n"
                           "  const ulong b = i / %lldUL, e = i %% %lldUL, bc = b < %lldUL ? b : %lldUL;\n"
                           "  /* the arguments read before the loop (Mesa warns of kernel arguments loaded in\n"
                           "     control flow) */\n"
                           "  __global const %s *ind = ind_ + io;\n  __global const %s *xr = x_ + xo + e;\n"
                           "  __global int *chk_ = chk0_ + co0;\n%s%s%s%s",
                           kiln_clop_kname(op, k), u8 ? "uchar" : f16 ? "half" : "float",
                           weighted ? "__global const float *w_, ulong wo, " : "", it,
                           lk ? "" : "__global const ", lk ? "" : sty, lk ? "" : " *st0_, ulong sto, ", w,
                           (long long)D, (long long)D, (long long)M, (long long)(M - 1), it,
                           u8 ? "uchar" : f16 ? "half" : "float",
                           weighted ? "  __global const float *wt = w_ + wo;\n" : "", lk ? "" : "  __global const ",
                           lk ? "" : sty, lk ? "" : " *st_ = st0_ + sto;\n");
  if (!s && lk && uniform)
    s = kiln_cl_src_printf(c->src, "  if (i >= %lldUL) return;\n  const long s0 = (long)b * %lldL, s1 = s0 + %lldL;\n",
                           (long long)(M * D), (long long)(st[1] - st[0]), (long long)(st[1] - st[0]));
  else if (!s && lk)
    s = kiln_cl_src_printf(c->src, "  const long s0 = %s_st[bc], s1 = %s_st[bc + 1];\n  if (i >= %lldUL) return;\n",
                           kiln_clop_kname(op, k), kiln_clop_kname(op, k), (long long)(M * D));
  else if (!s) /* the segments' kernel failed (a code in word 3): nothing to sum, its starts are not all
                  written (when it succeeded they are in [0, N], a positional segment within the weights) */
    s = kiln_cl_src_printf(c->src,
                           "  const int bad = chk_[3];\n  const %s s0 = bad ? 0 : st_[bc], s1 = bad ? 0 : st_[bc + 1];\n"
                           "  if (i >= %lldUL || bad) return;\n",
                           sty, (long long)(M * D));
  /* an index out of range: the lowest position kept (kiln_clop_first_bad),
     code 0 in word 3 */
  if (!s)
    s = kiln_cl_src_printf(c->src,
                           "  %s acc = (%s)(0.0f);\n"
                           "  for (%s q = s0; q < s1; q++) {\n"
                           "    const %s j0 = ind[q];\n    const %s j = %s;\n"
                           "    if (!(j >= 0 && j < %lld%s)) {\n",
                           vt, vt, sty, it, it, wrap, (long long)R, ind->dtype == KILN_I32 ? "" : "L");
  if (!s) s = kiln_clop_first_bad_src(c->src, "chk_", "q", N);
  if (!s) s = kiln_cl_src_printf(c->src, "      continue;\n    }\n");
  /* the row's W values: float32 as they are, float16 through vload_half,
     8-bit as floats (the row's scale and bias, its last 8 bytes, applied
     below as the cpu kernel applies them: (acc + w·bias) + (w·scale)·q) */
  char wn[16] = "";
  if (w > 1) snprintf(wn, sizeof wn, "%d", w);
  if (!s && u8 && w > 1)
    s = kiln_cl_src_printf(c->src, "    const %s r = convert_%s(vload%d(0, xr + (ulong)j * %lldUL));\n", vt, vt, w,
                           (long long)RB);
  else if (!s && u8)
    s = kiln_cl_src_printf(c->src, "    const float r = (float)xr[(ulong)j * %lldUL];\n", (long long)RB);
  else if (!s && f16)
    s = kiln_cl_src_printf(c->src, "    const %s r = vload_half%s(0, xr + (ulong)j * %lldUL);\n", vt, wn, (long long)RB);
  else if (!s && w > 1)
    s = kiln_cl_src_printf(c->src, "    const %s r = vload%d(0, xr + (ulong)j * %lldUL);\n", vt, w, (long long)RB);
  else if (!s)
    s = kiln_cl_src_printf(c->src, "    const float r = xr[(ulong)j * %lldUL];\n", (long long)RB);
  if (!s && u8)
    s = kiln_cl_src_printf(c->src,
                           "    __global const uchar *tail = x_ + xo + (ulong)j * %lldUL + %lldUL;\n"
                           "    const float wq = %s, sc = as_float(vload4(0, tail)), bi = as_float(vload4(0, tail + 4));\n"
                           "    acc = (acc + wq * bi) + (wq * sc) * r;\n  }\n",
                           (long long)RB, (long long)D, weighted ? (positional ? "wt[q - s0]" : "wt[q]") : "1.0f");
  else if (!s && weighted)
    s = kiln_cl_src_printf(c->src, "    acc += wt[%s] * r;\n  }\n", positional ? "(q - s0)" : "q");
  else if (!s)
    s = kiln_cl_src_printf(c->src, "    acc += r;\n  }\n");
  if (!s && mean) s = kiln_cl_src_printf(c->src, "  if (s1 > s0) acc *= 1.0f / (float)(s1 - s0);\n");
  if (!s && w > 1) s = kiln_cl_src_printf(c->src, "  vstore%d(acc, 0, y_ + yo + i);\n}\n", w);
  else if (!s) s = kiln_cl_src_printf(c->src, "  y_[yo + i] = acc;\n}\n");
  if (!s) {
    kiln_clop_checks(op, 1, &R);
    op->chk_msg = sls_msg;
    op->chk_aux[0] = N, op->chk_aux[1] = R, op->chk_aux[2] = WN, op->chk_aux[3] = neg;
  }
  if (!s && !lk) s = kiln_clop_launch(op, ks, 1, 3, (opb[]){IN(li), SCR(scr), CHK});
  if (!s) {
    opb a[6];
    int na = 0;
    a[na++] = IN(xi);
    if (weighted) a[na++] = IN(wi);
    a[na++] = IN(ii);
    if (!lk) a[na++] = SCR(scr);
    a[na++] = OUT(0);
    a[na++] = CHK;
    s = kiln_clop_launch(op, k, (size_t)(M * D / w), na, a);
  }
  if (!s) s = kiln_clop_first_bad(op, c->src, IN(ii), it, N);
  if (s) {
    kiln_free(st);
    return kiln_clop_fail_free(op, s);
  }
  if (lk)
    snprintf(op->desc, sizeof op->desc, "%s: %lld bags of %s%lld indices into %lld x %lld", t, (long long)M,
             uniform ? "" : "up to ", (long long)longest, (long long)R, (long long)D);
  else
    snprintf(op->desc, sizeof op->desc, "%s: %lld bags by run-time %s, %lld indices into %lld x %lld", t,
             (long long)M, offsets ? "offsets" : "lengths", (long long)N, (long long)R, (long long)D);
  kiln_free(st);
  *out = op;
  return KILN_OK;
}

/* ---- Transpose ---- */

static kiln_status transpose(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0];
  const char *T = bits_type(x->dtype);
  if (!T || c->out[0].dtype != x->dtype) return KILN_OK;
  int r = x->rank;
  int64_t perm[KILN_MAX_RANK], xs[KILN_MAX_RANK], dims[KILN_MAX_RANK], as[KILN_MAX_RANK], ys[KILN_MAX_RANK];
  size_t np;
  const int64_t *p = kiln_attr_ints(n, "perm", &np);
  if (p && np != (size_t)r) return KILN_OK;
  bool seen[KILN_MAX_RANK] = {false};
  for (int i = 0; i < r; i++) {
    perm[i] = p ? p[i] : r - 1 - i; /* negative entries: not a permutation (the host says so) */
    if (perm[i] < 0 || perm[i] >= r || seen[perm[i]]) return KILN_OK;
    seen[perm[i]] = true;
  }
  kiln_strides(r, x->dims, xs);
  for (int i = 0; i < r; i++) {
    dims[i] = x->dims[perm[i]];
    as[i] = xs[perm[i]];
  }
  kiln_strides(r, dims, ys);
  int64_t numel = kiln_clop_numel(r, dims);
  int64_t *strides[2] = {as, ys};
  int cr = kiln_clop_collapse(r, dims, 2, strides);
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  if (s) return s;
  int k = 0;
  kiln_cl_src *src = c->src;
  /* a device whose work-groups hold fewer than TILE x TILE items gets the gather copy */
  if (cr == 0 || as[cr - 1] == 1 || c->dev->max_work_group_size < TILE * TILE) {
    /* the innermost run is contiguous on both sides: a gather copy */
    s = kiln_clop_kernel(op, "transpose", &k);
    if (!s)
      s = kiln_cl_src_printf(src,
                             "__kernel void %s(__global const %s *x_, ulong xo, __global %s *y_, ulong yo) {\n"
                             "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n  long off;\n",
                             kiln_clop_kname(op, k), T, T, (long long)numel);
    if (!s) s = kiln_clop_emit_offset(src, "i", cr, dims, as, "off");
    if (!s) s = kiln_cl_src_printf(src, "  y_[yo + i] = x_[xo + off];\n}\n");
    if (!s) s = kiln_clop_launch(op, k, (size_t)numel, 2, (opb[]){IN(0), OUT(0)});
    if (s) return kiln_clop_fail_free(op, s);
    snprintf(op->desc, sizeof op->desc, "Transpose (copy, %d dims)", cr);
    *out = op;
    return KILN_OK;
  }
  /* tiled: j = the output's innermost dim, q = the output dim that is the
   * input's innermost (stride 1); the rest enumerate tile planes */
  int j = cr - 1, q = -1;
  for (int i = 0; i < cr; i++)
    if (as[i] == 1) q = i;
  if (q < 0) return kiln_clop_fail_free(op, KILN_OK);
  int64_t rd[KILN_MAX_RANK], ra[KILN_MAX_RANK], ry[KILN_MAX_RANK];
  int nr = 0;
  for (int i = 0; i < cr; i++)
    if (i != j && i != q) rd[nr] = dims[i], ra[nr] = as[i], ry[nr++] = ys[i];
  int64_t TJ = (dims[j] + TILE - 1) / TILE, TQ = (dims[q] + TILE - 1) / TILE, rest = kiln_clop_numel(nr, rd);
  int64_t groups = TJ * TQ * rest;
  s = kiln_clop_kernel(op, "transpose_tiled", &k);
  if (!s)
    s = kiln_cl_src_printf(
        src,
        "__kernel void %s(__global const %s *x_, ulong xo, __global %s *y_, ulong yo) {\n"
        "  __local %s tile[%d][%d];\n"
        "  const ulong g = get_group_id(0);\n  const uint lx = get_local_id(0), ly = get_local_id(1);\n"
        "  const ulong tj = g %% %lldUL, t = g / %lldUL, tq = t %% %lldUL, rest = t / %lldUL;\n"
        "  long xb, yb;\n  (void)rest;\n",
        kiln_clop_kname(op, k), T, T, T, TILE, TILE + 1, (long long)TJ, (long long)TJ, (long long)TQ, (long long)TQ);
  if (!s) s = kiln_clop_emit_offset(src, "rest", nr, rd, ra, "xb");
  if (!s) s = kiln_clop_emit_offset(src, "rest", nr, rd, ry, "yb");
  if (!s)
    s = kiln_cl_src_printf(src,
                           "  { const ulong qc = tq * %d + lx, jc = tj * %d + ly;\n"
                           "    if (qc < %lldUL && jc < %lldUL) tile[ly][lx] = x_[xo + xb + qc + jc * %lldUL]; }\n"
                           "  barrier(CLK_LOCAL_MEM_FENCE);\n"
                           "  { const ulong jc = tj * %d + lx, qc = tq * %d + ly;\n"
                           "    if (qc < %lldUL && jc < %lldUL) y_[yo + yb + jc + qc * %lldUL] = tile[lx][ly]; }\n}\n",
                           TILE, TILE, (long long)dims[q], (long long)dims[j], (long long)as[j], TILE, TILE,
                           (long long)dims[q], (long long)dims[j], (long long)ys[q]);
  op_step *st;
  if (!s) s = kiln_clop_step_add(op, ST_KERNEL, &st);
  if (s) return kiln_clop_fail_free(op, s);
  st->kernel = k;
  st->nargs = 2;
  st->args[0] = IN(0);
  st->args[1] = OUT(0);
  st->dims = 2;
  st->items[0] = (size_t)groups * TILE;
  st->items[1] = TILE;
  st->local[0] = st->local[1] = TILE;
  snprintf(op->desc, sizeof op->desc, "Transpose (%dx%d tiles, %d dims)", TILE, TILE, cr);
  *out = op;
  return KILN_OK;
}

/* ---- Where ---- */

static bool bstrides(const kiln_cl_ttype *t, const kiln_cl_ttype *y, int64_t *st) {
  if (t->rank > y->rank) return false;
  int64_t s = 1;
  for (int d = y->rank - 1; d >= 0; d--) {
    int td = d - (y->rank - t->rank);
    if (td < 0) {
      st[d] = 0;
      continue;
    }
    if (t->dims[td] != 1 && t->dims[td] != y->dims[d]) return false;
    st[d] = t->dims[td] == 1 ? 0 : s;
    s *= t->dims[td];
  }
  return true;
}

static kiln_status where(const op_ctx *c, kiln_cl_op **out) {
  const kiln_cl_ttype *cd = &c->in[0], *x = &c->in[1], *yv = &c->in[2], *y = &c->out[0];
  const char *T = bits_type(y->dtype);
  if (!T || cd->dtype != KILN_BOOL || x->dtype != y->dtype || yv->dtype != y->dtype) return KILN_OK;
  int64_t dims[KILN_MAX_RANK], sc[KILN_MAX_RANK], sx[KILN_MAX_RANK], sy[KILN_MAX_RANK];
  if (!bstrides(cd, y, sc) || !bstrides(x, y, sx) || !bstrides(yv, y, sy)) return KILN_OK;
  memcpy(dims, y->dims, sizeof dims);
  int64_t numel = kiln_clop_numel(y->rank, dims);
  int64_t *strides[3] = {sc, sx, sy};
  int cr = kiln_clop_collapse(y->rank, dims, 3, strides);
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  kiln_cl_src *src = c->src;
  if (!s) s = kiln_clop_kernel(op, "where", &k);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const uchar *c_, ulong co, __global const %s *x_, ulong xo, "
                           "__global const %s *v_, ulong vo, __global %s *y_, ulong yo) {\n"
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n  long oc, ox, ov;\n",
                           kiln_clop_kname(op, k), T, T, T, (long long)numel);
  if (!s) s = kiln_clop_emit_offset(src, "i", cr, dims, sc, "oc");
  if (!s) s = kiln_clop_emit_offset(src, "i", cr, dims, sx, "ox");
  if (!s) s = kiln_clop_emit_offset(src, "i", cr, dims, sy, "ov");
  if (!s) s = kiln_cl_src_printf(src, "  y_[yo + i] = c_[co + oc] ? x_[xo + ox] : v_[vo + ov];\n}\n");
  if (!s) s = kiln_clop_launch(op, k, (size_t)numel, 4, (opb[]){IN(0), IN(1), IN(2), OUT(0)});
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "Where %lld elements", (long long)numel);
  *out = op;
  return KILN_OK;
}

/* ---- Pad ---- */

static kiln_status pad(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0], *y = &c->out[0];
  if (!kiln_clop_is_f32(x) || !kiln_clop_is_f32(y) || y->rank != x->rank) return KILN_OK;
  int r = x->rank;
  int64_t pads[2 * KILN_MAX_RANK];
  float value = 0;
  if (n->opset < 11) {
    size_t np;
    const int64_t *p = kiln_attr_ints(n, "pads", &np);
    if (!p || np != 2 * (size_t)r) return KILN_OK;
    memcpy(pads, p, np * sizeof *p);
    value = kiln_attr_float(n, "value", 0.0f);
  } else {
    if (n->n_in > 3) return KILN_OK; /* axes (opset 18): the host */
    const kiln_tensor *pt = c->konst ? c->konst[1] : NULL;
    int np = 0;
    if (!pt || kiln_tensor_ints(pt, pads, 2 * KILN_MAX_RANK, &np) || np != 2 * r) return KILN_OK;
    if (n->n_in > 2 && n->in[2] >= 0) {
      const kiln_tensor *vt = c->konst ? c->konst[2] : NULL;
      if (!vt || vt->dtype != KILN_F32 || vt->numel != 1) return KILN_OK;
      value = (float)kiln_get_f(vt, 0);
    }
  }
  const char *mode = kiln_attr_string(n, "mode", "constant");
  int m = !strcmp(mode, "reflect") ? 1 : !strcmp(mode, "edge") ? 2 : !strcmp(mode, "constant") ? 0 : -1;
  if (m < 0) return KILN_OK;
  for (int d = 0; d < r; d++)
    if (y->dims[d] != x->dims[d] + pads[d] + pads[d + r]) return KILN_OK;
  int64_t xs[KILN_MAX_RANK], numel = kiln_clop_numel(r, y->dims);
  kiln_strides(r, x->dims, xs);
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int k = 0;
  kiln_cl_src *src = c->src;
  char fv[48];
  if (!s) s = kiln_clop_kernel(op, "pad", &k);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const float *x_, ulong xo, __global float *y_, ulong yo) {\n"
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                           "  ulong t_ = i; long off = 0; bool inside = true;\n",
                           kiln_clop_kname(op, k), (long long)numel);
  for (int d = r - 1; d >= 0 && !s; d--) {
    int64_t nd = x->dims[d];
    s = kiln_cl_src_printf(src, "  { long j = (long)(t_ %% %lldUL) - %lldL; t_ /= %lldUL;\n", (long long)y->dims[d],
                           (long long)pads[d], (long long)y->dims[d]);
    if (!s && m == 0)
      s = kiln_cl_src_printf(src, "    if (j < 0 || j >= %lldL) inside = false;\n", (long long)nd);
    else if (!s && m == 1 && nd == 1)
      s = kiln_cl_src_printf(src, "    j = 0;\n");
    else if (!s && m == 1)
      s = kiln_cl_src_printf(
          src, "    if (j < 0 || j >= %lldL) { j %%= %lldL; if (j < 0) j += %lldL; if (j >= %lldL) j = %lldL - j; }\n",
          (long long)nd, (long long)(2 * (nd - 1)), (long long)(2 * (nd - 1)), (long long)nd,
          (long long)(2 * (nd - 1)));
    else if (!s)
      s = kiln_cl_src_printf(src, "    j = j < 0 ? 0 : j >= %lldL ? %lldL : j;\n", (long long)nd, (long long)(nd - 1));
    if (!s) s = kiln_cl_src_printf(src, "    off += j * %lldL; }\n", (long long)xs[d]);
  }
  if (!s)
    s = kiln_cl_src_printf(src, "  y_[yo + i] = inside ? x_[xo + off] : %s;\n}\n",
                           kiln_clop_flit(value, fv, sizeof fv));
  if (!s) s = kiln_clop_launch(op, k, (size_t)numel, 2, (opb[]){IN(0), OUT(0)});
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "Pad %s %lld elements", mode, (long long)numel);
  *out = op;
  return KILN_OK;
}

/* ---- ScatterND ---- */

/* Tuples a device ScatterND walks one after the other (below). */
#define SCATTER_MAX_TUPLES 65536

/* ScatterND (opsets 11-18): the data copied into the output (w elements
 * per work item), then one work item per element of a slice walks the
 * index tuples in order — the reference's order, so a repeated index ends
 * with its last update and the reductions (add, mul, max, min over
 * float32) combine in the same order, bit for bit. Indices are checked as
 * they are read: one out of range is not written and fails the run
 * (kiln_cl_op_checked). Many tuples of short slices (more than
 * SCATTER_MAX_TUPLES of fewer than 256 elements: one serial loop would be
 * long) stay on the host. */
static kiln_status scatternd(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0], *ind = &c->in[1], *upd = &c->in[2], *y = &c->out[0];
  const char *T = bits_type(x->dtype);
  if (!T || n->n_in < 3 || upd->dtype != x->dtype || y->dtype != x->dtype || y->rank != x->rank) return KILN_OK;
  if (ind->dtype != KILN_I32 && ind->dtype != KILN_I64) return KILN_OK;
  const char *red = kiln_attr_string(n, "reduction", "none");
  int rk = !strcmp(red, "none") ? 0 : !strcmp(red, "add") ? 1 : !strcmp(red, "mul") ? 2 : !strcmp(red, "max") ? 3
           : !strcmp(red, "min")                                                                      ? 4
                                                                                                      : -1;
  if (rk < 0 || (rk && (n->opset < 16 || x->dtype != KILN_F32)) || (rk >= 3 && n->opset < 18)) return KILN_OK;
  int r = x->rank, q = ind->rank;
  if (r < 1 || q < 1) return KILN_OK;
  int64_t k = ind->dims[q - 1];
  if (k < 1 || k > r || upd->rank != q - 1 + r - (int)k) return KILN_OK;
  for (int d = 0; d < q - 1; d++)
    if (upd->dims[d] != ind->dims[d]) return KILN_OK;
  for (int d = (int)k; d < r; d++)
    if (upd->dims[q - 1 + d - k] != x->dims[d]) return KILN_OK;
  for (int d = 0; d < r; d++)
    if (y->dims[d] != x->dims[d]) return KILN_OK;
  int64_t m = 1, slice = 1, numel = kiln_clop_numel(r, x->dims), xstr[KILN_MAX_RANK];
  for (int d = 0; d < q - 1; d++) m *= ind->dims[d];
  for (int d = (int)k; d < r; d++) slice *= x->dims[d];
  for (int d = 0; d < r; d++) xstr[d] = kiln_clop_numel(r - d - 1, x->dims + d + 1);
  if (m > SCATTER_MAX_TUPLES && slice < 256) return KILN_OK;
  /* int32 indices: offsets in int (Mesa 22.3 rusticl miscompiles widening
     an int read from a buffer to long in these kernels) */
  bool i32 = ind->dtype == KILN_I32;
  if (i32 && numel > INT32_MAX) return KILN_OK;
  const char *it = i32 ? "int" : "long", *ot = i32 ? "uint" : "ulong", *sfx = i32 ? "" : "L";
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  int kc = 0, ks = 0;
  int w = gather_width(c->dev, numel);
  kiln_cl_src *src = c->src;
  if (!s) s = kiln_clop_kernel(op, "copy", &kc);
  if (!s && w > 1)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const %s *x_, ulong xo, __global %s *y_, ulong yo) {\n"
                           "  const ulong i = get_global_id(0) * %dUL;\n  if (i >= %lldUL) return;\n"
                           "  vstore%d(vload%d(0, x_ + xo + i), 0, y_ + yo + i);\n}\n",
                           kiln_clop_kname(op, kc), T, T, w, (long long)numel, w, w);
  else if (!s)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const %s *x_, ulong xo, __global %s *y_, ulong yo) {\n"
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                           "  y_[yo + i] = x_[xo + i];\n}\n",
                           kiln_clop_kname(op, kc), T, T, (long long)numel);
  if (!s) s = kiln_clop_kernel(op, "scatter", &ks);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const %s *ind_, ulong io, __global const %s *u_, ulong uo, "
                           "__global %s *y_, ulong yo, __global int *chk_, ulong co) {\n"
                           "  const %s e = (%s)get_global_id(0);\n  if (e >= %lld%s) return;\n"
                           "  for (%s t = 0; t < %lld%s; t++) {\n    %s o = 0;\n    bool ok = true;\n",
                           kiln_clop_kname(op, ks), it, rk ? "float" : T, rk ? "float" : T, ot, ot, (long long)slice,
                           i32 ? "U" : "UL", ot,
                           (long long)m, i32 ? "U" : "UL", ot);
  for (int64_t j = 0; j < k && !s; j++) {
    s = kiln_cl_src_printf(src,
                           "    {\n    const %s v = ind_[io + t * %lld%s + %lld%s];\n"
                           "    if (v < -%lld%s || v >= %lld%s) {\n    ok = false;\n",
                           it, (long long)k, i32 ? "U" : "UL", (long long)j, i32 ? "U" : "UL", (long long)x->dims[j],
                           sfx, (long long)x->dims[j], sfx);
    char d[24];
    snprintf(d, sizeof d, "%lld", (long long)j);
    if (!s) s = kiln_clop_chk_src(src, "v", !i32, d);
    if (!s)
      s = kiln_cl_src_printf(src, "    }\n    o += (%s)(v < 0 ? v + %lld%s : v) * %lld%s;\n    }\n", ot,
                             (long long)x->dims[j], sfx, (long long)xstr[j], i32 ? "U" : "UL");
  }
  static const char *const comb[] = {"u", "a + u", "a * u", "a > u || isnan(a) ? a : u", "a < u || isnan(a) ? a : u"};
  if (!s && rk)
    s = kiln_cl_src_printf(src,
                           "    if (ok) {\n    const float a = y_[yo + o + e], u = u_[uo + t * %lld%s + e];\n"
                           "    y_[yo + o + e] = %s;\n    }\n  }\n}\n",
                           (long long)slice, i32 ? "U" : "UL", comb[rk]);
  else if (!s)
    s = kiln_cl_src_printf(src, "    if (ok) y_[yo + o + e] = u_[uo + t * %lld%s + e];\n  }\n}\n", (long long)slice,
                           i32 ? "U" : "UL");
  if (!s) kiln_clop_checks(op, (int)k, x->dims);
  if (!s && numel) s = kiln_clop_launch(op, kc, (size_t)(numel / w), 2, (opb[]){IN(0), OUT(0)});
  if (!s && m && slice) s = kiln_clop_launch(op, ks, (size_t)slice, 4, (opb[]){IN(1), IN(2), OUT(0), CHK});
  if (s) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "ScatterND %.8s: %lld tuples of %lld into %lld", red, (long long)m,
           (long long)slice, (long long)numel);
  *out = op;
  return KILN_OK;
}

kiln_status kiln_clop_move_prepare(const op_ctx *c, kiln_cl_op **op) {
  const char *t = c->n->op_type;
  if (!strcmp(t, "Concat")) return concat(c, op);
  if (!strcmp(t, "Gather")) return gather(c, op);
  if (!strcmp(t, "Transpose")) return transpose(c, op);
  if (!strcmp(t, "Where")) return where(c, op);
  if (!strcmp(t, "ScatterND")) return scatternd(c, op);
  if (!strncmp(t, "SparseLengths", 13)) return sls(c, op);
  return pad(c, op);
}
