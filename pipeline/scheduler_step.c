/* scheduler_step.c — one denoising step of PNDM (PLMS and PRK), DDIM,
 * Euler, Euler ancestral and LMS, on float32 in the order of diffusers'
 * torch operations: scalars are 0-d float32 tensors (or Python floats
 * rounded to float32 when they meet a tensor), and every operation rounds.
 * LMS's coefficients integrate as scipy.integrate.quad does. */
#include "scheduler_internal.h"

#include <math.h>
#include <string.h>

dc_status *sched_buf(float **slot, size_t n) {
  if (*slot) return NULL;
  *slot = dc_calloc(n ? n : 1, sizeof(float));
  return *slot ? NULL : dc_nomem("a scheduler's step buffers");
}

dc_status *sched_hist_push(dc_scheduler *s, const float *v, size_t n, int keep) {
  float *buf;
  if (s->nhist == keep) { /* reuse the oldest */
    buf = s->hist[0];
    memmove(s->hist, s->hist + 1, sizeof(float *) * (size_t)(keep - 1));
    s->nhist--;
  } else {
    buf = dc_malloc(sizeof(float) * (n ? n : 1));
    if (!buf) return dc_nomem("a scheduler's history");
  }
  memcpy(buf, v, sizeof(float) * n);
  s->hist[s->nhist++] = buf;
  return NULL;
}

/* The newest history entry but `back` (0: newest). */
static const float *hist(const dc_scheduler *s, int back) { return s->hist[s->nhist - 1 - back]; }

/* ---- PNDM ----------------------------------------------------------------- */

/* alphas_cumprod[t], checked: diffusers indexes the tensor with it. */
static dc_status *alpha_at(const dc_scheduler *s, int64_t t, float *out) {
  if (t < 0 || t >= s->T)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: timestep %lld is outside the %lld training timesteps (check \"steps_offset\" %lld), which "
                    "diffusers indexes alphas_cumprod with (failing, or reading from the end); diffc refuses it",
                    s->path, (long long)t, (long long)s->T, (long long)s->c.steps_offset);
  *out = s->alphas_cumprod[t];
  return NULL;
}

/* PNDMScheduler._get_prev_sample (formula (9) of the PNDM paper):
 * x <- sqrt(a_prev / a_t) x - (a_prev - a_t) e / (a_t sqrt(b_prev) + sqrt(a_t b_t a_prev)). */
static dc_status *pndm_prev(dc_scheduler *s, const float *sample, int64_t t, int64_t prev, const float *e,
                            float *out, size_t n) {
  float a_t = 0, a_prev = s->final_alpha_cumprod;
  DC_TRY(alpha_at(s, t, &a_t));
  if (prev >= 0) DC_TRY(alpha_at(s, prev, &a_prev));
  float b_t = 1 - a_t, b_prev = 1 - a_prev;
  float sa = sqrtf(a_t), sb = sqrtf(b_t);
  float coeff = sqrtf(a_prev / a_t);
  float denom = a_t * sqrtf(b_prev) + sqrtf(a_t * b_t * a_prev);
  float diff = a_prev - a_t;
  for (size_t j = 0; j < n; j++) {
    float eps = e[j];
    if (s->c.prediction == PRED_V) eps = sa * e[j] + sb * sample[j];
    out[j] = coeff * sample[j] - diff * eps / denom;
  }
  return NULL;
}

/* step_plms: Adams–Bashforth on the model outputs, with PNDM's warm-up
 * (the second call re-does the first step with the average). */
