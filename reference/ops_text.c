/* reference/ops_text: the scalar kernel (see reference/ops.h) of
 * TfIdfVectorizer (opset 9) over integer tokens.
 *
 * The pool (pool_int64s) holds the n-grams of each length n = 1, 2, ... one
 * after the other; ngram_counts[n-1] is where those of length n start. The
 * k-th n-gram of the pool, counted over all lengths, goes to output
 * coordinate ngram_indexes[k]; the output has max(ngram_indexes) + 1
 * coordinates per row. For each row of X ([C], [N, C], or a scalar), every
 * start position and every skip s = 0 .. max_skip_count, the n-gram
 * X[start], X[start + (s+1)], ..., of each length n in
 * [min_gram_length, max_gram_length] that fits in the row is looked up in
 * the pool's n-grams of length n and, when found, counted at its
 * coordinate; 1-grams are counted once (at s = 0), as a skip changes
 * nothing for them. An n-gram listed twice in the pool counts at its last
 * listing. Each n-gram i found adds to its coordinate ngram_indexes[i]:
 * TF its count; IDF its weight (once, whatever the count); TFIDF its count
 * times its weight; the weight of the i-th n-gram of the pool is
 * weights[i], as ONNX's text says ("the i-th element in weights is the
 * weight of the i-th n-gram in pool") and onnxruntime 1.32 does (1 without
 * the weights attribute). The ONNX reference evaluator (onnx 1.23) reads
 * weights[coordinate] instead; the two agree where ngram_indexes is the
 * identity, as in every ONNX node test (kiln followed the evaluator before
 * 2026-11-27). Two n-grams mapped to one coordinate add up there.
 *
 * 1-grams are not recounted per skip. Checked, with an error naming the
 * attribute: mode, lengths (1 <= min <= max), max_skip_count >= 0,
 * ngram_counts non-decreasing within the pool with each length's share a
 * whole number of n-grams, one ngram_indexes entry per n-gram, each >= 0,
 * and weights, when given, one per n-gram. pool_strings cannot be
 * used: string tensors cannot cross the ONNXIFI ABI (kiln has no string
 * type), so such a node is UNSUPPORTED_DTYPE with that reason. */
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

#define T_TOK (KILN_T(KILN_I32) | KILN_T(KILN_I64))

static const char *const modes[] = {"TF", "IDF", "TFIDF", NULL};

/* The attributes as read and checked. */
typedef struct tfidf {
  int mode; /* index into modes */
  int64_t min_n, max_n, max_skip;
  const int64_t *pool, *counts, *index;
  size_t n_pool, n_counts, n_index;
  const float *weights;
  size_t n_weights;
  int64_t n_grams;  /* n-grams in the pool, all lengths */
  int64_t out_size; /* max(ngram_indexes) + 1 */
} tfidf;

/* Attribute name has type t; required: it must be given. */
static kiln_status attr_is(const kiln_node *n, const char *name, kiln_attr_type t, bool required) {
  if (required && !kiln_node_attr(n, name)) return kiln_fail(KILN_E_MODEL, "required attribute '%s' is missing", name);
  return kiln_opc_attr(n, name, t, 0, 0);
}

