/* opencl/engine_zerocopy: host-memory inputs and outputs used in place on a
 * device that works in host memory (CL_DEVICE_HOST_UNIFIED_MEMORY: PoCL's
 * CPU device, rusticl's llvmpipe). For one run each such tensor is wrapped
 * in a CL_MEM_USE_HOST_PTR buffer and handed to the run as if the host had
 * bound a cl_mem (engine_run.c binds it in place where the layout allows,
 * else copies on the device — a memcpy like the transfer it replaces); the
 * outputs are mapped and unmapped once the queue is done, so the host's
 * memory holds them by OpenCL's rules, and the wrappers are released.
 * Tensors of 512 KiB and more (KILN_CL_ZERO_COPY=all: any size);
 * KILN_CL_ZERO_COPY=0 turns it off. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/engine_int.h"

/* The largest OpenCL built-in type (long16, double16) is 128 bytes: a host
 * pointer with this alignment is aligned for any typed access a kernel
 * makes, as the buffers the driver allocates are (CLBlast's kernels read
 * through float2..float16 pointers). */
#define KILN_CL_ZC_BLAS_ALIGN 128

/* Below this many bytes a copy costs less than a wrapper: creating,
 * mapping and releasing one took 16 us on PoCL 3.1 and 23-25 us on rusticl
 * (Mesa 22.3) at any size, clEnqueueWriteBuffer 8-11 us up to 256 KiB and
 * 27-29 us at 1 MiB (best of 200, this machine). */
#define KILN_CL_ZC_MIN_BYTES ((size_t)512 << 10)

size_t kiln_cl_zc_min_bytes(const kiln_cl_plan *p) {
  const char *e = getenv("KILN_CL_ZERO_COPY");
  if (!p->dev->host_unified || (e && !strcmp(e, "0"))) return SIZE_MAX;
  return e && !strcmp(e, "all") ? 1 : KILN_CL_ZC_MIN_BYTES;
}

/* The alignment value w's host memory needs to be bound: kiln's generated
 * kernels, its device ops, copies and host steps access elements (scalar
 * pointers, vloadN / vstoreN), so the element size; an op that calls
 * CLBlast the largest type's. */
static size_t need_align(const kiln_cl_variant *v, int w) {
  for (int k = 0; k < v->n_steps; k++) {
    const kiln_cl_step *st = &v->steps[k];
    if (st->kind != KILN_CL_STEP_OP || !kiln_cl_op_calls_clblast(st->op)) continue;
    const kiln_node *n = &v->g->nodes[st->node];
    for (int i = 0; i < n->n_in; i++)
      if (n->in[i] == w) return KILN_CL_ZC_BLAS_ALIGN;
    for (int i = 0; i < n->n_out; i++)
      if (n->out[i] == w) return KILN_CL_ZC_BLAS_ALIGN;
  }
  size_t es = kiln_dtype_size(v->sh->v[w].dtype);
  return es ? es : 1;
}

/* Host byte ranges of this run's tensors: [lo, hi). */
typedef struct zc_range {
  uintptr_t lo, hi;
} zc_range;

/* r[k] overlaps some other range of the n. */
static bool overlaps(const zc_range *r, int n, int k) {
  for (int j = 0; j < n; j++)
    if (j != k && r[j].lo < r[j].hi && r[k].lo < r[j].hi && r[j].lo < r[k].hi) return true;
  return false;
}

/* The dense bytes of value w at v's (concrete) shape. */
/* Releases z's wrappers and arrays (the queue is done with them or never
 * had them). */
static void zc_free(kiln_cl_zc *z) {
  for (int i = 0; i < z->n_in && z->in; i++)
    if (z->in[i]) clReleaseMemObject(z->in[i]);
  for (int o = 0; o < z->n_out && z->out; o++)
    if (z->out[o]) clReleaseMemObject(z->out[o]);
  kiln_free(z->in);
  kiln_free(z->out);
  kiln_free(z->mem_in);
  kiln_free(z->mem_out);
  kiln_free(z->out_ptr);
  memset(z, 0, sizeof *z);
}

