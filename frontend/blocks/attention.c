/* attention.c — diffusers' attention.py: BasicTransformerBlock with its
 * FeedForward (blocks.h). */
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
