/* unet.c — the UNet2DConditionModel builder: diffusers' forward, op by op,
 * for the configurations SD1.x, SD2.x and SDXL use.
 *
 * Every config key diffusers' __init__ takes is in the class's schema
 * (the descriptor at the end of this file) and is read here and either
 * honoured exactly or refused with an UNSUPPORTED error that names the key,
 * the value and what is supported; keys diffusers does not know are refused
 * before (config_check.c), rather than guessed at.  Never a silently different graph: the
 * reference is diffusers' own code (unet_2d_condition.py, unet_2d_blocks.py,
 * resnet.py, transformer_2d.py, attention.py, embeddings.py), and each
 * builder below names the class whose forward it mirrors.
 *
 * Keys that are read but change nothing for the supported blocks, exactly as
 * in diffusers: dropout (inference), upcast_attention (the default attention
 * processor ignores it, and fp32 is already upcast), resnet_skip_time_act,
 * resnet_out_scale_factor and cross_attention_norm (passed only to the
 * Simple... and Resnet... block types), mid_block_only_cross_attention (only the
 * UNetMidBlock2DSimpleCrossAttn uses it), addition_embed_type_num_heads
 * (only "text" additions use it).
 *
 * Node scopes are torch module paths ("down_blocks.1.attentions.0.
 * transformer_blocks.0.attn2"); ops the UNet's own forward does (adding the
 * aug embedding) have no scope. */
#include <math.h>
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

enum { UNET_MAX_BLOCKS = 8, UNET_PATH = 256 };
enum { MID_NONE, MID_CROSS_ATTN, MID_PLAIN };

/* The config, resolved the way UNet2DConditionModel.__init__ resolves it. */
typedef struct {
  const dc_json_doc *doc;
  const char *path; /* config.json, for messages */
  int nblocks;
  const char *down_types[UNET_MAX_BLOCKS], *up_types[UNET_MAX_BLOCKS], *mid_type;
  int down_attn[UNET_MAX_BLOCKS], up_attn[UNET_MAX_BLOCKS], mid;
  int64_t boc[UNET_MAX_BLOCKS], layers[UNET_MAX_BLOCKS], tlayers[UNET_MAX_BLOCKS];
  int64_t heads[UNET_MAX_BLOCKS]; /* "attention_head_dim": really the head count */
  int64_t in_ch, out_ch, groups, cross_dim, ds_pad, k_in, k_out, temb_dim;
  double eps, freq_shift;
  int flip, linear_proj, text_time;
  int64_t add_time_dim, add_in_dim;
  int has_size;
  int64_t size[2]; /* sample_size as (height, width) */
} unet_cfg;

/* ---- config: messages ------------------------------------------------- */

static const cJSON *raw(const unet_cfg *c, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(c->doc->root, key);
}

static const char *show(const cJSON *v, char *buf, size_t cap) { return dc_json_show(v, buf, cap); }

static dc_status *unsupported(const unet_cfg *c, const char *key, const char *supported) {
  char buf[96];
  return dc_error(DC_ERR_UNSUPPORTED, "%s: \"%s\" is %s, which diffc does not support (supported: %s)",
                  c->path, key, show(raw(c, key), buf, sizeof buf), supported);
}

/* ---- config: the keys ------------------------------------------------- */

/* Absent or null: diffusers' default None. */
static dc_status *want_null(const unet_cfg *c, const char *key) {
  const cJSON *v = raw(c, key);
  return v && !cJSON_IsNull(v) ? unsupported(c, key, "null") : NULL;
}

/* A bool; need is 0 or 1 when only that value is supported, -1 for any. */
static dc_status *want_bool(const unet_cfg *c, const char *key, int def, int need, int *out) {
  int b;
  DC_TRY(dc_json_bool(c->doc, key, def, &b));
  if (need >= 0 && b != need) return unsupported(c, key, need ? "true" : "false");
  if (out) *out = b;
  return NULL;
}

/* A string that must be one of the NULL-terminated ok[] (NULL value: null). */
static dc_status *want_str(const unet_cfg *c, const char *key, const char *def, const char *const *ok,
                           const char *supported, const char **out) {
  const char *s;
  DC_TRY(dc_json_str(c->doc, key, def, &s));
  for (int i = 0; ok[i]; i++)
    if (s && strcmp(s, ok[i]) == 0) return *out = s, NULL;
  return unsupported(c, key, supported);
}

static dc_status *want_int(const unet_cfg *c, const char *key, int64_t def, int64_t min, int64_t *out) {
  return dc_json_int_min(c->doc, key, def, min, out);
}

