/* tests/opencl_zerocopy: host-memory inputs and outputs used in place on a
 * device that works in host memory (opencl/engine_zerocopy.c) — through
 * the OpenCL engine on the first device the ICD selection offers, with the
 * outputs reserved in the caller's memory as the plugin reserves them.
 * Each run is compared with the reference interpreter, and the plan's
 * counters say what was wrapped or refused:
 *   - page-aligned buffers: every input and output wrapped;
 *   - buffers 4 bytes off: wrapped for the generated kernels and kiln's
 *     SGEMM, refused where CLBlast's GEMM (KILN_CL_GEMM=clblast) reads them;
 *   - an output reserved over its graph's input's memory: refused, still
 *     right (an output that is also the input, over that input, is not a
 *     case any path can serve: the host must not alias them);
 *   - an output's memory as the next run's input, and new buffers each run;
 *   - an output that is also an intermediate, an output that is an input,
 *     an input and an output of a host step (CumSum);
 *   - an output reserved over an input that a buffer copy step (a Reshape)
 *     also reads, zero-copy on and off;
 *   - KILN_CL_ZERO_COPY=0: nothing wrapped, the same bytes; unset: tensors
 *     under 512 KiB are copied (these are 2.5-64 KiB: the test runs with
 *     KILN_CL_ZERO_COPY=all).
 * Exits 77 without a device, or when the device does not report host-
 * unified memory (nothing to test there). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graphbuild.h"
#include "ir/alloc.h"
#include "opencl/engine.h"
#include "reference/exec.h"
#include "testutil.h"

static int passed, failed;
#include "tests/check.h"

static const kiln_cl_device *dev;

/* y = sigmoid(x * scale + bias) - x, z = tanh(y): y is an output and read
 * again for z (one fused kernel). */
static kiln_graph *chain_graph(void) {
  kiln_graph *g = new_graph(17);
  const int64_t dx[] = {64, 256}, db = 256;
  input(g, "x", KILN_F32, 2, dx);
  int bad = gb_f32_ramp(g, "bias", 1, &db, -0.5, 0.01) < 0 || gb_f32_ramp(g, "scale", 0, NULL, 1.5, 0) < 0;
  bad = bad || gb_add(g, "Mul", "x scale", "a") < 0;
  bad = bad || gb_add(g, "Add", "a bias", "b") < 0;
  bad = bad || gb_add(g, "Sigmoid", "b", "c") < 0;
  bad = bad || gb_add(g, "Sub", "c x", "y") < 0;
  bad = bad || gb_add(g, "Tanh", "y", "z") < 0;
  if (bad) exit(2);
  output(g, "y");
  output(g, "z");
  return g;
}

/* y = relu(x @ w + b) (run with KILN_FUSION=0: the MatMul a device op),
 * and x itself as an output. */
static kiln_graph *mm_graph(void) {
  kiln_graph *g = new_graph(17);
  const int64_t dx[] = {32, 64}, dw[] = {64, 48}, db = 48;
  input(g, "x", KILN_F32, 2, dx);
  int bad = gb_f32_ramp(g, "w", 2, dw, -0.3, 0.007) < 0 || gb_f32_ramp(g, "b", 1, &db, -0.2, 0.01) < 0;
  bad = bad || gb_add(g, "MatMul", "x w", "m") < 0;
  bad = bad || gb_add(g, "Add", "m b", "a") < 0;
  bad = bad || gb_add(g, "Relu", "a", "y") < 0;
  if (bad) exit(2);
  output(g, "y");
  output(g, "x");
  return g;
}

/* c = cumsum(x, 1) (a host step), y = relu(c) * x. */
static kiln_graph *host_graph(void) {
  kiln_graph *g = new_graph(17);
  const int64_t dx[] = {16, 40}, one = 1;
  input(g, "x", KILN_F32, 2, dx);
  int bad = gb_cst_i64(g, "axis", -1, &one) < 0;
  bad = bad || gb_add(g, "CumSum", "x axis", "c") < 0;
  bad = bad || gb_add(g, "Relu", "c", "r") < 0;
  bad = bad || gb_add(g, "Mul", "r x", "y") < 0;
  if (bad) exit(2);
  output(g, "c");
  output(g, "y");
  return g;
}

/* Host memory for a run's tensors: one page-aligned pool; a tensor at a
 * byte offset into it. */
static char *pool;
static size_t pool_bytes;

static float *at(size_t off) { return (float *)(void *)(pool + off); }

static void fill(float *p, int64_t n, int seed) {
  for (int64_t i = 0; i < n; i++) p[i] = (float)((double)(((i + seed) * 7919) % 2001) / 500.0 - 2.0);
}

static kiln_cl_plan_stats stats(const kiln_cl_plan *p) {
  kiln_cl_plan_stats st;
  kiln_cl_plan_get_stats(p, &st);
  return st;
}

