/* opencl/engine_sym: symbolic dims — one variant, compiled at the dims'
 * bounds, serves every run of those sizes or smaller. A bound is the
 * model's "kiln.bound.<name>" (metadata_props), else the first run's size;
 * a run beyond one compiles a variant at the larger size of each, which
 * become the bounds. Up to KILN_CL_SYMS symbols (a batch N and a sequence
 * dim S), each at any axis of the graph inputs; every value keeps the
 * bounds' layout. Where only dims of 1 precede the symbol in every value
 * (a batch), a smaller run's rows are a prefix of it: generated kernels
 * are launched over the run's items (their literal inner sizes and strides
 * unchanged), the CLBlast GEMMs get the run's M, copies and host transfers
 * the run's bytes. Where other dims precede it (a sequence dim in
 * [4,S,H]), a smaller run is a sub-box (padded): inputs and outputs are
 * copied as rectangles, and kernels and GEMMs run over the run's rows of
 * each block (the index of the dims before the symbol), steps whose values
 * are a prefix in some symbol over that prefix, the others at the bound
 * over the padding too. With two symbols a value may hold both only with
 * the outer one a prefix ([N,S,H]: blocks N, rows S): a smaller run is the
 * run's first blocks, and in each the run's rows. A graph that cannot be
 * run this way (an op mixing a symbol's positions, a shape folded at a
 * bound, a host step or device op without a run-time size, non-float
 * padded values, a value with both symbols and dims other than 1 before
 * the outer one, a dim that is a product of the symbols, three symbols)
 * falls back to a variant per input-shape set; KILN_LOG=info and the
 * KILN_DUMP file <graph>.opencl-sym.txt say which and why (KILN_LOG=debug:
 * each step's choice). See opencl/ENGINE.md, "Symbolic dims". */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/kinds.h"
#include "ir/alloc.h"
#include "ir/dump.h"
#include "ir/graph_edit.h"
#include "opencl/engine_int.h"

typedef struct kiln_cl_sym kiln_cl_sym;
struct kiln_cl_sym {
  int n; /* symbols */
  char name[KILN_CL_SYMS][KILN_SYMDIM_MAX_NAME + 1];
  char label[64]; /* "dim N", "dims N, S" (the notes) */
  int64_t bound[KILN_CL_SYMS]; /* 0: none yet (the first run's size) */
  bool off;      /* declined: a variant per input-shape set */
  int *sym_ax;   /* per input i of p->orig and symbol k: [i * KILN_CL_SYMS + k], the axis that is k (-1: none) */
  char notes[2048]; /* what note() said (the dump file) */
};

void kiln_cl_sym_free(kiln_cl_plan *p) {
  if (!p || !p->sym) return;
  kiln_free(p->sym->sym_ax);
  kiln_free(p->sym);
  p->sym = NULL;
}

/* The plan's dump note (KILN_DUMP): <graph>.opencl-sym.txt, appended. */
static void note(const kiln_cl_plan *p, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  kiln_log(KILN_LOG_INFO, "opencl plan '%s': %s", p->orig->name ? p->orig->name : "", msg);
  if (!p->dump_stem[0]) return;
  char one[sizeof msg + 1];
  char *all = p->sym ? p->sym->notes : one;
  size_t size = p->sym ? sizeof p->sym->notes : sizeof one, len = p->sym ? strlen(all) : 0;
  snprintf(all + len, size - len, "%s\n", msg);
  FILE *f = NULL;
  kiln_dump_open(p->dump_stem, "opencl-sym.txt", &f);
  if (f) fputs(all, f);
  kiln_dump_close(f, p->dump_stem, "opencl-sym.txt");
}

