/* opencl/ops: the registry of device implementations of single nodes and
 * the machinery they share: an op is a list of steps (generated kernel
 * launches, CLBlast GEMM calls) over its inputs, outputs and scratch
 * buffers, fixed at prepare time; bind creates kernels and scratch and
 * starts CLBlast's warm-up; enqueue sets arguments and launches. See ops_int.h for
 * the kernel argument convention and OPS.md for what each op covers. */
#include "opencl/ops.h"

#include <clblast_c.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"
#include "opencl/ops_int.h"

/* Room for n more bytes and the terminator. */
static kiln_status src_reserve(kiln_cl_src *s, size_t n) {
  if (s->len + n + 1 <= s->cap) return KILN_OK;
  size_t cap = s->cap ? s->cap : 4096;
  while (cap < s->len + n + 1) cap *= 2;
  char *t = kiln_realloc(s->text, cap);
  if (!t) return kiln_fail(KILN_E_NOMEM, "out of memory writing OpenCL source");
  s->text = t;
  s->cap = cap;
  return KILN_OK;
}

kiln_status kiln_cl_src_puts(kiln_cl_src *s, const char *text) {
  size_t n = strlen(text);
  kiln_status st = src_reserve(s, n);
  if (st) return st;
  memcpy(s->text + s->len, text, n + 1);
  s->len += n;
  return KILN_OK;
}

/* The text as printf would print it, in as few printf calls as it can: a
 * format without a conversion is copied, and one that fits the room left
 * is printed once (else measured, the room grown, printed again). printf
 * is slow in kiln's processes: libquadmath (linked by OpenBLAS's
 * libgfortran) registers a printf modifier at load, and glibc then takes
 * its positional-argument path for every format (half of a warm init's
 * lowering of mobilenetv2 was printf_positional, `perf`). */
kiln_status kiln_cl_src_printf(kiln_cl_src *s, const char *fmt, ...) {
  if (!strchr(fmt, '%')) return kiln_cl_src_puts(s, fmt);
  va_list ap;
  va_start(ap, fmt);
  int n = s->text ? vsnprintf(s->text + s->len, s->cap - s->len, fmt, ap) : vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    if (s->text) s->text[s->len] = 0; /* what vsnprintf left there is unspecified */
    return kiln_fail(KILN_E_INTERNAL, "cannot format OpenCL source");
  }
  if (!s->text || s->len + (size_t)n + 1 > s->cap) { /* did not fit: grown, printed again */
    kiln_status st = src_reserve(s, (size_t)n);
    if (st) {
      if (s->text) s->text[s->len] = 0; /* the text stays what it was */
      return st;
    }
    va_start(ap, fmt);
    vsnprintf(s->text + s->len, s->cap - s->len, fmt, ap);
    va_end(ap);
  }
  s->len += (size_t)n;
  return KILN_OK;
}

void kiln_cl_src_free(kiln_cl_src *s) {
  kiln_free(s->text);
  memset(s, 0, sizeof *s);
}

/* ---- the registry ---- */

static const struct {
  const char *op_type;
  op_prepare_fn prepare;
  bool kiln; /* an operator of kiln's domain (KILN_DOMAIN), else ONNX's */
} registry[] = {
    {"MatMul", kiln_clop_gemm_prepare, false},
    {"Gemm", kiln_clop_gemm_prepare, false},
    {"Conv", kiln_clop_conv_prepare, false},
    {"MaxPool", kiln_clop_pool_prepare, false},
    {"AveragePool", kiln_clop_pool_prepare, false},
    {"GlobalAveragePool", kiln_clop_pool_prepare, false},
    {"GlobalMaxPool", kiln_clop_pool_prepare, false},
    {"ReduceSum", kiln_clop_reduce_prepare, false},
    {"ReduceMean", kiln_clop_reduce_prepare, false},
    {"ReduceMax", kiln_clop_reduce_prepare, false},
    {"ReduceMin", kiln_clop_reduce_prepare, false},
    {"ReduceProd", kiln_clop_reduce_prepare, false},
    {"ReduceL1", kiln_clop_reduce_prepare, false},
    {"ReduceL2", kiln_clop_reduce_prepare, false},
    {"ReduceLogSum", kiln_clop_reduce_prepare, false},
    {"ReduceLogSumExp", kiln_clop_reduce_prepare, false},
    {"ReduceSumSquare", kiln_clop_reduce_prepare, false},
    {"ArgMax", kiln_clop_reduce_prepare, false},
    {"ArgMin", kiln_clop_reduce_prepare, false},
    {"Softmax", kiln_clop_norm_prepare, false},
    {"LogSoftmax", kiln_clop_norm_prepare, false},
    {"Hardmax", kiln_clop_norm_prepare, false},
    {"LayerNormalization", kiln_clop_norm_prepare, false},
    {"Concat", kiln_clop_move_prepare, false},
    {"Gather", kiln_clop_move_prepare, false},
    {"Transpose", kiln_clop_move_prepare, false},
    {"Where", kiln_clop_move_prepare, false},
    {"Pad", kiln_clop_move_prepare, false},
    {"ScatterND", kiln_clop_move_prepare, false},
    {"SparseLengthsSum", kiln_clop_move_prepare, true},
    {"SparseLengthsWeightedSum", kiln_clop_move_prepare, true},
    {"SparseLengthsMean", kiln_clop_move_prepare, true},
    {"SparseLengthsSumFused8BitRowwise", kiln_clop_move_prepare, true},
    {"SparseLengthsWeightedSumFused8BitRowwise", kiln_clop_move_prepare, true},
    {"SparseLengthsMeanFused8BitRowwise", kiln_clop_move_prepare, true},
};

