/* ir/observe_fold: reductions of tensors into observer partials and
 * histograms (ir/observe.h) — the vectorisable float32 loop, the typed and
 * strided walks, and histogram widening with exact rebinning. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/observe.h"

void kiln_obs_partial_init(kiln_obs_partial *p) {
  memset(p, 0, sizeof *p);
  p->min = INFINITY;
  p->max = -INFINITY;
}

void kiln_obs_partial_merge(kiln_obs_partial *into, const kiln_obs_partial *p) {
  if (p->min < into->min) into->min = p->min;
  if (p->max > into->max) into->max = p->max;
  into->nan += p->nan;
  into->pos_inf += p->pos_inf;
  into->neg_inf += p->neg_inf;
  into->count += p->count;
}

static inline void fold_one(kiln_obs_partial *p, double v) {
  if (v != v) {
    p->nan++;
    return;
  }
  if (v < p->min) p->min = v;
  if (v > p->max) p->max = v;
  if (isinf(v)) {
    if (v > 0) p->pos_inf++;
    else p->neg_inf++;
  }
}

#define LANES 16

/* min/max over 16 independent lanes (minps/maxps semantics: a NaN never
 * replaces the accumulator) plus an "any non-finite" flag; only when the
 * flag is set does a second, scalar pass count NaN and infinities. */
void kiln_obs_partial_fold_f32(kiln_obs_partial *p, const float *x, int64_t n) {
  float mn[LANES], mx[LANES];
  int bad[LANES];
  for (int k = 0; k < LANES; k++) {
    mn[k] = INFINITY;
    mx[k] = -INFINITY;
    bad[k] = 0;
  }
  int64_t i = 0;
  for (; i + LANES <= n; i += LANES)
    for (int k = 0; k < LANES; k++) {
      float v = x[i + k];
      mn[k] = v < mn[k] ? v : mn[k];
      mx[k] = v > mx[k] ? v : mx[k];
      bad[k] |= !(fabsf(v) <= FLT_MAX);
    }
  int any = 0;
  float lo = INFINITY, hi = -INFINITY;
  for (int k = 0; k < LANES; k++) {
    lo = mn[k] < lo ? mn[k] : lo;
    hi = mx[k] > hi ? mx[k] : hi;
    any |= bad[k];
  }
  for (; i < n; i++) {
    float v = x[i];
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    any |= !(fabsf(v) <= FLT_MAX);
  }
  if ((double)lo < p->min) p->min = lo;
  if ((double)hi > p->max) p->max = hi;
  if (any)
    for (int64_t j = 0; j < n; j++) {
      float v = x[j];
      if (v != v) p->nan++;
      else if (v == INFINITY) p->pos_inf++;
      else if (v == -INFINITY) p->neg_inf++;
    }
  p->count += (uint64_t)(n > 0 ? n : 0);
}

/* Element j of a run starting at b with an element stride s, as double. */
static double load(kiln_dtype dt, const char *b, int64_t j) {
  switch (dt) {
  case KILN_F32: return ((const float *)b)[j];
  case KILN_F64: return ((const double *)b)[j];
  case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)b)[j]);
  case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)b)[j]);
  case KILN_I8: return ((const int8_t *)b)[j];
  case KILN_U8: return ((const uint8_t *)b)[j];
  case KILN_I16: return ((const int16_t *)b)[j];
  case KILN_U16: return ((const uint16_t *)b)[j];
  case KILN_I32: return ((const int32_t *)b)[j];
  case KILN_U32: return ((const uint32_t *)b)[j];
  case KILN_I64: return (double)((const int64_t *)b)[j];
  case KILN_U64: return (double)((const uint64_t *)b)[j];
  default: return 0;
  }
}

static bool observable(kiln_dtype dt) { return kiln_dtype_is_float(dt) || kiln_dtype_is_int(dt); }

