/* ir/views: the pure view algebra. Every op builds a raw view and passes it
 * through finish(), the one normaliser; merging two views (and so reshape)
 * is one function, kiln_view_merge. */
#include "ir/views.h"

#include <stdio.h>
#include <string.h>

/* ---- checked arithmetic: false on int64 overflow ---- */

static bool mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
static bool add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static int64_t ceil_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q;
}
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t abs64(int64_t a) { return a < 0 ? -a : a; }

static const char *shape_str(const kiln_view *v, char *buf, int size) {
  return kiln_shape_str(v->rank, v->shape, buf, size);
}

/* Normalises an axis of an op: [-rank, rank) -> [0, rank). */
static kiln_status op_axis(const char *op, int64_t axis, int rank, int *out) {
  if (axis < -rank || axis >= rank)
    return kiln_fail(KILN_E_MODEL, "%s: axis %lld is out of range for rank %d", op, (long long)axis, rank);
  *out = (int)(axis < 0 ? axis + rank : axis);
  return KILN_OK;
}

/* ---- the normaliser ---- */

/* Completes a raw view (rank, shape, strides, offset, has_mask + masks,
 * all_masked) into the normal form kiln_view_make promises. */
static kiln_status finish(kiln_view *v) {
  if (v->rank < 0 || v->rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "view: rank %d exceeds KILN_MAX_RANK (%d)", v->rank, KILN_MAX_RANK);
  kiln_status st = kiln_shape_numel(v->rank, v->shape, &v->numel);
  if (st != KILN_OK) return st;
  for (int d = v->rank; d < KILN_MAX_RANK; d++) v->shape[d] = v->strides[d] = v->mask_lo[d] = v->mask_hi[d] = 0;
  if (!v->has_mask) v->all_masked = false;
  if (v->has_mask && !v->all_masked)
    for (int d = 0; d < v->rank; d++) {
      v->mask_lo[d] = max64(v->mask_lo[d], 0);
      v->mask_hi[d] = min64(v->mask_hi[d], v->shape[d]);
      if (v->mask_lo[d] >= v->mask_hi[d]) v->all_masked = true;
    }
  if (v->numel == 0) {
    v->has_mask = v->all_masked = false;
    v->offset = 0;
    for (int d = 0; d < v->rank; d++) v->strides[d] = 0, v->mask_lo[d] = 0, v->mask_hi[d] = v->shape[d];
  } else if (v->all_masked) {
    v->has_mask = true;
    v->offset = 0;
    for (int d = 0; d < v->rank; d++) v->strides[d] = v->mask_lo[d] = v->mask_hi[d] = 0;
  } else {
    bool full = true;
    for (int d = 0; d < v->rank; d++) {
      if (v->has_mask && v->mask_hi[d] - v->mask_lo[d] == 1 && v->strides[d] != 0) {
        int64_t t;
        if (!mul_ok(v->mask_lo[d], v->strides[d], &t) || !add_ok(v->offset, t, &v->offset))
          return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "view: offset overflows");
        v->strides[d] = 0;
      }
      if (v->shape[d] == 1) v->strides[d] = 0;
      if (v->has_mask && (v->mask_lo[d] != 0 || v->mask_hi[d] != v->shape[d])) full = false;
    }
    if (full) v->has_mask = false;
    if (!v->has_mask)
      for (int d = 0; d < v->rank; d++) v->mask_lo[d] = 0, v->mask_hi[d] = v->shape[d];
  }
  int64_t reach = 0;
  for (int d = 0; d < v->rank; d++) {
    int64_t t;
    if (v->strides[d] == 0) continue;
    if (v->strides[d] < -KILN_VIEW_MAX_SPAN || v->strides[d] > KILN_VIEW_MAX_SPAN ||
        !mul_ok(abs64(v->strides[d]), v->shape[d] - 1, &t) || !add_ok(reach, t, &reach) || reach > KILN_VIEW_MAX_SPAN) {
      char sb[160];
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "view: strides of shape %s reach beyond %lld elements",
                       shape_str(v, sb, sizeof sb), (long long)KILN_VIEW_MAX_SPAN);
    }
  }
  if (v->offset < -KILN_VIEW_MAX_SPAN || v->offset > KILN_VIEW_MAX_SPAN)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "view: offset %lld is beyond %lld elements", (long long)v->offset,
                     (long long)KILN_VIEW_MAX_SPAN);
  v->contiguous = !v->has_mask && v->offset == 0;
  int64_t run = 1;
  for (int d = v->rank - 1; d >= 0 && v->contiguous; d--) {
    if (v->shape[d] != 1 && v->strides[d] != run) v->contiguous = false;
    run *= v->shape[d];
  }
  if (v->numel == 0) v->contiguous = true;
  return KILN_OK;
}