kiln_status kiln_cl_op_prepare(const kiln_cl_device *dev, const kiln_graph *g, const kiln_node *n,
                               const kiln_cl_ttype *in, const kiln_cl_ttype *out, const kiln_tensor *const *konst,
                               const char *prefix, kiln_cl_src *src, kiln_cl_op **op) {
  *op = NULL;
  bool kiln_dom = n->domain && !strcmp(n->domain, KILN_DOMAIN);
  if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx") && !kiln_dom) return KILN_OK;
  op_ctx c = {dev, g, n, in, out, konst, prefix, src, {0}};
  kiln_node_label(g, n, c.label, (int)sizeof c.label);
  /* zero-sized tensors stay on the host (an empty constant, such as an
   * empty axes list, is only read here) */
  for (int i = 0; i < n->n_in; i++)
    if (n->in[i] >= 0 && in[i].dtype != KILN_UNDEFINED && kiln_clop_numel(in[i].rank, in[i].dims) == 0 &&
        !(konst && konst[i]))
      return KILN_OK;
  for (int i = 0; i < n->n_out; i++)
    if (n->out[i] >= 0 && out[i].dtype != KILN_UNDEFINED && kiln_clop_numel(out[i].rank, out[i].dims) == 0)
      return KILN_OK;
  for (size_t r = 0; r < sizeof registry / sizeof *registry; r++) {
    if (strcmp(registry[r].op_type, n->op_type) || registry[r].kiln != kiln_dom) continue;
    size_t mark = src->len;
    kiln_status s = registry[r].prepare(&c, op);
    if (s || !*op) {
      /* a declined or failed op leaves no source behind */
      if (src->text) src->text[mark] = 0;
      src->len = mark;
      if (*op) kiln_cl_op_free(*op);
      *op = NULL;
      if (s) kiln_error_prefix("%s node '%s'", n->op_type, c.label);
    }
    return s;
  }
  return KILN_OK;
}

/* ---- building ---- */

bool kiln_clop_present(const kiln_cl_ttype *t) { return t->dtype != KILN_UNDEFINED; }
bool kiln_clop_is_f32(const kiln_cl_ttype *t) { return t->dtype == KILN_F32; }

int64_t kiln_clop_numel(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  return n;
}

const char *kiln_clop_flit(float v, char *buf, size_t size) {
  if (isnan(v))
    snprintf(buf, size, "NAN");
  else if (isinf(v))
    snprintf(buf, size, "%sINFINITY", v < 0 ? "-" : "");
  else {
    snprintf(buf, size, "%.9g", (double)v);
    if (!strpbrk(buf, ".e")) strncat(buf, ".0", size - strlen(buf) - 1);
    strncat(buf, "f", size - strlen(buf) - 1);
  }
  return buf;
}

kiln_status kiln_clop_new(const op_ctx *c, kiln_cl_op **out) {
  *out = NULL;
  kiln_cl_op *op = kiln_calloc(1, sizeof *op);
  if (!op) return kiln_fail(KILN_E_NOMEM, "out of memory preparing OpenCL node '%s'", c->label);
  op->n_in = c->n->n_in;
  op->n_out = c->n->n_out;
  op->in_es = kiln_calloc((size_t)op->n_in + 1, sizeof *op->in_es);
  op->out_es = kiln_calloc((size_t)op->n_out + 1, sizeof *op->out_es);
  if (!op->in_es || !op->out_es) {
    kiln_cl_op_free(op);
    return kiln_fail(KILN_E_NOMEM, "out of memory preparing OpenCL node '%s'", c->label);
  }
  for (int i = 0; i < op->n_in; i++)
    op->in_es[i] = c->n->in[i] >= 0 && kiln_clop_present(&c->in[i]) ? kiln_dtype_size(c->in[i].dtype) : 0;
  for (int i = 0; i < op->n_out; i++)
    op->out_es[i] = c->n->out[i] >= 0 && kiln_clop_present(&c->out[i]) ? kiln_dtype_size(c->out[i].dtype) : 0;
  snprintf(op->prefix, sizeof op->prefix, "%s", c->prefix);
  snprintf(op->label, sizeof op->label, "%s", c->label);
  snprintf(op->desc, sizeof op->desc, "%s", c->n->op_type);
  *out = op;
  return KILN_OK;
}

kiln_status kiln_clop_fail_free(kiln_cl_op *op, kiln_status s) {
  kiln_cl_op_free(op);
  return s;
}

kiln_status kiln_clop_kernel(kiln_cl_op *op, const char *suffix, int *k) {
  if (op->n_kern >= OP_MAX_KERNELS) return kiln_fail(KILN_E_INTERNAL, "too many kernels for node '%s'", op->label);
  size_t lp = strlen(op->prefix), ls = strlen(suffix);
  if (lp + ls >= sizeof op->kname[0])
    return kiln_fail(KILN_E_INTERNAL, "kernel name '%s%s' is too long", op->prefix, suffix);
  memcpy(op->kname[op->n_kern], op->prefix, lp);
  memcpy(op->kname[op->n_kern] + lp, suffix, ls + 1);
  *k = op->n_kern++;
  return KILN_OK;
}

/* "" for an op whose creation failed (callers test the status after). */
const char *kiln_clop_kname(const kiln_cl_op *op, int k) { return op ? op->kname[k] : ""; }

kiln_status kiln_clop_scratch(kiln_cl_op *op, size_t bytes, int *s) {
  if (op->n_scr >= OP_MAX_SCRATCH) return kiln_fail(KILN_E_INTERNAL, "too many scratch buffers for '%s'", op->label);
  op->scr_bytes = bytes ? bytes : 4;
  *s = op->n_scr++;
  return KILN_OK;
}

