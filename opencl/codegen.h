/* opencl/codegen: the OpenCL C printer of kernel specs (prefix kiln_cl_) —
 * one work-item per element of a bound elementwise/broadcast/injective spec,
 * index maps baked in as literals, the expression DAG printed from a per-op
 * format table (tinygrad's cstyle renderer). Standalone: not yet wired into
 * the plugin. */
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
  /* observed kernels (kiln_cl_codegen_observed): launch n_items with this
     local size; one more argument after args: the partials buffer */
  size_t local;
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
 * needs the value. sig: the base buffer, then the alias value's buffer. */
kiln_status kiln_cl_codegen_alias(const kiln_fuse_spec *spec, int alias, const kiln_cl_device_info *dev,
                                  const char *name, char **source, kiln_cl_kernel_sig *sig);

/* The relative tolerance (beyond the reference's own rounding) an op needs
 * in float32 because OpenCL's built-in it maps to is not correctly rounded
 * (OpenCL 1.2 full profile: exp/log/sin/... <= 3-4 ulp, pow 16 ulp); 0 for
 * ops printed exactly. Tests widen their bound by it. */
double kiln_cl_codegen_op_rtol(kiln_fuse_op op);

#endif
