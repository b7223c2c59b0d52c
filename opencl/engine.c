/* opencl/engine: the plan — devices and their shared contexts, variants
 * (one compiled form per concrete input-shape set), compile (rewrite,
 * shapes, fusion, codegen / device ops / host fallback, one program, the
 * arena) and run. */
#include "opencl/engine.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuse/group.h"
#include "ir/alloc.h"
#include "ir/bags.h"
#include "ir/dump.h"
#include "ir/graph_edit.h"
#include "ir/memplan.h"
#include "ir/rewrite.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "opencl/cache.h"
#include "opencl/codegen.h"
#include "opencl/engine_int.h"
#include "opencl/graph_cache.h"
#include "opencl/ops.h"
#include "reference/exec.h"
#include "reference/ops.h"

/* ---- devices and their contexts (process lifetime) ---- */

static pthread_mutex_t devices_mu = PTHREAD_MUTEX_INITIALIZER;
static bool devices_done; /* enumerated (a list, maybe empty): never again */
static kiln_status devices_status; /* KILN_E_NOMEM: the last try ran out of memory */
static kiln_cl_device_list devices;
static kiln_cl_slot *slots;

/* With devices_mu held. Host memory exhaustion is not remembered: the next
 * call tries again (a transient failure must not hide the devices for the
 * rest of the process). */
static void enumerate_devices(void) {
  kiln_cl_device_list l;
  memset(&l, 0, sizeof l);
  devices_status = kiln_cl_devices_enumerate(&l);
  if (devices_status) {
    kiln_error_clear();
    return;
  }
  kiln_cl_slot *sl = kiln_calloc((size_t)l.n + 1, sizeof *sl);
  if (!sl) {
    kiln_cl_devices_free(&l);
    devices_status = KILN_E_NOMEM;
    return;
  }
  for (int i = 0; i < l.n; i++) pthread_mutex_init(&sl[i].mu, NULL);
  devices = l;
  slots = sl;
  devices_done = true;
}

const kiln_cl_device_list *kiln_cl_engine_devices(void) {
  pthread_mutex_lock(&devices_mu);
  if (!devices_done) enumerate_devices();
  pthread_mutex_unlock(&devices_mu);
  return &devices;
}

kiln_status kiln_cl_engine_devices_status(void) {
  pthread_mutex_lock(&devices_mu);
  kiln_status s = devices_done ? KILN_OK : devices_status;
  pthread_mutex_unlock(&devices_mu);
  return s;
}

void kiln_cl_engine_shutdown(void) {
  kiln_cl_trace_shutdown();
  pthread_mutex_lock(&devices_mu);
  if (slots) {
    for (int i = 0; i < devices.n; i++) pthread_mutex_destroy(&slots[i].mu);
    kiln_free(slots);
    slots = NULL;
    kiln_cl_devices_free(&devices);
  }
  devices_done = false;
  pthread_mutex_unlock(&devices_mu);
}

/* The slot (context + lock) of dev, with the context created on first use. */
static kiln_status slot_of(const kiln_cl_device *dev, kiln_cl_slot **out) {
  kiln_cl_engine_devices();
  *out = NULL;
  int i = (int)(dev - devices.devices);
  if (!devices.devices || i < 0 || i >= devices.n) return kiln_fail(KILN_E_INTERNAL, "unknown OpenCL device");
  kiln_cl_slot *sl = &slots[i];
  pthread_mutex_lock(&sl->mu);
  kiln_status s = KILN_OK;
  if (!sl->ctx) {
    s = kiln_cl_context_create(dev, &sl->ctx);
    if (!s) {
      cl_uint bits = 0;
      if (clGetDeviceInfo(dev->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL)) bits = 0;
      sl->align = bits / 8 > KILN_MEMPLAN_ALIGN ? bits / 8 : KILN_MEMPLAN_ALIGN;
    }
  }
  pthread_mutex_unlock(&sl->mu);
  if (!s) *out = sl;
  return s;
}

bool kiln_cl_engine_open_device(const kiln_cl_device *dev) {
  kiln_cl_slot *sl;
  return !slot_of(dev, &sl);
}

/* ---- checks ---- */

