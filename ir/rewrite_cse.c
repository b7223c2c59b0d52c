/* ir/rewrite_cse: common subexpression elimination — equal constants, then
 * equal nodes, each merged into the first of its kind (see rewrite.h). */
#include <string.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/rewrite.h"
#include "ir/rewrite_impl.h"

static uint64_t mix(uint64_t h, uint64_t x) { return (h ^ x) * 1099511628211ull; }

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = mix(h, b[i]);
  return h;
}

static uint64_t hash_str(uint64_t h, const char *s) { return hash_bytes(h, s, strlen(s)); }

static uint64_t hash_tensor(const kiln_tensor *t) {
  uint64_t h = mix(mix(1469598103934665603ull, (uint64_t)t->dtype), (uint64_t)t->rank);
  h = hash_bytes(h, t->dims, (size_t)t->rank * sizeof *t->dims);
  /* the ends of the data only: equal hashes are confirmed by memcmp, and
   * large weights need not be read in full on every pass */
  size_t n = kiln_tensor_bytes(t), part = n < 512 ? n : 256;
  h = hash_bytes(h, t->data, part);
  return n <= part ? h : hash_bytes(h, (const char *)t->data + n - part, part);
}

static bool tensor_equal(const kiln_tensor *a, const kiln_tensor *b) {
  if (a->dtype != b->dtype || a->rank != b->rank || a->numel != b->numel) return false;
  if (memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims)) return false;
  size_t n = kiln_tensor_bytes(a);
  return !n || !memcmp(a->data, b->data, n);
}

/* Attribute equality by value; floats bit for bit (NaN equals itself, -0
 * differs from 0). Types whose content kiln does not keep never compare
 * equal. */
static bool attr_equal(const kiln_attr *a, const kiln_attr *b) {
  if (a->type != b->type) return false;
  switch (a->type) {
  case KILN_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
  case KILN_ATTR_INT: return a->i == b->i;
  case KILN_ATTR_STRING: return a->s && b->s && !strcmp(a->s, b->s);
  case KILN_ATTR_FLOATS: return a->n == b->n && (!a->n || !memcmp(a->floats, b->floats, a->n * sizeof *a->floats));
  case KILN_ATTR_INTS: return a->n == b->n && (!a->n || !memcmp(a->ints, b->ints, a->n * sizeof *a->ints));
  case KILN_ATTR_STRINGS:
    if (a->n != b->n) return false;
    for (size_t k = 0; k < a->n; k++)
      if (strcmp(a->strings[k], b->strings[k])) return false;
    return true;
  case KILN_ATTR_TENSOR: return a->t && b->t && tensor_equal(a->t, b->t);
  default: return false;
  }
}

static bool comparable(const kiln_graph *g, const kiln_node *n) {
  if (!kiln_edit_default_domain(n->domain) || kiln_rw_maybe_random(g, n) || n->n_out < 1) return false;
  for (int a = 0; a < n->n_attrs; a++) {
    kiln_attr_type t = n->attrs[a].type;
    if (t != KILN_ATTR_FLOAT && t != KILN_ATTR_INT && t != KILN_ATTR_STRING && t != KILN_ATTR_FLOATS &&
        t != KILN_ATTR_INTS && t != KILN_ATTR_STRINGS && !(t == KILN_ATTR_TENSOR && n->attrs[a].t))
      return false;
  }
  return true;
}

/* Hash of what node_equal compares (attributes by name only). */
static uint64_t hash_node(const kiln_node *n) {
  uint64_t h = hash_str(1469598103934665603ull, n->op_type);
  h = mix(mix(mix(h, (uint64_t)n->opset), (uint64_t)n->n_in), (uint64_t)n->n_out);
  for (int k = 0; k < n->n_in; k++) h = mix(h, (uint64_t)(int64_t)n->in[k]);
  uint64_t ah = 0; /* order-insensitive */
  for (int a = 0; a < n->n_attrs; a++) ah += hash_str(7, n->attrs[a].name);
  return mix(h, ah);
}

