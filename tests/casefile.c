/* tests/casefile: node-test case loading. */
#include "tests/casefile.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/onnx_import.h"
#include "tests/testutil.h"

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int tu_list_cases(const char *root, char ***names) {
  DIR *d = opendir(root);
  *names = NULL;
  if (!d) return 0;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 256;
      *names = realloc(*names, (size_t)cap * sizeof **names);
    }
    (*names)[n++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(*names, (size_t)n, sizeof **names, cmp_str);
  return n;
}

/* The operator a case tests: the node whose op name (lower case) is the
 * longest prefix of the case name after "test_"; else the first node. */
static void pick_op(tu_case *c) {
  const kiln_graph *g = c->graph;
  snprintf(c->op, sizeof c->op, "?");
  if (!g || !g->n_nodes) return;
  char nm[256];
  size_t k = 0;
  for (const char *p = c->name + (strncmp(c->name, "test_", 5) ? 0 : 5); *p && k < sizeof nm - 1; p++)
    if (*p != '_') nm[k++] = (char)tolower((unsigned char)*p);
  nm[k] = 0;
  size_t best = 0;
  snprintf(c->op, sizeof c->op, "%s", g->nodes[0].op_type);
  for (int i = 0; i < g->n_nodes; i++) {
    char op[64];
    size_t j = 0;
    for (const char *p = g->nodes[i].op_type; *p && j < sizeof op - 1; p++) op[j++] = (char)tolower((unsigned char)*p);
    op[j] = 0;
    if (j > best && !strncmp(nm, op, j)) {
      best = j;
      snprintf(c->op, sizeof c->op, "%s", g->nodes[i].op_type);
    }
  }
}

int tu_case_load(tu_case *c, const char *root, const char *name) {
  memset(c, 0, sizeof *c);
  snprintf(c->name, sizeof c->name, "%s", name);
  snprintf(c->dir, sizeof c->dir, "%s/%s", root, name);
  char path[1200];
  snprintf(path, sizeof path, "%s/model.onnx", c->dir);
  c->model = tu_read_file(path, &c->model_size);
  if (!c->model) return 0;
  if (kiln_onnx_import(c->model, c->model_size, &c->graph)) c->graph = NULL;
  pick_op(c);
  return 1;
}

void tu_case_free(tu_case *c) {
  free(c->model);
  kiln_graph_free(c->graph);
  memset(c, 0, sizeof *c);
}

int tu_case_tensor(const tu_case *c, int set, const char *kind, int k, kiln_tensor *t, kiln_status *st) {
  char path[1300];
  snprintf(path, sizeof path, "%s/test_data_set_%d/%s_%d.pb", c->dir, set, kind, k);
  size_t n;
  void *b = tu_read_file(path, &n);
  if (!b) return 0;
  *st = kiln_tensor_parse(b, n, t, NULL);
  free(b);
  return 1;
}

void tu_tally_add(tu_tally *t, const char *op, int result) {
  int i;
  for (i = 0; i < t->n; i++)
    if (!strcmp(t->row[i].op, op)) break;
  if (i == t->n) {
    if (t->n == (int)(sizeof t->row / sizeof *t->row)) i = t->n - 1;
    else {
      t->n++;
      memset(&t->row[i], 0, sizeof t->row[i]);
      snprintf(t->row[i].op, sizeof t->row[i].op, "%s", op);
    }
  }
  if (result == 0) t->row[i].pass++;
  else if (result == 1) t->row[i].fail++;
  else t->row[i].unsup++;
}

static int cmp_row(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

void tu_tally_print(const tu_tally *t, const char *title) {
  tu_tally s = *t;
  qsort(s.row, (size_t)s.n, sizeof s.row[0], cmp_row);
  printf("\n%s\n%-28s %6s %6s %6s\n", title, "op", "pass", "fail", "unsup");
  for (int i = 0; i < s.n; i++)
    printf("%-28s %6d %6d %6d\n", s.row[i].op, s.row[i].pass, s.row[i].fail, s.row[i].unsup);
}
