/* ir/dtype: element types, numbered as ONNX's TensorProto.DataType (which is
 * also ONNXIFI's numbering, plus BOOL = 9), and half-precision conversions. */
#ifndef KILN_IR_DTYPE_H
#define KILN_IR_DTYPE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kiln_dtype {
  KILN_UNDEFINED = 0,
  KILN_F32 = 1,
  KILN_U8 = 2,
  KILN_I8 = 3,
  KILN_U16 = 4,
  KILN_I16 = 5,
  KILN_I32 = 6,
  KILN_I64 = 7,
  KILN_STRING = 8,
  KILN_BOOL = 9,
  KILN_F16 = 10,
  KILN_F64 = 11,
  KILN_U32 = 12,
  KILN_U64 = 13,
  KILN_C64 = 14,
  KILN_C128 = 15,
  KILN_BF16 = 16,
  KILN_DTYPE_COUNT = 17
} kiln_dtype;

/* Bit of a dtype in a type mask, and common masks. */
#define KILN_T(d) (1u << (d))
#define KILN_TS_FLOAT (KILN_T(KILN_F32) | KILN_T(KILN_F64) | KILN_T(KILN_F16) | KILN_T(KILN_BF16))
#define KILN_TS_SINT (KILN_T(KILN_I8) | KILN_T(KILN_I16) | KILN_T(KILN_I32) | KILN_T(KILN_I64))
#define KILN_TS_UINT (KILN_T(KILN_U8) | KILN_T(KILN_U16) | KILN_T(KILN_U32) | KILN_T(KILN_U64))
#define KILN_TS_INT (KILN_TS_SINT | KILN_TS_UINT)
#define KILN_TS_NUM (KILN_TS_FLOAT | KILN_TS_INT)
#define KILN_TS_ALL (KILN_TS_NUM | KILN_T(KILN_BOOL))

/* Size of one element in bytes; 0 for types kiln cannot store. */
size_t kiln_dtype_size(kiln_dtype t);
const char *kiln_dtype_name(kiln_dtype t);
/* True for the types kiln can hold in a tensor (numbers, bool, f16, bf16). */
bool kiln_dtype_supported(kiln_dtype t);
bool kiln_dtype_is_float(kiln_dtype t);
bool kiln_dtype_is_int(kiln_dtype t);      /* signed or unsigned integer */
bool kiln_dtype_is_signed(kiln_dtype t);   /* signed int or float */

float kiln_f16_to_f32(uint16_t h);
uint16_t kiln_f32_to_f16(float f);   /* round to nearest even */
/* v as a float rounded to odd (toward zero, then the lowest bit set when
 * anything was cut off): a double rounded through it to float16 or bfloat16
 * is rounded once, correctly (to nearest even), not twice. */
float kiln_f64_to_f32_odd(double v);
float kiln_bf16_to_f32(uint16_t h);
uint16_t kiln_f32_to_bf16(float f);  /* round to nearest even */

#endif