kiln_status kiln_clop_step_add(kiln_cl_op *op, op_step_kind kind, op_step **st) {
  if (op->n_steps == op->cap_steps) {
    int cap = op->cap_steps ? 2 * op->cap_steps : 4;
    op_step *t = kiln_realloc(op->steps, (size_t)cap * sizeof *t);
    if (!t) return kiln_fail(KILN_E_NOMEM, "out of memory preparing OpenCL node '%s'", op->label);
    op->steps = t;
    op->cap_steps = cap;
  }
  *st = &op->steps[op->n_steps++];
  memset(*st, 0, sizeof **st);
  (*st)->kind = kind;
  (*st)->dims = 1;
  return KILN_OK;
}

kiln_status kiln_clop_launch(kiln_cl_op *op, int k, size_t n, int nargs, const opb *args) {
  for (int i = 0; i < nargs; i++) /* op_arg adds `at` to outputs only */
    if (args[i].at && args[i].kind != OPB_OUT) return kiln_fail(KILN_E_INTERNAL, "an offset on a non-output argument");
  op_step *st = NULL;
  kiln_status s = kiln_clop_step_add(op, ST_KERNEL, &st);
  if (s) return s;
  st->kernel = k;
  st->items[0] = n;
  st->nargs = nargs;
  for (int i = 0; i < nargs; i++) st->args[i] = args[i];
  return KILN_OK;
}

kiln_status kiln_clop_launch_groups(kiln_cl_op *op, int k, size_t groups, int nargs, const opb *args) {
  kiln_status s = kiln_clop_launch(op, k, 0, nargs, args);
  if (!s) op->steps[op->n_steps - 1].groups = groups;
  return s;
}

int kiln_clop_collapse(int rank, int64_t *dims, int ns, int64_t **strides) {
  int r = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 1) continue;
    if (r > 0) {
      bool merge = true;
      for (int k = 0; k < ns; k++)
        if (strides[k][r - 1] != strides[k][i] * dims[i]) merge = false;
      if (merge) {
        dims[r - 1] *= dims[i];
        for (int k = 0; k < ns; k++) strides[k][r - 1] = strides[k][i];
        continue;
      }
    }
    dims[r] = dims[i];
    for (int k = 0; k < ns; k++) strides[k][r] = strides[k][i];
    r++;
  }
  return r;
}

kiln_status kiln_clop_emit_offset(kiln_cl_src *s, const char *flat, int rank, const int64_t *dims,
                                  const int64_t *strides, const char *var) {
  kiln_status st = kiln_cl_src_printf(s, "  %s = 0;\n", var);
  if (st || rank == 0) return st;
  if (rank == 1) return kiln_cl_src_printf(s, "  %s = (long)(%s) * %lldL;\n", var, flat, (long long)strides[0]);
  st = kiln_cl_src_printf(s, "  { ulong t_ = %s;\n", flat);
  for (int d = rank - 1; d >= 0 && !st; d--) {
    if (d > 0)
      st = kiln_cl_src_printf(s, "    %s += (long)(t_ %% %lldUL) * %lldL; t_ /= %lldUL;\n", var, (long long)dims[d],
                              (long long)strides[d], (long long)dims[d]);
    else
      st = kiln_cl_src_printf(s, "    %s += (long)t_ * %lldL;\n", var, (long long)strides[d]);
  }
  if (!st) st = kiln_cl_src_printf(s, "  }\n");
  return st;
}

/* ---- CLBlast warm-up: each routine once per context ----
 * CLBlast builds a routine's kernels from source at its first call in a
 * process (PoCL: 10-15 s on a cold cache, ~50 ms warm; rusticl: 45-55 ms
 * per routine even with Mesa's cache filled) and keeps them per context
 * and device in memory only — there is no API to hand it a binary. By
 * default (KILN_CL_CLBLAST_WARM=async) bind starts each routine's warm-up
 * on a thread of its own (a small call on a queue of its own; CLBlast's
 * cache is per context and device, not per queue) and does not wait: the
 * graph's init does not pay the build, which runs beside the rest of the
 * init and whatever the host does before its first run. The first call of
 * that routine (blas_ready), and the release of any op that needs it, join
 * the thread first. A warm-up that fails is only logged: the real call
 * builds again and reports its own error. KILN_CL_CLBLAST_WARM=bind waits
 * at bind (on the context's queue), as before. */

#define WARM_MAX 64
enum { WARM_ROUTINES = 2 }; /* OP_BLAS_GEMM, OP_BLAS_GEMM_BATCHED */
static pthread_mutex_t warm_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct warm_job {
  cl_context ctx;
  cl_device_id dev;
  unsigned routine;
  CLBlastStatusCode e; /* the warm-up's outcome, read after the join */
  cl_int cl;           /* an OpenCL error before CLBlast was called */
} warm_job;
static struct {
  cl_context ctx;
  unsigned done;    /* routines built in this context */
  unsigned pending; /* routines a thread is building: job[r] */
  pthread_t th[WARM_ROUTINES];
  warm_job *job[WARM_ROUTINES];
} warmed[WARM_MAX];

static kiln_status blas_fail(CLBlastStatusCode e, const char *what, const kiln_cl_op *op) {
  if (e == CLBlastOpenCLOutOfHostMemory)
    return kiln_fail(KILN_E_NOMEM, "CLBlast %s for node '%s': out of host memory", what, op->label);
  if (e == CLBlastOpenCLOutOfResources || e == CLBlastTempBufferAllocFailure)
    return kiln_fail(KILN_E_DEVICE_MEMORY, "CLBlast %s for node '%s': out of device resources (%d)", what, op->label,
                     (int)e);
  return kiln_fail(KILN_E_INTERNAL, "CLBlast %s for node '%s' failed with status %d", what, op->label, (int)e);
}

/* Every CLBlast call kiln makes holds this lock: CLBlast 1.5.3 stores its
 * compiled programs in caches that two threads may corrupt (CLBlast issue
 * 486, fixed after 1.5.3 by PR 495) — measured here as a segfault in about
 * 1 in 30 transformer processes on rusticl while two warm-up threads (Sgemm
 * and SgemmBatched) built at once. A call only enqueues, except the first
 * of a routine (its build), so the lock is short. */
