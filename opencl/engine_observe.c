/* opencl/engine_observe: observers on the OpenCL engine (ir/observe.h's
 * hook contract). An observed graph runs an observing plan of its own,
 * compiled at the first observed run (kiln_cl_obs_plan): its generated
 * kernels reduce the min/max and NaN/±inf counts of the float32 values
 * they compute (fused intermediates and stores) inside the kernel —
 * per work-item over a grid-stride loop, then a work-group reduction in
 * local memory; each group writes one partial (codegen.h,
 * kiln_cl_codegen_observed). The outputs of device ops, buffer copies,
 * host steps and view copies (and stores the kernel did not reduce) go
 * through a small reduction kernel per element type, enqueued right after
 * the step (before anything can write over the value), which writes
 * per-group partials too. At the end of the run the per-group partials —
 * never the tensors — are read back (two reads) and merged into the
 * records. Observe all compiles without the erasing rewrites; histograms
 * compile unfused and read every observed value back (the one mode that
 * copies tensors to the host). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/engine_int.h"

#define RED_CHUNK 64 /* elements one work-item of a reduction kernel folds (no barrier: fast on PoCL) */

/* The element types the reduction kernels take (others are read back). */
static const struct red_type {
  kiln_dtype dt;
  const char *c;   /* OpenCL C type */
  const char *lo, *hi; /* the start of min / max */
  bool is_float;
} red_types[] = {
    {KILN_F32, "float", "INFINITY", "-INFINITY", true},   {KILN_F64, "double", "INFINITY", "-INFINITY", true},
    {KILN_I32, "int", "INT_MAX", "INT_MIN", false},        {KILN_I64, "long", "LONG_MAX", "LONG_MIN", false},
    {KILN_U8, "uchar", "UCHAR_MAX", "0", false},           {KILN_I8, "char", "CHAR_MAX", "CHAR_MIN", false},
    {KILN_I16, "short", "SHRT_MAX", "SHRT_MIN", false},    {KILN_U16, "ushort", "USHRT_MAX", "0", false},
    {KILN_U32, "uint", "UINT_MAX", "0", false},
};
#define N_RED_TYPES ((int)(sizeof red_types / sizeof *red_types))

/* One value reduced by a reduction kernel after step `step`. */
typedef struct red_item {
  int step, value, type; /* type: index into red_types, -1: read back */
  int64_t numel, off, groups;
  bool batched;          /* float32 in the arena: reduced in a batch (below) */
} red_item;

/* Float32 arena values reduced by one launch of kiln_obs_red_batch,
 * enqueued after step `after`: the values pending since the last batch,
 * flushed before the first step that writes over one of them (or at the
 * end). Cuts the commands per run (each costs driver time on PoCL). */
typedef struct red_batch {
  int after, n;
  int64_t max_chunks;
  kiln_cl_buffer desc; /* per value: float offset in the arena, elements, first partial */
} red_batch;

struct kiln_cl_vobs {
  int64_t kparts;          /* in-kernel partials (entries of 5 ulongs), first in pbuf */
  bool laid;               /* the reductions are laid out */
  int n_red;
  red_item *red;
  int *first_red;          /* per step: its first item (items are in step order), n_steps + 1 entries */
  int64_t rparts;          /* the reduction kernels' partials, after the kernels' in pbuf */
  kiln_cl_buffer pbuf;     /* per-group partials */
  int n_final;             /* values the final pass reduces: in-kernel ones, then reduction items */
  kiln_cl_buffer dbuf;     /* their descriptors: 4 longs (first partial, groups, stride, kind) */
  kiln_cl_buffer fbuf;     /* the final partials: 5 ulongs per value, read back each run */
  int n_batch;
  red_batch *batch;
  uint64_t *host;          /* fbuf read back */
  uint64_t obs_id;         /* the observer the map is for */
  int *rec;                /* per value of the variant's graph: its record, -1 */
  kiln_obs_partial *konst; /* per value: a constant's partial */
};

int kiln_cl_obs_mode(const kiln_obs *obs) {
  return 1 + (kiln_obs_observe_all(obs) ? KILN_CL_OBS_KEEP : 0) + (kiln_obs_wants_values(obs) ? KILN_CL_OBS_VALUES : 0);
}

bool kiln_cl_obs_unfused(const kiln_cl_plan *p) { return p->obs_mode && ((p->obs_mode - 1) & KILN_CL_OBS_VALUES); }

static kiln_status vobs_of(kiln_cl_variant *v, struct kiln_cl_vobs **out) {
  if (!v->obs && !(v->obs = kiln_calloc(1, sizeof *v->obs)))
    return kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  *out = v->obs;
  return KILN_OK;
}

