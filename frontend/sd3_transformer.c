/* sd3_transformer.c — diffusers' SD3Transformer2DModel
 * (models/transformers/transformer_sd3.py) as an IR graph: the MMDiT of
 * Stable Diffusion 3 and 3.5 (dual_attention_layers, qk_norm "rms_norm").
 *
 *   hidden_states [B,in_channels,H,W] -> pos_embed (PatchEmbed: a strided
 *      conv to tokens plus the centre of the checkpoint's sincos table)
 *   encoder_hidden_states [B,T,joint_attention_dim] -> context_embedder
 *   timestep [B] (the pipeline's sigma * 1000), pooled_projections
 *      [B,pooled_projection_dim] -> time_text_embed -> temb
 *   -> num_layers JointTransformerBlocks (the last context_pre_only),
 *      norm_out, proj_out, unpatchify -> sample [B,out_channels,H,W]
 * The blocks are frontend/blocks (attention.c's JointTransformerBlock and
 * what it composes, shared with Flux); this file reads the config, states
 * the inputs and strings the blocks together. */
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

enum { SD3_PATH = 256, SD3_MAX_LAYERS = 4096, SD3_MAX_DUAL = 1024 };

typedef struct {
  const char *path; /* config.json, for messages */
  int64_t sample, patch, in_ch, layers, head_dim, heads, joint_dim, caption_dim, pooled_dim, out_ch, max_size;
  int qk_norm;
  unsigned char dual[SD3_MAX_LAYERS]; /* block i has use_dual_attention */
  int ndual;                          /* how many blocks do */
} sd3_config;

/* ---- config ---------------------------------------------------------- */

static dc_status *unsupported(const dc_json_doc *d, const char *key, const char *supported) {
  char buf[96];
  return dc_error(DC_ERR_UNSUPPORTED, "%s: \"%s\" is %s, which diffc does not support (supported: %s)", d->path, key,
                  dc_json_show(cJSON_GetObjectItemCaseSensitive(d->root, key), buf, sizeof buf), supported);
}

/* The indices of the blocks with use_dual_attention.  diffusers tests
 * `i in dual_attention_layers` for each block i, so an index outside
 * [0, num_layers) selects no block there, and none here. */
static dc_status *cfg_dual(const dc_json_doc *d, sd3_config *c) {
  int64_t idx[SD3_MAX_DUAL];
  int n, present;
  DC_TRY(dc_json_int_list(d, "dual_attention_layers", 0, 0, INT32_MIN, idx, SD3_MAX_DUAL, &n, &present));
  for (int i = 0; i < n; i++)
    if (idx[i] >= 0 && idx[i] < c->layers && !c->dual[idx[i]]) c->dual[idx[i]] = 1, c->ndual++;
  return NULL;
}

static dc_status *cfg_qk_norm(const dc_json_doc *d, sd3_config *c) {
  const char *s;
  DC_TRY(dc_json_str(d, "qk_norm", NULL, &s));
  if (s && strcmp(s, "rms_norm") != 0) return unsupported(d, "qk_norm", "null, \"rms_norm\"");
  c->qk_norm = s != NULL;
  return NULL;
}

/* Every block reads the context at the blocks' width (add_q_proj and the
 * context norms take inner_dim features), so diffusers' forward fails
 * unless caption_projection_dim is that width; PatchEmbed crops a table
 * only when pos_embed_max_size is set (null recomputes it per size, which
 * diffc does not). */
static dc_status *cfg_widths(const dc_json_doc *d, sd3_config *c) {
  const cJSON *m = cJSON_GetObjectItemCaseSensitive(d->root, "pos_embed_max_size");
  if (cJSON_IsNull(m)) return unsupported(d, "pos_embed_max_size", "an integer");
  DC_TRY(dc_json_int_min(d, "pos_embed_max_size", 96, 1, &c->max_size));
  if (c->caption_dim != c->heads * c->head_dim)
    return dc_error(DC_ERR_FORMAT, "%s: \"caption_projection_dim\" is %lld but the blocks are %lld wide "
                    "(\"num_attention_heads\" %lld x \"attention_head_dim\" %lld); the context must be projected to "
                    "that width", d->path, (long long)c->caption_dim, (long long)(c->heads * c->head_dim),
                    (long long)c->heads, (long long)c->head_dim);
  return NULL;
}

