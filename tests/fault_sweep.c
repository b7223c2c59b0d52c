/* tests/fault_sweep: injected faults through the ONNXIFI path (issue 8,
 * SQLite's test_malloc model). Loads the fault-injection build of the
 * plugin (libonnxifi-kiln-fault.so, plugin/fault.h) and, per model, runs
 * the whole host path — onnxGetBackendIDs, onnxGetBackendCompatibility,
 * onnxInitBackend, onnxInitGraph,
 * onnxSetGraphIO, onnxInitEvent, onnxRunGraph, onnxSignalEvent,
 * onnxWaitEvent, the outputs checked, every release — with call N of one
 * kind failed, for N = 1, 2, ... until a path meets no fault. Each N must:
 *   - fail with a documented status (alloc: NO_SYSTEM_MEMORY; opencl:
 *     NO_DEVICE_MEMORY, NO_DEVICE_RESOURCES, NO_SYSTEM_MEMORY or
 *     INTERNAL_ERROR; a failed run: onnxWaitEvent INTERNAL_ERROR with that
 *     status from kilnGetEventStatus) and a message saying what failed
 *     (alloc: "memory"; opencl: the CL error's name, CLBlast's status or,
 *     for a build, the driver's build log), or absorb the fault and give
 *     the right outputs;
 *   - release everything it made (every release SUCCESS) and leak nothing:
 *     kiln's live heap blocks and OpenCL objects (counted by the fault
 *     build) back at their baseline; LeakSanitizer at exit in ASan builds;
 *   - leave the plugin working: the next clean path gives the right outputs.
 *
 *   fault_sweep LIB --backend SUBSTR [--kind alloc|opencl] [--persistent]
 *               [--fallback] [--max N] [--stride K] [--verify-every K] MODEL...
 *
 * MODEL is a directory with model.onnx and test_data_set_0/, or
 * FILE.onnx=DATADIR. --fallback (opencl, KILN_DEVICE=auto): device faults
 * while a graph is compiled must be absorbed (the graph runs on the host;
 * only host memory exhaustion may fail onnxInitGraph); --stride
 * tests every K-th N (the count of fault points is still exact). Prints
 * per model the fault points exercised; exits 1 on any violation, 77 when
 * no backend matches (the reason printed). --fresh: each N in a new process
 * (forked before the plugin is loaded), so that what a process does once —
 * OpenCL contexts and queues, CLBlast's warm-up, the engine tables — is
 * failed too; the child also checks that a second path works. */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/kiln/kiln_ext.h"
#include "ir/onnx_import.h"
#include "plugin/fault.h"
#include "tests/testutil.h"

static struct onnxifi_library lib;
static onnxGetExtensionFunctionAddressFunction get_ext;
static kilnGetLastErrorMessageFunction last_error;
static kilnGetEventStatusFunction event_status;
static kilnFaultArmFunction f_arm;
static kilnFaultCallsFunction f_calls;
static kilnFaultHitsFunction f_hits;
static kilnFaultPointFunction f_point;
static kilnFaultLiveFunction f_live;

static const char *backend_sub;
static int kind = KILN_FAULT_ALLOC, persistent, fallback, fresh, failures;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL  ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  failures++;
}

/* ---- models ---- */

typedef struct model {
  char name[256];
  void *bytes;
  size_t size;
  int nin, nout;
  char **in_names, **out_names;
  kiln_tensor *in, *exp;
  kiln_dtype *out_dtype;
} model;

static int load_tensor(const char *dir, const char *kind_, int k, kiln_tensor *t) {
  char path[1200];
  snprintf(path, sizeof path, "%s/test_data_set_0/%s_%d.pb", dir, kind_, k);
  size_t n;
  void *b = tu_read_file(path, &n);
  if (!b) return 0;
  kiln_status s = kiln_tensor_parse(b, n, t, NULL);
  free(b);
  return !s;
}

