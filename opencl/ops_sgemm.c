/* opencl/ops_sgemm: one (batched) SGEMM step of an op — kiln's own
 * generated kernel (sizes, strides, transposes and batch offsets printed as
 * literals, so it goes through the program build and the on-disk binary
 * cache like every generated kernel) or a CLBlast call; the choice and the
 * kernel's design are in opencl/ENGINE.md ("GEMM"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/ops_int.h"

/* A register tile: each work item computes mr rows x nc*nv columns of C.
 * dot: vectors along K (nv wide) for transB (op(B) rows are B's rows), the
 * nc columns are nc rows of B; else the rows of B are loaded nv wide and
 * A's elements broadcast. */
typedef struct gemm_tile {
  bool dot;
  int mr, nv, nc;
} gemm_tile;

static int vec_width(unsigned pref) { return pref >= 16 ? 16 : pref >= 8 ? 8 : pref >= 4 ? 4 : 1; }

/* The tile for g on dev: KILN_CL_GEMM_TILE="mr,nv,nc" overrides (a tuning
 * knob), else per the device's preferred float vector width. */
static gemm_tile tile_pick(const kiln_cl_device *dev, const kiln_clop_gemm *g) {
  gemm_tile t;
  t.dot = g->tb && !g->ta;
  int nv = vec_width(dev->pref_vec_float);
  if (t.dot) {
    t.mr = 4, t.nv = nv, t.nc = 4;
  } else if (nv > 1) {
    t.mr = 8, t.nv = nv, t.nc = 2;
  } else {
    t.mr = 4, t.nv = 1, t.nc = 4;
  }
  const char *e = getenv("KILN_CL_GEMM_TILE");
  int a, b, c;
  if (e && sscanf(e, "%d,%d,%d", &a, &b, &c) == 3 && a >= 1 && a <= 16 &&
      (b == 1 || b == 2 || b == 4 || b == 8 || b == 16) && c >= 1 && c <= 8)
    t.mr = a, t.nv = b, t.nc = c;
  /* small operands: no lanes or rows beyond them */
  if (t.dot) {
    while (t.nv > 1 && (size_t)t.nv / 2 >= g->k) t.nv /= 2;
    while (t.nc > 1 && (size_t)t.nc > g->n) t.nc--;
  } else {
    while (t.nv > 1 && (size_t)t.nv / 2 >= g->n) t.nv /= 2;
    while (t.nc > 1 && (size_t)((t.nc - 1) * t.nv) >= g->n) t.nc--;
  }
  if (g->cv) { /* an implicit conv's tiles lie in one output row: no wider than it */
    while (t.nc > 1 && (int64_t)(t.nc - 1) * t.nv >= g->cv->ow) t.nc--;
    while (t.nv > 1 && t.nv / 2 >= g->cv->ow) t.nv /= 2;
  }
  if ((size_t)t.mr > g->m) t.mr = (int)g->m;
  return t;
}

/* A column tile's first column and the columns' limit for the stores' and
 * the ragged tile's guards: j0 and N, or (an implicit conv, whose tiles
 * lie in one output row) ox_ and the row's width. */
static const char *col_var(const kiln_clop_gemm *g) { return g->cv ? "ox_" : "j0"; }
static size_t col_lim(const kiln_clop_gemm *g) { return g->cv ? (size_t)g->cv->ow : g->n; }

/* KILN_CL_GEMM=clblast|kiln|auto; auto: kiln's kernel where the device
 * runs a work item's vectors as SIMD vectors (preferred float width >= 8,
 * PoCL on AVX2/AVX-512), CLBlast elsewhere (rusticl/llvmpipe reports 1 and
 * vectorises across work items; see ENGINE.md for the measurements). */
bool kiln_clop_sgemm_is_kiln(const kiln_cl_device *dev) {
  const char *e = getenv("KILN_CL_GEMM");
  if (e && !strcmp(e, "kiln")) return true;
  if (e && !strcmp(e, "clblast")) return false;
  return dev->pref_vec_float >= 8;
}

static const char *vtype(int nv, char *buf, size_t n) {
  if (nv == 1)
    snprintf(buf, n, "float");
  else
    snprintf(buf, n, "float%d", nv);
  return buf;
}

/* "p[0]" or "vloadN(0, p)" */
static kiln_status emit_vload(kiln_cl_src *s, int nv, const char *p) {
  return nv == 1 ? kiln_cl_src_printf(s, "(%s)[0]", p) : kiln_cl_src_printf(s, "vload%d(0, %s)", nv, p);
}

static const char *const lane = "0123456789abcdef";

/* the broadcast kernel's loop over K; gather: B's lanes loaded one by one
 * from the clamped column indices cj<l> (transB, or the last column tile) */
