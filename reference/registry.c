/* reference/registry: the op tables of the reference backend and the static
 * per-node checks used by onnxGetBackendCompatibility and onnxInitGraph. */
#include <string.h>

#include "reference/ops.h"

static const kiln_op_def *const tables[] = {kiln_ref_ops_elementwise, kiln_ref_ops_shape, kiln_ref_ops_nn, kiln_ref_ops_conv,
                                            kiln_ref_ops_reduce, kiln_ref_ops_extra, kiln_ref_ops_rnn,
                                            kiln_ref_ops_signal, kiln_ref_ops_text};

/* The domains besides ONNX's default one: each has its table only, and its
 * newest version. */
static const struct {
  const char *domain;
  const kiln_op_def *ops;
  int version;
} domains[] = {{KILN_DOMAIN, kiln_ref_ops_kiln, KILN_DOMAIN_VERSION},
               {KILN_DOMAIN_TRAINING, kiln_ref_ops_train, KILN_DOMAIN_TRAINING_VERSION}};

const kiln_op_def *kiln_ref_find_op(const char *domain, const char *op_type) {
  for (size_t k = 0; domain && k < sizeof domains / sizeof *domains; k++) {
    if (strcmp(domain, domains[k].domain)) continue;
    for (const kiln_op_def *d = domains[k].ops; d->op_type; d++)
      if (!strcmp(d->op_type, op_type)) return d;
    return NULL;
  }
  if (domain && *domain && strcmp(domain, "ai.onnx")) return NULL;
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (const kiln_op_def *d = tables[t]; d->op_type; d++)
      if (!strcmp(d->op_type, op_type)) return d;
  return NULL;
}

/* True when name appears as a whole word in the space-separated list. */
static int in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p && *p;) {
    while (*p == ' ') p++;
    const char *e = p;
    while (*e && *e != ' ') e++;
    if ((size_t)(e - p) == n && !strncmp(p, name, n)) return 1;
    p = e;
  }
  return 0;
}

kiln_status kiln_ref_check_node(const kiln_graph *g, const kiln_node *n) {
  char lbl[256];
  kiln_node_label(g, n, lbl, sizeof lbl);
  const kiln_op_def *d = kiln_ref_find_op(n->domain, n->op_type);
  if (!d) {
    if (*n->domain && strcmp(n->domain, "ai.onnx"))
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "node %s: operator %s of domain '%s' is not supported", lbl,
                       n->op_type, n->domain);
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "node %s: operator %s is not supported", lbl, n->op_type);
  }
  for (size_t k = 0; k < sizeof domains / sizeof *domains; k++)
    if (!strcmp(n->domain, domains[k].domain) && n->opset > domains[k].version)
      return kiln_fail(KILN_E_VERSION,
                       "node %s (%s): version %d of domain '%s' is newer than the newest kiln supports (%d)", lbl,
                       n->op_type, n->opset, domains[k].domain, domains[k].version);
  if (n->opset > 17)
    return kiln_fail(KILN_E_VERSION, "node %s (%s): opset %d is newer than the newest kiln supports (17)", lbl,
                     n->op_type, n->opset);
  if (n->n_in < d->min_in || n->n_in > d->max_in)
    return kiln_fail(KILN_E_MODEL, "node %s (%s): %d inputs given, %d to %d expected", lbl, n->op_type, n->n_in,
                     d->min_in, d->max_in);
  if (n->n_out < d->min_out || n->n_out > d->max_out)
    return kiln_fail(KILN_E_MODEL, "node %s (%s): %d outputs given, %d to %d expected", lbl, n->op_type,
                     n->n_out, d->min_out, d->max_out);
  for (int i = 0; i < d->min_in && i < n->n_in; i++)
    if (n->in[i] < 0)
      return kiln_fail(KILN_E_MODEL, "node %s (%s): required input %d is empty", lbl, n->op_type, i);
  for (int a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    if (!in_list(d->attrs, at->name))
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "node %s (%s): attribute '%s' is not supported", lbl,
                       n->op_type, at->name);
    if (at->type == KILN_ATTR_GRAPH || at->type == KILN_ATTR_GRAPHS || at->type == KILN_ATTR_SPARSE_TENSOR ||
        at->type == KILN_ATTR_SPARSE_TENSORS || at->type == KILN_ATTR_TYPE_PROTO ||
        at->type == KILN_ATTR_TYPE_PROTOS || at->type == KILN_ATTR_TENSORS)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "node %s (%s): attribute '%s' has an unsupported type", lbl,
                       n->op_type, at->name);
  }
  /* Declared types of the node's inputs and outputs must be storable. */
  for (int i = 0; i < n->n_in + n->n_out; i++) {
    int v = i < n->n_in ? n->in[i] : n->out[i - n->n_in];
    if (v < 0) continue;
    const kiln_type *ty = &g->values[v].type;
    if (ty->kind != KILN_TYPE_UNKNOWN && ty->kind != KILN_TYPE_TENSOR)
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE,
                       "node %s (%s): value '%s' is a sequence, map, optional or sparse value; only dense "
                       "tensors cross the ONNXIFI ABI",
                       lbl, n->op_type, g->values[v].name);
    if (ty->kind == KILN_TYPE_TENSOR && ty->dtype != KILN_UNDEFINED && !kiln_dtype_supported(ty->dtype))
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "node %s (%s): value '%s' has data type %s, not supported%s", lbl,
                       n->op_type, g->values[v].name, kiln_dtype_name(ty->dtype),
                       ty->dtype == KILN_STRING ? " (string tensors cannot cross the ONNXIFI ABI)" : "");
  }
  if (d->types && n->n_in > 0 && n->in[0] >= 0) {
    const kiln_type *ty = &g->values[n->in[0]].type;
    if (ty->kind == KILN_TYPE_TENSOR && ty->dtype != KILN_UNDEFINED &&
        ((unsigned)ty->dtype >= 32 || !(d->types & KILN_T(ty->dtype))))
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "node %s (%s): input type %s is not supported", lbl, n->op_type,
                       kiln_dtype_name(ty->dtype));
  }
  if (d->check) {
    kiln_status s = d->check(g, n);
    if (s) {
      kiln_error_prefix("node %s (%s)", lbl, n->op_type);
      return s;
    }
  }
  return KILN_OK;
}

kiln_status kiln_op_need(const kiln_op_call *c, int i) {
  if (i < c->n_in && c->in[i]) return KILN_OK;
  return kiln_fail(KILN_E_MODEL, "required input %d is missing", i);
}

kiln_status kiln_op_ints(const kiln_op_call *c, int i, int64_t *vals, int max, int *n) {
  kiln_status s = kiln_op_need(c, i);
  if (s) return s;
  s = kiln_tensor_ints(c->in[i], vals, max, n);
  if (s) kiln_error_prefix("input %d", i);
  return s;
}

/* True when d is an entry of table t. */
static bool in_table(const kiln_op_def *t, const kiln_op_def *d) {
  for (; t->op_type; t++)
    if (t == d) return true;
  return false;
}

bool kiln_ref_op_reads_views(const kiln_op_def *d) {
  (void)d; /* every kernel reads its inputs through the accessors (ops_shape.c's row copies included) */
  return true;
}

bool kiln_ref_op_inplace(const kiln_op_def *d) {
  if (in_table(kiln_ref_ops_elementwise, d)) return true;
  /* the scatters copy data to the output (a no-op over itself: see
     kiln_tensor_copy), then write the updates */
  return !strcmp(d->op_type, "ScatterND") || !strcmp(d->op_type, "ScatterElements") || !strcmp(d->op_type, "Scatter");
}
