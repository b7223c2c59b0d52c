/* cpu_fallback/tile: compiling a kernel spec into a tile program, binding
 * it to memory (accessor maps composed with the tensors' own views, tile
 * buffers assigned by liveness) and running it tile by tile. */
#include "cpu_fallback/tile.h"

#include <stdatomic.h>

#include "cpu_fallback/pool.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"

/* How an accessor's tile is read. */
enum {
  R_DIRECT = 0, /* float32, one run of stride 1: a pointer into memory, no copy */
  R_UNIFORM,    /* every element reads the same storage element: filled once per call */
  R_STRIDED,    /* one strided view (compacted): runs along its last dim */
  R_GENERIC     /* a view stack or a masked view (Pad): element by element */
};

/* What an expression is to the executor. */
enum { E_LOAD = 0, E_CONST, E_ANCHOR, E_OP };

typedef struct tacc {
  int kind;          /* R_* */
  kiln_dtype dtype;  /* F32 or BOOL */
  const char *base;  /* the storage */
  kiln_views map;    /* domain flat index -> storage element */
  kiln_view v;       /* R_DIRECT / R_UNIFORM / R_STRIDED: the compacted single view */
  float pad;         /* masked elements read this */
  bool row;          /* R_STRIDED, float32: one run of stride 1 broadcast along every other dim (a bias row) */
  kiln_tensor copy;  /* a dense copy when the composition did not fit a stack */
  bool plain;        /* bound to a dense tensor (no view of its own): map is the accessor's, base the tensor's data */
} tacc;

typedef struct texpr {
  int kind;       /* E_* */
  kiln_tile_op op;
  int args[3];
  int n_args;
  int acc;        /* E_LOAD */
  float cst;      /* E_CONST */
  /* set by bind */
  bool uniform;   /* the same value at every element: computed once per call */
  int buf;        /* tile buffer, -1 when none (a pointer into memory) */
  bool folded;    /* inside a Gelu chain: not evaluated when the chain runs as one op */
  int gelu[4];    /* the end of a Gelu chain: x, s, c1, c2 (KILN_TILE_OP_GELU); gelu[0] -1 otherwise */
  int gelu_k;     /* its variant bits */
  bool in_seq;    /* inside a linear run, not its end: not evaluated when the run is one pass */
  int seq;        /* the end of a linear run: its index in kiln_tile_prog.seq; -1 otherwise */
  int cols[4];    /* the first load of a column group: the group's four loads by column; cols[0] -1 otherwise */
  bool in_cols;   /* a load of a column group, not its first: loaded by the first */
} texpr;

/* A linear run of ops evaluated in one pass (kiln_tile_seq): step k is
 * expression step[k], whose argument pos[k] is step k - 1 (step 0: its
 * argument pos[0] is the run's input). */
typedef struct tseq {
  int n;
  int step[KILN_TILE_SEQ_MAX];
  int pos[KILN_TILE_SEQ_MAX];
} tseq;

struct kiln_tile_prog {
  const kiln_fuse_spec *sp;
  int n_expr, n_acc, n_store;
  texpr *e;
  tacc *acc;
  int *store_expr;      /* per store: its expression */
  kiln_dtype *store_dt; /* per store: the value's dtype (F32 or BOOL) */
  int64_t *store_stride; /* per store: elements between consecutive elements in memory (1: dense) */
  int n_buf;            /* tile buffers of the binding */
  bool bound;
  bool stream;          /* large outputs: non-temporal stores */
  bool stream_out;      /* kiln_tile_set_stream: non-temporal whatever the size */
  int n_gelu;           /* Gelu chains found by the binding */
  tseq *seq;            /* linear runs found by the binding (n_expr / 2 at most) */
  int n_seq;
  int n_cols;           /* column groups found by the binding */
  int64_t numel;
  /* what the last bind's analysis (uniform expressions, Gelu chains, runs,
     tile buffers) was made for: the spec's binding, the switches; valid
     while the accessors' kinds stay the same (kiln_tile_bind) */
  bool an_valid;
  uint64_t an_gen;
  bool an_gelu, an_seq, an_cols;
};

static bool gelu_on = true, seq_on = true, cols_on = true;

void kiln_tile_gelu_enable(bool on) { gelu_on = on; }
void kiln_tile_seq_enable(bool on) { seq_on = on; }
void kiln_tile_cols_enable(bool on) { cols_on = on; }
int kiln_tile_col_groups(const kiln_tile_prog *tp) { return tp->bound ? tp->n_cols : 0; }
int kiln_tile_seq_runs(const kiln_tile_prog *tp) { return tp->bound ? tp->n_seq : 0; }

int kiln_tile_gelu_chains(const kiln_tile_prog *tp) { return tp->bound ? tp->n_gelu : 0; }

static bool tile_dtype(kiln_dtype t) { return t == KILN_F32 || t == KILN_BOOL; }
/* Types an expression may compute in: float32 (the spec's own F64 intermediates are kept in float32 too;
 * a group with float64 values of the graph is declined) and bool. */
static bool expr_dtype(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64 || t == KILN_BOOL; }

static kiln_status decline(char *why, size_t size, const char *fmt, const char *a) {
  if (why && size) snprintf(why, size, fmt, a);
  return KILN_E_UNSUPPORTED_OP;
}

void kiln_tile_unbind(kiln_tile_prog *tp) {
  if (!tp) return;
  for (int a = 0; tp->acc && a < tp->n_acc; a++) {
    kiln_tensor_release(&tp->acc[a].copy);
    tp->acc[a].plain = false;
  }
  tp->bound = false;
}

void kiln_tile_free(kiln_tile_prog *tp) {
  if (!tp) return;
  kiln_tile_unbind(tp);
  kiln_free(tp->e);
  kiln_free(tp->acc);
  kiln_free(tp->store_expr);
  kiln_free(tp->store_dt);
  kiln_free(tp->store_stride);
  kiln_free(tp->seq);
  kiln_free(tp);
}