/* Defaults are SD3Transformer2DModel.__init__'s. */
static dc_status *cfg_load(const dc_json_doc *d, sd3_config *c) {
  memset(c, 0, sizeof *c);
  c->path = d->path;
  DC_TRY(dc_json_int_min(d, "sample_size", 128, 1, &c->sample));
  DC_TRY(dc_json_int_min(d, "patch_size", 2, 1, &c->patch));
  DC_TRY(dc_json_int_min(d, "in_channels", 16, 1, &c->in_ch));
  DC_TRY(dc_json_int_min(d, "num_layers", 18, 1, &c->layers));
  if (c->layers > SD3_MAX_LAYERS)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"num_layers\" %lld is more than diffc builds (%d)", d->path,
                    (long long)c->layers, SD3_MAX_LAYERS);
  DC_TRY(dc_json_int_min(d, "attention_head_dim", 64, 1, &c->head_dim));
  DC_TRY(dc_json_int_min(d, "num_attention_heads", 18, 1, &c->heads));
  DC_TRY(dc_json_int_min(d, "joint_attention_dim", 4096, 1, &c->joint_dim));
  DC_TRY(dc_json_int_min(d, "caption_projection_dim", 1152, 1, &c->caption_dim));
  DC_TRY(dc_json_int_min(d, "pooled_projection_dim", 2048, 1, &c->pooled_dim));
  DC_TRY(dc_json_int_min(d, "out_channels", c->in_ch, 1, &c->out_ch)); /* None: in_channels */
  DC_TRY(cfg_widths(d, c));
  DC_TRY(cfg_dual(d, c));
  return cfg_qk_norm(d, c);
}

/* ---- inputs ------------------------------------------------------------ */

typedef struct {
  int64_t x[4], ctx[3], pooled[2], t[1];
} sd3_shapes;

static dc_status *bad_input(const char *name, const int64_t *have, int rank, const char *need, const char *why) {
  char b[160];
  return dc_error(DC_ERR_ARGUMENT, "input \"%s\" is %s but the model needs %s (%s)", name,
                  dc_dims_str(have, rank, b, sizeof b), need, why);
}

/* The latent: in_channels, sides multiples of patch_size whose patch
 * counts fit the positional table (PatchEmbed.cropped_pos_embed raises
 * past it; the conv would drop a remainder diffusers then cannot unpatchify). */
static dc_status *check_latent(const sd3_config *c, const int64_t *x) {
  char need[128], why[200];
  snprintf(need, sizeof need, "[B,%lld,H,W] with H and W multiples of %lld, at most %lld", (long long)c->in_ch,
           (long long)c->patch, (long long)(c->patch * c->max_size));
  snprintf(why, sizeof why, "in_channels %lld, patch_size %lld, pos_embed_max_size %lld patches (%s)",
           (long long)c->in_ch, (long long)c->patch, (long long)c->max_size, c->path);
  if (x[1] != c->in_ch || x[2] % c->patch || x[3] % c->patch || x[2] / c->patch > c->max_size ||
      x[3] / c->patch > c->max_size)
    return bad_input("hidden_states", x, 4, need, why);
  return NULL;
}

/* hidden_states decides B; defaults: sample_size latents, 333 tokens (77
 * CLIP + 256 T5, as StableDiffusion3Pipeline joins them). */
static dc_status *input_shapes(const sd3_config *c, const dc_build_options *opt, sd3_shapes *s) {
  char need[96];
  DC_TRY(dc_build_input_shape(opt, "hidden_states", 4, (int64_t[]){1, c->in_ch, c->sample, c->sample}, s->x));
  DC_TRY(check_latent(c, s->x));
  int64_t b = s->x[0];
  DC_TRY(dc_build_input_shape(opt, "encoder_hidden_states", 3, (int64_t[]){b, 333, c->joint_dim}, s->ctx));
  snprintf(need, sizeof need, "[%lld,T,%lld]", (long long)b, (long long)c->joint_dim);
  if (s->ctx[0] != b || s->ctx[2] != c->joint_dim)
    return bad_input("encoder_hidden_states", s->ctx, 3, need, "batch from \"hidden_states\", and joint_attention_dim");
  DC_TRY(dc_build_input_shape(opt, "pooled_projections", 2, (int64_t[]){b, c->pooled_dim}, s->pooled));
  snprintf(need, sizeof need, "[%lld,%lld]", (long long)b, (long long)c->pooled_dim);
  if (s->pooled[0] != b || s->pooled[1] != c->pooled_dim)
    return bad_input("pooled_projections", s->pooled, 2, need, "batch from \"hidden_states\", and pooled_projection_dim");
  DC_TRY(dc_build_input_shape(opt, "timestep", 1, &b, s->t));
  snprintf(need, sizeof need, "[%lld]", (long long)b);
  return s->t[0] == b ? NULL : bad_input("timestep", s->t, 1, need, "batch from \"hidden_states\"");
}

