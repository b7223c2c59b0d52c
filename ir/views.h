/* ir/views: the pure view algebra — strided views of a storage (shape,
 * element strides, offset, optional validity mask), the movement ops as pure
 * functions on them, and view stacks for maps that one strided view cannot hold. */
#ifndef KILN_IR_VIEWS_H
#define KILN_IR_VIEWS_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/status.h"
#include "ir/tensor.h"

/* Bound on |offset| and on the reach sum(|stride| * (dim - 1)) of a view, in
 * elements: keeps every derived offset far from int64 overflow. */
#define KILN_VIEW_MAX_SPAN ((int64_t)1 << 44)
/* Most views a stack holds; a deeper composition must be materialised. */
#define KILN_VIEWS_MAX_DEPTH 8

/* A view: element (i_0 .. i_{r-1}) reads storage element
 * offset + sum(i_d * strides[d]) when mask_lo[d] <= i_d < mask_hi[d] for
 * every d, and nothing (the caller's pad constant) otherwise. Views are
 * values: only kiln_view_make and the ops below create them, and they always
 * leave them normalised (see kiln_view_make); kiln_view_same_map compares
 * two maps. */
typedef struct kiln_view {
  int rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK]; /* in elements; may be negative or zero */
  int64_t offset;                 /* element offset of index (0, ..., 0) */
  bool has_mask;                  /* false: every element is valid */
  bool all_masked;                /* no element is valid (implies has_mask) */
  int64_t mask_lo[KILN_MAX_RANK]; /* valid range [lo, hi) per dim; [0, dim) */
  int64_t mask_hi[KILN_MAX_RANK]; /* on every dim when !has_mask */
  int64_t numel;
  bool contiguous; /* row-major, offset 0, no mask: the storage itself */
} kiln_view;

/* The one normalising constructor. strides NULL means row-major; mask_lo and
 * mask_hi NULL (both) mean no mask. Guarantees on success: strides of size-1
 * dims are 0; a mask is clamped to the shape and dropped when it covers
 * everything; a dim whose mask admits one index gets stride 0 (the offset
 * absorbs it); a mask admitting nothing becomes [0,0) on every dim with zero
 * strides and offset; a view with no elements has zero strides and offset.
 * Fails (with a message) on rank > KILN_MAX_RANK, a negative dim, more than
 * KILN_MAX_NUMEL elements, or offsets beyond KILN_VIEW_MAX_SPAN. */
kiln_status kiln_view_make(int rank, const int64_t *shape, const int64_t *strides, int64_t offset,
                           const int64_t *mask_lo, const int64_t *mask_hi, kiln_view *out);
/* The contiguous row-major view of a shape (make with strides NULL). */
kiln_status kiln_view_contiguous(int rank, const int64_t *shape, kiln_view *out);

/* Storage element read by a flat (row-major) index of v; *valid (optional)
 * is false, and the result -1, where the mask hides the element. flat must
 * be in [0, numel). */
int64_t kiln_view_offset(const kiln_view *v, int64_t flat, bool *valid);
/* Same as above for a multi-index (rank entries, each within its dim). */
int64_t kiln_view_offset_at(const kiln_view *v, const int64_t *idx, bool *valid);

/* The same map with mergeable neighbouring dims merged and size-1 dims
 * dropped: the canonical form for comparing maps. *out has the same flat
 * index -> offset map (and validity) as v, over a shape of equal numel. */
void kiln_view_compact(const kiln_view *v, kiln_view *out);
/* Compares compact forms, without enumerating. True guarantees a and b have
 * the same shape and read the same element (or both nothing) at every index;
 * for unmasked views false guarantees some index differs. */
bool kiln_view_same_map(const kiln_view *a, const kiln_view *b);

/* Writes a one-line description ("[2,3] st [3,1] off 0 mask [..)") to buf. */
const char *kiln_view_str(const kiln_view *v, char *buf, int size);

