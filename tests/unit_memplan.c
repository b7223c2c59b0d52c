/* tests/unit_memplan: unit tests of ir/schedule and ir/memplan — building
 * and merging schedules, hand-made plans (chains, diamonds, skips, views,
 * in place), error paths, the checker catching broken plans, thousands of
 * random schedules against an execution oracle, and a ResNet-18 schedule. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/alloc.h"
#include "ir/memplan.h"
#include "ir/schedule.h"

static int passed, failed;
#include "tests/check.h"

#define A64(n) (((uint64_t)(n) + 63) / 64 * 64)

/* ---- a test builder: values and steps recorded, then a schedule ---- */

#define MAXV 2048
#define MAXS 2048
#define MAXIO 6
typedef struct tb {
  int nv, ns, nip;
  uint64_t size[MAXV];
  bool ext[MAXV];
  int alias[MAXV];
  int nr[MAXS], nw[MAXS], r[MAXS][MAXIO], w[MAXS][MAXIO];
  kiln_memplan_inplace ip[2 * MAXS];
  kiln_schedule *s;
} tb;

static tb *tb_new(void) { return calloc(1, sizeof(tb)); }

static void tb_free(tb *t) {
  if (!t) return;
  kiln_schedule_free(t->s);
  free(t);
}

static int val(tb *t, uint64_t bytes, bool ext) {
  int v = t->nv++;
  t->size[v] = bytes;
  t->ext[v] = ext;
  t->alias[v] = -1;
  return v;
}

static int view(tb *t, int base) {
  int v = val(t, t->size[base], false);
  t->alias[v] = base;
  return v;
}

/* Appends a step; returns its index. */
static int step(tb *t, int nr, const int *r, int nw, const int *w) {
  int s = t->ns++;
  t->nr[s] = nr;
  t->nw[s] = nw;
  memcpy(t->r[s], r, (size_t)nr * sizeof *r);
  memcpy(t->w[s], w, (size_t)nw * sizeof *w);
  return s;
}
#define STEP(t, R, W) step(t, (int)(sizeof R / sizeof *R), R, (int)(sizeof W / sizeof *W), W)
#define L(...) ((int[]){__VA_ARGS__})

static void inplace(tb *t, int s, int out, int in) { t->ip[t->nip++] = (kiln_memplan_inplace){s, out, in}; }

static kiln_status tb_finish(tb *t) {
  kiln_status st = kiln_schedule_new(t->nv, &t->s);
  for (int i = 0; !st && i < t->ns; i++) st = kiln_schedule_add_step(t->s, t->r[i], t->nr[i], t->w[i], t->nw[i], i);
  return st;
}

static kiln_memplan_request tb_req(const tb *t, bool with_inplace) {
  return (kiln_memplan_request){t->s, t->size, t->ext, t->alias, with_inplace ? t->ip : NULL,
                                with_inplace ? t->nip : 0};
}

/* ---- an execution oracle, independent of the checker ----
 * Runs the schedule over a model of the arena in 64-byte chunks, each
 * holding the alias set (storage) whose data it contains. Every read must
 * find its own storage intact; every write may only cover chunks of storages
 * that are dead, its own, or sanctioned in-place inputs at that step. */
static int root_of(const int *alias, int v) {
  for (int hops = 0; alias && alias[v] >= 0 && hops < MAXV; hops++) v = alias[v];
  return v;
}

static int simulate(const kiln_memplan *p, const kiln_memplan_request *req, char *msg, size_t len) {
  const kiln_schedule *s = req->sched;
  int n = s->n_values;
  int *root = malloc(sizeof(int) * (size_t)(n + 1)), *end = malloc(sizeof(int) * (size_t)(n + 1));
  size_t chunks = (size_t)(p->arena_size / 64) + 1;
  int *tag = malloc(sizeof(int) * chunks);
  int bad = 0;
  for (int v = 0; v < n; v++) root[v] = root_of(req->alias_of, v), end[v] = -1;
  for (int i = 0; i < s->n_steps; i++) {
    const kiln_step *sp = &s->steps[i];
    for (int k = 0; k < sp->n_reads + sp->n_writes; k++) {
      int v = k < sp->n_reads ? sp->reads[k] : sp->writes[k - sp->n_reads];
      end[root[v]] = i;
    }
  }
  for (size_t c = 0; c < chunks; c++) tag[c] = -1;
  for (int i = 0; i < s->n_steps && !bad; i++) {
    const kiln_step *sp = &s->steps[i];
    for (int k = 0; k < sp->n_reads && !bad; k++) {
      int v = sp->reads[k], r = root[v];
      if (p->offset[v] == KILN_MEMPLAN_NONE) {
        if (!(req->external && req->external[r])) snprintf(msg, len, "arena value %d has no offset", v), bad = 1;
        continue;
      }
      size_t c0 = (size_t)p->offset[v] / 64, nc = (size_t)(A64(req->size[r]) / 64);
      for (size_t c = c0; c < c0 + nc && !bad; c++)
        if (c >= chunks || tag[c] != r)
          snprintf(msg, len, "step %d reads value %d but chunk %zu holds %d", i, v, c, c < chunks ? tag[c] : -2),
              bad = 1;
    }
    for (int k = 0; k < sp->n_writes && !bad; k++) {
      int v = sp->writes[k], r = root[v];
      if (p->offset[v] == KILN_MEMPLAN_NONE) continue;
      size_t c0 = (size_t)p->offset[v] / 64, nc = (size_t)(A64(req->size[r]) / 64);
      for (size_t c = c0; c < c0 + nc && !bad; c++) {
        if (c >= chunks) {
          snprintf(msg, len, "value %d written past the arena", v), bad = 1;
          break;
        }
        int old = tag[c];
        bool ok = old < 0 || old == r || end[old] < i;
        for (int q = 0; !ok && q < p->n_inplace; q++)
          ok = p->inplace[q].step == i && root[p->inplace[q].out] == r && root[p->inplace[q].in] == old &&
               end[old] == i;
        if (!ok) snprintf(msg, len, "step %d writes value %d over live storage %d (chunk %zu)", i, v, old, c), bad = 1;
        tag[c] = r;
      }
    }
  }
  free(root);
  free(end);
  free(tag);
  return !bad;
}

/* Builds, checks and simulates a plan; NULL (with failures counted) if any
 * stage fails. */
