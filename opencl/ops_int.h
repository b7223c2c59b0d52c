/* opencl/ops_int: what the op families (ops_gemm.c, ops_pool.c,
 * ops_reduce.c, ops_move.c) share with the registry (ops.c): an op is a
 * list of steps — generated kernel launches and CLBlast GEMM calls — over
 * its inputs, outputs and scratch buffers, all fixed at prepare time.
 * Kernel convention: every buffer argument is a pair
 * (__global T *p, ulong offset in elements), sizes are literals.
 * Helpers are kiln_clop_*; the family prepare functions kiln_clop_*_prepare. */
#ifndef KILN_OPENCL_OPS_INT_H
#define KILN_OPENCL_OPS_INT_H
#include <stdbool.h>
#include <stdint.h>

#include "opencl/ops.h"

#define OP_MAX_KERNELS 32
#define OP_MAX_SCRATCH 1 /* the shared workspace */
#define OP_MAX_ARGS 8
/* Check words per op: 0 the flag, 1-3 the index kernels' (value low, high,
 * dimension), 4-7 free for an op's own messages (chk_msg). */
#define KILN_CLOP_CHK_WORDS 8

/* A buffer an op step reads or writes. */
enum { OPB_NONE, OPB_IN, OPB_OUT, OPB_SCR, OPB_CHK };
typedef struct opb {
  unsigned char kind, idx;
  uint64_t at; /* outputs only (OUT_AT): elements past the value's start added to the kernel's offset argument */
} opb;
#define IN(i) ((opb){OPB_IN, (unsigned char)(i), 0})
#define OUT(i) ((opb){OPB_OUT, (unsigned char)(i), 0})
/* output i from its element e on: one kernel text for every input of a Concat (ops_move.c) */
#define OUT_AT(i, e) ((opb){OPB_OUT, (unsigned char)(i), (uint64_t)(e)})
#define SCR(i) ((opb){OPB_SCR, (unsigned char)(i), 0})
/* The op's check words (kiln_clop_checks): __global int[KILN_CLOP_CHK_WORDS] */
#define CHK ((opb){OPB_CHK, 0, 0})

typedef enum op_step_kind { ST_KERNEL, ST_GEMM, ST_GEMM_BATCHED } op_step_kind;

/* Work-group size of reduction kernels (a power of two; the kernels keep a
 * __local array of OP_RED_WG floats and use get_local_size(0)). */
#define OP_RED_WG 256

typedef struct op_step {
  op_step_kind kind;
  /* ST_KERNEL */
  int kernel, nargs;
  opb args[OP_MAX_ARGS];
  int dims;         /* 1 or 2 */
  size_t items[2];  /* work items needed per dim (kernels guard) */
  size_t local[2];  /* 0: NULL local size (global padded to KILN_CL_GLOBAL_PAD) */
  size_t groups;    /* > 0: one reduction work-group per unit, local size chosen at bind */
  size_t rows_tile; /* > 0: kiln's SGEMM kernel (ops_sgemm.c): 2-D, items[1] = batch x row tiles of
                       rows_tile rows; ta, m, batch, a, b, c as for ST_GEMM */
  size_t red_local; /* set at bind for groups > 0 */
  /* ST_GEMM / ST_GEMM_BATCHED: row-major C[m,n] = alpha op(A) op(B) + beta C */
  bool ta, tb;
  size_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  opb a, b, c;
  size_t aoff, boff, coff;       /* element offsets past the buffer's own */
  size_t batch;                  /* ST_GEMM_BATCHED: count and per-batch offsets */
  size_t *aoffs, *boffs, *coffs; /* kiln_malloc'd, batch entries each */
} op_step;

