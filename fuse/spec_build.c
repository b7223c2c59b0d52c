/* fuse/spec_build: turning one group of the fusion context into its kernel
 * spec — views into accessor chains, ops into expressions (a table from
 * ONNX op to expression op and attributes), reductions, anchor and stores. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "fuse/fuse_impl.h"
#include "fuse/group.h"
#include "ir/alloc.h"

typedef struct builder {
  const kiln_fuse_ctx *c;
  const kiln_fuse_gstate *G;
  kiln_fuse_spec *sp;
  int gid;
  kiln_status st;
  int *expr_of;     /* per value: its expression, -1 */
  int *leaf_parent; /* per LEAF value: the LEAF value it views, -1 when it views memory */
  int *leaf_node, *leaf_out;
  int cap_access, cap_expr, cap_red, cap_store, cap_alias;
  kiln_dimx red_dims[KILN_MAX_RANK];
} builder;

/* ---- growing arrays ---- */

/* Makes room for element n of an array of *cap elements: the array (moved
 * when grown, new room zeroed), or NULL (b->st set) when out of memory.
 * Accessors and stores (3 KB and 2.4 KB: their index maps) start at 2, the
 * rest at 8: most specs have one to three of each, and 8 of them zeroed
 * per spec were ~13 % of mobilenetv2's warm lowering (opencl/ENGINE.md,
 * "The source printed without printf's slow path"). */
static void *grow(builder *b, void *arr, int *cap, int n, size_t elem) {
  if (n < *cap) return arr;
  int nc = *cap ? 2 * *cap : elem >= 1024 ? 2 : 8;
  void *p = kiln_realloc(arr, elem * (size_t)nc);
  if (!p) {
    b->st = kiln_fail(KILN_E_NOMEM, "fuse: out of memory building a spec");
    return NULL;
  }
  memset((char *)p + elem * (size_t)*cap, 0, elem * (size_t)(nc - *cap));
  *cap = nc;
  return p;
}

/* Appends an expression; -1 on failure (b->st says why). */
static int ex(builder *b, kiln_fuse_op op, kiln_dtype dt, bool reduced, int n_args, int a0, int a1, int a2,
              int node) {
  kiln_fuse_spec *sp = b->sp;
  if (b->st || a0 < -1 || (n_args > 0 && a0 < 0) || (n_args > 1 && a1 < 0) || (n_args > 2 && a2 < 0)) {
    if (!b->st) b->st = kiln_fail(KILN_E_INTERNAL, "fuse: expression without argument");
    return -1;
  }
  void *grown = grow(b, sp->expr, &b->cap_expr, sp->n_expr, sizeof *sp->expr);
  if (!grown) return -1;
  sp->expr = grown;
  kiln_fuse_expr *e = &sp->expr[sp->n_expr];
  memset(e, 0, sizeof *e);
  e->op = op;
  e->dtype = dt;
  e->reduced = reduced;
  e->n_args = n_args;
  e->args[0] = a0, e->args[1] = a1, e->args[2] = a2;
  e->ref = -1;
  e->node = node;
  return sp->n_expr++;
}

static int cst_f(builder *b, double v, bool reduced, int node) {
  int e = ex(b, KILN_FUSE_CONST, KILN_F64, reduced, 0, -1, -1, -1, node);
  if (e >= 0) b->sp->expr[e].f[0] = v;
  return e;
}

static int cst_i(builder *b, kiln_dtype dt, int64_t v, bool reduced, int node) {
  int e = ex(b, KILN_FUSE_CONST, dt, reduced, 0, -1, -1, -1, node);
  if (e >= 0) b->sp->expr[e].i = v;
  return e;
}

/* The type intermediate results are kept in (the reference accumulates in
 * double or in 64-bit integers). */
static kiln_dtype wide(kiln_dtype t) {
  if (kiln_dtype_is_float(t)) return KILN_F64;
  return kiln_dtype_is_signed(t) ? KILN_I64 : KILN_U64;
}

/* ---- accessors ---- */

static int role(const builder *b, int v) {
  if (v < 0) return KILN_FUSE_ROLE_MEM;
  int p = b->c->g->values[v].producer;
  return p >= 0 && b->c->group_of[p] == b->gid ? b->c->role[v] : KILN_FUSE_ROLE_MEM;
}

static void set_xf(kiln_fuse_xform *x, kiln_fuse_xform_kind k, int rank, const kiln_dimx *dims) {
  memset(x, 0, sizeof *x);
  x->kind = k;
  x->node = x->out = -1;
  x->rank = rank;
  for (int d = 0; d < rank; d++) x->dims[d] = dims[d];
}

/* The chain of view steps from memory up to value v (LEAF or MEM); returns
 * the memory value, or -1 when the chain is too long. */
static int chain_of(const builder *b, int v, kiln_fuse_xform *xf, int *n) {
  int stack[KILN_FUSE_MAX_CHAIN], depth = 0;
  while (role(b, v) == KILN_FUSE_ROLE_LEAF) {
    if (depth == KILN_FUSE_MAX_CHAIN) return -1;
    stack[depth++] = v;
    int parent = b->leaf_parent[v];
    v = parent >= 0 ? parent : b->c->leaf_base[stack[depth - 1]];
  }
  *n = 0;
  while (depth > 0) {
    int w = stack[--depth];
    kiln_fuse_xform *x = &xf[(*n)++];
    memset(x, 0, sizeof *x);
    x->kind = KILN_FUSE_XF_VIEW;
    x->node = b->leaf_node[w];
    x->out = b->leaf_out[w];
  }
  return v;
}

