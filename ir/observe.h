/* ir/observe: output-range observers (prefix kiln_obs_), after Caffe2's
 * OutputMinMaxObserver / OutputMinMaxNetObserver and its histogram
 * observers. An observer holds one record per node output of the graph as
 * the host gave it (node index, op type, output index, tensor name): the
 * min and max since the last reset, the totals over all runs, NaN / +inf /
 * -inf counts and run counts, and on request a histogram whose range widens
 * across runs. It turns records into quantization parameters and writes
 * Caffe2's line formats. ir/ knows no backend: engines feed it through the
 * two hooks below.
 *
 * Every engine is wired: reference/exec.c (each node's tensor),
 * cpu_fallback/plan_observe.c (per tile inside fused groups, one pass over
 * other outputs) and opencl/engine_observe.c (in-kernel work-group
 * reductions, a reduction kernel for device-op outputs, per-group partials
 * read back); docs/OBSERVERS.md describes them, the tests and the
 * measured overhead.
 *
 * ---- What an engine provides (the hook contract) ----
 *
 * The plugin owns the observer (plugin/observe.c) and brackets every run
 * with kiln_obs_begin_run / kiln_obs_end_run on the graph's worker thread,
 * under a lock the observer extension functions also take, so options never
 * change during a run. While the engine's run() executes,
 * kiln_obs_run_current() on that thread returns the observer, or NULL when
 * the graph is not observed. No engine-interface member is needed. An
 * engine:
 *
 *  1. reads `obs = kiln_obs_run_current()` once at the start of run() and
 *     ignores it unless kiln_obs_graph(obs) is the graph run() was given
 *     (the graph as imported); NULL must cost nothing but that test. It
 *     hands the pointer to whatever threads compute.
 *  2. after a step computed a node output — before any later step writes
 *     over it in place — reports it for the record of the original (node,
 *     output) pair:
 *       kiln_obs_tensor(obs, slot, t)    a host tensor, dense or strided
 *                                         (views are reported as views: they
 *                                         are node outputs of the model too);
 *       kiln_obs_summary(obs, slot, &p)  a partial (min, max, NaN, ±inf,
 *                                         count) the engine reduced itself:
 *                                         per CPU tile with
 *                                         kiln_obs_partial_fold_f32 (the
 *                                         vectorised loop) merged with
 *                                         kiln_obs_partial_merge; on OpenCL
 *                                         per work-group in the generated
 *                                         kernel, then a tiny final pass or a
 *                                         read of the per-group partials —
 *                                         never the tensor itself.
 *     Several reports for one record in one run merge (count one run), so a
 *     tensor may be reported tile by tile. With histograms on
 *     (kiln_obs_wants_values), report values with kiln_obs_tensor — e.g.
 *     run a fused group unfused, or materialise its intermediates, for
 *     observed runs; a summary is counted in the record's hist_missed.
 *  3. calls the hooks of one observer from one thread at a time (they do
 *     not lock): reduce across threads first, or serialise.
 *  4. for a graph it rewrote or fused: calls
 *     kiln_obs_map_graph(obs, executed_graph, slot_of_value) once per
 *     compiled graph and observer (cache it keyed by kiln_obs_id(obs)) to
 *     get each executed value's record — by name: rewrites keep the names of
 *     surviving values, and fusion keeps values in the graph, so an
 *     intermediate that a fused kernel holds in registers/L1 still has its
 *     record and is reported from inside the kernel (summary path).
 *     map_graph also lists the records of tensors a rewrite erased as folded
 *     into the one that replaced them (BatchNormalization folded into a
 *     Conv/Gemm: the Conv's output into the BN's output; Identity/Dropout
 *     removed: into its input; CSE: into the equal node's output; merged
 *     Transposes: into the last one) or as erased (dead code). An engine
 *     that knows better calls kiln_obs_set_folded() after map_graph. A value
 *     the executed graph holds as a constant (constant folding) has a slot
 *     too: report it every run (cache its partial, kiln_obs_summary).
 *  5. when kiln_obs_observe_all(obs) is true, runs a graph compiled without
 *     the rewrites that erase node outputs — kiln_rewrite_opts.keep_outputs
 *     (ir/rewrite.h) — so that every original output exists and is reported
 *     (as Glow's profiling mode instruments before optimizing). It may
 *     recompile lazily at the first such run and go back to its optimised
 *     plan when the observer goes (run_current NULL or observe_all false).
 *
 * Record values: min/max ignore NaN and include ±inf (the exact min/max of
 * the tensor's ordered values); histograms bin finite values only. Values
 * are doubles: int64/uint64 beyond 2^53 are rounded. Bool and string
 * tensors are not observed. */
