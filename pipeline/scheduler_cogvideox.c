/* scheduler_cogvideox.c — CogVideoXDDIMScheduler and CogVideoXDPMScheduler
 * (diffusers' scheduling_ddim_cogvideox.py, scheduling_dpm_cogvideox.py):
 * their training schedule and their steps.  Their timesteps are
 * DDIMScheduler's (scheduler_schedule.c), their init_noise_sigma 1 and
 * scale_model_input the identity.
 *
 * The schedule: betas, alphas_cumprod = cumprod(1 - betas), the SNR shift
 * alphas_cumprod / (s + (1 - s) alphas_cumprod) with s = snr_shift_scale,
 * and rescale_betas_zero_snr applied to alphas_cumprod itself (not to the
 * betas, as DDIMScheduler does).  Its dtype is the betas': float64 for
 * "scaled_linear" (diffusers builds that linspace in float64), float32 for
 * the others.  Each step indexes it with the timesteps, so the step's
 * scalars are 0-d tensors of that dtype, computed in it (a float32 1.0 for
 * the final alpha with set_alpha_to_one), promoted to float64 when they
 * meet a float64 one, and rounded to float32 when they meet the float32
 * sample: the cogx_scalar below follows torch's rules for that.  (The
 * float32 schedules with rescale_betas_zero_snr take a float32 sqrt, which
 * torch computes with MKL, not correctly rounded for about a fifth of
 * inputs on AVX-512; diffc rounds correctly, so an alpha may differ from
 * diffusers' by an ulp.  The released CogVideoX configs are float64.)
 *
 * Neither step clips or thresholds (clip_sample, clip_sample_range and
 * sample_max_value are read and unused, as in diffusers), and eta is not
 * used.  The DPM step is DPM-Solver++(2M) with noise: the first-order
 * update always draws torch.randn(sample.shape) from the generator; from
 * the second step on (but for the last, whose previous timestep is below
 * 0) it draws a second one and takes the second-order update with the
 * previous step's x0 prediction, which the scheduler keeps
 * (old_pred_original_sample), at the previous loop timestep (timestep_back). */
#include "scheduler_internal.h"

#include <math.h>
#include <string.h>

int sched_is_cogvideox(const dc_scheduler *s) { return s->kind == SK_COGX_DDIM || s->kind == SK_COGX_DPM; }

/* ---- 0-d tensors ------------------------------------------------------------ */

/* A 0-d float32 or float64 tensor: its value (a float32 value when !f64). */
typedef struct {
  double v;
  int f64;
} cogx_scalar;

/* Every result rounds to its dtype: +, -, *, /, sqrt computed in double and
 * rounded to float are the correctly rounded float32 results. */
static cogx_scalar sc(double v, int f64) {
  cogx_scalar r = {f64 ? v : (double)(float)v, f64};
  return r;
}
static cogx_scalar sc_sub(cogx_scalar a, cogx_scalar b) { return sc(a.v - b.v, a.f64 || b.f64); }
static cogx_scalar sc_mul(cogx_scalar a, cogx_scalar b) { return sc(a.v * b.v, a.f64 || b.f64); }
static cogx_scalar sc_div(cogx_scalar a, cogx_scalar b) { return sc(a.v / b.v, a.f64 || b.f64); }
/* A Python number p with a tensor: p takes the tensor's dtype (1, 2 and -2 are exact in both). */
static cogx_scalar sc_rsub(double p, cogx_scalar a) { return sc(p - a.v, a.f64); }
static cogx_scalar sc_add_py(double p, cogx_scalar a) { return sc(p + a.v, a.f64); }
static cogx_scalar sc_rdiv(double p, cogx_scalar a) { return sc(p / a.v, a.f64); }
static cogx_scalar sc_scale(double p, cogx_scalar a) { return sc(p * a.v, a.f64); }
/* ** 0.5 (torch's sqrt), log, exp, expm1 */
static cogx_scalar sc_sqrt(cogx_scalar a) { return sc(sqrt(a.v), a.f64); }
static cogx_scalar sc_log(cogx_scalar a) { return a.f64 ? sc(log(a.v), 1) : sc(dc_torch_logf((float)a.v), 0); }
static cogx_scalar sc_exp(cogx_scalar a) { return a.f64 ? sc(exp(a.v), 1) : sc(dc_torch_expf((float)a.v), 0); }
static cogx_scalar sc_expm1(cogx_scalar a) { return a.f64 ? sc(expm1(a.v), 1) : sc(expm1f((float)a.v), 0); }
/* The scalar as it multiplies a float32 tensor. */
static float sc_f(cogx_scalar a) { return (float)a.v; }

