/* cpu_fallback/vmath: vectorised float32 math over arrays — exp, log, tanh,
 * sigmoid, erf — y[i] = f(x[i]). Each kernel has a portable scalar twin
 * (`*_base`, vmath.c) and an AVX2/FMA version (`*_avx2_fma`, vmath_avx2.c,
 * the only file built with -mavx2 -mfma). Both run the same range reduction
 * and the same polynomials with the same fused multiply-adds in the same
 * order, so on finite inputs the twin is a bit-exact reference for every
 * AVX2 lane. The entry points (`kiln_vm_exp`…) pick one version once, at
 * their first call, from cpuid and the OS's AVX state; KILN_CPU_ISA=base|avx2
 * forces one (see VMATH.md for the measured error bounds). */
#ifndef KILN_CPU_FALLBACK_VMATH_H
#define KILN_CPU_FALLBACK_VMATH_H
#include <stddef.h>

/* An instruction-set level a kernel is written for. */
typedef enum kiln_vm_isa {
  KILN_VM_ISA_BASE = 0, /* portable C (uses fmaf from libm) */
  KILN_VM_ISA_AVX2 = 1, /* AVX2 + FMA, 8 lanes */
  KILN_VM_NISA
} kiln_vm_isa;

/* The functions, for tests and tools that iterate over them. */
typedef enum kiln_vm_op {
  KILN_VM_EXP = 0,
  KILN_VM_LOG,
  KILN_VM_TANH,
  KILN_VM_SIGMOID,
  KILN_VM_ERF,
  KILN_VM_NOPS
} kiln_vm_op;

/* y[i] = f(x[i]) for i < n. x == y (in place) is allowed; other overlaps
 * are not. No alignment is required. */
typedef void (*kiln_vm_fn)(size_t n, const float *x, float *y);

/* Maximum error of every version against the correctly rounded result
 * ((float)f((double)x)), in ulps of float, over all 2^32 inputs (measured by
 * tools/vmath_sweep; asserted on a dense sample by tests/unit_vmath).
 * Special values: NaN in gives NaN out; ±inf, ±0 and the overflow and
 * underflow edges give what the C library gives (exp(x > 88.7228) = +inf,
 * exp(x < -103.98) = +0, log(±0) = -inf, log(x < 0) = NaN, log(+inf) = +inf,
 * tanh/sigmoid/erf saturate to ±1 / 0 / 1); denormal inputs are exact
 * inputs, not flushed. */
#define KILN_VM_EXP_MAX_ULP 1
#define KILN_VM_LOG_MAX_ULP 1
#define KILN_VM_TANH_MAX_ULP 5
#define KILN_VM_SIGMOID_MAX_ULP 2
#define KILN_VM_ERF_MAX_ULP 1

/* ---- dispatched entry points ---- */
void kiln_vm_exp(size_t n, const float *x, float *y);
void kiln_vm_log(size_t n, const float *x, float *y);
void kiln_vm_tanh(size_t n, const float *x, float *y);
void kiln_vm_sigmoid(size_t n, const float *x, float *y);
void kiln_vm_erf(size_t n, const float *x, float *y);

/* ---- the versions (callers outside tests use the entry points) ---- */
void kiln_vm_exp_base(size_t n, const float *x, float *y);
void kiln_vm_log_base(size_t n, const float *x, float *y);
void kiln_vm_tanh_base(size_t n, const float *x, float *y);
void kiln_vm_sigmoid_base(size_t n, const float *x, float *y);
void kiln_vm_erf_base(size_t n, const float *x, float *y);
/* Only callable where kiln_vm_cpu_has_avx2() is true. */
void kiln_vm_exp_avx2_fma(size_t n, const float *x, float *y);
void kiln_vm_log_avx2_fma(size_t n, const float *x, float *y);
void kiln_vm_tanh_avx2_fma(size_t n, const float *x, float *y);
void kiln_vm_sigmoid_avx2_fma(size_t n, const float *x, float *y);
void kiln_vm_erf_avx2_fma(size_t n, const float *x, float *y);

