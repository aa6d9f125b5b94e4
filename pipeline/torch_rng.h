/* torch_rng.h — torch's CPU random numbers, bit for bit: a
 * torch.Generator().manual_seed(seed) (mt19937) and torch.randn(shape,
 * generator=g, dtype=float32) on a contiguous CPU tensor
 * (aten/src/ATen/native/cpu/DistributionTemplates.h: normal_fill for 16 or
 * more elements — uniforms in blocks of 16, Box–Muller pairing element j
 * with j+8, a ragged tail redoing the last 16 — and the scalar path below
 * 16).  Successive calls continue the same stream, as successive randn
 * calls on one generator do (the ancestral sampler's per-step noise). */
#ifndef DC_TORCH_RNG_H
#define DC_TORCH_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t mt[624];
  int index;
  /* whatever else torch's CPUGeneratorImpl keeps (its cached normal) */
  double next_double_normal;
  int has_next_double_normal;
  float next_float_normal;
  int has_next_float_normal;
} dc_torch_gen;

void dc_torch_manual_seed(dc_torch_gen *g, uint64_t seed);
/* torch.randn(n elements, generator=g) as float32. */
void dc_torch_randn(dc_torch_gen *g, float *out, size_t n);

#endif
