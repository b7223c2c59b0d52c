/* tests/unit_views: the view algebra against a brute-force oracle — random
 * movement-op sequences applied symbolically (views, stacks) and to a numbered
 * buffer materialised step by step with plain loops; every flat index compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/views.h"

static int passed, failed;
#include "tests/check.h"

/* ---- deterministic random numbers ---- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}
static int64_t rnd(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); } /* [lo,hi] */

/* ---- the oracle: a materialised tensor of storage offsets (-1: masked) ---- */
#define CAP 4096
typedef struct mat {
  int rank;
  int64_t shape[KILN_MAX_RANK];
  int64_t numel;
  int64_t data[CAP];
} mat;

static int64_t prod(int rank, const int64_t *s) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= s[d];
  return n;
}
static void unravel(int64_t flat, int rank, const int64_t *shape, int64_t *idx) {
  for (int d = rank - 1; d >= 0; d--) idx[d] = flat % shape[d], flat /= shape[d];
}
static int64_t ravel(int rank, const int64_t *shape, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < rank; d++) f = f * shape[d] + idx[d];
  return f;
}

/* the numbered buffer: storage element k holds k */
static int64_t storage[1024];

static void mat_reshape(mat *m, int rank, const int64_t *shape) {
  m->rank = rank;
  for (int d = 0; d < rank; d++) m->shape[d] = shape[d];
}

/* ONNX Slice, one axis, as an explicit list of indices. */
static int slice_list(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *list) {
  int n = 0;
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    if (start < 0) start = 0;
    if (start > dim) start = dim;
    if (end < 0) end = 0;
    if (end > dim) end = dim;
    for (int64_t i = start; i < end; i += step) {
      list[n++] = i;
      if (step > dim) break;
    }
  } else {
    if (start < 0) start = 0;
    if (start > dim - 1) start = dim - 1;
    if (end < -1) end = -1;
    if (end > dim - 1) end = dim - 1;
    for (int64_t i = start; i > end; i += step) {
      list[n++] = i;
      if (step < -dim) break;
    }
  }
  return n;
}

/* Gathers m through per-dim index lists (a list entry -1 reads masked). */
static void mat_select(mat *m, int rank, const int64_t *shape, int64_t lists[][CAP], const int *map_dim) {
  static int64_t out[CAP];
  int64_t n = prod(rank, shape), idx[KILN_MAX_RANK], src[KILN_MAX_RANK];
  for (int64_t f = 0; f < n; f++) {
    unravel(f, rank, shape, idx);
    bool hidden = false;
    for (int d = 0; d < m->rank; d++) src[d] = 0;
    for (int d = 0; d < rank; d++) {
      if (map_dim[d] < 0) continue;
      int64_t s = lists[d][idx[d]];
      if (s < 0) hidden = true;
      src[map_dim[d]] = s;
    }
    out[f] = hidden ? -1 : m->data[ravel(m->rank, m->shape, src)];
  }
  memcpy(m->data, out, sizeof(int64_t) * (size_t)n);
  m->rank = rank;
  for (int d = 0; d < rank; d++) m->shape[d] = shape[d];
  m->numel = n;
}

static void mat_apply(mat *m, const kiln_view_op *op) {
  static int64_t lists[KILN_MAX_RANK][CAP];
  int64_t shape[KILN_MAX_RANK];
  int map[KILN_MAX_RANK], r = m->rank;
  switch (op->kind) {
    case KILN_VOP_IDENTITY:
      return;
    case KILN_VOP_RESHAPE: {
      int64_t known = 1;
      int inf = -1;
      for (int d = 0; d < op->n; d++) {
        shape[d] = op->shape[d];
        if (shape[d] == -1)
          inf = d;
        else
          known *= shape[d];
      }
      if (inf >= 0) shape[inf] = m->numel / known;
      mat_reshape(m, op->n, shape);
      return;
    }
    case KILN_VOP_FLATTEN: {
      int a = (int)(op->axis < 0 ? op->axis + r : op->axis);
      shape[0] = prod(a, m->shape), shape[1] = prod(r - a, m->shape + a);
      mat_reshape(m, 2, shape);
      return;
    }
    case KILN_VOP_TRANSPOSE:
      for (int d = 0; d < r; d++) {
        int p = op->n ? (int)op->perm[d] : r - 1 - d;
        shape[d] = m->shape[p], map[d] = p;
        for (int64_t i = 0; i < shape[d]; i++) lists[d][i] = i;
      }
      mat_select(m, r, shape, lists, map);
      return;
    case KILN_VOP_SLICE:
    case KILN_VOP_SPLIT:
      for (int d = 0; d < r; d++) {
        shape[d] = m->shape[d], map[d] = d;
        for (int64_t i = 0; i < shape[d]; i++) lists[d][i] = i;
      }
      if (op->kind == KILN_VOP_SPLIT) {
        int a = (int)(op->axis < 0 ? op->axis + r : op->axis);
        shape[a] = op->len;
        for (int64_t i = 0; i < op->len; i++) lists[a][i] = op->start + i;
      } else {
        for (int t = 0; t < op->n; t++) {
          int64_t ax = op->has_axes ? op->axes[t] : t;
          int a = (int)(ax < 0 ? ax + r : ax);
          shape[a] = slice_list(m->shape[a], op->starts[t], op->ends[t], op->has_steps ? op->steps[t] : 1, lists[a]);
        }
      }
      mat_select(m, r, shape, lists, map);
      return;
    case KILN_VOP_SQUEEZE: {
      int k = 0;
      for (int d = 0; d < r; d++) {
        bool drop = false;
        for (int t = 0; t < op->n; t++) drop |= (op->axes[t] < 0 ? op->axes[t] + r : op->axes[t]) == d;
        if (op->n == 0) drop = m->shape[d] == 1;
        if (!drop) shape[k++] = m->shape[d];
      }
      mat_reshape(m, k, shape);
      return;
    }
    case KILN_VOP_UNSQUEEZE: {
      int o = r + op->n;
      for (int d = 0, k = 0; d < o; d++) {
        bool ins = false;
        for (int t = 0; t < op->n; t++) ins |= (op->axes[t] < 0 ? op->axes[t] + o : op->axes[t]) == d;
        shape[d] = ins ? 1 : m->shape[k++];
      }
      mat_reshape(m, o, shape);
      return;
    }
    case KILN_VOP_EXPAND: {
      int o = op->n > r ? op->n : r;
      for (int d = 0; d < o; d++) {
        int dv = d - (o - r), dt = d - (o - op->n);
        int64_t n = dv >= 0 ? m->shape[dv] : 1, t = dt >= 0 ? op->shape[dt] : 1;
        shape[d] = n == 1 ? t : n;
        map[d] = dv;
        for (int64_t i = 0; i < shape[d]; i++) lists[d][i] = n == 1 ? 0 : i;
      }
      mat_select(m, o, shape, lists, map);
      return;
    }
    case KILN_VOP_GATHER: {
      int a = (int)(op->axis < 0 ? op->axis + r : op->axis), k = 0;
      int64_t ix = op->index < 0 ? op->index + m->shape[a] : op->index;
        for (int d = 0; d < r; d++) {
        if (d == a) continue;
        shape[k] = m->shape[d], map[k] = d;
        for (int64_t i = 0; i < shape[k]; i++) lists[k][i] = i;
        k++;
      }
      /* select with the gathered axis fixed: add it as a size-1 dim, then drop */
      shape[k] = 1, map[k] = a, lists[k][0] = ix;
        mat_select(m, k + 1, shape, lists, map);
      m->rank = k;
      return;
    }
    case KILN_VOP_PAD:
      for (int d = 0; d < r; d++) {
        int64_t b = op->pads[d], e = op->pads[r + d], n = m->shape[d];
        shape[d] = n + b + e, map[d] = d;
        for (int64_t i = 0; i < shape[d]; i++) {
          int64_t s = i - b;
          lists[d][i] = s >= 0 && s < n ? s : -1;
        }
      }
      mat_select(m, r, shape, lists, map);
      return;
  }
}