kiln_status kiln_tile_compile(const kiln_fuse_spec *sp, kiln_tile_prog **out, char *why, size_t size) {
  *out = NULL;
  if (sp->kind != KILN_FUSE_G_ELEMWISE && sp->kind != KILN_FUSE_G_ANCHOR)
    return decline(why, size, "a %s group", kiln_fuse_group_kind_name(sp->kind));
  if (sp->n_red > 0) return decline(why, size, "%s", "reductions");
  if (sp->pool >= 0 && sp->anchor < 0) return decline(why, size, "%s", "a pooling without an anchor");
  if (sp->n_store < 1) return decline(why, size, "%s", "no store");
  /* the tiles keep float64 intermediates in float32: not the model's own doubles */
  if (kiln_fuse_spec_f64_values(sp)) return decline(why, size, "%s", "float64 values of the graph");
  for (int a = 0; a < sp->n_access; a++) {
    const kiln_fuse_access *x = &sp->access[a];
    if (x->reduced || x->own_shape) return decline(why, size, "%s", "a reduced or alias accessor");
    if (!tile_dtype(sp->sh->v[x->value].dtype))
      return decline(why, size, "reads %s", kiln_dtype_name(sp->sh->v[x->value].dtype));
  }
  int anchors = 0;
  for (int i = 0; i < sp->n_expr; i++) {
    const kiln_fuse_expr *e = &sp->expr[i];
    if (e->reduced) return decline(why, size, "%s", "a reduced expression");
    if (!expr_dtype(e->dtype)) return decline(why, size, "computes in %s", kiln_dtype_name(e->dtype));
    for (int k = 0; k < e->n_args; k++)
      if (!expr_dtype(sp->expr[e->args[k]].dtype)) return decline(why, size, "%s", "an integer argument");
    if (e->op == KILN_FUSE_ANCHOR) anchors++;
    else if (e->op == KILN_FUSE_REDUCE) return decline(why, size, "%s", "a reduction");
    else if (e->op != KILN_FUSE_LOAD && e->op != KILN_FUSE_CONST && !kiln_tile_op_known(e->op))
      return decline(why, size, "op %s", kiln_fuse_op_name(e->op));
    /* casts: between float types and to bool only */
    if (e->op == KILN_FUSE_CAST && e->dtype != KILN_BOOL && !kiln_dtype_is_float(e->dtype))
      return decline(why, size, "a cast to %s", kiln_dtype_name(e->dtype));
  }
  if ((sp->kind == KILN_FUSE_G_ANCHOR) != (anchors == 1)) return decline(why, size, "%s", "an anchor count");
  for (int k = 0; k < sp->n_store; k++) {
    const kiln_fuse_store *st = &sp->store[k];
    if (st->reduced) return decline(why, size, "%s", "a reduced store");
    if (st->pool && sp->expr[st->expr].dtype != KILN_F32) return decline(why, size, "%s", "a pooling of non-float32");
    if (!st->pool && !tile_dtype(sp->sh->v[st->value].dtype))
      return decline(why, size, "stores %s", kiln_dtype_name(sp->sh->v[st->value].dtype));
  }
  kiln_tile_prog *tp = kiln_calloc(1, sizeof *tp);
  if (!tp) return kiln_fail(KILN_E_NOMEM, "out of memory compiling a tile program");
  tp->sp = sp;
  tp->n_expr = sp->n_expr;
  tp->n_acc = sp->n_access;
  tp->n_store = sp->n_store;
  tp->e = kiln_calloc((size_t)sp->n_expr + 1, sizeof *tp->e);
  tp->acc = kiln_calloc((size_t)sp->n_access + 1, sizeof *tp->acc);
  tp->store_expr = kiln_calloc((size_t)sp->n_store + 1, sizeof *tp->store_expr);
  tp->store_dt = kiln_calloc((size_t)sp->n_store + 1, sizeof *tp->store_dt);
  tp->store_stride = kiln_calloc((size_t)sp->n_store + 1, sizeof *tp->store_stride);
  tp->seq = kiln_calloc((size_t)sp->n_expr / 2 + 1, sizeof *tp->seq);
  if (!tp->e || !tp->acc || !tp->store_expr || !tp->store_dt || !tp->store_stride || !tp->seq) {
    kiln_tile_free(tp);
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling a tile program");
  }
  for (int i = 0; i < sp->n_expr; i++) {
    const kiln_fuse_expr *e = &sp->expr[i];
    texpr *t = &tp->e[i];
    t->kind = e->op == KILN_FUSE_LOAD ? E_LOAD : e->op == KILN_FUSE_CONST ? E_CONST
              : e->op == KILN_FUSE_ANCHOR ? E_ANCHOR : E_OP;
    t->n_args = e->n_args;
    for (int k = 0; k < 3; k++) t->args[k] = k < e->n_args ? e->args[k] : -1;
    t->acc = e->op == KILN_FUSE_LOAD ? e->ref : -1;
    t->cst = kiln_dtype_is_float(e->dtype) ? (float)e->f[0] : (float)(e->i != 0);
    t->op.op = (int)e->op;
    for (int k = 0; k < 3; k++) t->op.p[k] = (float)e->f[k];
    t->op.k = e->i;
    if (e->op == KILN_FUSE_CAST) t->op.k = e->dtype == KILN_BOOL && sp->expr[e->args[0]].dtype != KILN_BOOL;
    t->buf = -1;
  }
  for (int a = 0; a < sp->n_access; a++) tp->acc[a].dtype = sp->sh->v[sp->access[a].value].dtype;
  for (int k = 0; k < sp->n_store; k++) {
    tp->store_expr[k] = sp->store[k].expr;
    /* a pool store writes the pooled argument (float32) over the domain */
    tp->store_dt[k] = sp->store[k].pool ? KILN_F32 : sp->sh->v[sp->store[k].value].dtype;
    tp->store_stride[k] = 1;
  }
  *out = tp;
  return KILN_OK;
}

void kiln_tile_set_store_stride(kiln_tile_prog *tp, int store, int64_t stride) {
  if (store >= 0 && store < tp->n_store && tp->store_dt[store] == KILN_F32 && stride >= 1)
    tp->store_stride[store] = stride;
}

void kiln_tile_set_stream(kiln_tile_prog *tp, bool on) { tp->stream_out = on; }

int kiln_tile_anchor_target(const kiln_tile_prog *tp) {
  int first = -1;
  for (int k = 0; k < tp->n_store; k++) {
    if (tp->store_dt[k] != KILN_F32) continue;
    if (tp->e[tp->store_expr[k]].kind == E_ANCHOR && !tp->sp->store[k].pool) return k;
    if (first < 0) first = k;
  }
  return first;
}

bool kiln_tile_inplace_ok(const kiln_tile_prog *tp, int store, int value) {
  const kiln_fuse_spec *sp = tp->sp;
  if (store < 0 || store >= tp->n_store || sp->kind != KILN_FUSE_G_ELEMWISE) return false;
  if (tp->store_dt[store] != sp->sh->v[value].dtype) return false;
  bool read = false;
  for (int a = 0; a < sp->n_access; a++) {
    const kiln_fuse_access *x = &sp->access[a];
    if (x->value != value) continue;
    read = true;
    for (int i = 0; i < x->n_xf; i++)
      if (x->xf[i].kind != KILN_FUSE_XF_RESHAPE) return false; /* a view or a broadcast: other elements */
  }
  return read;
}

/* ---- binding ---- */

/* The view stack through which tensor t reads its storage. */
static kiln_status stack_of(const kiln_tensor *t, kiln_views *st) {
  if (t->stack) {
    *st = *t->stack;
    return KILN_OK;
  }
  kiln_view v;
  kiln_status s = t->strided ? kiln_view_make(t->rank, t->dims, t->strides, t->offset, NULL, NULL, &v)
                             : kiln_view_contiguous(t->rank, t->dims, &v);
  if (!s) kiln_views_init(st, &v);
  return s;
}

/* *out = reading `upper` (whose bottom indexes a row-major tensor of the
 * shape of lower's top) through `lower`; false when it needs more than
 * KILN_VIEWS_MAX_DEPTH views. */
static bool compose(const kiln_views *lower, const kiln_views *upper, kiln_views *out) {
  *out = *lower;
  for (int k = 0; k < upper->depth; k++) {
    kiln_view m;
    if (kiln_view_merge(&out->v[out->depth - 1], &upper->v[k], &m)) {
      out->v[out->depth - 1] = m;
    } else {
      if (out->depth == KILN_VIEWS_MAX_DEPTH) return false;
      out->v[out->depth++] = upper->v[k];
    }
    while (out->depth > 1 && kiln_view_merge(&out->v[out->depth - 2], &out->v[out->depth - 1], &m)) {
      out->v[out->depth - 2] = m;
      out->depth--;
    }
  }
  return true;
}

static kiln_status bind_access(kiln_tile_prog *tp, int a, const kiln_tensor *t, long *materialized) {
  const kiln_fuse_access *x = &tp->sp->access[a];
  tacc *r = &tp->acc[a];
  kiln_tensor_release(&r->copy);
  if (t->dtype != r->dtype || t->numel != x->numel || !t->data)
    return kiln_fail(KILN_E_INTERNAL, "tile: '%s' is not bound as %s of %lld elements",
                     tp->sp->g->values[x->value].name, kiln_dtype_name(r->dtype), (long long)x->numel);
  kiln_views lower;
  kiln_status s = stack_of(t, &lower);
  if (s) return s;
  r->base = t->data;
  r->pad = (float)x->pad;
  r->plain = false;
  if (kiln_views_contiguous(&lower)) {
    r->map = x->map;
    r->plain = !t->strided && !t->stack;
  } else if (!compose(&lower, &x->map, &r->map)) { /* too deep: read a dense copy */
    if ((s = kiln_tensor_copy(&r->copy, t))) return s;
    if (materialized) (*materialized)++;
    r->base = r->copy.data;
    r->map = x->map;
  }
  const kiln_view *top = kiln_views_top(&r->map);
  r->kind = R_GENERIC;
  if (kiln_views_single(&r->map) && !top->has_mask) {
    kiln_view_compact(top, &r->v);
    bool uniform = true;
    for (int d = 0; d < r->v.rank; d++) uniform = uniform && (r->v.strides[d] == 0 || r->v.shape[d] == 1);
    if (uniform) r->kind = R_UNIFORM;
    else if (r->v.rank == 1 && r->v.strides[0] == 1 && r->dtype == KILN_F32) r->kind = R_DIRECT;
    else r->kind = R_STRIDED;
    r->row = r->kind == R_STRIDED && r->dtype == KILN_F32 && r->v.strides[r->v.rank - 1] == 1;
    for (int d = 0; d + 1 < r->v.rank && r->row; d++) r->row = r->v.strides[d] == 0;
  } else if (top->all_masked) {
    r->kind = R_UNIFORM; /* every element is the pad */
    r->v.rank = 0;
  }
  return KILN_OK;
}

/* ---- Gelu chains ---- */

/* Expression i is an op fop over non-uniform expressions read by one reader. */
static bool chain_op(const kiln_tile_prog *tp, const int *nread, int i, kiln_fuse_op fop) {
  const texpr *t = &tp->e[i];
  return t->kind == E_OP && t->op.op == (int)fop && !t->uniform && nread[i] == 1;
}

/* The uniform one of a two-argument expression's arguments (its index in
 * *u), the other in *o; false when not exactly one is uniform. */
