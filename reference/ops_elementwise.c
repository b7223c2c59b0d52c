/* reference/ops_elementwise: scalar kernels (see reference/ops.h) for the
 * element-wise ops: unary math and activations, binary and variadic
 * arithmetic with numpy (multidirectional) broadcasting, comparisons, logic,
 * Where, Clip, Cast/CastLike, Identity and inference-mode Dropout.
 *
 * Arithmetic is done in one of three domains, chosen by the element type:
 *   float types (f16, bf16, f32, f64): in double, rounded once on store;
 *   signed ints: in int64 with two's-complement wrap-around (computed in
 *     uint64 so overflow is never undefined), truncated to the type on store;
 *   unsigned ints and bool: in uint64, same wrap-around.
 * Defined behaviour where ONNX leaves it open:
 *   - integer Div / Mod by zero fails with KILN_E_INVALID_VALUE (no crash);
 *     INT_MIN / -1 wraps to INT_MIN, INT_MIN % -1 is 0;
 *   - integer Pow with a negative integer exponent, and integer base with a
 *     floating exponent, are pow() in double truncated toward zero
 *     (saturating); a non-negative integer exponent is exact (wrapping);
 *   - BitShift by >= 64 bits gives 0 (so does any shift past the type width,
 *     by truncation);
 *   - float -> integer casts truncate toward zero and saturate, NaN -> 0;
 *     integer -> narrower integer casts wrap; anything -> bool is x != 0;
 *   - Min/Max propagate NaN (numpy maximum/minimum).
 * Opsets: see chk_common (7..17, and older versions that mean the same). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "ir/alloc.h"
#include "reference/opcheck.h"
#include "reference/ops.h"

/* ------------------------------------------------------------------------ */
/* Element domains                                                           */

enum { D_F, D_S, D_U }; /* float, signed int, unsigned int or bool */

static int dom_of(kiln_dtype t) {
  switch (t) {
  case KILN_F32:
  case KILN_F64:
  case KILN_F16:
  case KILN_BF16: return D_F;
  case KILN_I8:
  case KILN_I16:
  case KILN_I32:
  case KILN_I64: return D_S;
  default: return D_U;
  }
}

static uint64_t get_u(const kiln_tensor *t, int64_t i) { return (uint64_t)kiln_get_i(t, i); }
static void set_u(kiln_tensor *t, int64_t i, uint64_t v) { kiln_set_i(t, i, (int64_t)v); }

/* ------------------------------------------------------------------------ */
/* Checks shared by run and check functions                                  */

/* The input-0 mask of the running op, from its own table entry. */
static uint32_t op_mask(const kiln_op_call *c) {
  const kiln_op_def *d = kiln_ref_find_op(c->node->domain, c->node->op_type);
  return d && d->types ? d->types : KILN_TS_ALL;
}

/* Input i present and of a type in mask. */
static kiln_status need_type(const kiln_op_call *c, int i, uint32_t mask) {
  kiln_status s = kiln_op_need(c, i);
  if (s) return s;
  if (!kiln_opc_in_mask(mask, c->in[i]->dtype))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "input %d has data type %s, which %s does not accept", i,
                     kiln_dtype_name(c->in[i]->dtype), c->node->op_type);
  return KILN_OK;
}

/* Input i present and of the same type as input j. */
static kiln_status need_same(const kiln_op_call *c, int i, int j) {
  kiln_status s = kiln_op_need(c, i);
  return s ? s : kiln_opc_need_same(c, i, j, NULL);
}

/* Attribute names this file knows, with their ONNX types. */
static const struct {
  const char *name;
  kiln_attr_type type;
} attr_types[] = {
    {"alpha", KILN_ATTR_FLOAT},         {"beta", KILN_ATTR_FLOAT},    {"gamma", KILN_ATTR_FLOAT},
    {"lambd", KILN_ATTR_FLOAT},         {"bias", KILN_ATTR_FLOAT},    {"ratio", KILN_ATTR_FLOAT},
    {"min", KILN_ATTR_FLOAT},           {"max", KILN_ATTR_FLOAT},     {"to", KILN_ATTR_INT},
    {"fmod", KILN_ATTR_INT},            {"seed", KILN_ATTR_INT},      {"detect_negative", KILN_ATTR_INT},
    {"detect_positive", KILN_ATTR_INT}, {"direction", KILN_ATTR_STRING},
};

/* Opset range and attribute types; every check below starts here. since is
 * the first opset whose version of the op the kernel implements. Kiln targets
 * opsets 7..17, but an op whose older versions differ only in attributes that
 * are not listed in its table entry (consumed_inputs, the legacy broadcast /
 * axis) is accepted from its first version on: with those attributes absent
 * the old and new semantics agree (numpy broadcasting is a superset of the
 * old same-shape rule). Ops where that is not so pass a since of 6 or 7. */
static kiln_status chk_common(const kiln_node *n, int since) {
  if (n->opset < since)
    return kiln_fail(n->opset < 7 ? KILN_E_VERSION : KILN_E_MODEL,
                     "%s is supported from opset %d (the model imports opset %d)", n->op_type, since, n->opset);
  for (int a = 0; a < n->n_attrs; a++) {
    const kiln_attr *at = &n->attrs[a];
    for (size_t k = 0; k < sizeof attr_types / sizeof *attr_types; k++) {
      if (strcmp(attr_types[k].name, at->name)) continue;
      kiln_attr_type want = attr_types[k].type;
      if (at->type != want && !(want == KILN_ATTR_FLOAT && at->type == KILN_ATTR_INT))
        return kiln_fail(KILN_E_MODEL, "attribute '%s' has the wrong type (%d, expected %d)", at->name,
                         (int)at->type, (int)want);
    }
  }
  return KILN_OK;
}

#define CHK_SINCE(v)                                                                                          \
  static kiln_status chk_v##v(const kiln_graph *g, const kiln_node *n) {                                      \
    (void)g;                                                                                                  \
    return chk_common(n, v);                                                                                  \
  }
