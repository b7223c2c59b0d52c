/* opencl/engine_run: running a compiled variant — inputs written to their
 * buffers, the steps enqueued in order on the device's in-order queue (a
 * host step reads its inputs back, runs the reference kernel and writes
 * its outputs), the outputs read back; and the KILN_PROFILE table. */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/alloc.h"
#include "opencl/cache.h"
#include "opencl/engine_int.h"
#include "reference/exec.h"
#include "reference/ops.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Value w's concrete dims (compile made sure they are constants). */
static void dims_of(const kiln_cl_variant *v, int w, int *rank, int64_t *dims) {
  const kiln_vshape *x = &v->sh->v[w];
  *rank = x->rank;
  for (int d = 0; d < x->rank; d++)
    if (!kiln_dimx_is_const(v->sh->tab, x->dims[d], &dims[d])) dims[d] = 0;
  for (int k = 0; k < v->sym_count && v->sym_val[w].dep; k++) /* this run's sizes of the symbolic axes */
    if (v->sym_val[w].ax[k] >= 0) dims[v->sym_val[w].ax[k]] = kiln_cl_sym_scale(v, k, dims[v->sym_val[w].ax[k]]);
}

/* The buffer holding value w: the host's cl_mem bound to it for this run,
 * else its own. */
static cl_mem mem_of(const kiln_cl_variant *v, int w) {
  return v->bind && v->bind[w] ? v->bind[w] : v->place[w].mem;
}

/* A dense host copy of value w read from the device into t (allocated). */
static kiln_status read_value(kiln_cl_context *ctx, const kiln_cl_variant *v, int w, kiln_tensor *t) {
  int rank;
  int64_t dims[KILN_MAX_RANK];
  dims_of(v, w, &rank, dims);
  kiln_status s = kiln_tensor_alloc(t, v->sh->v[w].dtype, rank, dims);
  if (s) return s;
  cl_mem m = mem_of(v, w);
  size_t n = kiln_tensor_bytes(t);
  if (!n) return KILN_OK;
  if (!m) return kiln_fail(KILN_E_INTERNAL, "value '%s' has no device buffer", v->g->values[w].name);
  size_t outer = 0, row = 0, run = 0;
  cl_int e;
  if (kiln_cl_sym_box(v, w, v->place[w].bytes, &outer, &row, &run)) { /* a sub-box of the bound's layout */
    size_t zero[3] = {0, 0, 0}, region[3] = {run, outer, 1};
    e = clEnqueueReadBufferRect(ctx->queue, m, CL_TRUE, zero, zero, region, row, 0, run, 0, t->data, 0, NULL, NULL);
  } else {
    e = clEnqueueReadBuffer(ctx->queue, m, CL_TRUE, 0, n, t->data, 0, NULL, NULL);
  }
  if (e) return kiln_cl_fail(e, "reading '%s' (%zu bytes) back from %s (%s)", v->g->values[w].name, n, ctx->id,
                             ctx->name);
  return KILN_OK;
}

static kiln_status write_value(kiln_cl_context *ctx, const kiln_cl_variant *v, int w, const kiln_tensor *t) {
  const kiln_cl_place *pl = &v->place[w];
  cl_mem m = mem_of(v, w);
  size_t n = kiln_tensor_bytes(t);
  if (!n || !m) return KILN_OK;
  if (n != (size_t)kiln_cl_sym_at(v, w, (int64_t)pl->bytes))
    return kiln_fail(KILN_E_INTERNAL, "value '%s': %zu bytes made, %zu planned", v->g->values[w].name, n, pl->bytes);
  const void *src = t->data;
  kiln_tensor dense = {0};
  if (t->strided) { /* never from the reference kernels, but be safe */
    kiln_status s = kiln_tensor_copy(&dense, t);
    if (s) return s;
    src = dense.data;
  }
  size_t outer = 0, row = 0, run = 0;
  cl_int e;
  if (kiln_cl_sym_box(v, w, pl->bytes, &outer, &row, &run)) { /* into a sub-box of the bound's layout */
    size_t zero[3] = {0, 0, 0}, region[3] = {run, outer, 1};
    e = clEnqueueWriteBufferRect(ctx->queue, m, CL_TRUE, zero, zero, region, row, 0, run, 0, src, 0, NULL, NULL);
  } else {
    e = clEnqueueWriteBuffer(ctx->queue, m, CL_TRUE, 0, n, src, 0, NULL, NULL);
  }
  kiln_tensor_release(&dense);
  if (e) return kiln_cl_fail(e, "writing '%s' (%zu bytes) to %s (%s)", v->g->values[w].name, n, ctx->id, ctx->name);
  return KILN_OK;
}

/* outer blocks of bytes each from src (every sp bytes) to dst (every dp):
 * a padded value's run between the host's dense cl_mem and the bound's
 * layout (a copy per block: clEnqueueCopyBufferRect crashed in PoCL 3.1
 * here, where rusticl ran it) */
static cl_int copy_box(kiln_cl_context *ctx, cl_mem src, cl_mem dst, size_t outer, size_t bytes, size_t sp, size_t dp) {
  cl_int e = CL_SUCCESS;
  for (size_t o = 0; o < outer && !e; o++)
    e = clEnqueueCopyBuffer(ctx->queue, src, dst, o * sp, o * dp, bytes, 0, NULL, NULL);
  return e;
}

/* The host fallback: node i's reference kernel on host copies. vin[u] is
 * the host tensor of a graph input or weight (NULL: on the device). */
