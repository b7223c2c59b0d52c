/* ir/tensor: dense host tensors and shape helpers. */
#include "ir/tensor.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ir/alloc.h"
#include "ir/views.h"

kiln_status kiln_shape_numel(int rank, const int64_t *dims, int64_t *numel) {
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "rank %d is beyond kiln's maximum of %d", rank,
                     KILN_MAX_RANK);
  int64_t n = 1;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0) return kiln_fail(KILN_E_INVALID_SHAPE, "negative dimension %lld", (long long)dims[i]);
    if (dims[i] && n > KILN_MAX_NUMEL / dims[i]) {
      char b[160];
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "shape %s has more than %lld elements",
                       kiln_shape_str(rank, dims, b, sizeof b), (long long)KILN_MAX_NUMEL);
    }
    n *= dims[i];
  }
  *numel = n;
  return KILN_OK;
}

kiln_status kiln_tensor_alloc(kiln_tensor *t, kiln_dtype dtype, int rank, const int64_t *dims) {
  int64_t n;
  kiln_status s = kiln_shape_numel(rank, dims, &n);
  if (s) return s;
  size_t es = kiln_dtype_size(dtype);
  if (!es) return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "data type %s cannot be stored", kiln_dtype_name(dtype));
  if (t->data && !t->owns && t->capacity >= (size_t)n * es) { /* a reserved slot */
    if (!t->keep) memset(t->data, 0, (size_t)n * es);
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->numel = n;
    t->strided = false;
    t->stack = NULL;
    t->offset = 0;
    return KILN_OK;
  }
  void *p = kiln_calloc((size_t)n, es);
  if (!p)
    return kiln_fail(KILN_E_NOMEM, "cannot allocate %lld bytes for a tensor", (long long)(n * (int64_t)es));
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  t->numel = n;
  t->data = p;
  t->owns = true;
  t->capacity = 0;
  t->strided = false;
  t->stack = NULL;
  t->offset = 0;
  return KILN_OK;
}

void kiln_tensor_wrap(kiln_tensor *t, kiln_dtype dtype, int rank, const int64_t *dims, int64_t numel,
                      void *data) {
  t->dtype = dtype;
  t->rank = rank;
  for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
  t->numel = numel;
  t->data = data;
  t->owns = false;
  t->capacity = 0;
  t->strided = false;
  t->stack = NULL;
  t->offset = 0;
}

void kiln_tensor_view(kiln_tensor *t, const kiln_tensor *base, int rank, const int64_t *dims,
                      const int64_t *strides, int64_t offset) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  kiln_tensor_wrap(t, base->dtype, rank, dims, n, base->data);
  t->strided = true;
  t->offset = offset;
  for (int i = 0; i < rank; i++) t->strides[i] = strides[i];
}

int64_t kiln_tensor_index(const kiln_tensor *t, int64_t i) {
  if (!t->strided) return i;
  if (t->stack) return kiln_views_offset(t->stack, i, NULL);
  int64_t at = t->offset;
  for (int d = t->rank - 1; d >= 0; d--) {
    int64_t n = t->dims[d];
    at += (i % n) * t->strides[d];
    i /= n;
  }
  return at;
}

void kiln_tensor_release(kiln_tensor *t) {
  if (t->owns) kiln_free(t->data);
  memset(t, 0, sizeof *t);
}

size_t kiln_tensor_bytes(const kiln_tensor *t) { return (size_t)t->numel * kiln_dtype_size(t->dtype); }

/* kiln_gather_map: size-1 dims dropped, mergeable neighbours merged, then
 * an odometer over the outer dims and a tight loop (memcpy when
 * unit-strided) inside. */
