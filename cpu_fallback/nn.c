/* cpu_fallback/nn: float32 kernels for pooling (MaxPool, AveragePool,
 * GlobalAveragePool, GlobalMaxPool), softmax (Softmax, LogSoftmax),
 * normalisation (LayerNormalization, BatchNormalization inference,
 * InstanceNormalization), reductions (ReduceSum, ReduceMean, ReduceMax,
 * ReduceMin, ReduceSumSquare, ReduceL2, ArgMax, ArgMin), plus the table
 * that also lists the data-movement kernels of nn_move.c (see NN.md). The
 * row loops are nn.h's primitives (scalar twin or AVX2). Every kernel
 * decodes its node the way the reference kernel does (reference/ops_nn.c,
 * ops_reduce.c) and declines — the reference kernel then runs, and reports
 * any error — on what it does not cover: another dtype, a strided input,
 * an invalid attribute or shape, an empty tensor, 3-D pooling, reduction
 * patterns other than [kept] reduced [kept]. Results are the reference's
 * within float rounding: sums are float sums in 8 lanes (the reference
 * accumulates in double); max/min/arg and data movement are exact. */
#include "cpu_fallback/nn.h"

#include <math.h>
#include <string.h>

#include "cpu_fallback/pool.h"
#include "ir/alloc.h"

/* ---- threads: outer units (planes, rows, channels) split over the pool ----
 * Each unit's result is computed whole by one task, so the results do not
 * depend on the thread count (pool.h). */

typedef void (*nn_range_fn)(void *ctx, int64_t lo, int64_t hi, int worker);
typedef struct nn_par_job {
  nn_range_fn fn;
  void *ctx;
  int64_t units, per;
} nn_par_job;

static void nn_par_task(void *arg, int64_t t, int worker) {
  const nn_par_job *j = arg;
  int64_t lo = t * j->per, hi = lo + j->per < j->units ? lo + j->per : j->units;
  if (lo < hi) j->fn(j->ctx, lo, hi, worker);
}

/* fn over [0, units) in ranges of whole units, on the pool when the work
 * (units x unit_cost, in elements touched) is worth it; workers: the
 * threads the caller prepared scratch for (nn_workers()). */
static void nn_par(int64_t units, int64_t unit_cost, int workers, nn_range_fn fn, void *ctx) {
  int64_t tasks = workers > 1 ? kiln_pool_tasks(units * unit_cost, 1 << 16, 4 * (int64_t)workers) : 1;
  if (tasks > units) tasks = units;
  if (tasks <= 1) {
    if (units > 0) fn(ctx, 0, units, 0);
    return;
  }
  nn_par_job j = {fn, ctx, units, (units + tasks - 1) / tasks};
  kiln_pool_for((units + j.per - 1) / j.per, workers, nn_par_task, &j);
}

static int nn_workers(void) { return kiln_pool_threads(); }

/* ---- dispatch ---- */

static int forced = KILN_VM_NISA;

const kiln_nn_prims *kiln_nn_prims_for(kiln_vm_isa isa) {
  if (isa == KILN_VM_ISA_BASE) return &kiln_nn_prims_base;
#ifdef KILN_NN_HAVE_AVX2
  if (isa == KILN_VM_ISA_AVX2 && kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2)) return &kiln_nn_prims_avx2;
#endif
  return NULL;
}

void kiln_nn_force_isa(kiln_vm_isa isa) { forced = (int)isa; }

const kiln_nn_prims *kiln_nn_prims_active(void) {
  const kiln_nn_prims *p = forced != KILN_VM_NISA ? kiln_nn_prims_for((kiln_vm_isa)forced) : NULL;
  if (!p) p = kiln_nn_prims_for(kiln_vm_isa_active());
  return p ? p : &kiln_nn_prims_base;
}

kiln_status kiln_nn_alloc(kiln_tensor *t, kiln_dtype dtype, int rank, const int64_t *dims) {
  bool keep = t->keep;
  t->keep = true; /* a reservation is not zeroed: every element is written */
  kiln_status s = kiln_tensor_alloc(t, dtype, rank, dims);
  t->keep = keep;
  return s;
}

/* ---- helpers ---- */

static bool dense_f32(const kiln_tensor *t) { return t && t->dtype == KILN_F32 && !t->strided && t->data; }

static int64_t prod(const int64_t *d, int lo, int hi) {
  int64_t p = 1;
  for (int i = lo; i < hi; i++) p *= d[i];
  return p;
}

static bool used(const kiln_op_call *c, int k) { return k < c->n_out && c->out_used[k]; }

#define DECLINE()                                                                                                      \
  do {                                                                                                                 \
    *declined = true;                                                                                                  \
    return KILN_OK;                                                                                                    \
  } while (0)

/* ---- pooling ---- */

/* Widest kernel (along W) the pools take: bounds a table on the stack. */
#define POOL_MAX_KW 256

/* 1-D or 2-D window geometry (a 1-D pool is a 2-D one with H = 1). */
typedef struct pool_geo {
  int64_t planes, H, W, OH, OW;
  int64_t k[2], s[2], d[2], pb[2], pe[2];
} pool_geo;

/* Reads an INTS attribute of exactly count values in [lo, hi] (def when
 * absent); false when it is malformed. */
static bool ints_attr(const kiln_node *n, const char *name, size_t count, int64_t lo, int64_t hi, int64_t def,
                      int64_t *v) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (!a) {
    for (size_t i = 0; i < count; i++) v[i] = def;
    return true;
  }
  if (a->type != KILN_ATTR_INTS || a->n != count) return false;
  for (size_t i = 0; i < count; i++) {
    if (a->ints[i] < lo || a->ints[i] > hi) return false;
    v[i] = a->ints[i];
  }
  return true;
}

/* The reference's pool_geometry for 1-D/2-D inputs; false (decline) on
 * anything it would reject or that is out of this kernel's reach. */
