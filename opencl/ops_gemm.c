/* opencl/ops_gemm: MatMul and Gemm as one SGEMM, or a batched SGEMM with
 * per-batch offsets for numpy-broadcast batch dims (kiln's kernel or
 * CLBlast, ops_sgemm.c), and Conv as a generated direct kernel or as
 * im2col + GEMM (chosen per shape class, see OPS.md); the engine's fused
 * direct conv, with its epilogue and (pooled form) its MaxPool /
 * AveragePool. float32 only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/ops_int.h"

/* ---- MatMul ---- */

/* The engine's views of MatMul inputs (kiln_cl_mm_views_set): one compile
 * at a time per thread. */
static _Thread_local struct {
  const kiln_graph *g;
  kiln_cl_mm_view *v;
} mm_views;

void kiln_cl_mm_views_set(const kiln_graph *g, kiln_cl_mm_view *views) {
  mm_views.g = views ? g : NULL;
  mm_views.v = g ? views : NULL;
}

/* The constant values' finiteness during a lowering (kiln_cl_finite_set). */
static _Thread_local struct {
  const kiln_graph *g;
  signed char *f;
} finite_memo;

void kiln_cl_finite_set(const kiln_graph *g, signed char *finite) {
  finite_memo.g = finite ? g : NULL;
  finite_memo.f = g ? finite : NULL;
}

/* A [rows x cols] matrix with element strides sr, sc (a dim of 1: any) as
 * a GEMM operand: row-major (*t false) with leading dimension *ld >= cols,
 * or transposed (*t true) with *ld >= rows; false when it is neither. */
static bool mm_matrix(int64_t rows, int64_t cols, int64_t sr, int64_t sc, bool *t, size_t *ld) {
  if (rows < 1 || cols < 1 || sr < 0 || sc < 0) return false;
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= cols)) {
    *t = false;
    *ld = (size_t)(rows == 1 ? cols : sr);
    return true;
  }
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= rows)) {
    *t = true;
    *ld = (size_t)(cols == 1 ? rows : sc);
    return true;
  }
  return false;
}

bool kiln_cl_mm_view_ok(const kiln_cl_ttype *t, const int64_t *strides) {
  if (!kiln_clop_is_f32(t) || t->rank < 2) return false;
  for (int d = 0; d < t->rank; d++)
    if (t->dims[d] < 1 || strides[d] < 0) return false;
  bool tr;
  size_t ld;
  return mm_matrix(t->dims[t->rank - 2], t->dims[t->rank - 1], strides[t->rank - 2], strides[t->rank - 1], &tr, &ld);
}

/* The view input k (0: A, 1: B) of c's node is read through, or NULL
 * (dense). Not a transposed B on kiln's SGEMM: its kernel for transB
 * (dot products along K, ops_sgemm.c emit_dot) ran the transformer's
 * scores MatMul (4 x 128x128x64, B = K^T at ldb 256) at 212 us on PoCL
 * against 54 us for the broadcast kernel on a dense copy made in 17 us
 * (opencl/ENGINE.md "Views read in place by MatMul"). */
static kiln_cl_mm_view *mm_view_of(const op_ctx *c, int k) {
  int w = k < c->n->n_in ? c->n->in[k] : -1;
  if (!mm_views.v || mm_views.g != c->g || w < 0 || w >= c->g->n_values) return NULL;
  kiln_cl_mm_view *v = &mm_views.v[w];
  const kiln_cl_ttype *t = &c->in[k];
  if (v->storage < 0 || v->rank != t->rank || !kiln_cl_mm_view_ok(t, v->strides)) return NULL;
  bool tr = false;
  size_t ld;
  mm_matrix(t->dims[t->rank - 2], t->dims[t->rank - 1], v->strides[t->rank - 2], v->strides[t->rank - 1], &tr, &ld);
  if (k == 1 && tr && kiln_clop_sgemm_is_kiln(c->dev)) return NULL;
  return v;
}

/* The view c's node's output is written through (the op's record only),
 * or NULL (dense): rank >= 2 with both inputs' too, C's rows ldc >= N
 * apart with columns 1 apart, batch strides >= 0. */
static kiln_cl_mm_view *mm_out_view_of(const op_ctx *c) {
  int w = c->n->n_out == 1 ? c->n->out[0] : -1;
  if (!mm_views.v || mm_views.g != c->g || w < 0 || w >= c->g->n_values) return NULL;
  kiln_cl_mm_view *v = &mm_views.v[w];
  const kiln_cl_ttype *t = &c->out[0];
  int r = t->rank;
  if (v->storage < 0 || v->rank != r || r < 2 || c->in[0].rank < 2 || c->in[1].rank < 2 || !kiln_clop_is_f32(t))
    return NULL;
  for (int d = 0; d < r; d++)
    if (t->dims[d] < 1 || v->strides[d] < 0) return NULL;
  bool tr = true;
  size_t ld;
  if (!mm_matrix(t->dims[r - 2], t->dims[r - 1], v->strides[r - 2], v->strides[r - 1], &tr, &ld) || tr) return NULL;
  return v;
}

/* MatMul's SGEMM record (a, b, c: IN(0), IN(1), OUT(0)); false when the
 * op does not take the node (the host reports what is wrong). *bcount: the
 * batch count, *one: B shared by every batch and A's and C's batches one
 * matrix of bcount*M rows each (one GEMM). An input with a view
 * (kiln_cl_mm_views_set) is read through it: its matrix's transposition and
 * leading dimension, its batch strides and offset; *va / *vb (optional) get
 * the views used. vc (the op's record): the output too, written through its
 * view (ldc, batch strides, offset), *vc the view or NULL. */
static bool matmul_record(const op_ctx *c, kiln_clop_gemm *g, size_t *bcount, bool *one, kiln_cl_mm_view **va,
                          kiln_cl_mm_view **vb, kiln_cl_mm_view **vc) {
  const kiln_cl_ttype *a = &c->in[0], *b = &c->in[1];
  if (!kiln_clop_is_f32(a) || !kiln_clop_is_f32(b) || !kiln_clop_is_f32(&c->out[0]) || a->rank < 1 || b->rank < 1)
    return false;
  int ra = a->rank, rb = b->rank;
  size_t M = ra == 1 ? 1 : (size_t)a->dims[ra - 2], K = (size_t)a->dims[ra - 1];
  size_t N = rb == 1 ? 1 : (size_t)b->dims[rb - 1], Kb = rb == 1 ? (size_t)b->dims[0] : (size_t)b->dims[rb - 2];
  if (K != Kb) return false;
  kiln_cl_mm_view *xa = mm_view_of(c, 0), *xb = mm_view_of(c, 1), *xc = vc ? mm_out_view_of(c) : NULL;
  bool ta = false, tb = false, tc = false;
  size_t lda = K, ldb = N, ldc = N;
  if (xa) mm_matrix((int64_t)M, (int64_t)K, xa->strides[ra - 2], xa->strides[ra - 1], &ta, &lda);
  if (xb) mm_matrix((int64_t)K, (int64_t)N, xb->strides[rb - 2], xb->strides[rb - 1], &tb, &ldb);
  int rc = c->out[0].rank;
  if (xc) mm_matrix((int64_t)M, (int64_t)N, xc->strides[rc - 2], xc->strides[rc - 1], &tc, &ldc);
  /* batch dims, broadcast numpy-style */
  int na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0, nr = na > nb ? na : nb;
  int64_t bd[KILN_MAX_RANK], as[KILN_MAX_RANK], bs[KILN_MAX_RANK];
  for (int i = 0; i < nr; i++) {
    int ia = i - (nr - na), ib = i - (nr - nb);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    if (da != db && da != 1 && db != 1) return false;
    bd[i] = da > db ? da : db;
  }
  int64_t sa = (int64_t)(M * K), sb = (int64_t)(K * N), inner = 1;
  /* A's and C's batches continue their rows: one matrix of bcount*M rows each */
  bool rows_on = !ta;
  for (int i = nr - 1; i >= 0; i--) {
    int ia = i - (nr - na), ib = i - (nr - nb);
    as[i] = ia >= 0 && a->dims[ia] != 1 ? (xa ? xa->strides[ia] : sa) : 0;
    bs[i] = ib >= 0 && b->dims[ib] != 1 ? (xb ? xb->strides[ib] : sb) : 0;
    if (xa && bd[i] != 1) rows_on = rows_on && as[i] == (int64_t)(M * lda) * inner; /* (dense: sa) */
    if (xc && bd[i] != 1) rows_on = rows_on && xc->strides[i] == (int64_t)(M * ldc) * inner;
    inner *= bd[i];
    if (ia >= 0) sa *= a->dims[ia];
    if (ib >= 0) sb *= b->dims[ib];
  }
  *bcount = (size_t)kiln_clop_numel(nr, bd);
  bool b_bcast = true;
  for (int i = 0; i < nr; i++) b_bcast = b_bcast && bs[i] == 0;
  *one = *bcount == 1 || (b_bcast && rows_on);
  *g = (kiln_clop_gemm){.ta = ta, .tb = tb, .m = *one ? *bcount * M : M, .n = N, .k = K, .lda = lda, .ldb = ldb,
                        .ldc = ldc, .alpha = 1, .a = IN(0), .b = IN(1), .c = OUT(0), .a0 = xa ? xa->offset : 0,
                        .b0 = xb ? xb->offset : 0, .c0 = xc ? xc->offset : 0};
  if (!*one) { /* C batches dense, row-major over bd (or through C's view) */
    int64_t sc = (int64_t)(M * N);
    for (int i = nr - 1; i >= 0; i--) {
      if (bd[i] == 1) continue;
      g->bd[g->nb] = bd[i], g->sa[g->nb] = as[i], g->sb[g->nb] = bs[i], g->sc[g->nb] = xc ? xc->strides[i] : sc;
      sc *= bd[i];
      g->nb++;
    }
    for (int i = 0; i < g->nb / 2; i++) { /* collected innermost first */
      int j = g->nb - 1 - i;
      int64_t t;
      t = g->bd[i], g->bd[i] = g->bd[j], g->bd[j] = t;
      t = g->sa[i], g->sa[i] = g->sa[j], g->sa[j] = t;
      t = g->sb[i], g->sb[i] = g->sb[j], g->sb[j] = t;
      t = g->sc[i], g->sc[i] = g->sc[j], g->sc[j] = t;
    }
  }
  if (va) *va = xa;
  if (vb) *vb = xb;
  if (vc) *vc = xc;
  return true;
}

/* Every dim of t is positive (kiln_cl_op_prepare leaves empty tensors to the host). */
static bool all_positive(const kiln_cl_ttype *t) {
  for (int k = 0; k < t->rank; k++)
    if (t->dims[k] <= 0) return false;
  return true;
}

