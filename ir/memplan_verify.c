/* ir/memplan_verify: the memory plan's checker. It recomputes lifetimes,
 * views and bounds from the request with its own code, sharing none with the
 * planner, so that a planner bug cannot hide in both. */
#include <inttypes.h>
#include <stdlib.h>

#include "ir/alloc.h"
#include "ir/memplan.h"

static uint64_t align_up(uint64_t n) {
  return (n + KILN_MEMPLAN_ALIGN - 1) / KILN_MEMPLAN_ALIGN * KILN_MEMPLAN_ALIGN;
}

/* root[v]: the value owning v's storage through views; fails on a bad index
 * or a cycle. */
static kiln_status view_roots(const int *alias_of, int n, int *root) {
  for (int v = 0; v < n; v++) {
    int r = v;
    for (int hops = 0; alias_of && alias_of[r] >= 0; hops++) {
      if (alias_of[r] >= n || hops >= n)
        return kiln_fail(KILN_E_INTERNAL, "memplan check: the views of value %d are broken (index or cycle)", v);
      r = alias_of[r];
    }
    root[v] = r;
  }
  return KILN_OK;
}

/* The reason step sp may not write w over in's storage, or NULL: the step
 * must not touch either storage other than by reading in and writing w. */
static const char *other_access(const kiln_step *sp, const int *root, int in, int w) {
  for (int k = 0; k < sp->n_reads; k++) {
    int v = sp->reads[k];
    if (v != in && root[v] == root[in]) return "the step reads another view of the input's storage";
    if (root[v] == w) return "the step reads the output's storage";
  }
  for (int k = 0; k < sp->n_writes; k++) {
    int v = sp->writes[k];
    if (root[v] == root[in]) return "the step writes the input's storage";
    if (v != w && root[v] == w) return "the step writes another view of the output";
  }
  return NULL;
}

typedef struct vset {
  int start, end; /* lifetime of the alias set, -1 when unused */
  int donor_to;   /* the set it gave its storage to in place, or -1 */
  int donor_step;
} vset;

typedef struct by_start {
  int start, id;
} by_start;

static int by_start_cmp(const void *a, const void *b) {
  const by_start *x = a, *y = b;
  if (x->start != y->start) return (x->start > y->start) - (x->start < y->start);
  return (x->id > y->id) - (x->id < y->id);
}

static bool candidate_listed(const kiln_memplan_request *req, kiln_memplan_inplace x) {
  for (int i = 0; req->inplace && i < req->n_inplace; i++)
    if (req->inplace[i].step == x.step && req->inplace[i].out == x.out && req->inplace[i].in == x.in) return true;
  return false;
}

