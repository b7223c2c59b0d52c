/* opencl/cache: FNV-1a keys and the entry files — a 48-byte header (magic,
 * version, key, payload length, payload checksum) then the payload, written
 * to a temporary file and renamed into place. */
#include "opencl/cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/alloc.h"
#include "ir/status.h"

/* the vectorised bulk hash (hash64_avx2, hash64_avx512): x86-64 with GCC or clang */
#if defined(__x86_64__) && defined(__GNUC__)
#define KILN_CL_HASH_AVX2 1
#else
#define KILN_CL_HASH_AVX2 0
#endif

#ifndef KILN_CACHE_KILN_VERSION
#define KILN_CACHE_KILN_VERSION "unknown"
#endif

/* ---- keys ---- */

void kiln_cl_key_init(kiln_cl_key *k) {
  k->hi = 0x6c62272e07bb0142ULL;
  k->lo = 0x62b821756295c58dULL;
}

/* k *= the FNV 128 prime 2^88 + 0x13b (mod 2^128), in 64-bit halves. */
static void mul_prime(kiln_cl_key *k) {
  const uint64_t m = 0x13b;
  uint64_t a = k->lo >> 32, b = k->lo & 0xffffffffULL;
  uint64_t am = a * m, bm = b * m; /* each < 2^41 */
  uint64_t low = am << 32, lo = low + bm;
  uint64_t carry = lo < low;
  uint64_t hi = k->hi * m + (am >> 32) + carry + (k->lo << 24);
  k->hi = hi;
  k->lo = lo;
}

void kiln_cl_key_bytes(kiln_cl_key *k, const void *p, size_t n) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) {
    k->lo ^= s[i];
    mul_prime(k);
  }
}

void kiln_cl_key_field(kiln_cl_key *k, const void *p, size_t n) {
  unsigned char len[8];
  for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)n >> (8 * i));
  kiln_cl_key_bytes(k, len, sizeof len);
  kiln_cl_key_bytes(k, p, n);
}

void kiln_cl_key_str(kiln_cl_key *k, const char *s) {
  if (!s) {
    static const unsigned char absent[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    kiln_cl_key_bytes(k, absent, sizeof absent);
    return;
  }
  kiln_cl_key_field(k, s, strlen(s));
}

void kiln_cl_key_hex(kiln_cl_key k, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)k.hi, (unsigned long long)k.lo);
}

kiln_cl_key kiln_cl_program_key(const kiln_cl_device *dev, const void *source, size_t n, const char *options) {
  kiln_cl_key k;
  kiln_cl_key_init(&k);
  kiln_cl_key_str(&k, "kiln opencl program 2"); /* 2: the source through kiln_cl_hash64 (1: FNV-1a 128) */
  kiln_cl_key_str(&k, KILN_CACHE_KILN_VERSION);
  /* the environment that changes what kiln generates (already visible in
     the source; keyed too so that an entry never crosses option sets) */
  kiln_cl_key_str(&k, getenv("KILN_FUSION"));
  kiln_cl_key_str(&k, getenv("KILN_CL_CONV"));
  kiln_cl_key_str(&k, getenv("KILN_CL_VEC"));
  kiln_cl_key_str(&k, getenv("KILN_CL_TILE"));
  kiln_cl_key_str(&k, getenv("KILN_CL_MATH"));
  kiln_cl_key_str(&k, getenv("KILN_CL_GEMM_EPILOGUE"));
  kiln_cl_key_str(&k, dev->platform_name);
  kiln_cl_key_str(&k, dev->name);
  kiln_cl_key_str(&k, dev->vendor);
  kiln_cl_key_str(&k, dev->version);
  kiln_cl_key_str(&k, dev->driver_version);
  kiln_cl_key_str(&k, options ? options : "");
  /* the source: its length and kiln_cl_hash64, as the graph records' long
     runs (FNV-1a 128 byte by byte cost 1.1 M instructions for the 38 KB of
     transformer's programs, the largest part of the key's time) */
  uint64_t h = kiln_cl_hash64(source, n);
  unsigned char b[16];
  for (int i = 0; i < 8; i++) {
    b[i] = (unsigned char)((uint64_t)n >> (8 * i));
    b[8 + i] = (unsigned char)(h >> (8 * i));
  }
  kiln_cl_key_bytes(&k, b, sizeof b);
  return k;
}

