/* opencl/device: enumeration through the ICD loader (every failure becomes a
 * note, never a crash), device queries, `auto` order and KILN_DEVICE tokens. */
#include "opencl/device.h"

#include <CL/cl_ext.h> /* CL_PLATFORM_NOT_FOUND_KHR: the ICD loader's "no platform" */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/error.h"

/* ---- notes: a growable "; "-separated string ---- */

typedef struct notes {
  char *s;
  size_t len, cap;
  bool oom;
} notes;

static void note(notes *nb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(notes *nb, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  size_t k = strlen(line), need = nb->len + k + 3;
  if (need > nb->cap) {
    size_t cap = nb->cap ? nb->cap * 2 : 256;
    while (cap < need) cap *= 2;
    char *s = kiln_realloc(nb->s, cap);
    if (!s) {
      nb->oom = true;
      return;
    }
    nb->s = s;
    nb->cap = cap;
  }
  if (nb->len) {
    memcpy(nb->s + nb->len, "; ", 2);
    nb->len += 2;
  }
  memcpy(nb->s + nb->len, line, k + 1);
  nb->len += k;
}

/* ---- queries ---- */

static cl_int platform_string(cl_platform_id p, cl_platform_info what, char **out) {
  size_t n = 0;
  *out = NULL;
  cl_int e = clGetPlatformInfo(p, what, 0, NULL, &n);
  if (e) return e;
  char *s = kiln_malloc(n + 1);
  if (!s) return CL_OUT_OF_HOST_MEMORY;
  e = clGetPlatformInfo(p, what, n, s, NULL);
  if (e) {
    kiln_free(s);
    return e;
  }
  s[n] = 0;
  *out = s;
  return CL_SUCCESS;
}

static cl_int device_string(cl_device_id d, cl_device_info what, char **out) {
  size_t n = 0;
  *out = NULL;
  cl_int e = clGetDeviceInfo(d, what, 0, NULL, &n);
  if (e) return e;
  char *s = kiln_malloc(n + 1);
  if (!s) return CL_OUT_OF_HOST_MEMORY;
  e = clGetDeviceInfo(d, what, n, s, NULL);
  if (e) {
    kiln_free(s);
    return e;
  }
  s[n] = 0;
  /* drivers pad some strings with trailing blanks */
  for (size_t k = strlen(s); k && s[k - 1] == ' '; k--) s[k - 1] = 0;
  *out = s;
  return CL_SUCCESS;
}

static cl_int device_value(cl_device_id d, cl_device_info what, void *v, size_t size) {
  size_t got = 0;
  cl_int e = clGetDeviceInfo(d, what, size, v, &got);
  if (!e && got != size) e = CL_INVALID_VALUE;
  return e;
}

static void device_clear(kiln_cl_device *d) {
  kiln_free(d->name);
  kiln_free(d->vendor);
  kiln_free(d->platform_name);
  kiln_free(d->version);
  kiln_free(d->c_version);
  kiln_free(d->driver_version);
  kiln_free(d->extensions);
  memset(d, 0, sizeof *d);
}

bool kiln_cl_device_has_extension(const kiln_cl_device *dev, const char *ext) {
  size_t k = strlen(ext);
  const char *s = dev->extensions;
  if (!s || !k) return false;
  for (const char *p = strstr(s, ext); p; p = strstr(p + 1, ext)) {
    bool starts = p == s || p[-1] == ' ';
    bool ends = p[k] == 0 || p[k] == ' ';
    if (starts && ends) return true;
  }
  return false;
}

/* Queries everything about d into dev. Returns CL_SUCCESS, or the failing
 * code with *what naming the query; *unusable gets a reason (static text)
 * when the device works but cannot run kiln's programs. */
static cl_int device_query(kiln_cl_device *dev, cl_device_id d, const char **what, const char **unusable) {
  cl_int e;
  cl_bool available = CL_FALSE, compiler = CL_FALSE;
  dev->device = d;
  *unusable = NULL;
#define Q(call, name)           \
  do {                          \
    *what = name;               \
    if ((e = (call))) return e; \
  } while (0)
  Q(device_string(d, CL_DEVICE_NAME, &dev->name), "CL_DEVICE_NAME");
  Q(device_string(d, CL_DEVICE_VENDOR, &dev->vendor), "CL_DEVICE_VENDOR");
  Q(device_string(d, CL_DEVICE_VERSION, &dev->version), "CL_DEVICE_VERSION");
  Q(device_string(d, CL_DEVICE_OPENCL_C_VERSION, &dev->c_version), "CL_DEVICE_OPENCL_C_VERSION");
  Q(device_string(d, CL_DRIVER_VERSION, &dev->driver_version), "CL_DRIVER_VERSION");
  Q(device_string(d, CL_DEVICE_EXTENSIONS, &dev->extensions), "CL_DEVICE_EXTENSIONS");
  Q(device_value(d, CL_DEVICE_TYPE, &dev->type, sizeof dev->type), "CL_DEVICE_TYPE");
  Q(device_value(d, CL_DEVICE_AVAILABLE, &available, sizeof available), "CL_DEVICE_AVAILABLE");
  Q(device_value(d, CL_DEVICE_COMPILER_AVAILABLE, &compiler, sizeof compiler), "CL_DEVICE_COMPILER_AVAILABLE");
  Q(device_value(d, CL_DEVICE_MAX_WORK_GROUP_SIZE, &dev->max_work_group_size, sizeof(size_t)),
    "CL_DEVICE_MAX_WORK_GROUP_SIZE");
  if (device_value(d, CL_DEVICE_PREFERRED_VECTOR_WIDTH_FLOAT, &dev->pref_vec_float, sizeof(cl_uint)))
    dev->pref_vec_float = 0; /* only a hint for the code generator */
  cl_bool unified = CL_FALSE; /* deprecated in OpenCL 2.0, still answered by PoCL and rusticl */
  dev->host_unified = !device_value(d, CL_DEVICE_HOST_UNIFIED_MEMORY, &unified, sizeof unified) && unified;
  /* the array has CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS (>= 3) entries */
  *what = "CL_DEVICE_MAX_WORK_ITEM_SIZES";
  {
    size_t n = 0;
    if ((e = clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, 0, NULL, &n))) return e;
    if (n < sizeof(size_t)) return CL_INVALID_VALUE;
    size_t *all = kiln_malloc(n);
    if (!all) return CL_OUT_OF_HOST_MEMORY;
    e = clGetDeviceInfo(d, CL_DEVICE_MAX_WORK_ITEM_SIZES, n, all, NULL);
    dev->max_work_item_size0 = e ? 0 : all[0];
    kiln_free(all);
    if (e) return e;
  }
  Q(device_value(d, CL_DEVICE_MAX_COMPUTE_UNITS, &dev->compute_units, sizeof dev->compute_units),
    "CL_DEVICE_MAX_COMPUTE_UNITS");
  Q(device_value(d, CL_DEVICE_GLOBAL_MEM_SIZE, &dev->global_mem_size, sizeof(cl_ulong)), "CL_DEVICE_GLOBAL_MEM_SIZE");
  Q(device_value(d, CL_DEVICE_LOCAL_MEM_SIZE, &dev->local_mem_size, sizeof(cl_ulong)), "CL_DEVICE_LOCAL_MEM_SIZE");
  Q(device_value(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE, &dev->max_mem_alloc_size, sizeof(cl_ulong)),
    "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
#undef Q
  *what = NULL;
  if (sscanf(dev->c_version, "OpenCL C %d.%d", &dev->c_major, &dev->c_minor) != 2) dev->c_major = dev->c_minor = 0;
  dev->has_fp64 = kiln_cl_device_has_extension(dev, "cl_khr_fp64");
  dev->has_fp16 = kiln_cl_device_has_extension(dev, "cl_khr_fp16");
  if (!available) *unusable = "not available";
  else if (!compiler) *unusable = "no compiler";
  else if (dev->c_major * 100 + dev->c_minor < 102) *unusable = "OpenCL C older than 1.2";
  else if (!dev->max_work_group_size || !dev->max_work_item_size0) *unusable = "reports a work-group size of 0";
  return CL_SUCCESS;
}

/* Appends *dev to out, growing it; false when out of memory. */
static bool append_device(kiln_cl_device_list *out, int *cap, const kiln_cl_device *dev) {
  if (out->n == *cap) {
    int nc = *cap ? *cap * 2 : 4;
    kiln_cl_device *grown = kiln_realloc(out->devices, (size_t)nc * sizeof *grown);
    if (!grown) return false;
    out->devices = grown;
    *cap = nc;
  }
  out->devices[out->n++] = *dev;
  return true;
}

/* Adds platform p's usable devices to out (capacity grown as needed). */
static kiln_status add_platform(kiln_cl_device_list *out, int *cap, notes *nb, cl_platform_id p, int pi) {
  char *pname = NULL;
  cl_int e = platform_string(p, CL_PLATFORM_NAME, &pname);
  if (e == CL_OUT_OF_HOST_MEMORY) return kiln_fail(KILN_E_NOMEM, "out of memory listing OpenCL platforms");
  const char *shown = pname ? pname : "?";
  cl_uint nd = 0;
  e = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, NULL, &nd);
  if (e == CL_DEVICE_NOT_FOUND || (!e && !nd)) {
    note(nb, "platform %d (%s): no devices", pi, shown);
    kiln_free(pname);
    return KILN_OK;
  }
  if (e) {
    note(nb, "platform %d (%s): clGetDeviceIDs failed: %s", pi, shown, kiln_cl_err_name(e));
    kiln_free(pname);
    return KILN_OK;
  }
  cl_device_id *ids = kiln_calloc(nd, sizeof *ids);
  if (!ids) {
    kiln_free(pname);
    return kiln_fail(KILN_E_NOMEM, "out of memory listing OpenCL devices");
  }
  cl_uint nd2 = 0;
  e = clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ids, &nd2);
  if (e) {
    note(nb, "platform %d (%s): clGetDeviceIDs failed: %s", pi, shown, kiln_cl_err_name(e));
    nd = 0;
  } else if (nd2 < nd) {
    nd = nd2;
  }
  kiln_status s = KILN_OK;
  for (cl_uint di = 0; di < nd && !s; di++) {
    kiln_cl_device dev = {0};
    const char *what = NULL, *unusable = NULL;
    e = device_query(&dev, ids[di], &what, &unusable);
    if (e == CL_OUT_OF_HOST_MEMORY) {
      s = kiln_fail(KILN_E_NOMEM, "out of memory querying OpenCL device %d:%u", pi, di);
    } else if (e) {
      note(nb, "device %d:%u (%s): %s failed: %s", pi, di, dev.name ? dev.name : "?", what, kiln_cl_err_name(e));
    } else if (unusable) {
      note(nb, "device %d:%u (%s): %s", pi, di, dev.name, unusable);
    } else {
      dev.platform = p;
      dev.platform_index = pi;
      dev.device_index = (int)di;
      snprintf(dev.id, sizeof dev.id, "%d:%u", pi, di);
      if (!(dev.platform_name = kiln_strdup(shown)) || !append_device(out, cap, &dev))
        s = kiln_fail(KILN_E_NOMEM, "out of memory listing OpenCL devices");
      else continue; /* the list owns dev's strings now */
    }
    device_clear(&dev);
  }
  kiln_free(ids);
  kiln_free(pname);
  return s;
}

