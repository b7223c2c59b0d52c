/* cpu_fallback/prepack: see prepack.h. */
#include "cpu_fallback/prepack.h"

#include <string.h>

#include "cpu_fallback/nn.h"
#include "ir/alloc.h"

/* Nodes reading value v (each input slot counts). */
static int readers(const kiln_graph *g, int v) {
  int n = 0;
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++) n += g->nodes[i].in[k] == v;
  return n;
}

kiln_status kiln_cpu_pretranspose(kiln_graph *g, int *count) {
  int done = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_node *n = &g->nodes[i];
    if (strcmp(n->op_type, "Gemm") || (n->domain && *n->domain && strcmp(n->domain, "ai.onnx")) || n->n_in < 2)
      continue;
    kiln_attr *tb = NULL;
    for (int a = 0; a < n->n_attrs; a++)
      if (!strcmp(n->attrs[a].name, "transB")) tb = &n->attrs[a];
    if (!tb || tb->type != KILN_ATTR_INT || tb->i != 1) continue;
    int v = n->in[1];
    if (v < 0) continue;
    kiln_value *val = &g->values[v];
    kiln_tensor *w = val->init;
    if (!w || w->dtype != KILN_F32 || w->rank != 2 || w->strided || val->is_input || val->is_output ||
        readers(g, v) != 1)
      continue;
    int64_t N = w->dims[0], K = w->dims[1], td[2] = {K, N};
    kiln_tensor t = {0};
    kiln_status s = kiln_tensor_alloc(&t, KILN_F32, 2, td);
    if (s) return s;
    /* dst[k][n] = src[n][k]: the blocked transpose (AVX2 or its scalar twin) */
    kiln_nn_prims_active()->transpose32((size_t)K, (size_t)N, (const uint32_t *)w->data, (size_t)K,
                                        (uint32_t *)t.data, (size_t)N);
    kiln_tensor_release(w);
    *w = t;
    if (val->type.rank == 2) { /* the declared shape follows the data */
      kiln_dim d0 = val->type.dims[0];
      val->type.dims[0] = val->type.dims[1];
      val->type.dims[1] = d0;
    }
    tb->i = 0;
    done++;
  }
  if (count) *count = done;
  return KILN_OK;
}