static kiln_status run_host(kiln_cl_context *ctx, const kiln_cl_variant *v, int i, const kiln_tensor *const *vin) {
  const kiln_graph *g = v->g;
  const kiln_node *n = &g->nodes[i];
  const kiln_op_def *d = kiln_ref_find_op(n->domain, n->op_type);
  if (!d) return kiln_fail(KILN_E_UNSUPPORTED_OP, "no kernel for %s", n->op_type);
  kiln_status s = KILN_OK;
  const kiln_tensor **ins = kiln_calloc((size_t)n->n_in + 1, sizeof *ins);
  kiln_tensor *tmp = kiln_calloc((size_t)n->n_in + 1, sizeof *tmp);
  kiln_tensor *res = kiln_calloc((size_t)n->n_out + 1, sizeof *res);
  bool *used = kiln_calloc((size_t)n->n_out + 1, sizeof *used);
  if (!ins || !tmp || !res || !used) s = kiln_fail(KILN_E_NOMEM, "out of memory running a node");
  for (int k = 0; k < n->n_in && !s; k++) {
    int u = n->in[k];
    if (u < 0) continue;
    for (int j = 0; j < k && !ins[k]; j++) /* the same value twice: one read */
      if (n->in[j] == u) ins[k] = ins[j];
    if (ins[k]) continue;
    if (vin[u]) {
      ins[k] = vin[u];
    } else if (k == 0 && (!strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size")) && !*n->domain) {
      int rank; /* these read the dims only: nothing to read back */
      int64_t dims[KILN_MAX_RANK], numel = 1;
      dims_of(v, u, &rank, dims);
      for (int d = 0; d < rank; d++) numel *= dims[d];
      kiln_tensor_wrap(&tmp[k], v->sh->v[u].dtype, rank, dims, numel, NULL);
      ins[k] = &tmp[k];
    } else if (!(s = read_value(ctx, v, u, &tmp[k]))) {
      ins[k] = &tmp[k];
    }
  }
  for (int k = 0; used && k < n->n_out; k++) used[k] = n->out[k] >= 0;
  if (!s) {
    kiln_op_call call = {g, n, n->opset, n->n_in, ins, n->n_out, res, used};
    s = d->run(&call);
  }
  for (int k = 0; k < n->n_out && !s; k++) {
    int w = n->out[k];
    if (w < 0) continue;
    int rank;
    int64_t dims[KILN_MAX_RANK];
    dims_of(v, w, &rank, dims);
    if (res[k].dtype != v->sh->v[w].dtype || res[k].rank != rank)
      s = kiln_fail(KILN_E_INTERNAL, "output %d: shape inference said %s rank %d, the kernel made %s rank %d", k,
                    kiln_dtype_name(v->sh->v[w].dtype), rank, kiln_dtype_name(res[k].dtype), res[k].rank);
    for (int e = 0; e < rank && !s; e++)
      if (res[k].dims[e] != dims[e])
        s = kiln_fail(KILN_E_INTERNAL, "output %d, dim %d: shape inference said %lld, the kernel made %lld", k, e,
                      (long long)dims[e], (long long)res[k].dims[e]);
    if (!s) s = write_value(ctx, v, w, &res[k]);
  }
  for (int k = 0; res && k < n->n_out; k++) kiln_tensor_release(&res[k]);
  for (int k = 0; tmp && k < n->n_in; k++) kiln_tensor_release(&tmp[k]);
  kiln_free(ins);
  kiln_free(tmp);
  kiln_free(res);
  kiln_free(used);
  return s;
}

/* One timed step: the table's sums, and (KILN_TRACE) an event starting at
 * host time t0_ns. */
static void prof_add(kiln_cl_plan *p, int e, double t0_ns, double ns) {
  if (e < 0 || e >= p->n_prof) return;
  p->prof[e].count++;
  p->prof[e].ns += ns;
  if (!p->trace || p->n_trace >= (1 << 20)) return;
  if (p->n_trace == p->cap_trace) {
    int cap = p->cap_trace ? 2 * p->cap_trace : 256;
    struct kiln_cl_trace_ev *q = kiln_realloc(p->trace_ev, sizeof *q * (size_t)cap);
    if (!q) return;
    p->trace_ev = q;
    p->cap_trace = cap;
  }
  p->trace_ev[p->n_trace++] = (struct kiln_cl_trace_ev){e, t0_ns, ns};
}

/* A padded symbolic dim: kernel st over the run's rows of each of the
 * run's blocks of its outputs (sym_st), one launch per block at the
 * block's global offset (a work-item kernel's get_global_id, a
 * reduction's group offset: codegen.h group_offset); one launch over the
 * run's blocks where their rows are whole. */
static kiln_status run_gen_box(kiln_cl_plan *p, kiln_cl_context *ctx, kiln_cl_variant *v, const kiln_cl_step *st) {
  kiln_cl_kernel *k = &v->kern[st->kern];
  const kiln_cl_symstep *ss = &v->sym_st[st - v->steps];
  size_t outer = (size_t)ss->box, local = v->sig[st->kern].local, unit = local ? local : 1;
  size_t per = (size_t)v->sig[st->kern].n_items / unit / outer, run = (size_t)kiln_cl_sym_scale(v, ss->row, (int64_t)per);
  size_t blocks = (size_t)kiln_cl_sym_scale(v, ss->blk, (int64_t)outer);
  if (run == per) run *= blocks, blocks = 1; /* whole rows: the run's blocks are a prefix */
  if (local) { /* (as run_gen: a power of two the kernel allows) */
    size_t lim = k->wg_size < ctx->max_work_item_size0 ? k->wg_size : ctx->max_work_item_size0;
    while (local > 1 && local > lim) local /= 2;
  }
  unit = local ? local : 1;
  double w0 = p->profile ? now_ns() : 0;
  for (size_t o = 0; o < blocks && run; o++) {
    size_t off = o * per * unit, gsz = run * unit;
    cl_int e = clEnqueueNDRangeKernel(ctx->queue, k->k, 1, &off, &gsz, local ? &local : NULL, 0, NULL, NULL);
    if (e) return kiln_cl_fail(e, "launching OpenCL kernel '%s' on %s (%s)", k->name, ctx->id, ctx->name);
  }
  if (p->profile) { /* wall time of the launches */
    kiln_status s = kiln_cl_finish(ctx);
    if (s) return s;
    prof_add(p, st->prof, w0, now_ns() - w0);
  }
  return KILN_OK;
}

static kiln_status run_gen(kiln_cl_plan *p, kiln_cl_context *ctx, kiln_cl_variant *v, const kiln_cl_step *st) {
  kiln_cl_kernel *k = &v->kern[st->kern];
  size_t n = (size_t)v->sig[st->kern].n_items, local = v->sig[st->kern].local;
  if (!n) return KILN_OK;
  /* symbolic batch, fewer rows than compiled: the run's items (rows, or a
     work-group per row), launched exactly (the kernel's guard is the bound's) */
  bool exact = false;
  int sym = -1, mode = kiln_cl_sym_mode(v, (int)(st - v->steps), &sym);
  if (mode == 2) return run_gen_box(p, ctx, v, st);
  if (mode == 1) {
    n = (size_t)kiln_cl_sym_scale(v, sym, (int64_t)n);
    exact = !local;
  }
  if (local && !v->sig[st->kern].n_obs) { /* work-group kernels (engine_fuse reductions): groups of a power of two
                                            the kernel allows (they loop over any); observed kernels are sized
                                            by their launcher */
    size_t groups = n / local, lim = k->wg_size < ctx->max_work_item_size0 ? k->wg_size : ctx->max_work_item_size0;
    while (local > 1 && local > lim) local /= 2;
    n = groups * local;
  }
  if (exact && !p->profile) {
    cl_int e = clEnqueueNDRangeKernel(ctx->queue, k->k, 1, NULL, &n, NULL, 0, NULL, NULL);
    return e ? kiln_cl_fail(e, "launching OpenCL kernel '%s' on %s (%s)", k->name, ctx->id, ctx->name) : KILN_OK;
  }
  if (!p->profile) return kiln_cl_launch_1d(ctx, k, n, local, NULL);
  size_t gsz = exact ? n : kiln_cl_pad(n, local ? local : KILN_CL_GLOBAL_PAD);
  double w0 = now_ns();
  cl_event ev = NULL;
  cl_int e = clEnqueueNDRangeKernel(ctx->queue, k->k, 1, NULL, &gsz, local ? &local : NULL, 0, NULL, &ev);
  if (e) return kiln_cl_fail(e, "launching OpenCL kernel '%s' on %s (%s)", k->name, ctx->id, ctx->name);
  e = clWaitForEvents(1, &ev);
  cl_ulong t0 = 0, t1 = 0;
  if (!e) e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
  if (!e) e = clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
  clReleaseEvent(ev);
  if (e) return kiln_cl_fail(e, "OpenCL kernel '%s' on %s (%s)", k->name, ctx->id, ctx->name);
  /* a driver without event timestamps (rusticl reports 0): wall time */
  prof_add(p, st->prof, w0, t1 > t0 ? (double)(t1 - t0) : now_ns() - w0);
  return KILN_OK;
}

static kiln_status run_step(kiln_cl_plan *p, kiln_cl_context *ctx, kiln_cl_variant *v, const kiln_cl_step *st,
                            const kiln_tensor *const *vin) {
  const kiln_node *n = &v->g->nodes[st->node];
  if (st->kind == KILN_CL_STEP_GEN) return run_gen(p, ctx, v, st);
  double t0 = p->profile ? now_ns() : 0;
  /* device steps are timed between two markers (OpenCL event times) */
  cl_event m0 = NULL;
  if (p->profile && st->kind != KILN_CL_STEP_HOST && clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &m0)) m0 = NULL;
  kiln_status s = KILN_OK;
  if (st->kind == KILN_CL_STEP_COPY) {
    const kiln_cl_place *b = &v->place[n->out[0]];
    cl_mem am = mem_of(v, n->in[0]), bm = mem_of(v, n->out[0]);
    /* (a padded variant copies the bound's layout whole) */
    size_t bytes = v->sym_padded ? b->bytes : (size_t)kiln_cl_sym_at(v, n->out[0], (int64_t)b->bytes);
    /* on the device, queued: a graph input's buffer holds its bytes since the run's start (a write of its host
       bytes here would wait for the steps before it — PoCL's embedding_bag 0.50 -> 0.55 ms a run — or, queued
       without a wait, read them after the host's output slots over them were cleared) */
    if (bytes && am && bm) {
      cl_int e = clEnqueueCopyBuffer(ctx->queue, am, bm, 0, 0, bytes, 0, NULL, NULL);
      if (e) s = kiln_cl_fail(e, "copying %zu bytes on %s (%s)", bytes, ctx->id, ctx->name);
    } else if (b->bytes && vin[n->in[0]]) { /* an input without a device buffer (not met: a copy step's input is
                                              placed as a device read): its host bytes, blocking */
      s = write_value(ctx, v, n->out[0], vin[n->in[0]]);
    } else if (bytes) {
      s = kiln_cl_fail(CL_INVALID_MEM_OBJECT, "copying %zu bytes on %s (%s)", bytes, ctx->id, ctx->name);
    }
  } else if (st->kind == KILN_CL_STEP_OP) {
    kiln_cl_arg in[64], out[64];
    for (int k = 0; k < n->n_in; k++) {
      int u = n->in[k];
      in[k] = u < 0                   ? (kiln_cl_arg){NULL, 0}
              : v->bind && v->bind[u] ? (kiln_cl_arg){v->bind[u], 0}
                                      : (kiln_cl_arg){v->place[u].base, v->place[u].offset};
    }
    for (int k = 0; k < n->n_out; k++) {
      int w = n->out[k];
      out[k] = w < 0                   ? (kiln_cl_arg){NULL, 0}
               : v->bind && v->bind[w] ? (kiln_cl_arg){v->bind[w], 0}
                                       : (kiln_cl_arg){v->place[w].base, v->place[w].offset};
    }
    int k = (int)(st - v->steps);
    int sym = -1, mode = kiln_cl_sym_mode(v, k, &sym);
    const kiln_cl_symstep *ss = mode ? &v->sym_st[k] : NULL;
    s = mode == 2 ? kiln_cl_op_enqueue_box(st->op, ctx, in, out, ss->box, kiln_cl_sym_scale(v, ss->blk, ss->box),
                                           v->sym_n[ss->row], v->sym_bound[ss->row])
        : mode == 1 ? kiln_cl_op_enqueue_rows(st->op, ctx, in, out, v->sym_n[sym], v->sym_bound[sym])
                    : kiln_cl_op_enqueue(st->op, ctx, in, out);
  } else {
    s = run_host(ctx, v, st->node, vin);
  }
  if (p->profile && !s && m0) {
    cl_event m1 = NULL;
    cl_ulong a = 0, b = 0;
    cl_int e = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, &m1);
    if (!e) e = clWaitForEvents(1, &m1);
    if (!e) e = clGetEventProfilingInfo(m0, CL_PROFILING_COMMAND_END, sizeof a, &a, NULL);
    if (!e) e = clGetEventProfilingInfo(m1, CL_PROFILING_COMMAND_END, sizeof b, &b, NULL);
    if (!e) prof_add(p, st->prof, t0, b > a ? (double)(b - a) : now_ns() - t0);
    if (m1) clReleaseEvent(m1);
    if (e) s = kiln_cl_fail(e, "profiling a step on %s (%s)", ctx->id, ctx->name);
  } else if (p->profile && !s) {
    s = kiln_cl_finish(ctx);
    prof_add(p, st->prof, t0, now_ns() - t0);
  }
  if (m0) clReleaseEvent(m0);
  return s;
}

