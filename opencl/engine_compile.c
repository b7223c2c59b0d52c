/* opencl/engine_compile: one variant of an OpenCL plan — the specialised
 * graph rewritten and its shapes made concrete, grouped by fuse/, each
 * group lowered to a generated kernel, or node by node to a device op
 * (opencl/ops), a buffer copy (Reshape-like views) or the host fallback;
 * every generated kernel and op source in one program (on rusticl a few,
 * loaded on two threads; kiln cache), the intermediates in one arena
 * (ir/memplan) of sub-buffers. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fuse/group.h"
#include "ir/alloc.h"
#include "ir/memplan.h"
#include "ir/schedule.h"
#include "opencl/cache.h"
#include "opencl/engine_fuse.h"
#include "opencl/engine_int.h"
#include "reference/ops.h"

static bool fusion_enabled(void) {
  const char *e = getenv("KILN_FUSION");
  return !(e && !strcmp(e, "0"));
}

/* One step per node, then the step reading the graph outputs. */
static kiln_status schedule_of(const kiln_graph *g, kiln_schedule **out) {
  kiln_status s = kiln_schedule_from_graph(g, out);
  if (!s && g->n_outputs) s = kiln_schedule_add_step(*out, g->outputs, g->n_outputs, NULL, 0, -1);
  if (s) {
    kiln_schedule_free(*out);
    *out = NULL;
  }
  return s;
}

/* Value w's concrete type; false when a dim is not a constant. */
static bool concrete(const kiln_cl_variant *v, int w, kiln_cl_ttype *t) {
  const kiln_vshape *x = &v->sh->v[w];
  t->dtype = x->dtype;
  t->rank = x->rank;
  if (x->rank < 0 || x->data_dependent || x->dtype == KILN_UNDEFINED || x->dtype == KILN_STRING) return false;
  for (int d = 0; d < x->rank; d++)
    if (!kiln_dimx_is_const(v->sh->tab, x->dims[d], &t->dims[d]) || t->dims[d] < 0) return false;
  return true;
}

static uint64_t bytes_of(const kiln_cl_ttype *t) {
  uint64_t n = kiln_dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++) n *= (uint64_t)t->dims[d];
  return n;
}

static bool is_reshape_like(const kiln_node *n) {
  if (*n->domain && strcmp(n->domain, "ai.onnx")) return false;
  const char *o = n->op_type;
  return n->n_out == 1 && n->n_in >= 1 && n->in[0] >= 0 &&
         (!strcmp(o, "Reshape") || !strcmp(o, "Flatten") || !strcmp(o, "Squeeze") || !strcmp(o, "Unsqueeze") ||
          !strcmp(o, "Identity"));
}

/* Texts printed into a variant's source, each with its name prefix taken
 * out (same_text), and who printed it (a kernel, a step). */
typedef struct text_set {
  char **t;
  size_t *len;
  int *owner;
  int n;
} text_set;

/* The owner of text t (len bytes) in ts, or -1. */
static int text_find(const text_set *ts, const char *t, size_t len) {
  for (int j = 0; j < ts->n; j++)
    if (ts->len[j] == len && !memcmp(ts->t[j], t, len)) return ts->owner[j];
  return -1;
}

/* Adds t (taken, freed on failure) as owner's. */
static kiln_status text_keep(text_set *ts, char *t, size_t len, int owner) {
  int n = ts->n;
  char **tt = kiln_realloc(ts->t, sizeof *tt * (size_t)(n + 1));
  if (tt) ts->t = tt;
  size_t *tl = tt ? kiln_realloc(ts->len, sizeof *tl * (size_t)(n + 1)) : NULL;
  if (tl) ts->len = tl;
  int *to = tl ? kiln_realloc(ts->owner, sizeof *to * (size_t)(n + 1)) : NULL;
  if (!to) {
    kiln_free(t);
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  }
  ts->owner = to;
  ts->t[n] = t;
  ts->len[n] = len;
  ts->owner[n] = owner;
  ts->n = n + 1;
  return KILN_OK;
}

static void text_set_free(text_set *ts) {
  for (int j = 0; j < ts->n; j++) kiln_free(ts->t[j]);
  kiln_free(ts->t);
  kiln_free(ts->len);
  kiln_free(ts->owner);
  memset(ts, 0, sizeof *ts);
}

/* The compile state of one variant. */
typedef struct cstate {
  kiln_cl_plan *p;
  kiln_cl_variant *v;
  kiln_cl_src src;
  kiln_schedule *ms; /* the engine's own schedule, for the memory planner */
  kiln_fuse_ctx *fc1;
  kiln_schedule *fs1;
  kiln_fuse_plan *fp1; /* single-node specs (built on demand) */
  bool fp1_tried;
  int cap_steps;
  size_t *kern_at; /* per generated kernel: where its text starts in src (its program: build) */
  /* the generated kernels' texts printed, each with its name prefix taken out (same_text), owner the kernel; a
     kernel whose text is an earlier one's is not printed again (dup_of: that kernel, else -1; its kern_at is the
     earlier's) */
  text_set gen_texts;
  int *dup_of;
  /* the device ops' texts the same way, owner the op's step: an op printing one of them again shares it
     (kiln_cl_op_share_text; its step's text_of) */
  text_set op_texts;
  double mem_ms; /* place_values' time (build) */
  FILE *df; /* KILN_DUMP plan file */
  char dext[48];
  kiln_cl_mm_view *mmv; /* per value: a view that MatMuls read in place (storage >= 0), not materialised */
} cstate;

/* A step reading or writing a view that is not materialised (c->mmv) must
 * have been printed reading (writing) it through its strides (a MatMul op
 * or fused kernel sets taken); anything else would take the storage as if
 * it were the view. vals: the step's reads, then its writes. */
static kiln_status check_views(cstate *c, const kiln_cl_step *st, const int *reads, int nr, const int *writes,
                               int nw) {
  kiln_status s = KILN_OK;
  for (int r = 0; r < nr + nw; r++) {
    int w = r < nr ? reads[r] : writes[r - nr];
    kiln_cl_mm_view *x = &c->mmv[w];
    if (x->storage < 0) continue;
    if (!s && (st->kind == KILN_CL_STEP_HOST || st->kind == KILN_CL_STEP_COPY || !x->taken))
      s = kiln_fail(KILN_E_INTERNAL, "opencl plan: node '%s' %s view '%s' as if it were dense",
                    c->v->g->nodes[st->node].name ? c->v->g->nodes[st->node].name : "", r < nr ? "reads" : "writes",
                    c->v->g->values[w].name);
  }
  for (int r = 0; r < nr + nw; r++) c->mmv[r < nr ? reads[r] : writes[r - nr]].taken = false;
  return s;
}

static kiln_status add_step(cstate *c, kiln_cl_step st, const int *reads, int nr, const int *writes, int nw) {
  kiln_cl_variant *v = c->v;
  if (v->n_steps == c->cap_steps) {
    int cap = c->cap_steps ? 2 * c->cap_steps : 16;
    kiln_cl_step *q = kiln_realloc(v->steps, sizeof *q * (size_t)cap);
    if (!q) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    v->steps = q;
    c->cap_steps = cap;
  }
  st.prof = -1;
  kiln_status s = check_views(c, &st, reads, nr, writes, nw);
  if (s) return s;
  s = kiln_schedule_add_step(c->ms, reads, nr, writes, nw, st.node);
  if (!s) v->steps[v->n_steps++] = st; /* on failure the caller still owns st.op */
  return s;
}

/* The length of kernel name's prefix "g<digits>_" (a fused anchor's or
 * reduction's kernels, opencl/engine_fuse.c: the kernels they print are
 * named with it), or 0. */
static size_t name_prefix(const char *name) {
  size_t i = 1;
  if (name[0] != 'g') return 0;
  while (name[i] >= '0' && name[i] <= '9') i++;
  return i > 1 && name[i] == '_' ? i + 1 : 0;
}

static bool ident_char(char ch) {
  return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
}

/* text with each identifier that starts with pre[0..np) starting with a
 * \1 byte instead (NULL: out of memory). Two texts the same this way are
 * the same kernel under two prefixes: the same code. */
static char *same_text(const char *text, const char *pre, size_t np, size_t *len) {
  size_t n = strlen(text), o = 0;
  char *t = kiln_malloc(n + 1);
  if (!t) return NULL;
  for (size_t i = 0; i < n;) {
    if (text[i] == pre[0] && (i == 0 || !ident_char(text[i - 1])) && !strncmp(text + i, pre, np)) {
      t[o++] = '\1';
      i += np;
    } else {
      t[o++] = text[i++];
    }
  }
  t[o] = 0;
  *len = o;
  return t;
}

static void free_canon(cstate *c) {
  text_set_free(&c->gen_texts);
  kiln_free(c->dup_of);
  text_set_free(&c->op_texts);
}

/* Op `op`, which printed its kernels' text at src_at: where an earlier op
 * printed the same text but for its name prefix (the transformer's two
 * LayerNorms, embedding_bag's SparseLengths ops: opencl/ENGINE.md
 * "Repeated ops printed once"), the text is taken back out, op's kernels
 * take that op's names and *text_of / *at say whose text it uses and
 * where; else *canon (kiln_malloc'd, *clen bytes; NULL where op printed
 * nothing) is the text to keep (text_keep, c->op_texts) once op's step
 * exists. */
static kiln_status share_op_text(cstate *c, kiln_cl_op *op, size_t src_at, int *text_of, size_t *at, char **canon,
                                 size_t *clen) {
  const char *pre = kiln_cl_op_prefix(op);
  size_t np = strlen(pre);
  *text_of = 0;
  *at = src_at;
  *canon = NULL;
  *clen = 0;
  if (c->src.len <= src_at || !np) return KILN_OK; /* no text (CLBlast calls only) */
  char *t = same_text(c->src.text + src_at, pre, np, clen);
  if (!t) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  int j = text_find(&c->op_texts, t, *clen);
  if (j >= 0 && kiln_cl_op_share_text(op, c->v->steps[j].op)) {
    kiln_free(t);
    c->src.text[src_at] = 0;
    c->src.len = src_at;
    *text_of = 1 + j;
    *at = c->v->steps[j].src_at;
    return KILN_OK;
  }
  *canon = t;
  return KILN_OK;
}

/* Appends a printed kernel (text, sig: taken) as the next GEN step. A
 * fused kernel whose text is an earlier one's but for its name prefix
 * (MobileNetV2's repeated blocks: 22 of its 45 generated kernels, 272 KB of
 * its 622 KB of source; opencl/ENGINE.md "Repeated kernels printed once") is not printed
 * again: the step gets a kernel object of its own (its own arguments), a
 * clone of the earlier kernel's (clone_gen_kernel). */
