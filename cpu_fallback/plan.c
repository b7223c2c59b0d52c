/* cpu_fallback/plan: compile (rewrite, shapes, views, schedule, memory
 * plan) and run. */
#include "cpu_fallback/plan.h"

#include "ir/bags.h"
#include "cpu_fallback/kernels.h"
#include "cpu_fallback/nn.h"
#include "cpu_fallback/pool.h"
#include "cpu_fallback/plan_observe.h"
#include "cpu_fallback/plan_profile.h"
#include "cpu_fallback/prepack.h"
#include "cpu_fallback/tile.h"
#include "cpu_fallback/vmath.h"
#include "cpu_fallback/wino.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/alloc.h"
#include "ir/dump.h"
#include "ir/graph_edit.h"
#include "ir/hazard.h"
#include "ir/memplan.h"
#include "ir/rewrite.h"
#include "ir/schedule.h"
#include "ir/shape.h"
#include "ir/views.h"
#include "fuse/group.h"
#include "fuse/kinds.h"
#include "reference/exec.h"
#include "reference/ops.h"

#define KILN_CPU_VARIANTS 8   /* specialised plans kept per graph */
#define KILN_CPU_SPEC_MAX 64  /* elements of one specialising input */

/* How a node runs. V_FUSED: a view of a value its fused group computes,
 * stored by the group's tile program (no alias, no kernel of its own). */
enum { V_KERNEL, V_RESHAPE, V_TRANSPOSE, V_SLICE, V_EXPAND, V_GATHER, V_SPLIT, V_CONCAT, V_FUSED };

/* A node run as a plain view alias (no memory written). */
static bool is_alias_view(int how) { return how != V_KERNEL && how != V_CONCAT && how != V_FUSED; }

/* A pooled argument of at most this many bytes stays in a core's L2 (2 MiB here) for the pool node's pass: bands
   measured 2-9 % slower on small_cnn's conv steps (64 KB - 512 KB arguments, 1 and 2 threads). */
#define KILN_POOL_BANDS_MIN_BYTES ((double)(2 << 20))

struct kiln_cpu_plan {
  kiln_graph *g; /* the rewritten graph */
  kiln_cpu_conv_packs *conv_packs; /* prepack.h: constant Conv weights in SGEMM A-panel layout (registered under g's nodes) */
  kiln_cpu_gemm_packs *gemm_packs; /* prepack.h: constant MatMul / Gemm B in SGEMM B-panel layout (registered by B's data) */
  kiln_shapes *sh;
  kiln_schedule *sched; /* one step per node or fused group, then one reading the outputs */
  /* fusion (fuse/): the groups, their kernel specs, and per step the tile
     program that runs it (NULL: the step's nodes run one by one) */
  kiln_fuse_ctx *fctx, *fctx1;
  kiln_fuse_plan *fplan, *fplan1; /* fplan1: one group per node, for the nodes of groups the tile executor declines */
  kiln_tile_prog **tile; /* per step of sched */
  int *step_of;          /* per node: its step */
  bool *pre;             /* per node: a view of memory its tile step makes before the tile pass */
  int64_t *spec_vals;    /* the symbol values the tile steps' specs are bound at */
  /* this run: the caller's memory for graph outputs (kiln_cpu_run's outs
     given as reservations), per value; NULL when none */
  void **direct;
  size_t *direct_cap;
  float *scratch;        /* the pooled argument of a tile step with a pooling (heap, grown on demand) */
  size_t scratch_cap;    /* its floats */
  bool specs_bound;
  const kiln_op_def **def;
  const kiln_cpu_kernel_def **own; /* per node: kiln's own kernel (cpu_fallback/kernels), or NULL */
  unsigned char *how;   /* per node: V_* */
  int *alias_of;        /* per value: the value whose storage a view reads, or -1 */
  int *concat_into;     /* per value: the in-place Concat node whose output it is a slice of, or -1 */
  int64_t *concat_pitch; /* per value: 0, or (a column of an interleaved in-place Concat) the elements between its elements there */
  int *last_use;        /* per value: last node reading it, -1 if none */
  int *free_after;      /* per value: last node reading it or a view of it */
  int nsym;
  int64_t *bound;       /* per symbol: the bound planned for, KILN_DIM_UNSET if none */
  int64_t *vals;        /* per symbol: this run's values */
  /* the memory plan at the current bounds */
  kiln_memplan *mp;
  kiln_hazards *hz;     /* ordering edges of the plan (what a reordering must keep) */
  uint64_t *size;       /* per value: bytes at the bounds (0 when dynamic) */
  bool *dynamic;        /* per value: size unbounded (data-dependent): heap */
  bool *external;
  bool *inplace;        /* per node: output 0 written over input 0 */
  int *out_over;        /* per value: for a graph output whose kernel may run in place over its input 0,
                           that input's arena storage (which then lives in the caller's output memory), else -1 */
  unsigned char **redir; /* per storage (this run): the caller's output memory it lives in, or NULL: the arena */
  unsigned char *arena;
  int *in_map;          /* per graph input: the caller's value of that name */
  /* a run's working memory, made at the first run and kept: the runs of
     one plan never overlap (plugin/graph.c: one worker per graph runs its
     jobs in order; the per-run fields above rely on that too) */
  const kiln_tensor **run_in; /* per graph input: the caller's tensor */
  kiln_tensor *run_slot;      /* per value: its tensor this run (all zero between runs) */
  kiln_views **run_stacks;    /* per value: the view stack its slot reads through (reused run to run) */
  bool *run_early;            /* per output: a constant copied before the steps */
  int run_nv;                 /* the values run_slot and run_stacks hold */
  /* run_kernel's arguments, for the node with the most inputs / outputs */
  const kiln_tensor **k_ins;
  kiln_tensor *k_tmp, *k_res;
  bool *k_used;
  /* specialisation on shape-setting inputs: when some shapes depend on the
     values of small integer graph inputs (a Reshape's shape fed at run
     time), each set of values gets its own plan, compiled with those inputs
     as constants and cached (KILN_CPU_VARIANTS, least recently used out) */
  kiln_graph *orig;     /* the graph as given, kept to specialise */
  /* shapes the symbols cannot settle (KILN_E_SYMBOLIC_SHAPE: a symbolic dim
     broadcast or matched against a constant it need not equal): a plan made
     with by_shape_ok (the graph's own, an observing one) compiles a variant
     for a run's concrete input dims when the symbolic plan cannot take them
     — always when its inference failed so (by_shape: nothing else is
     planned), else when a run's dims contradict a value the inference
     recorded (N broadcast against 6 recorded N = 6; a run with N = 1) */
  bool by_shape_ok, by_shape;
  bool fit_check; /* an input dim the inference fixed or made an expression: inputs_fit per run */
  int n_spec;
  int *spec;            /* indices into orig->inputs */
  struct variant {
    int64_t *key;
    int nkey;
    kiln_cpu_plan *plan;
    unsigned long used;
  } var[KILN_CPU_VARIANTS];
  unsigned long clock;
  kiln_cpu_stats st;
  /* KILN_DUMP: file-name stem ("" when not dumping), the rewrite counts */
  char dump_stem[KILN_DUMP_STEM_MAX + 1];
  kiln_rewrite_stats rst;
  bool pool_held; /* a reference on the cpu pool (cpu_fallback/pool.h), dropped at release */
  double pool_bands_min; /* pooled arguments over this many bytes are pooled by bands (pool_bands) */
  /* observers (plan_observe.c): the plans observed runs use (per
     KILN_CPU_OBS_* mode - 1, compiled at the first such run), this plan's
     mode, its observer map, and the observer of the run in progress */
  struct kiln_cpu_plan *obs_plan[3];
  int obs_mode;
  kiln_cpu_obs *ostate;
  kiln_obs *run_obs;
  /* KILN_PROFILE (plan_profile.h): per-step times, made at the first run */
  kiln_cpu_prof *prof;
  bool prof_checked;
};

/* ---- compile ---- */

kiln_status kiln_cpu_check(const kiln_graph *g) {
  kiln_status s = kiln_ref_check_graph(g);
  if (s) return s;
  kiln_shapes *sh;
  if ((s = kiln_shapes_infer(g, &sh))) {
    if (s != KILN_E_SYMBOLIC_SHAPE) return s;
    kiln_error_clear(); /* a run's concrete dims decide (prepare) */
    return KILN_OK;
  }
  kiln_shapes_free(sh);
  return KILN_OK;
}

static int how_to_run(const kiln_shapes *sh, const kiln_node *n) {
  const char *op = n->op_type;
  if (*n->domain && strcmp(n->domain, "ai.onnx")) return V_KERNEL;
  if (!strcmp(op, "Reshape") || !strcmp(op, "Flatten") || !strcmp(op, "Squeeze") || !strcmp(op, "Unsqueeze") ||
      !strcmp(op, "Identity"))
    return V_RESHAPE;
  if (!strcmp(op, "Transpose")) return V_TRANSPOSE;
  if (!strcmp(op, "Slice")) return V_SLICE;
  if (!strcmp(op, "Expand")) return V_EXPAND;
  if (!strcmp(op, "Split")) return V_SPLIT;
  if (!strcmp(op, "Gather") && n->n_in == 2 && n->in[1] >= 0) {
    const kiln_tensor *k = sh->v[n->in[1]].konst;
    if (k && k->rank == 0 && kiln_dtype_is_int(k->dtype)) return V_GATHER;
  }
  return V_KERNEL;
}

/* Whether value u is a float32 store of an elementwise tile step (no
 * anchor, no pooling), which can write it with an element stride. */
static bool tile_column(const kiln_cpu_plan *p, int u) {
  int prod = p->g->values[u].producer;
  if (prod < 0 || p->sh->v[u].dtype != KILN_F32 || p->obs_mode) return false;
  int k = p->step_of[prod];
  const kiln_fuse_spec *sp = p->tile[k] ? p->sched->steps[k].user : NULL;
  if (!sp || sp->kind != KILN_FUSE_G_ELEMWISE || sp->anchor >= 0) return false;
  for (int j = 0; j < sp->n_store; j++)
    if (sp->store[j].value == u && !sp->store[j].pool) return true;
  return false;
}

/* Concat in place: when every input of Concat node i is made by a kernel
 * for this Concat alone and the inputs' slices of the output are contiguous
 * (the output's dims before the axis are all 1), each producer writes
 * straight into its slice and the Concat runs nothing. Likewise when every
 * input is one element per outer index (the [n, 1] columns of an [n, k]
 * output) stored by an elementwise tile step: each store writes its column
 * with a stride of k elements (concat_pitch). The inputs become views of
 * the output's storage for the memory planner. */
static void plan_concat(kiln_cpu_plan *p, int i) {
  const kiln_graph *g = p->g;
  const kiln_node *n = &g->nodes[i];
  if (p->how[i] != V_KERNEL || strcmp(n->op_type, "Concat") || (*n->domain && strcmp(n->domain, "ai.onnx"))) return;
  int w = n->out[0];
  if (w < 0 || g->values[w].is_output || p->sh->v[w].data_dependent || n->n_in < 1) return;
  const kiln_vshape *y = &p->sh->v[w];
  int axis;
  if (kiln_norm_axis(kiln_attr_int(n, "axis", 0), y->rank, &axis)) {
    kiln_error_clear();
    return;
  }
  bool contiguous = true, columns = n->n_in > 1;
  for (int d = 0; d < axis; d++) {
    int64_t one;
    if (!kiln_dimx_is_const(p->sh->tab, y->dims[d], &one) || one != 1) contiguous = false;
  }
  for (int k = 0; k < n->n_in && columns; k++) { /* each input: one element per outer index */
    const kiln_vshape *x = n->in[k] >= 0 ? &p->sh->v[n->in[k]] : NULL;
    for (int d = axis; x && d < x->rank && columns; d++) {
      int64_t one;
      columns = kiln_dimx_is_const(p->sh->tab, x->dims[d], &one) && one == 1;
    }
    columns = columns && x && x->rank == y->rank && tile_column(p, n->in[k]);
  }
  if (!contiguous && !columns) return;
  for (int k = 0; k < n->n_in; k++) {
    int u = n->in[k];
    if (u < 0 || g->values[u].init || g->values[u].is_input || g->values[u].is_output || p->sh->v[u].data_dependent ||
        p->sh->v[u].dtype != y->dtype || p->concat_into[u] >= 0)
      return;
    int prod = g->values[u].producer;
    if (prod < 0 || (p->how[prod] != V_KERNEL && !(columns && p->how[prod] == V_FUSED)) || p->last_use[u] != i) return;
    for (int j = 0; j < g->n_nodes; j++) /* read by this Concat alone, once */
      for (int q = 0; q < g->nodes[j].n_in; q++)
        if (g->nodes[j].in[q] == u && (j != i || q != k)) return;
  }
  p->how[i] = V_CONCAT;
  p->st.kernels--;
  p->st.views++;
  p->st.concats_in_place++;
  for (int k = 0; k < n->n_in; k++) {
    p->concat_into[n->in[k]] = i;
    p->concat_pitch[n->in[k]] = contiguous ? 0 : n->n_in;
    p->alias_of[n->in[k]] = w;
  }
}

/* What each step is, for the KILN_PROFILE table. */
static void print_profile(kiln_cpu_plan *p) {
  if (!p->prof) return;
  const char **how = kiln_calloc((size_t)p->sched->n_steps + 1, sizeof *how);
  for (int k = 0; how && k < p->sched->n_steps; k++) {
    const kiln_step *st = &p->sched->steps[k];
    int i = st->n_nodes ? st->nodes[0] : -1;
    how[k] = p->tile[k]                                 ? "tile"
             : i < 0                                    ? ""
             : st->n_nodes > 1                          ? "nodes"
             : p->how[i] == V_CONCAT                    ? "concat"
             : p->how[i] != V_KERNEL                    ? "view"
             : p->own[i]                                ? "kernel"
                                                        : "ref";
  }
  kiln_cpu_prof_print_free(p->prof, p->g, p->sched, how); /* how NULL (out of memory): no column */
  kiln_free(how);
  p->prof = NULL;
}

/* Frees a run's working memory (run_memory), the kept view stacks too. */
static void free_run_memory(kiln_cpu_plan *p) {
  for (int v = 0; p->run_stacks && v < p->run_nv; v++) kiln_free(p->run_stacks[v]);
  kiln_free(p->run_in);
  kiln_free(p->run_slot);
  kiln_free(p->run_stacks);
  kiln_free(p->run_early);
  kiln_free(p->k_ins);
  kiln_free(p->k_tmp);
  kiln_free(p->k_res);
  kiln_free(p->k_used);
  p->run_in = NULL, p->run_slot = NULL, p->run_stacks = NULL, p->run_early = NULL;
  p->k_ins = NULL, p->k_tmp = NULL, p->k_res = NULL, p->k_used = NULL;
  p->run_nv = 0;
}