static int model_load(model *m, const char *spec) {
  char file[1100], dir[1100];
  const char *eq = strchr(spec, '=');
  memset(m, 0, sizeof *m);
  if (eq) {
    snprintf(file, sizeof file, "%.*s", (int)(eq - spec), spec);
    snprintf(dir, sizeof dir, "%s", eq + 1);
  } else {
    snprintf(file, sizeof file, "%s/model.onnx", spec);
    snprintf(dir, sizeof dir, "%s", spec);
  }
  const char *base = strrchr(dir, '/');
  snprintf(m->name, sizeof m->name, "%.200s", base ? base + 1 : dir);
  m->bytes = tu_read_file(file, &m->size);
  kiln_graph *g = NULL;
  if (!m->bytes || kiln_onnx_import(m->bytes, m->size, &g)) {
    printf("fault_sweep: cannot load %s: %s\n", file, kiln_last_error());
    return 0;
  }
  m->in_names = calloc((size_t)g->n_inputs + 1, sizeof *m->in_names);
  m->in = calloc((size_t)g->n_inputs + 1, sizeof *m->in);
  m->out_names = calloc((size_t)g->n_outputs + 1, sizeof *m->out_names);
  m->exp = calloc((size_t)g->n_outputs + 1, sizeof *m->exp);
  m->out_dtype = calloc((size_t)g->n_outputs + 1, sizeof *m->out_dtype);
  int ok = 1;
  for (int i = 0; i < g->n_inputs && ok; i++) {
    const kiln_value *v = &g->values[g->inputs[i]];
    if (v->init) continue;
    m->in_names[m->nin] = strdup(v->name);
    ok = load_tensor(dir, "input", m->nin, &m->in[m->nin]);
    if (ok) tu_fix_dtype(&m->in[m->nin], v->type.dtype);
    m->nin++;
  }
  for (int o = 0; o < g->n_outputs && ok; o++) {
    const kiln_value *v = &g->values[g->outputs[o]];
    m->out_names[o] = strdup(v->name);
    ok = load_tensor(dir, "output", o, &m->exp[o]);
    if (ok) tu_fix_dtype(&m->exp[o], v->type.dtype);
    m->out_dtype[o] = v->type.dtype;
    m->nout++;
  }
  kiln_graph_free(g);
  if (!ok) printf("fault_sweep: cannot read the test data of %s\n", dir);
  return ok;
}

static void model_free(model *m) {
  for (int i = 0; i < m->nin; i++) {
    free(m->in_names[i]);
    kiln_tensor_release(&m->in[i]);
  }
  for (int o = 0; o < m->nout; o++) {
    free(m->out_names[o]);
    kiln_tensor_release(&m->exp[o]);
  }
  free(m->in_names);
  free(m->out_names);
  free(m->in);
  free(m->exp);
  free(m->out_dtype);
  free(m->bytes);
}

/* ---- one host path ---- */

typedef struct outcome {
  const char *step; /* the failing call, NULL when the path succeeded */
  onnxStatus st;    /* its status (a run: the run's status) */
  char msg[1024];
  int outputs_ok;   /* the path succeeded and the outputs match */
  int release_bad;  /* a release returned an error */
  char bad[256];
} outcome;

static const char *last_msg(void) {
  const char *m = NULL;
  if (last_error && !last_error(&m) && m) return m;
  return "";
}

static void failed(outcome *o, const char *step, onnxStatus st, const char *msg) {
  o->step = step;
  o->st = st;
  snprintf(o->msg, sizeof o->msg, "%s", msg ? msg : "");
}

static void released(outcome *o, const char *what, onnxStatus st) {
  if (!st) return;
  o->release_bad = 1;
  snprintf(o->bad, sizeof o->bad, "%s returned 0x%x", what, (unsigned)st);
}

