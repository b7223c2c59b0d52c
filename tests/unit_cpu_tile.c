/* tests/unit_cpu_tile: the tile executor (cpu_fallback/tile) against the
 * scalar spec evaluator (fuse/spec_eval.c, the oracle) on specs fused from
 * small graphs — chains, broadcasts, strided and stacked views, Pad masks,
 * bools, random chains, tails — under both instruction sets and split
 * into odd ranges; then fused patterns through the cpu plan
 * (cpu_fallback/plan) against the reference backend, with fusion on and
 * off: long chains with views, an intermediate that is also a graph
 * output, a residual block, conv+bias+relu, symbolic sizes.
 *   unit_cpu_tile [-v] */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/plan.h"
#include "cpu_fallback/tile.h"
#include "cpu_fallback/vmath.h"
#include "fuse/group.h"
#include "fuse/predicate.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "reference/exec.h"
#include "reference/ops.h"
#include "tests/graphbuild.h"
#include "tests/testutil.h"

static int passed, failed, verbose;
#include "tests/check.h"

/* float32 tiles against the double-precision oracle: a few ulps of vmath
 * (exp, tanh, sigmoid, erf: <= 2 ulp) and F64 intermediates kept in float */
#define RTOL 2e-5
#define ATOL 1e-6

/* Graphs in code: tests/graphbuild.h (gb_add, gb_cst, ...). */




static void seti(kiln_graph *g, int node, const char *name, int64_t v) {
  if (kiln_edit_set_int(&g->nodes[node], name, v)) exit(2);
}
static void setints(kiln_graph *g, int node, const char *name, int n, const int64_t *v) {
  if (kiln_edit_set_ints(&g->nodes[node], name, v, (size_t)n)) exit(2);
}

static kiln_status ref_node(void *ctx, const kiln_graph *g, const kiln_node *n, const kiln_tensor *const *in,
                            kiln_tensor *out) {
  (void)ctx;
  const kiln_op_def *d = kiln_ref_find_op(n->domain, n->op_type);
  if (!d) return kiln_fail(KILN_E_UNSUPPORTED_OP, "operator %s is not supported", n->op_type);
  bool used[64] = {false};
  for (int k = 0; k < n->n_out && k < 64; k++) used[k] = n->out[k] >= 0;
  kiln_op_call call = {g, n, n->opset, n->n_in, in, n->n_out, out, used};
  return d->run(&call);
}
static const kiln_fuse_eval_hooks hooks = {ref_node, NULL};

/* Random graph inputs (symbolic dims take sym); bools from the sign. */
static kiln_tensor *random_inputs(const kiln_graph *g, int64_t sym) {
  kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_type *ty = &g->values[g->inputs[i]].type;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < ty->rank; d++) dims[d] = ty->dims[d].value >= 0 ? ty->dims[d].value : sym;
    if (kiln_tensor_alloc(&ins[i], ty->dtype, ty->rank, dims)) exit(2);
    for (int64_t k = 0; k < ins[i].numel; k++) {
      double r = 2 * rnd();
      if (ty->dtype == KILN_BOOL) kiln_set_i(&ins[i], k, r > 0);
      else kiln_set_f(&ins[i], k, r);
    }
  }
  return ins;
}

static void free_tensors(kiln_tensor *t, int n) {
  for (int i = 0; t && i < n; i++) kiln_tensor_release(&t[i]);
  free(t);
}

/* ---- tile vs oracle, spec by spec ---- */

/* Runs the tile program of sp over [0, numel) in chunks of `chunk`
 * elements (0: one call), the results into tile[] (by value). */
static kiln_status run_tile(const kiln_fuse_spec *sp, kiln_tile_prog *tp, kiln_tensor *vals, kiln_tensor *res,
                            int64_t chunk, kiln_vm_isa isa) {
  kiln_status s = kiln_tile_bind(tp, vals, NULL);
  if (s) return s;
  void *out[64];
  for (int k = 0; k < sp->n_store; k++) {
    const kiln_fuse_store *st = &sp->store[k];
    kiln_tensor_release(&res[k]);
    if ((s = kiln_tensor_alloc(&res[k], sp->sh->v[st->value].dtype, st->rank, st->shape))) return s;
  }
  if (chunk <= 0) chunk = sp->numel;
  for (int64_t lo = 0; lo < sp->numel && !s; lo += chunk) {
    int64_t hi = lo + chunk < sp->numel ? lo + chunk : sp->numel;
    for (int k = 0; k < sp->n_store; k++)
      out[k] = (char *)res[k].data + (size_t)lo * kiln_dtype_size(res[k].dtype);
    s = kiln_tile_exec(tp, lo, hi, out, NULL, isa);
  }
  return s;
}

/* g's shapes, fusion context, schedule and fused plan (the caller frees
 * what was made, also on an error). */
static kiln_status fuse_graph(kiln_graph *g, kiln_shapes **sh, kiln_fuse_ctx **c, kiln_schedule **s,
                              kiln_fuse_plan **fp) {
  kiln_status st = kiln_shapes_infer(g, sh);
  if (!st) st = kiln_fuse_ctx_new(g, *sh, NULL, c);
  if (!st) st = kiln_schedule_from_graph(g, s);
  if (!st) st = kiln_fuse_schedule(*c, *s, fp);
  return st;
}

/* Fuses g, then runs its schedule twice: every step by the oracle, and
 * every step the tile executor accepts by tiles (under each ISA, whole and
 * in odd chunks); compares every stored value. Returns the number of tile
 * steps checked. */
/* A value table over g: its initializers and, when given, the inputs ins
 * (one per graph input, those without an initializer), wrapped, not copied. */
static kiln_tensor *wrap_values(const kiln_graph *g, const kiln_tensor *ins) {
  kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
  for (int v = 0; vals && v < g->n_values; v++) {
    const kiln_tensor *t = g->values[v].init;
    if (t) kiln_tensor_wrap(&vals[v], t->dtype, t->rank, t->dims, t->numel, t->data);
  }
  for (int i = 0; vals && ins && i < g->n_inputs; i++)
    if (!g->values[g->inputs[i]].init)
      kiln_tensor_wrap(&vals[g->inputs[i]], ins[i].dtype, ins[i].rank, ins[i].dims, ins[i].numel, ins[i].data);
  return vals;
}

static int check_graph(const char *what, kiln_graph *g, int64_t sym) {
  kiln_shapes *sh = NULL;
  kiln_fuse_ctx *c = NULL;
  kiln_schedule *s = NULL;
  kiln_fuse_plan *fp = NULL;
  kiln_status st = fuse_graph(g, &sh, &c, &s, &fp);
  CHECK(!st, "%s: fusing: %s", what, st ? kiln_last_error() : "");
  int checked = 0;
  if (st) goto out;
  kiln_tensor *ins = random_inputs(g, sym);
  int64_t *symvals = calloc((size_t)kiln_symtab_nsyms(sh->tab) + 1, sizeof *symvals);
  for (int k = 0; k < kiln_symtab_nsyms(sh->tab); k++) symvals[k] = sym;
  kiln_tensor *vals = wrap_values(g, ins);
  for (int i = 0; i < s->n_steps && !st; i++) {
    kiln_fuse_spec *sp = fp->spec[i];
    if (!sp) continue;
    if (!sp->bound && (st = kiln_fuse_spec_bind(sp, symvals, kiln_symtab_nsyms(sh->tab)))) {
      CHECK(0, "%s: binding step %d: %s", what, i, kiln_last_error());
      break;
    }
    st = kiln_fuse_eval_spec(sp, vals, &hooks);
    CHECK(!st, "%s: oracle on step %d: %s", what, i, st ? kiln_last_error() : "");
    if (st) break;
    kiln_tile_prog *tp = NULL;
    char why[200];
    if (kiln_tile_compile(sp, &tp, why, sizeof why)) {
      if (verbose) printf("  %s: step %d (%s) declined: %s\n", what, i, kiln_fuse_group_kind_name(sp->kind), why);
      continue;
    }
    if (sp->anchor >= 0) { /* the epilogue is checked through the plan */
      kiln_tile_free(tp);
      continue;
    }
    kiln_tensor res[64];
    memset(res, 0, sizeof res);
    const int64_t chunks[] = {0, 1, 7, KILN_TILE_N - 1, KILN_TILE_N + 3};
    for (int isa = 0; isa < KILN_VM_NISA; isa++) {
      if (isa == KILN_VM_ISA_AVX2 && !kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2)) continue;
      for (size_t ch = 0; ch < sizeof chunks / sizeof *chunks; ch++) {
        if (chunks[ch] == 1 && sp->numel > 4096) continue;
        kiln_status ts = run_tile(sp, tp, vals, res, chunks[ch], (kiln_vm_isa)isa);
        CHECK(!ts, "%s: tile step %d (%s, chunk %lld): %s", what, i, kiln_vm_isa_name((kiln_vm_isa)isa),
              (long long)chunks[ch], ts ? kiln_last_error() : "");
        for (int k = 0; k < sp->n_store && !ts; k++) {
          char msg[400];
          int ok = tu_compare(&res[k], &vals[sp->store[k].value], RTOL, ATOL, msg, sizeof msg, NULL, NULL);
          CHECK(ok, "%s: step %d store '%s' (%s, chunk %lld): %s", what, i, g->values[sp->store[k].value].name,
                kiln_vm_isa_name((kiln_vm_isa)isa), (long long)chunks[ch], msg);
        }
      }
    }
    checked++;
    for (int k = 0; k < 64; k++) kiln_tensor_release(&res[k]);
    kiln_tile_free(tp);
  }
  for (int v = 0; v < g->n_values; v++) kiln_tensor_release(&vals[v]);
  free(vals);
  free(symvals);
  free_tensors(ins, g->n_inputs);
