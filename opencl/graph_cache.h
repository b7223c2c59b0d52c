/* opencl/graph_cache: kiln's own compile results in the kiln cache
 * (opencl/cache) — the rewritten graph of a model, so that a warm init
 * skips the rewrite passes (constant folding, BatchNormalization folding,
 * CSE, transpose merging, dead code: 10-60 ms on the bench models, the
 * largest kiln-side cost of a warm init). Keyed by a hash of the graph as
 * given (structure, attributes and every weight byte) and kiln's version;
 * the entry holds the rewritten graph (with its folded constants) and the
 * rewrite statistics. */
#ifndef KILN_OPENCL_GRAPH_CACHE_H
#define KILN_OPENCL_GRAPH_CACHE_H
#include <stdbool.h>
#include <stddef.h>

#include "ir/graph.h"
#include "ir/rewrite.h"
#include "opencl/cache.h"

/* The least time (ms) a rewrite (kiln_cl_rewrite) or an import's parse
 * (opencl/import_cache) must have taken for its record to be stored by
 * default (besides taking twice its key): reading a record back costs
 * 0.1-0.3 ms for the small bench graphs (small_cnn, transformer), whose
 * 0.5-1.5 ms rewrites and parses were under the old 2 ms; a node test's
 * graph stays under it (opencl/ENGINE.md). */
#define KILN_CL_RECORD_MIN_MS 0.5

/* The content key of g: every field of the graph (names, types, nodes,
 * attributes, initializer bytes) and a format tag. False (no key) when g
 * holds what the packer does not handle (graph, sparse or type attributes). */
bool kiln_cl_graph_key(const kiln_graph *g, const char *purpose, kiln_cl_key *out);

/* What a record knows of a value's constant, one byte a value (the facts:
 * what a lowering would otherwise read every weight for; so far whether a
 * float32 constant has no inf or NaN, kiln_cl_finite_facts). The values
 * are those of kiln_cl_finite_set's memo. */
enum { KILN_CL_FACT_NOT_FINITE = -1, KILN_CL_FACT_UNKNOWN = 0, KILN_CL_FACT_FINITE = 1 };

/* Serialises g, st and facts (g->n_values bytes, or NULL: none) into one
 * kiln_malloc'd buffer; false when out of memory or g holds what the packer
 * does not handle. An initializer equal to base's of the same name (base:
 * the graph the key was made of, may be NULL) is stored as a reference to
 * it, not as bytes. */
bool kiln_cl_graph_pack(const kiln_graph *g, const kiln_graph *base, const kiln_rewrite_stats *st,
                        const signed char *facts, void **buf, size_t *len);

/* kiln_cl_graph_pack after head_len bytes of head (a multiple of 64, so
 * that the tensors' offsets stay aligned): one buffer, no second copy. */
bool kiln_cl_graph_pack_head(const void *head, size_t head_len, const kiln_graph *g, const kiln_graph *base,
                             const kiln_rewrite_stats *st, const signed char *facts, void **buf, size_t *len);

/* The key of the rewritten-graph record of g0 (kiln_cl_graph_key with the
 * purpose kiln_cl_rewrite uses; keep_outputs: an observing plan's). */
bool kiln_cl_rewrite_key(const kiln_graph *g0, bool keep_outputs, kiln_cl_key *out);
/* The rewrite's version, in its key and in the import record's key (which
 * keeps a copy of the rewrite key): raise it when the rewrite makes
 * something else of the same graph (or its record's layout changes). 2:
 * embedding bags (ir/bags.h); 3: each node's source index (kiln_node.src). */
#define KILN_CL_REWRITE_VERSION "3"

/* Rebuilds a graph from kiln_cl_graph_pack's bytes (base: the same graph
 * given to pack). Its tensors are not copied: a reference borrows base's
 * tensor's data, a tensor stored in the record is read in place (borrows
 * buf; copied only where buf's address leaves it misaligned for its type),
 * so *g must be freed before buf and base's tensors are. *facts (facts may
 * be NULL: not wanted) gets the record's facts, kiln_malloc'd, or NULL
 * where it has none. KILN_E_MODEL with a message when the bytes are
 * malformed (every length, index, reference, padding byte and fact is
 * checked). */
kiln_status kiln_cl_graph_unpack(const void *buf, size_t len, const kiln_graph *base, kiln_graph **g,
                                 kiln_rewrite_stats *st, signed char **facts);

/* Process-wide counters of the rewritten-graph records. */
typedef struct kiln_cl_graph_cache_stats {
  unsigned long hits, stores;
} kiln_cl_graph_cache_stats;
void kiln_cl_graph_cache_stats_get(kiln_cl_graph_cache_stats *out);
void kiln_cl_graph_cache_count(bool hit);

#endif