static kiln_memplan *plan_checked(const kiln_memplan_request *req, const char *what) {
  kiln_memplan *p = NULL;
  kiln_status st = kiln_memplan_build(req, &p);
  CHECK(st == KILN_OK, "%s: build failed: %s", what, kiln_last_error());
  if (st) return NULL;
  st = kiln_memplan_verify(p, req);
  CHECK(st == KILN_OK, "%s: verify failed: %s", what, kiln_last_error());
  char msg[256] = "";
  int ok = simulate(p, req, msg, sizeof msg);
  CHECK(ok, "%s: oracle: %s", what, msg);
  CHECK(p->lower_bound <= p->arena_size && p->arena_size <= p->no_reuse,
        "%s: lower bound %" PRIu64 " <= arena %" PRIu64 " <= no reuse %" PRIu64 " does not hold", what,
        p->lower_bound, p->arena_size, p->no_reuse);
  if (st || !ok) {
    kiln_memplan_free(p);
    return NULL;
  }
  return p;
}

/* ---- schedule ---- */

static char *dup(const char *s) { return kiln_strdup(s); }

static void add_node(kiln_graph *g, const char *name, const char *op, int nin, const int *in, int nout,
                     const int *out) {
  kiln_node *n = &g->nodes[g->n_nodes];
  n->name = dup(name);
  n->op_type = dup(op);
  n->domain = dup("");
  n->n_in = nin;
  n->n_out = nout;
  n->in = kiln_malloc(sizeof(int) * (size_t)nin);
  n->out = kiln_malloc(sizeof(int) * (size_t)nout);
  memcpy(n->in, in, sizeof(int) * (size_t)nin);
  memcpy(n->out, out, sizeof(int) * (size_t)nout);
  for (int i = 0; i < nout; i++) g->values[out[i]].producer = g->n_nodes;
  g->n_nodes++;
}

/* x (input), w (weight) -> conv -> a -> relu -> b -> add(b, b, omitted) -> y (output) */
static kiln_graph *small_graph(void) {
  kiln_graph *g = kiln_calloc(1, sizeof *g);
  const char *names[] = {"x", "w", "a", "b", "y"};
  g->n_values = 5;
  g->values = kiln_calloc(5, sizeof *g->values);
  for (int i = 0; i < 5; i++) g->values[i].name = dup(names[i]), g->values[i].producer = -1;
  g->values[0].is_input = true;
  g->values[1].init = kiln_calloc(1, sizeof(kiln_tensor));
  g->values[4].is_output = true;
  g->nodes = kiln_calloc(3, sizeof *g->nodes);
  add_node(g, "conv", "Conv", 2, L(0, 1), 1, L(2));
  add_node(g, "relu", "Relu", 1, L(2), 1, L(3));
  add_node(g, "add", "Add", 3, L(3, 3, -1), 1, L(4));
  return g;
}

static void test_schedule_from_graph(void) {
  kiln_graph *g = small_graph();
  kiln_schedule *s = NULL;
  kiln_status st = kiln_schedule_from_graph(g, &s);
  CHECK(st == KILN_OK && s, "from_graph failed: %s", kiln_last_error());
  if (s) {
    CHECK(s->n_steps == 3 && s->n_values == 5, "3 steps over 5 values, got %d over %d", s->n_steps, s->n_values);
    CHECK(s->steps[0].n_reads == 2 && s->steps[0].reads[0] == 0 && s->steps[0].reads[1] == 1 &&
              s->steps[0].n_writes == 1 && s->steps[0].writes[0] == 2,
          "conv step reads x, w and writes a");
    CHECK(s->steps[2].n_reads == 1 && s->steps[2].reads[0] == 3, "add(b, b, -) reads b once, got %d reads",
          s->steps[2].n_reads);
    CHECK(s->steps[1].n_nodes == 1 && s->steps[1].nodes[0] == 1 && s->steps[1].tag == 0 && !s->steps[1].user,
          "a step covers its node");
    CHECK(s->keep[4] && !s->keep[3], "keep marks the graph output only");
    CHECK(kiln_step_reads(&s->steps[1], 2) && !kiln_step_reads(&s->steps[1], 3) && kiln_step_writes(&s->steps[1], 3),
          "step_reads / step_writes");

    /* plan it: x, w, y are the host's; a and b share one buffer in place */
    bool ext[5];
    uint64_t size[5] = {4096, 256, 4096, 4096, 4096};
    kiln_memplan_mark_external(g, ext);
    CHECK(ext[0] && ext[1] && !ext[2] && !ext[3] && ext[4], "mark_external: inputs, weights, outputs");
    kiln_memplan_inplace ip = {1, 3, 2};
    kiln_memplan_request req = {s, size, ext, NULL, &ip, 1};
    kiln_memplan *p = plan_checked(&req, "small graph");
    if (p) {
      CHECK(p->n_inplace == 1 && p->arena_size == 4096 && p->offset[2] == p->offset[3] && p->storage[3] == 2,
            "relu in place: arena %" PRIu64 ", %d in place", p->arena_size, p->n_inplace);
      CHECK(p->offset[0] == KILN_MEMPLAN_NONE && p->offset[4] == KILN_MEMPLAN_NONE && p->offset[1] == KILN_MEMPLAN_NONE,
            "host values are not in the arena");
      CHECK(p->first[2] == 0 && p->last[2] == 1 && p->first[3] == 1 && p->last[3] == 2, "lifetimes");
      char *buf = NULL;
      size_t blen = 0;
      FILE *f = open_memstream(&buf, &blen);
      kiln_memplan_dump(p, &req, g, f);
      fclose(f);
      CHECK(buf && strstr(buf, "arena 4096 bytes") && strstr(buf, " a ") && strstr(buf, " b "), "dump: %s",
            buf ? buf : "(null)");
      free(buf);
      kiln_memplan_free(p);
    }
    req.n_inplace = 0;
    p = plan_checked(&req, "small graph, no in place");
    CHECK(p && p->arena_size == 8192 && p->n_inplace == 0, "without in place a and b need 8192 bytes");
    kiln_memplan_free(p);
  }
  kiln_schedule_free(s);

  /* a node reading a value only a later node writes */
  int tmp = g->nodes[0].in[0];
  g->nodes[0].in[0] = 3;
  s = (kiln_schedule *)&s; /* must be reset to NULL on failure */
  st = kiln_schedule_from_graph(g, &s);
  CHECK(st == KILN_E_MODEL && s == NULL, "out of order graph accepted");
  CHECK(strstr(kiln_last_error(), "conv") && strstr(kiln_last_error(), "Conv") && strstr(kiln_last_error(), "b"),
        "message names the node and the value: %s", kiln_last_error());
  g->nodes[0].in[0] = tmp;
  kiln_graph_free(g);
}

