/* reference/ops_signal: scalar kernels (see reference/ops.h) of the signal
 * operators of opset 17: DFT, STFT and MelWeightMatrix.
 *
 * Complex values are pairs (real, imaginary) in a trailing dimension of 2; a
 * real input has a trailing dimension of 1. Every transform is computed in
 * double from tables of cos/sin(2*pi*j/N) at integer j < N (exact integer
 * reduction, so no angle grows with k*n) and rounded once on the store: the
 * plain sum for L <= 16, an iterative radix-2 FFT for powers of two and
 * Bluestein's chirp-z (radix-2 FFTs of a power of two >= 2L - 1) for other
 * lengths, O(L log L) per row (see dft_plan). Measured against a long-double
 * O(L^2) sum on random rows of |x| <= 0.5 (throwaway harness): max |error|
 * 1.3e-15 (L 17), 2e-15 (64), 6e-15 (100), 3e-14 (1000), 5e-14 (4096),
 * 1.1e-13 (4099, 16384), 1.4e-13 (10007), within 1.2x of the O(L^2) double
 * sum this replaced and up to 10x below it for the long ones. A node of more
 * than 2^36 complex multiply-adds (rows x the row's cost) is refused
 * (KILN_DFT_MAX_WORK: a minute or more of work, which constant folding would
 * run at init). The cpu and opencl backends run these kernels on the host.
 *
 * Definitions (ONNX's operator text, opset 17; where it is silent, as the
 * ONNX reference evaluator and numpy.fft):
 *   - DFT: forward y[k] = sum_n x[n] e^(-2 pi i k n / L), inverse
 *     x[n] = 1/L sum_k y[k] e^(2 pi i k n / L), over the axis attribute
 *     (default 1; [-r, -2] or [0, r-2]). The signal is cut to, or padded with
 *     zeros up to, dft_length L (default: the axis dim). onesided=1 forward
 *     (RFFT) takes a real input and returns bins 0 .. L/2. onesided=1 inverse
 *     (IRFFT) takes a complex one-sided spectrum, uses its first L/2+1 bins
 *     (zero beyond), treats it as Hermitian (the imaginary parts of bin 0 and,
 *     for even L, of bin L/2 do not contribute) and returns L real samples
 *     [..., 1]; its default L is 2*(dim-1) (the operator text of onnx 1.23
 *     and its reference evaluator). The text supports only a real input to
 *     RFFT and only a complex one to IRFFT; like the reference evaluator,
 *     kiln also takes the other kind: RFFT of a complex input returns bins
 *     0 .. L/2 of its full transform, IRFFT of a real input reads it as a
 *     spectrum with zero imaginary parts. DFT-20 (axis as input 2) is not
 *     implemented: the registry refuses every node above opset 17.
 *   - STFT: signal [batch][length][1|2], frames = (length - frame_length) /
 *     frame_step + 1 (at least 1); frame f is signal[f*frame_step ..] times
 *     the window (all ones when omitted), transformed with L = frame_length
 *     (default: the window's length, else the signal length). onesided
 *     (default 1) keeps bins 0 .. L/2 and needs a real signal. A window and a
 *     frame_length that disagree are an error.
 *   - MelWeightMatrix: the ONNX definition step by step: mel(f) = 2595
 *     log10(1 + f/700) evaluated as 2595 log1p(f/700) / ln 10 and its inverse
 *     700 expm1(m ln 10 / 2595), num_mel_bins + 2 points spaced by
 *     (mel(upper) - mel(lower)) / (num_mel_bins + 2) from mel(lower), each
 *     mapped to bin floor((dft_length + 1) * f / sample_rate) (floor division
 *     as Python's float //); band i rises from point i to point i+1 and falls
 *     to point i+2 (a band whose rise is empty has 1 at its centre). A band
 *     that would write a bin outside [0, dft_length/2] (a negative lower
 *     edge, an upper edge too far above sample_rate / 2: the last point
 *     sits one step below the upper edge) is KILN_E_INVALID_VALUE.
 *     Integer output types truncate toward zero. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

#define T_FLT (KILN_T(KILN_F16) | KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_BF16))
#define T_IDX (KILN_T(KILN_I32) | KILN_T(KILN_I64))

/* ------------------------------------------------------------------------ */
/* Checks shared by the three ops                                            */