/* Output o's device buffer mem (the host's) can take n bytes. */
static kiln_status check_out_mem(const kiln_graph *g, int o, cl_mem mem, size_t n) {
  size_t size = 0;
  cl_int e = clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof size, &size, NULL);
  if (e) return kiln_cl_fail(e, "output '%s': querying its OpenCL buffer", g->values[g->outputs[o]].name);
  if (size < n)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "output '%s': the graph computed %zu bytes, its OpenCL buffer holds %zu",
                     g->values[g->outputs[o]].name, n, size);
  return KILN_OK;
}

/* Host tensor t into the host's device buffer mem (blocking; t may be a view). */
static kiln_status write_mem(kiln_cl_context *ctx, const kiln_graph *g, int o, const kiln_tensor *t, cl_mem mem) {
  size_t n = kiln_tensor_bytes(t);
  kiln_status s = check_out_mem(g, o, mem, n);
  if (s || !n) return s;
  const void *src = t->data;
  kiln_tensor dense = {0};
  if (t->strided) {
    if ((s = kiln_tensor_copy(&dense, t))) return s;
    src = dense.data;
  }
  cl_int e = clEnqueueWriteBuffer(ctx->queue, mem, CL_TRUE, 0, n, src, 0, NULL, NULL);
  kiln_tensor_release(&dense);
  if (e) return kiln_cl_fail(e, "writing output '%s' (%zu bytes) to its OpenCL buffer", g->values[g->outputs[o]].name, n);
  return KILN_OK;
}

