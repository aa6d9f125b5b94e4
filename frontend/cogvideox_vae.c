/* cogvideox_vae.c — diffusers' AutoencoderKLCogVideoX as an IR graph, one
 * entry at a time (the blocks are blocks/autoencoder_kl_cogvideox.c):
 *   decode: latents z [B, C, F, h, w] -> video `sample` [B, 3, frames, H, W]
 *   encode: video `sample` [B, 3, frames, H, W] -> `mean`, `logvar`
 *           (DiagonalGaussianDistribution's chunk and clamp, as vae.c gives
 *           them for AutoencoderKL)
 *
 * What diffusers' _encode / _decode do, and so the graph:
 *   - frame batching: the frames go through the coder in batches of
 *     num_sample_frames_batch_size (8) frames to encode and
 *     num_latent_frames_batch_size (2) latent frames to decode, the
 *     remainder in the first batch, the causal convs' caches chained from
 *     batch to batch.  The GroupNorms see one batch, so this changes the
 *     result; --no-vae-frame-batching builds one pass over all frames
 *     instead (what vae.encoder / vae.decoder give on the whole input);
 *   - --vae-slicing: one sample of the batch at a time (batch > 1);
 *   - --vae-tiling: tiled_encode / tiled_decode above the tile size, frame
 *     batching inside each tile; tiles of tile_sample_min_height x _width
 *     pixels (sample_height / 2, sample_width / 2 of the config, or
 *     --tile-size for both), overlap factors 1/6 (rows) and 1/5 (columns),
 *     or --tile-overlap for both.
 * quant_conv / post_quant_conv are 1x1x1 convs over 2 * out_channels /
 * out_channels in diffusers (sic), so they build only when latent_channels
 * equals out_channels; another config is refused naming the key.
 * scaling_factor (and shift_factor) are left to the pipeline and recorded in
 * the metadata, as vae.c does.  Like vae.c, the entry not asked for is built
 * into a scratch module so that every tensor of the checkpoint is checked. */
#include <math.h>
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

#define CVX_MAX_BLOCKS 8

typedef struct {
  const char *path; /* config.json, for messages */
  int64_t in_ch, out_ch, latent, layers, groups, level;
  int64_t boc[CVX_MAX_BLOCKS];
  int nblocks;
  double eps, scaling, shift;
  int64_t sample_h, sample_w;
  int quant, post_quant;
} cvx_config;

/* ---- config ---------------------------------------------------------- */

static dc_status *cfg_block_types(const dc_json_doc *d, const char *key, const char *supported, int nblocks) {
  const char *types[CVX_MAX_BLOCKS];
  int n = 0;
  DC_TRY(dc_json_str_list(d, key, types, CVX_MAX_BLOCKS, &n));
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->root, key);
  if (n == 0 && (!v || cJSON_IsNull(v))) /* diffusers' default: four of them */
    for (n = 0; n < 4; n++) types[n] = supported;
  if (n != nblocks)
    return dc_error(DC_ERR_FORMAT, "%s: \"%s\" has %d entries but \"block_out_channels\" has %d; they must match",
                    d->path, key, n, nblocks);
  for (int i = 0; i < n; i++)
    if (strcmp(types[i], supported) != 0)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: \"%s\"[%d] is \"%s\"; AutoencoderKLCogVideoX builds only %s", d->path,
                      key, i, types[i], supported);
  return NULL;
}

static dc_status *cfg_channels(const dc_json_doc *d, cvx_config *c) {
  int present = 0;
  DC_TRY(dc_json_int_list(d, "block_out_channels", 0, 0, 1, c->boc, CVX_MAX_BLOCKS, &c->nblocks, &present));
  if (!present) {
    static const int64_t def[4] = {128, 256, 256, 512};
    memcpy(c->boc, def, sizeof def);
    c->nblocks = 4;
  }
  if (c->nblocks == 0) return dc_error(DC_ERR_FORMAT, "%s: \"block_out_channels\" must not be empty", d->path);
  for (int i = 0; i < c->nblocks; i++)
    if (c->boc[i] % c->groups)
      return dc_error(DC_ERR_FORMAT, "%s: \"norm_num_groups\" %lld does not divide \"block_out_channels\"[%d] = %lld",
                      d->path, (long long)c->groups, i, (long long)c->boc[i]);
  return NULL;
}

