/* opencl/codegen: prints a bound elementwise kernel spec as OpenCL C 1.2.
 * Data plus one walk: a per-op format table (one template per arithmetic
 * domain: float, signed, unsigned/bool) and a dialect struct; the walk
 * prints the index maps (literals, collapsed dims), one const variable per
 * expression in DAG order, and the stores. Semantics follow
 * fuse/spec_eval.c (the oracle) expression by expression. */
#include "opencl/codegen.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_fallback/vmath.h" /* the coefficients of exp, tanh, sigmoid, erf */
#include "ir/alloc.h"
#include "ir/views.h"
#include "opencl/ops.h" /* kiln_clop_row_group */

/* ------------------------------------------------------------------ */
/* the dialect                                                         */

typedef struct cl_dialect {
  const char *kernel;   /* kernel qualifier */
  const char *global;   /* buffer address space */
  const char *gid;      /* work-item id expression */
  const char *fp64_pragma;
} cl_dialect;

static const cl_dialect opencl12 = {"__kernel void", "__global", "get_global_id(0)",
                                    "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"};

/* ------------------------------------------------------------------ */
/* kiln's float math (default; KILN_CL_MATH=builtin: the built-ins)    */

/* exp, tanh, sigmoid and erf of float and floatW as straight-line code:
 * the clamps, range reductions, polynomials and rational functions of the
 * CPU's vmath (cpu_fallback/VMATH.md; the coefficients are vmath.h's),
 * every branch a select, so that they vectorise where the built-ins did
 * not (PoCL's float4 exp/tanh composed in one kernel cost more than
 * apart). Rounding to an integer adds 1.5 * 2^23 (PoCL's rint is a scalar
 * call per lane); multiply-adds are KILN_MAD. Clamps are selects on a
 * comparison, select(x, lo, isless(x, lo)), not fmin/fmax: a comparison
 * with NaN is false, so a NaN goes through the clamp and then through
 * every later step (NaN in gives NaN out without a fix-up select), and
 * x86 does the pair in one min/max instruction where fmin/fmax (which
 * return the other operand for a NaN) take three. ±inf and the overflow /
 * underflow edges give what the built-ins give (exp: +inf, +0; tanh,
 * erf: ±1; sigmoid: 1, 0), ±0 keeps its sign where the built-in does.
 * Measured error against double (opencl/ENGINE.md): exp and erf 1 ulp,
 * sigmoid 2, tanh (the CPU's rational form since 2026-11-25) 5 on PoCL,
 * 6 on rusticl (llvmpipe does not fuse the multiply-adds).
 * Printed once per element type T with I the integer type of its shape. */
#define KILN_S_(x) #x
#define KILN_S(x) KILN_S_(x)
#define KILN_K(T, c) "(" #T ")(" KILN_S(c) ")"
/* tanh: the largest float below atanh(1 - 2^-25), so that tanh of every
 * float above it rounds to 1. The CPU clamps at KILN_VM_TANH_R_CLAMP and
 * relies on its fused multiply-adds to give exactly 1 from 9.01 on;
 * llvmpipe does not contract a * b + c, and the unfused Horner steps gave
 * 1 +- 1 ulp there, so the OpenCL form returns +-1 beyond this bound. */
#define KILN_CL_TANH_SAT 0x1.205966p+3f
/* select(x, bound, x beyond it) */
#define KILN_CLAMP_LO(T, x, lo) "select(" x ", " KILN_K(T, lo) ", isless(" x ", " KILN_K(T, lo) "))"
#define KILN_CLAMP_HI(T, x, hi) "select(" x ", " KILN_K(T, hi) ", isgreater(" x ", " KILN_K(T, hi) "))"
#define CL_MATH(T, I)                                                                                                  \
  "/* kiln's " #T " math (cpu_fallback/VMATH.md; KILN_CL_MATH=builtin: the built-ins) */\n"                            \
  "/* e^r for c = n ln2 + r, t = c log2(e) + 1.5 * 2^23 (n in its low bits), |r| <= ln2 / 2: "                        \
  "1 + r + r^2 P(r) */\n"                                                                                              \
  "inline " #T " kiln_expr_" #T "(" #T " c, " #T " t) {\n"                                                              \
  "  const " #T " fn = t - " KILN_K(T, 0x1.8p23f) ";\n"                                                               \
  "  const " #T " r = KILN_MAD(-fn, " KILN_K(T, KILN_VM_LN2_LO) ", KILN_MAD(-fn, " KILN_K(T, KILN_VM_LN2_HI) ", c));\n" \
  "  " #T " p = KILN_MAD(" KILN_K(T, KILN_VM_EXP_P0) ", r, " KILN_K(T, KILN_VM_EXP_P1) ");\n"                          \
  "  p = KILN_MAD(p, r, " KILN_K(T, KILN_VM_EXP_P2) ");\n"                                                             \
  "  p = KILN_MAD(p, r, " KILN_K(T, KILN_VM_EXP_P3) ");\n"                                                             \
  "  p = KILN_MAD(p, r, " KILN_K(T, KILN_VM_EXP_P4) ");\n"                                                             \
  "  p = KILN_MAD(p, r, " KILN_K(T, KILN_VM_EXP_P5) ");\n"                                                             \
  "  return KILN_MAD(p, r * r, r) + (" #T ")(1.0f);\n"                                                                 \
  "}\n"                                                                                                                \
  "/* e^c for c in [" KILN_S(KILN_VM_EXP_LO) ", " KILN_S(KILN_VM_EXP_HI) "] or NaN: e^r times 2^(n/2) 2^(n - n/2) "     \
  "(a denormal result rounded once) */\n"                                                                              \
  "inline " #T " kiln_expc_" #T "(" #T " c) {\n"                                                                       \
  "  const " #T " t = KILN_MAD(c, " KILN_K(T, KILN_VM_LOG2E) ", " KILN_K(T, 0x1.8p23f) ");\n"                       \
  "  /* m = n + 254 from t's bits (1.5 * 2^23 is 0x4b400000), h = n/2 + 127, m - h = n - n/2 + 127 */\n"             \
  "  const " #I " m = as_" #I "(t) - 0x4b3fff02, h = m >> 1;\n"                                                        \
  "  return kiln_expr_" #T "(c, t) * as_" #T "(h << 23) * as_" #T "((m - h) << 23);\n"                                 \
  "}\n"                                                                                                                \
  "inline " #T " kiln_exp_" #T "(" #T " x) {\n"                                                                        \
  "  const " #T " c = " KILN_CLAMP_LO(T, "x", KILN_VM_EXP_LO) ";\n"                                                    \
  "  return kiln_expc_" #T "(" KILN_CLAMP_HI(T, "c", KILN_VM_EXP_HI) ");\n"                                            \
  "}\n"                                                                                                                \
  "/* c P(c^2) / Q(c^2), c = x clamped to +-" KILN_S(KILN_CL_TANH_SAT) "; +-1 beyond (odd: tanh(+-0) = +-0) */\n"       \
  "inline " #T " kiln_tanh_" #T "(" #T " x) {\n"                                                                       \
  "  const " #I " g = isgreater(x, " KILN_K(T, KILN_CL_TANH_SAT) "),\n"                                                 \
  "            l = isless(x, " KILN_K(T, -KILN_CL_TANH_SAT) ");\n"                                                     \
  "  const " #T " c = select(select(x, " KILN_K(T, KILN_CL_TANH_SAT) ", g), " KILN_K(T, -KILN_CL_TANH_SAT) ", l);\n"   \
  "  const " #T " z = c * c;\n"                                                                                        \
  "  " #T " p = KILN_MAD(" KILN_K(T, KILN_VM_TANH_RP4) ", z, " KILN_K(T, KILN_VM_TANH_RP3) ");\n"                      \
  "  p = KILN_MAD(p, z, " KILN_K(T, KILN_VM_TANH_RP2) ");\n"                                                           \
  "  p = KILN_MAD(p, z, " KILN_K(T, KILN_VM_TANH_RP1) ");\n"                                                           \
  "  p = KILN_MAD(p, z, (" #T ")(1.0f));\n"                                                                            \
  "  " #T " q = KILN_MAD(" KILN_K(T, KILN_VM_TANH_RQ4) ", z, " KILN_K(T, KILN_VM_TANH_RQ3) ");\n"                      \
  "  q = KILN_MAD(q, z, " KILN_K(T, KILN_VM_TANH_RQ2) ");\n"                                                           \
  "  q = KILN_MAD(q, z, " KILN_K(T, KILN_VM_TANH_RQ1) ");\n"                                                           \
  "  q = KILN_MAD(q, z, (" #T ")(1.0f));\n"                                                                            \
  "  return select(select(c * p / q, (" #T ")(1.0f), g), (" #T ")(-1.0f), l);\n"                                      \
  "}\n"                                                                                                                \
  "/* e = e^-|x| 2^64 (-|x| clamped from below only; n + 64 in [-86, 64]: one exact scaling, no denormal): "         \
  "2^64 / (2^64 + e) for x >= 0, e / (2^64 + e) below (no overflow; the quotient of e^-|x| and 1 + e^-|x| "           \
  "as before, a denormal result rounded once) */\n"                                                                    \
  "inline " #T " kiln_sigmoid_" #T "(" #T " x) {\n"                                                                    \
  "  const " #T " a = -fabs(x), c = " KILN_CLAMP_LO(T, "a", KILN_VM_EXP_LO) ";\n"                                      \
  "  const " #T " t = KILN_MAD(c, " KILN_K(T, KILN_VM_LOG2E) ", " KILN_K(T, 0x1.8p23f) ");\n"                       \
  "  const " #T " e = kiln_expr_" #T "(c, t) * as_" #T "((as_" #I "(t) - 0x4b3fff41) << 23);\n"                        \
  "  return select(e, " KILN_K(T, 0x1p64f) ", isgreaterequal(x, (" #T ")(0.0f))) / (" KILN_K(T, 0x1p64f) " + e);\n"   \
  "}\n"                                                                                                                \
  "/* |x| <= " KILN_S(KILN_VM_ERF_SPLIT) ": x + x P(x^2); else 1 - e^Q(|x|), |x| <= " KILN_S(KILN_VM_ERF_CLAMP)        \
  " (Q in [-18, 0]: no exp clamp); the sign of x */\n"                                                                 \
  "inline " #T " kiln_erf_" #T "(" #T " x) {\n"                                                                        \
  "  const " #T " a = fabs(x), s = x * x, t = " KILN_CLAMP_HI(T, "a", KILN_VM_ERF_CLAMP) ";\n"                         \
  "  " #T " p = KILN_MAD(" KILN_K(T, KILN_VM_ERF_S0) ", s, " KILN_K(T, KILN_VM_ERF_S1) ");\n"                          \
  "  p = KILN_MAD(p, s, " KILN_K(T, KILN_VM_ERF_S2) ");\n"                                                             \
  "  p = KILN_MAD(p, s, " KILN_K(T, KILN_VM_ERF_S3) ");\n"                                                             \
  "  p = KILN_MAD(p, s, " KILN_K(T, KILN_VM_ERF_S4) ");\n"                                                             \
  "  p = KILN_MAD(p, s, " KILN_K(T, KILN_VM_ERF_S5) ");\n"                                                             \
  "  " #T " q = KILN_MAD(" KILN_K(T, KILN_VM_ERF_L0) ", t, " KILN_K(T, KILN_VM_ERF_L1) ");\n"                          \
  "  q = KILN_MAD(q, t * t, KILN_MAD(" KILN_K(T, KILN_VM_ERF_L2) ", t, " KILN_K(T, KILN_VM_ERF_L3) "));\n"             \
  "  q = KILN_MAD(q, t, " KILN_K(T, KILN_VM_ERF_L4) ");\n"                                                             \
  "  q = KILN_MAD(q, t, " KILN_K(T, KILN_VM_ERF_L5) ");\n"                                                             \
  "  q = KILN_MAD(q, t, " KILN_K(T, KILN_VM_ERF_L6) ");\n"                                                             \
  "  const " #T " big = copysign((" #T ")(1.0f) - kiln_expc_" #T "(KILN_MAD(q, t, -t)), x);\n"                         \
  "  return select(big, KILN_MAD(p, x, x), islessequal(a, " KILN_K(T, KILN_VM_ERF_SPLIT) "));\n"                       \
  "}\n"

/* The built-ins under kiln's names (KILN_CL_MATH=builtin: the code before
 * kiln's own math, sigmoid with the reference's two branches and one exp). */
#define CL_MATH_BUILTIN(T)                                                                                             \
  "inline " #T " kiln_exp_" #T "(" #T " x) { return exp(x); }\n"                                                       \
  "inline " #T " kiln_tanh_" #T "(" #T " x) { return tanh(x); }\n"                                                     \
  "inline " #T " kiln_erf_" #T "(" #T " x) { return erf(x); }\n"

/* Helpers every program gets once (guarded so that kernels concatenate). */
static const char prelude_kiln[] = "#ifndef KILN_CL_PRELUDE\n"
                                   "#define KILN_CL_PRELUDE\n"
                                   "#define KILN_CLAMP01(v) ((v) < 0 ? 0 : (v) > 1 ? 1 : (v))\n"
                                   "/* a multiply-add the compiler may contract (FP_CONTRACT is on by default);\n"
                                   "   not fma(), which llvmpipe computes in software (8x slower) */\n"
                                   "#define KILN_MAD(a, b, c) ((a) * (b) + (c))\n" CL_MATH(float, int)
                                   "#endif\n";
static const char prelude_builtin[] = "#ifndef KILN_CL_PRELUDE\n"
                                      "#define KILN_CL_PRELUDE\n"
                                      "#define KILN_CLAMP01(v) ((v) < 0 ? 0 : (v) > 1 ? 1 : (v))\n"
                                      "/* the reference's two branches with one exp: e = exp(-|x|) */\n"
                                      "inline float kiln_sigmoid_float(float x) {\n"
                                      "  const float e = exp(-fabs(x));\n"
                                      "  return (x >= 0 ? 1.0f : e) / (1.0f + e);\n"
                                      "}\n" CL_MATH_BUILTIN(float) "#endif\n";
static const char prelude64[] = "#ifndef KILN_CL_PRELUDE64\n"
                                "#define KILN_CL_PRELUDE64\n"
                                "inline double kiln_sigmoid_double(double x) {\n"
                                "  const double e = exp(-fabs(x));\n"
                                "  return (x >= 0 ? 1.0 : e) / (1.0 + e);\n"
                                "}\n" CL_MATH_BUILTIN(double) "#endif\n";

/* KILN_CL_MATH=builtin: the OpenCL built-ins for exp, tanh, sigmoid, erf. */
static bool builtin_math(void) {
  const char *e = getenv("KILN_CL_MATH");
  return e && !strcmp(e, "builtin");
}

static const char *prelude(void) { return builtin_math() ? prelude_builtin : prelude_kiln; }

/* ------------------------------------------------------------------ */
/* the op table                                                        */

/* Templates: $0 $1 $2 the arguments (already in the domain's type), $T the
 * domain's C type, $p0 $p1 $p2 the float attributes as literals of $T, $k
 * the integer attribute. NULL: the op is not printed in that domain. ulp:
 * the extra float32 error of the OpenCL built-in (0 = exact or a
 * composition of correctly rounded steps). */
typedef struct cl_op_fmt {
  kiln_fuse_op op;
  const char *f, *s, *u;
  double rtol;
} cl_op_fmt;

#define ULP4 5e-7 /* 4 ulp of float32, relative (OpenCL 1.2: exp, log, sin, ... <= 3-4 ulp) */