static pthread_mutex_t blas_lock = PTHREAD_MUTEX_INITIALIZER;

/* One small call of routine r (OP_BLAS_*) on queue q over b (3 * 64 floats). */
static CLBlastStatusCode warm_call(unsigned r, cl_mem b, cl_command_queue *q) {
  CLBlastStatusCode e;
  const float one[2] = {1, 1}, zero[2] = {0, 0};
  const size_t ao[2] = {0, 0}, bo[2] = {64, 64}, co[2] = {128, 160};
  pthread_mutex_lock(&blas_lock);
  if (r == OP_BLAS_GEMM)
    e = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, 8, 8, 8, 1.0f, b, 0, 8, b, 64, 8,
                     0.0f, b, 128, 8, q, NULL);
  else
    e = CLBlastSgemmBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeNo, 4, 4, 4, one, b, ao, 4, b,
                            bo, 4, zero, b, co, 4, 2, q, NULL);
  pthread_mutex_unlock(&blas_lock);
  return e;
}

static void *warm_thread(void *arg) {
  warm_job *j = arg;
  static const float zeros[3 * 64];
  cl_int e = CL_SUCCESS;
  cl_command_queue q = clCreateCommandQueue(j->ctx, j->dev, 0, &e);
  cl_mem b = NULL;
  if (q && !e) b = clCreateBuffer(j->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zeros, (void *)zeros, &e);
  if (b && !e) {
    j->e = warm_call(j->routine, b, &q);
    e = clFinish(q);
  }
  j->cl = e;
  if (b) clReleaseMemObject(b);
  if (q) clReleaseCommandQueue(q);
  return NULL;
}

static int warm_slot(cl_context ctx, bool make) {
  for (int i = 0; i < WARM_MAX; i++)
    if (warmed[i].ctx == ctx) return i;
  if (!make) return -1;
  for (int i = 0; i < WARM_MAX; i++)
    if (!warmed[i].ctx) {
      warmed[i].ctx = ctx;
      return i;
    }
  return -1; /* table full: warm at bind, remember nothing */
}

/* Joins slot i's threads for the routines in need (warm_lock held). */
static void warm_join(int i, unsigned need) {
  for (int r = 0; r < WARM_ROUTINES; r++) {
    unsigned bit = 1u << r;
    if (!(need & warmed[i].pending & bit)) continue;
    pthread_join(warmed[i].th[r], NULL);
    warm_job *j = warmed[i].job[r];
    warmed[i].pending &= ~bit;
    warmed[i].job[r] = NULL;
    if (!j->cl && j->e == CLBlastSuccess)
      warmed[i].done |= bit;
    else
      kiln_log(KILN_LOG_INFO, "opencl: CLBlast's warm-up (%s) failed (OpenCL %d, CLBlast %d): its first call builds",
               bit == OP_BLAS_GEMM ? "sgemm" : "sgemm batched", (int)j->cl, (int)j->e);
    kiln_free(j);
  }
}

/* Waits for the warm-ups of the routines in need on ctx, if any run. */
static void blas_ready(cl_context ctx, unsigned need) {
  if (!ctx || !need) return;
  pthread_mutex_lock(&warm_lock);
  int i = warm_slot(ctx, false);
  if (i >= 0 && (warmed[i].pending & need)) warm_join(i, need);
  pthread_mutex_unlock(&warm_lock);
}

static kiln_status blas_warm(kiln_cl_context *c, unsigned need, const kiln_cl_op *op) {
  const char *env = getenv("KILN_CL_CLBLAST_WARM");
  bool async = !(env && !strcmp(env, "bind"));
  kiln_status s = KILN_OK;
  pthread_mutex_lock(&warm_lock);
  int i = warm_slot(c->ctx, true);
  if (i >= 0 && !async) warm_join(i, need);
  unsigned todo = i >= 0 ? need & ~warmed[i].done & ~warmed[i].pending : need;
  for (int r = 0; r < WARM_ROUTINES && todo && !s; r++) {
    unsigned bit = 1u << r;
    if (!(todo & bit)) continue;
    if (async && i >= 0) {
      warm_job *j = kiln_calloc(1, sizeof *j);
      if (j) {
        *j = (warm_job){.ctx = c->ctx, .dev = c->device, .routine = bit};
        if (!pthread_create(&warmed[i].th[r], NULL, warm_thread, j)) {
          warmed[i].job[r] = j;
          warmed[i].pending |= bit;
          continue;
        }
        kiln_free(j);
      }
    } /* here, on the context's queue: bind, a full table, no thread */
    static const float zeros[3 * 64];
    kiln_cl_buffer b = {0};
    s = kiln_cl_buffer_create(c, sizeof zeros, &b);
    if (!s) s = kiln_cl_buffer_write(c, &b, 0, zeros, sizeof zeros);
    CLBlastStatusCode e = s ? CLBlastSuccess : warm_call(bit, b.mem, &c->queue);
    if (e) s = blas_fail(e, bit == OP_BLAS_GEMM ? "warm-up (sgemm)" : "warm-up (sgemm batched)", op);
    if (!s) s = kiln_cl_finish(c);
    kiln_cl_buffer_free(&b);
    if (!s && i >= 0) warmed[i].done |= bit;
  }
  pthread_mutex_unlock(&warm_lock);
  return s;
}

/* ---- the per-context workspace (im2col columns) ---- */

static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  cl_context ctx;
  cl_mem mem;
  size_t size;
  int users;
} ws[WARM_MAX];

/* Takes a reference on ctx's workspace, grown to at least bytes (an old,
 * smaller buffer is released: OpenCL keeps it until queued work is done). */
