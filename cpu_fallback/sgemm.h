/* cpu_fallback/sgemm: the dense float32 primitives under the MatMul, Gemm
 * and Conv kernels (gemm.c, conv.c) — a row-major SGEMM, the depthwise
 * convolution rows kernel, a strided gather, a stride-2 split and a row
 * copy — with their instruction-set
 * dispatch and kiln's thread count.
 *
 * Versions: under the AVX2 setting SGEMM is OpenBLAS's cblas_sgemm (which
 * picks its own kernels by cpuid: see GEMM_CONV.md on Debian 12's OpenBLAS
 * and AVX-512); under KILN_CPU_ISA=base it is kiln's own portable blocked C
 * GEMM (kiln_sgemm_base), so the two settings run independent code and the
 * tests compare them.
 * The depthwise rows kernel and the gather have scalar twins (sgemm.c) and
 * AVX2/FMA versions (sgemm_avx2.c, the only file of this family built with
 * -mavx2 -mfma); the depthwise rows kernel, the stride-2 split and the row
 * copy have AVX-512F versions (dw_avx512.c), used under the AVX2 setting
 * where kiln_la_cpu_has_avx512(). */
#ifndef KILN_CPU_FALLBACK_SGEMM_H
#define KILN_CPU_FALLBACK_SGEMM_H
#include <stdbool.h>
#include <stdint.h>

#include "cpu_fallback/pool.h"
#include "cpu_fallback/vmath.h"
#include "ir/status.h"
#include "ir/tensor.h"

/* The version the gemm/conv family runs: kiln_vm_isa_active() (cpuid +
 * KILN_CPU_ISA), unless a test forced one with kiln_la_force_isa. */
kiln_vm_isa kiln_la_isa(void);
/* For tests: force a version (KILN_VM_NISA: back to the default). A forced
 * AVX2 on a CPU without it is ignored. Not thread-safe against running
 * kernels. */
void kiln_la_force_isa(kiln_vm_isa isa);

/* kiln_cpu_num_threads (KILN_NUM_THREADS, OpenBLAS's thread count): pool.h. */

/* C = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T:
 * op(A) is M x K, op(B) is K x N, C is M x N with row stride ldc. A is
 * stored M x K (lda >= K) or, transA, K x M (lda >= M); likewise B. With
 * beta == 0, C is not read (it may hold garbage). Fails only on out of
 * memory (base version's packing buffers). */
kiln_status kiln_sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* The versions: base (portable blocked C: packs panels of A and B, a 4x8
 * register-tile micro-kernel, sums in float in k order per block) and
 * blas (cblas_sgemm). kiln_sgemm picks one by kiln_la_isa(). */
kiln_status kiln_sgemm_base(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
kiln_status kiln_sgemm_blas(bool transA, bool transB, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* ---- kiln's wide SGEMM (AVX-512 where usable; see GEMM_CONV.md) ----
 * Goto's blocked GEMM with a 12 x 32 register tile (KC 256 or a last slice of up to 320, MC 192,
 * NC 2048), C split into independent blocks run on the cpu pool
 * (pool.h). Every element of C gets the same operations in the same order
 * whatever the split and the thread count: the results are bit-identical
 * for any KILN_NUM_THREADS, and the AVX-512 micro-kernel equals its scalar
 * twin bit for bit (fmaf per term in k order, then beta·C added). */
#define KILN_SGEMM_WIDE_MR 12
#define KILN_SGEMM_WIDE_NR 32
/* C[0..mr)[0..nr) = acc + beta·C (beta 0: C not read), acc[r][c] = sum over
 * k < kc of ap[k·MR + r]·bp[k·NR + c] (one fma per term, k in order). */
typedef void (*kiln_sgemm_micro_fn)(int64_t kc, const float *restrict ap, const float *restrict bp, float beta,
                                    float *C, int64_t ldc, int mr, int nr);
void kiln_sgemm_micro_wide_base(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                int64_t ldc, int mr, int nr);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_sgemm_micro_wide_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                  int64_t ldc, int mr, int nr);
/* The micro-kernel reading A in place instead of a packed strip: row r of
 * the tile's A (kc floats) at A + r·lda, r < mr (rows past mr are not
 * read). The same fmas, in the same order, as the packed micro-kernel on
 * a strip packed with alpha 1: the same bits. The wide GEMM takes it
 * (no transposing pack of A per block) for a row-major A with alpha 1 of
 * at most KILN_SGEMM_DIRECT_A_BYTES (rows x lda) not packed ahead, lda
 * not a multiple of 512, N at most KILN_SGEMM_DIRECT_A_MAX_N, with no
 * post-op. */
