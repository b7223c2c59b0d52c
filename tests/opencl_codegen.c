/* tests/opencl_codegen: the OpenCL C printer (opencl/codegen) on whatever
 * ICD the environment selects (ctest runs it under PoCL and under rusticl).
 * Every ONNX node test whose graph fuses into one elementwise group is
 * printed, built (all kernels batched into one program), run and compared
 * with the reference backend; kiln's exp / tanh / sigmoid / erf (scalar,
 * float4, float16) against double and the built-ins on a dense sample; then
 * the bench elementwise chain on 1M floats,
 * fused vs a plain copy kernel of the same bytes. Exits 77 (skip) with the
 * reason when no usable device is found.
 *   opencl_codegen [-v] [--chain-rows N] [--chain-only] [NODE_TEST_ROOT] */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fuse/group.h"
#include "fuse/kinds.h"
#include "fuse/spec.h"
#include "ir/alloc.h"
#include "ir/graph_edit.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "opencl/codegen.h"
#include "opencl/device.h"
#include "opencl/runtime.h"
#include "reference/exec.h"
#include "tests/casefile.h"
#include "tests/graphbuild.h"
#include "tests/testutil.h"

static int passed, failed, verbose;
#include "tests/check.h"

/* float32 bound (the reference rounds each op from double; OpenCL's
 * built-ins may be a few ulp off: codegen's per-op rtol is added) */
#define RTOL 1e-5
#define ATOL 1e-6

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The process's CPU time (ms): the drivers' worker threads are in the
 * process, other processes' load is not. */
static double cpu_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* ------------------------------------------------------------------ */
/* one fused graph                                                     */

/* A graph with its shapes, fusion context, schedule and plan. */
typedef struct fz {
  kiln_graph *g;
  kiln_shapes *sh;
  kiln_fuse_ctx *ctx;
  kiln_schedule *s;
  kiln_fuse_plan *plan;
} fz;

static void fz_free(fz *f) {
  kiln_fuse_plan_free(f->plan);
  kiln_schedule_free(f->s);
  kiln_fuse_ctx_free(f->ctx);
  kiln_shapes_free(f->sh);
  memset(f, 0, sizeof *f);
}

/* Infers shapes and fuses g (one step per node first); 0 on failure. */
static int fz_make(fz *f, kiln_graph *g) {
  memset(f, 0, sizeof *f);
  f->g = g;
  kiln_status s = kiln_shapes_infer(g, &f->sh);
  if (!s) s = kiln_fuse_ctx_new(g, f->sh, NULL, &f->ctx);
  if (!s) s = kiln_schedule_from_graph(g, &f->s);
  if (!s) s = kiln_fuse_schedule(f->ctx, f->s, &f->plan);
  if (s) fz_free(f);
  return !s;
}

/* Fuses built graph g into *f; else (built false, or the fusion failed) a
 * failed check named `what`, g freed, false. */
static bool fz_built(fz *f, kiln_graph *g, bool built, const char *what) {
  if (built && g && fz_make(f, g)) return true;
  CHECK(0, "%s: cannot build and fuse: %s", what, kiln_last_error());
  kiln_graph_free(g);
  return false;
}

/* The only spec of f, when f is one bound elementwise group. */
static const kiln_fuse_spec *single_ew(const fz *f) {
  const kiln_fuse_spec *one = NULL;
  for (int i = 0; i < f->s->n_steps; i++) {
    if (!f->plan->spec[i]) continue;
    if (one) return NULL;
    one = f->plan->spec[i];
  }
  return one && one->kind == KILN_FUSE_G_ELEMWISE && one->bound ? one : NULL;
}

static bool all_elementwise(const kiln_graph *g) {
  if (!g->n_nodes) return false;
  for (int i = 0; i < g->n_nodes; i++) {
    kiln_fuse_kind k = kiln_fuse_kind_of(&g->nodes[i]);
    if (k != KILN_FUSE_ELEMWISE && k != KILN_FUSE_BROADCAST) return false;
  }
  return true;
}

/* rtol for a spec's float outputs: the base plus each op's built-in error. */
static double spec_rtol(const kiln_fuse_spec *sp, bool *f64) {
  double r = RTOL;
  *f64 = false;
  for (int i = 0; i < sp->n_expr; i++) {
    r += kiln_cl_codegen_op_rtol(sp->expr[i].op);
    *f64 |= sp->expr[i].dtype == KILN_F64;
  }
  return r;
}

/* Where run_kernel_at puts the kernel's outputs: device buffers, or host
 * memory (CL_MEM_USE_HOST_PTR, as zero-copy does) at a 64-byte boundary or
 * 4 bytes past one (aligned to its floats only). */
enum { OUT_DEVICE, OUT_HOST_ALIGNED, OUT_HOST_OFF4 };

/* Runs kernel k of sig over the dense tensors vals (one per graph value,
 * inputs set); the stores' outputs go to out[arg] (allocated here), their
 * buffers placed as `place` says. */
static kiln_status run_kernel_at(kiln_cl_context *c, kiln_cl_kernel *k, const kiln_cl_kernel_sig *sig,
                                 const kiln_fuse_spec *sp, const kiln_tensor *vals, kiln_tensor *out, int place) {
  kiln_cl_buffer buf[KILN_CL_SIG_MAX_ARGS];
  void *host[KILN_CL_SIG_MAX_ARGS] = {NULL};
  memset(buf, 0, sizeof buf);
  kiln_status s = KILN_OK;
  for (int a = 0; a < sig->n_args && !s; a++) {
    const kiln_cl_sig_arg *ar = &sig->args[a];
    size_t es = kiln_dtype_size(ar->dtype), bytes = (size_t)ar->numel * es;
    if (ar->output && place != OUT_DEVICE) {
      size_t off = place == OUT_HOST_OFF4 ? 4 : 0, n = bytes ? bytes : es;
      host[a] = aligned_alloc(64, (n + off + 63) / 64 * 64);
      s = host[a] ? kiln_cl_buffer_rw_over_host(c, (char *)host[a] + off, n, &buf[a])
                  : kiln_fail(KILN_E_NOMEM, "test: out of memory");
    } else {
      s = kiln_cl_buffer_create(c, bytes ? bytes : es, &buf[a]);
    }
    if (!s && !ar->output && bytes) {
      const kiln_tensor *t = &vals[ar->value];
      if (t->dtype != ar->dtype || t->numel != ar->numel || t->strided)
        s = kiln_fail(KILN_E_INTERNAL, "input '%s' is not a dense %s tensor of %lld", sp->g->values[ar->value].name,
                      kiln_dtype_name(ar->dtype), (long long)ar->numel);
      else s = kiln_cl_buffer_write(c, &buf[a], 0, t->data, bytes);
    }
    if (!s) s = kiln_cl_kernel_arg_buffer(k, (cl_uint)a, &buf[a]);
  }
  if (!s && sig->n_items) s = kiln_cl_launch_1d(c, k, (size_t)sig->n_items, 0, NULL);
  for (int a = 0; a < sig->n_args && !s; a++) {
    const kiln_cl_sig_arg *ar = &sig->args[a];
    if (!ar->output) continue;
    const kiln_fuse_store *st = &sp->store[ar->index];
    s = kiln_tensor_alloc(&out[a], ar->dtype, st->rank, st->shape);
    if (!s && out[a].numel) s = kiln_cl_buffer_read(c, &buf[a], 0, out[a].data, (size_t)out[a].numel * kiln_dtype_size(ar->dtype));
  }
  for (int a = 0; a < sig->n_args; a++) {
    kiln_cl_buffer_free(&buf[a]);
    free(host[a]);
  }
  return s;
}

static kiln_status run_kernel(kiln_cl_context *c, kiln_cl_kernel *k, const kiln_cl_kernel_sig *sig,
                              const kiln_fuse_spec *sp, const kiln_tensor *vals, kiln_tensor *out) {
  return run_kernel_at(c, k, sig, sp, vals, out, OUT_DEVICE);
}

/* ------------------------------------------------------------------ */
/* the node tests                                                      */

typedef struct ccase {
  tu_case c;
  fz f;
  const kiln_fuse_spec *sp;
  kiln_cl_kernel_sig sig;
  char *src;
  kiln_tensor *ins;  /* per graph input */
  kiln_tensor *ref;  /* per graph output */
} ccase;

static void ccase_free(ccase *k) {
  if (k->f.g) {
    for (int i = 0; k->ins && i < k->f.g->n_inputs; i++) kiln_tensor_release(&k->ins[i]);
    for (int i = 0; k->ref && i < k->f.g->n_outputs; i++) kiln_tensor_release(&k->ref[i]);
  }
  free(k->ins);
  free(k->ref);
  kiln_free(k->src);
  fz_free(&k->f);
  tu_case_free(&k->c);
}

/* Loads case `name`: 1 when it is one elementwise group with data and a
 * reference result, 0 when it does not apply. */
static int load_case(ccase *k, const char *root, const char *name) {
  memset(k, 0, sizeof *k);
  if (!tu_case_load(&k->c, root, name)) return 0;
  kiln_graph *g = k->c.graph;
  if (!g || tu_abi_limit(g) || kiln_ref_check_graph(g) || !all_elementwise(g) || !fz_make(&k->f, g) ||
      !(k->sp = single_ew(&k->f)))
    return 0;
  k->ins = calloc((size_t)g->n_inputs + 1, sizeof *k->ins);
  k->ref = calloc((size_t)g->n_outputs + 1, sizeof *k->ref);
  const kiln_tensor **bound = calloc((size_t)g->n_values + 1, sizeof *bound);
  int ok = k->ins && k->ref && bound;
  for (int i = 0, j = 0; ok && i < g->n_inputs; i++) {
    int v = g->inputs[i];
    if (g->values[v].init) continue;
    kiln_status st = KILN_OK;
    ok = tu_case_tensor(&k->c, 0, "input", j++, &k->ins[i], &st) && !st;
    if (ok) {
      tu_fix_dtype(&k->ins[i], g->values[v].type.dtype);
      bound[v] = &k->ins[i];
    }
  }
  ok = ok && !kiln_ref_run(g, bound, k->ref);
  free(bound);
  return ok;
}