kiln_status kiln_cl_engine_check(const kiln_graph *g) {
  kiln_status s = kiln_ref_check_graph(g);
  if (s) return s;
  kiln_shapes *sh;
  if ((s = kiln_shapes_infer(g, &sh))) {
    if (s != KILN_E_SYMBOLIC_SHAPE) return s;
    kiln_error_clear(); /* a run's concrete dims decide: variants are per input-shape set */
    return KILN_OK;
  }
  kiln_shapes_free(sh);
  return KILN_OK;
}

static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* The rewritten graph from the kiln cache (opencl/graph_cache): true with
 * *g and *sh on a hit. */
static bool rewrite_from_cache(kiln_cl_key key, const kiln_graph *g0, kiln_graph **g, kiln_shapes **sh,
                               kiln_rewrite_stats *rst, kiln_cl_cache_view *rec, signed char **facts) {
  kiln_cl_cache_view b;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!kiln_cl_cache_map(key, &b)) return false;
  size_t n = b.len;
  double t_read = ms_since(&t0);
  kiln_status s = kiln_cl_graph_unpack(b.bytes, n, g0, g, rst, facts); /* *g borrows b */
  double t_unpack = ms_since(&t0) - t_read;
  if (!s) s = kiln_ref_check_graph(*g);
  if (!s) s = kiln_shapes_infer(*g, sh);
  if (!s) {
    int known = 0;
    for (int v = 0; *facts && v < (*g)->n_values; v++) known += (*facts)[v] != KILN_CL_FACT_UNKNOWN;
    kiln_cl_graph_cache_count(true);
    kiln_log(KILN_LOG_INFO, "opencl: rewritten graph from the kiln cache (%zu bytes, %s): read %.1f ms, unpack %.1f ms, "
             "check+shapes %.1f ms; %d weights' finiteness from the record", n, b.map ? "mapped" : "copied", t_read,
             t_unpack, ms_since(&t0) - t_read - t_unpack, known);
    *rec = b;
    return true;
  }
  kiln_log(KILN_LOG_INFO, "opencl: cached rewritten graph not used (%s): rewriting", kiln_last_error());
  kiln_error_clear();
  kiln_free(*facts);
  *facts = NULL;
  kiln_graph_free(*g);
  *g = NULL;
  kiln_cl_cache_view_release(&b);
  return false;
}