static const cl_op_fmt op_table[] = {
    {KILN_FUSE_ABS, "fabs($0)", "($0 < 0 ? -$0 : $0)", "$0", 0},
    {KILN_FUSE_NEG, "(-$0)", "(-$0)", NULL, 0},
    {KILN_FUSE_SQRT, "sqrt($0)", NULL, NULL, ULP4},
    {KILN_FUSE_EXP, "kiln_exp_$T($0)", NULL, NULL, ULP4},
    {KILN_FUSE_LOG, "log($0)", NULL, NULL, ULP4},
    {KILN_FUSE_RECIP, "(($T)1 / $0)", NULL, NULL, ULP4},
    {KILN_FUSE_FLOOR, "floor($0)", NULL, NULL, 0},
    {KILN_FUSE_CEIL, "ceil($0)", NULL, NULL, 0},
    /* signed: not `$0 < 0 ? 0 : $0`, which llvmpipe (Mesa 22.3, LLVM 15)
       crashed compiling on char (ENGINE.md, "Integer Relu on llvmpipe") */
    {KILN_FUSE_RELU, "($0 < 0 ? ($T)0 : $0)", "($0 > ($T)0 ? $0 : ($T)0)", "$0", 0},
    {KILN_FUSE_LEAKY_RELU, "($0 < 0 ? $p0 * $0 : $0)", NULL, NULL, 0},
    {KILN_FUSE_ELU, "($0 < 0 ? $p0 * expm1($0) : $0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_SELU, "($0 > 0 ? $p2 * $0 : $p2 * ($p0 * exp($0) - $p0))", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_SIGMOID, "kiln_sigmoid_$T($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_HARD_SIGMOID, "KILN_CLAMP01($p0 * $0 + $p1)", NULL, NULL, ULP4},
    {KILN_FUSE_TANH, "kiln_tanh_$T($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_SOFTPLUS, "($0 > 0 ? $0 + log1p(exp(-$0)) : log1p(exp($0)))", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ERF, "kiln_erf_$T($0)", NULL, NULL, 4 * ULP4},
    {KILN_FUSE_SIGN, "($0 > 0 ? ($T)1 : $0 < 0 ? ($T)-1 : $0)", "(($T)($0 > 0) - ($T)($0 < 0))", "($0 != 0)", 0},
    {KILN_FUSE_SOFTSIGN, "($0 / (($T)1 + fabs($0)))", NULL, NULL, ULP4},
    {KILN_FUSE_HARD_SWISH, "($0 * KILN_CLAMP01($0 / ($T)6 + ($T)0.5f))", NULL, NULL, ULP4},
    {KILN_FUSE_THRESHOLDED_RELU, "($0 > $p0 ? $0 : ($T)0)", NULL, NULL, 0},
    {KILN_FUSE_CELU, "($0 > 0 ? $0 : $p0 * expm1($0 / $p0))", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ROUND, "rint($0)", NULL, NULL, 0},
    {KILN_FUSE_SIN, "sin($0)", NULL, NULL, ULP4},
    {KILN_FUSE_COS, "cos($0)", NULL, NULL, ULP4},
    {KILN_FUSE_TAN, "tan($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ASIN, "asin($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ACOS, "acos($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ATAN, "atan($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_SINH, "sinh($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_COSH, "cosh($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ASINH, "asinh($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ACOSH, "acosh($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_ATANH, "atanh($0)", NULL, NULL, 2 * ULP4},
    {KILN_FUSE_SHRINK, "($0 < -$p0 ? $0 + $p1 : $0 > $p0 ? $0 - $p1 : ($T)0)", NULL, NULL, 0},
    {KILN_FUSE_NOT, "($0 == 0)", "($0 == 0)", "($0 == 0)", 0},
    {KILN_FUSE_ISNAN, "isnan($0)", "0", "0", 0},
    {KILN_FUSE_ISINF, "(isinf($0) && (($0 > 0 && ($k & 2)) || ($0 < 0 && ($k & 1))))", "0", "0", 0},
    {KILN_FUSE_COPY, "$0", "$0", "$0", 0},
    {KILN_FUSE_CAST, "$0", "$0", "$0", 0},
    {KILN_FUSE_ADD, "($0 + $1)", "($0 + $1)", "($0 + $1)", 0},
    {KILN_FUSE_SUB, "($0 - $1)", "($0 - $1)", "($0 - $1)", 0},
    {KILN_FUSE_MUL, "($0 * $1)", "($0 * $1)", "($0 * $1)", 0},
    {KILN_FUSE_DIV, "($0 / $1)", "($1 == -1 ? -$0 : $0 / $1)", "($0 / $1)", ULP4},
    {KILN_FUSE_MOD, "fmod($0, $1)",
     "($1 == -1 ? ($T)0 : ($0 % $1 != 0 && (($0 % $1 < 0) != ($1 < 0))) ? $0 % $1 + $1 : $0 % $1)", "($0 % $1)", 0},
    {KILN_FUSE_FMOD, "fmod($0, $1)", "($1 == -1 ? ($T)0 : $0 % $1)", "($0 % $1)", 0},
    {KILN_FUSE_MIN, "((isnan($0) || isnan($1)) ? ($T)NAN : $0 < $1 ? $0 : $1)", "($0 < $1 ? $0 : $1)",
     "($0 < $1 ? $0 : $1)", 0},
    {KILN_FUSE_MAX, "((isnan($0) || isnan($1)) ? ($T)NAN : $0 > $1 ? $0 : $1)", "($0 > $1 ? $0 : $1)",
     "($0 > $1 ? $0 : $1)", 0},
    {KILN_FUSE_EQ, "($0 == $1)", "($0 == $1)", "($0 == $1)", 0},
    {KILN_FUSE_GT, "($0 > $1)", "($0 > $1)", "($0 > $1)", 0},
    {KILN_FUSE_LT, "($0 < $1)", "($0 < $1)", "($0 < $1)", 0},
    {KILN_FUSE_GE, "($0 >= $1)", "($0 >= $1)", "($0 >= $1)", 0},
    {KILN_FUSE_LE, "($0 <= $1)", "($0 <= $1)", "($0 <= $1)", 0},
    {KILN_FUSE_AND, "($0 != 0 && $1 != 0)", "($0 && $1)", "($0 && $1)", 0},
    {KILN_FUSE_OR, "($0 != 0 || $1 != 0)", "($0 || $1)", "($0 || $1)", 0},
    {KILN_FUSE_XOR, "(($0 != 0) != ($1 != 0))", "(!$0 != !$1)", "(!$0 != !$1)", 0},
    {KILN_FUSE_SHL, NULL, NULL, "($1 >= 64 ? (ulong)0 : (ulong)$0 << $1)", 0},
    {KILN_FUSE_SHR, NULL, NULL, "($1 >= 64 ? (ulong)0 : (ulong)$0 >> $1)", 0},
    {KILN_FUSE_PRELU, "($0 < 0 ? $0 * $1 : $0)", "($0 >= 0 ? $0 : $0 * $1)", "$0", 0},
    {KILN_FUSE_POW, "pow($0, $1)", NULL, NULL, 16 * ULP4 / 4},
    {KILN_FUSE_WHERE, "($0 ? $1 : $2)", "($0 ? $1 : $2)", "($0 ? $1 : $2)", 0},
    {KILN_FUSE_CLIP, "(($0 < $1 ? $1 : $0) > $2 ? $2 : ($0 < $1 ? $1 : $0))",
     "(($0 < $1 ? $1 : $0) > $2 ? $2 : ($0 < $1 ? $1 : $0))", "(($0 < $1 ? $1 : $0) > $2 ? $2 : ($0 < $1 ? $1 : $0))",
     0},
};

static const cl_op_fmt *find_op(kiln_fuse_op op) {
  for (size_t i = 0; i < sizeof op_table / sizeof *op_table; i++)
    if (op_table[i].op == op) return &op_table[i];
  return NULL;
}

double kiln_cl_codegen_op_rtol(kiln_fuse_op op) {
  const cl_op_fmt *f = find_op(op);
  return f ? f->rtol : 0;
}

/* ------------------------------------------------------------------ */
/* a growing string                                                    */

typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool oom;
} sbuf;

/* Room for n more bytes and a terminator (false, b->oom set, when memory runs out). */
static bool sb_room(sbuf *b, size_t n) {
  if (b->p && b->len + n + 1 <= b->cap) return true;
  size_t cap = b->cap ? b->cap : 1024;
  while (cap < b->len + n + 1) cap *= 2;
  char *q = kiln_realloc(b->p, cap);
  if (!q) {
    b->oom = true;
    return false;
  }
  b->p = q;
  b->cap = cap;
  return true;
}

static void sb_put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A format without a conversion is copied, not printed (printf is slow in
 * kiln's processes: kiln_cl_src_printf, opencl/ops.c). */
static void sb_put(sbuf *b, const char *fmt, ...) {
  if (b->oom) return;
  if (!strchr(fmt, '%')) {
    size_t n = strlen(fmt);
    if (!sb_room(b, n)) return;
    memcpy(b->p + b->len, fmt, n + 1);
    b->len += n;
    return;
  }
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->cap - b->len;
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = true;
      return;
    }
    if (b->p && (size_t)n < room) {
      b->len += (size_t)n;
      return;
    }
    if (!sb_room(b, (size_t)n)) return;
  }
}

/* ------------------------------------------------------------------ */
/* types and literals                                                  */

/* The OpenCL C type a dtype is computed and stored in; NULL when the
 * printer does not handle it. */
static const char *ctype(kiln_dtype t) {
  switch (t) {
  case KILN_F32: return "float";
  case KILN_F64: return "double";
  case KILN_BOOL:
  case KILN_U8: return "uchar";
  case KILN_I8: return "char";
  case KILN_U16: return "ushort";
  case KILN_I16: return "short";
  case KILN_I32: return "int";
  case KILN_U32: return "uint";
  case KILN_I64: return "long";
  case KILN_U64: return "ulong";
  default: return NULL;
  }
}

enum { DOM_F, DOM_S, DOM_U };

static int domain_of(kiln_dtype t) {
  if (kiln_dtype_is_float(t)) return DOM_F;
  return kiln_dtype_is_int(t) && kiln_dtype_is_signed(t) ? DOM_S : DOM_U;
}

/* A float literal of type t (F32 or F64): hex, exact. */
static void put_float(sbuf *b, kiln_dtype t, double v) {
  const char *ty = t == KILN_F64 ? "double" : "float";
  if (isnan(v)) sb_put(b, "(%s)NAN", ty);
  else if (isinf(v)) sb_put(b, "(%s)(%sINFINITY)", ty, v < 0 ? "-" : "");
  else if (t == KILN_F64) sb_put(b, "%a", v);
  else sb_put(b, "%af", (double)(float)v);
}

/* An integer literal of type t. */
static void put_int(sbuf *b, kiln_dtype t, int64_t v) {
  if (t == KILN_U64) sb_put(b, "(ulong)%" PRIu64 "UL", (uint64_t)v);
  else if (v == INT64_MIN) sb_put(b, "(long)(-9223372036854775807L - 1)");
  else if (t == KILN_I64 || t == KILN_U32) sb_put(b, "(%s)%" PRId64 "L", ctype(t), v);
  else sb_put(b, "(%s)%" PRId64, ctype(t), v);
}

/* `src` (a C expression computed in type `from`) converted to `to` as the
 * reference stores it: floats to integers truncate and saturate, to bool
 * compare with 0, integers wrap. */
static void put_convert(sbuf *b, kiln_dtype from, kiln_dtype to, const char *src) {
  const char *tt = ctype(to);
  if (from == to) sb_put(b, "%s", src);
  else if (to == KILN_BOOL) sb_put(b, "(uchar)((%s) != 0)", src);
  else if (kiln_dtype_is_float(to)) sb_put(b, "convert_%s(%s)", tt, src);
  else if (kiln_dtype_is_float(from)) sb_put(b, "convert_%s_sat(%s)", tt, src);
  else sb_put(b, "(%s)(%s)", tt, src);
}

/* ------------------------------------------------------------------ */
/* index maps                                                          */

typedef struct gen {
  const kiln_fuse_spec *sp;
  const kiln_cl_device_info *dev;
  sbuf b;
  const char *ity; /* index type: "int" or "long" */
  const char *isuf;
  bool fp64;
  kiln_dtype pool_dtype; /* anchor printers: the type of the pooled store's buffer */
  int tiled;             /* the accessor read from the local tile, plus 1 (0: none; see tile_plan) */
  int vw;                /* the vector printer: lanes per work item (4, 8 or 16) */
  int rows;              /* the vector printer: rows per work item (1: one; see row_plan) */
  int64_t rowlen;        /* their length (elements), rows > 1 */
  uint64_t hoist;        /* accessors read once per item (bit a), rows > 1 */
  int blocks;            /* the vector printer: vectors per work item, interleaved (1: one; see block_plan) */
  uint64_t stream;       /* the vector printer: stores written with a non-temporal hint (bit k; see stream_plan) */
  char bs[16];           /* the block being printed: suffix of its names ("" with one block) */
} gen;

/* Prints the storage offset of view level `lvl` of map m at flat index
 * variable `f` into variables `<pre>o<lvl>` (and `<pre>m` &= validity). */
static void put_view(gen *g, const kiln_view *raw, const char *pre, int lvl, const char *f) {
  kiln_view v;
  kiln_view_compact(raw, &v);
  sbuf *b = &g->b;
  if (v.all_masked) {
    sb_put(b, "  const %s %so%d = 0;\n  %sm = false;\n", g->ity, pre, lvl, pre);
    return;
  }
  sb_put(b, "  const %s %so%d = %" PRId64 "%s", g->ity, pre, lvl, v.offset, g->isuf);
  int64_t inner = 1;
  int64_t span[KILN_MAX_RANK];
  for (int d = v.rank - 1; d >= 0; d--) {
    span[d] = inner;
    inner *= v.shape[d];
  }
  char idx[KILN_MAX_RANK][160];
  for (int d = 0; d < v.rank; d++) {
    /* flat -> index of dim d: literal div/mod; the outermost needs no mod */
    if (span[d] == 1 && d == 0) snprintf(idx[d], sizeof idx[d], "%s", f);
    else if (span[d] == 1) snprintf(idx[d], sizeof idx[d], "(%s %% %" PRId64 ")", f, v.shape[d]);
    else if (d == 0) snprintf(idx[d], sizeof idx[d], "(%s / %" PRId64 ")", f, span[d]);
    else snprintf(idx[d], sizeof idx[d], "(%s / %" PRId64 " %% %" PRId64 ")", f, span[d], v.shape[d]);
    if (v.strides[d] == 0) continue; /* broadcast: contributes nothing */
    if (v.strides[d] == 1) sb_put(b, " + %s", idx[d]);
    else sb_put(b, " + %s * %" PRId64, idx[d], v.strides[d]);
  }
  sb_put(b, ";\n");
  if (v.has_mask)
    for (int d = 0; d < v.rank; d++) {
      if (v.mask_lo[d] > 0) sb_put(b, "  %sm = %sm && %s >= %" PRId64 ";\n", pre, pre, idx[d], v.mask_lo[d]);
      if (v.mask_hi[d] < v.shape[d]) sb_put(b, "  %sm = %sm && %s < %" PRId64 ";\n", pre, pre, idx[d], v.mask_hi[d]);
    }
}

/* Prints the storage offset `<pre>o0` (and validity `<pre>m` when the map
 * has masks) of map m at flat index variable f, level by level. */
static void put_map(gen *g, const kiln_views *m, const char *pre, const char *f, bool *masked) {
  *masked = false;
  for (int k = 0; k < m->depth; k++) *masked |= m->v[k].has_mask;
  if (*masked) sb_put(&g->b, "  bool %sm = true;\n", pre);
  char prev[64];
  snprintf(prev, sizeof prev, "%s", f);
  for (int k = m->depth - 1; k >= 0; k--) {
    put_view(g, &m->v[k], pre, k, prev);
    snprintf(prev, sizeof prev, "%so%d", pre, k);
  }
}

/* ------------------------------------------------------------------ */
/* transposed reads tiled through local memory                         */

/* A read whose map walks the output's innermost dim with a large stride
 * (a transpose of the innermost dims) costs 11-58x a copy on PoCL
 * (opencl/ENGINE.md). Where that pays, such a read is tiled: one work-group per CL_TILE x CL_TILE tile of
 * the plane (q, j) — j the output's innermost dim, q the dim the input
 * walks with stride 1 — and per index `r` of the remaining dims; the group
 * reads the tile along q (contiguous in the input) into a padded __local
 * array, waits at a barrier and writes along j (contiguous in the
 * output), each work item CL_TILE^2 / local of them in a loop (measured
 * on PoCL: faster than the same loop with a literal trip count or unrolled
 * 32x8 rows, and than 16x16 tiles of one element per item; larger tiles
 * did not help). The group count is fixed: n_items = groups * local; any
 * local size computes the same. The source also holds the untiled kernel
 * as the tiled one's twin (kiln_cl_kernel_sig.twin), launched instead where
 * the kernel takes fewer than `local` items per group (rusticl's llvmpipe:
 * 32 for every kernel; there the tiled kernel at 32 ran 1.1-3x slower than
 * the untiled one, and an untiled branch inside the tiled kernel, tried
 * first, 3-5x: the barrier's cost). KILN_CL_TILE=0 prints the untiled form
 * alone. */
#define CL_TILE 32
#define CL_TILE_WG 256 /* PoCL compiles a kernel per local size: NULL or >= 256 */
/* Where tiling pays (PoCL, opencl/ENGINE.md; speed-up = untiled time /
 * tiled time): an input stride along j of at least a page (4 KiB; at 2 KiB
 * 0.77-0.84), j at least 1024 wide (the strided reads keep j streams in
 * the caches; 256 wide: 0.54-1.10, 7-64 wide: 0.10-0.36) and q at least 32
 * wide (16: 0.64-1.02, 4-8: 0.11-0.34); 1024 and more on both: 2.3-3.5,
 * 3.6-6.3 fused. KILN_CL_TILE=all takes every transposed read with a
 * 32-byte stride and 4-wide planes (the tests run odd sizes through the
 * tiles that way). */
#define CL_TILE_MIN_STRIDE_BYTES 4096
#define CL_TILE_MIN_J 1024
#define CL_TILE_MIN_Q 32
#define CL_TILE_ALL_STRIDE_BYTES 32
#define CL_TILE_ALL_EXTENT 4

typedef struct cl_tile {
  int rank; /* the compacted map's dims; the output is row-major over shape */
  int64_t shape[KILN_MAX_RANK], xs[KILN_MAX_RANK], ys[KILN_MAX_RANK], offset;
  int q, j;
  int64_t tq, tj, rest, groups;
  size_t local;
} cl_tile;

/* Whether map m (the top view over the output, read for each element of
 * a dense output of esize-byte elements) is worth tiling on dev; fills t. */
static bool tile_plan(const kiln_views *m, size_t esize, const kiln_cl_device_info *dev, cl_tile *t) {
  const char *e = getenv("KILN_CL_TILE");
  if ((e && !strcmp(e, "0")) || m->depth != 1 || m->v[0].has_mask) return false;
  kiln_view v;
  kiln_view_compact(&m->v[0], &v);
  if (v.has_mask || v.rank < 2) return false;
  memset(t, 0, sizeof *t);
  t->rank = v.rank;
  t->j = v.rank - 1;
  t->q = -1;
  for (int d = 0; d < v.rank - 1; d++)
    if (v.strides[d] == 1) t->q = d;
  bool all = e && !strcmp(e, "all");
  if (t->q < 0 || v.strides[t->j] <= 1 ||
      (size_t)v.strides[t->j] * esize < (all ? CL_TILE_ALL_STRIDE_BYTES : CL_TILE_MIN_STRIDE_BYTES) ||
      v.shape[t->q] < (all ? CL_TILE_ALL_EXTENT : CL_TILE_MIN_Q) ||
      v.shape[t->j] < (all ? CL_TILE_ALL_EXTENT : CL_TILE_MIN_J))
    return false;
  size_t local = CL_TILE_WG;
  while (local > 32 && ((dev->max_work_group_size && local > dev->max_work_group_size) ||
                        (dev->max_work_item_size0 && local > dev->max_work_item_size0)))
    local /= 2;
  if (dev->local_mem_size && (cl_ulong)(CL_TILE * (CL_TILE + 1)) * esize > dev->local_mem_size) return false;
  int64_t ys = 1;
  for (int d = v.rank - 1; d >= 0; d--) {
    t->shape[d] = v.shape[d];
    t->xs[d] = v.strides[d];
    t->ys[d] = ys;
    ys *= v.shape[d];
  }
  t->offset = v.offset;
  t->tq = (v.shape[t->q] + CL_TILE - 1) / CL_TILE;
  t->tj = (v.shape[t->j] + CL_TILE - 1) / CL_TILE;
  t->rest = v.numel / (v.shape[t->q] * v.shape[t->j]);
  t->groups = t->tq * t->tj * t->rest;
  t->local = local;
  return true;
}

/* Prints the tile kernel's head: the local array, the group's tile, the
 * load of input `a<acc>` (element type ty) into it along q and the
 * barrier, then opens the loop over the group's output elements along j:
 * inside it `gid` is the element's flat index and KT_ELEM its input value.
 * The caller prints the element and closes the loop and the kernel. */
static void put_tile_head(gen *g, const cl_tile *t, int acc, const char *ty) {
  sbuf *b = &g->b;
  const char *I = g->ity;
  sb_put(b, "  __local %s kiln_tile[%d][%d]; /* padded: the transposed reads hit distinct banks */\n", ty, CL_TILE,
         CL_TILE + 1);
  sb_put(b, "  const %s kg = (%s)get_group_id(0);\n  const uint kl = get_local_id(0), kls = get_local_size(0);\n", I, I);
  sb_put(b, "  const %s ktj = kg %% %" PRId64 ", ktq = kg / %" PRId64 " %% %" PRId64 ", kr = kg / %" PRId64 ";\n", I,
         t->tj, t->tj, t->tq, t->tj * t->tq);
  sb_put(b, "  %s kxb = %" PRId64 "%s, kyb = 0;\n", I, t->offset, g->isuf);
  int64_t span = 1;
  for (int d = t->rank - 1; d >= 0; d--) { /* the rest dims, row-major in kr */
    if (d == t->q || d == t->j) continue;
    sb_put(b, "  { const %s i = kr / %" PRId64 " %% %" PRId64 "; kxb += i * %" PRId64 "; kyb += i * %" PRId64 "; }\n",
           I, span, t->shape[d], t->xs[d], t->ys[d]);
    span *= t->shape[d];
  }
  sb_put(b,
         "  for (uint e = kl; e < %d; e += kls) { /* along q: contiguous in the input */\n"
         "    const %s qc = ktq * %d + e %% %d, jc = ktj * %d + e / %d;\n"
         "    if (qc < %" PRId64 " && jc < %" PRId64 ") kiln_tile[e / %d][e %% %d] = a%d[kxb + qc + jc * %" PRId64 "];\n"
         "  }\n  barrier(CLK_LOCAL_MEM_FENCE);\n",
         CL_TILE * CL_TILE, I, CL_TILE, CL_TILE, CL_TILE, CL_TILE, t->shape[t->q], t->shape[t->j], CL_TILE, CL_TILE, acc,
         t->xs[t->j]);
  sb_put(b,
         "  for (uint e = kl; e < %d; e += kls) { /* along j: contiguous in the output */\n"
         "    const %s qc = ktq * %d + e / %d, jc = ktj * %d + e %% %d;\n"
         "    if (qc >= %" PRId64 " || jc >= %" PRId64 ") continue;\n"
         "    const %s gid = kyb + jc + qc * %" PRId64 ";\n",
         CL_TILE * CL_TILE, I, CL_TILE, CL_TILE, CL_TILE, CL_TILE, t->shape[t->q], t->shape[t->j], I, t->ys[t->q]);
}

/* Appends the untiled twin `twin` (its source, taken) of a tiled kernel
 * and names it in sig (see kiln_cl_kernel_sig.twin). */
static kiln_status put_twin(gen *g, char *twin, const kiln_cl_kernel_sig *tsig, kiln_cl_kernel_sig *sig) {
  sb_put(&g->b, "%s", twin);
  kiln_free(twin);
  snprintf(sig->twin, sizeof sig->twin, "%s", tsig->name);
  sig->twin_items = tsig->n_items;
  return g->b.oom ? kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory printing a kernel") : KILN_OK;
}

/* The tiled element of the loop put_tile_head opened. */
_Static_assert(CL_TILE == 32, "KT_ELEM spells the tile size");
#define KT_ELEM "kiln_tile[e % 32][e / 32]"

/* The accessor of elementwise spec sp to tile (tile_plan), or -1: the
 * group's only transposed read, and every store a dense row-major write of
 * the domain (the tile's output order). Two transposed reads are not tiled
 * (one local array per group; such groups keep the strided reads). */
static int tiled_access(const kiln_fuse_spec *sp, const kiln_cl_device_info *dev, cl_tile *t) {
  int found = -1;
  for (int k = 0; k < sp->n_store; k++)
    if (sp->store[k].map.depth != 1 || !sp->store[k].map.v[0].contiguous) return -1;
  for (int a = 0; a < sp->n_access; a++) {
    cl_tile ta;
    const kiln_fuse_access *ac = &sp->access[a];
    if (ac->reduced || !tile_plan(&ac->map, kiln_dtype_size(sp->sh->v[ac->value].dtype), dev, &ta)) continue;
    if (found >= 0) return -1;
    found = a;
    *t = ta;
  }
  return found;
}

/* ------------------------------------------------------------------ */
/* expressions                                                         */

/* Prints template t with arguments args (domain type ty, expression e). */
static void put_template(gen *g, const char *t, const char *const *args, kiln_dtype ty, const kiln_fuse_expr *e) {
  sbuf *b = &g->b;
  for (const char *p = t; *p; p++) {
    if (*p != '$') {
      sb_put(b, "%c", *p);
      continue;
    }
    char c = p[1];
    if (c >= '0' && c <= '2') {
      sb_put(b, "%s", args[c - '0']);
      p++;
    } else if (c == 'T') {
      sb_put(b, "%s", ctype(ty));
      p++;
    } else if (c == 'k') {
      sb_put(b, "%" PRId64, e->i);
      p++;
    } else if (c == 'p' && p[2] >= '0' && p[2] <= '2') {
      put_float(b, ty, e->f[p[2] - '0']);
      p += 2;
    } else {
      sb_put(b, "$");
    }
  }
}

/* A load of access a that is a literal: a float32 or float64 weight of one
 * element (an initializer; the graph record's key holds every weight byte,
 * the program key the source) read through an unmasked map — the scale,
 * bias or Clip bound of one value that every element reads. Printed inline
 * (its buffer stays in the signature, unread): llvmpipe loads a buffer
 * element lane by lane in each work item, and the bench chain's three such
 * loads cost it 0.05-0.07 copies at float8, 0.12-0.14 at float4
 * (opencl/ENGINE.md). Finite and nonzero
 * only, like the attributes printed as literals: Mesa's NIR rewrites
 * arithmetic with a literal 0 as if signed zeros did not exist (rusticl
 * gave +0 for 0 * -0 + -0 with both printed inline), so 0, NaN and inf stay
 * loads, which no rewrite sees through. */
static bool literal_load(const kiln_fuse_spec *sp, int a, kiln_dtype *t, double *v) {
  const kiln_fuse_access *ac = &sp->access[a];
  const kiln_tensor *w = sp->g->values[ac->value].init;
  if (!w || w->numel != 1 || (w->dtype != KILN_F32 && w->dtype != KILN_F64)) return false;
  for (int k = 0; k < ac->map.depth; k++)
    if (ac->map.v[k].has_mask) return false;
  *t = w->dtype;
  *v = kiln_get_f(w, 0);
  return isfinite(*v) && *v != 0;
}

/* Prints `const R v<i> = ...;` for expression i. */
static kiln_status put_expr(gen *g, int i) {
  const kiln_fuse_spec *sp = g->sp;
  const kiln_fuse_expr *e = &sp->expr[i];
  sbuf *b = &g->b;
  const char *rt = ctype(e->dtype);
  const char *opname = kiln_fuse_op_name(e->op);
  if (!rt)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: %s producing %s is not supported", opname,
                     kiln_dtype_name(e->dtype));
  sb_put(b, "  const %s v%d = ", rt, i);
  if (e->op == KILN_FUSE_LOAD) {
    const kiln_fuse_access *a = &sp->access[e->ref];
    kiln_dtype bt = sp->sh->v[a->value].dtype;
    char src[128];
    bool masked = false;
    for (int k = 0; k < a->map.depth; k++) masked |= a->map.v[k].has_mask;
    snprintf(src, sizeof src, "a%d[a%do0]", e->ref, e->ref);
    kiln_dtype lt;
    double lv;
    if (g->tiled == e->ref + 1) snprintf(src, sizeof src, "%s", KT_ELEM); /* unmasked (tile_plan) */
    else if (literal_load(sp, e->ref, &lt, &lv)) {
      sbuf lit = {0};
      put_float(&lit, lt, lv);
      if (lit.oom) return kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
      snprintf(src, sizeof src, "%.100s", lit.p);
      kiln_free(lit.p);
    } else if (masked) {
      sbuf pad = {0};
      if (kiln_dtype_is_float(bt)) put_float(&pad, bt, a->pad);
      else put_int(&pad, bt, (int64_t)a->pad);
      if (pad.oom) return kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
      snprintf(src, sizeof src, "(a%dm ? a%d[a%do0] : %.60s)", e->ref, e->ref, e->ref, pad.p);
      kiln_free(pad.p);
    }
    put_convert(b, bt, e->dtype, src);
  } else if (e->op == KILN_FUSE_ANCHOR) { /* the anchor's value: float `anc` (anchor printers only) */
    put_convert(b, KILN_F32, e->dtype, "anc");
  } else if (e->op == KILN_FUSE_REDUCE) { /* reduction ref's result: `r<ref>` (reduction printer only) */
    char r[32];
    snprintf(r, sizeof r, "r%d", e->ref);
    put_convert(b, sp->red[e->ref].dtype, e->dtype, r);
  } else if (e->op == KILN_FUSE_CONST) {
    if (kiln_dtype_is_float(e->dtype)) put_float(b, e->dtype, e->f[0]);
    else put_int(b, e->dtype, e->i);
  } else {
    const cl_op_fmt *f = find_op(e->op);
    int ar = kiln_fuse_op_arity(e->op);
    if (!f || ar < 1 || ar > 3 || e->n_args != ar)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: op %s is not supported", opname);
    /* the domain: the first argument's type (then/else for Where; float
     * when either argument of Pow is) */
    int lead = e->op == KILN_FUSE_WHERE ? 1 : 0;
    kiln_dtype ty = sp->expr[e->args[lead]].dtype;
    if (e->op == KILN_FUSE_CAST || e->op == KILN_FUSE_COPY) ty = sp->expr[e->args[0]].dtype;
    int dom = domain_of(ty);
    const char *t = dom == DOM_F ? f->f : dom == DOM_S ? f->s : f->u;
    if (!t || !ctype(ty))
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: op %s on %s is not supported", opname,
                       kiln_dtype_name(ty));
    char args[3][96];
    const char *argp[3] = {args[0], args[1], args[2]};
    for (int k = 0; k < ar; k++) {
      kiln_dtype at = sp->expr[e->args[k]].dtype;
      char v[32];
      snprintf(v, sizeof v, "v%d", e->args[k]);
      /* Clip compares in the wider of the types, as the reference does */
      if (at == ty || (e->op == KILN_FUSE_WHERE && k == 0) || e->op == KILN_FUSE_SHL || e->op == KILN_FUSE_SHR ||
          e->op == KILN_FUSE_CLIP) {
        snprintf(args[k], sizeof args[k], "%s", v);
      } else {
        sbuf cv = {0};
        put_convert(&cv, at, ty, v);
        if (cv.oom) return kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
        snprintf(args[k], sizeof args[k], "%s", cv.p);
        kiln_free(cv.p);
      }
    }
    /* the template is computed in the domain's type (comparisons: int) */
    sbuf body = {0};
    gen sub = *g;
    sub.b = body;
    put_template(&sub, t, argp, ty, e);
    if (sub.b.oom) {
      kiln_free(sub.b.p);
      return kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
    }
    bool logical = e->op == KILN_FUSE_EQ || e->op == KILN_FUSE_GT || e->op == KILN_FUSE_LT || e->op == KILN_FUSE_GE ||
                   e->op == KILN_FUSE_LE || e->op == KILN_FUSE_AND || e->op == KILN_FUSE_OR ||
                   e->op == KILN_FUSE_XOR || e->op == KILN_FUSE_NOT || e->op == KILN_FUSE_ISNAN ||
                   e->op == KILN_FUSE_ISINF;
    kiln_dtype from = logical ? KILN_I32 : (e->op == KILN_FUSE_SHL || e->op == KILN_FUSE_SHR) ? KILN_U64 : ty;
    put_convert(b, from, e->dtype, sub.b.p);
    kiln_free(sub.b.p);
  }
  sb_put(b, ";\n");
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* the kernel                                                          */

static bool fits_int(const kiln_fuse_spec *sp) {
  const int64_t lim = INT32_MAX / 2;
  if (sp->numel > lim) return false;
  for (int a = 0; a < sp->n_access; a++) {
    if (sp->access[a].numel > lim) return false;
    for (int k = 0; k < sp->access[a].map.depth; k++) {
      const kiln_view *v = &sp->access[a].map.v[k];
      int64_t reach = v->offset < 0 ? -v->offset : v->offset;
      for (int d = 0; d < v->rank; d++) reach += (v->strides[d] < 0 ? -v->strides[d] : v->strides[d]) * v->shape[d];
      if (reach > lim || v->numel > lim) return false;
    }
  }
  return true;
}

static kiln_status check_spec(const kiln_fuse_spec *sp, const kiln_cl_device_info *dev, bool *fp64) {
  if (!sp->bound) return kiln_fail(KILN_E_INVALID_SHAPE, "opencl codegen: the spec is not bound (kiln_fuse_spec_bind)");
  if (sp->kind != KILN_FUSE_G_ELEMWISE || sp->anchor >= 0 || sp->pool >= 0 || sp->n_red > 0)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: only elementwise specs are printed (this one is %s%s)",
                     kiln_fuse_group_kind_name(sp->kind), sp->n_red ? ", with reductions" : "");
  if (sp->n_access + sp->n_store > KILN_CL_SIG_MAX_ARGS)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: %d buffers, at most %d", sp->n_access + sp->n_store,
                     KILN_CL_SIG_MAX_ARGS);
  if (sp->n_alias > 0)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: the spec has %d alias outputs (view copies)", sp->n_alias);
  *fp64 = false;
  for (int i = 0; i < sp->n_expr; i++) {
    const kiln_fuse_expr *e = &sp->expr[i];
    if (e->op == KILN_FUSE_ANCHOR || e->op == KILN_FUSE_REDUCE)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: op %s is not supported", kiln_fuse_op_name(e->op));
    *fp64 |= e->dtype == KILN_F64;
  }
  for (int a = 0; a < sp->n_access; a++) {
    if (sp->access[a].reduced)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: accessor %d is over the reduced domain", a);
    kiln_dtype t = sp->sh->v[sp->access[a].value].dtype;
    if (!ctype(t))
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: input '%s' of type %s is not supported",
                       sp->g->values[sp->access[a].value].name, kiln_dtype_name(t));
    *fp64 |= t == KILN_F64;
  }
  for (int s = 0; s < sp->n_store; s++) {
    const kiln_fuse_store *st = &sp->store[s];
    kiln_dtype t = sp->sh->v[st->value].dtype;
    if (st->reduced || st->pool)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: store %d is a reduced or pooled store", s);
    if (!ctype(t))
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: output '%s' of type %s is not supported",
                       sp->g->values[st->value].name, kiln_dtype_name(t));
    *fp64 |= t == KILN_F64;
  }
  if (*fp64 && !dev->has_fp64)
    return kiln_fail(KILN_E_UNSUPPORTED_OP,
                     "opencl codegen: the spec computes in float64, but device %s (%s) has no cl_khr_fp64", dev->id,
                     dev->name);
  return KILN_OK;
}

