/* pipeline_source.c — a diffusers pipeline folder as a dc_pipeline_source
 * (pipeline_source.h): model_index.json names the pipeline class and its
 * components; each model component opens as a folder, the tokenizers and
 * the scheduler are read into memory. */
#include "pipeline_source.h"

#include <string.h>

#include "pipeline/tokenizer.h"
#include "registry.h"

#include <stdio.h>

/* The pipelines diffc compiles, and what each needs. */
typedef struct {
  const char *name;
  dc_pipeline_kind kind;
} pipeline_class;

static const pipeline_class pipeline_classes[] = {
    {"StableDiffusionPipeline", DC_PIPE_SD},
    {"StableDiffusionXLPipeline", DC_PIPE_SDXL},
    {"FluxPipeline", DC_PIPE_FLUX},
    {"StableDiffusion3Pipeline", DC_PIPE_SD3},
    {"CogVideoXPipeline", DC_PIPE_COGVIDEOX},
};
enum { NPIPELINE_CLASSES = sizeof pipeline_classes / sizeof pipeline_classes[0] };

const char *dc_pipeline_class_names(void) {
  return "StableDiffusionPipeline, StableDiffusionXLPipeline, FluxPipeline, StableDiffusion3Pipeline, "
         "CogVideoXPipeline";
}

dc_pipeline_kind dc_pipeline_class_kind(const char *class_name) {
  for (int i = 0; i < NPIPELINE_CLASSES; i++)
    if (!strcmp(pipeline_classes[i].name, class_name)) return pipeline_classes[i].kind;
  return DC_PIPE_SD;
}

int dc_pipeline_class_is_sdxl(const char *class_name) { return dc_pipeline_class_kind(class_name) == DC_PIPE_SDXL; }

const dc_folder *dc_pipeline_denoiser(const dc_pipeline_source *s) {
  return s->kind == DC_PIPE_SD || s->kind == DC_PIPE_SDXL ? &s->unet : &s->transformer;
}

static const pipeline_class *find_class(const char *name) {
  for (int i = 0; i < NPIPELINE_CLASSES; i++)
    if (!strcmp(pipeline_classes[i].name, name)) return &pipeline_classes[i];
  return NULL;
}

/* A component entry: ["library", "Class"]; null entries are absent. */
static int entry_present(const cJSON *v) {
  return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsString(v->child) && cJSON_IsString(v->child->next);
}

/* The components diffc compiles, for messages ("unet, vae"), into buf. */
static const char *component_list(const dc_json_doc *mi, char *buf, size_t cap) {
  buf[0] = 0;
  for (const cJSON *c = mi->root->child; c; c = c->next) {
    if (!entry_present(c)) continue;
    dc_library lib = !strcmp(c->child->valuestring, "diffusers") ? DC_LIB_DIFFUSERS : DC_LIB_TRANSFORMERS;
    if (!dc_class_find(lib, c->child->next->valuestring)) continue;
    size_t n = strlen(buf);
    snprintf(buf + n, cap - n, "%s%s", n ? ", " : "", c->string);
  }
  return buf;
}

static dc_status *require_entry(const dc_json_doc *mi, const char *component) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(mi->root, component);
  if (entry_present(v)) return NULL;
  char names[256];
  if (cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsNull(v->child))
    return dc_error(DC_ERR_UNSUPPORTED, "%s: the pipeline's \"%s\" is null, so it cannot run whole; compile one "
                    "of its components with --component NAME (those diffc compiles: %s)", mi->path, component,
                    component_list(mi, names, sizeof names));
  if (!v)
    return dc_error(DC_ERR_FORMAT, "%s: the pipeline has no \"%s\" entry (expected [\"library\", \"Class\"])", mi->path,
                    component);
  char *s = cJSON_PrintUnformatted(v);
  dc_status *st = dc_error(DC_ERR_FORMAT, "%s: \"%s\" must be [\"library\", \"Class\"], found %s", mi->path, component,
                           s ? s : "?");
  cJSON_free(s);
  return st;
}

static dc_status *open_model(const char *dir, const dc_json_doc *mi, const char *component, const char *variant,
                             dc_folder *out) {
  DC_TRY(require_entry(mi, component));
  dc_folder_options fo = {component, variant};
  return dc_folder_open(dir, &fo, out);
}

