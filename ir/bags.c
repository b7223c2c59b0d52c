/* ir/bags: Gather → Mul(mask) → ReduceSum as one
 * SparseLengthsWeightedSum (see bags.h). */
#include "ir/bags.h"

#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/shape.h"

/* The one node reading v, or -1 (none, several, or a graph output). */
static int sole_reader(const kiln_graph *g, int v) {
  int who = -1;
  if (g->values[v].is_output) return -1;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] == v) {
        if (who >= 0) return -1;
        who = i;
      }
  return who;
}

static bool is_op(const kiln_node *n, const char *op) {
  return !strcmp(n->op_type, op) && kiln_edit_default_domain(n->domain);
}

/* Static dims of v (rank r), or false. */
static bool static_dims(const kiln_shapes *sh, int v, int r, int64_t *dims) {
  const kiln_vshape *x = &sh->v[v];
  if (x->rank != r || x->data_dependent) return false;
  for (int d = 0; d < r; d++)
    if (!kiln_dimx_is_const(sh->tab, x->dims[d], &dims[d])) return false;
  return true;
}

/* Whether ReduceSum node r reduces axis 1 of its rank-3 input alone, without
 * keeping it. */
static bool sums_axis1(const kiln_graph *g, const kiln_node *r) {
  if (kiln_attr_int(r, "keepdims", 1) != 0) return false;
  int64_t ax;
  if (r->opset >= 13) {
    if (r->n_in < 2 || r->in[1] < 0) return false;
    const kiln_tensor *t = g->values[r->in[1]].init;
    if (!t || !kiln_edit_is_const(g, r->in[1]) || t->numel != 1 || t->dtype != KILN_I64 || t->strided) return false;
    ax = ((const int64_t *)t->data)[0];
  } else {
    const kiln_attr *a = kiln_node_attr(r, "axes");
    if (!a || a->type != KILN_ATTR_INTS || a->n != 1) return false;
    ax = a->ints[0];
  }
  return ax == 1 || ax == -2;
}

/* A new int64 constant of the given shape, every element v (or 0..: none). */
static kiln_status const_i64(kiln_graph *g, const char *base, int rank, const int64_t *dims, const int64_t *vals,
                             int64_t fill, int *out) {
  kiln_tensor t = {0};
  kiln_status s = kiln_tensor_alloc(&t, KILN_I64, rank, dims);
  if (s) return s;
  for (int64_t i = 0; i < t.numel; i++) ((int64_t *)t.data)[i] = vals ? vals[i] : fill;
  if ((s = kiln_edit_add_const(g, base, &t, out))) kiln_tensor_release(&t);
  return s;
}

/* Makes g import kiln's domain (for the new nodes) when it does not yet. */
static kiln_status import_kiln_domain(kiln_graph *g) {
  for (int k = 0; k < g->n_opsets; k++)
    if (g->opsets[k].domain && !strcmp(g->opsets[k].domain, KILN_DOMAIN)) return KILN_OK;
  kiln_opset *o = kiln_realloc(g->opsets, sizeof *o * (size_t)(g->n_opsets + 1));
  if (!o) return kiln_fail(KILN_E_NOMEM, "out of memory rewriting an embedding bag");
  g->opsets = o;
  if (!(o[g->n_opsets].domain = kiln_strdup(KILN_DOMAIN)))
    return kiln_fail(KILN_E_NOMEM, "out of memory rewriting an embedding bag");
  o[g->n_opsets++].version = KILN_DOMAIN_VERSION;
  return KILN_OK;
}

/* Rewrites the pattern ending at ReduceSum node ri when it is there;
 * *done says whether it was. */
/* The structure of the pattern ending at ReduceSum node ri (types and
 * shapes unchecked): the Mul's node and mask, the Gather's node; false when
 * it is not there. */
static bool looks_like_bag(const kiln_graph *g, int ri, int *mi_out, int *mask_out, int *gi_out) {
  const kiln_node *r = &g->nodes[ri];
  if (!is_op(r, "ReduceSum") || r->n_out != 1 || r->out[0] < 0 || r->in[0] < 0 || !sums_axis1(g, r)) return false;
  int mv = r->in[0], mi = g->values[mv].producer;
  if (mi < 0 || !is_op(&g->nodes[mi], "Mul") || g->nodes[mi].n_in != 2 || sole_reader(g, mv) != ri) return false;
  const kiln_node *m = &g->nodes[mi];
  int gv = -1, mask = -1;
  for (int k = 0; k < 2 && gv < 0; k++) {
    int v = m->in[k], p = v >= 0 ? g->values[v].producer : -1;
    if (p >= 0 && is_op(&g->nodes[p], "Gather")) gv = v, mask = m->in[1 - k];
  }
  if (gv < 0 || mask < 0 || m->in[0] == m->in[1] || sole_reader(g, gv) != mi) return false;
  int gi = g->values[gv].producer;
  const kiln_node *ga = &g->nodes[gi];
  if (ga->n_in != 2 || ga->in[0] < 0 || ga->in[1] < 0 || kiln_attr_int(ga, "axis", 0) != 0) return false;
  *mi_out = mi, *mask_out = mask, *gi_out = gi;
  return true;
}