kiln_status kiln_cl_sym_setup(kiln_cl_plan *p) {
  const kiln_graph *g = p->orig;
  const char *env = getenv("KILN_CL_SYMBOLIC");
  if (env && !strcmp(env, "0")) return KILN_OK;
  const char *names[KILN_CL_SYMS], *why = NULL;
  int nn = 0;
  for (int i = 0; i < g->n_inputs && !why; i++) {
    const kiln_value *val = &g->values[g->inputs[i]];
    if (val->init) continue;
    if (p->spec[i]) why = "inputs set shapes (a variant per value set)";
    bool seen[KILN_CL_SYMS] = {false};
    for (int d = 0; d < val->type.rank && !why; d++) {
      const kiln_dim *x = &val->type.dims[d];
      if (!x->param && x->value >= 0) continue;
      if (!x->param) {
        why = "an input dim is unknown (no dim_param)";
        break;
      }
      int k = 0;
      while (k < nn && strcmp(names[k], x->param)) k++;
      if (k == KILN_CL_SYMS) why = "more than two dim_params";
      else if (k < nn && seen[k]) why = "a dim_param twice in one input";
      else if (k == nn) names[nn++] = x->param;
      if (!why) seen[k] = true;
    }
  }
  if (!nn) return KILN_OK;
  char label[64];
  snprintf(label, sizeof label, nn > 1 ? "dims %s, %s" : "dim %s", names[0], nn > 1 ? names[1] : "");
  for (int k = 0; k < g->n_nodes && !why; k++) /* a shape read at run time would be folded at the bound */
    if (!*g->nodes[k].domain && (!strcmp(g->nodes[k].op_type, "Shape") || !strcmp(g->nodes[k].op_type, "Size")))
      why = "the graph reads shapes (Shape/Size): they would be folded at the bound";
  if (why) {
    note(p, "symbolic %s: %s; one variant per input-shape set", label, why);
    return KILN_OK;
  }
  kiln_cl_sym *y = kiln_calloc(1, sizeof *y);
  if (y) y->sym_ax = kiln_calloc((size_t)g->n_inputs * KILN_CL_SYMS + 1, sizeof *y->sym_ax);
  if (!y || !y->sym_ax) {
    if (y) kiln_free(y);
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  }
  y->n = nn;
  snprintf(y->label, sizeof y->label, "%s", label);
  for (int k = 0; k < nn; k++) snprintf(y->name[k], sizeof y->name[k], "%s", names[k]);
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_value *val = &g->values[g->inputs[i]];
    for (int k = 0; k < KILN_CL_SYMS; k++) y->sym_ax[i * KILN_CL_SYMS + k] = -1;
    for (int d = 0; d < val->type.rank && !val->init; d++)
      for (int k = 0; k < nn; k++)
        if (val->type.dims[d].param && !strcmp(val->type.dims[d].param, names[k])) y->sym_ax[i * KILN_CL_SYMS + k] = d;
  }
  for (int k = 0; k < nn; k++) {
    char key[KILN_SYMDIM_MAX_NAME + 16];
    snprintf(key, sizeof key, "kiln.bound.%s", names[k]);
    for (int i = 0; i < g->n_props; i++)
      if (!strcmp(g->prop_keys[i], key)) {
        char *end = NULL;
        long long b = strtoll(g->prop_vals[i], &end, 10);
        if (end && !*end && b >= 1) y->bound[k] = b; /* (ir/shape rejects a bad one at check) */
      }
  }
  p->sym = y;
  return KILN_OK;
}

/* ---- can variant v run with fewer rows? ---- */

static bool in_list(const char *op, const char *const *list) {
  for (int i = 0; list[i]; i++)
    if (!strcmp(op, list[i])) return true;
  return false;
}

static const char *const elementwise[] = {
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp",
    "Log", "Sqrt", "Reciprocal", "Erf", "Clip", "LeakyRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
    "Softplus", "Softsign", "Gelu", "PRelu", "ThresholdedRelu", "Mish", "Floor", "Ceil", "Round", "Sign", "Sin",
    "Cos", "Where", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "Cast",
    "Identity", "Dropout", "BatchNormalization", "Bernoulli", NULL};
/* ops whose every output image comes from the same image of input 0 (the
 * batch is dim 0 of NCHW), their other inputs (weights, bias) fixed */
static const char *const images[] = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", NULL};
static const char *const reductions[] = {"ReduceSum",    "ReduceMean", "ReduceMax",       "ReduceMin",
                                         "ReduceProd",   "ReduceL1",   "ReduceL2",        "ReduceLogSum",
                                         "ReduceLogSumExp", "ReduceSumSquare", NULL};

/* Axis attribute `name` of node n normalised to rank (def when absent). */
static int64_t axis_of(const kiln_node *n, const char *name, int64_t def, int rank) {
  int64_t a = kiln_attr_int(n, name, def);
  return a < 0 ? a + rank : a;
}

/* What the check knows of v's values: per value, whether it scales with
 * the symbol, the axis that does, and the product of the dims before it
 * (at the bound). */
typedef struct sym_vals {
  bool *dep;
  int8_t *ax;
  int64_t *outer;
} sym_vals;

/* Node n (some input or output depends on the symbol) keeps the symbol's
 * positions apart: position s of each output along its symbolic axis
 * comes from position s of the dependent inputs only (never a reduction
 * over the symbolic axis, nor a merge of it with another axis). */
