/* ir/graph_edit: copying, growing, shrinking and checking a kiln_graph.
 * Every function leaves the graph freeable by kiln_graph_free, also when it
 * fails half-way. */
#include "ir/graph_edit.h"

#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"

static kiln_status nomem(void) { return kiln_fail(KILN_E_NOMEM, "out of memory editing a graph"); }

/* ---- freeing (mirrors kiln_graph_free, one piece at a time) ---- */

static void free_tensor_ptr(kiln_tensor *t) {
  if (!t) return;
  kiln_tensor_release(t);
  kiln_free(t);
}

static void free_type(kiln_type *t) {
  for (int i = 0; i < KILN_MAX_RANK; i++) {
    kiln_free(t->dims[i].param);
    t->dims[i].param = NULL;
  }
}

void kiln_edit_free_attr(kiln_attr *a) {
  kiln_free(a->name);
  kiln_free(a->s);
  kiln_free(a->ints);
  kiln_free(a->floats);
  if (a->strings)
    for (size_t k = 0; k < a->n; k++) kiln_free(a->strings[k]);
  kiln_free(a->strings);
  free_tensor_ptr(a->t);
  memset(a, 0, sizeof *a);
}

static void free_node(kiln_node *n) {
  kiln_free(n->name);
  kiln_free(n->op_type);
  kiln_free(n->domain);
  kiln_free(n->in);
  kiln_free(n->out);
  for (int a = 0; a < n->n_attrs; a++) kiln_edit_free_attr(&n->attrs[a]);
  kiln_free(n->attrs);
  memset(n, 0, sizeof *n);
}

static void free_value(kiln_value *v) {
  kiln_free(v->name);
  free_type(&v->type);
  free_tensor_ptr(v->init);
  memset(v, 0, sizeof *v);
}

/* ---- copying ---- */

/* shared: a dense src lends its data (a borrowing copy of the header) */
static kiln_status copy_tensor_ptr(kiln_tensor **dst, const kiln_tensor *src, bool shared) {
  *dst = NULL;
  if (!src) return KILN_OK;
  kiln_tensor *t = kiln_calloc(1, sizeof *t);
  if (!t) return nomem();
  if (shared && !src->strided) {
    kiln_tensor_wrap(t, src->dtype, src->rank, src->dims, src->numel, src->data);
    *dst = t;
    return KILN_OK;
  }
  kiln_status s = kiln_tensor_copy(t, src);
  if (s) {
    kiln_free(t);
    return s;
  }
  *dst = t;
  return KILN_OK;
}

static kiln_status copy_type(kiln_type *d, const kiln_type *s) {
  *d = *s;
  for (int i = 0; i < KILN_MAX_RANK; i++) d->dims[i].param = NULL;
  for (int i = 0; i < KILN_MAX_RANK; i++)
    if (s->dims[i].param && !(d->dims[i].param = kiln_strdup(s->dims[i].param))) return nomem();
  return KILN_OK;
}

static kiln_status copy_attr(kiln_attr *d, const kiln_attr *s, bool shared) {
  memset(d, 0, sizeof *d);
  d->type = s->type;
  d->i = s->i;
  d->f = s->f;
  if (!(d->name = kiln_strdup(s->name ? s->name : ""))) return nomem();
  if (s->s && !(d->s = kiln_strdup(s->s))) return nomem();
  if (s->ints) {
    if (!(d->ints = kiln_malloc(s->n * sizeof *d->ints))) return nomem();
    memcpy(d->ints, s->ints, s->n * sizeof *d->ints);
  }
  if (s->floats) {
    if (!(d->floats = kiln_malloc(s->n * sizeof *d->floats))) return nomem();
    memcpy(d->floats, s->floats, s->n * sizeof *d->floats);
  }
  d->n = s->n;
  if (s->strings) {
    if (!(d->strings = kiln_calloc(s->n, sizeof *d->strings))) return nomem();
    for (size_t k = 0; k < s->n; k++)
      if (!(d->strings[k] = kiln_strdup(s->strings[k] ? s->strings[k] : ""))) return nomem();
  }
  return copy_tensor_ptr(&d->t, s->t, shared);
}

