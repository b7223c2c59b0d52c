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

#define RED_WG KILN_CL_OBS_WG
#define RED_GROUPS KILN_CL_OBS_GROUPS

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
} red_item;

struct kiln_cl_vobs {
  int64_t kparts;          /* in-kernel partials (entries of 5 ulongs) */
  kiln_cl_buffer kbuf;
  bool laid;               /* the reductions are laid out */
  int n_red;
  red_item *red;
  int *first_red;          /* per step: its first item (items are in step order), n_steps + 1 entries */
  int64_t rparts;
  kiln_cl_buffer rbuf;
  uint64_t *host;          /* the partials read back */
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
  kiln_cl_buffer_free(&o->kbuf);
  kiln_cl_buffer_free(&o->rbuf);
  kiln_free(o->red);
  kiln_free(o->first_red);
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
      if (dup || e < 0 || e >= sp->n_expr || sp->expr[e].dtype != KILN_F32 || sp->expr[e].reduced ||
          v->sh->v[w].dtype != KILN_F32 || value_numel(v, w) != sp->numel)
        continue;
      expr[n] = e;
      val[n++] = w;
    }
  if (!n) return kiln_cl_codegen_named(sp, p->dev, name, text, sig);
  struct kiln_cl_vobs *o = NULL;
  kiln_status s = vobs_of(v, &o);
  if (s) return s;
  s = kiln_cl_codegen_observed(sp, p->dev, name, expr, val, n, o->kparts, text, sig);
  if (!s) o->kparts += sig->obs_groups * sig->n_obs;
  return s;
}

kiln_status kiln_cl_obs_bind_kernel(kiln_cl_plan *p, kiln_cl_variant *v, int k) {
  const kiln_cl_kernel_sig *sig = &v->sig[k];
  if (!sig->n_obs) return KILN_OK;
  struct kiln_cl_vobs *o = NULL;
  kiln_status s = vobs_of(v, &o);
  if (s) return s;
  if (!o->kbuf.mem && (s = kiln_cl_buffer_create(p->slot->ctx, (size_t)o->kparts * 5 * sizeof(uint64_t), &o->kbuf)))
    return s;
  return kiln_cl_kernel_arg_buffer(&v->kern[k], (cl_uint)sig->n_args, &o->kbuf);
}

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
    if (!s)
      s = kiln_cl_src_printf(
          &src,
          "__kernel void kiln_obs_red_%s(__global const %s *x, ulong n, __global ulong *part, ulong off) {\n"
          "  %s mn = %s, mx = %s;\n"
          "  uint c0 = 0, c1 = 0, c2 = 0;\n"
          "  for (size_t i = get_global_id(0); i < n; i += get_global_size(0)) {\n"
          "    const %s v = x[i];\n"
          "%s"
          "  }\n"
          "  __local %s lmn[%d], lmx[%d];\n"
          "  __local uint lc[%d];\n"
          "  const uint l = get_local_id(0);\n"
          "  lmn[l] = mn; lmx[l] = mx; lc[3 * l] = c0; lc[3 * l + 1] = c1; lc[3 * l + 2] = c2;\n"
          "  barrier(CLK_LOCAL_MEM_FENCE);\n"
          "  for (uint h = get_local_size(0) / 2; h > 0; h >>= 1) { /* a power of 2 <= %d */\n"
          "    if (l < h) {\n"
          "      lmn[l] = %s(lmn[l], lmn[l + h]); lmx[l] = %s(lmx[l], lmx[l + h]);\n"
          "      for (uint c = 0; c < 3; c++) lc[3 * l + c] += lc[3 * (l + h) + c];\n"
          "    }\n"
          "    barrier(CLK_LOCAL_MEM_FENCE);\n"
          "  }\n"
          "  if (l == 0) {\n"
          "    __global ulong *q = part + (off + get_group_id(0)) * 5;\n"
          "    q[0] = %s; q[1] = %s; q[2] = lc[0]; q[3] = lc[1]; q[4] = lc[2];\n"
          "  }\n"
          "}\n",
          r->c, r->c, r->c, r->lo, r->hi, r->c,
          r->is_float ? "    mn = fmin(mn, v); mx = fmax(mx, v);\n"
                        "    c0 += isnan(v) ? 1u : 0u; c1 += v == INFINITY ? 1u : 0u; c2 += v == -INFINITY ? 1u : 0u;\n"
                      : "    mn = min(mn, v); mx = max(mx, v);\n",
          r->c, RED_WG, RED_WG, 3 * RED_WG, RED_WG, r->is_float ? "fmin" : "min", r->is_float ? "fmax" : "max",
          r->dt == KILN_F32 ? "as_uint(lmn[0])" : r->dt == KILN_F64 ? "as_ulong(lmn[0])" : "(ulong)(long)lmn[0]",
          r->dt == KILN_F32 ? "as_uint(lmx[0])" : r->dt == KILN_F64 ? "as_ulong(lmx[0])" : "(ulong)(long)lmx[0]");
  }
  if (!s) s = kiln_cl_program_build(p->slot->ctx, src.text, "", &p->obs_prog);
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
  kiln_cl_program_free(p->obs_prog);
}