static bool pool_geometry(const kiln_node *n, const kiln_tensor *x, bool dilations, bool ceil_ok, pool_geo *g) {
  const int64_t MAXK = (int64_t)1 << 31, MAXPAD = (int64_t)1 << 40;
  const kiln_attr *ka = kiln_node_attr(n, "kernel_shape");
  if (!ka || ka->type != KILN_ATTR_INTS || ka->n < 1 || ka->n > 2 || x->rank != (int)ka->n + 2) return false;
  int nsp = (int)ka->n;
  int64_t k[2], s[2], d[2] = {1, 1}, pads[4];
  if (!ints_attr(n, "kernel_shape", (size_t)nsp, 1, MAXK, 1, k) ||
      !ints_attr(n, "strides", (size_t)nsp, 1, MAXK, 1, s) ||
      !ints_attr(n, "pads", 2 * (size_t)nsp, 0, MAXPAD, 0, pads))
    return false;
  if (dilations && !ints_attr(n, "dilations", (size_t)nsp, 1, MAXK, 1, d)) return false;
  if (!dilations && kiln_node_attr(n, "dilations")) {
    int64_t dd[2];
    if (!ints_attr(n, "dilations", (size_t)nsp, 1, 1, 1, dd)) return false;
  }
  const char *ap = kiln_attr_string(n, "auto_pad", "NOTSET");
  bool notset = !*ap || !strcmp(ap, "NOTSET"), valid = !strcmp(ap, "VALID");
  bool same = !strcmp(ap, "SAME_UPPER") || !strcmp(ap, "SAME_LOWER"), lower = !strcmp(ap, "SAME_LOWER");
  if (!notset && !valid && !same) return false;
  if (!notset)
    for (int i = 0; i < 2 * nsp; i++)
      if (pads[i]) return false;
  int64_t cm = kiln_attr_int(n, "ceil_mode", 0);
  if (cm != 0 && cm != 1) return false;
  bool ceil_mode = ceil_ok && cm == 1;
  g->planes = x->dims[0] * x->dims[1];
  int64_t in2[2] = {1, 1}, out2[2] = {1, 1};
  int off = 2 - nsp; /* 1-D: spatial dim 0 is W */
  for (int i = 0; i < 2; i++) g->k[i] = g->s[i] = g->d[i] = 1, g->pb[i] = g->pe[i] = 0;
  for (int i = 0; i < nsp; i++) {
    int j = i + off;
    int64_t in = x->dims[2 + i], ek = (k[i] - 1) * d[i] + 1, st = s[i], out, pb, pe;
    if (in < 1) return false;
    if (same) {
      out = (in + st - 1) / st;
      int64_t total = (out - 1) * st + ek - in;
      if (total < 0) total = 0;
      pb = lower ? total - total / 2 : total / 2;
      pe = total - pb;
    } else {
      pb = valid ? 0 : pads[i];
      pe = valid ? 0 : pads[nsp + i];
      if (pb >= ek || pe >= ek) return false;
      int64_t span = in + pb + pe - ek;
      if (span < 0) return false;
      out = span / st + 1;
      if (ceil_mode && span % st) {
        out++;
        if ((out - 1) * st >= in + pb) out--;
      }
    }
    in2[j] = in, out2[j] = out;
    g->k[j] = k[i], g->s[j] = st, g->d[j] = d[i], g->pb[j] = pb, g->pe[j] = pe;
  }
  g->H = in2[0], g->W = in2[1], g->OH = out2[0], g->OW = out2[1];
  /* keep every index far inside int64 / size_t and the work bounded */
  if (g->OH > KILN_MAX_NUMEL / g->OW || g->planes > KILN_MAX_NUMEL / (g->OH * g->OW)) return false;
  if (g->k[1] > POOL_MAX_KW) return false;
  return true;
}

/* Output columns ow in [*lo, *hi) whose input column ow*s + off lies in [0, W). */
static void valid_cols(int64_t OW, int64_t W, int64_t s, int64_t off, int64_t *lo, int64_t *hi) {
  int64_t l = off < 0 ? (-off + s - 1) / s : 0;
  int64_t h = W - 1 - off < 0 ? 0 : (W - 1 - off) / s + 1;
  if (h > OW) h = OW;
  *lo = l, *hi = h > l ? h : l;
}

enum { POOL_MAX, POOL_AVG };

/* MaxPool with its Indices output, window by window as the reference does
 * (the same code under both ISAs): the first max in row-major window order
 * wins, the first NaN beats every number; the index is the flat position
 * in X, its spatial part row-major (or column-major: storage_order 1). */
static void maxpool_indices(const kiln_tensor *x, const pool_geo *g, bool col_major, float *y, int64_t *yi) {
  const float *xd = x->data;
  int64_t H = g->H, W = g->W;
  for (int64_t p = 0; p < g->planes; p++)
    for (int64_t oh = 0; oh < g->OH; oh++)
      for (int64_t ow = 0; ow < g->OW; ow++) {
        float best = -INFINITY;
        int64_t best_i = -1;
        bool found = false;
        for (int64_t kh = 0; kh < g->k[0]; kh++) {
          int64_t ih = oh * g->s[0] - g->pb[0] + kh * g->d[0];
          if (ih < 0 || ih >= H) continue;
          for (int64_t kw = 0; kw < g->k[1]; kw++) {
            int64_t iw = ow * g->s[1] - g->pb[1] + kw * g->d[1];
            if (iw < 0 || iw >= W) continue;
            float v = xd[(p * H + ih) * W + iw];
            if (found && !(v > best) && !(v != v && best == best)) continue;
            found = true;
            best = v;
            best_i = p * H * W + (col_major ? iw * H + ih : ih * W + iw);
          }
        }
        y[(p * g->OH + oh) * g->OW + ow] = best;
        yi[(p * g->OH + oh) * g->OW + ow] = best_i;
      }
}

/* Planes [lo, hi) of a MaxPool / AveragePool (2-D, or 1-D as H = 1). */
typedef struct pool_job {
  const kiln_nn_prims *P;
  const pool_geo *g;
  const float *xd;
  float *yd;
  int kind;
  bool include_pad;
  int64_t *cw; /* AveragePool: per output column, the taps counted; then per worker OW floats */
  int64_t cols[2 * POOL_MAX_KW]; /* per kw: the output columns [lo, hi) its tap reads inside the input */
  bool plane2x2;                 /* MaxPool 2x2 stride 2 whose windows all lie inside the input: max2x2s2 */
  float *buf3;                   /* MaxPool 3x3 stride 2 (max3x3s2): its column maxima, per worker, or NULL */
} pool_job;

/* Output rows [oh0, oh1) of plane p. dv: AveragePool's divisors (OW floats, for the row count *dv_ch), buf3:
   max3x3s2's column maxima. */
