/* tests/lifetime_cycles: resource lifetimes over many init/run/release
 * cycles (issue 8, "lifetimes"). The plugin is loaded with dlopen; on every
 * backend KILN_DEVICE offers, each cycle is onnxInitBackend, onnxInitGraph
 * (examples/cnn.onnx and examples/mlp.onnx in turn), onnxInitEvent,
 * onnxSetGraphIO, onnxRunGraph, onnxSignalEvent, onnxWaitEvent (output
 * checked bit for bit against the first cycle's), the releases in reverse.
 * After a warm-up (at least 1000 cycles: caches, the allocator arenas the
 * graphs' worker threads get, the OpenCL context and
 * program cache settle), it measures:
 *  - RSS (/proc/self/statm) at 21 points; the slope in KiB per 1000 cycles,
 *    Theil-Sen (the median of the pairwise slopes: one early step of the
 *    allocator does not move it, a steady leak does), must stay under
 *    KILN_LIFETIME_MAX_SLOPE (default 16, i.e. less than one 32-byte malloc
 *    chunk a cycle); the least-squares slope is printed too;
 *  - the heap in use (mallinfo2's uordblks; one arena, glibc's tcache off
 *    through GLIBC_TUNABLES, set by re-executing itself), whose slope must
 *    stay under KILN_LIFETIME_MAX_HEAP_SLOPE (default 1 KiB per 1000
 *    cycles): RSS alone misses a small leak that fills free heap holes.
 *    A driver's threads (rusticl's queue and llvmpipe's) hold 0.5-3 MiB
 *    for a moment after a run, so a sample is the least of three reads
 *    1 ms apart and the gated slope is that of the lower envelope (each
 *    sample replaced by the least one from there on): a leak raises the
 *    floor the heap falls back to, a transient block above it does not
 *    count; the plain Theil-Sen slope is printed too;
 *  - open file descriptors (/proc/self/fd) before and after: equal;
 *  - live OpenCL objects (contexts, queues, buffers and sub-buffers,
 *    programs — references: clRetainProgram and clRetainMemObject count —, kernels, events), counted by wrappers of the OpenCL entry
 *    points that this executable exports (-rdynamic: the plugin's and
 *    CLBlast's calls resolve here first and are forwarded to the ICD
 *    loader's functions): before and after, equal;
 *  - the order sub-buffers are destroyed in: none while a sibling (a
 *    sub-buffer of the same buffer) made after it lives — last made, first
 *    destroyed, which NVIDIA's driver needs (opencl/ENGINE.md).
 *
 *   lifetime_cycles PLUGIN.so EXAMPLES_DIR
 *   KILN_LIFETIME_CYCLES: measured cycles per backend (default 10000);
 *   KILN_LIFETIME_WARMUP: cycles before measuring (default max(1000, 10%)). */
#define _GNU_SOURCE
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dirent.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/onnxifi_dl.h"

/* ---- OpenCL object counters (wrappers forwarding to the ICD loader) ---- */

enum { CL_CTX, CL_QUEUE, CL_MEM, CL_PROG, CL_KERN, CL_EVENT, CL_NKINDS };
static const char *const cl_kind_names[CL_NKINDS] = {"contexts", "queues", "buffers", "programs", "kernels", "events"};
static atomic_long cl_live[CL_NKINDS];
static atomic_long cl_calls; /* any wrapped call: shows the wrappers are in the path */

