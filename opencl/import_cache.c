/* opencl/import_cache: the imported graph's record — a 64-byte head (a tag,
 * the rewritten graph's key) and the graph as opencl/graph_cache packs it,
 * every tensor's bytes at a 64-byte offset of the payload (read in place
 * from the mapping, 16-byte aligned there: see HEAD). */
#include "opencl/import_cache.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/alloc.h"
#include "ir/status.h"
#include "opencl/graph_cache.h"

#define HEAD_TAG "KILNIMP1"
#define HEAD 64 /* a multiple of graph_cache's data alignment, so each tensor keeps its 64-byte offset in the payload;
                   the payload starts 48 bytes into the mapped file (opencl/cache's header), so in memory the
                   tensors are 16-byte aligned: what reading them in place needs (over_host, engine_compile.c) */

static void key_u64(kiln_cl_key *k, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  kiln_cl_key_bytes(k, b, 8);
}

/* bulk bytes: their length and kiln_cl_digest64 */
static void key_bulk(kiln_cl_key *k, const void *p, size_t n) {
  key_u64(k, n);
  key_u64(k, n ? kiln_cl_digest64(p, n) : 0);
}

kiln_cl_key kiln_cl_import_key(const void *model, size_t size, uint32_t n, const kiln_cl_raw_weight *w) {
  kiln_cl_key k;
  kiln_cl_key_init(&k);
  /* 4: graph record format 3 (the facts); 3: kiln_cl_hash64 of 16 lanes; 2: bulk bytes through kiln_cl_digest64 */
  kiln_cl_key_str(&k, "kiln imported graph 4");
  kiln_cl_key_str(&k, "rewrite " KILN_CL_REWRITE_VERSION); /* the record keeps a rewrite key */
#ifdef KILN_CACHE_KILN_VERSION
  kiln_cl_key_str(&k, KILN_CACHE_KILN_VERSION);
#endif
  key_bulk(&k, model, size);
  key_u64(&k, n);
  for (uint32_t i = 0; i < n; i++) {
    kiln_cl_key_str(&k, w[i].name);
    key_u64(&k, w[i].dtype);
    key_u64(&k, w[i].rank);
    for (uint32_t d = 0; d < w[i].rank; d++) key_u64(&k, w[i].shape[d]);
    key_bulk(&k, w[i].data, w[i].bytes);
  }
  return k;
}

static double ms_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

bool kiln_cl_import_pack(const kiln_graph *g, const kiln_cl_key *graph_key, void **buf, size_t *len) {
  kiln_rewrite_stats st;
  memset(&st, 0, sizeof st);
  unsigned char head[HEAD];
  memset(head, 0, HEAD);
  memcpy(head, HEAD_TAG, 8);
  kiln_cl_put_u64(head + 8, graph_key ? 1 : 0);
  if (graph_key) {
    kiln_cl_put_u64(head + 16, graph_key->hi);
    kiln_cl_put_u64(head + 24, graph_key->lo);
  }
  return kiln_cl_graph_pack_head(head, HEAD, g, NULL, &st, NULL, buf, len);
}

kiln_status kiln_cl_import_unpack(const void *buf, size_t len, kiln_graph **g, kiln_cl_key *graph_key,
                                  bool *has_graph_key) {
  const unsigned char *b = buf;
  *g = NULL;
  *has_graph_key = false;
  if (len < HEAD || memcmp(b, HEAD_TAG, 8))
    return kiln_fail(KILN_E_MODEL, "import record: %s", len < HEAD ? "truncated head" : "another format");
  uint64_t flags = kiln_cl_get_u64(b + 8);
  bool zero_pad = true;
  for (size_t i = 32; i < HEAD; i++) zero_pad = zero_pad && !b[i];
  if (flags > 1 || !zero_pad || (!flags && (kiln_cl_get_u64(b + 16) || kiln_cl_get_u64(b + 24))))
    return kiln_fail(KILN_E_MODEL, "import record: bad head");
  kiln_rewrite_stats st;
  kiln_status s = kiln_cl_graph_unpack(b + HEAD, len - HEAD, NULL, g, &st, NULL);
  if (s) return s;
  if (flags) {
    graph_key->hi = kiln_cl_get_u64(b + 16);
    graph_key->lo = kiln_cl_get_u64(b + 24);
    *has_graph_key = true;
  }
  return KILN_OK;
}

/* KILN_CL_IMPORT_CACHE: 0 off, 1 store every record, else by the rule */
static const char *setting(void) { return getenv("KILN_CL_IMPORT_CACHE"); }

bool kiln_cl_import_lookup(const void *model, size_t size, uint32_t n, const kiln_cl_raw_weight *w,
                           kiln_cl_import *imp, kiln_graph **g) {
  memset(imp, 0, sizeof *imp);
  *g = NULL;
  const char *set = setting();
  if ((set && !strcmp(set, "0")) || !kiln_cl_cache_enabled()) return false;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  imp->key = kiln_cl_import_key(model, size, n, w);
  imp->keyed = true;
  imp->key_ms = ms_since(&t0);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (!kiln_cl_cache_map(imp->key, &imp->view)) return false;
  double t_map = ms_since(&t0);
  kiln_status s = kiln_cl_import_unpack(imp->view.bytes, imp->view.len, g, &imp->graph_key, &imp->has_graph_key);
  if (s) {
    kiln_log(KILN_LOG_INFO, "opencl: imported-graph record not used (%s): importing", kiln_last_error());
    kiln_error_clear();
    kiln_cl_cache_view_release(&imp->view);
    return false;
  }
  imp->hit = true;
  kiln_log(KILN_LOG_INFO,
           "opencl: graph as imported from the kiln cache (%zu bytes, %s): raw key %.1f ms, read %.1f ms, unpack %.1f ms",
           imp->view.len, imp->view.map ? "mapped" : "copied", imp->key_ms, t_map,
           ms_since(&t0) - t_map);
  return true;
}

/* packs imp->g and writes it under imp->key (the store's thread, or inline) */
static void store(kiln_cl_import *imp) {
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  kiln_cl_key gk;
  bool has_gk = kiln_cl_rewrite_key(imp->g, false, &gk);
  void *b;
  size_t n;
  bool packed = kiln_cl_import_pack(imp->g, has_gk ? &gk : NULL, &b, &n);
  double t_pack = ms_since(&t0);
  if (packed && kiln_cl_cache_put(imp->key, b, n)) {
    kiln_log(KILN_LOG_INFO, "opencl: graph as imported stored in the kiln cache (%zu bytes) in %.1f ms (pack %.1f ms)",
             n, ms_since(&t0), t_pack);
  }
  kiln_free(b);
}

static void *store_main(void *arg) {
  store(arg);
  return NULL;
}

void kiln_cl_import_store(kiln_cl_import *imp, const kiln_graph *g, double import_ms) {
  if (!imp->keyed || imp->hit || imp->storing) return;
  const char *set = setting();
  double parse = import_ms - imp->key_ms; /* import_ms counts the lookup too */
  if (!(set && !strcmp(set, "1")) && !(parse >= KILN_CL_RECORD_MIN_MS && parse >= 2 * imp->key_ms)) return;
  imp->g = g;
  if (pthread_create(&imp->th, NULL, store_main, imp)) store(imp);
  else imp->storing = true;
}

void kiln_cl_import_release(kiln_cl_import *imp) {
  if (!imp) return;
  if (imp->storing) pthread_join(imp->th, NULL);
  imp->storing = false;
  kiln_cl_cache_view_release(&imp->view);
}