/* ------------------------------------------------------------------ */
/* vectors: 4, 8 or 16 elements per work item                         */

/* A float32 spec whose element count is a multiple of 4 and whose ops all
 * have a vector form (the same built-ins, element by element) is printed
 * with w elements per work item (vec_width): contiguous accessors and
 * stores as vloadW/vstoreW, accessors broadcast along the innermost dim as
 * one scalar load, any other map (views, masks) as w scalar accesses.
 * Measured on the bench chain (16M floats, exp + tanh, built-in math):
 * float4 PoCL 5x faster than one element per work item (its work-group
 * vectoriser leaves scalar code scalar; the vector built-ins are vector
 * code), rusticl 2x. KILN_CL_VEC=0 prints the scalar form. */
static bool vec4_op(kiln_fuse_op op) {
  switch (op) {
  case KILN_FUSE_LOAD: case KILN_FUSE_CONST: case KILN_FUSE_ABS: case KILN_FUSE_NEG: case KILN_FUSE_SQRT:
  case KILN_FUSE_EXP: case KILN_FUSE_LOG: case KILN_FUSE_RECIP: case KILN_FUSE_FLOOR: case KILN_FUSE_CEIL:
  case KILN_FUSE_RELU: case KILN_FUSE_LEAKY_RELU: case KILN_FUSE_ELU: case KILN_FUSE_SELU: case KILN_FUSE_SIGMOID:
  case KILN_FUSE_HARD_SIGMOID: case KILN_FUSE_TANH: case KILN_FUSE_SOFTPLUS: case KILN_FUSE_ERF: case KILN_FUSE_SIGN:
  case KILN_FUSE_SOFTSIGN: case KILN_FUSE_HARD_SWISH: case KILN_FUSE_THRESHOLDED_RELU: case KILN_FUSE_CELU:
  case KILN_FUSE_ROUND: case KILN_FUSE_SIN: case KILN_FUSE_COS: case KILN_FUSE_TAN: case KILN_FUSE_ASIN:
  case KILN_FUSE_ACOS: case KILN_FUSE_ATAN: case KILN_FUSE_SINH: case KILN_FUSE_COSH: case KILN_FUSE_ASINH:
  case KILN_FUSE_ACOSH: case KILN_FUSE_ATANH: case KILN_FUSE_SHRINK: case KILN_FUSE_COPY: case KILN_FUSE_CAST:
  case KILN_FUSE_ADD: case KILN_FUSE_SUB: case KILN_FUSE_MUL: case KILN_FUSE_DIV: case KILN_FUSE_MIN:
  case KILN_FUSE_MAX: case KILN_FUSE_POW: case KILN_FUSE_CLIP: case KILN_FUSE_PRELU: return true;
  default: return false;
  }
}

