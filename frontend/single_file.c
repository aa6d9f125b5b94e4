/* single_file.c — a checkpoint in the original CompVis / Stability layout
 * (one .safetensors with model.diffusion_model.*, first_stage_model.* and the
 * text encoder(s)) as a pipeline source: the same dc_pipeline_source a
 * diffusers pipeline folder gives, its tensors under diffusers' names and
 * never copied.
 *
 * 1. Recognise the family from keys and shapes as diffusers'
 *    infer_diffusers_model_type does (SD1.x, SD2.x, SDXL base), and refuse the
 *    layouts it knows and diffc does not read, by name.
 * 2. Take the configs, tokenizers and scheduler from `config_dir` (a diffusers
 *    pipeline folder of the same family) or from the bundled defaults
 *    (data/single_file/<family>, the repositories diffusers' from_single_file
 *    fetches when given no config).
 * 3. Map every tensor (single_file_map.c) and check the names against each
 *    component's config (single_file_check.c).
 * 4. Present each component as a dc_folder over the one mapped file. */
#include "pipeline/tokenizer.h"
#include "pipeline_source.h"
#include "single_file.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const sf_family sf_families[] = {
    {"sd1", "SD1.x", "StableDiffusionPipeline", "cond_stage_model.transformer.", 0, 0, NULL, SF_DIT_NONE, NULL},
    {"sd2", "SD2.x", "StableDiffusionPipeline", "cond_stage_model.model.", 1, 1, NULL, SF_DIT_NONE, NULL},
    {"sdxl", "SDXL base", "StableDiffusionXLPipeline", "conditioner.embedders.0.transformer.", 0, 0,
     "conditioner.embedders.1.model.", SF_DIT_NONE, NULL},
    {"flux-dev", "FLUX.1-dev", "FluxPipeline", NULL, 0, 0, NULL, SF_DIT_FLUX, "FluxTransformer2DModel"},
    {"flux-schnell", "FLUX.1-schnell", "FluxPipeline", NULL, 0, 0, NULL, SF_DIT_FLUX, "FluxTransformer2DModel"},
    {"sd3-medium", "SD3 Medium", "StableDiffusion3Pipeline", NULL, 0, 0, NULL, SF_DIT_SD3, "SD3Transformer2DModel"},
    {"sd3.5-medium", "SD3.5 Medium", "StableDiffusion3Pipeline", NULL, 0, 0, NULL, SF_DIT_SD3,
     "SD3Transformer2DModel"},
    {"sd3.5-large", "SD3.5 Large", "StableDiffusion3Pipeline", NULL, 0, 0, NULL, SF_DIT_SD3, "SD3Transformer2DModel"},
};
enum { SF_SD1, SF_SD2, SF_SDXL, SF_FLUX_DEV, SF_FLUX_SCHNELL, SF_SD3_MEDIUM, SF_SD35_MEDIUM, SF_SD35_LARGE };

/* ---- 1. the family ------------------------------------------------------------ */

#define SF_UNET_IN "model.diffusion_model.input_blocks.0.0.weight"
/* diffusers' CHECKPOINT_KEY_NAMES["v2"]: cross-attention to 1024-wide (OpenCLIP-H) text */
#define SF_V2_KEY "model.diffusion_model.input_blocks.2.1.transformer_blocks.0.attn2.to_k.weight"
#define SF_XL_KEY "conditioner.embedders.1.model.transformer.resblocks.9.mlp.c_proj.bias"

/* Layouts diffusers recognises (CHECKPOINT_KEY_NAMES) that diffc does not read. */
static const struct {
  const char *key, *what;
} sf_unsupported[] = {
    {"edm_mean", "Playground v2.5"},
    {"conditioner.embedders.0.model.text_projection", "SDXL refiner"},
    {"model.diffusion_model.input_blocks.10.0.skip_connection.bias", "SD x4 upscaler"},
    {"control_model.time_embed.0.weight", "ControlNet"},
    {"controlnet_cond_embedding.conv_in.weight", "ControlNet"},
    {"model.diffusion_model.single_stream_modulation.lin.weight", "Flux.2"},
    {"single_stream_modulation.lin.weight", "Flux.2"},
    {"model.diffusion_model.distilled_guidance_layer.in_proj.bias", "Chroma"},
    {"distilled_guidance_layer.in_proj.bias", "Chroma"},
    {"down_blocks.1.0.channelwise.0.weight", "Stable Cascade stage B"},
    {"clip_txt_mapper.weight", "Stable Cascade stage C"},
    {"down_blocks.0.motion_modules.0.temporal_transformer.transformer_blocks.0.attention_blocks.0.pos_encoder.pe",
     "AnimateDiff motion module"},
    {"double_layers.0.attn.w2q.weight", "AuraFlow"},
    {"model.diffusion_model.patchify_proj.weight", "LTX-Video"},
    {"patchify_proj.weight", "LTX-Video"},
    {"model.diffusion_model.blocks.0.attn.qkv_x.weight", "Mochi"},
    {"txt_in.individual_token_refiner.blocks.0.adaLN_modulation.1.bias", "HunyuanVideo"},
    {"model.diffusion_model.cap_embedder.0.weight", "Lumina 2"},
    {"cap_embedder.0.weight", "Lumina 2"},
    {"blocks.0.cross_attn.q_linear.weight", "Sana"},
    {"model.diffusion_model.head.modulation", "Wan"},
    {"head.modulation", "Wan"},
    {"double_stream_blocks.0.block.adaLN_modulation.1.bias", "HiDream"},
    {"decoder.stages.1.op_list.0.main.conv.conv.bias", "DC-AE autoencoder"},
};