/* One run of plan p (graph g, one input x) with x at byte offset xo of the
 * pool and output k reserved at byte offset oo[k]; compares every output
 * with the reference run on a copy of x (taken before the run: an output
 * may be reserved over x). *d: the counters' change. Returns 1 when right. */
static int run_one(const char *what, kiln_cl_plan *p, const kiln_graph *g, size_t xo, const size_t *oo,
                   kiln_cl_plan_stats *d) {
  int xv = val(g, "x");
  const kiln_type *xt = &g->values[xv].type;
  int64_t dims[KILN_MAX_RANK], n = 1;
  for (int i = 0; i < xt->rank; i++) n *= (dims[i] = xt->dims[i].value);
  kiln_tensor x = {0}, xc = {0};
  kiln_tensor_wrap(&x, KILN_F32, xt->rank, dims, n, at(xo));
  if (kiln_tensor_copy(&xc, &x)) exit(2);
  const kiln_tensor **bound = kiln_calloc((size_t)g->n_values + 1, sizeof *bound);
  kiln_tensor *ref = kiln_calloc((size_t)g->n_outputs + 1, sizeof *ref);
  kiln_tensor *out = kiln_calloc((size_t)g->n_outputs + 1, sizeof *out);
  if (!bound || !ref || !out) exit(2);
  bound[xv] = &xc;
  if (kiln_ref_run(g, bound, ref)) {
    printf("reference run failed: %s\n", kiln_last_error());
    exit(2);
  }
  bound[xv] = &x;
  for (int k = 0; k < g->n_outputs; k++) { /* reserved, as the plugin does */
    out[k].data = at(oo[k]);
    out[k].capacity = kiln_tensor_bytes(&ref[k]);
  }
  kiln_cl_plan_stats s0 = stats(p);
  kiln_status s = kiln_cl_plan_run(p, g, bound, out);
  kiln_cl_plan_stats s1 = stats(p);
  d->zc_inputs = s1.zc_inputs - s0.zc_inputs;
  d->zc_outputs = s1.zc_outputs - s0.zc_outputs;
  d->zc_refused = s1.zc_refused - s0.zc_refused;
  int ok = !s;
  CHECK(!s, "%s: run: %s", what, kiln_last_error());
  for (int k = 0; k < g->n_outputs && !s; k++) {
    char m[400];
    CHECK(out[k].data == at(oo[k]), "%s: output %d made in its reserved memory", what, k);
    /* the reserved memory itself holds the result */
    kiln_tensor held = {0};
    kiln_tensor_wrap(&held, ref[k].dtype, ref[k].rank, ref[k].dims, ref[k].numel, at(oo[k]));
    int same = tu_compare(&held, &ref[k], 1e-5, 1e-6, m, sizeof m, NULL, NULL);
    CHECK(same, "%s: output %d: %s", what, k, m);
    ok = ok && same;
  }
  for (int k = 0; k < g->n_outputs; k++) {
    kiln_tensor_release(&out[k]);
    kiln_tensor_release(&ref[k]);
  }
  kiln_tensor_release(&xc);
  kiln_free(out);
  kiln_free(ref);
  kiln_free(bound);
  printf("  %-58s wrapped %ld in, %ld out; refused %ld\n", what, d->zc_inputs, d->zc_outputs, d->zc_refused);
  return ok;
}

static kiln_cl_plan *prepare(const kiln_graph *g) {
  kiln_cl_plan *p = NULL;
  if (kiln_cl_plan_prepare(dev, g, &p)) {
    printf("FAIL prepare: %s\n", kiln_last_error());
    exit(1);
  }
  return p;
}

#define MB ((size_t)1 << 20)