static bool one_uniform(const kiln_tile_prog *tp, int i, int *u, int *o) {
  const texpr *t = &tp->e[i];
  if (t->n_args != 2) return false;
  bool u0 = tp->e[t->args[0]].uniform, u1 = tp->e[t->args[1]].uniform;
  if (u0 == u1) return false;
  *u = u0 ? t->args[0] : t->args[1];
  *o = u0 ? t->args[1] : t->args[0];
  return true;
}

/* Expression a is erf(x / s) + c1 or erf(x · s) + c1 (s, c1 uniform; the
 * Add, Erf and Div / Mul read once): its x, s, c1 and whether s multiplies. */
static bool erf_part(const kiln_tile_prog *tp, const int *nread, int a, int *x, int *sv, int *c1, bool *mul) {
  int e, d;
  if (!chain_op(tp, nread, a, KILN_FUSE_ADD) || !one_uniform(tp, a, c1, &e)) return false;
  if (!chain_op(tp, nread, e, KILN_FUSE_ERF) || tp->e[e].n_args != 1) return false;
  d = tp->e[e].args[0];
  const texpr *td = &tp->e[d];
  if (chain_op(tp, nread, d, KILN_FUSE_DIV) && td->n_args == 2 && tp->e[td->args[1]].uniform &&
      !tp->e[td->args[0]].uniform) {
    *x = td->args[0], *sv = td->args[1], *mul = false;
    return true;
  }
  if (chain_op(tp, nread, d, KILN_FUSE_MUL) && one_uniform(tp, d, sv, x)) {
    *mul = true;
    return true;
  }
  return false;
}

static void fold_chain(kiln_tile_prog *tp, int a) { /* the Add, its Erf and the Div / Mul under it */
  int e = tp->e[a].args[tp->e[tp->e[a].args[0]].uniform ? 1 : 0];
  tp->e[a].folded = tp->e[e].folded = tp->e[tp->e[e].args[0]].folded = true;
}

/* Marks every Gelu chain g = (x·u)·c2 or (x·c2)·u, u = erf(x/s) + c1 (in
 * any argument order, the inner Mul read once): g runs as one
 * KILN_TILE_OP_GELU of x, the chain's other ops are folded into it. */
static void find_gelu(kiln_tile_prog *tp, const int *nread) {
  tp->n_gelu = 0;
  for (int g = 0; g < tp->n_expr; g++) {
    texpr *t = &tp->e[g];
    t->folded = false;
    t->gelu[0] = -1;
  }
  if (!gelu_on) return;
  for (int g = 0; g < tp->n_expr; g++) {
    texpr *t = &tp->e[g];
    if (t->kind != E_OP || t->op.op != KILN_FUSE_MUL || t->uniform || t->n_args != 2) continue;
    int x = -1, sv = -1, c1 = -1, c2 = -1, m = -1, k = 0, u = -1, o = -1;
    bool mul = false;
    if (one_uniform(tp, g, &c2, &m)) { /* (x·u)·c2 */
      if (!chain_op(tp, nread, m, KILN_FUSE_MUL) || tp->e[m].n_args != 2) continue;
      for (int j = 0; j < 2 && x < 0; j++) {
        int xa = tp->e[m].args[j], ua = tp->e[m].args[1 - j], xe;
        if (erf_part(tp, nread, ua, &xe, &sv, &c1, &mul) && xe == xa) x = xa, u = ua;
      }
    } else { /* (x·c2)·u */
      k = 2;
      for (int j = 0; j < 2 && x < 0; j++) {
        int ma = t->args[j], ua = t->args[1 - j], xe;
        if (!chain_op(tp, nread, ma, KILN_FUSE_MUL) || !one_uniform(tp, ma, &c2, &o)) continue;
        if (erf_part(tp, nread, ua, &xe, &sv, &c1, &mul) && xe == o) x = o, u = ua, m = ma;
      }
    }
    if (x < 0) continue;
    fold_chain(tp, u);
    tp->e[m].folded = true;
    t->gelu[0] = x, t->gelu[1] = sv, t->gelu[2] = c1, t->gelu[3] = c2;
    t->gelu_k = k | (mul ? 1 : 0);
    tp->n_gelu++;
  }
}

/* ---- linear runs ---- */

/* Expression i may be a step of a run: a non-uniform op kiln_tile_seq_op
 * takes, with its usual argument count, not inside a Gelu chain. */
static bool seq_member(const kiln_tile_prog *tp, int i) {
  const texpr *t = &tp->e[i];
  if (t->kind != E_OP || t->uniform || t->folded || t->gelu[0] >= 0 || !kiln_tile_seq_op(t->op.op)) return false;
  int op = t->op.op;
  int want = op == KILN_FUSE_CLIP ? 3
             : op == KILN_FUSE_RELU || op == KILN_FUSE_SIGMOID || op == KILN_FUSE_TANH || op == KILN_FUSE_EXP ||
                       op == KILN_FUSE_ERF
                 ? 1
                 : 2;
  return t->n_args == want;
}

/* sigmoid, tanh, exp, erf: long dependency chains per vector. */
static bool seq_heavy(int op) {
  return op == KILN_FUSE_SIGMOID || op == KILN_FUSE_TANH || op == KILN_FUSE_EXP || op == KILN_FUSE_ERF;
}

/* Finds the linear runs: a step whose value so far is its predecessor's
 * result, read by it alone and not stored (nread[] counts readers, a store
 * as two), joins the predecessor's run — unless both it and an earlier step
 * of the run are sigmoid / tanh / exp / erf: two of those in one strip make
 * a dependency chain too long for the core to overlap the strips (the
 * chain's one-pass strips measured 0.41 ns/element against 0.33 split
 * after each, TILE.md); a run of one op is left alone. */
static void find_seq(kiln_tile_prog *tp, const int *nread) {
  tp->n_seq = 0;
  for (int i = 0; i < tp->n_expr; i++) tp->e[i].in_seq = false, tp->e[i].seq = -1;
  if (!seq_on) return;
  for (int i = 0; i < tp->n_expr; i++) {
    if (!seq_member(tp, i)) continue;
    const texpr *t = &tp->e[i];
    int np = t->op.op == KILN_FUSE_CLIP ? 1 : t->n_args; /* clip's value is argument 0 */
    for (int p = 0; p < np; p++) {
      int j = t->args[p];
      if (!seq_member(tp, j) || nread[j] != 1 || tp->e[j].in_seq) continue;
      tseq *q;
      if (tp->e[j].seq >= 0) { /* j ends a run: i extends it */
        q = &tp->seq[tp->e[j].seq];
        bool heavy = false;
        for (int k = 0; k < q->n; k++) heavy = heavy || seq_heavy(tp->e[q->step[k]].op.op);
        if (q->n == KILN_TILE_SEQ_MAX || (heavy && seq_heavy(t->op.op))) continue;
      } else {
        if (seq_heavy(tp->e[j].op.op) && seq_heavy(t->op.op)) continue; /* j starts one: its value so far is its first non-uniform argument */
        q = &tp->seq[tp->n_seq];
        q->n = 1, q->step[0] = j, q->pos[0] = 0;
        if (tp->e[j].n_args == 2 && tp->e[tp->e[j].args[0]].uniform) q->pos[0] = 1;
        tp->e[j].seq = tp->n_seq++;
      }
      q->step[q->n] = i, q->pos[q->n] = p, q->n++;
      tp->e[i].seq = tp->e[j].seq;
      tp->e[j].seq = -1, tp->e[j].in_seq = true;
      break;
    }
  }
}

/* Expression i's reads at its turn: its arguments, and at a run's end
 * every argument of the run's steps that is not a step. n at most
 * 3 * KILN_TILE_SEQ_MAX. */
static int reads_of(const kiln_tile_prog *tp, int i, int *r) {
  const texpr *t = &tp->e[i];
  int n = 0;
  if (t->seq < 0) {
    for (int k = 0; k < t->n_args; k++) r[n++] = t->args[k];
    return n;
  }
  const tseq *q = &tp->seq[t->seq];
  for (int s = 0; s < q->n; s++) {
    const texpr *u = &tp->e[q->step[s]];
    for (int k = 0; k < u->n_args; k++)
      if (s == 0 || k != q->pos[s]) r[n++] = u->args[k];
  }
  return n;
}

/* ---- column groups ---- */

/* Load i reads a column of an [n, 4] layout: a float32 strided view whose
 * last dim has stride 4, read by someone (last[i] >= 0). */
