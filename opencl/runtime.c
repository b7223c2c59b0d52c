/* opencl/runtime: contexts, buffers, programs, kernels and launches over the
 * OpenCL API, each failure turned into a kiln_status with a message. */
#include "opencl/runtime.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"

/* The kept programs' lock; false (nothing kept) when it cannot be made. */
static void kept_init(kiln_cl_context *c) {
  c->kept_mu_ok = pthread_mutex_init(&c->kept_mu, NULL) == 0;
  if (c->kept_mu_ok && pthread_cond_init(&c->premade_cv, NULL)) { /* no table of kernels made ahead without both */
    pthread_mutex_destroy(&c->kept_mu);
    c->kept_mu_ok = false;
  }
}

/* Whether "OpenCL X.Y ..." says 2.1 or later. */
static bool version_2_1(const char *v) {
  int major = 0, minor = 0;
  return v && sscanf(v, "OpenCL %d.%d", &major, &minor) == 2 && major * 100 + minor >= 201;
}

/* Kernels may be cloned on dev: the loader has clCloneKernel (found at run
 * time, opencl/clone.c) and both its platform and the device say OpenCL
 * 2.1 or later (a platform's dispatch table of an older version has no such
 * entry), unless KILN_CL_CLONE=0. */
static bool clone_usable(const kiln_cl_device *dev) {
  const char *e = getenv("KILN_CL_CLONE");
  if ((e && !strcmp(e, "0")) || !version_2_1(dev->version) || !kiln_cl_clone_found()) return false;
  char pv[128] = "";
  return !clGetPlatformInfo(dev->platform, CL_PLATFORM_VERSION, sizeof pv - 1, pv, NULL) && version_2_1(pv);
}

/* A context record for dev: its name, limits and kept programs' lock; no
 * cl_context or queue yet. NULL when out of memory. */
static kiln_cl_context *context_alloc(const kiln_cl_device *dev) {
  kiln_cl_context *c = kiln_calloc(1, sizeof *c);
  if (!c || !(c->name = kiln_strdup(dev->name))) {
    kiln_free(c);
    return NULL;
  }
  kept_init(c);
  c->device = dev->device;
  snprintf(c->id, sizeof c->id, "%s", dev->id);
  c->max_work_group_size = dev->max_work_group_size;
  c->max_work_item_size0 = dev->max_work_item_size0;
  c->max_mem_alloc_size = dev->max_mem_alloc_size;
  c->global_mem_size = dev->global_mem_size;
  c->local_mem_size = dev->local_mem_size;
  c->can_clone = clone_usable(dev);
  c->rusticl = dev->platform_name && strstr(dev->platform_name, "rusticl");
  return c;
}

/* Creates c's in-order queue (with profiling under KILN_PROFILE=1 or
 * KILN_TRACE=file: event timings for the per-kernel table / trace) and
 * hands c out; on failure frees c. where: for the message. */
static kiln_status queue_finish(kiln_cl_context *c, const char *where, kiln_cl_context **out) {
  const char *prof = getenv("KILN_PROFILE"), *trace = getenv("KILN_TRACE");
  cl_command_queue_properties qp =
      (prof && *prof && strcmp(prof, "0")) || (trace && *trace) ? CL_QUEUE_PROFILING_ENABLE : 0;
  cl_int e = CL_SUCCESS;
  c->queue = clCreateCommandQueue(c->ctx, c->device, qp, &e);
  if (!c->queue || e) {
    kiln_status s = kiln_cl_fail(e ? e : CL_INVALID_COMMAND_QUEUE, "creating an OpenCL queue on %s (%s)%s", c->id,
                                 c->name, where);
    if (c->queue) clReleaseCommandQueue(c->queue);
    c->queue = NULL;
    kiln_cl_context_free(c);
    return s;
  }
  *out = c;
  return KILN_OK;
}

/* Driver notifications (asynchronous errors, lost devices) go to the log. */
static void CL_CALLBACK context_notify(const char *info, const void *priv, size_t cb, void *user) {
  (void)priv;
  (void)cb;
  const kiln_cl_context *c = user;
  kiln_log(KILN_LOG_WARN, "OpenCL device %s: %s", c ? c->id : "?", info ? info : "(no text)");
}