out:
  kiln_fuse_plan_free(fp);
  kiln_schedule_free(s);
  kiln_fuse_ctx_free(c);
  kiln_shapes_free(sh);
  return checked;
}

/* The bench's chain (bench/make_models.py ew_chain) at rows x cols. */
static kiln_graph *ew_chain(int64_t rows, int64_t cols) {
  kiln_graph *g = new_graph(17);
  const int64_t dx[] = {rows, cols};
  input(g, "x", KILN_F32, 2, dx);
  gb_cst(g, "bias", 1, &cols, NULL, 0);
  gb_cst(g, "scale", 0, NULL, (const double[]){1.5}, 0);
  gb_cst(g, "lo", 0, NULL, (const double[]){-0.5}, 0);
  gb_cst(g, "hi", 0, NULL, (const double[]){0.75}, 0);
  gb_add(g, "Mul", "x scale", "y1");
  gb_add(g, "Add", "y1 bias", "y2");
  gb_add(g, "Sigmoid", "y2", "s");
  gb_add(g, "Mul", "y2 s", "y4");
  gb_add(g, "Tanh", "y4", "y5");
  gb_add(g, "Clip", "y5 lo hi", "y6");
  gb_add(g, "Add", "y6 x", "y7");
  gb_add(g, "Relu", "y7", "y");
  output(g, "y");
  return g;
}

static void test_chains(void) {
  const int64_t sizes[][2] = {{1, 1}, {3, 7}, {17, 33}, {64, 256}, {1, 1031}, {5, KILN_TILE_N + 1}};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    char what[64];
    snprintf(what, sizeof what, "ew_chain %lldx%lld", (long long)sizes[k][0], (long long)sizes[k][1]);
    kiln_graph *g = ew_chain(sizes[k][0], sizes[k][1]);
    CHECK(check_graph(what, g, 1) == 1, "%s: one tile step", what);
    kiln_graph_free(g);
  }
  /* every unary op the executor has, over broadcasts of [5,1] and a scalar */
  static const char *unary[] = {"Abs", "Neg", "Exp", "Log", "Reciprocal", "Floor", "Ceil", "Relu", "Sigmoid",
                                "Tanh", "Softplus", "Erf", "Sign", "Softsign", "HardSwish", "Round", "Sin",
                                "Cos", "Atan", "Sinh", "Asinh", "Sqrt", "HardSigmoid", "LeakyRelu", "Elu",
                                "Selu", "Celu", "ThresholdedRelu", "Shrink"};
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 3, (const int64_t[]){4, 5, 6});
  gb_cst(g, "b", 2, (const int64_t[]){5, 1}, NULL, 0);
  gb_cst(g, "k", 0, NULL, (const double[]){0.25}, 0);
  gb_add(g, "Add", "x b", "a0");
  char prev[16] = "a0";
  for (size_t i = 0; i < sizeof unary / sizeof *unary; i++) {
    char o[16], m[16], ins[40];
    snprintf(o, sizeof o, "u%zu", i);
    snprintf(m, sizeof m, "m%zu", i);
    gb_add(g, unary[i], prev, o);
    snprintf(ins, sizeof ins, "%s k", o); /* keep magnitudes moderate */
    gb_add(g, i % 2 ? "Mul" : "Add", ins, m);
    snprintf(prev, sizeof prev, "%s", m);
  }
  output(g, prev);
  CHECK(check_graph("unary ops", g, 1) >= 1, "unary ops: tile steps");
  kiln_graph_free(g);

  /* binary and ternary ops, bools, a bool output */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){7, 9});
  input(g, "y", KILN_F32, 2, (const int64_t[]){1, 9});
  input(g, "m", KILN_BOOL, 2, (const int64_t[]){7, 1});
  gb_add(g, "Sub", "x y", "d");
  gb_add(g, "Div", "d y", "q");
  gb_add(g, "Min", "q x", "mn");
  gb_add(g, "Max", "mn y", "mx");
  gb_add(g, "Pow", "mx y", "pw");
  gb_add(g, "PRelu", "d y", "pr");
  gb_add(g, "Greater", "pr x", "gt");
  gb_add(g, "Less", "d y", "lt");
  gb_add(g, "Equal", "gt lt", "eq");
  gb_add(g, "Xor", "eq m", "xo");
  gb_add(g, "And", "xo gt", "an");
  gb_add(g, "Or", "an m", "orr");
  gb_add(g, "Not", "orr", "no");
  gb_add(g, "Where", "no pw x", "w");
  int ca = gb_add(g, "Cast", "no", "nf");
  seti(g, ca, "to", KILN_F32);
  gb_add(g, "Add", "w nf", "s");
  int md = gb_add(g, "Mod", "s y", "mo");
  seti(g, md, "fmod", 1);
  gb_add(g, "IsNaN", "mo", "isn");
  gb_add(g, "Clip", "mo", "cl");
  gb_add(g, "Mean", "cl x d", "z");
  output(g, "z");
  output(g, "isn");
  output(g, "lt");
  CHECK(check_graph("binary, bool", g, 1) >= 1, "binary, bool: tile steps");
  kiln_graph_free(g);
}

static void test_views(void) {
  /* transpose of memory, a computed value reshaped, a graph-output view */
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 3, (const int64_t[]){2, 3, 4});
  gb_cst(g, "b", 1, (const int64_t[]){3}, NULL, 0);
  gb_cst(g, "c", 2, (const int64_t[]){8, 3}, NULL, 0);
  gb_cst_i64(g, "shp", 2, (const int64_t[]){8, 3});
  int t = gb_add(g, "Transpose", "x", "xt");
  setints(g, t, "perm", 3, (const int64_t[]){2, 0, 1});
  gb_add(g, "Add", "xt b", "a");
  gb_add(g, "Reshape", "a shp", "ar");
  gb_add(g, "Mul", "ar c", "y");
  output(g, "y");
  CHECK(check_graph("views", g, 1) >= 1, "views: a tile step");
  kiln_graph_free(g);

  /* Pad (mask), reversed Slice, Split, Expand, Gather, Squeeze/Unsqueeze,
     a reshape of a transpose (a stack of two views) */
  g = new_graph(17);
  input(g, "z", KILN_F32, 2, (const int64_t[]){3, 4});
  input(g, "w", KILN_F32, 2, (const int64_t[]){6, 8});
  input(g, "q", KILN_F32, 2, (const int64_t[]){4, 12});
  input(g, "e", KILN_F32, 2, (const int64_t[]){1, 6});
  input(g, "v", KILN_F32, 3, (const int64_t[]){5, 4, 6});
  gb_cst_i64(g, "pads", 4, (const int64_t[]){1, 0, 0, 2});
  gb_cst(g, "pv", 0, NULL, (const double[]){0.5}, 0);
  gb_cst_i64(g, "st", 2, (const int64_t[]){1, 7});
  gb_cst_i64(g, "en", 2, (const int64_t[]){5, 1});
  gb_cst_i64(g, "ax", 2, (const int64_t[]){0, 1});
  gb_cst_i64(g, "sp", 2, (const int64_t[]){1, -1});
  gb_cst_i64(g, "es", 2, (const int64_t[]){4, 6});
  gb_cst_i64(g, "gi", -1, (const int64_t[]){-2});
  gb_cst_i64(g, "a0", 1, (const int64_t[]){0});
  gb_cst_i64(g, "s46", 2, (const int64_t[]){4, 6});
  gb_add(g, "Pad", "z pads pv", "zp");
  gb_add(g, "Relu", "zp", "r");
  gb_add(g, "Slice", "w st en ax sp", "ws");
  gb_add(g, "Add", "r ws", "s1");
  int sl = gb_add(g, "Split", "q", "q1 q2");
  seti(g, sl, "axis", 1);
  gb_add(g, "Sub", "s1 q2", "s2");
  gb_add(g, "Expand", "e es", "ee");
  gb_add(g, "Mul", "s2 ee", "s3");
  gb_add(g, "Gather", "v gi", "vg");
  gb_add(g, "Unsqueeze", "vg a0", "vu");
  gb_add(g, "Squeeze", "vu a0", "vs");
  gb_add(g, "Add", "s3 vs", "s4");
  int tq = gb_add(g, "Transpose", "q2", "qt");
  setints(g, tq, "perm", 2, (const int64_t[]){1, 0});
  gb_add(g, "Reshape", "qt s46", "qr");
  gb_add(g, "Add", "s4 qr", "y");
  output(g, "y");
  CHECK(check_graph("views of memory", g, 1) >= 1, "views of memory: a tile step");
  kiln_graph_free(g);

  /* columns of [n, 4] boxes as step-4 and step-2 Slices of the flat view
     (the constant-stride loads), over several tiles */
  g = new_graph(17);
  input(g, "bx", KILN_F32, 2, (const int64_t[]){700, 4});
  gb_cst_i64(g, "flat", 1, (const int64_t[]){-1});
  gb_cst_i64(g, "s0", 1, (const int64_t[]){0});
  gb_cst_i64(g, "s1", 1, (const int64_t[]){1});
  gb_cst_i64(g, "s3", 1, (const int64_t[]){3});
  gb_cst_i64(g, "end", 1, (const int64_t[]){2800});
  gb_cst_i64(g, "ax0", 1, (const int64_t[]){0});
  gb_cst_i64(g, "st4", 1, (const int64_t[]){4});
  gb_cst_i64(g, "st2", 1, (const int64_t[]){2});
  gb_add(g, "Reshape", "bx flat", "bf");
  gb_add(g, "Slice", "bf s0 end ax0 st4", "c0");
  gb_add(g, "Slice", "bf s1 end ax0 st4", "c1");
  gb_add(g, "Slice", "bf s3 end ax0 st4", "c3");
  gb_add(g, "Mul", "c0 c1", "m");
  gb_add(g, "Add", "m c3", "yc");
  gb_add(g, "Slice", "bf s1 end ax0 st2", "h");
  gb_add(g, "Neg", "h", "yh");
  output(g, "yc");
  output(g, "yh");
  CHECK(check_graph("box columns", g, 1) >= 1, "box columns: tile steps");
  kiln_graph_free(g);
}

