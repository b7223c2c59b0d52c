/* ir/observe_quant: quantization parameters from observed ranges
 * (ir/observe.h) — fbgemm/dnnlowp's ChooseQuantizationParams for affine
 * uint8 and a symmetric int8 variant, and the histogram ranges that
 * minimise the L2 quantization error or the KL divergence. */
#include <math.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/observe.h"

void kiln_obs_choose_qparams(double min, double max, kiln_obs_qscheme scheme, int precision, kiln_obs_qparams *q) {
  if (precision < 2) precision = 2;
  if (precision > 16) precision = 16;
  memset(q, 0, sizeof *q);
  q->min = min;
  q->max = max;
  q->precision = precision;
  double lo = min < 0 ? min : 0, hi = max > 0 ? max : 0;
  if (scheme == KILN_OBS_SYMMETRIC_I8) {
    double qmax = (double)((1 << (precision - 1)) - 1);
    double amax = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
    double scale = amax / qmax;
    if (scale == 0 || isinf(1.0 / scale)) scale = 0.1;
    q->scale = scale;
    q->zero_point = 0;
    return;
  }
  double qmin = 0, qmax = (double)((1 << precision) - 1);
  double scale = (hi - lo) / (qmax - qmin);
  if (scale == 0 || isinf(1.0 / scale)) scale = 0.1;
  /* The zero point from the end whose error is smaller, nudged to an
   * integer in [qmin, qmax] so that 0 is exactly representable. */
  double zp_min = qmin - lo / scale, zp_max = qmax - hi / scale;
  double err_min = fabs(qmin) + fabs(lo / scale), err_max = fabs(qmax) + fabs(hi / scale);
  double zp = err_min < err_max ? zp_min : zp_max;
  int32_t nudged = zp < qmin ? (int32_t)qmin : zp > qmax ? (int32_t)qmax : (int32_t)nearbyint(zp);
  q->scale = scale;
  q->zero_point = nudged;
}

/* ∫ density·x² dx from b to e. */
static double l2_piece(double b, double e, double density) { return density * (e * e * e - b * b * b) / 3.0; }

/* L2 error of quantizing h to dst levels over bins [s, e] (values outside
 * clip to the end levels), as PyTorch's HistogramObserver computes it. */
static double l2_error(const kiln_obs_hist *h, int s, int e, int dst) {
  double bw = kiln_obs_hist_width(h);
  double dw = bw * (e - s + 1) / dst;
  if (dw <= 0) return 0;
  double norm = 0;
  for (int i = 0; i < h->nbins; i++) {
    if (!h->counts[i]) continue;
    double density = (double)h->counts[i] / bw;
    double b = (i - s) * bw, en = b + bw;
    double db = floor(b / dw), de = floor(en / dw);
    db = db < 0 ? 0 : db > dst - 1 ? dst - 1 : db;
    de = de < 0 ? 0 : de > dst - 1 ? dst - 1 : de;
    double cb = (db + 0.5) * dw, ce = (de + 0.5) * dw;
    norm += l2_piece(b - cb, dw / 2, density);
    norm += (de - db - 1) * l2_piece(-dw / 2, dw / 2, density);
    norm += l2_piece(-dw / 2, en - ce, density);
  }
  return norm;
}

/* KL(P || Q): P = bins [s, e] with the clipped mass added to the end bins,
 * Q = the bins of [s, e] merged into dst groups and spread back evenly over
 * the bins where P is not zero (TensorRT's calibration, as dnnlowp's KL
 * minimization). */
static double kl_error(const kiln_obs_hist *h, int s, int e, int dst, double *p, double *q) {
  int m = e - s + 1;
  double ptot = 0;
  for (int i = 0; i < m; i++) p[i] = (double)h->counts[s + i];
  for (int i = 0; i < s; i++) p[0] += (double)h->counts[i];
  for (int i = e + 1; i < h->nbins; i++) p[m - 1] += (double)h->counts[i];
  for (int i = 0; i < m; i++) ptot += p[i];
  if (ptot <= 0) return 0;
  int groups = dst < m ? dst : m;
  double qtot = 0;
  for (int g = 0; g < groups; g++) {
    int a = (int)((int64_t)g * m / groups), b = (int)((int64_t)(g + 1) * m / groups);
    double sum = 0;
    int nz = 0;
    for (int i = a; i < b; i++) {
      sum += (double)h->counts[s + i];
      nz += p[i] != 0;
    }
    for (int i = a; i < b; i++) q[i] = p[i] != 0 && nz ? sum / nz : 0;
  }
  for (int i = 0; i < m; i++) qtot += q[i];
  double kl = 0;
  for (int i = 0; i < m; i++) {
    if (p[i] == 0) continue;
    double pi = p[i] / ptot, qi = qtot > 0 ? q[i] / qtot : 0;
    if (qi < 1e-12) qi = 1e-12; /* smoothing: mass P has and Q lost */
    kl += pi * log(pi / qi);
  }
  return kl;
}

