/* transformer_2d.c — diffusers' transformers/transformer_2d.py:
 * Transformer2DModel on continuous input (blocks.h). */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* GroupNorm (eps 1e-6), proj_in (a 1x1 conv before the token reshape, or a
 * Linear after it), the blocks, proj_out mirrored, plus the residual.  The
 * inner width is heads * (channels // heads), as in diffusers. */
dc_status *blk_transformer_2d(dc_gb *g, const char *p, const blk_transformer_cfg *t, int32_t x, int64_t ch,
                              int64_t heads, int64_t layers, int32_t *out) {
  char s[256];
  int64_t hh = gb_type(g, x)->dims[2], ww = gb_type(g, x)->dims[3], head_dim = ch / heads, inner = heads * head_dim;
  int32_t h;
  if (head_dim < 1)
    return dc_error(DC_ERR_FORMAT, "%s: %s has %lld channels but %lld attention heads (\"attention_head_dim\" "
                    "is the head count in diffusers)", t->config, p, (long long)ch, (long long)heads);
  DC_TRY(gb_group_norm(g, P("%s.norm", p), x, ch, t->groups, 1e-6, &h));
  if (t->linear_projection) {
    DC_TRY(gb_to_tokens(g, p, h, &h));
    DC_TRY(gb_linear(g, P("%s.proj_in", p), h, ch, inner, 1, &h));
  } else {
    DC_TRY(gb_conv2d_same(g, P("%s.proj_in", p), h, ch, inner, 1, 1, &h));
    DC_TRY(gb_to_tokens(g, p, h, &h));
  }
  for (int64_t k = 0; k < layers; k++)
    DC_TRY(blk_basic_transformer(g, P("%s.transformer_blocks.%lld", p, (long long)k), h, inner, heads, head_dim,
                                 t->ctx, t->ctx_dim, &h));
  if (t->linear_projection) {
    DC_TRY(gb_linear(g, P("%s.proj_out", p), h, inner, ch, 1, &h));
    DC_TRY(gb_from_tokens(g, p, h, hh, ww, &h));
  } else {
    DC_TRY(gb_from_tokens(g, p, h, hh, ww, &h));
    DC_TRY(gb_conv2d_same(g, P("%s.proj_out", p), h, inner, ch, 1, 1, &h));
  }
  return gb_binary(g, OP_ADD, p, h, x, out);
}
