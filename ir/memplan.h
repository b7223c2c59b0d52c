/* ir/memplan: the static memory planner. Given a schedule and the byte size
 * of every value at the shape bounds, it places each value that lives in the
 * arena at a 64-byte-aligned offset of one arena, reusing memory between
 * values whose lifetimes do not overlap, and writing in place where allowed. */
#ifndef KILN_IR_MEMPLAN_H
#define KILN_IR_MEMPLAN_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/graph.h"
#include "ir/schedule.h"
#include "ir/status.h"

#define KILN_MEMPLAN_ALIGN 64
/* Largest size of one value, and of the no-reuse total (bytes). */
#define KILN_MEMPLAN_MAX_BYTES ((uint64_t)1 << 48)
/* offset[] of a value that is not in the arena (outside it, or unused). */
#define KILN_MEMPLAN_NONE (-1)

/* Step `step` may write value `out` over the storage of value `in`: the op
 * produces out element by element from in with the same layout (elementwise,
 * BatchNormalization in inference, Relu, Add...). The caller proposes; the
 * planner accepts only when it is safe (see kiln_memplan_build). */
typedef struct kiln_memplan_inplace {
  int step, out, in;
} kiln_memplan_inplace;

/* What to plan. Arrays have sched->n_values entries; optional ones may be NULL. */
typedef struct kiln_memplan_request {
  const kiln_schedule *sched;
  const uint64_t *size;  /* bytes of each value at the shape bounds */
  const bool *external;  /* optional: lives in host buffers (graph inputs, outputs, weights) */
  const int *alias_of;   /* optional: a view's base value, or -1. The view
                            shares the base's storage; its own size is ignored. */
  const kiln_memplan_inplace *inplace; /* optional in-place candidates */
  int n_inplace;
} kiln_memplan_request;

typedef struct kiln_memplan {
  int n_values;
  uint64_t arena_size;  /* the planned peak: bytes of the one arena */
  uint64_t lower_bound; /* max over steps of the aligned bytes of arena storage
                           live then (after the view and in-place decisions: a
                           view adds nothing, an in-place pair counts once) */
  uint64_t no_reuse;    /* sum of the aligned sizes of the arena values that are
                           not views: one buffer each, no reuse, no in place */
  int64_t *offset;      /* per value: arena byte offset of its storage, or KILN_MEMPLAN_NONE */
  int *storage;         /* per value: the value owning its buffer (itself, its view
                           base, or the value it was written in place over); -1 if none */
  int *first, *last;    /* per value: first / last step accessing it; -1 if unused */
  int n_inplace;        /* accepted in-place candidates, in step order */
  kiln_memplan_inplace *inplace;
  const char *strategy; /* which placement order gave the plan (static string) */
} kiln_memplan;

/* Marks external[v] for the graph's inputs, outputs and initializers (the
 * values the host owns). external has g->n_values entries. */
void kiln_memplan_mark_external(const kiln_graph *g, bool *external);

/* Plans the arena. Guarantees, for the returned plan:
 *  - every value in the arena whose storage the schedule uses gets a
 *    KILN_MEMPLAN_ALIGN-aligned offset with offset + aligned size <=
 *    arena_size (size 0: offset 0); a view gets its base's offset;
 *  - lifetimes run from a value's first write to its last read or write
 *    (inclusive, in steps); a base lives until the last use of any view of it;
 *  - two storages whose lifetimes overlap never overlap in memory, except an
 *    accepted in-place pair (same offset, meeting only at that step);
 *  - lower_bound <= arena_size <= no_reuse; the same request, the same plan.
 * An in-place candidate (step s, out w, in r) is accepted when r and w are in
 * the arena, w owns its storage and is first used at s, r's storage is last
 * used at s and was not given away already, size[w] equals that storage's
 * size, and step s touches the two storages only by reading r and writing w
 * (no other view of either, no write of r: Add(a, Transpose(a)) never
 * overwrites a). Candidates are taken in step order; refusals are logged at
 * KILN_LOG=debug with the reason.
 * Placement: storages sorted by several orders (size, lifetime length, area,
 * start, step pressure), each placed by best fit (and first fit) into the
 * gaps among already placed storages whose lifetimes overlap; the smallest
 * arena wins, then a bounded local search on the order (see memplan.c).
 * Fails with a message (KILN_E_INTERNAL: a schedule or request broken by an
 * earlier stage) on an arena value read before, or only in the same step as,
 * its storage is first written; on a bad index or a cycle of views; and
 * (KILN_E_UNSUPPORTED_SHAPE) when sizes overflow KILN_MEMPLAN_MAX_BYTES.
 * *out is NULL on failure. */
kiln_status kiln_memplan_build(const kiln_memplan_request *req, kiln_memplan **out);

/* Checks plan against req independently of how it was made: recomputes the
 * lifetimes from the schedule and proves that no two storages with
 * overlapping lifetimes overlap in memory (except accepted in-place pairs,
 * which it re-checks against the candidates), that offsets are aligned and
 * inside the arena, and that the reported bounds are consistent. KILN_OK, or
 * KILN_E_INTERNAL with a message naming the two values, steps and ranges. */
kiln_status kiln_memplan_verify(const kiln_memplan *plan, const kiln_memplan_request *req);

/* Writes a readable table of the plan (summary, then one line per arena
 * value: index, name if g is given, steps, offset, size). */
void kiln_memplan_dump(const kiln_memplan *plan, const kiln_memplan_request *req, const kiln_graph *g, FILE *f);

void kiln_memplan_free(kiln_memplan *p);

#endif