uint64_t kiln_cl_fnv1a64(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  return h;
}

/* ---- a fast 64-bit hash: 16 lanes of 8-byte words, one 32x32->64 multiply each ----
 *
 * The input is taken in 128-byte blocks, word j of a block going to lane j.
 * For word x of block b in lane j, with the position's key k = K0 + j*K1 +
 * b*K2 and y = x ^ k, the lane adds lo32(y) * hi32(y) + rotl(y, 32). The
 * words of a partial last block go to their lanes the same way, the lanes
 * are folded in order into the result (each fold step a bijection of the
 * lane's sum), then the last bytes (under 8) and the length.
 * - One flipped bit always changes its lane's sum. It flips the same bit of
 *   y; say bit k of lo32(y) goes up by 2^k (down: the same, negated): the
 *   product moves by 2^k * hi32(y) and the rotated y by 2^(k+32), both up,
 *   2^k * (hi32(y) + 2^32) in all, which is nonzero and under 2^64. Bit k
 *   of hi32(y): 2^k * lo32(y) + 2^k = 2^k * (lo32(y) + 1), likewise. Every
 *   fold step after it is a bijection. (Rotating x instead of y, a flip in
 *   the high half could cancel: where the key's bit is set, y's bit moves
 *   against x's, and lo32(y) = 1 gave the same sum. tests/opencl_cache
 *   checks inputs with y = 0 and y = 1 in every word.)
 * - The key depends on the block, so words moved between blocks change the
 *   sum (a sum of position-free terms would not see two blocks swapped).
 * - Vectorised it is AVX2's vpmuludq per four lanes (hash64_avx2) or
 *   AVX-512's per eight (hash64_avx512), picked at run time; the scalar
 *   twin computes the same value word by word.
 * Measured (27 MB, one thread, data not in cache; ENGINE.md "The bulk
 * hashes, vectorised"): the earlier 4-lane 64-bit multiply-rotate hash 3.3
 * GB/s, this one 8.7 GB/s, a plain load-and-add of the same bytes 8.7. */

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

#define HASH_K0 0x9e3779b185ebca87ULL
#define HASH_K1 0xc2b2ae3d27d4eb4fULL
#define HASH_K2 0x165667b19e3779f9ULL
#define HASH_LANES 16
#define HASH_BLOCK (8 * HASH_LANES)

static uint64_t lane_step(uint64_t acc, uint64_t x, uint64_t k) {
  uint64_t y = x ^ k;
  return acc + (y & 0xffffffffULL) * (y >> 32) + rotl(y, 32);
}

/* The lanes' start and the fold of everything after the whole blocks:
 * `words` more words (of block `b`), then the lanes, the tail bytes and n. */
static uint64_t hash_finish(uint64_t acc[HASH_LANES], const unsigned char *s, size_t n, uint64_t b) {
  size_t words = (n % HASH_BLOCK) / 8;
  const unsigned char *t = s + (n / HASH_BLOCK) * HASH_BLOCK;
  for (size_t j = 0; j < words; j++) {
    uint64_t x;
    memcpy(&x, t + 8 * j, 8);
    acc[j] = lane_step(acc[j], x, HASH_K0 + j * HASH_K1 + b * HASH_K2);
  }
  uint64_t r = HASH_K2 ^ (uint64_t)n;
  for (int j = 0; j < HASH_LANES; j++) r = rotl((r ^ acc[j]) * HASH_K0, 29) * HASH_K1;
  for (size_t i = (n / 8) * 8; i < n; i++) r = (r ^ s[i]) * 0x100000001b3ULL;
  r ^= (uint64_t)n;
  r ^= r >> 33;
  r *= HASH_K1;
  r ^= r >> 29;
  r *= HASH_K0;
  r ^= r >> 32;
  return r;
}

