/* cpu_fallback/conv: Conv over float32 (1-D, 2-D, 3-D; group; strides,
 * dilations, pads, auto_pad; optional bias), five paths:
 *   depthwise (group == C_in, 1-D/2-D, any channel multiplier, strides up
 *     to 8): direct, per channel: the input plane is copied once into a
 *     zero-padded buffer split by stride phase in both dims, so every
 *     kernel tap reads a contiguous run (a whole small plane at once: the
 *     flat form, where the kernel does not fill its chains across rows) and
 *     the rows kernel (sgemm.h kiln_dw_rows: AVX-512F, AVX2/FMA or their
 *     scalar twin; a Relu/Clip epilogue clamped on its accumulators) needs
 *     no bounds checks; channels in blocks; small stride-1 'same' planes
 *     (7x7) read in place instead, each tap a shift of the plane, the
 *     padding by opmask (kiln_dw_plane, two channels a call where it
 *     holds the plane in registers: kiln_dw_plane2); larger 3x3 stride-1
 *     'same' planes read in place by strips walked down the rows (dws1.h,
 *     AVX-512F); stride 2 (dilation 1) read in place too, even and odd
 *     columns split in registers (dws2.h; AVX2 without AVX-512F: on output
 *     rows of at most 16);
 *   pointwise (1x1, stride 1, no padding): Y[n,g] = W[g] · X[n,g] straight
 *     from NCHW; on planes under 512 pixels (and under 1024 with K >= 128;
 *     AVX2 without AVX-512F: under 1024 with K >= 128 only) with lanes over
 *     output channels from W's plan-time pack (pwt.h); on
 *     larger planes the direct micro-kernel reads X's rows in place (no B
 *     panel packed per call); a strided 1x1 with no pads (ResNet's
 *     downsampling) on planes of 28x28 and more samples X once into rows
 *     of a multiple of 16 floats and takes the same direct path, on
 *     smaller planes with a W^T pack (AVX-512) samples X densely and takes
 *     the lanes-over-channels tiles;
 *   direct (1-D/2-D, strides up to 8, kernels wider than 1x1, where the
 *     AVX-512 micro-kernel runs): no im2col, the wide GEMM's 12 x 32 tile
 *     reading the taps' rows straight from padded, stride-phase-split
 *     input planes (the depthwise path's), W from its pack or its rows in
 *     place; where output rows are a multiple of 14 wide and W has a
 *     transposed pack, 14-pixel x 32-channel tiles instead (channel
 *     tiles); the same bits as the general path; the planes made on the
 *     pool before the compute, or, for strided convs on the pool, one copy
 *     per thread made by its first task (direct_own);
 *   Winograd F(2x2, 3x3) (wino.h; KILN_CONV_WINO, on by default): 2-D
 *     3x3, stride 1, dilation 1, group 1, C and M >= 16, U from the plan's
 *     pack;
 *   general: im2col of one tile of output positions at a time into a
 *     scratch of about KILN_CONV_SCRATCH bytes (never the whole image when
 *     that is bigger; in the wide GEMM's packed B layout for small K), then
 *     one GEMM per tile.
 * Bias is added, and the epilogue applied, right after each output block is
 * computed: per channel run of a tile (per channel plane, or per group block
 * when a tile spans the whole image), per channel block (depthwise); a
 * Relu/Clip epilogue (kiln_cpu_epilogue.clamp) with the bias in one pass, or
 * inside the wide GEMM's tiles. Calls the reference kernel would reject
 * (dtype, shapes, attributes) and empty tensors are declined. Strided inputs
 * are copied densely first (X, W) or read element by element (B). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/dws1.h"
#include "cpu_fallback/dws2.h"
#include "cpu_fallback/kernels.h"
#include "cpu_fallback/prepack.h"
#include "cpu_fallback/pwt.h"
#include "cpu_fallback/sgemm.h"
#include "cpu_fallback/wino.h"
#include "ir/alloc.h"

/* Bytes of im2col scratch per call (one tile of columns), unless that
 * leaves fewer than KILN_CONV_MIN_TILE columns: narrower GEMMs lose
 * efficiency and repack W once per tile. */
#define KILN_CONV_SCRATCH (1024 * 1024)
#define KILN_CONV_MIN_TILE 256

/* im2col writes the wide GEMM's packed B directly (im2col_packed) for
 * stride-1 rows, whatever K. Measured (1 thread, CPU time, ABBA against
 * onnxruntime in one process): first for K <= 320 only, small_cnn 6 %
 * faster (K 27, 288), ResNet-18 2-3 % slower at K >= 576 and MobileNetV2's
 * stride-2 stem 2 % slower (a gather call per piece); with the strip's runs
 * computed once and fixed-size copies (GEMM_CONV.md, issue 6 follow-up),
 * every K: small_cnn another 6 % faster (conv3, K 576), ResNet-18 within
 * the noise. Stride-2 rows keep im2col + packing. */

/* The geometry, always in 3 spatial dims (1-D and 2-D convolutions get
 * leading dims of size 1). */
typedef struct geom {
  int nsp;
  int64_t N, C, M, G, Cg, Mg;
  int64_t in[3], k[3], out[3], s[3], d[3], pb[3];
  int64_t in_sp, k_sp, out_sp;
  int out_rank;
  int64_t out_dims[KILN_MAX_RANK];
} geom;

static bool ints_attr(const kiln_node *n, const char *name, size_t want, int64_t min, const int64_t **v) {
  const kiln_attr *a = kiln_node_attr(n, name);
  *v = NULL;
  if (!a) return true;
  if (a->type != KILN_ATTR_INTS || a->n != want) return false;
  for (size_t i = 0; i < a->n; i++)
    if (a->ints[i] < min || a->ints[i] > ((int64_t)1 << 31)) return false;
  *v = a->ints;
  return true;
}

/* Fills g from the node and the shapes; false when the call is one to
 * decline (anything the reference kernel would reject, or a size this file
 * does not handle). */
static bool geom_make(const kiln_node *nd, const kiln_tensor *x, const kiln_tensor *w, geom *g) {
  memset(g, 0, sizeof *g);
  if (x->rank < 3 || x->rank > 5 || w->rank != x->rank) return false;
  int nsp = x->rank - 2, off = 3 - nsp;
  g->nsp = nsp;
  enum { NOTSET, UPPER, LOWER, VALID } mode = NOTSET;
  const kiln_attr *ap = kiln_node_attr(nd, "auto_pad");
  if (ap) {
    if (ap->type != KILN_ATTR_STRING) return false;
    const char *v = ap->s ? ap->s : "";
    if (!strcmp(v, "SAME_UPPER")) mode = UPPER;
    else if (!strcmp(v, "SAME_LOWER")) mode = LOWER;
    else if (!strcmp(v, "VALID")) mode = VALID;
    else if (*v && strcmp(v, "NOTSET")) return false;
  }
  const kiln_attr *ga = kiln_node_attr(nd, "group");
  if (ga && ga->type != KILN_ATTR_INT) return false;
  g->G = ga ? ga->i : 1;
  const int64_t *ks, *st, *dl, *pads;
  if (g->G < 1 || !ints_attr(nd, "kernel_shape", (size_t)nsp, 1, &ks) ||
      !ints_attr(nd, "strides", (size_t)nsp, 1, &st) || !ints_attr(nd, "dilations", (size_t)nsp, 1, &dl) ||
      !ints_attr(nd, "pads", 2 * (size_t)nsp, 0, &pads))
    return false;
  if (pads && mode != NOTSET)
    for (int i = 0; i < 2 * nsp; i++)
      if (pads[i]) return false;
  g->N = x->dims[0];
  g->C = x->dims[1];
  g->M = w->dims[0];
  int64_t cw;
  if (__builtin_mul_overflow(w->dims[1], g->G, &cw) || cw != g->C || g->M % g->G || g->N < 1 || g->M < 1 ||
      w->dims[1] < 1)
    return false;
  g->Cg = g->C / g->G;
  g->Mg = g->M / g->G;
  g->in_sp = g->k_sp = g->out_sp = 1;
  for (int i = 0; i < 3; i++) {
    if (i < off) {
      g->in[i] = g->k[i] = g->out[i] = g->s[i] = g->d[i] = 1;
      continue;
    }
    int j = i - off;
    int64_t in = x->dims[2 + j], k = w->dims[2 + j], s = st ? st[j] : 1, d = dl ? dl[j] : 1;
    if (in < 1 || k < 1 || (ks && ks[j] != k) || in > ((int64_t)1 << 31) || k > ((int64_t)1 << 31)) return false;
    int64_t eff = (k - 1) * d + 1, pb = 0, pe = 0, out;
    if (mode == UPPER || mode == LOWER) {
      out = (in + s - 1) / s;
      int64_t need = (out - 1) * s + eff - in;
      if (need < 0) need = 0;
      pb = mode == UPPER ? need / 2 : need - need / 2;
    } else {
      if (pads) {
        pb = pads[j];
        pe = pads[j + nsp];
      }
      if (in + pb + pe < eff) return false;
      out = (in + pb + pe - eff) / s + 1;
    }
    g->in[i] = in;
    g->k[i] = k;
    g->s[i] = s;
    g->d[i] = d;
    g->pb[i] = pb;
    g->out[i] = out;
    g->in_sp *= in;
    g->k_sp *= k;
    g->out_sp *= out;
  }
  g->out_rank = x->rank;
  g->out_dims[0] = g->N;
  g->out_dims[1] = g->M;
  for (int j = 0; j < nsp; j++) g->out_dims[2 + j] = g->out[off + j];
  int64_t n;
  return !kiln_shape_numel(g->out_rank, g->out_dims, &n) && n > 0;
}

/* ---- the general path: im2col per tile + GEMM ---- */

/* Moves the output position (od, oh, ow) on by run columns, run never
 * past the end of the row. */
static inline void out_advance(int64_t *od, int64_t *oh, int64_t *ow, int64_t run, int64_t o1, int64_t o2) {
  if ((*ow += run) < o2) return;
  *ow = 0;
  if (++*oh == o1) {
    *oh = 0;
    ++*od;
  }
}

/* col[r][t - t0] = the input element under tap r = (c, kd, kh, kw) of output
 * position t, for t in [t0, t0 + T) (0 in the padding). x is the group's
 * first input channel. */
static void im2col(const geom *g, const float *x, int64_t t0, int64_t T, float *col, kiln_la_gather_fn gather) {
  int64_t o1 = g->out[1], o2 = g->out[2];
  int64_t sd = t0 / (o1 * o2), sh = t0 / o2 % o1, sw = t0 % o2; /* position of t0 */
  float *row = col;
  for (int64_t c = 0; c < g->Cg; c++)
    for (int64_t kd = 0; kd < g->k[0]; kd++)
      for (int64_t kh = 0; kh < g->k[1]; kh++)
        for (int64_t kw = 0; kw < g->k[2]; kw++, row += T) {
          const float *xc = x + c * g->in_sp;
          int64_t od = sd, oh = sh, ow = sw;
          for (int64_t done = 0; done < T;) {
            int64_t run = T - done < o2 - ow ? T - done : o2 - ow;
            int64_t id = od * g->s[0] - g->pb[0] + kd * g->d[0], ih = oh * g->s[1] - g->pb[1] + kh * g->d[1];
            float *dst = row + done;
            if (id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1]) {
              memset(dst, 0, (size_t)run * sizeof *dst);
            } else {
              const float *src = xc + (id * g->in[1] + ih) * g->in[2];
              int64_t s2 = g->s[2], iw0 = ow * s2 - g->pb[2] + kw * g->d[2], iw = g->in[2];
              int64_t lo = iw0 >= 0 ? 0 : (-iw0 + s2 - 1) / s2; /* first j with iw0 + j·s2 >= 0 */
              int64_t hi = iw0 < iw ? (iw - 1 - iw0) / s2 + 1 : 0; /* first j with iw0 + j·s2 >= iw */
              if (lo > run) lo = run;
              if (hi > run) hi = run;
              if (hi < lo) hi = lo;
              for (int64_t j = 0; j < lo; j++) dst[j] = 0.0f;
              if (s2 == 1) memcpy(dst + lo, src + iw0 + lo, (size_t)(hi - lo) * sizeof *dst);
              else if (hi > lo)
                gather(dst + lo, src + iw0 + lo * s2, hi - lo, s2);
              for (int64_t j = hi; j < run; j++) dst[j] = 0.0f;
            }
            done += run;
            out_advance(&od, &oh, &ow, run, o1, o2);
          }
        }
}

