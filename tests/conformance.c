/* tests/conformance: runs every ONNX node test (Debian's libonnx-testdata)
 * through the real ONNXIFI path — the plugin loaded with dlopen by Debian's
 * onnxifi_loader — on every backend the plugin offers (KILN_DEVICE picks).
 *
 *   conformance --lib PATH [-v] [-f SUBSTR]... [ROOT]
 *
 * For each case: onnxGetBackendCompatibility decides supported or not (an
 * unsupported case is counted "skipped" with the plugin's reason, never as
 * passed); supported cases go through onnxInitGraph, onnxSetGraphIO,
 * onnxRunGraph (the input event is signalled after RunGraph returns, as the
 * ONNX test driver does) and onnxWaitEvent, and each output is compared
 * with the expected .pb. Prints a per-op table per backend and the totals
 * line; exits 1 if any supported case fails. */
#include <onnx/onnxifi_loader.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/kiln/kiln_ext.h"
#include "tests/casefile.h"
#include "tests/testutil.h"

static struct onnxifi_library lib;
static kilnGetLastErrorMessageFunction last_error;
static kilnGetEventStatusFunction event_status;
static int verbose;

static const char *msg(void) {
  const char *m = "";
  if (last_error && last_error(&m) == ONNXIFI_STATUS_SUCCESS && m) return m;
  return "(no message)";
}