/* Random chains: unary ops and binary ops with broadcast operands of
 * random shapes, over a random 3-d domain. */
/* ---- Gelu chains run as one op (tile.h KILN_TILE_OP_GELU) ---- */

/* x4 = 4·x, then Gelu of x4 in the form `form`: 0 (x·(erf(x/s)+1))·½
 * (bench/make_models.py), 1 ½·x·(1+erf(x·r)) as (½·x)·u, 2 the same with
 * the Add's and Muls' arguments swapped (forms 1 and 2 with 0.45 for ½); `leak` also makes erf's output a
 * graph output (the chain must then not be folded). */
static kiln_graph *gelu_graph(int form, bool leak) {
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){3, KILN_TILE_N + 37});
  gb_cst(g, "four", 0, NULL, (const double[]){4.0}, 0);
  gb_cst(g, "s", 0, NULL, (const double[]){sqrt(2.0)}, 0);
  gb_cst(g, "r", 0, NULL, (const double[]){1 / sqrt(2.0)}, 0);
  gb_cst(g, "one", 0, NULL, (const double[]){1.0}, 0);
  gb_cst(g, "half", 0, NULL, (const double[]){form == 0 ? 0.5 : 0.45}, 0); /* not a power of 2: the Muls' order shows */
  gb_add(g, "Mul", "x four", "x4");
  if (form == 0) {
    gb_add(g, "Div", "x4 s", "d");
    gb_add(g, "Erf", "d", "e");
    gb_add(g, "Add", "e one", "u");
    gb_add(g, "Mul", "x4 u", "m");
    gb_add(g, "Mul", "m half", "y");
  } else {
    gb_add(g, "Mul", form == 1 ? "x4 r" : "r x4", "d");
    gb_add(g, "Erf", "d", "e");
    gb_add(g, "Add", form == 1 ? "one e" : "e one", "u");
    gb_add(g, "Mul", form == 1 ? "half x4" : "x4 half", "m");
    gb_add(g, "Mul", form == 1 ? "m u" : "u m", "y");
  }
  output(g, "y");
  if (leak) output(g, "e");
  return g;
}

static void check_switch(const char *what, kiln_graph *g, void (*enable)(bool), int (*count)(const kiln_tile_prog *),
                         int expect, bool cross_isa);

/* Each form through the oracle (check_graph), then the tile step with its
 * chain folded against the same program with every op run, bit for bit,
 * under each ISA, and each ISA's result the base twin's bits. */
static void test_gelu(void) {
  for (int form = 0; form < 3; form++)
    for (int leak = 0; leak < 2; leak++) {
      char what[64];
      snprintf(what, sizeof what, "gelu form %d%s", form, leak ? " (erf also an output)" : "");
      check_switch(what, gelu_graph(form, leak), kiln_tile_gelu_enable, kiln_tile_gelu_chains, leak ? 0 : 1, true);
    }
}

static void test_random(void) {
  /* no Floor here: a discontinuity turns a vmath ulp into a difference of 1 */
  static const char *un[] = {"Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Softsign", "Erf", "LeakyRelu", "Exp"};
  static const char *bin[] = {"Add", "Sub", "Mul", "Max", "Min", "Div"};
  for (int trial = 0; trial < 40; trial++) {
    int64_t d[3];
    for (int k = 0; k < 3; k++) d[k] = 1 + (int64_t)((rnd() + 1) * (k == 2 ? 40 : 6));
    kiln_graph *g = new_graph(17);
    input(g, "x", KILN_F32, 3, d);
    char prev[16] = "x";
    int nops = 3 + (int)((rnd() + 1) * 6);
    for (int i = 0; i < nops; i++) {
      char o[16], ins[48];
      snprintf(o, sizeof o, "t%d", i);
      if (rnd() < 0) {
        gb_add(g, un[(int)((rnd() + 1) * 4.5) % 9], prev, o);
      } else {
        char cn[16];
        int64_t cd[3];
        int rank = 1 + (int)((rnd() + 1) * 1.5) % 3;
        for (int k = 0; k < rank; k++) cd[k] = rnd() < 0 ? 1 : d[3 - rank + k];
        snprintf(cn, sizeof cn, "c%d", i);
        gb_cst(g, cn, rank, cd, NULL, 1.5);
        bool swap = rnd() < 0;
        snprintf(ins, sizeof ins, "%s %s", swap ? cn : prev, swap ? prev : cn);
        gb_add(g, bin[(int)((rnd() + 1) * 3) % 6], ins, o);
      }
      snprintf(prev, sizeof prev, "%s", o);
      if (rnd() > 0.7) output(g, o); /* an intermediate that is also an output */
    }
    if (!g->n_outputs || g->values[g->outputs[g->n_outputs - 1]].name != g->values[val(g, prev)].name)
      output(g, prev);
    char what[32];
    snprintf(what, sizeof what, "random chain %d", trial);
    CHECK(check_graph(what, g, 1) >= 1, "%s: tile steps", what);
    kiln_graph_free(g);
  }
}

/* ---- fused patterns through the cpu plan ---- */

/* Runs g on the cpu plan (fusion on, then KILN_FUSION=0) and on the
 * reference; compares every output. *fused gets the fused groups of the
 * fused plan, *arena its arena bytes (fusion on), *arena0 with fusion off. */
static void plan_vs_ref(const char *what, kiln_graph *g, int64_t sym, int *fused, uint64_t *arena, uint64_t *arena0) {
  kiln_tensor *ins = random_inputs(g, sym);
  const kiln_tensor **bound = calloc((size_t)g->n_values + 1, sizeof *bound);
  for (int i = 0; i < g->n_inputs; i++) bound[g->inputs[i]] = &ins[i];
  kiln_tensor *ref = calloc((size_t)g->n_outputs + 1, sizeof *ref);
  kiln_status s = kiln_ref_run(g, bound, ref);
  CHECK(!s, "%s: reference: %s", what, s ? kiln_last_error() : "");
  const char *env = getenv("KILN_FUSION");
  char saved[16];
  snprintf(saved, sizeof saved, "%s", env ? env : "");
  for (int mode = 0; mode < 2 && !s; mode++) {
    setenv("KILN_FUSION", mode ? "0" : "1", 1);
    kiln_cpu_plan *p = NULL;
    kiln_status ps = kiln_cpu_prepare(g, &p);
    if (env) setenv("KILN_FUSION", saved, 1);
    else unsetenv("KILN_FUSION");
    CHECK(!ps, "%s (fusion %s): prepare: %s", what, mode ? "off" : "on", ps ? kiln_last_error() : "");
    if (ps) continue;
    for (int run = 0; run < 2; run++) {
      kiln_tensor *got = calloc((size_t)g->n_outputs + 1, sizeof *got);
      kiln_status rs = kiln_cpu_run(p, g, bound, got);
      CHECK(!rs, "%s (fusion %s): run: %s", what, mode ? "off" : "on", rs ? kiln_last_error() : "");
      for (int o = 0; o < g->n_outputs && !rs; o++) {
        char msg[400];
        int ok = tu_compare(&got[o], &ref[o], RTOL, 1e-5, msg, sizeof msg, NULL, NULL);
        CHECK(ok, "%s (fusion %s, run %d): output '%s': %s", what, mode ? "off" : "on", run,
              g->values[g->outputs[o]].name, msg);
      }
      free_tensors(got, g->n_outputs);
    }
    kiln_cpu_stats st;
    kiln_cpu_plan_stats(p, &st);
    if (verbose)
      printf("  %s (fusion %s): %d fused groups (%d nodes), %d tile steps, arena %llu, %ld epilogues fused, %ld separate\n",
             what, mode ? "off" : "on", st.fused_groups, st.fused_nodes, st.tile_steps,
             (unsigned long long)st.arena_bytes, st.epilogues_fused, st.epilogues_separate);
    if (mode == 0) {
      if (fused) *fused = st.fused_groups;
      if (arena) *arena = st.arena_bytes;
    } else {
      CHECK(st.fused_groups == 0, "%s: KILN_FUSION=0 fused %d groups", what, st.fused_groups);
      if (arena0) *arena0 = st.arena_bytes;
    }
    kiln_cpu_release(p);
  }
  free_tensors(ref, g->n_outputs);
  free_tensors(ins, g->n_inputs);
  free(bound);
}