/* The accepted types as this file's messages list them. */
static const char *accepts(uint32_t mask) {
  return mask == T_IDX ? "int32, int64" : "float16, float, double, bfloat16";
}

static kiln_status chk_decl(const kiln_graph *g, const kiln_node *n, int i, const char *what, uint32_t mask) {
  return kiln_opc_chk_decl(g, n, i, what, mask, accepts(mask));
}

/* Declared rank and last dim of input i (-1 when unknown). */
static void decl_shape(const kiln_graph *g, const kiln_node *n, int i, int *rank, int64_t *last) {
  *rank = -1, *last = -1;
  if (!g || i >= n->n_in || n->in[i] < 0) return;
  const kiln_value *v = &g->values[n->in[i]];
  if (v->init) {
    *rank = v->init->rank;
    if (*rank > 0) *last = v->init->dims[*rank - 1];
  } else if (v->type.kind == KILN_TYPE_TENSOR && v->type.rank >= 0) {
    *rank = v->type.rank;
    if (*rank > 0) *last = v->type.dims[*rank - 1].value;
  }
}

/* The op exists from opset `since`; int attributes named in ints are ints. */
static kiln_status chk_base(const kiln_node *n, int since, const char *const *ints) {
  kiln_status s = kiln_opc_opset(n, since, 0, KILN_E_MODEL);
  if (s) return s;
  for (int k = 0; ints && ints[k]; k++) {
    const kiln_attr *a = kiln_node_attr(n, ints[k]);
    if (a && a->type != KILN_ATTR_INT)
      return kiln_fail(KILN_E_MODEL, "attribute '%s' must be an int", ints[k]);
  }
  return KILN_OK;
}

/* Input i present and of a type in mask. */
static kiln_status need(const kiln_op_call *c, int i, const char *what, uint32_t mask) {
  return kiln_opc_need(c, i, what, mask, accepts(mask));
}

/* ------------------------------------------------------------------------ */
/* The transform: twiddles and one row                                       */

/* A plan transforms one row of L values (re, im) into its first K bins
 * (yr, yi) with e^(sign 2 pi i k n / L):
 *   - L <= KILN_DFT_DIRECT_MAX: the plain sum, O(L) per bin;
 *   - L a power of two: an iterative radix-2 FFT (bit reversal, then
 *     butterflies), O(L log L);
 *   - other L: Bluestein's chirp-z, kn = (k^2 + n^2 - (k-n)^2) / 2 turns the
 *     transform into a convolution with the chirp e^(sign pi i n^2 / L),
 *     done by power-of-two FFTs of length M >= 2L - 1, O(M log M).
 * Every table holds cos/sin of 2 pi j / N for integer j < N (n^2 reduced
 * mod 2L exactly), so no angle grows with the length. */
#define KILN_DFT_DIRECT_MAX 16

typedef struct dft_plan {
  int64_t L;      /* transform length */
  int sign;       /* -1 forward, +1 inverse (unscaled) */
  int64_t M;      /* FFT length: L (direct, power of two) or Bluestein's */
  double *cs;     /* cos(2 pi j / M), j < M */
  double *sn;     /* sin(2 pi j / M) */
  double *re;     /* one row of input, L values */
  double *im;
  double *yr;     /* its bins: L values (M for Bluestein, the work row) */
  double *yi;
  double *chr;    /* Bluestein: the chirp cos/sin(pi (n^2 mod 2L) / L), n < L */
  double *chi;
  double *br;     /* Bluestein: FFT of the conjugate chirp, M values */
  double *bi;
} dft_plan;

static bool is_pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

/* The FFT length of a transform of length L. */
static int64_t fft_len(int64_t L) {
  if (L <= KILN_DFT_DIRECT_MAX || is_pow2(L)) return L;
  int64_t M = 1;
  while (M < 2 * L - 1) M <<= 1;
  return M;
}

/* Complex multiply-adds (about) of K bins of one row of length L. */
static double row_cost(int64_t L, int64_t K) {
  int64_t M = fft_len(L);
  if (L <= KILN_DFT_DIRECT_MAX) return (double)K * (double)L;
  double lg = log2((double)M);
  return (M == L ? 1 : 2) * (double)M * lg; /* Bluestein: two FFTs per row */
}