static void pool_rows(const pool_job *j, int64_t p, int64_t oh0, int64_t oh1, float *dv, int64_t *dv_ch,
                      float *buf3) {
  const kiln_nn_prims *P = j->P;
  const pool_geo *g = j->g;
  const int64_t *cw = j->cw, *cols = j->cols;
  int64_t H = g->H, W = g->W, OH = g->OH, OW = g->OW;
  const float *xp = j->xd + p * H * W;
  float *yp = j->yd + p * OH * OW;
  if (oh0 >= oh1) return;
  if (j->plane2x2) { /* MaxPool 2x2 stride 2 inside the input */
    P->max2x2s2((size_t)(oh1 - oh0), (size_t)OW, xp + 2 * oh0 * W, (size_t)W, yp + oh0 * OW);
    return;
  }
  if (buf3) { /* MaxPool 3x3 stride 2: rows, then columns; a later band starts at its first row (no top padding) */
    int64_t r0 = oh0 ? 2 * oh0 - g->pb[0] : 0, pt = oh0 ? 0 : g->pb[0];
    P->max3x3s2((size_t)(oh1 - oh0), (size_t)OW, xp + r0 * W, (size_t)(H - r0), (size_t)W, (size_t)pt,
                (size_t)g->pb[1], yp + oh0 * OW, buf3);
    return;
  }
  for (int64_t oh = oh0; oh < oh1; oh++) {
    float *row = yp + oh * OW;
    float init = j->kind == POOL_MAX ? -INFINITY : 0.0f;
    for (int64_t ow = 0; ow < OW; ow++) row[ow] = init;
    int64_t ch = 0;
    for (int64_t kh = 0; kh < g->k[0]; kh++) {
      int64_t ih = oh * g->s[0] - g->pb[0] + kh * g->d[0];
      if (j->include_pad ? ih >= -g->pb[0] && ih < H + g->pe[0] : ih >= 0 && ih < H) ch++;
      if (ih < 0 || ih >= H) continue;
      for (int64_t kw = 0; kw < g->k[1]; kw++) {
        int64_t off = kw * g->d[1] - g->pb[1], lo = cols[2 * kw], hi = cols[2 * kw + 1];
        if (lo >= hi) continue;
        const float *src = xp + ih * W + lo * g->s[1] + off;
        if (j->kind == POOL_MAX)
          P->acc_max((size_t)(hi - lo), row + lo, src, (size_t)g->s[1]);
        else
          P->acc_add((size_t)(hi - lo), row + lo, src, (size_t)g->s[1]);
      }
    }
    if (cw) {
      if (ch != *dv_ch) /* the divisors change only near the top and bottom edges */
        for (int64_t ow = 0; ow < OW; ow++) dv[ow] = (float)(ch * cw[ow]);
      *dv_ch = ch;
      P->div((size_t)OW, row, dv);
    }
  }
}

static void pool_planes(void *ctx, int64_t lo_p, int64_t hi_p, int worker) {
  const pool_job *j = ctx;
  int64_t OW = j->g->OW;
  float *dv = j->cw ? (float *)(void *)(j->cw + OW) + (size_t)worker * (size_t)OW : NULL;
  int64_t dv_ch = -1; /* the ch that dv holds */
  float *buf3 = j->buf3 ? j->buf3 + (size_t)worker * (size_t)(2 * OW + 18) : NULL;
  for (int64_t p = lo_p; p < hi_p; p++) pool_rows(j, p, 0, j->g->OH, dv, &dv_ch, buf3);
}

/* Sets j's plane kernels and column ranges from its geometry; true for the 3x3 stride-2 MaxPool (max3x3s2, which
   then needs buf3). */
static bool pool_kernels(pool_job *j, int rank) {
  const pool_geo *g = j->g;
  j->plane2x2 = j->kind == POOL_MAX && rank == 4 && g->k[0] == 2 && g->k[1] == 2 && g->s[0] == 2 && g->s[1] == 2 &&
                g->d[0] == 1 && g->d[1] == 1 && g->pb[0] == 0 && g->pb[1] == 0 && 2 * g->OH <= g->H &&
                2 * g->OW <= g->W;
  for (int64_t kw = 0; kw < g->k[1]; kw++)
    valid_cols(g->OW, g->W, g->s[1], kw * g->d[1] - g->pb[1], &j->cols[2 * kw], &j->cols[2 * kw + 1]);
  /* MaxPool 3x3 stride 2 (ResNet's stem pooling): one pass of 3-row maxima per output row, then the columns,
     instead of 9 strided accumulations per row (GEMM_CONV.md, "ResNet-18 and MobileNetV2 at one thread") */
  return j->kind == POOL_MAX && rank == 4 && g->k[0] == 3 && g->k[1] == 3 && g->s[0] == 2 && g->s[1] == 2 &&
         g->d[0] == 1 && g->d[1] == 1 && g->pb[0] <= 2 && g->pb[1] <= 2;
}

static kiln_status run_pool(const kiln_op_call *c, int kind, bool *declined) {
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  bool want_idx = kind == POOL_MAX && used(c, 1);
  if (!dense_f32(x) || x->numel == 0 || (kind == POOL_AVG && used(c, 1))) DECLINE();
  pool_geo g;
  if (!pool_geometry(c->node, x, kind == POOL_MAX, true, &g)) DECLINE();
  bool include_pad = false, col_major = false;
  if (kind == POOL_MAX) {
    int64_t so = kiln_attr_int(c->node, "storage_order", 0);
    if (so != 0 && so != 1) DECLINE();
    col_major = so == 1;
  } else {
    int64_t cip = kiln_attr_int(c->node, "count_include_pad", 0);
    if (cip != 0 && cip != 1) DECLINE();
    include_pad = cip == 1;
  }
  int64_t dims[KILN_MAX_RANK];
  dims[0] = x->dims[0], dims[1] = x->dims[1];
  if (x->rank == 4)
    dims[2] = g.OH, dims[3] = g.OW;
  else
    dims[2] = g.OW;
  /* AveragePool's divisor: per output column cw (taps under the input, or
     the padded input), then per row dv = ch * cw as floats */
  int workers = nn_workers();
  int64_t *cw = kind == POOL_AVG ? kiln_malloc((size_t)g.OW * (sizeof *cw + sizeof(float) * (size_t)workers)) : NULL;
  if (kind == POOL_AVG && !cw) return kiln_fail(KILN_E_NOMEM, "out of memory in AveragePool");
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_F32, x->rank, dims);
  if (!s && want_idx && !(s = kiln_nn_alloc(&c->out[1], KILN_I64, x->rank, dims))) {
    maxpool_indices(x, &g, col_major, c->out[0].data, c->out[1].data);
    return KILN_OK;
  }
  if (s) {
    kiln_free(cw);
    return s;
  }
  pool_job j = {kiln_nn_prims_active(), &g, x->data, c->out[0].data, kind, include_pad, cw, {0}, false, NULL};
  bool plane3x3 = pool_kernels(&j, x->rank);
  if (plane3x3 && !(j.buf3 = kiln_malloc((size_t)(2 * g.OW + 18) * (size_t)workers * sizeof(float)))) {
    kiln_free(cw);
    return kiln_fail(KILN_E_NOMEM, "out of memory in MaxPool");
  }
  int64_t W = g.W, OW = g.OW;
  if (cw)
    for (int64_t ow = 0; ow < OW; ow++) {
      cw[ow] = 0;
      for (int64_t kw = 0; kw < g.k[1]; kw++) {
        int64_t iw = ow * g.s[1] - g.pb[1] + kw * g.d[1];
        cw[ow] += include_pad ? iw >= -g.pb[1] && iw < W + g.pe[1] : iw >= 0 && iw < W;
      }
    }
  nn_par(g.planes, g.H * g.W + g.OH * g.OW * g.k[0] * g.k[1], workers, pool_planes, &j);
  kiln_free(j.buf3);
  kiln_free(cw);
  return KILN_OK;
}

