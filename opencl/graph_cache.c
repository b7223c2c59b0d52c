/* opencl/graph_cache: a kiln_graph as bytes (little-endian fields, strings
 * with a length, NULL distinct from ""), the same walk feeding either a
 * buffer (pack) or the key (kiln_cl_graph_key: small fields through FNV-1a
 * 128, longer runs (tensor data) through kiln_cl_hash64 first, so a 45 MB
 * model keys in a few milliseconds), and the checked reader. */
#include "opencl/graph_cache.h"

#include <stdatomic.h>
#include <string.h>

#include "ir/alloc.h"

#define FORMAT "kiln graph record 3" /* 3: the values' facts after the statistics; 2: tensor data at 64-byte offsets
                                        (read in place) */
#define DATA_ALIGN 64

/* ---- the writer: into a buffer, or into a key ---- */

typedef struct wr {
  unsigned char *p;
  size_t len, cap;
  bool oom, bad; /* bad: something the format does not hold */
  kiln_cl_key *key; /* non-NULL: hashing */
  const kiln_graph *base; /* pack: initializers equal to base's are stored as a reference */
} wr;

static void put(wr *w, const void *src, size_t n) {
  if (w->oom || w->bad) return;
  if (w->key) {
    if (n > 256) {
      uint64_t h = kiln_cl_hash64(src, n);
      kiln_cl_key_bytes(w->key, &h, sizeof h);
    } else {
      kiln_cl_key_bytes(w->key, src, n);
    }
    return;
  }
  if (w->len + n > w->cap) {
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + n) cap *= 2;
    unsigned char *q = kiln_realloc(w->p, cap);
    if (!q) {
      w->oom = true;
      return;
    }
    w->p = q;
    w->cap = cap;
  }
  memcpy(w->p + w->len, src, n);
  w->len += n;
}

static void put_u64(wr *w, uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
  put(w, b, 8);
}
static void put_i64(wr *w, int64_t v) { put_u64(w, (uint64_t)v); }
static void put_f64(wr *w, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  put_u64(w, u);
}
static void put_str(wr *w, const char *s) {
  if (!s) {
    put_u64(w, UINT64_MAX);
    return;
  }
  size_t n = strlen(s);
  put_u64(w, n);
  put(w, s, n);
}

static bool same_tensor(const kiln_tensor *a, const kiln_tensor *b) {
  if (!a || !b || a->dtype != b->dtype || a->rank != b->rank || a->strided || b->strided) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  size_t n = (size_t)a->numel * kiln_dtype_size(a->dtype);
  return !n || (a->data && b->data && !memcmp(a->data, b->data, n));
}

/* An initializer: a reference to base's value of the same name when equal. */
static void put_init(wr *w, const char *name, const kiln_tensor *t);
static void put_tensor(wr *w, const kiln_tensor *t) {
  if (!t) {
    put_u64(w, 0);
    return;
  }
  if (t->strided || t->dtype == KILN_STRING || !kiln_dtype_size(t->dtype) || (t->numel && !t->data)) {
    w->bad = true;
    return;
  }
  put_u64(w, 1);
  put_i64(w, t->dtype);
  put_i64(w, t->rank);
  for (int d = 0; d < t->rank; d++) put_i64(w, t->dims[d]);
  size_t bytes = (size_t)t->numel * kiln_dtype_size(t->dtype);
  put_u64(w, bytes);
  if (bytes && !w->key) { /* zeros up to an offset the reader can use in place */
    static const unsigned char zeros[DATA_ALIGN];
    put(w, zeros, (DATA_ALIGN - w->len % DATA_ALIGN) % DATA_ALIGN);
  }
  if (bytes) put(w, t->data, bytes);
}

static void put_init(wr *w, const char *name, const kiln_tensor *t) {
  if (t && w->base && !w->key && name) {
    int b = kiln_graph_find_value(w->base, name);
    if (b >= 0 && same_tensor(t, w->base->values[b].init)) {
      put_u64(w, 2);
      put_i64(w, b);
      return;
    }
  }
  put_tensor(w, t);
}

