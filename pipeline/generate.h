/* generate.h — prompt to image with a pipeline plan: the host side of
 * diffusers' StableDiffusionPipeline / StableDiffusionXLPipeline __call__.
 *
 * The plan holds the model work in phases (driver/pipeline_build.c); this
 * does what diffusers does in Python around it: tokenise the prompts, run
 * the text phase, draw the initial noise (torch's generator, so a seed
 * gives diffusers' latents), run the scheduler's loop — each step the
 * UNet's two CFG halves (the unconditional one only when guidance > 1),
 * the guidance, guidance_rescale, the scheduler's step — then decode and
 * post-process to [0,1], all in float32 in torch's order of operations. */
#ifndef DC_GENERATE_H
#define DC_GENERATE_H

#include "runtime/diffrun.h"
#include "support/support.h"

typedef struct {
  const char *prompt;          /* UTF-8; NULL = "" */
  const char *negative_prompt; /* NULL = none given (SDXL's force_zeros_for_empty_prompt then zeroes the
                                * negative embeddings, as diffusers does for negative_prompt=None) */
  int steps;                   /* num_inference_steps; 0 = 50 */
  double guidance;             /* guidance_scale; NAN = diffusers' default (7.5 SD, 5.0 SDXL) */
  double guidance_rescale;     /* 0 = off */
  const char *scheduler;       /* a scheduler class to use instead of the plan's (from_config) */
  const char *const *scheduler_set; /* "key=JSON value" changes to its config, as from_config(config, key=value) */
  int nscheduler_set;
  uint64_t seed;
  /* diffusers' latents= argument: [batch, C, h, w] float32 (scaled by
   * init_noise_sigma as diffusers does); NULL = torch.randn from seed */
  const float *latents;
  /* SDXL: original_size, crops_coords_top_left, target_size as (h, w);
   * all zero = diffusers' defaults ((H, W), (0, 0), (H, W)) */
  int64_t original_size[2], crops_coords_top_left[2], target_size[2];
  int has_original_size, has_crops, has_target_size;
  /* Called at each phase and step: phase "text", "denoise" (step 1..n) or
   * "decode"; may be NULL. */
  void (*progress)(void *ctx, const char *phase, int step, int nsteps);
  void *progress_ctx;
  /* Called with a note for the user (prompt truncated); may be NULL. */
  void (*note)(void *ctx, const char *text);
  void *note_ctx;
} dc_generate_options;

typedef struct {
  int64_t batch, height, width;               /* image [batch, 3, height, width] */
  /* A video pipeline's frame count F (CogVideoX): image then holds the
   * videos [batch, F, 3, height, width] in [0,1] (diffusers' output_type="pt")
   * and diffrun writes them with dc_png_write_frames / dc_apng_write_chw
   * (pipeline/png.h); 0 for an image pipeline.  Its latents then are
   * [batch, latent_frames, C, h, w] (CogVideoX's layout); latent_frames 0
   * for an image pipeline. */
  int64_t frames, latent_frames;
  int64_t latent_channels, latent_h, latent_w; /* latents [batch, C, h, w] */
  float *image;    /* in [0,1], diffusers' output_type="pt" */
  float *latents;  /* the final latents, before the VAE */
  char scheduler[64]; /* the class that ran */
  int steps;       /* the loop's length (PNDM: steps + 1) */
  double guidance; /* the guidance used */
  double text_seconds, denoise_seconds, decode_seconds;
  int unet_runs;   /* UNet forwards (2 per step with guidance, 1 without) */
  /* over every phase run: the arena's highest byte measured and planned,
   * and the bytes uploaded (offloaded weights) */
  uint64_t device_peak_bytes, device_predicted_bytes, uploaded_bytes;
  const char *backend;
  int threads;
} dc_generate_result;

/* The latents' shape [batch, C, h, w] (what --latents must hold). */
dc_status *dc_generate_latent_shape(const drt_plan *p, int64_t dims[4]);

/* Whether the plan is a pipeline (has a PIPE section). */
int dc_plan_is_pipeline(const drt_plan *p);
/* The denoising steps a generation runs without --steps (diffusers'
 * num_inference_steps default: 50; Flux and SD3 28); 0 for a plan that is
 * no pipeline or whose pipeline section does not read. */
int dc_generate_default_steps(const drt_plan *p);
/* Runs the pipeline once: r is filled (free it with dc_generate_result_free). */
dc_status *dc_generate(drt_plan *p, const dc_generate_options *o, dc_generate_result *r);
void dc_generate_result_free(dc_generate_result *r);

#endif