kiln_status kiln_view_make(int rank, const int64_t *shape, const int64_t *strides, int64_t offset,
                           const int64_t *mask_lo, const int64_t *mask_hi, kiln_view *out) {
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "view: rank %d exceeds KILN_MAX_RANK (%d)", rank, KILN_MAX_RANK);
  if ((mask_lo == NULL) != (mask_hi == NULL))
    return kiln_fail(KILN_E_INTERNAL, "view: mask needs both bounds or neither");
  kiln_view v;
  memset(&v, 0, sizeof v);
  v.rank = rank;
  for (int d = 0; d < rank; d++) v.shape[d] = shape[d];
  kiln_status st = kiln_shape_numel(rank, v.shape, &v.numel);
  if (st != KILN_OK) return st;
  if (strides) {
    for (int d = 0; d < rank; d++) v.strides[d] = strides[d];
  } else {
    kiln_strides(rank, v.shape, v.strides);
  }
  v.offset = offset;
  v.has_mask = mask_lo != NULL;
  for (int d = 0; d < rank; d++) {
    v.mask_lo[d] = mask_lo ? mask_lo[d] : 0;
    v.mask_hi[d] = mask_hi ? mask_hi[d] : v.shape[d];
  }
  st = finish(&v);
  if (st == KILN_OK) *out = v;
  return st;
}

kiln_status kiln_view_contiguous(int rank, const int64_t *shape, kiln_view *out) {
  return kiln_view_make(rank, shape, NULL, 0, NULL, NULL, out);
}

/* ---- indexing ---- */

int64_t kiln_view_offset_at(const kiln_view *v, const int64_t *idx, bool *valid) {
  if (v->all_masked) {
    if (valid) *valid = false;
    return -1;
  }
  int64_t off = v->offset;
  for (int d = 0; d < v->rank; d++) {
    if (idx[d] < v->mask_lo[d] || idx[d] >= v->mask_hi[d]) {
      if (valid) *valid = false;
      return -1;
    }
    off += idx[d] * v->strides[d];
  }
  if (valid) *valid = true;
  return off;
}

int64_t kiln_view_offset(const kiln_view *v, int64_t flat, bool *valid) {
  int64_t idx[KILN_MAX_RANK];
  for (int d = v->rank - 1; d >= 0; d--) {
    idx[d] = flat % v->shape[d];
    flat /= v->shape[d];
  }
  return kiln_view_offset_at(v, idx, valid);
}

/* ---- joining neighbouring dims ---- */

typedef struct dim_t {
  int64_t n, st, lo, hi; /* size, stride, valid range [lo, hi) */
} dim_t;

/* Joins dim o (outer) and dim i (inner) into one dim of size o.n * i.n
 * with the same offsets at every valid index, up to *doff added to the
 * view's offset. False when the valid set is not a range or the strides
 * do not line up. */
static bool join_dims(dim_t o, dim_t i, dim_t *out, int64_t *doff) {
  *doff = 0;
  if (i.n == 1) {
    *out = o;
    return true;
  }
  if (o.n == 1) {
    *out = i;
    return true;
  }
  int64_t lo, hi;
  if (i.lo == 0 && i.hi == i.n)
    lo = o.lo * i.n, hi = o.hi * i.n;
  else if (o.hi - o.lo == 1)
    lo = o.lo * i.n + i.lo, hi = o.lo * i.n + i.hi;
  else
    return false;
  int64_t st = i.hi - i.lo >= 2 ? i.st : 0;
  int64_t run;
  if (!mul_ok(i.st, i.n, &run)) return false;
  if (o.hi - o.lo >= 2 && i.hi - i.lo >= 2 && o.st != run) return false;
  /* the first valid element keeps its offset: o.st*o.lo + i.st*i.lo == st*lo + doff */
  int64_t a, b, c;
  if (!mul_ok(o.st, o.lo, &a) || !mul_ok(i.st, i.lo, &b) || !mul_ok(st, lo, &c)) return false;
  *doff = a + b - c;
  out->n = o.n * i.n, out->st = st, out->lo = lo, out->hi = hi;
  return true;
}

static dim_t dim_of(const kiln_view *v, int d) {
  dim_t x = {v->shape[d], v->strides[d], v->mask_lo[d], v->mask_hi[d]};
  return x;
}

void kiln_view_compact(const kiln_view *v, kiln_view *out) {
  kiln_view c;
  memset(&c, 0, sizeof c);
  c.has_mask = v->has_mask;
  c.all_masked = v->all_masked;
  c.offset = v->offset;
  if (v->numel == 0 || v->all_masked) {
    c.rank = 1;
    c.shape[0] = v->numel;
    c.mask_hi[0] = v->numel;
  } else {
    for (int d = 0; d < v->rank; d++) {
      if (v->shape[d] == 1) continue;
      dim_t x = dim_of(v, d), j;
      int64_t doff;
      if (c.rank > 0 && join_dims(dim_of(&c, c.rank - 1), x, &j, &doff)) {
        c.offset += doff;
        c.rank--;
        x = j;
      }
      c.shape[c.rank] = x.n, c.strides[c.rank] = x.st, c.mask_lo[c.rank] = x.lo, c.mask_hi[c.rank] = x.hi;
      c.rank++;
    }
  }
  /* cannot fail: same numel, offsets of valid elements unchanged */
  if (finish(&c) != KILN_OK) c = *v;
  *out = c;
}

bool kiln_view_same_map(const kiln_view *a, const kiln_view *b) {
  if (a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->shape[d] != b->shape[d]) return false;
  kiln_view ca, cb;
  kiln_view_compact(a, &ca);
  kiln_view_compact(b, &cb);
  if (ca.rank != cb.rank || ca.offset != cb.offset || ca.has_mask != cb.has_mask || ca.all_masked != cb.all_masked)
    return false;
  for (int d = 0; d < ca.rank; d++)
    if (ca.shape[d] != cb.shape[d] || ca.strides[d] != cb.strides[d] || ca.mask_lo[d] != cb.mask_lo[d] ||
        ca.mask_hi[d] != cb.mask_hi[d])
      return false;
  return true;
}

