/* plugin/graph: ONNXIFI graphs — init (import, weights, engine prepare),
 * IO binding with validation, and asynchronous runs on a per-graph worker
 * thread. onnxRunGraph only queues: the worker waits for the input fence,
 * runs, copies outputs into the host's buffers and signals the output
 * event, so a host may signal its input event after onnxRunGraph returns.
 * A host thread that waits on a run's output event while that run has not
 * started and its input is signalled runs it itself (kiln_graph_wait_run;
 * KILN_RUN_ON_WAIT=0: never). A run queued behind an unsignalled input
 * does not wake the worker: the input's signal does (kiln_graph_notify),
 * so a host that signals and then waits wakes it once, not three times.
 * Runs on one graph execute one at a time in submission order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/alloc.h"
#include "ir/onnx_import.h"
#include "plugin/plugin.h"

onnxStatus kiln_onnx_status(kiln_status s) {
  switch (s) {
  case KILN_OK: return ONNXIFI_STATUS_SUCCESS;
  case KILN_E_NOMEM: return ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
  case KILN_E_PROTOBUF: return ONNXIFI_STATUS_INVALID_PROTOBUF;
  case KILN_E_MODEL: return ONNXIFI_STATUS_INVALID_MODEL;
  case KILN_E_VERSION: return ONNXIFI_STATUS_UNSUPPORTED_VERSION;
  case KILN_E_UNSUPPORTED_OP: return ONNXIFI_STATUS_UNSUPPORTED_OPERATOR;
  case KILN_E_UNSUPPORTED_ATTR: return ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE;
  case KILN_E_UNSUPPORTED_DTYPE: return ONNXIFI_STATUS_UNSUPPORTED_DATATYPE;
  case KILN_E_UNSUPPORTED_SHAPE: return ONNXIFI_STATUS_UNSUPPORTED_SHAPE;
  case KILN_E_INVALID_SHAPE: return ONNXIFI_STATUS_INVALID_SHAPE;
  case KILN_E_INVALID_DTYPE: return ONNXIFI_STATUS_INVALID_DATATYPE;
  case KILN_E_MISMATCH_SHAPE: return ONNXIFI_STATUS_MISMATCHING_SHAPE;
  case KILN_E_MISMATCH_DTYPE: return ONNXIFI_STATUS_MISMATCHING_DATATYPE;
  case KILN_E_INVALID_VALUE: return ONNXIFI_STATUS_INTERNAL_ERROR;
  case KILN_E_DEVICE_MEMORY: return ONNXIFI_STATUS_NO_DEVICE_MEMORY;
  case KILN_E_DEVICE_RESOURCES: return ONNXIFI_STATUS_NO_DEVICE_RESOURCES;
  case KILN_E_DEVICE_LOST: return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  case KILN_E_INTERNAL: return ONNXIFI_STATUS_INTERNAL_ERROR;
  case KILN_E_SYMBOLIC_SHAPE: return ONNXIFI_STATUS_MISMATCHING_SHAPE;
  }
  return ONNXIFI_STATUS_INTERNAL_ERROR;
}

kiln_status kiln_check_boundary(const kiln_graph *g) {
  for (int k = 0; k < g->n_inputs + g->n_outputs; k++) {
    bool is_in = k < g->n_inputs;
    int v = is_in ? g->inputs[k] : g->outputs[k - g->n_inputs];
    const kiln_value *val = &g->values[v];
    const kiln_type *t = &val->type;
    const char *what = is_in ? "input" : "output";
    if (is_in && val->init) continue; /* an initializer: checked when imported */
    switch (t->kind) {
    case KILN_TYPE_TENSOR: break;
    case KILN_TYPE_UNKNOWN:
      return kiln_fail(KILN_E_MODEL, "graph %s '%s' has no type", what, val->name);
    default:
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE,
                       "graph %s '%s' is a sequence, map, optional or sparse value: only dense tensors cross "
                       "the ONNXIFI ABI",
                       what, val->name);
    }
    if (t->dtype == KILN_STRING)
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "graph %s '%s' is a string tensor: strings cannot cross the ONNXIFI ABI",
                       what, val->name);
    if (!kiln_dtype_supported(t->dtype))
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "graph %s '%s' has data type %s (%d), not supported", what, val->name,
                       kiln_dtype_name(t->dtype), (int)t->dtype);
    for (int d = 0; d < t->rank; d++)
      if (t->dims[d].value == 0)
        return kiln_fail(KILN_E_UNSUPPORTED_SHAPE,
                         "graph %s '%s' has a zero-sized dimension %d: ONNXIFI descriptors cannot carry it", what,
                         val->name, d);
  }
  return KILN_OK;
}

/* ---- descriptor validation ---- */

static bool known_dtype(onnxEnum t) {
  switch (t) {
  case ONNXIFI_DATATYPE_FLOAT16: case ONNXIFI_DATATYPE_FLOAT32: case ONNXIFI_DATATYPE_FLOAT64:
  case ONNXIFI_DATATYPE_INT8: case ONNXIFI_DATATYPE_INT16: case ONNXIFI_DATATYPE_INT32:
  case ONNXIFI_DATATYPE_INT64: case ONNXIFI_DATATYPE_UINT8: case ONNXIFI_DATATYPE_UINT16:
  case ONNXIFI_DATATYPE_UINT32: case ONNXIFI_DATATYPE_UINT64: case ONNXIFI_DATATYPE_BFLOAT16:
  case KILN_BOOL: /* extension: TensorProto's BOOL */
    return true;
  default: return false;
  }
}

