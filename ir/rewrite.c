/* ir/rewrite: the driver, the shared pass machinery (rewrite_impl.h), dead
 * code elimination and Identity / Dropout removal. The other passes live
 * in rewrite_cse.c, rewrite_transpose.c, rewrite_bn.c and rewrite_const.c. */
#include "ir/rewrite.h"
#include "ir/dump.h"

#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/rewrite_impl.h"

/* ---- shared machinery ---- */

kiln_status kiln_rw_begin(kiln_rw_pass *p, kiln_graph *g, kiln_rewrite_stats *st) {
  memset(p, 0, sizeof *p);
  p->g = g;
  p->st = st;
  p->n_values = g->n_values;
  p->repl = kiln_malloc(((size_t)g->n_values + 1) * sizeof *p->repl);
  p->uses = kiln_malloc(((size_t)g->n_values + 1) * sizeof *p->uses);
  p->drop = kiln_calloc((size_t)g->n_nodes + 1, sizeof *p->drop);
  if (!p->repl || !p->uses || !p->drop) {
    kiln_free(p->repl);
    kiln_free(p->uses);
    kiln_free(p->drop);
    memset(p, 0, sizeof *p);
    return kiln_fail(KILN_E_NOMEM, "out of memory starting a rewrite pass");
  }
  for (int v = 0; v < g->n_values; v++) p->repl[v] = -1;
  kiln_edit_use_counts(g, p->uses);
  return KILN_OK;
}

int kiln_rw_find(kiln_rw_pass *p, int v) {
  if (v < 0 || v >= p->n_values) return v;
  int r = v;
  while (p->repl[r] >= 0) r = p->repl[r];
  while (p->repl[v] >= 0) { /* path compression */
    int next = p->repl[v];
    p->repl[v] = r;
    v = next;
  }
  return r;
}

void kiln_rw_resolve(kiln_rw_pass *p, int i) {
  kiln_node *n = &p->g->nodes[i];
  for (int k = 0; k < n->n_in; k++) n->in[k] = kiln_rw_find(p, n->in[k]);
}

kiln_status kiln_rw_end(kiln_rw_pass *p, kiln_status s) {
  kiln_graph *g = p->g;
  if (!g) return s;
  for (int i = 0; i < g->n_nodes; i++) kiln_rw_resolve(p, i);
  kiln_edit_remove_nodes(g, p->drop);
  if (!s) {
    int dropped = 0;
    s = kiln_edit_compact(g, &dropped);
    if (p->st) p->st->dead_values += dropped;
  }
  kiln_free(p->repl);
  kiln_free(p->uses);
  kiln_free(p->drop);
  memset(p, 0, sizeof *p);
  return s;
}

bool kiln_rw_forward(kiln_rw_pass *p, int i, int x, int y) {
  kiln_graph *g = p->g;
  if (x < 0 || y < 0 || x == y) return false;
  if (!g->values[y].is_output) {
    p->repl[y] = x;
    g->values[y].producer = -1;
    p->drop[i] = true;
    return true;
  }
  const kiln_value *xv = &g->values[x];
  if (xv->is_output || xv->is_input || xv->init || xv->producer < 0 || p->drop[xv->producer]) return false;
  kiln_node *w = &g->nodes[xv->producer];
  for (int k = 0; k < w->n_out; k++)
    if (w->out[k] == x) w->out[k] = y;
  g->values[y].producer = xv->producer;
  g->values[x].producer = -1;
  p->repl[x] = y;
  p->drop[i] = true;
  return true;
}

bool kiln_rw_has_subgraphs(const kiln_graph *g) {
  for (int i = 0; i < g->n_nodes; i++)
    for (int a = 0; a < g->nodes[i].n_attrs; a++)
      if (g->nodes[i].attrs[a].type == KILN_ATTR_GRAPH || g->nodes[i].attrs[a].type == KILN_ATTR_GRAPHS) return true;
  return false;
}

bool kiln_rw_is(const kiln_node *n, const char *op_type) {
  return !strcmp(n->op_type, op_type) && kiln_edit_default_domain(n->domain);
}