kiln_status kiln_edit_copy_attr(kiln_attr *d, const kiln_attr *s) { return copy_attr(d, s, false); }

static kiln_status copy_node(kiln_node *d, const kiln_node *s, bool shared) {
  memset(d, 0, sizeof *d);
  d->opset = s->opset;
  d->src = s->src;
  d->name = kiln_strdup(s->name ? s->name : "");
  d->op_type = kiln_strdup(s->op_type ? s->op_type : "");
  d->domain = kiln_strdup(s->domain ? s->domain : "");
  d->in = kiln_calloc((size_t)s->n_in + 1, sizeof *d->in);
  d->out = kiln_calloc((size_t)s->n_out + 1, sizeof *d->out);
  d->attrs = kiln_calloc((size_t)s->n_attrs + 1, sizeof *d->attrs);
  if (!d->name || !d->op_type || !d->domain || !d->in || !d->out || !d->attrs) return nomem();
  d->n_in = s->n_in;
  d->n_out = s->n_out;
  if (s->n_in) memcpy(d->in, s->in, (size_t)s->n_in * sizeof *d->in);
  if (s->n_out) memcpy(d->out, s->out, (size_t)s->n_out * sizeof *d->out);
  for (int a = 0; a < s->n_attrs; a++) {
    d->n_attrs = a + 1; /* so a half-copied attribute is freed with the node */
    kiln_status st = copy_attr(&d->attrs[a], &s->attrs[a], shared);
    if (st) return st;
  }
  return KILN_OK;
}

static kiln_status clone_into(kiln_graph *d, const kiln_graph *g, bool shared) {
  d->ir_version = g->ir_version;
  if (!(d->name = kiln_strdup(g->name ? g->name : ""))) return nomem();
  d->opsets = kiln_calloc((size_t)g->n_opsets + 1, sizeof *d->opsets);
  d->values = kiln_calloc((size_t)g->n_values + 1, sizeof *d->values);
  d->nodes = kiln_calloc((size_t)g->n_nodes + 1, sizeof *d->nodes);
  d->inputs = kiln_calloc((size_t)g->n_inputs + 1, sizeof *d->inputs);
  d->outputs = kiln_calloc((size_t)g->n_outputs + 1, sizeof *d->outputs);
  if (!d->opsets || !d->values || !d->nodes || !d->inputs || !d->outputs) return nomem();
  d->n_opsets = g->n_opsets;
  for (int i = 0; i < g->n_opsets; i++) {
    d->opsets[i].version = g->opsets[i].version;
    if (!(d->opsets[i].domain = kiln_strdup(g->opsets[i].domain ? g->opsets[i].domain : ""))) return nomem();
  }
  d->n_values = g->n_values; /* zeroed entries free cleanly */
  for (int v = 0; v < g->n_values; v++) {
    const kiln_value *s = &g->values[v];
    kiln_value *t = &d->values[v];
    t->producer = s->producer;
    t->is_input = s->is_input;
    t->is_output = s->is_output;
    if (!(t->name = kiln_strdup(s->name ? s->name : ""))) return nomem();
    kiln_status st = copy_type(&t->type, &s->type);
    if (!st) st = copy_tensor_ptr(&t->init, s->init, shared);
    if (st) return st;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    d->n_nodes = i + 1;
    kiln_status st = copy_node(&d->nodes[i], &g->nodes[i], shared);
    if (st) return st;
  }
  d->n_inputs = g->n_inputs;
  d->n_outputs = g->n_outputs;
  if (g->n_inputs) memcpy(d->inputs, g->inputs, (size_t)g->n_inputs * sizeof *d->inputs);
  if (g->n_outputs) memcpy(d->outputs, g->outputs, (size_t)g->n_outputs * sizeof *d->outputs);
  if (g->n_props) {
    d->prop_keys = kiln_calloc((size_t)g->n_props, sizeof *d->prop_keys);
    d->prop_vals = kiln_calloc((size_t)g->n_props, sizeof *d->prop_vals);
    if (!d->prop_keys || !d->prop_vals) return nomem();
    d->n_props = g->n_props;
    for (int i = 0; i < g->n_props; i++)
      if (!(d->prop_keys[i] = kiln_strdup(g->prop_keys[i] ? g->prop_keys[i] : "")) ||
          !(d->prop_vals[i] = kiln_strdup(g->prop_vals[i] ? g->prop_vals[i] : "")))
        return nomem();
  }
  return KILN_OK;
}

