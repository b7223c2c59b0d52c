/* tests/unit_rewrite: unit tests of ir/graph_edit and ir/rewrite — each pass
 * on graphs built in code, BatchNormalization folding numerics, the driver,
 * examples/cnn.onnx, and the whole ONNX node-test suite run before and
 * after rewriting on the reference interpreter.
 *   unit_rewrite [-v] [NODE_TEST_ROOT] */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/onnx_import.h"
#include "ir/rewrite.h"
#include "reference/exec.h"
#include "reference/ops.h"
#include "tests/casefile.h"
#include "tests/testutil.h"
#include "tests/graphbuild.h"

static int passed, failed, verbose;
#include "tests/check.h"

/* ------------------------------------------------------------------ */
/* the evaluator the plugin will pass: the reference kernels           */

typedef struct eval_ctx {
  int calls;
} eval_ctx;

static kiln_status ref_eval(void *ctx, const kiln_graph *g, const kiln_node *n, const kiln_tensor *const *in,
                            kiln_tensor *out) {
  if (ctx) ((eval_ctx *)ctx)->calls++;
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

/* ------------------------------------------------------------------ */
/* building graphs in code                                             */






/* A constant; vals NULL fills it with rnd() (shifted by lo). */
static int cst(kiln_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims, const double *vals,
               double lo) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, dt, rank, dims)) exit(2);
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, vals ? vals[i] : lo + rnd());
  int v;
  if (kiln_edit_add_const(g, name, &t, &v)) exit(2);
  return v;
}

static int cst_i64(kiln_graph *g, const char *name, int n, const int64_t *vals) {
  kiln_tensor t = {0};
  int64_t d = n;
  if (kiln_tensor_alloc(&t, KILN_I64, 1, &d)) exit(2);
  for (int i = 0; i < n; i++) ((int64_t *)t.data)[i] = vals[i];
  int v;
  if (kiln_edit_add_const(g, name, &t, &v)) exit(2);
  return v;
}

/* Appends op_type of domain reading `ins` and writing new values `outs`
 * (names separated by spaces, "-" for an omitted optional). Returns the
 * node. */
static kiln_node *add_in(kiln_graph *g, const char *domain, const char *op, const char *ins, const char *outs) {
  int in[16], out[16], ni = 0, no = 0;
  char buf[512], *save;
  snprintf(buf, sizeof buf, "%s", ins);
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
    in[ni++] = strcmp(t, "-") ? val(g, t) : -1;
  snprintf(buf, sizeof buf, "%s", outs);
  for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
    if (!strcmp(t, "-")) {
      out[no++] = -1;
      continue;
    }
    if (kiln_graph_find_value(g, t) >= 0) {
      printf("test bug: '%s' exists\n", t);
      exit(2);
    }
    if (kiln_edit_add_value(g, t, &out[no++])) exit(2);
  }
  int idx;
  if (kiln_edit_insert_node(g, g->n_nodes, "", op, domain, ni, in, no, out, &idx)) {
    printf("test bug: %s\n", kiln_last_error());
    exit(2);
  }
  return &g->nodes[idx];
}

static kiln_node *add(kiln_graph *g, const char *op, const char *ins, const char *outs) {
  return add_in(g, "", op, ins, outs);
}

static void set_type(kiln_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims) {
  kiln_type *ty = &g->values[val(g, name)].type;
  ty->kind = KILN_TYPE_TENSOR;
  ty->dtype = dt;
  ty->rank = rank;
  for (int i = 0; i < rank; i++) ty->dims[i].value = dims[i];
}

/* Random input tensors for every graph input (owned by the caller). */
static kiln_tensor *random_inputs(const kiln_graph *g) {
  kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_type *ty = &g->values[g->inputs[i]].type;
    int64_t dims[KILN_MAX_RANK];
    for (int d = 0; d < ty->rank; d++) dims[d] = ty->dims[d].value;
    if (kiln_tensor_alloc(&ins[i], ty->dtype, ty->rank, dims)) exit(2);
    for (int64_t k = 0; k < ins[i].numel; k++) kiln_set_f(&ins[i], k, 2 * rnd());
  }
  return ins;
}

static void free_tensors(kiln_tensor *t, int n) {
  for (int i = 0; t && i < n; i++) kiln_tensor_release(&t[i]);
  free(t);
}

/* Runs g on ins (one per graph input, in order; NULL entries are not bound). */
static kiln_status run(const kiln_graph *g, const kiln_tensor *ins, kiln_tensor **outs) {
  const kiln_tensor **bound = calloc((size_t)g->n_values + 1, sizeof *bound);
  *outs = calloc((size_t)g->n_outputs + 1, sizeof **outs);
  for (int i = 0; i < g->n_inputs; i++)
    if (ins && ins[i].dtype != KILN_UNDEFINED) bound[g->inputs[i]] = &ins[i];
  kiln_status s = kiln_ref_run(g, bound, *outs);
  free(bound);
  return s;
}

/* Same graph inputs and outputs: names and order. */
static int same_io(const kiln_graph *a, const kiln_graph *b) {
  if (a->n_inputs != b->n_inputs || a->n_outputs != b->n_outputs) return 0;
  for (int i = 0; i < a->n_inputs; i++)
    if (strcmp(a->values[a->inputs[i]].name, b->values[b->inputs[i]].name)) return 0;
  for (int i = 0; i < a->n_outputs; i++)
    if (strcmp(a->values[a->outputs[i]].name, b->values[b->outputs[i]].name)) return 0;
  return 1;
}

/* Runs both graphs on the same random inputs and compares every output.
 * Returns 1 when all agree within rtol/atol; msg says what differed. */
static int agree(const kiln_graph *a, const kiln_graph *b, double rtol, double atol, char *msg, size_t len) {
  snprintf(msg, len, "ok");
  if (!same_io(a, b)) {
    snprintf(msg, len, "graph inputs/outputs differ");
    return 0;
  }
  kiln_tensor *ins = random_inputs(a), *oa, *ob;
  kiln_status sa = run(a, ins, &oa), sb = run(b, ins, &ob);
  int ok = 1;
  if (sa || sb) {
    snprintf(msg, len, "run failed: %s", kiln_last_error());
    ok = 0;
  }
  for (int o = 0; ok && o < a->n_outputs; o++) {
    char m[400];
    if (!tu_compare(&ob[o], &oa[o], rtol, atol, m, sizeof m, NULL, NULL)) {
      snprintf(msg, len, "output %d: %.180s", o, m);
      ok = 0;
    }
  }
  free_tensors(ins, a->n_inputs);
  free_tensors(oa, a->n_outputs);
  free_tensors(ob, b->n_outputs);
  return ok;
}

static int count_op(const kiln_graph *g, const char *op) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++) n += !strcmp(g->nodes[i].op_type, op);
  return n;
}

static int valid(const kiln_graph *g) {
  kiln_status s = kiln_edit_check(g);
  if (s) printf("  invalid graph: %s\n", kiln_last_error());
  return s == KILN_OK;
}

/* ------------------------------------------------------------------ */
/* graph_edit                                                          */

