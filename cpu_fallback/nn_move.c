/* cpu_fallback/nn_move: data-movement kernels for any dtype, by element
 * size — Concat, Gather, Transpose, Tile — over one strided-copy routine (row
 * memcpy, blocked 2-D transpose, or a strided element loop). Semantics and
 * errors are the reference's (reference/ops_shape.c); view inputs with a
 * single strided map are read through it, stacked views (t->stack) and
 * anything malformed are declined (the reference kernel then runs and
 * reports). */
#include <math.h>
#include <string.h>

#include "cpu_fallback/nn.h"
#include "ir/alloc.h"

#define DECLINE()                                                                                                      \
  do {                                                                                                                 \
    *declined = true;                                                                                                  \
    return KILN_OK;                                                                                                    \
  } while (0)

/* ---- the strided copy ---- */

/* Element-by-element copy of n elements at source stride st (elements). */
static void copy_line(char *d, const char *s, size_t es, int64_t n, int64_t st) {
  switch (es) {
  case 4:
    for (int64_t i = 0; i < n; i++) memcpy(d + 4 * i, s + 4 * st * i, 4);
    break;
  case 8:
    for (int64_t i = 0; i < n; i++) memcpy(d + 8 * i, s + 8 * st * i, 8);
    break;
  case 2:
    for (int64_t i = 0; i < n; i++) memcpy(d + 2 * i, s + 2 * st * i, 2);
    break;
  case 1:
    for (int64_t i = 0; i < n; i++) d[i] = s[st * i];
    break;
  default:
    for (int64_t i = 0; i < n; i++) memcpy(d + es * (size_t)i, s + (int64_t)es * st * i, es);
    break;
  }
}

void kiln_nn_strided_copy(void *dst, const void *src, size_t es, int rank, const int64_t *dims, const int64_t *sstr) {
  int64_t d[KILN_MAX_RANK], st[KILN_MAX_RANK];
  int r = 0;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 0) return;
    if (dims[i] == 1) continue;
    if (r && st[r - 1] == sstr[i] * dims[i]) { /* merges into the previous dim */
      d[r - 1] *= dims[i];
      st[r - 1] = sstr[i];
    } else {
      d[r] = dims[i], st[r++] = sstr[i];
    }
  }
  char *out = dst;
  const char *in = src;
  if (r == 0) {
    memcpy(out, in, es);
    return;
  }
  /* the loop over dims [0, lead) by odometer; the last one or two dims are
     the kernel's */
  bool rows = st[r - 1] == 1, tr = !rows && r >= 2 && st[r - 2] == 1 && st[r - 1] > 0 && es == 4;
  int lead = tr ? r - 2 : r - 1;
  int64_t block = tr ? d[r - 2] * d[r - 1] : d[r - 1];
  int64_t idx[KILN_MAX_RANK] = {0}, off = 0, nblocks = 1;
  for (int i = 0; i < lead; i++) nblocks *= d[i];
  const kiln_nn_prims *P = tr ? kiln_nn_prims_active() : NULL;
  for (int64_t b = 0; b < nblocks; b++) {
    const char *s = in + off * (int64_t)es;
    if (rows)
      memcpy(out, s, (size_t)block * es);
    else if (tr)
      P->transpose32((size_t)d[r - 2], (size_t)d[r - 1], (const uint32_t *)s, (size_t)st[r - 1], (uint32_t *)out,
                     (size_t)d[r - 1]);
    else
      copy_line(out, s, es, d[r - 1], st[r - 1]);
    out += (size_t)block * es;
    for (int i = lead - 1; i >= 0; i--) { /* next index */
      off += st[i];
      if (++idx[i] < d[i]) break;
      off -= st[i] * d[i];
      idx[i] = 0;
    }
  }
}

/* The base pointer and element strides of a dense tensor or a single-map
 * view; false for a stacked view. */
static bool strided_map(const kiln_tensor *t, const char **base, int64_t *strides) {
  size_t es = kiln_dtype_size(t->dtype);
  if (!t->data || !es) return false;
  if (!t->strided) {
    kiln_strides(t->rank, t->dims, strides);
    *base = t->data;
    return true;
  }
  if (t->stack) return false;
  for (int i = 0; i < t->rank; i++) strides[i] = t->strides[i];
  *base = (const char *)t->data + t->offset * (int64_t)es;
  return true;
}

