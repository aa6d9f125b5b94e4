/* test_dtype_convert.c — the scalar dtype conversions
 * (support/dtype_convert.c) exhaustively against PyTorch's rules (every f16,
 * bf16 and fp8 code decoded; rounding to nearest even at every edge;
 * saturation and NaN), and the reference CAST kernel between every pair of
 * dtypes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref_check.h"

/* ---- dtype conversions and CAST --------------------------------------- */

/* sign · 2^(e - bias) · (1 + m / 2^mbits), or subnormal, by the textbook
 * formula (inf/NaN handled by the caller). */
static double fp_value(uint32_t v, int ebits, int mbits) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t e = (v >> mbits) & ((1u << ebits) - 1), man = v & ((1u << mbits) - 1);
  double mag = e == 0 ? ldexp((double)man, 1 - bias - mbits) : ldexp(1 + ldexp(man, -mbits), (int)e - bias);
  return (v >> (ebits + mbits)) & 1 ? -mag : mag;
}

static int same_float(float a, double b) { /* equal, with -0 != +0 */
  return a == b && !signbit(a) == !signbit(b);
}

static void test_f16(void) {
  int bad = 0, bad_rt = 0, bad_hw = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = dc_f16_to_f32((uint16_t)h);
    int e = (h >> 10) & 0x1f;
    if (e == 31) bad += (h & 0x3ff) ? !isnan(f) : !(isinf(f) && !!signbit(f) == (int)(h >> 15));
    else bad += !same_float(f, fp_value(h, 5, 10));
    uint16_t back = dc_f32_to_f16(f);
    /* NaN stays NaN and becomes quiet; everything else round-trips */
    bad_rt += isnan(f) ? (back != (h | 0x200)) : back != h;
  }
  CHECK(bad == 0 && bad_rt == 0);
  printf("  f16: all 65536 codes decode by formula (subnormals, inf, NaN) and round-trip\n");
#ifdef __FLT16_MAX__
  /* f32 -> f16 rounding against the compiler's _Float16 conversion (RNE) */
  int64_t tried = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 4093, tried++) {
    float f = dc_f32_from_bits((uint32_t)u);
    _Float16 hw = (_Float16)f;
    uint16_t hb;
    memcpy(&hb, &hw, 2);
    if (isnan(f)) bad_hw += !(((dc_f32_to_f16(f) & 0x7c00) == 0x7c00) && (dc_f32_to_f16(f) & 0x3ff));
    else bad_hw += dc_f32_to_f16(f) != hb;
  }
  CHECK(bad_hw == 0);
  printf("  f32 -> f16: %lld f32 bit patterns round like _Float16 (%d differ)\n", (long long)tried, bad_hw);
#endif
  /* ties: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 -> even (1) */
  CHECK(dc_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);
  CHECK(dc_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
  CHECK(dc_f32_to_f16(65504.0f) == 0x7bff && dc_f32_to_f16(65520.0f) == 0x7c00);
  CHECK(dc_f32_to_f16(65519.99f) == 0x7bff);
  CHECK(dc_f32_to_f16(0x1p-24f) == 0x0001 && dc_f32_to_f16(0x1p-25f) == 0 &&
        dc_f32_to_f16(0x1.8p-25f) == 0x0001 && dc_f32_to_f16(-0x1p-26f) == 0x8000);
  printf("  f32 -> f16: ties to even, 65504 max, 65520 -> inf, subnormal edges\n");
}

/* Nearest bf16 by comparing the two candidates' distances in double; past
 * the largest finite value the next candidate is inf, which IEEE rounding
 * treats as 2^128. */
static uint16_t bf16_nearest(float f) {
  uint32_t u = dc_f32_bits(f);
  uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
  double vlo = dc_bf16_to_f32(lo), vhi, dlo, dhi;
  if ((u & 0xffff) == 0) return lo;
  vhi = (hi & 0x7fff) == 0x7f80 ? copysign(ldexp(1.0, 128), f) : dc_bf16_to_f32(hi);
  dlo = fabs((double)f - vlo);
  dhi = fabs((double)f - vhi);
  if (dlo != dhi) return dlo < dhi ? lo : hi;
  return (lo & 1) ? hi : lo;
}

static void test_bf16(void) {
  int bad = 0, bad_rt = 0, bad_rne = 0;
  int64_t tried = 0;
  for (uint32_t h = 0; h < 65536; h++) {
    float f = dc_bf16_to_f32((uint16_t)h);
    int e = (h >> 7) & 0xff;
    if (e == 255) bad += (h & 0x7f) ? !isnan(f) : !(isinf(f) && !!signbit(f) == (int)(h >> 15));
    else bad += !same_float(f, fp_value(h, 8, 7));
    uint16_t back = dc_f32_to_bf16(f);
    bad_rt += isnan(f) ? (back != (h | 0x40)) : back != h;
  }
  CHECK(bad == 0 && bad_rt == 0);
  printf("  bf16: all 65536 codes decode by formula and round-trip (NaN stays NaN, quiet)\n");
  for (uint64_t u = 0; u < (1ull << 32); u += 4093, tried++) {
    float f = dc_f32_from_bits((uint32_t)u);
    if (isnan(f)) bad_rne += !isnan(dc_bf16_to_f32(dc_f32_to_bf16(f)));
    else bad_rne += dc_f32_to_bf16(f) != bf16_nearest(f);
  }
  CHECK(bad_rne == 0);
  CHECK(dc_f32_to_bf16(dc_f32_from_bits(0x3f808000)) == 0x3f80 && dc_f32_to_bf16(dc_f32_from_bits(0x3f818000)) == 0x3f82);
  CHECK(dc_f32_to_bf16(dc_f32_from_bits(0x7f7fffff)) == 0x7f80);
  CHECK(isnan(dc_bf16_to_f32(dc_f32_to_bf16(dc_f32_from_bits(0x7f800001))))); /* low-payload NaN not inf */
  printf("  f32 -> bf16: %lld bit patterns nearest-even vs a distance check; ties; overflow; NaN\n",
         (long long)tried);
}