/* Checks a descriptor's own fields (tag, type, memory, shape, pointer);
 * mem_ok: the memory types beyond CPU the backend takes here. */
static onnxStatus check_descriptor(const onnxTensorDescriptorV1 *d, const char *role, onnxBitfield mem_ok) {
  if (d->tag != ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1) {
    kiln_fail(KILN_E_MODEL, "%s descriptor has tag 0x%08x, expected ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1", role,
              (unsigned)d->tag);
    return ONNXIFI_STATUS_UNSUPPORTED_TAG;
  }
  if (!d->name) {
    kiln_fail(KILN_E_MODEL, "%s descriptor has a NULL name", role);
    return ONNXIFI_STATUS_INVALID_NAME;
  }
  if (!known_dtype(d->dataType)) {
    kiln_fail(KILN_E_INVALID_DTYPE, "%s '%s': data type %llu is not supported", role, d->name,
              (unsigned long long)d->dataType);
    return ONNXIFI_STATUS_INVALID_DATATYPE;
  }
  if (d->memoryType != ONNXIFI_MEMORY_TYPE_CPU && !(d->memoryType == ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER &&
                                                   (mem_ok & ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER))) {
    bool known = d->memoryType == ONNXIFI_MEMORY_TYPE_CUDA_BUFFER || d->memoryType == ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER ||
                 d->memoryType == ONNXIFI_MEMORY_TYPE_OPENGLES_TEXTURE_2D ||
                 d->memoryType == ONNXIFI_MEMORY_TYPE_D3D_RESOURCE;
    kiln_fail(KILN_E_MODEL, "%s '%s': memory type %llu is not supported %s", role, d->name,
              (unsigned long long)d->memoryType,
              !strcmp(role, "weight") ? "for weights (CPU memory only)"
              : mem_ok                ? "by this backend (CPU memory and OpenCL buffers only)"
                                      : "by this backend (CPU memory only)");
    return known ? ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE : ONNXIFI_STATUS_INVALID_MEMORY_TYPE;
  }
  if (d->dimensions > KILN_MAX_RANK) {
    kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "%s '%s': rank %u exceeds kiln's maximum of %d", role, d->name,
              (unsigned)d->dimensions, KILN_MAX_RANK);
    return ONNXIFI_STATUS_UNSUPPORTED_SHAPE;
  }
  if (d->dimensions && !d->shape) {
    kiln_fail(KILN_E_MODEL, "%s '%s': shape pointer is NULL for rank %u", role, d->name, (unsigned)d->dimensions);
    return ONNXIFI_STATUS_INVALID_POINTER;
  }
  int64_t dims[KILN_MAX_RANK], n;
  for (uint32_t i = 0; i < d->dimensions; i++) {
    if (d->shape[i] == 0) {
      kiln_fail(KILN_E_INVALID_SHAPE, "%s '%s': dimension %u is 0", role, d->name, (unsigned)i);
      return ONNXIFI_STATUS_INVALID_SHAPE;
    }
    if (d->shape[i] > (uint64_t)KILN_MAX_NUMEL) {
      kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "%s '%s': dimension %u is too large", role, d->name, (unsigned)i);
      return ONNXIFI_STATUS_UNSUPPORTED_SHAPE;
    }
    dims[i] = (int64_t)d->shape[i];
  }
  if (kiln_shape_numel((int)d->dimensions, dims, &n)) {
    kiln_error_prefix("%s '%s'", role, d->name);
    return ONNXIFI_STATUS_UNSUPPORTED_SHAPE;
  }
  if (!d->buffer) {
    kiln_fail(KILN_E_MODEL, "%s '%s': buffer is NULL", role, d->name);
    return ONNXIFI_STATUS_INVALID_MEMORY_LOCATION;
  }
  return ONNXIFI_STATUS_SUCCESS;
}

/* Symbol bindings seen in one descriptor set, to keep dim_params consistent. */
typedef struct sym_bind {
  const char *name;
  int64_t value;
} sym_bind;

/* Checks a descriptor against the value's declared type. */
static onnxStatus check_declared(const kiln_value *val, const onnxTensorDescriptorV1 *d, const char *role,
                                 sym_bind *syms, int *nsyms, int maxsyms) {
  const kiln_type *t = &val->type;
  if (t->dtype != KILN_UNDEFINED && (onnxEnum)t->dtype != d->dataType) {
    kiln_fail(KILN_E_MISMATCH_DTYPE, "%s '%s': descriptor type %s, the model declares %s", role, d->name,
              kiln_dtype_name((kiln_dtype)d->dataType), kiln_dtype_name(t->dtype));
    return ONNXIFI_STATUS_MISMATCHING_DATATYPE;
  }
  if (t->rank < 0) return ONNXIFI_STATUS_SUCCESS;
  if ((uint32_t)t->rank != d->dimensions) {
    kiln_fail(KILN_E_MISMATCH_SHAPE, "%s '%s': descriptor rank %u, the model declares rank %d", role, d->name,
              (unsigned)d->dimensions, t->rank);
    return ONNXIFI_STATUS_MISMATCHING_SHAPE;
  }
  for (int i = 0; i < t->rank; i++) {
    int64_t got = (int64_t)d->shape[i];
    if (t->dims[i].value >= 0 && t->dims[i].value != got) {
      kiln_fail(KILN_E_MISMATCH_SHAPE, "%s '%s', dim %d: %lld given, the model declares %lld", role, d->name, i,
                (long long)got, (long long)t->dims[i].value);
      return ONNXIFI_STATUS_MISMATCHING_SHAPE;
    }
    if (t->dims[i].param) {
      int k;
      for (k = 0; k < *nsyms; k++)
        if (!strcmp(syms[k].name, t->dims[i].param)) break;
      if (k < *nsyms && syms[k].value != got) {
        kiln_fail(KILN_E_MISMATCH_SHAPE, "%s '%s', dim %d: symbol %s is %lld here but %lld elsewhere", role, d->name,
                  i, t->dims[i].param, (long long)got, (long long)syms[k].value);
        return ONNXIFI_STATUS_MISMATCHING_SHAPE;
      }
      if (k == *nsyms && k < maxsyms) syms[(*nsyms)++] = (sym_bind){t->dims[i].param, got};
    }
  }
  return ONNXIFI_STATUS_SUCCESS;
}

