/* ir/memplan: liveness over the schedule, in-place decisions and best-fit
 * placement over lifetime intervals (the checker is in memplan_verify.c).
 *
 * Algorithm. (1) Every value's first and last step come from the schedule;
 * views join their base's "alias set", whose lifetime is the union of its
 * members'. (2) In-place candidates, in step order, chain alias sets into one
 * storage group when the input's storage dies at that step (see the header).
 * (3) Each group with bytes is a block: an interval [start, end] of steps
 * and an aligned size. Blocks are placed one at a time in a given order; a
 * block goes into a gap of the memory left free by the already placed blocks
 * whose intervals overlap its own (best fit: the smallest gap that holds it;
 * first fit: the lowest), or on top of them when no gap holds it. This is the
 * greedy-by-size offset calculation of Pisarchyk & Lee, "Efficient Memory
 * Management for Deep Neural Net Inference" (2020), as in TFLite. Because no
 * single order wins on every graph, several orders are tried (size, size then
 * start, lifetime length, size x length, start, and "breadth": the busiest
 * step a block is live at) with both fits. If none reaches the liveness lower
 * bound (which is then optimal), a local search moves blocks that end above
 * the bound earlier in the best order, keeping moves that do not grow the
 * arena (deterministic seed). A placement visits, for each block, the
 * blocks overlapping it in time (listed once up front, or scanned when the
 * lists would be too long) and sorts the placed ones by offset; tries and
 * moves stop at a work budget, so a very large or dense graph gets fewer. */
#include "ir/memplan.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"

static uint64_t align_up(uint64_t n) {
  return (n + KILN_MEMPLAN_ALIGN - 1) & ~(uint64_t)(KILN_MEMPLAN_ALIGN - 1);
}

/* Accesses of one value (or of one alias set): steps, -1 when none. */
typedef struct uses {
  int fw, fr; /* first write, first read */
  int fu, lu; /* first use, last use */
} uses;

/* A storage group: alias sets sharing one buffer, chained by in-place. */
typedef struct group {
  int owner;      /* root value of the first set; -1 once merged away */
  int tail;       /* root value of the latest set (the one that may donate) */
  int start, end; /* lifetime in steps, inclusive */
  uint64_t raw;   /* bytes of the owner */
  uint64_t size;  /* aligned */
} group;

typedef struct block {
  int start, end;
  uint64_t size;
} block;

typedef struct okey {
  double k[3];
  int id;
} okey;

typedef struct ctx {
  const kiln_memplan_request *req;
  int n, n_steps;
  int *root;
  bool *ext;
  uses *u;   /* per value */
  uses *set; /* per alias root, over its members */
  int *grp;  /* per alias root: group index or -1 */
  group *g;
  int ng;
} ctx;

static void ctx_free(ctx *c) {
  kiln_free(c->root);
  kiln_free(c->ext);
  kiln_free(c->u);
  kiln_free(c->set);
  kiln_free(c->grp);
  kiln_free(c->g);
}

void kiln_memplan_free(kiln_memplan *p) {
  if (!p) return;
  kiln_free(p->offset);
  kiln_free(p->storage);
  kiln_free(p->first);
  kiln_free(p->last);
  kiln_free(p->inplace);
  kiln_free(p);
}

void kiln_memplan_mark_external(const kiln_graph *g, bool *external) {
  for (int v = 0; v < g->n_values; v++) {
    const kiln_value *x = &g->values[v];
    external[v] = x->is_input || x->is_output || x->init != NULL;
  }
}

static void use_at(uses *x, int step, bool write) {
  if (write && x->fw < 0) x->fw = step;
  if (!write && x->fr < 0) x->fr = step;
  if (x->fu < 0) x->fu = step;
  x->lu = step; /* steps are scanned in increasing order */
}

