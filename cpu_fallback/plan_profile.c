/* cpu_fallback/plan_profile: per-step wall times (or the running thread's
 * CPU times) of a cpu plan (KILN_PROFILE). */
#include "cpu_fallback/plan_profile.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/alloc.h"

/* Runs whose per-step times are kept for the medians (the first ones), at
 * most KILN_PROF_SAMPLE_FLOATS floats for all the steps (16 MiB). */
#define KILN_PROF_SAMPLES 4096
#define KILN_PROF_SAMPLE_FLOATS ((size_t)1 << 22)

struct kiln_cpu_prof {
  int n_steps;
  bool cpu;      /* KILN_PROFILE=cpu: the calling thread's CPU time */
  long runs;
  double run_s;  /* whole runs */
  double *s;     /* per step, then the output copy */
  double *cur;   /* per step: this run's time so far */
  long cap;      /* runs kept for the medians */
  float *samp;   /* per step, cap runs' times (NULL: no medians) */
};

kiln_cpu_prof *kiln_cpu_prof_new(int n_steps) {
  const char *e = getenv("KILN_PROFILE");
  if (!e || !*e || !strcmp(e, "0") || n_steps < 0) return NULL;
  kiln_cpu_prof *pf = kiln_calloc(1, sizeof *pf);
  if (pf && (!(pf->s = kiln_calloc((size_t)n_steps + 1, sizeof *pf->s)) ||
             !(pf->cur = kiln_calloc((size_t)n_steps + 1, sizeof *pf->cur)))) {
    kiln_free(pf->s);
    kiln_free(pf);
    pf = NULL;
  }
  if (pf) {
    size_t per = KILN_PROF_SAMPLE_FLOATS / ((size_t)n_steps + 1);
    pf->cap = per < KILN_PROF_SAMPLES ? (long)per : KILN_PROF_SAMPLES;
    pf->samp = pf->cap ? kiln_malloc(((size_t)n_steps + 1) * (size_t)pf->cap * sizeof *pf->samp) : NULL; /* or none */
  }
  if (pf) {
    pf->n_steps = n_steps;
    pf->cpu = !strcmp(e, "cpu");
  }
  return pf;
}

double kiln_cpu_prof_now(const kiln_cpu_prof *pf) {
  struct timespec ts;
  clock_gettime(pf && pf->cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void kiln_cpu_prof_add(kiln_cpu_prof *pf, int k, double seconds) {
  if (pf && k >= 0 && k <= pf->n_steps) pf->s[k] += seconds, pf->cur[k] += seconds;
}

void kiln_cpu_prof_begin(kiln_cpu_prof *pf) {
  if (pf) memset(pf->cur, 0, ((size_t)pf->n_steps + 1) * sizeof *pf->cur); /* a failed run's steps count nowhere */
}

void kiln_cpu_prof_run(kiln_cpu_prof *pf, double seconds) {
  if (!pf) return;
  for (int k = 0; k <= pf->n_steps; k++)
    if (pf->samp && pf->runs < pf->cap) pf->samp[(size_t)k * (size_t)pf->cap + (size_t)pf->runs] = (float)pf->cur[k];
  pf->runs++;
  pf->run_s += seconds;
}

static int by_value(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return x < y ? -1 : x > y;
}

/* Step k's median time a run (seconds) over the kept runs; -1 without samples. */
static double median_of(kiln_cpu_prof *pf, int k) {
  long n = pf->runs < pf->cap ? pf->runs : pf->cap;
  if (!pf->samp || n < 1) return -1;
  float *v = pf->samp + (size_t)k * (size_t)pf->cap;
  qsort(v, (size_t)n, sizeof *v, by_value);
  return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2]);
}

static const double *sort_s; /* the qsort key (printing is single-threaded, at release) */
static int by_time(const void *a, const void *b) {
  double x = sort_s[*(const int *)a], y = sort_s[*(const int *)b];
  return x < y ? 1 : x > y ? -1 : *(const int *)a - *(const int *)b;
}

void kiln_cpu_prof_print_free(kiln_cpu_prof *pf, const kiln_graph *g, const kiln_schedule *s,
                              const char *const *how) {
  if (!pf) return;
  int n = pf->n_steps + 1, *order = kiln_calloc((size_t)n, sizeof *order);
  if (pf->runs && order) {
    double runs = (double)pf->runs, all = 0;
    for (int k = 0; k < n; k++) all += pf->s[k], order[k] = k;
    sort_s = pf->s;
    qsort(order, (size_t)n, sizeof *order, by_time);
    fprintf(stderr, "kiln cpu profile (%s) of graph '%s': %ld runs, %.4f ms a run: steps and output copy %.4f ms, the rest (binding the run, freeing) %.4f ms\n",
            pf->cpu ? "thread CPU time" : "wall time", g->name ? g->name : "", pf->runs, 1e3 * pf->run_s / runs, 1e3 * all / runs,
            1e3 * (pf->run_s - all) / runs);
    fprintf(stderr, "%5s %6s %-7s %-40s %10s %10s %7s\n", "step", "nodes", "how", "first node (op)", "median ms",
            "ms/run", "share");
    for (int j = 0; j < n; j++) {
      int k = order[j];
      double ms = 1e3 * pf->s[k] / runs, share = pf->run_s > 0 ? 100 * pf->s[k] / pf->run_s : 0;
      double med = median_of(pf, k);
      char lbl[200], name[260], mtxt[32];
      if (med < 0) snprintf(mtxt, sizeof mtxt, "-");
      else snprintf(mtxt, sizeof mtxt, "%.4f", 1e3 * med);
      if (k == pf->n_steps) {
        fprintf(stderr, "%5s %6s %-7s %-40s %10s %10.4f %6.1f%%\n", "out", "", "copy", "graph outputs to the caller", mtxt,
                ms, share);
        continue;
      }
      const kiln_step *st = &s->steps[k];
      if (st->n_nodes) {
        const kiln_node *nd = &g->nodes[st->nodes[0]];
        snprintf(name, sizeof name, "%s (%s)", kiln_node_label(g, nd, lbl, sizeof lbl), nd->op_type);
      } else {
        snprintf(name, sizeof name, "(no node)");
      }
      fprintf(stderr, "%5d %6d %-7s %-40.40s %10s %10.4f %6.1f%%\n", k, st->n_nodes, how && how[k] ? how[k] : "", name,
              mtxt, ms, share);
    }
  }
  kiln_free(order);
  kiln_free(pf->s);
  kiln_free(pf->cur);
  kiln_free(pf->samp);
  kiln_free(pf);
}