static dc_status *read_files(const char *dir, const dc_json_doc *mi, const char *component,
                             const char *const *names, const char *needed, dc_text_files *out) {
  DC_TRY(require_entry(mi, component));
  char *sub = dc_path_join(dir, component);
  if (!sub) return dc_nomem("reading a pipeline folder");
  dc_status *st = NULL;
  if (!dc_dir_exists(sub))
    st = dc_error(DC_ERR_IO, "%s: the pipeline's %s folder is missing (model_index.json names it)", sub, component);
  if (!st) st = dc_text_files_read_dir(sub, names, out);
  if (!st && needed && !dc_text_files_find(out, needed))
    st = dc_error(DC_ERR_IO, "%s: no %s in the %s folder", sub, needed, component);
  dc_free(sub);
  return st;
}

static const char *const scheduler_files[] = {"scheduler_config.json", NULL};

/* T5's tokenizer files (pipeline/tokenizer_t5.h reads them). */
static const char *const t5_tokenizer_files[] = {"tokenizer.json", "spiece.model", "tokenizer_config.json",
                                                 "special_tokens_map.json", NULL};

/* A component model_index.json sets to [null, null] (SD3's optional T5). */
static int entry_null(const dc_json_doc *mi, const char *component) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(mi->root, component);
  return cJSON_IsArray(v) && cJSON_GetArraySize(v) == 2 && cJSON_IsNull(v->child);
}

static dc_status *read_flags(const dc_json_doc *mi, int sdxl, dc_pipeline_source *out) {
  const cJSON *sc = cJSON_GetObjectItemCaseSensitive(mi->root, "safety_checker");
  out->has_safety_checker = entry_present(sc);
  int fz = 0;
  DC_TRY(dc_json_bool(mi, "force_zeros_for_empty_prompt", sdxl, &fz));
  out->force_zeros_for_empty_prompt = sdxl ? fz : 0;
  return NULL;
}

/* FluxPipeline: CLIP (pooled) + T5; StableDiffusion3Pipeline: two CLIPs +
 * T5, which may be null. */
static dc_status *open_dit_parts(const char *dir, const dc_json_doc *mi, const char *variant, dc_pipeline_source *out) {
  int sd3 = out->kind == DC_PIPE_SD3;
  DC_TRY(read_flags(mi, 0, out));
  DC_TRY(open_model(dir, mi, "transformer", variant, &out->transformer));
  DC_TRY(open_model(dir, mi, "vae", variant, &out->vae));
  DC_TRY(open_model(dir, mi, "text_encoder", variant, &out->text_encoder));
  DC_TRY(read_files(dir, mi, "tokenizer", dc_clip_tokenizer_file_names, NULL, &out->tokenizer));
  DC_TRY(read_files(dir, mi, "scheduler", scheduler_files, "scheduler_config.json", &out->scheduler));
  DC_TRY(open_model(dir, mi, "text_encoder_2", variant, &out->text_encoder_2));
  out->has_text_encoder_2 = 1;
  DC_TRY(read_files(dir, mi, "tokenizer_2", sd3 ? dc_clip_tokenizer_file_names : t5_tokenizer_files, NULL,
                    &out->tokenizer_2));
  if (!sd3 || entry_null(mi, "text_encoder_3")) return NULL;
  DC_TRY(open_model(dir, mi, "text_encoder_3", variant, &out->text_encoder_3));
  out->has_text_encoder_3 = 1;
  return read_files(dir, mi, "tokenizer_3", t5_tokenizer_files, NULL, &out->tokenizer_3);
}

/* CogVideoXPipeline: T5 (text_encoder, tokenizer), the transformer, the
 * video VAE, a CogVideoX scheduler. */
static dc_status *open_video_parts(const char *dir, const dc_json_doc *mi, const char *variant,
                                   dc_pipeline_source *out) {
  DC_TRY(open_model(dir, mi, "transformer", variant, &out->transformer));
  DC_TRY(open_model(dir, mi, "vae", variant, &out->vae));
  DC_TRY(open_model(dir, mi, "text_encoder", variant, &out->text_encoder));
  DC_TRY(read_files(dir, mi, "tokenizer", t5_tokenizer_files, NULL, &out->tokenizer));
  return read_files(dir, mi, "scheduler", scheduler_files, "scheduler_config.json", &out->scheduler);
}

