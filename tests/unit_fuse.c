/* tests/unit_fuse: unit tests of fuse/ — the kind table, every rule of the
 * "may these fuse?" predicate with its reason, grouping of hand-built graphs
 * (elementwise chain, conv epilogue and pooling, softmax, layer norm, stored
 * intermediates, no duplicated reduction, views, symbolic dims), the spec
 * printer, spec evaluation against the reference interpreter (hand-built
 * graphs and the ONNX node tests), and grouping of the bench models.
 *   unit_fuse [-v] [-m BENCH_MODELS_DIR] [NODE_TEST_ROOT]
 * The bench models default to build/bench/models of this checkout
 * (KILN_BENCH_MODELS overrides); KILN_FUSE_BENCH_EVAL=1 also evaluates the
 * fused models with float inputs against the reference (slow: seconds). */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/group.h"
#include "fuse/kinds.h"
#include "fuse/predicate.h"
#include "fuse/spec.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/onnx_import.h"
#include "ir/rewrite.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "reference/exec.h"
#include "reference/ops.h"
#include "tests/casefile.h"
#include "tests/testutil.h"
#include "tests/graphbuild.h"

static int passed, failed, verbose;
#include "tests/check.h"

#define RTOL 1e-6
#define ATOL 1e-9

/* Graphs are built with tests/graphbuild.h (gb_add, gb_cst, ...). */

static void seti(kiln_graph *g, int node, const char *name, int64_t v) {
  if (kiln_edit_set_int(&g->nodes[node], name, v)) exit(2);
}
static void setf(kiln_graph *g, int node, const char *name, float v) {
  if (kiln_edit_set_float(&g->nodes[node], name, v)) exit(2);
}
static void setints(kiln_graph *g, int node, const char *name, int n, const int64_t *v) {
  if (kiln_edit_set_ints(&g->nodes[node], name, v, (size_t)n)) exit(2);
}

/* ------------------------------------------------------------------ */
/* fusing and running                                                  */

static kiln_status ref_node(void *ctx, const kiln_graph *g, const kiln_node *n, const kiln_tensor *const *in,
                            kiln_tensor *out) {
  (void)ctx;
  const kiln_op_def *d = kiln_ref_find_op(n->domain, n->op_type);
  if (!d) return kiln_fail(KILN_E_UNSUPPORTED_OP, "operator %s is not supported", n->op_type);
  kiln_status s = kiln_ref_check_node(g, n);
  if (s) return s;
  bool used[64] = {false};
  if (n->n_out > 64) return kiln_fail(KILN_E_UNSUPPORTED_OP, "too many outputs");
  for (int k = 0; k < n->n_out; k++) used[k] = n->out[k] >= 0;
  kiln_op_call call = {g, n, n->opset, n->n_in, in, n->n_out, out, used};
  return d->run(&call);
}

static const kiln_fuse_eval_hooks hooks = {ref_node, NULL};

/* A graph with its shapes, fusion context, schedule and fusion plan. */
typedef struct fz {
  kiln_graph *g;
  bool owns_g;
  kiln_shapes *sh;
  kiln_fuse_ctx *ctx;
  kiln_schedule *s;
  kiln_fuse_plan *plan;
} fz;

static void fz_free(fz *f) {
  kiln_fuse_plan_free(f->plan);
  kiln_schedule_free(f->s);
  kiln_fuse_ctx_free(f->ctx);
  kiln_shapes_free(f->sh);
  if (f->owns_g) kiln_graph_free(f->g);
  memset(f, 0, sizeof *f);
}

/* Infers shapes, makes the context, the schedule (one step per node) and
 * fuses it. Returns 0 (message printed when loud) on failure. */
static int fz_make(fz *f, kiln_graph *g, bool owns, const kiln_fuse_opts *o, bool loud) {
  memset(f, 0, sizeof *f);
  f->g = g;
  f->owns_g = owns;
  kiln_status s = kiln_shapes_infer(g, &f->sh);
  if (!s) s = kiln_fuse_ctx_new(g, f->sh, o, &f->ctx);
  if (!s) s = kiln_schedule_from_graph(g, &f->s);
  if (!s) s = kiln_fuse_schedule(f->ctx, f->s, &f->plan);
  if (s) {
    if (loud) printf("fusing failed: %s\n", kiln_last_error());
    fz_free(f);
    return 0;
  }
  return 1;
}

/* The spec of the step covering node, or NULL. */
static const kiln_fuse_spec *spec_of(const fz *f, int node, int *step) {
  for (int i = 0; i < f->s->n_steps; i++)
    for (int k = 0; k < f->s->steps[i].n_nodes; k++)
      if (f->s->steps[i].nodes[k] == node) {
        if (step) *step = i;
        return f->plan->spec[i];
      }
  return NULL;
}

/* Runs the fused schedule, every step through kiln_fuse_eval_spec. ins:
 * one per graph input, in order (initializers skipped when undefined). */
static kiln_status fz_run(const fz *f, const kiln_tensor *ins, kiln_tensor *outs) {
  const kiln_graph *g = f->g;
  kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
  kiln_status s = KILN_OK;
  for (int v = 0; v < g->n_values; v++) {
    const kiln_tensor *t = g->values[v].init;
    if (t) kiln_tensor_wrap(&vals[v], t->dtype, t->rank, t->dims, t->numel, t->data);
  }
  for (int i = 0; i < g->n_inputs; i++)
    if (ins[i].dtype != KILN_UNDEFINED)
      kiln_tensor_wrap(&vals[g->inputs[i]], ins[i].dtype, ins[i].rank, ins[i].dims, ins[i].numel, ins[i].data);
  for (int i = 0; i < f->s->n_steps && !s; i++)
    if (f->plan->spec[i]) s = kiln_fuse_eval_spec(f->plan->spec[i], vals, &hooks);
  for (int o = 0; o < g->n_outputs && !s; o++) s = kiln_tensor_copy(&outs[o], &vals[g->outputs[o]]);
  for (int v = 0; v < g->n_values; v++) kiln_tensor_release(&vals[v]);
  free(vals);
  return s;
}

static kiln_status ref_run(const kiln_graph *g, const kiln_tensor *ins, kiln_tensor *outs) {
  const kiln_tensor **bound = calloc((size_t)g->n_values + 1, sizeof *bound);
  for (int i = 0; i < g->n_inputs; i++)
    if (ins[i].dtype != KILN_UNDEFINED) bound[g->inputs[i]] = &ins[i];
  kiln_status s = kiln_ref_run(g, bound, outs);
  free(bound);
  return s;
}

/* Random inputs for every graph input (symbolic dims take sym_dim). */
static kiln_tensor *random_inputs(const kiln_graph *g, int64_t sym_dim) {
  kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_type *ty = &g->values[g->inputs[i]].type;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < ty->rank; d++) dims[d] = ty->dims[d].value >= 0 ? ty->dims[d].value : sym_dim;
    if (kiln_tensor_alloc(&ins[i], ty->dtype, ty->rank, dims)) exit(2);
    for (int64_t k = 0; k < ins[i].numel; k++) kiln_set_f(&ins[i], k, 2 * rnd());
  }
  return ins;
}

static void free_tensors(kiln_tensor *t, int n) {
  for (int i = 0; t && i < n; i++) kiln_tensor_release(&t[i]);
  free(t);
}

/* Runs f fused and g on the reference with the same inputs; 1 when every
 * output agrees within RTOL. */
