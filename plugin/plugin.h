/* plugin/plugin.h: the ONNXIFI layer's internal objects — backend IDs,
 * backends, events and graphs — and the registry that validates handles.
 * Only plugin/ knows ONNXIFI; it maps kiln_status to onnxStatus here. */
#ifndef KILN_PLUGIN_H
#define KILN_PLUGIN_H
#include <onnx/onnxifi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "include/kiln/kiln_ext.h"
#include "ir/graph.h"
#include "ir/observe.h"

/* ---- handle registry (the one documented piece of global state) ---- */
typedef enum kiln_handle_kind { KILN_H_BACKEND_ID = 1, KILN_H_BACKEND, KILN_H_EVENT, KILN_H_GRAPH } kiln_handle_kind;
kiln_status kiln_handle_add(void *p, kiln_handle_kind kind);
/* Removes p; false when p was not registered as kind. */
bool kiln_handle_remove(void *p, kiln_handle_kind kind);
bool kiln_handle_valid(const void *p, kiln_handle_kind kind);

/* ---- execution backends behind the ABI ---- */

/* A backend implementation (ggml-style interface: the ONNXIFI layer never
 * special-cases one). prepare() checks and compiles a graph into an opaque
 * plan; run() executes it with bound inputs (indexed by value) into owned
 * output tensors. */
typedef struct kiln_engine {
  const char *name;      /* KILN_DEVICE token and backend NAME suffix */
  const char *device;    /* ONNXIFI_BACKEND_DEVICE text */
  onnxEnum device_type;
  onnxBitfield capabilities; /* ONNXIFI_CAPABILITY_* this engine honours (each tested) */
  kiln_status (*check)(const kiln_graph *g);
  kiln_status (*prepare)(const kiln_graph *g, void **plan);
  kiln_status (*run)(void *plan, const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs);
  void (*release)(void *plan); /* optional */
  /* optional: fills the plan's statistics (kiln_ext.h's struct, size set) */
  void (*stats)(void *plan, const kiln_graph *g, kilnGraphStatistics *st);
  /* optional: an engine per device — prepare_on(impl, ...) replaces
     prepare(...), impl names the device (OpenCL engines) */
  const void *impl;
  kiln_status (*prepare_on)(const void *impl, const kiln_graph *g, const void *rec, void **plan);
  /* optional: the host's device objects (OpenCL engines: the
     ONNXIFI_BACKEND_OPENCL_CONTEXT property, OPENCL_BUFFER tensors) */
  onnxBitfield memory_types;       /* ONNXIFI_BACKEND_MEMORY_TYPES (0: CPU only) */
  void *cl_platform, *cl_device;   /* OPENCL_PLATFORM_ID / OPENCL_DEVICE_ID (NULL: not OpenCL) */
  /* a backend on the host's context hctx (kiln_status KILN_E_MODEL: the
     property's value is not valid for this device) */
  kiln_status (*backend_open)(const void *impl, void *hctx, void **bctx);
  void (*backend_close)(void *bctx);
  /* optional: onnxInitBackend without the host's context sets the device up
     (OpenCL: its context and queue) ahead of the first graph; false with
     the error set when it cannot (the first graph's init then reports it) */
  bool (*backend_warm)(const void *impl);
  /* prepare in backend state bctx (non-NULL), replaces prepare_on */
  kiln_status (*prepare_in)(const void *impl, void *bctx, const kiln_graph *g, const void *rec, void **plan);
  /* optional: the engine's records of imported graphs, keyed by the raw
     inputs of onnxInitGraph (OpenCL: the kiln cache, opencl/import_cache).
     import_lookup keys them (the weight descriptors already checked): true
     on a hit, *g the graph as imported (weights attached, borrowed from
     *rec); false on a miss, *rec (maybe NULL) kept for import_store after
     a successful init (import_ms: what the import took; the store may
     read g until rec is released). rec also goes to prepare_on /
     prepare_in (NULL when none); import_release frees it (NULL-safe):
     after g on a hit (g borrows it), before g on a miss (a store reads g) */
  bool (*import_lookup)(const void *model, size_t size, uint32_t nweights, const onnxTensorDescriptorV1 *weights,
                        kiln_graph **g, void **rec);
  void (*import_store)(void *rec, const kiln_graph *g, double import_ms);
  void (*import_release)(void *rec);
  /* mem is a device buffer of bctx (NULL: the backend has no host context)
     with room for bytes; KILN_E_MODEL with a message otherwise */
  kiln_status (*check_buffer)(void *bctx, void *mem, size_t bytes, const char *what);
  /* run() with device buffers: mem_in per value (NULL: host), mem_out per output */
  kiln_status (*run_mem)(void *plan, const kiln_graph *g, const kiln_tensor *const *bound, void *const *mem_in,
                         kiln_tensor *outs, void *const *mem_out);
} kiln_engine;

