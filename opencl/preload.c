/* opencl/preload: a warm init's programs loaded ahead (preload.h). */
#include "opencl/preload.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ir/alloc.h"
#include "ir/status.h"

#define LIST_TAG "KILNPL01" /* the entry: the tag, a count, then per program its key (hi, lo), little-endian */
#define LIST_MAX 256        /* more programs than any plan makes (rusticl cuts at 32 KiB of source) */

enum { WAITING, LOADING, DONE, SKIPPED }; /* SKIPPED: asked for before a thread took it (the caller loads it) */

typedef struct entry {
  kiln_cl_key key;
  cl_program loaded; /* the program loaded (NULL: none), the entry's until taken; the kernels made
                        ahead for it that no one took are dropped at the finish */
  int kernels;       /* made ahead for it (and handed to the context) */
  int kernels_waited; /* ... of them, asked for while being made (the caller waited) */
  int state;
  bool taken;
  bool waited; /* its take found it loading and waited */
} entry;

struct kiln_cl_preload {
  kiln_cl_context *ctx;
  kiln_cl_key key; /* the list's */
  entry *e;        /* the list read (n of them) */
  int n, next;     /* next: the first entry no thread has claimed */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th[2];
  int n_th;
  bool sync;          /* KILN_CL_PRELOAD=sync: loaded on the init's thread (its last error kept) */
  bool hold;          /* KILN_CL_PRELOAD=hold: each thread claims an entry before the start returns and loads it
                         only once some take has begun (or the finish), so that take waits for a load */
  int claimed;        /* hold: entries claimed (LOADING or later) */
  bool kernels_released; /* hold: the first kernel made ahead of a program is held being made until a
                            kiln_cl_kernel_create waits for it, or until this is set (under the context's mutex) */
  bool taking, finishing;
  bool kernels_ahead; /* the loading thread makes the programs' kernels too (one loading thread at most) */
  kiln_cl_key *noted; /* the keys this init used, in order */
  int n_noted;
};

kiln_cl_key kiln_cl_preload_key(const kiln_cl_device *dev, const kiln_cl_key *graph_key, int mode) {
  /* what kiln_cl_program_key hashes besides the source (version, switches, device, driver): its key of no source */
  kiln_cl_key dk = kiln_cl_program_key(dev, "", 0, KILN_CL_PROGRAM_OPTIONS), k;
  kiln_cl_key_init(&k);
  kiln_cl_key_str(&k, "kiln program list 1");
  unsigned char b[40];
  kiln_cl_put_u64(b, dk.hi);
  kiln_cl_put_u64(b + 8, dk.lo);
  kiln_cl_put_u64(b + 16, graph_key->hi);
  kiln_cl_put_u64(b + 24, graph_key->lo);
  kiln_cl_put_u64(b + 32, (uint64_t)(int64_t)mode);
  kiln_cl_key_bytes(&k, b, sizeof b);
  return k;
}

static bool same_key(kiln_cl_key a, kiln_cl_key b) { return a.hi == b.hi && a.lo == b.lo; }

/* One loading thread: claims entries in order until none is left. */
static void *load_work(void *arg) {
  kiln_cl_preload *pl = arg;
  for (;;) {
    pthread_mutex_lock(&pl->mu);
    while (pl->next < pl->n && pl->e[pl->next].state != WAITING) pl->next++;
    int i = pl->next < pl->n ? pl->next++ : -1;
    if (i >= 0) pl->e[i].state = LOADING;
    if (pl->hold) { /* tests: the claim seen by the start, the load held until a take has begun */
      pl->claimed += i >= 0;
      pthread_cond_broadcast(&pl->cv);
      while (i >= 0 && !pl->taking && !pl->finishing) pthread_cond_wait(&pl->cv, &pl->mu);
    }
    pthread_mutex_unlock(&pl->mu);
    if (i < 0) break;
    kiln_cl_key k = pl->e[i].key;
    cl_program prog = NULL;
    bool on_disk;
    void *bin = NULL;
    size_t blen = 0;
    if (kiln_cl_context_program_get(pl->ctx, k.hi, k.lo, &prog, &on_disk)) { /* kept in this process: get_program's */
      kiln_cl_program_free(prog);
      prog = NULL;
    } else if (kiln_cl_cache_get(k, &bin, &blen)) {
      if (kiln_cl_program_from_binary(pl->ctx, bin, blen, KILN_CL_PROGRAM_OPTIONS, &prog))
        prog = NULL; /* get_program builds it */
      kiln_free(bin);
    }
    /* its kernels too (rusticl converts and optimises each one's code at
       clCreateKernel), after the program is handed over: queued first, so
       that kiln_cl_kernel_create waits for one being made, takes one made,
       and makes one not yet started itself; those no one takes are dropped
       at the finish. A failure only means the caller makes them. */
    /* (hold: the first one held being made until the lowering waits for it) */
    int queued = prog && pl->kernels_ahead ? kiln_cl_context_kernels_queue(pl->ctx, prog, pl->hold) : 0;
    /* a reference of this thread's own while it makes them, taken before the
       handover: the caller may take the program and, failing, release it */
    bool held = queued && clRetainProgram(prog) == CL_SUCCESS;
    if (queued && !held) kiln_cl_context_kernels_drop(pl->ctx, prog); /* none made here (nor one held) */
    if (!pl->sync) kiln_error_clear(); /* this thread's: a refused binary is get_program's to report */
    pthread_mutex_lock(&pl->mu);
    pl->e[i].loaded = prog;
    pl->e[i].state = DONE;
    pthread_cond_broadcast(&pl->cv);
    pthread_mutex_unlock(&pl->mu);
    int made = 0, waited = 0;
    if (held) { /* (not held: the queued ones are made by whoever asks) */
      made = kiln_cl_context_kernels_make(pl->ctx, prog, &pl->kernels_released, &waited);
      kiln_cl_program_free(prog);
    }
    if (!pl->sync) kiln_error_clear();
    pthread_mutex_lock(&pl->mu);
    pl->e[i].kernels = made;
    pl->e[i].kernels_waited = waited;
    pthread_mutex_unlock(&pl->mu);
  }
  return NULL;
}

