/* tests/unit_shape: shape inference (ir/shape) against the reference
 * interpreter on every ONNX node test it supports. Each case is checked
 * twice: as the model declares it (every output dim must come out as the
 * constant the reference computes), and with every graph-input dim replaced
 * by a symbol and the declared output shapes erased (every output dim must
 * evaluate, with the symbols bound to the test's input dims, to the
 * reference's). Outputs whose shape depends on data (NonZero, Unique, …)
 * are counted apart. Also checks that every operator the reference backend
 * implements has a shape function.
 *   unit_shape [-v] [-f SUBSTR]... [ROOT] */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/shape.h"
#include "reference/exec.h"
#include "reference/ops.h"
#include "tests/casefile.h"
#include "tests/testutil.h"

static int passed, failed, dynamic, verbose;

static void fail(const char *cs, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *cs, const char *fmt, ...) {
  va_list ap;
  failed++;
  printf("FAIL %s: ", cs);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
}

/* Makes every graph-input dim other than 1 a symbol named after its size
 * in the test data ("d3"; equal sizes share a symbol, as a model's
 * dim_params would, so broadcasting stays decidable) and erases the
 * declared shapes of all other values. */
static kiln_status symbolize(kiln_graph *g, const kiln_tensor *ins) {
  for (int i = 0; i < g->n_inputs; i++) {
    kiln_value *val = &g->values[g->inputs[i]];
    if (val->init) continue;
    for (int d = 0; d < val->type.rank && d < ins[i].rank; d++) {
      if (ins[i].dims[d] == 1) continue;
      char name[64];
      snprintf(name, sizeof name, "d%lld", (long long)ins[i].dims[d]);
      kiln_free(val->type.dims[d].param);
      val->type.dims[d].param = kiln_strdup(name);
      val->type.dims[d].value = -1;
      if (!val->type.dims[d].param) return KILN_E_NOMEM;
    }
  }
  for (int v = 0; v < g->n_values; v++) {
    kiln_value *val = &g->values[v];
    if (val->is_input) continue;
    for (int d = 0; d < KILN_MAX_RANK; d++) {
      kiln_free(val->type.dims[d].param);
      val->type.dims[d].param = NULL;
      val->type.dims[d].value = -1;
    }
  }
  return KILN_OK;
}

/* Compares inferred output shapes with the reference's outputs; bind maps
 * the symbolic inputs' dims. Returns 1 on agreement. */
static int compare(const tu_case *c, const kiln_graph *g, kiln_shapes *sh, const kiln_tensor *outs,
                   const kiln_tensor *ins, int symbolic) {
  int nsym = kiln_symtab_nsyms(sh->tab);
  int64_t *vals = calloc((size_t)nsym + 1, sizeof *vals);
  for (int k = 0; k < nsym; k++) vals[k] = KILN_DIM_UNSET;
  for (int i = 0; symbolic && i < g->n_inputs; i++)
    for (int d = 0; d < ins[i].rank; d++) {
      char name[64];
      snprintf(name, sizeof name, "d%lld", (long long)ins[i].dims[d]);
      int s = kiln_sym_find(sh->tab, name);
      if (s >= 0) vals[s] = ins[i].dims[d];
    }
  int ok = 1;
  const char *mode = symbolic ? "symbolic" : "static";
  char what[400];
  for (int o = 0; o < g->n_outputs && ok; o++) {
    const kiln_vshape *x = &sh->v[g->outputs[o]];
    const kiln_tensor *t = &outs[o];
    snprintf(what, sizeof what, "%s output %d (%s)", mode, o, c->op);
    if (x->dtype != t->dtype) {
      fail(c->name, "%s: dtype %s, reference %s", what, kiln_dtype_name(x->dtype), kiln_dtype_name(t->dtype));
      ok = 0;
      break;
    }
    if (x->rank != t->rank) {
      fail(c->name, "%s: rank %d, reference %d", what, x->rank, t->rank);
      ok = 0;
      break;
    }
    for (int d = 0; d < t->rank && ok; d++) {
      int64_t v;
      if (!symbolic && !kiln_dimx_is_const(sh->tab, x->dims[d], &v)) {
        if (x->data_dependent) {
          ok = 2;
          break;
        }
        char b[128];
        snprintf(what, sizeof what, "static output %d dim %d = %s", o, d, kiln_dimx_str(sh->tab, x->dims[d], b, sizeof b));
        fail(c->name, "%s is not a constant (reference %lld)", what, (long long)t->dims[d]);
        ok = 0;
        break;
      }
      if (symbolic && kiln_dimx_eval(sh->tab, x->dims[d], vals, nsym, &v)) {
        if (x->data_dependent) {
          ok = 2;
          break;
        }
        char b[128];
        snprintf(what, sizeof what, "symbolic output %d dim %d = %s: %s", o, d,
                 kiln_dimx_str(sh->tab, x->dims[d], b, sizeof b), kiln_last_error());
        fail(c->name, "%s (reference %lld)", what, (long long)t->dims[d]);
        ok = 0;
        break;
      }
      if (v != t->dims[d]) {
        char b[128];
        snprintf(what, sizeof what, "%s output %d dim %d = %s", mode, o, d, kiln_dimx_str(sh->tab, x->dims[d], b, sizeof b));
        fail(c->name, "%s: %lld, reference %lld", what, (long long)v, (long long)t->dims[d]);
        ok = 0;
      }
    }
  }
  free(vals);
  return ok;
}

