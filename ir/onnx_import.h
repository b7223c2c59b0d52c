/* ir/onnx_import: serialized ONNX (protobuf-c) -> kiln_graph / kiln_tensor.
 * Checks what the ONNX spec requires of a model's structure (SSA names,
 * topological order, opset imports); op semantics are checked elsewhere. */
#ifndef KILN_IR_ONNX_IMPORT_H
#define KILN_IR_ONNX_IMPORT_H
#include <stddef.h>

#include "ir/graph.h"

/* Limits a hostile model cannot exceed (README "Limits"); each is checked
 * before anything is allocated for it, with a message naming the limit.
 * Message nesting: a model's messages (subgraphs in GRAPH/GRAPHS
 * attributes, sequence/map/optional types, functions, training graphs)
 * nest at most this deep (protobuf's own default recursion limit) —
 * checked on the wire, before protobuf-c, which recurses without limit. */
#define KILN_MAX_PROTO_DEPTH 100
#define KILN_MAX_NODES 1000000       /* nodes of the graph */
#define KILN_MAX_INITIALIZERS 1000000 /* initializers of the graph */
#define KILN_MAX_GRAPH_IO 100000      /* graph inputs, and graph outputs */
#define KILN_MAX_VALUES 4000000      /* named values (inputs, initializers, node outputs) */
#define KILN_MAX_NODE_ATTRS 1024     /* attributes of one node */

/* Nesting depth of the recursive messages of a serialized ModelProto
 * (0 for an empty one), counted up to limit + 1. Malformed wire data ends
 * the scan without error: the protobuf parser reports it. */
int kiln_onnx_nesting(const void *bytes, size_t size, int limit);

/* Parses a serialized ModelProto. On success *out owns the new graph.
 * KILN_E_PROTOBUF when the bytes do not parse; KILN_E_MODEL when the model
 * breaks ONNX's rules; KILN_E_UNSUPPORTED_* for what kiln cannot hold. */
kiln_status kiln_onnx_import(const void *bytes, size_t size, kiln_graph **out);

/* Parses a serialized TensorProto into an owned tensor; *name (optional)
 * receives a kiln_malloc'd copy of its name (or NULL). */
kiln_status kiln_tensor_parse(const void *bytes, size_t size, kiln_tensor *out, char **name);

#endif
