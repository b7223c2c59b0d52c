/* opencl/engine_int: the OpenCL engine's internal structures, shared by
 * engine.c (plan, variants), engine_compile.c (compile a variant) and
 * engine_run.c (run, profile). */
#ifndef KILN_OPENCL_ENGINE_INT_H
#define KILN_OPENCL_ENGINE_INT_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "ir/dump.h"
#include "ir/graph.h"
#include "ir/observe.h"
#include "ir/rewrite.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "opencl/cache.h"
#include "opencl/codegen.h"
#include "opencl/engine.h"
#include "opencl/ops.h"
#include "opencl/preload.h"
#include "opencl/runtime.h"

#define KILN_CL_VARIANTS 4  /* compiled variants kept per plan (least recently used out) */
#define KILN_CL_SPEC_MAX 64 /* elements of one specialising input */

/* One device's context, shared by every plan on it, and the lock that
 * serialises compiles and runs on it (kernel arguments live on shared
 * cl_kernel objects, CLBlast shares the queue). */
typedef struct kiln_cl_slot {
  pthread_mutex_t mu;
  kiln_cl_context *ctx;
  size_t align; /* arena offset alignment: max(CL_DEVICE_MEM_BASE_ADDR_ALIGN, KILN_MEMPLAN_ALIGN) bytes */
} kiln_cl_slot;

enum { KILN_CL_STEP_GEN, KILN_CL_STEP_OP, KILN_CL_STEP_COPY, KILN_CL_STEP_HOST };

/* One thing a run does, in order. */
typedef struct kiln_cl_step {
  int kind;
  int node;  /* OP, COPY, HOST: the node; GEN: the group's first node */
  int nodes; /* GEN: nodes in the group */
  int kern;  /* GEN: index into variant kernels */
  kiln_cl_op *op;
  int prof;  /* KILN_PROFILE entry */
  size_t src_at; /* OP: where its kernels' text starts in the variant's source (which program: build) */
  int text_of;   /* OP: 1 + the step whose op printed this op's kernels' text (the same but for the name prefix:
                    not printed again, its kernels named and copied from that op's), 0: its own text */
} kiln_cl_step;

/* One of a variant's programs (opencl/engine_compile.c build). */
typedef struct kiln_cl_vprog {
  cl_program prog;
  kiln_cl_key key;
  bool store_binary; /* built from source: put its binary in the kiln cache after the second run */
  bool from_cache;   /* from the kiln cache (a device binary) or the context's kept programs */
  bool from_process; /* ... from the context's kept programs (built earlier in this process) */
  double build_ms;   /* clBuildProgram from source (0: from the cache) */
} kiln_cl_vprog;

/* Where a value lives on the device. */
typedef struct kiln_cl_place {
  cl_mem mem;   /* the buffer kernels get: own buffer, or a sub-buffer of the arena */
  cl_mem base;  /* own buffer, or the arena */
  size_t offset; /* in base */
  size_t bytes;
  bool own;     /* mem is an allocation of its own (not a sub-buffer) */
  bool shared;  /* a view's reference to its storage's mem (retained) */
  void *host;   /* own, on a CPU device: the host block under mem (host_buffer), or NULL */
} kiln_cl_place;

/* Symbolic dims (opencl/engine_sym.c): how many symbols one variant serves
 * (the batch N and a sequence dim S). */
enum { KILN_CL_SYMS = 2 };
/* A value's dims that scale with the symbols: dim ax[k] is c * symbol k
 * (-1: none). Its layout is `outer` blocks (at the bounds: the product of
 * the dims before the innermost symbolic axis, whose symbol is `row`) of
 * rows that scale with `row`; the blocks scale with `blk` (-1: a constant
 * count), a symbol with only dims of 1 before it. */
typedef struct kiln_cl_symval {
  bool dep;
  int8_t ax[KILN_CL_SYMS];
  int8_t row, blk;
  int64_t outer;
} kiln_cl_symval;
/* A step at a smaller run: on — over the run's part (else at the bounds);
 * box > 0 — that many blocks at the bounds, a launch (GEMM) per block of
 * the run's (blocks scaled by blk, -1: all) over the rows scaled by row,
 * or (lead >= 0: where that saves little, kiln_cl_sym_mode) a prefix in
 * lead, whole blocks with their padding in one launch; box 0 — a prefix:
 * its rows (items, groups, GEMM m) scaled by row. bytes: a block of its
 * first output at the bounds. */