/* The list under pl->key into pl->e (none: n 0; a damaged one is no list). */
static void read_list(kiln_cl_preload *pl) {
  void *buf = NULL;
  size_t len = 0;
  if (!kiln_cl_cache_get(pl->key, &buf, &len)) return;
  const unsigned char *b = buf;
  uint64_t n = len >= 16 && !memcmp(b, LIST_TAG, 8) ? kiln_cl_get_u64(b + 8) : 0;
  if (n && n <= LIST_MAX && len == 16 + 16 * n && (pl->e = kiln_calloc(n, sizeof *pl->e))) {
    pl->n = (int)n;
    for (int i = 0; i < pl->n; i++) {
      const unsigned char *q = b + 16 + 16 * (size_t)i;
      pl->e[i] = (entry){.key = {kiln_cl_get_u64(q), kiln_cl_get_u64(q + 8)}, .state = WAITING};
    }
  }
  kiln_free(buf);
}

/* KILN_CL_PRELOAD: off (0, or no device binaries, or no kiln cache), on, or a test mode (sync, hold) */
enum { MODE_OFF, MODE_ON, MODE_SYNC, MODE_HOLD };
static int preload_mode(void) {
  const char *e = getenv("KILN_CL_PRELOAD"), *b = getenv("KILN_CL_BINARY_CACHE");
  if ((e && !strcmp(e, "0")) || (b && !strcmp(b, "0")) || !kiln_cl_cache_enabled()) return MODE_OFF;
  return !e ? MODE_ON : !strcmp(e, "sync") ? MODE_SYNC : !strcmp(e, "hold") ? MODE_HOLD : MODE_ON;
}

kiln_cl_preload *kiln_cl_preload_start(kiln_cl_context *ctx, kiln_cl_key key) {
  int mode = ctx ? preload_mode() : MODE_OFF;
  if (mode == MODE_OFF) return NULL;
  kiln_cl_preload *pl = kiln_calloc(1, sizeof *pl);
  if (!pl) return NULL;
  pl->ctx = ctx;
  pl->key = key;
  if (pthread_mutex_init(&pl->mu, NULL)) {
    kiln_free(pl);
    return NULL;
  }
  if (pthread_cond_init(&pl->cv, NULL)) {
    pthread_mutex_destroy(&pl->mu);
    kiln_free(pl);
    return NULL;
  }
  read_list(pl);
  pl->hold = mode == MODE_HOLD;
  if (mode == MODE_SYNC) { /* for tests: every program loaded before this returns (no race with get_program) */
    pl->sync = pl->kernels_ahead = true;
    load_work(pl);
    return pl;
  }
  /* two threads at most, one on a single core (the init's own thread lowers
     meanwhile). The kernels too where one thread loads (one program, or one
     core): with two loading threads beside the lowering the three
     oversubscribed two cores and the transformer's warm init on rusticl was
     slower with its kernels made ahead (3.28 against 2.94 ms median, 16
     alternated processes), while embedding_bag's one program gained (7.59
     -> 7.14 ms; opencl/ENGINE.md "Programs loaded ahead") */
  int threads = sysconf(_SC_NPROCESSORS_ONLN) > 1 ? 2 : 1;
  pl->kernels_ahead = threads == 1 || pl->n == 1;
  for (int t = 0; t < threads && t < pl->n; t++)
    if (!pthread_create(&pl->th[pl->n_th], NULL, load_work, pl)) pl->n_th++;
  if (pl->hold) { /* each thread holds one */
    pthread_mutex_lock(&pl->mu);
    while (pl->claimed < pl->n_th) pthread_cond_wait(&pl->cv, &pl->mu);
    pthread_mutex_unlock(&pl->mu);
  }
  if (!pl->n_th)
    for (int i = 0; i < pl->n; i++) pl->e[i].state = SKIPPED; /* no thread: get_program loads them */
  return pl;
}

