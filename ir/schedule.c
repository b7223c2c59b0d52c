/* ir/schedule: building the step list from a graph, merging steps, freeing. */
#include "ir/schedule.h"

#include <string.h>

#include "ir/alloc.h"

static bool has(const int *a, int n, int v) {
  for (int i = 0; i < n; i++)
    if (a[i] == v) return true;
  return false;
}

bool kiln_step_reads(const kiln_step *st, int v) { return has(st->reads, st->n_reads, v); }
bool kiln_step_writes(const kiln_step *st, int v) { return has(st->writes, st->n_writes, v); }

static void step_clear(kiln_step *st) {
  kiln_free(st->reads);
  kiln_free(st->writes);
  kiln_free(st->nodes);
  memset(st, 0, sizeof *st);
}

void kiln_schedule_free(kiln_schedule *s) {
  if (!s) return;
  for (int i = 0; i < s->n_steps; i++) step_clear(&s->steps[i]);
  kiln_free(s->steps);
  kiln_free(s->keep);
  kiln_free(s);
}

kiln_status kiln_schedule_new(int n_values, kiln_schedule **out) {
  *out = NULL;
  if (n_values < 0) return kiln_fail(KILN_E_INTERNAL, "schedule: negative value count %d", n_values);
  kiln_schedule *s = kiln_calloc(1, sizeof *s);
  if (!s) return kiln_fail(KILN_E_NOMEM, "schedule: out of memory");
  s->n_values = n_values;
  s->keep = kiln_calloc((size_t)n_values, sizeof *s->keep);
  if (!s->keep) {
    kiln_free(s);
    return kiln_fail(KILN_E_NOMEM, "schedule: out of memory for %d values", n_values);
  }
  *out = s;
  return KILN_OK;
}

/* Copies the distinct entries of src (skipping -1) into a new array. */
static kiln_status copy_distinct(const int *src, int n, int **dst, int *nd) {
  *dst = kiln_malloc((size_t)(n > 0 ? n : 1) * sizeof **dst);
  *nd = 0;
  if (!*dst) return kiln_fail(KILN_E_NOMEM, "schedule: out of memory");
  for (int i = 0; i < n; i++)
    if (src[i] >= 0 && !has(*dst, *nd, src[i])) (*dst)[(*nd)++] = src[i];
  return KILN_OK;
}

static kiln_status grow(kiln_schedule *s) {
  if (s->n_steps < s->cap_steps) return KILN_OK;
  int cap = s->cap_steps ? s->cap_steps * 2 : 16;
  kiln_step *st = kiln_realloc(s->steps, (size_t)cap * sizeof *st);
  if (!st) return kiln_fail(KILN_E_NOMEM, "schedule: out of memory for %d steps", cap);
  s->steps = st;
  s->cap_steps = cap;
  return KILN_OK;
}

kiln_status kiln_schedule_add_step(kiln_schedule *s, const int *reads, int n_reads, const int *writes,
                                   int n_writes, int node) {
  for (int i = 0; i < n_reads + n_writes; i++) {
    int v = i < n_reads ? reads[i] : writes[i - n_reads];
    if (v < -1 || v >= s->n_values)
      return kiln_fail(KILN_E_INTERNAL, "schedule: step %d %s value %d, outside [0, %d)", s->n_steps,
                       i < n_reads ? "reads" : "writes", v, s->n_values);
  }
  kiln_status st = grow(s);
  if (st) return st;
  kiln_step step = {0};
  if ((st = copy_distinct(reads, n_reads, &step.reads, &step.n_reads)) ||
      (st = copy_distinct(writes, n_writes, &step.writes, &step.n_writes)) ||
      (st = copy_distinct(&node, node >= 0 ? 1 : 0, &step.nodes, &step.n_nodes))) {
    step_clear(&step);
    return st;
  }
  s->steps[s->n_steps++] = step;
  return KILN_OK;
}

