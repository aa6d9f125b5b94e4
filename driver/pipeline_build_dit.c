/* pipeline_build_dit.c — FluxPipeline and StableDiffusion3Pipeline as one
 * phased module (pipeline_build.c has the SD pipelines and the merger).
 *
 *   text             CLIP (pooled; SD3: two CLIPs' penultimate states and
 *                    pooled embeds) and T5 on the prompt (SD3: and on the
 *                    negative prompt): the transformer's
 *                    encoder_hidden_states and pooled_projections
 *   prologue         Flux's img_ids, txt_ids and guidance (inputs the host
 *                    sets once); the hoist pass moves the transformer's
 *                    loop-invariant work here (RoPE tables, the context and
 *                    pooled-text embedders)
 *   denoise.uncond*  SD3's unconditional half (none for Flux, which is
 *                    guidance-distilled and runs without CFG)
 *   denoise.cond*    the transformer on the conditional half
 *   decode           the VAE's decoder (the host unpacks Flux's tokens and
 *                    applies scaling_factor and shift_factor first)
 *
 * SD3's text, as diffusers builds it: the two CLIPs' hidden states side by
 * side (768 + 1280), zero-padded to T5's width, then T5's tokens after them
 * along the sequence; T5 may be absent (model_index.json null), and zeros
 * of its shape stand in.  The zeros are pipeline inputs ("*_zeros") the host
 * fills, so no backend needs constants. */
#include <stdio.h>
#include <string.h>

#include "pipeline_build_internal.h"

enum { T5_TOKENS_MAX = 512 };

/* ---- sizes ------------------------------------------------------------------ */

/* --height/--width (or the default), a positive multiple of `mult`, as
 * diffusers' check_inputs demands (Flux rounds other sizes down with a
 * warning; diffc asks for the size it will make). */
static dc_status *resolve_side(const char *flag, int64_t given, int64_t def, int64_t mult, const char *why,
                               int64_t *out) {
  *out = given ? given : def;
  if (*out > 0 && *out % mult == 0) return NULL;
  return dc_error(DC_ERR_ARGUMENT, "--%s %lld: must be a positive multiple of %lld (%s; default %lld)", flag,
                  (long long)*out, (long long)mult, why, (long long)def);
}

static dc_status *resolve_t5_tokens(const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                                    dc_pipeline_info *info) {
  int def = src->kind == DC_PIPE_FLUX ? 512 : 256; /* the pipelines' max_sequence_length defaults */
  info->t5_tokens = o->max_sequence_length ? o->max_sequence_length : def;
  if (info->t5_tokens < 1 || info->t5_tokens > T5_TOKENS_MAX)
    return dc_error(DC_ERR_ARGUMENT, "--max-sequence-length %lld: must be 1..%d (diffusers refuses more)",
                    (long long)info->t5_tokens, T5_TOKENS_MAX);
  return NULL;
}

dc_status *pb_resolve_dit(const dc_pipeline_source *src, const dc_pipeline_build_options *o, dc_pipeline_info *info) {
  int flux = src->kind == DC_PIPE_FLUX;
  const dc_folder *tr = &src->transformer;
  int64_t scale = pb_vae_scale(src), sample = 128, patch = 2, in_channels = 0;
  info->vae_scale = scale;
  if (flux) { /* FluxPipeline: default_sample_size 128; latents packed 2x2, so sides are multiples of 2 x scale */
    DC_TRY(pb_read_int(tr, "in_channels", 64, &in_channels));
    if (in_channels % 4)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: in_channels %lld is not 4 x the latent channels (the pipeline packs 2x2 "
                      "latents into each token)", tr->config.path, (long long)in_channels);
    info->latent_channels = in_channels / 4;
    info->patch = 2;
    DC_TRY(dc_json_bool(&tr->config, "guidance_embeds", 0, &info->guidance_embeds));
  } else { /* SD3: the transformer's sample_size; sides divisible by scale x patch_size */
    DC_TRY(pb_read_int(tr, "sample_size", 128, &sample));
    DC_TRY(pb_read_int(tr, "patch_size", 2, &patch));
    DC_TRY(pb_read_int(tr, "in_channels", 16, &info->latent_channels));
    info->patch = patch;
    info->has_uncond = 1;
  }
  int64_t mult = scale * (flux ? 2 : patch);
  char why[96];
  snprintf(why, sizeof why, "the VAE's scale factor %lld x %s %lld", (long long)scale,
           flux ? "the latent packing" : "the patch size", (long long)(flux ? 2 : patch));
  DC_TRY(resolve_side("height", o->height, sample * scale, mult, why, &info->height));
  DC_TRY(resolve_side("width", o->width, sample * scale, mult, why, &info->width));
  info->latent_h = info->height / scale, info->latent_w = info->width / scale;
  info->batch = o->batch ? o->batch : 1;
  if (info->batch < 1 || info->batch > 64)
    return dc_error(DC_ERR_ARGUMENT, "--batch %lld: images per prompt must be 1..64", (long long)o->batch);
  DC_TRY(resolve_t5_tokens(src, o, info));
  double sf = 1.0, shift = 0;
  DC_TRY(dc_json_num(&src->vae.config, "scaling_factor", 0.18215, &sf));
  DC_TRY(dc_json_num(&src->vae.config, "shift_factor", 0, &shift));
  if (!(sf != 0)) return dc_error(DC_ERR_FORMAT, "%s: scaling_factor must not be 0", src->vae.config.path);
  info->scaling_factor = sf, info->shift_factor = shift;
  return NULL;
}

