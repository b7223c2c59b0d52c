/* opencl/engine: the OpenCL execution engine (prefix kiln_cl_engine_ /
 * kiln_cl_plan_) — a graph compiled for one OpenCL device: rewritten,
 * shapes inferred and specialised per concrete input-shape set, grouped by
 * fuse/, each elementwise group printed by opencl/codegen, other nodes run
 * by a device op (opencl/ops) or on the host (the reference kernel on host
 * copies), all kernels of a variant in ONE program (cached on disk), the
 * intermediates in one device arena planned by ir/memplan. Knows nothing of
 * ONNXIFI: plugin/engines.c wraps it. See opencl/ENGINE.md. */
#ifndef KILN_OPENCL_ENGINE_H
#define KILN_OPENCL_ENGINE_H
#include <stdint.h>

#include "ir/graph.h"
#include "opencl/cache.h"
#include "opencl/device.h"

/* The usable devices, enumerated once per process (thread-safe). Never
 * fails: a machine without OpenCL gets an empty list whose notes say why;
 * an enumeration that ran out of host memory gives an empty list too and is
 * tried again at the next call (kiln_cl_engine_devices_status). */
const kiln_cl_device_list *kiln_cl_engine_devices(void);

/* KILN_E_NOMEM when the devices could not be listed for lack of host
 * memory (the list is then empty, and the next kiln_cl_engine_devices()
 * tries again); KILN_OK otherwise. */
kiln_status kiln_cl_engine_devices_status(void);

/* Frees the device list and the per-device slots at unload (the contexts
 * are left to the driver). No engine may be used afterwards. */
void kiln_cl_engine_shutdown(void);

typedef struct kiln_cl_plan kiln_cl_plan;

/* What a plan did (kiln_cl_plan_stats). */
typedef struct kiln_cl_plan_stats {
  int nodes_in, nodes_out; /* before / after rewrites (last variant compiled) */
  int variants;            /* shape/value specialisations compiled */
  int kernels;             /* generated kernels in the current variant */
  int programs;            /* programs they and the device ops' kernels are in (KILN_CL_PROGRAM_SPLIT) */
  int fused_groups, fused_nodes;
  int device_ops, host_nodes, copies; /* nodes run by opencl/ops, on the host, as a buffer copy */
  int host_graphs;         /* variants run wholly on the host (data-dependent shapes) */
  uint64_t arena_bytes, lower_bound, no_reuse;
  int host_weights;        /* weights read in place from host memory (CPU devices; KILN_CL_HOST_WEIGHTS) */
  int preloaded, preload_used; /* at prepare: programs loaded ahead from the last init's list, and taken (preload.h) */
  int preload_kernels, preload_kernels_used; /* ... their kernels made ahead, and taken */
  int preload_skipped; /* ... listed programs the lowering asked for before a thread started on them */
  int preload_waited;  /* ... listed programs the lowering asked for while a thread loaded them (it waited) */
  int preload_kernels_waited; /* ... kernels made ahead the lowering asked for while they were made (it waited) */
  int folded, bn_folded, cse, noops, transposes, dead;
  /* zero-copy (opencl/engine_zerocopy.c), summed over runs: host-memory
     inputs and outputs wrapped and used in place, and those refused
     (misaligned for a step that touches them, or sharing bytes with
     another tensor of the run) */
  long zc_inputs, zc_outputs, zc_refused;
} kiln_cl_plan_stats;

/* Checks that the engine can run g (reference op tables and shapes). */
kiln_status kiln_cl_engine_check(const kiln_graph *g);
/* Compiles g for device dev (an entry of kiln_cl_engine_devices()). The
 * plan copies g's structure but borrows its constant tensors (initializers,
 * tensor attributes: the weights are not copied), so g must stay alive and
 * unchanged until the plan is released. When every input shape is known the
 * variant is compiled now (kernels built), else at the first run. */
kiln_status kiln_cl_plan_prepare(const kiln_cl_device *dev, const kiln_graph *g, kiln_cl_plan **out);
/* Runs: bound[v] the tensors of g's runtime inputs (by value index of the
 * graph given to prepare), outs[i] receive owned dense results. */
kiln_status kiln_cl_plan_run(kiln_cl_plan *p, const kiln_graph *g, const kiln_tensor *const *bound,
                             kiln_tensor *outs);
void kiln_cl_plan_get_stats(const kiln_cl_plan *p, kiln_cl_plan_stats *st);

/* ---- the host's OpenCL objects (ONNXIFI_BACKEND_OPENCL_CONTEXT and
 * ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER; see opencl/ENGINE.md) ---- */

/* A slot is a context, its in-order queue and the lock around compiles and
 * runs. Each device has one shared slot on a context of its own; a host
 * that hands in its own context gets a slot of its own on it. */
typedef struct kiln_cl_slot kiln_cl_slot;

/* Creates dev's own context and queue now (they are made once per process,
 * else by the first plan prepared on dev): the plugin calls it at
 * onnxInitBackend, so that the first graph's init does not pay them (rusticl:
 * 2-20 ms, its queue's llvmpipe context). False with the error left set
 * when they cannot be made (a plan tries again and reports it). */
bool kiln_cl_engine_open_device(const kiln_cl_device *dev);

/* A slot on host (retained; a new queue on dev). KILN_E_MODEL with a
 * message when host is NULL, cannot be queried or lacks dev's device. */
kiln_status kiln_cl_slot_open(const kiln_cl_device *dev, cl_context host, kiln_cl_slot **out);
/* Releases the queue and the context reference; every plan prepared in the
 * slot must be released first. NULL-safe. */
void kiln_cl_slot_close(kiln_cl_slot *sl);
/* Checks that mem is a buffer or sub-buffer of sl's context holding at
 * least bytes bytes (what names it in messages). KILN_E_MODEL otherwise. */
kiln_status kiln_cl_slot_check_buffer(kiln_cl_slot *sl, cl_mem mem, size_t bytes, const char *what);
/* kiln_cl_plan_prepare in slot sl (NULL: dev's shared slot). */
kiln_status kiln_cl_plan_prepare_in(const kiln_cl_device *dev, kiln_cl_slot *sl, const kiln_graph *g,
                                    kiln_cl_plan **out);
/* kiln_cl_plan_prepare_in with g's rewritten-graph key given (g0_key: from
 * the import record g was read from, opencl/import_cache; NULL: computed). */
kiln_status kiln_cl_plan_prepare_keyed(const kiln_cl_device *dev, kiln_cl_slot *sl, const kiln_graph *g,
                                       const kiln_cl_key *g0_key, kiln_cl_plan **out);
/* kiln_cl_plan_run with device buffers. mem_in (NULL: none) per value of
 * g: a cl_mem of the plan's context holding that input (bound[v] then gives
 * its dtype and shape only), copied on the device. mem_out (NULL: none)
 * per output: a cl_mem that receives output o on the device (outs[o] then
 * gets its dtype and shape, no data). Every device write is complete when
 * this returns (clFinish). */
kiln_status kiln_cl_plan_run_mem(kiln_cl_plan *p, const kiln_graph *g, const kiln_tensor *const *bound,
                                 const cl_mem *mem_in, kiln_tensor *outs, const cl_mem *mem_out);
/* Releases the plan (prints the KILN_PROFILE table first). NULL-safe. */
void kiln_cl_plan_release(kiln_cl_plan *p);

#endif