static void test_edit(void) {
  kiln_graph *g = new_graph(13);
  int64_t d2[2] = {2, 3};
  input(g, "x", KILN_F32, 2, d2);
  cst(g, "c", KILN_F32, 2, d2, NULL, 0);
  add(g, "Add", "x c", "a");
  kiln_node *r = add(g, "LeakyRelu", "a", "y");
  CHECK(kiln_edit_set_float(r, "alpha", 0.25f) == KILN_OK, "set alpha");
  output(g, "y");
  CHECK(valid(g), "built graph is valid");

  /* clone: equal content, shared nothing */
  kiln_graph *c;
  CHECK(kiln_edit_clone(g, &c) == KILN_OK && c, "clone");
  CHECK(c->n_nodes == 2 && c->n_values == g->n_values && same_io(g, c) && valid(c), "clone has the same shape");
  CHECK(c->values[val(c, "c")].init != g->values[val(g, "c")].init &&
            !memcmp(c->values[val(c, "c")].init->data, g->values[val(g, "c")].init->data, 24),
        "clone copies constant data");
  CHECK(c->nodes[1].attrs != g->nodes[1].attrs && kiln_attr_float(&c->nodes[1], "alpha", 0) == 0.25f,
        "clone copies attributes");
  kiln_edit_set_float(&c->nodes[1], "alpha", 0.5f);
  CHECK(kiln_attr_float(&g->nodes[1], "alpha", 0) == 0.25f && c->nodes[1].n_attrs == 1,
        "setting an attribute replaces it in the clone only");
  char m[256];
  CHECK(!agree(g, c, 1e-6, 1e-7, m, sizeof m), "the clone with another alpha computes something else");
  kiln_graph_free(c);

  /* shared clone: the constants' data borrowed (not owned), the rest its own */
  CHECK(kiln_edit_clone_shared(g, &c) == KILN_OK && c, "shared clone");
  const kiln_tensor *ct = c->values[val(c, "c")].init, *gt = g->values[val(g, "c")].init;
  CHECK(ct && ct != gt && ct->data == gt->data && !ct->owns && gt->owns && ct->numel == 6 && ct->dtype == KILN_F32,
        "shared clone borrows the constant's data");
  CHECK(c->nodes[1].attrs != g->nodes[1].attrs && c->values[0].name != g->values[0].name && valid(c),
        "shared clone has its own structure");
  CHECK(agree(g, c, 0, 0, m, sizeof m), "shared clone computes the same: %s", m);
  float before[6];
  memcpy(before, gt->data, sizeof before);
  kiln_graph_free(c); /* frees nothing of g's (ASan: g's data is read below) */
  CHECK(g->values[val(g, "c")].init == gt && gt->owns && !memcmp(gt->data, before, sizeof before),
        "freeing the shared clone leaves g's constant");

  /* the rewrite driver's result borrows the constants with share_constants, copies them without */
  for (int share = 0; share < 2; share++) {
    kiln_rewrite_opts ro = {0};
    ro.share_constants = share != 0;
    kiln_graph *rw = NULL;
    CHECK(kiln_rewrite_run(g, &ro, &rw, NULL) == KILN_OK && rw, "rewrite (share %d)", share);
    const kiln_tensor *rt = rw ? rw->values[val(rw, "c")].init : NULL;
    CHECK(rt && (share ? rt->data == gt->data && !rt->owns : rt->data != gt->data && rt->owns) &&
              !memcmp(rt->data, gt->data, 24) && agree(g, rw, 0, 0, m, sizeof m),
          "rewrite, share_constants %d: the constant %s", share, share ? "borrowed" : "copied");
    kiln_graph_free(rw);
  }

  /* unique names */
  char nm[64];
  kiln_edit_unique_name(g, "a", nm, sizeof nm);
  CHECK(!strcmp(nm, "a_1"), "unique name for a taken name: %s", nm);
  kiln_edit_unique_name(g, "fresh", nm, sizeof nm);
  CHECK(!strcmp(nm, "fresh"), "a free name is kept: %s", nm);
  int v1;
  CHECK(kiln_edit_add_value(g, "a", &v1) == KILN_OK && !strcmp(g->values[v1].name, "a_1"), "add_value uniquifies");

  /* insert a node in the middle: producers renumbered */
  int nin[1] = {val(g, "a")}, nout[1] = {v1};
  int at;
  CHECK(kiln_edit_insert_node(g, 1, "neg", "Neg", "", 1, nin, 1, nout, &at) == KILN_OK && at == 1, "insert");
  CHECK(g->values[val(g, "y")].producer == 2 && g->values[v1].producer == 1 && valid(g),
        "producers after insertion");
  CHECK(kiln_edit_insert_node(g, 0, "", "Neg", "", 1, nin, 1, nout, NULL) == KILN_E_INTERNAL,
        "writing a value twice is refused");
  /* rewire y's input to the new node, then it is part of the graph */
  CHECK(kiln_edit_replace_uses(g, val(g, "a"), v1) == 2, "two uses of a: LeakyRelu and Neg");
  CHECK(g->nodes[2].in[0] == v1 && g->nodes[1].in[0] == v1, "uses replaced (the Neg now reads itself)");
  CHECK(kiln_edit_check(g) == KILN_E_INTERNAL && strstr(kiln_last_error(), "not defined before"),
        "check catches a node reading its own output: %s", kiln_last_error());
  g->nodes[1].in[0] = val(g, "a");
  CHECK(valid(g), "valid again");

  /* remove the Add: its output becomes undefined */
  kiln_edit_remove_node(g, 0);
  CHECK(g->n_nodes == 2 && g->values[v1].producer == 0, "remove_node renumbers");
  CHECK(kiln_edit_check(g) == KILN_E_INTERNAL, "reading a removed node's output is caught");
  g->nodes[0].in[0] = val(g, "x");
  int dropped;
  CHECK(kiln_edit_compact(g, &dropped) == KILN_OK && dropped == 2 && g->n_values == 3 && valid(g),
        "compact drops 'a' and the unused constant (dropped %d, %d values)", dropped, g->n_values);
  CHECK(g->values[g->inputs[0]].is_input && !strcmp(g->values[g->outputs[0]].name, "y"), "io kept by compact");

  /* check catches other broken rules */
  kiln_graph *b;
  kiln_edit_clone(g, &b);
  kiln_free(b->values[1].name);
  b->values[1].name = kiln_strdup("x");
  CHECK(kiln_edit_check(b) == KILN_E_INTERNAL && strstr(kiln_last_error(), "both named"), "duplicate names");
  kiln_graph_free(b);
  kiln_edit_clone(g, &b);
  b->values[g->outputs[0]].producer = -1;
  CHECK(kiln_edit_check(b) == KILN_E_INTERNAL && strstr(kiln_last_error(), "producer"), "stale producer");
  kiln_graph_free(b);
  kiln_edit_clone(g, &b);
  kiln_node tmp = b->nodes[0];
  b->nodes[0] = b->nodes[1];
  b->nodes[1] = tmp;
  CHECK(kiln_edit_check(b) == KILN_E_INTERNAL, "nodes out of order");
  kiln_graph_free(b);
  kiln_edit_clone(g, &b);
  b->values[b->inputs[0]].is_input = false;
  CHECK(kiln_edit_check(b) == KILN_E_INTERNAL, "input flag and list disagree");
  kiln_graph_free(b);

  /* attributes of every kind are set, replaced, copied and removed */
  kiln_node *n = &g->nodes[0];
  int64_t iv[3] = {1, 2, 3};
  float fv[2] = {0.5f, -1};
  kiln_tensor t = {0};
  int64_t one = 1;
  kiln_tensor_alloc(&t, KILN_I64, 1, &one);
  CHECK(!kiln_edit_set_ints(n, "i3", iv, 3) && !kiln_edit_set_floats(n, "f2", fv, 2) &&
            !kiln_edit_set_string(n, "s", "abc") && !kiln_edit_set_tensor(n, "t", &t) &&
            !kiln_edit_set_int(n, "k", 7),
        "setters");
  CHECK(t.data == NULL && n->n_attrs == 5, "set_tensor moved the tensor");
  CHECK(!kiln_edit_set_int(n, "s", 9) && n->n_attrs == 5 && kiln_attr_int(n, "s", 0) == 9,
        "same name replaces, also across types");
  kiln_attr copy;
  CHECK(kiln_edit_copy_attr(&copy, kiln_node_attr(n, "i3")) == KILN_OK && copy.n == 3 && copy.ints[2] == 3 &&
            copy.ints != kiln_node_attr(n, "i3")->ints,
        "copy_attr is deep");
  kiln_edit_free_attr(&copy);
  CHECK(kiln_edit_remove_attr(n, "f2") && !kiln_node_attr(n, "f2") && n->n_attrs == 4 &&
            !kiln_edit_remove_attr(n, "f2"),
        "remove_attr");
  kiln_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* dead code elimination                                               */

static void test_dce(void) {
  kiln_graph *g = new_graph(13);
  int64_t d[2] = {2, 3};
  input(g, "x", KILN_F32, 2, d);
  cst(g, "unused_w", KILN_F32, 2, d, NULL, 0);
  cst(g, "w", KILN_F32, 2, d, NULL, 0);
  add(g, "Neg", "x", "n");        /* dead chain: Neg -> Exp */
  add(g, "Exp", "n", "e");
  add(g, "Mul", "x w", "m");      /* live */
  cst_i64(g, "splits", 2, (const int64_t[]){1, 2});
  kiln_edit_set_int(add(g, "Split", "m splits", "s0 s1"), "axis", 1); /* live through s0 */
  add(g, "Abs", "s1", "dead_abs");
  add(g, "Relu", "s0", "y");
  output(g, "y");
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  kiln_rewrite_stats st = {0};
  CHECK(kiln_rewrite_dce(g, &st) == KILN_OK, "dce: %s", kiln_last_error());
  CHECK(st.dead_nodes == 3 && g->n_nodes == 3, "3 dead nodes removed (%d, %d left)", st.dead_nodes, g->n_nodes);
  CHECK(count_op(g, "Split") == 1 && count_op(g, "Exp") == 0 && count_op(g, "Abs") == 0, "the right ones");
  CHECK(kiln_graph_find_value(g, "unused_w") < 0 && kiln_graph_find_value(g, "w") >= 0,
        "unused initializer dropped, used one kept");
  CHECK(st.dead_values == 4, "values dropped: n, e, dead_abs, unused_w (%d)", st.dead_values);
  CHECK(kiln_graph_find_value(g, "s1") >= 0, "an unused output of a live node stays");
  char m[256];
  CHECK(valid(g) && agree(before, g, 0, 0, m, sizeof m), "dce keeps the result: %s", m);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_dce(g, &st) == KILN_OK && st.dead_nodes == 0 && st.dead_values == 0, "dce is idempotent");
  kiln_graph_free(g);
  kiln_graph_free(before);

  /* a graph input that is also an initializer stays (it is an input) */
  g = new_graph(13);
  input(g, "x", KILN_F32, 2, d);
  int v = input(g, "opt", KILN_F32, 2, d);
  kiln_tensor t = {0};
  kiln_tensor_alloc(&t, KILN_F32, 2, d);
  g->values[v].init = kiln_malloc(sizeof t);
  *g->values[v].init = t;
  add(g, "Relu", "x", "y");
  output(g, "y");
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_dce(g, &st) == KILN_OK && g->n_inputs == 2 && kiln_graph_find_value(g, "opt") >= 0 && valid(g),
        "unused graph input with a default kept");
  kiln_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* Identity and Dropout                                                */

static void test_noops(void) {
  int64_t d[2] = {2, 3};
  kiln_rewrite_stats st = {0};
  char m[256];
  /* Identity in the middle, and one whose output is a graph output */
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, 2, d);
  add(g, "Identity", "x", "a");
  add(g, "Relu", "a", "b");
  add(g, "Identity", "b", "c");
  add(g, "Identity", "c", "y");
  add(g, "Exp", "b", "z");
  output(g, "y");
  output(g, "z");
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  CHECK(kiln_rewrite_noops(g, &st) == KILN_OK && st.identities == 3 && g->n_nodes == 2,
        "three Identities removed (%d, %d nodes)", st.identities, g->n_nodes);
  CHECK(g->nodes[0].in[0] == g->inputs[0] && !strcmp(g->values[g->nodes[0].out[0]].name, "y"),
        "Relu reads x and writes the graph output y");
  CHECK(g->nodes[1].in[0] == g->nodes[0].out[0], "Exp reads y now");
  CHECK(valid(g) && agree(before, g, 0, 0, m, sizeof m), "same results: %s", m);
  kiln_graph_free(g);
  kiln_graph_free(before);

  /* Identities that must stay: input -> output, constant -> output,
   * output -> output */
  g = new_graph(13);
  input(g, "x", KILN_F32, 2, d);
  cst(g, "k", KILN_F32, 2, d, NULL, 0);
  add(g, "Identity", "x", "y1");
  add(g, "Identity", "k", "y2");
  add(g, "Relu", "x", "y3");
  add(g, "Identity", "y3", "y4");
  output(g, "y1");
  output(g, "y2");
  output(g, "y3");
  output(g, "y4");
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_noops(g, &st) == KILN_OK && st.identities == 0 && g->n_nodes == 4 && valid(g),
        "Identities between graph inputs/outputs/constants stay (%d removed)", st.identities);
  kiln_graph_free(g);

  /* Dropout: removable or not */
  struct {
    int opset;
    const char *outs;
    int mask_used, training; /* training: 0 none, 1 const false, 2 const true, 3 graph input */
    int removed;
  } cases[] = {
      {13, "y", 0, 0, 1},      {13, "y m", 0, 0, 1}, {13, "y m", 1, 0, 0}, {13, "y", 0, 1, 1},
      {13, "y", 0, 2, 0},      {13, "y", 0, 3, 0},   {10, "y", 0, 0, 1},   {10, "y m", 1, 0, 0},
      {6, "y", 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    g = new_graph(cases[i].opset);
    input(g, "x", KILN_F32, 2, d);
    char ins[64] = "x";
    if (cases[i].training) {
      cst(g, "r", KILN_F32, 0, NULL, (const double[]){0.3}, 0);
      if (cases[i].training == 3) {
        input(g, "t", KILN_BOOL, 0, NULL);
      } else {
        kiln_tensor t = {0};
        kiln_tensor_alloc(&t, KILN_BOOL, 0, NULL);
        kiln_set_i(&t, 0, cases[i].training == 2);
        int v;
        kiln_edit_add_const(g, "t", &t, &v);
      }
      snprintf(ins, sizeof ins, "x r t");
    }
    add(g, "Dropout", ins, cases[i].outs);
    add(g, "Relu", "y", "out");
    output(g, "out");
    if (cases[i].mask_used) {
      add(g, "Cast", "m", "mf");
      kiln_edit_set_int(&g->nodes[g->n_nodes - 1], "to", KILN_F32);
      output(g, "mf");
    }
    kiln_edit_clone(g, &before);
    memset(&st, 0, sizeof st);
    CHECK(kiln_rewrite_noops(g, &st) == KILN_OK && st.dropouts == cases[i].removed &&
              count_op(g, "Dropout") == !cases[i].removed && valid(g),
          "Dropout case %zu (opset %d, outputs %s): removed %d", i, cases[i].opset, cases[i].outs, st.dropouts);
    if (cases[i].removed) CHECK(agree(before, g, 0, 0, m, sizeof m), "Dropout case %zu: %s", i, m);
    kiln_graph_free(g);
    kiln_graph_free(before);
  }
}

/* ------------------------------------------------------------------ */
/* CSE                                                                 */

