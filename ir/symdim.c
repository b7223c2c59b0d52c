/* ir/symdim: canonical symbolic dims — hash-consed sums of monomials over
 * atoms (symbols and irreducible div/mod/min/max), with evaluation, interval
 * bounds, printing and unification. */
#include "ir/symdim.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/alloc.h"

/* Node kinds. A kiln_dimx is a K_SUM node: pairs (monomial id, coefficient)
 * sorted by monomial id, the constant under monomial 0 (the empty product),
 * no zero coefficients. A K_MONO node is a sorted list of atom ids (repeats
 * are powers). Atoms: K_SYM (symbol id), K_FDIV / K_CDIV / K_MOD (two sums),
 * K_MIN / K_MAX (2..MAX_ARGS distinct sums, sorted). Ids order terms and
 * factors, so a canonical form is canonical within its table. */
enum { K_SUM, K_MONO, K_SYM, K_FDIV, K_CDIV, K_MOD, K_MIN, K_MAX };

typedef struct node {
  uint8_t kind;
  uint8_t depth;   /* atom nesting: 0 constant, 1 symbol, 1 + the operands' */
  uint32_t n, off; /* payload: n int64 at pool[off] */
  uint32_t hash;
  int32_t aux;     /* atoms: the sum that is this atom alone, -1 until made */
  uint32_t gen;    /* memo stamp: m0/m1 are valid when gen == table's gen */
  int64_t lo, hi;  /* range with every symbol in [1, +inf) */
  int64_t m0, m1;
} node;

typedef struct sym {
  char *name;
  bool has_max, has_value;
  int64_t max, value;
  bool data; /* a data-dependent dim (kiln_dimx_sym_data) */
} sym;

struct kiln_symtab {
  node *nodes;
  int32_t n_nodes, cap_nodes;
  int64_t *pool;
  size_t n_pool, cap_pool;
  int32_t *slots; /* node hash set (open addressing, power of two, -1 empty) */
  uint32_t n_slots;
  sym *syms;
  int32_t n_syms, cap_syms;
  int32_t *sslots; /* symbol-name hash set */
  uint32_t n_sslots;
  uint32_t gen;
  int32_t max_nodes;
  int max_depth;
};

typedef struct term {
  int32_t mono;
  int64_t coef;
} term;

#define MAXT KILN_SYMDIM_MAX_TERMS
#define PL(t, id) ((t)->pool + (t)->nodes[(id)].off)
#define NINF INT64_MIN /* lo: unbounded below */
#define PINF INT64_MAX /* hi: unbounded above */

static kiln_status overflow(void) {
  return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic dim arithmetic overflows int64");
}

/* ---- checked integer helpers ---- */