/* ---- random op generation (valid ops only) ---- */

/* A random shape of numel n (n > 0) and rank <= maxr. */
static int random_factor(int64_t n, int maxr, int64_t *shape) {
  int rank = (int)rnd(1, maxr);
  for (int d = 0; d < rank; d++) shape[d] = 1;
  int64_t m = n;
  for (int64_t p = 2; m > 1;) {
    if (m % p == 0) {
      shape[rnd(0, rank - 1)] *= p;
      m /= p;
    } else {
      p++;
    }
  }
  return rank;
}

static bool random_op(const mat *m, kiln_view_op *op) {
  memset(op, 0, sizeof *op);
  int r = m->rank;
  int kind = (int)rnd(0, 10);
  op->kind = (kiln_view_op_kind)kind;
  switch (op->kind) {
    case KILN_VOP_IDENTITY:
      return true;
    case KILN_VOP_RESHAPE:
      if (m->numel == 0) {
        op->n = (int)rnd(1, 3);
        for (int d = 0; d < op->n; d++) op->shape[d] = rnd(1, 3);
        op->shape[rnd(0, op->n - 1)] = 0;
        return true;
      }
      op->n = random_factor(m->numel, KILN_MAX_RANK, op->shape);
      if (rnd(0, 3) == 0) op->shape[rnd(0, op->n - 1)] = -1;
      return true;
    case KILN_VOP_FLATTEN:
      op->axis = rnd(-r, r);
      return true;
    case KILN_VOP_TRANSPOSE:
      if (rnd(0, 4) == 0) return true; /* reverse */
      op->n = r;
      for (int d = 0; d < r; d++) op->perm[d] = d;
      for (int d = r - 1; d > 0; d--) {
        int j = (int)rnd(0, d);
        int64_t t = op->perm[d];
        op->perm[d] = op->perm[j], op->perm[j] = t;
      }
      return true;
    case KILN_VOP_SLICE: {
      if (r == 0) return false;
      op->n = (int)rnd(1, r);
      op->has_axes = rnd(0, 2) != 0;
      op->has_steps = rnd(0, 3) != 0;
      int64_t ax[KILN_MAX_RANK];
      for (int d = 0; d < r; d++) ax[d] = d;
      for (int d = r - 1; d > 0; d--) {
        int j = (int)rnd(0, d);
        int64_t t = ax[d];
        ax[d] = ax[j], ax[j] = t;
      }
      static const int64_t big_steps[] = {1000, -1000, (int64_t)1 << 62, -((int64_t)1 << 62), INT64_MIN};
      for (int t = 0; t < op->n; t++) {
        int a = op->has_axes ? (int)ax[t] : t;
        int64_t dim = m->shape[a];
        op->axes[t] = op->has_axes && rnd(0, 1) ? a - r : a;
        int64_t step = rnd(1, 4) * (rnd(0, 1) ? 1 : -1);
        if (rnd(0, 15) == 0) step = big_steps[rnd(0, 4)];
        op->steps[t] = op->has_steps ? step : 1;
        op->starts[t] = rnd(-dim - 2, dim + 2);
        op->ends[t] = rnd(-dim - 2, dim + 2);
        if (rnd(0, 7) == 0) op->starts[t] = rnd(0, 1) ? INT64_MAX : INT64_MIN;
        if (rnd(0, 7) == 0) op->ends[t] = rnd(0, 1) ? INT64_MAX : INT64_MIN;
      }
      return true;
    }
    case KILN_VOP_SQUEEZE: {
      if (rnd(0, 3) == 0) return true; /* all size-1 dims */
      for (int d = 0; d < r; d++)
        if (m->shape[d] == 1 && rnd(0, 1)) op->axes[op->n++] = rnd(0, 1) ? d : d - r;
      return op->n > 0;
    }
    case KILN_VOP_UNSQUEEZE: {
      if (r >= KILN_MAX_RANK) return false;
      op->n = (int)rnd(1, KILN_MAX_RANK - r < 3 ? KILN_MAX_RANK - r : 3);
      int o = r + op->n;
      bool used[KILN_MAX_RANK] = {false};
      for (int t = 0; t < op->n; t++) {
        int a;
        do a = (int)rnd(0, o - 1);
        while (used[a]);
        used[a] = true;
        op->axes[t] = rnd(0, 1) ? a : a - o;
      }
      return true;
    }
    case KILN_VOP_EXPAND: {
      int extra = (int)rnd(0, 2);
      if (r + extra > KILN_MAX_RANK) extra = KILN_MAX_RANK - r;
      int skip = r > 0 && extra == 0 ? (int)rnd(0, 1) : 0; /* a shorter target (bidirectional) */
      op->n = r + extra - skip;
      int64_t numel = 1;
      for (int d = 0; d < op->n; d++) {
        int dv = d - extra + skip;
        int64_t n = dv >= 0 ? m->shape[dv] : 1;
        op->shape[d] = n == 1 ? rnd(1, 4) : (rnd(0, 2) ? n : 1);
        numel *= n == 1 ? op->shape[d] : (n ? n : 1);
      }
      for (int d = 0; d < skip; d++) numel *= m->shape[d] ? m->shape[d] : 1;
      return numel <= CAP; /* zero dims count as 1: flatten must keep every dim <= CAP */
    }
    case KILN_VOP_GATHER: {
      if (r == 0) return false;
      int a = (int)rnd(0, r - 1);
      if (m->shape[a] == 0) return false;
      op->axis = rnd(0, 1) ? a : a - r;
      op->index = rnd(-m->shape[a], m->shape[a] - 1);
      return true;
    }
    case KILN_VOP_SPLIT: {
      if (r == 0) return false;
      int a = (int)rnd(0, r - 1);
      op->axis = rnd(0, 1) ? a : a - r;
      op->start = rnd(0, m->shape[a]);
      op->len = rnd(0, m->shape[a] - op->start);
      return true;
    }
    case KILN_VOP_PAD: {
      if (r == 0) return false;
      int64_t numel = 1;
      for (int d = 0; d < r; d++) {
        int64_t b = rnd(-1, 2), e = rnd(-1, 2);
        if ((b < 0 ? -b : 0) + (e < 0 ? -e : 0) > m->shape[d]) b = e = 0;
        op->pads[d] = b, op->pads[r + d] = e;
        numel *= m->shape[d] + b + e ? m->shape[d] + b + e : 1;
      }
      return numel <= CAP && rnd(0, 1); /* pads make masks: half as often */
    }
  }
  return false;
}

