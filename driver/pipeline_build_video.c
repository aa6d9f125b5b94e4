/* pipeline_build_video.c — CogVideoXPipeline (text to video) as one phased
 * module (pipeline_build.c has the image pipelines and the merger):
 *
 *   text             T5 on the prompt and on the negative prompt: the
 *                    transformer's encoder_hidden_states per CFG half
 *   prologue         empty until the hoist pass moves the transformer's
 *                    loop-invariant work here (the RoPE tables, the text
 *                    projection)
 *   denoise.uncond*  the transformer on the unconditional half (the host
 *                    skips it when guidance <= 1)
 *   denoise.cond*    the transformer on the conditional half
 *   decode           the VAE's decoder on "latents" [1, C, F, h, w] (the
 *                    host permutes the loop's [1, F, C, h, w] latents and
 *                    divides them by scaling_factor first)
 *
 * Shapes are static: size and frames are compile-time (--height, --width,
 * --num-frames; diffusers' defaults are the transformer's sample_height x
 * sample_width latents times the VAE's spatial factor, and its
 * sample_frames).  The pipeline makes one video per prompt (diffusers
 * fixes num_videos_per_prompt to 1). */
#include <stdio.h>
#include <string.h>

#include "pipeline_build_internal.h"

enum { T5_TOKENS_MAX = 512, FRAMES_MAX = 1024 };

/* ---- sizes ------------------------------------------------------------------ */

static dc_status *resolve_side(const char *flag, int64_t given, int64_t def, int64_t mult, const char *why,
                               int64_t *out) {
  *out = given ? given : def;
  if (*out > 0 && *out % mult == 0) return NULL;
  return dc_error(DC_ERR_ARGUMENT, "--%s %lld: must be a positive multiple of %lld (%s; default %lld)", flag,
                  (long long)*out, (long long)mult, why, (long long)def);
}

/* height, width: multiples of 8 (check_inputs) and of the VAE's factor
 * times the patch size (the transformer's patches). */
static dc_status *resolve_size(const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                               dc_pipeline_info *info) {
  const dc_folder *tr = &src->transformer;
  int64_t sh = 60, sw = 90, patch = 2, scale = pb_vae_scale(src);
  DC_TRY(pb_read_int(tr, "sample_height", 60, &sh));
  DC_TRY(pb_read_int(tr, "sample_width", 90, &sw));
  DC_TRY(pb_read_int(tr, "patch_size", 2, &patch));
  if (patch < 1) return dc_error(DC_ERR_FORMAT, "%s: patch_size %lld must be positive", tr->config.path, (long long)patch);
  int64_t mult = scale * patch;
  while (mult % 8) mult *= 2; /* a power of two times patch_size: its least common multiple with 8 */
  char why[192];
  snprintf(why, sizeof why, "diffusers asks for multiples of 8 and the transformer for whole %lld x %lld patches of "
           "the %lldx smaller latents", (long long)patch, (long long)patch, (long long)scale);
  DC_TRY(resolve_side("height", o->height, sh * scale, mult, why, &info->height));
  DC_TRY(resolve_side("width", o->width, sw * scale, mult, why, &info->width));
  info->vae_scale = scale, info->patch = patch;
  info->latent_h = info->height / scale, info->latent_w = info->width / scale;
  return NULL;
}

/* num_frames: (num_frames - 1) / temporal + 1 latent frames; with
 * patch_size_t the pipeline pads the latents to a multiple of it. */
static dc_status *resolve_frames(const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                                 dc_pipeline_info *info) {
  const dc_folder *tr = &src->transformer;
  int64_t def = 49, temporal = 4;
  DC_TRY(pb_read_int(tr, "sample_frames", 49, &def));
  DC_TRY(pb_read_int(&src->vae, "temporal_compression_ratio", 4, &temporal));
  if (temporal < 1)
    return dc_error(DC_ERR_FORMAT, "%s: temporal_compression_ratio %lld must be positive", src->vae.config.path,
                    (long long)temporal);
  const cJSON *pt = cJSON_GetObjectItemCaseSensitive(tr->config.root, "patch_size_t");
  if (pt && !cJSON_IsNull(pt))
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"patch_size_t\" is %g; diffc runs CogVideoXPipeline with the 2b and 5b "
                    "transformers (patch_size_t null), not CogVideoX 1.5's temporal patches",
                    tr->config.path, cJSON_IsNumber(pt) ? pt->valuedouble : 0.0);
  info->num_frames = o->num_frames ? o->num_frames : def;
  if (info->num_frames < 1 || info->num_frames > FRAMES_MAX)
    return dc_error(DC_ERR_ARGUMENT, "--num-frames %lld: must be 1..%d (default %lld, the transformer's sample_frames)",
                    (long long)info->num_frames, FRAMES_MAX, (long long)def);
  info->vae_scale_temporal = temporal;
  info->latent_frames = (info->num_frames - 1) / temporal + 1;
  return NULL;
}