void kiln_cpu_release(kiln_cpu_plan *p) {
  if (!p) return;
  print_profile(p);
  if (p->pool_held) kiln_pool_release();
  if (p->conv_packs) kiln_wino_scratch_trim(); /* the Winograd tiles' scratch kept between runs (wino.h) */
  kiln_cpu_conv_packs_free(p->conv_packs); /* before g: registered under its nodes */
  kiln_cpu_gemm_packs_free(p->gemm_packs); /* before g: registered by its weights' data */
  kiln_graph_free(p->g);
  kiln_shapes_free(p->sh);
  for (int k = 0; p->tile && p->sched && k < p->sched->n_steps; k++) kiln_tile_free(p->tile[k]);
  kiln_free(p->tile);
  kiln_free(p->step_of);
  kiln_free(p->pre);
  kiln_free(p->spec_vals);
  kiln_free(p->direct);
  kiln_free(p->direct_cap);
  kiln_free(p->scratch);
  kiln_schedule_free(p->sched);
  kiln_fuse_plan_free(p->fplan);
  kiln_fuse_ctx_free(p->fctx);
  kiln_fuse_plan_free(p->fplan1);
  kiln_fuse_ctx_free(p->fctx1);
  kiln_memplan_free(p->mp);
  kiln_hazards_free(p->hz);
  kiln_free(p->def);
  kiln_free(p->own);
  kiln_free(p->how);
  kiln_free(p->alias_of);
  kiln_free(p->concat_into);
  kiln_free(p->concat_pitch);
  kiln_free(p->last_use);
  kiln_free(p->free_after);
  kiln_free(p->bound);
  kiln_free(p->vals);
  kiln_free(p->size);
  kiln_free(p->dynamic);
  kiln_free(p->external);
  kiln_free(p->inplace);
  kiln_free(p->out_over);
  kiln_free(p->redir);
  kiln_free(p->arena);
  kiln_free(p->in_map);
  free_run_memory(p);
  kiln_graph_free(p->orig);
  kiln_free(p->spec);
  for (int k = 0; k < KILN_CPU_VARIANTS; k++) {
    kiln_free(p->var[k].key);
    kiln_cpu_release(p->var[k].plan);
  }
  for (int k = 0; k < 3; k++) kiln_cpu_release(p->obs_plan[k]);
  kiln_cpu_obs_free(p->ostate);
  kiln_free(p);
}

/* ---- KILN_DUMP=dir (ir/dump): debug files, never fatal ---- */

/* <stem>.0-imported.dot: the graph as given, with its declared shapes. */
static void dump_imported(kiln_cpu_plan *p, const kiln_graph *g0) {
  if (!kiln_dump_enabled()) return;
  kiln_dump_stem(g0->name, p->dump_stem, sizeof p->dump_stem);
  char title[320];
  snprintf(title, sizeof title, "%.200s: as imported, %d nodes, declared shapes", g0->name ? g0->name : "",
           g0->n_nodes);
  kiln_dump_graph(p->dump_stem, "0-imported", g0, NULL, NULL, title);
}

/* <stem>.1-rewritten.dot: after the rewrites, with inferred shapes and the
 * views (dashed, "alias of" their input's storage). Keeps the rewrite
 * counts for the plan files. */
static void dump_rewritten(kiln_cpu_plan *p, const kiln_rewrite_stats *rst) {
  p->rst = *rst;
  if (!p->dump_stem[0]) return;
  char title[640], b[256];
  snprintf(title, sizeof title, "%.200s: rewritten, %d -> %d nodes (%s), %d views, %d kernels, inferred shapes",
           p->g->name ? p->g->name : "", p->st.nodes_in, p->st.nodes_out, kiln_rewrite_stats_str(rst, b, sizeof b),
           p->st.views, p->st.kernels);
  kiln_dump_graph(p->dump_stem, "1-rewritten", p->g, p->sh, p->alias_of, title);
}

/* Value v's dtype and (symbolic) shape, as "float32 [N,3,32,32]". */
static const char *dump_type(const kiln_cpu_plan *p, int v, char *buf, size_t size) {
  const kiln_vshape *x = &p->sh->v[v];
  int len = snprintf(buf, size, "%s [", kiln_dtype_name(x->dtype));
  for (int d = 0; d < x->rank && len >= 0 && (size_t)len < size; d++) {
    char b[96];
    len += snprintf(buf + len, size - (size_t)len, "%s%s", d ? "," : "",
                    kiln_dimx_str(p->sh->tab, x->dims[d], b, sizeof b));
  }
  if (len >= 0 && (size_t)len < size) snprintf(buf + len, size - (size_t)len, "%s", x->rank < 0 ? "?]" : "]");
  return buf;
}

/* <stem>.plan-<k>.txt: the k-th memory plan of this graph: one line per
 * node (view or kernel, in place, each output's shape and where it lives),
 * the rewrite counts, the memory summary and the memory planner's table. */
static void dump_plan(const kiln_cpu_plan *p) {
  if (!p->dump_stem[0]) return;
  char ext[32], saved[1024], b[320], lbl[256];
  snprintf(saved, sizeof saved, "%s", kiln_last_error());
  snprintf(ext, sizeof ext, "plan-%d.txt", p->st.plans);
  FILE *f = NULL;
  kiln_dump_open(p->dump_stem, ext, &f);
  if (!f) return;
  const kiln_graph *g = p->g;
  fprintf(f, "kiln cpu plan %d of graph '%s': %d nodes (%d imported), %d views, %d kernels\n", p->st.plans,
          g->name ? g->name : "", g->n_nodes, p->st.nodes_in, p->st.views, p->st.kernels);
  for (int k = 0; k < p->nsym; k++) {
    if (p->bound[k] == KILN_DIM_UNSET) fprintf(f, "symbol %s: no bound\n", kiln_sym_name(p->sh->tab, k));
    else fprintf(f, "symbol %s: planned for <= %lld\n", kiln_sym_name(p->sh->tab, k), (long long)p->bound[k]);
  }
  kiln_rewrite_stats_str(&p->rst, b, sizeof b);
  fprintf(f, "rewrite: %s\n", *b ? b : "nothing changed");
  fprintf(f, "memory: arena %llu bytes, lower bound %llu, no reuse %llu, %d in place\n",
          (unsigned long long)p->mp->arena_size, (unsigned long long)p->mp->lower_bound,
          (unsigned long long)p->mp->no_reuse, p->mp->n_inplace);
  fprintf(f, "nodes:\n");
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    fprintf(f, "node %3d %-18s %-24s ", i, n->op_type, kiln_node_label(g, n, lbl, sizeof lbl));
    if (p->how[i] == V_CONCAT) {
      fputs("view (in-place Concat: the producers write their slices)", f);
    } else if (p->how[i] == V_FUSED) {
      fprintf(f, "fused (a view computed by step %d's tile program)", p->step_of[i]);
    } else if (p->how[i] != V_KERNEL) {
      int a = n->n_out > 0 && n->out[0] >= 0 ? p->alias_of[n->out[0]] : -1;
      fprintf(f, "view (alias of %s)", a >= 0 ? g->values[a].name : "?");
    } else {
      fputs("kernel", f);
    }
    if (p->tile[p->step_of[i]])
      fprintf(f, p->sched->steps[p->step_of[i]].n_nodes > 1 ? ", fused in step %d (tile program)" : ", tile program",
              p->step_of[i]);
    if (p->inplace[i]) fprintf(f, ", in place over %s", g->values[n->in[0]].name);
    if (n->n_out > 0 && n->out[0] >= 0 && p->out_over[n->out[0]] >= 0)
      fprintf(f, ", in place over %s in the caller's output memory (when given: storage %s moves there)",
              g->values[n->in[0]].name, g->values[p->out_over[n->out[0]]].name);
    for (int k = 0; p->tile[p->step_of[i]] && k < p->mp->n_inplace; k++) /* a tile step's store */
      for (int q = 0; q < n->n_out; q++)
        if (p->mp->inplace[k].step == p->step_of[i] && n->out[q] >= 0 && p->mp->inplace[k].out == n->out[q])
          fprintf(f, ", in place over %s", g->values[p->mp->inplace[k].in].name);
    for (int k = 0, first = 1; k < n->n_out; k++) {
      int w = n->out[k];
      if (w < 0) continue;
      fprintf(f, "%s %s %s ", first ? " ->" : ";", g->values[w].name, dump_type(p, w, b, sizeof b));
      first = 0;
      int own = p->mp->storage[w], root = w;
      for (int hops = 0; p->alias_of[root] >= 0 && hops < g->n_values; hops++) root = p->alias_of[root];
      if (p->dynamic[w]) fputs("heap", f);
      else if (p->mp->offset[w] != KILN_MEMPLAN_NONE)
        fprintf(f, "arena @%lld size %llu", (long long)p->mp->offset[w], (unsigned long long)p->size[w]);
      else if (p->external[w] || p->external[root]) fputs("host", f);
      else fputs("not stored", f);
      if (own < 0 && root != w) own = root;
      if (own >= 0 && own != w) fprintf(f, " (storage of %s)", g->values[own].name);
    }
    fputc('\n', f);
  }
  kiln_memplan_request req = {p->sched, p->size, p->external, p->alias_of, NULL, 0};
  kiln_memplan_dump(p->mp, &req, g, f);
  if (p->hz) {
    fprintf(f, "ordering edges (read/write hazards over storages):\n");
    kiln_hazard_dump(p->hz, p->sched, g, f);
  }
  kiln_dump_close(f, p->dump_stem, ext);
  kiln_error_set_message(saved);
}

/* ---- end of KILN_DUMP ---- */

/* ---- fusion ---- */

/* One step per node, then the step reading the graph outputs. */
static kiln_status schedule_of(const kiln_graph *g, kiln_schedule **out) {
  kiln_status s = kiln_schedule_from_graph(g, out);
  if (!s && g->n_outputs) s = kiln_schedule_add_step(*out, g->outputs, g->n_outputs, NULL, 0, -1);
  if (s) {
    kiln_schedule_free(*out);
    *out = NULL;
  }
  return s;
}

/* KILN_FUSION=0 turns fusion off: one group per node (each elementwise node
 * still runs through the tile executor). */
static bool fusion_enabled(void) {
  const char *e = getenv("KILN_FUSION");
  return !(e && !strcmp(e, "0"));
}

static bool is_view_op(const kiln_node *n) {
  const kiln_fuse_kind_def *d = kiln_fuse_kind_find(n->domain, n->op_type);
  return d && (d->roles & KILN_FUSE_VIEW);
}

/* Whether step st (group spec sp, tile program tp) can run through the
 * tile executor in this plan; why says why not. Marks nothing. */
static bool tile_fits(const kiln_cpu_plan *p, const kiln_step *st, const kiln_fuse_spec *sp, kiln_tile_prog *tp,
                      char *why, size_t size) {
  const kiln_graph *g = p->g;
  for (int j = 0; j < sp->n_nodes; j++) {
    const kiln_node *n = &g->nodes[sp->nodes[j]];
    if (j > 0 && sp->nodes[j] != sp->nodes[0] + j) return snprintf(why, size, "nodes not consecutive"), false;
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k] >= 0 && p->sh->v[n->out[k]].data_dependent)
        return snprintf(why, size, "a data-dependent shape"), false;
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0 && p->sh->v[n->in[k]].data_dependent)
        return snprintf(why, size, "a data-dependent shape"), false;
  }
  if (sp->n_store > 64) return snprintf(why, size, "more than 64 stores"), false;
  /* every size must follow from the graph inputs' dims: the spec is bound
     at each run's values of those symbols */
  int64_t *tv = kiln_calloc((size_t)p->nsym + 1, sizeof *tv);
  if (!tv) return snprintf(why, size, "out of memory"), false;
  for (int k = 0; k < p->nsym; k++) tv[k] = KILN_DIM_UNSET;
  for (int i = 0; i < g->n_inputs; i++) {
    const kiln_vshape *x = &p->sh->v[g->inputs[i]];
    for (int d = 0; d < x->rank; d++) {
      int sym = kiln_dimx_as_sym(p->sh->tab, x->dims[d]);
      if (sym >= 0) tv[sym] = 1;
    }
  }
  bool known = true;
  for (int j = 0; j < sp->n_nodes && known; j++) {
    const kiln_node *n = &g->nodes[sp->nodes[j]];
    for (int k = 0; k < n->n_in + n->n_out && known; k++) {
      int v = k < n->n_in ? n->in[k] : n->out[k - n->n_in];
      if (v < 0) continue;
      const kiln_vshape *x = &p->sh->v[v];
      int64_t val;
      known = x->rank >= 0;
      for (int d = 0; d < x->rank && known; d++) known = !kiln_dimx_eval(p->sh->tab, x->dims[d], tv, p->nsym, &val);
    }
  }
  kiln_free(tv);
  if (!known) {
    kiln_error_clear();
    return snprintf(why, size, "a size that the inputs' dims do not give"), false;
  }
  for (int w = 0; w < st->n_writes; w++) { /* every value written is a store or a view of memory */
    int v = st->writes[w];
    bool ok = false;
    for (int k = 0; k < sp->n_store && !ok; k++) ok = sp->store[k].value == v;
    for (int k = 0; k < sp->n_alias && !ok; k++) ok = sp->alias[k].value == v;
    if (!ok) return snprintf(why, size, "writes '%s', neither stored nor an alias", g->values[v].name), false;
  }
  if (sp->anchor >= 0) { /* an epilogue that only copies (a view of the anchor's output) gains nothing */
    bool work = false;
    for (int e = 0; e < sp->n_expr && !work; e++)
      work = sp->expr[e].op != KILN_FUSE_ANCHOR && sp->expr[e].op != KILN_FUSE_COPY && sp->expr[e].op != KILN_FUSE_LOAD &&
             sp->expr[e].op != KILN_FUSE_CONST;
    if (!work) return snprintf(why, size, "an anchor without an epilogue"), false;
  }
  if (sp->anchor >= 0) {
    const kiln_node *a = &g->nodes[sp->anchor];
    if (!p->def[sp->anchor] || a->n_out != 1 || a->out[0] < 0 || p->sh->v[a->out[0]].dtype != KILN_F32)
      return snprintf(why, size, "an anchor without a float32 kernel"), false;
    if (kiln_tile_anchor_target(tp) < 0) return snprintf(why, size, "no float32 store for the anchor"), false;
  }
  return true;
}

/* Groups the plan's schedule (fuse/): each group the tile executor can run
 * becomes one step (its intermediates are never stored, so the memory
 * planner gives them nothing); other groups stay one step per node and
 * run node by node. A view of a value computed in its group becomes
 * V_FUSED (stored by the group, not an alias); views of memory that the
 * group's outputs need are made before its tile pass (pre). Fusion
 * failing is not fatal: the plan runs unfused. */