/* ---- comparisons ---- */

static bool stack_matches(const kiln_views *s, const mat *m, int64_t *bad) {
  const kiln_view *t = kiln_views_top(s);
  if (t->rank != m->rank || t->numel != m->numel) return *bad = -1, false;
  for (int d = 0; d < m->rank; d++)
    if (t->shape[d] != m->shape[d]) return *bad = -1, false;
  for (int64_t f = 0; f < m->numel; f++) {
    bool valid;
    int64_t off = kiln_views_offset(s, f, &valid);
    int64_t got = valid ? storage[off] : -1;
    if (got != m->data[f] || (off < 0) != !valid) return *bad = f, false;
  }
  return true;
}

static bool view_matches(const kiln_view *v, const mat *m) {
  kiln_views s;
  int64_t bad;
  kiln_views_init(&s, v);
  return stack_matches(&s, m, &bad);
}

/* Marks the elements of region r in mark[] (storage-sized); false if any lies
 * outside [lo, hi] or outside the storage. */
static bool region_mark(const kiln_region *r, unsigned char *mark, int64_t size) {
  if (r->empty) return true;
  int64_t n = prod(r->rank, r->shape), idx[KILN_MAX_RANK];
  for (int64_t f = 0; f < n; f++) {
    unravel(f, r->rank, r->shape, idx);
    int64_t off = r->offset;
    for (int d = 0; d < r->rank; d++) off += idx[d] * r->strides[d];
    if (off < r->lo || off > r->hi || off < 0 || off >= size) return false;
    mark[off] = 1;
  }
  return true;
}

static char vbuf[512];
static const char *vs(const kiln_view *v) { return kiln_view_str(v, vbuf, sizeof vbuf); }

/* ---- the random sequence test ---- */

static int depth_hist[KILN_VIEWS_MAX_DEPTH + 1];
static int missed_merges;
static int64_t compared;

/* True when m (every element valid) is one strided map of its multi-index. */
static bool affine(const mat *m) {
  int64_t st[KILN_MAX_RANK], idx[KILN_MAX_RANK];
  int64_t base = m->data[0];
  if (base < 0) return false;
  for (int d = 0; d < m->rank; d++) {
    for (int k = 0; k < m->rank; k++) idx[k] = 0;
    idx[d] = m->shape[d] > 1 ? 1 : 0;
    st[d] = m->data[ravel(m->rank, m->shape, idx)] - base;
  }
  for (int64_t f = 0; f < m->numel; f++) {
    unravel(f, m->rank, m->shape, idx);
    int64_t off = base;
    for (int d = 0; d < m->rank; d++) off += idx[d] * st[d];
    if (m->data[f] < 0 || m->data[f] != off) return false;
  }
  return true;
}
static int nonfit_reshapes, masked_runs, overlap_checks;

/* A random base view as given to kiln_view_make (raw, before normalising). */
typedef struct raw_view {
  int rank;
  int64_t shape[KILN_MAX_RANK], strides[KILN_MAX_RANK], lo[KILN_MAX_RANK], hi[KILN_MAX_RANK], off;
  bool masked;
} raw_view;

static void random_base(kiln_view *base, raw_view *w, int64_t *storage_size) {
  memset(w, 0, sizeof *w);
  w->rank = (int)rnd(0, 4);
  int mode = (int)rnd(0, 3);
  for (int d = 0; d < w->rank; d++) w->shape[d] = rnd(0, 20) == 0 ? 0 : rnd(1, 5);
  if (mode == 0)
    kiln_strides(w->rank, w->shape, w->strides);
  else
    for (int d = 0; d < w->rank; d++) w->strides[d] = rnd(-7, 7);
  /* offset so that every element lies in [0, storage_size) */
  int64_t low = 0, high = 0;
  for (int d = 0; d < w->rank; d++)
    if (w->shape[d] > 0) {
      int64_t reach = w->strides[d] * (w->shape[d] - 1);
      if (reach < 0)
        low += reach;
      else
        high += reach;
    }
  w->off = -low + (mode == 0 ? 0 : rnd(0, 3));
  *storage_size = w->off + high + 1;
  w->masked = mode == 3;
  for (int d = 0; d < w->rank; d++) w->lo[d] = rnd(0, 1), w->hi[d] = w->shape[d] - rnd(0, 1);
  kiln_status st =
      kiln_view_make(w->rank, w->shape, w->strides, w->off, w->masked ? w->lo : NULL, w->masked ? w->hi : NULL, base);
  if (st != KILN_OK) printf("base view failed: %s\n", kiln_last_error());
}

/* Materialises a raw base view from the numbered buffer with plain loops. */
static void mat_from_raw(const raw_view *w, mat *m) {
  int64_t idx[KILN_MAX_RANK];
  m->rank = w->rank;
  for (int d = 0; d < w->rank; d++) m->shape[d] = w->shape[d];
  m->numel = prod(w->rank, w->shape);
  for (int64_t f = 0; f < m->numel; f++) {
    unravel(f, m->rank, m->shape, idx);
    int64_t off = w->off;
    bool hidden = false;
    for (int d = 0; d < m->rank; d++) {
      off += idx[d] * w->strides[d];
      hidden |= w->masked && (idx[d] < w->lo[d] || idx[d] >= w->hi[d]);
    }
    m->data[f] = hidden ? -1 : storage[off];
  }
}

static void print_op(const kiln_view_op *op) {
  printf("  %s n=%d axis=%lld index=%lld start=%lld len=%lld", kiln_view_op_name(op->kind), op->n, (long long)op->axis,
         (long long)op->index, (long long)op->start, (long long)op->len);
  for (int t = 0; t < op->n; t++)
    printf(" [sh %lld perm %lld ax %lld %lld:%lld:%lld]", (long long)op->shape[t], (long long)op->perm[t],
           (long long)op->axes[t], (long long)op->starts[t], (long long)op->ends[t], (long long)op->steps[t]);
  if (op->kind == KILN_VOP_PAD)
    for (int t = 0; t < 2 * KILN_MAX_RANK; t++) printf(" %lld", (long long)op->pads[t]);
  printf("\n");
}

/* Replays a failing sequence step by step, printing views and data. */
static void replay(const raw_view *w, const kiln_view *base, const kiln_view_op *ops, int n) {
  static mat m;
  kiln_views s;
  mat_from_raw(w, &m);
  kiln_views_init(&s, base);
  for (int i = 0; i < n; i++) {
    print_op(&ops[i]);
    kiln_views_push(&s, &ops[i]);
    mat_apply(&m, &ops[i]);
    printf("   stack:");
    for (int k = 0; k < s.depth; k++) printf(" {%s}", vs(&s.v[k]));
    printf("\n   want:");
    for (int64_t f = 0; f < m.numel && f < 24; f++) printf(" %lld", (long long)m.data[f]);
    printf("\n   got: ");
    for (int64_t f = 0; f < m.numel && f < 24; f++) printf(" %lld", (long long)kiln_views_offset(&s, f, NULL));
    printf("\n");
  }
}

