/* reference/opcheck: see opcheck.h. */
#include "reference/opcheck.h"

#include <stdio.h>

bool kiln_opc_in_mask(uint32_t m, kiln_dtype t) { return (unsigned)t < 32 && (m & KILN_T(t)); }

/* ---- declared */

/* The value of input i, or NULL when g is unknown or the input omitted. */
static const kiln_value *decl_value(const kiln_graph *g, const kiln_node *n, int i) {
  if (!g || i >= n->n_in || n->in[i] < 0) return NULL;
  return &g->values[n->in[i]];
}

kiln_dtype kiln_opc_decl_type(const kiln_graph *g, const kiln_node *n, int i) {
  const kiln_value *v = decl_value(g, n, i);
  if (!v) return KILN_UNDEFINED;
  if (v->init) return v->init->dtype;
  return v->type.kind == KILN_TYPE_TENSOR ? v->type.dtype : KILN_UNDEFINED;
}

int kiln_opc_decl_rank(const kiln_graph *g, const kiln_node *n, int i) {
  const kiln_value *v = decl_value(g, n, i);
  if (!v) return -1;
  if (v->init) return v->init->rank;
  return v->type.kind == KILN_TYPE_TENSOR ? v->type.rank : -1;
}

/* Names of the dtypes in a mask, comma separated, into buf. */
static const char *mask_str(uint32_t m, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = 0;
  for (int t = 1; t < KILN_DTYPE_COUNT; t++) {
    if (!kiln_opc_in_mask(m, (kiln_dtype)t)) continue;
    int k = snprintf(buf + len, size - len, "%s%s", len ? ", " : "", kiln_dtype_name((kiln_dtype)t));
    if (k < 0 || (size_t)k >= size - len) break;
    len += (size_t)k;
  }
  return buf;
}

/* Type t (KILN_UNDEFINED: unknown) of input i of n must be in mask (0: any). */
static kiln_status type_in(const kiln_node *n, int i, const char *what, kiln_dtype t, uint32_t mask,
                           const char *accepts) {
  if (t == KILN_UNDEFINED || !mask || kiln_opc_in_mask(mask, t)) return KILN_OK;
  char b[200];
  return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "input %d (%s) has data type %s; %s-%d accepts %s", i, what,
                   kiln_dtype_name(t), n->op_type, n->opset, accepts ? accepts : mask_str(mask, b, sizeof b));
}

/* Types a of input i and b of input j must match (either unknown passes). */
static kiln_status same_type(int i, kiln_dtype a, int j, kiln_dtype b, const char *what) {
  if (a == KILN_UNDEFINED || b == KILN_UNDEFINED || a == b) return KILN_OK;
  if (!what)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d has data type %s, input %d has %s; they must match", i,
                     kiln_dtype_name(a), j, kiln_dtype_name(b));
  return kiln_fail(KILN_E_MISMATCH_DTYPE, "input %d (%s) has data type %s, input %d has %s; they must match", i,
                   what, kiln_dtype_name(a), j, kiln_dtype_name(b));
}

kiln_status kiln_opc_chk_decl(const kiln_graph *g, const kiln_node *n, int i, const char *what, uint32_t mask,
                              const char *accepts) {
  return type_in(n, i, what, kiln_opc_decl_type(g, n, i), mask, accepts);
}

kiln_status kiln_opc_chk_decl_same(const kiln_graph *g, const kiln_node *n, int i, int j, const char *what) {
  return same_type(i, kiln_opc_decl_type(g, n, i), j, kiln_opc_decl_type(g, n, j), what);
}

/* ---- opset and attributes */

kiln_status kiln_opc_opset(const kiln_node *n, int since, int until, kiln_status below) {
  if (n->opset < since)
    return kiln_fail(below, "%s is not defined before opset %d (the model imports opset %d)", n->op_type, since,
                     n->opset);
  if (until > 0 && n->opset >= until)
    return kiln_fail(KILN_E_MODEL, "%s is deprecated from opset %d (the model imports opset %d)", n->op_type,
                     until, n->opset);
  return KILN_OK;
}

kiln_status kiln_opc_attr(const kiln_node *n, const char *name, kiln_attr_type ty, int since, int until) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (!a) return KILN_OK;
  if (n->opset < since || (until > 0 && n->opset >= until)) {
    if (until > 0)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                       "attribute '%s' is only defined from opset %d to %d, not at opset %d", name, since,
                       until - 1, n->opset);
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute '%s' is only defined from opset %d, not at opset %d",
                     name, since, n->opset);
  }
  if (a->type != ty) {
    const char *tn = ty == KILN_ATTR_INT       ? "int"
                     : ty == KILN_ATTR_FLOAT   ? "float"
                     : ty == KILN_ATTR_STRING  ? "string"
                     : ty == KILN_ATTR_INTS    ? "ints"
                     : ty == KILN_ATTR_FLOATS  ? "floats"
                     : ty == KILN_ATTR_STRINGS ? "strings"
                                               : "other";
    return kiln_fail(KILN_E_MODEL, "attribute '%s' must be of type %s", name, tn);
  }
  return KILN_OK;
}

kiln_status kiln_opc_flag(const kiln_node *n, const char *name, int64_t def) {
  int64_t v = kiln_attr_int(n, name, def);
  if (v != 0 && v != 1)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute '%s' is %lld; it must be 0 or 1", name, (long long)v);
  return KILN_OK;
}

/* ---- run time */

const kiln_tensor *kiln_opc_opt_in(const kiln_op_call *c, int i) { return i < c->n_in ? c->in[i] : NULL; }

bool kiln_opc_out_wanted(const kiln_op_call *c, int k) { return k < c->n_out && c->out_used[k]; }

kiln_status kiln_opc_need(const kiln_op_call *c, int i, const char *what, uint32_t mask, const char *accepts) {
  if (i >= c->n_in || !c->in[i]) return kiln_fail(KILN_E_MODEL, "required input %d (%s) is missing", i, what);
  return type_in(c->node, i, what, c->in[i]->dtype, mask, accepts);
}

kiln_status kiln_opc_need_same(const kiln_op_call *c, int i, int j, const char *what) {
  return same_type(i, c->in[i]->dtype, j, c->in[j]->dtype, what);
}

/* t is one element. */
static kiln_status scalar_of(const kiln_tensor *t, int i, const char *what) {
  if (t->numel == 1 && t->rank <= 1) return KILN_OK;
  char b[160];
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "input %d (%s) has shape %s; a scalar is expected", i, what,
                   kiln_shape_str(t->rank, t->dims, b, sizeof b));
}

kiln_status kiln_opc_scalar_i(const kiln_tensor *t, int i, const char *what, int64_t *v) {
  kiln_status s = scalar_of(t, i, what);
  if (!s) *v = kiln_get_i(t, 0);
  return s;
}

kiln_status kiln_opc_scalar_f(const kiln_tensor *t, int i, const char *what, double *v) {
  kiln_status s = scalar_of(t, i, what);
  if (!s) *v = kiln_get_f(t, 0);
  return s;
}