static bool same_xf(const kiln_fuse_xform *a, const kiln_fuse_xform *b) {
  if (a->kind != b->kind || a->node != b->node || a->out != b->out || a->rank != b->rank) return false;
  for (int d = 0; d < a->rank; d++)
    if (a->dims[d] != b->dims[d]) return false;
  return true;
}

/* The accessor reading memory value base through xf[0..n); found or added. */
static int access(builder *b, int base, const kiln_fuse_xform *xf, int n, bool reduced, bool own_shape) {
  kiln_fuse_spec *sp = b->sp;
  for (int a = 0; a < sp->n_access; a++) {
    const kiln_fuse_access *x = &sp->access[a];
    bool same = x->value == base && x->reduced == reduced && x->own_shape == own_shape && x->n_xf == n;
    for (int i = 0; same && i < n; i++) same = same_xf(&x->xf[i], &xf[i]);
    if (same) return a;
  }
  void *grown = grow(b, sp->access, &b->cap_access, sp->n_access, sizeof *sp->access);
  if (!grown) return -1;
  sp->access = grown;
  kiln_fuse_access *x = &sp->access[sp->n_access];
  memset(x, 0, sizeof *x);
  x->value = base;
  x->reduced = reduced;
  x->own_shape = own_shape;
  x->n_xf = n;
  memcpy(x->xf, xf, sizeof *xf * (size_t)n);
  return sp->n_access++;
}

/* The expression loading value v (MEM or LEAF) as an operand of an op whose
 * output has shape (rank, dims), in the space given; pre (n_pre steps) is
 * applied right after the value's own chain (BatchNormalization's
 * per-channel reshape). */
static int load(builder *b, int v, int rank, const kiln_dimx *dims, bool reduced, const kiln_fuse_xform *pre,
                int n_pre, int node) {
  if (b->st) return -1;
  kiln_symtab *tab = b->c->sh->tab;
  kiln_fuse_xform xf[KILN_FUSE_MAX_CHAIN];
  int n = 0;
  int base = chain_of(b, v, xf, &n);
  if (base < 0 || n + n_pre + 2 > KILN_FUSE_MAX_CHAIN) {
    b->st = kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "fuse: a chain of views longer than %d", KILN_FUSE_MAX_CHAIN);
    return -1;
  }
  int cr = b->c->sh->v[v].rank;
  const kiln_dimx *cd = b->c->sh->v[v].dims;
  for (int i = 0; i < n_pre; i++) {
    xf[n++] = pre[i];
    cr = pre[i].rank;
    cd = pre[i].dims;
  }
  if (!kiln_fuse_shape_eq(tab, cr, cd, rank, dims)) set_xf(&xf[n++], KILN_FUSE_XF_BCAST, rank, dims);
  const kiln_dimx *target = reduced ? b->red_dims : b->sp->dims;
  if (!kiln_fuse_shape_eq(tab, rank, dims, b->sp->rank, target)) set_xf(&xf[n++], KILN_FUSE_XF_RESHAPE, b->sp->rank, target);
  int a = access(b, base, xf, n, reduced, false);
  if (a < 0) return -1;
  for (int e = 0; e < b->sp->n_expr; e++)
    if (b->sp->expr[e].op == KILN_FUSE_LOAD && b->sp->expr[e].ref == a) return e;
  int e = ex(b, KILN_FUSE_LOAD, b->c->sh->v[base].dtype, reduced, 0, -1, -1, -1, node);
  if (e >= 0) b->sp->expr[e].ref = a;
  return e;
}

/* Operand k of node n (output shape rank/dims, space reduced or not). */
static int operand(builder *b, const kiln_node *n, int k, int rank, const kiln_dimx *dims, bool reduced, int node) {
  int v = n->in[k];
  int r = role(b, v);
  if (r == KILN_FUSE_ROLE_FULL || r == KILN_FUSE_ROLE_REDUCED) return b->expr_of[v];
  return load(b, v, rank, dims, reduced, NULL, 0, node);
}

/* A per-channel parameter ([C]) of a node over an N x C x D1... domain
 * (output shape xs): reshaped to [C,1,...,1], then broadcast. */
static int channel_param(builder *b, const kiln_node *n, int k, const kiln_vshape *xs, bool reduced, int node) {
  int v = n->in[k];
  const kiln_vshape *ps = &b->c->sh->v[v];
  if (ps->rank != 1) return load(b, v, xs->rank, xs->dims, reduced, NULL, 0, node); /* BatchNormalization spatial=0 */
  kiln_fuse_xform pre;
  kiln_dimx dims[KILN_MAX_RANK], one;
  if (kiln_dimx_const(b->c->sh->tab, 1, &one)) {
    b->st = kiln_fail(KILN_E_INTERNAL, "fuse: no constant 1");
    return -1;
  }
  dims[0] = ps->dims[0];
  for (int d = 1; d < xs->rank - 1; d++) dims[d] = one;
  set_xf(&pre, KILN_FUSE_XF_RESHAPE, xs->rank - 1, dims);
  return load(b, v, xs->rank, xs->dims, reduced, &pre, 1, node);
}