static void test_random(int runs) {
  static mat m;
  static unsigned char mark[1024], prev_touch[1024], touch[1024];
  kiln_region prev_region;
  bool have_prev = false;
  int bad_seq = 0, bad_single = 0, bad_region = 0, bad_exact = 0, bad_overlap = 0, bad_status = 0, bad_contig = 0,
      bad_chain = 0;
  for (int run = 0; run < runs; run++) {
    kiln_view base;
    raw_view w;
    int64_t ssize;
    random_base(&base, &w, &ssize);
    mat_from_raw(&w, &m);
    int64_t base0 = m.numel ? m.data[0] : -2;
    kiln_views s;
    kiln_views_init(&s, &base);
    kiln_view chain = base; /* the same ops on one view, while every reshape fits */
    bool chain_alive = true, masked = base.has_mask;
    int nops = (int)rnd(1, 8);
    kiln_view_op ops[8];
    char log[2048];
    int lk = snprintf(log, sizeof log, "base %s;", vs(&base));
    for (int i = 0; i < nops; i++) {
      kiln_view_op op;
      int tries = 0;
      while (!random_op(&m, &op) && ++tries < 50) {
      }
      if (tries >= 50) op.kind = KILN_VOP_IDENTITY;
      ops[i] = op;
      if (lk < (int)sizeof log) lk += snprintf(log + lk, sizeof log - (size_t)lk, " %s", kiln_view_op_name(op.kind));
      masked |= op.kind == KILN_VOP_PAD;
      kiln_views before = s;
      kiln_status st = kiln_views_push(&s, &op);
      if (st == KILN_E_UNSUPPORTED_SHAPE && before.depth == KILN_VIEWS_MAX_DEPTH) {
        op.kind = KILN_VOP_IDENTITY; /* too deep: a real caller materialises */
        s = before;
        continue;
      }
      if (st != KILN_OK) {
        bad_status++;
        if (bad_status < 5) printf("op %s failed: %s (%s)\n", kiln_view_op_name(op.kind), kiln_last_error(), log);
        break;
      }
      if (chain_alive) {
        bool fits;
        kiln_view nv;
        if (kiln_view_apply(&chain, &op, &nv, &fits) != KILN_OK) bad_status++;
        if (!fits)
          chain_alive = false, nonfit_reshapes++;
        else
          chain = nv;
      }
      mat_apply(&m, &op);
    }
    masked_runs += masked;
    depth_hist[s.depth]++;
    int64_t bad;
    if (!stack_matches(&s, &m, &bad)) {
      if (bad_seq++ < 5) {
        printf("mismatch at flat %lld (base[0] %lld, raw masked %d): %s\n  stack:", (long long)bad, (long long)base0,
               w.masked, log);
        for (int k = 0; k < s.depth; k++) printf(" {%s}", vs(&s.v[k]));
        printf("\n");
        replay(&w, &base, ops, nops);
      }
    }
    if (chain_alive && (!view_matches(&chain, &m) || !kiln_views_single(&s))) {
      if (bad_chain++ < 5) printf("single-view chain differs: %s\n  chain %s\n", log, vs(&chain));
    }
    if (kiln_views_single(&s) && !view_matches(kiln_views_top(&s), &m)) bad_single++;
    /* not a failure: merging is pairwise and exact, so a map that is strided
     * only by coincidence (partial coverage, aliasing strides) stays a stack */
    if (!kiln_views_single(&s) && m.numel > 0 && affine(&m)) missed_merges++;
    compared += m.numel;
    if (kiln_views_contiguous(&s))
      for (int64_t f = 0; f < m.numel; f++)
        if (m.data[f] != f) {
          bad_contig++;
          break;
        }
    /* region: contains every touched element; exact means equal */
    kiln_region reg;
    kiln_views_region(&s, &reg);
    memset(mark, 0, sizeof mark);
    memset(touch, 0, sizeof touch);
    if (!region_mark(&reg, mark, ssize)) bad_region++;
    bool any = false;
    for (int64_t f = 0; f < m.numel; f++)
      if (m.data[f] >= 0) {
        touch[m.data[f]] = 1, any = true;
        if (!mark[m.data[f]]) {
          bad_region++;
          if (bad_region < 5) printf("region misses %lld: %s\n", (long long)m.data[f], log);
          break;
        }
      }
    if (reg.exact && (memcmp(mark, touch, (size_t)ssize) != 0 || reg.empty != !any)) bad_exact++;
    /* overlap against the previous run's access (same numbered storage) */
    if (have_prev) {
      bool share = false;
      for (int64_t k = 0; k < 1024; k++) share |= touch[k] && prev_touch[k];
      if (share && !kiln_region_may_overlap(&reg, &prev_region)) bad_overlap++;
      if (share != kiln_region_may_overlap(&reg, &prev_region)) overlap_checks++;
    }
    memcpy(prev_touch, touch, sizeof touch);
    prev_region = reg, have_prev = true;
  }
  CHECK(bad_status == 0, "%d ops failed", bad_status);
  CHECK(bad_seq == 0, "%d of %d sequences read a wrong element through the stack", bad_seq, runs);
  CHECK(bad_chain == 0, "%d single-view chains disagree", bad_chain);
  CHECK(bad_single == 0, "%d single stacks disagree", bad_single);
  CHECK(bad_contig == 0, "%d contiguous stacks are not the identity", bad_contig);
  CHECK(bad_region == 0, "%d regions miss a touched element or leave [lo,hi]", bad_region);
  CHECK(bad_exact == 0, "%d exact regions are not exact", bad_exact);
  CHECK(bad_overlap == 0, "%d overlapping accesses reported disjoint", bad_overlap);
  CHECK(depth_hist[1] > runs / 2 && depth_hist[2] > runs / 50, "depth histogram 1:%d 2:%d", depth_hist[1],
        depth_hist[2]);
  CHECK(nonfit_reshapes > runs / 50 && masked_runs > runs / 10, "coverage: %d non-fitting reshapes, %d masked runs",
        nonfit_reshapes, masked_runs);
}

/* ---- targeted cases ---- */

static kiln_view_op op_reshape(int n, const int64_t *shape) {
  kiln_view_op op;
  memset(&op, 0, sizeof op);
  op.kind = KILN_VOP_RESHAPE, op.n = n;
  for (int d = 0; d < n; d++) op.shape[d] = shape[d];
  return op;
}
static kiln_view_op op_transpose(int n, const int64_t *perm) {
  kiln_view_op op;
  memset(&op, 0, sizeof op);
  op.kind = KILN_VOP_TRANSPOSE, op.n = n;
  for (int d = 0; d < n; d++) op.perm[d] = perm[d];
  return op;
}

static bool strides_are(const kiln_view *v, int rank, const int64_t *shape, const int64_t *strides, int64_t off) {
  if (v->rank != rank || v->offset != off || v->has_mask) return false;
  for (int d = 0; d < rank; d++)
    if (v->shape[d] != shape[d] || v->strides[d] != strides[d]) return false;
  return true;
}