extern const kiln_engine kiln_engine_reference;
extern const kiln_engine kiln_engine_cpu;

typedef struct kiln_backend_id {
  const kiln_engine *engine;
} kiln_backend_id;

typedef struct kiln_backend {
  const kiln_engine *engine;
  pthread_mutex_t mu;
  int refs; /* the handle + each live graph */
  void *bctx; /* engine state of a backend on the host's context (engine->backend_open), or NULL */
} kiln_backend;

/* plugin/engine_opencl.c: one engine per usable OpenCL device (made once
 * per process). _auto appends, through add, those of `auto` rank `rank`
 * (0: GPUs and accelerators, 1: the rest); _select those of KILN_DEVICE token
 * tok (`opencl` or `opencl:P:D`; env, the whole variable, for messages). */
typedef kiln_status (*kiln_engine_add_fn)(const kiln_engine *e, const kiln_engine **out, int max, int *n);
kiln_status kiln_opencl_engines_auto(int rank, kiln_engine_add_fn add, const kiln_engine **out, int max, int *n);
kiln_status kiln_opencl_engines_select(const char *env, const char *tok, kiln_engine_add_fn add,
                                       const kiln_engine **out, int max, int *n);

/* Parses KILN_DEVICE into the engines it selects, in order. */
kiln_status kiln_select_engines(const kiln_engine **out, int max, int *n);

void kiln_backend_unref(kiln_backend *b);

/* ---- events ---- */
typedef struct kiln_event {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs;          /* the handle + each pending run using it */
  bool signalled;
  bool from_run;     /* made by onnxRunGraph: carries the run's status */
  onnxStatus status; /* outcome of the run */
  char *message;     /* failure text (owned) */
  /* an output event: the graph whose run signals it, so that the thread
   * waiting on it can run that job itself (kiln_graph_wait_run); set at
   * onnxRunGraph, valid while the event is not signalled */
  struct kiln_graph_handle *graph;
  /* an input fence: the graphs with a queued run behind it whose worker
   * was not woken for that run (kiln_graph_run), each pinned; woken, and
   * the list emptied, when it is signalled */
  struct kiln_graph_handle **notify;
  int n_notify, cap_notify;
  int waiters; /* threads in kiln_graph_wait_run on it */
} kiln_event;

kiln_status kiln_event_new(bool from_run, kiln_event **out);
void kiln_event_ref(kiln_event *e);
void kiln_event_unref(kiln_event *e);
/* Signals e and wakes the workers of the graphs on its notify list;
 * returns false if it was already signalled. */
bool kiln_event_signal(kiln_event *e, onnxStatus status, const char *message);
void kiln_event_wait(kiln_event *e);

/* ---- graphs ---- */
typedef struct kiln_io_out {
  int value;      /* value index */
  kiln_dtype dtype;
  int rank;
  int64_t dims[KILN_MAX_RANK];
  void *buffer;
  void *mem; /* a device buffer (ONNXIFI_MEMORY_TYPE_OPENCL_BUFFER): buffer is NULL */
} kiln_io_out;

typedef struct kiln_job kiln_job;