CHK_SINCE(1)
CHK_SINCE(7)
CHK_SINCE(9)
CHK_SINCE(10)
CHK_SINCE(11)
CHK_SINCE(12)
CHK_SINCE(14)
CHK_SINCE(15)

/* ------------------------------------------------------------------------ */
/* Multidirectional broadcasting over n inputs                               */

typedef struct bc_it {
  int n, rank;
  int64_t dims[KILN_MAX_RANK];
  int64_t numel;
  int64_t idx[KILN_MAX_RANK];
  int64_t *st;  /* n rows of KILN_MAX_RANK strides */
  int64_t *off; /* n current flat offsets */
  int64_t buf[4 * (KILN_MAX_RANK + 1)];
} bc_it;

static void bc_free(bc_it *it) {
  if (it->st && it->st != it->buf) kiln_free(it->st);
  it->st = it->off = NULL;
}

/* Broadcasts the n tensors ts[0..n) together; it->off[k] is then the flat
 * index into ts[k] of output element 0, advanced by bc_next. */
static kiln_status bc_init(bc_it *it, int n, const kiln_tensor *const *ts) {
  memset(it, 0, sizeof *it);
  it->n = n;
  it->rank = ts[0]->rank;
  for (int d = 0; d < it->rank; d++) it->dims[d] = ts[0]->dims[d];
  for (int k = 1; k < n; k++) {
    kiln_status s = kiln_broadcast_shape(it->rank, it->dims, ts[k]->rank, ts[k]->dims, &it->rank, it->dims);
    if (s) return s;
  }
  kiln_status s = kiln_shape_numel(it->rank, it->dims, &it->numel);
  if (s) return s;
  if (n <= 4) {
    it->st = it->buf;
  } else {
    it->st = kiln_calloc((size_t)n * (KILN_MAX_RANK + 1), sizeof *it->st);
    if (!it->st) return kiln_fail(KILN_E_NOMEM, "out of memory broadcasting %d inputs", n);
  }
  it->off = it->st + (size_t)n * KILN_MAX_RANK;
  for (int k = 0; k < n; k++) {
    kiln_broadcast_strides(ts[k], it->rank, it->dims, it->st + (size_t)k * KILN_MAX_RANK);
    it->off[k] = 0;
  }
  return KILN_OK;
}

static void bc_next(bc_it *it) {
  for (int d = it->rank - 1; d >= 0; d--) {
    it->idx[d]++;
    for (int k = 0; k < it->n; k++) it->off[k] += it->st[(size_t)k * KILN_MAX_RANK + d];
    if (it->idx[d] < it->dims[d]) return;
    for (int k = 0; k < it->n; k++) it->off[k] -= it->st[(size_t)k * KILN_MAX_RANK + d] * it->dims[d];
    it->idx[d] = 0;
  }
}

/* ------------------------------------------------------------------------ */
/* Unary ops                                                                 */

enum {
  U_ABS, U_NEG, U_SQRT, U_EXP, U_LOG, U_RECIP, U_FLOOR, U_CEIL, U_RELU, U_LEAKY, U_ELU, U_SELU, U_SIGMOID,
  U_HSIGMOID, U_TANH, U_SOFTPLUS, U_ERF, U_SIGN, U_SOFTSIGN, U_HSWISH, U_THRELU, U_CELU, U_ROUND, U_SIN,
  U_COS, U_TAN, U_ASIN, U_ACOS, U_ATAN, U_SINH, U_COSH, U_ASINH, U_ACOSH, U_ATANH, U_SHRINK, U_NOT,
  U_ISNAN, U_ISINF
};

typedef struct uparm {
  double alpha, beta, gamma;
  int64_t neg, pos;
} uparm;

/* Round half to even, independent of the FP rounding mode. */
static double round_even(double x) {
  double r = floor(x), d = x - r;
  if (d > 0.5 || (d == 0.5 && fmod(r, 2.0) != 0)) r += 1;
  return r == 0 ? copysign(0.0, x) : r;
}

/* Clamps to [0, 1], keeping NaN. */
static double clamp01(double v) { return v < 0 ? 0.0 : v > 1 ? 1.0 : v; }

/* The float form of every unary op. NaN inputs give NaN (except the
 * predicates IsNaN / IsInf / Not). */
static double uf(int op, double x, const uparm *p) {
  switch (op) {
  case U_ABS: return fabs(x);
  case U_NEG: return -x;
  case U_SQRT: return sqrt(x);
  case U_EXP: return exp(x);
  case U_LOG: return log(x);
  case U_RECIP: return 1.0 / x;
  case U_FLOOR: return floor(x);
  case U_CEIL: return ceil(x);
  case U_RELU: return x < 0 ? 0 : x;
  case U_LEAKY: return x < 0 ? p->alpha * x : x;
  case U_ELU: return x < 0 ? p->alpha * expm1(x) : x;
  case U_SELU: return x > 0 ? p->gamma * x : p->gamma * (p->alpha * exp(x) - p->alpha);
  case U_SIGMOID: return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
  case U_HSIGMOID: return clamp01(p->alpha * x + p->beta);
  case U_TANH: return tanh(x);
  case U_SOFTPLUS: return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
  case U_ERF: return erf(x);
  case U_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;
  case U_SOFTSIGN: return x / (1.0 + fabs(x));
  case U_HSWISH: return x * clamp01(x / 6.0 + 0.5);
  case U_THRELU: return x > p->alpha ? x : 0.0;
  /* max(0, x) + min(0, alpha * (exp(x / alpha) - 1)), for either sign of alpha */
  case U_CELU: return x > 0 ? x : p->alpha * expm1(x / p->alpha);
  case U_ROUND: return round_even(x);
  case U_SIN: return sin(x);
  case U_COS: return cos(x);
  case U_TAN: return tan(x);
  case U_ASIN: return asin(x);
  case U_ACOS: return acos(x);
  case U_ATAN: return atan(x);
  case U_SINH: return sinh(x);
  case U_COSH: return cosh(x);
  case U_ASINH: return asinh(x);
  case U_ACOSH: return acosh(x);
  case U_ATANH: return atanh(x);
  case U_SHRINK: return x < -p->alpha ? x + p->beta : x > p->alpha ? x - p->beta : 0.0;
  case U_NOT: return x == 0;
  case U_ISNAN: return isnan(x) != 0;
  case U_ISINF: return isinf(x) && ((x > 0 && p->pos) || (x < 0 && p->neg));
  default: return NAN;
  }
}

