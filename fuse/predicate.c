/* fuse/predicate: the fusion context, the group state it keeps, and the
 * "may these fuse?" rules (one check shared by the pairwise predicate, the
 * open-group predicate and the grouping pass). */
#include "fuse/predicate.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fuse/fuse_impl.h"
#include "ir/alloc.h"

/* ---- reasons ---- */

static bool reason(bool res, char *why, size_t size, const char *fmt, va_list ap) {
  if (!why || !size) return res;
  int at = snprintf(why, size, "%s", res ? "ok: " : "no: ");
  if (at >= 0 && (size_t)at < size) vsnprintf(why + at, size - (size_t)at, fmt, ap);
  return res;
}

__attribute__((format(printf, 3, 4))) static bool no(char *why, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  reason(false, why, size, fmt, ap);
  va_end(ap);
  return false;
}

__attribute__((format(printf, 3, 4))) static bool yes(char *why, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  reason(true, why, size, fmt, ap);
  va_end(ap);
  return true;
}

/* ---- context ---- */

kiln_status kiln_fuse_ctx_new(const kiln_graph *g, const kiln_shapes *sh, const kiln_fuse_opts *opts,
                              kiln_fuse_ctx **out) {
  *out = NULL;
  if (!g || !sh || sh->n != g->n_values) return kiln_fail(KILN_E_INTERNAL, "fuse: shapes do not match the graph");
  kiln_fuse_ctx *c = kiln_calloc(1, sizeof *c);
  if (!c) return kiln_fail(KILN_E_NOMEM, "fuse: out of memory");
  c->g = g;
  c->sh = sh;
  if (opts) c->opts = *opts;
  if (c->opts.max_nodes <= 0) c->opts.max_nodes = KILN_FUSE_DEFAULT_MAX_NODES;
  if (c->opts.max_inputs <= 0) c->opts.max_inputs = KILN_FUSE_DEFAULT_MAX_INPUTS;
  if (c->opts.max_inputs > KILN_FUSE_MAX_INPUTS) c->opts.max_inputs = KILN_FUSE_MAX_INPUTS;
  size_t nn = (size_t)g->n_nodes + 1, nv = (size_t)g->n_values + 1;
  c->def = kiln_calloc(nn, sizeof *c->def);
  c->group_of = kiln_calloc(nn, sizeof *c->group_of);
  c->role = kiln_calloc(nv, 1);
  c->leaf_base = kiln_calloc(nv, sizeof *c->leaf_base);
  c->cons_off = kiln_calloc(nv + 1, sizeof *c->cons_off);
  size_t n_edges = 1;
  for (int i = 0; i < g->n_nodes; i++) n_edges += (size_t)g->nodes[i].n_in;
  c->cons = kiln_calloc(n_edges, sizeof *c->cons);
  if (!c->def || !c->group_of || !c->role || !c->leaf_base || !c->cons_off || !c->cons) {
    kiln_fuse_ctx_free(c);
    return kiln_fail(KILN_E_NOMEM, "fuse: out of memory for %d nodes", g->n_nodes);
  }
  for (int i = 0; i < g->n_nodes; i++) c->def[i] = kiln_fuse_kind_def_of(&g->nodes[i]);
  /* distinct readers of each value, as CSR */
  for (int pass = 0; pass < 2; pass++) {
    int *fill = pass ? c->leaf_base : NULL; /* borrowed as a cursor, reset below */
    if (pass) {
      for (int v = 0; v < g->n_values; v++) c->cons_off[v + 1] += c->cons_off[v];
      for (int v = 0; v < g->n_values; v++) fill[v] = c->cons_off[v];
    }
    for (int i = 0; i < g->n_nodes; i++) {
      const kiln_node *n = &g->nodes[i];
      for (int k = 0; k < n->n_in; k++) {
        int v = n->in[k];
        bool seen = v < 0;
        for (int j = 0; j < k && !seen; j++) seen = n->in[j] == v;
        if (seen) continue;
        if (pass) c->cons[fill[v]++] = i;
        else c->cons_off[v + 1]++;
      }
    }
  }
  kiln_fuse_ctx_reset(c);
  *out = c;
  return KILN_OK;
}