static void plan_free(dft_plan *p) {
  double **a[] = {&p->cs, &p->sn, &p->re, &p->im, &p->yr, &p->yi, &p->chr, &p->chi, &p->br, &p->bi};
  for (size_t k = 0; k < sizeof a / sizeof *a; k++) kiln_free(*a[k]), *a[k] = NULL;
}

/* cos/sin(2 pi j / N), j < N; exact at the multiples of pi/2. */
static void twiddles(int64_t N, double *cs, double *sn) {
  for (int64_t j = 0; j < N; j++) {
    double t = 2 * KILN_OPC_PI * (double)j / (double)N;
    cs[j] = cos(t), sn[j] = sin(t);
  }
  if (N % 4 == 0) cs[N / 4] = 0, sn[N / 4] = 1, cs[3 * N / 4] = 0, sn[3 * N / 4] = -1;
  if (N % 2 == 0) cs[N / 2] = -1, sn[N / 2] = 0;
}

/* In-place radix-2 FFT of M = p->M values with e^(sign 2 pi i k n / M). */
static void fft2(const dft_plan *p, double *re, double *im, int sign) {
  int64_t M = p->M;
  for (int64_t i = 1, j = 0; i < M; i++) {
    int64_t bit = M >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) {
      double t = re[i];
      re[i] = re[j], re[j] = t;
      t = im[i], im[i] = im[j], im[j] = t;
    }
  }
  for (int64_t len = 2; len <= M; len <<= 1) {
    int64_t half = len / 2, step = M / len;
    for (int64_t i = 0; i < M; i += len)
      for (int64_t j = 0; j < half; j++) {
        double wr = p->cs[j * step], wi = sign * p->sn[j * step];
        double *ar = re + i + j, *ai = im + i + j, *br = ar + half, *bi = ai + half;
        double vr = *br * wr - *bi * wi, vi = *br * wi + *bi * wr;
        *br = *ar - vr, *bi = *ai - vi;
        *ar += vr, *ai += vi;
      }
  }
}

static kiln_status plan_init(dft_plan *p, int64_t L, int sign) {
  memset(p, 0, sizeof *p);
  if (L < 1 || L > ((int64_t)1 << 40))
    return kiln_fail(KILN_E_INVALID_VALUE, "DFT length %lld is out of range (1 to 2^40)", (long long)L);
  int64_t M = fft_len(L);
  bool blue = M != L;
  size_t sl = (size_t)L * sizeof(double), sm = (size_t)M * sizeof(double);
  p->L = L, p->M = M, p->sign = sign;
  p->cs = kiln_malloc(sm), p->sn = kiln_malloc(sm), p->re = kiln_malloc(sl), p->im = kiln_malloc(sl);
  p->yr = kiln_malloc(sm), p->yi = kiln_malloc(sm);
  if (blue)
    p->chr = kiln_malloc(sl), p->chi = kiln_malloc(sl), p->br = kiln_calloc((size_t)M, sizeof(double)),
    p->bi = kiln_calloc((size_t)M, sizeof(double));
  if (!p->cs || !p->sn || !p->re || !p->im || !p->yr || !p->yi ||
      (blue && (!p->chr || !p->chi || !p->br || !p->bi))) {
    plan_free(p);
    return kiln_fail(KILN_E_NOMEM, "out of memory for a DFT of length %lld", (long long)L);
  }
  twiddles(M, p->cs, p->sn);
  if (!blue) return KILN_OK;
  /* the chirp at n^2 mod 2L (updated by (n+1)^2 = n^2 + 2n + 1, exact), and
     b = its conjugate at n and M - n, transformed once */
  int64_t q = 0;
  for (int64_t n = 0; n < L; n++) {
    double t = KILN_OPC_PI * (double)q / (double)L;
    p->chr[n] = cos(t), p->chi[n] = sign * sin(t);
    p->br[n] = p->chr[n], p->bi[n] = -p->chi[n];
    if (n) p->br[M - n] = p->chr[n], p->bi[M - n] = -p->chi[n];
    q += 2 * n + 1;
    while (q >= 2 * L) q -= 2 * L;
  }
  fft2(p, p->br, p->bi, -1);
  return KILN_OK;
}