static bool node_ok(const kiln_cl_variant *v, const kiln_node *n, const sym_vals *sv, char *why, size_t wsz) {
  const kiln_graph *g = v->g;
  const kiln_shapes *sh = v->sh;
  const bool *dep = sv->dep;
  const char *op = n->op_type;
  int o0 = n->n_out > 0 ? n->out[0] : -1, i0 = n->n_in > 0 ? n->in[0] : -1;
  int orank = o0 >= 0 ? sh->v[o0].rank : -1;
  int oax = o0 >= 0 && dep[o0] ? sv->ax[o0] : -1, iax = i0 >= 0 && dep[i0] ? sv->ax[i0] : -1;
  for (int k = 0; k < n->n_out; k++)
    if (n->out[k] >= 0 && !dep[n->out[k]] && g->values[n->out[k]].name) {
      bool used = false; /* an unused optional output (Dropout's mask) is fine */
      for (int j = 0; j < g->n_nodes && !used; j++)
        for (int i = 0; i < g->nodes[j].n_in; i++) used = used || g->nodes[j].in[i] == n->out[k];
      for (int o = 0; o < g->n_outputs; o++) used = used || g->outputs[o] == n->out[k];
      if (used) {
        char lbl[128];
        snprintf(why, wsz, "node %s (%s): output '%s' does not scale with the symbol",
                 kiln_node_label(g, n, lbl, sizeof lbl), op, g->values[n->out[k]].name);
        return false;
      }
    }
  if (*n->domain || oax < 0) goto no;
  /* (not where the node's attributes make it another kind than its op's,
     fuse/kinds.h: BatchNormalization in training mode, whose batch
     statistics mix its rows) */
  if (in_list(op, elementwise) && kiln_fuse_kind_def_of(n) == kiln_fuse_kind_find(n->domain, op)) {
    for (int i = 0; i < n->n_in; i++)
      if (n->in[i] >= 0 && dep[n->in[i]] && (sh->v[n->in[i]].rank != orank || sv->ax[n->in[i]] != oax)) goto no;
    return true;
  }
  if (!strcmp(op, "MatMul")) /* the symbol among A's rows (or its batch), B fixed */
    return iax >= 0 && sh->v[i0].rank >= 2 && iax < sh->v[i0].rank - 1 && !dep[n->in[1]] && sh->v[n->in[1]].rank <= 2;
  if (!strcmp(op, "Gemm"))
    return !kiln_attr_int(n, "transA", 0) && iax == 0 && !dep[n->in[1]] &&
           (n->n_in < 3 || n->in[2] < 0 || !dep[n->in[2]]);
  if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) { /* before opset 13: over [axis, rank) */
    int64_t a = axis_of(n, "axis", n->opset < 13 ? 1 : -1, orank);
    return iax >= 0 && (n->opset < 13 ? a > iax : a != iax);
  }
  if (!strcmp(op, "LayerNormalization")) return iax >= 0 && axis_of(n, "axis", -1, orank) > iax;
  if (!strcmp(op, "Transpose")) return iax >= 0; /* the symbol moves with its positions */
  if (!strcmp(op, "Concat")) return axis_of(n, "axis", 0, orank) != oax;
  if (in_list(op, images)) { /* NCHW: image n of the output from image n of input 0 only */
    for (int i = 1; i < n->n_in; i++)
      if (n->in[i] >= 0 && dep[n->in[i]]) goto no;
    return iax == 0 && oax == 0 && sh->v[i0].rank >= 3;
  }
  if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze"))
    /* the same dims before the symbol (so the same after): the same layout */
    return iax >= 0 && sv->outer[i0] == sv->outer[o0];
  if (in_list(op, reductions)) {
    int irank = sh->v[i0].rank;
    size_t na = 0;
    const int64_t *axes = kiln_attr_ints(n, "axes", &na);
    const kiln_tensor *t = n->n_in > 1 && n->in[1] >= 0 ? g->values[n->in[1]].init : NULL;
    if (!axes && !t) goto no;
    int64_t cnt = axes ? (int64_t)na : t->numel;
    for (int64_t k = 0; k < cnt; k++) {
      int64_t a = axes ? axes[k] : kiln_get_i(t, k);
      if (a < 0) a += irank;
      if (a == iax) goto no;
    }
    return iax >= 0 && cnt > 0;
  }
no:
  return false;
}

/* Values of v that scale with the symbols, from v's graph inferred again
 * with the symbolic inputs' axes as the symbols: each dim of such a value
 * is a constant or c * one symbol, each symbol at most once; with two, the
 * outer one has only dims of 1 before it. val[w]: the value's layout;
 * outer_k[w * KILN_CL_SYMS + k]: the product of its dims before symbol k's
 * axis at the bounds (the check of a Reshape). */