bool kiln_rw_dropout_inference(const kiln_graph *g, const kiln_node *n) {
  if (n->opset < 7) return false; /* is_test = 0 (training) is the default there */
  if (n->opset >= 12 && n->n_in > 2 && n->in[2] >= 0) {
    if (!kiln_edit_is_const(g, n->in[2])) return false;
    const kiln_tensor *t = g->values[n->in[2]].init;
    if (t->numel != 1 || t->dtype != KILN_BOOL || kiln_get_i(t, 0) != 0) return false;
  }
  return true;
}

bool kiln_rw_maybe_random(const kiln_graph *g, const kiln_node *n) {
  static const char *const random_ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                           "RandomUniformLike", "Multinomial", "Bernoulli"};
  for (size_t k = 0; k < sizeof random_ops / sizeof *random_ops; k++)
    if (!strcmp(n->op_type, random_ops[k])) return true;
  return !strcmp(n->op_type, "Dropout") && !kiln_rw_dropout_inference(g, n);
}

int kiln_rw_rank(const kiln_graph *g, int v) {
  if (v < 0) return -1;
  const kiln_value *val = &g->values[v];
  if (kiln_edit_is_const(g, v)) return val->init->rank;
  if (val->type.kind == KILN_TYPE_TENSOR) return val->type.rank;
  return -1;
}

/* ---- dead code elimination ---- */

kiln_status kiln_rewrite_dce(kiln_graph *g, kiln_rewrite_stats *st) {
  if (kiln_rw_has_subgraphs(g)) return KILN_OK;
  kiln_rw_pass p;
  kiln_status s = kiln_rw_begin(&p, g, st);
  if (s) return s;
  bool *live = kiln_calloc((size_t)g->n_values + 1, sizeof *live);
  if (!live) return kiln_rw_end(&p, kiln_fail(KILN_E_NOMEM, "out of memory in dead code elimination"));
  for (int i = 0; i < g->n_outputs; i++) live[g->outputs[i]] = true;
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    const kiln_node *n = &g->nodes[i];
    bool needed = false;
    for (int k = 0; k < n->n_out && !needed; k++) needed = n->out[k] >= 0 && live[n->out[k]];
    if (!needed) {
      p.drop[i] = true;
      if (st) st->dead_nodes++;
      continue;
    }
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) live[n->in[k]] = true;
  }
  kiln_free(live);
  return kiln_rw_end(&p, KILN_OK);
}

/* ---- Identity and inference Dropout ---- */

/* A Dropout that copies its input: inference mode known at compile time,
 * and no reader of the mask. */
static bool dropout_is_copy(const kiln_rw_pass *p, const kiln_node *n) {
  const kiln_graph *g = p->g;
  if (n->n_in < 1 || n->in[0] < 0 || n->n_out < 1 || n->out[0] < 0) return false;
  if (!kiln_rw_dropout_inference(g, n)) return false;
  for (int k = 1; k < n->n_out; k++) {
    int m = n->out[k];
    if (m >= 0 && (p->uses[m] > 0 || g->values[m].is_output)) return false;
  }
  return true;
}

kiln_status kiln_rewrite_noops(kiln_graph *g, kiln_rewrite_stats *st) {
  if (kiln_rw_has_subgraphs(g)) return KILN_OK;
  kiln_rw_pass p;
  kiln_status s = kiln_rw_begin(&p, g, st);
  if (s) return s;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_rw_resolve(&p, i);
    const kiln_node *n = &g->nodes[i];
    if (kiln_rw_is(n, "Identity") && n->n_in == 1 && n->n_out == 1) {
      if (kiln_rw_forward(&p, i, n->in[0], n->out[0]) && st) st->identities++;
    } else if (kiln_rw_is(n, "Dropout") && dropout_is_copy(&p, n)) {
      if (kiln_rw_forward(&p, i, n->in[0], n->out[0]) && st) st->dropouts++;
    }
  }
  return kiln_rw_end(&p, KILN_OK);
}

/* ---- the driver ---- */

/* Counters that mean "the graph changed". */
static long work_done(const kiln_rewrite_stats *s) {
  return (long)s->dead_nodes + s->identities + s->dropouts + s->cse_nodes + s->cse_consts +
         s->transposes_merged + s->transposes_removed + s->bn_conv + s->bn_gemm + s->folded;
}