/* The plan's row (re, im) -> its first K bins in (yr, yi). */
static void plan_run(dft_plan *p, int64_t K) {
  int64_t L = p->L, M = p->M;
  int sign = p->sign;
  if (L <= KILN_DFT_DIRECT_MAX) {
    for (int64_t k = 0; k < K; k++) {
      double sr = 0, si = 0;
      int64_t j = 0;
      for (int64_t n = 0; n < L; n++) {
        double c = p->cs[j], s = sign * p->sn[j];
        sr += p->re[n] * c - p->im[n] * s;
        si += p->re[n] * s + p->im[n] * c;
        j += k;
        if (j >= L) j -= L;
      }
      p->yr[k] = sr, p->yi[k] = si;
    }
    return;
  }
  if (M == L) {
    memcpy(p->yr, p->re, (size_t)L * sizeof(double));
    memcpy(p->yi, p->im, (size_t)L * sizeof(double));
    fft2(p, p->yr, p->yi, sign);
    return;
  }
  /* Bluestein: a = x * chirp (zero-padded), conv(a, b) by FFT, times chirp */
  for (int64_t n = 0; n < M; n++) {
    if (n >= L) {
      p->yr[n] = p->yi[n] = 0;
      continue;
    }
    double xr = p->re[n], xi = p->im[n], cr = p->chr[n], ci = p->chi[n];
    p->yr[n] = xr * cr - xi * ci, p->yi[n] = xr * ci + xi * cr;
  }
  fft2(p, p->yr, p->yi, -1);
  for (int64_t n = 0; n < M; n++) {
    double ar = p->yr[n], ai = p->yi[n];
    p->yr[n] = ar * p->br[n] - ai * p->bi[n], p->yi[n] = ar * p->bi[n] + ai * p->br[n];
  }
  fft2(p, p->yr, p->yi, 1);
  for (int64_t k = 0; k < K; k++) {
    double ar = p->yr[k] / (double)M, ai = p->yi[k] / (double)M, cr = p->chr[k], ci = p->chi[k];
    p->yr[k] = ar * cr - ai * ci, p->yi[k] = ar * ci + ai * cr;
  }
}

/* Above KILN_DFT_MAX_WORK (2^36) complex multiply-adds for the whole node
 * (rows x row_cost: a minute or more on one core) the transform is refused
 * rather than left running (constant folding would run it at init). */
#define KILN_DFT_MAX_WORK ((double)((int64_t)1 << 36))

static kiln_status chk_work(int64_t rows, int64_t K, int64_t L) {
  double w = (double)rows * row_cost(L, K);
  if (w > KILN_DFT_MAX_WORK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE,
                     "a transform of length %lld over %lld rows (%lld bins each) needs about %.3g multiply-adds, "
                     "beyond kiln's cap of 2^36",
                     (long long)L, (long long)rows, (long long)K, w);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* DFT                                                                       */

static const char *const dft_ints[] = {"inverse", "onesided", "axis", NULL};

static kiln_status chk_dft(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 17, dft_ints);
  if (!s) s = kiln_opc_flag(n, "inverse", 0);
  if (!s) s = kiln_opc_flag(n, "onesided", 0);
  if (!s) s = chk_decl(g, n, 0, "input", T_FLT);
  if (!s) s = chk_decl(g, n, 1, "dft_length", T_IDX);
  if (s) return s;
  int r;
  int64_t last;
  decl_shape(g, n, 0, &r, &last);
  if (r < 0) return KILN_OK;
  if (r < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 has rank %d; [..., signal, 1 or 2] (rank 2 or more) expected", r);
  int64_t axis = kiln_attr_int(n, "axis", 1);
  if (axis < -r || axis > r - 2 || axis == -1)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                     "attribute 'axis' is %lld; for an input of rank %d it must be in [%d, -2] or [0, %d] (the last "
                     "dim holds the real and imaginary parts)",
                     (long long)axis, r, -r, r - 2);
  if (last > 2 || last == 0)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 has a last dim of %lld; 1 (real) or 2 (complex) expected",
                     (long long)last);
  return KILN_OK;
}