void kiln_cl_obs_variant_free(kiln_cl_variant *v) {
  struct kiln_cl_vobs *o = v->obs;
  if (!o) return;
  kiln_cl_buffer_free(&o->pbuf);
  kiln_cl_buffer_free(&o->dbuf);
  kiln_cl_buffer_free(&o->fbuf);
  kiln_free(o->red);
  kiln_free(o->first_red);
  for (int b = 0; b < o->n_batch; b++) kiln_cl_buffer_free(&o->batch[b].desc);
  kiln_free(o->batch);
  kiln_free(o->host);
  kiln_free(o->rec);
  kiln_free(o->konst);
  kiln_free(o);
  v->obs = NULL;
}

/* ---- compile ---- */

static int64_t value_numel(const kiln_cl_variant *v, int w) {
  const kiln_vshape *x = &v->sh->v[w];
  int64_t n = 1, d;
  if (x->rank < 0) return -1;
  for (int k = 0; k < x->rank; k++) {
    if (!kiln_dimx_is_const(v->sh->tab, x->dims[k], &d)) return -1;
    n *= d;
  }
  return n;
}

kiln_status kiln_cl_obs_codegen(kiln_cl_plan *p, kiln_cl_variant *v, const kiln_fuse_spec *sp, const char *name,
                                char **text, kiln_cl_kernel_sig *sig) {
  int expr[16], val[16], n = 0;
  if (p->obs_mode && !kiln_cl_obs_unfused(p))
    for (int x = 0; x < sp->n_vexpr && n < 16; x++) {
      int w = sp->vexpr[x].value, e = sp->vexpr[x].expr;
      bool dup = false;
      for (int j = 0; j < n; j++) dup = dup || val[j] == w;
      bool stored = false; /* a store: the chunked reduction kernel reads it back on the device (cheaper on
                              PoCL than a work-group reduction with barriers in the kernel) */
      for (int k = 0; k < sp->n_store; k++) stored = stored || sp->store[k].value == w;
      if (dup || stored || e < 0 || e >= sp->n_expr || sp->expr[e].dtype != KILN_F32 || sp->expr[e].reduced ||
          v->sh->v[w].dtype != KILN_F32 || value_numel(v, w) != sp->numel)
        continue;
      expr[n] = e;
      val[n++] = w;
    }
  if (!n) /* a symbolic plan launches a prefix of the items: no row blocks (codegen.h) */
    return p->sym ? kiln_cl_codegen_prefix(sp, p->dev, name, text, sig)
                  : kiln_cl_codegen_named(sp, p->dev, name, text, sig);
  struct kiln_cl_vobs *o = NULL;
  kiln_status s = vobs_of(v, &o);
  if (s) return s;
  return kiln_cl_codegen_observed(sp, p->dev, name, expr, val, n, text, sig);
}

kiln_status kiln_cl_obs_bind_kernel(kiln_cl_plan *p, kiln_cl_variant *v, int k) {
  (void)p;
  const kiln_cl_kernel_sig *sig = &v->sig[k];
  if (!sig->n_obs) return KILN_OK;
  struct kiln_cl_vobs *o = NULL;
  kiln_status s = vobs_of(v, &o);
  if (s) return s;
  /* the local size: the largest power of 2 both the kernel and its local arrays take */
  kiln_cl_kernel_sig *sg = &v->sig[k];
  size_t local = sg->local;
  while (local > 1 && local > v->kern[k].wg_size) local /= 2;
  sg->local = local;
  sg->obs_groups = (sg->obs_numel + (int64_t)local - 1) / (int64_t)local;
  if (sg->obs_groups < 1) sg->obs_groups = 1;
  sg->n_items = sg->obs_groups * (int64_t)local;
  sg->obs_offset = o->kparts;
  o->kparts += sg->obs_groups * sg->n_obs;
  cl_ulong off = (cl_ulong)sg->obs_offset;
  return kiln_cl_kernel_arg(&v->kern[k], (cl_uint)sig->n_args + 1, sizeof off, &off); /* the buffer: at the first run */
}

/* The float32 reductions' body over x[0, m) (m <= RED_CHUNK), writing
 * partial `off + c`: min and max in float8 vectors (fmin/fmax skip NaN as
 * the scalar fold does), and the NaN/+-inf counts only for a chunk whose
 * isfinite test failed somewhere — nearly always skipped. Written with
 * explicit vectors: PoCL does not vectorize a scalar fmin/fmax fold. */
