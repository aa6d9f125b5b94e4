/* cogvideox_transformer.c — diffusers' CogVideoXTransformer3DModel
 * (models/transformers/cogvideox_transformer_3d.py) as an IR graph:
 * CogVideoX 1.0, 2b-style (3D sincos positions) and 5b-style (3D RoPE,
 * optionally with learned positions as the 5b image-to-video model), and
 * CogVideoX 1.5 (patch_size_t: patches span frames too; image-to-video
 * with ofs_embed_dim: an "ofs" input embedded like the timestep).
 *
 *   hidden_states [B,F,in_channels,H,W] (latent frames) -> patch_embed.proj
 *      per frame (1.5: per patch_size_t frames) to (F/p_t)*(H/p)*(W/p)
 *      video tokens (+ the sincos table, 2b)
 *   encoder_hidden_states [B,T,text_embed_dim] -> patch_embed.text_proj
 *   timestep [B] -> time_proj (Timesteps over the blocks' width)
 *      -> time_embedding -> emb [B,time_embed_dim]
 *   -> num_layers CogVideoXBlocks (attention over [text; video], RoPE on
 *      the video tokens when use_rotary_positional_embeddings),
 *      norm_final, norm_out (AdaLayerNorm: shift, scale), proj_out,
 *      unpatchify -> sample [B,F,out_channels,H,W]
 * The position tables come from the shapes, at compile time: the sincos
 * table as CogVideoXPatchEmbed computes it for the input's grid (it
 * recomputes it for any size other than the sample size), and the rotary
 * table as CogVideoXPipeline._prepare_rotary_positional_embeddings does,
 * so image_rotary_emb is not an input.  The blocks are frontend/blocks
 * (transformer_cogvideox.c and what it composes); this file reads the
 * config, states the inputs and strings the blocks together. */
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

enum { COG_PATH = 256, COG_MAX_LAYERS = 4096 };

typedef struct {
  const char *path; /* config.json, for messages */
  int64_t heads, head_dim, in_ch, out_ch, time_dim, text_dim, layers;
  int64_t sample_w, sample_h, sample_frames, patch, patch_t, tcr, max_text; /* patch_t 0: None */
  double freq_shift, eps, spatial_scale, temporal_scale;
  int64_t ofs_dim; /* ofs_embed_dim; 0: None */
  int flip_sin_to_cos, qkv_bias, rope, learned;
} cog_config;

/* ---- config ---------------------------------------------------------- */

static dc_status *unsupported(const dc_json_doc *d, const char *key, const char *supported) {
  char buf[96];
  return dc_error(DC_ERR_UNSUPPORTED, "%s: \"%s\" is %s, which diffc does not support (supported: %s)", d->path, key,
                  dc_json_show(cJSON_GetObjectItemCaseSensitive(d->root, key), buf, sizeof buf), supported);
}

static dc_status *cfg_string_is(const dc_json_doc *d, const char *key, const char *def, const char *const *ok,
                                const char *supported) {
  const char *v;
  DC_TRY(dc_json_str(d, key, def, &v));
  for (int i = 0; ok[i]; i++)
    if (v && !strcmp(v, ok[i])) return NULL;
  return unsupported(d, key, supported);
}

/* CogVideoX 1.5's patch_size_t (a Linear patch embedding over frame
 * groups), with the rotary positions alone as the released models have
 * them: the sincos and learned tables count the tokens of patch_size_t
 * None, so diffusers' forward fails with them. */
static dc_status *cfg_patch_t(const dc_json_doc *d, cog_config *c) {
  const cJSON *pt = cJSON_GetObjectItemCaseSensitive(d->root, "patch_size_t");
  if (!pt || cJSON_IsNull(pt)) return NULL;
  DC_TRY(dc_json_int_min(d, "patch_size_t", 1, 1, &c->patch_t));
  if (!c->rope || c->learned)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"patch_size_t\" is %lld but the positions are not the rotary ones "
                    "alone (\"use_rotary_positional_embeddings\" true, \"use_learned_positional_embeddings\" false); "
                    "diffusers' position tables do not fit patch_size_t's tokens", d->path, (long long)c->patch_t);
  return NULL;
}

/* CogVideoX 1.5 image-to-video's ofs embedding (diffusers tests `if
 * ofs_embed_dim:`, so 0 is None too), added to the time embedding: the
 * widths must agree for diffusers' emb + ofs_emb. */
