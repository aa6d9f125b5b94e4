/* unet_2d_blocks.c — diffusers' unets/unet_2d_blocks.py: the down, mid and
 * up blocks UNets and VAEs are made of (blocks.h).  A block with a
 * transformer is the CrossAttn... variant of the one without. */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* CrossAttnDownBlock2D / DownBlock2D / DownEncoderBlock2D. */
dc_status *blk_down_block(dc_gb *g, const char *p, const blk_down_cfg *d, int32_t x, int32_t *res, int *nres,
                          int32_t *out) {
  char s[256];
  for (int64_t j = 0; j < d->layers; j++) {
    DC_TRY(blk_resnet(g, P("%s.resnets.%lld", p, (long long)j), d->resnet, x, d->cout, &x));
    if (d->transformer)
      DC_TRY(blk_transformer_2d(g, P("%s.attentions.%lld", p, (long long)j), d->transformer, x, d->cout, d->heads,
                                d->transformer_layers, &x));
    if (res) res[(*nres)++] = x;
  }
  if (d->add_downsample) {
    DC_TRY(blk_downsample(g, P("%s.downsamplers.0", p), x, d->cout, d->downsample_padding, &x));
    if (res) res[(*nres)++] = x;
  }
  *out = x;
  return NULL;
}

/* torch.cat([x, skip], dim=1) for layer j, whose resnet the constructor
 * built for `want` channels; the skip actually popped must agree (diffusers
 * would fail at the conv otherwise). */
static dc_status *concat_skip(dc_gb *g, const char *p, const blk_up_cfg *u, int64_t j, int32_t x, int32_t skip,
                              int32_t *out) {
  int64_t want = (j ? u->cout : u->prev_channels) + (j == u->layers - 1 ? u->in_channels : u->cout);
  int64_t cx = gb_type(g, x)->dims[1], cs = gb_type(g, skip)->dims[1];
  if (cx + cs != want)
    return dc_error(DC_ERR_FORMAT,
                    "%s: %s.resnets.%lld would get %lld channels (%lld + a skip connection of %lld) "
                    "but the config builds it for %lld; diffusers cannot run this model either",
                    u->config, p, (long long)j, (long long)(cx + cs), (long long)cx, (long long)cs, (long long)want);
  dc_node n = dc_node_make(OP_CONCAT, 2, (int32_t[]){x, skip});
  dc_node_set_int(&n, "axis", 1);
  return gb_add(g, &n, p, out);
}

/* CrossAttnUpBlock2D / UpBlock2D (with skips) / UpDecoderBlock2D (without). */
dc_status *blk_up_block(dc_gb *g, const char *p, const blk_up_cfg *u, int32_t x, const int32_t *skips, int *nskips,
                        int32_t *out) {
  char s[256];
  for (int64_t j = 0; j < u->layers; j++) {
    if (skips) DC_TRY(concat_skip(g, p, u, j, x, skips[--*nskips], &x));
    DC_TRY(blk_resnet(g, P("%s.resnets.%lld", p, (long long)j), u->resnet, x, u->cout, &x));
    if (u->transformer)
      DC_TRY(blk_transformer_2d(g, P("%s.attentions.%lld", p, (long long)j), u->transformer, x, u->cout, u->heads,
                                u->transformer_layers, &x));
  }
  if (u->add_upsample) DC_TRY(blk_upsample(g, P("%s.upsamplers.0", p), x, u->cout, &x));
  *out = x;
  return NULL;
}

dc_status *blk_mid_block_cross_attn(dc_gb *g, const char *p, const blk_resnet_cfg *r, const blk_transformer_cfg *t,
                                    int64_t heads, int64_t transformer_layers, int32_t x, int32_t *out) {
  char s[256];
  int64_t ch = gb_type(g, x)->dims[1];
  DC_TRY(blk_resnet(g, P("%s.resnets.0", p), r, x, ch, &x));
  DC_TRY(blk_transformer_2d(g, P("%s.attentions.0", p), t, x, ch, heads, transformer_layers, &x));
  return blk_resnet(g, P("%s.resnets.1", p), r, x, ch, out);
}

dc_status *blk_mid_block(dc_gb *g, const char *p, const blk_resnet_cfg *r, int64_t layers, int add_attention,
                         int32_t x, int32_t *out) {
  char s[256];
  int64_t ch = gb_type(g, x)->dims[1];
  DC_TRY(blk_resnet(g, P("%s.resnets.0", p), r, x, ch, &x));
  for (int64_t k = 0; k < layers; k++) {
    if (add_attention) DC_TRY(blk_attention_spatial(g, P("%s.attentions.%lld", p, (long long)k), r->groups, r->eps, x, &x));
    DC_TRY(blk_resnet(g, P("%s.resnets.%lld", p, (long long)k + 1), r, x, ch, &x));
  }
  *out = x;
  return NULL;
}
