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

typedef struct {
  char *origin;       /* the pipeline folder or checkpoint file, as the user named it */
  char *class_name;   /* "StableDiffusionPipeline", "StableDiffusionXLPipeline" */
  /* A single-file checkpoint's family as recognised: "SD1.x", "SD2.x",
   * "SDXL base" (a static string); NULL for a pipeline folder. */
  const char *family;
  /* model_index.json's force_zeros_for_empty_prompt (SDXL; true when absent
   * there, as StableDiffusionXLPipeline's default); 0 for SD. */
  int force_zeros_for_empty_prompt;
  /* A non-null safety_checker entry: diffc does not run it (reported). */
  int has_safety_checker;
  dc_folder unet, vae, text_encoder, text_encoder_2;
  int has_text_encoder_2; /* SDXL */
  dc_text_files tokenizer, tokenizer_2, scheduler; /* tokenizer_2 empty without text_encoder_2 */
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
/* "StableDiffusionPipeline, StableDiffusionXLPipeline" */
const char *dc_pipeline_class_names(void);
/* Whether the class is an SDXL pipeline (two text encoders, added conditions). */
int dc_pipeline_class_is_sdxl(const char *class_name);

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
 * config_dir is read as 2.1 768-v (v_prediction), as diffusers does. */
dc_status *dc_single_file_open(const char *path, const char *config_dir, dc_pipeline_source *out);

#endif
