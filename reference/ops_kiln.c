/* reference/ops_kiln: scalar kernels (see reference/ops.h) for the operators
 * of kiln's own domain, KILN_DOMAIN ("ai.kiln", version 1), the Caffe2
 * perf kernels of the seeds (docs/KILN_DOMAIN.md is the specification):
 *   SparseLengthsSum, SparseLengthsWeightedSum, SparseLengthsMean over
 *   float32, float16 and Fused8BitRowwise (uint8) tables, and their Caffe2
 *   names SparseLengths*Fused8BitRowwise (uint8 tables only);
 *   FloatToFused8BitRowwiseQuantized, Fused8BitRowwiseQuantizedToFloat;
 *   LSTMUnit.
 * Sums are accumulated in double and rounded once on the store; the
 * quantizers compute in float32 exactly as Caffe2 does (the rounding point
 * decides the byte); LSTMUnit computes in double. */
#include "reference/ops_kiln.h"

#include <math.h>
#include <string.h>

#include "ir/alloc.h"

#define TRY(x)                  \
  do {                          \
    kiln_status s_ = (x);       \
    if (s_) return s_;          \
  } while (0)

static bool has(const char *s, const char *part) { return strstr(s, part) != NULL; }

static kiln_status want_idx(const kiln_tensor *t, const char *what) {
  if (t->dtype == KILN_I32 || t->dtype == KILN_I64) return KILN_OK;
  return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "%s has type %s; int32 or int64 expected", what, kiln_dtype_name(t->dtype));
}

static kiln_status want_rank1(const kiln_tensor *t, const char *what) {
  if (t->rank == 1) return KILN_OK;
  return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s has rank %d; rank 1 expected", what, t->rank);
}

/* ------------------------------------------------------------------------ */
/* Decoding (shared with cpu_fallback/sls.c)                                 */

kiln_status kiln_sls_seg_fail(kiln_sls_seg_error e, int64_t a, int64_t b, int64_t c, int64_t n, int64_t wn) {
  switch (e) {
  case KILN_SLS_NEG_LENGTH:
    return kiln_fail(KILN_E_INVALID_VALUE, "LENGTHS[%lld] is negative (%lld)", (long long)b, (long long)a);
  case KILN_SLS_LENGTHS_OVER:
    return kiln_fail(KILN_E_INVALID_VALUE, "LENGTHS add up to more than the %lld indices (at segment %lld)",
                     (long long)n, (long long)b);
  case KILN_SLS_LENGTHS_SUM:
    return kiln_fail(KILN_E_INVALID_VALUE, "LENGTHS add up to %lld but INDICES has %lld elements", (long long)a,
                     (long long)n);
  case KILN_SLS_OFFSET0:
    return kiln_fail(KILN_E_INVALID_VALUE, "OFFSETS[0] is %lld; the first segment must start at 0", (long long)a);
  case KILN_SLS_OFFSET_RANGE:
    return kiln_fail(KILN_E_INVALID_VALUE,
                     "OFFSETS[%lld] = %lld is outside [%lld, %lld] (offsets must be non-decreasing and at most the "
                     "%lld indices)",
                     (long long)b, (long long)a, (long long)c, (long long)n, (long long)n);
  case KILN_SLS_OFFSETS_EMPTY:
    return kiln_fail(KILN_E_INVALID_VALUE, "OFFSETS is empty but INDICES has %lld elements", (long long)n);
  case KILN_SLS_POSITIONAL:
    return kiln_fail(KILN_E_INVALID_VALUE, "a segment has %lld indices but the positional WEIGHTS only %lld",
                     (long long)a, (long long)wn);
  }
  return kiln_fail(KILN_E_INTERNAL, "SparseLengths: segment error %d", (int)e);
}