/* The same columns as im2col, written straight into the wide GEMM's
 * B-panel layout (sgemm.h kiln_sgemm_wide_pack_b: per KC slice, strips of
 * 32 columns, kc x 32 each; columns T..Tpad zero), so the GEMM reads them
 * without packing them again. Strip by strip, and in a strip tap by tap:
 * the writes are sequential (tap by tap across all strips, the strips
 * kc·32 floats apart, wrote into the same few L1 sets: ResNet-18 ran 8 %
 * slower than with im2col + packing). */
static void im2col_packed(const geom *g, const float *x, int64_t t0, int64_t T, float *bp) {
  enum { NR = KILN_SGEMM_WIDE_NR };
  int64_t o1 = g->out[1], o2 = g->out[2], Kc = g->Cg * g->k_sp, Tpad = (T + NR - 1) / NR * NR;
  int64_t in0 = g->in[0], in1 = g->in[1], iw = g->in[2];
  for (int64_t c0 = 0; c0 < Tpad; c0 += NR) {
    int64_t cn = T - c0 < NR ? T - c0 : NR, t = t0 + c0;
    /* the strip's runs along output rows, once per strip: where each starts
       in the strip, its length, and the input position of its first column
       at tap (0, 0, 0) */
    int64_t rat[NR], rlen[NR], rid[NR], rih[NR], riw[NR];
    int nrun = 0;
    int64_t od = t / (o1 * o2), oh = t / o2 % o1, ow = t % o2;
    for (int64_t done = 0; done < cn; nrun++) {
      int64_t run = cn - done < o2 - ow ? cn - done : o2 - ow;
      rat[nrun] = done, rlen[nrun] = run;
      rid[nrun] = od * g->s[0] - g->pb[0], rih[nrun] = oh * g->s[1] - g->pb[1], riw[nrun] = ow - g->pb[2];
      done += run;
      out_advance(&od, &oh, &ow, run, o1, o2);
    }
    int64_t r = 0, p0 = 0, kc = kiln_sgemm_wide_kc(Kc, 0); /* the tap (row of B) and its KC slice */
    for (int64_t c = 0; c < g->Cg; c++)
      for (int64_t kd = 0; kd < g->k[0]; kd++)
        for (int64_t kh = 0; kh < g->k[1]; kh++)
          for (int64_t kw = 0; kw < g->k[2]; kw++, r++) {
            if (r == p0 + kc) {
              p0 += kc;
              kc = kiln_sgemm_wide_kc(Kc, p0);
            }
            float *dst = bp + p0 * Tpad + c0 * kc + (r - p0) * NR;
            const float *xc = x + c * g->in_sp;
            int64_t dd = kd * g->d[0], dh = kh * g->d[1], dw = kw * g->d[2];
            for (int q = 0; q < nrun; q++) {
              float *d = dst + rat[q];
              int64_t run = rlen[q], id = rid[q] + dd, ih = rih[q] + dh, iw0 = riw[q] + dw;
              int64_t lo = iw0 >= 0 ? 0 : -iw0, hi = iw - iw0; /* the run's columns inside the input row */
              if (id < 0 || id >= in0 || ih < 0 || ih >= in1) lo = hi = run;
              if (lo > run) lo = run;
              if (hi > run) hi = run;
              if (hi < lo) hi = lo;
              if (hi == lo) { /* all padding */
                memset(d, 0, (size_t)run * sizeof *d);
                continue;
              }
              const float *src = xc + (id * in1 + ih) * iw + (iw0 + lo); /* column lo of the run */
              if (hi - lo == NR) memcpy(d, src, NR * sizeof *d); /* fixed sizes: vector moves, no call */
              else if (hi - lo == 16) memcpy(d + lo, src, 16 * sizeof *d);
              else if (hi - lo >= 8) memcpy(d + lo, src, (size_t)(hi - lo) * sizeof *d);
              else
                for (int64_t j = lo; j < hi; j++) d[j] = src[j - lo];
              for (int64_t j = 0; j < lo; j++) d[j] = 0.0f;
              for (int64_t j = hi; j < run; j++) d[j] = 0.0f;
            }
            for (int64_t j = cn; j < NR; j++) dst[j] = 0.0f;
          }
  }
}

static bool pointwise(const geom *g) {
  for (int i = 0; i < 3; i++)
    if (g->k[i] != 1 || g->s[i] != 1 || g->pb[i] != 0 || g->out[i] != g->in[i]) return false;
  return true;
}

/* Adds the bias to rows [0, rows) of an output block (row stride ld, T
 * columns) and applies the epilogue: per row, or once when the rows are
 * contiguous (T == ld). flat0: flat index of the block's first element. */
static void finish_block(float *y, int64_t rows, int64_t T, int64_t ld, const float *bias, int64_t flat0,
                         const kiln_cpu_epilogue *ep) {
  if (ep && ep->clamp) { /* bias and the clamp in one pass, no epilogue call */
    for (int64_t m = 0; m < rows; m++) kiln_cpu_clamp(y + m * ld, T, bias ? bias + m : NULL, ep->lo, ep->hi);
    return;
  }
  for (int64_t m = 0; m < rows; m++) {
    float *yr = y + m * ld, bm = bias ? bias[m] : 0.0f;
    if (bias) {
      int64_t t = 0;
      for (; t + 8 <= T; t += 8) { /* straight-line groups of 8: vectorised at -O2 (SLP) */
        float *q = yr + t;
        q[0] += bm, q[1] += bm, q[2] += bm, q[3] += bm, q[4] += bm, q[5] += bm, q[6] += bm, q[7] += bm;
      }
      for (; t < T; t++) yr[t] += bm;
    }
    if (ep && T != ld) ep->apply(ep->ctx, flat0 + m * ld, T, yr);
  }
  if (ep && T == ld) ep->apply(ep->ctx, flat0, rows * T, y);
}

/* The tiles of the general path as pool tasks (when the SGEMM is kiln's own,
 * whose calls inside a task run on that task's thread: see pool.h): task t
 * is tile t % tiles of (image, group) t / tiles; col holds one im2col tile
 * per worker. */
typedef struct conv_job {
  const geom *g;
  const float *x, *w, *bias;
  float *y;
  const kiln_cpu_epilogue *ep;
  bool pw;
  int64_t Kc, T, tiles;
  float *col;
  kiln_la_gather_fn gather;
  atomic_int status;
  const kiln_cpu_conv_pack *pk; /* W packed once (prepack.h) or NULL */
  kiln_sgemm_micro_fn pmicro;   /* the wide GEMM's micro-kernel when it runs: im2col then packs B for it */
} conv_job;

/* One tile's GEMM: Y = W[gi] · B, from W's pack when there is one; B
 * packed already (im2col_packed) when bpacked. Where the wide GEMM runs
 * (pmicro), it also adds the bias and clamps (ep->clamp) each tile of Y
 * while it is in L1 (kiln_sgemm_post): *post_done says so. */
static kiln_status tile_gemm(const geom *g, const kiln_cpu_conv_pack *pk, kiln_sgemm_micro_fn pmicro, int64_t gi,
                             const float *wg, int64_t Kc, int64_t tn, const float *b, int64_t ldb, bool bpacked,
                             const float *bias, const kiln_cpu_epilogue *ep, float *y, int64_t ldc,
                             bool *post_done) {
  *post_done = false;
  if (!pmicro) return kiln_sgemm(false, false, g->Mg, tn, Kc, 1.0f, wg, Kc, b, ldb, 0.0f, y, ldc);
  kiln_sgemm_post post = {bias, ep && ep->clamp, ep ? ep->lo : 0.0f, ep ? ep->hi : 0.0f};
  bool any = bias || post.clamp;
  *post_done = any;
  return kiln_sgemm_wide_post(pmicro, g->Mg, tn, Kc, wg, Kc, pk ? pk->data + gi * pk->gstride : NULL,
                              bpacked ? NULL : b, ldb, bpacked ? b : NULL, 0.0f, y, ldc, any ? &post : NULL);
}

/* One tile of the general path: its columns (im2col), then the GEMM. */
static kiln_status col_tile(const geom *g, const kiln_cpu_conv_pack *pk, kiln_sgemm_micro_fn pmicro, int64_t gi,
                            const float *xg, const float *wg, int64_t Kc, int64_t t0, int64_t tn, float *col,
                            kiln_la_gather_fn gather, const float *bias, const kiln_cpu_epilogue *ep, float *y,
                            int64_t ldc, bool *post_done) {
  if (pmicro && g->s[2] == 1) {
    im2col_packed(g, xg, t0, tn, col);
    return tile_gemm(g, pk, pmicro, gi, wg, Kc, tn, col, tn, true, bias, ep, y, ldc, post_done);
  }
  im2col(g, xg, t0, tn, col, gather);
  return tile_gemm(g, pk, pmicro, gi, wg, Kc, tn, col, tn, false, bias, ep, y, ldc, post_done);
}

/* What is left of a tile after its GEMM: the bias and the epilogue, unless
 * the GEMM did them (post_done: the bias; the epilogue too when a clamp). */
static void tile_finish(float *y, int64_t rows, int64_t T, int64_t ld, const float *bias, int64_t flat0,
                        const kiln_cpu_epilogue *ep, bool post_done) {
  if (!post_done) finish_block(y, rows, T, ld, bias, flat0, ep);
  else if (ep && !ep->clamp) finish_block(y, rows, T, ld, NULL, flat0, ep);
}

/* Columns of an im2col buffer for T: rounded up to the GEMM's strips (the
 * packed layout's padding). */
static int64_t tile_cols(int64_t T) { return (T + KILN_SGEMM_WIDE_NR - 1) / KILN_SGEMM_WIDE_NR * KILN_SGEMM_WIDE_NR; }

static void conv_tile(void *ctx, int64_t task, int worker) {
  conv_job *j = ctx;
  const geom *g = j->g;
  int64_t ng = task / j->tiles, t0 = task % j->tiles * j->T, n = ng / g->G, gi = ng % g->G;
  int64_t Kc = j->Kc, OSP = g->out_sp, tn = OSP - t0 < j->T ? OSP - t0 : j->T;
  const float *xg = j->x + (n * g->C + gi * g->Cg) * g->in_sp, *wg = j->w + gi * g->Mg * Kc;
  int64_t yoff = (n * g->M + gi * g->Mg) * OSP;
  kiln_status s;
  const float *bg = j->bias ? j->bias + gi * g->Mg : NULL;
  bool post_done;
  if (j->pw) {
    s = tile_gemm(g, j->pk, j->pmicro, gi, wg, Kc, tn, xg + t0, g->in_sp, false, bg, j->ep, j->y + yoff + t0, OSP,
                  &post_done);
  } else {
    float *col = j->col + (size_t)worker * (size_t)(Kc * tile_cols(j->T));
    s = col_tile(g, j->pk, j->pmicro, gi, xg, wg, Kc, t0, tn, col, j->gather, bg, j->ep, j->y + yoff + t0, OSP,
                 &post_done);
  }
  if (!s) tile_finish(j->y + yoff + t0, g->Mg, tn, OSP, bg, yoff + t0, j->ep, post_done);
  if (s) {
    kiln_error_clear();
    int zero = 0;
    atomic_compare_exchange_strong(&j->status, &zero, (int)s);
  }
}

