/* tests/graphbuild.h: small helpers the unit tests use to build graphs in
 * C (on ir/graph_edit) and a seeded random source. Header-only (static
 * inline) so that each test program takes what it uses; a test bug or an
 * allocation failure while building exits with status 2. */
#ifndef KILN_TESTS_GRAPHBUILD_H
#define KILN_TESTS_GRAPHBUILD_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ir/graph_edit.h"

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

#endif