static void test_f8(void) {
  int bad4 = 0, bad5 = 0;
  for (uint32_t v = 0; v < 256; v++) {
    float f4 = dc_f8e4m3_to_f32((uint8_t)v), f5 = dc_f8e5m2_to_f32((uint8_t)v);
    bad4 += (v & 0x7f) == 0x7f ? !isnan(f4) : !same_float(f4, fp_value(v, 4, 3));
    if (((v >> 2) & 0x1f) == 31) bad5 += (v & 3) ? !isnan(f5) : !(isinf(f5) && !!signbit(f5) == (int)(v >> 7));
    else bad5 += !same_float(f5, fp_value(v, 5, 2));
  }
  CHECK(bad4 == 0 && bad5 == 0);
  CHECK(dc_f8e4m3_to_f32(0x7e) == 448 && dc_f8e4m3_to_f32(0xfe) == -448);
  CHECK(dc_f8e4m3_to_f32(0x01) == 0x1p-9f && dc_f8e4m3_to_f32(0x07) == 7 * 0x1p-9f);
  CHECK(dc_f8e4m3_to_f32(0x08) == 0x1p-6f && dc_f8e4m3_to_f32(0x78) == 256);
  CHECK(isnan(dc_f8e4m3_to_f32(0x7f)) && isnan(dc_f8e4m3_to_f32(0xff)));
  CHECK(dc_f8e5m2_to_f32(0x7b) == 57344 && dc_f8e5m2_to_f32(0x01) == 0x1p-16f);
  CHECK(isinf(dc_f8e5m2_to_f32(0x7c)) && isnan(dc_f8e5m2_to_f32(0x7d)) && dc_f8e5m2_to_f32(0xfc) < 0);
  printf("  f8: all 256 e4m3fn and e5m2 codes by formula; e4m3 max 448, NaN 0x7f/0xff, "
         "subnormal 2^-9; e5m2 max 57344, inf 0x7c\n");
}

static void cast_case(const char *what, dc_dtype from, dc_dtype to, const void *x, const void *want,
                      int64_t count) {
  dc_module *m = dc_module_create();
  int32_t ins[1] = {add_in(m, from, DIMS(count))};
  dc_node nd = dc_node_make(OP_CAST, 1, ins);
  const void *in[1] = {x};
  nd.type = (dc_type){to, 1, {count}};
  void *y = run_node(m, nd, in);
  CHECK(y && memcmp(y, want, (size_t)count * dc_dtype_size(to)) == 0);
  printf("  cast %s\n", what);
  free(y);
  dc_module_destroy(m);
}

static void test_cast(void) {
  printf("dtype conversions, cast:\n");
  test_f16();
  test_bf16();
  test_f8();
  {
    uint16_t h[4] = {0x3c00, 0xc000, 0x0001, 0x7c00};
    float hf[4] = {1, -2, 0x1p-24f, INFINITY};
    uint16_t bf[3] = {0x3f80, 0xc040, 0x0001};
    float bff[3] = {1, -3, 0x1p-133f};
    uint8_t e4[4] = {0x7e, 0x01, 0x38, 0xb8}, e5[3] = {0x7b, 0x3c, 0x01};
    float e4f[4] = {448, 0x1p-9f, 1, -1}, e5f[3] = {57344, 1, 0x1p-16f};
    float f[3] = {1, 1 + 0x1p-8f, -65504};
    uint16_t fbf[3] = {0x3f80, 0x3f80, 0xc780}, fh[3] = {0x3c00, 0x3c04, 0xfbff};
    cast_case("f16 -> f32", DT_F16, DT_F32, h, hf, 4);
    cast_case("bf16 -> f32", DT_BF16, DT_F32, bf, bff, 3);
    cast_case("f8e4m3 -> f32", DT_F8_E4M3, DT_F32, e4, e4f, 4);
    cast_case("f8e5m2 -> f32", DT_F8_E5M2, DT_F32, e5, e5f, 3);
    cast_case("f32 -> bf16 (1 + 2^-8 ties to even 1; -65504 rounds to -65536)", DT_F32, DT_BF16, f, fbf, 3);
    cast_case("f32 -> f16", DT_F32, DT_F16, f, fh, 3);
    cast_case("f32 -> f32 (copy)", DT_F32, DT_F32, f, f, 3);
  }
  {
    /* more elements than one conversion chunk */
    int64_t count = 1000;
    uint16_t *h = malloc((size_t)count * 2);
    float *want = malloc((size_t)count * 4);
    for (int64_t i = 0; i < count; i++) {
      h[i] = (uint16_t)(i * 61);
      want[i] = dc_f16_to_f32(h[i]);
    }
    cast_case("f16 -> f32, 1000 elements (several chunks)", DT_F16, DT_F32, h, want, count);
    free(h), free(want);
  }
  {
    dc_module *m = dc_module_create();
    float x[1] = {1};
    int32_t ins[1] = {IN32(m, 1)};
    dc_node nd = dc_node_make(OP_CAST, 1, ins);
    const void *in[1] = {x};
    uint8_t out[4];
    nd.type = (dc_type){DT_F8_E4M3, 1, {1}};
    CHECK_ERR(dc_ref_kernel_for(OP_CAST)(m, &nd, in, out), "casts to f32, f16 or bf16");
    dc_module_destroy(m);
  }
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_cast();
  return tu_finish();
}