/* temporal_compression_ratio: int(np.log2(ratio)) blocks compress time;
 * diffc takes powers of two (the released 4). */
static dc_status *cfg_time(const dc_json_doc *d, cvx_config *c) {
  double r;
  DC_TRY(dc_json_num(d, "temporal_compression_ratio", 4, &r));
  int level = 0;
  while (level < 16 && (double)((int64_t)1 << level) < r) level++;
  if (r < 1 || (double)((int64_t)1 << level) != r)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"temporal_compression_ratio\" is %g; diffc supports powers of two",
                    d->path, r);
  c->level = level;
  return NULL;
}

static dc_status *cfg_act_fn(const dc_json_doc *d) {
  const char *act;
  DC_TRY(dc_json_str(d, "act_fn", "silu", &act));
  if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: \"act_fn\" is \"%s\", which diffc does not support (supported: silu, swish)", d->path, act);
  return NULL;
}

/* diffusers sizes quant_conv by 2 * out_channels and post_quant_conv by
 * out_channels, yet applies them to the latents: only latent_channels ==
 * out_channels runs in diffusers at all. */
static dc_status *cfg_quant(const dc_json_doc *d, cvx_config *c) {
  DC_TRY(dc_json_bool(d, "use_quant_conv", 0, &c->quant));
  DC_TRY(dc_json_bool(d, "use_post_quant_conv", 0, &c->post_quant));
  if ((c->quant || c->post_quant) && c->latent != c->out_ch)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: \"%s\" is true with \"latent_channels\" %lld != \"out_channels\" %lld: diffusers sizes "
                    "that conv by out_channels and cannot run it on the latents",
                    d->path, c->quant ? "use_quant_conv" : "use_post_quant_conv", (long long)c->latent,
                    (long long)c->out_ch);
  return NULL;
}

static dc_status *cfg_load(const dc_json_doc *d, cvx_config *c) {
  memset(c, 0, sizeof *c);
  c->path = d->path;
  int invert;
  DC_TRY(dc_json_int_min(d, "in_channels", 3, 1, &c->in_ch));
  DC_TRY(dc_json_int_min(d, "out_channels", 3, 1, &c->out_ch));
  DC_TRY(dc_json_int_min(d, "latent_channels", 16, 1, &c->latent));
  DC_TRY(dc_json_int_min(d, "layers_per_block", 3, 0, &c->layers));
  DC_TRY(dc_json_int_min(d, "norm_num_groups", 32, 1, &c->groups));
  DC_TRY(dc_json_num(d, "norm_eps", 1e-6, &c->eps));
  DC_TRY(cfg_channels(d, c));
  DC_TRY(cfg_block_types(d, "down_block_types", "CogVideoXDownBlock3D", c->nblocks));
  DC_TRY(cfg_block_types(d, "up_block_types", "CogVideoXUpBlock3D", c->nblocks));
  DC_TRY(cfg_act_fn(d));
  DC_TRY(cfg_time(d, c));
  DC_TRY(dc_json_int_min(d, "sample_height", 480, 1, &c->sample_h));
  DC_TRY(dc_json_int_min(d, "sample_width", 720, 1, &c->sample_w));
  DC_TRY(dc_json_num(d, "scaling_factor", 1.15258426, &c->scaling));
  DC_TRY(dc_json_num(d, "shift_factor", NAN, &c->shift));
  DC_TRY(dc_json_bool(d, "invert_scale_latents", 0, &invert)); /* the pipeline's business */
  return cfg_quant(d, c);
}

/* 2^(len(block_out_channels) - 1): one spatial downsampling per block but the last. */
static int64_t cfg_factor(const cvx_config *c) { return (int64_t)1 << (c->nblocks - 1); }

/* ---- building ---------------------------------------------------------- */

typedef struct {
  dc_gb g;
  const cvx_config *c;
  const dc_build_options *opt; /* NULL: none */
} cvx_b;

typedef dc_status *(*cvx_fn)(cvx_b *b, int32_t x, int32_t *out);