/* the normal form kiln_view_make promises */
static void test_make(void) {
  kiln_view v;
  int64_t s315[3] = {3, 1, 5}, st[3] = {10, 7, 2};
  CHECK(kiln_view_make(3, s315, st, 4, NULL, NULL, &v) == KILN_OK && v.strides[1] == 0 && v.strides[0] == 10 &&
            !v.has_mask && !v.contiguous && v.numel == 15,
        "size-1 dims get stride 0: %s", vs(&v));
  int64_t lo[3] = {1, 0, 0}, hi[3] = {2, 1, 5};
  CHECK(kiln_view_make(3, s315, st, 4, lo, hi, &v) == KILN_OK && v.strides[0] == 0 && v.offset == 14 && v.has_mask,
        "a dim with one valid index gets stride 0, the offset absorbs it: %s", vs(&v));
  int64_t lo_full[3] = {-3, 0, 0}, hi_full[3] = {9, 1, 5};
  CHECK(kiln_view_make(3, s315, NULL, 0, lo_full, hi_full, &v) == KILN_OK && !v.has_mask && v.contiguous &&
            v.mask_lo[0] == 0 && v.mask_hi[0] == 3,
        "a mask covering everything is dropped: %s", vs(&v));
  int64_t lo_e[3] = {2, 0, 0}, hi_e[3] = {2, 1, 5};
  CHECK(kiln_view_make(3, s315, st, 4, lo_e, hi_e, &v) == KILN_OK && v.all_masked && v.has_mask && v.offset == 0 &&
            v.strides[0] == 0 && v.strides[2] == 0 && v.mask_hi[2] == 0,
        "an empty mask is all-masked: %s", vs(&v));
  int64_t s0[2] = {0, 4}, st0[2] = {-3, 9};
  CHECK(kiln_view_make(2, s0, st0, 17, NULL, NULL, &v) == KILN_OK && v.numel == 0 && v.offset == 0 &&
            v.strides[1] == 0 && v.contiguous,
        "a view of no elements is zeroed: %s", vs(&v));
  CHECK(kiln_view_make(0, NULL, NULL, 5, NULL, NULL, &v) == KILN_OK && v.numel == 1 && v.offset == 5 &&
            kiln_view_offset(&v, 0, NULL) == 5,
        "a scalar view");
  int64_t s23[2] = {2, 3};
  CHECK(kiln_view_contiguous(2, s23, &v) == KILN_OK && v.contiguous && v.strides[0] == 3 && v.strides[1] == 1,
        "contiguous [2,3]");
  char buf[128];
  CHECK(strcmp(kiln_view_str(&v, buf, sizeof buf), "[2,3] st [3,1] off 0") == 0, "str: %s", buf);
  /* flatten and split, explicit */
  int64_t s234[3] = {2, 3, 4}, p210[3] = {2, 1, 0};
  kiln_view t, f, sp;
  bool fits;
  kiln_view_contiguous(3, s234, &v);
  CHECK(kiln_view_flatten(&v, 1, &f, &fits) == KILN_OK && fits && f.shape[0] == 2 && f.shape[1] == 12 && f.contiguous,
        "flatten(1) of [2,3,4] is [2,12]");
  CHECK(kiln_view_flatten(&v, 0, &f, &fits) == KILN_OK && fits && f.shape[0] == 1 && f.shape[1] == 24,
        "flatten(0) is [1,24]");
  kiln_view_transpose(&v, p210, 3, &t);
  CHECK(kiln_view_flatten(&t, -1, &f, &fits) == KILN_OK && !fits, "flatten of a transpose needs a stack");
  CHECK(kiln_view_split(&v, -1, 1, 2, &sp) == KILN_OK && sp.shape[2] == 2 && sp.offset == 1 && sp.strides[2] == 1,
        "split [1,3) of the last axis: %s", vs(&sp));
  CHECK(kiln_view_gather(&v, 1, -1, &sp) == KILN_OK && sp.rank == 2 && sp.offset == 8 && sp.strides[0] == 12,
        "gather index -1 of axis 1: %s", vs(&sp));
}

static void test_reshape_of_transpose(void) {
  kiln_view v, t, r;
  bool fits;
  int64_t s234[3] = {2, 3, 4}, p201[3] = {2, 0, 1};
  kiln_view_contiguous(3, s234, &v);
  kiln_view_transpose(&v, p201, 3, &t); /* [4,2,3] st [1,12,4] */
  int64_t s46[2] = {4, 6}, st46[2] = {1, 4};
  CHECK(kiln_view_reshape(&t, 2, s46, &r, &fits) == KILN_OK && fits && strides_are(&r, 2, s46, st46, 0),
        "transpose then merge of dims that stay adjacent is one view: %s", vs(&r));
  int64_t s226[3] = {2, 2, 6}, st226[3] = {2, 1, 4};
  kiln_view r2;
  CHECK(kiln_view_reshape(&r, 3, s226, &r2, &fits) == KILN_OK && fits && strides_are(&r2, 3, s226, st226, 0),
        "splitting a transposed dim is one view: %s", vs(&r2));
  int64_t s24[1] = {24};
  CHECK(kiln_view_reshape(&t, 1, s24, &r, &fits) == KILN_OK && !fits && r.contiguous && r.shape[0] == 24,
        "flattening a transpose is not one view (out is the contiguous view to push)");

  /* as a stack: [2,3] -> T -> [6] is two views; reshape back merges to one */
  int64_t s23[2] = {2, 3}, p10[2] = {1, 0}, s6[1] = {6}, s32[2] = {3, 2};
  kiln_view_contiguous(2, s23, &v);
  kiln_views s;
  kiln_views_init(&s, &v);
  kiln_view_op o1 = op_transpose(2, p10), o2 = op_reshape(1, s6), o3 = op_reshape(2, s32), o4 = o1;
  kiln_views_push(&s, &o1);
  CHECK(kiln_views_single(&s) && !kiln_views_contiguous(&s), "transpose alone is one view");
  kiln_views_push(&s, &o2);
  CHECK(s.depth == 2, "reshape of a transpose is a stack of 2 (depth %d)", s.depth);
  static const int64_t want[6] = {0, 3, 1, 4, 2, 5};
  bool ok = true;
  for (int64_t f = 0; f < 6; f++) ok &= kiln_views_offset(&s, f, NULL) == want[f];
  CHECK(ok, "stack [2,3]^T -> [6] reads 0 3 1 4 2 5");
  kiln_views_push(&s, &o3);
  CHECK(s.depth == 1 && strides_are(kiln_views_top(&s), 2, s32, (int64_t[]){1, 3}, 0),
        "reshaping back to [3,2] merges into one view: depth %d %s", s.depth, vs(kiln_views_top(&s)));
  kiln_views_push(&s, &o4);
  CHECK(kiln_views_contiguous(&s), "transposing back gives the storage itself: %s", vs(kiln_views_top(&s)));

  /* reshape of a transposed 4-D tensor as in attention: [B,S,H,D] -> T(0,2,1,3) -> [B*H, S, D] */
  int64_t bshd[4] = {2, 5, 3, 4}, p0213[4] = {0, 2, 1, 3}, bhsd[3] = {6, 5, 4};
  kiln_view_contiguous(4, bshd, &v);
  kiln_view_transpose(&v, p0213, 4, &t);
  CHECK(kiln_view_reshape(&t, 3, bhsd, &r, &fits) == KILN_OK && !fits, "[B*H,S,D] of a head transpose is a stack");
  kiln_views_init(&s, &v);
  kiln_view_op a = op_transpose(4, p0213), b = op_reshape(3, bhsd);
  kiln_views_push(&s, &a);
  kiln_views_push(&s, &b);
  ok = s.depth == 2;
  for (int64_t f = 0; f < 120 && ok; f++) {
    int64_t bh = f / 20, si = (f / 4) % 5, di = f % 4, bi = bh / 3, hi = bh % 3;
    ok = kiln_views_offset(&s, f, NULL) == ((bi * 5 + si) * 3 + hi) * 4 + di;
  }
  CHECK(ok, "attention head stack reads the right elements");
}