bool kiln_cl_mm_reads_view(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n,
                           const kiln_cl_ttype *in, const kiln_cl_ttype *out, int w) {
  if (strcmp(n->op_type, "MatMul") || (*n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in != 2 ||
      n->n_out != 1 || n->in[0] < 0 || n->in[1] < 0)
    return false;
  /* an empty operand or output: the op leaves the node to the host, which
     reads and writes dense values (a view there must be materialised) */
  if (!all_positive(&in[0]) || !all_positive(&in[1]) || !all_positive(&out[0])) return false;
  op_ctx c = {.dev = dev, .g = g, .n = n, .in = in, .out = out};
  kiln_clop_gemm rec;
  size_t bcount;
  bool one;
  kiln_cl_mm_view *va, *vb, *vc;
  if (!matmul_record(&c, &rec, &bcount, &one, &va, &vb, w == n->out[0] ? &vc : NULL)) return false;
  if (w == n->out[0]) return vc != NULL;
  return (n->in[0] != w || va) && (n->in[1] != w || vb) && (n->in[0] == w || n->in[1] == w);
}

/* The views the record read its inputs through (now taken); the op's
 * description gets them. */
static void mm_views_taken(kiln_cl_op *op, const kiln_clop_gemm *g, kiln_cl_mm_view *va, kiln_cl_mm_view *vb,
                           kiln_cl_mm_view *vc) {
  if (va) va->taken = true;
  if (vb) vb->taken = true;
  if (vc) vc->taken = true;
  if (!op || !(va || vb || vc)) return;
  op->strided = true;
  size_t l = strlen(op->desc);
  if (va || vb)
    snprintf(op->desc + l, sizeof op->desc - l, ", %s%s%s%s%s read in place", va ? "A" : "",
             va && g->ta ? "^T" : "", va && vb ? " and " : "", vb ? "B" : "", vb && g->tb ? "^T" : "");
  l = strlen(op->desc);
  if (vc) snprintf(op->desc + l, sizeof op->desc - l, ", C written in place (ldc %zu)", g->ldc);
}

static kiln_status matmul(const op_ctx *c, kiln_cl_op **out) {
  kiln_clop_gemm g;
  size_t bcount;
  bool one;
  kiln_cl_mm_view *va, *vb, *vc;
  if (!matmul_record(c, &g, &bcount, &one, &va, &vb, &vc)) return KILN_OK;
  size_t N = g.n, K = g.k;
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  if (s) return s;
  const char *impl;
  if ((s = kiln_clop_sgemm(c, op, &g, &impl))) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "%s sgemm%s %zux%zux%zu%s", impl, one ? "" : " batched", g.m, N, K,
           one ? "" : " per batch");
  if (!one) {
    size_t l = strlen(op->desc);
    snprintf(op->desc + l, sizeof op->desc - l, " x%zu", bcount);
  }
  mm_views_taken(op, &g, va, vb, vc);
  *out = op;
  return KILN_OK;
}

/* ---- Gemm ---- */

/* Gemm's SGEMM record (beta 1 with C: the op prefills y with beta C) and
 * C's broadcast element strides cs over y's [M, N]; false when the op does
 * not take the node. */
static bool gemm_record(const op_ctx *c, kiln_clop_gemm *g, bool *has_c, int64_t cs[2], float *beta) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *a = &c->in[0], *b = &c->in[1], *y = &c->out[0];
  *has_c = n->n_in > 2 && n->in[2] >= 0 && kiln_clop_present(&c->in[2]);
  if (!kiln_clop_is_f32(a) || !kiln_clop_is_f32(b) || !kiln_clop_is_f32(y) || (*has_c && !kiln_clop_is_f32(&c->in[2])))
    return false;
  if (a->rank != 2 || b->rank != 2 || y->rank != 2) return false;
  bool ta = kiln_attr_int(n, "transA", 0) != 0, tb = kiln_attr_int(n, "transB", 0) != 0;
  float alpha = kiln_attr_float(n, "alpha", 1.0f);
  *beta = kiln_attr_float(n, "beta", 1.0f);
  size_t M = (size_t)(ta ? a->dims[1] : a->dims[0]), K = (size_t)(ta ? a->dims[0] : a->dims[1]);
  size_t Kb = (size_t)(tb ? b->dims[1] : b->dims[0]), N = (size_t)(tb ? b->dims[0] : b->dims[1]);
  if (K != Kb || (int64_t)M != y->dims[0] || (int64_t)N != y->dims[1]) return false;
  cs[0] = cs[1] = 0;
  if (*has_c) {
    const kiln_cl_ttype *ct = &c->in[2];
    if (ct->rank > 2) return false;
    int64_t dims[2] = {(int64_t)M, (int64_t)N}, st = 1;
    for (int d = ct->rank - 1; d >= 0; d--) {
      int od = 2 - ct->rank + d;
      if (ct->dims[d] != 1 && ct->dims[d] != dims[od]) return false;
      cs[od] = ct->dims[d] == 1 ? 0 : st;
      st *= ct->dims[d];
    }
  }
  *g = (kiln_clop_gemm){.ta = ta, .tb = tb, .m = M, .n = N, .k = K, .lda = (size_t)a->dims[1],
                        .ldb = (size_t)b->dims[1], .ldc = N, .alpha = alpha, .beta = *has_c ? 1.0f : 0.0f,
                        .a = IN(0), .b = IN(1), .c = OUT(0)};
  return true;
}

static kiln_status gemm(const op_ctx *c, kiln_cl_op **out) {
  kiln_clop_gemm g;
  bool has_c;
  int64_t cs[2];
  float beta;
  if (!gemm_record(c, &g, &has_c, cs, &beta)) return KILN_OK;
  bool ta = g.ta, tb = g.tb;
  size_t M = g.m, N = g.n, K = g.k;
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  if (s) return s;
  if (has_c) {
    /* y = beta * C broadcast, then y += alpha A B */
    int k;
    if ((s = kiln_clop_kernel(op, "gemm_c", &k))) return kiln_clop_fail_free(op, s);
    kiln_cl_src *src = c->src;
    char fb[48];
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const float *c_, ulong co, __global float *y_, ulong yo) {\n"
                           "  const ulong i = get_global_id(0);\n  if (i >= %zuUL) return;\n"
                           "  __global const float *cc = c_ + co;\n  long off = (long)(i / %zuUL) * %lldL + "
                           "(long)(i %% %zuUL) * %lldL;\n"
                           "  y_[yo + i] = %s * cc[off];\n}\n",
                           kiln_clop_kname(op, k), M * N, N, (long long)cs[0], N, (long long)cs[1],
                           kiln_clop_flit(beta, fb, sizeof fb));
    if (!s) s = kiln_clop_launch(op, k, M * N, 2, (opb[]){IN(2), OUT(0)});
    if (s) return kiln_clop_fail_free(op, s);
  }
  const char *impl;
  if ((s = kiln_clop_sgemm(c, op, &g, &impl))) return kiln_clop_fail_free(op, s);
  snprintf(op->desc, sizeof op->desc, "%s sgemm %zux%zux%zu%s%s%s", impl, M, N, K, ta ? " tA" : "", tb ? " tB" : "",
           has_c ? " +C" : "");
  *out = op;
  return KILN_OK;
}

kiln_status kiln_clop_gemm_prepare(const op_ctx *c, kiln_cl_op **op) {
  return strcmp(c->n->op_type, "MatMul") ? gemm(c, op) : matmul(c, op);
}

/* ---- Conv ---- */

#define MAXSP (KILN_MAX_RANK - 2)

typedef struct conv_geo {
  int nsp;
  int64_t N, C, M, G, Cg, Mg;
  int64_t in[MAXSP], k[MAXSP], out[MAXSP], s[MAXSP], d[MAXSP], pb[MAXSP];
  int64_t in_sp, k_sp, out_sp;
  /* The window positions over the zero padding are multiplied (0 * w, NaN
   * for an inf or NaN weight, as the spec's zero padding, the reference
   * and the cpu backend give) rather than skipped: where some window
   * reaches the padding and W is not a constant known to be finite. With
   * finite weights skipping them gives the same sums (0 * w = +-0 added to
   * an accumulator that starts at +0), so the kernels keep their skips. */
  bool pad_taps;
} conv_geo;

/* Whether none of the n floats at p is an inf or a NaN: branch-free over
 * the bits, an exponent of all ones is inf or NaN. 16-byte vectors (GCC's
 * vector extensions: SSE2, the x86-64 baseline), four a step, ORed; the
 * earlier scalar loop (|x| as an integer against inf's, a max per lane)
 * was 3 instructions a float: resnet18's 11.7 M weights 36 M instructions
 * of a warm init (callgrind, rusticl), ~6 ms (read by an isfinite loop for
 * every form a conv was tried in, before that: 19 ms). */
bool kiln_cl_all_finite_f32(const void *p, int64_t n) {
  typedef uint32_t u32x4 __attribute__((vector_size(16)));
  typedef int32_t i32x4 __attribute__((vector_size(16)));
  const unsigned char *b = p;
  const u32x4 e = {0x7f800000u, 0x7f800000u, 0x7f800000u, 0x7f800000u};
  i32x4 bad = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    u32x4 v0, v1, v2, v3;
    memcpy(&v0, b + 4 * i, 16);
    memcpy(&v1, b + 4 * i + 16, 16);
    memcpy(&v2, b + 4 * i + 32, 16);
    memcpy(&v3, b + 4 * i + 48, 16);
    bad |= ((v0 & e) == e) | ((v1 & e) == e) | ((v2 & e) == e) | ((v3 & e) == e);
  }
  uint32_t any = (uint32_t)(bad[0] | bad[1] | bad[2] | bad[3]);
  for (; i < n; i++) {
    uint32_t u;
    memcpy(&u, b + 4 * i, 4);
    any |= (u & 0x7f800000u) == 0x7f800000u;
  }
  return !any;
}

/* W (input 1) is a constant whose every value is finite: the caller's
 * constants (the op's and the fused forms' alike: the initializer, else
 * the shapes' constant), else the graph's initializer. A graph input with
 * an initializer counts: the host never binds it at run time (a weight,
 * plugin/graph.c's runtime_input). */
static bool conv_w_finite(const op_ctx *c) {
  const kiln_node *n = c->n;
  if (n->n_in < 2 || n->in[1] < 0) return false;
  const kiln_tensor *w = c->konst ? c->konst[1] : NULL;
  if (!w && c->g) w = c->g->values[n->in[1]].init;
  if (!w || w->dtype != KILN_F32 || w->strided || !w->data) return false;
  signed char *memo = finite_memo.g == c->g && c->g ? &finite_memo.f[n->in[1]] : NULL;
  if (memo && *memo) return *memo > 0;
  bool finite = kiln_cl_all_finite_f32(w->data, w->numel);
  if (memo) *memo = finite ? 1 : -1;
  return finite;
}

/* Whether some window of conv node n may reach its zero padding: pads not
 * all zero, or auto_pad SAME_*. (Without, conv_geo_make's pad_taps is
 * false: the output dims leave every window inside the input.) */