static dc_status *cfg_ofs(const dc_json_doc *d, cog_config *c) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(d->root, "ofs_embed_dim");
  if (!o || cJSON_IsNull(o)) return NULL;
  DC_TRY(dc_json_int_min(d, "ofs_embed_dim", 0, 0, &c->ofs_dim));
  if (c->ofs_dim && c->ofs_dim != c->time_dim)
    return dc_error(DC_ERR_FORMAT, "%s: \"ofs_embed_dim\" is %lld but \"time_embed_dim\" is %lld; the ofs embedding "
                    "is added to the time embedding, so they must be equal", d->path, (long long)c->ofs_dim,
                    (long long)c->time_dim);
  return NULL;
}

/* What diffc builds of the keys that select other variants: the
 * activations of the released models; the affine norms every released
 * model has, and the patch conv's bias every 1.0 model has (1.5's Linear
 * patch embedding has one whatever patch_bias says). */
static dc_status *cfg_variants(const dc_json_doc *d, const cog_config *c) {
  DC_TRY(cfg_string_is(d, "activation_fn", "gelu-approximate", (const char *const[]){"gelu-approximate", NULL},
                       "\"gelu-approximate\""));
  DC_TRY(cfg_string_is(d, "timestep_activation_fn", "silu", (const char *const[]){"silu", "swish", NULL},
                       "\"silu\", \"swish\""));
  int affine, patch_bias;
  DC_TRY(dc_json_bool(d, "norm_elementwise_affine", 1, &affine));
  if (!affine) return unsupported(d, "norm_elementwise_affine", "true");
  DC_TRY(dc_json_bool(d, "patch_bias", 1, &patch_bias));
  return patch_bias || c->patch_t ? NULL : unsupported(d, "patch_bias", "true (or any with patch_size_t)");
}

/* Each position scheme's constraint on the widths, where diffusers raises
 * (get_3d_sincos_pos_embed halves dim/4 and 3*dim/4 again; the rotary
 * table splits a head into head_dim/4 + 2 * 3*head_dim/8 rotated pairs). */
static dc_status *cfg_positions(const dc_json_doc *d, cog_config *c) {
  DC_TRY(dc_json_bool(d, "use_rotary_positional_embeddings", 0, &c->rope));
  DC_TRY(dc_json_bool(d, "use_learned_positional_embeddings", 0, &c->learned));
  if (c->learned && !c->rope)
    return dc_error(DC_ERR_FORMAT, "%s: \"use_learned_positional_embeddings\" is true but "
                    "\"use_rotary_positional_embeddings\" is false; diffusers refuses that combination", d->path);
  int64_t dim = c->heads * c->head_dim;
  if (!c->rope && dim % 16)
    return dc_error(DC_ERR_FORMAT, "%s: the sincos position table needs a width (\"num_attention_heads\" x "
                    "\"attention_head_dim\") that is a multiple of 16, found %lld", d->path, (long long)dim);
  if (c->rope && c->head_dim % 16)
    return dc_error(DC_ERR_FORMAT, "%s: the 3D rotary table needs \"attention_head_dim\" a multiple of 16, found "
                    "%lld", d->path, (long long)c->head_dim);
  return NULL;
}