typedef struct kiln_cl_symstep {
  bool on;
  int32_t box;
  int8_t row, blk, lead;
  int64_t bytes;
} kiln_cl_symstep;

typedef struct kiln_cl_variant {
  int64_t *key;
  int nkey;
  unsigned long used;
  bool host_only;       /* shapes stay data-dependent: the whole graph runs on the host */
  kiln_graph *g;        /* the specialised, rewritten graph (its weights may be d's or rec's) */
  kiln_cl_cache_view rec; /* the kiln cache record g was read from (g's folded constants are read in place), or none */
  int host_weights;     /* weights whose buffer is their host bytes (kiln_cl_buffer_over_host) */
  kiln_graph *d;        /* the specialised graph g was made from (the plan's weights, borrowed); kept while g is */
  kiln_shapes *sh;
  int *in_map;          /* per input of g: the index of that input in the plan's original graph */
  int n_steps;
  kiln_cl_step *steps;
  int n_kern;
  kiln_cl_kernel *kern;
  kiln_cl_kernel_sig *sig;
  int n_prog;           /* the source in n_prog programs (one; several on rusticl: cut_source) */
  kiln_cl_vprog *progs;
  kiln_cl_place *place; /* per value of g */
  cl_mem arena;
  void *arena_host;     /* the host block under the arena on a CPU device (host_buffer), or NULL */
  uint64_t arena_bytes;
  cl_mem scratch;         /* the kernels' scratch (codegen.h kiln_cl_kernel_sig.scratch), or NULL */
  uint64_t scratch_bytes;
  bool ran;
  int runs;         /* successful runs */
  bool from_cache;  /* every program came from the kiln cache (a device binary) or the context's kept programs */
  bool from_process; /* ... from the context's kept programs (built earlier in this process) */
  double build_ms;  /* clBuildProgram from source, all programs (0: from the cache) */
  cl_mem *bind;     /* during a run: per value, the host's cl_mem used in place of its own buffer (or NULL) */
  kiln_schedule *sched; /* what the memory planner saw: step k's reads/writes (then the read of the outputs) */
  struct kiln_cl_vobs *obs; /* observing plans: partial buffers, the record map (engine_observe.c) */
  /* symbolic dims (opencl/engine_sym.c): compiled at the bounds
     sym_bound[] of its sym_count symbols (0: not resizable), run at sym_n[]
     (sym_small: some symbol below its bound this run); per value and per
     step what scales with which symbol. sym_padded: some value has dims
     other than 1 before its innermost symbolic axis, so a smaller run is a
     sub-box of the bound's layout (not a prefix), the inputs and outputs
     are copied as rectangles, and a step runs over the run's blocks and
     rows (sym_st), else at the bounds */
  bool sym_checked, sym_padded, sym_small;
  int sym_count;
  int64_t sym_bound[KILN_CL_SYMS], sym_n[KILN_CL_SYMS];
  kiln_cl_symval *sym_val;
  kiln_cl_symstep *sym_st;
} kiln_cl_variant;

/* x (a dim, rows or bytes that are c * bound of symbol k) at this run's
   size of symbol k (k < 0: x). */
static inline int64_t kiln_cl_sym_scale(const kiln_cl_variant *v, int k, int64_t x) {
  return k < 0 ? x : x / v->sym_bound[k] * v->sym_n[k];
}
/* Value w's bytes (or elements) x at this run's sizes (its dense size: a
   padded value's host copy). */
static inline int64_t kiln_cl_sym_at(const kiln_cl_variant *v, int w, int64_t x) {
  if (!v->sym_small || !v->sym_val[w].dep) return x;
  for (int k = 0; k < v->sym_count; k++)
    if (v->sym_val[w].ax[k] >= 0) x = kiln_cl_sym_scale(v, k, x);
  return x;
}
/* Value w is a sub-box of its buffer this run (padded layout): *outer
   blocks (the run's) of *row bytes each at the bounds, the first *run
   bytes of each the run's. */