typedef void (*kiln_sgemm_micro_a_fn)(int64_t kc, const float *A, int64_t lda, const float *restrict bp, float beta,
                                      float *C, int64_t ldc, int mr, int nr);
void kiln_sgemm_micro_a_base(int64_t kc, const float *A, int64_t lda, const float *restrict bp, float beta, float *C,
                             int64_t ldc, int mr, int nr);
void kiln_sgemm_micro_a_avx512(int64_t kc, const float *A, int64_t lda, const float *restrict bp, float beta,
                               float *C, int64_t ldc, int mr, int nr);
#define KILN_SGEMM_DIRECT_A_BYTES ((double)(2 << 20))
#define KILN_SGEMM_DIRECT_A_MAX_N 512
/* Tests and benches only (not thread-safe): false, the wide GEMM packs A as before. */
void kiln_sgemm_direct_a_enable(bool on);
#define KILN_SGEMM_WIDE_KC 256
/* The KC slices of a depth K: 256 rows each, except that the rest from
 * the last slice's start on is one slice when it is at most 320 rows (K =
 * 288, a 3x3 conv over 32 channels: one slice, not 256 + 32 with C stored
 * and reloaded). kiln_sgemm_wide_kc: the length of the slice starting at
 * p0; kiln_sgemm_wide_slice: the start of the slice holding row r. Every
 * path of the wide GEMM (packs, the few-rows kernel, conv's im2col into
 * the B-panel layout) slices K this way. */
#define KILN_SGEMM_WIDE_KC_LAST 320
static inline int64_t kiln_sgemm_wide_kc(int64_t K, int64_t p0) {
  return K - p0 <= KILN_SGEMM_WIDE_KC_LAST ? K - p0 : KILN_SGEMM_WIDE_KC;
}
static inline int64_t kiln_sgemm_wide_slice(int64_t K, int64_t r) {
  int64_t last = K <= KILN_SGEMM_WIDE_KC_LAST
                     ? 0
                     : (K - KILN_SGEMM_WIDE_KC_LAST + KILN_SGEMM_WIDE_KC - 1) / KILN_SGEMM_WIDE_KC * KILN_SGEMM_WIDE_KC;
  int64_t p0 = r / KILN_SGEMM_WIDE_KC * KILN_SGEMM_WIDE_KC;
  return p0 < last ? p0 : last;
}
/* The number of KC slices of K >= 1 (the last one's start over KC, plus one). */
static inline int64_t kiln_sgemm_wide_slices(int64_t K) {
  return kiln_sgemm_wide_slice(K, K - 1) / KILN_SGEMM_WIDE_KC + 1;
}
/* The few-rows kernel the wide GEMM runs instead of packing when M <=
 * KILN_SGEMM_ROWS_MAX and B is not transposed (a Gemm or MatMul on one
 * vector, Flatten + Gemm heads): columns [j0, j1) of C = alpha·op(A)·B +
 * beta·C, B read in place, no packing. Each element gets exactly the wide
 * GEMM's operations (per KC slice: fma per term in k order from zero, alpha
 * folded into A as the packing does, then acc + beta·C at the first slice
 * and acc + C after), so results equal the packed path's bit for bit.
 * acc: scratch of M · (j1 - j0) floats (the AVX-512 version's accumulators
 * when the block is wider than 64 columns). */
#define KILN_SGEMM_ROWS_MAX 4
typedef void (*kiln_sgemm_rows_fn)(bool transA, int64_t M, int64_t j0, int64_t j1, int64_t K, float alpha,
                                   const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                                   int64_t ldc, float *acc);
void kiln_sgemm_rows_base(bool transA, int64_t M, int64_t j0, int64_t j1, int64_t K, float alpha, const float *A,
                          int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, float *acc);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_sgemm_rows_avx512(bool transA, int64_t M, int64_t j0, int64_t j1, int64_t K, float alpha, const float *A,
                            int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc, float *acc);
