/* cpu_fallback/wino: Winograd F(2x2, 3x3) for stride-1, dilation-1,
 * group-1 3x3 convolutions (conv.c's dispatch; on by default where a plan
 * made U, KILN_CONV_WINO). Per 4x4 input tile (stride 2) V = B^T d B; per
 * tile coordinate xi of the 16, Mx[xi] = U[xi] · V[xi] (M x C times C x
 * tiles, the wide GEMM's micro-kernel on packs); the output tile A^T Mx A
 * gets the bias and the clamp (or the epilogue after the image). U = G g
 * G^T in the wide GEMM's A-panel layout, made once at plan time
 * (prepack.c).
 *
 * One pool loop per convolution: a task is a chunk of whole tile rows of
 * one image taken through all three phases in the worker's own scratch,
 * one strip of 32 tiles at a time (where U is big, the whole chunk at
 * once): the input transform (reading the input in place) into V in the
 * GEMM's B-panel layout, the 16 GEMMs into Mx, the output transform with
 * bias and clamp; then a non-clamp epilogue on the chunk's rows of each
 * output channel (and the epilogue's done). No barrier inside a
 * convolution. Every output element gets the same
 * operations whatever the partition (the GEMM sums over C in the wide
 * GEMM's KC slices, fixed by C), so the bits do not depend on the
 * partition, the thread count or the AVX-512 transforms vs the twin
 * (wino_tf.inc). The scratch buffers are kept between calls (a few
 * process-wide slots, freed by kiln_wino_scratch_trim) instead of being
 * page-faulted in on every run. */
#include <pthread.h>
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

int64_t kiln_wino_pack_floats(int64_t M, int64_t C) { return 16 * kiln_sgemm_wide_pack_a_floats(M, C); }

kiln_status kiln_wino_pack(const float *w, int64_t M, int64_t C, float *up) {
  float *u = kiln_malloc((size_t)(16 * M * C) * sizeof *u);
  if (!u) return kiln_fail(KILN_E_NOMEM, "out of memory for a Winograd convolution's weights");
  kiln_wino_weights(w, M, C, u);
  int64_t us = kiln_sgemm_wide_pack_a_floats(M, C);
  for (int xi = 0; xi < 16; xi++) kiln_sgemm_wide_pack_a(u + xi * M * C, C, M, C, up + xi * us);
  kiln_free(u);
  return KILN_OK;
}

/* ---- the scratch: a few process-wide buffers kept between calls ---- */

#define WINO_SLOTS 16
static pthread_mutex_t scr_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
  float *p;
  size_t cap;
  bool busy;
} scr[WINO_SLOTS];

/* A buffer of at least n floats and its slot (-1: a buffer of its own,
 * every slot busy), or NULL. */
static float *scratch_take(size_t n, int *slot) {
  pthread_mutex_lock(&scr_mu);
  int pick = -1;
  for (int i = 0; i < WINO_SLOTS; i++) /* the smallest idle slot that is large enough, else any idle one */
    if (!scr[i].busy && (pick < 0 || (scr[i].cap >= n && (scr[pick].cap < n || scr[i].cap < scr[pick].cap)) ||
                         (scr[pick].cap < n && scr[i].cap > scr[pick].cap)))
      pick = i;
  if (pick >= 0) scr[pick].busy = true;
  pthread_mutex_unlock(&scr_mu);
  *slot = pick;
  if (pick < 0) return kiln_malloc(n * sizeof(float));
  if (scr[pick].cap < n) { /* grown: only this thread holds the slot */
    kiln_free(scr[pick].p);
    scr[pick].cap = 0;
    if (!(scr[pick].p = kiln_malloc(n * sizeof(float)))) {
      pthread_mutex_lock(&scr_mu);
      scr[pick].busy = false;
      pthread_mutex_unlock(&scr_mu);
      return NULL;
    }
    scr[pick].cap = n;
  }
  return scr[pick].p;
}

static void scratch_give(int slot, float *p) {
  if (slot < 0) {
    kiln_free(p);
    return;
  }
  pthread_mutex_lock(&scr_mu);
  scr[slot].busy = false;
  pthread_mutex_unlock(&scr_mu);
}

void kiln_wino_scratch_trim(void) {
  pthread_mutex_lock(&scr_mu);
  for (int i = 0; i < WINO_SLOTS; i++)
    if (!scr[i].busy) {
      kiln_free(scr[i].p);
      scr[i].p = NULL, scr[i].cap = 0;
    }
  pthread_mutex_unlock(&scr_mu);
}