/* Runs graph g (inputs random, sized for batch 1) with fusion on and off
 * (KILN_FUSION, restored after): the outputs (output 0, numel elements)
 * must be the same bits. Returns the fused plan's residual epilogues run
 * as a loop (kiln_cpu_stats.epilogues_residual), -1 where it failed. */
static long fused_vs_unfused(const char *what, kiln_graph *g, int64_t numel) {
  kiln_tensor *ins = random_inputs(g, 1);
  const kiln_tensor *bound[16] = {0};
  for (int i = 0; i < g->n_inputs; i++) bound[g->inputs[i]] = &ins[i];
  kiln_tensor got[2] = {{0}, {0}};
  long residual = -1;
  const char *fz0 = getenv("KILN_FUSION");
  char keep[16];
  snprintf(keep, sizeof keep, "%s", fz0 ? fz0 : "");
  for (int mode = 0; mode < 2; mode++) {
    setenv("KILN_FUSION", mode ? "0" : "1", 1);
    kiln_cpu_plan *pm = NULL;
    kiln_status ms = kiln_cpu_prepare(g, &pm);
    if (!ms) ms = kiln_cpu_run(pm, g, bound, &got[mode]);
    CHECK(!ms, "%s (fusion %s): %s", what, mode ? "off" : "on", ms ? kiln_last_error() : "");
    if (pm && mode == 0 && !ms) {
      kiln_cpu_stats rs;
      kiln_cpu_plan_stats(pm, &rs);
      residual = rs.epilogues_residual;
    }
    if (pm) kiln_cpu_release(pm);
  }
  if (fz0) setenv("KILN_FUSION", keep, 1);
  else unsetenv("KILN_FUSION");
  CHECK(got[0].numel == numel && got[1].numel == got[0].numel &&
            !memcmp(got[0].data, got[1].data, (size_t)got[0].numel * sizeof(float)),
        "%s: fused and unfused plans differ in their bits", what);
  kiln_tensor_release(&got[0]);
  kiln_tensor_release(&got[1]);
  free_tensors(ins, g->n_inputs);
  return residual;
}

static void test_plan(void) {
  int fused = 0;
  uint64_t arena = 0, arena0 = 0;
  /* a long chain with broadcasts and views, and an intermediate that is
     also a graph output */
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 3, (const int64_t[]){3, 8, 20});
  input(g, "r", KILN_F32, 3, (const int64_t[]){20, 8, 3});
  gb_cst(g, "b", 2, (const int64_t[]){8, 1}, NULL, 0);
  gb_cst(g, "s", 0, NULL, (const double[]){0.5}, 0);
  gb_cst_i64(g, "shp", 2, (const int64_t[]){24, 20});
  int t = gb_add(g, "Transpose", "r", "rt");
  setints(g, t, "perm", 3, (const int64_t[]){2, 1, 0});
  gb_add(g, "Mul", "x s", "a1");
  gb_add(g, "Add", "a1 b", "a2");
  gb_add(g, "Tanh", "a2", "a3");
  gb_add(g, "Add", "a3 rt", "a4");
  gb_add(g, "Sigmoid", "a4", "a5");
  gb_add(g, "Mul", "a5 a4", "a6");
  gb_add(g, "Reshape", "a6 shp", "a7");
  gb_add(g, "Relu", "a7", "a8");
  gb_add(g, "Sub", "a8 s", "a9");
  gb_add(g, "Exp", "a9", "y");
  output(g, "y");
  output(g, "a4");
  plan_vs_ref("chain with views", g, 1, &fused, &arena, &arena0);
  CHECK(fused >= 1, "chain with views: %d fused groups", fused);
  kiln_graph_free(g);

  /* the bench chain: fusion leaves no intermediate in the arena */
  g = ew_chain(33, 129);
  plan_vs_ref("ew_chain", g, 1, &fused, &arena, &arena0);
  CHECK(fused == 1 && arena == 0 && arena0 > 0, "ew_chain: %d fused groups, arena %llu fused, %llu unfused", fused,
        (unsigned long long)arena, (unsigned long long)arena0);
  kiln_graph_free(g);

  /* conv + bias + relu, then a residual block: conv, BN, relu, conv, add the input, relu */
  const int64_t x4[] = {2, 4, 9, 9}, w4[] = {4, 4, 3, 3}, c1[] = {4}, c4[] = {4, 1, 1};
  g = new_graph(17);
  input(g, "x", KILN_F32, 4, x4);
  gb_cst(g, "w", 4, w4, NULL, 0);
  gb_cst(g, "w2", 4, w4, NULL, 0);
  gb_cst(g, "cb", 1, c1, NULL, 0);
  gb_cst(g, "b3", 3, c4, NULL, 0);
  gb_cst(g, "sc", 1, c1, NULL, 0);
  gb_cst(g, "bb", 1, c1, NULL, 0);
  gb_cst(g, "mu", 1, c1, NULL, 0);
  gb_cst(g, "va", 1, c1, NULL, 1.5);
  int cv = gb_add(g, "Conv", "x w", "c");
  setints(g, cv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  gb_add(g, "Add", "c b3", "cb1");
  gb_add(g, "Relu", "cb1", "h");
  cv = gb_add(g, "Conv", "h w2 cb", "c2");
  setints(g, cv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  gb_add(g, "BatchNormalization", "c2 sc bb mu va", "n2");
  gb_add(g, "Add", "n2 x", "s2");
  gb_add(g, "Relu", "s2", "y");
  output(g, "y");
  plan_vs_ref("conv+bias+relu, residual", g, 1, &fused, NULL, NULL);
  CHECK(fused >= 2, "conv+bias+relu, residual: %d fused groups", fused);
  kiln_graph_free(g);

  /* conv + bias + relu + maxpool, and a global average pool after an epilogue */
  g = new_graph(17);
  input(g, "x", KILN_F32, 4, x4);
  gb_cst(g, "w", 4, w4, NULL, 0);
  gb_cst(g, "b3", 3, c4, NULL, 0);
  cv = gb_add(g, "Conv", "x w", "c");
  setints(g, cv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  gb_add(g, "Add", "c b3", "cb");
  gb_add(g, "Relu", "cb", "r");
  int pl = gb_add(g, "MaxPool", "r", "mp");
  setints(g, pl, "kernel_shape", 2, (const int64_t[]){2, 2});
  setints(g, pl, "strides", 2, (const int64_t[]){2, 2});
  cv = gb_add(g, "Conv", "mp w", "c2");
  gb_add(g, "Sigmoid", "c2", "s2");
  gb_add(g, "GlobalAveragePool", "s2", "y");
  output(g, "y");
  output(g, "r");
  plan_vs_ref("conv+bias+relu+maxpool", g, 1, &fused, NULL, NULL);
  CHECK(fused == 2, "conv+bias+relu+maxpool: %d fused groups", fused);
  kiln_graph_free(g);

  /* Gemm + Relu, MatMul + Tanh */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){5, 16});
  gb_cst(g, "w1", 2, (const int64_t[]){16, 8}, NULL, 0);
  gb_cst(g, "b1", 1, (const int64_t[]){8}, NULL, 0);
  gb_cst(g, "w2", 2, (const int64_t[]){8, 8}, NULL, 0);
  gb_add(g, "Gemm", "x w1 b1", "h");
  gb_add(g, "Relu", "h", "hr");
  gb_add(g, "MatMul", "hr w2", "m");
  gb_add(g, "Tanh", "m", "y");
  output(g, "y");
  output(g, "h");
  plan_vs_ref("mlp", g, 1, &fused, NULL, NULL);
  CHECK(fused >= 2, "mlp: %d fused groups", fused);
  kiln_graph_free(g);

  /* MatMul + a bias row (either operand order), MatMul * a scalar: the
     GEMM adds the row or multiplies in its store (kiln_tile_col_bias,
     kiln_tile_scale; sgemm.h kiln_sgemm_wide_pb_cb, kiln_sgemm_wide_cb) —
     the bits of the plan without fusion (MatMul, then Add or Mul); with a
     Relu after the bias, or a Mul by a row, the epilogue runs as before.
     Forms 4 and 5 multiply Q·K^T (K an input, transposed: B packed per
     call) as the attention scores do */
  static const char *const forms[] = {"matmul+bias", "bias+matmul", "matmul+bias+relu", "matmul*scale",
                                      "scale*q.kT", "q.kT*row"};
  for (int form = 0; form < 6; form++) {
    g = new_graph(17);
    input(g, "x", KILN_F32, 3, (const int64_t[]){2, 20, 70});
    if (form >= 4) {
      input(g, "k", KILN_F32, 3, (const int64_t[]){2, 45, 70});
      int t = gb_add(g, "Transpose", "k", "w");
      setints(g, t, "perm", 3, (const int64_t[]){0, 2, 1});
    } else {
      gb_cst(g, "w", 2, (const int64_t[]){70, 45}, NULL, 0);
    }
    gb_cst(g, "b", 1, (const int64_t[]){45}, NULL, 0);
    gb_cst(g, "s", 0, NULL, (const double[]){0.125}, 0);
    gb_add(g, "MatMul", "x w", "m");
    if (form < 3) gb_add(g, "Add", form == 1 ? "b m" : "m b", form == 2 ? "a" : "y");
    else gb_add(g, "Mul", form == 3 ? "m s" : form == 4 ? "s m" : "m b", "y");
    if (form == 2) gb_add(g, "Relu", "a", "y");
    output(g, "y");
    const char *what = forms[form];
    plan_vs_ref(what, g, 1, &fused, NULL, NULL);
    CHECK(fused == 1, "%s: %d fused groups", what, fused);
    fused_vs_unfused(what, g, 2 * 20 * 45);
    kiln_graph_free(g);
  }

  /* Conv + a residual Add (+ Relu, + Clip; the Add either operand order): the epilogue as one plain loop per
     block (kiln_tile_residual, plan.c ep_residual) — the bits of the plan without fusion, and counted; a residual
     broadcast along the channels (not read densely) runs the tile executor's epilogue */
  static const char *const rforms[] = {"conv+res", "res+conv", "conv+res+relu", "conv+res+clip", "conv+bcast+relu"};
  for (int form = 0; form < 5; form++) {
    g = new_graph(17);
    input(g, "x", KILN_F32, 4, (const int64_t[]){1, 8, 20, 20});
    input(g, "r", KILN_F32, 4, form == 4 ? (const int64_t[]){1, 1, 20, 20} : (const int64_t[]){1, 16, 20, 20});
    gb_cst(g, "w", 4, (const int64_t[]){16, 8, 3, 3}, NULL, 0);
    gb_cst(g, "b", 1, (const int64_t[]){16}, NULL, 0);
    gb_cst(g, "lo", 0, NULL, (const double[]){-0.5}, 0);
    gb_cst(g, "hi", 0, NULL, (const double[]){0.75}, 0);
    int c = gb_add(g, "Conv", "x w b", "c");
    setints(g, c, "kernel_shape", 2, (const int64_t[]){3, 3});
    setints(g, c, "pads", 4, (const int64_t[]){1, 1, 1, 1});
    gb_add(g, "Add", form == 1 ? "r c" : "c r", form >= 2 ? "a" : "y");
    if (form == 2 || form == 4) gb_add(g, "Relu", "a", "y");
    if (form == 3) gb_add(g, "Clip", "a lo hi", "y");
    output(g, "y");
    const char *what = rforms[form];
    plan_vs_ref(what, g, 1, &fused, NULL, NULL);
    long residual = fused_vs_unfused(what, g, 16 * 400);
    CHECK(residual == (form == 4 ? 0 : 1), "%s: %ld residual epilogues as a loop (want %d)", what, residual,
          form == 4 ? 0 : 1);
    kiln_graph_free(g);
  }

  /* a symbolic batch: bound at the first run, a smaller run, a larger one */
  g = new_graph(17);
  int xv = input(g, "x", KILN_F32, 2, (const int64_t[]){1, 12});
  g->values[xv].type.dims[0].value = -1;
  g->values[xv].type.dims[0].param = kiln_strdup("N");
  gb_cst(g, "b", 1, (const int64_t[]){12}, NULL, 0);
  gb_add(g, "Add", "x b", "a");
  gb_add(g, "Sigmoid", "a", "s");
  gb_add(g, "Mul", "s x", "y");
  output(g, "y");
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  CHECK(!s, "symbolic: prepare: %s", s ? kiln_last_error() : "");
  const int64_t ns[] = {6, 2, 11, 3};
  for (size_t k = 0; k < 4 && !s; k++) {
    kiln_tensor *ins = random_inputs(g, ns[k]);
    const kiln_tensor *bound[8] = {0};
    bound[g->inputs[0]] = &ins[0];
    kiln_tensor got = {0}, ref = {0};
    kiln_status a = kiln_cpu_run(p, g, bound, &got), b = kiln_ref_run(g, bound, &ref);
    char msg[400] = "";
    CHECK(!a && !b && tu_compare(&got, &ref, RTOL, 1e-5, msg, sizeof msg, NULL, NULL), "symbolic N=%lld: %s %s",
          (long long)ns[k], a || b ? kiln_last_error() : "", msg);
    kiln_tensor_release(&got);
    kiln_tensor_release(&ref);
    free_tensors(ins, g->n_inputs);
  }
  kiln_cpu_stats st;
  const char *fz = getenv("KILN_FUSION");
  if (p) {
    kiln_cpu_plan_stats(p, &st);
    CHECK(st.plans == 2 && st.fused_groups == (fz && !strcmp(fz, "0") ? 0 : 1), "symbolic: %d plans, %d fused groups",
          st.plans, st.fused_groups);
  }
  kiln_cpu_release(p);
  kiln_graph_free(g);
}

