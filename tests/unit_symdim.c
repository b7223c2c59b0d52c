/* tests/unit_symdim: unit tests of ir/symdim — canonical forms, evaluation
 * against a direct int64 oracle over thousands of random expressions and
 * bindings, bounds against brute force over the box, printing (re-parsed and
 * evaluated), unification, error paths and limits. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/symdim.h"

static int passed, failed;
#include "tests/check.h"
/* A step that must succeed for the test to mean anything: counted only
 * when it fails. */
#define MUST(st, what)                                                                   \
  do {                                                                                   \
    kiln_status must_s = (st);                                                           \
    if (must_s != KILN_OK) {                                                             \
      failed++;                                                                          \
      printf("FAIL %s:%d: %s: %s: %s\n", __FILE__, __LINE__, what, kiln_status_name(must_s), \
             kiln_last_error());                                                         \
    }                                                                                    \
  } while (0)

static kiln_symtab *T; /* the table the helpers below build in */

static const char *str(kiln_dimx x) {
  static char b[8][512];
  static int i;
  i = (i + 1) % 8;
  return kiln_dimx_str(T, x, b[i], sizeof b[i]);
}

static kiln_dimx K(int64_t v) {
  kiln_dimx x = KILN_DIMX_NONE;
  MUST(kiln_dimx_const(T, v, &x), "const");
  return x;
}

static kiln_dimx SY(const char *name) {
  kiln_dimx x = KILN_DIMX_NONE;
  MUST(kiln_dimx_sym(T, name, &x), name);
  return x;
}

typedef kiln_status (*binop)(kiln_symtab *, kiln_dimx, kiln_dimx, kiln_dimx *);

static kiln_dimx OP(binop f, const char *what, kiln_dimx a, kiln_dimx b) {
  kiln_dimx x = KILN_DIMX_NONE;
  MUST(f(T, a, b, &x), what);
  return x;
}

#define ADD(a, b) OP(kiln_dimx_add, "add", a, b)
#define SUB(a, b) OP(kiln_dimx_sub, "sub", a, b)
#define MUL(a, b) OP(kiln_dimx_mul, "mul", a, b)
#define FDIV(a, b) OP(kiln_dimx_fdiv, "fdiv", a, b)
#define CDIV(a, b) OP(kiln_dimx_cdiv, "cdiv", a, b)
#define MOD(a, b) OP(kiln_dimx_mod, "mod", a, b)
#define MIN(a, b) OP(kiln_dimx_min, "min", a, b)
#define MAX(a, b) OP(kiln_dimx_max, "max", a, b)

static bool is_k(kiln_dimx x, int64_t v) {
  int64_t got;
  return kiln_dimx_is_const(T, x, &got) && got == v;
}

static bool has(const char *msg, const char *part) { return strstr(msg, part) != NULL; }

/* ---- construction and canonical forms ---- */

