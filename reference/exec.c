/* reference/exec: the reference interpreter. */
#include "reference/exec.h"

#include <string.h>

#include "ir/alloc.h"
#include "ir/observe.h"
#include "reference/ops.h"

kiln_status kiln_ref_check_graph(const kiln_graph *g) {
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_status s = kiln_ref_check_node(g, &g->nodes[i]);
    if (s) return s;
  }
  return KILN_OK;
}

kiln_status kiln_ref_check_types(const kiln_graph *g, const kiln_shapes *sh) {
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    const kiln_op_def *d = kiln_ref_find_op(n->domain, n->op_type);
    if (!d || !d->types || n->n_in < 1 || n->in[0] < 0) continue;
    const kiln_vshape *x = &sh->v[n->in[0]];
    kiln_dtype t = x->dtype;
    if (x->rank < 0 || t == KILN_UNDEFINED || ((unsigned)t < 32 && (d->types & KILN_T(t)))) continue;
    char lbl[256];
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "node %s (%s): input 0 has data type %s, which %s does not accept",
                     kiln_node_label(g, n, lbl, sizeof lbl), n->op_type, kiln_dtype_name(t), n->op_type);
  }
  return KILN_OK;
}

kiln_status kiln_ref_run(const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs) {
  kiln_obs *obs = kiln_obs_run_current();
  return kiln_ref_run_observed(g, bound, outs, obs && kiln_obs_graph(obs) == g ? obs : NULL);
}

kiln_status kiln_ref_run_observed(const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs,
                                  kiln_obs *obs) {
  if (obs && kiln_obs_graph(obs) != g) obs = NULL;
  kiln_status s = KILN_OK;
  int nv = g->n_values;
  kiln_tensor *slot = kiln_calloc((size_t)nv, sizeof *slot);
  bool *have = kiln_calloc((size_t)nv, sizeof *have);
  int *last_use = kiln_calloc((size_t)nv, sizeof *last_use);
  if (!slot || !have || !last_use) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
    goto done;
  }
  for (int v = 0; v < nv; v++) {
    const kiln_value *val = &g->values[v];
    last_use[v] = -1;
    const kiln_tensor *src = val->init;
    if (val->is_input && bound && bound[v]) src = bound[v];
    if (src) {
      kiln_tensor_wrap(&slot[v], src->dtype, src->rank, src->dims, src->numel, src->data);
      have[v] = true;
    } else if (val->is_input) {
      s = kiln_fail(KILN_E_MODEL, "graph input '%s' has no data bound", val->name);
      goto done;
    }
  }
  for (int i = 0; i < g->n_nodes; i++)
    for (int k = 0; k < g->nodes[i].n_in; k++)
      if (g->nodes[i].in[k] >= 0) last_use[g->nodes[i].in[k]] = i;

  for (int i = 0; i < g->n_nodes && !s; i++) {
    const kiln_node *n = &g->nodes[i];
    const kiln_op_def *d = kiln_ref_find_op(n->domain, n->op_type);
    char lbl[256];
    kiln_node_label(g, n, lbl, sizeof lbl);
    if (!d) {
      s = kiln_fail(KILN_E_UNSUPPORTED_OP, "node %s: operator %s is not supported", lbl, n->op_type);
      break;
    }
    const kiln_tensor **ins = kiln_calloc((size_t)n->n_in + 1, sizeof *ins);
    kiln_tensor *res = kiln_calloc((size_t)n->n_out + 1, sizeof *res);
    bool *used = kiln_calloc((size_t)n->n_out + 1, sizeof *used);
    if (!ins || !res || !used) s = kiln_fail(KILN_E_NOMEM, "out of memory running node %s", lbl);
    for (int k = 0; k < n->n_in && !s; k++) {
      int v = n->in[k];
      if (v < 0) continue;
      if (!have[v])
        s = kiln_fail(KILN_E_MODEL, "node %s (%s): input '%s' was never produced", lbl, n->op_type,
                      g->values[v].name);
      ins[k] = &slot[v];
    }
    for (int k = 0; used && k < n->n_out; k++) used[k] = n->out[k] >= 0;
    if (!s) {
      kiln_op_call call = {g, n, n->opset, n->n_in, ins, n->n_out, res, used};
      s = d->run(&call);
      if (s) kiln_error_prefix("node %s (%s)", lbl, n->op_type);
      else if (kiln_log_level() >= KILN_LOG_DEBUG && n->n_out > 0) {
        char sh[160];
        kiln_log(KILN_LOG_DEBUG, "node %s (%s): output 0 %s %s", lbl, n->op_type, kiln_dtype_name(res[0].dtype),
                 kiln_shape_str(res[0].rank, res[0].dims, sh, sizeof sh));
      }
    }
    for (int k = 0; res && k < n->n_out; k++) {
      int v = n->out[k];
      if (!s && v >= 0 && res[k].dtype == KILN_UNDEFINED)
        s = kiln_fail(KILN_E_INTERNAL, "node %s (%s): kernel produced no output %d", lbl, n->op_type, k);
      if (!s && v >= 0) {
        if (obs) kiln_obs_tensor(obs, kiln_obs_slot(obs, i, k), &res[k]);
        slot[v] = res[k];
        have[v] = true;
      } else {
        kiln_tensor_release(&res[k]);
      }
    }
    kiln_free(ins);
    kiln_free(res);
    kiln_free(used);
    /* free intermediates whose last reader was this node */
    for (int k = 0; k < n->n_in && !s; k++) {
      int v = n->in[k];
      if (v >= 0 && last_use[v] == i && !g->values[v].is_output && slot[v].owns) {
        kiln_tensor_release(&slot[v]);
        have[v] = false;
      }
    }
  }
  for (int i = 0; i < g->n_outputs && !s; i++) {
    int v = g->outputs[i];
    if (!have[v]) {
      s = kiln_fail(KILN_E_MODEL, "graph output '%s' was never produced", g->values[v].name);
    } else if (slot[v].owns) {
      outs[i] = slot[v];
      memset(&slot[v], 0, sizeof slot[v]);
      have[v] = false;
    } else {
      s = kiln_tensor_copy(&outs[i], &slot[v]);
    }
  }
  if (s)
    for (int i = 0; i < g->n_outputs; i++) kiln_tensor_release(&outs[i]);
done:
  if (slot)
    for (int v = 0; v < nv; v++) kiln_tensor_release(&slot[v]);
  kiln_free(slot);
  kiln_free(have);
  kiln_free(last_use);
  return s;
}

kiln_status kiln_ref_eval_node(void *ctx, const kiln_graph *g, const kiln_node *n, const kiln_tensor *const *in,
                               kiln_tensor *out) {
  (void)ctx;
  const kiln_op_def *d = kiln_ref_find_op(n->domain, n->op_type);
  if (!d) return KILN_E_UNSUPPORTED_OP;
  kiln_status s = kiln_ref_check_node(g, n);
  if (s) return s;
  bool used[64];
  if (n->n_out > 64) return KILN_E_UNSUPPORTED_OP;
  for (int k = 0; k < n->n_out; k++) used[k] = n->out[k] >= 0;
  kiln_op_call c = {g, n, n->opset, n->n_in, in, n->n_out, out, used};
  return d->run(&c);
}