static inline bool kiln_cl_sym_box(const kiln_cl_variant *v, int w, size_t bytes, size_t *outer, size_t *row,
                                   size_t *run) {
  const kiln_cl_symval *x = v->sym_small ? &v->sym_val[w] : NULL;
  if (!x || !x->dep || x->outer <= 1) return false;
  *outer = (size_t)kiln_cl_sym_scale(v, x->blk, x->outer);
  *row = bytes / (size_t)x->outer;
  *run = (size_t)kiln_cl_sym_scale(v, x->row, (int64_t)*row);
  return true;
}
/* A launch per block where the padding it skips is at least half of each
   block and this many bytes of it (opencl/ENGINE.md, "Two symbols":
   measured on PoCL and rusticl); else one launch over whole blocks. */
enum { KILN_CL_SYM_BOX_BYTES = 64 << 10 };
/* Step k this run: 0 at the bounds; 1 a prefix, its rows scaled by
   symbol *sym; 2 per block (sym_st[k]). */
static inline int kiln_cl_sym_mode(const kiln_cl_variant *v, int k, int *sym) {
  const kiln_cl_symstep *ss = v->sym_small ? &v->sym_st[k] : NULL;
  if (!ss || !ss->on) return 0;
  if (ss->box) {
    int64_t n = ss->row >= 0 ? v->sym_n[ss->row] : 1, b = ss->row >= 0 ? v->sym_bound[ss->row] : 1;
    if (ss->lead < 0 || kiln_cl_sym_scale(v, ss->blk, ss->box) == 1 ||
        (2 * n <= b && ss->bytes / b * (b - n) >= KILN_CL_SYM_BOX_BYTES))
      return 2;
  }
  *sym = ss->box ? ss->lead : ss->row;
  return 1;
}

typedef struct kiln_cl_prof {
  char name[96];
  long count;
  double ns;
} kiln_cl_prof;

struct kiln_cl_plan {
  const kiln_cl_device *dev;
  kiln_cl_slot *slot;
  kiln_graph *orig; /* the graph as given (its weights borrowed from the caller's graph) */
  bool *spec;       /* per input of orig: specialise on its values */
  kiln_cl_variant *var[KILN_CL_VARIANTS];
  unsigned long clock;
  kiln_cl_plan_stats st;
  bool profile;      /* KILN_PROFILE or KILN_TRACE: each step is timed (and waited for) */
  bool print_table;  /* KILN_PROFILE: the table at release */
  bool trace;        /* KILN_TRACE=file.json: a Chrome/Perfetto trace of every step */
  int n_prof, cap_prof;
  kiln_cl_prof *prof;
  int n_trace, cap_trace;
  struct kiln_cl_trace_ev {
    int prof;
    double ts_ns, dur_ns; /* host clock start, duration */
  } *trace_ev;
  char dump_stem[KILN_DUMP_STEM_MAX + 1];
  /* prepare's rewrite of a graph whose input shapes are all known: the first
     variant takes it instead of rewriting again (then NULL) */
  kiln_graph *probe_g;
  kiln_shapes *probe_sh;
  kiln_rewrite_stats probe_rst;
  kiln_cl_cache_view probe_rec; /* the record probe_g borrows from (kiln_cl_rewrite), or none */
  signed char *probe_facts;     /* its constants' facts (kiln_cl_rewrite), or NULL */
  /* observers (engine_observe.c): obs_mode 0 for a plain plan, else 1 +
     KILN_CL_OBS_* bits of an observing plan; the observing plans of a plain
     one (per mode - 1, compiled at the first observed run); the reduction
     kernels of an observing plan (per element type); the observer of the
     run in progress */
  int obs_mode;
  struct kiln_cl_plan *obs_plan[4];
  cl_program obs_prog;
  kiln_cl_kernel obs_red[16], obs_final, obs_batch;
  kiln_obs *run_obs;
  struct kiln_cl_sym *sym; /* symbolic dims (opencl/engine_sym.c); NULL: none */
  /* during prepare: the programs of the last init of this graph on this
     device, loading ahead (opencl/preload.h); NULL otherwise */
  kiln_cl_preload *preload;
};