/* A per-block int list ("layers_per_block": 2 or [2, 2, 2]). */
static dc_status *want_block_list(unet_cfg *c, const char *key, int64_t def, int64_t *out) {
  int n, present;
  DC_TRY(dc_json_int_list(c->doc, key, 1, c->nblocks, 1, out, UNET_MAX_BLOCKS, &n, &present));
  for (int i = 0; !present && i < c->nblocks; i++) out[i] = def;
  return NULL;
}

/* ---- config: block types ---------------------------------------------- */

static const char *const default_down[] = {"CrossAttnDownBlock2D", "CrossAttnDownBlock2D",
                                           "CrossAttnDownBlock2D", "DownBlock2D"};
static const char *const default_up[] = {"UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D",
                                         "CrossAttnUpBlock2D"};

/* Reads a block type list; attn[i] is 1 for the cross-attention type.  Like
 * get_down_block/get_up_block, a "UNetRes" prefix is dropped first. */
static dc_status *block_types(unet_cfg *c, const char *key, const char *const *def, const char *cross,
                              const char *plain, const char **types, int *attn, int *n) {
  if (raw(c, key)) {
    DC_TRY(dc_json_str_list(c->doc, key, types, UNET_MAX_BLOCKS, n));
  } else {
    memcpy(types, def, sizeof(const char *) * 4);
    *n = 4;
  }
  if (*n == 0) return dc_error(DC_ERR_FORMAT, "%s: \"%s\" must not be empty", c->path, key);
  for (int i = 0; i < *n; i++) {
    const char *t = strncmp(types[i], "UNetRes", 7) == 0 ? types[i] + 7 : types[i];
    attn[i] = strcmp(t, cross) == 0;
    if (!attn[i] && strcmp(t, plain) != 0)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "%s: \"%s\"[%d] is \"%s\", which diffc does not support (supported: %s, %s)",
                      c->path, key, i, types[i], cross, plain);
  }
  return NULL;
}

static dc_status *read_blocks(unet_cfg *c) {
  int nd, nu, nb, present;
  DC_TRY(block_types(c, "down_block_types", default_down, "CrossAttnDownBlock2D", "DownBlock2D",
                     c->down_types, c->down_attn, &nd));
  DC_TRY(block_types(c, "up_block_types", default_up, "CrossAttnUpBlock2D", "UpBlock2D", c->up_types,
                     c->up_attn, &nu));
  if (nd != nu)
    return dc_error(DC_ERR_FORMAT, "%s: \"down_block_types\" has %d entries but \"up_block_types\" has %d",
                    c->path, nd, nu);
  c->nblocks = nd;
  static const int64_t default_boc[] = {320, 640, 1280, 1280};
  DC_TRY(dc_json_int_list(c->doc, "block_out_channels", 0, 0, 1, c->boc, UNET_MAX_BLOCKS, &nb, &present));
  if (!present) nb = 4, memcpy(c->boc, default_boc, sizeof default_boc);
  if (nb != nd)
    return dc_error(DC_ERR_FORMAT, "%s: \"block_out_channels\" has %d entries but \"down_block_types\" has %d",
                    c->path, nb, nd);
  const cJSON *mid = raw(c, "mid_block_type");
  c->mid_type = "UNetMidBlock2DCrossAttn";
  if (mid && cJSON_IsNull(mid)) c->mid_type = "none";
  else DC_TRY(dc_json_str(c->doc, "mid_block_type", c->mid_type, &c->mid_type));
  c->mid = !strcmp(c->mid_type, "none")                      ? MID_NONE
           : !strcmp(c->mid_type, "UNetMidBlock2DCrossAttn") ? MID_CROSS_ATTN
           : !strcmp(c->mid_type, "UNetMidBlock2D")          ? MID_PLAIN
                                                             : -1;
  if (c->mid < 0) return unsupported(c, "mid_block_type", "UNetMidBlock2DCrossAttn, UNetMidBlock2D, null");
  return NULL;
}

/* ---- config: attention ------------------------------------------------ */

/* False, or a per-block list of false. */
static dc_status *read_only_cross(const unet_cfg *c) {
  const cJSON *v = raw(c, "only_cross_attention");
  if (cJSON_IsArray(v)) {
    if (cJSON_GetArraySize(v) != c->nblocks)
      return dc_error(DC_ERR_FORMAT, "%s: \"only_cross_attention\" must have %d entries, got %d", c->path,
                      c->nblocks, cJSON_GetArraySize(v));
    for (const cJSON *e = v->child; e; e = e->next)
      if (!cJSON_IsFalse(e)) return unsupported(c, "only_cross_attention", "false");
    return NULL;
  }
  return want_bool(c, "only_cross_attention", 0, 0, NULL);
}