static kiln_status conv_gemm(const geom *g, const float *x, const float *w, const float *bias, float *y,
                             const kiln_cpu_epilogue *ep, const kiln_cpu_conv_pack *pk) {
  bool pw = pointwise(g);
  kiln_sgemm_micro_fn pmicro = kiln_sgemm_pack_reader();
  if (!pmicro) pk = NULL; /* packs are read only by the wide GEMM's micro-kernel (not under base or OpenBLAS) */
  int64_t Kc = g->Cg * g->k_sp, OSP = g->out_sp, T = OSP;
  if (!pw) {
    int64_t t = KILN_CONV_SCRATCH / ((int64_t)sizeof(float) * Kc);
    if (t < KILN_CONV_MIN_TILE) t = KILN_CONV_MIN_TILE;
    if (t < T) T = t;
  }
  if (ep) {
    int64_t t = KILN_LA_EPILOGUE_BLOCK / ((int64_t)sizeof(float) * g->Mg);
    if (t < 64) t = 64;
    if (t < T) T = t;
  }
  /* tiles on the pool: only when the SGEMM is kiln's own (OpenBLAS would
     start its own threads inside every task); about 4 tiles per thread */
  int workers = kiln_pool_threads();
  bool par = workers > 1 && (kiln_la_isa() == KILN_VM_ISA_BASE || kiln_sgemm_active() == KILN_SGEMM_AVX512) &&
             (double)g->Mg * (double)Kc * (double)OSP * (double)g->N * (double)g->G >= (double)(1 << 23);
  if (par) {
    int64_t want = (OSP * g->N * g->G + 4 * workers - 1) / (4 * workers) / (g->N * g->G);
    if (want < 256) want = 256;
    if (want < T) T = want;
  } else {
    workers = 1;
  }
  if (T < OSP && T > 16) T &= ~(int64_t)15; /* whole vectors per tile row */
  if (par && g->N * g->G * ((OSP + T - 1) / T) < 2 * (int64_t)workers) {
    /* too few tiles to share (a 1x1 layer on a 7x7 or 14x14 plane is one
       tile): the tiles in order on the caller, each GEMM split over the
       pool by the GEMM itself (rows and columns; inside a pool task it
       would run on one thread) */
    par = false;
    workers = 1;
  }
  if (par) {
    conv_job j = {g, x, w, bias, y, ep, pw, Kc, T, (OSP + T - 1) / T, NULL, kiln_la_gather(), 0, pk, pmicro};
    atomic_init(&j.status, 0);
    if (!pw && !(j.col = kiln_malloc((size_t)(Kc * tile_cols(T)) * sizeof(float) * (size_t)workers)))
      return kiln_fail(KILN_E_NOMEM, "out of memory for %d %lld x %lld im2col tiles", workers, (long long)Kc,
                       (long long)T);
    kiln_pool_for(g->N * g->G * j.tiles, workers, conv_tile, &j);
    kiln_free(j.col);
    int st = atomic_load(&j.status);
    return st ? kiln_fail((kiln_status)st, "a convolution tile failed on a pool thread") : KILN_OK;
  }
  float *col = NULL;
  if (!pw) {
    col = kiln_malloc((size_t)(Kc * tile_cols(T)) * sizeof *col);
    if (!col)
      return kiln_fail(KILN_E_NOMEM, "out of memory for a %lld x %lld im2col tile", (long long)Kc, (long long)T);
  }
  kiln_status s = KILN_OK;
  kiln_la_gather_fn gather = kiln_la_gather();
  for (int64_t n = 0; n < g->N && !s; n++)
    for (int64_t gi = 0; gi < g->G && !s; gi++) {
      const float *xg = x + (n * g->C + gi * g->Cg) * g->in_sp, *wg = w + gi * g->Mg * Kc;
      int64_t yoff = (n * g->M + gi * g->Mg) * OSP;
      for (int64_t t0 = 0; t0 < OSP && !s; t0 += T) {
        int64_t tn = OSP - t0 < T ? OSP - t0 : T;
        const float *bg = bias ? bias + gi * g->Mg : NULL;
        bool post_done;
        if (pw)
          s = tile_gemm(g, pk, pmicro, gi, wg, Kc, tn, xg + t0, g->in_sp, false, bg, ep, y + yoff + t0, OSP,
                        &post_done);
        else
          s = col_tile(g, pk, pmicro, gi, xg, wg, Kc, t0, tn, col, gather, bg, ep, y + yoff + t0, OSP, &post_done);
        if (!s) tile_finish(y + yoff + t0, g->Mg, tn, OSP, bg, yoff + t0, ep, post_done);
      }
    }
  kiln_free(col);
  return s;
}

/* ---- the depthwise path (group == C, nsp <= 2) ---- */

/* Channels of the depthwise path as pool tasks: task t is the block of
 * channels [t % blocks · cb, +cb) of image t / blocks, with a padded plane,
 * tap pointers and a flat output buffer per worker. A clamp epilogue is
 * done by the rows kernel on its accumulators; any other is applied once per
 * block (its output channels are contiguous): per channel it cost more than
 * the convolution on 7x7 planes. */
typedef struct dw_job {
  const geom *g;
  const float *x, *w, *bias;
  float *y;
  const kiln_cpu_epilogue *ep;
  float *planes, *flats;
  const float **srcs;
  const int64_t *tapoff; /* per tap: where it reads for output (0, 0) (dw_shape) */
  size_t plane_size, flat_size;
  int64_t cb, blocks, parts; /* tasks: (image, part of the rows, block of cb channels) */
  bool flat; /* the whole plane as one row of the rows kernel (dw_shape) */
  kiln_dw_rows_fn rows;
  kiln_la_gather_fn gather;
  kiln_la_split2_fn split2; /* NULL: stride-2 rows gathered phase by phase */
  kiln_la_copy_rows_fn copy_rows;
  kiln_dw_plane_fn plane;  /* a small 'same' plane read in place (no padded copy): tapoff then holds the */
  const uint16_t *masks;   /* taps' shifts, masks where each falls inside (sgemm.h kiln_dw_plane_fn) */
  kiln_dw_s2_fn s2;        /* stride 2, read in place (dws2.h): no padded plane either */
  kiln_dw_s1_fn s1;        /* 3x3 stride-1 'same', read in place (dws1.h): nor here */
} dw_job;

/* The padded input plane of one channel split by stride phase in both
 * dims: padded element (py, px) is at plane[((py % sh · sw + px % sw) · Hq
 * + py / sh) · Wq + px / sw]. Tap (ky, kx) of output (oy, ox) then reads
 * tapoff[tap] + oy · Wq + ox: every output row is a contiguous run, and so is
 * the whole output plane with Wq - OW columns computed in between and
 * dropped (the flat form). */
typedef struct dw_shape {
  int64_t Hp, Wp, Hq, Wq, size;
} dw_shape;

static dw_shape dw_shape_of(const geom *g) {
  dw_shape d;
  d.Hp = (g->out[1] - 1) * g->s[1] + (g->k[1] - 1) * g->d[1] + 1;
  d.Wp = (g->out[2] - 1) * g->s[2] + (g->k[2] - 1) * g->d[2] + 1;
  d.Hq = (d.Hp + g->s[1] - 1) / g->s[1];
  d.Wq = (d.Wp + g->s[2] - 1) / g->s[2];
  d.size = g->s[1] * g->s[2] * d.Hq * d.Wq;
  return d;
}

/* Copies channel xc's input into its plane. Only the input's elements are
 * written: the padding is the same for every channel, zeroed once when the
 * plane was allocated. */
static void dw_plane(const geom *g, const dw_shape *d, const float *xc, float *plane, const dw_job *j) {
  int64_t H = g->in[1], W = g->in[2], sh = g->s[1], sw = g->s[2], pt = g->pb[1], pl = g->pb[2];
  int64_t Wp = d->Wp, py1 = pt + H < d->Hp ? pt + H : d->Hp; /* padded rows inside the input: [pt, py1) */
  kiln_la_gather_fn gather = j->gather;
  kiln_la_split2_fn split2 = j->split2;
  if (sh == 1 && sw == 1) { /* one phase: padded rows [pt, py1), columns [lo, hi) */
    int64_t lo = pl < Wp ? pl : Wp, hi = pl + W < Wp ? pl + W : Wp;
    if (hi > lo && py1 > pt) j->copy_rows(plane + pt * d->Wq + lo, d->Wq, xc, W, py1 - pt, hi - lo);
    return;
  }
  for (int64_t py = pt; py < py1; py++) {
    const float *xr = xc + (py - pt) * W;
    float *pr = plane + ((py % sh) * sw * d->Hq + py / sh) * d->Wq; /* column phase 0 */
    if (sw == 1) {
      int64_t lo = pl < Wp ? pl : Wp, hi = pl + W < Wp ? pl + W : Wp;
      if (hi > lo) memcpy(pr + lo, xr, (size_t)(hi - lo) * sizeof *pr);
      continue;
    }
    if (sw == 2 && split2) {
      /* both phases in one pass: input column x is padded px = x + pl (< Wp), phase px % 2, at q = px / 2 */
      int64_t nx = pl + W < Wp ? W : Wp - pl, pq = d->Hq * d->Wq;
      if (nx > 0) split2(pr + (pl % 2) * pq + pl / 2, pr + ((pl + 1) % 2) * pq + (pl + 1) / 2, xr, nx);
      continue;
    }
    for (int64_t ph = 0; ph < sw; ph++) {
      /* q in [0, nq): px = q·sw + ph < Wp; inside the input for q in [lo, hi) */
      int64_t nq = ph < Wp ? (Wp - ph + sw - 1) / sw : 0;
      int64_t lo = pl > ph ? (pl - ph + sw - 1) / sw : 0, hi = pl + W > ph ? (pl + W - ph + sw - 1) / sw : 0;
      if (lo > nq) lo = nq;
      if (hi > nq) hi = nq;
      if (hi > lo) gather(pr + ph * d->Hq * d->Wq + lo, xr + lo * sw + ph - pl, hi - lo, sw);
    }
  }
}

static void dw_channels(void *ctx, int64_t task, int worker) {
  const dw_job *j = ctx;
  const geom *g = j->g;
  dw_shape d = dw_shape_of(g);
  int64_t OH = g->out[1], OW = g->out[2], Wq = d.Wq, mult = g->M / g->C, nk = g->k[1] * g->k[2];
  float *plane = j->planes ? j->planes + (size_t)worker * j->plane_size : NULL; /* none in place (NULL + 0 is UB) */
  float *flat = j->flats ? j->flats + (size_t)worker * j->flat_size : NULL; /* no flat form: none (NULL + 0 is UB) */
  bool cl = j->ep && j->ep->clamp;
  float lo = cl ? j->ep->lo : -INFINITY, hi = cl ? j->ep->hi : INFINITY;
  const float **src = j->srcs + (size_t)worker * (size_t)nk;
  int64_t n = task / j->blocks / j->parts, part = task / j->blocks % j->parts;
  int64_t c0 = task % j->blocks * j->cb, c1 = c0 + j->cb < g->C ? c0 + j->cb : g->C;
  int64_t r0 = OH * part / j->parts, r1 = OH * (part + 1) / j->parts; /* the part's output rows */
  int64_t c = c0;
  /* two channels a call where the kernel has that form (mult 1: channel c's output plane and weights follow c - 1's) */
  kiln_dw_plane2_fn plane2 = j->plane && mult == 1 ? kiln_dw_plane2() : NULL;
  for (; plane2 && c + 2 <= c1; c += 2)
    plane2(j->y + (n * g->M + c) * g->out_sp, j->x + (n * g->C + c) * g->in_sp, g->out_sp, j->tapoff, j->masks,
           j->w + c * nk, (int)nk, j->bias ? j->bias[c] : 0.0f, j->bias ? j->bias[c + 1] : 0.0f, lo, hi);
  for (; c < c1 && j->plane; c++) /* in place */
    for (int64_t mm = 0; mm < mult; mm++) {
      int64_t m = c * mult + mm;
      j->plane(j->y + (n * g->M + m) * g->out_sp, j->x + (n * g->C + c) * g->in_sp, g->out_sp, j->tapoff, j->masks,
               j->w + m * nk, (int)nk, j->bias ? j->bias[m] : 0.0f, lo, hi);
    }
  /* stride 2 in place, output rows [r0, r1) as a plane of their own: its row o - r0 reads input rows 2o - pt + ky,
     from row sh = 2·r0 - pt on (its top padding pt - 2·r0 where that is above 0); conv_depthwise splits the rows
     only where sh < H */
  int64_t sh = 2 * r0 - g->pb[1] > 0 ? 2 * r0 - g->pb[1] : 0;
  for (int64_t c = c0; c < c1 && j->s2; c++)
    for (int64_t mm = 0; mm < mult; mm++) {
      int64_t m = c * mult + mm;
      j->s2(j->y + (n * g->M + m) * g->out_sp + r0 * OW, j->x + (n * g->C + c) * g->in_sp + sh * g->in[2],
            g->in[1] - sh, g->in[2], r1 - r0, OW, g->pb[1] - 2 * r0 + sh, g->pb[2], j->w + m * nk, (int)g->k[1],
            (int)g->k[2], j->bias ? j->bias[m] : 0.0f, lo, hi);
    }
  for (int64_t c = c0; c < c1 && j->s1; c++) /* 3x3 stride-1 'same' in place */
    for (int64_t mm = 0; mm < mult; mm++) {
      int64_t m = c * mult + mm;
      j->s1(j->y + (n * g->M + m) * g->out_sp, j->x + (n * g->C + c) * g->in_sp, OH, OW, r0, r1, j->w + m * nk,
            j->bias ? j->bias[m] : 0.0f, lo, hi);
    }
  for (int64_t c = c0; c < c1 && !j->plane && !j->s2 && !j->s1; c++) {
    dw_plane(g, &d, j->x + (n * g->C + c) * g->in_sp, plane, j);
    for (int64_t t = 0; t < nk; t++) src[t] = plane + j->tapoff[t];
    for (int64_t mm = 0; mm < mult; mm++) {
      int64_t m = c * mult + mm;
      const float *wm = j->w + m * nk;
      float *ym = j->y + (n * g->M + m) * g->out_sp, bm = j->bias ? j->bias[m] : 0.0f;
      if (j->flat) { /* output (oy, ox) at flat[oy·Wq + ox] */
        j->rows(flat, 0, src, 0, 1, (OH - 1) * Wq + OW, wm, (int)nk, bm, lo, hi);
        j->copy_rows(ym, OW, flat, Wq, OH, OW);
      } else {
        j->rows(ym, OW, src, Wq, OH, OW, wm, (int)nk, bm, lo, hi);
      }
    }
  }
  if (j->ep && !j->ep->clamp && j->parts == 1) { /* a clamp was done by the rows kernel */
    int64_t m0 = n * g->M + c0 * mult;
    j->ep->apply(j->ep->ctx, m0 * g->out_sp, (c1 - c0) * mult * g->out_sp, j->y + m0 * g->out_sp);
  } else if (j->ep && !j->ep->clamp) { /* the part's rows of each output plane */
    for (int64_t m = n * g->M + c0 * mult; m < n * g->M + c1 * mult; m++)
      j->ep->apply(j->ep->ctx, m * g->out_sp + r0 * OW, (r1 - r0) * OW, j->y + m * g->out_sp + r0 * OW);
  }
}