/* The op a refusal names, for the tally: "codegen: <message>". */
static void refuse(tu_tally *t, const ccase *k, int *unsup) {
  (*unsup)++;
  tu_tally_add(t, k->c.op, 2);
  printf("  unsupported %s (%s): %s\n", k->c.name, k->c.op, kiln_last_error());
}

/* Compares case k's kernel outputs with the reference. */
static int check_case(kiln_cl_context *c, cl_program p, ccase *k, char *msg, size_t len) {
  const kiln_graph *g = k->f.g;
  kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
  kiln_tensor out[KILN_CL_SIG_MAX_ARGS];
  memset(out, 0, sizeof out);
  for (int v = 0; v < g->n_values; v++) {
    const kiln_tensor *t = g->values[v].init;
    if (t) kiln_tensor_wrap(&vals[v], t->dtype, t->rank, t->dims, t->numel, t->data);
  }
  for (int i = 0; i < g->n_inputs; i++)
    if (k->ins[i].dtype != KILN_UNDEFINED)
      kiln_tensor_wrap(&vals[g->inputs[i]], k->ins[i].dtype, k->ins[i].rank, k->ins[i].dims, k->ins[i].numel,
                       k->ins[i].data);
  kiln_cl_kernel kr = {0};
  kiln_status s = kiln_cl_kernel_create(c, p, k->sig.name, &kr);
  if (!s) s = run_kernel(c, &kr, &k->sig, k->sp, vals, out);
  int ok = !s;
  snprintf(msg, len, "%s", s ? kiln_last_error() : "ok");
  bool f64;
  double rtol = spec_rtol(k->sp, &f64);
  for (int a = 0; ok && a < k->sig.n_args; a++) {
    if (!k->sig.args[a].output) continue;
    int o = -1;
    for (int q = 0; q < g->n_outputs; q++)
      if (g->outputs[q] == k->sig.args[a].value) o = q;
    if (o < 0) continue; /* an intermediate something else reads: not in this graph */
    char m[400];
    double ma = 0, mr = 0;
    if (!tu_compare(&out[a], &k->ref[o], rtol, ATOL, m, sizeof m, &ma, &mr)) {
      snprintf(msg, len, "output %s: %s (rtol %g)", g->values[g->outputs[o]].name, m, rtol);
      ok = 0;
    }
  }
  for (int a = 0; a < KILN_CL_SIG_MAX_ARGS; a++) kiln_tensor_release(&out[a]);
  for (int v = 0; v < g->n_values; v++) kiln_tensor_release(&vals[v]);
  free(vals);
  kiln_cl_kernel_free(&kr);
  return ok;
}

static void test_node_suite(kiln_cl_context *c, const kiln_cl_device *dev, const char *root) {
  char **names;
  int n = tu_list_cases(root, &names);
  if (!n) {
    printf("opencl_codegen: no node tests under %s: suite skipped\n", root);
    return;
  }
  ccase *cs = calloc((size_t)n, sizeof *cs);
  tu_tally tally;
  memset(&tally, 0, sizeof tally);
  int generated = 0, unsup = 0, ok_n = 0, bad_n = 0;
  size_t total = 0;
  double t = now_ms();
  for (int i = 0; i < n; i++) {
    ccase *k = &cs[i];
    if (!load_case(k, root, names[i])) {
      kiln_error_clear();
      ccase_free(k);
      k->sp = NULL;
    } else {
      char kname[64];
      snprintf(kname, sizeof kname, "k%d", i);
      if (kiln_cl_codegen_named(k->sp, dev, kname, &k->src, &k->sig)) {
        refuse(&tally, k, &unsup);
        ccase_free(k);
        k->sp = NULL;
      } else {
        generated++;
        total += strlen(k->src);
        if (verbose) printf("--- %s\n%s", k->c.name, k->src);
      }
    }
    free(names[i]);
  }
  free(names);
  double t_gen = now_ms() - t;
  /* one program for every case's kernel */
  char *all = kiln_malloc(total + 1);
  size_t off = 0;
  for (int i = 0; all && i < n; i++)
    if (cs[i].sp) {
      size_t l = strlen(cs[i].src);
      memcpy(all + off, cs[i].src, l);
      off += l;
    }
  if (all) all[off] = 0;
  cl_program batch = NULL;
  t = now_ms();
  kiln_status bs = all ? kiln_cl_program_build(c, all, "-cl-std=CL1.2", &batch) : KILN_E_NOMEM;
  double t_build = now_ms() - t;
  printf("  %d kernels generated in %.1f ms (%zu bytes of source), one program built in %.0f ms%s\n", generated,
         t_gen, total, t_build, bs ? " (FAILED: building case by case)" : "");
  if (bs) printf("  batch build: %.600s\n", kiln_last_error());
  t = now_ms();
  for (int i = 0; i < n; i++) {
    ccase *k = &cs[i];
    if (!k->sp) continue;
    cl_program p = batch, own = NULL;
    char msg[700];
    int ok;
    if (bs) {
      kiln_status s1 = kiln_cl_program_build(c, k->src, "-cl-std=CL1.2", &own);
      snprintf(msg, sizeof msg, "build: %.600s", s1 ? kiln_last_error() : "");
      p = own;
      ok = !s1 && check_case(c, p, k, msg, sizeof msg);
    } else {
      ok = check_case(c, p, k, msg, sizeof msg);
    }
    kiln_cl_program_free(own);
    tu_tally_add(&tally, k->c.op, ok ? 0 : 1);
    ok_n += ok;
    bad_n += !ok;
    CHECK(ok, "%s: %s", k->c.name, msg);
    if (!ok) printf("%s", k->src);
    else if (verbose) printf("  ok %s\n", k->c.name);
    ccase_free(k);
  }
  printf("  ran and compared in %.0f ms\n", now_ms() - t);
  kiln_cl_program_free(batch);
  kiln_free(all);
  free(cs);
  if (verbose) tu_tally_print(&tally, "opencl_codegen node tests");
  printf("opencl_codegen: node tests: %d generated, %d passed, %d failed, %d unsupported\n", generated, ok_n, bad_n,
         unsup);
}

/* ------------------------------------------------------------------ */
/* refusals                                                            */

static void test_refusals(const kiln_cl_device *dev) {
  /* an unbound spec and a float64 spec on a device without fp64 */
  kiln_fuse_spec sp;
  memset(&sp, 0, sizeof sp);
  sp.kind = KILN_FUSE_G_ELEMWISE;
  sp.anchor = sp.pool = -1;
  char *src = (char *)1;
  kiln_cl_kernel_sig sig;
  kiln_status s = kiln_cl_codegen(&sp, dev, &src, &sig);
  CHECK(s == KILN_E_INVALID_SHAPE && src == NULL && strstr(kiln_last_error(), "not bound"), "unbound spec: %s",
        kiln_last_error());
  kiln_fuse_expr e[2] = {{.op = KILN_FUSE_CONST, .dtype = KILN_F64, .node = -1},
                         {.op = KILN_FUSE_EXP, .dtype = KILN_F64, .n_args = 1, .args = {0}, .node = -1}};
  sp.bound = true;
  sp.n_expr = 2;
  sp.expr = e;
  kiln_cl_device nofp64 = *dev;
  nofp64.has_fp64 = false;
  s = kiln_cl_codegen(&sp, &nofp64, &src, &sig);
  CHECK(s == KILN_E_UNSUPPORTED_OP && src == NULL && strstr(kiln_last_error(), "cl_khr_fp64"),
        "float64 without fp64 is refused: %s", kiln_last_error());
  printf("  float64 on a device without fp64: %s\n", kiln_last_error());
  kiln_error_clear();
}

/* ------------------------------------------------------------------ */
/* scalar weights printed as literals                                  */

/* What one case of the two tests below holds, released. */
static void case_free(kiln_tensor *out, kiln_cl_kernel *kf, cl_program p, char *src, kiln_tensor *x, kiln_tensor *ref,
                      kiln_tensor *vals, fz *f, kiln_graph *g) {
  for (int a = 0; a < KILN_CL_SIG_MAX_ARGS; a++) kiln_tensor_release(&out[a]);
  kiln_cl_kernel_free(kf);
  kiln_cl_program_free(p);
  kiln_free(src);
  kiln_tensor_release(x);
  kiln_tensor_release(ref);
  free(vals);
  fz_free(f);
  kiln_graph_free(g);
}

/* The reference's outputs for input x (value vx of g, its initializers as
 * they are) into ref, then src's kernel (sig) run over vals, x bound at
 * vx, its buffers into out; *p and *kf for the caller to free. */
static kiln_status ref_then_device(kiln_cl_context *c, const kiln_graph *g, int vx, const kiln_tensor *x,
                                   kiln_tensor *vals, const char *src, const kiln_cl_kernel_sig *sig,
                                   const kiln_fuse_spec *sp, kiln_tensor *out, kiln_tensor *ref, cl_program *p,
                                   kiln_cl_kernel *kf) {
  const kiln_tensor **bound = calloc((size_t)g->n_values + 1, sizeof *bound);
  if (!bound) return kiln_fail(KILN_E_NOMEM, "test: out of memory");
  for (int v = 0; v < g->n_values; v++) {
    const kiln_tensor *it = g->values[v].init;
    if (it) kiln_tensor_wrap(&vals[v], it->dtype, it->rank, it->dims, it->numel, it->data);
  }
  kiln_tensor_wrap(&vals[vx], x->dtype, x->rank, x->dims, x->numel, x->data);
  bound[vx] = x;
  kiln_status s = kiln_ref_run(g, bound, ref);
  free(bound);
  if (!s) s = kiln_cl_program_build(c, src, "-cl-std=CL1.2", p);
  if (!s) s = kiln_cl_kernel_create(c, *p, sig->name, kf);
  if (!s) s = run_kernel(c, kf, sig, sp, vals, out);
  return s;
}
/* y = x * s + t with s, t one-element float weights: the kernel prints the
 * finite nonzero ones as literals and reads no buffer for them, and reads
 * 0, NaN and inf (scalar form at 15 elements, vector form at 512); the
 * result matches the reference element by element, signed zeros, NaN and
 * inf included. */