/* Files that are one model in another layout, with what to do instead. */
static const struct {
  const char *key, *what;
} sf_other_layouts[] = {
    {"time_embedding.linear_1.weight", "a diffusers UNet weights file: open its model or pipeline folder"},
    {"encoder.down_blocks.0.resnets.0.conv1.weight", "a diffusers AutoencoderKL weights file: open its model folder"},
    {"encoder.down.0.block.0.conv1.weight", "a standalone LDM VAE, not a whole pipeline"},
    {"text_model.embeddings.token_embedding.weight", "a transformers CLIP text encoder, not a whole pipeline"},
};

static int64_t sf_last_dim(const dc_st_tensor *t) { return t && t->rank ? t->dims[t->rank - 1] : -1; }

static dc_status *sf_refuse(const dc_st_file *f, const char *what, const char *key) {
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: recognised as %s (it has \"%s\"); diffc reads single-file SD1.x, SD2.x and SDXL base "
                  "text-to-image checkpoints, and the transformers of FLUX.1-dev / schnell, SD3 and SD3.5",
                  f->file.path, what, key);
}

/* infer_diffusers_model_type's first test: the UNet's input channels. */
static dc_status *sf_check_unet_input(const dc_st_file *f, const dc_st_tensor *in) {
  int64_t c = in->rank == 4 ? in->dims[1] : -1;
  if (c == 4) return NULL;
  if (c == 9)
    return sf_refuse(f, sf_last_dim(dc_st_find(f, SF_V2_KEY)) == 1024 ? "SD2.x inpainting"
                        : dc_st_find(f, SF_XL_KEY)                      ? "SDXL inpainting"
                                                                        : "SD1.x inpainting",
                     SF_UNET_IN);
  if (c == 8) return sf_refuse(f, "InstructPix2Pix", SF_UNET_IN);
  char a[160];
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: \"%s\" has shape %s; a text-to-image SD UNet's first convolution takes 4 latent channels",
                  f->file.path, SF_UNET_IN, dc_dims_str(in->dims, in->rank, a, sizeof a));
}

static dc_status *sf_unknown_layout(const dc_st_file *f) {
  for (size_t i = 0; i < sizeof sf_other_layouts / sizeof sf_other_layouts[0]; i++)
    if (dc_st_find(f, sf_other_layouts[i].key))
      return dc_error(DC_ERR_UNSUPPORTED, "%s: %s (it has \"%s\")", f->file.path, sf_other_layouts[i].what,
                      sf_other_layouts[i].key);
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: not a checkpoint layout diffc knows: no SD UNet (\"%s\") among its %d tensors (the first: "
                  "\"%s\"); diffc reads single-file SD1.x, SD2.x and SDXL base checkpoints, and the transformers "
                  "of FLUX.1-dev / schnell, SD3 and SD3.5",
                  f->file.path, SF_UNET_IN, f->ntensors, f->ntensors ? f->tensors[0].name : "");
}

/* ---- the DiT layouts -------------------------------------------------------------- */

/* A transformer key under model.diffusion_model. (Stability's and ComfyUI's
 * files) or at the top level (Black Forest Labs' files of the transformer). */
static const dc_st_tensor *sf_find_dit(const dc_st_file *f, const char *key) {
  char full[256];
  snprintf(full, sizeof full, "model.diffusion_model.%s", key);
  const dc_st_tensor *t = dc_st_find(f, full);
  return t ? t : dc_st_find(f, key);
}

static const char *sf_first_with_prefix(const dc_st_file *f, const char *prefix) {
  for (int i = 0; i < f->ntensors; i++)
    if (!strncmp(f->tensors[i].name, prefix, strlen(prefix))) return f->tensors[i].name;
  return NULL;
}

/* infer_diffusers_model_type's Flux rule: dev has the guidance embedder,
 * schnell not; Fill and Depth differ by img_in's input channels. */