static kiln_status clone(const kiln_graph *g, bool shared, kiln_graph **out) {
  *out = NULL;
  kiln_graph *d = kiln_calloc(1, sizeof *d);
  if (!d) return nomem();
  kiln_status s = clone_into(d, g, shared);
  if (s) {
    kiln_graph_free(d);
    return s;
  }
  *out = d;
  return KILN_OK;
}

kiln_status kiln_edit_clone(const kiln_graph *g, kiln_graph **out) { return clone(g, false, out); }

kiln_status kiln_edit_clone_shared(const kiln_graph *g, kiln_graph **out) { return clone(g, true, out); }

kiln_status kiln_edit_new_graph(int64_t opset, kiln_graph **out) {
  *out = NULL;
  kiln_graph *g = kiln_calloc(1, sizeof *g);
  if (!g) return nomem();
  g->ir_version = 8;
  g->name = kiln_strdup("graph");
  g->opsets = kiln_calloc(1, sizeof *g->opsets);
  g->values = kiln_calloc(1, sizeof *g->values);
  g->nodes = kiln_calloc(1, sizeof *g->nodes);
  g->inputs = kiln_calloc(1, sizeof *g->inputs);
  g->outputs = kiln_calloc(1, sizeof *g->outputs);
  if (g->opsets && (g->opsets[0].domain = kiln_strdup(""))) g->n_opsets = 1;
  if (!g->name || !g->n_opsets || !g->values || !g->nodes || !g->inputs || !g->outputs) {
    kiln_graph_free(g);
    return nomem();
  }
  g->opsets[0].version = opset;
  *out = g;
  return KILN_OK;
}

/* ---- small queries ---- */

bool kiln_edit_is_const(const kiln_graph *g, int v) {
  return v >= 0 && v < g->n_values && g->values[v].init && !g->values[v].is_input;
}

bool kiln_edit_default_domain(const char *domain) {
  return !domain || !*domain || !strcmp(domain, "ai.onnx");
}

void kiln_edit_use_counts(const kiln_graph *g, int *uses) {
  memset(uses, 0, (size_t)g->n_values * sizeof *uses);
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) uses[g->nodes[i].in[k]]++;
}

int kiln_edit_replace_uses(kiln_graph *g, int from, int to) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == from) {
        g->nodes[i].in[k] = to;
        n++;
      }
  return n;
}

/* ---- adding ---- */

void kiln_edit_unique_name(const kiln_graph *g, const char *base, char *buf, size_t size) {
  snprintf(buf, size, "%s", base);
  if (kiln_graph_find_value(g, buf) < 0) return;
  size_t keep = strlen(base);
  if (size > 24 && keep > size - 24) keep = size - 24;
  for (long k = 1;; k++) {
    snprintf(buf, size, "%.*s_%ld", (int)keep, base, k);
    if (kiln_graph_find_value(g, buf) < 0) return;
  }
}

kiln_status kiln_edit_add_value(kiln_graph *g, const char *base, int *out) {
  char name[512];
  kiln_edit_unique_name(g, base && *base ? base : "v", name, sizeof name);
  kiln_value *vs = kiln_realloc(g->values, ((size_t)g->n_values + 1) * sizeof *vs);
  if (!vs) return nomem();
  g->values = vs;
  kiln_value *v = &vs[g->n_values];
  memset(v, 0, sizeof *v);
  if (!(v->name = kiln_strdup(name))) return nomem();
  v->producer = -1;
  v->type.kind = KILN_TYPE_UNKNOWN;
  v->type.dtype = KILN_UNDEFINED;
  v->type.rank = -1;
  *out = g->n_values++;
  return KILN_OK;
}

/* Sets a value's type to exactly the tensor's dtype and shape. */
static void type_from_tensor(kiln_type *ty, const kiln_tensor *t) {
  free_type(ty);
  ty->kind = KILN_TYPE_TENSOR;
  ty->dtype = t->dtype;
  ty->rank = t->rank;
  for (int d = 0; d < KILN_MAX_RANK; d++) ty->dims[d].value = d < t->rank ? t->dims[d] : 0;
}