kiln_status kiln_cl_context_create(const kiln_cl_device *dev, kiln_cl_context **out) {
  *out = NULL;
  kiln_cl_context *c = context_alloc(dev);
  if (!c) return kiln_fail(KILN_E_NOMEM, "out of memory creating an OpenCL context");
  cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)dev->platform, 0};
  cl_int e = CL_SUCCESS;
  c->ctx = clCreateContext(props, 1, &c->device, context_notify, c, &e);
  if (!c->ctx || e) {
    kiln_status s = kiln_cl_fail(e ? e : CL_INVALID_CONTEXT, "creating an OpenCL context on %s (%s)", c->id, c->name);
    if (c->ctx) clReleaseContext(c->ctx);
    c->ctx = NULL;
    kiln_cl_context_free(c);
    return s;
  }
  return queue_finish(c, "", out);
}

static bool kept_enabled(void) {
  const char *e = getenv("KILN_CL_PROGRAM_CACHE");
  return !(e && !strcmp(e, "0"));
}

bool kiln_cl_context_program_get(kiln_cl_context *c, uint64_t hi, uint64_t lo, cl_program *out, bool *on_disk) {
  *out = NULL;
  *on_disk = false;
  if (!c || !c->kept_mu_ok || !kept_enabled()) return false;
  pthread_mutex_lock(&c->kept_mu);
  for (int i = 0; i < KILN_CL_PROGRAMS_KEPT && !*out; i++) {
    kiln_cl_kept_program *k = &c->kept[i];
    if (k->prog && k->hi == hi && k->lo == lo && clRetainProgram(k->prog) == CL_SUCCESS) {
      k->used = ++c->clock;
      *out = k->prog;
      *on_disk = k->on_disk;
    }
  }
  pthread_mutex_unlock(&c->kept_mu);
  return *out != NULL;
}

void kiln_cl_context_program_put(kiln_cl_context *c, uint64_t hi, uint64_t lo, cl_program p, bool on_disk) {
  if (!c || !p || !c->kept_mu_ok || !kept_enabled()) return;
  pthread_mutex_lock(&c->kept_mu);
  kiln_cl_kept_program *slot = NULL;
  for (int i = 0; i < KILN_CL_PROGRAMS_KEPT; i++) {
    kiln_cl_kept_program *k = &c->kept[i];
    if (k->prog && k->hi == hi && k->lo == lo) { /* kept already (built twice at once) */
      k->used = ++c->clock;
      k->on_disk = k->on_disk || on_disk;
      goto out;
    }
    if (!k->prog) { /* the first free slot */
      if (!slot || slot->prog) slot = k;
    } else if (!slot || (slot->prog && k->used < slot->used)) { /* else the least recently used */
      slot = k;
    }
  }
  if (slot && clRetainProgram(p) == CL_SUCCESS) {
    if (slot->prog) clReleaseProgram(slot->prog);
    *slot = (kiln_cl_kept_program){hi, lo, ++c->clock, p, on_disk};
  }
out:
  pthread_mutex_unlock(&c->kept_mu);
}

void kiln_cl_context_program_stored(kiln_cl_context *c, uint64_t hi, uint64_t lo) {
  if (!c || !c->kept_mu_ok) return;
  pthread_mutex_lock(&c->kept_mu);
  for (int i = 0; i < KILN_CL_PROGRAMS_KEPT; i++)
    if (c->kept[i].prog && c->kept[i].hi == hi && c->kept[i].lo == lo) c->kept[i].on_disk = true;
  pthread_mutex_unlock(&c->kept_mu);
}

/* A kernel of a program loaded ahead (opencl/preload.c): queued by the
 * loading thread, then made by it (MAKING, READY) unless a caller of
 * kiln_cl_kernel_create claimed it first (CLAIMED: the caller makes its own). */