/* AVX-512F versions of exp, tanh, sigmoid and erf (vmath_avx512.c), bit-identical
 * to the AVX2 kernels. Only callable where kiln_vm_cpu_has_avx512() is
 * true. Under the AVX2 setting the entry points (kiln_vm_exp, …) use them
 * where the CPU has AVX-512F; kiln_vm_kernel(op, KILN_VM_ISA_AVX2) still
 * gives the AVX2 kernels. */
void kiln_vm_exp_avx512(size_t n, const float *x, float *y);
void kiln_vm_tanh_avx512(size_t n, const float *x, float *y);
void kiln_vm_sigmoid_avx512(size_t n, const float *x, float *y);
void kiln_vm_erf_avx512(size_t n, const float *x, float *y);
/* The tile executor's Gelu chain (cpu_fallback/tile.h KILN_TILE_OP_GELU,
 * x = a, p = {s, c1, c2}, variant bits k) in one pass over 16 lanes, erf's
 * lane code inline: the bits of the tile ops' twin. y may be x. */
void kiln_vm_gelu_chain_avx512(size_t n, const float *x, float s, float c1, float c2, int k, float *y);
/* The AVX-512F kernel of op, or NULL (no such kernel, or not usable here). */
kiln_vm_fn kiln_vm_kernel_avx512(kiln_vm_op op);
/* True when kiln_vm_cpu_has_avx2() is and the CPU has AVX-512F (cpuid leaf
 * 7 EBX bit 16) with the opmask and ZMM state saved by the OS (XCR0 bits
 * 5, 6, 7), and KILN_CPU_ISA is not avx2 (that setting runs the AVX2
 * kernels alone, as a CPU without AVX-512 does). Every AVX-512 choice of
 * the cpu backend goes through it. Asked once per process. Always false on
 * non-x86 builds. */
int kiln_vm_cpu_has_avx512(void);

/* True when the CPU has AVX2 and FMA and the OS saves the YMM state
 * (cpuid leaf 7 EBX bit 5; leaf 1 ECX bits 12, 27, 28; XCR0 bits 1 and 2).
 * Always false on non-x86 builds. */
int kiln_vm_cpu_has_avx2(void);

/* The version the entry points use: chosen once (thread-safe) from the CPU
 * and KILN_CPU_ISA (base|avx2|avx512; avx2 or avx512 on a CPU without
 * AVX2+FMA falls back to base with a warning on stderr; an unknown value is
 * ignored with a warning). avx512 is the AVX2 version plus the AVX-512
 * kernels where kiln_vm_cpu_has_avx512(): the default on such a CPU. */
kiln_vm_isa kiln_vm_isa_active(void);

/* The kernel of op written for isa; NULL when isa cannot run on this CPU or
 * an argument is out of range. */
kiln_vm_fn kiln_vm_kernel(kiln_vm_op op, kiln_vm_isa isa);

/* Its documented KILN_VM_*_MAX_ULP bound. */
int kiln_vm_max_ulp(kiln_vm_op op);

const char *kiln_vm_op_name(kiln_vm_op op);   /* "exp", "log", … */
const char *kiln_vm_isa_name(kiln_vm_isa isa); /* "base", "avx2" */

/* ---- coefficients shared by the twins (vmath.c, vmath_avx2.c) ----
 * Internal: kept here so the two files cannot drift apart. */