static kiln_status ws_acquire(kiln_cl_context *ctx, size_t bytes, kiln_cl_op *op) {
  pthread_mutex_lock(&ws_lock);
  int slot = -1, free_slot = -1;
  for (int i = 0; i < WARM_MAX; i++) {
    if (ws[i].ctx == ctx->ctx) slot = i;
    if (!ws[i].ctx && free_slot < 0) free_slot = i;
  }
  kiln_status s = KILN_OK;
  if (slot < 0 && free_slot < 0)
    s = kiln_fail(KILN_E_INTERNAL, "more than %d OpenCL contexts hold workspaces", WARM_MAX);
  if (!s && slot < 0) {
    slot = free_slot;
    ws[slot].ctx = ctx->ctx;
  }
  if (!s && ws[slot].size < bytes) {
    kiln_cl_buffer b;
    s = kiln_cl_buffer_create(ctx, bytes, &b);
    if (!s) {
      if (ws[slot].mem) clReleaseMemObject(ws[slot].mem);
      ws[slot].mem = b.mem;
      ws[slot].size = bytes;
    }
  }
  if (!s) {
    ws[slot].users++;
    op->ws_ctx = ctx->ctx;
  } else if (slot >= 0 && !ws[slot].users && !ws[slot].mem) {
    ws[slot].ctx = NULL;
  }
  pthread_mutex_unlock(&ws_lock);
  return s;
}

static cl_mem ws_get(cl_context c) {
  cl_mem m = NULL;
  pthread_mutex_lock(&ws_lock);
  for (int i = 0; i < WARM_MAX; i++)
    if (ws[i].ctx == c) m = ws[i].mem;
  pthread_mutex_unlock(&ws_lock);
  return m;
}

static void ws_release(kiln_cl_op *op) {
  if (!op->ws_ctx) return;
  pthread_mutex_lock(&ws_lock);
  for (int i = 0; i < WARM_MAX; i++)
    if (ws[i].ctx == op->ws_ctx && --ws[i].users == 0) {
      if (ws[i].mem) clReleaseMemObject(ws[i].mem);
      memset(&ws[i], 0, sizeof ws[i]);
    }
  pthread_mutex_unlock(&ws_lock);
  op->ws_ctx = NULL;
}

/* ---- bind / enqueue ---- */

kiln_status kiln_cl_op_bind(kiln_cl_op *op, kiln_cl_context *ctx, cl_program prog) {
  kiln_status s = kiln_cl_op_bind_kernels(op, ctx, prog);
  return s ? s : kiln_cl_op_bind_blas(op, ctx);
}

kiln_status kiln_cl_op_bind_blas(kiln_cl_op *op, kiln_cl_context *ctx) {
  if (!op->blas) return KILN_OK;
  kiln_status s = blas_warm(ctx, op->blas, op);
  op->blas_ctx = ctx->ctx; /* even on a failure: a thread it started is joined at release */
  if (s) kiln_error_prefix("node '%s'", op->label);
  return s;
}

const char *kiln_cl_op_prefix(const kiln_cl_op *op) { return op->prefix; }

bool kiln_cl_op_share_text(kiln_cl_op *op, const kiln_cl_op *to) {
  size_t np = strlen(op->prefix), nt = strlen(to->prefix);
  if (op->n_kern != to->n_kern) return false;
  for (int k = 0; k < op->n_kern; k++)
    if (strncmp(op->kname[k], op->prefix, np) || strlen(op->kname[k]) - np + nt >= sizeof op->kname[k]) return false;
  for (int k = 0; k < op->n_kern; k++) {
    char name[sizeof op->kname[k]];
    snprintf(name, sizeof name, "%s%s", to->prefix, op->kname[k] + np);
    memcpy(op->kname[k], name, sizeof name);
  }
  return true;
}

static kiln_status bind_kernels(kiln_cl_op *op, const kiln_cl_op *from, kiln_cl_context *ctx, cl_program prog);

kiln_status kiln_cl_op_bind_kernels(kiln_cl_op *op, kiln_cl_context *ctx, cl_program prog) {
  return bind_kernels(op, NULL, ctx, prog);
}

kiln_status kiln_cl_op_bind_kernels_like(kiln_cl_op *op, const kiln_cl_op *from, kiln_cl_context *ctx,
                                         cl_program prog) {
  return bind_kernels(op, from, ctx, prog);
}

static kiln_status bind_kernels(kiln_cl_op *op, const kiln_cl_op *from, kiln_cl_context *ctx, cl_program prog) {
  kiln_status s = KILN_OK;
  for (int k = 0; k < op->n_kern && !s; k++) {
    if (op->kern[k].k) continue;
    if (from && k < from->n_kern && from->kern[k].k && !strcmp(from->kname[k], op->kname[k]))
      s = kiln_cl_kernel_share(&from->kern[k], &op->kern[k]); /* run_kernel sets every argument at each launch */
    else
      s = kiln_cl_kernel_create(ctx, prog, op->kname[k], &op->kern[k]);
  }
  if (!s && op->n_scr && !op->ws_ctx) s = ws_acquire(ctx, op->scr_bytes, op);
  for (int i = 0; i < op->n_steps && !s; i++) {
    op_step *st = &op->steps[i];
    if (st->kind != ST_KERNEL || !st->groups) continue;
    size_t lim = op->kern[st->kernel].wg_size;
    if (lim > ctx->max_work_item_size0) lim = ctx->max_work_item_size0;
    size_t l = 1;
    while (l * 2 <= lim && l * 2 <= OP_RED_WG) l *= 2;
    st->red_local = l;
  }
  if (!s && op->max_batch && !op->work) {
    op->work = kiln_malloc(3 * op->max_batch * sizeof *op->work);
    op->ab = kiln_malloc(2 * op->max_batch * sizeof *op->ab);
    if (!op->work || !op->ab) s = kiln_fail(KILN_E_NOMEM, "out of memory binding node '%s'", op->label);
  }
  if (!s && op->chk_n > 0 && !op->chk.mem) {
    static const cl_int zero[KILN_CLOP_CHK_WORDS];
    s = kiln_cl_buffer_create(ctx, sizeof zero, &op->chk);
    if (!s) s = kiln_cl_buffer_write(ctx, &op->chk, 0, zero, sizeof zero);
  }
  if (s) kiln_error_prefix("node '%s'", op->label);
  return s;
}