/* The AVX-512 transforms run where the AVX-512 wide GEMM does
 * (kiln_sgemm_pack_reader: AVX-512F usable, the ISA setting allows it). */

#define WINO_FN(name) name##_base
#include "cpu_fallback/wino_tf.inc"
#undef WINO_FN

enum { MR = KILN_SGEMM_WIDE_MR, NR = KILN_SGEMM_WIDE_NR };
#define WINO_SKEW 48 /* floats: 192 bytes */

typedef struct wino_job {
  const float *x, *up, *bias;
  float *y;
  kiln_wino_in_row_fn in_row;
  kiln_wino_out_row_fn out_row;
  kiln_sgemm_micro_fn micro;
  kiln_sgemm_micro_pf_fn micro_pf; /* micro with a prefetch stream (the AVX-512 one), or NULL */
  const kiln_cpu_epilogue *ep; /* applied per output channel and chunk when not a clamp */
  const kiln_cpu_epilogue *done; /* the epilogue, told of each channel's finished chunk (kiln_cpu_ep_done) */
  int64_t C, M, H, W, ph, pw, OH, OW, TH, TW;
  int64_t rb, nch;          /* tile rows a chunk, chunks an image */
  int64_t mparts;           /* parts of the output channels (whole 12-row blocks) a chunk is split into */
  int64_t us, mpad;         /* floats of one xi's U pack; M rounded up to 12 */
  size_t n_scr;             /* scratch floats a task */
  bool big;                 /* U over KILN_WINO_U_FAR: the whole chunk's V and Mx (else a strip's at a time) */
  bool clamp;
  float lo, hi;
  _Atomic int status;
} wino_job;

static int64_t up16(int64_t n) { return (n + 15) / 16 * 16; }

/* U of more bytes than this (all 16 packs) is taken as read from memory on every run (the L2 of one core: 2 MiB
   on the Xeon and the Zen 5 VMs). */
#define KILN_WINO_U_FAR ((double)(2 << 20))

/* V of the chunk's tiles [q0, q1) (one strip of at most 32: strip s of a B-panel layout npad columns wide, xi's
 * panels XS floats apart), channel by channel: each panel written in storage order (a tile row's pieces of the
 * strip, then the next channel's; channel by channel over a whole chunk wrote each panel in 8 KiB jumps, lines
 * half-filled at a time: ResNet-18's l1 steps 1.24-1.35 -> 1.05-1.11 ms at 1 thread). The transform reads the
 * input in place, the padding as zeros (a padded copy of the chunk's rows first: ~6 % of l1's time). Columns past
 * the tiles in the strip: zeros (never stored, but no garbage in the lanes). */
static void wino_in_strip(const wino_job *j, const float *xn, int64_t th0, int64_t q0, int64_t q1, float *v,
                          int64_t npad, int64_t s, int64_t XS) {
  int64_t C = j->C, H = j->H, W = j->W, TW = j->TW;
  for (int64_t c = 0, p0 = 0, kc = kiln_sgemm_wide_kc(C, 0); c < C; c++) {
    if (c == p0 + kc) p0 = c, kc = kiln_sgemm_wide_kc(C, p0);
    float *vc = v + p0 * npad + s * kc * NR + (c - p0) * NR;
    for (int64_t jj = q0, len; jj < q1; jj += len) { /* pieces of tile rows */
      int64_t r = jj / TW, tw = jj % TW, ih = 2 * (th0 + r) - j->ph;
      const float *rows[4];
      for (int i = 0; i < 4; i++) rows[i] = ih + i >= 0 && ih + i < H ? xn + (c * H + ih + i) * W : NULL;
      len = TW - tw < q1 - jj ? TW - tw : q1 - jj;
      j->in_row(rows, 2 * tw - j->pw, W, len, vc + (jj - q0), XS);
    }
    if (q1 - q0 < NR)
      for (int xi = 0; xi < 16; xi++) memset(vc + xi * XS + (q1 - q0), 0, (size_t)(NR - (q1 - q0)) * sizeof *vc);
  }
}

/* The output transform of the chunk's tiles [q0, q1) (its first tile row th0), output channels [m0, m1): tile q at
 * column q - c0 of Mx's rows (ldm floats a row, xi's rows MS floats apart), in pieces of tile rows; a piece at the
 * right or bottom edge of an odd-sized output through yt (4·TW floats). */