static kiln_status push_kernel(cstate *c, char *text, const kiln_cl_kernel_sig *sig, int node, int nodes) {
  kiln_cl_variant *v = c->v;
  kiln_cl_kernel_sig *q = kiln_realloc(v->sig, sizeof *q * (size_t)(v->n_kern + 1));
  if (!q) {
    kiln_free(text);
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  }
  v->sig = q;
  v->sig[v->n_kern] = *sig;
  size_t *at = kiln_realloc(c->kern_at, sizeof *at * (size_t)(v->n_kern + 1));
  if (at) c->kern_at = at;
  int *dp = at ? kiln_realloc(c->dup_of, sizeof *dp * (size_t)(v->n_kern + 1)) : NULL;
  if (dp) c->dup_of = dp;
  size_t np = name_prefix(sig->name), clen = 0;
  char *canon = dp && np ? same_text(text, sig->name, np, &clen) : NULL;
  if (!dp || (np && !canon)) {
    kiln_free(text);
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  }
  int k = v->n_kern, same = canon ? text_find(&c->gen_texts, canon, clen) : -1;
  /* the earlier kernel's names: its prefix, then this kernel's name (and twin) past the prefix */
  kiln_cl_kernel_sig *w = &v->sig[k];
  size_t npj = same >= 0 ? name_prefix(v->sig[same].name) : 0;
  if (same >= 0 && (!w->twin[0] || !strncmp(w->twin, w->name, np))) {
    char name[sizeof w->name], twin[sizeof w->twin];
    snprintf(name, sizeof name, "%.*s%s", (int)npj, v->sig[same].name, w->name + np);
    snprintf(twin, sizeof twin, "%.*s%s", (int)npj, v->sig[same].name, w->twin[0] ? w->twin + np : "");
    memcpy(w->name, name, sizeof name);
    if (w->twin[0]) memcpy(w->twin, twin, sizeof twin);
    kiln_free(canon);
    canon = NULL;
  } else {
    same = -1;
  }
  c->dup_of[k] = same;
  at[k] = same >= 0 ? at[same] : c->src.len;
  kiln_status s = same >= 0 ? KILN_OK : kiln_cl_src_puts(&c->src, text);
  if (!s && same < 0) s = kiln_cl_src_puts(&c->src, "\n");
  kiln_free(text);
  if (!s && canon) s = text_keep(&c->gen_texts, canon, clen, k); /* takes canon */
  else kiln_free(canon);
  if (s) return s;
  int reads[KILN_CL_SIG_MAX_ARGS], writes[KILN_CL_SIG_MAX_ARGS], nr = 0, nw = 0;
  for (int a = 0; a < sig->n_args; a++) {
    if (sig->args[a].output) writes[nw++] = sig->args[a].value;
    else reads[nr++] = sig->args[a].value;
  }
  kiln_cl_step x = {KILN_CL_STEP_GEN, node, nodes, v->n_kern, NULL, -1, 0, 0};
  if (c->df) {
    char lbl[160];
    fprintf(c->df, "kernel %s: %d node%s from %s (%s)%s%s\n", w->name, nodes, nodes == 1 ? "" : "s",
            kiln_node_label(v->g, &v->g->nodes[node], lbl, sizeof lbl), v->g->nodes[node].op_type,
            strchr(sig->name, 'v') ? ", a view copy" : "", same >= 0 ? ", the text of an earlier kernel" : "");
  }
  v->n_kern++;
  return add_step(c, x, reads, nr, writes, nw);
}

/* Views may be read or written in place by MatMuls in this plan: not under
 * KILN_CL_MM_VIEWS=0, nor in observing or symbolic-dim plans. */
static bool mm_views_on(const cstate *c) {
  const char *e = getenv("KILN_CL_MM_VIEWS");
  return !(e && !strcmp(e, "0")) && !c->p->obs_mode && !c->p->sym;
}

/* Whether alias a of spec sp (a view of memory) is read in place instead of
 * copied (opencl/ENGINE.md "Views read in place by MatMul"): one strided
 * view, unmasked, of a float32 value computed on the device or a weight
 * (not a graph input or output: the host's buffers are bound per run), in
 * a plain plan (no observers, no symbolic dims: their steps take the values
 * as laid out), and every node that reads it is a MatMul whose op or fused
 * kernel reads it through its strides as A or B (kiln_cl_mm_reads_view).
 * *mv gets the view; KILN_CL_MM_VIEWS=0: never. */
static bool read_in_place(cstate *c, const kiln_fuse_spec *sp, int a, kiln_cl_mm_view *mv) {
  const kiln_cl_variant *v = c->v;
  const kiln_graph *g = v->g;
  const kiln_fuse_alias *al = &sp->alias[a];
  const kiln_fuse_access *ac = &sp->access[al->access];
  int w = al->value, st = ac->value;
  if (!mm_views_on(c) || al->copy || w < 0 || st < 0 || w == st) return false;
  if (g->values[w].is_input || g->values[st].is_input || g->values[w].is_output || g->values[st].is_output ||
      c->mmv[st].storage >= 0)
    return false;
  if (!kiln_views_single(&ac->map)) return false;
  const kiln_view *top = kiln_views_top(&ac->map);
  kiln_cl_ttype t, ts;
  if (top->has_mask || !concrete(v, w, &t) || !concrete(v, st, &ts) || t.dtype != KILN_F32 || ts.dtype != KILN_F32 ||
      top->rank != t.rank)
    return false;
  int64_t reach = top->offset, n_st = 1;
  for (int d = 0; d < t.rank; d++) {
    if (top->shape[d] != t.dims[d]) return false;
    reach += top->strides[d] * (t.dims[d] - 1);
  }
  for (int d = 0; d < ts.rank; d++) n_st *= ts.dims[d];
  if (top->offset < 0 || reach >= n_st || !kiln_cl_mm_view_ok(&t, top->strides)) return false;
  *mv = (kiln_cl_mm_view){.storage = st, .rank = t.rank, .offset = top->offset};
  memcpy(mv->strides, top->strides, sizeof mv->strides);
  /* every reader: a MatMul reading it through the view (tried with it set) */
  c->mmv[w] = *mv;
  int readers = 0;
  bool ok = true;
  for (int j = 0; j < g->n_nodes && ok; j++) {
    const kiln_node *n = &g->nodes[j];
    bool reads = false;
    for (int k = 0; k < n->n_in; k++) reads = reads || n->in[k] == w;
    if (!reads) continue;
    readers++;
    kiln_cl_ttype in[2], out[1];
    ok = n->n_in == 2 && n->n_out == 1 && n->in[0] >= 0 && n->in[1] >= 0 && n->out[0] >= 0 &&
         concrete(v, n->in[0], &in[0]) && concrete(v, n->in[1], &in[1]) && concrete(v, n->out[0], &out[0]) &&
         kiln_cl_mm_reads_view(c->p->dev, g, n, in, out, w);
  }
  c->mmv[w] = (kiln_cl_mm_view){.storage = -1};
  return ok && readers > 0;
}

/* Whether view group sp (its one alias w, a view of memory value x) is
 * left out because the MatMul making x writes it in place: x stored as a
 * view of w's storage, so that w is dense as it is written
 * (opencl/ENGINE.md "Views read in place by MatMul", the output side).
 * The view: one permutation of x's dims (w's map a transposed view of x,
 * or a reshape of one), unmasked, float32; x made by a MatMul alone in its
 * group (a lone op: a fused SGEMM's epilogue indexes C densely), read by
 * no node outside sp, neither x nor w a graph input or output; a plain plan
 * (as read_in_place); the op writes C through the view
 * (kiln_cl_mm_reads_view). *mv gets x's view. grp: per node its group in fp. */
static bool write_in_place(cstate *c, const kiln_fuse_plan *fp, const int *grp, const kiln_fuse_spec *sp,
                           kiln_cl_mm_view *mv) {
  const kiln_cl_variant *v = c->v;
  const kiln_graph *g = v->g;
  if (!mm_views_on(c) || !sp->bound || sp->n_alias != 1 || sp->n_store ||
      (sp->kind != KILN_FUSE_G_VIEW && sp->kind != KILN_FUSE_G_ELEMWISE) || sp->alias[0].copy)
    return false;
  const kiln_fuse_access *ac = &sp->access[sp->alias[0].access];
  int w = sp->alias[0].value, x = ac->value;
  if (w < 0 || x < 0 || w == x || g->values[w].is_input || g->values[w].is_output || g->values[x].is_input ||
      g->values[x].is_output || g->values[x].init || c->mmv[x].storage >= 0 || c->mmv[w].storage >= 0)
    return false;
  int pn = g->values[x].producer;
  if (pn < 0 || strcmp(g->nodes[pn].op_type, "MatMul") || grp[pn] < 0 || fp->spec[grp[pn]]->n_nodes != 1) return false;
  /* no reader of x outside sp */
  for (int j = 0; j < g->n_nodes; j++) {
    bool reads = false, inside = false;
    for (int k = 0; k < g->nodes[j].n_in; k++) reads = reads || g->nodes[j].in[k] == x;
    for (int k = 0; k < sp->n_nodes; k++) inside = inside || sp->nodes[k] == j;
    if (reads && !inside) return false;
  }
  /* w's map: a permutation view of x (row-major over its shape S), or a
     contiguous reshape of one */
  const kiln_views *m = &ac->map;
  if (m->depth < 1 || m->depth > 2 || (m->depth == 2 && !m->v[1].contiguous)) return false;
  const kiln_view *b = &m->v[0];
  kiln_cl_ttype tx, tw;
  if (b->has_mask || b->offset || !concrete(v, x, &tx) || !concrete(v, w, &tw) || tx.dtype != KILN_F32 ||
      tw.dtype != KILN_F32)
    return false;
  int64_t dense_x[KILN_MAX_RANK], dense_s[KILN_MAX_RANK], st = 1, ss = 1;
  for (int d = tx.rank - 1; d >= 0; d--) dense_x[d] = st, st *= tx.dims[d];
  for (int d = b->rank - 1; d >= 0; d--) dense_s[d] = ss, ss *= b->shape[d];
  if (st != ss || st != b->numel) return false;
  bool used[KILN_MAX_RANK] = {false};
  int n_x = 0, n_s = 0;
  *mv = (kiln_cl_mm_view){.storage = w, .rank = tx.rank};
  for (int d = 0; d < b->rank; d++) n_s += b->shape[d] != 1;
  for (int k = 0; k < tx.rank; k++) {
    if (tx.dims[k] == 1) continue; /* (stride 0) */
    n_x++;
    int j = 0;
    while (j < b->rank && (used[j] || b->shape[j] != tx.dims[k] || b->strides[j] != dense_x[k])) j++;
    if (j == b->rank) return false;
    used[j] = true;
    mv->strides[k] = dense_s[j];
  }
  if (n_x != n_s) return false;
  kiln_cl_ttype in[2];
  const kiln_node *n = &g->nodes[pn];
  if (n->n_in != 2 || n->in[0] < 0 || n->in[1] < 0 || !concrete(v, n->in[0], &in[0]) ||
      !concrete(v, n->in[1], &in[1]))
    return false;
  c->mmv[x] = *mv;
  bool ok = kiln_cl_mm_reads_view(c->p->dev, g, n, in, &tx, x);
  c->mmv[x] = (kiln_cl_mm_view){.storage = -1};
  return ok;
}