struct kiln_cl_op {
  char prefix[48];
  char desc[160];
  char label[96]; /* the node, for messages */
  int n_in, n_out;
  size_t *in_es, *out_es; /* element sizes (0: absent) */
  int n_kern;
  char kname[OP_MAX_KERNELS][64];
  kiln_cl_kernel kern[OP_MAX_KERNELS];
  /* scratch: one workspace per cl_context shared by every op bound there
   * (ops run one at a time on the context's in-order queue), at least
   * scr_bytes long; ws_ctx is set while the op holds a reference */
  int n_scr;
  size_t scr_bytes;
  cl_context ws_ctx;
  int n_steps, cap_steps;
  op_step *steps;
  unsigned blas; /* OP_BLAS_* routines the op calls (warm-up started at bind) */
  cl_context blas_ctx; /* where bind started or found their warm-up (joined before a call and at free) */
  size_t max_batch;
  size_t *work; /* 3 * max_batch offsets for batched calls */
  float *ab;    /* 2 * max_batch alphas / betas */
  /* run-time index checks (kiln_clop_checks), in KILN_CLOP_CHK_WORDS words
     read back after each enqueue and looked at by kiln_cl_op_checked:
     word 0 the flag. ScatterND's kernel (kiln_clop_chk_src): the first item
     to flag writes the index's low and high 32 bits in words 1, 2 and the
     dimension it indexes in word 3 (every item walks the tuples in order,
     so that is the host's first). Gather's and SparseLengths' kernels
     (kiln_clop_first_bad): the lowest bad position p kept as chk_base - p
     in word 4 (atomic_max), then a one-item step copies that index into
     words 1, 2 and p into 4, 5 (word 3 stays 0). chk_msg (NULL: the index
     message) formats an op's own messages, chk_aux its numbers. */
  int chk_n; /* > 0: the op checks, against these dimension sizes */
  int64_t chk_dims[KILN_MAX_RANK];
  kiln_cl_buffer chk;
  cl_int chk_host[KILN_CLOP_CHK_WORDS];
  kiln_status (*chk_msg)(const struct kiln_cl_op *op, const cl_int *w);
  int64_t chk_aux[4];
  bool chk_pending;
  bool strided; /* an operand is read through a view (kiln_cl_mm_view): no run-time rows (engine_sym) */
};
enum { OP_BLAS_GEMM = 1, OP_BLAS_GEMM_BATCHED = 2 };

/* What a family's prepare gets. */
typedef struct op_ctx {
  const kiln_cl_device *dev;
  const kiln_graph *g;
  const kiln_node *n;
  const kiln_cl_ttype *in, *out;
  const kiln_tensor *const *konst;
  const char *prefix;
  kiln_cl_src *src;
  char label[96];
} op_ctx;

/* A family's prepare: KILN_OK with *op NULL to decline. */
typedef kiln_status (*op_prepare_fn)(const op_ctx *c, kiln_cl_op **op);

kiln_status kiln_clop_gemm_prepare(const op_ctx *c, kiln_cl_op **op);   /* MatMul, Gemm */
kiln_status kiln_clop_conv_prepare(const op_ctx *c, kiln_cl_op **op);   /* Conv */
kiln_status kiln_clop_pool_prepare(const op_ctx *c, kiln_cl_op **op);   /* MaxPool, AveragePool, Global* */
kiln_status kiln_clop_reduce_prepare(const op_ctx *c, kiln_cl_op **op); /* Reduce*, ArgMax/ArgMin */
kiln_status kiln_clop_norm_prepare(const op_ctx *c, kiln_cl_op **op);   /* Softmax, LogSoftmax, LayerNorm */
kiln_status kiln_clop_move_prepare(const op_ctx *c, kiln_cl_op **op);   /* Concat, Gather, Transpose, Where, Pad, ScatterND, SparseLengths* */

/* ---- building an op ---- */

/* A new op for c's node (element sizes from c's types). */
kiln_status kiln_clop_new(const op_ctx *c, kiln_cl_op **op);
/* Names a kernel prefix+suffix; *k gets its index. */
kiln_status kiln_clop_kernel(kiln_cl_op *op, const char *suffix, int *k);
/* The kernel's full name (for the source). */
const char *kiln_clop_kname(const kiln_cl_op *op, int k);
/* A scratch buffer of bytes (> 0) — the context's shared workspace; its
 * contents do not survive past the op's enqueue. *s gets its index. */
