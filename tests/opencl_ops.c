/* tests/opencl_ops: the device implementations of single nodes
 * (opencl/ops*.c) on whatever ICD the environment selects (ctest runs it
 * under PoCL and under rusticl). Each case is a one-node graph; the
 * reference backend gives the expected outputs; every case's op is
 * prepared into one program (as the engine does for a graph), built once,
 * then bound and run on device buffers placed at offsets inside one arena
 * (outputs pre-filled with NaN bytes, so an element left unwritten fails).
 * Float outputs match within atol + rtol * max(|expected|, magnitude),
 * where the magnitude of linear ops (sums, products, convolutions) is the
 * reference run on |inputs| — the sum of magnitudes a reassociated float
 * sum is bounded by. Integer outputs match exactly.
 *   opencl_ops [-v] [-k SUBSTRING] [--bench | --bench=gemm]  (--bench: kiln SGEMM vs CLBlast, conv direct vs gemm)
 * exits 77 (skip) when no device. KILN_OPS_DUMP=file writes the program. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/alloc.h"
#include "opencl/device.h"
#include "opencl/ops.h"
#include "opencl/runtime.h"
#include "reference/exec.h"
#include "tests/graphbuild.h"
#include "tests/testutil.h"

static int passed, failed, declined, verbose;
static bool bench_gemm_only;
static const char *only; /* -k SUBSTRING: only the cases whose name contains it */
#include "tests/check.h"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

#define SH(...) \
  (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }
#define INTS(...) (int64_t[]){__VA_ARGS__}, sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)

/* ------------------------------------------------------------------ */
/* cases                                                               */

#define MAXIO 8
typedef struct tcase {
  char name[160];
  kiln_graph *g;
  int node;
  kiln_tensor in[MAXIO]; /* data of graph inputs (node input order); empty for constants / absent */
  kiln_tensor exp[MAXIO], mag[MAXIO];
  int n_out;           /* graph outputs = node outputs present, in order */
  int out_slot[MAXIO]; /* node output k -> graph output index, -1 when absent */
  double rtol;
  bool use_mag, expect_dev;
  kiln_cl_op *op;
  char prefix[16];
  char env[96]; /* "NAME=VALUE ..." set while the case is prepared (KILN_CL_CONV, KILN_CL_GEMM, ...) */
} tcase;

static tcase *cases;
static int n_cases, cap_cases;

/* the case being built */
static tcase *cur;
static int cur_in[MAXIO], cur_nin;
static char case_env[96]; /* copied into each new case */

static void t_begin(int opset, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void t_begin(int opset, const char *fmt, ...) {
  if (n_cases == cap_cases) {
    cap_cases = cap_cases ? 2 * cap_cases : 64;
    cases = realloc(cases, (size_t)cap_cases * sizeof *cases);
    if (!cases) exit(2);
  }
  cur = &cases[n_cases++];
  memset(cur, 0, sizeof *cur);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cur->name, sizeof cur->name, fmt, ap);
  va_end(ap);
  if (case_env[0]) { /* the forced implementation is part of the name */
    size_t l = strlen(cur->name);
    snprintf(cur->name + l, sizeof cur->name - l, " [%s]", case_env);
  }
  cur->g = new_graph(opset);
  cur->rtol = 1e-4;
  cur->expect_dev = true;
  snprintf(cur->env, sizeof cur->env, "%s", case_env);
  cur_nin = 0;
}

/* A graph input with random data in [lo, hi) (floats) or given data. */
static void t_in_data(kiln_dtype dt, int rank, const int64_t *dims, const kiln_tensor *data) {
  char name[16];
  snprintf(name, sizeof name, "i%d", cur_nin);
  int v = input(cur->g, name, dt, rank, dims);
  kiln_tensor *t = &cur->in[cur_nin];
  if (data) {
    if (kiln_tensor_copy(t, data)) exit(2);
  } else {
    if (kiln_tensor_alloc(t, dt, rank, dims)) exit(2);
    for (int64_t i = 0; i < t->numel; i++) {
      if (dt == KILN_BOOL)
        kiln_set_i(t, i, rnd() > 0);
      else
        kiln_set_f(t, i, rnd());
    }
  }
  cur_in[cur_nin++] = v;
}
static void t_in(int rank, const int64_t *dims) { t_in_data(KILN_F32, rank, dims, NULL); }

/* A constant input. */
static void t_const_i64(const int64_t *v, size_t n, bool scalar) {
  kiln_tensor t = {0};
  int64_t d = (int64_t)n;
  if (kiln_tensor_alloc(&t, KILN_I64, scalar ? 0 : 1, &d)) exit(2);
  for (size_t i = 0; i < n; i++) ((int64_t *)t.data)[i] = v[i];
  int id;
  if (kiln_edit_add_const(cur->g, "k", &t, &id)) exit(2);
  cur_in[cur_nin++] = id;
}
static void t_const_f32(int rank, const int64_t *dims) {
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, KILN_F32, rank, dims)) exit(2);
  for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, rnd());
  int id;
  if (kiln_edit_add_const(cur->g, "kf", &t, &id)) exit(2);
  cur_in[cur_nin++] = id;
}
static void t_absent(void) { cur_in[cur_nin++] = -1; }

/* The node, with n_out outputs of which those with bit k of mask set are
 * graph outputs (the others omitted). */
static kiln_node *t_node(const char *op, int n_out, unsigned mask) {
  int outs[MAXIO];
  int nout = 0;
  for (int k = 0; k < n_out; k++) {
    cur->out_slot[k] = -1;
    if (!(mask & (1u << k))) {
      outs[k] = -1;
      continue;
    }
    char name[16];
    snprintf(name, sizeof name, "o%d", k);
    if (kiln_edit_add_value(cur->g, name, &outs[k])) exit(2);
    cur->out_slot[k] = nout++;
  }
  cur->n_out = n_out;
  int idx;
  if (kiln_edit_insert_node(cur->g, cur->g->n_nodes, "node", op, "", cur_nin, cur_in, n_out, outs, &idx)) {
    printf("test bug: %s\n", kiln_last_error());
    exit(2);
  }
  for (int k = 0; k < n_out; k++)
    if (outs[k] >= 0 && kiln_edit_add_output(cur->g, outs[k])) exit(2);
  cur->node = idx;
  return &cur->g->nodes[idx];
}
static kiln_node *t_node1(const char *op) { return t_node(op, 1, 1); }

/* One-output node op of kiln's domain (the graph imports it). */
static kiln_node *t_node_kiln(const char *op) {
  kiln_graph *g = cur->g;
  g->opsets = realloc(g->opsets, (size_t)(g->n_opsets + 1) * sizeof *g->opsets);
  if (!g->opsets || !(g->opsets[g->n_opsets].domain = kiln_strdup(KILN_DOMAIN))) exit(2);
  g->opsets[g->n_opsets++].version = 1;
  kiln_node *n = t_node(op, 1, 1);
  kiln_free(n->domain);
  if (!(n->domain = kiln_strdup(KILN_DOMAIN))) exit(2);
  n->opset = 1;
  return n;
}

static void a_int(kiln_node *n, const char *name, int64_t v) {
  if (kiln_edit_set_int(n, name, v)) exit(2);
}
static void a_float(kiln_node *n, const char *name, float v) {
  if (kiln_edit_set_float(n, name, v)) exit(2);
}
static void a_ints(kiln_node *n, const char *name, const int64_t *v, size_t c) {
  if (kiln_edit_set_ints(n, name, v, c)) exit(2);
}
static void a_str(kiln_node *n, const char *name, const char *v) {
  if (kiln_edit_set_string(n, name, v)) exit(2);
}

/* Runs the reference on the inputs (abs: on |inputs|) into outs. */
static kiln_status ref_run(tcase *c, bool abs_in, kiln_tensor *outs) {
  const kiln_tensor **bound = calloc((size_t)c->g->n_values + 1, sizeof *bound);
  kiln_tensor tmp[MAXIO];
  memset(tmp, 0, sizeof tmp);
  kiln_status s = KILN_OK;
  const kiln_node *n = &c->g->nodes[c->node];
  for (int k = 0; k < n->n_in && !s; k++) {
    if (n->in[k] < 0 || !c->in[k].data) continue;
    if (abs_in && kiln_dtype_is_float(c->in[k].dtype)) {
      s = kiln_tensor_copy(&tmp[k], &c->in[k]);
      for (int64_t i = 0; !s && i < tmp[k].numel; i++) kiln_set_f(&tmp[k], i, fabs(kiln_get_f(&tmp[k], i)));
      bound[n->in[k]] = &tmp[k];
    } else {
      bound[n->in[k]] = &c->in[k];
    }
  }
  /* constants on |.| too */
  kiln_graph *g = c->g;
  kiln_tensor saved[MAXIO];
  memset(saved, 0, sizeof saved); /* kiln_tensor_copy fills a reservation a garbage tensor would claim */
  int nsaved = 0, saved_v[MAXIO];
  if (abs_in)
    for (int k = 0; k < n->n_in; k++) {
      int v = n->in[k];
      if (v < 0 || !g->values[v].init || g->values[v].init->dtype != KILN_F32) continue;
      saved_v[nsaved] = v;
      kiln_tensor_copy(&saved[nsaved], g->values[v].init);
      kiln_tensor *t = g->values[v].init;
      for (int64_t i = 0; i < t->numel; i++) kiln_set_f(t, i, fabs(kiln_get_f(t, i)));
      nsaved++;
    }
  if (!s) s = kiln_ref_run(g, bound, outs);
  for (int i = 0; i < nsaved; i++) {
    kiln_tensor *t = g->values[saved_v[i]].init;
    memcpy(t->data, saved[i].data, kiln_tensor_bytes(t));
    kiln_tensor_release(&saved[i]);
  }
  for (int k = 0; k < MAXIO; k++) kiln_tensor_release(&tmp[k]);
  free(bound);
  return s;
}

/* Finishes the case: expected outputs, magnitudes. */
static void t_end(double rtol, bool use_mag) {
  cur->rtol = rtol;
  cur->use_mag = use_mag;
  if (ref_run(cur, false, cur->exp)) {
    printf("test bug in '%s': the reference fails: %s\n", cur->name, kiln_last_error());
    exit(2);
  }
  if (use_mag && ref_run(cur, true, cur->mag)) {
    printf("test bug in '%s': the |reference| fails: %s\n", cur->name, kiln_last_error());
    exit(2);
  }
}

static void case_free(tcase *c) {
  kiln_cl_op_free(c->op);
  for (int k = 0; k < MAXIO; k++) {
    kiln_tensor_release(&c->in[k]);
    kiln_tensor_release(&c->exp[k]);
    kiln_tensor_release(&c->mag[k]);
  }
  kiln_graph_free(c->g);
}

/* ------------------------------------------------------------------ */
/* preparing, running, comparing                                        */

static void ttype_of(const kiln_tensor *t, kiln_cl_ttype *tt) {
  memset(tt, 0, sizeof *tt);
  if (!t) return;
  tt->dtype = t->dtype;
  tt->rank = t->rank;
  memcpy(tt->dims, t->dims, sizeof tt->dims);
}

