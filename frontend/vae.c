/* vae.c — diffusers' AutoencoderKL as an IR graph, one entry at a time:
 *   encode: image `sample` -> `mean`, `logvar` of the latent distribution
 *           (encoder, quant_conv, then DiagonalGaussianDistribution's chunk
 *           and clamp; sampling is left to the caller, pipelines mostly use
 *           the mean or mean + exp(0.5*logvar)*noise)
 *   decode: latents `z` -> image `sample` (post_quant_conv, decoder)
 * The structure follows diffusers' models/autoencoders/{autoencoder_kl,vae}.py
 * and unets/unet_2d_blocks.py module for module, and every node's scope is
 * the torch module path it comes from, so a dump reads like the state dict.
 *
 * Neither entry applies scaling_factor / shift_factor: diffusers' model does
 * not either (pipelines scale latents outside it), so they are recorded in
 * the module's metadata instead.
 *
 * One entry uses half of the checkpoint.  So that "every tensor was used"
 * still proves the graph is the model, the other half is built too, into a
 * scratch module that is thrown away: its weights are then checked for
 * presence and shape exactly as the real graph's are, and a tensor counts as
 * used when either half bound it. */
#include <math.h>
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

#define VAE_MAX_BLOCKS 8

typedef struct {
  const char *path; /* config.json, for messages */
  int64_t in_ch, out_ch, latent, layers, groups;
  int64_t boc[VAE_MAX_BLOCKS]; /* block_out_channels */
  int nblocks;
  int64_t sample_h, sample_w; /* sample_size, an int or [h, w] */
  double scaling, shift; /* shift is NAN when absent */
  int quant, post_quant, mid_attn;
} vae_config;

/* ---- config ---------------------------------------------------------- */

/* A list of block type names, each of which must be `supported`.
 * get_down_block/get_up_block strip a "UNetRes" prefix, and so do we. */
static dc_status *cfg_block_types(const dc_json_doc *d, const char *key, const char *supported,
                                  int nblocks) {
  const char *types[VAE_MAX_BLOCKS];
  int n = 0;
  DC_TRY(dc_json_str_list(d, key, types, VAE_MAX_BLOCKS, &n));
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->root, key);
  if (n == 0 && (!v || cJSON_IsNull(v))) {
    types[0] = supported; /* diffusers' default: one block */
    n = 1;
  }
  if (n != nblocks)
    return dc_error(DC_ERR_FORMAT,
                    "%s: \"%s\" has %d entries but \"block_out_channels\" has %d; they must match",
                    d->path, key, n, nblocks);
  for (int i = 0; i < n; i++) {
    const char *t = strncmp(types[i], "UNetRes", 7) == 0 ? types[i] + 7 : types[i];
    if (strcmp(t, supported) != 0)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: \"%s\"[%d] is \"%s\", which diffc does not support (supported: %s)",
                      d->path, key, i, types[i], supported);
  }
  return NULL;
}

static dc_status *cfg_channels(const dc_json_doc *d, vae_config *c) {
  int present = 0;
  DC_TRY(dc_json_int_list(d, "block_out_channels", 0, 0, 1, c->boc, VAE_MAX_BLOCKS, &c->nblocks,
                          &present));
  if (!present) c->boc[0] = 64, c->nblocks = 1; /* diffusers' default (64,) */
  if (c->nblocks == 0)
    return dc_error(DC_ERR_FORMAT, "%s: \"block_out_channels\" must not be empty", d->path);
  /* torch's GroupNorm refuses these at construction; say which key. */
  for (int i = 0; i < c->nblocks; i++)
    if (c->boc[i] % c->groups)
      return dc_error(
          DC_ERR_FORMAT,
          "%s: \"norm_num_groups\" %lld does not divide \"block_out_channels\"[%d] = %lld", d->path,
          (long long)c->groups, i, (long long)c->boc[i]);
  return NULL;
}

static dc_status *cfg_sample_size(const dc_json_doc *d, vae_config *c) {
  int64_t s[2];
  int n = 0, present = 0;
  DC_TRY(dc_json_int_list(d, "sample_size", 1, 0, 1, s, 2, &n, &present));
  if (!present) s[0] = 32, n = 1; /* diffusers' default */
  c->sample_h = s[0];
  c->sample_w = n == 2 ? s[1] : s[0];
  return NULL;
}