static _Atomic bool dw_plane_on = true; /* kiln_conv_dw_plane_enable (tests) */
void kiln_conv_dw_plane_enable(bool on) { dw_plane_on = on; }
static _Atomic int dw_s2_mode = -1; /* -1: KILN_DW_S2 not read yet; -2: where it applies; kiln_conv_dw_s2_force */
void kiln_conv_dw_s2_force(int mode) { dw_s2_mode = mode < 0 ? -2 : mode; }
static _Atomic int dw_s1_mode = -1; /* -1: KILN_DW_S1 not read yet; -2: where it applies; kiln_conv_dw_s1_force */
void kiln_conv_dw_s1_force(int mode) { dw_s1_mode = mode < 0 ? -2 : mode; }

/* Output rows narrower than this take the flat form (one row of the
 * kernel per plane instead of OH rows, Wq - OW wasted columns per row, then
 * copied out) unless the kernel fills its chains across rows (AVX-512);
 * wider ones fill the kernel's vectors well by rows. */
#define KILN_DW_FLAT_WIDTH 32
/* Output elements per depthwise task and epilogue call (when channels are
 * that small): enough to amortise the epilogue call, small enough to stay
 * in L1/L2. */
#define KILN_DW_BLOCK 4096

static kiln_status conv_depthwise(const geom *g, const float *x, const float *w, const float *bias, float *y,
                                  const kiln_cpu_epilogue *ep) {
  dw_shape d = dw_shape_of(g);
  int64_t KH = g->k[1], KW = g->k[2], OH = g->out[1], OW = g->out[2];
  int64_t sh = g->s[1], sw = g->s[2], dh = g->d[1], dw = g->d[2], nk = KH * KW, mult = g->M / g->C;
  int64_t cb = KILN_DW_BLOCK / (g->out_sp * mult);
  if (cb < 1) cb = 1;
  if (cb > g->C) cb = g->C;
  int64_t blocks = (g->C + cb - 1) / cb, tasks = g->N * blocks;
  int workers = kiln_pool_threads();
  if (tasks < 2 || g->N * g->C * g->out_sp * mult * nk < ((int64_t)1 << 18)) workers = 1;
  if (workers > 1 && tasks < 4 * (int64_t)workers && cb > 1) { /* keep about 4 tasks per thread */
    cb = (g->N * g->C + 4 * workers - 1) / (4 * workers) / g->N;
    if (cb < 1) cb = 1;
    blocks = (g->C + cb - 1) / cb;
    tasks = g->N * blocks;
  }
  bool across;
  kiln_dw_rows_fn rows = kiln_dw_rows(&across);
  /* a stride-1 plane whose output is the input's size (p numbers both: a tap is a constant shift) of at most
     KILN_DW_PLANE_MAX outputs, where its vectors of 16 consecutive outputs are at most 3/4 of the rows kernel's
     vectors (row by row, each row's last part-filled): read in place (kiln_dw_plane), no padded copy. Measured
     (MobileNetV2, 1 thread): 7x7 planes (64 lanes for 112) 58 -> 30 us a layer; 14x14 (208 for 224) ~8 % slower */
  int64_t rowlanes = OH * ((OW + 15) / 16) * 16, planelanes = (g->out_sp + 15) / 16 * 16;
  kiln_dw_plane_fn pfn = dw_plane_on && sh == 1 && sw == 1 && OH == g->in[1] && OW == g->in[2] &&
                                 g->out_sp <= KILN_DW_PLANE_MAX && 4 * planelanes <= 3 * rowlanes
                             ? kiln_dw_plane()
                             : NULL;
  /* stride 2 (dilation 1, kernels up to 8 x 8): read in place, the phases split in registers (dws2.h) instead of
     copying each plane into its padded phase planes. Measured: GEMM_CONV.md "Stride-2 depthwise in place" */
  if (dw_s2_mode == -1) { /* KILN_DW_S2=0 (benches): the padded phase planes */
    const char *e = getenv("KILN_DW_S2");
    dw_s2_mode = e && *e == '0' ? 0 : -2;
  }
  int mode = dw_s2_mode;
  kiln_dw_s2_fn s2 = mode != 0 && !pfn && sh == 2 && sw == 2 && dh == 1 && dw == 1 && KH <= 8 && KW <= 8
                         ? mode == 2 ? kiln_dw_s2_base : kiln_dw_s2(OW)
                         : NULL;
  /* 3x3 stride 1 (dilation 1) with pads of 1 on every side, the output the input's size, where the plane
     kernel does not take it: read in place by strips walked down the rows (dws1.h), no padded plane. Measured:
     GEMM_CONV.md "Stride-1 depthwise 3x3 in place" */
  if (dw_s1_mode == -1) { /* KILN_DW_S1=0 (benches): the padded plane and the rows kernel */
    const char *e = getenv("KILN_DW_S1");
    dw_s1_mode = e && *e == '0' ? 0 : -2;
  }
  int mode1 = dw_s1_mode;
  kiln_dw_s1_fn s1 = mode1 != 0 && !pfn && g->nsp == 2 && KH == 3 && KW == 3 && sh == 1 && sw == 1 && dh == 1 &&
                             dw == 1 && g->pb[1] == 1 && g->pb[2] == 1 && OH == g->in[1] && OW == g->in[2]
                         ? mode1 == 2 ? kiln_dw_s1_base : kiln_dw_s1()
                         : NULL;
  /* the in-place kernels take a part of the rows (GEMM_CONV.md "Parts of the image"): a thread's part, as in the
     layers before and after; the stride-2 kernel where every part starts inside the input */
  int64_t parts = 1;
  if (workers > 1 && OH >= 2 * workers && (s1 || (s2 && 2 * (OH - 1) - g->pb[1] < g->in[1]))) {
    parts = workers;
    int64_t want = (4 * workers + g->N * parts - 1) / (g->N * parts); /* blocks a part: ~4 tasks per thread */
    cb = KILN_DW_BLOCK * parts / (g->out_sp * mult);
    if (cb > g->C) cb = g->C;
    if (cb < 1 || (g->C + cb - 1) / cb < want) cb = (g->C + want - 1) / want;
    blocks = (g->C + cb - 1) / cb;
    tasks = g->N * parts * blocks;
  }
  bool flat = OW < KILN_DW_FLAT_WIDTH && !across && !pfn && !s2 && !s1;
  size_t plane_size = pfn || s2 || s1 ? 0 : (size_t)d.size, flat_size = flat ? (size_t)(OH * d.Wq) : 0;
  int64_t *tapoff = kiln_malloc((size_t)nk * sizeof *tapoff), nv = (g->out_sp + 15) / 16;
  uint16_t *masks = pfn ? kiln_calloc((size_t)(nk * nv), sizeof *masks) : NULL;
  for (int64_t ky = 0; ky < KH && tapoff; ky++)
    for (int64_t kx = 0; kx < KW; kx++) {
      int64_t ty = ky * dh, tx = kx * dw; /* the tap's padded position for output (0, 0) */
      tapoff[ky * KW + kx] = ((ty % sh * sw + tx % sw) * d.Hq + ty / sh) * d.Wq + tx / sw;
      if (!pfn || !masks) continue;
      int64_t dy = ty - g->pb[1], dx = tx - g->pb[2], t = ky * KW + kx; /* the tap's shift in the input */
      tapoff[t] = dy * OW + dx;
      for (int64_t p = 0; p < g->out_sp; p++) {
        int64_t iy = p / OW + dy, ix = p % OW + dx;
        if (iy >= 0 && iy < OH && ix >= 0 && ix < OW) masks[t * nv + p / 16] |= (uint16_t)(1u << (p % 16));
      }
    }
  dw_job j = {g, x, w, bias, y, ep, pfn || s2 || s1 ? NULL : kiln_calloc(plane_size * (size_t)workers, sizeof(float)),
              flat ? kiln_malloc(flat_size * (size_t)workers * sizeof(float)) : NULL,
              kiln_malloc((size_t)(nk * workers) * sizeof(const float *)), tapoff, plane_size, flat_size, cb,
              blocks, parts, flat, rows, kiln_la_gather(), kiln_la_split2(), kiln_la_copy_rows(), pfn, masks, s2, s1};
  if ((!pfn && !s2 && !s1 && !j.planes) || !j.srcs || (flat && !j.flats) || !tapoff || (pfn && !masks)) {
    kiln_free(masks);
    kiln_free(tapoff);
    kiln_free(j.planes);
    kiln_free(j.flats);
    kiln_free(j.srcs);
    return kiln_fail(KILN_E_NOMEM, "out of memory for a depthwise convolution plane");
  }
  if (parts > 1) kiln_pool_for_shares(tasks, workers, dw_channels, &j);
  else kiln_pool_for(tasks, workers, dw_channels, &j);
  kiln_free(masks);
  kiln_free(j.planes);
  kiln_free(j.flats);
  kiln_free(j.srcs);
  kiln_free(tapoff);
  return KILN_OK;
}

/* ---- the direct path (1-D/2-D, strides up to 8, not pointwise) ----
 * No im2col: each input channel is copied once into the depthwise path's
 * zero-padded plane split by stride phase (dw_shape, dw_plane: Hq x Wq per
 * phase), and output (oh, ow) is indexed q = oh·Wq + ow, so tap (c, kh, kw)
 * of output q reads plane element off[tap] + q, off[tap] = c·size +
 * dw_shape's offset of the tap (its phase plane, row kh·dh / sh, column
 * kw·dw / sw): 32 consecutive q are 32 consecutive floats for every tap
 * (the Wq - OW columns between output rows are computed and dropped). An
 * output row of a multiple of 16 (small_cnn's 64, 32 and 16) is read as
 * runs of 16 along the output instead (*row tiles*: a tile's two halves
 * from one row or two, nothing dropped) and the tile is stored straight
 * into Y: its 32 outputs are consecutive there. The micro-kernel (sgemm.h
 * kiln_conv_direct_fn) is the wide GEMM's 12 x 32 tile reading those rows
 * in place, W from its pack (prepack.c) or, unpacked, W's rows in place
 * (kiln_conv_direct_a_fn): per KC slice the same fmas as the GEMM on the
 * im2col, so the output is the GEMM path's bit for bit. */

/* -1: not read yet (KILN_CONV_DIRECT); -2: the rule of direct_wanted; 0:
 * never; 1: always where it applies, the AVX-512 kernel; 2: always, its
 * scalar twin (tests). */
static _Atomic int direct_mode = -1; /* atomic: plans may run on several threads */
void kiln_conv_direct_force(int mode) { direct_mode = mode < 0 ? -2 : mode; }

/* The direct paths' input (direct_input): the padded, phase-split planes
 * of every input channel, and how they are made. Shared: one copy, made on
 * the pool before the compute loop (the planes' pass, pp planes a task).
 * Own (direct_own): one copy per worker (stride floats apart), made by the
 * worker's first task of the compute loop (direct_x), so its tasks read
 * lines their own core wrote. */
#define KILN_DIRECT_OWN_MAX 64 /* workers with their own copy, at most */
typedef struct direct_in {
  const geom *g;
  dw_job planes;                 /* the plane copy's job (dw_plane) */
  float *xp;                     /* the planes; own: worker w's at xp + w·stride */
  int64_t P, pp, stride;         /* P: floats per channel */
  bool own;
  bool made[KILN_DIRECT_OWN_MAX]; /* own: worker w's copy made (each flag read and set by one thread) */
} direct_in;

