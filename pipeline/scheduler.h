/* scheduler.h — diffusers' noise schedulers, read from a pipeline's
 * scheduler/scheduler_config.json and computed as diffusers computes them:
 * timesteps and sigmas in float64 where diffusers uses numpy, then cast to
 * float32 where it does; each step on float32 tensors in the order of
 * torch's operations, so a run matches diffusers' latents to ~1e-6.
 *
 * Classes: PNDMScheduler (skip_prk_steps), EulerDiscreteScheduler,
 * EulerAncestralDiscreteScheduler, DDIMScheduler,
 * DPMSolverMultistepScheduler (dpmsolver++, order 2, midpoint; Karras
 * sigmas; lower_order_final; final_sigmas_type), LMSDiscreteScheduler,
 * FlowMatchEulerDiscreteScheduler (shift, dynamic shifting, shift_terminal,
 * Karras/exponential sigmas, invert_sigmas, stochastic sampling),
 * CogVideoXDDIMScheduler and CogVideoXDPMScheduler (snr_shift_scale; the
 * DPM step keeps the previous step's x0 prediction itself and draws its
 * noise from the generator passed to step).
 * A config is not switched between flow-matching and noise-prediction
 * classes: the models' outputs mean different things.
 * Every config key diffusers reads is read; a value diffc does not
 * implement is refused naming the key, the value and what is supported;
 * an unknown key is refused naming the nearest known one. */
#ifndef DC_SCHEDULER_H
#define DC_SCHEDULER_H

#include "text_files.h"
#include "torch_rng.h"

typedef struct dc_scheduler dc_scheduler;

/* The classes diffc implements, ", "-separated (for --help and messages). */
const char *dc_scheduler_class_names(void);

/* Parses scheduler_config.json (file "scheduler_config.json" of files).
 * class_override (diffrun --scheduler NAME; NULL = the config's
 * _class_name) builds another class from the same config, as diffusers'
 * SomeScheduler.from_config(pipe.scheduler.config) does: keys the other
 * class does not take are ignored then, as from_config ignores them. */
dc_status *dc_scheduler_parse(const dc_text_files *files, const char *class_override, dc_scheduler **out);
void dc_scheduler_free(dc_scheduler *s);
const char *dc_scheduler_class(const dc_scheduler *s);

/* set_timesteps(steps); steps < 1 is an error. Resets the multistep
 * history, so one scheduler serves several images.  A flow-matching
 * scheduler that shifts by the image size (dc_scheduler_flow_needs_mu)
 * refuses it: use dc_scheduler_set_timesteps_flow with mu. */
dc_status *dc_scheduler_set_timesteps(dc_scheduler *s, int steps);

/* ---- flow matching (FlowMatchEulerDiscreteScheduler), as FluxPipeline and
 * StableDiffusion3Pipeline drive it ----
 * set_timesteps(steps, sigmas=..., mu=...): sigmas NULL or `steps` values
 * (FluxPipeline: dc_flow_linspace_sigmas, unless dc_scheduler_flow_own_sigmas);
 * mu used when has_mu and the config has use_dynamic_shifting (required
 * then).  dc_scheduler_timestep(i) is then scheduler.timesteps[i] (sigma *
 * num_train_timesteps in float32: SD3's transformer takes it, Flux's
 * pipeline divides it by 1000 in float32); init_noise_sigma is 1 and
 * scale_model_input leaves x alone. */
int dc_scheduler_is_flow(const dc_scheduler *s);
int dc_scheduler_flow_needs_mu(const dc_scheduler *s);
/* The config's hidden "use_flow_sigmas" is true: FluxPipeline passes no sigmas. */
int dc_scheduler_flow_own_sigmas(const dc_scheduler *s);
dc_status *dc_scheduler_set_timesteps_flow(dc_scheduler *s, int steps, const double *sigmas, int has_mu, double mu);
/* The pipelines' calculate_shift(image_seq_len, ...) with the config's
 * base_image_seq_len, max_image_seq_len, base_shift, max_shift. */
dc_status *dc_flow_calculate_shift(const dc_scheduler *s, int64_t image_seq_len, double *mu);
/* np.linspace(1.0, 1 / steps, steps): FluxPipeline's sigmas (steps >= 1). */
void dc_flow_linspace_sigmas(int steps, double *out);
/* scheduler.sigmas at loop index i (i = loop length: the final sigma) for
 * the classes with sigmas; 0 for the others or an i outside. */
float dc_scheduler_sigma(const dc_scheduler *s, int i);
/* The denoising loop's timesteps (len(scheduler.timesteps): PNDM has
 * steps + 1), each as the UNet receives it (float32 of diffusers' value). */
int dc_scheduler_loop_length(const dc_scheduler *s);
float dc_scheduler_timestep(const dc_scheduler *s, int i);
/* init_noise_sigma, after set_timesteps. */
float dc_scheduler_init_noise_sigma(const dc_scheduler *s);
/* scale_model_input(x, t_i) in place on n floats. */
void dc_scheduler_scale_model_input(const dc_scheduler *s, int i, float *x, size_t n);
/* step(model_output, t_i, sample): sample updated in place (n floats;
 * model_output is the guided prediction).  gen: the pipeline's generator,
 * which ancestral/stochastic schedulers draw their noise from
 * (torch.randn of sample's shape); others ignore it. */
dc_status *dc_scheduler_step(dc_scheduler *s, int i, const float *model_output, float *sample, size_t n,
                             dc_torch_gen *gen);

/* CogVideoXPipeline's use_dynamic_cfg: the guidance scale at the step whose
 * timestep (scheduler.timesteps[i], an integer) is `timestep`, in Python
 * floats as the pipeline computes it:
 *   1 + guidance_scale * (1 - cos(pi * ((steps - timestep) / steps) ** 5)) / 2
 * (steps = num_inference_steps >= 1).  The pipeline multiplies the CFG
 * difference by it (as a float32 scalar) in place of guidance_scale; CFG
 * itself still runs only when guidance_scale > 1. */
double dc_cogvideox_dynamic_guidance(double guidance_scale, int steps, int64_t timestep);

#endif