static dc_status *cfg_act_fn(const dc_json_doc *d) {
  const char *act;
  DC_TRY(dc_json_str(d, "act_fn", "silu", &act));
  /* get_activation maps both names to nn.SiLU. */
  if (strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0)
    return dc_error(
        DC_ERR_UNSUPPORTED,
        "%s: \"act_fn\" is \"%s\", which diffc does not support (supported: silu, swish)", d->path,
        act);
  return NULL;
}

/* Defaults are AutoencoderKL.__init__'s.  latents_mean/latents_std are
 * informational (pipelines use them outside the model) and force_upcast has
 * no effect on an fp32 graph, so neither is read. */
static dc_status *cfg_load(const dc_json_doc *d, vae_config *c) {
  memset(c, 0, sizeof *c);
  c->path = d->path;
  DC_TRY(dc_json_int_min(d, "in_channels", 3, 1, &c->in_ch));
  DC_TRY(dc_json_int_min(d, "out_channels", 3, 1, &c->out_ch));
  DC_TRY(dc_json_int_min(d, "latent_channels", 4, 1, &c->latent));
  DC_TRY(dc_json_int_min(d, "layers_per_block", 1, 0, &c->layers));
  DC_TRY(dc_json_int_min(d, "norm_num_groups", 32, 1, &c->groups));
  DC_TRY(cfg_channels(d, c));
  DC_TRY(cfg_block_types(d, "down_block_types", "DownEncoderBlock2D", c->nblocks));
  DC_TRY(cfg_block_types(d, "up_block_types", "UpDecoderBlock2D", c->nblocks));
  DC_TRY(cfg_act_fn(d));
  DC_TRY(cfg_sample_size(d, c));
  DC_TRY(dc_json_num(d, "scaling_factor", 0.18215, &c->scaling));
  DC_TRY(dc_json_num(d, "shift_factor", NAN, &c->shift));
  DC_TRY(dc_json_bool(d, "use_quant_conv", 1, &c->quant));
  DC_TRY(dc_json_bool(d, "use_post_quant_conv", 1, &c->post_quant));
  DC_TRY(dc_json_bool(d, "mid_block_add_attention", 1, &c->mid_attn));
  return NULL;
}

/* The spatial factor between image and latents: one Downsample2D per block
 * but the last. */
static int64_t cfg_factor(const vae_config *c) { return (int64_t)1 << (c->nblocks - 1); }

/* ---- layers ---------------------------------------------------------- */

typedef struct {
  dc_gb g;
  const vae_config *c;
  const dc_build_options *opt; /* slicing and tiling; NULL for none */
} vae_b;

/* Encoder and Decoder (blocks/vae_blocks.c) over this config. */
static blk_vae_cfg coder_cfg(const vae_config *c) {
  return (blk_vae_cfg){.block_out_channels = c->boc, .nblocks = c->nblocks, .layers_per_block = c->layers,
                       .groups = c->groups, .mid_block_add_attention = c->mid_attn};
}

static dc_status *conv1x1(vae_b *b, const char *name, int32_t x, int32_t *out) {
  int64_t ch = gb_type(&b->g, x)->dims[1];
  return gb_conv2d(&b->g, name, x, ch, ch, 1, 1, (int64_t[]){0, 0, 0, 0}, out);
}

/* ---- entries --------------------------------------------------------- */

static dc_status *check_input(const vae_config *c, const char *name, const int64_t *dims,
                              int64_t channels, const char *key, int64_t multiple) {
  char buf[160];
  if (dims[1] != channels)
    return dc_error(DC_ERR_ARGUMENT,
                    "input \"%s\" %s: AutoencoderKL (%s) expects %lld channels (%s)", name,
                    dc_dims_str(dims, 4, buf, sizeof buf), c->path, (long long)channels, key);
  if (dims[2] % multiple || dims[3] % multiple)
    return dc_error(DC_ERR_ARGUMENT,
                    "input \"%s\" %s: height and width must be multiples of %lld "
                    "(2^(len(block_out_channels)-1), the encoder's downsampling)",
                    name, dc_dims_str(dims, 4, buf, sizeof buf), (long long)multiple);
  return NULL;
}

