/* cpu_fallback/sls: kiln's custom-domain kernels (KILN_DOMAIN,
 * docs/KILN_DOMAIN.md) for the cpu backend — SparseLengthsSum /
 * WeightedSum / Mean over float32, float16 and 8-bit rowwise tables (and the
 * Caffe2 *Fused8BitRowwise names), the rowwise (de)quantizers and LSTMUnit —
 * plus the scalar twins of sls_avx2.c and the dispatch between them.
 * A call is decoded and checked by reference/ops_kiln.c's decoders, so the
 * errors are the reference kernels'; strided (view) inputs and float16
 * quantizer inputs are declined (the reference kernel runs). */
#include "cpu_fallback/sls.h"

#include <pthread.h>
#include <string.h>

#include "cpu_fallback/kernels.h"
#include "cpu_fallback/pool.h"
#include "ir/alloc.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---- dispatch ---- */

static pthread_once_t f16c_once = PTHREAD_ONCE_INIT;
static bool cpu_f16c;
static int forced = KILN_VM_NISA;

static void probe_f16c(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) cpu_f16c = (c >> 29) & 1;
#endif
}

bool kiln_sls_isa_ok(kiln_vm_isa isa) {
  if (isa == KILN_VM_ISA_BASE) return true;
  if (isa != KILN_VM_ISA_AVX2) return false;
#ifdef KILN_SLS_HAVE_AVX2
  pthread_once(&f16c_once, probe_f16c);
  return cpu_f16c && kiln_vm_kernel(KILN_VM_EXP, KILN_VM_ISA_AVX2) != NULL;
#else
  return false;
#endif
}

void kiln_sls_force_isa(kiln_vm_isa isa) { forced = (int)isa; }

kiln_vm_isa kiln_sls_isa(void) {
  int f = forced;
  if (f != KILN_VM_NISA && kiln_sls_isa_ok((kiln_vm_isa)f)) return (kiln_vm_isa)f;
  kiln_vm_isa a = kiln_vm_isa_active();
  return kiln_sls_isa_ok(a) ? a : KILN_VM_ISA_BASE;
}

static bool use_avx2(void) {
#ifdef KILN_SLS_HAVE_AVX2
  return kiln_sls_isa() == KILN_VM_ISA_AVX2;
#else
  return false;
#endif
}

/* ---- the scalar twins ---- */

static int64_t index_at(const kiln_sls_job *j, int64_t k) {
  return j->idx64 ? ((const int64_t *)j->indices)[k] : ((const int32_t *)j->indices)[k];
}

/* y[e] += w·x[e] over one row, by table kind (local restrict pointers: the
 * byte rows may not alias the output as far as the compiler knows). */
static void row_f32(float *restrict y, const float *restrict x, int64_t dim, float w) {
  for (int64_t e = 0; e < dim; e++) y[e] += w * x[e];
}

static void row_f16(float *restrict y, const uint16_t *restrict x, int64_t dim, float w) {
  for (int64_t e = 0; e < dim; e++) y[e] += w * kiln_f16_to_f32(x[e]);
}

/* The bytes as floats: a load instead of cvtsi2ss, whose merge into the
 * previous iteration's register would chain every element to the last. */
static const float u8f[256] = {
#define R4(k) (k), (k) + 1, (k) + 2, (k) + 3
#define R16(k) R4(k), R4((k) + 4), R4((k) + 8), R4((k) + 12)
#define R64(k) R16(k), R16((k) + 16), R16((k) + 32), R16((k) + 48)
    R64(0), R64(64), R64(128), R64(192)
#undef R64
#undef R16
#undef R4
};

static void row_u8(float *restrict y, const uint8_t *restrict x, int64_t dim, float ws, float wb) {
  for (int64_t e = 0; e < dim; e++) y[e] = (y[e] + wb) + ws * u8f[x[e]];
}