static void *ocl_lib; /* the ICD loader, opened by main() */
#define NEXT(fn) \
  static __typeof__(&fn) next_##fn; \
  if (!next_##fn) *(void **)&next_##fn = dlsym(ocl_lib, #fn)
#define WRAP __attribute__((visibility("default")))

#define CREATE(kind, ret)                 \
  do {                                    \
    atomic_fetch_add(&cl_calls, 1);       \
    if (ret) atomic_fetch_add(&cl_live[kind], 1); \
  } while (0)
#define RELEASE(kind, st)                 \
  do {                                    \
    atomic_fetch_add(&cl_calls, 1);       \
    if ((st) == CL_SUCCESS) atomic_fetch_sub(&cl_live[kind], 1); \
  } while (0)
#define EVENT_OUT(st, ev)                 \
  do {                                    \
    atomic_fetch_add(&cl_calls, 1);       \
    if ((st) == CL_SUCCESS && (ev)) atomic_fetch_add(&cl_live[CL_EVENT], 1); \
  } while (0)

WRAP cl_context clCreateContext(const cl_context_properties *p, cl_uint n, const cl_device_id *d,
                           void(CL_CALLBACK *cb)(const char *, const void *, size_t, void *), void *u, cl_int *e) {
  NEXT(clCreateContext);
  cl_context r = next_clCreateContext(p, n, d, cb, u, e);
  CREATE(CL_CTX, r);
  return r;
}
WRAP cl_int clReleaseContext(cl_context c) {
  NEXT(clReleaseContext);
  cl_int st = next_clReleaseContext(c);
  RELEASE(CL_CTX, st);
  return st;
}
WRAP cl_command_queue clCreateCommandQueue(cl_context c, cl_device_id d, cl_command_queue_properties p, cl_int *e) {
  NEXT(clCreateCommandQueue);
  cl_command_queue r = next_clCreateCommandQueue(c, d, p, e);
  CREATE(CL_QUEUE, r);
  return r;
}
WRAP cl_int clReleaseCommandQueue(cl_command_queue q) {
  NEXT(clReleaseCommandQueue);
  cl_int st = next_clReleaseCommandQueue(q);
  RELEASE(CL_QUEUE, st);
  return st;
}
WRAP cl_mem clCreateBuffer(cl_context c, cl_mem_flags f, size_t n, void *h, cl_int *e) {
  NEXT(clCreateBuffer);
  cl_mem r = next_clCreateBuffer(c, f, n, h, e);
  CREATE(CL_MEM, r);
  return r;
}
/* The order sub-buffers are destroyed in: last made, first destroyed
   (opencl/engine_compile.c kiln_cl_variant_free; NVIDIA's driver crashed
   releasing a variant's sub-buffers in the order they were made). Each
   live sub-buffer with its parent, its place in the order they were made
   and its references; a sub-buffer destroyed while a sibling made after it
   lives counts as out of order. */
enum { SUB_MAX = 4096 };
static struct {
  cl_mem mem, parent;
  long seq, refs;
} subs[SUB_MAX];
static long sub_seq, sub_destroyed, sub_out_of_order, sub_untracked;
static atomic_flag sub_lock = ATOMIC_FLAG_INIT;
static void sub_lock_take(void) {
  while (atomic_flag_test_and_set(&sub_lock)) {
  }
}
static int sub_find(cl_mem m) {
  for (int i = 0; i < SUB_MAX; i++)
    if (subs[i].mem == m) return i;
  return -1;
}
WRAP cl_mem clCreateSubBuffer(cl_mem b, cl_mem_flags f, cl_buffer_create_type t, const void *i, cl_int *e) {
  NEXT(clCreateSubBuffer);
  cl_mem r = next_clCreateSubBuffer(b, f, t, i, e);
  CREATE(CL_MEM, r);
  if (r) {
    sub_lock_take();
    int k = sub_find(NULL);
    if (k < 0) sub_untracked++;
    else subs[k].mem = r, subs[k].parent = b, subs[k].seq = ++sub_seq, subs[k].refs = 1;
    atomic_flag_clear(&sub_lock);
  }
  return r;
}
WRAP cl_int clRetainMemObject(cl_mem m) { /* a view sharing its storage's buffer: references count as objects */
  NEXT(clRetainMemObject);
  cl_int st = next_clRetainMemObject(m);
  CREATE(CL_MEM, st == CL_SUCCESS);
  if (st == CL_SUCCESS) {
    sub_lock_take();
    int k = sub_find(m);
    if (k >= 0) subs[k].refs++;
    atomic_flag_clear(&sub_lock);
  }
  return st;
}
WRAP cl_int clReleaseMemObject(cl_mem m) {
  NEXT(clReleaseMemObject);
  cl_int st = next_clReleaseMemObject(m);
  RELEASE(CL_MEM, st);
  if (st == CL_SUCCESS) {
    sub_lock_take();
    int k = sub_find(m);
    if (k >= 0 && --subs[k].refs == 0) {
      sub_destroyed++;
      for (int j = 0; j < SUB_MAX; j++)
        if (subs[j].mem && j != k && subs[j].parent == subs[k].parent && subs[j].seq > subs[k].seq) {
          sub_out_of_order++;
          break;
        }
      subs[k].mem = subs[k].parent = NULL;
    }
    atomic_flag_clear(&sub_lock);
  }
  return st;
}
WRAP cl_program clCreateProgramWithSource(cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *e) {
  NEXT(clCreateProgramWithSource);
  cl_program r = next_clCreateProgramWithSource(c, n, s, l, e);
  CREATE(CL_PROG, r);
  return r;
}
WRAP cl_program clCreateProgramWithBinary(cl_context c, cl_uint n, const cl_device_id *d, const size_t *l,
                                     const unsigned char **b, cl_int *bs, cl_int *e) {
  NEXT(clCreateProgramWithBinary);
  cl_program r = next_clCreateProgramWithBinary(c, n, d, l, b, bs, e);
  CREATE(CL_PROG, r);
  return r;
}
WRAP cl_int clRetainProgram(cl_program p) { /* the context's kept programs: references count as objects */
  NEXT(clRetainProgram);
  cl_int st = next_clRetainProgram(p);
  CREATE(CL_PROG, st == CL_SUCCESS);
  return st;
}
WRAP cl_int clReleaseProgram(cl_program p) {
  NEXT(clReleaseProgram);
  cl_int st = next_clReleaseProgram(p);
  RELEASE(CL_PROG, st);
  return st;
}
WRAP cl_kernel clCreateKernel(cl_program p, const char *name, cl_int *e) {
  NEXT(clCreateKernel);
  cl_kernel r = next_clCreateKernel(p, name, e);
  CREATE(CL_KERN, r);
  return r;
}
/* (OpenCL 2.1: past the headers' target version; kiln looks it up in the
   global scope first, opencl/clone.c, so it finds this one) */
cl_kernel clCloneKernel(cl_kernel k, cl_int *e);
WRAP cl_kernel clCloneKernel(cl_kernel k, cl_int *e) {
  NEXT(clCloneKernel);
  if (!next_clCloneKernel) { /* a loader without it */
    if (e) *e = CL_INVALID_OPERATION;
    return NULL;
  }
  cl_kernel r = next_clCloneKernel(k, e);
  CREATE(CL_KERN, r);
  return r;
}
WRAP cl_int clRetainKernel(cl_kernel k) { /* a device op sharing another's kernel: references count as objects */
  NEXT(clRetainKernel);
  cl_int st = next_clRetainKernel(k);
  CREATE(CL_KERN, st == CL_SUCCESS);
  return st;
}
WRAP cl_int clReleaseKernel(cl_kernel k) {
  NEXT(clReleaseKernel);
  cl_int st = next_clReleaseKernel(k);
  RELEASE(CL_KERN, st);
  return st;
}
WRAP cl_int clReleaseEvent(cl_event ev) {
  NEXT(clReleaseEvent);
  cl_int st = next_clReleaseEvent(ev);
  RELEASE(CL_EVENT, st);
  return st;
}
WRAP cl_int clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off, const size_t *gs,
                              const size_t *ls, cl_uint nw, const cl_event *wl, cl_event *ev) {
  NEXT(clEnqueueNDRangeKernel);
  cl_int st = next_clEnqueueNDRangeKernel(q, k, dim, off, gs, ls, nw, wl, ev);
  EVENT_OUT(st, ev);
  return st;
}
WRAP cl_int clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n, void *p, cl_uint nw,
                           const cl_event *wl, cl_event *ev) {
  NEXT(clEnqueueReadBuffer);
  cl_int st = next_clEnqueueReadBuffer(q, m, b, off, n, p, nw, wl, ev);
  EVENT_OUT(st, ev);
  return st;
}
WRAP cl_int clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n, const void *p, cl_uint nw,
                            const cl_event *wl, cl_event *ev) {
  NEXT(clEnqueueWriteBuffer);
  cl_int st = next_clEnqueueWriteBuffer(q, m, b, off, n, p, nw, wl, ev);
  EVENT_OUT(st, ev);
  return st;
}
WRAP cl_int clEnqueueCopyBuffer(cl_command_queue q, cl_mem a, cl_mem b, size_t oa, size_t ob, size_t n, cl_uint nw,
                           const cl_event *wl, cl_event *ev) {
  NEXT(clEnqueueCopyBuffer);
  cl_int st = next_clEnqueueCopyBuffer(q, a, b, oa, ob, n, nw, wl, ev);
  EVENT_OUT(st, ev);
  return st;
}
WRAP cl_int clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev) {
  NEXT(clEnqueueMarkerWithWaitList);
  cl_int st = next_clEnqueueMarkerWithWaitList(q, nw, wl, ev);
  EVENT_OUT(st, ev);
  return st;
}

