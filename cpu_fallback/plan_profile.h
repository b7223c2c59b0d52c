/* cpu_fallback/plan_profile: KILN_PROFILE=1 for the cpu backend — the wall
 * time (KILN_PROFILE=cpu: the running thread's CPU time) of every step of a plan (a fused tile step, a kernel node, a view),
 * summed over the runs, printed to stderr as a table when the plan is
 * released: per step its median a run (over the first 4096 runs, fewer
 * for plans of over 1023 steps: at most 16 MiB of samples; a mean carries
 * the rare slow run, such as one whose pool worker woke late) and its
 * mean. Off (the default) it costs one getenv per plan and a NULL test
 * per step. Not thread-safe across concurrent runs of one plan (a plan is
 * not run concurrently). */
#ifndef KILN_CPU_FALLBACK_PLAN_PROFILE_H
#define KILN_CPU_FALLBACK_PLAN_PROFILE_H

#include "ir/graph.h"
#include "ir/schedule.h"

typedef struct kiln_cpu_prof kiln_cpu_prof;

/* A profile of n_steps steps, or NULL when KILN_PROFILE is unset, "0" or
 * memory is short (profiling is never fatal). */
kiln_cpu_prof *kiln_cpu_prof_new(int n_steps);
/* Seconds: monotonic, or the calling thread's CPU time when KILN_PROFILE
 * is "cpu" (meaningful at KILN_NUM_THREADS=1, where every step runs on the
 * plan's thread; other processes' time slices do not count). */
double kiln_cpu_prof_now(const kiln_cpu_prof *pf);
/* Adds seconds to step k; k == n_steps is the copy of the outputs to the
 * caller. NULL-safe. */
void kiln_cpu_prof_add(kiln_cpu_prof *pf, int k, double seconds);
/* Starts a run: its steps' times so far are dropped (a failed run's).
 * NULL-safe. */
void kiln_cpu_prof_begin(kiln_cpu_prof *pf);
/* Counts one whole run (bind to outputs) of the given seconds. NULL-safe. */
void kiln_cpu_prof_run(kiln_cpu_prof *pf, double seconds);
/* Prints the table (steps by share of the time, largest first) for graph g
 * run by schedule s; how[k] names how step k runs ("tile", "kernel",
 * "view"...). Then frees pf. NULL-safe. */
void kiln_cpu_prof_print_free(kiln_cpu_prof *pf, const kiln_graph *g, const kiln_schedule *s,
                              const char *const *how);

#endif