static kiln_status emit_bcast_loop(kiln_cl_src *s, const kiln_clop_gemm *g, gemm_tile t, bool gather) {
  char vt[16];
  vtype(t.nv, vt, sizeof vt);
  size_t astep = g->ta ? g->lda : 1;
  kiln_status st = kiln_cl_src_printf(s, "    for (ulong k = 0; k < %zuUL; k++) {\n", g->k);
  if (!st && !gather) st = kiln_cl_src_printf(s, "      __global const float *bk = B + k * %zuUL + j0;\n", g->ldb);
  for (int c = 0; c < t.nc && !st; c++) {
    st = kiln_cl_src_printf(s, "      const %s b%d = ", vt, c);
    if (st) break;
    if (!gather) {
      char p[32];
      snprintf(p, sizeof p, "bk + %d", c * t.nv);
      st = emit_vload(s, t.nv, p);
    } else {
      st = kiln_cl_src_printf(s, "(%s)(", vt);
      for (int l = 0; l < t.nv && !st; l++) {
        int j = c * t.nv + l;
        st = g->tb ? kiln_cl_src_printf(s, "%sB[cj%d * %zuUL + k]", l ? ", " : "", j, g->ldb)
                   : kiln_cl_src_printf(s, "%sB[k * %zuUL + cj%d]", l ? ", " : "", g->ldb, j);
      }
      if (!st) st = kiln_cl_src_printf(s, ")");
    }
    if (!st) st = kiln_cl_src_printf(s, ";\n");
  }
  for (int r = 0; r < t.mr && !st; r++) {
    st = kiln_cl_src_printf(s, "      { const %s x = (%s)(a%d[k * %zuUL]);", vt, vt, r, astep);
    for (int c = 0; c < t.nc && !st; c++) st = kiln_cl_src_printf(s, " c%d_%d = fma(x, b%d, c%d_%d);", r, c, c, r, c);
    if (!st) st = kiln_cl_src_printf(s, " }\n");
  }
  if (!st) st = kiln_cl_src_printf(s, "    }\n");
  return st;
}

/* Fused: the tile's accumulators (dot: h<r>_<c>, else c<r>_<c> vectors)
 * into t_, row-major over the tile's mr x (nc or nc*nv) elements. */
static kiln_status emit_tile_dump(kiln_cl_src *s, gemm_tile t, bool dot) {
  int nw = dot ? t.nc : t.nc * t.nv;
  kiln_status st = KILN_OK;
  for (int r = 0; r < t.mr && !st; r++)
    for (int c = 0; c < t.nc && !st; c++)
      st = dot || t.nv == 1
               ? kiln_cl_src_printf(s, "  t_[%d] = %c%d_%d;\n", r * nw + c * (dot ? 1 : t.nv), dot ? 'h' : 'c', r, c)
               : kiln_cl_src_printf(s, "  vstore%d(c%d_%d, 0, t_ + %d);\n", t.nv, r, c, r * nw + c * t.nv);
  return st;
}

/* Fused: closes the GEMM's block (emit_head), then each element of the
 * tile inside C — row i, column j — is the epilogue's anchor
 * anc = alpha * t_ + e->add at ep_i = its flat index in C (the batch's
 * offset oc + i * ldc + j), and e->body runs on it: a loop over the tile's
 * rows, inside it one over a row's columns with no guard where the tile is
 * inside C's columns (straight-line code the compiler may vectorise), the
 * body printed once (twice with a ragged last column tile). */
static kiln_status emit_epi_store(kiln_cl_src *s, const kiln_clop_gemm *g, gemm_tile t, int nw,
                                  const kiln_clop_epi *e) {
  char al[48];
  bool a1 = g->alpha == 1.0f, ragged = col_lim(g) % (size_t)nw != 0;
  kiln_clop_flit(g->alpha, al, sizeof al);
  kiln_status st = kiln_cl_src_printf(s,
                                      "  }\n"
                                      "  for (int rq_ = 0; rq_ < %d; rq_++) {\n"
                                      "    const ulong i = i0 + (ulong)rq_;\n"
                                      "    if (i >= %zuUL) break;\n"
                                      "    const long row_ = oc + (long)(i * %zuUL + j0);\n",
                                      t.mr, g->m, g->ldc);
  if (!st && e->add_row) st = kiln_cl_src_printf(s, "    const float ar_ = %s;\n", e->add_row);
  for (int pass = 0; pass < (ragged ? 2 : 1) && !st; pass++) {
    if (ragged)
      st = kiln_cl_src_printf(s, pass ? "    else\n" : "    if (%s + %dUL <= %zuUL)\n", col_var(g), nw, col_lim(g));
    char guard[64] = "";
    if (pass) snprintf(guard, sizeof guard, "    if (%s + (ulong)cq_ >= %zuUL) break;\n", col_var(g), col_lim(g));
    if (!st)
      st = kiln_cl_src_printf(s,
                              "    for (int cq_ = 0; cq_ < %d; cq_++) {\n%s"
                              "    const long ep_i = row_ + cq_;\n"
                              "    const float anc = %s%st_[rq_ * %d + cq_]%s;\n"
                              "%s    }\n",
                              nw, guard, a1 ? "" : al, a1 ? "" : " * ", nw,
                              e->add_row ? " + ar_" : e->add ? e->add : "", e->body);
  }
  if (!st) st = kiln_cl_src_printf(s, "  }\n");
  return st;
}

/* the broadcast kernel's stores; tail: lane by lane for columns < N;
 * fused (e): the accumulators into the tile array t_ (emit_epi_store) */
