/* ir/tensor: a dense, contiguous, row-major tensor in host memory, and the
 * element access and shape helpers the scalar kernels share. */
#ifndef KILN_IR_TENSOR_H
#define KILN_IR_TENSOR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/dtype.h"
#include "ir/status.h"

#define KILN_MAX_RANK 8
/* Largest element count of one tensor (guards against hostile shapes). */
#define KILN_MAX_NUMEL ((int64_t)1 << 34)

typedef struct kiln_tensor {
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t numel;
  void *data;
  bool owns; /* data was allocated by kiln_tensor_alloc and is freed with it */
  /* Bytes reserved at data (not owned) for kiln_tensor_alloc to fill, as a
   * plan's arena slot; 0 when none. */
  size_t capacity;
  bool keep; /* the reservation already holds data the writer reads first
                (an in-place step): kiln_tensor_alloc does not zero it */
  /* A strided view (read-only): element i of the row-major index space is
   * data[offset + sum(idx[d] * strides[d])]. Dense tensors have strided
   * false; kiln_get_*, kiln_copy_elem and kiln_tensor_copy read views. */
  bool strided;
  int64_t offset;
  int64_t strides[KILN_MAX_RANK];
  /* A view that is no one strided map (a reshape of a transpose): a stack
   * of views (ir/views) mapping each flat index to storage; strided is true
   * too, offset and strides unused. Not owned by the tensor. */
  const struct kiln_views *stack;
} kiln_tensor;

/* Number of elements of a shape, checked: fails (KILN_E_UNSUPPORTED_SHAPE)
 * on a negative dim or a count beyond KILN_MAX_NUMEL. */
kiln_status kiln_shape_numel(int rank, const int64_t *dims, int64_t *numel);

/* Sets dtype/shape and allocates zeroed storage (owned). t's previous data
 * is not freed. rank may be 0 (a scalar, one element). When t carries a
 * reservation (data not owned, capacity >= the bytes needed) the storage is
 * that reservation, zeroed, and stays not owned. */
kiln_status kiln_tensor_alloc(kiln_tensor *t, kiln_dtype dtype, int rank, const int64_t *dims);
/* Sets dtype/shape over borrowed data (not freed by kiln_tensor_release). */
void kiln_tensor_wrap(kiln_tensor *t, kiln_dtype dtype, int rank, const int64_t *dims, int64_t numel,
                      void *data);
/* Makes t a read-only strided view of base's storage (base must be dense):
 * shape (rank, dims), element strides and offset, in elements. The caller
 * guarantees every reachable element lies inside base. */
void kiln_tensor_view(kiln_tensor *t, const kiln_tensor *base, int rank, const int64_t *dims,
                      const int64_t *strides, int64_t offset);
/* Storage element index of flat (row-major) element i of t. */
int64_t kiln_tensor_index(const kiln_tensor *t, int64_t i);
/* Frees owned data and resets t to empty. */
void kiln_tensor_release(kiln_tensor *t);
/* Deep copy (dst gets owned storage). */
kiln_status kiln_tensor_copy(kiln_tensor *dst, const kiln_tensor *src);
size_t kiln_tensor_bytes(const kiln_tensor *t);

/* Element access by flat index, converting: floats (f16/bf16 too) read as
 * double, integers and bool as int64 (uint64 as its bit pattern). Writing a
 * double into an integer tensor truncates toward zero, saturating. */
double kiln_get_f(const kiln_tensor *t, int64_t i);
int64_t kiln_get_i(const kiln_tensor *t, int64_t i);
void kiln_set_f(kiln_tensor *t, int64_t i, double v);
void kiln_set_i(kiln_tensor *t, int64_t i, int64_t v);
/* Copies element si of src into element di of dst (same dtype). */
void kiln_copy_elem(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si);
/* Copies src's elements at .. at + n - 1 (row-major flat indices, views
 * read through their maps) densely into dst, es bytes each. */
void kiln_tensor_read(void *dst, const kiln_tensor *src, int64_t at, int64_t n);
/* Gathers one strided map of dense storage src into dense dst: for each
 * row-major multi-index idx over dims[0..rank), the element at
 * offset + sum(idx[d] * strides[d]) (strides in elements, any sign; 0
 * repeats), es bytes each. */
void kiln_gather_map(void *dst, const void *src, size_t es, int rank, const int64_t *dims, const int64_t *strides,
                     int64_t offset);

/* Reads a 0-D or 1-D integer tensor (int32/int64) into out (at most max
 * values); *n gets the count. Used for shape-setting inputs. */
kiln_status kiln_tensor_ints(const kiln_tensor *t, int64_t *out, int max, int *n);

/* Row-major strides (in elements) of a shape. */
void kiln_strides(int rank, const int64_t *dims, int64_t *strides);
/* Multidirectional (numpy) broadcast of a and b into out; fails with
 * KILN_E_MISMATCH_SHAPE naming both shapes. */
kiln_status kiln_broadcast_shape(int ra, const int64_t *a, int rb, const int64_t *b, int *rout,
                                 int64_t *out);
/* Strides for reading t as if it had shape (rank, dims) after broadcasting:
 * broadcast dims get stride 0. t's rank must be <= rank. */
void kiln_broadcast_strides(const kiln_tensor *t, int rank, const int64_t *dims, int64_t *strides);
/* Flat index -> multi-index for a shape. */
void kiln_unravel(int64_t flat, int rank, const int64_t *dims, int64_t *idx);

/* Normalises an axis in [-rank, rank) to [0, rank); fails otherwise. */
kiln_status kiln_norm_axis(int64_t axis, int rank, int *out);

/* Formats a shape as "[2,3,4]" into buf. Returns buf. */
const char *kiln_shape_str(int rank, const int64_t *dims, char *buf, int size);

#endif
