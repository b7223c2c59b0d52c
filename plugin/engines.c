/* plugin/engines: the execution backends kiln offers and the KILN_DEVICE
 * selection among them. This build has the `reference` engine; `cpu` and
 * `opencl` are recognised names that report themselves unavailable until
 * their engines exist. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plugin/plugin.h"
#include "reference/exec.h"

static kiln_status ref_prepare(const kiln_graph *g, void **plan) {
  *plan = NULL;
  return kiln_ref_check_graph(g);
}

static kiln_status ref_run(void *plan, const kiln_graph *g, const kiln_tensor *const *bound, kiln_tensor *outs) {
  (void)plan;
  return kiln_ref_run(g, bound, outs);
}

const kiln_engine kiln_engine_reference = {
    .name = "reference",
    .device = "host CPU (scalar reference interpreter)",
    .device_type = ONNXIFI_DEVICE_TYPE_CPU,
    .check = kiln_ref_check_graph,
    .prepare = ref_prepare,
    .run = ref_run,
    .release = NULL,
};

/* Engines in `auto` order: OpenCL GPUs/accelerators, cpu, OpenCL CPUs,
 * reference. Only reference exists in this build. */
static const kiln_engine *const available[] = {&kiln_engine_reference};

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
    if (!strcmp(tok, "auto")) {
      for (size_t i = 0; i < sizeof available / sizeof *available && !s; i++) s = add_engine(available[i], out, max, n);
    } else if (!strcmp(tok, "reference")) {
      s = add_engine(&kiln_engine_reference, out, max, n);
    } else if (!strcmp(tok, "cpu") || !strcmp(tok, "opencl") || !strncmp(tok, "opencl:", 7)) {
      s = kiln_fail(KILN_E_MODEL, "KILN_DEVICE=%s: backend '%s' is not available in this build of kiln", env, tok);
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