/* The shrinking search shared by L2 and KL: from [0, nbins-1], drop the end
 * bin with fewer counts (ties: the one farther from zero) until min_width
 * bins are left, evaluating every candidate; keeps the best. */
static bool search(const kiln_obs_hist *h, int precision, bool kl, double *lo, double *hi) {
  if (h->nbins <= 0 || h->total == 0 || !(h->lo <= h->hi)) return false;
  if (precision < 2) precision = 2;
  if (precision > 16) precision = 16;
  int dst = 1 << precision, nb = h->nbins;
  double bw = kiln_obs_hist_width(h);
  *lo = h->lo;
  *hi = h->hi;
  if (bw <= 0) return true;
  int min_width = kl ? (dst < nb ? dst : nb) : 1;
  double *p = NULL, *q = NULL;
  if (kl) {
    p = kiln_malloc((size_t)nb * sizeof *p);
    q = kiln_malloc((size_t)nb * sizeof *q);
    if (!p || !q) {
      kiln_free(p);
      kiln_free(q);
      return true; /* the full range */
    }
  }
  int s = 0, e = nb - 1, bs = 0, be = nb - 1;
  double best = kl ? kl_error(h, s, e, dst, p, q) : l2_error(h, s, e, dst);
  while (e - s + 1 > min_width) {
    uint64_t cl = h->counts[s], cr = h->counts[e];
    double el = fabs(h->lo + s * bw), er = fabs(h->lo + (e + 1) * bw);
    if (cl < cr || (cl == cr && el >= er)) s++;
    else e--;
    double err = kl ? kl_error(h, s, e, dst, p, q) : l2_error(h, s, e, dst);
    if (err < best) {
      best = err;
      bs = s;
      be = e;
    }
  }
  kiln_free(p);
  kiln_free(q);
  *lo = h->lo + bs * bw;
  *hi = be == nb - 1 ? h->hi : h->lo + (be + 1) * bw;
  return true;
}

bool kiln_obs_hist_l2_range(const kiln_obs_hist *h, int precision, double *lo, double *hi) {
  return search(h, precision, false, lo, hi);
}

bool kiln_obs_hist_kl_range(const kiln_obs_hist *h, int precision, double *lo, double *hi) {
  return search(h, precision, true, lo, hi);
}

bool kiln_obs_record_range(const kiln_obs_record *r, kiln_obs_qmethod m, double *out_lo, double *out_hi) {
  double lo = r->total.min, hi = r->total.max;
  bool have_hist = r->hist.nbins > 0 && r->hist.total > 0;
  if (m != KILN_OBS_MINMAX && have_hist) {
    if (m == KILN_OBS_L2) kiln_obs_hist_l2_range(&r->hist, 8, &lo, &hi);
    else kiln_obs_hist_kl_range(&r->hist, 8, &lo, &hi);
  } else if ((!isfinite(lo) || !isfinite(hi)) && have_hist) {
    lo = r->hist.lo; /* infinities seen: the finite range */
    hi = r->hist.hi;
  }
  *out_lo = lo;
  *out_hi = hi;
  return isfinite(lo) && isfinite(hi) && lo <= hi;
}

kiln_status kiln_obs_record_qparams(const kiln_obs_record *r, kiln_obs_qmethod m, kiln_obs_qscheme s,
                                    kiln_obs_qparams *q) {
  double lo, hi;
  if (!kiln_obs_record_range(r, m, &lo, &hi))
    return kiln_fail(KILN_E_INVALID_VALUE, "tensor '%s' has no finite range to quantize", r->name);
  kiln_obs_choose_qparams(lo, hi, s, 8, q);
  return KILN_OK;
}
