/* tests/opencl_runtime: the opencl/ runtime layer on whatever ICD the
 * environment selects (ctest runs it under PoCL and under rusticl): device
 * discovery, KILN_DEVICE tokens, kernels compared exactly, clean failures
 * (build errors with their log, oversized buffers) and the on-disk cache.
 * Exits 77 (skip) with the reason when no usable device is found. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ir/alloc.h"
#include "opencl/cache.h"
#include "opencl/device.h"
#include "opencl/runtime.h"

static int passed, failed;
#include "tests/check.h"
/* A step that must succeed for the rest to mean anything: counted as a
 * failure only when it fails; evaluates to whether it succeeded. */
#define MUST(st, what) must((st), (what), __LINE__)
static int must(kiln_status s, const char *what, int line) {
  if (s == KILN_OK) return 1;
  failed++;
  printf("FAIL %s:%d: %s: %s: %s\n", __FILE__, line, what, kiln_status_name(s), kiln_last_error());
  return 0;
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

static char tmp_root[256]; /* everything the test writes lives here */

static void remove_tree(const char *path) {
  struct stat st;
  if (lstat(path, &st)) return;
  if (S_ISDIR(st.st_mode)) {
    DIR *d = opendir(path);
    if (d) {
      struct dirent *e;
      while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[1024];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        remove_tree(sub);
      }
      closedir(d);
    }
    rmdir(path);
  } else {
    unlink(path);
  }
}

/* ---- discovery in child processes (before this process touches OpenCL) ---- */

/* Runs enumerate in a child with OCL_ICD_VENDORS=vendors; returns the
 * child's verdict: 0 = clean (no crash, KILN_OK), with the device count and
 * the notes' first bytes written to *n / notes. */