void kiln_fuse_ctx_free(kiln_fuse_ctx *c) {
  if (!c) return;
  kiln_free(c->def);
  kiln_free(c->group_of);
  kiln_free(c->role);
  kiln_free(c->leaf_base);
  kiln_free(c->cons_off);
  kiln_free(c->cons);
  kiln_free(c->groups);
  kiln_free(c->vals);
  kiln_free(c);
}

kiln_status kiln_fuse_ctx_bind(kiln_fuse_ctx *c, const int64_t *vals, int n) {
  int64_t *copy = NULL;
  if (n > 0) {
    if (!(copy = kiln_malloc(sizeof *copy * (size_t)n))) return kiln_fail(KILN_E_NOMEM, "fuse: out of memory");
    memcpy(copy, vals, sizeof *copy * (size_t)n);
  }
  kiln_free(c->vals);
  c->vals = copy;
  c->n_vals = n > 0 ? n : 0;
  return KILN_OK;
}

void kiln_fuse_ctx_reset(kiln_fuse_ctx *c) {
  for (int i = 0; i < c->g->n_nodes; i++) c->group_of[i] = -1;
  for (int v = 0; v < c->g->n_values; v++) {
    c->role[v] = KILN_FUSE_ROLE_MEM;
    c->leaf_base[v] = -1;
  }
  c->n_groups = 0;
  c->open = -1;
}

int kiln_fuse_ctx_group_of(const kiln_fuse_ctx *c, int node) {
  return node >= 0 && node < c->g->n_nodes ? c->group_of[node] : -1;
}

int kiln_fuse_ctx_open_group(const kiln_fuse_ctx *c) { return c->open; }

/* ---- the join check ---- */

static const kiln_fuse_gstate empty_group = {0, -1, -1, -1, 0, false, 0, {0}, 0, {false}, 0, 0, {0}};

/* The role of value v in group gid (or in the overlay of a group being
 * imagined); MEM when v is read from memory. *base gets the memory value a
 * LEAF views (v itself for MEM). */
static int role_of(const kiln_fuse_ctx *c, int gid, const kiln_fuse_outroles *ov, int v, int *base) {
  *base = v;
  if (v < 0) return KILN_FUSE_ROLE_MEM;
  if (ov)
    for (int i = 0; i < ov->n; i++)
      if (ov->value[i] == v) {
        *base = ov->base[i];
        return ov->role[i];
      }
  int p = c->g->values[v].producer;
  if (p >= 0 && gid >= 0 && c->group_of[p] == gid) {
    *base = c->leaf_base[v];
    return c->role[v];
  }
  return KILN_FUSE_ROLE_MEM;
}

static void add_out(kiln_fuse_outroles *o, int v, int role, int base) {
  if (v < 0 || o->n >= KILN_FUSE_MAX_OUTS) return;
  o->value[o->n] = v;
  o->role[o->n] = (unsigned char)role;
  o->base[o->n++] = base;
}

/* Whether value v is used: read by a node or listed as a graph output. */
static bool used(const kiln_fuse_ctx *c, int v) {
  return v >= 0 && (c->g->values[v].is_output || c->cons_off[v + 1] > c->cons_off[v]);
}

static void set_domain(kiln_fuse_gstate *A, const kiln_vshape *s, kiln_dimx numel) {
  A->has_domain = true;
  A->rank = s->rank;
  for (int d = 0; d < s->rank; d++) A->dims[d] = s->dims[d];
  A->numel = numel;
}

/* Adds memory value v to the group's loads; false when that passes the cap. */
static bool add_read(const kiln_fuse_ctx *c, kiln_fuse_gstate *A, int v) {
  for (int i = 0; i < A->n_reads; i++)
    if (A->reads[i] == v) return true;
  if (A->n_reads >= c->opts.max_inputs) return false;
  A->reads[A->n_reads++] = v;
  return true;
}

#define SHAPE(val, buf) kiln_fuse_dims_str(tab, sh->v[val].rank, sh->v[val].dims, buf, sizeof buf)