kiln_status kiln_cl_rewrite(const kiln_graph *g0, const kiln_cl_key *known, const char *dump_stem, bool keep_outputs,
                            kiln_graph **g, kiln_shapes **sh, kiln_rewrite_stats *rst, kiln_cl_cache_view *rec,
                            signed char **facts, kiln_cl_key *key_out, bool *keyed_out) {
  memset(rec, 0, sizeof *rec);
  if (keyed_out) *keyed_out = false;
  *facts = NULL;
  kiln_rewrite_opts ro = {0};
  ro.eval = kiln_ref_eval_node;
  ro.keep_outputs = keep_outputs;
  ro.dump_stem = dump_stem;
  *sh = NULL;
  /* the kiln cache keeps the rewritten graph (not under KILN_DUMP, whose
     rewrite dumps need the passes to run). The key is the graph alone: an
     option that changes what the rewrite makes (a field of ro) must be
     hashed into it too (kiln_cl_key_str after kiln_cl_graph_key) */
  kiln_cl_key key;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const char *gc = getenv("KILN_CL_GRAPH_CACHE"); /* 0: no graph records; 1: store every one */
  bool use_known = known && !keep_outputs; /* the import record's copy of this key (opencl/import_cache) */
  if (use_known) key = *known;
  bool keyed = !dump_stem && kiln_cl_cache_enabled() && !(gc && !strcmp(gc, "0")) &&
               (use_known || kiln_cl_rewrite_key(g0, keep_outputs, &key));
  double t_key = ms_since(&t0);
  if (keyed) kiln_log(KILN_LOG_INFO, "opencl: graph key %.1f ms%s", t_key, use_known ? " (from the import record)" : "");
  if (keyed && keyed_out) {
    *key_out = key;
    *keyed_out = true;
  }
  if (keyed && rewrite_from_cache(key, g0, g, sh, rst, rec, facts)) return KILN_OK;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kiln_status s = kiln_rewrite_run(g0, &ro, g, rst);
  /* Gather → Mul(mask) → ReduceSum as one SparseLengthsWeightedSum (ir/bags.h;
     not where observers keep every value: the rows would go) */
  int bags = 0;
  if (!s && !keep_outputs) s = kiln_embedding_bags(*g, &bags);
  if (bags) kiln_log(KILN_LOG_INFO, "opencl: %d embedding bag%s as SparseLengthsWeightedSum", bags, bags == 1 ? "" : "s");
  if (!s) s = kiln_ref_check_graph(*g);
  if (!s) s = kiln_shapes_infer(*g, sh);
  if (!s) s = kiln_ref_check_types(*g, *sh); /* generated kernels call no kernel's type check */
  if (s) {
    kiln_shapes_free(*sh);
    *sh = NULL;
    kiln_graph_free(*g);
    *g = NULL;
  }
  void *b = NULL;
  size_t n = 0;
  double t_rw = ms_since(&t0);
  /* stored only where it can pay: a rewrite of at least 0.5 ms (not a node
     test's; a warm init reads the record in 0.1-0.3 ms for small_cnn and
     transformer, the unchanged weights referenced). The key is no measure:
     every init with the cache on computes it (or takes it from the import
     record) to look the record up, stored or not — a rule of "twice the
     key" kept embedding_bag's 22 ms rewrite out (a 14 ms key over 51 MB in
     the cold init) though the warm init then had the key for free from
     the import record; KILN_CL_GRAPH_CACHE=1: always */
  keyed = keyed && ((gc && !strcmp(gc, "1")) || t_rw >= KILN_CL_RECORD_MIN_MS);
  /* the record's facts: the weights read now (the lowering then reads
     them from these) so that a warm init does not read them */
  int nf = 0;
  if (!s && keyed && (*facts = kiln_calloc((size_t)(*g)->n_values + 1, 1))) nf = kiln_cl_finite_facts(*g, *sh, *facts);
  if (!s && keyed && kiln_cl_graph_pack(*g, g0, rst, *facts, &b, &n) && kiln_cl_cache_put(key, b, n)) {
    kiln_cl_graph_cache_count(false);
    kiln_log(KILN_LOG_INFO,
             "opencl: rewrite+check+shapes %.1f ms; rewritten graph stored (%zu bytes, %d weights' finiteness) in "
             "%.1f ms", t_rw, n, nf, ms_since(&t0) - t_rw);
  }
  kiln_free(b);
  return s;
}

/* ---- prepare ---- */

static bool has_data_dependent(const kiln_shapes *sh) {
  for (int v = 0; v < sh->n; v++)
    if (sh->v[v].data_dependent) return true;
  return false;
}

static kiln_status prepare(const kiln_cl_device *dev, kiln_cl_slot *host_slot, const kiln_graph *g0, int mode,
                           const kiln_cl_key *g0_key, kiln_cl_plan **out);

kiln_status kiln_cl_plan_prepare(const kiln_cl_device *dev, const kiln_graph *g0, kiln_cl_plan **out) {
  return kiln_cl_plan_prepare_in_mode(dev, NULL, g0, 0, out);
}

kiln_status kiln_cl_plan_prepare_in(const kiln_cl_device *dev, kiln_cl_slot *host_slot, const kiln_graph *g0,
                                    kiln_cl_plan **out) {
  return kiln_cl_plan_prepare_in_mode(dev, host_slot, g0, 0, out);
}

kiln_status kiln_cl_plan_prepare_keyed(const kiln_cl_device *dev, kiln_cl_slot *host_slot, const kiln_graph *g0,
                                       const kiln_cl_key *g0_key, kiln_cl_plan **out) {
  return prepare(dev, host_slot, g0, 0, g0_key, out);
}

kiln_status kiln_cl_plan_prepare_in_mode(const kiln_cl_device *dev, kiln_cl_slot *host_slot, const kiln_graph *g0,
                                         int mode, kiln_cl_plan **out) {
  return prepare(dev, host_slot, g0, mode, NULL, out);
}

/* The end of prepare's preload: the threads joined, what was not taken
 * released, the list kept for the next init. */