static kiln_status emit_bcast_store(kiln_cl_src *s, const kiln_clop_gemm *g, gemm_tile t, bool tail,
                                    const kiln_clop_epi *e) {
  if (e) return emit_tile_dump(s, t, false);
  char al[48], vt[16];
  vtype(t.nv, vt, sizeof vt);
  bool a1 = g->alpha == 1.0f;
  kiln_clop_flit(g->alpha, al, sizeof al);
  bool acc = g->beta != 0.0f;
  kiln_status st = KILN_OK;
  for (int r = 0; r < t.mr && !st; r++) {
    if (g->m % (size_t)t.mr != 0) st = kiln_cl_src_printf(s, "    if (i0 + %dUL < %zuUL)", r, g->m);
    if (!st) st = kiln_cl_src_printf(s, "    { __global float *cr = C + (i0 + %dUL) * %zuUL + j0;\n", r, g->ldc);
    for (int c = 0; c < t.nc && !st; c++) {
      if (!tail) {
        char p[32];
        snprintf(p, sizeof p, "cr + %d", c * t.nv);
        st = kiln_cl_src_printf(s, "      { %s v = %s%sc%d_%d", vt, a1 ? "" : al, a1 ? "" : " * ", r, c);
        if (!st && acc) {
          st = kiln_cl_src_printf(s, " + ");
          if (!st) st = emit_vload(s, t.nv, p);
        }
        if (!st)
          st = t.nv == 1 ? kiln_cl_src_printf(s, "; (%s)[0] = v; }\n", p)
                         : kiln_cl_src_printf(s, "; vstore%d(v, 0, %s); }\n", t.nv, p);
      } else {
        st = kiln_cl_src_printf(s, "      { float t_[%d]; ", t.nv);
        if (!st)
          st = t.nv == 1 ? kiln_cl_src_printf(s, "t_[0] = c%d_%d;", r, c)
                         : kiln_cl_src_printf(s, "vstore%d(c%d_%d, 0, t_);", t.nv, r, c);
        if (!st)
          st = kiln_cl_src_printf(
              s, " for (int l = 0; l < %d; l++) if (%s + %dUL + (ulong)l < %zuUL) cr[%d + l] = %s%st_[l]", t.nv,
              col_var(g), c * t.nv, col_lim(g), c * t.nv, a1 ? "" : al, a1 ? "" : " * ");
        if (!st && acc) st = kiln_cl_src_printf(s, " + cr[%d + l]", c * t.nv);
        if (!st) st = kiln_cl_src_printf(s, "; }\n");
      }
    }
    if (!st) st = kiln_cl_src_printf(s, "    }\n");
  }
  return st;
}

/* The kernel's head: ids, the batch offsets unravelled from literals, the
 * tile's first row i0 and column j0. Fused (e): plain buffers a_, b_, [e_]
 * and e's parameters (b_ after them with e->b_last); a 1-D launch with a slot per row of C per column
 * tile, so that the run's rows of a symbolic dim are a prefix of the items
 * (opencl/engine_sym.c): only a tile's first row works, tiles counted from
 * the batch's first row or the launch's (a padded symbolic dim launches
 * each block of rows at its global offset; a tile reaching past a block
 * computes the next block's rows again, the same values); the GEMM's own names live in
 * a block opened here (emit_epi_store closes it) so that they shadow, not
 * clash with, the epilogue's parameters a0, a1, ... */
static kiln_status emit_head(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, size_t nt, size_t mt,
                             size_t batch, int nw, int mr, const kiln_clop_epi *e) {
  (void)mt;
  kiln_status st =
      e ? kiln_cl_src_printf(s,
                             "__kernel void %s(__global const float *restrict a_%s%s%s%s) {\n"
                             "  const ulong wi_ = get_global_id(0);\n"
                             "  if (wi_ >= %zuUL) return;\n"
                             "  const ulong jt = wi_ %% %zuUL, r_ = (wi_ / %zuUL) %% %zuUL, bi = wi_ / "
                             "%zuUL;\n"
                             "  const ulong o_ = get_global_offset(0) / %zuUL, s_ = o_ > bi * %zuUL ? o_ - "
                             "bi * %zuUL : 0;\n"
                             "  if ((r_ - s_) %% %dUL) return;\n"
                             "  const ulong ao = 0, bo = 0;\n"
                             "  long oa = %lld, ob = %lld, oc = 0;\n",
                             name, e->b_last ? "" : ", __global const float *restrict b_",
                             e->has_e ? ", __global const float *restrict e_" : "", e->params,
                             e->b_last ? ", __global const float *restrict b_" : "", batch * g->m * nt,
                             nt, nt, g->m, nt * g->m, nt, g->m, g->m, mr, (long long)g->a0, (long long)g->b0)
        : kiln_cl_src_printf(s,
                             "__kernel void %s(__global const float *a_, ulong ao, __global const float *b_, "
                             "ulong bo, __global float *c_, ulong co) {\n"
                             "  const ulong jt = get_global_id(0), t = get_global_id(1);\n"
                             "  if (jt >= %zuUL || t >= %zuUL) return;\n"
                             "  const ulong it = t %% %zuUL, bi = t / %zuUL;\n"
                             "  long oa = %lld, ob = %lld, oc = %lld;\n",
                             name, nt, batch * mt, mt, mt, (long long)g->a0, (long long)g->b0, (long long)g->c0);
  if (!st && g->nb) {
    st = kiln_cl_src_printf(s, "  { ulong t_ = bi;\n");
    for (int d = g->nb - 1; d >= 0 && !st; d--)
      st = kiln_cl_src_printf(s,
                              "    { const long x_ = (long)(t_ %% %lldUL); t_ /= %lldUL; oa += x_ * %lldL; ob += x_ * "
                              "%lldL; oc += x_ * %lldL; }\n",
                              (long long)g->bd[d], (long long)g->bd[d], (long long)g->sa[d], (long long)g->sb[d],
                              (long long)g->sc[d]);
    if (!st) st = kiln_cl_src_printf(s, "  }\n");
  } else if (!st) {
    st = kiln_cl_src_printf(s, "  (void)bi;\n");
  }
  if (!st && e)
    st = kiln_cl_src_printf(s,
                            "  __global const float *A = a_ + ao + oa, *B = b_ + bo + ob;\n"
                            "  const ulong i0 = r_;\n");
  else if (!st)
    st = kiln_cl_src_printf(s,
                            "  __global const float *A = a_ + ao + oa, *B = b_ + bo + ob;\n"
                            "  __global float *C = c_ + co + oc;\n"
                            "  const ulong i0 = it * %dUL;\n",
                            mr);
  /* an implicit conv: a row of column tiles per output row */
  if (!st && g->cv) {
    size_t tpr = ((size_t)g->cv->ow + (size_t)nw - 1) / (size_t)nw;
    st = kiln_cl_src_printf(s, "  const ulong oy_ = jt / %zuUL, ox_ = (jt %% %zuUL) * %dUL, j0 = oy_ * %lldUL + ox_;\n",
                            tpr, tpr, nw, (long long)g->cv->ow);
  } else if (!st) {
    st = kiln_cl_src_printf(s, "  const ulong j0 = jt * %dUL;\n", nw);
  }
  if (!st && e) st = kiln_cl_src_printf(s, "  float t_[%d];\n  {\n", mr * nw);
  return st;
}