static int agree_ins(const fz *f, const kiln_tensor *ins, char *msg, size_t len) {
  const kiln_graph *g = f->g;
  kiln_tensor *a = calloc((size_t)g->n_outputs + 1, sizeof *a), *b = calloc((size_t)g->n_outputs + 1, sizeof *b);
  kiln_status sa = fz_run(f, ins, a);
  char ea[512];
  snprintf(ea, sizeof ea, "%s", sa ? kiln_last_error() : "");
  kiln_status sb = ref_run(g, ins, b);
  int ok = 1;
  snprintf(msg, len, "ok");
  if (sa || sb) {
    snprintf(msg, len, "fused: %s; reference: %s", sa ? ea : "ok", sb ? kiln_last_error() : "ok");
    ok = 0;
  }
  for (int o = 0; ok && o < g->n_outputs; o++) {
    char m[400];
    if (!tu_compare(&a[o], &b[o], RTOL, ATOL, m, sizeof m, NULL, NULL)) {
      snprintf(msg, len, "output %d (%s): %s", o, g->values[g->outputs[o]].name, m);
      ok = 0;
    }
  }
  free_tensors(a, g->n_outputs);
  free_tensors(b, g->n_outputs);
  return ok;
}

static int agree(const fz *f, char *msg, size_t len) {
  kiln_tensor *ins = random_inputs(f->g, 3);
  int ok = agree_ins(f, ins, msg, len);
  free_tensors(ins, f->g->n_inputs);
  return ok;
}

static void dump(const fz *f, const char *title) {
  if (!verbose) return;
  printf("--- %s: %d steps\n", title, f->s->n_steps);
  for (int i = 0; i < f->s->n_steps; i++) {
    if (!f->plan->spec[i]) continue;
    char *txt;
    if (!kiln_fuse_spec_print(f->plan->spec[i], &txt)) {
      printf("%s", txt);
      kiln_free(txt);
    }
  }
}

/* Number of steps covering nodes. */
static int groups(const fz *f) { return f->plan->n_groups; }

/* ------------------------------------------------------------------ */
/* kinds                                                               */

static void test_kinds(void) {
  const kiln_op_def *const tables[] = {kiln_ref_ops_elementwise, kiln_ref_ops_shape, kiln_ref_ops_nn,
                                       kiln_ref_ops_reduce,      kiln_ref_ops_conv,  kiln_ref_ops_extra,
                                       kiln_ref_ops_rnn};
  int n = 0, missing = 0;
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (const kiln_op_def *d = tables[t]; d->op_type; d++) {
      n++;
      if (!kiln_fuse_kind_find("", d->op_type)) {
        missing++;
        printf("  no kind for %s\n", d->op_type);
      }
    }
  CHECK(missing == 0 && n > 100, "%d of %d reference ops have no fusion kind", missing, n);
  int dup = 0;
  for (const kiln_fuse_kind_def *a = kiln_fuse_kinds; a->op_type; a++)
    for (const kiln_fuse_kind_def *b = a + 1; b->op_type; b++) dup += !strcmp(a->op_type, b->op_type);
  CHECK(dup == 0, "%d ops listed twice in the kind table", dup);
  static const struct {
    const char *op;
    kiln_fuse_kind kind;
    unsigned roles;
  } want[] = {
      {"Relu", KILN_FUSE_ELEMWISE, 0},
      {"Add", KILN_FUSE_BROADCAST, 0},
      {"Where", KILN_FUSE_BROADCAST, 0},
      {"Reshape", KILN_FUSE_INJECTIVE, KILN_FUSE_VIEW | KILN_FUSE_RESHAPE},
      {"Transpose", KILN_FUSE_INJECTIVE, KILN_FUSE_VIEW},
      {"Pad", KILN_FUSE_INJECTIVE, KILN_FUSE_VIEW},
      {"Cast", KILN_FUSE_INJECTIVE, 0},
      {"Concat", KILN_FUSE_INJECTIVE, KILN_FUSE_NOSPEC},
      {"ReduceSum", KILN_FUSE_REDUCTION, 0},
      {"Softmax", KILN_FUSE_REDUCTION, KILN_FUSE_COMPOSITE},
      {"LayerNormalization", KILN_FUSE_REDUCTION, KILN_FUSE_COMPOSITE},
      {"Conv", KILN_FUSE_OUT_EWISE, 0},
      {"Gemm", KILN_FUSE_OUT_EWISE, 0},
      {"MatMul", KILN_FUSE_OUT_EWISE, 0},
      {"MaxPool", KILN_FUSE_OUT_EWISE, KILN_FUSE_POOL},
      {"NonZero", KILN_FUSE_OPAQUE, 0},
      {"LSTM", KILN_FUSE_OPAQUE, 0},
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
    const kiln_fuse_kind_def *d = kiln_fuse_kind_find("ai.onnx", want[i].op);
    CHECK(d && d->kind == want[i].kind && d->roles == want[i].roles, "%s: kind %s roles %u", want[i].op,
          d ? kiln_fuse_kind_name(d->kind) : "none", d ? d->roles : 0);
  }
  CHECK(!kiln_fuse_kind_find("", "NoSuchOp"), "an unknown op has no entry");
  CHECK(!kiln_fuse_kind_find("com.microsoft", "Relu"), "another domain's op has no entry");
  kiln_node fake = {0};
  fake.op_type = "NoSuchOp";
  fake.domain = "";
  CHECK(kiln_fuse_kind_of(&fake) == KILN_FUSE_OPAQUE, "an unknown op is opaque");
  CHECK(!strcmp(kiln_fuse_kind_name(KILN_FUSE_OUT_EWISE), "out-elementwise") &&
            !strcmp(kiln_fuse_kind_name(KILN_FUSE_OPAQUE), "opaque"),
        "kind names");
}

/* ------------------------------------------------------------------ */
/* the predicate, rule by rule                                         */

/* A context over g (shapes inferred); g and shapes are owned by *f. */
static kiln_fuse_ctx *ctx_of(fz *f, kiln_graph *g, const kiln_fuse_opts *o) {
  memset(f, 0, sizeof *f);
  f->g = g;
  f->owns_g = true;
  if (kiln_shapes_infer(g, &f->sh) || kiln_fuse_ctx_new(g, f->sh, o, &f->ctx)) {
    printf("test bug: %s\n", kiln_last_error());
    exit(2);
  }
  return f->ctx;
}

/* can_fuse(p, c) == want, and the reason contains `has`. */
#define PRED(ctx, p, c, want, has)                                                                      \
  do {                                                                                                  \
    char why_[512];                                                                                     \
    bool got_ = kiln_fuse_can_fuse(ctx, p, c, why_, sizeof why_);                                       \
    CHECK(got_ == (want) && strstr(why_, has) && !strncmp(why_, (want) ? "ok: " : "no: ", 4),             \
          "can_fuse(%d, %d) = %d, want %d with \"%s\": %s", p, c, got_, (int)(want), has, why_);        \
    if (verbose) printf("  can_fuse(%d, %d): %s\n", p, c, why_);                                        \
  } while (0)

#define JOIN(ctx, n, want, has)                                                                  \
  do {                                                                                           \
    char why_[512];                                                                              \
    bool got_ = kiln_fuse_can_join(ctx, n, why_, sizeof why_);                                   \
    CHECK(got_ == (want) && strstr(why_, has), "can_join(%d) = %d, want %d with \"%s\": %s", n, got_, \
          (int)(want), has, why_);                                                               \
    if (verbose) printf("  can_join(%d): %s\n", n, why_);                                        \
    if (got_) kiln_fuse_ctx_join(ctx, n, NULL, 0);                                               \
  } while (0)

