/* single_file_map.c — every tensor of an original-layout checkpoint to its
 * diffusers name, as diffusers' loaders/single_file_utils.py converts it
 * (convert_ldm_unet_checkpoint, convert_ldm_vae_checkpoint,
 * convert_ldm_clip_checkpoint, convert_open_clip_checkpoint), but as views of
 * the file's bytes instead of copies:
 *   - a renamed tensor is the same bytes under another name;
 *   - the VAE's mid-block attention projections, 1x1 convolutions [C,C,1,1]
 *     in LDM and linear [C,C] in diffusers, are the same bytes with two dims
 *     fewer;
 *   - OpenCLIP's in_proj_weight [3D,D] / in_proj_bias [3D] are q, k and v one
 *     after another, so each of the three is a third of the bytes;
 *   - OpenCLIP's text_projection is stored [D,P] and transformers' is its
 *     transpose: the view keeps the stored bytes and says so (transposed), and
 *     binding it adds a permute (frontend/weights.c).
 * The rules are diffusers' renames written as parsers of the LDM names, so a
 * name no rule parses is an error rather than a key silently dropped (diffusers
 * drops what it does not match); whether the names they produce are the
 * model's is single_file_check.c's job. */
#include "single_file.h"

#include <stdlib.h>
#include <string.h>

const char *const sf_comp_names[SF_NCOMP] = {"unet", "vae", "text_encoder", "text_encoder_2", "transformer"};

/* ---- small parsers ------------------------------------------------------ */

const char *sf_after(const char *s, const char *prefix) {
  size_t n = strlen(prefix);
  return strncmp(s, prefix, n) == 0 ? s + n : NULL;
}

const char *sf_num(const char *s, int64_t *out) {
  if (!s || *s < '0' || *s > '9') return NULL;
  int64_t v = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    if (v > 100000000) return NULL;
    v = v * 10 + (*s - '0');
  }
  *out = v;
  return *s == '.' ? s + 1 : NULL;
}

/* ---- building the views --------------------------------------------------- */

dc_status *sf_unknown(sf_ctx *c, const dc_st_tensor *t, const char *why) {
  if (c->nbad++ == 0) {
    c->bad = t->name;
    snprintf(c->why, sizeof c->why, "%s", why);
  }
  return NULL;
}

static dc_status *sf_grow(sf_views *v) {
  if (v->n < v->cap) return NULL;
  int cap = v->cap ? 2 * v->cap : 256;
  sf_view *nv = dc_realloc(v->v, sizeof *nv * (size_t)cap);
  if (!nv) return dc_nomem("mapping a checkpoint's tensors");
  v->v = nv, v->cap = cap;
  return NULL;
}

dc_status *sf_add(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, char *name, sf_view **out) {
  dc_status *st = name ? sf_grow(c->out) : dc_nomem("mapping a checkpoint's tensors");
  if (st) {
    dc_free(name);
    return st;
  }
  sf_view *v = &c->out->v[c->out->n++];
  memset(v, 0, sizeof *v);
  v->t = *t;
  v->t.name = name;
  v->source = t->name;
  v->comp = comp;
  if (out) *out = v;
  return NULL;
}

dc_status *sf_add_rows(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, char *name, int64_t row0, int64_t nrows) {
  sf_view *v;
  DC_TRY(sf_add(c, t, comp, name, &v));
  uint64_t row_bytes = t->rank && t->dims[0] ? t->bytes / (uint64_t)t->dims[0] : 0;
  v->t.dims[0] = nrows;
  v->t.bytes = row_bytes * (uint64_t)nrows;
  v->t.offset = t->offset + row_bytes * (uint64_t)row0;
  return NULL;
}

dc_status *sf_rename(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, const char *head, const char *rest,
                            const char *const (*table)[2], int n, int *hit) {
  *hit = 0;
  for (int i = 0; i < n; i++) {
    const char *tail = sf_after(rest, table[i][0]);
    if (!tail) continue;
    *hit = 1;
    return sf_add(c, t, comp, dc_asprintf("%s%s%s", head, table[i][1], tail), NULL);
  }
  return NULL;
}

