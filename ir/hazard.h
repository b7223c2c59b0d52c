/* ir/hazard: the hazard pass — ordering edges (read-after-write, write-after-write,
 * write-after-read) between the steps of a schedule whose accesses may touch the same
 * storage elements, found through views, in-place writes and (optionally) arena reuse. */
#ifndef KILN_IR_HAZARD_H
#define KILN_IR_HAZARD_H
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ir/graph.h"
#include "ir/memplan.h"
#include "ir/schedule.h"
#include "ir/status.h"
#include "ir/views.h"

/* Why the edges exist.
 *
 * Views and in-place writes let several values share one storage: a Slice or
 * Transpose reads a region of its base; an op writes its output over a dead
 * input; ScatterND writes its updates into its data tensor; each Concat
 * producer writes its slice of the output. The value graph alone then no
 * longer orders every pair of accesses that touch the same elements: a
 * ReduceMax of x[:, 0] on one branch and a ScatterND writing into x on
 * another are independent values, yet the read must happen before the write.
 *
 * This pass records, per storage, the latest writes and the reads since them
 * (the data-dependency record of the view-aware compiler notes, SEEDS.md) and
 * emits an edge (a, b, kind) — step b must not start before step a finishes —
 * for every pair of accesses to the same storage whose regions may overlap
 * (kiln_region_may_overlap), keeping only the nearest necessary one per
 * access: a write depends on the live overlapping writes (WAW) and on the
 * overlapping reads since them (WAR); a read depends on the live overlapping
 * writes (RAW). A write removes from the record the accesses it covers (same
 * storage, region contained in its own), whose later conflicts it inherits;
 * and an edge e -> a is left out when a live write x between them conflicts
 * with both (e -> x -> a already orders them: a read of x[0:2] after a write
 * of x and a later write of x[0:2] depends on the later write only).
 *
 * In arena mode (below) storages whose arena bytes overlap share one record,
 * and a full write (one touching every element its storage is accessed at)
 * removes another storage's accesses once the full writes since them have
 * covered all of that storage's bytes: a buffer reused by a chain of values
 * keeps the record small.
 *
 * Limits. Overlap is kiln_region_may_overlap's, which is conservative: two
 * boxes whose [lo, hi] ranges meet and whose offsets agree modulo the gcd of
 * their strides count as overlapping, so Concat producers writing
 * x[:, 0:3] and x[:, 3:6] get a WAW edge (row blocks x[0:2], x[2:4] and
 * interleaved columns x[:, 0::2], x[:, 1::2] get none). Containment (for
 * removing covered accesses) is proved only for an interval container, equal
 * strides, or a single element; otherwise accesses stay in the record, which
 * costs time, not correctness. A view stack's region is its bottom view's
 * (a superset). Across storages in the arena, overlap is by whole storages.
 *
 * The executor runs steps in schedule order, which respects every edge by
 * construction (an edge always goes from an earlier step to a later one).
 * The edges are what a later fusion or reordering pass must keep, and
 * kiln_hazard_check_order is what tests use to prove that kiln's in-place
 * writes never move a read of the old contents after the write. */

typedef enum kiln_hazard_kind {
  KILN_HAZARD_RAW = 0, /* b reads what a wrote */
  KILN_HAZARD_WAR,     /* b overwrites what a read */
  KILN_HAZARD_WAW      /* b overwrites what a wrote */
} kiln_hazard_kind;

/* One ordering edge: step `to` must not start before step `from` finishes.
 * from < to always (schedule order). from_value / to_value are the two
 * conflicting accesses (the first pair found), storage the storage id of
 * the `to` access. */
typedef struct kiln_hazard_edge {
  int from, to;
  kiln_hazard_kind kind;
  int from_value, to_value;
  int storage;
} kiln_hazard_edge;

/* The region one particular access touches when it differs from the
 * value's region[]: a ScatterND in place writes only its box; a step that
 * reads a value through a narrower window. */
typedef struct kiln_hazard_access_region {
  int step, value;
  bool write; /* overrides the write (true) or the read (false) of value at step */
  kiln_region region;
} kiln_hazard_access_region;

/* What to analyse. Arrays marked "per value" have sched->n_values entries;
 * storage ids are value indices (a storage is named by its owner value). */
