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

/* Per-op tolerance: rtol and atol used by the conformance runners. */
void tu_tolerance(const char *op_type, double *rtol, double *atol);

#endif
