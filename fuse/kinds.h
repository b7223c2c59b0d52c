/* fuse/kinds: the operator kinds of fusion, after TVM's FuseOps (prefix
 * kiln_fuse_) — one table naming every operator the reference backend knows
 * with its kind and role; an unknown operator is opaque. */
#ifndef KILN_FUSE_KINDS_H
#define KILN_FUSE_KINDS_H
#include "ir/graph.h"

typedef enum kiln_fuse_kind {
  KILN_FUSE_OPAQUE = 0,    /* runs alone: data-dependent, scatter, RNN, ... */
  KILN_FUSE_ELEMWISE,      /* one output element from the same element of one input */
  KILN_FUSE_BROADCAST,     /* elementwise over numpy-broadcast inputs */
  KILN_FUSE_INJECTIVE,     /* each output element is one input element (views, pad, cast) */
  KILN_FUSE_REDUCTION,     /* reduces axes (Reduce*, Softmax, LayerNormalization) */
  KILN_FUSE_OUT_EWISE      /* out-elementwise-fusable anchors: Conv, MatMul, Gemm, pools */
} kiln_fuse_kind;

/* Roles refining a kind (bits of kiln_fuse_kind_def.roles). */
enum {
  KILN_FUSE_VIEW = 1u << 0,      /* an index map over its input (no arithmetic) */
  KILN_FUSE_RESHAPE = 1u << 1,   /* a view keeping row-major element order */
  KILN_FUSE_POOL = 1u << 2,      /* a window op that may follow an anchor's epilogue */
  KILN_FUSE_COMPOSITE = 1u << 3, /* a reduction the spec expands (Softmax, LayerNormalization) */
  KILN_FUSE_NOSPEC = 1u << 4     /* of a fusable kind, but the kernel spec has no form for it yet */
};

typedef struct kiln_fuse_kind_def {
  const char *op_type;
  kiln_fuse_kind kind;
  unsigned roles;
} kiln_fuse_kind_def;

/* The table, terminated by {NULL, 0, 0}: every operator of the reference
 * tables (reference/ops_*.c) is listed. */
extern const kiln_fuse_kind_def kiln_fuse_kinds[];

/* The entry for an operator of the default ONNX domain ("" or "ai.onnx"),
 * or NULL (an unknown operator, or another domain: opaque). */
const kiln_fuse_kind_def *kiln_fuse_kind_find(const char *domain, const char *op_type);

/* The node's entry: kiln_fuse_kind_find's, except where the node's
 * attributes make the op another kind. BatchNormalization with
 * training_mode=1 normalises with the batch's own statistics (a reduction
 * over N and the spatial dims) and writes the running ones: opaque, never
 * the per-channel affine map of inference. */
const kiln_fuse_kind_def *kiln_fuse_kind_def_of(const kiln_node *n);

/* The node's kind (kiln_fuse_kind_def_of's): KILN_FUSE_OPAQUE when there
 * is no entry. */
kiln_fuse_kind kiln_fuse_kind_of(const kiln_node *n);

/* "elementwise", "broadcast", "injective", "reduction", "out-elementwise",
 * "opaque". Never NULL. */
const char *kiln_fuse_kind_name(kiln_fuse_kind k);

#endif
