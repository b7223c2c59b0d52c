/* opencl/ops: the registry of device implementations of single nodes (none
 * yet: every node the code generator does not fuse runs on the host). */
#include "opencl/ops.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"

kiln_status kiln_cl_src_printf(kiln_cl_src *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) return kiln_fail(KILN_E_INTERNAL, "cannot format OpenCL source");
  if (s->len + (size_t)n + 1 > s->cap) {
    size_t cap = s->cap ? s->cap : 4096;
    while (cap < s->len + (size_t)n + 1) cap *= 2;
    char *t = kiln_realloc(s->text, cap);
    if (!t) return kiln_fail(KILN_E_NOMEM, "out of memory writing OpenCL source");
    s->text = t;
    s->cap = cap;
  }
  va_start(ap, fmt);
  vsnprintf(s->text + s->len, s->cap - s->len, fmt, ap);
  va_end(ap);
  s->len += (size_t)n;
  return KILN_OK;
}

void kiln_cl_src_free(kiln_cl_src *s) {
  kiln_free(s->text);
  memset(s, 0, sizeof *s);
}

struct kiln_cl_op {
  int unused;
};

kiln_status kiln_cl_op_prepare(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n,
                               const kiln_cl_ttype *in, const kiln_cl_ttype *out, const kiln_tensor *const *konst,
                               const char *prefix, kiln_cl_src *src, kiln_cl_op **op) {
  (void)dev, (void)g, (void)n, (void)in, (void)out, (void)konst, (void)prefix, (void)src;
  *op = NULL;
  return KILN_OK;
}

kiln_status kiln_cl_op_bind(kiln_cl_op *op, kiln_cl_context *ctx, cl_program prog) {
  (void)op, (void)ctx, (void)prog;
  return kiln_fail(KILN_E_INTERNAL, "no OpenCL op to bind");
}

kiln_status kiln_cl_op_enqueue(kiln_cl_op *op, kiln_cl_context *ctx, const kiln_cl_arg *in, const kiln_cl_arg *out) {
  (void)op, (void)ctx, (void)in, (void)out;
  return kiln_fail(KILN_E_INTERNAL, "no OpenCL op to enqueue");
}

const char *kiln_cl_op_describe(const kiln_cl_op *op) {
  (void)op;
  return "";
}

void kiln_cl_op_free(kiln_cl_op *op) { kiln_free(op); }