static blk_cvx_cfg coder_cfg(const cvx_config *c) {
  return (blk_cvx_cfg){.block_out_channels = c->boc, .nblocks = c->nblocks, .layers_per_block = c->layers,
                       .groups = c->groups, .eps = c->eps, .temporal_compress_level = c->level};
}

static dc_status *conv1x1x1(cvx_b *b, const char *name, int32_t x, int32_t *out) {
  int64_t ch = gb_type(&b->g, x)->dims[1], one[3] = {1, 1, 1}, pad0[2] = {0, 0};
  return gb_conv3d(&b->g, name, x, ch, ch, one, one, pad0, 1, out);
}

static int frame_batching(const cvx_b *b) { return !b->opt || !b->opt->vae_no_frame_batching; }

/* One batch of frames (or all of them) through the coder. */
static dc_status *encode_frames(cvx_b *b, blk_conv_cache *cache, int32_t x, int32_t *out) {
  blk_cvx_cfg v = coder_cfg(b->c);
  DC_TRY(blk_cvx_encoder(&b->g, "encoder", &v, cache, x, 2 * b->c->latent, &x));
  if (b->c->quant) DC_TRY(conv1x1x1(b, "quant_conv", x, &x));
  return *out = x, NULL;
}

static dc_status *decode_frames(cvx_b *b, blk_conv_cache *cache, int32_t z, int32_t *out) {
  if (b->c->post_quant) DC_TRY(conv1x1x1(b, "post_quant_conv", z, &z));
  blk_cvx_cfg v = coder_cfg(b->c);
  return blk_cvx_decoder(&b->g, "decoder", &v, cache, z, b->c->out_ch, out);
}

typedef dc_status *(*frames_fn)(cvx_b *b, blk_conv_cache *cache, int32_t x, int32_t *out);

/* diffusers' batch loop: max(F // n, 1) batches, frames [n*i + (i ? F%n : 0),
 * n*(i+1) + F%n), the outputs concatenated along time. */
static dc_status *batched(cvx_b *b, const char *scope, int32_t x, int64_t n, frames_fn fn, int32_t *out) {
  int64_t f = gb_type(&b->g, x)->dims[2];
  if (!frame_batching(b)) return fn(b, NULL, x, out);
  int64_t batches = f / n > 1 ? f / n : 1, rem = f % n;
  blk_conv_cache cache = {0};
  dc_status *st = NULL;
  int32_t all = -1;
  for (int64_t i = 0; i < batches && !st; i++) {
    int64_t start = n * i + (i ? rem : 0), end = n * (i + 1) + rem;
    int32_t part = x;
    if (end > f) end = f;
    cache.save = i + 1 < batches;
    if (start > 0 || end < f) st = gb_slice(&b->g, scope, x, 2, start, end, &part);
    if (!st) st = fn(b, &cache, part, &part);
    if (!st) st = all < 0 ? (all = part, NULL) : gb_concat(&b->g, scope, all, part, 2, &all);
  }
  blk_conv_cache_deinit(&cache);
  *out = all;
  return st;
}

static dc_status *encode_batched(cvx_b *b, int32_t x, int32_t *out) {
  return batched(b, "encode", x, 8, encode_frames, out); /* num_sample_frames_batch_size */
}

static dc_status *decode_batched(cvx_b *b, int32_t z, int32_t *out) {
  return batched(b, "decode", z, 2, decode_frames, out); /* num_latent_frames_batch_size */
}

/* ---- tiling ------------------------------------------------------------ */

/* enable_tiling's numbers, in diffusers' names (pixels; latents for lt). */
typedef struct {
  int64_t st_h, st_w, lt_h, lt_w;
  double ov_h, ov_w;
} cvx_tiling;

static cvx_tiling tiling_of(const cvx_config *c, const dc_build_options *opt) {
  cvx_tiling t;
  t.st_h = opt && opt->tile_size > 0 ? opt->tile_size : c->sample_h / 2;
  t.st_w = opt && opt->tile_size > 0 ? opt->tile_size : c->sample_w / 2;
  t.lt_h = (int64_t)((double)t.st_h / (double)cfg_factor(c));
  t.lt_w = (int64_t)((double)t.st_w / (double)cfg_factor(c));
  t.ov_h = opt && opt->tile_overlap > 0 ? opt->tile_overlap : 1.0 / 6;
  t.ov_w = opt && opt->tile_overlap > 0 ? opt->tile_overlap : 1.0 / 5;
  return t;
}