/* The node of view group sp whose output, alias a, is its input's bytes as
 * they lie — a Reshape-like node over a value from outside the group (not
 * itself a view left unmaterialised), the alias its whole storage read
 * contiguously, of the same type — or -1. Such an alias is a buffer copy
 * step (lower_node; engine_run.c: clEnqueueCopyBuffer from the input's
 * buffer), not a copy kernel to build, create and launch (opencl/ENGINE.md
 * "Dense views copied as buffers"). */
static int plain_copy_node(const cstate *c, const kiln_fuse_spec *sp, int a) {
  const kiln_cl_variant *v = c->v;
  const kiln_graph *g = v->g;
  const kiln_fuse_alias *al = &sp->alias[a];
  const kiln_fuse_access *ac = &sp->access[al->access];
  int w = al->value, x = ac->value;
  if (w < 0 || x < 0 || w == x || !kiln_views_contiguous(&ac->map) || c->mmv[x].storage >= 0) return -1;
  int p = g->values[w].producer;
  bool inside = false;
  for (int k = 0; k < sp->n_nodes && !inside; k++) inside = sp->nodes[k] == p;
  if (p < 0 || !inside || !is_reshape_like(&g->nodes[p]) || g->nodes[p].in[0] != x) return -1;
  kiln_cl_ttype tw, tx;
  if (!concrete(v, w, &tw) || !concrete(v, x, &tx) || tw.dtype != tx.dtype || bytes_of(&tw) != bytes_of(&tx))
    return -1;
  return p;
}

static kiln_status lower_node(cstate *c, int i, bool try_spec, bool without_bias);

/* Prints spec sp as kernel k<n> (its stores) plus one copy kernel k<n>v<a>
 * per alias (a view of memory needed densely; a view group's alias that is
 * its input's bytes as they lie is a buffer copy step instead:
 * plain_copy_node) when the code generator takes all of them and they write
 * every value step st writes; *ok false (no error) otherwise. */
static kiln_status try_gen(cstate *c, const kiln_fuse_spec *sp, const kiln_step *st, bool *ok) {
  kiln_cl_variant *v = c->v;
  *ok = false;
  if (!sp || !sp->bound || sp->n_nodes < 1) return KILN_OK;
  bool main = sp->kind == KILN_FUSE_G_ELEMWISE && sp->n_store > 0;
  if (!main && !(sp->kind == KILN_FUSE_G_VIEW || sp->kind == KILN_FUSE_G_ELEMWISE)) return KILN_OK;
  if (!main && !sp->n_alias) return KILN_OK;
  if (sp->n_alias > 8) return KILN_OK;
  for (int w = 0; w < st->n_writes; w++) {
    bool found = false;
    for (int k = 0; k < sp->n_store && !found; k++) found = sp->store[k].value == st->writes[w];
    for (int k = 0; k < sp->n_alias && !found; k++) found = sp->alias[k].value == st->writes[w];
    if (!found) return KILN_OK;
  }
  /* views only MatMuls read: in place, no copy kernel */
  kiln_cl_mm_view mv[8];
  bool in_place[8] = {false};
  int n_in_place = 0;
  for (int a = 0; a < sp->n_alias; a++) n_in_place += in_place[a] = read_in_place(c, sp, a, &mv[a]);
  char *text[9] = {NULL};
  kiln_cl_kernel_sig sig[9];
  int nk = 0;
  kiln_status s = KILN_OK;
  if (main) {
    kiln_fuse_spec tmp = *sp;
    tmp.n_alias = 0;
    char name[32];
    snprintf(name, sizeof name, "k%d", v->n_kern);
    s = kiln_cl_obs_codegen(c->p, v, &tmp, name, &text[nk], &sig[nk]); /* observing plans: in-kernel reductions */
    if (!s) nk++;
  }
  int copy_node[8];
  for (int a = 0; a < sp->n_alias; a++) copy_node[a] = main || in_place[a] ? -1 : plain_copy_node(c, sp, a);
  for (int a = 0; a < sp->n_alias && !s; a++) {
    if (in_place[a] || copy_node[a] >= 0) continue;
    char name[32];
    snprintf(name, sizeof name, "k%dv%d", v->n_kern, a);
    s = kiln_cl_codegen_alias(sp, a, c->p->dev, name, &text[nk], &sig[nk]);
    if (!s) nk++;
  }
  if (s) {
    for (int k = 0; k < nk; k++) kiln_free(text[k]);
    if (s == KILN_E_NOMEM) return s;
    kiln_log(KILN_LOG_DEBUG, "opencl: group from node %d not generated: %s", sp->nodes[0], kiln_last_error());
    kiln_error_clear();
    return KILN_OK;
  }
  if (main && sp->n_nodes > 1) {
    c->p->st.fused_groups++;
    c->p->st.fused_nodes += sp->n_nodes;
  }
  for (int a = 0; a < sp->n_alias && n_in_place; a++) {
    if (!in_place[a]) continue;
    int w = sp->alias[a].value;
    c->mmv[w] = mv[a];
    if (c->df) {
      char lbl[160], vs[160];
      kiln_view_str(kiln_views_top(&sp->access[sp->alias[a].access].map), vs, sizeof vs);
      fprintf(c->df, "view %s: %d node%s from %s (%s), read in place by MatMul (storage %s, %s)\n",
              v->g->values[w].name, sp->n_nodes, sp->n_nodes == 1 ? "" : "s",
              kiln_node_label(v->g, &v->g->nodes[sp->nodes[0]], lbl, sizeof lbl), v->g->nodes[sp->nodes[0]].op_type,
              v->g->values[mv[a].storage].name, vs);
    }
  }
  for (int k = 0; k < nk; k++) {
    if (s) kiln_free(text[k]);
    else s = push_kernel(c, text[k], &sig[k], sp->nodes[0], sp->n_nodes); /* takes text[k] */
  }
  for (int a = 0; a < sp->n_alias && !s; a++)
    if (copy_node[a] >= 0) s = lower_node(c, copy_node[a], false, false); /* a COPY step */
  *ok = !s;
  return s;
}

/* The single-node spec of node i (fusion off), or NULL. */
static kiln_status single_spec(cstate *c, int i, const kiln_fuse_spec **sp, const kiln_step **st) {
  *sp = NULL;
  *st = NULL;
  if (!c->fp1_tried) {
    c->fp1_tried = true;
    kiln_fuse_opts o = {0};
    o.max_nodes = 1;
    kiln_status s = kiln_fuse_ctx_new(c->v->g, c->v->sh, &o, &c->fc1);
    if (!s) s = schedule_of(c->v->g, &c->fs1);
    if (!s) s = kiln_fuse_schedule(c->fc1, c->fs1, &c->fp1);
    if (s == KILN_E_NOMEM) return s;
    if (s) {
      kiln_error_clear();
      kiln_fuse_plan_free(c->fp1);
      c->fp1 = NULL;
    }
  }
  if (c->fp1 && i < c->fp1->n_steps && c->fp1->spec[i] && c->fp1->spec[i]->n_nodes == 1 &&
      c->fp1->spec[i]->nodes[0] == i) {
    *sp = c->fp1->spec[i];
    *st = &c->fs1->steps[i];
  }
  return KILN_OK;
}

/* Node i alone: a generated kernel, a buffer copy, a device op or the host.
 * without_bias: a device op prepared with input 2 absent, or an error
 * (opencl/engine_fuse.h kiln_cl_fuse_item). */
static kiln_status lower_node(cstate *c, int i, bool try_spec, bool without_bias) {
  kiln_cl_variant *v = c->v;
  const kiln_graph *g = v->g;
  const kiln_node *n = &g->nodes[i];
  int reads[64], writes[64], nr = 0, nw = 0;
  if (n->n_in > 64 || n->n_out > 64)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "node with more than 64 inputs or outputs");
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && !(without_bias && k == 2)) reads[nr++] = n->in[k];
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0) writes[nw++] = n->out[k];
  const kiln_fuse_spec *sp;
  const kiln_step *st;
  kiln_status s = try_spec ? single_spec(c, i, &sp, &st) : KILN_OK;
  bool ok = false;
  if (!try_spec) sp = NULL;
  if (!s && sp) s = try_gen(c, sp, st, &ok);
  if (s || ok) return s;
  char lbl[160];
  kiln_node_label(g, n, lbl, sizeof lbl);
  if (is_reshape_like(n) && n->out[0] >= 0) {
    if (c->df) fprintf(c->df, "copy %s (%s)\n", lbl, n->op_type);
    c->p->st.copies++;
    return add_step(c, (kiln_cl_step){KILN_CL_STEP_COPY, i, 1, -1, NULL, -1, 0, 0}, reads, 1, writes, nw);
  }
  /* a device op */
  kiln_cl_ttype in[64], out[64];
  const kiln_tensor *konst[64];
  bool typed = true;
  for (int k = 0; k < n->n_in; k++) {
    memset(&in[k], 0, sizeof in[k]);
    konst[k] = NULL;
    if (n->in[k] < 0 || (without_bias && k == 2)) continue;
    typed &= concrete(v, n->in[k], &in[k]);
    konst[k] = kiln_cl_konst_of(g, v->sh, n->in[k]);
  }
  for (int k = 0; k < n->n_out; k++) {
    memset(&out[k], 0, sizeof out[k]);
    if (n->out[k] >= 0) typed &= concrete(v, n->out[k], &out[k]);
  }
  kiln_cl_op *op = NULL;
  size_t src_at = c->src.len;
  if (typed) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "n%d_", i);
    s = kiln_cl_op_prepare(c->p->dev, g, n, in, out, konst, prefix, &c->src, &op);
    if (s) {
      kiln_error_prefix("node %s (%s)", lbl, n->op_type);
      return s;
    }
  }
  if (op) {
    int text_of = 0;
    char *canon = NULL;
    size_t clen = 0;
    s = share_op_text(c, op, src_at, &text_of, &src_at, &canon, &clen);
    if (s) {
      kiln_cl_op_free(op);
      return s;
    }
    if (c->df) {
      char lbl2[160];
      const kiln_cl_step *o = text_of ? &v->steps[text_of - 1] : NULL;
      fprintf(c->df, "op %s (%s): %s%s%s%s\n", lbl, n->op_type, kiln_cl_op_describe(op),
              o ? ", the text of the op of " : "", o ? kiln_node_label(g, &g->nodes[o->node], lbl2, sizeof lbl2) : "",
              o ? " (not printed again)" : "");
    }
    c->p->st.device_ops++;
    s = add_step(c, (kiln_cl_step){KILN_CL_STEP_OP, i, 1, -1, op, -1, src_at, text_of}, reads, nr, writes, nw);
    if (s) {
      kiln_free(canon);
      kiln_cl_op_free(op);
      return s;
    }
    return canon ? text_keep(&c->op_texts, canon, clen, v->n_steps - 1) : KILN_OK;
  }
  if (without_bias)
    return kiln_fail(KILN_E_INTERNAL, "node %s (%s): no device op without its input 2", lbl, n->op_type);
  if (c->df) fprintf(c->df, "host %s (%s)\n", lbl, n->op_type);
  c->p->st.host_nodes++;
  return add_step(c, (kiln_cl_step){KILN_CL_STEP_HOST, i, 1, -1, NULL, -1, 0, 0}, reads, nr, writes, nw);
}

