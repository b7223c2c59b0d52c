/* cpu_fallback/plan_observe: the cpu plan's observer hooks (ir/observe.h's
 * contract), kept out of plan.c. Per plan and observer: each executed
 * value's record (kiln_obs_map_graph, cached by kiln_obs_id); per tile step
 * the expressions reduced tile by tile while the tile is hot (values the
 * group computes over its whole domain, its anchor's output included), and
 * the values reported from memory after the step (stores that are not one
 * expression per domain element, the pooling's output, views of memory).
 * Nodes run alone (own kernels, reference kernels, views) are reported
 * from their output tensor (one pass over it, views read through their
 * strided maps). With histograms (kiln_obs_wants_values) the plan runs
 * unfused (plan.c) and every value is reported from memory. */
#ifndef KILN_CPU_FALLBACK_PLAN_OBSERVE_H
#define KILN_CPU_FALLBACK_PLAN_OBSERVE_H
#include <stdbool.h>

#include "cpu_fallback/tile.h"
#include "ir/observe.h"
#include "ir/schedule.h"
#include "ir/shape.h"

/* Which plan an observer needs: bit 0 keep every original output
 * (observe all: kiln_rewrite_opts.keep_outputs), bit 1 unfused (histograms
 * need the values of every output in memory). 0: the optimised plan. */
#define KILN_CPU_OBS_KEEP 1
#define KILN_CPU_OBS_UNFUSED 2
int kiln_cpu_obs_mode(const kiln_obs *obs);

typedef struct kiln_cpu_obs kiln_cpu_obs;

/* Maps plan graph g for observer obs (once per observer: cached in *st).
 * sched/tile: the plan's steps and their tile programs (NULL: run node by
 * node); the tile steps' specs must be bound at this run's sizes. */
kiln_status kiln_cpu_obs_bind(kiln_cpu_obs **st, kiln_obs *obs, const kiln_graph *g, const kiln_shapes *sh,
                              const int64_t *vals, int nsym, const kiln_schedule *sched,
                              kiln_tile_prog *const *tile);
void kiln_cpu_obs_free(kiln_cpu_obs *st);

/* The values the graph holds as constants (constant folding), each run. */
void kiln_cpu_obs_constants(kiln_cpu_obs *st, kiln_obs *obs, const kiln_graph *g);
/* The outputs of node n, from their tensors in slot (indexed by value). */
void kiln_cpu_obs_node(const kiln_cpu_obs *st, kiln_obs *obs, const kiln_node *n, const kiln_tensor *slot);
/* Whether value v has a record (a view of memory in a tile step is then
 * made, as an alias, so that it can be reported). */
bool kiln_cpu_obs_wants(const kiln_cpu_obs *st, int v);
/* Tile step k: the expressions to fold (partials cleared), or NULL. */
const kiln_tile_obs *kiln_cpu_obs_step_begin(kiln_cpu_obs *st, int k);
/* After tile step k: the folded partials as summaries, the other values
 * of the step from memory. */
void kiln_cpu_obs_step_end(kiln_cpu_obs *st, kiln_obs *obs, int k, const kiln_tensor *slot);

#endif