/* One axis of a tiled pass in the input's units (size, stride) and the
 * output's (extent of the blend, limit of the crop). */
typedef struct {
  int64_t size, stride, extent, limit;
} tile_axis;

static dc_status *blend(cvx_b *b, const char *scope, int32_t x, int32_t prev, int axis, int64_t extent, int32_t *out) {
  dc_node n = dc_node_make(OP_BLEND, 2, (int32_t[]){x, prev});
  dc_node_set_int(&n, "axis", axis);
  dc_node_set_int(&n, "extent", extent);
  return gb_add(&b->g, &n, scope, out);
}

static dc_status *crop(cvx_b *b, const char *scope, int32_t x, int axis, int64_t limit, int32_t *out) {
  int64_t n = gb_type(&b->g, x)->dims[axis];
  if (limit >= n) return *out = x, NULL;
  return gb_slice(&b->g, scope, x, axis, 0, limit, out);
}

/* tiled_encode / tiled_decode: tiles in raster order through fn, each
 * blended in place with the (already blended) tile above (blend_v, axis 3),
 * then the one to its left (blend_h, axis 4), cropped, concatenated along W
 * then H. */
static dc_status *tiled(cvx_b *b, const char *scope, int32_t x, tile_axis ah, tile_axis aw, cvx_fn fn, int32_t *out) {
  const dc_type *t = gb_type(&b->g, x);
  int64_t h = t->dims[3], w = t->dims[4], ncols = (w + aw.stride - 1) / aw.stride;
  int32_t *above = dc_calloc((size_t)ncols + 1, sizeof *above);
  if (!above) return dc_nomem("building the tiled CogVideoX VAE");
  dc_status *st = NULL;
  int32_t rows = -1;
  for (int64_t i = 0; i < h && !st; i += ah.stride) {
    int32_t row = -1, left = -1;
    for (int64_t j = 0, col = 0; j < w && !st; j += aw.stride, col++) {
      int32_t tile = x, cut;
      if (i > 0 || i + ah.size < h) st = gb_slice(&b->g, scope, tile, 3, i, i + ah.size < h ? i + ah.size : h, &tile);
      if (!st && (j > 0 || j + aw.size < w))
        st = gb_slice(&b->g, scope, tile, 4, j, j + aw.size < w ? j + aw.size : w, &tile);
      if (!st) st = fn(b, tile, &tile);
      if (!st && i > 0) st = blend(b, scope, tile, above[col], 3, ah.extent, &tile);
      if (!st && j > 0) st = blend(b, scope, tile, left, 4, aw.extent, &tile);
      above[col] = left = tile;
      if (!st) st = crop(b, scope, tile, 3, ah.limit, &cut);
      if (!st) st = crop(b, scope, cut, 4, aw.limit, &cut);
      if (!st) st = row < 0 ? (row = cut, NULL) : gb_concat(&b->g, scope, row, cut, 4, &row);
    }
    if (!st) st = rows < 0 ? (rows = row, NULL) : gb_concat(&b->g, scope, rows, row, 3, &rows);
  }
  dc_free(above);
  *out = rows;
  return st;
}

static dc_status *encode_maybe_tiled(cvx_b *b, int32_t x, int32_t *out) {
  const dc_type *t = gb_type(&b->g, x);
  cvx_tiling tl = tiling_of(b->c, b->opt);
  if (!b->opt || !b->opt->vae_tiling || !(t->dims[4] > tl.st_w || t->dims[3] > tl.st_h))
    return encode_batched(b, x, out);
  int64_t eh = (int64_t)((double)tl.lt_h * tl.ov_h), ew = (int64_t)((double)tl.lt_w * tl.ov_w);
  tile_axis ah = {tl.st_h, (int64_t)((double)tl.st_h * (1 - tl.ov_h)), eh, tl.lt_h - eh};
  tile_axis aw = {tl.st_w, (int64_t)((double)tl.st_w * (1 - tl.ov_w)), ew, tl.lt_w - ew};
  return tiled(b, "tiled_encode", x, ah, aw, encode_batched, out);
}