/* Defaults are CogVideoXTransformer3DModel.__init__'s. */
static dc_status *cfg_load(const dc_json_doc *d, cog_config *c) {
  memset(c, 0, sizeof *c);
  c->path = d->path;
  DC_TRY(dc_json_int_min(d, "num_attention_heads", 30, 1, &c->heads));
  DC_TRY(dc_json_int_min(d, "attention_head_dim", 64, 1, &c->head_dim));
  DC_TRY(dc_json_int_min(d, "in_channels", 16, 1, &c->in_ch));
  DC_TRY(dc_json_int_min(d, "out_channels", 16, 1, &c->out_ch));
  DC_TRY(dc_json_bool(d, "flip_sin_to_cos", 1, &c->flip_sin_to_cos));
  DC_TRY(dc_json_num(d, "freq_shift", 0.0, &c->freq_shift));
  DC_TRY(dc_json_int_min(d, "time_embed_dim", 512, 1, &c->time_dim));
  DC_TRY(dc_json_int_min(d, "text_embed_dim", 4096, 1, &c->text_dim));
  DC_TRY(dc_json_int_min(d, "num_layers", 30, 1, &c->layers));
  if (c->layers > COG_MAX_LAYERS)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"num_layers\" %lld is more than diffc builds (%d)", d->path,
                    (long long)c->layers, COG_MAX_LAYERS);
  DC_TRY(dc_json_bool(d, "attention_bias", 1, &c->qkv_bias));
  DC_TRY(dc_json_int_min(d, "sample_width", 90, 1, &c->sample_w));
  DC_TRY(dc_json_int_min(d, "sample_height", 60, 1, &c->sample_h));
  DC_TRY(dc_json_int_min(d, "sample_frames", 49, 1, &c->sample_frames));
  DC_TRY(dc_json_int_min(d, "patch_size", 2, 1, &c->patch));
  DC_TRY(dc_json_int_min(d, "temporal_compression_ratio", 4, 1, &c->tcr));
  DC_TRY(dc_json_int_min(d, "max_text_seq_length", 226, 1, &c->max_text));
  DC_TRY(dc_json_num(d, "norm_eps", 1e-5, &c->eps));
  DC_TRY(dc_json_num(d, "spatial_interpolation_scale", 1.875, &c->spatial_scale));
  DC_TRY(dc_json_num(d, "temporal_interpolation_scale", 1.0, &c->temporal_scale));
  if (!(c->spatial_scale > 0) || !(c->temporal_scale > 0))
    return dc_error(DC_ERR_FORMAT, "%s: \"spatial_interpolation_scale\" and \"temporal_interpolation_scale\" must be "
                    "positive, found %g and %g", d->path, c->spatial_scale, c->temporal_scale);
  if (c->sample_w < c->patch || c->sample_h < c->patch)
    return dc_error(DC_ERR_FORMAT, "%s: \"sample_height\" %lld and \"sample_width\" %lld must each be at least "
                    "\"patch_size\" %lld", d->path, (long long)c->sample_h, (long long)c->sample_w,
                    (long long)c->patch);
  DC_TRY(cfg_positions(d, c));
  DC_TRY(cfg_patch_t(d, c));
  DC_TRY(cfg_ofs(d, c));
  return cfg_variants(d, c);
}

/* ---- inputs ------------------------------------------------------------ */

typedef struct {
  int64_t x[5], ctx[3], t[1], ofs[1];
} cog_shapes;

static dc_status *bad_input(const char *name, const int64_t *have, int rank, const char *need, const char *why) {
  char b[160];
  return dc_error(DC_ERR_ARGUMENT, "input \"%s\" is %s but the model needs %s (%s)", name,
                  dc_dims_str(have, rank, b, sizeof b), need, why);
}

/* CogVideoX 1.5: whole frame groups (diffusers reshapes F into F / p_t
 * groups; its pipeline pads the latents to that), and a grid within the
 * base grid, whose rotary positions the pipeline slices. */
static dc_status *check_latent_t(const cog_config *c, const int64_t *x) {
  char need[160], why[224];
  int64_t bh = c->sample_h / c->patch, bw = c->sample_w / c->patch;
  snprintf(need, sizeof need, "[B,F,%lld,H,W] with F a multiple of %lld, H at most %lld and W at most %lld",
           (long long)c->in_ch, (long long)c->patch_t, (long long)(bh * c->patch), (long long)(bw * c->patch));
  snprintf(why, sizeof why, "patch_size_t %lld; the rotary grid is sliced from the base grid of sample_height and "
           "sample_width (%s)", (long long)c->patch_t, c->path);
  if (x[1] % c->patch_t || x[3] / c->patch > bh || x[4] / c->patch > bw)
    return bad_input("hidden_states", x, 5, need, why);
  return NULL;
}

/* The latent: in_channels, sides multiples of patch_size (the conv would
 * drop a remainder that diffusers then cannot unpatchify).  Learned
 * positions cover the sample size only: diffusers refuses another height
 * or width and swaps in a sincos table for another frame count, which
 * diffc does not. */