const char *kiln_view_str(const kiln_view *v, char *buf, int size) {
  char s1[160], s2[160];
  int k = snprintf(buf, (size_t)size, "%s st %s off %lld", kiln_shape_str(v->rank, v->shape, s1, sizeof s1),
                   kiln_shape_str(v->rank, v->strides, s2, sizeof s2), (long long)v->offset);
  if (v->all_masked && k < size)
    k += snprintf(buf + k, (size_t)(size - k), " all masked");
  else if (v->has_mask)
    for (int d = 0; d < v->rank && k < size; d++)
      k += snprintf(buf + k, (size_t)(size - k), "%s[%lld,%lld)", d ? "x" : " mask ", (long long)v->mask_lo[d],
                    (long long)v->mask_hi[d]);
  return buf;
}

/* ---- composition ---- */

/* min and max of c + sum(coef[k] * i_k) over lo[k] <= i_k < hi[k]. */
static bool lin_range(int n, const int64_t *coef, const int64_t *lo, const int64_t *hi, int64_t c, int64_t *mn,
                      int64_t *mx) {
  int64_t a = c, b = c;
  for (int k = 0; k < n; k++) {
    if (coef[k] == 0) continue;
    int64_t x, y;
    if (!mul_ok(coef[k], lo[k], &x) || !mul_ok(coef[k], hi[k] - 1, &y)) return false;
    if (!add_ok(a, min64(x, y), &a) || !add_ok(b, max64(x, y), &b)) return false;
  }
  *mn = a, *mx = b;
  return true;
}

/* Narrows the box lo[k] <= i_k < hi[k] to the points where
 * L <= c + sum(a[t] * i_{var[t]}) < H, when those points form a box.
 * Returns 0 (narrowed), 1 (no point qualifies) or -1 (not a box). */
static int constrain(int nt, const int64_t *a_in, const int *var_in, int64_t c, int64_t L, int64_t H, int64_t *lo,
                     int64_t *hi) {
  int64_t a[KILN_MAX_RANK];
  int var[KILN_MAX_RANK];
  for (int t = 0; t < nt; t++) { /* by |a| descending: the coarse variable first */
    int u = t;
    while (u > 0 && abs64(a[u - 1]) < abs64(a_in[t])) a[u] = a[u - 1], var[u] = var[u - 1], u--;
    a[u] = a_in[t], var[u] = var_in[t];
  }
  for (int t = 0; t < nt; t++) {
    int64_t rmin, rmax, rc[KILN_MAX_RANK], rlo[KILN_MAX_RANK], rhi[KILN_MAX_RANK];
    for (int u = t + 1; u < nt; u++) rc[u - t - 1] = a[u], rlo[u - t - 1] = lo[var[u]], rhi[u - t - 1] = hi[var[u]];
    if (!lin_range(nt - t - 1, rc, rlo, rhi, 0, &rmin, &rmax)) return -1;
    int k = var[t];
    /* a*i in [x, y] <=> i in the range below (a != 0) */
    int64_t f0, f1, n0, n1;
    int64_t fx = L - rmin - c, fy = H - 1 - rmax - c, nx = L - rmax - c, ny = H - 1 - rmin - c;
    if (a[t] > 0) {
      f0 = ceil_div(fx, a[t]), f1 = floor_div(fy, a[t]);
      n0 = ceil_div(nx, a[t]), n1 = floor_div(ny, a[t]);
    } else {
      f0 = ceil_div(fy, a[t]), f1 = floor_div(fx, a[t]);
      n0 = ceil_div(ny, a[t]), n1 = floor_div(nx, a[t]);
    }
    f0 = max64(f0, lo[k]), f1 = min64(f1, hi[k] - 1);
    n0 = max64(n0, lo[k]), n1 = min64(n1, hi[k] - 1);
    if (n0 > n1) return 1;
    if (f0 <= f1) {
      if (f0 != n0 || f1 != n1) return -1;
      lo[k] = f0, hi[k] = f1 + 1;
      return 0;
    }
    if (n0 != n1) return -1;
    lo[k] = n0, hi[k] = n0 + 1;
    int64_t p;
    if (!mul_ok(a[t], n0, &p) || !add_ok(c, p, &c)) return -1;
  }
  return (c >= L && c < H) ? 0 : 1;
}

static void all_masked_view(const kiln_view *shape_of, kiln_view *out) {
  kiln_view v;
  memset(&v, 0, sizeof v);
  v.rank = shape_of->rank;
  for (int d = 0; d < v.rank; d++) v.shape[d] = shape_of->shape[d];
  v.has_mask = v.all_masked = true;
  if (finish(&v) == KILN_OK) *out = v;
}