kiln_status kiln_sls_segments(const kiln_tensor *seg, bool offsets, int64_t n, int64_t wn, int64_t *start,
                              int64_t *longest_out) {
  int64_t m = seg->numel, at = 0, longest = 0;
  for (int64_t k = 0; k < m; k++) {
    int64_t v = kiln_get_i(seg, k);
    if (offsets) {
      if (k == 0 && v != 0) return kiln_sls_seg_fail(KILN_SLS_OFFSET0, v, 0, 0, n, wn);
      if (v < at || v > n) return kiln_sls_seg_fail(KILN_SLS_OFFSET_RANGE, v, k, at, n, wn);
      if (k > 0 && v - at > longest) longest = v - at;
      start[k] = at = v;
    } else { /* v checked before the sum: lengths near INT64_MAX must not wrap it */
      if (v < 0) return kiln_sls_seg_fail(KILN_SLS_NEG_LENGTH, v, k, 0, n, wn);
      if (v > n - at) return kiln_sls_seg_fail(KILN_SLS_LENGTHS_OVER, 0, k, 0, n, wn);
      start[k] = at;
      at += v;
      if (v > longest) longest = v;
    }
  }
  if (offsets) {
    if (m > 0 && n - at > longest) longest = n - at;
    if (m == 0 && n != 0) return kiln_sls_seg_fail(KILN_SLS_OFFSETS_EMPTY, 0, 0, 0, n, wn);
    at = n;
  }
  if (at != n) return kiln_sls_seg_fail(KILN_SLS_LENGTHS_SUM, at, 0, 0, n, wn);
  if (wn >= 0 && longest > wn) return kiln_sls_seg_fail(KILN_SLS_POSITIONAL, longest, 0, 0, n, wn);
  start[m] = n;
  *longest_out = longest;
  return KILN_OK;
}

kiln_status kiln_sls_decode(const kiln_op_call *c, kiln_sls_spec *sp) {
  memset(sp, 0, sizeof *sp);
  const char *op = c->node->op_type;
  bool weighted = has(op, "Weighted"), fused = has(op, "Fused8BitRowwise");
  sp->mean = has(op, "Mean");
  sp->positional = weighted && kiln_attr_int(c->node, "positional", 0) != 0;
  bool offsets = kiln_attr_int(c->node, "offsets", 0) != 0;
  int ix = weighted ? 2 : 1, lx = ix + 1;
  for (int i = 0; i <= lx; i++) TRY(kiln_op_need(c, i));
  const kiln_tensor *data = c->in[0], *idx = c->in[ix], *seg = c->in[lx];
  sp->data = data;
  sp->indices = idx;
  sp->weights = weighted ? c->in[1] : NULL;
  if (data->rank < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "DATA is a scalar; a table [rows, ...] expected");
  switch (data->dtype) {
  case KILN_F32: sp->table = KILN_SLS_F32; break;
  case KILN_F16: sp->table = KILN_SLS_F16; break;
  case KILN_U8: sp->table = KILN_SLS_U8ROW; break;
  default:
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "DATA has type %s; float, float16 or uint8 (8-bit rowwise) expected",
                     kiln_dtype_name(data->dtype));
  }
  if (fused && sp->table != KILN_SLS_U8ROW)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "DATA has type %s; %s takes a uint8 Fused8BitRowwise table", kiln_dtype_name(data->dtype), op);
  sp->rows = data->dims[0];
  sp->out_rank = data->rank;
  if (sp->table == KILN_SLS_U8ROW) {
    if (data->rank != 2 || data->dims[1] < KILN_ROWWISE_TAIL)
      return kiln_fail(KILN_E_MISMATCH_SHAPE,
                       "an 8-bit rowwise table must be [rows, D + 8] (uint8 values, float scale, float bias); DATA has "
                       "rank %d%s",
                       data->rank, data->rank == 2 ? " and fewer than 8 columns" : "");
    sp->dim = data->dims[1] - KILN_ROWWISE_TAIL;
    sp->row_elems = data->dims[1];
    sp->out_dims[1] = sp->dim;
  } else {
    sp->dim = 1;
    for (int d = 1; d < data->rank; d++) sp->dim *= data->dims[d], sp->out_dims[d] = data->dims[d];
    sp->row_elems = sp->dim;
  }
  TRY(want_idx(idx, "INDICES"));
  TRY(want_rank1(idx, "INDICES"));
  TRY(want_idx(seg, offsets ? "OFFSETS" : "LENGTHS"));
  TRY(want_rank1(seg, offsets ? "OFFSETS" : "LENGTHS"));
  sp->n = idx->dims[0];
  sp->m = seg->dims[0];
  sp->out_dims[0] = sp->m;
  if (weighted) {
    const kiln_tensor *w = sp->weights;
    if (w->dtype != KILN_F32)
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "WEIGHTS has type %s; float expected", kiln_dtype_name(w->dtype));
    TRY(want_rank1(w, "WEIGHTS"));
    if (!sp->positional && w->dims[0] != sp->n)
      return kiln_fail(KILN_E_INVALID_VALUE, "WEIGHTS has %lld elements but INDICES has %lld", (long long)w->dims[0],
                       (long long)sp->n);
  }
  sp->start = kiln_malloc(((size_t)sp->m + 1) * sizeof *sp->start);
  if (!sp->start) return kiln_fail(KILN_E_NOMEM, "out of memory decoding segments");
  int64_t longest;
  kiln_status s = kiln_sls_segments(seg, offsets, sp->n, sp->positional ? sp->weights->dims[0] : -1, sp->start,
                                    &longest);
  if (s) {
    kiln_sls_spec_free(sp);
    return s;
  }
  if (kiln_attr_int(c->node, "negative_indices", 0) != 0) { /* Gather's indices: [-rows, 0) count from the end */
    int64_t nd[1] = {sp->n};
    if ((s = kiln_tensor_alloc(&sp->wrapped, KILN_I64, 1, nd))) {
      kiln_sls_spec_free(sp);
      return s;
    }
    int64_t *w = sp->wrapped.data;
    for (int64_t j = 0; j < sp->n && !s; j++) {
      int64_t v = kiln_get_i(idx, j);
      if (v < -sp->rows || v >= sp->rows)
        s = kiln_fail(KILN_E_INVALID_VALUE, "index %lld is out of range for a dimension of size %lld", (long long)v,
                      (long long)sp->rows);
      w[j] = v < 0 ? v + sp->rows : v;
    }
    if (s) {
      kiln_sls_spec_free(sp);
      return s;
    }
    sp->indices = &sp->wrapped;
  }
  return KILN_OK;
}