static void use_merge(uses *into, const uses *from) {
  if (from->fu < 0) return;
  if (from->fw >= 0 && (into->fw < 0 || from->fw < into->fw)) into->fw = from->fw;
  if (from->fr >= 0 && (into->fr < 0 || from->fr < into->fr)) into->fr = from->fr;
  if (into->fu < 0 || from->fu < into->fu) into->fu = from->fu;
  if (from->lu > into->lu) into->lu = from->lu;
}

/* Alias roots, with range and cycle checks. */
static kiln_status resolve_aliases(const int *alias_of, int n, int *root) {
  for (int v = 0; v < n; v++) {
    int r = v, hops = 0;
    while (alias_of && alias_of[r] >= 0) {
      if (alias_of[r] >= n)
        return kiln_fail(KILN_E_INTERNAL, "memplan: value %d is a view of value %d, outside [0, %d)", r,
                         alias_of[r], n);
      r = alias_of[r];
      if (++hops > n) return kiln_fail(KILN_E_INTERNAL, "memplan: the views of value %d form a cycle", v);
    }
    root[v] = r;
  }
  return KILN_OK;
}

/* Liveness: per value and per alias set; externals; read-before-write. */
static kiln_status liveness(ctx *c) {
  const kiln_memplan_request *req = c->req;
  const kiln_schedule *s = req->sched;
  kiln_status st = resolve_aliases(req->alias_of, c->n, c->root);
  if (st) return st;
  for (int v = 0; v < c->n; v++) {
    c->u[v] = (uses){-1, -1, -1, -1};
    c->set[v] = c->u[v];
    c->grp[v] = -1;
  }
  for (int i = 0; i < c->n_steps; i++) {
    const kiln_step *sp = &s->steps[i];
    for (int k = 0; k < sp->n_reads + sp->n_writes; k++) {
      bool w = k >= sp->n_reads;
      int v = w ? sp->writes[k - sp->n_reads] : sp->reads[k];
      if (v < 0 || v >= c->n)
        return kiln_fail(KILN_E_INTERNAL, "memplan: step %d %s value %d, outside [0, %d)", i,
                         w ? "writes" : "reads", v, c->n);
      use_at(&c->u[v], i, w);
    }
  }
  for (int v = 0; v < c->n; v++) {
    int r = c->root[v];
    bool ext_v = req->external && req->external[v], ext_r = req->external && req->external[r];
    if (ext_v && !ext_r)
      return kiln_fail(KILN_E_INTERNAL,
                       "memplan: value %d lives outside the arena but is a view of arena value %d", v, r);
    c->ext[v] = ext_r;
    use_merge(&c->set[r], &c->u[v]);
  }
  for (int v = 0; v < c->n; v++) {
    int r = c->root[v];
    if (c->ext[v] || c->u[v].fr < 0) continue;
    int fw = c->set[r].fw;
    if (fw >= 0 && c->u[v].fr > fw) continue;
    if (v != r)
      return kiln_fail(KILN_E_INTERNAL, "memplan: value %d, a view of value %d, is read at step %d before %s",
                       v, r, c->u[v].fr, fw < 0 ? "its storage is ever written" : "its storage is written");
    if (fw < 0)
      return kiln_fail(KILN_E_INTERNAL, "memplan: value %d is read at step %d but never written (and is not "
                       "an input, output or weight)", v, c->u[v].fr);
    return kiln_fail(KILN_E_INTERNAL, "memplan: value %d is read at step %d before it is written (step %d)", v,
                     c->u[v].fr, fw);
  }
  return KILN_OK;
}