kiln_status kiln_clop_scratch(kiln_cl_op *op, size_t bytes, int *s);
/* Appends a step (zeroed, kind set); *st points at it until the next append. */
kiln_status kiln_clop_step_add(kiln_cl_op *op, op_step_kind kind, op_step **st);
/* A 1-D launch of kernel k over n items (NULL local size) with buffers args. */
kiln_status kiln_clop_launch(kiln_cl_op *op, int k, size_t n, int nargs, const opb *args);
/* One reduction work-group (OP_RED_WG or the kernel's limit) per unit. */
kiln_status kiln_clop_launch_groups(kiln_cl_op *op, int k, size_t groups, int nargs, const opb *args);
/* The op's kernels check run-time indices against dimensions dims[0..n)
 * (they take CHK and print kiln_clop_chk_src's statement where one is out
 * of range): a run that meets one fails in kiln_cl_op_checked. */
void kiln_clop_checks(kiln_cl_op *op, int n, const int64_t *dims);
/* Gather's and SparseLengths' first-bad-index protocol (see the struct):
 * the statement a kernel runs for a bad index at position `pos` (an int or
 * long expression, < base <= INT32_MAX; `chk` the check words' pointer,
 * offset), and the one-item step, launched after the op's kernels, that
 * reads the index at the lowest such position from input `in` (element
 * type `it`) into the check words while it is still there. */
kiln_status kiln_clop_first_bad_src(kiln_cl_src *src, const char *chk, const char *pos, int64_t base);
kiln_status kiln_clop_first_bad(kiln_cl_op *op, kiln_cl_src *src, opb in, const char *it, int64_t base);
/* The statement a checking kernel runs for bad index `j` (a C expression of
 * type int or long, as given) into dimension `d` (an int expression, < n)
 * with its CHK argument named chk_ (and offset co). */
kiln_status kiln_clop_chk_src(kiln_cl_src *src, const char *j, bool is_long, const char *d);
/* Frees op (NULL-safe) and returns s: the error path of a prepare. */
kiln_status kiln_clop_fail_free(kiln_cl_op *op, kiln_status s);

/* ---- GEMM (ops_sgemm.c) ---- */

/* Row-major C[m,n] = alpha op(A) op(B) + beta C (beta 0 or 1), for every
 * index of the batch dims bd (nb of them, 0: one GEMM) — A, B, C advanced
 * by sa, sb, sc elements per step of each batch dim. */
/* An implicit-GEMM conv (ops_gemm.c): B is X itself, read through the
 * window of a 2-D conv (a 1-D one has h = oh = kh = 1) instead of a column
 * matrix: B[cc * kh * kw + ky * kw + kx][oy * ow + ox] =
 * X[cc][oy * sh - ph + ky * dh][ox * sw - pw + kx * dw], 0 outside; the
 * batch offsets step X by images and groups. xtotal: X's element count
 * (the kernel's vector loads stay inside it). Strides 1 or 2. */
typedef struct kiln_clop_iconv {
  int64_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, cg, xtotal;
} kiln_clop_iconv;

typedef struct kiln_clop_gemm {
  bool ta, tb;
  const kiln_clop_iconv *cv; /* non-NULL: an implicit-GEMM conv (no transposes, B = X) */
  size_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  opb a, b, c;
  int64_t a0, b0, c0; /* elements from A's / B's / C's buffer to its first element (a view's offset;
                          kiln_cl_mm_view; c0 0 in a fused SGEMM, whose epilogue sees C's flat index) */
  int nb;
  int64_t bd[KILN_MAX_RANK], sa[KILN_MAX_RANK], sb[KILN_MAX_RANK], sc[KILN_MAX_RANK];
} kiln_clop_gemm;

/* Appends g as kiln's generated SGEMM kernel or a CLBlast step
 * (KILN_CL_GEMM=kiln|clblast|auto, see ENGINE.md); *impl gets "kiln" or
 * "clblast" for the op's description. */
kiln_status kiln_clop_sgemm(const op_ctx *c, kiln_cl_op *op, const kiln_clop_gemm *g, const char **impl);
/* The epilogue printed into a fused SGEMM kernel's store (engine_fuse):
 * params (text starting with ", ") follow the kernel's plain buffers a_,
 * b_ and, with has_e, e_; each element of C becomes
 * anc = alpha * sum + add ("" or e.g. " + e_[...]", an expression of ep_i)
 * at ep_i, its flat index in C, and body (statements seeing ep_i and anc)
 * stores it. b_last: b_ is the kernel's last parameter, after params (an
 * im2col conv's column matrix: the engine's scratch, codegen.h). */
