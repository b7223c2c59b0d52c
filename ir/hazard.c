/* ir/hazard: per-storage access records (live writes, reads since) scanned in
 * schedule order; storages aliased by arena reuse share one record; edges are
 * collected, then sorted and made unique. */
#include "ir/hazard.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"

/* One access: a step reading or writing a value (a region of a storage). */
typedef struct acc {
  int step, value, storage;
  bool write;
  bool whole; /* touches its whole storage (no regions given) */
  bool full;  /* touches every element any access of its storage touches */
  kiln_region region;
  /* arena bytes of the storage not yet overwritten by later full writes of
   * other storages (arena mode); the access leaves the record when empty */
  uint64_t u0, u1;
} acc;

/* A growable list of access indices. */
typedef struct ivec {
  int *a;
  int n, cap;
} ivec;

/* The record of one storage class: live writes, and reads since them. */
typedef struct record {
  ivec w, r;
} record;

typedef struct edge_rec {
  kiln_hazard_edge e;
  int seq; /* discovery order, so that duplicates keep the first found */
} edge_rec;

typedef struct ctx {
  const kiln_hazard_request *req;
  int nv, ns;
  acc *acc;
  int na, cap_acc;
  int *cls; /* union-find parent per storage id (arena aliasing) */
  record *rec;
  edge_rec *edges;
  int ne, cap_edges;
  int max_live;
} ctx;

static kiln_status ivec_push(ivec *v, int x) {
  if (v->n == v->cap) {
    int cap = v->cap ? 2 * v->cap : 8;
    int *a = kiln_realloc(v->a, (size_t)cap * sizeof *a);
    if (!a) return kiln_fail(KILN_E_NOMEM, "hazard: out of memory for an access record of %d entries", cap);
    v->a = a, v->cap = cap;
  }
  v->a[v->n++] = x;
  return KILN_OK;
}

static int find(int *p, int x) {
  while (p[x] != x) p[x] = p[p[x]], x = p[x];
  return x;
}

/* ---- regions ---- */

/* A box as kiln_view_region makes it: offset == lo, hi == offset + reach,
 * positive strides, no size-1 dims, nothing near int64 overflow. */
static bool region_ok(const kiln_region *r) {
  if (r->empty) return true;
  if (r->rank < 0 || r->rank > KILN_MAX_RANK || r->offset != r->lo) return false;
  if (r->offset < -KILN_VIEW_MAX_SPAN * 16 || r->offset > KILN_VIEW_MAX_SPAN * 16) return false;
  int64_t reach = 0;
  for (int d = 0; d < r->rank; d++) {
    if (r->shape[d] < 2 || r->strides[d] < 1 || r->strides[d] > KILN_VIEW_MAX_SPAN * 16) return false;
    if (r->shape[d] - 1 > KILN_VIEW_MAX_SPAN * 16 / r->strides[d]) return false;
    reach += (r->shape[d] - 1) * r->strides[d];
  }
  return r->hi == r->lo + reach;
}

/* True only when box a is certainly a subset of box b (both non-empty). */
static bool region_contains(const kiln_region *b, const kiln_region *a) {
  if (a->lo < b->lo || a->hi > b->hi) return false;
  if (b->rank == 0) return true;                       /* then a is the one element b->offset */
  if (b->rank == 1 && b->strides[0] == 1) return true; /* b is the interval [lo, hi] */
  /* a's dims must be dims of b (equal strides, same order); then a's offset
   * must decompose as b's offset + sum(k_d * b.strides[d]) with k_d + extent
   * of a along d <= b.shape[d]: every element of a is then an element of b. */
  int64_t ext[KILN_MAX_RANK];
  int j = 0;
  for (int d = 0; d < b->rank; d++) {
    ext[d] = 1;
    if (j < a->rank && a->strides[j] == b->strides[d]) ext[d] = a->shape[j++];
    if (ext[d] > b->shape[d]) return false;
  }
  if (j < a->rank) return false;
  int64_t rem = a->offset - b->offset;
  for (int d = 0; d < b->rank && rem > 0; d++) {
    int64_t k = rem / b->strides[d], room = b->shape[d] - ext[d];
    if (k > room) k = room;
    rem -= k * b->strides[d];
  }
  return rem == 0;
}