bool kiln_view_merge(const kiln_view *lower, const kiln_view *upper, kiln_view *out) {
  if (upper->numel == 0 || upper->all_masked || lower->all_masked) {
    kiln_view v = *upper;
    if (upper->numel != 0) all_masked_view(upper, &v);
    *out = v;
    return true;
  }
  if (lower->numel == 0) return false; /* upper reads elements lower does not have */
  if (upper->contiguous && upper->rank == lower->rank && memcmp(upper->shape, lower->shape, sizeof upper->shape) == 0) {
    *out = *lower;
    return true;
  }
  kiln_view L = *lower;
  if (L.rank == 0) L.rank = 1, L.shape[0] = 1, L.strides[0] = 0, L.mask_lo[0] = 0, L.mask_hi[0] = 1;
  const int nk = upper->rank;
  int64_t blo[KILN_MAX_RANK], bhi[KILN_MAX_RANK];
  for (int k = 0; k < nk; k++) blo[k] = upper->mask_lo[k], bhi[k] = upper->mask_hi[k];
  for (;;) {
    const int nd = L.rank;
    int64_t R[KILN_MAX_RANK], origin[KILN_MAX_RANK], delta[KILN_MAX_RANK][KILN_MAX_RANK];
    kiln_strides(nd, L.shape, R);
    /* digits of x in L's shape; the outermost one unbounded (floor) */
    int64_t pts[KILN_MAX_RANK + 1];
    pts[0] = upper->offset;
    for (int k = 0; k < nk; k++)
      if (!add_ok(upper->offset, upper->strides[k], &pts[k + 1])) return false;
    for (int p = 0; p <= nk; p++) {
      int64_t x = pts[p], *dig = p == 0 ? origin : delta[p - 1];
      dig[0] = floor_div(x, R[0]);
      x -= dig[0] * R[0];
      for (int d = 1; d < nd; d++) dig[d] = x / R[d], x %= R[d];
      if (p > 0)
        for (int d = 0; d < nd; d++) dig[d] -= origin[d];
    }
    for (int k = 0; k < nk; k++)
      if (upper->strides[k] == 0)
        for (int d = 0; d < nd; d++) delta[k][d] = 0;
    /* group digits from the innermost until the group's value stays within
     * the group's size over the valid box: then it is exact (no carries) */
    int gstart[KILN_MAX_RANK], ng = 0, gend = nd;
    int64_t gc = 0, gsize = 1, gcoef[KILN_MAX_RANK] = {0};
    for (int d = nd - 1; d >= 0; d--) {
      int64_t t;
      if (!mul_ok(origin[d], gsize, &t) || !add_ok(gc, t, &gc)) return false;
      for (int k = 0; k < nk; k++)
        if (!mul_ok(delta[k][d], gsize, &t) || !add_ok(gcoef[k], t, &gcoef[k])) return false;
      gsize *= L.shape[d];
      int64_t mn, mx;
      if (!lin_range(nk, gcoef, blo, bhi, gc, &mn, &mx)) return false;
      if (mn >= 0 && mx < gsize) {
        gstart[ng++] = d;
        gend = d;
        gc = 0, gsize = 1;
        for (int k = 0; k < nk; k++) gcoef[k] = 0;
      }
    }
    if (gend != 0) return false;
    if (ng < nd) { /* coarsen L: join the dims of each group, then retry */
      kiln_view C = L;
      C.rank = ng;
      int end = nd;
      for (int g = 0; g < ng; g++) {
        int s = gstart[g];
        dim_t acc = dim_of(&L, end - 1);
        for (int d = end - 2; d >= s; d--) {
          int64_t doff;
          if (!join_dims(dim_of(&L, d), acc, &acc, &doff) || !add_ok(C.offset, doff, &C.offset)) return false;
        }
        int cd = ng - 1 - g;
        C.shape[cd] = acc.n, C.strides[cd] = acc.st, C.mask_lo[cd] = acc.lo, C.mask_hi[cd] = acc.hi;
        end = s;
      }
      if (finish(&C) != KILN_OK) return false;
      if (C.all_masked) {
        all_masked_view(upper, out);
        return true;
      }
      L = C;
      continue;
    }
    /* every digit is affine in the upper index: compose */
    kiln_view v;
    memset(&v, 0, sizeof v);
    v.rank = nk;
    v.offset = L.offset;
    for (int d = 0; d < nd; d++) {
      int64_t t;
      if (!mul_ok(origin[d], L.strides[d], &t) || !add_ok(v.offset, t, &v.offset)) return false;
    }
    for (int k = 0; k < nk; k++) {
      v.shape[k] = upper->shape[k];
      v.mask_lo[k] = blo[k], v.mask_hi[k] = bhi[k];
      for (int d = 0; d < nd; d++) {
        int64_t t;
        if (!mul_ok(delta[k][d], L.strides[d], &t) || !add_ok(v.strides[k], t, &v.strides[k])) return false;
      }
    }
    v.has_mask = upper->has_mask;
    if (L.has_mask)
      for (int d = 0; d < nd; d++) {
        if (L.mask_lo[d] == 0 && L.mask_hi[d] == L.shape[d]) continue;
        int64_t a[KILN_MAX_RANK];
        int var[KILN_MAX_RANK], nt = 0;
        for (int k = 0; k < nk; k++)
          if (delta[k][d] != 0 && upper->shape[k] > 1) a[nt] = delta[k][d], var[nt++] = k;
        int r = constrain(nt, a, var, origin[d], L.mask_lo[d], L.mask_hi[d], v.mask_lo, v.mask_hi);
        if (r < 0) return false;
        v.has_mask = true;
        if (r == 1) {
          all_masked_view(upper, out);
          return true;
        }
      }
    if (finish(&v) != KILN_OK) return false;
    *out = v;
    return true;
  }
}