static kiln_status prepare(tcase *c, const kiln_cl_device *dev, kiln_cl_src *src) {
  const kiln_node *n = &c->g->nodes[c->node];
  kiln_cl_ttype in[MAXIO], out[MAXIO];
  const kiln_tensor *konst[MAXIO] = {0};
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    const kiln_tensor *t = v < 0 ? NULL : c->g->values[v].init ? c->g->values[v].init : &c->in[k];
    ttype_of(t, &in[k]);
    if (v >= 0) konst[k] = c->g->values[v].init;
  }
  for (int k = 0; k < n->n_out; k++) ttype_of(c->out_slot[k] >= 0 ? &c->exp[c->out_slot[k]] : NULL, &out[k]);
  char env[sizeof c->env], *save = NULL;
  snprintf(env, sizeof env, "%s", c->env);
  for (char *kv = strtok_r(env, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(kv, '=');
    if (eq) *eq = 0, setenv(kv, eq + 1, 1);
  }
  kiln_status s = kiln_cl_op_prepare(dev, c->g, n, in, out, konst, c->prefix, src, &c->op);
  snprintf(env, sizeof env, "%s", c->env);
  for (char *kv = strtok_r(env, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
    char *eq = strchr(kv, '=');
    if (eq) *eq = 0, unsetenv(kv);
  }
  return s;
}

static size_t align_up(size_t v) { return (v + 255) / 256 * 256; }

/* Runs c's bound op on one arena; got[k] receive the outputs. */
static kiln_status run_case(tcase *c, kiln_cl_context *ctx, kiln_tensor *got, double *ms) {
  const kiln_node *n = &c->g->nodes[c->node];
  kiln_cl_arg in[MAXIO], out[MAXIO];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  size_t off = 256, inoff[MAXIO], outoff[MAXIO];
  const kiln_tensor *src[MAXIO] = {0};
  for (int k = 0; k < n->n_in; k++) {
    int v = n->in[k];
    src[k] = v < 0 ? NULL : c->g->values[v].init ? c->g->values[v].init : &c->in[k];
    inoff[k] = off;
    if (src[k]) off = align_up(off + kiln_tensor_bytes(src[k]));
  }
  for (int k = 0; k < n->n_out; k++) {
    outoff[k] = off;
    if (c->out_slot[k] >= 0) off = align_up(off + kiln_tensor_bytes(&c->exp[c->out_slot[k]]));
  }
  kiln_cl_buffer arena = {0};
  kiln_status s = kiln_cl_buffer_create(ctx, off, &arena);
  unsigned char *fill = s ? NULL : malloc(off);
  if (!s && !fill) s = KILN_E_NOMEM;
  if (!s) {
    memset(fill, 0xff, off); /* NaN floats, -1 integers */
    s = kiln_cl_buffer_write(ctx, &arena, 0, fill, off);
  }
  for (int k = 0; k < n->n_in && !s; k++) {
    if (!src[k]) continue;
    in[k].mem = arena.mem;
    in[k].offset = inoff[k];
    s = kiln_cl_buffer_write(ctx, &arena, inoff[k], src[k]->data, kiln_tensor_bytes(src[k]));
  }
  for (int k = 0; k < n->n_out; k++) {
    if (c->out_slot[k] < 0) continue;
    out[k].mem = arena.mem;
    out[k].offset = outoff[k];
  }
  double t0 = now_ms();
  if (!s) s = kiln_cl_op_enqueue(c->op, ctx, in, out);
  if (!s) s = kiln_cl_finish(ctx);
  kiln_status chk = kiln_cl_op_checked(c->op, ctx); /* (cleared either way) */
  if (!s) s = chk;
  if (ms) *ms = now_ms() - t0;
  for (int k = 0; k < n->n_out && !s; k++) {
    if (c->out_slot[k] < 0) continue;
    const kiln_tensor *e = &c->exp[c->out_slot[k]];
    kiln_tensor *gt = &got[c->out_slot[k]];
    s = kiln_tensor_alloc(gt, e->dtype, e->rank, e->dims);
    if (!s) s = kiln_cl_buffer_read(ctx, &arena, outoff[k], gt->data, kiln_tensor_bytes(gt));
  }
  free(fill);
  kiln_cl_buffer_free(&arena);
  return s;
}

/* |g - e| <= atol + rtol * max(|e|, mag) elementwise (NaN matches NaN,
 * infinities of the same sign match); integers exactly. */
static bool compare(const tcase *c, int slot, const kiln_tensor *got, char *msg, size_t len) {
  const kiln_tensor *e = &c->exp[slot], *m = c->use_mag ? &c->mag[slot] : NULL;
  if (!kiln_dtype_is_float(e->dtype)) return tu_compare(got, e, 0, 0, msg, len, NULL, NULL);
  const double atol = 1e-5;
  for (int64_t i = 0; i < e->numel; i++) {
    double g = kiln_get_f(got, i), x = kiln_get_f(e, i);
    if (isnan(x) || isnan(g)) {
      if (isnan(x) != isnan(g)) {
        snprintf(msg, len, "element %lld: got %.9g, expected %.9g", (long long)i, g, x);
        return false;
      }
      continue;
    }
    if (isinf(x) || isinf(g)) {
      if (g != x) {
        snprintf(msg, len, "element %lld: got %.9g, expected %.9g", (long long)i, g, x);
        return false;
      }
      continue;
    }
    double scale = fabs(x);
    if (m && fabs(kiln_get_f(m, i)) > scale) scale = fabs(kiln_get_f(m, i));
    if (fabs(g - x) > atol + c->rtol * scale) {
      snprintf(msg, len, "element %lld of %lld: got %.9g, expected %.9g (scale %.3g)", (long long)i,
               (long long)e->numel, g, x, scale);
      return false;
    }
  }
  return true;
}

static void check_case(tcase *c, kiln_cl_context *ctx) {
  kiln_tensor got[MAXIO];
  memset(got, 0, sizeof got);
  kiln_status s = run_case(c, ctx, got, NULL);
  if (s) {
    CHECK(0, "%s [%s]: run: %s", c->name, kiln_cl_op_describe(c->op), kiln_last_error());
  } else {
    bool ok = true;
    char msg[300] = "";
    for (int k = 0; k < c->n_out && ok; k++) {
      int slot = c->out_slot[k];
      if (slot < 0) continue;
      if (!compare(c, slot, &got[slot], msg, sizeof msg)) {
        ok = false;
        char m2[340];
        snprintf(m2, sizeof m2, "output %d: %s", k, msg);
        memcpy(msg, m2, sizeof msg - 1);
        msg[sizeof msg - 1] = 0;
      }
    }
    CHECK(ok, "%s [%s]: %s", c->name, kiln_cl_op_describe(c->op), msg);
    if (ok && verbose) printf("ok   %s [%s]\n", c->name, kiln_cl_op_describe(c->op));
  }
  for (int k = 0; k < MAXIO; k++) kiln_tensor_release(&got[k]);
}

/* ------------------------------------------------------------------ */
/* the case list                                                        */

/* kiln's SGEMM kernel (opencl/ops_sgemm.c) where its tiles are ragged:
 * M, N or K of 1, sizes not multiples of the row tile (8 or 4), of the
 * vector width (16, 8 or 1) or of the dot tile, every transpose, batch
 * broadcast. Run with each implementation forced. */
static void cases_gemm_tiles(void) {
  static const int64_t mk[][2][2] = {
      {{1, 1}, {1, 33}},   {{17, 5}, {5, 1}},   {{37, 70}, {70, 19}}, {{9, 3}, {3, 40}},
      {{70, 130}, {130, 50}}, {{8, 16}, {16, 32}}, {{1, 300}, {300, 17}},
  };
  for (size_t i = 0; i < sizeof mk / sizeof *mk; i++) {
    t_begin(13, "MatMul tiles [%lld,%lld]x[%lld,%lld]", (long long)mk[i][0][0], (long long)mk[i][0][1],
            (long long)mk[i][1][0], (long long)mk[i][1][1]);
    t_in(2, mk[i][0]);
    t_in(2, mk[i][1]);
    t_node1("MatMul");
    t_end(1e-4, true);
  }
  static const int64_t mnk[][3] = {{19, 35, 21}, {1, 6, 37}, {33, 1, 16}, {16, 17, 5}};
  for (size_t i = 0; i < sizeof mnk / sizeof *mnk; i++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int64_t M = mnk[i][0], N = mnk[i][1], K = mnk[i][2];
        t_begin(13, "Gemm tiles %lldx%lldx%lld transA=%d transB=%d +C[N]", (long long)M, (long long)N, (long long)K, ta,
                tb);
        t_in(2, ta ? (int64_t[]){K, M} : (int64_t[]){M, K});
        t_in(2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N});
        t_in(1, (int64_t[]){N});
        kiln_node *n = t_node1("Gemm");
        if (ta) a_int(n, "transA", 1);
        if (tb) a_int(n, "transB", 1);
        a_float(n, "alpha", 0.5f);
        t_end(1e-4, true);
      }
  t_begin(13, "MatMul tiles broadcast [2,1,9,7]x[1,3,7,18]");
  t_in(SH(2, 1, 9, 7));
  t_in(SH(1, 3, 7, 18));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul tiles batched [3,17,5]x[3,5,20]");
  t_in(SH(3, 17, 5));
  t_in(SH(3, 5, 20));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul tiles A shared [1,11]x[4,11,3]");
  t_in(SH(1, 11));
  t_in(SH(4, 11, 3));
  t_node1("MatMul");
  t_end(1e-4, true);
}

static void cases_gemm_one(void);
static void cases_gemm(void) {
  static const char *const impl[] = {"kiln", "clblast"};
  for (int i = 0; i < 2; i++) {
    snprintf(case_env, sizeof case_env, "KILN_CL_GEMM=%s", impl[i]);
    cases_gemm_one();
    cases_gemm_tiles();
  }
  case_env[0] = 0;
}

static void cases_gemm_one(void) {
  /* MatMul: 2-D, 1-D operands, batch broadcast */
  static const struct {
    int64_t a[2], b[2];
  } mm[] = {
      {{1, 1}, {1, 1}},     /* 1 element */
      {{3, 5}, {5, 7}},     /* odd */
      {{64, 33}, {33, 17}}, /* awkward */
      {{1, 129}, {129, 1}}, /* vector product as matrices */
  };
  for (size_t i = 0; i < sizeof mm / sizeof *mm; i++) {
    t_begin(13, "MatMul [%lld,%lld]x[%lld,%lld]", (long long)mm[i].a[0], (long long)mm[i].a[1], (long long)mm[i].b[0],
            (long long)mm[i].b[1]);
    t_in(2, mm[i].a);
    t_in(2, mm[i].b);
    t_node1("MatMul");
    t_end(1e-4, true);
  }
  t_begin(13, "MatMul 1-D x 2-D");
  t_in(SH(6));
  t_in(SH(6, 5));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul 2-D x 1-D");
  t_in(SH(4, 6));
  t_in(SH(6));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul 1-D x 1-D");
  t_in(SH(37));
  t_in(SH(37));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul batched [3,4,5]x[3,5,6]");
  t_in(SH(3, 4, 5));
  t_in(SH(3, 5, 6));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul B shared [2,3,4,5]x[5,7]");
  t_in(SH(2, 3, 4, 5));
  t_in(SH(5, 7));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul A shared [4,5]x[3,5,2]");
  t_in(SH(4, 5));
  t_in(SH(3, 5, 2));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul broadcast [2,1,3,4]x[1,5,4,2]");
  t_in(SH(2, 1, 3, 4));
  t_in(SH(1, 5, 4, 2));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul batched 1-D B [2,3,4]x[4]");
  t_in(SH(2, 3, 4));
  t_in(SH(4));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(13, "MatMul 1-D A [4]x[2,4,3]");
  t_in(SH(4));
  t_in(SH(2, 4, 3));
  t_node1("MatMul");
  t_end(1e-4, true);
  t_begin(9, "MatMul opset 9 [5,300]x[300,9]");
  t_in(SH(5, 300));
  t_in(SH(300, 9));
  t_node1("MatMul");
  t_end(1e-4, true);

  /* Gemm: every transA/transB, alpha, beta, C shapes, no C */
  static const int64_t cshapes[][3] = {{0}, {1, 1}, {1, 7}, {2, 5, 7}, {2, 1, 7}, {2, 5, 1}};
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++)
      for (size_t ci = 0; ci < sizeof cshapes / sizeof *cshapes; ci++) {
        if ((ta || tb) && ci > 1 && ci != 3) continue;
        int64_t M = 5, K = 3, N = 7;
        t_begin(13, "Gemm transA=%d transB=%d C%s", ta, tb,
                ci == 0   ? " absent"
                : ci == 1 ? "=[1]"
                : ci == 2 ? "=[7]"
                : ci == 3 ? "=[5,7]"
                : ci == 4 ? "=[1,7]"
                          : "=[5,1]");
        t_in(2, ta ? (int64_t[]){K, M} : (int64_t[]){M, K});
        t_in(2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N});
        if (ci) t_in((int)cshapes[ci][0], &cshapes[ci][1]);
        kiln_node *n = t_node1("Gemm");
        if (ta) a_int(n, "transA", 1);
        if (tb) a_int(n, "transB", 1);
        if (ci == 3 || ci == 1) a_float(n, "alpha", 0.5f);
        if (ci == 3 || ci == 2) a_float(n, "beta", -2.0f);
        t_end(1e-4, true);
      }
  t_begin(11, "Gemm opset 11, C constant, beta 0");
  t_in(SH(8, 16));
  t_in(SH(16, 4));
  t_const_f32(SH(4));
  a_float(t_node1("Gemm"), "beta", 0.0f);
  t_end(1e-4, true);
  t_begin(13, "Gemm opset 13 without C (absent input slot)");
  t_in(SH(3, 4));
  t_in(SH(4, 2));
  t_absent();
  t_node1("Gemm");
  t_end(1e-4, true);
  t_begin(7, "Gemm opset 7 [1,512]x[1000,512]^T + C");
  t_in(SH(1, 512));
  t_in(SH(1000, 512));
  t_in(SH(1000));
  a_int(t_node1("Gemm"), "transB", 1);
  t_end(1e-4, true);
  t_begin(13, "MatMul int32 declined");
  t_in_data(KILN_I32, SH(2, 2), NULL);
  t_in_data(KILN_I32, SH(2, 2), NULL);
  t_node1("MatMul");
  cur->expect_dev = false;
  t_end(0, false);
}

static void conv_case(const char *what, int opset, int rank, const int64_t *x, const int64_t *w, bool bias,
                      int64_t group, const int64_t *strides, const int64_t *dil, const int64_t *pads,
                      const char *auto_pad) {
  t_begin(opset, "Conv %s", what);
  t_in(rank, x);
  t_const_f32(rank, w);
  if (bias) t_const_f32(1, w);
  kiln_node *n = t_node1("Conv");
  int nsp = rank - 2;
  if (group != 1) a_int(n, "group", group);
  if (strides) a_ints(n, "strides", strides, (size_t)nsp);
  if (dil) a_ints(n, "dilations", dil, (size_t)nsp);
  if (pads) a_ints(n, "pads", pads, 2 * (size_t)nsp);
  if (auto_pad) a_str(n, "auto_pad", auto_pad);
  int64_t ks[6];
  for (int i = 0; i < nsp; i++) ks[i] = w[2 + i];
  if (rank == 4) a_ints(n, "kernel_shape", ks, (size_t)nsp); /* given on 2-D, inferred elsewhere */
  t_end(1e-4, true);
}