static void hash_start(uint64_t acc[HASH_LANES]) {
  for (int j = 0; j < HASH_LANES; j++) acc[j] = (uint64_t)(j + 1) * HASH_K1;
}

uint64_t kiln_cl_hash64_key(size_t word) {
  return HASH_K0 + (uint64_t)(word % HASH_LANES) * HASH_K1 + (uint64_t)(word / HASH_LANES) * HASH_K2;
}

uint64_t kiln_cl_hash64_base(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t acc[HASH_LANES];
  hash_start(acc);
  uint64_t b = 0;
  for (; (b + 1) * HASH_BLOCK <= n; b++)
    for (int j = 0; j < HASH_LANES; j++) {
      uint64_t x;
      memcpy(&x, s + b * HASH_BLOCK + 8 * (size_t)j, 8);
      acc[j] = lane_step(acc[j], x, HASH_K0 + (uint64_t)j * HASH_K1 + b * HASH_K2);
    }
  return hash_finish(acc, s, n, b);
}

#if KILN_CL_HASH_AVX2
#include <immintrin.h>

__attribute__((target("avx2"))) static uint64_t hash64_avx2(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t acc[HASH_LANES];
  hash_start(acc);
  __m256i a[4], k[4];
  const __m256i step = _mm256_set1_epi64x((long long)HASH_K2);
  for (int v = 0; v < 4; v++) {
    a[v] = _mm256_loadu_si256((const __m256i *)(acc + 4 * v));
    k[v] = _mm256_set_epi64x((long long)(HASH_K0 + (uint64_t)(4 * v + 3) * HASH_K1),
                             (long long)(HASH_K0 + (uint64_t)(4 * v + 2) * HASH_K1),
                             (long long)(HASH_K0 + (uint64_t)(4 * v + 1) * HASH_K1),
                             (long long)(HASH_K0 + (uint64_t)(4 * v) * HASH_K1));
  }
  uint64_t b = 0;
  for (; (b + 1) * HASH_BLOCK <= n; b++) {
    const unsigned char *t = s + b * HASH_BLOCK;
    for (int v = 0; v < 4; v++) {
      __m256i x = _mm256_loadu_si256((const __m256i *)(t + 32 * v));
      __m256i y = _mm256_xor_si256(x, k[v]);
      __m256i pr = _mm256_mul_epu32(y, _mm256_srli_epi64(y, 32));
      a[v] = _mm256_add_epi64(a[v], _mm256_add_epi64(pr, _mm256_shuffle_epi32(y, _MM_SHUFFLE(2, 3, 0, 1))));
      k[v] = _mm256_add_epi64(k[v], step);
    }
  }
  for (int v = 0; v < 4; v++) _mm256_storeu_si256((__m256i *)(acc + 4 * v), a[v]);
  return hash_finish(acc, s, n, b);
}

/* The same lanes eight to a 512-bit register: lanes 0-7 and 8-15, one
 * vpmuludq each per 128-byte block (half the instructions of AVX2's four
 * registers). Measured (51 MB, one thread, out of cache, ENGINE.md "The
 * bulk hash on AVX-512"): 2.4-2.9 ms with AVX2, 2.0-2.3 with this. */
__attribute__((target("avx512f"))) static uint64_t hash64_avx512(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t acc[HASH_LANES];
  hash_start(acc);
  __m512i a[2], k[2];
  const __m512i step = _mm512_set1_epi64((long long)HASH_K2);
  for (int v = 0; v < 2; v++) {
    uint64_t kv[8];
    for (int j = 0; j < 8; j++) kv[j] = HASH_K0 + (uint64_t)(8 * v + j) * HASH_K1;
    a[v] = _mm512_loadu_si512(acc + 8 * v);
    k[v] = _mm512_loadu_si512(kv);
  }
  uint64_t b = 0;
  for (; (b + 1) * HASH_BLOCK <= n; b++) {
    const unsigned char *t = s + b * HASH_BLOCK;
    for (int v = 0; v < 2; v++) {
      __m512i x = _mm512_loadu_si512(t + 64 * v);
      __m512i y = _mm512_xor_si512(x, k[v]);
      __m512i pr = _mm512_mul_epu32(y, _mm512_srli_epi64(y, 32));
      a[v] = _mm512_add_epi64(a[v], _mm512_add_epi64(pr, _mm512_shuffle_epi32(y, _MM_PERM_CDAB)));
      k[v] = _mm512_add_epi64(k[v], step);
    }
  }
  for (int v = 0; v < 2; v++) _mm512_storeu_si512(acc + 8 * v, a[v]);
  return hash_finish(acc, s, n, b);
}

