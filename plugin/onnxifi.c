/* plugin/onnxifi: the exported ONNXIFI 1.0 functions (onnx/onnxifi.h) and
 * kiln's extensions (include/kiln/kiln_ext.h). Each function validates its
 * arguments and handles, in the order the header documents, before doing
 * anything; every failure leaves a message for kilnGetLastErrorMessage. */
#include <onnx/onnxifi.h>
#include <onnx/onnxifi_ext.h>
#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "include/kiln/kiln_ext.h"
#include "ir/alloc.h"
#include "ir/onnx_import.h"
#include "plugin/plugin.h"

#define KILN_VERSION_STRING "0.1.0"
#define KILN_MAX_BACKENDS 16

static onnxStatus fail(onnxStatus st, const char *fmt, const char *arg) {
  kiln_fail(KILN_E_MODEL, fmt, arg);
  return st;
}

/* ---- backend IDs ---- */

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetBackendIDs(onnxBackendID *backendIDs, size_t *numBackends) {
  kiln_error_clear();
  if (!numBackends) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "numBackends is NULL");
  const kiln_engine *eng[KILN_MAX_BACKENDS];
  int n;
  kiln_status s = kiln_select_engines(eng, KILN_MAX_BACKENDS, &n);
  if (s) {
    *numBackends = 0;
    if (s == KILN_E_NOMEM) return ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
    /* A configuration error the operator must see even without KILN_LOG. */
    fprintf(stderr, "kiln: %s\n", kiln_last_error());
    return ONNXIFI_STATUS_INTERNAL_ERROR;
  }
  if (!backendIDs || *numBackends < (size_t)n) {
    *numBackends = (size_t)n;
    return ONNXIFI_STATUS_FALLBACK;
  }
  for (int i = 0; i < n; i++) {
    kiln_backend_id *id = kiln_calloc(1, sizeof *id);
    if (!id || kiln_handle_add(id, KILN_H_BACKEND_ID)) {
      kiln_free(id);
      for (int k = 0; k < i; k++) {
        kiln_handle_remove(backendIDs[k], KILN_H_BACKEND_ID);
        kiln_free(backendIDs[k]);
        backendIDs[k] = NULL;
      }
      kiln_fail(KILN_E_NOMEM, "out of memory creating backend IDs");
      return ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
    }
    id->engine = eng[i];
    backendIDs[i] = id;
  }
  *numBackends = (size_t)n;
  return ONNXIFI_STATUS_SUCCESS;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseBackendID(onnxBackendID backendID) {
  kiln_error_clear();
  if (!kiln_handle_remove(backendID, KILN_H_BACKEND_ID))
    return fail(ONNXIFI_STATUS_INVALID_ID, "%s", "unknown or released backend ID");
  kiln_free(backendID);
  return ONNXIFI_STATUS_SUCCESS;
}

static onnxStatus info_string(const char *v, void *out, size_t *size) {
  size_t need = strlen(v) + 1;
  if (!out || *size < need) {
    *size = need;
    return ONNXIFI_STATUS_FALLBACK;
  }
  memcpy(out, v, need);
  *size = need;
  return ONNXIFI_STATUS_SUCCESS;
}

static onnxStatus info_u64(uint64_t v, void *out, size_t *size) {
  if (!out || *size < sizeof v) {
    *size = sizeof v;
    return ONNXIFI_STATUS_FALLBACK;
  }
  memcpy(out, &v, sizeof v);
  *size = sizeof v;
  return ONNXIFI_STATUS_SUCCESS;
}

/* A handle (cl_platform_id, cl_device_id): pointer-sized. */
static onnxStatus info_ptr(void *v, void *out, size_t *size) {
  if (!out || *size < sizeof v) {
    *size = sizeof v;
    return ONNXIFI_STATUS_FALLBACK;
  }
  memcpy(out, &v, sizeof v);
  *size = sizeof v;
  return ONNXIFI_STATUS_SUCCESS;
}