/* ---- ops ---- */

enum { F_UNARY, F_BINARY, F_FOLD, F_MEAN, F_WHERE, F_CLIP, F_CAST, F_CASTLIKE, F_COPY, F_MOD, F_SHIFT, F_BN, F_ISINF };

/* ONNX op -> expression op, with up to three float attributes (f[0..2]). */
static const struct ew_map {
  const char *op_type;
  kiln_fuse_op op;
  int form;
  const char *attr[3];
  float def[3];
} ew_table[] = {
    {"Abs", KILN_FUSE_ABS, F_UNARY, {0}, {0}},
    {"Neg", KILN_FUSE_NEG, F_UNARY, {0}, {0}},
    {"Sqrt", KILN_FUSE_SQRT, F_UNARY, {0}, {0}},
    {"Exp", KILN_FUSE_EXP, F_UNARY, {0}, {0}},
    {"Log", KILN_FUSE_LOG, F_UNARY, {0}, {0}},
    {"Reciprocal", KILN_FUSE_RECIP, F_UNARY, {0}, {0}},
    {"Floor", KILN_FUSE_FLOOR, F_UNARY, {0}, {0}},
    {"Ceil", KILN_FUSE_CEIL, F_UNARY, {0}, {0}},
    {"Relu", KILN_FUSE_RELU, F_UNARY, {0}, {0}},
    {"LeakyRelu", KILN_FUSE_LEAKY_RELU, F_UNARY, {"alpha"}, {0.01f}},
    {"Elu", KILN_FUSE_ELU, F_UNARY, {"alpha"}, {1.0f}},
    {"Selu", KILN_FUSE_SELU, F_UNARY, {"alpha", NULL, "gamma"}, {1.67326319217681884765625f, 0, 1.05070102214813232421875f}},
    {"Sigmoid", KILN_FUSE_SIGMOID, F_UNARY, {0}, {0}},
    {"HardSigmoid", KILN_FUSE_HARD_SIGMOID, F_UNARY, {"alpha", "beta"}, {0.2f, 0.5f}},
    {"Tanh", KILN_FUSE_TANH, F_UNARY, {0}, {0}},
    {"Softplus", KILN_FUSE_SOFTPLUS, F_UNARY, {0}, {0}},
    {"Softsign", KILN_FUSE_SOFTSIGN, F_UNARY, {0}, {0}},
    {"Erf", KILN_FUSE_ERF, F_UNARY, {0}, {0}},
    {"Sign", KILN_FUSE_SIGN, F_UNARY, {0}, {0}},
    {"HardSwish", KILN_FUSE_HARD_SWISH, F_UNARY, {0}, {0}},
    {"ThresholdedRelu", KILN_FUSE_THRESHOLDED_RELU, F_UNARY, {"alpha"}, {1.0f}},
    {"Celu", KILN_FUSE_CELU, F_UNARY, {"alpha"}, {1.0f}},
    {"Round", KILN_FUSE_ROUND, F_UNARY, {0}, {0}},
    {"Sin", KILN_FUSE_SIN, F_UNARY, {0}, {0}},
    {"Cos", KILN_FUSE_COS, F_UNARY, {0}, {0}},
    {"Tan", KILN_FUSE_TAN, F_UNARY, {0}, {0}},
    {"Asin", KILN_FUSE_ASIN, F_UNARY, {0}, {0}},
    {"Acos", KILN_FUSE_ACOS, F_UNARY, {0}, {0}},
    {"Atan", KILN_FUSE_ATAN, F_UNARY, {0}, {0}},
    {"Sinh", KILN_FUSE_SINH, F_UNARY, {0}, {0}},
    {"Cosh", KILN_FUSE_COSH, F_UNARY, {0}, {0}},
    {"Asinh", KILN_FUSE_ASINH, F_UNARY, {0}, {0}},
    {"Acosh", KILN_FUSE_ACOSH, F_UNARY, {0}, {0}},
    {"Atanh", KILN_FUSE_ATANH, F_UNARY, {0}, {0}},
    {"Shrink", KILN_FUSE_SHRINK, F_UNARY, {"lambd", "bias"}, {0.5f, 0.0f}},
    {"Not", KILN_FUSE_NOT, F_UNARY, {0}, {0}},
    {"IsNaN", KILN_FUSE_ISNAN, F_UNARY, {0}, {0}},
    {"IsInf", KILN_FUSE_ISINF, F_ISINF, {0}, {0}},
    {"Add", KILN_FUSE_ADD, F_BINARY, {0}, {0}},
    {"Sub", KILN_FUSE_SUB, F_BINARY, {0}, {0}},
    {"Mul", KILN_FUSE_MUL, F_BINARY, {0}, {0}},
    {"Div", KILN_FUSE_DIV, F_BINARY, {0}, {0}},
    {"Mod", KILN_FUSE_MOD, F_MOD, {0}, {0}},
    {"Pow", KILN_FUSE_POW, F_BINARY, {0}, {0}},
    {"PRelu", KILN_FUSE_PRELU, F_BINARY, {0}, {0}},
    {"BitShift", KILN_FUSE_SHL, F_SHIFT, {0}, {0}},
    {"Min", KILN_FUSE_MIN, F_FOLD, {0}, {0}},
    {"Max", KILN_FUSE_MAX, F_FOLD, {0}, {0}},
    {"Sum", KILN_FUSE_ADD, F_FOLD, {0}, {0}},
    {"Mean", KILN_FUSE_ADD, F_MEAN, {0}, {0}},
    {"Equal", KILN_FUSE_EQ, F_BINARY, {0}, {0}},
    {"Greater", KILN_FUSE_GT, F_BINARY, {0}, {0}},
    {"Less", KILN_FUSE_LT, F_BINARY, {0}, {0}},
    {"GreaterOrEqual", KILN_FUSE_GE, F_BINARY, {0}, {0}},
    {"LessOrEqual", KILN_FUSE_LE, F_BINARY, {0}, {0}},
    {"And", KILN_FUSE_AND, F_BINARY, {0}, {0}},
    {"Or", KILN_FUSE_OR, F_BINARY, {0}, {0}},
    {"Xor", KILN_FUSE_XOR, F_BINARY, {0}, {0}},
    {"Where", KILN_FUSE_WHERE, F_WHERE, {0}, {0}},
    {"Clip", KILN_FUSE_CLIP, F_CLIP, {0}, {0}},
    {"Cast", KILN_FUSE_CAST, F_CAST, {0}, {0}},
    {"CastLike", KILN_FUSE_CAST, F_CASTLIKE, {0}, {0}},
    {"Dropout", KILN_FUSE_COPY, F_COPY, {0}, {0}},
    {"BatchNormalization", KILN_FUSE_ADD, F_BN, {0}, {0}},
};