static bool col_load(const kiln_tile_prog *tp, const int *last, int i) {
  const texpr *t = &tp->e[i];
  if (t->kind != E_LOAD || t->uniform || last[i] < 0) return false;
  const tacc *r = &tp->acc[t->acc];
  return r->kind == R_STRIDED && r->dtype == KILN_F32 && r->v.strides[r->v.rank - 1] == 4;
}

/* Loads i and j read the same layout, j's column c to the right of i's. */
static bool col_of(const kiln_tile_prog *tp, int i, int j, int c) {
  const tacc *a = &tp->acc[tp->e[i].acc], *b = &tp->acc[tp->e[j].acc];
  if (a->base != b->base || a->v.rank != b->v.rank || b->v.offset != a->v.offset + c) return false;
  for (int d = 0; d < a->v.rank; d++)
    if (a->v.shape[d] != b->v.shape[d] || a->v.strides[d] != b->v.strides[d]) return false;
  return true;
}

/* Finds the column groups: four loads of the columns 0..3 of one [n, 4]
 * layout (the same storage and strided view but for offsets o .. o + 3,
 * the last dim's stride 4 — detection_post's box columns, step-4 Slices of
 * a flat view), each read by someone. The group's first load in program
 * order loads all four at once (kiln_tile_load_cols4_*: each row's 16
 * bytes read once, not once per column); the others are then in_cols.
 * last[] holds each expression's last reader (-1: none). */
static void find_cols(kiln_tile_prog *tp, const int *last) {
  tp->n_cols = 0;
  for (int i = 0; i < tp->n_expr; i++) tp->e[i].cols[0] = -1, tp->e[i].in_cols = false;
  if (!cols_on) return;
  for (int i = 0; i < tp->n_expr; i++) {
    if (!col_load(tp, last, i) || tp->e[i].in_cols || tp->e[i].cols[0] >= 0) continue;
    int g[4] = {-1, -1, -1, -1}, first = i;
    /* column 0 of the group: the load whose offset the others are right of */
    int c0 = -1;
    for (int j = 0; j < tp->n_expr && c0 < 0; j++)
      for (int c = 0; c < 4 && c0 < 0; c++)
        if (col_load(tp, last, j) && col_of(tp, j, i, c)) c0 = j;
    for (int j = 0; j < tp->n_expr; j++)
      for (int c = 0; c < 4; c++)
        if (g[c] < 0 && col_load(tp, last, j) && !tp->e[j].in_cols && tp->e[j].cols[0] < 0 && col_of(tp, c0, j, c))
          g[c] = j;
    if (g[0] < 0 || g[1] < 0 || g[2] < 0 || g[3] < 0) continue;
    for (int c = 0; c < 4; c++) first = g[c] < first ? g[c] : first;
    for (int c = 0; c < 4; c++) {
      tp->e[first].cols[c] = g[c];
      if (g[c] != first) tp->e[g[c]].in_cols = true;
    }
    tp->n_cols++;
  }
}

/* Binding again at the same spec binding (a plan's next run): an accessor
 * bound to a dense tensor before and now only takes the new data (its map
 * and kind are the spec's, as they were); the analysis below depends on
 * nothing but the accessors' kinds, the spec's binding and the switches,
 * so it is kept when none of them changed. */
kiln_status kiln_tile_bind(kiln_tile_prog *tp, const kiln_tensor *vals, long *materialized) {
  const kiln_fuse_spec *sp = tp->sp;
  bool same = tp->an_valid && tp->an_gen == sp->bind_gen && tp->an_gelu == gelu_on && tp->an_seq == seq_on &&
              tp->an_cols == cols_on;
  for (int a = 0; a < tp->n_acc; a++) /* kiln_tile_unbind, keeping what a plain accessor had */
    if (tp->acc[a].copy.data) {
      kiln_tensor_release(&tp->acc[a].copy);
      tp->acc[a].plain = false;
    }
  tp->bound = false;
  if (!sp->bound) return kiln_fail(KILN_E_INTERNAL, "tile: the spec is not bound");
  tp->numel = sp->numel;
  for (int a = 0; a < tp->n_acc; a++) {
    const kiln_fuse_access *x = &sp->access[a];
    const kiln_tensor *t = &vals[x->value];
    tacc *r = &tp->acc[a];
    if (same && r->plain && !t->strided && !t->stack && t->data && t->dtype == r->dtype && t->numel == x->numel) {
      r->base = t->data;
      continue;
    }
    int kind = r->kind;
    kiln_status s = bind_access(tp, a, t, materialized);
    if (s) {
      tp->an_valid = false;
      return s;
    }
    same = same && r->kind == kind;
  }
  /* a column group was found on this binding's storage: its four loads
     must still read one layout (two inputs the host gave the same memory
     last run may differ now) */
  for (int i = 0; same && tp->n_cols > 0 && i < tp->n_expr; i++)
    if (tp->e[i].cols[0] >= 0)
      for (int c = 0; c < 4 && same; c++)
        same = tp->e[i].cols[c] == tp->e[i].cols[0] || col_of(tp, tp->e[i].cols[0], tp->e[i].cols[c], c);
  if (same) {
    tp->bound = true;
    return KILN_OK;
  }
  tp->an_valid = false;
  /* uniform expressions: computed once per call into their own buffer */
  int n = tp->n_expr;
  for (int i = 0; i < n; i++) {
    texpr *t = &tp->e[i];
    t->uniform = t->kind == E_CONST || (t->kind == E_LOAD && tp->acc[t->acc].kind == R_UNIFORM);
    if (t->kind == E_OP) {
      t->uniform = true;
      for (int k = 0; k < t->n_args; k++) t->uniform = t->uniform && tp->e[t->args[k]].uniform;
    }
  }
  /* the last reader of each expression (stores read at n) */
  int *last = kiln_malloc(sizeof *last * (size_t)(n + 1));
  int *free_bufs = kiln_malloc(sizeof *free_bufs * (size_t)(n + 1));
  if (!last || !free_bufs) {
    kiln_free(last);
    kiln_free(free_bufs);
    return kiln_fail(KILN_E_NOMEM, "out of memory binding a tile program");
  }
  for (int i = 0; i < n; i++) last[i] = 0;
  for (int i = 0; i < n; i++) /* readers first (free_bufs as scratch) */
    for (int k = 0; k < tp->e[i].n_args; k++) last[tp->e[i].args[k]]++;
  for (int k = 0; k < tp->n_store; k++) last[tp->store_expr[k]] += 2; /* a stored value is never folded */
  find_gelu(tp, last);
  find_seq(tp, last);
  for (int i = 0; i < n; i++) last[i] = -1;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < tp->e[i].n_args; k++) last[tp->e[i].args[k]] = i;
  for (int i = 0; i < n; i++) /* a run's arguments are read at its end too */
    if (tp->e[i].seq >= 0) {
      int r[3 * KILN_TILE_SEQ_MAX], nr = reads_of(tp, i, r);
      for (int k = 0; k < nr; k++)
        if (last[r[k]] < i) last[r[k]] = i;
    }
  for (int i = 0; i < n; i++) /* a chain's x is read by its end too */
    if (tp->e[i].gelu[0] >= 0 && last[tp->e[i].gelu[0]] < i) last[tp->e[i].gelu[0]] = i;
  for (int k = 0; k < tp->n_store; k++) last[tp->store_expr[k]] = n;
  find_cols(tp, last);
  int n_buf = 0, n_free = 0;
  for (int i = 0; i < n; i++) tp->e[i].buf = -1;
  for (int i = 0; i < n; i++) {
    texpr *t = &tp->e[i];
    if (t->in_cols) continue; /* given a buffer by its group's first load */
    if (t->cols[0] >= 0) { /* a column group: all four live from here */
      for (int c = 0; c < 4; c++) tp->e[t->cols[c]].buf = n_free > 0 ? free_bufs[--n_free] : n_buf++;
      continue;
    }
    if (t->uniform) {
      t->buf = n_buf++; /* kept for the whole call */
      continue;
    }
    if (t->kind == E_ANCHOR || (t->kind == E_LOAD && tp->acc[t->acc].kind == R_DIRECT)) continue;
    /* arguments read for the last time here free their buffers first: the
       op may write over its argument (a run reads each at the element it
       writes too) */
    int r[3 * KILN_TILE_SEQ_MAX], nr = reads_of(tp, i, r);
    for (int k = 0; k < nr; k++) {
      int a = r[k];
      bool dup = false;
      for (int j = 0; j < k; j++) dup = dup || r[j] == a;
      if (!dup && last[a] == i && !tp->e[a].uniform && tp->e[a].buf >= 0) free_bufs[n_free++] = tp->e[a].buf;
    }
    if (last[i] < 0) continue; /* nobody reads it */
    t->buf = n_free > 0 ? free_bufs[--n_free] : n_buf++;
  }
  kiln_free(last);
  kiln_free(free_bufs);
  tp->n_buf = n_buf;
  int64_t out_bytes = 0;
  for (int k = 0; k < tp->n_store; k++) out_bytes += sp->numel * (int64_t)kiln_dtype_size(tp->store_dt[k]);
  tp->stream = out_bytes >= ((int64_t)16 << 20); /* beyond the caches anyway */
  tp->bound = true;
  tp->an_valid = true;
  tp->an_gen = sp->bind_gen;
  tp->an_gelu = gelu_on, tp->an_seq = seq_on, tp->an_cols = cols_on;
  return KILN_OK;
}

