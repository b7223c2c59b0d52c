/* ir/graph: graph lifetime and lookups. */
#include "ir/graph.h"

#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"

static void free_tensor(kiln_tensor *t) {
  if (!t) return;
  kiln_tensor_release(t);
  kiln_free(t);
}

static void free_type(kiln_type *t) {
  for (int i = 0; i < KILN_MAX_RANK; i++) kiln_free(t->dims[i].param);
}

void kiln_graph_free(kiln_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_values; i++) {
    kiln_free(g->values[i].name);
    free_type(&g->values[i].type);
    free_tensor(g->values[i].init);
  }
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    kiln_free(n->name);
    kiln_free(n->op_type);
    kiln_free(n->domain);
    kiln_free(n->in);
    kiln_free(n->out);
    for (int a = 0; a < n->n_attrs; a++) {
      kiln_attr *at = &n->attrs[a];
      kiln_free(at->name);
      kiln_free(at->s);
      kiln_free(at->ints);
      kiln_free(at->floats);
      if (at->strings)
        for (size_t k = 0; k < at->n; k++) kiln_free(at->strings[k]);
      kiln_free(at->strings);
      free_tensor(at->t);
    }
    kiln_free(n->attrs);
  }
  for (int i = 0; i < g->n_opsets; i++) kiln_free(g->opsets[i].domain);
  for (int i = 0; i < g->n_props; i++) {
    kiln_free(g->prop_keys[i]);
    kiln_free(g->prop_vals[i]);
  }
  kiln_free(g->prop_keys);
  kiln_free(g->prop_vals);
  kiln_free(g->opsets);
  kiln_free(g->values);
  kiln_free(g->nodes);
  kiln_free(g->inputs);
  kiln_free(g->outputs);
  kiln_free(g->name);
  kiln_free(g);
}

int kiln_graph_find_value(const kiln_graph *g, const char *name) {
  for (int i = 0; i < g->n_values; i++)
    if (!strcmp(g->values[i].name, name)) return i;
  return -1;
}

int64_t kiln_graph_opset(const kiln_graph *g, const char *domain) {
  int dflt = !domain || !*domain || !strcmp(domain, "ai.onnx");
  for (int i = 0; i < g->n_opsets; i++) {
    const char *d = g->opsets[i].domain;
    int odflt = !*d || !strcmp(d, "ai.onnx");
    if (dflt ? odflt : !strcmp(d, domain)) return g->opsets[i].version;
  }
  return -1;
}

const char *kiln_node_label(const kiln_graph *g, const kiln_node *n, char *buf, int size) {
  if (n->name && *n->name) snprintf(buf, (size_t)size, "%s", n->name);
  else snprintf(buf, (size_t)size, "#%d", n->src >= 0 ? n->src : (int)(n - g->nodes));
  return buf;
}

const kiln_attr *kiln_node_attr(const kiln_node *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (!strcmp(n->attrs[i].name, name)) return &n->attrs[i];
  return NULL;
}

int64_t kiln_attr_int(const kiln_node *n, const char *name, int64_t def) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_INT ? a->i : def;
}

float kiln_attr_float(const kiln_node *n, const char *name, float def) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (a && a->type == KILN_ATTR_FLOAT) return a->f;
  if (a && a->type == KILN_ATTR_INT) return (float)a->i;
  return def;
}

const char *kiln_attr_string(const kiln_node *n, const char *name, const char *def) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_STRING ? a->s : def;
}

const int64_t *kiln_attr_ints(const kiln_node *n, const char *name, size_t *count) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (a && a->type == KILN_ATTR_INTS) {
    *count = a->n;
    return a->ints ? a->ints : (const int64_t *)"";
  }
  *count = 0;
  return NULL;
}

const float *kiln_attr_floats(const kiln_node *n, const char *name, size_t *count) {
  const kiln_attr *a = kiln_node_attr(n, name);
  if (a && a->type == KILN_ATTR_FLOATS) {
    *count = a->n;
    return a->floats ? a->floats : (const float *)"";
  }
  *count = 0;
  return NULL;
}

const kiln_tensor *kiln_attr_tensor(const kiln_node *n, const char *name) {
  const kiln_attr *a = kiln_node_attr(n, name);
  return a && a->type == KILN_ATTR_TENSOR ? a->t : NULL;
}