static size_t value_bytes(const kiln_cl_variant *v, int w) {
  const kiln_vshape *x = &v->sh->v[w];
  size_t n = kiln_dtype_size(x->dtype);
  for (int d = 0; d < x->rank; d++) {
    int64_t e = 0;
    if (!kiln_dimx_is_const(v->sh->tab, x->dims[d], &e) || e < 0) return 0;
    n *= (size_t)e;
  }
  return n;
}

kiln_status kiln_cl_zc_begin(kiln_cl_plan *p, kiln_cl_variant *v, const kiln_tensor *const *in, const cl_mem *mem_in,
                             kiln_tensor *outs, const cl_mem *mem_out, kiln_cl_zc *z) {
  memset(z, 0, sizeof *z);
  const kiln_graph *g = v->g, *g0 = p->orig;
  /* the whole graph on the host, or a run smaller than compiled (a padded
     layout, inputs and outputs copied as rectangles): nothing to bind */
  size_t min = kiln_cl_zc_min_bytes(p);
  if (min == SIZE_MAX || v->host_only || v->sym_small) return KILN_OK;
  int ni = g0->n_inputs, no = g->n_outputs;
  zc_range *r = kiln_calloc((size_t)(ni + no) + 1, sizeof *r);
  z->in = kiln_calloc((size_t)ni + 1, sizeof *z->in);
  z->out = kiln_calloc((size_t)no + 1, sizeof *z->out);
  z->mem_in = kiln_calloc((size_t)ni + 1, sizeof *z->mem_in);
  z->mem_out = kiln_calloc((size_t)no + 1, sizeof *z->mem_out);
  z->out_ptr = kiln_calloc((size_t)no + 1, sizeof *z->out_ptr);
  z->n_in = ni;
  z->n_out = no;
  kiln_status s = KILN_OK;
  if (!r || !z->in || !z->out || !z->mem_in || !z->mem_out || !z->out_ptr) {
    kiln_free(r);
    zc_free(z);
    return kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  }
  /* every host range of the run: a tensor that shares a byte with another
     stays where it is (buffers over overlapping host memory are undefined
     in OpenCL, and an output written over an input still being read would
     be wrong) */
  for (int i = 0; i < ni; i++) {
    const kiln_tensor *t = in[i];
    if (!t || !t->data || (mem_in && mem_in[i])) continue;
    r[i].lo = (uintptr_t)t->data;
    r[i].hi = r[i].lo + kiln_tensor_bytes(t);
  }
  for (int o = 0; o < no; o++) {
    const kiln_tensor *t = &outs[o];
    if (!t->data || t->owns || (mem_out && mem_out[o])) continue;
    r[ni + o].lo = (uintptr_t)t->data;
    r[ni + o].hi = r[ni + o].lo + t->capacity;
  }
  kiln_cl_context *ctx = p->slot->ctx;
  int n_wrapped = 0, n_refused = 0;
  for (int i = 0; i < g->n_inputs && !s; i++) {
    int w = g->inputs[i], j = v->in_map[i];
    if (g->values[w].init || j < 0 || !r[j].hi) continue;
    const kiln_tensor *t = in[j];
    size_t n = kiln_tensor_bytes(t);
    /* only what a step reads, at its planned size, aligned for its readers */
    if (!v->place[w].mem || n < min || t->strided || n != v->place[w].bytes) continue;
    if (r[j].lo % need_align(v, w) || overlaps(r, ni + no, j)) {
      n_refused++;
      continue;
    }
    cl_int e;
    z->in[j] = clCreateBuffer(ctx->ctx, CL_MEM_READ_ONLY | CL_MEM_USE_HOST_PTR, n, t->data, &e);
    if (e && z->in[j]) clReleaseMemObject(z->in[j]);
    if (!z->in[j] || e) {
      z->in[j] = NULL;
      s = kiln_cl_fail(e ? e : CL_INVALID_MEM_OBJECT, "wrapping input '%s' (%zu bytes of host memory) for %s (%s)",
                       g->values[w].name, n, ctx->id, ctx->name);
    }
    n_wrapped++;
  }
  for (int o = 0; o < no && !s; o++) {
    int w = g->outputs[o];
    size_t n = value_bytes(v, w);
    if (!r[ni + o].hi || n < min || outs[o].capacity < n) continue;
    /* (an output that is an input or a weight is only written from the host) */
    bool written = g->values[w].init || g->values[w].is_input;
    if ((!written && r[ni + o].lo % need_align(v, w)) || overlaps(r, ni + no, ni + o)) {
      n_refused++;
      continue;
    }
    cl_int e;
    z->out[o] = clCreateBuffer(ctx->ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, n, outs[o].data, &e);
    if (e && z->out[o]) clReleaseMemObject(z->out[o]);
    if (!z->out[o] || e) {
      z->out[o] = NULL;
      s = kiln_cl_fail(e ? e : CL_INVALID_MEM_OBJECT, "wrapping output '%s' (%zu bytes of host memory) for %s (%s)",
                       g->values[w].name, n, ctx->id, ctx->name);
    }
    z->out_ptr[o] = outs[o].data;
    n_wrapped++;
  }
  kiln_free(r);
  p->st.zc_refused += n_refused;
  if (s || !n_wrapped) { /* nothing wrapped: the run copies as without */
    zc_free(z);
    if (s) return s;
    if (n_refused)
      kiln_log(KILN_LOG_DEBUG, "opencl: run of '%s': zero-copy refused for %d host tensors (alignment or overlap)",
               g->name ? g->name : "", n_refused);
    return KILN_OK;
  }
  for (int i = 0; i < ni; i++) {
    z->mem_in[i] = mem_in && mem_in[i] ? mem_in[i] : z->in[i];
    p->st.zc_inputs += z->in[i] != NULL;
  }
  for (int o = 0; o < no; o++) p->st.zc_outputs += z->out[o] != NULL;
  for (int o = 0; o < no; o++) z->mem_out[o] = mem_out && mem_out[o] ? mem_out[o] : z->out[o];
  kiln_log(KILN_LOG_DEBUG, "opencl: run of '%s': %d host tensors wrapped for zero-copy, %d refused (alignment or "
           "overlap)", g->name ? g->name : "", n_wrapped, n_refused);
  return KILN_OK;
}