kiln_status kiln_edit_add_const(kiln_graph *g, const char *base, kiln_tensor *t, int *out) {
  kiln_tensor *p = kiln_malloc(sizeof *p);
  if (!p) return nomem();
  int v;
  kiln_status s = kiln_edit_add_value(g, base, &v);
  if (s) {
    kiln_free(p);
    return s;
  }
  *p = *t;
  memset(t, 0, sizeof *t);
  g->values[v].init = p;
  type_from_tensor(&g->values[v].type, p);
  *out = v;
  return KILN_OK;
}

kiln_status kiln_edit_add_input(kiln_graph *g, const char *name, kiln_dtype dtype, int rank, const int64_t *dims,
                                int *out) {
  if (kiln_graph_find_value(g, name) >= 0) return kiln_fail(KILN_E_MODEL, "value '%s' already exists", name);
  if (rank < 0 || rank > KILN_MAX_RANK) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "rank %d", rank);
  int *ins = kiln_realloc(g->inputs, ((size_t)g->n_inputs + 1) * sizeof *ins);
  if (!ins) return nomem();
  g->inputs = ins;
  int v;
  kiln_status s = kiln_edit_add_value(g, name, &v);
  if (s) return s;
  kiln_type *ty = &g->values[v].type;
  ty->kind = KILN_TYPE_TENSOR;
  ty->dtype = dtype;
  ty->rank = rank;
  for (int d = 0; d < rank; d++) ty->dims[d].value = dims[d];
  g->values[v].is_input = true;
  g->inputs[g->n_inputs++] = v;
  *out = v;
  return KILN_OK;
}

kiln_status kiln_edit_add_output(kiln_graph *g, int v) {
  if (v < 0 || v >= g->n_values) return kiln_fail(KILN_E_INTERNAL, "output value %d out of range", v);
  if (g->values[v].is_output)
    return kiln_fail(KILN_E_MODEL, "value '%s' is already a graph output", g->values[v].name);
  int *outs = kiln_realloc(g->outputs, ((size_t)g->n_outputs + 1) * sizeof *outs);
  if (!outs) return nomem();
  g->outputs = outs;
  g->outputs[g->n_outputs++] = v;
  g->values[v].is_output = true;
  return KILN_OK;
}

kiln_status kiln_edit_insert_node(kiln_graph *g, int pos, const char *name, const char *op_type,
                                  const char *domain, int n_in, const int *in, int n_out, const int *out,
                                  int *index) {
  if (pos < 0 || pos > g->n_nodes || n_in < 0 || n_out < 0)
    return kiln_fail(KILN_E_INTERNAL, "cannot insert a node at %d of %d", pos, g->n_nodes);
  for (int k = 0; k < n_in; k++)
    if (in[k] < -1 || in[k] >= g->n_values)
      return kiln_fail(KILN_E_INTERNAL, "%s: input %d refers to value %d of %d", op_type, k, in[k], g->n_values);
  for (int k = 0; k < n_out; k++) {
    int v = out[k];
    if (v < -1 || v >= g->n_values)
      return kiln_fail(KILN_E_INTERNAL, "%s: output %d refers to value %d of %d", op_type, k, v, g->n_values);
    if (v >= 0 && (g->values[v].producer >= 0 || g->values[v].init || g->values[v].is_input))
      return kiln_fail(KILN_E_INTERNAL, "%s: output '%s' is already defined", op_type, g->values[v].name);
  }
  int64_t ver = kiln_graph_opset(g, domain);
  if (ver < 0) return kiln_fail(KILN_E_MODEL, "%s: no opset is imported for domain '%s'", op_type, domain);
  kiln_node n = {0};
  n.opset = (int)ver;
  n.src = -1;
  n.name = kiln_strdup(name ? name : "");
  n.op_type = kiln_strdup(op_type);
  n.domain = kiln_strdup(domain ? domain : "");
  n.in = kiln_calloc((size_t)n_in + 1, sizeof *n.in);
  n.out = kiln_calloc((size_t)n_out + 1, sizeof *n.out);
  n.attrs = kiln_calloc(1, sizeof *n.attrs);
  kiln_node *ns = NULL;
  if (n.name && n.op_type && n.domain && n.in && n.out && n.attrs)
    ns = kiln_realloc(g->nodes, ((size_t)g->n_nodes + 1) * sizeof *ns);
  if (!ns) {
    free_node(&n);
    return nomem();
  }
  g->nodes = ns;
  n.n_in = n_in;
  n.n_out = n_out;
  if (n_in) memcpy(n.in, in, (size_t)n_in * sizeof *in);
  if (n_out) memcpy(n.out, out, (size_t)n_out * sizeof *out);
  memmove(&ns[pos + 1], &ns[pos], (size_t)(g->n_nodes - pos) * sizeof *ns);
  ns[pos] = n;
  g->n_nodes++;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].producer >= pos) g->values[v].producer++;
  for (int k = 0; k < n_out; k++)
    if (out[k] >= 0) g->values[out[k]].producer = pos;
  if (index) *index = pos;
  return KILN_OK;
}

