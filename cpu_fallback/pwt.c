/* cpu_fallback/pwt: pointwise convolutions on small planes, lanes over
 * output channels (pwt.h): W's pack, the scalar twin of the tile kernels,
 * the choice of kernel and the loop over tiles on the pool. Built without
 * contraction: the twin's fmaf and adds are the kernels' operations. */
#include "cpu_fallback/pwt.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/pool.h"
#include "cpu_fallback/sgemm.h"
#include "ir/alloc.h"

enum { MR = KILN_PWT_MR, NR = KILN_PWT_NR };

int64_t kiln_pwt_pack_floats(int64_t M, int64_t K) { return (M + NR - 1) / NR * NR * K; }

void kiln_pwt_pack(const float *w, int64_t M, int64_t K, float *dst) {
  for (int64_t b = 0; b * NR < M; b++)
    for (int64_t k = 0; k < K; k++) {
      float *d = dst + (b * K + k) * NR;
      for (int64_t c = 0; c < NR; c++) d[c] = b * NR + c < M ? w[(b * NR + c) * K + k] : 0.0f;
    }
}

/* The operations every version does per element, after the last slice. */
static void tile_finish(const float *tot, float *y, int64_t ldy, int mr, int nr, const float *bias, bool clamp,
                        float lo, float hi) {
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < nr; c++) {
      float v = tot[r * NR + c];
      if (bias) v = v + bias[c];
      if (clamp) {
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
      }
      y[c * ldy + r] = v;
    }
}

void kiln_pwt_tile_base(int64_t K, int64_t p0, const float *x, int64_t ldx, const float *wt, float *tot, float *y,
                        int64_t ldy, int mr, int nr, const float *bias, bool clamp, float lo, float hi, const float *pf,
                        int64_t pfs) {
  (void)pf, (void)pfs; /* hints only */
  int64_t kc = kiln_sgemm_wide_kc(K, p0);
  float acc[MR][NR], own[MR * NR];
  if (p0 == 0 && kc == K) tot = own; /* one slice: the caller's totals are not used */
  memset(acc, 0, sizeof acc);
  for (int64_t k = p0; k < p0 + kc; k++)
    for (int r = 0; r < mr; r++)
      for (int c = 0; c < nr; c++) acc[r][c] = fmaf(x[k * ldx + r], wt[k * NR + c], acc[r][c]);
  for (int r = 0; r < mr; r++)
    for (int c = 0; c < nr; c++) tot[r * NR + c] = p0 ? acc[r][c] + tot[r * NR + c] : acc[r][c];
  if (p0 + kc == K) tile_finish(tot, y, ldy, mr, nr, bias, clamp, lo, hi);
}

kiln_pwt_fn kiln_pwt_tile(void) {
#ifdef KILN_PWT_HAVE_AVX512
  if (kiln_sgemm_pack_reader()) return kiln_pwt_tile_avx512;
  if (kiln_la_isa() == KILN_VM_ISA_AVX2 && !kiln_la_cpu_has_avx512()) return kiln_pwt_tile_avx2;
#endif
  return NULL;
}

static _Atomic int pwt_mode = -1; /* -1: KILN_CONV_PWT not read yet; -2: the default rule; else kiln_conv_pwt_force */
void kiln_conv_pwt_force(int mode) { pwt_mode = mode < 0 ? -2 : mode; }

int kiln_pwt_mode(void) {
  if (pwt_mode == -1) { /* KILN_CONV_PWT=0|1 (benches): the same as kiln_conv_pwt_force */
    const char *e = getenv("KILN_CONV_PWT");
    pwt_mode = e && (*e == '0' || *e == '1') ? *e - '0' : -2;
  }
  return pwt_mode;
}

bool kiln_pwt_plane_wanted(int64_t P, int64_t K) {
#ifdef KILN_PWT_HAVE_AVX512
  if (kiln_pwt_tile() == kiln_pwt_tile_avx2) return P < KILN_PWT_MAX_PLANE && K >= KILN_PWT_MIN_K;
#endif
  return P < KILN_PWT_MAX_PLANE && (P < KILN_PWT_MAX_PLANE / 2 || K >= KILN_PWT_MIN_K);
}

typedef struct pwt_job {
  int64_t K, M, P, blocks, strips, sper, sgroups;
  bool by_pixels; /* tasks ordered by group of strips first (a thread's part of the image), else by block */
  const float *x, *wt, *bias;
  float *y, *tots; /* tots: per worker, sper tiles' running totals (several KC slices) */
  const kiln_cpu_epilogue *ep;
  kiln_pwt_fn fn;
} pwt_job;

/* Task (image, group of 12-pixel strips, block of 32 output channels) in
 * that order where by_pixels, else (image, block, group): per KC slice
 * every strip of the group (the slice's rows of the block's pack stay in
 * L1), then a non-clamp epilogue over the block's outputs. */