static kiln_status run_dft(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_dft(c->graph, n);
  if (!s) s = need(c, 0, "input", T_FLT);
  if (!s && kiln_opc_opt_in(c, 1)) s = need(c, 1, "dft_length", T_IDX);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int r = x->rank;
  char b[160];
  if (r < 2 || (x->dims[r - 1] != 1 && x->dims[r - 1] != 2))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 has shape %s; [..., signal, 1 or 2] expected",
                     kiln_shape_str(r, x->dims, b, sizeof b));
  int64_t axis = kiln_attr_int(n, "axis", 1);
  if (axis < -r || axis > r - 2 || axis == -1)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'axis' is %lld; for an input of rank %d it must be in [%d, -2] or [0, %d]",
                     (long long)axis, r, -r, r - 2);
  int a = (int)(axis < 0 ? axis + r : axis);
  bool inv = kiln_attr_int(n, "inverse", 0), one = kiln_attr_int(n, "onesided", 0);
  bool cplx = x->dims[r - 1] == 2;
  int64_t N = x->dims[a], L = one && inv ? 2 * (N - 1) : N;
  if (kiln_opc_opt_in(c, 1)) {
    if ((s = kiln_opc_scalar_i(c->in[1], 1, "dft_length", &L))) return s;
    if (L < 1) return kiln_fail(KILN_E_INVALID_VALUE, "input 1 (dft_length) is %lld; it must be positive", (long long)L);
  } else if (L < 1) {
    return kiln_fail(KILN_E_INVALID_VALUE,
                     "the default dft_length of a one-sided inverse DFT, 2 * (%lld - 1), is not positive", (long long)N);
  }
  /* K output bins along the axis; `used` input samples along it */
  int64_t K = one && !inv ? L / 2 + 1 : L;
  int64_t used = one && inv ? L / 2 + 1 : L;
  if (used > N) used = N;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; d++) outer *= x->dims[d];
  for (int d = a + 1; d < r - 1; d++) inner *= x->dims[d];
  int64_t yd[KILN_MAX_RANK];
  memcpy(yd, x->dims, sizeof(int64_t) * (size_t)r);
  yd[a] = K;
  yd[r - 1] = one && inv ? 1 : 2;
  if ((s = chk_work(outer * inner, K, L))) return s;
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, x->dtype, r, yd))) return s;
  dft_plan p;
  if ((s = plan_init(&p, L, inv ? 1 : -1))) return s;
  int64_t C = x->dims[r - 1], YC = yd[r - 1];
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < inner; i++) {
      for (int64_t m = 0; m < L; m++) {
        p.re[m] = p.im[m] = 0;
        if (m >= used) continue;
        int64_t at = ((o * N + m) * inner + i) * C;
        p.re[m] = kiln_get_f(x, at);
        if (cplx) p.im[m] = kiln_get_f(x, at + 1);
      }
      if (one && inv) {
        /* the Hermitian extension of bins 0 .. L/2 (the rest mirrored) */
        p.im[0] = 0;
        if (L % 2 == 0 && L / 2 < used) p.im[L / 2] = 0;
        for (int64_t m = 1; m < L - m; m++) p.re[L - m] = p.re[m], p.im[L - m] = -p.im[m];
      }
      plan_run(&p, K);
      for (int64_t k = 0; k < K; k++) {
        double yr = p.yr[k], yi = p.yi[k];
        if (inv) yr /= (double)L, yi /= (double)L;
        int64_t at = ((o * K + k) * inner + i) * YC;
        kiln_set_f(y, at, yr);
        if (YC == 2) kiln_set_f(y, at + 1, yi);
      }
    }
  plan_free(&p);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* STFT                                                                      */

static const char *const stft_ints[] = {"onesided", NULL};