static int64_t floordiv(int64_t a, int64_t b) { /* b != 0, not (INT64_MIN, -1) */
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

static int64_t floormod(int64_t a, int64_t b) { /* b != 0 */
  if (b == -1) return 0;
  int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

static int64_t gcd64(int64_t a, int64_t b) { /* a, b > 0 */
  while (b) {
    int64_t r = a % b;
    a = b, b = r;
  }
  return a;
}

/* ---- intervals: lo == NINF / hi == PINF mean unbounded; finite results
 * that overflow saturate in the safe direction ---- */

typedef struct ivl {
  int64_t lo, hi;
} ivl;

typedef struct xn { /* an extended integer: inf -1, 0 (finite v), +1 */
  int64_t v;
  int inf;
} xn;

static xn xlo(int64_t lo) { return lo == NINF ? (xn){0, -1} : (xn){lo, 0}; }
static xn xhi(int64_t hi) { return hi == PINF ? (xn){0, 1} : (xn){hi, 0}; }
static int64_t tolo(xn a) { return a.inf < 0 ? NINF : a.inf > 0 ? INT64_MAX : a.v; }
static int64_t tohi(xn a) { return a.inf > 0 ? PINF : a.inf < 0 ? INT64_MIN : a.v; }
static int xsign(xn a) { return a.inf ? a.inf : (a.v > 0) - (a.v < 0); }
static bool xless(xn a, xn b) { return a.inf != b.inf ? a.inf < b.inf : (!a.inf && a.v < b.v); }

static xn xmul(xn a, xn b) {
  if (a.inf || b.inf) return (xn){0, xsign(a) * xsign(b)};
  int64_t r;
  if (__builtin_mul_overflow(a.v, b.v, &r)) return (xn){0, ((a.v < 0) != (b.v < 0)) ? -1 : 1};
  return (xn){r, 0};
}

/* dir resolves +inf + -inf: -1 for a lower bound, +1 for an upper one. */
static xn xadd(xn a, xn b, int dir) {
  if (a.inf && b.inf && a.inf != b.inf) return (xn){0, dir};
  if (a.inf) return a;
  if (b.inf) return b;
  int64_t r;
  if (__builtin_add_overflow(a.v, b.v, &r)) return (xn){0, a.v < 0 ? -1 : 1};
  return (xn){r, 0};
}

static xn xneg(xn a) {
  if (a.inf) return (xn){0, -a.inf};
  if (a.v == INT64_MIN) return (xn){0, 1};
  return (xn){-a.v, 0};
}

/* floor(a/b) for b > 0 (b finite or +inf). */
static xn xfdiv(xn a, xn b) {
  if (b.inf) return (xn){xsign(a) >= 0 ? 0 : -1, 0};
  if (a.inf) return a;
  return (xn){floordiv(a.v, b.v), 0};
}

static ivl iv_const(int64_t c) { return (ivl){c, c}; }
static ivl iv_all(void) { return (ivl){NINF, PINF}; }

static ivl iv_add(ivl a, ivl b) {
  return (ivl){tolo(xadd(xlo(a.lo), xlo(b.lo), -1)), tohi(xadd(xhi(a.hi), xhi(b.hi), 1))};
}

static ivl iv_neg(ivl a) { return (ivl){tolo(xneg(xhi(a.hi))), tohi(xneg(xlo(a.lo)))}; }

static ivl iv_mul(ivl a, ivl b) {
  xn c[4] = {xmul(xlo(a.lo), xlo(b.lo)), xmul(xlo(a.lo), xhi(b.hi)), xmul(xhi(a.hi), xlo(b.lo)),
             xmul(xhi(a.hi), xhi(b.hi))};
  xn mn = c[0], mx = c[0];
  for (int i = 1; i < 4; i++) {
    if (xless(c[i], mn)) mn = c[i];
    if (xless(mx, c[i])) mx = c[i];
  }
  return (ivl){tolo(mn), tohi(mx)};
}

/* floor(a/b) with b >= 1: monotone in each operand, so the extremes are at
 * the corners picked by a's sign. */
static ivl iv_fdiv_pos(ivl a, ivl b) {
  xn lo = a.lo >= 0 ? xfdiv(xlo(a.lo), xhi(b.hi)) : xfdiv(xlo(a.lo), xlo(b.lo));
  xn hi = a.hi >= 0 ? xfdiv(xhi(a.hi), xlo(b.lo)) : xfdiv(xhi(a.hi), xhi(b.hi));
  return (ivl){tolo(lo), tohi(hi)};
}

/* Range of an atom from its operands' ranges; *divzero is set when a
 * divisor's range holds 0 (the result is then unbounded). */
static ivl op_range(int kind, const ivl *r, int n, bool *divzero) {
  switch (kind) {
  case K_FDIV:
  case K_CDIV: {
    ivl a = kind == K_CDIV ? iv_neg(r[0]) : r[0], b = r[1], q;
    if (b.lo >= 1) q = iv_fdiv_pos(a, b);
    else if (b.hi <= -1) q = iv_fdiv_pos(iv_neg(a), iv_neg(b));
    else {
      *divzero = true;
      return iv_all();
    }
    return kind == K_CDIV ? iv_neg(q) : q;
  }
  case K_MOD: {
    ivl a = r[0], b = r[1];
    bool flip = false;
    if (b.hi <= -1) a = iv_neg(a), b = iv_neg(b), flip = true;
    else if (b.lo < 1) {
      *divzero = true;
      return iv_all();
    }
    ivl m;
    if (a.lo >= 0 && a.hi != PINF && a.hi < b.lo) m = a;
    else {
      int64_t cap = b.hi == PINF ? PINF : b.hi - 1;
      if (a.lo >= 0 && a.hi < cap) cap = a.hi;
      m = (ivl){0, cap};
    }
    return flip ? iv_neg(m) : m;
  }
  case K_MIN:
  case K_MAX: {
    ivl m = r[0];
    for (int i = 1; i < n; i++) {
      if (kind == K_MIN) {
        if (r[i].lo < m.lo) m.lo = r[i].lo;
        if (r[i].hi < m.hi) m.hi = r[i].hi;
      } else {
        if (r[i].lo > m.lo) m.lo = r[i].lo;
        if (r[i].hi > m.hi) m.hi = r[i].hi;
      }
    }
    return m;
  }
  }
  return iv_all();
}

static bool iv_finite(ivl r) { return r.lo != NINF && r.hi != PINF; }

/* ---- the table ---- */

static uint32_t hash_words(int kind, const int64_t *p, uint32_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)kind;
  for (uint32_t i = 0; i < n; i++) {
    h ^= (uint64_t)p[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  h ^= n;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return (uint32_t)h;
}

static uint32_t hash_str(const char *s) {
  uint32_t h = 2166136261u;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
  return h;
}

static size_t pool_limit(const kiln_symtab *t) { return (size_t)t->max_nodes * 16 + 4096; }

static kiln_status too_many(const kiln_symtab *t) {
  return kiln_fail(KILN_E_NOMEM, "symbolic dims: more than %d expression nodes (limit)", (int)t->max_nodes);
}

static kiln_status nomem(void) { return kiln_fail(KILN_E_NOMEM, "symbolic dims: out of memory"); }

static void slot_insert(int32_t *slots, uint32_t n_slots, uint32_t h, int32_t id) {
  uint32_t mask = n_slots - 1;
  uint32_t i = h & mask;
  while (slots[i] >= 0) i = (i + 1) & mask;
  slots[i] = id;
}

/* The node (kind, payload) — found or added. p must not point into the pool. */
static kiln_status intern(kiln_symtab *t, int kind, const int64_t *p, uint32_t n, int depth, ivl r,
                          int32_t *out) {
  uint32_t h = hash_words(kind, p, n), mask = t->n_slots - 1;
  for (uint32_t i = h & mask;; i = (i + 1) & mask) {
    int32_t id = t->slots[i];
    if (id < 0) break;
    const node *nd = &t->nodes[id];
    if (nd->hash == h && nd->kind == kind && nd->n == n && (n == 0 || !memcmp(PL(t, id), p, n * sizeof *p))) {
      *out = id;
      return KILN_OK;
    }
  }
  if (t->n_nodes >= t->max_nodes || t->n_pool + n > pool_limit(t)) return too_many(t);
  if (t->n_nodes == t->cap_nodes) {
    int32_t cap = t->cap_nodes * 2;
    node *nn = kiln_realloc(t->nodes, (size_t)cap * sizeof *nn);
    if (!nn) return nomem();
    t->nodes = nn, t->cap_nodes = cap;
  }
  if (t->n_pool + n > t->cap_pool) {
    size_t cap = t->cap_pool * 2;
    while (cap < t->n_pool + n) cap *= 2;
    int64_t *np = kiln_realloc(t->pool, cap * sizeof *np);
    if (!np) return nomem();
    t->pool = np, t->cap_pool = cap;
  }
  if ((uint32_t)(t->n_nodes + 1) * 2 > t->n_slots) {
    uint32_t ns = t->n_slots * 2;
    int32_t *s = kiln_malloc((size_t)ns * sizeof *s);
    if (!s) return nomem();
    memset(s, 0xff, (size_t)ns * sizeof *s);
    for (int32_t i = 0; i < t->n_nodes; i++) slot_insert(s, ns, t->nodes[i].hash, i);
    kiln_free(t->slots);
    t->slots = s, t->n_slots = ns;
  }
  int32_t id = t->n_nodes++;
  node *nd = &t->nodes[id];
  memset(nd, 0, sizeof *nd);
  nd->kind = (uint8_t)kind, nd->depth = (uint8_t)depth, nd->n = n, nd->off = (uint32_t)t->n_pool;
  nd->hash = h, nd->aux = -1, nd->lo = r.lo, nd->hi = r.hi;
  if (n) memcpy(t->pool + t->n_pool, p, n * sizeof *p);
  t->n_pool += n;
  slot_insert(t->slots, t->n_slots, h, id);
  *out = id;
  return KILN_OK;
}

static void next_gen(kiln_symtab *t) {
  if (++t->gen == 0) {
    for (int32_t i = 0; i < t->n_nodes; i++) t->nodes[i].gen = 0;
    t->gen = 1;
  }
}

kiln_status kiln_symtab_create(kiln_symtab **out) {
  kiln_symtab *t = kiln_calloc(1, sizeof *t);
  if (!t) return nomem();
  t->cap_nodes = 64, t->cap_pool = 256, t->n_slots = 128, t->cap_syms = 8, t->n_sslots = 16;
  t->nodes = kiln_malloc((size_t)t->cap_nodes * sizeof *t->nodes);
  t->pool = kiln_malloc(t->cap_pool * sizeof *t->pool);
  t->slots = kiln_malloc(t->n_slots * sizeof *t->slots);
  t->syms = kiln_malloc((size_t)t->cap_syms * sizeof *t->syms);
  t->sslots = kiln_malloc(t->n_sslots * sizeof *t->sslots);
  t->max_nodes = KILN_SYMDIM_MAX_NODES, t->max_depth = KILN_SYMDIM_MAX_DEPTH, t->gen = 1;
  if (!t->nodes || !t->pool || !t->slots || !t->syms || !t->sslots) {
    kiln_symtab_free(t);
    return nomem();
  }
  memset(t->slots, 0xff, t->n_slots * sizeof *t->slots);
  memset(t->sslots, 0xff, t->n_sslots * sizeof *t->sslots);
  int32_t one;
  kiln_status s = intern(t, K_MONO, NULL, 0, 0, iv_const(1), &one); /* monomial 0: the empty product */
  if (s) {
    kiln_symtab_free(t);
    return s;
  }
  *out = t;
  return KILN_OK;
}

void kiln_symtab_free(kiln_symtab *t) {
  if (!t) return;
  for (int32_t i = 0; i < t->n_syms; i++) kiln_free(t->syms[i].name);
  kiln_free(t->nodes);
  kiln_free(t->pool);
  kiln_free(t->slots);
  kiln_free(t->syms);
  kiln_free(t->sslots);
  kiln_free(t);
}

void kiln_symtab_set_limits(kiln_symtab *t, int max_nodes, int max_depth) {
  if (max_nodes > 0) t->max_nodes = max_nodes;
  if (max_depth > 0) t->max_depth = max_depth > 255 ? 255 : max_depth;
}

int kiln_symtab_nodes(const kiln_symtab *t) { return t->n_nodes; }
int kiln_symtab_nsyms(const kiln_symtab *t) { return t->n_syms; }

const char *kiln_sym_name(const kiln_symtab *t, int s) {
  return s >= 0 && s < t->n_syms ? t->syms[s].name : NULL;
}

int kiln_sym_find(const kiln_symtab *t, const char *name) {
  if (!name) return -1;
  uint32_t mask = t->n_sslots - 1;
  for (uint32_t i = hash_str(name) & mask;; i = (i + 1) & mask) {
    int32_t s = t->sslots[i];
    if (s < 0) return -1;
    if (!strcmp(t->syms[s].name, name)) return s;
  }
}

kiln_status kiln_sym_set_max(kiln_symtab *t, int s, int64_t max) {
  if (s < 0 || s >= t->n_syms) return kiln_fail(KILN_E_INTERNAL, "no symbol %d", s);
  if (max < 1)
    return kiln_fail(KILN_E_INVALID_SHAPE, "bound %lld for symbol %s: a symbolic dim is >= 1", (long long)max,
                     t->syms[s].name);
  t->syms[s].has_max = true, t->syms[s].max = max;
  return KILN_OK;
}

bool kiln_sym_max(const kiln_symtab *t, int s, int64_t *max) {
  if (s < 0 || s >= t->n_syms || !t->syms[s].has_max) return false;
  if (max) *max = t->syms[s].max;
  return true;
}

bool kiln_sym_value(const kiln_symtab *t, int s, int64_t *value) {
  if (s < 0 || s >= t->n_syms || !t->syms[s].has_value) return false;
  if (value) *value = t->syms[s].value;
  return true;
}

/* ---- canonical construction ---- */

static bool valid(const kiln_symtab *t, kiln_dimx x) {
  return x >= 0 && x < t->n_nodes && t->nodes[x].kind == K_SUM;
}

static kiln_status bad_handle(kiln_dimx x) {
  return kiln_fail(KILN_E_INTERNAL, "invalid symbolic dim handle %d", (int)x);
}

#define CHECK_HANDLE(t, x)                \
  do {                                    \
    if (!valid(t, x)) return bad_handle(x); \
  } while (0)

static int read_terms(const kiln_symtab *t, kiln_dimx x, term *ts) {
  const int64_t *p = PL(t, x);
  int n = (int)t->nodes[x].n / 2;
  for (int i = 0; i < n; i++) ts[i].mono = (int32_t)p[2 * i], ts[i].coef = p[2 * i + 1];
  return n;
}

static bool sum_const(const kiln_symtab *t, kiln_dimx x, int64_t *v) {
  const node *nd = &t->nodes[x];
  if (nd->n == 0) return *v = 0, true;
  if (nd->n == 2 && PL(t, x)[0] == 0) return *v = PL(t, x)[1], true;
  return false;
}

/* The atom when x is exactly that atom (coefficient 1, one factor), or -1. */
static int32_t sum_atom(const kiln_symtab *t, kiln_dimx x) {
  const int64_t *p = PL(t, x);
  if (t->nodes[x].n != 2 || p[1] != 1 || p[0] == 0) return -1;
  int32_t m = (int32_t)p[0];
  return t->nodes[m].n == 1 ? (int32_t)PL(t, m)[0] : -1;
}

static int cmp_term(const void *a, const void *b) {
  int32_t x = ((const term *)a)->mono, y = ((const term *)b)->mono;
  return (x > y) - (x < y);
}

/* Sorts by monomial, merges equal monomials, drops zeros. False on overflow. */
static bool norm_terms(term *ts, int *n) {
  qsort(ts, (size_t)*n, sizeof *ts, cmp_term);
  int k = 0;
  for (int i = 0; i < *n; i++) {
    if (k && ts[k - 1].mono == ts[i].mono) {
      if (__builtin_add_overflow(ts[k - 1].coef, ts[i].coef, &ts[k - 1].coef)) return false;
    } else ts[k++] = ts[i];
  }
  int m = 0;
  for (int i = 0; i < k; i++)
    if (ts[i].coef) ts[m++] = ts[i];
  *n = m;
  return true;
}

/* Range of a sum of terms with every symbol in [1, +inf). */
static ivl terms_range(const kiln_symtab *t, const term *ts, int n) {
  ivl r = iv_const(0);
  for (int i = 0; i < n; i++) {
    const node *m = &t->nodes[ts[i].mono];
    r = iv_add(r, iv_mul(iv_const(ts[i].coef), (ivl){m->lo, m->hi}));
  }
  return r;
}

/* Interns the sum of terms (any order, repeats and zeros allowed). */
static kiln_status mk_sum(kiln_symtab *t, term *ts, int n, kiln_dimx *out) {
  if (!norm_terms(ts, &n)) return overflow();
  if (n > MAXT)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic dim has more than %d terms (limit)", MAXT);
  int64_t p[2 * MAXT];
  int depth = 0;
  for (int i = 0; i < n; i++) {
    p[2 * i] = ts[i].mono, p[2 * i + 1] = ts[i].coef;
    if (t->nodes[ts[i].mono].depth > depth) depth = t->nodes[ts[i].mono].depth;
  }
  return intern(t, K_SUM, p, (uint32_t)(2 * n), depth, terms_range(t, ts, n), out);
}

static kiln_status mk_const(kiln_symtab *t, int64_t v, kiln_dimx *out) {
  term c = {0, v};
  return mk_sum(t, &c, 1, out);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Interns the monomial of n atoms (any order). */
static kiln_status mk_mono(kiln_symtab *t, int64_t *atoms, int n, int32_t *out) {
  if (n == 0) return *out = 0, KILN_OK;
  if (n > KILN_SYMDIM_MAX_DEGREE)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic dim has a product of more than %d factors (limit)",
                     KILN_SYMDIM_MAX_DEGREE);
  qsort(atoms, (size_t)n, sizeof *atoms, cmp_i64);
  ivl r = iv_const(1);
  int depth = 0;
  for (int i = 0; i < n; i++) {
    const node *a = &t->nodes[atoms[i]];
    r = iv_mul(r, (ivl){a->lo, a->hi});
    if (a->depth > depth) depth = a->depth;
  }
  return intern(t, K_MONO, atoms, (uint32_t)n, depth, r, out);
}

/* The sum that is the atom (kind, args) alone — or, when the atom's range
 * holds one value, that constant. */
static kiln_status mk_atom(kiln_symtab *t, int kind, const kiln_dimx *args, int n, kiln_dimx *out) {
  ivl r[KILN_SYMDIM_MAX_ARGS];
  int64_t p[KILN_SYMDIM_MAX_ARGS];
  int depth = 0;
  for (int i = 0; i < n; i++) {
    const node *a = &t->nodes[args[i]];
    r[i] = (ivl){a->lo, a->hi};
    p[i] = args[i];
    if (a->depth > depth) depth = a->depth;
  }
  bool dz = false;
  ivl ar = op_range(kind, r, n, &dz);
  if (ar.lo == ar.hi && iv_finite(ar)) return mk_const(t, ar.lo, out);
  if (depth + 1 > t->max_depth)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic dim nested deeper than %d levels (limit)", t->max_depth);
  int32_t atom, mono;
  kiln_status s = intern(t, kind, p, (uint32_t)n, depth + 1, ar, &atom);
  if (s) return s;
  if (t->nodes[atom].aux >= 0) return *out = t->nodes[atom].aux, KILN_OK;
  int64_t a1 = atom;
  if ((s = mk_mono(t, &a1, 1, &mono))) return s;
  term tm = {mono, 1};
  if ((s = mk_sum(t, &tm, 1, out))) return s;
  t->nodes[atom].aux = *out;
  return KILN_OK;
}

/* Negates every coefficient; false (ts unchanged) when one is INT64_MIN. */
static bool neg_ok(term *ts, int n) {
  for (int i = 0; i < n; i++)
    if (ts[i].coef == INT64_MIN) return false;
  for (int i = 0; i < n; i++) ts[i].coef = -ts[i].coef;
  return true;
}

static kiln_status neg_terms(term *ts, int n) { return neg_ok(ts, n) ? KILN_OK : overflow(); }

/* c % d == 0, without the undefined INT64_MIN % -1. */
static bool divides(int64_t d, int64_t c) { return d == -1 || c % d == 0; }

static kiln_status add_terms(kiln_symtab *t, const term *a, int na, const term *b, int nb, kiln_dimx *out) {
  term buf[2 * MAXT + 2];
  memcpy(buf, a, (size_t)na * sizeof *a);
  memcpy(buf + na, b, (size_t)nb * sizeof *b);
  return mk_sum(t, buf, na + nb, out);
}

static kiln_status add(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  term ta[MAXT], tb[MAXT];
  int na = read_terms(t, a, ta), nb = read_terms(t, b, tb);
  return add_terms(t, ta, na, tb, nb, out);
}

static kiln_status addk(kiln_symtab *t, kiln_dimx a, int64_t k, kiln_dimx *out) {
  term ta[MAXT + 1];
  int na = read_terms(t, a, ta);
  ta[na] = (term){0, k};
  return mk_sum(t, ta, na + 1, out);
}

static kiln_status sub(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  term ta[MAXT], tb[MAXT];
  int na = read_terms(t, a, ta), nb = read_terms(t, b, tb);
  kiln_status s = neg_terms(tb, nb);
  return s ? s : add_terms(t, ta, na, tb, nb, out);
}

static kiln_status scale(kiln_symtab *t, kiln_dimx a, int64_t k, kiln_dimx *out) {
  term ta[MAXT];
  int na = read_terms(t, a, ta);
  for (int i = 0; i < na; i++)
    if (__builtin_mul_overflow(ta[i].coef, k, &ta[i].coef)) return overflow();
  return mk_sum(t, ta, na, out);
}

static kiln_status mono_mul(kiln_symtab *t, int32_t m1, int32_t m2, int32_t *out) {
  if (m1 == 0) return *out = m2, KILN_OK;
  if (m2 == 0) return *out = m1, KILN_OK;
  int n1 = (int)t->nodes[m1].n, n2 = (int)t->nodes[m2].n;
  if (n1 + n2 > KILN_SYMDIM_MAX_DEGREE)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic dim has a product of more than %d factors (limit)",
                     KILN_SYMDIM_MAX_DEGREE);
  int64_t a[2 * KILN_SYMDIM_MAX_DEGREE];
  memcpy(a, PL(t, m1), (size_t)n1 * sizeof *a);
  memcpy(a + n1, PL(t, m2), (size_t)n2 * sizeof *a);
  return mk_mono(t, a, n1 + n2, out);
}

static kiln_status mul(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  int64_t k;
  if (sum_const(t, a, &k)) return scale(t, b, k, out);
  if (sum_const(t, b, &k)) return scale(t, a, k, out);
  term ta[MAXT], tb[MAXT];
  int na = read_terms(t, a, ta), nb = read_terms(t, b, tb);
  term *buf = kiln_malloc((size_t)na * (size_t)nb * sizeof *buf);
  if (!buf) return nomem();
  kiln_status s = KILN_OK;
  int n = 0;
  for (int i = 0; i < na && !s; i++)
    for (int j = 0; j < nb && !s; j++) {
      if (__builtin_mul_overflow(ta[i].coef, tb[j].coef, &buf[n].coef)) s = overflow();
      else s = mono_mul(t, ta[i].mono, tb[j].mono, &buf[n++].mono);
    }
  if (!s) s = mk_sum(t, buf, n, out);
  kiln_free(buf);
  return s;
}

/* Multiset difference m - d of two monomials into *q; *ok false when d
 * does not divide m. */
static kiln_status mono_div(kiln_symtab *t, int32_t m, int32_t d, bool *ok, int32_t *q) {
  int nm = (int)t->nodes[m].n, nd = (int)t->nodes[d].n, k = 0, j = 0;
  int64_t rest[KILN_SYMDIM_MAX_DEGREE];
  const int64_t *pm = PL(t, m), *pd = PL(t, d);
  for (int i = 0; i < nm; i++) {
    if (j < nd && pd[j] == pm[i]) j++;
    else if (j < nd && pd[j] < pm[i]) break;
    else rest[k++] = pm[i];
  }
  *ok = j == nd;
  if (!*ok) return KILN_OK;
  return mk_mono(t, rest, k, q);
}

/* Splits a = b*Q + R for a nonzero divisor b: b a single term c*m moves
 * every term of a that c*m divides into Q; a longer b moves a when a is a
 * constant multiple of b. */
static kiln_status split_div(kiln_symtab *t, const term *a, int na, const term *b, int nb, term *q, int *nq,
                             term *r, int *nr) {
  *nq = *nr = 0;
  if (nb == 1) {
    for (int i = 0; i < na; i++) {
      bool ok = divides(b[0].coef, a[i].coef) && !(a[i].coef == INT64_MIN && b[0].coef == -1);
      int32_t qm = 0;
      if (ok) {
        kiln_status s = mono_div(t, a[i].mono, b[0].mono, &ok, &qm);
        if (s) return s;
      }
      if (ok) q[(*nq)++] = (term){qm, a[i].coef / b[0].coef};
      else r[(*nr)++] = a[i];
    }
    return KILN_OK;
  }
  bool mult = na == nb && divides(b[0].coef, a[0].coef) && !(a[0].coef == INT64_MIN && b[0].coef == -1);
  int64_t k = mult ? a[0].coef / b[0].coef : 0, p;
  for (int i = 0; mult && i < na; i++)
    mult = a[i].mono == b[i].mono && !__builtin_mul_overflow(b[i].coef, k, &p) && p == a[i].coef;
  if (mult) q[(*nq)++] = (term){0, k};
  else memcpy(r, a, (size_t)na * sizeof *a), *nr = na;
  return KILN_OK;
}

static kiln_status sum_plus_atom(kiln_symtab *t, term *q, int nq, int kind, kiln_dimx x, kiln_dimx y,
                                 kiln_dimx *out) {
  kiln_dimx args[2] = {x, y}, atom, qs;
  kiln_status s = mk_atom(t, kind, args, 2, &atom);
  if (!s) s = mk_sum(t, q, nq, &qs);
  if (!s) s = add(t, qs, atom, out);
  return s;
}

/* Leading (first non-constant) coefficient of a non-constant sum. */
static int64_t lead(const term *ts, int n) { return ts[0].mono == 0 && n > 1 ? ts[1].coef : ts[0].coef; }

static kiln_status fdiv_k(kiln_symtab *t, term *a, int na, int64_t k, kiln_dimx *out);

/* floor(a/k), k >= 2: a = k*Q + R with R's coefficients in [0, k); then
 * R and k shrink by the gcd of R's variable coefficients and k;
 * floor((floor(x/d) + r)/k) becomes floor((x + d*r)/(d*k)). */
static kiln_status fdiv_k(kiln_symtab *t, term *a, int na, int64_t k, kiln_dimx *out) {
  term q[MAXT + 1], r[MAXT + 2];
  if (na > MAXT + 1)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic dim has more than %d terms (limit)", MAXT);
  int nq = 0, nr = 0, nvar = 0;
  int64_t g = k, r0 = 0;
  for (int i = 0; i < na; i++) {
    int64_t rr = floormod(a[i].coef, k), qq = a[i].coef / k - (a[i].coef % k < 0);
    if (qq) q[nq++] = (term){a[i].mono, qq};
    if (a[i].mono == 0) r0 = rr;
    else if (rr) r[nr++] = (term){a[i].mono, rr}, g = gcd64(g, rr), nvar++;
  }
  if (nvar == 0) return mk_sum(t, q, nq, out);
  if (g > 1) {
    for (int i = 0; i < nr; i++) r[i].coef /= g;
    r0 = floordiv(r0, g), k /= g;
  }
  if (r0) r[nr++] = (term){0, r0};
  if (nvar == 1 && r[0].coef == 1 && t->nodes[r[0].mono].n == 1) {
    int32_t atom = (int32_t)PL(t, r[0].mono)[0];
    int64_t d, dk, dr;
    if (t->nodes[atom].kind == K_FDIV && sum_const(t, (kiln_dimx)PL(t, atom)[1], &d) && d > 0 &&
        !__builtin_mul_overflow(d, k, &dk) && !__builtin_mul_overflow(d, r0, &dr)) {
      term x[MAXT + 1];
      int nx = read_terms(t, (kiln_dimx)PL(t, atom)[0], x);
      x[nx++] = (term){0, dr};
      if (norm_terms(x, &nx)) {
        kiln_dimx inner, qs;
        kiln_status s = fdiv_k(t, x, nx, dk, &inner);
        if (!s) s = mk_sum(t, q, nq, &qs);
        return s ? s : add(t, qs, inner, out);
      }
    }
  }
  kiln_dimx rs, ks;
  kiln_status s = mk_sum(t, r, nr, &rs);
  if (!s) s = mk_const(t, k, &ks);
  return s ? s : sum_plus_atom(t, q, nq, K_FDIV, rs, ks, out);
}

static kiln_status div_zero(const kiln_symtab *t, kiln_dimx a) {
  char b[128];
  return kiln_fail(KILN_E_INVALID_SHAPE, "division by zero: (%s)/0", kiln_dimx_str(t, a, b, sizeof b));
}

/* Copies a and b into ta, tb; when b's leading coefficient is negative,
 * negates both (floor(a/b) = floor(-a/-b)) and sets *flipped. */
static void load_signed(const kiln_symtab *t, kiln_dimx a, kiln_dimx b, term *ta, int *na, term *tb, int *nb,
                        bool *flipped) {
  *na = read_terms(t, a, ta), *nb = read_terms(t, b, tb);
  *flipped = false;
  if (lead(tb, *nb) < 0) {
    term xa[MAXT];
    memcpy(xa, ta, (size_t)*na * sizeof *ta);
    if (neg_ok(xa, *na) && neg_ok(tb, *nb)) {
      memcpy(ta, xa, (size_t)*na * sizeof *ta);
      *flipped = true;
    }
  }
}

static kiln_status fdiv(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  int64_t ka, kb;
  term ta[MAXT], tb[MAXT], q[MAXT], r[MAXT];
  int na, nb, nq, nr;
  if (sum_const(t, b, &kb)) {
    if (kb == 0) return div_zero(t, a);
    if (sum_const(t, a, &ka)) {
      if (ka == INT64_MIN && kb == -1) return overflow();
      return mk_const(t, floordiv(ka, kb), out);
    }
    na = read_terms(t, a, ta);
    if (kb < 0) {
      if (kb == INT64_MIN) return overflow();
      kiln_status s = neg_terms(ta, na);
      if (s) return s;
      kb = -kb;
    }
    if (kb == 1) return mk_sum(t, ta, na, out);
    return fdiv_k(t, ta, na, kb, out);
  }
  bool flipped;
  load_signed(t, a, b, ta, &na, tb, &nb, &flipped);
  kiln_dimx a2 = a, b2 = b, rs;
  kiln_status s;
  if (flipped && ((s = mk_sum(t, ta, na, &a2)) || (s = mk_sum(t, tb, nb, &b2)))) return s;
  const node *bn = &t->nodes[b2];
  if (bn->lo >= 1 || bn->hi <= -1) { /* b is never 0: split off the multiples of b */
    if ((s = split_div(t, ta, na, tb, nb, q, &nq, r, &nr))) return s;
    if (nr == 0) return mk_sum(t, q, nq, out);
    if ((s = mk_sum(t, r, nr, &rs))) return s;
    return sum_plus_atom(t, q, nq, K_FDIV, rs, b2, out);
  }
  kiln_dimx args[2] = {a2, b2};
  return mk_atom(t, K_FDIV, args, 2, out);
}

static kiln_status cdiv(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  int64_t ka, kb;
  kiln_dimx x, y;
  kiln_status s;
  if (sum_const(t, b, &kb)) {
    if (kb == 0) return div_zero(t, a);
    if (sum_const(t, a, &ka)) {
      if (ka == INT64_MIN && kb == -1) return overflow();
      int64_t q = ka / kb;
      return mk_const(t, (ka % kb != 0 && ((ka < 0) == (kb < 0))) ? q + 1 : q, out);
    }
    if (kb < 0) { /* ceil(a/k) = ceil(-a/-k) */
      if (kb == INT64_MIN) return overflow();
      if ((s = scale(t, a, -1, &a))) return s;
      kb = -kb;
    }
    if (kb == 1) return *out = a, KILN_OK;
    if ((s = addk(t, a, kb - 1, &x))) return s; /* ceil(a/k) = floor((a+k-1)/k) */
    term tx[MAXT];
    int nx = read_terms(t, x, tx);
    return fdiv_k(t, tx, nx, kb, out);
  }
  const node *bn = &t->nodes[b];
  if (bn->lo >= 1) { /* ceil(a/b) = floor((a+b-1)/b) */
    if ((s = add(t, a, b, &x)) || (s = addk(t, x, -1, &y))) return s;
    return fdiv(t, y, b, out);
  }
  if (bn->hi <= -1) { /* ceil(a/b) = floor((a+b+1)/b) */
    if ((s = add(t, a, b, &x)) || (s = addk(t, x, 1, &y))) return s;
    return fdiv(t, y, b, out);
  }
  term ta[MAXT], tb[MAXT];
  int na, nb;
  bool flipped;
  load_signed(t, a, b, ta, &na, tb, &nb, &flipped);
  kiln_dimx args[2] = {a, b};
  if (flipped && ((s = mk_sum(t, ta, na, &args[0])) || (s = mk_sum(t, tb, nb, &args[1])))) return s;
  return mk_atom(t, K_CDIV, args, 2, out);
}

/* r mod b: r - j*b when b is a constant k and r's range lies in one block
 * [j*k, j*k+k); r when 0 <= r < b always; else the atom. */
static kiln_status mod_finish(kiln_symtab *t, term *r, int nr, kiln_dimx b, kiln_dimx *out) {
  kiln_dimx rs;
  kiln_status s = mk_sum(t, r, nr, &rs);
  if (s) return s;
  const node *rn = &t->nodes[rs], *bn = &t->nodes[b];
  int64_t k;
  if (sum_const(t, b, &k) && k > 0 && iv_finite((ivl){rn->lo, rn->hi})) {
    int64_t j = floordiv(rn->lo, k);
    if (j == floordiv(rn->hi, k)) {
      int64_t jk;
      if (!__builtin_mul_overflow(j, k, &jk) && jk != INT64_MIN) return addk(t, rs, -jk, out);
    }
  } else if (bn->lo >= 1 && rn->lo >= 0 && rn->hi < bn->lo)
    return *out = rs, KILN_OK;
  kiln_dimx args[2] = {rs, b};
  return mk_atom(t, K_MOD, args, 2, out);
}

static kiln_status mod(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  int64_t ka, kb;
  term ta[MAXT], tb[MAXT], q[MAXT], r[MAXT];
  int na, nb, nq, nr;
  kiln_status s;
  kiln_dimx m;
  if (sum_const(t, b, &kb)) {
    if (kb == 0) return div_zero(t, a);
    if (sum_const(t, a, &ka)) return mk_const(t, floormod(ka, kb), out);
    if (kb == 1 || kb == -1) return mk_const(t, 0, out);
    if (kb < 0) { /* a mod k = -((-a) mod -k) */
      if (kb == INT64_MIN) return overflow();
      kiln_dimx na_, nk;
      if ((s = scale(t, a, -1, &na_)) || (s = mk_const(t, -kb, &nk)) || (s = mod(t, na_, nk, &m))) return s;
      return scale(t, m, -1, out);
    }
    na = read_terms(t, a, ta);
    nr = 0;
    for (int i = 0; i < na; i++) {
      int64_t rr = floormod(ta[i].coef, kb);
      if (rr) r[nr++] = (term){ta[i].mono, rr};
    }
    return mod_finish(t, r, nr, b, out);
  }
  bool flipped;
  load_signed(t, a, b, ta, &na, tb, &nb, &flipped);
  kiln_dimx a2 = a, b2 = b;
  if (flipped && ((s = mk_sum(t, ta, na, &a2)) || (s = mk_sum(t, tb, nb, &b2)))) return s;
  const node *bn = &t->nodes[b2];
  if (bn->lo >= 1 || bn->hi <= -1) {
    if ((s = split_div(t, ta, na, tb, nb, q, &nq, r, &nr))) return s;
    s = mod_finish(t, r, nr, b2, &m);
  } else {
    kiln_dimx args[2] = {a2, b2};
    s = mk_atom(t, K_MOD, args, 2, &m);
  }
  if (s) return s;
  return flipped ? scale(t, m, -1, out) : (*out = m, KILN_OK);
}

/* Range of x - y (every symbol in [1, +inf)); false when it overflows. */
static bool diff_range(const kiln_symtab *t, kiln_dimx x, kiln_dimx y, ivl *r) {
  term buf[2 * MAXT];
  int nx = read_terms(t, x, buf), ny = read_terms(t, y, buf + nx);
  for (int i = nx; i < nx + ny; i++) {
    if (buf[i].coef == INT64_MIN) return false;
    buf[i].coef = -buf[i].coef;
  }
  int n = nx + ny;
  if (!norm_terms(buf, &n)) return false;
  *r = terms_range(t, buf, n);
  return true;
}

/* min / max of n operands: nested ones of the same kind flattened,
 * constants folded, duplicates and provably dominated operands dropped. */
static kiln_status minmax(kiln_symtab *t, int kind, const kiln_dimx *in, int nin, kiln_dimx *out) {
  kiln_dimx l[2 * KILN_SYMDIM_MAX_ARGS + 2];
  int n = 0;
  bool have_k = false;
  int64_t k = 0, v;
  for (int i = 0; i < nin; i++) {
    int32_t atom = sum_atom(t, in[i]);
    bool nested = atom >= 0 && t->nodes[atom].kind == kind; /* min(min(a,b),c) = min(a,b,c) */
    int ns = nested ? (int)t->nodes[atom].n : 1;
    for (int j = 0; j < ns; j++) {
      kiln_dimx x = nested ? (kiln_dimx)PL(t, atom)[j] : in[i];
      if (sum_const(t, x, &v)) {
        if (!have_k || (kind == K_MIN ? v < k : v > k)) k = v;
        have_k = true;
      } else if (n < 2 * KILN_SYMDIM_MAX_ARGS) l[n++] = x;
      else
        return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic %s of more than %d operands (limit)",
                         kind == K_MIN ? "min" : "max", KILN_SYMDIM_MAX_ARGS);
    }
  }
  if (have_k) {
    kiln_status s = mk_const(t, k, &l[n]);
    if (s) return s;
    n++;
  }
  int64_t key[2 * KILN_SYMDIM_MAX_ARGS + 2];
  for (int i = 0; i < n; i++) key[i] = l[i];
  qsort(key, (size_t)n, sizeof *key, cmp_i64);
  bool drop[2 * KILN_SYMDIM_MAX_ARGS + 2] = {false};
  for (int i = 1; i < n; i++) drop[i] = key[i] == key[i - 1];
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n && !drop[i]; j++) {
      ivl d;
      if (i == j || drop[j] || !diff_range(t, (kiln_dimx)key[j], (kiln_dimx)key[i], &d)) continue;
      if (kind == K_MIN ? d.lo >= 0 : d.hi <= 0) drop[j] = true; /* key[j] never wins over key[i] */
    }
  int m = 0;
  for (int i = 0; i < n; i++)
    if (!drop[i]) l[m++] = (kiln_dimx)key[i];
  if (m == 1) return *out = l[0], KILN_OK;
  if (m > KILN_SYMDIM_MAX_ARGS)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic %s of more than %d operands (limit)",
                     kind == K_MIN ? "min" : "max", KILN_SYMDIM_MAX_ARGS);
  return mk_atom(t, kind, l, m, out);
}