/* The storage a cl_mem covers: its root buffer and byte range. */
static void mem_range(cl_mem m, cl_mem *root, size_t *off, size_t *size) {
  *root = NULL;
  *off = *size = 0;
  if (clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof *root, root, NULL) || !*root) *root = m;
  else if (clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof *off, off, NULL)) *off = 0;
  if (clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof *size, size, NULL)) *size = SIZE_MAX - *off;
}

static bool mem_overlap(cl_mem a, cl_mem b) {
  cl_mem ra, rb;
  size_t oa, sa, ob, sb;
  mem_range(a, &ra, &oa, &sa);
  mem_range(b, &rb, &ob, &sb);
  return ra == rb && oa < ob + sb && ob < oa + sa;
}

/* The steps that touch each value in the memory planner's schedule:
 * first[w]..last[w] (inclusive; the read of the graph outputs is the step
 * after the last; first > last: untouched). */
static void lifetimes(const kiln_cl_variant *v, int *first, int *last) {
  const kiln_schedule *ms = v->sched;
  for (int w = 0; w < v->g->n_values; w++) first[w] = INT_MAX, last[w] = -1;
  for (int k = 0; ms && k < ms->n_steps; k++) {
    const kiln_step *x = &ms->steps[k];
    for (int r = 0; r < x->n_reads + x->n_writes; r++) {
      int w = r < x->n_reads ? x->reads[r] : x->writes[r - x->n_reads];
      if (w < 0 || w >= v->g->n_values) continue;
      if (k < first[w]) first[w] = k;
      if (k > last[w]) last[w] = k;
    }
  }
}