typedef struct direct_job {
  const geom *g;
  direct_in *in;                 /* padded planes (per image and group): direct_x */
  const float *apk, *bias;       /* W's packs (per group) or NULL, bias */
  const float *w;                /* W, read in place by amicro when apk is NULL */
  float *y;
  const kiln_cpu_epilogue *ep;
  const int64_t *off;
  int64_t P, Wq, apk_g, strips, tiles, chunks; /* P: floats per channel; chunks of `tiles` 32-column q tiles */
  kiln_conv_direct_fn micro;
  kiln_conv_direct_a_fn amicro; /* the micro-kernel reading W's rows in place (no pack) */
  bool rows; /* row tiles: OW a multiple of 16, tile t = outputs [32t, 32t + 32) of each channel */
} direct_job;

/* Input planes [p0, p1) (of N·C) into their padded, phase-split planes in
 * xp; padding zeroed here too. */
static void direct_fill(const direct_in *in, float *xp, int64_t p0, int64_t p1) {
  const geom *g = in->g;
  dw_shape d = dw_shape_of(g);
  for (int64_t p = p0; p < p1; p++) {
    float *xc = xp + p * in->P;
    memset(xc, 0, (size_t)in->P * sizeof *xc); /* the padding (dw_plane writes the input's elements) */
    dw_plane(g, &d, in->planes.x + p * g->in_sp, xc, &in->planes);
  }
}

/* Task t of the planes' pass (shared copy): planes [t·pp, +pp). */
static void direct_planes(void *ctx, int64_t t, int worker) {
  (void)worker;
  const direct_in *in = ctx;
  int64_t np = in->g->N * in->g->C;
  direct_fill(in, in->xp, t * in->pp, (t + 1) * in->pp < np ? (t + 1) * in->pp : np);
}

/* The planes a compute task of `worker` reads: the shared copy, or the
 * worker's own, made now if this is its first task. */
static const float *direct_x(direct_in *in, int worker) {
  if (!in->own) return in->xp;
  float *xp = in->xp + worker * in->stride;
  if (!in->made[worker]) {
    direct_fill(in, xp, 0, in->g->N * in->g->C);
    in->made[worker] = true;
  }
  return xp;
}

/* A copy of the planes per worker where the convolution is strided and its
 * input has at least 16 channels. At 2 threads the shared copy's planes
 * were half written by the other core, and so was the input it copies
 * (the step before ran on both threads): reading lines the other core
 * wrote costs 3-4x here (GEMM_CONV.md "Two threads"), in the copy and
 * again in every compute task. With its own copy each thread reads the
 * input once (half of it from the other core) and then only lines it
 * wrote: ResNet-18 at 2 threads, per step, l2.0.conv1 0.74-0.75,
 * l3.0.conv1 0.85-0.86, l4.0.conv1 0.97 (GEMM_CONV.md "The padded copy
 * per thread"). Not on stride 1 (ResNet-18's l3/l4: 0.98-1.01, twice the
 * copying for it) nor on conv1 (3 channels of the graph's input, written
 * by the caller's thread alone: 1.004-1.017). At times when crossings are
 * cheap (~1.2x; the VM's vCPUs placed otherwise, a guess) the second copy
 * is a cost instead: l2.0.conv1 1.08-1.10, the run +0.7-1.6 %. KILN_CONV_OWN_COPY=0
 * (read once; benches): the shared copy always. */
static _Atomic int own_mode = -1; /* -1: KILN_CONV_OWN_COPY not read yet; 0: never (benches); 1: the rule */
static bool direct_own(const geom *g, int workers) {
  if (own_mode == -1) {
    const char *e = getenv("KILN_CONV_OWN_COPY");
    own_mode = !(e && *e == '0');
  }
  return own_mode && workers > 1 && workers <= KILN_DIRECT_OWN_MAX && (g->s[1] > 1 || g->s[2] > 1) && g->C >= 16;
}

/* The direct paths' input (in: the padded, stride-phase-split planes, NR
 * floats past the last plane zeroed: the last tile's reads): shared,
 * filled on the pool in blocks of ~64 KiB of planes (small: on the
 * caller), or one per worker (direct_own), left to the compute tasks
 * (direct_x); and each tap's offset in a channel's planes for output
 * (0, 0) (*offo). The caller frees in->xp and *offo. */
static kiln_status direct_input(const geom *g, const float *x, const dw_shape *d, int workers, direct_in *in,
                                int64_t **offo) {
  enum { NR = KILN_SGEMM_WIDE_NR };
  int64_t KH = g->k[1], KW = g->k[2], P = d->size, Kc = g->Cg * g->k_sp, planes = g->N * g->C;
  bool own = direct_own(g, workers);
  int64_t copies = own ? workers : 1, stride = (planes * P + NR + 15) / 16 * 16; /* copies whole lines apart */
  float *xp = kiln_malloc((size_t)(copies * stride) * sizeof *xp);
  int64_t *off = kiln_malloc((size_t)Kc * sizeof *off);
  if (!xp || !off) {
    kiln_free(xp);
    kiln_free(off);
    return kiln_fail(KILN_E_NOMEM, "out of memory for a direct convolution's padded input");
  }
  /* channel 0's taps, then channel c's: c·P further (the divisions once
     per tap, not per k: ~2 ns a k, 10 us of each of l4's Kc 4608, serial) */
  int64_t sh = g->s[1], sw = g->s[2], ksp = KH * KW;
  for (int64_t kh = 0, k = 0; kh < KH; kh++)
    for (int64_t kw = 0; kw < KW; kw++, k++) {
      int64_t ty = kh * g->d[1], tx = kw * g->d[2]; /* the tap's padded position for output (0, 0) */
      off[k] = ((ty % sh * sw + tx % sw) * d->Hq + ty / sh) * d->Wq + tx / sw;
    }
  for (int64_t k = ksp; k < Kc; k++) off[k] = off[k - ksp] + P;
  for (int64_t w = 0; w < copies; w++) memset(xp + w * stride + planes * P, 0, NR * sizeof *xp);
  *in = (direct_in){.g = g,
                    .planes = {.g = g, .x = x, .gather = kiln_la_gather(), .split2 = kiln_la_split2(),
                               .copy_rows = kiln_la_copy_rows()},
                    .xp = xp,
                    .P = P,
                    .pp = 1,
                    .stride = stride,
                    .own = own};
  *offo = off;
  if (own) return KILN_OK; /* no made[] set: each worker's first task copies */
  int64_t ptasks = workers > 1 ? kiln_pool_tasks(planes * P, 1 << 14, 4 * (int64_t)workers) : 1;
  in->pp = (planes + ptasks - 1) / ptasks;
  kiln_pool_for((planes + in->pp - 1) / in->pp, workers, direct_planes, in);
  return KILN_OK;
}

static void direct_task(void *ctx, int64_t task, int worker) {
  enum { MR = KILN_SGEMM_WIDE_MR, NR = KILN_SGEMM_WIDE_NR };
  const direct_job *j = ctx;
  const geom *g = j->g;
  int64_t OH = g->out[1], OW = g->out[2], Wp = j->Wq, Kc = g->Cg * g->k_sp, OSP = g->out_sp;
  int64_t ch = task % j->chunks, s = task / j->chunks % j->strips, ng = task / j->chunks / j->strips;
  int64_t n = ng / g->G, gi = ng % g->G, m0 = s * MR, mr = g->Mg - m0 < MR ? g->Mg - m0 : MR;
  int64_t qend = (OH - 1) * Wp + OW, mpad = (g->Mg + MR - 1) / MR * MR;
  int64_t qa = ch * j->tiles * NR, qb = qa + j->tiles * NR < qend ? qa + j->tiles * NR : qend; /* this task's q */
  const float *x = direct_x(j->in, worker) + ng * g->Cg * j->P;
  /* W packed once: slice p0 of the strip at a + p0·astride + aoff·kc; else its rows read in place (amicro), the
     slice at wa + p0 */
  const float *a = j->apk ? j->apk + gi * j->apk_g : NULL, *wa = j->apk ? NULL : j->w + (gi * g->Mg + m0) * Kc;
  int64_t astride = mpad, aoff = s * MR;
  const float *bias = j->bias ? j->bias + gi * g->Mg + m0 : NULL;
  bool clamp = j->ep && j->ep->clamp;
  float lo = clamp ? j->ep->lo : 0.0f, hi = clamp ? j->ep->hi : 0.0f;
  float *y = j->y + (n * g->M + gi * g->Mg + m0) * OSP;
  if (j->rows) { /* outputs [oa, ob) of each channel, one tile of 32 at a time, stored in place */
    int64_t oa = ch * j->tiles * NR, ob = oa + j->tiles * NR < OSP ? oa + j->tiles * NR : OSP;
    for (int64_t o = oa; o < ob; o += NR) {
      int nr = ob - o < NR ? (int)(ob - o) : NR;
      int64_t qlo = o / OW * Wp + o % OW, qhi = nr > 16 ? (o + 16) / OW * Wp + (o + 16) % OW : qlo + 16;
      for (int64_t p0 = 0, kc; p0 < Kc; p0 += kc) {
        kc = kiln_sgemm_wide_kc(Kc, p0);
        bool last = p0 + kc == Kc;
        if (wa)
          j->amicro(kc, wa + p0, Kc, x + qlo, j->off + p0, qhi - qlo, p0 ? 1.0f : 0.0f, y + o, OSP, (int)mr, nr,
                    last ? bias : NULL, last && clamp, lo, hi);
        else
          j->micro(kc, a + p0 * astride + aoff * kc, x + qlo, j->off + p0, qhi - qlo, p0 ? 1.0f : 0.0f, y + o, OSP,
                   (int)mr, nr, last ? bias : NULL, last && clamp, lo, hi);
      }
    }
    for (int64_t r = 0; j->ep && !clamp && r < mr && ob > oa; r++)
      j->ep->apply(j->ep->ctx, (n * g->M + gi * g->Mg + m0) * OSP + r * OSP + oa, ob - oa, y + r * OSP + oa);
    for (int64_t r = 0; r < mr && ob > oa; r++)
      kiln_cpu_ep_done(j->ep, (n * g->M + gi * g->Mg + m0) * OSP + r * OSP + oa, ob - oa, y + r * OSP + oa);
    return;
  }
  float tile[MR * NR];
  for (int64_t q0 = qa; q0 < qb; q0 += NR) {
    int nr = qb - q0 < NR ? (int)(qb - q0) : NR;
    for (int64_t p0 = 0, kc; p0 < Kc; p0 += kc) {
      kc = kiln_sgemm_wide_kc(Kc, p0);
      bool last = p0 + kc == Kc;
      if (wa)
        j->amicro(kc, wa + p0, Kc, x + q0, j->off + p0, 16, p0 ? 1.0f : 0.0f, tile, NR, (int)mr, nr,
                  last ? bias : NULL, last && clamp, lo, hi);
      else
        j->micro(kc, a + p0 * astride + aoff * kc, x + q0, j->off + p0, 16, p0 ? 1.0f : 0.0f, tile, NR, (int)mr, nr,
                 last ? bias : NULL, last && clamp, lo, hi);
    }
    for (int64_t c = 0; c < nr;) { /* the tile's runs along output rows */
      int64_t q = q0 + c, oh = q / Wp, ow = q % Wp, run = OW - ow < nr - c ? OW - ow : nr - c;
      if (ow >= OW) { /* a column between rows */
        c += Wp - ow < nr - c ? Wp - ow : nr - c;
        continue;
      }
      for (int64_t r = 0; r < mr; r++) memcpy(y + r * OSP + oh * OW + ow, tile + r * NR + c, (size_t)run * sizeof *y);
      c += run;
    }
  }
  if (j->ep) { /* the outputs of q in [qa, qb) are one run of each channel's plane */
    int64_t oa = qa / Wp * OW + (qa % Wp < OW ? qa % Wp : OW);
    int64_t ob = (qb - 1) / Wp * OW + ((qb - 1) % Wp < OW ? (qb - 1) % Wp + 1 : OW);
    for (int64_t r = 0; r < mr && ob > oa; r++) {
      if (!clamp)
        j->ep->apply(j->ep->ctx, (n * g->M + gi * g->Mg + m0) * OSP + r * OSP + oa, ob - oa, y + r * OSP + oa);
      kiln_cpu_ep_done(j->ep, (n * g->M + gi * g->Mg + m0) * OSP + r * OSP + oa, ob - oa, y + r * OSP + oa);
    }
  }
}

/* The direct path applies: at most 2 spatial dims and strides of at most 8
 * (dw_plane's phase planes), not pointwise (its own path: no copy at all),
 * the AVX-512 micro-kernel. */
static bool direct_applies(const geom *g) { return g->nsp <= 2 && g->s[1] <= 8 && g->s[2] <= 8 && !pointwise(g); }

