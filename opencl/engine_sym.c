/* opencl/engine_sym: a symbolic dim — one variant, compiled at the dim's
 * bound, serves every run of that size or smaller. The bound is the
 * model's "kiln.bound.<name>" (metadata_props), else the first run's size;
 * a run beyond it compiles a variant at its size, which becomes the bound.
 * One symbol, at any axis of the graph inputs; every value keeps the
 * bound's layout. Where only dims of 1 precede the symbol in every value
 * (a batch), a smaller run's rows are a prefix of it: generated kernels
 * are launched over the run's items (their literal inner sizes and strides
 * unchanged), the CLBlast GEMMs get the run's M, copies and host transfers
 * the run's bytes. Where other dims precede it (a sequence dim in
 * [N,S,H]), a smaller run is a sub-box (padded): inputs and outputs are
 * copied as rectangles, and kernels and GEMMs run over the run's rows of
 * each block (the index of the dims before the symbol), the other steps at
 * the bound over the padding too. A graph that cannot be run this way (an
 * op mixing the symbol's positions, a shape folded at the bound, a host
 * step or device op without a run-time size, non-float padded values, two
 * symbols) falls back to a variant per input-shape set; KILN_LOG=info and
 * the KILN_DUMP file <graph>.opencl-sym.txt say which and why. See
 * opencl/ENGINE.md, "Symbolic dims". */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/dump.h"
#include "ir/graph_edit.h"
#include "opencl/engine_int.h"