/* ---- running ---- */

#ifdef KILN_TILE_HAVE_AVX2
/* kiln_vm_cpu_has_avx512(), asked once (cpuid exits the VM on some hosts). */
static bool has_avx512(void) {
  static atomic_int known = -1; /* -1: not asked yet; a race only asks twice */
  int k = atomic_load_explicit(&known, memory_order_relaxed);
  if (k < 0) atomic_store_explicit(&known, k = kiln_vm_cpu_has_avx512() != 0, memory_order_relaxed);
  return k > 0;
}
#endif

void kiln_tile_load_s4_base(float *dst, const float *s, int64_t n) {
  for (int64_t i = 0; i < n; i++) dst[i] = s[4 * i]; /* a constant stride the compiler vectorises */
}

void kiln_tile_load_cols4_base(float *c0, float *c1, float *c2, float *c3, const float *s, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float *r = s + 4 * i;
    c0[i] = r[0], c1[i] = r[1], c2[i] = r[2], c3[i] = r[3];
  }
}

void kiln_tile_rows4_base(float *rows, const float *a, const float *b, const float *c, const float *d, int n) {
  for (int i = 0; i < n; i++) {
    float *r = rows + 4 * i;
    r[0] = a[i], r[1] = b[i], r[2] = c[i], r[3] = d[i];
  }
}

/* The box columns' moves of one run: the AVX-512F ones where usable. */
typedef struct tmoves {
  void (*load_s4)(float *dst, const float *s, int64_t n);
  void (*cols4)(float *c0, float *c1, float *c2, float *c3, const float *s, int64_t n);
  void (*rows4)(float *rows, const float *a, const float *b, const float *c, const float *d, int n);
} tmoves;

static inline void load_run(float *dst, const char *base, kiln_dtype dt, int64_t off, int64_t stride, int64_t n,
                            const tmoves *mv) {
  if (dt == KILN_F32) {
    const float *s = (const float *)base + off;
    if (stride == 1) memcpy(dst, s, sizeof *dst * (size_t)n);
    else if (stride == 0)
      for (int64_t i = 0; i < n; i++) dst[i] = s[0];
    else if (stride == 4) { /* a column of an [n, 4] tensor (boxes) */
      if (off % 4 == 0) /* column 0: fetch the next tile's rows of all the columns ahead */
        for (int64_t i = 0; i < 4 * n; i += 16) __builtin_prefetch(s + 4 * n + i);
      mv->load_s4(dst, s, n);
    }
    else if (stride == 2)
      for (int64_t i = 0; i < n; i++) dst[i] = s[2 * i];
    else
      for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride];
  } else {
    const unsigned char *s = (const unsigned char *)base + off;
    for (int64_t i = 0; i < n; i++) dst[i] = s[i * stride] ? 1.0f : 0.0f;
  }
}

/* A walk over the rows of strided view v (its innermost dim) from domain
 * element f0: walk_next gives the element offset of the next run and its
 * length, at most `left`, then steps the index past it (a run always ends
 * at its row's end unless it is the walk's last). */
typedef struct view_walk {
  const kiln_view *v;
  int64_t idx[KILN_MAX_RANK];
} view_walk;

static inline void walk_start(view_walk *w, const kiln_view *v, int64_t f0) {
  w->v = v;
  kiln_unravel(f0, v->rank, v->shape, w->idx);
}

static inline int64_t walk_next(view_walk *w, int64_t left, int64_t *run) {
  const kiln_view *v = w->v;
  int rk = v->rank;
  int64_t off = v->offset;
  for (int d = 0; d < rk; d++) off += w->idx[d] * v->strides[d];
  *run = v->shape[rk - 1] - w->idx[rk - 1];
  if (*run > left) *run = left;
  w->idx[rk - 1] = 0;
  for (int d = rk - 2; d >= 0; d--) { /* carry */
    if (++w->idx[d] < v->shape[d]) break;
    w->idx[d] = 0;
  }
  return off;
}

/* The tile of accessor r at domain elements [f0, f0 + n): a pointer into
 * memory when one stride-1 float32 run holds it, else gathered into buf. */
static const float *load_tile(const tacc *r, int64_t f0, int n, float *buf, const tmoves *mv) {
  switch (r->kind) {
  case R_DIRECT: return (const float *)r->base + r->v.offset + f0;
  case R_STRIDED: {
    const kiln_view *v = &r->v;
    int rk = v->rank;
    if (r->row) { /* a bias row: a pointer when the tile lies in one repeat of it */
      int64_t j = f0 % v->shape[rk - 1];
      if (j + n <= v->shape[rk - 1]) return (const float *)r->base + v->offset + j;
    }
    view_walk w;
    walk_start(&w, v, f0);
    int64_t s = v->strides[rk - 1];
    for (int64_t done = 0, run; done < n; done += run) {
      int64_t off = walk_next(&w, n - done, &run);
      if (done == 0 && run == n && s == 1 && r->dtype == KILN_F32) return (const float *)r->base + off;
      load_run(buf + done, r->base, r->dtype, off, s, run, mv);
    }
    return buf;
  }
  default: /* R_GENERIC */
    for (int i = 0; i < n; i++) {
      bool valid = true;
      int64_t off = kiln_views_offset(&r->map, f0 + i, &valid);
      buf[i] = !valid ? r->pad
               : r->dtype == KILN_F32 ? ((const float *)r->base)[off]
                                      : (((const unsigned char *)r->base)[off] ? 1.0f : 0.0f);
    }
    return buf;
  }
}

/* Prefetches of the next tile's rows, spread over this tile's ops: a
 * burst of them at the load (128 lines a group) filled the core's miss
 * queue and stalled it there (half of the executor's own samples in
 * detection_post, cache-cold), while the ops that follow had none in
 * flight. So the column groups queue their next tile's rows here, each
 * op evaluated then issues KILN_TILE_PF_STEP lines of them, and the next
 * tile's start issues what is left. Hints only: never a fault, no value
 * changes. */
#define KILN_TILE_PF_RANGES 8
#define KILN_TILE_PF_STEP 24
/* Inputs read in place (R_DIRECT) queue their next tile too where the
 * domain has at least this many elements (4 MiB of float32 an input,
 * beyond the L2): the hardware prefetchers alone left the 16M chain's
 * first run of each tile waiting on its input (TILE.md, "Streamed stores
 * on whole lines, the next tile fetched ahead"). */
#define KILN_TILE_PF_DIRECT_MIN ((int64_t)1 << 20)
typedef struct tpf {
  const char *p[KILN_TILE_PF_RANGES], *e[KILN_TILE_PF_RANGES]; /* lines [p, e) still to fetch */
  int n;
} tpf;

/* The tile length of tp's passes: KILN_TILE_N_BIG where the domain has at
 * least KILN_TILE_BIG_MIN elements — beyond the L2, its inputs streamed
 * from memory, the prefetch queue fetching the next tile's rows: half the
 * tiles, each prefetched twice as far ahead (the 16M chain at 2 threads
 * ~5 % faster, TILE.md "Longer tiles for long domains") — else KILN_TILE_N
 * (programs over cache-resident values lost 1-4 % with the longer tiles).
 * Values cannot change: every op is per element. */
static int tile_len(const kiln_tile_prog *tp) {
  return tp->numel >= KILN_TILE_BIG_MIN ? KILN_TILE_N_BIG : KILN_TILE_N;
}

/* Issues up to `lines` of pf's queued lines (all: lines < 0). */
static inline void pf_issue(tpf *pf, int lines) {
  for (int q = 0; q < pf->n && lines != 0; q++)
    for (; pf->p[q] < pf->e[q] && lines != 0; pf->p[q] += 64, lines--) __builtin_prefetch(pf->p[q]);
}

/* The four tiles of column group t (its loads t->cols, column order) at
 * domain elements [f0, f0 + n): each run of the layout's rows read once,
 * deinterleaved into the four loads' buffers; the rows as far again
 * ahead (the next tile's) queued in pf. */
