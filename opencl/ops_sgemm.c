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
  if ((size_t)t.mr > g->m) t.mr = (int)g->m;
  return t;
}

/* KILN_CL_GEMM=clblast|kiln|kiln-vector|kiln-group|auto; auto: kiln's
 * kernel where the device runs a work item's vectors as SIMD vectors
 * (preferred float width >= 8, PoCL on AVX2/AVX-512), CLBlast elsewhere
 * (rusticl/llvmpipe reports 1 and vectorises across work items; see
 * ENGINE.md for the measurements). */
bool kiln_clop_sgemm_is_kiln(const kiln_cl_device *dev) {
  const char *e = getenv("KILN_CL_GEMM");
  if (e && !strncmp(e, "kiln", 4)) return true;
  if (e && !strcmp(e, "clblast")) return false;
  return dev->pref_vec_float >= 8;
}

/* kiln's kernel shape: the vector tile (a work item's floatN, above) where
 * the device's preferred float width is >= 8, else the work-group tile
 * (emit_group); KILN_CL_GEMM=kiln-vector|kiln-group forces one. */
static bool use_group_shape(const kiln_cl_device *dev) {
  const char *e = getenv("KILN_CL_GEMM");
  if (e && !strcmp(e, "kiln-group")) return true;
  if (e && !strcmp(e, "kiln-vector")) return false;
  return dev->pref_vec_float < 8;
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

/* the broadcast kernel's stores; tail: lane by lane for columns < N */
static kiln_status emit_bcast_store(kiln_cl_src *s, const kiln_clop_gemm *g, gemm_tile t, bool tail) {
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
              s, " for (int l = 0; l < %d; l++) if (j0 + %dUL + (ulong)l < %zuUL) cr[%d + l] = %s%st_[l]", t.nv,
              c * t.nv, g->n, c * t.nv, a1 ? "" : al, a1 ? "" : " * ");
        if (!st && acc) st = kiln_cl_src_printf(s, " + cr[%d + l]", c * t.nv);
        if (!st) st = kiln_cl_src_printf(s, "; }\n");
      }
    }
    if (!st) st = kiln_cl_src_printf(s, "    }\n");
  }
  return st;
}

/* The kernel's head: ids, the batch offsets unravelled from literals, the
 * tile's first row i0 and column j0. */
static kiln_status emit_head(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, size_t nt, size_t mt,
                             size_t batch, int nw, int mr) {
  kiln_status st = kiln_cl_src_printf(s,
                                      "__kernel void %s(__global const float *a_, ulong ao, __global const float *b_, "
                                      "ulong bo, __global float *c_, ulong co) {\n"
                                      "  const ulong jt = get_global_id(0), t = get_global_id(1);\n"
                                      "  if (jt >= %zuUL || t >= %zuUL) return;\n"
                                      "  const ulong it = t %% %zuUL, bi = t / %zuUL;\n"
                                      "  long oa = 0, ob = 0, oc = 0;\n",
                                      name, nt, batch * mt, mt, mt);
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
  if (!st)
    st = kiln_cl_src_printf(s,
                            "  __global const float *A = a_ + ao + oa, *B = b_ + bo + ob;\n"
                            "  __global float *C = c_ + co + oc;\n"
                            "  const ulong i0 = it * %dUL, j0 = jt * %dUL;\n",
                            mr, nw);
  return st;
}

static kiln_status emit_bcast(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, gemm_tile t, size_t nt,
                              size_t mt, size_t batch) {
  int nw = t.nv * t.nc;
  char vt[16];
  vtype(t.nv, vt, sizeof vt);
  kiln_status st = emit_head(s, name, g, nt, mt, batch, nw, t.mr);
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
  if (!st) st = emit_bcast_store(s, g, t, false);
  if (!st && ragged) {
    st = kiln_cl_src_printf(s, "  } else {\n");
    if (!st) st = emit_bcast_loop(s, g, t, true);
    if (!st) st = emit_bcast_store(s, g, t, true);
    if (!st) st = kiln_cl_src_printf(s, "  }\n");
  }
  if (!st) st = kiln_cl_src_printf(s, "}\n");
  return st;
}

/* transB (not transA): op(A) rows and op(B) columns are both rows in
 * memory: dot products nv wide along K, summed across lanes at the end. */