/* ---- UNet: model.diffusion_model.* ------------------------------------------ */

static const char *const sf_unet_top[][2] = {
    {"time_embed.0.", "time_embedding.linear_1."}, {"time_embed.2.", "time_embedding.linear_2."},
    {"input_blocks.0.0.", "conv_in."},            {"out.0.", "conv_norm_out."},
    {"out.2.", "conv_out."},
};
/* update_unet_resnet_ldm_to_diffusers */
static const char *const sf_unet_resnet[][2] = {
    {"in_layers.0.", "norm1."},  {"in_layers.2.", "conv1."},        {"out_layers.0.", "norm2."},
    {"out_layers.3.", "conv2."}, {"emb_layers.1.", "time_emb_proj."}, {"skip_connection.", "conv_shortcut."},
};

static dc_status *sf_unet_resnet_at(sf_ctx *c, const dc_st_tensor *t, const char *rest, char *head) {
  if (!head) return dc_nomem("mapping a checkpoint's tensors");
  int hit;
  dc_status *st = sf_rename(c, t, SF_UNET, head, rest, sf_unet_resnet, SF_COUNT(sf_unet_resnet), &hit);
  dc_free(head);
  if (!st && !hit) st = sf_unknown(c, t, "not a tensor of an LDM ResBlock");
  return st;
}

/* input_blocks.I.J: I >= 1 counts layers_per_block resnets (+ attentions),
 * then a downsampler, per down block. */
static dc_status *sf_unet_down(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t i = 0, j = 0, per = c->facts->unet_per_block;
  const char *rest = sf_num(sf_num(r, &i), &j), *op;
  if (!rest || i < 1) return sf_unknown(c, t, "not an LDM input block tensor");
  long long b = (long long)((i - 1) / per), l = (long long)((i - 1) % per);
  if (j == 0 && (op = sf_after(rest, "op.")))
    return sf_add(c, t, SF_UNET, dc_asprintf("down_blocks.%lld.downsamplers.0.conv.%s", b, op), NULL);
  if (j == 0) return sf_unet_resnet_at(c, t, rest, dc_asprintf("down_blocks.%lld.resnets.%lld.", b, l));
  if (j == 1) return sf_add(c, t, SF_UNET, dc_asprintf("down_blocks.%lld.attentions.%lld.%s", b, l, rest), NULL);
  return sf_unknown(c, t, "an LDM input block has a resnet (.0) and an attention (.1)");
}

/* middle_block.K: even K a resnet, odd K the attention, numbered max(K-1,0) as diffusers does. */
static dc_status *sf_unet_mid(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t k = 0;
  const char *rest = sf_num(r, &k);
  if (!rest) return sf_unknown(c, t, "not an LDM middle block tensor");
  long long d = (long long)(k > 0 ? k - 1 : 0);
  if (k % 2 == 0) return sf_unet_resnet_at(c, t, rest, dc_asprintf("mid_block.resnets.%lld.", d));
  return sf_add(c, t, SF_UNET, dc_asprintf("mid_block.attentions.%lld.%s", d, rest), NULL);
}

/* output_blocks.I.J: layers_per_block + 1 per up block; the upsampler is
 * .1.conv (no attention) or .2.conv after the last one. */
static dc_status *sf_unet_up(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t i = 0, j = 0, per = c->facts->unet_per_block;
  const char *rest = sf_num(sf_num(r, &i), &j), *conv = rest ? sf_after(rest, "conv.") : NULL;
  if (!rest) return sf_unknown(c, t, "not an LDM output block tensor");
  long long b = (long long)(i / per), l = (long long)(i % per);
  if ((j == 1 || j == 2) && conv)
    return sf_add(c, t, SF_UNET, dc_asprintf("up_blocks.%lld.upsamplers.0.conv.%s", b, conv), NULL);
  if (j == 0) return sf_unet_resnet_at(c, t, rest, dc_asprintf("up_blocks.%lld.resnets.%lld.", b, l));
  if (j == 1) return sf_add(c, t, SF_UNET, dc_asprintf("up_blocks.%lld.attentions.%lld.%s", b, l, rest), NULL);
  return sf_unknown(c, t, "an LDM output block has a resnet (.0), an attention (.1) and an upsampler (.1/.2.conv)");
}