static bool conv_padded(const kiln_node *n) {
  const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
  if (!strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER")) return true;
  size_t np;
  const int64_t *pd = kiln_attr_ints(n, "pads", &np);
  for (size_t i = 0; pd && i < np; i++)
    if (pd[i]) return true;
  return false;
}

int kiln_cl_finite_facts(const kiln_graph *g, const kiln_shapes *sh, signed char *facts) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *nd = &g->nodes[i];
    if (strcmp(nd->op_type, "Conv") || (*nd->domain && strcmp(nd->domain, "ai.onnx")) || nd->n_in < 2 ||
        nd->in[1] < 0 || facts[nd->in[1]] || !conv_padded(nd))
      continue;
    const kiln_tensor *w = kiln_cl_konst_of(g, sh, nd->in[1]);
    if (!w || w->dtype != KILN_F32 || w->strided || !w->data) continue;
    facts[nd->in[1]] = kiln_cl_all_finite_f32(w->data, w->numel) ? 1 : -1;
    n++;
  }
  return n;
}

/* The geometry, as reference/ops_conv.c computes it; false when the node
 * is not a plain float32 convolution this file handles (the host then
 * runs it and reports what is wrong). */
static bool conv_geo_make(const op_ctx *c, conv_geo *g) {
  const kiln_node *n = c->n;
  const kiln_cl_ttype *x = &c->in[0], *w = &c->in[1], *y = &c->out[0];
  memset(g, 0, sizeof *g);
  if (x->rank < 3 || w->rank != x->rank || y->rank != x->rank) return false;
  g->nsp = x->rank - 2;
  g->N = x->dims[0];
  g->C = x->dims[1];
  g->M = w->dims[0];
  g->G = kiln_attr_int(n, "group", 1);
  if (g->G < 1 || w->dims[1] * g->G != g->C || g->M % g->G) return false;
  g->Cg = g->C / g->G;
  g->Mg = g->M / g->G;
  size_t nst, ndl, npd, nks;
  const int64_t *ks = kiln_attr_ints(n, "kernel_shape", &nks);
  if (ks && nks != (size_t)g->nsp) return false;
  for (size_t i = 0; ks && i < nks; i++)
    if (ks[i] != w->dims[2 + i]) return false;
  const int64_t *st = kiln_attr_ints(n, "strides", &nst), *dl = kiln_attr_ints(n, "dilations", &ndl),
                *pd = kiln_attr_ints(n, "pads", &npd);
  if ((st && nst != (size_t)g->nsp) || (dl && ndl != (size_t)g->nsp) || (pd && npd != 2 * (size_t)g->nsp)) return false;
  const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
  bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"), lower = !strcmp(ap, "SAME_LOWER");
  bool valid = !strcmp(ap, "VALID");
  if (!same && !valid && *ap && strcmp(ap, "NOTSET")) return false;
  g->in_sp = g->k_sp = g->out_sp = 1;
  for (int i = 0; i < g->nsp; i++) {
    g->in[i] = x->dims[2 + i];
    g->k[i] = w->dims[2 + i];
    g->s[i] = st ? st[i] : 1;
    g->d[i] = dl ? dl[i] : 1;
    if (g->s[i] < 1 || g->d[i] < 1 || g->k[i] < 1) return false;
    int64_t eff = (g->k[i] - 1) * g->d[i] + 1;
    if (same) {
      int64_t o = (g->in[i] + g->s[i] - 1) / g->s[i], need = o > 0 ? (o - 1) * g->s[i] + eff - g->in[i] : 0;
      if (need < 0) need = 0;
      g->pb[i] = lower ? need - need / 2 : need / 2;
    } else if (!valid && pd) {
      g->pb[i] = pd[i];
    }
    g->out[i] = y->dims[2 + i];
    g->in_sp *= g->in[i];
    g->k_sp *= g->k[i];
    g->out_sp *= g->out[i];
    /* some window starts before the input or ends past it */
    if (g->out[i] > 0 && (g->pb[i] > 0 || (g->out[i] - 1) * g->s[i] - g->pb[i] + eff > g->in[i])) g->pad_taps = true;
  }
  if (g->pad_taps) g->pad_taps = !conv_w_finite(c);
  return y->dims[0] == g->N && y->dims[1] == g->M;
}

/* Emits "long o<d> = ..." unravelling flat `var` over the output dims. */
static kiln_status emit_unravel(kiln_cl_src *s, const char *pre, const char *var, int nsp, const int64_t *dims) {
  kiln_status st = kiln_cl_src_printf(s, "  { ulong t_ = %s;\n", var);
  for (int d = nsp - 1; d >= 0 && !st; d--) {
    st = kiln_cl_src_printf(s, "    %s%d = (long)(t_ %% %lldUL); t_ /= %lldUL;\n", pre, d, (long long)dims[d],
                            (long long)dims[d]);
  }
  if (!st) st = kiln_cl_src_printf(s, "  }\n");
  return st;
}

/* The window loop: for every kernel position inside the input, `body` runs
 * with `xi` (offset in an input plane) and `ki` (offset in a kernel plane);
 * g->pad_taps: for every kernel position, `inw` false over the padding (xi
 * then a valid offset, not the position's). */
static kiln_status emit_window(kiln_cl_src *s, const conv_geo *g, const char *body) {
  kiln_status st = KILN_OK;
  for (int d = 0; d < g->nsp && !st; d++) {
    st = kiln_cl_src_printf(s,
                            "  for (long k%d = 0; k%d < %lldL; k%d++) {\n"
                            "    %slong p%d = o%d * %lldL - %lldL + k%d * %lldL;\n",
                            d, d, (long long)g->k[d], d, g->pad_taps ? "" : "const ", d, d, (long long)g->s[d],
                            (long long)g->pb[d], d, (long long)g->d[d]);
    if (!st && !g->pad_taps)
      st = kiln_cl_src_printf(s, "    if (p%d < 0 || p%d >= %lldL) continue;\n", d, d, (long long)g->in[d]);
    else if (!st) { /* inw<d>: this dim's position and the outer loops' inside */
      char prev[16] = "true";
      if (d) snprintf(prev, sizeof prev, "inw%d", d - 1);
      st = kiln_cl_src_printf(s,
                              "    const bool inw%d = %s && p%d >= 0 && p%d < %lldL;\n"
                              "    if (p%d < 0 || p%d >= %lldL) p%d = 0;\n",
                              d, prev, d, d, (long long)g->in[d], d, d, (long long)g->in[d], d);
    }
  }
  if (!st && g->pad_taps) st = kiln_cl_src_printf(s, "    const bool inw = inw%d;\n", g->nsp - 1);
  if (st) return st;
  st = kiln_cl_src_printf(s, "    long xi = 0, ki = 0;\n");
  for (int d = 0; d < g->nsp && !st; d++)
    st = kiln_cl_src_printf(s, "    xi = xi * %lldL + p%d; ki = ki * %lldL + k%d;\n", (long long)g->in[d], d,
                            (long long)g->k[d], d);
  if (!st) st = kiln_cl_src_puts(s, body);
  for (int d = 0; d < g->nsp && !st; d++) st = kiln_cl_src_printf(s, "  }\n");
  return st;
}

/* g->pad_taps: `z<wv>`, what a window position over the padding adds for
 * weight `wv` — 0 * w: NaN where w is inf or NaN, else 0. Spelt as a test,
 * not as the product: rusticl (Mesa 22.3) folds `0.0f * w` to 0 where the
 * zero is a constant after unrolling (measured: the kernels below with
 * `(v ? x : 0) * w` lost the NaN on llvmpipe for 8-wide rows); isnan and
 * isinf are kept. */
static kiln_status emit_pad_zero(kiln_cl_src *s, const char *indent, const char *wv) {
  return kiln_cl_src_printf(s, "%sconst float z%s = isnan(%s) || isinf(%s) ? NAN : 0.0f;\n", indent, wv, wv, wv);
}

static kiln_status emit_odecl(kiln_cl_src *s, int nsp) {
  kiln_status st = kiln_cl_src_printf(s, "  long o0");
  for (int d = 1; d < nsp && !st; d++) st = kiln_cl_src_printf(s, ", o%d", d);
  if (!st) st = kiln_cl_src_printf(s, ";\n");
  return st;
}

/* Outputs along the output row per work-item of the 2-D direct kernel
 * (conv_row_src): the row's width where it is at most 8 (4 with 4 output
 * channels per item: at most 16 accumulators), else the largest of 8..5
 * (4..3) dividing it, else 8 (4) with a tail. 0: the one-output kernel
 * (not 2-D, or KILN_CL_CONV_ROWS=0). */
static int conv_row_outputs(const conv_geo *g, int64_t mb) {
  const char *e = getenv("KILN_CL_CONV_ROWS");
  if (g->nsp != 2 || (e && !strcmp(e, "0"))) return 0;
  int64_t ow = g->out[1];
  int cap = mb >= 4 ? 4 : 8;
  if (ow <= cap) return (int)ow;
  for (int t = cap; t > cap / 2; t--)
    if (ow % t == 0) return t;
  return cap;
}

/* The direct kernels' signature: fused_params NULL, the op's form (buffer
 * + element offset pairs, y written); else plain buffers x, w, [b] followed
 * by fused_params (the offsets then 0). */
static kiln_status conv_sig_src(kiln_cl_src *src, bool bias, const char *kname, const char *fused_params) {
  if (fused_params)
    return kiln_cl_src_printf(src,
                              "__kernel void %s(__global const float *restrict x_, __global const float *restrict w_%s%s) {\n"
                              "  const ulong xo = 0, wo = 0%s;\n",
                              kname, bias ? ", __global const float *restrict b_" : "", fused_params,
                              bias ? ", bo = 0" : "");
  return kiln_cl_src_printf(src,
                            "__kernel void %s(__global const float *x_, ulong xo, __global const float *w_, ulong wo, "
                            "%s__global float *y_, ulong yo) {\n",
                            kname, bias ? "__global const float *b_, ulong bo, " : "");
}

/* The row kernels' opening (conv_row_src, conv_vrow_src): the signature of
 * conv_direct_src's two forms, then the item's image n, channels m, output
 * row oh and row block owb (of OWB) and its x/w bases. *it / *sf: the
 * index type ("int" where every offset fits, else "long") and its literal
 * suffix; *items: the items to launch. */