/* Integer runs: exact min/max in int64 (uint64 in uint64), then double. */
static void fold_int_run(kiln_obs_partial *p, kiln_dtype dt, const char *b, int64_t n, int64_t s) {
  if (dt == KILN_U64) {
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int64_t j = 0; j < n; j++) {
      uint64_t v = ((const uint64_t *)b)[j * s];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    if ((double)lo < p->min) p->min = (double)lo;
    if ((double)hi > p->max) p->max = (double)hi;
    return;
  }
  int64_t lo = INT64_MAX, hi = INT64_MIN;
#define RUN(T)                                 \
  for (int64_t j = 0; j < n; j++) {            \
    int64_t v = ((const T *)b)[j * s];         \
    lo = v < lo ? v : lo;                      \
    hi = v > hi ? v : hi;                      \
  }
  switch (dt) {
  case KILN_I8: RUN(int8_t) break;
  case KILN_U8: RUN(uint8_t) break;
  case KILN_I16: RUN(int16_t) break;
  case KILN_U16: RUN(uint16_t) break;
  case KILN_I32: RUN(int32_t) break;
  case KILN_U32: RUN(uint32_t) break;
  default: RUN(int64_t) break;
  }
#undef RUN
  if ((double)lo < p->min) p->min = (double)lo;
  if ((double)hi > p->max) p->max = (double)hi;
}

static void fold_run(kiln_obs_partial *p, kiln_dtype dt, const char *b, int64_t n, int64_t s) {
  if (n <= 0) return;
  if (dt == KILN_F32 && s == 1) {
    kiln_obs_partial_fold_f32(p, (const float *)(const void *)b, n);
    return;
  }
  if (kiln_dtype_is_int(dt)) {
    fold_int_run(p, dt, b, n, s);
    p->count += (uint64_t)n;
    return;
  }
  for (int64_t j = 0; j < n; j++) fold_one(p, load(dt, b, j * s));
  p->count += (uint64_t)n;
}

/* Calls fn on each innermost run of t: (base, count, element stride). */
typedef void (*run_fn)(void *ctx, kiln_dtype dt, const char *base, int64_t n, int64_t s);

static void walk(const kiln_tensor *t, run_fn fn, void *ctx) {
  size_t es = kiln_dtype_size(t->dtype);
  const char *data = t->data;
  if (t->numel <= 0 || !data) return;
  if (!t->strided) {
    fn(ctx, t->dtype, data, t->numel, 1);
    return;
  }
  if (t->stack || t->rank == 0) { /* element by element through the stack */
    for (int64_t i = 0; i < t->numel; i++) {
      double v = kiln_get_f(t, i);
      fn(ctx, KILN_F64, (const char *)&v, 1, 1);
    }
    return;
  }
  int r = t->rank;
  int64_t inner = t->dims[r - 1], is = t->strides[r - 1];
  int64_t outer = t->numel / inner, idx[KILN_MAX_RANK] = {0}, at = t->offset;
  for (int64_t o = 0; o < outer; o++) {
    fn(ctx, t->dtype, data + at * (int64_t)es, inner, is);
    for (int d = r - 2; d >= 0; d--) {
      at += t->strides[d];
      if (++idx[d] < t->dims[d]) break;
      at -= idx[d] * t->strides[d];
      idx[d] = 0;
    }
  }
}

static void fold_cb(void *ctx, kiln_dtype dt, const char *b, int64_t n, int64_t s) { fold_run(ctx, dt, b, n, s); }

bool kiln_obs_partial_fold(kiln_obs_partial *p, const kiln_tensor *t) {
  if (!observable(t->dtype)) return false;
  walk(t, fold_cb, p);
  return true;
}

/* ---- histograms ---- */

kiln_status kiln_obs_hist_init(kiln_obs_hist *h, int nbins) {
  memset(h, 0, sizeof *h);
  if (nbins <= 0) return KILN_OK;
  if (nbins > (1 << 24)) return kiln_fail(KILN_E_INVALID_VALUE, "histogram of %d bins: at most %d", nbins, 1 << 24);
  h->counts = kiln_calloc((size_t)nbins, sizeof *h->counts);
  if (!h->counts) return kiln_fail(KILN_E_NOMEM, "out of memory for a histogram of %d bins", nbins);
  h->nbins = nbins;
  h->lo = INFINITY;
  h->hi = -INFINITY;
  return KILN_OK;
}

void kiln_obs_hist_free(kiln_obs_hist *h) {
  kiln_free(h->counts);
  memset(h, 0, sizeof *h);
}

double kiln_obs_hist_width(const kiln_obs_hist *h) {
  return h->nbins > 0 && h->hi > h->lo ? (h->hi - h->lo) / h->nbins : 0;
}

