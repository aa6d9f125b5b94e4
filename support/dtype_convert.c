/* dtype_convert.c — scalar conversions between f32 and the storage dtypes
 * (f16, bf16, fp8 e4m3/e5m2), bit-exact with PyTorch's: the compiler uses
 * them to cast and repack weights (driver/weight_store.c) and to build the
 * fp8 decode table of its CPU kernels (codegen/llvm/k_stored.c); the
 * runtime's reference kernels use them too.  Here, below both, so neither
 * side imports the other. */
#include "dtype_convert.h"

#include <math.h>
#include <string.h>

#include "support.h" /* dc_f32_bits */

float dc_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  if (exp == 0x1f) return dc_f32_from_bits(sign | 0x7f800000u | man << 13); /* inf, NaN payload kept */
  if (exp == 0) {
    float v = ldexpf((float)man, -24); /* zero and subnormals, exact */
    return sign ? -v : v;
  }
  return dc_f32_from_bits(sign | (exp + 112) << 23 | man << 13);
}

float dc_bf16_to_f32(uint16_t h) {
  return dc_f32_from_bits((uint32_t)h << 16);
}

/* e4m3fn (OCP "fn": finite, no inf): bias 7, the all-ones code is NaN. */
float dc_f8e4m3_to_f32(uint8_t v) {
  int exp = (v >> 3) & 0xf, man = v & 7;
  float mag;
  if ((v & 0x7f) == 0x7f) return NAN;
  mag = exp == 0 ? ldexpf((float)man, -9) : ldexpf((float)(8 + man), exp - 10);
  return (v & 0x80) ? -mag : mag;
}

/* e5m2 is exactly the top byte of an IEEE half (same exponent, 2 mantissa
 * bits), inf and NaN included. */
float dc_f8e5m2_to_f32(uint8_t v) {
  return dc_f16_to_f32((uint16_t)(v << 8));
}

uint16_t dc_f32_to_bf16(float f) {
  uint32_t x = dc_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* NaN stays NaN (quiet) */
  x += 0x7fffu + ((x >> 16) & 1);                                             /* nearest, ties to even */
  return (uint16_t)(x >> 16);
}

/* fp8 with `mbits` mantissa bits, exponent bias `bias`: |f| rounded to
 * nearest-even on the format's grid (subnormals included) as a code without
 * the sign; the caller handles overflow and NaN.  Exact: frexp and ldexp on
 * doubles, nearbyint in the default rounding mode (ties to even). */
static unsigned f8_round(double a, int mbits, int bias) {
  int min_exp = 1 - bias; /* the smallest normal is 2^min_exp */
  if (a < ldexp(1.0, min_exp)) return (unsigned)nearbyint(a / ldexp(1.0, min_exp - mbits)); /* subnormal (or the first normal) */
  int e2;
  double f = frexp(a, &e2); /* a = f * 2^e2, f in [0.5, 1) */
  int e = e2 - 1;
  double q = nearbyint((f * 2.0 - 1.0) * (double)(1 << mbits));
  if (q == (double)(1 << mbits)) q = 0, e++;
  return (unsigned)((e + bias) << mbits) | (unsigned)q;
}

/* PyTorch's float8_e4m3fn, as torch 2.15 converts on the CPU (checked
 * against it, tests/f8_cases.h): nearest-even, saturating — everything at
 * or beyond 448, infinities included, becomes ±448; NaN stays NaN 0x7f. */
uint8_t dc_f32_to_f8e4m3(float f) {
  uint8_t sign = (uint8_t)(dc_f32_bits(f) >> 24) & 0x80;
  double a = fabs((double)f);
  if (isnan(f)) return (uint8_t)(sign | 0x7f);
  if (a >= 448.0) return (uint8_t)(sign | 0x7e);
  unsigned c = f8_round(a, 3, 7);
  if (c > 0x7e) c = 0x7e; /* [464, 448 next) rounds up to the NaN code: saturate */
  return (uint8_t)(sign | c);
}

/* PyTorch's float8_e5m2: nearest-even, overflow to infinity, NaN 0x7f. */
uint8_t dc_f32_to_f8e5m2(float f) {
  uint8_t sign = (uint8_t)(dc_f32_bits(f) >> 24) & 0x80;
  double a = fabs((double)f);
  if (isnan(f)) return (uint8_t)(sign | 0x7f);
  if (a >= 61440.0) return (uint8_t)(sign | 0x7c); /* past the midpoint above 57344: inf */
  return (uint8_t)(sign | f8_round(a, 2, 15));
}

/* f32 below the f16 normal range: round |f| / 2^-24 to an integer, ties to even. */
static uint16_t f16_subnormal(uint32_t ax) {
  int e = (int)(ax >> 23);
  uint32_t man = (ax & 0x7fffffu) | 0x800000u, r, rem, half;
  int shift = 126 - e; /* value = man * 2^(e-150) = (man >> shift) units of 2^-24 */
  if (shift > 24) return 0; /* below half the smallest subnormal */
  r = man >> shift;
  rem = man & ((1u << shift) - 1);
  half = 1u << (shift - 1);
  if (rem > half || (rem == half && (r & 1))) r++;
  return (uint16_t)r; /* r == 0x400 is the smallest normal, correctly encoded */
}

uint16_t dc_f32_to_f16(float f) {
  uint32_t x = dc_f32_bits(f), ax = x & 0x7fffffffu;
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  if (ax > 0x7f800000u) return sign | 0x7e00 | ((ax >> 13) & 0x3ff); /* NaN: quiet, top payload kept */
  if (ax >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf; inf stays inf */
  if (ax < 0x38800000u) return sign | f16_subnormal(ax);
  ax += 0xfffu + ((ax >> 13) & 1); /* nearest, ties to even; a carry bumps the exponent */
  return sign | (uint16_t)((ax - 0x38000000u) >> 13);
}