enum { PM_QUEUED, PM_MAKING, PM_READY, PM_CLAIMED };
struct kiln_cl_premade {
  cl_program prog; /* not retained: the loader drops its entries before the program can go */
  char name[64];
  int state;
  bool held;        /* MAKING from its queueing until a take waits for it (tests: kiln_cl_context_kernels_queue) */
  bool waited;      /* a kiln_cl_kernel_create found it MAKING and waited */
  kiln_cl_kernel k; /* PM_READY */
};

/* The entry of (p, name), or -1. With kept_mu held. */
static int premade_find(const kiln_cl_context *c, cl_program p, const char *name) {
  for (int i = 0; i < c->n_premade; i++)
    if (c->premade[i].prog == p && !strcmp(c->premade[i].name, name)) return i;
  return -1;
}

static void premade_remove(kiln_cl_context *c, int i) { c->premade[i] = c->premade[--c->n_premade]; }

int kiln_cl_context_kernels_queue(kiln_cl_context *c, cl_program p, bool hold) {
  if (!c->kept_mu_ok) return 0;
  size_t len = 0;
  if (clGetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &len) || !len) return 0;
  char *names = kiln_malloc(len + 1);
  if (!names) return 0;
  int n = 0;
  if (!clGetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, len, names, NULL)) {
    names[len] = 0;
    pthread_mutex_lock(&c->kept_mu);
    for (char *q = names, *end; *q; q = *end ? end + 1 : end) {
      end = q + strcspn(q, ";");
      size_t l = (size_t)(end - q);
      if (!l || l >= sizeof c->premade[0].name) continue;
      struct kiln_cl_premade *a = kiln_realloc(c->premade, sizeof *a * (size_t)(c->n_premade + 1));
      if (!a) break;
      c->premade = a;
      struct kiln_cl_premade *e = &c->premade[c->n_premade++];
      memset(e, 0, sizeof *e);
      e->prog = p;
      memcpy(e->name, q, l);
      e->state = PM_QUEUED;
      if (hold && !n) e->state = PM_MAKING, e->held = true;
      n++;
    }
    pthread_mutex_unlock(&c->kept_mu);
  }
  kiln_free(names);
  return n;
}

static kiln_status kernel_make(kiln_cl_context *c, cl_program p, const char *name, kiln_cl_kernel *out);

int kiln_cl_context_kernels_make(kiln_cl_context *c, cl_program p, const bool *released, int *waited) {
  if (waited) *waited = 0;
  if (!c->kept_mu_ok) return 0;
  int made = 0;
  for (;;) {
    char name[64];
    pthread_mutex_lock(&c->kept_mu);
    int i = 0;
    while (i < c->n_premade &&
           !(c->premade[i].prog == p && (c->premade[i].state == PM_QUEUED || c->premade[i].held)))
      i++;
    if (i < c->n_premade) {
      bool held = c->premade[i].held;
      c->premade[i].state = PM_MAKING;
      c->premade[i].held = false;
      memcpy(name, c->premade[i].name, sizeof name);
      /* tests: one queued held is made once a take waits for it (or at the release) */
      for (int j; held && released && !*released && (j = premade_find(c, p, name)) >= 0 && !c->premade[j].waited;)
        pthread_cond_wait(&c->premade_cv, &c->kept_mu);
    }
    pthread_mutex_unlock(&c->kept_mu);
    if (i >= c->n_premade) break; /* (read under the lock above: no entry of p is queued) */
    kiln_cl_kernel k;
    kiln_status s = kernel_make(c, p, name, &k);
    pthread_mutex_lock(&c->kept_mu);
    int j = premade_find(c, p, name);
    if (j >= 0 && waited) *waited += c->premade[j].waited;
    if (j >= 0 && !s) {
      c->premade[j].k = k;
      c->premade[j].state = PM_READY;
      made++;
    } else if (j >= 0) {
      premade_remove(c, j); /* a waiting caller makes its own */
    } else if (!s) {
      kiln_cl_kernel_free(&k); /* its entry dropped meanwhile (a program at the same address dropped by another plan) */
    }
    pthread_cond_broadcast(&c->premade_cv);
    pthread_mutex_unlock(&c->kept_mu);
  }
  return made;
}

/* kiln_cl_kernel_create's part: program p's kernel made ahead under name
 * into *out (waiting while it is being made); true when taken. A queued one
 * is claimed (its maker skips it) and false returned: the caller makes it. */