static void test_negative_steps(void) {
  int64_t s10[1] = {10};
  kiln_view v, r;
  kiln_view_contiguous(1, s10, &v);
  int64_t st[1] = {8}, en[1] = {1}, stp[1] = {-3};
  CHECK(kiln_view_slice(&v, 1, st, en, NULL, stp, &r) == KILN_OK && r.shape[0] == 3 && r.offset == 8 &&
            r.strides[0] == -3,
        "[8:1:-3] is 8,5,2: %s", vs(&r));
  int64_t st2[1] = {INT64_MAX}, en2[1] = {INT64_MIN}, stp2[1] = {-1};
  CHECK(kiln_view_slice(&v, 1, st2, en2, NULL, stp2, &r) == KILN_OK && r.shape[0] == 10 && r.offset == 9 &&
            r.strides[0] == -1,
        "[::-1] via INT64_MAX/INT64_MIN reverses: %s", vs(&r));
  int64_t st3[1] = {-1}, en3[1] = {-11}, stp3[1] = {INT64_MIN};
  CHECK(kiln_view_slice(&v, 1, st3, en3, NULL, stp3, &r) == KILN_OK && r.shape[0] == 1 && r.offset == 9,
        "step INT64_MIN takes one element: %s", vs(&r));
  int64_t st4[1] = {3}, en4[1] = {3}, stp4[1] = {-1};
  CHECK(kiln_view_slice(&v, 1, st4, en4, NULL, stp4, &r) == KILN_OK && r.numel == 0, "empty negative slice");
  /* reverse twice is the identity */
  kiln_view r2;
  kiln_view_slice(&v, 1, st2, en2, NULL, stp2, &r);
  kiln_view_slice(&r, 1, st2, en2, NULL, stp2, &r2);
  CHECK(r2.contiguous && kiln_view_same_map(&r2, &v), "reversing twice is the storage: %s", vs(&r2));
  /* reshape of a reversed dim splits with negative strides */
  int64_t s25[2] = {2, 5};
  bool fits;
  CHECK(kiln_view_reshape(&r, 2, s25, &r2, &fits) == KILN_OK && fits && r2.strides[0] == -5 && r2.strides[1] == -1 &&
            r2.offset == 9,
        "reversed [10] -> [2,5]: %s", vs(&r2));
}

static void test_expand_reshape(void) {
  int64_t s31[2] = {3, 1}, s34[2] = {3, 4}, s12[1] = {12}, s322[3] = {3, 2, 2};
  kiln_view v, e, r;
  bool fits;
  kiln_view_contiguous(2, s31, &v);
  CHECK(kiln_view_expand(&v, 2, s34, &e) == KILN_OK && e.strides[0] == 1 && e.strides[1] == 0, "expand: stride 0");
  CHECK(kiln_view_reshape(&e, 3, s322, &r, &fits) == KILN_OK && fits && r.strides[0] == 1 && r.strides[1] == 0 &&
            r.strides[2] == 0,
        "expand then split the broadcast dim: %s", vs(&r));
  CHECK(kiln_view_reshape(&e, 1, s12, &r, &fits) == KILN_OK && !fits, "expand then flatten is not one view");
  kiln_views s;
  kiln_views_init(&s, &v);
  kiln_view_op a, b = op_reshape(1, s12);
  memset(&a, 0, sizeof a);
  a.kind = KILN_VOP_EXPAND, a.n = 2, a.shape[0] = 3, a.shape[1] = 4;
  kiln_views_push(&s, &a);
  kiln_views_push(&s, &b);
  bool ok = s.depth == 2;
  for (int64_t f = 0; f < 12; f++) ok &= kiln_views_offset(&s, f, NULL) == f / 4;
  CHECK(ok, "expand then flatten as a stack reads 0000 1111 2222");
  kiln_region reg;
  kiln_views_region(&s, &reg);
  CHECK(!reg.empty && reg.lo == 0 && reg.hi == 2, "region of the expanded stack is [0,2]");
  /* bidirectional: [3,4] expand [1] keeps [3,4] */
  int64_t one[1] = {1};
  CHECK(kiln_view_expand(&e, 1, one, &r) == KILN_OK && r.rank == 2 && r.shape[1] == 4, "expand to [1] is a no-op");
  /* scalar to [2,3] */
  kiln_view sc;
  int64_t s23[2] = {2, 3};
  kiln_view_contiguous(0, NULL, &sc);
  CHECK(kiln_view_expand(&sc, 2, s23, &r) == KILN_OK && r.numel == 6 && r.strides[0] == 0 && r.strides[1] == 0,
        "expand a scalar");
}

static void test_squeeze_roundtrip(void) {
  int bad = 0;
  for (int run = 0; run < 500; run++) {
    kiln_view base, u, q;
    raw_view w;
    int64_t ss;
    random_base(&base, &w, &ss);
    if (base.rank >= KILN_MAX_RANK) continue;
    int n = (int)rnd(1, KILN_MAX_RANK - base.rank), o = base.rank + n;
    int64_t axes[KILN_MAX_RANK];
    bool used[KILN_MAX_RANK] = {false};
    for (int t = 0; t < n; t++) {
      int a;
      do a = (int)rnd(0, o - 1);
      while (used[a]);
      used[a] = true;
      axes[t] = rnd(0, 1) ? a : a - o;
    }
    if (kiln_view_unsqueeze(&base, n, axes, &u) != KILN_OK || kiln_view_squeeze(&u, n, axes, &q) != KILN_OK ||
        memcmp(&q, &base, sizeof q) != 0 || !kiln_view_same_map(&q, &base))
      bad++;
  }
  CHECK(bad == 0, "%d unsqueeze/squeeze round trips changed the view", bad);
  int64_t s1311[4] = {1, 3, 1, 1};
  kiln_view v, q;
  kiln_view_contiguous(4, s1311, &v);
  CHECK(kiln_view_squeeze(&v, 0, NULL, &q) == KILN_OK && q.rank == 1 && q.shape[0] == 3 && q.contiguous,
        "squeeze with no axes drops every 1");
}