static dc_status *decode_maybe_tiled(cvx_b *b, int32_t z, int32_t *out) {
  const dc_type *t = gb_type(&b->g, z);
  cvx_tiling tl = tiling_of(b->c, b->opt);
  if (!b->opt || !b->opt->vae_tiling || !(t->dims[4] > tl.lt_w || t->dims[3] > tl.lt_h))
    return decode_batched(b, z, out);
  int64_t eh = (int64_t)((double)tl.st_h * tl.ov_h), ew = (int64_t)((double)tl.st_w * tl.ov_w);
  tile_axis ah = {tl.lt_h, (int64_t)((double)tl.lt_h * (1 - tl.ov_h)), eh, tl.st_h - eh};
  tile_axis aw = {tl.lt_w, (int64_t)((double)tl.lt_w * (1 - tl.ov_w)), ew, tl.st_w - ew};
  return tiled(b, "tiled_decode", z, ah, aw, decode_batched, out);
}

/* Per sample (x.split(1) ... torch.cat) when slicing and the batch is > 1. */
static dc_status *sliced(cvx_b *b, const char *scope, int32_t x, cvx_fn fn, int32_t *out) {
  int64_t batch = gb_type(&b->g, x)->dims[0];
  if (!b->opt || !b->opt->vae_slicing || batch == 1) return fn(b, x, out);
  int32_t all = -1;
  for (int64_t s = 0; s < batch; s++) {
    int32_t one;
    DC_TRY(gb_slice(&b->g, scope, x, 0, s, s + 1, &one));
    DC_TRY(fn(b, one, &one));
    if (all < 0) all = one;
    else DC_TRY(gb_concat(&b->g, scope, all, one, 0, &all));
  }
  return *out = all, NULL;
}

/* ---- entries ----------------------------------------------------------- */

static dc_status *add_input(cvx_b *b, const char *name, const int64_t *dims, int32_t *out) {
  dc_type t = {DT_F32, 5, {dims[0], dims[1], dims[2], dims[3], dims[4]}};
  *out = dc_module_add_input(b->g.m, name, &t, INIT_NORMAL);
  return *out < 0 ? dc_nomem("adding a graph input") : NULL;
}

static dc_status *build_encode(cvx_b *b, const int64_t *dims, int outputs) {
  int32_t x, mean, logvar;
  int64_t lat = b->c->latent;
  DC_TRY(add_input(b, "sample", dims, &x));
  DC_TRY(sliced(b, "encode", x, encode_maybe_tiled, &x));
  DC_TRY(gb_slice(&b->g, "latent_dist", x, 1, 0, lat, &mean));
  DC_TRY(gb_slice(&b->g, "latent_dist", x, 1, lat, 2 * lat, &logvar));
  dc_node n = dc_node_make(OP_CLAMP, 1, &logvar);
  dc_node_set_float(&n, "min", -30.0);
  dc_node_set_float(&n, "max", 20.0);
  DC_TRY(gb_add(&b->g, &n, "latent_dist", &logvar));
  if (!outputs) return NULL;
  DC_TRY(dc_module_add_output(b->g.m, "mean", mean));
  return dc_module_add_output(b->g.m, "logvar", logvar);
}

static dc_status *build_decode(cvx_b *b, const int64_t *dims, int outputs) {
  int32_t x;
  DC_TRY(add_input(b, "z", dims, &x));
  DC_TRY(sliced(b, "decode", x, decode_maybe_tiled, &x));
  return outputs ? dc_module_add_output(b->g.m, "sample", x) : NULL;
}

static dc_status *check_input(const cvx_config *c, const char *name, const int64_t *dims, int64_t channels,
                              const char *key) {
  char buf[160];
  if (dims[1] != channels)
    return dc_error(DC_ERR_ARGUMENT, "input \"%s\" %s: AutoencoderKLCogVideoX (%s) expects %lld channels (%s)", name,
                    dc_dims_str(dims, 5, buf, sizeof buf), c->path, (long long)channels, key);
  for (int i = 2; i < 5; i++)
    if (dims[i] < 1)
      return dc_error(DC_ERR_ARGUMENT, "input \"%s\" %s: frames, height and width must be at least 1", name,
                      dc_dims_str(dims, 5, buf, sizeof buf));
  return NULL;
}