/* ---- process measurements ---- */

static long rss_kib(void) {
  long size = 0, res = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &size, &res) != 2) res = -1;
  fclose(f);
  return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

static int fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the directory stream's own descriptor */
}

/* ---- the cycles ---- */

static dl_api api;
static void *model_bytes[2];
static size_t model_size[2];
static float *input[2], *first_out[2];
static int n_pass, n_fail;

static void check(bool ok, const char *fmt_, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char *fmt_, ...) {
  va_list ap;
  va_start(ap, fmt_);
  printf("%s ", ok ? "ok  " : "FAIL");
  vprintf(fmt_, ap);
  printf("\n");
  va_end(ap);
  if (ok) n_pass++;
  else n_fail++;
}

/* One full cycle with model m; 0 or the failing status. */
static onnxStatus cycle(onnxBackendID id, int m, bool *mismatch) {
  const dl_model *md = &dl_models[m];
  float out[64];
  onnxBackend be = NULL;
  onnxGraph g = NULL;
  onnxEvent ev = NULL;
  onnxMemoryFenceV1 inf = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
  onnxMemoryFenceV1 of = {.tag = ONNXIFI_TAG_MEMORY_FENCE_V1, .type = ONNXIFI_SYNCHRONIZATION_EVENT};
  onnxTensorDescriptorV1 in = dl_desc(md->in_name, md->in_rank, md->in_shape, input[m]);
  onnxTensorDescriptorV1 od = dl_desc(md->out_name, md->out_rank, md->out_shape, out);
  onnxStatus st = api.InitBackend(id, NULL, &be);
  if (!st) st = api.InitGraph(be, NULL, model_size[m], model_bytes[m], 0, NULL, &g);
  if (!st) st = api.InitEvent(be, &ev);
  if (!st) st = api.SetGraphIO(g, 1, &in, 1, &od);
  if (!st) {
    inf.event = ev;
    st = api.RunGraph(g, &inf, &of);
  }
  if (!st) st = api.SignalEvent(ev);
  if (!st) st = api.WaitEvent(of.event);
  if (!st) {
    if (!first_out[m]) {
      first_out[m] = malloc(md->out_n * sizeof(float));
      if (first_out[m]) memcpy(first_out[m], out, md->out_n * sizeof(float));
    } else if (memcmp(out, first_out[m], md->out_n * sizeof(float))) {
      *mismatch = true;
    }
  }
  if (of.event && api.ReleaseEvent(of.event) && !st) st = ONNXIFI_STATUS_INTERNAL_ERROR;
  if (ev && api.ReleaseEvent(ev) && !st) st = ONNXIFI_STATUS_INTERNAL_ERROR;
  if (g && api.ReleaseGraph(g) && !st) st = ONNXIFI_STATUS_INTERNAL_ERROR;
  if (be && api.ReleaseBackend(be) && !st) st = ONNXIFI_STATUS_INTERNAL_ERROR;
  return st;
}