static void preload_finish(kiln_cl_plan *p) {
  kiln_cl_preload_counts n;
  if (!p->preload) return;
  kiln_cl_preload_finish(p->preload, &n);
  p->preload = NULL;
  p->st.preloaded = n.loaded;
  p->st.preload_used = n.used;
  p->st.preload_kernels = n.kernels;
  p->st.preload_kernels_used = n.kernels_used;
  p->st.preload_skipped = n.skipped;
  p->st.preload_waited = n.waited;
  p->st.preload_kernels_waited = n.kernels_waited;
  if (n.loaded)
    kiln_log(KILN_LOG_INFO,
             "opencl: %d program%s loaded ahead, %d used (%d waited for); "
             "%d kernel%s made ahead, %d used (%d waited for)",
             n.loaded, n.loaded == 1 ? "" : "s", n.used, n.waited, n.kernels, n.kernels == 1 ? "" : "s", n.kernels_used,
             n.kernels_waited);
}

static kiln_status prepare(const kiln_cl_device *dev, kiln_cl_slot *host_slot, const kiln_graph *g0, int mode,
                           const kiln_cl_key *g0_key, kiln_cl_plan **out) {
  *out = NULL;
  kiln_status s = kiln_ref_check_graph(g0);
  if (s) return s;
  kiln_cl_slot *slot = host_slot;
  if (!slot && (s = slot_of(dev, &slot))) return s;
  kiln_cl_plan *p = kiln_calloc(1, sizeof *p);
  if (!p) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  p->dev = dev;
  p->slot = slot;
  p->obs_mode = mode;
  p->print_table = getenv("KILN_PROFILE") && *getenv("KILN_PROFILE") && strcmp(getenv("KILN_PROFILE"), "0");
  p->trace = getenv("KILN_TRACE") && *getenv("KILN_TRACE");
  p->profile = p->print_table || p->trace;
  if (kiln_dump_enabled()) kiln_dump_stem(g0->name, p->dump_stem, sizeof p->dump_stem);
  struct timespec tp0, tp1, tp2;
  clock_gettime(CLOCK_MONOTONIC, &tp0);
  /* the programs of the last init, loading while this one rewrites and
     lowers (opencl/preload.h; finished before prepare returns) */
  if (g0_key) p->preload = kiln_cl_preload_start(slot->ctx, kiln_cl_preload_key(dev, g0_key, mode));
  /* the weights stay the caller's (engine.h): the plan's graphs borrow them */
  if ((s = kiln_edit_clone_shared(g0, &p->orig))) goto fail;
  clock_gettime(CLOCK_MONOTONIC, &tp1);
  /* a probe: which inputs set shapes (their values specialise the plan) */
  kiln_graph *g = NULL;
  kiln_shapes *sh = NULL;
  kiln_rewrite_stats rst;
  kiln_cl_cache_view rec = {0}; /* g borrows it */
  signed char *facts = NULL;
  kiln_cl_key rkey;
  bool rkeyed = false;
  s = kiln_cl_rewrite(p->orig, g0_key, p->dump_stem[0] ? p->dump_stem : NULL, mode && ((mode - 1) & KILN_CL_OBS_KEEP),
                      &g, &sh, &rst, &rec, &facts, &rkey, &rkeyed);
  /* no import record's key: the rewrite's, once it has one (the list read
     now still loads beside the lowering) */
  if (!s && !p->preload && rkeyed) p->preload = kiln_cl_preload_start(slot->ctx, kiln_cl_preload_key(dev, &rkey, mode));
  /* shapes only a run's concrete dims settle (ir/symdim.h
     KILN_E_SYMBOLIC_SHAPE): no probe; every variant is made for a run's
     dims anyway, keyed on them alone (no input's values: a shape a value
     sets stays data-dependent in the variant, on the host) */
  bool no_probe = s == KILN_E_SYMBOLIC_SHAPE;
  if (no_probe) {
    kiln_log(KILN_LOG_INFO, "opencl plan: %s; variants per input-shape set", kiln_last_error());
    kiln_error_clear();
    s = KILN_OK;
  }
  if (s) {
    kiln_free(facts);
    goto fail;
  }
  clock_gettime(CLOCK_MONOTONIC, &tp2);
  kiln_log(KILN_LOG_INFO, "opencl plan '%s': prepare: copy %.1f ms, rewrite+shapes %.1f ms", g0->name ? g0->name : "",
           (double)(tp1.tv_sec - tp0.tv_sec) * 1e3 + (double)(tp1.tv_nsec - tp0.tv_nsec) / 1e6,
           (double)(tp2.tv_sec - tp1.tv_sec) * 1e3 + (double)(tp2.tv_nsec - tp1.tv_nsec) / 1e6);
  bool dyn = !no_probe && has_data_dependent(sh);
  p->spec = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *p->spec);
  if (!p->spec) {
    kiln_graph_free(g);
    kiln_shapes_free(sh);
    kiln_cl_cache_view_release(&rec);
    kiln_free(facts);
    s = kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    goto fail;
  }
  bool all_known = true;
  for (int i = 0; i < g0->n_inputs; i++) {
    const kiln_value *val = &g0->values[g0->inputs[i]];
    if (val->init) continue;
    /* shape-setting inputs: small integer tensors (shapes, axes, pads) and
       small float ones (Resize scales, Range bounds, OneHot depth) */
    kiln_dtype dt = val->type.dtype;
    if (dyn && (dt == KILN_I64 || dt == KILN_I32 || dt == KILN_F32 || dt == KILN_F64) && val->type.rank >= 0 &&
        val->type.rank <= 1) {
      p->spec[i] = true;
      all_known = false;
    }
    if (val->type.rank < 0) all_known = false;
    for (int d = 0; d < val->type.rank; d++)
      if (val->type.dims[d].value < 0 || val->type.dims[d].param) all_known = false;
  }
  /* every input shape known: compile now, so that graph init pays for it
     (the probe is that variant's rewritten graph: not rewritten again) */
  if (all_known) {
    p->probe_g = g;
    p->probe_sh = sh;
    p->probe_rst = rst;
    p->probe_rec = rec;
    p->probe_facts = facts;
    g = NULL;
    sh = NULL;
    memset(&rec, 0, sizeof rec);
    facts = NULL;
  }
  kiln_graph_free(g);
  kiln_shapes_free(sh);
  kiln_cl_cache_view_release(&rec); /* after g */
  kiln_free(facts);
  /* observing plans (mode) run exact variants: their partial buffers are sized per launch */
  if (!all_known && !mode && (s = kiln_cl_sym_setup(p))) goto fail;
  if (all_known) {
    const kiln_tensor **in = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *in);
    kiln_tensor *fake = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *fake);
    if (!in || !fake) s = kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    for (int i = 0; i < g0->n_inputs && !s; i++) {
      const kiln_value *val = &g0->values[g0->inputs[i]];
      if (val->init) continue;
      int64_t dims[KILN_MAX_RANK];
      for (int d = 0; d < val->type.rank; d++) dims[d] = val->type.dims[d].value;
      kiln_tensor_wrap(&fake[i], val->type.dtype, val->type.rank, dims, 0, NULL);
      in[i] = &fake[i];
    }
    kiln_cl_variant *v = NULL;
    if (!s) {
      pthread_mutex_lock(&slot->mu);
      s = kiln_cl_variant_get(p, in, &v);
      pthread_mutex_unlock(&slot->mu);
    }
    kiln_free(in);
    kiln_free(fake);
    if (s) goto fail;
  }
  preload_finish(p);
  *out = p;
  return KILN_OK;