static kiln_status plan_fusion(kiln_cpu_plan *p) {
  kiln_graph *g = p->g;
  int nn = g->n_nodes;
  kiln_status s = KILN_OK;
  kiln_schedule *tmp = NULL;
  kiln_tile_prog **progs = NULL;
  kiln_tile_prog **single = kiln_calloc((size_t)nn + 1, sizeof *single); /* per node, from fplan1 */
  if (!single) return kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
  p->step_of = kiln_calloc((size_t)nn + 1, sizeof *p->step_of);
  p->pre = kiln_calloc((size_t)nn + 1, sizeof *p->pre);
  p->spec_vals = kiln_calloc((size_t)p->nsym + 1, sizeof *p->spec_vals);
  if (!p->step_of || !p->pre || !p->spec_vals) {
    kiln_free(single);
    return kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
  }
  /* twice the OpenCL engine's cap: a tile program's cost per element does
     not grow with the group, and the view nodes of a constant output kept
     unfolded (kiln_rewrite_opts.keep_output_views: detection_post's Reshape
     and four step-4 Slices of its anchors) count as nodes */
  kiln_fuse_opts o = {.max_nodes = 2 * KILN_FUSE_DEFAULT_MAX_NODES};
  if (!fusion_enabled() || (p->obs_mode & KILN_CPU_OBS_UNFUSED)) o.max_nodes = 1;
  s = kiln_fuse_ctx_new(g, p->sh, &o, &p->fctx);
  if (!s) s = kiln_fuse_ctx_bind(p->fctx, p->bound, p->nsym);
  if (!s) s = schedule_of(g, &tmp);
  if (!s) s = kiln_fuse_schedule(p->fctx, tmp, &p->fplan);
  if (!s && !(progs = kiln_calloc((size_t)tmp->n_steps + 1, sizeof *progs)))
    s = kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
  if (s == KILN_E_NOMEM) goto done;
  if (s) { /* run unfused */
    kiln_log(KILN_LOG_INFO, "cpu plan: fusion skipped: %s", kiln_last_error());
    kiln_error_clear();
    kiln_fuse_plan_free(p->fplan);
    p->fplan = NULL;
    s = KILN_OK;
  }
  FILE *df = NULL;
  if (p->dump_stem[0]) kiln_dump_open(p->dump_stem, "fusion.txt", &df);
  for (int i = 0; p->fplan && i < tmp->n_steps && !s; i++) {
    kiln_fuse_spec *sp = p->fplan->spec[i];
    if (!sp || sp->n_nodes < 1) continue;
    char why[256] = "";
    kiln_status c = kiln_tile_compile(sp, &progs[i], why, sizeof why);
    if (c == KILN_E_NOMEM) {
      s = c;
      break;
    }
    if (!c && !tile_fits(p, &tmp->steps[i], sp, progs[i], why, sizeof why)) {
      kiln_tile_free(progs[i]);
      progs[i] = NULL;
    }
    if (df) {
      char *txt = NULL, lbl[256];
      fprintf(df, "group %d: %d node%s from %s, %s: %s%s%s\n", i, sp->n_nodes, sp->n_nodes == 1 ? "" : "s",
              kiln_node_label(g, &g->nodes[sp->nodes[0]], lbl, sizeof lbl), kiln_fuse_group_kind_name(sp->kind),
              progs[i] ? "tile program" : "node by node", why[0] ? " -- " : "", why);
      if (progs[i] && !kiln_fuse_spec_print(sp, &txt)) fputs(txt, df);
      kiln_free(txt);
    }
  }
  /* the nodes of declined groups of several nodes: each elementwise one
     still runs as a tile program of its own (a spec from a second pass
     with one group per node) */
  bool declined = false;
  for (int i = 0; p->fplan && i < tmp->n_steps; i++)
    declined = declined || (!progs[i] && p->fplan->spec[i] && p->fplan->spec[i]->n_nodes > 1);
  if (declined && !s) {
    kiln_schedule *t1 = NULL;
    kiln_fuse_opts o1 = {0};
    o1.max_nodes = 1;
    kiln_status s1 = kiln_fuse_ctx_new(g, p->sh, &o1, &p->fctx1);
    if (!s1) s1 = kiln_fuse_ctx_bind(p->fctx1, p->bound, p->nsym);
    if (!s1) s1 = schedule_of(g, &t1);
    if (!s1) s1 = kiln_fuse_schedule(p->fctx1, t1, &p->fplan1);
    for (int i = 0; !s1 && i < tmp->n_steps; i++) {
      kiln_fuse_spec *sp = p->fplan->spec[i];
      if (progs[i] || !sp || sp->n_nodes < 2) continue;
      for (int j = 0; j < sp->n_nodes; j++) {
        int node = sp->nodes[j]; /* t1 has one step per node: step = node */
        kiln_fuse_spec *one = node < t1->n_steps ? p->fplan1->spec[node] : NULL;
        kiln_tile_prog *tp1 = NULL;
        char why[256] = "";
        if (!one || one->n_nodes != 1 || one->nodes[0] != node || kiln_tile_compile(one, &tp1, why, sizeof why))
          continue;
        if (!tile_fits(p, &t1->steps[node], one, tp1, why, sizeof why)) {
          kiln_tile_free(tp1);
          continue;
        }
        single[node] = tp1;
        if (df) {
          char lbl[256];
          fprintf(df, "  node %s alone: tile program\n", kiln_node_label(g, &g->nodes[node], lbl, sizeof lbl));
        }
      }
    }
    kiln_schedule_free(t1);
    if (s1 == KILN_E_NOMEM) s = s1;
    else if (s1) kiln_error_clear();
  }
  if (df) kiln_dump_close(df, p->dump_stem, "fusion.txt");
  /* merge the steps of each tile group, from the last (earlier indices stay) */
  for (int i = p->fplan ? tmp->n_steps - 1 : -1; i >= 0 && !s; i--)
    if (progs[i] && p->fplan->spec[i]->n_nodes > 1)
      s = kiln_schedule_merge(p->sched, p->fplan->spec[i]->nodes[0], p->fplan->spec[i]->n_nodes);
  if (s) goto done;
  if (!(p->tile = kiln_calloc((size_t)p->sched->n_steps + 1, sizeof *p->tile))) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
    goto done;
  }
  for (int k = 0; k < p->sched->n_steps; k++)
    for (int j = 0; j < p->sched->steps[k].n_nodes; j++) p->step_of[p->sched->steps[k].nodes[j]] = k;
  for (int i = 0; i < nn; i++) { /* nodes of declined groups, alone */
    if (!single[i]) continue;
    int k = p->step_of[i];
    kiln_fuse_spec *one = p->fplan1->spec[i];
    p->tile[k] = single[i];
    single[i] = NULL;
    p->sched->steps[k].user = one;
    p->sched->steps[k].tag = (int)one->kind;
    p->st.tile_steps++;
  }
  for (int i = 0; p->fplan && i < tmp->n_steps; i++) {
    if (!progs[i]) continue;
    kiln_fuse_spec *sp = p->fplan->spec[i];
    int k = p->step_of[sp->nodes[0]];
    kiln_step *st = &p->sched->steps[k];
    p->tile[k] = progs[i];
    progs[i] = NULL;
    st->user = sp;
    st->tag = (int)sp->kind;
    if (sp->n_nodes > 1) {
      p->st.fused_groups++;
      p->st.fused_nodes += sp->n_nodes;
    }
    p->st.tile_steps++;
    /* views: of computed values (stored by the group) or of memory */
    bool *computed = kiln_calloc((size_t)g->n_values + 1, sizeof *computed);
    if (!computed) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
      goto done;
    }
    for (int j = 0; j < sp->n_nodes; j++) {
      int node = sp->nodes[j];
      const kiln_node *n = &g->nodes[node];
      bool view = is_view_op(n);
      if (view && n->n_in > 0 && n->in[0] >= 0 && !computed[n->in[0]]) continue; /* a view of memory */
      for (int q = 0; q < n->n_out; q++)
        if (n->out[q] >= 0) {
          computed[n->out[q]] = true;
          if (view) p->alias_of[n->out[q]] = -1;
        }
      if (view && p->how[node] != V_KERNEL) {
        p->st.views--;
        p->st.kernels++;
      }
      if (view) p->how[node] = V_FUSED;
    }
    for (int j = sp->n_nodes - 1; j >= 0; j--) { /* the views of memory something needs */
      int node = sp->nodes[j];
      const kiln_node *n = &g->nodes[node];
      if (p->how[node] == V_FUSED || !is_view_op(n)) continue;
      bool need = false;
      for (int q = 0; q < n->n_out && !need; q++) {
        int w = n->out[q];
        if (w < 0) continue;
        need = kiln_step_writes(st, w);
        for (int j2 = j + 1; j2 < sp->n_nodes && !need; j2++) {
          const kiln_node *m = &g->nodes[sp->nodes[j2]];
          for (int r = 0; r < m->n_in && !need; r++) need = m->in[r] == w && p->pre[sp->nodes[j2]];
        }
      }
      p->pre[node] = need;
    }
    kiln_free(computed);
  }
done:
  for (int i = 0; progs && i < tmp->n_steps; i++) kiln_tile_free(progs[i]);
  kiln_free(progs);
  for (int i = 0; i < nn; i++) kiln_tile_free(single[i]);
  kiln_free(single);
  kiln_schedule_free(tmp);
  return s;
}

static kiln_status prepare(const kiln_graph *g0, bool may_specialise, bool by_shape_ok, int obs_mode, bool borrow,
                           kiln_cpu_plan **out);

kiln_status kiln_cpu_prepare(const kiln_graph *g0, kiln_cpu_plan **out) {
  return prepare(g0, true, true, 0, true, out);
}

/* The graph inputs worth specialising on: integer tensors of rank <= 1
 * (shapes, axes, pads, repeats, sizes) — only when some shape of the plan
 * depends on run-time data. */
static kiln_status find_spec_inputs(kiln_cpu_plan *p, const kiln_graph *g0, bool borrow) {
  bool dyn = false;
  for (int v = 0; v < p->g->n_values && !dyn; v++) dyn = p->sh->v[v].data_dependent;
  if (!dyn) return KILN_OK;
  for (int i = 0; i < g0->n_inputs; i++) {
    const kiln_value *val = &g0->values[g0->inputs[i]];
    if (val->init || (val->type.dtype != KILN_I64 && val->type.dtype != KILN_I32) || val->type.rank > 1) continue;
    if (!p->spec && !(p->spec = kiln_calloc((size_t)g0->n_inputs, sizeof *p->spec)))
      return kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
    p->spec[p->n_spec++] = i;
  }
  if (p->n_spec) {
    kiln_status s = borrow ? kiln_edit_clone_shared(g0, &p->orig) : kiln_edit_clone(g0, &p->orig);
    if (s) return s;
  }
  return KILN_OK;
}

/* Per node i, the output pixels per image of each Conv (the product of its
 * output's spatial dims) at [i] and its output row width (its last dim) at
 * [n_nodes + 1 + i], where the shapes give them as constants, else -1;
 * NULL when out of memory (prepack then takes both as unknown). */
static int64_t *conv_planes(const kiln_graph *g, const kiln_shapes *sh) {
  int64_t *pl = kiln_malloc((2 * (size_t)g->n_nodes + 2) * sizeof *pl), *ow = pl ? pl + g->n_nodes + 1 : NULL;
  for (int i = 0; pl && i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    pl[i] = ow[i] = -1;
    if (strcmp(n->op_type, "Conv") || n->n_out < 1 || n->out[0] < 0) continue;
    const kiln_vshape *y = &sh->v[n->out[0]];
    int64_t P = y->rank >= 3 ? 1 : -1, d;
    for (int k = 2; k < y->rank && P > 0; k++)
      P = kiln_dimx_is_const(sh->tab, y->dims[k], &d) && d >= 0 && d <= INT32_MAX && P <= INT32_MAX ? P * d : -1;
    pl[i] = P > INT32_MAX ? -1 : P;
    if (y->rank >= 3 && kiln_dimx_is_const(sh->tab, y->dims[y->rank - 1], &d) && d >= 0) ow[i] = d;
  }
  return pl;
}

/* borrow: the plan's graphs borrow g0's constant tensors (g0 outlives the
   plan: kiln_cpu_prepare's contract); a plan compiled from a graph of its
   own that is freed after (a variant's) copies them */
