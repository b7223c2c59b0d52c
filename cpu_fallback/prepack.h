/* cpu_fallback/prepack: weight layout changes made once when a plan is
 * compiled, so that kernels do not redo them on every run.
 *
 * kiln_cpu_pretranspose: a Gemm with transB = 1 whose B is a float32
 * initializer read by that node alone (not a graph input or output) gets B
 * stored transposed ([K, N]) and transB = 0. The GEMM then packs B panels
 * with row copies instead of a blocked transpose per call (onnxruntime
 * pre-packs its weights once; kiln packs per call). The result is the same
 * product: kiln's wide SGEMM sums each element in k order either way. g is
 * the plan's own copy of the model (kiln_rewrite_run's), never the
 * caller's. *count (optional) gets the number of nodes changed. */
#ifndef KILN_CPU_FALLBACK_PREPACK_H
#define KILN_CPU_FALLBACK_PREPACK_H
#include "ir/graph.h"
#include "ir/status.h"

kiln_status kiln_cpu_pretranspose(kiln_graph *g, int *count);

/* Conv weights packed once (GEMM_CONV.md, "Conv weights packed once").
 * kiln_cpu_conv_prepack: for every Conv node of g whose W is a float32
 * initializer (dense, rank 3 to 5, after the rewrites' BatchNorm folding)
 * of at most 2 MiB (KILN_CONV_PREPACK: 0 none, N: N MiB, all: no limit;
 * a larger W is read from memory once a run either way, see GEMM_CONV.md)
 * and which the depthwise path does not take (not W.dims[1] == 1 with
 * group > 1), W is packed per group into the wide SGEMM's A-panel layout
 * (sgemm.h kiln_sgemm_wide_pack_a), when the SGEMM that reads those packs
 * is the active one at plan time (kiln_sgemm_pack_reader(): AVX2 setting,
 * AVX-512F usable, KILN_SGEMM not blas).
 * W itself stays (the reference kernel, other ISAs and observation read
 * it): the packs cost about the weights' size again. The packs are
 * registered under g's nodes until kiln_cpu_conv_packs_free (call it before
 * g is freed). *out is NULL when nothing was packed; *bytes (optional) gets
 * the packs' size.
 * A 1x1 Conv with group 1 and unit strides also gets W^T for the
 * lanes-over-channels tiles (pwt.h; the AVX-512 tiles, and under the AVX2
 * setting without AVX-512F the AVX2 ones: there these packs alone), where
 * its output plane passes the tiles' size rule (kiln_pwt_plane_wanted):
 * planes (optional, indexed by node) holds each node's output pixels per
 * image from the plan's shapes, -1 where not known; NULL: all unknown (W^T
 * for every such Conv). A strided 1x1 (group 1, no pads) gets it too where
 * the AVX-512 wide GEMM runs and its known output plane passes the rule
 * (ResNet's 14 x 14 and 7 x 7 downsampling: conv.c samples the input, then
 * runs the tiles). widths (optional, indexed by node, -1 where not known;
 * NULL: all unknown): each node's output row width, which decides whether
 * a W over 4 MiB gets the channel tiles' transposed pack (only where the
 * tiles can take it: rows of 7 or of a multiple of 14, or not known). */
typedef struct kiln_cpu_conv_packs kiln_cpu_conv_packs;
kiln_status kiln_cpu_conv_prepack(const kiln_graph *g, const int64_t *planes, const int64_t *widths,
                                  kiln_cpu_conv_packs **out, size_t *bytes);
void kiln_cpu_conv_packs_free(kiln_cpu_conv_packs *p);

/* The pack of a Conv node, or NULL: data holds G packs of Mg x Kc, one per
 * group, gstride floats apart, made from W's data src (data NULL: only a
 * transposed pack). Valid while the plan lives. Callers check src, G, Mg
 * and Kc against the call, and read data only with
 * kiln_sgemm_pack_reader()'s micro-kernel, tdata only with kiln_pwt_tile()'s,
 * ctdata only with the direct path's channel tiles. */
