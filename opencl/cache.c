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
  kiln_cl_key_str(&k, "kiln opencl program 1");
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
  kiln_cl_key_field(&k, source, n);
  return k;
}

uint64_t kiln_cl_fnv1a64(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ULL;
  return h;
}

/* ---- a fast 64-bit hash (4 independent multiply-rotate lanes over 8-byte words) ---- */

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t kiln_cl_hash64(const void *p, size_t n) {
  const uint64_t m1 = 0x9e3779b185ebca87ULL, m2 = 0xc2b2ae3d27d4eb4fULL;
  uint64_t h[4] = {m1 + m2, m2, 0, 0 - m1};
  const unsigned char *s = p;
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; l++) {
      uint64_t w;
      memcpy(&w, s + i + 8 * l, 8);
      h[l] = rotl(h[l] + w * m2, 31) * m1;
    }
  uint64_t r = rotl(h[0], 1) + rotl(h[1], 7) + rotl(h[2], 12) + rotl(h[3], 18);
  for (; i < n; i++) r = (r ^ s[i]) * 0x100000001b3ULL;
  r ^= (uint64_t)n;
  r ^= r >> 33;
  r *= m2;
  r ^= r >> 29;
  return r;
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
#define FORMAT_VERSION 3 /* 3: payload checksum kiln_cl_digest64 (2: kiln_cl_hash64, one thread; 1: FNV-1a 64) */
static const char magic[8] = {'K', 'I', 'L', 'N', 'C', 'A', 'C', 'H'};

static void put_u64(unsigned char *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u64(const unsigned char *p) {
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
  if (get_u64(h + 8) != FORMAT_VERSION) return "of another format version";
  if (get_u64(h + 16) != key.hi || get_u64(h + 24) != key.lo) return "stored under another key";
  if ((*n = get_u64(h + 32)) != size - HEADER_SIZE)
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
    else if (kiln_cl_digest64(payload, (size_t)n) != get_u64(h + 40)) why = "corrupt (payload checksum differs)";
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
  if (!why && kiln_cl_digest64(m + HEADER_SIZE, (size_t)n) != get_u64(m + 40))
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
  put_u64(h + 8, FORMAT_VERSION);
  put_u64(h + 16, key.hi);
  put_u64(h + 24, key.lo);
  put_u64(h + 32, (uint64_t)len);
  put_u64(h + 40, kiln_cl_digest64(bytes, len));
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