/* ---- MaxPool by bands of rows (nn.h kiln_nn_pool_bands) ---- */

struct kiln_nn_pool_bands {
  pool_geo g;
  pool_job j;          /* j.g = &g */
  bool plane3x3;       /* max3x3s2 (a buffer of 2·OW + 18 floats a call) */
  unsigned char *done; /* per plane and output row: 1 where a band pooled it */
};

kiln_nn_pool_bands *kiln_nn_pool_bands_new(const kiln_node *n, const int64_t *dims, const float *x, float *y,
                                           const int64_t *ydims) {
  int rank = 4;
  if (strcmp(n->op_type, "MaxPool") || n->n_out < 1) return NULL;
  int64_t so = kiln_attr_int(n, "storage_order", 0);
  if (so != 0 && so != 1) return NULL;
  kiln_tensor t = {0};
  kiln_tensor_wrap(&t, KILN_F32, rank, dims, dims[0] * dims[1] * dims[2] * dims[3], (void *)(uintptr_t)x);
  pool_geo g;
  if (!pool_geometry(n, &t, true, true, &g) || g.OW > KILN_NN_BAND_MAX_OW || ydims[0] != dims[0] ||
      ydims[1] != dims[1] || ydims[2] != g.OH || ydims[3] != g.OW)
    return NULL;
  kiln_nn_pool_bands *b = kiln_calloc(1, sizeof *b);
  if (!b) return NULL;
  if (!(b->done = kiln_calloc((size_t)(g.planes * g.OH), 1))) {
    kiln_free(b);
    return NULL;
  }
  b->g = g;
  b->j = (pool_job){kiln_nn_prims_active(), &b->g, x, y, POOL_MAX, false, NULL, {0}, false, NULL};
  b->plane3x3 = pool_kernels(&b->j, rank);
  return b;
}

void kiln_nn_pool_bands_free(kiln_nn_pool_bands *b) {
  if (!b) return;
  kiln_free(b->done);
  kiln_free(b);
}

void kiln_nn_pool_bands_done(void *ctx, int64_t start, int64_t n, float *y) {
  (void)y;
  kiln_nn_pool_bands *b = ctx;
  const pool_geo *g = &b->g;
  int64_t H = g->H, W = g->W, HW = H * W, OH = g->OH, ek = (g->k[0] - 1) * g->d[0] + 1, dv_ch = -1;
  float buf3[2 * KILN_NN_BAND_MAX_OW + 18];
  for (int64_t p = start / HW; p < g->planes && p * HW < start + n; p++) {
    int64_t a = start - p * HW > 0 ? start - p * HW : 0, e = start + n - p * HW < HW ? start + n - p * HW : HW;
    int64_t r0 = (a + W - 1) / W, r1 = e / W; /* the input rows the block holds whole */
    if (r0 >= r1) continue;
    /* the output rows whose windows (clipped to the input) lie in [r0, r1) */
    int64_t oh0 = r0 == 0 ? 0 : (r0 + g->pb[0] + g->s[0] - 1) / g->s[0];
    int64_t oh1 = r1 >= H ? OH : r1 + g->pb[0] - ek < 0 ? 0 : (r1 + g->pb[0] - ek) / g->s[0] + 1;
    if (oh1 > OH) oh1 = OH;
    if (oh0 >= oh1) continue;
    pool_rows(&b->j, p, oh0, oh1, NULL, &dv_ch, b->plane3x3 ? buf3 : NULL);
    memset(b->done + p * OH + oh0, 1, (size_t)(oh1 - oh0));
  }
}

static void pool_bands_rest(void *ctx, int64_t lo_p, int64_t hi_p, int worker) {
  (void)worker;
  kiln_nn_pool_bands *b = ctx;
  int64_t OH = b->g.OH, dv_ch = -1;
  float buf3[2 * KILN_NN_BAND_MAX_OW + 18];
  for (int64_t p = lo_p; p < hi_p; p++)
    for (int64_t oh = 0, e; oh < OH; oh = e) { /* runs of rows alike in the map: pool the runs not done */
      const unsigned char *d = b->done + p * OH;
      e = oh + 1;
      while (e < OH && d[e] == d[oh]) e++;
      if (!d[oh]) pool_rows(&b->j, p, oh, e, NULL, &dv_ch, b->plane3x3 ? buf3 : NULL);
    }
}

int64_t kiln_nn_pool_bands_finish(kiln_nn_pool_bands *b) {
  int64_t rows = b->g.planes * b->g.OH, banded = 0;
  for (int64_t i = 0; i < rows; i++) banded += b->done[i];
  if (banded < rows) /* the rows no band made, weighed as their share of the work */
    nn_par(b->g.planes, (int64_t)((double)(b->g.H * b->g.W) * (double)(rows - banded) / (double)rows) + 1,
           nn_workers(), pool_bands_rest, b);
  return banded;
}

static kiln_status k_maxpool(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_pool(c, POOL_MAX, declined);
}

static kiln_status k_averagepool(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_pool(c, POOL_AVG, declined);
}

typedef struct global_job {
  const kiln_nn_prims *P;
  const float *xd;
  float *yd;
  int64_t sp;
  int kind;
} global_job;