static dc_status *add_input(vae_b *b, const char *name, const int64_t *dims, int32_t *out) {
  dc_type t = {DT_F32, 4, {dims[0], dims[1], dims[2], dims[3]}};
  *out = dc_module_add_input(b->g.m, name, &t, INIT_NORMAL);
  return *out < 0 ? dc_nomem("adding a graph input") : NULL;
}

/* ---- slicing and tiling (diffusers enable_slicing / enable_tiling) ------ */

static dc_status *slice(vae_b *b, const char *scope, int32_t x, int axis, int64_t start, int64_t end, int32_t *out) {
  const dc_type *t = gb_type(&b->g, x);
  if (end > t->dims[axis]) end = t->dims[axis];
  if (start == 0 && end == t->dims[axis]) return *out = x, NULL;
  dc_node n = dc_node_make(OP_SLICE, 1, &x);
  dc_node_set_int(&n, "axis", axis);
  dc_node_set_int(&n, "start", start);
  dc_node_set_int(&n, "end", end);
  return gb_add(&b->g, &n, scope, out);
}

static dc_status *concat(vae_b *b, const char *scope, int32_t a, int32_t c, int axis, int32_t *out) {
  if (a < 0) return *out = c, NULL;
  int32_t in[2] = {a, c};
  dc_node n = dc_node_make(OP_CONCAT, 2, in);
  dc_node_set_int(&n, "axis", axis);
  return gb_add(&b->g, &n, scope, out);
}

static dc_status *blend(vae_b *b, const char *scope, int32_t x, int32_t prev, int axis, int64_t extent, int32_t *out) {
  int32_t in[2] = {x, prev};
  dc_node n = dc_node_make(OP_BLEND, 2, in);
  dc_node_set_int(&n, "axis", axis);
  dc_node_set_int(&n, "extent", extent);
  return gb_add(&b->g, &n, scope, out);
}

/* What tiling works with, in diffusers' names: tile_sample_min_size (St,
 * pixels), tile_latent_min_size (Lt = St / 2^(blocks-1)), the overlap factor. */
typedef struct {
  int64_t st, lt;
  double overlap;
} tiling;

static tiling tiling_of(const vae_b *b) {
  tiling t;
  t.st = b->opt && b->opt->tile_size > 0 ? b->opt->tile_size : b->c->sample_h;
  t.lt = (int64_t)((double)t.st / (double)cfg_factor(b->c));
  t.overlap = b->opt && b->opt->tile_overlap > 0 ? b->opt->tile_overlap : 0.25;
  return t;
}

typedef dc_status *(*tile_fn)(vae_b *b, int32_t x, int32_t *out);

/* diffusers tiled_decode / _tiled_encode: tiles of `size` every `stride`
 * along H and W in raster order, each through fn; each tile blended in
 * place with the (already blended) tile above, then the one to its left,
 * over `extent`; cropped to row_limit; concatenated along W, then H. */
static dc_status *tiled(vae_b *b, const char *scope, int32_t x, int64_t size, int64_t stride, int64_t extent,
                        int64_t row_limit, tile_fn fn, int32_t *out) {
  const dc_type *t = gb_type(&b->g, x);
  int64_t h = t->dims[2], w = t->dims[3];
  int64_t ncols = (w + stride - 1) / stride;
  int32_t *above = dc_calloc((size_t)ncols + 1, sizeof *above);
  if (!above) return dc_nomem("building the tiled VAE");
  dc_status *st = NULL;
  int32_t rows = -1;
  for (int64_t i = 0; i < h && !st; i += stride) {
    int32_t row = -1, left = -1;
    for (int64_t j = 0, col = 0; j < w && !st; j += stride, col++) {
      int32_t tile, crop;
      st = slice(b, scope, x, 2, i, i + size, &tile);
      if (!st) st = slice(b, scope, tile, 3, j, j + size, &tile);
      if (!st) st = fn(b, tile, &tile);
      if (!st && i > 0) st = blend(b, scope, tile, above[col], 2, extent, &tile);
      if (!st && j > 0) st = blend(b, scope, tile, left, 3, extent, &tile);
      above[col] = left = tile;
      if (!st) st = slice(b, scope, tile, 2, 0, row_limit, &crop);
      if (!st) st = slice(b, scope, crop, 3, 0, row_limit, &crop);
      if (!st) st = concat(b, scope, row, crop, 3, &row);
    }
    if (!st) st = concat(b, scope, rows, row, 2, &rows);
  }
  dc_free(above);
  *out = rows;
  return st;
}