static bool node_equal(const kiln_node *a, const kiln_node *b) {
  if (strcmp(a->op_type, b->op_type) || a->opset != b->opset || a->n_in != b->n_in || a->n_out != b->n_out ||
      a->n_attrs != b->n_attrs)
    return false;
  if (kiln_edit_default_domain(a->domain) != kiln_edit_default_domain(b->domain)) return false;
  if (!kiln_edit_default_domain(a->domain) && strcmp(a->domain, b->domain)) return false;
  for (int k = 0; k < a->n_in; k++)
    if (a->in[k] != b->in[k]) return false;
  for (int k = 0; k < a->n_out; k++)
    if ((a->out[k] < 0) != (b->out[k] < 0)) return false;
  for (int i = 0; i < a->n_attrs; i++) {
    const kiln_attr *other = kiln_node_attr(b, a->attrs[i].name);
    if (!other || !attr_equal(&a->attrs[i], other)) return false;
  }
  return true;
}

/* Merges node b into the equal, earlier node a. Fails (changing nothing)
 * when an output of both is a graph output. */
static bool merge_nodes(kiln_rw_pass *p, int ai, int bi) {
  kiln_graph *g = p->g;
  kiln_node *a = &g->nodes[ai], *b = &g->nodes[bi];
  for (int k = 0; k < b->n_out; k++)
    if (b->out[k] >= 0 && g->values[b->out[k]].is_output && g->values[a->out[k]].is_output) return false;
  for (int k = 0; k < b->n_out; k++) {
    int av = a->out[k], bv = b->out[k];
    if (bv < 0) continue;
    if (g->values[bv].is_output) { /* a writes b's graph output; a's readers follow */
      a->out[k] = bv;
      g->values[bv].producer = ai;
      g->values[av].producer = -1;
      p->repl[av] = bv;
    } else {
      g->values[bv].producer = -1;
      p->repl[bv] = av;
    }
  }
  p->drop[bi] = true;
  return true;
}

/* Open-addressing table of indices (values or nodes) keyed by hash. */
typedef struct table {
  int *idx;
  uint64_t *hash;
  size_t cap;
} table;

static kiln_status table_init(table *t, int count) {
  t->cap = 16;
  while (t->cap < (size_t)count * 2) t->cap <<= 1;
  t->idx = kiln_malloc(t->cap * sizeof *t->idx);
  t->hash = kiln_malloc(t->cap * sizeof *t->hash);
  if (!t->idx || !t->hash) return kiln_fail(KILN_E_NOMEM, "out of memory in common subexpression elimination");
  for (size_t i = 0; i < t->cap; i++) t->idx[i] = -1;
  return KILN_OK;
}

static void table_free(table *t) {
  kiln_free(t->idx);
  kiln_free(t->hash);
}

/* Constants: each one equal to an earlier constant is replaced by it. */
static void merge_constants(kiln_rw_pass *p, table *t) {
  kiln_graph *g = p->g;
  for (int v = 0; v < g->n_values; v++) {
    if (!kiln_edit_is_const(g, v)) continue;
    const kiln_tensor *tv = g->values[v].init;
    uint64_t h = hash_tensor(tv);
    for (size_t s = h & (t->cap - 1);; s = (s + 1) & (t->cap - 1)) {
      if (t->idx[s] < 0) {
        t->idx[s] = v, t->hash[s] = h;
        break;
      }
      if (t->hash[s] == h && tensor_equal(g->values[t->idx[s]].init, tv)) {
        p->repl[v] = t->idx[s];
        if (p->uses[v] && p->st) p->st->cse_consts++;
        break;
      }
    }
  }
}

kiln_status kiln_rewrite_cse(kiln_graph *g, kiln_rewrite_stats *st) {
  if (kiln_rw_has_subgraphs(g)) return KILN_OK;
  kiln_rw_pass p;
  kiln_status s = kiln_rw_begin(&p, g, st);
  if (s) return s;
  table consts = {0}, nodes = {0};
  if ((s = table_init(&consts, g->n_values)) || (s = table_init(&nodes, g->n_nodes))) {
    table_free(&consts);
    table_free(&nodes);
    return kiln_rw_end(&p, s);
  }
  merge_constants(&p, &consts);
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_rw_resolve(&p, i);
    const kiln_node *n = &g->nodes[i];
    if (!comparable(g, n)) continue;
    uint64_t h = hash_node(n);
    for (size_t k = h & (nodes.cap - 1);; k = (k + 1) & (nodes.cap - 1)) {
      int j = nodes.idx[k];
      if (j < 0) {
        nodes.idx[k] = i, nodes.hash[k] = h;
        break;
      }
      if (nodes.hash[k] == h && node_equal(&g->nodes[j], n)) {
        if (merge_nodes(&p, j, i) && st) st->cse_nodes++;
        break;
      }
    }
  }
  table_free(&consts);
  table_free(&nodes);
  return kiln_rw_end(&p, KILN_OK);
}