/* An anchor or reduction group as opencl/engine_fuse lowers it: generated
 * kernels and single-node device ops in order; *ok false when it declines. */
static kiln_status try_fused(cstate *c, const kiln_fuse_spec *sp, const kiln_step *st, bool *ok) {
  kiln_cl_fuse_lowering fl;
  kiln_status s = kiln_cl_fuse_lower(c->p->dev, sp, st, &fl, ok);
  if (s || !*ok) return s;
  if (c->df) fprintf(c->df, "fused group of %d nodes from node %d: %s\n", sp->n_nodes, sp->nodes[0], fl.how);
  for (int k = 0; k < fl.n && !s; k++) {
    if (fl.item[k].node >= 0) {
      s = lower_node(c, fl.item[k].node, false, fl.item[k].without_bias);
    } else {
      s = push_kernel(c, fl.item[k].text, &fl.item[k].sig, sp->nodes[0], sp->n_nodes); /* takes the text */
      fl.item[k].text = NULL;
    }
  }
  kiln_cl_fuse_lowering_free(&fl);
  if (!s) {
    c->p->st.fused_groups++;
    c->p->st.fused_nodes += sp->n_nodes;
  }
  *ok = !s;
  return s;
}

/* Groups the graph and lowers every group / node. */
static kiln_status lower(cstate *c) {
  kiln_cl_variant *v = c->v;
  const kiln_graph *g = v->g;
  kiln_status s = KILN_OK;
  bool *done = kiln_calloc((size_t)g->n_nodes + 1, sizeof *done);
  if (!done) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  kiln_fuse_ctx *fc = NULL;
  kiln_schedule *fs = NULL;
  kiln_fuse_plan *fp = NULL;
  if (fusion_enabled() && !kiln_cl_obs_unfused(c->p)) {
    s = kiln_fuse_ctx_new(g, v->sh, NULL, &fc);
    if (!s) s = schedule_of(g, &fs);
    if (!s) s = kiln_fuse_schedule(fc, fs, &fp);
    if (s && s != KILN_E_NOMEM) { /* run unfused */
      kiln_log(KILN_LOG_INFO, "opencl plan: fusion skipped: %s", kiln_last_error());
      kiln_error_clear();
      kiln_fuse_plan_free(fp);
      fp = NULL;
      s = KILN_OK;
    }
  }
  /* view groups the MatMul making their memory value writes in place (decided
     before that MatMul is lowered) */
  bool *skip = fp ? kiln_calloc((size_t)fp->n_steps + 1, sizeof *skip) : NULL;
  int *grp = fp ? kiln_malloc(((size_t)g->n_nodes + 1) * sizeof *grp) : NULL;
  if (fp && (!skip || !grp)) s = kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  for (int i = 0; grp && i < g->n_nodes; i++) grp[i] = -1;
  for (int k = 0; grp && k < fp->n_steps; k++)
    for (int j = 0; fp->spec[k] && j < fp->spec[k]->n_nodes; j++) grp[fp->spec[k]->nodes[j]] = k;
  for (int k = 0; fp && k < fp->n_steps && !s; k++) {
    kiln_cl_mm_view mv;
    if (!fp->spec[k] || fp->spec[k]->n_nodes < 1 || !write_in_place(c, fp, grp, fp->spec[k], &mv)) continue;
    const kiln_fuse_spec *sp = fp->spec[k];
    skip[k] = true;
    c->mmv[sp->access[sp->alias[0].access].value] = mv;
  }
  for (int k = 0; fp && k < fp->n_steps && !s; k++) {
    const kiln_fuse_spec *sp = fp->spec[k];
    if (!sp || sp->n_nodes < 1) continue;
    if (skip[k]) {
      int x = sp->access[sp->alias[0].access].value, w = sp->alias[0].value;
      if (c->df) {
        char lbl[160], vs[200];
        int o = 0;
        for (int d = 0; d < c->mmv[x].rank; d++)
          o += snprintf(vs + o, sizeof vs - (size_t)o, "%s%lld", d ? "," : "", (long long)c->mmv[x].strides[d]);
        fprintf(c->df,
                "view %s: %d node%s from %s (%s), written in place by MatMul (%s stored at strides [%s] of it)\n",
                g->values[w].name, sp->n_nodes, sp->n_nodes == 1 ? "" : "s",
                kiln_node_label(g, &g->nodes[sp->nodes[0]], lbl, sizeof lbl), g->nodes[sp->nodes[0]].op_type,
                g->values[x].name, vs);
      }
      for (int j = 0; j < sp->n_nodes; j++) done[sp->nodes[j]] = true;
      continue;
    }
    bool ok = false;
    s = try_gen(c, sp, &fs->steps[k], &ok);
    /* observing plans lower anchor and reduction groups node by node, so
       that every value they observe is stored (engine_observe.c) */
    if (!s && !ok && !c->p->obs_mode) s = try_fused(c, sp, &fs->steps[k], &ok);
    for (int j = 0; j < sp->n_nodes && !s; j++) {
      int i = sp->nodes[j];
      if (!ok && !done[i]) s = lower_node(c, i, sp->n_nodes > 1, false);
      done[i] = true;
    }
  }
  for (int i = 0; i < g->n_nodes && !s; i++)
    if (!done[i]) s = lower_node(c, i, true, false);
  kiln_free(done);
  kiln_free(skip);
  kiln_free(grp);
  kiln_fuse_plan_free(fp);
  kiln_schedule_free(fs);
  kiln_fuse_ctx_free(fc);
  return s;
}

/* How constant w's device buffer holds its bytes on a CPU device
 * (KILN_CL_HOST_WEIGHTS=0: never, HOST_NONE): for a constant that is not
 * also a graph input (a run writes those) and is dense, HOST_IN_PLACE
 * where its buffer would be exactly its bytes (no rounding to read past
 * them) and they are 16-byte aligned (kiln_cl_buffer_over_host; its host
 * bytes outlive the buffer: the variant's graph, its record, the plan's
 * graph or the caller's, all freed after the variant's buffers), else
 * HOST_COPY: a copy in a block kiln allocates, under a buffer made over
 * it — no clEnqueueWriteBuffer, which on rusticl waits for the device's
 * helper context while the other thread loads the program (place_values
 * runs beside load_programs); elsewhere, HOST_NONE: a device buffer and a
 * write. */
enum { HOST_NONE, HOST_IN_PLACE, HOST_COPY };
static int over_host(const cstate *c, int w, uint64_t bytes, uint64_t size) {
  const kiln_graph *g = c->v->g;
  const kiln_tensor *t = g->values[w].init;
  const char *e = getenv("KILN_CL_HOST_WEIGHTS");
  if ((e && !strcmp(e, "0")) || !(c->p->dev->type & CL_DEVICE_TYPE_CPU) || !t || g->values[w].is_input ||
      t->strided || !t->data || !bytes || bytes != kiln_tensor_bytes(t))
    return HOST_NONE;
  return bytes == size && (uintptr_t)t->data % 16 == 0 ? HOST_IN_PLACE : HOST_COPY;
}

/* A read-write buffer of the variant (the arena, a graph input's or an
 * unaligned value's own buffer): on a CPU device over host memory kiln
 * allocates (kiln_cl_buffer_rw_over_host; *host the block to free after the
 * buffer), so that the driver neither allocates nor clears it when the
 * variant is made — rusticl/llvmpipe zeroes each buffer it allocates (51 ms
 * for ew_chain's 64 MiB arena) — and its pages are touched by the steps that
 * write them. No step reads a value before one writes it (a padded symbolic
 * step computes over garbage it never returns, engine_sym.c), so nothing
 * depended on those zeros; PoCL never cleared. Elsewhere, KILN_CL_HOST_ARENA=0
 * or a driver that refuses: the driver's allocation. */
static kiln_status rw_buffer(const cstate *c, size_t size, kiln_cl_buffer *b, void **host) {
  kiln_cl_context *ctx = c->p->slot->ctx;
  const char *e = getenv("KILN_CL_HOST_ARENA");
  *host = NULL;
  b->mem = NULL;
  if (!(e && !strcmp(e, "0")) && (c->p->dev->type & CL_DEVICE_TYPE_CPU)) {
    enum { PAGE = 4096 }; /* page-aligned within a block of kiln's allocator */
    *host = kiln_malloc(size + PAGE);
    if (!*host) return kiln_fail(KILN_E_NOMEM, "out of host memory for a buffer of %zu bytes", size);
    void *at = (void *)(((uintptr_t)*host + PAGE - 1) & ~(uintptr_t)(PAGE - 1));
    if (!kiln_cl_buffer_rw_over_host(ctx, at, size, b)) return KILN_OK;
    kiln_log(KILN_LOG_INFO, "opencl: buffer not in host memory (%s): allocated by the driver", kiln_last_error());
    kiln_error_clear();
    kiln_free(*host);
    *host = NULL;
  }
  return kiln_cl_buffer_create(ctx, size, b);
}

/* Places every value the steps touch: weights and inputs in buffers of
 * their own, the rest in the arena planned by ir/memplan. */
