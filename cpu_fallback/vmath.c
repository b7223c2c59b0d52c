/* cpu_fallback/vmath: the scalar twins (`kiln_vm_*_base`) of the vector math
 * kernels, the one-time choice of the version the entry points use, and the
 * lookup tables tests and tools iterate over. Every scalar function below is
 * written step by step like its AVX2 lane in vmath_avx2.c (same clamps, same
 * fmaf calls, same order), which makes it the bit-exact reference. */
#include "cpu_fallback/vmath.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---- scalar lanes ---- */

/* 2^n as a float for n in [-126, 127]. */
static float pow2i(int n) {
  uint32_t b = (uint32_t)(n + 127) << 23;
  float f;
  memcpy(&f, &b, sizeof f);
  return f;
}

static uint32_t bits_of(float x) {
  uint32_t b;
  memcpy(&b, &x, sizeof b);
  return b;
}

static float from_bits(uint32_t b) {
  float x;
  memcpy(&x, &b, sizeof x);
  return x;
}

/* e^x: x = n·ln2 + r, e^r by polynomial, then scaled by 2^⌊n/2⌋·2^(n−⌊n/2⌋)
 * so that n ∈ [-150, 128] needs no special case and a denormal result is
 * rounded once. */
static float exp1(float x) {
  if (isnan(x)) return x + x;
  float c = x < KILN_VM_EXP_LO ? KILN_VM_EXP_LO : x > KILN_VM_EXP_HI ? KILN_VM_EXP_HI : x;
  float fn = nearbyintf(c * KILN_VM_LOG2E);
  float r = fmaf(-fn, KILN_VM_LN2_HI, c);
  r = fmaf(-fn, KILN_VM_LN2_LO, r);
  float p = KILN_VM_EXP_P0;
  p = fmaf(p, r, KILN_VM_EXP_P1);
  p = fmaf(p, r, KILN_VM_EXP_P2);
  p = fmaf(p, r, KILN_VM_EXP_P3);
  p = fmaf(p, r, KILN_VM_EXP_P4);
  p = fmaf(p, r, KILN_VM_EXP_P5);
  p = fmaf(p, r * r, r);
  p = p + 1.0f;
  int n1 = (int)floorf(fn * 0.5f);
  int n2 = (int)fn - n1;
  return p * pow2i(n1) * pow2i(n2);
}

/* log x: denormals scaled by 2^23 first; m ∈ [√½, √2), f = m − 1 exact. */
static float log1(float x) {
  if (isnan(x)) return x + x;
  if (x < 0.0f) return NAN;
  if (x == 0.0f) return -INFINITY;
  if (x == INFINITY) return x;
  float adj = 0.0f;
  if (x < FLT_MIN) x *= 8388608.0f, adj = -23.0f;
  uint32_t b = bits_of(x);
  float e = (float)((int32_t)(b >> 23) - 126) + adj;
  float m = from_bits((b & 0x007fffffu) | 0x3f000000u);
  float f;
  if (m < KILN_VM_SQRTHF)
    e = e - 1.0f, f = (m + m) - 1.0f;
  else
    f = m - 1.0f;
  float z = f * f;
  float p = KILN_VM_LOG_P0;
  p = fmaf(p, f, KILN_VM_LOG_P1);
  p = fmaf(p, f, KILN_VM_LOG_P2);
  p = fmaf(p, f, KILN_VM_LOG_P3);
  p = fmaf(p, f, KILN_VM_LOG_P4);
  p = fmaf(p, f, KILN_VM_LOG_P5);
  p = fmaf(p, f, KILN_VM_LOG_P6);
  p = fmaf(p, f, KILN_VM_LOG_P7);
  p = fmaf(p, f, KILN_VM_LOG_P8);
  float y = p * f * z;
  y = fmaf(e, KILN_VM_LN2_LO, y);
  y = fmaf(z, -0.5f, y);
  float r = f + y;
  return fmaf(e, KILN_VM_LN2_HI, r);
}

/* tanh x = c·P(c²)/Q(c²), c = x clamped to ±9.1 (vmath.h): no exp, one
 * division; odd by construction, so tanh(±0) = ±0 and the sign needs no
 * fix-up. */
static float tanh1(float x) {
  if (isnan(x)) return x + x;
  float c = x > KILN_VM_TANH_R_CLAMP ? KILN_VM_TANH_R_CLAMP : x < -KILN_VM_TANH_R_CLAMP ? -KILN_VM_TANH_R_CLAMP : x;
  float z = c * c;
  float p = KILN_VM_TANH_RP4;
  p = fmaf(p, z, KILN_VM_TANH_RP3);
  p = fmaf(p, z, KILN_VM_TANH_RP2);
  p = fmaf(p, z, KILN_VM_TANH_RP1);
  p = fmaf(p, z, 1.0f);
  float q = KILN_VM_TANH_RQ4;
  q = fmaf(q, z, KILN_VM_TANH_RQ3);
  q = fmaf(q, z, KILN_VM_TANH_RQ2);
  q = fmaf(q, z, KILN_VM_TANH_RQ1);
  q = fmaf(q, z, 1.0f);
  return c * p / q;
}

