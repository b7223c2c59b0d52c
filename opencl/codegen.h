/* opencl/codegen: the OpenCL C printer of kernel specs (prefix kiln_cl_) —
 * a bound elementwise/broadcast/injective spec as one kernel (one element,
 * or a float4/8/16 vector of them, per work-item; a transposed read through
 * a local-memory tile), index maps baked in as literals, the expression DAG
 * printed from a per-op format table; also the observed, epilogue, reduction
 * and alias-copy forms below. The OpenCL engine (opencl/engine_compile.c)
 * lowers fused groups through it. */
#ifndef KILN_OPENCL_CODEGEN_H
#define KILN_OPENCL_CODEGEN_H
#include <stdint.h>

#include "fuse/spec.h"
#include "ir/status.h"
#include "opencl/device.h"

/* The device facts the printer needs (what kiln_cl_device queries). */
typedef kiln_cl_device kiln_cl_device_info;

#define KILN_CL_SIG_MAX_ARGS 64

/* One __global buffer argument of a generated kernel. */
typedef struct kiln_cl_sig_arg {
  bool output;      /* false: spec accessor `index`, read; true: spec store `index`, written */
  int index;        /* accessor or store index in the spec */
  int value;        /* the graph value the buffer holds (dense, row-major) */
  kiln_dtype dtype; /* element type (BOOL is stored as uchar) */
  int64_t numel;    /* elements the buffer must hold */
} kiln_cl_sig_arg;

/* What the host needs to launch a generated kernel: its name, its buffer
 * arguments in order (accessors first, then stores; no scalar arguments:
 * sizes are literals), and the work-item count (launch it over n_items,
 * e.g. kiln_cl_launch_1d with local 0; the kernel ignores ids >= n_items). */
typedef struct kiln_cl_kernel_sig {
  char name[64];
  int n_args;
  kiln_cl_sig_arg args[KILN_CL_SIG_MAX_ARGS];
  int64_t n_items;
  bool uses_fp64; /* the source enables cl_khr_fp64 */
  /* > 0: launch with this local size. Work-group kernels (engine_fuse
     reductions: n_items is a multiple of it, and the launcher may lower it
     to what the kernel allows) and observed kernels
     (kiln_cl_codegen_observed: n_items = obs_groups * local, as set by
     the launcher; one more argument after args: the partials buffer) and
     tiled kernels (n_items = groups x local; any local size computes the
     same over the same number of groups). 0: the driver's. */
  size_t local;
  /* a kernel tiled through local memory (local > 0): the same computation
     untiled, in the same source, named twin, launched over twin_items with
     the driver's local size where the tiled kernel takes fewer than `local`
     items per group (CL_KERNEL_WORK_GROUP_SIZE; the launcher swaps them at
     bind); "" for other kernels */
  char twin[64];
  int64_t twin_items;
  /* a work-group reduction kernel whose rows follow the launch's global
     offset (get_group_id + offset / local size): it may be launched over a
     range of its groups (a padded symbolic dim, opencl/engine_sym.c); the
     work-item kernels (local 0, not observed) take any range through
     get_global_id anyway */
  bool group_offset;
  /* > 0: a work-item kernel whose items each take R neighbouring rows of the
     same columns (codegen.c row_plan), row_block_items items per R rows: a
     prefix of its items is a prefix of the rows only at a multiple of it
     (opencl/engine_sym.c resizes it only where each step of the symbol is
     such a multiple); 0: one item, one run of elements in flat order */
  int64_t row_block_items;
  /* > 0: one more __global float argument after args, the variant's
     scratch buffer (at least this many floats), for a matrix one kernel
     writes and the next reads: an im2col conv's column matrix between the
     im2col kernel and the SGEMM with the epilogue (opencl/engine_fuse.c).
     The engine gives every such kernel of a variant the same buffer (its
     steps run one after another); it is no graph value (not in the memory
     plan, never bound to a host buffer). Not with n_obs. */
  int64_t scratch;
  int n_obs;
  int obs_value[16];  /* the values reduced, in partial order */
  int64_t obs_numel;  /* elements of the domain */
  int64_t obs_groups; /* work-groups, each writing n_obs partials (set by the launcher) */
  int64_t obs_offset; /* its first partial (set by the launcher) */
} kiln_cl_kernel_sig;