static dc_status *sf_unet(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int hit;
  DC_TRY(sf_rename(c, t, SF_UNET, "", r, sf_unet_top, SF_COUNT(sf_unet_top), &hit));
  if (hit) return NULL;
  const char *p, *emb = c->facts->unet_label_emb;
  if ((p = sf_after(r, "label_emb.0.0.")) && emb)
    return sf_add(c, t, SF_UNET, dc_asprintf("%s.linear_1.%s", emb, p), NULL);
  if ((p = sf_after(r, "label_emb.0.2.")) && emb)
    return sf_add(c, t, SF_UNET, dc_asprintf("%s.linear_2.%s", emb, p), NULL);
  if ((p = sf_after(r, "input_blocks."))) return sf_unet_down(c, t, p);
  if ((p = sf_after(r, "middle_block."))) return sf_unet_mid(c, t, p);
  if ((p = sf_after(r, "output_blocks."))) return sf_unet_up(c, t, p);
  if (sf_after(r, "label_emb."))
    return sf_unknown(c, t, "a class/addition embedding the UNet config does not have");
  return sf_unknown(c, t, "not a tensor of the LDM UNet");
}

/* ---- VAE: first_stage_model.* ------------------------------------------------- */

static const char *const sf_vae_top[][2] = {
    {"encoder.conv_in.", "encoder.conv_in."},   {"encoder.conv_out.", "encoder.conv_out."},
    {"encoder.norm_out.", "encoder.conv_norm_out."}, {"decoder.conv_in.", "decoder.conv_in."},
    {"decoder.conv_out.", "decoder.conv_out."}, {"decoder.norm_out.", "decoder.conv_norm_out."},
    {"quant_conv.", "quant_conv."},             {"post_quant_conv.", "post_quant_conv."},
};
static const char *const sf_vae_resnet[][2] = {
    {"norm1.", "norm1."}, {"conv1.", "conv1."}, {"norm2.", "norm2."},
    {"conv2.", "conv2."}, {"nin_shortcut.", "conv_shortcut."},
};
/* update_vae_attentions_ldm_to_diffusers */
static const char *const sf_vae_attn[][2] = {
    {"norm.", "group_norm."}, {"q.", "to_q."}, {"k.", "to_k."}, {"v.", "to_v."}, {"proj_out.", "to_out.0."},
};

static dc_status *sf_vae_named(sf_ctx *c, const dc_st_tensor *t, const char *rest, char *head,
                               const char *const (*table)[2], int n) {
  if (!head) return dc_nomem("mapping a checkpoint's tensors");
  int hit;
  dc_status *st = sf_rename(c, t, SF_VAE, head, rest, table, n, &hit);
  dc_free(head);
  if (!st && !hit) st = sf_unknown(c, t, "not a tensor of an LDM VAE block");
  return st;
}

/* The attention's 1x1-conv weights [C,C,1,1] (or [C,C,1]) are diffusers'
 * linear weights [C,C]: the same bytes (conv_attn_to_linear). */
static void sf_squeeze_1x1(sf_view *v) {
  for (int i = 2; i < v->t.rank; i++)
    if (v->t.dims[i] != 1) return; /* not a 1x1 conv: the check reports its shape */
  if (v->t.rank > 2) v->t.rank = 2;
}

