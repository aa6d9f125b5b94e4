/* scheduler_internal.h — what the scheduler files share (scheduler.h is
 * the interface):
 *
 *   scheduler.c           the public functions
 *   scheduler_config.c    the classes and their config schemas; reading
 *                         scheduler_config.json
 *   scheduler_schedule.c  the training schedule (betas, alphas_cumprod) and
 *                         set_timesteps (timesteps and sigmas), numpy's way
 *   scheduler_step.c      PNDM, DDIM, Euler, Euler ancestral and LMS steps
 *   scheduler_dpm.c       DPM-Solver++ (multistep) steps
 *   scheduler_flow.c      FlowMatchEulerDiscreteScheduler: its sigmas
 *                         (shifted, stretched, converted) and its step
 *   scheduler_cogvideox.c CogVideoXDDIMScheduler and CogVideoXDPMScheduler:
 *                         their SNR-shifted training schedule and steps
 *
 * Conventions: diffusers keeps the training schedule and step arithmetic in
 * float32 torch tensors and computes timesteps and sigmas in float64 numpy;
 * here float and double stand for them, one C operation per torch or numpy
 * operation, in diffusers' order. */
#ifndef DC_SCHEDULER_INTERNAL_H
#define DC_SCHEDULER_INTERNAL_H

#include "scheduler.h"
#include "torch_math.h"

typedef enum { SK_PNDM, SK_EULER, SK_EULER_A, SK_DDIM, SK_DPM, SK_LMS, SK_FLOW, SK_COGX_DDIM, SK_COGX_DPM } sched_kind;
typedef enum { SPACING_LEADING, SPACING_TRAILING, SPACING_LINSPACE } sched_spacing;
typedef enum { PRED_EPSILON, PRED_V, PRED_SAMPLE } sched_pred;
typedef enum { BETAS_LINEAR, BETAS_SCALED_LINEAR, BETAS_COSINE, BETAS_TRAINED } sched_betas;
typedef enum { SIGMAS_PLAIN, SIGMAS_KARRAS, SIGMAS_EXPONENTIAL, SIGMAS_LU } sched_sigmas;

/* Every config value any class reads, with diffusers' defaults for the
 * class applied (scheduler_config.c fills it). */
typedef struct {
  int64_t num_train_timesteps, steps_offset;
  double beta_start, beta_end;
  sched_betas beta_schedule;
  float *trained_betas; /* BETAS_TRAINED: num_train_timesteps values */
  sched_pred prediction;
  sched_spacing spacing;
  int rescale_zero_snr;
  int set_alpha_to_one;          /* PNDM, DDIM */
  int skip_prk_steps;            /* PNDM */
  int clip_sample;               /* DDIM */
  float clip_sample_range;       /* DDIM, float32 as torch's clamp takes it */
  sched_sigmas sigmas;           /* Euler, LMS, DPM */
  int log_linear;                /* Euler interpolation_type */
  int has_sigma_min, has_sigma_max; /* any class's config (see scheduler_config.c) */
  double sigma_min, sigma_max;
  int continuous_v;              /* Euler timestep_type "continuous" with v_prediction */
  int final_sigma_min;           /* Euler, DPM final_sigmas_type "sigma_min" (else "zero") */
  int solver_order, heun;        /* DPM */
  int lower_order_final, euler_at_final;
  double lambda_min_clipped;
  /* FlowMatchEulerDiscreteScheduler (sigmas: plain, Karras or exponential) */
  double shift, base_shift, max_shift;
  int64_t base_seq_len, max_seq_len;
  int dynamic_shifting, linear_time_shift, invert_sigmas, stochastic;
  int has_shift_terminal; /* non-null and non-zero: diffusers tests its truth */
  double shift_terminal;
  int use_flow_sigmas;    /* a hidden key the Flux pipeline reads (from_config keeps it) */
  double snr_shift_scale; /* CogVideoX: alphas_cumprod / (s + (1 - s) alphas_cumprod) */
} sched_cfg;