fail:
  kiln_cl_plan_release(p);
  return s;
}

/* ---- variants ---- */

/* The key of this run: per runtime input its dtype, rank and dims, and the
 * values of the specialising inputs. */
static kiln_status make_key(const kiln_cl_plan *p, const kiln_tensor *const *in, int64_t **key, int *nkey) {
  const kiln_graph *g0 = p->orig;
  int n = 0, cap = 16;
  int64_t *k = kiln_malloc(sizeof *k * (size_t)cap);
  if (!k) return kiln_fail(KILN_E_NOMEM, "out of memory keying an OpenCL plan");
  for (int i = 0; i < g0->n_inputs; i++) {
    const kiln_tensor *t = in[i];
    if (!t) continue;
    int64_t need = 3 + t->rank + (p->spec[i] ? t->numel : 0);
    if (p->spec[i] && t->numel > KILN_CL_SPEC_MAX)
      need = 3 + t->rank; /* too large to specialise on: shapes only */
    while (n + need > cap) {
      cap *= 2;
      int64_t *q = kiln_realloc(k, sizeof *k * (size_t)cap);
      if (!q) {
        kiln_free(k);
        return kiln_fail(KILN_E_NOMEM, "out of memory keying an OpenCL plan");
      }
      k = q;
    }
    k[n++] = i;
    k[n++] = t->dtype;
    k[n++] = t->rank;
    for (int d = 0; d < t->rank; d++) k[n++] = t->dims[d];
    if (p->spec[i] && t->numel <= KILN_CL_SPEC_MAX)
      for (int64_t e = 0; e < t->numel; e++) {
        if (kiln_dtype_is_float(t->dtype)) { /* the value's bits: 0.5 and 0.25 differ */
          double f = kiln_get_f(t, e);
          memcpy(&k[n++], &f, sizeof f);
        } else {
          k[n++] = kiln_get_i(t, e);
        }
      }
  }
  *key = k;
  *nkey = n;
  return KILN_OK;
}

