/* scheduler_schedule.c — the training schedule (betas -> alphas_cumprod, in
 * float32 as diffusers' torch tensors) and set_timesteps (timesteps and
 * sigmas, in float64 as diffusers' numpy arrays, cast where diffusers
 * casts), for every class.  numpy's linspace, arange, interp and round are
 * reproduced operation for operation; see scheduler_internal.h. */
#include "scheduler_internal.h"

#include <math.h>
#include <string.h>

/* ---- numpy -------------------------------------------------------------- */

/* np.linspace(start, stop, n) in float64: i * step + start, the last
 * element set to stop. */
void sched_np_linspace(double start, double stop, int64_t n, double *out) {
  if (n == 1) {
    out[0] = start;
    return;
  }
  double step = (stop - start) / (double)(n - 1);
  for (int64_t i = 0; i < n; i++) out[i] = (double)i * step + start;
  out[n - 1] = stop;
}

/* The length of np.arange(start, stop, step) for a float step. */
static int64_t np_arange_len(double start, double stop, double step) {
  double len = ceil((stop - start) / step);
  return len > 0 ? (int64_t)len : 0;
}

/* np.arange(start, stop, step) with a float step: the second element is
 * start + step, the rest start + i * ((start + step) - start). */
static void np_arange(double start, double step, int64_t n, double *out) {
  double delta = (start + step) - start;
  for (int64_t i = 0; i < n; i++) out[i] = i == 0 ? start : i == 1 ? start + step : start + (double)i * delta;
}

/* np.interp(x, arange(T), fp) for one x. */
static double np_interp_arange(double x, const float *fp, int64_t T) {
  if (isnan(x)) return x;
  if (x < 0) return fp[0];
  if (x >= (double)(T - 1)) return fp[T - 1];
  int64_t j = (int64_t)x; /* xp[j] <= x < xp[j + 1] */
  if ((double)j == x) return fp[j];
  double slope = ((double)fp[j + 1] - (double)fp[j]) / 1.0;
  double r = slope * (x - (double)j) + (double)fp[j];
  if (isnan(r)) {
    r = slope * (x - (double)(j + 1)) + (double)fp[j + 1];
    if (isnan(r) && fp[j] == fp[j + 1]) r = fp[j];
  }
  return r;
}

/* ---- the training schedule (float32) ------------------------------------ */

/* torch.cumprod of float32: accumulated in double, each prefix rounded. */
void sched_cumprod_f32(const float *a, float *out, int64_t n) {
  double acc = 1.0;
  for (int64_t i = 0; i < n; i++) {
    acc *= (double)a[i];
    out[i] = (float)acc;
  }
}

/* betas_for_alpha_bar(T) ("squaredcos_cap_v2"), in Python floats. */
static void betas_cosine(float *betas, int64_t T) {
  for (int64_t i = 0; i < T; i++) {
    double t1 = (double)i / (double)T, t2 = (double)(i + 1) / (double)T;
    double a1 = pow(cos((t1 + 0.008) / 1.008 * M_PI / 2), 2.0);
    double a2 = pow(cos((t2 + 0.008) / 1.008 * M_PI / 2), 2.0);
    double b = 1 - a2 / a1;
    betas[i] = (float)(0.999 < b ? 0.999 : b);
  }
}

/* rescale_zero_terminal_snr(betas), in place. */
static void rescale_zero_snr(float *betas, float *tmp, int64_t T) {
  for (int64_t i = 0; i < T; i++) betas[i] = 1.0f - betas[i];
  sched_cumprod_f32(betas, tmp, T);
  for (int64_t i = 0; i < T; i++) tmp[i] = sqrtf(tmp[i]);
  float s0 = tmp[0], sT = tmp[T - 1];
  for (int64_t i = 0; i < T; i++) tmp[i] = tmp[i] - sT;
  float k = s0 / (s0 - sT);
  for (int64_t i = 0; i < T; i++) {
    tmp[i] = tmp[i] * k;
    tmp[i] = tmp[i] * tmp[i];
  }
  for (int64_t i = T - 1; i > 0; i--) betas[i] = 1 - tmp[i] / tmp[i - 1];
  betas[0] = 1 - tmp[0];
}