static bool premade_take(kiln_cl_context *c, cl_program p, const char *name, kiln_cl_kernel *out) {
  if (!c->kept_mu_ok) return false;
  bool taken = false;
  pthread_mutex_lock(&c->kept_mu);
  for (int i; (i = premade_find(c, p, name)) >= 0;) {
    struct kiln_cl_premade *e = &c->premade[i];
    if (e->state == PM_MAKING) {
      if (!e->waited) { /* (a held maker waits for this) */
        e->waited = true;
        pthread_cond_broadcast(&c->premade_cv);
      }
      pthread_cond_wait(&c->premade_cv, &c->kept_mu);
      continue;
    }
    if (e->state == PM_READY) {
      *out = e->k;
      premade_remove(c, i);
      taken = true;
    } else if (e->state == PM_QUEUED) {
      e->state = PM_CLAIMED;
    }
    break;
  }
  pthread_mutex_unlock(&c->kept_mu);
  return taken;
}

void kiln_cl_context_kernels_release(kiln_cl_context *c, bool *released) {
  if (!c->kept_mu_ok) {
    *released = true;
    return;
  }
  pthread_mutex_lock(&c->kept_mu);
  *released = true;
  pthread_cond_broadcast(&c->premade_cv);
  pthread_mutex_unlock(&c->kept_mu);
}

int kiln_cl_context_kernels_drop(kiln_cl_context *c, cl_program p) {
  int n = 0;
  if (!c->kept_mu_ok) return 0;
  pthread_mutex_lock(&c->kept_mu);
  for (int i = 0; i < c->n_premade;)
    if (c->premade[i].prog == p) {
      if (c->premade[i].state == PM_READY) kiln_cl_kernel_free(&c->premade[i].k), n++;
      premade_remove(c, i);
    } else {
      i++;
    }
  pthread_mutex_unlock(&c->kept_mu);
  return n;
}

void kiln_cl_context_free(kiln_cl_context *c) {
  if (!c) return;
  for (int i = 0; i < c->n_premade; i++)
    if (c->premade[i].state == PM_READY) kiln_cl_kernel_free(&c->premade[i].k);
  kiln_free(c->premade);
  if (c->queue) {
    clFinish(c->queue);
    clReleaseCommandQueue(c->queue);
  }
  for (int i = 0; i < KILN_CL_PROGRAMS_KEPT; i++)
    if (c->kept[i].prog) clReleaseProgram(c->kept[i].prog);
  if (c->kept_mu_ok) {
    pthread_cond_destroy(&c->premade_cv);
    pthread_mutex_destroy(&c->kept_mu);
  }
  if (c->ctx) clReleaseContext(c->ctx);
  kiln_free(c->name);
  kiln_free(c);
}

kiln_status kiln_cl_finish(kiln_cl_context *c) {
  cl_int e = clFinish(c->queue);
  if (e) return kiln_cl_fail(e, "waiting for OpenCL device %s (%s)", c->id, c->name);
  return KILN_OK;
}

/* ---- buffers ---- */

/* host NULL: a new allocation; else a buffer over host's bytes, read-only
 * unless rw */
static kiln_status buffer_make(kiln_cl_context *c, size_t size, void *host, bool rw, kiln_cl_buffer *out) {
  out->mem = NULL;
  out->size = 0;
  if (!size) return kiln_fail(KILN_E_INTERNAL, "OpenCL buffer of 0 bytes requested on %s", c->id);
  if ((cl_ulong)size > c->max_mem_alloc_size)
    return kiln_fail(kiln_cl_status(CL_INVALID_BUFFER_SIZE),
                     "OpenCL buffer of %zu bytes does not fit device %s (%s): largest allocation %llu bytes, "
                     "global memory %llu bytes",
                     size, c->id, c->name, (unsigned long long)c->max_mem_alloc_size,
                     (unsigned long long)c->global_mem_size);
  cl_int e = CL_SUCCESS;
  cl_mem_flags f = !host ? CL_MEM_READ_WRITE : (rw ? CL_MEM_READ_WRITE : CL_MEM_READ_ONLY) | CL_MEM_USE_HOST_PTR;
  cl_mem m = clCreateBuffer(c->ctx, f, size, host, &e);
  if (!m || e) {
    if (m) clReleaseMemObject(m);
    return kiln_cl_fail(e ? e : CL_MEM_OBJECT_ALLOCATION_FAILURE, "%s an OpenCL buffer of %zu bytes on %s (%s)",
                        host ? "making (over host memory)" : "allocating", size, c->id, c->name);
  }
  out->mem = m;
  out->size = size;
  return KILN_OK;
}