/* ---- init ---- */

static double ms_between(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

static void graph_free(kiln_graph_handle *h) {
  if (!h) return;
  kiln_obs_free(h->obs);
  if (h->plan && h->backend->engine->release) h->backend->engine->release(h->plan);
  /* the import record: after the graph that borrows its mapping (a hit),
     before the graph its store reads (a miss) */
  if (h->import_rec && !h->imported_from_cache) h->backend->engine->import_release(h->import_rec);
  kiln_graph_free(h->g);
  if (h->import_rec && h->imported_from_cache) h->backend->engine->import_release(h->import_rec);
  kiln_free(h->runtime_input);
  kiln_free(h->in_bind);
  kiln_free(h->out_bind);
  kiln_free(h->in_mem);
  kiln_free(h);
}

onnxStatus kiln_graph_init(kiln_backend *b, const void *model, size_t size, uint32_t nweights,
                           const onnxTensorDescriptorV1 *weights, kiln_graph_handle **out) {
  kiln_status s;
  kiln_graph_handle *h = kiln_calloc(1, sizeof *h);
  if (!h) return kiln_onnx_status(kiln_fail(KILN_E_NOMEM, "out of memory creating a graph"));
  h->backend = b;
  struct timespec t0, t1, t2;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  const kiln_engine *e = b->engine;
  if (e->import_lookup) {
    /* the engine's record of this graph as imported, keyed by the model
       bytes and the weights as given: the descriptors are checked first
       (the key reads every weight byte) */
    for (uint32_t w = 0; w < nweights; w++) {
      onnxStatus os = check_descriptor(&weights[w], "weight", 0);
      if (os) {
        graph_free(h);
        return os;
      }
    }
    h->imported_from_cache = e->import_lookup(model, size, nweights, weights, &h->g, &h->import_rec);
  }
  if (!h->imported_from_cache && (s = kiln_onnx_import(model, size, &h->g))) goto fail;
  kiln_graph *g = h->g;
  if (g->ir_version > 8) {
    s = kiln_fail(KILN_E_VERSION, "IR version %lld is newer than kiln supports (8)", (long long)g->ir_version);
    goto fail;
  }
  if ((s = kiln_check_boundary(g))) goto fail;
  h->runtime_input = kiln_calloc((size_t)g->n_inputs + 1, sizeof *h->runtime_input);
  h->in_bind = kiln_calloc((size_t)g->n_inputs + 1, sizeof *h->in_bind);
  h->out_bind = kiln_calloc((size_t)g->n_outputs + 1, sizeof *h->out_bind);
  if (!h->runtime_input || !h->in_bind || !h->out_bind) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory creating a graph");
    goto fail;
  }
  /* a graph from the import record has its weights: the same inputs were
     checked and copied by the init that stored it */
  if (nweights && !h->imported_from_cache) {
    /* onnxifi.h: with weight descriptors, graph.initializer must be empty. */
    for (int v = 0; v < g->n_values; v++)
      if (g->values[v].init) {
        s = kiln_fail(KILN_E_MODEL,
                      "weights are given as descriptors, so the model must have no initializers (it has '%s')",
                      g->values[v].name);
        goto fail;
      }
  }
  for (uint32_t w = 0; w < nweights && !h->imported_from_cache; w++) {
    const onnxTensorDescriptorV1 *d = &weights[w];
    onnxStatus os = check_descriptor(d, "weight", 0);
    if (os) {
      graph_free(h);
      return os;
    }
    int v = kiln_graph_find_value(g, d->name);
    if (v < 0 || !g->values[v].is_input) {
      s = kiln_fail(KILN_E_MODEL, "weight '%s' is not a graph input of the model", d->name);
      goto fail;
    }
    if (g->values[v].init) {
      s = kiln_fail(KILN_E_MODEL, "weight '%s' is given twice", d->name);
      goto fail;
    }
    sym_bind syms[1];
    int nsyms = 0;
    os = check_declared(&g->values[v], d, "weight", syms, &nsyms, 0);
    if (os) {
      graph_free(h);
      return os;
    }
    /* ONNXIFI requires a copy: the caller's memory may go away. */
    kiln_tensor *t = kiln_calloc(1, sizeof *t);
    int64_t dims[KILN_MAX_RANK];
    for (uint32_t i = 0; i < d->dimensions; i++) dims[i] = (int64_t)d->shape[i];
    if (!t || (s = kiln_tensor_alloc(t, (kiln_dtype)d->dataType, (int)d->dimensions, dims))) {
      kiln_free(t);
      s = kiln_fail(KILN_E_NOMEM, "out of memory copying weight '%s'", d->name);
      goto fail;
    }
    memcpy(t->data, (const void *)(uintptr_t)d->buffer, kiln_tensor_bytes(t));
    g->values[v].init = t;
  }
  for (int i = 0; i < g->n_inputs; i++) h->runtime_input[i] = !g->values[g->inputs[i]].init;
  clock_gettime(CLOCK_MONOTONIC, &t1); /* imported, the weights copied */
  s = b->bctx ? e->prepare_in(e->impl, b->bctx, g, h->import_rec, &h->plan)
      : e->prepare_on ? e->prepare_on(e->impl, g, h->import_rec, &h->plan)
                      : e->prepare(g, &h->plan);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  if (s) goto fail;
  /* stored only for a graph that initialised (after a miss: the engine
     decides whether the import was worth a record, and writes it on a
     thread that reads g until graph_free releases the record) */
  if (h->import_rec && !h->imported_from_cache) e->import_store(h->import_rec, g, ms_between(&t0, &t1));
  if (pthread_mutex_init(&h->mu, NULL)) {
    s = kiln_fail(KILN_E_NOMEM, "cannot create a graph mutex");
    goto fail;
  }
  if (pthread_cond_init(&h->cv, NULL)) {
    pthread_mutex_destroy(&h->mu);
    s = kiln_fail(KILN_E_NOMEM, "cannot create a graph condition variable");
    goto fail;
  }
  if (pthread_mutex_init(&h->obs_mu, NULL)) {
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    s = kiln_fail(KILN_E_NOMEM, "cannot create a graph mutex");
    goto fail;
  }
  if (pthread_mutex_init(&h->io_mu, NULL)) {
    pthread_mutex_destroy(&h->obs_mu);
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    s = kiln_fail(KILN_E_NOMEM, "cannot create a graph mutex");
    goto fail;
  }
  atomic_init(&h->pins, 0);
  const char *row = getenv("KILN_RUN_ON_WAIT");
  h->run_on_wait = !(row && !strcmp(row, "0"));
  kiln_log(KILN_LOG_INFO,
           "graph '%s' ready on %s: %d nodes, %d values, %d inputs (%u weights), %d outputs; import %.1f ms (%zu "
           "bytes%s), engine prepare %.1f ms",
           g->name, b->engine->name, g->n_nodes, g->n_values, g->n_inputs, (unsigned)nweights, g->n_outputs,
           ms_between(&t0, &t1), size, h->imported_from_cache ? ", from the kiln cache" : "", ms_between(&t1, &t2));
  *out = h;
  return ONNXIFI_STATUS_SUCCESS;
fail:
  graph_free(h);
  return kiln_onnx_status(s);
}

