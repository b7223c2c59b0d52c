/* cpu_fallback/pool: the cpu backend's thread pool (prefix kiln_pool_).
 *
 * One pool per process, a cache: the first kiln_pool_acquire() starts
 * kiln_cpu_num_threads() - 1 worker threads (the caller of a parallel loop
 * is the last thread), every acquire takes a reference, and the release of
 * the last reference joins the workers and frees the pool. The cpu plan
 * executor holds a reference for the life of each plan (kiln_cpu_prepare ..
 * kiln_cpu_release), so the threads live as long as some cpu graph does.
 * There is no other process-global state: with no reference held (or one
 * thread), kiln_pool_for runs its tasks on the calling thread, in order.
 * A worker that finished a loop polls for the next one for up to 50 us,
 * yielding its core between polls, before it blocks (pool.c: waking a
 * blocked thread cost about a small step). Workers join and leave a loop
 * with atomic counters, no lock (pool.c: at 16 threads a mutex taken per
 * join and leave cost ~20 us a loop).
 *
 * One loop at a time: kiln_pool_for from a task (a nested loop) or from a
 * second thread while the pool is busy (two graphs running at once) runs
 * that loop on its own caller instead, so the cores are never
 * oversubscribed and nothing deadlocks. OpenBLAS (the SGEMM where AVX-512
 * is not usable) gets the same thread count and is only ever called from
 * outside pool tasks (see GEMM_CONV.md), so the two are never parallel at
 * once.
 *
 * Determinism: a task's result must not depend on which thread runs it or
 * how many there are. kiln's kernels split their work into tasks whose
 * elements each get the same operations however the work is split (the
 * partition may follow the thread count: a thread's part of the image),
 * and where tasks' partial sums are combined (the few-rows GEMM by KC
 * slices) the caller adds them in a fixed order, the order of the serial
 * kernel; so their results are bit-identical for any KILN_NUM_THREADS. */
#ifndef KILN_CPU_FALLBACK_POOL_H
#define KILN_CPU_FALLBACK_POOL_H
#include <stdbool.h>
#include <stdint.h>

/* KILN_NUM_THREADS: the number of threads kiln's CPU kernels use (an
 * integer in [1, 1024]; default: the online CPUs, sysconf
 * _SC_NPROCESSORS_ONLN; an invalid value is ignored with a warning). Read
 * once per process, at the first call. */
int kiln_cpu_num_threads(void);

/* Sets OpenBLAS to kiln_cpu_num_threads() threads, once per process, before
 * kiln's first OpenBLAS call (kiln_sgemm_blas); never when kiln does not
 * call OpenBLAS (its own SGEMM under AVX-512), so that OpenBLAS's server
 * threads, which spin ~0.1 s after they start, are not started for nothing.
 * Process-global: it also sets the host's own OpenBLAS calls and overrides
 * OPENBLAS_NUM_THREADS. */
void kiln_cpu_blas_threads(void);

/* Takes a reference on the process pool, starting it on first use. Returns
 * 0, or -1 when the threads could not be started (then loops run on their
 * callers; nothing to release). */
int kiln_pool_acquire(void);
/* Drops a reference taken by a successful kiln_pool_acquire; the last one
 * joins the workers (waiting for a loop in progress to end). */
void kiln_pool_release(void);

/* The threads a loop started now would use: 1 when no pool is held. */
int kiln_pool_threads(void);
/* Whether a loop started now would run on the pool's threads: a pool of 2+
 * threads is held and no loop is running (false inside a task, or while
 * another thread's loop runs). A hint: the answer may change at once. */
bool kiln_pool_free(void);

/* fn(ctx, task, worker) for every task in [0, n_tasks): on the pool's
 * threads when the pool is held and free, each task once, claimed in order
 * by whichever thread is free; else on the caller, in order. worker is in
 * [0, max_workers) (0 on the caller), unique among the tasks that run at
 * the same time: an index for per-thread scratch the caller prepared for
 * max_workers threads (usually kiln_pool_threads()); at most that many
 * threads take tasks. Returns when every task has finished. */
typedef void (*kiln_pool_fn)(void *ctx, int64_t task, int worker);
void kiln_pool_for(int64_t n_tasks, int max_workers, kiln_pool_fn fn, void *ctx);

/* kiln_pool_for, but with w = min(max_workers, the pool's threads), thread
 * i (the caller 0) first takes the tasks of its share [i·n/w, (i+1)·n/w)
 * in order, then, where the others' shares still hold unclaimed tasks,
 * those from each share's back. For loops whose task order follows the
 * data (a thread's part of the image, GEMM_CONV.md "Parts of the image"):
 * the same thread gets the same part in consecutive layers, so it reads
 * what it wrote (from its own caches) unless the shares were uneven or a
 * thread came late. Which thread runs a task never changes its result. */
void kiln_pool_for_shares(int64_t n_tasks, int max_workers, kiln_pool_fn fn, void *ctx);

/* The number of tasks of about `grain` units each for `work` units, at
 * least 1 and at most `max_tasks`: a partition by the problem's size, the
 * same for any thread count. */
int64_t kiln_pool_tasks(int64_t work, int64_t grain, int64_t max_tasks);

#endif