void kiln_sls_spec_free(kiln_sls_spec *sp) {
  kiln_free(sp->start);
  sp->start = NULL;
  kiln_tensor_release(&sp->wrapped);
}

kiln_status kiln_sls_bad_index(const kiln_sls_spec *sp, int64_t j, int64_t idx) {
  return kiln_fail(KILN_E_INVALID_VALUE, "INDICES[%lld] = %lld is outside the table's %lld rows", (long long)j,
                   (long long)idx, (long long)sp->rows);
}

kiln_status kiln_lstmu_decode(const kiln_op_call *c, kiln_lstmu_spec *sp) {
  memset(sp, 0, sizeof *sp);
  for (int i = 0; i < 3; i++) TRY(kiln_op_need(c, i));
  bool use_seq = kiln_attr_int(c->node, "sequence_lengths", 1) != 0;
  sp->forget_bias = kiln_attr_float(c->node, "forget_bias", 0.0f);
  sp->drop_states = kiln_attr_int(c->node, "drop_states", 0) != 0;
  const kiln_tensor *h = c->in[0], *cp = c->in[1], *g = c->in[2];
  sp->h_prev = h;
  sp->c_prev = cp;
  sp->gates = g;
  const char *nm[3] = {"HIDDEN_T_M_1", "CELL_T_M_1", "GATES"};
  for (int i = 0; i < 3; i++)
    if (c->in[i]->dtype != KILN_F32)
      return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "%s has type %s; float expected", nm[i], kiln_dtype_name(c->in[i]->dtype));
  if (cp->rank < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "CELL_T_M_1 is a scalar; [..., N, D] expected");
  bool same = h->rank == cp->rank && g->rank == cp->rank;
  for (int d = 0; same && d < cp->rank; d++)
    same = h->dims[d] == cp->dims[d] && (d == cp->rank - 1 ? g->dims[d] == 4 * cp->dims[d] : g->dims[d] == cp->dims[d]);
  if (!same) {
    char a[96], b[96], e[96];
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "HIDDEN_T_M_1 %s, CELL_T_M_1 %s and GATES %s: the same shape [..., D] expected, GATES [..., 4·D]",
                     kiln_shape_str(h->rank, h->dims, a, sizeof a), kiln_shape_str(cp->rank, cp->dims, b, sizeof b),
                     kiln_shape_str(g->rank, g->dims, e, sizeof e));
  }
  sp->d = cp->dims[cp->rank - 1];
  sp->rows = 1;
  for (int d = 0; d < cp->rank - 1; d++) sp->rows *= cp->dims[d];
  if (!use_seq) return KILN_OK;
  TRY(kiln_op_need(c, 3));
  TRY(kiln_op_need(c, 4));
  const kiln_tensor *seq = c->in[3], *ts = c->in[4];
  TRY(want_idx(seq, "SEQ_LENGTHS"));
  TRY(want_idx(ts, "TIMESTEP"));
  if (seq->numel != sp->rows)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "SEQ_LENGTHS has %lld elements; one per row (%lld) expected",
                     (long long)seq->numel, (long long)sp->rows);
  if (ts->numel < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "TIMESTEP is empty; one integer expected");
  sp->seq = seq;
  sp->t = kiln_get_i(ts, 0);
  return KILN_OK;
}

