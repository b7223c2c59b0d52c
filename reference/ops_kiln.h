/* reference/ops_kiln: the call decoding that the reference kernels of
 * kiln's own domain (KILN_DOMAIN, docs/KILN_DOMAIN.md) share with the cpu
 * backend's fast kernels (cpu_fallback/sls.c), so that both accept the same
 * calls and fail with the same messages. */
#ifndef KILN_REFERENCE_OPS_KILN_H
#define KILN_REFERENCE_OPS_KILN_H
#include <stdbool.h>
#include <stdint.h>

#include "reference/ops.h"

/* Bytes at the end of a Fused8BitRowwise row: float scale, float bias. */
#define KILN_ROWWISE_TAIL 8

typedef enum kiln_sls_table {
  KILN_SLS_F32,  /* DATA float32 [R, d1..dk] */
  KILN_SLS_F16,  /* DATA float16 [R, d1..dk] */
  KILN_SLS_U8ROW /* DATA uint8 [R, D + 8]: D values, then scale, bias */
} kiln_sls_table;

/* A SparseLengths{Sum,WeightedSum,Mean}[Fused8BitRowwise] call, decoded
 * and checked up to the index values (which the kernels check as they read
 * them, with kiln_sls_bad_index). */
typedef struct kiln_sls_spec {
  kiln_sls_table table;
  const kiln_tensor *data, *weights, *indices; /* weights NULL unless weighted */
  int64_t rows;      /* R */
  int64_t dim;       /* output elements per segment (D, or d1·…·dk) */
  int64_t row_elems; /* elements of DATA per row (dim, or D + 8 bytes) */
  int64_t n;         /* number of indices */
  int64_t m;         /* number of segments */
  int64_t *start;    /* m + 1 segment boundaries into indices (owned) */
  bool positional;   /* weight of the j-th index of a segment: weights[j] */
  bool mean;         /* divide each segment by its length (empty: zeros) */
  kiln_tensor wrapped; /* negative_indices = 1: the indices, int64, each in [0, rows) (indices points here) */
  int out_rank;
  int64_t out_dims[KILN_MAX_RANK]; /* [m, D] or [m, d1..dk]; float32 */
} kiln_sls_spec;

/* A mistake in LENGTHS / OFFSETS, and the message it gets
 * (kiln_sls_seg_fail: a, b, c as each case below names them; n the
 * indices, wn the positional weights). */
typedef enum kiln_sls_seg_error {
  KILN_SLS_NEG_LENGTH = 1, /* LENGTHS[b] = a < 0 */
  KILN_SLS_LENGTHS_OVER,   /* the lengths pass n at segment b */
  KILN_SLS_LENGTHS_SUM,    /* they add up to a, not n */
  KILN_SLS_OFFSET0,        /* OFFSETS[0] = a, not 0 */
  KILN_SLS_OFFSET_RANGE,   /* OFFSETS[b] = a outside [c, n] */
  KILN_SLS_OFFSETS_EMPTY,  /* no offsets, n > 0 */
  KILN_SLS_POSITIONAL      /* a segment of a indices, wn positional weights */
} kiln_sls_seg_error;
kiln_status kiln_sls_seg_fail(kiln_sls_seg_error e, int64_t a, int64_t b, int64_t c, int64_t n, int64_t wn);

/* The M + 1 segment starts (start, room for seg's M + 1) of LENGTHS or
 * OFFSETS seg over n indices, checked as the op defines them (a length
 * negative or past the indices, lengths not adding up to n, offsets not
 * starting at 0, decreasing or past n; with wn >= 0, a segment longer than
 * the wn positional weights): KILN_E_INVALID_VALUE and the message.
 * *longest: the longest segment. Shared by the host kernels and the OpenCL
 * op's constant segments. */
kiln_status kiln_sls_segments(const kiln_tensor *seg, bool offsets, int64_t n, int64_t wn, int64_t *start,
                              int64_t *longest);
/* Decodes and checks the call (shapes, types, lengths or offsets, the
 * weights' count); fails with KILN_E_INVALID_VALUE / _MISMATCH_SHAPE and a
 * message. On success sp->start must be released with kiln_sls_spec_free. */
kiln_status kiln_sls_decode(const kiln_op_call *c, kiln_sls_spec *sp);
void kiln_sls_spec_free(kiln_sls_spec *sp);
/* The error for index value idx at position j (outside [0, rows)). */
kiln_status kiln_sls_bad_index(const kiln_sls_spec *sp, int64_t j, int64_t idx);

/* An LSTMUnit call, decoded and checked. */
typedef struct kiln_lstmu_spec {
  const kiln_tensor *h_prev, *c_prev, *gates, *seq; /* seq NULL: every row valid */
  int64_t rows, d; /* N rows of D units; gates are [.., 4·D] in order i, f, o, g */
  int64_t t;       /* the timestep compared with seq[n] */
  float forget_bias;
  bool drop_states;
} kiln_lstmu_spec;

kiln_status kiln_lstmu_decode(const kiln_op_call *c, kiln_lstmu_spec *sp);

/* The 8-bit rowwise quantization of one row (Caffe2's
 * FloatToFused8BitRowwiseQuantized, in float32 exactly as Caffe2 writes it):
 * scale = (max − min) / 255, bias = min, q = rint((x − min) · 255 / (range
 * + 1e-8)), clamped to [0, 255] (NaN → 0). */
void kiln_rowwise_quantize_row(const float *x, int64_t d, uint8_t *out);

#endif