/* Theil-Sen slope of (x, y), per 1000 x: the median of the pairwise slopes. */
static double theil_sen(const double *x, const double *y, int n) {
  double pair[32 * 31 / 2];
  int np = 0;
  for (int i = 0; i < n && i < 32; i++)
    for (int j = i + 1; j < n && j < 32; j++) pair[np++] = (y[j] - y[i]) / (x[j] - x[i]) * 1000.0;
  for (int i = 1; i < np; i++) /* insertion sort: a few hundred values */
    for (int j = i; j > 0 && pair[j - 1] > pair[j]; j--) {
      double t = pair[j];
      pair[j] = pair[j - 1];
      pair[j - 1] = t;
    }
  return np ? (np % 2 ? pair[np / 2] : 0.5 * (pair[np / 2 - 1] + pair[np / 2])) : 0;
}

static double max_heap_slope = 1;

/* The heap in use now: the least of three reads 1 ms apart (a driver
   thread's block in flight is gone by the next read). */
static double heap_kib(void) {
  double best = 0;
  for (int r = 0; r < 3; r++) {
    if (r) nanosleep(&(struct timespec){0, 1000000}, NULL);
    double h = (double)mallinfo2().uordblks / 1024.0;
    if (!r || h < best) best = h;
  }
  return best;
}

