/* single_file_dit.c — the tensors of a DiT transformer in its original
 * layout to diffusers' names, as diffusers' loaders/single_file_utils.py
 * converts them (convert_flux_transformer_checkpoint_to_diffusers,
 * convert_sd3_transformer_checkpoint_to_diffusers), as views of the file's
 * bytes instead of copies:
 *   - a renamed tensor is the same bytes under another name;
 *   - a fused projection (Flux's img_attn.qkv / txt_attn.qkv and single
 *     blocks' linear1 = q, k, v and the MLP's input; SD3's attn.qkv) holds
 *     its parts one after another along dim 0, so each part is a range of
 *     rows: the same bytes at an offset, with a smaller first dim.  The
 *     parts' sizes come from the config (diffusers splits by the model's
 *     width too), and a fused tensor of another size is an error naming it;
 *   - the final AdaLayerNormContinuous (Flux and SD3 norm_out, SD3's last
 *     context norm) is stored (shift, scale) where diffusers' module makes
 *     (scale, shift): diffusers copies the two halves into the other order
 *     (swap_scale_shift).  Two halves in swapped order cannot be one view,
 *     and copying them would put megabytes of weights (38 MB for Flux in
 *     bf16) beside the file; instead the view is the tensor as stored,
 *     flagged halves_swapped, and the builder, which reads the scale and
 *     the shift in place by offset (mod_layer_norm's scale_at / shift_at),
 *     reads them at the swapped offsets.  The weights layer refuses to bind
 *     a flagged tensor for any builder that did not ask (weights.c), so the
 *     flag cannot be silently ignored. */
#include "single_file.h"

#include <string.h>

/* ---- pieces shared by both layouts -------------------------------------------- */

/* A fused projection: `leaf` ("weight" or "bias") of the parts named
 * heads[k] (diffusers module paths), sizes[k] rows each, in this order. */
static dc_status *sf_split(sf_ctx *c, const dc_st_tensor *t, const char *leaf, const char *const *heads,
                           const int64_t *sizes, int n, const char *what) {
  int rank = !strcmp(leaf, "weight") ? 2 : !strcmp(leaf, "bias") ? 1 : 0;
  int64_t total = 0;
  for (int k = 0; k < n; k++) total += sizes[k];
  if (!rank) return sf_unknown(c, t, "a fused projection has a weight and a bias");
  if (t->rank != rank || t->dims[0] != total) {
    char why[512];
    snprintf(why, sizeof why, "not %s stacked: the width %lld of %s makes %lld rows (a %s of rank %d), it has %lld",
             what, (long long)c->facts->dit_dim, c->facts->dit_config, (long long)total, leaf, rank,
             (long long)(t->rank ? t->dims[0] : 0));
    return sf_unknown(c, t, why);
  }
  int64_t row = 0;
  for (int k = 0; k < n; k++) {
    DC_TRY(sf_add_rows(c, t, SF_TRANSFORMER, dc_asprintf("%s.%s", heads[k], leaf), row, sizes[k]));
    row += sizes[k];
  }
  return NULL;
}

/* q, k and v of the model's width, into "<block><q|k|v>". */
static dc_status *sf_qkv(sf_ctx *c, const dc_st_tensor *t, const char *block, const char *const names[3],
                         const char *leaf) {
  char *heads[3] = {NULL};
  int64_t d = c->facts->dit_dim, sizes[3] = {d, d, d};
  dc_status *st = NULL;
  for (int k = 0; k < 3 && !st; k++)
    if (!(heads[k] = dc_asprintf("%s%s", block, names[k]))) st = dc_nomem("mapping a checkpoint's tensors");
  if (!st) st = sf_split(c, t, leaf, (const char *const *)heads, sizes, 3, "q, k and v");
  for (int k = 0; k < 3; k++) dc_free(heads[k]);
  return st;
}

/* The original (shift, scale) linear as diffusers' (scale, shift) one. */
static dc_status *sf_swapped(sf_ctx *c, const dc_st_tensor *t, char *name) {
  if (t->rank < 1 || t->dims[0] % 2 != 0) {
    dc_free(name);
    return sf_unknown(c, t, "an adaLN modulation of (shift, scale) has an even number of rows");
  }
  sf_view *v;
  DC_TRY(sf_add(c, t, SF_TRANSFORMER, name, &v));
  v->halves_swapped = 1;
  return NULL;
}

static dc_status *sf_renamed_in(sf_ctx *c, const dc_st_tensor *t, const char *head, const char *rest,
                                const char *const (*table)[2], int n, const char *why) {
  int hit;
  DC_TRY(sf_rename(c, t, SF_TRANSFORMER, head, rest, table, n, &hit));
  return hit ? NULL : sf_unknown(c, t, why);
}

/* ---- Flux (Black Forest Labs' flux1-dev / flux1-schnell) ------------------------ */