/* The graph of a variant: the original with the specialising inputs as
 * constants and every other runtime input's declared dims made concrete.
 * Its weights are the plan's (borrowed): it lives no longer than the plan. */
static kiln_status specialise(const kiln_cl_plan *p, const kiln_tensor *const *in, kiln_graph **out) {
  kiln_graph *d = NULL;
  kiln_status s = kiln_edit_clone_shared(p->orig, &d);
  if (s) return s;
  int kept = 0;
  for (int i = 0; i < d->n_inputs; i++) {
    int v = d->inputs[i];
    kiln_value *val = &d->values[v];
    const kiln_tensor *t = in[i];
    if (val->init || !t) {
      d->inputs[kept++] = v;
      continue;
    }
    if (p->spec[i] && t->data && t->numel <= KILN_CL_SPEC_MAX) {
      kiln_tensor *c = kiln_calloc(1, sizeof *c);
      if (!c || (s = kiln_tensor_copy(c, t))) {
        kiln_free(c);
        kiln_graph_free(d);
        return s ? s : kiln_fail(KILN_E_NOMEM, "out of memory specialising an OpenCL plan");
      }
      val->init = c;
      val->is_input = false;
      continue;
    }
    d->inputs[kept++] = v;
    val->type.kind = KILN_TYPE_TENSOR;
    val->type.dtype = t->dtype;
    for (int k = 0; k < val->type.rank; k++) kiln_free(val->type.dims[k].param);
    val->type.rank = t->rank;
    for (int k = 0; k < t->rank; k++) val->type.dims[k] = (kiln_dim){t->dims[k], NULL};
  }
  d->n_inputs = kept;
  /* the inputs' dims are concrete now: the symbols' bounds (kiln.bound.*)
     would only hold an output's declared symbol to them, and a run beyond a
     bound the symbolic path does not raise (three symbols, a graph reading
     shapes) would fail */
  int np = 0;
  for (int i = 0; i < d->n_props; i++) {
    if (!strncmp(d->prop_keys[i], "kiln.bound.", 11)) {
      kiln_free(d->prop_keys[i]);
      kiln_free(d->prop_vals[i]);
      continue;
    }
    d->prop_keys[np] = d->prop_keys[i], d->prop_vals[np++] = d->prop_vals[i];
  }
  d->n_props = np;
  *out = d;
  return KILN_OK;
}

kiln_status kiln_cl_variant_get(kiln_cl_plan *p, const kiln_tensor *const *in, kiln_cl_variant **out) {
  if (p->sym) return kiln_cl_sym_variant_get(p, in, out);
  return kiln_cl_variant_get_exact(p, in, out);
}

kiln_status kiln_cl_variant_get_exact(kiln_cl_plan *p, const kiln_tensor *const *in, kiln_cl_variant **out) {
  *out = NULL;
  int64_t *key = NULL;
  int nkey = 0;
  kiln_status s = make_key(p, in, &key, &nkey);
  if (s) return s;
  p->clock++;
  int slot = 0;
  for (int i = 0; i < KILN_CL_VARIANTS; i++) {
    kiln_cl_variant *v = p->var[i];
    if (v && v->nkey == nkey && !memcmp(v->key, key, sizeof *key * (size_t)nkey)) {
      v->used = p->clock;
      kiln_free(key);
      *out = v;
      return KILN_OK;
    }
    if (!p->var[i] || (p->var[slot] && p->var[i]->used < p->var[slot]->used)) slot = i;
    if (!p->var[slot]) break;
  }
  kiln_graph *d = NULL;
  kiln_cl_variant *v = NULL;
  if ((s = specialise(p, in, &d))) goto done;
  if ((s = kiln_cl_variant_compile(p, d, &v))) goto done;
  v->d = d; /* v->g may borrow d's tensors (a rewritten graph from the kiln cache) */
  d = NULL;
  v->key = key;
  v->nkey = nkey;
  v->used = p->clock;
  key = NULL;
  kiln_cl_variant_free(p, p->var[slot]);
  p->var[slot] = v;
  p->st.variants++;
  *out = v;
done:
  kiln_free(key);
  kiln_graph_free(d);
  return s;
}