static kiln_status chk_celu(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_common(n, 12);
  (void)g;
  if (!s && kiln_attr_float(n, "alpha", 1.0f) == 0.0f)
    return kiln_fail(KILN_E_MODEL, "Celu alpha must not be 0");
  return s;
}

static kiln_status ew_unary(const kiln_op_call *c, int op) {
  kiln_status s = need_type(c, 0, op_mask(c));
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  const kiln_node *n = c->node;
  uparm p = {0, 0, 0, 0, 0};
  switch (op) {
  case U_LEAKY: p.alpha = kiln_attr_float(n, "alpha", 0.01f); break;
  case U_ELU: p.alpha = kiln_attr_float(n, "alpha", 1.0f); break;
  case U_SELU:
    p.alpha = kiln_attr_float(n, "alpha", 1.67326319217681884765625f);
    p.gamma = kiln_attr_float(n, "gamma", 1.05070102214813232421875f);
    break;
  case U_HSIGMOID:
    p.alpha = kiln_attr_float(n, "alpha", 0.2f);
    p.beta = kiln_attr_float(n, "beta", 0.5f);
    break;
  case U_THRELU: p.alpha = kiln_attr_float(n, "alpha", 1.0f); break;
  case U_CELU:
    s = chk_celu(c->graph, n);
    if (s) return s;
    p.alpha = kiln_attr_float(n, "alpha", 1.0f);
    break;
  case U_SHRINK:
    p.alpha = kiln_attr_float(n, "lambd", 0.5f);
    p.beta = kiln_attr_float(n, "bias", 0.0f);
    break;
  case U_ISINF:
    p.neg = kiln_attr_int(n, "detect_negative", 1);
    p.pos = kiln_attr_int(n, "detect_positive", 1);
    break;
  default: break;
  }
  int to_bool = op == U_ISNAN || op == U_ISINF;
  s = kiln_tensor_alloc(&c->out[0], to_bool ? KILN_BOOL : x->dtype, x->rank, x->dims);
  if (s) return s;
  kiln_tensor *y = &c->out[0];
  int dom = dom_of(x->dtype);
  for (int64_t i = 0; i < x->numel; i++) {
    if (dom == D_F || to_bool) {
      kiln_set_f(y, i, uf(op, kiln_get_f(x, i), &p));
    } else if (dom == D_S && (op == U_ABS || op == U_NEG || op == U_SIGN || op == U_RELU)) {
      int64_t v = kiln_get_i(x, i);
      uint64_t mag = v < 0 ? 0 - (uint64_t)v : (uint64_t)v; /* wraps for INT64_MIN */
      int64_t r = op == U_ABS   ? (int64_t)mag
                  : op == U_NEG ? (int64_t)(0 - (uint64_t)v)
                  : op == U_SIGN ? (v > 0) - (v < 0)
                                 : (v < 0 ? 0 : v);
      kiln_set_i(y, i, r);
    } else if (dom == D_U && (op == U_ABS || op == U_RELU)) {
      kiln_copy_elem(y, i, x, i);
    } else if (dom == D_U && (op == U_SIGN || op == U_NOT)) {
      kiln_set_i(y, i, get_u(x, i) != 0 ? (op == U_SIGN) : (op == U_NOT));
    } else {
      /* an integer input to a float function (Erf, Shrink): computed in
         double and truncated toward zero on the store, as numpy's cast of
         the float result back to the input type; a result outside the
         type's range (Shrink of an unsigned x below bias), where that cast
         is undefined and numpy and onnxruntime wrap on x86, saturates */
      kiln_set_f(y, i, uf(op, kiln_get_f(x, i), &p));
    }
  }
  return KILN_OK;
}

#define UNARY(fn, op)                                                                                          \
  static kiln_status run_##fn(const kiln_op_call *c) { return ew_unary(c, op); }
UNARY(abs, U_ABS)
UNARY(neg, U_NEG)
UNARY(sqrt, U_SQRT)
UNARY(exp, U_EXP)
UNARY(log, U_LOG)
UNARY(recip, U_RECIP)
UNARY(floor, U_FLOOR)
UNARY(ceil, U_CEIL)
UNARY(relu, U_RELU)
UNARY(leaky, U_LEAKY)
UNARY(elu, U_ELU)
UNARY(selu, U_SELU)
UNARY(sigmoid, U_SIGMOID)
UNARY(hsigmoid, U_HSIGMOID)
UNARY(tanh, U_TANH)
UNARY(softplus, U_SOFTPLUS)
UNARY(erf, U_ERF)
UNARY(sign, U_SIGN)
UNARY(softsign, U_SOFTSIGN)
UNARY(hswish, U_HSWISH)
UNARY(threlu, U_THRELU)
UNARY(celu, U_CELU)
UNARY(round, U_ROUND)
UNARY(sin, U_SIN)
UNARY(cos, U_COS)
UNARY(tan, U_TAN)
UNARY(asin, U_ASIN)
UNARY(acos, U_ACOS)
UNARY(atan, U_ATAN)
UNARY(sinh, U_SINH)
UNARY(cosh, U_COSH)
UNARY(asinh, U_ASINH)
UNARY(acosh, U_ACOSH)
UNARY(atanh, U_ATANH)
UNARY(shrink, U_SHRINK)
UNARY(not, U_NOT)
UNARY(isnan, U_ISNAN)
UNARY(isinf, U_ISINF)

/* ------------------------------------------------------------------------ */
/* Binary and variadic ops (all inputs of one type, folded left to right)    */

enum {
  B_ADD, B_SUB, B_MUL, B_DIV, B_MOD, B_FMOD, B_MIN, B_MAX, B_EQ, B_GT, B_LT, B_GE, B_LE, B_AND, B_OR, B_XOR,
  B_SHL, B_SHR, B_PRELU, B_MEAN
};