struct dc_scheduler {
  sched_kind kind;
  const char *class_name;
  char *path; /* "<origin>/scheduler_config.json", for messages */
  sched_cfg c;
  /* the training schedule (float32 torch tensors) */
  int64_t T;
  float *alphas_cumprod;
  float final_alpha_cumprod; /* PNDM, DDIM */
  /* CogVideoX: alphas_cumprod as diffusers keeps it, float64 (scaled_linear
   * betas) or float32 values (the other betas; cogx_f64 0), and the final
   * one (a float32 1.0 with set_alpha_to_one, else alphas_cumprod[0]) */
  double *cogx_alphas_cumprod, cogx_final;
  int cogx_f64, cogx_final_f64;
  /* after set_timesteps */
  int steps;   /* the num_inference_steps asked for */
  int n;       /* loop length: len(scheduler.timesteps) */
  int64_t *t_int;  /* integer timesteps (PNDM, DDIM, DPM) */
  float *t_unet;   /* each timestep as the UNet receives it */
  float *sigmas;   /* Euler, Euler a, LMS, DPM, flow: n + 1 values (+ 1 for Euler's log_linear) */
  int nsigmas;
  int begin;       /* diffusers' step index at loop index 0 */
  float init_noise_sigma;
  /* the loop's state: which loop index step() expects next, and the
   * history some classes keep (all n_elems floats; allocated at the first
   * step, freed by set_timesteps) */
  int next;
  size_t n_elems;
  float *hist[4];  /* PNDM ets, DPM model_outputs, LMS derivatives: newest last */
  int nhist;
  float *cur_sample, *cur_model_output, *scratch; /* PNDM; scratch: any class */
  int counter;          /* PNDM */
  int lower_order_nums; /* DPM */
};

/* scheduler_config.c: the class and config of files' scheduler_config.json
 * (class_override as dc_scheduler_parse) into s->kind, class_name, path, c. */
dc_status *sched_read_config(const dc_text_files *files, const char *class_override, dc_scheduler *s);
/* scheduler_schedule.c; also the betas of s's config as float32 (each
 * beta_schedule as DDIMScheduler builds it) and torch.cumprod of float32
 * (out may be a) for scheduler_cogvideox.c */
dc_status *sched_train_schedule(dc_scheduler *s);
void sched_make_betas_f32(const dc_scheduler *s, float *betas);
void sched_cumprod_f32(const float *a, float *out, int64_t n);
dc_status *sched_set_timesteps(dc_scheduler *s, int steps);
/* scheduler_step.c */
dc_status *sched_step_pndm(dc_scheduler *s, int i, const float *mo, float *x, size_t n);
dc_status *sched_step_ddim(dc_scheduler *s, int i, const float *mo, float *x, size_t n);
dc_status *sched_step_euler(dc_scheduler *s, int i, const float *mo, float *x, size_t n);
dc_status *sched_step_euler_a(dc_scheduler *s, int i, const float *mo, float *x, size_t n, dc_torch_gen *gen);
dc_status *sched_step_lms(dc_scheduler *s, int i, const float *mo, float *x, size_t n);
/* scheduler_dpm.c */
dc_status *sched_step_dpm(dc_scheduler *s, int i, const float *mo, float *x, size_t n);

/* scheduler_cogvideox.c: the training schedule and the steps. */
int sched_is_cogvideox(const dc_scheduler *s);
dc_status *sched_train_schedule_cogvideox(dc_scheduler *s);
dc_status *sched_step_cogx_ddim(dc_scheduler *s, int i, const float *mo, float *x, size_t n);
dc_status *sched_step_cogx_dpm(dc_scheduler *s, int i, const float *mo, float *x, size_t n, dc_torch_gen *gen);

/* scheduler_flow.c: set_timesteps(steps, sigmas=custom or None, mu=mu
 * if has_mu) and step. */
dc_status *sched_set_timesteps_flow(dc_scheduler *s, int steps, const double *custom, int has_mu, double mu);
dc_status *sched_step_flow(dc_scheduler *s, int i, const float *mo, float *x, size_t n, dc_torch_gen *gen);

/* scheduler_schedule.c, shared with scheduler_flow.c: np.linspace in
 * float64; _convert_to_karras / _convert_to_exponential of in (descending,
 * nin values) into out[steps]; diffusers' first step index (the position
 * of timesteps[0], the second one when it repeats). */
void sched_np_linspace(double start, double stop, int64_t n, double *out);
void sched_convert_sigmas(const dc_scheduler *s, const double *in, int64_t nin, int steps, double *out);
int sched_begin_index(const dc_scheduler *s);

/* Pushes a copy of v onto s->hist (keeping the newest `keep`). */
dc_status *sched_hist_push(dc_scheduler *s, const float *v, size_t n, int keep);
/* A zeroed buffer of n floats in *slot (allocated once, owned by the
 * scheduler whose field slot is). */
dc_status *sched_buf(float **slot, size_t n);

#endif