/* ---- symbolic dims (opencl/engine_sym.c) ---- */
/* At prepare: finds the symbolic input dims (up to KILN_CL_SYMS dim_params,
 * each at most once per input, any axis) and their bounds
 * (kiln.bound.<name>, else the first run's sizes); KILN_CL_SYMBOLIC=0 off. */
kiln_status kiln_cl_sym_setup(kiln_cl_plan *p);
void kiln_cl_sym_free(kiln_cl_plan *p);
/* The variant for these inputs: the one compiled at the bounds with the
 * run's sizes set, or (graphs that cannot resize) the exact one. */
kiln_status kiln_cl_sym_variant_get(kiln_cl_plan *p, const kiln_tensor *const *in, kiln_cl_variant **out);
/* kiln_cl_variant_get without the symbolic path: keyed by exact shapes. */
kiln_status kiln_cl_variant_get_exact(kiln_cl_plan *p, const kiln_tensor *const *in, kiln_cl_variant **out);

/* Rewrites g0 (constant folding with the reference kernels), checks it and
 * infers its shapes. keep_outputs: observe all (no rewrite that erases a
 * node output, ir/rewrite.h). A graph from the kiln cache borrows g0's
 * weights and the record's bytes: *rec (zero when none) must be released
 * (kiln_cl_cache_view_release) after *g, and g0 must outlive *g. known
 * (may be NULL): g0's rewritten-graph key (kiln_cl_rewrite_key, not
 * keep_outputs) when the caller has it, so that it is not computed again.
 * *facts (kiln_malloc'd, g's n_values bytes, or NULL): the finiteness of
 * the constants the lowering reads (kiln_cl_finite_facts) — from the
 * record, or read for the record stored — to seed kiln_cl_finite_set's
 * memo; the caller frees it. *keyed (keyed may be NULL): whether the
 * cache was looked up, *key then the rewritten-graph key it used. */
kiln_status kiln_cl_rewrite(const kiln_graph *g0, const kiln_cl_key *known, const char *dump_stem, bool keep_outputs,
                            kiln_graph **g, kiln_shapes **sh, kiln_rewrite_stats *rst, kiln_cl_cache_view *rec,
                            signed char **facts, kiln_cl_key *key, bool *keyed);
/* The variant for these inputs (per input of p->orig; NULL for initializers),
 * compiled on first sight. Call with the slot locked (or before the plan is
 * shared). */
kiln_status kiln_cl_variant_get(kiln_cl_plan *p, const kiln_tensor *const *in, kiln_cl_variant **out);
/* Compiles specialised graph d (borrowed) into *out. */
kiln_status kiln_cl_variant_compile(kiln_cl_plan *p, const kiln_graph *d, kiln_cl_variant **out);
void kiln_cl_variant_free(kiln_cl_plan *p, kiln_cl_variant *v);
/* Runs variant v: in[i] per input of p->orig; mem_in[i] (optional) a
 * device buffer holding input i instead of in[i]'s data (in[i] still gives
 * its shape), mem_out[o] (optional) a device buffer receiving output o. */
kiln_status kiln_cl_variant_run(kiln_cl_plan *p, kiln_cl_variant *v, const kiln_tensor *const *in,
                                const cl_mem *mem_in, kiln_tensor *outs, const cl_mem *mem_out);
/* ---- zero-copy host IO (engine_zerocopy.c) ---- */
/* One run's CL_MEM_USE_HOST_PTR wrappers of host tensors. */
typedef struct kiln_cl_zc {
  int n_in, n_out;
  cl_mem *in, *out;      /* per input of p->orig / per output: the wrapper, or NULL */
  cl_mem *mem_in, *mem_out; /* what the run gets: the host's own cl_mem, else the wrapper (NULL: none wrapped) */
  void **out_ptr;        /* per wrapped output: the host's memory */
} kiln_cl_zc;
/* The smallest host tensor (bytes) wrapped: SIZE_MAX where the device does
 * not work in host memory or KILN_CL_ZERO_COPY=0, 1 with =all. */
