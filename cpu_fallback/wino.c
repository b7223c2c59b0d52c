/* cpu_fallback/wino: Winograd F(2x2, 3x3) for stride-1, dilation-1,
 * group-1 3x3 convolutions (conv.c's dispatch; opt-in, KILN_CONV_WINO=1).
 * The input zero-padded once per image; per 4x4 input tile (stride 2) V =
 * B^T d B; per tile coordinate xi of the 16, Mx[xi] = U[xi] · V[xi] (M x C
 * times C x tiles, kiln_sgemm); the output tile A^T Mx A gets the bias and
 * the clamp (or the epilogue after the image). U = G g G^T, made once at
 * plan time (prepack.c). Tile rows in blocks of about KILN_WINO_BLOCK
 * tiles; the same bits for any thread count and with the AVX-512
 * transforms as with the scalar twin's (wino_tf.inc). */
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/sgemm.h"
#include "cpu_fallback/wino.h"
#include "ir/alloc.h"

void kiln_wino_weights(const float *w, int64_t M, int64_t C, float *u) {
  int64_t MC = M * C;
  for (int64_t i = 0; i < MC; i++) {
    const float *g = w + i * 9;
    float t[4][3]; /* G g */
    for (int j = 0; j < 3; j++) {
      float g0 = g[j], g1 = g[3 + j], g2 = g[6 + j];
      t[0][j] = g0;
      t[1][j] = 0.5f * (g0 + g1 + g2);
      t[2][j] = 0.5f * (g0 - g1 + g2);
      t[3][j] = g2;
    }
    for (int r = 0; r < 4; r++) { /* (G g) G^T */
      float a = t[r][0], b = t[r][1], c = t[r][2];
      u[(r * 4 + 0) * MC + i] = a;
      u[(r * 4 + 1) * MC + i] = 0.5f * (a + b + c);
      u[(r * 4 + 2) * MC + i] = 0.5f * (a - b + c);
      u[(r * 4 + 3) * MC + i] = c;
    }
  }
}

/* The AVX-512 transforms run where the AVX-512 wide GEMM does
 * (kiln_sgemm_pack_reader: AVX-512F usable, the ISA setting allows it). */

/* Tiles per block of tile rows (at least one row): 128 kept V and Mx of
 * ResNet-18's l1 (64 channels) within about 1 MB. */
#define KILN_WINO_BLOCK 512

#define WINO_FN(name) name##_base
#include "cpu_fallback/wino_tf.inc"
#undef WINO_FN

/* One block of tile rows, in three pool loops (pool.h): the input
 * transform by channel, the 16 GEMMs (each whole on one thread: the same
 * bits for any thread count), the output transform by output channel. */
typedef struct wino_job {
  const float *pad, *u, *bias;
  float *v, *mx, *yt, *yn; /* yt: 4·TW floats a worker */
  kiln_wino_in_row_fn in_row;
  kiln_wino_out_row_fn out_row;
  int64_t C, M, Hp, Wp, TW, OH, OW, t0, nr, T;
  bool clamp;
  float lo, hi;
  _Atomic int status;
} wino_job;

static void wino_in(void *ctx, int64_t c, int worker) {
  (void)worker;
  const wino_job *j = ctx;
  for (int64_t th = 0; th < j->nr; th++) {
    const float *p0 = j->pad + (c * j->Hp + 2 * (j->t0 + th)) * j->Wp;
    j->in_row(p0, p0 + j->Wp, p0 + 2 * j->Wp, p0 + 3 * j->Wp, j->TW, j->v + c * j->T + th * j->TW, j->C * j->T);
  }
}

static void wino_gemm(void *ctx, int64_t xi, int worker) {
  (void)worker;
  wino_job *j = ctx;
  int64_t M = j->M, C = j->C, T = j->T;
  kiln_status s = kiln_sgemm(false, false, M, T, C, 1.0f, j->u + xi * M * C, C, j->v + xi * C * T, T, 0.0f,
                             j->mx + xi * M * T, T);
  if (s) j->status = s;
}