static dc_status *read_attention(unet_cfg *c) {
  const cJSON *tl = raw(c, "transformer_layers_per_block"), *cad = raw(c, "cross_attention_dim");
  for (const cJSON *e = cJSON_IsArray(tl) ? tl->child : NULL; e; e = e->next)
    if (cJSON_IsArray(e))
      return unsupported(c, "transformer_layers_per_block", "an integer or a list of integers");
  DC_TRY(want_block_list(c, "transformer_layers_per_block", 1, c->tlayers));
  DC_TRY(want_null(c, "reverse_transformer_layers_per_block"));
  /* diffusers raises on num_attention_heads (issue #2011), so
   * attention_head_dim is the head count: num_attention_heads or attention_head_dim. */
  if (raw(c, "num_attention_heads") && !cJSON_IsNull(raw(c, "num_attention_heads")))
    return dc_error(DC_ERR_UNSUPPORTED,
                    "%s: \"num_attention_heads\" is set, which diffusers itself refuses (it reads the head "
                    "count from \"attention_head_dim\"); use \"attention_head_dim\"", c->path);
  DC_TRY(want_block_list(c, "attention_head_dim", 8, c->heads));
  if (cJSON_IsArray(cad)) return unsupported(c, "cross_attention_dim", "an integer");
  DC_TRY(want_int(c, "cross_attention_dim", 1280, 1, &c->cross_dim));
  DC_TRY(want_bool(c, "use_linear_projection", 0, -1, &c->linear_proj));
  DC_TRY(want_bool(c, "upcast_attention", 0, -1, NULL));
  DC_TRY(want_bool(c, "dual_cross_attention", 0, 0, NULL));
  DC_TRY(read_only_cross(c));
  if (raw(c, "mid_block_only_cross_attention") && !cJSON_IsNull(raw(c, "mid_block_only_cross_attention")))
    DC_TRY(want_bool(c, "mid_block_only_cross_attention", 0, -1, NULL));
  const char *s;
  DC_TRY(want_str(c, "attention_type", "default", (const char *const[]){"default", NULL}, "default", &s));
  DC_TRY(dc_json_str(c->doc, "cross_attention_norm", NULL, &s));
  return NULL;
}

/* ---- config: embeddings ----------------------------------------------- */

static dc_status *read_embeddings(unet_cfg *c) {
  const char *s;
  int64_t dim;
  DC_TRY(want_str(c, "time_embedding_type", "positional", (const char *const[]){"positional", NULL},
                  "positional", &s));
  DC_TRY(want_bool(c, "flip_sin_to_cos", 1, -1, &c->flip));
  DC_TRY(dc_json_num(c->doc, "freq_shift", 0, &c->freq_shift));
  DC_TRY(want_int(c, "time_embedding_dim", 4 * c->boc[0], 1, &c->temb_dim));
  DC_TRY(want_null(c, "time_embedding_act_fn"));
  DC_TRY(want_null(c, "timestep_post_act"));
  DC_TRY(want_null(c, "time_cond_proj_dim"));
  DC_TRY(want_null(c, "class_embed_type"));
  DC_TRY(want_null(c, "num_class_embeds"));
  DC_TRY(want_bool(c, "class_embeddings_concat", 0, 0, NULL));
  DC_TRY(want_null(c, "encoder_hid_dim"));
  DC_TRY(want_null(c, "encoder_hid_dim_type"));
  DC_TRY(dc_json_int(c->doc, "addition_embed_type_num_heads", 64, &dim));
  DC_TRY(dc_json_str(c->doc, "addition_embed_type", NULL, &s));
  if (s && strcmp(s, "text_time") != 0) return unsupported(c, "addition_embed_type", "null, \"text_time\"");
  c->text_time = s != NULL;
  DC_TRY(dc_json_int(c->doc, "addition_time_embed_dim", 0, &c->add_time_dim));
  DC_TRY(dc_json_int(c->doc, "projection_class_embeddings_input_dim", 0, &c->add_in_dim));
  if (c->text_time && (c->add_time_dim < 1 || c->add_in_dim < 1))
    return dc_error(DC_ERR_FORMAT,
                    "%s: \"addition_embed_type\" \"text_time\" needs positive integers \"addition_time_embed_dim\" "
                    "and \"projection_class_embeddings_input_dim\", got %lld and %lld",
                    c->path, (long long)c->add_time_dim, (long long)c->add_in_dim);
  return NULL;
}

/* ---- config: the rest ------------------------------------------------- */