/* exp: x = n·ln2 + r, |r| ≤ ln2/2; e^r = 1 + r + r²·P(r) (Cephes expf). */
#define KILN_VM_LOG2E 1.44269504088896341f
#define KILN_VM_LN2_HI 0.693359375f /* 9 bits: n·LN2_HI exact */
#define KILN_VM_LN2_LO -2.12194440e-4f
#define KILN_VM_EXP_LO -104.0f /* clamp: n ∈ [-150, 128] */
#define KILN_VM_EXP_HI 89.0f
#define KILN_VM_EXP_P0 1.9875691500e-4f
#define KILN_VM_EXP_P1 1.3981999507e-3f
#define KILN_VM_EXP_P2 8.3334519073e-3f
#define KILN_VM_EXP_P3 4.1665795894e-2f
#define KILN_VM_EXP_P4 1.6666665459e-1f
#define KILN_VM_EXP_P5 5.0000001201e-1f
/* log: x = m·2^e, m ∈ [√½, √2), f = m − 1;
 * log x = f − f²/2 + f³·P(f) + e·ln2 (Cephes logf). */
#define KILN_VM_SQRTHF 0.707106781186547524f
#define KILN_VM_LOG_P0 7.0376836292e-2f
#define KILN_VM_LOG_P1 -1.1514610310e-1f
#define KILN_VM_LOG_P2 1.1676998740e-1f
#define KILN_VM_LOG_P3 -1.2420140846e-1f
#define KILN_VM_LOG_P4 1.4249322787e-1f
#define KILN_VM_LOG_P5 -1.6668057665e-1f
#define KILN_VM_LOG_P6 2.0000714765e-1f
#define KILN_VM_LOG_P7 -2.4999993993e-1f
#define KILN_VM_LOG_P8 3.3333331174e-1f
/* tanh (since 2026-11-25; the OpenCL generator prints the same P and Q with
 * its own saturation bound, opencl/codegen.c KILN_CL_TANH_SAT):
 * x·P(x²)/Q(x²) with x clamped to ±9.1 (tanh rounds to ±1 from 9.01 on),
 * P and Q of degree 4 with P(0) = Q(0) = 1, all coefficients positive (no
 * cancellation in Horner's scheme); a rational fit of tanh(x)/x on
 * [0, 9.1] made for kiln (iteratively reweighted least squares on the
 * relative error, 0.4 ulp before rounding to float). */
#define KILN_VM_TANH_R_CLAMP 9.1f
#define KILN_VM_TANH_RP1 0x1.11f8a2p-3f
#define KILN_VM_TANH_RP2 0x1.c99c5p-9f
#define KILN_VM_TANH_RP3 0x1.58815cp-16f
#define KILN_VM_TANH_RP4 0x1.c705c8p-27f
#define KILN_VM_TANH_RQ1 0x1.de519ep-2f
#define KILN_VM_TANH_RQ2 0x1.a7b48ep-6f
#define KILN_VM_TANH_RQ3 0x1.57c482p-12f
#define KILN_VM_TANH_RQ4 0x1.9f2262p-21f
/* erf: |x| ≤ 0.927734375: x + x·P(x²); else 1 − e^{Q(|x|)} with |x|
 * clamped to 4 (erf rounds to 1 from 3.92 on) (minimax fits by N. Juffa). */
#define KILN_VM_ERF_SPLIT 0.927734375f
#define KILN_VM_ERF_CLAMP 4.0f
#define KILN_VM_ERF_S0 -5.96761703e-4f
#define KILN_VM_ERF_S1 4.99119423e-3f
#define KILN_VM_ERF_S2 -2.67681349e-2f
#define KILN_VM_ERF_S3 1.12819925e-1f
#define KILN_VM_ERF_S4 -3.76125336e-1f
#define KILN_VM_ERF_S5 1.28379166e-1f
#define KILN_VM_ERF_L0 -1.72853470e-5f
#define KILN_VM_ERF_L1 3.83197126e-4f
#define KILN_VM_ERF_L2 -3.88396438e-3f
#define KILN_VM_ERF_L3 2.42546219e-2f
#define KILN_VM_ERF_L4 -1.06777877e-1f
#define KILN_VM_ERF_L5 -6.34846687e-1f
#define KILN_VM_ERF_L6 -1.28717512e-1f

#endif