static const struct ew_map *ew_find(const char *op_type) {
  for (size_t i = 0; i < sizeof ew_table / sizeof *ew_table; i++)
    if (!strcmp(ew_table[i].op_type, op_type)) return &ew_table[i];
  return NULL;
}

/* An elementwise, broadcast or casting node. */
static int compute(builder *b, int node) {
  const kiln_node *n = &b->c->g->nodes[node];
  const struct ew_map *m = ew_find(n->op_type);
  int w = n->out[0];
  if (!m) {
    b->st = kiln_fail(KILN_E_INTERNAL, "fuse: no expression form for %s", n->op_type);
    return -1;
  }
  const kiln_vshape *ws = &b->c->sh->v[w];
  bool red = role(b, w) == KILN_FUSE_ROLE_REDUCED;
  kiln_dtype dt = ws->dtype;
  int a[3] = {-1, -1, -1};
  for (int k = 0; k < n->n_in && k < 3 && m->form != F_BN && m->form != F_FOLD && m->form != F_MEAN; k++)
    if (kiln_fuse_data_input(n, k)) a[k] = operand(b, n, k, ws->rank, ws->dims, red, node);
  int e = -1;
  switch (m->form) {
  case F_UNARY:
  case F_ISINF:
    e = ex(b, m->op, dt, red, 1, a[0], -1, -1, node);
    if (e < 0) break;
    for (int i = 0; i < 3; i++)
      b->sp->expr[e].f[i] = m->attr[i] ? (double)kiln_attr_float(n, m->attr[i], m->def[i]) : (double)m->def[i];
    if (m->form == F_ISINF)
      b->sp->expr[e].i = (kiln_attr_int(n, "detect_negative", 1) ? 1 : 0) | (kiln_attr_int(n, "detect_positive", 1) ? 2 : 0);
    break;
  case F_BINARY: e = ex(b, m->op, dt, red, 2, a[0], a[1], -1, node); break;
  case F_MOD:
    e = ex(b, kiln_attr_int(n, "fmod", 0) ? KILN_FUSE_FMOD : KILN_FUSE_MOD, dt, red, 2, a[0], a[1], -1, node);
    break;
  case F_SHIFT:
    e = ex(b, !strcmp(kiln_attr_string(n, "direction", ""), "LEFT") ? KILN_FUSE_SHL : KILN_FUSE_SHR, dt, red, 2,
           a[0], a[1], -1, node);
    break;
  case F_FOLD:
  case F_MEAN: {
    int nin = n->n_in;
    e = operand(b, n, 0, ws->rank, ws->dims, red, node);
    for (int k = 1; k < nin && e >= 0; k++) {
      int x = operand(b, n, k, ws->rank, ws->dims, red, node);
      e = ex(b, m->op, k == nin - 1 && m->form == F_FOLD ? dt : wide(dt), red, 2, e, x, -1, node);
    }
    if (m->form == F_MEAN && e >= 0) {
      int cn = kiln_dtype_is_float(dt) ? cst_f(b, nin, red, node) : cst_i(b, wide(dt), nin, red, node);
      e = ex(b, KILN_FUSE_DIV, dt, red, 2, e, cn, -1, node);
    } else if (nin == 1 && e >= 0) {
      e = ex(b, KILN_FUSE_COPY, dt, red, 1, e, -1, -1, node);
    }
    break;
  }
  case F_WHERE: e = ex(b, KILN_FUSE_WHERE, dt, red, 3, a[0], a[1], a[2], node); break;
  case F_CLIP: {
    int x = a[0], lo = a[1], hi = a[2];
    if (n->opset < 11) {
      if (dt != KILN_F64) x = ex(b, KILN_FUSE_CAST, KILN_F64, red, 1, x, -1, -1, node);
      lo = cst_f(b, kiln_attr_float(n, "min", -FLT_MAX), red, node);
      hi = cst_f(b, kiln_attr_float(n, "max", FLT_MAX), red, node);
    } else {
      bool f = kiln_dtype_is_float(dt), s = kiln_dtype_is_signed(dt);
      if (lo < 0) lo = f ? cst_f(b, -INFINITY, red, node) : cst_i(b, s ? KILN_I64 : KILN_U64, s ? INT64_MIN : 0, red, node);
      if (hi < 0) hi = f ? cst_f(b, INFINITY, red, node) : cst_i(b, s ? KILN_I64 : KILN_U64, s ? INT64_MAX : -1, red, node);
    }
    e = ex(b, KILN_FUSE_CLIP, dt, red, 3, x, lo, hi, node);
    break;
  }
  case F_CAST:
  case F_CASTLIKE: e = ex(b, KILN_FUSE_CAST, dt, red, 1, a[0], -1, -1, node); break;
  case F_COPY: e = ex(b, KILN_FUSE_COPY, dt, red, 1, a[0], -1, -1, node); break;
  case F_BN: {
    const kiln_vshape *xs = ws;
    int x = operand(b, n, 0, ws->rank, ws->dims, red, node);
    int sc = channel_param(b, n, 1, xs, red, node), bb = channel_param(b, n, 2, xs, red, node);
    int mu = channel_param(b, n, 3, xs, red, node), var = channel_param(b, n, 4, xs, red, node);
    int eps = cst_f(b, kiln_attr_float(n, "epsilon", 1e-5f), red, node);
    int d = ex(b, KILN_FUSE_SUB, KILN_F64, red, 2, x, mu, -1, node);
    int t = ex(b, KILN_FUSE_MUL, KILN_F64, red, 2, sc, d, -1, node);
    int ve = ex(b, KILN_FUSE_ADD, KILN_F64, red, 2, var, eps, -1, node);
    int sq = ex(b, KILN_FUSE_SQRT, KILN_F64, red, 1, ve, -1, -1, node);
    int q = ex(b, KILN_FUSE_DIV, KILN_F64, red, 2, t, sq, -1, node);
    e = ex(b, KILN_FUSE_ADD, dt, red, 2, q, bb, -1, node);
    break;
  }
  }
  return e;
}