static void test_canonical(void) {
  MUST(kiln_symtab_create(&T), "create");
  kiln_dimx n = SY("N"), s = SY("S"), b = SY("B"), h = SY("H");
  CHECK(SY("N") == n && kiln_sym_find(T, "N") == 0 && kiln_sym_find(T, "S") == 1 && kiln_sym_find(T, "X") == -1,
        "symbols are interned by name");
  CHECK(kiln_dimx_as_sym(T, s) == 1 && kiln_dimx_as_sym(T, MUL(s, K(2))) == -1 && kiln_dimx_as_sym(T, K(3)) == -1,
        "as_sym");
  CHECK(!strcmp(kiln_sym_name(T, 2), "B") && kiln_sym_name(T, 9) == NULL, "sym_name");
  CHECK(K(5) == K(5) && K(5) != K(6), "constants hash-cons");
  CHECK(MUL(n, K(1)) == n, "x*1 = x");
  CHECK(ADD(n, K(0)) == n, "x+0 = x");
  CHECK(is_k(MUL(n, K(0)), 0), "x*0 = 0: %s", str(MUL(n, K(0))));
  CHECK(is_k(SUB(MUL(n, s), MUL(s, n)), 0), "N*S - S*N = 0");
  kiln_dimx ns = ADD(n, s);
  CHECK(FDIV(MUL(ns, K(3)), K(3)) == ns, "(3*(N+S))/3 = N+S: %s", str(FDIV(MUL(ns, K(3)), K(3))));
  CHECK(ADD(MUL(K(2), n), MUL(K(3), n)) == MUL(K(5), n), "2N+3N = 5N");
  kiln_dimx nsm = MUL(n, s);
  CHECK(ADD(MUL(K(-2), nsm), MUL(nsm, K(7))) == MUL(K(5), nsm), "-2NS+7NS = 5NS");
  CHECK(FDIV(MUL(K(4), n), K(2)) == MUL(K(2), n), "(4N)/2 = 2N: %s", str(FDIV(MUL(K(4), n), K(2))));
  CHECK(FDIV(nsm, s) == n, "(N*S)/S = N: %s", str(FDIV(nsm, s)));
  CHECK(FDIV(MUL(K(4), nsm), MUL(K(2), s)) == MUL(K(2), n), "(4NS)/(2S) = 2N");
  CHECK(FDIV(ADD(MUL(K(4), n), K(1)), K(2)) == MUL(K(2), n), "(4N+1)/2 = 2N (N integer)");
  CHECK(FDIV(ADD(ns, ns), ns) == K(2), "(2(N+S))/(N+S) = 2");
  CHECK(is_k(MOD(nsm, s), 0) && is_k(MOD(ADD(MUL(K(4), n), K(1)), K(2)), 1), "NS%%S = 0, (4N+1)%%2 = 1");
  /* constants fold */
  CHECK(is_k(FDIV(K(7), K(2)), 3) && is_k(FDIV(K(-7), K(2)), -4) && is_k(FDIV(K(7), K(-2)), -4),
        "floor division of constants");
  CHECK(is_k(CDIV(K(7), K(2)), 4) && is_k(CDIV(K(-7), K(2)), -3) && is_k(CDIV(K(7), K(-2)), -3),
        "ceil division of constants");
  CHECK(is_k(MOD(K(-7), K(3)), 2) && is_k(MOD(K(7), K(-3)), -2) && is_k(MOD(K(INT64_MIN), K(-1)), 0),
        "floor remainder of constants");
  CHECK(is_k(MIN(K(3), K(5)), 3) && is_k(MAX(K(3), K(-5)), 3), "min/max of constants");
  CHECK(is_k(ADD(K(40), K(2)), 42) && is_k(SUB(K(40), K(2)), 38) && is_k(MUL(K(-6), K(7)), -42),
        "add/sub/mul of constants");
  /* min / max */
  CHECK(MIN(n, n) == n && MAX(nsm, nsm) == nsm, "min(x,x) = x");
  CHECK(MIN(n, s) == MIN(s, n) && MAX(n, s) == MAX(s, n), "min/max commute");
  CHECK(MIN(MIN(n, s), b) == MIN(n, MIN(s, b)) && MAX(MAX(n, s), b) == MAX(b, MAX(s, n)), "min/max associate");
  CHECK(MIN(n, K(1)) == K(1) && MAX(n, K(1)) == n, "min(N,1) = 1, max(N,1) = N (symbols >= 1)");
  CHECK(MIN(n, ADD(n, K(1))) == n && MAX(MUL(K(2), n), n) == MUL(K(2), n), "dominated operands drop");
  CHECK(MIN(MIN(n, K(64)), K(32)) == MIN(n, K(32)), "min(min(N,64),32) = min(N,32)");
  CHECK(MIN(n, K(64)) != n && !kiln_dimx_is_const(T, MIN(n, K(64)), NULL), "min(N,64) stays");
  /* ring laws */
  CHECK(ADD(n, s) == ADD(s, n) && MUL(n, s) == MUL(s, n), "+ and * commute");
  CHECK(ADD(ADD(n, s), b) == ADD(n, ADD(s, b)) && MUL(MUL(n, s), b) == MUL(n, MUL(s, b)), "+ and * associate");
  CHECK(MUL(K(3), ADD(n, s)) == ADD(MUL(K(3), n), MUL(s, K(3))), "3(N+S) = 3N+3S");
  CHECK(MUL(ADD(n, K(2)), ADD(s, K(1))) == ADD(ADD(nsm, n), ADD(MUL(K(2), s), K(2))), "(N+2)(S+1) expands");
  CHECK(SUB(ADD(n, s), s) == n, "N+S-S = N");
  /* division forms */
  kiln_dimx h2 = FDIV(ADD(h, K(1)), K(2));
  CHECK(CDIV(h, K(2)) == h2, "ceil(H/2) = floor((H+1)/2)");
  CHECK(FDIV(FDIV(n, K(2)), K(3)) == FDIV(n, K(6)), "floor(floor(N/2)/3) = floor(N/6)");
  CHECK(FDIV(ADD(FDIV(n, K(2)), K(1)), K(3)) == FDIV(ADD(n, K(2)), K(6)), "floor((N/2+1)/3) = (N+2)/6");
  CHECK(FDIV(MUL(K(2), n), K(6)) == FDIV(n, K(3)), "(2N)/6 = N/3 (gcd)");
  CHECK(FDIV(ADD(MUL(K(2), n), K(3)), K(4)) == FDIV(ADD(n, K(1)), K(2)), "(2N+3)/4 = (N+1)/2 (gcd)");
  CHECK(FDIV(n, K(-2)) == FDIV(SUB(K(0), n), K(2)), "N/-2 = (-N)/2");
  CHECK(FDIV(ADD(MUL(K(3), n), K(5)), K(2)) == ADD(ADD(n, K(2)), FDIV(ADD(n, K(1)), K(2))),
        "(3N+5)/2 = N+2+(N+1)/2");
  /* conv: out = floor((in + pads - dil*(k-1) - 1)/stride) + 1 */
  kiln_dimx c1 = ADD(FDIV(ADD(h, K(2 - 2 - 1)), K(1)), K(1));
  kiln_dimx c2 = ADD(FDIV(ADD(h, K(2 - 2 - 1)), K(2)), K(1));
  CHECK(c1 == h, "3x3 conv, pad 1, stride 1 keeps H: %s", str(c1));
  CHECK(c2 == h2, "3x3 conv, pad 1, stride 2 is (H+1)/2: %s", str(c2));
  CHECK(CDIV(nsm, s) == n, "ceil(N*S/S) = N: %s", str(CDIV(nsm, s)));
  CHECK(FDIV(ADD(nsm, K(1)), s) == ADD(n, FDIV(K(1), s)), "(N*S+1)/S = N + 1/S");
  kiln_dimx n4 = MOD(n, K(4));
  CHECK(MOD(n4, K(8)) == n4 && is_k(FDIV(n4, K(4)), 0) && is_k(FDIV(ADD(n4, K(4)), K(4)), 1),
        "(N%%4)%%8 = N%%4, (N%%4)/4 = 0, (N%%4+4)/4 = 1");
  CHECK(is_k(MOD(n, K(1)), 0) && FDIV(n, K(1)) == n && CDIV(n, K(1)) == n, "by 1");
  CHECK(MOD(MUL(K(5), n), K(3)) == MOD(MUL(K(2), n), K(3)), "(5N)%%3 = (2N)%%3");
  CHECK(is_k(FDIV(SUB(s, K(1)), s), 0) && is_k(FDIV(K(-1), s), -1), "(S-1)/S = 0, -1/S = -1");
  kiln_dimx sm1 = SUB(s, K(1));
  CHECK(FDIV(MUL(n, sm1), sm1) != n, "(N*(S-1))/(S-1) stays: S-1 may be 0");
  kiln_status st;
  int64_t v;
  int64_t vals[4] = {6, 1, 1, 1};
  st = kiln_dimx_eval(T, FDIV(MUL(n, sm1), sm1), vals, 4, &v);
  CHECK(st == KILN_E_INVALID_SHAPE && has(kiln_last_error(), "S-1"), "... and evaluates to an error at S=1: %s",
        kiln_last_error());
  kiln_symtab_free(T);
  T = NULL;
}

/* ---- random expressions: a tree evaluated directly, and built in the table ---- */