typedef struct kiln_cpu_conv_pack {
  const float *src;
  int64_t G, Mg, Kc, gstride;
  float *data;
  /* data: NULL where the wide GEMM reads no packs (AVX2 without AVX-512F).
   * A 1x1 Conv with group 1 and no strides other than 1 whose plane passes
   * the tiles' rule also gets W in the lanes-over-channels layout (pwt.h
   * kiln_pwt_pack: Mg x Kc); else tdata is NULL. */
  float *tdata;
  /* W transposed for the direct path's channel tiles (conv.c; sgemm.h
     kiln_conv_ct_pack), ctgstride floats a group; NULL unless W's kernel is
     wider than 1x1 on at most 2 spatial dims, Kc >= KILN_CONV_CT_MIN_K and W
     at most the A pack's limit or KILN_CONV_CT_PACK_MAX (its cost: W's size
     again) */
  int64_t ctgstride;
  float *ctdata;
  /* Winograd F(2x2, 3x3)'s U = G g G^T packed for its GEMMs (wino.h
     kiln_wino_pack: 16 A-panel packs of Mg x Kc/9) where W is 3x3 with
     group 1, no strides or dilations other than 1, at most the A pack's
     limit or KILN_CONV_WINO_PACK_MAX, the AVX-512 wide GEMM runs and
     KILN_CONV_WINO is not 0; else NULL. Above the A pack's limit U is made
     alone (no A pack, no transposed pack: Winograd reads neither) */
  float *wdata;
} kiln_cpu_conv_pack;
/* The transposed pack is made for a W of up to this many bytes even above
 * the A pack's limit (ResNet-18's 2.4 MB l3 weights: 0.95-0.96 of the 12 x
 * 32 tile reading W in place, per step; alone, data NULL). 16 MiB (was 4)
 * since the channel tiles take rows of 7 (2026-11-26): ResNet-18's l4
 * (9.4 MB, 3 convs) and l4.0.conv1 (4.7 MB) read it (GEMM_CONV.md, "Rows
 * of 7"); 33 MB more packed weights for that model. */
#define KILN_CONV_CT_PACK_MAX ((int64_t)16 << 20)
/* Up to this many bytes of W the transposed pack is made whatever the
 * output's row width; above it only where the known width is one the
 * channel tiles take (or unknown): the old KILN_CONV_CT_PACK_MAX. */
#define KILN_CONV_CT_PACK_ANY ((int64_t)4 << 20)
/* Winograd's U is made for a W of up to this many bytes even above the A
 * pack's limit (ResNet-18's 2.4 MB l3 weights: U 4.2 MB, the 3x3 steps on
 * 14 x 14 0.80-0.85 of the direct path's time at 1 and 2 threads; l4's 9.4
 * MB weights on 7 x 7 planes were 1.45x slower through it: 16 tiles in the
 * micro-kernel's 32 columns, U 16.7 MB read from memory). */
#define KILN_CONV_WINO_PACK_MAX ((int64_t)4 << 20)
/* The smallest Kc given a transposed pack: below it (ResNet's conv1, K
 * 147) the channel tile's transposed store cost more than it saved (1.25x
 * the 12 x 32 row tiles). */
#define KILN_CONV_CT_MIN_K 288
const kiln_cpu_conv_pack *kiln_cpu_conv_pack_find(const kiln_node *n);

/* Gemm / MatMul weights packed once (GEMM_CONV.md, "GEMM weights packed
 * once"). kiln_cpu_gemm_prepack: for every MatMul whose B is a 2-D float32
 * initializer and every Gemm whose B is one with transB = 0 (after
 * kiln_cpu_pretranspose), dense, of at most 16 MiB (KILN_GEMM_PREPACK: 0
 * none, N: N MiB, all: no limit), B is packed into the wide SGEMM's B-panel
 * layout (sgemm.h kiln_sgemm_wide_pack_b), when kiln_sgemm_pack_reader() is
 * set at plan time; one pack per B whatever nodes read it. B stays (the
 * same readers as Conv's W). The packs are registered by B's data pointer
 * until kiln_cpu_gemm_packs_free. */
typedef struct kiln_cpu_gemm_packs kiln_cpu_gemm_packs;
kiln_status kiln_cpu_gemm_prepack(const kiln_graph *g, kiln_cpu_gemm_packs **out, size_t *bytes);
void kiln_cpu_gemm_packs_free(kiln_cpu_gemm_packs *p);
typedef struct kiln_cpu_gemm_pack {
  const float *src;
  int64_t K, N;
  float *data;
} kiln_cpu_gemm_pack;
/* The pack made from B data b (K x N, leading dimension ldb == N), or
 * NULL. Valid while the plan that made it lives; read it only with
 * kiln_sgemm_pack_reader()'s micro-kernel (kiln_sgemm_wide_pb). */
const float *kiln_cpu_gemm_pack_find(const float *b, int64_t K, int64_t N, int64_t ldb);

#endif