/* ---- Transpose ---- */

kiln_status kiln_nn_transpose(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  const kiln_tensor *x = c->n_in > 0 ? c->in[0] : NULL;
  if (!x) DECLINE();
  int r = x->rank;
  int perm[KILN_MAX_RANK];
  const kiln_attr *pa = kiln_node_attr(c->node, "perm");
  if (pa) {
    if (pa->type != KILN_ATTR_INTS || pa->n != (size_t)r) DECLINE();
    bool seen[KILN_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) {
      if (pa->ints[i] < 0 || pa->ints[i] >= r || seen[pa->ints[i]]) DECLINE();
      seen[pa->ints[i]] = true;
      perm[i] = (int)pa->ints[i];
    }
  } else {
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
  }
  const char *base;
  int64_t xs[KILN_MAX_RANK], dims[KILN_MAX_RANK], ss[KILN_MAX_RANK];
  if (!strided_map(x, &base, xs)) DECLINE();
  for (int i = 0; i < r; i++) dims[i] = x->dims[perm[i]], ss[i] = xs[perm[i]];
  kiln_status s = kiln_nn_alloc(&c->out[0], x->dtype, r, dims);
  if (s) return s;
  if (x->numel) kiln_nn_strided_copy(c->out[0].data, base, kiln_dtype_size(x->dtype), r, dims, ss);
  return KILN_OK;
}

/* ---- Concat ---- */

#define INTERLEAVE_MAX 8

/* Concat of up to INTERLEAVE_MAX dense inputs with 4 bytes each per outer
 * index (the columns of an [n, k] float32 or int32 output): one pass that
 * writes each output row whole, instead of one pass per input over the
 * whole output. False when the case is not that one. */
static bool interleave4(const kiln_op_call *c, int ax, int64_t inner, size_t es, int64_t outer, char *y) {
  int k = c->n_in;
  if (k < 2 || k > INTERLEAVE_MAX) return false;
  const uint32_t *src[INTERLEAVE_MAX];
  for (int i = 0; i < k; i++) {
    const kiln_tensor *x = c->in[i];
    if (x->strided || (size_t)(x->dims[ax] * inner) * es != 4 || (char *)x->data == y + 4 * i) return false;
    src[i] = x->data;
  }
  uint32_t *out = (uint32_t *)(void *)y;
  if (k == 4)
    for (int64_t o = 0; o < outer; o++) {
      uint32_t a = src[0][o], b = src[1][o], d = src[2][o], e = src[3][o];
      out[4 * o] = a, out[4 * o + 1] = b, out[4 * o + 2] = d, out[4 * o + 3] = e;
    }
  else
    for (int64_t o = 0; o < outer; o++)
      for (int i = 0; i < k; i++) out[o * k + i] = src[i][o];
  return true;
}