static void wino_out_tiles(const wino_job *j, const float *mx, int64_t ldm, int64_t MS, int64_t c0, int64_t th0,
                           int64_t q0, int64_t q1, int64_t m0, int64_t m1, float *yn, float *yt) {
  int64_t TW = j->TW, OH = j->OH, OW = j->OW;
  for (int64_t m = m0; m < m1; m++) {
    float *ym = yn + m * OH * OW, b = j->bias ? j->bias[m] : 0.0f;
    for (int64_t jj = q0, len; jj < q1; jj += len) {
      int64_t r = jj / TW, tw = jj % TW, r0 = 2 * (th0 + r);
      len = TW - tw < q1 - jj ? TW - tw : q1 - jj;
      bool whole = r0 + 2 <= OH && 2 * (tw + len) <= OW;
      float *y0 = whole ? ym + r0 * OW + 2 * tw : yt, *y1 = whole ? y0 + OW : yt + 2 * len;
      j->out_row(mx + m * ldm + (jj - c0), MS, len, b, j->clamp, j->lo, j->hi, y0, y1);
      if (!whole) {
        int64_t cols = 2 * len < OW - 2 * tw ? 2 * len : OW - 2 * tw;
        memcpy(ym + r0 * OW + 2 * tw, yt, (size_t)cols * sizeof *yt);
        if (r0 + 1 < OH) memcpy(ym + (r0 + 1) * OW + 2 * tw, yt + 2 * len, (size_t)cols * sizeof *yt);
      }
    }
  }
}

/* Task t: part t % mparts of the output channels, of chunk (t / mparts) % nch of image t / mparts / nch. Each
 * part transforms the chunk's input itself. */