/* ---- text --------------------------------------------------------------------- */

typedef struct {
  int32_t hidden[2], pooled[2]; /* per half (0 negative, 1 prompt), repeated to the batch; -1 when absent */
} dit_text;

/* The ids inputs of one tokenizer: "<name>" for the prompt and, with CFG,
 * "negative_<name>". */
static dc_status *ids_inputs(dc_module *m, const char *name, int64_t tokens, int cfg, int32_t ids[2]) {
  char neg[64];
  int64_t dims[2] = {1, tokens};
  ids[0] = -1;
  snprintf(neg, sizeof neg, "negative_%s", name);
  if (cfg) DC_TRY(pb_add_input(m, neg, DT_I64, 2, dims, 0, &ids[0]));
  return pb_add_input(m, name, DT_I64, 2, dims, 0, &ids[1]);
}

/* T5 (or its zeros) on the halves: [batch, S, D] each. */
static dc_status *t5_text(merger *g, const dc_folder *f, const char *prefix, const char *ids_name,
                          const dc_pipeline_info *info, int cfg, int32_t hidden[2]) {
  int32_t ids[2], out[2][2] = {{-1, -1}, {-1, -1}};
  dc_input_shape shape = {"input_ids", 2, {1, info->t5_tokens}};
  dc_build_options bo[2];
  for (int h = 0; h < 2; h++) bo[h] = (dc_build_options){.shapes = &shape, .nshapes = 1, .clip_hidden_index = -1};
  DC_TRY(ids_inputs(g->m, ids_name, info->t5_tokens, cfg, ids));
  DC_TRY(pb_encode_halves(g, f, bo, prefix, ids, (const char *const[]){"last_hidden_state"}, 1, info->batch, out));
  hidden[0] = out[0][0], hidden[1] = out[1][0];
  return NULL;
}

static dc_status *concat(dc_module *m, int32_t a, int32_t b, int axis, const char *scope, int32_t *out) {
  dc_node c = dc_node_make(OP_CONCAT, 2, (int32_t[]){a, b});
  dc_node_set_int(&c, "axis", axis);
  return pb_add_op(m, c, scope, out);
}

/* FluxPipeline.encode_prompt: CLIP's pooler_output and T5's last state. */
static dc_status *flux_text(merger *g, const dc_pipeline_source *src, const dc_pipeline_info *info, dit_text *t) {
  int32_t ids[2], out[2][2] = {{-1, -1}, {-1, -1}};
  dc_input_shape shape = {"input_ids", 2, {1, info->tokens}};
  dc_build_options bo[2];
  for (int h = 0; h < 2; h++) bo[h] = (dc_build_options){.shapes = &shape, .nshapes = 1, .clip_hidden_index = -1};
  DC_TRY(ids_inputs(g->m, "input_ids", info->tokens, 0, ids));
  DC_TRY(pb_encode_halves(g, &src->text_encoder, bo, "text_encoder", ids, (const char *const[]){"pooler_output"}, 1,
                       info->batch, out));
  t->pooled[0] = -1, t->pooled[1] = out[1][0];
  return t5_text(g, &src->text_encoder_2, "text_encoder_2", "input_ids_2", info, 0, t->hidden);
}

/* A "*_zeros" input of [1, rows, cols] repeated to the batch (diffusers'
 * zero padding and T5's stand-in). */
static dc_status *zeros(dc_module *m, const char *name, int64_t rows, int64_t cols, int64_t batch, int32_t *out) {
  int32_t z;
  DC_TRY(pb_add_input(m, name, DT_F32, 3, (int64_t[]){1, rows, cols}, 0, &z));
  return pb_repeat_batch(m, z, batch, out);
}

