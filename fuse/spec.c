/* fuse/spec: the kernel spec's op table, binding (symbolic index maps made
 * concrete at given symbol values) and freeing. */
#include "fuse/spec.h"

#include <string.h>

#include "fuse/fuse_impl.h"
#include "ir/alloc.h"

/* Name and arity of every op code, in enum order. */
static const struct {
  kiln_fuse_op op;
  const char *name;
  int arity;
} op_table[] = {
    {KILN_FUSE_LOAD, "load", 0},          {KILN_FUSE_CONST, "const", 0},
    {KILN_FUSE_ANCHOR, "anchor", 0},      {KILN_FUSE_REDUCE, "reduce", 0},
    {KILN_FUSE_ABS, "abs", 1},            {KILN_FUSE_NEG, "neg", 1},
    {KILN_FUSE_SQRT, "sqrt", 1},          {KILN_FUSE_EXP, "exp", 1},
    {KILN_FUSE_LOG, "log", 1},            {KILN_FUSE_RECIP, "recip", 1},
    {KILN_FUSE_FLOOR, "floor", 1},        {KILN_FUSE_CEIL, "ceil", 1},
    {KILN_FUSE_RELU, "relu", 1},          {KILN_FUSE_LEAKY_RELU, "leaky_relu", 1},
    {KILN_FUSE_ELU, "elu", 1},            {KILN_FUSE_SELU, "selu", 1},
    {KILN_FUSE_SIGMOID, "sigmoid", 1},    {KILN_FUSE_HARD_SIGMOID, "hard_sigmoid", 1},
    {KILN_FUSE_TANH, "tanh", 1},          {KILN_FUSE_SOFTPLUS, "softplus", 1},
    {KILN_FUSE_ERF, "erf", 1},            {KILN_FUSE_SIGN, "sign", 1},
    {KILN_FUSE_SOFTSIGN, "softsign", 1},  {KILN_FUSE_HARD_SWISH, "hard_swish", 1},
    {KILN_FUSE_THRESHOLDED_RELU, "thresholded_relu", 1},
    {KILN_FUSE_CELU, "celu", 1},          {KILN_FUSE_ROUND, "round", 1},
    {KILN_FUSE_SIN, "sin", 1},            {KILN_FUSE_COS, "cos", 1},
    {KILN_FUSE_TAN, "tan", 1},            {KILN_FUSE_ASIN, "asin", 1},
    {KILN_FUSE_ACOS, "acos", 1},          {KILN_FUSE_ATAN, "atan", 1},
    {KILN_FUSE_SINH, "sinh", 1},          {KILN_FUSE_COSH, "cosh", 1},
    {KILN_FUSE_ASINH, "asinh", 1},        {KILN_FUSE_ACOSH, "acosh", 1},
    {KILN_FUSE_ATANH, "atanh", 1},        {KILN_FUSE_SHRINK, "shrink", 1},
    {KILN_FUSE_NOT, "not", 1},            {KILN_FUSE_ISNAN, "isnan", 1},
    {KILN_FUSE_ISINF, "isinf", 1},        {KILN_FUSE_CAST, "cast", 1},
    {KILN_FUSE_COPY, "copy", 1},          {KILN_FUSE_ADD, "add", 2},
    {KILN_FUSE_SUB, "sub", 2},            {KILN_FUSE_MUL, "mul", 2},
    {KILN_FUSE_DIV, "div", 2},            {KILN_FUSE_MOD, "mod", 2},
    {KILN_FUSE_FMOD, "fmod", 2},          {KILN_FUSE_MIN, "min", 2},
    {KILN_FUSE_MAX, "max", 2},            {KILN_FUSE_EQ, "eq", 2},
    {KILN_FUSE_GT, "gt", 2},              {KILN_FUSE_LT, "lt", 2},
    {KILN_FUSE_GE, "ge", 2},              {KILN_FUSE_LE, "le", 2},
    {KILN_FUSE_AND, "and", 2},            {KILN_FUSE_OR, "or", 2},
    {KILN_FUSE_XOR, "xor", 2},            {KILN_FUSE_SHL, "shl", 2},
    {KILN_FUSE_SHR, "shr", 2},            {KILN_FUSE_PRELU, "prelu", 2},
    {KILN_FUSE_POW, "pow", 2},            {KILN_FUSE_WHERE, "where", 3},
    {KILN_FUSE_CLIP, "clip", 3},
};