static kiln_status chk_stft(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 17, stft_ints);
  if (!s) s = kiln_opc_flag(n, "onesided", 1);
  if (!s) s = chk_decl(g, n, 0, "signal", T_FLT);
  if (!s) s = chk_decl(g, n, 1, "frame_step", T_IDX);
  if (!s) s = chk_decl(g, n, 2, "window", T_FLT);
  if (!s) s = chk_decl(g, n, 3, "frame_length", T_IDX);
  if (!s) s = kiln_opc_chk_decl_same(g, n, 2, 0, NULL);
  if (!s) s = kiln_opc_chk_decl_same(g, n, 3, 1, NULL);
  if (s) return s;
  int r;
  int64_t last;
  decl_shape(g, n, 0, &r, &last);
  if (r >= 0 && r != 3)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (signal) has rank %d; [batch, length, 1 or 2] expected", r);
  if (last > 2 || last == 0)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (signal) has a last dim of %lld; 1 (real) or 2 (complex) expected",
                     (long long)last);
  if (last == 2 && kiln_attr_int(n, "onesided", 1))
    return kiln_fail(KILN_E_MISMATCH_SHAPE,
                     "onesided=1 (the default) needs a real signal ([batch, length, 1]); input 0 is complex: set "
                     "onesided=0");
  decl_shape(g, n, 2, &r, &last);
  if (r >= 0 && r != 1)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (window) has rank %d; a 1-D window is expected", r);
  return KILN_OK;
}

static kiln_status run_stft(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_stft(c->graph, n);
  if (!s) s = need(c, 0, "signal", T_FLT);
  if (!s) s = need(c, 1, "frame_step", T_IDX);
  if (!s && kiln_opc_opt_in(c, 2) && c->in[2]->dtype != c->in[0]->dtype)
    s = kiln_fail(KILN_E_MISMATCH_DTYPE, "input 2 (window) has data type %s, the signal %s; they must match",
                  kiln_dtype_name(c->in[2]->dtype), kiln_dtype_name(c->in[0]->dtype));
  if (!s && kiln_opc_opt_in(c, 3)) s = need(c, 3, "frame_length", T_IDX);
  if (s) return s;
  const kiln_tensor *x = c->in[0], *w = kiln_opc_opt_in(c, 2);
  char b[160];
  if (x->rank != 3 || (x->dims[2] != 1 && x->dims[2] != 2))
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (signal) has shape %s; [batch, length, 1 or 2] expected",
                     kiln_shape_str(x->rank, x->dims, b, sizeof b));
  bool one = kiln_attr_int(n, "onesided", 1), cplx = x->dims[2] == 2;
  if (one && cplx)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "onesided=1 needs a real signal ([batch, length, 1]); set onesided=0");
  int64_t B = x->dims[0], S = x->dims[1], step, F = S;
  if ((s = kiln_opc_scalar_i(c->in[1], 1, "frame_step", &step))) return s;
  if (step < 1) return kiln_fail(KILN_E_INVALID_VALUE, "input 1 (frame_step) is %lld; it must be positive", (long long)step);
  if (w) {
    if (w->rank != 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (window) has shape %s; a 1-D window is expected",
                       kiln_shape_str(w->rank, w->dims, b, sizeof b));
    F = w->dims[0];
  }
  if (kiln_opc_opt_in(c, 3)) {
    int64_t fl;
    if ((s = kiln_opc_scalar_i(c->in[3], 3, "frame_length", &fl))) return s;
    if (w && fl != F)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 2 (window) has %lld values, frame_length is %lld; they must agree",
                       (long long)F, (long long)fl);
    F = fl;
  }
  if (F < 1 || F > S)
    return kiln_fail(KILN_E_INVALID_VALUE, "frame length %lld is outside [1, %lld] (the signal's length)", (long long)F,
                     (long long)S);
  int64_t frames = (S - F) / step + 1, K = one ? F / 2 + 1 : F;
  if ((s = chk_work(B * frames, K, F))) return s;
  int64_t yd[4] = {B, frames, K, 2};
  kiln_tensor *y = &c->out[0];
  if ((s = kiln_tensor_alloc(y, x->dtype, 4, yd))) return s;
  dft_plan p;
  if ((s = plan_init(&p, F, -1))) return s;
  int64_t C = x->dims[2];
  for (int64_t bb = 0; bb < B; bb++)
    for (int64_t f = 0; f < frames; f++) {
      for (int64_t m = 0; m < F; m++) {
        double wv = w ? kiln_get_f(w, m) : 1.0;
        int64_t at = (bb * S + f * step + m) * C;
        p.re[m] = kiln_get_f(x, at) * wv;
        p.im[m] = cplx ? kiln_get_f(x, at + 1) * wv : 0;
      }
      plan_run(&p, K);
      for (int64_t k = 0; k < K; k++) {
        double yr = p.yr[k], yi = p.yi[k];
        int64_t at = ((bb * frames + f) * K + k) * 2;
        kiln_set_f(y, at, yr);
        kiln_set_f(y, at + 1, yi);
      }
    }
  plan_free(&p);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* MelWeightMatrix                                                           */