static uint64_t system_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetBackendInfo(onnxBackendID backendID, onnxBackendInfo infoType,
                                                         void *infoValue, size_t *infoValueSize) {
  kiln_error_clear();
  if (!kiln_handle_valid(backendID, KILN_H_BACKEND_ID))
    return fail(ONNXIFI_STATUS_INVALID_ID, "%s", "unknown or released backend ID");
  if (!infoValueSize) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "infoValueSize is NULL");
  const kiln_engine *e = ((kiln_backend_id *)backendID)->engine;
  char name[64];
  switch (infoType) {
  case ONNXIFI_BACKEND_ONNXIFI_VERSION: return info_u64(UINT64_C(0x0000000100000000), infoValue, infoValueSize);
  case ONNXIFI_BACKEND_NAME:
    snprintf(name, sizeof name, "kiln-%s", e->name);
    return info_string(name, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_VENDOR: return info_string("kiln", infoValue, infoValueSize);
  case ONNXIFI_BACKEND_VERSION: return info_string(KILN_VERSION_STRING, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_EXTENSIONS: return info_string(KILN_EXTENSION_NAMES, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_DEVICE: return info_string(e->device, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_DEVICE_TYPE: return info_u64(e->device_type, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_ONNX_IR_VERSION: return info_string("3 4 5 6 7 8", infoValue, infoValueSize);
  case ONNXIFI_BACKEND_OPSET_VERSION: return info_string("ai.onnx:17", infoValue, infoValueSize);
  case ONNXIFI_BACKEND_CAPABILITIES: return info_u64(e->capabilities, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_INIT_PROPERTIES: return info_u64(0, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_MEMORY_TYPES:
    return info_u64(ONNXIFI_MEMORY_TYPE_CPU | e->memory_types, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_OPENCL_PLATFORM_ID:
  case ONNXIFI_BACKEND_OPENCL_DEVICE_ID:
    if (e->cl_platform) return info_ptr(infoType == ONNXIFI_BACKEND_OPENCL_PLATFORM_ID ? e->cl_platform : e->cl_device,
                                        infoValue, infoValueSize);
    return fail(ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, "%s",
                infoType == ONNXIFI_BACKEND_OPENCL_PLATFORM_ID
                    ? "ONNXIFI_BACKEND_OPENCL_PLATFORM_ID: this backend is not an OpenCL device"
                    : "ONNXIFI_BACKEND_OPENCL_DEVICE_ID: this backend is not an OpenCL device");
  case ONNXIFI_BACKEND_GRAPH_INIT_PROPERTIES: return info_u64(0, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_SYNCHRONIZATION_TYPES: return info_u64(ONNXIFI_SYNCHRONIZATION_EVENT, infoValue, infoValueSize);
  case ONNXIFI_BACKEND_MEMORY_SIZE: return info_u64(system_memory(), infoValue, infoValueSize);
  case ONNXIFI_BACKEND_MAX_GRAPH_SIZE: return info_u64(system_memory(), infoValue, infoValueSize);
  case ONNXIFI_BACKEND_MAX_GRAPH_COUNT: return info_u64(UINT64_MAX, infoValue, infoValueSize);
  default: {
    char q[32];
    snprintf(q, sizeof q, "%llu", (unsigned long long)infoType);
    return fail(ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE, "backend info %s is not available on this backend", q);
  }
  }
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetBackendCompatibility(onnxBackendID backendID, size_t onnxModelSize,
                                                                  const void *onnxModel) {
  kiln_error_clear();
  if (!kiln_handle_valid(backendID, KILN_H_BACKEND_ID))
    return fail(ONNXIFI_STATUS_INVALID_ID, "%s", "unknown or released backend ID");
  if (!onnxModel) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "onnxModel is NULL");
  if (!onnxModelSize) return fail(ONNXIFI_STATUS_INVALID_SIZE, "%s", "onnxModelSize is 0");
  const kiln_engine *e = ((kiln_backend_id *)backendID)->engine;
  kiln_graph *g;
  kiln_status s = kiln_onnx_import(onnxModel, onnxModelSize, &g);
  if (s) return kiln_onnx_status(s);
  if (g->ir_version > 8)
    s = kiln_fail(KILN_E_VERSION, "IR version %lld is newer than kiln supports (8)", (long long)g->ir_version);
  if (!s) s = kiln_check_boundary(g);
  if (!s) s = e->check(g);
  kiln_graph_free(g);
  return kiln_onnx_status(s);
}

/* ---- backends ---- */

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxInitBackend(onnxBackendID backendID, const uint64_t *auxPropertiesList,
                                                      onnxBackend *backend) {
  kiln_error_clear();
  if (backend) *backend = NULL;
  if (!kiln_handle_valid(backendID, KILN_H_BACKEND_ID))
    return fail(ONNXIFI_STATUS_INVALID_ID, "%s", "unknown or released backend ID");
  if (!backend) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "backend is NULL");
  const kiln_engine *eng = ((kiln_backend_id *)backendID)->engine;
  void *hctx = NULL;
  bool have_ctx = false;
  if (auxPropertiesList)
    for (const uint64_t *p = auxPropertiesList; *p != ONNXIFI_BACKEND_PROPERTY_NONE; p += 2) {
      char q[32];
      snprintf(q, sizeof q, "%llu", (unsigned long long)*p);
      if (*p != ONNXIFI_BACKEND_OPENCL_CONTEXT)
        return fail(ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, "backend property %s is not supported", q);
      if (!eng->backend_open)
        return fail(ONNXIFI_STATUS_UNSUPPORTED_PROPERTY,
                    "ONNXIFI_BACKEND_OPENCL_CONTEXT: backend %s is not an OpenCL device", eng->name);
      if (have_ctx)
        return fail(ONNXIFI_STATUS_INVALID_PROPERTY, "%s", "ONNXIFI_BACKEND_OPENCL_CONTEXT is given twice");
      if (!p[1]) return fail(ONNXIFI_STATUS_INVALID_PROPERTY, "%s", "ONNXIFI_BACKEND_OPENCL_CONTEXT is NULL");
      hctx = (void *)(uintptr_t)p[1];
      have_ctx = true;
    }
  kiln_backend *b = kiln_calloc(1, sizeof *b);
  if (!b) return fail(ONNXIFI_STATUS_NO_SYSTEM_MEMORY, "%s", "out of memory creating a backend");
  if (pthread_mutex_init(&b->mu, NULL)) {
    kiln_free(b);
    return fail(ONNXIFI_STATUS_NO_SYSTEM_RESOURCES, "%s", "cannot create a backend mutex");
  }
  b->engine = eng;
  b->refs = 1;
  if (have_ctx) {
    /* the host's context: kiln's objects of this backend live in it */
    kiln_status s = eng->backend_open(eng->impl, hctx, &b->bctx);
    if (s) {
      pthread_mutex_destroy(&b->mu);
      kiln_free(b);
      kiln_error_prefix("ONNXIFI_BACKEND_OPENCL_CONTEXT");
      return s == KILN_E_MODEL ? ONNXIFI_STATUS_INVALID_PROPERTY : kiln_onnx_status(s);
    }
  }
  if (!have_ctx && eng->backend_warm && !eng->backend_warm(eng->impl)) {
    /* not an error of onnxInitBackend: the first graph tries again and reports it */
    kiln_log(KILN_LOG_INFO, "backend %s: the device is not set up yet (%s)", eng->name, kiln_last_error());
    kiln_error_clear();
  }
  if (kiln_handle_add(b, KILN_H_BACKEND)) {
    if (b->bctx) eng->backend_close(b->bctx);
    pthread_mutex_destroy(&b->mu);
    kiln_free(b);
    return ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
  }
  *backend = b;
  return ONNXIFI_STATUS_SUCCESS;
}

void kiln_backend_unref(kiln_backend *b) {
  pthread_mutex_lock(&b->mu);
  int left = --b->refs;
  pthread_mutex_unlock(&b->mu);
  if (left) return;
  if (b->bctx) b->engine->backend_close(b->bctx); /* the host's context reference goes here */
  pthread_mutex_destroy(&b->mu);
  kiln_free(b);
}

/* Releasing a backend with live graphs is allowed: the handle becomes
 * invalid at once, and the backend's resources go when its last graph is
 * released (the graphs stay usable until then). */
ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseBackend(onnxBackend backend) {
  kiln_error_clear();
  if (!kiln_handle_remove(backend, KILN_H_BACKEND))
    return fail(ONNXIFI_STATUS_INVALID_BACKEND, "%s", "unknown or released backend");
  kiln_backend_unref(backend);
  return ONNXIFI_STATUS_SUCCESS;
}

/* ---- events ---- */

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxInitEvent(onnxBackend backend, onnxEvent *event) {
  kiln_error_clear();
  if (event) *event = NULL;
  if (!kiln_handle_valid(backend, KILN_H_BACKEND))
    return fail(ONNXIFI_STATUS_INVALID_BACKEND, "%s", "unknown or released backend");
  if (!event) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "event is NULL");
  kiln_event *e;
  kiln_status s = kiln_event_new(false, &e);
  if (s) return kiln_onnx_status(s);
  if (kiln_handle_add(e, KILN_H_EVENT)) {
    kiln_event_unref(e);
    return ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
  }
  *event = e;
  return ONNXIFI_STATUS_SUCCESS;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxSignalEvent(onnxEvent event) {
  kiln_error_clear();
  kiln_graph_pay_wakes(); /* plugin/graph.c, "deferred wakes" */
  if (!kiln_handle_valid(event, KILN_H_EVENT))
    return fail(ONNXIFI_STATUS_INVALID_EVENT, "%s", "unknown or released event");
  if (!kiln_event_signal(event, ONNXIFI_STATUS_SUCCESS, NULL))
    return fail(ONNXIFI_STATUS_INVALID_STATE, "%s", "event is already signalled");
  return ONNXIFI_STATUS_SUCCESS;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetEventState(onnxEvent event, onnxEventState *state) {
  kiln_error_clear();
  kiln_graph_pay_wakes(); /* plugin/graph.c, "deferred wakes" */
  if (state) *state = ONNXIFI_EVENT_STATE_INVALID;
  if (!kiln_handle_valid(event, KILN_H_EVENT))
    return fail(ONNXIFI_STATUS_INVALID_EVENT, "%s", "unknown or released event");
  if (!state) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "state is NULL");
  kiln_event *e = event;
  pthread_mutex_lock(&e->mu);
  *state = e->signalled ? ONNXIFI_EVENT_STATE_SIGNALLED : ONNXIFI_EVENT_STATE_NONSIGNALLED;
  pthread_mutex_unlock(&e->mu);
  return ONNXIFI_STATUS_SUCCESS;
}

/* Waits for the event. For an event made by onnxRunGraph whose run failed,
 * returns INTERNAL_ERROR after the wait (the run's own status and message
 * come from kilnGetEventStatus and kilnGetLastErrorMessage), so a host
 * using only the core ABI still learns that its outputs are not valid. */
ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxWaitEvent(onnxEvent event) {
  kiln_error_clear();
  if (!kiln_handle_valid(event, KILN_H_EVENT))
    return fail(ONNXIFI_STATUS_INVALID_EVENT, "%s", "unknown or released event");
  kiln_event *e = event;
  kiln_event_ref(e);
  kiln_graph_wait_run(e);
  onnxStatus st = e->status;
  if (st) kiln_error_set_message(e->message);
  else kiln_error_clear(); /* a run made on this thread may leave notes behind */
  kiln_event_unref(e);
  return st ? ONNXIFI_STATUS_INTERNAL_ERROR : ONNXIFI_STATUS_SUCCESS;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseEvent(onnxEvent event) {
  kiln_error_clear();
  kiln_graph_pay_wakes(); /* plugin/graph.c, "deferred wakes" */
  if (!kiln_handle_remove(event, KILN_H_EVENT))
    return fail(ONNXIFI_STATUS_INVALID_EVENT, "%s", "unknown or released event");
  kiln_event_unref(event);
  return ONNXIFI_STATUS_SUCCESS;
}

/* ---- graphs ---- */

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxInitGraph(onnxBackend backend, const uint64_t *auxPropertiesList,
                                                    size_t onnxModelSize, const void *onnxModel, uint32_t weightsCount,
                                                    const onnxTensorDescriptorV1 *weightDescriptors,
                                                    onnxGraph *graph) {
  kiln_error_clear();
  if (graph) *graph = NULL;
  if (!kiln_handle_valid(backend, KILN_H_BACKEND))
    return fail(ONNXIFI_STATUS_INVALID_BACKEND, "%s", "unknown or released backend");
  if (!onnxModel || !graph || (weightsCount && !weightDescriptors))
    return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s",
                !onnxModel ? "onnxModel is NULL" : !graph ? "graph is NULL" : "weightDescriptors is NULL");
  if (!onnxModelSize) return fail(ONNXIFI_STATUS_INVALID_SIZE, "%s", "onnxModelSize is 0");
  if (auxPropertiesList)
    for (const uint64_t *p = auxPropertiesList; *p != ONNXIFI_GRAPH_PROPERTY_NONE; p += 2) {
      char q[32];
      snprintf(q, sizeof q, "%llu", (unsigned long long)*p);
      return fail(ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, "graph property %s is not supported", q);
    }
  kiln_backend *b = backend;
  pthread_mutex_lock(&b->mu);
  b->refs++;
  pthread_mutex_unlock(&b->mu);
  kiln_graph_handle *h;
  onnxStatus st = kiln_graph_init(b, onnxModel, onnxModelSize, weightsCount, weightDescriptors, &h);
  if (!st && kiln_handle_add(h, KILN_H_GRAPH)) {
    kiln_graph_release(h);
    return ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
  }
  if (st) {
    kiln_backend_unref(b);
    return st;
  }
  *graph = h;
  return ONNXIFI_STATUS_SUCCESS;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxSetGraphIO(onnxGraph graph, uint32_t inputsCount,
                                                     const onnxTensorDescriptorV1 *inputDescriptors,
                                                     uint32_t outputsCount,
                                                     const onnxTensorDescriptorV1 *outputDescriptors) {
  kiln_error_clear();
  kiln_graph_pay_wakes(); /* plugin/graph.c, "deferred wakes" */
  if (!kiln_handle_valid(graph, KILN_H_GRAPH))
    return fail(ONNXIFI_STATUS_INVALID_GRAPH, "%s", "unknown or released graph");
  if ((inputsCount && !inputDescriptors) || !outputDescriptors)
    return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s",
                !outputDescriptors ? "outputDescriptors is NULL" : "inputDescriptors is NULL");
  kiln_graph_handle *h = graph;
  pthread_mutex_lock(&h->io_mu);
  onnxStatus st = kiln_graph_set_io(h, inputsCount, inputDescriptors, outputsCount, outputDescriptors);
  pthread_mutex_unlock(&h->io_mu);
  return st;
}

static onnxStatus check_fence(const onnxMemoryFenceV1 *f, const char *which) {
  if (f->tag != ONNXIFI_TAG_MEMORY_FENCE_V1) return fail(ONNXIFI_STATUS_UNSUPPORTED_TAG, "%s fence has a wrong tag", which);
  if (f->type == ONNXIFI_SYNCHRONIZATION_EVENT) return ONNXIFI_STATUS_SUCCESS;
  if (f->type == ONNXIFI_SYNCHRONIZATION_IMPLICIT)
    return fail(ONNXIFI_STATUS_UNSUPPORTED_FENCE_TYPE, "%s fence: implicit synchronization is not supported", which);
  return fail(ONNXIFI_STATUS_INVALID_FENCE_TYPE, "%s fence has an unknown type", which);
}

static onnxStatus run_graph(onnxGraph graph, const onnxMemoryFenceV1 *inputFence, onnxMemoryFenceV1 *outputFence) {
  onnxStatus st;
  if ((st = check_fence(outputFence, "output"))) return st;
  kiln_event *in = NULL;
  if (inputFence) {
    if ((st = check_fence(inputFence, "input"))) return st;
    if (!kiln_handle_valid(inputFence->event, KILN_H_EVENT))
      return fail(ONNXIFI_STATUS_INVALID_EVENT, "%s", "input fence's event is unknown or released");
    in = inputFence->event;
  }
  kiln_event *out;
  st = kiln_graph_run(graph, in, &out);
  if (!st) outputFence->event = out;
  return st;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxRunGraph(onnxGraph graph, const onnxMemoryFenceV1 *inputFence,
                                                   onnxMemoryFenceV1 *outputFence) {
  kiln_error_clear();
  kiln_graph_pay_wakes(); /* plugin/graph.c, "deferred wakes" */
  if (!kiln_handle_valid(graph, KILN_H_GRAPH))
    return fail(ONNXIFI_STATUS_INVALID_GRAPH, "%s", "unknown or released graph");
  if (!inputFence || !outputFence)
    return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", !inputFence ? "inputFence is NULL" : "outputFence is NULL");
  kiln_graph_handle *h = graph;
  pthread_mutex_lock(&h->io_mu);
  onnxStatus st = run_graph(graph, inputFence, outputFence);
  pthread_mutex_unlock(&h->io_mu);
  return st;
}

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxReleaseGraph(onnxGraph graph) {
  kiln_error_clear();
  if (!kiln_handle_remove(graph, KILN_H_GRAPH))
    return fail(ONNXIFI_STATUS_INVALID_GRAPH, "%s", "unknown or released graph");
  kiln_graph_release(graph);
  return ONNXIFI_STATUS_SUCCESS;
}

/* ---- extensions ---- */

static onnxStatus ONNXIFI_ABI set_io_and_run(onnxGraph graph, uint32_t inputsCount,
                                             const onnxTensorDescriptorV1 *inputDescriptors, uint32_t outputsCount,
                                             const onnxTensorDescriptorV1 *outputDescriptors,
                                             onnxMemoryFenceV1 *outputFence) {
  kiln_error_clear();
  kiln_graph_pay_wakes(); /* plugin/graph.c, "deferred wakes" */
  if (!kiln_handle_valid(graph, KILN_H_GRAPH))
    return fail(ONNXIFI_STATUS_INVALID_GRAPH, "%s", "unknown or released graph");
  if ((inputsCount && !inputDescriptors) || !outputDescriptors || !outputFence)
    return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s",
                !outputFence ? "outputFence is NULL"
                : !outputDescriptors ? "outputDescriptors is NULL"
                                     : "inputDescriptors is NULL");
  /* one step under io_mu: another thread's binding cannot slip in between */
  kiln_graph_handle *h = graph;
  pthread_mutex_lock(&h->io_mu);
  onnxStatus st = kiln_graph_set_io(h, inputsCount, inputDescriptors, outputsCount, outputDescriptors);
  if (!st) st = run_graph(graph, NULL, outputFence);
  pthread_mutex_unlock(&h->io_mu);
  return st;
}

static onnxStatus get_last_error(const char **message) {
  if (!message) return ONNXIFI_STATUS_INVALID_POINTER;
  *message = kiln_last_error();
  return ONNXIFI_STATUS_SUCCESS;
}

static onnxStatus get_event_status(onnxEvent event, onnxStatus *runStatus, const char **message) {
  kiln_error_clear();
  kiln_graph_pay_wakes(); /* plugin/graph.c, "deferred wakes" */
  if (!kiln_handle_valid(event, KILN_H_EVENT))
    return fail(ONNXIFI_STATUS_INVALID_EVENT, "%s", "unknown or released event");
  if (!runStatus) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "runStatus is NULL");
  kiln_event *e = event;
  pthread_mutex_lock(&e->mu);
  *runStatus = e->signalled ? e->status : ONNXIFI_STATUS_SUCCESS;
  if (message) *message = e->signalled && e->message ? e->message : "";
  pthread_mutex_unlock(&e->mu);
  return ONNXIFI_STATUS_SUCCESS;
}

static onnxStatus get_graph_statistics(onnxGraph graph, kilnGraphStatistics *stats) {
  kiln_error_clear();
  if (!kiln_handle_valid(graph, KILN_H_GRAPH))
    return fail(ONNXIFI_STATUS_INVALID_GRAPH, "%s", "unknown or released graph");
  if (!stats) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "stats is NULL");
  /* the struct as first published ended at fusedNodes: hosts built with it keep working */
  size_t known = offsetof(kilnGraphStatistics, runsOnWorker);
  if (stats->size < known)
    return fail(ONNXIFI_STATUS_INVALID_SIZE, "%s", "stats->size is smaller than kilnGraphStatistics");
  size_t n = stats->size < sizeof *stats ? (size_t)stats->size : sizeof *stats;
  kiln_graph_handle *h = graph;
  kilnGraphStatistics all;
  memset(&all, 0, sizeof all);
  /* the worker holds obs_mu around each run: a plan may grow during one */
  pthread_mutex_lock(&h->obs_mu);
  if (h->backend->engine->stats) h->backend->engine->stats(h->plan, h->g, &all);
  pthread_mutex_unlock(&h->obs_mu);
  pthread_mutex_lock(&h->mu);
  all.runsOnWorker = h->runs_worker;
  all.runsOnWaitingThread = h->runs_waiter;
  all.importedFromCache = h->imported_from_cache;
  pthread_mutex_unlock(&h->mu);
  all.size = n;
  memcpy(stats, &all, n);
  return ONNXIFI_STATUS_SUCCESS;
}

/* Observers: handle checks here, the bodies in plugin/observe.c. */
#define GRAPH_CHECK(graph)                                                    \
  do {                                                                        \
    kiln_error_clear();                                                       \
    if (!kiln_handle_valid(graph, KILN_H_GRAPH))                              \
      return fail(ONNXIFI_STATUS_INVALID_GRAPH, "%s", "unknown or released graph"); \
  } while (0)

static onnxStatus start_observing(onnxGraph graph, const kilnObserverOptions *options) {
  GRAPH_CHECK(graph);
  return kiln_graph_observe_start(graph, options);
}

static onnxStatus stop_observing(onnxGraph graph) {
  GRAPH_CHECK(graph);
  return kiln_graph_observe_stop(graph);
}

static onnxStatus get_observed_ranges(onnxGraph graph, kilnObservedRange *ranges, size_t *count) {
  GRAPH_CHECK(graph);
  if (!count) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", "count is NULL");
  return kiln_graph_observed_ranges(graph, ranges, count);
}

static onnxStatus dump_observed_ranges(onnxGraph graph, const char *path) {
  GRAPH_CHECK(graph);
  return kiln_graph_observe_dump(graph, path);
}

static onnxStatus write_observed_histograms(onnxGraph graph, const char *path) {
  GRAPH_CHECK(graph);
  return kiln_graph_observe_hist(graph, path);
}

static onnxStatus write_quantization_params(onnxGraph graph, const char *path, uint32_t method, uint32_t scheme) {
  GRAPH_CHECK(graph);
  return kiln_graph_observe_qparams(graph, path, method, scheme);
}
#undef GRAPH_CHECK

#define EXT(fn) ((onnxExtensionFunctionPointer)(void (*)(void))(fn))
static const struct {
  const char *name;
  onnxExtensionFunctionPointer fn;
} observer_ext[] = {
    {"kilnStartObserving", EXT(start_observing)},
    {"kilnStopObserving", EXT(stop_observing)},
    {"kilnGetObservedRanges", EXT(get_observed_ranges)},
    {"kilnDumpObservedRanges", EXT(dump_observed_ranges)},
    {"kilnWriteObservedHistograms", EXT(write_observed_histograms)},
    {"kilnWriteQuantizationParams", EXT(write_quantization_params)},
};

ONNXIFI_PUBLIC onnxStatus ONNXIFI_ABI onnxGetExtensionFunctionAddress(onnxBackendID backendID, const char *name,
                                                                      onnxExtensionFunctionPointer *function) {
  kiln_error_clear();
  if (function) *function = NULL;
  if (!kiln_handle_valid(backendID, KILN_H_BACKEND_ID))
    return fail(ONNXIFI_STATUS_INVALID_ID, "%s", "unknown or released backend ID");
  if (!name || !function) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s", !name ? "name is NULL" : "function is NULL");
  if (!strcmp(name, "onnxSetIOAndRunGraph")) *function = (onnxExtensionFunctionPointer)(void (*)(void))set_io_and_run;
  else if (!strcmp(name, "kilnGetLastErrorMessage")) *function = (onnxExtensionFunctionPointer)(void (*)(void))get_last_error;
  else if (!strcmp(name, "kilnGetEventStatus")) *function = (onnxExtensionFunctionPointer)(void (*)(void))get_event_status;
  else if (!strcmp(name, "kilnGetGraphStatistics"))
    *function = (onnxExtensionFunctionPointer)(void (*)(void))get_graph_statistics;
  else {
    for (size_t i = 0; i < sizeof observer_ext / sizeof *observer_ext && !*function; i++)
      if (!strcmp(name, observer_ext[i].name)) *function = observer_ext[i].fn;
    if (!*function) return fail(ONNXIFI_STATUS_UNIDENTIFIED_NAME, "no extension function named '%s'", name);
  }
  return ONNXIFI_STATUS_SUCCESS;
}