/* One CLIP with projection over both halves: the penultimate state (or
 * clip_skip's) and the projected pooled embeds. */
static dc_status *sd3_clip(merger *g, const dc_folder *f, const char *prefix, const char *ids_name,
                           const dc_pipeline_build_options *o, const dc_pipeline_info *info, int identity,
                           int32_t out[2][2]) {
  int32_t ids[2];
  dc_input_shape shape;
  dc_build_options bo[2];
  DC_TRY(pb_half_options(f, 1, o->clip_skip, info->tokens, &shape, bo));
  bo[0].clip_identity_projection = bo[1].clip_identity_projection = identity;
  DC_TRY(ids_inputs(g->m, ids_name, info->tokens, 1, ids));
  return pb_encode_halves(g, f, bo, prefix, ids, (const char *const[]){"hidden_state", "text_embeds"}, 2, info->batch,
                       out);
}

/* StableDiffusion3Pipeline.encode_prompt (see the file's comment). */
static dc_status *sd3_text(merger *g, const dc_pipeline_source *src, const dc_pipeline_build_options *o,
                           const dc_pipeline_info *info, dit_text *t) {
  dc_module *m = g->m;
  int32_t l[2][2], gg[2][2], t5[2] = {-1, -1};
  DC_TRY(sd3_clip(g, &src->text_encoder, "text_encoder", "input_ids", o, info, src->clip_l_identity_projection, l));
  DC_TRY(sd3_clip(g, &src->text_encoder_2, "text_encoder_2", "input_ids_2", o, info, 0, gg));
  int64_t width = 0, clip_width = m->nodes[l[1][0]].type.dims[2] + m->nodes[gg[1][0]].type.dims[2];
  if (src->has_text_encoder_3) {
    DC_TRY(t5_text(g, &src->text_encoder_3, "text_encoder_3", "input_ids_3", info, 1, t5));
    width = m->nodes[t5[1]].type.dims[2];
  } else { /* no T5: zeros of (batch, max_sequence_length, joint_attention_dim) */
    DC_TRY(pb_read_int(&src->transformer, "joint_attention_dim", 4096, &width));
    DC_TRY(zeros(m, "t5_zeros", info->t5_tokens, width, info->batch, &t5[1]));
    t5[0] = t5[1];
  }
  if (width < clip_width)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: the text width %lld is narrower than the two CLIPs' %lld, which the "
                    "pipeline pads up to it", src->origin, (long long)width, (long long)clip_width);
  int32_t pad = -1;
  if (width > clip_width) DC_TRY(zeros(m, "clip_pad_zeros", info->tokens, width - clip_width, info->batch, &pad));
  for (int h = 0; h < 2; h++) {
    int32_t clip;
    DC_TRY(concat(m, l[h][0], gg[h][0], 2, "pipeline.concat_clip", &clip));
    if (pad >= 0) DC_TRY(concat(m, clip, pad, 2, "pipeline.pad_clip", &clip));
    DC_TRY(concat(m, clip, t5[h], 1, "pipeline.concat_t5", &t->hidden[h]));
    DC_TRY(concat(m, l[h][1], gg[h][1], 1, "pipeline.concat_pooled", &t->pooled[h]));
  }
  return NULL;
}

/* ---- the denoising loop --------------------------------------------------------- */

/* Flux's ids and guidance: inputs of the prologue, set once per image. */
typedef struct {
  int32_t img_ids, txt_ids, guidance;
} flux_conds;

static dc_status *flux_conditions(dc_module *m, const dc_pipeline_info *info, int32_t prologue, flux_conds *fc) {
  int64_t tokens = (info->latent_h / 2) * (info->latent_w / 2);
  DC_TRY(pb_add_input(m, "img_ids", DT_F32, 2, (int64_t[]){tokens, 3}, prologue, &fc->img_ids));
  DC_TRY(pb_add_input(m, "txt_ids", DT_F32, 2, (int64_t[]){info->t5_tokens, 3}, prologue, &fc->txt_ids));
  fc->guidance = -1;
  if (info->guidance_embeds) DC_TRY(pb_add_input(m, "guidance", DT_F32, 1, (int64_t[]){info->batch}, prologue, &fc->guidance));
  return NULL;
}

/* The transformer's latent input per half: Flux's packed tokens [B, hw/4,
 * 4C], SD3's [B, C, h, w]. */
static int sample_shape(const dc_pipeline_info *info, int64_t *dims) {
  int64_t b = info->batch, c = info->latent_channels, h = info->latent_h, w = info->latent_w;
  if (info->kind == DC_PIPE_FLUX) {
    dims[0] = b, dims[1] = (h / 2) * (w / 2), dims[2] = c * 4;
    return 3;
  }
  dims[0] = b, dims[1] = c, dims[2] = h, dims[3] = w;
  return 4;
}