/* One group per used arena alias set; the no-reuse total. */
static kiln_status make_groups(ctx *c, uint64_t *no_reuse) {
  const uint64_t *size = c->req->size;
  uint64_t total = 0;
  for (int r = 0; r < c->n; r++) {
    if (c->root[r] != r || c->ext[r] || c->set[r].fu < 0) continue;
    if (size[r] > KILN_MEMPLAN_MAX_BYTES)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE,
                       "memplan: value %d needs %" PRIu64 " bytes, over the planner's limit of %" PRIu64
                       " (sizes overflow)", r, size[r], KILN_MEMPLAN_MAX_BYTES);
    total += align_up(size[r]);
    if (total > KILN_MEMPLAN_MAX_BYTES)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE,
                       "memplan: arena values need more than %" PRIu64 " bytes in all (sizes overflow)",
                       KILN_MEMPLAN_MAX_BYTES);
    c->grp[r] = c->ng;
    c->g[c->ng++] = (group){r, r, c->set[r].fu, c->set[r].lu, size[r], align_up(size[r])};
  }
  *no_reuse = total;
  return KILN_OK;
}

/* A candidate and its position in the request: sorted by step, then by the
 * caller's order, so the decisions do not depend on qsort's tie order. */
typedef struct candidate {
  kiln_memplan_inplace c;
  int idx;
} candidate;

static int cand_cmp(const void *a, const void *b) {
  const candidate *x = a, *y = b;
  if (x->c.step != y->c.step) return (x->c.step > y->c.step) - (x->c.step < y->c.step);
  return (x->idx > y->idx) - (x->idx < y->idx);
}

/* In place, step sp must touch the two storages only through r (read) and
 * w (written): another view of either, or a write of r, would see or clobber
 * the shared bytes in an order the op does not define. The reason, or NULL. */
static const char *step_conflict(const kiln_step *sp, const int *root, int r, int w) {
  for (int k = 0; k < sp->n_reads + sp->n_writes; k++) {
    bool wr = k >= sp->n_reads;
    int v = wr ? sp->writes[k - sp->n_reads] : sp->reads[k];
    if (root[v] == root[r] && (v != r || wr)) return "the step also writes the input or touches another view of it";
    if (root[v] == w && (v != w || !wr)) return "the step also reads the output or touches a view of it";
  }
  return NULL;
}

/* Why candidate (s, w, r) may not go in place, or NULL when it may. */
static const char *inplace_refusal(const ctx *c, int s, int w, int r) {
  if (c->ext[w] || c->ext[r]) return "a value lives outside the arena";
  if (c->root[w] != w) return "the output is a view";
  const kiln_step *sp = &c->req->sched->steps[s];
  if (!kiln_step_reads(sp, r) || !kiln_step_writes(sp, w))
    return "the step does not read the input and write the output";
  int rr = c->root[r], gi = c->grp[rr], gw = c->grp[w];
  if (gi < 0 || gw < 0) return "a value has no storage";
  if (gi == gw) return "the values already share storage";
  const group *in = &c->g[gi], *out = &c->g[gw];
  if (in->tail != rr) return "the input's storage was already written in place";
  if (in->end != s) return "the input's storage is used after the step";
  if (out->owner != w || out->tail != w) return "the output already shares storage";
  if (c->set[w].fu != s) return "the output (or a view of it) is used before the step";
  if (c->req->size[w] != in->raw) return "the sizes differ";
  return step_conflict(sp, c->root, r, w);
}