static void load_cols(const kiln_tile_prog *tp, const texpr *t, int64_t f0, int n, float *bufs, int tn,
                      const float **ptr, const tmoves *mv, tpf *pf) {
  const tacc *r = &tp->acc[tp->e[t->cols[0]].acc];
  float *d[4];
  for (int c = 0; c < 4; c++) ptr[t->cols[c]] = d[c] = bufs + (size_t)tp->e[t->cols[c]].buf * (size_t)tn;
  view_walk w;
  walk_start(&w, &r->v, f0);
  for (int64_t done = 0, run; done < n; done += run) {
    const float *s = (const float *)r->base + walk_next(&w, n - done, &run);
    if (pf->n < KILN_TILE_PF_RANGES) {
      pf->p[pf->n] = (const char *)(s + 4 * run), pf->e[pf->n] = (const char *)(s + 8 * run);
      pf->n++;
    } else {
      for (int64_t i = 0; i < 4 * run; i += 16) __builtin_prefetch(s + 4 * run + i);
    }
    mv->cols4(d[0] + done, d[1] + done, d[2] + done, d[3] + done, s, run);
  }
}

/* Finds the groups of strided stores that write all the columns of one
 * interleaved output: stores k .. k + p - 1 of stride p, 2 <= p <= 8, each
 * one float after the previous. lead[k] = p at a group's first store, -1
 * at its others, 0 elsewhere. False when there is no group. */
static bool row_groups(const kiln_tile_prog *tp, void *const *out, int *lead) {
  bool any = false;
  for (int k = 0; k < tp->n_store; k++) lead[k] = 0;
  for (int k = 0; k < tp->n_store; k++) {
    int64_t p = tp->store_stride[k];
    if (p < 2 || p > 8 || k + p > tp->n_store || lead[k]) continue;
    bool ok = true;
    for (int j = 1; j < p && ok; j++)
      ok = tp->store_stride[k + j] == p && !lead[k + j] && (float *)out[k + j] == (float *)out[k] + j;
    if (!ok) continue;
    lead[k] = (int)p;
    for (int j = 1; j < p; j++) lead[k + j] = -1;
    any = true;
  }
  return any;
}

/* Streamed stores: how many elements the first dense float32 output
 * (stride 1, not in a row group) holds before it reaches a 64-byte line (0
 * where it starts on one or is not 4-byte aligned). The call's first tile
 * is cut there, so every later tile's non-temporal
 * stores start on a line: a tile that ended inside a line wrote its last
 * floats there with plain stores and the next tile its first ones, each
 * line so shared read from memory and mixed with streamed stores — on
 * the Intel Xeon VM a 16 MB copy from an output at 16 bytes into a line
 * (numpy's and malloc's large buffers) ran ~1.4x the time of an aligned
 * one (TILE.md, "Streamed stores on whole lines"). Where a tile starts
 * does not change any value: every op is per element. */
static int stream_head(const kiln_tile_prog *tp, void *const *out, const int *lead) {
  for (int k = 0; k < tp->n_store; k++) {
    if (tp->store_stride[k] != 1 || tp->store_dt[k] != KILN_F32 || (lead && lead[k])) continue;
    uintptr_t a = (uintptr_t)out[k];
    return a & 3 ? 0 : (int)((64 - (a & 63)) & 63) / 4;
  }
  return 0;
}

/* Writes n rows of p floats at d: column j from the tile of expression
 * ex[j]. With a staging buffer rows (p * n floats), the rows are
 * interleaved there first and copied out by store (non-temporal). */
static void store_rows(float *d, const float *const *ptr, const int *ex, int p, int n, float *rows,
                       void (*store)(float *, const float *, int, bool), const tmoves *mv) {
  float *r0 = rows ? rows : d;
  if (p == 4) {
    mv->rows4(r0, ptr[ex[0]], ptr[ex[1]], ptr[ex[2]], ptr[ex[3]], n);
  } else {
    for (int i = 0; i < n; i++)
      for (int j = 0; j < p; j++) r0[p * i + j] = ptr[ex[j]][i];
  }
  if (rows) store(d, rows, p * n, true);
}

/* The uniform value of accessor r. */
static float uniform_value(const tacc *r) {
  if (r->v.rank == 0 && r->kind == R_UNIFORM && kiln_views_top(&r->map)->all_masked) return r->pad;
  int64_t off = r->v.offset;
  return r->dtype == KILN_F32 ? ((const float *)r->base)[off] : (((const unsigned char *)r->base)[off] ? 1.0f : 0.0f);
}

/* The value of expression i when it is the same at every element of the
 * bound program: a constant or a load of a uniform accessor. */
static bool uniform_expr(const kiln_tile_prog *tp, int i, float *v) {
  const texpr *t = &tp->e[i];
  if (t->kind == E_CONST) *v = t->cst;
  else if (t->kind == E_LOAD && tp->acc[t->acc].kind == R_UNIFORM && tp->acc[t->acc].dtype == KILN_F32)
    *v = uniform_value(&tp->acc[t->acc]);
  else return false;
  return true;
}

bool kiln_tile_clamp(const kiln_tile_prog *tp, float *lo, float *hi) {
  if (!tp->bound || tp->sp->kind != KILN_FUSE_G_ANCHOR || tp->n_store != 1 || tp->store_dt[0] != KILN_F32) return false;
  const texpr *e = &tp->e[tp->store_expr[0]];
  if (e->kind != E_OP || e->n_args < 1 || tp->e[e->args[0]].kind != E_ANCHOR) return false;
  if (e->op.op == KILN_FUSE_RELU && e->n_args == 1) {
    *lo = 0.0f, *hi = INFINITY;
    return true;
  }
  return e->op.op == KILN_FUSE_CLIP && e->n_args == 3 && uniform_expr(tp, e->args[1], lo) &&
         uniform_expr(tp, e->args[2], hi);
}

/* True when expression e is exactly the anchor op *other (other first or
 * second: add and multiply commute bit for bit). */
static bool anchor_op(const kiln_tile_prog *tp, const texpr *e, int op, int *other) {
  if (e->kind != E_OP || e->op.op != op || e->n_args != 2 || e->uniform) return false;
  int a = e->args[0], b = e->args[1];
  if (tp->e[a].kind != E_ANCHOR) {
    int t = a;
    a = b;
    b = t;
  }
  *other = b;
  return tp->e[a].kind == E_ANCHOR;
}

/* True when tp, bound, stores one float32 value that is exactly the anchor
 * op *other. */
static bool anchor_binop(const kiln_tile_prog *tp, int op, int *other) {
  if (!tp->bound || tp->sp->kind != KILN_FUSE_G_ANCHOR || tp->n_store != 1 || tp->store_dt[0] != KILN_F32) return false;
  return anchor_op(tp, &tp->e[tp->store_expr[0]], op, other);
}

bool kiln_tile_col_bias(const kiln_tile_prog *tp, const float **bias, int64_t *n) {
  int b;
  if (!anchor_binop(tp, KILN_FUSE_ADD, &b) || tp->e[b].kind != E_LOAD || tp->e[b].uniform) return false;
  const tacc *r = &tp->acc[tp->e[b].acc];
  if (!r->row || r->kind != R_STRIDED || r->dtype != KILN_F32 || r->v.rank < 1) return false;
  *bias = (const float *)r->base + r->v.offset;
  *n = r->v.shape[r->v.rank - 1];
  return true;
}

bool kiln_tile_residual(const kiln_tile_prog *tp, const float **res, float *lo, float *hi) {
  if (!tp->bound || tp->sp->kind != KILN_FUSE_G_ANCHOR || tp->n_store != 1 || tp->store_dt[0] != KILN_F32) return false;
  const texpr *e = &tp->e[tp->store_expr[0]];
  *lo = -INFINITY, *hi = INFINITY;
  if (e->kind == E_OP && e->op.op == KILN_FUSE_RELU && e->n_args == 1) {
    *lo = 0.0f;
    e = &tp->e[e->args[0]];
  } else if (e->kind == E_OP && e->op.op == KILN_FUSE_CLIP && e->n_args == 3) {
    if (!uniform_expr(tp, e->args[1], lo) || !uniform_expr(tp, e->args[2], hi)) return false;
    e = &tp->e[e->args[0]];
  }
  int b;
  if (!anchor_op(tp, e, KILN_FUSE_ADD, &b) || tp->e[b].kind != E_LOAD) return false;
  const tacc *r = &tp->acc[tp->e[b].acc];
  if (r->kind != R_DIRECT || r->dtype != KILN_F32) return false;
  *res = (const float *)r->base + r->v.offset;
  return true;
}

bool kiln_tile_scale(const kiln_tile_prog *tp, float *s) {
  int b;
  return anchor_binop(tp, KILN_FUSE_MUL, &b) && uniform_expr(tp, b, s);
}