/* The vector hashes the CPU and the OS offer, one bit each: 1 AVX2, 2
 * AVX-512F (each checked on its own: a VM may hide one and not the other;
 * libgcc's checks read XGETBV too: the OS saves the state). */
static int hash_isas(void) {
  static _Atomic int isas = -1; /* a documented cache: the CPU does not change */
  int w = atomic_load(&isas);
  if (w < 0) {
    __builtin_cpu_init();
    w = (__builtin_cpu_supports("avx2") ? 1 : 0) | (__builtin_cpu_supports("avx512f") ? 2 : 0);
    atomic_store(&isas, w);
  }
  return w;
}
#endif

bool kiln_cl_hash64_has_width(int width) {
#if KILN_CL_HASH_AVX2
  return (width == 256 && (hash_isas() & 1)) || (width == 512 && (hash_isas() & 2));
#else
  (void)width;
  return false;
#endif
}

uint64_t kiln_cl_hash64_width(int width, const void *p, size_t n) {
#if KILN_CL_HASH_AVX2
  if (width == 512 && (hash_isas() & 2)) return hash64_avx512(p, n);
  if (width == 256 && (hash_isas() & 1)) return hash64_avx2(p, n);
#else
  (void)width;
#endif
  return kiln_cl_hash64_base(p, n);
}

bool kiln_cl_hash64_has_vec(void) { return kiln_cl_hash64_has_width(256) || kiln_cl_hash64_has_width(512); }

uint64_t kiln_cl_hash64_vec(const void *p, size_t n) {
  return kiln_cl_hash64_width(kiln_cl_hash64_has_width(512) ? 512 : 256, p, n);
}

/* The vector form (AVX-512 or AVX2) from 1 MiB: below, the scalar twin. Measured (PoCL, ew_chain, warm
 * init, 24 alternated processes each): with AVX2 from 128 bytes the init
 * was 0.15 ms (6 %) slower, though its one 119 KB entry hashed faster —
 * likely the core's clock change for 256-bit multiplies, paid by the work
 * after it; from 1 MiB the same as the scalar hash (2.69 / 2.69 ms). */
#define HASH_VEC_MIN ((size_t)1 << 20)

uint64_t kiln_cl_hash64(const void *p, size_t n) {
  return n >= HASH_VEC_MIN ? kiln_cl_hash64_vec(p, n) : kiln_cl_hash64_base(p, n);
}

/* ---- the bulk digest: kiln_cl_hash64 per 4 MiB chunk, folded in order ---- */

#define DIGEST_CHUNK ((size_t)4 << 20)

typedef struct digest_job {
  const unsigned char *p;
  size_t n, chunks;
  uint64_t *d; /* one kiln_cl_hash64 per chunk */
  _Atomic size_t next;
} digest_job;

/* Hashes chunks until none is left (the init thread and the worker both run it). */
static void *digest_work(void *arg) {
  digest_job *j = arg;
  for (size_t c; (c = atomic_fetch_add(&j->next, 1)) < j->chunks;) {
    size_t at = c * DIGEST_CHUNK, len = j->n - at < DIGEST_CHUNK ? j->n - at : DIGEST_CHUNK;
    j->d[c] = kiln_cl_hash64(j->p + at, len);
  }
  return NULL;
}

/* One chunk's hash into the running digest: for a fixed r each step is a
 * bijection of h and for a fixed h one of r, so a changed chunk always
 * changes the result. */
static uint64_t digest_fold(uint64_t r, uint64_t h) {
  return rotl((r ^ h) * 0x9e3779b185ebca87ULL, 29) * 0xc2b2ae3d27d4eb4fULL;
}

