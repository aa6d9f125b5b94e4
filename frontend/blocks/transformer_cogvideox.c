/* transformer_cogvideox.c — diffusers' transformers/cogvideox_transformer_3d.py:
 * CogVideoXBlock (blocks.h).  The model around it is
 * frontend/cogvideox_transformer.c. */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* Each stream's share of the attention output [B, T+N, dim] (text first)
 * through to_out.0 into its gated residual: to_out.0 acts per token, so
 * projecting the two shares apart is diffusers' one projection of the
 * joint sequence, and each projection takes its gated residual as an
 * epilogue (passes/fuse_epilogue.c) instead of a pass of its own. */
static dc_status *attention_residuals(dc_gb *g, const char *p, const blk_cogvideox_block_cfg *c, int32_t attn,
                                      int32_t mod, int32_t *x, int32_t *ctx) {
  char s[256];
  int64_t dim = c->attn.dim, t = gb_type(g, *ctx)->dims[1], total = gb_type(g, attn)->dims[1];
  int32_t share;
  DC_TRY(gb_slice(g, P("%s.attn1", p), attn, 1, t, total, &share));
  DC_TRY(gb_linear(g, P("%s.attn1.to_out.0", p), share, dim, dim, 1, &share));
  DC_TRY(gb_gated_add(g, p, *x, share, mod, BLK_COG_GATE * dim, x));
  DC_TRY(gb_slice(g, P("%s.attn1", p), attn, 1, 0, t, &share));
  DC_TRY(gb_linear(g, P("%s.attn1.to_out.0", p), share, dim, dim, 1, &share));
  return gb_gated_add(g, p, *ctx, share, mod, BLK_COG_ENC_GATE * dim, ctx);
}

/* norm1; the attention over [text; video]; each stream's gated residual;
 * norm2; the FeedForward (gelu-approximate) and the gated residuals again.
 * diffusers runs the FeedForward on [text; video] and splits its output;
 * it acts per token, so it runs on each stream here: the same values,
 * without the join and the split. */
dc_status *blk_cogvideox_block(dc_gb *g, const char *p, const blk_cogvideox_block_cfg *c, int32_t x, int32_t ctx,
                               int32_t emb_act, int32_t freqs, int32_t *out, int32_t *ctx_out) {
  char s[256];
  int64_t dim = c->attn.dim, t = gb_type(g, ctx)->dims[1];
  int32_t nx, nc, mod, h;
  DC_TRY(blk_cogvideox_layer_norm_zero(g, P("%s.norm1", p), x, ctx, emb_act, c->time_dim, dim, c->affine, c->eps, &nx,
                                       &nc, &mod));
  DC_TRY(gb_concat(g, P("%s.attn1", p), nc, nx, 1, &h));
  DC_TRY(blk_cogvideox_attention(g, P("%s.attn1", p), &c->attn, h, t, freqs, &h));
  DC_TRY(attention_residuals(g, p, c, h, mod, &x, &ctx));
  DC_TRY(blk_cogvideox_layer_norm_zero(g, P("%s.norm2", p), x, ctx, emb_act, c->time_dim, dim, c->affine, c->eps, &nx,
                                       &nc, &mod));
  DC_TRY(blk_feed_forward_gelu_tanh(g, P("%s.ff", p), nx, dim, &nx));
  DC_TRY(gb_gated_add(g, p, x, nx, mod, BLK_COG_GATE * dim, out));
  DC_TRY(blk_feed_forward_gelu_tanh(g, P("%s.ff", p), nc, dim, &nc));
  return gb_gated_add(g, p, ctx, nc, mod, BLK_COG_ENC_GATE * dim, ctx_out);
}
