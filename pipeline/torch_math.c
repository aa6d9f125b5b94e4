/* torch_math.c — torch's and numpy's float32 log/exp and torch.linspace
 * (torch_math.h says why each exists).  fmaf() stands wherever the original
 * uses a fused multiply-add. */
#include "torch_math.h"

#include <math.h>

/* torch.log and torch.exp of float32 CPU tensors go through MKL's VML
 * (vsLn, vsExp in high-accuracy mode) in torch's x86-64 builds, 0-d
 * tensors included.  VML is not available here and its results are within
 * half an ulp but for rare cases (measured against torch 2.15: exp differs
 * from the correctly rounded result for about 1% of inputs, log for about
 * 0.005%), so diffc rounds correctly: the float64 result of glibc rounded
 * to float32, which is the correctly rounded float32 result but for
 * double-rounding cases of probability ~2^-29. */
float dc_torch_logf(float x) { return (float)log((double)x); }
float dc_torch_expf(float x) { return (float)exp((double)x); }

/* numpy's SIMD float32 log: mantissa in [sqrt(1/2), sqrt(2)), a rational
 * P5/Q5 approximation of log(1 + x), then exponent * ln 2 added with FMA. */
float dc_numpy_logf(float x) {
  if (isnan(x)) return x;
  if (x < 0) return -NAN;
  if (x == 0) return -INFINITY;
  if (isinf(x)) return INFINITY;
  static const float p[6] = {0.000000000000000000000e+00f, 9.999999999999998702752e-01f,
                             2.112677543073053063722e+00f, 1.480000633576506585156e+00f,
                             3.808837741388407920751e-01f, 2.589979117907922693523e-02f};
  static const float q[6] = {1.000000000000000000000e+00f, 2.612677543073109236779e+00f,
                             2.453006071784736363091e+00f, 9.864942958519418960339e-01f,
                             1.546476374983906719538e-01f, 5.875095403124574342950e-03f};
  int ex;
  float m = frexpf(x, &ex); /* [0.5, 1) */
  float e = (float)ex;
  if (m <= 0.707106781186547524400844362104849039f) {
    m = m + m;
    e = e - 1.0f;
  }
  float y = m - 1.0f;
  float num = fmaf(p[5], y, p[4]), den = fmaf(q[5], y, q[4]);
  for (int i = 3; i >= 0; i--) {
    num = fmaf(num, y, p[i]);
    den = fmaf(den, y, q[i]);
  }
  return fmaf(e, 0.693147180559945309417232121458176568f, num / den);
}

/* aten's linspace kernel: the first half counts up from start, the second
 * down from end, each element one fused multiply-add. */
void dc_torch_linspace_f32(double start, double end, int64_t steps, float *out) {
  float a = (float)start, b = (float)end;
  if (steps == 1) {
    out[0] = a;
    return;
  }
  float step = (b - a) / (float)(steps - 1);
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; i++)
    out[i] = i < half ? fmaf(step, (float)i, a) : fmaf(-step, (float)(steps - i - 1), b);
}

/* The same kernel on float64. */
void dc_torch_linspace_f64(double start, double end, int64_t steps, double *out) {
  if (steps == 1) {
    out[0] = start;
    return;
  }
  double step = (end - start) / (double)(steps - 1);
  int64_t half = steps / 2;
  for (int64_t i = 0; i < steps; i++)
    out[i] = i < half ? fma(step, (double)i, start) : fma(-step, (double)(steps - i - 1), end);
}