/* The entry's input shape, checked, and the matching shape of the other
 * entry's input (for the scratch build of the other half).  Defaults: the
 * released pipeline's 49 frames (13 latent frames) at sample_height x
 * sample_width. */
static dc_status *input_shapes(const cvx_config *c, const dc_build_options *opt, int encode, int64_t *video,
                               int64_t *latent) {
  int64_t f = cfg_factor(c), tc = (int64_t)1 << c->level;
  if (encode) {
    int64_t def[5] = {1, c->in_ch, 12 * tc + 1, c->sample_h, c->sample_w};
    DC_TRY(dc_build_input_shape(opt, "sample", 5, def, video));
    DC_TRY(check_input(c, "sample", video, c->in_ch, "in_channels"));
    memcpy(latent, (int64_t[]){video[0], c->latent, 1, video[3] / f > 0 ? video[3] / f : 1,
                               video[4] / f > 0 ? video[4] / f : 1}, sizeof(int64_t) * 5);
    return NULL;
  }
  int64_t def[5] = {1, c->latent, 13, c->sample_h / f > 0 ? c->sample_h / f : 1,
                    c->sample_w / f > 0 ? c->sample_w / f : 1};
  DC_TRY(dc_build_input_shape(opt, "z", 5, def, latent));
  DC_TRY(check_input(c, "z", latent, c->latent, "latent_channels"));
  memcpy(video, (int64_t[]){latent[0], c->in_ch, 1, latent[3] * f, latent[4] * f}, sizeof(int64_t) * 5);
  return NULL;
}

static dc_status *check_other_half(const dc_folder *f, const cvx_config *c, int encode, const int64_t *video,
                                   const int64_t *latent, dc_weights *w) {
  dc_module *m = dc_module_create();
  if (!m) return dc_nomem("checking the other half of the VAE");
  dc_weights w2;
  dc_status *st = dc_weights_init(&w2, m, f);
  if (!st) {
    cvx_b b = {{m, &w2}, c, NULL};
    st = encode ? build_decode(&b, latent, 0) : build_encode(&b, video, 0);
    for (int i = 0; !st && i < f->nentries; i++) w->used[i] |= w2.used[i];
    dc_weights_deinit(&w2);
  }
  dc_module_destroy(m);
  return dc_status_annotate(st, "while checking the %s weights (the %s entry does not use them)",
                            encode ? "decoder" : "encoder", encode ? "encode" : "decode");
}

static dc_status *set_meta(dc_module *m, const cvx_config *c, const dc_build_options *opt, int encode,
                           const int64_t *video, const int64_t *latent) {
  char buf[320];
  DC_TRY(dc_module_set_meta(m, "entry", encode ? "encode" : "decode"));
  snprintf(buf, sizeof buf, "%.9g", c->scaling);
  DC_TRY(dc_module_set_meta(m, "scaling_factor", buf));
  if (!isnan(c->shift)) {
    snprintf(buf, sizeof buf, "%.9g", c->shift);
    DC_TRY(dc_module_set_meta(m, "shift_factor", buf));
  }
  DC_TRY(dc_module_set_meta(m, "note", encode ? "the graph does not apply scaling_factor: pipelines multiply the "
                                                "latents by it after encode"
                                              : "the graph does not apply scaling_factor: pipelines divide the "
                                                "latents by it before decode"));
  int64_t frames = encode ? video[2] : latent[2], n = encode ? 8 : 2, batches = frames / n > 1 ? frames / n : 1;
  if (opt && opt->vae_no_frame_batching)
    snprintf(buf, sizeof buf, "off: all %lld %sframes in one pass (differs from diffusers' %s, which batches them)",
             (long long)frames, encode ? "" : "latent ", encode ? "encode" : "decode");
  else if (batches == 1)
    snprintf(buf, sizeof buf, "one batch: all %lld %sframes (diffusers' batches hold %lld, the remainder joins the "
             "first)", (long long)frames, encode ? "" : "latent ", (long long)n);
  else
    snprintf(buf, sizeof buf, "%lld batches of %lld %sframes (the first %lld), conv caches chained", (long long)batches,
             (long long)n, encode ? "" : "latent ", (long long)(frames - n * (batches - 1)));
  return dc_module_set_meta(m, "vae_frame_batching", buf);
}