void kiln_gather_map(void *dst_, const void *src_, size_t es, int rank, const int64_t *dims, const int64_t *strides,
                     int64_t offset) {
  char *dst = dst_;
  const char *src = src_;
  int64_t n[KILN_MAX_RANK], st[KILN_MAX_RANK];
  int r = 0;
  for (int d = 0; d < rank; d++) {
    if (dims[d] == 1) continue;
    if (dims[d] == 0) return;
    if (r > 0 && st[r - 1] == strides[d] * dims[d]) { /* merges into the previous dim */
      n[r - 1] *= dims[d];
      st[r - 1] = strides[d];
      continue;
    }
    n[r] = dims[d];
    st[r++] = strides[d];
  }
  src += offset * (int64_t)es;
  if (r == 0) {
    memcpy(dst, src, es);
    return;
  }
  int64_t inner = n[r - 1], is = st[r - 1], idx[KILN_MAX_RANK] = {0}, at = 0;
  for (;;) {
    const char *s0 = src + at * (int64_t)es;
    if (is == 1) {
      memcpy(dst, s0, (size_t)inner * es);
    } else if (es == 4) {
      uint32_t *o = (uint32_t *)(void *)dst;
      for (int64_t i = 0; i < inner; i++) memcpy(&o[i], s0 + i * is * 4, 4);
    } else if (es == 8) {
      uint64_t *o = (uint64_t *)(void *)dst;
      for (int64_t i = 0; i < inner; i++) memcpy(&o[i], s0 + i * is * 8, 8);
    } else {
      for (int64_t i = 0; i < inner; i++) memcpy(dst + i * (int64_t)es, s0 + i * is * (int64_t)es, es);
    }
    dst += inner * (int64_t)es;
    int d = r - 2;
    for (; d >= 0; d--) {
      at += st[d];
      if (++idx[d] < n[d]) break;
      at -= st[d] * n[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

/* Fast kiln_tensor_copy of a strided src into dense dst->data: one map
 * directly; a stack of unmasked views level by level (each level's dense
 * result is the flat index space of the next; contiguous levels are the
 * identity and cost nothing). False (nothing written) for masked stacks,
 * which take the per-element path. */
static bool copy_strided_fast(kiln_tensor *dst, const kiln_tensor *src) {
  size_t es = kiln_dtype_size(src->dtype);
  if (!src->stack) {
    kiln_gather_map(dst->data, src->data, es, src->rank, src->dims, src->strides, src->offset);
    return true;
  }
  const kiln_views *stk = src->stack;
  int top = stk->depth - 1;
  for (int k = 0; k <= top; k++)
    if (stk->v[k].has_mask) return false;
  /* identity maps on top (a contiguous view of fewer elements than the one
     below reads a prefix of it: gathered as its own level) */
  while (top > 0 && stk->v[top].contiguous && stk->v[top].numel == stk->v[top - 1].numel) top--;
  const char *from = src->data;
  char *buf[KILN_VIEWS_MAX_DEPTH] = {0};
  bool ok = true;
  for (int k = 0; k <= top && ok; k++) {
    const kiln_view *v = &stk->v[k];
    if (k > 0 && k < top && v->contiguous) continue; /* reads the level below as is */
    char *to = (char *)dst->data;
    if (k < top && !(to = buf[k] = kiln_malloc((size_t)(v->numel ? v->numel : 1) * es))) {
      ok = false;
      break;
    }
    kiln_gather_map(to, from, es, v->rank, v->shape, v->strides, v->offset);
    from = to;
  }
  for (int k = 0; k < KILN_VIEWS_MAX_DEPTH; k++) kiln_free(buf[k]);
  return ok;
}

void kiln_tensor_read(void *dst, const kiln_tensor *src, int64_t at, int64_t n) {
  size_t es = kiln_dtype_size(src->dtype);
  if (n <= 0) return;
  if (!src->strided) {
    memcpy(dst, (const char *)src->data + (size_t)at * es, (size_t)n * es);
    return;
  }
  if (at == 0 && n == src->numel) {
    kiln_tensor dd = {.dtype = src->dtype, .data = dst};
    if (copy_strided_fast(&dd, src)) return;
  }
  char *o = dst;
  if (src->stack) { /* a masked stack, or part of one: element by element */
    for (int64_t k = 0; k < n; k++)
      memcpy(o + (size_t)k * es, (const char *)src->data + (size_t)kiln_tensor_index(src, at + k) * es, es);
    return;
  }
  /* one map: an odometer from at's multi-index */
  int r = src->rank;
  int64_t idx[KILN_MAX_RANK];
  kiln_unravel(at, r, src->dims, idx);
  int64_t pos = src->offset;
  for (int d = 0; d < r; d++) pos += idx[d] * src->strides[d];
  for (int64_t k = 0; k < n; k++) {
    memcpy(o + (size_t)k * es, (const char *)src->data + (size_t)pos * es, es);
    for (int d = r - 1; d >= 0; d--) {
      pos += src->strides[d];
      if (++idx[d] < src->dims[d]) break;
      pos -= src->strides[d] * src->dims[d];
      idx[d] = 0;
    }
  }
}

kiln_status kiln_tensor_copy(kiln_tensor *dst, const kiln_tensor *src) {
  kiln_status s = kiln_tensor_alloc(dst, src->dtype, src->rank, src->dims);
  if (s) return s;
  if (!src->strided) {
    /* dst may be src's own storage (an in-place step): nothing to move */
    if (src->numel && dst->data != src->data) memcpy(dst->data, src->data, kiln_tensor_bytes(src));
  } else {
    kiln_tensor_read(dst->data, src, 0, src->numel);
  }
  return KILN_OK;
}

static int64_t get_i_at(const kiln_tensor *t, int64_t i);

/* Element at storage index i (no view mapping). */
static double get_f_at(const kiln_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
  case KILN_F32: return ((const float *)p)[i];
  case KILN_F64: return ((const double *)p)[i];
  case KILN_F16: return kiln_f16_to_f32(((const uint16_t *)p)[i]);
  case KILN_BF16: return kiln_bf16_to_f32(((const uint16_t *)p)[i]);
  case KILN_U64: return (double)((const uint64_t *)p)[i];
  default: return (double)get_i_at(t, i);
  }
}

static int64_t get_i_at(const kiln_tensor *t, int64_t i) {
  const void *p = t->data;
  switch (t->dtype) {
  case KILN_U8: return ((const uint8_t *)p)[i];
  case KILN_BOOL: return ((const uint8_t *)p)[i] != 0;
  case KILN_I8: return ((const int8_t *)p)[i];
  case KILN_U16: return ((const uint16_t *)p)[i];
  case KILN_I16: return ((const int16_t *)p)[i];
  case KILN_I32: return ((const int32_t *)p)[i];
  case KILN_U32: return ((const uint32_t *)p)[i];
  case KILN_I64: return ((const int64_t *)p)[i];
  case KILN_U64: return (int64_t)((const uint64_t *)p)[i];
  default: {
    double d = get_f_at(t, i);
    if (isnan(d)) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
  }
  }
}

double kiln_get_f(const kiln_tensor *t, int64_t i) {
  return get_f_at(t, t->strided ? kiln_tensor_index(t, i) : i);
}

int64_t kiln_get_i(const kiln_tensor *t, int64_t i) {
  return get_i_at(t, t->strided ? kiln_tensor_index(t, i) : i);
}

/* Saturating double -> integer conversion, truncating toward zero. */
static double clampd(double v, double lo, double hi) {
  if (isnan(v)) return 0;
  v = trunc(v);
  return v < lo ? lo : v > hi ? hi : v;
}

void kiln_set_f(kiln_tensor *t, int64_t i, double v) {
  void *p = t->data;
  switch (t->dtype) {
  case KILN_F32: ((float *)p)[i] = (float)v; break;
  case KILN_F64: ((double *)p)[i] = v; break;
  case KILN_F16: ((uint16_t *)p)[i] = kiln_f32_to_f16(kiln_f64_to_f32_odd(v)); break; /* rounded once */
  case KILN_BF16: ((uint16_t *)p)[i] = kiln_f32_to_bf16(kiln_f64_to_f32_odd(v)); break;
  case KILN_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)clampd(v, 0, 255); break;
  case KILN_I8: ((int8_t *)p)[i] = (int8_t)clampd(v, -128, 127); break;
  case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)clampd(v, 0, 65535); break;
  case KILN_I16: ((int16_t *)p)[i] = (int16_t)clampd(v, -32768, 32767); break;
  case KILN_I32: ((int32_t *)p)[i] = (int32_t)clampd(v, -2147483648.0, 2147483647.0); break;
  case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)clampd(v, 0, 4294967295.0); break;
  case KILN_I64: ((int64_t *)p)[i] = (int64_t)clampd(v, -9.2233720368547758e18, 9.2233720368547748e18); break;
  case KILN_U64: ((uint64_t *)p)[i] = (uint64_t)clampd(v, 0, 1.8446744073709550e19); break;
  default: break;
  }
}

