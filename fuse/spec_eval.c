/* fuse/spec_eval: the scalar evaluator of kernel specs — element by
 * element in double precision (64-bit integers for integer types), each
 * expression rounded to its dtype as the reference backend stores it. The
 * oracle for backends: semantics follow reference/ops_elementwise.c,
 * ops_reduce.c and ops_nn.c operation for operation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuse/fuse_impl.h"
#include "fuse/spec.h"
#include "ir/alloc.h"

typedef struct sval {
  double f;  /* float dtypes */
  int64_t i; /* integer and bool dtypes (uint64 as its bit pattern) */
} sval;

enum { D_F, D_S, D_U }; /* float, signed, unsigned or bool: the reference's arithmetic domains */

static int dom_of(kiln_dtype t) {
  if (kiln_dtype_is_float(t)) return D_F;
  return kiln_dtype_is_int(t) && kiln_dtype_is_signed(t) ? D_S : D_U;
}

/* The result rounded to t as kiln_set_f (from a double) or kiln_set_i (from
 * an integer) stores it, read back. */
static sval round_to(kiln_dtype t, bool from_float, double f, int64_t i) {
  uint64_t buf[2] = {0, 0};
  int64_t one = 1;
  kiln_tensor s;
  memset(&s, 0, sizeof s);
  kiln_tensor_wrap(&s, t, 1, &one, 1, buf);
  if (from_float) kiln_set_f(&s, 0, f);
  else kiln_set_i(&s, 0, i);
  sval r = {0, 0};
  if (kiln_dtype_is_float(t)) r.f = kiln_get_f(&s, 0);
  else r.i = kiln_get_i(&s, 0);
  return r;
}

static double as_f(kiln_dtype t, sval v) {
  if (kiln_dtype_is_float(t)) return v.f;
  return t == KILN_U64 ? (double)(uint64_t)v.i : (double)v.i;
}

/* Value v of type from, converted to type to as ONNX Cast does (the
 * reference's convert()). */
static sval convert(kiln_dtype from, kiln_dtype to, sval v) {
  if (from == to) return v;
  if (dom_of(from) == D_F) return round_to(to, true, v.f, 0);
  if (!kiln_dtype_is_float(to)) return round_to(to, false, 0, v.i);
  if (to == KILN_F32) {
    sval r = {from == KILN_U64 ? (double)(float)(uint64_t)v.i : (double)(float)v.i, 0};
    return r;
  }
  return round_to(to, true, as_f(from, v), 0);
}

/* ---- unary ---- */

static double round_even(double x) {
  double r = floor(x), d = x - r;
  if (d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0)) r += 1;
  return r == 0 ? copysign(0.0, x) : r;
}

static double clamp01(double v) { return v < 0 ? 0.0 : v > 1 ? 1.0 : v; }

static double uf(const kiln_fuse_expr *e, double x) {
  const double *p = e->f;
  switch (e->op) {
  case KILN_FUSE_ABS: return fabs(x);
  case KILN_FUSE_NEG: return -x;
  case KILN_FUSE_SQRT: return sqrt(x);
  case KILN_FUSE_EXP: return exp(x);
  case KILN_FUSE_LOG: return log(x);
  case KILN_FUSE_RECIP: return 1.0 / x;
  case KILN_FUSE_FLOOR: return floor(x);
  case KILN_FUSE_CEIL: return ceil(x);
  case KILN_FUSE_RELU: return x < 0 ? 0 : x;
  case KILN_FUSE_LEAKY_RELU: return x < 0 ? p[0] * x : x;
  case KILN_FUSE_ELU: return x < 0 ? p[0] * expm1(x) : x;
  case KILN_FUSE_SELU: return x > 0 ? p[2] * x : p[2] * (p[0] * exp(x) - p[0]);
  case KILN_FUSE_SIGMOID: return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
  case KILN_FUSE_HARD_SIGMOID: return clamp01(p[0] * x + p[1]);
  case KILN_FUSE_TANH: return tanh(x);
  case KILN_FUSE_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  case KILN_FUSE_ERF: return erf(x);
  case KILN_FUSE_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
  case KILN_FUSE_SOFTSIGN: return x / (1.0 + fabs(x));
  case KILN_FUSE_HARD_SWISH: return x * clamp01(x / 6.0 + 0.5);
  case KILN_FUSE_THRESHOLDED_RELU: return x > p[0] ? x : 0.0;
  case KILN_FUSE_CELU: return x > 0 ? x : p[0] * expm1(x / p[0]);
  case KILN_FUSE_ROUND: return round_even(x);
  case KILN_FUSE_SIN: return sin(x);
  case KILN_FUSE_COS: return cos(x);
  case KILN_FUSE_TAN: return tan(x);
  case KILN_FUSE_ASIN: return asin(x);
  case KILN_FUSE_ACOS: return acos(x);
  case KILN_FUSE_ATAN: return atan(x);
  case KILN_FUSE_SINH: return sinh(x);
  case KILN_FUSE_COSH: return cosh(x);
  case KILN_FUSE_ASINH: return asinh(x);
  case KILN_FUSE_ACOSH: return acosh(x);
  case KILN_FUSE_ATANH: return atanh(x);
  case KILN_FUSE_SHRINK: return x < -p[0] ? x + p[1] : x > p[0] ? x - p[1] : 0.0;
  case KILN_FUSE_NOT: return x == 0;
  case KILN_FUSE_ISNAN: return isnan(x) != 0;
  case KILN_FUSE_ISINF: return isinf(x) && ((x > 0 && (e->i & 2)) || (x < 0 && (e->i & 1)));
  default: return NAN;
  }
}