static dc_status *sf_detect_flux(const dc_st_file *f, const sf_family **out) {
  const dc_st_tensor *in = sf_find_dit(f, "img_in.weight");
  int64_t c = in && in->rank == 2 ? in->dims[1] : -1;
  if (c == 384 || c == 128)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: a Flux transformer whose img_in takes %lld channels: FLUX.1 %s; diffc reads the "
                    "text-to-image FLUX.1-dev and FLUX.1-schnell transformers",
                    f->file.path, (long long)c, c == 384 ? "Fill" : "Depth");
  *out = sf_find_dit(f, "guidance_in.in_layer.bias") ? &sf_families[SF_FLUX_DEV] : &sf_families[SF_FLUX_SCHNELL];
  return NULL;
}

/* Its SD3 rules: 38 joint blocks are SD3.5 Large, a second image attention
 * (attn2) SD3.5 Medium, neither SD3 Medium. */
static dc_status *sf_detect_sd3(const dc_st_file *f, const sf_family **out) {
  const char *t5 = sf_first_with_prefix(f, "text_encoders.t5xxl.");
  if (t5)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: an SD3 checkpoint with a T5 encoder (\"%s\"): diffc does not read T5 from a single file "
                    "yet; it reads SD3 files of the transformer (and VAE), or with CLIP-L and CLIP-G only "
                    "(StableDiffusion3Pipeline then runs without T5, as diffusers allows)",
                    f->file.path, t5);
  if (sf_find_dit(f, "joint_blocks.37.x_block.mlp.fc1.weight")) *out = &sf_families[SF_SD35_LARGE];
  else if (sf_find_dit(f, "joint_blocks.0.x_block.attn2.qkv.weight")) *out = &sf_families[SF_SD35_MEDIUM];
  else *out = &sf_families[SF_SD3_MEDIUM];
  return NULL;
}

/* A file of a whole pipeline: SD's, or SD3's with its CLIP text encoders;
 * a Flux or SD3 transformer (and VAE) alone is one model. */
static int sf_is_pipeline_file(const dc_st_file *f, const sf_family *fam) {
  return !fam->dit || sf_first_with_prefix(f, "text_encoders.") != NULL;
}

/* *out stays NULL when f is no DiT. */
static dc_status *sf_detect_dit(const dc_st_file *f, const sf_family **out) {
  *out = NULL;
  if (sf_find_dit(f, "double_blocks.0.img_attn.norm.key_norm.scale")) return sf_detect_flux(f, out);
  if (sf_find_dit(f, "joint_blocks.0.context_block.adaLN_modulation.1.bias")) return sf_detect_sd3(f, out);
  return NULL;
}

/* SD2 is diffusers' rule (1024-wide cross-attention keys) or the OpenCLIP
 * text encoder under cond_stage_model.model.; SDXL is its rule (a 10th
 * OpenCLIP-bigG block) or the bigG encoder under conditioner.embedders.1:
 * the same for the released models, and a model with fewer blocks or
 * narrower widths than theirs is recognised too. */
static dc_status *sf_detect(const dc_st_file *f, const sf_family **out) {
  for (size_t i = 0; i < sizeof sf_unsupported / sizeof sf_unsupported[0]; i++)
    if (dc_st_find(f, sf_unsupported[i].key)) return sf_refuse(f, sf_unsupported[i].what, sf_unsupported[i].key);
  DC_TRY(sf_detect_dit(f, out));
  if (*out) return NULL;
  const dc_st_tensor *in = dc_st_find(f, SF_UNET_IN);
  if (!in) return sf_unknown_layout(f);
  DC_TRY(sf_check_unet_input(f, in));
  if (sf_last_dim(dc_st_find(f, SF_V2_KEY)) == 1024 || dc_st_find(f, "cond_stage_model.model.token_embedding.weight"))
    *out = &sf_families[SF_SD2];
  else if (dc_st_find(f, SF_XL_KEY) || dc_st_find(f, "conditioner.embedders.1.model.positional_embedding"))
    *out = &sf_families[SF_SDXL];
  else if (dc_st_find(f, "cond_stage_model.transformer.text_model.embeddings.position_embedding.weight"))
    *out = &sf_families[SF_SD1];
  else
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: an LDM UNet (\"%s\") without a text encoder diffc knows (SD1.x: "
                    "cond_stage_model.transformer.*, SD2.x: cond_stage_model.model.*, SDXL: "
                    "conditioner.embedders.0/1.*)",
                    f->file.path, SF_UNET_IN);
  return NULL;
}

/* ---- 2. where the configs come from ------------------------------------------- */

#ifndef DIFFC_SOURCE_DATA_DIR
#define DIFFC_SOURCE_DATA_DIR ""
#endif
#ifndef DIFFC_INSTALL_DATA_REL
#define DIFFC_INSTALL_DATA_REL "../share/diffc"
#endif

static int sf_is_data_dir(const char *dir) {
  char *p = dc_path_join(dir, "single_file");
  int ok = p && dc_dir_exists(p);
  dc_free(p);
  return ok;
}

