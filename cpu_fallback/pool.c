/* cpu_fallback/pool: the process's thread pool, a reference-counted cache
 * (see pool.h). */
#include "cpu_fallback/pool.h"

#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ir/alloc.h"

/* ---- the thread count ---- */

static pthread_once_t threads_once = PTHREAD_ONCE_INIT;
static int n_threads = 1;

static void read_threads(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  n_threads = online < 1 ? 1 : online > 1024 ? 1024 : (int)online;
  const char *env = getenv("KILN_NUM_THREADS");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 1 || v > 1024)
      fprintf(stderr, "kiln[warn]: KILN_NUM_THREADS=%s is not an integer in [1, 1024]: using %d (online CPUs)\n",
              env, n_threads);
    else
      n_threads = (int)v;
  }
}

int kiln_cpu_num_threads(void) {
  pthread_once(&threads_once, read_threads);
  return n_threads;
}

/* Not with the count itself: openblas_set_num_threads(n > 1) starts
 * OpenBLAS's server threads, and each spins on sched_yield for ~2^28
 * cycles (its THREAD_TIMEOUT, ~0.1 s here) before it sleeps. Set when the
 * count was read, that spinning took a core from kiln's own pool for the
 * first ~0.1 s after a graph was made — on AVX-512 machines, where kiln
 * never calls OpenBLAS (bench/README.md, "Two threads on a shared
 * machine": transformer at 2 threads 1.1-1.2 ms a run instead of 0.65-0.7
 * for the first 40-60 runs). */
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void set_blas_threads(void) { openblas_set_num_threads(kiln_cpu_num_threads()); }

void kiln_cpu_blas_threads(void) { pthread_once(&blas_once, set_blas_threads); }

/* ---- the pool ---- */

typedef struct pool pool;
typedef struct worker {
  pool *p;
  int id;
} worker;

/* A loop, on its caller's stack. Workers find it through pool.cur and
 * join it without a lock (below); the caller, once it has claimed the last
 * task itself, waits for the workers still running tasks — never for one
 * that has not woken up yet (on a loaded machine that can take
 * milliseconds). */
typedef struct loop {
  kiln_pool_fn fn;
  void *ctx;
  int64_t n_tasks;
  int workers; /* threads with an id below this take tasks */
  unsigned long gen; /* the pool's gen while it is open */
  atomic_llong next; /* tasks claimed, where there are no ranges */
  atomic_ullong *ranges; /* shares: per thread id below workers its share's next task (low 32 bits) and end; or NULL */
} loop;

/* Joining and leaving a loop take no lock: with a mutex taken twice per
 * worker per loop, a loop of 16 tasks of 2 us each took 26 us on 16 threads
 * against 6 us for threads that only poll counters (tools/gemm-conv-bench
 * "pool", a 16-core Xeon; every mobilenetv2 step cost 40 us or more there,
 * some more than at 1 thread). The protocol (the accesses it rests on
 * sequentially consistent):
 * - the caller publishes cur, then gen; it takes the mutex only when a
 *   worker sleeps (sleepers > 0, counted under the mutex before the worker's
 *   last look at gen), so no wake-up is lost;
 * - a worker that saw a new gen counts itself in active, then reads cur,
 *   and runs tasks only of a loop whose gen it saw;
 * - the caller, done with the tasks, clears cur, then waits for active to be
 *   0: a worker that read the loop from cur counted itself in before the
 *   caller cleared it, so the caller waits for it, and the loop on its stack
 *   outlives every worker that reads it. waiting (set under the mutex) says
 *   the caller sleeps on done. */
struct pool {
  int n; /* threads of a loop, the caller included */
  pthread_t *th;
  worker *w;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  atomic_ulong gen; /* loops started (spinning workers poll it) */
  atomic_bool stop;
  _Atomic(loop *) cur; /* the open loop, or NULL */
  atomic_int active; /* workers between their look at cur and their leaving */
  atomic_int sleepers; /* workers blocked on go (or about to be) */
  atomic_bool waiting; /* the caller blocked on done (or about to be) */
  atomic_ullong *ranges; /* n: the shares of the open loop (one loop at a time) */
};

static pthread_mutex_t reg = PTHREAD_MUTEX_INITIALIZER; /* guards the two below */
static pool *the_pool;
static int refs;
static pthread_mutex_t one_loop = PTHREAD_MUTEX_INITIALIZER; /* held by the thread running a loop on the pool */