static kiln_status emit_dot(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, gemm_tile t, size_t nt,
                            size_t mt, size_t batch) {
  char vt[16], al[48];
  vtype(t.nv, vt, sizeof vt);
  kiln_clop_flit(g->alpha, al, sizeof al);
  kiln_status st = emit_head(s, name, g, nt, mt, batch, t.nc, t.mr);
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

/* The work-group tile, for devices that vectorise across work items (GPUs,
 * rusticl's llvmpipe): a wx x wy group computes a (wy*rm) x (wx*rn) tile of
 * C. Per step of kt along K the group copies A's and B's tiles into __local
 * memory (consecutive work items read consecutive addresses, the transposes
 * only change which index runs fastest; outside M, N, K: zeros), then each
 * item accumulates rm x rn scalars at rows ly + r*wy and columns lx + c*wx,
 * so consecutive items read B's tile and store C at consecutive columns. */
typedef struct gemm_group {
  int wx, wy, rm, rn, kt;
} gemm_group;

/* wx x wy from the device's work-group limits; KILN_CL_GEMM_GROUP=
 * "wx,wy,rm,rn,kt" overrides (a tuning knob); shrunk for small operands. */
static gemm_group group_pick(const kiln_cl_device *dev, const kiln_clop_gemm *g) {
  gemm_group t = {16, 8, 4, 4, 16};
  const char *e = getenv("KILN_CL_GEMM_GROUP");
  int v[5];
  if (e && sscanf(e, "%d,%d,%d,%d,%d", &v[0], &v[1], &v[2], &v[3], &v[4]) == 5 && v[0] >= 1 && v[0] <= 64 &&
      v[1] >= 1 && v[1] <= 64 && v[2] >= 1 && v[2] <= 16 && v[3] >= 1 && v[3] <= 8 && v[4] >= 0 && v[4] <= 64)
    t = (gemm_group){v[0], v[1], v[2], v[3], v[4]};
  if (!t.kt) t.wy = 1; /* direct: one row of items */
  size_t lim = dev->max_work_group_size ? dev->max_work_group_size : 1;
  while ((size_t)(t.wx * t.wy) > lim && (t.wx > 1 || t.wy > 1)) {
    if (t.wy >= t.wx) t.wy = (t.wy + 1) / 2;
    else t.wx = (t.wx + 1) / 2;
  }
  while (dev->max_work_item_size0 && (size_t)t.wx > dev->max_work_item_size0 && t.wx > 1) t.wx = (t.wx + 1) / 2;
  while (t.rn > 1 && (size_t)(t.wx * t.rn / 2) >= g->n) t.rn = (t.rn + 1) / 2;
  while (t.wx > 1 && (size_t)(t.wx / 2) >= g->n) t.wx /= 2;
  while (t.rm > 1 && (size_t)(t.wy * t.rm / 2) >= g->m) t.rm = (t.rm + 1) / 2;
  while (t.wy > 1 && (size_t)(t.wy / 2) >= g->m) t.wy /= 2;
  while (t.kt > 1 && (size_t)(t.kt / 2) >= g->k) t.kt /= 2;
  return t;
}

/* One tile's copy into local memory: la[kk][r] (A, rows x kt) or lb[kk][c]
 * (B, kt x cols); fast: the index that runs along memory. */
static kiln_status emit_group_copy(kiln_cl_src *s, const kiln_clop_gemm *g, gemm_group t, bool isa) {
  int nth = t.wx * t.wy, w = isa ? t.wy * t.rm : t.wx * t.rn, n = w * t.kt;
  bool kfast = isa ? !g->ta : g->tb; /* K runs along memory */
  size_t lim = isa ? g->m : g->n, ld = isa ? g->lda : g->ldb;
  bool gw = lim % (size_t)w != 0, gk = g->k % (size_t)t.kt != 0;
  bool kmajor = isa ? g->ta : !g->tb; /* element (kk, x) at kk * ld + x */
  kiln_status st = KILN_OK;
  for (int q = 0; q * nth < n && !st; q++) {
    st = kiln_cl_src_printf(s, "    { const uint e = id + %du", q * nth);
    if (!st)
      st = kfast ? kiln_cl_src_printf(s, ", kk = e %% %du, x = e / %du;", t.kt, t.kt)
                 : kiln_cl_src_printf(s, ", x = e %% %du, kk = e / %du;", w, w);
    if (!st && n % nth) st = kiln_cl_src_printf(s, " if (e < %du)", n);
    if (!st) st = kiln_cl_src_printf(s, " l%c[kk][x] = ", isa ? 'a' : 'b');
    if (!st && (gw || gk)) {
      st = kiln_cl_src_printf(s, "(");
      if (!st && gw) st = kiln_cl_src_printf(s, "%c0 + x < %zuUL%s", isa ? 'i' : 'j', lim, gk ? " && " : "");
      if (!st && gk) st = kiln_cl_src_printf(s, "k0 + kk < %zuUL", g->k);
      if (!st) st = kiln_cl_src_printf(s, ") ? ");
    }
    if (!st)
      st = kmajor ? kiln_cl_src_printf(s, "%c[(k0 + kk) * %zuUL + %c0 + x]", isa ? 'A' : 'B', ld, isa ? 'i' : 'j')
                  : kiln_cl_src_printf(s, "%c[(%c0 + x) * %zuUL + k0 + kk]", isa ? 'A' : 'B', isa ? 'i' : 'j', ld);
    if (!st && (gw || gk)) st = kiln_cl_src_printf(s, " : 0.0f");
    if (!st) st = kiln_cl_src_printf(s, "; }\n");
  }
  return st;
}

static kiln_status emit_group(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, gemm_group t, size_t nt,
                              size_t mt, size_t batch) {
  int bm = t.wy * t.rm, bn = t.wx * t.rn;
  kiln_status st = kiln_cl_src_printf(s,
                                      "__kernel __attribute__((reqd_work_group_size(%d, %d, 1))) void %s(__global "
                                      "const float *a_, ulong ao, __global const float *b_, ulong bo, __global float "
                                      "*c_, ulong co) {\n"
                                      "  __local float la[%d][%d], lb[%d][%d];\n"
                                      "  const ulong jt = get_group_id(0), t = get_group_id(1);\n"
                                      "  if (jt >= %zuUL || t >= %zuUL) return; /* whole groups */\n"
                                      "  const ulong it = t %% %zuUL, bi = t / %zuUL;\n"
                                      "  const uint lx = get_local_id(0), ly = get_local_id(1), id = ly * %du + lx;\n"
                                      "  long oa = 0, ob = 0, oc = 0;\n",
                                      t.wx, t.wy, name, t.kt, bm, t.kt, bn, nt, batch * mt, mt, mt, t.wx);
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
  if (!st)
    st = kiln_cl_src_printf(s,
                            "  __global const float *A = a_ + ao + oa, *B = b_ + bo + ob;\n"
                            "  __global float *C = c_ + co + oc;\n"
                            "  const ulong i0 = it * %dUL, j0 = jt * %dUL;\n",
                            bm, bn);
  for (int r = 0; r < t.rm && !st; r++)
    for (int c = 0; c < t.rn && !st; c++) st = kiln_cl_src_printf(s, "  float c%d_%d = 0.0f;\n", r, c);
  if (!st) st = kiln_cl_src_printf(s, "  for (ulong k0 = 0; k0 < %zuUL; k0 += %dUL) {\n", g->k, t.kt);
  if (!st) st = emit_group_copy(s, g, t, true);
  if (!st) st = emit_group_copy(s, g, t, false);
  if (!st) st = kiln_cl_src_printf(s, "    barrier(CLK_LOCAL_MEM_FENCE);\n    for (uint kk = 0; kk < %du; kk++) {\n", t.kt);
  for (int r = 0; r < t.rm && !st; r++)
    st = kiln_cl_src_printf(s, "      const float a%d = la[kk][ly + %du];\n", r, r * t.wy);
  for (int c = 0; c < t.rn && !st; c++) {
    st = kiln_cl_src_printf(s, "      { const float b = lb[kk][lx + %du];", c * t.wx);
    for (int r = 0; r < t.rm && !st; r++) st = kiln_cl_src_printf(s, " c%d_%d = fma(a%d, b, c%d_%d);", r, c, r, r, c);
    if (!st) st = kiln_cl_src_printf(s, " }\n");
  }
  if (!st) st = kiln_cl_src_printf(s, "    }\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n");
  char al[48];
  kiln_clop_flit(g->alpha, al, sizeof al);
  bool a1 = g->alpha == 1.0f, acc = g->beta != 0.0f, gr = g->m % (size_t)bm != 0, gc = g->n % (size_t)bn != 0;
  for (int r = 0; r < t.rm && !st; r++)
    for (int c = 0; c < t.rn && !st; c++) {
      st = kiln_cl_src_printf(s, "  { const ulong i = i0 + ly + %dUL, j = j0 + lx + %dUL; ", r * t.wy, c * t.wx);
      if (!st && (gr || gc)) {
        st = kiln_cl_src_printf(s, "if (");
        if (!st && gr) st = kiln_cl_src_printf(s, "i < %zuUL%s", g->m, gc ? " && " : "");
        if (!st && gc) st = kiln_cl_src_printf(s, "j < %zuUL", g->n);
        if (!st) st = kiln_cl_src_printf(s, ") ");
      }
      if (!st)
        st = kiln_cl_src_printf(s, "{ __global float *p = C + i * %zuUL + j; *p = %s%sc%d_%d%s; } }\n", g->ldc,
                                a1 ? "" : al, a1 ? "" : " * ", r, c, acc ? " + *p" : "");
    }
  if (!st) st = kiln_cl_src_printf(s, "}\n");
  return st;
}

/* The direct variant (kt 0): groups of wx x 1 items, no local memory; a
 * group's rm rows come from its group id, so A's loads are the same for
 * every item of the group (uniform: one scalar load for a whole SIMD
 * block on llvmpipe), and each item gathers rn columns of B (lx + c*wx). */
static kiln_status emit_group_direct(kiln_cl_src *s, const char *name, const kiln_clop_gemm *g, gemm_group t,
                                     size_t nt, size_t mt, size_t batch) {
  int bn = t.wx * t.rn;
  kiln_status st = kiln_cl_src_printf(s,
                                      "__kernel __attribute__((reqd_work_group_size(%d, 1, 1))) void %s(__global "
                                      "const float *a_, ulong ao, __global const float *b_, ulong bo, __global float "
                                      "*c_, ulong co) {\n"
                                      "  const ulong jt = get_group_id(0), t = get_group_id(1);\n"
                                      "  if (jt >= %zuUL || t >= %zuUL) return; /* whole groups */\n"
                                      "  const ulong it = t %% %zuUL, bi = t / %zuUL;\n"
                                      "  const uint lx = get_local_id(0);\n"
                                      "  long oa = 0, ob = 0, oc = 0;\n",
                                      t.wx, name, nt, batch * mt, mt, mt);
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
  if (!st)
    st = kiln_cl_src_printf(s,
                            "  __global const float *A = a_ + ao + oa, *B = b_ + bo + ob;\n"
                            "  __global float *C = c_ + co + oc;\n"
                            "  const ulong i0 = it * %dUL, j0 = jt * %dUL + lx;\n",
                            t.rm, bn);
  for (int r = 0; r < t.rm && !st; r++)
    st = kiln_cl_src_printf(s, "  __global const float *a%d = A + min(i0 + %dUL, %zuUL) * %zuUL;\n", r, r, g->m - 1,
                            g->ta ? (size_t)1 : g->lda);
  for (int c = 0; c < t.rn && !st; c++)
    st = kiln_cl_src_printf(s, "  const ulong cj%d = min(j0 + %dUL, %zuUL);\n", c, c * t.wx, g->n - 1);
  for (int r = 0; r < t.rm && !st; r++)
    for (int c = 0; c < t.rn && !st; c++) st = kiln_cl_src_printf(s, "  float c%d_%d = 0.0f;\n", r, c);
  if (!st) st = kiln_cl_src_printf(s, "  for (ulong k = 0; k < %zuUL; k++) {\n", g->k);
  for (int c = 0; c < t.rn && !st; c++)
    st = g->tb ? kiln_cl_src_printf(s, "    const float b%d = B[cj%d * %zuUL + k];\n", c, c, g->ldb)
               : kiln_cl_src_printf(s, "    const float b%d = B[k * %zuUL + cj%d];\n", c, g->ldb, c);
  for (int r = 0; r < t.rm && !st; r++) {
    st = kiln_cl_src_printf(s, "    { const float x = a%d[k * %zuUL];", r, g->ta ? g->lda : (size_t)1);
    for (int c = 0; c < t.rn && !st; c++) st = kiln_cl_src_printf(s, " c%d_%d = fma(x, b%d, c%d_%d);", r, c, c, r, c);
    if (!st) st = kiln_cl_src_printf(s, " }\n");
  }
  if (!st) st = kiln_cl_src_printf(s, "  }\n");
  char al[48];
  kiln_clop_flit(g->alpha, al, sizeof al);
  bool a1 = g->alpha == 1.0f, acc = g->beta != 0.0f, gr = g->m % (size_t)t.rm != 0, gc = g->n % (size_t)bn != 0;
  for (int r = 0; r < t.rm && !st; r++)
    for (int c = 0; c < t.rn && !st; c++) {
      st = kiln_cl_src_printf(s, "  { const ulong i = i0 + %dUL, j = j0 + %dUL; ", r, c * t.wx);
      if (!st && (gr || gc)) {
        st = kiln_cl_src_printf(s, "if (");
        if (!st && gr) st = kiln_cl_src_printf(s, "i < %zuUL%s", g->m, gc ? " && " : "");
        if (!st && gc) st = kiln_cl_src_printf(s, "j < %zuUL", g->n);
        if (!st) st = kiln_cl_src_printf(s, ") ");
      }
      if (!st)
        st = kiln_cl_src_printf(s, "{ __global float *p = C + i * %zuUL + j; *p = %s%sc%d_%d%s; } }\n", g->ldc,
                                a1 ? "" : al, a1 ? "" : " * ", r, c, acc ? " + *p" : "");
    }
  if (!st) st = kiln_cl_src_printf(s, "}\n");
  return st;
}

/* Appends the work-group shape's kernel: 2-D, local wx x wy, dim 0 the
 * column tiles, dim 1 batch x row tiles (rows_tile rm: a symbolic run's
 * row count padded to whole groups gives its row tiles). */
static kiln_status sgemm_group(const op_ctx *c, kiln_cl_op *op, const kiln_clop_gemm *g, size_t batch) {
  gemm_group t = group_pick(c->dev, g);
  if (!t.kt) t.wy = 1;
  size_t bm = (size_t)(t.wy * t.rm), bn = (size_t)(t.wx * t.rn);
  size_t mt = (g->m + bm - 1) / bm, nt = (g->n + bn - 1) / bn;
  int k;
  kiln_status s = kiln_clop_kernel(op, "sgemm", &k);
  if (!s)
    s = t.kt ? emit_group(c->src, kiln_clop_kname(op, k), g, t, nt, mt, batch)
             : emit_group_direct(c->src, kiln_clop_kname(op, k), g, t, nt, mt, batch);
  if (!s) s = kiln_clop_launch(op, k, nt * (size_t)t.wx, 3, (opb[]){g->a, g->b, g->c});
  if (s) return s;
  op_step *st = &op->steps[op->n_steps - 1];
  st->dims = 2;
  st->items[1] = batch * mt * (size_t)t.wy;
  st->local[0] = (size_t)t.wx;
  st->local[1] = (size_t)t.wy;
  st->rows_tile = (size_t)t.rm;
  st->ta = g->ta;
  st->m = g->m;
  st->batch = batch;
  st->a = g->a;
  st->b = g->b;
  st->c = g->c;
  return KILN_OK;
}

kiln_status kiln_clop_sgemm(const op_ctx *c, kiln_cl_op *op, const kiln_clop_gemm *g, const char **impl) {
  size_t batch = 1;
  for (int d = 0; d < g->nb; d++) batch *= (size_t)g->bd[d];
  kiln_status s;
  if (kiln_clop_sgemm_is_kiln(c->dev) && g->m && g->n) {
    *impl = "kiln";
    if (use_group_shape(c->dev)) {
      *impl = "kiln-group";
      return sgemm_group(c, op, g, batch);
    }
    gemm_tile t = tile_pick(c->dev, g);
    size_t mt = (g->m + (size_t)t.mr - 1) / (size_t)t.mr, nw = (size_t)(t.dot ? t.nc : t.nc * t.nv);
    size_t nt = (g->n + nw - 1) / nw;
    int k;
    if ((s = kiln_clop_kernel(op, "sgemm", &k))) return s;
    s = t.dot ? emit_dot(c->src, kiln_clop_kname(op, k), g, t, nt, mt, batch)
              : emit_bcast(c->src, kiln_clop_kname(op, k), g, t, nt, mt, batch);
    if (!s) s = kiln_clop_launch(op, k, nt, 3, (opb[]){g->a, g->b, g->c});
    if (s) return s;
    op_step *st = &op->steps[op->n_steps - 1];
    st->dims = 2;
    st->items[1] = batch * mt;
    st->rows_tile = (size_t)t.mr;
    st->ta = g->ta;
    st->m = g->m;
    st->batch = batch;
    st->a = g->a;
    st->b = g->b;
    st->c = g->c;
    return KILN_OK;
  }
  *impl = "clblast";
  op_step *st;
  if ((s = kiln_clop_step_add(op, batch == 1 ? ST_GEMM : ST_GEMM_BATCHED, &st))) return s;
  st->ta = g->ta;
  st->tb = g->tb;
  st->m = g->m;
  st->n = g->n;
  st->k = g->k;
  st->lda = g->lda;
  st->ldb = g->ldb;
  st->ldc = g->ldc;
  st->alpha = g->alpha;
  st->beta = g->beta;
  st->a = g->a;
  st->b = g->b;
  st->c = g->c;
  op->blas |= batch == 1 ? OP_BLAS_GEMM : OP_BLAS_GEMM_BATCHED;
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
    st->aoffs[bi] = ao;
    st->boffs[bi] = bo;
    st->coffs[bi] = co;
  }
  return KILN_OK;
}