static void test_schedule_merge(void) {
  /* v0 -> s0 -> v1 -> s1 -> v2 -> s2 -> v3 -> s3 -> v4(keep); s4 reads v2 and v4 */
  kiln_schedule *s = NULL;
  CHECK(kiln_schedule_new(6, &s) == KILN_OK, "new");
  if (!s) return;
  for (int i = 0; i < 4; i++) kiln_schedule_add_step(s, L(i), 1, L(i + 1), 1, i);
  kiln_schedule_add_step(s, L(2, 4), 2, L(5), 1, 4);
  s->keep[4] = true;
  s->steps[1].tag = 7;
  s->steps[1].user = s;
  CHECK(kiln_schedule_add_step(s, L(9), 1, L(0), 1, 5) == KILN_E_INTERNAL && s->n_steps == 5,
        "out-of-range value rejected");
  CHECK(strstr(kiln_last_error(), "value 9"), "message names the value: %s", kiln_last_error());
  /* merge s1..s3: v2 is still read by s4, v3 is internal, v4 is kept */
  CHECK(kiln_schedule_merge(s, 1, 3) == KILN_OK && s->n_steps == 3, "merge 3 steps");
  const kiln_step *m = &s->steps[1];
  CHECK(m->n_reads == 1 && m->reads[0] == 1, "merged step reads v1 only (got %d reads)", m->n_reads);
  CHECK(m->n_writes == 2 && m->writes[0] == 2 && m->writes[1] == 4, "merged step writes v2, v4 (got %d writes)",
        m->n_writes);
  CHECK(m->n_nodes == 3 && m->nodes[0] == 1 && m->nodes[1] == 2 && m->nodes[2] == 3, "merged nodes in order");
  CHECK(m->tag == 7 && m->user == s, "merged step keeps the first member's tag and user");
  CHECK(s->steps[2].nodes[0] == 4, "later steps move down");
  /* now merge everything: only v0 read, v4 (keep) written */
  CHECK(kiln_schedule_merge(s, 0, 3) == KILN_OK && s->n_steps == 1, "merge all");
  m = &s->steps[0];
  CHECK(m->n_reads == 1 && m->reads[0] == 0 && m->n_writes == 1 && m->writes[0] == 4 && m->n_nodes == 5,
        "fully merged: reads v0, writes v4, covers 5 nodes (got %d reads, %d writes)", m->n_reads, m->n_writes);
  CHECK(kiln_schedule_merge(s, 0, 2) == KILN_E_INTERNAL && strstr(kiln_last_error(), "cannot merge"),
        "bad range rejected: %s", kiln_last_error());
  CHECK(kiln_schedule_merge(s, 0, 1) == KILN_OK && s->n_steps == 1, "merging one step is a no-op");
  kiln_schedule_free(s);

  /* a value written before the group and rewritten inside it stays a read */
  CHECK(kiln_schedule_new(4, &s) == KILN_OK, "new");
  kiln_schedule_add_step(s, L(0), 1, L(1), 1, 0);
  kiln_schedule_add_step(s, L(1), 1, L(2), 1, 1);
  kiln_schedule_add_step(s, L(2), 1, L(1), 1, 2); /* rewrites v1 */
  kiln_schedule_add_step(s, L(1), 1, L(3), 1, 3);
  CHECK(kiln_schedule_merge(s, 1, 2) == KILN_OK, "merge");
  m = &s->steps[1];
  CHECK(m->n_reads == 1 && m->reads[0] == 1 && m->n_writes == 1 && m->writes[0] == 1,
        "rewritten value: read and written (got %d reads, %d writes)", m->n_reads, m->n_writes);
  kiln_schedule_free(s);
}

/* ---- hand-made plans ---- */

static void test_chain_inplace(void) {
  /* x(ext) -> e0 -> e1 -> ... -> e9 -> y(ext): ten elementwise ops on 1 MB */
  tb *t = tb_new();
  int prev = val(t, 1 << 20, true);
  for (int i = 0; i < 10; i++) {
    int v = val(t, 1 << 20, i == 9);
    int s = STEP(t, L(prev), L(v));
    inplace(t, s, v, prev);
    prev = v;
  }
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, true);
  kiln_memplan *p = plan_checked(&req, "chain in place");
  if (p) {
    CHECK(p->arena_size == 1 << 20 && p->n_inplace == 8, "chain reuses one buffer: arena %" PRIu64 ", %d in place",
          p->arena_size, p->n_inplace);
    int same = 1;
    for (int v = 2; v <= 9; v++) same &= p->offset[v] == p->offset[1] && p->storage[v] == 1;
    CHECK(same, "every link of the chain at one offset, owned by the first");
    CHECK(p->lower_bound == 1 << 20 && p->no_reuse == 9u << 20, "lower bound 1 MB, no reuse 9 MB (%" PRIu64 ")",
          p->no_reuse);
  }
  kiln_memplan_free(p);
  req = tb_req(t, false);
  p = plan_checked(&req, "chain, no in place");
  CHECK(p && p->arena_size == 2u << 20 && p->lower_bound == 2u << 20, "ping-pong without in place: %" PRIu64,
        p ? p->arena_size : 0);
  kiln_memplan_free(p);
  tb_free(t);
}

static void test_diamond(void) {
  /* x -> a; a -> b; a -> c; b, c -> d; d -> y. Sizes not multiples of 64. */
  tb *t = tb_new();
  int x = val(t, 1000, true), a = val(t, 100, false), b = val(t, 200, false), c = val(t, 300, false);
  int d = val(t, 400, false), y = val(t, 50, true);
  STEP(t, L(x), L(a));
  STEP(t, L(a), L(b));
  STEP(t, L(a), L(c));
  int s3 = STEP(t, L(b, c), L(d));
  STEP(t, L(d), L(y));
  inplace(t, s3, d, b); /* sizes differ: refused */
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, true);
  kiln_memplan *p = plan_checked(&req, "diamond");
  if (p) {
    CHECK(p->lower_bound == 256 + 320 + 448 && p->arena_size == p->lower_bound,
          "diamond: arena %" PRIu64 " == lower bound %" PRIu64 " == 1024", p->arena_size, p->lower_bound);
    CHECK(p->no_reuse == 128 + 256 + 320 + 448, "no reuse counts aligned sizes: %" PRIu64, p->no_reuse);
    CHECK(p->n_inplace == 0, "in place with different sizes refused");
    int aligned = 1;
    for (int v = a; v <= d; v++) aligned &= p->offset[v] % 64 == 0;
    CHECK(aligned, "offsets 64-aligned");
  }
  kiln_memplan_free(p);
  tb_free(t);
}