void kiln_clop_checks(kiln_cl_op *op, int n, const int64_t *dims) {
  op->chk_n = n < 1 ? 1 : n > KILN_MAX_RANK ? KILN_MAX_RANK : n;
  for (int d = 0; d < op->chk_n; d++) op->chk_dims[d] = d < n ? dims[d] : 0;
}

kiln_status kiln_clop_chk_src(kiln_cl_src *src, const char *j, bool is_long, const char *d) {
  /* the high word without widening an int to long (Mesa 22.3 rusticl
     miscompiles that in these kernels) */
  if (is_long)
    return kiln_cl_src_printf(src,
                              "  if (atomic_cmpxchg(chk_ + co, 0, 1) == 0) { chk_[co + 1] = (int)(%s & 0xffffffffL); "
                              "chk_[co + 2] = (int)(%s >> 32); chk_[co + 3] = %s; }\n",
                              j, j, d);
  return kiln_cl_src_printf(src,
                            "  if (atomic_cmpxchg(chk_ + co, 0, 1) == 0) { chk_[co + 1] = %s; chk_[co + 2] = %s < 0 ? "
                            "-1 : 0; chk_[co + 3] = %s; }\n",
                            j, j, d);
}

kiln_status kiln_clop_first_bad_src(kiln_cl_src *src, const char *chk, const char *pos, int64_t base) {
  return kiln_cl_src_printf(src, "      atomic_max(%s + 4, (int)(%lld - (%s)));\n      atomic_xchg(%s, 1);\n", chk,
                            (long long)base, pos, chk);
}

kiln_status kiln_clop_first_bad(kiln_cl_op *op, kiln_cl_src *src, opb in, const char *it, int64_t base) {
  int k = 0;
  kiln_status s = kiln_clop_kernel(op, "first_bad", &k);
  /* int arithmetic throughout (base <= INT32_MAX): Mesa 22.3 rusticl
     miscompiles an int widened to long in these kernels */
  if (!s)
    s = kiln_cl_src_printf(src,
                           "__kernel void %s(__global const %s *ind_, ulong io, __global int *chk_, ulong co) {\n"
                           "  if (get_global_id(0) != 0 || !chk_[co] || chk_[co + 3] || chk_[co + 4] < 1) return;\n"
                           "  const int p = %lld - chk_[co + 4];\n  const %s v = ind_[io + (ulong)p];\n"
                           "  chk_[co + 1] = (int)(v & 0x%s); chk_[co + 2] = %s;\n"
                           "  chk_[co + 4] = p; chk_[co + 5] = 0;\n}\n",
                           kiln_clop_kname(op, k), it, (long long)base, it, strcmp(it, "int") ? "ffffffffL" : "ffffffff",
                           strcmp(it, "int") ? "(int)(v >> 32)" : "v < 0 ? -1 : 0");
  if (!s) s = kiln_clop_launch(op, k, 1, 2, (opb[]){in, CHK});
  return s;
}

kiln_status kiln_cl_op_checked(kiln_cl_op *op, kiln_cl_context *ctx) {
  if (!op || !op->chk_pending) return KILN_OK;
  op->chk_pending = false;
  if (!op->chk_host[0]) return KILN_OK;
  cl_int w[KILN_CLOP_CHK_WORDS];
  memcpy(w, op->chk_host, sizeof w);
  static const cl_int zero[KILN_CLOP_CHK_WORDS];
  memset(op->chk_host, 0, sizeof op->chk_host);
  kiln_status s = kiln_cl_buffer_write(ctx, &op->chk, 0, zero, sizeof zero); /* the next run starts clean */
  if (s) return s;
  if (op->chk_msg) return op->chk_msg(op, w);
  long long bad = (long long)(((uint64_t)(uint32_t)w[2] << 32) | (uint32_t)w[1]);
  int d = w[3] >= 0 && w[3] < op->chk_n ? w[3] : 0;
  return kiln_fail(KILN_E_INVALID_VALUE, "index %lld is out of range for a dimension of size %lld", bad,
                   (long long)op->chk_dims[d]);
}

/* The buffer and element offset of ref b. */
static kiln_status op_arg(const kiln_cl_op *op, opb b, const kiln_cl_arg *in, const kiln_cl_arg *out, cl_mem *mem,
                          size_t *elems) {
  size_t es;
  if (b.kind == OPB_IN) {
    *mem = in[b.idx].mem;
    es = op->in_es[b.idx];
    *elems = es ? in[b.idx].offset / es : 0;
  } else if (b.kind == OPB_OUT) {
    *mem = out[b.idx].mem;
    es = op->out_es[b.idx];
    *elems = es ? out[b.idx].offset / es + b.at : 0;
  } else if (b.kind == OPB_CHK) {
    *mem = op->chk.mem;
    *elems = 0;
    es = 4;
  } else {
    *mem = op->ws_ctx ? ws_get(op->ws_ctx) : NULL;
    *elems = 0;
    es = 4;
  }
  if (!*mem || !es)
    return kiln_fail(KILN_E_INTERNAL, "no device buffer for its %s %d",
                     b.kind == OPB_IN    ? "input"
                     : b.kind == OPB_OUT ? "output"
                     : b.kind == OPB_CHK ? "index check"
                                         : "scratch",
                     (int)b.idx);
  return KILN_OK;
}

