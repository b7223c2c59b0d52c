/* tests/unit_dump: KILN_DUMP — the DOT writer on hand-built graphs (labels,
 * edges, constants, escaping, view alias edges), the dump directory and
 * stems, and examples/cnn.onnx compiled and run by the cpu plan executor
 * with KILN_DUMP set (imported / rewritten DOT and the text plan). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu_fallback/plan.h"
#include "ir/alloc.h"
#include "ir/dump.h"
#include "ir/graph_edit.h"
#include "ir/onnx_import.h"
#include "ir/shape.h"
#include "testutil.h"

static int passed, failed;
#include "tests/check.h"

static char tmpdir[256];

/* ---- helpers ---- */

/* Adds node op(in...) named name -> one new value (named out); returns it. */
static int node(kiln_graph *g, const char *name, const char *op, int n_in, const int *in, const char *out) {
  int v, idx;
  if (kiln_edit_add_value(g, out, &v) || kiln_edit_insert_node(g, g->n_nodes, name, op, "", n_in, in, 1, &v, &idx))
    return -1;
  return v;
}

static int const_f32(kiln_graph *g, const char *name, int rank, const int64_t *dims, float first) {
  kiln_tensor t = {0};
  int v;
  if (kiln_tensor_alloc(&t, KILN_F32, rank, dims)) return -1;
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, first + (double)i);
  return kiln_edit_add_const(g, name, &t, &v) ? -1 : v;
}

static int const_i64(kiln_graph *g, const char *name, int64_t val) {
  kiln_tensor t = {0};
  int64_t one = 1;
  int v;
  if (kiln_tensor_alloc(&t, KILN_I64, 1, &one)) return -1;
  kiln_set_i(&t, 0, val);
  return kiln_edit_add_const(g, name, &t, &v) ? -1 : v;
}

/* Writes the DOT of g into a malloc'd string. */
static char *dot_of(const kiln_graph *g, const kiln_shapes *sh, const int *alias, const char *title, kiln_status *st) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) return NULL;
  *st = kiln_dump_dot(g, sh, alias, title, f);
  fclose(f);
  return buf;
}

/* Braces outside quoted strings balance (and never go negative), and the
 * quotes themselves pair up (a backslash escapes the next byte inside). */
static int dot_balanced(const char *s) {
  int depth = 0, opened = 0, inq = 0;
  for (; *s; s++) {
    if (inq) {
      if (*s == '\\' && s[1]) s++;
      else if (*s == '"') inq = 0;
    } else if (*s == '"') inq = 1;
    else if (*s == '{') depth++, opened++;
    else if (*s == '}' && --depth < 0) return 0;
  }
  return !inq && depth == 0 && opened > 0;
}

static int contains(const char *hay, const char *needle) { return hay && strstr(hay, needle) != NULL; }

/* The attribute list of DOT node id ("v3"), as the text up to "];". */
static void dot_node_line(const char *dot, const char *id, char *out, size_t size) {
  char key[32];
  snprintf(key, sizeof key, "\n  %s [", id);
  const char *p = dot ? strstr(dot, key) : NULL;
  out[0] = 0;
  if (!p) return;
  p += strlen(key);
  const char *e = strstr(p, "];\n");
  size_t n = e ? (size_t)(e - p) : strlen(p);
  if (n >= size) n = size - 1;
  memcpy(out, p, n);
  out[n] = 0;
}

/* A whole text file, NUL-terminated (tu_read_file allocates one spare byte). */
static char *read_text(const char *path) {
  size_t n = 0;
  char *buf = tu_read_file(path, &n);
  if (buf) buf[n] = 0;
  return buf;
}

static int have_dot(void) { return system("command -v dot >/dev/null 2>&1") == 0; }

/* Validates a DOT file with Graphviz when it is installed (-1: not run). */
static int dot_valid(const char *path) {
  if (!have_dot()) return -1;
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "dot -Tsvg '%s' -o /dev/null 2>/dev/null", path);
  return system(cmd) == 0;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) ? -1 : (long)st.st_size;
}

static void rm_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st)) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char sub[1024];
      snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
      rm_tree(sub);
    }
    if (d) closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* x: float32 [N,4] -> Add(x, w) -> Relu -> Reshape(., [-1]) -> y; plus a
 * large unused-in-data constant read by a second Add so that it is drawn. */
