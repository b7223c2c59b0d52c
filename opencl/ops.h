/* opencl/ops: device implementations of single graph nodes that the fused
 * elementwise code generator (opencl/codegen) does not cover (prefix
 * kiln_cl_op_): MatMul/Gemm through CLBlast, Conv, pooling, reductions,
 * Softmax, normalisations, data movement. The OpenCL engine asks for each
 * node it does not fuse; a node without a device implementation here runs
 * on the host (the engine's fallback).
 *
 * Life of an op: prepared at compile time for concrete tensor types (the
 * plan's sizes), it appends its OpenCL C, if it needs any, to the graph's
 * one program source (one clBuildProgram per graph: PoCL spends 0.5-0.9 s
 * per program cold); after the build, bind() creates its kernels and any
 * device scratch; enqueue() puts its work on the context's in-order queue. */
#ifndef KILN_OPENCL_OPS_H
#define KILN_OPENCL_OPS_H
#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"
#include "ir/shape.h"
#include "ir/tensor.h"
#include "opencl/runtime.h"

/* A concrete tensor type: dtype KILN_UNDEFINED marks an absent input/output. */
typedef struct kiln_cl_ttype {
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
} kiln_cl_ttype;

/* Where a dense row-major tensor lives on the device: a buffer and a byte
 * offset into it (the engine's arena places values at offsets that are
 * multiples of the device's CL_DEVICE_MEM_BASE_ADDR_ALIGN, so an op may also
 * make a sub-buffer there). mem NULL: absent. */
typedef struct kiln_cl_arg {
  cl_mem mem;
  size_t offset;
} kiln_cl_arg;