static void test_chain(void) {
  kiln_graph *g = chain_graph();
  kiln_cl_plan *p = prepare(g);
  const size_t bytes = 64 * 256 * 4;
  kiln_cl_plan_stats d;
  size_t o_al[] = {1 * MB, 2 * MB}, o_off[] = {1 * MB + 4, 2 * MB + 68};
  run_one("chain: page-aligned", p, g, 0, o_al, &d);
  CHECK(d.zc_inputs == 1 && d.zc_outputs == 2 && d.zc_refused == 0, "chain: page-aligned: x, y and z wrapped");
  run_one("chain: 4 and 68 bytes off a page", p, g, 4, o_off, &d);
  CHECK(d.zc_inputs == 1 && d.zc_outputs == 2, "chain: element-aligned: wrapped (generated kernels only)");
  /* y reserved over x's own memory: both stay where they are (refused) */
  size_t o_x[] = {0, 2 * MB};
  fill(at(0), 64 * 256, 3);
  run_one("chain: y reserved over x", p, g, 0, o_x, &d);
  CHECK(d.zc_inputs == 0 && d.zc_outputs == 1 && d.zc_refused == 2, "chain: y over x: x and y refused, z wrapped");
  /* the last run's output as the next run's input, new buffers each run */
  size_t prev = 2 * MB; /* z of the run above */
  for (int r = 0; r < 3; r++) {
    size_t o[] = {(size_t)(3 + 2 * r) * MB + 16 * (size_t)r, (size_t)(4 + 2 * r) * MB};
    char what[96];
    snprintf(what, sizeof what, "chain: run %d reads the previous run's z", r);
    run_one(what, p, g, prev, o, &d);
    CHECK(d.zc_inputs == 1 && d.zc_outputs == 2, "%s: wrapped", what);
    prev = o[1];
  }
  /* the same run with zero-copy off: nothing wrapped, the same bytes */
  fill(at(0), 64 * 256, 5);
  size_t o_on[] = {1 * MB, 2 * MB}, o_off2[] = {3 * MB, 4 * MB};
  run_one("chain: zero-copy on", p, g, 0, o_on, &d);
  setenv("KILN_CL_ZERO_COPY", "0", 1);
  run_one("chain: KILN_CL_ZERO_COPY=0", p, g, 0, o_off2, &d);
  CHECK(d.zc_inputs == 0 && d.zc_outputs == 0 && d.zc_refused == 0, "chain: KILN_CL_ZERO_COPY=0 wraps nothing");
  unsetenv("KILN_CL_ZERO_COPY");
  size_t o_def[] = {5 * MB, 6 * MB};
  run_one("chain: KILN_CL_ZERO_COPY unset (64 KiB tensors)", p, g, 0, o_def, &d);
  CHECK(d.zc_inputs == 0 && d.zc_outputs == 0 && d.zc_refused == 0, "chain: by default 64 KiB tensors are copied");
  setenv("KILN_CL_ZERO_COPY", "all", 1);
  CHECK(!memcmp(at(1 * MB), at(3 * MB), bytes) && !memcmp(at(2 * MB), at(4 * MB), bytes) &&
            !memcmp(at(1 * MB), at(5 * MB), bytes) && !memcmp(at(2 * MB), at(6 * MB), bytes),
        "chain: zero-copy on, off and by default give the same bytes");
  kiln_cl_plan_release(p);
  kiln_graph_free(g);
}

/* The MatMul a device op (KILN_FUSION=0) through kiln's SGEMM kernel and
 * through CLBlast (KILN_CL_GEMM): x 4 bytes off a page is wrapped for
 * kiln's kernel (element access), refused for CLBlast's (vector-typed
 * pointers: 128-byte alignment). */
static void test_mm(const char *gemm) {
  kiln_graph *g = mm_graph();
  setenv("KILN_FUSION", "0", 1);
  setenv("KILN_CL_GEMM", gemm, 1);
  kiln_cl_plan *p = prepare(g);
  unsetenv("KILN_FUSION");
  unsetenv("KILN_CL_GEMM");
  kiln_cl_plan_stats d;
  char what[96];
  fill(at(0), 32 * 64, 7);
  size_t o_al[] = {1 * MB, 2 * MB}, o_off[] = {1 * MB + 4, 2 * MB + 4};
  snprintf(what, sizeof what, "matmul (%s): page-aligned", gemm);
  run_one(what, p, g, 0, o_al, &d);
  kiln_cl_plan_stats st = stats(p);
  printf("  (device ops %d, kernels %d, host nodes %d)\n", st.device_ops, st.kernels, st.host_nodes);
  CHECK(st.device_ops >= 1, "matmul (%s): the MatMul is a device op", gemm);
  CHECK(d.zc_inputs == 1 && d.zc_outputs == 2 && d.zc_refused == 0, "%s: x, y and x's copy wrapped", what);
  fill(at(4), 32 * 64, 8);
  snprintf(what, sizeof what, "matmul (%s): 4 bytes off a page", gemm);
  run_one(what, p, g, 4, o_off, &d);
  bool blas = !strcmp(gemm, "clblast");
  CHECK(d.zc_inputs == (blas ? 0 : 1) && d.zc_outputs == 2 && d.zc_refused == (blas ? 1 : 0),
        "%s: x %s, the outputs wrapped", what, blas ? "refused (CLBlast reads it)" : "wrapped");
  kiln_cl_plan_release(p);
  kiln_graph_free(g);
}