static kiln_status emit_bcast(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, gemm_tile t, size_t nt,
                              size_t mt, size_t batch, const kiln_clop_epi *e) {
  int nw = t.nv * t.nc;
  char vt[16];
  vtype(t.nv, vt, sizeof vt);
  kiln_status st = emit_head(s, name, g, nt, mt, batch, nw, t.mr, e);
  /* A's rows, clamped to the last (a partial tile computes copies, stores none) */
  for (int r = 0; r < t.mr && !st; r++)
    st = kiln_cl_src_printf(s, "  __global const float *a%d = A + min(i0 + %dUL, %zuUL) * %zuUL;\n", r, r, g->m - 1,
                            g->ta ? (size_t)1 : g->lda);
  for (int r = 0; r < t.mr && !st; r++)
    for (int c = 0; c < t.nc && !st; c++) st = kiln_cl_src_printf(s, "  %s c%d_%d = (%s)(0.0f);\n", vt, r, c, vt);
  bool ragged = g->n % (size_t)nw != 0;
  /* the columns, clamped, for the gathered loads */
  if (!st && (g->tb || ragged))
    for (int j = 0; j < nw && !st; j++)
      st = kiln_cl_src_printf(s, "  const ulong cj%d = min(j0 + %dUL, %zuUL);\n", j, j, g->n - 1);
  if (!st && ragged) st = kiln_cl_src_printf(s, "  if (j0 + %dUL <= %zuUL) {\n", nw, g->n);
  if (!st) st = emit_bcast_loop(s, g, t, g->tb);
  if (!st) st = emit_bcast_store(s, g, t, false, e);
  if (!st && ragged) {
    st = kiln_cl_src_printf(s, "  } else {\n");
    if (!st) st = emit_bcast_loop(s, g, t, true);
    if (!st) st = emit_bcast_store(s, g, t, true, e);
    if (!st) st = kiln_cl_src_printf(s, "  }\n");
  }
  if (!st && e) st = emit_epi_store(s, g, t, nw, e);
  if (!st) st = kiln_cl_src_printf(s, "}\n");
  return st;
}

/* The implicit conv's loop order: channels outside the window positions
 * where the group has fewer channels than the kernel has positions (a
 * stem: 3 channels, 7x7), so that the longer loop is inside; else the
 * window positions outside (their masks and bounds once per position, the
 * channels streamed under them). Measured in ENGINE.md "Implicit GEMM". */
static bool iconv_channels_outer(const kiln_clop_iconv *cv) { return cv->cg < cv->kh * cv->kw; }

/* B's vector c of the implicit conv's tile, loaded from xp + c * nv * sw
 * (stride 1: vloadN; 2: the even lanes of twice as many), lanes outside
 * the input row zeroed by the mask m<c>. */
static kiln_status emit_iconv_load(kiln_cl_src *s, const kiln_clop_iconv *cv, gemm_tile t, int c) {
  char vt[16];
  vtype(t.nv, vt, sizeof vt);
  long long off = (long long)c * t.nv * cv->sw;
  kiln_status st = kiln_cl_src_printf(s, "        const %s b%d = ", vt, c);
  if (!st && t.nv == 1) st = kiln_cl_src_printf(s, "m%d ? xp[%lld] : 0.0f;\n", c, off);
  if (st || t.nv == 1) return st;
  st = kiln_cl_src_printf(s, "select((%s)(0.0f), ", vt);
  if (!st && cv->sw == 1) st = kiln_cl_src_printf(s, "vload%d(0, xp + %lld)", t.nv, off);
  else if (!st && t.nv < 16) st = kiln_cl_src_printf(s, "vload%d(0, xp + %lld).even", 2 * t.nv, off);
  else if (!st)
    st = kiln_cl_src_printf(s, "(float16)(vload16(0, xp + %lld).even, vload16(0, xp + %lld).even)", off, off + 16);
  if (!st) st = kiln_cl_src_printf(s, ", m%d);\n", c);
  return st;
}

