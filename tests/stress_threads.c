/* tests/stress_threads: the proof behind ONNXIFI_CAPABILITY_THREAD_SAFE.
 * The plugin is loaded with dlopen, as a host loads it; on every backend
 * KILN_DEVICE offers, with the bundled examples (examples/cnn.onnx and
 * examples/mlp.onnx):
 *
 *  1. distinct graphs: T threads, each with its own backend and graph, start
 *     together (the first use of the engine's process-wide caches happens
 *     under contention) and do R runs each, alternating onnxSetIOAndRunGraph
 *     and onnxSetGraphIO + onnxRunGraph with an input event;
 *  2. one shared graph per model: T threads do R runs each through
 *     onnxSetIOAndRunGraph on the same graph, each into its own buffers,
 *     while an interloper thread rebinds the graphs with onnxSetGraphIO;
 *  every output is compared bit for bit (memcmp) with a single-threaded run
 *  of the same input set;
 *  3. onnxReleaseGraph with three runs queued behind an unsignalled input
 *     event blocks until the event is signalled and the runs finished;
 *  4. onnxReleaseBackend with a live graph (and a run in flight) succeeds,
 *     the backend handle is invalid at once, the graph keeps working until
 *     it is released (the backend's resources go with it: LSan in the
 *     sanitizer build sees no leak).
 *
 *   stress_threads PLUGIN.so EXAMPLES_DIR
 *   KILN_STRESS_THREADS (default 8), KILN_STRESS_RUNS (runs per thread and
 *   phase, default 1000; ctest uses 200, the TSan step fewer).
 * Exit 0 when all checks pass, 1 otherwise, 2 when the plugin or the models
 * cannot be loaded. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/onnxifi_dl.h"

#define NSETS 16

static dl_api api;
static int n_pass, n_fail;
static int T = 8, R = 1000;

static void check(bool ok, const char *what, const char *detail) {
  if (ok) n_pass++;
  else n_fail++;
  printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail && *detail ? ": " : "", detail ? detail : "");
  fflush(stdout);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int env_int(const char *name, int def, int lo, int hi) {
  const char *s = getenv(name);
  if (!s || !*s) return def;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) {
    printf("%s=%s: not an integer in [%d, %d]\n", name, s, lo, hi);
    exit(2);
  }
  return (int)v;
}

/* ---- models and data ---- */

static void *model_bytes[2];
static size_t model_size[2];
static float *inputs[2][NSETS];  /* per model and set */
static float *expect[2][NSETS];  /* single-threaded outputs */

static void fill_inputs(void) {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  for (int m = 0; m < 2; m++)
    for (int k = 0; k < NSETS; k++) {
      inputs[m][k] = malloc(dl_models[m].in_n * sizeof(float));
      expect[m][k] = malloc(dl_models[m].out_n * sizeof(float));
      if (!inputs[m][k] || !expect[m][k]) exit(2);
      for (size_t i = 0; i < dl_models[m].in_n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        inputs[m][k][i] = (float)((double)(s >> 11) / (double)(1ull << 52) - 1.0);
      }
    }
}

/* One run of model m with input set k into out: through
 * onnxSetIOAndRunGraph, or (plain) onnxSetGraphIO + onnxRunGraph with an
 * input event signalled after the run was queued. Returns the status. */
static onnxStatus run_once(onnxBackend be, onnxGraph g, int m, int k, float *out, bool plain) {
  const dl_model *md = &dl_models[m];
  onnxTensorDescriptorV1 in = dl_desc(md->in_name, md->in_rank, md->in_shape, inputs[m][k]);
  onnxTensorDescriptorV1 od = dl_desc(md->out_name, md->out_rank, md->out_shape, out);
  onnxMemoryFenceV1 of = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
  onnxStatus st;
  if (!plain) {
    if ((st = api.SetIOAndRun(g, 1, &in, 1, &od, &of))) return st;
  } else {
    onnxMemoryFenceV1 inf = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
    if ((st = api.InitEvent(be, &inf.event))) return st;
    if ((st = api.SetGraphIO(g, 1, &in, 1, &od)) || (st = api.RunGraph(g, &inf, &of))) {
      (void)api.ReleaseEvent(inf.event);
      return st;
    }
    st = api.SignalEvent(inf.event);
    (void)api.ReleaseEvent(inf.event);
    if (st) {
      if (api.WaitEvent(of.event)) st = st ? st : ONNXIFI_STATUS_INTERNAL_ERROR;
      (void)api.ReleaseEvent(of.event);
      return st;
    }
  }
  st = api.WaitEvent(of.event);
  onnxStatus rs = api.ReleaseEvent(of.event);
  return st ? st : rs;
}