/* ---- public constructors ---- */

kiln_status kiln_dimx_const(kiln_symtab *t, int64_t v, kiln_dimx *out) { return mk_const(t, v, out); }

kiln_status kiln_dimx_sym(kiln_symtab *t, const char *name, kiln_dimx *out) {
  if (!name || !*name) return kiln_fail(KILN_E_INVALID_SHAPE, "empty symbolic dim name");
  size_t len = strlen(name);
  if (len > KILN_SYMDIM_MAX_NAME)
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "symbolic dim name of %zu bytes (limit %d)", len,
                     KILN_SYMDIM_MAX_NAME);
  int s = kiln_sym_find(t, name);
  bool fresh = s < 0;
  if (fresh) s = t->n_syms;
  int64_t p = s, a1;
  int32_t atom = 0, mono = 0;
  kiln_status st = intern(t, K_SYM, &p, 1, 1, (ivl){1, PINF}, &atom);
  if (st) return st;
  a1 = atom;
  if ((st = mk_mono(t, &a1, 1, &mono))) return st;
  term tm = {mono, 1};
  if ((st = mk_sum(t, &tm, 1, out))) return st;
  t->nodes[atom].aux = *out;
  if (!fresh) return KILN_OK;
  if (t->n_syms == t->cap_syms) {
    sym *ns = kiln_realloc(t->syms, (size_t)t->cap_syms * 2 * sizeof *ns);
    if (!ns) return nomem();
    t->syms = ns, t->cap_syms *= 2;
  }
  if ((uint32_t)(t->n_syms + 1) * 2 > t->n_sslots) {
    uint32_t n = t->n_sslots * 2;
    int32_t *sl = kiln_malloc((size_t)n * sizeof *sl);
    if (!sl) return nomem();
    memset(sl, 0xff, (size_t)n * sizeof *sl);
    for (int32_t i = 0; i < t->n_syms; i++) slot_insert(sl, n, hash_str(t->syms[i].name), i);
    kiln_free(t->sslots);
    t->sslots = sl, t->n_sslots = n;
  }
  char *copy = kiln_strdup(name);
  if (!copy) return nomem();
  t->syms[s] = (sym){copy, false, false, 0, 0, false};
  t->n_syms++;
  slot_insert(t->sslots, t->n_sslots, hash_str(name), s);
  return KILN_OK;
}

