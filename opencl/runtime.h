/* opencl/runtime: a context and in-order queue on one device, buffers,
 * programs (with the build log as the error message), kernels and 1-D
 * launches. Every OpenCL failure comes back as a kiln_status + message. */
#ifndef KILN_OPENCL_RUNTIME_H
#define KILN_OPENCL_RUNTIME_H
#include <CL/cl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ir/status.h"
#include "opencl/device.h"
#include "opencl/error.h"

/* Global sizes of launches that let the driver pick the local size are
 * padded to a multiple of this (kernels guard with `if (i >= n) return;`):
 * a driver then finds a large divisor instead of, for a prime n, 1. */
#define KILN_CL_GLOBAL_PAD 256

/* One device's context and in-order queue, with the limits launches and
 * allocations are checked against. One thread at a time per context (the
 * kernels' arguments are set on shared cl_kernel objects). */
/* Built programs the context keeps for the process (kiln_cl_context_program_get/put). */
#define KILN_CL_PROGRAMS_KEPT 32
typedef struct kiln_cl_kept_program {
  uint64_t hi, lo; /* the program's key (opencl/cache.h kiln_cl_program_key) */
  uint64_t used;   /* the context's clock at the last get or put: the least recent goes first */
  cl_program prog; /* one reference held by the context; NULL: a free slot */
  bool on_disk;    /* its device binary is in the kiln cache (loaded from it, or stored since) */
} kiln_cl_kept_program;

typedef struct kiln_cl_context {
  cl_context ctx;
  cl_command_queue queue;
  cl_device_id device;
  char id[24];  /* "P:D" */
  char *name;   /* the device's name, for messages */
  size_t max_work_group_size, max_work_item_size0;
  cl_ulong max_mem_alloc_size, global_mem_size, local_mem_size;
  bool can_clone; /* kiln_cl_kernel_clone copies kernel objects (clCloneKernel: OpenCL 2.1 platform and device) */
  bool rusticl;   /* Mesa's rusticl: a binary is checked for its frame before the driver sees it */
  pthread_mutex_t kept_mu; /* guards kept and clock (graphs compile from several threads) */
  bool kept_mu_ok;
  uint64_t clock;
  kiln_cl_kept_program kept[KILN_CL_PROGRAMS_KEPT];
  /* kernels made ahead for programs loaded ahead (kiln_cl_context_kernels_queue), under kept_mu */
  struct kiln_cl_premade *premade;
  int n_premade;
  pthread_cond_t premade_cv; /* a kernel made ahead is ready (or failed) */
} kiln_cl_context;

/* Creates a context and an in-order queue on dev (which may be freed
 * afterwards: the context copies what it needs). On failure *out is NULL,
 * nothing is leaked and the message names the device and the CL error. */
kiln_status kiln_cl_context_create(const kiln_cl_device *dev, kiln_cl_context **out);

/* A context the host made (ONNXIFI_BACKEND_OPENCL_CONTEXT): host is retained
 * (released by kiln_cl_context_free) and a new in-order queue is created on
 * it for dev. KILN_E_MODEL with a message when host does not contain dev's
 * device (or cannot be queried); nothing is retained on failure. */
kiln_status kiln_cl_context_wrap(const kiln_cl_device *dev, cl_context host, kiln_cl_context **out);

/* Waits for queued work (errors ignored), then releases everything (the
 * kept programs too). NULL-safe. */
void kiln_cl_context_free(kiln_cl_context *c);

/* The context's per-process program cache: the last KILN_CL_PROGRAMS_KEPT
 * programs built on it, by key (the kiln cache's program key: source,
 * options, device, driver), so that a graph compiled again in the same
 * process (a second onnxInitGraph of the same model, a variant of the same
 * code) creates its kernels from the program already built instead of
 * building it again. get: true with *out retained (the caller releases it
 * as any program) on a hit, *on_disk whether its binary is known to be in
 * the kiln cache. put: the context retains p; the least recently
 * used entry is released when all are taken. KILN_CL_PROGRAM_CACHE=0 turns
 * it off (get misses, put keeps nothing). Thread-safe. */