static void test_predicate(void) {
  const int64_t d34[] = {3, 4}, d14[] = {1, 4}, d4[] = {4}, d1[] = {1}, x4[] = {1, 2, 6, 6}, w4[] = {4, 2, 3, 3},
                c4[] = {4, 1, 1}, d26[] = {2, 6}, d52[] = {5, 2};
  fz f;
  kiln_fuse_ctx *c;
  kiln_graph *g;

  /* elementwise chain, stored-too notes, no edge, already grouped */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, d34);
  int relu = gb_add(g, "Relu", "x", "r");
  int ex = gb_add(g, "Exp", "r", "e");
  int neg = gb_add(g, "Neg", "r", "ng");
  int sig = gb_add(g, "Sigmoid", "x", "s");
  output(g, "e");
  output(g, "ng");
  output(g, "s");
  c = ctx_of(&f, g, NULL);
  PRED(c, relu, ex, true, "shares the iteration domain [3,4]");
  PRED(c, relu, ex, true, "also read by Neg 'n2', outside the group: it is stored too");
  PRED(c, relu, sig, false, "does not read an output of");
  kiln_fuse_ctx_open(c, relu, NULL);
  kiln_fuse_ctx_join(c, ex, NULL, 0);
  PRED(c, relu, neg, true, "shares the iteration domain");
  PRED(c, relu, ex, false, "is already in Relu 'n0''s group");
  JOIN(c, sig, false, "Sigmoid 'n3' reads nothing computed in the group");
  fz_free(&f);

  /* a graph output is stored too */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, d34);
  relu = gb_add(g, "Relu", "x", "r");
  ex = gb_add(g, "Exp", "r", "e");
  output(g, "r");
  output(g, "e");
  c = ctx_of(&f, g, NULL);
  PRED(c, relu, ex, true, "'r' is a graph output: it is stored too");
  fz_free(&f);

  /* data-dependent shapes, opaque ops, ops without a spec form */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, d34);
  int nz = gb_add(g, "NonZero", "x", "nz");
  int cast = gb_add(g, "Cast", "nz", "cf");
  seti(g, cast, "to", KILN_F32);
  int rl2 = gb_add(g, "Relu", "cf", "cr");
  relu = gb_add(g, "Relu", "x", "r");
  gb_cst_i64(g, "k", 1, (const int64_t[]){2});
  int topk = gb_add(g, "TopK", "r k", "tv ti");
  int cc = gb_add(g, "Concat", "r r", "cat");
  seti(g, cc, "axis", 0);
  output(g, "cr");
  output(g, "tv");
  output(g, "cat");
  c = ctx_of(&f, g, NULL);
  PRED(c, nz, cast, false, "data-dependent");
  PRED(c, cast, rl2, false, "data-dependent: opaque");
  PRED(c, relu, topk, false, "TopK 'n4' is opaque");
  PRED(c, relu, cc, false, "has no kernel-spec form yet");
  fz_free(&f);

  /* anchors: a prologue is refused, an epilogue and one pooling joined, then the group ends */
  g = new_graph(17);
  input(g, "x", KILN_F32, 4, x4);
  gb_cst(g, "w", 4, w4, NULL, 0);
  gb_cst(g, "b", 3, c4, NULL, 0);
  int pre = gb_add(g, "Relu", "x", "xr");
  int conv = gb_add(g, "Conv", "xr w", "y");
  int addb = gb_add(g, "Add", "y b", "yb");
  int act = gb_add(g, "Relu", "yb", "ya");
  int pool = gb_add(g, "MaxPool", "ya", "p");
  setints(g, pool, "kernel_shape", 2, (const int64_t[]){2, 2});
  int post = gb_add(g, "Relu", "p", "q");
  int rm = gb_add(g, "ReduceMean", "ya", "m");
  int mp2 = gb_add(g, "MaxPool", "xr", "p2");
  setints(g, mp2, "kernel_shape", 2, (const int64_t[]){2, 2});
  output(g, "q");
  output(g, "m");
  output(g, "p2");
  c = ctx_of(&f, g, NULL);
  PRED(c, pre, conv, false, "starts its own group (an anchor takes an epilogue, not a prologue)");
  PRED(c, conv, addb, true, "is in Conv 'n1''s epilogue");
  PRED(c, pre, mp2, false, "pooling joins only a group with an anchor");
  kiln_fuse_ctx_open(c, conv, NULL);
  JOIN(c, addb, true, "epilogue");
  JOIN(c, act, true, "epilogue");
  JOIN(c, rm, false, "a reduction does not fuse after Conv 'n1'");
  JOIN(c, pool, true, "pools Conv 'n1''s epilogue; the group ends here");
  JOIN(c, post, false, "the group ends at its pooling (MaxPool 'n4')");
  fz_free(&f);

  /* reductions: prologue, epilogue, read back, reduced twice, other axes, cap */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, d34);
  int e0 = gb_add(g, "Exp", "x", "ex");
  int rs = gb_add(g, "ReduceSum", "ex", "s"); /* all axes, keepdims */
  int sq = gb_add(g, "Sqrt", "s", "sq");
  int rmax = gb_add(g, "ReduceMax", "x", "mx");
  setints(g, rmax, "axes", 1, (const int64_t[]){1});
  int sub = gb_add(g, "Sub", "x mx", "d");
  int rmm = gb_add(g, "ReduceMax", "mx", "mm");
  setints(g, rmm, "axes", 1, (const int64_t[]){1});
  gb_cst_i64(g, "ax0", 1, (const int64_t[]){0});
  int rs0 = gb_add(g, "ReduceSum", "d ax0", "s0");
  int sm1 = gb_add(g, "Softmax", "x", "y1");
  int sm2 = gb_add(g, "Softmax", "y1", "y2");
  int sm3 = gb_add(g, "Softmax", "y2", "y3");
  output(g, "sq");
  output(g, "mm");
  output(g, "s0");
  output(g, "y3");
  c = ctx_of(&f, g, NULL);
  PRED(c, e0, rs, true, "reduces over the group's domain [3,4]");
  PRED(c, rs, sq, true, "is an epilogue of the group's reduction");
  PRED(c, rmax, sub, true, "reads the group's reduction back over its domain [3,4]");
  PRED(c, rmax, rmm, false, "reduces a value the group has already reduced");
  kiln_fuse_ctx_open(c, rmax, NULL);
  JOIN(c, sub, true, "reads the group's reduction back");
  JOIN(c, rs0, false, "reduces other axes than the group's reduction");
  kiln_fuse_ctx_open(c, sm1, NULL);
  JOIN(c, sm2, true, "reduces over the group's domain");
  JOIN(c, sm3, false, "at most 4 reductions per group");
  fz_free(&f);

  /* a keepdims=0 result broadcast along the wrong axis is not read back */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){4, 4});
  int rk = gb_add(g, "ReduceSum", "x", "r");
  seti(g, rk, "keepdims", 0);
  int rk2 = gb_add(g, "ReduceMax", "x", "r2");
  setints(g, rk2, "axes", 1, (const int64_t[]){1});
  seti(g, rk2, "keepdims", 0);
  int wrong = gb_add(g, "Add", "x r2", "y");
  int fine = gb_add(g, "Mul", "x r", "z");
  output(g, "y");
  output(g, "z");
  c = ctx_of(&f, g, NULL);
  PRED(c, rk2, wrong, false, "cannot read the reduction's result [4] back over [4,4]");
  PRED(c, rk, fine, true, "reads the group's reduction back over its domain [4,4]");
  fz_free(&f);

  /* shapes: a computed value is never broadcast; domains must agree */
  g = new_graph(17);
  input(g, "a", KILN_F32, 2, d14);
  input(g, "z", KILN_F32, 2, d34);
  input(g, "w", KILN_F32, 2, d52);
  int ea = gb_add(g, "Exp", "a", "ea");
  int bc = gb_add(g, "Add", "z ea", "y");
  int rz = gb_add(g, "Relu", "z", "rz");
  int tw = gb_add(g, "Transpose", "w", "wt");
  int nw = gb_add(g, "Neg", "wt", "nw");
  output(g, "y");
  output(g, "rz");
  output(g, "nw");
  c = ctx_of(&f, g, NULL);
  PRED(c, ea, bc, false, "broadcasting Exp 'n0''s output [1,4] to [3,4] would recompute it for every copy");
  kiln_fuse_ctx_open(c, rz, NULL);
  JOIN(c, tw, true, "is an index map over a value from memory");
  JOIN(c, nw, false, "iteration domain [2,5] differs from the group's [3,4]");
  fz_free(&f);

  /* views: index maps over memory, row-major reshapes of computed values, reorders refused */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, d26);
  input(g, "y", KILN_F32, 2, d26);
  input(g, "i", KILN_I64, 0, NULL);
  int t0 = gb_add(g, "Transpose", "x", "xt");
  int ad = gb_add(g, "Add", "xt xt", "xa");
  relu = gb_add(g, "Relu", "y", "r");
  gb_cst_i64(g, "shp", 2, (const int64_t[]){3, 4});
  int rs2 = gb_add(g, "Reshape", "r shp", "rr");
  int tr = gb_add(g, "Transpose", "r", "rt");
  int ga = gb_add(g, "Gather", "r i", "rg");
  output(g, "xa");
  output(g, "rr");
  output(g, "rt");
  output(g, "rg");
  c = ctx_of(&f, g, NULL);
  PRED(c, t0, ad, true, "shares the iteration domain [6,2]");
  PRED(c, relu, rs2, true, "is an index map over a value computed in the group, in the same order");
  PRED(c, relu, tr, false, "reorders a value computed in the group");
  PRED(c, relu, ga, false, "not one constant scalar is not an index map");
  fz_free(&f);

  /* size caps */
  g = new_graph(17);
  input(g, "x", KILN_F32, 1, d4);
  input(g, "p", KILN_F32, 1, d4);
  input(g, "q", KILN_F32, 1, d4);
  int ch[5];
  ch[0] = gb_add(g, "Relu", "x", "c0");
  ch[1] = gb_add(g, "Add", "c0 p", "c1");
  ch[2] = gb_add(g, "Add", "c1 q", "c2");
  ch[3] = gb_add(g, "Relu", "c2", "c3");
  output(g, "c3");
  kiln_fuse_opts o1 = {3, 0};
  c = ctx_of(&f, g, &o1);
  kiln_fuse_ctx_open(c, ch[0], NULL);
  JOIN(c, ch[1], true, "ok");
  JOIN(c, ch[2], true, "ok");
  JOIN(c, ch[3], false, "group size cap: a group holds at most 3 nodes");
  kiln_fuse_ctx_free(f.ctx);
  kiln_fuse_opts o2 = {0, 2};
  if (kiln_fuse_ctx_new(f.g, f.sh, &o2, &f.ctx)) exit(2);
  c = f.ctx;
  kiln_fuse_ctx_open(c, ch[0], NULL);
  JOIN(c, ch[1], true, "ok");
  JOIN(c, ch[2], false, "memory inputs cap: a group loads at most 2 tensors");
  fz_free(&f);

  /* closed groups are read from memory, never fused twice */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, d34);
  int r1 = gb_add(g, "ReduceMean", "x", "m");
  int o0 = gb_add(g, "Relu", "x", "o");
  int u1 = gb_add(g, "Mul", "o m", "u");
  output(g, "u");
  c = ctx_of(&f, g, NULL);
  kiln_fuse_ctx_open(c, r1, NULL);
  kiln_fuse_ctx_open(c, o0, NULL);
  PRED(c, r1, u1, false, "ReduceMean 'n0''s group is closed");
  PRED(c, r1, u1, false, "joining would duplicate that expensive work");
  fz_free(&f);

  /* parameters from memory, second outputs */
  g = new_graph(17);
  input(g, "x", KILN_F32, 4, x4);
  input(g, "s", KILN_F32, 1, (const int64_t[]){2});
  gb_cst(g, "bb", 1, (const int64_t[]){2}, NULL, 0);
  gb_cst(g, "mu", 1, (const int64_t[]){2}, NULL, 0);
  gb_cst(g, "va", 1, (const int64_t[]){2}, NULL, 1.5);
  int ab = gb_add(g, "Abs", "s", "sa");
  int bn = gb_add(g, "BatchNormalization", "x sa bb mu va", "bn");
  int dr = gb_add(g, "Dropout", "x", "dy dm");
  int dn = gb_add(g, "Neg", "x", "xn");
  int dr2 = gb_add(g, "Dropout", "xn", "dy2 dm2");
  int bt = gb_add(g, "BatchNormalization", "x s bb mu va", "bt"); /* training mode: the batch's statistics */
  kiln_edit_set_int(&g->nodes[bt], "training_mode", 1);
  int rt = gb_add(g, "Relu", "bt", "rt");
  output(g, "bn");
  output(g, "dy");
  output(g, "dm2");
  output(g, "rt");
  c = ctx_of(&f, g, NULL);
  PRED(c, ab, bn, false, "input 1 must be read from memory");
  PRED(c, dn, dr2, false, "output 1 is used");
  CHECK(kiln_fuse_kind_of(&g->nodes[bn]) == KILN_FUSE_BROADCAST && kiln_fuse_kind_of(&g->nodes[bt]) == KILN_FUSE_OPAQUE,
        "BatchNormalization: broadcast in inference, opaque in training mode");
  PRED(c, bt, rt, false, "opaque");
  (void)dr;
  (void)d1;
  fz_free(&f);
}