static dc_status *check_tiling(const cvx_config *c, const dc_build_options *opt) {
  cvx_tiling t = tiling_of(c, opt);
  if (opt->tile_overlap < 0 || (opt->tile_overlap > 0 && opt->tile_overlap >= 1))
    return dc_error(DC_ERR_ARGUMENT, "--tile-overlap %g: the overlap factor must be in (0, 1)", opt->tile_overlap);
  if ((int64_t)((double)t.lt_h * (1 - t.ov_h)) < 1 || (int64_t)((double)t.lt_w * (1 - t.ov_w)) < 1 ||
      (int64_t)((double)t.st_h * (1 - t.ov_h)) < 1 || (int64_t)((double)t.st_w * (1 - t.ov_w)) < 1)
    return dc_error(DC_ERR_ARGUMENT,
                    "%s: tiles of %lldx%lld px (%s) at overlaps %g x %g leave no stride of at least one latent "
                    "(%lld px per latent)",
                    c->path, (long long)t.st_h, (long long)t.st_w,
                    opt->tile_size > 0 ? "--tile-size" : "sample_height / 2 x sample_width / 2", t.ov_h, t.ov_w,
                    (long long)cfg_factor(c));
  return NULL;
}

/* Metadata "vae_tiling": the tiles, or why there are none (diffusers tiles
 * only an input larger than one tile). */
static dc_status *describe_tiling(dc_module *m, const cvx_config *c, const dc_build_options *opt, int encode,
                                  const int64_t *video, const int64_t *latent) {
  cvx_tiling t = tiling_of(c, opt);
  int64_t h = encode ? video[3] : latent[3], w = encode ? video[4] : latent[4];
  int64_t sh = encode ? t.st_h : t.lt_h, sw = encode ? t.st_w : t.lt_w;
  const char *unit = encode ? "px" : "latents";
  char what[320];
  if (h <= sh && w <= sw) {
    snprintf(what, sizeof what, "requested, no effect: %s %lldx%lld %s fits one tile of %lldx%lld %s; diffusers "
             "tiles only a larger input", encode ? "sample" : "z", (long long)h, (long long)w, unit, (long long)sh,
             (long long)sw, unit);
    return dc_module_set_meta(m, "vae_tiling", what);
  }
  int64_t rh = (int64_t)((double)sh * (1 - t.ov_h)), rw = (int64_t)((double)sw * (1 - t.ov_w));
  int64_t rows = (h + rh - 1) / rh, cols = (w + rw - 1) / rw;
  snprintf(what, sizeof what, "tiles of %lldx%lld %s every %lldx%lld, overlap %.4g x %.4g: %lldx%lld = %lld tiles, "
           "frames batched in each", (long long)sh, (long long)sw, unit, (long long)rh, (long long)rw, t.ov_h,
           t.ov_w, (long long)rows, (long long)cols, (long long)(rows * cols));
  return dc_module_set_meta(m, "vae_tiling", what);
}

static dc_status *describe_slicing(dc_module *m, int64_t batch) {
  char what[160];
  if (batch > 1) snprintf(what, sizeof what, "one sample at a time: %lld slices", (long long)batch);
  else snprintf(what, sizeof what, "requested, no effect: batch 1; diffusers slices only a batch larger than 1");
  return dc_module_set_meta(m, "vae_slicing", what);
}

static dc_status *build(const dc_folder *f, const cvx_config *c, const dc_build_options *opt, int encode,
                        dc_module *m, dc_weights *w) {
  int64_t video[5], latent[5];
  DC_TRY(input_shapes(c, opt, encode, video, latent));
  DC_TRY(set_meta(m, c, opt, encode, video, latent));
  if (opt && opt->vae_tiling) DC_TRY(check_tiling(c, opt));
  if (opt && opt->vae_tiling) DC_TRY(describe_tiling(m, c, opt, encode, video, latent));
  if (opt && opt->vae_slicing) DC_TRY(describe_slicing(m, encode ? video[0] : latent[0]));
  cvx_b b = {{m, w}, c, opt};
  DC_TRY(encode ? build_encode(&b, video, 1) : build_decode(&b, latent, 1));
  DC_TRY(check_other_half(f, c, encode, video, latent, w));
  return dc_weights_check_all_used(w);
}