void kiln_hazard_dense_region(int64_t numel, kiln_region *r) {
  memset(r, 0, sizeof *r);
  r->exact = true;
  if (numel <= 0) {
    r->empty = true;
    return;
  }
  r->hi = numel - 1;
  if (numel > 1) r->rank = 1, r->shape[0] = numel, r->strides[0] = 1;
}

/* ---- conflicts ---- */

static bool in_arena(const kiln_hazard_request *q, int s) {
  return q->arena_offset && q->arena_offset[s] >= 0 && q->arena_bytes[s] > 0;
}

static bool bytes_overlap(const kiln_hazard_request *q, int s, int t) {
  if (!in_arena(q, s) || !in_arena(q, t)) return false;
  uint64_t a = (uint64_t)q->arena_offset[s], b = (uint64_t)q->arena_offset[t];
  return a < b + q->arena_bytes[t] && b < a + q->arena_bytes[s];
}

static bool conflict(const ctx *c, const acc *x, const acc *y) {
  if (x->storage != y->storage) return bytes_overlap(c->req, x->storage, y->storage);
  if (x->whole || y->whole) return true;
  return kiln_region_may_overlap(&x->region, &y->region);
}

/* x (a write, later than y) covers y: every later access that conflicts
 * with y conflicts with x too (and x is ordered after y), so y may leave the
 * record. Same storage: x's region contains y's. Other storages aliased in
 * the arena: x is full and the full writes so far, x included, have covered
 * all of y's storage's bytes (tracked as y's shrinking range [u0, u1), which
 * is why y is not const). */
static bool covers(const ctx *c, const acc *x, acc *y) {
  if (x->storage == y->storage) {
    if (x->whole) return true;
    if (y->whole) return false;
    return region_contains(&x->region, &y->region);
  }
  if (!x->full || !in_arena(c->req, x->storage) || y->u0 >= y->u1) return false;
  uint64_t a = (uint64_t)c->req->arena_offset[x->storage], b = a + c->req->arena_bytes[x->storage];
  if (a <= y->u0 && y->u0 < b)
    y->u0 = b < y->u1 ? b : y->u1;
  else if (a < y->u1 && y->u1 <= b)
    y->u1 = a > y->u0 ? a : y->u0;
  return y->u0 >= y->u1;
}

/* ---- building ---- */

static kiln_status add_edge(ctx *c, int from, int to, kiln_hazard_kind kind, const acc *a, const acc *b) {
  if (c->ne == c->cap_edges) {
    int cap = c->cap_edges ? 2 * c->cap_edges : 64;
    if (cap > (1 << 28)) return kiln_fail(KILN_E_NOMEM, "hazard: more than %d edges", c->cap_edges);
    edge_rec *e = kiln_realloc(c->edges, (size_t)cap * sizeof *e);
    if (!e) return kiln_fail(KILN_E_NOMEM, "hazard: out of memory for %d edges", cap);
    c->edges = e, c->cap_edges = cap;
  }
  c->edges[c->ne] = (edge_rec){{from, to, kind, a->value, b->value, b->storage}, c->ne};
  c->ne++;
  return KILN_OK;
}

typedef struct ov_key {
  int step, value, write, index;
} ov_key;

static int cmp_ov(const void *pa, const void *pb) {
  const ov_key *a = pa, *b = pb;
  if (a->step != b->step) return a->step < b->step ? -1 : 1;
  if (a->value != b->value) return a->value < b->value ? -1 : 1;
  if (a->write != b->write) return a->write < b->write ? -1 : 1;
  return (a->index > b->index) - (a->index < b->index);
}