/* ------------------------------------------------------------------ */
/* grouping hand-built graphs                                          */

static bool lists(const int *a, int n, const int *want, int nw) {
  if (n != nw) return false;
  for (int i = 0; i < nw; i++) {
    bool found = false;
    for (int j = 0; j < n && !found; j++) found = a[j] == want[i];
    if (!found) return false;
  }
  return true;
}

static bool printed_has(const kiln_fuse_spec *sp, const char *has) {
  char *txt = NULL;
  if (kiln_fuse_spec_print(sp, &txt)) return false;
  bool ok = strstr(txt, has) != NULL;
  if (!ok) printf("  spec printed without \"%s\":\n%s", has, txt);
  kiln_free(txt);
  return ok;
}

/* The bench's elementwise chain (bench/make_models.py ew_chain), smaller. */
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

static void test_chain(void) {
  fz f;
  char msg[600];
  kiln_graph *g = ew_chain(64, 256);
  if (!fz_make(&f, g, true, NULL, true)) {
    CHECK(0, "ew_chain does not fuse");
    return;
  }
  dump(&f, "ew_chain");
  CHECK(groups(&f) == 1 && f.s->n_steps == 1, "ew_chain: %d groups in %d steps, want 1", groups(&f), f.s->n_steps);
  const kiln_step *st = &f.s->steps[0];
  const int reads[] = {val(g, "x"), val(g, "scale"), val(g, "bias"), val(g, "lo"), val(g, "hi")};
  const int writes[] = {val(g, "y")};
  CHECK(lists(st->reads, st->n_reads, reads, 5) && lists(st->writes, st->n_writes, writes, 1),
        "ew_chain: the step reads %d values and writes %d (want x scale bias lo hi -> y)", st->n_reads, st->n_writes);
  const kiln_fuse_spec *sp = f.plan->spec[0];
  CHECK(sp && sp->kind == KILN_FUSE_G_ELEMWISE && sp->n_nodes == 8 && sp->n_access == 5 && sp->n_store == 1 &&
            sp->n_red == 0 && sp->bound && st->tag == KILN_FUSE_G_ELEMWISE && st->user == sp,
        "ew_chain spec: kind %d, %d nodes, %d accessors, %d stores", sp ? (int)sp->kind : -1, sp ? sp->n_nodes : 0,
        sp ? sp->n_access : 0, sp ? sp->n_store : 0);
  CHECK(agree(&f, msg, sizeof msg), "ew_chain fused vs reference: %s", msg);
  if (sp) {
    CHECK(printed_has(sp, "domain [64,256] = [64,256]"), "printer: domain");
    CHECK(printed_has(sp, "= bias [256] | broadcast [64,256]"), "printer: broadcast bias accessor");
    CHECK(printed_has(sp, "= sigmoid e"), "printer: sigmoid");
    CHECK(printed_has(sp, "= clip e"), "printer: clip");
    CHECK(printed_has(sp, "store y <- e"), "printer: store");
  }
  fz_free(&f);

  /* 8 unary / broadcast ops on a [4,5,6] tensor with a [5,1] bias */
  g = new_graph(17);
  input(g, "x", KILN_F32, 3, (const int64_t[]){4, 5, 6});
  gb_cst(g, "b", 2, (const int64_t[]){5, 1}, NULL, 0);
  gb_add(g, "Add", "x b", "a1");
  int lr = gb_add(g, "LeakyRelu", "a1", "a2");
  setf(g, lr, "alpha", 0.2f);
  gb_add(g, "Mul", "a2 a2", "a3");
  gb_add(g, "Sqrt", "a3", "a4");
  gb_add(g, "Sub", "a4 b", "a5");
  int el = gb_add(g, "Elu", "a5", "a6");
  setf(g, el, "alpha", 0.7f);
  gb_add(g, "Softsign", "a6", "a7");
  gb_add(g, "HardSwish", "a7", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    CHECK(groups(&f) == 1 && f.plan->spec[0]->n_nodes == 8, "8-op chain: %d groups", groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "8-op chain fused vs reference: %s", msg);
    fz_free(&f);
  }

  /* integer and bool arithmetic in one group */
  g = new_graph(17);
  input(g, "i", KILN_I32, 2, (const int64_t[]){3, 4});
  input(g, "j", KILN_I32, 2, (const int64_t[]){3, 4});
  gb_add(g, "Mul", "i j", "ij");
  gb_add(g, "Add", "ij i", "s");
  gb_add(g, "Greater", "s j", "gt");
  gb_add(g, "Not", "gt", "ng");
  gb_add(g, "Where", "ng s j", "w");
  int ca = gb_add(g, "Cast", "w", "wf");
  seti(g, ca, "to", KILN_F32);
  gb_add(g, "Relu", "wf", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    CHECK(groups(&f) == 1, "int chain: %d groups", groups(&f));
    kiln_tensor *ins = random_inputs(g, 1);
    for (int k = 0; k < 2; k++)
      for (int64_t e = 0; e < ins[k].numel; e++) kiln_set_i(&ins[k], e, (int64_t)(rnd() * 1000));
    CHECK(agree_ins(&f, ins, msg, sizeof msg), "int chain fused vs reference: %s", msg);
    free_tensors(ins, g->n_inputs);
    fz_free(&f);
  }
}

