/* opencl/engine_fuse: how the OpenCL engine lowers fused groups that are not
 * plain elementwise chains (prefix kiln_cl_fuse_): an anchor (Conv, MatMul,
 * Gemm) with its elementwise epilogue and optional pooling, and reductions
 * with their prologues and epilogues (Softmax, LayerNormalization, Reduce*).
 * The engine (engine_compile.c) turns the items into its steps. */
#ifndef KILN_OPENCL_ENGINE_FUSE_H
#define KILN_OPENCL_ENGINE_FUSE_H
#include <stdbool.h>

#include "fuse/spec.h"
#include "ir/schedule.h"
#include "opencl/codegen.h"
#include "opencl/device.h"

#define KILN_CL_FUSE_ITEMS 4

/* One step of a lowered group, in order: a generated kernel (node -1: text
 * and sig, the text kiln_malloc'd) or node `node` lowered alone (its device
 * op, else the host). without_bias: the node is a Conv / Gemm whose device
 * op must be prepared with its input 2 (the bias, C) absent — a later
 * kernel of the group adds it (opencl/ops.h kiln_cl_op_addend); the op
 * takes it (no host fallback: that would add it twice). */
typedef struct kiln_cl_fuse_item {
  int node;
  bool without_bias;
  char *text;
  kiln_cl_kernel_sig sig;
} kiln_cl_fuse_item;

typedef struct kiln_cl_fuse_lowering {
  int n;
  kiln_cl_fuse_item item[KILN_CL_FUSE_ITEMS];
  char how[96]; /* for KILN_DUMP and KILN_LOG=debug */
} kiln_cl_fuse_lowering;

/* Lowers bound spec sp (one group of the fusion plan; st its merged
 * schedule step) for device dev: *ok false (no error) when it is not an
 * anchor or reduction group this file takes, with a debug log line saying
 * why. Kernel names start with "g<first node>_". Errors: out of memory. */
kiln_status kiln_cl_fuse_lower(const kiln_cl_device *dev, const kiln_fuse_spec *sp, const kiln_step *st,
                               kiln_cl_fuse_lowering *out, bool *ok);
/* Frees the texts still held. */
void kiln_cl_fuse_lowering_free(kiln_cl_fuse_lowering *l);

/* Whether an anchor group's epilogue may be printed into kiln's SGEMM
 * kernel's store (the anchor's output x is not read through an accessor;
 * KILN_CL_GEMM_EPILOGUE=0 turns it off). The GEMM's own rule
 * (KILN_CL_GEMM, the Conv's shape class) is applied after. */
bool kiln_cl_fuse_store_epilogue_ok(const kiln_fuse_spec *sp, int x);

#endif