/* The vector tile ops against the scalar twin, bit for bit: the AVX2
 * kernels and, where the CPU has AVX-512F, the 16-lane ones, for each op
 * they write with intrinsics, on values with NaN, +-0, +-inf, denormals and
 * ties between the operands, at lengths around the vector widths (tails),
 * unaligned, and in place over the first argument. */
static void test_twins(void) {
#if defined(__x86_64__) || defined(__i386__)
  static const int ops[] = {KILN_FUSE_ADD, KILN_FUSE_SUB, KILN_FUSE_MUL, KILN_FUSE_DIV,
                            KILN_FUSE_MIN, KILN_FUSE_MAX, KILN_FUSE_RELU, KILN_FUSE_CLIP};
  if (!kiln_vm_cpu_has_avx2()) return;
  bool w512 = kiln_vm_cpu_has_avx512() != 0;
  enum { M = 600 };
  static float a[M + 1], b[M + 1], c[M + 1], y0[M + 1], y1[M + 1], y2[M + 1];
  const float special[] = {NAN, -NAN, 0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 1.0f, -1.0f};
  unsigned r = 12345;
  for (int i = 0; i <= M; i++) {
    r = r * 1103515245u + 12345u;
    a[i] = (i % 7 == 0) ? special[(r >> 8) % 10] : (float)((int)(r >> 16) % 2001 - 1000) / 100.0f;
    r = r * 1103515245u + 12345u;
    b[i] = (i % 5 == 0) ? special[(r >> 8) % 10] : (i % 3 == 0) ? a[i] : (float)((int)(r >> 16) % 2001 - 1000) / 100.0f;
    c[i] = b[i] + 1.0f; /* Clip: lo b, hi c */
  }
  const int lens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 512, M};
  int bad = 0, runs = 0;
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++)
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
      for (int off = 0; off < 2; off++) {
        kiln_tile_op o = {ops[k], {0, 0, 0}, 0};
        int n = lens[li] - (lens[li] == M ? off : 0);
        const float *pa = a + off, *pb = b + off, *pc = c + off;
        kiln_tile_eval_base(&o, n, pa, pb, pc, y0);
        kiln_tile_eval_avx2(&o, n, pa, pb, pc, y1);
        bad += memcmp(y0, y1, sizeof *y0 * (size_t)n) != 0;
        if (w512) {
          kiln_tile_eval_avx512(&o, n, pa, pb, pc, y2);
          bad += memcmp(y0, y2, sizeof *y0 * (size_t)n) != 0;
          memcpy(y2, pa, sizeof *y2 * (size_t)n); /* in place over the first argument */
          kiln_tile_eval_avx512(&o, n, y2, pb, pc, y2);
          bad += memcmp(y0, y2, sizeof *y0 * (size_t)n) != 0;
        }
        runs++;
      }
  CHECK(bad == 0 && runs > 0, "vector tile ops vs the scalar twin: %d of %d runs differ (AVX-512 %s)", bad, runs,
        w512 ? "checked" : "not on this CPU");
  if (!w512) return;
  /* the box columns' moves: a column of an [n, 4] tensor placed at the end
     of a page whose next page is inaccessible (a read past the column's
     last row faults), and four columns into rows, at lengths around 16 */
  enum { R = 4 * 150 };
  static float rows0[R + 4], rows1[R + 4];
  long page = sysconf(_SC_PAGESIZE);
  char *map = mmap(NULL, (size_t)(2 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED || mprotect(map + page, (size_t)page, PROT_NONE)) {
    CHECK(0, "mmap/mprotect for the column loads");
    return;
  }
  float *src = (float *)(void *)(map + page) - R; /* R floats ending at the inaccessible page */
  for (int i = 0; i < R; i++) src[i] = a[i % M] + (float)i; /* NaN, -0 and denormals among them */
  int mbad = 0, mruns = 0;
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
    for (int col = 0; col < 4; col++) {
      int n = lens[li] > R / 4 ? R / 4 : lens[li];
      const float *s = src + R - 4 * n + col; /* column col of the last n rows */
      memset(y0, 0x5a, sizeof y0);
      memset(y2, 0x5a, sizeof y2);
      kiln_tile_load_s4_base(y0, s, n);
      kiln_tile_load_s4_avx512(y2, s, n);
      mbad += memcmp(y0, y2, sizeof y0) != 0;
      for (int i = 0; i < n && !mbad; i++) mbad += memcmp(&y2[i], &s[4 * i], sizeof *y2) != 0;
      if (col == 0) { /* all four columns of the last n rows at once */
        static float q0[4][R / 4 + 16], q1[4][R / 4 + 16];
        memset(q0, 0x5a, sizeof q0);
        memset(q1, 0x5a, sizeof q1);
        kiln_tile_load_cols4_base(q0[0], q0[1], q0[2], q0[3], s, n);
        kiln_tile_load_cols4_avx512(q1[0], q1[1], q1[2], q1[3], s, n);
        mbad += memcmp(q0, q1, sizeof q0) != 0;
        for (int i = 0; i < n && !mbad; i++)
          for (int j = 0; j < 4; j++) mbad += memcmp(&q1[j][i], &s[4 * i + j], sizeof *s) != 0;
      }
      memset(rows0, 0x5a, sizeof rows0);
      memset(rows1, 0x5a, sizeof rows1);
      kiln_tile_rows4_base(rows0, a + col, b, c, a + 1, n);
      kiln_tile_rows4_avx512(rows1, a + col, b, c, a + 1, n);
      mbad += memcmp(rows0, rows1, sizeof rows0) != 0;
      mruns++;
    }
  munmap(map, (size_t)(2 * page));
  CHECK(mbad == 0 && mruns > 0, "AVX-512 box-column loads and row interleave vs the scalar twins: %d of %d runs differ",
        mbad, mruns);
#endif
}