static void test_cse(void) {
  int64_t d[2] = {2, 3};
  kiln_rewrite_stats st = {0};
  char m[256];
  /* square inputs so that every branch can be summed */
  int64_t sq[2] = {3, 3};
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, 2, sq);
  add(g, "Relu", "x", "r1");
  add(g, "Relu", "x", "r2");
  add(g, "Exp", "r1", "e1");
  add(g, "Exp", "r2", "e2");
  add(g, "Add", "e1 e2", "s");
  kiln_edit_set_float(add(g, "LeakyRelu", "s", "l1"), "alpha", 0.1f);
  kiln_edit_set_float(add(g, "LeakyRelu", "s", "l2"), "alpha", 0.2f);
  kiln_edit_set_ints(add(g, "Transpose", "s", "t1"), "perm", (const int64_t[]){1, 0}, 2);
  kiln_edit_set_ints(add(g, "Transpose", "s", "t2"), "perm", (const int64_t[]){1, 0}, 2);
  kiln_edit_set_ints(add(g, "Transpose", "s", "t3"), "perm", (const int64_t[]){0, 1}, 2);
  kiln_node *n = add(g, "Clip", "s", "c1");
  n->opset = 6;
  kiln_edit_set_float(n, "min", -0.5f);
  kiln_edit_set_float(n, "max", 0.5f);
  n = add(g, "Clip", "s", "c2");
  n->opset = 6;
  kiln_edit_set_float(n, "max", 0.5f);
  kiln_edit_set_float(n, "min", -0.5f);
  n = add(g, "Clip", "s", "c3");
  n->opset = 6;
  kiln_edit_set_float(n, "max", 0.5f);
  kiln_edit_set_float(n, "min", -0.0f); /* -0 and 0 differ bit for bit */
  n = add(g, "Clip", "s", "c4");
  n->opset = 6;
  kiln_edit_set_float(n, "max", 0.5f);
  kiln_edit_set_float(n, "min", 0.0f);
  int64_t pads[4] = {0, 1, 0, 1};
  n = add(g, "Pad", "s", "p1");
  n->opset = 2;
  kiln_edit_set_ints(n, "pads", pads, 4);
  kiln_edit_set_string(n, "mode", "reflect");
  n = add(g, "Pad", "s", "p2");
  n->opset = 2;
  kiln_edit_set_ints(n, "pads", pads, 4);
  kiln_edit_set_string(n, "mode", "edge"); /* string differs */
  /* constants: Constant nodes with equal / different tensors, equal initializers */
  kiln_tensor t = {0};
  kiln_tensor_alloc(&t, KILN_F32, 2, sq);
  for (int i = 0; i < 9; i++) kiln_set_f(&t, i, i);
  kiln_tensor t2 = {0}, t3 = {0};
  kiln_tensor_copy(&t2, &t);
  kiln_tensor_copy(&t3, &t);
  kiln_set_f(&t3, 8, 9.5);
  kiln_edit_set_tensor(add(g, "Constant", "", "k1"), "value", &t);
  kiln_edit_set_tensor(add(g, "Constant", "", "k2"), "value", &t2);
  kiln_edit_set_tensor(add(g, "Constant", "", "k3"), "value", &t3);
  double vals[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  cst(g, "w1", KILN_F32, 2, sq, vals, 0);
  cst(g, "w2", KILN_F32, 2, sq, vals, 0);
  add(g, "Mul", "s w1", "mw1");
  add(g, "Mul", "s w2", "mw2"); /* equal once w2 is w1 */
  add(g, "Sum", "l1 l2 t1 t2 t3 c1 c2 c3 c4 k1 k2 k3 mw1 mw2", "out");
  add(g, "Sub", "p1 p2", "pd");
  output(g, "out");
  output(g, "pd");
  CHECK(valid(g), "cse graph valid");
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  int nodes0 = g->n_nodes;
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_cse(g, &st) == KILN_OK, "cse: %s", kiln_last_error());
  /* merged: r2, e2, t2, c2, k2, mw2 (after w2 -> w1) = 6 nodes, 1 constant */
  CHECK(st.cse_nodes == 6 && st.cse_consts == 1 && g->n_nodes == nodes0 - 6,
        "cse merged %d nodes and %d constants (%d -> %d nodes)", st.cse_nodes, st.cse_consts, nodes0, g->n_nodes);
  CHECK(count_op(g, "LeakyRelu") == 2 && count_op(g, "Transpose") == 2 && count_op(g, "Clip") == 3 &&
            count_op(g, "Pad") == 2 && count_op(g, "Constant") == 2,
        "nodes with different attributes kept");
  CHECK(kiln_graph_find_value(g, "w2") < 0, "duplicate initializer dropped");
  CHECK(valid(g) && agree(before, g, 0, 0, m, sizeof m), "cse keeps results: %s", m);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_cse(g, &st) == KILN_OK && st.cse_nodes == 0 && st.cse_consts == 0, "cse is idempotent");
  kiln_graph_free(g);
  kiln_graph_free(before);

  /* equal but for an omitted optional output: the first cannot stand in
   * for the second (its mask is not computed) */
  g = new_graph(13);
  input(g, "x", KILN_F32, 2, d);
  add(g, "Dropout", "x", "y1 -");
  add(g, "Dropout", "x", "y2 m2");
  add(g, "Cast", "m2", "mf");
  kiln_edit_set_int(&g->nodes[2], "to", KILN_F32);
  add(g, "Add", "y1 y2", "sum");
  output(g, "sum");
  output(g, "mf");
  kiln_edit_clone(g, &before);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_cse(g, &st) == KILN_OK && st.cse_nodes == 0 && valid(g) && agree(before, g, 0, 0, m, sizeof m),
        "Dropouts with and without a mask are not merged (%d): %s", st.cse_nodes, m);
  kiln_graph_free(g);
  kiln_graph_free(before);

  /* random ops are not merged (the reference cannot run them: no run) */
  g = new_graph(13);
  kiln_edit_set_ints(add(g, "RandomNormal", "", "rn1"), "shape", sq, 2);
  kiln_edit_set_ints(add(g, "RandomNormal", "", "rn2"), "shape", sq, 2);
  add(g, "Sub", "rn1 rn2", "rd");
  output(g, "rd");
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_cse(g, &st) == KILN_OK && st.cse_nodes == 0 && g->n_nodes == 3 && valid(g),
        "two RandomNormal stay two");
  kiln_graph_free(g);

  /* graph outputs: a duplicate that is an output takes over the name; two
   * duplicates that are both outputs stay */
  g = new_graph(13);
  input(g, "x", KILN_F32, 2, d);
  add(g, "Relu", "x", "a");
  add(g, "Exp", "a", "ea");
  add(g, "Relu", "x", "b"); /* graph output */
  add(g, "Neg", "x", "n1"); /* both outputs */
  add(g, "Neg", "x", "n2");
  output(g, "ea");
  output(g, "b");
  output(g, "n1");
  output(g, "n2");
  kiln_edit_clone(g, &before);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_cse(g, &st) == KILN_OK && st.cse_nodes == 1 && g->n_nodes == 4, "one merge (%d)", st.cse_nodes);
  CHECK(g->nodes[0].out[0] == val(g, "b") && g->nodes[1].in[0] == val(g, "b"),
        "the first Relu writes the output 'b' and Exp reads it");
  CHECK(kiln_graph_find_value(g, "a") < 0 && valid(g) && agree(before, g, 0, 0, m, sizeof m), "results: %s", m);
  kiln_graph_free(g);
  kiln_graph_free(before);
}

/* ------------------------------------------------------------------ */
/* Transpose                                                           */

static void test_transpose(void) {
  int64_t d3[3] = {2, 3, 4};
  kiln_rewrite_stats st = {0};
  char m[256];
  /* [1,2,0] then [2,0,1] is the identity: both go */
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, 3, d3);
  kiln_edit_set_ints(add(g, "Transpose", "x", "a"), "perm", (const int64_t[]){1, 2, 0}, 3);
  kiln_edit_set_ints(add(g, "Transpose", "a", "b"), "perm", (const int64_t[]){2, 0, 1}, 3);
  add(g, "Relu", "b", "y");
  /* [0,2,1] then [1,0,2] composes to [2,0,1] */
  kiln_edit_set_ints(add(g, "Transpose", "x", "c"), "perm", (const int64_t[]){0, 2, 1}, 3);
  kiln_edit_set_ints(add(g, "Transpose", "c", "e"), "perm", (const int64_t[]){1, 0, 2}, 3);
  add(g, "Neg", "e", "z");
  /* default then default: identity whatever the rank */
  add(g, "Transpose", "x", "f");
  add(g, "Transpose", "f", "h");
  add(g, "Exp", "h", "w");
  /* explicit identity perm */
  kiln_edit_set_ints(add(g, "Transpose", "x", "i"), "perm", (const int64_t[]){0, 1, 2}, 3);
  add(g, "Abs", "i", "v");
  /* T1 with another reader: T2 merges, T1 stays */
  kiln_edit_set_ints(add(g, "Transpose", "x", "j"), "perm", (const int64_t[]){2, 1, 0}, 3);
  kiln_edit_set_ints(add(g, "Transpose", "j", "k"), "perm", (const int64_t[]){1, 2, 0}, 3);
  add(g, "Sigmoid", "j", "u");
  add(g, "Sigmoid", "k", "u2");
  /* default perm after an explicit one; rank from the explicit perm */
  kiln_edit_set_ints(add(g, "Transpose", "x", "p"), "perm", (const int64_t[]){1, 0, 2}, 3);
  add(g, "Transpose", "p", "q");
  add(g, "Floor", "q", "t");
  const char *outs[] = {"y", "z", "w", "v", "u", "u2", "t"};
  for (int i = 0; i < 7; i++) output(g, outs[i]);
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  CHECK(kiln_rewrite_transposes(g, &st) == KILN_OK && kiln_rewrite_dce(g, &st) == KILN_OK, "transpose pass");
  CHECK(st.transposes_merged == 5 && st.transposes_removed == 3,
        "merged %d (want 5), removed %d (want 3)", st.transposes_merged, st.transposes_removed);
  CHECK(count_op(g, "Transpose") == 4, "4 Transposes left: %d", count_op(g, "Transpose"));
  int e = val(g, "e");
  const kiln_node *te = &g->nodes[g->values[e].producer];
  size_t np;
  const int64_t *perm = kiln_attr_ints(te, "perm", &np);
  CHECK(te->in[0] == g->inputs[0] && perm && np == 3 && perm[0] == 2 && perm[1] == 0 && perm[2] == 1,
        "composed perm [2,0,1]");
  const kiln_node *tq = &g->nodes[g->values[val(g, "q")].producer];
  perm = kiln_attr_ints(tq, "perm", &np);
  CHECK(tq->in[0] == g->inputs[0] && perm && np == 3 && perm[0] == 2 && perm[1] == 0 && perm[2] == 1,
        "default after [1,0,2] composes to [2,0,1]");
  CHECK(valid(g) && agree(before, g, 0, 0, m, sizeof m), "transposes keep results: %s", m);
  kiln_graph_free(g);
  kiln_graph_free(before);

  /* a default perm with no known rank is left alone; a bad perm too */
  g = new_graph(13);
  int x = input(g, "x", KILN_F32, 3, d3);
  g->values[x].type.rank = -1;
  add(g, "Transpose", "x", "a");
  kiln_edit_set_ints(add(g, "Transpose", "a", "b"), "perm", (const int64_t[]){0, 0, 1}, 3);
  add(g, "Relu", "b", "y");
  output(g, "y");
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_transposes(g, &st) == KILN_OK && st.transposes_merged == 0 && st.transposes_removed == 0 &&
            valid(g),
        "unknown rank / invalid perm: no change");
  kiln_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* BatchNormalization folding                                          */