/* ---- run ---- */

kiln_status kiln_cl_plan_run(kiln_cl_plan *p, const kiln_graph *g, const kiln_tensor *const *bound,
                             kiln_tensor *outs) {
  return kiln_cl_plan_run_mem(p, g, bound, NULL, outs, NULL);
}

kiln_status kiln_cl_plan_run_mem(kiln_cl_plan *p, const kiln_graph *g, const kiln_tensor *const *bound,
                                 const cl_mem *mem_in, kiln_tensor *outs, const cl_mem *mem_out) {
  /* observers (ir/observe.h): an observed run runs the observing plan */
  kiln_obs *obs = kiln_obs_run_current();
  if (obs && kiln_obs_graph(obs) != g) obs = NULL;
  if (obs && !p->obs_mode) {
    kiln_cl_plan *op;
    kiln_status s = kiln_cl_obs_plan(p, obs, &op);
    return s ? s : kiln_cl_plan_run_mem(op, g, bound, mem_in, outs, mem_out);
  }
  const kiln_graph *g0 = p->orig;
  const kiln_tensor **in = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *in);
  cl_mem *mem = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *mem);
  kiln_tensor *tmp = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *tmp);
  kiln_status s = KILN_OK;
  if (!in || !mem || !tmp) s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  for (int i = 0; i < g0->n_inputs && !s; i++) {
    const kiln_value *val = &g0->values[g0->inputs[i]];
    if (val->init) continue;
    int v = kiln_graph_find_value(g, val->name);
    in[i] = bound && v >= 0 ? bound[v] : NULL;
    mem[i] = mem_in && v >= 0 ? mem_in[v] : NULL;
    if (!in[i]) s = kiln_fail(KILN_E_MODEL, "graph input '%s' has no data bound", val->name);
    else if (in[i]->dtype != val->type.dtype)
      s = kiln_fail(KILN_E_MISMATCH_DTYPE, "input '%s': %s given, the model declares %s", val->name,
                    kiln_dtype_name(in[i]->dtype), kiln_dtype_name(val->type.dtype));
  }
  if (s) {
    kiln_free(in);
    kiln_free(mem);
    kiln_free(tmp);
    return s;
  }
  pthread_mutex_lock(&p->slot->mu);
  /* a shape-setting input in a device buffer: its few values are read
     back, as the variant is keyed (and specialised) on them */
  kiln_cl_context *ctx = p->slot->ctx;
  for (int i = 0; i < g0->n_inputs && !s; i++) {
    if (!mem[i] || !p->spec[i] || in[i]->numel > KILN_CL_SPEC_MAX) continue;
    s = kiln_tensor_alloc(&tmp[i], in[i]->dtype, in[i]->rank, in[i]->dims);
    size_t n = kiln_tensor_bytes(&tmp[i]);
    cl_int e = s || !n ? CL_SUCCESS : clEnqueueReadBuffer(ctx->queue, mem[i], CL_TRUE, 0, n, tmp[i].data, 0, NULL, NULL);
    if (e) s = kiln_cl_fail(e, "reading input '%s' (%zu bytes, it sets shapes) from its OpenCL buffer",
                            g0->values[g0->inputs[i]].name, n);
    in[i] = &tmp[i];
    mem[i] = NULL;
  }
  kiln_cl_variant *v = NULL;
  p->run_obs = p->obs_mode ? obs : NULL;
  if (!s) s = kiln_cl_variant_get(p, in, &v);
  /* host memory used in place on a device that works in it */
  kiln_cl_zc zc = {0};
  if (!s) s = kiln_cl_zc_begin(p, v, in, mem, outs, mem_out, &zc);
  if (!s) {
    s = kiln_cl_variant_run(p, v, in, zc.mem_in ? zc.mem_in : mem, outs, zc.mem_out ? zc.mem_out : mem_out);
    s = kiln_cl_zc_end(p, &zc, outs, s);
  }
  p->run_obs = NULL;
  pthread_mutex_unlock(&p->slot->mu);
  for (int i = 0; i < g0->n_inputs; i++) kiln_tensor_release(&tmp[i]);
  kiln_free(in);
  kiln_free(mem);
  kiln_free(tmp);
  return s;
}

