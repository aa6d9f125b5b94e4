/* autoencoder_kl_cogvideox.c — diffusers' autoencoders/autoencoder_kl_cogvideox.py:
 * CogVideoXCausalConv3d, CogVideoXSpatialNorm3D, CogVideoXResnetBlock3D, the
 * down, mid and up blocks, CogVideoXEncoder3D and CogVideoXDecoder3D
 * (blocks.h).  Values are [B, C, T, H, W].
 *
 * Causal time padding: a causal conv of time kernel kt sees kt-1 frames
 * before its input: copies of the first frame, or, when frames are decoded
 * in batches, the last kt-1 frames of the previous batch's padded input
 * (diffusers' conv_cache).  Both are built in the graph (slice + concat);
 * the conv3d op pads only H and W.  The cache is a value of the previous
 * batch's subgraph that this batch's conv reads directly, so liveness keeps
 * exactly the frames needed and no more.  CogVideoXSafeConv3d's splitting of
 * large inputs along time is the same sum, so it is a plain conv3d here.
 *
 * Norms: nn.GroupNorm on a 5-D value normalizes each group over channels,
 * frames, rows and columns, which is what group_norm computes on a rank-5
 * NCHW-ordered value (ir/ops.def); the layout pass leaves rank-5 values
 * alone. */
#include <string.h>

#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

void blk_conv_cache_deinit(blk_conv_cache *c) {
  for (int i = 0; i < c->n; i++) dc_free(c->e[i].path);
  dc_free(c->e);
  memset(c, 0, sizeof *c);
}

/* The cache slot of the causal conv at path p (created empty, -1). */
static dc_status *cache_slot(blk_conv_cache *c, const char *p, int32_t **slot) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->e[i].path, p)) return *slot = &c->e[i].frames, NULL;
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 64;
    blk_conv_cache_entry *e = dc_realloc(c->e, sizeof *e * (size_t)cap);
    if (!e) return dc_nomem("the CogVideoX conv caches");
    c->e = e, c->cap = cap;
  }
  blk_conv_cache_entry *e = &c->e[c->n];
  e->path = dc_strdup(p);
  if (!e->path) return dc_nomem("the CogVideoX conv caches");
  e->frames = -1;
  c->n++;
  return *slot = &e->frames, NULL;
}

/* CogVideoXCausalConv3d (pad_mode "first") at p with a k x k x k kernel,
 * stride 1: the kt-1 padding frames (cached or the first frame repeated),
 * then p.conv with zero padding (k-1)/2 in H and W. */
static dc_status *causal_conv(dc_gb *g, const char *p, blk_conv_cache *cache, int32_t x, int64_t cout, int64_t k,
                              int32_t *out) {
  char s[256];
  const dc_type *t = gb_type(g, x);
  int64_t cin = t->dims[1], frames = t->dims[2];
  if (k > 1) {
    int32_t *slot = NULL, pad;
    if (cache) DC_TRY(cache_slot(cache, p, &slot));
    if (slot && *slot >= 0) {
      pad = *slot;
    } else {
      int32_t first;
      DC_TRY(gb_slice(g, p, x, 2, 0, 1, &first));
      pad = first;
      for (int64_t i = 1; i < k - 1; i++) DC_TRY(gb_concat(g, p, pad, first, 2, &pad));
    }
    DC_TRY(gb_concat(g, p, pad, x, 2, &x));
    int64_t padded = frames + k - 1;
    if (slot && cache->save) DC_TRY(gb_slice(g, p, x, 2, padded - (k - 1), padded, slot));
  }
  int64_t kk[3] = {k, k, k}, stride[3] = {1, 1, 1}, pad_hw[2] = {(k - 1) / 2, (k - 1) / 2};
  return gb_conv3d(g, P("%s.conv", p), x, cin, cout, kk, stride, pad_hw, 1, out);
}

/* x repeated r times along time, each frame r times in a row (nearest
 * interpolation by an integer factor): [B,C,T,1,HW] concatenated with itself
 * along the new axis, then read as [B,C,rT,H,W]. */
static dc_status *repeat_frames(dc_gb *g, const char *scope, int32_t x, int64_t r, int32_t *out) {
  if (r == 1) return *out = x, NULL;
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], c = t->dims[1], f = t->dims[2], h = t->dims[3], w = t->dims[4];
  int32_t one, all;
  DC_TRY(gb_reshape(g, scope, x, 4, (int64_t[]){b, c * f, 1, h * w}, &one));
  all = one;
  for (int64_t i = 1; i < r; i++) DC_TRY(gb_concat(g, scope, all, one, 2, &all));
  return gb_reshape(g, scope, all, 5, (int64_t[]){b, c, f * r, h, w}, out);
}