/* Per sample (x.split(1) ... torch.cat) when slicing and the batch is > 1. */
static dc_status *sliced(vae_b *b, const char *scope, int32_t x, tile_fn fn, int32_t *out) {
  int64_t batch = gb_type(&b->g, x)->dims[0];
  if (!b->opt || !b->opt->vae_slicing || batch == 1) return fn(b, x, out);
  int32_t all = -1;
  for (int64_t s = 0; s < batch; s++) {
    int32_t one;
    DC_TRY(slice(b, scope, x, 0, s, s + 1, &one));
    DC_TRY(fn(b, one, &one));
    DC_TRY(concat(b, scope, all, one, 0, &all));
  }
  return *out = all, NULL;
}

/* _encode of one tile or of an untiled image: encoder, quant_conv. */
static dc_status *encode_plain(vae_b *b, int32_t x, int32_t *out) {
  blk_vae_cfg v = coder_cfg(b->c);
  DC_TRY(blk_vae_encoder(&b->g, "encoder", &v, x, 2 * b->c->latent, &x)); /* double_z */
  if (b->c->quant) DC_TRY(conv1x1(b, "quant_conv", x, &x));
  return *out = x, NULL;
}

static dc_status *encode_maybe_tiled(vae_b *b, int32_t x, int32_t *out) {
  const dc_type *t = gb_type(&b->g, x);
  tiling tl = tiling_of(b);
  if (!b->opt || !b->opt->vae_tiling || (t->dims[3] <= tl.st && t->dims[2] <= tl.st)) return encode_plain(b, x, out);
  int64_t extent = (int64_t)((double)tl.lt * tl.overlap);
  return tiled(b, "tiled_encode", x, tl.st, (int64_t)((double)tl.st * (1 - tl.overlap)), extent, tl.lt - extent,
               encode_plain, out);
}

static dc_status *decode_plain(vae_b *b, int32_t z, int32_t *out) {
  if (b->c->post_quant) DC_TRY(conv1x1(b, "post_quant_conv", z, &z));
  blk_vae_cfg v = coder_cfg(b->c);
  return blk_vae_decoder(&b->g, "decoder", &v, z, b->c->out_ch, out);
}

static dc_status *decode_maybe_tiled(vae_b *b, int32_t z, int32_t *out) {
  const dc_type *t = gb_type(&b->g, z);
  tiling tl = tiling_of(b);
  if (!b->opt || !b->opt->vae_tiling || (t->dims[3] <= tl.lt && t->dims[2] <= tl.lt)) return decode_plain(b, z, out);
  int64_t extent = (int64_t)((double)tl.st * tl.overlap);
  return tiled(b, "tiled_decode", z, tl.lt, (int64_t)((double)tl.lt * (1 - tl.overlap)), extent, tl.st - extent,
               decode_plain, out);
}

/* ---- entries, continued ------------------------------------------------ */

/* encode: encoder, quant_conv (sliced and tiled when asked), then
 * DiagonalGaussianDistribution: mean and logvar are torch.chunk(2, dim=1),
 * logvar clamped to [-30, 20]. */
static dc_status *build_encode(vae_b *b, const int64_t *dims, int outputs) {
  int32_t x, mean, logvar;
  int64_t lat = b->c->latent;
  DC_TRY(add_input(b, "sample", dims, &x));
  DC_TRY(sliced(b, "encode", x, encode_maybe_tiled, &x));
  dc_node n = dc_node_make(OP_SLICE, 1, &x);
  dc_node_set_int(&n, "axis", 1);
  dc_node_set_int(&n, "start", 0);
  dc_node_set_int(&n, "end", lat);
  DC_TRY(gb_add(&b->g, &n, "latent_dist", &mean));
  dc_node_set_int(&n, "start", lat);
  dc_node_set_int(&n, "end", 2 * lat);
  DC_TRY(gb_add(&b->g, &n, "latent_dist", &logvar));
  n = dc_node_make(OP_CLAMP, 1, &logvar);
  dc_node_set_float(&n, "min", -30.0);
  dc_node_set_float(&n, "max", 20.0);
  DC_TRY(gb_add(&b->g, &n, "latent_dist", &logvar));
  if (!outputs) return NULL;
  DC_TRY(dc_module_add_output(b->g.m, "mean", mean));
  return dc_module_add_output(b->g.m, "logvar", logvar);
}

