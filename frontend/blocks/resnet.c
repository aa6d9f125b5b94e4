/* resnet.c — diffusers' resnet.py, downsampling.py and upsampling.py:
 * ResnetBlock2D, Downsample2D, Upsample2D (blocks.h). */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* The time embedding's projection, added to h as [B, cout, 1, 1]:
 * time_emb_proj(nonlinearity(temb))[:, :, None, None]. */
static dc_status *add_time(dc_gb *g, const char *p, const blk_resnet_cfg *r, int32_t h, int64_t cout, int32_t *out) {
  char s[256];
  int32_t t;
  DC_TRY(gb_unary(g, OP_SILU, P("%s.nonlinearity", p), r->temb, &t));
  DC_TRY(gb_linear(g, P("%s.time_emb_proj", p), t, r->temb_dim, cout, 1, &t));
  DC_TRY(gb_reshape(g, P("%s.time_emb_proj", p), t, 4, (int64_t[]){gb_type(g, t)->dims[0], cout, 1, 1}, &t));
  return gb_binary(g, OP_ADD, p, h, t, out);
}

/* shortcut(x) + conv2(silu(norm2(conv1(silu(norm1(x))) [+ temb]))); the
 * final / output_scale_factor is a division by 1, left out. */
dc_status *blk_resnet(dc_gb *g, const char *p, const blk_resnet_cfg *r, int32_t x, int64_t cout, int32_t *out) {
  char s[256];
  int64_t cin = gb_type(g, x)->dims[1];
  int32_t h;
  DC_TRY(gb_group_norm(g, P("%s.norm1", p), x, cin, r->groups, r->eps, &h));
  DC_TRY(gb_unary(g, OP_SILU, P("%s.nonlinearity", p), h, &h));
  DC_TRY(gb_conv2d_same(g, P("%s.conv1", p), h, cin, cout, 3, 1, &h));
  if (r->temb >= 0) DC_TRY(add_time(g, p, r, h, cout, &h));
  DC_TRY(gb_group_norm(g, P("%s.norm2", p), h, cout, r->groups, r->eps, &h));
  DC_TRY(gb_unary(g, OP_SILU, P("%s.nonlinearity", p), h, &h));
  DC_TRY(gb_conv2d_same(g, P("%s.conv2", p), h, cout, cout, 3, 1, &h)); /* dropout is the identity in eval */
  if (cin != cout) DC_TRY(gb_conv2d_same(g, P("%s.conv_shortcut", p), x, cin, cout, 1, 1, &x)); /* use_in_shortcut */
  return gb_binary(g, OP_ADD, p, x, h, out);
}

/* Downsample2D: with padding 0, diffusers pads right and bottom by one
 * (F.pad (0,1,0,1)) before the stride-2 conv. */
dc_status *blk_downsample(dc_gb *g, const char *p, int32_t x, int64_t cout, int64_t padding, int32_t *out) {
  char s[256];
  static const int64_t pad1[4] = {1, 1, 1, 1}, pad0[4] = {0, 1, 0, 1};
  return gb_conv2d(g, P("%s.conv", p), x, gb_type(g, x)->dims[1], cout, 3, 2, padding ? pad1 : pad0, out);
}

/* Upsample2D: F.interpolate(scale_factor=2, mode="nearest"), then the conv. */
dc_status *blk_upsample(dc_gb *g, const char *p, int32_t x, int64_t cout, int32_t *out) {
  char s[256];
  dc_node n = dc_node_make(OP_UPSAMPLE, 1, &x);
  dc_node_set_int(&n, "factor", 2);
  DC_TRY(gb_add(g, &n, p, &x));
  return gb_conv2d_same(g, P("%s.conv", p), x, gb_type(g, x)->dims[1], cout, 3, 1, out);
}
