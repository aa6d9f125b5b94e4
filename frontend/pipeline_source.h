/* pipeline_source.h — a whole text-to-image pipeline as diffc reads it:
 * its class, its model components opened as folders, and its tokenizer and
 * scheduler files in memory.  Two sources fill it: a diffusers pipeline
 * folder (model_index.json; pipeline/pipeline_folder.c) and a single-file
 * checkpoint in the original CompVis/Stability layout
 * (frontend/single_file.c), which presents its tensors under diffusers'
 * names without copying them.  The pipeline compiler (driver/) reads only
 * this struct, so it never knows which source it came from. */
#ifndef DC_PIPELINE_SOURCE_H
#define DC_PIPELINE_SOURCE_H

#include "frontend.h"
#include "pipeline/text_files.h"

/* The pipeline families diffc runs: what components they have and how
 * their host loops differ (driver/pipeline_build.c, pipeline/generate.c). */
typedef enum {
  DC_PIPE_SD,   /* StableDiffusionPipeline: CLIP, UNet, VAE */
  DC_PIPE_SDXL, /* StableDiffusionXLPipeline: two CLIPs (pooled, time ids), UNet, VAE */
  DC_PIPE_FLUX, /* FluxPipeline: CLIP pooled + T5, a flow-matching transformer on packed latents */
  DC_PIPE_SD3,  /* StableDiffusion3Pipeline: two CLIPs + T5, a flow-matching transformer */
  DC_PIPE_COGVIDEOX, /* CogVideoXPipeline: T5, a 3D transformer on latent frames, a causal-conv3d VAE: video */
} dc_pipeline_kind;

typedef struct {
  char *origin;       /* the pipeline folder or checkpoint file, as the user named it */
  char *class_name;   /* "StableDiffusionPipeline", "StableDiffusionXLPipeline", "FluxPipeline", ... */
  dc_pipeline_kind kind;
  /* A single-file checkpoint's family as recognised: "SD1.x", "SD2.x",
   * "SDXL base" (a static string); NULL for a pipeline folder. */
  const char *family;
  /* model_index.json's force_zeros_for_empty_prompt (SDXL; true when absent
   * there, as StableDiffusionXLPipeline's default); 0 for SD. */
  int force_zeros_for_empty_prompt;
  /* A non-null safety_checker entry: diffc does not run it (reported). */
  int has_safety_checker;
  /* The denoiser is the unet (SD, SDXL) or the transformer (Flux, SD3,
   * CogVideoX).  text_encoder is CLIP (CogVideoX: T5); text_encoder_2 the second CLIP (SDXL, SD3) or T5
   * (Flux); text_encoder_3 T5 (SD3; a pipeline may leave it null, and SD3
   * then feeds zeros in its place, as diffusers does). */
  dc_folder unet, transformer, vae, text_encoder, text_encoder_2, text_encoder_3;
  int has_text_encoder_2, has_text_encoder_3;
  /* SD3 single files: CLIP-L's text_projection is the identity (diffusers'
   * from_single_file puts one there whatever the file holds). */
  int clip_l_identity_projection;
  /* Tokenizer files in memory, empty without their text encoder: CLIP's
   * (tokenizer.h) or T5's (tokenizer_t5.h: tokenizer_2 of Flux, tokenizer_3
   * of SD3, tokenizer of CogVideoX). */
  dc_text_files tokenizer, tokenizer_2, tokenizer_3, scheduler;
  void *owned;        /* the source's own storage (single file: the mapped checkpoint, renamed entries) */
  void (*close_owned)(void *owned);
} dc_pipeline_source;

/* Opens a pipeline folder (model_index.json): every model component with
 * dc_folder_open (variant as there), the tokenizer(s) and scheduler files.
 * An unsupported pipeline class, a missing component or file is an error
 * naming it; on error *out is closed. */