/* ---- removing ---- */

int kiln_edit_remove_nodes(kiln_graph *g, const bool *drop) {
  int j = 0, removed = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    if (drop[i]) {
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0 && g->values[n->out[k]].producer == i) g->values[n->out[k]].producer = -1;
      free_node(n);
      removed++;
      continue;
    }
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) g->values[n->out[k]].producer = j;
    if (j != i) g->nodes[j] = *n;
    j++;
  }
  g->n_nodes = j;
  return removed;
}

void kiln_edit_remove_node(kiln_graph *g, int i) {
  for (int k = 0; k < g->nodes[i].n_out; k++) {
    int v = g->nodes[i].out[k];
    if (v >= 0 && g->values[v].producer == i) g->values[v].producer = -1;
  }
  free_node(&g->nodes[i]);
  memmove(&g->nodes[i], &g->nodes[i + 1], (size_t)(g->n_nodes - i - 1) * sizeof *g->nodes);
  g->n_nodes--;
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].producer > i) g->values[v].producer--;
}

kiln_status kiln_edit_compact(kiln_graph *g, int *dropped) {
  if (dropped) *dropped = 0;
  int nv = g->n_values;
  int *map = kiln_calloc((size_t)nv + 1, sizeof *map);
  if (!map) return nomem();
  for (int v = 0; v < nv; v++) map[v] = g->values[v].is_input || g->values[v].is_output;
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) map[n->in[k]] = 1;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) map[n->out[k]] = 1;
  }
  int j = 0;
  for (int v = 0; v < nv; v++) {
    if (!map[v]) {
      free_value(&g->values[v]);
      map[v] = -1;
      continue;
    }
    if (j != v) g->values[j] = g->values[v];
    map[v] = j++;
  }
  g->n_values = j;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) n->in[k] = map[n->in[k]];
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0) n->out[k] = map[n->out[k]];
  }
  for (int i = 0; i < g->n_inputs; i++) g->inputs[i] = map[g->inputs[i]];
  for (int i = 0; i < g->n_outputs; i++) g->outputs[i] = map[g->outputs[i]];
  kiln_free(map);
  if (dropped) *dropped = nv - j;
  return KILN_OK;
}

/* ---- attributes ---- */

/* Installs the filled attribute *a on n under its name, replacing any
 * attribute of that name. On failure *a is left to the caller. */
static kiln_status put_attr(kiln_node *n, kiln_attr *a) {
  for (int i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, a->name)) {
      kiln_edit_free_attr(&n->attrs[i]);
      n->attrs[i] = *a;
      return KILN_OK;
    }
  kiln_attr *as = kiln_realloc(n->attrs, ((size_t)n->n_attrs + 1) * sizeof *as);
  if (!as) return nomem();
  n->attrs = as;
  as[n->n_attrs++] = *a;
  return KILN_OK;
}

/* put_attr, freeing *a when it fails. */
static kiln_status put_or_free(kiln_node *n, kiln_attr *a) {
  kiln_status s = put_attr(n, a);
  if (s) kiln_edit_free_attr(a);
  return s;
}

static kiln_status new_attr(kiln_attr *a, const char *name, kiln_attr_type type) {
  memset(a, 0, sizeof *a);
  a->type = type;
  if (!(a->name = kiln_strdup(name))) return nomem();
  return KILN_OK;
}