/* The wide GEMM with the given micro-kernel (same contract as kiln_sgemm);
 * with few rows, the rows kernel of the same family (the base twin for
 * kiln_sgemm_micro_wide_base). */
kiln_status kiln_sgemm_wide(kiln_sgemm_micro_fn micro, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                            float alpha, const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                            int64_t ldc);
/* A pre-packed (see GEMM_CONV.md, "Conv weights packed once"): the
 * M x K row-major A (lda >= K, alpha 1, not transposed) in the wide GEMM's
 * A-panel layout for all of M and K at once: per KC slice p0 (kc =
 * kiln_sgemm_wide_kc(K, p0)), the ceil(M / 12) strips of 12 rows, each kc x 12
 * (row k of the strip = column p0 + k of its 12 rows, rows past M zero),
 * the slice at offset p0 · Mpad (Mpad = M rounded up to 12). The values are
 * exactly those the GEMM packs per call (a copy), so a product from the pack
 * is bit-identical to one from A. */
int64_t kiln_sgemm_wide_pack_a_floats(int64_t M, int64_t K);
void kiln_sgemm_wide_pack_a(const float *A, int64_t lda, int64_t M, int64_t K, float *dst);
/* The wide GEMM, C = apack · B + beta·C, A taken from a pack (B not
 * transposed). Same results as kiln_sgemm_wide(micro, false, false, M, N, K,
 * 1, A, ...) with the A the pack was made from. */
kiln_status kiln_sgemm_wide_pa(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *apack,
                               const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
/* B pre-packed: the K x N row-major B in the wide GEMM's B-panel layout
 * for all of K and N: per KC slice p0 (kc = kiln_sgemm_wide_kc(K, p0)), at offset
 * p0 · Npad (Npad = N rounded up to 32), the Npad / 32 strips of 32
 * columns, each kc x 32 (element (p0 + k, 32s + c) at s·kc·32 + k·32 + c;
 * columns past N zero). The values the GEMM packs per call, so a product
 * from it is bit-identical. conv.c's im2col writes this layout directly. */
int64_t kiln_sgemm_wide_pack_b_floats(int64_t K, int64_t N);
void kiln_sgemm_wide_pack_b(const float *B, int64_t ldb, int64_t K, int64_t N, float *dst);
/* The wide GEMM, C = A · bpack + beta·C: B from a pack, A from apack when
 * not NULL, else row-major A (lda, alpha 1, not transposed). */
kiln_status kiln_sgemm_wide_pb(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *A,
                               int64_t lda, const float *apack, const float *bpack, float beta, float *C,
                               int64_t ldc);
/* A MatMul's epilogue in the store (gemm.c, when the epilogue is exactly
 * y * scale or y + bias[column]): the micro-kernel of a tile's last KC
 * slice that, right after the beta step, multiplies by scale (unless it is
 * 1) and then adds cbias[c] to column c (unless cbias is NULL), A from its
 * packed strip ap or, when A is not NULL, read in place (row r at A + r·lda,
 * as kiln_sgemm_micro_a_fn). Each is one rounding of the stored value: the
 * bits of the store followed by a pass y = y * scale, then y = y + bias[c].
 * The base one is the twin's store, then those passes. */
typedef void (*kiln_sgemm_micro_cb_fn)(int64_t kc, const float *ap, const float *A, int64_t lda,
                                       const float *restrict bp, float beta, float *C, int64_t ldc, int mr, int nr,
                                       const float *cbias, float scale);
void kiln_sgemm_micro_cb_base(int64_t kc, const float *ap, const float *A, int64_t lda, const float *restrict bp,
                              float beta, float *C, int64_t ldc, int mr, int nr, const float *cbias, float scale);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_sgemm_micro_cb_avx512(int64_t kc, const float *ap, const float *A, int64_t lda, const float *restrict bp,
                                float beta, float *C, int64_t ldc, int mr, int nr, const float *cbias, float scale);
/* kiln_sgemm_micro_wide_avx512 and kiln_sgemm_micro_cb_avx512 with a
 * prefetch stream: at step k the line at pf + k·pfs is fetched into L2 (a
 * hint: the caller's share of the next block of weights read from memory,
 * spread over the call; never a fault, no value changes; GEMM_CONV.md
 * "Weights from memory"). Only callable where kiln_la_cpu_has_avx512() is
 * true. */
typedef void (*kiln_sgemm_micro_pf_fn)(int64_t kc, const float *restrict ap, const float *restrict bp, float beta,
                                       float *C, int64_t ldc, int mr, int nr, const float *pf, int64_t pfs);
typedef void (*kiln_sgemm_micro_cb_pf_fn)(int64_t kc, const float *ap, const float *A, int64_t lda,
                                          const float *restrict bp, float beta, float *C, int64_t ldc, int mr, int nr,
                                          const float *cbias, float scale, const float *pf, int64_t pfs);
void kiln_sgemm_micro_wide_pf_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float beta,
                                     float *C, int64_t ldc, int mr, int nr, const float *pf, int64_t pfs);