static kiln_status decide_inplace(ctx *c, kiln_memplan *p) {
  const kiln_memplan_request *req = c->req;
  if (!req->inplace || req->n_inplace <= 0) return KILN_OK;
  candidate *cand = kiln_malloc((size_t)req->n_inplace * sizeof *cand);
  p->inplace = kiln_malloc((size_t)req->n_inplace * sizeof *p->inplace);
  if (!cand || !p->inplace) {
    kiln_free(cand);
    return kiln_fail(KILN_E_NOMEM, "memplan: out of memory for %d in-place candidates", req->n_inplace);
  }
  for (int i = 0; i < req->n_inplace; i++) {
    kiln_memplan_inplace x = req->inplace[i];
    if (x.step < 0 || x.step >= c->n_steps || x.out < 0 || x.out >= c->n || x.in < 0 || x.in >= c->n) {
      kiln_free(cand);
      return kiln_fail(KILN_E_INTERNAL, "memplan: in-place candidate %d (step %d, out %d, in %d) is out of range",
                       i, x.step, x.out, x.in);
    }
    cand[i] = (candidate){x, i};
  }
  qsort(cand, (size_t)req->n_inplace, sizeof *cand, cand_cmp);
  for (int i = 0; i < req->n_inplace; i++) {
    int s = cand[i].c.step, w = cand[i].c.out, r = cand[i].c.in;
    const char *why = inplace_refusal(c, s, w, r);
    if (why) {
      kiln_log(KILN_LOG_DEBUG, "memplan: step %d does not write value %d over value %d: %s", s, w, r, why);
      continue;
    }
    group *in = &c->g[c->grp[c->root[r]]], *out = &c->g[c->grp[w]];
    in->tail = w;
    in->end = out->end;
    out->owner = -1;
    c->grp[w] = c->grp[c->root[r]];
    p->inplace[p->n_inplace++] = cand[i].c;
  }
  kiln_free(cand);
  return KILN_OK;
}

static int okey_cmp(const void *a, const void *b) {
  const okey *x = a, *y = b;
  for (int i = 0; i < 3; i++)
    if (x->k[i] != y->k[i]) return x->k[i] < y->k[i] ? -1 : 1;
  return (x->id > y->id) - (x->id < y->id);
}

/* What placing needs: the blocks and, when affordable, for each block the
 * list of blocks whose lifetimes overlap its own (CSR: adj[adj_start[i] ..
 * adj_start[i + 1])); without the lists every block is scanned. */
typedef struct packer {
  const block *b;
  int nb;
  int *adj_start, *adj;
  struct span *nbr; /* scratch: memory of the placed overlapping blocks */
  int *pl;          /* scratch without lists: placed blocks by offset */
} packer;

typedef struct span {
  uint64_t lo, hi;
} span;

/* Largest number of overlap-list entries kept (4 bytes each). */
#define KILN_MEMPLAN_MAX_ADJ ((size_t)1 << 23)
#define UNPLACED UINT64_MAX

static int span_cmp(const void *a, const void *b) {
  const span *x = a, *y = b;
  return (x->lo > y->lo) - (x->lo < y->lo);
}

static void sort_spans(span *s, int m) {
  if (m > 24) {
    qsort(s, (size_t)m, sizeof *s, span_cmp);
    return;
  }
  for (int i = 1; i < m; i++) {
    span x = s[i];
    int j = i;
    for (; j > 0 && s[j - 1].lo > x.lo; j--) s[j] = s[j - 1];
    s[j] = x;
  }
}

/* Overlap lists, when they fit in KILN_MEMPLAN_MAX_ADJ entries (else the
 * lists stay NULL and placing scans every block). o and fill are scratch
 * for nb entries. */
static kiln_status build_adjacency(packer *k, okey *o, int *fill) {
  const block *b = k->b;
  int nb = k->nb;
  for (int i = 0; i < nb; i++) o[i] = (okey){{b[i].start, 0, 0}, i};
  qsort(o, (size_t)nb, sizeof *o, okey_cmp);
  size_t total = 0;
  for (int i = 0; i < nb && total <= KILN_MEMPLAN_MAX_ADJ; i++)
    for (int j = i + 1; j < nb && b[o[j].id].start <= b[o[i].id].end; j++) total += 2;
  if (total > KILN_MEMPLAN_MAX_ADJ) return KILN_OK;
  k->adj_start = kiln_calloc((size_t)nb + 1, sizeof *k->adj_start);
  k->adj = kiln_malloc((total ? total : 1) * sizeof *k->adj);
  if (!k->adj_start || !k->adj) return kiln_fail(KILN_E_NOMEM, "memplan: out of memory for %zu overlaps", total);
  for (int i = 0; i < nb; i++)
    for (int j = i + 1; j < nb && b[o[j].id].start <= b[o[i].id].end; j++)
      k->adj_start[o[i].id + 1]++, k->adj_start[o[j].id + 1]++;
  for (int i = 0; i < nb; i++) k->adj_start[i + 1] += k->adj_start[i];
  for (int i = 0; i < nb; i++) fill[i] = k->adj_start[i];
  for (int i = 0; i < nb; i++)
    for (int j = i + 1; j < nb && b[o[j].id].start <= b[o[i].id].end; j++) {
      k->adj[fill[o[i].id]++] = o[j].id;
      k->adj[fill[o[j].id]++] = o[i].id;
    }
  return KILN_OK;
}