/* Conv(+bias) + BN. dtype f32/f64, group 1 or 2. */
static void check_conv_bn(kiln_dtype dt, int with_bias, int group, int opset) {
  kiln_graph *g = new_graph(opset);
  int64_t xd[4] = {2, 4, 6, 5}, wd[4] = {6, 4 / group, 3, 3}, cd[1] = {6};
  input(g, "x", dt, 4, xd);
  cst(g, "W", dt, 4, wd, NULL, 0);
  if (with_bias) cst(g, "B", dt, 1, cd, NULL, 0);
  kiln_node *c = add(g, "Conv", with_bias ? "x W B" : "x W", "c");
  kiln_edit_set_ints(c, "pads", (const int64_t[]){1, 1, 1, 1}, 4);
  kiln_edit_set_int(c, "group", group);
  cst(g, "scale", dt, 1, cd, NULL, 1.0);
  cst(g, "bias", dt, 1, cd, NULL, 0);
  cst(g, "mean", dt, 1, cd, NULL, 0);
  cst(g, "var", dt, 1, cd, NULL, 1.5); /* in [0.5, 2.5) */
  kiln_edit_set_float(add(g, "BatchNormalization", "c scale bias mean var", "y"), "epsilon", 1e-3f);
  output(g, "y");
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  kiln_rewrite_stats st = {0};
  CHECK(kiln_rewrite_fold_bn(g, &st) == KILN_OK && st.bn_conv == 1 && g->n_nodes == 1 &&
            !strcmp(g->nodes[0].op_type, "Conv") && g->nodes[0].n_in == 3,
        "Conv+BN (%s, bias %d, group %d, opset %d) folds (%d)", kiln_dtype_name(dt), with_bias, group, opset,
        st.bn_conv);
  CHECK(kiln_graph_find_value(g, "W") < 0 && kiln_graph_find_value(g, "scale") < 0,
        "the old weights and BN parameters are dropped");
  char m[256];
  double rtol = dt == KILN_F32 ? 1e-5 : 1e-12;
  CHECK(valid(g) && agree(before, g, rtol, rtol * 0.1, m, sizeof m), "Conv+BN %s: folded agrees: %s",
        kiln_dtype_name(dt), m);
  kiln_graph_free(g);
  kiln_graph_free(before);
}

/* Gemm + BN with C of the given rank/shape (crank -1: no C). */
static void check_gemm_bn(kiln_dtype dt, int trans_a, int trans_b, int crank, const int64_t *cdims) {
  const int64_t M = 3, K = 4, N = 5;
  kiln_graph *g = new_graph(13);
  int64_t ad[2] = {trans_a ? K : M, trans_a ? M : K}, bd[2] = {trans_b ? N : K, trans_b ? K : N}, nd[1] = {N};
  input(g, "a", dt, 2, ad);
  cst(g, "Bw", dt, 2, bd, NULL, 0);
  if (crank >= 0) cst(g, "C", dt, crank, cdims, NULL, 0);
  kiln_node *gm = add(g, "Gemm", crank >= 0 ? "a Bw C" : "a Bw", "h");
  kiln_edit_set_int(gm, "transA", trans_a);
  kiln_edit_set_int(gm, "transB", trans_b);
  kiln_edit_set_float(gm, "alpha", 0.5f);
  kiln_edit_set_float(gm, "beta", 2.0f);
  cst(g, "scale", dt, 1, nd, NULL, 1.0);
  cst(g, "bias", dt, 1, nd, NULL, 0);
  cst(g, "mean", dt, 1, nd, NULL, 0);
  cst(g, "var", dt, 1, nd, NULL, 1.5);
  add(g, "BatchNormalization", "h scale bias mean var", "y");
  output(g, "y");
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  kiln_rewrite_stats st = {0};
  char shape[64];
  kiln_shape_str(crank < 0 ? 0 : crank, cdims, shape, sizeof shape);
  CHECK(kiln_rewrite_fold_bn(g, &st) == KILN_OK && st.bn_gemm == 1 && g->n_nodes == 1 &&
            kiln_attr_float(&g->nodes[0], "beta", 0) == 1.0f,
        "Gemm+BN (%s, transA %d, transB %d, C %s) folds", kiln_dtype_name(dt), trans_a, trans_b,
        crank < 0 ? "none" : shape);
  char m[256];
  double rtol = dt == KILN_F32 ? 1e-5 : 1e-12;
  CHECK(valid(g) && agree(before, g, rtol, rtol * 0.1, m, sizeof m), "Gemm+BN (transB %d, C %s) agrees: %s",
        trans_b, crank < 0 ? "none" : shape, m);
  kiln_graph_free(g);
  kiln_graph_free(before);
}

static void test_fold_bn(void) {
  for (int dt = 0; dt < 2; dt++)
    for (int bias = 0; bias < 2; bias++) check_conv_bn(dt ? KILN_F64 : KILN_F32, bias, 1, 13);
  check_conv_bn(KILN_F32, 1, 2, 13);
  check_conv_bn(KILN_F32, 1, 1, 15);
  check_conv_bn(KILN_F32, 0, 1, 7);
  int64_t cN[1] = {5}, c1N[2] = {1, 5}, cMN[2] = {3, 5}, cM1[2] = {3, 1}, c1[1] = {1};
  for (int tb = 0; tb < 2; tb++) {
    check_gemm_bn(KILN_F32, 0, tb, -1, NULL);
    check_gemm_bn(KILN_F32, 0, tb, 1, cN);
    check_gemm_bn(KILN_F64, 1, tb, 2, c1N);
    check_gemm_bn(KILN_F32, tb, tb, 2, cMN);
    check_gemm_bn(KILN_F32, 0, tb, 2, cM1);
    check_gemm_bn(KILN_F64, 0, tb, 0, NULL);
    check_gemm_bn(KILN_F32, 0, tb, 1, c1);
  }

  /* not folded: a second reader of the Conv output; BN parameters that are
   * graph inputs; shared weights are not modified when folding */
  int64_t xd[4] = {1, 2, 4, 4}, wd[4] = {2, 2, 1, 1}, cd[1] = {2};
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, 4, xd);
  cst(g, "W", KILN_F32, 4, wd, NULL, 0);
  add(g, "Conv", "x W", "c1");
  add(g, "Conv", "x W", "c2");
  add(g, "Conv", "x W", "c3");
  cst(g, "s", KILN_F32, 1, cd, NULL, 1);
  cst(g, "b", KILN_F32, 1, cd, NULL, 0);
  cst(g, "mu", KILN_F32, 1, cd, NULL, 0);
  cst(g, "var", KILN_F32, 1, cd, NULL, 1.5);
  input(g, "var_in", KILN_F32, 1, cd);
  add(g, "BatchNormalization", "c1 s b mu var", "y1");
  add(g, "Relu", "c1", "r1");                            /* second reader */
  add(g, "BatchNormalization", "c2 s b mu var_in", "y2"); /* not constant */
  add(g, "BatchNormalization", "c3 s b mu var", "y3");   /* folds */
  add(g, "BatchNormalization", "y3 s b mu var", "y4");   /* and again */
  const char *outs[] = {"y1", "r1", "y2", "y4"};
  for (int i = 0; i < 4; i++) output(g, outs[i]);
  float w0[4];
  memcpy(w0, g->values[val(g, "W")].init->data, sizeof w0);
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  kiln_rewrite_stats st = {0};
  CHECK(kiln_rewrite_fold_bn(g, &st) == KILN_OK && st.bn_conv == 2 && count_op(g, "BatchNormalization") == 2,
        "only the chained BNs after c3 fold (%d)", st.bn_conv);
  CHECK(!memcmp(w0, g->values[val(g, "W")].init->data, sizeof w0), "shared weights unchanged");
  char m[256];
  CHECK(valid(g) && agree(before, g, 1e-5, 1e-6, m, sizeof m), "partial folding agrees: %s", m);
  kiln_graph_free(g);
  kiln_graph_free(before);

  /* training mode is left alone */
  g = new_graph(15);
  input(g, "x", KILN_F32, 4, xd);
  cst(g, "W", KILN_F32, 4, wd, NULL, 0);
  add(g, "Conv", "x W", "c");
  cst(g, "s", KILN_F32, 1, cd, NULL, 1);
  cst(g, "b", KILN_F32, 1, cd, NULL, 0);
  cst(g, "mu", KILN_F32, 1, cd, NULL, 0);
  cst(g, "var", KILN_F32, 1, cd, NULL, 1.5);
  kiln_edit_set_int(add(g, "BatchNormalization", "c s b mu var", "y"), "training_mode", 1);
  output(g, "y");
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_fold_bn(g, &st) == KILN_OK && st.bn_conv == 0 && g->n_nodes == 2 && valid(g),
        "training-mode BN not folded");
  kiln_graph_free(g);
}

/* BatchNormalization's training mode on the reference (opset 15): Y from
 * the batch's own mean and population variance per channel, the running
 * statistics input * momentum + batch * (1 - momentum), each compared
 * with that formula computed here; the running outputs without training
 * mode, and before opset 14, refused with the reason. */
static void test_bn_training(void) {
  const int64_t xd[4] = {2, 3, 2, 5}, cd[1] = {3};
  const double mom = 0.8, eps = 1e-3;
  for (int variant = 0; variant < 3; variant++) {
    kiln_graph *g = new_graph(variant == 2 ? 13 : 15);
    input(g, "x", KILN_F32, 4, xd);
    cst(g, "s", KILN_F32, 1, cd, NULL, 0.5);
    cst(g, "b", KILN_F32, 1, cd, NULL, -0.5);
    cst(g, "mu", KILN_F32, 1, cd, NULL, -0.5);
    cst(g, "var", KILN_F32, 1, cd, NULL, 0.5);
    kiln_node *n = add(g, "BatchNormalization", "x s b mu var", variant == 2 ? "y rm rv sm sv" : "y rm rv");
    if (variant == 0) kiln_edit_set_int(n, "training_mode", 1);
    kiln_edit_set_float(n, "momentum", (float)mom);
    kiln_edit_set_float(n, "epsilon", (float)eps);
    output(g, "y");
    output(g, "rm");
    output(g, "rv");
    kiln_tensor *ins = random_inputs(g), *outs;
    kiln_status st = run(g, ins, &outs);
    if (variant == 0) {
      const kiln_graph *c = g;
      const kiln_tensor *x = &ins[0], *sc = c->values[val(g, "s")].init, *bb = c->values[val(g, "b")].init,
                        *mu = c->values[val(g, "mu")].init, *va = c->values[val(g, "var")].init;
      double worst = 0;
      for (int64_t ch = 0; !st && ch < 3; ch++) {
        double m = 0, v = 0;
        for (int64_t nn = 0; nn < 2; nn++)
          for (int64_t i = 0; i < 10; i++) m += kiln_get_f(x, (nn * 3 + ch) * 10 + i);
        m /= 20;
        for (int64_t nn = 0; nn < 2; nn++)
          for (int64_t i = 0; i < 10; i++) v += pow(kiln_get_f(x, (nn * 3 + ch) * 10 + i) - m, 2);
        v /= 20;
        for (int64_t nn = 0; nn < 2; nn++)
          for (int64_t i = 0; i < 10; i++) {
            int64_t e = (nn * 3 + ch) * 10 + i;
            double want = kiln_get_f(sc, ch) * (kiln_get_f(x, e) - m) / sqrt(v + eps) + kiln_get_f(bb, ch);
            worst = fmax(worst, fabs(kiln_get_f(&outs[0], e) - want) / (1 + fabs(want)));
          }
        worst = fmax(worst, fabs(kiln_get_f(&outs[1], ch) - (kiln_get_f(mu, ch) * mom + m * (1 - mom))));
        worst = fmax(worst, fabs(kiln_get_f(&outs[2], ch) - (kiln_get_f(va, ch) * mom + v * (1 - mom))));
      }
      CHECK(!st && worst < 1e-6, "BatchNormalization training mode: Y and the running statistics (status %d: %s; "
            "worst relative error %.3g)", (int)st, st ? kiln_last_error() : "ok", worst);
    } else {
      CHECK(st == KILN_E_UNSUPPORTED_ATTR &&
                strstr(kiln_last_error(), variant == 1 ? "training_mode=1 selects" : "before opset 14 is not supported"),
            "BatchNormalization's running outputs %s: refused (status %d: %s)",
            variant == 1 ? "without training mode" : "at opset 13", (int)st, kiln_last_error());
    }
    free_tensors(outs, g->n_outputs);
    free_tensors(ins, g->n_inputs);
    kiln_graph_free(g);
  }
}

