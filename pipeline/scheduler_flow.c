/* scheduler_flow.c — FlowMatchEulerDiscreteScheduler (diffusers 0.42): the
 * sigmas of set_timesteps and the Euler step of a flow-matching model.
 *
 * A flow model predicts the velocity v = noise - x0 at time sigma in
 * [0, 1]; sampling integrates x from sigma 1 (noise) to 0 (the image):
 * x <- x + (sigma_next - sigma) v.  The schedule is where the work is:
 *
 *   1. the unshifted sigmas: linspace(sigma_max, sigma_min, steps) of the
 *      training schedule (numpy float64), or the caller's sigmas (FluxPipeline
 *      passes linspace(1, 1/steps, steps)), which diffusers first makes a
 *      numpy float32 array;
 *   2. the shift: with use_dynamic_shifting the resolution-dependent
 *      e^mu / (e^mu + (1/sigma - 1)) (time_shift_type "linear":
 *      mu / (mu + (1/sigma - 1))), else shift*sigma / (1 + (shift-1)*sigma);
 *   3. shift_terminal stretches the schedule to end there;
 *   4. Karras or exponential spacing between the ends, as Euler's;
 *   5. float32 sigmas, timesteps = sigmas * num_train_timesteps in float32,
 *      a final sigma 0 (1 with invert_sigmas, which first flips them).
 *
 * numpy keeps an array's type through operations with Python scalars,
 * rounding the scalar to it (NEP 50), so steps 2 and 3 are float32 or
 * float64 arithmetic as the array is; the np_sigmas type carries which. */
#include "scheduler_internal.h"

#include <math.h>
#include <string.h>

/* The sigmas of steps 1-4: a numpy float64 or float32 array. */
typedef struct {
  int single; /* float32 (custom sigmas) rather than float64 */
  int n;
  double *d;
  float *f;
} np_sigmas;

/* __init__'s training sigmas at timestep t (t = T .. 1, float32 torch):
 * t / T, shifted by `shift` unless the shift is dynamic.  Python scalars
 * meet float32 tensors as float32. */
static float train_sigma(const dc_scheduler *s, int64_t t) {
  float sigma = (float)t / (float)s->T;
  if (s->c.dynamic_shifting) return sigma;
  float shift = (float)s->c.shift, shift_m1 = (float)(s->c.shift - 1);
  return shift * sigma / (1.0f + shift_m1 * sigma);
}

/* Step 1 without custom sigmas: np.linspace of sigma_max * T .. sigma_min * T
 * (Python floats), divided by T. */
static void default_sigmas(const dc_scheduler *s, np_sigmas *a) {
  double T = (double)s->T;
  double t_max = (double)train_sigma(s, s->T) * T, t_min = (double)train_sigma(s, 1) * T;
  sched_np_linspace(t_max, t_min, a->n, a->d);
  for (int i = 0; i < a->n; i++) a->d[i] = a->d[i] / T;
}

/* Step 2, dynamic: time_shift(mu, 1.0, sigmas); the power 1.0 is exact. */
static void time_shift(const sched_cfg *c, double mu, np_sigmas *a) {
  double k = c->linear_time_shift ? mu : exp(mu);
  float kf = (float)k;
  for (int i = 0; i < a->n; i++) {
    if (a->single) a->f[i] = kf / (kf + (1.0f / a->f[i] - 1.0f));
    else a->d[i] = k / (k + (1.0 / a->d[i] - 1.0));
  }
}

/* Step 2, fixed: shift * sigmas / (1 + (shift - 1) * sigmas). */
static void fixed_shift(const sched_cfg *c, np_sigmas *a) {
  double k = c->shift, k1 = c->shift - 1;
  float kf = (float)k, k1f = (float)k1;
  for (int i = 0; i < a->n; i++) {
    if (a->single) a->f[i] = kf * a->f[i] / (1.0f + k1f * a->f[i]);
    else a->d[i] = k * a->d[i] / (1.0 + k1 * a->d[i]);
  }
}

/* Step 3: stretch_shift_to_terminal: 1 - (1 - sigma) / scale with scale
 * = (1 - sigmas[-1]) / (1 - shift_terminal). */
static void stretch_to_terminal(const sched_cfg *c, np_sigmas *a) {
  int last = a->n - 1;
  if (a->single) {
    float scale = (1.0f - a->f[last]) / (float)(1 - c->shift_terminal);
    for (int i = 0; i < a->n; i++) a->f[i] = 1.0f - (1.0f - a->f[i]) / scale;
  } else {
    double scale = (1.0 - a->d[last]) / (1 - c->shift_terminal);
    for (int i = 0; i < a->n; i++) a->d[i] = 1.0 - (1.0 - a->d[i]) / scale;
  }
}

/* Step 4: the Karras or exponential sigmas between the ends (float64). */
static void convert(const dc_scheduler *s, np_sigmas *a, double *out) {
  if (a->single)
    for (int i = 0; i < a->n; i++) a->d[i] = a->f[i];
  sched_convert_sigmas(s, a->d, a->n, a->n, out);
  memcpy(a->d, out, sizeof(double) * (size_t)a->n);
  a->single = 0;
}

