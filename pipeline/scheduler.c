/* scheduler.c — the public scheduler functions (scheduler.h): parse, the
 * timesteps (flow matching's with sigmas and mu), scale_model_input and
 * step, with the loop state diffusers keeps in the scheduler object (its
 * step index, PNDM's counter and ets, DPM-Solver's model outputs, LMS's
 * derivatives). */
#include <math.h>
#include <string.h>

#include "scheduler_internal.h"

static void free_loop_state(dc_scheduler *s) {
  for (int i = 0; i < s->nhist; i++) dc_free(s->hist[i]);
  s->nhist = 0;
  dc_free(s->cur_sample);
  dc_free(s->cur_model_output);
  dc_free(s->scratch);
  s->cur_sample = s->cur_model_output = s->scratch = NULL;
  s->counter = s->lower_order_nums = s->next = 0;
  s->n_elems = 0;
}

void dc_scheduler_free(dc_scheduler *s) {
  if (!s) return;
  free_loop_state(s);
  dc_free(s->t_int);
  dc_free(s->t_unet);
  dc_free(s->sigmas);
  dc_free(s->alphas_cumprod);
  dc_free(s->cogx_alphas_cumprod);
  dc_free(s->c.trained_betas);
  dc_free(s->path);
  dc_free(s);
}

/* Betas outside [0, 1] make alphas_cumprod negative or above one, which
 * diffusers turns into NaN sigmas without a word. */
static dc_status *check_alphas(const dc_scheduler *s) {
  for (int64_t i = 0; i < s->T; i++) {
    float a = s->alphas_cumprod[i];
    if (!(a >= 0 && a <= 1))
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: the betas (beta_start %g, beta_end %g%s) give alphas_cumprod[%lld] = %g, outside [0, 1], "
                      "where diffusers computes NaNs; diffc refuses them",
                      s->path, s->c.beta_start, s->c.beta_end,
                      s->c.beta_schedule == BETAS_TRAINED ? ", trained_betas" : "", (long long)i, (double)a);
  }
  return NULL;
}

dc_status *dc_scheduler_parse(const dc_text_files *files, const char *class_override, dc_scheduler **out) {
  *out = NULL;
  dc_scheduler *s = dc_calloc(1, sizeof *s);
  if (!s) return dc_nomem("a scheduler");
  dc_status *st = sched_read_config(files, class_override, s);
  s->T = s->c.num_train_timesteps;
  /* a flow-matching scheduler has no betas */
  if (!st && s->kind != SK_FLOW) {
    st = sched_train_schedule(s);
    if (!st) st = check_alphas(s);
  }
  if (st) {
    dc_scheduler_free(s);
    return st;
  }
  *out = s;
  return NULL;
}

const char *dc_scheduler_class(const dc_scheduler *s) { return s->class_name; }

/* PNDM, DDIM and CogVideoX's index alphas_cumprod with their timesteps. */
static dc_status *check_timesteps(const dc_scheduler *s) {
  if (s->kind != SK_PNDM && s->kind != SK_DDIM && !sched_is_cogvideox(s)) return NULL;
  for (int i = 0; i < s->n; i++)
    if (s->t_int[i] < 0 || s->t_int[i] >= s->T)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: timestep %lld (with \"steps_offset\" %lld) is outside the %lld training timesteps, which "
                      "diffusers indexes alphas_cumprod with (failing, or reading from the end); diffc refuses it",
                      s->path, (long long)s->t_int[i], (long long)s->c.steps_offset, (long long)s->T);
  return NULL;
}

static void free_schedule(dc_scheduler *s) {
  dc_free(s->t_int);
  dc_free(s->t_unet);
  dc_free(s->sigmas);
  s->t_int = NULL, s->t_unet = NULL, s->sigmas = NULL;
  s->n = s->nsigmas = 0;
}

/* A flow-matching scheduler's step count: its timesteps are fractions of
 * num_train_timesteps, so more steps than that are fine; diffc's limit
 * keeps the arrays small. */
enum { FLOW_MAX_STEPS = 1000000 };

static dc_status *set_flow(dc_scheduler *s, int steps, const double *sigmas, int has_mu, double mu) {
  if (steps < 1) return dc_error(DC_ERR_ARGUMENT, "%s: %d inference steps: need at least 1", s->path, steps);
  if (steps > FLOW_MAX_STEPS)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: %d inference steps: diffc supports at most %d", s->path, steps,
                    FLOW_MAX_STEPS);
  free_loop_state(s);
  free_schedule(s);
  dc_status *st = sched_set_timesteps_flow(s, steps, sigmas, has_mu, mu);
  if (st) free_schedule(s);
  return st;
}

dc_status *dc_scheduler_set_timesteps(dc_scheduler *s, int steps) {
  if (s->kind == SK_FLOW) return set_flow(s, steps, NULL, 0, 0);
  if (steps < 1) return dc_error(DC_ERR_ARGUMENT, "%s: %d inference steps: need at least 1", s->path, steps);
  if (steps > s->T)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: %d inference steps are more than num_train_timesteps (%lld); diffc supports at most that "
                    "many (diffusers' DDIMScheduler refuses more, and the other schedulers repeat timesteps)",
                    s->path, steps, (long long)s->T);
  free_loop_state(s);
  DC_TRY(sched_set_timesteps(s, steps));
  dc_status *st = check_timesteps(s);
  if (st) free_schedule(s);
  return st;
}