/* ---- slots on the host's contexts ---- */

kiln_status kiln_cl_slot_open(const kiln_cl_device *dev, cl_context host, kiln_cl_slot **out) {
  *out = NULL;
  kiln_cl_slot *sl = kiln_calloc(1, sizeof *sl);
  if (!sl) return kiln_fail(KILN_E_NOMEM, "out of memory opening an OpenCL context");
  if (pthread_mutex_init(&sl->mu, NULL)) {
    kiln_free(sl);
    return kiln_fail(KILN_E_NOMEM, "cannot create a mutex for an OpenCL context");
  }
  kiln_status s = kiln_cl_context_wrap(dev, host, &sl->ctx);
  if (s) {
    pthread_mutex_destroy(&sl->mu);
    kiln_free(sl);
    return s;
  }
  cl_uint bits = 0;
  if (clGetDeviceInfo(dev->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof bits, &bits, NULL)) bits = 0;
  sl->align = bits / 8 > KILN_MEMPLAN_ALIGN ? bits / 8 : KILN_MEMPLAN_ALIGN;
  *out = sl;
  return KILN_OK;
}

void kiln_cl_slot_close(kiln_cl_slot *sl) {
  if (!sl) return;
  kiln_cl_context_free(sl->ctx);
  pthread_mutex_destroy(&sl->mu);
  kiln_free(sl);
}

kiln_status kiln_cl_slot_check_buffer(kiln_cl_slot *sl, cl_mem mem, size_t bytes, const char *what) {
  if (!mem) return kiln_fail(KILN_E_MODEL, "%s: the cl_mem is NULL", what);
  cl_mem_object_type type = 0;
  cl_context c = NULL;
  size_t size = 0;
  cl_int e = clGetMemObjectInfo(mem, CL_MEM_TYPE, sizeof type, &type, NULL);
  if (!e) e = clGetMemObjectInfo(mem, CL_MEM_CONTEXT, sizeof c, &c, NULL);
  if (!e) e = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (e) return kiln_fail(KILN_E_MODEL, "%s: not a valid cl_mem (%s)", what, kiln_cl_err_name(e));
  if (type != CL_MEM_OBJECT_BUFFER)
    return kiln_fail(KILN_E_MODEL, "%s: the cl_mem is an image or pipe (type 0x%x), not a buffer", what, (unsigned)type);
  if (c != sl->ctx->ctx)
    return kiln_fail(KILN_E_MODEL, "%s: the cl_mem belongs to another OpenCL context than the backend's", what);
  if (size < bytes)
    return kiln_fail(KILN_E_MODEL, "%s: the cl_mem holds %zu bytes, the tensor needs %zu", what, size, bytes);
  return KILN_OK;
}

void kiln_cl_plan_get_stats(const kiln_cl_plan *p, kiln_cl_plan_stats *st) { *st = p->st; }

void kiln_cl_plan_release(kiln_cl_plan *p) {
  if (!p) return;
  preload_finish(p); /* a prepare that failed */
  if (p->print_table) kiln_cl_profile_print(p);
  if (p->trace) kiln_cl_trace_flush(p);
  if (p->slot) pthread_mutex_lock(&p->slot->mu);
  for (int i = 0; i < KILN_CL_VARIANTS; i++) kiln_cl_variant_free(p, p->var[i]);
  if (p->slot) pthread_mutex_unlock(&p->slot->mu);
  kiln_cl_obs_plan_free(p);
  kiln_cl_sym_free(p);
  kiln_free(p->prof);
  kiln_free(p->trace_ev);
  kiln_graph_free(p->probe_g);
  kiln_shapes_free(p->probe_sh);
  kiln_cl_cache_view_release(&p->probe_rec); /* after probe_g */
  kiln_free(p->probe_facts);
  kiln_graph_free(p->orig);
  kiln_free(p->spec);
  kiln_free(p);
}