static dc_status *sf_vae_mid(sf_ctx *c, const dc_st_tensor *t, const char *side, const char *r) {
  const char *p;
  if ((p = sf_after(r, "block_1.")))
    return sf_vae_named(c, t, p, dc_asprintf("%s.mid_block.resnets.0.", side), sf_vae_resnet, SF_COUNT(sf_vae_resnet));
  if ((p = sf_after(r, "block_2.")))
    return sf_vae_named(c, t, p, dc_asprintf("%s.mid_block.resnets.1.", side), sf_vae_resnet, SF_COUNT(sf_vae_resnet));
  if (!(p = sf_after(r, "attn_1."))) return sf_unknown(c, t, "not a tensor of an LDM VAE mid block");
  int before = c->out->n;
  DC_TRY(sf_vae_named(c, t, p, dc_asprintf("%s.mid_block.attentions.0.", side), sf_vae_attn, SF_COUNT(sf_vae_attn)));
  if (c->out->n > before && !sf_after(p, "norm.")) sf_squeeze_1x1(&c->out->v[c->out->n - 1]);
  return NULL;
}

/* encoder.down.I.{block.J, downsample}: same numbering as diffusers. */
static dc_status *sf_vae_down(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t i = 0, j = 0;
  const char *rest = sf_num(r, &i), *p;
  if (rest && (p = sf_after(rest, "downsample.conv.")))
    return sf_add(c, t, SF_VAE, dc_asprintf("encoder.down_blocks.%lld.downsamplers.0.conv.%s", (long long)i, p), NULL);
  if (rest && (p = sf_num(sf_after(rest, "block."), &j)))
    return sf_vae_named(c, t, p, dc_asprintf("encoder.down_blocks.%lld.resnets.%lld.", (long long)i, (long long)j),
                        sf_vae_resnet, SF_COUNT(sf_vae_resnet));
  return sf_unknown(c, t, "not a tensor of an LDM encoder down block");
}

/* decoder.up.I: LDM counts from the lowest resolution, diffusers from the
 * first block run: up_blocks.(n-1-I). */
static dc_status *sf_vae_up(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t i = 0, j = 0, n = c->facts->vae_up_blocks;
  const char *rest = sf_num(r, &i), *p;
  if (!rest || i >= n) return sf_unknown(c, t, "not one of the decoder's up blocks the VAE config has");
  long long b = (long long)(n - 1 - i);
  if ((p = sf_after(rest, "upsample.conv.")))
    return sf_add(c, t, SF_VAE, dc_asprintf("decoder.up_blocks.%lld.upsamplers.0.conv.%s", b, p), NULL);
  if ((p = sf_num(sf_after(rest, "block."), &j)))
    return sf_vae_named(c, t, p, dc_asprintf("decoder.up_blocks.%lld.resnets.%lld.", b, (long long)j),
                        sf_vae_resnet, SF_COUNT(sf_vae_resnet));
  return sf_unknown(c, t, "not a tensor of an LDM decoder up block");
}

dc_status *sf_map_vae(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int hit;
  DC_TRY(sf_rename(c, t, SF_VAE, "", r, sf_vae_top, SF_COUNT(sf_vae_top), &hit));
  if (hit) return NULL;
  const char *p;
  if ((p = sf_after(r, "encoder.down."))) return sf_vae_down(c, t, p);
  if ((p = sf_after(r, "decoder.up."))) return sf_vae_up(c, t, p);
  if ((p = sf_after(r, "encoder.mid."))) return sf_vae_mid(c, t, "encoder", p);
  if ((p = sf_after(r, "decoder.mid."))) return sf_vae_mid(c, t, "decoder", p);
  return sf_unknown(c, t, "not a tensor of the LDM VAE");
}

/* ---- text encoders ------------------------------------------------------------ */

/* transformers' CLIP under a prefix: the names after it are diffusers'. */
static dc_status *sf_clip(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, const char *r) {
  if (!sf_after(r, "text_model.")) return sf_unknown(c, t, "not a tensor of transformers' CLIPTextModel");
  return sf_add(c, t, comp, dc_strdup(r), NULL);
}