typedef struct kiln_cl_sym kiln_cl_sym;
struct kiln_cl_sym {
  char name[KILN_SYMDIM_MAX_NAME + 1];
  int64_t bound; /* 0: none yet (the first run's rows) */
  bool off;      /* declined: a variant per input-shape set */
  int *sym_ax;   /* per input of p->orig: the axis that is the symbol (-1: none) */
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
  const char *name = NULL, *why = NULL;
  for (int i = 0; i < g->n_inputs && !why; i++) {
    const kiln_value *val = &g->values[g->inputs[i]];
    if (val->init) continue;
    if (p->spec[i]) why = "inputs set shapes (a variant per value set)";
    bool seen = false;
    for (int d = 0; d < val->type.rank && !why; d++) {
      const kiln_dim *x = &val->type.dims[d];
      if (!x->param && x->value >= 0) continue;
      if (!x->param) why = "an input dim is unknown (no dim_param)";
      else if (name && strcmp(name, x->param)) why = "more than one dim_param";
      else if (seen) why = "the dim_param twice in one input";
      else name = x->param, seen = true;
    }
  }
  if (!name) return KILN_OK;
  for (int k = 0; k < g->n_nodes && !why; k++) /* a shape read at run time would be folded at the bound */
    if (!*g->nodes[k].domain && (!strcmp(g->nodes[k].op_type, "Shape") || !strcmp(g->nodes[k].op_type, "Size")))
      why = "the graph reads shapes (Shape/Size): they would be folded at the bound";
  if (why) {
    note(p, "symbolic dim %s: %s; one variant per input-shape set", name, why);
    return KILN_OK;
  }
  kiln_cl_sym *y = kiln_calloc(1, sizeof *y);
  if (y) y->sym_ax = kiln_calloc((size_t)g->n_inputs + 1, sizeof *y->sym_ax);
  if (!y || !y->sym_ax) {
    if (y) kiln_free(y);
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling an OpenCL plan");
  }
  snprintf(y->name, sizeof y->name, "%s", name);
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_value *val = &g->values[g->inputs[i]];
    y->sym_ax[i] = -1;
    for (int d = 0; d < val->type.rank && !val->init; d++)
      if (val->type.dims[d].param) y->sym_ax[i] = d;
  }
  char key[KILN_SYMDIM_MAX_NAME + 16];
  snprintf(key, sizeof key, "kiln.bound.%s", name);
  for (int i = 0; i < g->n_props; i++)
    if (!strcmp(g->prop_keys[i], key)) {
      char *end = NULL;
      long long b = strtoll(g->prop_vals[i], &end, 10);
      if (end && !*end && b >= 1) y->bound = b; /* (ir/shape rejects a bad one at check) */
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
  if (in_list(op, elementwise)) {
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

/* Values of v that scale with the symbol, from v's graph inferred again
 * with the symbolic inputs' axis as the symbol: exactly one dim of each
 * such value is c * symbol, its other dims constant. */
static kiln_status scaling_values(const kiln_cl_plan *p, kiln_cl_variant *v, int64_t bound, sym_vals *sv, char *why,
                                  size_t wsz) {
  kiln_graph *c = NULL;
  kiln_shapes *sh = NULL;
  kiln_status s = kiln_edit_clone_shared(v->g, &c); /* freed here: may borrow v->g's weights */
  if (s) return s;
  for (int i = 0; i < c->n_inputs; i++) {
    kiln_value *val = &c->values[c->inputs[i]];
    int ax = v->in_map[i] >= 0 ? p->sym->sym_ax[v->in_map[i]] : -1;
    if (val->init || ax < 0 || val->type.rank <= ax) continue;
    char *nm = kiln_strdup(p->sym->name);
    if (!nm) {
      kiln_graph_free(c);
      return kiln_fail(KILN_E_NOMEM, "out of memory checking a symbolic dim");
    }
    kiln_free(val->type.dims[ax].param);
    val->type.dims[ax] = (kiln_dim){-1, nm};
  }
  if ((s = kiln_shapes_infer(c, &sh))) {
    snprintf(why, wsz, "shapes at a symbolic size: %s", kiln_last_error());
    kiln_error_clear();
    kiln_graph_free(c);
    return KILN_OK;
  }
  int sym = kiln_sym_find(sh->tab, p->sym->name);
  int64_t pinned = 0;
  kiln_dimx x1 = KILN_DIMX_NONE;
  if (sym < 0) snprintf(why, wsz, "the symbol is not used");
  else if (kiln_sym_value(sh->tab, sym, &pinned))
    snprintf(why, wsz, "the rewritten graph fixes %s = %" PRId64 " (a shape folded at the bound)", p->sym->name, pinned);
  else
    s = kiln_dimx_sym(sh->tab, p->sym->name, &x1);
  for (int w = 0; w < c->n_values && !s && !*why; w++) {
    const kiln_vshape *a = &sh->v[w], *b = &v->sh->v[w];
    const char *vn = c->values[w].name ? c->values[w].name : "";
    if (a->data_dependent) {
      snprintf(why, wsz, "value '%s' has a data-dependent shape", vn);
      break;
    }
    if (a->rank < 0) continue; /* unused */
    if (a->rank != b->rank) {
      snprintf(why, wsz, "value '%s': rank differs at a symbolic size", vn);
      break;
    }
    int ax = -1;
    for (int d = 0; d < a->rank && !*why; d++)
      if (!kiln_dimx_is_const(sh->tab, a->dims[d], NULL)) {
        if (ax >= 0) snprintf(why, wsz, "value '%s': the symbol reaches dims %d and %d", vn, ax, d);
        ax = d;
      }
    if (*why || ax < 0) continue;
    /* dim ax = c * S, and c * bound at the bound */
    int64_t c1 = 0, cb = 0, outer = 1;
    kiln_dimx want = KILN_DIMX_NONE;
    int ns = kiln_symtab_nsyms(sh->tab);
    int64_t *vals = kiln_calloc((size_t)ns + 1, sizeof *vals);
    if (!vals) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory checking a symbolic dim");
      break;
    }
    for (int k = 0; k < ns; k++) vals[k] = KILN_DIM_UNSET;
    vals[sym] = 1;
    bool ok = !kiln_dimx_eval(sh->tab, a->dims[ax], vals, ns, &c1) && c1 >= 1 &&
              !kiln_dimx_mul_const(sh->tab, x1, c1, &want) && want == a->dims[ax] &&
              kiln_dimx_is_const(v->sh->tab, b->dims[ax], &cb) && cb == c1 * bound;
    for (int d = 0; d < ax && ok; d++) {
      int64_t x = 0;
      ok = kiln_dimx_is_const(v->sh->tab, b->dims[d], &x);
      outer *= x;
    }
    kiln_free(vals);
    kiln_error_clear();
    if (!ok) {
      char e[64];
      snprintf(why, wsz, "value '%s': dim %d is %s, not a multiple of %s", vn, ax,
               kiln_dimx_str(sh->tab, a->dims[ax], e, sizeof e), p->sym->name);
      break;
    }
    sv->dep[w] = true;
    sv->ax[w] = (int8_t)ax;
    sv->outer[w] = outer;
  }
  kiln_shapes_free(sh);
  kiln_graph_free(c);
  return s;
}

/* A padded variant's step st: the number of blocks (the dims before the
 * symbol, the same for every output) it may run over the run's rows of,
 * else 0 (it runs at the bound): a work-item kernel, a reduction kernel
 * that takes a group offset, a GEMM op with its rows in the blocks. */
enum { SYM_MAX_BLOCKS = 64 }; /* more blocks: a launch (a GEMM) each costs more than the padding saves */

static int32_t box_of(const kiln_cl_variant *v, const kiln_cl_step *st, const sym_vals *sv, int64_t bound) {
  const kiln_node *n = &v->g->nodes[st->node];
  int64_t outer = -1;
  if (st->kind == KILN_CL_STEP_GEN) {
    const kiln_cl_kernel_sig *sig = &v->sig[st->kern];
    for (int a = 0; a < sig->n_args; a++) {
      int w = sig->args[a].value;
      if (!sig->args[a].output) continue;
      if (!sv->dep[w] || (outer >= 0 && sv->outer[w] != outer)) return 0;
      outer = sv->outer[w];
    }
    size_t unit = sig->local ? sig->local : 1;
    bool ranged = sig->local ? sig->group_offset : !sig->twin[0];
    if (outer < 1 || outer > SYM_MAX_BLOCKS || sig->n_obs || !ranged || (size_t)sig->n_items % unit ||
        ((size_t)sig->n_items / unit) % ((size_t)outer * (size_t)bound))
      return 0;
    if (sig->row_block_items && ((size_t)sig->n_items / outer / (size_t)bound) % (size_t)sig->row_block_items)
      return 0; /* a step of the symbol ends inside an item's rows (codegen.h row_block_items) */
    return (int32_t)outer;
  }
  if (st->kind != KILN_CL_STEP_OP || n->n_in < 1 || n->n_out < 1 || n->in[0] < 0 || n->out[0] < 0) return 0;
  int a = n->in[0], c = n->out[0];
  if (!sv->dep[a] || !sv->dep[c] || sv->outer[a] != sv->outer[c] || sv->outer[c] > SYM_MAX_BLOCKS) return 0;
  return kiln_cl_op_box_ok(st->op, sv->outer[c], bound) ? (int32_t)sv->outer[c] : 0;
}

/* Decides whether v (compiled at bound) runs at a smaller size; sets
 * v->sym_bound, sym_dep, sym_step, sym_axis, sym_outer, sym_padded, or
 * leaves sym_bound 0 with why. */
static kiln_status check_variant(kiln_cl_plan *p, kiln_cl_variant *v, int64_t bound, char *why, size_t wsz) {
  *why = 0;
  if (v->host_only) {
    snprintf(why, wsz, "the graph runs on the host (data-dependent shapes)");
    return KILN_OK;
  }
  const kiln_graph *g = v->g;
  size_t nv = (size_t)g->n_values + 1;
  sym_vals sv = {kiln_calloc(nv, sizeof *sv.dep), kiln_calloc(nv, sizeof *sv.ax), kiln_calloc(nv, sizeof *sv.outer)};
  bool *stp = kiln_calloc((size_t)v->n_steps + 1, sizeof *stp);
  int32_t *box = kiln_calloc((size_t)v->n_steps + 1, sizeof *box);
  kiln_status s = sv.dep && sv.ax && sv.outer && stp && box
                      ? KILN_OK
                      : kiln_fail(KILN_E_NOMEM, "out of memory checking a symbolic dim");
  if (!s) s = scaling_values(p, v, bound, &sv, why, wsz);
  /* padded: some value has dims other than 1 before the symbol's axis; a
     smaller run is then a sub-box of the bound's layout, every step runs at
     the bound and computes the padding too: only float (and bool) values,
     where that garbage cannot trap (an integer division could) */
  bool padded = false;
  for (int w = 0; w < g->n_values && !s && !*why; w++) padded = padded || (sv.dep[w] && sv.outer[w] > 1);
  for (int w = 0; w < g->n_values && !s && !*why && padded; w++)
    if (sv.dep[w] && !(KILN_T(v->sh->v[w].dtype) & (KILN_TS_FLOAT | KILN_T(KILN_BOOL))))
      snprintf(why, wsz, "value '%s' is not float, and a padded layout would compute its padding",
               g->values[w].name ? g->values[w].name : "");
  for (int k = 0; k < g->n_nodes && !s && !*why; k++) {
    const kiln_node *n = &g->nodes[k];
    bool touches = false;
    for (int i = 0; i < n->n_in; i++) touches = touches || (n->in[i] >= 0 && sv.dep[n->in[i]]);
    for (int i = 0; i < n->n_out; i++) touches = touches || (n->out[i] >= 0 && sv.dep[n->out[i]]);
    char lbl[128];
    if (touches && !node_ok(v, n, &sv, why, wsz) && !*why)
      snprintf(why, wsz, "node %s (%s) mixes or moves the positions of %s", kiln_node_label(g, n, lbl, sizeof lbl),
               n->op_type, p->sym->name);
  }
  char lbl[128];
  const bool *dep = sv.dep;
  for (int k = 0; k < v->n_steps && !s && !*why; k++) {
    const kiln_cl_step *st = &v->steps[k];
    const kiln_node *n = &g->nodes[st->node];
    bool any = false, all = true;
    if (st->kind == KILN_CL_STEP_GEN) {
      const kiln_cl_kernel_sig *sig = &v->sig[st->kern];
      for (int a = 0; a < sig->n_args; a++) {
        bool d = dep[sig->args[a].value];
        any = any || d;
        if (sig->args[a].output) all = all && d;
      }
      bool split = sig->row_block_items && (sig->n_items % bound || (sig->n_items / bound) % sig->row_block_items);
      if (any && !padded && (!all || sig->n_items % bound || split)) {
        snprintf(why, wsz, "kernel %s (from %s, %s) does not take the run's rows", sig->name,
                 kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
        break;
      }
    } else {
      for (int i = 0; i < n->n_in; i++) any = any || (n->in[i] >= 0 && dep[n->in[i]]);
      for (int i = 0; i < n->n_out; i++) any = any || (n->out[i] >= 0 && dep[n->out[i]]);
      if (any && st->kind == KILN_CL_STEP_HOST) {
        snprintf(why, wsz, "node %s (%s) runs on the host", kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
        break;
      }
      bool gemm = !strcmp(n->op_type, "MatMul") || !strcmp(n->op_type, "Gemm");
      bool rowwise = !strcmp(n->op_type, "Softmax") || !strcmp(n->op_type, "LogSoftmax") ||
                     !strcmp(n->op_type, "LayerNormalization") || /* over a later axis (node_ok) */
                     in_list(n->op_type, reductions);              /* the symbol's axis kept (node_ok) */
      bool image = in_list(n->op_type, images);
      kiln_cl_rows_kind rk = image ? KILN_CL_ROWS_IMAGES : rowwise ? KILN_CL_ROWS_ROWWISE : KILN_CL_ROWS_GEMM;
      /* (padded: the op runs at the bound, over the padding too) */
      if (any && st->kind == KILN_CL_STEP_OP &&
          (!(gemm || rowwise || image) || (!padded && !kiln_cl_op_rows_ok(st->op, bound, rk)))) {
        snprintf(why, wsz, "device op of node %s (%s: %s) takes no run-time rows", kiln_node_label(g, n, lbl, sizeof lbl),
                 n->op_type, kiln_cl_op_describe(st->op));
        break;
      }
      if (any && st->kind == KILN_CL_STEP_COPY && !(dep[n->in[0]] && dep[n->out[0]])) {
        snprintf(why, wsz, "copy of node %s (%s) changes the rows", kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
        break;
      }
    }
    stp[k] = any && !padded;
    if (any && padded) box[k] = box_of(v, st, &sv, bound);
    stp[k] = stp[k] || box[k] > 0;
  }
  if (!s && !*why) {
    v->sym_dep = sv.dep;
    v->sym_axis = sv.ax;
    v->sym_outer = sv.outer;
    v->sym_step = stp;
    v->sym_box = box;
    v->sym_padded = padded;
    v->sym_bound = v->sym_n = bound;
    sv = (sym_vals){NULL, NULL, NULL};
    stp = NULL;
    box = NULL;
  }
  kiln_free(box);
  kiln_free(sv.dep);
  kiln_free(sv.ax);
  kiln_free(sv.outer);
  kiln_free(stp);
  return s;
}

/* The model's kiln.bound.<name>, if any, raised to n in the plan's copy of
 * the graph (shape inference holds the variants to it). */
static kiln_status raise_bound(kiln_cl_plan *p, int64_t n) {
  kiln_graph *g = p->orig;
  char key[KILN_SYMDIM_MAX_NAME + 16], val[32];
  snprintf(key, sizeof key, "kiln.bound.%s", p->sym->name);
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

kiln_status kiln_cl_sym_variant_get(kiln_cl_plan *p, const kiln_tensor *const *in, kiln_cl_variant **out) {
  kiln_cl_sym *y = p->sym;
  const kiln_graph *g0 = p->orig;
  *out = NULL;
  int64_t n = -1;
  for (int i = 0; i < g0->n_inputs; i++) {
    int ax = y->sym_ax[i];
    if (ax < 0) continue;
    if (!in[i] || in[i]->rank <= ax) return kiln_cl_variant_get_exact(p, in, out);
    if (n < 0) n = in[i]->dims[ax];
    else if (n != in[i]->dims[ax]) return kiln_cl_variant_get_exact(p, in, out); /* inputs disagree: shapes say why */
  }
  if (n < 1) return kiln_cl_variant_get_exact(p, in, out);
  if (n > y->bound) {
    if (y->bound)
      kiln_log(KILN_LOG_INFO, "opencl plan '%s': %s = %" PRId64 " exceeds its bound %" PRId64 ": compiling at %" PRId64,
               g0->name ? g0->name : "", y->name, n, y->bound, n);
    y->bound = n;
    kiln_status s = raise_bound(p, n);
    if (s) return s;
  }
  if (y->off) return kiln_cl_variant_get_exact(p, in, out);
  int64_t bound = y->bound;
  const kiln_tensor **at = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *at);
  kiln_tensor *fake = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *fake);
  kiln_status s = at && fake ? KILN_OK : kiln_fail(KILN_E_NOMEM, "out of memory keying an OpenCL plan");
  for (int i = 0; i < g0->n_inputs && !s; i++) {
    at[i] = in[i];
    if (y->sym_ax[i] < 0) continue;
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, in[i]->dims, sizeof *dims * (size_t)in[i]->rank);
    dims[y->sym_ax[i]] = bound;
    kiln_tensor_wrap(&fake[i], in[i]->dtype, in[i]->rank, dims, 0, NULL);
    at[i] = &fake[i];
  }
  kiln_cl_variant *v = NULL;
  if (!s) s = kiln_cl_variant_get_exact(p, at, &v);
  kiln_free(at);
  kiln_free(fake);
  if (s && n != bound && s != KILN_E_NOMEM) { /* e.g. the bound's arena exceeds the device: this size alone */
    y->off = true;
    note(p, "symbolic dim %s: compiling at the bound %" PRId64 " failed (%s); one variant per input-shape set from now on",
         y->name, bound, kiln_last_error());
    kiln_error_clear();
    return kiln_cl_variant_get_exact(p, in, out);
  }
  if (s) return s;
  if (!v->sym_checked) {
    char why[400];
    v->sym_checked = true;
    if ((s = check_variant(p, v, bound, why, sizeof why))) return s;
    if (v->sym_bound) {
      int ops = 0, kern = 0;
      for (int k = 0; k < v->n_steps; k++)
        if (v->sym_step[k]) ops += v->steps[k].kind != KILN_CL_STEP_GEN, kern += v->steps[k].kind == KILN_CL_STEP_GEN;
      if (v->sym_padded)
        note(p, "symbolic dim %s: one variant at the bound %" PRId64 " serves 1..%" PRId64
             " (padded: a smaller run is a sub-box of the bound's layout; %d kernels and %d ops run over the run's "
             "rows of each block, the other steps at the bound; inputs and outputs copied as rectangles)",
             y->name, bound, bound, kern, ops);
      else
        note(p, "symbolic dim %s: one variant at the bound %" PRId64 " serves 1..%" PRId64
             " (%d kernels launched over the run's rows, %d ops/copies given them)",
             y->name, bound, bound, kern, ops);
    } else {
      y->off = true;
      note(p, "symbolic dim %s: %s; one variant per input-shape set from now on", y->name, why);
    }
  }
  if (!v->sym_bound) return n == bound ? (*out = v, KILN_OK) : kiln_cl_variant_get_exact(p, in, out);
  v->sym_n = n;
  *out = v;
  return KILN_OK;
}