void kiln_sgemm_micro_cb_pf_avx512(int64_t kc, const float *ap, const float *A, int64_t lda, const float *restrict bp,
                                   float beta, float *C, int64_t ldc, int mr, int nr, const float *cbias, float scale,
                                   const float *pf, int64_t pfs);
/* C = (A · bpack) * scale + cbias (a row of N floats added to every row,
 * or NULL; beta 0), B from a pack as kiln_sgemm_wide_pb, A row-major (lda)
 * or from apack; scale and bias applied in the store of each tile's last KC
 * slice. micro is the twin or the AVX-512 kernel (KILN_E_INTERNAL
 * otherwise). The same bits as kiln_sgemm_wide_pb then the passes above. */
kiln_status kiln_sgemm_wide_pb_cb(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *A,
                                  int64_t lda, const float *apack, const float *bpack, float *C, int64_t ldc,
                                  const float *cbias, float scale);
/* The same with B not packed ahead (op(A), op(B) as kiln_sgemm_wide, alpha
 * 1): the attention scores' scaled product (a transposed K). */
kiln_status kiln_sgemm_wide_cb(kiln_sgemm_micro_fn micro, bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                               const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                               const float *cbias, float scale);
/* What the wide GEMM may do to each 12 x 32 tile of C right after its last
 * KC slice, while the tile is in L1 (Conv's bias and a Relu/Clip epilogue,
 * instead of a pass over the output): y = C + bias[row] (bias NULL: no
 * addition), then with clamp y = (y < lo ? lo : y), y = (y > hi ? hi : y)
 * (NaN stays): the operations of conv.c's bias pass and kiln_cpu_clamp, so
 * the values are the same. */
typedef struct kiln_sgemm_post {
  const float *bias; /* per row of C, or NULL */
  bool clamp;
  float lo, hi;
} kiln_sgemm_post;
void kiln_sgemm_post_base(float *C, int64_t ldc, int mr, int nr, const float *bias, bool clamp, float lo, float hi);
/* The micro-kernel of a tile's last KC slice with the post-op: the
 * micro-kernel's store, then kiln_sgemm_post_base on the tile. The AVX-512
 * version applies the bias and clamp to the accumulators before the store
 * (no reload of the tile; the same bits); the base one is the twin's store
 * followed by kiln_sgemm_post_base. */
typedef void (*kiln_sgemm_micro_post_fn)(int64_t kc, const float *restrict ap, const float *restrict bp, float beta,
                                         float *C, int64_t ldc, int mr, int nr, const float *bias, bool clamp,
                                         float lo, float hi);
