/* cpu_fallback/sls_avx2: the AVX2/FMA (+F16C) versions of cpu_fallback/sls.h,
 * the only file built with -mavx2 -mfma -mf16c (sls.c calls it only after
 * kiln_sls_isa_ok). The segment reduction keeps up to 64 output floats of a
 * segment in eight ymm accumulators while it walks the segment's indices,
 * prefetching the row KILN_SLS_PREFETCH indices ahead (Caffe2's EmbeddingLookup
 * _avx2_fma kernels do the same); a dim that is not a multiple of 8 ends
 * with a masked lane group. 8-bit rows are read 8 bytes at a time: a row's
 * last group may read into its own scale and bias bytes, never past the
 * row, and those lanes are masked off on the store. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "cpu_fallback/sls.h"

#define MAXV 8 /* accumulators: 64 floats */

static inline int64_t index_at(const kiln_sls_job *j, int64_t k) {
  return j->idx64 ? ((const int64_t *)j->indices)[k] : ((const int32_t *)j->indices)[k];
}

/* Lane mask with the first n (0..8) lanes set. */
static inline __m256i lane_mask(int64_t n) {
  static const int32_t m[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256((const __m256i *)(m + 8 - n));
}

/* 8 values of a row at element e (tail: the last group, n < 8 valid). */
static inline __m256 load_f32(const float *x, int64_t n, __m256i mask) {
  return n >= 8 ? _mm256_loadu_ps(x) : _mm256_maskload_ps(x, mask);
}

static inline __m256 load_f16(const uint16_t *x, int64_t n) {
  if (n >= 8) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)x));
  uint16_t t[8] = {0};
  memcpy(t, x, (size_t)n * sizeof *t);
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
}

static inline __m256 load_u8(const uint8_t *x) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)x)));
}

/* One chunk [e0, e0 + 8·nv) of the output of segment [b, end); nv, kind
 * and weighted are constants at each call site (the loops over v unroll, the
 * accumulators stay in registers, the table switch leaves the loop). An
 * 8-bit row adds w·bias and then w·scale·q to each lane, as Caffe2 does (a
 * bias summed apart would cancel against the scaled sum: less accurate).
 * Returns the position of a bad index, or -1. */
static inline __attribute__((always_inline)) int64_t chunk(const kiln_sls_job *j, int64_t b, int64_t end, int64_t e0,
                                                           int nv, kiln_sls_table kind, bool weighted, float *y) {
  __m256 acc[MAXV];
  const int64_t dim = j->dim, rows = j->rows, left = dim - e0; /* valid lanes from e0 */
  const uint8_t *data = j->data;
  const size_t rb = j->row_bytes, el = kind == KILN_SLS_F32 ? 4 : kind == KILN_SLS_F16 ? 2 : 1;
  /* the last byte of a row this chunk reads (8-bit rows: with scale and bias) */
  const size_t last0 = (size_t)(e0 + (left < 8 * nv ? left : 8 * nv)) * el - 1 + (kind == KILN_SLS_U8ROW ? 8 : 0);
  const size_t last = last0 < rb ? last0 : rb - 1;
  const float *wts = j->weights;
  __m256i tail = lane_mask(left - 8 * (nv - 1) >= 8 ? 8 : left - 8 * (nv - 1));
  for (int v = 0; v < nv; v++) acc[v] = _mm256_setzero_ps();
  for (int64_t k = b; k < end; k++) {
    int64_t r = index_at(j, k);
    if (r < 0 || r >= rows) return k;
    if (k + KILN_SLS_PREFETCH < end) {
      int64_t pr = index_at(j, k + KILN_SLS_PREFETCH);
      if (pr >= 0 && pr < rows) {
        const char *p = (const char *)(data + (size_t)pr * rb);
        _mm_prefetch(p + (size_t)e0 * el, _MM_HINT_T0);
        _mm_prefetch(p + last, _MM_HINT_T0);
      }
    }
    float w = weighted ? wts[j->positional ? k - b : k] : 1.0f;
    const uint8_t *row = data + (size_t)r * rb;
    if (kind == KILN_SLS_F32) {
      __m256 vw = _mm256_set1_ps(w);
      const float *x = (const float *)row + e0;
      for (int v = 0; v < nv; v++) acc[v] = _mm256_fmadd_ps(vw, load_f32(x + 8 * v, left - 8 * v, tail), acc[v]);
    } else if (kind == KILN_SLS_F16) {
      __m256 vw = _mm256_set1_ps(w);
      const uint16_t *x = (const uint16_t *)row + e0;
      for (int v = 0; v < nv; v++) acc[v] = _mm256_fmadd_ps(vw, load_f16(x + 8 * v, left - 8 * v), acc[v]);
    } else {
      float sb[2];
      memcpy(sb, row + dim, sizeof sb);
      __m256 ws = _mm256_set1_ps(w * sb[0]), wb = _mm256_set1_ps(w * sb[1]);
      const uint8_t *x = row + e0;
      for (int v = 0; v < nv; v++) acc[v] = _mm256_fmadd_ps(ws, load_u8(x + 8 * v), _mm256_add_ps(acc[v], wb));
    }
  }
  if (j->mean && end > b) {
    __m256 inv = _mm256_set1_ps(1.0f / (float)(end - b));
    for (int v = 0; v < nv; v++) acc[v] = _mm256_mul_ps(acc[v], inv);
  }
  for (int v = 0; v < nv - 1; v++) _mm256_storeu_ps(y + e0 + 8 * v, acc[v]);
  _mm256_maskstore_ps(y + e0 + 8 * (nv - 1), tail, acc[nv - 1]);
  return -1;
}

