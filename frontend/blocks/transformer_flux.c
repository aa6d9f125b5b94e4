/* transformer_flux.c — diffusers' transformers/transformer_flux.py: the
 * double-stream FluxTransformerBlock and the FluxSingleTransformerBlock
 * (blocks.h).  The model around them is frontend/flux_transformer.c. */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* FluxAttention's per-head RMSNorms use eps 1e-6 in both block kinds. */
static blk_joint_attention_cfg flux_attention(const blk_flux_cfg *c, int has_context) {
  return (blk_joint_attention_cfg){.dim = c->dim, .heads = c->heads, .head_dim = c->head_dim,
                                   .has_context = has_context, .qk_norm = 1, .eps = 1e-6, .context_first = 1,
                                   .pre_only = !has_context};
}

/* norm1 / norm1_context (AdaLayerNormZero), the joint attention over
 * [ctx; x] with RoPE, then each stream's gated residuals and feed-forward
 * (ff / ff_context). */
dc_status *blk_flux_transformer_block(dc_gb *g, const char *p, const blk_flux_cfg *c, int32_t x, int32_t ctx,
                                      int32_t emb_act, int32_t freqs, int32_t *out, int32_t *ctx_out) {
  char s[256];
  blk_joint_attention_cfg a = flux_attention(c, 1);
  int32_t nx, nc, mod, cmod, ax, ac;
  DC_TRY(blk_ada_layer_norm_zero(g, P("%s.norm1", p), x, emb_act, c->dim, &nx, &mod));
  DC_TRY(blk_ada_layer_norm_zero(g, P("%s.norm1_context", p), ctx, emb_act, c->dim, &nc, &cmod));
  DC_TRY(blk_joint_attention(g, P("%s.attn", p), &a, nx, nc, freqs, &ax, &ac));
  DC_TRY(blk_gated_feed_forward(g, p, "norm2", "ff", x, ax, mod, c->dim, out));
  return blk_gated_feed_forward(g, p, "norm2_context", "ff_context", ctx, ac, cmod, c->dim, ctx_out);
}

/* norm (AdaLayerNormZeroSingle); the attention (no out projection) and the
 * MLP (proj_mlp, gelu tanh) side by side on the normed sequence;
 * proj_out(cat(attn, mlp)); h + gate * that. */
dc_status *blk_flux_single_transformer_block(dc_gb *g, const char *p, const blk_flux_cfg *c, int32_t h,
                                             int32_t emb_act, int32_t freqs, int32_t *out) {
  char s[256];
  blk_joint_attention_cfg a = flux_attention(c, 0);
  int64_t mlp = 4 * c->dim; /* mlp_ratio 4.0 */
  int32_t n, mod, attn, m, none;
  DC_TRY(blk_ada_layer_norm_zero_single(g, P("%s.norm", p), h, emb_act, c->dim, &n, &mod));
  DC_TRY(gb_linear(g, P("%s.proj_mlp", p), n, c->dim, mlp, 1, &m));
  DC_TRY(gb_unary(g, OP_GELU_TANH, P("%s.act_mlp", p), m, &m));
  DC_TRY(blk_joint_attention(g, P("%s.attn", p), &a, n, -1, freqs, &attn, &none));
  DC_TRY(gb_concat(g, p, attn, m, 2, &attn));
  DC_TRY(gb_linear(g, P("%s.proj_out", p), attn, c->dim + mlp, c->dim, 1, &attn));
  return gb_gated_add(g, p, h, attn, mod, BLK_ADA_GATE_MSA * c->dim, out);
}
