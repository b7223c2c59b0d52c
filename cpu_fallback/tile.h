/* cpu_fallback/tile: the tile executor of kernel specs (prefix kiln_tile_) —
 * a bound elementwise spec (fuse/spec.h), or the epilogue of an anchor
 * group, evaluated over its iteration domain in tiles of KILN_TILE_N
 * elements: each accessor's tile is loaded once (a pointer into memory when
 * the run is contiguous, else a gather through its strided map or view
 * stack), then every expression of the DAG runs as one vector op over the
 * whole tile (tile_ops: a scalar twin and an AVX2/FMA version), and the
 * stores write the tile out. No per-element interpretation. float32 (and
 * bool, kept as 0/1 floats) only: kiln_tile_compile says why it declines a
 * spec, and the caller runs the group's nodes one by one instead. */
#ifndef KILN_CPU_FALLBACK_TILE_H
#define KILN_CPU_FALLBACK_TILE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu_fallback/vmath.h"
#include "fuse/spec.h"
#include "ir/observe.h"

/* Elements per tile: a few live tiles of floats stay in L1. A program
 * whose domain has at least KILN_TILE_BIG_MIN elements (it streams from
 * memory) runs tiles of KILN_TILE_N_BIG (tile.c, TILE.md "Longer tiles
 * for long domains"). */
#define KILN_TILE_N 512
#define KILN_TILE_N_BIG 1024
#define KILN_TILE_BIG_MIN ((int64_t)1 << 20)

typedef struct kiln_tile_prog kiln_tile_prog;

/* A program for spec sp (bound or not: only its structure is read): the
 * op of every expression and a tile buffer for each, reused once its last
 * reader has run. Declines (KILN_E_UNSUPPORTED_OP, the reason in why, no
 * error set) a spec that is not elementwise or anchor + epilogue, that has
 * reductions, reads or stores a type other than float32 and bool, or
 * computes in integers. A pooling (anchor groups) is the caller's: the
 * program's pool store writes the pooled argument, float32 over the
 * domain, for the caller to pool. The program borrows sp. */
kiln_status kiln_tile_compile(const kiln_fuse_spec *sp, kiln_tile_prog **out, char *why, size_t size);
void kiln_tile_free(kiln_tile_prog *tp);

/* Binds the program to memory for the runs that follow: sp must be bound
 * (kiln_fuse_spec_bind) and vals[v] (indexed by value) must hold the tensor
 * of every value an accessor reads — dense, strided or a view stack; its
 * map is composed with the accessor's (a composition deeper than a stack
 * holds reads a dense copy, counted in *materialized when given). */
kiln_status kiln_tile_bind(kiln_tile_prog *tp, const kiln_tensor *vals, long *materialized);
/* Drops what kiln_tile_bind made (copies). Also done by the next bind. */
void kiln_tile_unbind(kiln_tile_prog *tp);

/* Evaluates elements [lo, hi) of the domain: out[k] points at element lo
 * of store k's dense row-major memory (its value's dtype; a pool store:
 * float32 over the domain), anchor (anchor groups) at element lo of the
 * anchor's output over the domain, row-major (it may be out[k] of a store:
 * each tile is read before it is written). Thread-safe for disjoint ranges
 * of one binding. isa picks the tile ops' version. */
kiln_status kiln_tile_exec(const kiln_tile_prog *tp, int64_t lo, int64_t hi, void *const *out, const float *anchor,
                           kiln_vm_isa isa);

/* kiln_tile_exec over [lo, hi) split into chunks of 32 tiles run on the
 * cpu pool (cpu_fallback/pool.h; on the caller when the pool is not held,
 * busy, or the range is under four chunks): one contiguous lane of chunks
 * per thread, several chunks per kiln_tile_exec call (TILE.md, Threads).
 * The same results, bit for bit, as one kiln_tile_exec: every element is
 * computed by the same ops whatever the call. */
#define KILN_TILE_PAR_STORES 64
/* Programs with at most this many stores look for interleaved column groups (kiln_tile_set_store_stride). */
#define KILN_TILE_ROW_GROUPS_MAX 64
kiln_status kiln_tile_exec_par(const kiln_tile_prog *tp, int64_t lo, int64_t hi, void *const *out,
                               const float *anchor, kiln_vm_isa isa);

/* Observers (ir/observe.h): expressions whose values are folded into
 * partials tile by tile, while the tile is hot (no second pass over memory,
 * nothing materialised). expr[j] is an expression index of the program's
 * spec; part[j] is merged into (the caller initialises it). An expression
 * nobody reads and nothing stores has no tile: it is not folded. */
typedef struct kiln_tile_obs {
  int n;
  const int *expr;
  kiln_obs_partial *part;
  /* the fold (NULL: kiln_obs_partial_fold_f32), e.g. a vectorised one */
  void (*fold)(kiln_obs_partial *p, const float *x, int64_t n);
} kiln_tile_obs;

/* kiln_tile_exec, folding the observed expressions (ob NULL: none). */
kiln_status kiln_tile_exec_obs(const kiln_tile_prog *tp, int64_t lo, int64_t hi, void *const *out, const float *anchor,
                               kiln_vm_isa isa, const kiln_tile_obs *ob);