static dc_status *open_parts(const char *dir, const dc_json_doc *mi, int sdxl, const char *variant,
                             dc_pipeline_source *out) {
  if (out->kind == DC_PIPE_FLUX || out->kind == DC_PIPE_SD3) return open_dit_parts(dir, mi, variant, out);
  if (out->kind == DC_PIPE_COGVIDEOX) return open_video_parts(dir, mi, variant, out);
  DC_TRY(read_flags(mi, sdxl, out));
  DC_TRY(open_model(dir, mi, "unet", variant, &out->unet));
  DC_TRY(open_model(dir, mi, "vae", variant, &out->vae));
  DC_TRY(open_model(dir, mi, "text_encoder", variant, &out->text_encoder));
  DC_TRY(read_files(dir, mi, "tokenizer", dc_clip_tokenizer_file_names, NULL, &out->tokenizer));
  DC_TRY(read_files(dir, mi, "scheduler", scheduler_files, "scheduler_config.json", &out->scheduler));
  if (!sdxl) return NULL;
  DC_TRY(open_model(dir, mi, "text_encoder_2", variant, &out->text_encoder_2));
  out->has_text_encoder_2 = 1;
  return read_files(dir, mi, "tokenizer_2", dc_clip_tokenizer_file_names, NULL, &out->tokenizer_2);
}

dc_status *dc_pipeline_source_open_folder(const char *dir, const char *variant, dc_pipeline_source *out) {
  memset(out, 0, sizeof *out);
  char *mi_path = dc_path_join(dir, "model_index.json");
  if (!mi_path) return dc_nomem("opening a pipeline folder");
  dc_json_doc mi;
  dc_status *st = dc_json_load(mi_path, &mi);
  dc_free(mi_path);
  if (st) return st;
  const char *cls = NULL;
  st = dc_json_str(&mi, "_class_name", NULL, &cls);
  if (!st && !cls) st = dc_error(DC_ERR_FORMAT, "%s: no \"_class_name\" (the pipeline class)", mi.path);
  const pipeline_class *pc = st ? NULL : find_class(cls);
  if (!st && !pc)
    st = dc_error(DC_ERR_UNSUPPORTED, "%s: pipeline class %s is not one diffc compiles (it compiles %s); compile a "
                  "component of it with --component NAME",
                  mi.path, cls, dc_pipeline_class_names());
  if (!st) {
    out->origin = dc_strdup(dir);
    out->class_name = dc_strdup(cls);
    out->kind = pc->kind;
    if (!out->origin || !out->class_name) st = dc_nomem("opening a pipeline folder");
  }
  if (!st) st = open_parts(dir, &mi, pc->kind == DC_PIPE_SDXL, variant, out);
  dc_json_free(&mi);
  if (st) dc_pipeline_source_close(out);
  return st;
}

static int folder_open(const dc_folder *f) { return f->dir != NULL; }

void dc_pipeline_source_close(dc_pipeline_source *s) {
  if (folder_open(&s->unet)) dc_folder_close(&s->unet);
  if (folder_open(&s->transformer)) dc_folder_close(&s->transformer);
  if (folder_open(&s->text_encoder_3)) dc_folder_close(&s->text_encoder_3);
  dc_text_files_free(&s->tokenizer_3);
  if (folder_open(&s->vae)) dc_folder_close(&s->vae);
  if (folder_open(&s->text_encoder)) dc_folder_close(&s->text_encoder);
  if (folder_open(&s->text_encoder_2)) dc_folder_close(&s->text_encoder_2);
  dc_text_files_free(&s->tokenizer);
  dc_text_files_free(&s->tokenizer_2);
  dc_text_files_free(&s->scheduler);
  if (s->close_owned) s->close_owned(s->owned);
  dc_free(s->origin);
  dc_free(s->class_name);
  memset(s, 0, sizeof *s);
}
