/* plugin/engine_opencl: one kiln_engine per usable OpenCL device (the
 * engine itself is opencl/engine), and the KILN_DEVICE tokens `opencl` and
 * `opencl:P:D`. The engine table is made once per process. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/engine.h"
#include "opencl/import_cache.h"
#include "plugin/plugin.h"

/* the rewritten-graph key an import record carries, or NULL */
static const kiln_cl_key *graph_key_of(const void *rec) {
  const kiln_cl_import *imp = rec;
  return imp && imp->hit && imp->has_graph_key ? &imp->graph_key : NULL;
}

static kiln_status cl_prepare_on(const void *impl, const kiln_graph *g, const void *rec, void **plan) {
  kiln_cl_plan *p;
  kiln_status s = kiln_cl_plan_prepare_keyed(impl, NULL, g, graph_key_of(rec), &p);
  *plan = s ? NULL : p;
  return s;
}

static kiln_status cl_prepare(const kiln_graph *g, void **plan) {
  (void)g;
  *plan = NULL;
  return kiln_fail(KILN_E_INTERNAL, "an OpenCL engine needs its device");
}

static kiln_status cl_run(void *plan, const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs) {
  return kiln_cl_plan_run(plan, g, bound, outs);
}

static void cl_release(void *plan) { kiln_cl_plan_release(plan); }

static void cl_stats(void *plan, const kiln_graph *g, kilnGraphStatistics *st) {
  kiln_cl_plan_stats cs;
  (void)g;
  kiln_cl_plan_get_stats(plan, &cs);
  st->nodesImported = (uint64_t)cs.nodes_in;
  st->nodesPlanned = (uint64_t)cs.nodes_out;
  st->kernelNodes = (uint64_t)(cs.kernels + cs.device_ops + cs.host_nodes);
  st->memoryPlans = (uint64_t)cs.variants;
  st->arenaBytes = cs.arena_bytes;
  st->lowerBoundBytes = cs.lower_bound;
  st->noReuseBytes = cs.no_reuse;
  st->foldedNodes = (uint64_t)cs.folded;
  st->batchNormsFolded = (uint64_t)cs.bn_folded;
  st->cseMerged = (uint64_t)cs.cse;
  st->noOpsRemoved = (uint64_t)cs.noops;
  st->transposesMerged = (uint64_t)cs.transposes;
  st->deadNodesRemoved = (uint64_t)cs.dead;
  st->fusedGroups = (uint64_t)cs.fused_groups;
  st->fusedNodes = (uint64_t)cs.fused_nodes;
}

/* ---- the host's context and buffers ---- */

static kiln_status cl_backend_open(const void *impl, void *hctx, void **bctx) {
  kiln_cl_slot *sl;
  kiln_status s = kiln_cl_slot_open(impl, (cl_context)hctx, &sl);
  *bctx = s ? NULL : sl;
  return s;
}

static void cl_backend_close(void *bctx) { kiln_cl_slot_close(bctx); }

static bool cl_backend_warm(const void *impl) { return kiln_cl_engine_open_device(impl); }

static kiln_status cl_prepare_in(const void *impl, void *bctx, const kiln_graph *g, const void *rec, void **plan) {
  kiln_cl_plan *p;
  kiln_status s = kiln_cl_plan_prepare_keyed(impl, bctx, g, graph_key_of(rec), &p);
  *plan = s ? NULL : p;
  return s;
}

/* ---- the graph as imported, from the kiln cache (opencl/import_cache) ---- */