static void wino_task(void *ctx, int64_t t, int worker) {
  (void)worker;
  wino_job *j = ctx;
  int64_t C = j->C, M = j->M, TW = j->TW;
  int64_t mp = t % j->mparts, n = t / j->mparts / j->nch, ch = t / j->mparts % j->nch;
  int64_t mb = (M + MR - 1) / MR, m0 = MR * (mb * mp / j->mparts), m1 = MR * (mb * (mp + 1) / j->mparts);
  if (m1 > M) m1 = M;
  int64_t th0 = ch * j->rb, nr = j->TH - th0 < j->rb ? j->TH - th0 : j->rb, Tc = nr * TW;
  int64_t npad = (Tc + NR - 1) / NR * NR, ns = npad / NR;
  int slot;
  float *scr = scratch_take(j->n_scr, &slot);
  if (!scr) { /* the message is set on the caller's thread (status.c keeps one a thread) */
    j->status = KILN_E_NOMEM;
    return;
  }
  float *v = (float *)(((uintptr_t)scr + 63) & ~(uintptr_t)63); /* the B panels 64-byte aligned */
  const float *xn = j->x + n * C * j->H * j->W;
  float *yn = j->y + n * M * j->OH * j->OW;
  /* xi's V panels XS floats apart and its Mx rows MS apart, both off multiples of 4 KiB (+ WINO_SKEW): the 16
     streams of a transform would share L1 sets */
  if (!j->big) {
    /* strip by strip of 32 tiles: V's 16 panels for the strip, the 16 GEMMs Mx[xi] = U[xi] · V[xi] on them (per KC
       slice: beta 0, then 1, as the wide GEMM), the output transform of the strip's tiles. The strip's V and Mx
       (16 · C · 32 and 16 · M · 32 floats: 128 KB each on ResNet-18's l1) stay in L2 beside U and the input; the
       whole chunk's were 900 KB each on l1 (GEMM_CONV.md "Winograd's input transform": within the noise end to
       end, a sixth of the scratch: 269 KB a task on l1, was 1.73 MB) */
    int64_t XS = C * NR + WINO_SKEW, MS = M * NR + WINO_SKEW;
    float *mx = v + up16(16 * XS), *yt = mx + up16(16 * MS);
    for (int64_t s = 0; s < ns; s++) {
      int64_t q0 = s * NR, q1 = q0 + NR < Tc ? q0 + NR : Tc;
      wino_in_strip(j, xn, th0, q0, q1, v, NR, 0, XS);
      for (int xi = 0; xi < 16; xi++) {
        const float *a = j->up + xi * j->us;
        for (int64_t p0 = 0, kc; p0 < C; p0 += kc) {
          kc = kiln_sgemm_wide_kc(C, p0);
          const float *bp = v + xi * XS + p0 * NR, *ap = a + p0 * j->mpad;
          for (int64_t ms = m0; ms < m1; ms += MR)
            j->micro(kc, ap + ms * kc, bp, p0 ? 1.0f : 0.0f, mx + xi * MS + ms * NR, NR,
                     (int)(m1 - ms < MR ? m1 - ms : MR), (int)(q1 - q0));
        }
      }
      wino_out_tiles(j, mx, NR, MS, q0, th0, q0, q1, m0, m1, yn, yt);
    }
  } else {
    /* U big (read from memory: ResNet-18's l3, 4.2 MB a conv): the chunk's V, then the 16 GEMMs; with at most two
       strips of V (l3: one, chunks of 28 and 21 tiles) each strip of U is reused over them while each call fetches
       a share of the next one into L2 inside its k loop (with the AVX-512 kernel; GEMM_CONV.md "Weights from
       memory"); else each strip of V reused from L1 over U[xi]'s 12-row strips. The same operations per element
       as the strips above */
    int64_t XS = C * npad + WINO_SKEW, MS = M * Tc + WINO_SKEW;
    float *mx = v + up16(16 * XS), *yt = mx + up16(16 * MS);
    for (int64_t s = 0; s < ns; s++)
      wino_in_strip(j, xn, th0, s * NR, s * NR + NR < Tc ? s * NR + NR : Tc, v, npad, s, XS);
    for (int xi = 0; xi < 16; xi++) {
      const float *a = j->up + xi * j->us;
      for (int64_t p0 = 0, kc; p0 < C; p0 += kc) {
        kc = kiln_sgemm_wide_kc(C, p0);
        const float *bp = v + xi * XS + p0 * npad, *ap = a + p0 * j->mpad;
        if (ns <= 2) {
          for (int64_t ms = m0; ms < m1; ms += MR)
            for (int64_t s = 0; s < ns; s++) {
              int64_t len = ms + MR < m1 ? MR * kc : 0, q0 = len * s / ns, q1 = len * (s + 1) / ns;
              float *c = mx + xi * MS + ms * Tc + s * NR;
              int mr = (int)(m1 - ms < MR ? m1 - ms : MR), nr = (int)(Tc - s * NR < NR ? Tc - s * NR : NR);
              if (j->micro_pf && len)
                j->micro_pf(kc, ap + ms * kc, bp + s * kc * NR, p0 ? 1.0f : 0.0f, c, Tc, mr, nr,
                            ap + (ms + MR) * kc + q0, (q1 - q0 + kc - 1) / kc);
              else
                j->micro(kc, ap + ms * kc, bp + s * kc * NR, p0 ? 1.0f : 0.0f, c, Tc, mr, nr);
            }
          continue;
        }
        for (int64_t s = 0; s < ns; s++)
          for (int64_t ms = m0; ms < m1; ms += MR)
            j->micro(kc, ap + ms * kc, bp + s * kc * NR, p0 ? 1.0f : 0.0f, mx + xi * MS + ms * Tc + s * NR, Tc,
                     (int)(m1 - ms < MR ? m1 - ms : MR), (int)(Tc - s * NR < NR ? Tc - s * NR : NR));
      }
    }
    wino_out_tiles(j, mx, Tc, MS, 0, th0, 0, Tc, m0, m1, yn, yt);
  }
  for (int64_t m = m0; m < m1; m++) { /* the chunk's rows of channel m (~200 KB of them on l1: in L2) */
    int64_t OH = j->OH, OW = j->OW, h0 = 2 * th0, h1 = 2 * (th0 + nr) < OH ? 2 * (th0 + nr) : OH;
    float *ym = yn + m * OH * OW;
    if (j->ep) j->ep->apply(j->ep->ctx, (n * M + m) * OH * OW + h0 * OW, (h1 - h0) * OW, ym + h0 * OW);
    kiln_cpu_ep_done(j->done, (n * M + m) * OH * OW + h0 * OW, (h1 - h0) * OW, ym + h0 * OW);
  }
  scratch_give(slot, scr);
}