static dc_status *read_misc(unet_cfg *c) {
  const char *s;
  double x;
  DC_TRY(want_int(c, "in_channels", 4, 1, &c->in_ch));
  DC_TRY(want_int(c, "out_channels", 4, 1, &c->out_ch));
  DC_TRY(want_block_list(c, "layers_per_block", 2, c->layers));
  DC_TRY(want_int(c, "norm_num_groups", 32, 1, &c->groups));
  /* Every GroupNorm of the UNet normalizes a sum of block_out_channels
   * entries; torch's GroupNorm refuses a count that does not split. */
  for (int i = 0; i < c->nblocks; i++)
    if (c->boc[i] % c->groups)
      return dc_error(DC_ERR_FORMAT,
                      "%s: \"norm_num_groups\" %lld does not divide \"block_out_channels\"[%d] = %lld "
                      "(GroupNorm needs channels divisible by groups)",
                      c->path, (long long)c->groups, i, (long long)c->boc[i]);
  DC_TRY(dc_json_num(c->doc, "norm_eps", 1e-5, &c->eps));
  DC_TRY(want_str(c, "act_fn", "silu", (const char *const[]){"silu", "swish", NULL}, "silu, swish", &s));
  DC_TRY(want_str(c, "resnet_time_scale_shift", "default", (const char *const[]){"default", NULL}, "default", &s));
  DC_TRY(want_bool(c, "resnet_skip_time_act", 0, -1, NULL));
  DC_TRY(dc_json_num(c->doc, "resnet_out_scale_factor", 1.0, &x));
  DC_TRY(dc_json_num(c->doc, "dropout", 0.0, &x));
  /* The mid block's resnets divide by it; the IR has no scalar constants. */
  DC_TRY(dc_json_num(c->doc, "mid_block_scale_factor", 1.0, &x));
  if (x != 1.0) return unsupported(c, "mid_block_scale_factor", "1");
  DC_TRY(want_bool(c, "center_input_sample", 0, 0, NULL));
  DC_TRY(want_int(c, "downsample_padding", 1, 0, &c->ds_pad));
  if (c->ds_pad > 1) return unsupported(c, "downsample_padding", "0, 1");
  DC_TRY(want_int(c, "conv_in_kernel", 3, 1, &c->k_in));
  DC_TRY(want_int(c, "conv_out_kernel", 3, 1, &c->k_out));
  if (c->k_in % 2 == 0) return unsupported(c, "conv_in_kernel", "odd sizes");
  if (c->k_out % 2 == 0) return unsupported(c, "conv_out_kernel", "odd sizes");
  int n;
  DC_TRY(dc_json_int_list(c->doc, "sample_size", 1, 2, 1, c->size, 2, &n, &c->has_size));
  return NULL;
}

static dc_status *unet_config(const dc_folder *f, unet_cfg *c) {
  memset(c, 0, sizeof *c);
  c->doc = &f->config;
  c->path = f->config.path;
  DC_TRY(read_blocks(c));
  DC_TRY(read_misc(c));
  DC_TRY(read_attention(c));
  return read_embeddings(c);
}

/* ---- graph: the blocks ------------------------------------------------ */

typedef struct {
  dc_gb g;
  const unet_cfg *c;
  int32_t emb;   /* the time embedding every resnet reads, [B, temb_dim] */
  int32_t ehs;   /* encoder_hidden_states, [B, S, cross_attention_dim] */
  blk_resnet_cfg resnet;
  blk_transformer_cfg transformer;
  int32_t *skips; /* down_block_res_samples, a stack */
  int nskips, cap_skips;
} unet_ctx;

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

static int64_t dim_of(const unet_ctx *u, int32_t x, int d) { return gb_type(&u->g, x)->dims[d]; }

/* down_blocks.i: the block type from the config, each output kept for the
 * up path (the skip stack has room for every one: cap_skips). */
static dc_status *down_block(unet_ctx *u, int i, int32_t x, int32_t *out) {
  const unet_cfg *c = u->c;
  char s[UNET_PATH];
  blk_down_cfg d = {.resnet = &u->resnet, .transformer = c->down_attn[i] ? &u->transformer : NULL,
                    .heads = c->heads[i], .transformer_layers = c->tlayers[i], .layers = c->layers[i],
                    .cout = c->boc[i], .add_downsample = i < c->nblocks - 1, .downsample_padding = c->ds_pad};
  return blk_down_block(&u->g, P("down_blocks.%d", i), &d, x, u->skips, &u->nskips, out);
}

/* mid_block: UNetMidBlock2DCrossAttn, or UNetMidBlock2D as diffusers builds
 * it here (num_layers 0): one resnet. */
static dc_status *mid_block(unet_ctx *u, int32_t x, int32_t *out) {
  const unet_cfg *c = u->c;
  int last = c->nblocks - 1;
  *out = x;
  if (c->mid == MID_NONE) return NULL;
  if (c->mid == MID_PLAIN) return blk_mid_block(&u->g, "mid_block", &u->resnet, 0, 0, x, out);
  return blk_mid_block_cross_attn(&u->g, "mid_block", &u->resnet, &u->transformer, c->heads[last], c->tlayers[last],
                                  x, out);
}

/* up_blocks.i mirrors down block n-1-i; the channel bookkeeping is
 * UNet2DConditionModel.__init__'s (prev_output_channel, in_channels). */