static kiln_status run_kernel(kiln_cl_op *op, kiln_cl_context *ctx, const op_step *st, const kiln_cl_arg *in,
                              const kiln_cl_arg *out) {
  kiln_cl_kernel *k = &op->kern[st->kernel];
  kiln_status s = KILN_OK;
  for (int a = 0; a < st->nargs && !s; a++) {
    cl_mem m;
    size_t off;
    s = op_arg(op, st->args[a], in, out, &m, &off);
    cl_ulong o = off;
    if (!s) s = kiln_cl_kernel_arg(k, (cl_uint)(2 * a), sizeof m, &m);
    if (!s) s = kiln_cl_kernel_arg(k, (cl_uint)(2 * a + 1), sizeof o, &o);
  }
  if (s) return s;
  if (st->groups) {
    size_t g = st->groups * st->red_local, l = st->red_local;
    cl_int e = clEnqueueNDRangeKernel(ctx->queue, k->k, 1, NULL, &g, &l, 0, NULL, NULL);
    if (e) return kiln_cl_fail(e, "launching OpenCL kernel '%s' (%zu groups of %zu)", k->name, st->groups, l);
    return KILN_OK;
  }
  if (st->dims == 1) return kiln_cl_launch_1d(ctx, k, st->items[0], st->local[0], NULL);
  size_t g[2], l[2] = {st->local[0], st->local[1]};
  for (int d = 0; d < 2; d++) g[d] = kiln_cl_pad(st->items[d], l[d] ? l[d] : 1);
  if (!g[0] || !g[1]) return KILN_OK;
  cl_int e = clEnqueueNDRangeKernel(ctx->queue, k->k, 2, NULL, g, l[0] ? l : NULL, 0, NULL, NULL);
  if (e) return kiln_cl_fail(e, "launching OpenCL kernel '%s' (global %zux%zu)", k->name, g[0], g[1]);
  return KILN_OK;
}

static kiln_status run_gemm(kiln_cl_op *op, kiln_cl_context *ctx, const op_step *st, const kiln_cl_arg *in,
                            const kiln_cl_arg *out) {
  cl_mem a, b, c;
  size_t ao, bo, co;
  kiln_status s = op_arg(op, st->a, in, out, &a, &ao);
  if (!s) s = op_arg(op, st->b, in, out, &b, &bo);
  if (!s) s = op_arg(op, st->c, in, out, &c, &co);
  if (s) return s;
  CLBlastTranspose ta = st->ta ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastTranspose tb = st->tb ? CLBlastTransposeYes : CLBlastTransposeNo;
  CLBlastStatusCode e;
  blas_ready(ctx->ctx, st->kind == ST_GEMM ? OP_BLAS_GEMM : OP_BLAS_GEMM_BATCHED);
  if (st->kind == ST_GEMM) {
    pthread_mutex_lock(&blas_lock);
    e = CLBlastSgemm(CLBlastLayoutRowMajor, ta, tb, st->m, st->n, st->k, st->alpha, a, ao + st->aoff, st->lda, b,
                     bo + st->boff, st->ldb, st->beta, c, co + st->coff, st->ldc, &ctx->queue, NULL);
    pthread_mutex_unlock(&blas_lock);
    return e ? blas_fail(e, "sgemm", op) : KILN_OK;
  }
  size_t *wa = op->work, *wb = wa + st->batch, *wc = wb + st->batch;
  float *al = op->ab, *be = al + st->batch;
  for (size_t i = 0; i < st->batch; i++) {
    wa[i] = ao + st->aoffs[i];
    wb[i] = bo + st->boffs[i];
    wc[i] = co + st->coffs[i];
    al[i] = st->alpha;
    be[i] = st->beta;
  }
  pthread_mutex_lock(&blas_lock);
  e = CLBlastSgemmBatched(CLBlastLayoutRowMajor, ta, tb, st->m, st->n, st->k, al, a, wa, st->lda, b, wb, st->ldb, be, c,
                          wc, st->ldc, st->batch, &ctx->queue, NULL);
  pthread_mutex_unlock(&blas_lock);
  return e ? blas_fail(e, "sgemm batched", op) : KILN_OK;
}

kiln_status kiln_cl_op_enqueue(kiln_cl_op *op, kiln_cl_context *ctx, const kiln_cl_arg *in, const kiln_cl_arg *out) {
  kiln_status s = KILN_OK;
  for (int i = 0; i < op->n_steps && !s; i++) {
    const op_step *st = &op->steps[i];
    s = st->kind == ST_KERNEL ? run_kernel(op, ctx, st, in, out) : run_gemm(op, ctx, st, in, out);
  }
  if (!s && op->chk.mem) { /* the check words, read with the run (the host looks after the queue finished) */
    cl_int e = clEnqueueReadBuffer(ctx->queue, op->chk.mem, CL_FALSE, 0, sizeof op->chk_host, op->chk_host, 0, NULL,
                                   NULL);
    if (e) s = kiln_cl_fail(e, "reading the index check of node '%s'", op->label);
    else op->chk_pending = true;
  }
  if (s) kiln_error_prefix("node '%s'", op->label);
  return s;
}

const char *kiln_cl_op_describe(const kiln_cl_op *op) { return op ? op->desc : ""; }

bool kiln_cl_op_calls_clblast(const kiln_cl_op *op) { return op && op->blas; }

void kiln_cl_op_free(kiln_cl_op *op) {
  if (!op) return;
  blas_ready(op->blas_ctx, op->blas); /* no warm-up thread outlives the ops that wait for it */
  for (int k = 0; k < op->n_kern; k++) kiln_cl_kernel_free(&op->kern[k]);
  ws_release(op);
  kiln_cl_buffer_free(&op->chk);
  for (int i = 0; i < op->n_steps; i++) {
    kiln_free(op->steps[i].aoffs);
    kiln_free(op->steps[i].boffs);
    kiln_free(op->steps[i].coffs);
  }
  kiln_free(op->steps);
  kiln_free(op->in_es);
  kiln_free(op->out_es);
  kiln_free(op->work);
  kiln_free(op->ab);
  kiln_free(op);
}

