/* reference/opcheck: the checks that several op family files (ops_*.c)
 * make alike — a node's declared input types and ranks, its opset and
 * attributes at check time, a call's inputs at run time — each failing with
 * one wording (kiln_fail; the executor prefixes the node), which the tests
 * compare. Internal to the reference backend; not part of reference/ops.h. */
#ifndef KILN_REFERENCE_OPCHECK_H
#define KILN_REFERENCE_OPCHECK_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reference/ops.h"

/* pi, for the kernels that build twiddles and windows. */
#define KILN_OPC_PI 3.14159265358979323846

/* t is in the KILN_T() mask m. */
bool kiln_opc_in_mask(uint32_t m, kiln_dtype t);

/* ---- what a node declares (g may be NULL: nothing is known) */

/* The dtype of input i (an initializer's own first), or KILN_UNDEFINED. */
kiln_dtype kiln_opc_decl_type(const kiln_graph *g, const kiln_node *n, int i);
/* The rank of input i (an initializer's own first), or -1. */
int kiln_opc_decl_rank(const kiln_graph *g, const kiln_node *n, int i);

/* Input i (what), when its type is declared, must have a type in mask (0:
 * any): "input i (what) has data type T; Op-opset accepts <accepts>", where
 * accepts NULL lists mask's dtypes in dtype order. */
kiln_status kiln_opc_chk_decl(const kiln_graph *g, const kiln_node *n, int i, const char *what, uint32_t mask,
                              const char *accepts);
/* Inputs i and j, when both declared, must have the same type; what (NULL:
 * left out of the message) names input i. */
kiln_status kiln_opc_chk_decl_same(const kiln_graph *g, const kiln_node *n, int i, int j, const char *what);

/* The op exists at the node's opset: since <= opset (else status below,
 * "Op is not defined before opset ..."), and opset < until when until > 0
 * (else KILN_E_MODEL, "Op is deprecated from opset ..."). */
kiln_status kiln_opc_opset(const kiln_node *n, int since, int until, kiln_status below);
/* Attribute name, when present, exists at the node's opset (since <= opset,
 * and opset < until when until > 0; KILN_E_UNSUPPORTED_ATTR) and has type
 * ty (KILN_E_MODEL, "must be of type ..."). */
kiln_status kiln_opc_attr(const kiln_node *n, const char *name, kiln_attr_type ty, int since, int until);
/* The int attribute name (default def) is a flag: 0 or 1. */
kiln_status kiln_opc_flag(const kiln_node *n, const char *name, int64_t def);

/* ---- a call's inputs at run time */

/* Optional input i, or NULL. */
const kiln_tensor *kiln_opc_opt_in(const kiln_op_call *c, int i);
/* Output k is wanted (not an omitted optional output). */
bool kiln_opc_out_wanted(const kiln_op_call *c, int k);
/* Input i (what) is present and (mask != 0) of a type in mask; the message
 * as kiln_opc_chk_decl's. */
kiln_status kiln_opc_need(const kiln_op_call *c, int i, const char *what, uint32_t mask, const char *accepts);
/* Inputs i and j (both present) have the same type; the message as
 * kiln_opc_chk_decl_same's. */
kiln_status kiln_opc_need_same(const kiln_op_call *c, int i, int j, const char *what);
/* Input i (what), t, is one element (0-D, or 1-D of one): its value as
 * int64 / double. */
kiln_status kiln_opc_scalar_i(const kiln_tensor *t, int i, const char *what, int64_t *v);
kiln_status kiln_opc_scalar_f(const kiln_tensor *t, int i, const char *what, double *v);

#endif