/* ---- phase 1: distinct graphs ---- */

typedef struct worker {
  int t;
  onnxBackendID id;
  onnxGraph shared[2]; /* phase 2 */
  onnxBackend shared_be;
  float *results; /* phase 1: R outputs */
  int errors, mismatches;
  char msg[256];
} worker;

static pthread_barrier_t start_line;

static void *distinct_main(void *arg) {
  worker *w = arg;
  int m = w->t % 2;
  const dl_model *md = &dl_models[m];
  onnxBackend be = NULL;
  onnxGraph g = NULL;
  pthread_barrier_wait(&start_line);
  onnxStatus st = api.InitBackend(w->id, NULL, &be);
  if (!st) st = api.InitGraph(be, NULL, model_size[m], model_bytes[m], 0, NULL, &g);
  if (st) {
    w->errors++;
    snprintf(w->msg, sizeof w->msg, "thread %d init: status %d (%s)", w->t, (int)st, dl_last_error(&api));
  }
  for (int r = 0; r < R && !st; r++) {
    int k = (w->t * 7 + r) % NSETS;
    if ((st = run_once(be, g, m, k, w->results + (size_t)r * md->out_n, r % 2))) {
      w->errors++;
      snprintf(w->msg, sizeof w->msg, "thread %d run %d: status %d (%s)", w->t, r, (int)st, dl_last_error(&api));
    }
  }
  if (g && api.ReleaseGraph(g)) w->errors++;
  if (be && api.ReleaseBackend(be)) w->errors++;
  return NULL;
}

/* ---- phase 2: one shared graph per model ---- */

static void *shared_main(void *arg) {
  worker *w = arg;
  int m = w->t % 2;
  const dl_model *md = &dl_models[m];
  float *out = malloc(md->out_n * sizeof(float));
  if (!out) {
    w->errors++;
    return NULL;
  }
  pthread_barrier_wait(&start_line);
  for (int r = 0; r < R; r++) {
    int k = (w->t * 5 + r) % NSETS;
    memset(out, 0xff, md->out_n * sizeof(float));
    onnxStatus st = run_once(w->shared_be, w->shared[m], m, k, out, false);
    if (st) {
      w->errors++;
      snprintf(w->msg, sizeof w->msg, "thread %d run %d: status %d (%s)", w->t, r, (int)st, dl_last_error(&api));
      break;
    }
    if (memcmp(out, expect[m][k], md->out_n * sizeof(float))) w->mismatches++;
  }
  free(out);
  return NULL;
}

/* Phase 2's interloper: rebinds the shared graphs (onnxSetGraphIO, its own
 * output buffer) in a loop while the workers run. If a rebinding could slip
 * between a worker's bind and queue in onnxSetIOAndRunGraph, that run would
 * write the interloper's buffer and leave the worker's (pre-filled with
 * NaN bits) unwritten: a mismatch. */
static atomic_int interloper_stop;
static onnxGraph interloper_graphs[2];
static long interloper_binds;

static void *interloper_main(void *arg) {
  (void)arg;
  float out[2][64];
  long n = 0;
  while (!atomic_load(&interloper_stop)) {
    for (int m = 0; m < 2; m++) {
      const dl_model *md = &dl_models[m];
      onnxTensorDescriptorV1 in = dl_desc(md->in_name, md->in_rank, md->in_shape, inputs[m][0]);
      onnxTensorDescriptorV1 od = dl_desc(md->out_name, md->out_rank, md->out_shape, out[m]);
      if (!api.SetGraphIO(interloper_graphs[m], 1, &in, 1, &od)) n++;
    }
  }
  interloper_binds = n;
  return NULL;
}

static int run_threads(worker *w, void *(*fn)(void *)) {
  pthread_t th[64];
  if (pthread_barrier_init(&start_line, NULL, (unsigned)T)) return -1;
  int started = 0;
  for (int t = 0; t < T; t++) {
    if (pthread_create(&th[t], NULL, fn, &w[t])) break;
    started++;
  }
  if (started < T) { /* cannot happen short of resource exhaustion: the barrier would hang */
    printf("cannot start %d threads\n", T);
    exit(2);
  }
  for (int t = 0; t < T; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start_line);
  return 0;
}

/* ---- phase 3: release with runs in flight ---- */