static const char float_chunk[] =
    "  float8 mn8 = (float8)(INFINITY), mx8 = (float8)(-INFINITY);\n"
    "  int8 fin = (int8)(-1);\n"
    "  long i = 0;\n"
    "  for (; i + 8 <= m; i += 8) {\n"
    "    const float8 v = vload8(0, x + i);\n"
    "    mn8 = fmin(mn8, v); mx8 = fmax(mx8, v); fin &= isfinite(v);\n"
    "  }\n"
    "  float4 mn4 = fmin(mn8.lo, mn8.hi), mx4 = fmax(mx8.lo, mx8.hi);\n"
    "  float mn = fmin(fmin(mn4.x, mn4.y), fmin(mn4.z, mn4.w)), mx = fmax(fmax(mx4.x, mx4.y), fmax(mx4.z, mx4.w));\n"
    "  bool bad = !all(fin);\n"
    "  for (; i < m; i++) {\n"
    "    const float v = x[i];\n"
    "    mn = fmin(mn, v); mx = fmax(mx, v); bad = bad || !isfinite(v);\n"
    "  }\n"
    "  uint c0 = 0, c1 = 0, c2 = 0;\n"
    "  if (bad)\n"
    "    for (long j = 0; j < m; j++) {\n"
    "      const float v = x[j];\n"
    "      c0 += isnan(v) ? 1u : 0u; c1 += v == INFINITY ? 1u : 0u; c2 += v == -INFINITY ? 1u : 0u;\n"
    "    }\n"
    "  __global ulong *q = part + (off + c) * 5;\n"
    "  q[0] = as_uint(mn); q[1] = as_uint(mx); q[2] = c0; q[3] = c1; q[4] = c2;\n";

/* The reduction kernels, one per element type: a grid-stride loop of
 * RED_GROUPS groups at most, then the work-group reduction; partials as in
 * codegen.h (integers: min and max as longs). */