/* ---- reductions ---- */

static int reduce(builder *b, kiln_fuse_red_kind kind, int arg, kiln_dtype dt, int node) {
  kiln_fuse_spec *sp = b->sp;
  if (b->st || arg < 0) return -1;
  void *grown = grow(b, sp->red, &b->cap_red, sp->n_red, sizeof *sp->red);
  if (!grown) return -1;
  sp->red = grown;
  kiln_fuse_reduce *rd = &sp->red[sp->n_red];
  rd->kind = kind;
  rd->arg = arg;
  rd->dtype = dt;
  rd->node = node;
  int e = ex(b, KILN_FUSE_REDUCE, dt, true, 0, -1, -1, -1, node);
  if (e >= 0) sp->expr[e].ref = sp->n_red++;
  return e;
}

static int unary(builder *b, kiln_fuse_op op, kiln_dtype dt, bool red, int a, int node) {
  return ex(b, op, dt, red, 1, a, -1, -1, node);
}

static int binary(builder *b, kiln_fuse_op op, kiln_dtype dt, bool red, int x, int y, int node) {
  return ex(b, op, dt, red, 2, x, y, -1, node);
}

/* A reduction node: sets expr_of its outputs. */
static void reduction(builder *b, int node) {
  const kiln_node *n = &b->c->g->nodes[node];
  const char *op = n->op_type;
  const kiln_vshape *us = &b->c->sh->v[n->in[0]];
  int w = n->out[0];
  kiln_dtype dt = b->c->sh->v[w].dtype, xt = us->dtype;
  int u = operand(b, n, 0, us->rank, us->dims, false, node);
  /* L2, LogSum and LogSumExp work in double for integer inputs too */
  bool by_float = !strcmp(op, "ReduceL2") || !strcmp(op, "ReduceLogSum") || !strcmp(op, "ReduceLogSumExp");
  int uf = kiln_dtype_is_float(xt) || !by_float ? u : unary(b, KILN_FUSE_CAST, KILN_F64, false, u, node);
  int y = -1;
  if (!strcmp(op, "Softmax") || !strcmp(op, "LogSoftmax")) {
    int mx = reduce(b, KILN_FUSE_RED_MAX, u, KILN_F64, node);
    int d = binary(b, KILN_FUSE_SUB, KILN_F64, false, u, mx, node);
    int e = unary(b, KILN_FUSE_EXP, KILN_F64, false, d, node);
    int s = reduce(b, KILN_FUSE_RED_SUM, e, KILN_F64, node);
    if (!strcmp(op, "Softmax")) y = binary(b, KILN_FUSE_DIV, dt, false, e, s, node);
    else y = binary(b, KILN_FUSE_SUB, dt, false, d, unary(b, KILN_FUSE_LOG, KILN_F64, true, s, node), node);
  } else if (!strcmp(op, "LayerNormalization") || !strcmp(op, "InstanceNormalization")) {
    bool ln = op[0] == 'L';
    double eps = kiln_attr_float(n, "epsilon", 1e-5f);
    int mean = reduce(b, KILN_FUSE_RED_MEAN, u, KILN_F64, node);
    int d = binary(b, KILN_FUSE_SUB, KILN_F64, false, u, mean, node);
    int var = reduce(b, KILN_FUSE_RED_MEAN, binary(b, KILN_FUSE_MUL, KILN_F64, false, d, d, node), KILN_F64, node);
    int sd = unary(b, KILN_FUSE_SQRT, KILN_F64, true, binary(b, KILN_FUSE_ADD, KILN_F64, true, var, cst_f(b, eps, true, node), node), node);
    int inv = binary(b, KILN_FUSE_DIV, KILN_F64, true, cst_f(b, 1.0, true, node), sd, node);
    bool has_b = n->n_in > 2 && n->in[2] >= 0;
    int sc = ln ? operand(b, n, 1, us->rank, us->dims, false, node) : channel_param(b, n, 1, us, false, node);
    int t = ln ? binary(b, KILN_FUSE_MUL, KILN_F64, false, binary(b, KILN_FUSE_MUL, KILN_F64, false, d, inv, node), sc, node)
               : binary(b, KILN_FUSE_MUL, KILN_F64, false, binary(b, KILN_FUSE_MUL, KILN_F64, false, sc, d, node), inv, node);
    if (has_b) {
      int bb = ln ? operand(b, n, 2, us->rank, us->dims, false, node) : channel_param(b, n, 2, us, false, node);
      y = binary(b, KILN_FUSE_ADD, dt, false, t, bb, node);
    } else {
      y = unary(b, KILN_FUSE_CAST, dt, false, t, node);
    }
    if (ln && n->n_out > 1 && n->out[1] >= 0)
      b->expr_of[n->out[1]] = unary(b, KILN_FUSE_CAST, b->c->sh->v[n->out[1]].dtype, true, mean, node);
    if (ln && n->n_out > 2 && n->out[2] >= 0)
      b->expr_of[n->out[2]] = unary(b, KILN_FUSE_CAST, b->c->sh->v[n->out[2]].dtype, true, inv, node);
  } else if (!strcmp(op, "ReduceSum") || !strcmp(op, "ReduceMean") || !strcmp(op, "ReduceMax") ||
             !strcmp(op, "ReduceMin") || !strcmp(op, "ReduceProd")) {
    kiln_fuse_red_kind k = op[6] == 'S' ? KILN_FUSE_RED_SUM
                           : op[7] == 'e' ? KILN_FUSE_RED_MEAN
                           : op[7] == 'a' ? KILN_FUSE_RED_MAX
                           : op[7] == 'i' ? KILN_FUSE_RED_MIN
                                          : KILN_FUSE_RED_PROD;
    y = reduce(b, k, u, dt, node);
  } else if (!strcmp(op, "ReduceL1")) {
    y = reduce(b, KILN_FUSE_RED_SUM, unary(b, KILN_FUSE_ABS, wide(xt), false, u, node), dt, node);
  } else if (!strcmp(op, "ReduceSumSquare")) {
    y = reduce(b, KILN_FUSE_RED_SUM, binary(b, KILN_FUSE_MUL, wide(xt), false, u, u, node), dt, node);
  } else if (!strcmp(op, "ReduceL2")) {
    int s = reduce(b, KILN_FUSE_RED_SUM, binary(b, KILN_FUSE_MUL, KILN_F64, false, uf, uf, node), KILN_F64, node);
    y = unary(b, KILN_FUSE_SQRT, dt, true, s, node);
  } else if (!strcmp(op, "ReduceLogSum")) {
    y = unary(b, KILN_FUSE_LOG, dt, true, reduce(b, KILN_FUSE_RED_SUM, uf, KILN_F64, node), node);
  } else if (!strcmp(op, "ReduceLogSumExp")) {
    int mx = reduce(b, KILN_FUSE_RED_MAX, uf, KILN_F64, node);
    int isn = unary(b, KILN_FUSE_ISNAN, KILN_BOOL, true, mx, node);
    int isi = unary(b, KILN_FUSE_ISINF, KILN_BOOL, true, mx, node);
    if (isi >= 0) b->sp->expr[isi].i = 3;
    int bad = binary(b, KILN_FUSE_OR, KILN_BOOL, true, isn, isi, node);
    int sh = ex(b, KILN_FUSE_WHERE, KILN_F64, true, 3, bad, cst_f(b, 0, true, node), mx, node);
    int e = unary(b, KILN_FUSE_EXP, KILN_F64, false, binary(b, KILN_FUSE_SUB, KILN_F64, false, uf, sh, node), node);
    int s = reduce(b, KILN_FUSE_RED_SUM, e, KILN_F64, node);
    y = binary(b, KILN_FUSE_ADD, dt, true, sh, unary(b, KILN_FUSE_LOG, KILN_F64, true, s, node), node);
  } else if (!b->st) {
    b->st = kiln_fail(KILN_E_INTERNAL, "fuse: no reduction form for %s", op);
  }
  b->expr_of[w] = y;
}