static void global_planes(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const global_job *j = ctx;
  int64_t sp = j->sp;
  for (int64_t p = lo; p < hi; p++)
    j->yd[p] = j->kind == POOL_MAX ? j->P->max((size_t)sp, j->xd + p * sp)
                                   : j->P->sum((size_t)sp, j->xd + p * sp) / (float)sp;
}

static kiln_status run_global(const kiln_op_call *c, int kind, bool *declined) {
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  if (!dense_f32(x) || x->rank < 3 || x->numel == 0) DECLINE();
  int64_t dims[KILN_MAX_RANK], planes = x->dims[0] * x->dims[1], sp = x->numel / planes;
  for (int i = 0; i < x->rank; i++) dims[i] = i < 2 ? x->dims[i] : 1;
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_F32, x->rank, dims);
  if (s) return s;
  const kiln_nn_prims *P = kiln_nn_prims_active();
  const float *xd = x->data;
  float *yd = c->out[0].data;
  global_job j = {P, xd, yd, sp, kind};
  nn_par(planes, sp, nn_workers(), global_planes, &j);
  return KILN_OK;
}

static kiln_status k_globalavg(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_global(c, POOL_AVG, declined);
}

static kiln_status k_globalmax(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_global(c, POOL_MAX, declined);
}

/* ---- softmax ---- */

/* Columns a block handles at once in softmax_cols. */
#define SM_BLK 512

/* Softmax / LogSoftmax along the middle axis of [outer, len, inner]: per
 * block of up to SM_BLK columns, the column max m, e = exp(x - m), the
 * column sums s, then e / s (or (x - m) - log s). cols: 3 * SM_BLK floats. */
static void softmax_cols(const kiln_nn_prims *P, const float *xd, float *yd, int64_t outer, int64_t len,
                         int64_t inner, bool log_form, float *cols) {
  float *m = cols, *sum = cols + SM_BLK, *ls = cols + 2 * SM_BLK;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i0 = 0; i0 < inner; i0 += SM_BLK) {
      size_t b = (size_t)(inner - i0 < SM_BLK ? inner - i0 : SM_BLK);
      const float *x0 = xd + o * len * inner + i0;
      float *y0 = yd + o * len * inner + i0;
      memcpy(m, x0, b * sizeof *m);
      for (int64_t j = 1; j < len; j++) P->acc_max(b, m, x0 + j * inner, 1);
      memset(sum, 0, b * sizeof *sum);
      for (int64_t j = 0; j < len; j++) {
        float *yr = y0 + j * inner;
        P->sub(b, x0 + j * inner, m, yr);
        P->exp_shift_sum(b, yr, 0.0f, yr); /* exp(t - 0) = exp(t) */
        P->acc_add(b, sum, yr, 1);
      }
      if (log_form) {
        for (size_t i = 0; i < b; i++) ls[i] = logf(sum[i]);
        for (int64_t j = 0; j < len; j++) {
          float *yr = y0 + j * inner;
          P->sub(b, x0 + j * inner, m, yr);
          P->sub(b, yr, ls, yr);
        }
      } else {
        for (int64_t j = 0; j < len; j++) P->div(b, y0 + j * inner, sum);
      }
    }
}

/* Softmax / LogSoftmax over rows: before opset 13 the input coerced to 2-D
 * at axis; from 13 along one axis (rows when it is the innermost one, else
 * columns: softmax_cols). */
typedef struct softmax_job {
  const kiln_nn_prims *P;
  const float *xd;
  float *yd;
  int64_t len, inner;
  bool log_form;
  float *cols; /* columns: 3 * SM_BLK floats per worker */
} softmax_job;

static void softmax_rows(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const softmax_job *j = ctx;
  const kiln_nn_prims *P = j->P;
  int64_t len = j->len;
  size_t n = (size_t)len;
  if (!j->log_form) {
    P->softmax_rows((size_t)(hi - lo), n, j->xd + lo * len, j->yd + lo * len);
    return;
  }
  for (int64_t r = lo; r < hi; r++) {
    const float *xr = j->xd + r * len;
    float *yr = j->yd + r * len;
    float m = P->max(n, xr);
    float sum = P->exp_shift_sum(n, xr, m, yr);
    if (j->log_form) {
      float ls = logf(sum);
      P->affine(n, xr, 1.0f, -m, yr);  /* x - m */
      P->affine(n, yr, 1.0f, -ls, yr); /* (x - m) - log(sum) */
    } else {
      P->affine(n, yr, 1.0f / sum, 0.0f, yr);
    }
  }
}

static void softmax_outer(void *ctx, int64_t lo, int64_t hi, int worker) {
  const softmax_job *j = ctx;
  int64_t blk = j->len * j->inner;
  softmax_cols(j->P, j->xd + lo * blk, j->yd + lo * blk, hi - lo, j->len, j->inner, j->log_form,
               j->cols + (size_t)worker * 3 * SM_BLK);
}

static kiln_status run_softmax(const kiln_op_call *c, bool log_form, bool *declined) {
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  if (!dense_f32(x) || x->rank < 1 || x->numel == 0) DECLINE();
  bool v13 = c->opset >= 13;
  int64_t axis = kiln_attr_int(c->node, "axis", v13 ? -1 : 1);
  if (axis < -x->rank || axis >= x->rank) DECLINE();
  int ax = (int)(axis < 0 ? axis + x->rank : axis);
  int64_t len = v13 ? x->dims[ax] : prod(x->dims, ax, x->rank);
  int64_t inner = v13 ? prod(x->dims, ax + 1, x->rank) : 1;
  int workers = nn_workers();
  float *cols = inner > 1 ? kiln_malloc(3 * SM_BLK * sizeof(float) * (size_t)workers) : NULL;
  if (inner > 1 && !cols) return kiln_fail(KILN_E_NOMEM, "out of memory in %s", c->node->op_type);
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_F32, x->rank, x->dims);
  if (s) {
    kiln_free(cols);
    return s;
  }
  const kiln_nn_prims *P = kiln_nn_prims_active();
  const float *xd = x->data;
  float *yd = c->out[0].data;
  softmax_job j = {P, xd, yd, len, inner, log_form, cols};
  if (inner > 1) {
    nn_par(x->numel / (len * inner), 8 * len * inner, workers, softmax_outer, &j);
    kiln_free(cols);
    return KILN_OK;
  }
  nn_par(x->numel / len, 8 * len, workers, softmax_rows, &j); /* exp: ~8 element-ops */
  return KILN_OK;
}