/* sigmoid x with t = e^{−|x|} ∈ [0, 1]: 1/(1+t) for x ≥ 0, t/(1+t) below,
 * so neither side overflows and tiny results keep their precision. The
 * vector versions clamp −|x| only from below and let a NaN propagate
 * through the math instead of blending it in (the same results). */
static float sigmoid1(float x) {
  if (isnan(x)) return x + x;
  float t = exp1(-fabsf(x));
  float d = 1.0f + t;
  return (x >= 0.0f ? 1.0f : t) / d;
}

/* erf x: x + x·P(x²) up to 0.9277, then 1 − e^{Q(|x|)} with the sign of x. */
static float erf1(float x) {
  if (isnan(x)) return x + x;
  float a = fabsf(x);
  if (a <= KILN_VM_ERF_SPLIT) {
    float s = x * x;
    float r = KILN_VM_ERF_S0;
    r = fmaf(r, s, KILN_VM_ERF_S1);
    r = fmaf(r, s, KILN_VM_ERF_S2);
    r = fmaf(r, s, KILN_VM_ERF_S3);
    r = fmaf(r, s, KILN_VM_ERF_S4);
    r = fmaf(r, s, KILN_VM_ERF_S5);
    return fmaf(r, x, x);
  }
  float t = a > KILN_VM_ERF_CLAMP ? KILN_VM_ERF_CLAMP : a;
  float s = t * t;
  float r = fmaf(KILN_VM_ERF_L0, t, KILN_VM_ERF_L1);
  float u = fmaf(KILN_VM_ERF_L2, t, KILN_VM_ERF_L3);
  r = fmaf(r, s, u);
  r = fmaf(r, t, KILN_VM_ERF_L4);
  r = fmaf(r, t, KILN_VM_ERF_L5);
  r = fmaf(r, t, KILN_VM_ERF_L6);
  r = fmaf(r, t, -t);
  return copysignf(1.0f - exp1(r), x);
}

/* ---- the base kernels ---- */

#define KILN_VM_BASE(name, lane)                             \
  void name(size_t n, const float *x, float *y) {            \
    for (size_t i = 0; i < n; i++) y[i] = lane(x[i]);        \
  }
KILN_VM_BASE(kiln_vm_exp_base, exp1)
KILN_VM_BASE(kiln_vm_log_base, log1)
KILN_VM_BASE(kiln_vm_tanh_base, tanh1)
KILN_VM_BASE(kiln_vm_sigmoid_base, sigmoid1)
KILN_VM_BASE(kiln_vm_erf_base, erf1)
#undef KILN_VM_BASE

/* ---- CPU detection ---- */

int kiln_vm_cpu_has_avx2(void) {
#if defined(KILN_VM_HAVE_AVX2) && (defined(__x86_64__) || defined(__i386__))
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  if (!fma || !osxsave || !avx) return 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  if (!((b >> 5) & 1)) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return (lo & 6u) == 6u; /* XMM (bit 1) and YMM (bit 2) state saved */
#else
  return 0;
#endif
}

/* What the CPU and OS offer (cpuid + XGETBV), whatever KILN_CPU_ISA says. */
static int cpu_avx512_usable(void) {
#if defined(KILN_VM_HAVE_AVX512) && (defined(__x86_64__) || defined(__i386__))
  unsigned a, b, c, d;
  if (!kiln_vm_cpu_has_avx2() || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !((b >> 16) & 1)) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return (lo & 0xe6u) == 0xe6u; /* XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM */
#else
  return 0;
#endif
}

/* ---- tables and the one-time dispatch choice ---- */

static const kiln_vm_fn base_fns[KILN_VM_NOPS] = {
    kiln_vm_exp_base, kiln_vm_log_base, kiln_vm_tanh_base, kiln_vm_sigmoid_base, kiln_vm_erf_base};
#ifdef KILN_VM_HAVE_AVX2
static const kiln_vm_fn avx2_fns[KILN_VM_NOPS] = {
    kiln_vm_exp_avx2_fma, kiln_vm_log_avx2_fma, kiln_vm_tanh_avx2_fma, kiln_vm_sigmoid_avx2_fma,
    kiln_vm_erf_avx2_fma};
#endif
#ifdef KILN_VM_HAVE_AVX512
/* the AVX2 setting on a CPU with AVX-512F: the same results, 16 lanes */
static const kiln_vm_fn avx512_fns[KILN_VM_NOPS] = {
    kiln_vm_exp_avx512, kiln_vm_log_avx2_fma, kiln_vm_tanh_avx512, kiln_vm_sigmoid_avx512, kiln_vm_erf_avx512};
static const bool avx512_has[KILN_VM_NOPS] = {true, false, true, true, true};
#endif