static kiln_status scaling_values(const kiln_cl_plan *p, kiln_cl_variant *v, const int64_t *bound, kiln_cl_symval *val,
                                  int64_t *outer_k, char *why, size_t wsz) {
  const kiln_cl_sym *y = p->sym;
  kiln_graph *c = NULL;
  kiln_shapes *sh = NULL;
  kiln_status s = kiln_edit_clone_shared(v->g, &c); /* freed here: may borrow v->g's weights */
  if (s) return s;
  for (int i = 0; i < c->n_inputs && !s; i++) {
    kiln_value *x = &c->values[c->inputs[i]];
    for (int k = 0; k < y->n && !s && !x->init && v->in_map[i] >= 0; k++) {
      int ax = y->sym_ax[v->in_map[i] * KILN_CL_SYMS + k];
      if (ax < 0 || x->type.rank <= ax) continue;
      char *nm = kiln_strdup(y->name[k]);
      if (!nm) {
        s = kiln_fail(KILN_E_NOMEM, "out of memory checking a symbolic dim");
        break;
      }
      kiln_free(x->type.dims[ax].param);
      x->type.dims[ax] = (kiln_dim){-1, nm};
    }
  }
  if (s) {
    kiln_graph_free(c);
    return s;
  }
  if ((s = kiln_shapes_infer(c, &sh))) {
    snprintf(why, wsz, "shapes at a symbolic size: %s", kiln_last_error());
    kiln_error_clear();
    kiln_graph_free(c);
    return KILN_OK;
  }
  int sym[KILN_CL_SYMS];
  kiln_dimx x1[KILN_CL_SYMS];
  for (int k = 0; k < y->n && !s && !*why; k++) {
    int64_t pinned = 0;
    sym[k] = kiln_sym_find(sh->tab, y->name[k]);
    if (sym[k] < 0) snprintf(why, wsz, "the symbol %s is not used", y->name[k]);
    else if (kiln_sym_value(sh->tab, sym[k], &pinned))
      snprintf(why, wsz, "the rewritten graph fixes %s = %" PRId64 " (a shape folded at the bound)", y->name[k], pinned);
    else
      s = kiln_dimx_sym(sh->tab, y->name[k], &x1[k]);
  }
  int ns = kiln_symtab_nsyms(sh->tab);
  int64_t *vals = kiln_calloc((size_t)ns + 1, sizeof *vals);
  if (!vals && !s) s = kiln_fail(KILN_E_NOMEM, "out of memory checking a symbolic dim");
  for (int w = 0; w < c->n_values && !s && !*why; w++) {
    const kiln_vshape *a = &sh->v[w], *b = &v->sh->v[w];
    const char *vn = c->values[w].name ? c->values[w].name : "";
    kiln_cl_symval *x = &val[w];
    *x = (kiln_cl_symval){false, {-1, -1}, -1, -1, 1};
    if (a->data_dependent) {
      snprintf(why, wsz, "value '%s' has a data-dependent shape", vn);
      break;
    }
    if (a->rank < 0) continue; /* unused */
    if (a->rank != b->rank) {
      snprintf(why, wsz, "value '%s': rank differs at a symbolic size", vn);
      break;
    }
    for (int d = 0; d < a->rank && !*why; d++) {
      if (kiln_dimx_is_const(sh->tab, a->dims[d], NULL)) continue;
      /* dim d = c * symbol k, and c * bound at the bound */
      int which = -1;
      for (int k = 0; k < y->n && which < 0; k++) {
        int64_t c1 = 0, cb = 0;
        kiln_dimx want = KILN_DIMX_NONE;
        for (int j = 0; j < ns; j++) vals[j] = KILN_DIM_UNSET;
        vals[sym[k]] = 1;
        if (!kiln_dimx_eval(sh->tab, a->dims[d], vals, ns, &c1) && c1 >= 1 &&
            !kiln_dimx_mul_const(sh->tab, x1[k], c1, &want) && want == a->dims[d] &&
            kiln_dimx_is_const(v->sh->tab, b->dims[d], &cb) && cb == c1 * bound[k])
          which = k;
        kiln_error_clear();
      }
      char e[64];
      if (which < 0)
        snprintf(why, wsz, "value '%s': dim %d is %s, not a multiple of one symbol", vn, d,
                 kiln_dimx_str(sh->tab, a->dims[d], e, sizeof e));
      else if (x->ax[which] >= 0)
        snprintf(why, wsz, "value '%s': %s reaches dims %d and %d", vn, y->name[which], x->ax[which], d);
      else
        x->ax[which] = (int8_t)d;
    }
    for (int k = 0; k < y->n && !*why; k++) {
      if (x->ax[k] < 0) continue;
      x->dep = true;
      if (x->row < 0 || x->ax[k] > x->ax[x->row]) x->row = (int8_t)k;
    }
    if (*why || !x->dep) continue;
    for (int k = 0; k < y->n; k++)
      if (x->ax[k] >= 0 && k != x->row) x->blk = (int8_t)k;
    for (int k = 0; k < y->n; k++) outer_k[w * KILN_CL_SYMS + k] = 1;
    for (int d = 0; d < a->rank; d++) { /* at the bounds (compile made them constants) */
      int64_t dim = 0;
      kiln_dimx_is_const(v->sh->tab, b->dims[d], &dim);
      if (x->blk >= 0 && d < x->ax[x->blk] && dim != 1) {
        snprintf(why, wsz, "value '%s': %s (dim %d) and %s (dim %d) with dims other than 1 before %s", vn,
                 y->name[x->blk], x->ax[x->blk], y->name[x->row], x->ax[x->row], y->name[x->blk]);
        break;
      }
      if (d < x->ax[x->row]) x->outer *= dim;
      for (int k = 0; k < y->n; k++)
        if (x->ax[k] >= 0 && d < x->ax[k]) outer_k[w * KILN_CL_SYMS + k] *= dim;
    }
  }
  kiln_free(vals);
  kiln_shapes_free(sh);
  kiln_graph_free(c);
  return s;
}

