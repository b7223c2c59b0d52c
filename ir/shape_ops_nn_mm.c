/* ir/shape_ops_nn_mm: shape functions (see ir/shape.h) of the matrix
 * products of reference/ops_conv.c: MatMul, Gemm, MatMulInteger,
 * QLinearMatMul, Einsum and Det (the convolutions are in shape_ops_nn.c). */
#include <stdio.h>
#include <string.h>

#include "ir/shape.h"

#define TRY(x)                                                                                               \
  do {                                                                                                       \
    kiln_status s_ = (x);                                                                                    \
    if (s_) return s_;                                                                                       \
  } while (0)

static bool is_one(const kiln_shape_call *c, kiln_dimx x) {
  int64_t v;
  return kiln_dimx_is_const(c->tab, x, &v) && v == 1;
}

/* ------------------------------------------------------------------------ */
/* MatMul family                                                            */

/* numpy matmul: a 1-D A is [1,K] (the 1 dropped from the result), a 1-D B
 * [K,1] (likewise); the inner dims unify; the leading (batch) dims
 * broadcast. Sets y's rank and dims. */
static kiln_status mm_shape(kiln_shape_call *c, const kiln_vshape *a, const kiln_vshape *b, kiln_vshape *y) {
  int ra = a->rank, rb = b->rank;
  if (ra < 1 || rb < 1)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "matrix product of inputs of rank %d and %d: rank >= 1 required", ra, rb);
  kiln_dimx ka = a->dims[ra - 1], kb = rb == 1 ? b->dims[0] : b->dims[rb - 2], k;
  TRY(kiln_shape_unify(c, "inner dimension of A vs B", ra - 1, ka, kb, &k));
  kiln_vshape ba, bb, by;
  memset(&ba, 0, sizeof ba);
  memset(&bb, 0, sizeof bb);
  memset(&by, 0, sizeof by);
  ba.rank = ra > 2 ? ra - 2 : 0;
  bb.rank = rb > 2 ? rb - 2 : 0;
  for (int d = 0; d < ba.rank; d++) ba.dims[d] = a->dims[d];
  for (int d = 0; d < bb.rank; d++) bb.dims[d] = b->dims[d];
  const kiln_vshape *ins[2] = {&ba, &bb};
  TRY(kiln_shape_broadcast(c, 2, ins, &by));
  int r = by.rank + (ra > 1) + (rb > 1);
  if (r > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "matrix product of rank %d exceeds kiln's maximum of %d", r,
                     KILN_MAX_RANK);
  y->rank = 0;
  for (int d = 0; d < by.rank; d++) y->dims[y->rank++] = by.dims[d];
  if (ra > 1) y->dims[y->rank++] = a->dims[ra - 2];
  if (rb > 1) y->dims[y->rank++] = b->dims[rb - 1];
  return KILN_OK;
}

static kiln_status matmul(kiln_shape_call *c) {
  const kiln_vshape *a, *b;
  TRY(kiln_shape_in(c, 0, &a));
  TRY(kiln_shape_in(c, 1, &b));
  c->out[0].dtype = a->dtype;
  return mm_shape(c, a, b, &c->out[0]);
}

/* MatMulInteger: A, B, a_zero_point, b_zero_point; int32 output. */
static kiln_status matmulinteger(kiln_shape_call *c) {
  const kiln_vshape *a, *b;
  TRY(kiln_shape_in(c, 0, &a));
  TRY(kiln_shape_in(c, 1, &b));
  c->out[0].dtype = KILN_I32;
  return mm_shape(c, a, b, &c->out[0]);
}

/* QLinearMatMul: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp; the
 * output has y_zero_point's type. */
static kiln_status qlinearmatmul(kiln_shape_call *c) {
  const kiln_vshape *a, *b, *yz;
  TRY(kiln_shape_in(c, 0, &a));
  TRY(kiln_shape_in(c, 3, &b));
  TRY(kiln_shape_in(c, 7, &yz));
  c->out[0].dtype = yz->dtype;
  return mm_shape(c, a, b, &c->out[0]);
}

/* Gemm: op(A) [M,K] x op(B) [K,N] -> [M,N], op a transpose when transA /
 * transB; C (optional) broadcasts unidirectionally to [M,N] (exactly [M,N]
 * before opset 7 without broadcast=1). */