static dc_status *up_block(unet_ctx *u, int i, int32_t x, int32_t *out) {
  const unet_cfg *c = u->c;
  char s[UNET_PATH];
  int n = c->nblocks, r = n - 1 - i; /* r: the matching down block */
  blk_up_cfg up = {.resnet = &u->resnet, .transformer = c->up_attn[i] ? &u->transformer : NULL,
                   .heads = c->heads[r], .transformer_layers = c->tlayers[r], .layers = c->layers[r] + 1,
                   .cout = c->boc[r], .in_channels = c->boc[r ? r - 1 : 0], .prev_channels = c->boc[i ? n - i : n - 1],
                   .add_upsample = i < n - 1, .config = c->path};
  return blk_up_block(&u->g, P("up_blocks.%d", i), &up, x, u->skips, &u->nskips, out);
}

/* ---- graph: embeddings ------------------------------------------------ */

/* get_aug_embed for "text_time" (SDXL): add_time_proj (same flip and shift
 * as time_proj) on time_ids.flatten(), reshaped to [B, -1], concatenated
 * after text_embeds, through add_embedding. */
static dc_status *text_time(unet_ctx *u, int32_t text_embeds, int32_t time_ids, int32_t *out) {
  dc_gb *g = &u->g;
  const unet_cfg *c = u->c;
  int64_t b = dim_of(u, time_ids, 0), nt = dim_of(u, time_ids, 1), d = c->add_time_dim;
  int32_t t;
  DC_TRY(gb_reshape(g, "add_time_proj", time_ids, 1, (int64_t[]){b * nt}, &t));
  DC_TRY(blk_timesteps(g, "add_time_proj", t, d, c->flip, c->freq_shift, &t));
  DC_TRY(gb_reshape(g, "add_time_proj", t, 2, (int64_t[]){b, nt * d}, &t));
  dc_node n = dc_node_make(OP_CONCAT, 2, (int32_t[]){text_embeds, t});
  dc_node_set_int(&n, "axis", 1);
  DC_TRY(gb_add(g, &n, "add_embedding", &t));
  return blk_timestep_embedding(g, "add_embedding", t, c->add_in_dim, c->temb_dim, out);
}

/* ---- inputs ----------------------------------------------------------- */

typedef struct {
  int64_t sample[4], timestep[1], ehs[3], text[2], time_ids[2];
} unet_shapes;

static int overridden(const dc_build_options *opt, const char *name) {
  for (int i = 0; opt && i < opt->nshapes; i++)
    if (strcmp(opt->shapes[i].name, name) == 0) return 1;
  return 0;
}

/* "input "x" is [..] but the model needs [..] (why)". */
static dc_status *bad_input(const char *name, const int64_t *have, int rank, const char *need, const char *why) {
  char b[160];
  return dc_error(DC_ERR_ARGUMENT, "input \"%s\" is %s but the model needs %s (%s)", name,
                  dc_dims_str(have, rank, b, sizeof b), need, why);
}

/* sample decides the batch B; H and W must survive the downsamplers exactly,
 * because diffusers resizes the upsampler outputs otherwise (forward_upsample_size). */
static dc_status *sample_shape(const unet_cfg *c, const dc_build_options *opt, int64_t *s) {
  char need[96], why[160];
  if (!c->has_size && !overridden(opt, "sample"))
    return dc_error(DC_ERR_ARGUMENT, "%s: \"sample_size\" is null, so there is no default shape for input "
                    "\"sample\"; give one with --input sample=B,%lld,H,W", c->path, (long long)c->in_ch);
  DC_TRY(dc_build_input_shape(opt, "sample", 4, (int64_t[]){1, c->in_ch, c->size[0], c->size[1]}, s));
  int64_t f = (int64_t)1 << (c->nblocks - 1);
  if (s[1] != c->in_ch) {
    snprintf(need, sizeof need, "[B,%lld,H,W]", (long long)c->in_ch);
    snprintf(why, sizeof why, "in_channels %lld", (long long)c->in_ch);
    return bad_input("sample", s, 4, need, why);
  }
  if (s[2] % f || s[3] % f) {
    snprintf(need, sizeof need, "[B,%lld,H,W] with H and W multiples of %lld", (long long)c->in_ch, (long long)f);
    snprintf(why, sizeof why, "%d downsamplers; diffusers would resize the upsampled maps to fit, "
             "which diffc does not support", c->nblocks - 1);
    return bad_input("sample", s, 4, need, why);
  }
  return NULL;
}

