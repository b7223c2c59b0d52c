/* cpu_fallback/plan_observe: see plan_observe.h. */
#include "cpu_fallback/plan_observe.h"

#include <string.h>

#include "cpu_fallback/vmath.h"
#include "ir/alloc.h"

#ifdef KILN_OBS_HAVE_AVX2
void kiln_cpu_obs_fold_f32_avx2(kiln_obs_partial *p, const float *x, int64_t n);
#endif

/* The float32 fold of the active ISA (KILN_CPU_ISA=base: the portable one). */
static void (*fold_fn(void))(kiln_obs_partial *, const float *, int64_t) {
#ifdef KILN_OBS_HAVE_AVX2
  if (kiln_vm_isa_active() == KILN_VM_ISA_AVX2 && kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2))
    return kiln_cpu_obs_fold_f32_avx2;
#endif
  return kiln_obs_partial_fold_f32;
}

typedef struct ostep {
  int n;                 /* values folded tile by tile */
  int *expr, *rec;
  kiln_dtype *dt;
  kiln_obs_partial *part;
  kiln_tile_obs ob;
  int n_mem;             /* values reported from memory after the step */
  int *mem;
} ostep;

struct kiln_cpu_obs {
  uint64_t id;
  int n_values, n_steps;
  int *rec;              /* per value: its record, -1 */
  ostep *step;           /* per step */
  bool values;           /* histograms: every value from memory */
  bool have_consts;
  void (*fold)(kiln_obs_partial *p, const float *x, int64_t n);
  kiln_obs_partial *konst; /* per value: the cached partial of a constant */
};

int kiln_cpu_obs_mode(const kiln_obs *obs) {
  if (!obs) return 0;
  return (kiln_obs_observe_all(obs) ? KILN_CPU_OBS_KEEP : 0) | (kiln_obs_wants_values(obs) ? KILN_CPU_OBS_UNFUSED : 0);
}

static void free_steps(kiln_cpu_obs *st) {
  for (int k = 0; st->step && k < st->n_steps; k++) {
    ostep *o = &st->step[k];
    kiln_free(o->expr);
    kiln_free(o->rec);
    kiln_free(o->dt);
    kiln_free(o->part);
    kiln_free(o->mem);
  }
  kiln_free(st->step);
  st->step = NULL;
}

void kiln_cpu_obs_free(kiln_cpu_obs *st) {
  if (!st) return;
  free_steps(st);
  kiln_free(st->rec);
  kiln_free(st->konst);
  kiln_free(st);
}

static bool observable(kiln_dtype t) { return kiln_dtype_is_float(t) || kiln_dtype_is_int(t); }

/* Elements of value v at this run's sizes; -1 when unknown. */
static int64_t numel_of(const kiln_shapes *sh, int v, const int64_t *vals, int nsym) {
  const kiln_vshape *x = &sh->v[v];
  if (x->rank < 0) return -1;
  int64_t n = 1;
  for (int d = 0; d < x->rank; d++) {
    int64_t m;
    if (kiln_dimx_eval(sh->tab, x->dims[d], vals, nsym, &m)) {
      kiln_error_clear();
      return -1;
    }
    n *= m;
  }
  return n;
}

static kiln_status build_step(kiln_cpu_obs *st, int k, const kiln_graph *g, const kiln_shapes *sh,
                              const int64_t *vals, int nsym, const kiln_step *step, const kiln_fuse_spec *sp) {
  ostep *o = &st->step[k];
  int cap = 1;
  for (int j = 0; j < step->n_nodes; j++) cap += g->nodes[step->nodes[j]].n_out;
  o->expr = kiln_calloc((size_t)cap, sizeof *o->expr);
  o->rec = kiln_calloc((size_t)cap, sizeof *o->rec);
  o->dt = kiln_calloc((size_t)cap, sizeof *o->dt);
  o->part = kiln_calloc((size_t)cap, sizeof *o->part);
  o->mem = kiln_calloc((size_t)cap, sizeof *o->mem);
  if (!o->expr || !o->rec || !o->dt || !o->part || !o->mem)
    return kiln_fail(KILN_E_NOMEM, "out of memory mapping observed tensors");
  for (int j = 0; j < step->n_nodes; j++) {
    int node = step->nodes[j];
    const kiln_node *n = &g->nodes[node];
    for (int q = 0; q < n->n_out; q++) {
      int w = n->out[q];
      if (w < 0 || st->rec[w] < 0 || !observable(sh->v[w].dtype)) continue;
      int e = -1;
      /* one expression per domain element: float32 values (the tile
         computes in float32), not the pooling's output */
      if (!st->values && sp && sh->v[w].dtype == KILN_F32 && node != sp->pool && sp->bound &&
          numel_of(sh, w, vals, nsym) == sp->numel)
        for (int x = 0; x < sp->n_vexpr && e < 0; x++)
          if (sp->vexpr[x].value == w) e = sp->vexpr[x].expr;
      if (e >= 0) {
        o->expr[o->n] = e;
        o->rec[o->n] = st->rec[w];
        o->dt[o->n] = sh->v[w].dtype;
        o->n++;
      } else {
        o->mem[o->n_mem++] = w;
      }
    }
  }
  o->ob.n = o->n;
  o->ob.expr = o->expr;
  o->ob.part = o->part;
  o->ob.fold = st->fold;
  return KILN_OK;
}

