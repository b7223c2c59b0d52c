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
#include "ir/dump.h"
#include "ir/graph_edit.h"
#include "ir/memplan.h"
#include "ir/rewrite.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "opencl/cache.h"
#include "opencl/codegen.h"
#include "opencl/engine_int.h"
#include "opencl/ops.h"
#include "reference/exec.h"
#include "reference/ops.h"

/* ---- devices and their contexts (process lifetime) ---- */

static pthread_once_t devices_once = PTHREAD_ONCE_INIT;
static kiln_cl_device_list devices;
static kiln_cl_slot *slots;

static void enumerate_devices(void) {
  if (kiln_cl_devices_enumerate(&devices)) {
    kiln_error_clear();
    memset(&devices, 0, sizeof devices);
    return;
  }
  slots = kiln_calloc((size_t)devices.n + 1, sizeof *slots);
  if (!slots) {
    devices.n = 0;
    return;
  }
  for (int i = 0; i < devices.n; i++) pthread_mutex_init(&slots[i].mu, NULL);
}

const kiln_cl_device_list *kiln_cl_engine_devices(void) {
  pthread_once(&devices_once, enumerate_devices);
  return &devices;
}

void kiln_cl_engine_shutdown(void) {
  kiln_cl_trace_shutdown();
  if (!slots) return;
  for (int i = 0; i < devices.n; i++) pthread_mutex_destroy(&slots[i].mu);
  kiln_free(slots);
  slots = NULL;
  kiln_cl_devices_free(&devices);
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

/* ---- checks ---- */

kiln_status kiln_cl_engine_check(const kiln_graph *g) {
  kiln_status s = kiln_ref_check_graph(g);
  if (s) return s;
  kiln_shapes *sh;
  if ((s = kiln_shapes_infer(g, &sh))) return s;
  kiln_shapes_free(sh);
  return KILN_OK;
}

kiln_status kiln_cl_rewrite(const kiln_graph *g0, const char *dump_stem, kiln_graph **g, kiln_shapes **sh,
                            kiln_rewrite_stats *rst) {
  kiln_rewrite_opts ro = {0};
  ro.eval = kiln_ref_eval_node;
  ro.dump_stem = dump_stem;
  *sh = NULL;
  kiln_status s = kiln_rewrite_run(g0, &ro, g, rst);
  if (!s) s = kiln_ref_check_graph(*g);
  if (!s) s = kiln_shapes_infer(*g, sh);
  if (s) {
    kiln_graph_free(*g);
    *g = NULL;
  }
  return s;
}

/* ---- prepare ---- */

static bool has_data_dependent(const kiln_shapes *sh) {
  for (int v = 0; v < sh->n; v++)
    if (sh->v[v].data_dependent) return true;
  return false;
}

kiln_status kiln_cl_plan_prepare(const kiln_cl_device *dev, const kiln_graph *g0, kiln_cl_plan **out) {
  return kiln_cl_plan_prepare_in(dev, NULL, g0, out);
}

kiln_status kiln_cl_plan_prepare_in(const kiln_cl_device *dev, kiln_cl_slot *host_slot, const kiln_graph *g0,
                                    kiln_cl_plan **out) {
  *out = NULL;
  kiln_status s = kiln_ref_check_graph(g0);
  if (s) return s;
  kiln_cl_slot *slot = host_slot;
  if (!slot && (s = slot_of(dev, &slot))) return s;
  kiln_cl_plan *p = kiln_calloc(1, sizeof *p);
  if (!p) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  p->dev = dev;
  p->slot = slot;
  p->print_table = getenv("KILN_PROFILE") && *getenv("KILN_PROFILE") && strcmp(getenv("KILN_PROFILE"), "0");
  p->trace = getenv("KILN_TRACE") && *getenv("KILN_TRACE");
  p->profile = p->print_table || p->trace;
  if (kiln_dump_enabled()) kiln_dump_stem(g0->name, p->dump_stem, sizeof p->dump_stem);
  if ((s = kiln_edit_clone(g0, &p->orig))) goto fail;
  /* a probe: which inputs set shapes (their values specialise the plan) */
  kiln_graph *g = NULL;
  kiln_shapes *sh = NULL;
  kiln_rewrite_stats rst;
  if ((s = kiln_cl_rewrite(g0, p->dump_stem[0] ? p->dump_stem : NULL, &g, &sh, &rst))) goto fail;
  bool dyn = has_data_dependent(sh);
  p->spec = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *p->spec);
  if (!p->spec) {
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
    g = NULL;
    sh = NULL;
  }
  kiln_graph_free(g);
  kiln_shapes_free(sh);
  if (!all_known && (s = kiln_cl_sym_setup(p))) goto fail;
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
 * constants and every other runtime input's declared dims made concrete. */
static kiln_status specialise(const kiln_cl_plan *p, const kiln_tensor *const *in, kiln_graph **out) {
  kiln_graph *d = NULL;
  kiln_status s = kiln_edit_clone(p->orig, &d);
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
  if (!s) s = kiln_cl_variant_get(p, in, &v);
  if (!s) s = kiln_cl_variant_run(p, v, in, mem, outs, mem_out);
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
  if (p->print_table) kiln_cl_profile_print(p);
  if (p->trace) kiln_cl_trace_flush(p);
  if (p->slot) pthread_mutex_lock(&p->slot->mu);
  for (int i = 0; i < KILN_CL_VARIANTS; i++) kiln_cl_variant_free(p, p->var[i]);
  if (p->slot) pthread_mutex_unlock(&p->slot->mu);
  kiln_cl_sym_free(p);
  kiln_free(p->prof);
  kiln_free(p->trace_ev);
  kiln_graph_free(p->probe_g);
  kiln_shapes_free(p->probe_sh);
  kiln_graph_free(p->orig);
  kiln_free(p->spec);
  kiln_free(p);
}