/* ---- IO ---- */

onnxStatus kiln_graph_set_io(kiln_graph_handle *h, uint32_t nin, const onnxTensorDescriptorV1 *in, uint32_t nout,
                             const onnxTensorDescriptorV1 *out) {
  const kiln_graph *g = h->g;
  onnxStatus os = ONNXIFI_STATUS_SUCCESS;
  sym_bind syms[64];
  int nsyms = 0;
  bool *seen_in = kiln_calloc((size_t)g->n_inputs + 1, sizeof *seen_in);
  bool *seen_out = kiln_calloc((size_t)g->n_outputs + 1, sizeof *seen_out);
  kiln_tensor *ib = kiln_calloc((size_t)g->n_inputs + 1, sizeof *ib);
  kiln_io_out *ob = kiln_calloc((size_t)g->n_outputs + 1, sizeof *ob);
  void **im = kiln_calloc((size_t)g->n_inputs + 1, sizeof *im);
  const kiln_engine *eng = h->backend->engine;
  if (!seen_in || !seen_out || !ib || !ob || !im) {
    os = kiln_onnx_status(kiln_fail(KILN_E_NOMEM, "out of memory binding graph IO"));
    goto done;
  }
  for (uint32_t k = 0; k < nin + nout && !os; k++) {
    bool is_in = k < nin;
    const onnxTensorDescriptorV1 *d = is_in ? &in[k] : &out[k - nin];
    const char *role = is_in ? "input" : "output";
    if ((os = check_descriptor(d, role, eng->memory_types))) break;
    int idx = -1;
    int count = is_in ? g->n_inputs : g->n_outputs;
    for (int i = 0; i < count && idx < 0; i++) {
      int v = is_in ? g->inputs[i] : g->outputs[i];
      if (!strcmp(g->values[v].name, d->name) && (!is_in || h->runtime_input[i])) idx = i;
    }
    if (idx < 0) {
      kiln_fail(KILN_E_MODEL, "%s descriptor '%s' names no graph %s%s", role, d->name, role,
                is_in ? " (weights and initializers are not bound here)" : "");
      os = ONNXIFI_STATUS_INVALID_NAME;
      break;
    }
    bool *seen = is_in ? seen_in : seen_out;
    if (seen[idx]) {
      kiln_fail(KILN_E_MODEL, "%s '%s' is given by two descriptors", role, d->name);
      os = ONNXIFI_STATUS_INVALID_NAME;
      break;
    }
    seen[idx] = true;
    int v = is_in ? g->inputs[idx] : g->outputs[idx];
    if ((os = check_declared(&g->values[v], d, role, syms, &nsyms, 64))) break;
    int64_t dims[KILN_MAX_RANK], n = 1;
    for (uint32_t i = 0; i < d->dimensions; i++) n *= (dims[i] = (int64_t)d->shape[i]);
    void *mem = NULL;
    if (d->memoryType == ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER) {
      /* the host's cl_mem: of the backend's context, large enough */
      char what[160];
      snprintf(what, sizeof what, "%s '%s'", role, d->name);
      kiln_status ks = eng->check_buffer(h->backend->bctx, (void *)(uintptr_t)d->buffer,
                                         (size_t)n * kiln_dtype_size((kiln_dtype)d->dataType), what);
      if (ks) {
        os = ks == KILN_E_MODEL ? ONNXIFI_STATUS_INVALID_MEMORY_LOCATION : kiln_onnx_status(ks);
        break;
      }
      mem = (void *)(uintptr_t)d->buffer;
    }
    if (is_in && mem) {
      kiln_tensor_wrap(&ib[idx], (kiln_dtype)d->dataType, (int)d->dimensions, dims, n, NULL);
      im[idx] = mem;
    } else if (is_in) {
      kiln_tensor_wrap(&ib[idx], (kiln_dtype)d->dataType, (int)d->dimensions, dims, n, (void *)(uintptr_t)d->buffer);
    } else {
      ob[idx].value = v;
      ob[idx].dtype = (kiln_dtype)d->dataType;
      ob[idx].rank = (int)d->dimensions;
      memcpy(ob[idx].dims, dims, sizeof dims);
      ob[idx].buffer = mem ? NULL : (void *)(uintptr_t)d->buffer;
      ob[idx].mem = mem;
    }
  }
  for (int i = 0; i < g->n_inputs && !os; i++)
    if (h->runtime_input[i] && !seen_in[i]) {
      kiln_fail(KILN_E_MODEL, "graph input '%s' has no descriptor", g->values[g->inputs[i]].name);
      os = ONNXIFI_STATUS_UNIDENTIFIED_NAME;
    }
  for (int i = 0; i < g->n_outputs && !os; i++)
    if (!seen_out[i]) {
      kiln_fail(KILN_E_MODEL, "graph output '%s' has no descriptor", g->values[g->outputs[i]].name);
      os = ONNXIFI_STATUS_UNIDENTIFIED_NAME;
    }
done:
  pthread_mutex_lock(&h->mu);
  if (os) {
    h->io_valid = false; /* a failed call invalidates the previous binding */
    kiln_free(ib);
    kiln_free(ob);
    kiln_free(im);
  } else {
    kiln_free(h->in_bind);
    kiln_free(h->out_bind);
    kiln_free(h->in_mem);
    h->in_bind = ib;
    h->out_bind = ob;
    h->in_mem = im;
    h->io_valid = true;
  }
  pthread_mutex_unlock(&h->mu);
  kiln_free(seen_in);
  kiln_free(seen_out);
  return os;
}