static bool cl_import_lookup(const void *model, size_t size, uint32_t nweights, const onnxTensorDescriptorV1 *weights,
                             kiln_graph **g, void **rec) {
  *g = NULL;
  *rec = NULL;
  kiln_cl_raw_weight *w = nweights ? kiln_calloc(nweights, sizeof *w) : NULL;
  kiln_cl_import *imp = kiln_calloc(1, sizeof *imp);
  if ((nweights && !w) || !imp) { /* no record: the import goes on as without a cache */
    kiln_free(w);
    kiln_free(imp);
    return false;
  }
  for (uint32_t i = 0; i < nweights; i++) {
    const onnxTensorDescriptorV1 *d = &weights[i];
    size_t bytes = kiln_dtype_size((kiln_dtype)d->dataType);
    for (uint32_t k = 0; k < d->dimensions; k++) bytes *= (size_t)d->shape[k];
    w[i] = (kiln_cl_raw_weight){d->name, d->dataType, d->dimensions, d->shape,
                                (const void *)(uintptr_t)d->buffer, bytes};
  }
  bool hit = kiln_cl_import_lookup(model, size, nweights, w, imp, g);
  kiln_free(w);
  if (!imp->keyed) {
    kiln_free(imp);
    return false;
  }
  *rec = imp;
  return hit;
}

static void cl_import_store(void *rec, const kiln_graph *g, double import_ms) {
  if (rec) kiln_cl_import_store(rec, g, import_ms);
}

static void cl_import_release(void *rec) {
  if (!rec) return;
  kiln_cl_import_release(rec);
  kiln_free(rec);
}

static kiln_status cl_check_buffer(void *bctx, void *mem, size_t bytes, const char *what) {
  if (!bctx)
    return kiln_fail(KILN_E_MODEL,
                     "%s: an OpenCL buffer needs a backend initialized with ONNXIFI_BACKEND_OPENCL_CONTEXT (the "
                     "buffer's context); this one runs on kiln's own context",
                     what);
  return kiln_cl_slot_check_buffer(bctx, (cl_mem)mem, bytes, what);
}

/* void* arrays as cl_mem arrays (n entries; NULL stays NULL). */
static cl_mem *mem_array(void *const *m, int n, kiln_status *s) {
  if (!m || *s) return NULL;
  cl_mem *c = kiln_calloc((size_t)n + 1, sizeof *c);
  if (!c) {
    *s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
    return NULL;
  }
  for (int i = 0; i < n; i++) c[i] = (cl_mem)m[i];
  return c;
}

static kiln_status cl_run_mem(void *plan, const kiln_graph *g, const kiln_tensor *const *bound, void *const *mem_in,
                              kiln_tensor *outs, void *const *mem_out) {
  kiln_status s = KILN_OK;
  cl_mem *mi = mem_array(mem_in, g->n_values, &s), *mo = mem_array(mem_out, g->n_outputs, &s);
  if (!s) s = kiln_cl_plan_run_mem(plan, g, bound, mi, outs, mo);
  kiln_free(mi);
  kiln_free(mo);
  return s;
}

static pthread_mutex_t engines_mu = PTHREAD_MUTEX_INITIALIZER;
static bool engines_done; /* made (maybe none): never again */
static kiln_engine *engines; /* per device of kiln_cl_engine_devices(), same order */
static char (*names)[32];
static char (*descs)[256];
static int n_engines;

/* With engines_mu held. Running out of host memory (here or while the
 * devices are listed) leaves the table unmade: the next call tries again. */