void kiln_sgemm_micro_post_base(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                int64_t ldc, int mr, int nr, const float *bias, bool clamp, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_sgemm_micro_post_avx512(int64_t kc, const float *restrict ap, const float *restrict bp, float beta, float *C,
                                  int64_t ldc, int mr, int nr, const float *bias, bool clamp, float lo, float hi);
/* The wide GEMM from packs, C = A · B + beta·C, then post (NULL: none): A
 * from apack when not NULL, else row-major A (lda, not transposed); B from
 * bpack when not NULL, else row-major B (ldb). The post version follows
 * micro (the twin with the twin). */
kiln_status kiln_sgemm_wide_post(kiln_sgemm_micro_fn micro, int64_t M, int64_t N, int64_t K, const float *A,
                                 int64_t lda, const float *apack, const float *B, int64_t ldb, const float *bpack,
                                 float beta, float *C, int64_t ldc, const kiln_sgemm_post *post);
/* The micro-kernel that reads wide A packs under the current setting: the
 * AVX-512 one when kiln_sgemm would run kiln's wide GEMM (AVX2 setting,
 * AVX-512F usable, KILN_SGEMM not blas), else NULL (base setting: the
 * portable GEMM, or OpenBLAS: neither reads these packs). */
kiln_sgemm_micro_fn kiln_sgemm_pack_reader(void);
/* The direct convolution's micro-kernel (conv.c, GEMM_CONV.md "Direct
 * convolution"): the wide micro-kernel with the post-op whose row k of B is
 * two runs of 16 floats, at x + off[k] and x + off[k] + xhi (a padded
 * input plane read in place, no im2col; xhi 16: 32 consecutive floats;
 * another xhi: two output rows of 16, or two halves of one) instead of a
 * packed strip: C[0..mr)[0..nr) = acc + beta·C, then the bias and clamp of
 * kiln_sgemm_post_base, acc[r][c] = sum over k < kc of ap[k·MR + r]·b_k[c]
 * with b_k[c] = x[off[k] + c] for c < 16, x[off[k] + xhi + c - 16] after
 * (one fma per term, k in order). The same operations as the packed
 * micro-kernel on the im2col of x, so the same bits. Reads only the
 * columns below nr of each row of B (masked loads in the AVX-512 version:
 * the pointwise path reads the input tensor in place, to its last
 * element). */
typedef void (*kiln_conv_direct_fn)(int64_t kc, const float *restrict ap, const float *x, const int64_t *off,
                                    int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                    const float *bias, bool clamp, float lo, float hi);
void kiln_conv_direct_micro_base(int64_t kc, const float *restrict ap, const float *x, const int64_t *off,
                                 int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr, const float *bias,
                                 bool clamp, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_conv_direct_micro_avx512(int64_t kc, const float *restrict ap, const float *x, const int64_t *off,
                                   int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr, const float *bias,
                                   bool clamp, float lo, float hi);
/* The AVX-512 one where kiln_sgemm_pack_reader() is set, else NULL. */
kiln_conv_direct_fn kiln_conv_direct_micro(void);
/* The same, with A read in place instead of a packed strip: ap[k·MR + r]
 * above is A[r·lda + k] here, r < mr (rows past mr are not read), the
 * values a strip packed from A's rows holds, so the same bits. The direct
 * conv reads a W too big to be packed once this way, instead of packing
 * (transposing) a 12-row strip of it per task on every run. */
typedef void (*kiln_conv_direct_a_fn)(int64_t kc, const float *A, int64_t lda, const float *x, const int64_t *off,
                                      int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                      const float *bias, bool clamp, float lo, float hi);
void kiln_conv_direct_micro_a_base(int64_t kc, const float *A, int64_t lda, const float *x, const int64_t *off,
                                   int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr, const float *bias,
                                   bool clamp, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_conv_direct_micro_a_avx512(int64_t kc, const float *A, int64_t lda, const float *x, const int64_t *off,
                                     int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                     const float *bias, bool clamp, float lo, float hi);
/* The AVX-512 one where kiln_conv_direct_micro() gives its AVX-512 kernel,
 * else NULL. */
kiln_conv_direct_a_fn kiln_conv_direct_micro_a(void);
/* The two AVX-512 direct kernels prefetch row k + 16 of B into L1 (the
 * taps jump about the input planes). Their _stream forms do not (for rows
 * of B read in storage order: the pointwise path, input channels one after
 * another; that hint cost 2-9 % on MobileNetV2's 1x1 layers): they fetch
 * each row's columns two tiles on (64..95 from the tile's first) into L2
 * instead, the strip's tile after next — the hardware prefetchers track
 * fewer rows than a layer's K (MobileNetV2's 56 x 56 projections, K 96 and
 * 144: 0.72 of their time). The same results. Only callable where
 * kiln_la_cpu_has_avx512() is true. */
void kiln_conv_direct_micro_stream_avx512(int64_t kc, const float *restrict ap, const float *x, const int64_t *off,
                                          int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                          const float *bias, bool clamp, float lo, float hi);
void kiln_conv_direct_micro_a_stream_avx512(int64_t kc, const float *A, int64_t lda, const float *x,
                                            const int64_t *off, int64_t xhi, float beta, float *C, int64_t ldc,
                                            int mr, int nr, const float *bias, bool clamp, float lo, float hi);
/* Replaces the AVX-512 direct kernels by their _stream forms (others are
 * kept). */
void kiln_conv_direct_streams(kiln_conv_direct_fn *micro, kiln_conv_direct_a_fn *amicro);
/* The in-place-A kernel that also prefetches A's rows 4 lines ahead (a W
 * read from memory: ResNet-18's 4.7 and 9.4 MB l4 weights, 3-4 % faster a
 * layer; its 2.4 MB l3 weights, from L3, 2 % slower with it), for the
 * AVX-512 one; others are returned as they are. The same results. */
kiln_conv_direct_a_fn kiln_conv_direct_far(kiln_conv_direct_a_fn amicro);
void kiln_conv_direct_micro_a_far_avx512(int64_t kc, const float *A, int64_t lda, const float *x, const int64_t *off,
                                         int64_t xhi, float beta, float *C, int64_t ldc, int mr, int nr,
                                         const float *bias, bool clamp, float lo, float hi);
/* The direct convolution with lanes over output channels (conv.c "channel
 * tiles", GEMM_CONV.md): a tile of 14 output pixels along one output row
 * by 32 output channels, in 28 accumulators, one KC slice: per k, the two
 * vectors of 32 channels at wt (W transposed, kc x 32, wt += 32 per k) and
 * the 14 pixels' inputs x[off[k] + p] broadcast (pixels p >= 7 at
 * x[off[k] + jump + p]: jump 0 for 14 pixels of one row; two output rows of
 * 7 with jump = the plane's row pitch - 7). T (14 x 32, pixel-major)
 * = acc (beta 0) or acc + T (add: beta 1), acc[p][c] = sum over k < kc of
 * wt[k·32 + c]·x[off[k] + p (+ jump)], one fma per term, k in order; pf
 * (not NULL): at step k the line at pf + k·pfs is fetched into L2 (a
 * hint: the next slice of W^T while this one is read from L1, spread over
 * the slice; never a fault, no value changes; the twin ignores it): the fmas of
 * the 12 x 32 direct tile on the same output element (the product's
 * operands swapped, which is exact), so the same bits. */
#define KILN_CONV_CT_PX 14
#define KILN_CONV_CT_HALF 7 /* pixels [7, 14) read jump floats further on */
typedef void (*kiln_conv_ct_fn)(int64_t kc, const float *wt, const float *x, const int64_t *off, int64_t jump,
                                const float *pf, int64_t pfs, float *T, bool add);
void kiln_conv_ct_micro_base(int64_t kc, const float *wt, const float *x, const int64_t *off, int64_t jump,
                             const float *pf, int64_t pfs, float *T, bool add);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_conv_ct_micro_avx512(int64_t kc, const float *wt, const float *x, const int64_t *off, int64_t jump,
                               const float *pf, int64_t pfs, float *T, bool add);
/* The AVX-512 one where kiln_conv_direct_micro() gives its AVX-512 kernel,
 * else NULL. */
kiln_conv_ct_fn kiln_conv_ct_micro(void);
/* A finished tile T (14 x 32, pixel-major, as the micro-kernel leaves it)
 * into Y: for each channel c < nc, y[c·ldy + p] = post(T[p·32 + c]), p <
 * px (<= 14; nothing else of Y written), where post adds bias[c] (bias non-NULL) and then clamps to [lo, hi]
 * (clamp) with the comparisons of kiln_sgemm_post_base (NaN kept), so the
 * same bits. The AVX-512 one loads T's pixel rows as vectors, does the
 * bias and clamp on them and transposes each 16-channel half in registers
 * (GEMM_CONV.md: ResNet-18's l1 0.96 against the scalar store). */
typedef void (*kiln_conv_ct_store_fn)(const float *T, int64_t nc, int px, const float *bias, bool clamp, float lo,
                                      float hi, float *y, int64_t ldy);
void kiln_conv_ct_store_base(const float *T, int64_t nc, int px, const float *bias, bool clamp, float lo, float hi,
                             float *y, int64_t ldy);
/* Only callable where kiln_la_cpu_has_avx512() is true. */
void kiln_conv_ct_store_avx512(const float *T, int64_t nc, int px, const float *bias, bool clamp, float lo,
                               float hi, float *y, int64_t ldy);
/* The AVX-512 one where kiln_conv_ct_micro() gives its AVX-512 kernel,
 * else the twin. */
kiln_conv_ct_store_fn kiln_conv_ct_store(void);
/* W (Mg x Kc row-major, one group) transposed into the wide GEMM's
 * B-panel layout, as kiln_sgemm_wide_pack_b would pack W^T: per KC slice
 * p0 (kc = kiln_sgemm_wide_kc(Kc, p0)) at p0 · Mpad (Mpad = Mg rounded up
 * to 32), blocks of 32 output channels, kc x 32 each (element (p0 + k,
 * 32s + c) at s·kc·32 + k·32 + c; channels past Mg zero). The channel
 * tile reads block s of slice p0 at dst + p0·Mpad + s·kc·32. */
int64_t kiln_conv_ct_pack_floats(int64_t Mg, int64_t Kc);
void kiln_conv_ct_pack(const float *W, int64_t Mg, int64_t Kc, float *dst);
/* AVX-512F usable: cpuid leaf 7 EBX bit 16 (and AVX2/FMA), and the OS
 * saves the opmask and ZMM state (XCR0 bits 1, 2, 5, 6, 7). Cached. */
int kiln_la_cpu_has_avx512(void);
/* Which SGEMM kiln_sgemm runs under the AVX2 setting: kiln's wide GEMM
 * with the AVX-512 micro-kernel where AVX-512F is usable, else OpenBLAS.
 * KILN_SGEMM=blas forces OpenBLAS (read once). */
typedef enum { KILN_SGEMM_BLAS, KILN_SGEMM_AVX512 } kiln_sgemm_impl;
kiln_sgemm_impl kiln_sgemm_active(void);
/* For tests and benches: force one (-1: back to the default). Not
 * thread-safe against running kernels; AVX512 where not usable is ignored. */
void kiln_sgemm_force(int impl);

/* The depthwise rows kernel: y[r · ys + i] = clamp(bias + sum_{j < nk}
 * w[j] * src[j][r · ss + i], lo, hi) for r < rows, i < n (src[j] are rows
 * of a padded, stride-phase-split input plane, see conv.c). Sums in j
 * order from bias, one fused multiply-add per term, then v < lo ? lo : v and
 * v > hi ? hi : v (NaN kept; -inf, +inf: no clamp) in every version, so all
 * give the same bits. */
typedef void (*kiln_dw_rows_fn)(float *y, int64_t ys, const float *const *src, int64_t ss, int64_t rows, int64_t n,
                                const float *w, int nk, float bias, float lo, float hi);
void kiln_dw_rows_base(float *y, int64_t ys, const float *const *src, int64_t ss, int64_t rows, int64_t n,
                       const float *w, int nk, float bias, float lo, float hi);
/* Only callable where kiln_vm_cpu_has_avx2() is true; row by row (eight
 * 8-lane chains within a row). */
void kiln_dw_rows_avx2_fma(float *y, int64_t ys, const float *const *src, int64_t ss, int64_t rows, int64_t n,
                           const float *w, int nk, float bias, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true (dw_avx512.c);
 * eight 16-lane chains taken across rows. */
void kiln_dw_rows_avx512(float *y, int64_t ys, const float *const *src, int64_t ss, int64_t rows, int64_t n,
                         const float *w, int nk, float bias, float lo, float hi);
/* The version for kiln_la_isa(): under the AVX2 setting the AVX-512F one
 * where it is usable. *across: whether it fills its chains across rows
 * (short rows then need no flat form). */
kiln_dw_rows_fn kiln_dw_rows(bool *across);

/* Depthwise on a small plane read in place (no padded copy): y[p] for p <
 * n (n <= KILN_DW_PLANE_MAX) is bias, then for each tap j in order
 * fmaf(w[j], v, acc) with v = x[p + toff[j]] where bit p % 16 of
 * masks[j·nv + p / 16] is set (nv = (n + 15) / 16) and 0 where it is not
 * (the padding), then the clamp of kiln_dw_rows. Only elements under a set
 * bit are read (the masks say where a tap falls inside the input); the
 * same operations, in the same order, as kiln_dw_rows on the padded plane,
 * so the same bits. conv.c takes it for stride-1 'same' planes (output
 * dims = input dims: p numbers both, a tap is a constant shift). */
#define KILN_DW_PLANE_MAX 256
typedef void (*kiln_dw_plane_fn)(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                                 const float *w, int nk, float bias, float lo, float hi);
void kiln_dw_plane_base(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                        const float *w, int nk, float bias, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true (dw_avx512.c). */
void kiln_dw_plane_avx512(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                          const float *w, int nk, float bias, float lo, float hi);
/* The AVX-512 one where kiln_dw_rows would give the AVX-512 rows kernel,
 * else NULL (the padded-plane path). */
kiln_dw_plane_fn kiln_dw_plane(void);
/* Two channels at once: kiln_dw_plane of (y, x, w, b0) and of (y + n,
 * x + n, w + nk, b1), the same bits (the twin is those two calls). */
typedef void (*kiln_dw_plane2_fn)(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                                  const float *w, int nk, float b0, float b1, float lo, float hi);
/* The AVX-512 one where kiln_dw_plane gives the AVX-512 kernel, else NULL. */
kiln_dw_plane2_fn kiln_dw_plane2(void);
void kiln_dw_plane2_base(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                         const float *w, int nk, float b0, float b1, float lo, float hi);
/* Only callable where kiln_la_cpu_has_avx512() is true (dw_avx512.c). */
void kiln_dw_plane2_avx512(float *y, const float *x, int64_t n, const int64_t *toff, const uint16_t *masks,
                           const float *w, int nk, float b0, float b1, float lo, float hi);

#endif

/* Strided gather: dst[i] = src[i * stride] for i < n (stride >= 1). Reads
 * no element past src[(n - 1) * stride]. The AVX2 version deinterleaves
 * stride 2 with shuffles (im2col and depthwise planes of stride-2 convs). */
typedef void (*kiln_la_gather_fn)(float *dst, const float *src, int64_t n, int64_t stride);
void kiln_la_gather_base(float *dst, const float *src, int64_t n, int64_t stride);
void kiln_la_gather_avx2(float *dst, const float *src, int64_t n, int64_t stride);
kiln_la_gather_fn kiln_la_gather(void);

/* Stride-2 split: even[t] = src[2t] for t < (n + 1) / 2, odd[t] =
 * src[2t + 1] for t < n / 2, in one pass; reads src[0 .. n) and writes
 * nothing else. */
typedef void (*kiln_la_split2_fn)(float *even, float *odd, const float *src, int64_t n);
void kiln_la_split2_base(float *even, float *odd, const float *src, int64_t n);
/* Only callable where kiln_la_cpu_has_avx512() is true (dw_avx512.c). */
void kiln_la_split2_avx512(float *even, float *odd, const float *src, int64_t n);
/* The AVX-512F one under the AVX2 setting where it is usable, else NULL
 * (callers then gather each phase: kiln_la_gather). */
kiln_la_split2_fn kiln_la_split2(void);

/* Row copy: dst[r · dst_stride + i] = src[r · src_stride + i] for r < rows,
 * i < n (n >= 0; rows must not overlap); touches nothing else. The
 * AVX-512F one copies by vectors and an opmask tail, no call per row (rows
 * of 7..56 floats in the depthwise path). */
typedef void (*kiln_la_copy_rows_fn)(float *dst, int64_t dst_stride, const float *src, int64_t src_stride,
                                     int64_t rows, int64_t n);
void kiln_la_copy_rows_base(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                            int64_t n);
/* Only callable where kiln_la_cpu_has_avx512() is true (dw_avx512.c). */
void kiln_la_copy_rows_avx512(float *dst, int64_t dst_stride, const float *src, int64_t src_stride, int64_t rows,
                              int64_t n);
/* The AVX-512F one under the AVX2 setting where it is usable, else the
 * twin (a memcpy per row). */
kiln_la_copy_rows_fn kiln_la_copy_rows(void);

/* ---- helpers the gemm/conv kernels share ---- */

/* Gives output t dtype float32 and shape (rank, dims), like
 * kiln_tensor_alloc, but does not zero an arena reservation: the caller
 * writes every element. */
kiln_status kiln_la_alloc_out(kiln_tensor *t, int rank, const int64_t *dims);

/* Output-block size (bytes) for epilogues: a kernel called with an epilogue
 * computes its output in blocks of about this size (whole rows or channel
 * runs) and applies the epilogue to each block right after computing it. */
#define KILN_LA_EPILOGUE_BLOCK (512 * 1024)