/* Places blocks in the given order; off gets each block's offset; returns
 * the arena size. A block goes into the best-fitting (or lowest) gap among
 * the placed blocks overlapping it in time, else on top of them. */
static uint64_t place(const packer *k, const int *order, bool best_fit, uint64_t *off, double *work) {
  const block *b = k->b;
  uint64_t arena = 0;
  double visits = 0;
  for (int i = 0; i < k->nb; i++) off[i] = UNPLACED;
  for (int i = 0; i < k->nb; i++) {
    int id = order[i], m = 0;
    const block *x = &b[id];
    if (k->adj) { /* the placed neighbours, then sorted by offset */
      for (int e = k->adj_start[id]; e < k->adj_start[id + 1]; e++) {
        int j = k->adj[e];
        if (off[j] != UNPLACED) k->nbr[m++] = (span){off[j], off[j] + b[j].size};
      }
      sort_spans(k->nbr, m);
      visits += k->adj_start[id + 1] - k->adj_start[id] + m * (m > 24 ? 12.0 : m / 2.0);
    } else { /* every placed block, kept sorted by offset in pl */
      for (int j = 0; j < i; j++) {
        const block *y = &b[k->pl[j]];
        if (y->start <= x->end && x->start <= y->end) k->nbr[m++] = (span){off[k->pl[j]], off[k->pl[j]] + y->size};
      }
      visits += 2.0 * i;
    }
    uint64_t top = 0, best_gap = UINT64_MAX, at = UNPLACED;
    for (int j = 0; j < m; j++) {
      const span *y = &k->nbr[j];
      if (y->lo >= top && y->lo - top >= x->size && y->lo - top < best_gap) {
        best_gap = y->lo - top;
        at = top;
        if (!best_fit) break;
      }
      if (y->hi > top) top = y->hi;
    }
    if (at == UNPLACED) at = top;
    off[id] = at;
    if (!k->adj) {
      int j = i;
      for (; j > 0 && off[k->pl[j - 1]] > at; j--) k->pl[j] = k->pl[j - 1];
      k->pl[j] = id;
    }
    if (at + x->size > arena) arena = at + x->size;
  }
  *work += visits;
  return arena;
}

enum { N_ORDERS = 6 };
static const char *const strategy_names[N_ORDERS][2][2] = {
    {{"size/first-fit", "size/first-fit+search"}, {"size/best-fit", "size/best-fit+search"}},
    {{"size-start/first-fit", "size-start/first-fit+search"}, {"size-start/best-fit", "size-start/best-fit+search"}},
    {{"length/first-fit", "length/first-fit+search"}, {"length/best-fit", "length/best-fit+search"}},
    {{"area/first-fit", "area/first-fit+search"}, {"area/best-fit", "area/best-fit+search"}},
    {{"start/first-fit", "start/first-fit+search"}, {"start/best-fit", "start/best-fit+search"}},
    {{"breadth/first-fit", "breadth/first-fit+search"}, {"breadth/best-fit", "breadth/best-fit+search"}},
};
/* The fixed tries, most often best first: (order, best fit?). */
static const int tries[][2] = {{0, 1}, {4, 1}, {5, 1}, {3, 1}, {2, 1}, {1, 1},
                               {0, 0}, {4, 0}, {5, 0}, {3, 0}, {2, 0}, {1, 0}};