static void run_path(const model *m, outcome *o) {
  memset(o, 0, sizeof *o);
  onnxBackendID ids[16];
  size_t nb = 16;
  onnxBackend be = NULL;
  onnxGraph graph = NULL;
  onnxEvent in_ev = NULL;
  onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  kiln_tensor *got = calloc((size_t)m->nout + 1, sizeof *got);
  onnxTensorDescriptorV1 *din = calloc((size_t)m->nin + 1, sizeof *din);
  onnxTensorDescriptorV1 *dout = calloc((size_t)m->nout + 1, sizeof *dout);
  uint64_t(*shp)[KILN_MAX_RANK] = calloc((size_t)(m->nin + m->nout) + 1, sizeof *shp);
  int have_ids = 0;
  onnxStatus st = lib.onnxGetBackendIDs(ids, &nb);
  if (st) {
    failed(o, "onnxGetBackendIDs", st, last_msg());
    goto release;
  }
  have_ids = 1;
  size_t pick = nb;
  for (size_t b = 0; b < nb && pick == nb; b++) {
    char name[128] = "";
    size_t sz = sizeof name;
    if (!lib.onnxGetBackendInfo(ids[b], ONNXIFI_BACKEND_NAME, name, &sz) && strstr(name, backend_sub)) pick = b;
  }
  if (pick == nb) {
    failed(o, "no backend", ONNXIFI_STATUS_BACKEND_UNAVAILABLE, "no backend name contains the --backend text");
    goto release;
  }
  onnxExtensionFunctionPointer fp;
  if (!last_error && !get_ext(ids[pick], "kilnGetLastErrorMessage", &fp))
    last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
  if (!event_status && !get_ext(ids[pick], "kilnGetEventStatus", &fp))
    event_status = (kilnGetEventStatusFunction)(void (*)(void))fp;
  if ((st = lib.onnxGetBackendCompatibility(ids[pick], m->size, m->bytes))) {
    failed(o, "onnxGetBackendCompatibility", st, last_msg());
    goto release;
  }
  if ((st = lib.onnxInitBackend(ids[pick], NULL, &be))) {
    be = NULL;
    failed(o, "onnxInitBackend", st, last_msg());
    goto release;
  }
  if ((st = lib.onnxInitGraph(be, NULL, m->size, m->bytes, 0, NULL, &graph))) {
    graph = NULL;
    failed(o, "onnxInitGraph", st, last_msg());
    goto release;
  }
  for (int i = 0; i < m->nin; i++) {
    const kiln_tensor *t = &m->in[i];
    for (int k = 0; k < t->rank; k++) shp[i][k] = (uint64_t)t->dims[k];
    din[i] = (onnxTensorDescriptorV1){ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, m->in_names[i], (onnxEnum)t->dtype,
                                      ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)t->rank, shp[i], (onnxPointer)t->data};
  }
  for (int k = 0; k < m->nout; k++) {
    const kiln_tensor *t = &m->exp[k];
    uint64_t *s = shp[m->nin + k];
    if (kiln_tensor_alloc(&got[k], t->dtype, t->rank, t->dims)) {
      failed(o, "test allocation", ONNXIFI_STATUS_INTERNAL_ERROR, "the test could not allocate an output");
      goto release;
    }
    for (int d = 0; d < t->rank; d++) s[d] = (uint64_t)t->dims[d];
    dout[k] = (onnxTensorDescriptorV1){ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, m->out_names[k], (onnxEnum)t->dtype,
                                       ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)t->rank, s, (onnxPointer)got[k].data};
  }
  if ((st = lib.onnxSetGraphIO(graph, (uint32_t)m->nin, din, (uint32_t)m->nout, dout))) {
    failed(o, "onnxSetGraphIO", st, last_msg());
    goto release;
  }
  if ((st = lib.onnxInitEvent(be, &in_ev))) {
    in_ev = NULL;
    failed(o, "onnxInitEvent", st, last_msg());
    goto release;
  }
  fin.event = in_ev;
  if ((st = lib.onnxRunGraph(graph, &fin, &fout))) {
    fout.event = NULL;
    failed(o, "onnxRunGraph", st, last_msg());
    goto release;
  }
  if ((st = lib.onnxSignalEvent(in_ev))) {
    failed(o, "onnxSignalEvent", st, last_msg());
    if (lib.onnxWaitEvent(fout.event)) o->release_bad = 1;
    goto release;
  }
  if ((st = lib.onnxWaitEvent(fout.event))) {
    onnxStatus rs = 0;
    const char *msg = NULL;
    if (st == ONNXIFI_STATUS_INTERNAL_ERROR && event_status && !event_status(fout.event, &rs, &msg) && rs)
      failed(o, "run (kilnGetEventStatus)", rs, msg);
    else
      failed(o, "onnxWaitEvent", st, last_msg());
    goto release;
  }
  o->outputs_ok = 1;
  for (int k = 0; k < m->nout; k++) {
    double rtol, atol;
    char msg[512];
    tu_tolerance(m->name, m->exp[k].dtype, &rtol, &atol);
    if (!tu_compare(&got[k], &m->exp[k], rtol, atol, msg, sizeof msg, NULL, NULL)) {
      o->outputs_ok = 0;
      snprintf(o->msg, sizeof o->msg, "output %d: %s", k, msg);
    }
  }