/* The optimizers of ONNX's training preview domain at update count T = 0
 * (Momentum's beta' = 1, Adam's rate not adjusted; the node tests have
 * T > 0), each output against its formula computed here; a domain version
 * kiln does not know, input counts that are no whole groups, and an
 * unknown Momentum mode, refused. */
static void test_train_ops(void) {
  const int64_t d4[1] = {4};
  const double xv[4] = {1, 2, 3, -4}, gv[4] = {0.5, -1, 2, 0}, vv[4] = {0.1, 0.2, -0.3, 0.4}, hv[4] = {0.5, 1, 2, 3};
  const double R = 0.1, a = 0.9, b = 0.3, nc = 0.01, post = 0.1, eps = 1e-6;
  for (int variant = 0; variant < 7; variant++) {
    kiln_graph *g = new_graph(17);
    kiln_opset *o = kiln_realloc(g->opsets, sizeof *o * (size_t)(g->n_opsets + 1));
    if (!o) exit(2);
    g->opsets = o;
    o[g->n_opsets].domain = kiln_strdup(KILN_DOMAIN_TRAINING);
    o[g->n_opsets++].version = variant == 3 ? 2 : 1;
    double t0 = 0;
    cst(g, "R", KILN_F32, 0, NULL, &R, 0);
    cst(g, "T", KILN_I64, 0, NULL, &t0, 0);
    cst(g, "X", KILN_F32, 1, d4, xv, 0);
    cst(g, "G", KILN_F32, 1, d4, gv, 0);
    cst(g, "V", KILN_F32, 1, d4, vv, 0);
    cst(g, "H", KILN_F32, 1, d4, hv, 0);
    bool adam = variant == 1;
    kiln_node *n = variant == 4   ? add_in(g, KILN_DOMAIN_TRAINING, "Adagrad", "R T X G H X", "x1 h1")
                   : adam         ? add_in(g, KILN_DOMAIN_TRAINING, "Adam", "R T X G V H", "x1 v1 h1")
                                  : add_in(g, KILN_DOMAIN_TRAINING, "Momentum", "R T X G V", "x1 v1");
    if (variant != 4) { /* (Adagrad has neither) */
      kiln_edit_set_float(n, "alpha", (float)a);
      kiln_edit_set_float(n, "beta", (float)b);
    }
    kiln_edit_set_float(n, "norm_coefficient", (float)nc);
    if (adam) kiln_edit_set_float(n, "norm_coefficient_post", (float)post);
    if (!adam && variant != 4) kiln_edit_set_string(n, "mode", variant == 2 ? "nesterov" : variant == 5 ? "fast" : "standard");
    if (variant == 6) kiln_edit_set_int(n, "norm_coefficient", 1); /* an int where a float belongs */
    output(g, "x1");
    if (variant != 4) output(g, "v1");
    if (adam) output(g, "h1");
    kiln_status cs = kiln_ref_check_graph(g);
    kiln_tensor *outs = NULL;
    kiln_status st = cs ? cs : run(g, NULL, &outs);
    if (variant <= 2) {
      double worst = 0;
      for (int i = 0; !st && i < 4; i++) {
        double gr = nc * xv[i] + gv[i], v1, x1, h1 = 0;
        if (adam) {
          v1 = a * vv[i] + (1 - a) * gr;
          h1 = b * hv[i] + (1 - b) * gr * gr;
          x1 = (1 - post) * (xv[i] - R * v1 / (sqrt(h1) + eps));
          worst = fmax(worst, fabs(kiln_get_f(&outs[2], i) - h1) / (1 + fabs(h1)));
        } else {
          v1 = a * vv[i] + gr; /* T = 0: beta' = 1 */
          x1 = xv[i] - R * (variant == 2 ? gr + a * v1 : v1);
        }
        worst = fmax(worst, fabs(kiln_get_f(&outs[0], i) - x1) / (1 + fabs(x1)));
        worst = fmax(worst, fabs(kiln_get_f(&outs[1], i) - v1) / (1 + fabs(v1)));
      }
      CHECK(!st && worst < 1e-6, "%s at T = 0: every output is its formula (status %d: %s; worst relative error %.3g)",
            adam ? "Adam" : variant == 2 ? "Momentum nesterov" : "Momentum standard", (int)st,
            st ? kiln_last_error() : "ok", worst);
    } else {
      static const char *const want[] = {"", "", "", "newer than the newest kiln supports", "R, T and 3 tensors",
                                         "mode 'fast'", "'norm_coefficient' must be of type float"};
      kiln_status ws = variant == 3 ? KILN_E_VERSION : variant == 4 || variant == 6 ? KILN_E_MODEL : KILN_E_UNSUPPORTED_ATTR;
      CHECK(st == ws && strstr(kiln_last_error(), want[variant]), "training op refused (variant %d): status %d: %s",
            variant, (int)st, kiln_last_error());
    }
    if (outs) free_tensors(outs, g->n_outputs);
    kiln_graph_free(g);
  }
}

/* ------------------------------------------------------------------ */
/* constant folding                                                    */

/* Weights folded at init (the reference kernels' dense paths): int8
 * DequantizeLinear per axis 0 and 1, uint8 per tensor, Cast of float16,
 * bfloat16 and float64 to float32, a weight times a scalar, a Sum of
 * three, a Mean of two, a weight times a column and a row over a weight
 * (broadcast) — each folded value equal, bit for bit, to the formula
 * computed here from the element accessors. */
static void test_fold_weights(void) {
  int64_t d[2] = {3, 4}, d3[1] = {3}, d4[1] = {4}, d31[2] = {3, 1};
  double q[12], f[12], f2[12], f3[12], s3[3] = {0.5, 0.25, 2.0}, z3[3] = {-3, 0, 5}, s4[4] = {0.125, 1, 3, 0.75},
         z4[4] = {7, -8, 0, 1}, s0 = 0.0625, z0 = 128, sc = -1.5;
  for (int i = 0; i < 12; i++) {
    q[i] = (i * 37) % 256 - 128;
    f[i] = sin(1.7 * i) * 1000.0 + 1e-3 * i;
    f2[i] = cos(0.9 * i) * 3.0;
    f3[i] = 1e8 * sin(2.3 * i);
  }
  double qu[12];
  for (int i = 0; i < 12; i++) qu[i] = (i * 53) % 256;
  kiln_graph *g = new_graph(13);
  cst(g, "q8", KILN_I8, 2, d, q, 0);
  cst(g, "s3", KILN_F32, 1, d3, s3, 0);
  cst(g, "z3", KILN_I8, 1, d3, z3, 0);
  cst(g, "s4", KILN_F32, 1, d4, s4, 0);
  cst(g, "z4", KILN_I8, 1, d4, z4, 0);
  cst(g, "qu", KILN_U8, 2, d, qu, 0);
  cst(g, "s0", KILN_F32, 0, NULL, &s0, 0);
  cst(g, "z0", KILN_U8, 0, NULL, &z0, 0);
  cst(g, "h16", KILN_F16, 2, d, f2, 0);
  cst(g, "hbf", KILN_BF16, 2, d, f, 0);
  cst(g, "h64", KILN_F64, 2, d, f, 0);
  cst(g, "a", KILN_F32, 2, d, f, 0);
  cst(g, "b", KILN_F32, 2, d, f2, 0);
  cst(g, "c", KILN_F32, 2, d, f3, 0);
  cst(g, "sc", KILN_F32, 0, NULL, &sc, 0);
  cst(g, "col", KILN_F32, 2, d31, s3, 0);
  cst(g, "row", KILN_F32, 1, d4, s4, 0);
  kiln_edit_set_int(add(g, "DequantizeLinear", "q8 s3 z3", "dq0"), "axis", 0);
  kiln_edit_set_int(add(g, "DequantizeLinear", "q8 s4 z4", "dq1"), "axis", 1);
  add(g, "DequantizeLinear", "qu s0 z0", "dqu");
  kiln_edit_set_int(add(g, "Cast", "h16", "c16"), "to", KILN_F32);
  kiln_edit_set_int(add(g, "Cast", "hbf", "cbf"), "to", KILN_F32);
  kiln_edit_set_int(add(g, "Cast", "h64", "c64"), "to", KILN_F32);
  add(g, "Mul", "a sc", "ms");
  add(g, "Sum", "a b c", "sum3");
  add(g, "Mean", "c a", "mean2");
  add(g, "Mul", "a col", "mcol");
  add(g, "Div", "row b", "drow");
  const char *outs[11] = {"dq0", "dq1", "dqu", "c16", "cbf", "c64", "ms", "sum3", "mean2", "mcol", "drow"};
  for (int k = 0; k < 11; k++) output(g, outs[k]);
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  eval_ctx ec = {0};
  kiln_rewrite_stats st = {0};
  CHECK(kiln_rewrite_fold_constants(g, ref_eval, &ec, 0, &st) == KILN_OK && st.folded == 11 && g->n_nodes == 0,
        "weights: 11 nodes folded (%d): %s", st.folded, kiln_last_error());
  const kiln_graph *b = before;
  const kiln_tensor *q8 = b->values[val(b, "q8")].init, *qut = b->values[val(b, "qu")].init;
  for (int k = 0; k < 11; k++) {
    int v = kiln_graph_find_value(g, outs[k]);
    const kiln_tensor *t = v >= 0 ? g->values[v].init : NULL;
    int bad = !t || t->dtype != KILN_F32 || t->numel != 12;
    for (int i = 0; !bad && i < 12; i++) {
      double e;
      int r = i / 4, cidx = i % 4;
      switch (k) {
      case 0: e = ((double)kiln_get_i(q8, i) - z3[r]) * (double)(float)s3[r]; break;
      case 1: e = ((double)kiln_get_i(q8, i) - z4[cidx]) * (double)(float)s4[cidx]; break;
      case 2: e = ((double)kiln_get_i(qut, i) - z0) * (double)(float)s0; break;
      case 3: e = kiln_get_f(b->values[val(b, "h16")].init, i); break;
      case 4: e = kiln_get_f(b->values[val(b, "hbf")].init, i); break;
      case 5: e = f[i]; break;
      case 6: e = (double)(float)f[i] * (double)(float)sc; break;
      case 7: e = (double)(float)f[i] + (double)(float)f2[i] + (double)(float)f3[i]; break;
      case 8: e = ((double)(float)f3[i] + (double)(float)f[i]) / 2; break;
      case 9: e = (double)(float)f[i] * (double)(float)s3[r]; break;
      default: e = (double)(float)s4[cidx] / (double)(float)f2[i]; break;
      }
      float want = (float)e, got = ((const float *)t->data)[i];
      bad += memcmp(&want, &got, sizeof got) != 0;
    }
    CHECK(!bad, "weights: %s folded to the formula's bits", outs[k]);
  }
  kiln_graph_free(g);
  kiln_graph_free(before);
}