/* ---- the training schedule ------------------------------------------------- */

static void shift_and_rescale(const dc_scheduler *s, double *ac, int f64) {
  int64_t T = s->T;
  double k = 1 - s->c.snr_shift_scale; /* a Python float */
  for (int64_t i = 0; i < T; i++) {
    cogx_scalar a = sc(ac[i], f64);
    cogx_scalar d = sc_add_py(s->c.snr_shift_scale, sc_scale(k, a));
    ac[i] = sc_div(a, d).v;
  }
  if (!s->c.rescale_zero_snr) return;
  /* rescale_zero_terminal_snr(alphas_cumprod) */
  for (int64_t i = 0; i < T; i++) ac[i] = sc_sqrt(sc(ac[i], f64)).v;
  cogx_scalar s0 = sc(ac[0], f64), sT = sc(ac[T - 1], f64);
  cogx_scalar ratio = sc_div(s0, sc_sub(s0, sT));
  for (int64_t i = 0; i < T; i++) {
    cogx_scalar v = sc_mul(sc_sub(sc(ac[i], f64), sT), ratio);
    ac[i] = sc_mul(v, v).v;
  }
}

dc_status *sched_train_schedule_cogvideox(dc_scheduler *s) {
  int64_t T = s->T;
  int f64 = s->c.beta_schedule == BETAS_SCALED_LINEAR;
  s->cogx_alphas_cumprod = dc_malloc(sizeof(double) * (size_t)T);
  s->alphas_cumprod = dc_malloc(sizeof(float) * (size_t)T);
  if (!s->cogx_alphas_cumprod || !s->alphas_cumprod) return dc_nomem("a scheduler's training schedule");
  double *ac = s->cogx_alphas_cumprod;
  if (f64) {
    /* torch.linspace(beta_start ** 0.5, beta_end ** 0.5, T, dtype=float64) ** 2, 1 - betas, cumprod */
    dc_torch_linspace_f64(pow(s->c.beta_start, 0.5), pow(s->c.beta_end, 0.5), T, ac);
    double acc = 1.0;
    for (int64_t i = 0; i < T; i++) ac[i] = acc = acc * (1.0 - ac[i] * ac[i]);
  } else {
    float *alphas = s->alphas_cumprod;
    sched_make_betas_f32(s, alphas);
    for (int64_t i = 0; i < T; i++) alphas[i] = 1.0f - alphas[i];
    sched_cumprod_f32(alphas, alphas, T);
    for (int64_t i = 0; i < T; i++) ac[i] = alphas[i];
  }
  shift_and_rescale(s, ac, f64);
  for (int64_t i = 0; i < T; i++) s->alphas_cumprod[i] = (float)ac[i]; /* for the range check */
  s->cogx_f64 = f64;
  s->cogx_final = s->c.set_alpha_to_one ? 1.0 : ac[0];
  s->cogx_final_f64 = s->c.set_alpha_to_one ? 0 : f64; /* torch.tensor(1.0) is float32 */
  s->final_alpha_cumprod = (float)s->cogx_final;
  return NULL;
}

/* ---- the steps ------------------------------------------------------------- */

static cogx_scalar alpha_at(const dc_scheduler *s, int64_t t) { return sc(s->cogx_alphas_cumprod[t], s->cogx_f64); }

/* alphas_cumprod[prev_timestep] if prev_timestep >= 0 else final_alpha_cumprod */
static cogx_scalar alpha_prev(const dc_scheduler *s, int64_t prev) {
  return prev >= 0 ? alpha_at(s, prev) : sc(s->cogx_final, s->cogx_final_f64);
}

/* pred_original_sample from the model output at alpha_prod_t a_t, into x0. */
static void predict_x0(const dc_scheduler *s, cogx_scalar a_t, const float *mo, const float *x, float *x0, size_t n) {
  cogx_scalar b_t = sc_rsub(1, a_t);
  float sa = sc_f(sc_sqrt(a_t)), sb = sc_f(sc_sqrt(b_t));
  for (size_t j = 0; j < n; j++) {
    if (s->c.prediction == PRED_EPSILON) x0[j] = (x[j] - sb * mo[j]) / sa;
    else if (s->c.prediction == PRED_SAMPLE) x0[j] = mo[j];
    else x0[j] = sa * x[j] - sb * mo[j];
  }
}