static dc_status *build_decode(vae_b *b, const int64_t *dims, int outputs) {
  int32_t x;
  DC_TRY(add_input(b, "z", dims, &x));
  DC_TRY(sliced(b, "decode", x, decode_maybe_tiled, &x));
  return outputs ? dc_module_add_output(b->g.m, "sample", x) : NULL;
}

/* The requested entry's input shape, checked; and the matching shape of the
 * other entry (for the scratch build of the other half). */
static dc_status *input_shapes(const vae_config *c, const dc_build_options *opt, int encode,
                               int64_t *image, int64_t *latent) {
  int64_t f = cfg_factor(c);
  if (encode) {
    int64_t def[4] = {1, c->in_ch, c->sample_h, c->sample_w};
    DC_TRY(dc_build_input_shape(opt, "sample", 4, def, image));
    DC_TRY(check_input(c, "sample", image, c->in_ch, "in_channels", f));
    memcpy(latent, (int64_t[]){image[0], c->latent, image[2] / f, image[3] / f},
           sizeof(int64_t) * 4);
    return NULL;
  }
  int64_t def[4] = {1, c->latent, c->sample_h / f > 0 ? c->sample_h / f : 1,
                    c->sample_w / f > 0 ? c->sample_w / f : 1};
  DC_TRY(dc_build_input_shape(opt, "z", 4, def, latent));
  DC_TRY(check_input(c, "z", latent, c->latent, "latent_channels", 1));
  memcpy(image, (int64_t[]){latent[0], c->in_ch, latent[2] * f, latent[3] * f},
         sizeof(int64_t) * 4);
  return NULL;
}

/* Builds the entry not asked for into a scratch module and marks the
 * tensors it bound as used in w (see the comment at the top). */
static dc_status *check_other_half(const dc_folder *f, const vae_config *c, int encode,
                                   const int64_t *image, const int64_t *latent, dc_weights *w) {
  dc_module *m = dc_module_create();
  if (!m) return dc_nomem("checking the other half of the VAE");
  dc_weights w2;
  dc_status *st = dc_weights_init(&w2, m, f);
  if (!st) {
    vae_b b = {{m, &w2}, c, NULL};
    st = encode ? build_decode(&b, latent, 0) : build_encode(&b, image, 0);
    for (int i = 0; !st && i < f->nentries; i++) w->used[i] |= w2.used[i];
    dc_weights_deinit(&w2);
  }
  dc_module_destroy(m);
  return dc_status_annotate(st, "while checking the %s weights (the %s entry does not use them)",
                            encode ? "decoder" : "encoder", encode ? "encode" : "decode");
}

static dc_status *set_meta(dc_module *m, const vae_config *c, int encode) {
  char buf[64];
  DC_TRY(dc_module_set_meta(m, "entry", encode ? "encode" : "decode"));
  snprintf(buf, sizeof buf, "%.9g", c->scaling);
  DC_TRY(dc_module_set_meta(m, "scaling_factor", buf));
  if (!isnan(c->shift)) {
    snprintf(buf, sizeof buf, "%.9g", c->shift);
    DC_TRY(dc_module_set_meta(m, "shift_factor", buf));
  }
  /* What the pipelines do around the model (SD: scaling only; SD3/Flux add
   * shift_factor): latents = (z - shift) * scale, z = latents / scale + shift. */
  const char *note =
      isnan(c->shift)
          ? (encode ? "the graph does not apply scaling_factor: pipelines multiply the mean (or "
                      "a sample) by it after encode"
                    : "the graph does not apply scaling_factor: pipelines divide the latents by "
                      "it before decode")
          : (encode ? "the graph applies neither shift_factor nor scaling_factor: pipelines "
                      "compute (latents - shift_factor) * scaling_factor after encode"
                    : "the graph applies neither scaling_factor nor shift_factor: pipelines "
                      "compute latents / scaling_factor + shift_factor before decode");
  return dc_module_set_meta(m, "note", note);
}