static void test_fold_constants(void) {
  int64_t d[2] = {2, 3};
  char m[256];
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, 2, d);
  cst(g, "a", KILN_F32, 2, d, NULL, 0);
  cst(g, "b", KILN_F32, 2, d, NULL, 0);
  add(g, "Mul", "a b", "ab");       /* folds */
  add(g, "Exp", "ab", "eab");       /* folds (input folded before) */
  add(g, "Add", "x eab", "s");      /* not: x is an input */
  kiln_tensor t = {0};
  kiln_tensor_alloc(&t, KILN_I64, 1, (const int64_t[]){2});
  ((int64_t *)t.data)[0] = 3, ((int64_t *)t.data)[1] = 2;
  kiln_edit_set_tensor(add(g, "Constant", "", "shape"), "value", &t);
  add(g, "Reshape", "s shape", "y"); /* not: s is not constant */
  kiln_tensor_alloc(&t, KILN_F32, 0, NULL);
  ((float *)t.data)[0] = 4;
  kiln_edit_set_tensor(add(g, "Constant", "", "kout"), "value", &t); /* a graph output */
  add(g, "Add", "y kout", "y2");
  output(g, "y2");
  output(g, "kout");
  kiln_graph *before;
  kiln_edit_clone(g, &before);
  eval_ctx ec = {0};
  kiln_rewrite_stats st = {0};
  CHECK(kiln_rewrite_fold_constants(g, ref_eval, &ec, 0, &st) == KILN_OK, "fold: %s", kiln_last_error());
  CHECK(st.folded == 4 && st.fold_declined == 0 && st.fold_too_big == 0 && ec.calls == 4,
        "folded %d (want 4: Mul Exp Constant Constant), declined %d, %d evaluator calls", st.folded,
        st.fold_declined, ec.calls);
  CHECK(count_op(g, "Mul") == 0 && count_op(g, "Exp") == 0 && count_op(g, "Constant") == 0 && g->n_nodes == 3,
        "the right nodes folded");
  int ko = val(g, "kout"), sh = val(g, "shape");
  CHECK(kiln_edit_is_const(g, ko) && g->values[ko].is_output && kiln_get_f(g->values[ko].init, 0) == 4,
        "a folded graph output is a constant output");
  CHECK(kiln_edit_is_const(g, sh) && g->values[sh].type.rank == 1 && g->values[sh].type.dims[0].value == 2,
        "a folded value is typed from its data");
  CHECK(kiln_graph_find_value(g, "a") < 0 && kiln_graph_find_value(g, "ab") < 0,
        "inputs of folded nodes that nothing reads any more are dropped");
  CHECK(valid(g) && agree(before, g, 0, 0, m, sizeof m), "folding keeps results: %s", m);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_fold_constants(g, ref_eval, &ec, 0, &st) == KILN_OK && st.folded == 0 && ec.calls == 4,
        "nothing left to fold");
  kiln_graph_free(g);
  kiln_graph_free(before);

  /* random ops are never folded; the evaluator may decline */
  g = new_graph(13);
  cst(g, "a", KILN_F32, 2, d, NULL, 0);
  kiln_edit_set_ints(add(g, "RandomNormal", "", "rn"), "shape", d, 2);
  kiln_edit_set_ints(add(g, "RandomUniformLike", "a", "ru"), "shape", d, 2);
  add(g, "Sub", "rn ru", "diff");
  add(g, "NotAnOp", "a", "weird");
  add(g, "Relu", "weird", "rw");
  output(g, "diff");
  output(g, "rw");
  memset(&ec, 0, sizeof ec);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_fold_constants(g, ref_eval, &ec, 0, &st) == KILN_OK && st.folded == 0 &&
            st.fold_declined == 1 && ec.calls == 1 && g->n_nodes == 5 && valid(g),
        "random ops skipped, unknown op declined (folded %d, declined %d, %d calls)", st.folded, st.fold_declined,
        ec.calls);
  CHECK(kiln_last_error()[0] == 0, "a declined fold leaves no error message: %s", kiln_last_error());
  kiln_graph_free(g);

  /* the size cap: checked from declared types, for expanding ops from their
   * inputs (before evaluating), and on the result */
  g = new_graph(13);
  cst_i64(g, "big_shape", 3, (const int64_t[]){4096, 4096, 2}); /* 128 MiB of float */
  add(g, "ConstantOfShape", "big_shape", "zeros");
  cst(g, "one", KILN_F32, 1, (const int64_t[]){1}, (const double[]){1}, 0);
  cst_i64(g, "shape10", 2, (const int64_t[]){10, 10});
  add(g, "Expand", "one shape10", "e100"); /* 400 bytes */
  cst_i64(g, "reps", 1, (const int64_t[]){200});
  add(g, "Tile", "one reps", "tiled"); /* 800 bytes */
  cst(g, "v50", KILN_F32, 1, (const int64_t[]){50}, NULL, 0);
  kiln_edit_set_int(add(g, "Concat", "v50 v50", "cat"), "axis", 0); /* 400 bytes, known after evaluating */
  add(g, "Add", "one one", "two"); /* declared far larger than it is */
  set_type(g, "two", KILN_F32, 1, (const int64_t[]){1000});
  add(g, "Neg", "one", "small");
  /* outer products of 8192 x 4096 floats (128 MiB) by broadcasting and MatMul */
  cst(g, "col", KILN_F32, 2, (const int64_t[]){8192, 1}, NULL, 0);
  cst(g, "row", KILN_F32, 2, (const int64_t[]){1, 4096}, NULL, 0);
  add(g, "Add", "col row", "outer_add");
  add(g, "MatMul", "col row", "outer_mm");
  const char *outs[] = {"zeros", "e100", "tiled", "cat", "two", "small", "outer_add", "outer_mm"};
  for (int i = 0; i < 8; i++) output(g, outs[i]);
  kiln_error_clear();
  memset(&ec, 0, sizeof ec);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_fold_constants(g, ref_eval, &ec, 100, &st) == KILN_OK && st.folded == 1 &&
            st.fold_too_big == 7 && ec.calls == 2 && valid(g),
        "cap 100 bytes: folded %d (want 1), too big %d (want 7), %d evaluations (want 2: Concat, Neg)", st.folded,
        st.fold_too_big, ec.calls);
  memset(&ec, 0, sizeof ec);
  memset(&st, 0, sizeof st);
  CHECK(kiln_rewrite_fold_constants(g, ref_eval, &ec, 0, &st) == KILN_OK && st.folded == 4 &&
            st.fold_too_big == 3 && ec.calls == 4 && valid(g),
        "default cap: the three 128 MiB results are skipped, unevaluated (folded %d, too big %d, %d calls)",
        st.folded, st.fold_too_big, ec.calls);
  CHECK(kiln_edit_is_const(g, val(g, "e100")) && g->values[val(g, "e100")].init->numel == 100 &&
            kiln_edit_is_const(g, val(g, "cat")) && !kiln_edit_is_const(g, val(g, "outer_mm")),
        "what was folded");
  kiln_graph_free(g);

  /* no evaluator: an error */
  g = new_graph(13);
  CHECK(kiln_rewrite_fold_constants(g, NULL, NULL, 0, &st) == KILN_E_INTERNAL, "fold without an evaluator");
  kiln_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* the driver                                                          */

static void test_driver(void) {
  int64_t xd[4] = {1, 3, 5, 5}, wd[4] = {4, 3, 3, 3}, cd[1] = {4};
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, 4, xd);
  cst(g, "W", KILN_F32, 4, wd, NULL, 0);
  /* W2 = W * 1 computed from constants: folding makes the Conv's weight a
   * constant, which BN folding then needs */
  cst(g, "one", KILN_F32, 0, NULL, (const double[]){1}, 0);
  add(g, "Mul", "W one", "W2");
  add(g, "Identity", "x", "xi");
  add(g, "Conv", "xi W2", "c");
  kiln_edit_set_ints(&g->nodes[g->n_nodes - 1], "pads", (const int64_t[]){1, 1, 1, 1}, 4);
  cst(g, "s", KILN_F32, 1, cd, NULL, 1);
  cst(g, "b", KILN_F32, 1, cd, NULL, 0);
  cst(g, "mu", KILN_F32, 1, cd, NULL, 0);
  cst(g, "var", KILN_F32, 1, cd, NULL, 1.5);
  add(g, "BatchNormalization", "c s b mu var", "bn");
  add(g, "Relu", "bn", "r1");
  add(g, "Relu", "bn", "r2");
  kiln_edit_set_ints(add(g, "Transpose", "r1", "t1"), "perm", (const int64_t[]){0, 2, 3, 1}, 4);
  kiln_edit_set_ints(add(g, "Transpose", "t1", "t2"), "perm", (const int64_t[]){0, 3, 1, 2}, 4);
  add(g, "Add", "t2 r2", "sum");
  add(g, "Dropout", "sum", "y");
  add(g, "Sigmoid", "x", "dead");
  output(g, "y");
  int nodes0 = g->n_nodes, values0 = g->n_values;
  eval_ctx ec = {0};
  kiln_rewrite_opts o = {KILN_RW_ALL, ref_eval, &ec, 0, 0, NULL, false, false, false};
  kiln_rewrite_stats st;
  kiln_graph *r;
  CHECK(kiln_rewrite_run(g, &o, &r, &st) == KILN_OK && r, "driver: %s", kiln_last_error());
  char buf[400];
  if (verbose) printf("driver: %s\n", kiln_rewrite_stats_str(&st, buf, sizeof buf));
  CHECK(g->n_nodes == nodes0 && g->n_values == values0 && valid(g), "the input graph is untouched");
  CHECK(r && r->n_nodes == 3 && count_op(r, "Conv") == 1 && count_op(r, "Relu") == 1 && count_op(r, "Add") == 1,
        "Conv, Relu, Add left (%d nodes)", r ? r->n_nodes : -1);
  CHECK(st.folded == 1 && st.identities == 1 && st.dropouts == 1 && st.bn_conv == 1 && st.cse_nodes == 1 &&
            st.transposes_merged == 1 && st.transposes_removed == 1 && st.dead_nodes >= 2,
        "driver stats: %s", kiln_rewrite_stats_str(&st, buf, sizeof buf));
  CHECK(st.rounds >= 2 && st.rounds <= 3, "fixed point after %d rounds", st.rounds);
  char m[256];
  CHECK(r && agree(g, r, 1e-5, 1e-6, m, sizeof m), "driver result agrees: %s", m);
  kiln_graph_free(r);

  /* passes can be selected; max_rounds caps the rounds */
  kiln_rewrite_opts o2 = {KILN_RW_NOOPS, NULL, NULL, 0, 1, NULL, false, false, false};
  CHECK(kiln_rewrite_run(g, &o2, &r, &st) == KILN_OK && st.rounds == 1 && st.identities == 1 && st.dropouts == 1 &&
            st.dead_nodes == 0 && st.bn_conv == 0 && r->n_nodes == nodes0 - 2,
        "Identity/Dropout only: %s", kiln_rewrite_stats_str(&st, buf, sizeof buf));
  kiln_graph_free(r);
  /* NULL options: everything but folding, which needs an evaluator */
  CHECK(kiln_rewrite_run(g, NULL, &r, &st) == KILN_OK && st.folded == 0 && st.bn_conv == 0 &&
            count_op(r, "Mul") == 1,
        "no folding without an evaluator, so BN (whose weight is computed) stays: %s",
        kiln_rewrite_stats_str(&st, buf, sizeof buf));
  kiln_graph_free(r);
  kiln_graph_free(g);

  /* a subgraph attribute (contents not kept by kiln) freezes the graph */
  int64_t d[1] = {4};
  g = new_graph(13);
  input(g, "x", KILN_F32, 1, d);
  input(g, "cond", KILN_BOOL, 0, NULL);
  add(g, "Identity", "x", "xi");
  add(g, "Sigmoid", "x", "unused_here");
  kiln_node *iff = add(g, "If", "cond", "y");
  kiln_edit_set_int(iff, "then_branch", 0);
  kiln_edit_set_int(iff, "else_branch", 0);
  iff->attrs[0].type = iff->attrs[1].type = KILN_ATTR_GRAPH;
  output(g, "y");
  output(g, "xi");
  kiln_rewrite_opts o3 = {0, ref_eval, NULL, 0, 0, NULL, false, false, false};
  CHECK(kiln_rewrite_run(g, &o3, &r, &st) == KILN_OK && r->n_nodes == 3 && st.dead_nodes == 0 &&
            st.identities == 0 && st.rounds == 1,
        "a graph with subgraphs is left as it is: %s", kiln_rewrite_stats_str(&st, buf, sizeof buf));
  kiln_graph_free(r);
  kiln_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* examples/cnn.onnx                                                   */