/* The override for (step, value, write), or NULL: the last matching entry. */
static const kiln_region *find_override(const kiln_hazard_request *q, const ov_key *k, int n, int step, int value,
                                        bool write) {
  int lo = 0, hi = n; /* first key > (step, value, write, any) */
  ov_key key = {step, value, write, q->n_access_region};
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (cmp_ov(&k[mid], &key) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo == 0) return NULL;
  const ov_key *f = &k[lo - 1];
  if (f->step != step || f->value != value || f->write != write) return NULL;
  return &q->access_region[f->index].region;
}

static kiln_status push_acc(ctx *c, const acc *a) {
  if (c->na == c->cap_acc) {
    int cap = c->cap_acc ? 2 * c->cap_acc : 64;
    if (cap > (1 << 26)) return kiln_fail(KILN_E_NOMEM, "hazard: more than %d accesses", c->cap_acc);
    acc *n = kiln_realloc(c->acc, (size_t)cap * sizeof *n);
    if (!n) return kiln_fail(KILN_E_NOMEM, "hazard: out of memory for %d accesses", cap);
    c->acc = n, c->cap_acc = cap;
  }
  c->acc[c->na++] = *a;
  return KILN_OK;
}

static int storage_of(const kiln_hazard_request *q, int v) {
  return q->storage && q->storage[v] >= 0 ? q->storage[v] : v;
}

/* Checks the request and lists the accesses in order: step by step, reads
 * then writes; empty regions are left out. */
static kiln_status collect(ctx *c) {
  const kiln_hazard_request *q = c->req;
  const kiln_schedule *s = q->sched;
  for (int v = 0; v < c->nv; v++) {
    if (q->storage && (q->storage[v] < -1 || q->storage[v] >= c->nv))
      return kiln_fail(KILN_E_INTERNAL, "hazard: value %d has storage %d, outside [-1, %d)", v, q->storage[v], c->nv);
    if (q->region && !region_ok(&q->region[v]))
      return kiln_fail(KILN_E_INTERNAL, "hazard: value %d has a malformed region", v);
    if (q->arena_offset && q->arena_offset[v] < 0 && q->arena_offset[v] != KILN_MEMPLAN_NONE)
      return kiln_fail(KILN_E_INTERNAL, "hazard: storage %d has arena offset %" PRId64, v, q->arena_offset[v]);
    if (q->arena_offset && q->arena_offset[v] >= 0 &&
        (q->arena_bytes[v] > KILN_MEMPLAN_MAX_BYTES || (uint64_t)q->arena_offset[v] > KILN_MEMPLAN_MAX_BYTES))
      return kiln_fail(KILN_E_INTERNAL,
                       "hazard: storage %d at arena offset %" PRId64 " size %" PRIu64 " exceeds the arena limit", v,
                       q->arena_offset[v], q->arena_bytes[v]);
  }
  int n_ov = q->n_access_region > 0 ? q->n_access_region : 0;
  ov_key *k = kiln_malloc((size_t)(n_ov ? n_ov : 1) * sizeof *k);
  if (!k) return kiln_fail(KILN_E_NOMEM, "hazard: out of memory for %d region overrides", n_ov);
  kiln_status st = KILN_OK;
  for (int i = 0; i < n_ov; i++) {
    const kiln_hazard_access_region *o = &q->access_region[i];
    bool found =
        o->step >= 0 && o->step < c->ns && o->value >= 0 && o->value < c->nv &&
        (o->write ? kiln_step_writes(&s->steps[o->step], o->value) : kiln_step_reads(&s->steps[o->step], o->value));
    if (!found) {
      st = kiln_fail(KILN_E_INTERNAL, "hazard: region override %d: step %d does not %s value %d", i, o->step,
                     o->write ? "write" : "read", o->value);
      goto done;
    }
    if (!region_ok(&o->region)) {
      st = kiln_fail(KILN_E_INTERNAL, "hazard: region override %d (step %d, value %d) is malformed", i, o->step,
                     o->value);
      goto done;
    }
    k[i] = (ov_key){o->step, o->value, o->write, i};
  }
  qsort(k, (size_t)n_ov, sizeof *k, cmp_ov);
  for (int si = 0; si < c->ns; si++) {
    const kiln_step *step = &s->steps[si];
    for (int pass = 0; pass < 2; pass++) {
      const int *list = pass ? step->writes : step->reads;
      int n = pass ? step->n_writes : step->n_reads;
      for (int i = 0; i < n; i++) {
        int v = list[i];
        if (v < 0 || v >= c->nv) {
          st = kiln_fail(KILN_E_INTERNAL, "hazard: step %d %s value %d, outside [0, %d)", si, pass ? "writes" : "reads",
                         v, c->nv);
          goto done;
        }
        acc a = {.step = si, .value = v, .storage = storage_of(q, v), .write = pass == 1};
        const kiln_region *r = find_override(q, k, n_ov, si, v, a.write);
        if (!r && q->region) r = &q->region[v];
        if (r) {
          if (r->empty) continue;
          a.region = *r;
        } else {
          a.whole = true;
        }
        if ((st = push_acc(c, &a))) goto done;
      }
    }
  }
done:
  kiln_free(k);
  return st;
}

