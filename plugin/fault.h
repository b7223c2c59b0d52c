/* plugin/fault.h: fault injection (SQLite's test_malloc / sqlite3FaultSim
 * model) in the fault-injection build of the plugin only,
 * libonnxifi-kiln-fault.so. That library is the normal plugin linked with
 * -Wl,--wrap for kiln's allocator (kiln_malloc, kiln_calloc, kiln_realloc,
 * kiln_strdup, kiln_strndup, kiln_free) and for the OpenCL and CLBlast
 * calls kiln makes; the __wrap_ functions (plugin/fault.c, fault_cl.c)
 * count the calls and fail the Nth, and count live objects so that a test
 * sees a leak without a sanitizer. The normal plugin contains none of this
 * and exports only the ONNXIFI functions; this one also exports the
 * kilnFault* functions below, which a test fetches with dlsym. With
 * KILN_FAULT_DISK_FULL=1 in the environment, every write() kiln makes (the
 * kiln cache's) fails with ENOSPC: a full disk.
 * See docs/RELIABILITY.md. */
#ifndef KILN_PLUGIN_FAULT_H
#define KILN_PLUGIN_FAULT_H

/* What can be failed. */
enum {
  KILN_FAULT_ALLOC = 0,  /* kiln's allocator (protobuf-c's allocations included) */
  KILN_FAULT_OPENCL = 1, /* OpenCL and CLBlast calls */
  KILN_FAULT_KINDS
};

/* What is counted as live (created minus released). */
enum {
  KILN_FAULT_LIVE_HEAP = 0, /* blocks from kiln's allocator */
  KILN_FAULT_LIVE_CL_MEM,   /* buffers and sub-buffers */
  KILN_FAULT_LIVE_CL_PROGRAM,
  KILN_FAULT_LIVE_CL_KERNEL,
  KILN_FAULT_LIVE_CL_EVENT,
  KILN_FAULT_LIVE_CL_CONTEXT, /* contexts and queues */
  KILN_FAULT_LIVES
};

/* Arms kind: counting restarts at 0, and call number n (n >= 1) fails —
 * with persistent != 0 every later call fails too. n <= 0 disarms (calls
 * are counted only while armed; arm with a huge n to count a clean path). */
typedef void (*kilnFaultArmFunction)(int kind, long n, int persistent);
/* Calls of kind since it was armed. */
typedef long (*kilnFaultCallsFunction)(int kind);
/* Calls of kind failed since it was armed. */
typedef long (*kilnFaultHitsFunction)(int kind);
/* The name of the function whose call last failed ("" when none). */
typedef const char *(*kilnFaultPointFunction)(int kind);
/* The live count of what (KILN_FAULT_LIVE_*). */
typedef long (*kilnFaultLiveFunction)(int what);

#endif