kiln_status kiln_cl_zc_end(kiln_cl_plan *p, kiln_cl_zc *z, kiln_tensor *outs, kiln_status s) {
  kiln_cl_context *ctx = p->slot->ctx;
  bool any = false;
  for (int o = 0; o < z->n_out && z->out; o++) any = any || z->out[o];
  for (int i = 0; i < z->n_in && z->in; i++) any = any || z->in[i];
  /* the outputs made in host memory: a map (free where the device works
     there: the pointer is the host's own) makes them the host's by OpenCL
     1.2's rules for CL_MEM_USE_HOST_PTR; outs[o] then points at them, so
     the caller's copy into its buffer is skipped */
  for (int o = 0; o < z->n_out && z->out && !s; o++) {
    if (!z->out[o]) continue;
    size_t n = kiln_tensor_bytes(&outs[o]);
    if (n) {
      cl_int e = CL_SUCCESS;
      void *q = clEnqueueMapBuffer(ctx->queue, z->out[o], CL_TRUE, CL_MAP_READ, 0, n, 0, NULL, NULL, &e);
      if (!e && !q) e = CL_MAP_FAILURE;
      if (!e && q != z->out_ptr[o]) memcpy(z->out_ptr[o], q, n); /* (the spec says it is the host's pointer) */
      if (!e) e = clEnqueueUnmapMemObject(ctx->queue, z->out[o], q, 0, NULL, NULL);
      if (e) {
        s = kiln_cl_fail(e, "mapping output '%s' (%zu bytes of host memory) on %s (%s)",
                         p->orig->values[p->orig->outputs[o]].name, n, ctx->id, ctx->name);
        break;
      }
    }
    int64_t dims[KILN_MAX_RANK];
    memcpy(dims, outs[o].dims, sizeof dims);
    kiln_tensor_wrap(&outs[o], outs[o].dtype, outs[o].rank, dims, outs[o].numel, z->out_ptr[o]);
  }
  if (any) {
    kiln_status f = kiln_cl_finish(ctx); /* the unmaps, and nothing of the run left on the wrappers */
    if (!s) s = f;
    if (s)
      for (int o = 0; o < z->n_out; o++) kiln_tensor_release(&outs[o]);
  }
  zc_free(z);
  return s;
}