kiln_status kiln_nn_concat(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  const kiln_attr *aa = kiln_node_attr(c->node, "axis");
  if (!aa || aa->type != KILN_ATTR_INT || c->n_in < 1) DECLINE();
  for (int i = 0; i < c->n_in; i++)
    if (!c->in[i]) DECLINE();
  const kiln_tensor *x0 = c->in[0];
  int r = x0->rank;
  if (aa->i < -r || aa->i >= r) DECLINE();
  int ax = (int)(aa->i < 0 ? aa->i + r : aa->i);
  int64_t dims[KILN_MAX_RANK];
  memcpy(dims, x0->dims, sizeof dims);
  dims[ax] = 0;
  for (int i = 0; i < c->n_in; i++) {
    const kiln_tensor *x = c->in[i];
    if (x->dtype != x0->dtype || x->rank != r || (x->strided && x->stack)) DECLINE();
    for (int d = 0; d < r; d++)
      if (d != ax && x->dims[d] != x0->dims[d]) DECLINE();
    if (x->dims[ax] > KILN_MAX_NUMEL - dims[ax]) DECLINE();
    dims[ax] += x->dims[ax];
  }
  kiln_status s = kiln_nn_alloc(&c->out[0], x0->dtype, r, dims);
  if (s) return s;
  size_t es = kiln_dtype_size(x0->dtype);
  int64_t outer = 1, inner = 1, at = 0;
  for (int d = 0; d < ax; d++) outer *= dims[d];
  for (int d = ax + 1; d < r; d++) inner *= dims[d];
  char *y = c->out[0].data;
  if (interleave4(c, ax, inner, es, outer, y)) return KILN_OK;
  for (int i = 0; i < c->n_in; i++) {
    const kiln_tensor *x = c->in[i];
    int64_t chunk = x->dims[ax] * inner; /* elements of x per outer index */
    if (!chunk || !outer) continue;
    if (!x->strided) {
      const char *xs = x->data;
      size_t bytes = (size_t)chunk * es;
      int64_t pitch = dims[ax] * inner * (int64_t)es; /* bytes between output rows */
      char *y0 = y + at * inner * (int64_t)es;
      if (y0 == xs) { /* in place: already there */
      } else if (bytes == 4) { /* narrow slices (columns of an [n, k] output): fixed-size copies */
        for (int64_t o = 0; o < outer; o++) memcpy(y0 + o * pitch, xs + 4 * o, 4);
      } else if (bytes == 8) {
        for (int64_t o = 0; o < outer; o++) memcpy(y0 + o * pitch, xs + 8 * o, 8);
      } else if (bytes == 16) {
        for (int64_t o = 0; o < outer; o++) memcpy(y0 + o * pitch, xs + 16 * o, 16);
      } else {
        for (int64_t o = 0; o < outer; o++) memcpy(y0 + o * pitch, xs + o * (int64_t)bytes, bytes);
      }
    } else {
      const char *base = NULL;
      int64_t xs[KILN_MAX_RANK], idx[KILN_MAX_RANK];
      strided_map(x, &base, xs);
      for (int64_t o = 0; o < outer; o++) {
        kiln_unravel(o, ax, x->dims, idx);
        int64_t off = 0;
        for (int d = 0; d < ax; d++) off += idx[d] * xs[d];
        kiln_nn_strided_copy(y + ((o * dims[ax] + at) * inner) * (int64_t)es, base + off * (int64_t)es, es, r - ax,
                             x->dims + ax, xs + ax);
      }
    }
    at += x->dims[ax];
  }
  return KILN_OK;
}

/* ---- ScatterND ---- */

typedef enum { SC_NONE, SC_ADD, SC_MUL, SC_MAX, SC_MIN } sc_red;

/* The float32 reductions, in index order as the reference applies them:
 * float add and mul give the reference's double-then-round result exactly;
 * a NaN on either side of max/min wins. */
static void scatter_f32(float *y, const float *u, int64_t n, sc_red r) {
  switch (r) {
  case SC_ADD:
    for (int64_t e = 0; e < n; e++) y[e] += u[e];
    break;
  case SC_MUL:
    for (int64_t e = 0; e < n; e++) y[e] *= u[e];
    break;
  case SC_MAX:
    for (int64_t e = 0; e < n; e++) y[e] = y[e] > u[e] || isnan(y[e]) ? y[e] : u[e];
    break;
  case SC_MIN:
    for (int64_t e = 0; e < n; e++) y[e] = y[e] < u[e] || isnan(y[e]) ? y[e] : u[e];
    break;
  default:
    memcpy(y, u, (size_t)n * sizeof *y);
    break;
  }
}

/* ScatterND (opsets 11-18): the data copied to the output unless the plan
 * runs it in place (the output reservation is the data's own memory), then
 * each index tuple's slice written or reduced in index order. reduction
 * none moves any dtype by element size; add/mul/max/min take float32.
 * Indices are checked before anything is written (the reference's error and
 * message); dense inputs only. */