static int is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* F.interpolate(z, size=(T, H, W)) in mode "nearest" where each size is a
 * power-of-two multiple of z's (the only case the CogVideoX blocks make):
 * torch's source index floor(dst * in / out) is then dst / factor, exact
 * copies. */
static dc_status *nearest_to(dc_gb *g, const char *scope, int32_t z, int64_t tf, int64_t hf, int64_t wf,
                             int32_t *out) {
  const dc_type *t = gb_type(g, z);
  int64_t rt = t->dims[2] ? tf / t->dims[2] : 0, rh = t->dims[3] ? hf / t->dims[3] : 0;
  int64_t rw = t->dims[4] ? wf / t->dims[4] : 0;
  if (!is_pow2(rt) || !is_pow2(rh) || rh != rw || rt * t->dims[2] != tf || rh * t->dims[3] != hf ||
      rw * t->dims[4] != wf)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: nearest interpolation of %lldx%lldx%lld to %lldx%lldx%lld (frames x rows x columns) is not "
                    "by power-of-two factors, equal in H and W",
                    scope, (long long)t->dims[2], (long long)t->dims[3], (long long)t->dims[4], (long long)tf,
                    (long long)hf, (long long)wf);
  DC_TRY(repeat_frames(g, scope, z, rt, &z));
  if (rh == 1) return *out = z, NULL;
  dc_node n = dc_node_make(OP_UPSAMPLE, 1, &z);
  dc_node_set_int(&n, "factor", rh);
  return gb_add(g, &n, scope, out);
}

/* CogVideoXSpatialNorm3D at p: zq interpolated to f's size (the first frame
 * apart when f has an odd number of frames > 1), then
 * norm_layer(f) * conv_y(zq) + conv_b(zq); GroupNorm eps 1e-6. */
static dc_status *spatial_norm(dc_gb *g, const char *p, const blk_cvx_cfg *c, blk_conv_cache *cache, int32_t f,
                               int32_t zq, int32_t *out) {
  char s[256];
  const dc_type *tf = gb_type(g, f);
  int64_t ch = tf->dims[1], frames = tf->dims[2], h = tf->dims[3], w = tf->dims[4];
  int32_t z, y, bsh, nf;
  if (frames > 1 && frames % 2 == 1) {
    int32_t first, rest;
    int64_t zt = gb_type(g, zq)->dims[2];
    DC_TRY(gb_slice(g, p, zq, 2, 0, 1, &first));
    DC_TRY(gb_slice(g, p, zq, 2, 1, zt, &rest));
    DC_TRY(nearest_to(g, p, first, 1, h, w, &first));
    DC_TRY(nearest_to(g, p, rest, frames - 1, h, w, &rest));
    DC_TRY(gb_concat(g, p, first, rest, 2, &z));
  } else {
    DC_TRY(nearest_to(g, p, zq, frames, h, w, &z));
  }
  DC_TRY(causal_conv(g, P("%s.conv_y", p), cache, z, ch, 1, &y));
  DC_TRY(causal_conv(g, P("%s.conv_b", p), cache, z, ch, 1, &bsh));
  DC_TRY(gb_group_norm(g, P("%s.norm_layer", p), f, ch, c->groups, 1e-6, &nf));
  DC_TRY(gb_binary(g, OP_MUL, p, nf, y, &nf));
  return gb_binary(g, OP_ADD, p, nf, bsh, out);
}

/* norm1 / norm2 of a resnet: SpatialNorm3D in the decoder (zq >= 0), else
 * GroupNorm with norm_eps; then the nonlinearity (silu). */
static dc_status *norm_act(dc_gb *g, const char *p, const char *name, const blk_cvx_cfg *c, blk_conv_cache *cache,
                           int32_t x, int32_t zq, int32_t *out) {
  char s[256], n[256];
  int64_t ch = gb_type(g, x)->dims[1];
  gb_path(n, sizeof n, "%s.%s", p, name);
  if (zq >= 0) DC_TRY(spatial_norm(g, n, c, cache, x, zq, &x));
  else DC_TRY(gb_group_norm(g, n, x, ch, c->groups, c->eps, &x));
  return gb_unary(g, OP_SILU, P("%s.nonlinearity", p), x, out);
}