release:
  if (fout.event) released(o, "onnxReleaseEvent(output)", lib.onnxReleaseEvent(fout.event));
  if (in_ev) released(o, "onnxReleaseEvent(input)", lib.onnxReleaseEvent(in_ev));
  if (graph) released(o, "onnxReleaseGraph", lib.onnxReleaseGraph(graph));
  if (be) released(o, "onnxReleaseBackend", lib.onnxReleaseBackend(be));
  for (size_t b = 0; have_ids && b < nb; b++) released(o, "onnxReleaseBackendID", lib.onnxReleaseBackendID(ids[b]));
  for (int k = 0; k < m->nout; k++) kiln_tensor_release(&got[k]);
  free(got);
  free(din);
  free(dout);
  free(shp);
}

/* ---- checks ---- */

static int status_allowed(onnxStatus st) {
  if (kind == KILN_FAULT_ALLOC) return st == ONNXIFI_STATUS_NO_SYSTEM_MEMORY;
  return st == ONNXIFI_STATUS_NO_DEVICE_MEMORY || st == ONNXIFI_STATUS_NO_DEVICE_RESOURCES ||
         st == ONNXIFI_STATUS_NO_SYSTEM_MEMORY || st == ONNXIFI_STATUS_INTERNAL_ERROR;
}

/* The message must say what failed. */
static int message_ok(const char *msg, const char *point) {
  if (!msg || !*msg) return 0;
  if (kind == KILN_FAULT_ALLOC) return strstr(msg, "memory") || strstr(msg, "allocat");
  if (!strcmp(point, "clBuildProgram")) return strstr(msg, "injected build failure") != NULL;
  if (!strncmp(point, "CLBlast", 7)) return strstr(msg, "CLBlast") != NULL;
  return strstr(msg, "CL_") != NULL;
}

static long live[KILN_FAULT_LIVES];
static const char *const live_names[KILN_FAULT_LIVES] = {"heap blocks", "cl_mem", "cl_program",
                                                         "cl_kernel",   "cl_event", "contexts/queues"};

static void snapshot(void) {
  for (int w = 0; w < KILN_FAULT_LIVES; w++) live[w] = f_live(w);
}

static int leaks_ok(const char *where) {
  int ok = 1;
  for (int w = 0; w < KILN_FAULT_LIVES; w++) {
    long now = f_live(w);
    if (now != live[w]) {
      violation("%s: %ld %s live after every release, %ld before", where, now, live_names[w], live[w]);
      live[w] = now; /* report each leak once */
      ok = 0;
    }
  }
  return ok;
}

/* Tallies of what the failing calls returned, per fault point name. */
typedef struct tally {
  int n;
  struct {
    char point[48];
    int count;
  } row[64];
} tally;

static void tally_add(tally *t, const char *point) {
  int i;
  for (i = 0; i < t->n; i++)
    if (!strcmp(t->row[i].point, point)) break;
  if (i == t->n) {
    if (t->n == 64) return;
    snprintf(t->row[t->n++].point, sizeof t->row[0].point, "%s", point);
  }
  t->row[i].count++;
}

/* Sweeps one model; returns the number of fault points. */
static long only_n;

/* Judges the path that ran with fault n armed; returns 1 when it is right.
 * *kind_out: 0 failed cleanly, 1 absorbed. */
static int judge(const model *m, const outcome *o, long n, long total, long hits, const char *point,
                 int *kind_out, char *where, size_t wn) {
  snprintf(where, wn, "%s, fault %ld/%ld (%s%s)", m->name, n, total, point, persistent ? ", persistent" : "");
  int ok = 1;
  *kind_out = -1;
  if (!hits) {
    violation("%s: no call failed although the clean path made %ld calls (a path that varies)", where, total);
    ok = 0;
  } else if (o->step) {
    *kind_out = 0;
    if (!status_allowed(o->st)) {
      violation("%s: %s gave status 0x%x: %s", where, o->step, (unsigned)o->st, o->msg);
      ok = 0;
    } else if (!message_ok(o->msg, point) && last_error) { /* (a fresh process's first call: no reader yet) */
      violation("%s: %s gave status 0x%x with a message that does not say what failed: \"%s\"", where, o->step,
                (unsigned)o->st, o->msg);
      ok = 0;
    } else if (fallback && kind == KILN_FAULT_OPENCL && !strcmp(o->step, "onnxInitGraph") &&
               o->st != ONNXIFI_STATUS_NO_SYSTEM_MEMORY) { /* host memory: no fallback helps */
      violation("%s: onnxInitGraph failed under KILN_DEVICE=auto (no host fallback): %s", where, o->msg);
      ok = 0;
    }
  } else if (!o->outputs_ok) {
    violation("%s: the path succeeded with wrong outputs: %s", where, o->msg);
    ok = 0;
  } else {
    *kind_out = 1;
  }
  if (o->release_bad) {
    violation("%s: %s", where, o->bad);
    ok = 0;
  }
  if (o->step && getenv("FAULT_SWEEP_VERBOSE"))
    printf("  %ld %s -> %s 0x%x: %s\n", n, point, o->step, (unsigned)o->st, o->msg);
  return ok;
}