kiln_status kiln_nn_scatternd(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  if (c->n_in < 3 || !c->in[0] || !c->in[1] || !c->in[2]) DECLINE();
  const kiln_tensor *x = c->in[0], *ind = c->in[1], *upd = c->in[2];
  const kiln_attr *ra = kiln_node_attr(c->node, "reduction");
  sc_red red = SC_NONE;
  if (ra) {
    if (ra->type != KILN_ATTR_STRING || !ra->s || c->opset < 16) DECLINE();
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    red = (sc_red)-1;
    for (int k = 0; k < 5; k++)
      if (!strcmp(ra->s, names[k])) red = (sc_red)k;
    if ((int)red < 0 || (red >= SC_MAX && c->opset < 18)) DECLINE();
  }
  if (x->strided || ind->strided || upd->strided || !x->data || upd->dtype != x->dtype) DECLINE();
  if ((ind->dtype != KILN_I32 && ind->dtype != KILN_I64) || (red != SC_NONE && x->dtype != KILN_F32)) DECLINE();
  int r = x->rank, q = ind->rank;
  if (r < 1 || q < 1) DECLINE();
  int64_t k = ind->dims[q - 1];
  if (k < 1 || k > r || upd->rank != q - 1 + r - (int)k) DECLINE();
  for (int d = 0; d < q - 1; d++)
    if (upd->dims[d] != ind->dims[d]) DECLINE();
  for (int d = (int)k; d < r; d++)
    if (upd->dims[q - 1 + d - k] != x->dims[d]) DECLINE();
  int64_t m = 1, slice = 1, xstr[KILN_MAX_RANK];
  for (int d = 0; d < q - 1; d++) m *= ind->dims[d];
  for (int d = (int)k; d < r; d++) slice *= x->dims[d];
  kiln_strides(r, x->dims, xstr);
  /* each tuple's element offset, checked, before anything is written */
  int64_t *off = kiln_malloc((size_t)(m ? m : 1) * sizeof *off);
  if (!off) return kiln_fail(KILN_E_NOMEM, "out of memory in ScatterND");
  for (int64_t t = 0; t < m; t++) {
    int64_t o = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t v = ind->dtype == KILN_I64 ? ((const int64_t *)ind->data)[t * k + j]
                                         : ((const int32_t *)ind->data)[t * k + j];
      int64_t n = x->dims[j];
      if (v < -n || v >= n) {
        kiln_free(off);
        return kiln_fail(KILN_E_INVALID_VALUE, "index %lld is out of range for a dimension of size %lld",
                         (long long)v, (long long)n);
      }
      o += (v < 0 ? v + n : v) * xstr[j];
    }
    off[t] = o;
  }
  kiln_status s = kiln_nn_alloc(&c->out[0], x->dtype, r, x->dims);
  if (s) {
    kiln_free(off);
    return s;
  }
  size_t es = kiln_dtype_size(x->dtype), row = (size_t)slice * es;
  char *y = c->out[0].data;
  const char *u = upd->data;
  if (y != x->data && x->numel) memcpy(y, x->data, (size_t)x->numel * es); /* in place: the data is there */
  for (int64_t t = 0; t < m && row; t++) {
    if (red == SC_NONE)
      memcpy(y + (size_t)off[t] * es, u + (size_t)t * row, row);
    else
      scatter_f32((float *)y + off[t], (const float *)u + t * slice, slice, red);
  }
  kiln_free(off);
  return KILN_OK;
}

/* ---- Gather ---- */

/* How many rows ahead a gather prefetches. */
#define GATHER_AHEAD 8