static dc_status *pndm_plms(dc_scheduler *s, int64_t t, const float *mo, float *x, size_t n) {
  int64_t ratio = s->T / s->steps, prev = t - ratio;
  if (s->counter != 1) DC_TRY(sched_hist_push(s, mo, n, 4));
  else prev = t, t = t + ratio;
  float *e = s->scratch;
  const float *sample = x;
  if (s->nhist == 1 && s->counter == 0) {
    memcpy(e, mo, sizeof(float) * n);
    memcpy(s->cur_sample, x, sizeof(float) * n);
  } else if (s->nhist == 1 && s->counter == 1) {
    for (size_t j = 0; j < n; j++) e[j] = (mo[j] + hist(s, 0)[j]) / 2;
    sample = s->cur_sample;
  } else if (s->nhist == 2) {
    for (size_t j = 0; j < n; j++) e[j] = (3 * hist(s, 0)[j] - hist(s, 1)[j]) / 2;
  } else if (s->nhist == 3) {
    for (size_t j = 0; j < n; j++) e[j] = (23 * hist(s, 0)[j] - 16 * hist(s, 1)[j] + 5 * hist(s, 2)[j]) / 12;
  } else {
    const float k = (float)(1.0 / 24);
    for (size_t j = 0; j < n; j++)
      e[j] = k * (55 * hist(s, 0)[j] - 59 * hist(s, 1)[j] + 37 * hist(s, 2)[j] - 9 * hist(s, 3)[j]);
  }
  DC_TRY(pndm_prev(s, sample, t, prev, e, x, n));
  s->counter++;
  return NULL;
}

/* step_prk: the pseudo Runge–Kutta warm-up, four calls per step. */
static dc_status *pndm_prk(dc_scheduler *s, int64_t t, const float *mo, float *x, size_t n) {
  int64_t prev = t - (s->counter % 2 ? 0 : s->T / s->steps / 2);
  int64_t at = s->t_int[s->counter / 4 * 4];
  float *cur = s->cur_model_output, *e = s->scratch;
  const float sixth = (float)(1.0 / 6), third = (float)(1.0 / 3);
  int phase = s->counter % 4;
  memcpy(e, mo, sizeof(float) * n);
  if (phase == 0) {
    for (size_t j = 0; j < n; j++) cur[j] = cur[j] + sixth * mo[j];
    DC_TRY(sched_hist_push(s, mo, n, 4));
    memcpy(s->cur_sample, x, sizeof(float) * n);
  } else if (phase == 1 || phase == 2) {
    for (size_t j = 0; j < n; j++) cur[j] = cur[j] + third * mo[j];
  } else {
    for (size_t j = 0; j < n; j++) e[j] = cur[j] + sixth * mo[j];
    memset(cur, 0, sizeof(float) * n);
  }
  DC_TRY(pndm_prev(s, s->cur_sample, at, prev, e, x, n));
  s->counter++;
  return NULL;
}

dc_status *sched_step_pndm(dc_scheduler *s, int i, const float *mo, float *x, size_t n) {
  DC_TRY(sched_buf(&s->scratch, n));
  DC_TRY(sched_buf(&s->cur_sample, n));
  DC_TRY(sched_buf(&s->cur_model_output, n));
  int64_t t = s->t_int[i];
  if (!s->c.skip_prk_steps && s->counter < 12) return pndm_prk(s, t, mo, x, n);
  return pndm_plms(s, t, mo, x, n);
}

/* ---- DDIM (eta 0) ----------------------------------------------------------- */

