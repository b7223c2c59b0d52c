/* fuse/group: the greedy grouping pass over a schedule, the merge of each
 * group's steps, and the per-step kernel specs. */
#include "fuse/group.h"

#include <string.h>

#include "fuse/fuse_impl.h"
#include "ir/alloc.h"

void kiln_fuse_plan_free(kiln_fuse_plan *p) {
  if (!p) return;
  for (int i = 0; p->spec && i < p->n_steps; i++) kiln_fuse_spec_free(p->spec[i]);
  kiln_free(p->spec);
  kiln_free(p);
}

kiln_status kiln_fuse_schedule(kiln_fuse_ctx *c, kiln_schedule *s, kiln_fuse_plan **out) {
  *out = NULL;
  if (s->n_values != c->g->n_values)
    return kiln_fail(KILN_E_INTERNAL, "fuse: the schedule has %d values, the graph %d", s->n_values, c->g->n_values);
  kiln_fuse_ctx_reset(c);
  int n = s->n_steps;
  int *gid = kiln_malloc(sizeof *gid * (size_t)(n + 1));
  int *len = kiln_malloc(sizeof *len * (size_t)(n + 1));
  kiln_fuse_plan *p = kiln_calloc(1, sizeof *p);
  kiln_status st = KILN_OK;
  if (!gid || !len || !p) st = kiln_fail(KILN_E_NOMEM, "fuse: out of memory grouping %d steps", n);
  /* 1. the partition: greedy, in schedule order */
  for (int i = 0; i < n && !st; i++) {
    const kiln_step *step = &s->steps[i];
    gid[i] = -1;
    if (step->n_nodes != 1) { /* not one node: a barrier */
      c->open = -1;
      continue;
    }
    int node = step->nodes[0];
    if (node < 0 || node >= c->g->n_nodes || c->group_of[node] >= 0)
      st = kiln_fail(KILN_E_INTERNAL, "fuse: step %d covers node %d twice or out of range", i, node);
    else if (c->open >= 0 && kiln_fuse_ctx_join(c, node, NULL, 0))
      gid[i] = c->open;
    else
      st = kiln_fuse_ctx_open(c, node, &gid[i]);
  }
  c->open = -1;
  /* 2. runs of steps of one group (in place: run r's group in gid[r]),
     merged from the last so that earlier indices stay valid; afterwards
     run r is step r */
  int n_runs = 0;
  for (int i = 0; i < n && !st; i++) {
    int g = gid[i];
    if (n_runs > 0 && g >= 0 && gid[n_runs - 1] == g) {
      len[n_runs - 1]++;
    } else {
      gid[n_runs] = g;
      len[n_runs++] = 1;
    }
  }
  for (int r = n_runs - 1, end = n; r >= 0 && !st; r--) {
    int start = end - len[r];
    if (len[r] > 1) st = kiln_schedule_merge(s, start, len[r]);
    end = start;
  }
  if (!st && s->n_steps != n_runs)
    st = kiln_fail(KILN_E_INTERNAL, "fuse: %d steps after merging, %d groups", s->n_steps, n_runs);
  /* 3. a spec per step */
  if (!st && !(p->spec = kiln_calloc((size_t)s->n_steps + 1, sizeof *p->spec)))
    st = kiln_fail(KILN_E_NOMEM, "fuse: out of memory for %d specs", s->n_steps);
  if (!st) p->n_steps = s->n_steps;
  for (int i = 0; i < s->n_steps && !st; i++) {
    kiln_step *step = &s->steps[i];
    if (gid[i] < 0) continue;
    st = kiln_fuse_spec_build(c, gid[i], step->nodes, step->n_nodes, step->writes, step->n_writes, &p->spec[i]);
    if (st) break;
    kiln_fuse_spec *sp = p->spec[i];
    step->tag = (int)sp->kind;
    step->user = sp;
    p->n_groups++;
    p->by_kind[sp->kind]++;
    if (sp->n_nodes > 1) p->fused_nodes += sp->n_nodes;
    if (!sp->bound) p->n_unbound++;
  }
  kiln_free(gid);
  kiln_free(len);
  if (st) {
    for (int i = 0; p && p->spec && i < s->n_steps; i++)
      if (p->spec[i] && s->steps[i].user == p->spec[i]) s->steps[i].user = NULL, s->steps[i].tag = 0;
    kiln_fuse_plan_free(p);
    return st;
  }
  *out = p;
  return KILN_OK;
}