static void make_engines_locked(void) {
  const kiln_cl_device_list *l = kiln_cl_engine_devices();
  if (kiln_cl_engine_devices_status()) return;
  engines_done = true;
  if (!l->n) return;
  engines = kiln_calloc((size_t)l->n, sizeof *engines);
  names = kiln_calloc((size_t)l->n, sizeof *names);
  descs = kiln_calloc((size_t)l->n, sizeof *descs);
  if (!engines || !names || !descs) {
    kiln_free(engines);
    kiln_free(names);
    kiln_free(descs);
    engines = NULL;
    names = NULL;
    descs = NULL;
    engines_done = false;
    return;
  }
  for (int i = 0; i < l->n; i++) {
    const kiln_cl_device *d = &l->devices[i];
    char b[224];
    kiln_cl_device_describe(d, b, sizeof b);
    snprintf(names[i], sizeof names[i], "opencl:%s", d->id);
    snprintf(descs[i], sizeof descs[i], "OpenCL device %s", b);
    kiln_engine *e = &engines[i];
    e->name = names[i];
    e->device = descs[i];
    e->device_type = (d->type & CL_DEVICE_TYPE_GPU)           ? ONNXIFI_DEVICE_TYPE_GPU
                     : (d->type & CL_DEVICE_TYPE_ACCELERATOR) ? ONNXIFI_DEVICE_TYPE_NPU
                                                              : ONNXIFI_DEVICE_TYPE_CPU;
    /* one variant at the bound of a symbolic outermost dim serves every
       smaller run (opencl/engine_sym.c); graphs that cannot resize fall
       back to a variant per input-shape set (KILN_LOG=info says why); runs
       on one device serialise on its slot lock (tests/stress_threads.c on
       PoCL and rusticl) */
    e->capabilities = ONNXIFI_CAPABILITY_THREAD_SAFE | ONNXIFI_CAPABILITY_SYMBOLIC_BATCH_SIZE |
                      ONNXIFI_CAPABILITY_SYMBOLIC_SIZE_TENSORS;
    e->check = kiln_cl_engine_check;
    e->prepare = cl_prepare;
    e->run = cl_run;
    e->release = cl_release;
    e->stats = cl_stats;
    e->impl = d;
    e->prepare_on = cl_prepare_on;
    e->memory_types = ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER;
    e->cl_platform = d->platform;
    e->cl_device = d->device;
    e->backend_open = cl_backend_open;
    e->backend_close = cl_backend_close;
    e->backend_warm = cl_backend_warm;
    e->prepare_in = cl_prepare_in;
    e->check_buffer = cl_check_buffer;
    e->import_lookup = cl_import_lookup;
    e->import_store = cl_import_store;
    e->import_release = cl_import_release;
    e->run_mem = cl_run_mem;
  }
  n_engines = l->n;
}

/* The engine table; KILN_E_NOMEM (with a message) when it could not be made. */
static kiln_status make_engines(void) {
  pthread_mutex_lock(&engines_mu);
  if (!engines_done) make_engines_locked();
  bool done = engines_done;
  pthread_mutex_unlock(&engines_mu);
  return done ? KILN_OK : kiln_fail(KILN_E_NOMEM, "out of memory listing the OpenCL devices");
}

kiln_status kiln_opencl_engines_auto(int rank, kiln_engine_add_fn add, const kiln_engine **out, int max, int *n) {
  kiln_status s = make_engines();
  if (s) return s;
  const kiln_cl_device_list *l = kiln_cl_engine_devices();
  for (int i = 0; i < n_engines && !s; i++)
    if (kiln_cl_device_auto_rank(&l->devices[i]) == rank) s = add(&engines[i], out, max, n);
  return s;
}

kiln_status kiln_opencl_engines_select(const char *env, const char *tok, kiln_engine_add_fn add,
                                       const kiln_engine **out, int max, int *n) {
  /* a malformed token is refused before any driver is loaded */
  if (strcmp(tok, "opencl")) {
    int pi = -1, di = -1, used = 0;
    if (sscanf(tok, "opencl:%d:%d%n", &pi, &di, &used) != 2 || tok[used] || pi < 0 || di < 0)
      return kiln_fail(KILN_E_MODEL, "KILN_DEVICE=%s: malformed OpenCL device '%s' (expected opencl or opencl:P:D)",
                       env, tok);
  }
  kiln_status s = make_engines();
  if (s) return s;
  const kiln_cl_device_list *l = kiln_cl_engine_devices();
  if (!n_engines)
    return kiln_fail(KILN_E_MODEL, "KILN_DEVICE=%s: no usable OpenCL device%s%s", env,
                     l->notes && *l->notes ? ": " : "",
                     l->notes ? l->notes : "");
  int idx[64], k = 0;
  s = kiln_cl_devices_select(l, tok, idx, 64, &k);
  for (int i = 0; i < k && !s; i++) s = add(&engines[idx[i]], out, max, n);
  return s;
}

/* At unload (dlclose, exit): kiln's own tables go. The OpenCL contexts are
 * left to the driver (its teardown order at exit is its own). */
__attribute__((destructor)) static void free_engines(void) {
  kiln_free(engines);
  kiln_free(names);
  kiln_free(descs);
  engines = NULL;
  n_engines = 0;
  engines_done = false;
  kiln_cl_engine_shutdown();
}