enum { VEC_GATHER, VEC_CONTIG, VEC_BCAST };

/* How the w lanes of map m read memory (see vec_width). */
static int vec_kind(const kiln_views *m, int w) {
  if (m->depth != 1 || m->v[0].has_mask) return VEC_GATHER;
  kiln_view v;
  kiln_view_compact(&m->v[0], &v);
  if (v.has_mask) return VEC_GATHER;
  if (v.rank == 0) return VEC_BCAST;
  if (v.shape[v.rank - 1] % w) return VEC_GATHER;
  if (v.strides[v.rank - 1] == 1) return VEC_CONTIG;
  if (v.strides[v.rank - 1] == 0) return VEC_BCAST;
  return VEC_GATHER;
}

/* Lanes per work item for spec sp on dev, 0: one element per work item.
 * 16 where the device prefers float vectors that wide, else 8, where every
 * map reads w lanes the way it reads 4 (else 4): PoCL (preferred width 16
 * with AVX-512) runs one work item's vector as one vector, it does not
 * vectorise across work items, so float16 is 3.7-5x faster than float4 on
 * the bench chain; llvmpipe (preferred width 1) vectorises across
 * invocations, 8 per SIMD, and with kiln's math float8 is 0.88-0.89x the
 * float4 time of the bench chain (its per-item loads of the scalar operands
 * are paid per 8 elements, not per 4; a memory-bound kernel measured the
 * same at 4 and 8; opencl/ENGINE.md). KILN_CL_VEC=0: one element per work
 * item; =4, 8, 16: that width where the spec allows. */
static int vec_width(const kiln_fuse_spec *sp, const kiln_cl_device_info *dev) {
  const char *e = getenv("KILN_CL_VEC");
  int force = e && *e ? atoi(e) : -1;
  if (force == 0) return 0;
  if (sp->numel < 4 || sp->numel % 4) return 0;
  for (int i = 0; i < sp->n_expr; i++)
    if (sp->expr[i].dtype != KILN_F32 || !vec4_op(sp->expr[i].op)) return 0;
  for (int a = 0; a < sp->n_access; a++)
    if (sp->sh->v[sp->access[a].value].dtype != KILN_F32) return 0;
  for (int k = 0; k < sp->n_store; k++)
    if (sp->sh->v[sp->store[k].value].dtype != KILN_F32) return 0;
  int w = dev->pref_vec_float >= 16 ? 16 : 8;
  if (force == 4 || force == 8 || force == 16) w = force;
  for (; w > 4; w /= 2) {
    bool same = sp->numel % w == 0;
    for (int a = 0; a < sp->n_access && same; a++)
      same = vec_kind(&sp->access[a].map, w) == vec_kind(&sp->access[a].map, 4);
    for (int k = 0; k < sp->n_store && same; k++) same = vec_kind(&sp->store[k].map, w) == vec_kind(&sp->store[k].map, 4);
    if (same) break;
  }
  return w;
}

/* Accessor a of spec sp read the same along rows of length *len: its
 * compact map is [n, len] with strides [0, 1] (a bias over the innermost
 * axis), len a multiple of w. */
static bool row_invariant(const kiln_fuse_spec *sp, int a, int w, int64_t *len) {
  const kiln_views *m = &sp->access[a].map;
  if (m->depth != 1 || m->v[0].has_mask) return false;
  kiln_view v;
  kiln_view_compact(&m->v[0], &v);
  if (v.has_mask || v.rank != 2 || v.strides[0] != 0 || v.strides[1] != 1 || v.shape[1] % w) return false;
  *len = v.shape[1];
  return true;
}

/* Rows per work item of the vector printer (g->vw lanes): where an accessor
 * repeats along rows (row_invariant), an item takes the same w columns of R
 * neighbouring rows and loads that accessor once for all R. llvmpipe loads
 * a buffer element lane by lane in each work item, so the bench chain's
 * bias costs it a second stream as long as x's. Where the device prefers
 * float vectors narrower than 16: R = 8 while that leaves at least
 * KILN_CL_ROWS_MIN_ITEMS items, else 4, else 2 — the bench chain's wall
 * time per copy on llvmpipe, 16M floats: R = 2 1.31-1.33, 4 1.21-1.28,
 * 8 1.19-1.21; 1M floats (16K items at R = 8): 2 1.39-1.41, 4 1.39-1.43,
 * 8 1.52-1.55 at the same CPU time (too few items to keep both threads
 * busy). PoCL (16) keeps 1, R = 2 measured worse there (opencl/ENGINE.md,
 * "Rows per work item"). KILN_CL_ROWS=1, 2, 4, 8 forces R where the rows
 * divide by it (else the largest power of two below it that does). Not for
 * a symbolic-dim plan (kiln_cl_codegen_prefix: rows_ok false). */
#define KILN_CL_ROWS_MIN_ITEMS 65536
static void row_plan(gen *g) {
  const kiln_fuse_spec *sp = g->sp;
  g->rows = 1;
  g->hoist = 0;
  const char *e = getenv("KILN_CL_ROWS");
  int r = 1;
  if (e && *e) {
    r = atoi(e);
  } else if (g->dev->pref_vec_float < 16) {
    r = 8;
    while (r > 2 && sp->numel / ((int64_t)g->vw * r) < KILN_CL_ROWS_MIN_ITEMS) r /= 2;
  }
  if (r != 2 && r != 4 && r != 8) return;
  int64_t len = 0, l;
  for (int a = 0; a < sp->n_access && a < 64; a++) {
    if (!row_invariant(sp, a, g->vw, &l) || (len && l != len)) continue;
    len = l;
    g->hoist |= (uint64_t)1 << a;
  }
  if (!len || sp->numel % len) {
    g->hoist = 0;
    return;
  }
  while (r > 1 && (sp->numel / len) % r) r /= 2;
  if (r < 2) {
    g->hoist = 0;
    return;
  }
  g->rows = r;
  g->rowlen = len;
}

/* Vector blocks per work item (the vector printer without row blocks): U
 * neighbouring vectors of w lanes, each statement printed for all U before
 * the next (v<i>_<u>, a<a>_<u>o0, ...), so that U independent chains are
 * in flight: a chain of polynomials and divisions per vector is
 * latency-bound. Measured on PoCL (the bench chain, 16M floats, float16:
 * sigmoid, mul, tanh, clip, add, relu), fused / a float16 copy: U = 1
 * 1.84-1.97, 2 1.63-1.67, 4 1.36-1.41, 8 1.12-1.22, 16 1.24-1.59; the
 * same blocks one after another instead of interleaved 1.83-1.88 (so the
 * interleaving is what pays); a chain without sigmoid and tanh 1.00-1.18
 * at U = 1 and 8 alike. Taken where the device's preferred float width
 * is 16 (PoCL; llvmpipe takes row blocks, and interleaved float8 blocks
 * measured slower there) and the spec has an op with a rounding budget
 * (op_table's rtol: the polynomials, divisions and library calls): U = 8,
 * halved until the items divide. KILN_CL_BLOCKS=1|2|4|8 forces U (halved
 * likewise). Not for a symbolic-dim plan (its launch takes a prefix of the
 * items: kiln_cl_codegen_prefix) nor with row blocks. */
static void block_plan(gen *g) {
  const kiln_fuse_spec *sp = g->sp;
  g->blocks = 1;
  const char *e = getenv("KILN_CL_BLOCKS");
  int u = 1;
  if (e && *e) {
    u = atoi(e);
  } else if (g->dev->pref_vec_float >= 16) {
    for (int i = 0; i < sp->n_expr && u == 1; i++) {
      const cl_op_fmt *f = find_op(sp->expr[i].op);
      if (f && f->rtol > 0) u = 8;
    }
  }
  if (u != 2 && u != 4 && u != 8) return;
  int64_t items = sp->numel / g->vw;
  while (u > 1 && items % u) u /= 2;
  g->blocks = u;
}

/* Store map m puts every vector of w lanes a multiple of w elements from
 * every other: its compact view's strides, but the innermost (1), are
 * multiples of w. Then the vectors are all aligned to the vector's size or
 * none are, and one test per work item decides for its blocks. */
static bool stream_strides_ok(const kiln_views *m, int w) {
  kiln_view v;
  kiln_view_compact(&m->v[0], &v);
  for (int d = 0; d + 1 < v.rank; d++)
    if (v.strides[d] % w) return false;
  return true;
}

/* Stores of the vector printer written with a non-temporal hint: a
 * contiguous store (VEC_CONTIG, its vectors a multiple of w apart:
 * stream_strides_ok) of at least KILN_CL_STREAM_MIN_BYTES, an output written
 * once and larger than the caches, goes around them where the compiler
 * offers __builtin_nontemporal_store (clang: PoCL, rusticl) and the work
 * item's first vector is aligned to the vector's size (tested once per
 * item: a host buffer used in place may be aligned to its element only),
 * else as before (stream_guard, put_store_stream). On PoCL the plain store
 * reads each line before it writes it: the bench chain (16M floats, 64 MB
 * out) fused / a float16 copy 1.39-1.53 -> 1.22-1.26; llvmpipe compiles the
 * hint and runs the same (opencl/ENGINE.md, "Streamed stores").
 * KILN_CL_STREAM=0: never; =all: at any size (the tests). */