void kiln_rowwise_quantize_row(const float *x, int64_t d, uint8_t *out) {
  float lo = d ? x[0] : 0.0f, hi = lo;
  for (int64_t k = 1; k < d; k++) {
    if (x[k] < lo) lo = x[k];
    if (x[k] > hi) hi = x[k];
  }
  float range = hi - lo, scale = range / 255.0f, inv = 255.0f / (range + 1e-8f);
  for (int64_t k = 0; k < d; k++) {
    float q = rintf((x[k] - lo) * inv);
    out[k] = !(q > 0.0f) ? 0 : q > 255.0f ? 255 : (uint8_t)q;
  }
  memcpy(out + d, &scale, 4);
  memcpy(out + d + 4, &lo, 4);
}

/* ------------------------------------------------------------------------ */
/* SparseLengthsSum, SparseLengthsWeightedSum, SparseLengthsMean             */

/* Float read of 4 bytes of a uint8 tensor starting at element i. */
static float get_f32_bytes(const kiln_tensor *t, int64_t i) {
  uint8_t b[4];
  for (int k = 0; k < 4; k++) b[k] = (uint8_t)kiln_get_i(t, i + k);
  float f;
  memcpy(&f, b, 4);
  return f;
}

static kiln_status run_sls(const kiln_op_call *c) {
  kiln_sls_spec sp;
  TRY(kiln_sls_decode(c, &sp));
  kiln_status s = KILN_OK;
  double *acc = kiln_calloc((size_t)sp.dim + 1, sizeof *acc);
  if (!acc) s = kiln_fail(KILN_E_NOMEM, "out of memory");
  if (!s) s = kiln_tensor_alloc(&c->out[0], KILN_F32, sp.out_rank, sp.out_dims);
  for (int64_t m = 0; m < sp.m && !s; m++) {
    for (int64_t e = 0; e < sp.dim; e++) acc[e] = 0;
    for (int64_t j = sp.start[m]; j < sp.start[m + 1] && !s; j++) {
      int64_t r = kiln_get_i(sp.indices, j);
      if (r < 0 || r >= sp.rows) {
        s = kiln_sls_bad_index(&sp, j, r);
        break;
      }
      double w = 1.0;
      if (sp.weights) w = kiln_get_f(sp.weights, sp.positional ? j - sp.start[m] : j);
      int64_t base = r * sp.row_elems;
      if (sp.table == KILN_SLS_U8ROW) {
        double scale = get_f32_bytes(sp.data, base + sp.dim), bias = get_f32_bytes(sp.data, base + sp.dim + 4);
        for (int64_t e = 0; e < sp.dim; e++) acc[e] += w * ((double)kiln_get_i(sp.data, base + e) * scale + bias);
      } else {
        for (int64_t e = 0; e < sp.dim; e++) acc[e] += w * kiln_get_f(sp.data, base + e);
      }
    }
    int64_t len = sp.start[m + 1] - sp.start[m];
    float *y = (float *)c->out[0].data + m * sp.dim;
    for (int64_t e = 0; e < sp.dim; e++) y[e] = (float)(sp.mean && len ? acc[e] / (double)len : acc[e]);
  }
  kiln_free(acc);
  kiln_sls_spec_free(&sp);
  return s;
}