static kiln_status conv_row_head(kiln_cl_src *src, const conv_geo *g, bool bias, int64_t MB, int64_t OWB,
                                 const char *kname, const char *fused_params, const char **it, const char **sf,
                                 int64_t *items) {
  const int64_t MBLK = g->M / MB, OH = g->out[0], wstride = g->Cg * g->k_sp;
  const int64_t total = g->N * MBLK * OH * OWB;
  *items = total;
  const bool small = total < INT32_MAX && g->N * g->C * g->in_sp < INT32_MAX && g->N * g->M * g->out_sp < INT32_MAX &&
                     g->M * wstride < INT32_MAX;
  *it = small ? "int" : "long";
  *sf = small ? "" : "L";
  kiln_status s = conv_sig_src(src, bias, kname, fused_params);
  if (!s)
    s = kiln_cl_src_printf(
        src,
        "  if (get_global_id(0) >= %lldUL) return;\n"
        "  const %s i = (%s)get_global_id(0);\n"
        "  const %s owb = i %% %lld%s, t0 = i / %lld%s, oh = t0 %% %lld%s, t1 = t0 / %lld%s;\n"
        "  const %s m = (t1 %% %lld%s) * %lld%s, n = t1 / %lld%s;\n"
        "  __global const float *xg = x_ + xo + (n * %lld%s + (m / %lld%s) * %lld%s) * %lld%s;\n"
        "  __global const float *wm = w_ + wo + m * %lld%s;\n",
        (long long)total, *it, *it, *it, (long long)OWB, *sf, (long long)OWB, *sf, (long long)OH, *sf, (long long)OH,
        *sf, *it, (long long)MBLK, *sf, (long long)MB, *sf, (long long)MBLK, *sf, (long long)g->C, *sf,
        (long long)g->Mg, *sf, (long long)g->Cg, *sf, (long long)g->in_sp, *sf, (long long)wstride, *sf);
  return s;
}

/* The row kernels' window loops, opened: kh over the kernel's rows (an
 * input row outside the image skipped for the whole item; g->pad_taps:
 * not skipped, `vh` false for it and ih row 0), kw over its columns, and
 * `var` = the input column of output column `base` at kw. */
static kiln_status conv_row_window(kiln_cl_src *src, const conv_geo *g, const char *it, const char *var,
                                   const char *base) {
  kiln_status s = kiln_cl_src_printf(src,
                                     "  for (%s kh = 0; kh < %lld; kh++) {\n"
                                     "    %s%s ih = oh * %lld - %lld + kh * %lld;\n",
                                     it, (long long)g->k[0], g->pad_taps ? "" : "const ", it, (long long)g->s[0],
                                     (long long)g->pb[0], (long long)g->d[0]);
  if (!s)
    s = g->pad_taps ? kiln_cl_src_printf(src,
                                         "    const bool vh = ih >= 0 && ih < %lld;\n"
                                         "    if (!vh) ih = 0;\n",
                                         (long long)g->in[0])
                    : kiln_cl_src_printf(src, "    if (ih < 0 || ih >= %lld) continue;\n", (long long)g->in[0]);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "    for (%s kw = 0; kw < %lld; kw++) {\n"
                           "      const %s %s = %s * %lld - %lld + kw * %lld;\n",
                           it, (long long)g->k[1], it, var, base, (long long)g->s[1], (long long)g->pb[1],
                           (long long)g->d[1]);
  return s;
}

/* One output of a row kernel: column `col` (an expression) of row oh, if
 * it is inside the row, gets its accumulator (per channel b: `<acc><b><lane>`,
 * e.g. acc3_1 or acc0_1.s5) plus the bias, through the fused epilogue or
 * into y_. */
static kiln_status conv_row_store(kiln_cl_src *src, const conv_geo *g, bool bias, int64_t MB, const char *it,
                                  const char *col, const char *acc, const char *lane, const char *fused_params,
                                  const char *fused_store) {
  kiln_status s = kiln_cl_src_printf(src, "  if (%s < %lld) {\n    const %s o = oh * %lld + %s;\n", col,
                                     (long long)g->out[1], it, (long long)g->out[1], col);
  for (int b = 0; b < MB && !s; b++) {
    char bb[48] = "", av[48];
    if (bias) snprintf(bb, sizeof bb, " + b_[bo + m + %d]", b);
    snprintf(av, sizeof av, "%s%d%s", acc, b, lane);
    if (fused_params)
      s = kiln_cl_src_printf(src, "  {\n  const long ep_i = (long)(n * %lld + m + %d) * %lldL + (long)o;\n"
                                  "  const float anc = %s%s;\n%s  }\n",
                             (long long)g->M, b, (long long)g->out_sp, av, bb, fused_store);
    else
      s = kiln_cl_src_printf(src, "    y_[yo + (ulong)((long)(n * %lld + m + %d) * %lldL + (long)o)] = %s%s;\n",
                             (long long)g->M, b, (long long)g->out_sp, av, bb);
  }
  if (!s) s = kiln_cl_src_printf(src, "  }\n");
  return s;
}

/* The 2-D direct kernel: a work-item per (image, MB output channels,
 * output row, row block) computes OT outputs of the row, ow = owb + j * OWB
 * for j < OT (OWB = ceil(OW / OT): neighbouring items take neighbouring
 * columns, so a driver that vectorises across work-items loads them
 * together), each weight loaded once for its OT outputs and each input
 * value once for the MB channels. An input row outside the image is
 * skipped for the item; a column outside is skipped per output (its
 * product not added, as the one-output kernel skips it; g->pad_taps: such
 * rows and columns add 0 * w); columns past the row's end are computed
 * from in-range loads and not stored. Sizes are literals, the index
 * arithmetic int where every offset fits. The same parameters and
 * epilogue (`ep_i`, `anc`) as conv_direct_src. */
static kiln_status conv_row_src(kiln_cl_src *src, const conv_geo *g, bool bias, int64_t MB, int OT, const char *kname,
                                const char *fused_params, const char *fused_store, int64_t *items) {
  const int64_t OW = g->out[1], W = g->in[1];
  const int64_t OWB = (OW + OT - 1) / OT, wstride = g->Cg * g->k_sp;
  const char *it, *sf;
  kiln_status s = conv_row_head(src, g, bias, MB, OWB, kname, fused_params, &it, &sf, items);
  for (int j = 0; j < OT && !s; j++)
    for (int b = 0; b < MB && !s; b++) s = kiln_cl_src_printf(src, "  float acc%d_%d = 0.0f;\n", j, b);
  if (!s) s = conv_row_window(src, g, it, "iwb", "owb");
  for (int j = 0; j < OT && !s; j++)
    s = kiln_cl_src_printf(src,
                           "      const %s iw%d = iwb + %lld;\n"
                           "      const bool v%d = %siw%d >= 0 && iw%d < %lld;\n"
                           "      const %s x%d = ih * %lld + (v%d ? iw%d : 0);\n",
                           it, j, (long long)(j * OWB * g->s[1]), j, g->pad_taps ? "vh && " : "", j, j, (long long)W,
                           it, j, (long long)W, j, j);
  if (!s)
    s = kiln_cl_src_printf(src, "      for (%s cc = 0; cc < %lld; cc++) {\n"
                                "        __global const float *xc = xg + cc * %lld;\n",
                           it, (long long)g->Cg, (long long)g->in_sp);
  for (int b = 0; b < MB && !s; b++) {
    char wv[16];
    snprintf(wv, sizeof wv, "w%d", b);
    s = kiln_cl_src_printf(src, "        const float w%d = wm[%lld + cc * %lld + kh * %lld + kw];\n", b,
                           (long long)(b * wstride), (long long)g->k_sp, (long long)g->k[1]);
    if (!s && g->pad_taps) s = emit_pad_zero(src, "        ", wv);
  }
  for (int j = 0; j < OT && !s; j++) {
    s = kiln_cl_src_printf(src, "        { const float xv = xc[x%d];\n", j);
    for (int b = 0; b < MB && !s; b++) { /* pad_taps: 0 * w over the padding */
      char z[16] = "0.0f";
      if (g->pad_taps) snprintf(z, sizeof z, "zw%d", b);
      s = kiln_cl_src_printf(src, "          acc%d_%d += v%d ? xv * w%d : %s;\n", j, b, j, b, z);
    }
    if (!s) s = kiln_cl_src_printf(src, "        }\n");
  }
  if (!s) s = kiln_cl_src_printf(src, "      }\n    }\n  }\n");
  for (int j = 0; j < OT && !s; j++) {
    char col[48], acc[24];
    snprintf(col, sizeof col, "(owb + %lld)", (long long)(j * OWB));
    snprintf(acc, sizeof acc, "acc%d_", j);
    s = conv_row_store(src, g, bias, MB, it, col, acc, "", fused_params, fused_store);
  }
  if (!s) s = kiln_cl_src_printf(src, "}\n");
  return s;
}

/* The vector row kernel (conv_vrow_src) on this device: a 2-D conv with
 * column stride 1 or 2 and rows of at least 8 outputs, on a device whose
 * preferred float vector width is at least 8 (PoCL runs a kernel's window
 * loops scalar per work-item — its work-group vectoriser takes only the
 * innermost loop —, so the vectors must be the item's own); not on
 * llvmpipe (it vectorises across work-items); KILN_CL_CONV_ROWS=0 or
 * =scalar: never, =vector: wherever the shape allows. Rows too narrow for
 * an item's vector loads go lane by lane and still measured faster in
 * float8 accumulators than in the scalar row kernel (PoCL mobilenetv2, its
 * 14- and 28-wide rows sent to the scalar form or not: run min 7.1-7.8
 * against 6.4-6.6 ms, 4 alternated pairs). */
static bool conv_vrow_ok(const conv_geo *g, const kiln_cl_device *dev) {
  const char *e = getenv("KILN_CL_CONV_ROWS");
  if (g->nsp != 2 || (g->s[1] != 1 && g->s[1] != 2) || g->out[1] < 8) return false;
  if (e && (!strcmp(e, "0") || !strcmp(e, "scalar"))) return false;
  if (e && !strcmp(e, "vector")) return true;
  return dev && dev->pref_vec_float >= 8;
}

/* The 2-D direct kernel with float8 vectors in the item: a work-item per
 * (image, MB channels, output row, block of 8V consecutive outputs) holds V
 * float8 accumulators per channel (V = 2 where MB <= 2, else 1). Per
 * window position, where every column the item reads is inside the row, the
 * inputs are vector loads (column stride 1: vload8; 2: the even lanes of a
 * vload16) and each weight a scalar for all 8V outputs; elsewhere (the
 * row's edges) lane by lane, a column outside the row skipped (its product
 * not added, as the scalar kernels skip it; g->pad_taps: the edge path
 * also takes the rows outside the image, and adds 0 * w for every input
 * outside). Outputs past the row's end are not stored. The same
 * parameters and epilogue as conv_direct_src. */