typedef struct tiny {
  kiln_graph *g;
  int x, w, big, shp, a, b, y, n_add, n_relu, n_reshape;
} tiny;

static int build_tiny(tiny *t, const char *gname) {
  memset(t, 0, sizeof *t);
  if (kiln_edit_new_graph(13, &t->g)) return 0;
  kiln_graph *g = t->g;
  kiln_free(g->name);
  g->name = kiln_strdup(gname);
  int64_t dims[2] = {1, 4}, four = 4, bigd[2] = {64, 64};
  if (kiln_edit_add_input(g, "x", KILN_F32, 2, dims, &t->x)) return 0;
  g->values[t->x].type.dims[0].value = -1;
  g->values[t->x].type.dims[0].param = kiln_strdup("N");
  t->w = const_f32(g, "w", 1, &four, 1.0f);
  t->big = const_f32(g, "big", 2, bigd, 0.5f);
  t->shp = const_i64(g, "shape", -1);
  int in1[2] = {t->x, t->w};
  t->n_add = g->n_nodes;
  t->a = node(g, "add1", "Add", 2, in1, "a");
  t->n_relu = g->n_nodes;
  t->b = node(g, "relu1", "Relu", 1, &t->a, "b");
  int in3[2] = {t->b, t->shp};
  t->n_reshape = g->n_nodes;
  t->y = node(g, "flat", "Reshape", 2, in3, "y");
  if (t->w < 0 || t->big < 0 || t->shp < 0 || t->a < 0 || t->b < 0 || t->y < 0) return 0;
  if (kiln_edit_add_output(g, t->y)) return 0;
  return kiln_edit_check(g) == KILN_OK;
}

/* ---- the DOT writer ---- */

static void test_dot_plain(void) {
  tiny t;
  CHECK(build_tiny(&t, "tiny"), "build the tiny graph: %s", kiln_last_error());
  if (!t.g) return;
  kiln_status st = KILN_E_INTERNAL;
  char *dot = dot_of(t.g, NULL, NULL, "tiny: imported", &st);
  CHECK(dot && st == KILN_OK, "kiln_dump_dot succeeds: %s", kiln_last_error());
  if (!dot) {
    kiln_graph_free(t.g);
    return;
  }
  CHECK(!strncmp(dot, "digraph ", 8), "starts with digraph");
  CHECK(dot_balanced(dot), "braces and quotes balance");
  CHECK(contains(dot, "label=\"tiny: imported\""), "the title labels the graph");
  char want[256], line[1024];
  snprintf(want, sizeof want, "  n%d [shape=box", t.n_add);
  CHECK(contains(dot, want), "node Add is a box");
  CHECK(contains(dot, "label=\"add1\\nAdd\""), "node label name\\nOpType (Add)");
  CHECK(contains(dot, "label=\"relu1\\nRelu\""), "node label name\\nOpType (Relu)");
  CHECK(contains(dot, "label=\"flat\\nReshape\""), "node label name\\nOpType (Reshape)");
  snprintf(want, sizeof want, "  v%d -> n%d;\n", t.x, t.n_add);
  CHECK(contains(dot, want), "edge input -> Add (%s)", want);
  snprintf(want, sizeof want, "  v%d -> n%d;\n", t.w, t.n_add);
  CHECK(contains(dot, want), "edge constant -> Add");
  snprintf(want, sizeof want, "  n%d -> v%d;\n", t.n_add, t.a);
  CHECK(contains(dot, want), "edge Add -> its output");
  snprintf(want, sizeof want, "  v%d -> n%d;\n", t.a, t.n_relu);
  CHECK(contains(dot, want), "edge value -> Relu");
  snprintf(want, sizeof want, "  n%d -> v%d;\n", t.n_reshape, t.y);
  CHECK(contains(dot, want), "edge Reshape -> graph output");
  snprintf(want, sizeof want, "v%d", t.x);
  dot_node_line(dot, want, line, sizeof line);
  CHECK(contains(line, "label=\"x\\nfloat32 [N,4]\"") && contains(line, "fillcolor=\"#c8ecc8\""),
        "graph input: declared symbolic type, input colour: %s", line);
  snprintf(want, sizeof want, "v%d", t.y);
  dot_node_line(dot, want, line, sizeof line);
  CHECK(contains(line, "peripheries=2") && contains(line, "label=\"y\\n? [?]\""),
        "graph output: double border, no declared type: %s", line);
  snprintf(want, sizeof want, "v%d", t.w);
  dot_node_line(dot, want, line, sizeof line);
  CHECK(contains(line, "shape=note") && contains(line, "float32 [4] = 1, 2, 3, 4\""),
        "small constant: a note with its 4 values: %s", line);
  snprintf(want, sizeof want, "v%d", t.big);
  dot_node_line(dot, want, line, sizeof line);
  CHECK(contains(line, "shape=note") && contains(line, "label=\"big\\nfloat32 [64,64]\""),
        "large constant: type and shape only: %s", line);
  CHECK(!contains(dot, "0.5, 1.5"), "no weight data of the large constant");
  CHECK(!contains(dot, "alias of") && !contains(dot, "dashed"), "no alias edges without alias_of");
  free(dot);
  /* NULL arguments */
  CHECK(kiln_dump_dot(NULL, NULL, NULL, NULL, stdout) == KILN_E_INTERNAL, "NULL graph fails");
  CHECK(kiln_dump_dot(t.g, NULL, NULL, NULL, NULL) == KILN_E_INTERNAL, "NULL file fails");
  kiln_error_clear();
  kiln_graph_free(t.g);
}