dc_status *sched_step_cogx_ddim(dc_scheduler *s, int i, const float *mo, float *x, size_t n) {
  DC_TRY(sched_buf(&s->scratch, n));
  int64_t t = s->t_int[i], prev = t - s->T / s->steps;
  cogx_scalar a_t = alpha_at(s, t), a_prev = alpha_prev(s, prev);
  float *x0 = s->scratch;
  predict_x0(s, a_t, mo, x, x0, n);
  /* a_t = ((1 - a_prev) / (1 - a_t)) ** 0.5; b_t = a_prev ** 0.5 - a_t ** 0.5 * a_t */
  cogx_scalar ca = sc_sqrt(sc_div(sc_rsub(1, a_prev), sc_rsub(1, a_t)));
  cogx_scalar cb = sc_sub(sc_sqrt(a_prev), sc_mul(sc_sqrt(a_t), ca));
  float fa = sc_f(ca), fb = sc_f(cb);
  for (size_t j = 0; j < n; j++) x[j] = fa * x[j] + fb * x0[j];
  return NULL;
}

/* get_variables' lambda: log((alpha / (1 - alpha)) ** 0.5) */
static cogx_scalar lambda_of(cogx_scalar a) { return sc_log(sc_sqrt(sc_div(a, sc_rsub(1, a)))); }

dc_status *sched_step_cogx_dpm(dc_scheduler *s, int i, const float *mo, float *x, size_t n, dc_torch_gen *gen) {
  if (!gen)
    return dc_error(DC_ERR_ARGUMENT, "%s: CogVideoXDPMScheduler draws noise each step and needs a generator", s->path);
  DC_TRY(sched_buf(&s->scratch, n));
  DC_TRY(sched_buf(&s->cur_model_output, n));
  DC_TRY(sched_buf(&s->cur_sample, n));
  int64_t t = s->t_int[i], prev = t - s->T / s->steps;
  cogx_scalar a_t = alpha_at(s, t), a_prev = alpha_prev(s, prev);
  float *x0 = s->cur_model_output, *noise = s->scratch, *d = s->cur_sample;
  predict_x0(s, a_t, mo, x, x0, n);
  /* get_variables and get_mult */
  cogx_scalar lamb = lambda_of(a_t), h = sc_sub(lambda_of(a_prev), lamb);
  cogx_scalar m1 = sc_mul(sc_sqrt(sc_div(sc_rsub(1, a_prev), sc_rsub(1, a_t))), sc_exp(sc_scale(-1, h)));
  cogx_scalar m2 = sc_mul(sc_expm1(sc_scale(-2, h)), sc_sqrt(a_prev));
  cogx_scalar mn = sc_mul(sc_sqrt(sc_rsub(1, a_prev)), sc_sqrt(sc_rsub(1, sc_exp(sc_scale(-2, h)))));
  float f1 = sc_f(m1), f2 = sc_f(m2), fn = sc_f(mn);
  dc_torch_randn(gen, noise, n);
  int second = i > 0 && prev >= 0; /* old_pred_original_sample is None only at the first step */
  if (!second) {
    for (size_t j = 0; j < n; j++) x[j] = (f1 * x[j] - f2 * x0[j]) + fn * noise[j];
  } else {
    /* r = h_last / h with the previous loop timestep; mult3 = 1 + 1 / (2r), mult4 = 1 / (2r) */
    cogx_scalar r = sc_div(sc_sub(lamb, lambda_of(alpha_at(s, s->t_int[i - 1]))), h);
    cogx_scalar m4 = sc_rdiv(1, sc_scale(2, r)), m3 = sc_add_py(1, m4);
    float f3 = sc_f(m3), f4 = sc_f(m4);
    const float *old = s->hist[0];
    for (size_t j = 0; j < n; j++) d[j] = f3 * x0[j] - f4 * old[j];
    dc_torch_randn(gen, noise, n);
    for (size_t j = 0; j < n; j++) x[j] = (f1 * x[j] - f2 * d[j]) + fn * noise[j];
  }
  return sched_hist_push(s, x0, n, 1);
}

/* ---- CogVideoXPipeline's use_dynamic_cfg ------------------------------------ */

double dc_cogvideox_dynamic_guidance(double guidance_scale, int steps, int64_t timestep) {
  /* (steps - t) / steps is Python's true division of two ints, exact
   * operands here; ** 5.0 is C's pow (Python's float ** calls it, on the
   * magnitude, negating for a negative base and an odd power, which pow does
   * alike) */
  double frac = (double)((int64_t)steps - timestep) / (double)steps;
  return 1 + guidance_scale * ((1 - cos(M_PI * pow(frac, 5.0))) / 2);
}