kiln_status kiln_tile_exec(const kiln_tile_prog *tp, int64_t lo, int64_t hi, void *const *out, const float *anchor,
                           kiln_vm_isa isa) {
  return kiln_tile_exec_obs(tp, lo, hi, out, anchor, isa, NULL);
}

/* Folds the observed entries of expression i over the tile's n values. */
static inline void obs_fold(const kiln_tile_obs *ob, const int *first, const int *next, int i, const float *x, int n) {
  for (int j = first[i]; j >= 0; j = next[j]) (ob->fold ? ob->fold : kiln_obs_partial_fold_f32)(&ob->part[j], x, n);
}

/* Runs linear run q over the tile (tile pointers ptr) into y. */
static void seq_run(const kiln_tile_prog *tp, const tseq *q, const float *const *ptr, int n, float *y, bool stream) {
#ifdef KILN_TILE_HAVE_AVX2
  kiln_tile_seq r;
  r.n = q->n;
  r.stream = stream;
  r.x = ptr[tp->e[q->step[0]].args[q->pos[0]]];
  for (int k = 0; k < q->n; k++) {
    const texpr *t = &tp->e[q->step[k]];
    kiln_tile_seq_step *st = &r.s[k];
    st->op = t->op, st->pos = q->pos[k], st->n_args = t->n_args;
    for (int j = 0; j < t->n_args; j++) {
      st->a[j] = j == st->pos ? NULL : ptr[t->args[j]];
      st->uniform[j] = j != st->pos && tp->e[t->args[j]].uniform;
    }
  }
  kiln_tile_seq_avx512(&r, n, y);
#else
  (void)tp, (void)q, (void)ptr, (void)n, (void)y, (void)stream;
#endif
}

kiln_status kiln_tile_exec_obs(const kiln_tile_prog *tp, int64_t lo, int64_t hi, void *const *out, const float *anchor,
                               kiln_vm_isa isa, const kiln_tile_obs *ob) {
  if (!tp->bound) return kiln_fail(KILN_E_INTERNAL, "tile: the program is not bound");
  if (lo < 0 || hi > tp->numel || lo > hi) return kiln_fail(KILN_E_INTERNAL, "tile: range out of the domain");
  if (lo == hi) return KILN_OK;
#ifdef KILN_TILE_HAVE_AVX2
  bool avx2 = isa == KILN_VM_ISA_AVX2 && kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2) != NULL; /* cached cpuid */
  kiln_tile_op_fn eval = !avx2 ? kiln_tile_eval_base : has_avx512() ? kiln_tile_eval_avx512 : kiln_tile_eval_avx2;
  void (*store)(float *, const float *, int, bool) = avx2 ? kiln_tile_store_avx2 : kiln_tile_store_base;
  tmoves mv = {kiln_tile_load_s4_base, kiln_tile_load_cols4_base, kiln_tile_rows4_base};
  if (avx2 && has_avx512())
    mv = (tmoves){kiln_tile_load_s4_avx512, kiln_tile_load_cols4_avx512, kiln_tile_rows4_avx512};
#else
  bool avx2 = false;
  kiln_tile_op_fn eval = kiln_tile_eval_base;
  void (*store)(float *, const float *, int, bool) = kiln_tile_store_base;
  tmoves mv = {kiln_tile_load_s4_base, kiln_tile_load_cols4_base, kiln_tile_rows4_base};
  (void)isa;
#endif
  int n_expr = tp->n_expr;
  const int tn = tile_len(tp); /* the tile's length and each buffer's */
  size_t tile_bytes = sizeof(float) * (size_t)tn;
  int n_ob = ob ? ob->n : 0;
  bool stream = (tp->stream || tp->stream_out) && avx2;
  /* strided stores that are all the columns of one interleaved output
     (out[k + j] one float after out[k], stride = their count): written row
     by row; lead[k] = the group's size at its first store, -1 inside */
  int lead[KILN_TILE_ROW_GROUPS_MAX];
  bool rows = tp->n_store <= KILN_TILE_ROW_GROUPS_MAX && row_groups(tp, out, lead);
  size_t rows_bytes = rows && stream ? tile_bytes * 8 : 0; /* streamed rows are staged: p <= 8 columns */
  char *mem = kiln_malloc(tile_bytes * (size_t)tp->n_buf + sizeof(const float *) * (size_t)(n_expr + 1) + 64 +
                          sizeof(int) * (size_t)(n_ob ? n_expr + n_ob : 0) + rows_bytes);
  if (!mem) return kiln_fail(KILN_E_NOMEM, "out of memory running a tile program");
  /* observed expressions: first[i] -> entries chained by next[] */
  int *first = NULL, *next = NULL;
  if (n_ob) {
    first = (int *)(void *)(mem + tile_bytes * (size_t)tp->n_buf + sizeof(const float *) * (size_t)(n_expr + 1) + 64);
    next = first + n_expr;
    for (int i = 0; i < n_expr; i++) first[i] = -1;
    for (int j = n_ob - 1; j >= 0; j--) {
      int e = ob->expr[j];
      next[j] = -1;
      if (e < 0 || e >= n_expr) continue;
      next[j] = first[e];
      first[e] = j;
    }
  }
  float *bufs = (float *)(void *)(mem + (64 - ((uintptr_t)mem & 63)) % 64);
  const float **ptr = (const float **)(void *)((char *)bufs + tile_bytes * (size_t)tp->n_buf);
  /* uniform expressions, once */
  for (int i = 0; i < n_expr; i++) {
    const texpr *t = &tp->e[i];
    if (!t->uniform) continue;
    float *b = bufs + (size_t)t->buf * (size_t)tn;
    if (t->kind == E_OP) {
      eval(&t->op, tn, ptr[t->args[0]], t->n_args > 1 ? ptr[t->args[1]] : NULL,
           t->n_args > 2 ? ptr[t->args[2]] : NULL, b);
    } else {
      float v = t->kind == E_CONST ? t->cst : uniform_value(&tp->acc[t->acc]);
      for (int k = 0; k < tn; k++) b[k] = v;
    }
    ptr[i] = b;
  }
  /* one dense float32 store of the last expression, an op: evaluated
     straight into the output (no copy per tile). Safe in place: a store
     over a value the program reads reads it only at the element it writes
     (kiln_tile_inplace_ok), and the anchor's block is at the same elements. */
  /* linear runs in one pass: with the AVX-512 ops, no observers */
  bool seq_pass = false;
#ifdef KILN_TILE_HAVE_AVX2
  seq_pass = eval == kiln_tile_eval_avx512 && !n_ob && tp->n_seq > 0;