static void test_conv(void) {
  fz f;
  char msg[600];
  const int64_t x4[] = {1, 3, 8, 8}, w4[] = {4, 3, 3, 3}, c4[] = {4, 1, 1}, c1[] = {4};
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 4, x4);
  gb_cst(g, "w", 4, w4, NULL, 0);
  gb_cst(g, "b", 3, c4, NULL, 0);
  int conv = gb_add(g, "Conv", "x w", "c");
  setints(g, conv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  gb_add(g, "Add", "c b", "cb");
  gb_add(g, "Relu", "cb", "r");
  int pool = gb_add(g, "MaxPool", "r", "p");
  setints(g, pool, "kernel_shape", 2, (const int64_t[]){2, 2});
  setints(g, pool, "strides", 2, (const int64_t[]){2, 2});
  output(g, "p");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "conv+bias+relu+maxpool");
    const kiln_fuse_spec *sp = f.plan->spec[0];
    CHECK(groups(&f) == 1 && sp->kind == KILN_FUSE_G_ANCHOR && sp->anchor == conv && sp->pool == pool &&
              sp->n_nodes == 4,
          "conv+bias+relu+maxpool: %d groups, kind %s", groups(&f), kiln_fuse_group_kind_name(sp->kind));
    const int w[] = {val(g, "p")};
    CHECK(lists(f.s->steps[0].writes, f.s->steps[0].n_writes, w, 1) && sp->n_store == 1 && sp->store[0].pool,
          "conv group writes only the pooled result");
    CHECK(printed_has(sp, "anchor Conv 'n0'") && printed_has(sp, "store p <- MaxPool 'n3'(e"), "conv spec printed");
    CHECK(agree(&f, msg, sizeof msg), "conv+bias+relu+maxpool fused vs reference: %s", msg);
    fz_free(&f);
  }

  /* Conv with bias, unfolded BN, activation, residual add, global pooling */
  g = new_graph(17);
  input(g, "x", KILN_F32, 4, x4);
  input(g, "skip", KILN_F32, 4, (const int64_t[]){1, 4, 8, 8});
  gb_cst(g, "w", 4, w4, NULL, 0);
  gb_cst(g, "cb", 1, c1, NULL, 0);
  gb_cst(g, "sc", 1, c1, NULL, 0);
  gb_cst(g, "bb", 1, c1, NULL, 0);
  gb_cst(g, "mu", 1, c1, NULL, 0);
  gb_cst(g, "va", 1, c1, NULL, 1.5);
  conv = gb_add(g, "Conv", "x w cb", "c");
  setints(g, conv, "pads", 4, (const int64_t[]){1, 1, 1, 1});
  gb_add(g, "BatchNormalization", "c sc bb mu va", "n");
  gb_add(g, "Relu", "n", "r");
  gb_add(g, "Add", "r skip", "s");
  gb_add(g, "Relu", "s", "t");
  pool = gb_add(g, "GlobalAveragePool", "t", "p");
  output(g, "p");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "conv+bn+relu+residual+gap");
    const kiln_fuse_spec *sp = f.plan->spec[0];
    CHECK(groups(&f) == 1 && sp->kind == KILN_FUSE_G_ANCHOR && sp->pool == pool && sp->n_nodes == 6,
          "conv+bn+relu+residual+gap: %d groups", groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "conv+bn+relu+residual+gap fused vs reference: %s", msg);
    fz_free(&f);
  }

  /* an MLP: Gemm + Relu, Gemm + Relu, Gemm */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){4, 16});
  gb_cst(g, "w1", 2, (const int64_t[]){16, 8}, NULL, 0);
  gb_cst(g, "b1", 1, (const int64_t[]){8}, NULL, 0);
  gb_cst(g, "w2", 2, (const int64_t[]){8, 8}, NULL, 0);
  gb_add(g, "Gemm", "x w1 b1", "h");
  gb_add(g, "Relu", "h", "hr");
  gb_add(g, "MatMul", "hr w2", "m");
  gb_add(g, "Tanh", "m", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    CHECK(groups(&f) == 2 && f.plan->by_kind[KILN_FUSE_G_ANCHOR] == 2, "mlp: %d groups", groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "mlp fused vs reference: %s", msg);
    fz_free(&f);
  }
}