bool kiln_cl_preload_take(kiln_cl_preload *pl, kiln_cl_key key, cl_program *prog) {
  *prog = NULL;
  if (!pl) return false;
  pthread_mutex_lock(&pl->mu);
  if (pl->hold && !pl->taking) { /* the held loads go on */
    pl->taking = true;
    pthread_cond_broadcast(&pl->cv);
  }
  for (int i = 0; i < pl->n; i++) {
    entry *e = &pl->e[i];
    if (!same_key(e->key, key) || e->taken) continue;
    if (e->state == WAITING) e->state = SKIPPED; /* no thread has it yet: the caller is as quick */
    e->waited = e->state == LOADING;
    while (e->state == LOADING) pthread_cond_wait(&pl->cv, &pl->mu);
    if (e->state == DONE && e->loaded) {
      *prog = e->loaded;
      e->taken = true;
      break;
    }
  }
  pthread_mutex_unlock(&pl->mu);
  return *prog != NULL;
}

void kiln_cl_preload_note(kiln_cl_preload *pl, const kiln_cl_key *keys, int n) {
  if (!pl || n <= 0) return;
  kiln_cl_key *q = kiln_realloc(pl->noted, sizeof *q * (size_t)(pl->n_noted + n));
  if (!q) return;
  pl->noted = q;
  memcpy(pl->noted + pl->n_noted, keys, sizeof *keys * (size_t)n);
  pl->n_noted += n;
}

/* Writes the noted keys as the list (when they are not the list read). */
static void write_list(const kiln_cl_preload *pl) {
  int n = pl->n_noted < LIST_MAX ? pl->n_noted : LIST_MAX; /* more: the first LIST_MAX, still a hint */
  if (!n) return;
  bool same = n == pl->n;
  for (int i = 0; same && i < pl->n; i++) same = same_key(pl->noted[i], pl->e[i].key);
  if (same) return;
  size_t len = 16 + 16 * (size_t)n;
  unsigned char *b = kiln_malloc(len);
  if (!b) return;
  memcpy(b, LIST_TAG, 8);
  kiln_cl_put_u64(b + 8, (uint64_t)n);
  for (int i = 0; i < n; i++) {
    kiln_cl_put_u64(b + 16 + 16 * (size_t)i, pl->noted[i].hi);
    kiln_cl_put_u64(b + 24 + 16 * (size_t)i, pl->noted[i].lo);
  }
  kiln_cl_cache_put(pl->key, b, len);
  kiln_free(b);
}

void kiln_cl_preload_finish(kiln_cl_preload *pl, kiln_cl_preload_counts *n) {
  if (n) memset(n, 0, sizeof *n);
  if (!pl) return;
  pthread_mutex_lock(&pl->mu);
  pl->finishing = true; /* hold: loads no take released go on */
  pthread_cond_broadcast(&pl->cv);
  pthread_mutex_unlock(&pl->mu);
  if (pl->hold) kiln_cl_context_kernels_release(pl->ctx, &pl->kernels_released); /* kernels no one asked for */
  for (int t = 0; t < pl->n_th; t++) pthread_join(pl->th[t], NULL);
  kiln_cl_preload_counts c = {0};
  for (int i = 0; i < pl->n; i++) {
    entry *e = &pl->e[i];
    c.loaded += e->loaded != NULL;
    c.used += e->taken;
    c.skipped += e->state == SKIPPED;
    c.waited += e->waited;
    c.kernels += e->kernels;
    c.kernels_waited += e->kernels_waited;
    c.kernels_used += e->kernels - (e->loaded ? kiln_cl_context_kernels_drop(pl->ctx, e->loaded) : 0);
    if (!e->taken) kiln_cl_program_free(e->loaded); /* loaded, not asked for */
  }
  if (n) *n = c;
  write_list(pl);
  pthread_cond_destroy(&pl->cv);
  pthread_mutex_destroy(&pl->mu);
  kiln_free(pl->e);
  kiln_free(pl->noted);
  kiln_free(pl);
}