static dc_status *check_tiling(const vae_config *c, const dc_build_options *opt) {
  int64_t st = opt->tile_size > 0 ? opt->tile_size : c->sample_h, f = cfg_factor(c);
  double ov = opt->tile_overlap > 0 ? opt->tile_overlap : 0.25;
  if (opt->tile_overlap < 0 || ov >= 1)
    return dc_error(DC_ERR_ARGUMENT, "--tile-overlap %g: the overlap factor must be in (0, 1)", opt->tile_overlap);
  if (st < f || (int64_t)((double)(st / f) * (1 - ov)) < 1 || (int64_t)((double)st * (1 - ov)) < 1)
    return dc_error(DC_ERR_ARGUMENT,
                    "--tile-size %lld: a tile must be at least %lld pixels (2^(len(block_out_channels)-1)) and "
                    "leave a stride of at least one latent at overlap %g",
                    (long long)st, (long long)f, ov);
  return NULL;
}

/* Tiles along one side of length n, every stride: as tiled() loops. */
static int64_t tiles_along(int64_t n, int64_t stride) { return (n + stride - 1) / stride; }

/* Metadata "vae_tiling": the tiles tiled() builds, or why there are none.
 * diffusers tiles only an input larger than one tile (_encode / _decode
 * test the last two dims against tile_sample_min_size /
 * tile_latent_min_size); the graph does the same, and this line says so
 * (the driver repeats a "no effect" on stderr). */
static dc_status *describe_tiling(dc_module *m, const vae_config *c, const dc_build_options *opt, int encode,
                                  const int64_t *image, const int64_t *latent) {
  vae_b b = {{m, NULL}, c, opt};
  tiling tl = tiling_of(&b);
  int64_t f = cfg_factor(c), h = encode ? image[2] : latent[2], w = encode ? image[3] : latent[3];
  int64_t size = encode ? tl.st : tl.lt; /* the tile in the input's own units */
  const char *unit = encode ? "px" : "latents";
  char what[320];
  if (h <= size && w <= size) {
    snprintf(what, sizeof what,
             "requested, no effect: %s %lldx%lld %s fits one tile of %lld %s (--tile-size %lld px); diffusers tiles "
             "only a larger input",
             encode ? "sample" : "z", (long long)h, (long long)w, unit, (long long)size, unit, (long long)tl.st);
    return dc_module_set_meta(m, "vae_tiling", what);
  }
  int64_t stride = (int64_t)((double)size * (1 - tl.overlap));
  int64_t blend = encode ? (int64_t)((double)tl.lt * tl.overlap) : (int64_t)((double)tl.st * tl.overlap);
  int64_t rows = tiles_along(h, stride), cols = tiles_along(w, stride);
  int64_t batch = encode ? image[0] : latent[0], passes = opt->vae_slicing && batch > 1 ? batch : 1;
  char px[32] = "", per[96] = "";
  if (!encode) snprintf(px, sizeof px, " (%lld px)", (long long)(tl.lt * f));
  if (passes > 1) snprintf(per, sizeof per, " per sample, %lld in all", (long long)(rows * cols * passes));
  snprintf(what, sizeof what,
           "tiles of %lldx%lld %s%s every %lld %s, overlap %g, blended over %lld %s: %lldx%lld = %lld tiles%s",
           (long long)size, (long long)size, unit, px, (long long)stride, unit, tl.overlap, (long long)blend,
           encode ? "latents" : "px", (long long)rows, (long long)cols, (long long)(rows * cols), per);
  return dc_module_set_meta(m, "vae_tiling", what);
}

/* Metadata "vae_slicing": diffusers slices only a batch larger than 1. */
static dc_status *describe_slicing(dc_module *m, int64_t batch) {
  char what[160];
  if (batch > 1) snprintf(what, sizeof what, "one sample at a time: %lld slices", (long long)batch);
  else snprintf(what, sizeof what, "requested, no effect: batch 1; diffusers slices only a batch larger than 1");
  return dc_module_set_meta(m, "vae_slicing", what);
}