/* --- Movement ops: pure functions. Each reads v, writes *out (which may be
 * v itself) and returns KILN_OK, or an error with a message and leaves *out
 * unchanged. Axes may be negative (counted from the end) as in ONNX. --- */

/* Reshape to shape[0..rank); one entry may be -1 (inferred). ONNX's "0 =
 * copy" is the caller's (shape inference) to resolve. *fits is false when
 * the result is not one strided view (a reshape of a transposed view, say):
 * then *out is the contiguous view of the new shape, which the caller puts
 * on top of v in a stack (kiln_views_push does). Masked views reshape when
 * the mask stays a box. */
kiln_status kiln_view_reshape(const kiln_view *v, int rank, const int64_t *shape, kiln_view *out, bool *fits);
/* ONNX Flatten: [prod(dims[:axis]), prod(dims[axis:])], axis in [-rank, rank].
 * A reshape, so *fits as for reshape. */
kiln_status kiln_view_flatten(const kiln_view *v, int64_t axis, kiln_view *out, bool *fits);
/* Transpose: output dim d is input dim perm[d]. perm NULL means reversed
 * dims (ONNX's default); otherwise n must equal the rank. */
kiln_status kiln_view_transpose(const kiln_view *v, const int64_t *perm, int n, kiln_view *out);
/* ONNX Slice: n entries of starts/ends, axes NULL = 0..n-1, steps NULL = 1.
 * Any non-zero step; starts/ends clamp as ONNX says (INT64_MAX/MIN are
 * fine). Repeated axes and step 0 fail. */
kiln_status kiln_view_slice(const kiln_view *v, int n, const int64_t *starts, const int64_t *ends, const int64_t *axes,
                            const int64_t *steps, kiln_view *out);
/* ONNX Squeeze: drops the listed dims (each must be 1); axes NULL (n 0)
 * drops every size-1 dim. */
kiln_status kiln_view_squeeze(const kiln_view *v, int n, const int64_t *axes, kiln_view *out);
/* ONNX Unsqueeze: inserts size-1 dims at axes of the output (rank + n). */
kiln_status kiln_view_unsqueeze(const kiln_view *v, int n, const int64_t *axes, kiln_view *out);
/* ONNX Expand: bidirectional broadcast of v's shape with shape[0..rank);
 * broadcast dims get stride 0. */
kiln_status kiln_view_expand(const kiln_view *v, int rank, const int64_t *shape, kiln_view *out);
/* Gather with a constant scalar index (ONNX: index in [-dim, dim)) on axis:
 * the axis is dropped. */
kiln_status kiln_view_gather(const kiln_view *v, int64_t axis, int64_t index, kiln_view *out);
/* One output of Split: elements [start, start + len) of axis; the range
 * must lie inside the dim (no clamping). */
kiln_status kiln_view_split(const kiln_view *v, int64_t axis, int64_t start, int64_t len, kiln_view *out);
/* Constant-mode Pad: pads[d] elements before and pads[rank + d] after dim d
 * (ONNX's pads layout); the new elements are masked (invalid). Negative pads
 * remove elements. */
kiln_status kiln_view_pad(const kiln_view *v, const int64_t *pads, kiln_view *out);

/* Composition: the single view equal to reading `upper` (whose flat
 * offsets index lower's shape row-major) through `lower`. Returns false,
 * leaving *out unchanged, when that map is not one strided view (or when
 * merging cannot prove it is one). Never wrong when it returns true. */
bool kiln_view_merge(const kiln_view *lower, const kiln_view *upper, kiln_view *out);

/* --- Movement op descriptions, for applying ops to a stack. --- */
typedef enum kiln_view_op_kind {
  KILN_VOP_IDENTITY = 0,
  KILN_VOP_RESHAPE,   /* n, shape */
  KILN_VOP_FLATTEN,   /* axis */
  KILN_VOP_TRANSPOSE, /* n, perm (n 0: reverse) */
  KILN_VOP_SLICE,     /* n, starts, ends, axes, steps (has_axes / has_steps) */
  KILN_VOP_SQUEEZE,   /* n, axes (n 0: all size-1 dims) */
  KILN_VOP_UNSQUEEZE, /* n, axes */
  KILN_VOP_EXPAND,    /* n, shape */
  KILN_VOP_GATHER,    /* axis, index */
  KILN_VOP_SPLIT,     /* axis, start, len */
  KILN_VOP_PAD        /* pads (2 * rank of the input) */
} kiln_view_op_kind;