static void pwt_task(void *ctx, int64_t task, int worker) {
  const pwt_job *j = ctx;
  int64_t n = task / j->blocks / j->sgroups;
  int64_t b = j->by_pixels ? task % j->blocks : task / j->sgroups % j->blocks;
  int64_t sg = j->by_pixels ? task / j->blocks % j->sgroups : task % j->sgroups;
  int64_t K = j->K, P = j->P, m0 = b * NR, nr = j->M - m0 < NR ? j->M - m0 : NR;
  int64_t pa = sg * j->sper * MR, pb = pa + j->sper * MR < P ? pa + j->sper * MR : P;
  const kiln_cpu_epilogue *ep = j->ep;
  bool clamp = ep && ep->clamp;
  float lo = clamp ? ep->lo : 0.0f, hi = clamp ? ep->hi : 0.0f;
  const float *x = j->x + n * K * P, *wt = j->wt + b * K * NR, *bias = j->bias ? j->bias + m0 : NULL;
  float *y = j->y + (n * j->M + m0) * P, *tots = j->tots ? j->tots + (size_t)worker * (size_t)(j->sper * MR * NR) : NULL;
  int64_t ns = (pb - pa + MR - 1) / MR;
  for (int64_t p0 = 0, kc; p0 < K; p0 += kc) {
    kc = kiln_sgemm_wide_kc(K, p0);
    /* the pack's next slice (this block's, or the next block's first): each strip's call fetches a share of
       its lines into L2 inside its k loop (a hint, never a fault). A W of 7 x 7 and 14 x 14 layers comes from
       memory each run when other work shares the caches: MobileNetV2's head 0.41 -> 0.33 ms a step
       interleaved with onnxruntime, where a burst of each share's prefetches before the call measured 0.41
       and none 0.47 (GEMM_CONV.md "Weights from memory") */
    const float *nx = p0 + kc < K ? wt + (p0 + kc) * NR : b + 1 < j->blocks ? wt + K * NR : NULL;
    int64_t nlen = (p0 + kc < K ? kiln_sgemm_wide_kc(K, p0 + kc) : kiln_sgemm_wide_kc(K, 0)) * NR;
    for (int64_t p = pa, s = 0; p < pb; p += MR, s++) {
      int64_t q0 = nlen * s / ns, q1 = nlen * (s + 1) / ns;
      j->fn(K, p0, x + p, P, wt, tots ? tots + (p - pa) * NR : NULL, y + p, P, pb - p < MR ? (int)(pb - p) : MR,
            (int)nr, bias, clamp, lo, hi, nx ? nx + q0 : NULL, (q1 - q0 + kc - 1) / kc);
    }
  }
  if (!ep || clamp) return;
  int64_t flat0 = (n * j->M + m0) * P;
  if (pa == 0 && pb == P) ep->apply(ep->ctx, flat0, nr * P, y); /* the block's channels are contiguous */
  else
    for (int64_t c = 0; c < nr; c++) ep->apply(ep->ctx, flat0 + c * P + pa, pb - pa, y + c * P + pa);
}

kiln_status kiln_pwt_conv(int64_t N, int64_t K, int64_t M, int64_t P, const float *x, const float *wt,
                          const float *bias, float *y, const kiln_cpu_epilogue *ep, kiln_pwt_fn fn) {
  int64_t blocks = (M + NR - 1) / NR, strips = (P + MR - 1) / MR, sgroups = 1;
  /* the wide GEMM's split (sgemm.c, which split these layers before): about 4 tasks per thread of at least 2^20
     multiply-adds, whole rounds of the threads; here channel blocks first, then groups of strips */
  int workers = kiln_pool_threads();
  double work = (double)M * (double)K * (double)P * (double)N;
  int64_t tasks = workers > 1 ? kiln_pool_tasks(work > 1e15 ? (int64_t)1e15 : (int64_t)work, 1 << 20, 4 * (int64_t)workers) : 1;
  if (tasks > 1) tasks = (tasks + workers - 1) / workers * workers;
  else workers = 1;
  if (N * blocks < tasks) sgroups = (tasks + N * blocks - 1) / (N * blocks);
  /* each thread its part of the image (GEMM_CONV.md "Parts of the image") where the planes in and out outweigh W
     (MobileNetV2's 14 x 14 layers); else each its blocks of channels, W read once (the 7 x 7 ones) */
  bool by_pixels = tasks > 1 && N < workers && (double)P * (double)(K + M) >= (double)K * (double)M;
  if (by_pixels) sgroups = (sgroups + workers - 1) / workers * workers;
  if (sgroups > strips) sgroups = strips;
  int64_t sper = (strips + sgroups - 1) / sgroups;
  sgroups = (strips + sper - 1) / sper;
  float *tots = NULL;
  if (kiln_sgemm_wide_kc(K, 0) < K && !(tots = kiln_malloc((size_t)(sper * MR * NR) * (size_t)workers * sizeof *tots)))
    return kiln_fail(KILN_E_NOMEM, "out of memory for a pointwise convolution's tiles");
  pwt_job j = {K, M, P, blocks, strips, sper, sgroups, by_pixels, x, wt, bias, y, tots, ep, fn};
  if (by_pixels) kiln_pool_for_shares(N * blocks * sgroups, workers, pwt_task, &j);
  else kiln_pool_for(N * blocks * sgroups, workers, pwt_task, &j);
  kiln_free(tots);
  return KILN_OK;
}
