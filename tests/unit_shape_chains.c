/* tests/unit_shape_chains: shape inference (ir/shape) of the shape and
 * data-movement ops on graphs built in code with symbolic input dims:
 * shape computations (Shape -> Gather -> Unsqueeze -> Concat -> Reshape,
 * Range, Slice, Expand, ConstantOfShape …) must come out as exact
 * expressions over the inputs' dim_params, checked both as text and by
 * evaluation against the ONNX rules at several sizes.
 *   unit_shape_chains [-v] */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/shape.h"
#include "reference/exec.h"

static int passed, failed, verbose;

static void check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt, ...) {
  va_list ap;
  if (ok) {
    passed++;
    if (!verbose) return;
    printf("ok   ");
  } else {
    failed++;
    printf("FAIL ");
  }
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
}

/* ---- building graphs ---- */

static kiln_graph *new_graph(int64_t opset) {
  kiln_graph *g;
  if (kiln_edit_new_graph(opset, &g)) {
    printf("cannot make a graph: %s\n", kiln_last_error());
    exit(2);
  }
  return g;
}

static int val(const kiln_graph *g, const char *name) {
  int v = kiln_graph_find_value(g, name);
  if (v < 0) {
    printf("test bug: no value '%s'\n", name);
    exit(2);
  }
  return v;
}

/* Splits s (modified in place) at the separator: the next token, or NULL. */
static char *token(char **s, char sep) {
  while (**s == sep) (*s)++;
  if (!**s) return NULL;
  char *t = *s, *e = strchr(t, sep);
  if (e) *e = 0, *s = e + 1;
  else *s = t + strlen(t);
  return t;
}

/* An input whose dims are given as text: "N,4,S" (numbers or dim_params). */
static void input(kiln_graph *g, const char *name, kiln_dtype dt, const char *dims) {
  int64_t d[KILN_MAX_RANK] = {0};
  char buf[256], *p = buf, *names[KILN_MAX_RANK] = {NULL};
  int r = 0;
  snprintf(buf, sizeof buf, "%s", dims);
  for (char *t; (t = token(&p, ',')) && r < KILN_MAX_RANK; r++) {
    char *end;
    d[r] = strtoll(t, &end, 10);
    if (*end) names[r] = t, d[r] = 1;
  }
  int v;
  if (kiln_edit_add_input(g, name, dt, r, d, &v)) exit(2);
  for (int i = 0; i < r; i++)
    if (names[i]) {
      g->values[v].type.dims[i].value = -1;
      g->values[v].type.dims[i].param = kiln_strdup(names[i]);
    }
}

static void cst(kiln_graph *g, const char *name, kiln_dtype dt, int rank, int n, const int64_t *vals) {
  kiln_tensor t = {0};
  int64_t d = n;
  if (kiln_tensor_alloc(&t, dt, rank, &d)) exit(2);
  for (int i = 0; i < n; i++) kiln_set_i(&t, i, vals[i]);
  int v;
  if (kiln_edit_add_const(g, name, &t, &v)) exit(2);
  /* kiln_edit_add_const names the value uniquely: it must be `name` */
  if (strcmp(g->values[v].name, name)) exit(2);
}

static void ints(kiln_graph *g, const char *name, int n, const int64_t *vals) { cst(g, name, KILN_I64, 1, n, vals); }
static void scalar(kiln_graph *g, const char *name, int64_t v) { cst(g, name, KILN_I64, 0, 1, &v); }

/* Appends op reading `ins` and writing `outs` (space-separated names, "-"
 * for an omitted optional). */
static kiln_node *add(kiln_graph *g, const char *op, const char *ins, const char *outs) {
  int in[16], out[16], ni = 0, no = 0;
  char buf[512], *p = buf;
  snprintf(buf, sizeof buf, "%s", ins);
  for (char *t; (t = token(&p, ' ')) && ni < 16;) in[ni++] = strcmp(t, "-") ? val(g, t) : -1;
  snprintf(buf, sizeof buf, "%s", outs);
  p = buf;
  for (char *t; (t = token(&p, ' ')) && no < 16;) {
    if (!strcmp(t, "-")) {
      out[no++] = -1;
      continue;
    }
    if (kiln_edit_add_value(g, t, &out[no++])) exit(2);
  }
  int idx;
  if (kiln_edit_insert_node(g, g->n_nodes, "", op, "", ni, in, no, out, &idx)) {
    printf("test bug: %s\n", kiln_last_error());
    exit(2);
  }
  return &g->nodes[idx];
}