#define T_MEL_OUT (KILN_TS_NUM | KILN_T(KILN_BF16))
static const char *const mel_ints[] = {"output_datatype", NULL};

static kiln_status chk_mel(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_base(n, 17, mel_ints);
  if (!s) s = chk_decl(g, n, 0, "num_mel_bins", T_IDX);
  if (!s) s = chk_decl(g, n, 1, "dft_length", T_IDX);
  if (!s) s = chk_decl(g, n, 2, "sample_rate", T_IDX);
  if (!s) s = chk_decl(g, n, 3, "lower_edge_hertz", T_FLT);
  if (!s) s = chk_decl(g, n, 4, "upper_edge_hertz", T_FLT);
  if (!s) s = kiln_opc_chk_decl_same(g, n, 1, 0, NULL);
  if (!s) s = kiln_opc_chk_decl_same(g, n, 2, 0, NULL);
  if (!s) s = kiln_opc_chk_decl_same(g, n, 4, 3, NULL);
  if (s) return s;
  int64_t dt = kiln_attr_int(n, "output_datatype", KILN_F32);
  if (dt < 0 || dt >= KILN_DTYPE_COUNT || !kiln_opc_in_mask(T_MEL_OUT, (kiln_dtype)dt) ||
      !kiln_dtype_supported((kiln_dtype)dt))
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'output_datatype' is %lld, not a numeric data type",
                     (long long)dt);
  return KILN_OK;
}

/* Python's float floor division a // b for b > 0 (floor of the exact
 * quotient: the remainder by fmod is exact). */
static double py_floordiv(double a, double b) {
  double mod = fmod(a, b), div = (a - mod) / b;
  if (mod != 0 && (mod < 0) != (b < 0)) div -= 1;
  if (div == 0) return 0;
  double f = floor(div);
  return div - f > 0.5 ? f + 1 : f;
}