#define KILN_CL_STREAM_MIN_BYTES ((int64_t)16 << 20)
static void stream_plan(gen *g) {
  const kiln_fuse_spec *sp = g->sp;
  g->stream = 0;
  const char *e = getenv("KILN_CL_STREAM");
  if (e && !strcmp(e, "0")) return;
  int64_t min = e && !strcmp(e, "all") ? 0 : KILN_CL_STREAM_MIN_BYTES;
  for (int k = 0; k < sp->n_store && k < 64; k++) {
    const kiln_fuse_store *st = &sp->store[k];
    int64_t n = 1;
    for (int r = 0; r < st->rank; r++) n *= st->shape[r];
    if (vec_kind(&st->map, g->vw) == VEC_CONTIG && stream_strides_ok(&st->map, g->vw) &&
        n * (int64_t)sizeof(float) >= min)
      g->stream |= (uint64_t)1 << k;
  }
}

/* Defines KILN_CL_NT where the compiler has the non-temporal store (a
 * preprocessor without __has_builtin never sees its call). */
static const char stream_guard[] = "#ifndef KILN_CL_NT_CHECKED\n"
                                   "#define KILN_CL_NT_CHECKED\n"
                                   "#if defined(__clang__) && defined(__has_builtin)\n"
                                   "#if __has_builtin(__builtin_nontemporal_store)\n"
                                   "#define KILN_CL_NT 1\n"
                                   "#endif\n"
                                   "#endif\n"
                                   "#endif\n";

/* Sets g->bs and q for block u of U (q: that block's first flat index). */
static void block_name(gen *g, int u, int U, char *q, size_t n) {
  if (U <= 1) {
    g->bs[0] = 0;
    snprintf(q, n, "q");
    return;
  }
  snprintf(g->bs, sizeof g->bs, "_%d", u);
  snprintf(q, n, "(q + %d)", u * g->vw);
}

/* Accessor a is loaded once per item (row_plan). */
static bool hoisted(const gen *g, int a) { return g->rows > 1 && a < 64 && (g->hoist >> a & 1); }

#define CL_SIGMOID_BUILTIN(T)                                                                                          \
  "inline " #T " kiln_sigmoid_" #T "(" #T " x) {\n"                                                                    \
  "  const " #T " e = exp(-fabs(x));\n"                                                                                \
  "  return select(e, (" #T ")1.0f, isgreaterequal(x, (" #T ")0.0f)) / (1.0f + e);\n"                                  \
  "}\n"