uint64_t kiln_cl_digest64_threads(const void *p, size_t n, int threads) {
  if (n <= DIGEST_CHUNK) return kiln_cl_hash64(p, n);
  digest_job j = {.p = p, .n = n, .chunks = (n + DIGEST_CHUNK - 1) / DIGEST_CHUNK};
  atomic_init(&j.next, 0);
  uint64_t r = 0x27d4eb2f165667c5ULL ^ (uint64_t)n;
  j.d = threads > 1 ? kiln_malloc(j.chunks * sizeof *j.d) : NULL;
  if (!j.d) { /* one thread (asked for, or no room for the chunk hashes): the same fold, chunk by chunk */
    for (size_t c = 0; c < j.chunks; c++) {
      size_t at = c * DIGEST_CHUNK, len = n - at < DIGEST_CHUNK ? n - at : DIGEST_CHUNK;
      r = digest_fold(r, kiln_cl_hash64(j.p + at, len));
    }
    return kiln_cl_hash64(&r, sizeof r);
  }
  pthread_t t;
  bool helper = !pthread_create(&t, NULL, digest_work, &j); /* no thread: this one does every chunk */
  digest_work(&j);
  if (helper) pthread_join(t, NULL);
  for (size_t c = 0; c < j.chunks; c++) r = digest_fold(r, j.d[c]);
  kiln_free(j.d);
  return kiln_cl_hash64(&r, sizeof r);
}

uint64_t kiln_cl_digest64(const void *p, size_t n) {
  return kiln_cl_digest64_threads(p, n, n >= 2 * DIGEST_CHUNK ? 2 : 1);
}

/* ---- statistics and the warn-once state ---- */

static _Atomic uint64_t n_hits, n_misses, n_corrupt, n_writes, n_write_failures, n_warnings;
static pthread_mutex_t warn_mu = PTHREAD_MUTEX_INITIALIZER;
static char warned_dir[4096];

void kiln_cl_cache_stats_get(kiln_cl_cache_stats *out) {
  out->hits = atomic_load(&n_hits);
  out->misses = atomic_load(&n_misses);
  out->corrupt = atomic_load(&n_corrupt);
  out->writes = atomic_load(&n_writes);
  out->write_failures = atomic_load(&n_write_failures);
  out->warnings = atomic_load(&n_warnings);
}

/* Warns that dir cannot be used, once per directory in a row. */
static void warn_unwritable(const char *dir, const char *what, int err) {
  atomic_fetch_add(&n_write_failures, 1);
  pthread_mutex_lock(&warn_mu);
  bool fresh = strcmp(warned_dir, dir) != 0;
  if (fresh) snprintf(warned_dir, sizeof warned_dir, "%s", dir);
  pthread_mutex_unlock(&warn_mu);
  if (!fresh) return;
  atomic_fetch_add(&n_warnings, 1);
  kiln_log(KILN_LOG_WARN,
           "OpenCL cache directory %s is not usable (%s: %s); working without a cache (set KILN_CACHE_DIR to a "
           "writable directory)",
           dir, what, strerror(err));
}

/* ---- paths ---- */

bool kiln_cl_cache_enabled(void) {
  const char *v = getenv("KILN_CACHE_DIR");
  return !(v && (!*v || !strcmp(v, "off")));
}

bool kiln_cl_cache_dir(char *buf, size_t n) {
  const char *v = getenv("KILN_CACHE_DIR");
  int k;
  if (!kiln_cl_cache_enabled()) return false;
  if (v) k = snprintf(buf, n, "%s", v);
  else if ((v = getenv("XDG_CACHE_HOME")) && v[0] == '/') k = snprintf(buf, n, "%s/kiln", v);
  else if ((v = getenv("HOME")) && *v) k = snprintf(buf, n, "%s/.cache/kiln", v);
  else return false;
  return k > 0 && (size_t)k < n;
}