_Static_assert(sizeof op_table / sizeof *op_table == KILN_FUSE_OP_COUNT, "op_table lists every op code");

const char *kiln_fuse_op_name(kiln_fuse_op op) {
  return (unsigned)op < KILN_FUSE_OP_COUNT && op_table[op].op == op ? op_table[op].name : "?";
}

int kiln_fuse_op_arity(kiln_fuse_op op) {
  return (unsigned)op < KILN_FUSE_OP_COUNT && op_table[op].op == op ? op_table[op].arity : -1;
}

const char *kiln_fuse_group_kind_name(kiln_fuse_group_kind k) {
  switch (k) {
  case KILN_FUSE_G_VIEW: return "view";
  case KILN_FUSE_G_ELEMWISE: return "elementwise";
  case KILN_FUSE_G_REDUCE: return "reduce";
  case KILN_FUSE_G_ANCHOR: return "anchor";
  case KILN_FUSE_G_OPAQUE: return "opaque";
  default: return "none";
  }
}

void kiln_fuse_spec_free(kiln_fuse_spec *sp) {
  if (!sp) return;
  kiln_free(sp->nodes);
  kiln_free(sp->access);
  kiln_free(sp->expr);
  kiln_free(sp->red);
  kiln_free(sp->store);
  kiln_free(sp->alias);
  kiln_free(sp->vexpr);
  kiln_free(sp);
}

static kiln_status eval_dims(const kiln_fuse_spec *sp, int rank, const kiln_dimx *dims, const int64_t *vals,
                             int n_vals, int64_t *out) {
  for (int d = 0; d < rank; d++) {
    kiln_status s = kiln_dimx_eval(sp->sh->tab, dims[d], vals, n_vals, &out[d]);
    if (s) return s;
  }
  return KILN_OK;
}

/* Makes accessor a's concrete map: the value's contiguous view, then each
 * step of its chain pushed onto the stack. */
static kiln_status bind_access(const kiln_fuse_spec *sp, kiln_fuse_access *a, const int64_t *vals, int n_vals,
                               const int64_t *want, int want_rank) {
  const kiln_vshape *vs = &sp->sh->v[a->value];
  int64_t dims[KILN_MAX_RANK];
  kiln_status s = eval_dims(sp, vs->rank, vs->dims, vals, n_vals, dims);
  kiln_view base;
  if (s || (s = kiln_view_contiguous(vs->rank, dims, &base))) return s;
  a->numel = base.numel;
  kiln_views_init(&a->map, &base);
  bool padded = false;
  a->pad = 0;
  for (int i = 0; i < a->n_xf; i++) {
    const kiln_fuse_xform *x = &a->xf[i];
    kiln_view_op op;
    double pad = 0;
    if (x->kind == KILN_FUSE_XF_VIEW) {
      s = kiln_fuse_view_op(sp->g, sp->sh, vals, n_vals, &sp->g->nodes[x->node], x->out, &op, &pad);
      if (!s && op.kind == KILN_VOP_PAD) {
        if (padded && pad != a->pad)
          return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "fuse: two Pads with different constants in one map");
        padded = true;
        a->pad = pad;
      }
    } else {
      memset(&op, 0, sizeof op);
      op.kind = x->kind == KILN_FUSE_XF_BCAST ? KILN_VOP_EXPAND : KILN_VOP_RESHAPE;
      op.n = x->rank;
      s = eval_dims(sp, x->rank, x->dims, vals, n_vals, op.shape);
    }
    if (s || (s = kiln_views_push(&a->map, &op))) return s;
  }
  const kiln_view *top = kiln_views_top(&a->map);
  bool same = top->rank == want_rank;
  for (int d = 0; same && d < want_rank; d++) same = top->shape[d] == want[d];
  if (!same) {
    char b1[160], b2[160];
    return kiln_fail(KILN_E_INTERNAL, "fuse: the map of '%s' ends in %s, not %s", sp->g->values[a->value].name,
                     kiln_shape_str(top->rank, top->shape, b1, sizeof b1), kiln_shape_str(want_rank, want, b2, sizeof b2));
  }
  return KILN_OK;
}