/* Effort: at most KILN_MEMPLAN_MOVES moves of the local search, and about
 * KILN_MEMPLAN_WORK block visits in all (a placement visits, per block, its
 * overlapping blocks and sorts those placed; the first try always runs). */
#define KILN_MEMPLAN_MOVES 1024
#define KILN_MEMPLAN_WORK 2e8

static void order_keys(const block *b, int nb, const uint64_t *busiest, int which, okey *o, int *order) {
  for (int i = 0; i < nb; i++) {
    double sz = (double)b[i].size, len = (double)(b[i].end - b[i].start + 1), st = b[i].start;
    okey k = {{0, 0, 0}, i};
    switch (which) {
    case 0: k.k[0] = -sz, k.k[1] = -len, k.k[2] = st; break;
    case 1: k.k[0] = -sz, k.k[1] = st; break;
    case 2: k.k[0] = -len, k.k[1] = -sz, k.k[2] = st; break;
    case 3: k.k[0] = -sz * len, k.k[1] = -sz, k.k[2] = st; break;
    case 4: k.k[0] = st, k.k[1] = -sz; break;
    default: k.k[0] = -(double)busiest[i], k.k[1] = -sz, k.k[2] = st; break;
    }
    o[i] = k;
  }
  qsort(o, (size_t)nb, sizeof *o, okey_cmp);
  for (int i = 0; i < nb; i++) order[i] = o[i].id;
}

/* Scratch and results of the placement search. */
typedef struct search {
  const packer *k;
  uint64_t lb;
  double work;              /* block visits so far */
  int *cur, *trial;         /* current and trial orders */
  uint64_t *off, *cur_off;  /* trial offsets; current offsets */
  uint64_t *best_off, best; /* the best offsets found and their arena */
  int which, fit, searched; /* what produced the best */
} search;

static uint32_t next_rand(uint32_t *seed) {
  *seed = *seed * 1664525u + 1013904223u;
  return *seed >> 8;
}

/* Local search from the best fixed order: move one block earlier in the
 * order, preferring a "culprit" (a block that ends above the lower bound,
 * so it set the arena's height), keep the move when the arena does not
 * grow. Placing a culprit earlier gives it first pick of the low memory. */
static void local_search(search *s, uint64_t cur_arena, double per_place) {
  int nb = s->k->nb;
  uint32_t seed = 0x9e3779b9u;
  memcpy(s->cur_off, s->best_off, (size_t)nb * sizeof *s->cur_off);
  for (int m = 0; m < KILN_MEMPLAN_MOVES && s->best > s->lb && s->work + per_place <= KILN_MEMPLAN_WORK; m++) {
    int pick = -1;
    if (next_rand(&seed) % 4) { /* a culprit, uniformly, by reservoir */
      int seen = 0;
      for (int i = 0; i < nb; i++)
        if (s->cur_off[i] + s->k->b[i].size > s->lb && next_rand(&seed) % (uint32_t)++seen == 0) pick = i;
    }
    if (pick < 0) pick = (int)(next_rand(&seed) % (uint32_t)nb);
    int pos = 0;
    while (s->cur[pos] != pick) pos++;
    int to = (int)(next_rand(&seed) % (uint32_t)(pos + 1));
    if (to == pos) continue;
    memcpy(s->trial, s->cur, (size_t)to * sizeof *s->trial);
    s->trial[to] = pick;
    memcpy(s->trial + to + 1, s->cur + to, (size_t)(pos - to) * sizeof *s->trial);
    memcpy(s->trial + pos + 1, s->cur + pos + 1, (size_t)(nb - pos - 1) * sizeof *s->trial);
    uint64_t arena = place(s->k, s->trial, s->fit == 1, s->off, &s->work);
    if (arena > cur_arena) continue;
    int *t = s->cur;
    s->cur = s->trial, s->trial = t;
    uint64_t *o = s->cur_off;
    s->cur_off = s->off, s->off = o;
    cur_arena = arena;
    if (arena < s->best) {
      s->best = arena;
      s->searched = 1;
      memcpy(s->best_off, s->cur_off, (size_t)nb * sizeof *s->best_off);
    }
  }
}