static kiln_status conv_vrow_src(kiln_cl_src *src, const conv_geo *g, bool bias, int64_t MB, const char *kname,
                                 const char *fused_params, const char *fused_store, int64_t *items) {
  const int V = MB <= 2 ? 2 : 1, OT = 8 * V;
  const int64_t OW = g->out[1], W = g->in[1], SW = g->s[1];
  const int64_t OWB = (OW + OT - 1) / OT, wstride = g->Cg * g->k_sp;
  const char *it, *sf;
  kiln_status s = conv_row_head(src, g, bias, MB, OWB, kname, fused_params, &it, &sf, items);
  if (!s) s = kiln_cl_src_printf(src, "  const %s ow0 = owb * %d;\n", it, OT);
  for (int u = 0; u < V && !s; u++)
    for (int b = 0; b < MB && !s; b++) s = kiln_cl_src_printf(src, "  float8 acc%d_%d = (float8)0.0f;\n", u, b);
  /* the last column the item's loads touch: vload8 reads 8 columns, the
     stride-2 vload16 16 (its odd lanes unused) */
  const int64_t span = SW == 1 ? OT - 1 : 2 * OT - 1;
  if (!s) s = conv_row_window(src, g, it, "iws", "ow0");
  if (!s)
    s = kiln_cl_src_printf(src,
                           "      __global const float *xr = xg + ih * %lld;\n"
                           "      __global const float *wk = wm + kh * %lld + kw;\n"
                           "      if (%siws >= 0 && iws + %lld < %lld) {\n"
                           "        for (%s cc = 0; cc < %lld; cc++) {\n"
                           "          __global const float *xc = xr + cc * %lld + iws;\n",
                           (long long)W, (long long)g->k[1], g->pad_taps ? "vh && " : "", (long long)span,
                           (long long)W, it, (long long)g->Cg, (long long)g->in_sp);
  for (int u = 0; u < V && !s; u++)
    s = SW == 1 ? kiln_cl_src_printf(src, "          const float8 x%d = vload8(0, xc + %d);\n", u, 8 * u)
                : kiln_cl_src_printf(src, "          const float8 x%d = vload16(0, xc + %d).even;\n", u, 16 * u);
  for (int b = 0; b < MB && !s; b++) {
    s = kiln_cl_src_printf(src, "          const float w%d = wk[%lld + cc * %lld];\n", b, (long long)(b * wstride),
                           (long long)g->k_sp);
    for (int u = 0; u < V && !s; u++) s = kiln_cl_src_printf(src, "          acc%d_%d += x%d * w%d;\n", u, b, u, b);
  }
  if (!s)
    s = kiln_cl_src_printf(src, "        }\n      } else {\n        for (%s cc = 0; cc < %lld; cc++) {\n"
                                "          __global const float *xc = xr + cc * %lld;\n",
                           it, (long long)g->Cg, (long long)g->in_sp);
  for (int u = 0; u < V && !s; u++) {
    s = kiln_cl_src_printf(src, "          int8 k%d;\n          float8 x%d;\n", u, u);
    for (int l = 0; l < 8 && !s; l++)
      s = kiln_cl_src_printf(src,
                             "          { const %s c_ = iws + %lld; const bool v_ = %sc_ >= 0 && c_ < %lld;\n"
                             "            k%d.s%d = v_ ? -1 : 0; x%d.s%d = v_ ? xc[c_] : 0.0f; }\n",
                             it, (long long)((8 * u + l) * SW), g->pad_taps ? "vh && " : "", (long long)W, u, l, u, l);
  }
  for (int b = 0; b < MB && !s; b++) {
    char wv[16], z[32] = "(float8)0.0f";
    snprintf(wv, sizeof wv, "w%d", b);
    s = kiln_cl_src_printf(src, "          const float w%d = wk[%lld + cc * %lld];\n", b, (long long)(b * wstride),
                           (long long)g->k_sp);
    if (!s && g->pad_taps) { /* 0 * w over the padding */
      s = emit_pad_zero(src, "          ", wv);
      snprintf(z, sizeof z, "(float8)zw%d", b);
    }
    for (int u = 0; u < V && !s; u++)
      s = kiln_cl_src_printf(src, "          acc%d_%d += select(%s, x%d * w%d, k%d);\n", u, b, z, u, b, u);
  }
  if (!s) s = kiln_cl_src_printf(src, "        }\n      }\n    }\n  }\n");
  for (int u = 0; u < V && !s; u++)
    for (int l = 0; l < 8 && !s; l++) {
      char col[48], acc[24], lane[8];
      snprintf(col, sizeof col, "(ow0 + %d)", 8 * u + l);
      snprintf(acc, sizeof acc, "acc%d_", u);
      snprintf(lane, sizeof lane, ".s%d", l);
      s = conv_row_store(src, g, bias, MB, it, col, acc, lane, fused_params, fused_store);
    }
  if (!s) s = kiln_cl_src_printf(src, "}\n");
  return s;
}

/* One work-item per output position and MB consecutive output channels of
 * one group (MB = 4 or 2 when it divides the group's channels, else 1): it
 * sums its window over the group's input channels, each input value loaded
 * once for the MB weights; a 2-D conv takes conv_row_src instead. */
/* The direct kernel's source: named kname; fused_params NULL: the op's
 * form (buffer + element offset pairs, y written); else plain buffers x, w,
 * [b] followed by fused_params, and each output element goes to
 * fused_store (statements seeing `ep_i`, Y's flat index, and `anc`, the
 * value with the bias added). *items: work-items to launch. */
static kiln_status conv_direct_src(kiln_cl_src *src, const conv_geo *g, const kiln_cl_device *dev, bool bias,
                                   const char *kname, const char *fused_params, const char *fused_store,
                                   int64_t *items) {
  int64_t MB = g->Mg % 4 == 0 ? 4 : g->Mg % 2 == 0 ? 2 : 1, MBLK = g->M / MB;
  if (conv_vrow_ok(g, dev)) return conv_vrow_src(src, g, bias, MB, kname, fused_params, fused_store, items);
  int OT = conv_row_outputs(g, MB);
  if (OT > 0) return conv_row_src(src, g, bias, MB, OT, kname, fused_params, fused_store, items);
  int64_t total = g->N * MBLK * g->out_sp, wstride = g->Cg * g->k_sp;
  *items = total;
  kiln_status s = conv_sig_src(src, bias, kname, fused_params);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                           "  const ulong o = i %% %lldUL, t = i / %lldUL, m = (t %% %lldUL) * %lldUL, n = t / %lldUL;\n"
                           "  __global const float *xg = x_ + xo + (n * %lldUL + (m / %lldUL) * %lldUL) * %lldUL;\n"
                           "  __global const float *wm = w_ + wo + m * %lldUL;\n",
                           (long long)total, (long long)g->out_sp, (long long)g->out_sp, (long long)MBLK, (long long)MB,
                           (long long)MBLK, (long long)g->C, (long long)g->Mg, (long long)g->Cg, (long long)g->in_sp,
                           (long long)wstride);
  if (!s) s = emit_odecl(src, g->nsp);
  if (!s) s = emit_unravel(src, "o", "o", g->nsp, g->out);
  for (int b = 0; b < MB && !s; b++) s = kiln_cl_src_printf(src, "  float acc%d = 0.0f;\n", b);
  char body[1024];
  int w = snprintf(body, sizeof body,
                   "    for (long cc = 0; cc < %lldL; cc++) {\n      const float xv = xg[cc * %lldL + xi];\n",
                   (long long)g->Cg, (long long)g->in_sp);
  for (int b = 0; b < MB; b++)
    if (g->pad_taps) /* 0 * w over the padding (emit_pad_zero) */
      w += snprintf(body + w, sizeof body - (size_t)w,
                    "      { const float w_ = wm[%lldL + cc * %lldL + ki];\n"
                    "        acc%d += inw ? xv * w_ : isnan(w_) || isinf(w_) ? NAN : 0.0f; }\n",
                    (long long)(b * wstride), (long long)g->k_sp, b);
    else
      w += snprintf(body + w, sizeof body - (size_t)w, "      acc%d += xv * wm[%lldL + cc * %lldL + ki];\n", b,
                    (long long)(b * wstride), (long long)g->k_sp);
  snprintf(body + w, sizeof body - (size_t)w, "    }\n");
  if (!s) s = emit_window(src, g, body);
  for (int b = 0; b < MB && !s; b++) {
    char bb[48] = "";
    if (bias) snprintf(bb, sizeof bb, " + b_[bo + m + %d]", b);
    if (fused_params)
      s = kiln_cl_src_printf(src, "  {\n  const long ep_i = (long)((n * %lldUL + m + %d) * %lldUL + o);\n"
                                  "  const float anc = acc%d%s;\n%s  }\n",
                             (long long)g->M, b, (long long)g->out_sp, b, bb, fused_store);
    else
      s = kiln_cl_src_printf(src, "  y_[yo + ((n * %lldUL + m + %d) * %lldUL + o)] = acc%d%s;\n", (long long)g->M, b,
                             (long long)g->out_sp, b, bb);
  }
  if (!s) s = kiln_cl_src_printf(src, "}\n");
  return s;
}

/* A pooling inside the direct kernel (kiln_cl_conv_direct_fused): its
 * geometry over the conv's output and its kind. */
typedef struct conv_pool {
  kiln_clop_pool_geo g;
  bool is_max, include_pad;
  int64_t mb; /* output channels per work-item */
} conv_pool;

/* Positions of a pooling window at most (the accumulators a work-item
 * holds are its positions x its channels, at most this many too). */
#define POOL_MAX_WIN 16

/* The pooled form of the direct kernel: one work-item per pooled position
 * and MB channels. The window's positions (row-major, jd[d] their
 * coordinates) are the item's conv outputs, each with its own
 * accumulators, summed in the conv kernel's order inside ONE window loop:
 * every weight is loaded once for them all (a padding input of a position
 * is skipped, as the unfused kernel skips it; g->pad_taps: it adds 0 * w).
 * Then, position by position, the bias, the epilogue (`store` sets ep_v)
 * and the pool's reduction
 * (MaxPool: positions outside the conv's output skipped, NaN wins;
 * AveragePool: the count of reference/ops_nn.c), written to py_. */