/* ---- movement ops ---- */

kiln_status kiln_view_reshape(const kiln_view *v, int rank, const int64_t *shape, kiln_view *out, bool *fits) {
  char sa[160], sb[160];
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "reshape: target rank %d exceeds KILN_MAX_RANK (%d)", rank,
                     KILN_MAX_RANK);
  int64_t dims[KILN_MAX_RANK], known = 1;
  int infer = -1;
  for (int d = 0; d < rank; d++) {
    dims[d] = shape[d];
    if (shape[d] == -1 && infer < 0) {
      infer = d;
      continue;
    }
    if (shape[d] < 0)
      return kiln_fail(KILN_E_MODEL, "reshape: target %s has dim %d = %lld", kiln_shape_str(rank, shape, sa, sizeof sa),
                       d, (long long)shape[d]);
    if (!mul_ok(known, shape[d], &known) || known > KILN_MAX_NUMEL) known = KILN_MAX_NUMEL + 1;
  }
  if (infer >= 0) {
    if (known == 0 || v->numel % known != 0)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "reshape: cannot infer the -1 of %s from %s (%lld elements)",
                       kiln_shape_str(rank, shape, sa, sizeof sa), shape_str(v, sb, sizeof sb), (long long)v->numel);
    dims[infer] = v->numel / known;
    known = v->numel;
  }
  if (known != v->numel)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "reshape: cannot reshape %s (%lld elements) to %s",
                     shape_str(v, sb, sizeof sb), (long long)v->numel, kiln_shape_str(rank, shape, sa, sizeof sa));
  kiln_view upper, r;
  kiln_status st = kiln_view_contiguous(rank, dims, &upper);
  if (st != KILN_OK) return st;
  bool ok = true;
  if (v->contiguous)
    r = upper;
  else
    ok = kiln_view_merge(v, &upper, &r);
  *fits = ok;
  *out = ok ? r : upper;
  return KILN_OK;
}

kiln_status kiln_view_flatten(const kiln_view *v, int64_t axis, kiln_view *out, bool *fits) {
  if (axis < -v->rank || axis > v->rank)
    return kiln_fail(KILN_E_MODEL, "flatten: axis %lld is out of range for rank %d", (long long)axis, v->rank);
  int a = (int)(axis < 0 ? axis + v->rank : axis);
  int64_t dims[2] = {1, 1};
  for (int d = 0; d < v->rank; d++) dims[d < a ? 0 : 1] *= v->shape[d];
  return kiln_view_reshape(v, 2, dims, out, fits);
}

kiln_status kiln_view_transpose(const kiln_view *v, const int64_t *perm, int n, kiln_view *out) {
  int64_t p[KILN_MAX_RANK];
  if (perm == NULL) {
    for (int d = 0; d < v->rank; d++) p[d] = v->rank - 1 - d;
  } else {
    if (n != v->rank) return kiln_fail(KILN_E_MODEL, "transpose: perm has %d entries for rank %d", n, v->rank);
    bool seen[KILN_MAX_RANK] = {false};
    for (int d = 0; d < n; d++) {
      if (perm[d] < 0 || perm[d] >= n)
        return kiln_fail(KILN_E_MODEL, "transpose: perm[%d] = %lld is out of range for rank %d", d, (long long)perm[d],
                         n);
      if (seen[perm[d]]) return kiln_fail(KILN_E_MODEL, "transpose: perm repeats axis %lld", (long long)perm[d]);
      seen[perm[d]] = true;
      p[d] = perm[d];
    }
  }
  kiln_view r = *v;
  for (int d = 0; d < v->rank; d++) {
    r.shape[d] = v->shape[p[d]], r.strides[d] = v->strides[p[d]];
    r.mask_lo[d] = v->mask_lo[p[d]], r.mask_hi[d] = v->mask_hi[p[d]];
  }
  kiln_status st = finish(&r);
  if (st == KILN_OK) *out = r;
  return st;
}

/* One dim sliced: start (clamped), step, count, as ONNX Slice defines. */
static void slice_dim(int64_t dim, int64_t start, int64_t end, int64_t step, int64_t *s, int64_t *count) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = min64(max64(start, 0), dim);
    end = min64(max64(end, 0), dim);
    *count = end > start ? (end - start - 1) / step + 1 : 0;
  } else {
    start = min64(max64(start, 0), dim - 1);
    end = min64(max64(end, -1), dim - 1);
    int64_t mag = step == INT64_MIN ? INT64_MAX : -step;
    *count = start > end ? (start - end - 1) / mag + 1 : 0;
  }
  *s = start;
}

/* Replaces dim d of r by elements start + j*step, j < count (in range). */
static void take_dim(kiln_view *r, int d, int64_t start, int64_t step, int64_t count) {
  if (count > 0) {
    r->offset += start * r->strides[d];
    if (r->has_mask) {
      int64_t lo = r->mask_lo[d] - start, hi = r->mask_hi[d] - 1 - start; /* step*j in [lo, hi] */
      int64_t j0 = step > 0 ? ceil_div(lo, step) : ceil_div(hi, step);
      int64_t j1 = step > 0 ? floor_div(hi, step) : floor_div(lo, step);
      r->mask_lo[d] = max64(j0, 0), r->mask_hi[d] = min64(j1 + 1, count);
    }
    r->strides[d] = count > 1 ? r->strides[d] * step : 0;
  }
  r->shape[d] = count;
  if (!r->has_mask || count == 0) r->mask_lo[d] = 0, r->mask_hi[d] = count;
}