static kiln_status prepare(const kiln_graph *g0, bool may_specialise, bool by_shape_ok, int obs_mode, bool borrow,
                           kiln_cpu_plan **out) {
  *out = NULL;
  kiln_status s = kiln_ref_check_graph(g0);
  if (s) return s;
  kiln_cpu_plan *p = kiln_calloc(1, sizeof *p);
  if (!p) return kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
  p->obs_mode = obs_mode;
  dump_imported(p, g0); /* KILN_DUMP */
  kiln_rewrite_opts ro = {0};
  ro.eval = kiln_ref_eval_node;
  ro.keep_outputs = (obs_mode & KILN_CPU_OBS_KEEP) != 0;
  ro.keep_output_views = true; /* a strided Slice of a constant output: read in place, not a second copy */
  ro.share_constants = borrow;
  ro.dump_stem = p->dump_stem[0] ? p->dump_stem : NULL; /* KILN_DUMP: after each pass */
  kiln_rewrite_stats rst;
  if ((s = kiln_rewrite_run(g0, &ro, &p->g, &rst))) goto fail;
  kiln_graph *g = p->g;
  if ((s = kiln_cpu_pretranspose(g, NULL))) goto fail; /* prepack.h: constant Gemm B stored [K, N] once */
  if (!obs_mode && (s = kiln_embedding_bags(g, &p->st.bags))) goto fail; /* bags.h: Gather-Mul-ReduceSum as one */
  if ((s = kiln_ref_check_graph(g))) goto fail;
  if ((s = kiln_shapes_infer(g, &p->sh))) {
    if (s != KILN_E_SYMBOLIC_SHAPE || !by_shape_ok) goto fail;
    /* only a run's concrete dims settle the shapes: a plan per input-shape
       set (shape_variant), this one keeps nothing else */
    kiln_log(KILN_LOG_INFO, "cpu plan: %s; planned per input-shape set at each run", kiln_last_error());
    kiln_error_clear();
    kiln_cpu_release(p);
    if (!(p = kiln_calloc(1, sizeof *p))) return kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
    p->obs_mode = obs_mode;
    p->by_shape_ok = p->by_shape = true;
    p->st.nodes_in = g0->n_nodes;
    *out = p;
    return KILN_OK;
  }
  p->by_shape_ok = by_shape_ok;
  /* declared constant dims (the plugin checks them) and free symbols fit
     any run; a symbolic dim the inference fixed (substituted by its value)
     or made an expression may not */
  for (int i = 0; i < g->n_inputs && by_shape_ok; i++) {
    const kiln_value *val = &g->values[g->inputs[i]];
    const kiln_vshape *x = &p->sh->v[g->inputs[i]];
    for (int d = 0; d < x->rank && !val->init; d++) {
      int sym = kiln_dimx_as_sym(p->sh->tab, x->dims[d]);
      bool declared = d < val->type.rank && val->type.dims[d].value >= 0 && !val->type.dims[d].param;
      p->fit_check |= !declared && (sym < 0 || kiln_sym_value(p->sh->tab, sym, NULL));
    }
  }
  if ((s = kiln_ref_check_types(g, p->sh))) goto fail; /* the fused tiles call no kernel's type check */
  {
    size_t pb = 0; /* prepack.h: constant Conv weights packed once for the wide SGEMM */
    /* which 1x1 Convs the lanes-over-channels tiles will take, which big W the channel tiles can read */
    int64_t *planes = conv_planes(g, p->sh);
    s = kiln_cpu_conv_prepack(g, planes, planes ? planes + g->n_nodes + 1 : NULL, &p->conv_packs, &pb);
    kiln_free(planes);
    if (s) goto fail;
    p->st.conv_pack_bytes = pb;
    if ((s = kiln_cpu_gemm_prepack(g, &p->gemm_packs, &pb))) goto fail; /* constant MatMul / Gemm B, likewise */
    p->st.gemm_pack_bytes = pb;
  }
  int nv = g->n_values, nn = g->n_nodes;
  p->def = kiln_calloc((size_t)nn + 1, sizeof *p->def);
  p->own = kiln_calloc((size_t)nn + 1, sizeof *p->own);
  p->how = kiln_calloc((size_t)nn + 1, 1);
  p->inplace = kiln_calloc((size_t)nn + 1, sizeof *p->inplace);
  p->out_over = kiln_calloc((size_t)nv + 1, sizeof *p->out_over);
  p->redir = kiln_calloc((size_t)nv + 1, sizeof *p->redir);
  p->alias_of = kiln_calloc((size_t)nv + 1, sizeof *p->alias_of);
  p->concat_into = kiln_calloc((size_t)nv + 1, sizeof *p->concat_into);
  p->concat_pitch = kiln_calloc((size_t)nv + 1, sizeof *p->concat_pitch);
  p->last_use = kiln_calloc((size_t)nv + 1, sizeof *p->last_use);
  p->free_after = kiln_calloc((size_t)nv + 1, sizeof *p->free_after);
  p->size = kiln_calloc((size_t)nv + 1, sizeof *p->size);
  p->dynamic = kiln_calloc((size_t)nv + 1, sizeof *p->dynamic);
  p->external = kiln_calloc((size_t)nv + 1, sizeof *p->external);
  p->nsym = kiln_symtab_nsyms(p->sh->tab);
  p->bound = kiln_calloc((size_t)p->nsym + 1, sizeof *p->bound);
  p->vals = kiln_calloc((size_t)p->nsym + 1, sizeof *p->vals);
  if (!p->def || !p->own || !p->how || !p->inplace || !p->out_over || !p->redir || !p->alias_of || !p->concat_into || !p->concat_pitch || !p->free_after || !p->last_use || !p->size || !p->dynamic || !p->external ||
      !p->bound || !p->vals) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory compiling a plan");
    goto fail;
  }
  for (int v = 0; v < nv; v++) p->alias_of[v] = p->last_use[v] = p->concat_into[v] = -1;
  for (int i = 0; i < nn; i++) {
    const kiln_node *n = &g->nodes[i];
    p->def[i] = kiln_ref_find_op(n->domain, n->op_type);
    p->own[i] = kiln_cpu_kernel_find(n->domain, n->op_type);
    p->how[i] = (unsigned char)how_to_run(p->sh, n);
    for (int k = 0; k < n->n_out; k++) /* graph outputs get their own storage */
      if (n->out[k] >= 0 && g->values[n->out[k]].is_output) p->how[i] = V_KERNEL;
    if (p->how[i] != V_KERNEL) {
      p->st.views++;
      for (int k = 0; k < n->n_out; k++)
        if (n->out[k] >= 0) p->alias_of[n->out[k]] = n->in[0];
    } else {
      p->st.kernels++;
    }
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k] >= 0) p->last_use[n->in[k]] = i;
  }
  for (int k = 0; k < p->nsym; k++) {
    int64_t m;
    p->bound[k] = kiln_sym_max(p->sh->tab, k, &m) ? m : KILN_DIM_UNSET;
  }
  /* the schedule: one step per node, and a last step that reads the graph
     outputs so that the memory they (or their views) use stays theirs;
     then fusion merges the steps of each group the tile executor runs */
  if ((s = schedule_of(g, &p->sched))) goto fail;
  if ((s = plan_fusion(p))) goto fail;
  for (int i = 0; i < nn; i++) plan_concat(p, i);
  for (int v = 0; v < nv; v++) p->free_after[v] = p->last_use[v];
  for (int v = 0; v < nv; v++) { /* a view keeps the storage it reads alive */
    int r = v, hops = 0;
    while (p->alias_of[r] >= 0 && hops++ < nv) r = p->alias_of[r];
    if (p->last_use[v] > p->free_after[r]) p->free_after[r] = p->last_use[v];
  }
  p->st.nodes_in = g0->n_nodes;
  p->st.nodes_out = nn;
  p->st.folded = rst.folded;
  p->st.bn_folded = rst.bn_conv + rst.bn_gemm;
  p->st.cse = rst.cse_nodes + rst.cse_consts;
  p->st.noops = rst.identities + rst.dropouts;
  p->st.transposes = rst.transposes_merged + rst.transposes_removed;
  p->st.dead = rst.dead_nodes;
  for (int v = 0; v < g->n_values; v++) {
    const kiln_tensor *t = g->values[v].init;
    if (t && !t->owns && !t->strided && t->data) p->st.weights_borrowed += kiln_tensor_bytes(t);
  }
  if (may_specialise && (s = find_spec_inputs(p, g0, borrow))) goto fail;
  dump_rewritten(p, &rst); /* KILN_DUMP */
  char buf[256];
  kiln_log(KILN_LOG_INFO, "cpu plan: %d -> %d nodes (%s), %d views, %d kernels", g0->n_nodes, nn,
           kiln_rewrite_stats_str(&rst, buf, sizeof buf), p->st.views, p->st.kernels);
  p->pool_held = kiln_pool_acquire() == 0; /* cpu_fallback/pool: the threads live while a plan does */
  const char *pb = getenv("KILN_POOL_BANDS_MIN"); /* bytes (tests: 0, every pooling it can) */
  p->pool_bands_min = pb && *pb ? strtod(pb, NULL) : KILN_POOL_BANDS_MIN_BYTES;
  *out = p;
  return KILN_OK;
fail:
  kiln_cpu_release(p);
  return s;
}

/* Whether value u reads its storage in storage order: not a view, or a
 * view through Reshape-like hops alone (a kernel written over it in place
 * then meets each element as it would in u; through a Transpose, a reversed
 * Slice or a Concat's slice it would write over elements not read yet). */
static bool storage_order(const kiln_cpu_plan *p, int u) {
  for (int hops = 0; u >= 0 && p->alias_of[u] >= 0; hops++) {
    int prod = p->g->values[u].producer;
    if (hops > p->g->n_values || prod < 0 || p->how[prod] != V_RESHAPE) return false;
    u = p->alias_of[u];
  }
  return true;
}

/* In place over a graph output: when the kernel node making graph output w
 * may write over its input 0 (kiln_ref_op_inplace), and that input's arena
 * storage S has the output's size and nothing in S is read after that node
 * or is a graph output, then a run whose caller gave memory for w keeps S
 * there instead of in the arena (redir): the producers of S write into the
 * caller's memory and the node runs in place, saving the copy of S into
 * the output. out_over[w] = S, else -1. */
static void plan_out_over(kiln_cpu_plan *p) {
  const kiln_graph *g = p->g;
  for (int v = 0; v < g->n_values; v++) p->out_over[v] = -1;
  for (int o = 0; o < g->n_outputs; o++) {
    int w = g->outputs[o], i = w >= 0 ? g->values[w].producer : -1;
    if (i < 0) continue;
    const kiln_node *n = &g->nodes[i];
    int k = p->step_of[i];
    if (p->tile[k] || p->sched->steps[k].n_nodes != 1 || p->how[i] != V_KERNEL || !p->def[i] ||
        !kiln_ref_op_inplace(p->def[i]) || n->n_in < 1 || n->n_out < 1 || n->out[0] != w || n->in[0] < 0 ||
        !storage_order(p, n->in[0]))
      continue;
    int u = n->in[0], S = p->mp->storage[u];
    if (p->dynamic[w] || p->dynamic[u] || S < 0 || p->mp->offset[u] == KILN_MEMPLAN_NONE || p->size[u] != p->size[w] ||
        p->size[S] != p->size[w] || g->values[u].init || g->values[u].is_input)
      continue;
    bool ok = true;
    for (int q = 1; q < n->n_in && ok; q++) /* the node reads S through input 0 only */
      ok = n->in[q] < 0 || p->mp->storage[n->in[q]] != S;
    for (int v = 0; v < g->n_values && ok; v++) {
      if (p->mp->storage[v] != S) continue;
      int last = p->free_after[v];
      ok = !g->values[v].is_output && !p->external[v] && (last < 0 || p->step_of[last] <= k);
    }
    for (int o2 = 0; o2 < g->n_outputs && ok; o2++) ok = o2 == o || g->outputs[o2] != w; /* one output slot */
    if (ok) p->out_over[w] = S;
  }
}

/* Plans the arena at the current bounds. */
static kiln_status specialize(kiln_cpu_plan *p) {
  kiln_graph *g = p->g;
  kiln_symtab *tab = p->sh->tab;
  kiln_status s;
  for (int k = 0; k < p->nsym; k++)
    if (p->bound[k] != KILN_DIM_UNSET && (s = kiln_sym_set_max(tab, k, p->bound[k]))) return s;
  kiln_memplan_mark_external(g, p->external);
  for (int v = 0; v < g->n_values; v++) {
    const kiln_vshape *x = &p->sh->v[v];
    uint64_t n = 1;
    bool dyn = x->rank < 0;
    for (int d = 0; d < x->rank && !dyn; d++) {
      int64_t m;
      if (kiln_dimx_bound(tab, x->dims[d], &m) || m < 0) dyn = true;
      else if (m && n > KILN_MEMPLAN_MAX_BYTES / (uint64_t)m) dyn = true;
      else n *= (uint64_t)m;
    }
    kiln_error_clear();
    p->dynamic[v] = dyn;
    p->size[v] = dyn ? 0 : n * kiln_dtype_size(x->dtype);
    if (dyn) p->external[v] = true;
  }
  /* in-place candidates: a node run alone whose reference kernel writes
     output 0 over input 0; a tile step's store over a value it reads only
     at the element it writes (each tile is read before it is written) */
  size_t ncap = (size_t)g->n_nodes + 1;
  for (int k = 0; k < p->sched->n_steps; k++)
    if (p->tile[k]) ncap += (size_t)p->sched->steps[k].n_reads * (size_t)((kiln_fuse_spec *)p->sched->steps[k].user)->n_store;
  kiln_memplan_inplace *cand = kiln_calloc(ncap, sizeof *cand);
  if (!cand) return kiln_fail(KILN_E_NOMEM, "out of memory planning memory");
  int nc = 0;
  for (int i = 0; i < g->n_nodes; i++) p->inplace[i] = false;
  for (int k = 0; k < p->sched->n_steps; k++) {
    const kiln_step *st = &p->sched->steps[k];
    if (p->tile[k]) {
      const kiln_fuse_spec *sp = st->user;
      for (int j = 0; j < sp->n_store; j++)
        for (int r = 0; r < st->n_reads; r++) {
          int w = sp->store[j].value, u = st->reads[r];
          if (p->alias_of[u] < 0 && p->alias_of[w] < 0 && p->concat_into[w] < 0 && kiln_tile_inplace_ok(p->tile[k], j, u))
            cand[nc++] = (kiln_memplan_inplace){k, w, u};
        }
      continue;
    }
    if (st->n_nodes != 1) continue;
    int i = st->nodes[0];
    const kiln_node *n = &g->nodes[i];
    if (p->how[i] == V_KERNEL && p->def[i] && kiln_ref_op_inplace(p->def[i]) && n->n_in > 0 && n->n_out > 0 &&
        n->in[0] >= 0 && n->out[0] >= 0 && storage_order(p, n->in[0]) && p->alias_of[n->out[0]] < 0 &&
        p->concat_into[n->out[0]] < 0)
      cand[nc++] = (kiln_memplan_inplace){k, n->out[0], n->in[0]};
  }
  kiln_memplan_request req = {p->sched, p->size, p->external, p->alias_of, cand, nc};
  kiln_memplan_free(p->mp);
  p->mp = NULL;
  s = kiln_memplan_build(&req, &p->mp);
  if (!s) s = kiln_memplan_verify(p->mp, &req);
  kiln_free(cand);
  if (s) return s;
  /* the ordering edges over storages, with the arena reuse checked once
     more, independently: two storages sharing arena bytes while both live
     would fail here */
  /* A view step makes an alias and writes no memory: in the hazard
     schedule it only reads its input. */
  kiln_schedule *hs = NULL;
  if ((s = kiln_schedule_new(g->n_values, &hs))) return s;
  int *wr = kiln_calloc((size_t)g->n_values + 1, sizeof *wr);
  if (!wr) s = kiln_fail(KILN_E_NOMEM, "out of memory planning memory");
  for (int k = 0; k < p->sched->n_steps && !s; k++) {
    const kiln_step *st = &p->sched->steps[k];
    int nw = 0;
    for (int j = 0; j < st->n_writes; j++) {
      int w = st->writes[j], prod = g->values[w].producer;
      if (prod < 0 || !is_alias_view(p->how[prod])) wr[nw++] = w;
    }
    s = kiln_schedule_add_step(hs, st->reads, st->n_reads, wr, nw, st->n_nodes ? st->nodes[0] : -1);
  }
  kiln_free(wr);
  kiln_hazard_request hr = {0};
  hr.sched = hs;
  hr.storage = p->mp->storage;
  hr.arena_offset = p->mp->offset;
  hr.arena_bytes = p->size;
  hr.arena_assert = true;
  kiln_hazards_free(p->hz);
  p->hz = NULL;
  if (!s) s = kiln_hazard_build(&hr, &p->hz);
  kiln_schedule_free(hs);
  if (s) return s;
  p->st.hazard_edges = p->hz->n_edges;
  for (int k = 0; k < p->mp->n_inplace; k++) { /* nodes run alone read the flag; tile steps need none */
    const kiln_step *st = &p->sched->steps[p->mp->inplace[k].step];
    if (!p->tile[p->mp->inplace[k].step] && st->n_nodes == 1) p->inplace[st->nodes[0]] = true;
  }
  plan_out_over(p);
  if (p->mp->arena_size > KILN_MAX_ALLOC) /* limit (README "Limits"): never ask malloc for it */
    return kiln_fail(KILN_E_NOMEM, "the memory plan needs a %llu-byte arena, more than kiln's limit of %llu bytes",
                     (unsigned long long)p->mp->arena_size, (unsigned long long)KILN_MAX_ALLOC);
  kiln_free(p->arena);
  p->arena = kiln_malloc(p->mp->arena_size ? p->mp->arena_size : 1);
  if (!p->arena)
    return kiln_fail(KILN_E_NOMEM, "cannot allocate the %llu-byte arena", (unsigned long long)p->mp->arena_size);
  p->st.plans++;
  p->st.arena_bytes = p->mp->arena_size;
  p->st.lower_bound = p->mp->lower_bound;
  p->st.no_reuse = p->mp->no_reuse;
  p->st.inplace = p->mp->n_inplace;
  kiln_log(KILN_LOG_INFO, "cpu plan #%d: arena %llu bytes (lower bound %llu, no reuse %llu), %d in place", p->st.plans,
           (unsigned long long)p->mp->arena_size, (unsigned long long)p->mp->lower_bound,
           (unsigned long long)p->mp->no_reuse, p->mp->n_inplace);
  dump_plan(p); /* KILN_DUMP */
  return KILN_OK;
}

