/* ir/dtype: element type facts and fp16/bf16 conversions. */
#include "ir/dtype.h"

#include <math.h>
#include <string.h>

size_t kiln_dtype_size(kiln_dtype t) {
  switch (t) {
  case KILN_F32: case KILN_I32: case KILN_U32: return 4;
  case KILN_U8: case KILN_I8: case KILN_BOOL: return 1;
  case KILN_U16: case KILN_I16: case KILN_F16: case KILN_BF16: return 2;
  case KILN_I64: case KILN_U64: case KILN_F64: return 8;
  default: return 0;
  }
}

const char *kiln_dtype_name(kiln_dtype t) {
  static const char *names[] = {"undefined", "float32", "uint8", "int8", "uint16", "int16",
                                "int32", "int64", "string", "bool", "float16", "float64",
                                "uint32", "uint64", "complex64", "complex128", "bfloat16"};
  if ((unsigned)t < KILN_DTYPE_COUNT) return names[t];
  return "unknown";
}

bool kiln_dtype_supported(kiln_dtype t) { return kiln_dtype_size(t) != 0; }

bool kiln_dtype_is_float(kiln_dtype t) {
  return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16;
}

bool kiln_dtype_is_int(kiln_dtype t) {
  return (unsigned)t < 32 && (KILN_TS_INT & KILN_T(t));
}

bool kiln_dtype_is_signed(kiln_dtype t) {
  return kiln_dtype_is_float(t) || ((unsigned)t < 32 && (KILN_TS_SINT & KILN_T(t)));
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float kiln_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0) {
    /* zero or subnormal: man * 2^-24 */
    float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return u2f(sign | 0x7f800000u | (man << 13));
  return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

float kiln_f64_to_f32_odd(double v) {
  float f = (float)v;
  if (isnan(v) || (double)f == v) return f;
  if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f); /* toward zero (inf -> FLT_MAX) */
  if ((double)f != v) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    b |= 1u; /* sticky: the cut-off part */
    memcpy(&f, &b, sizeof f);
  }
  return f;
}

uint16_t kiln_f32_to_f16(float f) {
  uint32_t u = f2u(f);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
  uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf or nan */
    return sign | 0x7c00 | (a > 0x7f800000u ? 0x200 | ((a >> 13) & 0x3ff) : 0);
  if (a >= 0x477ff000u) return sign | 0x7c00; /* rounds to >= 65520: inf */
  if (a < 0x38800000u) {
    /* result is subnormal (or zero): round a * 2^24 to nearest even */
    float v = u2f(a) * 16777216.0f;
    return sign | (uint16_t)nearbyintf(v);
  }
  uint32_t mant = a & 0x7fffff, e = (a >> 23) - 112;
  uint32_t r = (e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return sign | (uint16_t)r;
}

float kiln_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t kiln_f32_to_bf16(float f) {
  uint32_t u = f2u(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