kiln_status kiln_cl_buffer_create(kiln_cl_context *c, size_t size, kiln_cl_buffer *out) {
  return buffer_make(c, size, NULL, false, out);
}

kiln_status kiln_cl_buffer_over_host(kiln_cl_context *c, void *host, size_t size, kiln_cl_buffer *out) {
  return buffer_make(c, size, host, false, out);
}

kiln_status kiln_cl_buffer_rw_over_host(kiln_cl_context *c, void *host, size_t size, kiln_cl_buffer *out) {
  return buffer_make(c, size, host, true, out);
}

void kiln_cl_buffer_free(kiln_cl_buffer *b) {
  if (!b) return;
  if (b->mem) clReleaseMemObject(b->mem);
  b->mem = NULL;
  b->size = 0;
}

static kiln_status check_range(const kiln_cl_context *c, const kiln_cl_buffer *b, size_t offset, size_t n,
                               const char *what) {
  if (!b->mem) return kiln_fail(KILN_E_INTERNAL, "OpenCL %s on %s: buffer not allocated", what, c->id);
  if (offset > b->size || n > b->size - offset)
    return kiln_fail(KILN_E_INTERNAL, "OpenCL %s of bytes [%zu, +%zu) is outside a buffer of %zu bytes", what,
                     offset, n, b->size);
  return KILN_OK;
}

kiln_status kiln_cl_buffer_write(kiln_cl_context *c, kiln_cl_buffer *b, size_t offset, const void *src, size_t n) {
  kiln_status s = check_range(c, b, offset, n, "write");
  if (s || !n) return s;
  cl_int e = clEnqueueWriteBuffer(c->queue, b->mem, CL_TRUE, offset, n, src, 0, NULL, NULL);
  if (e) return kiln_cl_fail(e, "writing %zu bytes to an OpenCL buffer on %s (%s)", n, c->id, c->name);
  return KILN_OK;
}

kiln_status kiln_cl_buffer_read(kiln_cl_context *c, const kiln_cl_buffer *b, size_t offset, void *dst, size_t n) {
  kiln_status s = check_range(c, b, offset, n, "read");
  if (s || !n) return s;
  cl_int e = clEnqueueReadBuffer(c->queue, b->mem, CL_TRUE, offset, n, dst, 0, NULL, NULL);
  if (e) return kiln_cl_fail(e, "reading %zu bytes from an OpenCL buffer on %s (%s)", n, c->id, c->name);
  return KILN_OK;
}

/* ---- programs ---- */

/* The build log of p on c's device (kiln_malloc'd, trimmed), or NULL. */
static char *build_log(kiln_cl_context *c, cl_program p) {
  size_t n = 0;
  if (clGetProgramBuildInfo(p, c->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) || !n) return NULL;
  char *log = kiln_malloc(n + 1);
  if (!log) return NULL;
  if (clGetProgramBuildInfo(p, c->device, CL_PROGRAM_BUILD_LOG, n, log, NULL)) {
    kiln_free(log);
    return NULL;
  }
  log[n] = 0;
  size_t len = strlen(log), start = 0;
  while (len && (log[len - 1] == '\n' || log[len - 1] == ' ' || log[len - 1] == '\r')) log[--len] = 0;
  while (log[start] == '\n' || log[start] == ' ') start++;
  if (start) memmove(log, log + start, len - start + 1);
  return log;
}