/* Marks the full accesses: whole ones, and those whose region is an
 * interval holding the hull of every access to their storage; sets each
 * access's uncovered byte range to its storage's arena bytes. */
static kiln_status mark_full(ctx *c) {
  const kiln_hazard_request *q = c->req;
  size_t n = (size_t)(c->nv ? c->nv : 1);
  int64_t *lo = kiln_malloc(n * sizeof *lo), *hi = kiln_malloc(n * sizeof *hi);
  if (!lo || !hi) {
    kiln_free(lo);
    kiln_free(hi);
    return kiln_fail(KILN_E_NOMEM, "hazard: out of memory for %d storages", c->nv);
  }
  for (int v = 0; v < c->nv; v++) lo[v] = INT64_MAX, hi[v] = INT64_MIN;
  for (int i = 0; i < c->na; i++) {
    const acc *a = &c->acc[i];
    if (a->whole) continue;
    if (a->region.lo < lo[a->storage]) lo[a->storage] = a->region.lo;
    if (a->region.hi > hi[a->storage]) hi[a->storage] = a->region.hi;
  }
  for (int i = 0; i < c->na; i++) {
    acc *a = &c->acc[i];
    const kiln_region *r = &a->region;
    a->full = a->whole || ((r->rank == 0 || (r->rank == 1 && r->strides[0] == 1)) && r->lo <= lo[a->storage] &&
                           r->hi >= hi[a->storage]);
    if (in_arena(q, a->storage)) {
      a->u0 = (uint64_t)q->arena_offset[a->storage];
      a->u1 = a->u0 + q->arena_bytes[a->storage];
    }
  }
  kiln_free(lo);
  kiln_free(hi);
  return KILN_OK;
}

typedef struct span {
  int storage;
  uint64_t lo, hi; /* bytes [lo, hi) */
} span;

static int cmp_span(const void *pa, const void *pb) {
  const span *a = pa, *b = pb;
  if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
  return (a->storage > b->storage) - (a->storage < b->storage);
}

/* Joins storages whose arena bytes overlap into one record (union-find) and,
 * with arena_assert, fails on such a pair with overlapping lifetimes. */