#define CL_VEC_PRELUDES(W)                                                                                             \
  {"#ifndef KILN_CL_PRELUDE_V" #W "\n#define KILN_CL_PRELUDE_V" #W "\n" CL_MATH(float##W, int##W) "#endif\n",          \
   "#ifndef KILN_CL_PRELUDE_V" #W "\n#define KILN_CL_PRELUDE_V" #W "\n" CL_SIGMOID_BUILTIN(float##W)                   \
   CL_MATH_BUILTIN(float##W) "#endif\n"}
/* [4, 8, 16 lanes][kiln's math, the built-ins] */
static const char *const vec_prelude[3][2] = {CL_VEC_PRELUDES(4), CL_VEC_PRELUDES(8), CL_VEC_PRELUDES(16)};

/* Prints `const floatW v<i> = ...;` for expression i (lane loads precomputed). */
static kiln_status put_expr_vec4(gen *g, int i) {
  const kiln_fuse_spec *sp = g->sp;
  const kiln_fuse_expr *e = &sp->expr[i];
  sbuf *b = &g->b;
  const int w = g->vw;
  sb_put(b, "  const float%d v%d%s = ", w, i, g->bs);
  if (e->op == KILN_FUSE_LOAD) {
    int a = e->ref;
    const kiln_fuse_access *ac = &sp->access[a];
    int kind = vec_kind(&ac->map, w);
    kiln_dtype lt;
    double lv;
    if (literal_load(sp, a, &lt, &lv) && lt == KILN_F32) {
      sb_put(b, "(float%d)(", w);
      put_float(b, KILN_F32, lv);
      sb_put(b, ")");
    } else if (hoisted(g, a)) {
      sb_put(b, "h%d", a);
    } else if (kind == VEC_CONTIG) {
      sb_put(b, "vload%d(0, a%d + a%d%so0)", w, a, a, g->bs);
    } else if (kind == VEC_BCAST) {
      sb_put(b, "(float%d)(a%d[a%d%so0])", w, a, a, g->bs);
    } else {
      bool masked = false;
      for (int k = 0; k < ac->map.depth; k++) masked |= ac->map.v[k].has_mask;
      sbuf pad = {0};
      if (masked) put_float(&pad, KILN_F32, ac->pad);
      if (pad.oom) return kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
      sb_put(b, "(float%d)(", w);
      for (int j = 0; j < w; j++) {
        if (masked)
          sb_put(b, "%s(a%d%sl%dm ? a%d[a%d%sl%do0] : %s)", j ? ", " : "", a, g->bs, j, a, a, g->bs, j, pad.p);
        else sb_put(b, "%sa%d[a%d%sl%do0]", j ? ", " : "", a, a, g->bs, j);
      }
      sb_put(b, ")");
      kiln_free(pad.p);
    }
  } else if (e->op == KILN_FUSE_REDUCE) { /* reduction ref's result (the reduction printer) */
    sb_put(b, "r%d", e->ref);
  } else if (e->op == KILN_FUSE_CONST) {
    sb_put(b, "(float%d)(", w);
    put_float(b, KILN_F32, e->f[0]);
    sb_put(b, ")");
  } else {
    const cl_op_fmt *f = find_op(e->op);
    int ar = kiln_fuse_op_arity(e->op);
    if (!f || !f->f || ar < 1 || ar > 3 || e->n_args != ar)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: op %s is not supported", kiln_fuse_op_name(e->op));
    const char *t = f->f;
    for (const char *p = t; *p; p++) { /* the float template with $T = floatW */
      if (*p != '$') {
        sb_put(b, "%c", *p);
        continue;
      }
      char c = p[1];
      if (c >= '0' && c <= '2') {
        sb_put(b, "v%d%s", e->args[c - '0'], g->bs);
        p++;
      } else if (c == 'T') {
        sb_put(b, "float%d", w);
        p++;
      } else if (c == 'p' && p[2] >= '0' && p[2] <= '2') {
        put_float(b, KILN_F32, e->f[p[2] - '0']);
        p += 2;
      } else {
        sb_put(b, "$");
      }
    }
  }
  sb_put(b, ";\n");
  return KILN_OK;
}

/* Prints the lane offsets of map m: `<pre>o0` at index q (a name) for
 * CONTIG/BCAST, else `<pre>l<j>o0` (and masks) at q + j. */
static void put_map_vec4(gen *g, const kiln_views *m, const char *pre, const char *q) {
  bool masked;
  if (vec_kind(m, g->vw) != VEC_GATHER) {
    put_map(g, m, pre, q, &masked);
    return;
  }
  for (int j = 0; j < g->vw; j++) {
    char lp[48], f[24];
    snprintf(lp, sizeof lp, "%sl%d", pre, j);
    snprintf(f, sizeof f, "(%s + %d)", q, j);
    put_map(g, m, lp, f, &masked);
  }
}

/* Prints store k of the vector printer: its lane offsets at index q, then
 * the w lanes of its expression. */
static void put_store_vec(gen *g, int k, const char *q) {
  const kiln_fuse_store *st = &g->sp->store[k];
  sbuf *b = &g->b;
  const int w = g->vw;
  char pre[24];
  snprintf(pre, sizeof pre, "s%d%s", k, g->bs);
  put_map_vec4(g, &st->map, pre, q);
  bool masked = false;
  for (int l = 0; l < st->map.depth; l++) masked |= st->map.v[l].has_mask;
  int kind = vec_kind(&st->map, w);
  if (kind == VEC_CONTIG) {
    sb_put(b, "  vstore%d(v%d%s, 0, s%d + %so0);\n", w, st->expr, g->bs, k, pre);
  } else if (kind == VEC_BCAST) { /* every lane writes one element: the last lane's value, as in order */
    sb_put(b, "  s%d[%so0] = v%d%s.s%x;\n", k, pre, st->expr, g->bs, w - 1);
  } else {
    for (int j = 0; j < w; j++) { /* lane j is .s<j in hex> */
      if (masked) sb_put(b, "  if (%sl%dm) s%d[%sl%do0] = v%d%s.s%x;\n", pre, j, k, pre, j, st->expr, g->bs, j);
      else sb_put(b, "  s%d[%sl%do0] = v%d%s.s%x;\n", k, pre, j, st->expr, g->bs, j);
    }
  }
}

/* Prints streamed store k (stream_plan) of the vector printer for the U
 * blocks of the item at index q0 (U = 1: the one vector at q0): their
 * offsets, then one test of the first block's alignment (the blocks are a
 * multiple of w apart, so all aligned or none: stream_strides_ok) choosing
 * the non-temporal stores or vstoreW for all U; `flag`, when not NULL, is
 * the name of that test already made (the row printer's, once per item). */
static void put_store_stream(gen *g, int k, int U, const char *q0, const char *flag) {
  const kiln_fuse_store *st = &g->sp->store[k];
  sbuf *b = &g->b;
  const int w = g->vw;
  char q[32], pre[48], pre0[48];
  for (int u = 0; u < U; u++) {
    if (U > 1) block_name(g, u, U, q, sizeof q);
    snprintf(pre, sizeof pre, "s%d%s", k, g->bs);
    put_map_vec4(g, &st->map, pre, U > 1 ? q : q0);
    if (!u) snprintf(pre0, sizeof pre0, "%s", pre);
  }
  if (flag) sb_put(b, "#ifdef KILN_CL_NT\n  if (%s) {\n", flag);
  else sb_put(b, "#ifdef KILN_CL_NT\n  if (!((uintptr_t)(s%d + %so0) & %d)) {\n", k, pre0, 4 * w - 1);
  for (int pass = 0; pass < 2; pass++) {
    for (int u = 0; u < U; u++) {
      if (U > 1) block_name(g, u, U, q, sizeof q);
      snprintf(pre, sizeof pre, "s%d%s", k, g->bs);
      if (!pass)
        sb_put(b, "    __builtin_nontemporal_store(v%d%s, (__global float%d *)(s%d + %so0));\n", st->expr, g->bs, w, k,
               pre);
      else sb_put(b, "    vstore%d(v%d%s, 0, s%d + %so0);\n", w, st->expr, g->bs, k, pre);
    }
    sb_put(b, pass ? "  }\n" : "  } else\n#endif\n  {\n");
  }
}

static kiln_status codegen_vec4(gen *g, const char *name, char **source, kiln_cl_kernel_sig *sig) {
  const kiln_fuse_spec *spec = g->sp;
  const cl_dialect *d = &opencl12;
  sbuf *b = &g->b;
  kiln_status s = KILN_OK;
  snprintf(sig->name, sizeof sig->name, "%s", name);
  const int w = g->vw;
  sig->n_items = spec->numel / w;
  sig->uses_fp64 = false;
  sb_put(b, "%s%s%s", prelude(), vec_prelude[w == 4 ? 0 : w == 8 ? 1 : 2][builtin_math()], g->stream ? stream_guard : "");
  sb_put(b, "/* float%d: %d elements per work item */\n%s %s(", w, w, d->kernel, name);
  for (int a = 0; a < spec->n_access; a++) {
    const kiln_fuse_access *ac = &spec->access[a];
    sig->args[sig->n_args++] = (kiln_cl_sig_arg){false, a, ac->value, KILN_F32, ac->numel};
    sb_put(b, "%s%s const float *restrict a%d", a ? ", " : "", d->global, a);
  }
  for (int k = 0; k < spec->n_store; k++) {
    const kiln_fuse_store *st = &spec->store[k];
    int64_t n = 1;
    for (int r = 0; r < st->rank; r++) n *= st->shape[r];
    sig->args[sig->n_args++] = (kiln_cl_sig_arg){true, k, st->value, KILN_F32, n};
    sb_put(b, "%s%s float *s%d", sig->n_args > 1 ? ", " : "", d->global, k);
  }
  if (g->rows > 1) { /* R rows of the same w columns (row_plan) */
    const int64_t R = g->rows, C = g->rowlen;
    sig->n_items = spec->numel / (w * R);
    sig->row_block_items = C / w;
    sb_put(b, ") {\n  if (%s >= %" PRId64 ") return;\n  const %s i = (%s)%s;\n", d->gid, sig->n_items, g->ity, g->ity,
           d->gid);
    sb_put(b, "  const %s q0 = i / %" PRId64 " * %" PRId64 " + i %% %" PRId64 " * %d;\n", g->ity, C / w, R * C,
           C / w, w);
    for (int a = 0; a < spec->n_access; a++) {
      if (!hoisted(g, a)) continue;
      char pre[16];
      snprintf(pre, sizeof pre, "a%d", a);
      put_map_vec4(g, &spec->access[a].map, pre, "q0");
      sb_put(b, "  const float%d h%d = vload%d(0, a%d + a%do0);\n", w, a, w, a, a);
    }
    for (int k = 0; k < spec->n_store && k < 64; k++) { /* the rows are a multiple of w apart: one test */
      if (!(g->stream >> k & 1)) continue;
      char pre[24];
      snprintf(pre, sizeof pre, "s%dq0", k);
      sb_put(b, "#ifdef KILN_CL_NT\n");
      put_map_vec4(g, &spec->store[k].map, pre, "q0");
      sb_put(b, "  const int nt%d = !((uintptr_t)(s%d + s%dq0o0) & %d);\n#endif\n", k, k, k, 4 * w - 1);
    }
    for (int64_t r = 0; r < R && !s; r++) {
      sb_put(b, "  {\n  const %s q = q0 + %" PRId64 "%s;\n", g->ity, r * C, g->isuf);
      for (int a = 0; a < spec->n_access; a++) {
        if (hoisted(g, a)) continue;
        char pre[16];
        snprintf(pre, sizeof pre, "a%d", a);
        put_map_vec4(g, &spec->access[a].map, pre, "q");
      }
      for (int i = 0; i < spec->n_expr && !s; i++) s = put_expr_vec4(g, i);
      for (int k = 0; k < spec->n_store && !s; k++) {
        char flag[24];
        snprintf(flag, sizeof flag, "nt%d", k);
        if (k < 64 && (g->stream >> k & 1)) put_store_stream(g, k, 1, "q", flag);
        else put_store_vec(g, k, "q");
      }
      sb_put(b, "  }\n");
    }
    sb_put(b, "}\n");
  } else { /* U = g->blocks vectors of w lanes, one after another, each statement printed for all U */
    const int U = g->blocks > 1 ? g->blocks : 1;
    sig->n_items = spec->numel / (w * U);
    sb_put(b, ") {\n  if (%s >= %" PRId64 ") return;\n  const %s q = (%s)%s * %d;\n", d->gid, sig->n_items, g->ity,
           g->ity, d->gid, w * U);
    char q[32] = "q";
    for (int u = 0; u < U; u++) {
      block_name(g, u, U, q, sizeof q);
      for (int a = 0; a < spec->n_access; a++) {
        char pre[24];
        snprintf(pre, sizeof pre, "a%d%s", a, g->bs);
        put_map_vec4(g, &spec->access[a].map, pre, q);
      }
    }
    for (int i = 0; i < spec->n_expr && !s; i++)
      for (int u = 0; u < U && !s; u++) {
        block_name(g, u, U, q, sizeof q);
        s = put_expr_vec4(g, i);
      }
    for (int k = 0; k < spec->n_store && !s; k++) {
      if (k < 64 && (g->stream >> k & 1)) {
        put_store_stream(g, k, U, "q", NULL);
        continue;
      }
      for (int u = 0; u < U; u++) {
        block_name(g, u, U, q, sizeof q);
        put_store_vec(g, k, q);
      }
    }
    g->bs[0] = 0;
    sb_put(b, "}\n");
  }
  if (!s && b->oom) s = kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory printing a kernel");
  if (s) {
    kiln_free(b->p);
    memset(sig, 0, sizeof *sig);
    return s;
  }
  *source = b->p;
  return KILN_OK;
}
/* One element of an elementwise spec at flat index `gid`: the accessor
 * maps (not the tiled one's), the expressions and the stores. */
static kiln_status put_body(gen *g) {
  const kiln_fuse_spec *spec = g->sp;
  sbuf *b = &g->b;
  kiln_status s = KILN_OK;
  for (int a = 0; a < spec->n_access; a++) {
    char pre[16];
    bool masked;
    if (g->tiled == a + 1) continue;
    snprintf(pre, sizeof pre, "a%d", a);
    put_map(g, &spec->access[a].map, pre, "gid", &masked);
  }
  for (int i = 0; i < spec->n_expr && !s; i++) s = put_expr(g, i);
  for (int k = 0; k < spec->n_store && !s; k++) {
    const kiln_fuse_store *st = &spec->store[k];
    char pre[16], v[32];
    bool masked;
    snprintf(pre, sizeof pre, "s%d", k);
    put_map(g, &st->map, pre, "gid", &masked);
    snprintf(v, sizeof v, "v%d", st->expr);
    if (masked) sb_put(b, "  if (s%dm) s%d[s%do0] = ", k, k, k);
    else sb_put(b, "  s%d[s%do0] = ", k, k);
    put_convert(b, spec->expr[st->expr].dtype, spec->sh->v[st->value].dtype, v);
    sb_put(b, ";\n");
  }
  return s;
}

static kiln_status codegen(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                           const int *obs_expr, const int *obs_value, int n_obs, bool tile_ok, bool rows_ok,
                           char **source, kiln_cl_kernel_sig *sig);

kiln_status kiln_cl_codegen_named(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                  char **source, kiln_cl_kernel_sig *sig) {
  return codegen(spec, dev, name, NULL, NULL, 0, true, true, source, sig);
}

kiln_status kiln_cl_codegen_prefix(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                   char **source, kiln_cl_kernel_sig *sig) {
  return codegen(spec, dev, name, NULL, NULL, 0, true, false, source, sig);
}

kiln_status kiln_cl_codegen_observed(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                     const int *obs_expr, const int *obs_value, int n_obs, char **source,
                                     kiln_cl_kernel_sig *sig) {
  if (n_obs < 1 || n_obs > 16) return kiln_fail(KILN_E_INTERNAL, "opencl codegen: %d observed expressions", n_obs);
  for (int j = 0; j < n_obs; j++)
    if (obs_expr[j] < 0 || obs_expr[j] >= spec->n_expr || spec->expr[obs_expr[j]].dtype != KILN_F32 ||
        spec->expr[obs_expr[j]].reduced)
      return kiln_fail(KILN_E_INTERNAL, "opencl codegen: observed expression %d is not float32", obs_expr[j]);
  return codegen(spec, dev, name, obs_expr, obs_value, n_obs, false, false, source, sig);
}

static kiln_status codegen(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                           const int *obs_expr, const int *obs_value, int n_obs, bool tile_ok, bool rows_ok,
                           char **source, kiln_cl_kernel_sig *sig) {
  *source = NULL;
  memset(sig, 0, sizeof *sig);
  if (!name || !*name || strlen(name) >= sizeof sig->name)
    return kiln_fail(KILN_E_INTERNAL, "opencl codegen: bad kernel name");
  gen g;
  memset(&g, 0, sizeof g);
  g.sp = spec;
  g.dev = dev;
  kiln_status s = check_spec(spec, dev, &g.fp64);
  if (s) return s;
  bool small = fits_int(spec);
  g.ity = small ? "int" : "long";
  g.isuf = small ? "" : "L";
  cl_tile tp;
  g.tiled = n_obs || !tile_ok ? 0 : tiled_access(spec, dev, &tp) + 1;
  char *twin = NULL;
  kiln_cl_kernel_sig tsig;
  if (g.tiled) { /* the untiled twin first (see put_twin) */
    char tname[72];
    snprintf(tname, sizeof tname, "%su", name);
    if (strlen(tname) >= sizeof sig->name) return kiln_fail(KILN_E_INTERNAL, "opencl codegen: bad kernel name");
    s = codegen(spec, dev, tname, NULL, NULL, 0, false, false, &twin, &tsig);
    if (s) return s;
  }
  if (!g.tiled && !n_obs && (g.vw = vec_width(spec, dev)) > 0) {
    if (rows_ok) row_plan(&g);
    if (rows_ok && g.rows <= 1) block_plan(&g);
    stream_plan(&g);
    return codegen_vec4(&g, name, source, sig);
  }
  const cl_dialect *d = &opencl12;
  sbuf *b = &g.b;
  snprintf(sig->name, sizeof sig->name, "%s", name);
  sig->n_items = spec->numel;
  sig->uses_fp64 = g.fp64;
  if (g.fp64) sb_put(b, "%s", d->fp64_pragma);
  sb_put(b, "%s", prelude());
  if (g.fp64) sb_put(b, "%s", prelude64);
  int wg = KILN_CL_OBS_WG; /* local arrays of at most 16 KiB */
  if (n_obs) {
    while (wg > 8 && ((size_t)wg * (size_t)n_obs * 20 > 16384 || (dev->max_work_group_size && (size_t)wg > dev->max_work_group_size)))
      wg /= 2;
    sig->local = (size_t)wg;
    sig->n_obs = n_obs;
    sig->obs_numel = spec->numel;
    for (int j = 0; j < n_obs; j++) sig->obs_value[j] = obs_value[j];
  }
  sb_put(b, "%s %s(", d->kernel, name);
  for (int a = 0; a < spec->n_access; a++) {
    const kiln_fuse_access *ac = &spec->access[a];
    kiln_dtype t = spec->sh->v[ac->value].dtype;
    sig->args[sig->n_args++] = (kiln_cl_sig_arg){false, a, ac->value, t, ac->numel};
    sb_put(b, "%s%s const %s *restrict a%d", a ? ", " : "", d->global, ctype(t), a);
  }
  for (int k = 0; k < spec->n_store; k++) {
    const kiln_fuse_store *st = &spec->store[k];
    kiln_dtype t = spec->sh->v[st->value].dtype;
    int64_t n = 1;
    for (int r = 0; r < st->rank; r++) n *= st->shape[r];
    sig->args[sig->n_args++] = (kiln_cl_sig_arg){true, k, st->value, t, n};
    sb_put(b, "%s%s %s *s%d", sig->n_args > 1 ? ", " : "", d->global, ctype(t), k);
  }
  if (n_obs) {
    sb_put(b, ", %s ulong *kiln_part, ulong kiln_off) {\n", d->global);
    for (int j = 0; j < n_obs; j++)
      sb_put(b, "  float kiln_mn%d = INFINITY, kiln_mx%d = -INFINITY;\n  uint kiln_nan%d = 0, kiln_pi%d = 0, kiln_ni%d = 0;\n",
             j, j, j, j, j);
    sb_put(b, "  if (%s < %" PRId64 ") {\n  const %s gid = (%s)%s;\n", d->gid, spec->numel, g.ity, g.ity, d->gid);
  } else if (g.tiled) {
    sb_put(b, ") {\n");
    put_tile_head(&g, &tp, g.tiled - 1, ctype(spec->sh->v[spec->access[g.tiled - 1].value].dtype));
    sig->n_items = tp.groups * (int64_t)tp.local;
    sig->local = tp.local;
  } else {
    sb_put(b, ") {\n  if (%s >= %" PRId64 ") return;\n  const %s gid = (%s)%s;\n", d->gid, spec->numel, g.ity, g.ity,
           d->gid);
  }
  if (!s) s = put_body(&g);
  if (n_obs) { /* fold this element; after the loop, the work-group reduction */
    for (int j = 0; j < n_obs; j++)
      sb_put(b, "  kiln_mn%d = fmin(kiln_mn%d, v%d); kiln_mx%d = fmax(kiln_mx%d, v%d);\n"
                "  kiln_nan%d += isnan(v%d) ? 1u : 0u; kiln_pi%d += v%d == INFINITY ? 1u : 0u; "
                "kiln_ni%d += v%d == -INFINITY ? 1u : 0u;\n",
             j, j, obs_expr[j], j, j, obs_expr[j], j, obs_expr[j], j, obs_expr[j], j, obs_expr[j]);
    /* one work-group reduction for all of them: a few barriers whatever
       n_obs is (PoCL's compile time grows with the barriers) */
    int wn = wg * n_obs;
    sb_put(b, "  }\n  __local float kiln_lmn[%d], kiln_lmx[%d];\n  __local uint kiln_lc[%d];\n"
              "  const uint kiln_l = get_local_id(0);\n",
           wn, wn, 3 * wn);
    for (int j = 0; j < n_obs; j++)
      sb_put(b, "  kiln_lmn[%d + kiln_l] = kiln_mn%d; kiln_lmx[%d + kiln_l] = kiln_mx%d;\n"
                "  kiln_lc[3 * (%d + kiln_l)] = kiln_nan%d; kiln_lc[3 * (%d + kiln_l) + 1] = kiln_pi%d; "
                "kiln_lc[3 * (%d + kiln_l) + 2] = kiln_ni%d;\n",
             j * wg, j, j * wg, j, j * wg, j, j * wg, j, j * wg, j);
    sb_put(b, "  barrier(CLK_LOCAL_MEM_FENCE);\n"
              "  for (uint h = get_local_size(0) / 2; h > 0; h >>= 1) { /* a power of 2 <= %d */\n"
              "    if (kiln_l < h)\n"
              "      for (uint j = 0; j < %d; j++) {\n"
              "        const uint a = j * %d + kiln_l, c = a + h;\n"
              "        kiln_lmn[a] = fmin(kiln_lmn[a], kiln_lmn[c]); kiln_lmx[a] = fmax(kiln_lmx[a], kiln_lmx[c]);\n"
              "        kiln_lc[3 * a] += kiln_lc[3 * c]; kiln_lc[3 * a + 1] += kiln_lc[3 * c + 1]; "
              "kiln_lc[3 * a + 2] += kiln_lc[3 * c + 2];\n"
              "      }\n"
              "    barrier(CLK_LOCAL_MEM_FENCE);\n"
              "  }\n"
              "  if (kiln_l == 0)\n"
              "    for (uint j = 0; j < %d; j++) {\n"
              "      __global ulong *q = kiln_part + (kiln_off + get_group_id(0) * %d + j) * 5;\n"
              "      const uint a = j * %d;\n"
              "      q[0] = as_uint(kiln_lmn[a]); q[1] = as_uint(kiln_lmx[a]);\n"
              "      q[2] = kiln_lc[3 * a]; q[3] = kiln_lc[3 * a + 1]; q[4] = kiln_lc[3 * a + 2];\n"
              "    }\n",
           wg, n_obs, wg, n_obs, n_obs, wg);
  }
  if (g.tiled) sb_put(b, "  }\n"); /* the tile's loop */
  sb_put(b, "}\n");
  if (g.tiled) {
    kiln_status st = put_twin(&g, twin, &tsig, sig);
    twin = NULL;
    if (!s) s = st;
  }
  kiln_free(twin);
  if (!s && b->oom) s = kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory printing a kernel");
  if (s) {
    kiln_free(b->p);
    memset(sig, 0, sizeof *sig);
    return s;
  }
  *source = b->p;
  return KILN_OK;
}

kiln_status kiln_cl_codegen(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, char **source,
                            kiln_cl_kernel_sig *sig) {
  return kiln_cl_codegen_named(spec, dev, "kiln_fused", source, sig);
}

/* ------------------------------------------------------------------ */
/* alias copies                                                        */

/* An unsigned type of the element's size: a copy moves bit patterns, so
 * any dtype (float16, float64 without cl_khr_fp64) copies. */
static const char *bits_type(kiln_dtype t) {
  switch (kiln_dtype_size(t)) {
  case 1: return "uchar";
  case 2: return "ushort";
  case 4: return "uint";
  case 8: return "ulong";
  default: return NULL;
  }
}

/* Hands the printed copy kernel over (or fails on out of memory). */
static kiln_status alias_done(sbuf *b, char **source, kiln_cl_kernel_sig *sig) {
  if (b->oom) {
    kiln_free(b->p);
    memset(sig, 0, sizeof *sig);
    return kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory printing a kernel");
  }
  *source = b->p;
  return KILN_OK;
}

static kiln_status alias_copy(const kiln_fuse_spec *spec, int alias, const kiln_cl_device_info *dev, const char *name,
                              bool tile_ok, char **source, kiln_cl_kernel_sig *sig);

kiln_status kiln_cl_codegen_alias(const kiln_fuse_spec *spec, int alias, const kiln_cl_device_info *dev,
                                  const char *name, char **source, kiln_cl_kernel_sig *sig) {
  return alias_copy(spec, alias, dev, name, true, source, sig);
}

static kiln_status alias_copy(const kiln_fuse_spec *spec, int alias, const kiln_cl_device_info *dev, const char *name,
                              bool tile_ok, char **source, kiln_cl_kernel_sig *sig) {
  *source = NULL;
  memset(sig, 0, sizeof *sig);
  if (!name || !*name || strlen(name) >= sizeof sig->name)
    return kiln_fail(KILN_E_INTERNAL, "opencl codegen: bad kernel name");
  if (!spec->bound)
    return kiln_fail(KILN_E_INVALID_SHAPE, "opencl codegen: the spec is not bound (kiln_fuse_spec_bind)");
  if (alias < 0 || alias >= spec->n_alias) return kiln_fail(KILN_E_INTERNAL, "opencl codegen: no alias %d", alias);
  const kiln_fuse_alias *al = &spec->alias[alias];
  const kiln_fuse_access *ac = &spec->access[al->access];
  kiln_dtype t = spec->sh->v[ac->value].dtype;
  bool masked = false;
  for (int k = 0; k < ac->map.depth; k++) masked |= ac->map.v[k].has_mask;
  /* a masked read yields the pad value: typed (the pad is a number) */
  const char *ty = masked ? ctype(t) : bits_type(t);
  if (!ty || (masked && t == KILN_F64 && !dev->has_fp64) || spec->sh->v[al->value].dtype != t)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: a view copy of %s is not supported", kiln_dtype_name(t));
  const kiln_view *top = kiln_views_top(&ac->map);
  gen g;
  memset(&g, 0, sizeof g);
  g.sp = spec;
  g.dev = dev;
  bool small = fits_int(spec) && top->numel <= INT32_MAX / 2;
  g.ity = small ? "int" : "long";
  g.isuf = small ? "" : "L";
  const cl_dialect *d = &opencl12;
  sbuf *b = &g.b;
  snprintf(sig->name, sizeof sig->name, "%s", name);
  sig->n_items = top->numel;
  sig->uses_fp64 = masked && t == KILN_F64;
  sig->args[sig->n_args++] = (kiln_cl_sig_arg){false, al->access, ac->value, t, ac->numel};
  sig->args[sig->n_args++] = (kiln_cl_sig_arg){true, 0, al->value, t, top->numel};
  if (sig->uses_fp64) sb_put(b, "%s", d->fp64_pragma);
  cl_tile tp;
  if (tile_ok && !masked && tile_plan(&ac->map, kiln_dtype_size(t), dev, &tp)) {
    char tname[72], *twin = NULL;
    kiln_cl_kernel_sig tsig;
    snprintf(tname, sizeof tname, "%su", name);
    if (strlen(tname) >= sizeof sig->name) return kiln_fail(KILN_E_INTERNAL, "opencl codegen: bad kernel name");
    kiln_status s = alias_copy(spec, alias, dev, tname, false, &twin, &tsig);
    if (s) return s;
    sig->n_items = tp.groups * (int64_t)tp.local;
    sig->local = tp.local;
    sb_put(b, "%s %s(%s const %s *restrict a0, %s %s *s0) {\n", d->kernel, name, d->global, ty, d->global, ty);
    put_tile_head(&g, &tp, 0, ty);
    sb_put(b, "    s0[gid] = %s;\n  }\n}\n", KT_ELEM);
    s = put_twin(&g, twin, &tsig, sig);
    if (s) {
      kiln_free(b->p);
      memset(sig, 0, sizeof *sig);
      return s;
    }
    return alias_done(b, source, sig);
  }
  sb_put(b, "%s %s(%s const %s *restrict a0, %s %s *s0) {\n", d->kernel, name, d->global, ty, d->global, ty);
  sb_put(b, "  if (%s >= %" PRId64 ") return;\n  const %s gid = (%s)%s;\n", d->gid, top->numel, g.ity, g.ity, d->gid);
  bool m2;
  put_map(&g, &ac->map, "a0", "gid", &m2);
  if (masked) {
    sb_put(b, "  s0[gid] = a0m ? a0[a0o0] : ");
    if (kiln_dtype_is_float(t)) put_float(b, t, ac->pad);
    else put_int(b, t, (int64_t)ac->pad);
    sb_put(b, ";\n}\n");
  } else {
    sb_put(b, "  s0[gid] = a0[a0o0];\n}\n");
  }
  return alias_done(b, source, sig);
}

/* ------------------------------------------------------------------ */
/* anchor epilogues and reductions (opencl/engine_fuse.c)              */

/* A working copy of a spec for the anchor and reduction printers: float64
 * intermediates (BatchNormalization, Softmax, LayerNormalization expand in
 * double) computed in float32 when no buffer the spec reads or writes is
 * float64 and no node of it has a float64 value of the graph (as the cpu
 * tile executor does; always on a device without cl_khr_fp64). */
typedef struct fspec {
  kiln_fuse_spec sp;
  kiln_fuse_expr *expr;
  kiln_fuse_reduce *red;
} fspec;

static void fspec_free(fspec *f) {
  kiln_free(f->expr);
  kiln_free(f->red);
}

/* Checks spec for the anchor / reduction printers (pool stores write
 * pool_value) and makes the working copy. */
static kiln_status fspec_make(const kiln_fuse_spec *sp, const kiln_cl_device_info *dev, int pool_value, fspec *f,
                              bool *fp64) {
  memset(f, 0, sizeof *f);
  if (!sp->bound) return kiln_fail(KILN_E_INVALID_SHAPE, "opencl codegen: the spec is not bound (kiln_fuse_spec_bind)");
  if (sp->n_alias > 0)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: the spec has %d alias outputs (view copies)", sp->n_alias);
  if (sp->n_access + sp->n_store + 4 > KILN_CL_SIG_MAX_ARGS)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: %d buffers, at most %d", sp->n_access + sp->n_store,
                     KILN_CL_SIG_MAX_ARGS - 4);
  bool buf64 = false;
  for (int a = 0; a < sp->n_access; a++) {
    kiln_dtype t = sp->sh->v[sp->access[a].value].dtype;
    if (!ctype(t))
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: input '%s' of type %s is not supported",
                       sp->g->values[sp->access[a].value].name, kiln_dtype_name(t));
    buf64 |= t == KILN_F64;
  }
  for (int k = 0; k < sp->n_store; k++) {
    const kiln_fuse_store *st = &sp->store[k];
    int value = st->pool ? pool_value : st->value;
    if (value < 0) return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: a pooled store without its buffer");
    kiln_dtype t = sp->sh->v[value].dtype;
    if (!ctype(t))
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: output '%s' of type %s is not supported",
                       sp->g->values[value].name, kiln_dtype_name(t));
    buf64 |= t == KILN_F64;
  }
  buf64 |= kiln_fuse_spec_f64_values(sp); /* the model's own doubles stay double */
  f->sp = *sp;
  f->expr = kiln_malloc(sizeof *f->expr * (size_t)(sp->n_expr + 1));
  f->red = kiln_malloc(sizeof *f->red * (size_t)(sp->n_red + 1));
  if (!f->expr || !f->red) {
    fspec_free(f);
    return kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
  }
  if (sp->n_expr) memcpy(f->expr, sp->expr, sizeof *f->expr * (size_t)sp->n_expr);
  if (sp->n_red) memcpy(f->red, sp->red, sizeof *f->red * (size_t)sp->n_red);
  f->sp.expr = f->expr;
  f->sp.red = f->red;
  *fp64 = buf64;
  for (int i = 0; i < sp->n_expr; i++) {
    if (!buf64 && f->expr[i].dtype == KILN_F64) f->expr[i].dtype = KILN_F32;
    *fp64 |= f->expr[i].dtype == KILN_F64;
  }
  for (int r = 0; r < sp->n_red; r++) {
    if (!buf64 && f->red[r].dtype == KILN_F64) f->red[r].dtype = KILN_F32;
    *fp64 |= f->red[r].dtype == KILN_F64;
  }
  if (*fp64 && !dev->has_fp64) {
    fspec_free(f);
    return kiln_fail(KILN_E_UNSUPPORTED_OP,
                     "opencl codegen: the spec computes in float64, but device %s (%s) has no cl_khr_fp64", dev->id,
                     dev->name);
  }
  return KILN_OK;
}