typedef struct kiln_hazard_request {
  const kiln_schedule *sched;
  /* optional, per value: the storage id the value lives in, in [0, n_values),
   * or -1 for "its own storage" (the value's index). NULL: every value is
   * its own storage. memplan's storage[] fits (see kiln_hazard_storage_ids
   * for values outside the arena that are views). */
  const int *storage;
  /* optional, per value: the region of its storage that accessing the value
   * touches, in elements of the storage (kiln_view_region of its view; the
   * whole [0, numel) box for a dense value: kiln_hazard_dense_region). NULL:
   * every access touches its whole storage. */
  const kiln_region *region;
  /* optional per-access overrides of region[] (a later entry for the same
   * access wins); n_access_region entries. */
  const kiln_hazard_access_region *access_region;
  int n_access_region;
  /* optional, indexed by storage id: the arena byte offset of the storage
   * (KILN_MEMPLAN_NONE when outside the arena) and its byte size. Given both,
   * two different storages whose arena bytes overlap alias each other: any
   * access to one conflicts with any access to the other (whole storages,
   * regions ignored), which orders memory reuse. For memplan: offset is
   * plan->offset and bytes is the request's size[] (storage ids must then be
   * the plan's storage[], so that in-place pairs share one storage). */
  const int64_t *arena_offset;
  const uint64_t *arena_bytes;
  /* With the arena: fail (KILN_E_INTERNAL) when two storages whose arena
   * bytes overlap also have overlapping lifetimes (first to last step that
   * accesses any value of the storage): a broken memory plan, which a
   * correct one never gives. */
  bool arena_assert;
} kiln_hazard_request;

typedef struct kiln_hazards {
  int n_steps;
  int n_accesses; /* accesses analysed (non-empty regions) */
  int n_edges;
  kiln_hazard_edge *edges; /* sorted by (to, from, kind); one per (from, to, kind) */
  int n_kind[3];           /* edges of each kind */
  int max_live;            /* most accesses one record held at once: the pass's
                              cost is about accesses x max_live^2 (pruning keeps it
                              small; many partial writes to one storage grow it) */
} kiln_hazards;

/* Computes the ordering edges of req. Guarantees on success: for every pair
 * of accesses p (step a) and q (step b), a < b, at least one a write, to
 * storages that are the same (with regions that kiln_region_may_overlap)
 * or whose arena bytes overlap, the edges' transitive closure orders a
 * before b; every edge joins two such accesses and is of their kind (RAW:
 * write then read, WAR: read then write, WAW: both writes); a step's own
 * accesses never give an edge to itself. Within a step, reads come before
 * writes. Empty regions touch nothing. Fails with a message
 * (KILN_E_INTERNAL) on a bad storage id, region or override, or, with
 * arena_assert, on two overlapping arena storages with overlapping
 * lifetimes (naming both, their steps and byte ranges); KILN_E_NOMEM on
 * allocation failure. *out is NULL on failure. */
kiln_status kiln_hazard_build(const kiln_hazard_request *req, kiln_hazards **out);

/* True when order[0..n) is a permutation of the steps [0, h->n_steps) in
 * which every edge's `from` comes before its `to`. On false, *violated
 * (optional) is the index of the first violated edge, or -1 when order is
 * not a permutation, and the last-error message says which. */
bool kiln_hazard_check_order(const kiln_hazards *h, const int *order, int n, int *violated);

/* The region [0, numel) of a dense value, as kiln_view_region gives it for a
 * contiguous view (rank 1 stride 1; rank 0 for one element; empty for 0). */
void kiln_hazard_dense_region(int64_t numel, kiln_region *r);

/* Fills out[v] (n_values entries) with a storage id for every value: the
 * plan's storage[v] when >= 0 (plan may be NULL); otherwise the root of v's
 * alias_of chain (alias_of may be NULL: v itself), so that a view of a value
 * outside the arena (a graph input or output) shares its base's storage.
 * Fails (KILN_E_INTERNAL) on an alias index out of range or a cycle. */
kiln_status kiln_hazard_storage_ids(const kiln_memplan *plan, const int *alias_of, int n_values, int *out);

/* "RAW", "WAR" or "WAW". */
const char *kiln_hazard_kind_name(kiln_hazard_kind kind);

/* Writes a readable list (for KILN_DUMP): a summary line, then one line per
 * edge with the steps (and their first node's label when sched and g are
 * given), the kind, the two values (names when g is given) and the storage. */
void kiln_hazard_dump(const kiln_hazards *h, const kiln_schedule *sched, const kiln_graph *g, FILE *f);

/* NULL is fine. */
void kiln_hazards_free(kiln_hazards *h);

#endif