static void test_skips(void) {
  /* U-Net / ResNet-like: an encoder keeps every level alive until its
   * decoder; small temporaries come and go in between. */
  tb *t = tb_new();
  int in = val(t, 1 << 16, true), prev = in, enc[5];
  for (int l = 0; l < 5; l++) {
    uint64_t sz = (uint64_t)(1 << 20) >> l;
    int tmp = val(t, sz, false);
    STEP(t, L(prev), L(tmp));
    enc[l] = val(t, sz, false);
    STEP(t, L(tmp), L(enc[l]));
    prev = enc[l];
  }
  for (int l = 4; l >= 0; l--) {
    uint64_t sz = (uint64_t)(1 << 20) >> l;
    int up = val(t, sz, false);
    STEP(t, L(prev), L(up));
    int cat = val(t, sz, l == 0);
    STEP(t, L(up, enc[l]), L(cat));
    prev = cat;
  }
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, false);
  kiln_memplan *p = plan_checked(&req, "skips");
  if (p) {
    CHECK(p->arena_size <= p->lower_bound + p->lower_bound / 20, "skips: arena %" PRIu64 " within 1.05x of %" PRIu64,
          p->arena_size, p->lower_bound);
    /* every encoder level stays live through its decoder: it can't share
     * memory with anything written in between */
    CHECK(p->first[enc[0]] == 1 && p->last[enc[0]] == t->ns - 1, "long skip lifetime %d..%d", p->first[enc[0]],
          p->last[enc[0]]);
  }
  kiln_memplan_free(p);
  tb_free(t);
}

static unsigned rnd(unsigned *seed) {
  *seed = *seed * 1103515245u + 12345u;
  return (*seed >> 8) & 0xffffff;
}

static void test_many_small_few_large(void) {
  tb *t = tb_new();
  unsigned seed = 7;
  int prev = val(t, 4096, true), big[3] = {-1, -1, -1};
  for (int i = 0; i < 390; i++) {
    bool large = i % 130 == 5; /* i = 5, 135, 265 */
    int v = val(t, large ? (4u << 20) + 12 : 64 + rnd(&seed) % 3000, false);
    int other = i > 8 ? 1 + (int)(rnd(&seed) % (unsigned)(t->nv - 2)) : prev;
    if (t->ext[other]) other = prev;
    STEP(t, L(prev, other), L(v));
    if (large) big[i / 130] = v;
    prev = v;
  }
  /* the large ones are read again near the end */
  int last = val(t, 64, true);
  STEP(t, L(prev, big[0], big[1], big[2]), L(last));
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, false);
  kiln_memplan *p = plan_checked(&req, "many small, few large");
  if (p) {
    printf("  many small + 3 large: peak %" PRIu64 ", lower bound %" PRIu64 " (%.4fx), no reuse %" PRIu64
           ", order %s\n", p->arena_size, p->lower_bound, (double)p->arena_size / (double)p->lower_bound,
           p->no_reuse, p->strategy);
    CHECK(p->arena_size <= p->lower_bound + p->lower_bound / 20, "many small: arena within 1.05x of lower bound");
  }
  kiln_memplan_free(p);
  tb_free(t);
}

static void test_aliases(void) {
  /* x -> a; r = view(a), q = view(r); a -> b; q -> c; b, c -> y.
   * a's storage lives until q's last read (step 2). */
  tb *t = tb_new();
  int x = val(t, 4096, true), a = val(t, 4096, false), r = view(t, a), q = view(t, r);
  int b = val(t, 4096, false), c = val(t, 4096, false), y = val(t, 4096, true);
  int xv = view(t, x); /* a view of a host value is the host's too */
  STEP(t, L(x), L(a));
  int s1 = STEP(t, L(a), L(b));
  STEP(t, L(q, xv), L(c));
  STEP(t, L(b, c), L(y));
  inplace(t, s1, b, a); /* refused: a is still needed through q */
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, true);
  kiln_memplan *p = plan_checked(&req, "aliases");
  if (p) {
    CHECK(p->offset[r] == p->offset[a] && p->offset[q] == p->offset[a] && p->storage[q] == a,
          "views share their base's storage");
    CHECK(p->n_inplace == 0, "in place refused while a view of the input is live");
    CHECK(p->offset[b] != p->offset[a] && p->offset[c] != p->offset[a], "a lives until its view's last read");
    CHECK(p->offset[xv] == KILN_MEMPLAN_NONE, "a view of a host value is outside the arena");
    CHECK(p->arena_size == 3 * 4096 && p->lower_bound == 3 * 4096, "a, b, c all live at step 2: %" PRIu64,
          p->arena_size);
    CHECK(p->no_reuse == 3 * 4096, "views own no storage in the no-reuse total: %" PRIu64, p->no_reuse);
    int64_t keep = p->offset[r];
    p->offset[r] = p->offset[b];
    CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "its base"),
          "a view away from its base not caught: %s", kiln_last_error());
    p->offset[r] = keep;
  }
  kiln_memplan_free(p);
  t->alias[q] = 999;
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && strstr(kiln_last_error(), "outside"),
        "bad view index: %s", kiln_last_error());
  t->alias[q] = r;

  /* errors: a host value that is a view of an arena value; a cycle */
  t->ext[r] = true;
  p = (kiln_memplan *)&p;
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && p == NULL, "external view of arena value accepted");
  CHECK(strstr(kiln_last_error(), "outside the arena but is a view"), "message: %s", kiln_last_error());
  t->ext[r] = false;
  t->alias[a] = q;
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && strstr(kiln_last_error(), "cycle"), "alias cycle: %s",
        kiln_last_error());
  t->alias[a] = -1;
  tb_free(t);

  /* a view read before anything writes its storage */
  t = tb_new();
  x = val(t, 64, true), a = val(t, 64, false), r = view(t, a), y = val(t, 64, true);
  STEP(t, L(x, r), L(y));
  STEP(t, L(x), L(a));
  CHECK(tb_finish(t) == KILN_OK, "finish");
  req = tb_req(t, false);
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && strstr(kiln_last_error(), "a view of value 1") &&
            strstr(kiln_last_error(), "step 0"),
        "view read early: %s", kiln_last_error());
  tb_free(t);
}