/* DIFFC_INSTALL_DATA_REL beside the running executable: an installed diffc. */
static char *sf_installed_data_dir(void) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return NULL;
  exe[n] = 0;
  char *bin = dc_path_parent(exe), *dir = bin ? dc_path_join(bin, DIFFC_INSTALL_DATA_REL) : NULL;
  dc_free(bin);
  return dir;
}

/* diffc's data folder: $DIFFC_DATA_DIR, else the installed one, else the
 * source tree's (a diffc run from its build tree). */
static dc_status *sf_data_dir(char **out) {
  const char *env = getenv("DIFFC_DATA_DIR");
  if (env && *env) {
    if (!sf_is_data_dir(env))
      return dc_error(DC_ERR_IO,
                      "DIFFC_DATA_DIR=%s: no single_file/ folder there (diffc's data folder holds the defaults of "
                      "single-file checkpoints: data/ in diffc's source tree)",
                      env);
    *out = dc_strdup(env);
    return *out ? NULL : dc_nomem("finding diffc's data folder");
  }
  char *installed = sf_installed_data_dir();
  if (installed && sf_is_data_dir(installed)) {
    *out = installed;
    return NULL;
  }
  dc_status *st = NULL;
  if (DIFFC_SOURCE_DATA_DIR[0] && sf_is_data_dir(DIFFC_SOURCE_DATA_DIR))
    st = (*out = dc_strdup(DIFFC_SOURCE_DATA_DIR)) ? NULL : dc_nomem("finding diffc's data folder");
  else
    st = dc_error(DC_ERR_IO,
                  "diffc's data folder (the defaults of single-file checkpoints) is neither %s nor %s; set "
                  "DIFFC_DATA_DIR to it, or pass a diffusers pipeline folder of the model's family as the config",
                  installed ? installed : "(no installed diffc)",
                  DIFFC_SOURCE_DATA_DIR[0] ? DIFFC_SOURCE_DATA_DIR : "(no source tree compiled in)");
  dc_free(installed);
  return st;
}

typedef struct {
  char *root; /* the pipeline folder the configs come from */
  char *data; /* diffc's data folder when they are the bundled defaults, else NULL */
  dc_json_doc model_index;
} sf_configs;

static void sf_configs_free(sf_configs *c) {
  dc_free(c->root);
  dc_free(c->data);
  dc_json_free(&c->model_index);
  memset(c, 0, sizeof *c);
}

/* The folder's model_index.json must name the family's pipeline. */
static dc_status *sf_check_model_index(const sf_configs *c, const sf_family *fam, const char *file) {
  const char *cls = NULL;
  DC_TRY(dc_json_str(&c->model_index, "_class_name", NULL, &cls));
  if (cls && !strcmp(cls, fam->pipeline)) return NULL;
  return dc_error(DC_ERR_MISMATCH, "%s: \"_class_name\" is %s%s%s, but %s is an %s checkpoint (%s)",
                  c->model_index.path,
                  cls ? "\"" : "", cls ? cls : "absent", cls ? "\"" : "", file, fam->label, fam->pipeline);
}

static dc_status *sf_configs_find(const sf_family *fam, const char *config_dir, const char *file, sf_configs *c) {
  memset(c, 0, sizeof *c);
  dc_status *st = NULL;
  if (config_dir) {
    if (!dc_dir_exists(config_dir))
      return dc_error(DC_ERR_IO, "%s: no such directory (the config of %s: a diffusers %s folder)", config_dir, file,
                      fam->pipeline);
    c->root = dc_strdup(config_dir);
  } else {
    DC_TRY(sf_data_dir(&c->data));
    char *sf = dc_path_join(c->data, "single_file");
    c->root = sf ? dc_path_join(sf, fam->name) : NULL;
    dc_free(sf);
  }
  char *mi = c->root ? dc_path_join(c->root, "model_index.json") : NULL;
  if (!mi) st = dc_nomem("finding a checkpoint's configs");
  else if (!dc_file_exists(mi))
    st = dc_error(DC_ERR_IO, "%s: no model_index.json (the config of %s must be a diffusers %s folder)", c->root, file,
                  fam->pipeline);
  if (!st) st = dc_json_load(mi, &c->model_index);
  if (!st) st = sf_check_model_index(c, fam, file);
  dc_free(mi);
  if (st) sf_configs_free(c);
  return st;
}

/* <root>/<component>/<name>, which must exist. */
static dc_status *sf_config_file(const sf_configs *c, const char *component, const char *name, char **out) {
  char *dir = dc_path_join(c->root, component);
  *out = dir ? dc_path_join(dir, name) : NULL;
  dc_free(dir);
  if (!*out) return dc_nomem("finding a checkpoint's configs");
  if (dc_file_exists(*out)) return NULL;
  dc_status *st =
      dc_error(DC_ERR_IO, "%s: no such file (a diffusers pipeline folder has %s/%s)", *out, component, name);
  dc_free(*out);
  *out = NULL;
  return st;
}

/* ---- 3. the facts the mapping needs --------------------------------------------- */

