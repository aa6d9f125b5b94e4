/* fuzz_scheduler.c — the scheduler reader and the schedulers: all but the
 * last two bytes are scheduler_config.json; the second-to-last byte picks
 * a class override (0: the config's _class_name, 1..6 and 8..10: the
 * classes diffc implements, 7: a name it does not), the last byte's low six bits
 * the step count (1..64) and its top two how a flow-matching scheduler's
 * timesteps are set (bit 6: as a pipeline does, with calculate_shift's mu
 * for an image size from the config bytes' length; bit 7: with FluxPipeline's
 * sigmas too; neither: plain set_timesteps).
 * Then dc_scheduler_parse, set_timesteps, and the whole loop
 * (scale_model_input + step) on a 21-value sample with a generator, then
 * set_timesteps again and two steps (the restart path).  Errors are
 * expected; crashes, leaks and undefined behaviour are the findings. */
#include <string.h>

#include "fuzz_common.h"
#include "pipeline/scheduler.h"

static const char *const overrides[] = {
    NULL,
    "PNDMScheduler",
    "EulerDiscreteScheduler",
    "EulerAncestralDiscreteScheduler",
    "DDIMScheduler",
    "DPMSolverMultistepScheduler",
    "LMSDiscreteScheduler",
    "KDPM2DiscreteScheduler",
    "FlowMatchEulerDiscreteScheduler",
    "CogVideoXDDIMScheduler",
    "CogVideoXDPMScheduler",
};

enum { N = 21 }; /* a ragged randn tail, and the < 16 path never */

static void run_steps(dc_scheduler *s, int upto, dc_torch_gen *g) {
  float x[N], mo[N];
  dc_torch_randn(g, x, N);
  for (int i = 0; i < dc_scheduler_loop_length(s) && i < upto; i++) {
    (void)dc_scheduler_timestep(s, i);
    dc_scheduler_scale_model_input(s, i, x, N);
    for (int j = 0; j < N; j++) mo[j] = 0.1f * x[j] + (float)((i + j) % 5) * 0.2f - 0.4f;
    dc_status *st = dc_scheduler_step(s, i, mo, x, N, g);
    if (st) {
      fuzz_drop(st);
      return;
    }
  }
}

static dc_status *set_timesteps(dc_scheduler *s, int steps, int mode, size_t size) {
  if (!dc_scheduler_is_flow(s) || !(mode & 1)) return dc_scheduler_set_timesteps(s, steps);
  double mu = 0, sigmas[64];
  dc_status *st = dc_flow_calculate_shift(s, (int64_t)size * 4, &mu);
  if (st) return st;
  dc_flow_linspace_sigmas(steps, sigmas);
  return dc_scheduler_set_timesteps_flow(s, steps, (mode & 2) ? sigmas : NULL, 1, mu);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  int steps = data[size - 1] % 64 + 1, mode = data[size - 1] >> 6;
  const char *override = overrides[data[size - 2] % (sizeof overrides / sizeof overrides[0])];
  dc_text_files fs = {0};
  fs.origin = dc_strdup("fuzz/scheduler");
  if (!fs.origin) return 0;
  dc_status *st = dc_text_files_add(&fs, "scheduler_config.json", data, size - 2);
  dc_scheduler *s = NULL;
  if (!st) st = dc_scheduler_parse(&fs, override, &s);
  if (!st) {
    (void)dc_scheduler_class(s);
    st = set_timesteps(s, steps, mode, size);
    if (!st) {
      dc_torch_gen g;
      dc_torch_manual_seed(&g, size);
      (void)dc_scheduler_init_noise_sigma(s);
      run_steps(s, 1 << 30, &g);
      (void)dc_scheduler_sigma(s, 0);
      st = set_timesteps(s, steps, mode, size);
      if (!st) run_steps(s, 2, &g);
    }
  }
  fuzz_drop(st);
  dc_scheduler_free(s);
  dc_text_files_free(&fs);
  return 0;
}