kiln_status kiln_dimx_sym_data(kiln_symtab *t, const char *name, kiln_dimx *out) {
  kiln_status st = kiln_dimx_sym(t, name, out);
  if (!st) t->syms[kiln_sym_find(t, name)].data = true;
  return st;
}

bool kiln_sym_is_data(const kiln_symtab *t, int s) { return s >= 0 && s < t->n_syms && t->syms[s].data; }

/* Whether x depends on a data-dependent symbol: with every other symbol
 * set to 1, x is still not a constant. */
static bool on_data(kiln_symtab *t, kiln_dimx x) {
  bool any = false;
  for (int k = 0; k < t->n_syms && !any; k++) any = t->syms[k].data;
  if (!any || kiln_dimx_is_const(t, x, NULL)) return false;
  int64_t *vals = kiln_malloc(((size_t)t->n_syms + 1) * sizeof *vals);
  if (!vals) return false;
  for (int k = 0; k < t->n_syms; k++) vals[k] = t->syms[k].data ? KILN_DIM_UNSET : 1;
  kiln_dimx r;
  bool dep = !kiln_dimx_subst(t, x, vals, t->n_syms, &r) && !kiln_dimx_is_const(t, r, NULL);
  kiln_error_clear();
  kiln_free(vals);
  return dep;
}