typedef struct releaser {
  onnxGraph g;
  atomic_int done;
  onnxStatus st;
} releaser;

static void *release_main(void *arg) {
  releaser *r = arg;
  r->st = api.ReleaseGraph(r->g);
  atomic_store(&r->done, 1);
  return NULL;
}

static void release_in_flight(onnxBackendID id, const char *bname) {
  char what[160], d[256];
  const dl_model *md = &dl_models[0];
  onnxBackend be = NULL;
  onnxGraph g = NULL;
  float out[3][16];
  onnxEvent ev = NULL, oe[3] = {0};
  onnxStatus st = api.InitBackend(id, NULL, &be);
  if (!st) st = api.InitGraph(be, NULL, model_size[0], model_bytes[0], 0, NULL, &g);
  if (!st) st = api.InitEvent(be, &ev);
  for (int i = 0; i < 3 && !st; i++) {
    onnxTensorDescriptorV1 in = dl_desc(md->in_name, md->in_rank, md->in_shape, inputs[0][i]);
    onnxTensorDescriptorV1 od = dl_desc(md->out_name, md->out_rank, md->out_shape, out[i]);
    onnxMemoryFenceV1 inf = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT, .event = ev};
    onnxMemoryFenceV1 of = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
    if (!(st = api.SetGraphIO(g, 1, &in, 1, &od))) st = api.RunGraph(g, &inf, &of);
    oe[i] = of.event;
  }
  snprintf(what, sizeof what, "%s: three runs queued behind an unsignalled input event", bname);
  snprintf(d, sizeof d, "status %d %s", (int)st, st ? dl_last_error(&api) : "");
  check(!st, what, st ? d : NULL);
  if (st) goto out;
  releaser rl = {.g = g};
  pthread_t th;
  if (pthread_create(&th, NULL, release_main, &rl)) exit(2);
  sleep_ms(300);
  int pending = 0;
  for (int i = 0; i < 3; i++) {
    onnxEventState es = ONNXIFI_EVENT_STATE_INVALID;
    if (!api.GetEventState(oe[i], &es) && es == ONNXIFI_EVENT_STATE_NONSIGNALLED) pending++;
  }
  snprintf(what, sizeof what, "%s: onnxReleaseGraph blocks while its runs wait (300 ms)", bname);
  snprintf(d, sizeof d, "returned %s, %d of 3 output events unsignalled", atomic_load(&rl.done) ? "yes" : "no",
           pending);
  check(!atomic_load(&rl.done) && pending == 3, what, d);
  st = api.SignalEvent(ev);
  pthread_join(th, NULL);
  g = NULL;
  int ok = 0;
  for (int i = 0; i < 3; i++) {
    onnxEventState es = ONNXIFI_EVENT_STATE_INVALID;
    if (!api.GetEventState(oe[i], &es) && es == ONNXIFI_EVENT_STATE_SIGNALLED && !api.WaitEvent(oe[i]) &&
        !memcmp(out[i], expect[0][i], md->out_n * sizeof(float)))
      ok++;
  }
  snprintf(what, sizeof what, "%s: after the signal, release returns with every run done and correct", bname);
  snprintf(d, sizeof d, "release status %d, %d of 3 runs signalled with the single-threaded outputs", (int)rl.st, ok);
  check(!st && rl.st == ONNXIFI_STATUS_SUCCESS && ok == 3, what, d);
out:
  for (int i = 0; i < 3; i++)
    if (oe[i]) (void)api.ReleaseEvent(oe[i]);
  if (ev) (void)api.ReleaseEvent(ev);
  if (g) (void)api.ReleaseGraph(g);
  if (be) (void)api.ReleaseBackend(be);
}

/* ---- phase 4: release a backend with a live graph ---- */