/* The symbol whose rows value w's layout is a prefix in (its blocks' when
 * it has several, else its rows'), else -1 (a constant count of blocks). */
static int lead_of(const kiln_cl_symval *x) {
  return x->outer == 1 ? x->row : x->blk;
}

/* A padded variant's step st: the blocks (the dims before the innermost
 * symbolic axis, the same layout for every output) it may run over the
 * run's rows of, else 0: a work-item kernel, a reduction kernel that
 * takes a group offset, a GEMM op with its rows in the blocks. */
enum { SYM_MAX_BLOCKS = 64 }; /* more blocks: a launch (a GEMM) each costs more than the padding saves */

static bool same_layout(const kiln_cl_symval *a, const kiln_cl_symval *b) {
  return a->dep && b->dep && a->outer == b->outer && a->row == b->row && a->blk == b->blk;
}

static int32_t box_of(const kiln_cl_variant *v, const kiln_cl_step *st, const kiln_cl_symval *val, const int64_t *bound,
                      kiln_cl_symstep *ss) {
  const kiln_node *n = &v->g->nodes[st->node];
  const kiln_cl_symval *x = NULL;
  int w0 = -1;
  if (st->kind == KILN_CL_STEP_GEN) {
    const kiln_cl_kernel_sig *sig = &v->sig[st->kern];
    for (int a = 0; a < sig->n_args; a++) {
      const kiln_cl_symval *o = &val[sig->args[a].value];
      if (!sig->args[a].output) continue;
      if (!o->dep || (x && !same_layout(x, o))) return 0;
      if (!x) w0 = sig->args[a].value;
      x = o;
    }
    size_t unit = sig->local ? sig->local : 1;
    bool ranged = sig->local ? sig->group_offset : !sig->twin[0];
    if (!x || x->outer < 1 || x->outer > SYM_MAX_BLOCKS || sig->n_obs || !ranged || (size_t)sig->n_items % unit ||
        ((size_t)sig->n_items / unit) % ((size_t)x->outer * (size_t)bound[x->row]))
      return 0;
    if (sig->row_block_items &&
        ((size_t)sig->n_items / x->outer / (size_t)bound[x->row]) % (size_t)sig->row_block_items)
      return 0; /* a step of the symbol ends inside an item's rows (codegen.h row_block_items) */
  } else {
    if (st->kind != KILN_CL_STEP_OP || n->n_in < 1 || n->n_out < 1 || n->in[0] < 0 || n->out[0] < 0) return 0;
    x = &val[w0 = n->out[0]];
    if (!same_layout(&val[n->in[0]], x) || x->outer > SYM_MAX_BLOCKS ||
        !kiln_cl_op_box_ok(st->op, x->outer, bound[x->row]))
      return 0;
  }
  *ss = (kiln_cl_symstep){true, (int32_t)x->outer, x->row, x->blk, -1, (int64_t)v->place[w0].bytes / x->outer};
  return ss->box;
}

/* Step st (GEN) over a prefix of its items: every output's layout a
 * prefix in the same symbol, whose bound divides the items (or groups);
 * that symbol, else -1. strict (a padded variant): no tiled or observed
 * kernel. */
static int gen_rows(const kiln_cl_variant *v, const kiln_cl_step *st, const kiln_cl_symval *val, const int64_t *bound,
                    bool strict) {
  const kiln_cl_kernel_sig *sig = &v->sig[st->kern];
  int lead = -1, outs = 0;
  for (int a = 0; a < sig->n_args; a++) outs += sig->args[a].output;
  for (int a = 0; a < sig->n_args; a++) { /* (a kernel writing only scratch, im2col: its inputs) */
    const kiln_cl_symval *o = &val[sig->args[a].value];
    if (outs ? !sig->args[a].output : !o->dep) continue;
    if (!o->dep || lead_of(o) < 0 || (lead >= 0 && lead_of(o) != lead)) return -1;
    lead = lead_of(o);
  }
  size_t unit = sig->local ? sig->local : 1;
  if (lead < 0 || (size_t)sig->n_items % unit || ((size_t)sig->n_items / unit) % (size_t)bound[lead] ||
      (strict && (sig->n_obs || sig->twin[0])))
    return -1;
  if (sig->row_block_items && ((size_t)sig->n_items / (size_t)bound[lead]) % (size_t)sig->row_block_items)
    return -1; /* a run's rows would end inside an item's rows (codegen.h row_block_items) */
  return lead;
}

/* Decides whether v (compiled at the bounds) runs at smaller sizes; sets
 * v->sym_count, sym_bound, sym_val, sym_st, sym_padded, or leaves
 * sym_count 0 with why. */
