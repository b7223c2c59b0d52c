/* plugin/fault_cl: the fault build's wrappers of the OpenCL and CLBlast
 * calls kiln makes (linked with -Wl,--wrap=clCreateBuffer,... into
 * libonnxifi-kiln-fault.so only; see plugin/fault.h). An armed call fails
 * with the error a driver gives when it runs out of what that call needs
 * (CL_MEM_OBJECT_ALLOCATION_FAILURE for memory, CL_OUT_OF_RESOURCES for
 * the rest); a failed clBuildProgram is a real one: every program made
 * from source starts with a guarded #error that the failing build turns
 * on, so the driver's own build log reaches kiln's message. Creations and
 * releases are counted (live objects) so a test sees a leaked buffer,
 * program, kernel, event, context or queue. */
#include <CL/cl.h>
#include <clblast_c.h>
#include <stdio.h>
#include <string.h>

#include "plugin/fault.h"
#include "plugin/fault_int.h"

#define HIT(name) kiln_fault_hit(KILN_FAULT_OPENCL, name)
#define SET_ERR(p, e) \
  do {                \
    if (p) *(p) = e;  \
  } while (0)

/* ---- creations ---- */

cl_context __real_clCreateContext(const cl_context_properties *, cl_uint, const cl_device_id *,
                                  void(CL_CALLBACK *)(const char *, const void *, size_t, void *), void *, cl_int *);
cl_context __wrap_clCreateContext(const cl_context_properties *props, cl_uint n, const cl_device_id *devs,
                                  void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *user,
                                  cl_int *err);
cl_context __wrap_clCreateContext(const cl_context_properties *props, cl_uint n, const cl_device_id *devs,
                                  void(CL_CALLBACK *notify)(const char *, const void *, size_t, void *), void *user,
                                  cl_int *err) {
  if (HIT("clCreateContext")) {
    SET_ERR(err, CL_OUT_OF_HOST_MEMORY);
    return NULL;
  }
  cl_context c = __real_clCreateContext(props, n, devs, notify, user, err);
  if (c) kiln_fault_live(KILN_FAULT_LIVE_CL_CONTEXT, 1);
  return c;
}

cl_command_queue __real_clCreateCommandQueue(cl_context, cl_device_id, cl_command_queue_properties, cl_int *);
cl_command_queue __wrap_clCreateCommandQueue(cl_context ctx, cl_device_id dev, cl_command_queue_properties p,
                                             cl_int *err);
cl_command_queue __wrap_clCreateCommandQueue(cl_context ctx, cl_device_id dev, cl_command_queue_properties p,
                                             cl_int *err) {
  if (HIT("clCreateCommandQueue")) {
    SET_ERR(err, CL_OUT_OF_RESOURCES);
    return NULL;
  }
  cl_command_queue q = __real_clCreateCommandQueue(ctx, dev, p, err);
  if (q) kiln_fault_live(KILN_FAULT_LIVE_CL_CONTEXT, 1);
  return q;
}

cl_mem __real_clCreateBuffer(cl_context, cl_mem_flags, size_t, void *, cl_int *);
cl_mem __wrap_clCreateBuffer(cl_context ctx, cl_mem_flags flags, size_t size, void *host, cl_int *err);
cl_mem __wrap_clCreateBuffer(cl_context ctx, cl_mem_flags flags, size_t size, void *host, cl_int *err) {
  if (HIT("clCreateBuffer")) {
    SET_ERR(err, CL_MEM_OBJECT_ALLOCATION_FAILURE);
    return NULL;
  }
  cl_mem m = __real_clCreateBuffer(ctx, flags, size, host, err);
  if (m) kiln_fault_live(KILN_FAULT_LIVE_CL_MEM, 1);
  return m;
}

cl_mem __real_clCreateSubBuffer(cl_mem, cl_mem_flags, cl_buffer_create_type, const void *, cl_int *);
cl_mem __wrap_clCreateSubBuffer(cl_mem b, cl_mem_flags flags, cl_buffer_create_type t, const void *info,
                                cl_int *err);