dc_status *pb_resolve_video(const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                            dc_pipeline_info *info) {
  if (o->batch > 1)
    return dc_error(DC_ERR_ARGUMENT, "--batch %lld: %s makes one video per prompt (diffusers sets "
                    "num_videos_per_prompt to 1)", (long long)o->batch, src->class_name);
  if (o->clip_skip)
    return dc_error(DC_ERR_ARGUMENT, "--clip-skip %d: %s has no CLIP text encoder", o->clip_skip, src->class_name);
  info->batch = 1, info->has_uncond = 1;
  DC_TRY(resolve_size(src, o, info));
  DC_TRY(resolve_frames(src, o, info));
  DC_TRY(pb_read_int(&src->transformer, "in_channels", 16, &info->latent_channels));
  info->t5_tokens = o->max_sequence_length ? o->max_sequence_length : 226; /* the pipeline's max_sequence_length */
  if (info->t5_tokens < 1 || info->t5_tokens > T5_TOKENS_MAX)
    return dc_error(DC_ERR_ARGUMENT, "--max-sequence-length %lld: must be 1..%d", (long long)info->t5_tokens,
                    T5_TOKENS_MAX);
  info->tokens = info->t5_tokens;
  double sf = 1.15258426;
  DC_TRY(dc_json_num(&src->vae.config, "scaling_factor", 1.15258426, &sf));
  if (!(sf != 0)) return dc_error(DC_ERR_FORMAT, "%s: scaling_factor must not be 0", src->vae.config.path);
  info->scaling_factor = sf, info->shift_factor = 0;
  return NULL;
}

/* ---- the module ---------------------------------------------------------------- */

/* T5's last_hidden_state of each half's ids ("negative_input_ids",
 * "input_ids"): [1, S, D] each. */
static dc_status *build_text(merger *g, const dc_pipeline_source *src, const dc_pipeline_info *info,
                             int32_t hidden[2]) {
  int32_t ids[2], out[2][2] = {{-1, -1}, {-1, -1}};
  int64_t dims[2] = {1, info->t5_tokens};
  DC_TRY(pb_add_input(g->m, "negative_input_ids", DT_I64, 2, dims, 0, &ids[0]));
  DC_TRY(pb_add_input(g->m, "input_ids", DT_I64, 2, dims, 0, &ids[1]));
  dc_input_shape shape = {"input_ids", 2, {1, info->t5_tokens}};
  dc_build_options bo[2];
  for (int h = 0; h < 2; h++) bo[h] = (dc_build_options){.shapes = &shape, .nshapes = 1, .clip_hidden_index = -1};
  DC_TRY(pb_encode_halves(g, &src->text_encoder, bo, "text_encoder", ids, (const char *const[]){"last_hidden_state"},
                          1, 1, out));
  hidden[0] = out[0][0], hidden[1] = out[1][0];
  return NULL;
}

/* The type of component c's input `name` (the pipeline's input for it takes
 * the same: the timestep's dtype is the builder's choice). */
static const dc_type *input_type(const dc_module *c, const char *name) {
  for (int32_t i = 0; i < c->nnodes; i++)
    if (c->nodes[i].op == OP_INPUT && !strcmp(c->inputs[c->nodes[i].ref].name, name)) return &c->nodes[i].type;
  return NULL;
}

/* The transformer once per CFG half, each in its loop phase: inputs
 * "sample.<half>" [1, F, C, h, w] and "timestep.<half>", output
 * "noise_pred.<half>". */