static kiln_status place_values(cstate *c) {
  kiln_cl_variant *v = c->v;
  const kiln_graph *g = v->g;
  kiln_cl_context *ctx = c->p->slot->ctx;
  size_t align = c->p->slot->align;
  int nv = g->n_values;
  kiln_status s = KILN_OK;
  uint64_t *size = kiln_calloc((size_t)nv + 1, sizeof *size);
  uint64_t *bytes = kiln_calloc((size_t)nv + 1, sizeof *bytes);
  bool *ext = kiln_calloc((size_t)nv + 1, sizeof *ext);
  bool *dev_read = kiln_calloc((size_t)nv + 1, sizeof *dev_read);
  bool *touched = kiln_calloc((size_t)nv + 1, sizeof *touched);
  int *alias_of = kiln_calloc((size_t)nv + 1, sizeof *alias_of);
  v->place = kiln_calloc((size_t)nv + 1, sizeof *v->place);
  kiln_memplan *mp = NULL;
  if (!size || !bytes || !ext || !dev_read || !touched || !alias_of || !v->place) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory planning OpenCL memory");
    goto done;
  }
  for (int w = 0; w < nv; w++) {
    ext[w] = g->values[w].init || (g->values[w].is_input && g->values[w].producer < 0);
    alias_of[w] = c->mmv[w].storage;
  }
  for (int k = 0; k < v->n_steps; k++) {
    const kiln_step *st = &c->ms->steps[k];
    for (int r = 0; r < st->n_reads; r++) {
      touched[st->reads[r]] = true;
      if (v->steps[k].kind != KILN_CL_STEP_HOST) dev_read[st->reads[r]] = true;
    }
    for (int r = 0; r < st->n_writes; r++) touched[st->writes[r]] = true;
  }
  for (int w = 0; w < nv; w++) /* a view read in place: its storage is read (a weight gets a buffer) */
    if (alias_of[w] >= 0 && touched[w]) touched[alias_of[w]] = dev_read[alias_of[w]] = true;
  for (int w = 0; w < nv; w++) {
    if (!touched[w]) continue;
    kiln_cl_ttype t;
    if (!concrete(v, w, &t)) {
      s = kiln_fail(KILN_E_INTERNAL, "value '%s' has no concrete shape", g->values[w].name);
      goto done;
    }
    bytes[w] = bytes_of(&t);
    uint64_t b = bytes[w] ? bytes[w] : 1;
    size[w] = (b + align - 1) / align * align;
  }
  kiln_memplan_request req = {c->ms, size, ext, alias_of, NULL, 0};
  if ((s = kiln_memplan_build(&req, &mp))) goto done;
  v->arena_bytes = mp->arena_size;
  c->p->st.arena_bytes = mp->arena_size;
  c->p->st.lower_bound = mp->lower_bound;
  c->p->st.no_reuse = mp->no_reuse;
  /* an arena beyond the device's largest allocation: a buffer per value */
  bool split = mp->arena_size > ctx->max_mem_alloc_size;
  if (split)
    kiln_log(KILN_LOG_INFO,
             "opencl plan: arena of %llu bytes exceeds the largest allocation (%llu): a buffer per value",
             (unsigned long long)mp->arena_size, (unsigned long long)ctx->max_mem_alloc_size);
  if (mp->arena_size && !split) {
    kiln_cl_buffer ab;
    if ((s = rw_buffer(c, mp->arena_size, &ab, &v->arena_host))) goto done;
    v->arena = ab.mem;
  }
  for (int w = 0; w < nv && !s; w++) {
    kiln_cl_place *pl = &v->place[w];
    pl->bytes = bytes[w];
    if (!touched[w] || alias_of[w] >= 0) continue; /* (views: their storage's buffer, below) */
    if (ext[w]) {
      if (g->values[w].init && !dev_read[w]) continue; /* read by host steps only */
      kiln_cl_buffer b;
      int how = over_host(c, w, bytes[w], size[w]);
      if (how == HOST_IN_PLACE) { /* the weight read in place (no copy) */
        if (!kiln_cl_buffer_over_host(ctx, g->values[w].init->data, size[w], &b)) {
          pl->mem = pl->base = b.mem;
          pl->own = true;
          v->host_weights++;
          continue;
        }
        /* a driver that will not take the host's bytes: copied as on any device */
        kiln_log(KILN_LOG_INFO, "opencl: weight '%s' not read in place (%s): copied", g->values[w].name,
                 kiln_last_error());
        kiln_error_clear();
      } else if (how == HOST_COPY) { /* copied into kiln's block, zero past its bytes */
        enum { AL = 64 };
        void *blk = kiln_malloc(size[w] + AL);
        if (!blk) {
          s = kiln_fail(KILN_E_NOMEM, "out of host memory for weight '%s' (%llu bytes)", g->values[w].name,
                        (unsigned long long)size[w]);
          break;
        }
        unsigned char *at = (unsigned char *)(((uintptr_t)blk + AL - 1) & ~(uintptr_t)(AL - 1));
        memcpy(at, g->values[w].init->data, bytes[w]);
        memset(at + bytes[w], 0, size[w] - bytes[w]);
        if (!kiln_cl_buffer_over_host(ctx, at, size[w], &b)) {
          pl->mem = pl->base = b.mem;
          pl->own = true;
          pl->host = blk;
          continue;
        }
        kiln_log(KILN_LOG_INFO, "opencl: weight '%s' not in a host block (%s): written", g->values[w].name,
                 kiln_last_error());
        kiln_error_clear();
        kiln_free(blk);
      }
      if ((s = g->values[w].init ? kiln_cl_buffer_create(ctx, size[w], &b) : rw_buffer(c, size[w], &b, &pl->host)))
        break;
      pl->mem = pl->base = b.mem;
      pl->own = true;
      if (g->values[w].init && bytes[w])
        s = kiln_cl_buffer_write(ctx, &b, 0, g->values[w].init->data, bytes[w]);
      continue;
    }
    if (mp->offset[w] == KILN_MEMPLAN_NONE) continue;
    size_t off = (size_t)mp->offset[w];
    if (split || off % align) { /* not where a sub-buffer may start: a buffer of its own */
      kiln_cl_buffer b;
      if ((s = rw_buffer(c, size[w], &b, &pl->host))) break;
      pl->mem = pl->base = b.mem;
      pl->own = true;
      continue;
    }
    cl_buffer_region reg = {off, size[w]};
    cl_int e = CL_SUCCESS;
    pl->mem = clCreateSubBuffer(v->arena, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &reg, &e);
    if (!pl->mem || e) {
      pl->mem = NULL;
      s = kiln_cl_fail(e ? e : CL_INVALID_VALUE, "making a sub-buffer at %zu (%llu bytes) of the arena for '%s'", off,
                       (unsigned long long)size[w], g->values[w].name);
      break;
    }
    pl->base = v->arena;
    pl->offset = off;
  }
  /* a view read in place: its storage's buffer (the MatMul reads it
     through the view's strides and offset) */
  for (int w = 0; w < nv && !s; w++) {
    if (alias_of[w] < 0 || !touched[w]) continue;
    const kiln_cl_place *q = &v->place[alias_of[w]];
    if (!q->mem) {
      s = kiln_fail(KILN_E_INTERNAL, "view '%s': its storage '%s' has no device buffer", g->values[w].name,
                    g->values[alias_of[w]].name);
      break;
    }
    clRetainMemObject(q->mem);
    v->place[w] = (kiln_cl_place){q->mem, q->base, q->offset, bytes[w], false, true, NULL};
  }
  c->p->st.host_weights = v->host_weights;
  /* the kernels' scratch: one buffer, the largest any kernel asks for
     (their steps run one after another; codegen.h) */
  for (int k = 0; k < v->n_kern; k++)
    if ((uint64_t)v->sig[k].scratch * sizeof(float) > v->scratch_bytes)
      v->scratch_bytes = (uint64_t)v->sig[k].scratch * sizeof(float);
  if (!s && v->scratch_bytes) {
    kiln_cl_buffer b;
    if (!(s = kiln_cl_buffer_create(ctx, v->scratch_bytes, &b))) v->scratch = b.mem;
  }
  if (!s && c->df) {
    if (v->scratch_bytes) fprintf(c->df, "scratch: %llu bytes\n", (unsigned long long)v->scratch_bytes);
    fprintf(c->df, "arena: %llu bytes (lower bound %llu, no reuse %llu), alignment %zu\n",
            (unsigned long long)mp->arena_size, (unsigned long long)mp->lower_bound,
            (unsigned long long)mp->no_reuse, align);
    kiln_memplan_dump(mp, &req, g, c->df);
  }
done:
  kiln_memplan_free(mp);
  kiln_free(size);
  kiln_free(bytes);
  kiln_free(ext);
  kiln_free(dev_read);
  kiln_free(touched);
  kiln_free(alias_of);
  return s;
}

/* KILN_CL_BINARY_CACHE=0 turns the kiln cache of device binaries off (the
 * driver's own cache still works); =build stores the binary right after
 * clBuildProgram (a measurement aid: see opencl/ENGINE.md). */
static bool binary_cache_enabled(void) {
  const char *e = getenv("KILN_CL_BINARY_CACHE");
  return !(e && !strcmp(e, "0"));
}

/* Where a variant's source is cut into programs (bytes of source a program
 * reaches before the next kernel starts a new one; 0: one program).
 * KILN_CL_PROGRAM_SPLIT=N sets it, =0 one program; by default 32 KiB on
 * Mesa's rusticl, whose clCreateKernel costs time in proportion to the
 * size of the program the kernel is in (a warm mobilenetv2, 63 kernels in
 * 613 KB of SPIR-V, a new process: 55-106 ms of kernel objects in one
 * program, 14-23 ms in 8; opencl/ENGINE.md), and one program elsewhere (not
 * measured on PoCL, whose cold init is its program builds). */
static size_t program_split(const kiln_cl_device *dev) {
  const char *e = getenv("KILN_CL_PROGRAM_SPLIT");
  if (e && *e) {
    char *end;
    unsigned long long n = strtoull(e, &end, 10);
    return *end ? 0 : (size_t)n;
  }
  return dev->platform_name && strstr(dev->platform_name, "rusticl") ? 32768 : 0;
}

/* The program of source text[0..len) into vp: loaded ahead (the plan's
 * preload, opencl/preload.h), else the context's kept programs, else the
 * kiln cache's binary, else built from source. */