/* ---- the spec ---- */

static kiln_status add_store(builder *b, int v, int e, bool reduced, bool pool) {
  kiln_fuse_spec *sp = b->sp;
  if (e < 0) return b->st ? b->st : kiln_fail(KILN_E_INTERNAL, "fuse: value %d has no expression", v);
  void *grown = grow(b, sp->store, &b->cap_store, sp->n_store, sizeof *sp->store);
  if (!grown) return b->st;
  sp->store = grown;
  kiln_fuse_store *st = &sp->store[sp->n_store++];
  memset(st, 0, sizeof *st);
  st->value = v;
  st->expr = e;
  st->reduced = reduced;
  st->pool = pool;
  return KILN_OK;
}

static kiln_status add_alias(builder *b, int v) {
  kiln_fuse_spec *sp = b->sp;
  kiln_fuse_xform xf[KILN_FUSE_MAX_CHAIN];
  int n = 0;
  int base = chain_of(b, v, xf, &n);
  if (base < 0) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "fuse: a chain of views longer than %d", KILN_FUSE_MAX_CHAIN);
  int a = access(b, base, xf, n, false, true);
  if (a < 0) return b->st;
  void *grown = grow(b, sp->alias, &b->cap_alias, sp->n_alias, sizeof *sp->alias);
  if (!grown) return b->st;
  sp->alias = grown;
  kiln_fuse_alias *al = &sp->alias[sp->n_alias++];
  al->value = v;
  al->access = a;
  al->copy = b->c->g->values[v].is_output;
  return KILN_OK;
}