kiln_status kiln_cl_devices_enumerate(kiln_cl_device_list *out) {
  memset(out, 0, sizeof *out);
  notes nb = {0};
  int cap = 0;
  kiln_status s = KILN_OK;
  cl_uint np = 0;
  cl_int e = clGetPlatformIDs(0, NULL, &np);
  if (e == CL_PLATFORM_NOT_FOUND_KHR || (!e && !np)) {
    note(&nb, "no OpenCL platform (the ICD loader found no vendor in OCL_ICD_VENDORS or /etc/OpenCL/vendors)");
  } else if (e) {
    note(&nb, "clGetPlatformIDs failed: %s", kiln_cl_err_name(e));
  } else {
    cl_platform_id *ps = kiln_calloc(np, sizeof *ps);
    if (!ps) return kiln_fail(KILN_E_NOMEM, "out of memory listing OpenCL platforms");
    cl_uint np2 = 0;
    e = clGetPlatformIDs(np, ps, &np2);
    if (e) note(&nb, "clGetPlatformIDs failed: %s", kiln_cl_err_name(e));
    else
      for (cl_uint pi = 0; pi < np2 && pi < np && !s; pi++) s = add_platform(out, &cap, &nb, ps[pi], (int)pi);
    kiln_free(ps);
  }
  if (!s && !nb.s) {
    nb.s = kiln_strdup("");
    if (!nb.s) nb.oom = true;
  }
  out->notes = nb.s;
  if (!s && nb.oom) s = kiln_fail(KILN_E_NOMEM, "out of memory listing OpenCL devices");
  if (s) kiln_cl_devices_free(out);
  return s;
}