dc_status *dc_pipeline_source_open_folder(const char *dir, const char *variant, dc_pipeline_source *out);
/* Closes what either opener opened (a zeroed struct is fine): the folders,
 * the text files, then the source's own storage (close_owned), which folders
 * of a single-file checkpoint borrow. */
void dc_pipeline_source_close(dc_pipeline_source *s);
/* "StableDiffusionPipeline, StableDiffusionXLPipeline, FluxPipeline, StableDiffusion3Pipeline, CogVideoXPipeline" */
const char *dc_pipeline_class_names(void);
/* Whether the class is an SDXL pipeline (two text encoders, added conditions). */
int dc_pipeline_class_is_sdxl(const char *class_name);
/* The family of a pipeline class diffc runs (DC_PIPE_SD for an unknown name). */
dc_pipeline_kind dc_pipeline_class_kind(const char *class_name);
/* The denoiser of a source: its transformer for Flux, SD3 and CogVideoX, else its unet. */
const dc_folder *dc_pipeline_denoiser(const dc_pipeline_source *s);

/* A single-file checkpoint in the original CompVis / Stability layout
 * (frontend/single_file.c): SD1.x (cond_stage_model.transformer.*), SD2.x
 * (cond_stage_model.model.*, OpenCLIP) or SDXL base (conditioner.embedders.*),
 * recognised from its keys and shapes as diffusers' infer_diffusers_model_type
 * does; other layouts are refused by name.  Every tensor becomes a view of the
 * mapped file under its diffusers name, or is knowingly ignored (EMA copies,
 * schedule buffers, position_ids, logit_scale, SD2's last OpenCLIP block and
 * text_projection); any other tensor is an error naming it, and so is a tensor
 * the component configs imply and the file lacks, or one of another shape.
 * The configs, tokenizers and scheduler come from config_dir (a diffusers
 * pipeline folder of the same family) or, when it is NULL, from the bundled
 * defaults: <data>/single_file/<family>, <data> being $DIFFC_DATA_DIR, the
 * installed share/diffc or the source tree's data/.  SD2.x without a
 * config_dir is read as 2.1 768-v (v_prediction), as diffusers does.
 * Stability's SD3 / SD3.5 files with CLIP-L and CLIP-G
 * (text_encoders.clip_{l,g}.transformer.*) open the same way as a
 * StableDiffusion3Pipeline without T5 (a T5 in the file is refused, and so
 * is a CLIP-L text_projection other than the identity diffusers uses); a
 * Flux or SD3 file of the transformer alone is refused here: it opens with
 * dc_single_file_open_model. */
dc_status *dc_single_file_open(const char *path, const char *config_dir, dc_pipeline_source *out);

/* A single-file checkpoint of a DiT's transformer alone, opened as one
 * model: Black Forest Labs' FLUX.1-dev / schnell files (double_blocks.*,
 * single_blocks.*, at the top level or under model.diffusion_model.; dev
 * has guidance_in), Stability's SD3 Medium / SD3.5 Medium / Large files
 * (model.diffusion_model.joint_blocks.*, and first_stage_model.* whose VAE
 * is mapped and checked too; a file with text encoders is a pipeline:
 * dc_single_file_open).  Every tensor becomes a view under
 * diffusers' name (fused q,k,v(,mlp) rows split by offset, the final norm's
 * (shift, scale) halves flagged for the builder: frontend/single_file_dit.c),
 * checked exhaustively against the transformer config: <config_dir>/
 * transformer/config.json (a diffusers pipeline folder; or config_dir/
 * config.json, the transformer's own folder) or the bundled
 * <data>/single_file/<family>/transformer/config.json (the released
 * configs).  The folder owns the mapped file: dc_folder_close releases it. */
dc_status *dc_single_file_open_model(const char *path, const char *config_dir, dc_folder *out);
/* Whether the single file at path holds one model (a DiT's transformer)
 * rather than a pipeline; an error for a layout diffc does not read. */
dc_status *dc_single_file_holds_model(const char *path, int *yes);

#endif