kiln_status kiln_dimx_add(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  return add(t, a, b, out);
}

kiln_status kiln_dimx_sub(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  return sub(t, a, b, out);
}

kiln_status kiln_dimx_mul(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  return mul(t, a, b, out);
}

kiln_status kiln_dimx_add_const(kiln_symtab *t, kiln_dimx a, int64_t k, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  return addk(t, a, k, out);
}

kiln_status kiln_dimx_mul_const(kiln_symtab *t, kiln_dimx a, int64_t k, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  return scale(t, a, k, out);
}

kiln_status kiln_dimx_fdiv(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  return fdiv(t, a, b, out);
}

kiln_status kiln_dimx_cdiv(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  return cdiv(t, a, b, out);
}

kiln_status kiln_dimx_mod(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  return mod(t, a, b, out);
}

kiln_status kiln_dimx_min(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  kiln_dimx in[2] = {a, b};
  return minmax(t, K_MIN, in, 2, out);
}

kiln_status kiln_dimx_max(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  kiln_dimx in[2] = {a, b};
  return minmax(t, K_MAX, in, 2, out);
}

/* ---- queries ---- */

bool kiln_dimx_is_const(const kiln_symtab *t, kiln_dimx x, int64_t *value) {
  int64_t v;
  if (!valid(t, x) || !sum_const(t, x, &v)) return false;
  if (value) *value = v;
  return true;
}

