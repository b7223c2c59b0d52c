/* fuse/predicate: "may these fuse?" (prefix kiln_fuse_) — the fusion
 * context (graph, shapes, options, and the groups formed so far) and the
 * predicate that answers, with a reason, whether a consumer may join its
 * producer's group. Kept apart from the grouping pass so that every rule
 * can be unit-tested and explained in KILN_DUMP output. */
#ifndef KILN_FUSE_PREDICATE_H
#define KILN_FUSE_PREDICATE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"
#include "ir/shape.h"
#include "ir/status.h"

/* Defaults and hard limits of the group size caps. */
#define KILN_FUSE_DEFAULT_MAX_NODES 32  /* graph nodes in one group */
#define KILN_FUSE_DEFAULT_MAX_INPUTS 16 /* distinct memory values one group loads */
#define KILN_FUSE_MAX_INPUTS 64         /* largest max_inputs accepted */
#define KILN_FUSE_MAX_REDUCTIONS 4      /* reductions in one spec (Softmax counts 2) */

typedef struct kiln_fuse_opts {
  int max_nodes;  /* 0: KILN_FUSE_DEFAULT_MAX_NODES */
  int max_inputs; /* 0: KILN_FUSE_DEFAULT_MAX_INPUTS; capped at KILN_FUSE_MAX_INPUTS */
} kiln_fuse_opts;

typedef struct kiln_fuse_ctx kiln_fuse_ctx;

/* A context over g and its inferred shapes sh (both borrowed: they must
 * outlive the context and the specs made from it). opts may be NULL
 * (defaults). No group exists yet. *out is NULL on failure. */
kiln_status kiln_fuse_ctx_new(const kiln_graph *g, const kiln_shapes *sh, const kiln_fuse_opts *opts,
                              kiln_fuse_ctx **out);
/* Frees the context (not the graph or shapes). NULL is fine. */
void kiln_fuse_ctx_free(kiln_fuse_ctx *c);

/* Symbol values (indexed by symbol id, KILN_DIM_UNSET for none) used to make
 * concrete index maps of the specs built afterwards; copied. Without them
 * only constant dims (and values the model fixes) are known. */
kiln_status kiln_fuse_ctx_bind(kiln_fuse_ctx *c, const int64_t *vals, int n);

/* --- Group state. Groups are built in schedule order: one group is open
 * at a time, and a node joins the open group or opens a new one (closing
 * the previous). --- */

/* Forgets every group. */
void kiln_fuse_ctx_reset(kiln_fuse_ctx *c);
/* Opens a new group holding node alone (any node may start a group: one the
 * spec cannot express becomes an opaque group of one); *gid (optional) gets
 * its id. Fails on a bad or already grouped node, or out of memory. */
kiln_status kiln_fuse_ctx_open(kiln_fuse_ctx *c, int node, int *gid);
/* Adds node to the open group when kiln_fuse_can_join allows it; returns
 * false (and changes nothing) otherwise, with the reason in why. */
bool kiln_fuse_ctx_join(kiln_fuse_ctx *c, int node, char *why, size_t size);
/* The group of a node, -1 when it has none; the open group, -1 when none. */
int kiln_fuse_ctx_group_of(const kiln_fuse_ctx *c, int node);
int kiln_fuse_ctx_open_group(const kiln_fuse_ctx *c);

/* --- The predicate. Both write a one-line reason into why (size bytes,
 * truncated; why may be NULL): "ok: ..." when they return true, "no: ..."
 * naming the rule when they return false. Neither changes the context. --- */

/* May consumer join producer's group? producer's group is the one it is in
 * (which must be the open group: a closed group cannot grow), or a new group
 * of producer alone when it has none. Rules, in order: consumer reads an
 * output of producer; neither shape is data-dependent (opaque); neither op
 * is opaque or without a kernel-spec form; kinds are compatible (an anchor
 * (Conv, MatMul, Gemm) starts a group and takes an elementwise epilogue and
 * one pooling, after which the group ends; a reduction takes elementwise
 * prologues and epilogues, with at most KILN_FUSE_MAX_REDUCTIONS
 * reductions, all over the same domain and axes, and none after an anchor);
 * shapes are compatible (elementwise values of a group share one iteration
 * domain after broadcasting; a value computed in the group is never
 * broadcast to more elements, which would recompute it, except a
 * reduction's result read back over its own domain; views apply as index
 * maps to values read from memory, and to computed values only when they
 * keep row-major order); the group stays within the size caps. Work is never
 * duplicated: an output also needed outside the group is stored (the
 * reason says so), and a producer in a closed group is read from memory. */
bool kiln_fuse_can_fuse(const kiln_fuse_ctx *c, int producer, int consumer, char *why, size_t size);

/* May node join the open group (the same rules, against every producer of
 * node in the group)? A view of a value from memory may join any open group
 * that can hold it: it adds an index map and no work. */
bool kiln_fuse_can_join(const kiln_fuse_ctx *c, int node, char *why, size_t size);

#endif