static void test_inplace_rules(void) {
  /* x -> a; a -> b (cand); a -> c (cand: a's last use); b, c -> y (cand into b
   * refused: y external) */
  tb *t = tb_new();
  int x = val(t, 1024, true), a = val(t, 1024, false), b = val(t, 1024, false), c = val(t, 1024, false);
  int d = val(t, 1024, false), y = val(t, 1024, true);
  STEP(t, L(x), L(a));
  int s1 = STEP(t, L(a), L(b));
  int s2 = STEP(t, L(a), L(c));
  int s3 = STEP(t, L(b, c), L(d));
  STEP(t, L(d), L(y));
  inplace(t, s1, b, a);     /* refused: a read again at s2 */
  inplace(t, s2, c, a);     /* accepted */
  inplace(t, s3, d, b);     /* accepted (b dies at s3) */
  inplace(t, s3, d, c);     /* refused: d already shares storage */
  inplace(t, s3 + 1, y, d); /* refused: y is the host's */
  inplace(t, s2, c, x);     /* refused: x is the host's, and s2 does not read x */
  inplace(t, s1, b, d);     /* refused: s1 does not read d */
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, true);
  kiln_memplan *p = plan_checked(&req, "in-place rules");
  if (p) {
    CHECK(p->n_inplace == 2 && p->inplace[0].step == s2 && p->inplace[0].out == c && p->inplace[1].step == s3 &&
              p->inplace[1].out == d && p->inplace[1].in == b,
          "accepted exactly (s2, c, a) and (s3, d, b): got %d", p->n_inplace);
    CHECK(p->arena_size == 2048 && p->lower_bound == 2048, "in-place rules: arena %" PRIu64, p->arena_size);
  }
  kiln_memplan_free(p);
  tb_free(t);

  /* Add(a, transpose(a)) may not write over a: the step reads another view
   * of the storage it would overwrite */
  t = tb_new();
  x = val(t, 1024, true), a = val(t, 1024, false);
  int at = view(t, a), e = val(t, 1024, false);
  y = val(t, 1024, true);
  STEP(t, L(x), L(a));
  s1 = STEP(t, L(a, at), L(e));
  STEP(t, L(e), L(y));
  inplace(t, s1, e, a);
  CHECK(tb_finish(t) == KILN_OK, "finish");
  req = tb_req(t, true);
  p = plan_checked(&req, "in place with a second view read");
  CHECK(p && p->n_inplace == 0 && p->arena_size == 2048, "in place over a storage read through another view refused");
  if (p) { /* and the checker refuses it when forced */
    kiln_memplan_inplace forced = {s1, e, a};
    kiln_free(p->inplace);
    p->inplace = kiln_malloc(sizeof forced);
    p->inplace[0] = forced;
    p->n_inplace = 1;
    p->offset[e] = p->offset[a];
    CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "another view"),
          "forced unsafe in place not caught: %s", kiln_last_error());
  }
  kiln_memplan_free(p);

  /* a bad index is an error, not a refusal */
  inplace(t, 99, a, x);
  req = tb_req(t, true);
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && strstr(kiln_last_error(), "out of range"),
        "bad candidate: %s", kiln_last_error());
  tb_free(t);
}

static void test_errors(void) {
  tb *t = tb_new();
  int x = val(t, 64, true), a = val(t, 64, false), b = val(t, 64, false), c = val(t, 64, false);
  STEP(t, L(x, b), L(a)); /* reads b before... */
  STEP(t, L(a), L(b));    /* ...it is written here */
  STEP(t, L(c), L(x));    /* c is never written */
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, false);
  kiln_memplan *p = (kiln_memplan *)&req;
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && p == NULL, "read before write accepted");
  CHECK(strstr(kiln_last_error(), "value 2 is read at step 0 before it is written (step 1)"), "message: %s",
        kiln_last_error());
  t->ext[b] = true; /* b now comes from the host: c is the problem */
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && strstr(kiln_last_error(), "value 3") &&
            strstr(kiln_last_error(), "never written"),
        "never written: %s", kiln_last_error());
  t->ext[c] = true;
  CHECK(kiln_memplan_build(&req, &p) == KILN_OK, "all fine now: %s", kiln_last_error());
  kiln_memplan_free(p);
  t->size[a] = (uint64_t)1 << 60;
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_UNSUPPORTED_SHAPE && strstr(kiln_last_error(), "sizes overflow") &&
            strstr(kiln_last_error(), "value 1"),
        "huge value: %s", kiln_last_error());
  t->size[a] = UINT64_MAX; /* would wrap when aligned */
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_UNSUPPORTED_SHAPE, "UINT64_MAX bytes accepted");
  tb_free(t);

  /* each value under the limit, the total over it */
  t = tb_new();
  int prev = val(t, 64, true);
  for (int i = 0; i < 40; i++) {
    int v = val(t, (uint64_t)1 << 43, false);
    STEP(t, L(prev), L(v));
    prev = v;
  }
  CHECK(tb_finish(t) == KILN_OK, "finish");
  req = tb_req(t, false);
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_UNSUPPORTED_SHAPE && strstr(kiln_last_error(), "in all"),
        "total overflow: %s", kiln_last_error());
  req.size = NULL;
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL, "request without sizes accepted");
  CHECK(kiln_memplan_verify(NULL, &req) == KILN_E_INTERNAL, "verify without a plan accepted");
  req.size = t->size;
  t->s->steps[3].reads[0] = 999; /* a schedule edited by hand, badly */
  CHECK(kiln_memplan_build(&req, &p) == KILN_E_INTERNAL && strstr(kiln_last_error(), "step 3 reads value 999"),
        "bad step: %s", kiln_last_error());
  tb_free(t);

  /* nothing to plan is fine */
  t = tb_new();
  CHECK(tb_finish(t) == KILN_OK, "finish");
  req = tb_req(t, false);
  p = plan_checked(&req, "empty schedule");
  CHECK(p && p->arena_size == 0 && p->lower_bound == 0 && p->no_reuse == 0, "empty schedule: empty arena");
  kiln_memplan_free(p);
  tb_free(t);
}