/* May node join group G (id gid, or an imagined group: gid -1 with the
 * roles of its values in ov)? On true, *A is G with node added and outs
 * lists the roles node's outputs take. */
static bool check(const kiln_fuse_ctx *c, const kiln_fuse_gstate *G, int gid, const kiln_fuse_outroles *ov, int node,
                  kiln_fuse_gstate *A, kiln_fuse_outroles *outs, char *why, size_t size) {
  const kiln_graph *g = c->g;
  const kiln_shapes *sh = c->sh;
  kiln_symtab *tab = sh->tab;
  const kiln_node *n = &g->nodes[node];
  const kiln_fuse_kind_def *def = c->def[node];
  char me[160], other[160], b1[200], b2[200], sub[256];
  kiln_fuse_node_str(g, node, me, sizeof me);
  *A = *G;
  A->n_nodes++;
  outs->n = 0;
  if (n->n_out > KILN_FUSE_MAX_OUTS) return no(why, size, "%s has more than %d outputs", me, KILN_FUSE_MAX_OUTS);
  for (int k = 0; k < n->n_in + n->n_out; k++) {
    int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
    if (v >= 0 && (sh->v[v].rank < 0 || sh->v[v].data_dependent))
      return no(why, size, "%s: the shape of '%s' is data-dependent: opaque", me, g->values[v].name);
  }
  if (!def || def->kind == KILN_FUSE_OPAQUE) return no(why, size, "%s is opaque", me);
  if (def->roles & KILN_FUSE_NOSPEC)
    return no(why, size, "%s is %s but has no kernel-spec form yet", me, kiln_fuse_kind_name(def->kind));
  if (G->opaque >= 0)
    return no(why, size, "the group holds %s, which is opaque", kiln_fuse_node_str(g, G->opaque, other, sizeof other));
  if (G->n_nodes > 0 && A->n_nodes > c->opts.max_nodes)
    return no(why, size, "group size cap: a group holds at most %d nodes", c->opts.max_nodes);
  if (G->pool >= 0)
    return no(why, size, "the group ends at its pooling (%s)", kiln_fuse_node_str(g, G->pool, other, sizeof other));
  bool reads_group = false, is_view = (def->roles & KILN_FUSE_VIEW) != 0;
  int base0 = -1, base;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && role_of(c, gid, ov, n->in[k], &base) != KILN_FUSE_ROLE_MEM) reads_group = true;
  int r0 = n->n_in > 0 ? role_of(c, gid, ov, n->in[0], &base0) : KILN_FUSE_ROLE_MEM;
  if (G->n_nodes > 0 && !reads_group && !(is_view && r0 == KILN_FUSE_ROLE_MEM))
    return no(why, size, "%s reads nothing computed in the group", me);

  /* views: index maps */
  if (is_view) {
    if (!kiln_fuse_view_known(g, sh, n, sub, sizeof sub)) return no(why, size, "%s", sub);
    for (int k = 1; k < n->n_in; k++)
      if (role_of(c, gid, ov, n->in[k], &base) != KILN_FUSE_ROLE_MEM)
        return no(why, size, "%s reads its parameters from a value computed in the group", me);
    bool leaf = r0 == KILN_FUSE_ROLE_MEM || r0 == KILN_FUSE_ROLE_LEAF;
    if (!leaf && !((def->roles & KILN_FUSE_RESHAPE) && (r0 == KILN_FUSE_ROLE_FULL || r0 == KILN_FUSE_ROLE_REDUCED)))
      return no(why, size,
                "%s reorders a value computed in the group (only views that keep row-major order apply to "
                "computed values): it starts a new group",
                me);
    for (int k = 0; k < n->n_out; k++)
      add_out(outs, n->out[k], leaf ? KILN_FUSE_ROLE_LEAF : r0, leaf ? base0 : -1);
    return yes(why, size, "%s is an index map over %s", me,
               leaf ? "a value from memory" : "a value computed in the group, in the same order");
  }

  /* anchors and pooling */
  if (def->kind == KILN_FUSE_OUT_EWISE) {
    for (int k = 1; k < n->n_out; k++)
      if (used(c, n->out[k])) return no(why, size, "%s's output %d is used: only output 0 has a kernel-spec form", me, k);
    int w = n->out[0];
    kiln_dimx nw;
    if (w < 0 || !kiln_fuse_numel(tab, sh->v[w].rank, sh->v[w].dims, &nw))
      return no(why, size, "%s has no sized output 0", me);
    if (G->n_nodes == 0) {
      A->anchor = node;
      set_domain(A, &sh->v[w], nw);
      add_out(outs, w, KILN_FUSE_ROLE_FULL, -1);
      return yes(why, size, "%s anchors a group (it takes an elementwise epilogue and one pooling)", me);
    }
    if (!(def->roles & KILN_FUSE_POOL))
      return no(why, size, "%s starts its own group (an anchor takes an epilogue, not a prologue)", me);
    if (G->anchor < 0 || G->n_red > 0)
      return no(why, size, "pooling joins only a group with an anchor: %s starts its own", me);
    if (r0 != KILN_FUSE_ROLE_FULL) return no(why, size, "%s pools a value that is not the anchor's epilogue", me);
    A->pool = node;
    add_out(outs, w, KILN_FUSE_ROLE_POOLED, -1);
    return yes(why, size, "%s pools %s's epilogue; the group ends here", me,
               kiln_fuse_node_str(g, G->anchor, other, sizeof other));
  }

  /* reductions */
  if (def->kind == KILN_FUSE_REDUCTION) {
    if (G->anchor >= 0)
      return no(why, size, "a reduction does not fuse after %s (an anchor takes only an elementwise epilogue and pooling)",
                kiln_fuse_node_str(g, G->anchor, other, sizeof other));
    bool red[KILN_MAX_RANK];
    int nr;
    if (!kiln_fuse_red_axes(g, sh, n, red, &nr, sub, sizeof sub)) return no(why, size, "%s", sub);
    if (r0 == KILN_FUSE_ROLE_REDUCED) return no(why, size, "%s reduces a value the group has already reduced", me);
    for (int k = 1; k < n->n_in; k++) {
      int r = role_of(c, gid, ov, n->in[k], &base);
      if (r != KILN_FUSE_ROLE_MEM && (r != KILN_FUSE_ROLE_LEAF || !kiln_fuse_data_input(n, k)))
        return no(why, size, "%s's input %d must be read from memory", me, k);
    }
    int u = n->in[0];
    const kiln_vshape *us = &sh->v[u];
    if (A->n_red + nr > KILN_FUSE_MAX_REDUCTIONS)
      return no(why, size, "at most %d reductions per group (%s adds %d to %d)", KILN_FUSE_MAX_REDUCTIONS, me, nr,
                A->n_red);
    if (G->n_red > 0) {
      if (!kiln_fuse_shape_eq(tab, us->rank, us->dims, G->rank, G->dims))
        return no(why, size, "%s's reduction domain %s differs from the group's %s", me, SHAPE(u, b1),
                  kiln_fuse_dims_str(tab, G->rank, G->dims, b2, sizeof b2));
      for (int d = 0; d < us->rank; d++)
        if (red[d] != G->red[d]) return no(why, size, "%s reduces other axes than the group's reduction", me);
    } else {
      kiln_dimx nu, one, dims[KILN_MAX_RANK];
      if (!kiln_fuse_numel(tab, us->rank, us->dims, &nu)) return no(why, size, "cannot size %s's input", me);
      if (G->has_domain && !kiln_fuse_dim_eq(tab, nu, G->numel))
        return no(why, size, "%s's reduction domain %s differs from the group's iteration domain %s", me,
                  SHAPE(u, b1), kiln_fuse_dims_str(tab, G->rank, G->dims, b2, sizeof b2));
      if (kiln_dimx_const(tab, 1, &one)) {
        kiln_error_clear();
        return no(why, size, "cannot size %s's result", me);
      }
      for (int d = 0; d < us->rank; d++) dims[d] = red[d] ? one : us->dims[d];
      if (!kiln_fuse_numel(tab, us->rank, dims, &A->rnumel)) return no(why, size, "cannot size %s's result", me);
      set_domain(A, us, nu);
      for (int d = 0; d < KILN_MAX_RANK; d++) A->red[d] = d < us->rank && red[d];
    }
    A->n_red += nr;
    for (int k = 0; k < n->n_in; k++)
      if (kiln_fuse_data_input(n, k) && role_of(c, gid, ov, n->in[k], &base) <= KILN_FUSE_ROLE_LEAF &&
          !add_read(c, A, base))
        return no(why, size, "memory inputs cap: a group loads at most %d tensors", c->opts.max_inputs);
    bool composite = (def->roles & KILN_FUSE_COMPOSITE) != 0;
    for (int k = 0; k < n->n_out; k++)
      add_out(outs, n->out[k], composite && k == 0 ? KILN_FUSE_ROLE_FULL : KILN_FUSE_ROLE_REDUCED, -1);
    return yes(why, size, "%s reduces over the group's domain %s, taking the group's elementwise ops as its prologue",
               me, kiln_fuse_dims_str(tab, A->rank, A->dims, b1, sizeof b1));
  }

  /* elementwise, broadcast and computing injective ops */
  for (int k = 1; k < n->n_out; k++)
    if (used(c, n->out[k])) return no(why, size, "%s's output %d is used: only output 0 has a kernel-spec form", me, k);
  int w = n->out[0];
  if (w < 0) return no(why, size, "%s has no output 0", me);
  const kiln_vshape *ws = &sh->v[w];
  bool is_bn = !strcmp(n->op_type, "BatchNormalization");
  if (is_bn && ws->rank < 2) return no(why, size, "%s needs an input of rank >= 2", me);
  bool has_full = false, has_red = false;
  for (int k = 0; k < n->n_in; k++) {
    if (!kiln_fuse_data_input(n, k)) continue;
    int r = role_of(c, gid, ov, n->in[k], &base);
    if (is_bn && k > 0 && r > KILN_FUSE_ROLE_LEAF) return no(why, size, "%s's input %d must be read from memory", me, k);
    has_full |= r == KILN_FUSE_ROLE_FULL;
    has_red |= r == KILN_FUSE_ROLE_REDUCED;
  }
  kiln_dimx nc;
  if (!kiln_fuse_numel(tab, ws->rank, ws->dims, &nc)) return no(why, size, "cannot size %s's output", me);
  int space = KILN_FUSE_ROLE_FULL;
  if (has_red && !has_full && G->n_red > 0 && kiln_fuse_dim_eq(tab, nc, G->rnumel)) space = KILN_FUSE_ROLE_REDUCED;
  for (int k = 0; k < n->n_in; k++) { /* computed operands: never broadcast, except a reduction's result read back */
    int v = n->in[k];
    int r = kiln_fuse_data_input(n, k) ? role_of(c, gid, ov, v, &base) : KILN_FUSE_ROLE_MEM;
    if (r <= KILN_FUSE_ROLE_LEAF) continue;
    const kiln_vshape *os = &sh->v[v];
    int p = g->values[v].producer;
    if (r == space) {
      if (!kiln_fuse_shape_eq(tab, os->rank, os->dims, ws->rank, ws->dims))
        return no(why, size, "broadcasting %s's output %s to %s would recompute it for every copy",
                  kiln_fuse_node_str(g, p, other, sizeof other), SHAPE(v, b1), SHAPE(w, b2));
      continue;
    }
    if (r != KILN_FUSE_ROLE_REDUCED) return no(why, size, "%s reads a value it cannot index", me);
    bool back = kiln_fuse_shape_eq(tab, ws->rank, ws->dims, G->rank, G->dims) && os->rank <= G->rank;
    for (int d = 0; back && d < G->rank; d++) {
      int od = d - (G->rank - os->rank);
      if (od < 0 || G->red[d]) back = od < 0 || kiln_fuse_dim_is(tab, os->dims[od], 1);
      else back = kiln_fuse_dim_eq(tab, os->dims[od], G->dims[d]);
    }
    if (!back)
      return no(why, size, "%s cannot read the reduction's result %s back over %s", me, SHAPE(v, b1),
                kiln_fuse_dims_str(tab, G->rank, G->dims, b2, sizeof b2));
  }
  if (space == KILN_FUSE_ROLE_FULL) {
    if (!G->has_domain) set_domain(A, ws, nc);
    else if (!kiln_fuse_dim_eq(tab, nc, G->numel))
      return no(why, size, "%s's iteration domain %s differs from the group's %s", me, SHAPE(w, b1),
                kiln_fuse_dims_str(tab, G->rank, G->dims, b2, sizeof b2));
  }
  for (int k = 0; k < n->n_in; k++)
    if (kiln_fuse_data_input(n, k) && role_of(c, gid, ov, n->in[k], &base) <= KILN_FUSE_ROLE_LEAF &&
        !add_read(c, A, base))
      return no(why, size, "memory inputs cap: a group loads at most %d tensors", c->opts.max_inputs);
  add_out(outs, w, space, -1);
  if (space == KILN_FUSE_ROLE_REDUCED) return yes(why, size, "%s is an epilogue of the group's reduction", me);
  if (has_red) return yes(why, size, "%s reads the group's reduction back over its domain %s", me, SHAPE(w, b1));
  if (A->anchor >= 0)
    return yes(why, size, "%s is in %s's epilogue", me, kiln_fuse_node_str(g, A->anchor, other, sizeof other));
  return yes(why, size, "%s shares the iteration domain %s", me,
             kiln_fuse_dims_str(tab, A->rank, A->dims, b1, sizeof b1));
}