/* Makes float32 store k write element i of the domain at out[k][i * stride]
 * instead of out[k][i] (a column of an interleaved output: the plan's
 * in-place Concat of [n, 1] slices). Elementwise groups only: an anchor's
 * epilogue blocks assume dense stores. Out-of-range calls are ignored. */
void kiln_tile_set_store_stride(kiln_tile_prog *tp, int store, int64_t stride);

/* Makes the program's float32 stores non-temporal whatever their size
 * (they always are from 16 MiB of output on). The plan sets it for steps
 * writing at least 1 MiB into the caller's output memory, which the run
 * does not read back in bulk: the stores then skip the read for ownership
 * and leave the caches to the inputs. AVX2 only; the results are the same. */
void kiln_tile_set_stream(kiln_tile_prog *tp, bool on);
#define KILN_TILE_STREAM_OUT_BYTES ((size_t)1 << 20)

/* Copies n floats from src to dst (not overlapping), with non-temporal
 * stores under AVX2 (isa), with memcpy otherwise. */
void kiln_tile_copy_stream(float *dst, const float *src, int64_t n, kiln_vm_isa isa);

/* For anchor groups: the store that the anchor's output block may be
 * rewritten into in place (float32, the domain's size): a store of the
 * anchor's value itself when there is one, else the first float32 store;
 * -1 when none. */
int kiln_tile_anchor_target(const kiln_tile_prog *tp);

/* For anchor groups, once bound: true when the program is exactly one
 * float32 store of Relu(anchor) (lo 0, hi +inf) or Clip(anchor, lo, hi)
 * with bounds the same at every element (constants, or scalar tensors such
 * as Clip's min/max initializers): a kernel may then clamp its output
 * blocks itself
 * (kiln_cpu_epilogue.clamp) with the tile ops' rules, the same values. */
bool kiln_tile_clamp(const kiln_tile_prog *tp, float *lo, float *hi);
/* For anchor groups, once bound: true when the program is exactly one
 * float32 store of anchor + a bias row (a float32 run of n elements with
 * stride 1, the same at every position of the other dims: a MatMul's
 * bias): element f of the domain gets anchor[f] + bias[f % n]. A kernel
 * may then add the row in its own store (kiln_cpu_epilogue.col_bias), the
 * same values. */
bool kiln_tile_col_bias(const kiln_tile_prog *tp, const float **bias, int64_t *n);
/* For anchor groups, once bound: true when the program is exactly one
 * float32 store of anchor + R, Relu(anchor + R) or Clip(anchor + R, lo,
 * hi) (add either order: it commutes, as for kiln_tile_col_bias — but for
 * the payload kept when both operands are NaN, which x86 takes from the
 * first; bounds the same at every element) with R a
 * float32 value read densely in the domain's order (a residual branch):
 * element f gets clip(anchor[f] + res[f], lo, hi) with the tile ops'
 * rules (lo -inf, hi +inf without a clip; 0, +inf for Relu). The epilogue
 * may then be that loop (kiln_cpu_residual), the same values. */
bool kiln_tile_residual(const kiln_tile_prog *tp, const float **res, float *lo, float *hi);
/* For anchor groups, once bound: true when the program is exactly one
 * float32 store of anchor * s (either order) with s the same at every
 * element (a constant or a scalar tensor): a kernel may then multiply in
 * its own store (kiln_cpu_epilogue.scaled), the same values. */
bool kiln_tile_scale(const kiln_tile_prog *tp, float *s);
/* True when store k reads accessor a's memory only at the element it
 * writes (every load of a is an identity map of the domain): the store may
 * then go in place over a's value. */
bool kiln_tile_inplace_ok(const kiln_tile_prog *tp, int store, int value);

/* ---- tile ops (tile_ops.c, compiled twice: *_base and *_avx2) ---- */

/* One expression over a tile: y[i] = op(a[i], b[i], c[i]) for i < n; the
 * arguments may alias y. p holds the float attributes, k the integer one. */
typedef struct kiln_tile_op {
  int op; /* kiln_fuse_op */
  float p[3];
  int64_t k;
} kiln_tile_op;

typedef void (*kiln_tile_op_fn)(const kiln_tile_op *op, int n, const float *a, const float *b, const float *c,
                                float *y);
void kiln_tile_eval_base(const kiln_tile_op *op, int n, const float *a, const float *b, const float *c, float *y);
void kiln_tile_eval_avx2(const kiln_tile_op *op, int n, const float *a, const float *b, const float *c, float *y);
/* add/sub/mul/div/min/max/relu/clip on 16 lanes (tile_avx512.c), the rest
 * by kiln_tile_eval_avx2: the same bits. Only where kiln_vm_cpu_has_avx512()
 * is true; the tile executor uses it under the AVX2 setting there. */
void kiln_tile_eval_avx512(const kiln_tile_op *op, int n, const float *a, const float *b, const float *c, float *y);
/* Copies n floats to dst; stream: with non-temporal stores where the ISA has
 * them (large outputs that would only evict the working set). */