cl_mem __wrap_clCreateSubBuffer(cl_mem b, cl_mem_flags flags, cl_buffer_create_type t, const void *info,
                                cl_int *err) {
  if (HIT("clCreateSubBuffer")) {
    SET_ERR(err, CL_OUT_OF_RESOURCES);
    return NULL;
  }
  cl_mem m = __real_clCreateSubBuffer(b, flags, t, info, err);
  if (m) kiln_fault_live(KILN_FAULT_LIVE_CL_MEM, 1);
  return m;
}

/* The guard every source program starts with (three lines). */
#define INJECT_DEFINE "KILN_INJECTED_BUILD_FAILURE"
static const char guard[] = "#ifdef " INJECT_DEFINE "\n#error \"kiln fault injection: injected build failure\"\n#endif\n";

cl_program __real_clCreateProgramWithSource(cl_context, cl_uint, const char **, const size_t *, cl_int *);
cl_program __wrap_clCreateProgramWithSource(cl_context ctx, cl_uint count, const char **strings,
                                            const size_t *lengths, cl_int *err);
cl_program __wrap_clCreateProgramWithSource(cl_context ctx, cl_uint count, const char **strings,
                                            const size_t *lengths, cl_int *err) {
  if (HIT("clCreateProgramWithSource")) {
    SET_ERR(err, CL_OUT_OF_HOST_MEMORY);
    return NULL;
  }
  cl_program p;
  if (count >= 1 && count < 16 && strings) {
    const char *s[16];
    size_t l[16];
    s[0] = guard;
    l[0] = sizeof guard - 1;
    for (cl_uint i = 0; i < count; i++) {
      s[i + 1] = strings[i];
      l[i + 1] = lengths && lengths[i] ? lengths[i] : (strings[i] ? strlen(strings[i]) : 0);
    }
    p = __real_clCreateProgramWithSource(ctx, count + 1, s, l, err);
  } else {
    p = __real_clCreateProgramWithSource(ctx, count, strings, lengths, err);
  }
  if (p) kiln_fault_live(KILN_FAULT_LIVE_CL_PROGRAM, 1);
  return p;
}

cl_program __real_clCreateProgramWithBinary(cl_context, cl_uint, const cl_device_id *, const size_t *,
                                            const unsigned char **, cl_int *, cl_int *);
cl_program __wrap_clCreateProgramWithBinary(cl_context ctx, cl_uint n, const cl_device_id *devs, const size_t *lens,
                                            const unsigned char **bins, cl_int *bin_status, cl_int *err);
cl_program __wrap_clCreateProgramWithBinary(cl_context ctx, cl_uint n, const cl_device_id *devs, const size_t *lens,
                                            const unsigned char **bins, cl_int *bin_status, cl_int *err) {
  if (HIT("clCreateProgramWithBinary")) {
    SET_ERR(err, CL_OUT_OF_RESOURCES);
    return NULL;
  }
  cl_program p = __real_clCreateProgramWithBinary(ctx, n, devs, lens, bins, bin_status, err);
  if (p) kiln_fault_live(KILN_FAULT_LIVE_CL_PROGRAM, 1);
  return p;
}

cl_int __real_clBuildProgram(cl_program, cl_uint, const cl_device_id *, const char *,
                             void(CL_CALLBACK *)(cl_program, void *), void *);
cl_int __wrap_clBuildProgram(cl_program p, cl_uint n, const cl_device_id *devs, const char *opts,
                             void(CL_CALLBACK *notify)(cl_program, void *), void *user);
cl_int __wrap_clBuildProgram(cl_program p, cl_uint n, const cl_device_id *devs, const char *opts,
                             void(CL_CALLBACK *notify)(cl_program, void *), void *user) {
  if (!HIT("clBuildProgram")) return __real_clBuildProgram(p, n, devs, opts, notify, user);
  /* a real failed build of a source program (its log names the #error);
     a program from a binary has no source to fail: its build is refused */
  char o[4096];
  snprintf(o, sizeof o, "%s -D" INJECT_DEFINE, opts ? opts : "");
  cl_int e = __real_clBuildProgram(p, n, devs, o, notify, user);
  return e ? e : CL_BUILD_PROGRAM_FAILURE;
}