static dc_status *add_input(dc_module *m, const char *name, int rank, const int64_t *dims, dc_input_init init,
                            int32_t *out) {
  dc_type t = {DT_F32, rank, {0}};
  memcpy(t.dims, dims, sizeof(int64_t) * (size_t)rank);
  *out = dc_module_add_input(m, name, &t, init);
  return *out < 0 ? dc_nomem("adding the transformer's inputs") : NULL;
}

/* ---- the forward ------------------------------------------------------- */

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* [B, h*w, p*p*c] -> [B, c, h*p, w*p]: reshape (B, h, w, p, p, c), einsum
 * "nhwpqc->nchpwq", reshape. */
static dc_status *unpatchify(dc_gb *g, const sd3_config *c, const sd3_shapes *sh, int32_t x, int32_t *out) {
  int64_t b = sh->x[0], p = c->patch, h = sh->x[2] / p, w = sh->x[3] / p, ch = c->out_ch;
  DC_TRY(gb_reshape(g, NULL, x, 6, (int64_t[]){b, h, w, p, p, ch}, &x));
  DC_TRY(gb_permute(g, NULL, x, 6, (int64_t[]){0, 5, 1, 3, 2, 4}, &x));
  return gb_reshape(g, NULL, x, 4, (int64_t[]){b, ch, h * p, w * p}, out);
}

static dc_status *sd3_forward(dc_gb *g, const sd3_config *c, const sd3_shapes *sh) {
  char s[SD3_PATH];
  int64_t dim = c->heads * c->head_dim;
  int32_t x, ctx, pooled, t, temb, emb_act;
  DC_TRY(add_input(g->m, "hidden_states", 4, sh->x, INIT_NORMAL, &x));
  DC_TRY(add_input(g->m, "encoder_hidden_states", 3, sh->ctx, INIT_NORMAL, &ctx));
  DC_TRY(add_input(g->m, "pooled_projections", 2, sh->pooled, INIT_NORMAL, &pooled));
  DC_TRY(add_input(g->m, "timestep", 1, sh->t, INIT_TIMESTEP, &t));
  DC_TRY(blk_patch_embed_cropped(g, "pos_embed", x, c->in_ch, dim, c->patch, c->max_size, &x));
  DC_TRY(blk_combined_timestep_text_proj(g, "time_text_embed", t, -1, pooled, c->pooled_dim, dim, &temb));
  DC_TRY(gb_linear(g, "context_embedder", ctx, c->joint_dim, c->caption_dim, 1, &ctx));
  DC_TRY(gb_unary(g, OP_SILU, NULL, temb, &emb_act)); /* every AdaLayerNorm's SiLU, once (blocks.h) */
  for (int64_t i = 0; i < c->layers; i++) {
    blk_joint_block_cfg b = {.dim = dim, .heads = c->heads, .head_dim = c->head_dim,
                             .context_pre_only = i == c->layers - 1, .dual_attention = c->dual[i],
                             .qk_norm = c->qk_norm};
    DC_TRY(blk_joint_transformer_block(g, P("transformer_blocks.%lld", (long long)i), &b, x, ctx, emb_act, &x, &ctx));
  }
  DC_TRY(blk_ada_layer_norm_continuous(g, "norm_out", x, emb_act, dim, dim, 0, 1e-6, &x));
  DC_TRY(gb_linear(g, "proj_out", x, dim, c->patch * c->patch * c->out_ch, 1, &x));
  DC_TRY(unpatchify(g, c, sh, x, &x));
  return dc_module_add_output(g->m, "sample", x);
}