void kiln_set_i(kiln_tensor *t, int64_t i, int64_t v) {
  void *p = t->data;
  switch (t->dtype) {
  case KILN_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
  case KILN_BOOL: ((uint8_t *)p)[i] = v != 0; break;
  case KILN_I8: ((int8_t *)p)[i] = (int8_t)v; break;
  case KILN_U16: ((uint16_t *)p)[i] = (uint16_t)v; break;
  case KILN_I16: ((int16_t *)p)[i] = (int16_t)v; break;
  case KILN_I32: ((int32_t *)p)[i] = (int32_t)v; break;
  case KILN_U32: ((uint32_t *)p)[i] = (uint32_t)v; break;
  case KILN_I64: ((int64_t *)p)[i] = v; break;
  case KILN_U64: ((uint64_t *)p)[i] = (uint64_t)v; break;
  default: kiln_set_f(t, i, (double)v); break;
  }
}

void kiln_copy_elem(kiln_tensor *dst, int64_t di, const kiln_tensor *src, int64_t si) {
  size_t es = kiln_dtype_size(src->dtype);
  if (src->strided) si = kiln_tensor_index(src, si);
  memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, es);
}

kiln_status kiln_tensor_ints(const kiln_tensor *t, int64_t *out, int max, int *n) {
  if (t->dtype != KILN_I64 && t->dtype != KILN_I32)
    return kiln_fail(KILN_E_MISMATCH_DTYPE, "expected an int64 or int32 tensor, got %s",
                     kiln_dtype_name(t->dtype));
  if (t->rank > 1) return kiln_fail(KILN_E_MISMATCH_SHAPE, "expected a 1-D tensor, got rank %d", t->rank);
  if (t->numel > max)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "%lld values given, at most %d supported",
                     (long long)t->numel, max);
  for (int64_t i = 0; i < t->numel; i++) out[i] = kiln_get_i(t, i);
  *n = (int)t->numel;
  return KILN_OK;
}