/* The implicit conv's masks: lane l of vector c reads input column
 * q<c>.l = ix + (c * nv + l) * sw, m<c> says it lies inside the row. */
static kiln_status emit_iconv_masks(kiln_cl_src *s, const kiln_clop_iconv *cv, gemm_tile t, const char *it,
                                    const char *ind) {
  kiln_status st = KILN_OK;
  for (int c = 0; c < t.nc && !st; c++)
    st = kiln_cl_src_printf(s, "%sconst %s q%d = (%s)((int)ix + %d) + lv_, m%d = q%d >= 0 && q%d < %lld;\n", ind, it, c,
                            it, c * t.nv * (int)cv->sw, c, c, c, (long long)cv->w);
  return st;
}

/* One step of the implicit conv's loops: xp = xp_expr, B's nc vectors
 * (vector loads at xp, or with gather lane by lane from xp[q<c>.l] where
 * a vector would leave X — no private array: PoCL would keep one per work
 * item of its work-group on the stack), then the tile's FMAs with A's
 * column ak. */
static kiln_status emit_iconv_body(kiln_cl_src *s, const kiln_clop_iconv *cv, gemm_tile t, bool gather,
                                   const char *xp_expr) {
  char vt[16];
  vtype(t.nv, vt, sizeof vt);
  kiln_status st = kiln_cl_src_printf(s, "        __global const float *xp = %s;\n", xp_expr);
  for (int c = 0; c < t.nc && !st; c++) {
    if (!gather) {
      st = emit_iconv_load(s, cv, t, c);
      continue;
    }
    st = kiln_cl_src_printf(s, "        const %s b%d = (%s)(", vt, c, vt);
    for (int l = 0; l < t.nv && !st; l++) {
      char sl[8] = "";
      if (t.nv > 1) snprintf(sl, sizeof sl, ".s%c", lane[l]);
      st = kiln_cl_src_printf(s, "%sm%d%s ? xp[q%d%s] : 0.0f", l ? ", " : "", c, sl, c, sl);
    }
    if (!st) st = kiln_cl_src_printf(s, ");\n");
  }
  for (int r = 0; r < t.mr && !st; r++) {
    st = kiln_cl_src_printf(s, "        { const %s x = (%s)(a%d[ak]);", vt, vt, r);
    for (int c = 0; c < t.nc && !st; c++) st = kiln_cl_src_printf(s, " c%d_%d = fma(x, b%d, c%d_%d);", r, c, c, r, c);
    if (!st) st = kiln_cl_src_printf(s, " }\n");
  }
  return st;
}

/* An implicit-GEMM conv (g->cv): the broadcast tile, its mr rows of W
 * against nw consecutive output columns of one output row, B read from X
 * through the window. The window's rows outside the input are not visited
 * (the ky loop's bounds depend on the output row, which also keeps PoCL
 * from adding its implicit loop barriers: their per-work-item copies of
 * the accumulators overflowed the stack of a 4096-item work-group); the
 * lanes' input columns give the masks (inside the input row); B's vectors
 * are vector loads of X (stride 1 or 2) with the masked lanes zeroed. The
 * loads read X's neighbouring elements there, so where one would leave X
 * (a tile at its first or last rows) the lanes are gathered one by one
 * instead. Loop order: iconv_channels_outer. */