static kiln_status get_program(cstate *c, const char *text, size_t len, kiln_cl_vprog *vp) {
  kiln_cl_context *ctx = c->p->slot->ctx;
  const char *opts = KILN_CL_PROGRAM_OPTIONS;
  vp->key = kiln_cl_program_key(c->p->dev, text, len, opts);
  void *bin = NULL;
  size_t blen = 0;
  bool on_disk = false;
  if (kiln_cl_preload_take(c->p->preload, vp->key, &vp->prog)) { /* loaded ahead from the kiln cache (preload.h) */
    vp->from_cache = true;
    kiln_cl_context_program_put(ctx, vp->key.hi, vp->key.lo, vp->prog, true);
    return KILN_OK;
  }
  if (kiln_cl_context_program_get(ctx, vp->key.hi, vp->key.lo, &vp->prog, &on_disk)) { /* built in this process */
    vp->from_cache = true;
    vp->from_process = true;
    vp->store_binary = binary_cache_enabled() && !on_disk; /* the variant that built it may not have run twice */
    return KILN_OK;
  }
  if (binary_cache_enabled() && kiln_cl_cache_get(vp->key, &bin, &blen)) {
    if (kiln_cl_program_from_binary(ctx, bin, blen, opts, &vp->prog)) {
      kiln_log(KILN_LOG_INFO, "opencl: cached binary rejected (%s): building from source", kiln_last_error());
      kiln_error_clear();
      vp->prog = NULL;
    }
    kiln_free(bin);
  }
  if (!vp->prog) {
    char *src = text[len] ? kiln_strndup(text, len) : NULL; /* a part of the source: NUL-terminated */
    if (text[len] && !src) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    kiln_status s = kiln_cl_program_build(ctx, src ? src : text, opts, &vp->prog);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    kiln_free(src);
    if (s) return s;
    vp->build_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    vp->store_binary = binary_cache_enabled();
    const char *when = getenv("KILN_CL_BINARY_CACHE");
    if (vp->store_binary && when && !strcmp(when, "build")) { /* for measurements: the binary as built */
      void *b = NULL;
      size_t n = 0;
      if (!kiln_cl_program_binary(ctx, vp->prog, &b, &n)) kiln_cl_cache_put(vp->key, b, n);
      kiln_error_clear();
      kiln_free(b);
      vp->store_binary = false;
    }
  } else {
    vp->from_cache = true;
  }
  /* on disk: loaded from the kiln cache, or stored right after the build */
  kiln_cl_context_program_put(ctx, vp->key.hi, vp->key.lo, vp->prog, vp->from_cache || !vp->store_binary);
  return KILN_OK;
}

/* The program of the text at source offset at (build's cuts). */
static int program_of(const size_t *cut, int n, size_t at) {
  int i = 0;
  while (i + 1 < n && cut[i + 1] <= at) i++;
  return i;
}

/* Whether a variant of two or more programs loads them on two threads
 * (load_programs): by default when the machine has two cores or more;
 * KILN_CL_PARALLEL_LOAD=0: never (one after another on the calling thread),
 * =1: always. */
static bool parallel_load(void) {
  const char *e = getenv("KILN_CL_PARALLEL_LOAD");
  if (e && !strcmp(e, "0")) return false;
  if (e && !strcmp(e, "1")) return true;
  return sysconf(_SC_NPROCESSORS_ONLN) > 1;
}

/* Where build cuts the source (cut[0] = 0, *n_cut programs) from units[],
 * the n_units starts of the generated kernels and ops in source order.
 * KILN_CL_PROGRAM_SPLIT set: a new program at the first unit at least that
 * many bytes past the last cut (its rule since it came). By default on
 * rusticl (32 KiB): as many programs as that rule gives, at least two from
 * SPLIT_TWO bytes of source and an even number, of about equal size (each
 * cut at the unit start nearest its share), so that the two threads of
 * load_programs load about as much each; one program elsewhere. SPLIT_TWO
 * 4 KB (8 KB before 2026-11-27): embedding_bag's 6.5 KB in two programs,
 * warm init 10.4 -> 9.4 ms, cold unchanged (opencl/ENGINE.md "Programs
 * loaded on two threads"). */
enum { SPLIT_TWO = 4096 };
static void cut_source(const kiln_cl_device *dev, const size_t *units, int n_units, size_t len, size_t *cut,
                       int *n_cut) {
  const char *e = getenv("KILN_CL_PROGRAM_SPLIT");
  bool set = e && *e;
  size_t split = program_split(dev);
  int n = 0;
  cut[n++] = 0;
  for (int u = 0; split && u < n_units; u++)
    if (units[u] < len && units[u] - cut[n - 1] >= split) cut[n++] = units[u];
  if (set || !split) {
    *n_cut = n;
    return;
  }
  int want = n;
  if (want < 2 && len >= SPLIT_TWO) want = 2;
  if (want > 1) want += want % 2;
  n = 1;
  for (int j = 1; j < want; j++) { /* the unit start nearest share j's end, past the last cut */
    size_t target = len / (size_t)want * (size_t)j;
    int best = -1;
    for (int u = 0; u < n_units; u++) {
      if (units[u] <= cut[n - 1] || units[u] >= len) continue;
      size_t d = units[u] > target ? units[u] - target : target - units[u];
      if (best < 0 || d < (units[best] > target ? units[best] - target : target - units[best])) best = u;
    }
    if (best >= 0) cut[n++] = units[best];
  }
  *n_cut = n;
}

/* Creates generated kernel k from prog (its untiled twin when the device
 * takes fewer items per group than its tiles); arguments come later. */
static kiln_status create_gen_kernel(cstate *c, int k, cl_program prog) {
  kiln_cl_variant *v = c->v;
  kiln_cl_context *ctx = c->p->slot->ctx;
  kiln_cl_kernel_sig *w = &v->sig[k];
  kiln_status s = kiln_cl_kernel_create(ctx, prog, w->name, &v->kern[k]);
  if (!s && w->twin[0] && v->kern[k].wg_size < w->local) { /* a tiled kernel: its untiled twin (codegen.h) */
    kiln_log(KILN_LOG_INFO, "opencl: kernel %s takes %zu items per group, its tiles %zu: its untiled twin %s", w->name,
             v->kern[k].wg_size, w->local, w->twin);
    kiln_cl_kernel_free(&v->kern[k]);
    memcpy(w->name, w->twin, sizeof w->name);
    w->n_items = w->twin_items;
    w->local = 0;
    w->twin[0] = 0;
    s = kiln_cl_kernel_create(ctx, prog, w->name, &v->kern[k]);
  }
  return s;
}

/* Kernel k, whose text is kernel j = dup_of[k]'s (push_kernel), as a copy
 * of j's kernel object (kiln_cl_kernel_clone: clCloneKernel where the
 * device has it — rusticl's clCreateKernel converts and optimises the code
 * again each time — else created again by name), after j's choice of its
 * untiled twin (the same text on the same device: the same choice). j comes
 * first in the same program, so this thread made it already. */
static kiln_status clone_gen_kernel(cstate *c, int k, cl_program prog) {
  kiln_cl_variant *v = c->v;
  int j = c->dup_of[k];
  kiln_cl_kernel_sig *w = &v->sig[k];
  if (strcmp(v->sig[j].name, w->name)) { /* j took its twin (both named with j's prefix) */
    memcpy(w->name, w->twin, sizeof w->name);
    w->n_items = w->twin_items;
    w->local = 0;
    w->twin[0] = 0;
  }
  return kiln_cl_kernel_clone(c->p->slot->ctx, prog, &v->kern[j], &v->kern[k]);
}

/* Program i of the cut source: loaded (get_program), its generated kernels
 * created, its device ops' kernels bound. Touches only what is program
 * i's (its kiln_cl_vprog, its kernels, its ops), and the context's kept
 * programs, the kiln cache and the ops' shared workspace, which are
 * thread-safe: load_programs runs programs on two threads. */
static kiln_status load_program(cstate *c, const size_t *cut, int n_cut, int i) {
  kiln_cl_variant *v = c->v;
  size_t end = i + 1 < n_cut ? cut[i + 1] : c->src.len;
  struct timespec t[4];
  clock_gettime(CLOCK_MONOTONIC, &t[0]);
  kiln_status s = get_program(c, c->src.text + cut[i], end - cut[i], &v->progs[i]);
  cl_program prog = v->progs[i].prog;
  clock_gettime(CLOCK_MONOTONIC, &t[1]);
  int nk = 0, no = 0;
  for (int k = 0; k < v->n_kern && !s; k++) {
    if (program_of(cut, n_cut, c->kern_at[k]) != i) continue;
    s = c->dup_of[k] >= 0 ? clone_gen_kernel(c, k, prog) : create_gen_kernel(c, k, prog);
    nk++;
  }
  clock_gettime(CLOCK_MONOTONIC, &t[2]);
  for (int k = 0; k < v->n_steps && !s; k++) {
    if (v->steps[k].kind != KILN_CL_STEP_OP || program_of(cut, n_cut, v->steps[k].src_at) != i) continue;
    int of = v->steps[k].text_of; /* an earlier step's op, in this program: bound already, by this thread */
    s = of ? kiln_cl_op_bind_kernels_like(v->steps[k].op, v->steps[of - 1].op, c->p->slot->ctx, prog)
           : kiln_cl_op_bind_kernels(v->steps[k].op, c->p->slot->ctx, prog);
    no++;
  }
  clock_gettime(CLOCK_MONOTONIC, &t[3]);
  double ms[3];
  for (int k = 0; k < 3; k++)
    ms[k] = (double)(t[k + 1].tv_sec - t[k].tv_sec) * 1e3 + (double)(t[k + 1].tv_nsec - t[k].tv_nsec) / 1e6;
  kiln_log(KILN_LOG_DEBUG, "opencl: program %d (%zu bytes of source) %.2f ms, %d kernels %.2f ms, %d ops %.2f ms", i,
           end - cut[i], ms[0], nk, ms[1], no, ms[2]);
  return s;
}

/* The programs of one load, taken in order by whichever thread is free. */
typedef struct load_job {
  cstate *c;
  const size_t *cut;
  int n_cut;
  atomic_int next;    /* the next program to take */
  atomic_bool failed; /* a thread failed: no program is taken after */
} load_job;

/* One thread's share: its first failure, with its program and message
 * (kiln's last error is per thread). */
typedef struct load_share {
  load_job *job;
  kiln_status s;
  int at; /* the program that failed */
  char msg[1024];
} load_share;

static void *load_work(void *arg) {
  load_share *sh = arg;
  load_job *j = sh->job;
  for (int i; !atomic_load(&j->failed) && (i = atomic_fetch_add(&j->next, 1)) < j->n_cut;) {
    kiln_status s = load_program(j->c, j->cut, j->n_cut, i);
    if (s) {
      sh->s = s;
      sh->at = i;
      snprintf(sh->msg, sizeof sh->msg, "%s", kiln_last_error());
      atomic_store(&j->failed, true);
    }
  }
  return NULL;
}

/* Loads the n_cut programs: on this thread and one more when there are two
 * or more (rusticl serialises the work on one program, but overlaps two
 * programs' in part: small_cnn's two, binaries and 12 kernels, 1.5 ms at
 * best on two threads against 2.2 one after the other, given an idle core;
 * opencl/ENGINE.md "Programs loaded on two threads"), one after another
 * under KILN_CL_PARALLEL_LOAD=0 or when no thread starts. first, when
 * given, runs on this thread before it takes a program, while the other
 * thread loads (place_values: the memory of a warm init overlaps the
 * binary's load; *first_ms its time) — for one program too where the
 * source is cut (program_split: rusticl, where that took a warm ew_chain's
 * init from 2.59 to 2.38 ms median; on PoCL, whose memory takes 0.1-0.4
 * ms beside a 2-3 ms clBuildProgram, the second thread cost 3-7%); its
 * failure stops both threads from taking another program and is
 * returned. A failure on either thread stops both from taking more; the
 * one of the first program is returned, with its message on this thread.
 * Whatever was made is the variant's (kiln_cl_variant_free). *threads: the
 * threads used. */