static kiln_status gemm(kiln_shape_call *c) {
  const kiln_vshape *a, *b, *cc = c->n_in > 2 ? c->in[2] : NULL;
  TRY(kiln_shape_in(c, 0, &a));
  TRY(kiln_shape_in(c, 1, &b));
  if (a->rank != 2 || b->rank != 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "A (rank %d) and B (rank %d) must both be 2-D", a->rank, b->rank);
  bool ta = kiln_attr_int(c->node, "transA", 0) != 0, tb = kiln_attr_int(c->node, "transB", 0) != 0;
  kiln_dimx M = a->dims[ta ? 1 : 0], K = a->dims[ta ? 0 : 1], Kb = b->dims[tb ? 1 : 0], N = b->dims[tb ? 0 : 1];
  kiln_dimx u;
  TRY(kiln_shape_unify(c, "inner dimension of A vs B", tb ? 1 : 0, K, Kb, &u));
  kiln_dimx od[2] = {M, N};
  if (cc) {
    bool exact = c->opset < 7 && !kiln_attr_int(c->node, "broadcast", 0);
    if (cc->rank > 2 || (exact && cc->rank != 2))
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "C has rank %d; it cannot be broadcast to the output [M,N]%s",
                       cc->rank, exact ? " (broadcast=0 needs exactly that shape)" : "");
    for (int i = 0; i < cc->rank; i++) {
      int d = 2 - cc->rank + i;
      if (!exact && is_one(c, cc->dims[i])) continue;
      TRY(kiln_shape_unify(c, "C vs the output [M,N]", d, cc->dims[i], od[d], &od[d]));
    }
  }
  kiln_vshape *y = &c->out[0];
  y->dtype = a->dtype;
  y->rank = 2;
  y->dims[0] = od[0];
  y->dims[1] = od[1];
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Einsum                                                                   */

#define EIN_LETTERS 52 /* A-Z then a-z, in ASCII order */
#define EIN_LABELS (EIN_LETTERS + KILN_MAX_RANK)
#define EIN_ELL (-1)

typedef struct ein_term {
  int n;
  int tok[KILN_MAX_RANK + 1]; /* letter ids, EIN_ELL for "..." */
  bool ell;
} ein_term;

static int ein_letter(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + ch - 'a';
  return -1;
}

static kiln_status ein_term_parse(const char *eq, const char **pp, ein_term *t) {
  const char *p = *pp;
  memset(t, 0, sizeof *t);
  for (;;) {
    while (*p == ' ') p++;
    if (!*p || *p == ',' || *p == '-') break;
    int id;
    if (*p == '.') {
      if (strncmp(p, "...", 3) || t->ell)
        return kiln_fail(KILN_E_MODEL, "einsum equation '%s': bad or repeated ellipsis", eq);
      t->ell = true;
      id = EIN_ELL;
      p += 3;
    } else {
      id = ein_letter(*p);
      if (id < 0) return kiln_fail(KILN_E_MODEL, "einsum equation '%s': unexpected character '%c'", eq, *p);
      p++;
    }
    if (t->n > KILN_MAX_RANK)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "einsum equation '%s': a term has more than %d subscripts", eq,
                       KILN_MAX_RANK);
    t->tok[t->n++] = id;
  }
  *pp = p;
  return KILN_OK;
}

/* Sets label l's size to dim (1 broadcasts against any size, as in the
 * reference and numpy; other sizes must unify). */
static kiln_status ein_size(kiln_shape_call *c, bool *used, kiln_dimx *size, int l, kiln_dimx dim, int i, int ax) {
  if (!used[l] || is_one(c, size[l])) {
    size[l] = dim;
    used[l] = true;
    return KILN_OK;
  }
  if (is_one(c, dim)) return KILN_OK;
  char what[64];
  snprintf(what, sizeof what, "einsum operand %d", i);
  return kiln_shape_unify(c, what, ax, size[l], dim, &size[l]);
}

/* Output subscripts: the explicit ones (the ellipsis standing for the
 * broadcast ellipsis dims), or implicitly the ellipsis dims then the letters
 * that occur once, in ASCII order. */
