/* tools/observe_bench: the overhead of observers (ir/observe.h) — one
 * model, one graph handle, runs alternating in blocks between observing
 * (min/max only: kilnStartObserving with no histogram, resumed between
 * blocks so the same observer goes on) and not observing, ABBA order so
 * that a drifting machine load hits both alike. Prints the median run time
 * of each mode and their ratio. Inputs: random floats (seed 1) of the
 * declared shapes; the output shapes from one in-process reference run.
 *
 *   observe-bench PATH/libonnxifi-kiln.so MODEL.onnx [ROUNDS [RUNS]]
 *
 * KILN_DEVICE picks the backend, as for any host. */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/kiln/kiln_ext.h"
#include "ir/alloc.h"
#include "ir/onnx_import.h"
#include "reference/exec.h"
#include "tests/testutil.h"

static struct onnxifi_library lib;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* CPU time of the whole process (every thread: the driver's and BLAS's
 * too): less sensitive than wall time to other processes on a loaded
 * machine. */
static double cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: observe-bench PATH/libonnxifi-kiln.so MODEL.onnx [ROUNDS [RUNS]]\n");
    return 2;
  }
  int rounds = argc > 3 ? atoi(argv[3]) : 6, runs = argc > 4 ? atoi(argv[4]) : 5;
  if (rounds < 1 || runs < 1) return 2;
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, argv[1], &lib)) {
    fprintf(stderr, "observe-bench: cannot load %s\n", argv[1]);
    return 2;
  }
  onnxGetExtensionFunctionAddressFunction get_ext =
      (onnxGetExtensionFunctionAddressFunction)(uintptr_t)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  onnxBackendID ids[8];
  size_t nid = 8;
  onnxBackend backend;
  if (!get_ext || lib.onnxGetBackendIDs(ids, &nid) || !nid || lib.onnxInitBackend(ids[0], NULL, &backend)) {
    fprintf(stderr, "observe-bench: no backend\n");
    return 2;
  }
  onnxExtensionFunctionPointer fp;
  kilnStartObservingFunction start_obs = NULL;
  kilnStopObservingFunction stop_obs = NULL;
  if (!get_ext(ids[0], "kilnStartObserving", &fp)) start_obs = (kilnStartObservingFunction)(uintptr_t)fp;
  if (!get_ext(ids[0], "kilnStopObserving", &fp)) stop_obs = (kilnStopObservingFunction)(uintptr_t)fp;
  char name[64];
  size_t sz = sizeof name;
  if (lib.onnxGetBackendInfo(ids[0], ONNXIFI_BACKEND_NAME, name, &sz)) strcpy(name, "?");
  size_t size;
  void *bytes = tu_read_file(argv[2], &size);
  kiln_graph *g = NULL;
  if (!bytes || kiln_onnx_import(bytes, size, &g) || !start_obs || !stop_obs) {
    fprintf(stderr, "observe-bench: cannot read %s\n", argv[2]);
    return 2;
  }
  /* inputs: random floats of the declared shapes; outputs: shapes from a reference run */
  int nin = 0, in_val[16];
  kiln_tensor ins[16] = {{0}}, outs[16] = {{0}};
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  uint64_t seed = 1;
  for (int i = 0; i < g->n_inputs && nin < 16; i++) {
    const kiln_value *v = &g->values[g->inputs[i]];
    if (v->init) continue;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < v->type.rank; d++) dims[d] = v->type.dims[d].value > 0 ? v->type.dims[d].value : 1;
    kiln_tensor_alloc(&ins[nin], v->type.dtype, v->type.rank, dims);
    for (int64_t e = 0; e < ins[nin].numel; e++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      kiln_set_f(&ins[nin], e, (double)(seed >> 40) / (double)(1ull << 24) * 2 - 1);
    }
    bound[g->inputs[i]] = &ins[nin];
    in_val[nin++] = g->inputs[i];
  }
  kiln_tensor ref[16] = {{0}};
  if (g->n_outputs > 16 || kiln_ref_run(g, bound, ref)) {
    fprintf(stderr, "observe-bench: reference run failed: %s\n", kiln_last_error());
    return 2;
  }
  for (int o = 0; o < g->n_outputs; o++) kiln_tensor_alloc(&outs[o], ref[o].dtype, ref[o].rank, ref[o].dims);
  onnxTensorDescriptorV1 din[16], dout[16];
  uint64_t shp[32][KILN_MAX_RANK];
  for (int k = 0; k < nin + g->n_outputs; k++) {
    kiln_tensor *t = k < nin ? &ins[k] : &outs[k - nin];
    int v = k < nin ? in_val[k] : g->outputs[k - nin];
    for (int d = 0; d < t->rank; d++) shp[k][d] = (uint64_t)t->dims[d];
    onnxTensorDescriptorV1 desc = {ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, g->values[v].name, (onnxEnum)t->dtype,
                                   ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)t->rank, shp[k], (onnxPointer)(uintptr_t)t->data};
    if (k < nin) din[k] = desc;
    else dout[k - nin] = desc;
  }
  onnxGraph graph;
  if (lib.onnxInitGraph(backend, NULL, size, bytes, 0, NULL, &graph) ||
      lib.onnxSetGraphIO(graph, (uint32_t)nin, din, (uint32_t)g->n_outputs, dout)) {
    fprintf(stderr, "observe-bench: cannot init the graph\n");
    return 2;
  }
  double *t[2], *c[2];
  for (int m = 0; m < 2; m++) {
    t[m] = calloc((size_t)(rounds * runs * 2), sizeof(double));
    c[m] = calloc((size_t)(rounds * runs * 2), sizeof(double));
  }
  int nt[2] = {0, 0};
  kilnObserverOptions first = {sizeof first, 0, 0, 0, NULL, 0}, resume = {sizeof resume, KILN_OBSERVE_RESUME, 0, 0,
                                                                           NULL, 0};
  bool started = false;
  /* warm-up: both modes (the observing plan is compiled at its first run) */
  for (int r = -1; r < rounds; r++)
    for (int half = 0; half < 2; half++) {
      int mode = ((r < 0 ? 0 : r) + half) % 2; /* ABBA: round r starts with mode r % 2 */
      if (mode) {
        if (start_obs(graph, started ? &resume : &first)) return 2;
        started = true;
      } else if (started) {
        stop_obs(graph);
      }
      for (int k = 0; k < (r < 0 ? 2 : runs); k++) {
        onnxEvent in_ev;
        if (lib.onnxInitEvent(backend, &in_ev)) return 2;
        onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {in_ev}};
        onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
        double t0 = now_ms(), c0 = cpu_ms();
        onnxStatus st = lib.onnxRunGraph(graph, &fin, &fout);
        if (!st) st = lib.onnxSignalEvent(in_ev);
        if (!st) st = lib.onnxWaitEvent(fout.event);
        double ms = now_ms() - t0, cms = cpu_ms() - c0;
        if (fout.event) lib.onnxReleaseEvent(fout.event);
        lib.onnxReleaseEvent(in_ev);
        if (st) {
          fprintf(stderr, "observe-bench: run failed: %d\n", (int)st);
          return 1;
        }
        if (r >= 0) {
          c[mode][nt[mode]] = cms;
          t[mode][nt[mode]++] = ms;
        }
      }
    }
  if (started) stop_obs(graph);
  double off = median(t[0], nt[0]), on = median(t[1], nt[1]);
  double coff = median(c[0], nt[0]), con = median(c[1], nt[1]);
  printf("observe-bench: %s on %s (median of %d runs each, %d ABBA rounds): wall off %.3f ms, on %.3f ms, on/off "
         "%.3f; process CPU time off %.3f ms, on %.3f ms, on/off %.3f\n",
         argv[2], name, nt[0], rounds, off, on, on / off, coff, con, con / coff);
  lib.onnxReleaseGraph(graph);
  lib.onnxReleaseBackend(backend);
  for (size_t i = 0; i < nid; i++) lib.onnxReleaseBackendID(ids[i]);
  for (int i = 0; i < 16; i++) {
    kiln_tensor_release(&ins[i]);
    kiln_tensor_release(&outs[i]);
    kiln_tensor_release(&ref[i]);
  }
  kiln_free(bound);
  for (int m = 0; m < 2; m++) {
    free(t[m]);
    free(c[m]);
  }
  free(bytes);
  kiln_graph_free(g);
  return 0;
}