static kiln_status build(builder *b, const int *nodes, int n_nodes, const int *writes, int n_writes) {
  const kiln_fuse_ctx *c = b->c;
  const kiln_fuse_gstate *G = b->G;
  kiln_fuse_spec *sp = b->sp;
  kiln_symtab *tab = c->sh->tab;
  sp->n_nodes = n_nodes;
  if (!(sp->nodes = kiln_malloc(sizeof *sp->nodes * (size_t)(n_nodes + 1))))
    return kiln_fail(KILN_E_NOMEM, "fuse: out of memory building a spec");
  memcpy(sp->nodes, nodes, sizeof *nodes * (size_t)n_nodes);
  sp->anchor = G->anchor;
  sp->pool = G->pool;
  sp->opaque = G->opaque;
  if (G->opaque >= 0) {
    sp->kind = KILN_FUSE_G_OPAQUE;
    return KILN_OK;
  }
  sp->kind = G->anchor >= 0 ? KILN_FUSE_G_ANCHOR
             : G->n_red > 0 ? KILN_FUSE_G_REDUCE
             : G->has_domain ? KILN_FUSE_G_ELEMWISE
                             : KILN_FUSE_G_VIEW;
  if (G->has_domain) {
    sp->rank = G->rank;
    kiln_dimx one;
    if (kiln_dimx_const(tab, 1, &one)) return kiln_fail(KILN_E_INTERNAL, "fuse: no constant 1");
    for (int d = 0; d < G->rank; d++) {
      sp->dims[d] = G->dims[d];
      sp->red_axes[d] = G->n_red > 0 && G->red[d];
      b->red_dims[d] = sp->red_axes[d] ? one : G->dims[d];
    }
  }
  for (int i = 0; i < n_nodes && !b->st; i++) {
    int node = nodes[i];
    const kiln_node *n = &c->g->nodes[node];
    const kiln_fuse_kind_def *def = c->def[node];
    if (def->roles & KILN_FUSE_VIEW) {
      int in = n->in[0], r = role(b, in);
      for (int k = 0; k < n->n_out; k++) {
        int w = n->out[k];
        if (w < 0) continue;
        if (r == KILN_FUSE_ROLE_FULL || r == KILN_FUSE_ROLE_REDUCED) {
          b->expr_of[w] = b->expr_of[in];
        } else {
          b->leaf_parent[w] = r == KILN_FUSE_ROLE_LEAF ? in : -1;
          b->leaf_node[w] = node;
          b->leaf_out[w] = k;
        }
      }
    } else if (def->kind == KILN_FUSE_OUT_EWISE) {
      int w = n->out[0];
      if (node == G->pool) {
        b->expr_of[w] = b->expr_of[n->in[0]];
      } else {
        b->expr_of[w] = ex(b, KILN_FUSE_ANCHOR, c->sh->v[w].dtype, false, 0, -1, -1, -1, node);
      }
    } else if (def->kind == KILN_FUSE_REDUCTION) {
      reduction(b, node);
    } else {
      b->expr_of[n->out[0]] = compute(b, node);
    }
  }
  if (b->st) return b->st;
  for (int i = 0; i < n_writes; i++) {
    int v = writes[i], r = role(b, v);
    kiln_status s;
    if (r == KILN_FUSE_ROLE_LEAF) s = add_alias(b, v);
    else if (r == KILN_FUSE_ROLE_FULL || r == KILN_FUSE_ROLE_REDUCED || r == KILN_FUSE_ROLE_POOLED)
      s = add_store(b, v, b->expr_of[v], r == KILN_FUSE_ROLE_REDUCED, r == KILN_FUSE_ROLE_POOLED);
    else s = kiln_fail(KILN_E_INTERNAL, "fuse: group writes '%s', which it does not compute", c->g->values[v].name);
    if (s) return s;
  }
  return KILN_OK;
}

