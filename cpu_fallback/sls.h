/* cpu_fallback/sls: the inner loops of kiln's custom-domain kernels
 * (SparseLengthsSum family over float32 / float16 / 8-bit rowwise tables,
 * rowwise quantization and dequantization), each as a portable scalar twin
 * (`*_base`, sls.c) and an AVX2/FMA version (`*_avx2_fma`, sls_avx2.c, the
 * only file built with -mavx2 -mfma -mf16c; call it only where
 * kiln_sls_isa_ok(KILN_VM_ISA_AVX2) is true). The operator kernels in sls.c
 * decode and check a call (reference/ops_kiln.h), then run one of these.
 * Internal to cpu_fallback/ and its tests. */
#ifndef KILN_CPU_FALLBACK_SLS_H
#define KILN_CPU_FALLBACK_SLS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_fallback/vmath.h"
#include "reference/ops_kiln.h"

/* One segment reduction over dense data: for each segment m,
 * out[m, :] = Σ_{j ∈ [start[m], start[m+1])} w_j · row(indices[j]), divided
 * by the segment's length when mean (an empty segment gives zeros). Rows
 * are read at data + r·row_bytes: dim floats / halves, or dim bytes followed
 * by a float scale and a float bias (value = q·scale + bias). The weights
 * are weights[j] (positional: weights[j − start[m]]), or 1 when NULL.
 * Each index is checked as it is read: the first one outside [0, rows)
 * stops the job with *bad set to its position (else *bad = -1); the output
 * is then partly written. */
/* Both versions prefetch the row this many indices ahead in a segment
 * (Caffe2's EmbeddingLookup kernels use 16). */
#define KILN_SLS_PREFETCH 16

typedef struct kiln_sls_job {
  kiln_sls_table table;
  const uint8_t *data;
  size_t row_bytes;
  int64_t rows, dim;
  const void *indices;
  bool idx64; /* int64 indices, else int32 */
  const int64_t *start;
  int64_t m;
  const float *weights;
  bool positional, mean;
  float *out; /* [m, dim] */
  int64_t bad;
} kiln_sls_job;

void kiln_sls_base(kiln_sls_job *j);
void kiln_sls_avx2_fma(kiln_sls_job *j);
/* The job's bags split over the cpu pool (tasks of ~2048 indices, each bag
 * whole in one task; one task under 4096 indices or without a pool): the
 * serial kernel's bits, and its first bad index, for any thread count. */
void kiln_sls_run(kiln_sls_job *j, bool avx2);

/* FloatToFused8BitRowwiseQuantized over rows of d floats: y rows of d + 8
 * bytes (kiln_rowwise_quantize_row's arithmetic; bit-exact twins). */
void kiln_rowwise_quant_base(const float *x, int64_t rows, int64_t d, uint8_t *y);
void kiln_rowwise_quant_avx2_fma(const float *x, int64_t rows, int64_t d, uint8_t *y);
/* Fused8BitRowwiseQuantizedToFloat: y = q·scale + bias in float (a product
 * then a sum, no fma: bit-exact twins and reference). */
void kiln_rowwise_dequant_base(const uint8_t *x, int64_t rows, int64_t d, float *y);
void kiln_rowwise_dequant_avx2_fma(const uint8_t *x, int64_t rows, int64_t d, float *y);

/* True when the kernels of isa can run on this CPU (AVX2: AVX2, FMA, the
 * OS's YMM state and F16C). */
bool kiln_sls_isa_ok(kiln_vm_isa isa);
/* The version the operator kernels use: kiln_vm_isa_active() (KILN_CPU_ISA),
 * base when that is avx2 without F16C; kiln_sls_force_isa overrides it (for
 * tests: KILN_VM_NISA restores the default; a version the CPU cannot run
 * is ignored). */
kiln_vm_isa kiln_sls_isa(void);
void kiln_sls_force_isa(kiln_vm_isa isa);

#endif