static const char *const sf_openclip_top[][2] = {
    {"token_embedding.", "text_model.embeddings.token_embedding."},
    {"ln_final.", "text_model.final_layer_norm."},
};
static const char *const sf_openclip_block[][2] = {
    {"ln_1.", "layer_norm1."},      {"ln_2.", "layer_norm2."}, {"mlp.c_fc.", "mlp.fc1."},
    {"mlp.c_proj.", "mlp.fc2."}, {"attn.out_proj.", "self_attn.out_proj."},
};

/* in_proj_weight [3D,D] / in_proj_bias [3D]: q, k, v are consecutive rows,
 * so each is a third of the bytes. */
static dc_status *sf_openclip_qkv(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, int64_t layer, const char *leaf) {
  int rank = !strcmp(leaf, "weight") ? 2 : 1;
  if (t->rank != rank || t->dims[0] % 3 != 0)
    return sf_unknown(c, t, "in_proj is not q, k and v stacked: [3D,D] / [3D]");
  static const char qkv[3] = {'q', 'k', 'v'};
  int64_t rows = t->dims[0] / 3;
  for (int k = 0; k < 3; k++)
    DC_TRY(sf_add_rows(
        c, t, comp,
        dc_asprintf("text_model.encoder.layers.%lld.self_attn.%c_proj.%s", (long long)layer, qkv[k], leaf), k * rows,
        rows));
  return NULL;
}

static dc_status *sf_openclip_resblock(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, const char *r) {
  int64_t n = 0;
  const char *rest = sf_num(r, &n), *p;
  if (!rest) return sf_unknown(c, t, "not an OpenCLIP resblock tensor");
  /* SD2: FrozenOpenCLIPEmbedder(layer="penultimate") never runs the last block */
  if (comp == SF_TE && c->fam->te_drop_last && n == c->facts->te_layers) {
    c->out->nignored++;
    return NULL;
  }
  if ((p = sf_after(rest, "attn.in_proj_"))) return sf_openclip_qkv(c, t, comp, n, p);
  char *head = dc_asprintf("text_model.encoder.layers.%lld.", (long long)n);
  if (!head) return dc_nomem("mapping a checkpoint's tensors");
  int hit;
  dc_status *st = sf_rename(c, t, comp, head, rest, sf_openclip_block, SF_COUNT(sf_openclip_block), &hit);
  dc_free(head);
  if (!st && !hit) st = sf_unknown(c, t, "not a tensor of an OpenCLIP resblock");
  return st;
}

/* OpenCLIP's own names (convert_open_clip_checkpoint). */
static dc_status *sf_openclip(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, const char *r) {
  int hit;
  DC_TRY(sf_rename(c, t, comp, "", r, sf_openclip_top, SF_COUNT(sf_openclip_top), &hit));
  if (hit) return NULL;
  const char *p;
  if (!strcmp(r, "positional_embedding"))
    return sf_add(c, t, comp, dc_strdup("text_model.embeddings.position_embedding.weight"), NULL);
  if (!strcmp(r, "text_projection")) { /* stored [D,P]; transformers' weight is [P,D] */
    if (t->rank != 2) return sf_unknown(c, t, "text_projection is not a matrix");
    sf_view *v;
    DC_TRY(sf_add(c, t, comp, dc_strdup("text_projection.weight"), &v));
    v->transposed = 1;
    return NULL;
  }
  if ((p = sf_after(r, "transformer.resblocks."))) return sf_openclip_resblock(c, t, comp, p);
  return sf_unknown(c, t, "not a tensor of an OpenCLIP text tower");
}

/* ---- what is knowingly left out --------------------------------------------- */

/* The training state a CompVis / sgm checkpoint carries beside the model:
 * the DDPM noise schedule (the scheduler config holds it for inference) and
 * LatentDiffusion's logvar. */
static const char *const sf_schedule[] = {
    "betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod", "sqrt_one_minus_alphas_cumprod",
    "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod", "sqrt_recipm1_alphas_cumprod",
    "posterior_variance", "posterior_log_variance_clipped", "posterior_mean_coef1", "posterior_mean_coef2",
    "logvar", "denoiser.sigmas",
};