static void set_ints(kiln_node *n, const char *name, int cnt, const int64_t *v) {
  if (kiln_edit_set_ints(n, name, v, (size_t)cnt)) exit(2);
}
static void set_int(kiln_node *n, const char *name, int64_t v) {
  if (kiln_edit_set_int(n, name, v)) exit(2);
}

/* ---- checking ---- */

static kiln_shapes *infer(const char *what, kiln_graph *g) {
  kiln_shapes *sh = NULL;
  kiln_status s = kiln_shapes_infer(g, &sh);
  check(s == KILN_OK, "%s: inference: %s", what, s ? kiln_last_error() : "ok");
  return sh;
}

static const char *shape_text(const kiln_shapes *sh, const kiln_vshape *x, char *buf, int size) {
  int k = snprintf(buf, (size_t)size, "[");
  for (int d = 0; d < x->rank && k < size; d++) {
    char b[160];
    k += snprintf(buf + k, (size_t)(size - k), "%s%s", d ? ", " : "", kiln_dimx_str(sh->tab, x->dims[d], b, sizeof b));
  }
  if (k < size) snprintf(buf + k, (size_t)(size - k), "]");
  return buf;
}

/* Value `name` has exactly the shape text `want` ("[N, 16]"). */
static void expect(const char *what, const kiln_graph *g, const kiln_shapes *sh, const char *name, const char *want) {
  if (!sh) return;
  char buf[512];
  const char *got = shape_text(sh, &sh->v[val(g, name)], buf, sizeof buf);
  check(!strcmp(got, want), "%s: %s is %s, want %s", what, name, got, want);
}

/* Value `name`'s tracked values are exactly the text `want`. */
static void expect_vals(const char *what, const kiln_graph *g, const kiln_shapes *sh, const char *name,
                        const char *want) {
  if (!sh) return;
  const kiln_vshape *x = &sh->v[val(g, name)];
  char buf[512] = "untracked";
  if (x->nvals >= 0) {
    int k = snprintf(buf, sizeof buf, "{");
    for (int i = 0; i < x->nvals && k < (int)sizeof buf; i++) {
      char b[160];
      k += snprintf(buf + k, sizeof buf - (size_t)k, "%s%s", i ? ", " : "",
                    kiln_dimx_str(sh->tab, x->vals[i], b, sizeof b));
    }
    if (k < (int)sizeof buf) snprintf(buf + k, sizeof buf - (size_t)k, "}");
  }
  check(!strcmp(buf, want), "%s: values of %s are %s, want %s", what, name, buf, want);
}

/* Dim d of `name`, with symbol sym bound to each value in [1, 40],
 * equals ref(value). */
static void expect_eval(const char *what, const kiln_graph *g, const kiln_shapes *sh, const char *name, int d,
                        const char *sym, int64_t (*ref)(int64_t)) {
  if (!sh) return;
  const kiln_vshape *x = &sh->v[val(g, name)];
  int ns = kiln_symtab_nsyms(sh->tab), id = kiln_sym_find(sh->tab, sym);
  int64_t *b = calloc((size_t)ns + 1, sizeof *b);
  bool ok = id >= 0 && d < x->rank;
  int64_t at = 0, got = 0, exp = 0;
  for (int64_t v = 1; v <= 40 && ok; v++) {
    for (int k = 0; k < ns; k++) b[k] = KILN_DIM_UNSET;
    b[id] = v;
    ok = !kiln_dimx_eval(sh->tab, x->dims[d], b, ns, &got) && got == (exp = ref(v));
    at = v;
  }
  free(b);
  check(ok, "%s: %s dim %d at %s=%lld: %lld, want %lld %s", what, name, d, sym, (long long)at, (long long)got,
        (long long)exp, ok ? "" : kiln_last_error());
}

static void expect_fail(const char *what, kiln_graph *g, kiln_status want) {
  kiln_shapes *sh = NULL;
  kiln_status s = kiln_shapes_infer(g, &sh);
  check(s == want, "%s: status %s (%s), want %s", what, kiln_status_name(s), s ? kiln_last_error() : "",
        kiln_status_name(want));
  kiln_shapes_free(sh);
}

/* ---- cases ---- */