dc_status *sched_step_ddim(dc_scheduler *s, int i, const float *mo, float *x, size_t n) {
  int64_t t = s->t_int[i], prev = t - s->T / s->steps;
  float a_t = 0, a_prev = s->final_alpha_cumprod;
  DC_TRY(alpha_at(s, t, &a_t));
  if (prev >= 0) DC_TRY(alpha_at(s, prev, &a_prev));
  float b_t = 1 - a_t, sa = sqrtf(a_t), sb = sqrtf(b_t);
  float b_prev = 1 - a_prev;
  /* std_dev_t = eta * variance ** 0.5 with eta 0: zero unless NaN */
  float variance = (b_prev / b_t) * (1 - a_t / a_prev);
  float std_dev = 0.0f * sqrtf(variance);
  float dir_coeff = sqrtf(1 - a_prev - std_dev * std_dev), prev_coeff = sqrtf(a_prev);
  float lo = -s->c.clip_sample_range, hi = s->c.clip_sample_range;
  for (size_t j = 0; j < n; j++) {
    float x0, eps;
    if (s->c.prediction == PRED_EPSILON) {
      x0 = (x[j] - sb * mo[j]) / sa;
      eps = mo[j];
    } else if (s->c.prediction == PRED_SAMPLE) {
      x0 = mo[j];
      eps = (x[j] - sa * x0) / sb;
    } else {
      x0 = sa * x[j] - sb * mo[j];
      eps = sa * mo[j] + sb * x[j];
    }
    if (s->c.clip_sample && !isnan(x0)) x0 = x0 < lo ? lo : x0 > hi ? hi : x0;
    x[j] = prev_coeff * x0 + dir_coeff * eps;
  }
  return NULL;
}

/* ---- Euler, Euler ancestral, LMS: x0 from sigma ---------------------------- */

/* pred_original_sample for the sigma schedulers; sigma is the step's
 * sigma (Euler's sigma_hat for epsilon, which equals it with s_churn 0). */
static float sigma_x0(sched_pred pred, float sigma, float c_out, float c_in, float sample, float mo) {
  if (pred == PRED_EPSILON) return sample - sigma * mo;
  if (pred == PRED_SAMPLE) return mo;
  return mo * c_out + sample / c_in;
}

/* v_prediction's coefficients: -sigma / (sigma**2 + 1) ** 0.5 and sigma**2 + 1. */
static void v_coeffs(float sigma, float *c_out, float *c_in) {
  *c_in = sigma * sigma + 1;
  *c_out = -sigma / sqrtf(*c_in);
}

dc_status *sched_step_euler(dc_scheduler *s, int i, const float *mo, float *x, size_t n) {
  int k = s->begin + i;
  float sigma = s->sigmas[k], sigma_hat = sigma * 1.0f; /* sigma * (gamma + 1), gamma 0 */
  float dt = s->sigmas[k + 1] - sigma_hat, c_out, c_in;
  v_coeffs(sigma, &c_out, &c_in);
  for (size_t j = 0; j < n; j++) {
    float x0 = sigma_x0(s->c.prediction, sigma_hat, c_out, c_in, x[j], mo[j]);
    float derivative = (x[j] - x0) / sigma_hat;
    x[j] = x[j] + derivative * dt;
  }
  return NULL;
}

dc_status *sched_step_euler_a(dc_scheduler *s, int i, const float *mo, float *x, size_t n, dc_torch_gen *gen) {
  if (!gen)
    return dc_error(DC_ERR_ARGUMENT, "%s: EulerAncestralDiscreteScheduler draws noise each step and needs a generator",
                    s->path);
  DC_TRY(sched_buf(&s->scratch, n));
  int k = s->begin + i;
  float sigma = s->sigmas[k], to = s->sigmas[k + 1], c_out, c_in;
  v_coeffs(sigma, &c_out, &c_in);
  float up = sqrtf(to * to * (sigma * sigma - to * to) / (sigma * sigma));
  float down = sqrtf(to * to - up * up);
  float dt = down - sigma;
  for (size_t j = 0; j < n; j++) {
    float x0 = sigma_x0(s->c.prediction, sigma, c_out, c_in, x[j], mo[j]);
    float derivative = (x[j] - x0) / sigma;
    x[j] = x[j] + derivative * dt;
  }
  dc_torch_randn(gen, s->scratch, n);
  for (size_t j = 0; j < n; j++) x[j] = x[j] + s->scratch[j] * up;
  return NULL;
}

/* ---- LMS ---------------------------------------------------------------- */

/* The Lagrange basis polynomial LMSDiscreteScheduler integrates, evaluated
 * as diffusers evaluates it: tau (a Python float) meets float32 tensors, so
 * each factor and product rounds to float32. */
