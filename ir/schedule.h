/* ir/schedule: the ordered list of steps a plan executes. A step reads and
 * writes values (value indices of the graph) in memory; it starts as one node
 * and becomes a fused group when fusion merges steps. The memory planner and
 * the backends read the schedule; ir/ knows nothing of what a step launches. */
#ifndef KILN_IR_SCHEDULE_H
#define KILN_IR_SCHEDULE_H
#include <stdbool.h>

#include "ir/graph.h"
#include "ir/status.h"

/* One step: a plain record. reads/writes list each value once, in order of
 * first mention, and only values that touch memory: a value produced and
 * consumed inside a fused group (kept in registers) is in neither list.
 * A value may be in both lists (an in-place update of existing storage). */
typedef struct kiln_step {
  int n_reads, n_writes, n_nodes;
  int *reads;  /* value indices read from memory */
  int *writes; /* value indices written to memory */
  int *nodes;  /* original node indices covered, in execution order */
  int tag;     /* opaque to ir/ (fusion: group kind); 0 when built */
  void *user;  /* opaque to ir/ (fusion: kernel spec); never freed here */
} kiln_step;

typedef struct kiln_schedule {
  int n_values; /* value indices are in [0, n_values) */
  int n_steps, cap_steps;
  kiln_step *steps;
  /* keep[v]: v must reach memory even if no step reads it (graph outputs);
   * merging never makes such a value internal. n_values entries. */
  bool *keep;
} kiln_schedule;

/* A schedule with no steps over n_values values (keep all false).
 * *out is NULL on failure. */
kiln_status kiln_schedule_new(int n_values, kiln_schedule **out);

/* One step per node, in the graph's order. Omitted optionals (-1) and
 * repeated operands are dropped; keep[] marks the graph outputs. Fails with
 * KILN_E_MODEL, naming the node and value, if a node reads a value that is
 * neither a graph input, nor an initializer, nor written by an earlier node.
 * *out is NULL on failure. */
kiln_status kiln_schedule_from_graph(const kiln_graph *g, kiln_schedule **out);

/* Appends a step reading reads[0..n_reads) and writing writes[0..n_writes),
 * covering node (or no node when node < 0). Duplicates are dropped. Fails
 * (KILN_E_INTERNAL) on a value index out of range; s is unchanged then. */
kiln_status kiln_schedule_add_step(kiln_schedule *s, const int *reads, int n_reads, const int *writes,
                                   int n_writes, int node);

/* Merges steps [first, first + count) into one step at index first; later
 * steps move down. The merged step covers the nodes of all members in order,
 * keeps the first member's tag and user, and lists:
 *   reads:  values a member reads that no earlier member wrote;
 *   writes: values a member writes that are keep[], or that a step outside
 *           the group reads or writes. Others are internal and dropped.
 * Fails (KILN_E_INTERNAL) on a bad range; s is unchanged on any failure. */
kiln_status kiln_schedule_merge(kiln_schedule *s, int first, int count);

/* Whether step st reads (writes) value v. Linear in the step's lists. */
bool kiln_step_reads(const kiln_step *st, int v);
bool kiln_step_writes(const kiln_step *st, int v);

/* Frees the schedule, its steps and their lists (not the user pointers).
 * NULL is fine. */
void kiln_schedule_free(kiln_schedule *s);

#endif
