/* tests/onnxifi_dl.h: the plugin's ONNXIFI functions through dlopen/dlsym,
 * as a host loads them, for the host-side tests that need no kiln internals
 * (tests/stress_threads.c, tests/lifetime_cycles.c), plus the bundled
 * example models' shapes and a small file reader. Header-only. */
#ifndef KILN_TESTS_ONNXIFI_DL_H
#define KILN_TESTS_ONNXIFI_DL_H
#include <dlfcn.h>
#include <onnx/onnxifi.h>
#include <onnx/onnxifi_ext.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/kiln/kiln_ext.h"

typedef struct dl_api {
  void *so;
  onnxGetBackendIDsFunction GetBackendIDs;
  onnxReleaseBackendIDFunction ReleaseBackendID;
  onnxGetBackendInfoFunction GetBackendInfo;
  onnxInitBackendFunction InitBackend;
  onnxReleaseBackendFunction ReleaseBackend;
  onnxInitEventFunction InitEvent;
  onnxSignalEventFunction SignalEvent;
  onnxGetEventStateFunction GetEventState;
  onnxWaitEventFunction WaitEvent;
  onnxReleaseEventFunction ReleaseEvent;
  onnxInitGraphFunction InitGraph;
  onnxSetGraphIOFunction SetGraphIO;
  onnxRunGraphFunction RunGraph;
  onnxReleaseGraphFunction ReleaseGraph;
  onnxGetExtensionFunctionAddressFunction GetExt;
  onnxSetIOAndRunGraphFunction SetIOAndRun; /* extension */
  kilnGetLastErrorMessageFunction LastError; /* extension */
} dl_api;

/* Loads path; returns 0, or prints why and returns -1. */
static inline int dl_load(dl_api *a, const char *path) {
  memset(a, 0, sizeof *a);
  a->so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!a->so) {
    printf("cannot load %s: %s\n", path, dlerror());
    return -1;
  }
#define SYM(f)                                                     \
  do {                                                             \
    *(void **)&a->f = dlsym(a->so, "onnx" #f);                     \
    if (!a->f) {                                                   \
      printf("%s does not export onnx%s\n", path, #f);             \
      return -1;                                                   \
    }                                                              \
  } while (0)
  SYM(GetBackendIDs); SYM(ReleaseBackendID); SYM(GetBackendInfo); SYM(InitBackend); SYM(ReleaseBackend);
  SYM(InitEvent); SYM(SignalEvent); SYM(GetEventState); SYM(WaitEvent); SYM(ReleaseEvent);
  SYM(InitGraph); SYM(SetGraphIO); SYM(RunGraph); SYM(ReleaseGraph);
#undef SYM
  *(void **)&a->GetExt = dlsym(a->so, "onnxGetExtensionFunctionAddress");
  return a->GetExt ? 0 : -1;
}

/* The extension functions of backend ID id; 0 or -1. */
static inline int dl_load_ext(dl_api *a, onnxBackendID id) {
  onnxExtensionFunctionPointer f = NULL;
  if (a->GetExt(id, "onnxSetIOAndRunGraph", &f) || !f) return -1;
  a->SetIOAndRun = (onnxSetIOAndRunGraphFunction)(void (*)(void))f;
  if (a->GetExt(id, "kilnGetLastErrorMessage", &f) || !f) return -1;
  a->LastError = (kilnGetLastErrorMessageFunction)(void (*)(void))f;
  return 0;
}

static inline const char *dl_last_error(const dl_api *a) {
  const char *m = NULL;
  if (a->LastError && !a->LastError(&m) && m) return m;
  return "";
}

static inline void *dl_read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  if (!fseek(f, 0, SEEK_END)) {
    long n = ftell(f);
    if (n > 0 && !fseek(f, 0, SEEK_SET) && (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    }
    if (buf) *size = (size_t)n;
  }
  fclose(f);
  return buf;
}

/* The bundled examples (examples/README.md): one float input, one float output. */
typedef struct dl_model {
  const char *file, *in_name, *out_name;
  int in_rank, out_rank;
  uint64_t in_shape[4], out_shape[4];
  size_t in_n, out_n; /* elements */
} dl_model;

static const dl_model dl_models[2] = {
    {"cnn.onnx", "input", "probabilities", 4, 2, {1, 3, 32, 32}, {1, 10}, 3 * 32 * 32, 10},
    {"mlp.onnx", "x", "logits", 2, 2, {4, 64}, {4, 10}, 4 * 64, 40},
};

static inline onnxTensorDescriptorV1 dl_desc(const char *name, int rank, const uint64_t *shape, void *buf) {
  onnxTensorDescriptorV1 d;
  memset(&d, 0, sizeof d);
  d.tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
  d.name = name;
  d.dataType = ONNXIFI_DATATYPE_FLOAT32;
  d.memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  d.dimensions = (uint32_t)rank;
  d.shape = shape;
  d.buffer = (onnxPointer)(uintptr_t)buf;
  return d;
}

#endif
