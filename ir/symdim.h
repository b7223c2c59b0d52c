/* ir/symdim: symbolic dimensions — expressions over ONNX dim_param names
 * (N, N*S, 4*N+1, N*S/2 …) kept hash-consed in canonical form in a table, so
 * equal expressions have equal handles; with evaluation, bounds and printing. */
#ifndef KILN_IR_SYMDIM_H
#define KILN_IR_SYMDIM_H
#include <stdbool.h>
#include <stdint.h>

#include "ir/status.h"

/* Semantics. Every symbol stands for a dimension >= 1, and simplification
 * relies on it (min(N,1) is 1, (N*S)/S is N). "/" is floor division, "%" the
 * floor remainder (it takes the divisor's sign), ceil() ceiling division.
 * Canonical form: a sum of monomials with int64 coefficients over atoms —
 * symbols and the div/mod/min/max nodes that do not simplify. A division or
 * remainder by an expression not provably nonzero stays an atom, so that
 * evaluating it at zero is an error. The table is not thread-safe. */

typedef struct kiln_symtab kiln_symtab;
/* An expression handle: equal handles <=> equal canonical forms. */
typedef int32_t kiln_dimx;
#define KILN_DIMX_NONE ((kiln_dimx)-1)
/* In a bindings array (indexed by symbol id): "this symbol has no value". */
#define KILN_DIM_UNSET INT64_MIN

/* Limits against hostile models. Exceeding one is an error with a message:
 * KILN_E_NOMEM for the node count, KILN_E_UNSUPPORTED_SHAPE for the others. */
#define KILN_SYMDIM_MAX_NODES (1 << 18) /* expression nodes per table (default) */
#define KILN_SYMDIM_MAX_DEPTH 64        /* nesting of div/mod/min/max (default) */
#define KILN_SYMDIM_MAX_TERMS 64        /* monomials in one sum */
#define KILN_SYMDIM_MAX_DEGREE 16       /* atoms in one monomial */
#define KILN_SYMDIM_MAX_ARGS 16         /* operands of one min/max */
#define KILN_SYMDIM_MAX_NAME 256        /* bytes of a symbol name */

/* A new, empty table with the default limits. */
kiln_status kiln_symtab_create(kiln_symtab **out);
/* Frees the table with its symbols and expressions (NULL is fine). */
void kiln_symtab_free(kiln_symtab *t);
/* Changes the node and depth limits (a value <= 0 keeps the current one;
 * depth is capped at 255). Existing expressions stay valid. */
void kiln_symtab_set_limits(kiln_symtab *t, int max_nodes, int max_depth);
/* Number of interned nodes (atoms, monomials and sums). */
int kiln_symtab_nodes(const kiln_symtab *t);

/* Symbols, numbered 0..kiln_symtab_nsyms()-1 in order of first use. */
int kiln_symtab_nsyms(const kiln_symtab *t);
/* The symbol's name, or NULL for a bad id. */
const char *kiln_sym_name(const kiln_symtab *t, int sym);
/* Id of the symbol named name, or -1. */
int kiln_sym_find(const kiln_symtab *t, const char *name);
/* Sets the symbol's upper bound (>= 1), used by kiln_dimx_bound/range. */
kiln_status kiln_sym_set_max(kiln_symtab *t, int sym, int64_t max);
/* The symbol named name as kiln_dimx_sym makes it, marked data-dependent:
 * a dim only a run's data sets (NonZero, Compress; ir/shape.h
 * kiln_shape_fresh). kiln_dim_unify never records a value for it. */
kiln_status kiln_dimx_sym_data(kiln_symtab *t, const char *name, kiln_dimx *out);
/* Whether symbol s was made by kiln_dimx_sym_data. */
bool kiln_sym_is_data(const kiln_symtab *t, int s);
/* The symbol's upper bound, if one was set. */
bool kiln_sym_max(const kiln_symtab *t, int sym, int64_t *max);
/* The value the model fixes for the symbol (recorded by kiln_dim_unify). */
bool kiln_sym_value(const kiln_symtab *t, int sym, int64_t *value);

/* Construction. Each returns the canonical handle in *out, or fails with a
 * message: KILN_E_UNSUPPORTED_SHAPE when a constant overflows int64 or a
 * limit is reached, KILN_E_INVALID_SHAPE on division by a constant 0 or a
 * bad name, KILN_E_INTERNAL on a handle that is not one of t's. */