static kiln_status conv_pooled_src(kiln_cl_src *src, const conv_geo *g, const conv_pool *p, bool bias,
                                   const char *kname, const char *params, const char *store, int64_t *items) {
  int64_t MB = p->mb, MBLK = g->M / MB, osp = p->g.out_plane;
  int64_t total = g->N * MBLK * osp, wstride = g->Cg * g->k_sp;
  int nw = 1, nsp = g->nsp;
  for (int d = 0; d < nsp; d++) nw *= (int)p->g.k[d];
  *items = total;
  kiln_status s = kiln_cl_src_printf(
      src,
      "__kernel void %s(__global const float *restrict x_, __global const float *restrict w_%s%s, "
      "__global float *restrict py_) {\n"
      "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
      "  const ulong q = i %% %lldUL, t = i / %lldUL, m = (t %% %lldUL) * %lldUL, n = t / %lldUL;\n"
      "  __global const float *xg = x_ + (n * %lldUL + (m / %lldUL) * %lldUL) * %lldUL;\n"
      "  __global const float *wm = w_ + m * %lldUL;\n",
      kname, bias ? ", __global const float *restrict b_" : "", params, (long long)total, (long long)osp,
      (long long)osp, (long long)MBLK, (long long)MB, (long long)MBLK, (long long)g->C, (long long)g->Mg,
      (long long)g->Cg, (long long)g->in_sp, (long long)wstride);
  if (!s) s = kiln_cl_src_printf(src, "  long q0");
  for (int d = 1; d < nsp && !s; d++) s = kiln_cl_src_printf(src, ", q%d", d);
  if (!s) s = kiln_cl_src_printf(src, ";\n");
  if (!s) s = emit_unravel(src, "q", "q", nsp, p->g.out);
  if (!s && !p->is_max) s = kiln_cl_src_printf(src, "  long n_in = 0, n_pad = 0;\n");
  /* each window position j: its conv output o<d>_<j>, whether it is one (u<j>) */
  for (int j = 0; j < nw && !s; j++) {
    int64_t jd[KILN_MAX_RANK];
    for (int d = nsp - 1, r = j; d >= 0; d--) {
      jd[d] = r % p->g.k[d];
      r /= (int)p->g.k[d];
    }
    for (int d = 0; d < nsp && !s; d++) {
      int64_t off = jd[d] * p->g.d[d] - p->g.pb[d];
      s = kiln_cl_src_printf(src, "  const long o%d_%d = q%d * %lldL %c %lldL;\n", d, j, d, (long long)p->g.s[d],
                             off < 0 ? '-' : '+', (long long)(off < 0 ? -off : off));
    }
    if (!s) s = kiln_cl_src_printf(src, "  const bool u%d = true", j);
    for (int d = 0; d < nsp && !s; d++)
      s = kiln_cl_src_printf(src, " && o%d_%d >= 0 && o%d_%d < %lldL", d, j, d, j, (long long)g->out[d]);
    if (!s) s = kiln_cl_src_printf(src, ";\n");
    if (!s && !p->is_max) {
      s = kiln_cl_src_printf(src, "  n_in += u%d;\n  n_pad += true", j);
      for (int d = 0; d < nsp && !s; d++)
        s = kiln_cl_src_printf(src, " && o%d_%d >= -%lldL && o%d_%d < %lldL", d, j, (long long)p->g.pb[d], d, j,
                               (long long)(g->out[d] + p->g.pe[d]));
      if (!s) s = kiln_cl_src_printf(src, ";\n");
    }
    for (int b = 0; b < MB && !s; b++) s = kiln_cl_src_printf(src, "  float a%d_%d = 0.0f;\n", j, b);
  }
  /* one window loop of the conv for every position */
  for (int d = 0; d < nsp && !s; d++)
    s = kiln_cl_src_printf(src, "  for (long k%d = 0; k%d < %lldL; k%d++) {\n", d, d, (long long)g->k[d], d);
  if (!s) s = kiln_cl_src_printf(src, "    long ki = 0;\n");
  for (int d = 0; d < nsp && !s; d++) s = kiln_cl_src_printf(src, "    ki = ki * %lldL + k%d;\n", (long long)g->k[d], d);
  for (int j = 0; j < nw && !s; j++) {
    s = kiln_cl_src_printf(src, "    bool v%d = u%d;\n    long x%d = 0;\n", j, j, j);
    for (int d = 0; d < nsp && !s; d++)
      s = kiln_cl_src_printf(src,
                             "    { const long p_ = o%d_%d * %lldL - %lldL + k%d * %lldL;\n"
                             "      v%d = v%d && p_ >= 0 && p_ < %lldL; x%d = x%d * %lldL + p_; }\n",
                             d, j, (long long)g->s[d], (long long)g->pb[d], d, (long long)g->d[d], j, j,
                             (long long)g->in[d], j, j, (long long)g->in[d]);
  }
  if (!s) s = kiln_cl_src_printf(src, "    for (long cc = 0; cc < %lldL; cc++) {\n", (long long)g->Cg);
  for (int b = 0; b < MB && !s; b++) {
    char wv[16];
    snprintf(wv, sizeof wv, "w%d", b);
    s = kiln_cl_src_printf(src, "      const float w%d = wm[%lldL + cc * %lldL + ki];\n", b, (long long)(b * wstride),
                           (long long)g->k_sp);
    if (!s && g->pad_taps) s = emit_pad_zero(src, "      ", wv);
  }
  for (int j = 0; j < nw && !s; j++) {
    if (g->pad_taps) { /* 0 * w over the padding (and for a position outside the conv's output: not used) */
      s = kiln_cl_src_printf(src, "      {\n        const float xv = xg[cc * %lldL + (v%d ? x%d : 0)];\n",
                             (long long)g->in_sp, j, j);
      for (int b = 0; b < MB && !s; b++)
        s = kiln_cl_src_printf(src, "        a%d_%d += v%d ? xv * w%d : zw%d;\n", j, b, j, b, b);
    } else {
      s = kiln_cl_src_printf(src, "      if (v%d) {\n        const float xv = xg[cc * %lldL + x%d];\n", j,
                             (long long)g->in_sp, j);
      for (int b = 0; b < MB && !s; b++) s = kiln_cl_src_printf(src, "        a%d_%d += xv * w%d;\n", j, b, b);
    }
    if (!s) s = kiln_cl_src_printf(src, "      }\n");
  }
  if (!s) s = kiln_cl_src_printf(src, "    }\n");
  for (int d = 0; d < nsp && !s; d++) s = kiln_cl_src_printf(src, "  }\n");
  /* bias, epilogue and the pool's reduction, position by position */
  for (int b = 0; b < MB && !s; b++)
    s = kiln_cl_src_printf(src, p->is_max ? "  float r%d = -INFINITY; int f%d = 0;\n" : "  float r%d = 0.0f;\n", b, b);
  for (int j = 0; j < nw && !s; j++) {
    s = kiln_cl_src_printf(src, "  if (u%d) {\n    ulong o = 0;\n", j);
    for (int d = 0; d < nsp && !s; d++)
      s = kiln_cl_src_printf(src, "    o = o * %lldUL + (ulong)o%d_%d;\n", (long long)g->out[d], d, j);
    for (int b = 0; b < MB && !s; b++) {
      char bb[48] = "";
      if (bias) snprintf(bb, sizeof bb, " + b_[m + %d]", b);
      s = kiln_cl_src_printf(src, "  {\n  const long ep_i = (long)((n * %lldUL + m + %d) * %lldUL + o);\n"
                                  "  const float anc = a%d_%d%s;\n  float ep_v;\n%s",
                             (long long)g->M, b, (long long)g->out_sp, j, b, bb, store);
      if (!s && p->is_max)
        s = kiln_cl_src_printf(src, "  if (!f%d || ep_v > r%d || (isnan(ep_v) && !isnan(r%d))) { f%d = 1; r%d = ep_v; }\n  }\n",
                               b, b, b, b, b);
      else if (!s)
        s = kiln_cl_src_printf(src, "  r%d += ep_v;\n  }\n", b);
    }
    if (!s) s = kiln_cl_src_printf(src, "  }\n");
  }
  if (!s && !p->is_max) s = kiln_cl_src_printf(src, "  const long dv = %s;\n", p->include_pad ? "n_pad" : "n_in");
  for (int b = 0; b < MB && !s; b++) {
    s = kiln_cl_src_printf(src, "  py_[(n * %lldUL + m + %d) * %lldUL + q] = ", (long long)g->M, b, (long long)osp);
    if (!s) s = kiln_cl_src_printf(src, p->is_max ? "r%d;\n" : "dv ? r%d / (float)dv : NAN;\n", b);
  }
  if (!s) s = kiln_cl_src_printf(src, "}\n");
  return s;
}

/* One work-item per output position and MB consecutive output channels of
 * one group (MB = 4 or 2 when it divides the group's channels, else 1): it
 * sums its window over the group's input channels, each input value loaded
 * once for the MB weights. */
static kiln_status conv_direct(const op_ctx *c, kiln_cl_op *op, const conv_geo *g, bool bias) {
  int k;
  kiln_status s = kiln_clop_kernel(op, "conv", &k);
  if (s) return s;
  int64_t total;
  s = conv_direct_src(c->src, g, c->dev, bias, kiln_clop_kname(op, k), NULL, NULL, &total);
  if (!s) {
    opb args4[] = {IN(0), IN(1), IN(2), OUT(0)}, args3[] = {IN(0), IN(1), OUT(0)};
    s = kiln_clop_launch(op, k, (size_t)total, bias ? 4 : 3, bias ? args4 : args3);
  }
  return s;
}

/* The conv is its own column matrix: 1x1, stride 1, unpadded (the GEMM
 * reads X as it is). */
static bool conv_pointwise(const conv_geo *g) {
  bool pointwise = true;
  for (int d = 0; d < g->nsp; d++)
    pointwise = pointwise && g->k[d] == 1 && g->s[d] == 1 && g->pb[d] == 0 && g->in[d] == g->out[d];
  return pointwise;
}

/* The im2col kernel kname: the column matrix [N*G][Cg*k_sp][out_sp] of X,
 * zeros where the window leaves the input, a work-item per element
 * (*items). fused false: the op's form (x_, xo, col, co: buffer + element
 * offset pairs); true: the engine's (x_, then col, the variant's scratch,
 * as the last parameter; codegen.h). */
static kiln_status im2col_src(kiln_cl_src *src, const conv_geo *g, const char *kname, bool fused, int64_t *items) {
  int64_t total = g->N * g->G * g->Cg * g->k_sp * g->out_sp;
  *items = total;
  kiln_status s = kiln_cl_src_printf(
      src, fused ? "__kernel void %s(__global const float *restrict x_, __global float *restrict col) {\n"
                   "  const ulong xo = 0, co = 0;\n"
                 : "__kernel void %s(__global const float *x_, ulong xo, __global float *col, ulong co) {\n",
      kname);
  if (!s)
    s = kiln_cl_src_printf(src,
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                           "  const ulong o = i %% %lldUL, t1 = i / %lldUL, kp = t1 %% %lldUL, t2 = t1 / %lldUL;\n"
                           "  const ulong cc = t2 %% %lldUL, ng = t2 / %lldUL;\n"
                           "  /* ng = n * G + grp: channel n * C + grp * Cg + cc = ng * Cg + cc */\n"
                           "  __global const float *xc = x_ + xo + (ng * %lldUL + cc) * %lldUL;\n",
                           (long long)total, (long long)g->out_sp, (long long)g->out_sp, (long long)g->k_sp,
                           (long long)g->k_sp, (long long)g->Cg, (long long)g->Cg, (long long)g->Cg,
                           (long long)g->in_sp);
  if (!s) s = emit_odecl(src, g->nsp);
  if (!s) s = emit_unravel(src, "o", "o", g->nsp, g->out);
  if (!s) s = kiln_cl_src_printf(src, "  long k0");
  for (int d = 1; d < g->nsp && !s; d++) s = kiln_cl_src_printf(src, ", k%d", d);
  if (!s) s = kiln_cl_src_printf(src, ";\n");
  if (!s) s = emit_unravel(src, "k", "kp", g->nsp, g->k);
  if (!s) s = kiln_cl_src_printf(src, "  bool inside = true; long xi = 0;\n");
  for (int d = 0; d < g->nsp && !s; d++)
    s = kiln_cl_src_printf(src,
                           "  { const long p = o%d * %lldL - %lldL + k%d * %lldL;\n"
                           "    inside = inside && p >= 0 && p < %lldL; xi = xi * %lldL + p; }\n",
                           d, (long long)g->s[d], (long long)g->pb[d], d, (long long)g->d[d], (long long)g->in[d],
                           (long long)g->in[d]);
  if (!s) s = kiln_cl_src_printf(src, "  col[co + i] = inside ? xc[xi] : 0.0f;\n}\n");
  return s;
}