#endif
  /* Streamed, the same when the last expression ends a linear run: the
     run writes its strips with non-temporal stores itself (no tile staged
     and copied out by store; the tiles start on the output's lines,
     stream_head) */
  int direct = -1;
  if (tp->n_store == 1 && !rows && !n_ob && tp->store_stride[0] == 1 && tp->store_dt[0] == KILN_F32 &&
      tp->store_expr[0] == n_expr - 1 && tp->e[n_expr - 1].kind == E_OP && !tp->e[n_expr - 1].uniform &&
      (!stream || (seq_pass && tp->e[n_expr - 1].seq >= 0)))
    direct = n_expr - 1;
  float *staged = rows_bytes ? (float *)(void *)(mem + tile_bytes * (size_t)tp->n_buf +
                                                 sizeof(const float *) * (size_t)(n_expr + 1) + 64 +
                                                 sizeof(int) * (size_t)(n_ob ? n_expr + n_ob : 0))
                            : NULL; /* after the observers' lists */
  tpf pf;
  pf.n = 0;
  int head = stream ? stream_head(tp, out, rows ? lead : NULL) : 0;
  bool pf_direct = tp->numel >= KILN_TILE_PF_DIRECT_MIN;
  for (int64_t f0 = lo, step; f0 < hi; f0 += step) {
    int n = (int)(hi - f0 < tn ? hi - f0 : tn);
    if (f0 == lo && head > 0 && head < n) n = head;
    step = n;
    pf_issue(&pf, -1); /* what is left of the last tile's */
    pf.n = 0;
    for (int i = 0; i < n_expr; i++) {
      const texpr *t = &tp->e[i];
      if (t->uniform) continue;
      float *b = t->buf >= 0 ? bufs + (size_t)t->buf * (size_t)tn : NULL;
      switch (t->kind) {
      case E_LOAD:
        if (t->cols[0] >= 0) load_cols(tp, t, f0, n, bufs, tn, ptr, &mv, &pf);
        else if (!t->in_cols) {
          ptr[i] = load_tile(&tp->acc[t->acc], f0, n, b, &mv);
          if (pf_direct && tp->acc[t->acc].kind == R_DIRECT && pf.n < KILN_TILE_PF_RANGES) {
            int64_t m = hi - f0 - n < tn ? hi - f0 - n : tn; /* the next tile's */
            pf.p[pf.n] = (const char *)(ptr[i] + n), pf.e[pf.n] = (const char *)(ptr[i] + n + m);
            pf.n++;
          }
        }
        break; /* in_cols: loaded by its group's first load */
      case E_ANCHOR: ptr[i] = anchor + (f0 - lo); break;
      default:
        if (i == direct) b = (float *)out[0] + (f0 - lo);
        if (!b || (t->folded && !n_ob) || (t->in_seq && seq_pass))
          continue; /* read by nobody, or inside a Gelu chain or a run evaluated as one */
        if (t->seq >= 0 && seq_pass) {
          seq_run(tp, &tp->seq[t->seq], ptr, n, b, stream && i == direct);
        } else if (t->gelu[0] >= 0 && !n_ob) {
          const int *q = t->gelu;
          kiln_tile_op go = {KILN_TILE_OP_GELU, {ptr[q[1]][0], ptr[q[2]][0], ptr[q[3]][0]}, t->gelu_k};
          eval(&go, n, ptr[q[0]], NULL, NULL, b);
        } else {
          eval(&t->op, n, ptr[t->args[0]], t->n_args > 1 ? ptr[t->args[1]] : NULL,
               t->n_args > 2 ? ptr[t->args[2]] : NULL, b);
        }
        ptr[i] = b;
        pf_issue(&pf, KILN_TILE_PF_STEP);
      }
      if (n_ob && first[i] >= 0) obs_fold(ob, first, next, i, ptr[i], n); /* while the tile is hot */
    }
    for (int i = 0; n_ob && i < n_expr; i++) /* uniform ones: the same value at every element */
      if (tp->e[i].uniform && first[i] >= 0) obs_fold(ob, first, next, i, ptr[i], n);
    for (int k = 0; k < tp->n_store && direct < 0; k++) {
      const float *src = ptr[tp->store_expr[k]];
      int64_t st = tp->store_stride[k];
      if (rows && lead[k] < 0) continue; /* written with its group */
      if (rows && lead[k] > 0) {
        store_rows((float *)out[k] + (f0 - lo) * st, ptr, tp->store_expr + k, lead[k], n, staged, store, &mv);
        continue;
      }
      if (st != 1) { /* a column of an interleaved output (a Concat of such columns) */
        float *d = (float *)out[k] + (f0 - lo) * st;
        for (int j = 0; j < n; j++) d[j * st] = src[j];
      } else if (tp->store_dt[k] == KILN_F32) {
        store((float *)out[k] + (f0 - lo), src, n, stream);
      } else {
        unsigned char *d = (unsigned char *)out[k] + (f0 - lo);
        for (int j = 0; j < n; j++) d[j] = src[j] != 0;
      }
    }
  }
#ifdef KILN_TILE_HAVE_AVX2
  if (stream) kiln_tile_fence_avx2();
#endif
  kiln_free(mem);
  return KILN_OK;
}

void kiln_tile_copy_stream(float *dst, const float *src, int64_t n, kiln_vm_isa isa) {
#ifdef KILN_TILE_HAVE_AVX2
  if (isa == KILN_VM_ISA_AVX2 && kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2) != NULL) { /* cached cpuid */
    const int64_t chunk = (int64_t)1 << 20;
    for (int64_t i = 0; i < n; i += chunk) kiln_tile_store_avx2(dst + i, src + i, (int)(n - i < chunk ? n - i : chunk), true);
    kiln_tile_fence_avx2();
    return;
  }
#endif
  (void)isa;
  if (n > 0) memcpy(dst, src, sizeof *dst * (size_t)n);
}

/* ---- the parallel pass: chunks of whole tiles on the pool ---- */

enum { CHUNK = 32 * KILN_TILE_N }; /* elements per task (whole tiles of either length): the partition depends on
                                      the domain only */
_Static_assert(CHUNK % KILN_TILE_N_BIG == 0, "a task holds whole tiles");

typedef struct par_ctx {
  const kiln_tile_prog *tp;
  int64_t lo, hi;
  void *const *out;
  const float *anchor;
  kiln_vm_isa isa;
  atomic_int status; /* the first failure */
} par_ctx;

/* Runs chunks [t0, t1) as one kiln_tile_exec call. */
static void par_span(par_ctx *c, int64_t t0, int64_t t1) {
  int64_t a = c->lo + t0 * CHUNK, b = c->lo + t1 * CHUNK < c->hi ? c->lo + t1 * CHUNK : c->hi;
  const kiln_tile_prog *tp = c->tp;
  void *o[KILN_TILE_PAR_STORES];
  for (int k = 0; k < tp->n_store; k++)
    o[k] = (char *)c->out[k] + (size_t)(a - c->lo) * (size_t)tp->store_stride[k] *
                                   (tp->store_dt[k] == KILN_F32 ? sizeof(float) : 1);
  kiln_status s = kiln_tile_exec(tp, a, b, o, c->anchor ? c->anchor + (a - c->lo) : NULL, c->isa);
  if (s) {
    kiln_error_clear();
    int zero = 0;
    atomic_compare_exchange_strong(&c->status, &zero, (int)s);
  }
}

static void par_task(void *arg, int64_t t, int worker) {
  (void)worker;
  par_span(arg, t, t + 1);
}

/* Lanes: the chunks are cut into one contiguous lane per thread, each
 * with its own counter. Task k drains lane k in order, then helps the
 * lanes still running, claiming from their counters. A claim takes a
 * quarter of what is left of its lane (at least one chunk), run as one
 * kiln_tile_exec call: the 16M chain's pass lost ~1-2 us at every call
 * (TILE.md "Two threads, and where they lost"), so the calls are few and
 * long while the lane is full, and short at its end, where a preempted
 * thread's rest is shared out. Which thread computes an element, and in
 * how long a call, does not change its value: every op is per element,
 * with the same bits in a vector's body and in its tail, so where a tile
 * starts (a chunk's first, or one cut to a streamed output's line by
 * stream_head) changes nothing. */
enum { LANES_MAX = 64 };

typedef struct lane_ctx {
  par_ctx *c;
  int lanes;
  int64_t end[LANES_MAX]; /* lane k: chunks [end[k - 1], end[k]) */
  struct {
    _Alignas(64) atomic_llong next;
  } at[LANES_MAX];
} lane_ctx;

static void lane_task(void *arg, int64_t k, int worker) {
  (void)worker;
  lane_ctx *lc = arg;
  for (int j = 0; j < lc->lanes; j++) {
    int lane = (int)((k + j) % lc->lanes);
    long long end = lc->end[lane], t = atomic_load(&lc->at[lane].next);
    while (t < end) {
      long long take = (end - t) / 4 > 1 ? (end - t) / 4 : 1;
      if (atomic_compare_exchange_weak(&lc->at[lane].next, &t, t + take)) {
        par_span(lc->c, t, t + take);
        t = atomic_load(&lc->at[lane].next);
      } /* else t holds the counter's new value */
    }
  }
}

kiln_status kiln_tile_exec_par(const kiln_tile_prog *tp, int64_t lo, int64_t hi, void *const *out,
                               const float *anchor, kiln_vm_isa isa) {
  int64_t n_tasks = hi > lo ? (hi - lo + CHUNK - 1) / CHUNK : 0;
  int threads = kiln_pool_threads();
  if (n_tasks < 4 || threads < 2 || tp->n_store > KILN_TILE_PAR_STORES) /* small: waking a thread costs more */
    return kiln_tile_exec(tp, lo, hi, out, anchor, isa);
  par_ctx c = {tp, lo, hi, out, anchor, isa, 0};
  atomic_init(&c.status, 0);
  if (threads > LANES_MAX) { /* chunks one at a time from one counter */
    kiln_pool_for(n_tasks, threads, par_task, &c);
  } else {
    lane_ctx lc;
    lc.c = &c;
    lc.lanes = (int64_t)threads <= n_tasks / 2 ? threads : (int)(n_tasks / 2);
    for (int k = 0; k < lc.lanes; k++) {
      lc.end[k] = n_tasks * (k + 1) / lc.lanes;
      atomic_init(&lc.at[k].next, k ? lc.end[k - 1] : 0);
    }
    kiln_pool_for(lc.lanes, threads, lane_task, &lc);
  }
  int s = atomic_load(&c.status);
  if (s)
    return kiln_fail((kiln_status)s, "a tile program failed on a pool thread (%s)",
                     s == KILN_E_NOMEM ? "out of memory" : "internal error");
  return KILN_OK;
}