size_t kiln_cl_zc_min_bytes(const kiln_cl_plan *p);
/* Before variant v runs (slot locked): wraps the host-memory inputs (in[i]
 * without mem_in[i]) and outputs (outs[o] reserving host memory, without
 * mem_out[o]) of at least kiln_cl_zc_min_bytes that v reads or makes at
 * its planned size, whose memory is aligned for every step that touches
 * them and shares no byte with another tensor of the run. z->mem_in /
 * z->mem_out (when not NULL) go to kiln_cl_variant_run in place of mem_in
 * / mem_out. */
kiln_status kiln_cl_zc_begin(kiln_cl_plan *p, kiln_cl_variant *v, const kiln_tensor *const *in, const cl_mem *mem_in,
                             kiln_tensor *outs, const cl_mem *mem_out, kiln_cl_zc *z);
/* After the run (status s): maps and unmaps the wrapped outputs (the host's
 * memory then holds them; outs[o] points there), waits for the queue,
 * releases the wrappers. Returns s, or the first failure here (outs
 * released). */
kiln_status kiln_cl_zc_end(kiln_cl_plan *p, kiln_cl_zc *z, kiln_tensor *outs, kiln_status s);
/* The KILN_PROFILE entry named name (created); -1 when out of memory. */
int kiln_cl_profile_entry(kiln_cl_plan *p, const char *name);
void kiln_cl_profile_print(const kiln_cl_plan *p);
/* KILN_TRACE: appends p's events to the process's trace and rewrites the file. */
void kiln_cl_trace_flush(const kiln_cl_plan *p);
void kiln_cl_trace_shutdown(void);

/* ---- observers (engine_observe.c) ---- */
#define KILN_CL_OBS_KEEP 1   /* observe all: no erasing rewrites */
#define KILN_CL_OBS_VALUES 2 /* histograms: unfused, observed values read back */
/* 1 + the KILN_CL_OBS_* bits obs needs. */
int kiln_cl_obs_mode(const kiln_obs *obs);
/* Whether observing plan p compiles unfused (histograms). */
bool kiln_cl_obs_unfused(const kiln_cl_plan *p);
/* kiln_cl_plan_prepare for an observing plan of mode (0: plain). */
kiln_status kiln_cl_plan_prepare_in_mode(const kiln_cl_device *dev, kiln_cl_slot *host_slot, const kiln_graph *g,
                                         int mode, kiln_cl_plan **out);
/* Plain plan p's observing plan for obs (prepared on first use, kept). */
kiln_status kiln_cl_obs_plan(kiln_cl_plan *p, const kiln_obs *obs, kiln_cl_plan **out);
void kiln_cl_obs_plan_free(kiln_cl_plan *p);
/* Compile: spec sp as generated kernel `name`, with in-kernel reductions of
 * the float32 values it computes when p observes (else as
 * kiln_cl_codegen_named); after the build, kernel k's partials argument. */
kiln_status kiln_cl_obs_codegen(kiln_cl_plan *p, kiln_cl_variant *v, const kiln_fuse_spec *sp, const char *name,
                                char **text, kiln_cl_kernel_sig *sig);
kiln_status kiln_cl_obs_bind_kernel(kiln_cl_plan *p, kiln_cl_variant *v, int k);
void kiln_cl_obs_variant_free(kiln_cl_variant *v);
/* Run: before the steps (record map, constants), after step k (its
 * reductions enqueued), after the outputs (partials read and merged). */
kiln_status kiln_cl_obs_begin(kiln_cl_plan *p, kiln_cl_variant *v, kiln_obs *obs);
kiln_status kiln_cl_obs_step(kiln_cl_plan *p, kiln_cl_variant *v, int k, kiln_obs *obs);
kiln_status kiln_cl_obs_end(kiln_cl_plan *p, kiln_cl_variant *v, kiln_obs *obs);
/* After the queue finished: the final partials into the records. */
kiln_status kiln_cl_obs_collect(kiln_cl_plan *p, kiln_cl_variant *v, kiln_obs *obs);

#endif