static kiln_status build_reducers(kiln_cl_plan *p) {
  if (p->obs_prog) return KILN_OK;
  kiln_cl_src src = {0};
  kiln_status s = KILN_OK;
  for (int t = 0; t < N_RED_TYPES && !s; t++) {
    const struct red_type *r = &red_types[t];
    if (r->dt == KILN_F64 && !p->dev->has_fp64) continue;
    if (r->dt == KILN_F64) s = kiln_cl_src_printf(&src, "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
    if (!s && r->dt == KILN_F32)
      s = kiln_cl_src_printf(&src,
                             "__kernel void kiln_obs_red_float(__global const float *x0, ulong n, __global ulong *part, "
                             "ulong off) {\n"
                             "  const size_t c = get_global_id(0);\n"
                             "  const long i0 = (long)c * %d;\n"
                             "  if (i0 >= (long)n) return;\n"
                             "  __global const float *x = x0 + i0;\n"
                             "  const long m = min((long)n - i0, (long)%d);\n"
                             "%s"
                             "}\n",
                             RED_CHUNK, RED_CHUNK, float_chunk);
    else if (!s)
      s = kiln_cl_src_printf(
          &src,
          "__kernel void kiln_obs_red_%s(__global const %s *x, ulong n, __global ulong *part, ulong off) {\n"
          "  const size_t c = get_global_id(0), i0 = c * %d;\n"
          "  if (i0 >= n) return;\n"
          "  const size_t i1 = min((size_t)n, i0 + %d);\n"
          "  %s mn = %s, mx = %s;\n"
          "  uint c0 = 0, c1 = 0, c2 = 0;\n"
          "  for (size_t i = i0; i < i1; i++) {\n"
          "    const %s v = x[i];\n"
          "%s"
          "  }\n"
          "  __global ulong *q = part + (off + c) * 5;\n"
          "  q[0] = %s; q[1] = %s; q[2] = c0; q[3] = c1; q[4] = c2;\n"
          "}\n",
          r->c, r->c, RED_CHUNK, RED_CHUNK, r->c, r->lo, r->hi, r->c,
          r->is_float ? "    mn = fmin(mn, v); mx = fmax(mx, v);\n"
                        "    c0 += isnan(v) ? 1u : 0u; c1 += v == INFINITY ? 1u : 0u; c2 += v == -INFINITY ? 1u : 0u;\n"
                      : "    mn = min(mn, v); mx = max(mx, v);\n",
          r->dt == KILN_F64 ? "as_ulong(mn)" : "(ulong)(long)mn", r->dt == KILN_F64 ? "as_ulong(mx)" : "(ulong)(long)mx");
  }
  /* the batch: a 2-D launch, chunk x value */
  if (!s)
    s = kiln_cl_src_printf(
        &src,
        "__kernel void kiln_obs_red_batch(__global const float *arena, __global const long *desc, uint nv, "
        "__global ulong *part) {\n"
        "  const size_t c = get_global_id(0), it = get_global_id(1);\n"
        "  if (it >= nv) return;\n"
        "  const long base = desc[3 * it], n = desc[3 * it + 1], off = desc[3 * it + 2];\n"
        "  const long i0 = (long)c * %d;\n"
        "  if (i0 >= n) return;\n"
        "  __global const float *x = arena + base + i0;\n"
        "  const long m = min(n - i0, (long)%d);\n"
        "%s"
        "}\n",
        RED_CHUNK, RED_CHUNK, float_chunk);
  /* the final pass: one work-item per observed value over its groups'
     partials (kind 0: float bits, 1: double bits, 2: integers as longs) */
  if (!s)
    s = kiln_cl_src_printf(
        &src,
        "__kernel void kiln_obs_final(__global const ulong *part, __global const long *desc, __global ulong *out, "
        "uint nd) {\n"
        "  const uint e = get_global_id(0);\n"
        "  if (e >= nd) return;\n"
        "  const long first = desc[4 * e], groups = desc[4 * e + 1], stride = desc[4 * e + 2], kind = desc[4 * e + 3];\n"
        "  ulong mn = part[first * 5], mx = part[first * 5 + 1], c0 = 0, c1 = 0, c2 = 0;\n"
        "  for (long g = 0; g < groups; g++) {\n"
        "    __global const ulong *q = part + (first + g * stride) * 5;\n"
        "    if (kind == 0) {\n"
        "      if (as_float((uint)q[0]) < as_float((uint)mn)) mn = q[0];\n"
        "      if (as_float((uint)q[1]) > as_float((uint)mx)) mx = q[1];\n"
        "%s"
        "    } else {\n"
        "      if ((long)q[0] < (long)mn) mn = q[0];\n"
        "      if ((long)q[1] > (long)mx) mx = q[1];\n"
        "    }\n"
        "    c0 += q[2]; c1 += q[3]; c2 += q[4];\n"
        "  }\n"
        "  __global ulong *o = out + 5 * e;\n"
        "  o[0] = mn; o[1] = mx; o[2] = c0; o[3] = c1; o[4] = c2;\n"
        "}\n",
        p->dev->has_fp64 ? "    } else if (kind == 1) {\n"
                           "      if (as_double(q[0]) < as_double(mn)) mn = q[0];\n"
                           "      if (as_double(q[1]) > as_double(mx)) mx = q[1];\n"
                         : "");
  if (!s) s = kiln_cl_program_build(p->slot->ctx, src.text, "", &p->obs_prog);
  if (!s) s = kiln_cl_kernel_create(p->slot->ctx, p->obs_prog, "kiln_obs_final", &p->obs_final);
  if (!s) s = kiln_cl_kernel_create(p->slot->ctx, p->obs_prog, "kiln_obs_red_batch", &p->obs_batch);
  for (int t = 0; t < N_RED_TYPES && !s; t++) {
    char nm[64];
    if (red_types[t].dt == KILN_F64 && !p->dev->has_fp64) continue;
    snprintf(nm, sizeof nm, "kiln_obs_red_%s", red_types[t].c);
    s = kiln_cl_kernel_create(p->slot->ctx, p->obs_prog, nm, &p->obs_red[t]);
  }
  kiln_cl_src_free(&src);
  return s;
}

void kiln_cl_obs_plan_free(kiln_cl_plan *p) {
  for (int k = 0; k < 4; k++) kiln_cl_plan_release(p->obs_plan[k]);
  for (int t = 0; t < 16; t++) kiln_cl_kernel_free(&p->obs_red[t]);
  kiln_cl_kernel_free(&p->obs_final);
  kiln_cl_kernel_free(&p->obs_batch);
  kiln_cl_program_free(p->obs_prog);
}

kiln_status kiln_cl_obs_plan(kiln_cl_plan *p, const kiln_obs *obs, kiln_cl_plan **out) {
  int mode = kiln_cl_obs_mode(obs);
  kiln_status s = KILN_OK;
  if (!p->obs_plan[mode - 1]) s = kiln_cl_plan_prepare_in_mode(p->dev, p->slot, p->orig, mode, &p->obs_plan[mode - 1]);
  *out = p->obs_plan[mode - 1];
  return s;
}

/* ---- run ---- */

static int red_type_of(const kiln_cl_plan *p, kiln_dtype dt) {
  for (int t = 0; t < N_RED_TYPES; t++)
    if (red_types[t].dt == dt && p->obs_red[t].k) return t;
  return -1;
}

static bool observable(kiln_dtype t) { return kiln_dtype_is_float(t) || kiln_dtype_is_int(t); }

static kiln_status add_red(struct kiln_cl_vobs *o, int *cap, red_item it) {
  if (o->n_red == *cap) {
    int nc = *cap ? 2 * *cap : 16;
    red_item *q = kiln_realloc(o->red, sizeof *q * (size_t)nc);
    if (!q) return kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
    o->red = q;
    *cap = nc;
  }
  o->red[o->n_red++] = it;
  return KILN_OK;
}

/* What each step leaves to a reduction kernel (or a read back). */
/* The values step k writes (memory it changes). */
static int step_writes(const kiln_cl_variant *v, int k, int *out, int max) {
  const kiln_cl_step *st = &v->steps[k];
  int n = 0;
  if (st->kind == KILN_CL_STEP_GEN) {
    const kiln_cl_kernel_sig *sig = &v->sig[st->kern];
    for (int a = 0; a < sig->n_args && n < max; a++)
      if (sig->args[a].output) out[n++] = sig->args[a].value;
  } else {
    const kiln_node *nd = &v->g->nodes[st->node];
    for (int q = 0; q < nd->n_out && n < max; q++)
      if (nd->out[q] >= 0) out[n++] = nd->out[q];
  }
  return n;
}

static bool overlaps(const kiln_cl_place *a, const kiln_cl_place *b) {
  return a->base && a->base == b->base && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
}

static kiln_status flush_plan(kiln_cl_plan *p, struct kiln_cl_vobs *o, const kiln_cl_variant *v, int after,
                              const int *pend, int np) {
  if (!np) return KILN_OK;
  red_batch *q = kiln_realloc(o->batch, sizeof *q * (size_t)(o->n_batch + 1));
  if (!q) return kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  o->batch = q;
  red_batch *b = &o->batch[o->n_batch];
  memset(b, 0, sizeof *b);
  b->after = after;
  b->n = np;
  int64_t *desc = kiln_calloc((size_t)np * 3, sizeof *desc);
  if (!desc) return kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  for (int i = 0; i < np; i++) {
    const red_item *it = &o->red[pend[i]];
    desc[3 * i] = (int64_t)(v->place[it->value].offset / sizeof(float));
    desc[3 * i + 1] = it->numel;
    desc[3 * i + 2] = it->off;
    if (it->groups > b->max_chunks) b->max_chunks = it->groups;
  }
  kiln_status s = kiln_cl_buffer_create(p->slot->ctx, (size_t)np * 3 * sizeof *desc, &b->desc);
  if (!s) s = kiln_cl_buffer_write(p->slot->ctx, &b->desc, 0, desc, (size_t)np * 3 * sizeof *desc);
  kiln_free(desc);
  if (!s) o->n_batch++;
  else kiln_cl_buffer_free(&b->desc);
  return s;
}

/* Which float32 arena values go in batches, and where each batch runs. */
static kiln_status plan_batches(kiln_cl_plan *p, kiln_cl_variant *v, struct kiln_cl_vobs *o) {
  if (!v->arena || !p->obs_batch.k) return KILN_OK;
  int *pend = kiln_calloc((size_t)o->n_red + 1, sizeof *pend), np = 0;
  if (!pend) return kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  kiln_status s = KILN_OK;
  int w[KILN_CL_SIG_MAX_ARGS + 64];
  for (int k = 0; k < v->n_steps && !s; k++) {
    int nw = step_writes(v, k, w, KILN_CL_SIG_MAX_ARGS + 64);
    bool hit = false; /* step k writes over a pending value: flush after step k - 1 */
    for (int j = 0; j < nw && !hit; j++)
      for (int i = 0; i < np && !hit; i++) hit = overlaps(&v->place[w[j]], &v->place[o->red[pend[i]].value]);
    if (hit) {
      s = flush_plan(p, o, v, k - 1, pend, np);
      np = 0;
    }
    for (int i = o->first_red[k]; i < o->first_red[k + 1] && !s; i++) {
      red_item *it = &o->red[i];
      const kiln_cl_place *pl = &v->place[it->value];
      it->batched = it->type >= 0 && red_types[it->type].dt == KILN_F32 && it->numel > 0 && pl->base == v->arena &&
                    pl->offset % sizeof(float) == 0;
      if (it->batched) pend[np++] = i;
    }
  }
  if (!s) s = flush_plan(p, o, v, v->n_steps - 1, pend, np);
  kiln_free(pend);
  return s;
}

static kiln_status lay_out(kiln_cl_plan *p, kiln_cl_variant *v, struct kiln_cl_vobs *o) {
  const kiln_graph *g = v->g;
  int cap = 0;
  kiln_status s = KILN_OK;
  bool values = kiln_cl_obs_unfused(p);
  if (!(o->first_red = kiln_calloc((size_t)v->n_steps + 1, sizeof *o->first_red)))
    return kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  for (int k = 0; k < v->n_steps && !s; k++) {
    const kiln_cl_step *st = &v->steps[k];
    o->first_red[k] = o->n_red;
    int outs[KILN_CL_SIG_MAX_ARGS + 64], n = 0;
    if (st->kind == KILN_CL_STEP_GEN) {
      const kiln_cl_kernel_sig *sig = &v->sig[st->kern];
      for (int a = 0; a < sig->n_args; a++) {
        if (!sig->args[a].output) continue;
        bool in_kernel = false;
        for (int j = 0; j < sig->n_obs; j++) in_kernel = in_kernel || sig->obs_value[j] == sig->args[a].value;
        if (!in_kernel) outs[n++] = sig->args[a].value;
      }
    } else {
      const kiln_node *nd = &g->nodes[st->node];
      for (int q = 0; q < nd->n_out && n < 64; q++)
        if (nd->out[q] >= 0) outs[n++] = nd->out[q];
    }
    for (int j = 0; j < n && !s; j++) {
      int w = outs[j];
      bool dup = false;
      for (int i = o->first_red[k]; i < o->n_red; i++) dup = dup || o->red[i].value == w;
      if (dup || !observable(v->sh->v[w].dtype) || g->values[w].init) continue;
      red_item it = {k, w, values ? -1 : red_type_of(p, v->sh->v[w].dtype), value_numel(v, w), 0, 0, false};
      if (it.numel < 0 || !v->place[w].mem) continue; /* not on the device: nothing to reduce */
      if (it.type >= 0) {
        it.groups = (it.numel + RED_CHUNK - 1) / RED_CHUNK; /* partials: one per chunk */
        if (it.groups < 1) it.groups = 1;
        it.off = o->kparts + o->rparts;
        o->rparts += it.groups;
      }
      s = add_red(o, &cap, it);
    }
  }
  if (!s) o->first_red[v->n_steps] = o->n_red;
  if (!s) s = plan_batches(p, v, o);
  /* the final pass's descriptors: the kernels' values, then the items */
  int nd = 0;
  for (int k = 0; k < v->n_kern; k++) nd += v->sig[k].n_obs;
  for (int i = 0; i < o->n_red; i++) nd += o->red[i].type >= 0;
  int64_t *desc = kiln_calloc((size_t)nd * 4 + 4, sizeof *desc);
  if (!s && !desc) s = kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  int e = 0;
  for (int k = 0; k < v->n_kern && !s; k++)
    for (int j = 0; j < v->sig[k].n_obs; j++, e++) {
      desc[4 * e] = v->sig[k].obs_offset + j;
      desc[4 * e + 1] = v->sig[k].obs_groups;
      desc[4 * e + 2] = v->sig[k].n_obs;
      desc[4 * e + 3] = 0;
    }
  for (int i = 0; i < o->n_red && !s; i++) {
    if (o->red[i].type < 0) continue;
    kiln_dtype dt = red_types[o->red[i].type].dt;
    desc[4 * e] = o->red[i].off;
    desc[4 * e + 1] = o->red[i].numel ? o->red[i].groups : 0;
    desc[4 * e + 2] = 1;
    desc[4 * e + 3] = dt == KILN_F32 ? 0 : dt == KILN_F64 ? 1 : 2;
    e++;
  }
  o->n_final = nd;
  kiln_cl_context *ctx = p->slot->ctx;
  int64_t total = o->kparts + o->rparts;
  if (!s && total) s = kiln_cl_buffer_create(ctx, (size_t)total * 5 * sizeof(uint64_t), &o->pbuf);
  if (!s && nd) s = kiln_cl_buffer_create(ctx, (size_t)nd * 4 * sizeof(int64_t), &o->dbuf);
  if (!s && nd) s = kiln_cl_buffer_write(ctx, &o->dbuf, 0, desc, (size_t)nd * 4 * sizeof(int64_t));
  if (!s && nd) s = kiln_cl_buffer_create(ctx, (size_t)nd * 5 * sizeof(uint64_t), &o->fbuf);
  kiln_free(desc);
  if (!s && nd && !(o->host = kiln_malloc((size_t)nd * 5 * sizeof *o->host)))
    s = kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  for (int k = 0; k < v->n_kern && !s; k++) /* the kernels' partials buffer */
    if (v->sig[k].n_obs) s = kiln_cl_kernel_arg_buffer(&v->kern[k], (cl_uint)v->sig[k].n_args, &o->pbuf);
  if (!s) {
    int nk = 0, nr = 0, nb = 0;
    for (int k = 0; k < v->n_kern; k++) nk += v->sig[k].n_obs;
    for (int i = 0; i < o->n_red; i++) *(o->red[i].type >= 0 ? &nr : &nb) += 1;
    int nlaunch = o->n_batch;
    for (int i = 0; i < o->n_red; i++) nlaunch += o->red[i].type >= 0 && !o->red[i].batched && o->red[i].numel > 0;
    kiln_log(KILN_LOG_INFO,
             "opencl: observing '%s': %d values reduced inside generated kernels, %d by reduction kernels (%d "
             "launches), %d read back%s",
             g->name ? g->name : "", nk, nr, nlaunch, nb, values ? " (histograms: unfused, values read back)" : "");
  }
  o->laid = !s;
  return s;
}

kiln_status kiln_cl_obs_begin(kiln_cl_plan *p, kiln_cl_variant *v, kiln_obs *obs) {
  struct kiln_cl_vobs *o = NULL;
  kiln_status s = vobs_of(v, &o);
  if (!s) s = build_reducers(p);
  if (!s && !o->laid) s = lay_out(p, v, o);
  if (s) return s;
  const kiln_graph *g = v->g;
  if (o->obs_id != kiln_obs_id(obs)) {
    kiln_free(o->rec);
    kiln_free(o->konst);
    o->konst = NULL;
    o->obs_id = 0;
    if (!(o->rec = kiln_calloc((size_t)g->n_values + 1, sizeof *o->rec)) ||
        !(o->konst = kiln_calloc((size_t)g->n_values + 1, sizeof *o->konst)))
      return kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
    if ((s = kiln_obs_map_graph(obs, g, o->rec))) return s;
    for (int w = 0; w < g->n_values; w++) {
      kiln_obs_partial_init(&o->konst[w]);
      if (o->rec[w] >= 0 && g->values[w].init) kiln_obs_partial_fold(&o->konst[w], g->values[w].init);
    }
    o->obs_id = kiln_obs_id(obs);
  }
  for (int w = 0; w < g->n_values; w++) { /* constants (constant folding): every run */
    const kiln_tensor *t = g->values[w].init;
    if (o->rec[w] < 0 || !t || !observable(t->dtype)) continue;
    if (kiln_obs_wants_values(obs)) {
      kiln_obs_tensor(obs, o->rec[w], t);
    } else {
      kiln_obs_summary(obs, o->rec[w], &o->konst[w]);
      kiln_obs_set_dtype(obs, o->rec[w], t->dtype);
    }
  }
  return KILN_OK;
}

/* A value read back whole (histograms, or a type without a reduction kernel). */
static kiln_status read_back(kiln_cl_plan *p, kiln_cl_variant *v, kiln_obs *obs, const red_item *it, int rec) {
  const kiln_vshape *x = &v->sh->v[it->value];
  int64_t dims[KILN_MAX_RANK];
  for (int d = 0; d < x->rank; d++)
    if (!kiln_dimx_is_const(v->sh->tab, x->dims[d], &dims[d])) dims[d] = 0;
  kiln_tensor t = {0};
  kiln_status s = kiln_tensor_alloc(&t, x->dtype, x->rank, dims);
  if (s) return s;
  size_t n = kiln_tensor_bytes(&t);
  cl_int e = n ? clEnqueueReadBuffer(p->slot->ctx->queue, v->place[it->value].mem, CL_TRUE, 0, n, t.data, 0, NULL, NULL)
               : CL_SUCCESS;
  if (e) s = kiln_cl_fail(e, "reading observed '%s' back", v->g->values[it->value].name);
  else kiln_obs_tensor(obs, rec, &t);
  kiln_tensor_release(&t);
  return s;
}

kiln_status kiln_cl_obs_step(kiln_cl_plan *p, kiln_cl_variant *v, int k, kiln_obs *obs) {
  struct kiln_cl_vobs *o = v->obs;
  kiln_status s = KILN_OK;
  for (int i = o->first_red[k]; i < o->first_red[k + 1] && !s; i++) {
    const red_item *it = &o->red[i];
    int rec = o->rec[it->value];
    if (rec < 0) continue;
    if (it->type < 0) {
      s = read_back(p, v, obs, it, rec);
      continue;
    }
    if (!it->numel || it->batched) continue; /* empty: a partial at the end; batched: below */
    kiln_cl_kernel *kr = &p->obs_red[it->type];
    cl_ulong n = (cl_ulong)it->numel, off = (cl_ulong)it->off;
    cl_mem x = v->place[it->value].mem;
    s = kiln_cl_kernel_arg(kr, 0, sizeof x, &x);
    if (!s) s = kiln_cl_kernel_arg(kr, 1, sizeof n, &n);
    if (!s) s = kiln_cl_kernel_arg_buffer(kr, 2, &o->pbuf);
    if (!s) s = kiln_cl_kernel_arg(kr, 3, sizeof off, &off);
    if (!s) s = kiln_cl_launch_1d(p->slot->ctx, kr, (size_t)it->groups, 0, NULL);
  }
  for (int b = 0; b < o->n_batch && !s; b++) { /* the batches due after step k */
    const red_batch *bt = &o->batch[b];
    if (bt->after != k) continue;
    kiln_cl_kernel *kb = &p->obs_batch;
    cl_uint nv = (cl_uint)bt->n;
    s = kiln_cl_kernel_arg(kb, 0, sizeof v->arena, &v->arena);
    if (!s) s = kiln_cl_kernel_arg_buffer(kb, 1, &bt->desc);
    if (!s) s = kiln_cl_kernel_arg(kb, 2, sizeof nv, &nv);
    if (!s) s = kiln_cl_kernel_arg_buffer(kb, 3, &o->pbuf);
    size_t g[2] = {kiln_cl_pad((size_t)bt->max_chunks, 64), (size_t)bt->n};
    cl_int e = s ? CL_SUCCESS : clEnqueueNDRangeKernel(p->slot->ctx->queue, kb->k, 2, NULL, g, NULL, 0, NULL, NULL);
    if (e) s = kiln_cl_fail(e, "launching the observers' batch reduction");
  }
  return s;
}

static void decode(kiln_obs_partial *q, const uint64_t *e, kiln_dtype dt) {
  double mn, mx;
  if (dt == KILN_F32) {
    uint32_t a = (uint32_t)e[0], b = (uint32_t)e[1];
    float fa, fb;
    memcpy(&fa, &a, sizeof fa);
    memcpy(&fb, &b, sizeof fb);
    mn = fa, mx = fb;
  } else if (dt == KILN_F64) {
    memcpy(&mn, &e[0], sizeof mn);
    memcpy(&mx, &e[1], sizeof mx);
  } else if (dt == KILN_U32) {
    mn = (double)(uint32_t)e[0], mx = (double)(uint32_t)e[1];
  } else {
    mn = (double)(int64_t)e[0], mx = (double)(int64_t)e[1];
  }
  if (mn < q->min) q->min = mn;
  if (mx > q->max) q->max = mx;
  q->nan += e[2];
  q->pos_inf += e[3];
  q->neg_inf += e[4];
}

kiln_status kiln_cl_obs_end(kiln_cl_plan *p, kiln_cl_variant *v, kiln_obs *obs) {
  (void)obs;
  struct kiln_cl_vobs *o = v->obs;
  kiln_cl_context *ctx = p->slot->ctx;
  kiln_status s = KILN_OK;
  if (!o->n_final) return KILN_OK;
  /* the final pass on the device, then one read of 5 words per value */
  cl_uint nd = (cl_uint)o->n_final;
  s = kiln_cl_kernel_arg_buffer(&p->obs_final, 0, &o->pbuf);
  if (!s) s = kiln_cl_kernel_arg_buffer(&p->obs_final, 1, &o->dbuf);
  if (!s) s = kiln_cl_kernel_arg_buffer(&p->obs_final, 2, &o->fbuf);
  if (!s) s = kiln_cl_kernel_arg(&p->obs_final, 3, sizeof nd, &nd);
  if (!s) s = kiln_cl_launch_1d(ctx, &p->obs_final, nd, 0, NULL);
  if (s) return s;
  /* not blocking: the outputs' (blocking) reads come after it on the
     in-order queue, and the run waits for the queue anyway */
  cl_int err = clEnqueueReadBuffer(ctx->queue, o->fbuf.mem, CL_FALSE, 0, (size_t)nd * 5 * sizeof *o->host, o->host, 0,
                                   NULL, NULL);
  if (err) return kiln_cl_fail(err, "reading the observers' partials back");
  return KILN_OK;
}

kiln_status kiln_cl_obs_collect(kiln_cl_plan *p, kiln_cl_variant *v, kiln_obs *obs) {
  (void)p;
  struct kiln_cl_vobs *o = v->obs;
  if (!o->n_final) return KILN_OK;
  int e = 0;
  for (int k = 0; k < v->n_kern; k++) {
    const kiln_cl_kernel_sig *sig = &v->sig[k];
    for (int j = 0; j < sig->n_obs; j++, e++) {
      int w = sig->obs_value[j], rec = o->rec[w];
      if (rec < 0) continue;
      kiln_obs_partial q;
      kiln_obs_partial_init(&q);
      decode(&q, o->host + 5 * e, KILN_F32);
      q.count = (uint64_t)value_numel(v, w);
      kiln_obs_summary(obs, rec, &q);
      kiln_obs_set_dtype(obs, rec, KILN_F32);
    }
  }
  for (int i = 0; i < o->n_red; i++) {
    const red_item *it = &o->red[i];
    if (it->type < 0) continue;
    int rec = o->rec[it->value];
    e++;
    if (rec < 0) continue;
    kiln_obs_partial q;
    kiln_obs_partial_init(&q);
    if (it->numel) decode(&q, o->host + 5 * (e - 1), v->sh->v[it->value].dtype);
    q.count = (uint64_t)it->numel;
    kiln_obs_summary(obs, rec, &q);
    kiln_obs_set_dtype(obs, rec, v->sh->v[it->value].dtype);
  }
  return KILN_OK;
}