static inline __attribute__((always_inline)) int64_t chunk_w(const kiln_sls_job *j, int64_t b, int64_t end,
                                                             int64_t e0, int nv, kiln_sls_table kind, float *y) {
  return j->weights ? chunk(j, b, end, e0, nv, kind, true, y) : chunk(j, b, end, e0, nv, kind, false, y);
}

static inline __attribute__((always_inline)) int64_t chunk_of(const kiln_sls_job *j, int64_t b, int64_t end,
                                                              int64_t e0, int64_t nv, kiln_sls_table kind, float *y) {
  switch (nv) {
  case 1: return chunk_w(j, b, end, e0, 1, kind, y);
  case 2: return chunk_w(j, b, end, e0, 2, kind, y);
  case 3: return chunk_w(j, b, end, e0, 3, kind, y);
  case 4: return chunk_w(j, b, end, e0, 4, kind, y);
  case 5: return chunk_w(j, b, end, e0, 5, kind, y);
  case 6: return chunk_w(j, b, end, e0, 6, kind, y);
  case 7: return chunk_w(j, b, end, e0, 7, kind, y);
  default: return chunk_w(j, b, end, e0, 8, kind, y);
  }
}

void kiln_sls_avx2_fma(kiln_sls_job *j) {
  j->bad = -1;
  if (j->dim == 0) { /* no lanes: the indices are still checked */
    for (int64_t k = j->start[0]; k < j->start[j->m]; k++) { /* this job's indices (a task's bags: sls.c) */
      int64_t r = index_at(j, k);
      if (r < 0 || r >= j->rows) {
        j->bad = k;
        return;
      }
    }
    return;
  }
  for (int64_t m = 0; m < j->m; m++) {
    int64_t b = j->start[m], end = j->start[m + 1];
    float *y = j->out + m * j->dim;
    for (int64_t e0 = 0; e0 < j->dim; e0 += 8 * MAXV) {
      int64_t left = j->dim - e0, nv = left >= 8 * MAXV ? MAXV : (left + 7) / 8, bad;
      switch (j->table) {
      case KILN_SLS_F32: bad = chunk_of(j, b, end, e0, nv, KILN_SLS_F32, y); break;
      case KILN_SLS_F16: bad = chunk_of(j, b, end, e0, nv, KILN_SLS_F16, y); break;
      default: bad = chunk_of(j, b, end, e0, nv, KILN_SLS_U8ROW, y); break;
      }
      if (bad >= 0) {
        j->bad = bad;
        return;
      }
    }
  }
}

/* ---- rowwise quantization ---- */

static inline float hmin(__m256 v) {
  __m128 a = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_min_ps(a, _mm_movehl_ps(a, a));
  a = _mm_min_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

static inline float hmax(__m256 v) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_shuffle_ps(a, a, 1));
  return _mm_cvtss_f32(a);
}

void kiln_rowwise_quant_avx2_fma(const float *x, int64_t rows, int64_t d, uint8_t *y) {
  for (int64_t r = 0; r < rows; r++) {
    const float *xr = x + r * d;
    uint8_t *yr = y + r * (d + KILN_ROWWISE_TAIL);
    if (d < 8) { /* too short for a vector: the twin */
      kiln_rowwise_quantize_row(xr, d, yr);
      continue;
    }
    __m256 vlo = _mm256_loadu_ps(xr), vhi = vlo;
    int64_t e = 8;
    for (; e + 8 <= d; e += 8) {
      __m256 v = _mm256_loadu_ps(xr + e);
      vlo = _mm256_min_ps(vlo, v);
      vhi = _mm256_max_ps(vhi, v);
    }
    float lo = hmin(vlo), hi = hmax(vhi);
    for (; e < d; e++) {
      if (xr[e] < lo) lo = xr[e];
      if (xr[e] > hi) hi = xr[e];
    }
    float range = hi - lo, scale = range / 255.0f, inv = 255.0f / (range + 1e-8f);
    __m256 vl = _mm256_set1_ps(lo), vi = _mm256_set1_ps(inv);
    for (e = 0; e + 8 <= d; e += 8) {
      __m256 q = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(xr + e), vl), vi);
      __m256i qi = _mm256_cvtps_epi32(q); /* rounds to nearest even, as rintf */
      __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(qi), _mm256_extracti128_si256(qi, 1));
      _mm_storel_epi64((__m128i *)(yr + e), _mm_packus_epi16(p16, p16));
    }
    for (; e < d; e++) {
      float q = rintf((xr[e] - lo) * inv);
      yr[e] = !(q > 0.0f) ? 0 : q > 255.0f ? 255 : (uint8_t)q;
    }
    memcpy(yr + d, &scale, 4);
    memcpy(yr + d + 4, &lo, 4);
  }
}

void kiln_rowwise_dequant_avx2_fma(const uint8_t *x, int64_t rows, int64_t d, float *y) {
  for (int64_t r = 0; r < rows; r++) {
    const uint8_t *row = x + r * (d + KILN_ROWWISE_TAIL);
    float sb[2];
    memcpy(sb, row + d, sizeof sb);
    __m256 vs = _mm256_set1_ps(sb[0]), vb = _mm256_set1_ps(sb[1]);
    float *yr = y + r * d;
    int64_t e = 0;
    for (; e + 8 <= d; e += 8) _mm256_storeu_ps(yr + e, _mm256_add_ps(_mm256_mul_ps(load_u8(row + e), vs), vb));
    for (; e < d; e++) {
      float p = (float)row[e] * sb[0];
      yr[e] = p + sb[1];
    }
  }
}