static kiln_status load_programs(cstate *c, const size_t *cut, int n_cut, kiln_status (*first)(cstate *),
                                 double *first_ms, int *threads) {
  load_job j = {.c = c, .cut = cut, .n_cut = n_cut};
  atomic_init(&j.next, 0);
  atomic_init(&j.failed, false);
  load_share sh[2];
  for (int t = 0; t < 2; t++) sh[t] = (load_share){.job = &j, .s = KILN_OK, .at = n_cut};
  pthread_t th;
  bool helper = (n_cut > 1 || (first && program_split(c->p->dev))) && parallel_load() &&
                !pthread_create(&th, NULL, load_work, &sh[1]);
  kiln_status fs = KILN_OK;
  *first_ms = 0;
  if (first) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fs = first(c);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *first_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    if (fs) atomic_store(&j.failed, true);
  }
  if (!fs) load_work(&sh[0]);
  if (helper) pthread_join(th, NULL);
  *threads = helper ? 2 : 1;
  if (fs) return fs; /* its message is this thread's */
  const load_share *f = sh[1].s && sh[1].at < sh[0].at ? &sh[1] : sh[0].s ? &sh[0] : NULL;
  if (!f) return KILN_OK;
  kiln_error_set_message(f->msg);
  return f->s;
}

/* Places the variant's values (place_values) and builds its programs
 * (one, or on rusticl the source cut at kernel boundaries: cut_source),
 * creates the kernels and binds the device ops (load_programs: the memory
 * on this thread while another loads the first program, two loading
 * threads where there are two programs or more), then sets the kernels'
 * arguments on this thread. Each kernel's text (a generated kernel with
 * its guarded prelude, an op's kernels) stands alone, so any cut between
 * two of them compiles. c->mem_ms: place_values' time. */
static kiln_status build(cstate *c) {
  kiln_cl_variant *v = c->v;
  kiln_cl_context *ctx = c->p->slot->ctx;
  kiln_status s = KILN_OK;
  struct timespec tb0, tb1, tb2, tb3;
  clock_gettime(CLOCK_MONOTONIC, &tb0);
  if (v->n_kern && !(v->kern = kiln_calloc((size_t)v->n_kern, sizeof *v->kern)))
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  int threads = 1;
  if (c->src.len) {
    /* the units' starts, in source order: generated kernels and ops */
    int n_units = v->n_kern + v->n_steps, nu = 0;
    size_t *units = kiln_calloc((size_t)n_units + 1, sizeof *units);
    size_t *cut = kiln_calloc((size_t)n_units + 1, sizeof *cut);
    v->progs = kiln_calloc((size_t)n_units + 1, sizeof *v->progs);
    if (!units || !cut || !v->progs) {
      kiln_free(units);
      kiln_free(cut);
      return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    }
    for (int k = 0, t = 0; k < v->n_kern || t < v->n_steps;) {
      if (t < v->n_steps && (v->steps[t].kind != KILN_CL_STEP_OP || v->steps[t].text_of)) t++; /* no text of its own */
      else if (k < v->n_kern && c->dup_of[k] >= 0) k++; /* no text of its own */
      else if (k < v->n_kern && (t >= v->n_steps || c->kern_at[k] <= v->steps[t].src_at)) units[nu++] = c->kern_at[k++];
      else units[nu++] = v->steps[t++].src_at;
    }
    int n_cut = 1;
    cut_source(c->p->dev, units, nu, c->src.len, cut, &n_cut);
    kiln_free(units);
    v->n_prog = n_cut; /* each freed with the variant: NULL until loaded */
    s = load_programs(c, cut, n_cut, place_values, &c->mem_ms, &threads);
    kiln_free(cut);
    if (s) return s;
    for (int i = 0; c->p->preload && i < v->n_prog; i++) /* the list the next init loads ahead */
      kiln_cl_preload_note(c->p->preload, &v->progs[i].key, 1);
    c->p->st.programs = v->n_prog;
    v->from_cache = v->from_process = true;
    for (int i = 0; i < v->n_prog; i++) {
      v->from_cache &= v->progs[i].from_cache;
      v->from_process &= v->progs[i].from_process;
      v->build_ms += v->progs[i].build_ms;
    }
  } else {
    struct timespec tm;
    s = place_values(c);
    clock_gettime(CLOCK_MONOTONIC, &tm);
    c->mem_ms = (double)(tm.tv_sec - tb0.tv_sec) * 1e3 + (double)(tm.tv_nsec - tb0.tv_nsec) / 1e6;
    for (int k = 0; k < v->n_steps && !s; k++) /* ops without kernels */
      if (v->steps[k].kind == KILN_CL_STEP_OP) s = kiln_cl_op_bind_kernels(v->steps[k].op, ctx, NULL);
  }
  clock_gettime(CLOCK_MONOTONIC, &tb1);
  for (int k = 0; k < v->n_kern && !s; k++) {
    const kiln_cl_kernel_sig *sig = &v->sig[k];
    for (int a = 0; a < sig->n_args && !s; a++) {
      cl_mem m = v->place[sig->args[a].value].mem;
      if (!m) s = kiln_fail(KILN_E_INTERNAL, "kernel %s: value '%s' has no device buffer", sig->name,
                            v->g->values[sig->args[a].value].name);
      else s = kiln_cl_kernel_arg(&v->kern[k], (cl_uint)a, sizeof m, &m);
    }
    if (!s && sig->scratch) /* after args (codegen.h) */
      s = !v->scratch ? kiln_fail(KILN_E_INTERNAL, "kernel %s: no scratch buffer", sig->name)
                      : kiln_cl_kernel_arg(&v->kern[k], (cl_uint)sig->n_args, sizeof v->scratch, &v->scratch);
    if (!s) s = kiln_cl_obs_bind_kernel(c->p, v, k);
  }
  clock_gettime(CLOCK_MONOTONIC, &tb2);
  /* CLBlast's warm-up threads start last: their build (~50 ms a routine on
     rusticl) does not take CPU from the kernels created above */
  for (int k = 0; k < v->n_steps && !s; k++)
    if (v->steps[k].kind == KILN_CL_STEP_OP) s = kiln_cl_op_bind_blas(v->steps[k].op, ctx);
  clock_gettime(CLOCK_MONOTONIC, &tb3);
  double load_ms = (double)(tb1.tv_sec - tb0.tv_sec) * 1e3 + (double)(tb1.tv_nsec - tb0.tv_nsec) / 1e6;
  double args_ms = (double)(tb2.tv_sec - tb1.tv_sec) * 1e3 + (double)(tb2.tv_nsec - tb1.tv_nsec) / 1e6;
  /* "kernels X ms, device ops bound Y ms": bench/cl_cache.py's kern / bind */
  kiln_log(KILN_LOG_INFO,
           "opencl: kernels %.1f ms, device ops bound %.1f ms (the kernels: %d program%s loaded with their kernels "
           "and the ops' kernels, and the memory placed, on %d thread%s in %.1f ms, arguments %.1f ms; the ops "
           "bound: CLBlast's start)",
           load_ms + args_ms, (double)(tb3.tv_sec - tb2.tv_sec) * 1e3 + (double)(tb3.tv_nsec - tb2.tv_nsec) / 1e6,
           v->n_prog, v->n_prog == 1 ? "" : "s", threads, threads == 1 ? "" : "s", load_ms, args_ms);
  return s;
}

/* True when the host let kiln choose the device (KILN_DEVICE unset, empty
 * or with an `auto` token): a graph the device cannot take at compile time
 * then runs on the host instead of failing (opencl/ENGINE.md). */
static bool host_fallback_allowed(void) {
  const char *e = getenv("KILN_DEVICE");
  if (!e || !*e) return true;
  for (const char *t = e; *t;) {
    while (*t == ' ' || *t == ',') t++;
    size_t n = strcspn(t, ",");
    while (n && t[n - 1] == ' ') n--;
    if (n == 4 && !strncmp(t, "auto", 4)) return true;
    t += strcspn(t, ",");
  }
  return false;
}

static void dump_source(cstate *c, int nvar) {
  if (!c->p->dump_stem[0] || !c->src.len) return;
  char ext[48];
  snprintf(ext, sizeof ext, "opencl-%d.cl", nvar);
  FILE *f = NULL;
  kiln_dump_open(c->p->dump_stem, ext, &f);
  if (!f) return;
  fputs(c->src.text, f);
  kiln_dump_close(f, c->p->dump_stem, ext);
}