static kiln_status check_variant(kiln_cl_plan *p, kiln_cl_variant *v, const int64_t *bound, char *why, size_t wsz) {
  *why = 0;
  if (v->host_only) {
    snprintf(why, wsz, "the graph runs on the host (data-dependent shapes)");
    return KILN_OK;
  }
  const kiln_cl_sym *y = p->sym;
  const kiln_graph *g = v->g;
  size_t nv = (size_t)g->n_values + 1;
  kiln_cl_symval *val = kiln_calloc(nv, sizeof *val);
  int64_t *outer_k = kiln_calloc(nv * KILN_CL_SYMS, sizeof *outer_k);
  sym_vals sv = {kiln_calloc(nv, sizeof *sv.dep), kiln_calloc(nv, sizeof *sv.ax), kiln_calloc(nv, sizeof *sv.outer)};
  kiln_cl_symstep *sst = kiln_calloc((size_t)v->n_steps + 1, sizeof *sst);
  kiln_status s = val && outer_k && sv.dep && sv.ax && sv.outer && sst
                      ? KILN_OK
                      : kiln_fail(KILN_E_NOMEM, "out of memory checking a symbolic dim");
  if (!s) s = scaling_values(p, v, bound, val, outer_k, why, wsz);
  /* padded: some value has dims other than 1 before its innermost symbolic
     axis; a smaller run is then a sub-box of the bound's layout, and steps
     that cannot take it run at the bound and compute the padding too: only
     float (and bool) values, where that garbage cannot trap (an integer
     division could) */
  /* (two symbols: as padded even where the outer one's bound is 1, so that
     the variant at 1 takes the rule the larger ones take) */
  bool padded = y->n > 1;
  for (int w = 0; w < g->n_values && !s && !*why; w++) padded = padded || (val[w].dep && val[w].outer > 1);
  for (int w = 0; w < g->n_values && !s && !*why && padded; w++)
    if (val[w].dep && !(KILN_T(v->sh->v[w].dtype) & (KILN_TS_FLOAT | KILN_T(KILN_BOOL))))
      snprintf(why, wsz, "value '%s' is not float, and a padded layout would compute its padding",
               g->values[w].name ? g->values[w].name : "");
  /* every node keeps each symbol's positions apart */
  for (int k = 0; k < y->n && !s && !*why; k++) {
    for (int w = 0; w < g->n_values; w++) {
      sv.dep[w] = val[w].ax[k] >= 0;
      sv.ax[w] = val[w].ax[k];
      sv.outer[w] = outer_k[w * KILN_CL_SYMS + k];
    }
    for (int j = 0; j < g->n_nodes && !*why; j++) {
      const kiln_node *n = &g->nodes[j];
      bool touches = false;
      for (int i = 0; i < n->n_in; i++) touches = touches || (n->in[i] >= 0 && sv.dep[n->in[i]]);
      for (int i = 0; i < n->n_out; i++) touches = touches || (n->out[i] >= 0 && sv.dep[n->out[i]]);
      char lbl[128];
      if (touches && !node_ok(v, n, &sv, why, wsz) && !*why)
        snprintf(why, wsz, "node %s (%s) mixes or moves the positions of %s", kiln_node_label(g, n, lbl, sizeof lbl),
                 n->op_type, y->name[k]);
    }
  }
  char lbl[128];
  for (int k = 0; k < v->n_steps && !s && !*why; k++) {
    const kiln_cl_step *st = &v->steps[k];
    const kiln_node *n = &g->nodes[st->node];
    kiln_cl_symstep *ss = &sst[k];
    *ss = (kiln_cl_symstep){false, 0, -1, -1, -1, 0};
    bool any = false;
    if (st->kind == KILN_CL_STEP_GEN) {
      const kiln_cl_kernel_sig *sig = &v->sig[st->kern];
      for (int a = 0; a < sig->n_args; a++) any = any || val[sig->args[a].value].dep;
      if (!any) continue;
      int r = gen_rows(v, st, val, bound, padded);
      if (padded && box_of(v, st, val, bound, ss)) { /* (and a prefix where the padding is small) */
        ss->lead = (int8_t)r;
        continue;
      }
      if (r >= 0) *ss = (kiln_cl_symstep){true, 0, (int8_t)r, -1, -1, 0};
      else if (!padded) /* (padded: at the bound) */
        snprintf(why, wsz, "kernel %s (from %s, %s) does not take the run's rows", sig->name,
                 kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
      continue;
    }
    for (int i = 0; i < n->n_in; i++) any = any || (n->in[i] >= 0 && val[n->in[i]].dep);
    for (int i = 0; i < n->n_out; i++) any = any || (n->out[i] >= 0 && val[n->out[i]].dep);
    if (!any) continue;
    if (st->kind == KILN_CL_STEP_HOST) {
      snprintf(why, wsz, "node %s (%s) runs on the host", kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
      break;
    }
    if (st->kind == KILN_CL_STEP_COPY) {
      if (!(val[n->in[0]].dep && val[n->out[0]].dep))
        snprintf(why, wsz, "copy of node %s (%s) changes the rows", kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
      /* (prefix: the run's bytes, kiln_cl_sym_at; padded: the bound's layout whole) */
      ss->on = !padded;
      ss->row = val[n->out[0]].row;
      continue;
    }
    bool gemm = !strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "Gemm");
    bool rowwise = !strcmp(n->op_type, "Softmax") || !strcmp(n->op_type, "LogSoftmax") ||
                   !strcmp(n->op_type, "LayerNormalization") || /* over a later axis (node_ok) */
                   in_list(n->op_type, reductions);              /* the symbol's axis kept (node_ok) */
    bool image = in_list(n->op_type, images);
    kiln_cl_rows_kind rk = image ? KILN_CL_ROWS_IMAGES : rowwise ? KILN_CL_ROWS_ROWWISE : KILN_CL_ROWS_GEMM;
    /* over the run's rows of a prefix: input 0 and every output laid out as
       a prefix in the same symbol */
    int r = n->in[0] >= 0 && val[n->in[0]].dep ? lead_of(&val[n->in[0]]) : -1;
    for (int i = 0; i < n->n_out && r >= 0; i++)
      if (n->out[i] >= 0 && (!val[n->out[i]].dep || lead_of(&val[n->out[i]]) != r)) r = -1;
    if (r >= 0 && !((gemm || rowwise || image) && kiln_cl_op_rows_ok(st->op, bound[r], rk))) r = -1;
    if (padded && (gemm || rowwise || image) && box_of(v, st, val, bound, ss)) {
      ss->lead = (int8_t)r; /* (a prefix where the padding is small) */
      continue;
    }
    if (r >= 0)
      *ss = (kiln_cl_symstep){true, 0, (int8_t)r, -1, -1, 0};
    else if (!padded || !(gemm || rowwise || image)) /* (padded: the op runs at the bound, over the padding too) */
      snprintf(why, wsz, "device op of node %s (%s: %s) takes no run-time rows", kiln_node_label(g, n, lbl, sizeof lbl),
               n->op_type, kiln_cl_op_describe(st->op));
  }
  for (int k = 0; k < v->n_steps && !s && !*why && kiln_log_level() >= KILN_LOG_DEBUG; k++) {
    const kiln_cl_step *st = &v->steps[k];
    const kiln_cl_symstep *ss = &sst[k];
    const kiln_node *n = &g->nodes[st->node];
    kiln_log(KILN_LOG_DEBUG, "opencl plan '%s': step %d (%s %s): %s%s%s%s%s", g->name ? g->name : "", k,
             st->kind == KILN_CL_STEP_GEN ? v->sig[st->kern].name : kiln_node_label(g, n, lbl, sizeof lbl), n->op_type,
             !ss->on ? "at the bounds" : ss->box ? "per block, rows of " : "a prefix, rows of ",
             ss->on ? y->name[ss->row] : "", ss->box ? (ss->blk >= 0 ? ", blocks of " : ", every block") : "",
             ss->box && ss->blk >= 0 ? y->name[ss->blk] : "",
             ss->box && ss->lead >= 0 ? " (or a prefix in the blocks where that skips little padding)" : "");
  }
  if (!s && !*why) {
    v->sym_count = y->n;
    for (int k = 0; k < y->n; k++) v->sym_bound[k] = v->sym_n[k] = bound[k];
    v->sym_small = false;
    v->sym_val = val;
    v->sym_st = sst;
    v->sym_padded = padded;
    val = NULL;
    sst = NULL;
  }
  kiln_free(val);
  kiln_free(outer_k);
  kiln_free(sst);
  kiln_free(sv.dep);
  kiln_free(sv.ax);
  kiln_free(sv.outer);
  return s;
}

/* The model's kiln.bound.<name> of symbol k, if any, raised to n in the
 * plan's copy of the graph (shape inference holds the variants to it). */
static kiln_status raise_bound(kiln_cl_plan *p, int k, int64_t n) {
  kiln_graph *g = p->orig;
  char key[KILN_SYMDIM_MAX_NAME + 16], val[32];
  snprintf(key, sizeof key, "kiln.bound.%s", p->sym->name[k]);
  snprintf(val, sizeof val, "%" PRId64, n);
  for (int i = 0; i < g->n_props; i++)
    if (!strcmp(g->prop_keys[i], key)) {
      char *v = kiln_strdup(val);
      if (!v) return kiln_fail(KILN_E_NOMEM, "out of memory raising a symbolic bound");
      kiln_free(g->prop_vals[i]);
      g->prop_vals[i] = v;
    }
  return KILN_OK;
}

/* "64" or "N = 4, S = 12" (the notes). */
static void bounds_str(const kiln_cl_sym *y, const int64_t *b, char *out, size_t size) {
  if (y->n == 1) {
    snprintf(out, size, "%" PRId64, b[0]);
    return;
  }
  snprintf(out, size, "%s = %" PRId64 ", %s = %" PRId64, y->name[0], b[0], y->name[1], b[1]);
}

kiln_status kiln_cl_sym_variant_get(kiln_cl_plan *p, const kiln_tensor *const *in, kiln_cl_variant **out) {
  kiln_cl_sym *y = p->sym;
  const kiln_graph *g0 = p->orig;
  *out = NULL;
  int64_t n[KILN_CL_SYMS] = {-1, -1};
  for (int i = 0; i < g0->n_inputs; i++)
    for (int k = 0; k < y->n; k++) {
      int ax = y->sym_ax[i * KILN_CL_SYMS + k];
      if (ax < 0) continue;
      if (!in[i] || in[i]->rank <= ax) return kiln_cl_variant_get_exact(p, in, out);
      if (n[k] < 0) n[k] = in[i]->dims[ax];
      else if (n[k] != in[i]->dims[ax]) return kiln_cl_variant_get_exact(p, in, out); /* inputs disagree: shapes say why */
    }
  for (int k = 0; k < y->n; k++)
    if (n[k] < 1) return kiln_cl_variant_get_exact(p, in, out);
  for (int k = 0; k < y->n; k++) /* beyond a bound: compiled at the larger size of each */
    if (n[k] > y->bound[k]) {
      if (y->bound[k])
        kiln_log(KILN_LOG_INFO, "opencl plan '%s': %s = %" PRId64 " exceeds its bound %" PRId64 ": compiling at %" PRId64,
                 g0->name ? g0->name : "", y->name[k], n[k], y->bound[k], n[k]);
      y->bound[k] = n[k];
      kiln_status s = raise_bound(p, k, n[k]);
      if (s) return s;
    }
  if (y->off) return kiln_cl_variant_get_exact(p, in, out);
  int64_t bound[KILN_CL_SYMS] = {0, 0};
  bool at_bound = true;
  for (int k = 0; k < y->n; k++) bound[k] = y->bound[k], at_bound = at_bound && n[k] == bound[k];
  const kiln_tensor **at = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *at);
  kiln_tensor *fake = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *fake);
  kiln_status s = at && fake ? KILN_OK : kiln_fail(KILN_E_NOMEM, "out of memory keying an OpenCL plan");
  for (int i = 0; i < g0->n_inputs && !s; i++) {
    at[i] = in[i];
    bool any = false;
    int64_t dims[KILN_MAX_RANK];
    if (in[i]) memcpy(dims, in[i]->dims, sizeof *dims * (size_t)in[i]->rank);
    for (int k = 0; k < y->n; k++) {
      int ax = y->sym_ax[i * KILN_CL_SYMS + k];
      if (ax >= 0) dims[ax] = bound[k], any = true;
    }
    if (!any) continue;
    kiln_tensor_wrap(&fake[i], in[i]->dtype, in[i]->rank, dims, 0, NULL);
    at[i] = &fake[i];
  }
  kiln_cl_variant *v = NULL;
  if (!s) s = kiln_cl_variant_get_exact(p, at, &v);
  kiln_free(at);
  kiln_free(fake);
  char bs[KILN_CL_SYMS * (KILN_SYMDIM_MAX_NAME + 32)];
  bounds_str(y, bound, bs, sizeof bs);
  if (s && !at_bound && s != KILN_E_NOMEM) { /* e.g. the bound's arena exceeds the device: this size alone */
    y->off = true;
    note(p, "symbolic %s: compiling at the bound %s failed (%s); one variant per input-shape set from now on", y->label,
         bs, kiln_last_error());
    kiln_error_clear();
    return kiln_cl_variant_get_exact(p, in, out);
  }
  if (s) return s;
  if (!v->sym_checked) {
    char why[400];
    v->sym_checked = true;
    if ((s = check_variant(p, v, bound, why, sizeof why))) return s;
    if (v->sym_count) {
      int ops = 0, kern = 0;
      for (int k = 0; k < v->n_steps; k++)
        if (v->sym_st[k].on) ops += v->steps[k].kind != KILN_CL_STEP_GEN, kern += v->steps[k].kind == KILN_CL_STEP_GEN;
      char serves[64];
      if (y->n == 1) snprintf(serves, sizeof serves, "1..%" PRId64, bound[0]);
      else snprintf(serves, sizeof serves, "every size within them");
      if (v->sym_padded)
        note(p, "symbolic %s: one variant at the bound%s %s serves %s"
             " (padded: a smaller run is a sub-box of the bound's layout; %d kernels and %d ops run over the run's "
             "rows of each block, the other steps at the bound; inputs and outputs copied as rectangles)",
             y->label, y->n > 1 ? "s" : "", bs, serves, kern, ops);
      else
        note(p, "symbolic %s: one variant at the bound%s %s serves %s"
             " (%d kernels launched over the run's rows, %d ops/copies given them)",
             y->label, y->n > 1 ? "s" : "", bs, serves, kern, ops);
    } else {
      y->off = true;
      note(p, "symbolic %s: %s; one variant per input-shape set from now on", y->label, why);
    }
  }
  if (!v->sym_count) return at_bound ? (*out = v, KILN_OK) : kiln_cl_variant_get_exact(p, in, out);
  for (int k = 0; k < y->n; k++) v->sym_n[k] = n[k];
  v->sym_small = !at_bound;
  *out = v;
  return KILN_OK;
}