static void release_backend_live(onnxBackendID id, const char *bname) {
  char what[160], d[256];
  const dl_model *md = &dl_models[1];
  onnxBackend be = NULL;
  onnxGraph g = NULL, g2 = NULL;
  onnxEvent ev = NULL;
  float out[64], out2[64];
  onnxMemoryFenceV1 of = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
  onnxStatus st = api.InitBackend(id, NULL, &be);
  if (!st) st = api.InitGraph(be, NULL, model_size[1], model_bytes[1], 0, NULL, &g);
  if (!st) st = api.InitEvent(be, &ev);
  if (!st) {
    onnxTensorDescriptorV1 in = dl_desc(md->in_name, md->in_rank, md->in_shape, inputs[1][3]);
    onnxTensorDescriptorV1 od = dl_desc(md->out_name, md->out_rank, md->out_shape, out);
    onnxMemoryFenceV1 inf = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT, .event = ev};
    if (!(st = api.SetGraphIO(g, 1, &in, 1, &od))) st = api.RunGraph(g, &inf, &of);
  }
  if (st) {
    snprintf(what, sizeof what, "%s: setting up a graph with a run in flight", bname);
    snprintf(d, sizeof d, "status %d %s", (int)st, dl_last_error(&api));
    check(false, what, d);
    goto out;
  }
  st = api.ReleaseBackend(be);
  snprintf(what, sizeof what, "%s: onnxReleaseBackend with a live graph and a run in flight succeeds", bname);
  snprintf(d, sizeof d, "status %d", (int)st);
  check(st == ONNXIFI_STATUS_SUCCESS, what, d);
  if (!st) {
    onnxStatus s2 = api.InitGraph(be, NULL, model_size[1], model_bytes[1], 0, NULL, &g2);
    snprintf(what, sizeof what, "%s: the released backend handle is invalid at once", bname);
    snprintf(d, sizeof d, "onnxInitGraph status %d", (int)s2);
    check(s2 == ONNXIFI_STATUS_INVALID_BACKEND, what, d);
    be = NULL;
  }
  if (api.SignalEvent(ev)) check(false, "signalling the input event", bname);
  st = api.WaitEvent(of.event);
  (void)api.ReleaseEvent(of.event);
  onnxStatus st2 = run_once(NULL, g, 1, 4, out2, false);
  snprintf(what, sizeof what, "%s: the graph keeps running after its backend was released", bname);
  snprintf(d, sizeof d, "in-flight run status %d, a new run status %d", (int)st, (int)st2);
  check(!st && !st2 && !memcmp(out, expect[1][3], md->out_n * sizeof(float)) &&
            !memcmp(out2, expect[1][4], md->out_n * sizeof(float)),
        what, d);
  st = api.ReleaseGraph(g);
  g = NULL;
  snprintf(what, sizeof what, "%s: releasing the last graph (and so the backend's resources)", bname);
  snprintf(d, sizeof d, "status %d", (int)st);
  check(st == ONNXIFI_STATUS_SUCCESS, what, d);
out:
  if (g2) (void)api.ReleaseGraph(g2);
  if (ev) (void)api.ReleaseEvent(ev);
  if (g) (void)api.ReleaseGraph(g);
  if (be) (void)api.ReleaseBackend(be);
}

/* ---- per backend ---- */