/* Lower bound and placement of the live groups with bytes. */
static kiln_status place_groups(ctx *c, kiln_memplan *p, uint64_t *goff) {
  int nb = 0;
  for (int i = 0; i < c->ng; i++)
    if (c->g[i].owner >= 0 && c->g[i].size > 0) nb++;
  size_t ns = (size_t)c->n_steps + 1, nn = (size_t)(nb ? nb : 1);
  block *b = kiln_malloc(nn * sizeof *b);
  int *bg = kiln_malloc(nn * sizeof *bg), *order = kiln_malloc(nn * sizeof *order);
  int *best_order = kiln_malloc(nn * sizeof *best_order);
  okey *o = kiln_malloc(nn * sizeof *o);
  span *nbr = kiln_malloc(nn * sizeof *nbr);
  int *pl = kiln_malloc(nn * sizeof *pl);
  uint64_t *live = kiln_calloc(ns, sizeof *live), *busiest = kiln_malloc(nn * sizeof *busiest);
  uint64_t *off = kiln_malloc(nn * sizeof *off), *cur_off = kiln_malloc(nn * sizeof *cur_off);
  uint64_t *best = kiln_malloc(nn * sizeof *best);
  packer k = {b, nb, NULL, NULL, nbr, pl};
  kiln_status st = KILN_OK;
  if (!b || !bg || !order || !best_order || !o || !nbr || !pl || !live || !busiest || !off || !cur_off || !best) {
    st = kiln_fail(KILN_E_NOMEM, "memplan: out of memory placing %d buffers", nb);
    goto done;
  }
  nb = 0;
  for (int i = 0; i < c->ng; i++) {
    const group *g = &c->g[i];
    if (g->owner < 0 || g->size == 0) continue;
    bg[nb] = i;
    b[nb++] = (block){g->start, g->end, g->size};
    /* bytes live per step, by a difference array (wraps back at end + 1) */
    live[g->start] += g->size;
    live[g->end + 1] -= g->size;
  }
  uint64_t lb = 0;
  for (size_t i = 0; i < ns; i++) {
    if (i) live[i] += live[i - 1];
    if (live[i] > lb) lb = live[i];
  }
  for (int i = 0; i < nb; i++) {
    busiest[i] = 0;
    for (int t = b[i].start; t <= b[i].end; t++)
      if (live[t] > busiest[i]) busiest[i] = live[t];
  }
  if ((st = build_adjacency(&k, o, order))) goto done;
  search s = {&k, lb, 0, best_order, order, off, cur_off, best, UINT64_MAX, 0, 1, 0};
  if (nb == 0) s.best = 0;
  double per_place = 0;
  for (size_t t = 0; t < sizeof tries / sizeof *tries && s.best > lb; t++) {
    if (t && s.work + per_place > KILN_MEMPLAN_WORK) break;
    int which = tries[t][0], fit = tries[t][1];
    order_keys(b, nb, busiest, which, o, order);
    double before = s.work;
    uint64_t arena = place(&k, order, fit == 1, off, &s.work);
    if (s.work - before > per_place) per_place = s.work - before;
    if (arena < s.best) {
      s.best = arena;
      s.which = which, s.fit = fit;
      memcpy(best, off, nn * sizeof *off);
      memcpy(best_order, order, nn * sizeof *order);
    }
  }
  if (s.best > lb) local_search(&s, s.best, per_place);
  p->lower_bound = lb;
  p->arena_size = s.best;
  p->strategy = nb ? strategy_names[s.which][s.fit][s.searched] : "empty";
  for (int i = 0; i < nb; i++) goff[bg[i]] = best[i];
done:
  kiln_free(k.adj_start);
  kiln_free(k.adj);
  kiln_free(b);
  kiln_free(bg);
  kiln_free(order);
  kiln_free(best_order);
  kiln_free(o);
  kiln_free(nbr);
  kiln_free(pl);
  kiln_free(live);
  kiln_free(busiest);
  kiln_free(off);
  kiln_free(cur_off);
  kiln_free(best);
  return st;
}