static void test_literal_weights(kiln_cl_context *c, const kiln_cl_device *dev) {
  static const float cases[][2] = {
      {-0.0f, -0.0f}, {NAN, 1.5f}, {-0.0f, INFINITY}, {0x1p-149f, -FLT_MAX}, {-2.5f, 0.0f}, {0x1.fffffep-1f, -INFINITY}};
  static const int64_t shapes[][2] = {{3, 5}, {8, 64}};
  for (int k = 0; k < 6; k++)
    for (int h = 0; h < 2; h++) {
      kiln_graph *g = NULL;
      int vx = -1, vs = -1, vt = -1;
      bool bad = kiln_edit_new_graph(17, &g) || kiln_edit_add_input(g, "x", KILN_F32, 2, shapes[h], &vx);
      bad = bad || (vs = gb_f32_ramp(g, "s", 0, NULL, 0, 0)) < 0 || (vt = gb_f32_ramp(g, "t", 0, NULL, 0, 0)) < 0;
      bad = bad || gb_add(g, "Mul", "x s", "xs") < 0 || gb_add(g, "Add", "xs t", "y") < 0;
      bad = bad || kiln_edit_add_output(g, val(g, "y"));
      fz f = {0};
      if (!fz_built(&f, g, !bad, "literal weights")) return;
      ((float *)g->values[vs].init->data)[0] = cases[k][0];
      ((float *)g->values[vt].init->data)[0] = cases[k][1];
      const kiln_fuse_spec *sp = single_ew(&f);
      char *src = NULL, m[400] = "";
      kiln_cl_kernel_sig sig;
      cl_program p = NULL;
      kiln_cl_kernel kf = {0};
      kiln_tensor x = {0}, ref = {0}, out[KILN_CL_SIG_MAX_ARGS];
      kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
      memset(out, 0, sizeof out);
      kiln_status s = !sp || !vals ? kiln_fail(KILN_E_INTERNAL, "not one elementwise group") : KILN_OK;
      if (!s) s = kiln_cl_codegen(sp, dev, &src, &sig);
      if (!s) { /* s and t finite and nonzero: literals, not loads; else loads */
        for (int a = 0; a < sp->n_access; a++) {
          if (sp->access[a].value != vs && sp->access[a].value != vt) continue;
          float w = cases[k][sp->access[a].value == vt];
          char rd[32], vrd[32];
          snprintf(rd, sizeof rd, "a%d[", a);
          snprintf(vrd, sizeof vrd, "a%d + ", a);
          bool reads = strstr(src, rd) || strstr(src, vrd);
          CHECK(reads == !(isfinite(w) && w != 0), "literal weights case %d/%d: a%d (%g) %s:\n%s", k, h, a, w,
                reads ? "read" : "not read", src);
        }
      }
      if (!s) s = kiln_tensor_alloc(&x, KILN_F32, 2, shapes[h]);
      for (int64_t i = 0; !s && i < x.numel; i++) ((float *)x.data)[i] = (float)(i % 7) - 3.0f; /* 0 and both signs */
      if (!s) s = ref_then_device(c, g, vx, &x, vals, src, &sig, sp, out, &ref, &p, &kf);
      CHECK(!s, "literal weights case %d/%d: %s", k, h, s ? kiln_last_error() : "");
      if (!s) {
        const kiln_tensor *y = &out[sig.n_args - 1];
        bool same = tu_compare(y, &ref, 0, 0, m, sizeof m, NULL, NULL);
        for (int64_t i = 0; same && i < y->numel; i++) /* signed zeros too (tu_compare takes -0 == 0) */
          if (signbit(((float *)y->data)[i]) != signbit(((float *)ref.data)[i]) && !isnan(((float *)ref.data)[i]))
            same = false, snprintf(m, sizeof m, "element %lld: sign of %g vs %g", (long long)i,
                                   ((float *)y->data)[i], ((float *)ref.data)[i]);
        CHECK(same, "literal weights case %d/%d (s %g, t %g) vs reference: %s", k, h, cases[k][0], cases[k][1], m);
      }
      case_free(out, &kf, p, src, &x, &ref, vals, &f, g);
    }
}

/* Rows per work item (KILN_CL_ROWS = 1, 2, 4, 8 and the device's default):
 * y = (x + b) * z, b [cols] read once per item where the rows divide by R
 * (halved until they do), z [rows, 1] per row; the kernel's item count and
 * its hoisted loads (`h<a>`) are as planned, and y equals the reference
 * bit for bit (an add and a multiply, nothing to contract). */
static void test_rows_per_item(kiln_cl_context *c, const kiln_cl_device *dev) {
  static const int64_t shapes[][2] = {{8, 64}, {6, 32}, {5, 16}, {12, 8}};
  static const char *const modes[] = {"1", "2", "4", "8", NULL};
  for (int h = 0; h < 4; h++)
    for (int k = 0; k < 5; k++) {
      kiln_graph *g = NULL;
      int vx = -1;
      const int64_t dz[] = {shapes[h][0], 1};
      bool bad = kiln_edit_new_graph(17, &g) || kiln_edit_add_input(g, "x", KILN_F32, 2, shapes[h], &vx);
      bad = bad || gb_f32_ramp(g, "b", 1, &shapes[h][1], -1.25, 0.125) < 0 ||
            gb_f32_ramp(g, "z", 2, dz, 0.5, -0.25) < 0;
      bad = bad || gb_add(g, "Add", "x b", "xb") < 0 || gb_add(g, "Mul", "xb z", "y") < 0;
      bad = bad || kiln_edit_add_output(g, val(g, "y"));
      fz f = {0};
      if (!fz_built(&f, g, !bad, "rows per item")) return;
      const kiln_fuse_spec *sp = single_ew(&f);
      char *src = NULL, m[400] = "";
      kiln_cl_kernel_sig sig;
      cl_program p = NULL;
      kiln_cl_kernel kf = {0};
      kiln_tensor x = {0}, ref = {0}, out[KILN_CL_SIG_MAX_ARGS];
      kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
      memset(out, 0, sizeof out);
      kiln_status s = !sp || !vals ? kiln_fail(KILN_E_INTERNAL, "not one elementwise group") : KILN_OK;
      if (modes[k]) setenv("KILN_CL_ROWS", modes[k], 1);
      if (!s) s = kiln_cl_codegen(sp, dev, &src, &sig);
      unsetenv("KILN_CL_ROWS");
      const char *mode = modes[k] ? modes[k] : "default";
      if (!s && modes[k]) {
        int w = 0;
        const char *fw = strstr(src, "/* float");
        if (fw) w = atoi(fw + 8);
        int r = atoi(modes[k]);
        while (r > 1 && shapes[h][0] % r) r /= 2;
        if (w == 0 || shapes[h][1] % w) r = 1; /* not the vector form, or b not w-aligned: no rows */
        bool hoisted = strstr(src, " h0 = vload") || strstr(src, " h1 = vload") || strstr(src, " h2 = vload");
        CHECK(hoisted == (r > 1), "rows per item %lldx%lld, KILN_CL_ROWS=%s: %s hoisted load:\n%s",
              (long long)shapes[h][0], (long long)shapes[h][1], mode, hoisted ? "a" : "no", src);
        CHECK(!w || sig.n_items == shapes[h][0] * shapes[h][1] / (w * r),
              "rows per item %lldx%lld, KILN_CL_ROWS=%s: %lld items, expected %lld (float%d, %d rows)",
              (long long)shapes[h][0], (long long)shapes[h][1], mode, (long long)sig.n_items,
              (long long)(shapes[h][0] * shapes[h][1] / (w ? w * r : 1)), w, r);
      }
      if (!s) s = kiln_tensor_alloc(&x, KILN_F32, 2, shapes[h]);
      for (int64_t i = 0; !s && i < x.numel; i++) ((float *)x.data)[i] = (float)((i * 37) % 101) * 0.0625f - 3.0f;
      if (!s) s = ref_then_device(c, g, vx, &x, vals, src, &sig, sp, out, &ref, &p, &kf);
      CHECK(!s, "rows per item %lldx%lld, KILN_CL_ROWS=%s: %s", (long long)shapes[h][0], (long long)shapes[h][1], mode,
            s ? kiln_last_error() : "");
      if (!s)
        CHECK(tu_compare(&out[sig.n_args - 1], &ref, 0, 0, m, sizeof m, NULL, NULL),
              "rows per item %lldx%lld, KILN_CL_ROWS=%s vs reference: %s", (long long)shapes[h][0],
              (long long)shapes[h][1], mode, m);
      case_free(out, &kf, p, src, &x, &ref, vals, &f, g);
    }
}

/* The graph of the blocks and streamed-stores tests, x of the given shape:
 * y = tanh(x * b) + sigmoid(c^T) / z (a transposed weight read lane by lane,
 * a per-row divisor, a broadcast row) with its intermediate t = tanh(x * b)
 * a second output, built and fused into *f. false (a failed check named
 * `what`, *g freed) when it cannot be. */
static bool blocks_fused(const int64_t shape[2], kiln_graph **g, int *vx, fz *f, const char *what) {
  const int64_t dz[] = {shape[0], 1}, dc[] = {shape[1], shape[0]};
  bool bad = kiln_edit_new_graph(17, g) || kiln_edit_add_input(*g, "x", KILN_F32, 2, shape, vx);
  bad = bad || gb_f32_ramp(*g, "b", 1, &shape[1], -1.25, 0.125) < 0 || gb_f32_ramp(*g, "z", 2, dz, 0.5, 0.25) < 0 ||
        gb_f32_ramp(*g, "c", 2, dc, -2.0, 0.0625) < 0;
  bad = bad || gb_add(*g, "Mul", "x b", "xb") < 0 || gb_add(*g, "Tanh", "xb", "t") < 0 ||
        gb_add(*g, "Transpose", "c", "ct") < 0 || gb_add(*g, "Sigmoid", "ct", "sg") < 0 ||
        gb_add(*g, "Div", "sg z", "q") < 0 || gb_add(*g, "Add", "t q", "y") < 0;
  bad = bad || kiln_edit_add_output(*g, val(*g, "y")) || kiln_edit_add_output(*g, val(*g, "t"));
  if (fz_built(f, *g, !bad, what)) return true;
  *g = NULL;
  return false;
}