kiln_status kiln_cl_variant_compile(kiln_cl_plan *p, const kiln_graph *d, kiln_cl_variant **out) {
  *out = NULL;
  cstate c;
  memset(&c, 0, sizeof c);
  c.p = p;
  kiln_cl_variant *v = c.v = kiln_calloc(1, sizeof *v);
  if (!v) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  kiln_rewrite_stats rst;
  signed char *facts = NULL; /* the constants' finiteness, from the rewrite (kiln_cl_rewrite), or NULL */
  struct timespec tc[4];
  clock_gettime(CLOCK_MONOTONIC, &tc[0]);
  kiln_status s = KILN_OK;
  bool on_device = false; /* failures from here on are the device's (host fallback) */
  if (p->probe_g) { /* prepare rewrote this graph already */
    v->g = p->probe_g;
    v->sh = p->probe_sh;
    v->rec = p->probe_rec;
    rst = p->probe_rst;
    facts = p->probe_facts;
    p->probe_g = NULL;
    p->probe_sh = NULL;
    memset(&p->probe_rec, 0, sizeof p->probe_rec);
    p->probe_facts = NULL;
  } else {
    s = kiln_cl_rewrite(d, NULL, p->dump_stem[0] ? p->dump_stem : NULL,
                        p->obs_mode && ((p->obs_mode - 1) & KILN_CL_OBS_KEEP), &v->g, &v->sh, &rst, &v->rec, &facts,
                        NULL, NULL);
  }
  if (s) goto fail;
  const kiln_graph *g = v->g;
  p->st.nodes_in = d->n_nodes;
  p->st.nodes_out = g->n_nodes;
  p->st.folded = rst.folded;
  p->st.bn_folded = rst.bn_conv + rst.bn_gemm;
  p->st.cse = rst.cse_nodes + rst.cse_consts;
  p->st.noops = rst.identities + rst.dropouts;
  p->st.transposes = rst.transposes_merged + rst.transposes_removed;
  p->st.dead = rst.dead_nodes;
  if (!(v->in_map = kiln_calloc((size_t)g->n_inputs + 1, sizeof *v->in_map))) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    goto fail;
  }
  for (int i = 0; i < g->n_inputs; i++) {
    v->in_map[i] = -1;
    for (int j = 0; j < p->orig->n_inputs; j++)
      if (!strcmp(p->orig->values[p->orig->inputs[j]].name, g->values[g->inputs[i]].name)) v->in_map[i] = j;
  }
  /* every value must have a concrete shape; else the graph runs on the host */
  for (int i = 0; i < g->n_nodes && !v->host_only; i++) {
    const kiln_node *n = &g->nodes[i];
    kiln_cl_ttype t;
    for (int k = 0; k < n->n_in && !v->host_only; k++) v->host_only = n->in[k] >= 0 && !concrete(v, n->in[k], &t);
    for (int k = 0; k < n->n_out && !v->host_only; k++)
      v->host_only = n->out[k] >= 0 && !concrete(v, n->out[k], &t);
  }
  for (int o = 0; o < g->n_outputs && !v->host_only; o++) {
    kiln_cl_ttype t;
    v->host_only = !concrete(v, g->outputs[o], &t);
  }
  if (v->host_only) {
    p->st.host_graphs++;
    kiln_log(KILN_LOG_INFO, "opencl plan: graph '%s' has data-dependent shapes: it runs on the host",
             g->name ? g->name : "");
    kiln_free(facts);
    *out = v;
    return KILN_OK;
  }
  if (p->dump_stem[0]) {
    snprintf(c.dext, sizeof c.dext, "opencl-%d.txt", p->st.variants);
    kiln_dump_open(p->dump_stem, c.dext, &c.df);
  }
  p->st.fused_groups = p->st.fused_nodes = p->st.device_ops = p->st.host_nodes = p->st.copies = 0;
  if ((s = kiln_schedule_new(g->n_values, &c.ms))) goto fail;
  if (!(c.mmv = kiln_calloc((size_t)g->n_values + 1, sizeof *c.mmv))) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    goto fail;
  }
  for (int w = 0; w < g->n_values; w++) c.mmv[w].storage = -1;
  clock_gettime(CLOCK_MONOTONIC, &tc[1]);
  /* the memo of the weights' finiteness: the rewrite's facts (from the
     record: no weight read), else empty (NULL: each query reads its weights) */
  signed char *finite = facts ? facts : kiln_calloc((size_t)g->n_values + 1, 1);
  facts = NULL;
  kiln_cl_mm_views_set(g, c.mmv);
  kiln_cl_finite_set(g, finite);
  s = lower(&c);
  kiln_cl_finite_set(NULL, NULL);
  kiln_cl_mm_views_set(NULL, NULL);
  kiln_free(finite);
  if (s) goto fail;
  clock_gettime(CLOCK_MONOTONIC, &tc[2]);
  if (g->n_outputs && (s = kiln_schedule_add_step(c.ms, g->outputs, g->n_outputs, NULL, 0, -1))) goto fail;
  p->st.kernels = v->n_kern;
  on_device = true;
  dump_source(&c, p->st.variants);
  if ((s = build(&c))) goto fail; /* the memory (place_values) while the programs load */
  on_device = false;
  clock_gettime(CLOCK_MONOTONIC, &tc[3]);
  for (int k = 0; k < v->n_steps; k++) { /* KILN_PROFILE names */
    kiln_cl_step *st = &v->steps[k];
    const kiln_node *n = &g->nodes[st->node];
    char name[96];
    if (!p->profile) break;
    bool cols = st->kind == KILN_CL_STEP_GEN && v->sig[st->kern].scratch && !c.ms->steps[k].n_writes;
    if (cols) /* it writes only the scratch: an im2col conv's columns */
      snprintf(name, sizeof name, "gen %s columns (%d node%s)", n->op_type, st->nodes, st->nodes == 1 ? "" : "s");
    else if (st->kind == KILN_CL_STEP_GEN)
      snprintf(name, sizeof name, "gen %s%s (%d node%s)", n->op_type, st->nodes > 1 ? "+..." : "", st->nodes,
               st->nodes == 1 ? "" : "s");
    else if (st->kind == KILN_CL_STEP_OP) snprintf(name, sizeof name, "op %.80s", kiln_cl_op_describe(st->op));
    else if (st->kind == KILN_CL_STEP_COPY) snprintf(name, sizeof name, "copy %s", n->op_type);
    else snprintf(name, sizeof name, "host %s", n->op_type);
    st->prof = kiln_cl_profile_entry(p, name);
  }
  kiln_log(KILN_LOG_INFO,
           "opencl plan '%s' on %s: %d -> %d nodes, %d kernels (%d fused groups), %d device ops, %d copies, %d on "
           "the host, arena %llu bytes, scratch %llu bytes, %d weights read in place",
           g->name ? g->name : "", p->dev->id, d->n_nodes, g->n_nodes, v->n_kern, p->st.fused_groups,
           p->st.device_ops, p->st.copies, p->st.host_nodes, (unsigned long long)v->arena_bytes,
           (unsigned long long)v->scratch_bytes, v->host_weights);
  double ms[3];
  for (int k = 0; k < 3; k++)
    ms[k] = (double)(tc[k + 1].tv_sec - tc[k].tv_sec) * 1e3 + (double)(tc[k + 1].tv_nsec - tc[k].tv_nsec) / 1e6;
  /* "memory X ms, program Y ms (N programs, kiln cache)": bench/cl_cache.py's
     mem and the cache hit; the memory is placed while the programs load,
     so the two overlap (Y counts both: from the memory's start to the
     kernels' arguments) */
  kiln_log(KILN_LOG_INFO,
           "opencl plan '%s': rewrite+shapes %.1f ms, fusion+codegen+ops %.1f ms, memory %.1f ms, program %.1f ms (%d "
           "program%s, %s; the memory placed while they load)",
           g->name ? g->name : "", ms[0], ms[1], c.mem_ms, ms[2], v->n_prog, v->n_prog == 1 ? "" : "s",
           v->from_process ? "built earlier in this process" : v->from_cache ? "kiln cache" : "source");
  if (c.df) kiln_dump_close(c.df, p->dump_stem, c.dext);
  kiln_cl_src_free(&c.src);
  kiln_free(c.kern_at);
  free_canon(&c);
  kiln_free(c.mmv);
  v->sched = c.ms; /* kept: a run binding the host's buffers checks its accesses */
  kiln_fuse_plan_free(c.fp1);
  kiln_schedule_free(c.fs1);
  kiln_fuse_ctx_free(c.fc1);
  *out = v;
  return KILN_OK;
fail:
  kiln_free(facts);
  if (c.df) kiln_dump_close(c.df, p->dump_stem, c.dext);
  kiln_cl_src_free(&c.src);
  kiln_free(c.kern_at);
  free_canon(&c);
  kiln_free(c.mmv);
  kiln_schedule_free(c.ms);
  kiln_fuse_plan_free(c.fp1);
  kiln_schedule_free(c.fs1);
  kiln_fuse_ctx_free(c.fc1);
  kiln_cl_variant_free(p, v);
  if (on_device && s != KILN_E_NOMEM && host_fallback_allowed()) {
    /* the device could not take the graph (memory, a build, a kernel):
       under KILN_DEVICE=auto it runs on the host, as data-dependent graphs do */
    kiln_log(KILN_LOG_WARN, "opencl: graph '%s' cannot be compiled for %s (%s); it runs on the host (KILN_DEVICE=auto)",
             d->name ? d->name : "", p->dev->id, kiln_last_error());
    if (!(v = kiln_calloc(1, sizeof *v))) return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
    v->host_only = true;
    p->st.host_graphs++;
    kiln_error_clear();
    *out = v;
    return KILN_OK;
  }
  return s;
}

void kiln_cl_variant_free(kiln_cl_plan *p, kiln_cl_variant *v) {
  (void)p;
  if (!v) return;
  /* finished before the buffers go, and before the host bytes under them do
     (the weights read in place, and every block of kiln's under a buffer:
     the arena's, an input's, a weight copied into one — HOST_COPY) */
  bool host_blocks = v->arena_host != NULL;
  for (int w = 0; v->place && v->g && w < v->g->n_values && !host_blocks; w++) host_blocks = v->place[w].host != NULL;
  if (p && p->slot && p->slot->ctx && (v->n_kern || v->arena || v->host_weights || host_blocks))
    clFinish(p->slot->ctx->queue);
  for (int k = 0; k < v->n_steps; k++) kiln_cl_op_free(v->steps[k].op);
  kiln_free(v->steps);
  for (int k = 0; v->kern && k < v->n_kern; k++) kiln_cl_kernel_free(&v->kern[k]);
  kiln_free(v->kern);
  kiln_free(v->sig);
  kiln_free(v->sym_val);
  kiln_free(v->sym_st);
  for (int i = 0; i < v->n_prog; i++) kiln_cl_program_free(v->progs[i].prog);
  kiln_free(v->progs);
  /* The views' references first, then every buffer in the reverse of the
     order place_values made them (value order): the arena's sub-buffers go
     last made, first destroyed. NVIDIA's driver (580, H100) crashed inside
     clReleaseMemObject when a variant's sub-buffers were released in the
     order they were made (the views, fusion and node-test suites, resnet18
     and mobilenetv2, at every graph release), and ran every suite clean
     with them released in reverse (opencl/ENGINE.md). tests/lifetime_cycles
     checks the order on every driver. */
  int nv = v->place && v->g ? v->g->n_values : 0;
  for (int w = 0; w < nv; w++)
    if (v->place[w].shared && v->place[w].mem) clReleaseMemObject(v->place[w].mem);
  for (int w = nv - 1; w >= 0; w--) {
    if (v->place[w].mem && !v->place[w].shared) clReleaseMemObject(v->place[w].mem);
    kiln_free(v->place[w].host); /* after its buffer, the queue finished */
  }
  kiln_free(v->place);
  if (v->arena) clReleaseMemObject(v->arena);
  kiln_free(v->arena_host); /* after the arena and its sub-buffers, the queue finished */
  if (v->scratch) clReleaseMemObject(v->scratch);
  kiln_free(v->in_map);
  kiln_schedule_free(v->sched);
  kiln_free(v->key);
  kiln_cl_obs_variant_free(v);
  kiln_shapes_free(v->sh);
  kiln_graph_free(v->g);
  kiln_graph_free(v->d); /* after g, which may borrow its weights */
  kiln_cl_cache_view_release(&v->rec); /* after g, which may read its constants in place */
  kiln_free(v);
}
