/* plugin/engines: the execution backends kiln offers and the KILN_DEVICE
 * selection among them: the `cpu` engine (the plan executor of
 * cpu_fallback/), the `reference` engine, and one `opencl:P:D` engine per
 * usable OpenCL device (plugin/engine_opencl.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/plan.h"
#include "plugin/plugin.h"
#include "reference/exec.h"

static kiln_status ref_prepare(const kiln_graph *g, void **plan) {
  *plan = NULL;
  return kiln_ref_check_graph(g);
}

/* The reference interpreter has no plan: every node is a kernel. */
static void ref_stats(void *plan, const kiln_graph *g, kilnGraphStatistics *st) {
  (void)plan;
  st->nodesImported = st->nodesPlanned = st->kernelNodes = (uint64_t)g->n_nodes;
}

static kiln_status ref_run(void *plan, const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs) {
  (void)plan;
  return kiln_ref_run(g, bound, outs);
}

const kiln_engine kiln_engine_reference = {
    .name = "reference",
    .device = "host CPU (scalar reference interpreter)",
    .device_type = ONNXIFI_DEVICE_TYPE_CPU,
    /* shapes are computed at each run: any dims the model's symbols allow */
    .capabilities = ONNXIFI_CAPABILITY_SYMBOLIC_BATCH_SIZE | ONNXIFI_CAPABILITY_SYMBOLIC_SIZE_TENSORS |
                    ONNXIFI_CAPABILITY_THREAD_SAFE, /* tests/stress_threads.c (and its TSan run) */
    .check = kiln_ref_check_graph,
    .prepare = ref_prepare,
    .run = ref_run,
    .release = NULL,
    .stats = ref_stats,
};

static kiln_status cpu_prepare(const kiln_graph *g, void **plan) {
  kiln_cpu_plan *p;
  kiln_status s = kiln_cpu_prepare(g, &p);
  *plan = s ? NULL : p;
  return s;
}

static kiln_status cpu_run(void *plan, const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs) {
  return kiln_cpu_run(plan, g, bound, outs);
}

static void cpu_release(void *plan) { kiln_cpu_release(plan); }

static void cpu_stats(void *plan, const kiln_graph *g, kilnGraphStatistics *st) {
  kiln_cpu_stats cs;
  (void)g;
  kiln_cpu_plan_stats(plan, &cs);
  st->nodesImported = (uint64_t)cs.nodes_in;
  st->nodesPlanned = (uint64_t)cs.nodes_out;
  st->viewNodes = (uint64_t)cs.views;
  st->kernelNodes = (uint64_t)cs.kernels;
  st->memoryPlans = (uint64_t)cs.plans;
  st->arenaBytes = cs.arena_bytes;
  st->lowerBoundBytes = cs.lower_bound;
  st->noReuseBytes = cs.no_reuse;
  st->materializedViews = (uint64_t)cs.materialized;
  st->foldedNodes = (uint64_t)cs.folded;
  st->batchNormsFolded = (uint64_t)cs.bn_folded;
  st->cseMerged = (uint64_t)cs.cse;
  st->noOpsRemoved = (uint64_t)cs.noops;
  st->transposesMerged = (uint64_t)cs.transposes;
  st->deadNodesRemoved = (uint64_t)cs.dead;
  st->fusedGroups = (uint64_t)cs.fused_groups;
  st->fusedNodes = (uint64_t)cs.fused_nodes;
}

const kiln_engine kiln_engine_cpu = {
    .name = "cpu",
    .device = "host CPU (plan executor: rewrites, views, one memory arena; AVX2/FMA kernels with scalar twins, fused tiles)",
    .device_type = ONNXIFI_DEVICE_TYPE_CPU,
    /* one plan per bound set: runs within the bounds reuse it (tests/symbolic_batch.c) */
    .capabilities = ONNXIFI_CAPABILITY_SYMBOLIC_BATCH_SIZE | ONNXIFI_CAPABILITY_SYMBOLIC_SIZE_TENSORS |
                    ONNXIFI_CAPABILITY_THREAD_SAFE, /* tests/stress_threads.c (and its TSan run) */
    .check = kiln_cpu_check,
    .prepare = cpu_prepare,
    .run = cpu_run,
    .release = cpu_release,
    .stats = cpu_stats,
};

static kiln_status add_engine(const kiln_engine *e, const kiln_engine **out, int max, int *n) {
  for (int i = 0; i < *n; i++)
    if (out[i] == e) return KILN_OK;
  if (*n >= max) return kiln_fail(KILN_E_INTERNAL, "too many backends selected");
  out[(*n)++] = e;
  return KILN_OK;
}

kiln_status kiln_select_engines(const kiln_engine **out, int max, int *n) {
  const char *env = getenv("KILN_DEVICE");
  *n = 0;
  if (!env || !*env) env = "auto";
  char buf[256];
  if (strlen(env) >= sizeof buf) return kiln_fail(KILN_E_MODEL, "KILN_DEVICE is too long");
  strcpy(buf, env);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ') tok++;
    size_t len = strlen(tok);
    while (len && tok[len - 1] == ' ') tok[--len] = 0;
    kiln_status s = KILN_OK;
    if (!strcmp(tok, "auto")) { /* OpenCL GPUs/accelerators, cpu, OpenCL CPUs, reference */
      s = kiln_opencl_engines_auto(0, add_engine, out, max, n);
      if (!s) s = add_engine(&kiln_engine_cpu, out, max, n);
      if (!s) s = kiln_opencl_engines_auto(1, add_engine, out, max, n);
      if (!s) s = add_engine(&kiln_engine_reference, out, max, n);
    } else if (!strcmp(tok, "reference")) {
      s = add_engine(&kiln_engine_reference, out, max, n);
    } else if (!strcmp(tok, "cpu")) {
      s = add_engine(&kiln_engine_cpu, out, max, n);
    } else if (!strcmp(tok, "opencl") || !strncmp(tok, "opencl:", 7)) {
      s = kiln_opencl_engines_select(env, tok, add_engine, out, max, n);
    } else {
      s = kiln_fail(KILN_E_MODEL,
                    "KILN_DEVICE=%s: unknown backend '%s' (expected auto, cpu, reference, opencl, opencl:P:D "
                    "or a comma list)",
                    env, tok);
    }
    if (s) return s;
  }
  if (!*n) return kiln_fail(KILN_E_MODEL, "KILN_DEVICE=%s selects no backend", env);
  return KILN_OK;
}