/* Every access to value w the memory planner saw is one that this file
 * redirects to a bound buffer (a generated kernel's argument, a device
 * op's, copy's or host step's node input or output): only then may w live
 * in the host's buffer for a run. A step that reaches w some other way
 * keeps w in its own buffer. */
static bool routes_known(const kiln_cl_variant *v, int w) {
  const kiln_schedule *ms = v->sched;
  if (!ms || ms->n_steps < v->n_steps) return false;
  for (int k = 0; k < v->n_steps; k++) {
    const kiln_step *x = &ms->steps[k];
    bool touches = false, ok = false;
    for (int r = 0; r < x->n_reads && !touches; r++) touches = x->reads[r] == w;
    for (int r = 0; r < x->n_writes && !touches; r++) touches = x->writes[r] == w;
    if (!touches) continue;
    const kiln_cl_step *st = &v->steps[k];
    const kiln_node *n = &v->g->nodes[st->node];
    if (st->kind == KILN_CL_STEP_GEN) {
      for (int a = 0; a < v->sig[st->kern].n_args && !ok; a++) ok = v->sig[st->kern].args[a].value == w;
    } else if (st->kind == KILN_CL_STEP_COPY) {
      ok = n->in[0] == w || n->out[0] == w;
    } else {
      for (int i = 0; i < n->n_in && !ok; i++) ok = n->in[i] == w;
      for (int i = 0; i < n->n_out && !ok; i++) ok = n->out[i] == w;
    }
    if (!ok) return false;
  }
  return true;
}

/* Output o (value w) may be made in the host's buffer mem_out[o] itself:
 * w is computed on the device, it is no input or weight, no other value
 * whose lifetime meets w's shares a byte of its place (a value that reuses
 * the bytes of a dead one is fine: each value is written by its own
 * producer; an in-place write or a view would meet w's lifetime), and the
 * host's buffer overlaps no other buffer of the host's bound to this run
 * (an input read while w is written, another output). */
static bool out_bindable(const kiln_cl_variant *v, int w, const int *first, const int *last, const kiln_tensor *const *in,
                         const cl_mem *mem_in, int nin, const cl_mem *mem_out, int nout, int o) {
  const kiln_graph *g = v->g;
  const kiln_cl_place *pl = &v->place[w];
  if (g->values[w].init || g->values[w].is_input || !pl->mem || !pl->bytes || (v->bind && v->bind[w])) return false;
  if (first[w] > last[w] || !routes_known(v, w)) return false;
  for (int u = 0; u < g->n_values; u++) {
    const kiln_cl_place *q = &v->place[u];
    if (u != w && q->mem && q->base == pl->base && q->offset < pl->offset + pl->bytes &&
        pl->offset < q->offset + (q->bytes ? q->bytes : 1) &&
        (first[u] > last[u] || (first[u] <= last[w] && first[w] <= last[u])))
      return false;
  }
  for (int i = 0; i < nin && mem_in; i++)
    if (in[i] && mem_in[i] && mem_overlap(mem_in[i], mem_out[o])) return false;
  for (int k = 0; k < nout; k++)
    if (k != o && mem_out[k] && mem_overlap(mem_out[k], mem_out[o])) return false;
  return true;
}

/* outs[o] as the shape of a result that went to a device buffer (no data). */
static void shape_only(kiln_tensor *t, kiln_dtype dt, int rank, const int64_t *dims) {
  int64_t n = 1, d2[KILN_MAX_RANK];
  for (int d = 0; d < rank; d++) n *= (d2[d] = dims[d]); /* dims may be t's own */
  kiln_tensor_release(t);
  kiln_tensor_wrap(t, dt, rank, d2, n, NULL);
}

/* The whole graph on the host (data-dependent shapes). Inputs in device
 * buffers are read back, outputs for device buffers written to them. */
static kiln_status run_on_host(kiln_cl_plan *p, const kiln_tensor *const *in, const cl_mem *mem_in,
                               kiln_tensor *outs, const cl_mem *mem_out) {
  const kiln_graph *g0 = p->orig;
  kiln_cl_context *ctx = p->slot->ctx;
  const kiln_tensor **bound = kiln_calloc((size_t)g0->n_values + 1, sizeof *bound);
  kiln_tensor *tmp = kiln_calloc((size_t)g0->n_inputs + 1, sizeof *tmp);
  kiln_status s = KILN_OK;
  if (!bound || !tmp) s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  for (int i = 0; i < g0->n_inputs && !s; i++) {
    bound[g0->inputs[i]] = in[i];
    if (!mem_in || !mem_in[i] || !in[i]) continue;
    if ((s = kiln_tensor_alloc(&tmp[i], in[i]->dtype, in[i]->rank, in[i]->dims))) break;
    size_t n = kiln_tensor_bytes(&tmp[i]);
    cl_int e = n ? clEnqueueReadBuffer(ctx->queue, mem_in[i], CL_TRUE, 0, n, tmp[i].data, 0, NULL, NULL) : CL_SUCCESS;
    if (e) s = kiln_cl_fail(e, "reading input '%s' (%zu bytes) from its OpenCL buffer", g0->values[g0->inputs[i]].name, n);
    bound[g0->inputs[i]] = &tmp[i];
  }
  if (!s) s = kiln_ref_run(g0, bound, outs);
  for (int o = 0; o < g0->n_outputs && !s && mem_out; o++) {
    if (!mem_out[o]) continue;
    s = write_mem(ctx, g0, o, &outs[o], mem_out[o]);
    if (!s) shape_only(&outs[o], outs[o].dtype, outs[o].rank, outs[o].dims);
  }
  if (s)
    for (int o = 0; o < g0->n_outputs; o++) kiln_tensor_release(&outs[o]);
  for (int i = 0; tmp && i < g0->n_inputs; i++) kiln_tensor_release(&tmp[i]);
  kiln_free(tmp);
  kiln_free(bound);
  return s;
}