/* Inputs [rows, cols] of the softmax / layer norm graphs. */
static void test_softmax(void) {
  fz f;
  char msg[600];
  const int64_t dx[] = {4, 10}, dc[] = {10};
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 2, dx);
  gb_cst_i64(g, "ax", 1, (const int64_t[]){1});
  int mx = gb_add(g, "ReduceMax", "x", "m");
  setints(g, mx, "axes", 1, (const int64_t[]){1});
  gb_add(g, "Sub", "x m", "d");
  gb_add(g, "Exp", "d", "e");
  gb_add(g, "ReduceSum", "e ax", "s");
  gb_add(g, "Div", "e s", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "softmax (decomposed)");
    CHECK(groups(&f) <= 2, "decomposed softmax: %d groups, want <= 2", groups(&f));
    CHECK(f.plan->spec[0]->kind == KILN_FUSE_G_REDUCE && f.plan->spec[0]->n_red == 2,
          "decomposed softmax: one reduce group with 2 reductions");
    CHECK(agree(&f, msg, sizeof msg), "decomposed softmax fused vs reference: %s", msg);
    fz_free(&f);
  }
  static const struct {
    const char *op;
    int opset, rank;
    int64_t axis;
  } sm[] = {{"Softmax", 13, 2, -1}, {"Softmax", 11, 3, 1}, {"LogSoftmax", 13, 3, 1}, {"Softmax", 13, 3, 0}};
  for (size_t i = 0; i < sizeof sm / sizeof *sm; i++) {
    g = new_graph(sm[i].opset);
    input(g, "x", KILN_F32, sm[i].rank, (const int64_t[]){3, 5, 7});
    int n = gb_add(g, sm[i].op, "x", "y");
    seti(g, n, "axis", sm[i].axis);
    gb_add(g, "Relu", "y", "z");
    output(g, "z");
    if (!fz_make(&f, g, true, NULL, true)) continue;
    const kiln_fuse_spec *sp = f.plan->spec[0];
    CHECK(groups(&f) == 1 && sp->kind == KILN_FUSE_G_REDUCE && sp->n_red == 2, "%s-%d axis %lld: %d groups", sm[i].op,
          sm[i].opset, (long long)sm[i].axis, groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "%s-%d axis %lld fused vs reference: %s", sm[i].op, sm[i].opset,
          (long long)sm[i].axis, msg);
    fz_free(&f);
  }

  /* layer norm, decomposed as exporters write it */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, dx);
  gb_cst(g, "gamma", 1, dc, NULL, 0);
  gb_cst(g, "beta", 1, dc, NULL, 0);
  gb_cst(g, "eps", 0, NULL, (const double[]){1e-5}, 0);
  gb_cst(g, "two", 0, NULL, (const double[]){2}, 0);
  int m1 = gb_add(g, "ReduceMean", "x", "mean");
  setints(g, m1, "axes", 1, (const int64_t[]){-1});
  gb_add(g, "Sub", "x mean", "d");
  gb_add(g, "Pow", "d two", "p");
  int m2 = gb_add(g, "ReduceMean", "p", "var");
  setints(g, m2, "axes", 1, (const int64_t[]){-1});
  gb_add(g, "Add", "var eps", "ve");
  gb_add(g, "Sqrt", "ve", "sd");
  gb_add(g, "Div", "d sd", "nrm");
  gb_add(g, "Mul", "nrm gamma", "sc");
  gb_add(g, "Add", "sc beta", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "layer norm (decomposed)");
    CHECK(groups(&f) <= 2, "decomposed layer norm: %d groups, want <= 2", groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "decomposed layer norm fused vs reference: %s", msg);
    fz_free(&f);
  }

  /* LayerNormalization (with its Mean and InvStdDev outputs), InstanceNormalization */
  g = new_graph(17);
  input(g, "x", KILN_F32, 3, (const int64_t[]){2, 3, 8});
  gb_cst(g, "gamma", 1, (const int64_t[]){8}, NULL, 0);
  gb_cst(g, "beta", 1, (const int64_t[]){8}, NULL, 0);
  gb_add(g, "LayerNormalization", "x gamma beta", "ln mean istd");
  gb_add(g, "Relu", "ln", "y");
  output(g, "y");
  output(g, "mean");
  output(g, "istd");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "LayerNormalization");
    const kiln_fuse_spec *sp = f.plan->spec[0];
    CHECK(groups(&f) == 1 && sp->n_store == 3, "LayerNormalization: %d groups, %d stores", groups(&f), sp->n_store);
    CHECK(agree(&f, msg, sizeof msg), "LayerNormalization fused vs reference: %s", msg);
    fz_free(&f);
  }
  g = new_graph(17);
  input(g, "x", KILN_F32, 4, (const int64_t[]){2, 3, 4, 5});
  gb_cst(g, "s", 1, (const int64_t[]){3}, NULL, 0);
  gb_cst(g, "b", 1, (const int64_t[]){3}, NULL, 0);
  gb_add(g, "InstanceNormalization", "x s b", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    CHECK(groups(&f) == 1, "InstanceNormalization: %d groups", groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "InstanceNormalization fused vs reference: %s", msg);
    fz_free(&f);
  }

  /* reductions with prologue and epilogue, keepdims=0 read back through Unsqueeze */
  g = new_graph(17);
  input(g, "x", KILN_F32, 3, (const int64_t[]){2, 3, 4});
  gb_cst_i64(g, "ax", 1, (const int64_t[]){1});
  gb_add(g, "Abs", "x", "a");
  int r = gb_add(g, "ReduceL2", "a", "l2");
  setints(g, r, "axes", 1, (const int64_t[]){1});
  seti(g, r, "keepdims", 0);
  gb_add(g, "Unsqueeze", "l2 ax", "u");
  gb_add(g, "Div", "x u", "y");
  int lse = gb_add(g, "ReduceLogSumExp", "x", "lse");
  setints(g, lse, "axes", 2, (const int64_t[]){0, 2});
  gb_add(g, "Neg", "lse", "nl");
  output(g, "y");
  output(g, "nl");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "reduce epilogues");
    CHECK(groups(&f) == 2, "L2 normalisation + logsumexp: %d groups, want 2", groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "reduce epilogues fused vs reference: %s", msg);
    fz_free(&f);
  }
}

