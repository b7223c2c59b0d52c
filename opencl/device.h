/* opencl/device: OpenCL devices found through the ICD loader — what each one
 * is and can do (queried, never assumed), its stable "P:D" id, the `auto`
 * order, and the KILN_DEVICE tokens `opencl` and `opencl:P:D`. */
#ifndef KILN_OPENCL_DEVICE_H
#define KILN_OPENCL_DEVICE_H
#include <CL/cl.h>
#include <stdbool.h>
#include <stddef.h>

#include "ir/status.h"

/* One usable device: available, with a compiler, OpenCL C 1.2 or newer. */
typedef struct kiln_cl_device {
  cl_platform_id platform;
  cl_device_id device;
  int platform_index, device_index; /* positions in clGetPlatformIDs / clGetDeviceIDs(ALL) */
  char id[24];                      /* "P:D", as in KILN_DEVICE=opencl:P:D */
  char *name, *vendor, *platform_name;
  char *version;        /* CL_DEVICE_VERSION, e.g. "OpenCL 3.0 PoCL ..." */
  char *c_version;      /* CL_DEVICE_OPENCL_C_VERSION, e.g. "OpenCL C 1.2 ..." */
  char *driver_version; /* CL_DRIVER_VERSION */
  char *extensions;     /* CL_DEVICE_EXTENSIONS, space separated */
  int c_major, c_minor; /* parsed from c_version */
  cl_device_type type;
  bool has_fp64, has_fp16; /* cl_khr_fp64 / cl_khr_fp16 listed */
  size_t max_work_group_size;
  cl_uint pref_vec_float; /* CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT (0: not reported) */
  size_t max_work_item_size0; /* CL_DEVICE_MAX_WORK_ITEM_SIZES[0]: the 1-D local limit */
  cl_uint compute_units;
  cl_ulong global_mem_size, local_mem_size, max_mem_alloc_size;
  bool host_unified; /* CL_DEVICE_HOST_UNIFIED_MEMORY (false: not reported): the device works in host memory */
} kiln_cl_device;

/* Every usable device, in platform/device order, plus a note (one line per
 * platform or device that was skipped, and why) for messages. */
typedef struct kiln_cl_device_list {
  kiln_cl_device *devices;
  int n;
  char *notes; /* "" when nothing was skipped; never NULL after a successful enumerate */
} kiln_cl_device_list;

/* Fills out with every usable device. Zero platforms (the ICD loader's
 * CL_PLATFORM_NOT_FOUND_KHR), a platform whose clGetDeviceIDs fails, or a
 * device whose queries fail are skipped and described in out->notes — the
 * result is KILN_OK with n == 0 when nothing is usable. Fails only on host
 * memory exhaustion (KILN_E_NOMEM, out left empty). */
kiln_status kiln_cl_devices_enumerate(kiln_cl_device_list *out);

/* Frees what enumerate allocated; the list is left empty. NULL-safe. */
void kiln_cl_devices_free(kiln_cl_device_list *l);

/* True when ext is one whole token of dev->extensions. */
bool kiln_cl_device_has_extension(const kiln_cl_device *dev, const char *ext);

/* Rank in `auto` order: 0 for GPUs and accelerators, 1 for everything else
 * (CPU devices such as PoCL). The plugin puts its `cpu` engine between the
 * two ranks. */
int kiln_cl_device_auto_rank(const kiln_cl_device *dev);

/* Parses one KILN_DEVICE token: "opencl" selects every usable device in
 * `auto` order (rank, then P:D); "opencl:P:D" selects that one device.
 * Writes up to max indices into l->devices to idx and their count to *n.
 * Returns KILN_E_MODEL with a message (naming the token, what is available
 * and the enumeration notes) for a malformed token, an unknown device or
 * an empty list; a token that is not an opencl token at all is also
 * KILN_E_MODEL. */
kiln_status kiln_cl_devices_select(const kiln_cl_device_list *l, const char *token, int *idx, int max, int *n);

/* A one-line description: "P:D name (type, vendor, driver, OpenCL C x.y)". */
void kiln_cl_device_describe(const kiln_cl_device *dev, char *buf, size_t n);

#endif
