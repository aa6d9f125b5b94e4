/* attention.c — diffusers' attention.py: BasicTransformerBlock with its
 * FeedForward (GEGLU), the FeedForward of the DiTs (gelu-approximate) and
 * SD3's JointTransformerBlock (blocks.h). */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* FeedForward with activation_fn "geglu": net.0 (GEGLU: proj to 2 * inner,
 * value * gelu(gate)), net.1 dropout, net.2 Linear back; inner = mult * dim, mult 4. */
static dc_status *feed_forward(dc_gb *g, const char *p, int32_t x, int64_t dim, int32_t *out) {
  char s[256];
  int32_t h;
  DC_TRY(gb_linear(g, P("%s.net.0.proj", p), x, dim, 8 * dim, 1, &h));
  DC_TRY(gb_unary(g, OP_GEGLU, P("%s.net.0", p), h, &h));
  return gb_linear(g, P("%s.net.2", p), h, 4 * dim, dim, 1, out);
}

dc_status *blk_basic_transformer(dc_gb *g, const char *p, int32_t h, int64_t dim, int64_t heads, int64_t head_dim,
                                 int32_t ctx, int64_t ctx_dim, int32_t *out) {
  char s[256];
  blk_attention_cfg self = {.query_dim = dim, .kv_dim = dim, .heads = heads, .head_dim = head_dim,
                            .processor = BLK_ATTN_SDPA};
  blk_attention_cfg cross = self;
  cross.kv_dim = ctx_dim;
  int32_t n, a;
  DC_TRY(gb_layer_norm(g, P("%s.norm1", p), h, dim, 1e-5, &n));
  DC_TRY(blk_attention(g, P("%s.attn1", p), &self, n, n, &a));
  DC_TRY(gb_binary(g, OP_ADD, p, a, h, &h));
  DC_TRY(gb_layer_norm(g, P("%s.norm2", p), h, dim, 1e-5, &n));
  DC_TRY(blk_attention(g, P("%s.attn2", p), &cross, n, ctx, &a));
  DC_TRY(gb_binary(g, OP_ADD, p, a, h, &h));
  DC_TRY(gb_layer_norm(g, P("%s.norm3", p), h, dim, 1e-5, &n));
  DC_TRY(feed_forward(g, P("%s.ff", p), n, dim, &a));
  return gb_binary(g, OP_ADD, p, a, h, out);
}

dc_status *blk_feed_forward_gelu_tanh(dc_gb *g, const char *p, int32_t x, int64_t dim, int32_t *out) {
  char s[256];
  int32_t h;
  DC_TRY(gb_linear(g, P("%s.net.0.proj", p), x, dim, 4 * dim, 1, &h));
  DC_TRY(gb_unary(g, OP_GELU_TANH, P("%s.net.0", p), h, &h));
  return gb_linear(g, P("%s.net.2", p), h, 4 * dim, dim, 1, out);
}

/* x + gate_mlp * ff(norm2(x) * (1 + scale_mlp) + shift_mlp), the chunks from
 * the stream's AdaLayerNormZero mod; norm2 (no affine, eps 1e-6) at
 * p.norm_name, the FeedForward at p.ff_name. */
static dc_status *ff_residual(dc_gb *g, const char *p, const char *norm_name, const char *ff_name, int32_t x,
                              int32_t mod, int64_t dim, int32_t *out) {
  char s[256];
  int32_t n, f;
  DC_TRY(gb_mod_layer_norm(g, P("%s.%s", p, norm_name), x, mod, BLK_ADA_SCALE_MLP * dim, BLK_ADA_SHIFT_MLP * dim, 0,
                           1e-6, &n));
  DC_TRY(blk_feed_forward_gelu_tanh(g, P("%s.%s", p, ff_name), n, dim, &f));
  return gb_gated_add(g, p, x, f, mod, BLK_ADA_GATE_MLP * dim, out);
}

dc_status *blk_gated_feed_forward(dc_gb *g, const char *p, const char *norm_name, const char *ff_name, int32_t x,
                                  int32_t attn, int32_t mod, int64_t dim, int32_t *out) {
  DC_TRY(gb_gated_add(g, p, x, attn, mod, BLK_ADA_GATE_MSA * dim, &x));
  return ff_residual(g, p, norm_name, ff_name, x, mod, dim, out);
}

/* The image stream with use_dual_attention: attn's gated residual, then
 * attn2 (image only, on norm1's second modulation) with gate_msa2, then
 * the feed-forward. */
static dc_status *dual_attention_stream(dc_gb *g, const char *p, const blk_joint_block_cfg *b, int32_t x, int32_t attn,
                                        int32_t n2, int32_t mod, int32_t *out) {
  char s[256];
  blk_joint_attention_cfg a2 = {.dim = b->dim, .heads = b->heads, .head_dim = b->head_dim, .qk_norm = b->qk_norm,
                                .eps = 1e-6};
  int32_t o2, none;
  DC_TRY(gb_gated_add(g, p, x, attn, mod, BLK_ADA_GATE_MSA * b->dim, &x));
  DC_TRY(blk_joint_attention(g, P("%s.attn2", p), &a2, n2, -1, -1, &o2, &none));
  DC_TRY(gb_gated_add(g, p, x, o2, mod, BLK_ADA_GATE_MSA2 * b->dim, &x));
  return ff_residual(g, p, "norm2", "ff", x, mod, b->dim, out);
}

dc_status *blk_joint_transformer_block(dc_gb *g, const char *p, const blk_joint_block_cfg *b, int32_t x, int32_t ctx,
                                       int32_t emb_act, int32_t *out, int32_t *ctx_out) {
  char s[256];
  blk_joint_attention_cfg a = {.dim = b->dim, .heads = b->heads, .head_dim = b->head_dim, .has_context = 1,
                               .qk_norm = b->qk_norm, .eps = 1e-6, .context_pre_only = b->context_pre_only};
  int32_t nx, nx2 = -1, nc, mod, cmod = -1, ax, ac;
  if (b->dual_attention)
    DC_TRY(blk_sd35_ada_layer_norm_zero_x(g, P("%s.norm1", p), x, emb_act, b->dim, &nx, &nx2, &mod));
  else
    DC_TRY(blk_ada_layer_norm_zero(g, P("%s.norm1", p), x, emb_act, b->dim, &nx, &mod));
  if (b->context_pre_only)
    DC_TRY(blk_ada_layer_norm_continuous(g, P("%s.norm1_context", p), ctx, emb_act, b->dim, b->dim, 0, 1e-6, &nc));
  else
    DC_TRY(blk_ada_layer_norm_zero(g, P("%s.norm1_context", p), ctx, emb_act, b->dim, &nc, &cmod));
  DC_TRY(blk_joint_attention(g, P("%s.attn", p), &a, nx, nc, -1, &ax, &ac));
  if (b->dual_attention) DC_TRY(dual_attention_stream(g, p, b, x, ax, nx2, mod, out));
  else DC_TRY(blk_gated_feed_forward(g, p, "norm2", "ff", x, ax, mod, b->dim, out));
  *ctx_out = -1;
  if (b->context_pre_only) return NULL;
  return blk_gated_feed_forward(g, p, "norm2_context", "ff_context", ctx, ac, cmod, b->dim, ctx_out);
}