static int enumerate_in_child(const char *vendors, int *n, char *notes, size_t notes_len) {
  int fds[2];
  if (pipe(fds)) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(fds[0]);
    setenv("OCL_ICD_VENDORS", vendors, 1);
    unsetenv("RUSTICL_ENABLE"); /* rusticl then lists no device: a platform without devices */
    kiln_cl_device_list l;
    kiln_status s = kiln_cl_devices_enumerate(&l);
    char buf[1024];
    int k = snprintf(buf, sizeof buf, "%d %s", s ? -1 : l.n, s ? kiln_last_error() : l.notes);
    if (k > 0 && write(fds[1], buf, (size_t)k < sizeof buf ? (size_t)k : sizeof buf - 1) < 0) _exit(3);
    kiln_cl_devices_free(&l);
    _exit(s ? 2 : 0);
  }
  close(fds[1]);
  char buf[1024];
  ssize_t got = 0, k;
  while (got < (ssize_t)sizeof buf - 1 && (k = read(fds[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += k;
  buf[got < 0 ? 0 : got] = 0;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  *n = -1;
  notes[0] = 0;
  int off = 0;
  if (sscanf(buf, "%d %n", n, &off) >= 1) snprintf(notes, notes_len, "%s", buf + off);
  if (!WIFEXITED(status)) return 100 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return WEXITSTATUS(status);
}

static void test_discovery_edges(void) {
  char empty[300], notes[1024];
  int n = 0;
  snprintf(empty, sizeof empty, "%s/no-vendors", tmp_root);
  mkdir(empty, 0700);
  int r = enumerate_in_child(empty, &n, notes, sizeof notes);
  CHECK(r == 0 && n == 0, "zero platforms: child verdict %d, %d devices", r, n);
  CHECK(strstr(notes, "no OpenCL platform") != NULL, "zero platforms: notes say so: '%s'", notes);
  printf("  zero platforms: %s\n", notes);
  /* every vendor of the machine, rusticl without RUSTICL_ENABLE: platforms
   * that list no device are notes, not failures */
  r = enumerate_in_child("/etc/OpenCL/vendors", &n, notes, sizeof notes);
  CHECK(r == 0 && n >= 0, "all vendors: child verdict %d (crash = 100+signal)", r);
  printf("  all vendors, RUSTICL_ENABLE unset: %d device(s); notes: %s\n", n, *notes ? notes : "none");
}

/* ---- devices and tokens ---- */

static void test_devices(const kiln_cl_device_list *l) {
  for (int i = 0; i < l->n; i++) {
    const kiln_cl_device *d = &l->devices[i];
    char id[24], desc[512];
    snprintf(id, sizeof id, "%d:%d", d->platform_index, d->device_index);
    kiln_cl_device_describe(d, desc, sizeof desc);
    printf("  device %s\n    extensions: %.200s%s\n", desc, d->extensions, strlen(d->extensions) > 200 ? " ..." : "");
    printf("    max work-group %zu, work-item[0] %zu, CUs %u, global %llu MiB, local %llu KiB, max alloc %llu MiB, "
           "fp64 %d, fp16 %d\n",
           d->max_work_group_size, d->max_work_item_size0, d->compute_units,
           (unsigned long long)(d->global_mem_size >> 20), (unsigned long long)(d->local_mem_size >> 10),
           (unsigned long long)(d->max_mem_alloc_size >> 20), d->has_fp64, d->has_fp16);
    CHECK(!strcmp(d->id, id), "id '%s' is P:D '%s'", d->id, id);
    CHECK(*d->name && *d->vendor && *d->driver_version, "device %s has name, vendor, driver version", d->id);
    CHECK(d->c_major * 100 + d->c_minor >= 102, "device %s: OpenCL C %d.%d >= 1.2", d->id, d->c_major, d->c_minor);
    CHECK(d->max_work_group_size > 0 && d->max_work_item_size0 > 0 && d->compute_units > 0, "device %s limits", d->id);
    CHECK(d->global_mem_size > 0 && d->local_mem_size > 0 && d->max_mem_alloc_size > 0, "device %s memory", d->id);
    CHECK(d->has_fp64 == kiln_cl_device_has_extension(d, "cl_khr_fp64"), "fp64 flag follows the extension");
    CHECK(!kiln_cl_device_has_extension(d, "cl_khr") && !kiln_cl_device_has_extension(d, "fp64") &&
              !kiln_cl_device_has_extension(d, ""),
          "extension match is by whole token");
    CHECK(kiln_cl_device_auto_rank(d) == ((d->type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) ? 0 : 1),
          "auto rank of %s", d->id);
  }
  if (*l->notes) printf("  notes: %s\n", l->notes);
}

static void test_tokens(const kiln_cl_device_list *l) {
  int idx[16], n = -1;
  kiln_status s = kiln_cl_devices_select(l, "opencl", idx, 16, &n);
  CHECK(s == KILN_OK && n == l->n, "'opencl' selects every device: %s, %d of %d", kiln_status_name(s), n, l->n);
  for (int i = 1; i < n && !s; i++)
    CHECK(kiln_cl_device_auto_rank(&l->devices[idx[i - 1]]) <= kiln_cl_device_auto_rank(&l->devices[idx[i]]),
          "'opencl' lists GPUs/accelerators first");
  char tok[64];
  snprintf(tok, sizeof tok, "opencl:%s", l->devices[0].id);
  s = kiln_cl_devices_select(l, tok, idx, 16, &n);
  CHECK(s == KILN_OK && n == 1 && idx[0] == 0, "'%s' selects that device: %s %s", tok, kiln_status_name(s),
        kiln_last_error());
  s = kiln_cl_devices_select(l, "opencl:0:0", idx, 16, &n);
  CHECK(s == KILN_OK && n == 1 && !strcmp(l->devices[idx[0]].id, "0:0"), "'opencl:0:0': %s %s", kiln_status_name(s),
        kiln_last_error());
  s = kiln_cl_devices_select(l, "opencl:9:9", idx, 16, &n);
  CHECK(s == KILN_E_MODEL && n == 0 && strstr(kiln_last_error(), "9:9") && strstr(kiln_last_error(), "available"),
        "'opencl:9:9' is an error naming what exists: %s", kiln_last_error());
  printf("  opencl:9:9 -> %s\n", kiln_last_error());
  const char *bad[] = {"opencl:", "opencl:0", "opencl:0:", "opencl::0", "opencl:a:b", "opencl:0:0x", "opencl:-1:0",
                       "opencl:0:0:0", "opencl:1234567:0"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    s = kiln_cl_devices_select(l, bad[i], idx, 16, &n);
    CHECK(s == KILN_E_MODEL && strstr(kiln_last_error(), "malformed"), "'%s' is malformed: %s %s", bad[i],
          kiln_status_name(s), kiln_last_error());
  }
  s = kiln_cl_devices_select(l, "cpu", idx, 16, &n);
  CHECK(s == KILN_E_MODEL, "'cpu' is not an OpenCL token");
  kiln_cl_device_list none = {.devices = NULL, .n = 0, .notes = "platform 0 (X): no devices"};
  s = kiln_cl_devices_select(&none, "opencl", idx, 16, &n);
  CHECK(s == KILN_E_MODEL && strstr(kiln_last_error(), "platform 0 (X): no devices"),
        "'opencl' with no device names the reason: %s", kiln_last_error());
}

/* ---- kernels ---- */

static const char *kernels_src =
    "__kernel void vadd(__global const float *a, __global const float *b, __global float *c, uint n) {\n"
    "  size_t i = get_global_id(0);\n"
    "  if (i < n) c[i] = a[i] + b[i];\n"
    "}\n"
    "/* one partial sum per work-group (local size a power of two) */\n"
    "__kernel void reduce_sum(__global const float *x, __global float *partial, uint n, __local float *tmp) {\n"
    "  size_t i = get_global_id(0), l = get_local_id(0);\n"
    "  tmp[l] = i < n ? x[i] : 0.0f;\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  for (size_t s = get_local_size(0) / 2; s > 0; s >>= 1) {\n"
    "    if (l < s) tmp[l] += tmp[l + s];\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  }\n"
    "  if (l == 0) partial[get_group_id(0)] = tmp[0];\n"
    "}\n";

static unsigned lcg(unsigned *s) { return *s = *s * 1664525u + 1013904223u; }

/* c = a + b over n floats with the driver's local size; exact. */
static void run_vadd(kiln_cl_context *c, cl_program p, const char *what) {
  enum { N = 100003 }; /* prime: only padding makes a good local size possible */
  float *a = kiln_malloc(N * sizeof *a), *b = kiln_malloc(N * sizeof *b), *out = kiln_malloc(N * sizeof *out);
  kiln_cl_buffer ba = {0}, bb = {0}, bc = {0};
  kiln_cl_kernel k = {0};
  unsigned seed = 12345;
  if (!a || !b || !out) {
    CHECK(0, "host memory");
    goto done;
  }
  for (int i = 0; i < N; i++) {
    a[i] = (float)((int)(lcg(&seed) >> 8) - (1 << 23)) / 3.0f;
    b[i] = (float)(lcg(&seed) >> 9) * 1e-3f;
    out[i] = -1.0f;
  }
  if (!MUST(kiln_cl_kernel_create(c, p, "vadd", &k), "vadd kernel")) goto done;
  if (!MUST(kiln_cl_buffer_create(c, N * sizeof(float), &ba), "buffer a") ||
      !MUST(kiln_cl_buffer_create(c, N * sizeof(float), &bb), "buffer b") ||
      !MUST(kiln_cl_buffer_create(c, N * sizeof(float), &bc), "buffer c"))
    goto done;
  MUST(kiln_cl_buffer_write(c, &ba, 0, a, N * sizeof(float)), "write a");
  MUST(kiln_cl_buffer_write(c, &bb, 0, b, N * sizeof(float)), "write b");
  cl_uint n = N;
  size_t global = 0;
  MUST(kiln_cl_kernel_arg_buffer(&k, 0, &ba), "arg 0");
  MUST(kiln_cl_kernel_arg_buffer(&k, 1, &bb), "arg 1");
  MUST(kiln_cl_kernel_arg_buffer(&k, 2, &bc), "arg 2");
  MUST(kiln_cl_kernel_arg(&k, 3, sizeof n, &n), "arg 3");
  double t = now_ms();
  MUST(kiln_cl_launch_1d(c, &k, N, 0, &global), "launch vadd");
  if (!MUST(kiln_cl_buffer_read(c, &bc, 0, out, N * sizeof(float)), "read c")) goto done;
  printf("  %s: vadd of %d floats, global %zu, %.1f ms\n", what, N, global, now_ms() - t);
  CHECK(global == kiln_cl_pad(N, KILN_CL_GLOBAL_PAD) && global % KILN_CL_GLOBAL_PAD == 0, "global %zu padded",
        global);
  int bad = 0;
  for (int i = 0; i < N; i++)
    if (memcmp(&out[i], &(float){a[i] + b[i]}, sizeof(float)) && bad++ < 3)
      printf("    vadd[%d]: %.9g, expected %.9g\n", i, out[i], a[i] + b[i]);
  CHECK(!bad, "%s: vadd exact (%d of %d differ)", what, bad, N);
done:
  kiln_cl_kernel_free(&k);
  kiln_cl_buffer_free(&ba);
  kiln_cl_buffer_free(&bb);
  kiln_cl_buffer_free(&bc);
  kiln_free(a);
  kiln_free(b);
  kiln_free(out);
}

/* A sum of 1000003 floats in passes of work-group partial sums; the values
 * are multiples of 1/4 in [-1, 3] whose partial sums stay below 2^22 in
 * magnitude (3e6 < 2^22), so every order of
 * summation gives the same, exact float. */
static void run_reduce(kiln_cl_context *c, cl_program p) {
  enum { N = 1000003 };
  float *x = kiln_malloc(N * sizeof *x);
  kiln_cl_buffer buf[2] = {{0}, {0}};
  kiln_cl_kernel k = {0};
  double expect = 0;
  if (!x) {
    CHECK(0, "host memory");
    goto done;
  }
  for (int i = 0; i < N; i++) {
    x[i] = (float)((int)(((unsigned)i * 7919u) % 17u) - 4) * 0.25f;
    expect += x[i];
  }
  if (!MUST(kiln_cl_kernel_create(c, p, "reduce_sum", &k), "reduce kernel")) goto done;
  size_t local = 1;
  while (local * 2 <= 256 && local * 2 <= k.wg_size && local * 2 <= c->max_work_item_size0) local *= 2;
  if ((size_t)local * sizeof(float) > c->local_mem_size) local = 1;
  size_t groups = (N + local - 1) / local;
  if (!MUST(kiln_cl_buffer_create(c, N * sizeof(float), &buf[0]), "reduce input") ||
      !MUST(kiln_cl_buffer_create(c, groups * sizeof(float), &buf[1]), "reduce partials"))
    goto done;
  MUST(kiln_cl_buffer_write(c, &buf[0], 0, x, N * sizeof(float)), "write x");
  double t = now_ms();
  size_t m = N;
  int from = 0, passes = 0;
  while (m > 1) {
    cl_uint n = (cl_uint)m;
    MUST(kiln_cl_kernel_arg_buffer(&k, 0, &buf[from]), "arg 0");
    MUST(kiln_cl_kernel_arg_buffer(&k, 1, &buf[1 - from]), "arg 1");
    MUST(kiln_cl_kernel_arg(&k, 2, sizeof n, &n), "arg 2");
    MUST(kiln_cl_kernel_arg(&k, 3, local * sizeof(float), NULL), "arg 3 (local)");
    size_t global = 0;
    if (!MUST(kiln_cl_launch_1d(c, &k, m, local, &global), "launch reduce")) goto done;
    CHECK(global % local == 0 && global >= m && global - m < local, "reduce global %zu for %zu items", global, m);
    m = (m + local - 1) / local;
    from = 1 - from;
    passes++;
  }
  float got = -1;
  if (!MUST(kiln_cl_buffer_read(c, &buf[from], 0, &got, sizeof got), "read sum")) goto done;
  printf("  reduce of %d floats: local %zu, %d passes, %.1f ms: %.2f (expected %.2f)\n", N, local, passes,
         now_ms() - t, got, expect);
  CHECK(got == (float)expect, "reduction exact: %.9g vs %.9g", got, expect);
done:
  kiln_cl_kernel_free(&k);
  kiln_cl_buffer_free(&buf[0]);
  kiln_cl_buffer_free(&buf[1]);
  kiln_free(x);
}

/* Binaries this driver did not write are refused with a status, never a
 * crash: bytes of the real binary's length in a pattern, and on rusticl
 * (Mesa 22.3 aborts the process on a binary whose first word is not its
 * format version: runtime.c rusticl_frame) the real binary with its frame
 * broken — a wrong version, a length one word short, its SPIR-V's magic
 * number changed — each refused before the driver sees it. */
static void test_foreign_binaries(kiln_cl_context *c, const unsigned char *bin, size_t len, const char *opts) {
  unsigned char *junk = kiln_malloc(len);
  if (!junk) {
    CHECK(0, "out of memory for a copy of the binary");
    return;
  }
  for (size_t i = 0; i < len; i++) junk[i] = (unsigned char)(i * 7 + 3);
  cl_program p = NULL;
  kiln_status s = kiln_cl_program_from_binary(c, junk, len, opts, &p);
  CHECK(s == KILN_E_INTERNAL && !p, "a patterned binary of %zu bytes is refused: %s", len, kiln_last_error());
  if (p) kiln_cl_program_free(p);
  kiln_error_clear();
  if (c->rusticl && len >= 20) {
    static const struct {
      size_t at, cut;
      const char *what;
    } broken[] = {{0, 0, "the version word"}, {0, 4, "the length (one word cut off)"}, {12, 0, "SPIR-V's magic"}};
    for (size_t k = 0; k < sizeof broken / sizeof broken[0]; k++) {
      memcpy(junk, bin, len);
      if (!broken[k].cut) junk[broken[k].at] ^= 0x40;
      p = NULL;
      s = kiln_cl_program_from_binary(c, junk, len - broken[k].cut, opts, &p);
      CHECK(s == KILN_E_INTERNAL && !p && strstr(kiln_last_error(), "not the frame rusticl writes"),
            "rusticl: a binary with %s broken is refused before the driver: %s", broken[k].what, kiln_last_error());
      if (p) kiln_cl_program_free(p);
      kiln_error_clear();
    }
  }
  kiln_free(junk);
}

/* Builds the kernels through the cache: miss + build + store, then a hit +
 * build from the stored binary; both programs must compute the same. */
static void test_kernels(kiln_cl_context *c, const kiln_cl_device *dev) {
  const char *opts = "-cl-std=CL1.2";
  kiln_cl_key key = kiln_cl_program_key(dev, kernels_src, strlen(kernels_src), opts);
  void *bin = NULL;
  size_t len = 0;
  CHECK(!kiln_cl_cache_get(key, &bin, &len), "fresh cache directory misses");
  cl_program p = NULL;
  double t = now_ms();
  if (!MUST(kiln_cl_program_build(c, kernels_src, opts, &p), "build kernels")) return;
  double t_build = now_ms() - t;
  t = now_ms();
  if (MUST(kiln_cl_program_binary(c, p, &bin, &len), "program binary")) {
    double t_bin = now_ms() - t;
    CHECK(kiln_cl_cache_put(key, bin, len), "store the binary");
    printf("  build from source %.1f ms (the driver's own cache decides cold/warm); binary %zu bytes in %.1f ms\n",
           t_build, len, t_bin);
    kiln_free(bin);
    bin = NULL;
  }
  run_vadd(c, p, "from source");
  run_reduce(c, p);

  /* launch limits are checked before anything is enqueued */
  kiln_cl_kernel k = {0};
  if (MUST(kiln_cl_kernel_create(c, p, "vadd", &k), "vadd kernel")) {
    kiln_status s = kiln_cl_launch_1d(c, &k, 1000, k.wg_size + 1, NULL);
    CHECK(s == KILN_E_INTERNAL && strstr(kiln_last_error(), "exceeds"), "local size over the limit: %s",
          kiln_last_error());
    kiln_cl_kernel_free(&k);
  }
  kiln_status s = kiln_cl_kernel_create(c, p, "no_such_kernel", &k);
  CHECK(s != KILN_OK && !k.k && strstr(kiln_last_error(), "CL_INVALID_KERNEL_NAME"), "unknown kernel: %s",
        kiln_last_error());
  kiln_cl_program_free(p);

  if (kiln_cl_cache_get(key, &bin, &len)) {
    passed++;
    cl_program p2 = NULL;
    t = now_ms();
    if (MUST(kiln_cl_program_from_binary(c, bin, len, opts, &p2), "build from the cached binary")) {
      printf("  build from the cached binary: %.1f ms\n", now_ms() - t);
      run_vadd(c, p2, "from the cached binary");
      kiln_cl_program_free(p2);
    }
    test_foreign_binaries(c, bin, len, opts);
    kiln_free(bin);
  } else {
    CHECK(0, "the stored binary is found again");
  }
}

static void test_failures(kiln_cl_context *c) {
  static const char *broken = "__kernel void broken(__global float *x) {\n  x[0] = 1.0f +;\n}\n";
  cl_program p = (cl_program)1;
  double t = now_ms();
  kiln_status s = kiln_cl_program_build(c, broken, NULL, &p);
  const char *msg = kiln_last_error();
  printf("  syntax error (%.1f ms) -> %s\n", now_ms() - t, msg);
  CHECK(s == KILN_E_INTERNAL && p == NULL, "a syntax error fails the build: %s", kiln_status_name(s));
  CHECK(strstr(msg, "build failed") && strstr(msg, "CL_BUILD_PROGRAM_FAILURE") && strstr(msg, "error"),
        "the message carries the build log: %s", msg);
  CHECK(strstr(msg, "expected") != NULL || strstr(msg, "<source>:2") != NULL || strstr(msg, ":2:") != NULL,
        "the log points at the error: %s", msg);

  /* larger than the device's global memory: refused cleanly */
  kiln_cl_buffer b = {0};
  cl_ulong huge = c->global_mem_size + 1;
  if (huge <= (cl_ulong)SIZE_MAX) {
    s = kiln_cl_buffer_create(c, (size_t)huge, &b);
    CHECK(s == KILN_E_DEVICE_MEMORY && b.mem == NULL && strstr(kiln_last_error(), "does not fit"),
          "a buffer above global memory fails cleanly: %s %s", kiln_status_name(s), kiln_last_error());
    printf("  huge buffer -> %s\n", kiln_last_error());
  }
  s = kiln_cl_buffer_create(c, 0, &b);
  CHECK(s != KILN_OK && b.mem == NULL, "a 0-byte buffer is refused");
  if (MUST(kiln_cl_buffer_create(c, 64, &b), "64-byte buffer")) {
    char tmp[128] = {0};
    s = kiln_cl_buffer_write(c, &b, 32, tmp, 64);
    CHECK(s == KILN_E_INTERNAL && strstr(kiln_last_error(), "outside"), "write past the end: %s",
          kiln_last_error());
    s = kiln_cl_buffer_read(c, &b, (size_t)-8, tmp, 16);
    CHECK(s == KILN_E_INTERNAL, "read with an overflowing offset");
    MUST(kiln_cl_buffer_write(c, &b, 0, "0123456789abcdef", 16), "write 16 bytes");
    MUST(kiln_cl_buffer_read(c, &b, 4, tmp, 8), "read 8 bytes back");
    CHECK(!memcmp(tmp, "456789ab", 8), "buffer round trip at an offset");
    kiln_cl_buffer_free(&b);
    kiln_cl_buffer_free(&b); /* idempotent */
  }
  MUST(kiln_cl_finish(c), "finish");
  CHECK(!strcmp(kiln_cl_err_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES") &&
            !strcmp(kiln_cl_err_name(-1001), "CL_PLATFORM_NOT_FOUND_KHR") &&
            !strcmp(kiln_cl_err_name(CL_INVALID_BUFFER_SIZE), "CL_INVALID_BUFFER_SIZE") &&
            strstr(kiln_cl_err_name(-12345), "-12345"),
        "error names");
  CHECK(kiln_cl_status(CL_OUT_OF_HOST_MEMORY) == KILN_E_NOMEM && kiln_cl_status(CL_BUILD_PROGRAM_FAILURE) ==
                                                                     KILN_E_INTERNAL &&
            kiln_cl_status(CL_SUCCESS) == KILN_OK && kiln_cl_status(CL_MEM_OBJECT_ALLOCATION_FAILURE) ==
                                                          KILN_E_DEVICE_MEMORY &&
            kiln_cl_status(CL_OUT_OF_RESOURCES) == KILN_E_DEVICE_RESOURCES &&
            kiln_cl_status(CL_DEVICE_NOT_AVAILABLE) == KILN_E_DEVICE_LOST,
        "status mapping");
  CHECK(kiln_cl_pad(1000, 256) == 1024 && kiln_cl_pad(1024, 256) == 1024 && kiln_cl_pad(0, 256) == 0 &&
            kiln_cl_pad((size_t)-1, 256) == 0 && kiln_cl_pad(5, 0) == 0,
        "padding");
}

/* ---- the cache ---- */

static void key_of(kiln_cl_key *k, const char *s) {
  kiln_cl_key_init(k);
  kiln_cl_key_bytes(k, s, strlen(s));
}

static int count_tmp_files(const char *dir) {
  int n = 0;
  DIR *d = opendir(dir);
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp")) n++;
  closedir(d);
  return n;
}

static long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) ? -1 : (long)st.st_size;
}

static void flip_byte(const char *path, long off) {
  int fd = open(path, O_RDWR);
  unsigned char ch = 0;
  if (fd < 0) return;
  if (pread(fd, &ch, 1, off) == 1) {
    ch ^= 0x5a;
    if (pwrite(fd, &ch, 1, off) != 1) printf("    (pwrite failed)\n");
  }
  close(fd);
}

static void test_keys(const kiln_cl_device *dev) {
  kiln_cl_key k;
  char hex[33];
  key_of(&k, "a");
  kiln_cl_key_hex(k, hex);
  CHECK(!strcmp(hex, "d228cb696f1a8caf78912b704e4a8964"), "FNV-1a 128 of 'a': %s", hex);
  key_of(&k, "foobar");
  kiln_cl_key_hex(k, hex);
  CHECK(!strcmp(hex, "343e1662793c64bf6f0d3597ba446f18"), "FNV-1a 128 of 'foobar': %s", hex);
  CHECK(kiln_cl_fnv1a64("foobar", 6) == 0x85944171f73967e8ULL, "FNV-1a 64 of 'foobar'");
  kiln_cl_key a, b;
  kiln_cl_key_init(&a);
  kiln_cl_key_str(&a, "ab");
  kiln_cl_key_str(&a, "c");
  kiln_cl_key_init(&b);
  kiln_cl_key_str(&b, "a");
  kiln_cl_key_str(&b, "bc");
  CHECK(a.hi != b.hi || a.lo != b.lo, "fields do not run together");
  kiln_cl_key_init(&a);
  kiln_cl_key_str(&a, NULL);
  kiln_cl_key_init(&b);
  kiln_cl_key_str(&b, "");
  CHECK(a.hi != b.hi || a.lo != b.lo, "NULL and \"\" differ");
  kiln_cl_key p0 = kiln_cl_program_key(dev, "src", 3, "-O");
  kiln_cl_key p1 = kiln_cl_program_key(dev, "src", 3, "-O");
  kiln_cl_key p2 = kiln_cl_program_key(dev, "src", 3, "");
  kiln_cl_key p3 = kiln_cl_program_key(dev, "srd", 3, "-O");
  kiln_cl_device other = *dev;
  other.driver_version = "another driver";
  kiln_cl_key p4 = kiln_cl_program_key(&other, "src", 3, "-O");
  CHECK(p0.hi == p1.hi && p0.lo == p1.lo, "program key is deterministic");
  CHECK(p0.lo != p2.lo && p0.lo != p3.lo && p0.lo != p4.lo, "options, source and driver version change the key");
}

static void test_cache_dirs(void) {
  char buf[512];
  char *saved = getenv("KILN_CACHE_DIR") ? kiln_strdup(getenv("KILN_CACHE_DIR")) : NULL;
  setenv("KILN_CACHE_DIR", "/some/where", 1);
  CHECK(kiln_cl_cache_dir(buf, sizeof buf) && !strcmp(buf, "/some/where"), "KILN_CACHE_DIR: %s", buf);
  CHECK(kiln_cl_cache_enabled(), "the cache is on");
  setenv("KILN_CACHE_DIR", "off", 1);
  CHECK(!kiln_cl_cache_enabled() && !kiln_cl_cache_dir(buf, sizeof buf), "KILN_CACHE_DIR=off turns it off");
  setenv("KILN_CACHE_DIR", "", 1);
  CHECK(!kiln_cl_cache_enabled() && !kiln_cl_cache_dir(buf, sizeof buf), "KILN_CACHE_DIR= (empty) turns it off");
  kiln_cl_cache_stats s0, s1;
  kiln_cl_cache_stats_get(&s0);
  kiln_cl_key k;
  kiln_cl_key_init(&k);
  void *got = NULL;
  size_t len = 0;
  CHECK(!kiln_cl_cache_put(k, "x", 1) && !kiln_cl_cache_get(k, &got, &len) && !got, "off: no put, no hit");
  kiln_cl_cache_stats_get(&s1);
  CHECK(s1.write_failures == s0.write_failures && s1.warnings == s0.warnings, "off: no failure, no warning");
  unsetenv("KILN_CACHE_DIR");
  char *xdg = getenv("XDG_CACHE_HOME") ? kiln_strdup(getenv("XDG_CACHE_HOME")) : NULL;
  char *home = getenv("HOME") ? kiln_strdup(getenv("HOME")) : NULL;
  setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
  CHECK(kiln_cl_cache_dir(buf, sizeof buf) && !strcmp(buf, "/xdg/cache/kiln"), "XDG_CACHE_HOME: %s", buf);
  setenv("XDG_CACHE_HOME", "relative/cache", 1);
  setenv("HOME", "/home/someone", 1);
  CHECK(kiln_cl_cache_dir(buf, sizeof buf) && !strcmp(buf, "/home/someone/.cache/kiln"),
        "a relative XDG_CACHE_HOME is ignored: %s", buf);
  unsetenv("XDG_CACHE_HOME");
  CHECK(kiln_cl_cache_dir(buf, sizeof buf) && !strcmp(buf, "/home/someone/.cache/kiln"), "HOME: %s", buf);
  unsetenv("HOME");
  CHECK(!kiln_cl_cache_dir(buf, sizeof buf), "no directory can be named");
  if (xdg) setenv("XDG_CACHE_HOME", xdg, 1);
  if (home) setenv("HOME", home, 1);
  if (saved) setenv("KILN_CACHE_DIR", saved, 1);
  kiln_free(xdg);
  kiln_free(home);
  kiln_free(saved);
}

static void test_cache(void) {
  char dir[512], path[1024];
  snprintf(dir, sizeof dir, "%s/cache/nested/dir", tmp_root);
  setenv("KILN_CACHE_DIR", dir, 1);
  kiln_cl_cache_stats s0, s1;
  kiln_cl_cache_stats_get(&s0);
  kiln_cl_key k;
  key_of(&k, "entry one");
  static unsigned char payload[5000];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (unsigned char)(i * 31 + 7);
  void *got = NULL;
  size_t len = 0;
  CHECK(!kiln_cl_cache_get(k, &got, &len) && !got, "miss before put");
  CHECK(kiln_cl_cache_put(k, payload, sizeof payload), "put creates the directories and stores");
  CHECK(kiln_cl_cache_get(k, &got, &len) && len == sizeof payload && !memcmp(got, payload, len), "round trip");
  kiln_free(got);
  CHECK(count_tmp_files(dir) == 0, "no temporary file is left behind");
  payload[0] ^= 1;
  CHECK(kiln_cl_cache_put(k, payload, sizeof payload), "overwrite");
  CHECK(kiln_cl_cache_get(k, &got, &len) && len == sizeof payload && !memcmp(got, payload, len),
        "the new payload replaces the old");
  kiln_free(got);
  kiln_cl_key e;
  key_of(&e, "empty");
  CHECK(kiln_cl_cache_put(e, "", 0) && kiln_cl_cache_get(e, &got, &len) && len == 0, "empty payload round trip");
  kiln_free(got);

  CHECK(kiln_cl_cache_path(k, path, sizeof path) && file_size(path) == 48 + (long)sizeof payload,
        "entry file: header + payload (%ld bytes)", file_size(path));
  /* truncated: detected, deleted, rebuilt by the next put */
  kiln_cl_cache_stats_get(&s1);
  CHECK(truncate(path, file_size(path) - 5) == 0, "truncate the entry");
  CHECK(!kiln_cl_cache_get(k, &got, &len) && !got, "a truncated entry is a miss");
  kiln_cl_cache_stats c1;
  kiln_cl_cache_stats_get(&c1);
  CHECK(c1.corrupt == s1.corrupt + 1 && file_size(path) < 0, "counted as corrupt and deleted");
  CHECK(kiln_cl_cache_put(k, payload, sizeof payload) && kiln_cl_cache_get(k, &got, &len) && len == sizeof payload,
        "rebuilt after truncation");
  kiln_free(got);
  CHECK(truncate(path, 10) == 0 && !kiln_cl_cache_get(k, &got, &len), "a cut header is a miss");
  /* corrupted payload byte: checksum */
  CHECK(kiln_cl_cache_put(k, payload, sizeof payload), "store again");
  flip_byte(path, 48 + 1234);
  CHECK(!kiln_cl_cache_get(k, &got, &len) && file_size(path) < 0, "a corrupted payload is a miss and deleted");
  CHECK(kiln_cl_cache_put(k, payload, sizeof payload), "store again");
  flip_byte(path, 20); /* inside the stored key */
  CHECK(!kiln_cl_cache_get(k, &got, &len) && file_size(path) < 0, "an entry under another key is a miss");
  CHECK(kiln_cl_cache_put(k, payload, sizeof payload), "store again");
  flip_byte(path, 2); /* magic */
  CHECK(!kiln_cl_cache_get(k, &got, &len), "bad magic is a miss");
  kiln_cl_cache_stats_get(&c1);
  CHECK(c1.corrupt == s1.corrupt + 5, "five damaged entries counted (%llu)",
        (unsigned long long)(c1.corrupt - s1.corrupt));

  /* unwritable: the directory's parent is a regular file (fails for root too) */
  char file[600], bad[700];
  snprintf(file, sizeof file, "%s/a-file", tmp_root);
  FILE *f = fopen(file, "w");
  if (f) fclose(f);
  snprintf(bad, sizeof bad, "%s/cache", file);
  setenv("KILN_CACHE_DIR", bad, 1);
  char logpath[600];
  snprintf(logpath, sizeof logpath, "%s/stderr.txt", tmp_root);
  fflush(stderr);
  int saved_fd = dup(2), log_fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  char *saved_log = getenv("KILN_LOG") ? kiln_strdup(getenv("KILN_LOG")) : NULL;
  setenv("KILN_LOG", "warn", 1);
  kiln_cl_cache_stats w0, w1;
  kiln_cl_cache_stats_get(&w0);
  bool p1 = true, p2 = true, g1 = true;
  if (saved_fd >= 0 && log_fd >= 0 && dup2(log_fd, 2) >= 0) {
    p1 = kiln_cl_cache_put(k, payload, sizeof payload);
    p2 = kiln_cl_cache_put(e, payload, 10);
    g1 = kiln_cl_cache_get(k, &got, &len);
    fflush(stderr);
    dup2(saved_fd, 2);
  }
  if (saved_fd >= 0) close(saved_fd);
  if (log_fd >= 0) close(log_fd);
  if (saved_log) setenv("KILN_LOG", saved_log, 1);
  else unsetenv("KILN_LOG");
  kiln_free(saved_log);
  kiln_cl_cache_stats_get(&w1);
  CHECK(!p1 && !p2 && !g1, "an unusable directory: puts fail, gets miss");
  CHECK(w1.warnings == w0.warnings + 1 && w1.write_failures == w0.write_failures + 2,
        "warned once for two failed puts (%llu warnings)", (unsigned long long)(w1.warnings - w0.warnings));
  char text[2048] = {0};
  f = fopen(logpath, "r");
  size_t tn = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[tn] = 0;
  int lines = 0;
  for (const char *q = strstr(text, "kiln[warn]"); q; q = strstr(q + 1, "kiln[warn]")) lines++;
  CHECK(lines == 1 && strstr(text, "a-file/cache") && strstr(text, "without a cache"),
        "one warning line naming the directory: '%s'", text);
  printf("  unwritable directory -> %s", text);
  setenv("KILN_CACHE_DIR", dir, 1);
  CHECK(kiln_cl_cache_put(k, payload, sizeof payload) && kiln_cl_cache_get(k, &got, &len), "usable again");
  kiln_free(got);
  kiln_cl_cache_stats_get(&s1);
  printf("  cache counters: %llu hits, %llu misses, %llu corrupt, %llu writes, %llu write failures\n",
         (unsigned long long)(s1.hits - s0.hits), (unsigned long long)(s1.misses - s0.misses),
         (unsigned long long)(s1.corrupt - s0.corrupt), (unsigned long long)(s1.writes - s0.writes),
         (unsigned long long)(s1.write_failures - s0.write_failures));
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  double t0 = now_ms();
  snprintf(tmp_root, sizeof tmp_root, "/tmp/kiln-opencl-test-XXXXXX");
  if (!mkdtemp(tmp_root)) {
    printf("opencl_runtime: cannot create a temporary directory\n");
    return 1;
  }
  char cache_dir[300];
  snprintf(cache_dir, sizeof cache_dir, "%s/program-cache", tmp_root);
  setenv("KILN_CACHE_DIR", cache_dir, 1); /* never the user's cache */

  printf("discovery edge cases (child processes):\n");
  test_discovery_edges();

  kiln_cl_device_list l;
  if (!MUST(kiln_cl_devices_enumerate(&l), "enumerate")) {
    remove_tree(tmp_root);
    printf("opencl_runtime: %d passed, %d failed\n", passed, failed);
    return 1;
  }
  const char *icd = getenv("OCL_ICD_VENDORS");
  printf("devices under OCL_ICD_VENDORS=%s: %d\n", icd ? icd : "(unset)", l.n);
  if (!l.n) {
    printf("opencl_runtime: SKIP: no usable OpenCL device (%s)\n", *l.notes ? l.notes : "no reason given");
    kiln_cl_devices_free(&l);
    remove_tree(tmp_root);
    return 77;
  }
  test_devices(&l);
  printf("KILN_DEVICE tokens:\n");
  test_tokens(&l);
  printf("cache:\n");
  test_keys(&l.devices[0]);
  test_cache_dirs();
  test_cache();

  int idx[16], n = 0;
  if (MUST(kiln_cl_devices_select(&l, "opencl", idx, 16, &n), "select")) {
    const kiln_cl_device *dev = &l.devices[idx[0]];
    kiln_cl_context *c = NULL;
    double t = now_ms();
    if (MUST(kiln_cl_context_create(dev, &c), "context")) {
      printf("device %s: context in %.1f ms\n", dev->id, now_ms() - t);
      test_kernels(c, dev);
      test_failures(c);
      kiln_cl_context_free(c);
    }
  }
  kiln_cl_context_free(NULL);
  kiln_cl_devices_free(&l);
  kiln_cl_devices_free(&l); /* idempotent */
  remove_tree(tmp_root);
  printf("total %.0f ms\n", now_ms() - t0);
  printf("opencl_runtime: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