/* need[] |= expression t and everything it reads (arguments come first). */
static void mark_need(const kiln_fuse_spec *sp, int t, unsigned char *need) {
  need[t] = 1;
  for (int i = t; i >= 0; i--)
    if (need[i])
      for (int k = 0; k < sp->expr[i].n_args; k++) need[sp->expr[i].args[k]] = 1;
}

/* Whether a marked expression loads accessor a. */
static bool loaded(const kiln_fuse_spec *sp, const unsigned char *need, int a) {
  for (int i = 0; i < sp->n_expr; i++)
    if (need[i] && sp->expr[i].op == KILN_FUSE_LOAD && sp->expr[i].ref == a) return true;
  return false;
}

/* Prints the accessor maps the marked expressions load (full ones at
 * `gid`, reduced ones at `ro`), the expressions, then stores st[0..ns)
 * (pool stores into pool_value's buffer). */
static kiln_status put_block(gen *g, const unsigned char *need, const int *st, int ns) {
  const kiln_fuse_spec *sp = g->sp;
  sbuf *b = &g->b;
  kiln_status s = KILN_OK;
  for (int a = 0; a < sp->n_access; a++) {
    if (!loaded(sp, need, a)) continue;
    char pre[16];
    bool masked;
    snprintf(pre, sizeof pre, "a%d", a);
    put_map(g, &sp->access[a].map, pre, sp->access[a].reduced ? "ro" : "gid", &masked);
  }
  for (int i = 0; i < sp->n_expr && !s; i++)
    if (need[i]) s = put_expr(g, i);
  for (int j = 0; j < ns && !s; j++) {
    int k = st[j];
    const kiln_fuse_store *so = &sp->store[k];
    char pre[16], v[32];
    bool masked;
    snprintf(pre, sizeof pre, "s%d", k);
    put_map(g, &so->map, pre, so->reduced ? "ro" : "gid", &masked);
    snprintf(v, sizeof v, "v%d", so->expr);
    if (masked) sb_put(b, "  if (s%dm) s%d[s%do0] = ", k, k, k);
    else sb_put(b, "  s%d[s%do0] = ", k, k);
    put_convert(b, sp->expr[so->expr].dtype, so->pool ? g->pool_dtype : sp->sh->v[so->value].dtype, v);
    sb_put(b, ";\n");
  }
  return s;
}

/* Parameters of the accessors, then of the stores in st[0..ns); sig args appended. */
static void put_params(gen *g, const int *st, int ns, int pool_value, kiln_cl_kernel_sig *sig, bool first) {
  const kiln_fuse_spec *sp = g->sp;
  sbuf *b = &g->b;
  for (int a = 0; a < sp->n_access; a++) {
    const kiln_fuse_access *ac = &sp->access[a];
    kiln_dtype t = sp->sh->v[ac->value].dtype;
    sig->args[sig->n_args++] = (kiln_cl_sig_arg){false, a, ac->value, t, ac->numel};
    sb_put(b, "%s__global const %s *restrict a%d", first ? "" : ", ", ctype(t), a);
    first = false;
  }
  for (int j = 0; j < ns; j++) {
    const kiln_fuse_store *so = &sp->store[st[j]];
    int value = so->pool ? pool_value : so->value;
    kiln_dtype t = sp->sh->v[value].dtype;
    int64_t n = 1;
    for (int r = 0; r < so->rank; r++) n *= so->shape[r];
    sig->args[sig->n_args++] = (kiln_cl_sig_arg){true, st[j], value, t, n};
    sb_put(b, "%s__global %s *s%d", first ? "" : ", ", ctype(t), st[j]);
    first = false;
  }
}

/* The anchor spec's stores other than one into skip_value. */
static int epilogue_stores(const kiln_fuse_spec *sp, int skip_value, int *st) {
  int ns = 0;
  for (int k = 0; k < sp->n_store; k++)
    if (sp->store[k].pool || sp->store[k].value != skip_value) st[ns++] = k;
  return ns;
}

static kiln_status check_anchor(const kiln_fuse_spec *sp) {
  if (sp->kind != KILN_FUSE_G_ANCHOR || sp->anchor < 0 || sp->n_red > 0)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: not an anchor spec");
  for (int i = 0; i < sp->n_expr; i++)
    if (sp->expr[i].op == KILN_FUSE_ANCHOR && sp->expr[i].dtype != KILN_F32)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: an anchor of type %s",
                       kiln_dtype_name(sp->expr[i].dtype));
  return KILN_OK;
}

static kiln_status gen_finish(gen *g, kiln_status s, char **out, kiln_cl_kernel_sig *sig) {
  if (!s && g->b.oom) s = kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory printing a kernel");
  if (s) {
    kiln_free(g->b.p);
    if (sig) memset(sig, 0, sizeof *sig);
    return s;
  }
  *out = g->b.p;
  return KILN_OK;
}

kiln_status kiln_cl_codegen_epilogue(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                     int anchor_value, const kiln_cl_anchor_add *add, int pool_value, char **source,
                                     kiln_cl_kernel_sig *sig) {
  *source = NULL;
  memset(sig, 0, sizeof *sig);
  if (!name || !*name || strlen(name) >= sizeof sig->name)
    return kiln_fail(KILN_E_INTERNAL, "opencl codegen: bad kernel name");
  kiln_status s = check_anchor(spec);
  if (s) return s;
  fspec f;
  bool fp64;
  if ((s = fspec_make(spec, dev, pool_value, &f, &fp64))) return s;
  gen g;
  memset(&g, 0, sizeof g);
  g.sp = &f.sp;
  g.dev = dev;
  g.fp64 = fp64;
  g.pool_dtype = pool_value >= 0 ? spec->sh->v[pool_value].dtype : KILN_F32;
  bool small = fits_int(spec);
  g.ity = small ? "int" : "long";
  g.isuf = small ? "" : "L";
  int st[KILN_CL_SIG_MAX_ARGS];
  int ns = epilogue_stores(spec, anchor_value, st);
  if ((add ? 2 : 1) + spec->n_access + ns > KILN_CL_SIG_MAX_ARGS) {
    fspec_free(&f);
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: too many buffers");
  }
  snprintf(sig->name, sizeof sig->name, "%s", name);
  sig->n_items = spec->numel;
  sig->uses_fp64 = fp64;
  sbuf *b = &g.b;
  if (fp64) sb_put(b, "%s", opencl12.fp64_pragma);
  sb_put(b, "%s", prelude());
  if (fp64) sb_put(b, "%s", prelude64);
  sb_put(b, "__kernel void %s(__global const float *restrict anc_, ", name);
  sig->args[sig->n_args++] = (kiln_cl_sig_arg){false, -1, anchor_value, KILN_F32, spec->numel};
  if (add) { /* what the anchor's op left out: its own buffer, after the anchor's */
    sb_put(b, "__global const float *restrict anb_, ");
    sig->args[sig->n_args++] = (kiln_cl_sig_arg){false, -1, add->value, KILN_F32, add->numel};
  }
  put_params(&g, st, ns, pool_value, sig, true);
  sb_put(b, ") {\n  if (get_global_id(0) >= %" PRId64 ") return;\n  const %s gid = (%s)get_global_id(0);\n"
            "  const float anc = anc_[gid]%s;\n",
         spec->numel, g.ity, g.ity, add ? add->expr : "");
  unsigned char *need = kiln_calloc((size_t)spec->n_expr + 1, 1);
  if (!need) s = kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
  for (int j = 0; j < ns && !s; j++) mark_need(&f.sp, spec->store[st[j]].expr, need);
  if (!s) s = put_block(&g, need, st, ns);
  sb_put(b, "}\n");
  kiln_free(need);
  fspec_free(&f);
  return gen_finish(&g, s, source, sig);
}

/* The epilogue's parameters and body for a kernel that computes the
 * anchor's element itself (kiln_cl_codegen_epilogue_parts), or, pooled,
 * the pooling's argument at one window position into ep_v, with no store
 * (kiln_cl_codegen_epilogue_pooled; pool_value is then the pool's input). */
static kiln_status epilogue_parts(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, int pool_value,
                                  bool pooled, char **params, char **body, kiln_cl_kernel_sig *sig) {
  *params = *body = NULL;
  kiln_status s = check_anchor(spec);
  if (s) return s;
  if (pooled) {
    if (spec->pool < 0 || spec->n_store != 1 || !spec->store[0].pool)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: the pooled epilogue wants the pooled store alone");
    pool_value = spec->g->nodes[spec->pool].in[0];
    if (pool_value < 0 || spec->sh->v[pool_value].dtype != KILN_F32)
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: a pooled value that is not float32");
  }
  fspec f;
  bool fp64;
  if ((s = fspec_make(spec, dev, pool_value, &f, &fp64))) return s;
  if (fp64) {
    fspec_free(&f);
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: a float64 epilogue inside another kernel");
  }
  gen g;
  memset(&g, 0, sizeof g);
  g.sp = &f.sp;
  g.dev = dev;
  g.pool_dtype = pool_value >= 0 ? spec->sh->v[pool_value].dtype : KILN_F32;
  bool small = fits_int(spec);
  g.ity = small ? "int" : "long";
  g.isuf = small ? "" : "L";
  int st[KILN_CL_SIG_MAX_ARGS];
  int ns = pooled ? 0 : epilogue_stores(spec, -1, st);
  int n0 = sig->n_args;
  if (n0 + spec->n_access + (pooled ? 1 : ns) > KILN_CL_SIG_MAX_ARGS) {
    fspec_free(&f);
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: too many buffers");
  }
  put_params(&g, pooled ? NULL : st, ns, pool_value, sig, false);
  s = gen_finish(&g, KILN_OK, params, NULL);
  if (!s && pooled && !*params) { /* no accessor: "" */
    if ((*params = kiln_malloc(1))) **params = 0;
    else s = kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
  }
  if (s) {
    sig->n_args = n0;
    fspec_free(&f);
    return s;
  }
  memset(&g.b, 0, sizeof g.b);
  sb_put(&g.b, "  {\n  const %s gid = (%s)ep_i;\n", g.ity, g.ity);
  unsigned char *need = kiln_calloc((size_t)spec->n_expr + 1, 1);
  if (!need) s = kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
  if (pooled) {
    int e = spec->store[0].expr;
    if (!s) mark_need(&f.sp, e, need);
    if (!s) s = put_block(&g, need, NULL, 0);
    char v[32];
    snprintf(v, sizeof v, "v%d", e);
    sb_put(&g.b, "  ep_v = ");
    put_convert(&g.b, f.sp.expr[e].dtype, KILN_F32, v);
    sb_put(&g.b, ";\n");
  } else {
    for (int j = 0; j < ns && !s; j++) mark_need(&f.sp, spec->store[st[j]].expr, need);
    if (!s) s = put_block(&g, need, st, ns);
  }
  sb_put(&g.b, "  }\n");
  kiln_free(need);
  fspec_free(&f);
  s = gen_finish(&g, s, body, NULL);
  if (s) {
    kiln_free(*params);
    *params = NULL;
    sig->n_args = n0;
  }
  return s;
}