static kiln_status arena_classes(ctx *c) {
  const kiln_hazard_request *q = c->req;
  for (int v = 0; v < c->nv; v++) c->cls[v] = v;
  if (!q->arena_offset) return KILN_OK;
  size_t n = (size_t)(c->nv ? c->nv : 1);
  int *first = kiln_malloc(n * sizeof *first), *last = kiln_malloc(n * sizeof *last);
  span *sp = kiln_malloc(n * sizeof *sp);
  kiln_status st = KILN_OK;
  if (!first || !last || !sp) {
    st = kiln_fail(KILN_E_NOMEM, "hazard: out of memory for %d storages", c->nv);
    goto done;
  }
  for (int v = 0; v < c->nv; v++) first[v] = last[v] = -1;
  /* lifetimes from every access in the schedule (empty regions included) */
  for (int si = 0; si < c->ns; si++) {
    const kiln_step *step = &q->sched->steps[si];
    for (int i = 0; i < step->n_reads + step->n_writes; i++) {
      int v = i < step->n_reads ? step->reads[i] : step->writes[i - step->n_reads];
      int s = storage_of(q, v);
      if (first[s] < 0) first[s] = si;
      last[s] = si;
    }
  }
  int m = 0;
  for (int s = 0; s < c->nv; s++)
    if (first[s] >= 0 && in_arena(q, s))
      sp[m++] = (span){s, (uint64_t)q->arena_offset[s], (uint64_t)q->arena_offset[s] + q->arena_bytes[s]};
  qsort(sp, (size_t)m, sizeof *sp, cmp_span);
  for (int i = 0; i < m; i++)
    for (int j = i + 1; j < m && sp[j].lo < sp[i].hi; j++) {
      int a = sp[i].storage, b = sp[j].storage;
      if (q->arena_assert && first[a] <= last[b] && first[b] <= last[a]) {
        st = kiln_fail(KILN_E_INTERNAL,
                       "hazard: storages %d (steps %d..%d, bytes [%" PRIu64 ", %" PRIu64
                       ")) and %d (steps %d..%d, "
                       "bytes [%" PRIu64 ", %" PRIu64 ")) share arena bytes while both live: a broken memory plan",
                       a, first[a], last[a], sp[i].lo, sp[i].hi, b, first[b], last[b], sp[j].lo, sp[j].hi);
        goto done;
      }
      int ra = find(c->cls, a), rb = find(c->cls, b);
      if (ra != rb) c->cls[ra < rb ? rb : ra] = ra < rb ? ra : rb;
    }
done:
  kiln_free(first);
  kiln_free(last);
  kiln_free(sp);
  return st;
}

/* Removes from list the accesses that x covers. */
static void prune(ctx *c, ivec *list, const acc *x) {
  int k = 0;
  for (int i = 0; i < list->n; i++)
    if (!covers(c, x, &c->acc[list->a[i]])) list->a[k++] = list->a[i];
  list->n = k;
}

/* Whether a write x in the record, with e->step < x->step < a->step,
 * conflicts with both e and a. Then an edge e -> x was made when x came
 * (e was live then, as it is now) and one x -> a is made now, so e -> a is
 * implied and left out. (Each left-out edge spans more steps than the two
 * that imply it, so by induction on the span every left-out pair stays
 * ordered by the edges kept.) */
static bool via_write(const ctx *c, const ivec *w, const acc *e, const acc *a) {
  for (int k = 0; k < w->n; k++) {
    const acc *x = &c->acc[w->a[k]];
    if (x->step > e->step && x->step < a->step && conflict(c, e, x) && conflict(c, x, a)) return true;
  }
  return false;
}

/* The scan: each access against the record of its storage class. */
static kiln_status scan(ctx *c) {
  kiln_status st;
  for (int i = 0; i < c->na; i++) {
    const acc *a = &c->acc[i];
    record *r = &c->rec[find(c->cls, a->storage)];
    for (int j = 0; j < r->w.n; j++) {
      const acc *w = &c->acc[r->w.a[j]];
      if (w->step != a->step && conflict(c, w, a) && !via_write(c, &r->w, w, a) &&
          (st = add_edge(c, w->step, a->step, a->write ? KILN_HAZARD_WAW : KILN_HAZARD_RAW, w, a)))
        return st;
    }
    if (!a->write) {
      if ((st = ivec_push(&r->r, i))) return st;
      if (r->w.n + r->r.n > c->max_live) c->max_live = r->w.n + r->r.n;
      continue;
    }
    for (int j = 0; j < r->r.n; j++) {
      const acc *rd = &c->acc[r->r.a[j]];
      if (rd->step != a->step && conflict(c, rd, a) && !via_write(c, &r->w, rd, a) &&
          (st = add_edge(c, rd->step, a->step, KILN_HAZARD_WAR, rd, a)))
        return st;
    }
    prune(c, &r->w, a);
    prune(c, &r->r, a);
    if ((st = ivec_push(&r->w, i))) return st;
    if (r->w.n + r->r.n > c->max_live) c->max_live = r->w.n + r->r.n;
  }
  return KILN_OK;
}