/* Vector blocks per work item (codegen.c block_plan): y = tanh(x * b) +
 * sigmoid(transpose(c)) / z and t = tanh(x * b), two outputs, with a
 * broadcast row b, a transposed weight c (lane by lane) and a per-row z
 * (one scalar per vector): at KILN_CL_BLOCKS=1, 2, 4, 8 and the default,
 * the item count as planned (the blocks halved until the items divide),
 * block-suffixed names exactly when there are two blocks or more, every
 * store bit-equal to the one-block kernel's and y within the spec's
 * tolerance of the reference (row blocks off: KILN_CL_ROWS=1). By default
 * the device with a preferred float width of 16 takes 8 blocks (halved),
 * any other one. */
static void test_blocks_per_item(kiln_cl_context *c, const kiln_cl_device *dev) {
  static const int64_t shapes[][2] = {{8, 64}, {6, 32}, {5, 16}, {12, 8}};
  static const char *const modes[] = {"1", "2", "4", "8", NULL};
  for (int h = 0; h < 4; h++) {
    kiln_tensor one[KILN_CL_SIG_MAX_ARGS];
    memset(one, 0, sizeof one);
    int n_one = 0;
    for (int k = 0; k < 5; k++) {
      kiln_graph *g = NULL;
      int vx = -1;
      fz f = {0};
      if (!blocks_fused(shapes[h], &g, &vx, &f, "blocks per item")) break;
      const kiln_fuse_spec *sp = single_ew(&f);
      char *src = NULL, m[400] = "";
      kiln_cl_kernel_sig sig;
      cl_program p = NULL;
      kiln_cl_kernel kf = {0};
      kiln_tensor x = {0}, ref[2] = {{0}}, out[KILN_CL_SIG_MAX_ARGS]; /* ref: both graph outputs (y, t) */
      kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
      memset(out, 0, sizeof out);
      kiln_status s = !sp || !vals ? kiln_fail(KILN_E_INTERNAL, "not one elementwise group") : KILN_OK;
      if (modes[k]) setenv("KILN_CL_BLOCKS", modes[k], 1);
      setenv("KILN_CL_ROWS", "1", 1); /* blocks come only without row blocks (rusticl's default for b) */
      if (!s) s = kiln_cl_codegen(sp, dev, &src, &sig);
      unsetenv("KILN_CL_BLOCKS");
      unsetenv("KILN_CL_ROWS");
      const char *mode = modes[k] ? modes[k] : "default";
      int w = 0;
      if (!s) {
        const char *fw = strstr(src, "/* float");
        if (fw) w = atoi(fw + 8);
        int u = modes[k] ? atoi(modes[k]) : dev->pref_vec_float >= 16 ? 8 : 1;
        int64_t items = w ? shapes[h][0] * shapes[h][1] / w : 0;
        while (u > 1 && items % u) u /= 2;
        if (!w) u = 1; /* not the vector form */
        bool named = strstr(src, "_1o0") != NULL;
        CHECK(named == (u > 1), "blocks per item %lldx%lld, KILN_CL_BLOCKS=%s: %s block names, %d blocks planned:\n%s",
              (long long)shapes[h][0], (long long)shapes[h][1], mode, named ? "" : "no", u, src);
        CHECK(!w || sig.n_items == items / u,
              "blocks per item %lldx%lld, KILN_CL_BLOCKS=%s: %lld items, expected %lld (float%d, %d blocks)",
              (long long)shapes[h][0], (long long)shapes[h][1], mode, (long long)sig.n_items,
              (long long)(items / (u ? u : 1)), w, u);
      }
      if (!s) s = kiln_tensor_alloc(&x, KILN_F32, 2, shapes[h]);
      for (int64_t i = 0; !s && i < x.numel; i++) ((float *)x.data)[i] = (float)((i * 37) % 101) * 0.0625f - 3.0f;
      if (!s) s = ref_then_device(c, g, vx, &x, vals, src, &sig, sp, out, ref, &p, &kf);
      CHECK(!s, "blocks per item %lldx%lld, KILN_CL_BLOCKS=%s: %s", (long long)shapes[h][0], (long long)shapes[h][1],
            mode, s ? kiln_last_error() : "");
      if (!s) {
        bool f64;
        double rtol = spec_rtol(sp, &f64);
        for (int a = 0; a < sig.n_args; a++) {
          if (!sig.args[a].output) continue;
          if (sig.args[a].value == val(g, "y"))
            CHECK(tu_compare(&out[a], &ref[0], rtol, ATOL, m, sizeof m, NULL, NULL),
                  "blocks per item %lldx%lld, KILN_CL_BLOCKS=%s: y vs reference: %s", (long long)shapes[h][0],
                  (long long)shapes[h][1], mode, m);
          if (k == 0) continue; /* the one-block kernel: kept below */
          CHECK(a < n_one && one[a].data && tu_compare(&out[a], &one[a], 0, 0, m, sizeof m, NULL, NULL),
                "blocks per item %lldx%lld, KILN_CL_BLOCKS=%s: store %d vs one block's bits: %s",
                (long long)shapes[h][0], (long long)shapes[h][1], mode, a, a < n_one ? m : "no one-block run");
        }
        if (k == 0) { /* KILN_CL_BLOCKS=1: the bits the others must give */
          for (int a = 0; a < sig.n_args; a++) {
            one[a] = out[a];
            memset(&out[a], 0, sizeof out[a]);
          }
          n_one = sig.n_args;
        }
      }
      kiln_tensor_release(&ref[1]);
      case_free(out, &kf, p, src, &x, &ref[0], vals, &f, g);
    }
    for (int a = 0; a < KILN_CL_SIG_MAX_ARGS; a++) kiln_tensor_release(&one[a]);
  }
}

/* Occurrences of needle in hay. */
static int count_str(const char *hay, const char *needle) {
  int n = 0;
  for (const char *q = hay; (q = strstr(q, needle)); q++) n++;
  return n;
}

/* Streamed stores (stream_plan, KILN_CL_STREAM=all so that small outputs
 * take them): the graph of the blocks test (y and its intermediate t, both
 * contiguous stores) in the planner's default form, one vector per item and
 * two rows per item; the source tests each store's alignment once per item
 * (row blocks: once for its rows) before the non-temporal stores, and the
 * outputs, in device buffers, in host memory at a 64-byte boundary and 4
 * bytes past one (the vstoreW fallback), are bit-equal to the kernel
 * printed without them (KILN_CL_STREAM=0), y within the reference's
 * tolerance. A store whose
 * rows are not a multiple of the vector apart is not streamed (the source
 * only: y's map edited). */