/* ---- run ---- */

/* The memory of arena value v this run: its arena slot, or the caller's
 * output memory its storage was moved to (plan_out_over). */
static unsigned char *arena_at(const kiln_cpu_plan *p, int v) {
  int S = p->mp->storage[v];
  return S >= 0 && p->redir[S] ? p->redir[S] : p->arena + p->mp->offset[v];
}

/* Whether ptr lies in this run's caller memory for a graph output. */
static bool in_caller_memory(const kiln_cpu_plan *p, const void *ptr) {
  for (int o = 0; o < p->g->n_outputs; o++) {
    int w = p->g->outputs[o];
    const char *d = p->direct[w];
    if (d && (const char *)ptr >= d && (const char *)ptr < d + p->direct_cap[w]) return true;
  }
  return false;
}

/* kiln_tensor_copy of a graph output into the caller's tensor; a dense
 * float32 one of at least KILN_TILE_STREAM_OUT_BYTES with non-temporal
 * stores under AVX2 (a constant output, say: the run does not read the
 * copy, so it need not pull the destination into the caches). */
static kiln_status copy_out(kiln_tensor *dst, const kiln_tensor *src) {
  if (src->dtype != KILN_F32 || src->strided || kiln_tensor_bytes(src) < KILN_TILE_STREAM_OUT_BYTES)
    return kiln_tensor_copy(dst, src);
  bool keep = dst->keep;
  dst->keep = true; /* a reservation is not zeroed first: the copy writes every element (detection_post: 3.2 MB a run) */
  kiln_status s = kiln_tensor_alloc(dst, src->dtype, src->rank, src->dims);
  dst->keep = keep;
  if (!s && dst->data != src->data) kiln_tile_copy_stream(dst->data, src->data, src->numel, kiln_vm_isa_active());
  return s;
}

/* Binds the symbols of the graph inputs' shapes to this run's dims, and
 * re-plans when a symbol exceeds its bound (or has none yet). */
static kiln_status bind_inputs(kiln_cpu_plan *p, const kiln_tensor *const *in) {
  kiln_graph *g = p->g;
  kiln_symtab *tab = p->sh->tab;
  for (int k = 0; k < p->nsym; k++) p->vals[k] = KILN_DIM_UNSET;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    if (g->values[v].init) continue;
    const kiln_vshape *x = &p->sh->v[v];
    const kiln_tensor *t = in[i];
    const char *nm = g->values[v].name;
    if (t->dtype != x->dtype)
      return kiln_fail(KILN_E_MISMATCH_DTYPE, "input '%s': %s given, the model declares %s", nm,
                       kiln_dtype_name(t->dtype), kiln_dtype_name(x->dtype));
    if (t->rank != x->rank)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "input '%s': rank %d given, the model declares %d", nm, t->rank, x->rank);
    for (int d = 0; d < t->rank; d++) {
      int sym = kiln_dimx_as_sym(tab, x->dims[d]);
      int64_t want;
      if (sym >= 0 && p->vals[sym] == KILN_DIM_UNSET && !kiln_sym_value(tab, sym, &want)) {
        p->vals[sym] = t->dims[d];
        continue;
      }
      kiln_status s = kiln_dimx_eval(tab, x->dims[d], p->vals, p->nsym, &want);
      if (s) return s;
      if (want != t->dims[d]) {
        char b[128];
        return kiln_fail(KILN_E_MISMATCH_SHAPE, "input '%s', dim %d: %lld given, expected %s = %lld", nm, d,
                         (long long)t->dims[d], kiln_dimx_str(tab, x->dims[d], b, sizeof b), (long long)want);
      }
    }
  }
  bool replan = !p->mp;
  for (int k = 0; k < p->nsym; k++) {
    if (p->vals[k] == KILN_DIM_UNSET) continue;
    if (p->bound[k] == KILN_DIM_UNSET || p->vals[k] > p->bound[k]) {
      if (p->bound[k] != KILN_DIM_UNSET)
        kiln_log(KILN_LOG_INFO, "cpu plan: %s = %lld exceeds its bound %lld: planning again", kiln_sym_name(tab, k),
                 (long long)p->vals[k], (long long)p->bound[k]);
      p->bound[k] = p->vals[k];
      replan = true;
    }
  }
  return replan ? specialize(p) : KILN_OK;
}

/* The concrete dims of value v this run; false when data-dependent. */
static bool dims_now(kiln_cpu_plan *p, int v, int64_t *dims) {
  const kiln_vshape *x = &p->sh->v[v];
  for (int d = 0; d < x->rank; d++)
    if (kiln_dimx_eval(p->sh->tab, x->dims[d], p->vals, p->nsym, &dims[d])) {
      kiln_error_clear();
      return false;
    }
  return true;
}

/* The view stack through which tensor t reads its storage. */
static kiln_status stack_of_tensor(const kiln_tensor *t, kiln_views *st) {
  if (t->stack) {
    *st = *t->stack;
    return KILN_OK;
  }
  kiln_view v;
  kiln_status s = t->strided ? kiln_view_make(t->rank, t->dims, t->strides, t->offset, NULL, NULL, &v)
                             : kiln_view_contiguous(t->rank, t->dims, &v);
  if (!s) kiln_views_init(st, &v);
  return s;
}

/* Makes out read base's storage through st: one strided view, or (when
 * the stack is deeper) through a copy of the stack that the plan keeps
 * (*owned receives it; kept for the next runs, freed with the plan). */
static kiln_status tensor_of_stack(kiln_tensor *out, const kiln_tensor *base, const kiln_views *st,
                                   kiln_views **owned) {
  const kiln_view *top = kiln_views_top(st);
  for (int k = 0; k < st->depth; k++)
    if (st->v[k].has_mask) return KILN_E_UNSUPPORTED_SHAPE; /* masks (Pad) are not used here */
  kiln_tensor_wrap(out, base->dtype, top->rank, top->shape, top->numel, base->data);
  if (kiln_views_single(st)) {
    if (!top->contiguous) {
      out->strided = true;
      out->offset = top->offset;
      for (int d = 0; d < top->rank; d++) out->strides[d] = top->strides[d];
    }
    return KILN_OK;
  }
  kiln_views *h = *owned ? *owned : kiln_malloc(sizeof *h); /* the last run's, reused */
  if (!h) return kiln_fail(KILN_E_NOMEM, "out of memory keeping a view stack");
  *h = *st;
  *owned = h;
  out->strided = true;
  out->stack = h;
  return KILN_OK;
}

/* Reads integer input k of node n (a small tensor in memory); *cnt -1 when
 * the input is omitted. */
static kiln_status node_ints(const kiln_tensor *slot, const kiln_node *n, int k, int64_t *vals, int max, int *cnt) {
  if (k >= n->n_in || n->in[k] < 0) {
    *cnt = -1;
    return KILN_OK;
  }
  return kiln_tensor_ints(&slot[n->in[k]], vals, max, cnt);
}

/* The movement op of view node i, from its attributes, its inputs' values
 * and the inferred shapes of its outputs (output k for Split). */
static kiln_status view_op(kiln_cpu_plan *p, int i, int k, const kiln_tensor *slot, int64_t *split_start,
                           kiln_view_op *op) {
  const kiln_node *n = &p->g->nodes[i];
  int64_t dims[KILN_MAX_RANK];
  kiln_status s;
  memset(op, 0, sizeof *op);
  switch (p->how[i]) {
  case V_RESHAPE:
  case V_EXPAND:
    if (!dims_now(p, n->out[0], dims)) return KILN_E_UNSUPPORTED_SHAPE; /* the kernel will do it */
    op->kind = p->how[i] == V_RESHAPE ? KILN_VOP_RESHAPE : KILN_VOP_EXPAND;
    op->n = p->sh->v[n->out[0]].rank;
    memcpy(op->shape, dims, sizeof(int64_t) * (size_t)op->n);
    return KILN_OK;
  case V_TRANSPOSE: {
    size_t np;
    const int64_t *perm = kiln_attr_ints(n, "perm", &np);
    if (np > KILN_MAX_RANK) return KILN_E_UNSUPPORTED_SHAPE;
    op->kind = KILN_VOP_TRANSPOSE;
    op->n = perm ? (int)np : 0;
    if (perm) memcpy(op->perm, perm, sizeof(int64_t) * np);
    return KILN_OK;
  }
  case V_GATHER:
    op->kind = KILN_VOP_GATHER;
    op->axis = kiln_attr_int(n, "axis", 0);
    op->index = kiln_get_i(p->sh->v[n->in[1]].konst, 0);
    return KILN_OK;
  case V_SLICE: {
    int ns = 0, ne = 0, na = -1, nsp = -1;
    op->kind = KILN_VOP_SLICE;
    if (n->opset < 10) {
      size_t c1, c2, c3;
      const int64_t *a1 = kiln_attr_ints(n, "starts", &c1), *a2 = kiln_attr_ints(n, "ends", &c2),
                    *a3 = kiln_attr_ints(n, "axes", &c3);
      if (!a1 || !a2 || c1 != c2 || c1 > KILN_MAX_RANK || (a3 && c3 != c1)) return KILN_E_UNSUPPORTED_SHAPE;
      ns = ne = (int)c1;
      memcpy(op->starts, a1, c1 * sizeof(int64_t));
      memcpy(op->ends, a2, c2 * sizeof(int64_t));
      if (a3) {
        na = (int)c3;
        memcpy(op->axes, a3, c3 * sizeof(int64_t));
      }
    } else if ((s = node_ints(slot, n, 1, op->starts, KILN_MAX_RANK, &ns)) ||
               (s = node_ints(slot, n, 2, op->ends, KILN_MAX_RANK, &ne)) ||
               (s = node_ints(slot, n, 3, op->axes, KILN_MAX_RANK, &na)) ||
               (s = node_ints(slot, n, 4, op->steps, KILN_MAX_RANK, &nsp))) {
      kiln_error_clear(); /* let the kernel report it */
      return KILN_E_UNSUPPORTED_SHAPE;
    }
    if (ns != ne || (na >= 0 && na != ns) || (nsp >= 0 && nsp != ns)) return KILN_E_UNSUPPORTED_SHAPE;
    op->n = ns;
    op->has_axes = na >= 0;
    op->has_steps = nsp >= 0;
    return KILN_OK;
  }
  case V_SPLIT: {
    int w = n->out[k], axis;
    if (w < 0 || !dims_now(p, w, dims)) return KILN_E_UNSUPPORTED_SHAPE;
    if (kiln_norm_axis(kiln_attr_int(n, "axis", 0), p->sh->v[w].rank, &axis)) {
      kiln_error_clear();
      return KILN_E_UNSUPPORTED_SHAPE;
    }
    op->kind = KILN_VOP_SPLIT;
    op->axis = axis;
    op->start = *split_start;
    op->len = dims[axis];
    *split_start += dims[axis];
    return KILN_OK;
  }
  default: return kiln_fail(KILN_E_INTERNAL, "node %d is not a view", i);
  }
}

/* Runs a view node: each output aliases its input's storage through a
 * strided view or, when one strided map cannot express it, a stack of
 * views. Only a stack deeper than KILN_VIEWS_MAX_DEPTH is materialised
 * (counted). KILN_E_UNSUPPORTED_SHAPE (no message) means "run the kernel". */
static kiln_status run_view(kiln_cpu_plan *p, int i, kiln_tensor *slot, kiln_views **stacks) {
  const kiln_node *n = &p->g->nodes[i];
  const kiln_tensor *x = &slot[n->in[0]];
  kiln_status s;
  if (p->how[i] == V_CONCAT) { /* the producers wrote the slices: the output is there */
    int w = n->out[0];
    int64_t dims[KILN_MAX_RANK];
    if (!dims_now(p, w, dims)) return kiln_fail(KILN_E_INTERNAL, "in-place Concat output has no size");
    int64_t numel = 1;
    for (int d = 0; d < p->sh->v[w].rank; d++) numel *= dims[d];
    kiln_tensor_wrap(&slot[w], p->sh->v[w].dtype, p->sh->v[w].rank, dims, numel, arena_at(p, w));
    return KILN_OK;
  }
  kiln_views base;
  if ((s = stack_of_tensor(x, &base))) return s;
  int64_t split_start = 0;
  for (int k = 0; k < n->n_out; k++) {
    int w = n->out[k];
    if (w < 0) {
      if (p->how[i] == V_SPLIT) return KILN_E_UNSUPPORTED_SHAPE; /* an unnamed part: the kernel */
      continue;
    }
    kiln_view_op op;
    if ((s = view_op(p, i, k, slot, &split_start, &op))) return s;
    kiln_views st = base;
    s = kiln_views_push(&st, &op);
    if (s == KILN_E_UNSUPPORTED_SHAPE && st.depth == KILN_VIEWS_MAX_DEPTH) {
      /* too deep: copy the input densely once and view the copy */
      kiln_error_clear();
      kiln_tensor dense = {0};
      if ((s = kiln_tensor_copy(&dense, x))) return s;
      p->st.materialized++;
      kiln_view v;
      if ((s = kiln_view_contiguous(dense.rank, dense.dims, &v))) {
        kiln_tensor_release(&dense);
        return s;
      }
      kiln_views_init(&st, &v);
      if ((s = kiln_views_push(&st, &op)) || !kiln_views_single(&st)) {
        kiln_tensor_release(&dense);
        return s ? s : kiln_fail(KILN_E_INTERNAL, "a view of a dense copy is not one strided map");
      }
      if ((s = tensor_of_stack(&slot[w], &dense, &st, &stacks[w]))) {
        kiln_tensor_release(&dense);
        return s;
      }
      slot[w].owns = true; /* the copy goes with the view */
      continue;
    }
    if (s) {
      kiln_error_clear(); /* the kernel reports bad parameters with the node's context */
      return KILN_E_UNSUPPORTED_SHAPE;
    }
    if ((s = tensor_of_stack(&slot[w], x, &st, &stacks[w]))) return s;
  }
  return KILN_OK;
}

/* Byte offset of value w inside the output of the in-place Concat it feeds
 * (0 for any other value): the bytes of the Concat's earlier inputs, which
 * their producers have written already, this run. */
static uint64_t concat_offset(kiln_cpu_plan *p, int w, const kiln_tensor *slot) {
  int c = p->concat_into[w];
  if (c < 0) return 0;
  const kiln_node *n = &p->g->nodes[c];
  uint64_t off = 0;
  if (p->concat_pitch[w]) { /* a column of an interleaved Concat: its index among the inputs */
    for (int k = 0; k < n->n_in && n->in[k] != w; k++) off += kiln_dtype_size(p->sh->v[w].dtype);
    return off;
  }
  /* the earlier parts' sizes this run from their shapes: their producers
     may run after w's (b = Neg(x), a = Relu(x), Concat(a, b)), their slots
     still empty */
  for (int k = 0; k < n->n_in && n->in[k] != w; k++) {
    int u = n->in[k];
    int64_t dims[KILN_MAX_RANK];
    if (!dims_now(p, u, dims)) {
      off += kiln_tensor_bytes(&slot[u]);
      continue;
    }
    uint64_t e = kiln_dtype_size(p->sh->v[u].dtype);
    for (int d = 0; d < p->sh->v[u].rank; d++) e *= (uint64_t)dims[d];
    off += e;
  }
  return off;
}