static dc_status *build(const dc_folder *f, const vae_config *c, const dc_build_options *opt,
                        int encode, dc_module *m, dc_weights *w) {
  int64_t image[4], latent[4];
  DC_TRY(input_shapes(c, opt, encode, image, latent));
  DC_TRY(set_meta(m, c, encode));
  if (opt && opt->vae_tiling) DC_TRY(check_tiling(c, opt));
  if (opt && opt->vae_tiling) DC_TRY(describe_tiling(m, c, opt, encode, image, latent));
  if (opt && opt->vae_slicing) DC_TRY(describe_slicing(m, encode ? image[0] : latent[0]));
  vae_b b = {{m, w}, c, opt};
  DC_TRY(encode ? build_encode(&b, image, 1) : build_decode(&b, latent, 1));
  DC_TRY(check_other_half(f, c, encode, image, latent, w));
  return dc_weights_check_all_used(w);
}

/* opt->entry is "encode" or "decode" (checked by build.c; "decode", the
 * entry a text-to-image pipeline runs, when none is given). */
static dc_status *build_vae(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  int encode = strcmp(opt->entry, "encode") == 0;
  vae_config c;
  DC_TRY(cfg_load(&f->config, &c));
  dc_weights w;
  DC_TRY(dc_weights_init(&w, m, f));
  dc_status *st = build(f, &c, opt, encode, m, &w);
  dc_weights_deinit(&w);
  return st;
}

/* ---- the class descriptor -------------------------------------------- */

/* Every argument of AutoencoderKL.__init__ with diffusers' default.
 * latents_mean, latents_std and force_upcast are read by pipelines, not by
 * the model (force_upcast changes nothing in an fp32 graph). */
static const dc_config_key vae_keys[] = {
    {"in_channels", DC_KEY_INT, "3", 0, NULL},
    {"out_channels", DC_KEY_INT, "3", 0, NULL},
    {"down_block_types", DC_KEY_STRS, "[\"DownEncoderBlock2D\"]", 0, "DownEncoderBlock2D"},
    {"up_block_types", DC_KEY_STRS, "[\"UpDecoderBlock2D\"]", 0, "UpDecoderBlock2D"},
    {"block_out_channels", DC_KEY_INTS, "[64]", 0, NULL},
    {"layers_per_block", DC_KEY_INT, "1", 0, NULL},
    {"act_fn", DC_KEY_STR, "\"silu\"", 0, "silu, swish"},
    {"latent_channels", DC_KEY_INT, "4", 0, NULL},
    {"norm_num_groups", DC_KEY_INT, "32", 0, NULL},
    {"sample_size", DC_KEY_INTS, "32", 0, NULL},
    {"scaling_factor", DC_KEY_NUM, "0.18215", 0, NULL},
    {"shift_factor", DC_KEY_NUM, "null", 1, NULL},
    {"latents_mean", DC_KEY_ANY, "null", 1, NULL},
    {"latents_std", DC_KEY_ANY, "null", 1, NULL},
    {"force_upcast", DC_KEY_BOOL, "true", 0, NULL},
    {"use_quant_conv", DC_KEY_BOOL, "true", 0, NULL},
    {"use_post_quant_conv", DC_KEY_BOOL, "true", 0, NULL},
    {"mid_block_add_attention", DC_KEY_BOOL, "true", 0, NULL},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_entry_io image_io[] = {{"sample", NULL}, {NULL, NULL}};
static const dc_entry_io latent_dist_io[] = {{"mean", NULL}, {"logvar", NULL}, {NULL, NULL}};
static const dc_entry_io latents_io[] = {{"z", NULL}, {NULL, NULL}};
static const dc_entry_desc vae_entries[] = {
    {"encode", image_io, latent_dist_io},
    {"decode", latents_io, image_io},
    {NULL, NULL, NULL},
};
/* diffusers' AutoencoderKL._group_offload_block_modules: block lists are
 * looked for inside these (encoder.down_blocks.0, decoder.up_blocks.1). */
static const char *const vae_block_modules[] = {"encoder", "decoder", "quant_conv", "post_quant_conv", NULL};

const dc_class_desc dc_class_autoencoder_kl = {
    .name = "AutoencoderKL",
    .library = DC_LIB_DIFFUSERS,
    .keys = vae_keys,
    .entries = vae_entries,
    .default_entry = "decode",
    .build = build_vae,
    .facts = {.block_modules = vae_block_modules, .skip_cast = NULL,
              .options = DC_FACT_VAE_SLICING | DC_FACT_VAE_TILING},
};