void kiln_tile_store_base(float *dst, const float *src, int n, bool stream);
void kiln_tile_store_avx2(float *dst, const float *src, int n, bool stream);
void kiln_tile_fence_avx2(void);
/* The box columns' moves (tile.c, tile_avx512.c; the AVX-512F ones only
 * where kiln_vm_cpu_has_avx512()): dst[i] = s[4 i] for i < n, reading
 * s[0 .. 4 (n - 1)] only (a column of an [n, 4] tensor); and rows[4 i + j]
 * = column j at i, for i < n (four columns interleaved into rows). */
void kiln_tile_load_s4_base(float *dst, const float *s, int64_t n);
void kiln_tile_load_s4_avx512(float *dst, const float *s, int64_t n);
/* The four columns of n rows at once: cj[i] = s[4 i + j], reading
 * s[0 .. 4 n - 1] only (all of an [n, 4] tensor's columns, one pass). */
void kiln_tile_load_cols4_base(float *c0, float *c1, float *c2, float *c3, const float *s, int64_t n);
void kiln_tile_load_cols4_avx512(float *c0, float *c1, float *c2, float *c3, const float *s, int64_t n);
void kiln_tile_rows4_base(float *rows, const float *a, const float *b, const float *c, const float *d, int n);
void kiln_tile_rows4_avx512(float *rows, const float *a, const float *b, const float *c, const float *d, int n);

/* A linear run of the program's ops evaluated in one pass (tile_avx512.c):
 * y = step[n-1](… step[0](x) …), where each step is a cheap op (add, sub,
 * mul, div, min, max, relu, clip) or sigmoid / tanh / exp / erf, the
 * value so far is argument pos of the step and its other arguments are
 * tiles a[k] (uniform[k]: a[k][0] at every element). Per strip of 64
 * elements the value stays in registers through all the steps: the same
 * IEEE operations in the same order as the steps one by one, so the same
 * bits (kiln_tile_seq_base is the twin). Every argument is read at the
 * element written only, so y may be x or any a[k]. */
#define KILN_TILE_SEQ_MAX 16
typedef struct kiln_tile_seq_step {
  kiln_tile_op op;
  int pos;              /* which argument is the value so far */
  int n_args;           /* 1 (relu, sigmoid, tanh, exp, erf), 2 or 3 (clip) */
  const float *a[3];    /* the other arguments (a[pos] unused) */
  bool uniform[3];
} kiln_tile_seq_step;
typedef struct kiln_tile_seq {
  int n;                /* steps, 1 .. KILN_TILE_SEQ_MAX */
  const float *x;       /* the run's input */
  bool stream;          /* y is written once, read later: strips at 64-byte-aligned y by non-temporal stores (the
                           values are the same; the caller fences) */
  kiln_tile_seq_step s[KILN_TILE_SEQ_MAX];
} kiln_tile_seq;
/* True when op may be a step of a run. */
bool kiln_tile_seq_op(int op);
/* The twin: the steps one by one (kiln_tile_eval_base) over strips of 64
 * through a scratch strip, so the same aliasing rules. */
void kiln_tile_seq_base(const kiln_tile_seq *q, int n, float *y);
/* Only where kiln_vm_cpu_has_avx512() is true. */
void kiln_tile_seq_avx512(const kiln_tile_seq *q, int n, float *y);
/* Runs the bound program evaluates in one pass each (when no observer is
 * given and the AVX-512 ops are in use). */
int kiln_tile_seq_runs(const kiln_tile_prog *tp);
/* Tests only (not thread-safe): off, kiln_tile_bind finds no runs. */
void kiln_tile_seq_enable(bool on);

/* Column groups (four stride-4 column loads of one [n, 4] layout read in
 * one pass) the bound program has. */
int kiln_tile_col_groups(const kiln_tile_prog *tp);
/* Tests only (not thread-safe): off, kiln_tile_bind finds no column group. */
void kiln_tile_cols_enable(bool on);

/* True when kiln_tile_eval_* implements op for float arguments. */
bool kiln_tile_op_known(int op);

/* Not a kiln_fuse_op: the executor's own op for the erf form of Gelu,
 * 0.5·x·(1 + erf(x/√2)), found as a chain of the program's expressions
 * when it is bound. With x = a (b and c unused), p = {s, c1, c2}:
 *   t = k & 1 ? x·s : x/s;  u = erf(t) + c1;  y = k & 2 ? (x·c2)·u : (x·u)·c2
 * — the chain's own float operations in its own order, so the same bits as
 * its ops one by one; erf is vmath's (all versions bit-identical). */
#define KILN_TILE_OP_GELU 0x47454c55

/* Gelu chains the bound program runs as one KILN_TILE_OP_GELU each (when
 * no observer is given; observed runs evaluate every expression). */
int kiln_tile_gelu_chains(const kiln_tile_prog *tp);
/* Tests only (not thread-safe): off, kiln_tile_bind finds no Gelu chain. */
void kiln_tile_gelu_enable(bool on);

#endif