/* ---- linear runs in one pass (tile.h kiln_tile_seq) ---- */

/* a and b hold the same bits where not both NaN. */
static bool same_bits_nan(const float *a, const float *b, int n) {
  for (int i = 0; i < n; i++)
    if (!(isnan(a[i]) && isnan(b[i])) && memcmp(&a[i], &b[i], sizeof *a)) return false;
  return true;
}

/* Random runs of every step kind kiln_tile_seq_op takes (value so far on
 * either side, operands uniform or tiles, NaN / ±0 / ±inf / denormals
 * among them) at lengths around the strip (64) and the vector (16):
 * kiln_tile_seq_avx512 against the same steps one by one through
 * kiln_tile_eval_avx512 (what the executor ran before), also in place over
 * its input, and against its twin kiln_tile_seq_base: bit for bit, with
 * any NaN equal to any NaN — where two NaNs meet in an add or a multiply
 * the compiler's operand order picks the one that comes out, in either
 * path, and vmath's NaN payloads may differ from the twin's. */
static void test_seq_kernel(void) {
#if defined(__x86_64__) || defined(__i386__)
  static const int ops[] = {KILN_FUSE_ADD,  KILN_FUSE_SUB,     KILN_FUSE_MUL,  KILN_FUSE_DIV,
                            KILN_FUSE_MIN,  KILN_FUSE_MAX,     KILN_FUSE_RELU, KILN_FUSE_CLIP,
                            KILN_FUSE_TANH, KILN_FUSE_SIGMOID, KILN_FUSE_EXP,  KILN_FUSE_ERF};
  enum { M = 600, NOPS = sizeof ops / sizeof *ops };
  for (int k = 0; k < NOPS; k++) CHECK(kiln_tile_seq_op(ops[k]), "op %d may be a step of a run", ops[k]);
  CHECK(!kiln_tile_seq_op(KILN_FUSE_SQRT) && !kiln_tile_seq_op(KILN_FUSE_WHERE), "sqrt and where are not steps");
  if (!kiln_vm_cpu_has_avx512()) {
    if (verbose) printf("  (no AVX-512F here: the runs' vector pass is not checked)\n");
    return;
  }
  static float in[3][M + 1], uni[3 * KILN_TILE_SEQ_MAX], ubuf[3][M + 1], r0[M + 1], y1[M + 1], y2[M + 1], y3[M + 1];
  const float special[] = {NAN, -NAN, 0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 1.0f, -1.0f};
  unsigned r = 777;
#define NEXT() (r = r * 1103515245u + 12345u, r >> 8)
  for (int t = 0; t < 3; t++)
    for (int i = 0; i <= M; i++)
      in[t][i] = i % (7 + t) == 0 ? special[NEXT() % 10] : (float)((int)(NEXT() % 2001) - 1000) / 250.0f;
  const int lens[] = {1, 7, 15, 16, 17, 63, 64, 65, 100, 512, M};
  int bad_op = 0, bad_twin = 0, bad_inplace = 0, bad_stream = 0, runs = 0;
  static _Alignas(64) float y4[M + 17];
  for (int trial = 0; trial < 200; trial++) {
    kiln_tile_seq q;
    memset(&q, 0, sizeof q);
    q.n = trial == 0 ? KILN_TILE_SEQ_MAX : 1 + (int)(NEXT() % 8);
    int off = (int)(NEXT() % 2);
    q.x = in[NEXT() % 3] + off;
    for (int k = 0; k < q.n; k++) {
      kiln_tile_seq_step *st = &q.s[k];
      int op = ops[NEXT() % NOPS];
      st->op = (kiln_tile_op){op, {0, 0, 0}, 0};
      bool unary = op == KILN_FUSE_RELU || op == KILN_FUSE_TANH || op == KILN_FUSE_SIGMOID || op == KILN_FUSE_EXP ||
                   op == KILN_FUSE_ERF;
      st->n_args = op == KILN_FUSE_CLIP ? 3 : unary ? 1 : 2;
      st->pos = st->n_args == 2 ? (int)(NEXT() % 2) : 0;
      for (int j = 0; j < st->n_args; j++) {
        if (j == st->pos) continue;
        st->uniform[j] = NEXT() % 3 == 0;
        if (st->uniform[j]) {
          float *u = &uni[3 * k + j];
          *u = NEXT() % 4 == 0 ? special[NEXT() % 10] : (float)((int)(NEXT() % 201) - 100) / 50.0f;
          st->a[j] = u;
        } else {
          st->a[j] = in[NEXT() % 3] + off;
        }
      }
    }
    for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
      int n = lens[li] - (lens[li] == M ? off : 0);
      memcpy(r0, q.x, sizeof *r0 * (size_t)n); /* the steps one by one */
      for (int k = 0; k < q.n; k++) {
        const kiln_tile_seq_step *st = &q.s[k];
        const float *arg[3] = {NULL, NULL, NULL};
        for (int j = 0; j < st->n_args; j++) {
          if (j == st->pos) {
            arg[j] = r0;
          } else if (st->uniform[j]) {
            for (int i = 0; i < n; i++) ubuf[j][i] = st->a[j][0];
            arg[j] = ubuf[j];
          } else {
            arg[j] = st->a[j];
          }
        }
        kiln_tile_eval_avx512(&st->op, n, arg[0], arg[1], arg[2], r0);
      }
      memset(y1, 0x5a, sizeof y1);
      kiln_tile_seq_avx512(&q, n, y1);
      const unsigned char pat[sizeof(float)] = {0x5a, 0x5a, 0x5a, 0x5a};
      bad_op += !same_bits_nan(r0, y1, n) || memcmp(&y1[n], pat, sizeof pat) != 0; /* nothing past n */
      kiln_tile_seq_base(&q, n, y2);
      bad_twin += !same_bits_nan(y1, y2, n);
      kiln_tile_seq qs = q; /* strips at 64-byte-aligned y streamed (at y one float on: none aligned) */
      qs.stream = true;
      for (int sh = 0; sh < 2; sh++) {
        memset(y4, 0x5a, sizeof y4);
        kiln_tile_seq_avx512(&qs, n, y4 + sh);
        bad_stream += !same_bits_nan(y1, y4 + sh, n) || memcmp(&y4[sh + n], pat, sizeof pat) != 0 ||
                      (sh && memcmp(y4, pat, sizeof pat) != 0);
      }
      kiln_tile_seq qi = q; /* in place over its input */
      memcpy(y3, q.x, sizeof *y3 * (size_t)n);
      qi.x = y3;
      kiln_tile_seq_avx512(&qi, n, y3);
      bad_inplace += !same_bits_nan(r0, y3, n);
      memcpy(y4, q.x, sizeof *y4 * (size_t)n); /* and streamed, in place at an aligned y */
      qi.x = y4, qi.stream = true;
      kiln_tile_seq_avx512(&qi, n, y4);
      bad_inplace += !same_bits_nan(r0, y4, n);
      runs++;
    }
  }
#undef NEXT
  CHECK(bad_op == 0 && runs > 0, "runs in one pass vs their steps one by one (AVX-512): %d of %d differ", bad_op, runs);
  CHECK(bad_inplace == 0, "runs in one pass in place over their input: %d of %d differ", bad_inplace, runs);
  CHECK(bad_twin == 0, "runs in one pass vs the scalar twin: %d of %d differ (NaN = NaN)", bad_twin, runs);
  CHECK(bad_stream == 0, "runs in one pass streamed to y (aligned and not) vs stored: %d of %d differ or wrote "
        "outside y", bad_stream, runs);