/* An anchor node run for its fused group: output 0 goes to data (bytes
 * reserved there), and an own kernel that takes an epilogue gets ep (then
 * applied is set). */
typedef struct anchor_io {
  void *data;
  size_t bytes;
  const kiln_cpu_epilogue *ep;
  bool applied;
} anchor_io;

/* Where a kernel writes value w before it runs: the caller's memory (a graph output given there) or its arena slot
 * (a Concat's slice); false where the kernel allocates it (a dynamic value, a graph output on the heap). */
static bool out_place(kiln_cpu_plan *p, int w, const kiln_tensor *slot, void **data, size_t *cap) {
  if (p->direct[w] && p->mp->offset[w] == KILN_MEMPLAN_NONE) {
    *data = p->direct[w], *cap = p->direct_cap[w];
    return true;
  }
  if (p->dynamic[w] || p->mp->offset[w] == KILN_MEMPLAN_NONE) return false;
  *data = arena_at(p, w) + concat_offset(p, w, slot), *cap = p->size[w];
  return true;
}

/* Runs a kernel node with its outputs in their arena slots (output 0 at
 * ax->data for an anchor, ax NULL otherwise). */
static kiln_status run_kernel(kiln_cpu_plan *p, int i, kiln_tensor *slot, anchor_io *ax) {
  const kiln_node *n = &p->g->nodes[i];
  const kiln_op_def *d = p->def[i];
  kiln_status s = KILN_OK;
  const kiln_tensor **ins = p->k_ins; /* run_memory: sized for every node, cleared here */
  kiln_tensor *tmp = p->k_tmp, *res = p->k_res;
  bool *used = p->k_used;
  memset(ins, 0, sizeof *ins * (size_t)n->n_in);
  memset(tmp, 0, sizeof *tmp * (size_t)n->n_in);
  memset(res, 0, sizeof *res * (size_t)n->n_out);
  memset(used, 0, sizeof *used * (size_t)n->n_out);
  bool views_ok = d && kiln_ref_op_reads_views(d);
  for (int k = 0; k < n->n_in && !s; k++) {
    int v = n->in[k];
    if (v < 0) continue;
    ins[k] = &slot[v];
    if (slot[v].strided && !views_ok) { /* this kernel needs dense inputs */
      if ((s = kiln_tensor_copy(&tmp[k], &slot[v]))) break;
      p->st.materialized++;
      ins[k] = &tmp[k];
    }
  }
  for (int k = 0; k < n->n_out && !s; k++) {
    int w = n->out[k];
    used[k] = w >= 0;
    if (w < 0 || !out_place(p, w, slot, &res[k].data, &res[k].capacity)) continue; /* else the kernel allocates */
    if (p->mp->offset[w] == KILN_MEMPLAN_NONE) { /* a graph output: the caller's memory */
      res[k].keep = k == 0 && p->out_over[w] >= 0 && p->redir[p->out_over[w]]; /* in place: input 0 is there */
      p->st.outputs_in_place += res[k].keep;
    } else {
      res[k].keep = k == 0 && p->inplace[i];
    }
  }
  if (ax && n->n_out > 0) {
    memset(&res[0], 0, sizeof res[0]);
    res[0].data = ax->data;
    res[0].capacity = ax->bytes;
  }
  if (!s) {
    kiln_op_call call = {p->g, n, n->opset, n->n_in, ins, n->n_out, res, used};
    /* kernels.h: a kernel that declines touches no output. Kernels differ in
       whether they clear *declined when they do the work, so a kernel that
       made an output has done it, whatever the flag says (else the
       reference kernel would overwrite, and leak, its result). */
    bool declined = true;
    const kiln_cpu_epilogue *ep = ax && p->own[i] && p->own[i]->takes_epilogue ? ax->ep : NULL;
    if (p->own[i]) s = p->own[i]->run(&call, ep, &declined);
    for (int k = 0; p->own[i] && !s && declined && k < n->n_out; k++)
      if (used[k] && res[k].dtype != KILN_UNDEFINED) declined = false;
    if (ax) ax->applied = !s && !declined && ep;
    if (!s && declined) {
      s = d->run(&call);
      p->st.ref_calls++;
    } else {
      p->st.own_calls++;
    }
  }
  for (int k = 0; k < n->n_out; k++) {
    int w = n->out[k];
    if (!s && w >= 0) {
      if (res[k].dtype == KILN_UNDEFINED) {
        s = kiln_fail(KILN_E_INTERNAL, "the kernel produced no output %d", k);
      } else {
        int64_t dims[KILN_MAX_RANK];
        const kiln_vshape *x = &p->sh->v[w];
        if (res[k].dtype != x->dtype || res[k].rank != x->rank)
          s = kiln_fail(KILN_E_INTERNAL, "output %d: shape inference said %s rank %d, the kernel made %s rank %d", k,
                        kiln_dtype_name(x->dtype), x->rank, kiln_dtype_name(res[k].dtype), res[k].rank);
        else if (dims_now(p, w, dims))
          for (int e = 0; e < x->rank && !s; e++)
            if (dims[e] != res[k].dims[e])
              s = kiln_fail(KILN_E_INTERNAL, "output %d, dim %d: shape inference said %lld, the kernel made %lld", k, e,
                            (long long)dims[e], (long long)res[k].dims[e]);
      }
      if (!s && k == 0 && ax && res[k].data != ax->data) { /* the kernel did not use the reservation */
        kiln_tensor at = {0};
        at.data = ax->data;
        at.capacity = ax->bytes;
        if (!(s = kiln_tensor_copy(&at, &res[k]))) {
          kiln_tensor_release(&res[k]);
          res[k] = at;
        }
      }
      if (!s && p->concat_into[w] >= 0 && res[k].data != arena_at(p, w) + concat_offset(p, w, slot)) {
        /* the kernel did not write into its slice: move it there */
        kiln_tensor at = {0};
        at.data = arena_at(p, w) + concat_offset(p, w, slot);
        at.capacity = p->size[w];
        if (!(s = kiln_tensor_copy(&at, &res[k]))) {
          kiln_tensor_release(&res[k]);
          res[k] = at;
        }
      }
      if (!s) {
        slot[w] = res[k];
        continue;
      }
    }
    if (!res[k].owns) memset(&res[k], 0, sizeof res[k]);
    kiln_tensor_release(&res[k]);
  }
  for (int k = 0; k < n->n_in; k++) kiln_tensor_release(&tmp[k]);
  return s;
}

/* ---- fused groups: the tile executor ---- */

/* Binds the tile steps' specs at this run's symbol values when they
 * changed since the last run (cheap: the maps are made from the symbolic
 * chains, nothing is recompiled). */
static kiln_status bind_specs(kiln_cpu_plan *p) {
  if (p->specs_bound && !memcmp(p->spec_vals, p->vals, sizeof *p->vals * (size_t)p->nsym)) return KILN_OK;
  for (int k = 0; k < p->sched->n_steps; k++) {
    if (!p->tile[k]) continue;
    kiln_status s = kiln_fuse_spec_bind(p->sched->steps[k].user, p->vals, p->nsym);
    if (s) { /* a view's map out of range (a constant Gather index): name the group, as a run's error does */
      const kiln_step *st = &p->sched->steps[k];
      const kiln_node *n = &p->g->nodes[st->nodes[0]];
      char lbl[256];
      kiln_error_prefix("fused group of %d node%s from %s (%s)", st->n_nodes, st->n_nodes == 1 ? "" : "s",
                        kiln_node_label(p->g, n, lbl, sizeof lbl), n->op_type);
      return s;
    }
  }
  memcpy(p->spec_vals, p->vals, sizeof *p->vals * (size_t)p->nsym);
  p->specs_bound = true;
  return KILN_OK;
}

/* Whether the caller's reservation for output o overlaps an input's data
 * or another output's reservation. */
static bool overlaps(const kiln_graph *g, const kiln_tensor *outs, const kiln_tensor *const *in, int o) {
  const char *lo = outs[o].data, *hi = lo + outs[o].capacity;
  for (int i = 0; i < g->n_inputs; i++) {
    if (!in[i] || !in[i]->data) continue;
    const char *a = in[i]->data, *b = a + kiln_tensor_bytes(in[i]);
    if (a < hi && lo < b) return true;
  }
  for (int o2 = 0; o2 < g->n_outputs; o2++) {
    const char *a = outs[o2].data, *b = a ? a + outs[o2].capacity : NULL;
    if (o2 != o && a && a < hi && lo < b) return true;
  }
  return false;
}

/* Copies the large constant graph outputs (dense float32, at least
 * KILN_TILE_STREAM_OUT_BYTES) into the caller's reservations before the
 * steps run (early[o] set), instead of after: a step reading the constant
 * (detection_post's tile step reads its anchors through strided views)
 * then finds it in the caches the copy just filled. */
static kiln_status copy_constants_early(kiln_cpu_plan *p, kiln_tensor *outs, const kiln_tensor *const *in,
                                        bool *early) {
  const kiln_graph *g = p->g;
  kiln_status s = KILN_OK;
  for (int o = 0; o < g->n_outputs && !s; o++) {
    const kiln_tensor *t = g->values[g->outputs[o]].init;
    early[o] = false;
    if (!t || t->dtype != KILN_F32 || t->strided || kiln_tensor_bytes(t) < KILN_TILE_STREAM_OUT_BYTES ||
        !outs[o].data || outs[o].owns || outs[o].capacity < kiln_tensor_bytes(t) || overlaps(g, outs, in, o))
      continue;
    s = copy_out(&outs[o], t);
    early[o] = !s;
  }
  return s;
}

/* Takes the caller's reservations in outs (data and capacity preset, as
 * the plugin passes its output buffers) as the memory of the graph
 * outputs, unless a buffer overlaps an input's. */
static kiln_status bind_outputs(kiln_cpu_plan *p, const kiln_tensor *outs, const kiln_tensor *const *in) {
  const kiln_graph *g = p->g;
  if (!p->direct) {
    p->direct = kiln_calloc((size_t)g->n_values + 1, sizeof *p->direct);
    p->direct_cap = kiln_calloc((size_t)g->n_values + 1, sizeof *p->direct_cap);
    if (!p->direct || !p->direct_cap) return kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  }
  for (int o = 0; o < g->n_outputs; o++) p->direct[g->outputs[o]] = NULL;
  for (int o = 0; o < g->n_outputs; o++) {
    int w = g->outputs[o];
    const char *lo = outs[o].data;
    if (!lo || outs[o].owns || !outs[o].capacity || p->direct[w] || g->values[w].init || g->values[w].is_input)
      continue;
    if (overlaps(g, outs, in, o)) continue;
    p->direct[w] = outs[o].data;
    p->direct_cap[w] = outs[o].capacity;
  }
  for (int o = 0; o < g->n_outputs; o++) { /* storages moved into the caller's output memory */
    int w = g->outputs[o], S = p->out_over[w];
    if (S >= 0) p->redir[S] = p->direct[w] && p->direct_cap[w] >= p->size[S] ? p->direct[w] : NULL;
  }
  return KILN_OK;
}

/* The epilogue an anchor kernel applies on its output blocks: the tile
 * program over [start, start + n), store `target` written over y. */
typedef struct ep_ctx {
  const kiln_tile_prog *tp;
  void **out; /* per store: its memory (element 0) */
  size_t *esize;
  int n_store, target;
  kiln_vm_isa isa;
  volatile int failed;
  const kiln_tile_obs *ob; /* observers: folded per block, merged under mu */
  pthread_mutex_t *mu;
} ep_ctx;

static void ep_apply(void *ctx, int64_t start, int64_t n, float *y) {
  ep_ctx *c = ctx;
  void *o[64];
  for (int k = 0; k < c->n_store; k++) o[k] = k == c->target ? (void *)y : (char *)c->out[k] + (size_t)start * c->esize[k];
  kiln_tile_obs mine = {0}, *ob = NULL;
  kiln_obs_partial few[16];
  if (c->ob) { /* blocks may come from several threads: fold into our own partials */
    mine = *c->ob;
    if (!(mine.part = mine.n <= 16 ? few : kiln_malloc(sizeof *mine.part * (size_t)(mine.n + 1)))) {
      c->failed = (int)KILN_E_NOMEM;
      return;
    }
    for (int j = 0; j < mine.n; j++) kiln_obs_partial_init(&mine.part[j]);
    ob = &mine;
  }
  kiln_status s = ob ? kiln_tile_exec_obs(c->tp, start, start + n, o, y, c->isa, ob)
                     : kiln_tile_exec_par(c->tp, start, start + n, o, y, c->isa);
  if (s) {
    kiln_error_clear();
    c->failed = (int)s; /* the status, for the message after the kernel */
  }
  if (ob) {
    pthread_mutex_lock(c->mu);
    for (int j = 0; j < mine.n; j++) kiln_obs_partial_merge(&c->ob->part[j], &mine.part[j]);
    pthread_mutex_unlock(c->mu);
    if (mine.part != few) kiln_free(mine.part);
  }
}

/* The epilogue clip(y + r, lo, hi) (kiln_tile_residual): per block, the
 * tile executor's values without its work per call (the convolutions call
 * the epilogue per output channel of a task's rows: ResNet-18's l2.1.conv2
 * and l2.0.down 0.87-0.89 of their time at 1 thread, GEMM_CONV.md "Residual
 * epilogue"). */
typedef struct res_ctx {
  const float *r;
  float lo, hi;
} res_ctx;

static void ep_residual(void *ctx, int64_t start, int64_t n, float *y) {
  const res_ctx *c = ctx;
  kiln_cpu_residual(y, c->r + start, n, c->lo, c->hi);
}

/* The pooling of tile step sp (its pooled argument in p->scratch) run by bands while the anchor makes the argument
 * (nn.h kiln_nn_pool_bands, told of the finished blocks by kiln_cpu_epilogue.done), or NULL (the pool node then runs
 * after the anchor, over the whole argument): a 2-D MaxPool whose Indices are unused and whose output has its
 * place before the run (the arena, the caller's memory, or the heap as run_kernel gives a value no slot: *y, *cap,
 * *owned, its dims in ydims). Only for arguments over p->pool_bands_min bytes (KILN_POOL_BANDS_MIN, default 2 MiB:
 * ResNet-18's 3.2 MB stem, pooled by bands while its rows are in L2; smaller ones measured faster in one pass). */