void sched_make_betas_f32(const dc_scheduler *s, float *betas) {
  const sched_cfg *c = &s->c;
  int64_t T = s->T;
  switch (c->beta_schedule) {
    case BETAS_TRAINED: memcpy(betas, c->trained_betas, sizeof(float) * (size_t)T); break;
    case BETAS_LINEAR: dc_torch_linspace_f32(c->beta_start, c->beta_end, T, betas); break;
    case BETAS_SCALED_LINEAR:
      dc_torch_linspace_f32(pow(c->beta_start, 0.5), pow(c->beta_end, 0.5), T, betas);
      for (int64_t i = 0; i < T; i++) betas[i] = betas[i] * betas[i];
      break;
    case BETAS_COSINE: betas_cosine(betas, T); break;
  }
}

dc_status *sched_train_schedule(dc_scheduler *s) {
  if (sched_is_cogvideox(s)) return sched_train_schedule_cogvideox(s);
  int64_t T = s->T;
  float *betas = dc_malloc(sizeof(float) * (size_t)T);
  s->alphas_cumprod = dc_malloc(sizeof(float) * (size_t)T);
  if (!betas || !s->alphas_cumprod) {
    dc_free(betas);
    return dc_nomem("a scheduler's training schedule");
  }
  sched_make_betas_f32(s, betas);
  if (s->c.rescale_zero_snr) rescale_zero_snr(betas, s->alphas_cumprod, T);
  for (int64_t i = 0; i < T; i++) betas[i] = 1.0f - betas[i];
  sched_cumprod_f32(betas, s->alphas_cumprod, T);
  dc_free(betas);
  /* Euler, Euler ancestral and DPM keep the last alpha off zero */
  if (s->c.rescale_zero_snr && s->kind != SK_DDIM) s->alphas_cumprod[T - 1] = 0x1p-24f;
  s->final_alpha_cumprod = s->c.set_alpha_to_one ? 1.0f : s->alphas_cumprod[0];
  return NULL;
}

/* ((1 - alphas_cumprod) / alphas_cumprod) ** 0.5 at j, in float32. */
static float train_sigma(const dc_scheduler *s, int64_t j) {
  return sqrtf((1.0f - s->alphas_cumprod[j]) / s->alphas_cumprod[j]);
}

/* ---- set_timesteps ------------------------------------------------------ */

/* Room for n timesteps and nsig sigmas. */
static dc_status *alloc_schedule(dc_scheduler *s, int n, int nsig) {
  s->n = n;
  s->nsigmas = nsig;
  s->t_int = dc_calloc((size_t)n + 1, sizeof(int64_t));
  s->t_unet = dc_calloc((size_t)n + 1, sizeof(float));
  s->sigmas = nsig ? dc_calloc((size_t)nsig, sizeof(float)) : NULL;
  if (!s->t_int || !s->t_unet || (nsig && !s->sigmas)) return dc_nomem("a scheduler's timesteps");
  return NULL;
}

/* The spacing of PNDM's, DDIM's and the sigma schedulers' timesteps, as
 * float64 values in descending order (leading: without steps_offset, which
 * each class adds in its own type).  out has room for steps + 1 values;
 * returns the count (trailing's arange may give one more than steps). */
static int64_t spacing(const dc_scheduler *s, int steps, double *out) {
  int64_t T = s->T;
  if (s->c.spacing == SPACING_LINSPACE) {
    sched_np_linspace(0, (double)(T - 1), steps, out);
    for (int i = 0; i < steps / 2; i++) {
      double t = out[i];
      out[i] = out[steps - 1 - i], out[steps - 1 - i] = t;
    }
    return steps;
  }
  if (s->c.spacing == SPACING_LEADING) {
    int64_t ratio = T / steps;
    for (int i = 0; i < steps; i++) out[i] = (double)((int64_t)(steps - 1 - i) * ratio);
    return steps;
  }
  double ratio = (double)T / (double)steps;
  int64_t n = np_arange_len((double)T, 0, -ratio);
  if (n > steps + 1) n = steps + 1; /* cannot happen: ceil(steps * (1 + eps)) */
  np_arange((double)T, -ratio, n, out);
  for (int64_t i = 0; i < n; i++) out[i] = rint(out[i]);
  return n;
}

/* Scratch arrays for set_timesteps, each with room for its largest use. */
typedef struct {
  double *ts;   /* timesteps, steps + 2 */
  double *sg;   /* sigmas, steps + 2 */
  double *conv; /* converted sigmas, steps + 2 */
  double *in;   /* flipped training sigmas or their logs, T */
  int64_t *asc; /* PNDM's ascending _timesteps, steps + 2 */
  float *t32;   /* float32 timesteps, steps + 2 */
  float *lin;   /* Euler's log-linear sigmas, steps + 2 */
  float *sig;   /* training sigmas, T */
  float *logs;  /* np.log of them, T */
} scratch;