/* Builds p; on failure releases it and fails with the build log. */
static kiln_status build(kiln_cl_context *c, cl_program p, const char *options, const char *what) {
  cl_int e = clBuildProgram(p, 1, &c->device, options ? options : "", NULL, NULL);
  if (!e) return KILN_OK;
  char *log = build_log(c, p);
  if (log) kiln_log(KILN_LOG_DEBUG, "OpenCL build log on %s (%s):\n%s", c->id, c->name, log);
  bool opts = options && *options;
  /* the log goes last, cut to what the message holds */
  kiln_status s = kiln_fail(kiln_cl_status(e), "OpenCL %s failed on %s (%s): %s%s%s%s: %s", what, c->id, c->name,
                            kiln_cl_err_name(e), opts ? " (options: " : "", opts ? options : "", opts ? ")" : "",
                            log && *log ? log : "(no build log)");
  kiln_free(log);
  clReleaseProgram(p);
  return s;
}

kiln_status kiln_cl_program_build(kiln_cl_context *c, const char *source, const char *options, cl_program *out) {
  *out = NULL;
  cl_int e = CL_SUCCESS;
  cl_program p = clCreateProgramWithSource(c->ctx, 1, &source, NULL, &e);
  if (!p || e) {
    if (p) clReleaseProgram(p);
    return kiln_cl_fail(e ? e : CL_INVALID_PROGRAM, "creating an OpenCL program on %s (%s)", c->id, c->name);
  }
  kiln_status s = build(c, p, options, "build");
  if (!s) *out = p;
  return s;
}

kiln_status kiln_cl_program_binary(kiln_cl_context *c, cl_program p, void **bytes, size_t *len) {
  *bytes = NULL;
  *len = 0;
  cl_uint nd = 0;
  cl_int e = clGetProgramInfo(p, CL_PROGRAM_NUM_DEVICES, sizeof nd, &nd, NULL);
  if (!e && nd != 1) e = CL_INVALID_PROGRAM;
  size_t n = 0;
  if (!e) e = clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof n, &n, NULL);
  if (!e && !n) e = CL_INVALID_PROGRAM_EXECUTABLE;
  if (e) return kiln_cl_fail(e, "querying an OpenCL program binary on %s (%s)", c->id, c->name);
  unsigned char *b = kiln_malloc(n);
  if (!b) return kiln_fail(KILN_E_NOMEM, "out of memory for an OpenCL program binary of %zu bytes", n);
  e = clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof b, &b, NULL);
  if (e) {
    kiln_free(b);
    return kiln_cl_fail(e, "reading an OpenCL program binary on %s (%s)", c->id, c->name);
  }
  *bytes = b;
  *len = n;
  return KILN_OK;
}