enum { E_CONST, E_SYM, E_ADD, E_SUB, E_MUL, E_FDIV, E_CDIV, E_MOD, E_MIN, E_MAX };
typedef struct ex {
  int op, a, b, sym;
  int64_t k;
} ex;
static ex pool[512];
static int npool;
static const char *const names[3] = {"N", "S", "B"};

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
  return rng_state;
}
static int64_t rnd_in(int64_t lo, int64_t hi) { return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1)); }

/* A random tree; monotone: only +, *, min, max and division by a positive
 * constant over non-negative constants (non-decreasing in every symbol). */
static int gen(int depth, bool monotone) {
  int i = npool++, op;
  if (depth == 0 || rnd() % 10 < 3) {
    if (rnd() % 2) pool[i] = (ex){E_CONST, -1, -1, 0, monotone ? rnd_in(0, 6) : rnd_in(-6, 9)};
    else pool[i] = (ex){E_SYM, -1, -1, (int)(rnd() % 3), 0};
    return i;
  }
  if (monotone) {
    static const int ops[] = {E_ADD, E_MUL, E_FDIV, E_CDIV, E_MIN, E_MAX};
    op = ops[rnd() % 6];
  } else op = E_ADD + (int)(rnd() % 8);
  int a = gen(depth - 1, monotone), b;
  if (op == E_FDIV || op == E_CDIV || op == E_MOD) {
    if (monotone || rnd() % 2) {
      b = npool++;
      pool[b] = (ex){E_CONST, -1, -1, 0, monotone ? rnd_in(1, 5) : rnd_in(-5, 5)};
    } else b = gen(depth - 1, false);
  } else b = gen(depth - 1, monotone);
  pool[i] = (ex){op, a, b, 0, 0};
  return i;
}

enum { O_OK, O_DIVZERO, O_OVERFLOW };

static int64_t fdiv64(int64_t a, int64_t b) { return a / b - (a % b != 0 && ((a < 0) != (b < 0))); }

/* The tree's value at v, computed directly (every operand, eagerly). */
static int oracle(int i, const int64_t *v, int64_t *out) {
  const ex *e = &pool[i];
  if (e->op == E_CONST) return *out = e->k, O_OK;
  if (e->op == E_SYM) return *out = v[e->sym], O_OK;
  int64_t a = 0, b = 0;
  int ra = oracle(e->a, v, &a), rb = oracle(e->b, v, &b);
  if (ra) return ra;
  if (rb) return rb;
  switch (e->op) {
  case E_ADD: return __builtin_add_overflow(a, b, out) ? O_OVERFLOW : O_OK;
  case E_SUB: return __builtin_sub_overflow(a, b, out) ? O_OVERFLOW : O_OK;
  case E_MUL: return __builtin_mul_overflow(a, b, out) ? O_OVERFLOW : O_OK;
  case E_FDIV:
  case E_CDIV:
    if (b == 0) return O_DIVZERO;
    if (a == INT64_MIN && b == -1) return O_OVERFLOW;
    *out = e->op == E_FDIV ? fdiv64(a, b) : -fdiv64(-a, b);
    return O_OK;
  case E_MOD:
    if (b == 0) return O_DIVZERO;
    *out = b == -1 ? 0 : a - b * fdiv64(a, b);
    return O_OK;
  case E_MIN: *out = a < b ? a : b; return O_OK;
  case E_MAX: *out = a > b ? a : b; return O_OK;
  }
  return O_OVERFLOW;
}

static binop op_fn(int op) {
  switch (op) {
  case E_ADD: return kiln_dimx_add;
  case E_SUB: return kiln_dimx_sub;
  case E_MUL: return kiln_dimx_mul;
  case E_FDIV: return kiln_dimx_fdiv;
  case E_CDIV: return kiln_dimx_cdiv;
  case E_MOD: return kiln_dimx_mod;
  case E_MIN: return kiln_dimx_min;
  default: return kiln_dimx_max;
  }
}

/* The tree built through the module, as written. */
static kiln_status build(int i, kiln_dimx *out) {
  const ex *e = &pool[i];
  if (e->op == E_CONST) return kiln_dimx_const(T, e->k, out);
  if (e->op == E_SYM) return kiln_dimx_sym(T, names[e->sym], out);
  kiln_dimx a, b;
  kiln_status s = build(e->a, &a);
  if (!s) s = build(e->b, &b);
  return s ? s : op_fn(e->op)(T, a, b, out);
}

/* The same tree built another way: operands of + * min max swapped and
 * re-associated, a - b as a + (-1)*b, k*(x+y) distributed. */
static kiln_status build_alt(int i, kiln_dimx *out) {
  const ex *e = &pool[i];
  kiln_dimx a, b, c, d;
  kiln_status s;
  if (e->op == E_CONST || e->op == E_SYM) return build(i, out);
  const ex *l = &pool[e->a], *r = &pool[e->b];
  bool comm = e->op == E_ADD || e->op == E_MUL || e->op == E_MIN || e->op == E_MAX;
  if (comm && l->op == e->op) { /* (x.y).z -> z.(y.x) */
    if ((s = build_alt(l->a, &a)) || (s = build_alt(l->b, &b)) || (s = build_alt(e->b, &c))) return s;
    if ((s = op_fn(e->op)(T, b, a, &d))) return s;
    return op_fn(e->op)(T, c, d, out);
  }
  if (e->op == E_MUL && l->op == E_CONST && r->op == E_ADD) { /* k*(x+y) -> k*x + k*y */
    if ((s = build_alt(r->a, &a)) || (s = build_alt(r->b, &b))) return s;
    if ((s = kiln_dimx_mul_const(T, a, l->k, &c)) || (s = kiln_dimx_mul_const(T, b, l->k, &d))) return s;
    return kiln_dimx_add(T, d, c, out);
  }
  if ((s = build_alt(e->a, &a)) || (s = build_alt(e->b, &b))) return s;
  if (e->op == E_SUB) {
    if ((s = kiln_dimx_mul_const(T, b, -1, &c))) return s;
    return kiln_dimx_add(T, c, a, out);
  }
  return comm ? op_fn(e->op)(T, b, a, out) : op_fn(e->op)(T, a, b, out);
}

/* ---- a parser for printed dims: evaluates the text with floor "/" and "%" ---- */