/* The process's one piece of global state: what the CPU has and the ISA
 * the entry points use (with its kernel table), written once under
 * pthread_once and only read afterwards. cpuid is not called per kernel:
 * under a hypervisor it traps. */
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static int cpu_avx2, cpu_avx512;
static kiln_vm_isa isa_chosen = KILN_VM_ISA_BASE;
static const kiln_vm_fn *active_fns = base_fns;

static void choose_isa(void) {
  int have = cpu_avx2 = kiln_vm_cpu_has_avx2();
  cpu_avx512 = cpu_avx512_usable();
  kiln_vm_isa isa = have ? KILN_VM_ISA_AVX2 : KILN_VM_ISA_BASE;
  const char *env = getenv("KILN_CPU_ISA");
  if (env && *env) {
    if (!strcmp(env, "base"))
      isa = KILN_VM_ISA_BASE;
    else if (!strcmp(env, "avx2") || !strcmp(env, "avx512")) {
      if (!have)
        fprintf(stderr, "kiln[warn]: KILN_CPU_ISA=%s but this CPU/OS has no AVX2+FMA: using base\n", env);
      else if (env[3] == '5' && !cpu_avx512)
        fprintf(stderr, "kiln[warn]: KILN_CPU_ISA=avx512 but this CPU/OS has no usable AVX-512F: using avx2\n");
      /* avx2: the AVX2 kernels alone, as on a CPU without AVX-512 */
      if (env[3] == '2') cpu_avx512 = 0;
    } else
      fprintf(stderr, "kiln[warn]: KILN_CPU_ISA=%s unknown (base|avx2|avx512): ignored\n", env);
  }
  isa_chosen = isa;
#ifdef KILN_VM_HAVE_AVX2
  if (isa == KILN_VM_ISA_AVX2) active_fns = avx2_fns;
#endif
#ifdef KILN_VM_HAVE_AVX512
  if (isa == KILN_VM_ISA_AVX2 && cpu_avx512) active_fns = avx512_fns;
#endif
}

kiln_vm_fn kiln_vm_kernel_avx512(kiln_vm_op op) {
#ifdef KILN_VM_HAVE_AVX512
  pthread_once(&isa_once, choose_isa);
  if ((unsigned)op < KILN_VM_NOPS && cpu_avx512 && avx512_has[op]) return avx512_fns[op];
#endif
  (void)op;
  return NULL;
}

/* The AVX-512 kernels are chosen only where this says yes: the CPU and OS
 * support AVX-512F and KILN_CPU_ISA is not avx2 (which runs the AVX2
 * kernels alone, as on a CPU without AVX-512, to test and measure them on
 * one with it). Asked once: cpuid traps under a hypervisor. */
int kiln_vm_cpu_has_avx512(void) {
  pthread_once(&isa_once, choose_isa);
  return cpu_avx512;
}

kiln_vm_isa kiln_vm_isa_active(void) {
  pthread_once(&isa_once, choose_isa);
  return isa_chosen;
}

kiln_vm_fn kiln_vm_kernel(kiln_vm_op op, kiln_vm_isa isa) {
  if ((unsigned)op >= KILN_VM_NOPS) return NULL;
  if (isa == KILN_VM_ISA_BASE) return base_fns[op];
#ifdef KILN_VM_HAVE_AVX2
  pthread_once(&isa_once, choose_isa);
  if (isa == KILN_VM_ISA_AVX2 && cpu_avx2) return avx2_fns[op];
#endif
  return NULL;
}

int kiln_vm_max_ulp(kiln_vm_op op) {
  static const int ulp[KILN_VM_NOPS] = {KILN_VM_EXP_MAX_ULP, KILN_VM_LOG_MAX_ULP, KILN_VM_TANH_MAX_ULP,
                                         KILN_VM_SIGMOID_MAX_ULP, KILN_VM_ERF_MAX_ULP};
  return (unsigned)op < KILN_VM_NOPS ? ulp[op] : 0;
}

const char *kiln_vm_op_name(kiln_vm_op op) {
  static const char *names[KILN_VM_NOPS] = {"exp", "log", "tanh", "sigmoid", "erf"};
  return (unsigned)op < KILN_VM_NOPS ? names[op] : "?";
}

const char *kiln_vm_isa_name(kiln_vm_isa isa) {
  return isa == KILN_VM_ISA_BASE ? "base" : isa == KILN_VM_ISA_AVX2 ? "avx2" : "?";
}

/* ---- dispatched entry points ---- */

#define KILN_VM_ENTRY(name, op)                              \
  void name(size_t n, const float *x, float *y) {            \
    pthread_once(&isa_once, choose_isa);                     \
    active_fns[op](n, x, y);                                 \
  }
KILN_VM_ENTRY(kiln_vm_exp, KILN_VM_EXP)
KILN_VM_ENTRY(kiln_vm_log, KILN_VM_LOG)
KILN_VM_ENTRY(kiln_vm_tanh, KILN_VM_TANH)
KILN_VM_ENTRY(kiln_vm_sigmoid, KILN_VM_SIGMOID)
KILN_VM_ENTRY(kiln_vm_erf, KILN_VM_ERF)
#undef KILN_VM_ENTRY