typedef struct kiln_graph_handle {
  kiln_backend *backend;
  kiln_graph *g;
  void *plan;
  bool *runtime_input; /* per graph-input index: bound at SetGraphIO */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* current IO binding */
  bool io_valid;
  kiln_tensor *in_bind;  /* per graph-input index (wraps host memory) */
  kiln_io_out *out_bind; /* per graph-output index */
  /* observers (ir/observe): the worker holds obs_mu around each run (and
   * the observer's run bracket), the observer extension functions hold it
   * too, so they act between runs. obs stays after stop (readable) until
   * the next start or the release. */
  pthread_mutex_t obs_mu;
  kiln_obs *obs;
  bool observing;
  /* worker */
  bool worker_started, stopping;
  pthread_t worker;
  kiln_job *head, *tail;
  /* one job runs at a time: busy from the moment the worker or a waiting
   * host thread takes a job until its output is signalled; current is the
   * job the worker took and waits on the input of (a waiting host thread
   * may take it over, kiln_graph_wait_run), else NULL */
  bool busy;
  kiln_job *current;
  bool run_on_wait; /* KILN_RUN_ON_WAIT (default 1): the waiting thread runs its own job */
  atomic_int pins;  /* threads inside kiln_graph_wait_run and entries on input fences' notify lists: the release
                       waits for them */
  void *import_rec; /* engine->import_lookup's record h->g borrows (a hit) or its key (a miss), or NULL */
  bool imported_from_cache; /* h->g came from the engine's import record: no parse */
  uint64_t runs_worker, runs_waiter; /* runs each kind of thread executed (kilnGetGraphStatistics) */
  void **in_mem; /* per graph-input index: a device buffer bound instead of in_bind's data, or NULL */
  /* held by onnxSetGraphIO, onnxRunGraph and onnxSetIOAndRunGraph, so that
   * the last binds and queues as one step when threads share a graph */
  pthread_mutex_t io_mu;
} kiln_graph_handle;

onnxStatus kiln_graph_init(kiln_backend *b, const void *model, size_t size, uint32_t nweights,
                           const onnxTensorDescriptorV1 *weights, kiln_graph_handle **out);
onnxStatus kiln_graph_set_io(kiln_graph_handle *h, uint32_t nin, const onnxTensorDescriptorV1 *in, uint32_t nout,
                             const onnxTensorDescriptorV1 *out);
onnxStatus kiln_graph_run(kiln_graph_handle *h, kiln_event *input, kiln_event **output);
void kiln_graph_release(kiln_graph_handle *h);
/* Waits for an event: when it is the output of a run whose input is
 * signalled (or absent) and that run has not started, the calling thread
 * runs it itself, sparing the two thread hand-offs (host -> worker ->
 * host) of a run queued with onnxRunGraph; otherwise it waits as
 * kiln_event_wait does. */
void kiln_graph_wait_run(kiln_event *e);
/* The input fence of a queued run was signalled: wakes the graph's worker
 * if that run is now next and ready, and drops the pin the notify entry
 * held (kiln_event_signal calls it, holding no event's lock). */
void kiln_graph_notify(kiln_graph_handle *h);
/* Pays the worker wakes owed by runs made ready with nobody waiting on
 * their output (graph.c, "deferred wakes"); called at the start of the ABI
 * calls that queue, signal, look at or release runs. One atomic load when
 * nothing is owed. */
void kiln_graph_pay_wakes(void);

/* Observers (plugin/observe.c, the kiln_ext.h functions' bodies). The
 * engine sees the observer through kiln_obs_run_current() during run(). */
onnxStatus kiln_graph_observe_start(kiln_graph_handle *h, const kilnObserverOptions *opts);
onnxStatus kiln_graph_observe_stop(kiln_graph_handle *h);
onnxStatus kiln_graph_observed_ranges(kiln_graph_handle *h, kilnObservedRange *ranges, size_t *count);
onnxStatus kiln_graph_observe_dump(kiln_graph_handle *h, const char *path);
onnxStatus kiln_graph_observe_hist(kiln_graph_handle *h, const char *path);
onnxStatus kiln_graph_observe_qparams(kiln_graph_handle *h, const char *path, uint32_t method, uint32_t scheme);

/* Graph-boundary checks shared by compatibility and init: every graph input
 * and output is a dense tensor of a storable type with no zero dims. */
kiln_status kiln_check_boundary(const kiln_graph *g);

onnxStatus kiln_onnx_status(kiln_status s);

#endif
