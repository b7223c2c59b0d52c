/* plugin/fault: the fault-injection build's counters, its exported
 * kilnFault* functions and the wrappers of kiln's allocator (linked with
 * -Wl,--wrap=kiln_malloc,... into libonnxifi-kiln-fault.so only; see
 * plugin/fault.h). Every allocation kiln makes goes through ir/alloc, and
 * protobuf-c's go there too (ir/onnx_import's allocator), so failing the
 * Nth call of these wrappers fails the Nth allocation of the plugin. The
 * cache's write() is wrapped too (KILN_FAULT_DISK_FULL). */
#include "plugin/fault.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/types.h>

#include "plugin/fault_int.h"

#define EXPORT __attribute__((visibility("default")))

typedef struct fault_state {
  atomic_long target, calls, hits;
  atomic_int persistent;
  _Atomic(const char *) point;
} fault_state;

static fault_state states[KILN_FAULT_KINDS];
static atomic_long lives[KILN_FAULT_LIVES];

bool kiln_fault_hit(int kind, const char *what) {
  fault_state *f = &states[kind];
  long t = atomic_load_explicit(&f->target, memory_order_relaxed);
  if (t <= 0) return false;
  long c = atomic_fetch_add(&f->calls, 1) + 1;
  if (c != t && !(c > t && atomic_load(&f->persistent))) return false;
  atomic_fetch_add(&f->hits, 1);
  atomic_store(&f->point, what);
  return true;
}

void kiln_fault_live(int what, long delta) { atomic_fetch_add(&lives[what], delta); }

EXPORT void kilnFaultArm(int kind, long n, int persistent) {
  if (kind < 0 || kind >= KILN_FAULT_KINDS) return;
  fault_state *f = &states[kind];
  atomic_store(&f->target, 0);
  atomic_store(&f->calls, 0);
  atomic_store(&f->hits, 0);
  atomic_store(&f->point, "");
  atomic_store(&f->persistent, persistent != 0);
  atomic_store(&f->target, n > 0 ? n : 0);
}

EXPORT long kilnFaultCalls(int kind) {
  return kind >= 0 && kind < KILN_FAULT_KINDS ? atomic_load(&states[kind].calls) : 0;
}

EXPORT long kilnFaultHits(int kind) {
  return kind >= 0 && kind < KILN_FAULT_KINDS ? atomic_load(&states[kind].hits) : 0;
}

EXPORT const char *kilnFaultPoint(int kind) {
  const char *p = kind >= 0 && kind < KILN_FAULT_KINDS ? atomic_load(&states[kind].point) : NULL;
  return p ? p : "";
}

EXPORT long kilnFaultLive(int what) { return what >= 0 && what < KILN_FAULT_LIVES ? atomic_load(&lives[what]) : 0; }

/* ---- kiln's allocator (ir/alloc.h) ---- */

void *__real_kiln_malloc(size_t n);
void *__real_kiln_calloc(size_t count, size_t size);
void *__real_kiln_realloc(void *p, size_t n);
void __real_kiln_free(void *p);
char *__real_kiln_strdup(const char *s);
char *__real_kiln_strndup(const char *s, size_t n);
void *__wrap_kiln_malloc(size_t n);
void *__wrap_kiln_calloc(size_t count, size_t size);
void *__wrap_kiln_realloc(void *p, size_t n);
void __wrap_kiln_free(void *p);
char *__wrap_kiln_strdup(const char *s);
char *__wrap_kiln_strndup(const char *s, size_t n);

static void *counted(void *p) {
  if (p) kiln_fault_live(KILN_FAULT_LIVE_HEAP, 1);
  return p;
}

void *__wrap_kiln_malloc(size_t n) {
  return kiln_fault_hit(KILN_FAULT_ALLOC, "kiln_malloc") ? NULL : counted(__real_kiln_malloc(n));
}

void *__wrap_kiln_calloc(size_t count, size_t size) {
  return kiln_fault_hit(KILN_FAULT_ALLOC, "kiln_calloc") ? NULL : counted(__real_kiln_calloc(count, size));
}

void *__wrap_kiln_realloc(void *p, size_t n) {
  if (kiln_fault_hit(KILN_FAULT_ALLOC, "kiln_realloc")) return NULL; /* p stays valid, as realloc leaves it */
  void *q = __real_kiln_realloc(p, n);
  return p ? q : counted(q);
}

void __wrap_kiln_free(void *p) {
  if (p) kiln_fault_live(KILN_FAULT_LIVE_HEAP, -1);
  __real_kiln_free(p);
}

char *__wrap_kiln_strdup(const char *s) {
  if (!s) return NULL;
  return kiln_fault_hit(KILN_FAULT_ALLOC, "kiln_strdup") ? NULL : counted(__real_kiln_strdup(s));
}

char *__wrap_kiln_strndup(const char *s, size_t n) {
  return kiln_fault_hit(KILN_FAULT_ALLOC, "kiln_strndup") ? NULL : counted(__real_kiln_strndup(s, n));
}

/* ---- a full disk (the kiln cache's writes; tests/fault_cache.sh) ---- */

ssize_t __real_write(int fd, const void *buf, size_t n);
ssize_t __wrap_write(int fd, const void *buf, size_t n);

/* KILN_FAULT_DISK_FULL=1: every write() kiln makes fails with ENOSPC. */
ssize_t __wrap_write(int fd, const void *buf, size_t n) {
  const char *e = getenv("KILN_FAULT_DISK_FULL");
  if (e && *e == '1') {
    errno = ENOSPC;
    return -1;
  }
  return __real_write(fd, buf, n);
}