static dc_status *input_shapes(const unet_cfg *c, const dc_build_options *opt, unet_shapes *sh) {
  char need[96], why[160], sb[96];
  DC_TRY(sample_shape(c, opt, sh->sample));
  int64_t b = sh->sample[0];
  snprintf(why, sizeof why, "batch from \"sample\" %s", dc_dims_str(sh->sample, 4, sb, sizeof sb));
  DC_TRY(dc_build_input_shape(opt, "timestep", 1, &b, sh->timestep));
  snprintf(need, sizeof need, "[%lld]", (long long)b);
  if (sh->timestep[0] != b) return bad_input("timestep", sh->timestep, 1, need, why);
  DC_TRY(dc_build_input_shape(opt, "encoder_hidden_states", 3, (int64_t[]){b, 77, c->cross_dim}, sh->ehs));
  snprintf(need, sizeof need, "[%lld,S,%lld]", (long long)b, (long long)c->cross_dim);
  if (sh->ehs[0] != b || sh->ehs[2] != c->cross_dim)
    return bad_input("encoder_hidden_states", sh->ehs, 3, need,
                     strcat(why, ", and cross_attention_dim"));
  if (!c->text_time) return NULL;
  int64_t text = c->add_in_dim - 6 * c->add_time_dim;
  DC_TRY(dc_build_input_shape(opt, "time_ids", 2, (int64_t[]){b, 6}, sh->time_ids));
  DC_TRY(dc_build_input_shape(opt, "text_embeds", 2, (int64_t[]){b, text > 0 ? text : 1}, sh->text));
  text = c->add_in_dim - sh->time_ids[1] * c->add_time_dim;
  snprintf(need, sizeof need, "[%lld,T]", (long long)b);
  if (sh->time_ids[0] != b) return bad_input("time_ids", sh->time_ids, 2, need, why);
  snprintf(need, sizeof need, "[%lld,%lld]", (long long)b, (long long)text);
  snprintf(why, sizeof why, "projection_class_embeddings_input_dim %lld = text_embeds width + %lld time ids "
           "x addition_time_embed_dim %lld; batch from \"sample\"", (long long)c->add_in_dim,
           (long long)sh->time_ids[1], (long long)c->add_time_dim);
  if (sh->text[0] != b || sh->text[1] != text) return bad_input("text_embeds", sh->text, 2, need, why);
  return NULL;
}