/* ---- runs ---- */

struct kiln_job {
  kiln_job *next;
  kiln_event *input;  /* may be NULL */
  kiln_event *output;
  kiln_tensor *in_bind;
  kiln_io_out *out_bind;
  void **in_mem; /* per graph input: its device buffer, or NULL */
  bool parked;   /* queued behind an unsignalled input with the graph on its notify list: the worker leaves it
                    until the input is signalled (or the graph is released) */
};

static void job_free(kiln_job *j) {
  if (j->input) kiln_event_unref(j->input);
  if (j->output) kiln_event_unref(j->output);
  kiln_free(j->in_bind);
  kiln_free(j->out_bind);
  kiln_free(j->in_mem);
  kiln_free(j);
}

/* Executes one job on the worker; returns the run's status. */
static onnxStatus execute(kiln_graph_handle *h, kiln_job *j) {
  const kiln_graph *g = h->g;
  kiln_status s = KILN_OK;
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  kiln_tensor *outs = kiln_calloc((size_t)g->n_outputs + 1, sizeof *outs);
  if (!bound || !outs) s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  for (int i = 0; i < g->n_inputs && !s; i++)
    if (h->runtime_input[i]) bound[g->inputs[i]] = &j->in_bind[i];
  /* device buffers (OPENCL_BUFFER): per value for inputs, per output */
  bool dev_io = false;
  void **mem_in = NULL, **mem_out = NULL;
  for (int i = 0; i < g->n_inputs; i++) dev_io = dev_io || j->in_mem[i];
  for (int i = 0; i < g->n_outputs; i++) dev_io = dev_io || j->out_bind[i].mem;
  if (dev_io && !s) {
    mem_in = kiln_calloc((size_t)g->n_values + 1, sizeof *mem_in);
    mem_out = kiln_calloc((size_t)g->n_outputs + 1, sizeof *mem_out);
    if (!mem_in || !mem_out) s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
    for (int i = 0; i < g->n_inputs && !s; i++) mem_in[g->inputs[i]] = j->in_mem[i];
    for (int i = 0; i < g->n_outputs && !s; i++) mem_out[i] = j->out_bind[i].mem;
  }
  /* each output arrives as a reservation of the host's buffer: an engine
     may compute straight into it (then the copy below is skipped) or hand
     back a tensor of its own */
  for (int i = 0; i < g->n_outputs && !s; i++) {
    const kiln_io_out *o = &j->out_bind[i];
    size_t bytes = kiln_dtype_size(o->dtype);
    for (int d = 0; d < o->rank; d++) bytes *= (size_t)o->dims[d];
    outs[i].data = o->buffer;
    outs[i].capacity = o->mem ? 0 : bytes; /* a device buffer: nothing reserved on the host */
  }
  if (!s) {
    /* The observer (if any) is the engine's through kiln_obs_run_current()
     * for the duration of run(). */
    pthread_mutex_lock(&h->obs_mu);
    kiln_obs *obs = h->observing ? h->obs : NULL;
    if (obs) kiln_obs_begin_run(obs);
    s = dev_io ? h->backend->engine->run_mem(h->plan, g, bound, mem_in, outs, mem_out)
               : h->backend->engine->run(h->plan, g, bound, outs);
    if (obs) {
      char *saved = s ? kiln_strdup(kiln_last_error()) : NULL;
      if (kiln_obs_end_run(obs)) kiln_log(KILN_LOG_WARN, "observer dump failed: %s", kiln_last_error());
      if (s) kiln_error_set_message(saved ? saved : "");
      else kiln_error_clear();
      kiln_free(saved);
    }
    pthread_mutex_unlock(&h->obs_mu);
  }
  for (int i = 0; i < g->n_outputs && !s; i++) {
    const kiln_io_out *o = &j->out_bind[i];
    const kiln_tensor *t = &outs[i];
    const char *name = g->values[o->value].name;
    if (t->dtype != o->dtype) {
      s = kiln_fail(KILN_E_MISMATCH_DTYPE, "output '%s': the graph computed %s, the descriptor says %s", name,
                    kiln_dtype_name(t->dtype), kiln_dtype_name(o->dtype));
      break;
    }
    bool same = t->rank == o->rank;
    for (int d = 0; same && d < t->rank; d++) same = t->dims[d] == o->dims[d];
    if (!same) {
      char a[160], b[160];
      s = kiln_fail(KILN_E_MISMATCH_SHAPE, "output '%s': the graph computed shape %s, the descriptor says %s", name,
                    kiln_shape_str(t->rank, t->dims, a, sizeof a), kiln_shape_str(o->rank, o->dims, b, sizeof b));
      break;
    }
    if (!o->mem && t->data != o->buffer) memcpy(o->buffer, t->data, kiln_tensor_bytes(t));
  }
  if (outs)
    for (int i = 0; i < g->n_outputs; i++) kiln_tensor_release(&outs[i]);
  kiln_free(outs);
  kiln_free(bound);
  kiln_free(mem_in);
  kiln_free(mem_out);
  if (s) kiln_log(KILN_LOG_INFO, "run failed: %s", kiln_last_error());
  return kiln_onnx_status(s);
}