void kiln_cl_devices_free(kiln_cl_device_list *l) {
  if (!l) return;
  for (int i = 0; i < l->n; i++) device_clear(&l->devices[i]);
  kiln_free(l->devices);
  kiln_free(l->notes);
  memset(l, 0, sizeof *l);
}

int kiln_cl_device_auto_rank(const kiln_cl_device *dev) {
  return (dev->type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) ? 0 : 1;
}

static const char *type_name(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "GPU";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  if (t & CL_DEVICE_TYPE_CPU) return "CPU";
  return "other";
}

void kiln_cl_device_describe(const kiln_cl_device *dev, char *buf, size_t n) {
  snprintf(buf, n, "%s %s (%s, %s, driver %s, OpenCL C %d.%d%s)", dev->id, dev->name, type_name(dev->type),
           dev->vendor, dev->driver_version, dev->c_major, dev->c_minor, dev->has_fp64 ? ", fp64" : "");
}

/* Parses a decimal number of at most 6 digits at *p; advances *p. */
static bool parse_index(const char **p, int *v) {
  const char *s = *p;
  int k = 0, x = 0;
  while (s[k] >= '0' && s[k] <= '9' && k < 7) x = x * 10 + (s[k++] - '0');
  if (!k || k > 6) return false;
  *v = x;
  *p = s + k;
  return true;
}

