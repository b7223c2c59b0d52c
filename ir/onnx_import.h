/* ir/onnx_import: serialized ONNX (protobuf-c) -> kiln_graph / kiln_tensor.
 * Checks what the ONNX spec requires of a model's structure (SSA names,
 * topological order, opset imports); op semantics are checked elsewhere. */
#ifndef KILN_IR_ONNX_IMPORT_H
#define KILN_IR_ONNX_IMPORT_H
#include <stddef.h>

#include "ir/graph.h"

/* Parses a serialized ModelProto. On success *out owns the new graph.
 * KILN_E_PROTOBUF when the bytes do not parse; KILN_E_MODEL when the model
 * breaks ONNX's rules; KILN_E_UNSUPPORTED_* for what kiln cannot hold. */
kiln_status kiln_onnx_import(const void *bytes, size_t size, kiln_graph **out);

/* Parses a serialized TensorProto into an owned tensor; *name (optional)
 * receives a kiln_malloc'd copy of its name (or NULL). */
kiln_status kiln_tensor_parse(const void *bytes, size_t size, kiln_tensor *out, char **name);

#endif