#endif
}

/* The bench's chain (Mul, Add + bias row, Sigmoid, Mul, Tanh, Clip, Add,
 * Relu) on [3, KILN_TILE_N + 37]; `leak` also makes the Sigmoid·y Mul a
 * graph output (a stored value ends its run). */
static kiln_graph *seq_graph(bool leak) {
  enum { W = KILN_TILE_N + 37 };
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){3, W});
  gb_cst(g, "scale", 0, NULL, (const double[]){1.5}, 0);
  gb_cst(g, "bias", 1, (const int64_t[]){W}, NULL, -0.5);
  gb_cst(g, "lo", 0, NULL, (const double[]){-0.5}, 0);
  gb_cst(g, "hi", 0, NULL, (const double[]){0.75}, 0);
  gb_add(g, "Mul", "x scale", "y1");
  gb_add(g, "Add", "y1 bias", "y2");
  gb_add(g, "Sigmoid", "y2", "s");
  gb_add(g, "Mul", "y2 s", "y4");
  gb_add(g, "Tanh", "y4", "y5");
  gb_add(g, "Clip", "y5 lo hi", "y6");
  gb_add(g, "Add", "y6 x", "y7");
  gb_add(g, "Relu", "y7", "y");
  output(g, "y");
  if (leak) output(g, "y4");
  return g;
}

/* g through the oracle (check_graph), then its one tile step run with a
 * switch on (found: count() == expect) and off (count() == 0), bit for
 * bit, under each ISA, over the whole domain and in odd ranges; cross_isa:
 * also every ISA's first store the first ISA's (the base twin's) bits.
 * Frees g. */
static void check_switch(const char *what, kiln_graph *g, void (*enable)(bool), int (*count)(const kiln_tile_prog *),
                         int expect, bool cross_isa) {
  CHECK(check_graph(what, g, 1) == 1, "%s: one tile step", what);
  kiln_shapes *sh = NULL;
  kiln_fuse_ctx *c = NULL;
  kiln_schedule *s = NULL;
  kiln_fuse_plan *fp = NULL;
  kiln_status st = fuse_graph(g, &sh, &c, &s, &fp);
  CHECK(!st, "%s: fusing", what);
  kiln_tensor *ins = st ? NULL : random_inputs(g, 1);
  kiln_tensor *vals = wrap_values(g, ins);
  int steps = 0;
  for (int i = 0; !st && i < s->n_steps; i++) {
    kiln_fuse_spec *sp = fp->spec[i];
    kiln_tile_prog *tp = NULL;
    char why[200];
    if (!sp || kiln_fuse_spec_bind(sp, NULL, 0) || kiln_tile_compile(sp, &tp, why, sizeof why)) continue;
    steps++;
    kiln_tensor one[64], each[64];
    memset(one, 0, sizeof one), memset(each, 0, sizeof each);
    void *first = NULL;
    for (int isa = 0; isa < KILN_VM_NISA; isa++) {
      if (isa == KILN_VM_ISA_AVX2 && !kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2)) continue;
      const int64_t chunks[] = {0, 7, 99, KILN_TILE_N + 3};
      for (size_t ch = 0; ch < sizeof chunks / sizeof *chunks; ch++) {
        kiln_status a = run_tile(sp, tp, vals, one, chunks[ch], (kiln_vm_isa)isa);
        int found = count(tp);
        enable(false);
        kiln_status b = a ? a : run_tile(sp, tp, vals, each, chunks[ch], (kiln_vm_isa)isa);
        int none = count(tp);
        enable(true);
        CHECK(!a && !b, "%s: running (%s)", what, a || b ? kiln_last_error() : "");
        CHECK(found == expect && none == 0, "%s: %d found (%d when off, %d expected)", what, found, none, expect);
        for (int k = 0; k < sp->n_store && !a && !b; k++)
          CHECK(!memcmp(one[k].data, each[k].data, kiln_tensor_bytes(&each[k])),
                "%s: store %d (%s, chunk %lld): the bits differ from the program's without them", what, k,
                kiln_vm_isa_name((kiln_vm_isa)isa), (long long)chunks[ch]);
        if (!cross_isa || a) continue;
        size_t nb = kiln_tensor_bytes(&one[0]);
        if (!first) {
          if ((first = malloc(nb))) memcpy(first, one[0].data, nb);
        } else { /* every ISA (AVX-512 where the CPU has it), every split: the base twin's bits */
          CHECK(!memcmp(first, one[0].data, nb), "%s: %s, chunk %lld = base, bit for bit", what,
                kiln_vm_isa_name((kiln_vm_isa)isa), (long long)chunks[ch]);
        }
      }
    }
    free(first);
    for (int k = 0; k < 64; k++) kiln_tensor_release(&one[k]), kiln_tensor_release(&each[k]);
    kiln_tile_free(tp);
  }
  CHECK(steps == 1, "%s: %d tile step(s)", what, steps);
  for (int v = 0; v < g->n_values; v++) kiln_tensor_release(&vals[v]);
  free(vals);
  free_tensors(ins, g->n_inputs);
  kiln_fuse_plan_free(fp);
  kiln_schedule_free(s);
  kiln_fuse_ctx_free(c);
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* The chain with its runs found (three: Mul Add | Sigmoid Mul | Tanh Clip
 * Add Relu, two heavy ops never in one run) against the same program with
 * none. */
static void test_seq(void) {
  for (int leak = 0; leak < 2; leak++) {
    char what[64];
    snprintf(what, sizeof what, "linear runs%s", leak ? " (a stored value inside)" : "");
    check_switch(what, seq_graph(leak), kiln_tile_seq_enable, kiln_tile_seq_runs, 3, false);
  }
}

/* ---- column groups (four stride-4 columns loaded in one pass) ---- */

/* The four columns of boxes [7, 110, 4] (rows 0..99 of each of the 7
 * blocks: a rank-2 view, so a tile spans several runs) combined, each
 * column read once, loaded out of column order. */
static kiln_graph *cols_graph(int64_t rows) {
  kiln_graph *g = new_graph(17);
  input(g, "bx", KILN_F32, 3, (const int64_t[]){7, rows + 10, 4});
  gb_cst_i64(g, "r0", 1, (const int64_t[]){0});
  gb_cst_i64(g, "r1", 1, (const int64_t[]){rows});
  gb_cst_i64(g, "ax1", 1, (const int64_t[]){1});
  gb_cst_i64(g, "ax2", 1, (const int64_t[]){2});
  const char *cs[] = {"0", "1", "2", "3", "4"};
  for (int k = 0; k < 5; k++) {
    char nm[16];
    snprintf(nm, sizeof nm, "k%s", cs[k]);
    gb_cst_i64(g, nm, 1, (const int64_t[]){k});
  }
  gb_add(g, "Slice", "bx r0 r1 ax1", "rows");
  gb_add(g, "Slice", "rows k2 k3 ax2", "c2");
  gb_add(g, "Slice", "rows k0 k1 ax2", "c0");
  gb_add(g, "Slice", "rows k3 k4 ax2", "c3");
  gb_add(g, "Slice", "rows k1 k2 ax2", "c1");
  gb_add(g, "Mul", "c2 c0", "m");
  gb_add(g, "Sub", "m c3", "d");
  gb_add(g, "Exp", "c1", "e");
  gb_add(g, "Add", "d e", "y");
  output(g, "y");
  return g;
}

/* The group found (one) against the four column loads. */
static void test_cols(void) {
  check_switch("column groups", cols_graph(100), kiln_tile_cols_enable, kiln_tile_col_groups, 1, false);
}

/* One bind of tp on vals, checked: the oracle evaluates the spec on its own
 * wrap of the same inputs and every store must match it. Releases vals and
 * oracle (arrays from wrap_values). */
static void check_bind(const char *what, const kiln_graph *g, const kiln_fuse_spec *sp, kiln_tile_prog *tp,
                       kiln_tensor *vals, kiln_tensor *oracle) {
  kiln_tensor res[64];
  memset(res, 0, sizeof res);
  kiln_status st = kiln_fuse_eval_spec(sp, oracle, &hooks);
  CHECK(!st, "%s: oracle: %s", what, st ? kiln_last_error() : "");
  kiln_status ts = st ? st : run_tile(sp, tp, vals, res, 0, kiln_vm_isa_active());
  CHECK(!ts, "%s: %s", what, ts ? kiln_last_error() : "");
  for (int j = 0; j < sp->n_store && !ts; j++) {
    char msg[400];
    int ok = tu_compare(&res[j], &oracle[sp->store[j].value], RTOL, ATOL, msg, sizeof msg, NULL, NULL);
    CHECK(ok, "%s: store '%s': %s", what, g->values[sp->store[j].value].name, msg);
  }
  for (int j = 0; j < 64; j++) kiln_tensor_release(&res[j]);
  for (int v = 0; v < g->n_values; v++) {
    kiln_tensor_release(&oracle[v]);
    kiln_tensor_release(&vals[v]);
  }
  free(oracle);
  free(vals);
}