/* Returns 0 pass, 1 fail, 2 unsupported. */
static int run_case(onnxBackendID id, onnxBackend be, tu_case *c, const char *bname) {
  onnxStatus st = lib.onnxGetBackendCompatibility(id, c->model_size, c->model);
  if (st != ONNXIFI_STATUS_SUCCESS && st != ONNXIFI_STATUS_FALLBACK) {
    if (verbose) printf("[%s] SKIP  %s: status 0x%x: %s\n", bname, c->name, (unsigned)st, msg());
    return 2;
  }
  if (!c->graph) { /* the plugin accepted what kiln's importer rejects: impossible */
    printf("[%s] FAIL  %s: compatible, but the model does not import\n", bname, c->name);
    return 1;
  }
  const kiln_graph *g = c->graph;
  int result = 0;
  onnxGraph graph = NULL;
  st = lib.onnxInitGraph(be, NULL, c->model_size, c->model, 0, NULL, &graph);
  if (st) {
    printf("[%s] FAIL  %s: onnxInitGraph status 0x%x: %s\n", bname, c->name, (unsigned)st, msg());
    return 1;
  }
  for (int set = 0; !result; set++) {
    char probe[1300];
    snprintf(probe, sizeof probe, "%s/test_data_set_%d", c->dir, set);
    FILE *f = fopen(probe, "r");
    if (!f) break;
    fclose(f);
    int nin = 0, nout = g->n_outputs;
    kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
    kiln_tensor *exp = calloc((size_t)nout + 1, sizeof *exp);
    kiln_tensor *got = calloc((size_t)nout + 1, sizeof *got);
    onnxTensorDescriptorV1 *din = calloc((size_t)g->n_inputs + 1, sizeof *din);
    onnxTensorDescriptorV1 *dout = calloc((size_t)nout + 1, sizeof *dout);
    uint64_t(*shp)[KILN_MAX_RANK] = calloc((size_t)(g->n_inputs + nout) + 1, sizeof *shp);
    const char *why = tu_case_erratum(c->name);
    char baddata[300];
    kiln_status ks = KILN_OK;
    for (int i = 0; i < g->n_inputs && !result && !why; i++) {
      int v = g->inputs[i];
      if (g->values[v].init) continue;
      if (!tu_case_tensor(c, set, "input", nin, &ins[nin], &ks) || ks) {
        printf("[%s] FAIL  %s: cannot read input_%d.pb\n", bname, c->name, nin);
        result = 1;
        break;
      }
      kiln_tensor *t = &ins[nin];
      tu_fix_dtype(t, g->values[v].type.dtype);
      onnxTensorDescriptorV1 *d = &din[nin];
      for (int k = 0; k < t->rank; k++) {
        if (!t->dims[k]) why = "a zero-sized dimension in the test data cannot cross the ONNXIFI ABI";
        shp[nin][k] = (uint64_t)t->dims[k];
      }
      const char *bad = tu_data_disagrees(&g->values[v].type, t);
      if (bad && !why) {
        snprintf(baddata, sizeof baddata, "the test data disagrees with its own model: input '%s' %s",
                 g->values[v].name, bad);
        why = baddata;
      }
      *d = (onnxTensorDescriptorV1){ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, g->values[v].name, (onnxEnum)t->dtype,
                                    ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)t->rank, shp[nin], (onnxPointer)t->data};
      nin++;
    }
    for (int o = 0; o < nout && !result && !why; o++) {
      if (!tu_case_tensor(c, set, "output", o, &exp[o], &ks) || ks) {
        printf("[%s] FAIL  %s: cannot read output_%d.pb\n", bname, c->name, o);
        result = 1;
        break;
      }
      kiln_tensor *t = &exp[o];
      tu_fix_dtype(t, g->values[g->outputs[o]].type.dtype);
      if (kiln_tensor_alloc(&got[o], t->dtype, t->rank, t->dims)) {
        printf("[%s] FAIL  %s: cannot allocate output %d\n", bname, c->name, o);
        result = 1;
        break;
      }
      uint64_t *s = shp[g->n_inputs + o];
      for (int k = 0; k < t->rank; k++) {
        if (!t->dims[k]) why = "a zero-sized dimension in the test data cannot cross the ONNXIFI ABI";
        s[k] = (uint64_t)t->dims[k];
      }
      dout[o] = (onnxTensorDescriptorV1){ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1, g->values[g->outputs[o]].name,
                                         (onnxEnum)t->dtype, ONNXIFI_MEMORY_TYPE_CPU, (uint32_t)t->rank, s,
                                         (onnxPointer)got[o].data};
    }
    if (why && !result) {
      if (verbose) printf("[%s] SKIP  %s: %s\n", bname, c->name, why);
      result = 2;
    }
    if (!result) {
      st = lib.onnxSetGraphIO(graph, (uint32_t)nin, din, (uint32_t)nout, dout);
      if (st) {
        printf("[%s] FAIL  %s: onnxSetGraphIO status 0x%x: %s\n", bname, c->name, (unsigned)st, msg());
        result = 1;
      }
    }
    if (!result) {
      onnxEvent in_ev = NULL;
      onnxMemoryFenceV1 fin = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
      onnxMemoryFenceV1 fout = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
      st = lib.onnxInitEvent(be, &in_ev);
      fin.event = in_ev;
      if (!st) st = lib.onnxRunGraph(graph, &fin, &fout);
      if (!st) st = lib.onnxSignalEvent(in_ev); /* after RunGraph, like the ONNX driver */
      if (!st) st = lib.onnxWaitEvent(fout.event);
      if (st) {
        onnxStatus rs = 0;
        const char *m = NULL;
        if (fout.event && event_status && !event_status(fout.event, &rs, &m) && rs)
          printf("[%s] FAIL  %s: run status 0x%x: %s\n", bname, c->name, (unsigned)rs, m);
        else
          printf("[%s] FAIL  %s: status 0x%x: %s\n", bname, c->name, (unsigned)st, msg());
        result = 1;
      }
      if (fout.event && lib.onnxReleaseEvent(fout.event)) result = 1;
      if (in_ev && lib.onnxReleaseEvent(in_ev)) result = 1;
    }
    for (int o = 0; o < nout && !result; o++) {
      double rtol, atol;
      tu_tolerance(c->name, exp[o].dtype, &rtol, &atol);
      char m[512];
      if (!tu_compare(&got[o], &exp[o], rtol, atol, m, sizeof m, NULL, NULL)) {
        printf("[%s] FAIL  %s: output %d: %s\n", bname, c->name, o, m);
        result = 1;
      }
    }
    for (int i = 0; i < g->n_inputs; i++) kiln_tensor_release(&ins[i]);
    for (int o = 0; o < nout; o++) {
      kiln_tensor_release(&exp[o]);
      kiln_tensor_release(&got[o]);
    }
    free(ins);
    free(exp);
    free(got);
    free(din);
    free(dout);
    free(shp);
  }
  if (lib.onnxReleaseGraph(graph)) {
    printf("[%s] FAIL  %s: onnxReleaseGraph failed\n", bname, c->name);
    result = 1;
  }
  if (result == 0 && verbose) printf("[%s] PASS  %s\n", bname, c->name);
  return result;
}