static void run_case(tu_case *c) {
  kiln_graph *g = c->graph;
  if (!g || tu_abi_limit(g) || kiln_ref_check_graph(g)) return;
  kiln_tensor *ins = calloc((size_t)g->n_inputs + 1, sizeof *ins);
  kiln_tensor *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
  const kiln_tensor **bound = calloc((size_t)g->n_values, sizeof *bound);
  kiln_status st = KILN_OK;
  int k = 0, have = 1;
  for (int i = 0; i < g->n_inputs && have; i++) {
    int v = g->inputs[i];
    if (g->values[v].init) continue;
    if (!tu_case_tensor(c, 0, "input", k++, &ins[i], &st) || st) have = 0;
    else {
      tu_fix_dtype(&ins[i], g->values[v].type.dtype);
      bound[v] = &ins[i];
    }
  }
  if (have && !kiln_ref_run(g, bound, outs)) {
    for (int symbolic = 0; symbolic < 2; symbolic++) {
      if (symbolic && symbolize(g, ins)) break;
      kiln_shapes *sh = NULL;
      if (kiln_shapes_infer(g, &sh)) {
        fail(c->name, "%s inference failed: %s", symbolic ? "symbolic" : "static", kiln_last_error());
        continue;
      }
      int r = compare(c, g, sh, outs, ins, symbolic);
      if (r == 1) {
        passed++;
        if (verbose) printf("ok   %s (%s)\n", c->name, symbolic ? "symbolic" : "static");
      } else if (r == 2) {
        dynamic++;
        if (verbose) printf("dyn  %s: data-dependent output shape\n", c->name);
      }
      kiln_shapes_free(sh);
    }
  }
  for (int i = 0; i < g->n_inputs; i++) kiln_tensor_release(&ins[i]);
  for (int o = 0; o < g->n_outputs; o++) kiln_tensor_release(&outs[o]);
  free(ins);
  free(outs);
  free(bound);
}

/* Every op of the reference tables has a shape function. */
static void coverage(void) {
  const kiln_op_def *const tables[] = {kiln_ref_ops_elementwise, kiln_ref_ops_shape, kiln_ref_ops_nn,
                                       kiln_ref_ops_conv, kiln_ref_ops_reduce, kiln_ref_ops_extra, kiln_ref_ops_rnn,
                                       kiln_ref_ops_signal, kiln_ref_ops_text};
  int missing = 0;
  for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
    for (const kiln_op_def *d = tables[t]; d->op_type; d++)
      if (!kiln_shape_find("", d->op_type)) {
        printf("FAIL coverage: no shape function for %s\n", d->op_type);
        missing++;
      }
  if (missing) failed++;
  else passed++;
}

int main(int argc, char **argv) {
  const char *root = KILN_NODE_TEST_DIR;
  const char *filters[64];
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "-f") && i + 1 < argc && nf < 64) filters[nf++] = argv[++i];
    else root = argv[i];
  }
  coverage();
  char **names;
  int n = tu_list_cases(root, &names);
  for (int i = 0; i < n; i++) {
    int keep = !nf;
    for (int f = 0; f < nf; f++) keep |= strstr(names[i], filters[f]) != NULL;
    tu_case c;
    if (keep && tu_case_load(&c, root, names[i])) {
      run_case(&c);
      tu_case_free(&c);
    }
    free(names[i]);
  }
  free(names);
  printf("unit_shape: %d data-dependent output shapes (checked at run time, not here)\n", dynamic);
  printf("unit_shape: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