typedef struct parser {
  const char *s;
  const int64_t *vals;
  bool bad;
} parser;

static int64_t p_expr(parser *p);

static void skip_ws(parser *p) {
  while (*p->s == ' ') p->s++;
}

static int64_t p_args(parser *p, bool is_min) {
  int64_t r = p_expr(p);
  while (*p->s == ',') {
    p->s++;
    int64_t x = p_expr(p);
    r = is_min ? (x < r ? x : r) : (x > r ? x : r);
  }
  if (*p->s != ')') p->bad = true;
  else p->s++;
  return r;
}

static int64_t p_term(parser *p, bool ceil_last);

static int64_t p_primary(parser *p) {
  skip_ws(p);
  if (*p->s == '(') {
    p->s++;
    int64_t r = p_expr(p);
    if (*p->s != ')') p->bad = true;
    else p->s++;
    return r;
  }
  if (isdigit((unsigned char)*p->s)) {
    char *end;
    long long v = strtoll(p->s, &end, 10);
    p->s = end;
    return v;
  }
  const char *st = p->s;
  while (isalnum((unsigned char)*p->s) || *p->s == '_') p->s++;
  size_t len = (size_t)(p->s - st);
  if (len == 0) {
    p->bad = true;
    return 0;
  }
  if (*p->s == '(') {
    p->s++;
    if (len == 3 && !strncmp(st, "min", 3)) return p_args(p, true);
    if (len == 3 && !strncmp(st, "max", 3)) return p_args(p, false);
    if (len == 4 && !strncmp(st, "ceil", 4)) {
      int64_t r = p_term(p, true);
      if (*p->s != ')') p->bad = true;
      else p->s++;
      return r;
    }
    p->bad = true;
    return 0;
  }
  char name[64];
  snprintf(name, sizeof name, "%.*s", (int)len, st);
  int sy = kiln_sym_find(T, name);
  if (sy < 0) {
    p->bad = true;
    return 0;
  }
  return p->vals[sy];
}

static int64_t p_unary(parser *p) {
  skip_ws(p);
  if (*p->s == '-') {
    p->s++;
    return -p_unary(p);
  }
  return p_primary(p);
}

/* Factors joined by * / %, left to right; with ceil_last the last "/" is
 * a ceiling division (the inside of "ceil(a/b)"). */
static int64_t p_term(parser *p, bool ceil_last) {
  int64_t r = p_unary(p);
  for (;;) {
    skip_ws(p);
    char op = *p->s;
    if (op != '*' && op != '/' && op != '%') return r;
    p->s++;
    int64_t x = p_unary(p);
    skip_ws(p);
    bool last = *p->s != '*' && *p->s != '/' && *p->s != '%';
    if (op == '*') r *= x;
    else if (x == 0) {
      p->bad = true;
      return 0;
    } else if (op == '%') r = r - x * fdiv64(r, x);
    else r = ceil_last && last ? -fdiv64(-r, x) : fdiv64(r, x);
  }
}

static int64_t p_expr(parser *p) {
  int64_t r = p_term(p, false);
  for (;;) {
    skip_ws(p);
    if (*p->s == '+') p->s++, r += p_term(p, false);
    else if (*p->s == '-') p->s++, r -= p_term(p, false);
    else return r;
  }
}

static bool parse_eval(const char *text, const int64_t *vals, int64_t *out) {
  parser p = {text, vals, false};
  *out = p_expr(&p);
  return !p.bad && *p.s == 0;
}

static void new_random_table(void) {
  kiln_symtab_free(T);
  MUST(kiln_symtab_create(&T), "create");
  for (int i = 0; i < 3; i++) SY(names[i]); /* symbol ids 0,1,2 = tree's sym */
}

/* Random expressions: module value = direct value at random bindings, the
 * printed text re-parses to the same value, and the alternative build
 * gives the same handle. */
static void test_random(void) {
  const int cases = 4000, points = 16;
  int built = 0, limit_skips = 0, divzero_ok = 0, bad_build = 0, compared = 0, wrong = 0, print_wrong = 0,
      alt_wrong = 0, eval_err = 0, shown = 0;
  new_random_table();
  for (int c = 0; c < cases; c++) {
    if (c % 500 == 0) new_random_table();
    npool = 0;
    int root = gen(4, false);
    kiln_dimx x, y;
    kiln_status s = build(root, &x);
    int64_t v1[3] = {1, 1, 1}, ov;
    if (s == KILN_E_INVALID_SHAPE) { /* a divisor folded to 0: the oracle must divide by 0 too */
      if (oracle(root, v1, &ov) == O_DIVZERO && has(kiln_last_error(), "division by zero")) divzero_ok++;
      else bad_build++;
      continue;
    }
    if (s == KILN_E_UNSUPPORTED_SHAPE) {
      limit_skips++;
      continue;
    }
    if (s) {
      bad_build++;
      continue;
    }
    built++;
    s = build_alt(root, &y);
    if (s || x != y) {
      if (shown++ < 5) printf("  alt build differs: %s vs %s\n", str(x), s ? kiln_last_error() : str(y));
      alt_wrong++;
    }
    char text[4096];
    kiln_dimx_str(T, x, text, sizeof text);
    for (int pt = 0; pt < points; pt++) {
      int64_t vals[3] = {rnd_in(1, 12), rnd_in(1, 12), rnd_in(1, 12)}, want, got, pv;
      if (oracle(root, vals, &want) != O_OK) continue;
      compared++;
      s = kiln_dimx_eval(T, x, vals, 3, &got);
      if (s) {
        if (shown++ < 5) printf("  eval error on %s: %s\n", text, kiln_last_error());
        eval_err++;
        continue;
      }
      if (got != want) {
        if (shown++ < 5)
          printf("  %s at N=%lld S=%lld B=%lld: %lld, direct %lld\n", text, (long long)vals[0], (long long)vals[1],
                 (long long)vals[2], (long long)got, (long long)want);
        wrong++;
      }
      if (!has(text, "...") && (!parse_eval(text, vals, &pv) || pv != got)) {
        if (shown++ < 5) printf("  printed %s reads as %lld, not %lld\n", text, (long long)pv, (long long)got);
        print_wrong++;
      }
    }
  }
  printf("  random: %d built, %d compared points, %d folded divisions by zero, %d over limits\n", built, compared,
         divzero_ok, limit_skips);
  CHECK(built > cases * 8 / 10 && compared > built * points / 2, "too few random cases ran: %d built, %d points",
        built, compared);
  CHECK(bad_build == 0, "%d random expressions failed to build for a wrong reason", bad_build);
  CHECK(wrong == 0, "%d of %d random evaluations differ from the direct computation", wrong, compared);
  CHECK(eval_err == 0, "%d of %d random evaluations failed where the direct one did not", eval_err, compared);
  CHECK(print_wrong == 0, "%d printed forms evaluate differently", print_wrong);
  CHECK(alt_wrong == 0, "%d of %d commuted/re-associated/distributed builds give another handle", alt_wrong,
        built);
  CHECK(limit_skips < cases / 50, "%d random expressions hit limits", limit_skips);
}