static dc_status *check_latent(const cog_config *c, const int64_t *x) {
  char need[160], why[224];
  snprintf(need, sizeof need, "[B,F,%lld,H,W] with H and W multiples of %lld", (long long)c->in_ch,
           (long long)c->patch);
  snprintf(why, sizeof why, "in_channels %lld, patch_size %lld (%s)", (long long)c->in_ch, (long long)c->patch,
           c->path);
  if (x[2] != c->in_ch || x[3] % c->patch || x[4] % c->patch || x[3] < c->patch || x[4] < c->patch)
    return bad_input("hidden_states", x, 5, need, why);
  if (c->patch_t) return check_latent_t(c, x);
  int64_t frames = (c->sample_frames - 1) / c->tcr + 1;
  if (c->learned && (x[1] != frames || x[3] != c->sample_h || x[4] != c->sample_w)) {
    snprintf(need, sizeof need, "[B,%lld,%lld,%lld,%lld]", (long long)frames, (long long)c->in_ch,
             (long long)c->sample_h, (long long)c->sample_w);
    snprintf(why, sizeof why, "use_learned_positional_embeddings: the learned table covers sample_frames %lld "
             "(%lld latent frames), sample_height and sample_width only (%s)", (long long)c->sample_frames,
             (long long)frames, c->path);
    return bad_input("hidden_states", x, 5, need, why);
  }
  return NULL;
}

/* hidden_states decides B; defaults: the sample size (sample_frames
 * compressed to latent frames as the config's docs say), max_text_seq_length
 * tokens.  The added position tables have max_text_seq_length text rows,
 * so diffusers' forward fails on any other text length with them. */
static dc_status *input_shapes(const cog_config *c, const dc_build_options *opt, cog_shapes *s) {
  char need[96], why[160];
  int64_t frames = (c->sample_frames - 1) / c->tcr + 1;
  if (c->patch_t) frames = (frames + c->patch_t - 1) / c->patch_t * c->patch_t; /* padded as the pipeline does */
  DC_TRY(dc_build_input_shape(opt, "hidden_states", 5,
                              (int64_t[]){1, frames, c->in_ch, c->sample_h, c->sample_w}, s->x));
  DC_TRY(check_latent(c, s->x));
  int64_t b = s->x[0];
  DC_TRY(dc_build_input_shape(opt, "encoder_hidden_states", 3, (int64_t[]){b, c->max_text, c->text_dim}, s->ctx));
  int fixed_text = !c->rope || c->learned;
  snprintf(need, sizeof need, fixed_text ? "[%lld,%lld,%lld]" : "[%lld,T,%lld]", (long long)b,
           (long long)(fixed_text ? c->max_text : c->text_dim), (long long)c->text_dim);
  snprintf(why, sizeof why, fixed_text ? "batch from \"hidden_states\", max_text_seq_length (the position table's "
           "text rows), text_embed_dim" : "batch from \"hidden_states\", and text_embed_dim");
  if (s->ctx[0] != b || s->ctx[2] != c->text_dim || (fixed_text && s->ctx[1] != c->max_text))
    return bad_input("encoder_hidden_states", s->ctx, 3, need, why);
  DC_TRY(dc_build_input_shape(opt, "timestep", 1, &b, s->t));
  snprintf(need, sizeof need, "[%lld]", (long long)b);
  if (s->t[0] != b) return bad_input("timestep", s->t, 1, need, "batch from \"hidden_states\"");
  if (!c->ofs_dim) return NULL;
  /* the image-to-video pipeline passes one ofs value, broadcast over the batch */
  DC_TRY(dc_build_input_shape(opt, "ofs", 1, (int64_t[]){1}, s->ofs));
  snprintf(need, sizeof need, "[1] or [%lld]", (long long)b);
  return s->ofs[0] == 1 || s->ofs[0] == b ? NULL : bad_input("ofs", s->ofs, 1, need, "one value, or one per sample");
}

