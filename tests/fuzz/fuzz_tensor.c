/* tests/fuzz/fuzz_tensor: libFuzzer target — kiln's TensorProto parser
 * (kiln_tensor_parse in ir/onnx_import.c, the code that also reads every
 * initializer and TENSOR attribute of a model). Bytes in, a tensor or a
 * status with a message out; a tensor that comes back must hold exactly
 * numel elements of its type. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/onnx_import.h"
#include "ir/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln_tensor t;
  memset(&t, 0, sizeof t);
  char *name = NULL;
  kiln_error_clear();
  kiln_status s = kiln_tensor_parse(data, size, &t, &name);
  if (s) {
    if (!*kiln_last_error()) {
      fprintf(stderr, "fuzz: kiln_tensor_parse failed (%s) with no message\n", kiln_status_name(s));
      abort();
    }
    if (t.data || name) {
      fprintf(stderr, "fuzz: kiln_tensor_parse failed but left a tensor or a name\n");
      abort();
    }
    return 0;
  }
  int64_t n;
  if (kiln_shape_numel(t.rank, t.dims, &n) || n != t.numel) {
    fprintf(stderr, "fuzz: parsed tensor's numel %lld does not match its shape\n", (long long)t.numel);
    abort();
  }
  /* touch every byte: ASan sees a short buffer */
  size_t bytes = kiln_tensor_bytes(&t);
  volatile uint8_t sum = 0;
  for (size_t i = 0; i < bytes; i++) sum += ((const uint8_t *)t.data)[i];
  (void)sum;
  kiln_tensor_release(&t);
  kiln_free(name);
  return 0;
}
