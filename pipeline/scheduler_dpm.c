/* scheduler_dpm.c — DPMSolverMultistepScheduler's step for algorithm
 * "dpmsolver++": the data prediction x0 from the model output, kept for the
 * multistep history, then a first, second (midpoint or Heun) or third
 * order update, in diffusers' torch order of float32 operations. */
#include "scheduler_internal.h"

#include <math.h>

/* _sigma_to_alpha_sigma_t and lambda = log(alpha) - log(sigma). */
typedef struct {
  float alpha, sigma, lambda;
} dpm_point;

static dpm_point at_sigma(float sigma) {
  dpm_point p;
  p.alpha = 1 / sqrtf(sigma * sigma + 1); /* 1 / tensor: torch's reciprocal */
  p.sigma = sigma * p.alpha;
  p.lambda = dc_torch_logf(p.alpha) - dc_torch_logf(p.sigma);
  return p;
}

/* convert_model_output: x0 into out. */
static void data_prediction(const dc_scheduler *s, int k, const float *mo, const float *x, float *out, size_t n) {
  dpm_point p = at_sigma(s->sigmas[k]);
  for (size_t j = 0; j < n; j++) {
    if (s->c.prediction == PRED_EPSILON) out[j] = (x[j] - p.sigma * mo[j]) / p.alpha;
    else if (s->c.prediction == PRED_SAMPLE) out[j] = mo[j];
    else out[j] = p.alpha * x[j] - p.sigma * mo[j];
  }
}

static const float *hist_at(const dc_scheduler *s, int back) { return s->hist[s->nhist - 1 - back]; }

static void first_order(const dc_scheduler *s, int k, float *x, size_t n) {
  dpm_point t = at_sigma(s->sigmas[k + 1]), s0 = at_sigma(s->sigmas[k]);
  float h = t.lambda - s0.lambda;
  float c1 = t.sigma / s0.sigma, c2 = t.alpha * (dc_torch_expf(-h) - 1.0f);
  const float *m0 = hist_at(s, 0);
  for (size_t j = 0; j < n; j++) x[j] = c1 * x[j] - c2 * m0[j];
}

static void second_order(const dc_scheduler *s, int k, float *x, size_t n) {
  dpm_point t = at_sigma(s->sigmas[k + 1]), s0 = at_sigma(s->sigmas[k]), s1 = at_sigma(s->sigmas[k - 1]);
  float h = t.lambda - s0.lambda, h0 = s0.lambda - s1.lambda, r0 = h0 / h;
  float inv_r0 = 1.0f / r0, em1 = dc_torch_expf(-h) - 1.0f;
  float c1 = t.sigma / s0.sigma, c2 = t.alpha * em1;
  float c3 = s->c.heun ? t.alpha * (em1 / h + 1.0f) : 0.5f * c2;
  const float *m0 = hist_at(s, 0), *m1 = hist_at(s, 1);
  for (size_t j = 0; j < n; j++) {
    float d1 = inv_r0 * (m0[j] - m1[j]);
    float a = c1 * x[j] - c2 * m0[j];
    x[j] = s->c.heun ? a + c3 * d1 : a - c3 * d1;
  }
}

static void third_order(const dc_scheduler *s, int k, float *x, size_t n) {
  dpm_point t = at_sigma(s->sigmas[k + 1]), s0 = at_sigma(s->sigmas[k]);
  dpm_point s1 = at_sigma(s->sigmas[k - 1]), s2 = at_sigma(s->sigmas[k - 2]);
  float h = t.lambda - s0.lambda, h0 = s0.lambda - s1.lambda, h1 = s1.lambda - s2.lambda;
  float r0 = h0 / h, r1 = h1 / h;
  float inv_r0 = 1.0f / r0, inv_r1 = 1.0f / r1, k1 = r0 / (r0 + r1), k2 = 1.0f / (r0 + r1);
  float e = dc_torch_expf(-h), em1 = e - 1.0f;
  float c1 = t.sigma / s0.sigma, c2 = t.alpha * em1, c3 = t.alpha * (em1 / h + 1.0f);
  float c4 = t.alpha * ((e - 1.0f + h) / (h * h) - 0.5f);
  const float *m0 = hist_at(s, 0), *m1 = hist_at(s, 1), *m2 = hist_at(s, 2);
  for (size_t j = 0; j < n; j++) {
    float d1_0 = inv_r0 * (m0[j] - m1[j]), d1_1 = inv_r1 * (m1[j] - m2[j]);
    float d1 = d1_0 + k1 * (d1_0 - d1_1), d2 = k2 * (d1_0 - d1_1);
    x[j] = c1 * x[j] - c2 * m0[j] + c3 * d1 - c4 * d2;
  }
}

dc_status *sched_step_dpm(dc_scheduler *s, int i, const float *mo, float *x, size_t n) {
  DC_TRY(sched_buf(&s->scratch, n));
  int k = s->begin + i, last = k == s->n - 1, short_run = s->c.lower_order_final && s->n < 15;
  int lower_final = last && (s->c.euler_at_final || short_run || !s->c.final_sigma_min);
  int lower_second = k == s->n - 2 && short_run;
  data_prediction(s, k, mo, x, s->scratch, n);
  DC_TRY(sched_hist_push(s, s->scratch, n, s->c.solver_order));
  int order = s->c.solver_order;
  if (order == 1 || s->lower_order_nums < 1 || lower_final) first_order(s, k, x, n);
  else if (order == 2 || s->lower_order_nums < 2 || lower_second) second_order(s, k, x, n);
  else third_order(s, k, x, n);
  if (s->lower_order_nums < order) s->lower_order_nums++;
  return NULL;
}