typedef struct kiln_view_op {
  kiln_view_op_kind kind;
  int n;
  int64_t shape[KILN_MAX_RANK];
  int64_t perm[KILN_MAX_RANK];
  int64_t axes[KILN_MAX_RANK];
  int64_t starts[KILN_MAX_RANK];
  int64_t ends[KILN_MAX_RANK];
  int64_t steps[KILN_MAX_RANK];
  bool has_axes, has_steps;
  int64_t pads[2 * KILN_MAX_RANK];
  int64_t axis, index, start, len;
} kiln_view_op;

/* Applies op to one view: *fits false only for a reshape or flatten that
 * one view cannot hold (*out as kiln_view_reshape says). */
kiln_status kiln_view_apply(const kiln_view *v, const kiln_view_op *op, kiln_view *out, bool *fits);
/* Name of an op kind ("reshape", ...), for messages. */
const char *kiln_view_op_name(kiln_view_op_kind kind);

/* --- View stacks (tinygrad's ShapeTracker). v[0] maps to storage; each
 * v[k+1] produces flat indices into v[k]'s shape; v[depth-1] is what a
 * consumer indexes. The stack keeps itself merged: kiln_views_push leaves no
 * adjacent pair that kiln_view_merge could join. --- */
typedef struct kiln_views {
  int depth;
  kiln_view v[KILN_VIEWS_MAX_DEPTH];
} kiln_views;

/* A stack of one view. */
void kiln_views_init(kiln_views *s, const kiln_view *base);
/* Applies op to the top view; when the result is not one view (a reshape),
 * pushes a contiguous view of the new shape instead; then merges the top
 * into the view below while kiln_view_merge allows. Fails (s unchanged) on
 * a bad op or when the stack would exceed KILN_VIEWS_MAX_DEPTH. */
kiln_status kiln_views_push(kiln_views *s, const kiln_view_op *op);
/* The view a consumer indexes (shape and numel of the stack). */
const kiln_view *kiln_views_top(const kiln_views *s);
/* Storage element of a flat index of the top view, through every view;
 * *valid (optional) false and -1 where some view's mask hides it. */
int64_t kiln_views_offset(const kiln_views *s, int64_t flat, bool *valid);
/* True when the stack is one strided view (a kernel indexes it directly). */
bool kiln_views_single(const kiln_views *s);
/* True when the stack reads its storage as is: one contiguous view. */
bool kiln_views_contiguous(const kiln_views *s);

/* --- Regions: which storage elements an access may touch. --- */
typedef struct kiln_region {
  bool empty;     /* touches nothing */
  bool exact;     /* the box is exactly the touched set (else a superset) */
  int64_t lo, hi; /* every touched element is in [lo, hi] */
  /* A strided box: elements offset + sum(i_d * strides[d]), 0 <= i_d < shape[d],
   * strides positive and descending, no stride-0 or size-1 dims. */
  int rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t strides[KILN_MAX_RANK];
  int64_t offset;
} kiln_region;

/* The elements a view reads (valid elements only): exact. */
void kiln_view_region(const kiln_view *v, kiln_region *r);
/* The elements a stack reads: exact when it is a single view, otherwise the
 * region of the bottom view (a superset). */
void kiln_views_region(const kiln_views *s, kiln_region *r);
/* False only when a and b certainly share no element (disjoint [lo, hi], or
 * offsets that differ modulo the gcd of all strides). Conservative. */
bool kiln_region_may_overlap(const kiln_region *a, const kiln_region *b);

#endif