/* ---- build ------------------------------------------------------------- */

static dc_status *set_meta(dc_module *m, const sd3_config *c) {
  char buf[320];
  snprintf(buf, sizeof buf,
           "layers=%lld heads=%lld head_dim=%lld patch_size=%lld in_channels=%lld joint_attention_dim=%lld "
           "pooled_projection_dim=%lld pos_embed_max_size=%lld dual_attention_blocks=%d qk_norm=%s",
           (long long)c->layers, (long long)c->heads, (long long)c->head_dim, (long long)c->patch, (long long)c->in_ch,
           (long long)c->joint_dim, (long long)c->pooled_dim, (long long)c->max_size, c->ndual,
           c->qk_norm ? "rms_norm" : "none");
  DC_TRY(dc_module_set_meta(m, "entry", "forward"));
  DC_TRY(dc_module_set_meta(m, "config", buf));
  return dc_module_set_meta(m, "note", "timestep is the pipeline's sigma * 1000 (the graph does not scale it)");
}

static dc_status *build_sd3(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  sd3_config *c = dc_malloc(sizeof *c);
  if (!c) return dc_nomem("reading the SD3 transformer's config");
  sd3_shapes sh;
  dc_status *st = cfg_load(&f->config, c);
  if (!st) st = input_shapes(c, opt, &sh);
  if (!st) st = set_meta(m, c);
  dc_weights w;
  if (!st) st = dc_weights_init(&w, m, f);
  if (!st) {
    dc_gb g = {m, &w};
    st = sd3_forward(&g, c, &sh);
    if (!st) st = dc_weights_check_all_used(&w);
    dc_weights_deinit(&w);
  }
  dc_free(c);
  return st;
}

/* ---- the class descriptor -------------------------------------------- */

/* Every argument of SD3Transformer2DModel.__init__ with diffusers' default. */
static const dc_config_key sd3_keys[] = {
    {"sample_size", DC_KEY_INT, "128", 0, NULL},
    {"patch_size", DC_KEY_INT, "2", 0, NULL},
    {"in_channels", DC_KEY_INT, "16", 0, NULL},
    {"num_layers", DC_KEY_INT, "18", 0, NULL},
    {"attention_head_dim", DC_KEY_INT, "64", 0, NULL},
    {"num_attention_heads", DC_KEY_INT, "18", 0, NULL},
    {"joint_attention_dim", DC_KEY_INT, "4096", 0, NULL},
    {"caption_projection_dim", DC_KEY_INT, "1152", 0, "num_attention_heads x attention_head_dim"},
    {"pooled_projection_dim", DC_KEY_INT, "2048", 0, NULL},
    {"out_channels", DC_KEY_INT, "16", 1, NULL}, /* null: in_channels */
    {"pos_embed_max_size", DC_KEY_INT, "96", 1, "an integer"},
    {"dual_attention_layers", DC_KEY_INTS, "[]", 0, NULL},
    {"qk_norm", DC_KEY_STR, "null", 1, "null, \"rms_norm\""},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_entry_io sd3_inputs[] = {
    {"hidden_states", NULL},
    {"encoder_hidden_states", NULL},
    {"pooled_projections", NULL},
    {"timestep", NULL},
    {NULL, NULL},
};
static const dc_entry_io sd3_outputs[] = {{"sample", NULL}, {NULL, NULL}};
static const dc_entry_desc sd3_entries[] = {{"forward", sd3_inputs, sd3_outputs}, {NULL, NULL, NULL}};
/* diffusers' SD3Transformer2DModel._skip_layerwise_casting_patterns; its
 * block list (transformer_blocks) is a top-level ModuleList, as Flux's. */
static const char *const sd3_skip_cast[] = {"pos_embed", "norm", NULL};

const dc_class_desc dc_class_sd3_transformer_2d = {
    .name = "SD3Transformer2DModel",
    .library = DC_LIB_DIFFUSERS,
    .keys = sd3_keys,
    .entries = sd3_entries,
    .default_entry = "forward",
    .build = build_sd3,
    .facts = {.block_modules = NULL, .skip_cast = sd3_skip_cast, .options = 0},
};