static void put_graph(wr *w, const kiln_graph *g) {
  put_str(w, FORMAT);
  put_i64(w, g->ir_version);
  put_str(w, g->name);
  put_i64(w, g->n_opsets);
  for (int i = 0; i < g->n_opsets; i++) {
    put_str(w, g->opsets[i].domain);
    put_i64(w, g->opsets[i].version);
  }
  put_i64(w, g->n_props);
  for (int i = 0; i < g->n_props; i++) {
    put_str(w, g->prop_keys[i]);
    put_str(w, g->prop_vals[i]);
  }
  put_i64(w, g->n_values);
  for (int i = 0; i < g->n_values; i++) {
    const kiln_value *v = &g->values[i];
    put_str(w, v->name);
    put_i64(w, v->type.kind);
    put_i64(w, v->type.dtype);
    put_i64(w, v->type.rank);
    for (int d = 0; d < v->type.rank && d < KILN_MAX_RANK; d++) {
      put_i64(w, v->type.dims[d].value);
      put_str(w, v->type.dims[d].param);
    }
    put_i64(w, v->producer);
    put_u64(w, (uint64_t)v->is_input | (uint64_t)v->is_output << 1);
    put_init(w, v->name, v->init);
  }
  put_i64(w, g->n_nodes);
  for (int i = 0; i < g->n_nodes; i++) {
    const kiln_node *n = &g->nodes[i];
    put_str(w, n->name);
    put_str(w, n->op_type);
    put_str(w, n->domain);
    put_i64(w, n->opset);
    put_i64(w, n->src);
    put_i64(w, n->n_in);
    for (int k = 0; k < n->n_in; k++) put_i64(w, n->in[k]);
    put_i64(w, n->n_out);
    for (int k = 0; k < n->n_out; k++) put_i64(w, n->out[k]);
    put_i64(w, n->n_attrs);
    for (int k = 0; k < n->n_attrs; k++) {
      const kiln_attr *a = &n->attrs[k];
      if (a->type == KILN_ATTR_GRAPH || a->type == KILN_ATTR_GRAPHS || a->type == KILN_ATTR_TENSORS ||
          a->type >= KILN_ATTR_SPARSE_TENSOR) {
        w->bad = true;
        return;
      }
      put_str(w, a->name);
      put_i64(w, a->type);
      put_i64(w, a->i);
      put_f64(w, a->f);
      put_str(w, a->s);
      put_u64(w, a->n);
      put_u64(w, (uint64_t)(a->ints != NULL) | (uint64_t)(a->floats != NULL) << 1 |
                     (uint64_t)(a->strings != NULL) << 2);
      for (size_t j = 0; a->ints && j < a->n; j++) put_i64(w, a->ints[j]);
      for (size_t j = 0; a->floats && j < a->n; j++) put_f64(w, a->floats[j]);
      for (size_t j = 0; a->strings && j < a->n; j++) put_str(w, a->strings[j]);
      put_tensor(w, a->t);
    }
  }
  put_i64(w, g->n_inputs);
  for (int i = 0; i < g->n_inputs; i++) put_i64(w, g->inputs[i]);
  put_i64(w, g->n_outputs);
  for (int i = 0; i < g->n_outputs; i++) put_i64(w, g->outputs[i]);
}

bool kiln_cl_graph_key(const kiln_graph *g, const char *purpose, kiln_cl_key *out) {
  wr w = {0};
  w.key = out;
  kiln_cl_key_init(out);
  kiln_cl_key_str(out, purpose);
#ifdef KILN_CACHE_KILN_VERSION
  kiln_cl_key_str(out, KILN_CACHE_KILN_VERSION);
#endif
  put_graph(&w, g);
  return !w.bad;
}

bool kiln_cl_rewrite_key(const kiln_graph *g0, bool keep_outputs, kiln_cl_key *out) {
  return kiln_cl_graph_key(g0,
                           keep_outputs ? "kiln rewritten graph " KILN_CL_REWRITE_VERSION " keep"
                                        : "kiln rewritten graph " KILN_CL_REWRITE_VERSION,
                           out);
}

