/* tests/fuzz/fuzz_model: libFuzzer target — ONNX model bytes through the
 * real ONNXIFI entry points (plugin/onnxifi.c linked statically into the
 * fuzzer, not dlopen'd): onnxGetBackendCompatibility, then onnxInitGraph
 * and onnxReleaseGraph, on every backend KILN_DEVICE selects (default
 * "reference,cpu": import, shape inference, view resolution, rewrites and
 * memory planning). Every call must return a status; a crash, leak, UB or
 * an unclean status (INTERNAL_ERROR with no message) is a finding. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_backends *fb = fuzz_setup();
  if (!size) return 0;
  for (size_t i = 0; i < fb->n; i++) {
    onnxStatus st = onnxGetBackendCompatibility(fb->ids[i], size, data);
    fuzz_check_status("onnxGetBackendCompatibility", st);
    onnxGraph g = NULL;
    st = onnxInitGraph(fb->backends[i], NULL, size, data, 0, NULL, &g);
    fuzz_check_status("onnxInitGraph", st);
    if (st == ONNXIFI_STATUS_SUCCESS) {
      if (!g) fuzz_abort("onnxInitGraph succeeded with a NULL graph");
      if (onnxReleaseGraph(g) != ONNXIFI_STATUS_SUCCESS) fuzz_abort("onnxReleaseGraph failed");
    } else if (g) {
      fuzz_abort("onnxInitGraph failed but set the graph handle");
    }
  }
  return 0;
}