static int is_cmp(int op) { return op >= B_EQ && op <= B_XOR; }

static double bf(int op, double a, double b) {
  switch (op) {
  case B_ADD:
  case B_MEAN: return a + b;
  case B_SUB: return a - b;
  case B_MUL: return a * b;
  case B_DIV: return a / b;
  case B_FMOD: return fmod(a, b);
  case B_MIN: return isnan(a) || isnan(b) ? NAN : a < b ? a : b;
  case B_MAX: return isnan(a) || isnan(b) ? NAN : a > b ? a : b;
  case B_EQ: return a == b;
  case B_GT: return a > b;
  case B_LT: return a < b;
  case B_GE: return a >= b;
  case B_LE: return a <= b;
  case B_AND: return a != 0 && b != 0;
  case B_OR: return a != 0 || b != 0;
  case B_XOR: return (a != 0) != (b != 0);
  case B_PRELU: return a < 0 ? a * b : a;
  default: return NAN;
  }
}

/* Signed: wrap-around via uint64. *zero is set on a division by zero. */
static int64_t bs(int op, int64_t a, int64_t b, int *zero) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
  switch (op) {
  case B_ADD:
  case B_MEAN: return (int64_t)(ua + ub);
  case B_SUB: return (int64_t)(ua - ub);
  case B_MUL:
  case B_PRELU:
    if (op == B_PRELU && a >= 0) return a;
    return (int64_t)(ua * ub);
  case B_DIV:
    if (b == 0) return *zero = 1, 0;
    if (b == -1) return (int64_t)(0 - ua);
    return a / b;
  case B_FMOD:
  case B_MOD: {
    if (b == 0) return *zero = 1, 0;
    if (b == -1) return 0;
    int64_t r = a % b;
    if (op == B_MOD && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  }
  case B_MIN: return a < b ? a : b;
  case B_MAX: return a > b ? a : b;
  case B_EQ: return a == b;
  case B_GT: return a > b;
  case B_LT: return a < b;
  case B_GE: return a >= b;
  case B_LE: return a <= b;
  case B_AND: return a && b;
  case B_OR: return a || b;
  case B_XOR: return !a != !b;
  default: return 0;
  }
}

static uint64_t bu(int op, uint64_t a, uint64_t b, int *zero) {
  switch (op) {
  case B_ADD:
  case B_MEAN: return a + b;
  case B_SUB: return a - b;
  case B_MUL: return a * b;
  case B_PRELU: return a; /* never negative */
  case B_DIV:
    if (b == 0) return *zero = 1, 0;
    return a / b;
  case B_FMOD:
  case B_MOD:
    if (b == 0) return *zero = 1, 0;
    return a % b;
  case B_MIN: return a < b ? a : b;
  case B_MAX: return a > b ? a : b;
  case B_EQ: return a == b;
  case B_GT: return a > b;
  case B_LT: return a < b;
  case B_GE: return a >= b;
  case B_LE: return a <= b;
  case B_AND: return a && b;
  case B_OR: return a || b;
  case B_XOR: return !a != !b;
  case B_SHL: return b >= 64 ? 0 : a << b;
  case B_SHR: return b >= 64 ? 0 : a >> b;
  default: return 0;
  }
}

static kiln_status ew_nary(const kiln_op_call *c, int op) {
  kiln_status s = need_type(c, 0, op_mask(c));
  if (s) return s;
  int n = c->n_in;
  if (n < 1) return kiln_fail(KILN_E_MODEL, "at least one input is required");
  for (int k = 1; k < n; k++)
    if ((s = need_same(c, k, 0))) return s;
  kiln_dtype t = c->in[0]->dtype;
  if (op == B_MOD && dom_of(t) == D_F && !kiln_attr_int(c->node, "fmod", 0))
    return kiln_fail(KILN_E_MODEL, "Mod of %s values needs fmod=1", kiln_dtype_name(t));
  if (op == B_MOD && kiln_attr_int(c->node, "fmod", 0)) op = B_FMOD;
  if (op == B_SHL || op == B_SHR) {
    const char *dir = kiln_attr_string(c->node, "direction", "");
    op = !strcmp(dir, "LEFT") ? B_SHL : B_SHR;
  }
  bc_it it;
  s = bc_init(&it, n, c->in);
  if (s) return s;
  if (op == B_PRELU) {
    int same = it.rank == c->in[0]->rank;
    for (int d = 0; same && d < it.rank; d++) same = it.dims[d] == c->in[0]->dims[d];
    if (!same) {
      char a[160], b[160];
      bc_free(&it);
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "slope shape %s does not broadcast to X shape %s",
                       kiln_shape_str(c->in[1]->rank, c->in[1]->dims, a, sizeof a),
                       kiln_shape_str(c->in[0]->rank, c->in[0]->dims, b, sizeof b));
    }
  }
  s = kiln_tensor_alloc(&c->out[0], is_cmp(op) ? KILN_BOOL : t, it.rank, it.dims);
  if (s) {
    bc_free(&it);
    return s;
  }
  kiln_tensor *y = &c->out[0];
  const kiln_tensor *const *in = c->in;
  int dom = dom_of(t), zero = 0;
  /* dense float32 inputs (a folded weight times a scale, or over a
     per-channel vector): the loop below without its per-element dispatch,
     the same double arithmetic; inputs each of the output's shape or a
     single value need no broadcast iterator either */
  bool dense = t == KILN_F32 && !is_cmp(op) && it.numel > 0, flat = dense && n <= 8;
  for (int k = 0; k < n && dense; k++) dense = !in[k]->strided;
  for (int k = 0; k < n && flat; k++) flat = in[k]->numel == it.numel || in[k]->numel == 1;
  if (dense && !flat) {
    float *out = y->data;
    for (int64_t i = 0; i < it.numel; i++, bc_next(&it)) {
      double acc = ((const float *)in[0]->data)[it.off[0]];
      for (int k = 1; k < n; k++) acc = bf(op, acc, ((const float *)in[k]->data)[it.off[k]]);
      if (op == B_MEAN) acc /= n;
      out[i] = (float)acc;
    }
    bc_free(&it);
    return KILN_OK;
  }
  if (dense) {
    const float *src[8];
    int64_t step[8];
    for (int k = 0; k < n; k++) src[k] = in[k]->data, step[k] = in[k]->numel == it.numel;
    float *out = y->data;
    for (int64_t i = 0; i < it.numel; i++) {
      double acc = src[0][i * step[0]];
      for (int k = 1; k < n; k++) acc = bf(op, acc, src[k][i * step[k]]);
      if (op == B_MEAN) acc /= n;
      out[i] = (float)acc;
    }
    bc_free(&it);
    return KILN_OK;
  }
  for (int64_t i = 0; i < it.numel; i++, bc_next(&it)) {
    if (dom == D_F) {
      double acc = kiln_get_f(in[0], it.off[0]);
      for (int k = 1; k < n; k++) acc = bf(op, acc, kiln_get_f(in[k], it.off[k]));
      if (op == B_MEAN) acc /= n;
      kiln_set_f(y, i, acc);
    } else if (dom == D_S) {
      int64_t acc = kiln_get_i(in[0], it.off[0]);
      for (int k = 1; k < n; k++) acc = bs(op, acc, kiln_get_i(in[k], it.off[k]), &zero);
      if (op == B_MEAN) acc /= n;
      kiln_set_i(y, i, acc);
    } else {
      uint64_t acc = get_u(in[0], it.off[0]);
      for (int k = 1; k < n; k++) acc = bu(op, acc, get_u(in[k], it.off[k]), &zero);
      if (op == B_MEAN) acc /= (uint64_t)n;
      set_u(y, i, acc);
    }
  }
  bc_free(&it);
  if (zero) return kiln_fail(KILN_E_INVALID_VALUE, "integer division by zero");
  return KILN_OK;
}