kiln_status kiln_view_slice(const kiln_view *v, int n, const int64_t *starts, const int64_t *ends, const int64_t *axes,
                            const int64_t *steps, kiln_view *out) {
  if (n < 0 || n > v->rank) return kiln_fail(KILN_E_MODEL, "slice: %d axes for rank %d", n, v->rank);
  kiln_view r = *v;
  bool seen[KILN_MAX_RANK] = {false};
  for (int t = 0; t < n; t++) {
    int d = 0;
    kiln_status st = op_axis("slice", axes ? axes[t] : t, v->rank, &d);
    if (st != KILN_OK) return st;
    if (seen[d]) return kiln_fail(KILN_E_MODEL, "slice: axis %d appears twice", d);
    seen[d] = true;
    int64_t step = steps ? steps[t] : 1, s, count;
    if (step == 0) return kiln_fail(KILN_E_MODEL, "slice: step 0 on axis %d", d);
    slice_dim(v->shape[d], starts[t], ends[t], step, &s, &count);
    take_dim(&r, d, s, step, count);
  }
  kiln_status st = finish(&r);
  if (st == KILN_OK) *out = r;
  return st;
}

kiln_status kiln_view_split(const kiln_view *v, int64_t axis, int64_t start, int64_t len, kiln_view *out) {
  int d = 0;
  kiln_status st = op_axis("split", axis, v->rank, &d);
  if (st != KILN_OK) return st;
  if (start < 0 || len < 0 || start > v->shape[d] || len > v->shape[d] - start)
    return kiln_fail(KILN_E_MODEL, "split: part [%lld, %lld + %lld) is outside axis %d of size %lld", (long long)start,
                     (long long)start, (long long)len, d, (long long)v->shape[d]);
  kiln_view r = *v;
  take_dim(&r, d, start, 1, len);
  st = finish(&r);
  if (st == KILN_OK) *out = r;
  return st;
}

/* Copies dim `from` of v into dim `to` of r. */
static void copy_dim(kiln_view *r, int to, const kiln_view *v, int from) {
  r->shape[to] = v->shape[from], r->strides[to] = v->strides[from];
  r->mask_lo[to] = v->mask_lo[from], r->mask_hi[to] = v->mask_hi[from];
}

kiln_status kiln_view_squeeze(const kiln_view *v, int n, const int64_t *axes, kiln_view *out) {
  bool drop[KILN_MAX_RANK] = {false};
  if (n < 0 || n > v->rank) return kiln_fail(KILN_E_MODEL, "squeeze: %d axes for rank %d", n, v->rank);
  if (n == 0 || axes == NULL) {
    for (int d = 0; d < v->rank; d++) drop[d] = v->shape[d] == 1;
  } else {
    for (int t = 0; t < n; t++) {
      int d = 0;
      kiln_status st = op_axis("squeeze", axes[t], v->rank, &d);
      if (st != KILN_OK) return st;
      if (drop[d]) return kiln_fail(KILN_E_MODEL, "squeeze: axis %d appears twice", d);
      if (v->shape[d] != 1)
        return kiln_fail(KILN_E_MODEL, "squeeze: axis %d has size %lld, not 1", d, (long long)v->shape[d]);
      drop[d] = true;
    }
  }
  kiln_view r = *v;
  r.rank = 0;
  for (int d = 0; d < v->rank; d++)
    if (!drop[d]) copy_dim(&r, r.rank++, v, d);
  kiln_status st = finish(&r);
  if (st == KILN_OK) *out = r;
  return st;
}

kiln_status kiln_view_unsqueeze(const kiln_view *v, int n, const int64_t *axes, kiln_view *out) {
  int rank = v->rank + n;
  if (n < 0 || rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "unsqueeze: output rank %d exceeds KILN_MAX_RANK (%d)", rank,
                     KILN_MAX_RANK);
  bool ins[KILN_MAX_RANK] = {false};
  for (int t = 0; t < n; t++) {
    int d = 0;
    kiln_status st = op_axis("unsqueeze", axes[t], rank, &d);
    if (st != KILN_OK) return st;
    if (ins[d]) return kiln_fail(KILN_E_MODEL, "unsqueeze: axis %d appears twice", d);
    ins[d] = true;
  }
  kiln_view r = *v;
  r.rank = rank;
  for (int d = 0, from = 0; d < rank; d++) {
    if (ins[d]) {
      r.shape[d] = 1, r.strides[d] = 0, r.mask_lo[d] = 0, r.mask_hi[d] = 1;
    } else {
      copy_dim(&r, d, v, from++);
    }
  }
  kiln_status st = finish(&r);
  if (st == KILN_OK) *out = r;
  return st;
}