kiln_status kiln_fuse_spec_bind(kiln_fuse_spec *sp, const int64_t *vals, int n_vals) {
  sp->bound = false;
  sp->bind_gen++;
  kiln_status s = eval_dims(sp, sp->rank, sp->dims, vals, n_vals, sp->shape);
  if (s) return s;
  sp->numel = sp->red_numel = 1;
  for (int d = 0; d < sp->rank; d++) {
    sp->red_shape[d] = sp->red_axes[d] ? 1 : sp->shape[d];
    sp->numel *= sp->shape[d];
    sp->red_numel *= sp->red_shape[d];
  }
  for (int a = 0; a < sp->n_access; a++) {
    kiln_fuse_access *x = &sp->access[a];
    int64_t own[KILN_MAX_RANK];
    int want_rank = sp->rank;
    const int64_t *want = x->reduced ? sp->red_shape : sp->shape;
    if (x->own_shape) {
      int v = -1;
      for (int i = 0; i < sp->n_alias; i++)
        if (sp->alias[i].access == a) v = sp->alias[i].value;
      if (v < 0) return kiln_fail(KILN_E_INTERNAL, "fuse: accessor %d belongs to no alias", a);
      if ((s = eval_dims(sp, sp->sh->v[v].rank, sp->sh->v[v].dims, vals, n_vals, own))) return s;
      want = own;
      want_rank = sp->sh->v[v].rank;
    }
    if ((s = bind_access(sp, x, vals, n_vals, want, want_rank))) return s;
  }
  for (int i = 0; i < sp->n_store; i++) { /* a store writes every element of its value once */
    kiln_fuse_store *st = &sp->store[i];
    int v = st->value;
    if (st->pool) v = sp->g->nodes[sp->pool].in[0];
    const kiln_vshape *vs = &sp->sh->v[v];
    int64_t *dims = st->shape, n = 1;
    st->rank = vs->rank;
    if ((s = eval_dims(sp, vs->rank, vs->dims, vals, n_vals, dims))) return s;
    for (int d = 0; d < vs->rank; d++) n *= dims[d];
    if (st->pool && st->reduced) return kiln_fail(KILN_E_INTERNAL, "fuse: a reduced pool store");
    kiln_view_op op;
    kiln_view base;
    memset(&op, 0, sizeof op);
    op.kind = KILN_VOP_RESHAPE;
    op.n = sp->rank;
    memcpy(op.shape, st->reduced ? sp->red_shape : sp->shape, sizeof(int64_t) * (size_t)sp->rank);
    if (n == (st->reduced ? sp->red_numel : sp->numel)) {
      if ((s = kiln_view_contiguous(vs->rank, dims, &base))) return s;
      kiln_views_init(&st->map, &base);
      if ((s = kiln_views_push(&st->map, &op))) return s;
    }
    if (n != (st->reduced ? sp->red_numel : sp->numel))
      return kiln_fail(KILN_E_INTERNAL, "fuse: store of '%s' (%lld elements) does not cover its domain (%lld)",
                       sp->g->values[v].name, (long long)n,
                       (long long)(st->reduced ? sp->red_numel : sp->numel));
  }
  sp->bound = true;
  return KILN_OK;
}

bool kiln_fuse_spec_f64_values(const kiln_fuse_spec *sp) {
  for (int k = 0; k < sp->n_nodes; k++) {
    const kiln_node *n = &sp->g->nodes[sp->nodes[k]];
    for (int j = 0; j < n->n_in; j++)
      if (n->in[j] >= 0 && sp->sh->v[n->in[j]].dtype == KILN_F64) return true;
    for (int j = 0; j < n->n_out; j++)
      if (n->out[j] >= 0 && sp->sh->v[n->out[j]].dtype == KILN_F64) return true;
  }
  return false;
}