#define NARY(fn, op)                                                                                           \
  static kiln_status run_##fn(const kiln_op_call *c) { return ew_nary(c, op); }
NARY(add, B_ADD)
NARY(sub, B_SUB)
NARY(mul, B_MUL)
NARY(div, B_DIV)
NARY(mod, B_MOD)
NARY(min, B_MIN)
NARY(max, B_MAX)
NARY(sum, B_ADD)
NARY(mean, B_MEAN)
NARY(equal, B_EQ)
NARY(greater, B_GT)
NARY(less, B_LT)
NARY(greater_eq, B_GE)
NARY(less_eq, B_LE)
NARY(and, B_AND)
NARY(or, B_OR)
NARY(xor, B_XOR)
NARY(bitshift, B_SHL)
NARY(prelu, B_PRELU)

static kiln_status chk_mod(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_common(n, 10);
  if (s) return s;
  int64_t fm = kiln_attr_int(n, "fmod", 0);
  if (fm != 0 && fm != 1) return kiln_fail(KILN_E_MODEL, "fmod must be 0 or 1, not %lld", (long long)fm);
  kiln_dtype t = kiln_opc_decl_type(g, n, 0);
  if (!fm && t != KILN_UNDEFINED && dom_of(t) == D_F)
    return kiln_fail(KILN_E_MODEL, "Mod of %s values needs fmod=1", kiln_dtype_name(t));
  return KILN_OK;
}

static kiln_status chk_bitshift(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_common(n, 11);
  (void)g;
  if (s) return s;
  const char *dir = kiln_attr_string(n, "direction", NULL);
  if (!dir) return kiln_fail(KILN_E_MODEL, "attribute 'direction' is required");
  if (strcmp(dir, "LEFT") && strcmp(dir, "RIGHT"))
    return kiln_fail(KILN_E_MODEL, "direction must be LEFT or RIGHT, not '%s'", dir);
  return KILN_OK;
}

static kiln_status run_bitshift_checked(const kiln_op_call *c) {
  kiln_status s = chk_bitshift(c->graph, c->node);
  return s ? s : run_bitshift(c);
}

/* ------------------------------------------------------------------------ */
/* Pow: base T (float, int32, int64), exponent T1 (any number)               */

#define POW_BASE (KILN_TS_FLOAT | KILN_T(KILN_I32) | KILN_T(KILN_I64))

/* a**e for a non-negative integer exponent, wrapping mod 2^64. */
static uint64_t ipow(uint64_t a, uint64_t e) {
  uint64_t r = 1;
  while (e) {
    if (e & 1) r *= a;
    a *= a;
    e >>= 1;
  }
  return r;
}

