/* fuse/group: the grouping pass (prefix kiln_fuse_) — partitions a
 * schedule into fusion groups with the predicate, greedily in schedule
 * order, merges each group's steps with kiln_schedule_merge and describes
 * every resulting step by a kernel spec. */
#ifndef KILN_FUSE_GROUP_H
#define KILN_FUSE_GROUP_H
#include "fuse/predicate.h"
#include "fuse/spec.h"
#include "ir/schedule.h"

/* What the pass made. spec[i] describes step i of the rewritten schedule
 * (NULL for a step that covers no graph node); the plan owns the specs. */
typedef struct kiln_fuse_plan {
  int n_steps;
  kiln_fuse_spec **spec;
  int n_groups;     /* steps with a spec */
  int by_kind[KILN_FUSE_G_OPAQUE + 1]; /* groups of each kiln_fuse_group_kind */
  int fused_nodes;  /* nodes in groups of two or more */
  int n_unbound;    /* specs whose maps could not be made concrete (symbolic dims) */
} kiln_fuse_plan;

/* Groups the nodes of schedule s, which must come from c's graph with one
 * step per node (as kiln_schedule_from_graph makes; a step covering no node
 * or several is left alone and ends the open group). Walking the steps in
 * order, each node joins the open group when kiln_fuse_can_join allows it,
 * else opens a new group. Each group's steps are then merged (reads: values
 * read from memory; writes: values something outside still needs), step
 * tag = the group's kiln_fuse_group_kind and user = its spec, bound at the
 * context's symbol values when they make every dim concrete. On failure the
 * schedule may be partly merged (rebuild it) and *out is NULL. The context
 * keeps the group state (kiln_fuse_ctx_group_of) afterwards. */
kiln_status kiln_fuse_schedule(kiln_fuse_ctx *c, kiln_schedule *s, kiln_fuse_plan **out);

/* Frees the plan and its specs. NULL is fine. */
void kiln_fuse_plan_free(kiln_fuse_plan *p);

/* The kernel spec of group gid of c (formed by kiln_fuse_ctx_open/join),
 * covering nodes[0..n_nodes) and storing the values writes[0..n_writes)
 * (those something outside the group needs). The spec is bound when c's
 * symbol values make every dim concrete (see kiln_fuse_spec_bind). */
kiln_status kiln_fuse_spec_build(const kiln_fuse_ctx *c, int gid, const int *nodes, int n_nodes, const int *writes,
                                 int n_writes, kiln_fuse_spec **out);

#endif