kiln_status kiln_edit_set_int(kiln_node *n, const char *name, int64_t v) {
  kiln_attr a;
  if (new_attr(&a, name, KILN_ATTR_INT)) return nomem();
  a.i = v;
  return put_or_free(n, &a);
}

kiln_status kiln_edit_set_float(kiln_node *n, const char *name, float v) {
  kiln_attr a;
  if (new_attr(&a, name, KILN_ATTR_FLOAT)) return nomem();
  a.f = v;
  return put_or_free(n, &a);
}

kiln_status kiln_edit_set_ints(kiln_node *n, const char *name, const int64_t *v, size_t count) {
  kiln_attr a;
  if (new_attr(&a, name, KILN_ATTR_INTS)) return nomem();
  a.n = count;
  if (count) {
    if (!(a.ints = kiln_malloc(count * sizeof *a.ints))) {
      kiln_edit_free_attr(&a);
      return nomem();
    }
    memcpy(a.ints, v, count * sizeof *a.ints);
  }
  return put_or_free(n, &a);
}

kiln_status kiln_edit_set_floats(kiln_node *n, const char *name, const float *v, size_t count) {
  kiln_attr a;
  if (new_attr(&a, name, KILN_ATTR_FLOATS)) return nomem();
  a.n = count;
  if (count) {
    if (!(a.floats = kiln_malloc(count * sizeof *a.floats))) {
      kiln_edit_free_attr(&a);
      return nomem();
    }
    memcpy(a.floats, v, count * sizeof *a.floats);
  }
  return put_or_free(n, &a);
}

kiln_status kiln_edit_set_string(kiln_node *n, const char *name, const char *v) {
  kiln_attr a;
  if (new_attr(&a, name, KILN_ATTR_STRING)) return nomem();
  if (!(a.s = kiln_strdup(v))) {
    kiln_edit_free_attr(&a);
    return nomem();
  }
  return put_or_free(n, &a);
}

kiln_status kiln_edit_set_tensor(kiln_node *n, const char *name, kiln_tensor *t) {
  kiln_attr a;
  if (new_attr(&a, name, KILN_ATTR_TENSOR)) return nomem();
  if (!(a.t = kiln_malloc(sizeof *a.t))) {
    kiln_edit_free_attr(&a);
    return nomem();
  }
  *a.t = *t;
  kiln_status s = put_attr(n, &a);
  if (s) {
    memset(a.t, 0, sizeof *a.t); /* the data stays with the caller */
    kiln_edit_free_attr(&a);
    return s;
  }
  memset(t, 0, sizeof *t);
  return KILN_OK;
}

bool kiln_edit_remove_attr(kiln_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) {
      kiln_edit_free_attr(&n->attrs[i]);
      memmove(&n->attrs[i], &n->attrs[i + 1], (size_t)(n->n_attrs - i - 1) * sizeof *n->attrs);
      n->n_attrs--;
      return true;
    }
  return false;
}

/* ---- checking ---- */

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull;
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

/* Value names are non-empty and unique (open-addressing set). */
static kiln_status check_names(const kiln_graph *g) {
  size_t cap = 16;
  while (cap < (size_t)g->n_values * 2) cap <<= 1;
  int *slot = kiln_malloc(cap * sizeof *slot);
  if (!slot) return nomem();
  for (size_t i = 0; i < cap; i++) slot[i] = -1;
  kiln_status s = KILN_OK;
  for (int v = 0; v < g->n_values && !s; v++) {
    const char *nm = g->values[v].name;
    if (!nm || !*nm) {
      s = kiln_fail(KILN_E_INTERNAL, "value %d has no name", v);
      break;
    }
    for (size_t i = hash_name(nm) & (cap - 1);; i = (i + 1) & (cap - 1)) {
      if (slot[i] < 0) {
        slot[i] = v;
        break;
      }
      if (!strcmp(g->values[slot[i]].name, nm)) {
        s = kiln_fail(KILN_E_INTERNAL, "values %d and %d are both named '%s'", slot[i], v, nm);
        break;
      }
    }
  }
  kiln_free(slot);
  return s;
}