/* Shape -> Gather -> Unsqueeze -> Concat -> Reshape, with 16, -1 and 0. */
static void test_reshape_chain(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "N,4,4");
  scalar(g, "i0", 0);
  ints(g, "ax0", 1, (int64_t[]){0});
  ints(g, "c16", 1, (int64_t[]){16});
  ints(g, "cm1", 1, (int64_t[]){-1});
  ints(g, "shape0", 2, (int64_t[]){0, -1});
  ints(g, "shape1", 3, (int64_t[]){-1, 2, 8});
  add(g, "Shape", "x", "s");
  add(g, "Gather", "s i0", "n");
  add(g, "Unsqueeze", "n ax0", "n1");
  set_int(add(g, "Concat", "n1 c16", "t1"), "axis", 0);
  add(g, "Reshape", "x t1", "y1");
  set_int(add(g, "Concat", "n1 cm1", "t2"), "axis", 0);
  add(g, "Reshape", "x t2", "y2");
  set_int(add(g, "Concat", "cm1 c16", "t3"), "axis", 0);
  add(g, "Reshape", "x t3", "y3");
  add(g, "Reshape", "x shape0", "y4");
  add(g, "Reshape", "x shape1", "y5");
  kiln_shapes *sh = infer("reshape chain", g);
  expect_vals("reshape chain", g, sh, "s", "{N, 4, 4}");
  expect_vals("reshape chain", g, sh, "n", "{N}");
  expect("reshape chain", g, sh, "n", "[]");
  expect_vals("reshape chain", g, sh, "n1", "{N}");
  expect_vals("reshape chain", g, sh, "t1", "{N, 16}");
  expect("reshape chain", g, sh, "y1", "[N, 16]");
  expect("reshape chain", g, sh, "y2", "[N, 16]");
  expect("reshape chain", g, sh, "y3", "[N, 16]");
  expect("reshape chain", g, sh, "y4", "[N, 16]");
  expect("reshape chain", g, sh, "y5", "[N, 2, 8]");
  if (sh) check(!sh->v[val(g, "y1")].data_dependent, "reshape chain: y1 is not data-dependent");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* A transformer's head split: [B, T, 64] -> [B, T, 8, 8] -> [B, 8, T, 8],
 * and back with Shape -> Slice -> Concat. */