#ifndef KILN_IR_OBSERVE_H
#define KILN_IR_OBSERVE_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/graph.h"

/* A reduction of some elements: what an engine reduces per tile or per
 * work-group. Empty: count 0, min +inf, max -inf (kiln_obs_partial_init). */
typedef struct kiln_obs_partial {
  double min, max;             /* over non-NaN elements, ±inf included */
  uint64_t nan, pos_inf, neg_inf;
  uint64_t count;              /* elements reduced, NaN included */
} kiln_obs_partial;

void kiln_obs_partial_init(kiln_obs_partial *p);
/* into := into ∪ p. Associative and commutative. */
void kiln_obs_partial_merge(kiln_obs_partial *into, const kiln_obs_partial *p);
/* Folds n contiguous float32 values (the vectorisable loop engines may
 * call per tile), and any kiln_tensor (dense or strided, float32/16,
 * bfloat16, float64, integers; bool and others: nothing, returns false). */
void kiln_obs_partial_fold_f32(kiln_obs_partial *p, const float *x, int64_t n);
bool kiln_obs_partial_fold(kiln_obs_partial *p, const kiln_tensor *t);

/* A histogram of nbins equal bins over [lo, hi]; empty until the first
 * finite value (lo > hi). Widening keeps every count: the new bins are
 * whole multiples of the old width on the old grid, so each old bin falls
 * into exactly one new bin (no smearing). */
typedef struct kiln_obs_hist {
  int nbins;
  double lo, hi;
  uint64_t *counts;
  uint64_t total;
} kiln_obs_hist;

kiln_status kiln_obs_hist_init(kiln_obs_hist *h, int nbins);
void kiln_obs_hist_free(kiln_obs_hist *h);
/* Makes [lo, hi] cover [mn, mx] (finite, mn <= mx), rebinning old counts. */
void kiln_obs_hist_widen(kiln_obs_hist *h, double mn, double mx);
/* Adds the finite values of t (widening first to their range). */
void kiln_obs_hist_add(kiln_obs_hist *h, const kiln_tensor *t);
/* Width of one bin (0 for a histogram over one point or an empty one). */
double kiln_obs_hist_width(const kiln_obs_hist *h);

/* Quantization parameters, as fbgemm/dnnlowp's ChooseQuantizationParams:
 * the range is widened to include 0, scale = (max - min) / (qmax - qmin)
 * (0.1 when that is 0 or its inverse overflows), zero point from the end
 * with the smaller error, clamped to [qmin, qmax] and rounded to an integer.
 * Symmetric: max_abs = max(|min|, |max|), scale = max_abs / qmax (qmin =
 * -qmax), zero point 0. */
typedef enum kiln_obs_qscheme { KILN_OBS_AFFINE_U8 = 0, KILN_OBS_SYMMETRIC_I8 = 1 } kiln_obs_qscheme;
/* Where the range comes from: the record's total min/max, or the
 * histogram's range that minimises the L2 (quantization noise) or the KL
 * error (TensorRT / dnnlowp's KL minimization). */
typedef enum kiln_obs_qmethod { KILN_OBS_MINMAX = 0, KILN_OBS_L2 = 1, KILN_OBS_KL = 2 } kiln_obs_qmethod;