static kiln_status run_pow(const kiln_op_call *c) {
  kiln_status s = need_type(c, 0, op_mask(c));
  if (!s) s = need_type(c, 1, KILN_TS_NUM);
  if (s) return s;
  const kiln_tensor *a = c->in[0], *b = c->in[1];
  bc_it it;
  s = bc_init(&it, 2, c->in);
  if (s) return s;
  s = kiln_tensor_alloc(&c->out[0], a->dtype, it.rank, it.dims);
  if (s) {
    bc_free(&it);
    return s;
  }
  kiln_tensor *y = &c->out[0];
  int da = dom_of(a->dtype), db = dom_of(b->dtype);
  for (int64_t i = 0; i < it.numel; i++, bc_next(&it)) {
    int64_t ia = it.off[0], ib = it.off[1];
    if (da == D_F || db == D_F) {
      kiln_set_f(y, i, pow(kiln_get_f(a, ia), kiln_get_f(b, ib)));
    } else if (db == D_S && kiln_get_i(b, ib) < 0) {
      kiln_set_f(y, i, pow(kiln_get_f(a, ia), kiln_get_f(b, ib)));
    } else {
      set_u(y, i, ipow(get_u(a, ia), get_u(b, ib)));
    }
  }
  bc_free(&it);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Where                                                                     */

static kiln_status run_where(const kiln_op_call *c) {
  kiln_status s = need_type(c, 0, KILN_T(KILN_BOOL));
  if (!s) s = need_type(c, 1, KILN_TS_ALL);
  if (!s) s = need_same(c, 2, 1);
  if (s) return s;
  bc_it it;
  s = bc_init(&it, 3, c->in);
  if (s) return s;
  s = kiln_tensor_alloc(&c->out[0], c->in[1]->dtype, it.rank, it.dims);
  if (s) {
    bc_free(&it);
    return s;
  }
  for (int64_t i = 0; i < it.numel; i++, bc_next(&it)) {
    int k = kiln_get_i(c->in[0], it.off[0]) ? 1 : 2;
    kiln_copy_elem(&c->out[0], i, c->in[k], it.off[k]);
  }
  bc_free(&it);
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Clip                                                                      */

static kiln_status chk_clip(const kiln_graph *g, const kiln_node *n) {
  kiln_status s = chk_common(n, 1);
  (void)g;
  if (s) return s;
  if (n->opset < 11 && n->n_in > 1)
    return kiln_fail(KILN_E_MODEL, "Clip before opset 11 takes one input (min/max are attributes)");
  if (n->opset >= 11 && (kiln_node_attr(n, "min") || kiln_node_attr(n, "max")))
    return kiln_fail(KILN_E_MODEL, "Clip from opset 11 takes min/max as inputs, not attributes");
  return KILN_OK;
}

/* Reads optional bound input i (a one-element tensor of x's type). */
static kiln_status clip_bound(const kiln_op_call *c, int i, int *have) {
  *have = 0;
  if (i >= c->n_in || !c->in[i]) return KILN_OK;
  kiln_status s = need_same(c, i, 0);
  if (s) return s;
  if (c->in[i]->numel != 1)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "Clip %s must be a scalar, got %lld elements", i == 1 ? "min" : "max",
                     (long long)c->in[i]->numel);
  *have = 1;
  return KILN_OK;
}

static kiln_status run_clip(const kiln_op_call *c) {
  kiln_status s = chk_clip(c->graph, c->node);
  if (!s) s = need_type(c, 0, op_mask(c));
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  int hlo = 0, hhi = 0;
  double flo = -INFINITY, fhi = INFINITY;
  int64_t slo = INT64_MIN, shi = INT64_MAX;
  uint64_t ulo = 0, uhi = UINT64_MAX;
  if (c->opset < 11) {
    flo = kiln_attr_float(c->node, "min", -FLT_MAX);
    fhi = kiln_attr_float(c->node, "max", FLT_MAX);
  } else {
    if ((s = clip_bound(c, 1, &hlo)) || (s = clip_bound(c, 2, &hhi))) return s;
    if (hlo) flo = kiln_get_f(c->in[1], 0), slo = kiln_get_i(c->in[1], 0), ulo = get_u(c->in[1], 0);
    if (hhi) fhi = kiln_get_f(c->in[2], 0), shi = kiln_get_i(c->in[2], 0), uhi = get_u(c->in[2], 0);
  }
  s = kiln_tensor_alloc(&c->out[0], x->dtype, x->rank, x->dims);
  if (s) return s;
  kiln_tensor *y = &c->out[0];
  int dom = dom_of(x->dtype);
  /* y = min(max(x, lo), hi): with lo > hi every value becomes hi; NaN stays. */
  for (int64_t i = 0; i < x->numel; i++) {
    if (dom == D_F || c->opset < 11) {
      double v = kiln_get_f(x, i);
      if (v < flo) v = flo;
      if (v > fhi) v = fhi;
      kiln_set_f(y, i, v);
    } else if (dom == D_S) {
      int64_t v = kiln_get_i(x, i);
      if (v < slo) v = slo;
      if (v > shi) v = shi;
      kiln_set_i(y, i, v);
    } else {
      uint64_t v = get_u(x, i);
      if (v < ulo) v = ulo;
      if (v > uhi) v = uhi;
      set_u(y, i, v);
    }
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Cast, CastLike, Identity                                                  */

/* Converts every element of x into y (allocated already, same numel). */
static void convert(kiln_tensor *y, const kiln_tensor *x) {
  if (y->dtype == x->dtype) {
    if (!x->strided) {
      if (x->numel) memcpy(y->data, x->data, kiln_tensor_bytes(x));
    } else {
      for (int64_t i = 0; i < x->numel; i++) kiln_copy_elem(y, i, x, i);
    }
    return;
  }
  if (!x->strided && y->dtype == KILN_F32 &&
      (x->dtype == KILN_F16 || x->dtype == KILN_BF16 || x->dtype == KILN_F64)) { /* weights cast at init */
    float *o = y->data;
    if (x->dtype == KILN_F16)
      for (int64_t i = 0; i < x->numel; i++) o[i] = kiln_f16_to_f32(((const uint16_t *)x->data)[i]);
    else if (x->dtype == KILN_BF16)
      for (int64_t i = 0; i < x->numel; i++) o[i] = kiln_bf16_to_f32(((const uint16_t *)x->data)[i]);
    else
      for (int64_t i = 0; i < x->numel; i++) o[i] = (float)((const double *)x->data)[i];
    return;
  }
  int dx = dom_of(x->dtype);
  for (int64_t i = 0; i < x->numel; i++) {
    if (dx == D_F) {
      kiln_set_f(y, i, kiln_get_f(x, i)); /* floats; to ints: truncate, saturate */
    } else if (dom_of(y->dtype) != D_F) {
      kiln_set_i(y, i, kiln_get_i(x, i)); /* ints: wrap; to bool: != 0 */
    } else if (y->dtype == KILN_F32) {
      /* int -> float32 in one rounding step */
      ((float *)y->data)[i] = x->dtype == KILN_U64 ? (float)get_u(x, i) : (float)kiln_get_i(x, i);
    } else {
      kiln_set_f(y, i, kiln_get_f(x, i));
    }
  }
}

static kiln_status cast_target(int64_t to, kiln_dtype *out) {
  if (to == KILN_STRING)
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "casting to strings is not supported");
  if (to <= 0 || to >= KILN_DTYPE_COUNT || !kiln_dtype_supported((kiln_dtype)to))
    return kiln_fail(KILN_E_UNSUPPORTED_DTYPE, "cast target type %lld is not supported", (long long)to);
  *out = (kiln_dtype)to;
  return KILN_OK;
}

static kiln_status chk_cast(const kiln_graph *g, const kiln_node *n) {
  /* Cast-1 took the target as a string attribute */
  kiln_status s = chk_common(n, 6);
  (void)g;
  if (s) return s;
  const kiln_attr *a = kiln_node_attr(n, "to");
  if (!a) return kiln_fail(KILN_E_MODEL, "attribute 'to' is required");
  kiln_dtype t;
  return cast_target(a->i, &t);
}

static kiln_status run_cast(const kiln_op_call *c) {
  kiln_status s = chk_cast(c->graph, c->node);
  if (!s) s = need_type(c, 0, KILN_TS_ALL);
  if (s) return s;
  kiln_dtype to = KILN_F32;
  if ((s = cast_target(kiln_attr_int(c->node, "to", 0), &to))) return s;
  const kiln_tensor *x = c->in[0];
  s = kiln_tensor_alloc(&c->out[0], to, x->rank, x->dims);
  if (s) return s;
  convert(&c->out[0], x);
  return KILN_OK;
}

static kiln_status run_castlike(const kiln_op_call *c) {
  kiln_status s = need_type(c, 0, KILN_TS_ALL);
  if (!s) s = need_type(c, 1, KILN_TS_ALL);
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  s = kiln_tensor_alloc(&c->out[0], c->in[1]->dtype, x->rank, x->dims);
  if (s) return s;
  convert(&c->out[0], x);
  return KILN_OK;
}

static kiln_status run_identity(const kiln_op_call *c) {
  kiln_status s = need_type(c, 0, KILN_TS_ALL);
  return s ? s : kiln_tensor_copy(&c->out[0], c->in[0]);
}

/* ------------------------------------------------------------------------ */
/* Dropout (inference only)                                                  */

static kiln_status chk_ratio(double r) {
  if (!(r >= 0 && r < 1)) return kiln_fail(KILN_E_MODEL, "Dropout ratio %g is outside [0, 1)", r);
  return KILN_OK;
}

static kiln_status chk_dropout(const kiln_graph *g, const kiln_node *n) {
  /* Dropout-1 and -6 default to training mode (is_test = 0) */
  kiln_status s = chk_common(n, 7);
  if (s) return s;
  if (n->opset < 12) {
    if (n->n_in > 1) return kiln_fail(KILN_E_MODEL, "Dropout before opset 12 takes one input");
    if (kiln_node_attr(n, "seed")) return kiln_fail(KILN_E_MODEL, "Dropout has no 'seed' before opset 12");
    return chk_ratio(kiln_attr_float(n, "ratio", 0.5f));
  }
  if (kiln_node_attr(n, "ratio"))
    return kiln_fail(KILN_E_MODEL, "Dropout from opset 12 takes ratio as an input, not an attribute");
  if (g && n->n_in > 2 && n->in[2] >= 0) {
    /* training_mode must be a known false: an initializer (re-checked at run
       time, as a graph input may override it) or a Constant node's value */
    const kiln_value *v = &g->values[n->in[2]];
    const kiln_tensor *tm = v->init;
    if (!tm && v->producer >= 0 && !strcmp(g->nodes[v->producer].op_type, "Constant"))
      tm = kiln_attr_tensor(&g->nodes[v->producer], "value");
    if (!tm)
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR,
                       "Dropout's training_mode input is not a constant; only inference (training_mode false) "
                       "is supported");
    if (tm->numel == 1 && kiln_get_i(tm, 0))
      return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "Dropout in training mode is not supported");
  }
  return KILN_OK;
}