static void scratch_free(scratch *w) {
  dc_free(w->ts);
  dc_free(w->sg);
  dc_free(w->conv);
  dc_free(w->in);
  dc_free(w->asc);
  dc_free(w->t32);
  dc_free(w->lin);
  dc_free(w->sig);
  dc_free(w->logs);
}

static dc_status *scratch_alloc(scratch *w, int steps, int64_t T) {
  size_t n = (size_t)steps + 2, t = (size_t)T;
  memset(w, 0, sizeof *w);
  w->ts = dc_malloc(sizeof(double) * n);
  w->sg = dc_malloc(sizeof(double) * n);
  w->conv = dc_malloc(sizeof(double) * n);
  w->in = dc_malloc(sizeof(double) * t);
  w->asc = dc_malloc(sizeof(int64_t) * n);
  w->t32 = dc_malloc(sizeof(float) * n);
  w->lin = dc_malloc(sizeof(float) * n);
  w->sig = dc_malloc(sizeof(float) * t);
  w->logs = dc_malloc(sizeof(float) * t);
  if (w->ts && w->sg && w->conv && w->in && w->asc && w->t32 && w->lin && w->sig && w->logs) return NULL;
  scratch_free(w);
  return dc_nomem("a scheduler's timesteps");
}

/* PNDM: _timesteps ascending, then PLMS (skip_prk_steps) or PRK + PLMS. */
static dc_status *set_pndm(dc_scheduler *s, int steps, scratch *w) {
  int64_t m, T = s->T, *asc = w->asc;
  if (s->c.spacing == SPACING_LINSPACE) {
    sched_np_linspace(0, (double)(T - 1), steps, w->ts);
    for (int i = 0; i < steps; i++) asc[i] = (int64_t)rint(w->ts[i]);
    m = steps;
  } else {
    m = spacing(s, steps, w->ts); /* descending */
    for (int64_t i = 0; i < m; i++)
      asc[i] = (int64_t)w->ts[m - 1 - i] + (s->c.spacing == SPACING_LEADING ? s->c.steps_offset : -1);
  }
  if (s->c.skip_prk_steps) {
    /* concatenate([_ts[:-1], _ts[-2:-1], _ts[-1:]])[::-1] */
    int n = m >= 2 ? (int)m + 1 : 1;
    DC_TRY(alloc_schedule(s, n, 0));
    int k = 0;
    s->t_int[k++] = asc[m - 1];
    if (m >= 2) s->t_int[k++] = asc[m - 2];
    for (int64_t i = m - 2; i >= 0; i--) s->t_int[k++] = asc[i];
    return NULL;
  }
  /* prk: (_ts[-4:].repeat(2) + tile([0, T // steps // 2], 4))[:-1].repeat(2)[1:-1][::-1] */
  if (m < 4)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: PNDMScheduler with \"skip_prk_steps\": false needs at least 4 steps (diffusers fails "
                    "below that), got %d",
                    s->path, steps);
  int64_t half = T / steps / 2, prk[8], rep[14];
  for (int i = 0; i < 8; i++) prk[i] = asc[m - 4 + i / 2] + (i % 2 ? half : 0);
  for (int i = 0; i < 14; i++) rep[i] = prk[i / 2];
  DC_TRY(alloc_schedule(s, 12 + (int)(m - 3), 0));
  for (int i = 0; i < 12; i++) s->t_int[i] = rep[12 - i];
  for (int64_t i = 0; i < m - 3; i++) s->t_int[12 + i] = asc[m - 4 - i];
  return NULL;
}

static dc_status *set_ddim(dc_scheduler *s, int steps, scratch *w) {
  int64_t n = spacing(s, steps, w->ts);
  DC_TRY(alloc_schedule(s, (int)n, 0));
  for (int64_t i = 0; i < n; i++) {
    int64_t t = (int64_t)rint(w->ts[i]);
    if (s->c.spacing == SPACING_LEADING) t += s->c.steps_offset;
    if (s->c.spacing == SPACING_TRAILING) t -= 1;
    s->t_int[i] = t;
  }
  return NULL;
}

/* ---- sigmas ------------------------------------------------------------- */