kiln_status kiln_memplan_build(const kiln_memplan_request *req, kiln_memplan **out) {
  *out = NULL;
  if (!req || !req->sched || !req->size)
    return kiln_fail(KILN_E_INTERNAL, "memplan: the request needs a schedule and value sizes");
  ctx c = {.req = req, .n = req->sched->n_values, .n_steps = req->sched->n_steps};
  size_t n = (size_t)(c.n ? c.n : 1);
  kiln_memplan *p = kiln_calloc(1, sizeof *p);
  c.root = kiln_malloc(n * sizeof *c.root);
  c.ext = kiln_malloc(n * sizeof *c.ext);
  c.u = kiln_malloc(n * sizeof *c.u);
  c.set = kiln_malloc(n * sizeof *c.set);
  c.grp = kiln_malloc(n * sizeof *c.grp);
  c.g = kiln_malloc(n * sizeof *c.g);
  uint64_t *goff = kiln_calloc(n, sizeof *goff);
  kiln_status st = KILN_OK;
  if (p) {
    p->n_values = c.n;
    p->offset = kiln_malloc(n * sizeof *p->offset);
    p->storage = kiln_malloc(n * sizeof *p->storage);
    p->first = kiln_malloc(n * sizeof *p->first);
    p->last = kiln_malloc(n * sizeof *p->last);
  }
  if (!p || !c.root || !c.ext || !c.u || !c.set || !c.grp || !c.g || !goff || !p->offset || !p->storage ||
      !p->first || !p->last) {
    st = kiln_fail(KILN_E_NOMEM, "memplan: out of memory for %d values", c.n);
    goto done;
  }
  if ((st = liveness(&c)) || (st = make_groups(&c, &p->no_reuse)) || (st = decide_inplace(&c, p)) ||
      (st = place_groups(&c, p, goff)))
    goto done;
  for (int v = 0; v < c.n; v++) {
    p->first[v] = c.u[v].fu;
    p->last[v] = c.u[v].lu;
    int gi = c.grp[c.root[v]];
    if (c.ext[v] || gi < 0) {
      p->offset[v] = KILN_MEMPLAN_NONE;
      p->storage[v] = -1;
      continue;
    }
    p->offset[v] = c.g[gi].size ? (int64_t)goff[gi] : 0;
    p->storage[v] = c.g[gi].owner;
  }
done:
  ctx_free(&c);
  kiln_free(goff);
  if (st) {
    kiln_memplan_free(p);
    return st;
  }
  *out = p;
  return KILN_OK;
}

void kiln_memplan_dump(const kiln_memplan *p, const kiln_memplan_request *req, const kiln_graph *g, FILE *f) {
  fprintf(f, "memory plan: arena %" PRIu64 " bytes, lower bound %" PRIu64 ", no reuse %" PRIu64
          ", %d in place, order %s\n", p->arena_size, p->lower_bound, p->no_reuse, p->n_inplace, p->strategy);
  for (int v = 0; v < p->n_values; v++) {
    if (p->offset[v] == KILN_MEMPLAN_NONE) continue;
    const char *name = g && v < g->n_values && g->values[v].name ? g->values[v].name : "";
    int owner = p->storage[v];
    fprintf(f, "  %5d %-24s steps %4d..%-4d offset %10" PRId64 " size %10" PRIu64 "%s", v, name, p->first[v],
            p->last[v], p->offset[v], req->size[owner >= 0 ? owner : v], owner != v ? " shares" : "");
    if (owner != v) fprintf(f, " %d", owner);
    fputc('\n', f);
  }
}