/* compact forms and same_map against brute force on small random views */
static void test_same_map(void) {
  int wrong = 0, unsound = 0, agree = 0, compact_bad = 0;
  for (int run = 0; run < 20000; run++) {
    int rank = (int)rnd(1, 3);
    int64_t sa[KILN_MAX_RANK], sb[KILN_MAX_RANK], ta[KILN_MAX_RANK], tb[KILN_MAX_RANK], lo[KILN_MAX_RANK],
        hi[KILN_MAX_RANK];
    for (int d = 0; d < rank; d++) sa[d] = rnd(1, 3), ta[d] = rnd(-2, 2), tb[d] = rnd(-2, 2);
    /* b: a random shape with the same numel */
    int rb = random_factor(prod(rank, sa), 3, sb);
    if (rb != rank || memcmp(sa, sb, sizeof(int64_t) * (size_t)rank) != 0)
      for (int d = 0; d < rank; d++) sb[d] = sa[d];
    bool masked = rnd(0, 3) == 0;
    for (int d = 0; d < rank; d++) lo[d] = rnd(0, 1), hi[d] = sa[d] - rnd(0, 1);
    kiln_view a, b, ca;
    kiln_view_make(rank, sa, ta, rnd(0, 2), masked ? lo : NULL, masked ? hi : NULL, &a);
    kiln_view_make(rank, sb, tb, rnd(0, 2), masked ? lo : NULL, masked ? hi : NULL, &b);
    bool same = true;
    for (int64_t f = 0; f < a.numel; f++) {
      bool va, vb;
      int64_t oa = kiln_view_offset(&a, f, &va), ob = kiln_view_offset(&b, f, &vb);
      same &= va == vb && oa == ob;
    }
    bool got = kiln_view_same_map(&a, &b);
    if (got && !same) unsound++;
    if (!masked && got != same) wrong++;
    agree += same;
    kiln_view_compact(&a, &ca);
    for (int64_t f = 0; f < a.numel; f++) {
      bool va, vc;
      int64_t oa = kiln_view_offset(&a, f, &va), oc = kiln_view_offset(&ca, f, &vc);
      if (va != vc || (va && oa != oc)) {
        compact_bad++;
        break;
      }
    }
  }
  CHECK(unsound == 0, "%d different maps reported the same", unsound);
  CHECK(wrong == 0, "%d unmasked same-map answers wrong", wrong);
  CHECK(agree > 200, "too few equal pairs to test exactness (%d)", agree);
  CHECK(compact_bad == 0, "%d compact forms changed the map", compact_bad);
}

static void test_masks(void) {
  /* pad [4] by 1 on each side, reshape to [2,3]: the mask stays a box */
  int64_t s4[1] = {4}, pads[2] = {1, 1}, s23[2] = {2, 3}, s32[2] = {3, 2};
  kiln_view v, p, r;
  bool fits;
  kiln_view_contiguous(1, s4, &v);
  CHECK(kiln_view_pad(&v, pads, &p) == KILN_OK && p.has_mask && p.shape[0] == 6 && p.offset == -1, "pad: %s", vs(&p));
  bool valid;
  CHECK(kiln_view_offset(&p, 0, &valid) == -1 && !valid && kiln_view_offset(&p, 1, &valid) == 0 && valid,
        "padded element 0 is masked, element 1 reads 0");
  CHECK(kiln_view_reshape(&p, 2, s23, &r, &fits) == KILN_OK && !fits, "[6] pad-mask [1,5) -> [2,3] is not a box");
  CHECK(kiln_view_reshape(&p, 2, s32, &r, &fits) == KILN_OK && !fits, "[6] pad-mask [1,5) -> [3,2] is not a box");
  /* a mask aligned to rows splits into a box */
  int64_t s8[1] = {8}, pads2[2] = {4, 0}, s34[2] = {3, 4};
  kiln_view_contiguous(1, s8, &v);
  kiln_view_pad(&v, pads2, &p);
  CHECK(kiln_view_reshape(&p, 2, s34, &r, &fits) == KILN_OK && fits && r.mask_lo[0] == 1 && r.mask_hi[0] == 3 &&
            r.mask_lo[1] == 0 && r.mask_hi[1] == 4,
        "row-aligned pad mask splits: %s", vs(&r));
  /* gather of a padded row reads nothing */
  kiln_view g;
  kiln_region reg;
  CHECK(kiln_view_gather(&r, 0, 0, &g) == KILN_OK && g.all_masked, "gathering a pad row gives an all-masked view");
  kiln_view_region(&g, &reg);
  CHECK(reg.empty && reg.exact, "an all-masked view touches nothing");
  kiln_view_region(&r, &reg);
  CHECK(!reg.empty && reg.lo == 0 && reg.hi == 7 && reg.rank == 1 && reg.shape[0] == 8,
        "masked region is [0,7]: %lld..%lld", (long long)reg.lo, (long long)reg.hi);
}

/* regions: the classic disjoint halves */
static void test_regions(void) {
  int64_t s46[2] = {4, 6};
  kiln_view v, even, odd;
  kiln_view_contiguous(2, s46, &v);
  int64_t st0[1] = {0}, st1[1] = {1}, en[1] = {INT64_MAX}, ax[1] = {1}, two[1] = {2};
  kiln_view_slice(&v, 1, st0, en, ax, two, &even);
  kiln_view_slice(&v, 1, st1, en, ax, two, &odd);
  kiln_region re, ro, rv;
  kiln_view_region(&even, &re);
  kiln_view_region(&odd, &ro);
  kiln_view_region(&v, &rv);
  CHECK(re.exact && re.lo == 0 && re.hi == 22 && re.rank == 1 && re.strides[0] == 2 && re.shape[0] == 12,
        "even columns of [4,6] are a stride-2 box of 12");
  CHECK(!kiln_region_may_overlap(&re, &ro), "even and odd columns are disjoint");
  CHECK(kiln_region_may_overlap(&re, &rv) && kiln_region_may_overlap(&ro, &rv), "each overlaps the whole");
  CHECK(rv.rank == 1 && rv.shape[0] == 24 && rv.strides[0] == 1, "the whole is one run");
  kiln_view top, bot;
  int64_t s2[1] = {2}, e2[1] = {4}, ax0[1] = {0};
  kiln_view_slice(&v, 1, st0, s2, ax0, NULL, &top);
  kiln_view_slice(&v, 1, s2, e2, ax0, NULL, &bot);
  kiln_view_region(&top, &re);
  kiln_view_region(&bot, &ro);
  CHECK(!kiln_region_may_overlap(&re, &ro) && re.hi == 11 && ro.lo == 12, "row halves are disjoint");
}

static bool fails_with(kiln_status got, kiln_status want, const char *word) {
  return got == want && strstr(kiln_last_error(), word) != NULL;
}