static dc_status *add_input(unet_ctx *u, const char *name, int rank, const int64_t *dims, dc_input_init init,
                            int32_t *out) {
  dc_type t = {DT_F32, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  *out = dc_module_add_input(u->g.m, name, &t, init);
  return *out < 0 ? dc_nomem("adding the UNet inputs") : NULL;
}

/* ---- the forward ------------------------------------------------------ */

/* UNet2DConditionModel.forward: time embedding (+ aug embedding), conv_in,
 * down blocks, mid block, up blocks, conv_norm_out -> silu -> conv_out. */
static dc_status *unet_forward(unet_ctx *u, const unet_shapes *sh) {
  const unet_cfg *c = u->c;
  dc_gb *g = &u->g;
  int32_t x, t, text = -1, ids = -1;
  DC_TRY(add_input(u, "sample", 4, sh->sample, INIT_NORMAL, &x));
  DC_TRY(add_input(u, "timestep", 1, sh->timestep, INIT_TIMESTEP, &t));
  DC_TRY(add_input(u, "encoder_hidden_states", 3, sh->ehs, INIT_NORMAL, &u->ehs));
  if (c->text_time) {
    DC_TRY(add_input(u, "text_embeds", 2, sh->text, INIT_NORMAL, &text));
    DC_TRY(add_input(u, "time_ids", 2, sh->time_ids, INIT_NORMAL, &ids));
  }
  DC_TRY(blk_timesteps(g, "time_proj", t, c->boc[0], c->flip, c->freq_shift, &t));
  DC_TRY(blk_timestep_embedding(g, "time_embedding", t, c->boc[0], c->temb_dim, &u->emb));
  if (c->text_time) {
    DC_TRY(text_time(u, text, ids, &t));
    DC_TRY(gb_binary(g, OP_ADD, NULL, u->emb, t, &u->emb));
  }
  u->resnet = (blk_resnet_cfg){.groups = c->groups, .eps = c->eps, .temb = u->emb, .temb_dim = c->temb_dim};
  u->transformer = (blk_transformer_cfg){.groups = c->groups, .linear_projection = c->linear_proj, .ctx = u->ehs,
                                         .ctx_dim = c->cross_dim, .config = c->path};
  int64_t p = (c->k_in - 1) / 2, q = (c->k_out - 1) / 2;
  DC_TRY(gb_conv2d(g, "conv_in", x, c->in_ch, c->boc[0], c->k_in, 1, (int64_t[]){p, p, p, p}, &x));
  u->skips[u->nskips++] = x;
  for (int i = 0; i < c->nblocks; i++) DC_TRY(down_block(u, i, x, &x));
  DC_TRY(mid_block(u, x, &x));
  for (int i = 0; i < c->nblocks; i++) DC_TRY(up_block(u, i, x, &x));
  if (u->nskips != 0) return dc_error(DC_ERR_INTERNAL, "unet: %d skip connections left over", u->nskips);
  DC_TRY(gb_group_norm(g, "conv_norm_out", x, c->boc[0], c->groups, c->eps, &x));
  DC_TRY(gb_unary(g, OP_SILU, "conv_act", x, &x));
  DC_TRY(gb_conv2d(g, "conv_out", x, c->boc[0], c->out_ch, c->k_out, 1, (int64_t[]){q, q, q, q}, &x));
  return dc_module_add_output(g->m, "sample", x);
}

/* ---- metadata --------------------------------------------------------- */

static void list_ints(dc_buf *b, const char *name, const int64_t *v, int n) {
  dc_buf_printf(b, " %s=", name);
  for (int i = 0; i < n; i++) dc_buf_printf(b, "%s%lld", i ? "," : "", (long long)v[i]);
}

static void list_strs(dc_buf *b, const char *name, const char *const *v, int n) {
  dc_buf_printf(b, "%s%s=", b->len ? " " : "", name);
  for (int i = 0; i < n; i++) dc_buf_printf(b, "%s%s", i ? "," : "", v[i]);
}

/* One line that says which UNet this is, for the dump header. */
static dc_status *set_meta(dc_module *m, const unet_cfg *c) {
  dc_buf b;
  dc_buf_init(&b);
  list_strs(&b, "down", c->down_types, c->nblocks);
  dc_buf_printf(&b, " mid=%s", c->mid_type);
  list_strs(&b, "up", c->up_types, c->nblocks);
  list_ints(&b, "block_out_channels", c->boc, c->nblocks);
  list_ints(&b, "layers_per_block", c->layers, c->nblocks);
  list_ints(&b, "heads", c->heads, c->nblocks);
  list_ints(&b, "transformer_layers", c->tlayers, c->nblocks);
  dc_buf_printf(&b, " cross_attention_dim=%lld groups=%lld linear_projection=%s addition=%s",
                (long long)c->cross_dim, (long long)c->groups, c->linear_proj ? "true" : "false",
                c->text_time ? "text_time" : "none");
  dc_buf_u8(&b, 0);
  dc_status *st = dc_buf_status(&b, "describing the UNet config");
  if (!st) st = dc_module_set_meta(m, "entry", "forward");
  if (!st) st = dc_module_set_meta(m, "config", (const char *)b.data);
  dc_buf_deinit(&b);
  return st;
}

/* opt->entry is "forward", the one entry (checked by build.c). */
static dc_status *build_unet(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  unet_cfg c;
  unet_shapes sh;
  DC_TRY(unet_config(f, &c));
  DC_TRY(input_shapes(&c, opt, &sh));
  DC_TRY(set_meta(m, &c));
  dc_weights w;
  DC_TRY(dc_weights_init(&w, m, f));
  unet_ctx u = {.g = {m, &w}, .c = &c};
  /* conv_in, each layer of each down block, each downsampler (all blocks
   * but the last): exactly sum(layers + 1) skips */
  for (int i = 0; i < c.nblocks; i++) u.cap_skips += (int)c.layers[i] + 1;
  u.skips = dc_malloc(sizeof *u.skips * (size_t)u.cap_skips);
  dc_status *st = u.skips ? unet_forward(&u, &sh) : dc_nomem("building the UNet");
  if (!st) st = dc_weights_check_all_used(&w);
  dc_free(u.skips);
  dc_weights_deinit(&w);
  return st;
}

/* ---- the class descriptor -------------------------------------------- */

/* Every argument of UNet2DConditionModel.__init__ with diffusers' default;
 * nullable where None is that default (or, for mid_block_type, means no
 * mid block).  The supported values are what the readers above accept. */
static const dc_config_key unet_keys[] = {
    {"sample_size", DC_KEY_INTS, "null", 1, NULL},
    {"in_channels", DC_KEY_INT, "4", 0, NULL},
    {"out_channels", DC_KEY_INT, "4", 0, NULL},
    {"center_input_sample", DC_KEY_BOOL, "false", 0, "false"},
    {"flip_sin_to_cos", DC_KEY_BOOL, "true", 0, NULL},
    {"freq_shift", DC_KEY_NUM, "0", 0, NULL},
    {"down_block_types", DC_KEY_STRS, "[\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\",\"CrossAttnDownBlock2D\",\"DownBlock2D\"]", 0,
     "CrossAttnDownBlock2D, DownBlock2D"},
    {"mid_block_type", DC_KEY_STR, "\"UNetMidBlock2DCrossAttn\"", 1, "UNetMidBlock2DCrossAttn, UNetMidBlock2D, null"},
    {"up_block_types", DC_KEY_STRS, "[\"UpBlock2D\",\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\",\"CrossAttnUpBlock2D\"]", 0,
     "CrossAttnUpBlock2D, UpBlock2D"},
    {"only_cross_attention", DC_KEY_BOOLS, "false", 0, "false"},
    {"block_out_channels", DC_KEY_INTS, "[320,640,1280,1280]", 0, NULL},
    {"layers_per_block", DC_KEY_INTS, "2", 0, NULL},
    {"downsample_padding", DC_KEY_INT, "1", 0, "0, 1"},
    {"mid_block_scale_factor", DC_KEY_NUM, "1", 0, "1"},
    {"dropout", DC_KEY_NUM, "0.0", 0, NULL},
    {"act_fn", DC_KEY_STR, "\"silu\"", 0, "silu, swish"},
    {"norm_num_groups", DC_KEY_INT, "32", 0, NULL},
    {"norm_eps", DC_KEY_NUM, "1e-05", 0, NULL},
    {"cross_attention_dim", DC_KEY_INTS, "1280", 0, "an integer"},
    {"transformer_layers_per_block", DC_KEY_INTS, "1", 0, "an integer or a list of integers"},
    {"reverse_transformer_layers_per_block", DC_KEY_INTS, "null", 1, "null"},
    {"encoder_hid_dim", DC_KEY_INT, "null", 1, "null"},
    {"encoder_hid_dim_type", DC_KEY_STR, "null", 1, "null"},
    {"attention_head_dim", DC_KEY_INTS, "8", 0, NULL},
    {"num_attention_heads", DC_KEY_INTS, "null", 1, "null"},
    {"dual_cross_attention", DC_KEY_BOOL, "false", 0, "false"},
    {"use_linear_projection", DC_KEY_BOOL, "false", 0, NULL},
    {"class_embed_type", DC_KEY_STR, "null", 1, "null"},
    {"addition_embed_type", DC_KEY_STR, "null", 1, "null, \"text_time\""},
    {"addition_time_embed_dim", DC_KEY_INT, "null", 1, NULL},
    {"num_class_embeds", DC_KEY_INT, "null", 1, "null"},
    {"upcast_attention", DC_KEY_BOOL, "false", 1, NULL},
    {"resnet_time_scale_shift", DC_KEY_STR, "\"default\"", 0, "default"},
    {"resnet_skip_time_act", DC_KEY_BOOL, "false", 0, NULL},
    {"resnet_out_scale_factor", DC_KEY_NUM, "1.0", 0, NULL},
    {"time_embedding_type", DC_KEY_STR, "\"positional\"", 0, "positional"},
    {"time_embedding_dim", DC_KEY_INT, "null", 1, NULL}, /* null: block_out_channels[0] * 4 */
    {"time_embedding_act_fn", DC_KEY_STR, "null", 1, "null"},
    {"timestep_post_act", DC_KEY_STR, "null", 1, "null"},
    {"time_cond_proj_dim", DC_KEY_INT, "null", 1, "null"},
    {"conv_in_kernel", DC_KEY_INT, "3", 0, "odd sizes"},
    {"conv_out_kernel", DC_KEY_INT, "3", 0, "odd sizes"},
    {"projection_class_embeddings_input_dim", DC_KEY_INT, "null", 1, NULL},
    {"attention_type", DC_KEY_STR, "\"default\"", 0, "default"},
    {"class_embeddings_concat", DC_KEY_BOOL, "false", 0, "false"},
    {"mid_block_only_cross_attention", DC_KEY_BOOL, "null", 1, NULL},
    {"cross_attention_norm", DC_KEY_STR, "null", 1, NULL},
    {"addition_embed_type_num_heads", DC_KEY_INT, "64", 0, NULL},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_entry_io unet_inputs[] = {
    {"sample", NULL},
    {"timestep", NULL},
    {"encoder_hidden_states", NULL},
    {"text_embeds", "addition_embed_type \"text_time\""},
    {"time_ids", "addition_embed_type \"text_time\""},
    {NULL, NULL},
};
static const dc_entry_io unet_outputs[] = {{"sample", NULL}, {NULL, NULL}};
static const dc_entry_desc unet_entries[] = {{"forward", unet_inputs, unet_outputs}, {NULL, NULL, NULL}};
/* diffusers' UNet2DConditionModel._skip_layerwise_casting_patterns */
static const char *const unet_skip_cast[] = {"norm", NULL};

const dc_class_desc dc_class_unet_2d_condition = {
    .name = "UNet2DConditionModel",
    .library = DC_LIB_DIFFUSERS,
    .keys = unet_keys,
    .entries = unet_entries,
    .default_entry = "forward",
    .build = build_unet,
    .facts = {.block_modules = NULL, .skip_cast = unet_skip_cast, .options = 0},
};