kiln_status kiln_schedule_from_graph(const kiln_graph *g, kiln_schedule **out) {
  kiln_schedule *s;
  *out = NULL;
  kiln_status st = kiln_schedule_new(g->n_values, &s);
  if (st) return st;
  for (int i = 0; i < g->n_values; i++) s->keep[i] = g->values[i].is_output;
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0) continue;
      const kiln_value *val = v < g->n_values ? &g->values[v] : NULL;
      if (val && (val->is_input || val->init || (val->producer >= 0 && val->producer < i))) continue;
      char lbl[64];
      kiln_schedule_free(s);
      return kiln_fail(KILN_E_MODEL, "schedule: node %s (%s) reads value %s before any node writes it",
                       kiln_node_label(g, n, lbl, sizeof lbl), n->op_type ? n->op_type : "?",
                       val && val->name ? val->name : "(out of range)");
    }
    if ((st = kiln_schedule_add_step(s, n->in, n->n_in, n->out, n->n_out, i))) {
      kiln_schedule_free(s);
      return st;
    }
  }
  *out = s;
  return KILN_OK;
}

kiln_status kiln_schedule_merge(kiln_schedule *s, int first, int count) {
  if (first < 0 || count < 1 || first > s->n_steps - count)
    return kiln_fail(KILN_E_INTERNAL, "schedule: cannot merge steps [%d, %d) of %d", first, first + count,
                     s->n_steps);
  if (count == 1) return KILN_OK;
  int end = first + count, nr = 0, nw = 0, nn = 0;
  for (int i = first; i < end; i++) {
    nr += s->steps[i].n_reads;
    nw += s->steps[i].n_writes;
    nn += s->steps[i].n_nodes;
  }
  /* outside[v]: a step outside the group touches v. */
  bool *outside = kiln_calloc((size_t)s->n_values, sizeof *outside);
  kiln_step m = {0};
  m.reads = kiln_malloc((size_t)(nr ? nr : 1) * sizeof *m.reads);
  m.writes = kiln_malloc((size_t)(nw ? nw : 1) * sizeof *m.writes);
  m.nodes = kiln_malloc((size_t)(nn ? nn : 1) * sizeof *m.nodes);
  if (!outside || !m.reads || !m.writes || !m.nodes) {
    kiln_free(outside);
    step_clear(&m);
    return kiln_fail(KILN_E_NOMEM, "schedule: out of memory merging %d steps", count);
  }
  for (int i = 0; i < s->n_steps; i++) {
    if (i >= first && i < end) continue;
    const kiln_step *st = &s->steps[i];
    for (int k = 0; k < st->n_reads; k++) outside[st->reads[k]] = true;
    for (int k = 0; k < st->n_writes; k++) outside[st->writes[k]] = true;
  }
  /* m.writes[0..n_all) first collects every member's writes; a read of one
   * of them is internal. Then the writes are filtered in place. */
  int n_all = 0;
  for (int i = first; i < end; i++) {
    const kiln_step *st = &s->steps[i];
    for (int k = 0; k < st->n_reads; k++) {
      int v = st->reads[k];
      if (!has(m.writes, n_all, v) && !has(m.reads, m.n_reads, v)) m.reads[m.n_reads++] = v;
    }
    for (int k = 0; k < st->n_writes; k++)
      if (!has(m.writes, n_all, st->writes[k])) m.writes[n_all++] = st->writes[k];
    for (int k = 0; k < st->n_nodes; k++) m.nodes[m.n_nodes++] = st->nodes[k];
  }
  for (int k = 0; k < n_all; k++) {
    int v = m.writes[k];
    if (s->keep[v] || outside[v]) m.writes[m.n_writes++] = v;
  }
  kiln_free(outside);
  m.tag = s->steps[first].tag;
  m.user = s->steps[first].user;
  for (int i = first; i < end; i++) step_clear(&s->steps[i]);
  s->steps[first] = m;
  memmove(&s->steps[first + 1], &s->steps[end], (size_t)(s->n_steps - end) * sizeof *s->steps);
  s->n_steps -= count - 1;
  return KILN_OK;
}