const char *sf_ignored_patterns(void) {
  return "model_ema.* (EMA copies: diffusers reads the non-EMA weights), the DDPM schedule buffers "
         "(betas, alphas_cumprod, ..., logvar, denoiser.sigmas), <CLIP>.text_model.embeddings.position_ids, "
         "<OpenCLIP>.logit_scale and .attn_mask; SD2: cond_stage_model.model.text_projection and the last "
         "OpenCLIP resblock (SD2 uses the penultimate layer)";
}

/* Whether tensor `name`, under the text encoder prefix `r` stands for, is
 * state the encoder does not compute with. */
static int sf_te_ignored(const sf_ctx *c, sf_comp comp, const char *r) {
  int openclip = comp == SF_TE2 || c->fam->te_openclip;
  if (!openclip) return !strcmp(r, "text_model.embeddings.position_ids");
  if (!strcmp(r, "logit_scale") || !strcmp(r, "attn_mask")) return 1;
  /* SD2 encodes with CLIPTextModel's last hidden state: no projection */
  return comp == SF_TE && c->fam->te_drop_last && !strcmp(r, "text_projection");
}

static int sf_globally_ignored(const char *name) {
  if (sf_after(name, "model_ema.")) return 1;
  for (int i = 0; i < SF_COUNT(sf_schedule); i++)
    if (!strcmp(name, sf_schedule[i])) return 1;
  return 0;
}

/* ---- the whole file -------------------------------------------------------------- */

/* SD3's CLIP-L and CLIP-G: transformers' CLIPTextModelWithProjection names
 * under text_encoders.clip_{l,g}.transformer. (convert_ldm_clip_checkpoint
 * strips the prefix).  diffusers sets CLIP-L's text_projection to the
 * identity whatever the file holds (SD3 pools CLIP-L unprojected), so the
 * stored one, if any, is ignored and the source says the identity is
 * meant (dc_pipeline_source.clip_l_identity_projection). */
static dc_status *sf_sd3_clip(sf_ctx *c, const dc_st_tensor *t, sf_comp comp, const char *r) {
  if (!strcmp(r, "text_model.embeddings.position_ids") || !strcmp(r, "logit_scale")) {
    c->out->nignored++;
    return NULL;
  }
  if (comp == SF_TE && !strcmp(r, "text_projection.weight")) { /* replaced by the identity, as diffusers does */
    c->out->nignored++;
    return NULL;
  }
  if (!sf_after(r, "text_model.") && strcmp(r, "text_projection.weight") != 0)
    return sf_unknown(c, t, "not a tensor of transformers' CLIPTextModelWithProjection");
  return sf_add(c, t, comp, dc_strdup(r), NULL);
}

/* A DiT file: its transformer under model.diffusion_model. or at the top
 * level (Black Forest Labs' Flux files); SD3's VAE and CLIP text encoders. */
static dc_status *sf_map_one_dit(sf_ctx *c, const dc_st_tensor *t) {
  const char *r;
  int sd3 = c->fam->dit == SF_DIT_SD3;
  if ((r = sf_after(t->name, "model.diffusion_model."))) return sf_map_dit(c, t, r);
  if ((r = sf_after(t->name, "first_stage_model.")))
    return sd3 ? sf_map_vae(c, t, r) : sf_unknown(c, t, "a Flux file holds the transformer alone");
  if (sd3 && (r = sf_after(t->name, "text_encoders.clip_l.transformer."))) return sf_sd3_clip(c, t, SF_TE, r);
  if (sd3 && (r = sf_after(t->name, "text_encoders.clip_g.transformer."))) return sf_sd3_clip(c, t, SF_TE2, r);
  if (sd3 && sf_after(t->name, "text_encoders."))
    return sf_unknown(c, t,
                      "SD3's text encoders are text_encoders.clip_l and clip_g (T5 is not read from one file yet)");
  return sf_map_dit(c, t, t->name);
}