static sval unary(const kiln_fuse_expr *e, kiln_dtype t, sval a) {
  int dom = dom_of(t);
  kiln_fuse_op op = e->op;
  if (op == KILN_FUSE_CAST) return convert(t, e->dtype, a);
  if (op == KILN_FUSE_COPY) return convert(t, e->dtype, a);
  if (dom == D_F || op == KILN_FUSE_ISNAN || op == KILN_FUSE_ISINF) return round_to(e->dtype, true, uf(e, as_f(t, a)), 0);
  if (dom == D_S && (op == KILN_FUSE_ABS || op == KILN_FUSE_NEG || op == KILN_FUSE_SIGN || op == KILN_FUSE_RELU)) {
    int64_t v = a.i;
    uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    int64_t r = op == KILN_FUSE_ABS    ? (int64_t)mag
                : op == KILN_FUSE_NEG  ? (int64_t)(0 - (uint64_t)v)
                : op == KILN_FUSE_SIGN ? (v > 0) - (v < 0)
                                       : (v < 0 ? 0 : v);
    return round_to(e->dtype, false, 0, r);
  }
  if (dom == D_U && (op == KILN_FUSE_ABS || op == KILN_FUSE_RELU)) return round_to(e->dtype, false, 0, a.i);
  if (dom == D_U && (op == KILN_FUSE_SIGN || op == KILN_FUSE_NOT))
    return round_to(e->dtype, false, 0, a.i != 0 ? op == KILN_FUSE_SIGN : op == KILN_FUSE_NOT);
  return round_to(e->dtype, true, uf(e, as_f(t, a)), 0);
}

/* ---- binary ---- */

static double bf(kiln_fuse_op op, double a, double b) {
  switch (op) {
  case KILN_FUSE_ADD: return a + b;
  case KILN_FUSE_SUB: return a - b;
  case KILN_FUSE_MUL: return a * b;
  case KILN_FUSE_DIV: return a / b;
  case KILN_FUSE_MOD:
  case KILN_FUSE_FMOD: return fmod(a, b);
  case KILN_FUSE_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
  case KILN_FUSE_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
  case KILN_FUSE_EQ: return a == b;
  case KILN_FUSE_GT: return a > b;
  case KILN_FUSE_LT: return a < b;
  case KILN_FUSE_GE: return a >= b;
  case KILN_FUSE_LE: return a <= b;
  case KILN_FUSE_AND: return a != 0 && b != 0;
  case KILN_FUSE_OR: return a != 0 || b != 0;
  case KILN_FUSE_XOR: return (a != 0) != (b != 0);
  case KILN_FUSE_PRELU: return a < 0 ? a * b : a;
  default: return NAN;
  }
}