kiln_status kiln_cpu_obs_bind(kiln_cpu_obs **pst, kiln_obs *obs, const kiln_graph *g, const kiln_shapes *sh,
                              const int64_t *vals, int nsym, const kiln_schedule *sched,
                              kiln_tile_prog *const *tile) {
  kiln_cpu_obs *st = *pst;
  if (st && st->id == kiln_obs_id(obs)) return KILN_OK;
  if (!st) {
    if (!(st = kiln_calloc(1, sizeof *st))) return kiln_fail(KILN_E_NOMEM, "out of memory mapping observed tensors");
    *pst = st;
  }
  free_steps(st);
  kiln_free(st->rec);
  kiln_free(st->konst);
  st->konst = NULL;
  st->have_consts = false;
  st->id = 0;
  st->n_values = g->n_values;
  st->n_steps = sched->n_steps;
  st->values = kiln_obs_wants_values(obs);
  st->fold = fold_fn();
  st->rec = kiln_calloc((size_t)g->n_values + 1, sizeof *st->rec);
  st->step = kiln_calloc((size_t)sched->n_steps + 1, sizeof *st->step);
  if (!st->rec || !st->step) return kiln_fail(KILN_E_NOMEM, "out of memory mapping observed tensors");
  kiln_status s = kiln_obs_map_graph(obs, g, st->rec);
  for (int k = 0; k < sched->n_steps && !s; k++)
    if (tile && tile[k]) s = build_step(st, k, g, sh, vals, nsym, &sched->steps[k], sched->steps[k].user);
  if (!s) {
    st->id = kiln_obs_id(obs);
    int n_rec = 0, n_tile = 0, n_mem = 0;
    for (int v = 0; v < g->n_values; v++) n_rec += st->rec[v] >= 0;
    for (int k = 0; k < sched->n_steps; k++) n_tile += st->step[k].n, n_mem += st->step[k].n_mem;
    kiln_log(KILN_LOG_INFO, "cpu plan: %d observed values: %d reduced tile by tile in tile steps, %d read from memory "
             "after their tile step, the rest from their kernels' outputs%s", n_rec, n_tile, n_mem,
             st->values ? " (histograms: unfused plan)" : "");
  }
  return s;
}

void kiln_cpu_obs_constants(kiln_cpu_obs *st, kiln_obs *obs, const kiln_graph *g) {
  if (!st->have_consts) { /* once per observer: constants do not change */
    st->konst = kiln_calloc((size_t)g->n_values + 1, sizeof *st->konst);
    if (!st->konst) return; /* nothing reported: out of memory */
    for (int v = 0; v < g->n_values; v++) {
      kiln_obs_partial_init(&st->konst[v]);
      if (st->rec[v] >= 0 && g->values[v].init) kiln_obs_partial_fold(&st->konst[v], g->values[v].init);
    }
    st->have_consts = true;
  }
  for (int v = 0; v < g->n_values; v++) {
    if (st->rec[v] < 0 || !g->values[v].init || !observable(g->values[v].init->dtype)) continue;
    if (st->values) {
      kiln_obs_tensor(obs, st->rec[v], g->values[v].init);
    } else {
      kiln_obs_summary(obs, st->rec[v], &st->konst[v]);
      kiln_obs_set_dtype(obs, st->rec[v], g->values[v].init->dtype);
    }
  }
}

/* A tensor from memory: dense float32 through the vectorised fold (a
 * summary), the rest (and anything with histograms) as kiln_obs_tensor. */
static void report(const kiln_cpu_obs *st, kiln_obs *obs, int rec, const kiln_tensor *t) {
  if (!st->values && t->dtype == KILN_F32 && !t->strided) {
    kiln_obs_partial p;
    kiln_obs_partial_init(&p);
    st->fold(&p, t->data, t->numel);
    kiln_obs_summary(obs, rec, &p);
    kiln_obs_set_dtype(obs, rec, KILN_F32);
    return;
  }
  kiln_obs_tensor(obs, rec, t);
}

void kiln_cpu_obs_node(const kiln_cpu_obs *st, kiln_obs *obs, const kiln_node *n, const kiln_tensor *slot) {
  for (int q = 0; q < n->n_out; q++) {
    int w = n->out[q];
    if (w >= 0 && st->rec[w] >= 0 && slot[w].data) report(st, obs, st->rec[w], &slot[w]);
  }
}

bool kiln_cpu_obs_wants(const kiln_cpu_obs *st, int v) { return st && v >= 0 && v < st->n_values && st->rec[v] >= 0; }

const kiln_tile_obs *kiln_cpu_obs_step_begin(kiln_cpu_obs *st, int k) {
  ostep *o = &st->step[k];
  if (!o->n) return NULL;
  for (int j = 0; j < o->n; j++) kiln_obs_partial_init(&o->part[j]);
  return &o->ob;
}

void kiln_cpu_obs_step_end(kiln_cpu_obs *st, kiln_obs *obs, int k, const kiln_tensor *slot) {
  ostep *o = &st->step[k];
  for (int j = 0; j < o->n; j++) {
    kiln_obs_summary(obs, o->rec[j], &o->part[j]);
    kiln_obs_set_dtype(obs, o->rec[j], o->dt[j]);
  }
  for (int j = 0; j < o->n_mem; j++) {
    int w = o->mem[j];
    if (slot[w].data) report(st, obs, st->rec[w], &slot[w]);
  }
}
