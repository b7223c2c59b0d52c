/* opencl/preload: a warm init's programs loaded ahead, while kiln lowers.
 *
 * A warm init used to load its programs' binaries only once the lowering
 * had printed their source (get_program keys a program by its text). The
 * keys it will need are known earlier: the last init of the same graph on
 * the same device used them. That init's keys are kept in the kiln cache,
 * as a small entry (the program list) under a key of the rewritten graph's
 * key, the device and driver, kiln's version and the generation switches
 * (kiln_cl_program_key's), and the observer mode. An init that finds the
 * list starts loading those binaries (kiln_cl_cache_get and
 * kiln_cl_program_from_binary) on up to two threads right away, beside the
 * rewrite and the lowering on the init's own thread; get_program takes a
 * program it needs from there, waiting for it if it is still loading. A
 * lone loading thread (one program, or one core) makes the program's
 * kernels too (kiln_cl_context_kernels_queue / _make), which
 * kiln_cl_kernel_create takes by name.
 *
 * The list is a hint and nothing more: a program is used only when its key
 * (of its source) is one the lowering asked for, so a stale or damaged list
 * costs only the loads it started; those programs are released unused. The
 * list is written again when the init used other keys (its first 256).
 * The list's lookup and the loads count in kiln_cl_cache_stats as any
 * entry's (a cold init's list is a miss; a stale list's loads are hits). A program asked
 * for before a thread has started on it is left to the caller, who loads
 * it as before (as quick as waiting). opencl/ENGINE.md "Programs loaded
 * ahead". KILN_CL_PRELOAD=0 turns it off; =sync (for tests) loads the whole
 * list before kiln_cl_preload_start returns; =hold (for tests) has each
 * loading thread claim a program before kiln_cl_preload_start returns and
 * load it only once a take has begun, so that the take waits for it; the
 * first kernel such a thread makes ahead is held being made until
 * kiln_cl_kernel_create waits for it (or the finish). */
#ifndef KILN_OPENCL_PRELOAD_H
#define KILN_OPENCL_PRELOAD_H

#include <stdbool.h>

#include "opencl/cache.h"
#include "opencl/runtime.h"

typedef struct kiln_cl_preload kiln_cl_preload;

/* The program list's key: the rewritten graph's key, the observer mode,
 * and what kiln_cl_program_key hashes besides the source. */
kiln_cl_key kiln_cl_preload_key(const kiln_cl_device *dev, const kiln_cl_key *graph_key, int mode);

/* Reads the list under key and starts loading its programs into ctx (none
 * that ctx keeps already: kiln_cl_context_program_get). NULL when the cache
 * or device binaries are off (KILN_CACHE_DIR, KILN_CL_BINARY_CACHE=0),
 * KILN_CL_PRELOAD=0, or out of memory; with no list (or a damaged one) a
 * preload that loads nothing, which records the keys for the next init. */
kiln_cl_preload *kiln_cl_preload_start(kiln_cl_context *ctx, kiln_cl_key key);

/* The program of key when it is one the list named: waits for its load;
 * true with *prog (the caller's reference) when it loaded, false (*prog
 * NULL) otherwise — not listed, its binary missing or refused, or taken
 * already. Thread-safe; pl may be NULL. */
bool kiln_cl_preload_take(kiln_cl_preload *pl, kiln_cl_key key, cl_program *prog);

/* Records the keys, in order, of the programs this init used (its list). */
void kiln_cl_preload_note(kiln_cl_preload *pl, const kiln_cl_key *keys, int n);

/* What a preload did: programs loaded and taken; their kernels made ahead
 * (kiln_cl_context_kernels_make) and taken by kiln_cl_kernel_create. */
typedef struct kiln_cl_preload_counts {
  int loaded, used, kernels, kernels_used;
  int skipped; /* listed programs asked for before a thread started on them (the caller loaded them) */
  int waited;  /* listed programs asked for while a thread loaded them (the caller waited) */
  int kernels_waited; /* kernels made ahead asked for while being made (the caller waited) */
} kiln_cl_preload_counts;

/* Waits for the loading threads, frees the kernels made ahead that no one
 * took and releases the programs no one took, writes the list when the
 * recorded keys differ from the one read (and some were recorded), and
 * frees pl (NULL-safe). *n (may be NULL): the counts. */
void kiln_cl_preload_finish(kiln_cl_preload *pl, kiln_cl_preload_counts *n);

#endif