/* Spin-then-block. Waking a thread blocked on a condition variable took
 * ~20 us here (2-core VM; a loop of 8 tasks of 7 us each on 2 threads took
 * as long as on one), the length of a small network's steps, and the plan
 * executor starts the next step's loop a few microseconds after the last
 * one ends. So a worker that finished a loop polls for the next one for up
 * to KILN_POOL_SPIN_NS before it blocks, and the caller polls as long for
 * the workers still inside its loop. The poll yields the core (sched_yield)
 * instead of pausing on it: on a machine with more runnable threads than
 * cores a pausing spinner took the core from the thread it waited for
 * (MobileNetV2 and small_cnn at 2 threads, kiln/onnxruntime: pausing
 * worse than blocking at once, yielding better; GEMM_CONV.md "Two
 * threads"). The clock is read every 4 polls. */
#define KILN_POOL_SPIN_NS 50000

static int64_t mono_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Polls until done(arg) or KILN_POOL_SPIN_NS have passed; returns done(arg). */
static bool spin_until(bool (*done)(const void *), const void *arg) {
  int64_t t0 = 0;
  for (unsigned i = 0;; i++) {
    if (done(arg)) return true;
    if (i % 4 == 3) {
      int64_t t = mono_ns();
      if (!t0) t0 = t;
      else if (t - t0 > KILN_POOL_SPIN_NS) return false;
    }
    sched_yield();
  }
}

typedef struct gen_wait {
  const pool *p;
  unsigned long seen;
} gen_wait;

static bool new_loop(const void *arg) {
  const gen_wait *g = arg;
  return atomic_load_explicit(&g->p->gen, memory_order_acquire) != g->seen ||
         atomic_load_explicit(&g->p->stop, memory_order_relaxed);
}

static bool loop_left(const void *arg) { return atomic_load(&((const pool *)arg)->active) == 0; }

/* Without shares: one counter, tasks claimed in order. With shares:
 * thread id's own share first, from its front; then, thread by thread,
 * what is left of the others' shares, each from its back (the task its
 * owner would reach last). */
static void take_tasks(loop *l, int id) {
  if (!l->ranges) {
    for (;;) {
      long long t = atomic_fetch_add(&l->next, 1);
      if (t >= l->n_tasks) break;
      l->fn(l->ctx, (int64_t)t, id);
    }
    return;
  }
  for (int k = 0; k < l->workers; k++) {
    atomic_ullong *r = &l->ranges[(id + k) % l->workers];
    unsigned long long v = atomic_load_explicit(r, memory_order_relaxed);
    for (;;) {
      unsigned long long next = v & 0xffffffffu, end = v >> 32;
      if (next >= end) break;
      unsigned long long to = k == 0 ? v + 1 : v - (1ull << 32);
      if (!atomic_compare_exchange_weak(r, &v, to)) continue;
      l->fn(l->ctx, (int64_t)(k == 0 ? next : end - 1), id);
      v = atomic_load_explicit(r, memory_order_relaxed);
    }
  }
}

static void *worker_main(void *arg) {
  worker *w = arg;
  pool *p = w->p;
  unsigned long seen = 0;
  for (;;) {
    gen_wait gw = {p, seen};
    if (!spin_until(new_loop, &gw)) { /* poll a while before blocking */
      pthread_mutex_lock(&p->mu);
      atomic_fetch_add(&p->sleepers, 1);
      while (!atomic_load(&p->stop) && atomic_load(&p->gen) == seen) pthread_cond_wait(&p->go, &p->mu);
      atomic_fetch_sub(&p->sleepers, 1);
      pthread_mutex_unlock(&p->mu);
    }
    if (atomic_load(&p->stop)) break;
    seen = atomic_load(&p->gen);
    atomic_fetch_add(&p->active, 1);
    loop *l = atomic_load(&p->cur);
    if (l && l->gen == seen && w->id < l->workers) take_tasks(l, w->id);
    if (atomic_fetch_sub(&p->active, 1) == 1 && atomic_load(&p->waiting)) {
      pthread_mutex_lock(&p->mu);
      pthread_cond_signal(&p->done);
      pthread_mutex_unlock(&p->mu);
    }
  }
  return NULL;
}

static void pool_stop(pool *p, int started) {
  pthread_mutex_lock(&p->mu);
  atomic_store(&p->stop, true);
  pthread_cond_broadcast(&p->go);
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < started; i++) pthread_join(p->th[i], NULL);
  pthread_cond_destroy(&p->go);
  pthread_cond_destroy(&p->done);
  pthread_mutex_destroy(&p->mu);
  kiln_free(p->th);
  kiln_free(p->w);
  kiln_free(p->ranges);
  kiln_free(p);
}