bool kiln_cl_graph_pack(const kiln_graph *g, const kiln_graph *base, const kiln_rewrite_stats *st,
                        const signed char *facts, void **buf, size_t *len) {
  return kiln_cl_graph_pack_head(NULL, 0, g, base, st, facts, buf, len);
}

bool kiln_cl_graph_pack_head(const void *head, size_t head_len, const kiln_graph *g, const kiln_graph *base,
                             const kiln_rewrite_stats *st, const signed char *facts, void **buf, size_t *len) {
  wr w = {0};
  w.base = base;
  if (head_len % DATA_ALIGN) return false;
  if (head_len) put(&w, head, head_len);
  put_graph(&w, g);
  put_u64(&w, sizeof *st);
  put(&w, st, sizeof *st);
  /* the facts: none (0), or one byte a value (KILN_CL_FACT_*) */
  put_u64(&w, facts ? (uint64_t)g->n_values : 0);
  if (facts) put(&w, facts, (size_t)g->n_values);
  if (w.oom || w.bad) {
    kiln_free(w.p);
    *buf = NULL;
    *len = 0;
    return false;
  }
  *buf = w.p;
  *len = w.len;
  return true;
}

/* ---- the reader ---- */

typedef struct rd {
  const unsigned char *p;
  size_t len, at;
  const char *bad; /* the first problem */
  const kiln_graph *base;
} rd;

static bool need(rd *r, size_t n, const char *what) {
  if (r->bad) return false;
  if (n > r->len - r->at) {
    r->bad = what;
    return false;
  }
  return true;
}

static uint64_t get_u64(rd *r) {
  if (!need(r, 8, "truncated")) return 0;
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | r->p[r->at + (size_t)i];
  r->at += 8;
  return v;
}
static int64_t get_i64(rd *r) { return (int64_t)get_u64(r); }
static double get_f64(rd *r) {
  uint64_t u = get_u64(r);
  double v;
  memcpy(&v, &u, 8);
  return v;
}

/* A count in [0, max]; each item needs at least `unit` bytes. */
static int get_count(rd *r, int64_t max, size_t unit) {
  int64_t n = get_i64(r);
  if (r->bad) return 0;
  if (n < 0 || n > max || (unit && (uint64_t)n > (r->len - r->at) / unit)) {
    r->bad = "bad count";
    return 0;
  }
  return (int)n;
}

/* *out: kiln_malloc'd copy, or NULL for the NULL string. */
static void get_str(rd *r, char **out) {
  *out = NULL;
  uint64_t n = get_u64(r);
  if (r->bad || n == UINT64_MAX) return;
  if (!need(r, (size_t)n, "truncated string") || n > r->len) return;
  char *s = kiln_malloc((size_t)n + 1);
  if (!s) {
    r->bad = "out of memory";
    return;
  }
  memcpy(s, r->p + r->at, (size_t)n);
  s[n] = 0;
  if (strlen(s) != n) {
    kiln_free(s);
    r->bad = "NUL inside a string";
    return;
  }
  r->at += (size_t)n;
  *out = s;
}