static void cases_conv(void) {
  /* both strategies for each shape; GEMM through kiln's SGEMM three ways:
     its own choice, implicit GEMM forced (X read through the window), and
     im2col + SGEMM (KILN_CL_CONV_IMPLICIT=0); then CLBlast; direct: the
     device's choice, then the one-output kernel (KILN_CL_CONV_ROWS=0), the
     row kernel (=scalar: conv_row_src) and the vector row kernel (=vector:
     conv_vrow_src, where the shape allows it) */
  static const char *const modes[] = {"direct", "gemm", "gemm", "gemm", "gemm", "direct", "direct", "direct"};
  static const char *const gemms[] = {"kiln",
                                      "kiln",
                                      "clblast",
                                      "kiln KILN_CL_CONV_IMPLICIT=1",
                                      "kiln KILN_CL_CONV_IMPLICIT=0",
                                      "kiln KILN_CL_CONV_ROWS=0",
                                      "kiln KILN_CL_CONV_ROWS=scalar",
                                      "kiln KILN_CL_CONV_ROWS=vector"};
  for (int m = 0; m < 8; m++) { /* the last three: each direct 2-D form on every device */
    snprintf(case_env, sizeof case_env, "KILN_CL_CONV=%s KILN_CL_GEMM=%s", modes[m], gemms[m]);
    char w[96];
    snprintf(w, sizeof w, "2-D 3x3 pad 1 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 3, 7, 9}, (int64_t[]){4, 3, 3, 3}, true, 1, NULL, NULL, (int64_t[]){1, 1, 1, 1},
              NULL);
    snprintf(w, sizeof w, "2-D batch 2, stride 2, asym pads (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){2, 5, 11, 8}, (int64_t[]){6, 5, 3, 2}, true, 1, (int64_t[]){2, 2}, NULL,
              (int64_t[]){1, 0, 2, 1}, NULL);
    snprintf(w, sizeof w, "2-D dilation 2, no bias (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 2, 9, 9}, (int64_t[]){3, 2, 3, 3}, false, 1, NULL, (int64_t[]){2, 2},
              (int64_t[]){2, 2, 2, 2}, NULL);
    snprintf(w, sizeof w, "2-D groups 2 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){2, 4, 6, 6}, (int64_t[]){6, 2, 3, 3}, true, 2, NULL, NULL, NULL, NULL);
    snprintf(w, sizeof w, "2-D depthwise (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 8, 10, 10}, (int64_t[]){8, 1, 3, 3}, true, 8, (int64_t[]){2, 2}, NULL,
              (int64_t[]){1, 1, 1, 1}, NULL);
    snprintf(w, sizeof w, "2-D 1x1 pointwise (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){2, 16, 5, 5}, (int64_t[]){24, 16, 1, 1}, true, 1, NULL, NULL, NULL, NULL);
    snprintf(w, sizeof w, "2-D 1x1 stride 2 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 16, 7, 7}, (int64_t[]){8, 16, 1, 1}, false, 1, (int64_t[]){2, 2}, NULL, NULL,
              NULL);
    snprintf(w, sizeof w, "2-D SAME_UPPER stride 2 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 3, 8, 7}, (int64_t[]){4, 3, 4, 3}, true, 1, (int64_t[]){2, 2}, NULL, NULL,
              "SAME_UPPER");
    snprintf(w, sizeof w, "2-D SAME_LOWER (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 3, 6, 5}, (int64_t[]){2, 3, 2, 4}, false, 1, NULL, NULL, NULL, "SAME_LOWER");
    snprintf(w, sizeof w, "2-D VALID (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 2, 6, 6}, (int64_t[]){3, 2, 3, 3}, true, 1, NULL, NULL, NULL, "VALID");
    snprintf(w, sizeof w, "1-D (%s)", modes[m]);
    conv_case(w, 11, 3, (int64_t[]){2, 3, 17}, (int64_t[]){5, 3, 4}, true, 1, (int64_t[]){3}, NULL, (int64_t[]){2, 1},
              NULL);
    snprintf(w, sizeof w, "3-D (%s)", modes[m]);
    conv_case(w, 11, 5, (int64_t[]){1, 2, 5, 4, 6}, (int64_t[]){3, 2, 2, 3, 2}, true, 1, (int64_t[]){1, 2, 1},
              (int64_t[]){2, 1, 1}, (int64_t[]){1, 0, 1, 0, 1, 1}, NULL);
    snprintf(w, sizeof w, "2-D 1x1 image, 1x1 kernel (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 1, 1, 1}, (int64_t[]){1, 1, 1, 1}, true, 1, NULL, NULL, NULL, NULL);
    snprintf(w, sizeof w, "resnet-like 32->32 3x3 on 14x14 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 32, 14, 14}, (int64_t[]){32, 32, 3, 3}, true, 1, NULL, NULL,
              (int64_t[]){1, 1, 1, 1}, NULL);
    /* awkward geometries with rows wider than a vector tile (the implicit
       GEMM's vector loads, masked lanes at both edges, a ragged last tile
       of a row, the lane-by-lane loads at X's first and last rows),
       channels that fill no tile */
    snprintf(w, sizeof w, "wide, pads 2,1,3,2, 13->19, batch 3 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){3, 13, 9, 37}, (int64_t[]){19, 13, 3, 3}, true, 1, NULL, NULL,
              (int64_t[]){2, 1, 3, 2}, NULL);
    snprintf(w, sizeof w, "wide 5x5 stride 2 pad 2 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 6, 12, 67}, (int64_t[]){17, 6, 5, 5}, true, 1, (int64_t[]){2, 2}, NULL,
              (int64_t[]){2, 2, 2, 2}, NULL);
    snprintf(w, sizeof w, "wide dilation 2 stride 2, batch 2 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){2, 4, 15, 50}, (int64_t[]){9, 4, 3, 3}, false, 1, (int64_t[]){2, 2},
              (int64_t[]){2, 2}, (int64_t[]){2, 2, 2, 2}, NULL);
    snprintf(w, sizeof w, "wide groups 3, batch 2 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){2, 12, 6, 40}, (int64_t[]){15, 4, 3, 3}, true, 3, NULL, NULL,
              (int64_t[]){1, 1, 1, 1}, NULL);
    snprintf(w, sizeof w, "one output row (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 8, 3, 40}, (int64_t[]){16, 8, 3, 3}, true, 1, NULL, NULL, NULL, NULL);
    snprintf(w, sizeof w, "one output column (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 8, 20, 3}, (int64_t[]){16, 8, 3, 3}, true, 1, NULL, NULL, NULL, NULL);
    snprintf(w, sizeof w, "stem-like 7x7 stride 2 pad 3, batch 3 (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){3, 3, 30, 70}, (int64_t[]){20, 3, 7, 7}, true, 1, (int64_t[]){2, 2}, NULL,
              (int64_t[]){3, 3, 3, 3}, NULL);
    snprintf(w, sizeof w, "row of 7, stride (2, 1) (%s)", modes[m]);
    conv_case(w, 11, 4, (int64_t[]){1, 10, 9, 7}, (int64_t[]){11, 10, 3, 3}, true, 1, (int64_t[]){2, 1}, NULL,
              (int64_t[]){1, 1, 1, 1}, NULL);
    snprintf(w, sizeof w, "1-D wide stride 2 dilation 2 (%s)", modes[m]);
    conv_case(w, 11, 3, (int64_t[]){2, 5, 80}, (int64_t[]){7, 5, 3}, true, 1, (int64_t[]){2}, (int64_t[]){2},
              (int64_t[]){3, 1}, NULL);
  }
  case_env[0] = 0;
  conv_case("default choice 24->48 3x3 on 12x12", 11, 4, (int64_t[]){1, 24, 12, 12}, (int64_t[]){48, 24, 3, 3}, true, 1,
            NULL, NULL, (int64_t[]){1, 1, 1, 1}, NULL);
  conv_case("default choice depthwise 32 on 12x12", 11, 4, (int64_t[]){1, 32, 12, 12}, (int64_t[]){32, 1, 3, 3}, true,
            32, NULL, NULL, (int64_t[]){1, 1, 1, 1}, NULL);
}

static void pool_case(const char *op, int opset, const char *what, int rank, const int64_t *x, const int64_t *k,
                      const int64_t *st, const int64_t *pads, const int64_t *dil, const char *ap, int ceil, int cip,
                      int idx, int so) {
  t_begin(opset, "%s %s", op, what);
  t_in(rank, x);
  kiln_node *n = t_node(op, idx ? 2 : 1, idx ? 3 : 1);
  int nsp = rank - 2;
  a_ints(n, "kernel_shape", k, (size_t)nsp);
  if (st) a_ints(n, "strides", st, (size_t)nsp);
  if (pads) a_ints(n, "pads", pads, 2 * (size_t)nsp);
  if (dil) a_ints(n, "dilations", dil, (size_t)nsp);
  if (ap) a_str(n, "auto_pad", ap);
  if (ceil) a_int(n, "ceil_mode", 1);
  if (cip) a_int(n, "count_include_pad", 1);
  if (so) a_int(n, "storage_order", 1);
  t_end(1e-5, false);
}

static void cases_pool(void) {
  for (int mx = 0; mx < 2; mx++) {
    const char *op = mx ? "MaxPool" : "AveragePool";
    pool_case(op, 12, "2x2 stride 2", 4, (int64_t[]){1, 2, 6, 6}, (int64_t[]){2, 2}, (int64_t[]){2, 2}, NULL, NULL,
              NULL, 0, 0, 0, 0);
    pool_case(op, 12, "3x3 stride 2 pad 1 odd", 4, (int64_t[]){2, 3, 7, 9}, (int64_t[]){3, 3}, (int64_t[]){2, 2},
              (int64_t[]){1, 1, 1, 1}, NULL, NULL, 0, 0, 0, 0);
    pool_case(op, 12, "ceil_mode", 4, (int64_t[]){1, 1, 7, 8}, (int64_t[]){3, 2}, (int64_t[]){2, 3}, NULL, NULL, NULL,
              1, 0, 0, 0);
    pool_case(op, 12, "ceil_mode asym pads", 4, (int64_t[]){1, 2, 6, 5}, (int64_t[]){3, 3}, (int64_t[]){2, 2},
              (int64_t[]){0, 1, 2, 1}, NULL, NULL, 1, 0, 0, 0);
    pool_case(op, 12, "SAME_UPPER", 4, (int64_t[]){1, 2, 5, 6}, (int64_t[]){3, 2}, (int64_t[]){2, 2}, NULL, NULL,
              "SAME_UPPER", 0, 0, 0, 0);
    pool_case(op, 12, "SAME_LOWER", 4, (int64_t[]){1, 2, 5, 6}, (int64_t[]){2, 3}, (int64_t[]){1, 2}, NULL, NULL,
              "SAME_LOWER", 0, 0, 0, 0);
    pool_case(op, 12, "VALID", 4, (int64_t[]){1, 1, 5, 5}, (int64_t[]){2, 2}, NULL, NULL, NULL, "VALID", 0, 0, 0, 0);
    pool_case(op, 12, "1-D", 3, (int64_t[]){2, 3, 11}, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){1, 1}, NULL, NULL, 0,
              0, 0, 0);
    pool_case(op, 12, "3-D", 5, (int64_t[]){1, 2, 4, 5, 3}, (int64_t[]){2, 2, 2}, NULL, (int64_t[]){0, 1, 0, 1, 0, 1},
              NULL, NULL, 0, 0, 0, 0);
    pool_case(op, 12, "1 element", 4, (int64_t[]){1, 1, 1, 1}, (int64_t[]){1, 1}, NULL, NULL, NULL, NULL, 0, 0, 0, 0);
  }
  pool_case("AveragePool", 12, "count_include_pad", 4, (int64_t[]){1, 2, 5, 7}, (int64_t[]){3, 3}, (int64_t[]){2, 2},
            (int64_t[]){1, 1, 1, 1}, NULL, NULL, 0, 1, 0, 0);
  pool_case("AveragePool", 12, "count_include_pad ceil_mode", 4, (int64_t[]){1, 1, 6, 6}, (int64_t[]){3, 3},
            (int64_t[]){2, 2}, (int64_t[]){1, 1, 1, 1}, NULL, NULL, 1, 1, 0, 0);
  pool_case("AveragePool", 7, "opset 7 count_include_pad SAME_UPPER", 4, (int64_t[]){1, 1, 5, 5}, (int64_t[]){2, 2},
            NULL, NULL, NULL, "SAME_UPPER", 0, 1, 0, 0);
  pool_case("MaxPool", 12, "dilations", 4, (int64_t[]){1, 2, 8, 9}, (int64_t[]){2, 3}, (int64_t[]){1, 2},
            (int64_t[]){1, 1, 1, 1}, (int64_t[]){2, 2}, NULL, 0, 0, 0, 0);
  pool_case("MaxPool", 12, "Indices", 4, (int64_t[]){2, 3, 6, 7}, (int64_t[]){3, 3}, (int64_t[]){2, 2},
            (int64_t[]){1, 1, 1, 1}, NULL, NULL, 0, 0, 1, 0);
  pool_case("MaxPool", 12, "Indices storage_order 1", 4, (int64_t[]){1, 2, 5, 6}, (int64_t[]){2, 2}, (int64_t[]){1, 1},
            NULL, NULL, NULL, 0, 0, 1, 1);
  pool_case("MaxPool", 12, "Indices 3-D ceil", 5, (int64_t[]){1, 1, 3, 4, 5}, (int64_t[]){2, 2, 2},
            (int64_t[]){2, 2, 2}, NULL, NULL, NULL, 1, 0, 1, 0);
  pool_case("MaxPool", 8, "opset 8 resnet stem 3x3/2 pad 1", 4, (int64_t[]){1, 4, 16, 16}, (int64_t[]){3, 3},
            (int64_t[]){2, 2}, (int64_t[]){1, 1, 1, 1}, NULL, NULL, 0, 0, 0, 0);
  /* NaN propagation */
  {
    kiln_tensor x = {0};
    if (kiln_tensor_alloc(&x, KILN_F32, 4, (int64_t[]){1, 1, 4, 4})) exit(2);
    for (int64_t i = 0; i < 16; i++) kiln_set_f(&x, i, rnd());
    kiln_set_f(&x, 5, NAN);
    kiln_set_f(&x, 0, NAN);
    kiln_set_f(&x, 10, -INFINITY);
    t_begin(12, "MaxPool NaN and -inf");
    t_in_data(KILN_F32, 4, x.dims, &x);
    kiln_node *n = t_node("MaxPool", 2, 3);
    a_ints(n, "kernel_shape", INTS(2, 2));
    a_ints(n, "strides", INTS(1, 1));
    t_end(1e-5, false);
    t_begin(13, "GlobalMaxPool NaN");
    t_in_data(KILN_F32, 4, x.dims, &x);
    t_node1("GlobalMaxPool");
    t_end(1e-5, false);
    kiln_tensor_release(&x);
  }
  const int64_t gs[][5] = {{1, 1, 1, 1}, {2, 3, 5, 7}, {1, 4, 16, 16}, {2, 2, 9, 1}};
  for (size_t i = 0; i < sizeof gs / sizeof *gs; i++)
    for (int mx = 0; mx < 2; mx++) {
      t_begin(13, "%s [%lld,%lld,%lld,%lld]", mx ? "GlobalMaxPool" : "GlobalAveragePool", (long long)gs[i][0],
              (long long)gs[i][1], (long long)gs[i][2], (long long)gs[i][3]);
      t_in(4, gs[i]);
      t_node1(mx ? "GlobalMaxPool" : "GlobalAveragePool");
      t_end(1e-4, !mx);
    }
  t_begin(13, "GlobalAveragePool 1-D [2,3,300]");
  t_in(SH(2, 3, 300));
  t_node1("GlobalAveragePool");
  t_end(1e-4, true);
  t_begin(13, "GlobalAveragePool 3-D [1,2,3,4,5]");
  t_in(SH(1, 2, 3, 4, 5));
  t_node1("GlobalAveragePool");
  t_end(1e-4, true);
  /* rows of 8 outputs and more: the vector form (pool_vec_src) where the
     device takes it, then forced off and on */
  static const char *const vmodes[] = {"", "KILN_CL_POOL_VEC=0", "KILN_CL_POOL_VEC=1"};
  for (int v = 0; v < 3; v++) {
    snprintf(case_env, sizeof case_env, "%s", vmodes[v]);
    for (int mx = 0; mx < 2; mx++) {
      const char *op = mx ? "MaxPool" : "AveragePool";
      pool_case(op, 12, "wide 2x2 stride 2, tail", 4, (int64_t[]){1, 3, 20, 37}, (int64_t[]){2, 2}, (int64_t[]){2, 2},
                NULL, NULL, NULL, 0, 0, 0, 0);
      pool_case(op, 12, "wide 3x3 stride 2 pad 1", 4, (int64_t[]){2, 2, 17, 40}, (int64_t[]){3, 3}, (int64_t[]){2, 2},
                (int64_t[]){1, 1, 1, 1}, NULL, NULL, 0, 0, 0, 0);
      pool_case(op, 12, "wide 3x3 stride 1 pad 1", 4, (int64_t[]){1, 2, 9, 21}, (int64_t[]){3, 3}, NULL,
                (int64_t[]){1, 1, 1, 1}, NULL, NULL, 0, 0, 0, 0);
      pool_case(op, 12, "wide 2x3 strides 1,3", 4, (int64_t[]){1, 1, 6, 50}, (int64_t[]){2, 3}, (int64_t[]){1, 3},
                NULL, NULL, NULL, 0, 0, 0, 0);
      pool_case(op, 12, "wide ceil_mode asym pads", 4, (int64_t[]){1, 1, 9, 33}, (int64_t[]){3, 3}, (int64_t[]){2, 2},
                (int64_t[]){0, 1, 2, 0}, NULL, NULL, 1, 0, 0, 0);
    }
    pool_case("AveragePool", 12, "wide count_include_pad", 4, (int64_t[]){1, 2, 11, 35}, (int64_t[]){3, 3},
              (int64_t[]){2, 2}, (int64_t[]){1, 1, 1, 1}, NULL, NULL, 0, 1, 0, 0);
    pool_case("AveragePool", 12, "wide count_include_pad ceil", 4, (int64_t[]){1, 1, 10, 30}, (int64_t[]){3, 3},
              (int64_t[]){2, 2}, NULL, NULL, NULL, 1, 1, 0, 0);
    pool_case("MaxPool", 12, "wide dilations", 4, (int64_t[]){1, 1, 10, 24}, (int64_t[]){3, 3}, NULL,
              (int64_t[]){2, 2, 2, 2}, (int64_t[]){2, 2}, NULL, 0, 0, 0, 0);
    pool_case("MaxPool", 12, "wide SAME_UPPER", 4, (int64_t[]){1, 2, 7, 26}, (int64_t[]){3, 2}, (int64_t[]){2, 2},
              NULL, NULL, "SAME_UPPER", 0, 0, 0, 0);
  }
  case_env[0] = 0;
}

static const char *const red_ops[] = {"ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",
                                      "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};

static void red_case(const char *op, int opset, int rank, const int64_t *x, const int64_t *axes, size_t na,
                     bool as_input, int keep, int noop) {
  char ax[64] = "";
  for (size_t i = 0; i < na; i++)
    snprintf(ax + strlen(ax), sizeof ax - strlen(ax), "%s%lld", i ? "," : "", (long long)axes[i]);
  char sh[64];
  t_begin(opset, "%s-%d %s axes [%s]%s keepdims=%d%s", op, opset, kiln_shape_str(rank, x, sh, sizeof sh), ax,
          as_input ? " (input)" : "", keep, noop ? " noop_with_empty_axes" : "");
  /* positive data for the logs and products; mixed signs elsewhere */
  bool pos = !strcmp(op, "ReduceLogSum") || !strcmp(op, "ReduceProd");
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, KILN_F32, rank, x)) exit(2);
  for (int64_t i = 0; i < t.numel; i++)
    kiln_set_f(&t, i, pos ? 0.5 + 0.5 * fabs(rnd()) + (i % 3 == 0) * 0.6 : 2 * rnd());
  t_in_data(KILN_F32, rank, x, &t);
  kiln_tensor_release(&t);
  if (as_input && axes) t_const_i64(axes, na, false);
  kiln_node *n = t_node1(op);
  if (!as_input && axes) a_ints(n, "axes", axes, na);
  if (keep != 1) a_int(n, "keepdims", keep);
  if (noop) a_int(n, "noop_with_empty_axes", 1);
  /* sums reassociate (magnitude bound); products, logs and exps are
   * relative; a product over up to 300 values compounds 300 roundings */
  bool linear = !strcmp(op, "ReduceSum") || !strcmp(op, "ReduceMean") || !strcmp(op, "ReduceL1") ||
                !strcmp(op, "ReduceSumSquare") || !strcmp(op, "ReduceL2");
  t_end(!strcmp(op, "ReduceProd") ? 1e-4 : 1e-4, linear);
}

static void cases_reduce(void) {
  for (size_t o = 0; o < sizeof red_ops / sizeof *red_ops; o++) {
    const char *op = red_ops[o];
    int v_in = !strcmp(op, "ReduceSum") ? 13 : 18;
    red_case(op, 11, SH(3, 4, 5), INTS(1), false, 1, 0);
    red_case(op, 11, SH(3, 4, 5), INTS(0, 2), false, 0, 0);
    red_case(op, 11, SH(3, 4, 5), INTS(-1), false, 1, 0);
    red_case(op, 11, SH(7, 300), NULL, 0, false, 1, 0);    /* all axes, long: work-group mode */
    red_case(op, 11, SH(1), INTS(0), false, 0, 0);         /* 1 element */
    red_case(op, 11, SH(2, 150, 3), INTS(1), false, 1, 0); /* long strided axis */
    red_case(op, 11, SH(160, 130), INTS(-1), false, 1, 0); /* many long rows: an item each on a CPU device */
    red_case(op, v_in, SH(4, 3, 2), INTS(0, -1), true, 1, 0);
    red_case(op, v_in, SH(4, 3, 2), NULL, 0, true, 0, 0); /* no axes input: all */
    red_case(op, v_in, SH(4, 3, 2), NULL, 0, true, 1, 1); /* noop_with_empty_axes */
  }
  /* an empty constant axes input: all axes, or none with noop_with_empty_axes */
  for (int noop = 0; noop < 2; noop++) {
    t_begin(18, "ReduceMax-18 empty axes input noop_with_empty_axes=%d", noop);
    t_in(SH(3, 4));
    kiln_tensor e = {0};
    int64_t zero = 0;
    int id;
    if (kiln_tensor_alloc(&e, KILN_I64, 1, &zero) || kiln_edit_add_const(cur->g, "axes", &e, &id)) exit(2);
    cur_in[cur_nin++] = id;
    kiln_node *n = t_node1("ReduceMax");
    if (noop) a_int(n, "noop_with_empty_axes", 1);
    t_end(1e-5, false);
  }
  red_case("ReduceMean", 13, SH(2, 3, 512), INTS(-1), false, 1, 0);
  red_case("ReduceSum", 13, SH(1000, 3), INTS(0), true, 0, 0);
  red_case("ReduceMax", 13, SH(5, 1, 7), INTS(1), false, 1, 0);
  /* NaN and infinities */
  {
    kiln_tensor x = {0};
    if (kiln_tensor_alloc(&x, KILN_F32, 2, (int64_t[]){3, 200})) exit(2);
    for (int64_t i = 0; i < x.numel; i++) kiln_set_f(&x, i, rnd());
    kiln_set_f(&x, 7, NAN);
    kiln_set_f(&x, 210, INFINITY);
    kiln_set_f(&x, 420, -INFINITY);
    const char *nan_ops[] = {"ReduceMax", "ReduceMin", "ReduceLogSumExp", "ReduceSum"};
    for (int i = 0; i < 4; i++) {
      t_begin(13, "%s NaN/inf rows", nan_ops[i]);
      t_in_data(KILN_F32, 2, x.dims, &x);
      a_ints(t_node1(nan_ops[i]), "axes", INTS(1));
      t_end(1e-4, false);
    }
    for (int i = 0; i < 2; i++)
      for (int last = 0; last < 2; last++) {
        t_begin(13, "%s NaN rows select_last_index=%d", i ? "ArgMin" : "ArgMax", last);
        t_in_data(KILN_F32, 2, x.dims, &x);
        kiln_node *n = t_node1(i ? "ArgMin" : "ArgMax");
        a_int(n, "axis", 1);
        if (last) a_int(n, "select_last_index", 1);
        t_end(0, false);
      }
    kiln_tensor_release(&x);
  }
  /* ArgMax/ArgMin: axes, keepdims, ties */
  for (int i = 0; i < 2; i++) {
    const char *op = i ? "ArgMin" : "ArgMax";
    const int64_t axes[] = {0, 1, -1};
    for (int a = 0; a < 3; a++)
      for (int keep = 0; keep < 2; keep++) {
        t_begin(13, "%s [4,5,3] axis %lld keepdims %d", op, (long long)axes[a], keep);
        t_in(SH(4, 5, 3));
        kiln_node *n = t_node1(op);
        a_int(n, "axis", axes[a]);
        a_int(n, "keepdims", keep);
        t_end(0, false);
      }
    kiln_tensor x = {0};
    if (kiln_tensor_alloc(&x, KILN_F32, 2, (int64_t[]){3, 6})) exit(2);
    for (int64_t k = 0; k < x.numel; k++) kiln_set_f(&x, k, (double)((k * 7) % 3)); /* ties */
    for (int last = 0; last < 2; last++) {
      t_begin(12, "%s ties select_last_index=%d", op, last);
      t_in_data(KILN_F32, 2, x.dims, &x);
      kiln_node *n = t_node1(op);
      a_int(n, "axis", 1);
      a_int(n, "select_last_index", last);
      t_end(0, false);
    }
    kiln_tensor_release(&x);
  }
  /* axes as a run-time input: declined */
  t_begin(13, "ReduceSum axes as graph input (declined)");
  t_in(SH(2, 3));
  t_in_data(KILN_I64, SH(1), NULL);
  ((int64_t *)cur->in[1].data)[0] = 1;
  t_node1("ReduceSum");
  cur->expect_dev = false;
  t_end(0, false);
}

static void cases_norm(void) {
  static const char *const ops[] = {"Softmax", "LogSoftmax", "Hardmax"};
  for (int o = 0; o < 3; o++) {
    for (int v13 = 0; v13 < 2; v13++) {
      int opset = v13 ? 13 : 11;
      const int64_t axes[] = {0, 1, 2, -1, -2};
      for (int a = 0; a < 5; a++) {
        t_begin(opset, "%s-%d [3,4,5] axis %lld", ops[o], opset, (long long)axes[a]);
        t_in(SH(3, 4, 5));
        a_int(t_node1(ops[o]), "axis", axes[a]);
        t_end(1e-5, false);
      }
      t_begin(opset, "%s-%d [2,3,4] default axis", ops[o], opset);
      t_in(SH(2, 3, 4));
      t_node1(ops[o]);
      t_end(1e-5, false);
      t_begin(opset, "%s-%d [3,1000] (work-group rows)", ops[o], opset);
      t_in(SH(3, 1000));
      a_int(t_node1(ops[o]), "axis", 1);
      t_end(1e-5, false);
      t_begin(opset, "%s-%d [1]", ops[o], opset);
      t_in(SH(1));
      a_int(t_node1(ops[o]), "axis", 0);
      t_end(1e-5, false);
    }
    /* many long rows: a work-item per row on a CPU device (kiln_clop_row_group) */
    t_begin(13, "%s-13 [160,130] (many long rows)", ops[o]);
    t_in(SH(160, 130));
    t_node1(ops[o]);
    t_end(1e-5, false);
    t_begin(13, "%s-13 [48,256] (many long rows, 16-float loads)", ops[o]);
    t_in(SH(48, 256));
    t_node1(ops[o]);
    t_end(1e-5, false);
    t_begin(13, "%s-13 [40,130,4] axis 1 (many long strided rows)", ops[o]);
    t_in(SH(40, 130, 4));
    a_int(t_node1(ops[o]), "axis", 1);
    t_end(1e-5, false);
    t_begin(13, "%s-13 [2,257,3] axis 1 (strided group rows)", ops[o]);
    t_in(SH(2, 257, 3));
    a_int(t_node1(ops[o]), "axis", 1);
    t_end(1e-5, false);
    t_begin(1, "%s-1 [2,3,4] default axis 1", ops[o]);
    t_in(SH(2, 3, 4));
    t_node1(ops[o]);
    t_end(1e-5, false);
  }
  {
    kiln_tensor x = {0};
    if (kiln_tensor_alloc(&x, KILN_F32, 2, (int64_t[]){4, 5})) exit(2);
    for (int64_t i = 0; i < x.numel; i++) kiln_set_f(&x, i, (double)((i * 7) % 3)); /* ties */
    kiln_set_f(&x, 7, NAN);
    kiln_set_f(&x, 9, NAN);
    t_begin(13, "Hardmax-13 ties and NaN");
    t_in_data(KILN_F32, 2, x.dims, &x);
    t_node1("Hardmax");
    t_end(0, false);
    t_begin(13, "Hardmax-13 ties and NaN, axis 0");
    t_in_data(KILN_F32, 2, x.dims, &x);
    a_int(t_node1("Hardmax"), "axis", 0);
    t_end(0, false);
    kiln_tensor_release(&x);
    /* rows of 16 floats read as vectors: a NaN in one lane makes its row NaN, -inf lanes give 0 */
    kiln_tensor v = {0};
    if (kiln_tensor_alloc(&v, KILN_F32, 2, (int64_t[]){32, 16})) exit(2);
    for (int64_t i = 0; i < v.numel; i++) kiln_set_f(&v, i, (double)((i * 5) % 11) * 0.25);
    kiln_set_f(&v, 16 * 3 + 9, NAN);
    kiln_set_f(&v, 16 * 5 + 2, -INFINITY);
    kiln_set_f(&v, 16 * 5 + 15, -INFINITY);
    for (int o = 0; o < 2; o++) {
      t_begin(13, "%s-13 [32,16] NaN and -inf lanes", o ? "LogSoftmax" : "Softmax");
      t_in_data(KILN_F32, 2, v.dims, &v);
      t_node1(o ? "LogSoftmax" : "Softmax");
      t_end(1e-5, false);
    }
    kiln_tensor_release(&v);
  }
  /* LayerNormalization */
  static const struct {
    int rank;
    int64_t x[4];
    int64_t axis;
    int srank;
    int64_t s[4];
    bool bias;
    unsigned outs;
  } ln[] = {
      {3, {2, 3, 8}, -1, 1, {8}, true, 1},      {3, {2, 3, 8}, -1, 1, {8}, true, 7},
      {3, {2, 3, 8}, 1, 2, {3, 8}, false, 5},   {3, {2, 3, 8}, 0, 3, {2, 3, 8}, true, 3},
      {2, {4, 512}, 1, 1, {512}, true, 7},      {3, {2, 5, 300}, -1, 1, {1}, true, 1},
      {4, {2, 3, 4, 5}, 2, 2, {1, 5}, true, 7}, {1, {7}, 0, 1, {7}, false, 1},
      {2, {1, 1}, -1, 1, {1}, true, 7},         {2, {160, 130}, -1, 1, {130}, true, 7},
      {3, {4, 16, 256}, -1, 1, {256}, false, 1}, {3, {4, 16, 256}, -1, 2, {16, 256}, true, 1},
  };
  for (size_t i = 0; i < sizeof ln / sizeof *ln; i++) {
    char sx[64], ss[64];
    t_begin(17, "LayerNormalization %s axis %lld scale %s%s outputs %u",
            kiln_shape_str(ln[i].rank, ln[i].x, sx, sizeof sx), (long long)ln[i].axis,
            kiln_shape_str(ln[i].srank, ln[i].s, ss, sizeof ss), ln[i].bias ? " +B" : "", ln[i].outs);
    t_in(ln[i].rank, ln[i].x);
    t_in(ln[i].srank, ln[i].s);
    if (ln[i].bias) t_in(ln[i].srank, ln[i].s);
    kiln_node *n = t_node("LayerNormalization", ln[i].outs > 1 ? 3 : 1, ln[i].outs);
    a_int(n, "axis", ln[i].axis);
    if (i % 2) a_float(n, "epsilon", 1e-3f);
    t_end(1e-4, false);
  }
}

static void cases_move(void) {
  /* Transpose */
  static const struct {
    int rank;
    int64_t x[5], perm[5];
    bool has_perm;
  } tr[] = {
      {2, {37, 53}, {1, 0}, true},
      {2, {1, 1}, {1, 0}, true},
      {3, {2, 3, 4}, {0, 2, 1}, true},
      {3, {2, 3, 4}, {2, 0, 1}, true},
      {3, {2, 3, 4}, {1, 0, 2}, true}, /* innermost stays: copy */
      {3, {5, 6, 7}, {0}, false},      /* default: reversed */
      {4, {2, 17, 3, 19}, {0, 3, 1, 2}, true},
      {4, {2, 3, 4, 5}, {3, 2, 1, 0}, true},
      {5, {2, 1, 3, 1, 4}, {4, 1, 0, 3, 2}, true},
      {2, {100, 40}, {1, 0}, true},
  };
  for (size_t i = 0; i < sizeof tr / sizeof *tr; i++) {
    char sx[64], sp[64];
    t_begin(13, "Transpose %s perm %s", kiln_shape_str(tr[i].rank, tr[i].x, sx, sizeof sx),
            tr[i].has_perm ? kiln_shape_str(tr[i].rank, tr[i].perm, sp, sizeof sp) : "default");
    t_in(tr[i].rank, tr[i].x);
    kiln_node *n = t_node1("Transpose");
    if (tr[i].has_perm) a_ints(n, "perm", tr[i].perm, (size_t)tr[i].rank);
    t_end(0, false);
  }
  t_begin(13, "Transpose int64");
  t_in_data(KILN_I64, SH(3, 5), NULL);
  for (int64_t i = 0; i < 15; i++) ((int64_t *)cur->in[0].data)[i] = i * 1000003;
  t_node1("Transpose");
  t_end(0, false);
  /* Concat */
  static const int64_t ax[] = {0, 1, 2, -1};
  for (int a = 0; a < 4; a++) {
    t_begin(13, "Concat axis %lld of 3", (long long)ax[a]);
    int64_t d0[] = {2, 3, 4}, d1[] = {2, 3, 4}, d2[] = {2, 3, 4};
    int aa = ax[a] < 0 ? (int)ax[a] + 3 : (int)ax[a];
    d1[aa] = 1;
    d2[aa] = 5;
    t_in(3, d0);
    t_in(3, d1);
    t_in(3, d2);
    a_int(t_node1("Concat"), "axis", ax[a]);
    t_end(0, false);
  }
  /* inputs of one length share one copy kernel, the output's offset its
     argument (OUT_AT, ops_move.c): four equal ones, and lengths 3 3 2 3 (a
     kernel for the first two, one for the 2, one for the last 3) */
  for (int m = 0; m < 2; m++) {
    t_begin(13, "Concat of %s on axis 1 (rows over 16)", m ? "lengths 3 3 2 3" : "four equal inputs");
    for (int i = 0; i < 4; i++) {
      int64_t d[] = {4, m && i == 2 ? 2 : 3, 8};
      t_in(3, d);
    }
    a_int(t_node1("Concat"), "axis", 1);
    t_end(0, false);
  }
  /* short output rows: one kernel, a row per work item (a vector store
     where the row is 2, 4, 8 or 16 long): four columns into rows of 4, rows
     of 5, rows of 16 from two inputs, int64 rows of 4,
     and 8 non-empty inputs (more than the one-kernel form takes) */
  t_begin(13, "Concat columns into rows of 4");
  for (int i = 0; i < 4; i++) t_in(SH(37, 1));
  a_int(t_node1("Concat"), "axis", 1);
  t_end(0, false);
  t_begin(13, "Concat rows of 5 (scalar stores)");
  t_in(SH(9, 2));
  t_in(SH(9, 1));
  t_in(SH(9, 2));
  a_int(t_node1("Concat"), "axis", -1);
  t_end(0, false);
  t_begin(13, "Concat rows of 16");
  t_in(SH(5, 1, 8));
  t_in(SH(5, 1, 8));
  a_int(t_node1("Concat"), "axis", 1);
  t_end(0, false);
  t_begin(13, "Concat int64 rows of 4");
  t_in_data(KILN_I64, SH(6, 3), NULL);
  t_in_data(KILN_I64, SH(6, 1), NULL);
  a_int(t_node1("Concat"), "axis", 1);
  t_end(0, false);
  t_begin(13, "Concat 8 columns");
  for (int i = 0; i < 8; i++) t_in(SH(11, 1));
  a_int(t_node1("Concat"), "axis", 1);
  t_end(0, false);
  t_begin(4, "Concat opset 4, one input");
  t_in(SH(3, 2));
  a_int(t_node1("Concat"), "axis", 1);
  t_end(0, false);
  t_begin(13, "Concat bool with a constant");
  t_in_data(KILN_BOOL, SH(4), NULL);
  t_in_data(KILN_BOOL, SH(3), NULL);
  a_int(t_node1("Concat"), "axis", 0);
  t_end(0, false);
  /* Gather */
  for (int it = 0; it < 2; it++) {
    kiln_dtype idt = it ? KILN_I32 : KILN_I64;
    static const struct {
      int rank;
      int64_t x[3];
      int64_t axis;
      int irank;
      int64_t ind[2];
    } ga[] = {
        {2, {5, 4}, 0, 1, {3}},     {2, {5, 4}, 1, 2, {2, 3}}, {3, {3, 4, 5}, 1, 0, {0}},
        {3, {3, 4, 5}, -1, 1, {7}}, {1, {9}, 0, 2, {2, 2}},
        /* rows of 64, 24, 12, 2 and 6 elements: 16, 8, 4, 2 and 2 per work
           item where the device takes 16-wide vectors (PoCL), 4 or fewer on
           llvmpipe */
        {2, {7, 64}, 0, 2, {3, 5}}, {3, {2, 5, 24}, 1, 1, {4}}, {3, {3, 6, 2}, -2, 2, {2, 3}},
        {2, {10, 12}, 0, 1, {9}},   {3, {4, 3, 6}, 0, 1, {5}},
    };
    for (size_t i = 0; i < sizeof ga / sizeof *ga; i++) {
      char sx[64], si[64];
      t_begin(13, "Gather %s axis %lld indices %s %s", kiln_shape_str(ga[i].rank, ga[i].x, sx, sizeof sx),
              (long long)ga[i].axis, kiln_shape_str(ga[i].irank, ga[i].ind, si, sizeof si), kiln_dtype_name(idt));
      t_in(ga[i].rank, ga[i].x);
      int a = ga[i].axis < 0 ? (int)ga[i].axis + ga[i].rank : (int)ga[i].axis;
      int64_t n = ga[i].x[a];
      kiln_tensor t = {0};
      if (kiln_tensor_alloc(&t, idt, ga[i].irank, ga[i].ind)) exit(2);
      for (int64_t k = 0; k < t.numel; k++) kiln_set_i(&t, k, (k * 5 + 3) % (2 * n) - n); /* negatives too */
      t_in_data(idt, ga[i].irank, ga[i].ind, &t);
      kiln_tensor_release(&t);
      a_int(t_node1("Gather"), "axis", ga[i].axis);
      t_end(0, false);
    }
  }
  /* ScatterND: tuples of 1, 2 and rank indices, negative ones, a repeated
     index (the reference's order: the last update stays, reductions
     combine in order), every reduction, both index types, 1-element and
     18-element slices, data of int64 (bits moved) */
  static const struct {
    int rank;
    int64_t x[3];
    int k;
    int64_t m;
    const char *red;
  } sc[] = {
      {2, {6, 4}, 1, 3, "none"}, {3, {4, 3, 6}, 1, 2, "add"}, {3, {4, 3, 6}, 2, 5, "mul"},
      {2, {5, 7}, 2, 9, "max"},  {1, {9}, 1, 12, "min"},      {3, {2, 3, 4}, 3, 6, "none"},
  };
  for (int it = 0; it < 2; it++) {
    kiln_dtype idt = it ? KILN_I32 : KILN_I64;
    for (size_t i = 0; i < sizeof sc / sizeof *sc; i++) {
      char sx[64];
      t_begin(18, "ScatterND %s k=%d of %s, %lld tuples, %s indices", sc[i].red, sc[i].k,
              kiln_shape_str(sc[i].rank, sc[i].x, sx, sizeof sx), (long long)sc[i].m, kiln_dtype_name(idt));
      t_in(sc[i].rank, sc[i].x);
      kiln_tensor t = {0};
      if (kiln_tensor_alloc(&t, idt, 2, (int64_t[]){sc[i].m, sc[i].k})) exit(2);
      for (int64_t q = 0; q < sc[i].m; q++)
        for (int j = 0; j < sc[i].k; j++) {
          int64_t n = sc[i].x[j], v = (q * 3 + j * 5 + 1) % n; /* repeats once m > n */
          kiln_set_i(&t, q * sc[i].k + j, (q + j) % 2 ? v - n : v);
        }
      t_in_data(idt, 2, t.dims, &t);
      kiln_tensor_release(&t);
      int64_t ud[4] = {sc[i].m};
      for (int d = sc[i].k; d < sc[i].rank; d++) ud[1 + d - sc[i].k] = sc[i].x[d];
      t_in(1 + sc[i].rank - sc[i].k, ud);
      a_str(t_node1("ScatterND"), "reduction", sc[i].red);
      t_end(0, false);
    }
  }
  t_begin(13, "ScatterND int64 data");
  t_in_data(KILN_I64, SH(5, 2), NULL);
  t_in_data(KILN_I64, SH(2, 1), NULL);
  t_in_data(KILN_I64, SH(2, 2), NULL);
  t_node1("ScatterND");
  t_end(0, false);
  t_begin(13, "Gather constant indices");
  t_in(SH(6, 3));
  t_const_i64(INTS(-1, 0, 5, 2), false);
  t_node1("Gather");
  t_end(0, false);
  t_begin(13, "Gather constant scalar index, axis 1");
  t_in(SH(6, 3, 2));
  t_const_i64(INTS(-2), true);
  a_int(t_node1("Gather"), "axis", 1);
  t_end(0, false);
  /* Where */
  static const struct {
    int rc, rx, ry;
    int64_t c[3], x[3], y[3];
  } wh[] = {
      {2, 2, 2, {3, 4}, {3, 4}, {3, 4}},
      {1, 2, 0, {4}, {3, 4}, {0}},
      {3, 1, 2, {2, 1, 4}, {1}, {3, 1}},
      {0, 2, 2, {0}, {2, 3}, {2, 3}},
  };
  for (size_t i = 0; i < sizeof wh / sizeof *wh; i++) {
    char a[48], b[48], c[48];
    t_begin(16, "Where cond %s x %s y %s", kiln_shape_str(wh[i].rc, wh[i].c, a, sizeof a),
            kiln_shape_str(wh[i].rx, wh[i].x, b, sizeof b), kiln_shape_str(wh[i].ry, wh[i].y, c, sizeof c));
    t_in_data(KILN_BOOL, wh[i].rc, wh[i].c, NULL);
    t_in(wh[i].rx, wh[i].x);
    t_in(wh[i].ry, wh[i].y);
    t_node1("Where");
    t_end(0, false);
  }
  t_begin(9, "Where int64");
  t_in_data(KILN_BOOL, SH(5), NULL);
  t_in_data(KILN_I64, SH(5), NULL);
  t_in_data(KILN_I64, SH(1), NULL);
  t_node1("Where");
  t_end(0, false);
  /* Pad */
  static const char *const modes[] = {"constant", "reflect", "edge"};
  for (int m = 0; m < 3; m++) {
    t_begin(13, "Pad %s [3,4] pads 1,2,2,0", modes[m]);
    t_in(SH(3, 4));
    t_const_i64(INTS(1, 2, 2, 0), false);
    if (m == 0) t_const_f32(0, NULL);
    a_str(t_node1("Pad"), "mode", modes[m]);
    t_end(0, false);
    t_begin(13, "Pad %s [2,3,5] pads 0,3,1,1,0,4", modes[m]);
    t_in(SH(2, 3, 5));
    t_const_i64(INTS(0, 3, 1, 1, 0, 4), false);
    a_str(t_node1("Pad"), "mode", modes[m]);
    t_end(0, false);
    t_begin(13, "Pad %s negative pads", modes[m]);
    t_in(SH(4, 5));
    t_const_i64(INTS(-1, 1, 0, -2), false);
    a_str(t_node1("Pad"), "mode", modes[m]);
    t_end(0, false);
  }
  t_begin(13, "Pad reflect over a size-1 axis");
  t_in(SH(1, 4));
  t_const_i64(INTS(2, 0, 1, 0), false);
  a_str(t_node1("Pad"), "mode", "reflect");
  t_end(0, false);
  t_begin(2, "Pad opset 2 attribute pads and value");
  t_in(SH(2, 2));
  kiln_node *n = t_node1("Pad");
  a_ints(n, "pads", INTS(1, 0, 0, 1));
  a_float(n, "value", 1.5f);
  t_end(0, false);
}

/* ------------------------------------------------------------------ */
/* the bench                                                            */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Fastest of `reps` runs (at most 8) of case c (already bound), after one
 * untimed run: the minimum is the figure least disturbed by other jobs on
 * a shared machine. */
static double time_case(tcase *c, kiln_cl_context *ctx, int reps) {
  double t[9];
  kiln_tensor got[MAXIO];
  memset(got, 0, sizeof got);
  for (int r = 0; r <= reps && r < 9; r++) {
    double ms = 0;
    if (run_case(c, ctx, got, &ms)) return -1;
    for (int k = 0; k < MAXIO; k++) kiln_tensor_release(&got[k]);
    if (r) t[r - 1] = ms;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  return t[0];
}

/* Prepares, builds, binds one case alone; returns the build time. */
static double setup_alone(tcase *c, const kiln_cl_device *dev, kiln_cl_context *ctx) {
  kiln_cl_src src = {0};
  snprintf(c->prefix, sizeof c->prefix, "b_");
  cl_program p = NULL;
  double t0 = now_ms();
  kiln_status s = prepare(c, dev, &src);
  if (!s && !c->op) s = kiln_fail(KILN_E_INTERNAL, "declined");
  if (!s && src.len) s = kiln_cl_program_build(ctx, src.text, "-cl-std=CL1.2", &p);
  double tb = now_ms() - t0;
  if (!s) s = kiln_cl_op_bind(c->op, ctx, p);
  kiln_cl_program_free(p);
  kiln_cl_src_free(&src);
  if (s) printf("  bench %s: %s\n", c->name, kiln_last_error());
  return s ? -1 : tb;
}

static void bench(const kiln_cl_device *dev, kiln_cl_context *ctx) {
  printf("bench on %s:\n", dev->name);
  /* SGEMM MxNxK, kiln's kernel and CLBlast each prepared alone, timed
   * interleaved (kiln, clblast, kiln, clblast; best of 5 each round) */
  /* M, N, K, transB (a Gemm with B [N,K]) */
  static const int64_t gs[][4] = {{64, 1024, 2048, 0}, {128, 256, 256, 0}, {1024, 1024, 1024, 0},
                                  {256, 256, 256, 0},  {64, 1024, 2048, 1}, {1024, 1024, 1024, 1}};
  static const char *const impl[] = {"kiln", "clblast"};
  for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) {
    int64_t M = gs[i][0], N = gs[i][1], K = gs[i][2];
    tcase *c[2] = {NULL, NULL};
    double bt[2] = {-1, -1};
    for (int m = 0; m < 2; m++) {
      bool tb = gs[i][3] != 0;
      t_begin(13, "sgemm %lldx%lldx%lld%s %s", (long long)M, (long long)N, (long long)K, tb ? " tB" : "", impl[m]);
      t_in(2, (int64_t[]){M, K});
      t_in(2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N});
      if (tb) a_int(t_node1("Gemm"), "transB", 1);
      else t_node1("MatMul");
      t_end(1e-4, false);
      snprintf(cur->env, sizeof cur->env, "KILN_CL_GEMM=%s", impl[m]);
    }
    c[0] = cur - 1;
    c[1] = cur;
    for (int m = 0; m < 2; m++) bt[m] = setup_alone(c[m], dev, ctx);
    double best[2] = {1e30, 1e30};
    for (int round = 0; round < 2 && bt[0] >= 0 && bt[1] >= 0; round++)
      for (int m = 0; m < 2; m++) {
        double ms = time_case(c[m], ctx, 5);
        if (ms >= 0 && ms < best[m]) best[m] = ms;
      }
    double fl = 2.0 * (double)(M * N * K);
    if (bt[0] >= 0 && bt[1] >= 0)
      printf("  SGEMM %lldx%lldx%lld%s: kiln %.2f ms %.1f GFLOP/s (%s), CLBlast %.2f ms %.1f GFLOP/s, kiln/CLBlast "
             "speed %.2f\n",
             (long long)M, (long long)N, (long long)K, gs[i][3] ? " tB" : "", best[0], fl / (best[0] * 1e6),
             kiln_cl_op_describe(c[0]->op),
             best[1], fl / (best[1] * 1e6), best[1] / best[0]);
    case_free(c[0]);
    case_free(c[1]);
    n_cases -= 2;
  }
  if (bench_gemm_only) return;
  /* conv shape classes of bench/make_models.py */
  static const struct {
    const char *name;
    int64_t c, m, k, s, hw, g;
  } cv[] = {
      {"resnet18 conv1 3->64 7x7/2 224", 3, 64, 7, 2, 224, 1},
      {"resnet18 l1 64->64 3x3 56", 64, 64, 3, 1, 56, 1},
      {"resnet18 l2 64->128 3x3/2 56", 64, 128, 3, 2, 56, 1},
      {"resnet18 l3 256->256 3x3 14", 256, 256, 3, 1, 14, 1},
      {"resnet18 l4 512->512 3x3 7", 512, 512, 3, 1, 7, 1},
      {"resnet18 down 128->256 1x1/2 28", 128, 256, 1, 2, 28, 1},
      {"mbv2 stem 3->32 3x3/2 224", 3, 32, 3, 2, 224, 1},
      {"mbv2 expand 24->144 1x1 56", 24, 144, 1, 1, 56, 1},
      {"mbv2 dw 144 3x3 56", 144, 144, 3, 1, 56, 144},
      {"mbv2 dw 576 3x3/2 14", 576, 576, 3, 2, 14, 576},
      {"mbv2 project 144->24 1x1 56", 144, 24, 1, 1, 56, 1},
      {"mbv2 project 960->320 1x1 7", 960, 320, 1, 1, 7, 1},
      {"mbv2 head 320->1280 1x1 7", 320, 1280, 1, 1, 7, 1},
  };
  printf("  %-36s %10s %10s %10s %s\n", "conv (N=1, bias)", "direct ms", "gemm ms", "default", "MFLOP");
  for (size_t i = 0; i < sizeof cv / sizeof *cv; i++) {
    double t[3] = {-1, -1, -1};
    const char *dflt = "";
    for (int m = 0; m < 3; m++) {
      if (m < 2)
        setenv("KILN_CL_CONV", m ? "gemm" : "direct", 1);
      else
        unsetenv("KILN_CL_CONV");
      int64_t p = cv[i].k / 2;
      conv_case(cv[i].name, 11, 4, (int64_t[]){1, cv[i].c, cv[i].hw, cv[i].hw},
                (int64_t[]){cv[i].m, cv[i].c / cv[i].g, cv[i].k, cv[i].k}, true, cv[i].g, (int64_t[]){cv[i].s, cv[i].s},
                NULL, (int64_t[]){p, p, p, p}, NULL);
      tcase *c = cur;
      if (setup_alone(c, dev, ctx) >= 0) {
        t[m] = time_case(c, ctx, 5);
        if (m == 2) dflt = strstr(kiln_cl_op_describe(c->op), "direct") ? "direct" : "gemm";
        if (m == 2) check_case(c, ctx);
      }
      case_free(c);
      n_cases--;
    }
    int64_t ohw = (cv[i].hw + 2 * (cv[i].k / 2) - cv[i].k) / cv[i].s + 1;
    double mflop = 2.0 * (double)(ohw * ohw * cv[i].m * (cv[i].c / cv[i].g) * cv[i].k * cv[i].k) / 1e6;
    printf("  %-36s %10.2f %10.2f %10s %.0f\n", cv[i].name, t[0], t[1], dflt, mflop);
  }
}

/* kiln's SparseLengthsSum / WeightedSum / Mean (opencl/ops_move.c sls):
 * float32, float16 and 8-bit rowwise tables, rows of 64 (16 floats a work
 * item on PoCL), 24, 6 and 1, uniform and uneven segments constant or at
 * run time (lengths and offsets, an empty one), positional weights, int32
 * and int64 indices, negative_indices 0 and 1. Declined: constant lengths
 * that do not add up (the host reports them). */
/* The table as graph input 0: float32 (random), float16 (random halves) or
 * 8-bit rowwise (tdt KILN_U8: x = [R, D + 8], random bytes, each row's
 * scale in (0.01, 0.05) and bias in (-1, 1) as its last 8 bytes). */
static void sls_table(kiln_dtype tdt, int rank, const int64_t *x) {
  if (tdt == KILN_F32) {
    t_in(rank, x);
    return;
  }
  kiln_tensor t = {0};
  if (kiln_tensor_alloc(&t, tdt, rank, x)) exit(2);
  if (tdt == KILN_F16) {
    for (int64_t i = 0; i < t.numel; i++) kiln_set_f(&t, i, rnd() * 2);
  } else {
    int64_t rb = x[1], d = rb - 8;
    for (int64_t r = 0; r < x[0]; r++) {
      unsigned char *row = (unsigned char *)t.data + r * rb;
      for (int64_t e = 0; e < d; e++) row[e] = (unsigned char)((rnd() + 1.0) * 127.99);
      float sb[2] = {(float)(0.03 + 0.02 * rnd()), (float)rnd()};
      memcpy(row + d, sb, sizeof sb);
    }
  }
  t_in_data(tdt, rank, x, &t);
  kiln_tensor_release(&t);
}

static void sls_case_t(const char *op, kiln_dtype tdt, int rank, const int64_t *x, kiln_dtype idt, const int64_t *seg,
                       int m, bool offsets, bool positional, bool neg, bool const_len) {
  int64_t n = 0;
  for (int b = 0; b < m; b++) n += seg[b];
  if (offsets) n = seg[m - 1] + 3; /* the last segment: 3 indices */
  char sx[48];
  t_begin(17, "%s table %s %s indices %s %s%s%s%s%s", op, kiln_dtype_name(tdt), kiln_shape_str(rank, x, sx, sizeof sx),
          kiln_dtype_name(idt), offsets ? "offsets" : "lengths", const_len ? "" : " (run-time)",
          positional ? " positional" : "", neg ? "" : " negative_indices=0", m > 1 && seg[0] != seg[1] ? " uneven" : "");
  sls_table(tdt, rank, x);
  bool weighted = strstr(op, "WeightedSum") != NULL;
  if (weighted) t_in(SH(positional ? 8 : n));
  kiln_tensor ind = {0};
  if (kiln_tensor_alloc(&ind, idt, 1, &n)) exit(2);
  for (int64_t k = 0; k < n; k++) /* [-R, R), or [0, R) */
    kiln_set_i(&ind, k, neg ? (k * 7 + 3) % (2 * x[0]) - x[0] : (k * 7 + 3) % x[0]);
  t_in_data(idt, 1, &n, &ind);
  kiln_tensor_release(&ind);
  if (const_len) {
    t_const_i64(seg, (size_t)m, false);
  } else {
    kiln_tensor l = {0}; /* of the indices' type */
    int64_t dm = m;
    if (kiln_tensor_alloc(&l, idt, 1, &dm)) exit(2);
    for (int b = 0; b < m; b++) kiln_set_i(&l, b, seg[b]);
    t_in_data(idt, 1, &dm, &l);
    kiln_tensor_release(&l);
  }
  kiln_node *nd = t_node_kiln(op);
  if (neg) a_int(nd, "negative_indices", 1);
  if (offsets) a_int(nd, "offsets", 1);
  if (positional) a_int(nd, "positional", 1);
  t_end(1e-5, true);
}

static void sls_case(const char *op, int rank, const int64_t *x, kiln_dtype idt, const int64_t *seg, int m,
                     bool offsets, bool positional, bool neg, bool const_len) {
  sls_case_t(op, KILN_F32, rank, x, idt, seg, m, offsets, positional, neg, const_len);
}

static void cases_sls(void) {
  static const char *ops[] = {"SparseLengthsSum", "SparseLengthsWeightedSum", "SparseLengthsMean"};
  static const int64_t tabs[][3] = {{2, 50, 64}, {2, 9, 24}, {3, 7, 2}, {1, 11, 0}}; /* rank, dims */
  const int64_t even[4] = {5, 5, 5, 5}, uneven[5] = {3, 0, 7, 1, 4}, offs[4] = {0, 4, 4, 9};
  for (int o = 0; o < 3; o++)
    for (int t = 0; t < 4; t++)
      for (int it = 0; it < 2; it++) {
        kiln_dtype idt = it ? KILN_I32 : KILN_I64;
        int64_t x[3] = {tabs[t][1], tabs[t][2], 3};
        int rank = (int)tabs[t][0];
        sls_case(ops[o], rank, x, idt, even, 4, false, false, true, true);
        sls_case(ops[o], rank, x, idt, uneven, 5, false, false, true, true);
        sls_case(ops[o], rank, x, idt, offs, 4, true, false, true, true);
        if (o == 1) sls_case(ops[o], rank, x, idt, uneven, 5, false, true, true, true);
      }
  /* negative_indices = 0, and segments given at run time (lengths and offsets, both types of index) */
  for (int o = 0; o < 3; o++)
    for (int it = 0; it < 2; it++) {
      kiln_dtype idt = it ? KILN_I32 : KILN_I64;
      int64_t x[2] = {50, 64}, x3[3] = {9, 2, 3};
      sls_case(ops[o], 2, x, idt, uneven, 5, false, false, false, true);
      sls_case(ops[o], 2, x, idt, uneven, 5, false, o == 1, it == 0, false);
      sls_case(ops[o], 3, x3, idt, offs, 4, true, false, it == 1, false);
      sls_case(ops[o], 2, x, idt, even, 4, false, false, true, false);
    }
  /* float16 tables [R, 5, 8] and [R, 3] (vload_half), 8-bit rowwise ones of
     64 and 21 values a row (+ 8 bytes of scale and bias), under the plain
     names and Caffe2's Fused8BitRowwise ones */
  static const char *f8[] = {"SparseLengthsSumFused8BitRowwise", "SparseLengthsWeightedSumFused8BitRowwise",
                             "SparseLengthsMeanFused8BitRowwise"};
  for (int o = 0; o < 3; o++)
    for (int it = 0; it < 2; it++) {
      kiln_dtype idt = it ? KILN_I32 : KILN_I64;
      int64_t h3[3] = {12, 5, 8}, h2[2] = {9, 3}, q64[2] = {40, 72}, q21[2] = {9, 29};
      sls_case_t(ops[o], KILN_F16, 3, h3, idt, uneven, 5, false, o == 1, true, it == 0);
      sls_case_t(ops[o], KILN_F16, 2, h2, idt, offs, 4, true, false, it == 1, true);
      sls_case_t(ops[o], KILN_U8, 2, q64, idt, even, 4, false, false, true, true);
      sls_case_t(f8[o], KILN_U8, 2, q64, idt, uneven, 5, false, o == 1, it == 0, false);
      sls_case_t(f8[o], KILN_U8, 2, q21, idt, offs, 4, true, false, true, it == 1);
    }
  /* lengths that do not add up to the 15 indices (less; more, through
     lengths near INT64_MAX whose sum would wrap to 15): declined, the host
     reports them. No t_end (the reference fails on them): the output's
     type [M, 64] float32 is set by hand, so only the segment check can
     decline them. */
  static const int64_t bad_len[][4] = {{5, 5, 0, 0}, {1, INT64_MAX, INT64_MAX, 16}};
  for (int b = 0; b < 2; b++) {
    t_begin(17, "SparseLengthsSum lengths not adding up, %s (declined)", b ? "wrapping" : "less");
    t_in(SH(50, 64));
    t_in_data(KILN_I64, 1, (int64_t[]){15}, NULL);
    for (int64_t k = 0; k < 15; k++) kiln_set_i(&cur->in[1], k, k);
    t_const_i64(bad_len[b], 4, false);
    a_int(t_node_kiln("SparseLengthsSum"), "negative_indices", 1);
    if (kiln_tensor_alloc(&cur->exp[0], KILN_F32, 2, (int64_t[]){4, 64})) exit(2);
    cur->expect_dev = false;
  }
  /* the same shape with good lengths: taken (the hand-set output type is enough) */
  t_begin(17, "SparseLengthsSum good lengths, output type by hand");
  t_in(SH(50, 64));
  t_in_data(KILN_I64, 1, (int64_t[]){15}, NULL);
  for (int64_t k = 0; k < 15; k++) kiln_set_i(&cur->in[1], k, k);
  t_const_i64((int64_t[]){5, 5, 0, 5}, 4, false);
  a_int(t_node_kiln("SparseLengthsSum"), "negative_indices", 1);
  t_end(1e-5, true);
}

/* ------------------------------------------------------------------ */

/* Run-time indices out of range (Gather, ScatterND, SparseLengths): the
 * kernel flags them, the run fails with the host backends' message
 * (kiln_cl_op_checked), and the next run with good indices succeeds (the
 * flag is cleared). Both index types, a too-large and a too-negative index,
 * Gather rows of 4 (the vector form on PoCL) and of 3 (one element per
 * item); SparseLengths' segment mistakes; several bad indices at once. */

/* The case just ended (cur) prepared into its own program (src), built
 * and bound; a failure is counted. */
static kiln_status bind_alone(const kiln_cl_device *dev, kiln_cl_context *ctx, kiln_cl_src *src) {
  tcase *c = cur;
  cl_program p = NULL;
  kiln_status s = prepare(c, dev, src);
  if (!s && c->op) s = kiln_cl_program_build(ctx, src->text, "-cl-std=CL1.2", &p);
  if (!s && c->op) s = kiln_cl_op_bind(c->op, ctx, p);
  kiln_cl_program_free(p);
  CHECK(!s && c->op, "%s: prepare/bind: %s", c->name, kiln_last_error());
  return s ? s : c->op ? KILN_OK : KILN_E_INTERNAL;
}

/* The case just ended (cur) bound on its own program, then run three
 * times with element `at` of graph input `input` (node input order) set to
 * good, bad, good. */
static void bad_value_runs(const kiln_cl_device *dev, kiln_cl_context *ctx, int input, int64_t at, int64_t good,
                           int64_t bad, const char *want) {
  tcase *c = cur;
  kiln_cl_src src = {0};
  kiln_status s = bind_alone(dev, ctx, &src);
  for (int run = 0; run < 3 && !s && c->op; run++) {
    kiln_set_i(&c->in[input], at, run == 1 ? bad : good);
    kiln_tensor got[MAXIO];
    memset(got, 0, sizeof got);
    kiln_error_clear();
    kiln_status r = run_case(c, ctx, got, NULL);
    char msg[300] = "";
    if (run == 1)
      CHECK(r == KILN_E_INVALID_VALUE && strstr(kiln_last_error(), want), "%s: run with the bad index: status %d, '%s'",
            c->name, (int)r, kiln_last_error());
    else
      CHECK(!r && compare(c, 0, &got[0], msg, sizeof msg), "%s: run %d (good indices): %s%s", c->name, run,
            r ? kiln_last_error() : "", msg);
    for (int k = 0; k < MAXIO; k++) kiln_tensor_release(&got[k]);
  }
  kiln_cl_src_free(&src);
  case_free(c);
  n_cases--;
}

/* The case just ended (cur, an op whose input 1 holds 4000 indices) bound
 * on its own program; indices 2999 .. 3999 set out of range (2999 to 70,
 * the others 71 ..) and run 20 times: each run must fail naming `want`,
 * the first bad index by position (the host's choice). */
static void first_bad_runs(const kiln_cl_device *dev, kiln_cl_context *ctx, const char *want) {
  tcase *c = cur;
  kiln_cl_src src = {0};
  kiln_status st = bind_alone(dev, ctx, &src);
  for (int q = 2999; q < 4000; q++) kiln_set_i(&c->in[1], q, q == 2999 ? 70 : 71 + q % 7);
  int wrong = 0;
  char first[300] = "";
  for (int run = 0; run < 20 && !st && c->op; run++) {
    kiln_tensor got[MAXIO];
    memset(got, 0, sizeof got);
    kiln_error_clear();
    kiln_status r = run_case(c, ctx, got, NULL);
    if (!(r == KILN_E_INVALID_VALUE && strstr(kiln_last_error(), want)) && !wrong++)
      snprintf(first, sizeof first, "status %d, '%s'", (int)r, kiln_last_error());
    for (int g = 0; g < MAXIO; g++) kiln_tensor_release(&got[g]);
  }
  CHECK(!wrong, "%s: %d of 20 runs did not name the first bad index (%s), first: %s", c->name, wrong, want, first);
  kiln_cl_src_free(&src);
  case_free(c);
  n_cases--;
}

static void test_bad_index(const kiln_cl_device *dev, kiln_cl_context *ctx) {
  for (int it = 0; it < 4; it++) {
    kiln_dtype idt = it % 2 ? KILN_I32 : KILN_I64;
    int64_t row = it < 2 ? 4 : 3, bad = it < 2 ? 7 : -8;
    t_begin(13, "Gather bad index %lld (%s, rows of %lld)", (long long)bad, kiln_dtype_name(idt), (long long)row);
    t_in(SH(5, row));
    kiln_tensor ind = {0};
    if (kiln_tensor_alloc(&ind, idt, 1, (int64_t[]){3})) exit(2);
    kiln_set_i(&ind, 0, 4), kiln_set_i(&ind, 1, -1), kiln_set_i(&ind, 2, 0);
    t_in_data(idt, 1, (int64_t[]){3}, &ind);
    kiln_tensor_release(&ind);
    t_node1("Gather");
    t_end(0, false);
    char want[96];
    snprintf(want, sizeof want, "index %lld is out of range for a dimension of size 5", (long long)bad);
    bad_value_runs(dev, ctx, 1, 1, -1, bad, want);
  }
  /* SparseLengthsSum (negative_indices = 1: Gather's message), rows of 64 and of 3 */
  for (int it = 0; it < 4; it++) {
    kiln_dtype idt = it % 2 ? KILN_I32 : KILN_I64;
    int64_t row = it < 2 ? 64 : 3, bad = it < 2 ? 9 : -10;
    t_begin(17, "SparseLengthsSum bad index %lld (%s, rows of %lld)", (long long)bad, kiln_dtype_name(idt),
            (long long)row);
    t_in(SH(9, row));
    kiln_tensor ind = {0};
    if (kiln_tensor_alloc(&ind, idt, 1, (int64_t[]){6})) exit(2);
    for (int k = 0; k < 6; k++) kiln_set_i(&ind, k, k - 3);
    t_in_data(idt, 1, (int64_t[]){6}, &ind);
    kiln_tensor_release(&ind);
    t_const_i64((int64_t[]){2, 4}, 2, false);
    a_int(t_node_kiln("SparseLengthsSum"), "negative_indices", 1);
    t_end(1e-5, true);
    char want[96];
    snprintf(want, sizeof want, "index %lld is out of range for a dimension of size 9", (long long)bad);
    bad_value_runs(dev, ctx, 1, 4, 1, bad, want);
  }
  /* Gather with several bad indices (positions 2999 .. 3999, the first with
     value 70): the first by position is named, every time (20 runs) */
  {
    t_begin(13, "Gather several bad indices");
    t_in(SH(50, 8));
    kiln_tensor ind = {0};
    if (kiln_tensor_alloc(&ind, KILN_I64, 1, (int64_t[]){4000})) exit(2);
    for (int q = 0; q < 4000; q++) kiln_set_i(&ind, q, q % 50);
    t_in_data(KILN_I64, 1, (int64_t[]){4000}, &ind);
    kiln_tensor_release(&ind);
    t_node1("Gather");
    t_end(0, false);
    first_bad_runs(dev, ctx, "index 70 is out of range for a dimension of size 50");
  }
  /* SparseLengths with run-time segments: every mistake the host decoder
     names, with its message, between good runs; int32 and int64 segments
     and indices, values that need their high word, both negative_indices */
  static const struct {
    bool offsets, positional, seg32, idx32, neg;
    int input;
    int64_t at, bad;
    const char *want;
  } sb[] = {
      {false, false, true, false, false, 2, 1, -1, "LENGTHS[1] is negative (-1)"},
      {false, false, false, false, false, 2, 1, -1099511627776, "LENGTHS[1] is negative (-1099511627776)"},
      {false, false, true, false, false, 2, 2, 20, "LENGTHS add up to more than the 15 indices (at segment 2)"},
      {false, false, false, false, false, 2, 2, INT64_MAX, "LENGTHS add up to more than the 15 indices (at segment 2)"},
      {false, false, true, false, false, 2, 3, 4, "LENGTHS add up to 14 but INDICES has 15 elements"},
      {false, false, false, true, false, 2, 3, 4, "LENGTHS add up to 14 but INDICES has 15 elements"},
      {false, false, true, false, false, 1, 4, 60, "INDICES[4] = 60 is outside the table's 50 rows"},
      {false, false, true, false, false, 1, 9, -1, "INDICES[9] = -1 is outside the table's 50 rows"},
      {false, false, false, true, false, 1, 14, 50, "INDICES[14] = 50 is outside the table's 50 rows"},
      {false, false, false, false, false, 1, 0, 1099511627779, "INDICES[0] = 1099511627779 is outside the table's 50 rows"},
      {false, false, true, false, true, 1, 6, -51, "index -51 is out of range for a dimension of size 50"},
      {true, false, false, true, true, 1, 2, 50, "index 50 is out of range for a dimension of size 50"},
      {true, false, false, false, false, 2, 0, 2, "OFFSETS[0] is 2; the first segment must start at 0"},
      {true, false, true, false, false, 2, 0, -5, "OFFSETS[0] is -5; the first segment must start at 0"},
      {true, false, false, false, false, 2, 2, 1, "OFFSETS[2] = 1 is outside [3, 15] (offsets must be non-decreasing and at most the 15 indices)"},
      {true, false, true, false, false, 2, 3, 16, "OFFSETS[3] = 16 is outside [3, 15]"},
      {true, false, false, false, false, 2, 3, 1099511627776, "OFFSETS[3] = 1099511627776 is outside [3, 15]"},
      {true, true, false, false, false, 3, 3, 11, "a segment has 8 indices but the positional WEIGHTS only 7"},
      {false, true, true, false, false, 3, 2, 8, "LENGTHS add up to more than the 15 indices (at segment 3)"},
  };
  for (size_t k = 0; k < sizeof sb / sizeof *sb; k++) {
    bool wsum = sb[k].positional;
    t_begin(17, "SparseLengths%s run-time %s %s, indices %s%s: %s", wsum ? "WeightedSum" : "Sum",
            sb[k].seg32 ? "int32" : "int64", sb[k].offsets ? "offsets" : "lengths", sb[k].idx32 ? "int32" : "int64",
            sb[k].neg ? " negative_indices=1" : "", sb[k].want);
    t_in(SH(50, 64));
    if (wsum) t_in(SH(7));
    kiln_tensor ind = {0}, seg = {0};
    if (kiln_tensor_alloc(&ind, sb[k].idx32 ? KILN_I32 : KILN_I64, 1, (int64_t[]){15}) ||
        kiln_tensor_alloc(&seg, sb[k].seg32 ? KILN_I32 : KILN_I64, 1, (int64_t[]){4}))
      exit(2);
    for (int q = 0; q < 15; q++) kiln_set_i(&ind, q, (q * 11) % 50);
    const int64_t lens[4] = {3, 0, 7, 5}, offs[4] = {0, 3, 3, 10};
    for (int q = 0; q < 4; q++) kiln_set_i(&seg, q, sb[k].offsets ? offs[q] : lens[q]);
    t_in_data(ind.dtype, 1, (int64_t[]){15}, &ind);
    t_in_data(seg.dtype, 1, (int64_t[]){4}, &seg);
    kiln_tensor_release(&ind);
    kiln_tensor_release(&seg);
    kiln_node *nd = t_node_kiln(wsum ? "SparseLengthsWeightedSum" : "SparseLengthsSum");
    if (sb[k].offsets) a_int(nd, "offsets", 1);
    if (wsum) a_int(nd, "positional", 1);
    if (sb[k].neg) a_int(nd, "negative_indices", 1);
    t_end(1e-5, true);
    int64_t good = sb[k].input == 1 ? (sb[k].at * 11) % 50 : sb[k].offsets ? offs[sb[k].at] : lens[sb[k].at];
    bad_value_runs(dev, ctx, sb[k].input, sb[k].at, good, sb[k].bad, sb[k].want);
  }
  /* several bad indices in different work items: the lowest position is
     named, every time (20 runs), as the host names it — bag 0 holds 3000
     indices, its last one bad, and each of the 1000 one-index bags after it
     is bad too: an item that kept the first bad index it met would name
     one of those (the bags' items run side by side on llvmpipe). Constant
     and run-time lengths, both negative_indices. */
  for (int form = 0; form < 4; form++) {
    bool neg = form & 1, runtime = form & 2;
    t_begin(17, "SparseLengthsSum several bad indices%s%s", neg ? " negative_indices=1" : "",
            runtime ? " run-time lengths" : "");
    t_in(SH(50, 8));
    kiln_tensor ind = {0}, lt = {0};
    if (kiln_tensor_alloc(&ind, KILN_I64, 1, (int64_t[]){4000}) || kiln_tensor_alloc(&lt, KILN_I64, 1, (int64_t[]){1001}))
      exit(2);
    for (int q = 0; q < 4000; q++) kiln_set_i(&ind, q, q % 50);
    for (int q = 0; q < 1001; q++) kiln_set_i(&lt, q, q ? 1 : 3000);
    t_in_data(KILN_I64, 1, (int64_t[]){4000}, &ind);
    if (runtime) t_in_data(KILN_I64, 1, (int64_t[]){1001}, &lt);
    else {
      int64_t *lv = (int64_t *)lt.data;
      t_const_i64(lv, 1001, false);
    }
    kiln_tensor_release(&ind);
    kiln_tensor_release(&lt);
    kiln_node *nd = t_node_kiln("SparseLengthsSum");
    if (neg) a_int(nd, "negative_indices", 1);
    t_end(1e-5, true);
    first_bad_runs(dev, ctx,
                   neg ? "index 70 is out of range for a dimension of size 50"
                       : "INDICES[2999] = 70 is outside the table's 50 rows");
  }
  /* ScatterND: the second component of a tuple out of range (dimension 1, of 3) */
  for (int it = 0; it < 2; it++) {
    kiln_dtype idt = it ? KILN_I32 : KILN_I64;
    t_begin(16, "ScatterND bad index (%s)", kiln_dtype_name(idt));
    t_in(SH(5, 3, 2));
    kiln_tensor ind = {0};
    if (kiln_tensor_alloc(&ind, idt, 2, (int64_t[]){2, 2})) exit(2);
    kiln_set_i(&ind, 0, 4), kiln_set_i(&ind, 1, 0), kiln_set_i(&ind, 2, -5), kiln_set_i(&ind, 3, 2);
    t_in_data(idt, 2, (int64_t[]){2, 2}, &ind);
    kiln_tensor_release(&ind);
    t_in(SH(2, 2));
    a_str(t_node1("ScatterND"), "reduction", "add");
    t_end(0, false);
    bad_value_runs(dev, ctx, 1, 3, 2, -4, "index -4 is out of range for a dimension of size 3");
  }
}

/* Failures come back as statuses whose messages name the node, with
 * nothing leaked (the ASan build checks the leaks). */
static void test_errors(const kiln_cl_device *dev, kiln_cl_context *ctx) {
  /* bind against a program without the op's kernel */
  t_begin(13, "Softmax for the error tests");
  t_in(SH(2, 3));
  t_node1("Softmax");
  t_end(1e-5, false);
  tcase *c = cur;
  kiln_cl_src src = {0};
  snprintf(c->prefix, sizeof c->prefix, "e_");
  cl_program p = NULL;
  kiln_status s = prepare(c, dev, &src);
  CHECK(!s && c->op, "error tests: prepare: %s", kiln_last_error());
  if (!s && c->op) {
    s = kiln_cl_program_build(ctx, "__kernel void other(__global float *x) { x[0] = 1.0f; }\n", "-cl-std=CL1.2", &p);
    CHECK(!s, "error tests: build: %s", kiln_last_error());
    if (!s) {
      s = kiln_cl_op_bind(c->op, ctx, p);
      CHECK(s != KILN_OK && strstr(kiln_last_error(), "node 'node'") && strstr(kiln_last_error(), "e_softmax"),
            "bind without the kernel fails naming the node and kernel: %s", kiln_last_error());
      if (verbose) printf("  bind error: %s\n", kiln_last_error());
    }
  }
  kiln_cl_program_free(p);
  kiln_cl_src_free(&src);
  case_free(c);
  n_cases--;
  /* enqueue without an input buffer */
  t_begin(13, "MatMul for the error tests");
  t_in(SH(2, 3));
  t_in(SH(3, 2));
  t_node1("MatMul");
  t_end(1e-4, false);
  c = cur;
  memset(&src, 0, sizeof src);
  p = NULL;
  s = prepare(c, dev, &src);
  if (!s && c->op && src.len) s = kiln_cl_program_build(ctx, src.text, "-cl-std=CL1.2", &p); /* kiln's SGEMM */
  if (!s && c->op) s = kiln_cl_op_bind(c->op, ctx, p);
  kiln_cl_program_free(p);
  CHECK(!s && c->op, "error tests: MatMul prepare/bind: %s", kiln_last_error());
  if (!s && c->op) {
    kiln_cl_arg in[2] = {{NULL, 0}, {NULL, 0}}, out[1] = {{NULL, 0}};
    s = kiln_cl_op_enqueue(c->op, ctx, in, out);
    CHECK(s == KILN_E_INTERNAL && strstr(kiln_last_error(), "node 'node'"),
          "enqueue without buffers fails naming the node: %s", kiln_last_error());
    if (verbose) printf("  enqueue error: %s\n", kiln_last_error());
  }
  kiln_cl_src_free(&src);
  case_free(c);
  n_cases--;
}

/* A float32 concrete type of shape (rank, dims). */
static kiln_cl_ttype ttype_f32(int rank, const int64_t *dims) {
  kiln_cl_ttype t;
  memset(&t, 0, sizeof t);
  t.dtype = KILN_F32;
  t.rank = rank;
  memcpy(t.dims, dims, (size_t)rank * sizeof *dims);
  return t;
}

/* kiln_cl_op_addend on the node of the case being built (inputs in, output
 * out): its answer, its text (want_text a part of it), and where it says
 * yes, that kiln_cl_op_prepare takes the node with input 2 absent, as the
 * engine then asks (engine_fuse.c: the host would add the bias twice), with
 * no bias / C prefill kernel in its source. The case is dropped after. */
static void addend_case(const kiln_cl_device *dev, const char *what, const kiln_cl_ttype *in,
                        const kiln_cl_ttype *out, bool want, const char *want_text) {
  const kiln_node *n = &cur->g->nodes[cur->node];
  char add[192];
  bool got = kiln_cl_op_addend(dev, cur->g, n, in, out, "e_", "i", add, sizeof add);
  CHECK(got == want && (got ? strstr(add, want_text) != NULL : !*add), "addend %s: got %d '%s', want %d '%s'", what,
        got, add, want, want ? want_text : "");
  if (got) {
    kiln_cl_ttype in2[3];
    memcpy(in2, in, sizeof in2);
    memset(&in2[2], 0, sizeof in2[2]);
    const kiln_tensor *konst[3] = {0};
    kiln_cl_src src = {0};
    kiln_cl_op *op = NULL;
    kiln_status s = kiln_cl_op_prepare(dev, cur->g, n, in2, out, konst, "ad_", &src, &op);
    bool prefill = src.text && (strstr(src.text, "ad_bias") || strstr(src.text, "ad_gemm_c"));
    CHECK(!s && op && !prefill && !strstr(kiln_cl_op_describe(op), "+C"), "addend %s: the op without input 2: %s, %s",
          what, s ? kiln_last_error() : op ? kiln_cl_op_describe(op) : "declined", prefill ? "a prefill kernel" : "none");
    kiln_cl_op_free(op);
    kiln_cl_src_free(&src);
  }
  case_free(cur);
  n_cases--;
}

/* kiln_cl_all_finite_f32 (a Conv's W known finite keeps the direct
 * kernels' padding skips: opencl/OPS.md, Conv): every length to 70, one
 * non-finite value at every position (inf, -inf, a quiet and a signalling
 * NaN, a NaN with the sign set), 0, 1 and 4 bytes past a 64-byte boundary;
 * and the finite values nearest them (FLT_MAX, denormals, -0) never
 * flagged. No device. */
static void put_u32(unsigned char *p, int i, uint32_t u) { memcpy(p + 4 * i, &u, 4); }

static void test_all_finite(void) {
  static const uint32_t bad[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffc12345u};
  static const uint32_t good[] = {0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x807fffffu, 0x80000000u, 0x3f800000u};
  _Alignas(64) unsigned char buf[64 + 4 * 72];
  static const int offs[] = {0, 1, 4};
  int wrong = 0, runs = 0;
  for (int o = 0; o < 3; o++)
    for (int n = 0; n <= 70; n++) {
      unsigned char *x = buf + 64 + offs[o];
      for (int i = 0; i < n; i++) put_u32(x, i, good[(i * 7 + n) % 6]);
      put_u32(x, n, bad[n % 5]);  /* past the end: never read */
      put_u32(x, -1, bad[0]);     /* before the start */
      wrong += !kiln_cl_all_finite_f32(x, n), runs++;
      for (int at = 0; at < n; at++)
        for (int b = 0; b < 5; b++) {
          put_u32(x, at, bad[b]);
          wrong += kiln_cl_all_finite_f32(x, n), runs++;
          put_u32(x, at, good[(at * 7 + n) % 6]);
        }
    }
  CHECK(!wrong, "kiln_cl_all_finite_f32: %d of %d answers wrong", wrong, runs);
}

static void test_addend(const kiln_cl_device *dev) {
  kiln_cl_ttype in[3], out;
  /* Conv with a bias: its channel is (i / 64) % 16 of [2,16,8,8] */
  t_begin(13, "addend conv");
  t_in(SH(2, 32, 8, 8));
  t_const_f32(SH(16, 32, 3, 3));
  t_const_f32(SH(16));
  a_ints(t_node1("Conv"), "pads", INTS(1, 1, 1, 1));
  in[0] = ttype_f32(SH(2, 32, 8, 8)), in[1] = ttype_f32(SH(16, 32, 3, 3)), in[2] = ttype_f32(SH(16));
  out = ttype_f32(SH(2, 16, 8, 8));
  addend_case(dev, "Conv + bias", in, &out, true, " + e_[((i) / 64) % 16]");
  /* a bias of the wrong length: the op declines it, so must the addend */
  t_begin(13, "addend conv bad bias");
  t_in(SH(2, 32, 8, 8));
  t_const_f32(SH(16, 32, 3, 3));
  t_const_f32(SH(8));
  a_ints(t_node1("Conv"), "pads", INTS(1, 1, 1, 1));
  in[2] = ttype_f32(SH(8));
  addend_case(dev, "Conv + a bias of 8 for 16 channels", in, &out, false, "");
  /* no bias */
  t_begin(13, "addend conv no bias");
  t_in(SH(2, 32, 8, 8));
  t_const_f32(SH(16, 32, 3, 3));
  a_ints(t_node1("Conv"), "pads", INTS(1, 1, 1, 1));
  memset(&in[2], 0, sizeof in[2]);
  addend_case(dev, "Conv without a bias", in, &out, false, "");
  /* Gemm, C [4,1] broadcast over [4,16], beta 2 */
  t_begin(13, "addend gemm");
  t_in(SH(4, 24));
  t_const_f32(SH(16, 24));
  t_const_f32(SH(4, 1));
  kiln_node *g = t_node1("Gemm");
  a_int(g, "transB", 1);
  a_float(g, "beta", 2.0f);
  in[0] = ttype_f32(SH(4, 24)), in[1] = ttype_f32(SH(16, 24)), in[2] = ttype_f32(SH(4, 1));
  out = ttype_f32(SH(4, 16));
  addend_case(dev, "Gemm + beta C[4,1]", in, &out, true, " + 2.0f * e_[((i) / 16) * 1 + ((i) % 16) * 0]");
  /* an empty output: the host's, not the op's */
  t_begin(13, "addend gemm empty");
  t_in(SH(4, 24));
  t_const_f32(SH(16, 24));
  t_const_f32(SH(16));
  a_int(t_node1("Gemm"), "transB", 1);
  in[0] = ttype_f32(SH(0, 24)), in[2] = ttype_f32(SH(16));
  out = ttype_f32(SH(0, 16));
  addend_case(dev, "Gemm with 0 rows", in, &out, false, "");
  /* MatMul has no input 2 */
  t_begin(13, "addend matmul");
  t_in(SH(4, 24));
  t_in(SH(24, 16));
  t_node1("MatMul");
  in[0] = ttype_f32(SH(4, 24)), in[1] = ttype_f32(SH(24, 16));
  memset(&in[2], 0, sizeof in[2]);
  out = ttype_f32(SH(4, 16));
  addend_case(dev, "MatMul", in, &out, false, "");
}

/* kiln_cl_src_printf: pieces with and without conversions, short and
 * longer than the room left (the first one on an empty buffer, the 4096
 * bytes of the first block crossed many times), against one snprintf of
 * each piece into a plain buffer; the text stays NUL-terminated. */
static void test_src_printf(void) {
  kiln_cl_src s = {0};
  size_t cap = 1 << 20, len = 0;
  char *want = malloc(cap);
  char big[3000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  bool ok = want != NULL;
  for (int i = 0; ok && i < 400; i++) {
    kiln_status st;
    int n;
    switch (i % 5) {
    case 0: st = kiln_cl_src_printf(&s, "  plain text, no conversion\n");
      n = snprintf(want + len, cap - len, "  plain text, no conversion\n"); break;
    case 1: st = kiln_cl_src_printf(&s, "v%d = %s * %.9g;%%\n", i, "a_[i]", 1.5 / (i + 1));
      n = snprintf(want + len, cap - len, "v%d = %s * %.9g;%%\n", i, "a_[i]", 1.5 / (i + 1)); break;
    case 2: st = kiln_cl_src_printf(&s, "%s", big + i % 97);
      n = snprintf(want + len, cap - len, "%s", big + i % 97); break;
    case 3: st = kiln_cl_src_printf(&s, "%.*s|", i % 50, big);
      n = snprintf(want + len, cap - len, "%.*s|", i % 50, big); break;
    default: st = kiln_cl_src_printf(&s, "%s", "");
      n = snprintf(want + len, cap - len, "%s", ""); break;
    }
    len += (size_t)n;
    ok = !st && s.len == len && s.text && !memcmp(s.text, want, len) && s.text[len] == 0;
  }
  CHECK(ok, "kiln_cl_src_printf: the same text as snprintf, piece by piece (%zu bytes)", len);
  kiln_cl_src_free(&s);
  free(want);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  bool do_bench = false;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-v"))
      verbose = 1;
    else if (!strcmp(argv[i], "--bench"))
      do_bench = true;
    else if (!strcmp(argv[i], "--bench=gemm"))
      do_bench = true, bench_gemm_only = true;
    else if (!strcmp(argv[i], "-k") && i + 1 < argc)
      only = argv[++i];
  }
  double t0 = now_ms();
  test_all_finite();
  test_src_printf();
  kiln_cl_device_list l;
  if (kiln_cl_devices_enumerate(&l)) {
    printf("opencl_ops: enumerate failed: %s\nopencl_ops: 0 passed, 1 failed\n", kiln_last_error());
    return 1;
  }
  const char *icd = getenv("OCL_ICD_VENDORS");
  if (!l.n) {
    printf("opencl_ops: SKIP: no usable OpenCL device under OCL_ICD_VENDORS=%s (%s)\n", icd ? icd : "(unset)",
           *l.notes ? l.notes : "no reason given");
    kiln_cl_devices_free(&l);
    return 77;
  }
  const kiln_cl_device *dev = &l.devices[0];
  char desc[512];
  kiln_cl_device_describe(dev, desc, sizeof desc);
  printf("device %s\n", desc);
  kiln_cl_context *ctx = NULL;
  if (kiln_cl_context_create(dev, &ctx)) {
    printf("opencl_ops: context: %s\nopencl_ops: 0 passed, 1 failed\n", kiln_last_error());
    kiln_cl_devices_free(&l);
    return 1;
  }
  cases_gemm();
  cases_conv();
  cases_pool();
  cases_reduce();
  cases_norm();
  cases_move();
  cases_sls();
  if (only) { /* keep the matching cases */
    int k = 0;
    for (int i = 0; i < n_cases; i++) {
      if (strstr(cases[i].name, only))
        cases[k++] = cases[i];
      else
        case_free(&cases[i]);
    }
    n_cases = k;
  }
  /* prepare every case into one program */
  kiln_cl_src src = {0};
  double tp = now_ms();
  for (int i = 0; i < n_cases; i++) {
    tcase *c = &cases[i];
    snprintf(c->prefix, sizeof c->prefix, "c%d_", i);
    kiln_status s = prepare(c, dev, &src);
    if (s)
      CHECK(0, "%s: prepare: %s", c->name, kiln_last_error());
    else if (!c->op) {
      CHECK(!c->expect_dev, "%s: declined", c->name);
      declined++;
    } else {
      CHECK(c->expect_dev, "%s: expected a decline, got [%s]", c->name, kiln_cl_op_describe(c->op));
    }
  }
  printf("%d cases prepared in %.0f ms, %zu bytes of OpenCL C\n", n_cases, now_ms() - tp, src.len);
  const char *dump = getenv("KILN_OPS_DUMP"); /* a file to write the program source to */
  if (dump && src.text) {
    FILE *f = fopen(dump, "w");
    if (f) fputs(src.text, f), fclose(f);
  }
  cl_program prog = NULL;
  double tb = now_ms();
  kiln_status s = src.len ? kiln_cl_program_build(ctx, src.text, "-cl-std=CL1.2", &prog) : KILN_OK;
  if (s) {
    CHECK(0, "program build: %.2000s", kiln_last_error());
    if (verbose) printf("%s", src.text);
  }
  printf("program built in %.0f ms\n", now_ms() - tb);
  double tbind = now_ms();
  for (int i = 0; i < n_cases && !s; i++) {
    tcase *c = &cases[i];
    if (!c->op) continue;
    if (kiln_cl_op_bind(c->op, ctx, prog)) {
      CHECK(0, "%s: bind: %s", c->name, kiln_last_error());
      kiln_cl_op_free(c->op);
      c->op = NULL;
    }
  }
  printf("bound in %.0f ms (CLBlast's warm-up started, KILN_CL_CLBLAST_WARM=bind: included)\n", now_ms() - tbind);
  double tr = now_ms();
  for (int i = 0; i < n_cases && !s; i++)
    if (cases[i].op) check_case(&cases[i], ctx);
  printf("ran in %.0f ms\n", now_ms() - tr);
  kiln_cl_program_free(prog);
  kiln_cl_src_free(&src);
  for (int i = 0; i < n_cases; i++) case_free(&cases[i]);
  n_cases = 0;
  test_bad_index(dev, ctx);
  test_errors(dev, ctx);
  test_addend(dev);
  if (do_bench) bench(dev, ctx);
  free(cases);
  kiln_cl_context_free(ctx);
  kiln_cl_devices_free(&l);
  printf("total %.0f ms, %d declined as expected\n", now_ms() - t0, declined);
  printf("opencl_ops: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