bool kiln_cl_cache_path(kiln_cl_key key, char *buf, size_t n) {
  char dir[4096], hex[33];
  if (!kiln_cl_cache_dir(dir, sizeof dir)) return false;
  kiln_cl_key_hex(key, hex);
  int k = snprintf(buf, n, "%s/%s.kc", dir, hex);
  return k > 0 && (size_t)k < n;
}

/* mkdir -p dir (mode 0700 for what it creates); 0 or an errno. */
static int make_dirs(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n >= sizeof p) return ENAMETOOLONG;
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != 0) continue;
    char c = p[i];
    p[i] = 0;
    if (mkdir(p, 0700) && errno != EEXIST) return errno;
    p[i] = c;
  }
  struct stat st;
  if (stat(dir, &st)) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* ---- entry format ---- */

#define HEADER_SIZE 48
#define FORMAT_VERSION 4 /* 4: kiln_cl_hash64 of 16 lanes (3: payload checksum kiln_cl_digest64 of the 4-lane hash;
                            2: kiln_cl_hash64, one thread; 1: FNV-1a 64) */
static const char magic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};

void kiln_cl_put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

uint64_t kiln_cl_get_u64(const unsigned char *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static bool read_all(int fd, void *buf, size_t n) {
  unsigned char *p = buf;
  while (n) {
    ssize_t k = read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= (size_t)k;
  }
  return true;
}

static bool write_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      return false;
    }
    p += k;
    n -= (size_t)k;
  }
  return true;
}

/* Counts, reports and deletes a damaged entry; returns false (a miss). */
static bool corrupt(const char *path, const char *why) {
  atomic_fetch_add(&n_corrupt, 1);
  atomic_fetch_add(&n_misses, 1);
  static atomic_bool warned;
  bool first = !atomic_exchange(&warned, true); /* a warning once per process, then info */
  if (first) atomic_fetch_add(&n_warnings, 1);
  kiln_log(first ? KILN_LOG_WARN : KILN_LOG_INFO, "kiln cache entry %s is %s; deleted, it will be rebuilt%s", path,
           why, first ? " (further damaged entries are reported at KILN_LOG=info)" : "");
  unlink(path);
  return false;
}

/* The checks an entry's header and size must pass (NULL: they pass, *n the
 * payload length). */
static const char *check_header(const unsigned char *h, uint64_t size, kiln_cl_key key, uint64_t *n) {
  if (memcmp(h, magic, sizeof magic)) return "not a kiln cache entry (bad magic)";
  if (kiln_cl_get_u64(h + 8) != FORMAT_VERSION) return "of another format version";
  if (kiln_cl_get_u64(h + 16) != key.hi || kiln_cl_get_u64(h + 24) != key.lo) return "stored under another key";
  if ((*n = kiln_cl_get_u64(h + 32)) != size - HEADER_SIZE)
    return *n > size - HEADER_SIZE ? "truncated" : "longer than its header says";
  if (*n > KILN_MAX_ALLOC) return "too large";
  return NULL;
}

/* Looks key up: an open entry file of at least a header (true), else a
 * miss counted (false). */
static bool open_entry(kiln_cl_key key, char *path, size_t np, int *fd, struct stat *st, const char **why) {
  *why = NULL;
  if (!kiln_cl_cache_path(key, path, np) || (*fd = open(path, O_RDONLY)) < 0) {
    atomic_fetch_add(&n_misses, 1);
    return false;
  }
  if (fstat(*fd, st) || !S_ISREG(st->st_mode)) *why = "not a regular file";
  else if ((uint64_t)st->st_size < HEADER_SIZE) *why = "truncated (no full header)";
  return true;
}