static dc_status *build_denoise(merger *g, const dc_pipeline_source *src, const dc_pipeline_info *info,
                                const dit_text *t, const flux_conds *fc, const int32_t phase[2]) {
  dc_module *m = g->m;
  int flux = info->kind == DC_PIPE_FLUX;
  int64_t dims[4] = {0, 0, 0, 0};
  int rank = sample_shape(info, dims);
  const dc_type *hs = &m->nodes[t->hidden[1]].type, *pt = &m->nodes[t->pooled[1]].type;
  dc_input_shape shapes[7] = {{"hidden_states", rank, {dims[0], dims[1], dims[2], dims[3]}},
                              {"encoder_hidden_states", 3, {hs->dims[0], hs->dims[1], hs->dims[2]}},
                              {"pooled_projections", 2, {pt->dims[0], pt->dims[1]}},
                              {"timestep", 1, {info->batch}}};
  int nshapes = 4;
  if (flux) {
    shapes[nshapes++] = (dc_input_shape){"img_ids", 2, {dims[1], 3}};
    shapes[nshapes++] = (dc_input_shape){"txt_ids", 2, {info->t5_tokens, 3}};
    if (info->guidance_embeds) shapes[nshapes++] = (dc_input_shape){"guidance", 1, {info->batch}};
  }
  dc_build_options bo = {.shapes = shapes, .nshapes = nshapes, .clip_hidden_index = -1};
  dc_module *c = NULL;
  DC_TRY(pb_build_component(&src->transformer, &bo, &c));
  static const char *const half_name[2] = {"uncond", "cond"};
  dc_status *st = NULL;
  for (int h = info->has_uncond ? 0 : 1; h < 2 && !st; h++) {
    char name[64];
    int32_t x = -1, ts = -1, out = -1;
    snprintf(name, sizeof name, "sample.%s", half_name[h]);
    st = pb_add_input(m, name, DT_F32, rank, dims, phase[h], &x);
    snprintf(name, sizeof name, "timestep.%s", half_name[h]);
    if (!st) st = pb_add_input(m, name, DT_F32, 1, (int64_t[]){info->batch}, phase[h], &ts);
    binding b[] = {{"hidden_states", x},
                   {"encoder_hidden_states", t->hidden[h]},
                   {"pooled_projections", t->pooled[h]},
                   {"timestep", ts},
                   {"img_ids", flux ? fc->img_ids : -1},
                   {"txt_ids", flux ? fc->txt_ids : -1},
                   {"guidance", flux ? fc->guidance : -1}};
    if (!st) st = pb_merge(g, c, "transformer", phase[h], b, 7, (const char *const[]){"sample"}, 1, &out);
    snprintf(name, sizeof name, "noise_pred.%s", half_name[h]);
    if (!st) st = dc_module_add_output(m, name, out);
  }
  dc_module_destroy(c);
  return st;
}

/* ---- the whole ------------------------------------------------------------------------- */

dc_status *pb_build_dit(const dc_pipeline_source *src, const dc_pipeline_build_options *o, const dc_pipeline_info *info,
                        dc_module *m) {
  merger g = {m, NULL, 0};
  int32_t text, prologue, denoise[2] = {-1, -1}, decode;
  dit_text t = {{-1, -1}, {-1, -1}};
  flux_conds fc = {-1, -1, -1};
  dc_status *st = NULL;
  if ((text = dc_module_add_phase(m, "text", 0)) < 0 || (prologue = dc_module_add_phase(m, "prologue", 0)) < 0 ||
      (info->has_uncond && (denoise[0] = dc_module_add_phase(m, "denoise.uncond", 1)) < 0) ||
      (denoise[1] = dc_module_add_phase(m, "denoise.cond", 1)) < 0 || (decode = dc_module_add_phase(m, "decode", 0)) < 0)
    return dc_nomem("building the pipeline");
  (void)text;
  if (info->kind == DC_PIPE_FLUX) {
    st = flux_text(&g, src, info, &t);
    if (!st) st = flux_conditions(m, info, prologue, &fc);
  } else {
    st = sd3_text(&g, src, o, info, &t);
  }
  if (!st) st = build_denoise(&g, src, info, &t, &fc, denoise);
  if (!st) st = pb_build_decode(&g, src, o, info, decode);
  if (!st) st = pb_pipeline_facts(m, src);
  dc_free(g.weight_node);
  return st;
}