/* The direct path reads W's pack (prepack.c) when W has at most this many
 * floats (2 MiB, the default pack limit), and a larger W's rows in place
 * (kiln_conv_direct_a_fn: no pack per run; packing a 12-row strip per task
 * was ~1 ms of ResNet-18's ~20, its 2.4-9.4 MB l3/l4 weights transposed
 * from memory on every run). */
#define KILN_CONV_DIRECT_PACK_MAX (512 * 1024)

/* Where it beats im2col + GEMM (GEMM_CONV.md "Direct convolution";
 * measured on 3x3 and 7x7, stride 1 and 2: 0.61-0.96 of the GEMM path's
 * time): every kernel wider than 1x1, except a W over 2 MiB packed once
 * (KILN_CONV_PREPACK=all: the GEMM reads that pack with a prefetch of the
 * next strip and was faster on ResNet-18's 9.4 MB l4 weights, direct
 * 1.04x). A strided 1x1 (ResNet-18's downsampling) keeps the GEMM path:
 * its phase planes copy the whole input to read a quarter of it (1.4-1.6x). */
static bool direct_wanted(const geom *g, const kiln_cpu_conv_pack *pk) {
  return g->k_sp > 1 && (!pk || g->M * g->Cg * g->k_sp <= KILN_CONV_DIRECT_PACK_MAX);
}

/* The pool's threads for a direct conv path of M x Kc x osp multiply-adds
 * per image, or 1 below min_work (waking a thread costs more). */
static int direct_workers(const geom *g, int64_t Kc, int64_t osp, double min_work) {
  return (double)g->M * (double)Kc * (double)osp * (double)g->N < min_work ? 1 : kiln_pool_threads();
}

/* A direct 3x3-or-wider layer of fewer multiply-adds than this runs on one
 * thread. 2^21 since the pool's joins took no lock (was 2^23): small_cnn's
 * conv1 (3.5 M) at 2 threads 0.096 -> 0.061 ms (Zen 4); at 16 threads on a
 * 16-core Xeon it ran serially and took 0.18 ms against 0.11 at 1 thread. */
#define KILN_CONV_DIRECT_MIN_WORK ((double)(1 << 21))

/* An unpacked W bigger than this is read from memory on every run (not
 * from L3): the in-place kernel then prefetches its rows (sgemm.h
 * kiln_conv_direct_far). */
#define KILN_CONV_DIRECT_FAR_BYTES ((double)(4 << 20))

static kiln_status conv_direct(const geom *g, const float *x, const float *w, const float *bias, float *y,
                               const kiln_cpu_epilogue *ep, const kiln_cpu_conv_pack *pk, kiln_conv_direct_fn micro,
                               kiln_conv_direct_a_fn amicro) {
  enum { MR = KILN_SGEMM_WIDE_MR, NR = KILN_SGEMM_WIDE_NR };
  dw_shape d = dw_shape_of(g);
  int64_t OH = g->out[1], P = d.size, Kc = g->Cg * g->k_sp;
  int workers = direct_workers(g, Kc, g->out_sp, KILN_CONV_DIRECT_MIN_WORK);
  direct_in in;
  int64_t *off;
  kiln_status s = direct_input(g, x, &d, workers, &in, &off);
  if (s) return s;
  /* Tasks: (image, group, 12-row strip, chunk of 32-column q tiles); at
     least ~4 per thread when there are several (chunks cut only at tile
     boundaries: no tile in two tasks; a last strip of 4 or 8 rows comes
     last in the claiming order; 8 per thread measured no better on
     ResNet-18, GEMM_CONV.md "Two threads"). Each output element gets the
     same operations whatever the chunk (bit-identical for any thread
     count). */
  bool rows = g->out[2] % 16 == 0;
  int64_t strips = (g->Mg + MR - 1) / MR, chunks = 1;
  int64_t tiles = rows ? (g->out_sp + NR - 1) / NR : ((OH - 1) * d.Wq + g->out[2] + NR - 1) / NR;
  if (workers > 1 && g->N * g->G * strips < 4 * (int64_t)workers)
    chunks = (4 * workers + g->N * g->G * strips - 1) / (g->N * g->G * strips);
  if (!pk && chunks > 2) chunks = 2; /* W not packed: each chunk reads its strip of W again */
  int64_t per = (tiles + chunks - 1) / chunks;
  chunks = (tiles + per - 1) / per;
  if (!pk && (double)g->M * (double)Kc * sizeof(float) > KILN_CONV_DIRECT_FAR_BYTES)
    amicro = kiln_conv_direct_far(amicro);
  direct_job j = {g, &in, pk ? pk->data : NULL, bias, w, y, ep, off, P, d.Wq, pk ? pk->gstride : 0, strips,
                  per, chunks, micro, amicro, rows};
  kiln_pool_for(g->N * g->G * strips * chunks, workers, direct_task, &j);
  kiln_free(in.xp);
  kiln_free(off);
  return KILN_OK;
}

/* ---- channel tiles: the direct path with lanes over output channels ----
 * For output rows of a multiple of 14 pixels (ResNet's 112, 56, 28, 14),
 * or of 7 (ResNet's l4: a tile is two output rows, the last of an odd
 * count alone, its 7 pixels stored):
 * the same padded, phase-split planes and tap offsets as the direct path,
 * but the tile is 14 pixels of one output row (their inputs broadcast) by
 * 32 output channels (W transposed, two aligned vectors per k): no columns
 * between output rows computed and dropped (the 12 x 32 tile's q space
 * computes Wq - OW of every Wq: 4 % on 56 x 56, 10 % on 28 x 28, 14 % on
 * 14 x 14, plus its last tile's rounding), and no 4-row tail strip (M 64:
 * 5 x 12 + 4, the 4-row tile at ~0.77 of the fma peak). Each KC slice's
 * tile is summed in T (pixel-major) as the 12 x 32 tile sums it in C; the
 * bias and clamp follow, then the tile is stored transposed into Y: the
 * same operations per element, the same bits. */

/* At most this many tiles a task: all of them per KC slice (ct_task; 16 x 1.75 KiB of tiles on the stack).
 * 16, not 8: ResNet-18's l3.0.conv1 (3x3/2 to 14 x 14: 14 tiles a task) 0.78-0.81 -> 0.68-0.73 ms a step
 * interleaved with onnxruntime. */
#define KILN_CONV_CT_FEW 16

/* -1: not read yet (KILN_CONV_CT); 0: never; 1: where it applies. */
static _Atomic int ct_mode = -1;

typedef struct ct_job {
  const geom *g;
  direct_in *in;               /* padded planes: direct_x */
  const float *wt, *bias;      /* W transposed (per group, wt_g floats apart) */
  float *y;
  const kiln_cpu_epilogue *ep;
  const int64_t *off;
  int64_t P, Wq, cblocks, chunks, rper, wt_g; /* rper output rows a task */
  kiln_conv_ct_fn micro;
  kiln_conv_ct_store_fn store;
} ct_job;

static void ct_task(void *ctx, int64_t task, int worker) {
  enum { PX = KILN_CONV_CT_PX, NR = KILN_SGEMM_WIDE_NR };
  const ct_job *j = ctx;
  const geom *g = j->g;
  int64_t ch = task % j->chunks, cb = task / j->chunks % j->cblocks, ng = task / j->chunks / j->cblocks;
  int64_t n = ng / g->G, gi = ng % g->G, OH = g->out[1], OW = g->out[2], OSP = g->out_sp, Kc = g->Cg * g->k_sp;
  int64_t Mpad = j->cblocks * NR, oh0 = ch * j->rper, oh1 = oh0 + j->rper < OH ? oh0 + j->rper : OH;
  int64_t m0 = cb * NR, nc = g->Mg - m0 < NR ? g->Mg - m0 : NR;
  const float *x = direct_x(j->in, worker) + ng * g->Cg * j->P, *wt = j->wt + gi * j->wt_g;
  const float *bias = j->bias ? j->bias + gi * g->Mg + m0 : NULL;
  bool clamp = j->ep && j->ep->clamp;
  float lo = clamp ? j->ep->lo : 0.0f, hi = clamp ? j->ep->hi : 0.0f;
  float *y = j->y + (n * g->M + gi * g->Mg + m0) * OSP;
  /* the task's tiles: 14 pixels of a row, or (rows of 7) two rows, a last row of an odd count alone, reading its
     own 7 inputs again for pixels 7..13 (inside the plane) and storing 7 */
  bool half = OW == KILN_CONV_CT_HALF;
  int64_t per_row = half ? 1 : OW / PX, tiles = (half ? (oh1 - oh0 + 1) / 2 : oh1 - oh0) * per_row;
  /* a few tiles (a 7 x 7 plane: 4, 14 x 14: 14): all of them per KC slice, so a slice of W^T (kc x 32) is read
     from memory by the first and from L1 by the others, while each tile's micro-kernel fetches its share of the
     next slice into L2 (W^T from memory: ResNet-18's l4, 9.4 MB; GEMM_CONV.md "Weights from memory"); more
     tiles: tile by tile, W^T's block from L2 */
  _Alignas(64) float T[KILN_CONV_CT_FEW][PX * NR];
  bool by_slice = tiles <= KILN_CONV_CT_FEW;
  for (int64_t t0 = 0; t0 < tiles; t0 += by_slice ? tiles : 1) {
    int64_t t1 = by_slice ? tiles : t0 + 1;
    for (int64_t p0 = 0, kc; p0 < Kc; p0 += kc) {
      kc = kiln_sgemm_wide_kc(Kc, p0);
      int64_t nkc = by_slice && p0 + kc < Kc ? kiln_sgemm_wide_kc(Kc, p0 + kc) : 0, len = nkc * NR;
      const float *wn = nkc ? wt + (p0 + kc) * Mpad + cb * nkc * NR : NULL;
      for (int64_t t = t0; t < t1; t++) {
        int64_t oh = oh0 + (half ? 2 : 1) * (t / per_row), ow0 = t % per_row * PX;
        int64_t jump = !half ? 0 : oh + 1 < oh1 ? j->Wq - KILN_CONV_CT_HALF : -KILN_CONV_CT_HALF;
        int64_t q0 = len * (t - t0) / (t1 - t0), q1 = len * (t - t0 + 1) / (t1 - t0); /* tile t's share */
        j->micro(kc, wt + p0 * Mpad + cb * kc * NR, x + oh * j->Wq + ow0, j->off + p0, jump, wn ? wn + q0 : NULL,
                 (q1 - q0 + kc - 1) / kc, T[t - t0], p0 > 0);
      }
    }
    for (int64_t t = t0; t < t1; t++) {
      int64_t oh = oh0 + (half ? 2 : 1) * (t / per_row), ow0 = t % per_row * PX;
      j->store(T[t - t0], nc, half && oh + 1 == oh1 ? KILN_CONV_CT_HALF : PX, bias, clamp, lo, hi, y + oh * OW + ow0,
               OSP);
    }
  }
  for (int64_t c = 0; j->ep && !clamp && c < nc && oh1 > oh0; c++)
    j->ep->apply(j->ep->ctx, (n * g->M + gi * g->Mg + m0 + c) * OSP + oh0 * OW, (oh1 - oh0) * OW,
                 y + c * OSP + oh0 * OW);
  for (int64_t c = 0; c < nc && oh1 > oh0; c++)
    kiln_cpu_ep_done(j->ep, (n * g->M + gi * g->Mg + m0 + c) * OSP + oh0 * OW, (oh1 - oh0) * OW,
                     y + c * OSP + oh0 * OW);
}

/* Output rows of whole 14-pixel tiles or of 7 pixels (two rows a tile), a
 * kernel wider than 1x1, the direct path's planes. */
static bool ct_applies(const geom *g) {
  return (g->out[2] % KILN_CONV_CT_PX == 0 || g->out[2] == KILN_CONV_CT_HALF) && g->k_sp > 1 && g->nsp <= 2 &&
         g->s[1] <= 8 && g->s[2] <= 8;
}