static kiln_status run_dropout(const kiln_op_call *c) {
  kiln_status s = chk_dropout(NULL, c->node);
  if (!s) s = need_type(c, 0, op_mask(c));
  if (s) return s;
  const kiln_tensor *x = c->in[0];
  if (c->opset >= 12) {
    if (c->n_in > 1 && c->in[1]) {
      const kiln_tensor *r = c->in[1];
      if (!kiln_dtype_is_float(r->dtype) || r->numel != 1)
        return kiln_fail(KILN_E_MODEL, "Dropout ratio must be a floating-point scalar");
      if ((s = chk_ratio(kiln_get_f(r, 0)))) return s;
    }
    if (c->n_in > 2 && c->in[2]) {
      const kiln_tensor *tm = c->in[2];
      if (tm->dtype != KILN_BOOL || tm->numel != 1)
        return kiln_fail(KILN_E_MODEL, "Dropout training_mode must be a bool scalar");
      if (kiln_get_i(tm, 0))
        return kiln_fail(KILN_E_UNSUPPORTED_ATTR, "Dropout in training mode is not supported");
    }
  }
  if ((s = kiln_tensor_copy(&c->out[0], x))) return s;
  if (c->n_out > 1 && c->out_used[1]) {
    /* the mask keeps everything: bool from opset 10, of x's type before */
    kiln_dtype mt = c->opset >= 10 ? KILN_BOOL : x->dtype;
    if ((s = kiln_tensor_alloc(&c->out[1], mt, x->rank, x->dims))) return s;
    for (int64_t i = 0; i < x->numel; i++) kiln_set_i(&c->out[1], i, 1);
  }
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */

#define TF KILN_TS_FLOAT
#define TFS (KILN_TS_FLOAT | KILN_TS_SINT)
#define TNUM KILN_TS_NUM
#define TB KILN_T(KILN_BOOL)
#define VAR 0x7fffffff /* variadic */

const kiln_op_def kiln_ref_ops_elementwise[] = {
    /* unary */
    {"Abs", 1, 1, 1, 1, "", TNUM, run_abs, chk_v1},
    {"Neg", 1, 1, 1, 1, "", TFS, run_neg, chk_v1},
    {"Sqrt", 1, 1, 1, 1, "", TF, run_sqrt, chk_v1},
    {"Exp", 1, 1, 1, 1, "", TF, run_exp, chk_v1},
    {"Log", 1, 1, 1, 1, "", TF, run_log, chk_v1},
    {"Reciprocal", 1, 1, 1, 1, "", TF, run_recip, chk_v1},
    {"Floor", 1, 1, 1, 1, "", TF, run_floor, chk_v1},
    {"Ceil", 1, 1, 1, 1, "", TF, run_ceil, chk_v1},
    {"Relu", 1, 1, 1, 1, "", TFS, run_relu, chk_v1},
    {"LeakyRelu", 1, 1, 1, 1, "alpha", TF, run_leaky, chk_v1},
    {"Elu", 1, 1, 1, 1, "alpha", TF, run_elu, chk_v1},
    {"Selu", 1, 1, 1, 1, "alpha gamma", TF, run_selu, chk_v1},
    {"Sigmoid", 1, 1, 1, 1, "", TF, run_sigmoid, chk_v1},
    {"HardSigmoid", 1, 1, 1, 1, "alpha beta", TF, run_hsigmoid, chk_v1},
    {"Tanh", 1, 1, 1, 1, "", TF, run_tanh, chk_v1},
    {"Softplus", 1, 1, 1, 1, "", TF, run_softplus, chk_v1},
    {"Softsign", 1, 1, 1, 1, "", TF, run_softsign, chk_v1},
    {"Erf", 1, 1, 1, 1, "", TNUM, run_erf, chk_v9},
    {"Sign", 1, 1, 1, 1, "", TNUM, run_sign, chk_v9},
    {"HardSwish", 1, 1, 1, 1, "", TF, run_hswish, chk_v14},
    {"ThresholdedRelu", 1, 1, 1, 1, "alpha", TF, run_threlu, chk_v10},
    {"Celu", 1, 1, 1, 1, "alpha", TF, run_celu, chk_celu},
    {"Round", 1, 1, 1, 1, "", TF, run_round, chk_v11},
    {"Sin", 1, 1, 1, 1, "", TF, run_sin, chk_v7},
    {"Cos", 1, 1, 1, 1, "", TF, run_cos, chk_v7},
    {"Tan", 1, 1, 1, 1, "", TF, run_tan, chk_v7},
    {"Asin", 1, 1, 1, 1, "", TF, run_asin, chk_v7},
    {"Acos", 1, 1, 1, 1, "", TF, run_acos, chk_v7},
    {"Atan", 1, 1, 1, 1, "", TF, run_atan, chk_v7},
    {"Sinh", 1, 1, 1, 1, "", TF, run_sinh, chk_v9},
    {"Cosh", 1, 1, 1, 1, "", TF, run_cosh, chk_v9},
    {"Asinh", 1, 1, 1, 1, "", TF, run_asinh, chk_v9},
    {"Acosh", 1, 1, 1, 1, "", TF, run_acosh, chk_v9},
    {"Atanh", 1, 1, 1, 1, "", TF, run_atanh, chk_v9},
    {"Shrink", 1, 1, 1, 1, "lambd bias", TNUM, run_shrink, chk_v9},
    {"IsNaN", 1, 1, 1, 1, "", TF, run_isnan, chk_v9},
    {"IsInf", 1, 1, 1, 1, "detect_negative detect_positive", TF, run_isinf, chk_v10},
    {"Not", 1, 1, 1, 1, "", TB, run_not, chk_v1},
    /* binary and variadic */
    {"Add", 2, 2, 1, 1, "", TNUM, run_add, chk_v1},
    {"Sub", 2, 2, 1, 1, "", TNUM, run_sub, chk_v1},
    {"Mul", 2, 2, 1, 1, "", TNUM, run_mul, chk_v1},
    {"Div", 2, 2, 1, 1, "", TNUM, run_div, chk_v1},
    {"Mod", 2, 2, 1, 1, "fmod", TNUM, run_mod, chk_mod},
    {"Pow", 2, 2, 1, 1, "", POW_BASE, run_pow, chk_v1},
    {"PRelu", 2, 2, 1, 1, "", TF | KILN_T(KILN_I32) | KILN_T(KILN_I64) | KILN_T(KILN_U32) | KILN_T(KILN_U64),
     run_prelu, chk_v7}, /* PRelu-6 and older broadcast slope per channel */
    {"BitShift", 2, 2, 1, 1, "direction", KILN_TS_UINT, run_bitshift_checked, chk_bitshift},
    {"Min", 1, VAR, 1, 1, "", TNUM, run_min, chk_v1},
    {"Max", 1, VAR, 1, 1, "", TNUM, run_max, chk_v1},
    {"Sum", 1, VAR, 1, 1, "", TF, run_sum, chk_v1},
    {"Mean", 1, VAR, 1, 1, "", TF, run_mean, chk_v1},
    {"Equal", 2, 2, 1, 1, "", TNUM | TB, run_equal, chk_v1},
    {"Greater", 2, 2, 1, 1, "", TNUM, run_greater, chk_v1},
    {"Less", 2, 2, 1, 1, "", TNUM, run_less, chk_v1},
    {"GreaterOrEqual", 2, 2, 1, 1, "", TNUM, run_greater_eq, chk_v12},
    {"LessOrEqual", 2, 2, 1, 1, "", TNUM, run_less_eq, chk_v12},
    {"And", 2, 2, 1, 1, "", TB, run_and, chk_v1},
    {"Or", 2, 2, 1, 1, "", TB, run_or, chk_v1},
    {"Xor", 2, 2, 1, 1, "", TB, run_xor, chk_v1},
    /* other */
    {"Where", 3, 3, 1, 1, "", TB, run_where, chk_v9},
    {"Clip", 1, 3, 1, 1, "min max", TNUM, run_clip, chk_clip},
    {"Cast", 1, 1, 1, 1, "to", 0, run_cast, chk_cast},
    {"CastLike", 2, 2, 1, 1, "", 0, run_castlike, chk_v15},
    {"Identity", 1, 1, 1, 1, "", 0, run_identity, chk_v1},
    {"Dropout", 1, 3, 1, 2, "ratio seed", TF, run_dropout, chk_dropout},
    {0},
};