static dc_status *build_denoise(merger *g, const dc_pipeline_source *src, const dc_pipeline_info *info,
                                const int32_t hidden[2], const int32_t phase[2]) {
  dc_module *m = g->m;
  int64_t x[5] = {1, info->latent_frames, info->latent_channels, info->latent_h, info->latent_w};
  const dc_type *hs = &m->nodes[hidden[1]].type;
  dc_input_shape shapes[3] = {{"hidden_states", 5, {x[0], x[1], x[2], x[3], x[4]}},
                              {"encoder_hidden_states", 3, {hs->dims[0], hs->dims[1], hs->dims[2]}},
                              {"timestep", 1, {1}}};
  dc_build_options bo = {.shapes = shapes, .nshapes = 3, .clip_hidden_index = -1};
  dc_module *c = NULL;
  DC_TRY(pb_build_component(&src->transformer, &bo, &c));
  const dc_type *tt = input_type(c, "timestep");
  static const char *const half_name[2] = {"uncond", "cond"};
  dc_status *st = tt ? NULL : dc_error(DC_ERR_INTERNAL, "pipeline: the transformer has no \"timestep\" input");
  for (int h = 0; h < 2 && !st; h++) {
    char name[64];
    int32_t xs = -1, ts = -1, out = -1;
    snprintf(name, sizeof name, "sample.%s", half_name[h]);
    st = pb_add_input(m, name, DT_F32, 5, x, phase[h], &xs);
    snprintf(name, sizeof name, "timestep.%s", half_name[h]);
    if (!st) st = pb_add_input(m, name, tt->dtype, tt->rank, tt->dims, phase[h], &ts);
    binding b[] = {{"hidden_states", xs}, {"encoder_hidden_states", hidden[h]}, {"timestep", ts}};
    if (!st) st = pb_merge(g, c, "transformer", phase[h], b, 3, (const char *const[]){"sample"}, 1, &out);
    snprintf(name, sizeof name, "noise_pred.%s", half_name[h]);
    if (!st) st = dc_module_add_output(m, name, out);
  }
  dc_module_destroy(c);
  return st;
}

/* The VAE's decoder on "latents" [1, C, F, h, w]: output "image" [1, 3,
 * frames, H, W] (the frames its frame batching makes). */
static dc_status *build_decode(merger *g, const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                               const dc_pipeline_info *info, int32_t phase) {
  int64_t z[5] = {1, info->latent_channels, info->latent_frames, info->latent_h, info->latent_w};
  int32_t video;
  dc_status *st = pb_merge_vae_decode(g, src, o, 5, z, phase, &video);
  const dc_type *vt = st ? NULL : &g->m->nodes[video].type;
  if (vt && (vt->rank != 5 || vt->dims[0] != 1 || vt->dims[1] != 3 || vt->dims[3] != info->height ||
             vt->dims[4] != info->width))
    st = dc_error(DC_ERR_INTERNAL, "pipeline: the VAE decodes the latents to a %d-d value, not [1, 3, frames, %lld, "
                  "%lld]", vt->rank, (long long)info->height, (long long)info->width);
  return st ? st : dc_module_add_output(g->m, "image", video);
}

dc_status *pb_build_video(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_pipeline_info *info,
                          dc_module *m) {
  merger g = {m, NULL, 0};
  int32_t text, prologue, denoise[2], decode;
  int32_t hidden[2] = {-1, -1};
  if ((text = dc_module_add_phase(m, "text", 0)) < 0 || (prologue = dc_module_add_phase(m, "prologue", 0)) < 0 ||
      (denoise[0] = dc_module_add_phase(m, "denoise.uncond", 1)) < 0 ||
      (denoise[1] = dc_module_add_phase(m, "denoise.cond", 1)) < 0 || (decode = dc_module_add_phase(m, "decode", 0)) < 0)
    return dc_nomem("building the pipeline");
  (void)text, (void)prologue;
  dc_status *st = build_text(&g, src, info, hidden);
  if (!st) st = build_denoise(&g, src, info, hidden, denoise);
  if (!st) st = build_decode(&g, src, o, info, decode);
  if (!st) info->frames = m->nodes[m->outputs[m->noutputs - 1].node].type.dims[2];
  if (!st) st = pb_pipeline_facts(m, src);
  dc_free(g.weight_node);
  return st;
}