static kiln_nn_pool_bands *pool_bands(kiln_cpu_plan *p, const kiln_fuse_spec *sp, const kiln_fuse_store *ps,
                                      const kiln_tensor *slot, void **y, size_t *cap, bool *owned, int64_t *ydims) {
  const kiln_node *n = &p->g->nodes[sp->pool];
  if ((double)sp->numel * sizeof(float) <= p->pool_bands_min) return NULL;
  if (ps->rank != 4 || n->n_out < 1 || (n->n_out > 1 && n->out[1] >= 0) || !p->own[sp->pool]) return NULL;
  int w = n->out[0];
  if (w < 0 || p->concat_into[w] >= 0 || p->sh->v[w].dtype != KILN_F32 || p->sh->v[w].rank != 4 ||
      !dims_now(p, w, ydims))
    return NULL;
  double bytes = (double)ydims[0] * (double)ydims[1] * (double)ydims[2] * (double)ydims[3] * sizeof(float);
  *owned = false;
  if (!out_place(p, w, slot, y, cap)) {
    if (p->mp->offset[w] != KILN_MEMPLAN_NONE || bytes >= (double)SIZE_MAX) return NULL;
    *y = kiln_malloc((size_t)bytes + 1), *cap = (size_t)bytes, *owned = true; /* heap: as run_kernel's kernels do */
  }
  kiln_nn_pool_bands *b = *y && bytes <= (double)*cap ? kiln_nn_pool_bands_new(n, ps->shape, p->scratch, *y, ydims)
                                                      : NULL;
  if (!b && *owned) kiln_free(*y);
  if (!b) *y = NULL, *owned = false;
  return b;
}

/* Runs tile step k: the views of memory it must make, its stores' memory
 * (arena slots, a Concat's slice, or heap for graph outputs), then the
 * anchor (with the epilogue when its kernel takes one) and the tile pass. */
static kiln_status run_tile_step(kiln_cpu_plan *p, int k, kiln_tensor *slot, kiln_views **stacks) {
  const kiln_step *st = &p->sched->steps[k];
  const kiln_fuse_spec *sp = st->user;
  kiln_tile_prog *tp = p->tile[k];
  kiln_status s = KILN_OK;
  for (int j = 0; j < st->n_nodes && !s; j++) {
    int i = st->nodes[j];
    const kiln_node *ni = &p->g->nodes[i];
    if (!p->pre[i] && p->run_obs && p->how[i] != V_KERNEL && p->how[i] != V_FUSED && ni->n_out > 0 &&
        kiln_cpu_obs_wants(p->ostate, ni->out[0])) { /* observed: make the view of memory (an alias) to report it */
      if (run_view(p, i, slot, stacks)) kiln_error_clear(); /* not expressible as a view: not reported */
      continue;
    }
    if (!p->pre[i]) continue;
    s = p->how[i] != V_KERNEL ? run_view(p, i, slot, stacks) : KILN_E_UNSUPPORTED_SHAPE;
    if (s == KILN_E_UNSUPPORTED_SHAPE) {
      kiln_error_clear();
      s = run_kernel(p, i, slot, NULL);
    }
  }
  void *out[64];
  size_t esize[64];
  size_t to_caller = 0; /* bytes stored into the caller's output memory */
  for (int j = 0; j < sp->n_store && !s; j++) {
    int w = sp->store[j].value;
    const kiln_vshape *x = &p->sh->v[w];
    if (sp->store[j].pool) { /* the pooled argument: scratch, then the pool node */
      if (p->scratch_cap < (size_t)sp->numel) {
        kiln_free(p->scratch);
        p->scratch_cap = 0;
        if (!(p->scratch = kiln_malloc(sizeof *p->scratch * ((size_t)sp->numel + 1))))
          return kiln_fail(KILN_E_NOMEM, "out of memory for a pooling's argument");
        p->scratch_cap = (size_t)sp->numel;
      }
      out[j] = p->scratch;
      esize[j] = sizeof(float);
      continue;
    }
    int64_t dims[KILN_MAX_RANK], numel = 1;
    if (!dims_now(p, w, dims)) return kiln_fail(KILN_E_INTERNAL, "a fused store has no size");
    for (int d = 0; d < x->rank; d++) numel *= dims[d];
    esize[j] = kiln_dtype_size(x->dtype);
    if (numel != sp->numel) return kiln_fail(KILN_E_INTERNAL, "a fused store does not cover the domain");
    kiln_tile_set_store_stride(tp, j, p->concat_pitch[w] ? p->concat_pitch[w] : 1);
    if (!p->dynamic[w] && p->mp->offset[w] != KILN_MEMPLAN_NONE && p->concat_pitch[w]) { /* a column */
      kiln_tensor base = {0}, *b = &base;
      int64_t st[KILN_MAX_RANK];
      kiln_tensor_wrap(b, x->dtype, x->rank, dims, numel, arena_at(p, w));
      kiln_strides(x->rank, dims, st);
      for (int d = 0; d < x->rank; d++) st[d] *= p->concat_pitch[w];
      kiln_tensor_view(&slot[w], b, x->rank, dims, st, (int64_t)(concat_offset(p, w, slot) / esize[j]));
    } else if (!p->dynamic[w] && p->mp->offset[w] != KILN_MEMPLAN_NONE) {
      kiln_tensor_wrap(&slot[w], x->dtype, x->rank, dims, numel, arena_at(p, w) + concat_offset(p, w, slot));
    } else if (p->direct[w] && p->direct_cap[w] >= esize[j] * (size_t)numel) { /* a graph output, in place */
      kiln_tensor_wrap(&slot[w], x->dtype, x->rank, dims, numel, p->direct[w]);
    } else { /* heap: a graph output (no zeroing: every element is written) */
      void *data = kiln_malloc(esize[j] * (size_t)numel + 1);
      if (!data) return kiln_fail(KILN_E_NOMEM, "out of memory for '%s'", p->g->values[w].name);
      if (slot[w].owns) kiln_tensor_release(&slot[w]);
      kiln_tensor_wrap(&slot[w], x->dtype, x->rank, dims, numel, data);
      slot[w].owns = true;
    }
    out[j] = (char *)slot[w].data + (slot[w].strided ? slot[w].offset * (int64_t)esize[j] : 0);
    if (x->dtype == KILN_F32 && in_caller_memory(p, out[j])) to_caller += esize[j] * (size_t)numel;
  }
  /* written once, read by the caller after the run: around the caches */
  kiln_tile_set_stream(tp, sp->anchor < 0 && to_caller >= KILN_TILE_STREAM_OUT_BYTES);
  if (!s) s = kiln_tile_bind(tp, slot, &p->st.materialized);
  kiln_vm_isa isa = kiln_vm_isa_active();
  const kiln_tile_obs *ob = p->run_obs ? kiln_cpu_obs_step_begin(p->ostate, k) : NULL;
  pthread_mutex_t ob_mu = PTHREAD_MUTEX_INITIALIZER;
  kiln_nn_pool_bands *bands = NULL; /* the pooling by bands (pool_bands), of store band_store */
  void *band_y = NULL;
  size_t band_cap = 0;
  bool band_owned = false;
  int64_t band_dims[4];
  int band_store = -1;
  if (!s && sp->anchor >= 0) {
    int target = kiln_tile_anchor_target(tp);
    ep_ctx c = {tp, out, esize, sp->n_store, target, isa, 0, ob, &ob_mu};
    kiln_cpu_epilogue ep = {ep_apply, &c, false, 0.0f, 0.0f, NULL, 0, false, 0.0f, NULL, NULL};
    ep.clamp = !ob && kiln_tile_clamp(tp, &ep.lo, &ep.hi); /* observed runs fold tile by tile: apply */
    if (!ob && !kiln_tile_col_bias(tp, &ep.col_bias, &ep.col_bias_n)) ep.col_bias = NULL;
    ep.scaled = !ob && kiln_tile_scale(tp, &ep.scale);
    res_ctx rc; /* a residual Add (+ Relu / Clip): a plain loop per block, not a call of the tile executor */
    bool residual = !ob && kiln_tile_residual(tp, &rc.r, &rc.lo, &rc.hi);
    if (residual) ep.apply = ep_residual, ep.ctx = &rc;
    for (int j = 0; j < sp->n_store && !ob && !bands; j++)
      if (sp->store[j].pool && (bands = pool_bands(p, sp, &sp->store[j], slot, &band_y, &band_cap, &band_owned,
                                                       band_dims)))
        ep.done = kiln_nn_pool_bands_done, ep.done_ctx = bands, band_store = j;
    anchor_io ax = {out[target], esize[target] * (size_t)sp->numel, &ep, false};
    /* the anchor's value may be a store on the heap: run_kernel rebinds its
       slot to the same memory, the slot keeps owning it */
    int wa = p->g->nodes[sp->anchor].out[0];
    bool owned = slot[wa].owns && slot[wa].data == ax.data;
    slot[wa].owns = slot[wa].owns && !owned;
    s = run_kernel(p, sp->anchor, slot, &ax);
    if (owned && slot[wa].data == ax.data) slot[wa].owns = true;
    else if (owned) kiln_free(ax.data);
    if (!s && c.failed)
      s = c.failed == KILN_E_NOMEM ? kiln_fail(KILN_E_NOMEM, "out of memory in the fused epilogue")
                                   : kiln_fail(KILN_E_INTERNAL, "the fused epilogue failed");
    if (!s && ax.applied) p->st.epilogues_fused++, p->st.epilogues_residual += residual;
    else if (!s) {
      p->st.epilogues_separate++;
      s = ob ? kiln_tile_exec_obs(tp, 0, sp->numel, out, out[target], isa, ob)
             : kiln_tile_exec_par(tp, 0, sp->numel, out, out[target], isa);
    }
  } else if (!s) {
    s = ob ? kiln_tile_exec_obs(tp, 0, sp->numel, out, NULL, isa, ob) : kiln_tile_exec_par(tp, 0, sp->numel, out, NULL, isa);
  }
  if (bands) { /* the rows no band made, then the output bound as the pool node's kernel binds it */
    if (!s) {
      int w = p->g->nodes[sp->pool].out[0];
      p->st.pool_band_rows += kiln_nn_pool_bands_finish(bands);
      if (slot[w].owns && slot[w].data != band_y) kiln_tensor_release(&slot[w]);
      memset(&slot[w], 0, sizeof slot[w]);
      kiln_tensor_wrap(&slot[w], KILN_F32, 4, band_dims, band_dims[0] * band_dims[1] * band_dims[2] * band_dims[3],
                       band_y);
      slot[w].capacity = band_cap;
      slot[w].owns = band_owned;
      p->st.own_calls++;
    } else if (band_owned) {
      kiln_free(band_y);
    }
    kiln_nn_pool_bands_free(bands);
  }
  for (int j = 0; j < sp->n_store && !s; j++) { /* the pooling, over the scratch */
    const kiln_fuse_store *ps = &sp->store[j];
    if (!ps->pool || j == band_store) continue;
    int u = p->g->nodes[sp->pool].in[0];
    kiln_tensor keep = slot[u];
    kiln_tensor_wrap(&slot[u], KILN_F32, ps->rank, ps->shape, sp->numel, p->scratch);
    s = run_kernel(p, sp->pool, slot, NULL);
    slot[u] = keep;
  }
  if (!s && p->run_obs) kiln_cpu_obs_step_end(p->ostate, p->run_obs, k, slot);
  p->st.tile_runs++;
  return s;
}

/* The cached variant keyed k (nkey values), marked used now; else NULL and
 * *slot the entry to fill (a free one, or the least recently used). */
static kiln_cpu_plan *variant_find(kiln_cpu_plan *p, const int64_t *k, int nkey, int *slot) {
  p->clock++;
  *slot = 0;
  for (int v = 0; v < KILN_CPU_VARIANTS; v++) {
    struct variant *x = &p->var[v];
    if (x->plan && x->nkey == nkey && !memcmp(x->key, k, sizeof *k * (size_t)nkey)) {
      x->used = p->clock;
      return x->plan;
    }
    if (!p->var[v].plan || p->var[v].used < p->var[*slot].used) *slot = v;
    if (!p->var[*slot].plan) break;
  }
  return NULL;
}

/* Stores variant sub under key k (nkey values; both now owned by p) in slot, releasing what the slot held. */
static void variant_put(kiln_cpu_plan *p, int slot, int64_t *k, int nkey, kiln_cpu_plan *sub) {
  kiln_free(p->var[slot].key);
  kiln_cpu_release(p->var[slot].plan);
  p->var[slot] = (struct variant){k, nkey, sub, p->clock};
}

/* The plan specialised for this run's values of the specialising inputs
 * (compiled on first sight, then cached), or NULL to run p itself. */
static kiln_status variant_for(kiln_cpu_plan *p, const kiln_graph *g0, const kiln_tensor *const *bound,
                               kiln_cpu_plan **out) {
  *out = NULL;
  int64_t key[2 + KILN_CPU_SPEC_MAX];
  int64_t *k = NULL;
  int nkey = 0;
  kiln_status s = KILN_OK;
  for (int j = 0; j < p->n_spec; j++) {
    const kiln_tensor *t = bound ? bound[g0->inputs[p->spec[j]]] : NULL;
    if (!t || t->numel > KILN_CPU_SPEC_MAX) { /* too large to specialise on */
      kiln_free(k);
      return KILN_OK;
    }
    key[0] = t->dtype, key[1] = t->numel;
    for (int64_t e = 0; e < t->numel; e++) key[2 + e] = kiln_get_i(t, e);
    int64_t *grown = kiln_realloc(k, sizeof *k * (size_t)(nkey + 2 + t->numel));
    if (!grown) {
      kiln_free(k);
      return kiln_fail(KILN_E_NOMEM, "out of memory specialising a plan");
    }
    k = grown;
    memcpy(k + nkey, key, sizeof *k * (size_t)(2 + t->numel));
    nkey += 2 + (int)t->numel;
  }
  int slot;
  if ((*out = variant_find(p, k, nkey, &slot))) {
    kiln_free(k);
    return KILN_OK;
  }
  /* compile: the original graph with these inputs as constants */
  kiln_graph *d = NULL;
  kiln_cpu_plan *sub = NULL;
  if ((s = kiln_edit_clone(p->orig, &d))) goto done;
  int kept = 0;
  for (int i = 0; i < d->n_inputs; i++) {
    int v = d->inputs[i];
    bool spec = false;
    for (int j = 0; j < p->n_spec && !spec; j++) spec = p->spec[j] == i;
    if (!spec) {
      d->inputs[kept++] = v;
      continue;
    }
    kiln_tensor *t = kiln_calloc(1, sizeof *t);
    if (!t || (s = kiln_tensor_copy(t, bound[g0->inputs[i]]))) {
      kiln_free(t);
      if (!s) s = kiln_fail(KILN_E_NOMEM, "out of memory specialising a plan");
      goto done;
    }
    d->values[v].init = t;
    d->values[v].is_input = false;
  }
  d->n_inputs = kept;
  if ((s = prepare(d, false, false, p->obs_mode, false, &sub))) goto done;
  kiln_log(KILN_LOG_INFO, "cpu plan: specialised on the values of %d shape-setting input%s", p->n_spec,
           p->n_spec == 1 ? "" : "s");
  variant_put(p, slot, k, nkey, sub);
  k = NULL;
  *out = sub;
  sub = NULL;
done:
  kiln_free(k);
  kiln_graph_free(d);
  kiln_cpu_release(sub);
  return s;
}

/* Whether this run's input dims fit p's symbolic input shapes (each binds
 * a free symbol or equals what the shapes give); a dtype, rank or missing
 * input is left to bind_inputs to report. p->vals is scratch here. */