/* ---- run-time row counts (opencl/engine_sym.c) ---- */

bool kiln_cl_op_rows_ok(const kiln_cl_op *op, int64_t bound, kiln_cl_rows_kind kind) {
  bool images = kind == KILN_CL_ROWS_IMAGES, rowwise = kind != KILN_CL_ROWS_GEMM;
  if (!op || bound < 1 || (op->n_scr && !images) || op->strided) return false;
  size_t b = (size_t)bound;
  for (int i = 0; i < op->n_steps; i++) {
    const op_step *st = &op->steps[i];
    if (st->kind == ST_GEMM_BATCHED) {
      /* one GEMM per image (and group), images outermost (ops_gemm.c conv_gemm) */
      if (!images || st->batch % b) return false;
    } else if (st->kind == ST_GEMM) {
      /* C[m,n] = op(A) B: A's rows are the batch-outermost rows of input 0 */
      if (images || st->ta || st->a.kind != OPB_IN || st->a.idx != 0 || st->c.kind != OPB_OUT || st->c.idx != 0 ||
          st->b.kind != OPB_IN || st->b.idx == 0 || st->aoff || st->coff || st->m % b)
        return false;
    } else if (st->kind == ST_KERNEL && st->rows_tile) {
      /* kiln's SGEMM: batched as ST_GEMM_BATCHED; else as ST_GEMM, launched
         over the run's row tiles (a last partial one computes rows up to
         the bound's, inside the bound's slots like a padded 1-D launch) */
      if (st->batch > 1) {
        if (!images || st->batch % b) return false;
      } else if (images || st->ta || st->a.kind != OPB_IN || st->a.idx != 0 || st->c.kind != OPB_OUT ||
                 st->c.idx != 0 || st->b.kind != OPB_IN || st->b.idx == 0 || st->m % b) {
        return false;
      }
    } else if (st->kind == ST_KERNEL && st->groups) {
      /* a work-group per row (rowwise: rows batch-outermost) */
      if (!rowwise || st->groups % b) return false;
    } else if (st->kind == ST_KERNEL) {
      /* a 1-D kernel over the output's elements (Gemm's C broadcast), or
         (rowwise) a work-item per row, or (images) per output element */
      if (st->dims != 1 || st->local[0] || st->items[0] % b) return false;
      for (int a = 0; a < st->nargs && !rowwise; a++)
        if (st->args[a].kind == OPB_IN && st->args[a].idx == 0) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool kiln_cl_op_box_ok(const kiln_cl_op *op, int64_t outer, int64_t bound) {
  if (!kiln_cl_op_rows_ok(op, bound, KILN_CL_ROWS_GEMM) || outer < 1) return false;
  for (int i = 0; i < op->n_steps; i++)
    if (op->steps[i].kind != ST_GEMM || op->steps[i].m % ((size_t)outer * (size_t)bound)) return false;
  return true;
}

kiln_status kiln_cl_op_enqueue_box(kiln_cl_op *op, kiln_cl_context *ctx, const kiln_cl_arg *in,
                                   const kiln_cl_arg *out, int64_t outer, int64_t blocks, int64_t n, int64_t bound) {
  if (n == bound) return kiln_cl_op_enqueue_rows(op, ctx, in, out, blocks, outer); /* whole blocks: a prefix */
  kiln_status s = KILN_OK;
  size_t uo = (size_t)outer;
  for (size_t o = 0; o < (size_t)blocks && !s; o++) { /* block o: its first rows, at its offsets; set back below */
    for (int i = 0; i < op->n_steps; i++) {
      op_step *st = &op->steps[i];
      size_t rows = st->m / uo;
      st->aoff = o * rows * st->lda, st->coff = o * rows * st->ldc, st->m = rows / (size_t)bound * (size_t)n;
    }
    s = kiln_cl_op_enqueue(op, ctx, in, out);
    for (int i = 0; i < op->n_steps; i++) {
      op_step *st = &op->steps[i];
      st->aoff = st->coff = 0, st->m = st->m / (size_t)n * (size_t)bound * uo;
    }
  }
  return s;
}

kiln_status kiln_cl_op_enqueue_rows(kiln_cl_op *op, kiln_cl_context *ctx, const kiln_cl_arg *in,
                                    const kiln_cl_arg *out, int64_t n, int64_t bound) {
  if (n == bound) return kiln_cl_op_enqueue(op, ctx, in, out);
  size_t un = (size_t)n, ub = (size_t)bound;
  for (int i = 0; i < op->n_steps; i++) { /* the run's rows; back below */
    op_step *st = &op->steps[i];
    if (st->kind == ST_GEMM) st->m = st->m / ub * un;
    else if (st->kind == ST_GEMM_BATCHED) st->batch = st->batch / ub * un;
    else if (st->groups) st->groups = st->groups / ub * un;
    else if (st->rows_tile && st->batch > 1) st->items[1] = st->items[1] / ub * un;
    else if (st->rows_tile) st->items[1] = (st->m / ub * un + st->rows_tile - 1) / st->rows_tile;
    else st->items[0] = st->items[0] / ub * un;
  }
  kiln_status s = kiln_cl_op_enqueue(op, ctx, in, out);
  for (int i = 0; i < op->n_steps; i++) {
    op_step *st = &op->steps[i];
    if (st->kind == ST_GEMM) st->m = st->m / un * ub;
    else if (st->kind == ST_GEMM_BATCHED) st->batch = st->batch / un * ub;
    else if (st->groups) st->groups = st->groups / un * ub;
    else if (st->rows_tile && st->batch > 1) st->items[1] = st->items[1] / un * ub;
    else if (st->rows_tile) st->items[1] = (st->m + st->rows_tile - 1) / st->rows_tile;
    else st->items[0] = st->items[0] / un * ub;
  }
  return s;
}