static const char *const sf_flux_top[][2] = {
    {"img_in.", "x_embedder."},
    {"txt_in.", "context_embedder."},
    {"time_in.in_layer.", "time_text_embed.timestep_embedder.linear_1."},
    {"time_in.out_layer.", "time_text_embed.timestep_embedder.linear_2."},
    {"vector_in.in_layer.", "time_text_embed.text_embedder.linear_1."},
    {"vector_in.out_layer.", "time_text_embed.text_embedder.linear_2."},
    {"guidance_in.in_layer.", "time_text_embed.guidance_embedder.linear_1."},
    {"guidance_in.out_layer.", "time_text_embed.guidance_embedder.linear_2."},
    {"final_layer.linear.", "proj_out."},
};
static const char *const sf_flux_double[][2] = {
    {"img_mod.lin.", "norm1.linear."},
    {"txt_mod.lin.", "norm1_context.linear."},
    {"img_attn.norm.query_norm.scale", "attn.norm_q.weight"},
    {"img_attn.norm.key_norm.scale", "attn.norm_k.weight"},
    {"txt_attn.norm.query_norm.scale", "attn.norm_added_q.weight"},
    {"txt_attn.norm.key_norm.scale", "attn.norm_added_k.weight"},
    {"img_attn.proj.", "attn.to_out.0."},
    {"txt_attn.proj.", "attn.to_add_out."},
    {"img_mlp.0.", "ff.net.0.proj."},
    {"img_mlp.2.", "ff.net.2."},
    {"txt_mlp.0.", "ff_context.net.0.proj."},
    {"txt_mlp.2.", "ff_context.net.2."},
};
static const char *const sf_flux_single[][2] = {
    {"modulation.lin.", "norm.linear."},
    {"linear2.", "proj_out."},
    {"norm.query_norm.scale", "attn.norm_q.weight"},
    {"norm.key_norm.scale", "attn.norm_k.weight"},
};
static const char *const sf_attn_qkv[3] = {"attn.to_q", "attn.to_k", "attn.to_v"};
static const char *const sf_attn_added_qkv[3] = {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"};

static dc_status *sf_flux_double_block(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t i = 0;
  const char *rest = sf_num(r, &i), *leaf;
  if (!rest) return sf_unknown(c, t, "not a tensor of a Flux double block");
  char head[64];
  snprintf(head, sizeof head, "transformer_blocks.%lld.", (long long)i);
  if ((leaf = sf_after(rest, "img_attn.qkv."))) return sf_qkv(c, t, head, sf_attn_qkv, leaf);
  if ((leaf = sf_after(rest, "txt_attn.qkv."))) return sf_qkv(c, t, head, sf_attn_added_qkv, leaf);
  return sf_renamed_in(c, t, head, rest, sf_flux_double, SF_COUNT(sf_flux_double),
                       "not a tensor of a Flux double block");
}

/* linear1 is q, k, v and the MLP's input (mlp_ratio 4, fixed in diffusers'
 * FluxSingleTransformerBlock). */
static dc_status *sf_flux_single_block(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t i = 0;
  const char *rest = sf_num(r, &i), *leaf;
  if (!rest) return sf_unknown(c, t, "not a tensor of a Flux single block");
  char head[64];
  snprintf(head, sizeof head, "single_transformer_blocks.%lld.", (long long)i);
  if (!(leaf = sf_after(rest, "linear1.")))
    return sf_renamed_in(c, t, head, rest, sf_flux_single, SF_COUNT(sf_flux_single),
                         "not a tensor of a Flux single block");
  char q[96], k[96], v[96], mlp[96];
  snprintf(q, sizeof q, "%sattn.to_q", head);
  snprintf(k, sizeof k, "%sattn.to_k", head);
  snprintf(v, sizeof v, "%sattn.to_v", head);
  snprintf(mlp, sizeof mlp, "%sproj_mlp", head);
  const char *const parts[4] = {q, k, v, mlp};
  int64_t d = c->facts->dit_dim;
  const int64_t sizes[4] = {d, d, d, 4 * d};
  return sf_split(c, t, leaf, parts, sizes, 4, "q, k, v and the MLP's input (4x)");
}

static dc_status *sf_map_flux(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  const char *p;
  if ((p = sf_after(r, "double_blocks."))) return sf_flux_double_block(c, t, p);
  if ((p = sf_after(r, "single_blocks."))) return sf_flux_single_block(c, t, p);
  if ((p = sf_after(r, "final_layer.adaLN_modulation.1.")))
    return sf_swapped(c, t, dc_asprintf("norm_out.linear.%s", p));
  return sf_renamed_in(c, t, "", r, sf_flux_top, SF_COUNT(sf_flux_top), "not a tensor of a Flux transformer");
}

/* ---- SD3 / SD3.5 MMDiT (Stability's sd3_medium, sd3.5_medium / large) ----------- */

static const char *const sf_sd3_top[][2] = {
    {"x_embedder.proj.", "pos_embed.proj."},
    {"t_embedder.mlp.0.", "time_text_embed.timestep_embedder.linear_1."},
    {"t_embedder.mlp.2.", "time_text_embed.timestep_embedder.linear_2."},
    {"y_embedder.mlp.0.", "time_text_embed.text_embedder.linear_1."},
    {"y_embedder.mlp.2.", "time_text_embed.text_embedder.linear_2."},
    {"context_embedder.", "context_embedder."},
    {"final_layer.linear.", "proj_out."},
};
static const char *const sf_sd3_x[][2] = {
    {"attn.ln_q.", "attn.norm_q."},   {"attn.ln_k.", "attn.norm_k."},   {"attn.proj.", "attn.to_out.0."},
    {"attn2.ln_q.", "attn2.norm_q."}, {"attn2.ln_k.", "attn2.norm_k."}, {"attn2.proj.", "attn2.to_out.0."},
    {"adaLN_modulation.1.", "norm1.linear."}, {"mlp.fc1.", "ff.net.0.proj."}, {"mlp.fc2.", "ff.net.2."},
};
static const char *const sf_sd3_context[][2] = {
    {"attn.ln_q.", "attn.norm_added_q."}, {"attn.ln_k.", "attn.norm_added_k."},
    {"attn.proj.", "attn.to_add_out."},   {"adaLN_modulation.1.", "norm1_context.linear."},
    {"mlp.fc1.", "ff_context.net.0.proj."}, {"mlp.fc2.", "ff_context.net.2."},
};
static const char *const sf_attn2_qkv[3] = {"attn2.to_q", "attn2.to_k", "attn2.to_v"};

static dc_status *sf_sd3_x_block(sf_ctx *c, const dc_st_tensor *t, const char *head, const char *rest) {
  const char *leaf;
  if ((leaf = sf_after(rest, "attn.qkv."))) return sf_qkv(c, t, head, sf_attn_qkv, leaf);
  if ((leaf = sf_after(rest, "attn2.qkv."))) return sf_qkv(c, t, head, sf_attn2_qkv, leaf);
  return sf_renamed_in(c, t, head, rest, sf_sd3_x, SF_COUNT(sf_sd3_x), "not a tensor of an MMDiT x_block");
}

/* The last joint block's context norm is AdaLayerNormContinuous (the block
 * is context_pre_only): its two chunks are stored (shift, scale). */
static dc_status *sf_sd3_context_block(sf_ctx *c, const dc_st_tensor *t, const char *head, int64_t i,
                                       const char *rest) {
  const char *leaf;
  if ((leaf = sf_after(rest, "attn.qkv."))) return sf_qkv(c, t, head, sf_attn_added_qkv, leaf);
  if ((leaf = sf_after(rest, "adaLN_modulation.1.")) && i == c->facts->dit_layers - 1)
    return sf_swapped(c, t, dc_asprintf("%snorm1_context.linear.%s", head, leaf));
  return sf_renamed_in(c, t, head, rest, sf_sd3_context, SF_COUNT(sf_sd3_context),
                       "not a tensor of an MMDiT context_block");
}

static dc_status *sf_sd3_joint_block(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  int64_t i = 0;
  const char *rest = sf_num(r, &i), *p;
  if (!rest) return sf_unknown(c, t, "not a tensor of an MMDiT joint block");
  char head[64];
  snprintf(head, sizeof head, "transformer_blocks.%lld.", (long long)i);
  if ((p = sf_after(rest, "x_block."))) return sf_sd3_x_block(c, t, head, p);
  if ((p = sf_after(rest, "context_block."))) return sf_sd3_context_block(c, t, head, i, p);
  return sf_unknown(c, t, "an MMDiT joint block has an x_block and a context_block");
}

static dc_status *sf_map_sd3(sf_ctx *c, const dc_st_tensor *t, const char *r) {
  const char *p;
  if (!strcmp(r, "pos_embed")) return sf_add(c, t, SF_TRANSFORMER, dc_strdup("pos_embed.pos_embed"), NULL);
  if ((p = sf_after(r, "joint_blocks."))) return sf_sd3_joint_block(c, t, p);
  if ((p = sf_after(r, "final_layer.adaLN_modulation.1.")))
    return sf_swapped(c, t, dc_asprintf("norm_out.linear.%s", p));
  return sf_renamed_in(c, t, "", r, sf_sd3_top, SF_COUNT(sf_sd3_top), "not a tensor of an SD3 MMDiT");
}

/* ---- entry points ---------------------------------------------------------------- */

dc_status *sf_map_dit(sf_ctx *c, const dc_st_tensor *t, const char *rest) {
  return c->fam->dit == SF_DIT_FLUX ? sf_map_flux(c, t, rest) : sf_map_sd3(c, t, rest);
}

const char *sf_dit_ignored_patterns(const sf_family *fam) {
  return fam->dit == SF_DIT_SD3 ? "; ignored: the CLIPs' position_ids and logit_scale"
                                : "; nothing in it is left out";
}