static dc_status *sf_unet_facts(const char *path, sf_facts *facts) {
  dc_json_doc d;
  DC_TRY(dc_json_load(path, &d));
  const char *add = NULL, *cls = NULL;
  dc_status *st = dc_json_int(&d, "layers_per_block", 2, &facts->unet_per_block);
  if (!st && facts->unet_per_block < 1)
    st = dc_error(DC_ERR_FORMAT, "%s: \"layers_per_block\" must be at least 1", path);
  if (!st) st = dc_json_str(&d, "addition_embed_type", NULL, &add);
  if (!st) st = dc_json_str(&d, "class_embed_type", NULL, &cls);
  if (!st) {
    facts->unet_per_block += 1;
    /* convert_ldm_unet_checkpoint: LDM's label_emb is whichever embedding the config has */
    facts->unet_label_emb = add && !strcmp(add, "text_time")                            ? "add_embedding"
                            : cls && (!strcmp(cls, "timestep") || !strcmp(cls, "projection")) ? "class_embedding"
                                                                                               : NULL;
  }
  dc_json_free(&d);
  return st;
}

static dc_status *sf_vae_facts(const char *path, sf_facts *facts) {
  dc_json_doc d;
  DC_TRY(dc_json_load(path, &d));
  const cJSON *up = cJSON_GetObjectItemCaseSensitive(d.root, "up_block_types");
  dc_status *st = NULL;
  if (!up) facts->vae_up_blocks = 1; /* AutoencoderKL's default ("UpDecoderBlock2D",) */
  else if (!cJSON_IsArray(up) || cJSON_GetArraySize(up) < 1)
    st = dc_error(DC_ERR_FORMAT, "%s: \"up_block_types\" must be a non-empty list, got a %s", path,
                  dc_json_type_name(up));
  else facts->vae_up_blocks = cJSON_GetArraySize(up);
  dc_json_free(&d);
  return st;
}

static dc_status *sf_te_facts(const char *path, sf_facts *facts) {
  dc_json_doc d;
  DC_TRY(dc_json_load(path, &d));
  dc_status *st = dc_json_int(&d, "num_hidden_layers", 12, &facts->te_layers);
  dc_json_free(&d);
  return st;
}

/* ---- 4. the source ------------------------------------------------------------------ */

typedef struct {
  dc_st_file file; /* the checkpoint, mapped once */
  sf_views views;  /* every diffusers tensor: the folders' entries point at these */
  int clip_l_identity; /* SD3: CLIP-L's text_projection is the identity, not a tensor */
} sf_owned;

static void sf_close_owned(void *p) {
  sf_owned *o = p;
  if (!o) return;
  sf_views_free(&o->views);
  dc_st_close(&o->file);
  dc_free(o);
}

static dc_folder *sf_folder_of(dc_pipeline_source *s, sf_comp comp) {
  dc_folder *const folders[SF_NCOMP] = {&s->unet, &s->vae, &s->text_encoder, &s->text_encoder_2, &s->transformer};
  return folders[comp];
}

static dc_status *sf_model_folder(sf_owned *o, sf_comp comp, const char *config, dc_folder *out);

/* The component's views (contiguous: sorted by component) as the source's folder. */
static dc_status *sf_component(dc_pipeline_source *s, sf_owned *o, sf_comp comp, const char *config) {
  return sf_model_folder(o, comp, config, sf_folder_of(s, comp));
}

static const char *const sf_clip_vocab[] = {"vocab.json", "merges.txt"};

/* The bundled tokenizers hold only tokenizer_config.json: the CLIP BPE files
 * are stored once, in <data>/clip_tokenizer. */
static dc_status *sf_add_clip_vocab(const sf_configs *c, dc_text_files *fs) {
  for (int i = 0; i < 2; i++) {
    if (dc_text_files_find(fs, sf_clip_vocab[i])) continue;
    char *dir = dc_path_join(c->data, "clip_tokenizer"), *path = dir ? dc_path_join(dir, sf_clip_vocab[i]) : NULL;
    char *text = NULL;
    size_t size = 0;
    dc_status *st = path ? dc_file_read_all(path, &text, &size) : dc_nomem("reading a tokenizer");
    if (!st) st = dc_text_files_add(fs, sf_clip_vocab[i], text, size);
    dc_free(text);
    dc_free(path);
    dc_free(dir);
    DC_TRY(st);
  }
  return NULL;
}

static dc_status *sf_tokenizer(const sf_configs *c, const char *name, dc_text_files *out) {
  char *dir = dc_path_join(c->root, name);
  if (!dir) return dc_nomem("reading a tokenizer");
  dc_status *st = dc_dir_exists(dir) ? dc_text_files_read_dir(dir, dc_clip_tokenizer_file_names, out)
                                     : dc_error(DC_ERR_IO, "%s: no such directory (the pipeline's %s)", dir, name);
  if (!st && c->data) st = sf_add_clip_vocab(c, out);
  for (int i = 0; i < 2 && !st; i++)
    if (!dc_text_files_find(out, sf_clip_vocab[i]))
      st = dc_error(DC_ERR_IO, "%s: no %s (a CLIP tokenizer's vocabulary is vocab.json and merges.txt)", dir,
                    sf_clip_vocab[i]);
  dc_free(dir);
  return st;
}