static kiln_status rewrite_one(kiln_graph *g, const kiln_shapes *sh, int ri, bool *done) {
  *done = false;
  int mi, mask, gi;
  if (!looks_like_bag(g, ri, &mi, &mask, &gi)) return KILN_OK;
  const kiln_node *r = &g->nodes[ri], *ga = &g->nodes[gi];
  int table = ga->in[0], idx = ga->in[1];
  int64_t td[2], id[2], md[3], yd[2];
  if (sh->v[table].dtype != KILN_F32 || !static_dims(sh, table, 2, td) || !static_dims(sh, idx, 2, id) ||
      (sh->v[idx].dtype != KILN_I64 && sh->v[idx].dtype != KILN_I32) || sh->v[mask].dtype != KILN_F32 ||
      !static_dims(sh, mask, 3, md) || md[0] != id[0] || md[1] != id[1] || md[2] != 1 ||
      !static_dims(sh, r->out[0], 2, yd) || yd[0] != id[0] || yd[1] != td[1])
    return KILN_OK;
  /* the new nodes go where the ReduceSum is (everything they read is defined before) */
  int64_t n = id[0] * id[1], nd[1] = {n}, bd[1] = {id[0]};
  int shp, lens, fi, fw, y = r->out[0];
  kiln_status s;
  if ((s = import_kiln_domain(g)) || (s = const_i64(g, "bag_flat", 1, (const int64_t[]){1}, nd, 0, &shp)) ||
      (s = const_i64(g, "bag_lengths", 1, bd, NULL, id[1], &lens)) || (s = kiln_edit_add_value(g, "bag_indices", &fi)) ||
      (s = kiln_edit_add_value(g, "bag_weights", &fw)))
    return s;
  char name[256];
  snprintf(name, sizeof name, "%s_bags", g->nodes[ri].name ? g->nodes[ri].name : "embedding");
  bool *drop = kiln_calloc((size_t)g->n_nodes + 1, sizeof *drop);
  if (!drop) return kiln_fail(KILN_E_NOMEM, "out of memory rewriting an embedding bag");
  drop[gi] = drop[mi] = drop[ri] = true;
  g->values[y].producer = -1; /* the ReduceSum's output is the new node's */
  kiln_edit_remove_nodes(g, drop);
  kiln_free(drop);
  /* where the ReduceSum was, less the Gather and the Mul before it: every
     value the new nodes read is defined earlier, every reader of y later */
  int at = ri - 2;
  int sin[4] = {table, fw, fi, lens}, ri2 = 0;
  if ((s = kiln_edit_insert_node(g, at, NULL, "Reshape", "", 2, (const int[]){idx, shp}, 1, &fi, NULL)) ||
      (s = kiln_edit_insert_node(g, at + 1, NULL, "Reshape", "", 2, (const int[]){mask, shp}, 1, &fw, NULL)) ||
      (s = kiln_edit_insert_node(g, at + 2, name, "SparseLengthsWeightedSum", KILN_DOMAIN, 4, sin, 1, &y, &ri2)))
    return s;
  g->nodes[ri2].opset = KILN_DOMAIN_VERSION;
  if ((s = kiln_edit_set_int(&g->nodes[ri2], "negative_indices", 1))) return s;
  *done = true;
  return KILN_OK;
}

kiln_status kiln_embedding_bags(kiln_graph *g, int *count) {
  int done = 0;
  if (count) *count = 0;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    int mi, mask, gi;
    if (!looks_like_bag(g, i, &mi, &mask, &gi)) continue;
    kiln_shapes *sh = NULL;
    kiln_status s = kiln_shapes_infer(g, &sh);
    if (s) { /* no shapes: leave the graph as it is */
      kiln_error_clear();
      break;
    }
    bool did = false;
    s = rewrite_one(g, sh, i, &did);
    kiln_shapes_free(sh);
    if (s) return s;
    if (did) i = g->n_nodes; /* positions moved: scan again from the end */
    done += did;
  }
  if (done) {
    kiln_status s = kiln_edit_compact(g, NULL);
    if (s) return s;
  }
  if (count) *count = done;
  return KILN_OK;
}