/* Reads and checks the node's attributes into t. */
static kiln_status tfidf_read(const kiln_node *n, tfidf *t) {
  memset(t, 0, sizeof *t);
  kiln_status s = kiln_opc_opset(n, 9, 0, KILN_E_MODEL);
  if (s) return s;
  if (kiln_node_attr(n, "pool_strings"))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE,
                     "attribute 'pool_strings' is not supported: string tensors cannot cross the ONNXIFI ABI (kiln "
                     "has no string type); use pool_int64s with int32 or int64 token ids");
  static const char *const ints[] = {"min_gram_length", "max_gram_length", "max_skip_count", NULL};
  for (int k = 0; ints[k] && !s; k++) s = attr_is(n, ints[k], KILN_ATTR_INT, true);
  if (!s) s = attr_is(n, "mode", KILN_ATTR_STRING, true);
  if (!s) s = attr_is(n, "ngram_counts", KILN_ATTR_INTS, true);
  if (!s) s = attr_is(n, "ngram_indexes", KILN_ATTR_INTS, true);
  if (!s) s = attr_is(n, "pool_int64s", KILN_ATTR_INTS, true);
  if (!s) s = attr_is(n, "weights", KILN_ATTR_FLOATS, false);
  if (s) return s;
  const char *mode = kiln_attr_string(n, "mode", "");
  t->mode = -1;
  for (int k = 0; modes[k]; k++)
    if (!strcmp(mode, modes[k])) t->mode = k;
  if (t->mode < 0) return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'mode' is '%s'; TF, IDF or TFIDF expected", mode);
  t->min_n = kiln_attr_int(n, "min_gram_length", 0);
  t->max_n = kiln_attr_int(n, "max_gram_length", 0);
  t->max_skip = kiln_attr_int(n, "max_skip_count", 0);
  if (t->min_n < 1 || t->max_n < t->min_n)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                     "attributes 'min_gram_length' %lld and 'max_gram_length' %lld must satisfy 1 <= min <= max",
                     (long long)t->min_n, (long long)t->max_n);
  if (t->max_skip < 0)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'max_skip_count' is %lld; it must be >= 0",
                     (long long)t->max_skip);
  t->pool = kiln_attr_ints(n, "pool_int64s", &t->n_pool);
  t->counts = kiln_attr_ints(n, "ngram_counts", &t->n_counts);
  t->index = kiln_attr_ints(n, "ngram_indexes", &t->n_index);
  t->weights = kiln_attr_floats(n, "weights", &t->n_weights);
  if (!t->weights) t->n_weights = 0;
  for (size_t i = 0; i < t->n_counts; i++) {
    int64_t lo = t->counts[i], hi = i + 1 < t->n_counts ? t->counts[i + 1] : (int64_t)t->n_pool;
    if (lo < 0 || lo > hi || hi > (int64_t)t->n_pool)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                       "attribute 'ngram_counts' [%zu] = %lld: the starts must be non-decreasing within the %zu pool "
                       "items",
                       i, (long long)lo, t->n_pool);
    int64_t len = (int64_t)i + 1;
    if ((hi - lo) % len)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                       "the %lld pool items of the %lld-grams (ngram_counts [%zu]) are not a whole number of %lld-grams",
                       (long long)(hi - lo), (long long)len, i, (long long)len);
    t->n_grams += (hi - lo) / len;
  }
  if (t->n_counts && t->counts[0] != 0)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'ngram_counts' starts at %lld; the 1-grams start at 0",
                     (long long)t->counts[0]);
  if (!t->n_counts && t->n_pool)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'ngram_counts' is empty but the pool has %zu items", t->n_pool);
  if ((int64_t)t->n_index != t->n_grams)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                     "attribute 'ngram_indexes' has %zu entries; the pool holds %lld n-grams (one entry each)",
                     t->n_index, (long long)t->n_grams);
  if (!t->n_index)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'ngram_indexes' is empty: the output would have no coordinate");
  t->out_size = 0;
  for (size_t i = 0; i < t->n_index; i++) {
    if (t->index[i] < 0 || t->index[i] >= ((int64_t)1 << 40))
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "attribute 'ngram_indexes' [%zu] is %lld; it must be in [0, 2^40)", i,
                       (long long)t->index[i]);
    if (t->index[i] + 1 > t->out_size) t->out_size = t->index[i] + 1;
  }
  if (t->n_weights && (int64_t)t->n_weights != t->n_grams)
    return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                     "attribute 'weights' has %zu entries; the pool holds %lld n-grams (one weight each)",
                     t->n_weights, (long long)t->n_grams);
  return KILN_OK;
}