static kiln_status run_mel(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  kiln_status s = chk_mel(c->graph, n);
  static const char *const names[] = {"num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz",
                                      "upper_edge_hertz"};
  for (int i = 0; i < 5 && !s; i++) s = need(c, i, names[i], i < 3 ? T_IDX : T_FLT);
  if (s) return s;
  int64_t M, L, sr;
  double lo, hi;
  if ((s = kiln_opc_scalar_i(c->in[0], 0, names[0], &M)) || (s = kiln_opc_scalar_i(c->in[1], 1, names[1], &L)) ||
      (s = kiln_opc_scalar_i(c->in[2], 2, names[2], &sr)) || (s = kiln_opc_scalar_f(c->in[3], 3, names[3], &lo)) ||
      (s = kiln_opc_scalar_f(c->in[4], 4, names[4], &hi)))
    return s;
  if (M < 1) return kiln_fail(KILN_E_INVALID_VALUE, "input 0 (num_mel_bins) is %lld; it must be positive", (long long)M);
  if (L < 1) return kiln_fail(KILN_E_INVALID_VALUE, "input 1 (dft_length) is %lld; it must be positive", (long long)L);
  if (sr < 1) return kiln_fail(KILN_E_INVALID_VALUE, "input 2 (sample_rate) is %lld; it must be positive", (long long)sr);
  if (M > ((int64_t)1 << 30) || L > ((int64_t)1 << 40))
    return kiln_fail(KILN_E_INVALID_VALUE, "num_mel_bins %lld or dft_length %lld is beyond 2^30 / 2^40", (long long)M,
                     (long long)L);
  if (!isfinite(lo) || !isfinite(hi))
    return kiln_fail(KILN_E_INVALID_VALUE, "lower_edge_hertz %g and upper_edge_hertz %g must be finite", lo, hi);
  int64_t nspec = L / 2 + 1;
  if (nspec > ((int64_t)1 << 40) / M)
    return kiln_fail(KILN_E_INVALID_VALUE,
                     "a mel matrix of (dft_length / 2 + 1) x num_mel_bins = %lld x %lld values is beyond 2^40",
                     (long long)nspec, (long long)M);
  int64_t *bin = kiln_malloc((size_t)(M + 2) * sizeof *bin);
  if (!bin) return kiln_fail(KILN_E_NOMEM, "out of memory for %lld mel bins", (long long)M);
  double ln10 = log(10.0);
  double mlo = 2595 * log1p(lo / 700) / ln10, mhi = 2595 * log1p(hi / 700) / ln10;
  double step = (mhi - mlo) / (double)(M + 2);
  for (int64_t i = 0; i < M + 2; i++) {
    double hz = 700 * expm1(((double)i * step + mlo) / 2595 * ln10);
    double v = py_floordiv((double)(L + 1) * hz, (double)sr);
    if (!(v > -4503599627370496.0 && v < 4503599627370496.0)) {
      kiln_free(bin);
      return kiln_fail(KILN_E_INVALID_VALUE, "mel point %lld maps to frequency %g Hz, no spectrogram bin",
                       (long long)i, hz);
    }
    bin[i] = (int64_t)v;
  }
  /* every bin a band writes must lie in [0, nspec) */
  for (int64_t i = 0; i < M; i++) {
    int64_t l = bin[i], m = bin[i + 1], h = bin[i + 2], first = INT64_MAX, last = INT64_MIN;
    if (m == l) first = last = m;
    else if (m > l) first = l, last = m;
    if (h > m) {
      if (m < first) first = m;
      if (h - 1 > last) last = h - 1;
    }
    if (first > last) continue; /* the band writes nothing */
    if (first < 0 || last >= nspec) {
      kiln_free(bin);
      return kiln_fail(KILN_E_INVALID_VALUE,
                       "mel band %lld spans spectrogram bins %lld to %lld, outside [0, %lld] (dft_length %lld): a "
                       "negative lower_edge_hertz (%g) or an upper_edge_hertz (%g) too far above sample_rate / 2 = %g",
                       (long long)i, (long long)first, (long long)last, (long long)(nspec - 1), (long long)L, lo, hi,
                       (double)sr / 2);
    }
  }
  int64_t yd[2] = {nspec, M};
  kiln_tensor *y = &c->out[0];
  /* the output first: its allocation checks that nspec * M elements fit, so
     the accumulator's size below cannot overflow */
  if ((s = kiln_tensor_alloc(y, (kiln_dtype)kiln_attr_int(n, "output_datatype", KILN_F32), 2, yd))) {
    kiln_free(bin);
    return s;
  }
  double *acc = kiln_calloc((size_t)nspec * (size_t)M, sizeof *acc);
  if (!acc) {
    kiln_free(bin);
    return kiln_fail(KILN_E_NOMEM, "out of memory for a %lldx%lld mel matrix", (long long)nspec, (long long)M);
  }
  for (int64_t i = 0; i < M; i++) {
    int64_t l = bin[i], m = bin[i + 1], h = bin[i + 2];
    if (m - l == 0) acc[m * M + i] = 1;
    else
      for (int64_t j = l; j <= m; j++) acc[j * M + i] = (double)(j - l) / (double)(m - l);
    if (h - m > 0)
      for (int64_t j = m; j < h; j++) acc[j * M + i] = (double)(h - j) / (double)(h - m);
  }
  for (int64_t k = 0; k < nspec * M; k++) kiln_set_f(y, k, acc[k]);
  kiln_free(acc);
  kiln_free(bin);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */

const kiln_op_def kiln_ref_ops_signal[] = {
    {"DFT", 1, 2, 1, 1, "axis inverse onesided", T_FLT, run_dft, chk_dft},
    {"STFT", 2, 4, 1, 1, "onesided", T_FLT, run_stft, chk_stft},
    {"MelWeightMatrix", 5, 5, 1, 1, "output_datatype", T_IDX, run_mel, chk_mel},
    {0},
};