static int bin_of(const kiln_obs_hist *h, double v) {
  double w = kiln_obs_hist_width(h);
  if (w <= 0) return 0;
  double b = floor((v - h->lo) / w);
  if (!(b >= 0)) return 0;
  return b >= h->nbins ? h->nbins - 1 : (int)b;
}

void kiln_obs_hist_widen(kiln_obs_hist *h, double mn, double mx) {
  if (h->nbins <= 0 || !(mn <= mx)) return;
  if (h->lo > h->hi) { /* empty: take the range as it is */
    h->lo = mn;
    h->hi = mx;
    return;
  }
  if (mn >= h->lo && mx <= h->hi) return;
  double nlo = mn < h->lo ? mn : h->lo, nhi = mx > h->hi ? mx : h->hi;
  int nb = h->nbins;
  double w = kiln_obs_hist_width(h);
  double a_real = w > 0 ? (h->lo - nlo) / w : 0, span_real = w > 0 ? (nhi - nlo) / (w * nb) : 0;
  if (w <= 0 || a_real > 1e12 || span_real > 1e12) {
    /* A point mass (or a range so much narrower that the grid cannot be
     * kept): the old counts go to the new bin holding the old centre. */
    double centre = 0.5 * (h->lo + h->hi);
    uint64_t total = 0;
    for (int i = 0; i < nb; i++) total += h->counts[i];
    memset(h->counts, 0, (size_t)nb * sizeof *h->counts);
    h->lo = nlo;
    h->hi = nhi;
    h->counts[bin_of(h, centre)] = total;
    return;
  }
  /* New grid: width f·w, starting a old bins below the old lo; old bin i
   * goes to new bin (i + a) / f. */
  int64_t a = (int64_t)ceil(a_real);
  if (a < 0) a = 0;
  int64_t f = (int64_t)ceil((nhi - (h->lo - (double)a * w)) / (w * nb));
  int64_t fmin = (a + nb + nb - 1) / nb;
  if (f < fmin) f = fmin;
  if (f < 1) f = 1;
  double lo2 = h->lo - (double)a * w;
  while (lo2 + (double)f * w * nb < nhi) f++;
  uint64_t *old = h->counts;
  uint64_t *nc = kiln_calloc((size_t)nb, sizeof *nc);
  if (!nc) { /* keep the old grid: values beyond it land in the end bins */
    return;
  }
  for (int64_t i = 0; i < nb; i++) nc[(i + a) / f] += old[i];
  kiln_free(old);
  h->counts = nc;
  h->lo = lo2;
  h->hi = lo2 + (double)f * w * nb;
}

typedef struct hist_ctx {
  kiln_obs_hist *h;
  double mn, mx;
} hist_ctx;

static void range_cb(void *ctx, kiln_dtype dt, const char *b, int64_t n, int64_t s) {
  hist_ctx *c = ctx;
  for (int64_t j = 0; j < n; j++) {
    double v = load(dt, b, j * s);
    if (!isfinite(v)) continue;
    if (v < c->mn) c->mn = v;
    if (v > c->mx) c->mx = v;
  }
}

static void bin_cb(void *ctx, kiln_dtype dt, const char *b, int64_t n, int64_t s) {
  hist_ctx *c = ctx;
  kiln_obs_hist *h = c->h;
  double w = kiln_obs_hist_width(h), lo = h->lo;
  int nb = h->nbins;
  for (int64_t j = 0; j < n; j++) {
    double v = load(dt, b, j * s);
    if (!isfinite(v)) continue;
    int k = 0;
    if (w > 0) {
      double q = floor((v - lo) / w);
      k = q < 0 ? 0 : q >= nb ? nb - 1 : (int)q;
    }
    h->counts[k]++;
    h->total++;
  }
}

void kiln_obs_hist_add(kiln_obs_hist *h, const kiln_tensor *t) {
  if (h->nbins <= 0 || !observable(t->dtype)) return;
  hist_ctx c = {h, INFINITY, -INFINITY};
  walk(t, range_cb, &c);
  if (!(c.mn <= c.mx)) return; /* nothing finite */
  kiln_obs_hist_widen(h, c.mn, c.mx);
  walk(t, bin_cb, &c);
}