static void get_tensor(rd *r, kiln_tensor **out) {
  *out = NULL;
  uint64_t tag = get_u64(r);
  if (!tag || r->bad) return;
  if (tag == 2) { /* base's initializer: its data borrowed */
    int64_t b = get_i64(r);
    const kiln_tensor *src = r->base && b >= 0 && b < r->base->n_values ? r->base->values[b].init : NULL;
    if (r->bad) return;
    if (!src || src->strided) {
      r->bad = "bad initializer reference";
      return;
    }
    kiln_tensor *t = kiln_calloc(1, sizeof *t);
    if (!t) {
      r->bad = "out of memory";
      return;
    }
    kiln_tensor_wrap(t, src->dtype, src->rank, src->dims, src->numel, src->data);
    *out = t;
    return;
  }
  if (tag != 1) {
    r->bad = "bad tensor tag";
    return;
  }
  int64_t dt = get_i64(r), rank = get_i64(r);
  int64_t dims[KILN_MAX_RANK];
  if (r->bad) return;
  if (dt <= 0 || dt >= KILN_DTYPE_COUNT || dt == KILN_STRING || !kiln_dtype_size((kiln_dtype)dt) || rank < 0 ||
      rank > KILN_MAX_RANK) {
    r->bad = "bad tensor type";
    return;
  }
  uint64_t numel = 1;
  for (int d = 0; d < rank; d++) {
    dims[d] = get_i64(r);
    if (r->bad) return;
    if (dims[d] < 0 || (dims[d] && numel > UINT64_MAX / (uint64_t)dims[d] / 16)) {
      r->bad = "bad tensor dims";
      return;
    }
    numel *= (uint64_t)dims[d];
  }
  uint64_t bytes = get_u64(r);
  if (r->bad) return;
  if (bytes != numel * kiln_dtype_size((kiln_dtype)dt) || !need(r, (size_t)bytes, "truncated tensor")) {
    if (!r->bad) r->bad = "tensor size";
    return;
  }
  int64_t checked;
  if (kiln_shape_numel((int)rank, dims, &checked)) { /* beyond KILN_MAX_NUMEL */
    kiln_error_clear();
    r->bad = "bad tensor dims";
    return;
  }
  if (bytes) { /* the padding: zeros up to the next DATA_ALIGN offset */
    size_t pad = (DATA_ALIGN - r->at % DATA_ALIGN) % DATA_ALIGN;
    if (!need(r, pad + (size_t)bytes, "truncated tensor")) return;
    for (size_t k = 0; k < pad; k++)
      if (r->p[r->at + k]) r->bad = "bad tensor padding";
    if (r->bad) return;
    r->at += pad;
  }
  kiln_tensor *t = kiln_calloc(1, sizeof *t);
  if (!t) {
    r->bad = "out of memory";
    return;
  }
  const unsigned char *at = r->p + r->at;
  if (bytes && (uintptr_t)at % kiln_dtype_size((kiln_dtype)dt) == 0) { /* read in place: borrowed */
    kiln_tensor_wrap(t, (kiln_dtype)dt, (int)rank, dims, checked, (void *)(uintptr_t)at);
  } else if (kiln_tensor_alloc(t, (kiln_dtype)dt, (int)rank, dims)) {
    kiln_free(t);
    r->bad = "out of memory";
    return;
  } else if (bytes) {
    memcpy(t->data, at, (size_t)bytes);
  }
  r->at += (size_t)bytes;
  *out = t;
}

static bool idx_ok(int64_t v, int64_t lo, int64_t n) { return v >= lo && v < n; }