cl_kernel __real_clCreateKernel(cl_program, const char *, cl_int *);
cl_kernel __wrap_clCreateKernel(cl_program p, const char *name, cl_int *err);
cl_kernel __wrap_clCreateKernel(cl_program p, const char *name, cl_int *err) {
  if (HIT("clCreateKernel")) {
    SET_ERR(err, CL_OUT_OF_RESOURCES);
    return NULL;
  }
  cl_kernel k = __real_clCreateKernel(p, name, err);
  if (k) kiln_fault_live(KILN_FAULT_LIVE_CL_KERNEL, 1);
  return k;
}

/* One more reference to an object (failed at its fault point, counted as
 * a live object like a creation): clRetainKernel, a device op sharing
 * another's kernel object (kiln_cl_kernel_share); clRetainProgram, the
 * context's kept programs and a preload's thread holding a program it
 * handed over while it makes its kernels. */
#define RETAIN(fn, type, what)                      \
  cl_int __real_##fn(type);                         \
  cl_int __wrap_##fn(type x);                       \
  cl_int __wrap_##fn(type x) {                      \
    if (HIT(#fn)) return CL_OUT_OF_RESOURCES;       \
    cl_int e = __real_##fn(x);                      \
    if (!e) kiln_fault_live(what, 1);               \
    return e;                                       \
  }
RETAIN(clRetainKernel, cl_kernel, KILN_FAULT_LIVE_CL_KERNEL)
RETAIN(clRetainProgram, cl_program, KILN_FAULT_LIVE_CL_PROGRAM)

/* clCloneKernel (OpenCL 2.1), which kiln calls through kiln_cl_clone_raw
 * (opencl/clone.c: looked up at run time) */
cl_kernel __real_kiln_cl_clone_raw(cl_kernel, cl_int *);
cl_kernel __wrap_kiln_cl_clone_raw(cl_kernel src, cl_int *err);
cl_kernel __wrap_kiln_cl_clone_raw(cl_kernel src, cl_int *err) {
  if (HIT("clCloneKernel")) {
    SET_ERR(err, CL_OUT_OF_RESOURCES);
    return NULL;
  }
  cl_kernel k = __real_kiln_cl_clone_raw(src, err);
  if (k) kiln_fault_live(KILN_FAULT_LIVE_CL_KERNEL, 1);
  return k;
}

/* ---- queries and arguments ---- */

cl_int __real_clSetKernelArg(cl_kernel, cl_uint, size_t, const void *);
cl_int __wrap_clSetKernelArg(cl_kernel k, cl_uint i, size_t n, const void *v);
cl_int __wrap_clSetKernelArg(cl_kernel k, cl_uint i, size_t n, const void *v) {
  return HIT("clSetKernelArg") ? CL_OUT_OF_RESOURCES : __real_clSetKernelArg(k, i, n, v);
}

cl_int __real_clGetKernelWorkGroupInfo(cl_kernel, cl_device_id, cl_kernel_work_group_info, size_t, void *, size_t *);
cl_int __wrap_clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id d, cl_kernel_work_group_info w, size_t n, void *v,
                                       size_t *r);
cl_int __wrap_clGetKernelWorkGroupInfo(cl_kernel k, cl_device_id d, cl_kernel_work_group_info w, size_t n, void *v,
                                       size_t *r) {
  return HIT("clGetKernelWorkGroupInfo") ? CL_OUT_OF_RESOURCES : __real_clGetKernelWorkGroupInfo(k, d, w, n, v, r);
}

cl_int __real_clGetProgramInfo(cl_program, cl_program_info, size_t, void *, size_t *);
cl_int __wrap_clGetProgramInfo(cl_program p, cl_program_info w, size_t n, void *v, size_t *r);
cl_int __wrap_clGetProgramInfo(cl_program p, cl_program_info w, size_t n, void *v, size_t *r) {
  return HIT("clGetProgramInfo") ? CL_OUT_OF_HOST_MEMORY : __real_clGetProgramInfo(p, w, n, v, r);
}

/* ---- commands ---- */

static void new_event(cl_int e, cl_event *ev) {
  if (!e && ev && *ev) kiln_fault_live(KILN_FAULT_LIVE_CL_EVENT, 1);
}

cl_int __real_clEnqueueNDRangeKernel(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *,
                                     const size_t *, cl_uint, const cl_event *, cl_event *);
cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off,
                                     const size_t *gsz, const size_t *lsz, cl_uint nw, const cl_event *w,
                                     cl_event *ev);