/* The checker rejects broken plans (so its passes mean something). */
static void test_verify_catches(void) {
  tb *t = tb_new();
  int x = val(t, 640, true), a = val(t, 640, false), b = val(t, 640, false), c = val(t, 640, false);
  int y = val(t, 64, true);
  STEP(t, L(x), L(a));
  int s1 = STEP(t, L(a), L(b));
  STEP(t, L(a, b), L(c));
  STEP(t, L(c), L(y));
  inplace(t, s1, b, a); /* refused (a read at s2) */
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, true);
  kiln_memplan *p = plan_checked(&req, "verify base");
  if (!p) {
    tb_free(t);
    return;
  }
  int64_t ob = p->offset[b];
  p->offset[b] = p->offset[a] + 64; /* a and b live together: overlap */
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "overlap"),
        "overlap not caught: %s", kiln_last_error());
  char msg[256];
  CHECK(!simulate(p, &req, msg, sizeof msg), "oracle misses the overlap");
  p->offset[b] = ob + 8;
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "aligned"),
        "misalignment not caught: %s", kiln_last_error());
  p->offset[b] = (int64_t)p->arena_size;
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "past the arena"),
        "out of arena not caught: %s", kiln_last_error());
  p->offset[b] = ob;
  p->offset[x] = 0;
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "outside the arena"),
        "host value in the arena not caught: %s", kiln_last_error());
  p->offset[x] = KILN_MEMPLAN_NONE;
  p->lower_bound--;
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "lower bound"),
        "wrong lower bound not caught: %s", kiln_last_error());
  p->lower_bound++;
  /* a forged in-place pair: never proposed */
  kiln_memplan_inplace forged = {2, c, b};
  kiln_memplan_inplace *keep = p->inplace;
  int nkeep = p->n_inplace;
  p->inplace = &forged;
  p->n_inplace = 1;
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "not proposed"),
        "forged in-place pair not caught: %s", kiln_last_error());
  /* proposed, but unsafe: a is read at s2, so b cannot take its storage */
  forged = (kiln_memplan_inplace){s1, b, a};
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "not last used"),
        "unsafe in-place pair not caught: %s", kiln_last_error());
  p->inplace = keep;
  p->n_inplace = nkeep;
  CHECK(kiln_memplan_verify(p, &req) == KILN_OK, "restored plan verifies: %s", kiln_last_error());
  p->n_values--;
  CHECK(kiln_memplan_verify(p, &req) == KILN_E_INTERNAL && strstr(kiln_last_error(), "values"),
        "a plan for another schedule not caught: %s", kiln_last_error());
  p->n_values++;
  kiln_memplan_free(p);
  tb_free(t);
}

/* ---- random schedules ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint64_t rand_size(unsigned *seed) {
  unsigned k = rnd(seed) % 100;
  if (k < 60) return 1 + rnd(seed) % 4096;
  if (k < 92) return 4096 + rnd(seed) % (256 << 10);
  return (256 << 10) + rnd(seed) % (2 << 20);
}

/* A random schedule: steps read 1-3 earlier values (mostly recent, some far
 * back), write 1-2 new ones; host inputs, weights and outputs; views made by
 * a step or out of thin air; rewrites of existing storage; in-place
 * candidates, half with equal sizes. */
static void gen_random(tb *t, unsigned *seed, bool extras) {
  int avail[MAXV], na = 0;
  int n_in = 1 + (int)(rnd(seed) % 3);
  for (int i = 0; i < n_in; i++) avail[na++] = val(t, rand_size(seed), true);
  int n_steps = 1 + (int)(rnd(seed) % 90);
  for (int s = 0; s < n_steps; s++) {
    int r[MAXIO], w[MAXIO], nr = 1 + (int)(rnd(seed) % 3), nw = 1 + (rnd(seed) % 4 == 0);
    for (int k = 0; k < nr; k++) {
      int back = rnd(seed) % 7 == 0 ? (int)(rnd(seed) % (unsigned)na) : (int)(rnd(seed) % 3);
      r[k] = avail[na - 1 - (back < na ? back : na - 1)];
    }
    if (rnd(seed) % 4 == 0) r[nr++] = val(t, rand_size(seed), true); /* a weight */
    for (int k = 0; k < nw; k++) {
      unsigned kind = extras ? rnd(seed) % 100 : 99;
      if (kind < 8) { /* a view step */
        w[k] = view(t, r[0]);
      } else if (kind < 12) { /* rewrite an existing non-host storage */
        int e = avail[rnd(seed) % (unsigned)na];
        w[k] = t->ext[root_of(t->alias, e)] ? val(t, rand_size(seed), false) : e;
      } else {
        w[k] = val(t, rand_size(seed), false);
        if (extras && rnd(seed) % 3 == 0) {
          int in = r[rnd(seed) % (unsigned)nr];
          if (rnd(seed) % 2) t->size[w[k]] = t->size[root_of(t->alias, in)];
          t->ip[t->nip++] = (kiln_memplan_inplace){s, w[k], in};
        }
      }
    }
    step(t, nr, r, nw, w);
    for (int k = 0; k < nw; k++) avail[na++] = w[k];
    if (extras && rnd(seed) % 20 == 0) {
      int base = avail[rnd(seed) % (unsigned)na];
      avail[na++] = view(t, base);
    }
  }
  /* outputs: the last value, and a few others that own their storage */
  for (int v = t->nv - 1, k = 0; v >= 0 && k < 2; v--)
    if (t->alias[v] < 0 && rnd(seed) % 2) t->ext[v] = true, k++;
}

/* ---- the optimum, by brute force, for a few buffers ----
 * Take an optimal packing and place its buffers by first fit (lowest free
 * offset among those live at the same time) in order of their offsets: each
 * lands at or below its optimal offset, so some order reproduces the
 * optimum. Trying every order (with pruning) finds it. */
typedef struct bf {
  int n, start[10], end[10];
  uint64_t size[10], off[10], best;
  bool placed[10];
} bf;

static uint64_t first_fit(const bf *b, int i) {
  uint64_t at = 0;
  for (bool moved = true; moved;) {
    moved = false;
    for (int j = 0; j < b->n; j++)
      if (b->placed[j] && b->start[j] <= b->end[i] && b->start[i] <= b->end[j] && at < b->off[j] + b->size[j] &&
          b->off[j] < at + b->size[i])
        at = b->off[j] + b->size[j], moved = true;
  }
  return at;
}

static void bf_search(bf *b, int depth, uint64_t top) {
  if (top >= b->best) return;
  if (depth == b->n) {
    b->best = top;
    return;
  }
  for (int i = 0; i < b->n; i++) {
    if (b->placed[i]) continue;
    b->off[i] = first_fit(b, i);
    b->placed[i] = true;
    uint64_t t = b->off[i] + b->size[i];
    bf_search(b, depth + 1, t > top ? t : top);
    b->placed[i] = false;
  }
}

/* The optimum for a placement-only request (no views, no in place), or 0
 * when it has more than 9 arena buffers. */