static kiln_status conv_direct_ct(const geom *g, const float *x, const kiln_cpu_conv_pack *pk, const float *bias,
                                  float *y, const kiln_cpu_epilogue *ep, kiln_conv_ct_fn micro) {
  enum { NR = KILN_SGEMM_WIDE_NR };
  dw_shape d = dw_shape_of(g);
  int64_t OH = g->out[1], P = d.size, Kc = g->Cg * g->k_sp;
  int64_t cblocks = (g->Mg + NR - 1) / NR;
  int workers = direct_workers(g, Kc, g->out_sp, KILN_CONV_DIRECT_MIN_WORK);
  direct_in in;
  int64_t *off;
  kiln_status s = direct_input(g, x, &d, workers, &in, &off);
  if (s) return s;
  /* tasks: (image, group, block of 32 channels, chunk of output rows), about 4 per thread */
  int64_t chunks = 1;
  if (workers > 1 && g->N * g->G * cblocks < 4 * (int64_t)workers)
    chunks = (4 * workers + g->N * g->G * cblocks - 1) / (g->N * g->G * cblocks);
  int64_t rper = (OH + chunks - 1) / chunks;
  if (g->out[2] == KILN_CONV_CT_HALF) rper += rper & 1; /* whole pairs of rows a chunk */
  chunks = (OH + rper - 1) / rper;
  ct_job j = {g, &in, pk->ctdata, bias, y, ep, off, P, d.Wq, cblocks, chunks, rper, pk->ctgstride, micro,
              micro == kiln_conv_ct_micro_base ? kiln_conv_ct_store_base : kiln_conv_ct_store()};
  kiln_pool_for(g->N * g->G * cblocks * chunks, workers, ct_task, &j);
  kiln_free(in.xp);
  kiln_free(off);
  return KILN_OK;
}

/* ---- pointwise through the direct micro-kernel ----
 * A 1x1 stride-1 unpadded conv is a GEMM whose B is the input itself:
 * row k of B (input channel k) at x + k·in_sp, output o at column o. The
 * direct micro-kernel reads those rows in place (off[k] = k·in_sp, the
 * tile's 32 columns consecutive: xhi 16; masked at the plane's end), so
 * no B panel is packed per call, and stores each 12 x 32 tile straight
 * into Y with the bias and clamp on its accumulators. Per KC slice the
 * same fmas as the GEMM path: the same bits. Loop order: blocks of
 * columns small enough for the block's K rows to stay in L2 (~256 KiB),
 * and in a block every 12-row strip, so the input is read from memory
 * once. Tasks: (image, group, block, group of strips). */
typedef struct pw_job {
  const geom *g;
  const float *x, *apk, *w, *bias; /* apk: W's packs (per group), or NULL: W's rows in place (amicro) */
  float *y;
  const kiln_cpu_epilogue *ep;
  const int64_t *off;
  int64_t apk_g, nb, blocks, strips, sper, sgroups; /* nb columns a block; sper strips a task */
  kiln_conv_direct_fn micro;
  kiln_conv_direct_a_fn amicro;
} pw_job;

static void pw_task(void *ctx, int64_t task, int worker) {
  (void)worker;
  enum { MR = KILN_SGEMM_WIDE_MR, NR = KILN_SGEMM_WIDE_NR };
  const pw_job *j = ctx;
  const geom *g = j->g;
  int64_t sg = task % j->sgroups, b = task / j->sgroups % j->blocks, ng = task / j->sgroups / j->blocks;
  int64_t n = ng / g->G, gi = ng % g->G, Kc = g->Cg, OSP = g->out_sp, mpad = (g->Mg + MR - 1) / MR * MR;
  int64_t oa = b * j->nb, ob = oa + j->nb < OSP ? oa + j->nb : OSP;
  int64_t s0 = sg * j->sper, s1 = s0 + j->sper < j->strips ? s0 + j->sper : j->strips;
  const float *x = j->x + (n * g->C + gi * g->Cg) * g->in_sp;
  bool clamp = j->ep && j->ep->clamp;
  float lo = clamp ? j->ep->lo : 0.0f, hi = clamp ? j->ep->hi : 0.0f;
  for (int64_t s = s0; s < s1; s++) {
    int64_t m0 = s * MR, mr = g->Mg - m0 < MR ? g->Mg - m0 : MR;
    const float *a = j->apk ? j->apk + gi * j->apk_g : NULL, *wa = j->apk ? NULL : j->w + (gi * g->Mg + m0) * Kc;
    const float *bias = j->bias ? j->bias + gi * g->Mg + m0 : NULL;
    float *y = j->y + (n * g->M + gi * g->Mg + m0) * OSP;
    for (int64_t o = oa; o < ob; o += NR) {
      int nr = ob - o < NR ? (int)(ob - o) : NR;
      for (int64_t p0 = 0, kc; p0 < Kc; p0 += kc) {
        kc = kiln_sgemm_wide_kc(Kc, p0);
        bool last = p0 + kc == Kc;
        if (wa)
          j->amicro(kc, wa + p0, Kc, x + o, j->off + p0, 16, p0 ? 1.0f : 0.0f, y + o, OSP, (int)mr, nr,
                    last ? bias : NULL, last && clamp, lo, hi);
        else
          j->micro(kc, a + p0 * mpad + m0 * kc, x + o, j->off + p0, 16, p0 ? 1.0f : 0.0f, y + o, OSP, (int)mr, nr,
                   last ? bias : NULL, last && clamp, lo, hi);
      }
    }
    for (int64_t r = 0; j->ep && !clamp && r < mr; r++)
      j->ep->apply(j->ep->ctx, (n * g->M + gi * g->Mg + m0) * OSP + r * OSP + oa, ob - oa, y + r * OSP + oa);
  }
}

/* Where it beat the GEMM path (MobileNetV2's 1x1 layers, per step, 1
 * thread; GEMM_CONV.md): planes of 28 x 28 and more (0.75-0.95 of the
 * GEMM path's time: no B panel copied per call); on 14 x 14 and 7 x 7
 * planes (K 64-960 rows of 196 or 49 floats) it was 1.05-1.5x slower. */
#define KILN_CONV_PW_DIRECT_MIN_PLANE 512
static bool pointwise_direct_wanted(const geom *g) { return g->out_sp >= KILN_CONV_PW_DIRECT_MIN_PLANE; }

/* Columns per block: the block's K rows in about this many bytes (L2). */
#define KILN_CONV_PW_BLOCK_BYTES (256 * 1024)

/* A stride-1 pointwise layer of fewer multiply-adds than this runs on one
 * thread. */
#define KILN_CONV_PW_MIN_WORK ((double)(1 << 21))

static kiln_status conv_pointwise_direct(const geom *g, const float *x, const float *w, const float *bias, float *y,
                                         const kiln_cpu_epilogue *ep, const kiln_cpu_conv_pack *pk,
                                         kiln_conv_direct_fn micro, kiln_conv_direct_a_fn amicro, double min_work) {
  enum { MR = KILN_SGEMM_WIDE_MR, NR = KILN_SGEMM_WIDE_NR };
  int64_t Kc = g->Cg, OSP = g->out_sp, strips = (g->Mg + MR - 1) / MR;
  int64_t *off = kiln_malloc((size_t)Kc * sizeof *off);
  if (!off) return kiln_fail(KILN_E_NOMEM, "out of memory for a pointwise convolution's offsets");
  for (int64_t k = 0; k < Kc; k++) off[k] = k * g->in_sp;
  int64_t nb = KILN_CONV_PW_BLOCK_BYTES / ((int64_t)sizeof(float) * Kc) / NR * NR;
  if (nb < NR) nb = NR;
  if (nb > OSP) nb = OSP;
  int64_t blocks = (OSP + nb - 1) / nb, sgroups = 1;
  int workers = direct_workers(g, Kc, OSP, min_work);
  if (workers > 1) /* each thread its part of the image (GEMM_CONV.md "Parts of the image"): whole blocks where
                      the rounding of nb below keeps a multiple of the threads (else a share ends inside a block) */
    blocks = (blocks + workers - 1) / workers * workers;
  nb = ((OSP + blocks - 1) / blocks + NR - 1) / NR * NR; /* blocks of about equal size (a balanced split) */
  if (nb > OSP) nb = OSP;
  blocks = (OSP + nb - 1) / nb;
  if (workers > 1 && g->N * g->G * blocks < 4 * (int64_t)workers) /* about 4 tasks per thread */
    sgroups = (4 * workers + g->N * g->G * blocks - 1) / (g->N * g->G * blocks);
  if (sgroups > strips) sgroups = strips;
  int64_t sper = (strips + sgroups - 1) / sgroups;
  sgroups = (strips + sper - 1) / sper;
  kiln_conv_direct_streams(&micro, &amicro); /* rows of B in storage order: each row two tiles ahead (sgemm.h) */
  pw_job j = {g, x, pk ? pk->data : NULL, w, bias, y, ep, off, pk ? pk->gstride : 0, nb, blocks, strips, sper,
              sgroups, micro, amicro};
  kiln_pool_for_shares(g->N * g->G * blocks * sgroups, workers, pw_task, &j);
  kiln_free(off);
  return KILN_OK;
}

/* ---- pointwise on small planes, lanes over output channels (pwt.h) ----
 * On 14 x 14 and 7 x 7 planes the pixels fill the wide GEMM's 32-column
 * tiles badly (224 and 64 computed for 196 and 49); 12 pixels x 32 output
 * channels per tile with W's pack made at plan time compute 204 and 52,
 * and read X in place. The same bits as the GEMM path. Measured
 * (MobileNetV2 per step, 1 thread; GEMM_CONV.md): 0.64-0.95 of the GEMM
 * path's time on its 14 x 14 and 7 x 7 layers (K 64-960), and on 28 x 28
 * with K >= 128 0.82-0.90 of the direct path's; 1.02-1.04 there with K 32,
 * 1.08-1.5 on 56 x 56 and 112 x 112, which keep the direct path. */
static bool strided_pointwise(const geom *g);
static kiln_pwt_fn pwt_wanted(const geom *g, const kiln_cpu_conv_pack *pk) {
  int mode = kiln_pwt_mode();
  if (mode == 0 || !pk || !pk->tdata || g->G != 1 || !(pointwise(g) || strided_pointwise(g))) return NULL;
  if (mode < 0 && !kiln_pwt_plane_wanted(g->out_sp, g->Cg)) return NULL;
  return mode == 2 ? kiln_pwt_tile_base : kiln_pwt_tile();
}

/* ---- a strided 1x1 through the pointwise direct path ----
 * ResNet's downsampling (1x1, stride 2, no pads) ran im2col (a strided
 * gather) and then packed that B panel again for the GEMM. Here the
 * gather writes each input channel's sampled plane once into rows of a
 * multiple of 16 floats (so every 32-column tile of the direct kernel
 * reads whole, 64-byte-aligned vectors), and the pointwise direct path
 * reads those rows in place: no panel packed. The sampled values are the
 * im2col's and the fmas the GEMM path's per KC slice: the same bits. */

/* A 1x1 convolution with a stride above 1 in some dim, no pads at the
 * start and no output reading past the input (pads at the end unread). */
static bool strided_pointwise(const geom *g) {
  bool strided = false;
  for (int i = 0; i < 3; i++) {
    if (g->k[i] != 1 || g->pb[i] != 0 || (g->out[i] - 1) * g->s[i] >= g->in[i]) return false;
    strided |= g->s[i] > 1;
  }
  return strided;
}

/* Where it beat the GEMM path (ResNet-18's three downsampling layers,
 * per step, 1 thread, GEMM_CONV.md "Strided 1x1"): on 28 x 28 outputs
 * 0.91 of its time; 14 x 14 1.02, 7 x 7 (two tiles of 32 on 49 columns,
 * 43 strips) 1.27: planes of 512 outputs and more, as the stride-1 rule. */
static bool strided_pointwise_wanted(const geom *g) { return g->out_sp >= KILN_CONV_PW_DIRECT_MIN_PLANE; }

typedef struct spw_job {
  const geom *g;
  const float *x;
  float *xs; /* the sampled planes, ld floats apart */
  int64_t ld, pp, groups, parts; /* pp planes a group; tasks (part of the rows, group of planes) */
  kiln_la_gather_fn gather;
} spw_job;

/* Task t: part t / groups of the output rows (od, oh) of the sampled planes
 * [g·pp, +pp) (of N·C), g = t % groups, each row by a strided gather (a
 * copy for stride 1 along the row); the last part zeroes the rows'
 * padding. */
static void spw_planes(void *ctx, int64_t t, int worker) {
  (void)worker;
  const spw_job *j = ctx;
  const geom *g = j->g;
  int64_t part = t / j->groups, p0 = t % j->groups * j->pp, OW = g->out[2], R = g->out[0] * g->out[1];
  int64_t p1 = p0 + j->pp < g->N * g->C ? p0 + j->pp : g->N * g->C;
  int64_t r0 = R * part / j->parts, r1 = R * (part + 1) / j->parts;
  for (int64_t p = p0; p < p1; p++) {
    const float *xc = j->x + p * g->in_sp;
    float *d = j->xs + p * j->ld + r0 * OW;
    for (int64_t r = r0; r < r1; r++, d += OW) {
      int64_t od = r / g->out[1], oh = r % g->out[1];
      const float *src = xc + (od * g->s[0] * g->in[1] + oh * g->s[1]) * g->in[2];
      if (g->s[2] == 1) memcpy(d, src, (size_t)OW * sizeof *d);
      else j->gather(d, src, OW, g->s[2]);
    }
    if (part == j->parts - 1) memset(d, 0, (size_t)(j->xs + p * j->ld + j->ld - d) * sizeof *d);
  }
}