cl_int __wrap_clEnqueueNDRangeKernel(cl_command_queue q, cl_kernel k, cl_uint dim, const size_t *off,
                                     const size_t *gsz, const size_t *lsz, cl_uint nw, const cl_event *w,
                                     cl_event *ev) {
  if (HIT("clEnqueueNDRangeKernel")) return CL_OUT_OF_RESOURCES;
  cl_int e = __real_clEnqueueNDRangeKernel(q, k, dim, off, gsz, lsz, nw, w, ev);
  new_event(e, ev);
  return e;
}

cl_int __real_clEnqueueReadBuffer(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void *, cl_uint,
                                  const cl_event *, cl_event *);
cl_int __wrap_clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n, void *p, cl_uint nw,
                                  const cl_event *w, cl_event *ev);
cl_int __wrap_clEnqueueReadBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n, void *p, cl_uint nw,
                                  const cl_event *w, cl_event *ev) {
  if (HIT("clEnqueueReadBuffer")) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  cl_int e = __real_clEnqueueReadBuffer(q, m, b, off, n, p, nw, w, ev);
  new_event(e, ev);
  return e;
}

cl_int __real_clEnqueueWriteBuffer(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void *, cl_uint,
                                   const cl_event *, cl_event *);
cl_int __wrap_clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n, const void *p,
                                   cl_uint nw, const cl_event *w, cl_event *ev);
cl_int __wrap_clEnqueueWriteBuffer(cl_command_queue q, cl_mem m, cl_bool b, size_t off, size_t n, const void *p,
                                   cl_uint nw, const cl_event *w, cl_event *ev) {
  if (HIT("clEnqueueWriteBuffer")) return CL_MEM_OBJECT_ALLOCATION_FAILURE;
  cl_int e = __real_clEnqueueWriteBuffer(q, m, b, off, n, p, nw, w, ev);
  new_event(e, ev);
  return e;
}

cl_int __real_clEnqueueCopyBuffer(cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint,
                                  const cl_event *, cl_event *);
cl_int __wrap_clEnqueueCopyBuffer(cl_command_queue q, cl_mem a, cl_mem b, size_t ao, size_t bo, size_t n, cl_uint nw,
                                  const cl_event *w, cl_event *ev);
cl_int __wrap_clEnqueueCopyBuffer(cl_command_queue q, cl_mem a, cl_mem b, size_t ao, size_t bo, size_t n, cl_uint nw,
                                  const cl_event *w, cl_event *ev) {
  if (HIT("clEnqueueCopyBuffer")) return CL_OUT_OF_RESOURCES;
  cl_int e = __real_clEnqueueCopyBuffer(q, a, b, ao, bo, n, nw, w, ev);
  new_event(e, ev);
  return e;
}

cl_int __real_clEnqueueMarkerWithWaitList(cl_command_queue, cl_uint, const cl_event *, cl_event *);
cl_int __wrap_clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *w, cl_event *ev);
cl_int __wrap_clEnqueueMarkerWithWaitList(cl_command_queue q, cl_uint nw, const cl_event *w, cl_event *ev) {
  if (HIT("clEnqueueMarkerWithWaitList")) return CL_OUT_OF_RESOURCES;
  cl_int e = __real_clEnqueueMarkerWithWaitList(q, nw, w, ev);
  new_event(e, ev);
  return e;
}

cl_int __real_clFinish(cl_command_queue);
cl_int __wrap_clFinish(cl_command_queue q);
cl_int __wrap_clFinish(cl_command_queue q) {
  /* the queue is drained even when the failure is injected: a real
     failure also leaves no work behind that could touch freed memory */
  cl_int e = __real_clFinish(q);
  return HIT("clFinish") ? CL_OUT_OF_RESOURCES : e;
}

cl_int __real_clWaitForEvents(cl_uint, const cl_event *);
cl_int __wrap_clWaitForEvents(cl_uint n, const cl_event *l);
cl_int __wrap_clWaitForEvents(cl_uint n, const cl_event *l) {
  cl_int e = __real_clWaitForEvents(n, l);
  return HIT("clWaitForEvents") ? CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST : e;
}

/* ---- releases (counted, never failed) ---- */

