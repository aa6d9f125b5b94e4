/* transformer_cogvideox.c — diffusers' transformers/cogvideox_transformer_3d.py:
 * CogVideoXBlock (blocks.h).  The model around it is
 * frontend/cogvideox_transformer.c. */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* The video's share [T, T+N) of a joint [text; video] value goes to x with
 * the video gate, the text's share [0, T) to ctx with the text gate. */
static dc_status *gated_split(dc_gb *g, const char *p, int32_t joint, int32_t mod, int64_t dim, int32_t *x,
                              int32_t *ctx) {
  int64_t t = gb_type(g, *ctx)->dims[1], total = gb_type(g, joint)->dims[1];
  int32_t share;
  DC_TRY(gb_slice(g, p, joint, 1, t, total, &share));
  DC_TRY(gb_gated_add(g, p, *x, share, mod, BLK_COG_GATE * dim, x));
  DC_TRY(gb_slice(g, p, joint, 1, 0, t, &share));
  return gb_gated_add(g, p, *ctx, share, mod, BLK_COG_ENC_GATE * dim, ctx);
}

/* norm1; the attention over [text; video]; each stream's gated residual;
 * norm2; one FeedForward (gelu-approximate) over [text; video]; the gated
 * residuals again. */
dc_status *blk_cogvideox_block(dc_gb *g, const char *p, const blk_cogvideox_block_cfg *c, int32_t x, int32_t ctx,
                               int32_t emb_act, int32_t freqs, int32_t *out, int32_t *ctx_out) {
  char s[256];
  int64_t dim = c->attn.dim, t = gb_type(g, ctx)->dims[1];
  int32_t nx, nc, mod, h;
  DC_TRY(blk_cogvideox_layer_norm_zero(g, P("%s.norm1", p), x, ctx, emb_act, c->time_dim, dim, c->affine, c->eps, &nx,
                                       &nc, &mod));
  DC_TRY(gb_concat(g, P("%s.attn1", p), nc, nx, 1, &h));
  DC_TRY(blk_cogvideox_attention(g, P("%s.attn1", p), &c->attn, h, t, freqs, &h));
  DC_TRY(gated_split(g, p, h, mod, dim, &x, &ctx));
  DC_TRY(blk_cogvideox_layer_norm_zero(g, P("%s.norm2", p), x, ctx, emb_act, c->time_dim, dim, c->affine, c->eps, &nx,
                                       &nc, &mod));
  DC_TRY(gb_concat(g, P("%s.ff", p), nc, nx, 1, &h));
  DC_TRY(blk_feed_forward_gelu_tanh(g, P("%s.ff", p), h, dim, &h));
  DC_TRY(gated_split(g, p, h, mod, dim, &x, &ctx));
  *out = x, *ctx_out = ctx;
  return NULL;
}