/* A strided 1x1 of fewer multiply-adds than this runs on one thread: a
 * quarter of the stride-1 bound. ResNet-18's l2.0.down (6.4 M, below that
 * bound) took longer at 2 threads, on one of them, than at 1 thread: its
 * input was written by both threads of the step before, and half of it
 * came from the other core's caches; split, 0.72 of that time
 * (GEMM_CONV.md "Two threads: where the time goes"). */
#define KILN_CONV_SPW_MIN_WORK ((double)(1 << 21))

/* The input sampled at the output's positions: N·C planes ld floats apart
 * (64-byte aligned) in a buffer *buf of the caller's to free; NULL on out of
 * memory (the message set). */
static float *spw_sample(const geom *g, const float *x, int64_t ld, float **buf) {
  int64_t planes = g->N * g->C;
  if (!(*buf = kiln_malloc((size_t)(planes * ld + 16) * sizeof **buf))) {
    kiln_fail(KILN_E_NOMEM, "out of memory for a strided 1x1 convolution's sampled input");
    return NULL;
  }
  float *xs = (float *)(((uintptr_t)*buf + 63) & ~(uintptr_t)63);
  int workers = direct_workers(g, g->Cg, g->out_sp, KILN_CONV_SPW_MIN_WORK);
  /* each thread its part of the rows (GEMM_CONV.md "Parts of the image"), as the compute after */
  int64_t parts = workers > 1 && g->out[0] * g->out[1] >= workers ? workers : 1;
  spw_job j = {g, x, xs, ld, 1, 1, parts, kiln_la_gather()};
  int64_t ptasks = workers > 1 ? kiln_pool_tasks(planes * ld, parts << 14, 4 * (int64_t)workers / parts) : 1;
  j.pp = (planes + ptasks - 1) / ptasks;
  j.groups = (planes + j.pp - 1) / j.pp;
  kiln_pool_for_shares(j.groups * parts, workers, spw_planes, &j);
  return xs;
}

static kiln_status conv_strided_pointwise(const geom *g, const float *x, const float *w, const float *bias,
                                          float *y, const kiln_cpu_epilogue *ep, const kiln_cpu_conv_pack *pk,
                                          kiln_conv_direct_fn micro, kiln_conv_direct_a_fn amicro) {
  int64_t ld = (g->out_sp + 15) / 16 * 16; /* rows of 16 floats: whole cache lines */
  float *buf;
  const float *xs = spw_sample(g, x, ld, &buf);
  if (!xs) return KILN_E_NOMEM;
  /* the sampled input as a stride-1 pointwise convolution's */
  geom gs = *g;
  for (int i = 0; i < 3; i++) gs.in[i] = g->out[i], gs.s[i] = 1;
  gs.in_sp = ld;
  kiln_status s = conv_pointwise_direct(&gs, xs, w, bias, y, ep, pk, micro, amicro, KILN_CONV_SPW_MIN_WORK);
  kiln_free(buf);
  return s;
}

/* A strided 1x1 on a small output plane (ResNet's 14 x 14 and 7 x 7
 * downsampling; the GEMM path before: an im2col gather, then that panel
 * packed again) through the lanes-over-channels tiles (pwt.h) on the
 * input sampled densely: the tiles' operations, the GEMM path's bits. */
static kiln_status conv_strided_pwt(const geom *g, const float *x, const float *wt, const float *bias, float *y,
                                    const kiln_cpu_epilogue *ep, kiln_pwt_fn fn) {
  float *buf;
  const float *xs = spw_sample(g, x, g->out_sp, &buf);
  if (!xs) return KILN_E_NOMEM;
  kiln_status s = kiln_pwt_conv(g->N, g->Cg, g->M, g->out_sp, xs, wt, bias, y, ep, fn);
  kiln_free(buf);
  return s;
}

/* ---- Winograd F(2x2, 3x3) (wino.h) ----
 * On by default (GEMM_CONV.md "Winograd F(2x2, 3x3)"). -1: not read yet
 * (KILN_CONV_WINO); 0 off (the direct paths); 1 (the default) where a plan
 * made U (prepack.c) and C, M >= 16; 2 wherever it applies (U made per
 * call without a pack: tests); 3 the same with the scalar twins
 * (transforms and micro-kernel). */
static _Atomic int wino_mode = -1;
void kiln_conv_wino_force(int mode) { wino_mode = mode < 0 ? 1 : mode; }

static int wino_read(void) {
  if (wino_mode == -1) {
    const char *e = getenv("KILN_CONV_WINO");
    wino_mode = e && *e >= '0' && *e <= '3' && !e[1] ? *e - '0' : 1;
  }
  return wino_mode;
}

bool kiln_conv_wino_on(void) { return wino_read() != 0; }

static bool wino_applies(const geom *g) {
  return g->nsp == 2 && g->G == 1 && g->k[1] == 3 && g->k[2] == 3 && g->s[1] == 1 && g->s[2] == 1 && g->d[1] == 1 &&
         g->d[2] == 1;
}

static bool wino_wanted(const geom *g) { return g->C >= 16 && g->M >= 16; }

/* u: U from the plan's pack, or NULL (made here, per call: KILN_CONV_WINO=2
 * without a pack, the tests). */
static kiln_status conv_wino(const geom *g, const float *x, const float *w, const float *u, const float *bias,
                             float *y, const kiln_cpu_epilogue *ep) {
  float *uc = NULL;
  if (!u) {
    if (!(uc = kiln_malloc((size_t)kiln_wino_pack_floats(g->M, g->C) * sizeof *uc)))
      return kiln_fail(KILN_E_NOMEM, "out of memory for a Winograd convolution's weights");
    kiln_status s = kiln_wino_pack(w, g->M, g->C, uc);
    if (s) {
      kiln_free(uc);
      return s;
    }
  }
  kiln_status s = kiln_wino_conv(g->N, g->C, g->M, g->in[1], g->in[2], g->pb[1], g->pb[2], g->out[1], g->out[2], x,
                                 u ? u : uc, bias, y, ep, wino_mode != 3);
  kiln_free(uc);
  return s;
}

/* ---- the kernel ---- */

static kiln_status run_conv(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL, *w = c->n_in > 1 ? c->in[1] : NULL;
  const kiln_tensor *b = c->n_in > 2 ? c->in[2] : NULL;
  *declined = true;
  if (!x || !w || x->dtype != KILN_F32 || w->dtype != KILN_F32 || (b && b->dtype != KILN_F32)) return KILN_OK;
  geom g;
  if (!geom_make(c->node, x, w, &g)) return KILN_OK;
  if (b && (b->rank != 1 || b->dims[0] != g.M)) return KILN_OK;
  if (x->numel == 0 || w->numel == 0) return KILN_OK;
  *declined = false;
  kiln_tensor xd = {0}, wd = {0};
  float *bcopy = NULL; /* a strided bias copied densely; a dense one is read in place */
  const float *bias = b && !b->strided ? (const float *)b->data : NULL;
  kiln_status s = KILN_OK;
  if (x->strided) s = kiln_tensor_copy(&xd, x);
  if (!s && w->strided) s = kiln_tensor_copy(&wd, w);
  if (!s && b && b->strided) {
    bias = bcopy = kiln_malloc((size_t)g.M * sizeof *bcopy);
    if (!bcopy) s = kiln_fail(KILN_E_NOMEM, "out of memory for a bias");
    for (int64_t m = 0; m < g.M && bcopy; m++) bcopy[m] = (float)kiln_get_f(b, m);
  }
  if (!s) s = kiln_la_alloc_out(&c->out[0], g.out_rank, g.out_dims);
  if (!s) {
    const float *xp = x->strided ? xd.data : x->data, *wp = w->strided ? wd.data : w->data;
    /* depthwise: its padded plane holds stride·ceil(width/stride) columns,
       so very large strides go the general way */
    if (g.G == g.C && g.Cg == 1 && g.nsp <= 2 && g.G > 1 && g.s[1] <= 8 && g.s[2] <= 8)
      s = conv_depthwise(&g, xp, wp, bias, c->out[0].data, ep);
    else {
      const kiln_cpu_conv_pack *pk = w->strided ? NULL : kiln_cpu_conv_pack_find(c->node);
      if (pk && (pk->src != wp || pk->G != g.G || pk->Mg != g.Mg || pk->Kc != g.Cg * g.k_sp)) pk = NULL;
      const kiln_cpu_conv_pack *tpk = pk && pk->ctdata ? pk : NULL; /* the channel tiles' W^T */
      const kiln_cpu_conv_pack *ppk = pk && pk->tdata ? pk : NULL;  /* the lanes-over-channels W^T (pwt.h) */
      const float *wu = pk && kiln_sgemm_pack_reader() ? pk->wdata : NULL; /* Winograd's U */
      if (pk && !pk->data) pk = NULL; /* only transposed packs: the other paths read none */
      if (direct_mode == -1) { /* KILN_CONV_DIRECT=0|1 (benches): the same as kiln_conv_direct_force */
        const char *e = getenv("KILN_CONV_DIRECT");
        direct_mode = e && (*e == '0' || *e == '1') ? *e - '0' : -2;
      }
      kiln_conv_direct_fn dmicro = direct_mode == 2 ? kiln_conv_direct_micro_base : kiln_conv_direct_micro();
      if (ct_mode == -1) { /* KILN_CONV_CT=0: the 12 x 32 direct tile instead (benches) */
        const char *e = getenv("KILN_CONV_CT");
        ct_mode = !(e && *e == '0');
      }
      kiln_conv_ct_fn ctmicro = direct_mode == 2 ? kiln_conv_ct_micro_base : kiln_conv_ct_micro();
      const kiln_cpu_conv_pack *rpk = kiln_sgemm_pack_reader() ? pk : NULL; /* a pack the wide kernels read */
      kiln_conv_direct_a_fn amicro = direct_mode == 2 ? kiln_conv_direct_micro_a_base : kiln_conv_direct_micro_a();
      const kiln_cpu_conv_pack *dpk = g.M * g.Cg * g.k_sp <= KILN_CONV_DIRECT_PACK_MAX ? rpk : NULL;
      kiln_pwt_fn pwt = pwt_wanted(&g, kiln_pwt_tile() ? ppk : NULL); /* AVX2 without AVX-512: W^T packs alone */
      if (wino_read() && wino_applies(&g) && (wino_mode != 1 || (wu && wino_wanted(&g))))
        s = conv_wino(&g, xp, wp, wu, bias, c->out[0].data, ep);
      else if (pwt && !pointwise(&g)) s = conv_strided_pwt(&g, xp, ppk->tdata, bias, c->out[0].data, ep, pwt);
      else if (pwt) s = kiln_pwt_conv(g.N, g.Cg, g.M, g.out_sp, xp, ppk->tdata, bias, c->out[0].data, ep, pwt);
      else if (dmicro && direct_mode != 0 && pointwise(&g) && (direct_mode > 0 || pointwise_direct_wanted(&g)))
        s = conv_pointwise_direct(&g, xp, wp, bias, c->out[0].data, ep, dpk, dmicro, amicro, KILN_CONV_PW_MIN_WORK);
      else if (ctmicro && direct_mode != 0 && ct_mode && tpk && kiln_sgemm_pack_reader() && ct_applies(&g))
        s = conv_direct_ct(&g, xp, tpk, bias, c->out[0].data, ep, ctmicro);
      else if (dmicro && direct_mode != 0 && strided_pointwise(&g) &&
               (direct_mode > 0 || strided_pointwise_wanted(&g)))
        s = conv_strided_pointwise(&g, xp, wp, bias, c->out[0].data, ep, dpk, dmicro, amicro);
      else if (dmicro && direct_mode != 0 && direct_applies(&g) && (direct_mode > 0 || direct_wanted(&g, rpk)))
        s = conv_direct(&g, xp, wp, bias, c->out[0].data, ep, dpk, dmicro, amicro);
      else
        s = conv_gemm(&g, xp, wp, bias, c->out[0].data, ep, rpk);
    }
  }
  kiln_tensor_release(&xd);
  kiln_tensor_release(&wd);
  kiln_free(bcopy);
  return s;
}

const kiln_cpu_kernel_def kiln_cpu_kernels_conv[] = {
    {"Conv", NULL, run_conv, true},
    {NULL, NULL, NULL, false},
};
