/* ir/rewrite_transpose: Transpose(Transpose(x)) -> one Transpose, and
 * identity-permutation Transposes removed (see rewrite.h). */
#include <string.h>

#include "ir/graph_edit.h"
#include "ir/rewrite.h"
#include "ir/rewrite_impl.h"

/* A node's permutation: explicit (*rank = its length) when valid, else the
 * default reversal when the rank is known. Returns 1 for explicit, 0 for
 * default (perm filled only when *rank >= 0), -1 for an invalid perm. */
static int get_perm(const kiln_graph *g, const kiln_node *n, int64_t *perm, int *rank) {
  size_t np;
  const int64_t *p = kiln_attr_ints(n, "perm", &np);
  if (p) {
    if (np > KILN_MAX_RANK) return -1;
    bool seen[KILN_MAX_RANK] = {false};
    for (size_t i = 0; i < np; i++) {
      if (p[i] < 0 || p[i] >= (int64_t)np || seen[p[i]]) return -1;
      seen[p[i]] = true;
      perm[i] = p[i];
    }
    *rank = (int)np;
    return 1;
  }
  if (kiln_node_attr(n, "perm")) return -1; /* present but not INTS */
  *rank = kiln_rw_rank(g, n->in[0]);
  if (*rank > KILN_MAX_RANK) return -1;
  for (int i = 0; i < *rank; i++) perm[i] = *rank - 1 - i;
  return 0;
}

static bool is_identity(const int64_t *perm, int rank) {
  for (int i = 0; i < rank; i++)
    if (perm[i] != i) return false;
  return true;
}

/* Makes Transpose i read the input of the Transpose feeding it, with the
 * composed perm (or removes it when both perms are default reversals). */
static kiln_status merge(kiln_rw_pass *p, int i) {
  kiln_graph *g = p->g;
  kiln_node *n = &g->nodes[i];
  int x = n->in[0], w = g->values[x].producer;
  if (w < 0 || p->drop[w]) return KILN_OK;
  const kiln_node *t1 = &g->nodes[w];
  if (!kiln_rw_is(t1, "Transpose") || t1->n_in != 1 || t1->in[0] < 0) return KILN_OK;
  int64_t p1[KILN_MAX_RANK], p2[KILN_MAX_RANK], q[KILN_MAX_RANK];
  int r1, r2;
  int e1 = get_perm(g, t1, p1, &r1), e2 = get_perm(g, n, p2, &r2);
  if (e1 < 0 || e2 < 0) return KILN_OK;
  int x0 = t1->in[0];
  if (e1 == 0 && e2 == 0) { /* reverse twice: the identity, whatever the rank */
    if (kiln_rw_forward(p, i, x0, n->out[0]) && p->st) {
      p->st->transposes_merged++;
      p->st->transposes_removed++;
    }
    return KILN_OK;
  }
  if (e1 && e2 && r1 != r2) return KILN_OK; /* fails at run time: keep it so */
  int r = e1 ? r1 : r2; /* at least one perm is explicit here */
  for (int k = 0; k < r && !e1; k++) p1[k] = r - 1 - k;
  for (int k = 0; k < r && !e2; k++) p2[k] = r - 1 - k;
  for (int k = 0; k < r; k++) q[k] = p1[p2[k]];
  kiln_status s = kiln_edit_set_ints(n, "perm", q, (size_t)r);
  if (s) return s;
  n->in[0] = x0;
  if (p->st) p->st->transposes_merged++;
  return KILN_OK;
}

kiln_status kiln_rewrite_transposes(kiln_graph *g, kiln_rewrite_stats *st) {
  if (kiln_rw_has_subgraphs(g)) return KILN_OK;
  kiln_rw_pass p;
  kiln_status s = kiln_rw_begin(&p, g, st);
  for (int i = 0; i < g->n_nodes && !s; i++) {
    kiln_rw_resolve(&p, i);
    kiln_node *n = &g->nodes[i];
    if (!kiln_rw_is(n, "Transpose") || n->n_in != 1 || n->n_out != 1 || n->in[0] < 0 || n->out[0] < 0) continue;
    if ((s = merge(&p, i))) break;
    if (p.drop[i]) continue;
    int64_t perm[KILN_MAX_RANK];
    int r;
    if (get_perm(g, n, perm, &r) >= 0 && r >= 0 && is_identity(perm, r) &&
        kiln_rw_forward(&p, i, n->in[0], n->out[0]) && st)
      st->transposes_removed++;
  }
  if (!p.g) return s;
  return kiln_rw_end(&p, s);
}