static int64_t bs(kiln_fuse_op op, int64_t a, int64_t b, bool *zero) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  switch (op) {
  case KILN_FUSE_ADD: return (int64_t)(ua + ub);
  case KILN_FUSE_SUB: return (int64_t)(ua - ub);
  case KILN_FUSE_MUL: return (int64_t)(ua * ub);
  case KILN_FUSE_PRELU: return a >= 0 ? a : (int64_t)(ua * ub);
  case KILN_FUSE_DIV:
    if (b == 0) return *zero = true, 0;
    if (b == -1) return (int64_t)(0 - ua);
    return a / b;
  case KILN_FUSE_MOD:
  case KILN_FUSE_FMOD: {
    if (b == 0) return *zero = true, 0;
    if (b == -1) return 0;
    int64_t r = a % b;
    if (op == KILN_FUSE_MOD && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
  case KILN_FUSE_MIN: return a < b ? a : b;
  case KILN_FUSE_MAX: return a > b ? a : b;
  case KILN_FUSE_EQ: return a == b;
  case KILN_FUSE_GT: return a > b;
  case KILN_FUSE_LT: return a < b;
  case KILN_FUSE_GE: return a >= b;
  case KILN_FUSE_LE: return a <= b;
  case KILN_FUSE_AND: return a && b;
  case KILN_FUSE_OR: return a || b;
  case KILN_FUSE_XOR: return !a != !b;
  default: return 0;
  }
}

static uint64_t bu(kiln_fuse_op op, uint64_t a, uint64_t b, bool *zero) {
  switch (op) {
  case KILN_FUSE_ADD: return a + b;
  case KILN_FUSE_SUB: return a - b;
  case KILN_FUSE_MUL: return a * b;
  case KILN_FUSE_PRELU: return a;
  case KILN_FUSE_DIV:
    if (b == 0) return *zero = true, 0;
    return a / b;
  case KILN_FUSE_MOD:
  case KILN_FUSE_FMOD:
    if (b == 0) return *zero = true, 0;
    return a % b;
  case KILN_FUSE_MIN: return a < b ? a : b;
  case KILN_FUSE_MAX: return a > b ? a : b;
  case KILN_FUSE_EQ: return a == b;
  case KILN_FUSE_GT: return a > b;
  case KILN_FUSE_LT: return a < b;
  case KILN_FUSE_GE: return a >= b;
  case KILN_FUSE_LE: return a <= b;
  case KILN_FUSE_AND: return a && b;
  case KILN_FUSE_OR: return a || b;
  case KILN_FUSE_XOR: return !a != !b;
  case KILN_FUSE_SHL: return b >= 64 ? 0 : a << b;
  case KILN_FUSE_SHR: return b >= 64 ? 0 : a >> b;
  default: return 0;
  }
}

static uint64_t ipow(uint64_t a, uint64_t e) {
  uint64_t r = 1;
  while (e) {
    if (e & 1) r *= a;
    a *= a;
    e >>= 1;
  }
  return r;
}

static sval binary(const kiln_fuse_expr *e, kiln_dtype t0, sval a, kiln_dtype t1, sval b, bool *zero) {
  if (e->op == KILN_FUSE_POW) {
    int da = dom_of(t0), db = dom_of(t1);
    if (da == D_F || db == D_F || (db == D_S && b.i < 0))
      return round_to(e->dtype, true, pow(as_f(t0, a), as_f(t1, b)), 0);
    return round_to(e->dtype, false, 0, (int64_t)ipow((uint64_t)a.i, (uint64_t)b.i));
  }
  switch (dom_of(t0)) {
  case D_F: return round_to(e->dtype, true, bf(e->op, a.f, as_f(t1, b)), 0);
  case D_S: return round_to(e->dtype, false, 0, bs(e->op, a.i, b.i, zero));
  default: return round_to(e->dtype, false, 0, (int64_t)bu(e->op, (uint64_t)a.i, (uint64_t)b.i, zero));
  }
}

static sval clip(const kiln_fuse_expr *e, kiln_dtype t, sval x, kiln_dtype tl, sval lo, kiln_dtype th, sval hi) {
  switch (dom_of(t)) {
  case D_F: {
    double v = x.f, l = as_f(tl, lo), h = as_f(th, hi);
    if (v < l) v = l;
    if (v > h) v = h;
    return round_to(e->dtype, true, v, 0);
  }
  case D_S: {
    int64_t v = x.i;
    if (v < lo.i) v = lo.i;
    if (v > hi.i) v = hi.i;
    return round_to(e->dtype, false, 0, v);
  }
  default: {
    uint64_t v = (uint64_t)x.i;
    if (v < (uint64_t)lo.i) v = (uint64_t)lo.i;
    if (v > (uint64_t)hi.i) v = (uint64_t)hi.i;
    return round_to(e->dtype, false, 0, (int64_t)v);
  }
  }
}

/* ---- the evaluator ---- */

typedef struct ev {
  const kiln_fuse_spec *sp;
  kiln_tensor *vals;
  kiln_tensor anchor;
  sval **rbuf;          /* per reduction: red_numel results */
  sval *cache;          /* per expression, at the current element */
  unsigned char *need;  /* per root: n_expr flags */
  int64_t idx[KILN_MAX_RANK];
  int64_t flat, rflat;  /* the current element, in the domain and in the reduced domain */
  bool zero;
} ev;

static int64_t ravel(int rank, const int64_t *dims, const int64_t *idx) {
  int64_t f = 0;
  for (int d = 0; d < rank; d++) f = f * dims[d] + idx[d];
  return f;
}

/* Sets the current element from a multi-index of the domain. */
static void at(ev *v) {
  const kiln_fuse_spec *sp = v->sp;
  int64_t ridx[KILN_MAX_RANK];
  for (int d = 0; d < sp->rank; d++) ridx[d] = sp->red_axes[d] ? 0 : v->idx[d];
  v->flat = ravel(sp->rank, sp->shape, v->idx);
  v->rflat = ravel(sp->rank, sp->red_shape, ridx);
}

static sval leaf(ev *v, const kiln_fuse_expr *e) {
  const kiln_fuse_spec *sp = v->sp;
  sval r = {0, 0};
  switch (e->op) {
  case KILN_FUSE_LOAD: {
    const kiln_fuse_access *a = &sp->access[e->ref];
    const kiln_tensor *t = &v->vals[a->value];
    bool valid = true;
    int64_t off = kiln_views_offset(&a->map, a->reduced ? v->rflat : v->flat, &valid);
    if (!valid) return round_to(t->dtype, true, a->pad, 0);
    if (kiln_dtype_is_float(t->dtype)) r.f = kiln_get_f(t, off);
    else r.i = kiln_get_i(t, off);
    return r;
  }
  case KILN_FUSE_CONST:
    if (kiln_dtype_is_float(e->dtype)) r.f = e->f[0];
    else r.i = e->i;
    return r;
  case KILN_FUSE_ANCHOR:
    if (kiln_dtype_is_float(v->anchor.dtype)) r.f = kiln_get_f(&v->anchor, v->flat);
    else r.i = kiln_get_i(&v->anchor, v->flat);
    return convert(v->anchor.dtype, e->dtype, r);
  case KILN_FUSE_REDUCE: return v->rbuf[e->ref][v->rflat];
  default: return r;
  }
}

/* Evaluates expression root at the current element (the expressions it
 * needs, in order). */
static sval eval_root(ev *v, int root, const unsigned char *need) {
  const kiln_fuse_spec *sp = v->sp;
  for (int i = 0; i <= root; i++) {
    if (!need[i]) continue;
    const kiln_fuse_expr *e = &sp->expr[i];
    const int *a = e->args;
    int ar = kiln_fuse_op_arity(e->op);
    if (ar == 0) {
      v->cache[i] = leaf(v, e);
    } else if (ar == 1) {
      v->cache[i] = unary(e, sp->expr[a[0]].dtype, v->cache[a[0]]);
    } else if (ar == 2) {
      v->cache[i] = binary(e, sp->expr[a[0]].dtype, v->cache[a[0]], sp->expr[a[1]].dtype, v->cache[a[1]], &v->zero);
    } else if (e->op == KILN_FUSE_WHERE) {
      int k = v->cache[a[0]].i ? a[1] : a[2];
      v->cache[i] = convert(sp->expr[k].dtype, e->dtype, v->cache[k]);
    } else {
      v->cache[i] = clip(e, sp->expr[a[0]].dtype, v->cache[a[0]], sp->expr[a[1]].dtype, v->cache[a[1]],
                         sp->expr[a[2]].dtype, v->cache[a[2]]);
    }
  }
  return v->cache[root];
}

/* need[] for root: root and everything it reads. */
static void mark(const kiln_fuse_spec *sp, int root, unsigned char *need) {
  memset(need, 0, (size_t)sp->n_expr);
  need[root] = 1;
  for (int i = root; i >= 0; i--)
    if (need[i])
      for (int k = 0; k < sp->expr[i].n_args; k++) need[sp->expr[i].args[k]] = 1;
}

static void int_limits(kiln_dtype t, int64_t *lo, int64_t *hi) {
  switch (t) {
  case KILN_I8: *lo = INT8_MIN, *hi = INT8_MAX; break;
  case KILN_U8: *lo = 0, *hi = UINT8_MAX; break;
  case KILN_I16: *lo = INT16_MIN, *hi = INT16_MAX; break;
  case KILN_U16: *lo = 0, *hi = UINT16_MAX; break;
  case KILN_I32: *lo = INT32_MIN, *hi = INT32_MAX; break;
  case KILN_U32: *lo = 0, *hi = UINT32_MAX; break;
  case KILN_U64: *lo = 0, *hi = -1; break;
  case KILN_BOOL: *lo = 0, *hi = 1; break;
  default: *lo = INT64_MIN, *hi = INT64_MAX; break;
  }
}

/* Reduction k over every reduced element (the reference's red_float /
 * red_int, by the type of the reduced expression). */
static void run_reduce(ev *v, int k, const unsigned char *need) {
  const kiln_fuse_spec *sp = v->sp;
  const kiln_fuse_reduce *rd = &sp->red[k];
  kiln_dtype t = sp->expr[rd->arg].dtype;
  bool fl = kiln_dtype_is_float(t), uns = !kiln_dtype_is_signed(t);
  int64_t nred = 1, rdims[KILN_MAX_RANK];
  int nr = 0, raxes[KILN_MAX_RANK];
  for (int d = 0; d < sp->rank; d++)
    if (sp->red_axes[d]) rdims[nr] = sp->shape[d], raxes[nr++] = d, nred *= sp->shape[d];
  for (int64_t ro = 0; ro < sp->red_numel; ro++) {
    kiln_unravel(ro, sp->rank, sp->red_shape, v->idx);
    double acc = rd->kind == KILN_FUSE_RED_PROD ? 1 : rd->kind == KILN_FUSE_RED_MAX ? -INFINITY
                                                : rd->kind == KILN_FUSE_RED_MIN ? INFINITY : 0;
    uint64_t iacc = rd->kind == KILN_FUSE_RED_PROD ? 1 : 0;
    int64_t lo, hi, best;
    int_limits(t, &lo, &hi);
    best = rd->kind == KILN_FUSE_RED_MAX ? lo : hi;
    bool nan = false;
    for (int64_t r = 0; r < nred; r++) {
      int64_t rem = r;
      for (int j = nr - 1; j >= 0; j--) {
        v->idx[raxes[j]] = rem % rdims[j];
        rem /= rdims[j];
      }
      at(v);
      sval x = eval_root(v, rd->arg, need);
      if (fl) {
        switch (rd->kind) {
        case KILN_FUSE_RED_SUM:
        case KILN_FUSE_RED_MEAN: acc += x.f; break;
        case KILN_FUSE_RED_PROD: acc *= x.f; break;
        default:
          if (isnan(x.f)) nan = true;
          else if (rd->kind == KILN_FUSE_RED_MAX ? x.f > acc : x.f < acc) acc = x.f;
        }
      } else {
        switch (rd->kind) {
        case KILN_FUSE_RED_SUM:
        case KILN_FUSE_RED_MEAN: iacc += (uint64_t)x.i; break;
        case KILN_FUSE_RED_PROD: iacc *= (uint64_t)x.i; break;
        default: {
          bool gt = t == KILN_U64 ? (uint64_t)x.i > (uint64_t)best : x.i > best;
          bool lt = t == KILN_U64 ? (uint64_t)x.i < (uint64_t)best : x.i < best;
          if (rd->kind == KILN_FUSE_RED_MAX ? gt : lt) best = x.i;
        }
        }
      }
    }
    sval res;
    if (fl) {
      if (rd->kind == KILN_FUSE_RED_MEAN) acc = nred ? acc / (double)nred : NAN;
      if (nan) acc = NAN;
      res = round_to(rd->dtype, true, acc, 0);
    } else {
      int64_t out = (int64_t)iacc;
      if (rd->kind == KILN_FUSE_RED_MEAN)
        out = !nred ? 0 : uns ? (int64_t)(iacc / (uint64_t)nred) : (int64_t)iacc / nred;
      if (rd->kind == KILN_FUSE_RED_MAX || rd->kind == KILN_FUSE_RED_MIN) out = best;
      res = round_to(rd->dtype, false, 0, out);
    }
    v->rbuf[k][ro] = res;
  }
}

static void set_out(kiln_tensor *t, int64_t i, kiln_dtype from, sval x) {
  if (kiln_dtype_is_float(from)) kiln_set_f(t, i, x.f);
  else kiln_set_i(t, i, x.i);
}

/* Computes store st's expression over the domain (or the reduced domain)
 * into t (allocated here: the store's shape, dtype dt) through its map. */
static kiln_status run_store(ev *v, const kiln_fuse_store *st, kiln_dtype dt, const unsigned char *need,
                             kiln_tensor *t) {
  const kiln_fuse_spec *sp = v->sp;
  kiln_status s = kiln_tensor_alloc(t, dt, st->rank, st->shape);
  if (s) return s;
  int64_t n = st->reduced ? sp->red_numel : sp->numel;
  for (int64_t f = 0; f < n; f++) {
    kiln_unravel(f, sp->rank, st->reduced ? sp->red_shape : sp->shape, v->idx);
    at(v);
    set_out(t, kiln_views_offset(&st->map, f, NULL), sp->expr[st->expr].dtype, eval_root(v, st->expr, need));
  }
  return KILN_OK;
}

/* Runs node n through the hook with inputs from vals (or `first` as input
 * 0), its outputs into out (n->n_out entries). */
static kiln_status run_node(const kiln_fuse_spec *sp, const kiln_fuse_eval_hooks *h, int node, kiln_tensor *vals,
                            const kiln_tensor *first, kiln_tensor *out) {
  const kiln_node *n = &sp->g->nodes[node];
  if (!h || !h->run_node)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "fuse: evaluating %s needs a node hook", n->op_type);
  const kiln_tensor **in = kiln_calloc((size_t)n->n_in + 1, sizeof *in);
  if (!in) return kiln_fail(KILN_E_NOMEM, "fuse: out of memory");
  kiln_status s = KILN_OK;
  for (int k = 0; k < n->n_in && !s; k++) {
    if (n->in[k] < 0) continue;
    in[k] = k == 0 && first ? first : &vals[n->in[k]];
    if (in[k]->dtype == KILN_UNDEFINED)
      s = kiln_fail(KILN_E_INVALID_VALUE, "fuse: no tensor for '%s'", sp->g->values[n->in[k]].name);
  }
  if (!s) s = h->run_node(h->ctx, sp->g, n, in, out);
  kiln_free(in);
  return s;
}

