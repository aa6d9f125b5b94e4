/* dtype_convert.h — f32 to and from the storage dtypes, one scalar at a
 * time (dtype_convert.c).  Rounding is to nearest even; fp8 e4m3 follows
 * PyTorch's float8_e4m3fn. */
#ifndef DC_DTYPE_CONVERT_H
#define DC_DTYPE_CONVERT_H

#include <stdint.h>

float dc_f16_to_f32(uint16_t h);
float dc_bf16_to_f32(uint16_t h);
float dc_f8e4m3_to_f32(uint8_t v);
float dc_f8e5m2_to_f32(uint8_t v);
uint16_t dc_f32_to_bf16(float f);
uint16_t dc_f32_to_f16(float f);
uint8_t dc_f32_to_f8e4m3(float f); /* PyTorch float8_e4m3fn: saturates to ±448, NaN stays NaN */
uint8_t dc_f32_to_f8e5m2(float f);

#endif
