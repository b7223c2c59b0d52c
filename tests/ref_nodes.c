/* tests/ref_nodes: runs the ONNX node tests in-process on the reference
 * interpreter (no ONNXIFI, no dlopen) — the quick loop for kernel work and
 * the sanitizer build's conformance check.
 *   ref_nodes [-v] [-f SUBSTR]... [ROOT]
 * A case whose graph the reference backend rejects (unsupported op,
 * attribute or type), that cannot cross the ABI or whose data is a known
 * erratum (tu_case_erratum) is counted unsupported, with its reason under
 * -v. Exit status 1 if any supported case fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference/exec.h"
#include "tests/casefile.h"
#include "tests/testutil.h"

static int run_case(tu_case *c, int verbose) {
  const kiln_graph *g = c->graph;
  const char *why = g ? tu_abi_limit(g) : NULL;
  if (!why) why = tu_case_erratum(c->name);
  if (!g) {
    if (verbose) printf("UNSUP %s: import: %s\n", c->name, kiln_last_error());
    return 2;
  }
  if (why) {
    if (verbose) printf("UNSUP %s: %s\n", c->name, why);
    return 2;
  }
  if (kiln_ref_check_graph(g)) {
    if (verbose) printf("UNSUP %s: %s\n", c->name, kiln_last_error());
    return 2;
  }
  int result = 0;
  for (int set = 0; result == 0; set++) {
    char probe[1300];
    snprintf(probe, sizeof probe, "%s/test_data_set_%d", c->dir, set);
    FILE *f = fopen(probe, "r");
    if (!f) break;
    fclose(f);
    const kiln_tensor **bound = calloc((size_t)g->n_values, sizeof *bound);
    kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
    kiln_tensor *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    int k = 0;
    kiln_status st = KILN_OK;
    for (int i = 0; i < g->n_inputs && !st; i++) {
      int v = g->inputs[i];
      if (g->values[v].init) continue;
      if (!tu_case_tensor(c, set, "input", k, &ins[i], &st)) {
        printf("FAIL  %s: missing input_%d.pb\n", c->name, k);
        result = 1;
        break;
      }
      k++;
      tu_fix_dtype(&ins[i], g->values[v].type.dtype);
      bound[v] = &ins[i];
    }
    if (st) {
      printf("FAIL  %s: input: %s\n", c->name, kiln_last_error());
      result = 1;
    }
    if (!result) {
      st = kiln_ref_run(g, bound, outs);
      if (st) {
        printf("FAIL  %s: run: %s\n", c->name, kiln_last_error());
        result = 1;
      }
    }
    for (int o = 0; o < g->n_outputs && !result; o++) {
      kiln_tensor exp = {0};
      kiln_status es;
      if (!tu_case_tensor(c, set, "output", o, &exp, &es) || es) {
        printf("FAIL  %s: cannot read output_%d.pb\n", c->name, o);
        result = 1;
        break;
      }
      tu_fix_dtype(&exp, g->values[g->outputs[o]].type.dtype);
      double rtol, atol;
      tu_tolerance(c->name, exp.dtype, &rtol, &atol);
      char msg[512];
      if (!tu_compare(&outs[o], &exp, rtol, atol, msg, sizeof msg, NULL, NULL)) {
        printf("FAIL  %s: output %d: %s\n", c->name, o, msg);
        result = 1;
      }
      kiln_tensor_release(&exp);
    }
    for (int i = 0; i < g->n_inputs; i++) kiln_tensor_release(&ins[i]);
    for (int o = 0; o < g->n_outputs; o++) kiln_tensor_release(&outs[o]);
    free(ins);
    free(outs);
    free(bound);
  }
  if (result == 0 && verbose) printf("PASS  %s\n", c->name);
  return result;
}

int main(int argc, char **argv) {
  const char *root = KILN_NODE_TEST_DIR;
  const char *filters[64];
  int nf = 0, verbose = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "-f") && i + 1 < argc && nf < 64) filters[nf++] = argv[++i];
    else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
      printf("usage: ref_nodes [-v] [-f SUBSTR]... [ROOT]\n");
      return 0;
    } else root = argv[i];
  }
  char **names;
  int n = tu_list_cases(root, &names);
  if (!n) {
    printf("no node tests found under %s\n", root);
    return 1;
  }
  static tu_tally tally;
  int pass = 0, fail = 0, unsup = 0;
  for (int i = 0; i < n; i++) {
    int keep = !nf;
    for (int f = 0; f < nf; f++) keep |= strstr(names[i], filters[f]) != NULL;
    if (keep) {
      tu_case c;
      if (tu_case_load(&c, root, names[i])) {
        int r = run_case(&c, verbose);
        tu_tally_add(&tally, c.op, r);
        if (r == 0) pass++;
        else if (r == 1) fail++;
        else unsup++;
        tu_case_free(&c);
      }
    }
    free(names[i]);
  }
  free(names);
  if (verbose) tu_tally_print(&tally, "reference backend (in-process)");
  printf("\nref_nodes: %d passed, %d failed, %d unsupported\n", pass, fail, unsup);
  return fail ? 1 : 0;
}