static kiln_status emit_iconv(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, gemm_tile t, size_t nt,
                              size_t mt, size_t batch, const kiln_clop_epi *e) {
  const kiln_clop_iconv *cv = g->cv;
  int nw = t.nv * t.nc;
  long long in_sp = (long long)(cv->h * cv->w), ksp = (long long)(cv->kh * cv->kw);
  char vt[16], it[16];
  vtype(t.nv, vt, sizeof vt);
  if (t.nv == 1)
    snprintf(it, sizeof it, "int");
  else
    snprintf(it, sizeof it, "int%d", t.nv);
  kiln_status st = emit_head(s, name, g, nt, mt, batch, nw, t.mr, e);
  for (int r = 0; r < t.mr && !st; r++)
    st = kiln_cl_src_printf(s, "  __global const float *a%d = A + min(i0 + %dUL, %zuUL) * %zuUL;\n", r, r, g->m - 1,
                            g->lda);
  for (int r = 0; r < t.mr && !st; r++)
    for (int c = 0; c < t.nc && !st; c++) st = kiln_cl_src_printf(s, "  %s c%d_%d = (%s)(0.0f);\n", vt, r, c, vt);
  /* lane l of vector c reads input column ix + (c * nv + l) * sw */
  if (!st) st = kiln_cl_src_printf(s, "  const %s lv_ = (%s)(", it, it);
  for (int l = 0; l < t.nv && !st; l++) st = kiln_cl_src_printf(s, "%s%lld", l ? ", " : "", (long long)l * cv->sw);
  if (!st)
    st = kiln_cl_src_printf(s,
                            ");\n"
                            "  const long iy0_ = (long)oy_ * %lldL - %lldL, ix0_ = (long)ox_ * %lldL - %lldL;\n"
                            "  const long kyb_ = iy0_ < 0 ? (-iy0_ + %lldL) / %lldL : 0;\n"
                            "  const long kye_ = min(%lldL, iy0_ < %lldL ? (%lldL - iy0_) / %lldL + 1 : 0L);\n",
                            (long long)cv->sh, (long long)cv->ph, (long long)cv->sw, (long long)cv->pw,
                            (long long)cv->dh - 1, (long long)cv->dh, (long long)cv->kh, (long long)cv->h,
                            (long long)cv->h - 1, (long long)cv->dh);
  char xp[64];
  if (iconv_channels_outer(cv)) {
    /* one bounds check for the whole window: the fast loops (every vector
       load of the tile inside X) or the edge loops (lanes gathered) */
    long long span = (long long)(cv->cg - 1) * in_sp + (long long)(cv->kw - 1) * cv->dw + (long long)nw * cv->sw - 1;
    if (!st)
      st = kiln_cl_src_printf(s,
                              "  const long lo_ = ob + (iy0_ + kyb_ * %lldL) * %lldL + ix0_;\n"
                              "  const long hi_ = lo_ + (kye_ - 1 - kyb_) * %lldL + %lldL;\n",
                              (long long)cv->dh, (long long)cv->w, (long long)cv->dh * cv->w, span);
    for (int pass = 0; pass < 2 && !st; pass++) {
      st = kiln_cl_src_printf(s, pass ? "  } else {\n" : "  if (lo_ >= 0 && hi_ < %lldL) {\n", (long long)cv->xtotal);
      if (!st)
        st = kiln_cl_src_printf(s,
                                "  for (ulong cc = 0; cc < %lldUL; cc++) {\n"
                                "    __global const float *xc = B + cc * %lldUL;\n"
                                "    for (long ky = kyb_; ky < kye_; ky++) {\n"
                                "      __global const float *xr = xc + (iy0_ + ky * %lldL) * %lldL;\n"
                                "      const ulong ak0 = cc * %lldUL + (ulong)ky * %lldUL;\n"
                                "      for (long kx = 0; kx < %lldL; kx++) {\n"
                                "        const long ix = ix0_ + kx * %lldL;\n"
                                "        const ulong ak = ak0 + (ulong)kx;\n",
                                (long long)cv->cg, in_sp, (long long)cv->dh, (long long)cv->w, ksp,
                                (long long)cv->kw, (long long)cv->kw, (long long)cv->dw);
      if (!st) st = emit_iconv_masks(s, cv, t, it, "        ");
      if (!st) st = emit_iconv_body(s, cv, t, pass == 1, pass ? "xr" : "xr + ix");
      if (!st) st = kiln_cl_src_printf(s, "      }\n    }\n  }\n");
    }
    if (!st) st = kiln_cl_src_printf(s, "  }\n");
  } else {
    /* per window position: its masks and bounds check, then the channels */
    if (!st)
      st = kiln_cl_src_printf(s,
                              "  for (long ky = kyb_; ky < kye_; ky++) {\n"
                              "    const long iy = iy0_ + ky * %lldL;\n"
                              "    for (long kx = 0; kx < %lldL; kx++) {\n"
                              "      const long ix = ix0_ + kx * %lldL, lo_ = ob + iy * %lldL + ix;\n"
                              "      const ulong kb = (ulong)(ky * %lldL + kx);\n"
                              "      __global const float *xr = B + iy * %lldL;\n",
                              (long long)cv->dh, (long long)cv->kw, (long long)cv->dw, (long long)cv->w,
                              (long long)cv->kw, (long long)cv->w);
    if (!st) st = emit_iconv_masks(s, cv, t, it, "      ");
    for (int pass = 0; pass < 2 && !st; pass++) {
      if (pass == 0)
        st = kiln_cl_src_printf(s, "      if (lo_ >= 0 && lo_ + %lldL < %lldL) {\n",
                                (long long)(cv->cg - 1) * in_sp + (long long)nw * cv->sw - 1, (long long)cv->xtotal);
      else
        st = kiln_cl_src_printf(s, "      } else {\n");
      if (!st)
        st = kiln_cl_src_printf(s,
                                "      for (ulong cc = 0; cc < %lldUL; cc++) {\n"
                                "        const ulong ak = cc * %lldUL + kb;\n",
                                (long long)cv->cg, ksp);
      snprintf(xp, sizeof xp, "xr + cc * %lldUL%s", in_sp, pass ? "" : " + ix");
      if (!st) st = emit_iconv_body(s, cv, t, pass == 1, xp);
      if (!st) st = kiln_cl_src_printf(s, "      }\n");
    }
    if (!st) st = kiln_cl_src_printf(s, "      }\n    }\n  }\n");
  }
  bool ragged = cv->ow % nw != 0;
  if (!e && ragged) {
    if (!st) st = kiln_cl_src_printf(s, "  if (ox_ + %dUL <= %lldUL) {\n", nw, (long long)cv->ow);
    if (!st) st = emit_bcast_store(s, g, t, false, NULL);
    if (!st) st = kiln_cl_src_printf(s, "  } else {\n");
    if (!st) st = emit_bcast_store(s, g, t, true, NULL);
    if (!st) st = kiln_cl_src_printf(s, "  }\n");
  } else if (!st) {
    st = emit_bcast_store(s, g, t, false, e);
  }
  if (!st && e) st = emit_epi_store(s, g, t, nw, e);
  if (!st) st = kiln_cl_src_printf(s, "}\n");
  return st;
}