static void test_streamed_stores(kiln_cl_context *c, const kiln_cl_device *dev) {
  static const int64_t shapes[][2] = {{8, 64}, {6, 32}, {12, 8}, {64, 128}};
  static const char *const place_name[] = {"device buffers", "host memory at 64 bytes", "host memory at 64 + 4 bytes"};
  for (int h = 0; h < 4; h++)
    for (int one_vec = 0; one_vec < 3; one_vec++) { /* the default form, one vector per item, two rows per item */
      kiln_graph *g = NULL;
      int vx = -1;
      fz f = {0};
      if (!blocks_fused(shapes[h], &g, &vx, &f, "streamed stores")) return;
      const kiln_fuse_spec *sp = single_ew(&f);
      char *src = NULL, *plain = NULL, m[400] = "", what[96];
      snprintf(what, sizeof what, "streamed stores %lldx%lld, %s", (long long)shapes[h][0], (long long)shapes[h][1],
               one_vec == 2 ? "two rows per item" : one_vec ? "one vector per item" : "the default form");
      kiln_cl_kernel_sig sig, psig;
      cl_program p = NULL, pp = NULL;
      kiln_cl_kernel kf = {0}, kp = {0};
      kiln_tensor x = {0}, ref[2] = {{0}}, want[KILN_CL_SIG_MAX_ARGS], out[KILN_CL_SIG_MAX_ARGS];
      kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
      memset(out, 0, sizeof out);
      memset(want, 0, sizeof want);
      kiln_status s = !sp || !vals ? kiln_fail(KILN_E_INTERNAL, "not one elementwise group") : KILN_OK;
      if (one_vec == 1) {
        setenv("KILN_CL_ROWS", "1", 1);
        setenv("KILN_CL_BLOCKS", "1", 1);
      } else if (one_vec == 2) {
        setenv("KILN_CL_ROWS", "2", 1);
      }
      setenv("KILN_CL_STREAM", "0", 1);
      if (!s) s = kiln_cl_codegen(sp, dev, &plain, &psig);
      setenv("KILN_CL_STREAM", "all", 1);
      if (!s) s = kiln_cl_codegen(sp, dev, &src, &sig);
      unsetenv("KILN_CL_STREAM");
      unsetenv("KILN_CL_ROWS");
      unsetenv("KILN_CL_BLOCKS");
      if (!s) {
        /* both stores streamed: each vstoreW of the plain kernel has a
           non-temporal twin and stays as the fallback, and each store's
           alignment is tested once per item (blocks or rows alike) */
        int tests = count_str(src, "(uintptr_t)"), nt = count_str(src, "__builtin_nontemporal_store(");
        int vs = count_str(plain, "vstore"), vs2 = count_str(src, "vstore");
        CHECK(tests == 2 && vs > 0 && nt == vs && vs2 == vs && !strstr(plain, "KILN_CL_NT"),
              "%s: %d alignment tests (want 2), %d non-temporal stores and %d vstores (want %d each) with "
              "KILN_CL_STREAM=all, none without:\n%s",
              what, tests, nt, vs2, vs, src);
        /* y's store moved to rows cols + 4 apart (its vectors no longer a
           multiple of w apart): y is not streamed; cols + 16 apart: it is */
        int ky = -1;
        for (int k = 0; k < sp->n_store; k++)
          if (sp->store[k].value == val(g, "y")) ky = k;
        kiln_view *yv = ky >= 0 && sp->store[ky].map.depth == 1 ? &((kiln_fuse_spec *)sp)->store[ky].map.v[0] : NULL;
        for (int pad = 4; yv && yv->rank == 2 && !one_vec && h == 3 && pad <= 16; pad += 12) {
          const int64_t s0 = yv->strides[0];
          const bool c0 = yv->contiguous;
          yv->strides[0] = shapes[h][1] + pad;
          yv->contiguous = false;
          char *ssrc = NULL;
          kiln_cl_kernel_sig ssig;
          setenv("KILN_CL_STREAM", "all", 1);
          kiln_status ss = kiln_cl_codegen(sp, dev, &ssrc, &ssig);
          unsetenv("KILN_CL_STREAM");
          yv->strides[0] = s0;
          yv->contiguous = c0;
          int st = ss ? -1 : count_str(ssrc, "(uintptr_t)");
          CHECK(st == (pad == 4 ? tests / 2 : tests),
                "%s, y's rows %lld + %d apart: %d alignment tests, expected %d (%s):\n%s", what,
                (long long)shapes[h][1], pad, st, pad == 4 ? tests / 2 : tests, ss ? kiln_last_error() : "",
                ssrc ? ssrc : "");
          kiln_free(ssrc);
        }
      }
      if (!s) s = kiln_tensor_alloc(&x, KILN_F32, 2, shapes[h]);
      for (int64_t i = 0; !s && i < x.numel; i++) ((float *)x.data)[i] = (float)((i * 37) % 101) * 0.0625f - 3.0f;
      if (!s) s = ref_then_device(c, g, vx, &x, vals, plain, &psig, sp, want, ref, &pp, &kp);
      if (!s) s = kiln_cl_program_build(c, src, "-cl-std=CL1.2", &p);
      if (!s) s = kiln_cl_kernel_create(c, p, sig.name, &kf);
      CHECK(!s, "%s: %s", what, s ? kiln_last_error() : "");
      bool f64;
      double rtol = sp ? spec_rtol(sp, &f64) : 0;
      for (int place = OUT_DEVICE; !s && place <= OUT_HOST_OFF4; place++) {
        kiln_status rs = run_kernel_at(c, &kf, &sig, sp, vals, out, place);
        CHECK(!rs, "%s, outputs in %s: %s", what, place_name[place], rs ? kiln_last_error() : "");
        for (int a = 0; !rs && a < sig.n_args; a++) {
          if (!sig.args[a].output) continue;
          CHECK(tu_compare(&out[a], &want[a], 0, 0, m, sizeof m, NULL, NULL),
                "%s, outputs in %s: store %d vs the kernel without streamed stores: %s", what, place_name[place], a, m);
          if (sig.args[a].value == val(g, "y"))
            CHECK(tu_compare(&out[a], &ref[0], rtol, ATOL, m, sizeof m, NULL, NULL),
                  "%s, outputs in %s: y vs reference: %s", what, place_name[place], m);
        }
        for (int a = 0; a < KILN_CL_SIG_MAX_ARGS; a++) kiln_tensor_release(&out[a]);
      }
      kiln_tensor_release(&ref[1]);
      kiln_cl_kernel_free(&kp);
      kiln_cl_program_free(pp);
      kiln_free(plain);
      case_free(want, &kf, p, src, &x, &ref[0], vals, &f, g);
    }
}

/* The defaults at scale, printed only (y = x * b, b over the rows): a
 * store of 16 MiB and more is streamed, one below is not; rows per item
 * where the device prefers vectors narrower than 16 floats: 8 while 65536
 * items remain, else 4, else 2, halved until the rows divide; else 1. */
static void test_stream_rows_defaults(const kiln_cl_device *dev) {
  static const int64_t shapes[][2] = {{4096, 1024}, {2048, 1024}, {1024, 1024}, {4095, 1024}, {6144, 1024}};
  for (int h = 0; h < 5; h++) {
    kiln_graph *g = NULL;
    int vx = -1;
    bool bad = kiln_edit_new_graph(17, &g) || kiln_edit_add_input(g, "x", KILN_F32, 2, shapes[h], &vx);
    bad = bad || gb_f32_ramp(g, "b", 1, &shapes[h][1], -1.25, 0.125) < 0 || gb_add(g, "Mul", "x b", "y") < 0;
    bad = bad || kiln_edit_add_output(g, val(g, "y"));
    fz f = {0};
    if (!fz_built(&f, g, !bad, "stream and rows defaults")) return;
    const kiln_fuse_spec *sp = single_ew(&f);
    char *src = NULL;
    kiln_cl_kernel_sig sig;
    const char *keep[] = {"KILN_CL_STREAM", "KILN_CL_ROWS", "KILN_CL_BLOCKS", "KILN_CL_VEC"};
    for (int k = 0; k < 4; k++) unsetenv(keep[k]);
    kiln_status s = sp ? kiln_cl_codegen(sp, dev, &src, &sig) : kiln_fail(KILN_E_INTERNAL, "not one group");
    const int64_t numel = shapes[h][0] * shapes[h][1];
    if (!s) {
      const char *fw = strstr(src, "/* float");
      int w = fw ? atoi(fw + 8) : 0, r = 1;
      if (dev->pref_vec_float < 16) {
        r = 8;
        while (r > 2 && w && numel / (w * r) < 65536) r /= 2;
        while (r > 1 && shapes[h][0] % r) r /= 2;
      }
      bool streamed = strstr(src, "__builtin_nontemporal_store(") != NULL;
      CHECK(w > 0 && streamed == (numel * 4 >= (int64_t)16 << 20) && sig.n_items == numel / (w * r),
            "stream and rows defaults %lldx%lld: float%d, %s, %lld items; want %s, %lld items (%d rows)",
            (long long)shapes[h][0], (long long)shapes[h][1], w, streamed ? "streamed" : "not streamed",
            (long long)sig.n_items, numel * 4 >= (int64_t)16 << 20 ? "streamed" : "not streamed",
            (long long)(w ? numel / (w * r) : 0), r);
      printf("  %lldx%lld: float%d, %d rows per item, %s\n", (long long)shapes[h][0], (long long)shapes[h][1], w, r,
             streamed ? "streamed" : "plain stores");
    }
    CHECK(!s, "stream and rows defaults %lldx%lld: %s", (long long)shapes[h][0], (long long)shapes[h][1],
          s ? kiln_last_error() : "");
    kiln_free(src);
    fz_free(&f);
    kiln_graph_free(g);
  }
}

/* ------------------------------------------------------------------ */
/* the bench elementwise chain                                         */