static kiln_status einsum(kiln_shape_call *c) {
  const char *eq = kiln_attr_string(c->node, "equation", NULL);
  if (!eq) return kiln_fail(KILN_E_MODEL, "attribute 'equation' is required");
  int nops = c->n_in;
  const kiln_vshape *x0;
  TRY(kiln_shape_in(c, 0, &x0));
  bool used[EIN_LABELS] = {false};
  int count[EIN_LABELS] = {0};
  kiln_dimx size[EIN_LABELS];
  ein_term term, out;
  int E = 0;
  /* first pass: ellipsis width E (the widest operand's) */
  const char *p = eq;
  for (int i = 0; i < nops; i++) {
    const kiln_vshape *x;
    TRY(kiln_shape_in(c, i, &x));
    TRY(ein_term_parse(eq, &p, &term));
    int letters = term.n - (term.ell ? 1 : 0), w = x->rank - letters;
    if ((term.ell && w < 0) || (!term.ell && w != 0))
      return kiln_fail(KILN_E_MISMATCH_SHAPE,
                       "einsum equation '%s': operand %d has rank %d but its term has %d subscripts%s", eq, i, x->rank,
                       letters, term.ell ? " plus an ellipsis" : "");
    if (w > E) E = w;
    if (i + 1 < nops) {
      if (*p != ',')
        return kiln_fail(KILN_E_MODEL, "einsum equation '%s' has %d operands but the node has %d inputs", eq, i + 1,
                         nops);
      p++;
    }
  }
  bool explicit_out = false;
  if (*p == '-') {
    if (p[1] != '>') return kiln_fail(KILN_E_MODEL, "einsum equation '%s': '-' not followed by '>'", eq);
    p += 2;
    explicit_out = true;
    TRY(ein_term_parse(eq, &p, &out));
  }
  if (*p) return kiln_fail(KILN_E_MODEL, "einsum equation '%s': unexpected '%c'", eq, *p);
  /* second pass: label sizes */
  p = eq;
  for (int i = 0; i < nops; i++) {
    const kiln_vshape *x = c->in[i];
    TRY(ein_term_parse(eq, &p, &term));
    if (*p == ',') p++;
    int w = x->rank - (term.n - (term.ell ? 1 : 0)), ax = 0;
    for (int k = 0; k < term.n; k++) {
      int id = term.tok[k];
      if (id == EIN_ELL) {
        for (int j = 0; j < w; j++, ax++)
          TRY(ein_size(c, used, size, EIN_LETTERS + (E - w) + j, x->dims[ax], i, ax));
      } else {
        count[id]++;
        TRY(ein_size(c, used, size, id, x->dims[ax], i, ax));
        ax++;
      }
    }
  }
  kiln_vshape *y = &c->out[0];
  y->dtype = x0->dtype;
  y->rank = 0;
  int lab[EIN_LABELS], n = 0;
  if (explicit_out) {
    if (E > 0 && !out.ell)
      return kiln_fail(KILN_E_MODEL,
                       "einsum equation '%s': the inputs have %d broadcast (ellipsis) dims but the output has no '...'",
                       eq, E);
    for (int k = 0; k < out.n; k++) {
      int id = out.tok[k];
      if (id == EIN_ELL) {
        for (int j = 0; j < E; j++) lab[n++] = EIN_LETTERS + j;
        continue;
      }
      if (!used[id])
        return kiln_fail(KILN_E_MODEL, "einsum equation '%s': output subscript '%c' appears in no input", eq,
                         id < 26 ? 'A' + id : 'a' + id - 26);
      for (int j = 0; j < n; j++)
        if (lab[j] == id) return kiln_fail(KILN_E_MODEL, "einsum equation '%s': output subscript repeated", eq);
      lab[n++] = id;
    }
  } else {
    for (int j = 0; j < E; j++) lab[n++] = EIN_LETTERS + j;
    for (int l = 0; l < EIN_LETTERS; l++)
      if (count[l] == 1) lab[n++] = l;
  }
  if (n > KILN_MAX_RANK)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "einsum equation '%s': output rank %d exceeds %d", eq, n, KILN_MAX_RANK);
  for (int k = 0; k < n; k++) y->dims[k] = size[lab[k]];
  y->rank = n;
  return KILN_OK;
}

/* ------------------------------------------------------------------------ */
/* Det                                                                      */

/* X [*, M, M] -> [*]. */
static kiln_status det(kiln_shape_call *c) {
  const kiln_vshape *x;
  TRY(kiln_shape_in(c, 0, &x));
  if (x->rank < 2)
    return kiln_fail(KILN_E_MISMATCH_SHAPE, "X has rank %d; [*, M, M] (square matrices) expected", x->rank);
  kiln_dimx u;
  TRY(kiln_shape_unify(c, "X (square matrices)", x->rank - 1, x->dims[x->rank - 1], x->dims[x->rank - 2], &u));
  kiln_vshape *y = &c->out[0];
  y->dtype = x->dtype;
  y->rank = x->rank - 2;
  for (int d = 0; d < y->rank; d++) y->dims[d] = x->dims[d];
  return KILN_OK;
}

const kiln_shape_def kiln_shape_ops_nn_mm[] = {
    {"MatMul", matmul},
    {"Gemm", gemm},
    {"MatMulInteger", matmulinteger},
    {"QLinearMatMul", qlinearmatmul},
    {"Einsum", einsum},
    {"Det", det},
    {NULL, NULL},
};
