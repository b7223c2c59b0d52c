/* tests/graphbuild.h: small helpers the unit tests use to build graphs in
 * C (on ir/graph_edit) and a seeded random source. Header-only (static
 * inline) so that each test program takes what it uses; a test bug or an
 * allocation failure while building exits with status 2. */
#ifndef KILN_TESTS_GRAPHBUILD_H
#define KILN_TESTS_GRAPHBUILD_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/graph_edit.h"
#include "ir/tensor.h"

static uint64_t rng_state = 88172645463325252ull;
/* xorshift64, uniform in [-1, 1) */
static inline double rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) / (double)(1ull << 52) - 1.0;
}

static inline kiln_graph *new_graph(int64_t opset) {
  kiln_graph *g;
  if (kiln_edit_new_graph(opset, &g)) {
    printf("cannot make a graph: %s\n", kiln_last_error());
    exit(2);
  }
  return g;
}

/* The value named name (it must exist). */
static inline int val(const kiln_graph *g, const char *name) {
  int v = kiln_graph_find_value(g, name);
  if (v < 0) {
    printf("test bug: no value '%s'\n", name);
    exit(2);
  }
  return v;
}

static inline int input(kiln_graph *g, const char *name, kiln_dtype dt, int rank, const int64_t *dims) {
  int v;
  if (kiln_edit_add_input(g, name, dt, rank, dims, &v)) exit(2);
  return v;
}

static inline void output(kiln_graph *g, const char *name) {
  if (kiln_edit_add_output(g, val(g, name))) exit(2);
}


/* ---- constants and nodes (unit_fuse.c, unit_cpu_tile.c) ---- */

/* A float32 constant; vals NULL fills it with lo + rnd(). */
static inline int gb_cst(kiln_graph *g, const char *name, int rank, const int64_t *dims, const double *vals,
                         double lo) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, KILN_F32, rank, dims)) exit(2);
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, vals ? vals[i] : lo + rnd());
  int v;
  if (kiln_edit_add_const(g, name, &t, &v)) exit(2);
  return v;
}

static inline int gb_cst_i64(kiln_graph *g, const char *name, int n, const int64_t *vals) {
  kiln_tensor t = {0};
  int64_t d = n;
  if (kiln_tensor_alloc(&t, KILN_I64, n < 0 ? 0 : 1, &d)) exit(2);
  for (int i = 0; i < (n < 0 ? 1 : n); i++) ((int64_t *)t.data)[i] = vals[i];
  int v;
  if (kiln_edit_add_const(g, name, &t, &v)) exit(2);
  return v;
}

/* A float32 constant with the values v0 + step·(i mod 97); -1 when it
 * cannot be made. */
static inline int gb_f32_ramp(kiln_graph *g, const char *name, int rank, const int64_t *dims, double v0,
                              double step) {
  kiln_tensor t = {0};
  int v;
  if (kiln_tensor_alloc(&t, KILN_F32, rank, dims)) return -1;
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, v0 + step * (double)(i % 97));
  return kiln_edit_add_const(g, name, &t, &v) ? -1 : v;
}

/* Appends op reading `ins` and writing new values `outs` (names separated
 * by spaces, "-" for an omitted optional). Returns the node index. */
static inline int gb_add(kiln_graph *g, const char *op, const char *ins, const char *outs) {
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
    if (kiln_edit_add_value(g, t, &out[no++])) exit(2);
  }
  char name[64];
  snprintf(name, sizeof name, "n%d", g->n_nodes);
  int idx;
  if (kiln_edit_insert_node(g, g->n_nodes, name, op, "", ni, in, no, out, &idx)) {
    printf("test bug: %s\n", kiln_last_error());
    exit(2);
  }
  return idx;
}


#endif