void kiln_sls_base(kiln_sls_job *j) {
  j->bad = -1;
  const int64_t dim = j->dim, rows = j->rows;
  const uint8_t *data = j->data;
  const size_t row_bytes = j->row_bytes;
  const float *wts = j->weights;
  for (int64_t m = 0; m < j->m; m++) {
    float *y = j->out + m * dim;
    for (int64_t e = 0; e < dim; e++) y[e] = 0.0f;
    int64_t b = j->start[m], end = j->start[m + 1];
    for (int64_t k = b; k < end; k++) {
      int64_t r = index_at(j, k);
      if (r < 0 || r >= rows) {
        j->bad = k;
        return;
      }
      if (k + KILN_SLS_PREFETCH < end) { /* as the AVX2 version: the twins differ only in SIMD */
        int64_t pr = index_at(j, k + KILN_SLS_PREFETCH);
        if (pr >= 0 && pr < rows) { /* the row's first and last byte: it may span two lines */
          __builtin_prefetch(data + (size_t)pr * row_bytes);
          __builtin_prefetch(data + (size_t)pr * row_bytes + row_bytes - 1);
        }
      }
      float w = wts ? wts[j->positional ? k - b : k] : 1.0f;
      const uint8_t *row = data + (size_t)r * row_bytes;
      switch (j->table) {
      case KILN_SLS_F32: row_f32(y, (const float *)row, dim, w); break;
      case KILN_SLS_F16: row_f16(y, (const uint16_t *)row, dim, w); break;
      case KILN_SLS_U8ROW: {
        float sb[2];
        memcpy(sb, row + dim, sizeof sb);
        row_u8(y, row, dim, w * sb[0], w * sb[1]);
        break;
      }
      }
    }
    if (j->mean && end > b) {
      float inv = 1.0f / (float)(end - b);
      for (int64_t e = 0; e < dim; e++) y[e] *= inv;
    }
  }
}

void kiln_rowwise_quant_base(const float *x, int64_t rows, int64_t d, uint8_t *y) {
  for (int64_t r = 0; r < rows; r++) kiln_rowwise_quantize_row(x + r * d, d, y + r * (d + KILN_ROWWISE_TAIL));
}

void kiln_rowwise_dequant_base(const uint8_t *x, int64_t rows, int64_t d, float *y) {
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *row = x + r * (d + KILN_ROWWISE_TAIL);
    float sb[2];
    memcpy(sb, row + d, sizeof sb);
    for (int64_t e = 0; e < d; e++) {
      float p = (float)row[e] * sb[0];
      y[r * d + e] = p + sb[1];
    }
  }
}

/* ---- the operator kernels ---- */

static bool any_strided(const kiln_op_call *c) {
  for (int i = 0; i < c->n_in; i++)
    if (c->in[i] && c->in[i]->strided) return true;
  return false;
}

/* The bags on the cpu pool: task t takes the bags whose first index lies
 * in [t·K/T, (t+1)·K/T) of the K indices (T tasks of about
 * KILN_SLS_TASK_ROWS rows each, at most KILN_SLS_TASKS), so a task gathers
 * about as many rows as any other whatever the bag lengths. Each bag is
 * summed by one task in the order the serial kernel uses: the same bits
 * for any thread count. Random rows of a large table are a memory latency
 * each; two threads keep twice as many misses in flight. A bad index: the
 * first of all tasks' (the one the serial kernel stops at). */
#define KILN_SLS_TASK_ROWS 2048
#define KILN_SLS_TASKS 64

typedef struct {
  const kiln_sls_job *j;
  bool avx2;
  int64_t tasks, total;
  int64_t bad[KILN_SLS_TASKS];
} sls_par;