static void apply(kiln_fuse_ctx *c, int gid, int node, const kiln_fuse_gstate *A, const kiln_fuse_outroles *o) {
  c->groups[gid] = *A;
  c->group_of[node] = gid;
  for (int i = 0; i < o->n; i++) {
    c->role[o->value[i]] = o->role[i];
    c->leaf_base[o->value[i]] = o->base[i];
  }
}

kiln_status kiln_fuse_ctx_open(kiln_fuse_ctx *c, int node, int *gid) {
  if (node < 0 || node >= c->g->n_nodes || c->group_of[node] >= 0)
    return kiln_fail(KILN_E_INTERNAL, "fuse: cannot open a group with node %d", node);
  if (c->n_groups == c->cap_groups) {
    int cap = c->cap_groups ? 2 * c->cap_groups : 16;
    kiln_fuse_gstate *gs = kiln_realloc(c->groups, sizeof *gs * (size_t)cap);
    if (!gs) return kiln_fail(KILN_E_NOMEM, "fuse: out of memory for %d groups", cap);
    c->groups = gs;
    c->cap_groups = cap;
  }
  int id = c->n_groups++;
  kiln_fuse_gstate A;
  kiln_fuse_outroles o;
  if (!check(c, &empty_group, id, NULL, node, &A, &o, NULL, 0)) { /* an opaque group of one */
    const kiln_node *n = &c->g->nodes[node];
    A = empty_group;
    A.n_nodes = 1;
    A.opaque = node;
    o.n = 0;
    for (int k = 0; k < n->n_out; k++) add_out(&o, n->out[k], KILN_FUSE_ROLE_OPAQUE, -1);
  }
  apply(c, id, node, &A, &o);
  c->open = id;
  if (gid) *gid = id;
  return KILN_OK;
}