kiln_status kiln_rewrite_run(const kiln_graph *g, const kiln_rewrite_opts *opts, kiln_graph **out,
                             kiln_rewrite_stats *st) {
  *out = NULL;
  if (st) memset(st, 0, sizeof *st);
  kiln_rewrite_opts o = {0};
  if (opts) o = *opts;
  if (!o.passes) o.passes = KILN_RW_ALL;
  if (o.keep_outputs) o.passes = 0;
  if (o.max_rounds <= 0) o.max_rounds = KILN_REWRITE_MAX_ROUNDS;
  if (!o.fold_max_bytes) o.fold_max_bytes = KILN_REWRITE_FOLD_MAX_BYTES;
  kiln_rewrite_stats S = {0};
  kiln_graph *w;
  kiln_status s = o.share_constants ? kiln_edit_clone_shared(g, &w) : kiln_edit_clone(g, &w);
  if (s) return s;
  for (int round = 0; round < o.max_rounds && !s; round++) {
    long before = work_done(&S), last = before;
    int k = 0;
/* Runs one pass; with a dump stem, writes the graph when the pass changed it. */
#define PASS(cond, name, call)                                                  \
  do {                                                                          \
    if (!s && (cond)) {                                                         \
      s = (call);                                                               \
      k++;                                                                      \
      if (!s && o.dump_stem && work_done(&S) != last) {                         \
        char what[64], title[96];                                               \
        snprintf(what, sizeof what, "1-r%d-%d-%s", round + 1, k, name);         \
        snprintf(title, sizeof title, "after %s (round %d)", name, round + 1);  \
        kiln_dump_graph(o.dump_stem, what, w, NULL, NULL, title);               \
      }                                                                         \
      last = work_done(&S);                                                     \
    }                                                                           \
  } while (0)
    PASS(round == 0 && (o.passes & KILN_RW_DCE), "dce", kiln_rewrite_dce(w, &S));
    if ((o.passes & KILN_RW_FOLD_CONST) && o.eval) /* last run only */
      S.fold_too_big = S.fold_declined = S.fold_views_kept = 0;
    PASS((o.passes & KILN_RW_FOLD_CONST) && o.eval, "fold",
         kiln_rw_fold(w, o.eval, o.eval_ctx, o.fold_max_bytes, o.keep_output_views, &S));
    PASS(o.passes & KILN_RW_NOOPS, "noops", kiln_rewrite_noops(w, &S));
    PASS(o.passes & KILN_RW_TRANSPOSE, "transposes", kiln_rewrite_transposes(w, &S));
    PASS(o.passes & KILN_RW_FOLD_BN, "fold-bn", kiln_rewrite_fold_bn(w, &S));
    PASS(o.passes & KILN_RW_CSE, "cse", kiln_rewrite_cse(w, &S));
    PASS(o.passes & KILN_RW_DCE, "dce", kiln_rewrite_dce(w, &S));
#undef PASS
    S.rounds++;
    if (work_done(&S) == before) break;
  }
  if (!s && (s = kiln_edit_check(w))) kiln_error_prefix("graph rewrites produced an invalid graph");
  if (s) {
    kiln_graph_free(w);
    return s;
  }
  *out = w;
  if (st) *st = S;
  return KILN_OK;
}

const char *kiln_rewrite_stats_str(const kiln_rewrite_stats *st, char *buf, size_t size) {
  const struct {
    const char *name;
    int n;
  } f[] = {{"dead_nodes", st->dead_nodes},
           {"dead_values", st->dead_values},
           {"identities", st->identities},
           {"dropouts", st->dropouts},
           {"cse_nodes", st->cse_nodes},
           {"cse_consts", st->cse_consts},
           {"transposes_merged", st->transposes_merged},
           {"transposes_removed", st->transposes_removed},
           {"bn_conv", st->bn_conv},
           {"bn_gemm", st->bn_gemm},
           {"folded", st->folded},
           {"fold_too_big", st->fold_too_big},
           {"fold_declined", st->fold_declined},
           {"rounds", st->rounds}};
  size_t k = 0;
  if (size) buf[0] = 0;
  for (size_t i = 0; i < sizeof f / sizeof *f && k < size; i++)
    if (f[i].n) {
      int w = snprintf(buf + k, size - k, "%s%s=%d", k ? " " : "", f[i].name, f[i].n);
      if (w < 0) break;
      k += (size_t)w;
    }
  return buf;
}