bool kiln_cl_context_program_get(kiln_cl_context *c, uint64_t hi, uint64_t lo, cl_program *out, bool *on_disk);
void kiln_cl_context_program_put(kiln_cl_context *c, uint64_t hi, uint64_t lo, cl_program p, bool on_disk);
/* Notes that the kept program's binary is now in the kiln cache (a variant
 * stored it), so that later variants from it do not store it again. */
void kiln_cl_context_program_stored(kiln_cl_context *c, uint64_t hi, uint64_t lo);

/* Waits until all queued work finished; a failed kernel shows up here. */
kiln_status kiln_cl_finish(kiln_cl_context *c);

/* ---- buffers ---- */

typedef struct kiln_cl_buffer {
  cl_mem mem; /* NULL when not allocated */
  size_t size;
} kiln_cl_buffer;

/* Allocates size (> 0) bytes of device memory. A size above the device's
 * largest allocation fails before the driver is asked (status of
 * CL_INVALID_BUFFER_SIZE, i.e. out of memory), with the limits in the message. */
kiln_status kiln_cl_buffer_create(kiln_cl_context *c, size_t size, kiln_cl_buffer *out);
/* A buffer kernels only read, over size bytes of host memory
 * (CL_MEM_USE_HOST_PTR: a CPU device reads them in place, no copy). The
 * bytes must stay alive and unchanged until the buffer is released and the
 * commands using it have finished. */
kiln_status kiln_cl_buffer_over_host(kiln_cl_context *c, void *host, size_t size, kiln_cl_buffer *out);
/* A buffer kernels read and write, over size bytes of host memory
 * (CL_MEM_USE_HOST_PTR on a CPU device: its pages are touched when a kernel
 * first writes them, not when the buffer is made — rusticl/llvmpipe zeroes
 * every buffer it allocates itself). The same lifetime rule. */
kiln_status kiln_cl_buffer_rw_over_host(kiln_cl_context *c, void *host, size_t size, kiln_cl_buffer *out);

/* Releases b's memory (NULL-safe, idempotent: b->mem becomes NULL). */
void kiln_cl_buffer_free(kiln_cl_buffer *b);

/* Blocking copies between host memory and [offset, offset + n) of b; a range
 * outside b is KILN_E_INTERNAL before anything is enqueued. A read returns
 * after the queue's earlier kernels, so their failures surface here too. */
kiln_status kiln_cl_buffer_write(kiln_cl_context *c, kiln_cl_buffer *b, size_t offset, const void *src, size_t n);
kiln_status kiln_cl_buffer_read(kiln_cl_context *c, const kiln_cl_buffer *b, size_t offset, void *dst, size_t n);

/* ---- programs and kernels ---- */

/* Builds source for c's device with options (NULL = none). On a build
 * failure the message is "OpenCL build failed on P:D (name): <CL error>:
 * <build log>" (cut to the message size; KILN_LOG=debug prints the whole
 * log), the status KILN_E_INTERNAL (KILN_E_NOMEM where the driver ran out
 * of memory); *out is NULL and nothing leaks. */
kiln_status kiln_cl_program_build(kiln_cl_context *c, const char *source, const char *options, cl_program *out);

/* The device binary of a built program (kiln_malloc'd, caller frees). Costly
 * on some drivers (PoCL compiles a generic work-group function on demand:
 * ~0.1-0.2 s); ask only when the binary will be stored. */
kiln_status kiln_cl_program_binary(kiln_cl_context *c, cl_program p, void **bytes, size_t *len);

/* The build options of kiln's own programs (get_program, the preload):
 * part of each program's key. */
#define KILN_CL_PROGRAM_OPTIONS ""

/* Creates and builds a program from a binary kiln_cl_program_binary gave
 * on the same device and driver. A rejected binary (CL_INVALID_BINARY, a
 * failed build, on rusticl one without the frame it writes: runtime.c
 * rusticl_frame) is KILN_E_INTERNAL: the caller rebuilds from source. */
kiln_status kiln_cl_program_from_binary(kiln_cl_context *c, const void *bytes, size_t len, const char *options,
                                        cl_program *out);

/* Releases p (NULL-safe). */
void kiln_cl_program_free(cl_program p);

typedef struct kiln_cl_kernel {
  cl_kernel k; /* NULL when not created */
  char name[64];
  size_t wg_size;      /* CL_KERNEL_WORK_GROUP_SIZE on the context's device */
  size_t pref_multiple; /* CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE */
} kiln_cl_kernel;