static void test_dot_shapes_alias(void) {
  tiny t;
  CHECK(build_tiny(&t, "tiny2"), "build the tiny graph: %s", kiln_last_error());
  if (!t.g) return;
  kiln_shapes *sh = NULL;
  kiln_status st = kiln_shapes_infer(t.g, &sh);
  CHECK(st == KILN_OK, "shapes: %s", kiln_last_error());
  if (st) {
    kiln_graph_free(t.g);
    return;
  }
  int *alias = kiln_calloc((size_t)t.g->n_values, sizeof *alias);
  for (int v = 0; v < t.g->n_values; v++) alias[v] = -1;
  alias[t.y] = t.b; /* Reshape runs as a view of its input */
  char *dot = dot_of(t.g, sh, alias, NULL, &st);
  CHECK(dot && st == KILN_OK, "kiln_dump_dot with shapes: %s", kiln_last_error());
  CHECK(dot_balanced(dot), "braces and quotes balance");
  CHECK(contains(dot, "label=\"tiny2\""), "without a title the graph's name labels it");
  char want[256], line[1024], d0[64];
  snprintf(want, sizeof want, "  v%d -> v%d [style=dashed", t.y, t.b);
  CHECK(contains(dot, want) && contains(dot, "label=\"alias of\""), "dashed alias edge from the view to its storage");
  snprintf(want, sizeof want, "v%d", t.y);
  dot_node_line(dot, want, line, sizeof line);
  snprintf(want, sizeof want, "label=\"y\\nfloat32 [%s]\"", kiln_dimx_str(sh->tab, sh->v[t.y].dims[0], d0, sizeof d0));
  CHECK(contains(line, "dashed") && contains(line, want) && contains(line, "peripheries=2"),
        "view value: dashed border and inferred symbolic shape (%s): %s", want, line);
  snprintf(want, sizeof want, "v%d", t.a);
  dot_node_line(dot, want, line, sizeof line);
  CHECK(contains(line, "label=\"a\\nfloat32 [N,4]\"") && !contains(line, "dashed"),
        "intermediate: inferred [N,4], not a view: %s", line);
  int n_alias = 0;
  for (const char *p = dot; p && (p = strstr(p, "alias of")); p++) n_alias++;
  CHECK(n_alias == 1, "exactly one alias edge (%d)", n_alias);
  if (dot && have_dot()) {
    char path[512];
    snprintf(path, sizeof path, "%s/shapes.dot", tmpdir);
    FILE *f = fopen(path, "w");
    if (f) {
      fputs(dot, f);
      fclose(f);
    }
    CHECK(dot_valid(path) == 1, "graphviz accepts the DOT");
  }
  free(dot);
  kiln_free(alias);
  kiln_shapes_free(sh);
  kiln_graph_free(t.g);
}