static dc_status *sf_scheduler(const sf_configs *c, dc_text_files *out) {
  static const char *const names[] = {"scheduler_config.json", NULL};
  char *path = NULL, *dir = dc_path_join(c->root, "scheduler");
  dc_status *st = dir ? sf_config_file(c, "scheduler", names[0], &path) : dc_nomem("reading a scheduler");
  if (!st) st = dc_text_files_read_dir(dir, names, out);
  dc_free(path);
  dc_free(dir);
  return st;
}

static dc_status *sf_read_facts(char *const *configs, sf_facts *facts) {
  DC_TRY(sf_unet_facts(configs[SF_UNET], facts));
  DC_TRY(sf_vae_facts(configs[SF_VAE], facts));
  return sf_te_facts(configs[SF_TE], facts);
}

/* Everything after the family is known; configs[] are freed by the caller. */
static dc_status *sf_assemble(dc_pipeline_source *s, sf_owned *o, const sf_family *fam, const sf_configs *c,
                              char **configs) {
  int ncomp = fam->te2_prefix ? SF_TE2 + 1 : SF_TE2;
  for (int k = 0; k < ncomp; k++) DC_TRY(sf_config_file(c, sf_comp_names[k], "config.json", &configs[k]));
  sf_facts facts = {0};
  DC_TRY(sf_read_facts(configs, &facts));
  DC_TRY(sf_map_tensors(&o->file, fam, &facts, &o->views));
  for (int k = 0; k < ncomp; k++) DC_TRY(sf_component(s, o, (sf_comp)k, configs[k]));
  s->has_text_encoder_2 = ncomp == SF_TE2 + 1;
  DC_TRY(sf_tokenizer(c, "tokenizer", &s->tokenizer));
  if (s->has_text_encoder_2) DC_TRY(sf_tokenizer(c, "tokenizer_2", &s->tokenizer_2));
  DC_TRY(sf_scheduler(c, &s->scheduler));
  /* StableDiffusionXLPipeline's default is true; StableDiffusionPipeline has no such option */
  if (s->has_text_encoder_2)
    DC_TRY(dc_json_bool(&c->model_index, "force_zeros_for_empty_prompt", 1, &s->force_zeros_for_empty_prompt));
  /* from_single_file never loads a safety checker (SINGLE_FILE_OPTIONAL_COMPONENTS), and a
   * single file holds none */
  s->has_safety_checker = 0;
  return NULL;
}

static dc_status *sf_assemble_sd3(dc_pipeline_source *s, sf_owned *o, const sf_family *fam, const sf_configs *c,
                                  char **configs);

dc_status *dc_single_file_open(const char *path, const char *config_dir, dc_pipeline_source *out) {
  memset(out, 0, sizeof *out);
  sf_owned *o = dc_calloc(1, sizeof *o);
  out->origin = dc_strdup(path);
  if (!o || !out->origin) {
    dc_free(o);
    dc_free(out->origin);
    out->origin = NULL;
    return dc_nomem("opening a checkpoint");
  }
  out->owned = o;
  out->close_owned = sf_close_owned;
  const sf_family *fam = NULL;
  sf_configs c = {0};
  char *configs[SF_NCOMP] = {NULL};
  dc_status *st = dc_st_open(path, &o->file);
  if (!st) st = sf_detect(&o->file, &fam);
  if (!st && !sf_is_pipeline_file(&o->file, fam))
    st = dc_error(DC_ERR_UNSUPPORTED,
                  "%s: a %s transformer checkpoint, not a whole pipeline: it compiles as one model "
                  "(dc_single_file_open_model; diffc FILE -o PLAN)",
                  path, fam->label);
  if (!st) st = sf_configs_find(fam, config_dir, path, &c);
  if (!st) st = (out->class_name = dc_strdup(fam->pipeline)) ? NULL : dc_nomem("opening a checkpoint");
  if (!st) out->kind = dc_pipeline_class_kind(out->class_name);
  if (!st) out->family = fam->label;
  if (!st) st = fam->dit ? sf_assemble_sd3(out, o, fam, &c, configs) : sf_assemble(out, o, fam, &c, configs);
  for (int k = 0; k < SF_NCOMP; k++) dc_free(configs[k]);
  sf_configs_free(&c);
  if (st) dc_pipeline_source_close(out);
  return st;
}

/* ---- a DiT's transformer: one model ----------------------------------------------- */

/* <root>/<component>/config.json, root being config_dir (a diffusers
 * pipeline folder; for the transformer also its own model folder) or the
 * bundled <data>/single_file/<family>. */