/* ---- bounds ---- */

static void test_bounds_random(void) {
  int mono_cases = 0, mono_wrong = 0, gen_cases = 0, gen_unsafe = 0, gen_refused = 0, shown = 0;
  for (int c = 0; c < 1500; c++) {
    if (c % 300 == 0) new_random_table();
    bool monotone = c % 2 == 0;
    npool = 0;
    int root = gen(4, monotone);
    kiln_dimx x;
    if (build(root, &x)) continue;
    int64_t mx[3] = {rnd_in(1, 6), rnd_in(1, 6), rnd_in(1, 6)};
    for (int i = 0; i < 3; i++) MUST(kiln_sym_set_max(T, i, mx[i]), "set_max");
    int64_t lo, hi, tmin = INT64_MAX, tmax = INT64_MIN, v[3], r;
    bool any_err = false;
    for (v[0] = 1; v[0] <= mx[0]; v[0]++)
      for (v[1] = 1; v[1] <= mx[1]; v[1]++)
        for (v[2] = 1; v[2] <= mx[2]; v[2]++) {
          if (oracle(root, v, &r) != O_OK) {
            any_err = true;
            continue;
          }
          if (r < tmin) tmin = r;
          if (r > tmax) tmax = r;
        }
    kiln_status s = kiln_dimx_range(T, x, &lo, &hi);
    if (monotone) {
      mono_cases++;
      if (s || any_err || hi != tmax || lo != tmin) {
        if (shown++ < 5)
          printf("  monotone %s, max (%lld,%lld,%lld): range [%lld,%lld], brute force [%lld,%lld] %s\n", str(x),
                 (long long)mx[0], (long long)mx[1], (long long)mx[2], (long long)lo, (long long)hi,
                 (long long)tmin, (long long)tmax, s ? kiln_last_error() : "");
        mono_wrong++;
      }
    } else if (!any_err) {
      gen_cases++;
      if (s) gen_refused++;
      else if (hi < tmax || lo > tmin) {
        if (shown++ < 5)
          printf("  %s: range [%lld,%lld] misses brute force [%lld,%lld]\n", str(x), (long long)lo, (long long)hi,
                 (long long)tmin, (long long)tmax);
        gen_unsafe++;
      }
    }
  }
  printf("  bounds: %d monotone exact checks, %d general (%d refused)\n", mono_cases, gen_cases, gen_refused);
  CHECK(mono_cases > 500 && gen_cases > 300, "too few bound cases: %d, %d", mono_cases, gen_cases);
  CHECK(mono_wrong == 0, "%d of %d monotone bounds are not the exact range", mono_wrong, mono_cases);
  CHECK(gen_unsafe == 0, "%d of %d general bounds are unsafe", gen_unsafe, gen_cases);
  CHECK(gen_refused < gen_cases / 4, "%d of %d general bounds refused", gen_refused, gen_cases);
}

static void test_bounds(void) {
  MUST(kiln_symtab_create(&T), "create");
  kiln_dimx n = SY("N"), s = SY("S"), m = SY("M");
  int64_t lo, hi;
  MUST(kiln_sym_set_max(T, 0, 8), "max N");
  MUST(kiln_sym_set_max(T, 1, 16), "max S");
  CHECK(kiln_sym_max(T, 0, &hi) && hi == 8 && !kiln_sym_max(T, 2, &hi), "sym_max");
  CHECK(kiln_dimx_bound(T, FDIV(MUL(n, s), K(2)), &hi) == KILN_OK && hi == 64, "bound N*S/2 = 64");
  CHECK(kiln_dimx_range(T, SUB(n, s), &lo, &hi) == KILN_OK && lo == 1 - 16 && hi == 8 - 1, "range N-S = [-15,7]");
  CHECK(kiln_dimx_range(T, ADD(MUL(K(4), n), K(1)), &lo, &hi) == KILN_OK && lo == 5 && hi == 33, "4N+1");
  CHECK(kiln_dimx_bound(T, MIN(m, K(64)), &hi) == KILN_OK && hi == 64, "min(M,64) bounded without M's max");
  CHECK(kiln_dimx_bound(T, SUB(MUL(n, s), n), &hi) == KILN_OK && hi >= 8 * 15, "N*S-N safe: %lld", (long long)hi);
  CHECK(kiln_dimx_bound(T, MOD(m, K(7)), &hi) == KILN_OK && hi == 6, "M%%7 <= 6");
  CHECK(kiln_dimx_bound(T, FDIV(MUL(n, s), MAX(n, s)), &hi) == KILN_OK && hi >= 8 && hi <= 128,
        "N*S/max(N,S): safe bound %lld", (long long)hi);
  kiln_status st = kiln_dimx_bound(T, MUL(n, m), &hi);
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "symbol M has no upper bound"),
        "no bound for M: %s", kiln_last_error());
  st = kiln_dimx_bound(T, FDIV(n, SUB(s, K(1))), &hi);
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "divisor may be 0") &&
            has(kiln_last_error(), "N/(S-1)"),
        "divisor may be 0: %s", kiln_last_error());
  MUST(kiln_sym_set_max(T, 1, INT64_MAX - 1), "huge max");
  st = kiln_dimx_bound(T, MUL(MUL(s, s), K(4)), &hi);
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "int64"), "bound overflows: %s",
        kiln_last_error());
  CHECK(kiln_sym_set_max(T, 0, 0) == KILN_E_INVALID_SHAPE && kiln_sym_set_max(T, 7, 3) == KILN_E_INTERNAL,
        "bad bounds refused");
  kiln_dimx out;
  MUST(kiln_dim_unify(T, m, K(32), &out), "unify M=32");
  CHECK(kiln_dimx_range(T, MUL(m, K(2)), &lo, &hi) == KILN_OK && lo == 64 && hi == 64, "recorded value bounds M");
  kiln_symtab_free(T);
  T = NULL;
}