void kiln_strides(int rank, const int64_t *dims, int64_t *strides) {
  int64_t s = 1;
  for (int i = rank - 1; i >= 0; i--) {
    strides[i] = s;
    s *= dims[i];
  }
}

kiln_status kiln_broadcast_shape(int ra, const int64_t *a, int rb, const int64_t *b, int *rout,
                                 int64_t *out) {
  int r = ra > rb ? ra : rb;
  int64_t tmp[KILN_MAX_RANK];
  for (int i = 0; i < r; i++) {
    int64_t da = i < r - ra ? 1 : a[i - (r - ra)];
    int64_t db = i < r - rb ? 1 : b[i - (r - rb)];
    if (da == db || db == 1) tmp[i] = da;
    else if (da == 1) tmp[i] = db;
    else {
      char sa[160], sb[160];
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)",
                       kiln_shape_str(ra, a, sa, sizeof sa), kiln_shape_str(rb, b, sb, sizeof sb), i,
                       (long long)da, (long long)db);
    }
  }
  for (int i = 0; i < r; i++) out[i] = tmp[i];
  *rout = r;
  return KILN_OK;
}

void kiln_broadcast_strides(const kiln_tensor *t, int rank, const int64_t *dims, int64_t *strides) {
  int64_t own[KILN_MAX_RANK];
  kiln_strides(t->rank, t->dims, own);
  int off = rank - t->rank;
  for (int i = 0; i < rank; i++) {
    if (i < off) strides[i] = 0;
    else strides[i] = (t->dims[i - off] == 1 && dims[i] != 1) ? 0 : own[i - off];
  }
}

void kiln_unravel(int64_t flat, int rank, const int64_t *dims, int64_t *idx) {
  for (int i = rank - 1; i >= 0; i--) {
    if (dims[i] > 0) {
      idx[i] = flat % dims[i];
      flat /= dims[i];
    } else {
      idx[i] = 0;
    }
  }
}

kiln_status kiln_norm_axis(int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank || (rank == 0 && axis != 0))
    return kiln_fail(KILN_E_MODEL, "axis %lld is out of range for rank %d", (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return KILN_OK;
}

const char *kiln_shape_str(int rank, const int64_t *dims, char *buf, int size) {
  int k = snprintf(buf, (size_t)size, "[");
  for (int i = 0; i < rank && k < size; i++)
    k += snprintf(buf + k, (size_t)(size - k), "%s%lld", i ? "," : "", (long long)dims[i]);
  if (k < size) snprintf(buf + k, (size_t)(size - k), "]");
  return buf;
}