static int64_t first_bag(const sls_par *p, int64_t t) { /* the first bag with start >= start[0] + t·K/T */
  const kiln_sls_job *j = p->j;
  if (t >= p->tasks) return j->m; /* trailing empty bags too */
  int64_t want = j->start[0] + p->total * t / p->tasks, lo = 0, hi = j->m;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (j->start[mid] < want) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void sls_task(void *arg, int64_t t, int worker) {
  (void)worker;
  sls_par *p = arg;
  int64_t m0 = first_bag(p, t), m1 = first_bag(p, t + 1);
  p->bad[t] = -1;
  if (m0 >= m1) return;
  kiln_sls_job j = *p->j;
  j.start += m0, j.m = m1 - m0, j.out += m0 * j.dim;
  if (p->avx2) kiln_sls_avx2_fma(&j);
  else kiln_sls_base(&j);
  p->bad[t] = j.bad;
}

void kiln_sls_run(kiln_sls_job *j, bool avx2) {
  int64_t total = j->m ? j->start[j->m] - j->start[0] : 0;
  int workers = kiln_pool_threads();
  int64_t tasks = workers > 1 ? kiln_pool_tasks(total, KILN_SLS_TASK_ROWS, KILN_SLS_TASKS) : 1;
  if (tasks <= 1) {
    if (avx2) kiln_sls_avx2_fma(j);
    else kiln_sls_base(j);
    return;
  }
  sls_par p = {j, avx2, tasks, total, {0}};
  kiln_pool_for(tasks, workers, sls_task, &p);
  j->bad = -1;
  for (int64_t t = 0; t < tasks && j->bad < 0; t++) j->bad = p.bad[t];
}

static kiln_status run_sls(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  if (any_strided(c)) return KILN_OK;
  *declined = false;
  kiln_sls_spec sp;
  kiln_status s = kiln_sls_decode(c, &sp);
  if (s) return s;
  s = kiln_tensor_alloc(&c->out[0], KILN_F32, sp.out_rank, sp.out_dims);
  if (!s) {
    size_t el = sp.table == KILN_SLS_F32 ? 4 : sp.table == KILN_SLS_F16 ? 2 : 1;
    kiln_sls_job j = {sp.table, sp.data->data, (size_t)sp.row_elems * el, sp.rows, sp.dim, sp.indices->data,
                      sp.indices->dtype == KILN_I64, sp.start, sp.m, sp.weights ? sp.weights->data : NULL,
                      sp.positional, sp.mean, c->out[0].data, -1};
    kiln_sls_run(&j, use_avx2());
    if (j.bad >= 0) s = kiln_sls_bad_index(&sp, j.bad, index_at(&j, j.bad));
  }
  kiln_sls_spec_free(&sp);
  return s;
}

static kiln_status run_quant(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  if (!x || x->strided || x->dtype != KILN_F32 || x->rank < 1) return KILN_OK;
  *declined = false;
  int64_t dims[KILN_MAX_RANK], d = x->dims[x->rank - 1], rows = 1;
  memcpy(dims, x->dims, sizeof dims);
  dims[x->rank - 1] = d + KILN_ROWWISE_TAIL;
  for (int k = 0; k < x->rank - 1; k++) rows *= x->dims[k];
  kiln_status s = kiln_tensor_alloc(&c->out[0], KILN_U8, x->rank, dims);
  if (s) return s;
  if (use_avx2()) kiln_rowwise_quant_avx2_fma(x->data, rows, d, c->out[0].data);
  else kiln_rowwise_quant_base(x->data, rows, d, c->out[0].data);
  return KILN_OK;
}

static kiln_status run_dequant(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  if (!x || x->strided || x->dtype != KILN_U8 || x->rank < 1 || x->dims[x->rank - 1] < KILN_ROWWISE_TAIL)
    return KILN_OK; /* the reference kernel runs (and reports what is wrong) */
  *declined = false;
  int64_t dims[KILN_MAX_RANK], d = x->dims[x->rank - 1] - KILN_ROWWISE_TAIL, rows = 1;
  memcpy(dims, x->dims, sizeof dims);
  dims[x->rank - 1] = d;
  for (int k = 0; k < x->rank - 1; k++) rows *= x->dims[k];
  kiln_status s = kiln_tensor_alloc(&c->out[0], KILN_F32, x->rank, dims);
  if (s) return s;
  if (use_avx2()) kiln_rowwise_dequant_avx2_fma(x->data, rows, d, c->out[0].data);
  else kiln_rowwise_dequant_base(x->data, rows, d, c->out[0].data);
  return KILN_OK;
}

/* LSTMUnit: Caffe2's LSTMUnit, row by row, with kiln_vm_sigmoid / tanh of
 * the chosen version over each row's gates. */
static kiln_status run_lstmu(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  if (any_strided(c)) return KILN_OK;
  *declined = false;
  kiln_lstmu_spec sp;
  kiln_status s = kiln_lstmu_decode(c, &sp);
  if (s) return s;
  const kiln_tensor *cp = sp.c_prev;
  if ((s = kiln_tensor_alloc(&c->out[0], KILN_F32, cp->rank, cp->dims))) return s;
  if ((s = kiln_tensor_alloc(&c->out[1], KILN_F32, cp->rank, cp->dims))) return s;
  int64_t d = sp.d;
  float *tmp = kiln_malloc(((size_t)d * 5 + 1) * sizeof *tmp);
  if (!tmp) return kiln_fail(KILN_E_NOMEM, "out of memory");
  kiln_vm_isa isa = kiln_sls_isa();
  kiln_vm_fn sigm = kiln_vm_kernel(KILN_VM_SIGMOID, isa), th = kiln_vm_kernel(KILN_VM_TANH, isa);
  const float *hp = sp.h_prev->data, *cpv = cp->data, *g = sp.gates->data;
  float *h = c->out[0].data, *cc = c->out[1].data;
  for (int64_t n = 0; n < sp.rows; n++) {
    const float *gx = g + n * 4 * d;
    float *ho = h + n * d, *co = cc + n * d;
    if (sp.seq && !(sp.t < kiln_get_i(sp.seq, n))) {
      if (sp.drop_states) {
        memset(ho, 0, (size_t)d * sizeof *ho);
        memset(co, 0, (size_t)d * sizeof *co);
      } else {
        memcpy(ho, hp + n * d, (size_t)d * sizeof *ho);
        memcpy(co, cpv + n * d, (size_t)d * sizeof *co);
      }
      continue;
    }
    /* tmp: i | f | o | g | tanh(c) */
    for (int64_t e = 0; e < d; e++) tmp[d + e] = gx[d + e] + sp.forget_bias;
    sigm((size_t)d, gx, tmp);
    sigm((size_t)d, tmp + d, tmp + d);
    sigm((size_t)d, gx + 2 * d, tmp + 2 * d);
    th((size_t)d, gx + 3 * d, tmp + 3 * d);
    for (int64_t e = 0; e < d; e++) co[e] = tmp[d + e] * cpv[n * d + e] + tmp[e] * tmp[3 * d + e];
    th((size_t)d, co, tmp + 4 * d);
    for (int64_t e = 0; e < d; e++) ho[e] = tmp[4 * d + e] * tmp[2 * d + e];
  }
  kiln_free(tmp);
  return KILN_OK;
}

const kiln_cpu_kernel_def kiln_cpu_kernels_ext[] = {
    {"SparseLengthsSum", KILN_DOMAIN, run_sls, false},
    {"SparseLengthsWeightedSum", KILN_DOMAIN, run_sls, false},
    {"SparseLengthsMean", KILN_DOMAIN, run_sls, false},
    {"SparseLengthsSumFused8BitRowwise", KILN_DOMAIN, run_sls, false},
    {"SparseLengthsWeightedSumFused8BitRowwise", KILN_DOMAIN, run_sls, false},
    {"SparseLengthsMeanFused8BitRowwise", KILN_DOMAIN, run_sls, false},
    {"FloatToFused8BitRowwiseQuantized", KILN_DOMAIN, run_quant, false},
    {"Fused8BitRowwiseQuantizedToFloat", KILN_DOMAIN, run_dequant, false},
    {"LSTMUnit", KILN_DOMAIN, run_lstmu, false},
    {NULL, NULL, NULL, false},
};