/* ---- printing ---- */

static void test_print(void) {
  MUST(kiln_symtab_create(&T), "create");
  kiln_dimx n = SY("N"), s = SY("S"), h = SY("H");
  kiln_dimx ns = MUL(n, s), s3 = ADD(s, K(3)); /* ns first: min/max list operands by handle */
  struct {
    kiln_dimx x;
    const char *want;
  } cases[] = {
      {ADD(MUL(K(4), n), K(1)), "4*N+1"},
      {FDIV(MUL(n, s), K(2)), "N*S/2"},
      {SUB(K(4), n), "-N+4"},
      {SUB(MUL(MUL(K(2), n), s), K(1)), "2*N*S-1"},
      {K(-7), "-7"},
      {K(0), "0"},
      {MIN(n, K(64)), "min(N,64)"},
      {MAX(s3, ns), "max(N*S,S+3)"},
      {ADD(FDIV(ADD(h, K(-1)), K(2)), K(1)), "(H+1)/2"},
      {MOD(n, K(4)), "N%4"},
      {SUB(K(0), FDIV(n, K(3))), "-(N/3)"},
      {MUL(s, FDIV(n, K(3))), "S*(N/3)"},
      {MUL(K(3), FDIV(n, K(5))), "3*(N/5)"},
      {FDIV(n, SUB(s, K(1))), "N/(S-1)"},
      {CDIV(n, SUB(s, K(1))), "ceil(N/(S-1))"},
      {CDIV(n, s), "(N-1)/S+1"}, /* ceil(N/S) = floor((N+S-1)/S) = floor((N-1)/S) + 1 */
      {MOD(n, SUB(s, K(1))), "N%(S-1)"},
      {FDIV(SUB(K(0), n), SUB(s, K(1))), "(-N)/(S-1)"},
      {FDIV(n, MUL(K(2), SUB(s, K(1)))), "N/(2*S-2)"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK(!strcmp(str(cases[i].x), cases[i].want), "prints %s, want %s", str(cases[i].x), cases[i].want);
  char small[8];
  kiln_dimx_str(T, ADD(MUL(n, s), MUL(K(1000), h)), small, sizeof small);
  CHECK(strlen(small) == 7 && !strcmp(small + 4, "..."), "truncated with ...: %s", small);
  CHECK(!strcmp(kiln_dimx_str(T, 12345, small, sizeof small), "<bad..."), "bad handle prints: %s", small);
  char big[64];
  CHECK(!strcmp(kiln_dimx_str(T, 12345, big, sizeof big), "<bad dim>"), "bad handle prints: %s", big);
  kiln_symtab_free(T);
  T = NULL;
}

/* ---- unification ---- */

static void test_unify(void) {
  MUST(kiln_symtab_create(&T), "create");
  kiln_dimx n = SY("N"), s = SY("S"), m = SY("M"), out = KILN_DIMX_NONE;
  int64_t v;
  CHECK(kiln_dim_unify(T, n, n, &out) == KILN_OK && out == n, "N ~ N");
  CHECK(kiln_dim_unify(T, ADD(n, s), ADD(s, n), &out) == KILN_OK && out == ADD(n, s), "N+S ~ S+N");
  CHECK(kiln_dim_unify(T, K(64), K(64), &out) == KILN_OK && is_k(out, 64), "64 ~ 64");
  kiln_status st = kiln_dim_unify(T, K(64), K(32), &out);
  kiln_error_prefix("tensor X, dim 1");
  CHECK(st == KILN_E_MISMATCH_SHAPE && !strcmp(kiln_last_error(), "tensor X, dim 1: 64 vs 32"), "64 vs 32: %s",
        kiln_last_error());
  CHECK(!kiln_sym_value(T, 0, &v), "N has no value yet");
  CHECK(kiln_dim_unify(T, n, K(64), &out) == KILN_OK && is_k(out, 64), "N ~ 64");
  CHECK(kiln_sym_value(T, 0, &v) && v == 64, "N = 64 recorded");
  CHECK(kiln_dim_unify(T, K(64), n, &out) == KILN_OK && is_k(out, 64), "64 ~ N again");
  CHECK(kiln_dim_unify(T, MUL(K(2), n), K(128), &out) == KILN_OK && is_k(out, 128), "2N ~ 128 once N = 64");
  st = kiln_dim_unify(T, n, K(32), &out);
  CHECK(st == KILN_E_MISMATCH_SHAPE && !strcmp(kiln_last_error(), "N (=64) vs 32"), "N=64 vs 32: %s",
        kiln_last_error());
  /* equal for some sizes only: KILN_E_SYMBOLIC_SHAPE (a run's sizes decide);
     never equal: KILN_E_MISMATCH_SHAPE */
  st = kiln_dim_unify(T, m, s, &out);
  CHECK(st == KILN_E_SYMBOLIC_SHAPE && !strcmp(kiln_last_error(), "M vs S"), "M vs S: %s %s", kiln_status_name(st),
        kiln_last_error());
  st = kiln_dim_unify(T, MUL(K(2), s), K(8), &out);
  CHECK(st == KILN_E_SYMBOLIC_SHAPE && !strcmp(kiln_last_error(), "2*S vs 8"), "2*S vs 8: %s %s",
        kiln_status_name(st), kiln_last_error());
  st = kiln_dim_unify(T, ADD(s, K(1)), s, &out);
  CHECK(st == KILN_E_MISMATCH_SHAPE, "S+1 vs S never equal: %s %s", kiln_status_name(st), kiln_last_error());
  /* a data-dependent dim (kiln_shape_fresh's "?value:dim") that data may make equal: accepted as it is */
  kiln_dimx q;
  MUST(kiln_dimx_sym_data(T, "?v:1", &q), "a data-dependent symbol");
  CHECK(kiln_dim_unify(T, MUL(K(2), q), K(4), &out) == KILN_OK && out == MUL(K(2), q), "2*?v:1 ~ 4 taken as 2*?v:1");
  CHECK(kiln_dim_unify(T, K(12), MUL(K(12), q), &out) == KILN_OK && out == MUL(K(12), q), "12 ~ 12*?v:1");
  st = kiln_dim_unify(T, ADD(q, K(1)), K(1), &out);
  CHECK(st == KILN_E_MISMATCH_SHAPE, "?v:1+1 vs 1 never equal: %s %s", kiln_status_name(st), kiln_last_error());
  st = kiln_dim_unify(T, MUL(K(2), s), K(1), &out);
  CHECK(st == KILN_E_MISMATCH_SHAPE, "2*S vs 1 never equal (S >= 1): %s %s", kiln_status_name(st), kiln_last_error());
  st = kiln_dim_unify(T, s, K(0), &out);
  CHECK(st == KILN_E_MISMATCH_SHAPE && !kiln_sym_value(T, 1, &v), "S vs 0 refused, nothing recorded");
  MUST(kiln_sym_set_max(T, 1, 16), "max S");
  st = kiln_dim_unify(T, s, K(17), &out);
  CHECK(st == KILN_E_MISMATCH_SHAPE && has(kiln_last_error(), "at most 16"), "S vs 17 over max: %s",
        kiln_last_error());
  /* recorded values take part in evaluation */
  CHECK(kiln_dimx_eval(T, MUL(n, K(2)), NULL, 0, &v) == KILN_OK && v == 128, "eval uses N = 64");
  int64_t vals[3] = {32, 2, 2};
  st = kiln_dimx_eval(T, n, vals, 3, &v);
  CHECK(st == KILN_E_MISMATCH_SHAPE && has(kiln_last_error(), "symbol N: 32 vs 64"), "run-time N contradicts: %s",
        kiln_last_error());
  kiln_dimx sub;
  CHECK(kiln_dimx_subst(T, ADD(MUL(n, s), m), NULL, 0, &sub) == KILN_OK && sub == ADD(MUL(K(64), s), m),
        "subst recorded values: %s", str(sub));
  int64_t sv[3] = {KILN_DIM_UNSET, 4, KILN_DIM_UNSET};
  CHECK(kiln_dimx_subst(T, FDIV(MUL(n, s), m), sv, 3, &sub) == KILN_OK && sub == FDIV(K(256), m),
        "partial subst: %s", str(sub));
  CHECK(kiln_dim_unify(T, n, 777, &out) == KILN_E_INTERNAL, "bad handle");
  kiln_symtab_free(T);
  T = NULL;
}

/* ---- errors and limits ---- */

static void test_errors(void) {
  MUST(kiln_symtab_create(&T), "create");
  kiln_dimx n = SY("N"), s = SY("S"), x = KILN_DIMX_NONE;
  int64_t v;
  kiln_status st;
  CHECK(kiln_dimx_add(T, K(INT64_MAX), K(1), &x) == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "int64"),
        "INT64_MAX+1: %s", kiln_last_error());
  CHECK(kiln_dimx_mul(T, K(INT64_MAX / 2 + 1), ADD(n, K(0)), &x) == KILN_OK &&
            kiln_dimx_mul_const(T, x, 2, &x) == KILN_E_UNSUPPORTED_SHAPE,
        "coefficient overflow");
  CHECK(kiln_dimx_add(T, MUL(K(INT64_MAX), n), n, &x) == KILN_E_UNSUPPORTED_SHAPE, "k1*x + k2*x overflow");
  CHECK(kiln_dimx_fdiv(T, K(INT64_MIN), K(-1), &x) == KILN_E_UNSUPPORTED_SHAPE, "INT64_MIN / -1");
  /* 2^62*N + 2^62*S >= 2^63 always: its range saturates, which must not read as one value */
  kiln_dimx huge = ADD(MUL(K((int64_t)1 << 62), n), MUL(K((int64_t)1 << 62), s)), b = SY("B");
  x = MAX(huge, b);
  int64_t ones[3] = {1, 1, 1};
  CHECK(!kiln_dimx_is_const(T, x, NULL) && kiln_dimx_eval(T, x, ones, 3, &v) == KILN_E_UNSUPPORTED_SHAPE,
        "saturated range folded: %s", str(x));
  CHECK(kiln_dimx_sub(T, K(0), K(INT64_MIN), &x) == KILN_E_UNSUPPORTED_SHAPE, "-INT64_MIN");
  CHECK(kiln_dimx_fdiv(T, n, K(INT64_MIN), &x) == KILN_E_UNSUPPORTED_SHAPE, "N / INT64_MIN");
  st = kiln_dimx_fdiv(T, n, K(0), &x);
  CHECK(st == KILN_E_INVALID_SHAPE && has(kiln_last_error(), "division by zero"), "N/0: %s", kiln_last_error());
  CHECK(kiln_dimx_cdiv(T, n, SUB(s, s), &x) == KILN_E_INVALID_SHAPE && kiln_dimx_mod(T, n, K(0), &x) ==
                                                                             KILN_E_INVALID_SHAPE,
        "ceil and mod by 0");
  int64_t vals[2] = {5, KILN_DIM_UNSET};
  st = kiln_dimx_eval(T, FDIV(MUL(n, s), K(2)), vals, 2, &v);
  CHECK(st == KILN_E_INVALID_SHAPE && has(kiln_last_error(), "symbol S has no value") &&
            has(kiln_last_error(), "N*S/2"),
        "unbound S: %s", kiln_last_error());
  st = kiln_dimx_eval(T, n, vals, 0, &v);
  CHECK(st == KILN_E_INVALID_SHAPE && has(kiln_last_error(), "symbol N"), "no bindings: %s", kiln_last_error());
  vals[1] = 0;
  st = kiln_dimx_eval(T, s, vals, 2, &v);
  CHECK(st == KILN_E_INVALID_SHAPE && has(kiln_last_error(), ">= 1"), "S = 0: %s", kiln_last_error());
  vals[1] = 1;
  st = kiln_dimx_eval(T, MOD(n, SUB(s, K(1))), vals, 2, &v);
  CHECK(st == KILN_E_INVALID_SHAPE && has(kiln_last_error(), "division by zero"), "N%%(S-1) at S=1: %s",
        kiln_last_error());
  int64_t big[2] = {(int64_t)1 << 40, (int64_t)1 << 40};
  st = kiln_dimx_eval(T, MUL(n, s), big, 2, &v);
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "overflows int64"), "2^80: %s",
        kiln_last_error());
  CHECK(kiln_dimx_eval(T, MUL(n, s), big, 1, &v) == KILN_E_INVALID_SHAPE, "n_vals limits the bindings");
  CHECK(kiln_dimx_eval(T, ADD(n, K(1)), big, 2, &v) == KILN_OK && v == big[0] + 1, "large values evaluate");
  /* names and handles */
  CHECK(kiln_dimx_sym(T, "", &x) == KILN_E_INVALID_SHAPE && kiln_dimx_sym(T, NULL, &x) == KILN_E_INVALID_SHAPE,
        "empty name");
  char lname[400];
  memset(lname, 'a', sizeof lname - 1), lname[sizeof lname - 1] = 0;
  CHECK(kiln_dimx_sym(T, lname, &x) == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "name"), "long name: %s",
        kiln_last_error());
  CHECK(kiln_dimx_add(T, n, -3, &x) == KILN_E_INTERNAL && kiln_dimx_min(T, 1 << 30, n, &x) == KILN_E_INTERNAL,
        "bad handles");
  CHECK(kiln_dimx_add(T, n, 0, &x) == KILN_E_INTERNAL, "a monomial id is not a dim handle");
  CHECK(!kiln_dimx_is_const(T, 99999, &v) && kiln_dimx_as_sym(T, -1) == -1, "bad handle queries");
  /* limits: terms, degree, operands */
  kiln_dimx sum = K(1);
  char nm[8];
  for (int i = 0; i < 8; i++) snprintf(nm, sizeof nm, "x%d", i), sum = ADD(sum, SY(nm));
  kiln_dimx sq = MUL(sum, sum);
  st = kiln_dimx_mul(T, sq, sum, &x);
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "terms"), "165 terms: %s", kiln_last_error());
  kiln_dimx p = n;
  for (int i = 1; i < KILN_SYMDIM_MAX_DEGREE; i++) p = MUL(p, n);
  st = kiln_dimx_mul(T, p, n, &x);
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "factors"), "N^17: %s", kiln_last_error());
  kiln_dimx mn = n;
  st = KILN_OK;
  for (int i = 0; i < KILN_SYMDIM_MAX_ARGS + 4 && !st; i++) {
    snprintf(nm, sizeof nm, "m%d", i);
    st = kiln_dimx_min(T, mn, SY(nm), &mn);
  }
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "operands"), "min of 17: %s", kiln_last_error());
  /* depth */
  kiln_symtab_set_limits(T, 0, 10);
  kiln_dimx d = n, s1 = ADD(s, K(1));
  st = KILN_OK;
  int levels = 0;
  for (; levels < 20 && !st; levels++) st = kiln_dimx_fdiv(T, d, s1, &d);
  CHECK(st == KILN_E_UNSUPPORTED_SHAPE && has(kiln_last_error(), "deeper than 10") && levels == 10,
        "depth limit after %d levels: %s", levels, kiln_last_error());
  CHECK(kiln_dimx_eval(T, d, big, 2, &v) == KILN_OK && v == 0, "the table still works after a limit");
  /* node count */
  int before = kiln_symtab_nodes(T);
  kiln_symtab_set_limits(T, before + 40, 0);
  st = KILN_OK;
  int made = 0;
  for (int64_t i = 1000; i < 1100 && !st; i++) st = kiln_dimx_const(T, i, &x), made += !st;
  CHECK(st == KILN_E_NOMEM && has(kiln_last_error(), "expression nodes") && made == 40 &&
            kiln_symtab_nodes(T) == before + 40,
        "node limit after %d: %s", made, kiln_last_error());
  CHECK(kiln_dimx_const(T, 1000, &x) == KILN_OK && is_k(x, 1000), "existing nodes are still found");
  kiln_symtab_free(T);
  T = NULL;
}