/* One program bound again and again, as a plan's runs bind it: new data
 * at the same layout (only the pointers change), a strided view in its
 * place (the accessor's kind changes), back to dense, and the spec bound
 * again: each binding's results match the oracle on that binding's data
 * (random data: results read from a stale binding would not). */
static void test_rebind(void) {
  const int64_t rows = 5, cols = KILN_TILE_N + 9;
  kiln_graph *g = ew_chain(rows, cols);
  kiln_shapes *sh = NULL;
  kiln_fuse_ctx *c = NULL;
  kiln_schedule *s = NULL;
  kiln_fuse_plan *fp = NULL;
  kiln_status st = fuse_graph(g, &sh, &c, &s, &fp);
  CHECK(!st, "rebind: fusing: %s", st ? kiln_last_error() : "");
  kiln_fuse_spec *sp = NULL;
  for (int i = 0; !st && i < s->n_steps; i++)
    if (fp->spec[i] && fp->spec[i]->n_nodes > 1) sp = fp->spec[i];
  kiln_tile_prog *tp = NULL;
  char why[200];
  CHECK(sp && !kiln_tile_compile(sp, &tp, why, sizeof why), "rebind: a tile program for the chain");
  if (!tp) goto out;
  if (!sp->bound) CHECK(!kiln_fuse_spec_bind(sp, NULL, 0), "rebind: binding the spec");
  int x = g->inputs[0];
  kiln_tensor *ins[3] = {random_inputs(g, 1), random_inputs(g, 1), random_inputs(g, 1)};
  /* ins[2]'s x stored transposed: bound as a strided view of it */
  kiln_tensor xt = {0};
  CHECK(!kiln_tensor_alloc(&xt, KILN_F32, 2, (const int64_t[]){cols, rows}), "rebind: alloc");
  for (int64_t r = 0; r < rows; r++)
    for (int64_t q = 0; q < cols; q++) ((float *)xt.data)[q * rows + r] = ((float *)ins[2][0].data)[r * cols + q];
  const int order[] = {0, 1, 2, 0, 1, -1, 1};  /* -1: bind the spec again */
  for (size_t k = 0; k < sizeof order / sizeof *order; k++) {
    if (order[k] < 0) {
      CHECK(!kiln_fuse_spec_bind(sp, NULL, 0), "rebind: binding the spec again");
      continue;
    }
    kiln_tensor *oracle = wrap_values(g, ins[order[k]]);
    kiln_tensor *vals = wrap_values(g, ins[order[k]]);
    if (order[k] == 2) { /* the same values, read through strides */
      int64_t strides[2] = {1, rows};
      kiln_tensor_view(&vals[x], &xt, 2, (const int64_t[]){rows, cols}, strides, 0);
    }
    char what[64];
    snprintf(what, sizeof what, "rebind %zu (input set %d)", k, order[k]);
    check_bind(what, g, sp, tp, vals, oracle);
  }
  kiln_tensor_release(&xt);
  for (int k = 0; k < 3; k++) free_tensors(ins[k], g->n_inputs);
out:
  kiln_tile_free(tp);
  kiln_fuse_plan_free(fp);
  kiln_schedule_free(s);
  kiln_fuse_ctx_free(c);
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* A column group found on one run's storage is checked on the next: inputs
 * a and b [n, 4] given the same memory make a[:, 0], a[:, 1], b[:, 2],
 * b[:, 3] one layout (one group); given their own memory on the next bind
 * (only the pointers change) they are two layouts again, and the results
 * must be b's columns, not a's. */
static void test_cols_rebind(void) {
  const int64_t n = KILN_TILE_N + 37;
  kiln_graph *g = new_graph(17);
  input(g, "a", KILN_F32, 2, (const int64_t[]){n, 4});
  input(g, "b", KILN_F32, 2, (const int64_t[]){n, 4});
  gb_cst_i64(g, "ax", 1, (const int64_t[]){1});
  const char *ks[] = {"k0", "k1", "k2", "k3", "k4"};
  for (int k = 0; k < 5; k++) gb_cst_i64(g, ks[k], 1, (const int64_t[]){k});
  gb_add(g, "Slice", "a k0 k1 ax", "c0");
  gb_add(g, "Slice", "a k1 k2 ax", "c1");
  gb_add(g, "Slice", "b k2 k3 ax", "c2");
  gb_add(g, "Slice", "b k3 k4 ax", "c3");
  gb_add(g, "Mul", "c0 c1", "m");
  gb_add(g, "Add", "m c2", "p");
  gb_add(g, "Sub", "p c3", "y");
  output(g, "y");
  kiln_shapes *sh = NULL;
  kiln_fuse_ctx *c = NULL;
  kiln_schedule *s = NULL;
  kiln_fuse_plan *fp = NULL;
  kiln_status st = fuse_graph(g, &sh, &c, &s, &fp);
  CHECK(!st, "cols rebind: fusing: %s", st ? kiln_last_error() : "");
  kiln_fuse_spec *sp = NULL;
  for (int i = 0; !st && i < s->n_steps; i++)
    if (fp->spec[i] && fp->spec[i]->n_nodes > 1) sp = fp->spec[i];
  kiln_tile_prog *tp = NULL;
  char why[200];
  CHECK(sp && (sp->bound || !kiln_fuse_spec_bind(sp, NULL, 0)) && !kiln_tile_compile(sp, &tp, why, sizeof why),
        "cols rebind: a tile program for the graph");
  kiln_tensor *ins = tp ? random_inputs(g, 1) : NULL;
  for (int pass = 0; tp && pass < 3; pass++) { /* shared, own, shared */
    kiln_tensor *vals = wrap_values(g, ins);
    int va = g->inputs[0], vb = g->inputs[1];
    if (pass != 1) vals[vb].data = vals[va].data; /* b given a's memory */
    kiln_tensor *oracle = wrap_values(g, ins);
    if (pass != 1) oracle[vb].data = oracle[va].data;
    char what[32];
    snprintf(what, sizeof what, "cols rebind %d", pass);
    check_bind(what, g, sp, tp, vals, oracle);
    int groups = kiln_tile_col_groups(tp); /* the bind's analysis, kept after the run */
    if (pass < 2) /* the third bind may keep the second's analysis (no group): the same results */
      CHECK(groups == (pass == 0), "cols rebind %d: %d group(s)", pass, groups);
  }
  free_tensors(ins, g->n_inputs);
  kiln_tile_free(tp);
  kiln_fuse_plan_free(fp);
  kiln_schedule_free(s);
  kiln_fuse_ctx_free(c);
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* kiln_cpu_residual against its definition, element by element: blocks
 * of every length 0..40 (groups of 8 and every tail), with and without a
 * clip, NaN, -0 and inf in the inputs, nothing written past n. */
static void test_residual(void) {
  float r[48], y[48], want[48];
  int bad = 0, cases = 0;
  for (int i = 0; i < 48; i++) r[i] = (float)rnd() * 4 - 2;
  r[3] = NAN, r[17] = -0.0f, r[29] = INFINITY;
  static const float clips[3][2] = {{-INFINITY, INFINITY}, {0.0f, INFINITY}, {-0.5f, 0.75f}};
  for (int ci = 0; ci < 3; ci++)
    for (int64_t n = 0; n <= 40; n++) {
      float lo = clips[ci][0], hi = clips[ci][1];
      for (int64_t i = 0; i < 48; i++) {
        y[i] = i == 17 ? -0.0f : (float)(i % 7) - 3.0f + 0.25f * (float)i; /* 17: -0 + -0, against lo 0 too */
        float v = y[i];
        if (i < n) {
          v = v + r[i];
          v = v < lo ? lo : v;
          v = v > hi ? hi : v;
        }
        want[i] = v;
      }
      kiln_cpu_residual(y, r, n, lo, hi);
      bad += memcmp(y, want, sizeof y) != 0;
      cases++;
    }
  CHECK(!bad, "kiln_cpu_residual: %d of %d blocks differ from the definition (or wrote past n)", bad, cases);
}

/* Domains of KILN_TILE_BIG_MIN elements and more run tiles of
 * KILN_TILE_N_BIG: the chain (its uniform operands filled to that length)
 * and a column group (four tiles of that length a group) against the
 * oracle; the group also bit for bit against its loads one by one. Last:
 * its draws of rnd() would change the random chains above. */
static void test_long_tiles(void) {
  kiln_graph *g = ew_chain(1025, 1024);
  CHECK(check_graph("ew_chain 1025x1024 (long tiles)", g, 1) == 1, "ew_chain 1025x1024: one tile step");
  kiln_graph_free(g);
  check_switch("column groups, long tiles", cols_graph(150000), kiln_tile_cols_enable, kiln_tile_col_groups, 1,
               false);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-v")) verbose = 1;
  test_twins();
  test_seq_kernel();
  test_chains();
  test_views();
  test_random();
  test_plan();
  test_gelu(); /* last: its draws of rnd() would change the random chains above */
  test_seq();
  test_cols();
  test_rebind();
  test_cols_rebind();
  test_residual();
  test_long_tiles();
  printf("unit_cpu_tile: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
