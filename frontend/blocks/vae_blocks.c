/* vae_blocks.c — diffusers' autoencoders/vae.py: the Encoder and Decoder
 * of AutoencoderKL-style VAEs (blocks.h). */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)
#define VAE_EPS 1e-6 /* resnet_eps of every norm in Encoder and Decoder */

/* conv_norm_out, conv_act (always nn.SiLU, whatever act_fn), conv_out. */
static dc_status *tail(dc_gb *g, const char *p, const blk_vae_cfg *v, int32_t x, int64_t cout, int32_t *out) {
  char s[256];
  int64_t ch = gb_type(g, x)->dims[1];
  DC_TRY(gb_group_norm(g, P("%s.conv_norm_out", p), x, ch, v->groups, VAE_EPS, &x));
  DC_TRY(gb_unary(g, OP_SILU, P("%s.conv_act", p), x, &x));
  return gb_conv2d_same(g, P("%s.conv_out", p), x, ch, cout, 3, 1, out);
}

static dc_status *conv_in(dc_gb *g, const char *p, int32_t x, int64_t cout, int32_t *out) {
  char s[256];
  return gb_conv2d_same(g, P("%s.conv_in", p), x, gb_type(g, x)->dims[1], cout, 3, 1, out);
}

/* DownEncoderBlock2D i: layers_per_block resnets to block_out_channels[i],
 * then (all but the last) Downsample2D with padding 0. */
dc_status *blk_vae_encoder(dc_gb *g, const char *p, const blk_vae_cfg *v, int32_t x, int64_t cout, int32_t *out) {
  char s[256];
  blk_resnet_cfg r = {.groups = v->groups, .eps = VAE_EPS, .temb = -1};
  DC_TRY(conv_in(g, p, x, v->block_out_channels[0], &x));
  for (int i = 0; i < v->nblocks; i++) {
    blk_down_cfg d = {.resnet = &r, .layers = v->layers_per_block, .cout = v->block_out_channels[i],
                      .add_downsample = i < v->nblocks - 1, .downsample_padding = 0};
    DC_TRY(blk_down_block(g, P("%s.down_blocks.%d", p, i), &d, x, NULL, NULL, &x));
  }
  DC_TRY(blk_mid_block(g, P("%s.mid_block", p), &r, 1, v->mid_block_add_attention, x, &x));
  return tail(g, p, v, x, cout, out);
}

/* UpDecoderBlock2D i over the reversed channels: layers_per_block + 1
 * resnets to reversed[i], then (all but the last) Upsample2D. */
dc_status *blk_vae_decoder(dc_gb *g, const char *p, const blk_vae_cfg *v, int32_t x, int64_t cout, int32_t *out) {
  char s[256];
  blk_resnet_cfg r = {.groups = v->groups, .eps = VAE_EPS, .temb = -1};
  DC_TRY(conv_in(g, p, x, v->block_out_channels[v->nblocks - 1], &x));
  DC_TRY(blk_mid_block(g, P("%s.mid_block", p), &r, 1, v->mid_block_add_attention, x, &x));
  for (int i = 0; i < v->nblocks; i++) {
    blk_up_cfg u = {.resnet = &r, .layers = v->layers_per_block + 1, .cout = v->block_out_channels[v->nblocks - 1 - i],
                    .add_upsample = i < v->nblocks - 1};
    DC_TRY(blk_up_block(g, P("%s.up_blocks.%d", p, i), &u, x, NULL, NULL, &x));
  }
  return tail(g, p, v, x, cout, out);
}