int kiln_dimx_as_sym(const kiln_symtab *t, kiln_dimx x) {
  if (!valid(t, x)) return -1;
  int32_t atom = sum_atom(t, x);
  return atom >= 0 && t->nodes[atom].kind == K_SYM ? (int)PL(t, atom)[0] : -1;
}

/* Evaluation and substitution share the symbol lookup. */
typedef struct env {
  kiln_symtab *t;
  const int64_t *vals;
  int n_vals;
  kiln_dimx top;
} env;

/* The value of symbol s in e: *has false when it has none. */
static kiln_status sym_lookup(const env *e, int s, bool *has, int64_t *v) {
  const sym *y = &e->t->syms[s];
  *has = true;
  if (e->vals && s < e->n_vals && e->vals[s] != KILN_DIM_UNSET) {
    if (e->vals[s] < 1)
      return kiln_fail(KILN_E_INVALID_SHAPE, "symbol %s = %lld: a symbolic dim is >= 1", y->name,
                       (long long)e->vals[s]);
    if (y->has_value && y->value != e->vals[s])
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "symbol %s: %lld vs %lld fixed by the model", y->name,
                       (long long)e->vals[s], (long long)y->value);
    *v = e->vals[s];
  } else if (y->has_value) *v = y->value;
  else *has = false;
  return KILN_OK;
}

static kiln_status ev_sum(env *e, kiln_dimx x, int64_t *out);

static kiln_status ev_overflow(env *e, kiln_dimx x) {
  char b1[128], b2[128];
  return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "dim %s overflows int64 (at %s)",
                   kiln_dimx_str(e->t, e->top, b1, sizeof b1), kiln_dimx_str(e->t, x, b2, sizeof b2));
}