/* transB (not transA): op(A) rows and op(B) columns are both rows in
 * memory: dot products nv wide along K, summed across lanes at the end. */
static kiln_status emit_dot(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, gemm_tile t, size_t nt,
                            size_t mt, size_t batch, const kiln_clop_epi *e) {
  char vt[16], al[48];
  vtype(t.nv, vt, sizeof vt);
  kiln_clop_flit(g->alpha, al, sizeof al);
  kiln_status st = emit_head(s, name, g, nt, mt, batch, t.nc, t.mr, e);
  for (int r = 0; r < t.mr && !st; r++)
    st = kiln_cl_src_printf(s, "  __global const float *a%d = A + min(i0 + %dUL, %zuUL) * %zuUL;\n", r, r, g->m - 1,
                            g->lda);
  for (int c = 0; c < t.nc && !st; c++)
    st = kiln_cl_src_printf(s, "  __global const float *b%d = B + min(j0 + %dUL, %zuUL) * %zuUL;\n", c, c, g->n - 1,
                            g->ldb);
  for (int r = 0; r < t.mr && !st; r++)
    for (int c = 0; c < t.nc && !st; c++) st = kiln_cl_src_printf(s, "  %s s%d_%d = (%s)(0.0f);\n", vt, r, c, vt);
  size_t kv = g->k / (size_t)t.nv * (size_t)t.nv;
  if (!st && kv) {
    st = kiln_cl_src_printf(s, "  for (ulong k = 0; k < %zuUL; k += %dUL) {\n", kv, t.nv);
    for (int r = 0; r < t.mr && !st; r++) {
      char p[16];
      snprintf(p, sizeof p, "a%d + k", r);
      st = kiln_cl_src_printf(s, "    const %s x%d = ", vt, r);
      if (!st) st = emit_vload(s, t.nv, p);
      if (!st) st = kiln_cl_src_printf(s, ";\n");
    }
    for (int c = 0; c < t.nc && !st; c++) {
      char p[16];
      snprintf(p, sizeof p, "b%d + k", c);
      st = kiln_cl_src_printf(s, "    { const %s y = ", vt);
      if (!st) st = emit_vload(s, t.nv, p);
      if (!st) st = kiln_cl_src_printf(s, ";");
      for (int r = 0; r < t.mr && !st; r++) st = kiln_cl_src_printf(s, " s%d_%d = fma(x%d, y, s%d_%d);", r, c, r, r, c);
      if (!st) st = kiln_cl_src_printf(s, " }\n");
    }
    if (!st) st = kiln_cl_src_printf(s, "  }\n");
  }
  /* across the lanes */
  for (int r = 0; r < t.mr && !st; r++)
    for (int c = 0; c < t.nc && !st; c++) {
      st = kiln_cl_src_printf(s, "  float h%d_%d = ", r, c);
      for (int l = 0; l < t.nv && !st; l++)
        st = t.nv == 1 ? kiln_cl_src_printf(s, "s%d_%d", r, c)
                       : kiln_cl_src_printf(s, "%ss%d_%d.s%c", l ? " + " : "", r, c, lane[l]);
      if (!st) st = kiln_cl_src_printf(s, ";\n");
    }
  if (!st && kv < g->k) {
    st = kiln_cl_src_printf(s, "  for (ulong k = %zuUL; k < %zuUL; k++) {\n", kv, g->k);
    for (int r = 0; r < t.mr && !st; r++)
      for (int c = 0; c < t.nc && !st; c++)
        st = kiln_cl_src_printf(s, "    h%d_%d = fma(a%d[k], b%d[k], h%d_%d);\n", r, c, r, c, r, c);
    if (!st) st = kiln_cl_src_printf(s, "  }\n");
  }
  if (e) {
    if (!st) st = emit_tile_dump(s, t, true);
    if (!st) st = emit_epi_store(s, g, t, t.nc, e);
    if (!st) st = kiln_cl_src_printf(s, "}\n");
    return st;
  }
  bool a1 = g->alpha == 1.0f, acc = g->beta != 0.0f;
  for (int r = 0; r < t.mr && !st; r++)
    for (int c = 0; c < t.nc && !st; c++) {
      bool gr = g->m % (size_t)t.mr != 0, gc = g->n % (size_t)t.nc != 0;
      st = kiln_cl_src_printf(s, "  ");
      if (!st && (gr || gc)) {
        st = kiln_cl_src_printf(s, "if (");
        if (!st && gr) st = kiln_cl_src_printf(s, "i0 + %dUL < %zuUL%s", r, g->m, gc ? " && " : "");
        if (!st && gc) st = kiln_cl_src_printf(s, "j0 + %dUL < %zuUL", c, g->n);
        if (!st) st = kiln_cl_src_printf(s, ") ");
      }
      if (!st)
        st = kiln_cl_src_printf(s, "{ __global float *p = C + (i0 + %dUL) * %zuUL + j0 + %dUL; *p = %s%sh%d_%d%s; }\n",
                                r, g->ldc, c, a1 ? "" : al, a1 ? "" : " * ", r, c, acc ? " + *p" : "");
    }
  if (!st) st = kiln_cl_src_printf(s, "}\n");
  return st;
}