static dc_status *build_cogvideox_vae(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  int encode = strcmp(opt->entry, "encode") == 0;
  cvx_config c;
  DC_TRY(cfg_load(&f->config, &c));
  dc_weights w;
  DC_TRY(dc_weights_init(&w, m, f));
  dc_status *st = build(f, &c, opt, encode, m, &w);
  dc_weights_deinit(&w);
  return st;
}

/* ---- the class descriptor -------------------------------------------- */

/* Every argument of AutoencoderKLCogVideoX.__init__ with diffusers' default.
 * latents_mean, latents_std, force_upcast and invert_scale_latents are read
 * by pipelines, not by the model. */
static const dc_config_key cvx_keys[] = {
    {"in_channels", DC_KEY_INT, "3", 0, NULL},
    {"out_channels", DC_KEY_INT, "3", 0, NULL},
    {"down_block_types", DC_KEY_STRS, "[\"CogVideoXDownBlock3D\", \"CogVideoXDownBlock3D\", \"CogVideoXDownBlock3D\", "
                                      "\"CogVideoXDownBlock3D\"]", 0, "CogVideoXDownBlock3D"},
    {"up_block_types", DC_KEY_STRS, "[\"CogVideoXUpBlock3D\", \"CogVideoXUpBlock3D\", \"CogVideoXUpBlock3D\", "
                                    "\"CogVideoXUpBlock3D\"]", 0, "CogVideoXUpBlock3D"},
    {"block_out_channels", DC_KEY_INTS, "[128, 256, 256, 512]", 0, NULL},
    {"latent_channels", DC_KEY_INT, "16", 0, NULL},
    {"layers_per_block", DC_KEY_INT, "3", 0, NULL},
    {"act_fn", DC_KEY_STR, "\"silu\"", 0, "silu, swish"},
    {"norm_eps", DC_KEY_NUM, "1e-06", 0, NULL},
    {"norm_num_groups", DC_KEY_INT, "32", 0, NULL},
    {"temporal_compression_ratio", DC_KEY_NUM, "4", 0, NULL},
    {"sample_height", DC_KEY_INT, "480", 0, NULL},
    {"sample_width", DC_KEY_INT, "720", 0, NULL},
    {"scaling_factor", DC_KEY_NUM, "1.15258426", 0, NULL},
    {"shift_factor", DC_KEY_NUM, "null", 1, NULL},
    {"latents_mean", DC_KEY_ANY, "null", 1, NULL},
    {"latents_std", DC_KEY_ANY, "null", 1, NULL},
    {"force_upcast", DC_KEY_BOOL, "true", 0, NULL},
    {"use_quant_conv", DC_KEY_BOOL, "false", 0, NULL},
    {"use_post_quant_conv", DC_KEY_BOOL, "false", 0, NULL},
    {"invert_scale_latents", DC_KEY_BOOL, "false", 0, NULL},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_entry_io video_io[] = {{"sample", NULL}, {NULL, NULL}};
static const dc_entry_io latent_dist_io[] = {{"mean", NULL}, {"logvar", NULL}, {NULL, NULL}};
static const dc_entry_io latents_io[] = {{"z", NULL}, {NULL, NULL}};
static const dc_entry_desc cvx_entries[] = {
    {"encode", video_io, latent_dist_io},
    {"decode", latents_io, video_io},
    {NULL, NULL, NULL},
};

const dc_class_desc dc_class_autoencoder_kl_cogvideox = {
    .name = "AutoencoderKLCogVideoX",
    .library = DC_LIB_DIFFUSERS,
    .keys = cvx_keys,
    .entries = cvx_entries,
    .default_entry = "decode",
    .build = build_cogvideox_vae,
    /* no _group_offload_block_modules in diffusers: block lists at the top level only (there are none, so
     * block-level group offload makes the whole model one group, as diffusers' apply_group_offloading) */
    .facts = {.block_modules = NULL, .skip_cast = NULL,
              .options = DC_FACT_VAE_SLICING | DC_FACT_VAE_TILING | DC_FACT_VAE_FRAME_BATCHING},
};