#define RELEASE(fn, type, what)                   \
  cl_int __real_##fn(type);                       \
  cl_int __wrap_##fn(type x);                     \
  cl_int __wrap_##fn(type x) {                    \
    cl_int e = __real_##fn(x);                    \
    if (!e) kiln_fault_live(what, -1);            \
    return e;                                     \
  }
RELEASE(clReleaseMemObject, cl_mem, KILN_FAULT_LIVE_CL_MEM)
RELEASE(clReleaseProgram, cl_program, KILN_FAULT_LIVE_CL_PROGRAM)
RELEASE(clReleaseKernel, cl_kernel, KILN_FAULT_LIVE_CL_KERNEL)
RELEASE(clReleaseEvent, cl_event, KILN_FAULT_LIVE_CL_EVENT)
RELEASE(clReleaseContext, cl_context, KILN_FAULT_LIVE_CL_CONTEXT)
RELEASE(clReleaseCommandQueue, cl_command_queue, KILN_FAULT_LIVE_CL_CONTEXT)

/* ---- CLBlast ---- */

CLBlastStatusCode __real_CLBlastSgemm(const CLBlastLayout, const CLBlastTranspose, const CLBlastTranspose,
                                      const size_t, const size_t, const size_t, const float, const cl_mem,
                                      const size_t, const size_t, const cl_mem, const size_t, const size_t,
                                      const float, cl_mem, const size_t, const size_t, cl_command_queue *,
                                      cl_event *);
CLBlastStatusCode __wrap_CLBlastSgemm(const CLBlastLayout l, const CLBlastTranspose ta, const CLBlastTranspose tb,
                                      const size_t m, const size_t n, const size_t k, const float al, const cl_mem a,
                                      const size_t ao, const size_t lda, const cl_mem b, const size_t bo,
                                      const size_t ldb, const float be, cl_mem c, const size_t co, const size_t ldc,
                                      cl_command_queue *q, cl_event *ev);
CLBlastStatusCode __wrap_CLBlastSgemm(const CLBlastLayout l, const CLBlastTranspose ta, const CLBlastTranspose tb,
                                      const size_t m, const size_t n, const size_t k, const float al, const cl_mem a,
                                      const size_t ao, const size_t lda, const cl_mem b, const size_t bo,
                                      const size_t ldb, const float be, cl_mem c, const size_t co, const size_t ldc,
                                      cl_command_queue *q, cl_event *ev) {
  if (HIT("CLBlastSgemm")) return CLBlastOpenCLOutOfResources;
  return __real_CLBlastSgemm(l, ta, tb, m, n, k, al, a, ao, lda, b, bo, ldb, be, c, co, ldc, q, ev);
}

CLBlastStatusCode __real_CLBlastSgemmBatched(const CLBlastLayout, const CLBlastTranspose, const CLBlastTranspose,
                                             const size_t, const size_t, const size_t, const float *, const cl_mem,
                                             const size_t *, const size_t, const cl_mem, const size_t *,
                                             const size_t, const float *, cl_mem, const size_t *, const size_t,
                                             const size_t, cl_command_queue *, cl_event *);
CLBlastStatusCode __wrap_CLBlastSgemmBatched(const CLBlastLayout l, const CLBlastTranspose ta,
                                             const CLBlastTranspose tb, const size_t m, const size_t n,
                                             const size_t k, const float *al, const cl_mem a, const size_t *ao,
                                             const size_t lda, const cl_mem b, const size_t *bo, const size_t ldb,
                                             const float *be, cl_mem c, const size_t *co, const size_t ldc,
                                             const size_t batch, cl_command_queue *q, cl_event *ev);
CLBlastStatusCode __wrap_CLBlastSgemmBatched(const CLBlastLayout l, const CLBlastTranspose ta,
                                             const CLBlastTranspose tb, const size_t m, const size_t n,
                                             const size_t k, const float *al, const cl_mem a, const size_t *ao,
                                             const size_t lda, const cl_mem b, const size_t *bo, const size_t ldb,
                                             const float *be, cl_mem c, const size_t *co, const size_t ldc,
                                             const size_t batch, cl_command_queue *q, cl_event *ev) {
  if (HIT("CLBlastSgemmBatched")) return CLBlastOpenCLOutOfResources;
  return __real_CLBlastSgemmBatched(l, ta, tb, m, n, k, al, a, ao, lda, b, bo, ldb, be, c, co, ldc, batch, q, ev);
}