/* _sigma_to_t(sigma, log_sigmas): the fractional training index whose log
 * sigma is log(sigma), interpolated between neighbours. */
static double sigma_to_t(double sigma, const float *log_sigmas, int64_t T) {
  double log_sigma = log(sigma > 1e-10 ? sigma : 1e-10);
  /* argmax of cumsum(dists >= 0): the first index reaching the count */
  int64_t count = 0, best = 0, low = 0;
  for (int64_t j = 0; j < T; j++) {
    count += log_sigma - (double)log_sigmas[j] >= 0;
    if (count > best) best = count, low = j;
  }
  if (low > T - 2) low = T - 2;
  float lo = log_sigmas[low], hi = log_sigmas[low + 1];
  double w = ((double)lo - log_sigma) / (double)(lo - hi);
  if (w < 0) w = 0;
  if (w > 1) w = 1;
  return (1 - w) * (double)low + w * (double)(low + 1);
}

/* _convert_to_karras / _convert_to_exponential / _convert_to_lu on
 * in_sigmas (descending; Lu: log sigmas) into out[steps]. */
void sched_convert_sigmas(const dc_scheduler *s, const double *in, int64_t nin, int steps, double *out) {
  const sched_cfg *c = &s->c;
  /* the config's sigma_min/sigma_max bound them, but LMS's Karras sigmas */
  int bounds = !(s->kind == SK_LMS && c->sigmas == SIGMAS_KARRAS);
  double smin = bounds && c->has_sigma_min ? c->sigma_min : in[nin - 1];
  double smax = bounds && c->has_sigma_max ? c->sigma_max : in[0];
  sched_np_linspace(0, 1, steps, out); /* the ramp */
  if (c->sigmas == SIGMAS_KARRAS) {
    double rho = 7.0, min_inv = pow(smin, 1 / rho), max_inv = pow(smax, 1 / rho);
    for (int i = 0; i < steps; i++) out[i] = pow(max_inv + out[i] * (min_inv - max_inv), rho);
  } else if (c->sigmas == SIGMAS_EXPONENTIAL) {
    sched_np_linspace(log(smax), log(smin), steps, out);
    for (int i = 0; i < steps; i++) out[i] = exp(out[i]);
  } else { /* Lu's lambdas, rho 1 */
    double lmin = in[nin - 1], lmax = in[0];
    for (int i = 0; i < steps; i++) out[i] = exp(lmax + out[i] * (lmin - lmax));
  }
}

/* The sigmas at the float timesteps (np.interp), or Euler's log-linear
 * ones; returns how many. */
static int64_t base_sigmas(const dc_scheduler *s, int64_t nts, int steps, scratch *w) {
  if (!s->c.log_linear) {
    for (int64_t i = 0; i < nts; i++) w->sg[i] = np_interp_arange(w->ts[i], w->sig, s->T);
    return nts;
  }
  /* torch.linspace(np.log(sigmas[-1]), np.log(sigmas[0]), steps + 1).exp() */
  dc_torch_linspace_f32(dc_numpy_logf(w->sig[s->T - 1]), dc_numpy_logf(w->sig[0]), steps + 1, w->lin);
  for (int i = 0; i <= steps; i++) w->sg[i] = dc_torch_expf(w->lin[i]);
  return steps + 1;
}

/* The final sigma: the first training sigma ("sigma_min") or 0. */
static float last_sigma(const dc_scheduler *s) {
  return s->c.final_sigma_min ? train_sigma(s, 0) : 0.0f;
}

/* Euler, Euler ancestral and LMS's float32 timesteps (before any sigma
 * conversion) into w->ts; returns how many. */
static int64_t float_timesteps(const dc_scheduler *s, int steps, scratch *w) {
  if (s->c.spacing == SPACING_LINSPACE) {
    sched_np_linspace(0, (double)(s->T - 1), steps, w->ts);
    for (int i = 0; i < steps; i++) w->t32[i] = (float)w->ts[steps - 1 - i];
    for (int i = 0; i < steps; i++) w->ts[i] = w->t32[i];
    return steps;
  }
  int64_t n = spacing(s, steps, w->ts);
  for (int64_t i = 0; i < n; i++) {
    float t = (float)w->ts[i];
    w->ts[i] = s->c.spacing == SPACING_LEADING ? t + (float)s->c.steps_offset : t - 1.0f;
  }
  return n;
}