static kiln_status k_softmax(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_softmax(c, false, declined);
}

static kiln_status k_logsoftmax(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_softmax(c, true, declined);
}

/* ---- normalisation ---- */

/* True when p (dense float32) holds one value per element of x's dims
 * [ax, rank) in the same order: p's dims right-aligned to x's equal x's
 * from ax on and are 1 before it. */
static bool trailing_vec(const kiln_tensor *p, const kiln_tensor *x, int ax) {
  if (!dense_f32(p) || p->rank > x->rank) return false;
  for (int j = 0; j < p->rank; j++) {
    int q = x->rank - p->rank + j;
    if (q >= ax ? p->dims[j] != x->dims[q] : p->dims[j] != 1) return false;
  }
  return x->rank - p->rank <= ax;
}

typedef struct ln_job {
  const kiln_nn_prims *P;
  const float *xd, *scd, *bd;
  float *yd, *md, *id;
  int64_t inner;
  double eps;
} ln_job;

#define LN_GROUP 8

static void ln_rows(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const ln_job *j = ctx;
  const kiln_nn_prims *P = j->P;
  int64_t inner = j->inner;
  size_t n = (size_t)inner;
  /* per row: mean = sum / inner, var = sqdev(mean) / inner; rows in groups
     of LN_GROUP (the prims' sums and sqdevs: the same values as sum and
     sqdev row by row, the rows' chains overlapped) */
  for (int64_t o0 = lo; o0 < hi; o0 += LN_GROUP) {
    size_t g = (size_t)(hi - o0 < LN_GROUP ? hi - o0 : LN_GROUP);
    const float *x0 = j->xd + o0 * inner;
    float mean[LN_GROUP], var[LN_GROUP];
    P->sums(g, n, x0, n, mean);
    for (size_t r = 0; r < g; r++) mean[r] = mean[r] / (float)inner;
    P->sqdevs(g, n, x0, n, mean, var);
    for (size_t r = 0; r < g; r++) {
      int64_t o = o0 + (int64_t)r;
      float inv = (float)(1.0 / sqrt((double)(var[r] / (float)inner) + j->eps));
      P->norm_apply(n, x0 + r * n, mean[r], inv, j->scd, j->bd, j->yd + o * inner);
      if (j->md) j->md[o] = mean[r];
      if (j->id) j->id[o] = inv;
    }
  }
}

static kiln_status k_layernorm(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL, *sc = c->n_in > 1 ? c->in[1] : NULL,
                    *bb = c->n_in > 2 ? c->in[2] : NULL;
  if (c->opset < 17 || !dense_f32(x) || x->rank < 1 || x->numel == 0 || !sc) DECLINE();
  int64_t axis = kiln_attr_int(c->node, "axis", -1);
  if (axis < -x->rank || axis >= x->rank) DECLINE();
  int ax = (int)(axis < 0 ? axis + x->rank : axis);
  if (!trailing_vec(sc, x, ax) || (bb && !trailing_vec(bb, x, ax))) DECLINE();
  int64_t st = kiln_attr_int(c->node, "stash_type", 1);
  if ((used(c, 1) || used(c, 2)) && st != KILN_F32) DECLINE();
  if (st != KILN_F32 && st != KILN_F64 && st != KILN_F16 && st != KILN_BF16) DECLINE();
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  int64_t inner = prod(x->dims, ax, x->rank), outer = x->numel / inner, rdims[KILN_MAX_RANK];
  for (int i = 0; i < x->rank; i++) rdims[i] = i < ax ? x->dims[i] : 1;
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_F32, x->rank, x->dims);
  for (int k = 1; k < 3 && !s; k++)
    if (used(c, k)) s = kiln_nn_alloc(&c->out[k], KILN_F32, x->rank, rdims);
  if (s) return s;
  const kiln_nn_prims *P = kiln_nn_prims_active();
  const float *xd = x->data, *scd = sc->data, *bd = bb ? bb->data : NULL;
  float *yd = c->out[0].data;
  float *md = used(c, 1) ? c->out[1].data : NULL, *id = used(c, 2) ? c->out[2].data : NULL;
  ln_job j = {P, xd, scd, bd, yd, md, id, inner, eps};
  nn_par(outer, 3 * inner, nn_workers(), ln_rows, &j);
  return KILN_OK;
}

static bool vec_c(const kiln_tensor *p, int64_t C) { return dense_f32(p) && p->rank == 1 && p->dims[0] == C; }

typedef struct bn_job {
  const kiln_nn_prims *P;
  const float *sc, *b, *m, *v, *xd;
  float *yd;
  double eps;
  int64_t sp, N, C;
} bn_job;

static void bn_channels(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bn_job *j = ctx;
  int64_t sp = j->sp, C = j->C;
  for (int64_t ch = lo; ch < hi; ch++) {
    double a = (double)j->sc[ch] / sqrt((double)j->v[ch] + j->eps);
    float fa = (float)a, fb = (float)((double)j->b[ch] - (double)j->m[ch] * a);
    for (int64_t nn = 0; nn < j->N; nn++)
      j->P->affine((size_t)sp, j->xd + (nn * C + ch) * sp, fa, fb, j->yd + (nn * C + ch) * sp);
  }
}

static kiln_status k_batchnorm(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  if (c->n_in < 5 || c->opset < 7) DECLINE();
  for (int k = 1; k < c->n_out; k++)
    if (c->node->out[k] >= 0) DECLINE();
  if (kiln_attr_int(c->node, "training_mode", 0) != 0) DECLINE();
  if (c->opset < 9 && kiln_attr_int(c->node, "spatial", 1) != 1) DECLINE();
  const kiln_tensor *x = c->in[0];
  if (!dense_f32(x) || x->rank < 2 || x->numel == 0) DECLINE();
  int64_t C = x->dims[1];
  for (int i = 1; i < 5; i++)
    if (!vec_c(c->in[i], C)) DECLINE();
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_F32, x->rank, x->dims);
  if (s) return s;
  const kiln_nn_prims *P = kiln_nn_prims_active();
  const float *sc = c->in[1]->data, *b = c->in[2]->data, *m = c->in[3]->data, *v = c->in[4]->data;
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  int64_t sp = prod(x->dims, 2, x->rank), N = x->dims[0];
  const float *xd = x->data;
  float *yd = c->out[0].data;
  bn_job j = {P, sc, b, m, v, xd, yd, eps, sp, N, C};
  nn_par(C, N * sp, nn_workers(), bn_channels, &j);
  return KILN_OK;
}