static void test_dot_escaping(void) {
  tiny t;
  CHECK(build_tiny(&t, "we\"ird{name}"), "build the tiny graph: %s", kiln_last_error());
  if (!t.g) return;
  kiln_graph *g = t.g;
  kiln_free(g->nodes[t.n_add].name);
  g->nodes[t.n_add].name = kiln_strdup("q\"uo\\te}{");
  kiln_free(g->values[t.a].name);
  g->values[t.a].name = kiln_strdup("line\nbreak\xff\x01 caf\xc3\xa9");
  kiln_free(g->nodes[t.n_relu].name);
  g->nodes[t.n_relu].name = kiln_strdup(""); /* unnamed: "#index" */
  kiln_status st = KILN_E_INTERNAL;
  char *dot = dot_of(g, NULL, NULL, "title \"quoted\" \\ back", &st);
  CHECK(dot && st == KILN_OK, "kiln_dump_dot: %s", kiln_last_error());
  CHECK(dot_balanced(dot), "quotes pair up and braces balance despite quotes, braces and backslashes in names");
  CHECK(contains(dot, "label=\"q\\\"uo\\\\te}{\\nAdd\""), "node name: quote and backslash escaped");
  CHECK(contains(dot, "label=\"line\\nbreak?? caf\xc3\xa9\\n"),
        "value name: newline as \\n, invalid UTF-8 and control bytes as ?, valid UTF-8 kept");
  CHECK(!contains(dot, "\xff") && !contains(dot, "\x01"), "no raw invalid bytes");
  CHECK(contains(dot, "label=\"title \\\"quoted\\\" \\\\ back\""), "title escaped");
  char want[64];
  snprintf(want, sizeof want, "label=\"#%d\\nRelu\"", t.n_relu);
  CHECK(contains(dot, want), "an unnamed node is labelled #index");
  if (dot && have_dot()) {
    char path[512];
    snprintf(path, sizeof path, "%s/escaped.dot", tmpdir);
    FILE *f = fopen(path, "w");
    if (f) {
      fputs(dot, f);
      fclose(f);
    }
    CHECK(dot_valid(path) == 1, "graphviz accepts the escaped DOT");
  }
  free(dot);
  kiln_graph_free(g);
}

/* ---- the dump directory ---- */

/* Runs kiln_dump_open with stderr captured into *log (malloc'd). */
static kiln_status open_captured(const char *stem, const char *ext, FILE **f, char **log) {
  char path[512];
  snprintf(path, sizeof path, "%s/stderr.txt", tmpdir);
  fflush(stderr);
  int saved = dup(2);
  FILE *cap = fopen(path, "w");
  if (cap) dup2(fileno(cap), 2);
  kiln_status s = kiln_dump_open(stem, ext, f);
  fflush(stderr);
  if (saved >= 0) {
    dup2(saved, 2);
    close(saved);
  }
  if (cap) fclose(cap);
  *log = read_text(path);
  return s;
}

