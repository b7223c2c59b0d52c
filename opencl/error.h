/* opencl/error: OpenCL error codes as names for messages, and the one place
 * where a cl_int becomes a kiln_status. */
#ifndef KILN_OPENCL_ERROR_H
#define KILN_OPENCL_ERROR_H
#include <CL/cl.h>

#include "ir/status.h"

/* The symbolic name of an OpenCL error ("CL_OUT_OF_RESOURCES"), including
 * the ICD loader's CL_PLATFORM_NOT_FOUND_KHR; "unknown OpenCL error <n>"
 * (in a thread-local buffer) for codes it does not know. Never NULL. */
const char *kiln_cl_err_name(cl_int err);

/* The kiln_status for an OpenCL error:
 *   CL_OUT_OF_HOST_MEMORY                                  -> KILN_E_NOMEM
 *   CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_INVALID_BUFFER_SIZE,
 *   CL_OUT_OF_RESOURCES                                    -> KILN_E_NOMEM
 *   everything else (build failure, lost device, ...)      -> KILN_E_INTERNAL
 * The device-side rows are where KILN_E_DEVICE_MEMORY / _RESOURCES belong
 * (ONNXIFI NO_DEVICE_MEMORY / NO_DEVICE_RESOURCES) once ir/status and the
 * plugin's kiln_onnx_status have them: only this function changes then. */
kiln_status kiln_cl_status(cl_int err);

/* kiln_fail(kiln_cl_status(err), "<what>: <CL name>") in one call. */
kiln_status kiln_cl_fail(cl_int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