kiln_status kiln_view_expand(const kiln_view *v, int rank, const int64_t *shape, kiln_view *out) {
  char sa[160], sb[160];
  if (rank < 0 || rank > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "expand: target rank %d exceeds KILN_MAX_RANK (%d)", rank,
                     KILN_MAX_RANK);
  for (int d = 0; d < rank; d++)
    if (shape[d] < 0)
      return kiln_fail(KILN_E_MODEL, "expand: target %s has a negative dim",
                       kiln_shape_str(rank, shape, sa, sizeof sa));
  int r = rank > v->rank ? rank : v->rank;
  kiln_view o = *v;
  o.rank = r;
  for (int d = 0; d < r; d++) {
    int dv = d - (r - v->rank), dt = d - (r - rank);
    int64_t n = dv >= 0 ? v->shape[dv] : 1, t = dt >= 0 ? shape[dt] : 1;
    if (dv >= 0)
      copy_dim(&o, d, v, dv);
    else
      o.shape[d] = 1, o.strides[d] = 0, o.mask_lo[d] = 0, o.mask_hi[d] = 1;
    if (n == t || t == 1) continue;
    if (n != 1)
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "expand: cannot broadcast %s to %s (dim %d: %lld vs %lld)",
                       shape_str(v, sb, sizeof sb), kiln_shape_str(rank, shape, sa, sizeof sa), d, (long long)n,
                       (long long)t);
    o.shape[d] = t, o.strides[d] = 0;
    o.mask_hi[d] = o.mask_hi[d] > o.mask_lo[d] ? t : 0; /* [0,1) -> [0,t); an empty range stays empty */
  }
  kiln_status st = finish(&o);
  if (st == KILN_OK) *out = o;
  return st;
}

kiln_status kiln_view_gather(const kiln_view *v, int64_t axis, int64_t index, kiln_view *out) {
  int d = 0;
  kiln_status st = op_axis("gather", axis, v->rank, &d);
  if (st != KILN_OK) return st;
  if (index < -v->shape[d] || index >= v->shape[d])
    return kiln_fail(KILN_E_MODEL, "gather: index %lld is out of range for axis %d of size %lld", (long long)index, d,
                     (long long)v->shape[d]);
  if (index < 0) index += v->shape[d];
  kiln_view r = *v;
  bool hidden = index < v->mask_lo[d] || index >= v->mask_hi[d];
  r.offset += index * v->strides[d];
  r.rank = 0;
  for (int k = 0; k < v->rank; k++)
    if (k != d) copy_dim(&r, r.rank++, v, k);
  if (hidden) r.has_mask = r.all_masked = true;
  st = finish(&r);
  if (st == KILN_OK) *out = r;
  return st;
}

kiln_status kiln_view_pad(const kiln_view *v, const int64_t *pads, kiln_view *out) {
  kiln_view r = *v;
  for (int d = 0; d < v->rank; d++) {
    int64_t b = pads[d], e = pads[v->rank + d], n = v->shape[d];
    int64_t cut_lo = b < 0 ? -b : 0, cut_hi = e < 0 ? -e : 0;
    if (b < -n || e < -n || cut_lo + cut_hi > n)
      return kiln_fail(KILN_E_MODEL, "pad: pads %lld and %lld remove more than axis %d's %lld elements", (long long)b,
                       (long long)e, d, (long long)n);
    take_dim(&r, d, cut_lo, 1, n - cut_lo - cut_hi);
    int64_t pb = max64(b, 0), pe = max64(e, 0), size, t;
    if (pb == 0 && pe == 0) continue;
    if (!add_ok(r.shape[d], pb, &size) || !add_ok(size, pe, &size) || size > KILN_MAX_NUMEL ||
        !mul_ok(pb, r.strides[d], &t) || !add_ok(r.offset, -t, &r.offset))
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "pad: pads %lld and %lld on axis %d are too large", (long long)b,
                       (long long)e, d);
    r.mask_lo[d] += pb, r.mask_hi[d] += pb;
    r.shape[d] = size;
    r.has_mask = true;
  }
  kiln_status st = finish(&r);
  if (st == KILN_OK) *out = r;
  return st;
}

/* ---- op descriptions ---- */

const char *kiln_view_op_name(kiln_view_op_kind kind) {
  switch (kind) {
    case KILN_VOP_IDENTITY:
      return "identity";
    case KILN_VOP_RESHAPE:
      return "reshape";
    case KILN_VOP_FLATTEN:
      return "flatten";
    case KILN_VOP_TRANSPOSE:
      return "transpose";
    case KILN_VOP_SLICE:
      return "slice";
    case KILN_VOP_SQUEEZE:
      return "squeeze";
    case KILN_VOP_UNSQUEEZE:
      return "unsqueeze";
    case KILN_VOP_EXPAND:
      return "expand";
    case KILN_VOP_GATHER:
      return "gather";
    case KILN_VOP_SPLIT:
      return "split";
    case KILN_VOP_PAD:
      return "pad";
  }
  return "?";
}