static void test_errors(void) {
  int64_t s234[3] = {2, 3, 4}, out_of_range[3] = {0, 1, 3}, dup[3] = {0, 1, 1};
  kiln_view v, r;
  bool fits;
  kiln_view_contiguous(3, s234, &v);
  r = v;
  CHECK(fails_with(kiln_view_transpose(&v, dup, 3, &r), KILN_E_MODEL, "repeats"), "dup perm: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_transpose(&v, out_of_range, 3, &r), KILN_E_MODEL, "perm[2] = 3"), "bad perm: %s",
        kiln_last_error());
  CHECK(fails_with(kiln_view_transpose(&v, dup, 2, &r), KILN_E_MODEL, "2 entries"), "short perm: %s",
        kiln_last_error());
  CHECK(memcmp(&r, &v, sizeof r) == 0, "a failed op leaves out unchanged");
  CHECK(fails_with(kiln_view_gather(&v, 3, 0, &r), KILN_E_MODEL, "axis 3"), "gather axis: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_gather(&v, -4, 0, &r), KILN_E_MODEL, "axis -4"), "gather axis: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_gather(&v, 1, 3, &r), KILN_E_MODEL, "index 3"), "gather index: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_gather(&v, 1, -4, &r), KILN_E_MODEL, "index -4"), "gather index: %s", kiln_last_error());
  int64_t st[1] = {0}, en[1] = {1}, ax[1] = {5}, zero[1] = {0};
  CHECK(fails_with(kiln_view_slice(&v, 1, st, en, ax, NULL, &r), KILN_E_MODEL, "axis 5"), "slice axis: %s",
        kiln_last_error());
  CHECK(fails_with(kiln_view_slice(&v, 1, st, en, NULL, zero, &r), KILN_E_MODEL, "step 0"), "slice step: %s",
        kiln_last_error());
  int64_t st2[2] = {0, 0}, en2[2] = {1, 1}, ax2[2] = {1, -2};
  CHECK(fails_with(kiln_view_slice(&v, 2, st2, en2, ax2, NULL, &r), KILN_E_MODEL, "twice"), "slice dup: %s",
        kiln_last_error());
  int64_t sq[1] = {1};
  CHECK(fails_with(kiln_view_squeeze(&v, 1, sq, &r), KILN_E_MODEL, "size 3"), "squeeze non-1: %s", kiln_last_error());
  int64_t s25[2] = {2, 5}, s2m[3] = {2, -1, 5}, s2mm[3] = {-1, -1, 6};
  CHECK(fails_with(kiln_view_reshape(&v, 2, s25, &r, &fits), KILN_E_MISMATCH_SHAPE, "(24 elements) to [2,5]"),
        "reshape size: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_reshape(&v, 3, s2m, &r, &fits), KILN_E_MISMATCH_SHAPE, "-1"), "reshape -1: %s",
        kiln_last_error());
  CHECK(fails_with(kiln_view_reshape(&v, 3, s2mm, &r, &fits), KILN_E_MODEL, "dim 1 = -1"), "two -1: %s",
        kiln_last_error());
  int64_t ones[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  CHECK(fails_with(kiln_view_reshape(&v, 9, ones, &r, &fits), KILN_E_UNSUPPORTED_SHAPE, "KILN_MAX_RANK"),
        "reshape rank 9: %s", kiln_last_error());
  int64_t ax6[6] = {0, 1, 2, 3, 4, 5};
  CHECK(fails_with(kiln_view_unsqueeze(&v, 6, ax6, &r), KILN_E_UNSUPPORTED_SHAPE, "rank 9"), "unsqueeze rank: %s",
        kiln_last_error());
  int64_t u2[2] = {1, -4};
  CHECK(fails_with(kiln_view_unsqueeze(&v, 2, u2, &r), KILN_E_MODEL, "twice"), "unsqueeze dup: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_expand(&v, 9, ones, &r), KILN_E_UNSUPPORTED_SHAPE, "KILN_MAX_RANK"), "expand rank: %s",
        kiln_last_error());
  int64_t e35[2] = {3, 5};
  CHECK(fails_with(kiln_view_expand(&v, 2, e35, &r), KILN_E_MISMATCH_SHAPE, "4 vs 5"), "expand: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_make(9, ones, NULL, 0, NULL, NULL, &r), KILN_E_UNSUPPORTED_SHAPE, "rank 9"),
        "make rank: %s", kiln_last_error());
  int64_t neg[1] = {-1};
  CHECK(kiln_view_make(1, neg, NULL, 0, NULL, NULL, &r) == KILN_E_INVALID_SHAPE, "make negative dim");
  int64_t huge_st[1] = {(int64_t)1 << 50}, s3[1] = {3};
  CHECK(fails_with(kiln_view_make(1, s3, huge_st, 0, NULL, NULL, &r), KILN_E_UNSUPPORTED_SHAPE, "reach"),
        "make huge strides: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_flatten(&v, 4, &r, &fits), KILN_E_MODEL, "axis 4"), "flatten axis: %s", kiln_last_error());
  CHECK(fails_with(kiln_view_split(&v, 2, 3, 2, &r), KILN_E_MODEL, "outside"), "split range: %s", kiln_last_error());
  int64_t pads[6] = {0, -2, 0, 0, -2, 0};
  CHECK(fails_with(kiln_view_pad(&v, pads, &r), KILN_E_MODEL, "remove more"), "pad: %s", kiln_last_error());
  /* a stack too deep fails and is left as it was */
  kiln_views s;
  kiln_view_contiguous(3, s234, &v);
  kiln_views_init(&s, &v);
  int64_t p10[3] = {1, 0, 2}, flat[1] = {24};
  kiln_status st_ = KILN_OK;
  int pushes = 0;
  while (st_ == KILN_OK && pushes < 40) {
    kiln_view_op t = op_transpose(3, p10), f = op_reshape(1, flat), b = op_reshape(3, s234);
    kiln_views_push(&s, &t);
    st_ = kiln_views_push(&s, &f);
    if (st_ == KILN_OK) st_ = kiln_views_push(&s, &b);
    pushes++;
  }
  CHECK(fails_with(st_, KILN_E_UNSUPPORTED_SHAPE, "materialise") && s.depth == KILN_VIEWS_MAX_DEPTH,
        "deep stack: %s (depth %d)", kiln_last_error(), s.depth);
}

int main(int argc, char **argv) {
  if (argc > 1) rng = strtoull(argv[1], NULL, 0) * 0x9e3779b97f4a7c15ull | 1;
  for (int64_t k = 0; k < 1024; k++) storage[k] = k;
  test_make();
  test_reshape_of_transpose();
  test_negative_steps();
  test_expand_reshape();
  test_squeeze_roundtrip();
  test_same_map();
  test_masks();
  test_regions();
  test_errors();
  test_random(20000);
  printf(
      "random sequences: %lld flat indices compared; stack depth 1:%d 2:%d 3:%d 4+:%d; %d non-fitting reshapes; %d "
      "masked; %d overlap "
      "over-approximations; %d stacks strided by coincidence\n",
      (long long)compared, depth_hist[1], depth_hist[2], depth_hist[3],
      depth_hist[4] + depth_hist[5] + depth_hist[6] + depth_hist[7] + depth_hist[8], nonfit_reshapes, masked_runs,
      overlap_checks, missed_merges);
  printf("unit_views: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