static kiln_status chk_tfidf(const kiln_graph *g, const kiln_node *n) {
  tfidf t;
  kiln_status s = tfidf_read(n, &t);
  if (s) return s;
  kiln_dtype dt = kiln_opc_decl_type(g, n, 0);
  if (dt != KILN_UNDEFINED && dt != KILN_I32 && dt != KILN_I64)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "input 0 (X) has data type %s; int32 or int64 expected%s",
                     kiln_dtype_name(dt), dt == KILN_STRING ? " (strings cannot cross the ONNXIFI ABI)" : "");
  int r = kiln_opc_decl_rank(g, n, 0);
  if (r > 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (X) has rank %d; [C] or [N, C] expected", r);
  return KILN_OK;
}

/* The pool's n-grams of one length, sorted by content then pool order, for
 * binary search. */
typedef struct gram_set {
  int64_t len;
  const int64_t *pool; /* the items of n-gram j start at pool + first[j] */
  int64_t count;
  int64_t *first; /* pool offset of each n-gram, sorted */
  int64_t *id;    /* its global id (index into ngram_indexes) */
} gram_set;

/* -1, 0, 1 as the pool's n-gram at offset a sorts before, with, after the
 * one at b: by content, then pool order (the last listing sorts last). */
static int gram_cmp(const gram_set *g, int64_t a, int64_t b) {
  for (int64_t k = 0; k < g->len; k++) {
    int64_t x = g->pool[a + k], y = g->pool[b + k];
    if (x != y) return x < y ? -1 : 1;
  }
  return a < b ? -1 : a > b;
}

/* Sorts g->first (g->count offsets) with gram_cmp: bottom-up merge sort
 * through tmp (no global state: graphs run on several threads). */
static void gram_sort(const gram_set *g, int64_t *tmp) {
  int64_t n = g->count, *v = g->first;
  for (int64_t width = 1; width < n; width *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      int64_t mid = lo + width < n ? lo + width : n, hi = lo + 2 * width < n ? lo + 2 * width : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) tmp[k++] = gram_cmp(g, v[j], v[i]) < 0 ? v[j++] : v[i++];
      while (i < mid) tmp[k++] = v[i++];
      while (j < hi) tmp[k++] = v[j++];
    }
    memcpy(v, tmp, (size_t)n * sizeof *v);
  }
}

/* The id of the n-gram x[0], x[step], ... in set s, or -1. Among equal
 * n-grams the last listed wins. */
static int64_t gram_find(const gram_set *s, const kiln_tensor *x, int64_t at, int64_t step) {
  int64_t lo = 0, hi = s->count; /* first entry > the key */
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2, c = 0;
    for (int64_t k = 0; k < s->len && !c; k++) {
      int64_t p = s->pool[s->first[mid] + k], v = kiln_get_i(x, at + k * step);
      c = p < v ? -1 : p > v;
    }
    if (c <= 0) lo = mid + 1;
    else hi = mid;
  }
  if (lo == 0) return -1;
  int64_t j = lo - 1;
  for (int64_t k = 0; k < s->len; k++)
    if (s->pool[s->first[j] + k] != kiln_get_i(x, at + k * step)) return -1;
  return s->id[j];
}