static uint64_t optimum(const kiln_memplan_request *req) {
  const kiln_schedule *s = req->sched;
  bf b = {.best = UINT64_MAX};
  for (int v = 0; v < s->n_values; v++) {
    if (req->external[v]) continue;
    int first = -1, last = -1;
    for (int i = 0; i < s->n_steps; i++)
      if (kiln_step_reads(&s->steps[i], v) || kiln_step_writes(&s->steps[i], v))
        last = i, first = first < 0 ? i : first;
    if (first < 0) continue;
    if (b.n == 9) return 0;
    b.start[b.n] = first, b.end[b.n] = last, b.size[b.n++] = A64(req->size[v]);
  }
  bf_search(&b, 0, 0);
  return b.best;
}

static void report_ratios(const char *what, const char *ratio_name, double *ratio, int n) {
  qsort(ratio, (size_t)n, sizeof *ratio, cmp_double);
  int at_bound = 0;
  for (int i = 0; i < n; i++) at_bound += ratio[i] == 1.0;
  printf("  %s: %d cases, %s median %.4f, p90 %.4f, p99 %.4f, max %.4f; equal in %d\n", what, n, ratio_name,
         ratio[n / 2], ratio[n * 9 / 10], ratio[n * 99 / 100], ratio[n - 1], at_bound);
}

static void test_random(void) {
  enum { CASES = 3000 };
  static double ratio[2][CASES], vs_opt[CASES];
  int n[2] = {0, 0}, n_opt = 0, beat_opt = 0, bad_build = 0, bad_verify = 0, bad_oracle = 0, bad_bounds = 0;
  int inplace_taken = 0, views = 0;
  char first_msg[512] = "";
  unsigned seed = 12345;
  for (int i = 0; i < 2 * CASES; i++) {
    bool extras = i % 2;
    tb *t = tb_new();
    gen_random(t, &seed, extras);
    if (tb_finish(t)) {
      bad_build++;
      tb_free(t);
      continue;
    }
    for (int v = 0; v < t->nv; v++) views += t->alias[v] >= 0;
    kiln_memplan_request req = tb_req(t, true);
    kiln_memplan *p = NULL;
    char msg[256] = "";
    if (kiln_memplan_build(&req, &p)) {
      bad_build++;
      if (!*first_msg) snprintf(first_msg, sizeof first_msg, "case %d build: %s", i, kiln_last_error());
    } else {
      if (kiln_memplan_verify(p, &req)) {
        bad_verify++;
        if (!*first_msg) snprintf(first_msg, sizeof first_msg, "case %d verify: %s", i, kiln_last_error());
      }
      if (!simulate(p, &req, msg, sizeof msg)) {
        bad_oracle++;
        if (!*first_msg) snprintf(first_msg, sizeof first_msg, "case %d oracle: %s", i, msg);
      }
      if (p->arena_size < p->lower_bound || p->arena_size > p->no_reuse) bad_bounds++;
      inplace_taken += p->n_inplace;
      if (p->lower_bound) ratio[extras][n[extras]++] = (double)p->arena_size / (double)p->lower_bound;
      uint64_t opt = extras ? 0 : optimum(&req);
      if (opt) {
        beat_opt += p->arena_size < opt;
        vs_opt[n_opt++] = (double)p->arena_size / (double)opt;
      }
      kiln_memplan_free(p);
    }
    tb_free(t);
  }
  CHECK(bad_build == 0, "%d random plans failed to build; first: %s", bad_build, first_msg);
  CHECK(bad_verify == 0, "%d random plans failed the checker; first: %s", bad_verify, first_msg);
  CHECK(bad_oracle == 0, "%d random plans failed the oracle; first: %s", bad_oracle, first_msg);
  CHECK(bad_bounds == 0, "%d random plans outside [lower bound, no reuse]", bad_bounds);
  CHECK(inplace_taken > 0 && views > 0, "the random cases exercise in place (%d) and views (%d)", inplace_taken,
        views);
  CHECK(n[0] > CASES / 2 && n[1] > CASES / 2, "most random cases have arena values (%d, %d)", n[0], n[1]);
  CHECK(beat_opt == 0 && n_opt > 100, "%d plans smaller than the brute-force optimum (of %d)", beat_opt, n_opt);
  report_ratios("random, placement only", "peak/lower-bound", ratio[0], n[0]);
  report_ratios("random, placement only, at most 9 buffers", "peak/brute-force-optimum", vs_opt, n_opt);
  report_ratios("random, views + in place + rewrites", "peak/lower-bound", ratio[1], n[1]);
}

/* ---- scale: a long chain, and a dense graph ---- */

static void test_scale(void) {
  /* 5000 values in a chain, each read again up to 10 steps later; sizes
   * from 64 B to 1 MB */
  kiln_schedule *s = NULL;
  int n = 5000;
  uint64_t *size = calloc((size_t)n + 1, sizeof *size);
  bool *ext = calloc((size_t)n + 1, sizeof *ext);
  unsigned seed = 1;
  CHECK(kiln_schedule_new(n + 1, &s) == KILN_OK && size && ext, "new");
  ext[0] = ext[n] = true;
  for (int i = 1; i <= n; i++) {
    size[i] = 64 + rnd(&seed) % (1 << 20);
    int r[2] = {i - 1, i > 10 ? i - 1 - (int)(rnd(&seed) % 10) : i - 1};
    kiln_schedule_add_step(s, r, 2, &i, 1, i - 1);
  }
  kiln_memplan_request req = {s, size, ext, NULL, NULL, 0};
  clock_t t0 = clock();
  kiln_memplan *p = plan_checked(&req, "long chain");
  if (p) {
    printf("  long chain (%d values): peak %" PRIu64 ", lower bound %" PRIu64 " (%.4fx), %.3f s with checks, "
           "order %s\n", n, p->arena_size, p->lower_bound, (double)p->arena_size / (double)p->lower_bound,
           (double)(clock() - t0) / CLOCKS_PER_SEC, p->strategy);
    CHECK(p->arena_size <= p->lower_bound + p->lower_bound / 20, "long chain within 1.05x");
  }
  kiln_memplan_free(p);
  kiln_schedule_free(s);

  /* 4000 values each live for 2000 steps: 6M overlapping pairs, too many to
   * list (KILN_MEMPLAN_MAX_ADJ), so the planner takes its scanning path */
  n = 4000;
  int window = 2000;
  CHECK(kiln_schedule_new(n, &s) == KILN_OK, "new");
  for (int t = 0; t < n + window; t++) {
    int r[2], nr = 0, w = t;
    if (t >= window) r[nr++] = t - window;
    if (t > 0 && t - 1 < n) r[nr++] = t - 1;
    kiln_schedule_add_step(s, r, nr, &w, t < n ? 1 : 0, t);
    if (t < n) size[t] = 64 + rnd(&seed) % 4096, ext[t] = false;
  }
  req.sched = s;
  t0 = clock();
  p = plan_checked(&req, "dense");
  if (p)
    printf("  dense (%d values, %d live at once): peak %" PRIu64 ", lower bound %" PRIu64 " (%.4fx), %.3f s with "
           "checks, order %s\n", n, window, p->arena_size, p->lower_bound,
           (double)p->arena_size / (double)p->lower_bound, (double)(clock() - t0) / CLOCKS_PER_SEC, p->strategy);
  kiln_memplan_free(p);
  kiln_schedule_free(s);
  free(size);
  free(ext);
}