typedef struct kiln_obs_qparams {
  double min, max; /* the range chosen (before zero is included) */
  double scale;
  int32_t zero_point;
  int precision;   /* bits */
} kiln_obs_qparams;

/* From a range; precision in [2, 16] (8 for uint8/int8). */
void kiln_obs_choose_qparams(double min, double max, kiln_obs_qscheme scheme, int precision, kiln_obs_qparams *q);
/* The sub-range [*lo, *hi] of h (whole bins) minimising the L2 error of
 * quantizing to 2^precision levels (clipped values count with their
 * clipping error), or the KL divergence between the clipped distribution
 * and its quantized version. Candidates shrink one bin at a time from the
 * side with less mass in its outer bin (PyTorch's HistogramObserver search
 * order) and the best of all is kept: O(nbins^2). An empty histogram gives
 * false. */
bool kiln_obs_hist_l2_range(const kiln_obs_hist *h, int precision, double *lo, double *hi);
bool kiln_obs_hist_kl_range(const kiln_obs_hist *h, int precision, double *lo, double *hi);

/* ---- the observer ---- */

typedef struct kiln_obs_options {
  int nbins;             /* histograms with nbins bins; 0: none */
  uint64_t dump_freq;    /* dump-and-reset every dump_freq runs; 0: never */
  const char *dump_file; /* "<stem><ext>": periodic dumps go to <stem>_<k><ext>,
                            the totals to dump_file itself at stop; NULL: none */
  char delim;            /* field delimiter of the line formats; 0: ' ' */
  bool observe_all;      /* engines keep every original output (see above) */
} kiln_obs_options;

typedef struct kiln_obs_record {
  int node, output;        /* in the graph as given */
  int value;               /* value index in that graph */
  const char *op_type;     /* borrowed from the graph */
  const char *name;        /* tensor name, borrowed from the graph */
  kiln_dtype dtype;        /* of the last tensor seen; UNDEFINED before */
  kiln_obs_partial cur;    /* since the last reset */
  kiln_obs_partial total;  /* over all runs */
  uint64_t runs, total_runs; /* runs that reported this record */
  uint64_t last_run;       /* internal: the run that last reported it */
  uint64_t hist_missed;    /* reports that came as summaries with histograms on */
  int folded_into;         /* record index of the tensor that replaced it, -1 */
  bool erased;             /* a rewrite erased it and nothing replaced it */
  kiln_obs_hist hist;      /* nbins 0 when histograms are off */
} kiln_obs_record;

typedef struct kiln_obs kiln_obs;

/* Makes an observer with one record per node output of g (omitted outputs
 * excluded), in node order then output order. g must outlive it. */
kiln_status kiln_obs_new(const kiln_graph *g, const kiln_obs_options *opts, kiln_obs **out);
void kiln_obs_free(kiln_obs *o);

const kiln_obs_options *kiln_obs_opts(const kiln_obs *o);
/* A serial number unique in the process (a new observer may reuse a freed
 * one's address): the key for an engine's cached map. */
uint64_t kiln_obs_id(const kiln_obs *o);
/* The graph the records describe: an engine reports only while it runs
 * this graph (or one it mapped with kiln_obs_map_graph). */
const kiln_graph *kiln_obs_graph(const kiln_obs *o);
bool kiln_obs_observe_all(const kiln_obs *o);
bool kiln_obs_wants_values(const kiln_obs *o);
int kiln_obs_count(const kiln_obs *o);
const kiln_obs_record *kiln_obs_record_at(const kiln_obs *o, int i);
uint64_t kiln_obs_runs(const kiln_obs *o); /* runs ended so far */

/* Record index of output out of node node (the graph as given), or -1. */
int kiln_obs_slot(const kiln_obs *o, int node, int out);
/* Record index of the node output named name, or -1. */
int kiln_obs_slot_by_name(const kiln_obs *o, const char *name);

