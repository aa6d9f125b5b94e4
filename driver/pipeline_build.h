/* pipeline_build.h — a text-to-image pipeline (a dc_pipeline_source) as
 * one module with phases: text encoding, a prologue, the denoising loop's
 * two CFG halves, decode (pipeline_build.c says how). */
#ifndef DC_PIPELINE_BUILD_H
#define DC_PIPELINE_BUILD_H

#include "frontend/pipeline_source.h"

typedef struct {
  int64_t height, width; /* 0: diffusers' default, the UNet's sample_size x the VAE's scale factor */
  int64_t batch;         /* images per prompt; 0 = 1 */
  int clip_skip;         /* diffusers' clip_skip (0: none) */
  int tokens;            /* the CLIP tokenizers' model_max_length; 0 = 77 */
  int max_sequence_length; /* Flux, SD3, CogVideoX: T5's tokens (diffusers' max_sequence_length); 0 = the pipeline's default */
  int64_t num_frames;      /* CogVideoX: the frames asked for (diffusers' num_frames); 0 = the transformer's sample_frames */
  int vae_slicing, vae_tiling;
  int64_t tile_size;
  double tile_overlap;
} dc_pipeline_build_options;

/* What the host needs to run the module (stored in the plan's PIPE section). */
typedef struct {
  dc_pipeline_kind kind;
  int sdxl;
  int64_t height, width, batch, tokens;
  int64_t t5_tokens;      /* Flux, SD3, CogVideoX: max_sequence_length */
  int guidance_embeds;    /* Flux dev: the transformer takes the guidance scale */
  int has_uncond;         /* the plan has a denoise.uncond phase (CFG possible) */
  int64_t patch;          /* Flux: 2 (latents packed 2x2 into tokens); SD3: the transformer's patch_size; else 1 */
  int64_t vae_scale, latent_channels, latent_h, latent_w;
  double scaling_factor, shift_factor;
  /* CogVideoX: num_frames as asked, the latent frames ((num_frames - 1) /
   * vae_scale_temporal + 1), and the frames the VAE decodes them to (its
   * frame batching decides: 49 from 13, but 16 from 4) */
  int64_t num_frames, latent_frames, frames, vae_scale_temporal;
} dc_pipeline_info;

dc_status *dc_pipeline_build(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_module **out,
                             dc_pipeline_info *info);

#endif