static dc_status *add_input(dc_module *m, const char *name, int rank, const int64_t *dims, dc_input_init init,
                            int32_t *out) {
  dc_type t = {DT_F32, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  *out = dc_module_add_input(m, name, &t, init);
  return *out < 0 ? dc_nomem("adding the transformer's inputs") : NULL;
}

/* ---- the forward ------------------------------------------------------- */

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* emb = time_embedding(time_proj(timestep)), Timesteps over the blocks'
 * width; with ofs_embed_dim, + ofs_embedding(ofs_proj(ofs)). */
static dc_status *time_embedding(dc_gb *g, const cog_config *c, const cog_shapes *sh, int32_t *emb) {
  int32_t t, ofs;
  int64_t dim = c->heads * c->head_dim;
  DC_TRY(add_input(g->m, "timestep", 1, sh->t, INIT_TIMESTEP, &t));
  DC_TRY(blk_timesteps(g, "time_proj", t, dim, c->flip_sin_to_cos, c->freq_shift, &t));
  DC_TRY(blk_timestep_embedding(g, "time_embedding", t, dim, c->time_dim, emb));
  if (!c->ofs_dim) return NULL;
  DC_TRY(add_input(g->m, "ofs", 1, sh->ofs, INIT_NORMAL, &ofs));
  DC_TRY(blk_timesteps(g, "ofs_proj", ofs, c->ofs_dim, c->flip_sin_to_cos, c->freq_shift, &ofs));
  DC_TRY(blk_timestep_embedding(g, "ofs_embedding", ofs, c->ofs_dim, c->ofs_dim, &ofs));
  return gb_binary(g, OP_ADD, "ofs_embedding", *emb, ofs, emb);
}

/* patch_embed.pos_embedding [1, max_text + N, dim] (the persistent learned
 * table) added to text and video, each its own rows. */
static dc_status *learned_positions(dc_gb *g, const cog_config *c, int64_t n, int32_t *x, int32_t *ctx) {
  int64_t dim = c->heads * c->head_dim;
  int32_t table, part;
  DC_TRY(gb_param(g, "patch_embed", "pos_embedding", 3, (int64_t[]){1, c->max_text + n, dim}, &table));
  DC_TRY(gb_slice(g, "patch_embed", table, 1, 0, c->max_text, &part));
  DC_TRY(gb_binary(g, OP_ADD, "patch_embed", *ctx, part, ctx));
  DC_TRY(gb_slice(g, "patch_embed", table, 1, c->max_text, c->max_text + n, &part));
  return gb_binary(g, OP_ADD, "patch_embed", *x, part, x);
}

/* CogVideoXPatchEmbed: text_proj, the per-frame patch conv, and the
 * positions diffusers adds there (sincos or learned; the sincos table's
 * text rows are zeros, so the text is left as it is).  diffusers joins
 * text and video and splits them again right after; they stay apart here. */
static dc_status *patch_embed(dc_gb *g, const cog_config *c, const cog_shapes *sh, int32_t *x, int32_t *ctx) {
  int64_t dim = c->heads * c->head_dim, f = sh->x[1], h = sh->x[3] / c->patch, w = sh->x[4] / c->patch;
  DC_TRY(add_input(g->m, "hidden_states", 5, sh->x, INIT_NORMAL, x));
  DC_TRY(add_input(g->m, "encoder_hidden_states", 3, sh->ctx, INIT_NORMAL, ctx));
  DC_TRY(gb_linear(g, "patch_embed.text_proj", *ctx, c->text_dim, dim, 1, ctx));
  DC_TRY(blk_cogvideox_patch_video(g, "patch_embed", *x, c->in_ch, dim, c->patch, c->patch_t, x));
  if (c->learned) return learned_positions(g, c, f * h * w, x, ctx);
  if (c->rope) return NULL;
  return blk_cogvideox_sincos_pos(g, "patch_embed.pos_embedding", *x, f, h, w, c->spatial_scale, c->temporal_scale,
                                  x);
}

/* CogVideoX 1.5: [B, F'*h*w, C*p_t*p*p] -> [B,F'*p_t,C,h*p,w*p], diffusers'
 * 8-d permute (0,1,5,4,2,6,3,7) in two steps of at most 5 dims: the frames
 * and channels out of each token first, then the rows and columns. */
static dc_status *unpatchify_t(dc_gb *g, const cog_config *c, const cog_shapes *sh, int32_t x, int32_t *out) {
  int64_t b = sh->x[0], pt = c->patch_t, f = sh->x[1] / pt, p = c->patch, h = sh->x[3] / p, w = sh->x[4] / p;
  int64_t ch = c->out_ch;
  DC_TRY(gb_reshape(g, NULL, x, 5, (int64_t[]){b * f, h * w, ch, pt, p * p}, &x));
  DC_TRY(gb_permute(g, NULL, x, 5, (int64_t[]){0, 3, 2, 1, 4}, &x)); /* [.., p_t, C, h*w, p*p] */
  DC_TRY(gb_reshape(g, NULL, x, 5, (int64_t[]){b * f * pt * ch, h, w, p, p}, &x));
  DC_TRY(gb_permute(g, NULL, x, 5, (int64_t[]){0, 1, 3, 2, 4}, &x)); /* [.., h, p, w, p] */
  return gb_reshape(g, NULL, x, 5, (int64_t[]){b, f * pt, ch, h * p, w * p}, out);
}

/* [B, F*h*w, C*p*p] -> [B,F,C,h*p,w*p]: reshape (B*F, h, w, C, p, p),
 * permute as diffusers' (0,1,4,2,5,3,6) with batch and frames merged. */
static dc_status *unpatchify(dc_gb *g, const cog_config *c, const cog_shapes *sh, int32_t x, int32_t *out) {
  if (c->patch_t) return unpatchify_t(g, c, sh, x, out);
  int64_t b = sh->x[0], f = sh->x[1], p = c->patch, h = sh->x[3] / p, w = sh->x[4] / p, ch = c->out_ch;
  DC_TRY(gb_reshape(g, NULL, x, 6, (int64_t[]){b * f, h, w, ch, p, p}, &x));
  DC_TRY(gb_permute(g, NULL, x, 6, (int64_t[]){0, 3, 1, 4, 2, 5}, &x));
  return gb_reshape(g, NULL, x, 5, (int64_t[]){b, f, ch, h * p, w * p}, out);
}

static dc_status *cog_forward(dc_gb *g, const cog_config *c, const cog_shapes *sh) {
  char s[COG_PATH];
  int64_t dim = c->heads * c->head_dim;
  int32_t x, ctx, emb, emb_act, freqs = -1;
  DC_TRY(time_embedding(g, c, sh, &emb));
  DC_TRY(patch_embed(g, c, sh, &x, &ctx));
  if (c->rope)
    DC_TRY(blk_cogvideox_rotary_table(g, "rotary_emb", c->head_dim, sh->x[1] / (c->patch_t ? c->patch_t : 1),
                                      sh->x[3] / c->patch, sh->x[4] / c->patch, c->sample_h / c->patch,
                                      c->sample_w / c->patch, c->patch_t != 0, &freqs));
  DC_TRY(gb_unary(g, OP_SILU, NULL, emb, &emb_act)); /* every norm's SiLU of temb, once (blocks.h) */
  blk_cogvideox_block_cfg bc = {.attn = {.dim = dim, .heads = c->heads, .head_dim = c->head_dim,
                                         .qkv_bias = c->qkv_bias},
                                .time_dim = c->time_dim, .affine = 1, .eps = c->eps};
  for (int64_t i = 0; i < c->layers; i++)
    DC_TRY(blk_cogvideox_block(g, P("transformer_blocks.%lld", (long long)i), &bc, x, ctx, emb_act, freqs, &x, &ctx));
  DC_TRY(gb_layer_norm(g, "norm_final", x, dim, c->eps, &x));
  DC_TRY(blk_ada_layer_norm_shift_scale(g, "norm_out", x, emb_act, c->time_dim, dim, 1, c->eps, &x));
  DC_TRY(gb_linear(g, "proj_out", x, dim, c->patch * c->patch * (c->patch_t ? c->patch_t : 1) * c->out_ch, 1, &x));
  DC_TRY(unpatchify(g, c, sh, x, &x));
  return dc_module_add_output(g->m, "sample", x);
}

/* ---- build ------------------------------------------------------------- */

static dc_status *set_meta(dc_module *m, const cog_config *c) {
  char buf[384];
  snprintf(buf, sizeof buf,
           "layers=%lld heads=%lld head_dim=%lld in_channels=%lld out_channels=%lld time_embed_dim=%lld "
           "text_embed_dim=%lld patch_size=%lld patch_size_t=%lld sample=%lldx%lldx%lld positions=%s",
           (long long)c->layers, (long long)c->heads, (long long)c->head_dim, (long long)c->in_ch,
           (long long)c->out_ch, (long long)c->time_dim, (long long)c->text_dim, (long long)c->patch,
           (long long)c->patch_t,
           (long long)c->sample_frames, (long long)c->sample_h, (long long)c->sample_w,
           c->learned ? "rotary+learned" : c->rope ? "rotary" : "sincos");
  DC_TRY(dc_module_set_meta(m, "entry", "forward"));
  DC_TRY(dc_module_set_meta(m, "config", buf));
  return dc_module_set_meta(m, "note", "hidden_states are latent frames [B,F,C,H,W]; timestep is the scheduler's "
                            "integer step as a float; the rotary table is the pipeline's, computed from the shapes");
}

static dc_status *build_cogvideox(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  cog_config c;
  cog_shapes sh;
  DC_TRY(cfg_load(&f->config, &c));
  DC_TRY(input_shapes(&c, opt, &sh));
  DC_TRY(set_meta(m, &c));
  dc_weights w;
  DC_TRY(dc_weights_init(&w, m, f));
  dc_gb g = {m, &w};
  dc_status *st = cog_forward(&g, &c, &sh);
  if (!st) st = dc_weights_check_all_used(&w);
  dc_weights_deinit(&w);
  return st;
}

/* ---- the class descriptor -------------------------------------------- */

/* Every argument of CogVideoXTransformer3DModel.__init__ with diffusers' default. */
static const dc_config_key cog_keys[] = {
    {"num_attention_heads", DC_KEY_INT, "30", 0, NULL},
    {"attention_head_dim", DC_KEY_INT, "64", 0, NULL},
    {"in_channels", DC_KEY_INT, "16", 0, NULL},
    {"out_channels", DC_KEY_INT, "16", 0, NULL},
    {"flip_sin_to_cos", DC_KEY_BOOL, "true", 0, NULL},
    {"freq_shift", DC_KEY_NUM, "0", 0, NULL},
    {"time_embed_dim", DC_KEY_INT, "512", 0, NULL},
    {"ofs_embed_dim", DC_KEY_INT, "null", 1, "null, 0, or time_embed_dim"},
    {"text_embed_dim", DC_KEY_INT, "4096", 0, NULL},
    {"num_layers", DC_KEY_INT, "30", 0, NULL},
    {"dropout", DC_KEY_NUM, "0.0", 0, NULL}, /* inference: no dropout */
    {"attention_bias", DC_KEY_BOOL, "true", 0, NULL},
    {"sample_width", DC_KEY_INT, "90", 0, NULL},
    {"sample_height", DC_KEY_INT, "60", 0, NULL},
    {"sample_frames", DC_KEY_INT, "49", 0, NULL},
    {"patch_size", DC_KEY_INT, "2", 0, NULL},
    {"patch_size_t", DC_KEY_INT, "null", 1, NULL},
    {"temporal_compression_ratio", DC_KEY_INT, "4", 0, NULL},
    {"max_text_seq_length", DC_KEY_INT, "226", 0, NULL},
    {"activation_fn", DC_KEY_STR, "\"gelu-approximate\"", 0, "\"gelu-approximate\""},
    {"timestep_activation_fn", DC_KEY_STR, "\"silu\"", 0, "\"silu\", \"swish\""},
    {"norm_elementwise_affine", DC_KEY_BOOL, "true", 0, "true"},
    {"norm_eps", DC_KEY_NUM, "1e-05", 0, NULL},
    {"spatial_interpolation_scale", DC_KEY_NUM, "1.875", 0, NULL},
    {"temporal_interpolation_scale", DC_KEY_NUM, "1.0", 0, NULL},
    {"use_rotary_positional_embeddings", DC_KEY_BOOL, "false", 0, NULL},
    {"use_learned_positional_embeddings", DC_KEY_BOOL, "false", 0, NULL},
    {"patch_bias", DC_KEY_BOOL, "true", 0, "true (any with patch_size_t)"},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_entry_io cog_inputs[] = {
    {"hidden_states", NULL},
    {"encoder_hidden_states", NULL},
    {"timestep", NULL},
    {"ofs", "ofs_embed_dim set"},
    {NULL, NULL},
};
static const dc_entry_io cog_outputs[] = {{"sample", NULL}, {NULL, NULL}};
static const dc_entry_desc cog_entries[] = {{"forward", cog_inputs, cog_outputs}, {NULL, NULL, NULL}};
/* diffusers' CogVideoXTransformer3DModel._skip_layerwise_casting_patterns;
 * its block list (transformer_blocks) is a top-level ModuleList, as Flux's
 * and SD3's. */
static const char *const cog_skip_cast[] = {"patch_embed", "norm", NULL};

const dc_class_desc dc_class_cogvideox_transformer_3d = {
    .name = "CogVideoXTransformer3DModel",
    .library = DC_LIB_DIFFUSERS,
    .keys = cog_keys,
    .entries = cog_entries,
    .default_entry = "forward",
    .build = build_cogvideox,
    .facts = {.block_modules = NULL, .skip_cast = cog_skip_cast, .options = 0},
};