kiln_status kiln_cl_obs_plan(kiln_cl_plan *p, const kiln_obs *obs, kiln_cl_plan **out) {
  int mode = kiln_cl_obs_mode(obs);
  kiln_status s = KILN_OK;
  if (!p->obs_plan[mode - 1]) s = kiln_cl_plan_prepare_mode(p->dev, p->orig, mode, &p->obs_plan[mode - 1]);
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
      red_item it = {k, w, values ? -1 : red_type_of(p, v->sh->v[w].dtype), value_numel(v, w), 0, 0};
      if (it.numel < 0 || !v->place[w].mem) continue; /* not on the device: nothing to reduce */
      if (it.type >= 0) {
        it.groups = (it.numel + RED_WG - 1) / RED_WG;
        if (it.groups > RED_GROUPS) it.groups = RED_GROUPS;
        if (it.groups < 1) it.groups = 1;
        it.off = o->rparts;
        o->rparts += it.groups;
      }
      s = add_red(o, &cap, it);
    }
  }
  if (!s) o->first_red[v->n_steps] = o->n_red;
  if (!s && o->rparts) s = kiln_cl_buffer_create(p->slot->ctx, (size_t)o->rparts * 5 * sizeof(uint64_t), &o->rbuf);
  int64_t total = o->kparts + o->rparts;
  if (!s && total && !(o->host = kiln_malloc((size_t)total * 5 * sizeof *o->host)))
    s = kiln_fail(KILN_E_NOMEM, "out of memory observing an OpenCL plan");
  if (!s) {
    int nk = 0, nr = 0, nb = 0;
    for (int k = 0; k < v->n_kern; k++) nk += v->sig[k].n_obs;
    for (int i = 0; i < o->n_red; i++) *(o->red[i].type >= 0 ? &nr : &nb) += 1;
    kiln_log(KILN_LOG_INFO,
             "opencl: observing '%s': %d values reduced inside generated kernels, %d by reduction kernels, %d read "
             "back%s",
             g->name ? g->name : "", nk, nr, nb, values ? " (histograms: unfused, values read back)" : "");
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
    if (!it->numel) continue; /* an empty partial at the end */
    kiln_cl_kernel *kr = &p->obs_red[it->type];
    cl_ulong n = (cl_ulong)it->numel, off = (cl_ulong)it->off;
    cl_mem x = v->place[it->value].mem;
    s = kiln_cl_kernel_arg(kr, 0, sizeof x, &x);
    if (!s) s = kiln_cl_kernel_arg(kr, 1, sizeof n, &n);
    if (!s) s = kiln_cl_kernel_arg_buffer(kr, 2, &o->rbuf);
    if (!s) s = kiln_cl_kernel_arg(kr, 3, sizeof off, &off);
    size_t local = RED_WG; /* the largest power of 2 the kernel takes */
    while (local > 1 && local > kr->wg_size) local /= 2;
    if (!s) s = kiln_cl_launch_1d(p->slot->ctx, kr, (size_t)it->groups * local, local, NULL);
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
  struct kiln_cl_vobs *o = v->obs;
  kiln_cl_context *ctx = p->slot->ctx;
  kiln_status s = KILN_OK;
  if (o->kparts) s = kiln_cl_buffer_read(ctx, &o->kbuf, 0, o->host, (size_t)o->kparts * 5 * sizeof *o->host);
  if (!s && o->rparts)
    s = kiln_cl_buffer_read(ctx, &o->rbuf, 0, o->host + o->kparts * 5, (size_t)o->rparts * 5 * sizeof *o->host);
  if (s) return s;
  /* in-kernel partials: per kernel, groups x n_obs entries */
  int64_t base = 0;
  for (int k = 0; k < v->n_kern; k++) {
    const kiln_cl_kernel_sig *sig = &v->sig[k];
    for (int j = 0; j < sig->n_obs; j++) {
      int w = sig->obs_value[j], rec = o->rec[w];
      if (rec < 0) continue;
      kiln_obs_partial q;
      kiln_obs_partial_init(&q);
      for (int64_t gi = 0; gi < sig->obs_groups; gi++) decode(&q, o->host + (base + gi * sig->n_obs + j) * 5, KILN_F32);
      q.count = (uint64_t)value_numel(v, w);
      kiln_obs_summary(obs, rec, &q);
      kiln_obs_set_dtype(obs, rec, KILN_F32);
    }
    base += sig->obs_groups * sig->n_obs;
  }
  for (int i = 0; i < o->n_red; i++) {
    const red_item *it = &o->red[i];
    int rec = o->rec[it->value];
    if (rec < 0 || it->type < 0) continue;
    kiln_obs_partial q;
    kiln_obs_partial_init(&q);
    for (int64_t gi = 0; it->numel && gi < it->groups; gi++)
      decode(&q, o->host + (o->kparts + it->off + gi) * 5, v->sh->v[it->value].dtype);
    q.count = (uint64_t)it->numel;
    kiln_obs_summary(obs, rec, &q);
    kiln_obs_set_dtype(obs, rec, v->sh->v[it->value].dtype);
  }
  return KILN_OK;
}