kiln_status kiln_cl_variant_run(kiln_cl_plan *p, kiln_cl_variant *v, const kiln_tensor *const *in,
                                const cl_mem *mem_in, kiln_tensor *outs, const cl_mem *mem_out) {
  if (v->host_only) return run_on_host(p, in, mem_in, outs, mem_out);
  double t_start = now_ns();
  kiln_cl_context *ctx = p->slot->ctx;
  const kiln_graph *g = v->g;
  kiln_status s = KILN_OK;
  const kiln_tensor **vin = kiln_calloc((size_t)g->n_values + 1, sizeof *vin);
  if (!vin) return kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  for (int w = 0; w < g->n_values; w++) vin[w] = g->values[w].init;
  int n_in_copied = 0;
  /* KILN_CL_BIND=0: the host's buffers are copied on the device, never bound */
  const char *bind_env = getenv("KILN_CL_BIND");
  bool bind_ok = !(bind_env && !strcmp(bind_env, "0"));
  /* a run with fewer rows than compiled (symbolic batch) copies the host's
     buffers: the binding rules speak of the bound's places */
  if (v->sym_small) bind_ok = false;
  for (int i = 0; i < g->n_inputs && !s; i++) {
    int w = g->inputs[i];
    if (g->values[w].init) continue;
    const kiln_tensor *t = v->in_map[i] >= 0 ? in[v->in_map[i]] : NULL;
    if (!t) {
      s = kiln_fail(KILN_E_MODEL, "graph input '%s' has no data bound", g->values[w].name);
      break;
    }
    cl_mem m = mem_in && v->in_map[i] >= 0 ? mem_in[v->in_map[i]] : NULL;
    if (m) { /* the host's device buffer: read in place of the input's own, else copied on the device */
      if (t->data) vin[w] = t; /* host memory behind it too (zero-copy): host steps read it there */
      if (!v->place[w].mem) continue; /* no step reads it */
      size_t n = kiln_tensor_bytes(t);
      if (n != (size_t)kiln_cl_sym_at(v, w, (int64_t)v->place[w].bytes)) {
        s = kiln_fail(KILN_E_INTERNAL, "input '%s': %zu bytes given, %zu planned", g->values[w].name, n,
                      v->place[w].bytes);
        break;
      }
      if (!bind_ok || !routes_known(v, w)) {
        size_t outer = 0, row = 0, run = 0;
        bool box = kiln_cl_sym_box(v, w, v->place[w].bytes, &outer, &row, &run);
        cl_int e = !n  ? CL_SUCCESS
                   : box ? copy_box(ctx, m, v->place[w].mem, outer, run, run, row)
                         : clEnqueueCopyBuffer(ctx->queue, m, v->place[w].mem, 0, 0, n, 0, NULL, NULL);
        if (e) s = kiln_cl_fail(e, "copying input '%s' (%zu bytes) from its OpenCL buffer", g->values[w].name, n);
        n_in_copied++;
        continue;
      }
      if (!v->bind && !(v->bind = kiln_calloc((size_t)g->n_values + 1, sizeof *v->bind)))
        s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
      else
        v->bind[w] = m;
      continue;
    }
    vin[w] = t;
    s = write_value(ctx, v, w, t);
  }
  /* outputs into the host's cl_mem where it is made, when that is safe */
  bool *out_bound = kiln_calloc((size_t)g->n_outputs + 1, sizeof *out_bound);
  int *first = mem_out ? kiln_calloc((size_t)g->n_values + 1, sizeof *first) : NULL;
  int *last = mem_out ? kiln_calloc((size_t)g->n_values + 1, sizeof *last) : NULL;
  if ((!out_bound || (mem_out && (!first || !last))) && !s) s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  if (mem_out && !s) lifetimes(v, first, last);
  for (int o = 0; o < g->n_outputs && !s && mem_out; o++) {
    int w = g->outputs[o];
    if (!mem_out[o] || !bind_ok || !out_bindable(v, w, first, last, in, mem_in, p->orig->n_inputs, mem_out, g->n_outputs, o))
      continue;
    if ((s = check_out_mem(g, o, mem_out[o], v->place[w].bytes))) break;
    if (!v->bind && !(v->bind = kiln_calloc((size_t)g->n_values + 1, sizeof *v->bind))) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
      break;
    }
    v->bind[w] = mem_out[o];
    out_bound[o] = true;
  }
  if ((v->bind || n_in_copied) && !s) {
    int nb = 0, no = 0, nc = 0;
    for (int w = 0; w < g->n_values && v->bind; w++) nb += v->bind[w] != NULL;
    for (int o = 0; o < g->n_outputs; o++) {
      no += out_bound[o];
      nc += mem_out && mem_out[o] && !out_bound[o];
    }
    kiln_log(KILN_LOG_DEBUG, "opencl: run of '%s': %d inputs and %d outputs in the host's cl_mem bound in place, %d "
             "inputs copied from theirs, %d outputs copied into theirs", g->name ? g->name : "", nb - no, no,
             n_in_copied, nc);
  }
  /* generated kernels reading a bound input or writing a bound output get
     the host's buffer for this run (their arguments are set back below) */
  for (int k = 0; k < v->n_kern && !s && v->bind; k++)
    for (int a = 0; a < v->sig[k].n_args && !s; a++) {
      cl_mem m = v->bind[v->sig[k].args[a].value];
      if (m) s = kiln_cl_kernel_arg(&v->kern[k], (cl_uint)a, sizeof m, &m);
    }
  char lbl[160];
  kiln_obs *obs = p->run_obs; /* an observing plan's run (engine_observe.c) */
  if (!s && obs) s = kiln_cl_obs_begin(p, v, obs);
  for (int k = 0; k < v->n_steps && !s; k++) {
    const kiln_cl_step *st = &v->steps[k];
    s = run_step(p, ctx, v, st, vin);
    if (!s && obs) s = kiln_cl_obs_step(p, v, k, obs); /* before a later step writes over its outputs */
    if (s) {
      const kiln_node *n = &g->nodes[st->node];
      if (st->kind == KILN_CL_STEP_GEN && st->nodes > 1)
        kiln_error_prefix("fused group of %d nodes from %s (%s)", st->nodes, kiln_node_label(g, n, lbl, sizeof lbl),
                          n->op_type);
      else
        kiln_error_prefix("node %s (%s)", kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
    }
  }
  if (!s && obs) s = kiln_cl_obs_end(p, v, obs); /* the final pass and its read, before the outputs' */
  for (int o = 0; o < g->n_outputs && !s; o++) {
    int w = g->outputs[o];
    cl_mem m = mem_out ? mem_out[o] : NULL;
    if (out_bound[o]) { /* written where it was made */
      int rank;
      int64_t dims[KILN_MAX_RANK];
      dims_of(v, w, &rank, dims);
      shape_only(&outs[o], v->sh->v[w].dtype, rank, dims);
    } else if (m && vin[w]) { /* a weight or host input as an output */
      s = write_mem(ctx, g, o, vin[w], m);
      if (!s) shape_only(&outs[o], vin[w]->dtype, vin[w]->rank, vin[w]->dims);
    } else if (m) { /* device to device */
      int rank;
      int64_t dims[KILN_MAX_RANK];
      dims_of(v, w, &rank, dims);
      cl_mem src = mem_of(v, w);
      size_t n = kiln_dtype_size(v->sh->v[w].dtype);
      for (int d = 0; d < rank; d++) n *= (size_t)dims[d];
      if (n && !src) s = kiln_fail(KILN_E_INTERNAL, "value '%s' has no device buffer", g->values[w].name);
      if (!s) s = check_out_mem(g, o, m, n);
      /* (an input bound to the very buffer it is copied to is there already) */
      size_t outer = 0, row = 0, run = 0;
      bool box = kiln_cl_sym_box(v, w, v->place[w].bytes, &outer, &row, &run);
      cl_int e = !(!s && n && src != m) ? CL_SUCCESS
                 : box ? copy_box(ctx, src, m, outer, run, row, run)
                       : clEnqueueCopyBuffer(ctx->queue, src, m, 0, 0, n, 0, NULL, NULL);
      if (e) s = kiln_cl_fail(e, "copying output '%s' (%zu bytes) to its OpenCL buffer", g->values[w].name, n);
      if (!s) shape_only(&outs[o], v->sh->v[w].dtype, rank, dims);
    } else if (vin[w]) {
      s = kiln_tensor_copy(&outs[o], vin[w]);
    } else {
      s = read_value(ctx, v, w, &outs[o]);
    }
  }
  if (!s) s = kiln_cl_finish(ctx);
  else kiln_cl_finish(ctx); /* (the ops' check words are read with the run) */
  for (int k = 0; k < v->n_steps; k++) { /* run-time indices the device ops met out of range */
    const kiln_cl_step *st = &v->steps[k];
    if (st->kind != KILN_CL_STEP_OP) continue;
    kiln_status c = kiln_cl_op_checked(st->op, ctx);
    if (c && !s) {
      const kiln_node *n = &g->nodes[st->node];
      kiln_error_prefix("node %s (%s)", kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
      s = c;
    }
  }
  if (!s && obs) s = kiln_cl_obs_collect(p, v, obs);
  if (s) {
    kiln_cl_finish(ctx);
    for (int o = 0; o < g->n_outputs; o++) kiln_tensor_release(&outs[o]);
  }
  if (v->bind) { /* the kernels' own buffers back (the launches are done) */
    for (int k = 0; k < v->n_kern; k++)
      for (int a = 0; a < v->sig[k].n_args; a++) {
        int w = v->sig[k].args[a].value;
        cl_mem m = v->place[w].mem;
        if (v->bind[w] && m && kiln_cl_kernel_arg(&v->kern[k], (cl_uint)a, sizeof m, &m) && !s)
          s = KILN_E_INTERNAL;
      }
    kiln_free(v->bind);
    v->bind = NULL;
  }
  kiln_free(out_bound);
  kiln_free(first);
  kiln_free(last);
  kiln_free(vin);
  /* the device binary, once it ran (on PoCL it then holds the compiled
     work-group functions; asked right after the build it would not) */
  double t2 = now_ns();
  /* the device binary into the kiln cache, after the variant's second
     successful run: asked right after the build PoCL's binary lacks the
     compiled work-group functions (it compiles a generic one on demand,
     0.1-0.2 s); after a run it holds them. A graph run once (a test) pays
     nothing; one run again is worth a warm init. KILN_CL_BINARY_CACHE=1:
     after the first run already (a test run that fills the cache). */
  if (!s) v->runs++;
  int store_at = getenv("KILN_CL_BINARY_CACHE") && !strcmp(getenv("KILN_CL_BINARY_CACHE"), "1") ? 1 : 2;
  bool stored = false;
  for (int i = 0; !s && v->runs == store_at && i < v->n_prog; i++) {
    kiln_cl_vprog *vp = &v->progs[i];
    if (!vp->store_binary) continue;
    void *bin = NULL;
    size_t len = 0;
    if (!kiln_cl_program_binary(ctx, vp->prog, &bin, &len) && kiln_cl_cache_put(vp->key, bin, len))
      kiln_cl_context_program_stored(ctx, vp->key.hi, vp->key.lo);
    kiln_error_clear();
    kiln_free(bin);
    stored = true;
  }
  if (!v->ran && v->n_prog)
    kiln_log(KILN_LOG_INFO, "opencl: program of '%s': %s, first run %.1f ms", g->name ? g->name : "",
             v->from_process ? "built earlier in this process"
             : v->from_cache ? "from the kiln cache"
                             : "built from source",
             (t2 - t_start) / 1e6);
  if (stored)
    kiln_log(KILN_LOG_INFO, "opencl: program of '%s': binary stored in %.1f ms", g->name ? g->name : "",
             (now_ns() - t2) / 1e6);
  if (!v->ran && v->n_prog && !v->from_cache)
    kiln_log(KILN_LOG_INFO, "opencl: program of '%s': clBuildProgram %.1f ms", g->name ? g->name : "", v->build_ms);
  v->ran = true;
  return s;
}

/* ---- KILN_PROFILE ---- */

int kiln_cl_profile_entry(kiln_cl_plan *p, const char *name) {
  for (int i = 0; i < p->n_prof; i++)
    if (!strcmp(p->prof[i].name, name)) return i;
  if (p->n_prof == p->cap_prof) {
    int cap = p->cap_prof ? 2 * p->cap_prof : 16;
    kiln_cl_prof *q = kiln_realloc(p->prof, sizeof *q * (size_t)cap);
    if (!q) return -1;
    p->prof = q;
    p->cap_prof = cap;
  }
  kiln_cl_prof *e = &p->prof[p->n_prof];
  memset(e, 0, sizeof *e);
  snprintf(e->name, sizeof e->name, "%s", name);
  for (char *c = e->name; *c; c++) /* also a JSON string (KILN_TRACE) */
    if (*c == '"' || *c == '\\' || (unsigned char)*c < 32) *c = '_';
  return p->n_prof++;
}

void kiln_cl_profile_print(const kiln_cl_plan *p) {
  if (!p->n_prof) return;
  double total = 0;
  for (int i = 0; i < p->n_prof; i++) total += p->prof[i].ns;
  fprintf(stderr, "kiln profile: graph '%s' on opencl:%s (%s) — kernels, ops and copies: OpenCL event times (ops "
                  "and copies between two markers); host steps: wall time\n",
          p->orig->name ? p->orig->name : "", p->dev->id, p->dev->name);
  fprintf(stderr, "  %-60s %8s %12s %12s %6s\n", "step", "calls", "total ms", "mean us", "%");
  for (int i = 0; i < p->n_prof; i++) {
    const kiln_cl_prof *e = &p->prof[i];
    fprintf(stderr, "  %-60.60s %8ld %12.3f %12.1f %6.1f\n", e->name, e->count, e->ns / 1e6,
            e->count ? e->ns / 1e3 / (double)e->count : 0.0, total > 0 ? 100 * e->ns / total : 0.0);
  }
  fprintf(stderr, "  %-60s %8s %12.3f\n", "total", "", total / 1e6);
}

/* ---- KILN_TRACE ---- */

static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static char *trace_buf; /* the events written so far, comma-separated */
static size_t trace_len, trace_cap;

static void trace_put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void trace_put(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (trace_len + (size_t)n + 1 > trace_cap) {
    size_t cap = trace_cap ? trace_cap : 1 << 16;
    while (cap < trace_len + (size_t)n + 1) cap *= 2;
    char *q = kiln_realloc(trace_buf, cap);
    if (!q) return;
    trace_buf = q;
    trace_cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(trace_buf + trace_len, trace_cap - trace_len, fmt, ap);
  va_end(ap);
  trace_len += (size_t)n;
}

void kiln_cl_trace_flush(const kiln_cl_plan *p) {
  const char *path = getenv("KILN_TRACE");
  if (!path || !*path || !p->n_trace) return;
  pthread_mutex_lock(&trace_mu);
  static int graphs;
  int tid = ++graphs; /* one track per graph */
  char name[160];
  snprintf(name, sizeof name, "%s", p->orig->name ? p->orig->name : "graph");
  for (char *c = name; *c; c++)
    if (*c == '"' || *c == '\\' || (unsigned char)*c < 32) *c = '_';
  trace_put("%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%d,\"args\":{\"name\":\"%s on opencl:%s\"}}",
            trace_len ? ",\n" : "", tid, name, p->dev->id);
  for (int i = 0; i < p->n_trace; i++) {
    const struct kiln_cl_trace_ev *e = &p->trace_ev[i];
    trace_put(",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":1,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f}",
              p->prof[e->prof].name, name, tid, e->ts_ns / 1e3, e->dur_ns / 1e3);
  }
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  bool ok = f && fprintf(f, "{\"traceEvents\":[\n%s\n]}\n", trace_buf ? trace_buf : "") > 0;
  if (f && fclose(f)) ok = false;
  if (!ok || rename(tmp, path)) {
    remove(tmp);
    kiln_log(KILN_LOG_WARN, "KILN_TRACE: cannot write %s", path);
  }
  pthread_mutex_unlock(&trace_mu);
}

void kiln_cl_trace_shutdown(void) {
  pthread_mutex_lock(&trace_mu);
  kiln_free(trace_buf);
  trace_buf = NULL;
  trace_len = trace_cap = 0;
  pthread_mutex_unlock(&trace_mu);
}