/* Euler, Euler ancestral, LMS: float32 timesteps, float32 sigmas. */
static dc_status *set_sigma_family(dc_scheduler *s, int steps, scratch *w) {
  int64_t n = float_timesteps(s, steps, w);
  int64_t ns = base_sigmas(s, n, steps, w);
  if (s->c.sigmas != SIGMAS_PLAIN) {
    sched_convert_sigmas(s, w->sg, ns, steps, w->conv);
    memcpy(w->sg, w->conv, sizeof(double) * (size_t)steps);
    ns = n = steps;
    for (int i = 0; i < steps; i++) w->ts[i] = sigma_to_t(w->sg[i], w->logs, s->T);
  }
  if (s->c.continuous_v) n = ns; /* timesteps from sigmas[:-1] */
  DC_TRY(alloc_schedule(s, (int)n, (int)ns + 1));
  for (int64_t i = 0; i < ns; i++) s->sigmas[i] = (float)w->sg[i];
  s->sigmas[ns] = s->kind == SK_EULER ? last_sigma(s) : 0.0f;
  for (int64_t i = 0; i < n; i++)
    s->t_unet[i] = s->c.continuous_v ? 0.25f * dc_torch_logf(s->sigmas[i]) : (float)w->ts[i];
  return NULL;
}

/* DPM-Solver: the last timestep lambda_min_clipped allows. */
static int64_t dpm_last_timestep(const dc_scheduler *s) {
  if (isinf(s->c.lambda_min_clipped) && s->c.lambda_min_clipped < 0) return s->T;
  /* searchsorted(flip(lambda_t), lambda_min_clipped): the lambdas below it */
  float v = (float)s->c.lambda_min_clipped;
  int64_t below = 0;
  for (int64_t j = 0; j < s->T; j++) {
    float a = sqrtf(s->alphas_cumprod[j]), sd = sqrtf(1 - s->alphas_cumprod[j]);
    below += dc_torch_logf(a) - dc_torch_logf(sd) < v;
  }
  return s->T - below;
}

/* DPM-Solver's integer timesteps before any sigma conversion into w->ts;
 * returns how many. */
static int64_t dpm_timesteps(const dc_scheduler *s, int steps, int64_t last, scratch *w) {
  if (s->c.spacing == SPACING_LINSPACE) {
    sched_np_linspace(0, (double)(last - 1), steps + 1, w->sg);
    for (int i = 0; i < steps; i++) w->ts[i] = rint(w->sg[steps - i]);
    return steps;
  }
  if (s->c.spacing == SPACING_LEADING) {
    int64_t ratio = last / (steps + 1);
    for (int i = 0; i < steps; i++) w->ts[i] = (double)((int64_t)(steps - i) * ratio + s->c.steps_offset);
    return steps;
  }
  double ratio = (double)s->T / (double)steps;
  int64_t n = np_arange_len((double)last, 0, -ratio);
  if (n > steps + 1) n = steps + 1;
  np_arange((double)last, -ratio, n, w->ts);
  for (int64_t i = 0; i < n; i++) w->ts[i] = rint(w->ts[i]) - 1;
  return n;
}

/* Sigmas and timesteps that are not finite (betas that reach 1, sigma
 * options out of range): diffusers computes NaNs from them; refused. */
static dc_status *not_finite(const dc_scheduler *s, int steps, const char *what, int i, double v) {
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: %d steps give %s %d = %g (the betas reach 1, or the sigma options are out of range), where "
                  "diffusers computes NaNs; diffc refuses it",
                  s->path, steps, what, i, v);
}

/* DPM-Solver: integer timesteps, float32 sigmas. */
static dc_status *set_dpm(dc_scheduler *s, int steps, scratch *w) {
  int64_t T = s->T, n = dpm_timesteps(s, steps, dpm_last_timestep(s), w), ns = n;
  if (n <= 0)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"lambda_min_clipped\" %g leaves no timesteps", s->path,
                    s->c.lambda_min_clipped);
  if (s->c.sigmas == SIGMAS_PLAIN) {
    for (int64_t i = 0; i < n; i++) w->sg[i] = np_interp_arange(w->ts[i], w->sig, T);
  } else {
    for (int64_t j = 0; j < T; j++) w->in[j] = s->c.sigmas == SIGMAS_LU ? w->logs[T - 1 - j] : w->sig[T - 1 - j];
    sched_convert_sigmas(s, w->in, T, steps, w->sg);
    ns = n = steps;
    for (int i = 0; i < steps; i++) {
      w->ts[i] = sigma_to_t(w->sg[i], w->logs, T);
      if (s->c.sigmas != SIGMAS_EXPONENTIAL && s->c.beta_schedule != BETAS_COSINE) w->ts[i] = rint(w->ts[i]);
    }
  }
  DC_TRY(alloc_schedule(s, (int)n, (int)ns + 1));
  for (int64_t i = 0; i < ns; i++) s->sigmas[i] = (float)w->sg[i];
  s->sigmas[ns] = last_sigma(s);
  for (int64_t i = 0; i < n; i++) {
    if (!(fabs(w->ts[i]) < 1e15)) return not_finite(s, steps, "timestep", (int)i, w->ts[i]);
    s->t_int[i] = (int64_t)w->ts[i]; /* torch's .to(int64) truncates */
  }
  return NULL;
}

