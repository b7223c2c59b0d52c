/* opencl/cache: kiln's on-disk cache of compile results — 128-bit FNV-1a
 * keys over the inputs, one checksummed file per entry written atomically;
 * a missing, unwritable or damaged cache only costs a rebuild. */
#ifndef KILN_OPENCL_CACHE_H
#define KILN_OPENCL_CACHE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opencl/device.h"

/* A 128-bit key (FNV-1a 128 state). */
typedef struct kiln_cl_key {
  uint64_t hi, lo;
} kiln_cl_key;

/* Starts a key at the FNV-1a 128 offset basis. */
void kiln_cl_key_init(kiln_cl_key *k);

/* Raw FNV-1a 128 over n bytes (after init, over "a": d228cb69...4a8964). */
void kiln_cl_key_bytes(kiln_cl_key *k, const void *p, size_t n);
/* A 64-bit field of a record, little-endian (the entries', the import
 * record's head, the program list). */
void kiln_cl_put_u64(unsigned char *p, uint64_t v);
uint64_t kiln_cl_get_u64(const unsigned char *p);

/* One field: its length (8 bytes, little-endian), then its bytes, so that
 * ("ab","c") and ("a","bc") differ. kiln_cl_key_str hashes a C string as a
 * field; NULL differs from "". */
void kiln_cl_key_field(kiln_cl_key *k, const void *p, size_t n);
void kiln_cl_key_str(kiln_cl_key *k, const char *s);

/* The key as 32 lowercase hex digits (hi then lo) and a NUL. */
void kiln_cl_key_hex(kiln_cl_key k, char out[33]);

/* The key of a program: a format tag, kiln's version, the options from the
 * environment that change code generation (KILN_FUSION, KILN_CL_CONV,
 * KILN_CL_VEC, KILN_CL_TILE), the device (platform, name, vendor, version,
 * driver version), the build options and the source (its length and
 * kiln_cl_hash64) — what changes the binary a driver produces. */
kiln_cl_key kiln_cl_program_key(const kiln_cl_device *dev, const void *source, size_t n, const char *options);

/* FNV-1a 64. */
uint64_t kiln_cl_fnv1a64(const void *p, size_t n);
/* A fast non-cryptographic 64-bit hash (16 lanes of 8-byte words with a
 * position-dependent key and one 32x32->64 multiply each; from 1 MiB
 * AVX-512 or AVX2 where the CPU has it, at memory speed): the chunk hash of
 * kiln_cl_digest64, the bulk part of graph keys and the program source in
 * program keys. Any one flipped bit changes it (cache.c). */
uint64_t kiln_cl_hash64(const void *p, size_t n);
/* Its scalar twin: the same value, word by word (the hash below 1 MiB). */
uint64_t kiln_cl_hash64_base(const void *p, size_t n);
/* The vectorised form at any length (AVX-512F, else AVX2; the scalar twin
 * where the CPU has neither: kiln_cl_hash64_has_vec() false). For tests. */
uint64_t kiln_cl_hash64_vec(const void *p, size_t n);
bool kiln_cl_hash64_has_vec(void);
/* One vector width's form at any length: 256 (AVX2) or 512 (AVX-512F); the
 * scalar twin where the CPU lacks it (kiln_cl_hash64_has_width false). For
 * tests. */
uint64_t kiln_cl_hash64_width(int width, const void *p, size_t n);
bool kiln_cl_hash64_has_width(int width);
/* The key its 8-byte word number `word` is combined with (for tests: a word
 * equal to its key is the case where the multiply alone would miss a flip). */
uint64_t kiln_cl_hash64_key(size_t word);
/* The bulk digest: kiln_cl_hash64 for up to 4 MiB; above, kiln_cl_hash64 of
 * each 4 MiB chunk folded in order (the length too), so every byte counts and
 * a changed chunk always changes it. From 8 MiB the chunks are hashed by the
 * calling thread and one worker thread (one thread when it cannot be made);
 * the value never depends on the thread count. The entries' payload checksum
 * and the import key's bulk bytes. */
uint64_t kiln_cl_digest64(const void *p, size_t n);
/* The same digest with at most `threads` threads (1 or 2; for tests). */
uint64_t kiln_cl_digest64_threads(const void *p, size_t n, int threads);

/* The cache directory, read at each call: KILN_CACHE_DIR, else
 * $XDG_CACHE_HOME/kiln (absolute paths only, as XDG says), else
 * $HOME/.cache/kiln. False when none can be named, it does not fit n, or
 * the cache is turned off (KILN_CACHE_DIR set to "" or "off"). */
bool kiln_cl_cache_enabled(void);
bool kiln_cl_cache_dir(char *buf, size_t n);

/* The entry file of key in the cache directory ("<dir>/<hex>.kc"). */
bool kiln_cl_cache_path(kiln_cl_key key, char *buf, size_t n);

/* Looks key up (a miss when the cache is off). On a hit returns true with a copy of the payload in *bytes
 * (kiln_malloc'd; the caller frees) and its length in *len. A missing entry
 * is a miss; an entry that is truncated, has the wrong magic, version or
 * key, or whose payload checksum differs is a miss too, counted as corrupt
 * and deleted so that the next put rebuilds it: the first such entry of the
 * process is a warning (KILN_LOG_WARN), later ones are info. Never sets the
 * last error. */
bool kiln_cl_cache_get(kiln_cl_key key, void **bytes, size_t *len);

/* An entry's payload read by kiln_cl_cache_map: bytes/len, inside a
 * private copy-on-write mapping of the entry file (map/map_len), or a
 * kiln_malloc'd copy (map NULL) where the file cannot be mapped. All zero:
 * none. */
typedef struct kiln_cl_cache_view {
  void *bytes;
  size_t len;
  void *map;
  size_t map_len;
} kiln_cl_cache_view;

/* kiln_cl_cache_get without the copy: the entry file is mapped (MAP_PRIVATE)
 * and checked in place — the same checks, the same miss, warning and
 * deletion of a damaged entry. A large payload costs its checksum only: no
 * fresh pages to fill (a read() of resnet18's 45 MB record into kiln_malloc
 * memory took 20 ms here, the mapping and checksum 2). Every entry kiln
 * writes is a new file renamed into place, never rewritten, so the mapped
 * bytes do not change under a reader; a file cut short by someone else
 * while mapped would fault (SIGBUS) at the next touch of its lost pages.
 * *view is released with kiln_cl_cache_view_release (which zeroes it; a
 * zero view may be released). */
bool kiln_cl_cache_map(kiln_cl_key key, kiln_cl_cache_view *view);
void kiln_cl_cache_view_release(kiln_cl_cache_view *view);

/* Stores len bytes under key: written to a temporary file in the cache
 * directory (created as needed) and renamed over the entry, so readers see
 * the old entry, the new one, or none — never a part. When the directory
 * cannot be created or written, warns (kiln_log KILN_LOG_WARN) once — again
 * only after another directory was in use — and returns false: kiln works
 * on without a cache. Cache off: returns false, quietly. Never sets the
 * last error. */
bool kiln_cl_cache_put(kiln_cl_key key, const void *bytes, size_t len);

/* Process-wide counters since start (for tests and statistics). */
typedef struct kiln_cl_cache_stats {
  uint64_t hits, misses, corrupt, writes, write_failures, warnings;
} kiln_cl_cache_stats;
void kiln_cl_cache_stats_get(kiln_cl_cache_stats *out);

#endif