typedef struct {
  const float *sig;
  int order, k, cur;
} lms_poly;

static double lms_eval(const lms_poly *p, double tau) {
  float prod = 1.0f, t = (float)tau;
  for (int j = 0; j < p->order; j++) {
    if (j == p->cur) continue;
    prod = prod * ((t - p->sig[p->k - j]) / (p->sig[p->k - p->cur] - p->sig[p->k - j]));
  }
  return prod;
}

/* QUADPACK dqk21's 21-point Gauss–Kronrod nodes and weights. */
static const double xgk[11] = {
    0.995657163025808080735527280689003, 0.973906528517171720077964012084452,
    0.930157491355708226001207180059508, 0.865063366688984510732096688423493,
    0.780817726586416897063717578345042, 0.679409568299024406234327365114874,
    0.562757134668604683339000099272694, 0.433395394129247190799265943165784,
    0.294392862701460198131126603103866, 0.148874338981631210884826001129720,
    0.000000000000000000000000000000000};
static const double wgk[11] = {
    0.011694638867371874278064396062192, 0.032558162307964727478818972459390,
    0.054755896574351996031381300244580, 0.075039674810919952767043140916190,
    0.093125454583697605535065465083366, 0.109387158802297641899210590325805,
    0.123491976262065851077600525452488, 0.134709217311473325928054001771707,
    0.142775938577060080797094273138717, 0.147739104901338491374841515972068,
    0.149445554002916905664936468389821};

/* scipy.integrate.quad(f, a, b, epsrel=1e-4) is QUADPACK's dqagse, which
 * returns its first 21-point Gauss–Kronrod estimate when that estimate's
 * error bound is within the tolerance.  The integrand is a polynomial of
 * degree < 4, which the rule integrates exactly, evaluated with float32
 * rounding: the bound (~1e-9 of the integrand's scale) passes unless the
 * integral cancels to ~1e-5 of that scale, where scipy would bisect further
 * to no better effect.  So this is the first estimate, summed in dqk21's
 * order (the Gauss nodes first, then the other Kronrod ones). */
static double lms_integrate(const lms_poly *p, double a, double b) {
  double centr = 0.5 * (a + b), hlgth = 0.5 * (b - a);
  double resk = wgk[10] * lms_eval(p, centr);
  for (int pass = 0; pass < 2; pass++)
    for (int jj = 0; jj < 5; jj++) {
      int j = pass == 0 ? 2 * jj + 1 : 2 * jj;
      double absc = hlgth * xgk[j];
      double fsum = lms_eval(p, centr - absc) + lms_eval(p, centr + absc);
      resk = resk + wgk[j] * fsum;
    }
  return resk * hlgth;
}

dc_status *sched_step_lms(dc_scheduler *s, int i, const float *mo, float *x, size_t n) {
  DC_TRY(sched_buf(&s->scratch, n));
  int k = s->begin + i;
  float sigma = s->sigmas[k], c_out, c_in;
  v_coeffs(sigma, &c_out, &c_in);
  float *d = s->scratch;
  for (size_t j = 0; j < n; j++) {
    float x0 = sigma_x0(s->c.prediction, sigma, c_out, c_in, x[j], mo[j]);
    d[j] = (x[j] - x0) / sigma;
  }
  DC_TRY(sched_hist_push(s, d, n, 4));
  int order = k + 1 < 4 ? k + 1 : 4, pairs = order < s->nhist ? order : s->nhist;
  float coeff[4];
  for (int c = 0; c < pairs; c++) {
    lms_poly p = {s->sigmas, order, k, c};
    coeff[c] = (float)lms_integrate(&p, s->sigmas[k], s->sigmas[k + 1]);
  }
  for (size_t j = 0; j < n; j++) {
    float acc = 0.0f; /* Python's sum starts from 0 */
    for (int c = 0; c < pairs; c++) acc = acc + coeff[c] * hist(s, c)[j];
    x[j] = x[j] + acc;
  }
  return NULL;
}