/* Whether the conv goes through kiln's SGEMM reading X directly
 * (implicit GEMM, no column matrix), and its geometry in *cv: a 1-D or 2-D
 * conv with strides 1 or 2 that is not pointwise (a pointwise conv's X is
 * its column matrix already) on kiln's SGEMM, output rows wide enough, and
 * not g->pad_taps. KILN_CL_CONV_IMPLICIT=0 keeps im2col + SGEMM (the
 * comparison), =1 takes every such conv whatever its rows (ENGINE.md
 * "Implicit GEMM"). */
static bool conv_implicit(const conv_geo *g, const kiln_cl_device *dev, kiln_clop_iconv *cv) {
  const char *e = getenv("KILN_CL_CONV_IMPLICIT");
  if ((e && !strcmp(e, "0")) || !kiln_clop_sgemm_is_kiln(dev) || g->nsp > 2 || conv_pointwise(g)) return false;
  /* its window loops skip the rows over the padding (kyb_, kye_): 0 * w
     is not added there; the column matrix has the zeros */
  if (g->pad_taps) return false;
  int o = g->nsp - 1; /* the last spatial dim is the row */
  for (int d = 0; d < g->nsp; d++)
    if (g->s[d] > 2) return false;
  /* a tile's columns lie in one output row: rows narrower than 3/4 of
     the device's vector (7 on PoCL's 16) leave most lanes idle, and
     im2col + SGEMM measured faster there (ENGINE.md) */
  bool force = e && !strcmp(e, "1");
  if (!force && 4 * g->out[o] < 3 * (int64_t)dev->pref_vec_float) return false;
  *cv = (kiln_clop_iconv){.h = o ? g->in[0] : 1, .w = g->in[o], .oh = o ? g->out[0] : 1, .ow = g->out[o],
                          .kh = o ? g->k[0] : 1, .kw = g->k[o], .sh = o ? g->s[0] : 1, .sw = g->s[o],
                          .ph = o ? g->pb[0] : 0, .pw = g->pb[o], .dh = o ? g->d[0] : 1, .dw = g->d[o],
                          .cg = g->Cg, .xtotal = g->N * g->C * g->in_sp};
  return true;
}

/* The SGEMM record of a conv through GEMM: one GEMM per (image, group),
 * W_g [Mg x rows] . col block [rows x out] (pointwise: x[n][grp*Cg..] is
 * that matrix; cv: an implicit GEMM, B is X's image and group, read
 * through the window) into y[n][grp*Mg..]; A, B, C and beta are the
 * caller's. */
static void conv_gemm_record(const conv_geo *g, const kiln_clop_iconv *cv, kiln_clop_gemm *gm) {
  int64_t rows = g->Cg * g->k_sp;
  memset(gm, 0, sizeof *gm);
  gm->m = (size_t)g->Mg, gm->n = (size_t)g->out_sp, gm->k = (size_t)rows, gm->lda = (size_t)rows;
  gm->ldb = gm->ldc = (size_t)g->out_sp, gm->alpha = 1;
  gm->cv = cv;
  int64_t bimg = cv ? g->C * g->in_sp : g->G * rows * g->out_sp, bgrp = cv ? g->Cg * g->in_sp : rows * g->out_sp;
  const int64_t bd[2] = {g->N, g->G}, sa[2] = {0, g->Mg * rows}, sb[2] = {bimg, bgrp},
                sc[2] = {g->M * g->out_sp, g->Mg * g->out_sp};
  for (int d = 0; d < 2; d++) {
    if (bd[d] == 1) continue;
    gm->bd[gm->nb] = bd[d], gm->sa[gm->nb] = sa[d], gm->sb[gm->nb] = sb[d], gm->sc[gm->nb] = sc[d];
    gm->nb++;
  }
}

/* im2col into scratch [N*G][Cg*k_sp][out_sp] (skipped for a 1x1, stride 1,
 * unpadded conv: the input already is that matrix), then one GEMM per
 * (image, group) — batched — into y prefilled with the bias. */
static kiln_status conv_gemm(const op_ctx *c, kiln_cl_op *op, const conv_geo *g, bool bias, const char **impl) {
  kiln_cl_src *src = c->src;
  kiln_status s = KILN_OK;
  kiln_clop_iconv cv;
  bool implicit = conv_implicit(g, c->dev, &cv);
  bool pointwise = conv_pointwise(g);
  int scr = -1;
  if (!pointwise && !implicit) {
    int64_t total = g->N * g->G * g->Cg * g->k_sp * g->out_sp;
    int k;
    if ((s = kiln_clop_scratch(op, (size_t)total * sizeof(float), &scr)) || (s = kiln_clop_kernel(op, "im2col", &k)))
      return s;
    s = im2col_src(src, g, kiln_clop_kname(op, k), false, &total);
    if (!s) s = kiln_clop_launch(op, k, (size_t)total, 2, (opb[]){IN(0), SCR(scr)});
    if (s) return s;
  }
  if (bias) {
    int k;
    if ((s = kiln_clop_kernel(op, "bias", &k))) return s;
    int64_t total = g->N * g->M * g->out_sp;
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const float *b_, ulong bo, __global float *y_, ulong yo) {\n"
                           "  const ulong i = get_global_id(0);\n  if (i >= %lldUL) return;\n"
                           "  y_[yo + i] = b_[bo + (i / %lldUL) %% %lldUL];\n}\n",
                           kiln_clop_kname(op, k), (long long)total, (long long)g->out_sp, (long long)g->M);
    if (!s) s = kiln_clop_launch(op, k, (size_t)total, 2, (opb[]){IN(2), OUT(0)});
    if (s) return s;
  }
  kiln_clop_gemm gm;
  conv_gemm_record(g, implicit ? &cv : NULL, &gm);
  gm.beta = bias ? 1.0f : 0.0f;
  gm.a = IN(1), gm.b = pointwise || implicit ? IN(0) : SCR(scr), gm.c = OUT(0);
  return kiln_clop_sgemm(c, op, &gm, impl);
}

/* The column matrix's bytes (0 for an implicit GEMM, which has none). */
static size_t conv_col_bytes(const conv_geo *g, const kiln_cl_device *dev) {
  kiln_clop_iconv cv;
  if (conv_implicit(g, dev, &cv)) return 0;
  return (size_t)(g->N * g->G * g->Cg * g->k_sp * g->out_sp) * sizeof(float);
}

/* The choice between the two (OPS.md has the measurements behind it):
 * KILN_CL_CONV=direct|gemm forces one. Where the GEMM is CLBlast's on a CPU
 * device that vectorises across work-items (preferred float width < 8:
 * rusticl/llvmpipe), direct always: measured 1.5-12x faster there on every
 * class, from stems to 512->512 3x3 and the 320->1280 head (CLBlast's
 * generic parameters run at 0.2-0.9 GFLOP/s on llvmpipe), with or without
 * a following pooling. Elsewhere with CLBlast, GEMM pays for its column
 * matrix and its launch overhead only with a long reduction (Cg*k >= 256)
 * and enough rows and columns (Mg, out >= 16); depthwise and other thin
 * groups, stems with few input channels and small pointwise convs go
 * direct. kiln's SGEMM beats the direct kernel on every measured class
 * with Mg >= 16 (stems and small pointwise convs included, and also where
 * the direct kernel would take a following 2x2 pooling into itself): then
 * only the reduction's floor drops to 16. */
static bool conv_use_gemm(const conv_geo *g, size_t col_bytes, const kiln_cl_device *dev) {
  const char *e = getenv("KILN_CL_CONV");
  bool fits = col_bytes <= dev->max_mem_alloc_size / 2 && col_bytes <= ((size_t)1 << 30);
  if (e && !strcmp(e, "direct")) return false;
  if (e && !strcmp(e, "gemm")) return fits;
  bool kiln = kiln_clop_sgemm_is_kiln(dev);
  if (!kiln && (dev->type & CL_DEVICE_TYPE_CPU) && dev->pref_vec_float < 8) return false;
  int64_t rows = g->Cg * g->k_sp;
  return fits && g->Mg >= 16 && rows >= (kiln ? 16 : 256) && g->out_sp >= 16;
}

kiln_status kiln_clop_conv_prepare(const op_ctx *c, kiln_cl_op **out) {
  const kiln_node *n = c->n;
  bool bias = n->n_in > 2 && n->in[2] >= 0 && kiln_clop_present(&c->in[2]);
  if (!kiln_clop_is_f32(&c->in[0]) || !kiln_clop_is_f32(&c->in[1]) || !kiln_clop_is_f32(&c->out[0]) ||
      (bias && !kiln_clop_is_f32(&c->in[2])))
    return KILN_OK;
  conv_geo g;
  if (!conv_geo_make(c, &g)) return KILN_OK;
  if (bias && (c->in[2].rank != 1 || c->in[2].dims[0] != g.M)) return KILN_OK;
  kiln_cl_op *op;
  kiln_status s = kiln_clop_new(c, &op);
  if (s) return s;
  bool use_gemm = conv_use_gemm(&g, conv_col_bytes(&g, c->dev), c->dev);
  const char *impl = "";
  s = use_gemm ? conv_gemm(c, op, &g, bias, &impl) : conv_direct(c, op, &g, bias);
  if (s) return kiln_clop_fail_free(op, s);
  char sh[64];
  kiln_clop_iconv cv;
  const char *how = !use_gemm                              ? "direct"
                    : conv_pointwise(&g)                     ? "pointwise+"
                    : conv_implicit(&g, c->dev, &cv) ? "implicit+"
                                                             : "im2col+";
  snprintf(op->desc, sizeof op->desc, "conv %s%s %lldx%lld->%lld k%s g%lld", how, impl,
           (long long)g.N, (long long)g.C, (long long)g.M, kiln_shape_str(g.nsp, g.k, sh, sizeof sh), (long long)g.G);
  *out = op;
  return KILN_OK;
}

/* The fused forms take float32 A, B, the output and (third) the bias / C. */
static bool f32_operands(const kiln_cl_ttype *in, const kiln_cl_ttype *out, bool third) {
  return kiln_clop_is_f32(&in[0]) && kiln_clop_is_f32(&in[1]) && kiln_clop_is_f32(&out[0]) &&
         (!third || kiln_clop_is_f32(&in[2]));
}

/* Whether pooling pl may go into the direct kernel of a conv with output
 * type y: *p made; else false with why set. */