int main(int argc, char **argv) {
  const char *root = KILN_NODE_TEST_DIR, *path = NULL;
  const char *filters[64];
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "-f") && i + 1 < argc && nf < 64) filters[nf++] = argv[++i];
    else if (!strcmp(argv[i], "--lib") && i + 1 < argc) path = argv[++i];
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: conformance --lib PATH [-v] [-f SUBSTR]... [ROOT]\n");
      return 0;
    } else root = argv[i];
  }
  if (!path) {
    fprintf(stderr, "conformance: --lib PATH is required\n");
    return 2;
  }
  if (!onnxifi_load(ONNXIFI_LOADER_FLAG_VERSION_1_0, path, &lib)) {
    fprintf(stderr, "conformance: cannot load %s\n", path);
    return 2;
  }
  /* Debian's loader is built without ONNXIFI_ENABLE_EXT: fetch it by hand. */
  onnxGetExtensionFunctionAddressFunction get_ext =
      (onnxGetExtensionFunctionAddressFunction)dlsym(lib.handle, "onnxGetExtensionFunctionAddress");
  size_t nb = 0;
  onnxStatus st = lib.onnxGetBackendIDs(NULL, &nb);
  if (st != ONNXIFI_STATUS_FALLBACK || !nb) {
    fprintf(stderr, "conformance: onnxGetBackendIDs gave status 0x%x and %zu backends\n", (unsigned)st, nb);
    onnxifi_unload(&lib);
    /* KILN_DEVICE=opencl... on a machine (or ICD selection) without a usable
       device: skipped (ctest SKIP_RETURN_CODE 77), with the reason */
    const char *dev = getenv("KILN_DEVICE");
    if (dev && !strncmp(dev, "opencl", 6)) {
      printf("conformance: skipped: no usable OpenCL device for KILN_DEVICE=%s (OCL_ICD_VENDORS=%s)\n", dev,
             getenv("OCL_ICD_VENDORS") ? getenv("OCL_ICD_VENDORS") : "(unset)");
      return 77;
    }
    return 2;
  }
  onnxBackendID *ids = calloc(nb, sizeof *ids);
  if (lib.onnxGetBackendIDs(ids, &nb)) {
    fprintf(stderr, "conformance: onnxGetBackendIDs failed\n");
    return 2;
  }
  char **names;
  int n = tu_list_cases(root, &names);
  if (!n) {
    printf("no node tests found under %s\n", root);
    return 1;
  }
  int tp = 0, tf = 0, ts = 0;
  for (size_t b = 0; b < nb; b++) {
    char bname[64] = "?";
    size_t sz = sizeof bname;
    if (lib.onnxGetBackendInfo(ids[b], ONNXIFI_BACKEND_NAME, bname, &sz)) snprintf(bname, sizeof bname, "#%zu", b);
    onnxExtensionFunctionPointer fp;
    last_error = NULL;
    event_status = NULL;
    if (get_ext && !get_ext(ids[b], "kilnGetLastErrorMessage", &fp))
      last_error = (kilnGetLastErrorMessageFunction)(void (*)(void))fp;
    if (get_ext && !get_ext(ids[b], "kilnGetEventStatus", &fp))
      event_status = (kilnGetEventStatusFunction)(void (*)(void))fp;
    onnxBackend be;
    if (lib.onnxInitBackend(ids[b], NULL, &be)) {
      printf("[%s] cannot init backend: %s\n", bname, msg());
      tf++;
      continue;
    }
    static tu_tally tally;
    memset(&tally, 0, sizeof tally);
    int pass = 0, fail = 0, skip = 0;
    for (int i = 0; i < n; i++) {
      int keep = !nf;
      for (int f = 0; f < nf; f++) keep |= strstr(names[i], filters[f]) != NULL;
      tu_case c;
      if (!keep || !tu_case_load(&c, root, names[i])) continue;
      int r = run_case(ids[b], be, &c, bname);
      tu_tally_add(&tally, c.op, r);
      pass += r == 0, fail += r == 1, skip += r == 2;
      tu_case_free(&c);
    }
    char title[128];
    snprintf(title, sizeof title, "backend %s: per-op results", bname);
    tu_tally_print(&tally, title);
    printf("[%s] %d passed, %d failed, %d unsupported\n", bname, pass, fail, skip);
    tp += pass, tf += fail, ts += skip;
    if (lib.onnxReleaseBackend(be)) tf++;
  }
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
  for (size_t b = 0; b < nb; b++)
    if (lib.onnxReleaseBackendID(ids[b])) tf++;
  free(ids);
  onnxifi_unload(&lib);
  printf("conformance: %d passed, %d failed, %d skipped\n", tp, tf, ts);
  return tf ? 1 : 0;
}