/* CogVideoXResnetBlock3D (no temb, dropout the identity): inputs +
 * conv2(act(norm2(conv1(act(norm1(inputs)))))), the inputs through the 1x1x1
 * conv_shortcut (a CogVideoXSafeConv3d, not causal) when channels change. */
static dc_status *resnet3d(dc_gb *g, const char *p, const blk_cvx_cfg *c, blk_conv_cache *cache, int32_t x,
                           int32_t zq, int64_t cout, int32_t *out) {
  char s[256];
  int64_t cin = gb_type(g, x)->dims[1];
  int32_t h;
  DC_TRY(norm_act(g, p, "norm1", c, cache, x, zq, &h));
  DC_TRY(causal_conv(g, P("%s.conv1", p), cache, h, cout, 3, &h));
  DC_TRY(norm_act(g, p, "norm2", c, cache, h, zq, &h));
  DC_TRY(causal_conv(g, P("%s.conv2", p), cache, h, cout, 3, &h));
  if (cin != cout) {
    int64_t one[3] = {1, 1, 1}, pad0[2] = {0, 0};
    DC_TRY(gb_conv3d(g, P("%s.conv_shortcut", p), x, cin, cout, one, one, pad0, 1, &x));
  }
  return gb_binary(g, OP_ADD, p, h, x, out);
}

/* Per-frame nn.Conv2d at p.conv (stride, pad {t,b,l,r}): frames folded into
 * the batch, [B,C,T,H,W] -> [B*T,C,H,W] -> conv -> back. */
static dc_status *frame_conv2d(dc_gb *g, const char *p, int32_t x, int64_t stride, const int64_t pad[4],
                               int32_t *out) {
  char s[256];
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], ch = t->dims[1], f = t->dims[2], h = t->dims[3], w = t->dims[4];
  DC_TRY(gb_permute(g, p, x, 5, (int64_t[]){0, 2, 1, 3, 4}, &x));
  DC_TRY(gb_reshape(g, p, x, 4, (int64_t[]){b * f, ch, h, w}, &x));
  DC_TRY(gb_conv2d(g, P("%s.conv", p), x, ch, ch, 3, stride, pad, &x));
  const dc_type *ty = gb_type(g, x);
  DC_TRY(gb_reshape(g, p, x, 5, (int64_t[]){b, f, ch, ty->dims[2], ty->dims[3]}, &x));
  return gb_permute(g, p, x, 5, (int64_t[]){0, 2, 1, 3, 4}, out);
}

/* avg_pool1d(kernel 2, stride 2) over time: (even + odd frames) * 0.5, the
 * sum rounded once and halved exactly, as torch's pool. */
static dc_status *pool_frames(dc_gb *g, const char *p, int32_t x, int32_t *out) {
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], ch = t->dims[1], f = t->dims[2], h = t->dims[3], w = t->dims[4];
  int32_t pairs, even, odd;
  DC_TRY(gb_reshape(g, p, x, 4, (int64_t[]){b, ch * (f / 2), 2, h * w}, &pairs));
  DC_TRY(gb_slice(g, p, pairs, 2, 0, 1, &even));
  DC_TRY(gb_slice(g, p, pairs, 2, 1, 2, &odd));
  DC_TRY(gb_binary(g, OP_ADD, p, even, odd, &x));
  DC_TRY(gb_scale(g, p, x, 0.5, &x));
  return gb_reshape(g, p, x, 5, (int64_t[]){b, ch, f / 2, h, w}, out);
}

dc_status *blk_cvx_downsample3d(dc_gb *g, const char *p, int32_t x, int compress_time, int32_t *out) {
  int64_t f = gb_type(g, x)->dims[2];
  if (compress_time && f % 2 == 1) {
    int32_t first, rest;
    if (f > 1) {
      DC_TRY(gb_slice(g, p, x, 2, 0, 1, &first));
      DC_TRY(gb_slice(g, p, x, 2, 1, f, &rest));
      DC_TRY(pool_frames(g, p, rest, &rest));
      DC_TRY(gb_concat(g, p, first, rest, 2, &x));
    }
  } else if (compress_time) {
    DC_TRY(pool_frames(g, p, x, &x));
  }
  static const int64_t pad[4] = {0, 1, 0, 1}; /* F.pad (0, 1, 0, 1): right and bottom */
  return frame_conv2d(g, p, x, 2, pad, out);
}