kiln_status kiln_cl_graph_unpack(const void *buf, size_t len, const kiln_graph *base, kiln_graph **out,
                                 kiln_rewrite_stats *st, signed char **facts) {
  *out = NULL;
  if (facts) *facts = NULL;
  signed char *fa = NULL;
  rd r = {buf, len, 0, NULL, base};
  kiln_graph *g = kiln_calloc(1, sizeof *g);
  if (!g) return kiln_fail(KILN_E_NOMEM, "out of memory reading a graph record");
  char *fmt = NULL;
  get_str(&r, &fmt);
  if (!r.bad && (!fmt || strcmp(fmt, FORMAT))) r.bad = "another format";
  kiln_free(fmt);
  g->ir_version = get_i64(&r);
  get_str(&r, &g->name);
  int n = get_count(&r, 1 << 16, 16);
  if (!r.bad && n && !(g->opsets = kiln_calloc((size_t)n, sizeof *g->opsets))) r.bad = "out of memory";
  for (int i = 0; i < n && !r.bad; i++, g->n_opsets++) {
    get_str(&r, &g->opsets[i].domain);
    g->opsets[i].version = get_i64(&r);
  }
  n = get_count(&r, 1 << 20, 16);
  if (!r.bad && n &&
      (!(g->prop_keys = kiln_calloc((size_t)n, sizeof(char *))) || !(g->prop_vals = kiln_calloc((size_t)n, sizeof(char *)))))
    r.bad = "out of memory";
  for (int i = 0; i < n && !r.bad; i++, g->n_props++) {
    get_str(&r, &g->prop_keys[i]);
    get_str(&r, &g->prop_vals[i]);
  }
  int nv = get_count(&r, 1 << 28, 40);
  if (!r.bad && nv && !(g->values = kiln_calloc((size_t)nv, sizeof *g->values))) r.bad = "out of memory";
  for (int i = 0; i < nv && !r.bad; i++, g->n_values++) {
    kiln_value *v = &g->values[i];
    get_str(&r, &v->name);
    v->type.kind = (kiln_type_kind)get_i64(&r);
    v->type.dtype = (kiln_dtype)get_i64(&r);
    int64_t rank = get_i64(&r);
    if (!r.bad && (rank < -1 || rank > KILN_MAX_RANK || v->type.dtype < 0 || v->type.dtype >= KILN_DTYPE_COUNT ||
                   v->type.kind < 0 || v->type.kind > KILN_TYPE_SPARSE))
      r.bad = "bad value type";
    v->type.rank = (int)rank;
    for (int d = 0; d < rank && !r.bad; d++) {
      v->type.dims[d].value = get_i64(&r);
      get_str(&r, &v->type.dims[d].param);
    }
    v->producer = (int)get_i64(&r);
    uint64_t fl = get_u64(&r);
    v->is_input = fl & 1;
    v->is_output = (fl >> 1) & 1;
    get_tensor(&r, &v->init);
  }
  int nn = get_count(&r, 1 << 28, 48);
  if (!r.bad && nn && !(g->nodes = kiln_calloc((size_t)nn, sizeof *g->nodes))) r.bad = "out of memory";
  for (int i = 0; i < nn && !r.bad; i++, g->n_nodes++) {
    kiln_node *nd = &g->nodes[i];
    get_str(&r, &nd->name);
    get_str(&r, &nd->op_type);
    get_str(&r, &nd->domain);
    nd->opset = (int)get_i64(&r);
    int64_t src = get_i64(&r);
    if (!r.bad && (src < -1 || src > INT32_MAX)) r.bad = "bad node source index";
    nd->src = (int)src;
    if (!r.bad && (!nd->op_type || !nd->domain)) r.bad = "node without op type or domain";
    int ni = get_count(&r, 1 << 20, 8);
    if (!r.bad && !(nd->in = kiln_calloc((size_t)ni + 1, sizeof *nd->in))) r.bad = "out of memory";
    for (int k = 0; k < ni && !r.bad; k++, nd->n_in++) {
      int64_t x = get_i64(&r);
      if (!idx_ok(x, -1, nv)) r.bad = "bad node input";
      nd->in[k] = (int)x;
    }
    int no = get_count(&r, 1 << 20, 8);
    if (!r.bad && !(nd->out = kiln_calloc((size_t)no + 1, sizeof *nd->out))) r.bad = "out of memory";
    for (int k = 0; k < no && !r.bad; k++, nd->n_out++) {
      int64_t x = get_i64(&r);
      if (!idx_ok(x, -1, nv)) r.bad = "bad node output";
      nd->out[k] = (int)x;
    }
    int na = get_count(&r, 1 << 16, 48);
    if (!r.bad && na && !(nd->attrs = kiln_calloc((size_t)na, sizeof *nd->attrs))) r.bad = "out of memory";
    for (int k = 0; k < na && !r.bad; k++) {
      kiln_attr *a = &nd->attrs[k];
      nd->n_attrs = k + 1;
      get_str(&r, &a->name);
      a->type = (kiln_attr_type)get_i64(&r);
      a->i = get_i64(&r);
      a->f = (float)get_f64(&r);
      get_str(&r, &a->s);
      uint64_t cnt = get_u64(&r), has = get_u64(&r);
      if (!r.bad && (cnt > (r.len - r.at) / 8 + 1 || !a->name)) r.bad = "bad attribute";
      if (r.bad) break;
      a->n = (size_t)cnt;
      if ((has & 1) && !(a->ints = kiln_calloc(a->n + 1, sizeof *a->ints))) r.bad = "out of memory";
      if ((has & 2) && !r.bad && !(a->floats = kiln_calloc(a->n + 1, sizeof *a->floats))) r.bad = "out of memory";
      if ((has & 4) && !r.bad && !(a->strings = kiln_calloc(a->n + 1, sizeof *a->strings))) r.bad = "out of memory";
      for (size_t j = 0; a->ints && j < a->n && !r.bad; j++) a->ints[j] = get_i64(&r);
      for (size_t j = 0; a->floats && j < a->n && !r.bad; j++) a->floats[j] = (float)get_f64(&r);
      for (size_t j = 0; a->strings && j < a->n && !r.bad; j++) get_str(&r, &a->strings[j]);
      get_tensor(&r, &a->t);
    }
  }
  int nin = get_count(&r, nv, 8);
  if (!r.bad && !(g->inputs = kiln_calloc((size_t)nin + 1, sizeof *g->inputs))) r.bad = "out of memory";
  for (int i = 0; i < nin && !r.bad; i++, g->n_inputs++) {
    int64_t x = get_i64(&r);
    if (!idx_ok(x, 0, nv)) r.bad = "bad graph input";
    g->inputs[i] = (int)x;
  }
  int nout = get_count(&r, nv, 8);
  if (!r.bad && !(g->outputs = kiln_calloc((size_t)nout + 1, sizeof *g->outputs))) r.bad = "out of memory";
  for (int i = 0; i < nout && !r.bad; i++, g->n_outputs++) {
    int64_t x = get_i64(&r);
    if (!idx_ok(x, 0, nv)) r.bad = "bad graph output";
    g->outputs[i] = (int)x;
  }
  for (int i = 0; i < g->n_values && !r.bad; i++)
    if (!idx_ok(g->values[i].producer, -1, g->n_nodes)) r.bad = "bad producer";
  uint64_t sz = get_u64(&r);
  if (!r.bad && (sz != sizeof *st || !need(&r, sizeof *st, "truncated statistics"))) r.bad = "bad statistics";
  if (!r.bad) {
    memcpy(st, r.p + r.at, sizeof *st);
    r.at += sizeof *st;
  }
  uint64_t nf = get_u64(&r);
  if (!r.bad && nf && (nf != (uint64_t)g->n_values || !need(&r, (size_t)nf, "truncated facts"))) r.bad = "bad facts";
  if (!r.bad && nf && !(fa = kiln_malloc((size_t)nf))) r.bad = "out of memory";
  for (uint64_t i = 0; fa && i < nf && !r.bad; i++) {
    fa[i] = (signed char)r.p[r.at + i];
    if (fa[i] != KILN_CL_FACT_UNKNOWN && fa[i] != KILN_CL_FACT_FINITE && fa[i] != KILN_CL_FACT_NOT_FINITE)
      r.bad = "bad fact";
  }
  if (!r.bad) {
    r.at += (size_t)nf;
    if (r.at != r.len) r.bad = "trailing bytes";
  }
  if (r.bad) {
    kiln_free(fa);
    kiln_graph_free(g);
    return kiln_fail(KILN_E_MODEL, "graph record: %s at byte %zu of %zu", r.bad, r.at, r.len);
  }
  *out = g;
  if (facts) *facts = fa;
  else kiln_free(fa);
  return KILN_OK;
}

/* ---- statistics ---- */

static _Atomic unsigned long n_hits, n_stores;

void kiln_cl_graph_cache_count(bool hit) { atomic_fetch_add(hit ? &n_hits : &n_stores, 1); }

void kiln_cl_graph_cache_stats_get(kiln_cl_graph_cache_stats *out) {
  out->hits = atomic_load(&n_hits);
  out->stores = atomic_load(&n_stores);
}