static void in_planes(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const bn_job *j = ctx;
  const kiln_nn_prims *P = j->P;
  int64_t sp = j->sp, C = j->C;
  for (int64_t p = lo; p < hi; p++) {
    const float *xp = j->xd + p * sp;
    float *yp = j->yd + p * sp;
    /* An instance far from zero (x ~ 1e5, deviations ~ 1) keeps its
       deviations: centred on a first mean m0 (x - m0 exact where x is
       within a factor 2 of m0), the mean's remainder d, the variance and
       the output come from the centred values; x * a + (B - mean * a) with
       a float mean was off by 1-2 % of the output's range there. */
    float m0 = P->sum((size_t)sp, xp) / (float)sp;
    P->affine((size_t)sp, xp, 1.0f, -m0, yp);
    float d = P->sum((size_t)sp, yp) / (float)sp;
    float var = P->sqdev((size_t)sp, yp, d) / (float)sp;
    double a = (double)j->sc[p % C] / sqrt((double)var + j->eps);
    P->affine((size_t)sp, yp, (float)a, (float)((double)j->b[p % C] - (double)d * a), yp);
  }
}

static kiln_status k_instancenorm(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  if (c->n_in < 3) DECLINE();
  const kiln_tensor *x = c->in[0];
  if (!dense_f32(x) || x->rank < 3 || x->numel == 0) DECLINE();
  int64_t C = x->dims[1], sp = prod(x->dims, 2, x->rank), planes = x->dims[0] * C;
  if (!vec_c(c->in[1], C) || !vec_c(c->in[2], C)) DECLINE();
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_F32, x->rank, x->dims);
  if (s) return s;
  const kiln_nn_prims *P = kiln_nn_prims_active();
  const float *sc = c->in[1]->data, *b = c->in[2]->data, *xd = x->data;
  float *yd = c->out[0].data;
  double eps = kiln_attr_float(c->node, "epsilon", 1e-5f);
  bn_job j = {P, sc, b, NULL, NULL, xd, yd, eps, sp, 0, C};
  nn_par(planes, 3 * sp, nn_workers(), in_planes, &j);
  return KILN_OK;
}

/* ---- reductions ---- */

typedef enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_SUMSQ, R_L2 } red_kind;

typedef struct red_job {
  const kiln_nn_prims *P;
  const float *xd;
  float *yd;
  red_kind k;
  int64_t R, inner;
} red_job;

static void red_outer(void *ctx, int64_t lo, int64_t hi, int worker);

static kiln_status run_reduce(const kiln_op_call *c, red_kind k, bool *declined) {
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  if (!dense_f32(x) || x->rank < 1 || x->numel == 0) DECLINE();
  int r = x->rank, since = k == R_SUM ? 13 : 18;
  int64_t axes[KILN_MAX_RANK];
  int na = 0;
  bool noop = false;
  if (c->opset >= since) {
    noop = kiln_attr_int(c->node, "noop_with_empty_axes", 0) != 0;
    if (c->n_in > 1 && c->in[1]) {
      const kiln_tensor *a = c->in[1];
      if (a->strided || (a->dtype != KILN_I64 && a->dtype != KILN_I32) || a->rank > 1 || a->numel > r) DECLINE();
      for (int64_t i = 0; i < a->numel; i++)
        axes[i] = a->dtype == KILN_I64 ? ((const int64_t *)a->data)[i] : ((const int32_t *)a->data)[i];
      na = (int)a->numel;
    }
  } else {
    const kiln_attr *a = kiln_node_attr(c->node, "axes");
    if (a) {
      if (a->type != KILN_ATTR_INTS || a->n > (size_t)r) DECLINE();
      for (size_t i = 0; i < a->n; i++) axes[i] = a->ints[i];
      na = (int)a->n;
    }
  }
  if (na == 0 && noop) DECLINE();
  bool red[KILN_MAX_RANK];
  for (int d = 0; d < r; d++) red[d] = na == 0;
  for (int i = 0; i < na; i++) {
    if (axes[i] < -r || axes[i] >= r) DECLINE();
    int a = (int)(axes[i] < 0 ? axes[i] + r : axes[i]);
    if (red[a]) DECLINE();
    red[a] = true;
  }
  int64_t keepdims = kiln_attr_int(c->node, "keepdims", 1);
  if (keepdims != 0 && keepdims != 1) DECLINE();
  /* groups of consecutive non-1 dims of one kind: [K] R [K] is covered */
  int64_t gsz[KILN_MAX_RANK];
  bool gred[KILN_MAX_RANK];
  int ng = 0;
  for (int d = 0; d < r; d++) {
    if (x->dims[d] == 1) continue;
    if (ng && gred[ng - 1] == red[d])
      gsz[ng - 1] *= x->dims[d];
    else
      gsz[ng] = x->dims[d], gred[ng++] = red[d];
  }
  int64_t outer = 1, R = 1, inner = 1;
  int gi = 0;
  if (gi < ng && !gred[gi]) outer = gsz[gi++];
  if (gi < ng && gred[gi]) R = gsz[gi++];
  if (gi < ng && !gred[gi]) inner = gsz[gi++];
  if (gi != ng || R == 1) DECLINE(); /* another pattern, or nothing reduced */
  int64_t odims[KILN_MAX_RANK];
  int orank = 0;
  for (int d = 0; d < r; d++)
    if (!red[d])
      odims[orank++] = x->dims[d];
    else if (keepdims)
      odims[orank++] = 1;
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_F32, orank, odims);
  if (s) return s;
  const kiln_nn_prims *P = kiln_nn_prims_active();
  const float *xd = x->data;
  float *yd = c->out[0].data;
  red_job j = {P, xd, yd, k, R, inner};
  nn_par(outer, R * inner, nn_workers(), red_outer, &j);
  return KILN_OK;
}