/* Step 5 into s->sigmas and s->t_unet. */
static void to_tensors(dc_scheduler *s, const np_sigmas *a) {
  float T = (float)s->T;
  for (int i = 0; i < a->n; i++) {
    float sigma = a->single ? a->f[i] : (float)a->d[i];
    if (s->c.invert_sigmas) sigma = 1.0f - sigma;
    s->sigmas[i] = sigma;
    s->t_unet[i] = sigma * T;
  }
  s->sigmas[a->n] = s->c.invert_sigmas ? 1.0f : 0.0f;
}

static dc_status *refuse_not_finite(const dc_scheduler *s, int steps, const char *what, int i, double v) {
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: %d steps give %s %d = %g, where diffusers computes NaNs or infinities (check mu, \"shift\", "
                  "\"shift_terminal\" and any sigmas given); diffc refuses it",
                  s->path, steps, what, i, isnan(v) ? fabs(v) : v); /* "nan", whatever its sign bit */
}

/* Finite values; a first step index of 0 (diffusers: the position of
 * timesteps[0], the second one where it repeats, which runs off the end
 * of the sigmas; FluxPipeline sets it to 0 instead: the two disagree). */
static dc_status *check_schedule(const dc_scheduler *s, int steps) {
  for (int i = 0; i < s->nsigmas; i++)
    if (!isfinite(s->sigmas[i])) return refuse_not_finite(s, steps, "sigma", i, s->sigmas[i]);
  for (int i = 0; i < s->n; i++)
    if (!isfinite(s->t_unet[i])) return refuse_not_finite(s, steps, "timestep", i, s->t_unet[i]);
  if (sched_begin_index(s) != 0)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: %d steps give a first timestep (%g) that repeats, where diffusers' schedulers start at the "
                    "repeat (and run past the end of the sigmas) unless the pipeline sets the start; diffc refuses "
                    "it (use other sigmas or step count)",
                    s->path, steps, (double)s->t_unet[0]);
  return NULL;
}

static dc_status *compute(dc_scheduler *s, int steps, const double *custom, double mu, np_sigmas *a, double *tmp) {
  const sched_cfg *c = &s->c;
  if (custom) {
    a->single = 1;
    for (int i = 0; i < steps; i++) a->f[i] = (float)custom[i]; /* np.array(sigmas).astype(np.float32) */
  } else {
    default_sigmas(s, a);
  }
  if (c->dynamic_shifting) time_shift(c, mu, a);
  else fixed_shift(c, a);
  if (c->has_shift_terminal) stretch_to_terminal(c, a);
  if (c->sigmas != SIGMAS_PLAIN) convert(s, a, tmp);
  s->n = steps;
  s->nsigmas = steps + 1;
  s->t_unet = dc_calloc((size_t)steps, sizeof(float));
  s->sigmas = dc_calloc((size_t)steps + 1, sizeof(float));
  if (!s->t_unet || !s->sigmas) return dc_nomem("a scheduler's timesteps");
  to_tensors(s, a);
  return check_schedule(s, steps);
}

dc_status *sched_set_timesteps_flow(dc_scheduler *s, int steps, const double *custom, int has_mu, double mu) {
  if (s->c.dynamic_shifting && !has_mu)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s: FlowMatchEulerDiscreteScheduler with \"use_dynamic_shifting\": true needs mu (the shift "
                    "for the image's size, which the pipeline computes) to set its timesteps, as diffusers does",
                    s->path);
  np_sigmas a = {.n = steps};
  a.d = dc_malloc(sizeof(double) * (size_t)steps);
  a.f = dc_malloc(sizeof(float) * (size_t)steps);
  double *tmp = dc_malloc(sizeof(double) * (size_t)steps);
  dc_status *st = a.d && a.f && tmp ? compute(s, steps, custom, mu, &a, tmp) : dc_nomem("a scheduler's timesteps");
  dc_free(a.d);
  dc_free(a.f);
  dc_free(tmp);
  s->steps = steps;
  s->begin = 0;
  s->init_noise_sigma = 1.0f;
  return st;
}

/* x <- x + (sigma_next - sigma) * v, or with stochastic_sampling the
 * prediction x0 = x - sigma * v re-noised to sigma_next with fresh noise:
 * (1 - sigma_next) * x0 + sigma_next * noise.  float32, torch's order. */
dc_status *sched_step_flow(dc_scheduler *s, int i, const float *mo, float *x, size_t n, dc_torch_gen *gen) {
  int k = s->begin + i;
  float sigma = s->sigmas[k], next = s->sigmas[k + 1];
  if (!s->c.stochastic) {
    float dt = next - sigma;
    for (size_t j = 0; j < n; j++) x[j] = x[j] + dt * mo[j];
    return NULL;
  }
  if (!gen)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s: FlowMatchEulerDiscreteScheduler with \"stochastic_sampling\" draws noise each step and needs "
                    "a generator",
                    s->path);
  DC_TRY(sched_buf(&s->scratch, n));
  dc_torch_randn(gen, s->scratch, n);
  float keep = 1.0f - next;
  for (size_t j = 0; j < n; j++) {
    float x0 = x[j] - sigma * mo[j];
    x[j] = keep * x0 + next * s->scratch[j];
  }
  return NULL;
}