/* Prints the OpenCL C 1.2 source of bound spec `spec` as one kernel named
 * "kiln_fused" for device dev into *source (kiln_malloc'd, caller frees with
 * kiln_free) and describes its arguments in *sig. Refuses, with a message
 * naming the reason (KILN_E_UNSUPPORTED_OP naming the op for an op or dtype
 * the printer does not handle; KILN_E_INVALID_SHAPE for an unbound spec),
 * anything but an elementwise spec without anchor or reductions, float64 on
 * a device without cl_khr_fp64, and float16/bfloat16. On failure *source is
 * NULL. */
kiln_status kiln_cl_codegen(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, char **source,
                            kiln_cl_kernel_sig *sig);

/* Same, with the kernel named `name` (a C identifier below 64 characters),
 * so that several kernels can be concatenated into one program. */
kiln_status kiln_cl_codegen_named(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                  char **source, kiln_cl_kernel_sig *sig);
/* kiln_cl_codegen_named whose work items take the elements in flat order
 * (never row_block_items): a plan with a symbolic dim launches a prefix of
 * the items for a run smaller than the bound (opencl/engine_sym.c). */
kiln_status kiln_cl_codegen_prefix(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                   char **source, kiln_cl_kernel_sig *sig);

/* Observers (ir/observe.h): kiln_cl_codegen_named, with the min, max and
 * NaN/+inf/-inf counts of expressions obs_expr[0..n_obs) (float32 values
 * computed over the whole domain, at most 16) reduced inside the kernel:
 * still one work-item per element (the kernel's arithmetic is unchanged),
 * each folds its element, then one work-group reduction in local memory
 * for all of them (a few barriers: PoCL's compile time grows with each),
 * and the group's first item writes one partial per expression — 5
 * ulongs: min and max as float bits, NaN, +inf, -inf counts — at
 * partials[(off + group * n_obs + j) * 5]; partials and off are the two
 * arguments after args. sig->local is the largest local size the local
 * arrays hold (a power of 2); the launcher may take a smaller power of 2
 * and then sets obs_groups, obs_offset and n_items (groups x local). */
#define KILN_CL_OBS_WG 256
kiln_status kiln_cl_codegen_observed(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                     const int *obs_expr, const int *obs_value, int n_obs, char **source,
                                     kiln_cl_kernel_sig *sig);

/* Prints a copy kernel `name` that makes alias `alias` of bound spec
 * `spec` (a view of memory the group's consumers need densely, e.g. a
 * graph output) dense: one work-item per element of the alias value, read
 * through its accessor's map (masked elements read the pad value), bit
 * patterns moved in an unsigned type of the element's size where no mask
 * needs the value. sig: the base buffer, then the alias value's buffer.
 * A transposed read worth it is tiled through local memory (sig->local,
 * sig->twin: see there and opencl/ENGINE.md); kiln_cl_codegen_named does
 * the same for an elementwise spec's one transposed input. */
kiln_status kiln_cl_codegen_alias(const kiln_fuse_spec *spec, int alias, const kiln_cl_device_info *dev,
                                  const char *name, char **source, kiln_cl_kernel_sig *sig);

/* The relative tolerance (beyond the reference's own rounding) an op needs
 * in float32 because OpenCL's built-in it maps to is not correctly rounded
 * (OpenCL 1.2 full profile: exp/log/sin/... <= 3-4 ulp, pow 16 ulp); 0 for
 * ops printed exactly. Tests widen their bound by it. */
double kiln_cl_codegen_op_rtol(kiln_fuse_op op);