kiln_status kiln_view_apply(const kiln_view *v, const kiln_view_op *op, kiln_view *out, bool *fits) {
  *fits = true;
  switch (op->kind) {
    case KILN_VOP_IDENTITY:
      *out = *v;
      return KILN_OK;
    case KILN_VOP_RESHAPE:
      return kiln_view_reshape(v, op->n, op->shape, out, fits);
    case KILN_VOP_FLATTEN:
      return kiln_view_flatten(v, op->axis, out, fits);
    case KILN_VOP_TRANSPOSE:
      return kiln_view_transpose(v, op->n ? op->perm : NULL, op->n ? op->n : v->rank, out);
    case KILN_VOP_SLICE:
      return kiln_view_slice(v, op->n, op->starts, op->ends, op->has_axes ? op->axes : NULL,
                             op->has_steps ? op->steps : NULL, out);
    case KILN_VOP_SQUEEZE:
      return kiln_view_squeeze(v, op->n, op->n ? op->axes : NULL, out);
    case KILN_VOP_UNSQUEEZE:
      return kiln_view_unsqueeze(v, op->n, op->axes, out);
    case KILN_VOP_EXPAND:
      return kiln_view_expand(v, op->n, op->shape, out);
    case KILN_VOP_GATHER:
      return kiln_view_gather(v, op->axis, op->index, out);
    case KILN_VOP_SPLIT:
      return kiln_view_split(v, op->axis, op->start, op->len, out);
    case KILN_VOP_PAD:
      return kiln_view_pad(v, op->pads, out);
  }
  return kiln_fail(KILN_E_INTERNAL, "view op: unknown kind %d", (int)op->kind);
}

/* ---- stacks ---- */

void kiln_views_init(kiln_views *s, const kiln_view *base) {
  s->depth = 1;
  s->v[0] = *base;
}

kiln_status kiln_views_push(kiln_views *s, const kiln_view_op *op) {
  kiln_view nv;
  bool fits;
  kiln_status st = kiln_view_apply(&s->v[s->depth - 1], op, &nv, &fits);
  if (st != KILN_OK) return st;
  if (fits) {
    s->v[s->depth - 1] = nv;
  } else {
    if (s->depth == KILN_VIEWS_MAX_DEPTH) {
      char sb[160];
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "view stack: %s to %s needs more than %d views; materialise first",
                       kiln_view_op_name(op->kind), shape_str(&nv, sb, sizeof sb), KILN_VIEWS_MAX_DEPTH);
    }
    s->v[s->depth++] = nv; /* the contiguous view of the new shape */
  }
  while (s->depth >= 2 && kiln_view_merge(&s->v[s->depth - 2], &s->v[s->depth - 1], &nv)) {
    s->v[s->depth - 2] = nv;
    s->depth--;
  }
  return KILN_OK;
}

const kiln_view *kiln_views_top(const kiln_views *s) { return &s->v[s->depth - 1]; }

int64_t kiln_views_offset(const kiln_views *s, int64_t flat, bool *valid) {
  bool ok = true;
  for (int k = s->depth - 1; k >= 0 && ok; k--) flat = kiln_view_offset(&s->v[k], flat, &ok);
  if (valid) *valid = ok;
  return ok ? flat : -1;
}

bool kiln_views_single(const kiln_views *s) { return s->depth == 1; }
bool kiln_views_contiguous(const kiln_views *s) { return s->depth == 1 && s->v[0].contiguous; }

/* ---- regions ---- */

void kiln_view_region(const kiln_view *v, kiln_region *r) {
  memset(r, 0, sizeof *r);
  r->exact = true;
  if (v->numel == 0 || v->all_masked) {
    r->empty = true;
    return;
  }
  int64_t off = v->offset, n[KILN_MAX_RANK], st[KILN_MAX_RANK];
  int k = 0;
  for (int d = 0; d < v->rank; d++) {
    int64_t lo = v->mask_lo[d], cnt = v->mask_hi[d] - lo, s = v->strides[d];
    off += lo * s;
    if (cnt == 1 || s == 0) continue;
    if (s < 0) off += (cnt - 1) * s, s = -s;
    int u = k++; /* insertion by stride, descending */
    while (u > 0 && st[u - 1] < s) n[u] = n[u - 1], st[u] = st[u - 1], u--;
    n[u] = cnt, st[u] = s;
  }
  r->offset = off;
  r->lo = r->hi = off;
  for (int d = 0; d < k; d++) {
    if (r->rank > 0 && st[d] * n[d] == r->strides[r->rank - 1]) { /* joins the previous (outer) dim */
      r->shape[r->rank - 1] *= n[d];
      r->strides[r->rank - 1] = st[d];
    } else {
      r->shape[r->rank] = n[d], r->strides[r->rank] = st[d];
      r->rank++;
    }
    r->hi += (n[d] - 1) * st[d];
  }
}

void kiln_views_region(const kiln_views *s, kiln_region *r) {
  kiln_view_region(&s->v[0], r);
  if (s->depth > 1) {
    r->exact = false;
    for (int k = 1; k < s->depth; k++)
      if (s->v[k].numel == 0 || s->v[k].all_masked) r->empty = true;
  }
}

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

bool kiln_region_may_overlap(const kiln_region *a, const kiln_region *b) {
  if (a->empty || b->empty) return false;
  if (a->hi < b->lo || b->hi < a->lo) return false;
  int64_t g = 0;
  for (int d = 0; d < a->rank; d++) g = gcd64(g, a->strides[d]);
  for (int d = 0; d < b->rank; d++) g = gcd64(g, b->strides[d]);
  int64_t diff = a->offset - b->offset;
  if (g == 0) return diff == 0;
  return diff % g == 0;
}