/* The bench chain: y = relu(clip(tanh(y2 * sigmoid(y2)), lo, hi) + x), y2 = x * scale + bias. */
static kiln_graph *ew_chain(int64_t rows, int64_t cols) {
  kiln_graph *g = NULL;
  int v;
  const int64_t dx[] = {rows, cols};
  if (kiln_edit_new_graph(17, &g) || kiln_edit_add_input(g, "x", KILN_F32, 2, dx, &v)) return NULL;
  int bad = gb_f32_ramp(g, "bias", 1, &cols, -0.5, 0.01) < 0 || gb_f32_ramp(g, "scale", 0, NULL, 1.5, 0) < 0 ||
            gb_f32_ramp(g, "lo", 0, NULL, -0.5, 0) < 0 || gb_f32_ramp(g, "hi", 0, NULL, 0.75, 0) < 0;
  bad = bad || gb_add(g, "Mul", "x scale", "y1") < 0;
  bad = bad || gb_add(g, "Add", "y1 bias", "y2") < 0;
  bad = bad || gb_add(g, "Sigmoid", "y2", "s") < 0;
  bad = bad || gb_add(g, "Mul", "y2 s", "y4") < 0;
  bad = bad || gb_add(g, "Tanh", "y4", "y5") < 0;
  bad = bad || gb_add(g, "Clip", "y5 lo hi", "y6") < 0;
  bad = bad || gb_add(g, "Add", "y6 x", "y7") < 0;
  bad = bad || gb_add(g, "Relu", "y7", "y") < 0;
  bad = bad || kiln_edit_add_output(g, val(g, "y"));
  if (bad) {
    kiln_graph_free(g);
    return NULL;
  }
  return g;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Median of 5 timed launches (after one warm-up), clFinish each. */
static double time_kernel(kiln_cl_context *c, kiln_cl_kernel *k, size_t n) {
  double t[5];
  kiln_cl_launch_1d(c, k, n, 0, NULL);
  kiln_cl_finish(c);
  for (int r = 0; r < 5; r++) {
    double t0 = now_ms();
    kiln_cl_launch_1d(c, k, n, 0, NULL);
    kiln_cl_finish(c);
    t[r] = now_ms() - t0;
  }
  qsort(t, 5, sizeof *t, cmp_double);
  return t[2];
}

/* Kernels a and b launched alternately, 9 pairs after one warm-up each
 * (clFinish each): their median times and the median of the per-pair
 * ratios a/b, which a load that changes over the seconds of a run moves
 * less than the ratio of two medians taken one after the other; *cpu the
 * median pair ratio of the process CPU time each launch took (on a CPU
 * device the work itself; a loaded machine stretches the wall times). */
static double time_pair(kiln_cl_context *c, kiln_cl_kernel *a, size_t na, kiln_cl_kernel *b, size_t nb, double *ta,
                        double *tb, double *cpu) {
  enum { P = 9 };
  double t[2][P], u[2][P], r[P], ru[P];
  kiln_cl_kernel *k[2] = {a, b};
  const size_t n[2] = {na, nb};
  for (int j = 0; j < 2; j++) kiln_cl_launch_1d(c, k[j], n[j], 0, NULL), kiln_cl_finish(c);
  for (int p = 0; p < P; p++) {
    for (int j = 0; j < 2; j++) {
      double t0 = now_ms(), u0 = cpu_ms();
      kiln_cl_launch_1d(c, k[j], n[j], 0, NULL);
      kiln_cl_finish(c);
      t[j][p] = now_ms() - t0;
      u[j][p] = cpu_ms() - u0;
    }
    r[p] = t[1][p] > 0 ? t[0][p] / t[1][p] : 0;
    ru[p] = u[1][p] > 0 ? u[0][p] / u[1][p] : 0;
  }
  qsort(t[0], P, sizeof **t, cmp_double);
  qsort(t[1], P, sizeof **t, cmp_double);
  qsort(r, P, sizeof *r, cmp_double);
  qsort(ru, P, sizeof *ru, cmp_double);
  *ta = t[0][P / 2], *tb = t[1][P / 2], *cpu = ru[P / 2];
  return r[P / 2];
}

static int chain_only; /* --chain-only: the bench chain alone */
static int64_t chain_rows = 1024; /* --chain-rows N (x 1024 floats; bench/cl_cache.py: 16384 = 16M) */

static void test_bench_chain(kiln_cl_context *c, const kiln_cl_device *dev) {
  const int64_t ROWS = chain_rows, COLS = 1024;
  kiln_graph *g = ew_chain(ROWS, COLS);
  fz f;
  if (!fz_built(&f, g, true, "bench chain")) return;
  const kiln_fuse_spec *sp = single_ew(&f);
  char *src = NULL;
  kiln_cl_kernel_sig sig;
  cl_program p = NULL;
  kiln_cl_kernel kf = {0}, kc = {0}, kh = {0}, k16 = {0};
  kiln_tensor x = {0}, ref = {0}, out[KILN_CL_SIG_MAX_ARGS];
  kiln_tensor *vals = calloc((size_t)g->n_values + 1, sizeof *vals);
  kiln_cl_buffer bx = {0}, by = {0};
  memset(out, 0, sizeof out);
  CHECK(sp != NULL, "bench chain is one elementwise group");
  if (!sp) goto done;
  if (kiln_cl_codegen(sp, dev, &src, &sig)) {
    CHECK(0, "bench chain codegen: %s", kiln_last_error());
    goto done;
  }
  if (verbose) printf("%s", src);
  static const char copy_src[] = "__kernel void kiln_copy(__global const float *restrict a, __global float *b) {\n"
                                 "  if (get_global_id(0) >= N_ITEMS) return;\n"
                                 "  b[get_global_id(0)] = a[get_global_id(0)];\n}\n"
                                 "/* the same bytes 16 floats per work item: the copy that reaches the bandwidth\n"
                                 "   on PoCL (the plain one above takes ~1.4x its time there) */\n"
                                 "__kernel void kiln_copy16(__global const float *restrict a, __global float *b) {\n"
                                 "  if (get_global_id(0) >= N_ITEMS / 16) return;\n"
                                 "  const size_t i = get_global_id(0) * 16;\n"
                                 "  vstore16(vload16(0, a + i), 0, b + i);\n}\n"
                                 "/* the float16 copy with the fused kernel's non-temporal stores, where it\n"
                                 "   takes them (KILN_CL_NT: opencl/codegen.c stream_plan) */\n"
                                 "__kernel void kiln_copy16nt(__global const float *restrict a, __global float *b) {\n"
                                 "  if (get_global_id(0) >= N_ITEMS / 16) return;\n"
                                 "  const size_t i = get_global_id(0) * 16;\n"
                                 "#ifdef KILN_CL_NT\n"
                                 "  if (!((uintptr_t)(b + i) & 63)) {\n"
                                 "    __builtin_nontemporal_store(vload16(0, a + i), (__global float16 *)(b + i));\n"
                                 "    return;\n"
                                 "  }\n"
                                 "#endif\n"
                                 "  vstore16(vload16(0, a + i), 0, b + i);\n}\n"
                                 "/* the same chain written by hand: contiguous, constants inline */\n"
                                 "__kernel void kiln_hand(__global const float *restrict x, __global const float *restrict bias,\n"
                                 "                        __global float *y) {\n"
                                 "  const size_t i = get_global_id(0);\n"
                                 "  if (i >= N_ITEMS) return;\n"
                                 "  const float x0 = x[i], y2 = x0 * 1.5f + bias[i % 1024];\n"
                                 "  const float e = exp(-fabs(y2)), s = (y2 >= 0 ? 1.0f : e) / (1.0f + e);\n"
                                 "  const float t = clamp(tanh(y2 * s), -0.5f, 0.75f) + x0;\n"
                                 "  y[i] = t < 0 ? 0 : t;\n}\n"
                                 /* --chain-only variants: what bounds the fused kernel */
                                 "/* the same without exp/tanh (a cheap stand-in): the memory floor of this shape */\n"
                                 "__kernel void kiln_nomath(__global const float *restrict x, __global const float *restrict bias,\n"
                                 "                          __global float *y) {\n"
                                 "  const size_t i = get_global_id(0);\n"
                                 "  if (i >= N_ITEMS) return;\n"
                                 "  const float x0 = x[i], y2 = x0 * 1.5f + bias[i % 1024];\n"
                                 "  const float s = y2 * 0.25f + 0.5f, t = clamp(y2 * s, -0.5f, 0.75f) + x0;\n"
                                 "  y[i] = t < 0 ? 0 : t;\n}\n"
                                 "/* native_exp for sigmoid and tanh (tanh(v) = 1 - 2 / (exp(2v) + 1)) */\n"
                                 "__kernel void kiln_native(__global const float *restrict x, __global const float *restrict bias,\n"
                                 "                          __global float *y) {\n"
                                 "  const size_t i = get_global_id(0);\n"
                                 "  if (i >= N_ITEMS) return;\n"
                                 "  const float x0 = x[i], y2 = x0 * 1.5f + bias[i % 1024];\n"
                                 "  const float e = native_exp(-fabs(y2)), s = (y2 >= 0 ? 1.0f : e) / (1.0f + e);\n"
                                 "  const float v = clamp(y2 * s, -10.0f, 10.0f);\n"
                                 "  const float t = clamp(1.0f - 2.0f / (native_exp(2.0f * v) + 1.0f), -0.5f, 0.75f) + x0;\n"
                                 "  y[i] = t < 0 ? 0 : t;\n}\n"
                                 "/* float4 loads and stores, 4 elements per work item, precise builtins */\n"
                                 "__kernel void kiln_vec4(__global const float4 *restrict x, __global const float4 *restrict bias,\n"
                                 "                        __global float4 *y) {\n"
                                 "  const size_t i = get_global_id(0);\n"
                                 "  if (i >= N_ITEMS / 4) return;\n"
                                 "  const float4 x0 = x[i], y2 = x0 * 1.5f + bias[i % 256];\n"
                                 "  const float4 e = exp(-fabs(y2)), s = select(e, (float4)1.0f, y2 >= 0) / (1.0f + e);\n"
                                 "  const float4 t = clamp(tanh(y2 * s), -0.5f, 0.75f) + x0;\n"
                                 "  y[i] = fmax(t, 0.0f);\n}\n"
                                 "/* float4 and native_exp */\n"
                                 "__kernel void kiln_vec4n(__global const float4 *restrict x, __global const float4 *restrict bias,\n"
                                 "                         __global float4 *y) {\n"
                                 "  const size_t i = get_global_id(0);\n"
                                 "  if (i >= N_ITEMS / 4) return;\n"
                                 "  const float4 x0 = x[i], y2 = x0 * 1.5f + bias[i % 256];\n"
                                 "  const float4 e = native_exp(-fabs(y2)), s = select(e, (float4)1.0f, y2 >= 0) / (1.0f + e);\n"
                                 "  const float4 v = clamp(y2 * s, -10.0f, 10.0f);\n"
                                 "  const float4 t = clamp(1.0f - 2.0f / (native_exp(2.0f * v) + 1.0f), -0.5f, 0.75f) + x0;\n"
                                 "  y[i] = fmax(t, 0.0f);\n}\n";
  char def[64];
  snprintf(def, sizeof def, "#define N_ITEMS %lld\n", (long long)(ROWS * COLS));
  size_t l0 = strlen(def), l1 = strlen(src);
  char *both = kiln_malloc(l0 + l1 + sizeof copy_src);
  if (!both) goto done;
  memcpy(both, def, l0);
  memcpy(both + l0, src, l1);
  memcpy(both + l0 + l1, copy_src, sizeof copy_src);
  double t = now_ms();
  kiln_status s = kiln_cl_program_build(c, both, "-cl-std=CL1.2", &p);
  kiln_free(both);
  if (s) {
    CHECK(0, "bench chain build: %s", kiln_last_error());
    goto done;
  }
  printf("  bench chain: %d nodes -> 1 kernel, %d buffers, built in %.0f ms\n", sp->n_nodes, sig.n_args,
         now_ms() - t);
  /* correctness on the 1M elements */
  const int64_t dx[] = {ROWS, COLS};
  if (kiln_tensor_alloc(&x, KILN_F32, 2, dx)) goto done;
  for (int64_t i = 0; i < x.numel; i++) ((float *)x.data)[i] = (float)((double)((i * 7919) % 2001) / 500.0 - 2.0);
  for (int v = 0; v < g->n_values; v++) {
    const kiln_tensor *it = g->values[v].init;
    if (it) kiln_tensor_wrap(&vals[v], it->dtype, it->rank, it->dims, it->numel, it->data);
  }
  kiln_tensor_wrap(&vals[val(g, "x")], x.dtype, x.rank, x.dims, x.numel, x.data);
  const kiln_tensor **bound = calloc((size_t)g->n_values + 1, sizeof *bound);
  bound[val(g, "x")] = &x;
  s = kiln_ref_run(g, bound, &ref);
  free(bound);
  if (s || kiln_cl_kernel_create(c, p, sig.name, &kf) || run_kernel(c, &kf, &sig, sp, vals, out)) {
    CHECK(0, "bench chain run: %s", kiln_last_error());
    goto done;
  }
  bool f64;
  double rtol = spec_rtol(sp, &f64);
  char m[400];
  int at = sig.n_args - 1;
  CHECK(tu_compare(&out[at], &ref, rtol, ATOL, m, sizeof m, NULL, NULL), "bench chain vs reference: %s", m);
  /* timing: the fused kernel vs a copy of the same bytes (x in, y out) */
  kiln_cl_buffer bufs[KILN_CL_SIG_MAX_ARGS];
  memset(bufs, 0, sizeof bufs);
  s = KILN_OK;
  for (int a = 0; a < sig.n_args && !s; a++) {
    size_t bytes = (size_t)sig.args[a].numel * kiln_dtype_size(sig.args[a].dtype);
    s = kiln_cl_buffer_create(c, bytes, &bufs[a]);
    if (!s && !sig.args[a].output) s = kiln_cl_buffer_write(c, &bufs[a], 0, vals[sig.args[a].value].data, bytes);
    if (!s) s = kiln_cl_kernel_arg_buffer(&kf, (cl_uint)a, &bufs[a]);
  }
  if (!s) s = kiln_cl_buffer_create(c, (size_t)x.numel * 4, &bx);
  if (!s) s = kiln_cl_buffer_create(c, (size_t)x.numel * 4, &by);
  if (!s) s = kiln_cl_buffer_write(c, &bx, 0, x.data, (size_t)x.numel * 4);
  if (!s) s = kiln_cl_kernel_create(c, p, "kiln_copy", &kc);
  if (!s) s = kiln_cl_kernel_arg_buffer(&kc, 0, &bx);
  if (!s) s = kiln_cl_kernel_arg_buffer(&kc, 1, &by);
  if (!s) s = kiln_cl_kernel_create(c, p, "kiln_copy16", &k16);
  if (!s) s = kiln_cl_kernel_arg_buffer(&k16, 0, &bx);
  if (!s) s = kiln_cl_kernel_arg_buffer(&k16, 1, &by);
  if (!s) s = kiln_cl_kernel_create(c, p, "kiln_hand", &kh);
  if (!s) s = kiln_cl_kernel_arg_buffer(&kh, 0, &bx);
  int bias_arg = 0;
  for (int a = 0; a < sig.n_args; a++)
    if (sig.args[a].value == val(g, "bias")) bias_arg = a;
  if (!s) s = kiln_cl_kernel_arg_buffer(&kh, 1, &bufs[bias_arg]);
  if (!s) s = kiln_cl_kernel_arg_buffer(&kh, 2, &by);
  if (!s) {
    double tf, tc, uc, rfc = time_pair(c, &kf, (size_t)sig.n_items, &kc, (size_t)x.numel, &tf, &tc, &uc);
    double th = time_kernel(c, &kh, (size_t)x.numel);
    printf("  bench chain on %s: fused %.3f ms, copy of the same bytes %.3f ms: ratio %.2f, CPU time ratio %.2f "
           "(9 alternated pairs: medians, median ratios); hand-written chain %.3f ms: fused/hand %.2f (median of 5)\n",
           dev->name, tf, tc, rfc, uc, th, th > 0 ? tf / th : 0);
    CHECK(tf > 0 && tc > 0, "timings");
    if (chain_only) { /* against the copy that reaches the bandwidth */
      double tf2, t16, u16, r16 = time_pair(c, &kf, (size_t)sig.n_items, &k16, (size_t)x.numel / 16, &tf2, &t16, &u16);
      printf("  bench chain on %s, against a float16 copy: fused %.3f ms, float16 copy %.3f ms: ratio %.2f, CPU time "
             "ratio %.2f (9 alternated pairs: medians, median ratios)\n",
             dev->name, tf2, t16, r16, u16);
      CHECK(tf2 > 0 && t16 > 0, "timings against the float16 copy");
      kiln_cl_kernel knt = {0};
      double tf3 = 0, tnt = 0, unt = 0, rnt = 0;
      kiln_status sn = kiln_cl_kernel_create(c, p, "kiln_copy16nt", &knt);
      if (!sn) sn = kiln_cl_kernel_arg_buffer(&knt, 0, &bx);
      if (!sn) sn = kiln_cl_kernel_arg_buffer(&knt, 1, &by);
      if (!sn) rnt = time_pair(c, &kf, (size_t)sig.n_items, &knt, (size_t)x.numel / 16, &tf3, &tnt, &unt);
      printf("  bench chain on %s, against a float16 copy with%s non-temporal stores: fused %.3f ms, that copy %.3f "
             "ms: ratio %.2f, CPU time ratio %.2f (9 alternated pairs: medians, median ratios)\n",
             dev->name, strstr(src, "__builtin_nontemporal_store") ? "" : "out (as the fused kernel here)",
             tf3, tnt, rnt, unt);
      CHECK(!sn && tf3 > 0 && tnt > 0, "timings against the float16 copy with non-temporal stores: %s",
            sn ? kiln_last_error() : "");
      kiln_cl_kernel_free(&knt);
    }
    static const char *const var[] = {"kiln_nomath", "kiln_native", "kiln_vec4", "kiln_vec4n"};
    for (int k = 0; chain_only && k < 4; k++) { /* what bounds the fused kernel */
      kiln_cl_kernel kv = {0};
      bool v4 = strstr(var[k], "vec4") != NULL;
      kiln_tensor yv = {0};
      kiln_status sv = kiln_cl_kernel_create(c, p, var[k], &kv);
      if (!sv) sv = kiln_cl_kernel_arg_buffer(&kv, 0, &bx);
      if (!sv) sv = kiln_cl_kernel_arg_buffer(&kv, 1, &bufs[bias_arg]);
      if (!sv) sv = kiln_cl_kernel_arg_buffer(&kv, 2, &by);
      double tv = sv ? 0 : time_kernel(c, &kv, (size_t)x.numel / (v4 ? 4 : 1));
      if (!sv) sv = kiln_tensor_alloc(&yv, KILN_F32, 2, dx);
      if (!sv) sv = kiln_cl_buffer_read(c, &by, 0, yv.data, (size_t)x.numel * 4);
      double ma = 0;
      if (!sv && k) tu_compare(&yv, &ref, 1, 1, m, sizeof m, &ma, NULL);
      printf("  variant %-12s %8.3f ms: /copy %.2f, /fused %.2f%s", var[k], tv, tc > 0 ? tv / tc : 0,
             tf > 0 ? tv / tf : 0, k ? "" : " (not the same function)\n");
      if (k) printf(", max abs error vs reference %.2g\n", ma);
      CHECK(!sv, "variant %s: %s", var[k], sv ? kiln_last_error() : "");
      kiln_tensor_release(&yv);
      kiln_cl_kernel_free(&kv);
    }
    /* the generated kernel as it was before kiln's math and wider vectors
       (KILN_CL_MATH=builtin KILN_CL_VEC=4), and kiln's math at float4 */
    static const char *const old_env[][3] = {{"builtin", "4", "builtin float4"}, {"", "4", "kiln float4"}};
    for (int k = 0; chain_only && k < 2; k++) {
      char *osrc = NULL, *both2 = NULL;
      kiln_cl_kernel_sig osig;
      cl_program op = NULL;
      kiln_cl_kernel ko = {0};
      setenv("KILN_CL_MATH", old_env[k][0], 1);
      setenv("KILN_CL_VEC", old_env[k][1], 1);
      kiln_status so = kiln_cl_codegen(sp, dev, &osrc, &osig);
      unsetenv("KILN_CL_MATH");
      unsetenv("KILN_CL_VEC");
      if (!so && !(both2 = kiln_malloc(l0 + strlen(osrc) + 1))) so = kiln_fail(KILN_E_NOMEM, "out of memory");
      if (!so) {
        memcpy(both2, def, l0);
        memcpy(both2 + l0, osrc, strlen(osrc) + 1);
        so = kiln_cl_program_build(c, both2, "-cl-std=CL1.2", &op);
      }
      if (!so) so = kiln_cl_kernel_create(c, op, osig.name, &ko);
      for (int a = 0; a < osig.n_args && !so; a++) so = kiln_cl_kernel_arg_buffer(&ko, (cl_uint)a, &bufs[a]);
      double to = so ? 0 : time_kernel(c, &ko, (size_t)osig.n_items);
      printf("  generated, %-14s %8.3f ms: /copy %.2f, /fused %.2f\n", old_env[k][2], to, tc > 0 ? to / tc : 0,
             tf > 0 ? to / tf : 0);
      CHECK(!so, "generated chain (%s): %s", old_env[k][2], so ? kiln_last_error() : "");
      kiln_cl_kernel_free(&ko);
      kiln_cl_program_free(op);
      kiln_free(both2);
      kiln_free(osrc);
    }
  } else {
    CHECK(0, "bench chain timing setup: %s", kiln_last_error());
  }
  for (int a = 0; a < sig.n_args; a++) kiln_cl_buffer_free(&bufs[a]);
done:
  kiln_cl_buffer_free(&bx);
  kiln_cl_buffer_free(&by);
  kiln_cl_kernel_free(&kf);
  kiln_cl_kernel_free(&kc);
  kiln_cl_kernel_free(&kh);
  kiln_cl_kernel_free(&k16);
  kiln_cl_program_free(p);
  for (int a = 0; a < KILN_CL_SIG_MAX_ARGS; a++) kiln_tensor_release(&out[a]);
  for (int v = 0; g && v < g->n_values; v++) kiln_tensor_release(&vals[v]);
  free(vals);
  kiln_tensor_release(&x);
  kiln_tensor_release(&ref);
  kiln_free(src);
  fz_free(&f);
  kiln_graph_free(g);
}

/* ------------------------------------------------------------------ */
/* kiln's OpenCL math against double                                  */

/* Distance in representable floats (the sign folded into one order). */
static double ulp_dist(float a, float b) {
  int32_t ia, ib;
  memcpy(&ia, &a, 4);
  memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return fabs((double)ia - (double)ib);
}

static double math_ref(int fn, double x) {
  switch (fn) {
  case 0: return exp(x);
  case 1: return tanh(x);
  case 2: return 1 / (1 + exp(-x));
  default: return erf(x);
  }
}

/* exp, tanh, sigmoid, erf of the generated code (scalar, float4, float16)
 * and of the OpenCL built-ins on a dense sample (2^20 bit patterns: every
 * 4096th, the low 12 bits varied) plus the special values: the error
 * against the correctly rounded double result within the conformance
 * tolerance of each op (opencl/codegen.c's table: exp 4 ulp, tanh and
 * sigmoid 8, erf 16), and NaN / ±inf / ±0 / saturation / overflow and
 * underflow results the same as the built-ins'. */
static void test_cl_math(kiln_cl_context *c) {
  static const char *const fname[] = {"exp", "tanh", "sigmoid", "erf"};
  static const double bound[] = {4, 8, 8, 16};
  static const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN, -FLT_MIN,
                                  1e-45f, -1e-45f, 88.72f, 88.73f, 89.5f, -87.3f, -103.9f, -104.5f, 0.625f, -0.625f,
                                  0.927734375f, 4.0f, -4.5f, 9.0f, -10.5f, 20.0f, -20.0f};
  const int nsp = (int)(sizeof special / sizeof *special), N = (1 << 20) + 32; /* KILN_N: a multiple of 16 */
  /* the launch may round the global size up: each kernel checks its bound */
  const char *kern = "__kernel void m1(__global const float *x, __global float *y) {\n"
                     "  const size_t i = get_global_id(0), n = KILN_N;\n"
                     "  if (i >= n) return;\n"
                     "  y[i] = kiln_exp_float(x[i]); y[n + i] = kiln_tanh_float(x[i]);\n"
                     "  y[2 * n + i] = kiln_sigmoid_float(x[i]); y[3 * n + i] = kiln_erf_float(x[i]);\n"
                     "}\n"
                     "#define MW(W) __kernel void m##W(__global const float *x, __global float *y) { \\\n"
                     "  const size_t i = get_global_id(0) * W, n = KILN_N; \\\n"
                     "  if (i >= n) return; \\\n"
                     "  const float##W v = vload##W(0, x + i); \\\n"
                     "  vstore##W(kiln_exp_float##W(v), 0, y + i); vstore##W(kiln_tanh_float##W(v), 0, y + n + i); \\\n"
                     "  vstore##W(kiln_sigmoid_float##W(v), 0, y + 2 * n + i); \\\n"
                     "  vstore##W(kiln_erf_float##W(v), 0, y + 3 * n + i); }\n"
                     "MW(4)\nMW(16)\n"
                     "__kernel void mb(__global const float *x, __global float *y) {\n"
                     "  const size_t i = get_global_id(0), n = KILN_N;\n"
                     "  if (i >= n) return;\n"
                     "  const float e = exp(-fabs(x[i]));\n"
                     "  y[i] = exp(x[i]); y[n + i] = tanh(x[i]);\n"
                     "  y[2 * n + i] = (x[i] >= 0 ? 1.0f : e) / (1.0f + e); y[3 * n + i] = erf(x[i]);\n"
                     "}\n";
  const char *parts[] = {kiln_cl_codegen_prelude(), kiln_cl_codegen_vec_prelude(4), kiln_cl_codegen_vec_prelude(16),
                         kern};
  char def[32];
  snprintf(def, sizeof def, "#define KILN_N %d\n", N);
  size_t len = strlen(def) + 1;
  for (int k = 0; k < 4; k++) len += strlen(parts[k]);
  char *src = kiln_malloc(len);
  float *x = kiln_malloc(sizeof *x * (size_t)N), *y = kiln_malloc(sizeof *y * 4 * (size_t)N),
        *yb = kiln_malloc(sizeof *yb * 4 * (size_t)N);
  cl_program p = NULL;
  kiln_cl_buffer bx = {0}, by = {0};
  if (!src || !x || !y || !yb) {
    CHECK(0, "cl math: out of memory");
    goto done;
  }
  strcpy(src, def);
  for (int k = 0; k < 4; k++) strcat(src, parts[k]);
  for (int i = 0; i < N; i++) {
    uint32_t k = (uint32_t)i, b = (k << 12) | ((k * 2654435761u) >> 20);
    float v;
    memcpy(&v, &b, 4);
    x[i] = i < nsp ? special[i] : i >= 1 << 20 ? special[(i - (1 << 20)) % nsp] : v;
  }
  if (kiln_cl_program_build(c, src, "-cl-std=CL1.2", &p) || kiln_cl_buffer_create(c, sizeof *x * (size_t)N, &bx) ||
      kiln_cl_buffer_create(c, sizeof *y * 4 * (size_t)N, &by) ||
      kiln_cl_buffer_write(c, &bx, 0, x, sizeof *x * (size_t)N)) {
    CHECK(0, "cl math: %s", kiln_last_error());
    goto done;
  }
  static const char *const kname[] = {"mb", "m1", "m4", "m16"};
  static const int kw[] = {1, 1, 4, 16};
  for (int v = 0; v < 4; v++) {
    kiln_cl_kernel k = {0};
    kiln_status s = kiln_cl_kernel_create(c, p, kname[v], &k);
    if (!s) s = kiln_cl_kernel_arg_buffer(&k, 0, &bx);
    if (!s) s = kiln_cl_kernel_arg_buffer(&k, 1, &by);
    if (!s) s = kiln_cl_launch_1d(c, &k, (size_t)N / (size_t)kw[v], 0, NULL);
    if (!s) s = kiln_cl_finish(c);
    if (!s) s = kiln_cl_buffer_read(c, &by, 0, v ? y : yb, sizeof *y * 4 * (size_t)N);
    kiln_cl_kernel_free(&k);
    if (s) {
      CHECK(0, "cl math %s: %s", kname[v], kiln_last_error());
      continue;
    }
    for (int fn = 0; fn < 4; fn++) {
      const float *r = (v ? y : yb) + (size_t)fn * (size_t)N;
      double worst = 0, worst_x = 0, worst_rel = 0;
      int bad_special = 0;
      for (int i = 0; i < N; i++) {
        double ref = math_ref(fn, (double)x[i]);
        if (isnan(x[i])) {
          bad_special += !isnan(r[i]);
          continue;
        }
        float rf = (float)ref, b = yb[(size_t)fn * (size_t)N + i];
        /* where the built-in gives the correctly rounded 0, ±1 or ±inf, the same, sign included
           (llvmpipe's exp gives 0 for e^x = 2^-149 near x = -103.9: kiln's gives 2^-149) */
        if (v && (b == 0 || b == 1 || b == -1 || isinf(b)) && (r[i] != b || signbit(r[i]) != signbit(b)) && b == rf)
          bad_special++, verbose && printf("    %s %s(%a) = %a, built-in %a\n", kname[v], fname[fn], x[i], r[i], b);
        if (fabs(ref) < FLT_MIN) continue; /* denormal results: the device may flush them */
        double d = ulp_dist(r[i], rf);
        if (d > worst) worst = d, worst_x = x[i];
        double rel = isinf(rf) ? 0 : fabs(r[i] - ref) / fabs(ref);
        if (rel > worst_rel) worst_rel = rel;
      }
      printf("  %-7s %-3s max %.0f ulp (x = %a), max rel %.2g\n", fname[fn], v ? kname[v] : "builtin", worst, worst_x,
             worst_rel);
      if (v) {
        CHECK(worst <= bound[fn], "cl math %s %s: %.0f ulp at %a > %.0f", fname[fn], kname[v], worst, worst_x,
              bound[fn]);
        CHECK(bad_special == 0, "cl math %s %s: %d special results differ from the built-in's", fname[fn], kname[v],
              bad_special);
      }
    }
  }
done:
  kiln_cl_buffer_free(&bx);
  kiln_cl_buffer_free(&by);
  kiln_cl_program_free(p);
  kiln_free(src);
  kiln_free(x);
  kiln_free(y);
  kiln_free(yb);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char *root = KILN_NODE_TEST_DIR;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "--chain-rows") && i + 1 < argc) chain_rows = atoll(argv[++i]);
    else if (!strcmp(argv[i], "--chain-only")) chain_only = 1;
    else root = argv[i];
  }
  double t0 = now_ms();
  kiln_cl_device_list l;
  if (kiln_cl_devices_enumerate(&l)) {
    printf("opencl_codegen: enumerate failed: %s\nopencl_codegen: 0 passed, 1 failed\n", kiln_last_error());
    return 1;
  }
  const char *icd = getenv("OCL_ICD_VENDORS");
  if (!l.n) {
    printf("opencl_codegen: SKIP: no usable OpenCL device under OCL_ICD_VENDORS=%s (%s)\n", icd ? icd : "(unset)",
           *l.notes ? l.notes : "no reason given");
    kiln_cl_devices_free(&l);
    return 77;
  }
  const kiln_cl_device *dev = &l.devices[0];
  char desc[512];
  kiln_cl_device_describe(dev, desc, sizeof desc);
  printf("device %s, fp64 %d\n", desc, dev->has_fp64);
  kiln_cl_context *c = NULL;
  if (kiln_cl_context_create(dev, &c)) {
    printf("opencl_codegen: context: %s\nopencl_codegen: 0 passed, 1 failed\n", kiln_last_error());
    kiln_cl_devices_free(&l);
    return 1;
  }
  if (!chain_only) {
    printf("math:\n");
    test_cl_math(c);
    printf("refusals:\n");
    test_refusals(dev);
    printf("literal weights:\n");
    test_literal_weights(c, dev);
    printf("rows per item:\n");
    test_rows_per_item(c, dev);
    printf("blocks per item:\n");
    test_blocks_per_item(c, dev);
    printf("streamed stores:\n");
    test_streamed_stores(c, dev);
    test_stream_rows_defaults(dev);
    printf("node tests:\n");
    test_node_suite(c, dev, root);
  }
  printf("bench chain:\n");
  test_bench_chain(c, dev);
  kiln_cl_context_free(c);
  kiln_cl_devices_free(&l);
  printf("total %.0f ms\n", now_ms() - t0);
  printf("opencl_codegen: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