static kiln_status run_tfidf(const kiln_op_call *c) {
  const kiln_node *n = c->node;
  tfidf t;
  kiln_status s = chk_tfidf(c->graph, n);
  if (!s) s = tfidf_read(n, &t);
  if (s) return s;
  if (c->n_in < 1 || !c->in[0]) return kiln_fail(KILN_E_MODEL, "required input 0 (X) is missing");
  const kiln_tensor *x = c->in[0];
  if (x->dtype != KILN_I32 && x->dtype != KILN_I64)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "input 0 (X) has data type %s; int32 or int64 expected",
                     kiln_dtype_name(x->dtype));
  if (x->rank > 2) return kiln_fail(KILN_E_MISMATCH_SHAPE, "input 0 (X) has rank %d; [C] or [N, C] expected", x->rank);
  int64_t rows = x->rank == 2 ? x->dims[0] : 1, C = x->rank == 0 ? 1 : x->dims[x->rank - 1];
  int64_t yd[2] = {rows, t.out_size};
  kiln_tensor *y = &c->out[0];
  if (x->rank == 2) s = kiln_tensor_alloc(y, KILN_F32, 2, yd);
  else s = kiln_tensor_alloc(y, KILN_F32, 1, yd + 1);
  if (s) return s;
  /* one sorted set per length in [min, max] that the pool has */
  int64_t top = t.max_n < (int64_t)t.n_counts ? t.max_n : (int64_t)t.n_counts;
  int64_t nsets = top >= t.min_n ? top - t.min_n + 1 : 0;
  gram_set *sets = kiln_calloc((size_t)nsets + 1, sizeof *sets);
  int64_t *freq = kiln_calloc((size_t)(rows * t.n_grams), sizeof *freq); /* per row and pool n-gram */
  if (!sets || !freq) {
    s = kiln_fail(KILN_E_NOMEM, "out of memory for %lld x %lld counts", (long long)rows, (long long)t.n_grams);
    goto done;
  }
  int64_t id = 0;
  for (size_t i = 0; i < t.n_counts; i++) {
    int64_t len = (int64_t)i + 1, lo = t.counts[i], hi = i + 1 < t.n_counts ? t.counts[i + 1] : (int64_t)t.n_pool;
    int64_t cnt = (hi - lo) / len;
    if (len >= t.min_n && len <= t.max_n && len - t.min_n < nsets) {
      gram_set *g = &sets[len - t.min_n];
      g->len = len, g->pool = t.pool, g->count = cnt;
      g->first = kiln_malloc((size_t)cnt * sizeof(int64_t) + 1);
      g->id = kiln_malloc((size_t)cnt * sizeof(int64_t) + 1);
      if (!g->first || !g->id) {
        s = kiln_fail(KILN_E_NOMEM, "out of memory for the pool's %lld-grams", (long long)len);
        goto done;
      }
      for (int64_t j = 0; j < cnt; j++) g->first[j] = lo + j * len;
      gram_sort(g, g->id); /* id is the scratch until it is filled below */
      for (int64_t j = 0; j < cnt; j++) g->id[j] = id + (g->first[j] - lo) / len;
    }
    id += cnt;
  }
  for (int64_t r = 0; r < rows; r++)
    for (int64_t skip = 0; skip <= t.max_skip; skip++) {
      int64_t step = skip + 1, nmin = t.min_n;
      if (skip > 0 && nmin == 1) nmin = 2; /* 1-grams only at skip 0 */
      if (nmin > t.max_n) break;
      for (int64_t start = 0; start < C; start++)
        for (int64_t len = nmin; len <= t.max_n && start + (len - 1) * step < C; len++) {
          if (len - t.min_n >= nsets) break;
          const gram_set *g = &sets[len - t.min_n];
          if (!g->count) continue;
          int64_t k = gram_find(g, x, r * C + start, step);
          if (k >= 0) freq[r * t.n_grams + k]++;
        }
    }
  float *yv = y->data; /* float32, dense (allocated above) */
  memset(yv, 0, (size_t)y->numel * sizeof *yv);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t k = 0; k < t.n_grams; k++) {
      int64_t f = freq[r * t.n_grams + k];
      if (!f) continue;
      double w = t.n_weights ? (double)t.weights[k] : 1.0, v = (double)f;
      if (t.mode == 1) v = w;
      else if (t.mode == 2) v = w * (double)f;
      yv[r * t.out_size + t.index[k]] += (float)v;
    }
done:
  for (int64_t i = 0; sets && i < nsets; i++) {
    kiln_free(sets[i].first);
    kiln_free(sets[i].id);
  }
  kiln_free(sets);
  kiln_free(freq);
  return s;
}

const kiln_op_def kiln_ref_ops_text[] = {
    {"TfIdfVectorizer", 1, 1, 1, 1,
     "max_gram_length max_skip_count min_gram_length mode ngram_counts ngram_indexes pool_int64s pool_strings weights",
     0, run_tfidf, chk_tfidf},
    {0},
};