static dc_status *sf_dit_config(const sf_family *fam, const char *config_dir, const char *file, sf_comp comp,
                                char **out) {
  *out = NULL;
  char *data = NULL, *root = NULL;
  if (config_dir) {
    if (!dc_dir_exists(config_dir))
      return dc_error(DC_ERR_IO, "%s: no such directory (the config of %s: a diffusers %s folder)", config_dir, file,
                      fam->pipeline);
    root = dc_strdup(config_dir);
  } else {
    DC_TRY(sf_data_dir(&data));
    char *sf = dc_path_join(data, "single_file");
    root = sf ? dc_path_join(sf, fam->name) : NULL;
    dc_free(sf);
  }
  char *dir = root ? dc_path_join(root, sf_comp_names[comp]) : NULL;
  char *path = dir ? dc_path_join(dir, "config.json") : NULL;
  char *own = config_dir && comp == SF_TRANSFORMER && root ? dc_path_join(root, "config.json") : NULL;
  dc_status *st = !path ? dc_nomem("finding a checkpoint's configs") : NULL;
  if (!st && dc_file_exists(path)) *out = path, path = NULL;
  else if (!st && own && dc_file_exists(own)) *out = own, own = NULL;
  else if (!st)
    st = dc_error(DC_ERR_IO, "%s: no such file (the %s config of %s, %s %s checkpoint%s: --config names a diffusers %s "
                  "folder)",
                  path, sf_comp_names[comp], file, fam->label[0] == 'S' ? "an" : "a", fam->label,
                  comp == SF_VAE ? " with a VAE (first_stage_model.*)" : "", fam->pipeline);
  dc_free(own);
  dc_free(path);
  dc_free(dir);
  dc_free(root);
  dc_free(data);
  return st;
}

/* The config must be the family's class and, for Flux, have the guidance
 * embedder exactly when the file has one (dev vs schnell). */
static dc_status *sf_dit_facts(const sf_family *fam, const char *file, const char *config, sf_facts *facts) {
  dc_json_doc d;
  DC_TRY(dc_json_load(config, &d));
  const char *cls = NULL;
  int flux = fam->dit == SF_DIT_FLUX, guidance = 0;
  int64_t heads = 0, head_dim = 0;
  facts->dit_config = config;
  dc_status *st = dc_json_str(&d, "_class_name", NULL, &cls);
  if (!st && (!cls || strcmp(cls, fam->model_class) != 0))
    st = dc_error(DC_ERR_MISMATCH, "%s: \"_class_name\" is %s%s%s, but %s is a %s transformer (%s)", config,
                  cls ? "\"" : "", cls ? cls : "absent", cls ? "\"" : "", file, fam->label, fam->model_class);
  /* the classes' defaults where a key is absent */
  if (!st) st = dc_json_int(&d, "num_attention_heads", flux ? 24 : 18, &heads);
  if (!st) st = dc_json_int(&d, "attention_head_dim", flux ? 128 : 64, &head_dim);
  if (!st && (heads < 1 || head_dim < 1 || heads > (1 << 20) || head_dim > (1 << 20)))
    st = dc_error(DC_ERR_FORMAT, "%s: num_attention_heads %lld and attention_head_dim %lld must be positive", config,
                  (long long)heads, (long long)head_dim);
  if (!st) st = dc_json_int(&d, "num_layers", flux ? 19 : 18, &facts->dit_layers);
  if (!st && flux) st = dc_json_bool(&d, "guidance_embeds", 0, &guidance);
  if (!st && flux && guidance != (fam == &sf_families[SF_FLUX_DEV]))
    st = dc_error(DC_ERR_MISMATCH,
                  "%s: a %s transformer (it %s guidance_in), but the config %s has \"guidance_embeds\": %s", file,
                  fam->label, guidance ? "lacks" : "has", config, guidance ? "true" : "false");
  facts->dit_dim = heads * head_dim;
  dc_json_free(&d);
  return st;
}

/* SD3 with its CLIP text encoders: the whole StableDiffusion3Pipeline but
 * T5 (text_encoder_3 stays closed: the pipeline feeds zeros in its place,
 * as diffusers does without it). */
static dc_status *sf_assemble_sd3(dc_pipeline_source *s, sf_owned *o, const sf_family *fam, const sf_configs *c,
                                  char **configs) {
  static const sf_comp comps[] = {SF_TRANSFORMER, SF_VAE, SF_TE, SF_TE2};
  for (int k = 0; k < 4; k++) DC_TRY(sf_config_file(c, sf_comp_names[comps[k]], "config.json", &configs[comps[k]]));
  sf_facts facts = {0};
  DC_TRY(sf_dit_facts(fam, o->file.file.path, configs[SF_TRANSFORMER], &facts));
  DC_TRY(sf_vae_facts(configs[SF_VAE], &facts));
  DC_TRY(sf_map_tensors(&o->file, fam, &facts, &o->views));
  o->clip_l_identity = 1;
  for (int k = 0; k < 4; k++) DC_TRY(sf_component(s, o, comps[k], configs[comps[k]]));
  s->has_text_encoder_2 = 1;
  s->clip_l_identity_projection = 1;
  DC_TRY(sf_tokenizer(c, "tokenizer", &s->tokenizer));
  DC_TRY(sf_tokenizer(c, "tokenizer_2", &s->tokenizer_2));
  DC_TRY(sf_scheduler(c, &s->scheduler));
  s->has_safety_checker = 0;
  return NULL;
}

