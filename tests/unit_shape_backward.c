/* tests/unit_shape_backward: the backward half of shape inference — a
 * Concat input's unknown dim learnt from the Concat output's declared size,
 * an elementwise input's from its partner, and conflicts reported with the
 * tensor and dim. */
#include <stdio.h>
#include <string.h>

#include "ir/graph_edit.h"
#include "ir/shape.h"

static int passed, failed;
#include "tests/check.h"

/* x[?,4] (unnamed dim), y[3,4]: z = Concat(x, y, axis 0) declared [zd,4];
 * w = Relu(x). */
static kiln_graph *build(int64_t zd) {
  kiln_graph *g;
  int64_t xd[2] = {-1, 4}, yd[2] = {3, 4};
  int x, y, z, w, idx;
  kiln_edit_new_graph(13, &g);
  kiln_edit_add_input(g, "x", KILN_F32, 2, xd, &x);
  kiln_edit_add_input(g, "y", KILN_F32, 2, yd, &y);
  kiln_edit_add_value(g, "z", &z);
  kiln_edit_add_value(g, "w", &w);
  int in[2] = {x, y};
  kiln_edit_insert_node(g, 0, "cat", "Concat", "", 2, in, 1, &z, &idx);
  kiln_edit_set_int(&g->nodes[idx], "axis", 0);
  kiln_edit_insert_node(g, 1, "relu", "Relu", "", 1, &x, 1, &w, NULL);
  kiln_edit_add_output(g, z);
  kiln_edit_add_output(g, w);
  kiln_type *t = &g->values[z].type;
  t->kind = KILN_TYPE_TENSOR, t->dtype = KILN_F32, t->rank = 2;
  t->dims[0].value = zd, t->dims[1].value = 4;
  return g;
}

int main(void) {
  kiln_graph *g = build(10);
  kiln_shapes *sh = NULL;
  kiln_status s = kiln_shapes_infer(g, &sh);
  CHECK(!s, "inference: %s", kiln_last_error());
  if (!s) {
    int64_t v;
    int x = g->inputs[0], w = g->outputs[1];
    CHECK(kiln_dimx_is_const(sh->tab, sh->v[x].dims[0], &v) && v == 7, "x's dim 0 learnt from z: 10 - 3 = 7");
    CHECK(kiln_dimx_is_const(sh->tab, sh->v[w].dims[0], &v) && v == 7, "and carried forward to Relu's output");
    kiln_shapes_free(sh);
  }
  kiln_graph_free(g);

  g = build(2); /* 2 - 3: no dim >= 1 fits */
  s = kiln_shapes_infer(g, &sh);
  CHECK(s == KILN_E_MISMATCH_SHAPE && strstr(kiln_last_error(), "tensor 'z', dim 0"),
        "an impossible declared size is a mismatch naming the tensor and dim: %s", kiln_last_error());
  if (!s) kiln_shapes_free(sh);
  kiln_graph_free(g);
  printf("unit_shape_backward: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