static void stress_backend(onnxBackendID id) {
  char bname[64] = "?", what[200], d[256];
  size_t sz = sizeof bname;
  if (api.GetBackendInfo(id, ONNXIFI_BACKEND_NAME, bname, &sz)) snprintf(bname, sizeof bname, "?");
  onnxBitfield caps = 0;
  sz = sizeof caps;
  if (api.GetBackendInfo(id, ONNXIFI_BACKEND_CAPABILITIES, &caps, &sz)) caps = 0;
  snprintf(what, sizeof what, "%s claims ONNXIFI_CAPABILITY_THREAD_SAFE", bname);
  check(caps & ONNXIFI_CAPABILITY_THREAD_SAFE, what, NULL);
  if (dl_load_ext(&api, id)) {
    check(false, "onnxSetIOAndRunGraph and kilnGetLastErrorMessage are offered", bname);
    return;
  }
  worker *w = calloc((size_t)T, sizeof *w);
  if (!w) exit(2);
  size_t per = dl_models[0].out_n > dl_models[1].out_n ? dl_models[0].out_n : dl_models[1].out_n;
  for (int t = 0; t < T; t++) {
    w[t].t = t;
    w[t].id = id;
    if (!(w[t].results = calloc((size_t)R * per, sizeof(float)))) exit(2);
  }

  /* 1: distinct graphs, first (the process-wide caches start under contention) */
  double t0 = now_s();
  run_threads(w, distinct_main);
  double t_distinct = now_s() - t0;

  /* the single-threaded outputs */
  onnxBackend be = NULL;
  onnxGraph g[2] = {0};
  onnxStatus st = api.InitBackend(id, NULL, &be);
  for (int m = 0; m < 2 && !st; m++) st = api.InitGraph(be, NULL, model_size[m], model_bytes[m], 0, NULL, &g[m]);
  for (int m = 0; m < 2 && !st; m++)
    for (int k = 0; k < NSETS && !st; k++) st = run_once(be, g[m], m, k, expect[m][k], false);
  snprintf(what, sizeof what, "%s: single-threaded runs of %d input sets per model", bname, NSETS);
  snprintf(d, sizeof d, "status %d %s", (int)st, st ? dl_last_error(&api) : "");
  check(!st, what, st ? d : NULL);
  if (st) goto out;

  int errors = 0, mism = 0;
  for (int t = 0; t < T; t++) {
    int m = t % 2;
    size_t n = dl_models[m].out_n;
    errors += w[t].errors;
    if (w[t].errors) printf("     %s\n", w[t].msg);
    for (int r = 0; r < R && !w[t].errors; r++)
      if (memcmp(w[t].results + (size_t)r * n, expect[m][(t * 7 + r) % NSETS], n * sizeof(float))) mism++;
  }
  snprintf(what, sizeof what, "%s: distinct graphs, %d threads x %d runs bit-identical to single-threaded runs", bname,
           T, R);
  snprintf(d, sizeof d, "%d errors, %d mismatches, %.2f s", errors, mism, t_distinct);
  check(!errors && !mism, what, d);

  /* 2: one shared graph per model */
  for (int t = 0; t < T; t++) {
    w[t].errors = w[t].mismatches = 0;
    w[t].shared[0] = g[0];
    w[t].shared[1] = g[1];
    w[t].shared_be = be;
  }
  t0 = now_s();
  pthread_t ip;
  interloper_graphs[0] = g[0];
  interloper_graphs[1] = g[1];
  atomic_store(&interloper_stop, 0);
  if (pthread_create(&ip, NULL, interloper_main, NULL)) exit(2);
  run_threads(w, shared_main);
  atomic_store(&interloper_stop, 1);
  pthread_join(ip, NULL);
  double t_shared = now_s() - t0;
  errors = mism = 0;
  for (int t = 0; t < T; t++) {
    errors += w[t].errors;
    mism += w[t].mismatches;
    if (w[t].errors) printf("     %s\n", w[t].msg);
  }
  snprintf(what, sizeof what, "%s: one shared graph per model, %d threads x %d runs bit-identical", bname, T, R);
  snprintf(d, sizeof d, "%d errors, %d mismatches, %.2f s, %ld rebinds by an interloper thread", errors, mism,
           t_shared, interloper_binds);
  check(!errors && !mism, what, d);

  release_in_flight(id, bname);
  release_backend_live(id, bname);
out:
  for (int m = 0; m < 2; m++)
    if (g[m]) (void)api.ReleaseGraph(g[m]);
  if (be) (void)api.ReleaseBackend(be);
  for (int t = 0; t < T; t++) free(w[t].results);
  free(w);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PLUGIN.so EXAMPLES_DIR\n", argv[0]);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  T = env_int("KILN_STRESS_THREADS", 8, 1, 64);
  R = env_int("KILN_STRESS_RUNS", 1000, 1, 1000000);
  if (dl_load(&api, argv[1])) return 2;
  for (int m = 0; m < 2; m++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[2], dl_models[m].file);
    if (!(model_bytes[m] = dl_read_file(path, &model_size[m]))) {
      printf("cannot read %s\n", path);
      return 2;
    }
  }
  fill_inputs();
  size_t n = 0;
  if (api.GetBackendIDs(NULL, &n) != ONNXIFI_STATUS_FALLBACK || !n || n > 16) {
    printf("no backend offered (KILN_DEVICE=%s)\n", getenv("KILN_DEVICE") ? getenv("KILN_DEVICE") : "");
    return 2;
  }
  onnxBackendID ids[16];
  if (api.GetBackendIDs(ids, &n)) return 2;
  printf("stress_threads: %d threads x %d runs per phase, %zu backend(s)\n", T, R, n);
  for (size_t i = 0; i < n; i++) stress_backend(ids[i]);
  for (size_t i = 0; i < n; i++) (void)api.ReleaseBackendID(ids[i]);
  for (int m = 0; m < 2; m++) {
    free(model_bytes[m]);
    for (int k = 0; k < NSETS; k++) free(inputs[m][k]), free(expect[m][k]);
  }
  printf("stress_threads: %d passed, %d failed\n", n_pass, n_fail);
  /* the plugin stays loaded: a host unloads it last, and LSan then sees the
     process-lifetime caches (OpenCL device list) as still reachable */
  return n_fail ? 1 : 0;
}