static kiln_status chk_flag(const kiln_node *n, const char *name) {
  int64_t v = kiln_attr_int(n, name, 0);
  if (v == 0 || v == 1) return KILN_OK;
  return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute %s is %lld; 0 or 1 expected", name, (long long)v);
}

static kiln_status chk_sls(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  TRY(chk_flag(n, "offsets"));
  TRY(chk_flag(n, "negative_indices"));
  return chk_flag(n, "positional");
}

/* ------------------------------------------------------------------------ */
/* FloatToFused8BitRowwiseQuantized, Fused8BitRowwiseQuantizedToFloat        */

static kiln_status run_quant(const kiln_op_call *c) {
  TRY(kiln_op_need(c, 0));
  const kiln_tensor *x = c->in[0];
  if (x->dtype != KILN_F32 && x->dtype != KILN_F16)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "input has type %s; float or float16 expected", kiln_dtype_name(x->dtype));
  if (x->rank < 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input is a scalar; rows [..., D] expected");
  int64_t dims[KILN_MAX_RANK], d = x->dims[x->rank - 1];
  memcpy(dims, x->dims, sizeof dims);
  dims[x->rank - 1] = d + KILN_ROWWISE_TAIL;
  TRY(kiln_tensor_alloc(&c->out[0], KILN_U8, x->rank, dims));
  int64_t rows = 1;
  for (int k = 0; k < x->rank - 1; k++) rows *= x->dims[k];
  float *row = kiln_malloc(((size_t)d + 1) * sizeof *row);
  if (!row) return kiln_fail(KILN_E_NOMEM, "out of memory");
  uint8_t *y = c->out[0].data;
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t k = 0; k < d; k++) row[k] = (float)kiln_get_f(x, r * d + k);
    kiln_rowwise_quantize_row(row, d, y + r * (d + KILN_ROWWISE_TAIL));
  }
  kiln_free(row);
  return KILN_OK;
}