static bool inputs_fit(kiln_cpu_plan *p, const kiln_graph *g0, const kiln_tensor *const *bound) {
  const kiln_graph *g = p->g;
  kiln_symtab *tab = p->sh->tab;
  if (!p->in_map) { /* graph inputs by name (kiln_cpu_run keeps it) */
    if (!(p->in_map = kiln_calloc((size_t)g->n_inputs + 1, sizeof *p->in_map))) return true; /* the run reports it */
    for (int i = 0; i < g->n_inputs; i++) p->in_map[i] = kiln_graph_find_value(g0, g->values[g->inputs[i]].name);
  }
  for (int k = 0; k < p->nsym; k++) p->vals[k] = KILN_DIM_UNSET;
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i];
    if (g->values[v].init) continue;
    int v0 = p->in_map[i];
    const kiln_tensor *t = bound && v0 >= 0 ? bound[v0] : NULL;
    const kiln_vshape *x = &p->sh->v[v];
    if (!t || t->dtype != x->dtype || t->rank != x->rank) continue;
    for (int d = 0; d < t->rank; d++) {
      int sym = kiln_dimx_as_sym(tab, x->dims[d]);
      int64_t want;
      if (sym >= 0 && p->vals[sym] == KILN_DIM_UNSET && !kiln_sym_value(tab, sym, &want)) {
        p->vals[sym] = t->dims[d];
        continue;
      }
      if (kiln_dimx_eval(tab, x->dims[d], p->vals, p->nsym, &want)) {
        kiln_error_clear();
        continue;
      }
      if (want != t->dims[d]) return false;
    }
  }
  return true;
}

/* The plan for this run's concrete input dims when p cannot take them
 * (p->by_shape, or inputs_fit fails): the graph as given with every runtime
 * input's dims made concrete, compiled on first sight and cached among the
 * variants (its key starts with -1; a specialisation's with a dtype), NULL
 * to run p itself. */
static kiln_status shape_variant(kiln_cpu_plan *p, const kiln_graph *g0, const kiln_tensor *const *bound,
                                 kiln_cpu_plan **out) {
  *out = NULL;
  if (!p->by_shape && (!p->fit_check || inputs_fit(p, g0, bound))) return KILN_OK;
  int nkey = 1;
  for (int i = 0; i < g0->n_inputs; i++) {
    const kiln_tensor *t = bound ? bound[g0->inputs[i]] : NULL;
    if (!g0->values[g0->inputs[i]].init && t) nkey += 3 + t->rank;
  }
  int64_t *k = kiln_malloc(sizeof *k * (size_t)nkey);
  if (!k) return kiln_fail(KILN_E_NOMEM, "out of memory specialising a plan");
  int n = 0;
  k[n++] = -1;
  for (int i = 0; i < g0->n_inputs; i++) {
    const kiln_tensor *t = bound ? bound[g0->inputs[i]] : NULL;
    if (g0->values[g0->inputs[i]].init || !t) continue;
    k[n++] = i, k[n++] = t->dtype, k[n++] = t->rank;
    for (int d = 0; d < t->rank; d++) k[n++] = t->dims[d];
  }
  int slot;
  if ((*out = variant_find(p, k, nkey, &slot))) {
    kiln_free(k);
    return KILN_OK;
  }
  kiln_graph *d = NULL;
  kiln_cpu_plan *sub = NULL;
  kiln_status s = kiln_edit_clone(g0, &d);
  for (int i = 0; !s && i < d->n_inputs; i++) {
    kiln_value *val = &d->values[d->inputs[i]];
    const kiln_tensor *t = bound ? bound[g0->inputs[i]] : NULL;
    if (val->init || !t) continue;
    for (int j = 0; j < val->type.rank; j++) kiln_free(val->type.dims[j].param);
    val->type.kind = KILN_TYPE_TENSOR;
    val->type.dtype = t->dtype;
    val->type.rank = t->rank;
    for (int j = 0; j < t->rank; j++) val->type.dims[j] = (kiln_dim){t->dims[j], NULL};
  }
  /* may specialise on values itself; never again by shape (its inputs are
     concrete: a KILN_E_SYMBOLIC_SHAPE left is a data-dependent dim's) */
  if (!s) s = prepare(d, true, false, p->obs_mode, false, &sub);
  if (s) {
    kiln_free(k);
    kiln_graph_free(d);
    return s;
  }
  kiln_log(KILN_LOG_INFO, "cpu plan: a variant for this run's input dims");
  variant_put(p, slot, k, nkey, sub);
  kiln_graph_free(d);
  *out = sub;
  return KILN_OK;
}

/* Makes a run's working memory at the plan's first run (all zero): the
 * arrays kiln_cpu_run used to allocate per run and run_kernel per node. */
static kiln_status run_memory(kiln_cpu_plan *p) {
  if (p->run_slot) return KILN_OK;
  const kiln_graph *g = p->g;
  int max_in = 0, max_out = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    if (g->nodes[i].n_in > max_in) max_in = g->nodes[i].n_in;
    if (g->nodes[i].n_out > max_out) max_out = g->nodes[i].n_out;
  }
  p->run_in = kiln_calloc((size_t)g->n_inputs + 1, sizeof *p->run_in);
  p->run_slot = kiln_calloc((size_t)g->n_values + 1, sizeof *p->run_slot);
  p->run_stacks = kiln_calloc((size_t)g->n_values + 1, sizeof *p->run_stacks);
  p->run_early = kiln_calloc((size_t)g->n_outputs + 1, sizeof *p->run_early);
  p->k_ins = kiln_calloc((size_t)max_in + 1, sizeof *p->k_ins);
  p->k_tmp = kiln_calloc((size_t)max_in + 1, sizeof *p->k_tmp);
  p->k_res = kiln_calloc((size_t)max_out + 1, sizeof *p->k_res);
  p->k_used = kiln_calloc((size_t)max_out + 1, sizeof *p->k_used);
  if (!p->run_in || !p->run_slot || !p->run_stacks || !p->run_early || !p->k_ins || !p->k_tmp || !p->k_res ||
      !p->k_used) {
    free_run_memory(p);
    return kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
  }
  p->run_nv = g->n_values;
  return KILN_OK;
}

kiln_status kiln_cpu_run(kiln_cpu_plan *p, const kiln_graph *g0, const kiln_tensor *const *bound, kiln_tensor *outs) {
  kiln_status s = KILN_OK;
  /* observers (ir/observe.h): observe-all and histograms run a plan of
     their own (kept outputs / unfused), compiled at the first such run */
  kiln_obs *obs = kiln_obs_run_current();
  if (obs && kiln_obs_graph(obs) != g0) obs = NULL;
  int mode = kiln_cpu_obs_mode(obs);
  if (mode && !p->obs_mode) {
    if (!p->obs_plan[mode - 1] && (s = prepare(g0, true, true, mode, true, &p->obs_plan[mode - 1]))) return s;
    return kiln_cpu_run(p->obs_plan[mode - 1], g0, bound, outs);
  }
  if (p->by_shape_ok) {
    kiln_cpu_plan *v;
    if ((s = shape_variant(p, g0, bound, &v))) return s;
    if (v) return kiln_cpu_run(v, g0, bound, outs);
  }
  if (p->n_spec) {
    kiln_cpu_plan *v;
    if ((s = variant_for(p, g0, bound, &v))) return s;
    if (v) return kiln_cpu_run(v, g0, bound, outs);
  }
  if (!p->prof_checked) { /* KILN_PROFILE */
    p->prof = kiln_cpu_prof_new(p->sched->n_steps);
    p->prof_checked = true;
  }
  double t_run = p->prof ? kiln_cpu_prof_now(p->prof) : 0;
  kiln_cpu_prof_begin(p->prof);
  kiln_graph *g = p->g;
  if ((s = run_memory(p))) return s;
  const kiln_tensor **in = p->run_in;
  kiln_tensor *slot = p->run_slot; /* zero: the last run cleared it */
  bool *early = p->run_early;      /* per output: a constant copied before the steps */
  kiln_views **stacks = p->run_stacks;
  if (!p->in_map) { /* graph inputs by name: a specialised plan has fewer */
    if (!(p->in_map = kiln_calloc((size_t)g->n_inputs + 1, sizeof *p->in_map))) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory starting a run");
      goto done;
    }
    for (int i = 0; i < g->n_inputs; i++) p->in_map[i] = kiln_graph_find_value(g0, g->values[g->inputs[i]].name);
  }
  for (int i = 0; i < g->n_inputs; i++) {
    int v = g->inputs[i], v0 = p->in_map[i];
    if (g->values[v].init) continue;
    if (!bound || v0 < 0 || !bound[v0]) {
      s = kiln_fail(KILN_E_MODEL, "graph input '%s' has no data bound", g->values[v].name);
      goto done;
    }
    in[i] = bound[v0];
    const kiln_tensor *t = in[i];
    kiln_tensor_wrap(&slot[v], t->dtype, t->rank, t->dims, t->numel, t->data);
  }
  for (int v = 0; v < g->n_values; v++) {
    const kiln_tensor *t = g->values[v].init;
    if (t)
      kiln_tensor_wrap(&slot[v], t->dtype, t->rank, t->dims, t->numel, t->data);
  }
  if ((s = bind_inputs(p, in))) goto done;
  if ((s = bind_specs(p))) goto done;
  if ((s = bind_outputs(p, outs, in))) goto done;
  if ((s = copy_constants_early(p, outs, in, early))) goto done;
  p->run_obs = NULL;
  if (obs && !(s = kiln_cpu_obs_bind(&p->ostate, obs, g, p->sh, p->vals, p->nsym, p->sched, p->tile))) {
    p->run_obs = obs;
    kiln_cpu_obs_constants(p->ostate, obs, g);
  }
  if (s) goto done;
  double t_step = p->prof ? kiln_cpu_prof_now(p->prof) : 0;
  for (int k = 0; k < p->sched->n_steps && !s; k++) {
    const kiln_step *st = &p->sched->steps[k];
    char lbl[256];
    if (p->tile[k]) {
      s = run_tile_step(p, k, slot, stacks);
      if (s) {
        const kiln_node *n = &g->nodes[st->nodes[0]];
        kiln_error_prefix("fused group of %d node%s from %s (%s)", st->n_nodes, st->n_nodes == 1 ? "" : "s",
                          kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
      }
    }
    for (int j = 0; j < st->n_nodes && !s && !p->tile[k]; j++) {
      int i = st->nodes[j];
      const kiln_node *n = &g->nodes[i];
      s = p->how[i] != V_KERNEL ? run_view(p, i, slot, stacks) : KILN_E_UNSUPPORTED_SHAPE;
      if (s == KILN_E_UNSUPPORTED_SHAPE) { /* a kernel node, or a view that must run as one */
        kiln_error_clear();
        s = run_kernel(p, i, slot, NULL);
      }
      if (s) kiln_error_prefix("node %s (%s)", kiln_node_label(g, n, lbl, sizeof lbl), n->op_type);
      else if (p->run_obs) kiln_cpu_obs_node(p->ostate, p->run_obs, n, slot); /* before anything writes over it */
    }
    if (s) break;
    /* free heap intermediates after the last reader of them or of a view
       of them (arena slots and views themselves own nothing) */
    for (int j = 0; j < st->n_nodes; j++) {
      const kiln_node *n = &g->nodes[st->nodes[j]];
      int last = st->nodes[st->n_nodes - 1];
      for (int q = 0; q < n->n_in; q++) {
        int v = n->in[q];
        while (v >= 0 && p->alias_of[v] >= 0) v = p->alias_of[v];
        if (v >= 0 && p->free_after[v] <= last && !g->values[v].is_output && slot[v].owns)
          kiln_tensor_release(&slot[v]);
      }
    }
    if (p->prof) {
      double t = kiln_cpu_prof_now(p->prof);
      kiln_cpu_prof_add(p->prof, k, t - t_step);
      t_step = t;
    }
  }
  /* the outputs: an owned dense result moves to the caller, others are copied */
  for (int o = 0; o < g->n_outputs && !s; o++) {
    int w = g->outputs[o];
    bool again = false;
    for (int o2 = o + 1; o2 < g->n_outputs; o2++) again = again || g->outputs[o2] == w;
    if (early[o]) continue; /* a constant, copied before the steps */
    if (p->direct[w] && slot[w].data == outs[o].data && !slot[w].strided) { /* computed in the caller's memory */
      size_t cap = outs[o].capacity;
      kiln_tensor_wrap(&outs[o], slot[w].dtype, slot[w].rank, slot[w].dims, slot[w].numel, slot[w].data);
      outs[o].capacity = cap;
    } else if (slot[w].owns && !slot[w].strided && !again) {
      outs[o] = slot[w];
      memset(&slot[w], 0, sizeof slot[w]);
    } else {
      s = copy_out(&outs[o], &slot[w]);
    }
  }
  if (s)
    for (int o = 0; o < g->n_outputs; o++) kiln_tensor_release(&outs[o]);
  if (p->prof && !s) {
    double t = kiln_cpu_prof_now(p->prof);
    kiln_cpu_prof_add(p->prof, p->sched->n_steps, t - t_step);
    kiln_cpu_prof_run(p->prof, t - t_run);
  }
done:
  p->run_obs = NULL;
  for (int v = 0; v < g->n_values; v++)
    if (slot[v].owns) kiln_tensor_release(&slot[v]);
  memset(slot, 0, sizeof *slot * (size_t)g->n_values); /* for the next run; the stacks are kept */
  return s;
}

void kiln_cpu_plan_stats(const kiln_cpu_plan *p, kiln_cpu_stats *st) {
  *st = p->st;
  if (p->by_shape) { /* planned per input-shape set: the plan of the latest shapes describes the graph */
    int last = -1;
    for (int k = 0; k < KILN_CPU_VARIANTS; k++)
      if (p->var[k].plan && (last < 0 || p->var[k].used > p->var[last].used)) last = k;
    if (last >= 0) {
      kiln_cpu_plan_stats(p->var[last].plan, st);
      st->variants = st->plans = 0; /* counted below with the others */
      st->materialized = st->own_calls = st->tile_runs = st->epilogues_fused = st->epilogues_separate = 0;
      st->epilogues_residual = st->pool_band_rows = 0;
      st->ref_calls = st->outputs_in_place = 0;
    }
  }
  for (int k = 0; k < KILN_CPU_VARIANTS; k++) /* plans made for specialisations count too */
    if (p->var[k].plan) {
      st->variants++;
      st->plans += p->var[k].plan->st.plans;
      st->materialized += p->var[k].plan->st.materialized;
      st->own_calls += p->var[k].plan->st.own_calls;
      st->tile_runs += p->var[k].plan->st.tile_runs;
      st->epilogues_fused += p->var[k].plan->st.epilogues_fused;
      st->epilogues_separate += p->var[k].plan->st.epilogues_separate;
      st->epilogues_residual += p->var[k].plan->st.epilogues_residual;
      st->pool_band_rows += p->var[k].plan->st.pool_band_rows;
      st->ref_calls += p->var[k].plan->st.ref_calls;
      st->outputs_in_place += p->var[k].plan->st.outputs_in_place;
    }
}