/* y = relu(x) * x over 1M floats (4 MiB): wrapped by default. */
static void test_default_size(void) {
  kiln_graph *g = new_graph(17);
  const int64_t dx[] = {1024, 1024};
  input(g, "x", KILN_F32, 2, dx);
  if (gb_add(g, "Relu", "x", "r") < 0 || gb_add(g, "Mul", "r x", "y") < 0) exit(2);
  output(g, "y");
  kiln_cl_plan *p = prepare(g);
  kiln_cl_plan_stats d;
  fill(at(16 * MB), 1024 * 1024, 13);
  size_t o[] = {24 * MB + 16};
  unsetenv("KILN_CL_ZERO_COPY");
  run_one("4 MiB: KILN_CL_ZERO_COPY unset", p, g, 16 * MB, o, &d);
  CHECK(d.zc_inputs == 1 && d.zc_outputs == 1, "4 MiB: wrapped by default");
  setenv("KILN_CL_ZERO_COPY", "all", 1);
  kiln_cl_plan_release(p);
  kiln_graph_free(g);
}

static void test_host_step(void) {
  kiln_graph *g = host_graph();
  kiln_cl_plan *p = prepare(g);
  kiln_cl_plan_stats d;
  fill(at(0), 16 * 40, 11);
  size_t o[] = {1 * MB, 2 * MB};
  run_one("host step: page-aligned", p, g, 0, o, &d);
  kiln_cl_plan_stats st = stats(p);
  printf("  (device ops %d, kernels %d, host nodes %d)\n", st.device_ops, st.kernels, st.host_nodes);
  CHECK(st.host_nodes >= 1, "host step: CumSum runs on the host");
  CHECK(d.zc_inputs == 1 && d.zc_outputs == 2, "host step: x, c and y wrapped");
  size_t o2[] = {3 * MB + 12, 4 * MB + 8};
  run_one("host step: the last c as x, 12 and 8 bytes off", p, g, 1 * MB, o2, &d);
  CHECK(d.zc_inputs == 1 && d.zc_outputs == 2, "host step: element-aligned: wrapped");
  kiln_cl_plan_release(p);
  kiln_graph_free(g);
}

/* z = x @ w (long enough to be running while the run's outputs are set up),
 * y = Reshape(x) (a buffer copy step, opencl/ENGINE.md "Dense views copied
 * as buffers"); z reserved over x's memory. The copy reads x's device buffer,
 * written at the run's start: a copy from x's host bytes queued without a
 * wait read them after the host's slot for z over them was cleared (y all
 * zeros on both drivers). */
static void test_copy_over_input(void) {
  kiln_graph *g = new_graph(17);
  const int64_t dx[] = {256, 1024}, dw[] = {1024, 1024}, shp[] = {512, 512};
  input(g, "x", KILN_F32, 2, dx);
  /* w all zeros: z exactly 0 whatever the order of the sums (the GEMM does every product all the same) */
  int bad = gb_f32_ramp(g, "w", 2, dw, 0.0, 0.0) < 0 || gb_cst_i64(g, "s", 2, shp) < 0;
  bad = bad || gb_add(g, "MatMul", "x w", "z") < 0 || gb_add(g, "Reshape", "x s", "y") < 0;
  if (bad) exit(2);
  output(g, "z");
  output(g, "y");
  kiln_cl_plan *p = prepare(g);
  kiln_cl_plan_stats st = stats(p), d;
  CHECK(st.copies == 1, "copy over input: the Reshape is a buffer copy step (%d copies)", st.copies);
  for (int zc = 1; zc >= 0; zc--) {
    setenv("KILN_CL_ZERO_COPY", zc ? "all" : "0", 1);
    fill(at(0), 256 * 1024, 17 + zc);
    size_t o[] = {0, 2 * MB};
    run_one(zc ? "copy over input: z over x, zero-copy" : "copy over input: z over x, KILN_CL_ZERO_COPY=0", p, g, 0, o,
            &d);
  }
  setenv("KILN_CL_ZERO_COPY", "all", 1);
  kiln_cl_plan_release(p);
  kiln_graph_free(g);
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  setenv("KILN_CL_ZERO_COPY", "all", 1); /* these tensors are small */
  const kiln_cl_device_list *l = kiln_cl_engine_devices();
  if (!l->n) {
    printf("skipped: no OpenCL device (%s)\n", l->notes ? l->notes : "");
    return 77;
  }
  dev = &l->devices[0];
  printf("device: %s (%s), host-unified memory: %s\n", dev->name, dev->driver_version,
         dev->host_unified ? "yes" : "no");
  if (!dev->host_unified) {
    printf("skipped: the device does not work in host memory\n");
    return 77;
  }
  pool_bytes = 32 * MB;
  if (posix_memalign((void **)&pool, 4096, pool_bytes)) return 2;
  memset(pool, 0, pool_bytes);
  fill(at(0), 64 * 256, 1);
  test_chain();
  test_mm("kiln");
  test_mm("clblast");
  test_host_step();
  test_default_size();
  test_copy_over_input();
  free(pool);
  kiln_cl_engine_shutdown();
  printf("opencl_zerocopy: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