static void list_ids(const kiln_cl_device_list *l, char *buf, size_t n) {
  size_t len = 0;
  buf[0] = 0;
  for (int i = 0; i < l->n && len + 1 < n; i++) {
    int k = snprintf(buf + len, n - len, "%s%s (%s)", i ? ", " : "", l->devices[i].id, l->devices[i].name);
    if (k < 0) break;
    len += (size_t)k;
  }
  if (!l->n) snprintf(buf, n, "none");
}

kiln_status kiln_cl_devices_select(const kiln_cl_device_list *l, const char *token, int *idx, int max, int *n) {
  const char *notes_text = l->notes && *l->notes ? l->notes : "nothing skipped";
  char avail[384];
  *n = 0;
  if (!strcmp(token, "opencl")) {
    if (!l->n) return kiln_fail(KILN_E_MODEL, "KILN_DEVICE token 'opencl': no usable OpenCL device (%s)", notes_text);
    for (int rank = 0; rank <= 1; rank++)
      for (int i = 0; i < l->n; i++)
        if (kiln_cl_device_auto_rank(&l->devices[i]) == rank) {
          if (*n >= max) return kiln_fail(KILN_E_INTERNAL, "KILN_DEVICE token 'opencl': more than %d devices", max);
          idx[(*n)++] = i;
        }
    return KILN_OK;
  }
  if (strncmp(token, "opencl:", 7))
    return kiln_fail(KILN_E_MODEL, "KILN_DEVICE token '%s' is not an OpenCL device (expected opencl or opencl:P:D)",
                     token);
  const char *p = token + 7;
  int pi, di;
  if (!parse_index(&p, &pi) || *p++ != ':' || !parse_index(&p, &di) || *p)
    return kiln_fail(KILN_E_MODEL,
                     "KILN_DEVICE token '%s' is malformed (expected opencl:P:D, P and D the platform and device "
                     "numbers)",
                     token);
  for (int i = 0; i < l->n; i++)
    if (l->devices[i].platform_index == pi && l->devices[i].device_index == di) {
      if (max < 1) return kiln_fail(KILN_E_INTERNAL, "KILN_DEVICE token '%s': no room for a device", token);
      idx[(*n)++] = i;
      return KILN_OK;
    }
  list_ids(l, avail, sizeof avail);
  return kiln_fail(KILN_E_MODEL, "KILN_DEVICE token '%s': no usable OpenCL device %d:%d (available: %s; %s)", token,
                   pi, di, avail, notes_text);
}