static void source_path(char *buf, size_t size, const char *rel) {
  const char *root = getenv("KILN_SOURCE_DIR");
  if (root) {
    snprintf(buf, size, "%s/%s", root, rel);
    return;
  }
  const char *f = __FILE__, *t = strstr(f, "tests/unit_rewrite.c");
  snprintf(buf, size, "%.*s%s", t ? (int)(t - f) : 0, f, rel);
}

static void test_cnn(void) {
  char path[1024];
  source_path(path, sizeof path, "examples/cnn.onnx");
  size_t n;
  void *bytes = tu_read_file(path, &n);
  CHECK(bytes != NULL, "read %s", path);
  if (!bytes) return;
  kiln_graph *g = NULL, *r = NULL;
  CHECK(kiln_onnx_import(bytes, n, &g) == KILN_OK, "import cnn.onnx: %s", kiln_last_error());
  free(bytes);
  if (!g) return;
  kiln_rewrite_opts o = {KILN_RW_ALL, ref_eval, NULL, 0, 0, NULL, false, false, false};
  kiln_rewrite_stats st;
  CHECK(kiln_rewrite_run(g, &o, &r, &st) == KILN_OK, "rewrite cnn: %s", kiln_last_error());
  char buf[400];
  printf("cnn.onnx: %d -> %d nodes; %s\n", g->n_nodes, r ? r->n_nodes : -1,
         kiln_rewrite_stats_str(&st, buf, sizeof buf));
  CHECK(st.bn_conv == 2 && r && count_op(r, "BatchNormalization") == 0 && r->n_nodes == g->n_nodes - 2,
        "both BatchNormalizations fold into the convs");
  kiln_tensor in = {0}, exp = {0};
  kiln_status s1 = KILN_E_MODEL, s2 = KILN_E_MODEL;
  source_path(path, sizeof path, "examples/cnn/test_data_set_0/input_0.pb");
  if ((bytes = tu_read_file(path, &n))) s1 = kiln_tensor_parse(bytes, n, &in, NULL), free(bytes);
  source_path(path, sizeof path, "examples/cnn/test_data_set_0/output_0.pb");
  if ((bytes = tu_read_file(path, &n))) s2 = kiln_tensor_parse(bytes, n, &exp, NULL), free(bytes);
  CHECK(!s1 && !s2, "cnn test data");
  if (r && !s1 && !s2) {
    kiln_tensor *oa, *ob;
    char m[256];
    kiln_status sa = run(g, &in, &oa), sb = run(r, &in, &ob);
    CHECK(!sa && !sb, "run cnn: %s", kiln_last_error());
    double mabs = 0, mrel = 0;
    CHECK(!sa && !sb && tu_compare(&ob[0], &oa[0], 1e-5, 1e-7, m, sizeof m, &mabs, &mrel),
          "cnn folded vs unfolded: %s", m);
    printf("cnn.onnx: folded vs unfolded: max abs err %.3g, max rel err %.3g\n", mabs, mrel);
    CHECK(!sb && tu_compare(&ob[0], &exp, 1e-4, 1e-5, m, sizeof m, NULL, NULL), "cnn folded vs expected: %s", m);
    free_tensors(oa, 1);
    free_tensors(ob, 1);
  }
  kiln_tensor_release(&in);
  kiln_tensor_release(&exp);
  kiln_graph_free(g);
  kiln_graph_free(r);
}

/* ------------------------------------------------------------------ */
/* the ONNX node-test suite                                            */

typedef struct suite_totals {
  int cases, unsupported, rewritten_changed, outputs, identical, within_tol, orig_failed;
  int constantized, fully_folded, doubled;
  kiln_rewrite_stats plain, constant, cse;
} suite_totals;

static void add_stats(kiln_rewrite_stats *a, const kiln_rewrite_stats *b) {
  int *pa = (int *)a;
  const int *pb = (const int *)b;
  for (size_t i = 0; i < sizeof *a / sizeof(int); i++) pa[i] += pb[i];
}

static int bit_identical(const kiln_tensor *a, const kiln_tensor *b) {
  return a->dtype == b->dtype && a->numel == b->numel && a->rank == b->rank &&
         !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof *a->dims) &&
         (!a->numel || !memcmp(a->data, b->data, kiln_tensor_bytes(a)));
}

/* Loads the inputs of data set `set` (one per graph input without an
 * initializer, in order). Returns 0 when the set does not exist. */
static int load_inputs(const tu_case *c, const kiln_graph *g, int set, kiln_tensor *ins, int *bad) {
  char probe[1300];
  snprintf(probe, sizeof probe, "%s/test_data_set_%d", c->dir, set);
  FILE *f = fopen(probe, "r");
  if (!f) return 0;
  fclose(f);
  *bad = 0;
  for (int i = 0, k = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    if (g->values[v].init) continue;
    kiln_status st = KILN_OK;
    if (!tu_case_tensor(c, set, "input", k++, &ins[i], &st) || st) {
      *bad = 1;
      return 1;
    }
    tu_fix_dtype(&ins[i], g->values[v].type.dtype);
  }
  return 1;
}

/* The case's graph with every input of data set 0 turned into a constant. */
static kiln_graph *constantize(const kiln_graph *g, kiln_tensor *ins) {
  kiln_graph *c;
  if (kiln_edit_clone(g, &c)) return NULL;
  int k = 0;
  for (int i = 0; i < c->n_inputs; i++) {
    int v = c->inputs[i];
    if (ins[i].dtype != KILN_UNDEFINED) {
      c->values[v].init = kiln_malloc(sizeof(kiln_tensor));
      memset(c->values[v].init, 0, sizeof(kiln_tensor));
      kiln_tensor_copy(c->values[v].init, &ins[i]);
    }
    if (c->values[v].init) c->values[v].is_input = false;
    else c->inputs[k++] = v;
  }
  c->n_inputs = k;
  return c;
}

/* Mergeable by CSE, transitively (what a duplicated copy should merge into). */
static int cse_mergeable(const kiln_graph *g, const kiln_node *n) {
  if (*n->domain && strcmp(n->domain, "ai.onnx")) return 0;
  static const char *const rnd_ops[] = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                         "Multinomial",  "Bernoulli"};
  for (size_t i = 0; i < sizeof rnd_ops / sizeof *rnd_ops; i++)
    if (!strcmp(n->op_type, rnd_ops[i])) return 0;
  if (!strcmp(n->op_type, "Dropout")) { /* only when it cannot train */
    if (n->opset < 7) return 0;
    if (n->opset >= 12 && n->n_in > 2 && n->in[2] >= 0) {
      const kiln_value *t = &g->values[n->in[2]];
      if (!t->init || t->is_input || kiln_get_i(t->init, 0)) return 0;
    }
  }
  if (n->n_out < 1) return 0;
  for (int a = 0; a < n->n_attrs; a++)
    if (n->attrs[a].type > KILN_ATTR_TENSOR && n->attrs[a].type != KILN_ATTR_FLOATS &&
        n->attrs[a].type != KILN_ATTR_INTS && n->attrs[a].type != KILN_ATTR_STRINGS)
      return 0;
  for (int k = 0; k < n->n_in; k++)
    if (n->in[k] >= 0 && g->values[n->in[k]].producer >= 0 &&
        !cse_mergeable(g, &g->nodes[g->values[n->in[k]].producer]))
      return 0;
  return 1;
}

/* The graph with a copy of every node appended, reading the copies of its
 * node inputs and writing new values. *expect gets how many copies CSE
 * should merge. */
static kiln_graph *doubled(const kiln_graph *g, int *expect) {
  kiln_graph *d;
  if (kiln_edit_clone(g, &d)) return NULL;
  int nn = d->n_nodes, nv = d->n_values;
  int *dup = malloc(((size_t)nv + 1) * sizeof *dup);
  for (int v = 0; v < nv; v++) dup[v] = v;
  *expect = 0;
  for (int i = 0; i < nn; i++) {
    *expect += cse_mergeable(g, &g->nodes[i]);
    int in[64], out[64];
    const kiln_node *n = &d->nodes[i];
    if (n->n_in > 64 || n->n_out > 64) continue;
    for (int k = 0; k < n->n_in; k++) in[k] = n->in[k] >= 0 ? dup[n->in[k]] : -1;
    for (int k = 0; k < n->n_out; k++) {
      out[k] = -1;
      if (n->out[k] < 0) continue;
      char nm[300];
      snprintf(nm, sizeof nm, "%s__dup", d->values[n->out[k]].name);
      kiln_edit_add_value(d, nm, &out[k]);
      kiln_type *src = &d->values[n->out[k]].type;
      d->values[out[k]].type.kind = src->kind;
      d->values[out[k]].type.dtype = src->dtype;
      d->values[out[k]].type.rank = src->kind == KILN_TYPE_TENSOR ? src->rank : -1;
      for (int r = 0; r < KILN_MAX_RANK; r++) d->values[out[k]].type.dims[r].value = src->dims[r].value;
      dup[d->nodes[i].out[k]] = out[k];
    }
    n = &d->nodes[i];
    kiln_edit_insert_node(d, d->n_nodes, n->name, n->op_type, n->domain, n->n_in, in, n->n_out, out, NULL);
    kiln_node *c = &d->nodes[d->n_nodes - 1];
    c->opset = d->nodes[i].opset;
    for (int a = 0; a < d->nodes[i].n_attrs; a++) {
      kiln_attr at;
      kiln_edit_copy_attr(&at, &d->nodes[i].attrs[a]);
      kiln_attr *as = kiln_realloc(c->attrs, ((size_t)c->n_attrs + 1) * sizeof *as);
      c->attrs = as;
      as[c->n_attrs++] = at;
    }
  }
  free(dup);
  return d;
}