static void wino_out(void *ctx, int64_t m, int worker) {
  const wino_job *j = ctx;
  int64_t OH = j->OH, OW = j->OW, TW = j->TW;
  float *ym = j->yn + m * OH * OW, b = j->bias ? j->bias[m] : 0.0f, *yt = j->yt + worker * 4 * TW;
  for (int64_t th = 0; th < j->nr; th++) {
    int64_t r0 = 2 * (j->t0 + th);
    bool whole = r0 + 2 <= OH && 2 * TW == OW;
    float *y0 = whole ? ym + r0 * OW : yt, *y1 = whole ? y0 + OW : yt + 2 * TW;
    j->out_row(j->mx + m * j->T + th * TW, j->M * j->T, TW, b, j->clamp, j->lo, j->hi, y0, y1);
    if (!whole) {
      memcpy(ym + r0 * OW, yt, (size_t)OW * sizeof *yt);
      if (r0 + 1 < OH) memcpy(ym + (r0 + 1) * OW, yt + 2 * TW, (size_t)OW * sizeof *yt);
    }
  }
}

kiln_status kiln_wino_conv(int64_t N, int64_t C, int64_t M, int64_t H, int64_t W, int64_t ph, int64_t pw,
                           int64_t OH, int64_t OW, const float *x, const float *u, const float *bias, float *y,
                           const kiln_cpu_epilogue *ep, bool simd) {
  int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2, Hp = 2 * TH + 2, Wp = 2 * TW + 2;
  wino_job j = {.u = u, .bias = bias, .in_row = kiln_wino_in_row_base, .out_row = kiln_wino_out_row_base};
#ifdef KILN_HAVE_AVX512
  if (simd && kiln_sgemm_pack_reader()) j.in_row = kiln_wino_in_row_avx512, j.out_row = kiln_wino_out_row_avx512;
#else
  (void)simd;
#endif
  /* tile rows in blocks of about KILN_WINO_BLOCK tiles (whatever the thread count: the same GEMMs) */
  int64_t rb = KILN_WINO_BLOCK / TW < 1 ? 1 : KILN_WINO_BLOCK / TW;
  if (rb > TH) rb = TH;
  int64_t Tb = rb * TW;
  int workers = kiln_pool_threads();
  size_t n_v = (size_t)(16 * C * Tb), n_m = (size_t)(16 * M * Tb), n_p = (size_t)(C * Hp * Wp);
  size_t n_y = (size_t)(4 * TW * workers);
  float *v = kiln_malloc((n_v + n_m + n_p + n_y) * sizeof *v);
  if (!v) return kiln_fail(KILN_E_NOMEM, "out of memory for a Winograd convolution's tiles");
  float *pad = v + n_v + n_m;
  memset(pad, 0, n_p * sizeof *pad);
  j.pad = pad, j.v = v, j.mx = v + n_v, j.yt = pad + n_p;
  j.C = C, j.M = M, j.Hp = Hp, j.Wp = Wp, j.TW = TW, j.OH = OH, j.OW = OW;
  j.clamp = ep && ep->clamp;
  j.lo = j.clamp ? ep->lo : 0.0f, j.hi = j.clamp ? ep->hi : 0.0f;
  j.status = KILN_OK;
  for (int64_t n = 0; n < N && !j.status; n++) {
    const float *xn = x + n * C * H * W;
    for (int64_t c = 0; c < C; c++) /* the zero-padded planes: H + ph <= Hp, W + pw <= Wp (OH + 2 >= H + pads) */
      for (int64_t h = 0; h < H; h++)
        memcpy(pad + (c * Hp + h + ph) * Wp + pw, xn + (c * H + h) * W, (size_t)W * sizeof *pad);
    j.yn = y + n * M * OH * OW;
    for (int64_t t0 = 0; t0 < TH && !j.status; t0 += rb) {
      j.t0 = t0, j.nr = TH - t0 < rb ? TH - t0 : rb, j.T = j.nr * TW;
      kiln_pool_for(C, workers, wino_in, &j);
      kiln_pool_for(16, workers, wino_gemm, &j);
      if (!j.status) kiln_pool_for(M, workers, wino_out, &j);
    }
    if (!j.status && ep && !j.clamp) ep->apply(ep->ctx, n * M * OH * OW, M * OH * OW, j.yn);
  }
  kiln_status s = j.status;
  kiln_free(v);
  return s;
}