static int cmp_edge(const void *pa, const void *pb) {
  const edge_rec *a = pa, *b = pb;
  if (a->e.to != b->e.to) return a->e.to < b->e.to ? -1 : 1;
  if (a->e.from != b->e.from) return a->e.from < b->e.from ? -1 : 1;
  if (a->e.kind != b->e.kind) return a->e.kind < b->e.kind ? -1 : 1;
  return (a->seq > b->seq) - (a->seq < b->seq);
}

static kiln_status finish(ctx *c, kiln_hazards *h) {
  if (c->ne > 1) qsort(c->edges, (size_t)c->ne, sizeof *c->edges, cmp_edge);
  int n = 0;
  for (int i = 0; i < c->ne; i++) {
    const kiln_hazard_edge *e = &c->edges[i].e;
    if (n && h->edges[n - 1].to == e->to && h->edges[n - 1].from == e->from && h->edges[n - 1].kind == e->kind)
      continue;
    if (!n) {
      h->edges = kiln_malloc((size_t)c->ne * sizeof *h->edges);
      if (!h->edges) return kiln_fail(KILN_E_NOMEM, "hazard: out of memory for %d edges", c->ne);
    }
    h->edges[n++] = *e;
    h->n_kind[e->kind]++;
  }
  h->n_edges = n;
  return KILN_OK;
}

kiln_status kiln_hazard_build(const kiln_hazard_request *req, kiln_hazards **out) {
  *out = NULL;
  if (!req || !req->sched) return kiln_fail(KILN_E_INTERNAL, "hazard: the request needs a schedule");
  if (!req->arena_offset != !req->arena_bytes)
    return kiln_fail(KILN_E_INTERNAL, "hazard: arena offsets and byte sizes go together");
  if (req->n_access_region > 0 && !req->access_region)
    return kiln_fail(KILN_E_INTERNAL, "hazard: %d region overrides but no array", req->n_access_region);
  ctx c = {.req = req, .nv = req->sched->n_values, .ns = req->sched->n_steps};
  size_t n = (size_t)(c.nv > 0 ? c.nv : 1);
  kiln_hazards *h = kiln_calloc(1, sizeof *h);
  c.cls = kiln_malloc(n * sizeof *c.cls);
  c.rec = kiln_calloc(n, sizeof *c.rec);
  kiln_status st = KILN_OK;
  if (!h || !c.cls || !c.rec) {
    st = kiln_fail(KILN_E_NOMEM, "hazard: out of memory for %d values", c.nv);
    goto done;
  }
  h->n_steps = c.ns;
  if ((st = collect(&c)) || (st = mark_full(&c)) || (st = arena_classes(&c)) || (st = scan(&c)) || (st = finish(&c, h)))
    goto done;
  h->n_accesses = c.na;
  h->max_live = c.max_live;
done:
  if (c.rec)
    for (int v = 0; v < c.nv; v++) kiln_free(c.rec[v].w.a), kiln_free(c.rec[v].r.a);
  kiln_free(c.rec);
  kiln_free(c.cls);
  kiln_free(c.acc);
  kiln_free(c.edges);
  if (st) {
    kiln_hazards_free(h);
    return st;
  }
  *out = h;
  return KILN_OK;
}

/* ---- queries ---- */