/* diffusers' first step index: the position of timesteps[0], the second
 * one when it repeats (index_for_timestep). */
int sched_begin_index(const dc_scheduler *s) {
  int uses_int = s->kind == SK_DPM;
  for (int i = 1; i < s->n; i++)
    if (uses_int ? s->t_int[i] == s->t_int[0] : s->t_unet[i] == s->t_unet[0]) return i;
  return 0;
}

static float max_sigma(const dc_scheduler *s) {
  float m = s->sigmas[0];
  for (int i = 1; i < s->nsigmas; i++)
    if (isnan(s->sigmas[i]) || s->sigmas[i] > m) m = s->sigmas[i];
  return m;
}

static void free_schedule(dc_scheduler *s) {
  dc_free(s->t_int);
  dc_free(s->t_unet);
  dc_free(s->sigmas);
  s->t_int = NULL;
  s->t_unet = NULL;
  s->sigmas = NULL;
  s->n = s->nsigmas = 0;
}

static dc_status *by_class(dc_scheduler *s, int steps, scratch *w) {
  switch (s->kind) {
    case SK_PNDM: return set_pndm(s, steps, w);
    case SK_DDIM:
    case SK_COGX_DDIM:
    case SK_COGX_DPM: return set_ddim(s, steps, w);
    case SK_DPM: return set_dpm(s, steps, w);
    default: return set_sigma_family(s, steps, w);
  }
}

/* What diffusers derives from the timesteps: the UNet's timestep values,
 * init_noise_sigma and the first step index. */
static dc_status *finish(dc_scheduler *s, int steps) {
  s->steps = steps;
  if (s->kind == SK_PNDM || s->kind == SK_DDIM || s->kind == SK_DPM || sched_is_cogvideox(s))
    for (int i = 0; i < s->n; i++) s->t_unet[i] = (float)s->t_int[i];
  s->init_noise_sigma = 1.0f;
  if (s->kind == SK_EULER || s->kind == SK_EULER_A || s->kind == SK_LMS) {
    float m = max_sigma(s);
    s->init_noise_sigma = s->c.spacing == SPACING_LEADING ? sqrtf(m * m + 1) : m;
  }
  for (int i = 0; i < s->nsigmas; i++)
    if (!isfinite(s->sigmas[i])) return not_finite(s, steps, "sigma", i, s->sigmas[i]);
  for (int i = 0; i < s->n; i++)
    if (!isfinite(s->t_unet[i])) return not_finite(s, steps, "timestep", i, s->t_unet[i]);
  s->begin = s->kind == SK_PNDM || s->kind == SK_DDIM || sched_is_cogvideox(s) ? 0 : sched_begin_index(s);
  if (s->nsigmas && s->begin + s->n + 1 > s->nsigmas)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: %d steps give a first timestep that repeats, so diffusers starts at step index %d and "
                    "runs past the end of its sigmas; diffc refuses it (use another step count or spacing)",
                    s->path, steps, s->begin);
  return NULL;
}

dc_status *sched_set_timesteps(dc_scheduler *s, int steps) {
  free_schedule(s);
  scratch w;
  DC_TRY(scratch_alloc(&w, steps, s->T));
  for (int64_t j = 0; j < s->T; j++) {
    w.sig[j] = train_sigma(s, j);
    w.logs[j] = dc_numpy_logf(w.sig[j]);
  }
  dc_status *st = by_class(s, steps, &w);
  scratch_free(&w);
  if (!st) st = finish(s, steps);
  if (st) free_schedule(s);
  return st;
}