bool kiln_fuse_can_join(const kiln_fuse_ctx *c, int node, char *why, size_t size) {
  if (node < 0 || node >= c->g->n_nodes) return no(why, size, "node %d does not exist", node);
  if (c->group_of[node] >= 0) return no(why, size, "node %d is already in group %d", node, c->group_of[node]);
  if (c->open < 0) return no(why, size, "no group is open");
  kiln_fuse_gstate A;
  kiln_fuse_outroles o;
  return check(c, &c->groups[c->open], c->open, NULL, node, &A, &o, why, size);
}

bool kiln_fuse_ctx_join(kiln_fuse_ctx *c, int node, char *why, size_t size) {
  if (!kiln_fuse_can_join(c, node, why, size)) return false;
  kiln_fuse_gstate A;
  kiln_fuse_outroles o;
  check(c, &c->groups[c->open], c->open, NULL, node, &A, &o, NULL, 0);
  apply(c, c->open, node, &A, &o);
  return true;
}

/* Appends "; ..." notes to why for each output of p that consumer reads and
 * that is also needed outside the group (gid, or {p, consumer}). */
static void note_stored(const kiln_fuse_ctx *c, int gid, int p, int consumer, char *why, size_t size) {
  const kiln_graph *g = c->g;
  const kiln_node *pn = &g->nodes[p], *cn = &g->nodes[consumer];
  for (int k = 0; k < pn->n_out; k++) {
    int v = pn->out[k];
    bool read = false;
    for (int j = 0; j < cn->n_in && !read; j++) read = v >= 0 && cn->in[j] == v;
    if (!read) continue;
    const char *name = g->values[v].name;
    char other[160];
    size_t at = strlen(why);
    if (g->values[v].is_output && at < size) {
      snprintf(why + at, size - at, "; '%s' is a graph output: it is stored too", name);
      continue;
    }
    for (int i = c->cons_off[v]; i < c->cons_off[v + 1]; i++) {
      int r = c->cons[i];
      bool inside = r == consumer || r == p || (gid >= 0 && c->group_of[r] == gid);
      if (inside || at >= size) continue;
      snprintf(why + at, size - at, "; '%s' is also read by %s, outside the group: it is stored too", name,
               kiln_fuse_node_str(g, r, other, sizeof other));
      break;
    }
  }
}