/* The hooks (see the contract above). A slot < 0 is ignored. */
void kiln_obs_tensor(kiln_obs *o, int slot, const kiln_tensor *t);
void kiln_obs_summary(kiln_obs *o, int slot, const kiln_obs_partial *p);
/* The dtype a summary's record shows (kiln_obs_tensor sets it itself). */
void kiln_obs_set_dtype(kiln_obs *o, int slot, kiln_dtype dt);

/* For a rewritten/fused graph: slot_of_value[v] (exec->n_values entries)
 * gets the record of exec's value v (same name as an original node output;
 * -1 otherwise), and records with no surviving value are marked folded or
 * erased as described above. Marks are recomputed at each call. */
kiln_status kiln_obs_map_graph(kiln_obs *o, const kiln_graph *exec, int *slot_of_value);
void kiln_obs_set_folded(kiln_obs *o, int slot, int into_slot);

/* The run bracket the plugin calls, and the observer of the run executing
 * on this thread (set by begin_run, cleared by end_run). end_run counts the
 * run and, every dump_freq runs, dumps and resets to <stem>_<k><ext>
 * (k = runs / dump_freq); a failed dump returns its status (the run's
 * outputs are still good). */
void kiln_obs_begin_run(kiln_obs *o);
kiln_status kiln_obs_end_run(kiln_obs *o);
kiln_obs *kiln_obs_run_current(void);

/* Clears the since-reset min/max, counts and runs (totals and histograms
 * stay). */
void kiln_obs_reset(kiln_obs *o);

/* <stem>_<k><ext> for file "<stem><ext>" (ext: from the last '.' after the
 * last '/', possibly empty), as Caffe2's OutputMinMaxNetObserver names it. */
const char *kiln_obs_dump_name(const char *file, uint64_t k, char *buf, size_t size);
/* <stem>_<suffix><ext> likewise (the histograms at stop: suffix "hist").
 * NULL when buf is too small. */
const char *kiln_obs_file_name(const char *file, const char *suffix, char *buf, size_t size);

/* ---- writers: one line per record, fields joined by the delimiter;
 * numbers print with the fewest digits that read back to the same double.
 * Records with nothing recorded (since the reset / ever / no histogram)
 * are left out. ---- */
/* op_index op_type output_idx tensor_name min max  (totals: total min max) */
void kiln_obs_print_minmax(const kiln_obs *o, FILE *f, bool totals);
/* op_index op_type output_idx tensor_name min max nbins c_0 ... c_{nbins-1} */
void kiln_obs_print_hist(const kiln_obs *o, FILE *f);
/* op_index op_type output_idx tensor_name min max scale zero_point precision
 * (min max: the chosen range). L2/KL need histograms; a record without one
 * falls back to its min/max. Records with a non-finite range are left out. */
void kiln_obs_print_qparams(const kiln_obs *o, FILE *f, kiln_obs_qmethod m, kiln_obs_qscheme s);
/* The range a record quantizes to: the histogram's L2/KL range, else its
 * total min/max (the histogram's finite range when infinities were seen).
 * False when there is no finite range. */
bool kiln_obs_record_range(const kiln_obs_record *r, kiln_obs_qmethod m, double *lo, double *hi);
kiln_status kiln_obs_record_qparams(const kiln_obs_record *r, kiln_obs_qmethod m, kiln_obs_qscheme s,
                                    kiln_obs_qparams *q);

/* The same to a file, atomically (a temporary in the same folder, then
 * rename). dump_and_reset writes the since-reset ranges then resets. */
kiln_status kiln_obs_write_minmax(const kiln_obs *o, const char *path, bool totals);
kiln_status kiln_obs_write_hist(const kiln_obs *o, const char *path);
kiln_status kiln_obs_write_qparams(const kiln_obs *o, const char *path, kiln_obs_qmethod m, kiln_obs_qscheme s);
kiln_status kiln_obs_dump_and_reset(kiln_obs *o, const char *path);

#endif