/* The little-endian 32-bit word at b. */
static uint32_t le32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Whether b[0..len) has the frame of a binary Mesa's rusticl writes. Mesa
 * 22.3 (Debian 12) aborts the whole process (a Rust panic, "unknown
 * version") on a binary whose first word is not its format version, where
 * OpenCL asks for CL_INVALID_BINARY. Its frame, read off its own binaries:
 * the version (1), the SPIR-V's length in bytes (len - 12), the binary type
 * (CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT, _LIBRARY or _EXECUTABLE), then
 * the SPIR-V, whose first word is SPIR-V's magic number. Later Mesas start
 * with "rusticl" and a NUL and reject a foreign binary themselves: passed
 * through. The cache's checksum keeps damaged entries away; this keeps a
 * well-formed entry that this driver did not write (tests/fault_cache.sh's
 * garbage, a file put there by hand) from ending the host's process. The
 * SPIR-V itself is not checked (garbage inside the frame builds; the first
 * clCreateKernel then fails: docs/RELIABILITY.md). */
static bool rusticl_frame(const unsigned char *b, size_t len) {
  static const unsigned char magic[8] = "rusticl";
  if (len >= sizeof magic && !memcmp(b, magic, sizeof magic)) return true;
  if (len < 20 || len % 4 || len - 12 > UINT32_MAX) return false;
  uint32_t type = le32(b + 8);
  return le32(b) == 1 && le32(b + 4) == len - 12 &&
         (type == CL_PROGRAM_BINARY_TYPE_COMPILED_OBJECT || type == CL_PROGRAM_BINARY_TYPE_LIBRARY ||
          type == CL_PROGRAM_BINARY_TYPE_EXECUTABLE) &&
         le32(b + 12) == 0x07230203u;
}

kiln_status kiln_cl_program_from_binary(kiln_cl_context *c, const void *bytes, size_t len, const char *options,
                                        cl_program *out) {
  *out = NULL;
  const unsigned char *b = bytes;
  if (c->rusticl && !rusticl_frame(b, len))
    return kiln_fail(KILN_E_INTERNAL,
                     "OpenCL program binary of %zu bytes not handed to %s (%s): not the frame rusticl writes", len,
                     c->id, c->name);
  cl_int e = CL_SUCCESS, bin = CL_SUCCESS;
  cl_program p = clCreateProgramWithBinary(c->ctx, 1, &c->device, &len, &b, &bin, &e);
  if (!p || e || bin) {
    if (p) clReleaseProgram(p);
    if (!e) e = bin ? bin : CL_INVALID_BINARY;
    return kiln_fail(e == CL_OUT_OF_HOST_MEMORY ? KILN_E_NOMEM : KILN_E_INTERNAL,
                     "OpenCL program binary of %zu bytes rejected by %s (%s): %s", len, c->id, c->name,
                     kiln_cl_err_name(e));
  }
  kiln_status s = build(c, p, options, "build from a binary");
  if (!s) *out = p;
  return s;
}

void kiln_cl_program_free(cl_program p) {
  if (p) clReleaseProgram(p);
}

/* ---- kernels and launches ---- */

kiln_status kiln_cl_kernel_create(kiln_cl_context *c, cl_program p, const char *name, kiln_cl_kernel *out) {
  if (premade_take(c, p, name, out)) return KILN_OK; /* (*out untouched otherwise: kernel_make clears it) */
  return kernel_make(c, p, name, out);
}

static kiln_status kernel_make(kiln_cl_context *c, cl_program p, const char *name, kiln_cl_kernel *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  cl_int e = CL_SUCCESS;
  cl_kernel k = clCreateKernel(p, name, &e);
  if (!k || e) {
    if (k) clReleaseKernel(k);
    return kiln_cl_fail(e ? e : CL_INVALID_KERNEL, "creating OpenCL kernel '%s' on %s (%s)", name, c->id, c->name);
  }
  e = clGetKernelWorkGroupInfo(k, c->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof out->wg_size, &out->wg_size, NULL);
  if (!e)
    e = clGetKernelWorkGroupInfo(k, c->device, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                 sizeof out->pref_multiple, &out->pref_multiple, NULL);
  if (e) {
    clReleaseKernel(k);
    return kiln_cl_fail(e, "querying OpenCL kernel '%s' on %s (%s)", name, c->id, c->name);
  }
  if (!out->pref_multiple) out->pref_multiple = 1;
  out->k = k;
  return KILN_OK;
}

kiln_status kiln_cl_kernel_clone(kiln_cl_context *c, cl_program p, const kiln_cl_kernel *src, kiln_cl_kernel *out) {
  if (!c->can_clone || !src->k) return kiln_cl_kernel_create(c, p, src->name, out);
  memset(out, 0, sizeof *out);
  cl_int e = CL_SUCCESS;
  cl_kernel k = kiln_cl_clone_raw(src->k, &e);
  if (!k || e) {
    if (k) clReleaseKernel(k);
    return kiln_cl_fail(e ? e : CL_INVALID_KERNEL, "cloning OpenCL kernel '%s' on %s (%s)", src->name, c->id, c->name);
  }
  *out = *src;
  out->k = k;
  return KILN_OK;
}

kiln_status kiln_cl_kernel_share(const kiln_cl_kernel *src, kiln_cl_kernel *out) {
  memset(out, 0, sizeof *out);
  cl_int e = src->k ? clRetainKernel(src->k) : CL_INVALID_KERNEL;
  if (e) return kiln_cl_fail(e, "sharing OpenCL kernel '%s'", src->name);
  *out = *src;
  return KILN_OK;
}

void kiln_cl_kernel_free(kiln_cl_kernel *k) {
  if (!k) return;
  if (k->k) clReleaseKernel(k->k);
  k->k = NULL;
}

kiln_status kiln_cl_kernel_arg(kiln_cl_kernel *k, cl_uint index, size_t size, const void *value) {
  cl_int e = clSetKernelArg(k->k, index, size, value);
  if (e) return kiln_cl_fail(e, "setting argument %u (%zu bytes) of OpenCL kernel '%s'", index, size, k->name);
  return KILN_OK;
}

kiln_status kiln_cl_kernel_arg_buffer(kiln_cl_kernel *k, cl_uint index, const kiln_cl_buffer *b) {
  return kiln_cl_kernel_arg(k, index, sizeof(cl_mem), &b->mem);
}

size_t kiln_cl_pad(size_t n, size_t m) {
  if (!m) return 0;
  size_t r = n % m;
  if (!r) return n;
  if (n > (size_t)-1 - (m - r)) return 0;
  return n + (m - r);
}

kiln_status kiln_cl_launch_1d(kiln_cl_context *c, kiln_cl_kernel *k, size_t n, size_t local, size_t *global) {
  if (global) *global = 0;
  if (!n) return KILN_OK;
  if (local && (local > k->wg_size || local > c->max_work_item_size0))
    return kiln_fail(KILN_E_INTERNAL,
                     "OpenCL kernel '%s': local size %zu exceeds the limit on %s (%s): kernel %zu, device %zu",
                     k->name, local, c->id, c->name, k->wg_size, c->max_work_item_size0);
  size_t g = kiln_cl_pad(n, local ? local : KILN_CL_GLOBAL_PAD);
  if (!g) return kiln_fail(KILN_E_INTERNAL, "OpenCL kernel '%s': global size %zu overflows when padded", k->name, n);
  cl_int e = clEnqueueNDRangeKernel(c->queue, k->k, 1, NULL, &g, local ? &local : NULL, 0, NULL, NULL);
  if (e)
    return kiln_cl_fail(e, "launching OpenCL kernel '%s' (global %zu, local %zu) on %s (%s)", k->name, g, local,
                        c->id, c->name);
  if (global) *global = g;
  return KILN_OK;
}

/* ---- a context the host made ---- */

kiln_status kiln_cl_context_wrap(const kiln_cl_device *dev, cl_context host, kiln_cl_context **out) {
  *out = NULL;
  if (!host) return kiln_fail(KILN_E_MODEL, "the OpenCL context is NULL");
  size_t n = 0;
  cl_int e = clGetContextInfo(host, CL_CONTEXT_DEVICES, 0, NULL, &n);
  if (e || !n || n % sizeof(cl_device_id))
    return kiln_fail(KILN_E_MODEL, "the given OpenCL context cannot be queried for its devices (%s)",
                     kiln_cl_err_name(e ? e : CL_INVALID_CONTEXT));
  cl_device_id *ids = kiln_malloc(n);
  if (!ids) return kiln_fail(KILN_E_NOMEM, "out of memory querying an OpenCL context");
  e = clGetContextInfo(host, CL_CONTEXT_DEVICES, n, ids, NULL);
  bool found = false;
  for (size_t i = 0; !e && i < n / sizeof *ids; i++) found = found || ids[i] == dev->device;
  kiln_free(ids);
  if (e)
    return kiln_fail(KILN_E_MODEL, "the given OpenCL context cannot be queried for its devices (%s)",
                     kiln_cl_err_name(e));
  if (!found)
    return kiln_fail(KILN_E_MODEL,
                     "the given OpenCL context does not contain the backend's device %s (%s, platform %s): create it "
                     "with the device of ONNXIFI_BACKEND_OPENCL_DEVICE_ID",
                     dev->id, dev->name, dev->platform_name);
  kiln_cl_context *c = context_alloc(dev);
  if (!c) return kiln_fail(KILN_E_NOMEM, "out of memory wrapping an OpenCL context");
  if ((e = clRetainContext(host))) {
    kiln_cl_context_free(c);
    return kiln_fail(KILN_E_MODEL, "the given OpenCL context cannot be retained (%s)", kiln_cl_err_name(e));
  }
  c->ctx = host;
  return queue_finish(c, " in the host's context", out);
}