static kiln_status ev_atom(env *e, int32_t a, int64_t *out) {
  kiln_symtab *t = e->t;
  node *nd = &t->nodes[a];
  if (nd->gen == t->gen) return *out = nd->m0, KILN_OK;
  int kind = nd->kind, n = (int)nd->n;
  int64_t v[KILN_SYMDIM_MAX_ARGS], r = 0;
  kiln_status s;
  char b1[128], b2[128];
  if (kind == K_SYM) {
    int sy = (int)PL(t, a)[0];
    bool has;
    if ((s = sym_lookup(e, sy, &has, &r))) return s;
    if (!has)
      return kiln_fail(KILN_E_INVALID_SHAPE, "symbol %s has no value (evaluating dim %s)", t->syms[sy].name,
                       kiln_dimx_str(t, e->top, b1, sizeof b1));
  } else {
    for (int i = 0; i < n; i++)
      if ((s = ev_sum(e, (kiln_dimx)PL(t, a)[i], &v[i]))) return s;
    if ((kind == K_FDIV || kind == K_CDIV || kind == K_MOD) && v[1] == 0)
      return kiln_fail(KILN_E_INVALID_SHAPE, "division by zero evaluating dim %s (%s is 0)",
                       kiln_dimx_str(t, e->top, b1, sizeof b1),
                       kiln_dimx_str(t, (kiln_dimx)PL(t, a)[1], b2, sizeof b2));
    if ((kind == K_FDIV || kind == K_CDIV) && v[0] == INT64_MIN && v[1] == -1)
      return ev_overflow(e, t->nodes[a].aux >= 0 ? t->nodes[a].aux : e->top);
    switch (kind) {
    case K_FDIV: r = floordiv(v[0], v[1]); break;
    case K_CDIV: r = v[0] / v[1] + (v[0] % v[1] != 0 && ((v[0] < 0) == (v[1] < 0))); break;
    case K_MOD: r = floormod(v[0], v[1]); break;
    case K_MIN:
    case K_MAX:
      r = v[0];
      for (int i = 1; i < n; i++)
        if (kind == K_MIN ? v[i] < r : v[i] > r) r = v[i];
      break;
    }
  }
  nd = &t->nodes[a];
  nd->gen = t->gen, nd->m0 = r;
  *out = r;
  return KILN_OK;
}

static kiln_status ev_sum(env *e, kiln_dimx x, int64_t *out) {
  kiln_symtab *t = e->t;
  int n = (int)t->nodes[x].n / 2;
  int64_t acc = 0;
  for (int i = 0; i < n; i++) {
    int32_t m = (int32_t)PL(t, x)[2 * i];
    int64_t tv = PL(t, x)[2 * i + 1];
    for (uint32_t j = 0; j < t->nodes[m].n; j++) {
      int64_t av;
      kiln_status s = ev_atom(e, (int32_t)PL(t, m)[j], &av);
      if (s) return s;
      if (__builtin_mul_overflow(tv, av, &tv)) return ev_overflow(e, x);
    }
    if (__builtin_add_overflow(acc, tv, &acc)) return ev_overflow(e, x);
  }
  *out = acc;
  return KILN_OK;
}

kiln_status kiln_dimx_eval(kiln_symtab *t, kiln_dimx x, const int64_t *vals, int n_vals, int64_t *out) {
  CHECK_HANDLE(t, x);
  next_gen(t);
  env e = {t, vals, n_vals, x};
  return ev_sum(&e, x, out);
}

static kiln_status sb_sum(env *e, kiln_dimx x, kiln_dimx *out);

static kiln_status sb_atom(env *e, int32_t a, kiln_dimx *out) {
  kiln_symtab *t = e->t;
  if (t->nodes[a].gen == t->gen) return *out = (kiln_dimx)t->nodes[a].m0, KILN_OK;
  int kind = t->nodes[a].kind, n = (int)t->nodes[a].n;
  kiln_dimx args[KILN_SYMDIM_MAX_ARGS], r = t->nodes[a].aux;
  kiln_status s = KILN_OK;
  if (kind == K_SYM) {
    bool has;
    int64_t v;
    if ((s = sym_lookup(e, (int)PL(t, a)[0], &has, &v))) return s;
    if (has) s = mk_const(t, v, &r);
  } else {
    bool changed = false;
    for (int i = 0; i < n && !s; i++) {
      kiln_dimx old = (kiln_dimx)PL(t, a)[i];
      s = sb_sum(e, old, &args[i]);
      changed |= args[i] != old;
    }
    if (!s && changed) {
      switch (kind) {
      case K_FDIV: s = fdiv(t, args[0], args[1], &r); break;
      case K_CDIV: s = cdiv(t, args[0], args[1], &r); break;
      case K_MOD: s = mod(t, args[0], args[1], &r); break;
      default:
        r = args[0];
        for (int i = 1; i < n && !s; i++) {
          kiln_dimx pair[2] = {r, args[i]};
          s = minmax(t, kind, pair, 2, &r);
        }
      }
    }
  }
  if (s) return s;
  t->nodes[a].gen = t->gen, t->nodes[a].m0 = r;
  *out = r;
  return KILN_OK;
}

static kiln_status sb_sum(env *e, kiln_dimx x, kiln_dimx *out) {
  kiln_symtab *t = e->t;
  term ts[MAXT]; /* unchanged terms are compacted to the front */
  int n = read_terms(t, x, ts), nk = 0;
  kiln_dimx acc = KILN_DIMX_NONE;
  kiln_status s = KILN_OK;
  for (int i = 0; i < n && !s; i++) {
    int64_t atoms[KILN_SYMDIM_MAX_DEGREE];
    int na = (int)t->nodes[ts[i].mono].n;
    memcpy(atoms, PL(t, ts[i].mono), (size_t)na * sizeof *atoms);
    kiln_dimx sa[KILN_SYMDIM_MAX_DEGREE];
    bool changed = false;
    for (int j = 0; j < na && !s; j++) {
      s = sb_atom(e, (int32_t)atoms[j], &sa[j]);
      changed |= !s && sa[j] != t->nodes[atoms[j]].aux;
    }
    if (s) break;
    if (!changed) {
      ts[nk++] = ts[i];
      continue;
    }
    kiln_dimx p;
    s = mk_const(t, ts[i].coef, &p);
    for (int j = 0; j < na && !s; j++) s = mul(t, p, sa[j], &p);
    if (!s) s = acc == KILN_DIMX_NONE ? (acc = p, KILN_OK) : add(t, acc, p, &acc);
  }
  if (s) return s;
  if (acc == KILN_DIMX_NONE) return *out = x, KILN_OK;
  kiln_dimx ks;
  if ((s = mk_sum(t, ts, nk, &ks))) return s;
  return add(t, ks, acc, out);
}

kiln_status kiln_dimx_subst(kiln_symtab *t, kiln_dimx x, const int64_t *vals, int n_vals, kiln_dimx *out) {
  CHECK_HANDLE(t, x);
  next_gen(t);
  env e = {t, vals, n_vals, x};
  return sb_sum(&e, x, out);
}

/* Range under the table's bounds; why records the first cause of an
 * unbounded result. */
typedef struct rctx {
  kiln_symtab *t;
  int unbounded_sym; /* -1 none */
  bool divzero;
} rctx;

static ivl rg_sum(rctx *c, kiln_dimx x);

static ivl rg_atom(rctx *c, int32_t a) {
  kiln_symtab *t = c->t;
  node *nd = &t->nodes[a];
  if (nd->gen == t->gen) return (ivl){nd->m0, nd->m1};
  ivl r;
  if (nd->kind == K_SYM) {
    const sym *y = &t->syms[PL(t, a)[0]];
    if (y->has_value) r = iv_const(y->value);
    else if (y->has_max) r = (ivl){1, y->max};
    else {
      if (c->unbounded_sym < 0) c->unbounded_sym = (int)PL(t, a)[0];
      r = (ivl){1, PINF};
    }
  } else {
    ivl ar[KILN_SYMDIM_MAX_ARGS];
    int n = (int)nd->n;
    for (int i = 0; i < n; i++) ar[i] = rg_sum(c, (kiln_dimx)PL(t, a)[i]);
    r = op_range(t->nodes[a].kind, ar, n, &c->divzero);
  }
  nd = &t->nodes[a];
  nd->gen = t->gen, nd->m0 = r.lo, nd->m1 = r.hi;
  return r;
}

static ivl rg_sum(rctx *c, kiln_dimx x) {
  kiln_symtab *t = c->t;
  int n = (int)t->nodes[x].n / 2;
  ivl acc = iv_const(0);
  for (int i = 0; i < n; i++) {
    int32_t m = (int32_t)PL(t, x)[2 * i];
    ivl p = iv_const(PL(t, x)[2 * i + 1]);
    for (uint32_t j = 0; j < t->nodes[m].n; j++) p = iv_mul(p, rg_atom(c, (int32_t)PL(t, m)[j]));
    acc = iv_add(acc, p);
  }
  return acc;
}