static kiln_status check_io(const kiln_graph *g, const int *list, int count, bool output, const int *writer) {
  const char *what = output ? "output" : "input";
  int flagged = 0;
  for (int v = 0; v < g->n_values; v++) flagged += output ? g->values[v].is_output : g->values[v].is_input;
  if (flagged != count)
    return kiln_fail(KILN_E_INTERNAL, "%d values are flagged as graph %ss, %d are listed", flagged, what, count);
  for (int i = 0; i < count; i++) {
    int v = list[i];
    if (v < 0 || v >= g->n_values) return kiln_fail(KILN_E_INTERNAL, "graph %s %d is value %d", what, i, v);
    const kiln_value *val = &g->values[v];
    if (!(output ? val->is_output : val->is_input))
      return kiln_fail(KILN_E_INTERNAL, "graph %s '%s' is not flagged as one", what, val->name);
    for (int j = 0; j < i; j++)
      if (list[j] == v) return kiln_fail(KILN_E_INTERNAL, "graph %s '%s' is listed twice", what, val->name);
    if (output && !val->is_input && !val->init && writer[v] < 0)
      return kiln_fail(KILN_E_INTERNAL, "graph output '%s' is never defined", val->name);
  }
  return KILN_OK;
}

static kiln_status check_nodes(const kiln_graph *g, int *writer) {
  for (int v = 0; v < g->n_values; v++) writer[v] = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    char lbl[256];
    kiln_node_label(g, n, lbl, sizeof lbl);
    if (!n->op_type || !*n->op_type || !n->domain)
      return kiln_fail(KILN_E_INTERNAL, "node %s has no op_type or domain", lbl);
    if (n->n_in < 0 || n->n_out < 0 || n->n_attrs < 0 || (n->n_in && !n->in) || (n->n_out && !n->out))
      return kiln_fail(KILN_E_INTERNAL, "node %s (%s) has bad counts", lbl, n->op_type);
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < -1 || v >= g->n_values)
        return kiln_fail(KILN_E_INTERNAL, "node %s (%s): input %d is value %d of %d", lbl, n->op_type, k, v,
                         g->n_values);
      if (v < 0) continue;
      const kiln_value *val = &g->values[v];
      if (!val->is_input && !val->init && writer[v] < 0)
        return kiln_fail(KILN_E_INTERNAL, "node %s (%s): input '%s' is not defined before it", lbl, n->op_type,
                         val->name);
    }
    for (int k = 0; k < n->n_out; k++) {
      int v = n->out[k];
      if (v < -1 || v >= g->n_values)
        return kiln_fail(KILN_E_INTERNAL, "node %s (%s): output %d is value %d of %d", lbl, n->op_type, k, v,
                         g->n_values);
      if (v < 0) continue;
      const kiln_value *val = &g->values[v];
      if (writer[v] >= 0)
        return kiln_fail(KILN_E_INTERNAL, "node %s (%s): output '%s' is also written by node %d", lbl,
                         n->op_type, val->name, writer[v]);
      if (val->is_input || val->init)
        return kiln_fail(KILN_E_INTERNAL, "node %s (%s): output '%s' is a graph input or an initializer", lbl,
                         n->op_type, val->name);
      writer[v] = i;
    }
  }
  for (int v = 0; v < g->n_values; v++)
    if (g->values[v].producer != writer[v])
      return kiln_fail(KILN_E_INTERNAL, "value '%s' records producer %d, but node %d writes it", g->values[v].name,
                       g->values[v].producer, writer[v]);
  return KILN_OK;
}

kiln_status kiln_edit_check(const kiln_graph *g) {
  if (g->n_values < 0 || g->n_nodes < 0 || g->n_inputs < 0 || g->n_outputs < 0)
    return kiln_fail(KILN_E_INTERNAL, "negative counts in the graph");
  kiln_status s = check_names(g);
  if (s) return s;
  int *writer = kiln_calloc((size_t)g->n_values + 1, sizeof *writer);
  if (!writer) return nomem();
  s = check_nodes(g, writer);
  if (!s) s = check_io(g, g->inputs, g->n_inputs, false, writer);
  if (!s) s = check_io(g, g->outputs, g->n_outputs, true, writer);
  kiln_free(writer);
  return s;
}