/* The checks themselves; scratch arrays are the caller's. */
static kiln_status verify_with(const kiln_memplan *p, const kiln_memplan_request *req, int *first, int *last,
                               int *root, vset *vs, by_start *order, uint64_t *live) {
  const kiln_schedule *s = req->sched;
  int n = s->n_values;
  const uint64_t *size = req->size;
  kiln_status st = view_roots(req->alias_of, n, root);
  if (st) return st;
  for (int v = 0; v < n; v++) first[v] = last[v] = -1, vs[v] = (vset){-1, -1, -1, -1};
  for (int i = 0; i < s->n_steps; i++) {
    const kiln_step *sp = &s->steps[i];
    for (int k = 0; k < sp->n_reads + sp->n_writes; k++) {
      int v = k < sp->n_reads ? sp->reads[k] : sp->writes[k - sp->n_reads];
      if (v < 0 || v >= n) return kiln_fail(KILN_E_INTERNAL, "memplan check: step %d uses value %d", i, v);
      if (first[v] < 0) first[v] = i;
      last[v] = i;
    }
  }
#define EXT(v) (req->external && req->external[root[v]])
  for (int v = 0; v < n; v++) {
    vset *x = &vs[root[v]];
    if (first[v] < 0) continue;
    if (x->start < 0 || first[v] < x->start) x->start = first[v];
    if (last[v] > x->end) x->end = last[v];
  }
  /* offsets: aligned, inside the arena, views at their base's */
  for (int v = 0; v < n; v++) {
    if (vs[root[v]].start < 0) continue;
    int64_t o = p->offset[v];
    if (EXT(v)) {
      if (o != KILN_MEMPLAN_NONE)
        return kiln_fail(KILN_E_INTERNAL, "memplan check: value %d lives outside the arena but has offset %" PRId64,
                         v, o);
      continue;
    }
    if (size[root[v]] > KILN_MEMPLAN_MAX_BYTES)
      return kiln_fail(KILN_E_INTERNAL, "memplan check: value %d has %" PRIu64 " bytes, over the limit", root[v],
                       size[root[v]]);
    uint64_t sz = align_up(size[root[v]]);
    if (o < 0 || o % KILN_MEMPLAN_ALIGN)
      return kiln_fail(KILN_E_INTERNAL, "memplan check: value %d (steps %d..%d) has offset %" PRId64
                       ", not a %d-aligned arena offset", v, vs[root[v]].start, vs[root[v]].end, o,
                       KILN_MEMPLAN_ALIGN);
    if (sz && (uint64_t)o + sz > p->arena_size)
      return kiln_fail(KILN_E_INTERNAL, "memplan check: value %d at [%" PRId64 ", %" PRIu64 ") ends past the arena (%"
                       PRIu64 " bytes)", v, o, (uint64_t)o + sz, p->arena_size);
    if (o != p->offset[root[v]])
      return kiln_fail(KILN_E_INTERNAL, "memplan check: view %d is at offset %" PRId64 ", its base %d at %" PRId64,
                       v, o, root[v], p->offset[root[v]]);
  }
  /* accepted in-place pairs: each a listed candidate, and safe */
  for (int i = 0; i < p->n_inplace; i++) {
    kiln_memplan_inplace x = p->inplace[i];
    if (x.step < 0 || x.step >= s->n_steps || x.out < 0 || x.out >= n || x.in < 0 || x.in >= n ||
        !candidate_listed(req, x))
      return kiln_fail(KILN_E_INTERNAL, "memplan check: in-place pair (step %d, out %d, in %d) was not proposed",
                       x.step, x.out, x.in);
    int r = root[x.in], w = x.out;
    const kiln_step *sp = &s->steps[x.step];
    const char *why = NULL;
    if (EXT(r) || EXT(w)) why = "a value is outside the arena";
    else if (root[w] != w) why = "the output is a view";
    else if (!kiln_step_reads(sp, x.in) || !kiln_step_writes(sp, w)) why = "the step does not read in / write out";
    else if (vs[r].end != x.step || vs[r].start >= x.step) why = "the input's storage is not last used at the step";
    else if (vs[w].start != x.step) why = "the output is not first used at the step";
    else if (size[r] != size[w]) why = "the sizes differ";
    else if (p->offset[r] != p->offset[w]) why = "the two are at different offsets";
    else if (vs[r].donor_to >= 0) why = "the input's storage was given twice";
    else why = other_access(sp, root, x.in, w);
    if (why)
      return kiln_fail(KILN_E_INTERNAL, "memplan check: in-place pair (step %d, out %d, in %d): %s", x.step, w, x.in,
                       why);
    vs[r].donor_to = w;
    vs[r].donor_step = x.step;
  }
  /* pairwise: storages live together must be disjoint in memory */
  int m = 0;
  for (int r = 0; r < n; r++)
    if (root[r] == r && vs[r].start >= 0 && !EXT(r) && size[r] > 0) order[m++] = (by_start){vs[r].start, r};
  qsort(order, (size_t)m, sizeof *order, by_start_cmp);
  uint64_t no_reuse = 0;
  for (int i = 0; i < m; i++) {
    int a = order[i].id;
    uint64_t oa = (uint64_t)p->offset[a], sa = align_up(size[a]);
    no_reuse += sa;
    live[vs[a].start] += sa;
    live[vs[a].end + 1] -= sa;
    if (vs[a].donor_to >= 0) live[vs[a].donor_step] -= sa, live[vs[a].donor_step + 1] += sa;
    for (int j = i + 1; j < m && order[j].start <= vs[a].end; j++) {
      int b = order[j].id;
      uint64_t ob = (uint64_t)p->offset[b], sb = align_up(size[b]);
      if (oa >= ob + sb || ob >= oa + sa) continue;
      if ((vs[a].donor_to == b && vs[a].end == vs[b].start) || (vs[b].donor_to == a && vs[b].end == vs[a].start))
        continue;
      return kiln_fail(KILN_E_INTERNAL,
                       "memplan check: values %d (steps %d..%d, bytes [%" PRIu64 ", %" PRIu64 ")) and %d (steps "
                       "%d..%d, bytes [%" PRIu64 ", %" PRIu64 ")) are live together and overlap in memory",
                       a, vs[a].start, vs[a].end, oa, oa + sa, b, vs[b].start, vs[b].end, ob, ob + sb);
    }
  }
#undef EXT
  uint64_t lb = 0;
  for (int i = 0; i <= s->n_steps; i++) {
    if (i) live[i] += live[i - 1];
    if (live[i] > lb) lb = live[i];
  }
  if (lb != p->lower_bound || no_reuse != p->no_reuse)
    return kiln_fail(KILN_E_INTERNAL, "memplan check: the plan reports lower bound %" PRIu64 " and no-reuse %" PRIu64
                     ", the checker finds %" PRIu64 " and %" PRIu64, p->lower_bound, p->no_reuse, lb, no_reuse);
  if (p->arena_size < lb || p->arena_size > no_reuse)
    return kiln_fail(KILN_E_INTERNAL, "memplan check: arena of %" PRIu64 " bytes is outside [%" PRIu64 ", %" PRIu64
                     "]", p->arena_size, lb, no_reuse);
  return KILN_OK;
}

kiln_status kiln_memplan_verify(const kiln_memplan *plan, const kiln_memplan_request *req) {
  if (!plan || !req || !req->sched || !req->size)
    return kiln_fail(KILN_E_INTERNAL, "memplan check: needs a plan, a schedule and value sizes");
  int n = req->sched->n_values;
  if (plan->n_values != n)
    return kiln_fail(KILN_E_INTERNAL, "memplan check: plan has %d values, the schedule %d", plan->n_values, n);
  size_t nn = (size_t)(n ? n : 1);
  int *first = kiln_malloc(nn * sizeof *first), *last = kiln_malloc(nn * sizeof *last);
  int *root = kiln_malloc(nn * sizeof *root);
  vset *vs = kiln_malloc(nn * sizeof *vs);
  by_start *order = kiln_malloc(nn * sizeof *order);
  uint64_t *live = kiln_calloc((size_t)req->sched->n_steps + 2, sizeof *live);
  kiln_status st = !first || !last || !root || !vs || !order || !live
                       ? kiln_fail(KILN_E_NOMEM, "memplan check: out of memory for %d values", n)
                       : verify_with(plan, req, first, last, root, vs, order, live);
  kiln_free(first);
  kiln_free(last);
  kiln_free(root);
  kiln_free(vs);
  kiln_free(order);
  kiln_free(live);
  return st;
}