static int next_path_ok(const model *m, const char *where) {
  outcome c;
  run_path(m, &c);
  if (c.step || !c.outputs_ok || c.release_bad) {
    violation("%s: the next clean path fails: %s: status 0x%x: %s %s", where, c.step ? c.step : "outputs",
              (unsigned)c.st, c.msg, c.bad);
    return 0;
  }
  return 1;
}

static void report(const model *m, long total, long tested, long clean_fail, long absorbed, const tally *points,
                   const tally *absorbed_at, const char *how) {
  printf("%s on %s: %ld %s fault points (calls on the path%s), %ld tested%s: %ld failed cleanly, %ld absorbed\n",
         m->name, backend_sub, total, kind == KILN_FAULT_ALLOC ? "allocation" : "OpenCL", how, tested,
         persistent ? " (persistent)" : "", clean_fail, absorbed);
  if (points->n) {
    printf("  failed at:");
    for (int i = 0; i < points->n; i++) printf(" %s %d", points->row[i].point, points->row[i].count);
    printf("\n");
  }
  if (absorbed_at->n) {
    printf("  absorbed at:");
    for (int i = 0; i < absorbed_at->n; i++) printf(" %s %d", absorbed_at->row[i].point, absorbed_at->row[i].count);
    printf("\n");
  }
  fflush(stdout);
}

static long sweep(const model *m, long max, long stride, long verify_every) {
  outcome o;
  /* a clean path first: once-per-process work done, the baseline taken,
     and the number of calls of this kind counted */
  run_path(m, &o);
  if (o.step || !o.outputs_ok || o.release_bad) {
    violation("%s: the clean path fails: %s: status 0x%x: %s %s", m->name, o.step ? o.step : "outputs",
              (unsigned)o.st, o.msg, o.bad);
    return 0;
  }
  snapshot();
  f_arm(kind, 1L << 60, 0);
  run_path(m, &o);
  long total = f_calls(kind);
  f_arm(kind, 0, 0);
  if (o.step || !o.outputs_ok) {
    violation("%s: the second clean path fails: %s: %s", m->name, o.step ? o.step : "outputs", o.msg);
    return 0;
  }
  leaks_ok(m->name);
  long tested = 0, clean_fail = 0, absorbed = 0, bad = 0;
  tally points = {0}, absorbed_at = {0};
  long last = max > 0 && max < total ? max : total;
  for (long n = only_n ? only_n : 1; n <= last; n += stride) {
    f_arm(kind, n, persistent);
    run_path(m, &o);
    long hits = f_hits(kind);
    char point[48], where[400];
    snprintf(point, sizeof point, "%s", f_point(kind));
    f_arm(kind, 0, 0);
    tested++;
    int how;
    int ok = judge(m, &o, n, total, hits, point, &how, where, sizeof where);
    if (how == 0) clean_fail++, tally_add(&points, point);
    if (how == 1) absorbed++, tally_add(&absorbed_at, point);
    if (!leaks_ok(where)) ok = 0;
    if (verify_every > 0 && (tested % verify_every == 0 || !ok)) {
      if (!next_path_ok(m, where)) ok = 0;
      if (!leaks_ok(where)) ok = 0;
    }
    if (only_n) break;
    if (!ok && ++bad >= 20) {
      printf("fault_sweep: %s: 20 violations, stopping this model\n", m->name);
      break;
    }
  }
  report(m, total, tested, clean_fail, absorbed, &points, &absorbed_at, "");
  return total;
}