kiln_status kiln_dimx_const(kiln_symtab *t, int64_t v, kiln_dimx *out);
/* The symbol named name (a non-empty string), added on first use. */
kiln_status kiln_dimx_sym(kiln_symtab *t, const char *name, kiln_dimx *out);
kiln_status kiln_dimx_add(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);
kiln_status kiln_dimx_sub(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);
kiln_status kiln_dimx_mul(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);
/* a + k and a * k. */
kiln_status kiln_dimx_add_const(kiln_symtab *t, kiln_dimx a, int64_t k, kiln_dimx *out);
kiln_status kiln_dimx_mul_const(kiln_symtab *t, kiln_dimx a, int64_t k, kiln_dimx *out);
/* floor(a/b), ceil(a/b) and a - b*floor(a/b). */
kiln_status kiln_dimx_fdiv(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);
kiln_status kiln_dimx_cdiv(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);
kiln_status kiln_dimx_mod(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);
kiln_status kiln_dimx_min(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);
kiln_status kiln_dimx_max(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);

/* True when x is a constant; *value (optional) gets it. */
bool kiln_dimx_is_const(const kiln_symtab *t, kiln_dimx x, int64_t *value);
/* The symbol id when x is a bare symbol, else -1. */
int kiln_dimx_as_sym(const kiln_symtab *t, kiln_dimx x);

/* Value of x with symbol s bound to vals[s] (s < n_vals, not KILN_DIM_UNSET;
 * vals may be NULL), else to the value the table records for s. Fails with
 * KILN_E_INVALID_SHAPE on an unbound symbol (naming it), a value < 1 or
 * division by zero; KILN_E_MISMATCH_SHAPE when vals contradicts a recorded
 * value; KILN_E_UNSUPPORTED_SHAPE on int64 overflow. */
kiln_status kiln_dimx_eval(kiln_symtab *t, kiln_dimx x, const int64_t *vals, int n_vals, int64_t *out);
/* x with the symbols that have a value (as for kiln_dimx_eval) replaced by
 * it, re-simplified; the others stay. Fails as construction does. */
kiln_status kiln_dimx_subst(kiln_symtab *t, kiln_dimx x, const int64_t *vals, int n_vals, kiln_dimx *out);

/* Range of x when each symbol lies in [1, its max] (or is its recorded
 * value): *hi is the exact maximum where x is monotone in each symbol, a safe
 * upper bound otherwise; *lo likewise a lower bound (INT64_MIN: none). Fails
 * (KILN_E_UNSUPPORTED_SHAPE, saying why) when no upper bound can be given: a
 * symbol without a max, a divisor that may be 0, or int64 overflow. */
kiln_status kiln_dimx_range(kiln_symtab *t, kiln_dimx x, int64_t *lo, int64_t *hi);
/* The upper bound of kiln_dimx_range alone. */
kiln_status kiln_dimx_bound(kiln_symtab *t, kiln_dimx x, int64_t *max);

/* Formats x as text ("4*N+1", "N*S/2", "min(N,64)", "ceil(N/S)") into buf,
 * truncated with "..." when it does not fit. Returns buf. */
const char *kiln_dimx_str(const kiln_symtab *t, kiln_dimx x, char *buf, int size);

/* The common dim of a and b for shape inference: *out = a when a and b are
 * provably equal (after substituting recorded values); when one is a
 * constant c >= 1 (within the symbol's max) and the other a bare symbol
 * without a value, records symbol = c and *out = c. Otherwise fails with
 * message "a vs b" (the caller prefixes the tensor and dim with
 * kiln_error_prefix): KILN_E_MISMATCH_SHAPE when they differ for every size
 * of their symbols (two constants, a difference whose range excludes 0),
 * KILN_E_SYMBOLIC_SHAPE when some sizes make them equal ((H+1)/2 vs 4, M vs
 * S): a backend then decides with a run's concrete sizes. A dim over a
 * data-dependent symbol (kiln_dimx_sym_data) that may equal the other is
 * accepted and nothing is recorded: *out is that dim, and the kernels check
 * the real sizes when they run. */
kiln_status kiln_dim_unify(kiln_symtab *t, kiln_dimx a, kiln_dimx b, kiln_dimx *out);

#endif