static kiln_status run_dequant(const kiln_op_call *c) {
  TRY(kiln_op_need(c, 0));
  const kiln_tensor *x = c->in[0];
  if (x->dtype != KILN_U8)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "input has type %s; uint8 (8-bit rowwise) expected", kiln_dtype_name(x->dtype));
  if (x->rank < 1 || x->dims[x->rank - 1] < KILN_ROWWISE_TAIL)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "input rows must be [..., D + 8] (uint8 values, float scale, float bias)");
  int64_t dims[KILN_MAX_RANK], w = x->dims[x->rank - 1], d = w - KILN_ROWWISE_TAIL, rows = 1;
  memcpy(dims, x->dims, sizeof dims);
  dims[x->rank - 1] = d;
  for (int k = 0; k < x->rank - 1; k++) rows *= x->dims[k];
  TRY(kiln_tensor_alloc(&c->out[0], KILN_F32, x->rank, dims));
  float *y = c->out[0].data;
  for (int64_t r = 0; r < rows; r++) {
    float scale = get_f32_bytes(x, r * w + d), bias = get_f32_bytes(x, r * w + d + 4);
    for (int64_t k = 0; k < d; k++) {
      float q = (float)kiln_get_i(x, r * w + k), p = q * scale; /* Caffe2: q·scale + bias, in float */
      y[r * d + k] = p + bias;
    }
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* LSTMUnit                                                                  */

static double sigm(double x) { return 1.0 / (1.0 + exp(-x)); }

static kiln_status run_lstmu(const kiln_op_call *c) {
  kiln_lstmu_spec sp;
  TRY(kiln_lstmu_decode(c, &sp));
  const kiln_tensor *cp = sp.c_prev;
  TRY(kiln_tensor_alloc(&c->out[0], KILN_F32, cp->rank, cp->dims));
  TRY(kiln_tensor_alloc(&c->out[1], KILN_F32, cp->rank, cp->dims));
  float *h = c->out[0].data, *cc = c->out[1].data;
  for (int64_t n = 0; n < sp.rows; n++) {
    bool valid = !sp.seq || sp.t < kiln_get_i(sp.seq, n);
    for (int64_t d = 0; d < sp.d; d++) {
      int64_t o = n * sp.d + d, gx = n * 4 * sp.d + d;
      if (!valid) {
        h[o] = sp.drop_states ? 0.0f : (float)kiln_get_f(sp.h_prev, o);
        cc[o] = sp.drop_states ? 0.0f : (float)kiln_get_f(sp.c_prev, o);
        continue;
      }
      double i = sigm(kiln_get_f(sp.gates, gx)), f = sigm(kiln_get_f(sp.gates, gx + sp.d) + sp.forget_bias),
             og = sigm(kiln_get_f(sp.gates, gx + 2 * sp.d)), g = tanh(kiln_get_f(sp.gates, gx + 3 * sp.d));
      double cv = f * kiln_get_f(sp.c_prev, o) + i * g;
      cc[o] = (float)cv;
      h[o] = (float)(og * tanh(cv));
    }
  }
  return KILN_OK;
}

static kiln_status chk_lstmu(const kiln_graph *g, const kiln_node *n) {
  (void)g;
  TRY(chk_flag(n, "drop_states"));
  int64_t v = kiln_attr_int(n, "sequence_lengths", 1);
  if (v != 0 && v != 1)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute sequence_lengths is %lld; 0 or 1 expected", (long long)v);
  if (v && (n->n_in < 5 || n->in[3] < 0 || n->in[4] < 0))
    return kiln_fail(KILN_E_MODEL, "with sequence_lengths = 1 (the default) the inputs SEQ_LENGTHS and TIMESTEP are required");
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */

#define T_TABLE (KILN_T(KILN_F32) | KILN_T(KILN_F16) | KILN_T(KILN_U8))

const kiln_op_def kiln_ref_ops_kiln[] = {
    {"SparseLengthsSum", 3, 3, 1, 1, "offsets negative_indices", T_TABLE, run_sls, chk_sls},
    {"SparseLengthsWeightedSum", 4, 4, 1, 1, "offsets positional negative_indices", T_TABLE, run_sls, chk_sls},
    {"SparseLengthsMean", 3, 3, 1, 1, "offsets negative_indices", T_TABLE, run_sls, chk_sls},
    {"SparseLengthsSumFused8BitRowwise", 3, 3, 1, 1, "offsets negative_indices", KILN_T(KILN_U8), run_sls, chk_sls},
    {"SparseLengthsWeightedSumFused8BitRowwise", 4, 4, 1, 1, "offsets positional negative_indices", KILN_T(KILN_U8), run_sls, chk_sls},
    {"SparseLengthsMeanFused8BitRowwise", 3, 3, 1, 1, "offsets negative_indices", KILN_T(KILN_U8), run_sls, chk_sls},
    {"FloatToFused8BitRowwiseQuantized", 1, 1, 1, 1, "", KILN_T(KILN_F32) | KILN_T(KILN_F16), run_quant, NULL},
    {"Fused8BitRowwiseQuantizedToFloat", 1, 1, 1, 1, "", KILN_T(KILN_U8), run_dequant, NULL},
    {"LSTMUnit", 3, 5, 2, 2, "forget_bias sequence_lengths drop_states", KILN_T(KILN_F32), run_lstmu, chk_lstmu},
    {0},
};