/* ---- flow matching ---------------------------------------------------------- */

int dc_scheduler_is_flow(const dc_scheduler *s) { return s->kind == SK_FLOW; }

int dc_scheduler_flow_needs_mu(const dc_scheduler *s) { return s->kind == SK_FLOW && s->c.dynamic_shifting; }

int dc_scheduler_flow_own_sigmas(const dc_scheduler *s) { return s->kind == SK_FLOW && s->c.use_flow_sigmas; }

static dc_status *not_flow(const dc_scheduler *s, const char *what) {
  return dc_error(DC_ERR_ARGUMENT, "%s: %s: %s is not a flow-matching scheduler", s->path, what, s->class_name);
}

dc_status *dc_scheduler_set_timesteps_flow(dc_scheduler *s, int steps, const double *sigmas, int has_mu, double mu) {
  if (s->kind != SK_FLOW) return not_flow(s, "set_timesteps with sigmas and mu");
  return set_flow(s, steps, sigmas, has_mu, mu);
}

/* calculate_shift of the Flux and SD3 pipelines, in Python floats: the line
 * from (base_image_seq_len, base_shift) to (max_image_seq_len, max_shift)
 * at image_seq_len. */
dc_status *dc_flow_calculate_shift(const dc_scheduler *s, int64_t image_seq_len, double *mu) {
  if (s->kind != SK_FLOW) return not_flow(s, "calculate_shift");
  const sched_cfg *c = &s->c;
  if (c->max_seq_len == c->base_seq_len)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: \"base_image_seq_len\" and \"max_image_seq_len\" are both %lld, and the shift for an image "
                    "size divides by their difference (diffusers fails with ZeroDivisionError)",
                    s->path, (long long)c->base_seq_len);
  double m = (c->max_shift - c->base_shift) / (double)(c->max_seq_len - c->base_seq_len);
  double b = c->base_shift - m * (double)c->base_seq_len;
  *mu = (double)image_seq_len * m + b;
  return NULL;
}

void dc_flow_linspace_sigmas(int steps, double *out) {
  if (steps >= 1) sched_np_linspace(1.0, 1.0 / steps, steps, out);
}

float dc_scheduler_sigma(const dc_scheduler *s, int i) {
  if (!s->sigmas || i < 0 || s->begin + i >= s->nsigmas) return 0.0f;
  return s->sigmas[s->begin + i];
}

int dc_scheduler_loop_length(const dc_scheduler *s) { return s->n; }

float dc_scheduler_timestep(const dc_scheduler *s, int i) { return i >= 0 && i < s->n ? s->t_unet[i] : 0.0f; }

float dc_scheduler_init_noise_sigma(const dc_scheduler *s) { return s->init_noise_sigma; }

/* x / (sigma**2 + 1) ** 0.5 for the sigma schedulers; the others return
 * the sample unchanged.  An i outside the loop leaves x alone. */
void dc_scheduler_scale_model_input(const dc_scheduler *s, int i, float *x, size_t n) {
  if (i < 0 || i >= s->n) return;
  if (s->kind != SK_EULER && s->kind != SK_EULER_A && s->kind != SK_LMS) return;
  float sigma = s->sigmas[s->begin + i];
  float d = sqrtf(sigma * sigma + 1);
  for (size_t j = 0; j < n; j++) x[j] = x[j] / d;
}

/* The loop must go 0, 1, 2, ...: the schedulers keep state from step to
 * step, as diffusers' do. */
static dc_status *check_step(dc_scheduler *s, int i, size_t n) {
  if (s->n == 0) return dc_error(DC_ERR_ARGUMENT, "%s: step before set_timesteps", s->path);
  if (i != s->next || i >= s->n)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s: step %d called where step %d of %d comes next (steps run in order; set_timesteps restarts)",
                    s->path, i, s->next, s->n);
  if (s->n_elems && n != s->n_elems)
    return dc_error(DC_ERR_ARGUMENT, "%s: step %d on %zu values after steps on %zu", s->path, i, n, s->n_elems);
  s->n_elems = n;
  return NULL;
}

dc_status *dc_scheduler_step(dc_scheduler *s, int i, const float *model_output, float *sample, size_t n,
                             dc_torch_gen *gen) {
  DC_TRY(check_step(s, i, n));
  dc_status *st = NULL;
  switch (s->kind) {
    case SK_PNDM: st = sched_step_pndm(s, i, model_output, sample, n); break;
    case SK_DDIM: st = sched_step_ddim(s, i, model_output, sample, n); break;
    case SK_EULER: st = sched_step_euler(s, i, model_output, sample, n); break;
    case SK_EULER_A: st = sched_step_euler_a(s, i, model_output, sample, n, gen); break;
    case SK_DPM: st = sched_step_dpm(s, i, model_output, sample, n); break;
    case SK_LMS: st = sched_step_lms(s, i, model_output, sample, n); break;
    case SK_FLOW: st = sched_step_flow(s, i, model_output, sample, n, gen); break;
    case SK_COGX_DDIM: st = sched_step_cogx_ddim(s, i, model_output, sample, n); break;
    case SK_COGX_DPM: st = sched_step_cogx_dpm(s, i, model_output, sample, n, gen); break;
  }
  if (!st) s->next++;
  return st;
}
