/* opencl/clone: clCloneKernel (OpenCL 2.1), found at run time. kiln is
 * built against OpenCL 1.2 headers and links the ICD loader's 1.x entry
 * points only: a link-time reference to clCloneKernel, even a weak one,
 * makes the loader's OPENCL_2.1 symbol version a hard requirement, and the
 * plugin would not load with an older loader. A separate file so that the
 * fault build can wrap kiln_cl_clone_raw (-Wl,--wrap) like the OpenCL calls
 * it wraps. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "opencl/runtime.h"

#include <dlfcn.h>
#include <pthread.h>

typedef cl_kernel(CL_API_CALL *clone_fn)(cl_kernel, cl_int *);
static clone_fn clone_ptr;
static pthread_once_t clone_once = PTHREAD_ONCE_INIT;

/* The global scope first (a host or test that interposes the loader's
 * entry points: tests/lifetime_cycles), then the loader kiln itself links,
 * already loaded (RTLD_NOLOAD: nothing is opened that was not). */
static void clone_find(void) {
  void *f = dlsym(RTLD_DEFAULT, "clCloneKernel");
  if (!f) {
    void *h = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      f = dlsym(h, "clCloneKernel");
      dlclose(h); /* (the reference RTLD_NOLOAD took) */
    }
  }
  *(void **)&clone_ptr = f;
}

bool kiln_cl_clone_found(void) {
  pthread_once(&clone_once, clone_find);
  return clone_ptr != NULL;
}

cl_kernel kiln_cl_clone_raw(cl_kernel src, cl_int *err) {
  if (!kiln_cl_clone_found()) {
    if (err) *err = CL_INVALID_OPERATION;
    return NULL;
  }
  return clone_ptr(src, err);
}
