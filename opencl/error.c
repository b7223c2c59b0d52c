/* opencl/error: the OpenCL error-name table (all codes of cl.h up to 3.0,
 * plus the ICD loader's) and the cl_int -> kiln_status mapping. */
#include "opencl/error.h"

#include <stdarg.h>
#include <stdio.h>

/* Indexed by -err; codes are listed by value because CL_TARGET_OPENCL_VERSION
 * hides the names of newer ones. */
static const char *const names[] = {
    [0] = "CL_SUCCESS",
    [1] = "CL_DEVICE_NOT_FOUND",
    [2] = "CL_DEVICE_NOT_AVAILABLE",
    [3] = "CL_COMPILER_NOT_AVAILABLE",
    [4] = "CL_MEM_OBJECT_ALLOCATION_FAILURE",
    [5] = "CL_OUT_OF_RESOURCES",
    [6] = "CL_OUT_OF_HOST_MEMORY",
    [7] = "CL_PROFILING_INFO_NOT_AVAILABLE",
    [8] = "CL_MEM_COPY_OVERLAP",
    [9] = "CL_IMAGE_FORMAT_MISMATCH",
    [10] = "CL_IMAGE_FORMAT_NOT_SUPPORTED",
    [11] = "CL_BUILD_PROGRAM_FAILURE",
    [12] = "CL_MAP_FAILURE",
    [13] = "CL_MISALIGNED_SUB_BUFFER_OFFSET",
    [14] = "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
    [15] = "CL_COMPILE_PROGRAM_FAILURE",
    [16] = "CL_LINKER_NOT_AVAILABLE",
    [17] = "CL_LINK_PROGRAM_FAILURE",
    [18] = "CL_DEVICE_PARTITION_FAILED",
    [19] = "CL_KERNEL_ARG_INFO_NOT_AVAILABLE",
    [30] = "CL_INVALID_VALUE",
    [31] = "CL_INVALID_DEVICE_TYPE",
    [32] = "CL_INVALID_PLATFORM",
    [33] = "CL_INVALID_DEVICE",
    [34] = "CL_INVALID_CONTEXT",
    [35] = "CL_INVALID_QUEUE_PROPERTIES",
    [36] = "CL_INVALID_COMMAND_QUEUE",
    [37] = "CL_INVALID_HOST_PTR",
    [38] = "CL_INVALID_MEM_OBJECT",
    [39] = "CL_INVALID_IMAGE_FORMAT_DESCRIPTOR",
    [40] = "CL_INVALID_IMAGE_SIZE",
    [41] = "CL_INVALID_SAMPLER",
    [42] = "CL_INVALID_BINARY",
    [43] = "CL_INVALID_BUILD_OPTIONS",
    [44] = "CL_INVALID_PROGRAM",
    [45] = "CL_INVALID_PROGRAM_EXECUTABLE",
    [46] = "CL_INVALID_KERNEL_NAME",
    [47] = "CL_INVALID_KERNEL_DEFINITION",
    [48] = "CL_INVALID_KERNEL",
    [49] = "CL_INVALID_ARG_INDEX",
    [50] = "CL_INVALID_ARG_VALUE",
    [51] = "CL_INVALID_ARG_SIZE",
    [52] = "CL_INVALID_KERNEL_ARGS",
    [53] = "CL_INVALID_WORK_DIMENSION",
    [54] = "CL_INVALID_WORK_GROUP_SIZE",
    [55] = "CL_INVALID_WORK_ITEM_SIZE",
    [56] = "CL_INVALID_GLOBAL_OFFSET",
    [57] = "CL_INVALID_EVENT_WAIT_LIST",
    [58] = "CL_INVALID_EVENT",
    [59] = "CL_INVALID_OPERATION",
    [60] = "CL_INVALID_GL_OBJECT",
    [61] = "CL_INVALID_BUFFER_SIZE",
    [62] = "CL_INVALID_MIP_LEVEL",
    [63] = "CL_INVALID_GLOBAL_WORK_SIZE",
    [64] = "CL_INVALID_PROPERTY",
    [65] = "CL_INVALID_IMAGE_DESCRIPTOR",
    [66] = "CL_INVALID_COMPILER_OPTIONS",
    [67] = "CL_INVALID_LINKER_OPTIONS",
    [68] = "CL_INVALID_DEVICE_PARTITION_COUNT",
    [69] = "CL_INVALID_PIPE_SIZE",
    [70] = "CL_INVALID_DEVICE_QUEUE",
    [71] = "CL_INVALID_SPEC_ID",
    [72] = "CL_MAX_SIZE_RESTRICTION_EXCEEDED",
};

const char *kiln_cl_err_name(cl_int err) {
  static _Thread_local char unknown[48];
  if (err <= 0 && -(long)err < (long)(sizeof names / sizeof *names) && names[-err]) return names[-err];
  switch (err) {
  case -1000: return "CL_INVALID_GL_SHAREGROUP_REFERENCE_KHR";
  case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
  case -9999: return "OpenCL error -9999 (NVIDIA: a kernel faulted or the device was lost)";
  }
  snprintf(unknown, sizeof unknown, "unknown OpenCL error %d", (int)err);
  return unknown;
}

kiln_status kiln_cl_status(cl_int err) {
  switch (err) {
  case CL_SUCCESS: return KILN_OK;
  case CL_OUT_OF_HOST_MEMORY: return KILN_E_NOMEM;
  /* ONNXIFI NO_DEVICE_MEMORY / NO_DEVICE_RESOURCES / BACKEND_UNAVAILABLE */
  case CL_MEM_OBJECT_ALLOCATION_FAILURE:
  case CL_INVALID_BUFFER_SIZE: return KILN_E_DEVICE_MEMORY;
  case CL_OUT_OF_RESOURCES: return KILN_E_DEVICE_RESOURCES;
  case CL_DEVICE_NOT_AVAILABLE:
  case -9999: return KILN_E_DEVICE_LOST;
  default: return KILN_E_INTERNAL;
  }
}

kiln_status kiln_cl_fail(cl_int err, const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  return kiln_fail(kiln_cl_status(err), "%s: %s", what, kiln_cl_err_name(err));
}
