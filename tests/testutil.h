/* tests/testutil: file reading, node-test case loading and tensor
 * comparison shared by the test programs. */
#ifndef KILN_TESTS_TESTUTIL_H
#define KILN_TESTS_TESTUTIL_H
#include <stddef.h>

#include "ir/tensor.h"

#define KILN_NODE_TEST_DIR "/usr/share/libonnx-testdata/data/node"

/* Reads a whole file (malloc'd); NULL on failure. */
void *tu_read_file(const char *path, size_t *size);

/* Compares got with expected: same dtype and shape; floats within
 * |g-e| <= atol + rtol*|e| (NaN matches NaN, inf matches inf of the same
 * sign); others exactly. On mismatch writes a description to msg and
 * returns 0; *max_abs / *max_rel (optional) get the largest errors. */
int tu_compare(const kiln_tensor *got, const kiln_tensor *exp, double rtol, double atol, char *msg, size_t msglen,
               double *max_abs, double *max_rel);

/* The reason a node-test case cannot cross the ABI, or NULL: a graph input
 * or output that is not a dense tensor, a string tensor, or a zero-sized
 * dimension in a test's data (ONNXIFI rejects zero dims). */
struct kiln_graph;
const char *tu_abi_limit(const struct kiln_graph *g);

/* Tolerance used by the conformance runners for one output: rtol 1e-4 /
 * atol 1e-5, widened only where stated in testutil.c with the reason. */
void tu_tolerance(const char *case_name, kiln_dtype dtype, double *rtol, double *atol);

/* ONNX 1.12's node-test files store bfloat16 tensors as uint16 (same bits):
 * reinterpret t as the declared type when that is what happened. */
void tu_fix_dtype(kiln_tensor *t, kiln_dtype declared);

/* When test data contradicts the model's declared type for it (rank or a
 * static dimension; a few ONNX 1.12 cases do), the reason; else NULL. */
struct kiln_type;
const char *tu_data_disagrees(const struct kiln_type *declared, const kiln_tensor *t);

/* When an ONNX node test's expected outputs are known to contradict its own
 * model in values (not only shapes), the reason, with the evidence; else
 * NULL. Runners skip such a case and print the reason. */
const char *tu_case_erratum(const char *case_name);

#endif