static void put_value(kiln_tensor *vals, int v, kiln_tensor *t) {
  kiln_tensor_release(&vals[v]);
  vals[v] = *t;
  memset(t, 0, sizeof *t);
}

static kiln_status eval_opaque(const kiln_fuse_spec *sp, kiln_tensor *vals, const kiln_fuse_eval_hooks *h) {
  const kiln_node *n = &sp->g->nodes[sp->opaque];
  kiln_tensor *out = kiln_calloc((size_t)n->n_out + 1, sizeof *out);
  if (!out) return kiln_fail(KILN_E_NOMEM, "fuse: out of memory");
  kiln_status s = run_node(sp, h, sp->opaque, vals, NULL, out);
  for (int k = 0; k < n->n_out; k++) {
    if (!s && n->out[k] >= 0 && out[k].dtype != KILN_UNDEFINED) put_value(vals, n->out[k], &out[k]);
    kiln_tensor_release(&out[k]);
  }
  kiln_free(out);
  return s;
}

kiln_status kiln_fuse_eval_spec(const kiln_fuse_spec *sp, kiln_tensor *vals, const kiln_fuse_eval_hooks *hooks) {
  if (!sp->bound) return kiln_fail(KILN_E_INVALID_SHAPE, "fuse: the spec is not bound (kiln_fuse_spec_bind)");
  if (sp->kind == KILN_FUSE_G_OPAQUE) return eval_opaque(sp, vals, hooks);
  for (int a = 0; a < sp->n_access; a++) {
    const kiln_tensor *t = &vals[sp->access[a].value];
    if (t->dtype == KILN_UNDEFINED || t->strided || t->numel != sp->access[a].numel)
      return kiln_fail(KILN_E_INVALID_VALUE, "fuse: '%s' is not given as a dense tensor of %lld elements",
                       sp->g->values[sp->access[a].value].name, (long long)sp->access[a].numel);
  }
  ev v;
  memset(&v, 0, sizeof v);
  v.sp = sp;
  v.vals = vals;
  int n_roots = sp->n_red + sp->n_store;
  v.cache = kiln_calloc((size_t)sp->n_expr + 1, sizeof *v.cache);
  v.need = kiln_calloc((size_t)(n_roots + 1) * (size_t)(sp->n_expr + 1), 1);
  v.rbuf = kiln_calloc((size_t)sp->n_red + 1, sizeof *v.rbuf);
  kiln_status s = KILN_OK;
  if (!v.cache || !v.need || !v.rbuf) s = kiln_fail(KILN_E_NOMEM, "fuse: out of memory evaluating a spec");
  for (int k = 0; k < sp->n_red && !s; k++)
    if (!(v.rbuf[k] = kiln_calloc((size_t)sp->red_numel + 1, sizeof **v.rbuf)))
      s = kiln_fail(KILN_E_NOMEM, "fuse: out of memory evaluating a spec");
  if (!s && sp->anchor >= 0) {
    const kiln_node *n = &sp->g->nodes[sp->anchor];
    kiln_tensor *out = kiln_calloc((size_t)n->n_out + 1, sizeof *out);
    if (!out) s = kiln_fail(KILN_E_NOMEM, "fuse: out of memory");
    if (!s) s = run_node(sp, hooks, sp->anchor, vals, NULL, out);
    if (!s && out[0].numel != sp->numel)
      s = kiln_fail(KILN_E_INTERNAL, "fuse: the anchor made %lld elements, the domain has %lld", (long long)out[0].numel,
                    (long long)sp->numel);
    if (!s) {
      v.anchor = out[0];
      memset(&out[0], 0, sizeof out[0]);
    }
    for (int k = 0; out && k < n->n_out; k++) kiln_tensor_release(&out[k]);
    kiln_free(out);
  }
  for (int k = 0; k < sp->n_red && !s; k++) {
    unsigned char *need = v.need + (size_t)k * (size_t)(sp->n_expr + 1);
    mark(sp, sp->red[k].arg, need);
    run_reduce(&v, k, need);
  }
  for (int i = 0; i < sp->n_store && !s; i++) {
    const kiln_fuse_store *st = &sp->store[i];
    unsigned char *need = v.need + (size_t)(sp->n_red + i) * (size_t)(sp->n_expr + 1);
    mark(sp, st->expr, need);
    kiln_tensor t = {0};
    kiln_dtype dt = st->pool ? sp->expr[st->expr].dtype : sp->sh->v[st->value].dtype;
    s = run_store(&v, st, dt, need, &t);
    if (!s && st->pool) { /* pool the computed argument */
      const kiln_node *pn = &sp->g->nodes[sp->pool];
      kiln_tensor *out = kiln_calloc((size_t)pn->n_out + 1, sizeof *out);
      if (!out) s = kiln_fail(KILN_E_NOMEM, "fuse: out of memory");
      if (!s) s = run_node(sp, hooks, sp->pool, vals, &t, out);
      kiln_tensor_release(&t);
      if (!s) t = out[0], memset(&out[0], 0, sizeof out[0]);
      for (int k = 0; out && k < pn->n_out; k++) kiln_tensor_release(&out[k]);
      kiln_free(out);
    }
    if (!s) put_value(vals, st->value, &t);
    kiln_tensor_release(&t);
  }
  for (int i = 0; i < sp->n_alias && !s; i++) {
    const kiln_fuse_access *a = &sp->access[sp->alias[i].access];
    const kiln_tensor *src = &vals[a->value];
    const kiln_view *top = kiln_views_top(&a->map);
    kiln_tensor t = {0};
    if ((s = kiln_tensor_alloc(&t, src->dtype, top->rank, top->shape))) break;
    for (int64_t f = 0; f < t.numel; f++) {
      bool valid = true;
      int64_t off = kiln_views_offset(&a->map, f, &valid);
      if (valid) kiln_copy_elem(&t, f, src, off);
      else kiln_set_f(&t, f, a->pad);
    }
    put_value(vals, sp->alias[i].value, &t);
  }
  if (!s && v.zero) s = kiln_fail(KILN_E_INVALID_VALUE, "integer division by zero");
  kiln_tensor_release(&v.anchor);
  for (int k = 0; v.rbuf && k < sp->n_red; k++) kiln_free(v.rbuf[k]);
  kiln_free(v.rbuf);
  kiln_free(v.cache);
  kiln_free(v.need);
  return s;
}