/* The views of one component, checked against its config, as a folder over
 * the mapped file ("<file> (<component>)" in messages). */
static dc_status *sf_model_folder(sf_owned *o, sf_comp comp, const char *config, dc_folder *out) {
  const char *file = o->file.file.path;
  int a = 0, n = 0;
  while (a < o->views.n && o->views.v[a].comp < comp) a++;
  while (a + n < o->views.n && o->views.v[a + n].comp == comp) n++;
  DC_TRY(sf_check_component(file, comp, &o->views.v[a], n, config, comp == SF_TE && o->clip_l_identity));
  struct dc_folder_entry *e = dc_malloc(sizeof *e * (size_t)(n ? n : 1));
  char *dir = dc_asprintf("%s (%s)", file, sf_comp_names[comp]);
  dc_status *st = e && dir ? NULL : dc_nomem("presenting a checkpoint's model");
  for (int i = 0; i < n && !st; i++) {
    const sf_view *v = &o->views.v[a + i];
    e[i] = (struct dc_folder_entry){.name = v->t.name, .shard = 0, .tensor = &v->t, .transposed = v->transposed,
                                    .halves_swapped = v->halves_swapped};
  }
  if (!st) st = dc_folder_from_views(dir, config, &o->file, e, n, out);
  dc_free(e);
  dc_free(dir);
  return st;
}

/* SD3's VAE, when the file has one (first_stage_model.*), is mapped and
 * checked like the transformer (a file of another VAE fails naming the
 * tensor), though the model compiled is the transformer: its config and the
 * fact the mapping needs. */
static dc_status *sf_sd3_vae_config(const sf_family *fam, const char *config_dir, const dc_st_file *f, char **config,
                                    sf_facts *facts) {
  *config = NULL;
  if (fam->dit != SF_DIT_SD3 || !sf_first_with_prefix(f, "first_stage_model.")) return NULL;
  DC_TRY(sf_dit_config(fam, config_dir, f->file.path, SF_VAE, config));
  return sf_vae_facts(*config, facts);
}

static dc_status *sf_check_vae(sf_owned *o, const char *config) {
  dc_folder vae;
  DC_TRY(sf_model_folder(o, SF_VAE, config, &vae));
  dc_folder_close(&vae);
  return NULL;
}

dc_status *dc_single_file_open_model(const char *path, const char *config_dir, dc_folder *out) {
  memset(out, 0, sizeof *out);
  sf_owned *o = dc_calloc(1, sizeof *o);
  if (!o) return dc_nomem("opening a checkpoint");
  const sf_family *fam = NULL;
  char *config = NULL, *vae_config = NULL;
  sf_facts facts = {0};
  dc_status *st = dc_st_open(path, &o->file);
  if (!st) st = sf_detect(&o->file, &fam);
  if (!st && sf_is_pipeline_file(&o->file, fam))
    st = dc_error(DC_ERR_UNSUPPORTED, "%s: %s %s checkpoint%s is a whole pipeline, not one model", path,
                  fam->label[0] == 'S' ? "an" : "a", fam->label, fam->dit ? " with its text encoders" : "");
  if (!st) st = sf_dit_config(fam, config_dir, path, SF_TRANSFORMER, &config);
  if (!st) st = sf_dit_facts(fam, path, config, &facts);
  if (!st) st = sf_sd3_vae_config(fam, config_dir, &o->file, &vae_config, &facts);
  if (!st) st = sf_map_tensors(&o->file, fam, &facts, &o->views);
  if (!st && vae_config) st = sf_check_vae(o, vae_config);
  if (!st) st = sf_model_folder(o, SF_TRANSFORMER, config, out);
  dc_free(vae_config);
  dc_free(config);
  if (st) {
    sf_close_owned(o);
    return st;
  }
  out->owner = o;
  out->close_owner = sf_close_owned;
  return NULL;
}

dc_status *dc_single_file_holds_model(const char *path, int *yes) {
  dc_st_file f;
  const sf_family *fam = NULL;
  *yes = 0;
  DC_TRY(dc_st_open(path, &f));
  dc_status *st = sf_detect(&f, &fam);
  if (!st) *yes = !sf_is_pipeline_file(&f, fam);
  dc_st_close(&f);
  return st;
}