bool kiln_cl_cache_get(kiln_cl_key key, void **bytes, size_t *len) {
  char path[4200];
  *bytes = NULL;
  *len = 0;
  int fd;
  struct stat st;
  const char *why;
  if (!open_entry(key, path, sizeof path, &fd, &st, &why)) return false;
  unsigned char h[HEADER_SIZE];
  void *payload = NULL;
  uint64_t n = 0;
  if (!why && !read_all(fd, h, sizeof h)) why = "truncated (no full header)";
  if (!why) why = check_header(h, (uint64_t)st.st_size, key, &n);
  if (!why) {
    payload = kiln_malloc((size_t)n);
    if (!payload) { /* not the entry's fault */
      close(fd);
      atomic_fetch_add(&n_misses, 1);
      return false;
    }
    if (!read_all(fd, payload, (size_t)n)) why = "truncated (short read)";
    else if (kiln_cl_digest64(payload, (size_t)n) != kiln_cl_get_u64(h + 40)) why = "corrupt (payload checksum differs)";
  }
  close(fd);
  if (why) {
    kiln_free(payload);
    return corrupt(path, why);
  }
  atomic_fetch_add(&n_hits, 1);
  *bytes = payload;
  *len = (size_t)n;
  return true;
}

bool kiln_cl_cache_map(kiln_cl_key key, kiln_cl_cache_view *view) {
  char path[4200];
  memset(view, 0, sizeof *view);
  int fd;
  struct stat st;
  const char *why;
  if (!open_entry(key, path, sizeof path, &fd, &st, &why)) return false;
  uint64_t n = 0;
  unsigned char *m = MAP_FAILED;
  if (!why && (off_t)(size_t)st.st_size == st.st_size)
    m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd); /* the mapping keeps the file */
  if (!why && m == MAP_FAILED) { /* a file system without mmap, no address space: read it */
    void *b;
    size_t len;
    if (!kiln_cl_cache_get(key, &b, &len)) return false;
    view->bytes = b;
    view->len = len;
    return true;
  }
  if (!why) why = check_header(m, (uint64_t)st.st_size, key, &n);
  if (!why && kiln_cl_digest64(m + HEADER_SIZE, (size_t)n) != kiln_cl_get_u64(m + 40))
    why = "corrupt (payload checksum differs)";
  if (why) {
    if (m != MAP_FAILED) munmap(m, (size_t)st.st_size);
    return corrupt(path, why);
  }
  atomic_fetch_add(&n_hits, 1);
  view->bytes = m + HEADER_SIZE;
  view->len = (size_t)n;
  view->map = m;
  view->map_len = (size_t)st.st_size;
  return true;
}

void kiln_cl_cache_view_release(kiln_cl_cache_view *view) {
  if (view->map) munmap(view->map, view->map_len);
  else kiln_free(view->bytes);
  memset(view, 0, sizeof *view);
}

bool kiln_cl_cache_put(kiln_cl_key key, const void *bytes, size_t len) {
  static _Atomic unsigned counter;
  char dir[4096], path[4200], tmp[4200], hex[33];
  if (!kiln_cl_cache_enabled()) return false; /* turned off: not a failure */
  if (!kiln_cl_cache_dir(dir, sizeof dir)) {
    atomic_fetch_add(&n_write_failures, 1);
    return false;
  }
  int err = make_dirs(dir);
  if (err) {
    warn_unwritable(dir, "creating it", err);
    return false;
  }
  kiln_cl_key_hex(key, hex);
  snprintf(path, sizeof path, "%s/%s.kc", dir, hex);
  snprintf(tmp, sizeof tmp, "%s/.%s.%ld.%u.tmp", dir, hex, (long)getpid(), atomic_fetch_add(&counter, 1));
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) {
    warn_unwritable(dir, "creating a file in it", errno);
    return false;
  }
  unsigned char h[HEADER_SIZE];
  memcpy(h, magic, sizeof magic);
  kiln_cl_put_u64(h + 8, FORMAT_VERSION);
  kiln_cl_put_u64(h + 16, key.hi);
  kiln_cl_put_u64(h + 24, key.lo);
  kiln_cl_put_u64(h + 32, (uint64_t)len);
  kiln_cl_put_u64(h + 40, kiln_cl_digest64(bytes, len));
  bool ok = write_all(fd, h, sizeof h) && write_all(fd, bytes, len);
  err = ok ? 0 : errno;
  if (close(fd) && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(tmp, path)) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp);
    warn_unwritable(dir, "writing an entry", err);
    return false;
  }
  atomic_fetch_add(&n_writes, 1);
  return true;
}