static pool *pool_start(int n) {
  pool *p = kiln_calloc(1, sizeof *p);
  if (!p) return NULL;
  p->n = n;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->go, NULL);
  pthread_cond_init(&p->done, NULL);
  p->th = kiln_calloc((size_t)n, sizeof *p->th);
  p->w = kiln_calloc((size_t)n, sizeof *p->w);
  p->ranges = kiln_calloc((size_t)n, sizeof *p->ranges);
  if (!p->th || !p->w || !p->ranges) {
    pool_stop(p, 0);
    return NULL;
  }
  for (int i = 1; i < n; i++) {
    p->w[i - 1] = (worker){p, i};
    if (pthread_create(&p->th[i - 1], NULL, worker_main, &p->w[i - 1])) {
      fprintf(stderr, "kiln[warn]: could not start thread %d of the cpu pool: running single-threaded\n", i);
      pool_stop(p, i - 1);
      return NULL;
    }
  }
  return p;
}

int kiln_pool_acquire(void) {
  int n = kiln_cpu_num_threads();
  pthread_mutex_lock(&reg);
  if (!the_pool && !(the_pool = pool_start(n))) {
    pthread_mutex_unlock(&reg);
    return -1;
  }
  refs++;
  pthread_mutex_unlock(&reg);
  return 0;
}

void kiln_pool_release(void) {
  pool *p = NULL;
  pthread_mutex_lock(&reg);
  if (refs > 0 && --refs == 0) {
    p = the_pool;
    the_pool = NULL;
  }
  pthread_mutex_unlock(&reg);
  if (p) pool_stop(p, p->n - 1);
}

int kiln_pool_threads(void) {
  pthread_mutex_lock(&reg);
  int n = the_pool ? the_pool->n : 1;
  pthread_mutex_unlock(&reg);
  return n;
}

bool kiln_pool_free(void) {
  if (pthread_mutex_trylock(&one_loop)) return false; /* a loop is running: inside one of its tasks, or another graph */
  pthread_mutex_unlock(&one_loop);
  return kiln_pool_threads() > 1;
}

int64_t kiln_pool_tasks(int64_t work, int64_t grain, int64_t max_tasks) {
  if (grain < 1) grain = 1;
  int64_t t = work / grain;
  if (t > max_tasks) t = max_tasks;
  return t < 1 ? 1 : t;
}

static void pool_for(int64_t n_tasks, int max_workers, kiln_pool_fn fn, void *ctx, bool shares) {
  if (n_tasks <= 0) return;
  pool *p = NULL;
  if (n_tasks > 1 && max_workers > 1 && pthread_mutex_trylock(&one_loop) == 0) {
    pthread_mutex_lock(&reg);
    if (the_pool && the_pool->n > 1) { /* pinned for the loop */
      p = the_pool;
      refs++;
    }
    pthread_mutex_unlock(&reg);
    if (!p) pthread_mutex_unlock(&one_loop);
  }
  if (!p) { /* on the caller, in order */
    for (int64_t t = 0; t < n_tasks; t++) fn(ctx, t, 0);
    return;
  }
  int workers = max_workers < p->n ? max_workers : p->n;
  loop l = {fn, ctx, n_tasks, workers, atomic_load(&p->gen) + 1, 0, NULL}; /* only this thread changes gen */
  atomic_init(&l.next, 0);
  if (shares && n_tasks < ((int64_t)1 << 32)) { /* thread i's share: tasks [i·n/w, (i+1)·n/w) */
    l.ranges = p->ranges;
    for (int i = 0; i < workers; i++)
      atomic_store(&l.ranges[i], (unsigned long long)(n_tasks * i / workers) |
                                     (unsigned long long)(n_tasks * (i + 1) / workers) << 32);
  }
  atomic_store(&p->cur, &l);
  atomic_store(&p->gen, l.gen);
  if (atomic_load(&p->sleepers) > 0) {
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
  }
  take_tasks(&l, 0);
  atomic_store(&p->cur, NULL); /* every task is claimed: wait for the workers that may still read the loop */
  if (!spin_until(loop_left, p)) { /* poll a while before blocking */
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->waiting, true);
    while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->waiting, false);
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&one_loop);
  kiln_pool_release();
}

void kiln_pool_for(int64_t n_tasks, int max_workers, kiln_pool_fn fn, void *ctx) {
  pool_for(n_tasks, max_workers, fn, ctx, false);
}

void kiln_pool_for_shares(int64_t n_tasks, int max_workers, kiln_pool_fn fn, void *ctx) {
  pool_for(n_tasks, max_workers, fn, ctx, true);
}