kiln_status kiln_nn_gather(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  if (c->n_in < 2 || !c->in[0] || !c->in[1]) DECLINE();
  const kiln_tensor *x = c->in[0], *ind = c->in[1];
  const kiln_attr *aa = kiln_node_attr(c->node, "axis");
  if (aa && aa->type != KILN_ATTR_INT) DECLINE();
  if ((ind->dtype != KILN_I32 && ind->dtype != KILN_I64) || x->strided || !x->data) DECLINE();
  int64_t axis = aa ? aa->i : 0;
  if (axis < -x->rank || axis >= x->rank) DECLINE();
  int ax = (int)(axis < 0 ? axis + x->rank : axis);
  int r = x->rank - 1 + ind->rank;
  if (r > KILN_MAX_RANK) DECLINE();
  int64_t dims[KILN_MAX_RANK];
  int k = 0;
  for (int d = 0; d < ax; d++) dims[k++] = x->dims[d];
  for (int d = 0; d < ind->rank; d++) dims[k++] = ind->dims[d];
  for (int d = ax + 1; d < x->rank; d++) dims[k++] = x->dims[d];
  int64_t n = x->dims[ax], ni = ind->numel;
  /* the indices, checked and normalised, before anything is written */
  int64_t *iv = kiln_malloc((size_t)(ni ? ni : 1) * sizeof *iv);
  if (!iv) return kiln_fail(KILN_E_NOMEM, "out of memory in Gather");
  for (int64_t j = 0; j < ni; j++) {
    int64_t v = ind->strided             ? kiln_get_i(ind, j)
                : ind->dtype == KILN_I64 ? ((const int64_t *)ind->data)[j]
                                         : ((const int32_t *)ind->data)[j];
    if (v < -n || v >= n) {
      kiln_free(iv);
      return kiln_fail(KILN_E_INVALID_VALUE, "index %lld is out of range for a dimension of size %lld", (long long)v,
                       (long long)n);
    }
    iv[j] = v < 0 ? v + n : v;
  }
  kiln_status s = kiln_nn_alloc(&c->out[0], x->dtype, r, dims);
  if (s) {
    kiln_free(iv);
    return s;
  }
  size_t es = kiln_dtype_size(x->dtype);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; d++) outer *= x->dims[d];
  for (int d = ax + 1; d < x->rank; d++) inner *= x->dims[d];
  size_t row = (size_t)inner * es;
  const char *xd = x->data;
  char *y = c->out[0].data;
  if (row)
    for (int64_t o = 0; o < outer; o++) {
      const char *xo = xd + (size_t)(o * n) * row;
      if (row == 4)
        for (int64_t j = 0; j < ni; j++, y += 4) memcpy(y, xo + (size_t)iv[j] * 4, 4);
      else if (row == 8)
        for (int64_t j = 0; j < ni; j++, y += 8) memcpy(y, xo + (size_t)iv[j] * 8, 8);
      else
        for (int64_t j = 0; j < ni; j++, y += row) {
          if (j + GATHER_AHEAD < ni) { /* random rows: ask for a later one's first lines now */
            const char *ahead = xo + (size_t)iv[j + GATHER_AHEAD] * row;
            for (size_t l = 0; l < row && l < 256; l += 64) __builtin_prefetch(ahead + l);
          }
          memcpy(y, xo + (size_t)iv[j] * row, row);
        }
    }
  kiln_free(iv);
  return KILN_OK;
}

/* ---- Tile ---- */

typedef struct tile_job {
  int rank;
  size_t es;
  const int64_t *dims, *rep;
  int64_t xs[KILN_MAX_RANK], os[KILN_MAX_RANK]; /* element strides of x and of the output */
} tile_job;

/* Writes the tiled block of dims [level, rank) whose input starts at x and
 * output at y: the input's block once (recursively), then copies of it
 * (the whole output block, built, is memcpy'd rep times along level). */
static void tile_fill(const tile_job *t, int level, const char *x, char *y) {
  int64_t d = t->dims[level];
  size_t blk = (size_t)(d * t->os[level]) * t->es; /* one copy of the input along level */
  if (level == t->rank - 1) {
    memcpy(y, x, blk);
  } else {
    for (int64_t i = 0; i < d; i++)
      tile_fill(t, level + 1, x + (size_t)(i * t->xs[level]) * t->es, y + (size_t)(i * t->os[level]) * t->es);
  }
  for (int64_t r = 1; r < t->rep[level]; r++) memcpy(y + (size_t)r * blk, y, blk);
}

kiln_status kiln_nn_tile(const kiln_op_call *c, const kiln_cpu_epilogue *ep, bool *declined) {
  (void)ep;
  if (c->n_in < 2 || !c->in[0] || !c->in[1]) DECLINE();
  const kiln_tensor *x = c->in[0], *rp = c->in[1];
  if (x->strided || !x->data || rp->strided || rp->dtype != KILN_I64 || rp->rank != 1 || rp->numel != x->rank ||
      x->rank < 1)
    DECLINE();
  const int64_t *rep = rp->data;
  int64_t dims[KILN_MAX_RANK], numel = 1;
  for (int i = 0; i < x->rank; i++) {
    if (rep[i] < 0 || (rep[i] && x->dims[i] > KILN_MAX_NUMEL / rep[i])) DECLINE();
    dims[i] = x->dims[i] * rep[i];
    if (dims[i] && numel > KILN_MAX_NUMEL / dims[i]) DECLINE();
    numel *= dims[i];
  }
  kiln_status s = kiln_nn_alloc(&c->out[0], x->dtype, x->rank, dims);
  if (s || numel == 0) return s;
  tile_job t = {x->rank, kiln_dtype_size(x->dtype), x->dims, rep, {0}, {0}};
  kiln_strides(x->rank, x->dims, t.xs);
  kiln_strides(x->rank, dims, t.os);
  tile_fill(&t, 0, x->data, c->out[0].data);
  return KILN_OK;
}