/* A growing program source. */
typedef struct kiln_cl_src {
  char *text; /* kiln_malloc'd, NUL-terminated; NULL while empty */
  size_t len, cap;
} kiln_cl_src;
/* Appends printf-formatted text; KILN_E_NOMEM (with a message) when memory runs out. */
kiln_status kiln_cl_src_printf(kiln_cl_src *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends text as it is (no format: a kernel's text may hold a '%'). */
kiln_status kiln_cl_src_puts(kiln_cl_src *s, const char *text);
void kiln_cl_src_free(kiln_cl_src *s);

typedef struct kiln_cl_op kiln_cl_op;

/* Prepares node n of graph g for device dev. in[k] (n->n_in entries) and
 * out[k] (n->n_out entries) are the concrete types of its inputs and
 * outputs; konst[k] is input k's value when it is a constant (an
 * initializer: an op may pre-pack weights or read shape-setting inputs),
 * else NULL. Kernel names the op defines start with `prefix` (a C
 * identifier prefix unique in the program, e.g. "n12_"); their source is
 * appended to src. Returns KILN_OK with *op NULL when there is no device
 * implementation for this node and these types (the engine runs it on the
 * host); an error (with a message naming the node) only for what would fail
 * on every backend. */
kiln_status kiln_cl_op_prepare(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n,
                               const kiln_cl_ttype *in, const kiln_cl_ttype *out, const kiln_tensor *const *konst,
                               const char *prefix, kiln_cl_src *src, kiln_cl_op **op);
/* After the program built from src: creates the op's kernels (from prog; an
 * op that appended no source ignores it) and device scratch on ctx. */
kiln_status kiln_cl_op_bind(kiln_cl_op *op, kiln_cl_context *ctx, cl_program prog);
/* kiln_cl_op_bind in two halves: the kernels and scratch, then (a CLBlast
 * op) the start of its routines' warm-up, a thread that builds CLBlast's
 * kernels (opencl/ENGINE.md). The engine binds every op's kernels first and
 * starts the warm-ups after, so that the build does not share the CPU with
 * the rest of the init; the second does nothing for an op without CLBlast
 * or a routine warmed already. */
kiln_status kiln_cl_op_bind_kernels(kiln_cl_op *op, kiln_cl_context *ctx, cl_program prog);
kiln_status kiln_cl_op_bind_blas(kiln_cl_op *op, kiln_cl_context *ctx);
/* An op whose kernels' text is `to`'s but for its name prefix (the engine
 * prints it once, opencl/engine_compile.c): its kernels take to's names
 * (to's prefix in place of its own); false (op unchanged) when a name does
 * not start with op's prefix or the two differ in kernel count. */
bool kiln_cl_op_share_text(kiln_cl_op *op, const kiln_cl_op *to);
/* kiln_cl_op_bind_kernels for an op sharing `from`'s text (bound before it
 * from the same program): each kernel object from's own, one more
 * reference (kiln_cl_kernel_share) — an op sets every argument of its
 * kernels at each launch, and the ops of one variant are enqueued one at
 * a time — so no kernel is created or cloned again. */
kiln_status kiln_cl_op_bind_kernels_like(kiln_cl_op *op, const kiln_cl_op *from, kiln_cl_context *ctx,
                                         cl_program prog);
/* The prefix the op's kernels are named with ("n12_"). */
const char *kiln_cl_op_prefix(const kiln_cl_op *op);
/* Enqueues the op: in[k] / out[k] where its inputs and outputs are (dense,
 * row-major, of the types given at prepare). Asynchronous on ctx's queue. */
kiln_status kiln_cl_op_enqueue(kiln_cl_op *op, kiln_cl_context *ctx, const kiln_cl_arg *in, const kiln_cl_arg *out);
/* A short description for KILN_PROFILE / KILN_DUMP ("kiln sgemm 64x512x256"). */
const char *kiln_cl_op_describe(const kiln_cl_op *op);
/* The op hands its buffers to CLBlast, whose kernels take vector-typed
 * pointers (kiln's own op kernels take scalar pointers and use vloadN /
 * vstoreN: element alignment is all they assume of a buffer). */
bool kiln_cl_op_calls_clblast(const kiln_cl_op *op);
/* What the caller knows of a device op's rows (opencl/engine_sym.c). */
typedef enum kiln_cl_rows_kind {
  KILN_CL_ROWS_GEMM,    /* MatMul / Gemm: the GEMMs' A rows are input 0's batch-outermost rows */
  KILN_CL_ROWS_ROWWISE, /* Softmax, LayerNormalization over a later axis, Reduce* keeping axis 0: the
                           kernels work a row at a time, rows batch-outermost */
  KILN_CL_ROWS_IMAGES,  /* Conv, pools (NCHW): every step works image by image, images outermost (kernels
                           over output elements, per-image batched GEMMs, per-image scratch) */
} kiln_cl_rows_kind;
/* The op can run with its batch-outermost rows scaled from bound to a
 * smaller run-time count: GEMM — every step a GEMM whose A and C are input
 * 0 and output 0 with bound | m, or a 1-D kernel over the output's elements
 * not reading input 0; no scratch; ROWWISE — also kernels with a work-item
 * or work-group per row; IMAGES — 1-D kernels (NULL local size) or
 * work-group-per-row kernels whose counts bound divides, batched GEMMs
 * whose batch count bound divides; scratch allowed (laid out image by
 * image); never a MatMul reading an operand through a view
 * (kiln_cl_mm_view). kiln_cl_op_enqueue_rows may be used. */
bool kiln_cl_op_rows_ok(const kiln_cl_op *op, int64_t bound, kiln_cl_rows_kind kind);
/* A padded symbolic dim (opencl/engine_sym.c): the op is GEMMs only whose
 * A rows (input 0) and C rows (output 0) are `outer` blocks of c * bound
 * rows each; kiln_cl_op_enqueue_box may run the first c * n rows of each
 * of the first `blocks` blocks (1 <= blocks <= outer: a GEMM per block
 * and step, at the blocks' offsets; one over the blocks when n = bound). */
bool kiln_cl_op_box_ok(const kiln_cl_op *op, int64_t outer, int64_t bound);
kiln_status kiln_cl_op_enqueue_box(kiln_cl_op *op, kiln_cl_context *ctx, const kiln_cl_arg *in,
                                   const kiln_cl_arg *out, int64_t outer, int64_t blocks, int64_t n, int64_t bound);
/* kiln_cl_op_enqueue with each step's rows (GEMM m, batched GEMM count,
 * kernel items) scaled by n / bound for this launch (1 <= n <= bound;
 * work-groups per row too). */
kiln_status kiln_cl_op_enqueue_rows(kiln_cl_op *op, kiln_cl_context *ctx, const kiln_cl_arg *in,
                                    const kiln_cl_arg *out, int64_t n, int64_t bound);
/* After the queue has finished an enqueue of op: an error (KILN_E_INVALID_VALUE,
 * "index I is out of range for a dimension of size N", as the host
 * backends say) when one of its kernels met a bad run-time index (Gather's
 * indices), KILN_OK otherwise or for an op that checks nothing. Clears the
 * state for the next run either way; call it after every finished run. */
kiln_status kiln_cl_op_checked(kiln_cl_op *op, kiln_cl_context *ctx);
/* Releases kernels, scratch and the op (NULL-safe). */
void kiln_cl_op_free(kiln_cl_op *op);

/* Whether a row reduction of `rows` rows of `len` elements (len at least the
 * op's work-group threshold; the fused reduce kernels of codegen.c ask too)
 * takes a work-group per row: not on a CPU device
 * (PoCL, llvmpipe: barriers become loops over the items) when there are at
 * least KILN_CLOP_ROW_ITEM_PER_CU rows per compute unit — a work-item per
 * row there, one serial loop each; KILN_CL_ROW_ITEM=0: a group per row
 * everywhere (opencl/ENGINE.md, "Row reductions on CPU devices"). */
#define KILN_CLOP_ROW_ITEM_PER_CU 4
bool kiln_clop_row_group(const kiln_cl_device *dev, int64_t rows);

/* A pooling for kiln_cl_conv_direct_fused to take into its kernel: node
 * (MaxPool or AveragePool) pooling the epilogue's result (the conv's
 * output shape) into a value of type out; why: the reason it did not (set
 * whenever *ok comes back false). */
typedef struct kiln_cl_conv_pool {
  const kiln_node *node;
  kiln_cl_ttype out;
  char why[192];
} kiln_cl_conv_pool;

/* ---- MatMul operands read through views (opencl/ENGINE.md "Views read in
 * place by MatMul") ---- */

/* Input value w of a MatMul that the engine does not materialise (or its
 * output, that the engine does not store densely): its element
 * (i_0 .. i_{r-1}) is element offset + sum(i_d * strides[d]) of value
 * `storage` (dense, row-major), whose buffer the op or kernel gets for w. */
typedef struct kiln_cl_mm_view {
  int storage; /* -1: w is read as it is (dense) */
  int rank;
  int64_t strides[KILN_MAX_RANK];
  int64_t offset;
  bool taken; /* set by each MatMul op or fused MatMul kernel printed reading w through it */
} kiln_cl_mm_view;
/* Whether a float32 MatMul operand of type t read through strides is a GEMM
 * operand as it lies: rank >= 2, every dim > 0, no negative stride, the
 * last two dims a row-major matrix (columns stride 1, rows at least a row
 * apart) or a transposed one (rows stride 1, columns at least a column
 * apart), any batch strides (0: broadcast). */
bool kiln_cl_mm_view_ok(const kiln_cl_ttype *t, const int64_t *strides);
/* While set (on the calling thread, for graph g: the engine sets it around
 * its lowering of one variant), MatMul ops (kiln_cl_op_prepare) and fused
 * MatMul kernels (kiln_cl_gemm_fused) of g's nodes read each input value w
 * with views[w].storage >= 0 through views[w] — A's or B's lda / ldb,
 * transposition, batch strides and offset — when kiln_cl_mm_view_ok says
 * so (not a transposed B on kiln's SGEMM), and set views[w].taken (the
 * engine passes the storage's buffer for w: a MatMul that did not take the
 * view is a failed compile, never a dense read of it). A MatMul op (not a fused
 * kernel: its epilogue indexes C densely) writes its output through its
 * view likewise (ldc >= N, columns 1 apart, batch strides, offset). views
 * has g->n_values entries; g NULL: none. */
void kiln_cl_mm_views_set(const kiln_graph *g, kiln_cl_mm_view *views);
/* While set (on the calling thread, for graph g, around one variant's
 * lowering as the views above), the answer to "are the values of constant
 * value w all finite" (a Conv's W: opencl/OPS.md, Conv) is kept in
 * finite[w] (0 not yet known, 1 yes, -1 no; g->n_values entries, zeroed by
 * the caller), so each weight is read once per lowering, not once per
 * form a conv is tried in. g NULL: none (each query reads the weights). */
void kiln_cl_finite_set(const kiln_graph *g, signed char *finite);
/* Value w's constant as the engine gives it to kiln_cl_op_prepare and the
 * fused forms: its initializer, else the shapes' constant (sh may be NULL),
 * else NULL (w < 0 too). */
static inline const kiln_tensor *kiln_cl_konst_of(const kiln_graph *g, const kiln_shapes *sh, int w) {
  return w < 0 ? NULL : g->values[w].init ? g->values[w].init : sh ? sh->v[w].konst : NULL;
}
/* Whether none of the n float32 values at p (any alignment) is an inf or a
 * NaN. */
bool kiln_cl_all_finite_f32(const void *p, int64_t n);
/* Fills finite[w] (as kiln_cl_finite_set's memo: 1 finite, -1 not) for
 * every value w of g the lowering asks about — the W of each padded Conv
 * (pads not all zero, or auto_pad SAME_*) that is a float32 constant
 * (kiln_cl_konst_of) — where it is still 0; returns how many it read. The
 * rewritten-graph record keeps them (its facts, opencl/graph_cache.h), so
 * that a warm init reads no weight for them. */
int kiln_cl_finite_facts(const kiln_graph *g, const kiln_shapes *sh, signed char *finite);
/* Whether MatMul node n (types in, out) would read input value w (or,
 * w = its output, write it as a lone op) through w's view as set
 * (kiln_cl_mm_views_set): the op takes the node and the view is a GEMM
 * operand (does not set taken). */
bool kiln_cl_mm_reads_view(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n,
                           const kiln_cl_ttype *in, const kiln_cl_ttype *out, int w);

/* A Conv's bias or a Gemm's C (input 2) left to a kernel that reads the
 * node's output after its op (opencl/engine_fuse.c): true when node n has
 * one and kiln_cl_op_prepare takes the node with in[2] absent (dtype
 * KILN_UNDEFINED) just as with it — the op then writes alpha A B, or the
 * convolution without its bias — and `add` gets " + <expr>": what input 2
 * adds to the output element at flat index `idx` (an integer C expression:
 * int where the output's and input 2's element counts fit an int, else
 * long — the literals take its type) read from float buffer `buf` (the Conv's bias of that element's channel,
 * beta C[broadcast] for a Gemm). false (add "") otherwise: no input 2, a
 * node the op would not take, an empty tensor. */
bool kiln_cl_op_addend(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n, const kiln_cl_ttype *in,
                       const kiln_cl_ttype *out, const char *buf, const char *idx, char *add, size_t size);

/* The engine's fused form of a Conv that the op would run with the direct
 * kernel (same rule, KILN_CL_CONV included): kernel `name` appended to src
 * with parameters x, w, [b] (plain __global float buffers, dense) followed
 * by `params` (text starting with ", "), and for each output element the
 * statements `store` seeing `ep_i` (Y's flat index, long) and `anc` (the
 * element, bias added, float). *items: the work-items to launch (1-D, the
 * kernel guards). *ok false (nothing appended) when the node is not such a
 * conv (another strategy, another dtype, an invalid node).
 * pool non-NULL: the pooling in the same kernel, one work-item per pooled
 * position (and a few channels), only where its windows do not overlap
 * (stride >= the dilated kernel on every axis: no conv output computed
 * twice): `store` sets `ep_v` (float, declared by the kernel) to the
 * pooled argument, and one more parameter after params, __global float *,
 * takes the pooled output (dense). *ok false with pool->why otherwise.
 * konst: the node's constant inputs as kiln_cl_op_prepare gets them (an
 * initializer, else the shapes' constant; NULL entries or NULL: none), so
 * that a conv decides as its op would (its weights finite: the padding's
 * positions skipped, OPS.md Conv). */
kiln_status kiln_cl_conv_direct_fused(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n,
                                      const kiln_cl_ttype *in, const kiln_cl_ttype *out,
                                      const kiln_tensor *const *konst, const char *name,
                                      const char *params, const char *store, kiln_cl_conv_pool *pool,
                                      kiln_cl_src *src, int64_t *items, bool *ok);
/* The column matrix of an im2col conv in kiln_cl_gemm_fused: the im2col
 * kernel `name` (given by the caller) appended to src, with parameters X
 * (the node's input 0, dense) and then the column matrix, `floats` floats,
 * the engine's scratch (codegen.h: a kernel's last parameter), which the
 * SGEMM kernel reads as its last parameter; a 1-D launch of `items`.
 * floats 0: no im2col (nothing appended). */
typedef struct kiln_cl_gemm_cols {
  const char *name;
  kiln_cl_src *src;
  int64_t items, floats;
} kiln_cl_gemm_cols;

/* The engine's fused form of a MatMul, a Gemm or a Conv that the op would
 * run as a GEMM (pointwise, or im2col + GEMM) when the SGEMM is kiln's
 * kernel (KILN_CL_GEMM): that kernel `name` appended to src with the
 * epilogue in its store — parameters: the node's input values vals[0..
 * *n_vals) (A, B, then Gemm's C or the Conv's bias; an im2col conv: W and
 * its bias, X goes to the im2col kernel in *cols; plain dense float
 * buffers) followed by `params` (then, for an im2col conv, B: the column
 * scratch), each element of the node's output going to `store` as for
 * kiln_cl_conv_direct_fused (alpha, beta C and the bias already in `anc`).
 * *items: a 1-D launch. *ok false (nothing appended) otherwise: CLBlast's
 * GEMM, another dtype, an invalid node. konst: as kiln_cl_conv_direct_fused. */
kiln_status kiln_cl_gemm_fused(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n,
                               const kiln_cl_ttype *in, const kiln_cl_ttype *out,
                               const kiln_tensor *const *konst, const char *name,
                               const char *params, const char *store, kiln_cl_src *src, int *vals, int *n_vals,
                               int64_t *items, kiln_cl_gemm_cols *cols, bool *ok);

#endif