dc_status *blk_cvx_upsample3d(dc_gb *g, const char *p, int32_t x, int compress_time, int32_t *out) {
  const dc_type *t = gb_type(g, x);
  int64_t f = t->dims[2], h2 = 2 * t->dims[3], w2 = 2 * t->dims[4];
  if (compress_time && f > 1 && f % 2 == 1) {
    int32_t first, rest;
    DC_TRY(gb_slice(g, p, x, 2, 0, 1, &first));
    DC_TRY(gb_slice(g, p, x, 2, 1, f, &rest));
    DC_TRY(nearest_to(g, p, first, 1, h2, w2, &first));
    DC_TRY(nearest_to(g, p, rest, 2 * (f - 1), h2, w2, &rest));
    DC_TRY(gb_concat(g, p, first, rest, 2, &x));
  } else {
    DC_TRY(nearest_to(g, p, x, compress_time && f > 1 ? 2 * f : f, h2, w2, &x));
  }
  static const int64_t pad[4] = {1, 1, 1, 1};
  return frame_conv2d(g, p, x, 1, pad, out);
}

/* CogVideoXMidBlock3D: two resnets at the same width. */
static dc_status *mid_block(dc_gb *g, const char *p, const blk_cvx_cfg *c, blk_conv_cache *cache, int32_t x,
                            int32_t zq, int32_t *out) {
  char s[256];
  int64_t ch = gb_type(g, x)->dims[1];
  for (int i = 0; i < 2; i++) DC_TRY(resnet3d(g, P("%s.resnets.%d", p, i), c, cache, x, zq, ch, &x));
  return *out = x, NULL;
}

dc_status *blk_cvx_encoder(dc_gb *g, const char *p, const blk_cvx_cfg *c, blk_conv_cache *cache, int32_t x,
                           int64_t cout, int32_t *out) {
  char s[256];
  const int64_t *boc = c->block_out_channels;
  int64_t last = boc[c->nblocks - 1];
  DC_TRY(causal_conv(g, P("%s.conv_in", p), cache, x, boc[0], 3, &x));
  for (int i = 0; i < c->nblocks; i++) {
    for (int64_t l = 0; l < c->layers_per_block; l++)
      DC_TRY(resnet3d(g, P("%s.down_blocks.%d.resnets.%lld", p, i, (long long)l), c, cache, x, -1, boc[i], &x));
    if (i < c->nblocks - 1)
      DC_TRY(blk_cvx_downsample3d(g, P("%s.down_blocks.%d.downsamplers.0", p, i), x, i < c->temporal_compress_level,
                                  &x));
  }
  DC_TRY(mid_block(g, P("%s.mid_block", p), c, cache, x, -1, &x));
  DC_TRY(gb_group_norm(g, P("%s.norm_out", p), x, last, c->groups, 1e-6, &x));
  DC_TRY(gb_unary(g, OP_SILU, P("%s.conv_act", p), x, &x));
  return causal_conv(g, P("%s.conv_out", p), cache, x, cout, 3, out);
}

dc_status *blk_cvx_decoder(dc_gb *g, const char *p, const blk_cvx_cfg *c, blk_conv_cache *cache, int32_t z,
                           int64_t cout, int32_t *out) {
  char s[256];
  const int64_t *boc = c->block_out_channels;
  int n = c->nblocks;
  int32_t x;
  DC_TRY(causal_conv(g, P("%s.conv_in", p), cache, z, boc[n - 1], 3, &x));
  DC_TRY(mid_block(g, P("%s.mid_block", p), c, cache, x, z, &x));
  for (int i = 0; i < n; i++) {
    int64_t ch = boc[n - 1 - i]; /* reversed block_out_channels */
    for (int64_t l = 0; l < c->layers_per_block + 1; l++)
      DC_TRY(resnet3d(g, P("%s.up_blocks.%d.resnets.%lld", p, i, (long long)l), c, cache, x, z, ch, &x));
    if (i < n - 1)
      DC_TRY(blk_cvx_upsample3d(g, P("%s.up_blocks.%d.upsamplers.0", p, i), x, i < c->temporal_compress_level, &x));
  }
  DC_TRY(spatial_norm(g, P("%s.norm_out", p), c, cache, x, z, &x));
  DC_TRY(gb_unary(g, OP_SILU, P("%s.conv_act", p), x, &x));
  return causal_conv(g, P("%s.conv_out", p), cache, x, cout, 3, out);
}