/* Creates kernel name from built program p, with its work-group limits (or
 * takes the one made ahead for p: kiln_cl_context_kernels_queue). */
kiln_status kiln_cl_kernel_create(kiln_cl_context *c, cl_program p, const char *name, kiln_cl_kernel *out);
/* Kernels made ahead (opencl/preload.c: a program loaded ahead, its kernels
 * made on the loading thread). queue: every kernel of built program p
 * (CL_PROGRAM_KERNEL_NAMES) noted as to be made; returns how many. With
 * hold (tests: KILN_CL_PRELOAD=hold) the first is noted as being made
 * already, and make makes it only once a kiln_cl_kernel_create waits for it
 * or release has set *released (under the context's mutex: no wake-up
 * lost); call make after such a queue, or drop before p is handed over.
 * make: makes them one by one, each unless kiln_cl_kernel_create asked for
 * it first (then the caller makes it; one being made is waited for, one
 * made is taken), and returns how many it made; *waited (may be NULL): how
 * many of them a kiln_cl_kernel_create waited for. drop: frees what of p's
 * no one took and forgets p's entries; returns how many it freed (call it
 * once make returned, before p can be released). Thread-safe; without the
 * context's mutex nothing is queued. */
int kiln_cl_context_kernels_queue(kiln_cl_context *c, cl_program p, bool hold);
int kiln_cl_context_kernels_make(kiln_cl_context *c, cl_program p, const bool *released, int *waited);
void kiln_cl_context_kernels_release(kiln_cl_context *c, bool *released);
int kiln_cl_context_kernels_drop(kiln_cl_context *c, cl_program p);

/* A second kernel object of src's function, with src's work-group limits
 * (its arguments to be set again): clCloneKernel where c->can_clone (a
 * failed clone is an error, as a failed create), else
 * kernel src->name created from p again. On Mesa's rusticl 22.3, whose
 * clCreateKernel converts and optimises the kernel's code every time (tens
 * of ms for a large one), a clone is a copy of the object (opencl/ENGINE.md
 * "Repeated kernels printed once"). KILN_CL_CLONE=0: never a clone. */
kiln_status kiln_cl_kernel_clone(kiln_cl_context *c, cl_program p, const kiln_cl_kernel *src, kiln_cl_kernel *out);
/* src's kernel object itself, one more reference (clRetainKernel; each
 * copy is freed with kiln_cl_kernel_free): for users that set every
 * argument before each launch and never launch the two at once (the
 * device ops of one variant, opencl/ops.c). */
kiln_status kiln_cl_kernel_share(const kiln_cl_kernel *src, kiln_cl_kernel *out);

/* clCloneKernel, looked up at run time (opencl/clone.c): whether the ICD
 * loader has it, and the call (CL_INVALID_OPERATION where it has not). */
bool kiln_cl_clone_found(void);
cl_kernel kiln_cl_clone_raw(cl_kernel src, cl_int *err);

/* Releases k (NULL-safe, idempotent). */
void kiln_cl_kernel_free(kiln_cl_kernel *k);

/* clSetKernelArg with a message naming the kernel and argument: a value of
 * size bytes, or (value NULL) a __local array of size bytes. */
kiln_status kiln_cl_kernel_arg(kiln_cl_kernel *k, cl_uint index, size_t size, const void *value);
kiln_status kiln_cl_kernel_arg_buffer(kiln_cl_kernel *k, cl_uint index, const kiln_cl_buffer *b);

/* n rounded up to a multiple of m (m > 0); 0 when that overflows size_t. */
size_t kiln_cl_pad(size_t n, size_t m);

/* Enqueues k over n work items (asynchronous; n == 0 launches nothing).
 * local == 0: the driver picks the local size (NULL) and the global size is
 * n padded to KILN_CL_GLOBAL_PAD; local > 0: the global size is n padded to
 * local, and local must fit the kernel's and the device's limits (else
 * KILN_E_INTERNAL, nothing enqueued). The kernel must ignore ids >= n.
 * *global (optional) gets the global size used. */
kiln_status kiln_cl_launch_1d(kiln_cl_context *c, kiln_cl_kernel *k, size_t n, size_t local, size_t *global);

#endif