kiln_status kiln_cl_codegen_epilogue_parts(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev,
                                           int pool_value, char **params, char **body, kiln_cl_kernel_sig *sig) {
  return epilogue_parts(spec, dev, pool_value, false, params, body, sig);
}

kiln_status kiln_cl_codegen_epilogue_pooled(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, char **params,
                                            char **body, kiln_cl_kernel_sig *sig) {
  return epilogue_parts(spec, dev, -1, true, params, body, sig);
}

/* Work-items per work-group of a reduction kernel: a power of two, at most
 * 64 and the device's limits, no more than the reduction needs. */
static size_t red_local(const kiln_cl_device_info *dev, int64_t nred) {
  size_t lim = 64;
  if (dev->max_work_group_size && dev->max_work_group_size < lim) lim = dev->max_work_group_size;
  if (dev->max_work_item_size0 && dev->max_work_item_size0 < lim) lim = dev->max_work_item_size0;
  size_t l = 1;
  while (l * 2 <= lim && (int64_t)l < nred) l *= 2;
  return l;
}

/* Lanes per work item of a reduction printed a work item per row: w rows
 * next to each other along the domain's innermost axis, which must be kept
 * (not reduced) and a multiple of w long, so every reduction step of the w
 * rows reads w neighbouring domain elements — one floatW load where the
 * accessor is contiguous there. Float32 throughout, ops with a vector form;
 * w by the device's preferred float width: 16, 8, else 4 (the elementwise
 * printer, vec_width, takes 8 for less than 8; not measured here);
 * KILN_CL_VEC caps it, 0: none. 0: the scalar form.
 * PoCL does not vectorise across work items: the bench embedding bags
 * ([512,40,64] summed over the 40) took 709 us a kernel with one row per
 * item (opencl/ENGINE.md, "Reductions"). */
static int red_vec_width(const kiln_fuse_spec *sp, const kiln_cl_device_info *dev) {
  const char *e = getenv("KILN_CL_VEC");
  int force = e && *e ? atoi(e) : -1;
  if (force == 0 || sp->rank < 1 || sp->red_axes[sp->rank - 1]) return 0;
  for (int i = 0; i < sp->n_expr; i++)
    if (sp->expr[i].dtype != KILN_F32 || !(vec4_op(sp->expr[i].op) || sp->expr[i].op == KILN_FUSE_REDUCE)) return 0;
  for (int r = 0; r < sp->n_red; r++)
    if (sp->red[r].dtype != KILN_F32) return 0;
  for (int a = 0; a < sp->n_access; a++)
    if (sp->sh->v[sp->access[a].value].dtype != KILN_F32) return 0;
  for (int k = 0; k < sp->n_store; k++)
    if (sp->sh->v[sp->store[k].value].dtype != KILN_F32 || sp->store[k].pool) return 0;
  int w = dev->pref_vec_float >= 16 ? 16 : dev->pref_vec_float >= 8 ? 8 : 4;
  if (force == 4 || force == 8 || force == 16) w = force;
  while (w >= 4 && sp->shape[sp->rank - 1] % w) w /= 2;
  return w >= 4 ? w : 0;
}

/* put_block's vector form: lanes at q (full domain) or ro (reduced). */
static kiln_status put_block_vec(gen *g, const unsigned char *need, const int *st, int ns) {
  const kiln_fuse_spec *sp = g->sp;
  kiln_status s = KILN_OK;
  for (int a = 0; a < sp->n_access; a++) {
    if (!loaded(sp, need, a)) continue;
    char pre[16];
    snprintf(pre, sizeof pre, "a%d", a);
    put_map_vec4(g, &sp->access[a].map, pre, sp->access[a].reduced ? "ro" : "q");
  }
  for (int i = 0; i < sp->n_expr && !s; i++)
    if (need[i]) s = put_expr_vec4(g, i);
  for (int j = 0; j < ns && !s; j++) put_store_vec(g, st[j], sp->store[st[j]].reduced ? "ro" : "q");
  return s;
}

kiln_status kiln_cl_codegen_reduce(const kiln_fuse_spec *spec, const kiln_cl_device_info *dev, const char *name,
                                   char **source, kiln_cl_kernel_sig *sig) {
  *source = NULL;
  memset(sig, 0, sizeof *sig);
  if (!name || !*name || strlen(name) >= sizeof sig->name)
    return kiln_fail(KILN_E_INTERNAL, "opencl codegen: bad kernel name");
  if (spec->kind != KILN_FUSE_G_REDUCE || spec->anchor >= 0 || spec->pool >= 0 || spec->n_red < 1)
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: not a reduction spec");
  kiln_status s;
  fspec f;
  bool fp64;
  if ((s = fspec_make(spec, dev, -1, &f, &fp64))) return s;
  const kiln_fuse_spec *sp = &f.sp;
  for (int r = 0; r < sp->n_red; r++)
    if (!kiln_dtype_is_float(sp->expr[sp->red[r].arg].dtype) || !kiln_dtype_is_float(sp->red[r].dtype)) {
      fspec_free(&f);
      return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: an integer reduction");
    }
  int64_t nred = spec->red_numel ? spec->numel / spec->red_numel : 0;
  if (nred < 1 || spec->red_numel < 1) {
    fspec_free(&f);
    return kiln_fail(KILN_E_UNSUPPORTED_OP, "opencl codegen: an empty reduction");
  }
  gen g;
  memset(&g, 0, sizeof g);
  g.sp = sp;
  g.dev = dev;
  g.fp64 = fp64;
  bool small = fits_int(spec);
  g.ity = small ? "int" : "long";
  g.isuf = small ? "" : "L";
  /* the reduced axes trailing (each row contiguous) or not (rows interleaved) */
  int first_red = spec->rank;
  for (int d = spec->rank - 1; d >= 0 && spec->red_axes[d]; d--) first_red = d;
  bool trailing = true;
  for (int d = 0; d < spec->rank; d++) trailing &= spec->red_axes[d] == (d >= first_red);
  /* A work-item per row, no local memory: for short rows (< 32 elements),
     and for interleaved rows when there are many (>= 4096): neighbouring
     work items then read neighbouring addresses at every step of their
     loops, and a work-group per row would leave most of its items idle
     behind barriers. The bench's embedding bags, [512,40,64] summed over
     the 40 (32768 rows of 40), PoCL: 9.2 ms a kernel with a work-group of
     64 per row; measured in opencl/ENGINE.md ("Reductions").
     On a CPU device (PoCL, llvmpipe: a work-group's barriers become loops
     over its items) also contiguous rows of any length when there are at
     least 4 rows per compute unit, as the single-node ops
     (kiln_clop_row_group in opencl/ops_reduce.c; KILN_CL_ROW_ITEM=0: not). */
  bool cpu_rows = !kiln_clop_row_group(dev, spec->red_numel);
  bool item = nred < 32 || (!trailing && spec->red_numel >= 4096) || (trailing && cpu_rows);
  size_t L = item ? 1 : red_local(dev, nred);
  const int vw = item && !trailing && !fp64 ? red_vec_width(sp, dev) : 0; /* w rows per item */
  g.vw = vw;
  int st[KILN_CL_SIG_MAX_ARGS], ns = 0;
  for (int k = 0; k < sp->n_store; k++) st[ns++] = k;
  snprintf(sig->name, sizeof sig->name, "%s", name);
  sig->n_items = vw ? spec->red_numel / vw : spec->red_numel * (int64_t)L;
  sig->local = item ? 0 : L;
  sig->group_offset = !item;
  sig->uses_fp64 = fp64;
  sbuf *b = &g.b;
  if (fp64) sb_put(b, "%s", opencl12.fp64_pragma);
  sb_put(b, "%s", prelude());
  if (fp64) sb_put(b, "%s", prelude64);
  if (vw) sb_put(b, "%s/* float%d: %d rows per work item */\n", vec_prelude[vw == 4 ? 0 : vw == 8 ? 1 : 2][builtin_math()], vw, vw);
  sb_put(b, "__kernel void %s(", name);
  put_params(&g, st, ns, -1, sig, true);
  if (vw)
    sb_put(b, ") {\n  if (get_global_id(0) >= %" PRId64 ") return;\n  const %s ro = (%s)get_global_id(0) * %d;\n"
              "  const int lid = 0, L_ = 1;\n",
           spec->red_numel / vw, g.ity, g.ity, vw);
  else if (item)
    sb_put(b, ") {\n  if (get_global_id(0) >= %" PRId64 ") return;\n  const %s ro = (%s)get_global_id(0);\n"
              "  const int lid = 0, L_ = 1;\n",
           spec->red_numel, g.ity, g.ity);
  else
    sb_put(b, ") {\n  const %s ro = (%s)(get_group_id(0) + get_global_offset(0) / get_local_size(0));\n"
              "  const int lid = (int)get_local_id(0);\n"
              "  const int L_ = (int)get_local_size(0); /* a power of two <= %zu */\n",
           g.ity, g.ity, L);
  /* the domain offset of the kept part (base) and of reduced element j */
  int64_t ds[KILN_MAX_RANK], inner = 1;
  for (int d = spec->rank - 1; d >= 0; d--) ds[d] = inner, inner *= spec->shape[d];
  char joff[1024];
  if (trailing) {
    sb_put(b, "  const %s base = ro * %" PRId64 "%s;\n", g.ity, nred, g.isuf);
    snprintf(joff, sizeof joff, "j");
  } else {
    sb_put(b, "  const %s base = 0%s", g.ity, g.isuf);
    int64_t rspan = 1, jspan = 1;
    for (int d = spec->rank - 1; d >= 0; d--)
      if (!spec->red_axes[d]) {
        if (spec->shape[d] > 1) sb_put(b, " + (ro / %" PRId64 " %% %" PRId64 ") * %" PRId64, rspan, spec->shape[d], ds[d]);
        rspan *= spec->shape[d];
      }
    sb_put(b, ";\n");
    int w = snprintf(joff, sizeof joff, "(0");
    for (int d = spec->rank - 1; d >= 0 && w < (int)sizeof joff - 80; d--)
      if (spec->red_axes[d]) {
        if (spec->shape[d] > 1)
          w += snprintf(joff + w, sizeof joff - (size_t)w, " + (j / %" PRId64 " %% %" PRId64 ") * %" PRId64, jspan,
                        spec->shape[d], ds[d]);
        jspan *= spec->shape[d];
      }
    snprintf(joff + w, sizeof joff - (size_t)w, ")");
  }
  unsigned char *need = kiln_calloc((size_t)sp->n_expr + 1, 1);
  if (!need) s = kiln_fail(KILN_E_NOMEM, "opencl codegen: out of memory");
  for (int r = 0; r < sp->n_red && !s; r++) {
    const kiln_fuse_reduce *rd = &sp->red[r];
    kiln_dtype at = sp->expr[rd->arg].dtype;
    char TV[16];
    snprintf(TV, sizeof TV, "float%d", vw);
    const char *T = vw ? TV : ctype(at);
    const char *init = rd->kind == KILN_FUSE_RED_PROD  ? "1"
                       : rd->kind == KILN_FUSE_RED_MAX ? "-INFINITY"
                       : rd->kind == KILN_FUSE_RED_MIN ? "INFINITY"
                                                       : "0";
    char comb[160];
    if (rd->kind == KILN_FUSE_RED_MAX || rd->kind == KILN_FUSE_RED_MIN)
      snprintf(comb, sizeof comb, "(isnan(A) ? A : isnan(B) ? B : B %s A ? B : A)",
               rd->kind == KILN_FUSE_RED_MAX ? ">" : "<");
    else snprintf(comb, sizeof comb, "(A %s B)", rd->kind == KILN_FUSE_RED_PROD ? "*" : "+");
    if (!item) sb_put(b, "  __local %s sh%d[%zu];\n", T, r, L);
    sb_put(b, "  %s r%d;\n  {\n  %s acc = (%s)(%s);\n", vw ? TV : ctype(rd->dtype), r, T, T, init);
    sb_put(b, "  for (%s j = lid; j < %" PRId64 "%s; j += L_) {\n  const %s %s = base + %s;\n", g.ity, nred, g.isuf,
           g.ity, vw ? "q" : "gid", joff);
    memset(need, 0, (size_t)sp->n_expr + 1);
    mark_need(sp, rd->arg, need);
    if ((s = vw ? put_block_vec(&g, need, NULL, 0) : put_block(&g, need, NULL, 0))) break;
    /* comb with A = acc, B = the value */
    sb_put(b, "  #define A acc\n  #define B v%d\n  acc = %s;\n  #undef A\n  #undef B\n  }\n", rd->arg, comb);
    if (!item) sb_put(b, "  sh%d[lid] = acc;\n  barrier(CLK_LOCAL_MEM_FENCE);\n", r);
    if (!item)
      sb_put(b,
           "  for (int w = L_ / 2; w > 0; w >>= 1) {\n    if (lid < w) {\n"
           "  #define A sh%d[lid]\n  #define B sh%d[lid + w]\n    A = %s;\n  #undef A\n  #undef B\n"
           "    }\n    barrier(CLK_LOCAL_MEM_FENCE);\n  }\n",
           r, r, comb);
    char res[64];
    char top[16];
    if (item) snprintf(top, sizeof top, "acc");
    else snprintf(top, sizeof top, "sh%d[0]", r);
    if (rd->kind == KILN_FUSE_RED_MEAN) snprintf(res, sizeof res, "(%s / (%s)%" PRId64 ")", top, T, nred);
    else snprintf(res, sizeof res, "%s", top);
    sb_put(b, "  r%d = ", r);
    if (vw) sb_put(b, "%s", res); /* float32 to float32 */
    else put_convert(b, at, rd->dtype, res);
    sb_put(b, ";\n  }\n");
  }
  /* the stores over the full domain, then those over the reduced one */
  int fst[KILN_CL_SIG_MAX_ARGS], rst[KILN_CL_SIG_MAX_ARGS], nf = 0, nr = 0;
  for (int k = 0; k < sp->n_store; k++) {
    if (sp->store[k].reduced) rst[nr++] = k;
    else fst[nf++] = k;
  }
  if (!s && nf) {
    memset(need, 0, (size_t)sp->n_expr + 1);
    for (int j = 0; j < nf; j++) mark_need(sp, sp->store[fst[j]].expr, need);
    sb_put(b, "  for (%s j = lid; j < %" PRId64 "%s; j += L_) {\n  const %s %s = base + %s;\n", g.ity, nred, g.isuf,
           g.ity, vw ? "q" : "gid", joff);
    s = vw ? put_block_vec(&g, need, fst, nf) : put_block(&g, need, fst, nf);
    sb_put(b, "  }\n");
  }
  if (!s && nr) {
    memset(need, 0, (size_t)sp->n_expr + 1);
    for (int j = 0; j < nr; j++) mark_need(sp, sp->store[rst[j]].expr, need);
    sb_put(b, "  if (lid == 0) {\n  const %s %s = base;\n", g.ity, vw ? "q" : "gid");
    s = vw ? put_block_vec(&g, need, rst, nr) : put_block(&g, need, rst, nr);
    sb_put(b, "  }\n");
  }
  sb_put(b, "}\n");
  kiln_free(need);
  fspec_free(&f);
  return gen_finish(&g, s, source, sig);
}

const char *kiln_cl_codegen_prelude(void) { return prelude(); }

const char *kiln_cl_codegen_vec_prelude(int w) {
  return w == 4 || w == 8 || w == 16 ? vec_prelude[w == 4 ? 0 : w == 8 ? 1 : 2][builtin_math()] : NULL;
}