/* Runs g (and r) on data set `set`; compares r's outputs with g's and with
 * the expected ones. */
static void compare_set(const tu_case *c, const kiln_graph *g, const kiln_graph *r, kiln_tensor *ins, int set,
                        suite_totals *tot) {
  kiln_tensor *oa = NULL, *ob = NULL;
  kiln_status sa = run(g, ins, &oa);
  if (sa) { /* the reference itself fails on this case: nothing to compare */
    tot->orig_failed++;
    if (verbose) printf("SKIP  %s: original run fails: %s\n", c->name, kiln_last_error());
    free_tensors(oa, g->n_outputs);
    return;
  }
  kiln_status sb = run(r, ins, &ob);
  CHECK(sb == KILN_OK, "%s set %d: rewritten graph fails: %s", c->name, set, kiln_last_error());
  for (int o = 0; !sb && o < g->n_outputs; o++) {
    kiln_tensor exp = {0};
    kiln_status es = KILN_E_MODEL;
    int have = tu_case_tensor(c, set, "output", o, &exp, &es);
    double rtol, atol;
    tu_tolerance(c->name, oa[o].dtype, &rtol, &atol);
    char m[512];
    tot->outputs++;
    int same = bit_identical(&ob[o], &oa[o]);
    tot->identical += same;
    int close = same || tu_compare(&ob[o], &oa[o], rtol, atol, m, sizeof m, NULL, NULL);
    tot->within_tol += close && !same;
    CHECK(close, "%s set %d output %d: rewritten vs original: %s", c->name, set, o, m);
    if (have && !es) {
      tu_fix_dtype(&exp, g->values[g->outputs[o]].type.dtype);
      tu_tolerance(c->name, exp.dtype, &rtol, &atol);
      int ok_orig = tu_compare(&oa[o], &exp, rtol, atol, m, sizeof m, NULL, NULL);
      if (ok_orig) /* where the reference passes, the rewritten graph must too */
        CHECK(tu_compare(&ob[o], &exp, rtol, atol, m, sizeof m, NULL, NULL),
              "%s set %d output %d: rewritten vs expected: %s", c->name, set, o, m);
    }
    kiln_tensor_release(&exp);
  }
  free_tensors(oa, g->n_outputs);
  free_tensors(ob, r->n_outputs);
}

static void suite_case(tu_case *c, suite_totals *tot) {
  const kiln_graph *g = c->graph;
  if (!g || tu_abi_limit(g) || kiln_ref_check_graph(g)) {
    tot->unsupported++;
    return;
  }
  tot->cases++;
  kiln_rewrite_opts o = {KILN_RW_ALL, ref_eval, NULL, 0, 0, NULL, false, false, false};
  kiln_rewrite_stats st;
  kiln_graph *r = NULL;
  kiln_status s = kiln_rewrite_run(g, &o, &r, &st);
  CHECK(s == KILN_OK, "%s: rewrite: %s", c->name, kiln_last_error());
  if (s) return;
  add_stats(&tot->plain, &st);
  if (r->n_nodes != g->n_nodes) tot->rewritten_changed++;
  if (verbose && r->n_nodes != g->n_nodes) {
    char b[300];
    printf("%-50s %d -> %d nodes  %s\n", c->name, g->n_nodes, r->n_nodes, kiln_rewrite_stats_str(&st, b, sizeof b));
  }
  CHECK(same_io(g, r) && valid(r), "%s: rewritten graph keeps io and is valid", c->name);
  CHECK(kiln_ref_check_graph(r) == KILN_OK, "%s: reference accepts the rewritten graph: %s", c->name,
        kiln_last_error());
  kiln_tensor *ins0 = NULL;
  for (int set = 0;; set++) {
    kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
    int bad = 0;
    if (!load_inputs(c, g, set, ins, &bad)) {
      free(ins);
      break;
    }
    CHECK(!bad, "%s set %d: cannot read inputs", c->name, set);
    if (!bad) compare_set(c, g, r, ins, set, tot);
    if (set == 0 && !bad) ins0 = ins;
    else free_tensors(ins, g->n_inputs);
  }
  kiln_graph_free(r);

  /* every input a constant: folding should evaluate (nearly) everything */
  if (ins0) {
    kiln_graph *k = constantize(g, ins0);
    kiln_tensor *oa = NULL, *ob = NULL;
    if (k && run(k, NULL, &oa) == KILN_OK) {
      tot->constantized++;
      s = kiln_rewrite_run(k, &o, &r, &st);
      CHECK(s == KILN_OK, "%s (constant inputs): rewrite: %s", c->name, kiln_last_error());
      if (!s) {
        add_stats(&tot->constant, &st);
        tot->fully_folded += r->n_nodes == 0;
        if (verbose && r->n_nodes) printf("%-50s constant inputs: %d nodes left (%s first)\n", c->name, r->n_nodes,
                                          r->nodes[0].op_type);
        CHECK(run(r, NULL, &ob) == KILN_OK, "%s (constant inputs): run: %s", c->name, kiln_last_error());
        for (int i = 0; ob && i < k->n_outputs; i++) {
          double rtol, atol;
          char m[512];
          tu_tolerance(c->name, oa[i].dtype, &rtol, &atol);
          CHECK(tu_compare(&ob[i], &oa[i], rtol, atol, m, sizeof m, NULL, NULL),
                "%s (constant inputs) output %d: %s", c->name, i, m);
        }
        free_tensors(ob, r->n_outputs);
        kiln_graph_free(r);
      }
    }
    if (k) free_tensors(oa, k->n_outputs);
    kiln_graph_free(k);
    free_tensors(ins0, g->n_inputs);
  }

  /* every node duplicated: CSE merges each copy into its original, and
   * whatever it merges in the original graph (k0) once more */
  int expect = 0, k0 = 0, left = -1;
  kiln_graph *d = doubled(g, &expect), *g1 = NULL;
  if (kiln_edit_clone(g, &g1) == KILN_OK) {
    memset(&st, 0, sizeof st);
    if (kiln_rewrite_cse(g1, &st) == KILN_OK && kiln_rewrite_dce(g1, &st) == KILN_OK) {
      k0 = st.cse_nodes;
      left = g1->n_nodes;
    }
    kiln_graph_free(g1);
  }
  if (d) {
    tot->doubled++;
    CHECK(valid(d), "%s (doubled): valid before", c->name);
    memset(&st, 0, sizeof st);
    s = kiln_rewrite_cse(d, &st);
    if (!s) s = kiln_rewrite_dce(d, &st);
    add_stats(&tot->cse, &st);
    CHECK(s == KILN_OK && st.cse_nodes == expect + k0 && d->n_nodes == left && valid(d),
          "%s (doubled): CSE merged %d, expected %d copies + %d; %d nodes left, expected %d", c->name,
          st.cse_nodes, expect, k0, d->n_nodes, left);
    kiln_graph_free(d);
  }
}

static void test_suite(const char *root) {
  char **names;
  int n = tu_list_cases(root, &names);
  CHECK(n > 0, "node tests under %s", root);
  static suite_totals tot;
  for (int i = 0; i < n; i++) {
    tu_case c;
    if (tu_case_load(&c, root, names[i])) {
      suite_case(&c, &tot);
      tu_case_free(&c);
    }
    free(names[i]);
  }
  free(names);
  char b[400];
  printf("node tests: %d cases supported by the reference (%d not); %d changed by the rewrites\n", tot.cases,
         tot.unsupported, tot.rewritten_changed);
  printf("  outputs compared: %d (%d bit-identical, %d within tolerance); %d data sets skipped (reference fails)\n",
         tot.outputs, tot.identical, tot.within_tol, tot.orig_failed);
  printf("  as given:         %s\n", kiln_rewrite_stats_str(&tot.plain, b, sizeof b));
  printf("  constant inputs:  %d cases, %d folded to no nodes; %s\n", tot.constantized, tot.fully_folded,
         kiln_rewrite_stats_str(&tot.constant, b, sizeof b));
  printf("  doubled (CSE):    %d cases; %s\n", tot.doubled, kiln_rewrite_stats_str(&tot.cse, b, sizeof b));
  CHECK(tot.cases > 500, "most node tests are supported (%d)", tot.cases);
}

/* keep_output_views: a Reshape and a strided Slice of a constant float
 * graph output of 64 KiB or more stay nodes (views of the output's data,
 * counted in fold_views_kept); without the option, or for a smaller output,
 * they fold. The results agree either way. */
static void test_keep_output_views(void) {
  for (int big = 0; big < 2; big++)
    for (int keep = 0; keep < 2; keep++) {
      int64_t n = big ? 16384 : 1024, d[2] = {n, 4}; /* 256 KiB or 16 KiB */
      kiln_graph *g = new_graph(13);
      input(g, "x", KILN_F32, 1, (const int64_t[]){n});
      cst(g, "k", KILN_F32, 2, d, NULL, -0.5);
      cst_i64(g, "flat", 1, (const int64_t[]){-1});
      cst_i64(g, "s0", 1, (const int64_t[]){1});
      cst_i64(g, "e0", 1, (const int64_t[]){4 * n});
      cst_i64(g, "a0", 1, (const int64_t[]){0});
      cst_i64(g, "st4", 1, (const int64_t[]){4});
      add(g, "Reshape", "k flat", "kf");
      add(g, "Slice", "kf s0 e0 a0 st4", "col1");
      add(g, "Add", "x col1", "y");
      output(g, "y");
      output(g, "k");
      kiln_rewrite_opts o = {KILN_RW_ALL, ref_eval, NULL, 0, 0, NULL, false, keep != 0, false};
      kiln_rewrite_stats st;
      kiln_graph *r = NULL;
      char m[256] = "";
      CHECK(kiln_rewrite_run(g, &o, &r, &st) == KILN_OK, "keep_output_views: %s", kiln_last_error());
      bool kept = keep && big;
      CHECK(r && count_op(r, "Reshape") == kept && count_op(r, "Slice") == kept && st.fold_views_kept == kept,
            "keep_output_views %d, %s output: Reshape and Slice %s (views kept %d)", keep, big ? "large" : "small",
            kept ? "stay" : "fold", st.fold_views_kept);
      CHECK(r && valid(r) && agree(g, r, 0, 0, m, sizeof m), "keep_output_views %d: results agree: %s", keep, m);
      kiln_graph_free(r);
      kiln_graph_free(g);
    }
}

int main(int argc, char **argv) {
  const char *root = KILN_NODE_TEST_DIR;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else root = argv[i];
  }
  test_edit();
  test_dce();
  test_noops();
  test_cse();
  test_transpose();
  test_fold_bn();
  test_bn_training();
  test_train_ops();
  test_fold_constants();
  test_fold_weights();
  test_driver();
  test_keep_output_views();
  test_cnn();
  test_suite(root);
  printf("unit_rewrite: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
