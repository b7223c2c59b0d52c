/* reference/ops: the interface between the reference executor and its
 * scalar kernels. Each op family file (ops_*.c) exports a table of
 * kiln_op_def, terminated by an entry with op_type NULL; registry.c joins
 * the tables. The reference backend is the oracle for every other backend:
 * kernels here are plain loops over dense row-major tensors, no tricks. */
#ifndef KILN_REFERENCE_OPS_H
#define KILN_REFERENCE_OPS_H
#include <stdint.h>

#include "ir/graph.h"
#include "ir/tensor.h"

/* One invocation of a kernel. in[i] is NULL for an omitted optional input
 * (and for i >= n_in). out[i] is an empty tensor the kernel fills with
 * kiln_tensor_alloc (dtype + shape) and then writes; out_used[i] is false
 * for an omitted optional output (the kernel may skip it or fill it; the
 * executor discards it). */
typedef struct kiln_op_call {
  const kiln_graph *graph;
  const kiln_node *node;
  int opset; /* == node->opset: the opset version of the node's domain */
  int n_in;
  const kiln_tensor *const *in;
  int n_out;
  kiln_tensor *out;
  const bool *out_used;
} kiln_op_call;

typedef kiln_status (*kiln_op_run_fn)(const kiln_op_call *c);
/* Optional static check at compatibility/graph-init time, for what can be
 * decided from the node alone (attribute values, opset). Return KILN_OK or
 * a KILN_E_UNSUPPORTED_* / KILN_E_MODEL with a message. */
typedef kiln_status (*kiln_op_check_fn)(const kiln_graph *g, const kiln_node *n);

typedef struct kiln_op_def {
  const char *op_type;
  int min_in, max_in;   /* input count range (max counts optional inputs) */
  int min_out, max_out; /* output count range */
  const char *attrs;    /* space-separated names of every attribute the
                           kernel honours; any other attribute is
                           UNSUPPORTED_ATTRIBUTE */
  uint32_t types;       /* KILN_T() mask of dtypes accepted for input 0
                           (0: any supported type) */
  kiln_op_run_fn run;
  kiln_op_check_fn check; /* may be NULL */
} kiln_op_def;

/* Tables, one per family. */
extern const kiln_op_def kiln_ref_ops_elementwise[];
extern const kiln_op_def kiln_ref_ops_shape[];
extern const kiln_op_def kiln_ref_ops_nn[];
extern const kiln_op_def kiln_ref_ops_reduce[];
extern const kiln_op_def kiln_ref_ops_conv[];
extern const kiln_op_def kiln_ref_ops_extra[];
extern const kiln_op_def kiln_ref_ops_rnn[];
extern const kiln_op_def kiln_ref_ops_signal[]; /* DFT, STFT, MelWeightMatrix */
extern const kiln_op_def kiln_ref_ops_text[];   /* TfIdfVectorizer */
extern const kiln_op_def kiln_ref_ops_kiln[]; /* ops_kiln.c: domain KILN_DOMAIN (ir/graph.h) */
extern const kiln_op_def kiln_ref_ops_train[]; /* ops_train.c: domain KILN_DOMAIN_TRAINING (ir/graph.h) */

/* Looks up an op of the default ONNX domain ("" or "ai.onnx"), of kiln's
 * own domain (KILN_DOMAIN) or of ONNX's training preview domain
 * (KILN_DOMAIN_TRAINING) by name; NULL when unknown. */
const kiln_op_def *kiln_ref_find_op(const char *domain, const char *op_type);

/* Checks one node against its op's table entry (domain, counts, attribute
 * names, input-0 type when declared, the op's own check). */
kiln_status kiln_ref_check_node(const kiln_graph *g, const kiln_node *n);

/* What a plan executor may do with a kernel: */
/* Its inputs may be read-only strided views: it reads them only through
 * kiln_get_* / kiln_copy_elem / kiln_tensor_copy (the data-movement family's
 * row copies go through copy_run, which follows a view's map). Every kernel
 * of this backend does; the predicate stays for kernels that will not. */
bool kiln_ref_op_reads_views(const kiln_op_def *d);
/* Output 0 may be written over input 0's storage when both have the same
 * byte size: element i of output 0 is written only after element i of
 * input 0 was read and no other element of input 0 is read later (the
 * elementwise family), or the kernel first copies input 0 to output 0 with
 * kiln_tensor_copy and then only writes (ScatterND, ScatterElements,
 * Scatter: the write into the data tensor happens in place). */
bool kiln_ref_op_inplace(const kiln_op_def *d);

/* Shared helpers for kernels. */
/* Fails with a message unless in[i] is present. */
kiln_status kiln_op_need(const kiln_op_call *c, int i);
/* Reads a shape-setting input (int64/int32, 0-D or 1-D) into vals. */
kiln_status kiln_op_ints(const kiln_op_call *c, int i, int64_t *vals, int max, int *n);

#endif