/* Fused groups beyond elementwise (opencl/engine_fuse.c). Float64
 * intermediates of these specs are computed in float32 when no buffer is
 * float64 (Softmax, LayerNormalization and BatchNormalization expand in
 * double); aliases are refused. */

/* What an anchor's op left out of its output for the epilogue kernel to
 * add (a Conv's bias, a Gemm's C: opencl/ops.h kiln_cl_op_addend): value
 * `value` (float32, dense, numel elements), read as the kernel's buffer
 * `anb_` by `expr`, text " + <expr>" over `gid` (the element's flat index). */
typedef struct kiln_cl_anchor_add {
  int value;
  int64_t numel;
  const char *expr;
} kiln_cl_anchor_add;

/* The epilogue of anchor spec `spec` as a kernel of its own, one work-item
 * per element of the domain (which must be the anchor's output shape):
 * argument 0 is the anchor's output `anchor_value` (float32, dense), read
 * as the ANCHOR expression — with `add` (NULL: none) argument 1, its value
 * added to the element first —; then the accessors, then the stores except
 * one into anchor_value (the anchor wrote it); a pooled store writes the
 * pooling node's input `pool_value` (-1: none). */
kiln_status kiln_cl_codegen_epilogue(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                     int anchor_value, const kiln_cl_anchor_add *add, int pool_value, char **source,
                                     kiln_cl_kernel_sig *sig);

/* The same epilogue as two pieces of text for a kernel that computes the
 * anchor itself (the direct convolution): *params, the accessor and store
 * parameters (", __global const float *restrict a0, ..."; their sig args
 * are appended to sig), and *body, statements for one element seeing `ep_i`
 * (its flat index in the domain, long) and `anc` (the anchor's value,
 * float). Every store is written, the anchor's own value included. float32
 * only. */
kiln_status kiln_cl_codegen_epilogue_parts(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev,
                                           int pool_value, char **params, char **body, kiln_cl_kernel_sig *sig);

/* kiln_cl_codegen_epilogue_parts for a kernel that pools the epilogue's
 * result itself (the direct convolution with its MaxPool / AveragePool):
 * the spec's only store must be the pooled one (nothing else needs the
 * epilogue's values). *params: the accessors' parameters alone (sig args
 * appended; the kernel writes the pooled output itself), *body: statements
 * for one element (ep_i, anc) that set `ep_v` (float, declared by the
 * kernel) to the pooled argument. float32 only. */
kiln_status kiln_cl_codegen_epilogue_pooled(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, char **params,
                                            char **body, kiln_cl_kernel_sig *sig);

/* A reduction spec (reductions with their prologues, epilogue and stores,
 * float reductions only) as one kernel: one work-group of sig->local items
 * per element of the reduced domain; each reduction is a strided loop over
 * the reduced elements and a tree in local memory, then the full-domain
 * stores are a second strided loop and the reduced stores are written by
 * item 0. Rows shorter than 32 elements get a work-item each instead
 * (sig->local 0: the driver's local size). The group kernel works with any power-of-two local size up to
 * sig->local: launch n_items / sig->local groups of that size, or of the
 * largest power of two the kernel allows (CL_KERNEL_WORK_GROUP_SIZE). */
kiln_status kiln_cl_codegen_reduce(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                   char **source, kiln_cl_kernel_sig *sig);

/* The helpers generated kernels use (guarded: any number of copies in a
 * program); for kernels that embed kiln_cl_codegen_epilogue_parts. */
const char *kiln_cl_codegen_prelude(void);

/* The helpers of the w-lane vector kernels (w = 4, 8, 16; else NULL),
 * kiln_exp_floatW, kiln_tanh_floatW, ...; they need kiln_cl_codegen_prelude
 * before them. KILN_CL_MATH=builtin: the OpenCL built-ins under the same
 * names (both preludes). */
const char *kiln_cl_codegen_vec_prelude(int w);

#endif