static void red_outer(void *ctx, int64_t lo, int64_t hi, int worker) {
  (void)worker;
  const red_job *j = ctx;
  const kiln_nn_prims *P = j->P;
  const float *xd = j->xd;
  float *yd = j->yd;
  red_kind k = j->k;
  int64_t R = j->R, inner = j->inner;
  size_t n = (size_t)R;
  if (inner == 1) {
    for (int64_t o = lo; o < hi; o++) {
      const float *xr = xd + o * R;
      float v;
      switch (k) {
      case R_MAX: v = P->max(n, xr); break;
      case R_MIN: v = P->min(n, xr); break;
      case R_SUMSQ: v = P->sumsq(n, xr); break;
      case R_L2: v = sqrtf(P->sumsq(n, xr)); break;
      case R_MEAN: v = P->sum(n, xr) / (float)R; break;
      default: v = P->sum(n, xr); break;
      }
      yd[o] = v;
    }
    return;
  }
  /* columns: acc[i] over rows r of x[o][r][i], blocked so acc stays in L1 */
  const int64_t BLK = 1024;
  for (int64_t o = lo; o < hi; o++)
    for (int64_t i0 = 0; i0 < inner; i0 += BLK) {
      size_t b = (size_t)(inner - i0 < BLK ? inner - i0 : BLK);
      float *acc = yd + o * inner + i0;
      const float *x0 = xd + o * R * inner + i0;
      if (k == R_MAX || k == R_MIN)
        memcpy(acc, x0, b * sizeof *acc);
      else
        memset(acc, 0, b * sizeof *acc);
      for (int64_t rr = (k == R_MAX || k == R_MIN) ? 1 : 0; rr < R; rr++) {
        const float *xr = x0 + rr * inner;
        switch (k) {
        case R_MAX: P->acc_max(b, acc, xr, 1); break;
        case R_MIN: P->acc_min(b, acc, xr, 1); break;
        case R_SUMSQ:
        case R_L2: P->acc_addsq(b, acc, xr, 1); break;
        default: P->acc_add(b, acc, xr, 1); break;
        }
      }
      if (k == R_MEAN)
        for (size_t i = 0; i < b; i++) acc[i] = acc[i] / (float)R;
      if (k == R_L2)
        for (size_t i = 0; i < b; i++) acc[i] = sqrtf(acc[i]);
    }
}

#define RED_KERNEL(fn, kind)                                                                                           \
  static kiln_status fn(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {                          \
    (void)ep;                                                                                                          \
    return run_reduce(c, kind, declined);                                                                              \
  }
RED_KERNEL(k_reducesum, R_SUM)
RED_KERNEL(k_reducemean, R_MEAN)
RED_KERNEL(k_reducemax, R_MAX)
RED_KERNEL(k_reducemin, R_MIN)
RED_KERNEL(k_reducesumsq, R_SUMSQ)
RED_KERNEL(k_reducel2, R_L2)

/* ---- ArgMax, ArgMin ---- */

/* Index of the max (min) along axis: a NaN wins (the first, or the last
 * with select_last_index), ties go to the first (the last). Rows (nothing
 * after the axis) find the value with the max/min primitive, then its
 * first or last position; columns scan in place. */
static kiln_status run_arg(const kiln_op_call *c, bool is_max, bool *declined) {
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  if (!dense_f32(x) || x->rank < 1 || x->numel == 0) DECLINE();
  int64_t axis = kiln_attr_int(c->node, "axis", 0), keep = kiln_attr_int(c->node, "keepdims", 1),
          last_i = kiln_attr_int(c->node, "select_last_index", 0);
  if (axis < -x->rank || axis >= x->rank || (keep != 0 && keep != 1) || (last_i != 0 && last_i != 1)) DECLINE();
  int ax = (int)(axis < 0 ? axis + x->rank : axis);
  bool last = last_i == 1;
  int64_t outer = prod(x->dims, 0, ax), n = x->dims[ax], inner = prod(x->dims, ax + 1, x->rank), odims[KILN_MAX_RANK];
  int orank = 0;
  for (int d = 0; d < x->rank; d++)
    if (d != ax)
      odims[orank++] = x->dims[d];
    else if (keep)
      odims[orank++] = 1;
  kiln_status s = kiln_nn_alloc(&c->out[0], KILN_I64, orank, odims);
  if (s) return s;
  const kiln_nn_prims *P = kiln_nn_prims_active();
  const float *xd = x->data;
  int64_t *yd = c->out[0].data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      const float *xc = xd + o * n * inner + i;
      int64_t best = 0;
      if (inner == 1) {
        float m = is_max ? P->max((size_t)n, xc) : P->min((size_t)n, xc);
        bool nan = m != m;
        if (last) {
          for (best = n - 1; best > 0; best--)
            if (nan ? xc[best] != xc[best] : xc[best] == m) break;
        } else {
          for (best = 0; best < n - 1; best++)
            if (nan ? xc[best] != xc[best] : xc[best] == m) break;
        }
      } else {
        float b = xc[0];
        for (int64_t j = 1; j < n; j++) {
          float v = xc[j * inner];
          bool vn = v != v, bn = b != b;
          int c3 = vn || bn ? (int)vn - (int)bn : is_max ? (v > b) - (v < b) : (v < b) - (v > b);
          if (c3 > 0 || (c3 == 0 && last)) best = j, b = v;
        }
      }
      yd[o * inner + i] = best;
    }
  return KILN_OK;
}

static kiln_status k_argmax(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_arg(c, true, declined);
}

static kiln_status k_argmin(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  return run_arg(c, false, declined);
}

const kiln_cpu_kernel_def kiln_cpu_kernels_nn[] = {
    {"MaxPool", NULL, k_maxpool, false},
    {"AveragePool", NULL, k_averagepool, false},
    {"GlobalAveragePool", NULL, k_globalavg, false},
    {"GlobalMaxPool", NULL, k_globalmax, false},
    {"Softmax", NULL, k_softmax, false},
    {"LogSoftmax", NULL, k_logsoftmax, false},
    {"LayerNormalization", NULL, k_layernorm, false},
    {"BatchNormalization", NULL, k_batchnorm, false},
    {"InstanceNormalization", NULL, k_instancenorm, false},
    {"ReduceSum", NULL, k_reducesum, false},
    {"ReduceMean", NULL, k_reducemean, false},
    {"ReduceMax", NULL, k_reducemax, false},
    {"ReduceMin", NULL, k_reducemin, false},
    {"ReduceSumSquare", NULL, k_reducesumsq, false},
    {"ReduceL2", NULL, k_reducel2, false},
    {"ArgMax", NULL, k_argmax, false},
    {"ArgMin", NULL, k_argmin, false},
    {"Concat", NULL, kiln_nn_concat, false},
    {"Tile", NULL, kiln_nn_tile, false},
    {"Gather", NULL, kiln_nn_gather, false},
    {"ScatterND", NULL, kiln_nn_scatternd, false},
    {"Transpose", NULL, kiln_nn_transpose, false},
    {NULL, NULL, NULL, false},
};