static void test_stored_and_dup(void) {
  fz f;
  char msg[600];
  /* an intermediate that is also a graph output is stored */
  kiln_graph *g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){3, 4});
  gb_add(g, "Relu", "x", "r");
  gb_add(g, "Exp", "r", "e");
  gb_add(g, "Neg", "e", "y");
  output(g, "y");
  output(g, "r");
  if (fz_make(&f, g, true, NULL, true)) {
    const kiln_fuse_spec *sp = f.plan->spec[0];
    const int w[] = {val(g, "r"), val(g, "y")};
    CHECK(groups(&f) == 1 && lists(f.s->steps[0].writes, f.s->steps[0].n_writes, w, 2) && sp->n_store == 2,
          "graph-output intermediate: %d groups, %d writes, %d stores", groups(&f), f.s->steps[0].n_writes, sp->n_store);
    CHECK(agree(&f, msg, sizeof msg), "stored intermediate fused vs reference: %s", msg);
    fz_free(&f);
  }

  /* a reduction feeding two consumers in different groups runs once */
  g = new_graph(17);
  input(g, "x", KILN_F32, 2, (const int64_t[]){4, 8});
  gb_cst(g, "w", 2, (const int64_t[]){8, 8}, NULL, 0);
  int rm = gb_add(g, "ReduceMean", "x", "m");
  setints(g, rm, "axes", 1, (const int64_t[]){1});
  gb_add(g, "Sub", "x m", "a");
  gb_add(g, "MatMul", "a w", "mm");
  int ad = gb_add(g, "Add", "mm m", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "shared reduction");
    int n_red = 0, red_step = -1, add_step = -1;
    for (int i = 0; i < f.s->n_steps; i++)
      for (int k = 0; k < f.s->steps[i].n_nodes; k++)
        if (f.s->steps[i].nodes[k] == rm) n_red++, red_step = i;
    spec_of(&f, ad, &add_step);
    int m = val(g, "m");
    CHECK(n_red == 1 && red_step >= 0 && kiln_step_writes(&f.s->steps[red_step], m) && add_step != red_step &&
              kiln_step_reads(&f.s->steps[add_step], m),
          "the reduction runs in one step (%d of them), which stores m for the MatMul's epilogue", n_red);
    CHECK(groups(&f) == 2, "shared reduction: %d groups, want 2", groups(&f));
    char why[512];
    kiln_fuse_can_fuse(f.ctx, rm, ad, why, sizeof why);
    CHECK(strstr(why, "duplicate") != NULL, "no duplication reason: %s", why);
    CHECK(agree(&f, msg, sizeof msg), "shared reduction fused vs reference: %s", msg);
    fz_free(&f);
  }
}

static void test_views(void) {
  fz f;
  char msg[600];
  /* transpose of memory, a computed value reshaped, a graph-output view (copied alias) */
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
  output(g, "xt");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "views");
    const kiln_fuse_spec *sp = f.plan->spec[0];
    CHECK(groups(&f) == 1 && sp->n_alias == 1 && sp->alias[0].copy, "views: %d groups, %d aliases", groups(&f),
          sp->n_alias);
    CHECK(agree(&f, msg, sizeof msg), "views fused vs reference: %s", msg);
    fz_free(&f);
  }

  /* Pad, Slice, Split, Expand, Gather, Squeeze / Unsqueeze over memory */
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
  gb_add(g, "Pad", "z pads pv", "zp");     /* [4,6] */
  gb_add(g, "Relu", "zp", "r");
  gb_add(g, "Slice", "w st en ax sp", "ws"); /* rows 1..4, cols 7..2 reversed: [4,6] */
  gb_add(g, "Add", "r ws", "s1");
  int sl = gb_add(g, "Split", "q", "q1 q2"); /* two [4,6] */
  seti(g, sl, "axis", 1);
  gb_add(g, "Sub", "s1 q2", "s2");
  gb_add(g, "Expand", "e es", "ee");
  gb_add(g, "Mul", "s2 ee", "s3");
  gb_add(g, "Gather", "v gi", "vg"); /* v[-2]: [4,6] */
  gb_add(g, "Unsqueeze", "vg a0", "vu");
  gb_add(g, "Squeeze", "vu a0", "vs");
  gb_add(g, "Add", "s3 vs", "s4");
  gb_cst_i64(g, "s46", 2, (const int64_t[]){4, 6});
  int tq = gb_add(g, "Transpose", "q2", "qt"); /* [6,4], then reshaped: a stack of two views */
  setints(g, tq, "perm", 2, (const int64_t[]){1, 0});
  gb_add(g, "Reshape", "qt s46", "qr");
  gb_add(g, "Add", "s4 qr", "y");
  output(g, "y");
  if (fz_make(&f, g, true, NULL, true)) {
    dump(&f, "views of memory");
    CHECK(groups(&f) == 1 && f.plan->spec[0]->n_nodes == 15, "views of memory: %d groups", groups(&f));
    CHECK(agree(&f, msg, sizeof msg), "views of memory fused vs reference: %s", msg);
    fz_free(&f);
  }
}

static void test_symbolic(void) {
  fz f;
  char msg[600];
  kiln_graph *g = new_graph(17);
  int x = input(g, "x", KILN_F32, 2, (const int64_t[]){1, 8});
  g->values[x].type.dims[0].value = -1;
  g->values[x].type.dims[0].param = kiln_strdup("N");
  gb_cst(g, "b", 1, (const int64_t[]){8}, NULL, 0);
  gb_add(g, "Add", "x b", "a");
  gb_add(g, "Exp", "a", "e");
  int rs = gb_add(g, "ReduceSum", "e", "s");
  (void)rs;
  gb_add(g, "Div", "e s", "y");
  output(g, "y");
  if (!fz_make(&f, g, true, NULL, true)) return;
  CHECK(groups(&f) == 1 && f.plan->n_unbound == 1 && !f.plan->spec[0]->bound, "symbolic: %d groups, %d unbound",
        groups(&f), f.plan->n_unbound);
  char *txt = NULL;
  CHECK(!kiln_fuse_spec_print(f.plan->spec[0], &txt) && strstr(txt, "domain [N,8]") && strstr(txt, "not bound"),
        "symbolic spec printed: %s", txt ? txt : "");
  kiln_free(txt);
  kiln_tensor *ins = random_inputs(g, 5);
  kiln_tensor out = {0};
  CHECK(kiln_fuse_eval_spec(f.plan->spec[0], NULL, &hooks) == KILN_E_INVALID_SHAPE, "an unbound spec is refused");
  kiln_error_clear();
  int sym = kiln_sym_find(f.sh->tab, "N");
  int64_t vals[8];
  for (int i = 0; i < 8; i++) vals[i] = KILN_DIM_UNSET;
  if (sym >= 0 && sym < 8) vals[sym] = 5;
  CHECK(sym >= 0 && !kiln_fuse_spec_bind(f.plan->spec[0], vals, 8) && f.plan->spec[0]->numel == 40,
        "bound at N = 5: %s", kiln_last_error());
  CHECK(agree_ins(&f, ins, msg, sizeof msg), "symbolic graph at N = 5 fused vs reference: %s", msg);
  /* symbol values given to the context: specs come out bound */
  kiln_schedule *s2 = NULL;
  kiln_fuse_plan *p2 = NULL;
  CHECK(!kiln_fuse_ctx_bind(f.ctx, vals, 8) && !kiln_schedule_from_graph(g, &s2) &&
            !kiln_fuse_schedule(f.ctx, s2, &p2) && p2->n_unbound == 0 && p2->spec[0]->bound &&
            p2->spec[0]->shape[0] == 5,
        "fused with N = 5 bound in the context: %s", kiln_last_error());
  kiln_fuse_plan_free(p2);
  kiln_schedule_free(s2);
  kiln_tensor_release(&out);
  free_tensors(ins, g->n_inputs);
  fz_free(&f);
}

/* ------------------------------------------------------------------ */
/* ONNX node tests                                                     */

/* True when every node of g is elementwise or broadcast. */
static bool all_elementwise(const kiln_graph *g) {
  if (!g->n_nodes) return false;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_fuse_kind k = kiln_fuse_kind_of(&g->nodes[i]);
    if (k != KILN_FUSE_ELEMWISE && k != KILN_FUSE_BROADCAST) return false;
  }
  return true;
}

/* Every case the reference supports, fused and evaluated spec by spec
 * (opaque groups through the reference kernels), against the reference
 * on test_data_set_0. The elementwise-only cases are the equivalence
 * test proper; the others cover reductions, views and anchors too. */