/* Tiles a chunk: about a quarter of the image (4 tasks or more: a split for
 * 2 threads), or a thread's share where more threads run, at least 32 (one
 * strip of the micro-kernel), at most 256 (the chunk's V and Mx within a
 * few MB where U is big; and the output rows an epilogue reads back). Where
 * the chunks are still fewer than the threads (small images: ResNet-18's
 * l3, 7 x 7 tiles, makes 2 chunks), each chunk's output channels are split
 * into parts of whole 12-row blocks, enough for a task per thread; each
 * part transforms the chunk's input again (a few percent of the work: the
 * transform of a tile costs about what one output channel's GEMM does). */
#define WINO_CHUNK_MIN 32
#define WINO_CHUNK_MAX 256

kiln_status kiln_wino_conv(int64_t N, int64_t C, int64_t M, int64_t H, int64_t W, int64_t ph, int64_t pw,
                           int64_t OH, int64_t OW, const float *x, const float *up, const float *bias, float *y,
                           const kiln_cpu_epilogue *ep, bool simd) {
  int64_t TH = (OH + 1) / 2, TW = (OW + 1) / 2;
  wino_job j = {.x = x, .up = up, .bias = bias, .y = y, .in_row = kiln_wino_in_row_base,
                .out_row = kiln_wino_out_row_base, .micro = kiln_sgemm_micro_wide_base};
#ifdef KILN_HAVE_AVX512
  kiln_sgemm_micro_fn reader = kiln_sgemm_pack_reader();
  if (simd && reader) j.in_row = kiln_wino_in_row_avx512, j.out_row = kiln_wino_out_row_avx512, j.micro = reader;
  if (j.micro == kiln_sgemm_micro_wide_avx512) j.micro_pf = kiln_sgemm_micro_wide_pf_avx512;
#else
  (void)simd;
#endif
  j.C = C, j.M = M, j.H = H, j.W = W, j.ph = ph, j.pw = pw, j.OH = OH, j.OW = OW, j.TH = TH, j.TW = TW;
  j.us = kiln_sgemm_wide_pack_a_floats(M, C), j.mpad = (M + MR - 1) / MR * MR;
  /* tile rows a chunk: of the counts whose tiles stay within the target (or one row), the one that fills the
     micro-kernel's 32-column strips best, the larger on a tie. The partition changes no bits (above). */
  /* the threads that will take the tasks: one where this runs inside a pool task or beside another graph's loop
     (kiln_pool_free: the loop then runs on its caller), where channel parts would only transform the input again */
  int workers = kiln_pool_free() ? kiln_pool_threads() : 1;
  int64_t target = TH * TW / (workers > 4 ? workers : 4);
  target = target < WINO_CHUNK_MIN ? WINO_CHUNK_MIN : target > WINO_CHUNK_MAX ? WINO_CHUNK_MAX : target;
  j.rb = 1;
  double best = 0;
  for (int64_t rb = 1; rb <= TH && (rb == 1 || rb * TW <= target); rb++) {
    double fill = (double)(rb * TW) / (double)((rb * TW + NR - 1) / NR * NR);
    if (fill >= best) best = fill, j.rb = rb;
  }
  j.nch = (TH + j.rb - 1) / j.rb;
  int64_t chunks = N * j.nch, mb = (M + MR - 1) / MR;
  j.mparts = chunks < workers ? (workers + chunks - 1) / chunks : 1;
  if (j.mparts > mb) j.mparts = mb;
  int64_t Tc = j.rb * TW, npad = (Tc + NR - 1) / NR * NR;
  j.big = (double)j.us * 16 * sizeof(float) > KILN_WINO_U_FAR; /* U read from memory, not from the caches */
  j.n_scr = j.big ? (size_t)(up16(16 * (C * npad + WINO_SKEW)) + up16(16 * (M * Tc + WINO_SKEW)) + 4 * TW + 16)
                  : (size_t)(up16(16 * (C * NR + WINO_SKEW)) + up16(16 * (M * NR + WINO_SKEW)) + 4 * TW + 16);
  j.clamp = ep && ep->clamp;
  j.ep = ep && !ep->clamp ? ep : NULL;
  j.done = ep;
  j.lo = j.clamp ? ep->lo : 0.0f, j.hi = j.clamp ? ep->hi : 0.0f;
  j.status = KILN_OK;
  int64_t tasks = chunks * j.mparts;
  kiln_pool_for_shares(tasks, tasks > 1 ? workers : 1, wino_task, &j); /* chunks of rows: parts of the image */
  return j.status ? kiln_fail(KILN_E_NOMEM, "out of memory for a Winograd convolution's tiles") : KILN_OK;
}