kiln_status kiln_fuse_spec_build(const kiln_fuse_ctx *c, int gid, const int *nodes, int n_nodes, const int *writes,
                                 int n_writes, kiln_fuse_spec **out) {
  *out = NULL;
  if (gid < 0 || gid >= c->n_groups) return kiln_fail(KILN_E_INTERNAL, "fuse: no group %d", gid);
  for (int i = 0; i < n_nodes; i++)
    if (nodes[i] < 0 || nodes[i] >= c->g->n_nodes || c->group_of[nodes[i]] != gid)
      return kiln_fail(KILN_E_INTERNAL, "fuse: node %d is not in group %d", nodes[i], gid);
  builder b = {0};
  b.c = c;
  b.G = &c->groups[gid];
  b.gid = gid;
  size_t nv = (size_t)c->g->n_values + 1;
  b.sp = kiln_calloc(1, sizeof *b.sp);
  b.expr_of = kiln_malloc(sizeof(int) * nv);
  b.leaf_parent = kiln_malloc(sizeof(int) * nv);
  b.leaf_node = kiln_malloc(sizeof(int) * nv);
  b.leaf_out = kiln_malloc(sizeof(int) * nv);
  kiln_status s = KILN_OK;
  if (!b.sp || !b.expr_of || !b.leaf_parent || !b.leaf_node || !b.leaf_out) {
    s = kiln_fail(KILN_E_NOMEM, "fuse: out of memory building a spec");
  } else {
    for (size_t v = 0; v < nv; v++) b.expr_of[v] = b.leaf_parent[v] = b.leaf_node[v] = b.leaf_out[v] = -1;
    b.sp->g = c->g;
    b.sp->sh = c->sh;
    b.sp->anchor = b.sp->pool = b.sp->opaque = -1;
    s = build(&b, nodes, n_nodes, writes, n_writes);
  }
  if (!s && b.sp->n_expr > 0) { /* observers: which expression holds each computed value */
    int cnt = 0;
    for (int i = 0; i < n_nodes; i++) cnt += c->g->nodes[nodes[i]].n_out;
    b.sp->vexpr = kiln_calloc((size_t)cnt + 1, sizeof *b.sp->vexpr);
    if (!b.sp->vexpr) s = kiln_fail(KILN_E_NOMEM, "fuse: out of memory building a spec");
    for (int i = 0; i < n_nodes && !s; i++) {
      const kiln_node *n = &c->g->nodes[nodes[i]];
      for (int k = 0; k < n->n_out; k++) {
        int w = n->out[k], e = w >= 0 ? b.expr_of[w] : -1;
        if (e >= 0 && e < b.sp->n_expr && !b.sp->expr[e].reduced)
          b.sp->vexpr[b.sp->n_vexpr++] = (struct kiln_fuse_vexpr){w, e};
      }
    }
    /* views of memory in the group whose load reads exactly them: the
       last view of the accessor's chain (row-major reshapes after it at
       most), and the views before it as long as those after them only
       reshape (same elements, same order) */
    for (int e = 0; e < b.sp->n_expr && !s; e++) {
      const kiln_fuse_expr *x = &b.sp->expr[e];
      if (x->op != KILN_FUSE_LOAD || x->reduced || x->ref < 0 || x->ref >= b.sp->n_access) continue;
      const kiln_fuse_access *a = &b.sp->access[x->ref];
      if (a->reduced || a->own_shape) continue;
      for (int k = a->n_xf - 1; k >= 0; k--) {
        if (a->xf[k].kind == KILN_FUSE_XF_RESHAPE) continue;
        if (a->xf[k].kind != KILN_FUSE_XF_VIEW) break;
        const kiln_node *vn = &c->g->nodes[a->xf[k].node];
        int w = a->xf[k].out >= 0 && a->xf[k].out < vn->n_out ? vn->out[a->xf[k].out] : -1;
        bool in_group = false, dup = false;
        for (int i = 0; i < n_nodes; i++) in_group = in_group || nodes[i] == a->xf[k].node;
        for (int q = 0; q < b.sp->n_vexpr; q++) dup = dup || b.sp->vexpr[q].value == w;
        if (w >= 0 && in_group && !dup && b.sp->n_vexpr < cnt) b.sp->vexpr[b.sp->n_vexpr++] = (struct kiln_fuse_vexpr){w, e};
        const char *op = vn->op_type;
        if (strcmp(op, "Reshape") && strcmp(op, "Flatten") && strcmp(op, "Squeeze") && strcmp(op, "Unsqueeze") &&
            strcmp(op, "Identity"))
          break;
      }
    }
  }
  if (!s && b.sp->kind != KILN_FUSE_G_OPAQUE) {
    if (kiln_fuse_spec_bind(b.sp, c->vals, c->n_vals)) kiln_error_clear(); /* stays unbound: symbolic dims */
  } else if (!s) {
    b.sp->bound = true;
  }
  kiln_free(b.expr_of);
  kiln_free(b.leaf_parent);
  kiln_free(b.leaf_node);
  kiln_free(b.leaf_out);
  if (s) {
    kiln_fuse_spec_free(b.sp);
    return s;
  }
  *out = b.sp;
  return KILN_OK;
}