/* Runs job j, which this thread took, counts it, signals its output and
 * frees it. */
static void run_job(kiln_graph_handle *h, kiln_job *j, bool waiter) {
  kiln_error_clear();
  onnxStatus st = execute(h, j);
  pthread_mutex_lock(&h->mu); /* counted before the signal: a host reading the statistics after its wait sees it */
  if (waiter) h->runs_waiter++;
  else h->runs_worker++;
  pthread_mutex_unlock(&h->mu);
  kiln_event_signal(j->output, st, st ? kiln_last_error() : NULL);
  job_free(j);
}

static bool input_ready(kiln_event *in);

/* Under h->mu: nothing runs and the next job is one the worker takes now:
 * its input is signalled or it was not parked (the worker then waits on
 * the input itself), or the graph is being released. */
static bool worker_may_take(kiln_graph_handle *h) {
  const kiln_job *j = h->head;
  return !h->busy && j && (h->stopping || !j->parked || input_ready(j->input));
}

/* The worker takes the queued jobs in order. Lock order: h->mu before an
 * event's mu (never the reverse), so the events' references taken here and
 * the input checks of kiln_graph_wait_run cannot deadlock. */
static void *worker_main(void *arg) {
  kiln_graph_handle *h = arg;
  pthread_mutex_lock(&h->mu);
  for (;;) {
    while (!worker_may_take(h) && !(h->stopping && !h->head && !h->busy)) pthread_cond_wait(&h->cv, &h->mu);
    kiln_job *j = h->head;
    if (!j) break; /* stopping and drained */
    h->head = j->next;
    if (!h->head) h->tail = NULL;
    h->busy = true;
    kiln_event *in = j->input;
    if (in) {
      /* our own reference: a thread that takes the job over frees it */
      kiln_event_ref(in);
      h->current = j;
      pthread_mutex_unlock(&h->mu);
      kiln_event_wait(in);
      kiln_event_unref(in);
      pthread_mutex_lock(&h->mu);
      if (h->current != j) continue; /* taken over: that thread clears busy */
      h->current = NULL;
    }
    pthread_mutex_unlock(&h->mu);
    run_job(h, j, false);
    pthread_mutex_lock(&h->mu);
    h->busy = false;
  }
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static bool input_ready(kiln_event *in) {
  if (!in) return true;
  pthread_mutex_lock(&in->mu);
  bool r = in->signalled;
  pthread_mutex_unlock(&in->mu);
  return r;
}

/* ---- deferred wakes ----
 * Waking the worker costs the host more than the hand-off itself: on the
 * 2-vCPU machine of bench/README.md one wake-up of an idle worker added
 * ~9 us to a 73 us run on the host thread (the woken vCPU's time counts
 * against the run even when the host takes the job), and the usual host
 * waits on the output right after it signals the input. So with
 * run-on-wait, a run that becomes ready (queued with its input signalled
 * or absent, or its input signalled later) while no thread waits on its
 * output does not wake the worker: the graph is put on a process-wide list
 * of owed wakes, paid (the worker woken if the run is still there) by the
 * next thread that enters onnxRunGraph, onnxSetIOAndRunGraph,
 * onnxSignalEvent, onnxGetEventState, onnxWaitEvent (unless it runs that
 * run itself), onnxReleaseEvent, kilnGetEventStatus or onnxReleaseGraph.
 * Any thread that looks at a run's state through kiln therefore lets it
 * proceed; what is given up is overlap for a host that signals, then
 * works outside kiln, then waits (the run starts at the wait).
 * KILN_RUN_ON_WAIT=0 keeps the eager worker. Each entry holds a pin. */
static pthread_mutex_t owed_mu = PTHREAD_MUTEX_INITIALIZER;
static kiln_graph_handle **owed;
static int n_owed_cap;
static atomic_int n_owed;

/* The list's storage at unload (every owed wake is paid by then: a
 * graph's release pays them). */
__attribute__((destructor)) static void owed_free(void) {
  kiln_free(owed);
  owed = NULL;
  n_owed_cap = 0;
}

/* Under h->mu with a pin held for the entry: adds h to the owed wakes;
 * false when the list cannot grow. */
static bool owe_wake(kiln_graph_handle *h) {
  pthread_mutex_lock(&owed_mu);
  int n = atomic_load(&n_owed);
  if (n == n_owed_cap) {
    int cap = n_owed_cap ? 2 * n_owed_cap : 8;
    kiln_graph_handle **grown = kiln_realloc(owed, (size_t)cap * sizeof *grown);
    if (grown) {
      owed = grown;
      n_owed_cap = cap;
    }
  }
  bool ok = n < n_owed_cap;
  if (ok) {
    owed[n] = h;
    atomic_store(&n_owed, n + 1);
  }
  pthread_mutex_unlock(&owed_mu);
  return ok;
}

static bool has_waiter(kiln_event *e) {
  pthread_mutex_lock(&e->mu);
  bool w = e->waiters > 0;
  pthread_mutex_unlock(&e->mu);
  return w;
}

/* Under h->mu, a pin held: the worker may take the next job now. Wakes it,
 * or (run-on-wait, nobody waiting on that run's output, not releasing)
 * owes the wake, the pin passing to the entry. Drops the pin otherwise. */
static void wake_or_owe(kiln_graph_handle *h) {
  bool may = worker_may_take(h);
  if (may && h->run_on_wait && !h->stopping && !has_waiter(h->head->output) && owe_wake(h)) return;
  atomic_fetch_sub(&h->pins, 1);
  if (may || h->stopping) pthread_cond_broadcast(&h->cv);
}

void kiln_graph_pay_wakes(void) {
  while (atomic_load(&n_owed)) { /* the common case: one load, nothing owed */
    kiln_graph_handle *batch[16];
    pthread_mutex_lock(&owed_mu);
    int n = atomic_load(&n_owed), take = n < 16 ? n : 16;
    memcpy(batch, owed + n - take, (size_t)take * sizeof *batch);
    atomic_store(&n_owed, n - take);
    pthread_mutex_unlock(&owed_mu);
    for (int i = 0; i < take; i++) {
      kiln_graph_handle *h = batch[i];
      pthread_mutex_lock(&h->mu);
      atomic_fetch_sub(&h->pins, 1);
      if (worker_may_take(h) || h->stopping) pthread_cond_broadcast(&h->cv);
      pthread_mutex_unlock(&h->mu);
    }
  }
}

void kiln_graph_wait_run(kiln_event *e) {
  kiln_graph_handle *h = NULL;
  /* unsignalled, the event's run is pending, so its graph is alive (a
     release drains the runs first); the pin keeps it so until we leave.
     Counted as a waiter first, so that a signal from now on wakes the
     worker rather than owing it (kiln_graph_notify) */
  pthread_mutex_lock(&e->mu);
  e->waiters++;
  if (!e->signalled && e->graph && e->graph->run_on_wait) {
    h = e->graph;
    atomic_fetch_add(&h->pins, 1);
  }
  pthread_mutex_unlock(&e->mu);
  if (h) {
    kiln_job *j = NULL;
    pthread_mutex_lock(&h->mu);
    if (h->current && h->current->output == e && input_ready(h->current->input)) {
      j = h->current; /* the worker waits on its input: ours now (busy stays set) */
      h->current = NULL;
    } else if (!h->busy && h->head && h->head->output == e && input_ready(h->head->input)) {
      j = h->head; /* next in line and nothing running: run it here */
      h->head = j->next;
      if (!h->head) h->tail = NULL;
      h->busy = true;
    }
    pthread_mutex_unlock(&h->mu);
    if (j) run_job(h, j, true);
    pthread_mutex_lock(&h->mu);
    if (j) h->busy = false;
    atomic_fetch_sub(&h->pins, 1);
    /* the worker only when it has a job to take; a release waiting for the pins */
    if (worker_may_take(h) || h->stopping) pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
  }
  kiln_graph_pay_wakes(); /* before sleeping: an owed wake may be what this wait needs */
  kiln_event_wait(e);
  pthread_mutex_lock(&e->mu);
  e->waiters--;
  pthread_mutex_unlock(&e->mu);
}

void kiln_graph_notify(kiln_graph_handle *h) {
  pthread_mutex_lock(&h->mu);
  wake_or_owe(h);
  pthread_mutex_unlock(&h->mu);
}

/* Under h->mu: puts h on the notify list of the unsignalled input of a run
 * being queued (pinned until the signal); false when the input is
 * signalled already or the list cannot grow (the worker is woken now). */
static bool park_on(kiln_graph_handle *h, kiln_event *in) {
  bool parked = false;
  pthread_mutex_lock(&in->mu);
  if (!in->signalled) {
    if (in->n_notify == in->cap_notify) {
      int cap = in->cap_notify ? 2 * in->cap_notify : 4;
      kiln_graph_handle **grown = kiln_realloc(in->notify, (size_t)cap * sizeof *grown);
      if (grown) {
        in->notify = grown;
        in->cap_notify = cap;
      }
    }
    if (in->n_notify < in->cap_notify) {
      in->notify[in->n_notify++] = h;
      atomic_fetch_add(&h->pins, 1);
      parked = true;
    }
  }
  pthread_mutex_unlock(&in->mu);
  return parked;
}

onnxStatus kiln_graph_run(kiln_graph_handle *h, kiln_event *input, kiln_event **output) {
  const kiln_graph *g = h->g;
  kiln_job *j = kiln_calloc(1, sizeof *j);
  kiln_event *ev = NULL;
  if (!j) return kiln_onnx_status(kiln_fail(KILN_E_NOMEM, "out of memory queuing a run"));
  kiln_status s = kiln_event_new(true, &ev);
  if (s) {
    kiln_free(j);
    return kiln_onnx_status(s);
  }
  j->output = ev;
  j->in_bind = kiln_calloc((size_t)g->n_inputs + 1, sizeof *j->in_bind);
  j->out_bind = kiln_calloc((size_t)g->n_outputs + 1, sizeof *j->out_bind);
  j->in_mem = kiln_calloc((size_t)g->n_inputs + 1, sizeof *j->in_mem);
  if (!j->in_bind || !j->out_bind || !j->in_mem) {
    job_free(j);
    return kiln_onnx_status(kiln_fail(KILN_E_NOMEM, "out of memory queuing a run"));
  }
  pthread_mutex_lock(&h->mu);
  if (!h->io_valid) {
    pthread_mutex_unlock(&h->mu);
    job_free(j);
    kiln_fail(KILN_E_MODEL, "graph IO is not bound (onnxSetGraphIO missing or failed)");
    return ONNXIFI_STATUS_UNIDENTIFIED_NAME;
  }
  memcpy(j->in_bind, h->in_bind, (size_t)g->n_inputs * sizeof *j->in_bind);
  memcpy(j->out_bind, h->out_bind, (size_t)g->n_outputs * sizeof *j->out_bind);
  if (h->in_mem) memcpy(j->in_mem, h->in_mem, (size_t)g->n_inputs * sizeof *j->in_mem);
  if (!h->worker_started) {
    if (pthread_create(&h->worker, NULL, worker_main, h)) {
      pthread_mutex_unlock(&h->mu);
      job_free(j);
      return kiln_onnx_status(kiln_fail(KILN_E_NOMEM, "cannot start the graph's worker thread"));
    }
    h->worker_started = true;
  }
  if (kiln_handle_add(ev, KILN_H_EVENT)) {
    pthread_mutex_unlock(&h->mu);
    job_free(j);
    return ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
  }
  kiln_event_ref(ev); /* the job's reference; the host holds the first */
  ev->graph = h;
  if (input) {
    kiln_event_ref(input);
    j->input = input;
    j->parked = park_on(h, input);
  }
  if (h->tail) h->tail->next = j;
  else h->head = j;
  h->tail = j;
  if (!j->parked) {
    atomic_fetch_add(&h->pins, 1);
    wake_or_owe(h);
  }
  pthread_mutex_unlock(&h->mu);
  *output = ev;
  return ONNXIFI_STATUS_SUCCESS;
}

void kiln_graph_release(kiln_graph_handle *h) {
  pthread_mutex_lock(&h->mu);
  h->stopping = true; /* from here no wake is owed to this graph */
  pthread_cond_broadcast(&h->cv);
  bool started = h->worker_started;
  pthread_mutex_unlock(&h->mu);
  kiln_graph_pay_wakes(); /* the pins of wakes owed before */
  if (started) pthread_join(h->worker, NULL); /* drains queued runs first */
  /* threads still inside kiln_graph_wait_run leave before the free */
  pthread_mutex_lock(&h->mu);
  while (h->busy || atomic_load(&h->pins)) pthread_cond_wait(&h->cv, &h->mu);
  pthread_mutex_unlock(&h->mu);
  if (h->observing) kiln_graph_observe_stop(h); /* the totals, as at a stop */
  pthread_cond_destroy(&h->cv);
  pthread_mutex_destroy(&h->mu);
  pthread_mutex_destroy(&h->obs_mu);
  pthread_mutex_destroy(&h->io_mu);
  kiln_backend *b = h->backend;
  graph_free(h);
  kiln_backend_unref(b);
}