static void test_open(void) {
  FILE *f = (FILE *)1;
  unsetenv("KILN_DUMP");
  CHECK(!kiln_dump_enabled(), "KILN_DUMP unset: not enabled");
  CHECK(kiln_dump_open("x", "dot", &f) == KILN_OK && f == NULL, "KILN_DUMP unset: KILN_OK and no file");
  setenv("KILN_DUMP", "", 1);
  f = (FILE *)1;
  CHECK(!kiln_dump_enabled() && kiln_dump_open("x", "dot", &f) == KILN_OK && f == NULL,
        "KILN_DUMP empty: KILN_OK and no file");
  CHECK(kiln_dump_open(NULL, "dot", &f) == KILN_E_INTERNAL, "NULL stem fails");
  kiln_error_clear();

  /* a fresh nested directory is created; the stem is sanitised */
  char dir[512], path[1024];
  snprintf(dir, sizeof dir, "%s/made/here", tmpdir);
  setenv("KILN_DUMP", dir, 1);
  CHECK(kiln_dump_enabled(), "KILN_DUMP set: enabled");
  f = NULL;
  CHECK(kiln_dump_open("../we ird/st\"em", "plan-1.txt", &f) == KILN_OK && f != NULL, "opens a file in a new dir");
  if (f) {
    fputs("hello\n", f);
    CHECK(kiln_dump_close(f, "stem", "txt"), "kiln_dump_close reports success");
  }
  snprintf(path, sizeof path, "%s/.._we_ird_st_em.plan-1.txt", dir);
  CHECK(file_size(path) == 6, "file %s written with the sanitised name", path);
  CHECK(kiln_dump_close(NULL, "x", "y"), "closing NULL is fine");

  /* unwritable: a path below a regular file. Warned once, never an error. */
  snprintf(path, sizeof path, "%s/plainfile", tmpdir);
  FILE *pf = fopen(path, "w");
  if (pf) fclose(pf);
  snprintf(dir, sizeof dir, "%s/plainfile/sub", tmpdir);
  setenv("KILN_DUMP", dir, 1);
  setenv("KILN_LOG", "warn", 1);
  kiln_error_clear();
  char *log1 = NULL, *log2 = NULL;
  f = (FILE *)1;
  kiln_status s1 = open_captured("stem", "dot", &f, &log1);
  CHECK(s1 == KILN_OK && f == NULL, "unwritable dir: KILN_OK and no file (status %d)", (int)s1);
  CHECK(!*kiln_last_error(), "unwritable dir: no error message left: %s", kiln_last_error());
  CHECK(contains(log1, "kiln[warn]: KILN_DUMP") && contains(log1, "plainfile/sub"),
        "unwritable dir: a warning naming the path: %s", log1 ? log1 : "(none)");
  f = (FILE *)1;
  kiln_status s2 = open_captured("stem2", "dot", &f, &log2);
  CHECK(s2 == KILN_OK && f == NULL && log2 && !*log2, "second failure: no file, no second warning: %s",
        log2 ? log2 : "(none)");
  free(log1);
  free(log2);
  unsetenv("KILN_LOG");
  unsetenv("KILN_DUMP");
}

static void test_stems(void) {
  char a[KILN_DUMP_STEM_MAX + 1], b[KILN_DUMP_STEM_MAX + 1], c[KILN_DUMP_STEM_MAX + 1], d[KILN_DUMP_STEM_MAX + 1];
  kiln_dump_stem("stemtest", a, sizeof a);
  kiln_dump_stem("stemtest", b, sizeof b);
  kiln_dump_stem("stemtest-2", c, sizeof c);
  CHECK(!strcmp(a, "stemtest") && !strcmp(b, "stemtest-2") && !strcmp(c, "stemtest-2-2"),
        "same names get -2, a name equal to a made one too: %s %s %s", a, b, c);
  kiln_dump_stem("a/b c\"", a, sizeof a);
  kiln_dump_stem(NULL, b, sizeof b);
  kiln_dump_stem("", c, sizeof c);
  CHECK(!strcmp(a, "a_b_c_") && !strncmp(b, "graph", 5) && !strncmp(c, "graph-", 6) && strcmp(b, c),
        "sanitised, and NULL/empty are 'graph': %s %s %s", a, b, c);
  char longname[400];
  memset(longname, 'z', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  kiln_dump_stem(longname, a, sizeof a);
  kiln_dump_stem(longname, d, sizeof d);
  CHECK(strlen(a) <= KILN_DUMP_STEM_MAX && strlen(d) <= KILN_DUMP_STEM_MAX && strcmp(a, d),
        "long names are cut and still unique (%zu, %zu)", strlen(a), strlen(d));
  char small[16];
  kiln_dump_stem("abcdefghijklmnopqrstuvwxyz", small, sizeof small);
  kiln_dump_stem("abcdefghijklmnopqrstuvwxyz", c, sizeof small);
  CHECK(strlen(small) < sizeof small && strcmp(small, c), "a small buffer still gets unique stems: %s %s", small, c);
}

/* ---- end to end: examples/cnn.onnx through the plan executor ---- */

static void source_path(char *buf, size_t size, const char *rel) {
  const char *root = getenv("KILN_SOURCE_DIR");
  if (root) {
    snprintf(buf, size, "%s/%s", root, rel);
    return;
  }
  const char *f = __FILE__, *t = strstr(f, "tests/unit_dump.c");
  snprintf(buf, size, "%.*s%s", t ? (int)(t - f) : 0, f, rel);
}

/* Prepares g (and runs it once on in, which makes the memory plan). */
static kiln_status prepare_and_run(const kiln_graph *g, const kiln_tensor *in, kiln_cpu_stats *st) {
  kiln_cpu_plan *p = NULL;
  kiln_status s = kiln_cpu_prepare(g, &p);
  if (s) return s;
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values, sizeof *bound);
  kiln_tensor out = {0};
  bound[g->inputs[0]] = in;
  s = bound ? kiln_cpu_run(p, g, bound, &out) : KILN_E_NOMEM;
  kiln_tensor_release(&out);
  kiln_cpu_plan_stats(p, st);
  kiln_free(bound);
  kiln_cpu_release(p);
  return s;
}