static bool conv_pool_make(const kiln_cl_device *dev, const kiln_graph *gr, const kiln_cl_conv_pool *pl,
                           const kiln_cl_ttype *y, conv_pool *p, char *why, size_t wsz) {
  const kiln_node *pn = pl->node;
  memset(p, 0, sizeof *p);
  p->is_max = !strcmp(pn->op_type, "MaxPool");
  if ((*pn->domain && strcmp(pn->domain, "ai.onnx")) || (!p->is_max && strcmp(pn->op_type, "AveragePool"))) {
    snprintf(why, wsz, "%s is not a MaxPool or an AveragePool", pn->op_type);
    return false;
  }
  if (p->is_max && pn->n_out > 1 && pn->out[1] >= 0) {
    snprintf(why, wsz, "the MaxPool has an Indices output");
    return false;
  }
  if (!kiln_clop_is_f32(&pl->out)) {
    snprintf(why, wsz, "the pooling's output is not float32");
    return false;
  }
  op_ctx c = {.dev = dev, .g = gr, .n = pn, .in = y, .out = &pl->out};
  if (!kiln_clop_pool_geo_make(&c, p->is_max, &p->g)) {
    snprintf(why, wsz, "the %s's window is not one the device kernels take%s", pn->op_type,
             p->is_max ? "" : " (dilations other than 1?)");
    return false;
  }
  for (int d = 0; d < p->g.nsp; d++) {
    int64_t ek = (p->g.k[d] - 1) * p->g.d[d] + 1;
    if (p->g.s[d] < ek) {
      snprintf(why, wsz,
               "the %s's windows overlap (spatial dim %d: extent %lld, stride %lld): fused, the conv outputs they "
               "share would be computed more than once",
               pn->op_type, d, (long long)ek, (long long)p->g.s[d]);
      return false;
    }
  }
  int64_t nw = 1;
  for (int d = 0; d < p->g.nsp; d++) nw *= p->g.k[d];
  if (nw > POOL_MAX_WIN) {
    snprintf(why, wsz, "the %s's window has %lld positions (at most %d in one work-item)", pn->op_type, (long long)nw,
             POOL_MAX_WIN);
    return false;
  }
  p->include_pad = !p->is_max && kiln_attr_int(pn, "count_include_pad", 0) == 1;
  return true;
}

kiln_status kiln_cl_conv_direct_fused(const kiln_cl_device *dev, const kiln_graph *gr, const kiln_node *n,
                                      const kiln_cl_ttype *in, const kiln_cl_ttype *out,
                                      const kiln_tensor *const *konst, const char *name,
                                      const char *params, const char *store, kiln_cl_conv_pool *pool,
                                      kiln_cl_src *src, int64_t *items, bool *ok) {
  *ok = false;
  *items = 0;
  if (pool) snprintf(pool->why, sizeof pool->why, "the conv does not take the direct kernel");
  op_ctx c = {.dev = dev, .g = gr, .n = n, .in = in, .out = out, .konst = konst};
  if (strcmp(n->op_type, "Conv") || (*n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in < 2 || n->n_out != 1)
    return KILN_OK;
  bool bias = n->n_in > 2 && n->in[2] >= 0 && kiln_clop_present(&in[2]);
  if (!f32_operands(in, out, bias)) return KILN_OK;
  conv_geo g;
  if (!conv_geo_make(&c, &g)) return KILN_OK;
  if (bias && (in[2].rank != 1 || in[2].dims[0] != g.M)) return KILN_OK;
  for (int k = 0; k < in[0].rank; k++)
    if (in[0].dims[k] <= 0 || out[0].dims[k] <= 0) return KILN_OK;
  if (conv_use_gemm(&g, conv_col_bytes(&g, dev), dev)) return KILN_OK;
  conv_pool cp;
  if (pool && !conv_pool_make(dev, gr, pool, out, &cp, pool->why, sizeof pool->why)) return KILN_OK;
  kiln_status s;
  if (pool) { /* channels per item: as the plain kernel's, fewer where the window's accumulators would pass 16 */
    int64_t nw = 1;
    for (int d = 0; d < g.nsp; d++) nw *= cp.g.k[d];
    cp.mb = g.Mg % 4 == 0 && nw * 4 <= POOL_MAX_WIN ? 4 : g.Mg % 2 == 0 && nw * 2 <= POOL_MAX_WIN ? 2 : 1;
    s = conv_pooled_src(src, &g, &cp, bias, name, params, store, items);
  } else {
    s = conv_direct_src(src, &g, dev, bias, name, params, store, items);
  }
  *ok = !s;
  return s;
}

/* ---- the fused forms' SGEMM with the epilogue in its store ---- */

kiln_status kiln_cl_gemm_fused(const kiln_cl_device *dev, const kiln_graph *gr, const kiln_node *n,
                               const kiln_cl_ttype *in, const kiln_cl_ttype *out,
                               const kiln_tensor *const *konst, const char *name,
                               const char *params, const char *store, kiln_cl_src *src, int *vals, int *n_vals,
                               int64_t *items, kiln_cl_gemm_cols *cols, bool *ok) {
  *ok = false;
  *items = 0;
  *n_vals = 0;
  cols->items = cols->floats = 0;
  if (!kiln_clop_sgemm_is_kiln(dev) || (*n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in < 2 || n->n_out != 1)
    return KILN_OK;
  op_ctx c = {.dev = dev, .g = gr, .n = n, .in = in, .out = out, .konst = konst};
  bool has_e = n->n_in > 2 && n->in[2] >= 0 && kiln_clop_present(&in[2]);
  if (!f32_operands(in, out, has_e)) return KILN_OK;
  for (int k = 0; k < out[0].rank; k++)
    if (out[0].dims[k] <= 0) return KILN_OK;
  kiln_clop_gemm g;
  kiln_cl_mm_view *va = NULL, *vb = NULL;
  char add[160] = "", add_row[160] = "";
  int ia = 0, ib = 1;
  bool b_last = false;
  kiln_clop_iconv cv;
  if (!strcmp(n->op_type, "Conv")) {
    /* pointwise (1x1, stride 1, unpadded): X is the GEMM's B as it is;
       implicit: the SGEMM reads X through the window; else the im2col
       kernel writes B, the column matrix, into the scratch */
    conv_geo geo;
    if (!conv_geo_make(&c, &geo)) return KILN_OK;
    if (has_e && (in[2].rank != 1 || in[2].dims[0] != geo.M)) return KILN_OK;
    for (int k = 0; k < in[0].rank; k++)
      if (in[0].dims[k] <= 0) return KILN_OK;
    size_t col = conv_col_bytes(&geo, dev);
    if (!conv_use_gemm(&geo, col, dev)) return KILN_OK;
    bool implicit = conv_implicit(&geo, dev, &cv);
    if (!conv_pointwise(&geo) && !implicit) {
      kiln_status s = im2col_src(cols->src, &geo, cols->name, true, &cols->items);
      if (s) return s;
      cols->floats = cols->items;
      b_last = true;
    }
    conv_gemm_record(&geo, implicit ? &cv : NULL, &g);
    if (has_e) { /* the channel is C's row: one bias per row (row_ / out_sp = image * M + channel) */
      snprintf(add, sizeof add, " + e_[(ep_i / %lldL) %% %lldL]", (long long)geo.out_sp, (long long)geo.M);
      snprintf(add_row, sizeof add_row, "e_[(row_ / %lldL) %% %lldL]", (long long)geo.out_sp, (long long)geo.M);
    }
    ia = 1, ib = b_last ? -1 : 0; /* A = W, B = X or the columns */
  } else {
    /* MatMul / Gemm: the op's own record, beta C added in the store */
    if (!strcmp(n->op_type, "MatMul")) {
      size_t bcount;
      bool one;
      if (!matmul_record(&c, &g, &bcount, &one, &va, &vb, NULL)) return KILN_OK; /* (C dense: ep_i) */
      has_e = false;
    } else if (!strcmp(n->op_type, "Gemm")) {
      int64_t cs[2];
      float beta;
      if (!gemm_record(&c, &g, &has_e, cs, &beta)) return KILN_OK;
      g.beta = 0;
      char bl[48];
      if (has_e)
        snprintf(add, sizeof add, " + %s%se_[(ep_i / %zuL) * %lldL + (ep_i %% %zuL) * %lldL]",
                 beta == 1.0f ? "" : kiln_clop_flit(beta, bl, sizeof bl), beta == 1.0f ? "" : " * ", g.n,
                 (long long)cs[0], g.n, (long long)cs[1]);
    } else {
      return KILN_OK;
    }
  }
  kiln_clop_epi ep = {params, store, add, has_e, b_last, *add_row ? add_row : NULL};
  kiln_status s = kiln_clop_sgemm_fused(dev, &g, &ep, name, src, items);
  if (s) return s;
  mm_views_taken(NULL, &g, va, vb, NULL);
  vals[(*n_vals)++] = n->in[ia];
  if (ib >= 0) vals[(*n_vals)++] = n->in[ib];
  if (has_e) vals[(*n_vals)++] = n->in[2];
  *ok = true;
  return KILN_OK;
}

/* ---- the bias / C left to the epilogue kernel ---- */

/* The suffix of an integer literal in OpenCL C: none while it fits an int
 * (the expression then takes the index's own type: a kernel indexing in
 * int stays in int — llvmpipe scalarises 64-bit division), else L. */
static const char *lsuf(int64_t v) { return v <= 2147483647 ? "" : "L"; }

bool kiln_cl_op_addend(const kiln_cl_device *dev, const kiln_graph *gr, const kiln_node *n, const kiln_cl_ttype *in,
                       const kiln_cl_ttype *out, const char *buf, const char *idx, char *add, size_t size) {
  *add = 0;
  op_ctx c = {.dev = dev, .g = gr, .n = n, .in = in, .out = out};
  if ((*n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in < 3 || n->in[2] < 0 || n->n_out != 1 ||
      !kiln_clop_present(&in[2]) || !all_positive(&in[0]) || !all_positive(&in[1]) || !all_positive(&in[2]) ||
      !all_positive(&out[0]))
    return false;
  int w;
  if (!strcmp(n->op_type, "Conv")) {
    /* kiln_clop_conv_prepare's own tests: a valid bias takes it with or without */
    conv_geo g;
    if (!f32_operands(in, out, true) || !conv_geo_make(&c, &g) || in[2].rank != 1 || in[2].dims[0] != g.M)
      return false;
    w = snprintf(add, size, " + %s[((%s) / %lld%s) %% %lld%s]", buf, idx, (long long)g.out_sp, lsuf(g.out_sp),
                 (long long)g.M, lsuf(g.M));
  } else if (!strcmp(n->op_type, "Gemm")) {
    /* gemm_record with a valid C takes the node without it too */
    kiln_clop_gemm g;
    bool has_c;
    int64_t cs[2];
    float beta;
    if (!gemm_record(&c, &g, &has_c, cs, &beta) || !has_c) return false;
    char bl[48];
    int64_t n = (int64_t)g.n;
    w = snprintf(add, size, " + %s%s%s[((%s) / %lld%s) * %lld%s + ((%s) %% %lld%s) * %lld%s]",
                 beta == 1.0f ? "" : kiln_clop_flit(beta, bl, sizeof bl), beta == 1.0f ? "" : " * ", buf, idx,
                 (long long)n, lsuf(n), (long long)cs[0], lsuf(cs[0]), idx, (long long)n, lsuf(n), (long long)cs[1],
                 lsuf(cs[1]));
  } else {
    return false;
  }
  if (w < 0 || (size_t)w >= size) {
    *add = 0;
    return false;
  }
  return true;
}