/* ---- ResNet-18 at 1x3x224x224 float ---- */

typedef struct resnet {
  tb *t;
  bool fused_bn; /* conv+bn(+relu) as one step (after BN folding / fusion) */
} resnet;

static int conv(resnet *n, int in, int c, int hw, int wsize) {
  tb *t = n->t;
  int w = val(t, (uint64_t)wsize * 4, true), out = val(t, (uint64_t)c * hw * hw * 4, false);
  STEP(t, L(in, w), L(out));
  return out;
}

static int ew(resnet *n, int in) { /* bn (inference) or relu: elementwise, in place allowed */
  tb *t = n->t;
  int out = val(t, t->size[in], false);
  int s = STEP(t, L(in), L(out));
  inplace(t, s, out, in);
  return out;
}

static int block(resnet *n, int in, int cin, int c, int hw, bool down) {
  int a = ew(n, ew(n, conv(n, in, c, hw, c * cin * 9)));
  int b = ew(n, conv(n, a, c, hw, c * c * 9));
  int skip = down ? ew(n, conv(n, in, c, hw, c * cin)) : in;
  tb *t = n->t;
  int sum = val(t, t->size[b], false);
  int s = STEP(t, L(b, skip), L(sum));
  inplace(t, s, sum, b);
  inplace(t, s, sum, skip);
  return ew(n, sum);
}

static tb *resnet18(void) {
  resnet n = {tb_new(), false};
  tb *t = n.t;
  int x = val(t, 3 * 224 * 224 * 4, true);
  int v = ew(&n, ew(&n, conv(&n, x, 64, 112, 64 * 3 * 49)));
  int pool = val(t, 64 * 56 * 56 * 4, false);
  STEP(t, L(v), L(pool));
  v = pool;
  int cin = 64, hw = 56;
  for (int stage = 0; stage < 4; stage++) {
    int c = 64 << stage;
    if (stage) hw /= 2;
    v = block(&n, v, cin, c, hw, stage > 0);
    v = block(&n, v, c, c, hw, false);
    cin = c;
  }
  int gap = val(t, 512 * 4, false);
  STEP(t, L(v), L(gap));
  int flat = view(t, gap);
  int fcw = val(t, 1000 * 512 * 4, true), out = val(t, 1000 * 4, true);
  STEP(t, L(flat, fcw), L(out));
  return t;
}

static void test_resnet18(void) {
  tb *t = resnet18();
  CHECK(tb_finish(t) == KILN_OK, "finish");
  kiln_memplan_request req = tb_req(t, true);
  kiln_memplan *p = plan_checked(&req, "resnet-18");
  if (p) {
    printf("  resnet-18 (%d steps, %d values): peak %" PRIu64 ", lower bound %" PRIu64 " (%.4fx), no reuse %" PRIu64
           " (%.1fx peak), %d in place, order %s\n",
           t->s->n_steps, t->nv, p->arena_size, p->lower_bound, (double)p->arena_size / (double)p->lower_bound,
           p->no_reuse, (double)p->no_reuse / (double)p->arena_size, p->n_inplace, p->strategy);
    /* conv1's output (3.2 MB) and the max-pool output (0.8 MB) are live together */
    CHECK(p->lower_bound == (uint64_t)64 * 112 * 112 * 4 + 64 * 56 * 56 * 4, "resnet-18 lower bound %" PRIu64,
          p->lower_bound);
    CHECK((double)p->arena_size <= 1.05 * (double)p->lower_bound, "resnet-18 peak %" PRIu64 " > 1.05x %" PRIu64,
          p->arena_size, p->lower_bound);
    CHECK(p->n_inplace >= 2 * 17, "bn and relu run in place (%d)", p->n_inplace);
  }
  kiln_memplan_free(p);
  req = tb_req(t, false);
  p = plan_checked(&req, "resnet-18, no in place");
  if (p) {
    printf("  resnet-18 without in place: peak %" PRIu64 ", lower bound %" PRIu64 " (%.4fx), no reuse %" PRIu64
           ", order %s\n", p->arena_size, p->lower_bound, (double)p->arena_size / (double)p->lower_bound,
           p->no_reuse, p->strategy);
    CHECK((double)p->arena_size <= 1.05 * (double)p->lower_bound, "resnet-18 (no in place) within 1.05x");
  }
  kiln_memplan_free(p);

  /* fused: merge every conv with the elementwise steps after it (as fusion
   * does); the intermediates disappear from memory */
  kiln_schedule *s = t->s;
  for (int i = 0; i < s->n_steps; i++) {
    if (s->steps[i].n_reads < 2) continue; /* a conv (input, weight) or an add */
    int j = i + 1;
    while (j < s->n_steps && s->steps[j].n_reads == 1 && s->steps[j].n_nodes == 1 &&
           t->size[s->steps[j].reads[0]] == t->size[s->steps[j].writes[0]] && t->ext[s->steps[j].reads[0]] == 0)
      j++;
    if (j - i > 1) CHECK(kiln_schedule_merge(s, i, j - i) == KILN_OK, "merge: %s", kiln_last_error());
  }
  req = tb_req(t, false);
  p = plan_checked(&req, "resnet-18 fused");
  if (p) {
    printf("  resnet-18 fused (%d steps): peak %" PRIu64 ", lower bound %" PRIu64 " (%.4fx), no reuse %" PRIu64
           ", order %s\n", s->n_steps, p->arena_size, p->lower_bound, (double)p->arena_size / (double)p->lower_bound,
           p->no_reuse, p->strategy);
    CHECK((double)p->arena_size <= 1.05 * (double)p->lower_bound, "fused resnet-18 within 1.05x");
  }
  kiln_memplan_free(p);
  tb_free(t);
}

int main(void) {
  test_schedule_from_graph();
  test_schedule_merge();
  test_chain_inplace();
  test_diamond();
  test_skips();
  test_many_small_few_large();
  test_aliases();
  test_inplace_rules();
  test_errors();
  test_verify_catches();
  test_random();
  test_scale();
  test_resnet18();
  printf("unit_memplan: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
