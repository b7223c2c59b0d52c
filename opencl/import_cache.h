/* opencl/import_cache: the graph as imported, in the kiln cache
 * (opencl/cache), keyed by the raw inputs of onnxInitGraph — the model's
 * bytes and each weight given by descriptor (name, type, shape, every data
 * byte) — so that a warm init skips protobuf-c's parse, whose copy of every
 * weight into fresh pages was most of a warm init on rusticl. The record is
 * mapped: the graph's weights are read in place from its page-cache pages.
 * It also carries the key of the rewritten-graph record of that graph
 * (opencl/graph_cache), so that a warm init keys nothing but the raw bytes.
 * The record depends on the bytes and kiln's version only (the import does
 * not look at the device); everything device-dependent is keyed further
 * down (the rewritten graph by the graph, the binaries by the device). */
#ifndef KILN_OPENCL_IMPORT_CACHE_H
#define KILN_OPENCL_IMPORT_CACHE_H
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/graph.h"
#include "opencl/cache.h"

/* A weight as given (the plugin's descriptor, without ONNXIFI's types). */
typedef struct kiln_cl_raw_weight {
  const char *name;
  uint64_t dtype;
  uint32_t rank;
  const uint64_t *shape;
  const void *data;
  size_t bytes; /* of data */
} kiln_cl_raw_weight;

/* One graph's import record: its raw key (keyed: the cache is on and
 * KILN_CL_IMPORT_CACHE is not 0), the time the key took, and on a hit the
 * mapped record the graph borrows and the rewritten graph's key. */
typedef struct kiln_cl_import {
  kiln_cl_key key;
  bool keyed, hit;
  double key_ms;
  kiln_cl_cache_view view;
  kiln_cl_key graph_key; /* the rewritten-graph key (kiln_cl_rewrite_key) of the graph, when has_graph_key */
  bool has_graph_key;
  /* a store in progress (kiln_cl_import_store): its thread, the graph it reads */
  pthread_t th;
  bool storing;
  const kiln_graph *g;
} kiln_cl_import;

/* The raw key: a format tag, kiln's version, the model bytes and each
 * weight's name, type, shape and data (bulk bytes through kiln_cl_digest64). */
kiln_cl_key kiln_cl_import_key(const void *model, size_t size, uint32_t n, const kiln_cl_raw_weight *w);

/* Keys the raw inputs into *imp and looks the record up. True on a hit:
 * *g is the graph as imported (its weights in imp's mapping: release imp
 * after *g is freed). A miss (none, or a damaged entry: deleted, counted,
 * warned about by opencl/cache; or a record that does not unpack) leaves
 * *g NULL and imp keyed for kiln_cl_import_store. Never sets the last
 * error. */
bool kiln_cl_import_lookup(const void *model, size_t size, uint32_t n, const kiln_cl_raw_weight *w,
                           kiln_cl_import *imp, kiln_graph **g);

/* After a miss and a successful init: stores g (the graph as imported, its
 * weights included) under imp's key when the parse took (import_ms, less
 * the key) >= KILN_CL_RECORD_MIN_MS (0.5 ms) and more than twice the key
 * (KILN_CL_IMPORT_CACHE=1: always), on a thread of its own — packing and
 * writing 27-51 MB took 40-270 ms, which the init does not wait for — that
 * reads g until it is joined (kiln_cl_import_release, before g is freed);
 * synchronously where no thread can be started. Quiet on failure (an
 * unwritable cache warns once, opencl/cache). */
void kiln_cl_import_store(kiln_cl_import *imp, const kiln_graph *g, double import_ms);

/* Joins a store in progress and releases the mapping: after the graph that
 * borrows the mapping is freed (a hit), before the graph a store reads is
 * freed (a miss). NULL-safe. */
void kiln_cl_import_release(kiln_cl_import *imp);

/* Packs / reads an import record's payload (exposed for the record tests):
 * the graph with every tensor's bytes, and the rewritten graph's key. The
 * reader checks every field (kiln_cl_graph_unpack) and returns KILN_E_MODEL
 * with a message when the bytes are malformed. */
bool kiln_cl_import_pack(const kiln_graph *g, const kiln_cl_key *graph_key, void **buf, size_t *len);
kiln_status kiln_cl_import_unpack(const void *buf, size_t len, kiln_graph **g, kiln_cl_key *graph_key,
                                  bool *has_graph_key);

#endif