static void run_backend(onnxBackendID id, long cycles, double max_slope) {
  char bname[64] = "?";
  size_t sz = sizeof bname;
  if (api.GetBackendInfo(id, ONNXIFI_BACKEND_NAME, bname, &sz)) snprintf(bname, sizeof bname, "?");
  (void)dl_load_ext(&api, id);
  free(first_out[0]), free(first_out[1]);
  first_out[0] = first_out[1] = NULL;
  long warm = cycles / 10 < 1000 ? 1000 : cycles / 10; /* caches and the allocator settle */
  const char *we = getenv("KILN_LIFETIME_WARMUP");
  if (we && *we) warm = strtol(we, NULL, 10);
  bool mismatch = false;
  onnxStatus st = ONNXIFI_STATUS_SUCCESS;
  for (long c = 0; c < warm && !st; c++) st = cycle(id, (int)(c % 2), &mismatch);
  if (st) {
    check(false, "%s: warm-up cycle: status %d (%s)", bname, (int)st, dl_last_error(&api));
    return;
  }
  int fd0 = fd_count();
  long cl0[CL_NKINDS];
  for (int k = 0; k < CL_NKINDS; k++) cl0[k] = atomic_load(&cl_live[k]);
  long calls0 = atomic_load(&cl_calls);
  sub_lock_take();
  long subs0 = sub_destroyed, ooo0 = sub_out_of_order, untracked0 = sub_untracked;
  atomic_flag_clear(&sub_lock);
  /* RSS at 11 points; least-squares slope */
  enum { NPTS = 21 };
  double xs[NPTS], ys[NPTS], hs[NPTS];
  int np = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long c = 0; c <= cycles && !st; c++) {
    if (c % (cycles / (NPTS - 1)) == 0 && np < NPTS) {
      xs[np] = (double)c;
      ys[np] = (double)rss_kib();
      hs[np] = heap_kib();
      np++;
    }
    if (c < cycles) st = cycle(id, (int)(c % 2), &mismatch);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  check(!st && !mismatch, "%s: %ld init/run/release cycles (after %ld warm-up), outputs bit-identical: status %d, %s, %.2f s",
        bname, cycles, warm, (int)st, mismatch ? "a mismatch" : "no mismatch", secs);
  if (st) {
    printf("     %s\n", dl_last_error(&api));
    return;
  }
  double mx = 0, my = 0, sxx = 0, sxy = 0;
  for (int i = 0; i < np; i++) mx += xs[i] / np, my += ys[i] / np;
  for (int i = 0; i < np; i++) sxx += (xs[i] - mx) * (xs[i] - mx), sxy += (xs[i] - mx) * (ys[i] - my);
  double lsq = sxx > 0 ? sxy / sxx * 1000.0 : 0; /* KiB per 1000 cycles */
  double env[NPTS]; /* lower envelope: the least heap from each sample on */
  for (int i = np - 1; i >= 0; i--) env[i] = i == np - 1 || hs[i] < env[i + 1] ? hs[i] : env[i + 1];
  double slope = theil_sen(xs, ys, np), hslope = theil_sen(xs, env, np), hraw = theil_sen(xs, hs, np);
  check(slope <= max_slope,
        "%s: RSS slope %.2f KiB per 1000 cycles (Theil-Sen; least squares %.2f; limit %.0f; RSS %.0f -> %.0f KiB)", bname,
        slope, lsq, max_slope, ys[0], ys[np - 1]);
  check(hslope <= max_heap_slope,
        "%s: heap in use (mallinfo2, all arenas) slope %.3f KiB per 1000 cycles (lower envelope, Theil-Sen; of the samples "
        "%.3f; limit %.2f; %.1f -> %.1f KiB)",
        bname, hslope, hraw, max_heap_slope, hs[0], hs[np - 1]);
  printf("     RSS (KiB) every %ld cycles:", cycles / (NPTS - 1));
  for (int i = 0; i < np; i++) printf(" %.0f", ys[i]);
  printf("\n     heap in use (KiB):");
  for (int i = 0; i < np; i++) printf(" %.1f", hs[i]);
  printf("\n");
  int fd1 = fd_count();
  check(fd0 == fd1, "%s: open file descriptors %d before, %d after", bname, fd0, fd1);
  long calls = atomic_load(&cl_calls) - calls0;
  if (calls || cl0[CL_CTX]) {
    char d[256];
    int len = 0;
    bool same = true;
    for (int k = 0; k < CL_NKINDS; k++) {
      long now = atomic_load(&cl_live[k]);
      same &= now == cl0[k];
      len += snprintf(d + len, sizeof d - (size_t)len, "%s%s %ld -> %ld", k ? ", " : "", cl_kind_names[k], cl0[k], now);
    }
    check(same, "%s: live OpenCL objects (%ld wrapped calls): %s", bname, calls, d);
    sub_lock_take();
    long nsub = sub_destroyed - subs0, ooo = sub_out_of_order - ooo0, untracked = sub_untracked - untracked0;
    atomic_flag_clear(&sub_lock);
    if (nsub || ooo || untracked)
      check(!ooo && !untracked,
            "%s: %ld sub-buffers destroyed, %ld of them while a sibling made after them lived, %ld not tracked "
            "(last made, first destroyed: NVIDIA's driver crashed otherwise)",
            bname, nsub, ooo, untracked);
    else
      printf("note %s: no sub-buffer was destroyed: their order is not checked\n", bname);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s PLUGIN.so EXAMPLES_DIR\n", argv[0]);
    return 2;
  }
  /* glibc's per-thread caches (tcache) hold freed chunks that mallinfo2
     counts as in use, so the heap measure drifts as they fill: run without
     them (re-executing this program once with the tunable set) */
  const char *tun = getenv("GLIBC_TUNABLES");
  if (!tun || !strstr(tun, "tcache_count=0")) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s%sglibc.malloc.tcache_count=0", tun ? tun : "", tun && *tun ? ":" : "");
    setenv("GLIBC_TUNABLES", buf, 1);
    execv("/proc/self/exe", argv);
    printf("note: cannot re-execute with GLIBC_TUNABLES=%s: the heap measure includes glibc's tcache\n", buf);
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* one malloc arena: glibc otherwise adds arenas (up to 8 per core) as the
     graphs' worker threads come and go, and their headers count as in use */
  mallopt(M_ARENA_MAX, 1);
  long cycles = 10000;
  const char *e = getenv("KILN_LIFETIME_CYCLES");
  if (e && *e && (cycles = strtol(e, NULL, 10)) < 10) {
    printf("KILN_LIFETIME_CYCLES=%s: at least 10\n", e);
    return 2;
  }
  double max_slope = 16;
  e = getenv("KILN_LIFETIME_MAX_SLOPE");
  if (e && *e) max_slope = strtod(e, NULL);
  e = getenv("KILN_LIFETIME_MAX_HEAP_SLOPE");
  if (e && *e) max_heap_slope = strtod(e, NULL);
  /* the OpenCL wrappers above forward to the ICD loader's functions */
  ocl_lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (dl_load(&api, argv[1])) return 2;
  for (int m = 0; m < 2; m++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[2], dl_models[m].file);
    if (!(model_bytes[m] = dl_read_file(path, &model_size[m]))) {
      printf("cannot read %s\n", path);
      return 2;
    }
    if (!(input[m] = malloc(dl_models[m].in_n * sizeof(float)))) return 2;
    for (size_t i = 0; i < dl_models[m].in_n; i++) input[m][i] = (float)((i * 37 % 101) / 50.0 - 1.0);
  }
  size_t n = 0;
  onnxBackendID ids[16];
  if (api.GetBackendIDs(NULL, &n) != ONNXIFI_STATUS_FALLBACK || !n || n > 16 || api.GetBackendIDs(ids, &n)) {
    printf("no backend offered (KILN_DEVICE=%s)\n", getenv("KILN_DEVICE") ? getenv("KILN_DEVICE") : "");
    return 2;
  }
  printf("lifetime_cycles: %ld cycles per backend, %zu backend(s)\n", cycles, n);
  for (size_t i = 0; i < n; i++) run_backend(ids[i], cycles, max_slope);
  for (size_t i = 0; i < n; i++) (void)api.ReleaseBackendID(ids[i]);
  for (int m = 0; m < 2; m++) free(model_bytes[m]), free(input[m]), free(first_out[m]);
  printf("lifetime_cycles: %d passed, %d failed\n", n_pass, n_fail);
  return n_fail ? 1 : 0;
}