bool kiln_fuse_can_fuse(const kiln_fuse_ctx *c, int producer, int consumer, char *why, size_t size) {
  const kiln_graph *g = c->g;
  if (producer < 0 || producer >= g->n_nodes || consumer < 0 || consumer >= g->n_nodes)
    return no(why, size, "node index out of range");
  char pn[160], cn[160], sub[512];
  kiln_fuse_node_str(g, producer, pn, sizeof pn);
  kiln_fuse_node_str(g, consumer, cn, sizeof cn);
  const kiln_node *p = &g->nodes[producer], *q = &g->nodes[consumer];
  bool edge = false;
  for (int k = 0; k < p->n_out && !edge; k++)
    for (int j = 0; j < q->n_in && !edge; j++) edge = p->out[k] >= 0 && q->in[j] == p->out[k];
  if (!edge) return no(why, size, "%s does not read an output of %s", cn, pn);
  int gid = c->group_of[producer], gc = c->group_of[consumer];
  if (gc >= 0 && gc == gid) return no(why, size, "%s is already in %s's group %d", cn, pn, gid);
  kiln_fuse_gstate G1, A;
  kiln_fuse_outroles ov, o;
  const kiln_fuse_gstate *G;
  const kiln_fuse_outroles *pov = NULL;
  if (gid >= 0) {
    if (gid != c->open) {
      kiln_fuse_kind k = kiln_fuse_kind_of(p);
      bool costly = k == KILN_FUSE_REDUCTION || k == KILN_FUSE_OUT_EWISE;
      return no(why, size,
                "%s's group is closed (later steps ran in between); %s reads its output from memory%s", pn, cn,
                costly ? ": joining would duplicate that expensive work" : "");
    }
    if (gc >= 0) return no(why, size, "%s is already in group %d", cn, gc);
    G = &c->groups[gid];
  } else {
    if (gc >= 0) return no(why, size, "%s is already in group %d", cn, gc);
    if (!check(c, &empty_group, -1, NULL, producer, &G1, &ov, sub, sizeof sub))
      return no(why, size, "%s cannot share a group: %s", pn, sub + 4);
    G = &G1;
    pov = &ov;
  }
  if (!check(c, G, gid, pov, consumer, &A, &o, why, size)) return false;
  if (why && size) note_stored(c, gid, producer, consumer, why, size);
  return true;
}