static void test_heads(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "B,T,64");
  scalar(g, "i0", 0);
  scalar(g, "i1", 1);
  ints(g, "ax0", 1, (int64_t[]){0});
  ints(g, "heads", 2, (int64_t[]){8, 8});
  ints(g, "st", 1, (int64_t[]){0});
  ints(g, "en", 1, (int64_t[]){2});
  ints(g, "cm1", 1, (int64_t[]){-1});
  add(g, "Shape", "x", "s");
  add(g, "Gather", "s i0", "b");
  add(g, "Gather", "s i1", "t");
  add(g, "Unsqueeze", "b ax0", "b1");
  add(g, "Unsqueeze", "t ax0", "t1");
  set_int(add(g, "Concat", "b1 t1 heads", "shp"), "axis", 0);
  add(g, "Reshape", "x shp", "y");
  set_ints(add(g, "Transpose", "y", "yt"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  add(g, "Slice", "s st en", "bt");
  set_int(add(g, "Concat", "bt cm1", "shp2"), "axis", 0);
  set_ints(add(g, "Transpose", "yt", "z"), "perm", 4, (int64_t[]){0, 2, 1, 3});
  add(g, "Reshape", "z shp2", "out");
  kiln_shapes *sh = infer("heads", g);
  expect_vals("heads", g, sh, "shp", "{B, T, 8, 8}");
  expect("heads", g, sh, "y", "[B, T, 8, 8]");
  expect("heads", g, sh, "yt", "[B, 8, T, 8]");
  expect_vals("heads", g, sh, "bt", "{B, T}");
  expect_vals("heads", g, sh, "shp2", "{B, T, -1}");
  expect("heads", g, sh, "out", "[B, T, 64]");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* Reshape with 0 (copy), allowzero, Flatten, Size. */
static void test_reshape_forms(void) {
  kiln_graph *g = new_graph(14);
  input(g, "x", KILN_F32, "N,S,8");
  ints(g, "a", 4, (int64_t[]){0, 0, 2, 4});
  ints(g, "b", 2, (int64_t[]){0, -1});
  ints(g, "c", 2, (int64_t[]){-1, 4});
  ints(g, "ax0", 1, (int64_t[]){0});
  add(g, "Reshape", "x a", "ya");
  add(g, "Reshape", "x b", "yb");
  add(g, "Reshape", "x c", "yc");
  add(g, "Flatten", "x", "f1");
  set_int(add(g, "Flatten", "x", "f0"), "axis", 0);
  set_int(add(g, "Flatten", "x", "f2"), "axis", -1);
  add(g, "Size", "x", "sz");
  add(g, "Unsqueeze", "sz ax0", "sz1");
  add(g, "Reshape", "x sz1", "flat");
  kiln_shapes *sh = infer("reshape forms", g);
  expect("reshape forms", g, sh, "ya", "[N, S, 2, 4]");
  expect("reshape forms", g, sh, "yb", "[N, 8*S]");
  expect("reshape forms", g, sh, "yc", "[2*N*S, 4]");
  expect("reshape forms", g, sh, "f1", "[N, 8*S]");
  expect("reshape forms", g, sh, "f0", "[1, 8*N*S]");
  expect("reshape forms", g, sh, "f2", "[N*S, 8]");
  expect_vals("reshape forms", g, sh, "sz", "{8*N*S}");
  expect("reshape forms", g, sh, "flat", "[8*N*S]");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

static int64_t ref_half_up(int64_t s) { return (s + 1) / 2; }
static int64_t ref_minus2(int64_t s) { return s > 2 ? s - 2 : 0; }
static int64_t ref_id(int64_t s) { return s; }
static int64_t ref_from3(int64_t s) { return s > 3 ? s - 3 : 0; }
static int64_t ref_last2(int64_t s) { return s < 2 ? s : 2; }
static int64_t ref_rev_step3(int64_t s) { return (s + 2) / 3; }
static int64_t ref_first5(int64_t s) { return s < 5 ? s : 5; }
static int64_t ref_range_2_s_3(int64_t s) { return s > 2 ? (s - 2 + 2) / 3 : 0; }
static int64_t ref_compress_1011(int64_t s) { return s >= 4 ? 3 : s >= 3 ? 2 : 1; }
static int64_t ref_range_down(int64_t s) { return s; }

/* Slice over a symbolic dim with ONNX's clamping, checked by evaluation. */
static void test_slice(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "N,S");
  ints(g, "ax1", 1, (int64_t[]){1});
  ints(g, "z", 1, (int64_t[]){0});
  ints(g, "one", 1, (int64_t[]){1});
  ints(g, "three", 1, (int64_t[]){3});
  ints(g, "five", 1, (int64_t[]){5});
  ints(g, "m1", 1, (int64_t[]){-1});
  ints(g, "m2", 1, (int64_t[]){-2});
  ints(g, "m3", 1, (int64_t[]){-3});
  ints(g, "big", 1, (int64_t[]){INT64_MAX});
  ints(g, "small", 1, (int64_t[]){INT64_MIN});
  ints(g, "two", 1, (int64_t[]){2});
  add(g, "Slice", "x z big ax1 two", "a");       /* [0:] step 2 */
  add(g, "Slice", "x one m1 ax1", "b");          /* [1:-1] */
  add(g, "Slice", "x m1 small ax1 m1", "c");     /* reversed */
  add(g, "Slice", "x three big ax1", "d");       /* [3:] */
  add(g, "Slice", "x m2 big ax1", "e");          /* [-2:] */
  add(g, "Slice", "x m1 small ax1 m3", "f");     /* [::-3] */
  add(g, "Slice", "x z five ax1", "h");          /* [:5] */
  kiln_shapes *sh = infer("slice", g);
  expect("slice", g, sh, "a", "[N, (S+1)/2]");
  expect_eval("slice", g, sh, "a", 1, "S", ref_half_up);
  expect_eval("slice", g, sh, "b", 1, "S", ref_minus2);
  expect_eval("slice", g, sh, "c", 1, "S", ref_id);
  expect("slice", g, sh, "c", "[N, S]");
  expect_eval("slice", g, sh, "d", 1, "S", ref_from3);
  expect_eval("slice", g, sh, "e", 1, "S", ref_last2);
  expect_eval("slice", g, sh, "f", 1, "S", ref_rev_step3);
  expect_eval("slice", g, sh, "h", 1, "S", ref_first5);
  expect("slice", g, sh, "h", "[N, min(S,5)]");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* Range over symbolic limits; ConstantOfShape / Expand / Tile / Pad from
 * tracked shapes. */
static void test_generators(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "N,S");
  input(g, "y", KILN_F32, "S");
  input(g, "col", KILN_F32, "N,1");
  scalar(g, "i1", 1);
  scalar(g, "k0", 0);
  scalar(g, "k1", 1);
  scalar(g, "k2", 2);
  scalar(g, "k3", 3);
  scalar(g, "km1", -1);
  ints(g, "rep", 2, (int64_t[]){2, 1});
  ints(g, "pads", 4, (int64_t[]){0, 1, 0, 2});
  add(g, "Shape", "x", "s");
  add(g, "Gather", "s i1", "slen");
  add(g, "Range", "k0 slen k1", "r1");
  add(g, "Range", "k2 slen k3", "r2");
  add(g, "Range", "slen k0 km1", "r3");
  add(g, "ConstantOfShape", "s", "zeros");
  add(g, "Expand", "y s", "ey");
  add(g, "Expand", "col s", "ec");
  add(g, "Tile", "x rep", "tiled");
  add(g, "Pad", "x pads", "padded");
  add(g, "Shape", "r1", "sr");
  kiln_shapes *sh = infer("generators", g);
  expect("generators", g, sh, "r1", "[S]");
  expect_eval("generators", g, sh, "r2", 0, "S", ref_range_2_s_3);
  expect_eval("generators", g, sh, "r3", 0, "S", ref_range_down);
  expect("generators", g, sh, "r3", "[S]");
  expect("generators", g, sh, "zeros", "[N, S]");
  expect("generators", g, sh, "ey", "[N, S]");
  expect("generators", g, sh, "ec", "[N, S]");
  expect("generators", g, sh, "tiled", "[2*N, S]");
  expect("generators", g, sh, "padded", "[N, S+3]");
  expect_vals("generators", g, sh, "sr", "{S}");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* Split (equal, sized, opset 18 uneven) and Concat, with values. */
static void test_split_concat(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "N,6");
  input(g, "w", KILN_F32, "N,S");
  ints(g, "sizes", 2, (int64_t[]){2, 4});
  set_int(add(g, "Split", "x", "p0 p1 p2"), "axis", 1);
  set_int(add(g, "Split", "x sizes", "q0 q1"), "axis", 1);
  set_int(add(g, "Concat", "x w p0", "cat"), "axis", 1);
  add(g, "Shape", "w", "sw");
  add(g, "Split", "sw", "sw0 sw1");
  kiln_shapes *sh = infer("split/concat", g);
  expect("split/concat", g, sh, "p2", "[N, 2]");
  expect("split/concat", g, sh, "q1", "[N, 4]");
  expect("split/concat", g, sh, "cat", "[N, S+8]");
  expect_vals("split/concat", g, sh, "sw0", "{N}");
  expect_vals("split/concat", g, sh, "sw1", "{S}");
  kiln_shapes_free(sh);
  kiln_graph_free(g);

  g = new_graph(18);
  input(g, "x", KILN_F32, "S");
  kiln_node *n = add(g, "Split", "x", "a b c");
  set_int(n, "num_outputs", 3);
  sh = infer("split-18", g);
  expect("split-18", g, sh, "a", "[(S+2)/3]");
  expect("split-18", g, sh, "c", "[S-2*((S+2)/3)]");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* Data-dependent shapes: NonZero, a Reshape from runtime data; rank known. */
static void test_data_dependent(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "N,S");
  input(g, "shp", KILN_I64, "3");
  add(g, "NonZero", "x", "nz");
  add(g, "Transpose", "nz", "nzt");
  add(g, "Reshape", "x shp", "r");
  add(g, "Shape", "nz", "snz");
  add(g, "Reshape", "x snz", "r2");
  kiln_shapes *sh = infer("data-dependent", g);
  if (sh) {
    const kiln_vshape *nz = &sh->v[val(g, "nz")], *nzt = &sh->v[val(g, "nzt")], *r = &sh->v[val(g, "r")],
                      *r2 = &sh->v[val(g, "r2")];
    int64_t v;
    check(nz->rank == 2 && kiln_dimx_is_const(sh->tab, nz->dims[0], &v) && v == 2 && nz->data_dependent,
          "data-dependent: NonZero is [2, ?]");
    check(nzt->data_dependent && nzt->dims[0] == nz->dims[1], "data-dependent: Transpose keeps the flag");
    check(r->rank == 3 && r->data_dependent, "data-dependent: Reshape by runtime data has rank 3, flagged");
    check(r2->rank == 2 && r2->data_dependent, "data-dependent: Reshape by NonZero's shape is flagged");
  }
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* Squeeze / Unsqueeze (attribute and input forms), Gather, GatherND,
 * DepthToSpace. */
static void test_misc(void) {
  kiln_graph *g = new_graph(11);
  input(g, "x", KILN_F32, "N,1,C,H");
  input(g, "ind", KILN_I64, "K,2");
  set_ints(add(g, "Squeeze", "x", "sq"), "axes", 1, (int64_t[]){1});
  set_ints(add(g, "Unsqueeze", "sq", "us"), "axes", 2, (int64_t[]){0, -1});
  add(g, "GatherND", "x ind", "gnd");
  set_int(add(g, "Gather", "x ind", "ga"), "axis", 2);
  set_int(add(g, "DepthToSpace", "x", "d2s"), "blocksize", 1);
  kiln_shapes *sh = infer("misc", g);
  expect("misc", g, sh, "sq", "[N, C, H]");
  expect("misc", g, sh, "us", "[1, N, C, H, 1]");
  expect("misc", g, sh, "gnd", "[K, C, H]");
  expect("misc", g, sh, "ga", "[N, 1, K, 2, H]");
  kiln_shapes_free(sh);
  kiln_graph_free(g);

  g = new_graph(13);
  input(g, "x", KILN_F32, "N,C,H,W");
  set_int(add(g, "SpaceToDepth", "x", "s2d"), "blocksize", 2);
  set_int(add(g, "DepthToSpace", "s2d", "back"), "blocksize", 2);
  sh = infer("depth/space", g);
  expect("depth/space", g, sh, "s2d", "[N, 4*C, H/2, W/2]");
  expect("depth/space", g, sh, "back", "[N, C, 2*(H/2), 2*(W/2)]");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

/* Values through Constant, Range, Gather (negative index), Slice with a
 * tracked end, Squeeze; constant inputs of Compress / OneHot / NonZero. */
static void test_values(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "N,S,D");
  input(g, "y", KILN_F32, "M");
  input(g, "ind", KILN_I64, "K");
  scalar(g, "k0", 0);
  scalar(g, "k1", 1);
  scalar(g, "k4", 4);
  scalar(g, "im1", -1);
  ints(g, "z", 1, (int64_t[]){0});
  ints(g, "ax0", 1, (int64_t[]){0});
  cst(g, "cond", KILN_BOOL, 1, 4, (int64_t[]){1, 0, 1, 1});
  cst(g, "nzdata", KILN_I32, 1, 4, (int64_t[]){0, 5, 0, 7});
  cst(g, "depth", KILN_F32, 0, 1, (int64_t[]){10});
  cst(g, "onoff", KILN_F32, 1, 2, (int64_t[]){0, 1});
  kiln_node *n = add(g, "Constant", "", "cv");
  set_ints(n, "value_ints", 3, (int64_t[]){-1, 2, 3});
  add(g, "Range", "k0 k4 k1", "r");
  add(g, "Shape", "x", "s");
  add(g, "Gather", "s im1", "last");
  add(g, "Shape", "y", "sy");
  add(g, "Slice", "s z sy", "pre"); /* s[0:M] */
  add(g, "Unsqueeze", "last ax0", "last1");
  add(g, "Squeeze", "last1 ax0", "last0");
  add(g, "Reshape", "x cv", "rx");
  set_int(add(g, "Compress", "x cond", "cx"), "axis", 1);
  add(g, "NonZero", "nzdata", "nz");
  add(g, "OneHot", "ind depth onoff", "oh");
  kiln_shapes *sh = infer("values", g);
  expect_vals("values", g, sh, "cv", "{-1, 2, 3}");
  expect_vals("values", g, sh, "r", "{0, 1, 2, 3}");
  expect_vals("values", g, sh, "last", "{D}");
  expect_vals("values", g, sh, "last0", "{D}");
  expect("values", g, sh, "pre", "[min(M,3)]");
  expect("values", g, sh, "rx", "[N*S*D/6, 2, 3]");
  expect("values", g, sh, "cx", "[N, min(S,4)-min(S,2)+1, D]");
  expect_eval("values", g, sh, "cx", 1, "S", ref_compress_1011);
  expect("values", g, sh, "nz", "[1, 2]");
  expect("values", g, sh, "oh", "[K, 10]");
  if (sh) check(!sh->v[val(g, "nz")].data_dependent, "values: NonZero of a constant is not data-dependent");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

static void test_errors(void) {
  kiln_graph *g = new_graph(13);
  input(g, "x", KILN_F32, "2,3");
  ints(g, "bad", 2, (int64_t[]){4, 2});
  add(g, "Reshape", "x bad", "y");
  expect_fail("reshape 6 -> 8", g, KILN_E_MISMATCH_SHAPE);
  kiln_graph_free(g);

  g = new_graph(13);
  input(g, "x", KILN_F32, "2,3");
  input(g, "w", KILN_F32, "4,3");
  set_int(add(g, "Concat", "x w", "y"), "axis", 1);
  expect_fail("concat 2 vs 4", g, KILN_E_MISMATCH_SHAPE);
  kiln_graph_free(g);

  g = new_graph(13);
  input(g, "x", KILN_F32, "N,3");
  set_int(add(g, "Split", "x", "a b"), "axis", 1);
  expect_fail("split 3 in 2", g, KILN_E_MISMATCH_SHAPE);
  kiln_graph_free(g);

  g = new_graph(13);
  input(g, "x", KILN_F32, "N,3");
  ints(g, "ax", 1, (int64_t[]){1});
  add(g, "Squeeze", "x ax", "y");
  expect_fail("squeeze a dim of 3", g, KILN_E_MISMATCH_SHAPE);
  kiln_graph_free(g);

  /* ConvTranspose: output_padding below max(stride, dilation), in shape
     inference and in the reference's attribute check alike */
  struct {
    int64_t stride, dilation, opad;
    kiln_status want;
  } ct[] = {{2, 1, 1, KILN_OK}, {2, 1, 2, KILN_E_MODEL}, {2, 1, 3, KILN_E_MODEL}, {1, 4, 3, KILN_OK},
            {1, 1, 1, KILN_E_MODEL}};
  for (size_t c = 0; c < sizeof ct / sizeof *ct; c++) {
    g = new_graph(13);
    input(g, "x", KILN_F32, "1,1,2,2");
    input(g, "w", KILN_F32, "1,1,3,3");
    kiln_node *n = add(g, "ConvTranspose", "x w", "y");
    set_ints(n, "strides", 2, (int64_t[]){ct[c].stride, 1});
    set_ints(n, "dilations", 2, (int64_t[]){ct[c].dilation, 1});
    set_ints(n, "output_padding", 2, (int64_t[]){ct[c].opad, 0});
    char what[96];
    snprintf(what, sizeof what, "convtranspose stride %lld dilation %lld output_padding %lld", (long long)ct[c].stride,
             (long long)ct[c].dilation, (long long)ct[c].opad);
    expect_fail(what, g, ct[c].want);
    kiln_status rs = kiln_ref_check_graph(g);
    check(rs == ct[c].want && (!rs || strstr(kiln_last_error(), "output_padding[0]")), "%s: reference check %s (%s)",
          what, kiln_status_name(rs), rs ? kiln_last_error() : "");
    kiln_error_clear();
    kiln_graph_free(g);
  }

  /* a symbol squeezed is unified with 1 */
  g = new_graph(13);
  input(g, "x", KILN_F32, "N,M");
  ints(g, "ax", 1, (int64_t[]){1});
  add(g, "Squeeze", "x ax", "y");
  kiln_shapes *sh = infer("squeeze M", g);
  expect("squeeze M", g, sh, "y", "[N]");
  int64_t v;
  if (sh) check(kiln_sym_value(sh->tab, kiln_sym_find(sh->tab, "M"), &v) && v == 1, "squeeze M: M = 1 recorded");
  kiln_shapes_free(sh);
  kiln_graph_free(g);
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-v")) verbose = 1;
  test_reshape_chain();
  test_heads();
  test_reshape_forms();
  test_slice();
  test_generators();
  test_split_concat();
  test_data_dependent();
  test_misc();
  test_values();
  test_errors();
  printf("unit_shape_chains: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
