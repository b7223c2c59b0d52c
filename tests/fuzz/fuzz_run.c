/* tests/fuzz/fuzz_run: libFuzzer target — ONNX model bytes that kiln
 * accepts are also run. Like fuzz_model (onnxInitGraph through the real
 * ONNXIFI entry points, statically linked), then, when every runtime input
 * and every output has a fully known declared shape (at most 64 Ki elements
 * each), onnxSetGraphIO with buffers of exactly those sizes (inputs filled
 * with small values: -3..3 for floats, 0..2 for integers, so that indices
 * are mostly in range), onnxRunGraph and onnxWaitEvent, on `reference`
 * and `cpu`: kernels meet hostile attributes and initializers. A run may
 * fail (INTERNAL_ERROR at the wait, with its message), never crash. The
 * declared types are read with kiln's own importer (ir/onnx_import). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph.h"
#include "ir/onnx_import.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define RUN_MAX_NUMEL 65536
#define RUN_MAX_IO 16

typedef struct io_slot {
  onnxTensorDescriptorV1 d;
  uint64_t shape[KILN_MAX_RANK];
  void *mem;
} io_slot;

/* A descriptor for value v with its declared shape; false if not fully known. */
static bool make_slot(const kiln_value *v, bool input, io_slot *s) {
  const kiln_type *t = &v->type;
  if (t->kind != KILN_TYPE_TENSOR || t->rank < 0 || t->dtype == KILN_UNDEFINED || !kiln_dtype_size(t->dtype))
    return false;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i].value <= 0 || t->dims[i].value > RUN_MAX_NUMEL) return false;
    n *= t->dims[i].value;
    if (n > RUN_MAX_NUMEL) return false;
    s->shape[i] = (uint64_t)t->dims[i].value;
  }
  size_t es = kiln_dtype_size(t->dtype);
  s->mem = calloc((size_t)n, es);
  if (!s->mem) return false;
  if (input) {
    kiln_tensor w;
    int64_t dims[KILN_MAX_RANK];
    for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i].value;
    kiln_tensor_wrap(&w, t->dtype, t->rank, dims, n, s->mem);
    for (int64_t i = 0; i < n; i++) {
      if (kiln_dtype_is_float(t->dtype)) kiln_set_f(&w, i, (double)(i % 7) - 3.0);
      else kiln_set_i(&w, i, i % 3);
    }
  }
  s->d.tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
  s->d.name = v->name;
  s->d.dataType = (onnxEnum)t->dtype;
  s->d.memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  s->d.dimensions = (uint32_t)t->rank;
  s->d.shape = s->shape;
  s->d.buffer = (onnxPointer)(uintptr_t)s->mem;
  return true;
}

static void run_graph(fuzz_backends *fb, size_t b, onnxGraph graph, const kiln_graph *g) {
  io_slot in[RUN_MAX_IO], out[RUN_MAX_IO];
  onnxTensorDescriptorV1 din[RUN_MAX_IO], dout[RUN_MAX_IO];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  uint32_t nin = 0, nout = 0;
  bool ok = g->n_outputs <= RUN_MAX_IO && g->n_outputs > 0;
  for (int i = 0; i < g->n_inputs && ok; i++) {
    const kiln_value *v = &g->values[g->inputs[i]];
    if (v->init) continue;
    ok = nin < RUN_MAX_IO && make_slot(v, true, &in[nin]);
    if (ok) din[nin] = in[nin].d, nin++;
  }
  for (int i = 0; i < g->n_outputs && ok; i++) {
    ok = make_slot(&g->values[g->outputs[i]], false, &out[nout]);
    if (ok) dout[nout] = out[nout].d, nout++;
  }
  if (ok) {
    onnxStatus st = onnxSetGraphIO(graph, nin, din, nout, dout);
    fuzz_check_status("onnxSetGraphIO", st);
    if (st == ONNXIFI_STATUS_SUCCESS) {
      onnxEvent ev = NULL;
      if (onnxInitEvent(fb->backends[b], &ev) != ONNXIFI_STATUS_SUCCESS || onnxSignalEvent(ev))
        fuzz_abort("cannot make a signalled event");
      onnxMemoryFenceV1 fin = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT, .event = ev};
      onnxMemoryFenceV1 fout = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
      st = onnxRunGraph(graph, &fin, &fout);
      fuzz_check_status("onnxRunGraph", st);
      if (st == ONNXIFI_STATUS_SUCCESS) {
        onnxStatus ws = onnxWaitEvent(fout.event);
        if (ws != ONNXIFI_STATUS_SUCCESS && (ws != ONNXIFI_STATUS_INTERNAL_ERROR || !*fuzz_last_error()))
          fuzz_abort("onnxWaitEvent: a failed run without its message");
        if (ws && getenv("KILN_FUZZ_VERBOSE")) fprintf(stderr, "fuzz: run failed: %s\n", fuzz_last_error());
        onnxReleaseEvent(fout.event);
      }
      onnxReleaseEvent(ev);
    }
  }
  for (uint32_t i = 0; i < RUN_MAX_IO; i++) {
    free(in[i].mem);
    free(out[i].mem);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_backends *fb = fuzz_setup();
  if (!size) return 0;
  kiln_graph *g = NULL;
  if (kiln_onnx_import(data, size, &g)) return 0;
  for (size_t i = 0; i < fb->n; i++) {
    onnxGraph graph = NULL;
    onnxStatus st = onnxInitGraph(fb->backends[i], NULL, size, data, 0, NULL, &graph);
    fuzz_check_status("onnxInitGraph", st);
    if (st != ONNXIFI_STATUS_SUCCESS) continue;
    run_graph(fb, i, graph, g);
    if (onnxReleaseGraph(graph) != ONNXIFI_STATUS_SUCCESS) fuzz_abort("onnxReleaseGraph failed");
  }
  kiln_graph_free(g);
  return 0;
}
