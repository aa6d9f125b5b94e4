/* torch_math.h — the few floating-point routines where torch and numpy do
 * not compute what a C library computes, written out so that diffc's
 * schedulers and random numbers round exactly as diffusers' do:
 *
 *   - torch's float32 log and exp (MKL's VML in torch's builds; diffc
 *     rounds correctly, which VML does but for about 1% of exp and 0.005%
 *     of log inputs), used by DPM-Solver's lambda = log(alpha) - log(sigma)
 *     and exp(-h);
 *   - numpy's float32 log (the AVX2/AVX512F kernel of
 *     loops_exponent_log.dispatch.c.src, on every x86-64 machine with FMA),
 *     used by the schedulers' log_sigmas, which decide Karras timesteps;
 *   - torch.linspace in float32 and float64 (its CPU kernel computes
 *     start + step * i with a fused multiply-add), which makes the betas.
 *
 * Everything else the schedulers need is plain IEEE arithmetic (float32
 * for torch tensors, float64 for numpy and Python floats) or glibc's libm,
 * which Python's math module and torch's scalar paths call too.
 *
 * Every file including this one is compiled without floating-point
 * contraction: torch rounds after each tensor operation, so a*b+c must stay
 * two roundings unless written as fmaf(). */
#ifndef DC_TORCH_MATH_H
#define DC_TORCH_MATH_H

#include <stdint.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* torch.log / torch.exp of a float32 tensor element. */
float dc_torch_logf(float x);
float dc_torch_expf(float x);
/* np.log of a float32 array element. */
float dc_numpy_logf(float x);
/* torch.linspace(start, end, steps, dtype=torch.float32) into out[steps];
 * start and end are Python floats (cast to float32 as torch does). */
void dc_torch_linspace_f32(double start, double end, int64_t steps, float *out);
/* The same with dtype=torch.float64 (CogVideoX's scaled_linear betas). */
void dc_torch_linspace_f64(double start, double end, int64_t steps, double *out);

#endif