static void test_node_suite(const char *root) {
  char **names;
  int n = tu_list_cases(root, &names);
  if (!n) {
    printf("unit_fuse: no node tests under %s: suite skipped\n", root);
    return;
  }
  int ew = 0, ew_ok = 0, other = 0, other_ok = 0, fused_cases = 0, skipped = 0;
  for (int i = 0; i < n; i++) {
    tu_case c;
    if (!tu_case_load(&c, root, names[i])) {
      free(names[i]);
      continue;
    }
    free(names[i]);
    kiln_graph *g = c.graph;
    if (!g || tu_abi_limit(g) || kiln_ref_check_graph(g)) {
      kiln_error_clear();
      skipped++;
      tu_case_free(&c);
      continue;
    }
    fz f;
    if (!fz_make(&f, g, false, NULL, false)) {
      kiln_error_clear();
      skipped++;
      tu_case_free(&c);
      continue;
    }
    bool elem = all_elementwise(g);
    kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
    bool have = true;
    for (int k = 0, j = 0; k < g->n_inputs && have; k++) {
      int v = g->inputs[k];
      if (g->values[v].init) continue;
      kiln_status st = KILN_OK;
      have = tu_case_tensor(&c, 0, "input", j++, &ins[k], &st) && !st;
      if (have) tu_fix_dtype(&ins[k], g->values[v].type.dtype);
    }
    if (have) {
      bool fused = false;
      for (int s = 0; s < f.s->n_steps; s++)
        fused |= f.plan->spec[s] && f.plan->spec[s]->kind != KILN_FUSE_G_OPAQUE;
      fused_cases += fused;
      char msg[700];
      int ok = agree_ins(&f, ins, msg, sizeof msg);
      if (elem) {
        ew++;
        ew_ok += ok;
        CHECK(ok && (g->n_nodes > 1 || groups(&f) == 1), "%s (elementwise): %s", c.name, msg);
        if (ok && g->n_nodes == 1 && f.plan->spec[0] && f.plan->spec[0]->kind == KILN_FUSE_G_OPAQUE && verbose)
          printf("  %s: opaque group\n", c.name);
      } else {
        other++;
        other_ok += ok;
        CHECK(ok, "%s: %s", c.name, msg);
      }
      if (verbose && ok) printf("  ok %s: %d nodes in %d groups\n", c.name, g->n_nodes, groups(&f));
    } else {
      kiln_error_clear();
      skipped++;
    }
    free_tensors(ins, g->n_inputs);
    fz_free(&f);
    tu_case_free(&c);
  }
  free(names);
  printf("unit_fuse: node tests: %d/%d elementwise-only cases equal the reference (rtol %g); %d/%d others; "
         "%d cases with fused groups; %d skipped\n",
         ew_ok, ew, RTOL, other_ok, other, fused_cases, skipped);
}

/* ------------------------------------------------------------------ */
/* the bench models                                                    */

static void report(const char *name, const char *when, const kiln_graph *g, const fz *f) {
  const int *k = f->plan->by_kind;
  printf("  %-16s %-9s %4d nodes -> %4d groups (%d elementwise, %d reduce, %d anchor, %d view, %d opaque), "
         "%d nodes fused\n",
         name, when, g->n_nodes, f->plan->n_groups, k[KILN_FUSE_G_ELEMWISE], k[KILN_FUSE_G_REDUCE],
         k[KILN_FUSE_G_ANCHOR], k[KILN_FUSE_G_VIEW], k[KILN_FUSE_G_OPAQUE], f->plan->fused_nodes);
}

static void test_bench_models(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    printf("unit_fuse: no bench models in %s: skipped\n", dir);
    return;
  }
  char *files[64];
  int nf = 0;
  for (struct dirent *e; (e = readdir(d)) && nf < 64;) {
    size_t len = strlen(e->d_name);
    if (len > 5 && !strcmp(e->d_name + len - 5, ".onnx")) files[nf++] = strdup(e->d_name);
  }
  closedir(d);
  for (int i = 0; i < nf; i++) /* sorted, for a stable report */
    for (int j = i + 1; j < nf; j++)
      if (strcmp(files[i], files[j]) > 0) {
        char *t = files[i];
        files[i] = files[j];
        files[j] = t;
      }
  printf("unit_fuse: bench models (%s):\n", dir);
  for (int i = 0; i < nf; i++) {
    char path[2048], name[64];
    if (snprintf(path, sizeof path, "%s/%s", dir, files[i]) >= (int)sizeof path) continue;
    if (snprintf(name, sizeof name, "%.*s", (int)strlen(files[i]) - 5, files[i]) >= (int)sizeof name) continue;
    size_t size;
    void *bytes = tu_read_file(path, &size);
    kiln_graph *g = NULL;
    kiln_status s = bytes ? kiln_onnx_import(bytes, size, &g) : KILN_E_MODEL;
    free(bytes);
    CHECK(!s, "%s: import: %s", name, kiln_last_error());
    if (s) continue;
    fz f;
    int ok = fz_make(&f, g, false, NULL, true);
    CHECK(ok, "%s: fusing the imported graph failed", name);
    if (ok) {
      report(name, "imported", g, &f);
      if (!strcmp(name, "ew_chain"))
        CHECK(f.plan->n_groups == 1 && f.plan->spec[0]->n_nodes == 8, "ew_chain.onnx: %d groups, want 1",
              f.plan->n_groups);
      fz_free(&f);
    }
    kiln_rewrite_opts ro = {0};
    ro.eval = ref_node;
    kiln_rewrite_stats rst;
    kiln_graph *rw = NULL;
    if (!kiln_rewrite_run(g, &ro, &rw, &rst)) {
      ok = fz_make(&f, rw, true, NULL, true);
      CHECK(ok, "%s: fusing the rewritten graph failed", name);
      if (ok) {
        report(name, "rewritten", rw, &f);
        dump(&f, name);
        /* the fused evaluation of models with float inputs only, against the reference */
        bool floats = getenv("KILN_FUSE_BENCH_EVAL") != NULL;
        for (int k = 0; k < rw->n_inputs && floats; k++) floats = rw->values[rw->inputs[k]].type.dtype == KILN_F32;
        if (floats) {
          char msg[600];
          CHECK(agree(&f, msg, sizeof msg), "%s fused vs reference: %s", name, msg);
        }
        fz_free(&f);
      }
    } else {
      printf("  %s: rewrite failed: %s\n", name, kiln_last_error());
    }
    kiln_graph_free(g);
  }
  for (int i = 0; i < nf; i++) free(files[i]);
}

/* ------------------------------------------------------------------ */

int main(int argc, char **argv) {
  const char *root = KILN_NODE_TEST_DIR;
  /* the bench models of the main build, found from this file's path */
  char models_buf[1024];
  snprintf(models_buf, sizeof models_buf, "%s", __FILE__);
  char *cut = strstr(models_buf, "tests/unit_fuse.c");
  if (cut && (size_t)(cut - models_buf) + 32 < sizeof models_buf) strcpy(cut, "build/bench/models");
  else cut = NULL;
  const char *models = cut ? models_buf : "build/bench/models";
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "-m") && i + 1 < argc) models = argv[++i];
    else root = argv[i];
  }
  const char *env = getenv("KILN_BENCH_MODELS");
  if (env && *env) models = env;
  test_kinds();
  test_predicate();
  test_chain();
  test_conv();
  test_softmax();
  test_stored_and_dup();
  test_views();
  test_symbolic();
  test_node_suite(root);
  test_bench_models(models);
  printf("unit_fuse: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
