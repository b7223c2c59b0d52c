/* ir/graph: kiln's graph as imported from ONNX — values, nodes, attributes,
 * initializers and opset imports. Names are owned copies; the protobuf is not
 * kept. Values are numbered; a node refers to them by index, -1 for an
 * omitted optional input or output. Nodes are in topological order. */
#ifndef KILN_IR_GRAPH_H
#define KILN_IR_GRAPH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/tensor.h"

/* What kind of value a ValueInfo declares. Only tensors cross the ABI. */
typedef enum kiln_type_kind {
  KILN_TYPE_UNKNOWN = 0, /* no type information given */
  KILN_TYPE_TENSOR,
  KILN_TYPE_SEQUENCE,
  KILN_TYPE_MAP,
  KILN_TYPE_OPTIONAL,
  KILN_TYPE_SPARSE
} kiln_type_kind;

/* One dimension: a known size (value >= 0), or a symbol (param, value -1),
 * or unknown (value -1, param NULL). */
typedef struct kiln_dim {
  int64_t value;
  char *param;
} kiln_dim;

typedef struct kiln_type {
  kiln_type_kind kind;
  kiln_dtype dtype; /* KILN_UNDEFINED when unknown */
  int rank;         /* -1 when unknown */
  kiln_dim dims[KILN_MAX_RANK];
} kiln_type;

typedef struct kiln_value {
  char *name;
  kiln_type type;       /* declared (input/output/value_info/initializer) */
  int producer;         /* index of the producing node, -1 if none */
  kiln_tensor *init;    /* constant data (initializer or weight), else NULL */
  bool is_input;        /* listed in graph.input */
  bool is_output;       /* listed in graph.output */
} kiln_value;

/* Attribute types, numbered as AttributeProto.AttributeType. */
typedef enum kiln_attr_type {
  KILN_ATTR_UNDEFINED = 0,
  KILN_ATTR_FLOAT = 1,
  KILN_ATTR_INT = 2,
  KILN_ATTR_STRING = 3,
  KILN_ATTR_TENSOR = 4,
  KILN_ATTR_GRAPH = 5,
  KILN_ATTR_FLOATS = 6,
  KILN_ATTR_INTS = 7,
  KILN_ATTR_STRINGS = 8,
  KILN_ATTR_TENSORS = 9,
  KILN_ATTR_GRAPHS = 10,
  KILN_ATTR_SPARSE_TENSOR = 11,
  KILN_ATTR_SPARSE_TENSORS = 12,
  KILN_ATTR_TYPE_PROTO = 13,
  KILN_ATTR_TYPE_PROTOS = 14
} kiln_attr_type;

typedef struct kiln_attr {
  char *name;
  kiln_attr_type type;
  int64_t i;
  float f;
  char *s;          /* STRING: NUL-terminated copy */
  size_t n;         /* count of ints / floats / strings */
  int64_t *ints;
  float *floats;
  char **strings;
  kiln_tensor *t;   /* TENSOR */
} kiln_attr;

typedef struct kiln_node {
  char *name;
  char *op_type;
  char *domain;  /* "" for the default domain */
  int opset;     /* opset version imported for the node's domain */
  int n_in, n_out, n_attrs;
  int *in, *out; /* value indices, -1 for omitted optionals */
  kiln_attr *attrs;
  int src; /* its index in the model as imported (its label when unnamed, after rewrites too);
              -1 for a node kiln made */
} kiln_node;

typedef struct kiln_opset {
  char *domain;
  int64_t version;
} kiln_opset;

typedef struct kiln_graph {
  int64_t ir_version;
  char *name;
  int n_opsets;
  kiln_opset *opsets;
  int n_values, n_nodes, n_inputs, n_outputs, n_props;
  kiln_value *values;
  kiln_node *nodes;
  int *inputs;  /* value indices of graph.input, in order */
  int *outputs; /* value indices of graph.output, in order */
  char **prop_keys, **prop_vals; /* model metadata_props */
} kiln_graph;

void kiln_graph_free(kiln_graph *g);

/* Index of the value named name, or -1. Linear: for setup paths only. */
int kiln_graph_find_value(const kiln_graph *g, const char *name);
/* kiln's own operator domain (docs/KILN_DOMAIN.md: SparseLengthsSum family,
 * 8-bit rowwise (de)quantization, LSTMUnit) and its newest opset version. */
#define KILN_DOMAIN "ai.kiln"
#define KILN_DOMAIN_VERSION 1
/* ONNX's training preview domain (its optimizers: Adagrad, Adam, Momentum)
 * and the one version it has. */
#define KILN_DOMAIN_TRAINING "ai.onnx.preview.training"
#define KILN_DOMAIN_TRAINING_VERSION 1
/* Opset version imported for a domain ("" and "ai.onnx" are the same), or -1. */
int64_t kiln_graph_opset(const kiln_graph *g, const char *domain);
/* A display name for a node: its name, or "#index" when it has none. */
const char *kiln_node_label(const kiln_graph *g, const kiln_node *n, char *buf, int size);

/* Attribute lookup. Each getter returns def when the attribute is absent. */
const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name);
int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t def);
float kiln_attr_float(const kiln_node *n, const char *name, float def);
const char *kiln_attr_string(const kiln_node *n, const char *name, const char *def);
/* INTS / FLOATS: the array and its count, or NULL (count 0) when absent. */
const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, size_t *count);
const float *kiln_attr_floats(const kiln_node *n, const char *name, size_t *count);
const kiln_tensor *kiln_attr_tensor(const kiln_node *n, const char *name);

#endif