typedef struct kiln_clop_epi {
  const char *params, *body, *add;
  bool has_e, b_last;
  const char *add_row; /* non-NULL: instead of add, " + ar_" with ar_ = add_row computed once per row of the tile
                          (an expression of row_, the row's first element's flat index in C) */
} kiln_clop_epi;
/* Appends kiln's SGEMM kernel `name` for g (beta 0; g's opb fields unused)
 * with e in its store: a 1-D launch of *items work-items (the kernel guards;
 * a slot per row of C per column tile, so a prefix of the items is a prefix
 * of C's rows). */
kiln_status kiln_clop_sgemm_fused(const kiln_cl_device *dev, const kiln_clop_gemm *g, const kiln_clop_epi *e,
                                  const char *name, kiln_cl_src *src, int64_t *items);
/* Whether kiln_clop_sgemm takes kiln's kernel on dev. */
bool kiln_clop_sgemm_is_kiln(const kiln_cl_device *dev);

/* ---- window pooling (ops_pool.c) ---- */

/* A MaxPool / AveragePool window geometry: spatial dims in, out, kernel,
 * strides, dilations, pads at the beginning and end of each dim. */
typedef struct kiln_clop_pool_geo {
  int nsp;
  int64_t in[KILN_MAX_RANK - 2], out[KILN_MAX_RANK - 2], k[KILN_MAX_RANK - 2], s[KILN_MAX_RANK - 2],
      d[KILN_MAX_RANK - 2], pb[KILN_MAX_RANK - 2], pe[KILN_MAX_RANK - 2];
  int64_t in_plane, out_plane, planes;
} kiln_clop_pool_geo;
/* c's pooling node's geometry as reference/ops_nn.c pool_geometry makes it
 * (c->in[0], c->out[0]: its input and output types); false for what the
 * device kernels do not take (the host then runs it and reports): dil
 * false refuses dilations other than 1 (AveragePool). */
bool kiln_clop_pool_geo_make(const op_ctx *c, bool dil, kiln_clop_pool_geo *g);

/* ---- shapes ---- */

/* Merges adjacent dims of a shape that every stride array walks as one
 * (s[k][i] == s[k][i+1] * dims[i+1]) and drops dims of size 1; rank 0
 * stays rank 0. ns stride arrays, updated in place; returns the new rank. */
int kiln_clop_collapse(int rank, int64_t *dims, int ns, int64_t **strides);
/* Row-major numel. */
int64_t kiln_clop_numel(int rank, const int64_t *dims);
/* Appends C code "var = <offset of flat index `flat` over dims/strides>;"
 * (var declared by the caller; uses a scratch `t_` it declares in a block). */
kiln_status kiln_clop_emit_offset(kiln_cl_src *s, const char *flat, int rank, const int64_t *dims,
                                  const int64_t *strides, const char *var);

/* Reductions (ops_reduce.c), also used by the global pools: kinds in the
 * order of reference/ops_reduce.c. */
enum { RK_SUM, RK_MEAN, RK_MAX, RK_MIN, RK_PROD, RK_L1, RK_L2, RK_LOGSUM, RK_LOGSUMEXP, RK_SUMSQUARE };
/* Appends kernel(s) reducing IN(0) (float32, shape rank/dims, dense) over
 * the dims with red[d] set into OUT(0) (the kept dims, in order). */
kiln_status kiln_clop_reduce_emit(const op_ctx *c, kiln_cl_op *op, int kind, int rank, const int64_t *dims,
                                  const bool *red);
/* Emits the work-group tree reduction of float `var` through __local
 * array `sh` with combiner function `comb` (all lanes get the result). */
kiln_status kiln_clop_emit_group_reduce(kiln_cl_src *s, const char *var, const char *comb);

/* A float as an OpenCL C literal ("1.0f", "-2.5e-05f", "INFINITY"). */
const char *kiln_clop_flit(float v, char *buf, size_t size);

/* Attribute helpers. */
bool kiln_clop_is_f32(const kiln_cl_ttype *t);
bool kiln_clop_present(const kiln_cl_ttype *t);

#endif