/* g's sizes, transposes, scalars and buffers into step st (kiln's kernel
 * step reads ta, m, a, b, c for run-time rows; a CLBlast step all of them). */
static void step_gemm(op_step *st, const kiln_clop_gemm *g) {
  st->ta = g->ta, st->tb = g->tb;
  st->m = g->m, st->n = g->n, st->k = g->k;
  st->lda = g->lda, st->ldb = g->ldb, st->ldc = g->ldc;
  st->alpha = g->alpha, st->beta = g->beta;
  st->a = g->a, st->b = g->b, st->c = g->c;
}

kiln_status kiln_clop_sgemm(const op_ctx *c, kiln_cl_op *op, const kiln_clop_gemm *g, const char **impl) {
  size_t batch = 1;
  for (int d = 0; d < g->nb; d++) batch *= (size_t)g->bd[d];
  kiln_status s;
  if (kiln_clop_sgemm_is_kiln(c->dev) && g->m && g->n) {
    *impl = "kiln";
    gemm_tile t = tile_pick(c->dev, g);
    size_t mt = (g->m + (size_t)t.mr - 1) / (size_t)t.mr, nw = (size_t)(t.dot ? t.nc : t.nc * t.nv);
    size_t nt = g->cv ? (size_t)g->cv->oh * (((size_t)g->cv->ow + nw - 1) / nw) : (g->n + nw - 1) / nw;
    int k;
    if ((s = kiln_clop_kernel(op, "sgemm", &k))) return s;
    s = g->cv    ? emit_iconv(c->src, kiln_clop_kname(op, k), g, t, nt, mt, batch, NULL)
        : t.dot ? emit_dot(c->src, kiln_clop_kname(op, k), g, t, nt, mt, batch, NULL)
                : emit_bcast(c->src, kiln_clop_kname(op, k), g, t, nt, mt, batch, NULL);
    if (!s) s = kiln_clop_launch(op, k, nt, 3, (opb[]){g->a, g->b, g->c});
    if (s) return s;
    op_step *st = &op->steps[op->n_steps - 1];
    st->dims = 2;
    st->items[1] = batch * mt;
    st->rows_tile = (size_t)t.mr;
    step_gemm(st, g);
    st->batch = batch;
    return KILN_OK;
  }
  if (g->cv) return kiln_fail(KILN_E_INTERNAL, "opencl: an implicit-GEMM conv takes kiln's SGEMM");
  *impl = "clblast";
  op_step *st;
  if ((s = kiln_clop_step_add(op, batch == 1 ? ST_GEMM : ST_GEMM_BATCHED, &st))) return s;
  step_gemm(st, g);
  op->blas |= batch == 1 ? OP_BLAS_GEMM : OP_BLAS_GEMM_BATCHED;
  st->aoff = (size_t)g->a0, st->boff = (size_t)g->b0, st->coff = (size_t)g->c0; /* (batched: in the offsets) */
  if (batch == 1) return KILN_OK;
  st->batch = batch;
  if (batch > op->max_batch) op->max_batch = batch;
  st->aoffs = kiln_malloc(batch * sizeof(size_t));
  st->boffs = kiln_malloc(batch * sizeof(size_t));
  st->coffs = kiln_malloc(batch * sizeof(size_t));
  if (!st->aoffs || !st->boffs || !st->coffs)
    return kiln_fail(KILN_E_NOMEM, "out of memory preparing node '%s'", op->label);
  for (size_t bi = 0; bi < batch; bi++) {
    size_t t = bi, ao = 0, bo = 0, co = 0;
    for (int d = g->nb - 1; d >= 0; d--) {
      size_t ix = t % (size_t)g->bd[d];
      t /= (size_t)g->bd[d];
      ao += ix * (size_t)g->sa[d];
      bo += ix * (size_t)g->sb[d];
      co += ix * (size_t)g->sc[d];
    }
    st->aoffs[bi] = (size_t)g->a0 + ao;
    st->boffs[bi] = (size_t)g->b0 + bo;
    st->coffs[bi] = (size_t)g->c0 + co;
  }
  return KILN_OK;
}

kiln_status kiln_clop_sgemm_fused(const kiln_cl_device *dev, const kiln_clop_gemm *g, const kiln_clop_epi *e,
                                  const char *name, kiln_cl_src *src, int64_t *items) {
  *items = 0;
  if (!g->m || !g->n || g->beta != 0.0f || g->c0 || g->ldc != g->n)
    return kiln_fail(KILN_E_INTERNAL, "opencl: a fused SGEMM takes beta 0 and a non-empty dense C");
  size_t batch = 1;
  for (int d = 0; d < g->nb; d++) batch *= (size_t)g->bd[d];
  gemm_tile t = tile_pick(dev, g);
  size_t mt = (g->m + (size_t)t.mr - 1) / (size_t)t.mr, nw = (size_t)(t.dot ? t.nc : t.nc * t.nv);
  size_t nt = g->cv ? (size_t)g->cv->oh * (((size_t)g->cv->ow + nw - 1) / nw) : (g->n + nw - 1) / nw;
  *items = (int64_t)(batch * g->m * nt);
  if (g->cv) return emit_iconv(src, name, g, t, nt, mt, batch, e);
  return t.dot ? emit_dot(src, name, g, t, nt, mt, batch, e) : emit_bcast(src, name, g, t, nt, mt, batch, e);
}