static int load_plugin(const char *path);

/* --fresh: each N in a new process (fork before the plugin is loaded), so
 * that what a process does once — contexts, queues, CLBlast's warm-up, the
 * engine tables — fails too. The child checks its path and that a second
 * path in the same process works; the parent counts and sees crashes. */
static long sweep_fresh(const char *path, const model *m, long max) {
  int fd[2];
  if (pipe(fd)) return 0;
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) { /* count the calls of a fresh process's first path */
    close(fd[0]);
    long total = -1;
    if (!load_plugin(path)) {
      outcome o;
      f_arm(kind, 1L << 60, 0);
      run_path(m, &o);
      total = o.step || !o.outputs_ok ? -1 : f_calls(kind);
      f_arm(kind, 0, 0);
    }
    if (write(fd[1], &total, sizeof total) != (ssize_t)sizeof total) _exit(2);
    _exit(0);
  }
  close(fd[1]);
  long total = -1;
  if (read(fd[0], &total, sizeof total) != (ssize_t)sizeof total) total = -1;
  close(fd[0]);
  waitpid(pid, NULL, 0);
  if (total < 0) {
    violation("%s: the clean path of a fresh process fails", m->name);
    return 0;
  }
  long last = max > 0 && max < total ? max : total, tested = 0, clean_fail = 0, absorbed = 0;
  tally points = {0}, absorbed_at = {0};
  for (long n = 1; n <= last; n++) {
    int res[2];
    if (pipe(res)) break;
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
      close(res[0]);
      int how = -1, ok = 0;
      char point[48] = "", where[400];
      if (!load_plugin(path)) {
        outcome o;
        f_arm(kind, n, persistent);
        run_path(m, &o);
        long hits = f_hits(kind);
        snprintf(point, sizeof point, "%s", f_point(kind));
        f_arm(kind, 0, 0);
        ok = judge(m, &o, n, total, hits, point, &how, where, sizeof where);
        if (!next_path_ok(m, where)) ok = 0;
      }
      char buf[64];
      snprintf(buf, sizeof buf, "%d %d %.47s", ok, how, point);
      if (write(res[1], buf, strlen(buf) + 1) < 0) _exit(2);
      fflush(stdout);
      _exit(ok ? 0 : 1);
    }
    close(res[1]);
    char buf[64] = "";
    ssize_t k = read(res[0], buf, sizeof buf - 1);
    close(res[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    tested++;
    int ok = 0, how = -1;
    char point[48] = "";
    if (k > 0) sscanf(buf, "%d %d %47s", &ok, &how, point);
    if (WIFSIGNALED(st)) violation("%s, fault %ld/%ld (fresh process): killed by signal %d", m->name, n, total,
                                   WTERMSIG(st));
    else if (!WIFEXITED(st) || WEXITSTATUS(st)) failures++; /* the child printed it */
    if (how == 0) clean_fail++, tally_add(&points, point);
    if (how == 1) absorbed++, tally_add(&absorbed_at, point);
  }
  report(m, total, tested, clean_fail, absorbed, &points, &absorbed_at, " of a fresh process");
  return total;
}

/* Loads the plugin and its kilnFault* functions; with fetch_ext, also the
 * extension functions (which makes the plugin enumerate its backends: a
 * fresh-process sweep leaves that to the armed path, run_path fetches them).
 * 0, or the exit code. */