static void test_cnn(void) {
  char path[1024], dir[512], stem[KILN_DUMP_STEM_MAX + 1];
  source_path(path, sizeof path, "examples/cnn.onnx");
  size_t n;
  void *bytes = tu_read_file(path, &n);
  CHECK(bytes != NULL, "read %s", path);
  if (!bytes) return;
  kiln_graph *g = NULL;
  CHECK(kiln_onnx_import(bytes, n, &g) == KILN_OK, "import cnn.onnx: %s", kiln_last_error());
  free(bytes);
  kiln_tensor in = {0};
  source_path(path, sizeof path, "examples/cnn/test_data_set_0/input_0.pb");
  kiln_status s = KILN_E_MODEL;
  if ((bytes = tu_read_file(path, &n))) s = kiln_tensor_parse(bytes, n, &in, NULL), free(bytes);
  CHECK(!s, "cnn input");
  if (!g || s) {
    kiln_graph_free(g);
    kiln_tensor_release(&in);
    return;
  }
  /* the expected stem: the graph's name sanitised (first use in this process) */
  size_t k = 0;
  for (const char *c = g->name && *g->name ? g->name : "graph"; *c && k < sizeof stem - 1; c++, k++)
    stem[k] = (strchr("_.-", *c) || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z'))
                  ? *c
                  : '_';
  stem[k] = 0;

  snprintf(dir, sizeof dir, "%s/cnn", tmpdir);
  setenv("KILN_DUMP", dir, 1);
  kiln_cpu_stats st = {0};
  s = prepare_and_run(g, &in, &st);
  CHECK(s == KILN_OK, "cnn: prepare and run with KILN_DUMP: %s", kiln_last_error());
  const char *what[3] = {"0-imported.dot", "1-rewritten.dot", "plan-1.txt"};
  for (int w = 0; w < 3; w++) {
    snprintf(path, sizeof path, "%s/%s.%s", dir, stem, what[w]);
    CHECK(file_size(path) > 0, "cnn: %s exists and is not empty", path);
    if (w < 2 && have_dot()) CHECK(dot_valid(path) == 1, "graphviz accepts %s", path);
  }
  /* the imported graph: every node, BatchNormalization included */
  snprintf(path, sizeof path, "%s/%s.0-imported.dot", dir, stem);
  char *imp = read_text(path);
  int all = imp != NULL;
  for (int i = 0; imp && i < g->n_nodes; i++) {
    char lbl[300];
    snprintf(lbl, sizeof lbl, "label=\"%s\\n%s\"", g->nodes[i].name, g->nodes[i].op_type);
    all = all && contains(imp, lbl);
  }
  CHECK(all && contains(imp, "BatchNormalization") && dot_balanced(imp), "cnn: the imported DOT has every node");
  free(imp);
  /* the rewritten graph: BN folded, the Flatten a view */
  snprintf(path, sizeof path, "%s/%s.1-rewritten.dot", dir, stem);
  char *rw = read_text(path);
  CHECK(rw && !contains(rw, "BatchNormalization") && contains(rw, "alias of") && contains(rw, "float32 [1,10]") &&
            dot_balanced(rw),
        "cnn: the rewritten DOT has inferred shapes, no BatchNormalization and the Flatten view");
  free(rw);
  /* the plan: one line per node, in order, and the summaries */
  snprintf(path, sizeof path, "%s/%s.plan-1.txt", dir, stem);
  char *plan = read_text(path);
  int lines = 0, in_order = 1, kernels = 0, views = 0;
  for (const char *p = plan; p && (p = strstr(p, "\nnode ")); p++) {
    int idx = -1;
    char op[64] = "";
    if (sscanf(p + 6, "%d %63s", &idx, op) != 2 || idx != lines) in_order = 0;
    const char *eol = strchr(p + 1, '\n');
    size_t len = eol ? (size_t)(eol - p) : strlen(p);
    char line[1024];
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p + 1);
    if (contains(line, " kernel")) kernels++;
    if (contains(line, " view (alias of ")) views++;
    /* a value inside a fused group is never stored */
    CHECK(contains(line, " -> ") &&
              (contains(line, "arena @") || contains(line, " host") ||
               (contains(line, "not stored") && contains(line, ", fused in step "))),
          "cnn plan line has its output and where it lives: %s", line);
    lines++;
  }
  CHECK(plan && lines == st.nodes_out && in_order, "cnn: the plan lists every node in order (%d lines, %d nodes)",
        lines, st.nodes_out);
  CHECK(kernels == st.kernels && views == st.views && views >= 1,
        "cnn: %d kernels, %d views in the plan (stats %d, %d)", kernels, views, st.kernels, st.views);
  for (int i = 0; plan && i < g->n_nodes; i++) {
    if (!strcmp(g->nodes[i].op_type, "BatchNormalization")) continue;
    char op[80];
    snprintf(op, sizeof op, " %s ", g->nodes[i].op_type);
    CHECK(contains(plan, op), "cnn plan mentions %s", g->nodes[i].op_type);
  }
  CHECK(contains(plan, "\nrewrite: ") && contains(plan, "bn_conv=2"), "cnn plan: the rewrite statistics");
  char mem[128];
  snprintf(mem, sizeof mem, "\nmemory: arena %llu bytes, lower bound %llu, no reuse %llu",
           (unsigned long long)st.arena_bytes, (unsigned long long)st.lower_bound, (unsigned long long)st.no_reuse);
  CHECK(contains(plan, mem), "cnn plan: the memory summary (%s)", mem + 1);
  CHECK(contains(plan, "\nmemory plan: arena") && contains(plan, " steps "), "cnn plan: the memory planner's table");
  /* with fusion the cnn's in-place Relus are inside its conv groups */
  CHECK(contains(plan, "in place over ") || contains(plan, ", fused in step "),
        "cnn plan: an in-place step (or a fused group) is shown");
  free(plan);

  /* the same graph again: its own files, "-2" */
  s = prepare_and_run(g, &in, &st);
  CHECK(s == KILN_OK, "cnn again: %s", kiln_last_error());
  snprintf(path, sizeof path, "%s/%s-2.plan-1.txt", dir, stem);
  CHECK(file_size(path) > 0, "a second graph of the same name gets its own files: %s", path);

  /* an unwritable dump directory never fails the graph */
  snprintf(dir, sizeof dir, "%s/plainfile/sub", tmpdir);
  setenv("KILN_DUMP", dir, 1);
  kiln_error_clear();
  s = prepare_and_run(g, &in, &st);
  CHECK(s == KILN_OK && !*kiln_last_error(), "cnn with an unwritable KILN_DUMP still compiles and runs: %s",
        kiln_last_error());
  unsetenv("KILN_DUMP");
  kiln_tensor_release(&in);
  kiln_graph_free(g);
}

int main(void) {
  snprintf(tmpdir, sizeof tmpdir, "%s/unit_dump.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmpdir)) {
    perror("mkdtemp");
    return 1;
  }
  unsetenv("KILN_DUMP");
  test_dot_plain();
  test_dot_shapes_alias();
  test_dot_escaping();
  test_open();
  test_stems();
  test_cnn();
  if (getenv("KILN_KEEP_DUMP")) printf("unit_dump: files kept in %s\n", tmpdir);
  else rm_tree(tmpdir);
  printf("unit_dump: %d passed, %d failed\n", passed, failed);
  return failed != 0;
}