kiln_status kiln_dimx_range(kiln_symtab *t, kiln_dimx x, int64_t *lo, int64_t *hi) {
  CHECK_HANDLE(t, x);
  next_gen(t);
  rctx c = {t, -1, false};
  ivl r = rg_sum(&c, x);
  if (r.hi == PINF) {
    char b[128];
    kiln_dimx_str(t, x, b, sizeof b);
    if (c.unbounded_sym >= 0)
      return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "cannot bound dim %s: symbol %s has no upper bound", b,
                       t->syms[c.unbounded_sym].name);
    if (c.divzero) return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "cannot bound dim %s: a divisor may be 0", b);
    return kiln_fail(KILN_E_UNSUPPORTED_SHAPE, "cannot bound dim %s: it may exceed int64", b);
  }
  if (lo) *lo = r.lo;
  if (hi) *hi = r.hi;
  return KILN_OK;
}

kiln_status kiln_dimx_bound(kiln_symtab *t, kiln_dimx x, int64_t *max) { return kiln_dimx_range(t, x, NULL, max); }

/* ---- printing ---- */

typedef struct wr {
  char *buf;
  int size, len;
  bool full;
} wr;

static void put(wr *w, const char *s) {
  if (w->full) return;
  size_t n = strlen(s);
  if (w->len + (int)n >= w->size) {
    n = (size_t)(w->size - 1 - w->len);
    w->full = true;
  }
  memcpy(w->buf + w->len, s, n);
  w->len += (int)n;
  w->buf[w->len] = 0;
}

static void putu(wr *w, uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%" PRIu64, v);
  put(w, b);
}

static uint64_t mag(int64_t v) { return v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v; }

enum { CX_TOP, CX_NUM, CX_DEN };

static void pr_sum(const kiln_symtab *t, wr *w, kiln_dimx x, int cx);

static void pr_atom(const kiln_symtab *t, wr *w, int32_t a) {
  if (w->full) return;
  const node *nd = &t->nodes[a];
  const int64_t *p = PL(t, a);
  switch (nd->kind) {
  case K_SYM: put(w, t->syms[p[0]].name); return;
  case K_FDIV:
  case K_MOD:
    pr_sum(t, w, (kiln_dimx)p[0], CX_NUM);
    put(w, nd->kind == K_FDIV ? "/" : "%");
    pr_sum(t, w, (kiln_dimx)p[1], CX_DEN);
    return;
  case K_CDIV:
    put(w, "ceil(");
    pr_sum(t, w, (kiln_dimx)p[0], CX_NUM);
    put(w, "/");
    pr_sum(t, w, (kiln_dimx)p[1], CX_DEN);
    put(w, ")");
    return;
  default:
    put(w, nd->kind == K_MIN ? "min(" : "max(");
    for (uint32_t i = 0; i < nd->n; i++) {
      if (i) put(w, ",");
      pr_sum(t, w, (kiln_dimx)p[i], CX_TOP);
    }
    put(w, ")");
  }
}

static bool is_divlike(const kiln_symtab *t, int64_t atom) {
  int k = t->nodes[atom].kind;
  return k == K_FDIV || k == K_MOD;
}

/* Terms in monomial order with the constant last; a "/" or "%" factor is
 * parenthesised unless it is the whole term (so "-(N/2)", "S*(N/2)"). */
static void pr_sum(const kiln_symtab *t, wr *w, kiln_dimx x, int cx) {
  if (w->full) return;
  const node *nd = &t->nodes[x];
  int n = (int)nd->n / 2;
  const int64_t *p = PL(t, x);
  int64_t c;
  bool paren;
  if (sum_const(t, x, &c)) paren = (cx == CX_NUM || cx == CX_DEN) && c < 0;
  else if (n > 1) paren = cx != CX_TOP;
  else if (cx == CX_NUM) paren = p[1] < 0;
  else if (cx == CX_DEN) {
    int32_t atom = sum_atom(t, x);
    paren = atom < 0 || is_divlike(t, atom);
  } else paren = false;
  if (paren) put(w, "(");
  if (n == 0) put(w, "0");
  bool first = true;
  int skip = n > 0 && p[0] == 0; /* the constant term sorts first: print it last */
  for (int k = 0; k < n; k++) {
    int i = (k + skip) % n;
    int32_t m = (int32_t)p[2 * i];
    int64_t coef = p[2 * i + 1];
    put(w, coef < 0 ? "-" : first ? "" : "+");
    uint64_t mg = mag(coef);
    int nf = (int)t->nodes[m].n;
    if (m == 0 || mg != 1) {
      putu(w, mg);
      if (m != 0) put(w, "*");
    }
    for (int f = 0; f < nf; f++) {
      int64_t atom = PL(t, m)[f];
      bool pp = is_divlike(t, atom) && (nf > 1 || mg != 1 || (coef < 0 && first));
      if (f) put(w, "*");
      if (pp) put(w, "(");
      pr_atom(t, w, (int32_t)atom);
      if (pp) put(w, ")");
    }
    first = false;
    if (w->full) break;
  }
  if (paren) put(w, ")");
}

const char *kiln_dimx_str(const kiln_symtab *t, kiln_dimx x, char *buf, int size) {
  if (!buf || size <= 0) return buf;
  buf[0] = 0;
  wr w = {buf, size, 0, false};
  if (!valid(t, x)) put(&w, "<bad dim>");
  else pr_sum(t, &w, x, CX_TOP);
  if (w.full && size >= 4) memcpy(buf + size - 4, "...", 4);
  return buf;
}

/* ---- unification ---- */

kiln_status kiln_dim_unify(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out) {
  CHECK_HANDLE(t, a);
  CHECK_HANDLE(t, b);
  if (a == b) return *out = a, KILN_OK;
  kiln_dimx sa, sb;
  kiln_status s = kiln_dimx_subst(t, a, NULL, 0, &sa);
  if (!s) s = kiln_dimx_subst(t, b, NULL, 0, &sb);
  if (s) return s;
  ivl d;
  if (sa == sb || (diff_range(t, sa, sb, &d) && d.lo == 0 && d.hi == 0)) return *out = sa, KILN_OK;
  int64_t k;
  for (int side = 0; side < 2; side++) {
    kiln_dimx c = side ? sb : sa, v = side ? sa : sb;
    int sy = kiln_dimx_as_sym(t, v);
    if (sy < 0 || t->syms[sy].data || !sum_const(t, c, &k) || k < 1) continue;
    if (t->syms[sy].has_max && k > t->syms[sy].max) {
      return kiln_fail(KILN_E_MISMATCH_SHAPE, "%s vs %lld (%s is at most %lld)", t->syms[sy].name, (long long)k,
                       t->syms[sy].name, (long long)t->syms[sy].max);
    }
    t->syms[sy].has_value = true, t->syms[sy].value = k;
    return *out = c, KILN_OK;
  }
  char ba[128], bb[128], ca[128], cb[128];
  kiln_dimx_str(t, a, ba, sizeof ba), kiln_dimx_str(t, b, bb, sizeof bb);
  kiln_dimx_str(t, sa, ca, sizeof ca), kiln_dimx_str(t, sb, cb, sizeof cb);
  /* two constants, or a difference that cannot be 0 for any sizes of the
     symbols, differ for every run; otherwise some sizes make them equal */
  bool never = (kiln_dimx_is_const(t, sa, NULL) && kiln_dimx_is_const(t, sb, NULL)) ||
               (diff_range(t, sa, sb, &d) && (d.lo > 0 || d.hi < 0));
  /* a data-dependent dim (kiln_dimx_sym_data) that some data would make
     equal: taken as it is, never recorded (Compress's [1] may broadcast
     against 4); the kernels that meet it compute and check the real sizes
     at the run */
  bool da = on_data(t, sa), db = on_data(t, sb);
  if (!never && (da || db)) return *out = da ? sa : sb, KILN_OK;
  return kiln_fail(never ? KILN_E_MISMATCH_SHAPE : KILN_E_SYMBOLIC_SHAPE, "%s%s%s%s vs %s%s%s%s", ba,
                   sa != a ? " (=" : "", sa != a ? ca : "", sa != a ? ")" : "", bb, sb != b ? " (=" : "",
                   sb != b ? cb : "", sb != b ? ")" : "");
}