static int load_plugin_ext(const char *path, int fetch_ext) {
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, path, &lib)) {
    fprintf(stderr, "fault_sweep: cannot load %s\n", path);
    return 2;
  }
  get_ext = (onnxGetExtensionFunctionAddressFunction)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  f_arm = (kilnFaultArmFunction)dlsym(lib.handle, "kilnFaultArm");
  f_calls = (kilnFaultCallsFunction)dlsym(lib.handle, "kilnFaultCalls");
  f_hits = (kilnFaultHitsFunction)dlsym(lib.handle, "kilnFaultHits");
  f_point = (kilnFaultPointFunction)dlsym(lib.handle, "kilnFaultPoint");
  f_live = (kilnFaultLiveFunction)dlsym(lib.handle, "kilnFaultLive");
  if (!get_ext || !f_arm || !f_calls || !f_hits || !f_point || !f_live) {
    fprintf(stderr, "fault_sweep: %s is not the fault-injection build (no kilnFault* functions)\n", path);
    return 2;
  }
  if (!fetch_ext) return 0;
  /* the extension functions, from a backend matching --backend */
  onnxBackendID ids[16];
  size_t nb = 16;
  size_t pick = 16;
  if (!lib.onnxGetBackendIDs(ids, &nb)) {
    for (size_t b = 0; b < nb; b++) {
      char name[128] = "";
      size_t sz = sizeof name;
      if (pick == 16 && !lib.onnxGetBackendInfo(ids[b], ONNXIFI_BACKEND_NAME, name, &sz) &&
          strstr(name, backend_sub))
        pick = b;
    }
    onnxExtensionFunctionPointer fp;
    if (pick < nb && !get_ext(ids[pick], "kilnGetLastErrorMessage", &fp))
      last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
    if (pick < nb && !get_ext(ids[pick], "kilnGetEventStatus", &fp))
      event_status = (kilnGetEventStatusFunction)(void (*)(void))fp;
    for (size_t b = 0; b < nb; b++) lib.onnxReleaseBackendID(ids[b]);
  } else {
    nb = 0;
  }
  if (pick >= nb) {
    printf("fault_sweep: skipped: no backend named like '%s' (KILN_DEVICE=%s, OCL_ICD_VENDORS=%s)\n", backend_sub,
           getenv("KILN_DEVICE") ? getenv("KILN_DEVICE") : "(unset)",
           getenv("OCL_ICD_VENDORS") ? getenv("OCL_ICD_VENDORS") : "(unset)");
    onnxifi_unload(&lib);
    return 77;
  }
  if (!last_error || !event_status) {
    fprintf(stderr, "fault_sweep: the plugin lacks kilnGetLastErrorMessage / kilnGetEventStatus\n");
    return 2;
  }
  return 0;
}

static int load_plugin(const char *path) { return load_plugin_ext(path, 0); }

int main(int argc, char **argv) {
  const char *path = NULL;
  const char *models[32];
  int nm = 0;
  long max = 0, stride = 1, verify_every = 1;
  const char *only = getenv("FAULT_SWEEP_ONLY"); /* debugging: test this N alone */
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--backend") && i + 1 < argc) backend_sub = argv[++i];
    else if (!strcmp(argv[i], "--kind") && i + 1 < argc) {
      const char *k = argv[++i];
      if (!strcmp(k, "alloc")) kind = KILN_FAULT_ALLOC;
      else if (!strcmp(k, "opencl")) kind = KILN_FAULT_OPENCL;
      else {
        fprintf(stderr, "fault_sweep: --kind alloc|opencl\n");
        return 2;
      }
    } else if (!strcmp(argv[i], "--persistent")) persistent = 1;
    else if (!strcmp(argv[i], "--fallback")) fallback = 1;
    else if (!strcmp(argv[i], "--fresh")) fresh = 1;
    else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = atol(argv[++i]);
    else if (!strcmp(argv[i], "--stride") && i + 1 < argc) stride = atol(argv[++i]);
    else if (!strcmp(argv[i], "--verify-every") && i + 1 < argc) verify_every = atol(argv[++i]);
    else if (!path) path = argv[i];
    else if (nm < 32) models[nm++] = argv[i];
  }
  if (only) only_n = atol(only);
  if (!path || !backend_sub || !nm || stride < 1) {
    fprintf(stderr, "usage: fault_sweep LIB --backend SUBSTR [--kind alloc|opencl] [--persistent] [--fallback] "
                    "[--fresh] [--max N] [--stride K] [--verify-every K] MODEL...\n");
    return 2;
  }
  int rc = fresh ? 0 : load_plugin_ext(path, 1);
  if (rc) return rc;
  long points = 0;
  for (int i = 0; i < nm; i++) {
    model m;
    if (!model_load(&m, models[i])) {
      failures++;
      model_free(&m);
      continue;
    }
    points += fresh ? sweep_fresh(path, &m, max) : sweep(&m, max, stride, verify_every);
    model_free(&m);
  }
  if (!fresh) onnxifi_unload(&lib);
  printf("fault_sweep: %d model%s, %ld fault points, %d violation%s\n", nm, nm == 1 ? "" : "s", points, failures,
         failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