/* A DAG whose every level uses the previous one twice: evaluation, bounds,
 * substitution and printing must not walk it as a tree (2^60 paths). */
static void test_shared_dag(void) {
  MUST(kiln_symtab_create(&T), "create");
  kiln_dimx n = SY("N"), s = SY("S"), x = n;
  const int levels = 60;
  for (int i = 0; i < levels; i++) x = MIN(ADD(x, s), MUL(K(2), x));
  int64_t vals[2] = {3, 5}, want = 3, v, hi;
  for (int i = 0; i < levels; i++) want = want + 5 < 2 * want ? want + 5 : 2 * want;
  CHECK(kiln_dimx_eval(T, x, vals, 2, &v) == KILN_OK && v == want, "deep shared eval: %lld, want %lld",
        (long long)v, (long long)want);
  MUST(kiln_sym_set_max(T, 0, 3), "max N");
  MUST(kiln_sym_set_max(T, 1, 5), "max S");
  CHECK(kiln_dimx_bound(T, x, &hi) == KILN_OK && hi >= want, "deep shared bound %lld", (long long)hi);
  kiln_dimx y;
  CHECK(kiln_dimx_subst(T, x, vals, 2, &y) == KILN_OK && is_k(y, want), "deep shared subst");
  char buf[200];
  kiln_dimx_str(T, x, buf, sizeof buf);
  CHECK(strlen(buf) == sizeof buf - 1 && !strcmp(buf + sizeof buf - 4, "..."), "deep print truncates");
  kiln_symtab_free(T);
  T = NULL;
}

int main(void) {
  test_canonical();
  test_random();
  test_bounds_random();
  kiln_symtab_free(T);
  T = NULL;
  test_bounds();
  test_print();
  test_unify();
  test_errors();
  test_shared_dag();
  printf("unit_symdim: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