static dc_status *sf_map_one(sf_ctx *c, const dc_st_tensor *t) {
  const char *r;
  if (c->fam->dit) return sf_map_one_dit(c, t);
  if (sf_globally_ignored(t->name)) {
    c->out->nignored++;
    return NULL;
  }
  if ((r = sf_after(t->name, "model.diffusion_model."))) return sf_unet(c, t, r);
  if ((r = sf_after(t->name, "first_stage_model."))) return sf_map_vae(c, t, r);
  sf_comp comp = SF_TE;
  if (!(r = sf_after(t->name, c->fam->te_prefix))) {
    comp = SF_TE2;
    r = c->fam->te2_prefix ? sf_after(t->name, c->fam->te2_prefix) : NULL;
  }
  if (!r) return sf_unknown(c, t, "not under a prefix of the family's components");
  if (sf_te_ignored(c, comp, r)) {
    c->out->nignored++;
    return NULL;
  }
  return comp == SF_TE2 || c->fam->te_openclip ? sf_openclip(c, t, comp, r) : sf_clip(c, t, comp, r);
}

static int sf_view_cmp(const void *a, const void *b) {
  const sf_view *x = a, *y = b;
  if (x->comp != y->comp) return x->comp < y->comp ? -1 : 1;
  return strcmp(x->t.name, y->t.name);
}

/* "<file>: tensor "x" is not part of an SDXL base checkpoint as diffc reads
 * it (why); and 3 more; an SDXL base checkpoint holds ..." */
static dc_status *sf_unknown_error(const sf_ctx *c) {
  const sf_family *fam = c->fam;
  dc_buf b;
  dc_buf_init(&b);
  /* "an SD1.x", "a FLUX.1-dev" */
  const char *article = fam->label[0] == 'S' ? "an" : "a";
  dc_buf_printf(&b, "%s: tensor \"%s\" is not part of %s %s checkpoint as diffc reads it (%s)", c->f->file.path, c->bad,
                article, fam->label, c->why);
  if (c->nbad > 1) dc_buf_printf(&b, "; and %d more", c->nbad - 1);
  if (fam->dit) {
    dc_buf_printf(&b, "; %s %s checkpoint holds %s's tensors under their original names%s%s", article, fam->label,
                  fam->model_class,
                  fam->dit == SF_DIT_SD3 ? " (model.diffusion_model.*), first_stage_model.* and optionally "
                                           "text_encoders.clip_l/clip_g.transformer.*"
                                         : "",
                  sf_dit_ignored_patterns(fam));
  } else {
    dc_buf_printf(&b, "; an %s checkpoint holds model.diffusion_model.*, first_stage_model.*, %s*", fam->label,
                  fam->te_prefix);
    if (fam->te2_prefix) dc_buf_printf(&b, ", %s*", fam->te2_prefix);
    dc_buf_printf(&b, " and, ignored, %s", sf_ignored_patterns());
  }
  dc_buf_u8(&b, 0);
  dc_status *st = dc_buf_status(&b, "reporting a checkpoint's tensors");
  if (!st) st = dc_error(DC_ERR_FORMAT, "%s", (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

dc_status *sf_map_tensors(const dc_st_file *f, const sf_family *fam, const sf_facts *facts, sf_views *out) {
  memset(out, 0, sizeof *out);
  sf_ctx c = {.f = f, .fam = fam, .facts = facts, .out = out};
  dc_status *st = NULL;
  for (int i = 0; i < f->ntensors && !st; i++) st = sf_map_one(&c, &f->tensors[i]);
  if (!st && c.nbad) st = sf_unknown_error(&c);
  if (st) {
    sf_views_free(out);
    return st;
  }
  qsort(out->v, (size_t)out->n, sizeof *out->v, sf_view_cmp);
  return NULL;
}

void sf_views_free(sf_views *v) {
  for (int i = 0; i < v->n; i++) dc_free((void *)v->v[i].t.name);
  dc_free(v->v);
  memset(v, 0, sizeof *v);
}