bool kiln_hazard_check_order(const kiln_hazards *h, const int *order, int n, int *violated) {
  if (violated) *violated = -1;
  if (n != h->n_steps) {
    kiln_fail(KILN_E_INTERNAL, "hazard: an order of %d steps for a schedule of %d", n, h->n_steps);
    return false;
  }
  int *pos = kiln_malloc((size_t)(n ? n : 1) * sizeof *pos);
  if (!pos) {
    kiln_fail(KILN_E_NOMEM, "hazard: out of memory for an order of %d steps", n);
    return false;
  }
  for (int i = 0; i < n; i++) pos[i] = -1;
  bool ok = true;
  for (int i = 0; i < n && ok; i++) {
    if (order[i] < 0 || order[i] >= n || pos[order[i]] >= 0) {
      kiln_fail(KILN_E_INTERNAL, "hazard: order[%d] = %d is not a step or is repeated", i, order[i]);
      ok = false;
    } else {
      pos[order[i]] = i;
    }
  }
  for (int i = 0; i < h->n_edges && ok; i++) {
    const kiln_hazard_edge *e = &h->edges[i];
    if (pos[e->from] > pos[e->to]) {
      kiln_fail(KILN_E_INTERNAL,
                "hazard: %s edge step %d -> step %d (values %d -> %d) runs backwards (positions %d, %d)",
                kiln_hazard_kind_name(e->kind), e->from, e->to, e->from_value, e->to_value, pos[e->from], pos[e->to]);
      if (violated) *violated = i;
      ok = false;
    }
  }
  kiln_free(pos);
  return ok;
}

kiln_status kiln_hazard_storage_ids(const kiln_memplan *plan, const int *alias_of, int n_values, int *out) {
  for (int v = 0; v < n_values; v++) {
    int u = v;
    for (int hops = 0;; hops++) {
      if (plan && u < plan->n_values && plan->storage[u] >= 0) {
        u = plan->storage[u];
        break;
      }
      int base = alias_of ? alias_of[u] : -1;
      if (base < 0) break;
      if (base >= n_values)
        return kiln_fail(KILN_E_INTERNAL, "hazard: value %d is a view of %d, outside [0, %d)", u, base, n_values);
      if (hops >= n_values) return kiln_fail(KILN_E_INTERNAL, "hazard: a cycle of views through value %d", v);
      u = base;
    }
    out[v] = u;
  }
  return KILN_OK;
}

const char *kiln_hazard_kind_name(kiln_hazard_kind kind) {
  switch (kind) {
    case KILN_HAZARD_RAW:
      return "RAW";
    case KILN_HAZARD_WAR:
      return "WAR";
    case KILN_HAZARD_WAW:
      return "WAW";
  }
  return "?";
}

static void put_step(const kiln_schedule *s, const kiln_graph *g, int step, FILE *f) {
  fprintf(f, "step %d", step);
  if (s && g && step < s->n_steps && s->steps[step].n_nodes > 0) {
    int nd = s->steps[step].nodes[0];
    if (nd >= 0 && nd < g->n_nodes) {
      char buf[64];
      fprintf(f, " (%s %s)", g->nodes[nd].op_type ? g->nodes[nd].op_type : "?",
              kiln_node_label(g, &g->nodes[nd], buf, (int)sizeof buf));
    }
  }
}

static void put_value(const kiln_graph *g, int v, FILE *f) {
  fprintf(f, "v%d", v);
  if (g && v >= 0 && v < g->n_values && g->values[v].name) fprintf(f, " \"%s\"", g->values[v].name);
}

void kiln_hazard_dump(const kiln_hazards *h, const kiln_schedule *sched, const kiln_graph *g, FILE *f) {
  fprintf(f, "hazards: %d steps, %d accesses, %d edges (%d RAW, %d WAR, %d WAW), record peak %d\n", h->n_steps,
          h->n_accesses, h->n_edges, h->n_kind[KILN_HAZARD_RAW], h->n_kind[KILN_HAZARD_WAR], h->n_kind[KILN_HAZARD_WAW],
          h->max_live);
  for (int i = 0; i < h->n_edges; i++) {
    const kiln_hazard_edge *e = &h->edges[i];
    fputs("  ", f);
    put_step(sched, g, e->from, f);
    fputs(" -> ", f);
    put_step(sched, g, e->to, f);
    fprintf(f, " %s ", kiln_hazard_kind_name(e->kind));
    put_value(g, e->from_value, f);
    fputs(" -> ", f);
    put_value(g, e->to_value, f);
    fprintf(f, " storage %d\n", e->storage);
  }
}

void kiln_hazards_free(kiln_hazards *h) {
  if (!h) return;
  kiln_free(h->edges);
  kiln_free(h);
}
