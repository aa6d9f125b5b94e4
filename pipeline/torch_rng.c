/* torch_rng.c — torch's CPU generator and randn, bit for bit (torch_rng.h).
 *
 * The generator is mt19937 seeded with the low 32 bits of the seed
 * (at::mt19937's init_with_uint32).  randn of n float32 elements:
 *
 *   n >= 16 (normal_fill_AVX2, which torch uses on every x86-64 CPU with
 *   AVX2, AVX-512 ones included, because normal_stub is not dispatched to
 *   AVX-512): n uniforms (random() & 0xffffff) / 2^24, then Box–Muller on
 *   each block of 16, element j paired with j+8, with the Cephes-derived
 *   log256_ps and sincos256_ps of avx_mathfun.h; a ragged tail draws 16
 *   fresh uniforms for the last 16 elements and transforms them again.
 *
 *   n < 16: each element from at::normal_distribution<double>, which draws
 *   two 53-bit uniforms (two 32-bit outputs each), returns r·cos θ and keeps
 *   r·sin θ for the next call (also across randn calls).
 *
 * torch compiles these with GCC's default contraction, so some multiply-add
 * pairs of avx_mathfun.h are fused; fmaf() marks exactly those (found by
 * reading GCC's FMA formation — a product whose only use is an addition —
 * and checked bit for bit against torch in tests/test_torch_rng.c). */
#include "torch_rng.h"

#include <math.h>
#include <string.h>

#include "torch_math.h"

/* ---- mt19937 ---------------------------------------------------------- */

enum { MT_N = 624, MT_M = 397 };

void dc_torch_manual_seed(dc_torch_gen *g, uint64_t seed) {
  memset(g, 0, sizeof *g);
  g->mt[0] = (uint32_t)seed;
  for (int j = 1; j < MT_N; j++) g->mt[j] = 1812433253u * (g->mt[j - 1] ^ (g->mt[j - 1] >> 30)) + (uint32_t)j;
  g->index = MT_N;
}

static void mt_twist(dc_torch_gen *g) {
  for (int i = 0; i < MT_N; i++) {
    uint32_t y = (g->mt[i] & 0x80000000u) | (g->mt[(i + 1) % MT_N] & 0x7fffffffu);
    g->mt[i] = g->mt[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
  }
  g->index = 0;
}

static uint32_t mt_next(dc_torch_gen *g) {
  if (g->index >= MT_N) mt_twist(g);
  uint32_t y = g->mt[g->index++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

/* at::uniform_real_distribution<float>(0, 1): 24 random bits. */
static float uniform_f32(dc_torch_gen *g) { return (float)(mt_next(g) & 0xffffffu) * (1.0f / 16777216.0f); }

/* at::uniform_real_distribution<double>(0, 1): random64() is the first
 * output in the high word, the second in the low; 53 bits kept. */
static double uniform_f64(dc_torch_gen *g) {
  uint64_t hi = mt_next(g), lo = mt_next(g);
  return (double)(((hi << 32) | lo) & ((UINT64_C(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}

/* at::normal_distribution<double>(0, 1) with the generator's cache. */
static double normal_f64(dc_torch_gen *g) {
  if (g->has_next_double_normal) {
    g->has_next_double_normal = 0;
    return g->next_double_normal;
  }
  double u1 = uniform_f64(g), u2 = uniform_f64(g);
  double r = sqrt(-2.0 * log1p(-u2));
  double theta = 2.0 * M_PI * u1;
  g->next_double_normal = r * sin(theta);
  g->has_next_double_normal = 1;
  return r * cos(theta);
}

/* ---- avx_mathfun.h, one lane ------------------------------------------ */

/* log256_ps for x in (0, 1] (1 - a uniform in [0, 1)). */
static float mathfun_log(float x) {
  uint32_t bits;
  memcpy(&bits, &x, 4);
  float e = (float)((int32_t)(bits >> 23) - 0x7f) + 1.0f;
  bits = (bits & ~0x7f800000u) | 0x3f000000u; /* mantissa in [0.5, 1) */
  memcpy(&x, &bits, 4);
  float tmp = 0.0f;
  if (x < 0.707106781186547524f) {
    tmp = x;
    e = e - 1.0f;
  }
  x = x - 1.0f;
  x = x + tmp;
  float z = x * x;
  static const float p[9] = {7.0376836292E-2f,  -1.1514610310E-1f, 1.1676998740E-1f,
                             -1.2420140846E-1f, 1.4249322787E-1f,  -1.6668057665E-1f,
                             2.0000714765E-1f,  -2.4999993993E-1f, 3.3333331174E-1f};
  float y = p[0];
  for (int i = 1; i < 9; i++) y = fmaf(y, x, p[i]);
  y = y * x;
  y = fmaf(y, z, e * -2.12194440e-4f);
  y = fmaf(-z, 0.5f, y);
  return fmaf(e, 0.693359375f, x + y);
}

/* sincos256_ps for x >= 0. */
static void mathfun_sincos(float x, float *s, float *c) {
  int j = (int)(x * 1.27323954473516f); /* 4/pi, truncated */
  j = (j + 1) & ~1;
  float y = (float)j;
  int sin_negate = (j & 4) != 0;
  int poly_sin = (j & 2) == 0; /* sine from the sine polynomial */
  int cos_negate = ((~(j - 2)) & 4) != 0;
  x = fmaf(y, -0.78515625f, x);
  x = fmaf(y, -2.4187564849853515625e-4f, x);
  x = fmaf(y, -3.77489497744594108e-8f, x);
  float z = x * x;
  float yc = fmaf(2.443315711809948E-005f, z, -1.388731625493765E-003f);
  yc = fmaf(yc, z, 4.166664568298827E-002f);
  yc = yc * z;
  yc = fmaf(yc, z, -(z * 0.5f));
  yc = yc + 1.0f;
  float ys = fmaf(-1.9515295891E-4f, z, 8.3321608736E-3f);
  ys = fmaf(ys, z, -1.6666654611E-1f);
  ys = ys * z;
  ys = fmaf(ys, x, x);
  /* the original's masked selection, additions included (they decide the
   * sign of a zero) */
  float ysin2 = poly_sin ? ys : 0.0f, ysin1 = poly_sin ? 0.0f : yc;
  float sv = ysin1 + ysin2, cv = (yc - ysin1) + (ys - ysin2);
  *s = sin_negate ? -sv : sv;
  *c = cos_negate ? -cv : cv;
}

/* normal_fill_16_AVX2 on d[0..16) (uniforms in, normals out). */
static void normal_fill_16(float *d) {
  const float two_pi = (float)(2.0 * M_PI);
  for (int j = 0; j < 8; j++) {
    float u1 = 1.0f - d[j], u2 = d[j + 8];
    float radius = sqrtf(-2.0f * mathfun_log(u1));
    float s, c;
    mathfun_sincos(two_pi * u2, &s, &c);
    d[j] = radius * c;
    d[j + 8] = radius * s;
  }
}

void dc_torch_randn(dc_torch_gen *g, float *out, size_t n) {
  if (n < 16) {
    for (size_t i = 0; i < n; i++) out[i] = (float)normal_f64(g);
    return;
  }
  for (size_t i = 0; i < n; i++) out[i] = uniform_f32(g);
  for (size_t i = 0; i + 16 <= n; i += 16) normal_fill_16(out + i);
  if (n % 16) {
    float *tail = out + n - 16;
    for (int i = 0; i < 16; i++) tail[i] = uniform_f32(g);
    normal_fill_16(tail);
  }
}
