/* flux_transformer.c — diffusers' FluxTransformer2DModel
 * (models/transformers/transformer_flux.py) as an IR graph: FLUX.1 dev
 * (guidance_embeds) and schnell.
 *
 *   hidden_states [B,N,in_channels] (packed 2x2 latents) -> x_embedder
 *   encoder_hidden_states [B,T,joint_attention_dim] -> context_embedder
 *   timestep [B] (sigma; x1000 here, as the model does), guidance [B]
 *   (dev; x1000 too), pooled_projections [B,pooled_projection_dim]
 *   -> time_text_embed -> temb
 *   img_ids [N,A], txt_ids [T,A] (float) -> FluxPosEmbed over [txt; img]
 *   -> num_layers FluxTransformerBlocks, num_single_layers
 *      FluxSingleTransformerBlocks on the joined [txt; img] sequence,
 *      norm_out (AdaLayerNormContinuous), proj_out -> sample [B,N,p*p*out]
 * The blocks are frontend/blocks (transformer_flux.c and the files it
 * composes); this file reads the config, states the inputs and strings the
 * blocks together.  The 3-D ids diffusers still accepts with a warning
 * (and reads only the first batch row of) are not: ids are 2-D. */
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

enum { FLUX_PATH = 256 };

typedef struct {
  const char *path; /* config.json, for messages */
  int64_t patch, in_ch, out_ch, layers, single_layers, head_dim, heads, joint_dim, pooled_dim;
  int guidance;
  int64_t axes[DC_MAX_DIMS];
  int naxes;
} flux_config;

/* ---- config ---------------------------------------------------------- */

/* axes_dims_rope: one even size per id column, summing to the head size
 * (apply_rotary_emb rotates every channel of a head; diffusers fails at
 * the first forward otherwise). */
static dc_status *cfg_axes(const dc_json_doc *d, flux_config *c) {
  int present;
  DC_TRY(dc_json_int_list(d, "axes_dims_rope", 0, 0, 2, c->axes, DC_MAX_DIMS, &c->naxes, &present));
  if (!present) c->axes[0] = 16, c->axes[1] = 56, c->axes[2] = 56, c->naxes = 3;
  int64_t sum = 0;
  for (int i = 0; i < c->naxes; i++) {
    if (c->axes[i] % 2)
      return dc_error(DC_ERR_FORMAT, "%s: \"axes_dims_rope\"[%d] is %lld; each axis needs an even size (RoPE "
                      "rotates pairs)", d->path, i, (long long)c->axes[i]);
    sum += c->axes[i];
  }
  if (c->naxes == 0 || sum != c->head_dim)
    return dc_error(DC_ERR_FORMAT, "%s: \"axes_dims_rope\" sums to %lld but \"attention_head_dim\" is %lld; "
                    "RoPE needs them equal", d->path, (long long)sum, (long long)c->head_dim);
  return NULL;
}

/* Defaults are FluxTransformer2DModel.__init__'s. */
static dc_status *cfg_load(const dc_json_doc *d, flux_config *c) {
  memset(c, 0, sizeof *c);
  c->path = d->path;
  DC_TRY(dc_json_int_min(d, "patch_size", 1, 1, &c->patch));
  DC_TRY(dc_json_int_min(d, "in_channels", 64, 1, &c->in_ch));
  DC_TRY(dc_json_int_min(d, "out_channels", c->in_ch, 1, &c->out_ch)); /* None: in_channels */
  DC_TRY(dc_json_int_min(d, "num_layers", 19, 0, &c->layers));
  DC_TRY(dc_json_int_min(d, "num_single_layers", 38, 0, &c->single_layers));
  DC_TRY(dc_json_int_min(d, "attention_head_dim", 128, 2, &c->head_dim));
  DC_TRY(dc_json_int_min(d, "num_attention_heads", 24, 1, &c->heads));
  DC_TRY(dc_json_int_min(d, "joint_attention_dim", 4096, 1, &c->joint_dim));
  DC_TRY(dc_json_int_min(d, "pooled_projection_dim", 768, 1, &c->pooled_dim));
  DC_TRY(dc_json_bool(d, "guidance_embeds", 0, &c->guidance));
  DC_TRY(cfg_axes(d, c));
  if (c->layers + c->single_layers > 4096)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: %lld blocks (\"num_layers\" + \"num_single_layers\") is more than diffc "
                    "builds (4096)", d->path, (long long)(c->layers + c->single_layers));
  return NULL;
}

/* ---- inputs ------------------------------------------------------------ */

typedef struct {
  int64_t x[3], ctx[3], pooled[2], t[1], guidance[1], img_ids[2], txt_ids[2];
} flux_shapes;

static dc_status *bad_input(const char *name, const int64_t *have, int rank, const char *need, const char *why) {
  char b[160];
  return dc_error(DC_ERR_ARGUMENT, "input \"%s\" is %s but the model needs %s (%s)", name,
                  dc_dims_str(have, rank, b, sizeof b), need, why);
}

/* One input's shape (the default or --input) checked against want[], where
 * -1 takes any size. */
static dc_status *shape(const dc_build_options *opt, const char *name, int rank, const int64_t *def,
                        const int64_t *want, const char *why, int64_t *out) {
  char need[96], *p = need;
  DC_TRY(dc_build_input_shape(opt, name, rank, def, out));
  int ok = 1;
  p += snprintf(p, sizeof need, "[");
  for (int i = 0; i < rank; i++) {
    ok &= want[i] < 0 || out[i] == want[i];
    if (want[i] < 0) p += snprintf(p, (size_t)(need + sizeof need - p), "%s*", i ? "," : "");
    else p += snprintf(p, (size_t)(need + sizeof need - p), "%s%lld", i ? "," : "", (long long)want[i]);
  }
  snprintf(p, (size_t)(need + sizeof need - p), "]");
  return ok ? NULL : bad_input(name, out, rank, need, why);
}

/* hidden_states decides B and N, encoder_hidden_states T; the rest follow.
 * Defaults: a 1024x1024 image (4096 packed latents) and 512 T5 tokens. */
static dc_status *input_shapes(const flux_config *c, const dc_build_options *opt, flux_shapes *s) {
  char why[160];
  DC_TRY(shape(opt, "hidden_states", 3, (int64_t[]){1, 4096, c->in_ch}, (int64_t[]){-1, -1, c->in_ch},
               "in_channels", s->x));
  int64_t b = s->x[0], n = s->x[1];
  snprintf(why, sizeof why, "batch from \"hidden_states\", and joint_attention_dim");
  DC_TRY(shape(opt, "encoder_hidden_states", 3, (int64_t[]){b, 512, c->joint_dim}, (int64_t[]){b, -1, c->joint_dim},
               why, s->ctx));
  int64_t t = s->ctx[1];
  DC_TRY(shape(opt, "pooled_projections", 2, (int64_t[]){b, c->pooled_dim}, (int64_t[]){b, c->pooled_dim},
               "batch from \"hidden_states\", and pooled_projection_dim", s->pooled));
  DC_TRY(shape(opt, "timestep", 1, &b, &b, "batch from \"hidden_states\"", s->t));
  if (c->guidance) DC_TRY(shape(opt, "guidance", 1, &b, &b, "batch from \"hidden_states\"", s->guidance));
  snprintf(why, sizeof why, "one row per token of \"hidden_states\", one column per axes_dims_rope entry");
  DC_TRY(shape(opt, "img_ids", 2, (int64_t[]){n, c->naxes}, (int64_t[]){n, c->naxes}, why, s->img_ids));
  snprintf(why, sizeof why, "one row per token of \"encoder_hidden_states\", one column per axes_dims_rope entry");
  return shape(opt, "txt_ids", 2, (int64_t[]){t, c->naxes}, (int64_t[]){t, c->naxes}, why, s->txt_ids);
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

/* temb = time_text_embed(timestep * 1000, [guidance * 1000,] pooled). */
static dc_status *conditioning(dc_gb *g, const flux_config *c, const flux_shapes *sh, int32_t *temb) {
  int32_t t, gd = -1, pooled;
  DC_TRY(add_input(g->m, "pooled_projections", 2, sh->pooled, INIT_NORMAL, &pooled));
  DC_TRY(add_input(g->m, "timestep", 1, sh->t, INIT_TIMESTEP, &t));
  DC_TRY(gb_scale(g, NULL, t, 1000.0, &t));
  if (c->guidance) {
    DC_TRY(add_input(g->m, "guidance", 1, sh->guidance, INIT_NORMAL, &gd));
    DC_TRY(gb_scale(g, NULL, gd, 1000.0, &gd));
  }
  return blk_combined_timestep_text_proj(g, "time_text_embed", t, gd, pooled, c->pooled_dim, c->heads * c->head_dim,
                                         temb);
}

/* pos_embed(cat(txt_ids, img_ids)): the rotary table of the joint sequence. */
static dc_status *rotary(dc_gb *g, const flux_config *c, const flux_shapes *sh, int32_t *freqs) {
  int32_t img, txt, ids;
  DC_TRY(add_input(g->m, "img_ids", 2, sh->img_ids, INIT_NORMAL, &img));
  DC_TRY(add_input(g->m, "txt_ids", 2, sh->txt_ids, INIT_NORMAL, &txt));
  DC_TRY(gb_concat(g, "pos_embed", txt, img, 0, &ids));
  return blk_flux_pos_embed(g, "pos_embed", ids, c->axes, c->naxes, 10000.0, freqs);
}

static dc_status *flux_forward(dc_gb *g, const flux_config *c, const flux_shapes *sh) {
  char s[FLUX_PATH];
  int64_t dim = c->heads * c->head_dim, t = sh->ctx[1];
  blk_flux_cfg bc = {dim, c->heads, c->head_dim};
  int32_t x, ctx, temb, emb_act, freqs;
  DC_TRY(add_input(g->m, "hidden_states", 3, sh->x, INIT_NORMAL, &x));
  DC_TRY(add_input(g->m, "encoder_hidden_states", 3, sh->ctx, INIT_NORMAL, &ctx));
  DC_TRY(gb_linear(g, "x_embedder", x, c->in_ch, dim, 1, &x));
  DC_TRY(conditioning(g, c, sh, &temb));
  DC_TRY(gb_linear(g, "context_embedder", ctx, c->joint_dim, dim, 1, &ctx));
  DC_TRY(rotary(g, c, sh, &freqs));
  DC_TRY(gb_unary(g, OP_SILU, NULL, temb, &emb_act)); /* every AdaLayerNorm's SiLU, once (blocks.h) */
  for (int64_t i = 0; i < c->layers; i++)
    DC_TRY(blk_flux_transformer_block(g, P("transformer_blocks.%lld", (long long)i), &bc, x, ctx, emb_act, freqs, &x,
                                      &ctx));
  int32_t h;
  DC_TRY(gb_concat(g, NULL, ctx, x, 1, &h));
  for (int64_t i = 0; i < c->single_layers; i++)
    DC_TRY(blk_flux_single_transformer_block(g, P("single_transformer_blocks.%lld", (long long)i), &bc, h, emb_act,
                                             freqs, &h));
  DC_TRY(gb_slice(g, NULL, h, 1, t, t + sh->x[1], &x));
  DC_TRY(blk_ada_layer_norm_continuous(g, "norm_out", x, emb_act, dim, dim, 0, 1e-6, &x));
  DC_TRY(gb_linear(g, "proj_out", x, dim, c->patch * c->patch * c->out_ch, 1, &x));
  return dc_module_add_output(g->m, "sample", x);
}

/* ---- build ------------------------------------------------------------- */

static dc_status *set_meta(dc_module *m, const flux_config *c) {
  char buf[320], axes[96] = "";
  for (int i = 0; i < c->naxes; i++)
    snprintf(axes + strlen(axes), sizeof axes - strlen(axes), "%s%lld", i ? "," : "", (long long)c->axes[i]);
  snprintf(buf, sizeof buf,
           "layers=%lld single_layers=%lld heads=%lld head_dim=%lld in_channels=%lld joint_attention_dim=%lld "
           "pooled_projection_dim=%lld guidance_embeds=%s axes_dims_rope=%s",
           (long long)c->layers, (long long)c->single_layers, (long long)c->heads, (long long)c->head_dim,
           (long long)c->in_ch, (long long)c->joint_dim, (long long)c->pooled_dim, c->guidance ? "true" : "false",
           axes);
  DC_TRY(dc_module_set_meta(m, "entry", "forward"));
  DC_TRY(dc_module_set_meta(m, "config", buf));
  /* what the pipeline does around the model (pipelines/flux/pipeline_flux.py) */
  return dc_module_set_meta(m, "note", "timestep is sigma (the graph multiplies it, and guidance, by 1000); "
                            "hidden_states are 2x2-packed latents, img_ids [0, row, col] of the packed grid, txt_ids zeros");
}

static dc_status *build_flux(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  flux_config c;
  flux_shapes sh;
  DC_TRY(cfg_load(&f->config, &c));
  DC_TRY(input_shapes(&c, opt, &sh));
  DC_TRY(set_meta(m, &c));
  dc_weights w;
  DC_TRY(dc_weights_init(&w, m, f));
  dc_gb g = {m, &w};
  dc_status *st = flux_forward(&g, &c, &sh);
  if (!st) st = dc_weights_check_all_used(&w);
  dc_weights_deinit(&w);
  return st;
}

/* ---- the class descriptor -------------------------------------------- */

/* Every argument of FluxTransformer2DModel.__init__ with diffusers' default. */
static const dc_config_key flux_keys[] = {
    {"patch_size", DC_KEY_INT, "1", 0, NULL},
    {"in_channels", DC_KEY_INT, "64", 0, NULL},
    {"out_channels", DC_KEY_INT, "null", 1, NULL}, /* null: in_channels */
    {"num_layers", DC_KEY_INT, "19", 0, NULL},
    {"num_single_layers", DC_KEY_INT, "38", 0, NULL},
    {"attention_head_dim", DC_KEY_INT, "128", 0, NULL},
    {"num_attention_heads", DC_KEY_INT, "24", 0, NULL},
    {"joint_attention_dim", DC_KEY_INT, "4096", 0, NULL},
    {"pooled_projection_dim", DC_KEY_INT, "768", 0, NULL},
    {"guidance_embeds", DC_KEY_BOOL, "false", 0, NULL},
    {"axes_dims_rope", DC_KEY_INTS, "[16,56,56]", 0, "even sizes summing to attention_head_dim"},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_entry_io flux_inputs[] = {
    {"hidden_states", NULL},
    {"encoder_hidden_states", NULL},
    {"pooled_projections", NULL},
    {"timestep", NULL},
    {"img_ids", NULL},
    {"txt_ids", NULL},
    {"guidance", "guidance_embeds true"},
    {NULL, NULL},
};
static const dc_entry_io flux_outputs[] = {{"sample", NULL}, {NULL, NULL}};
static const dc_entry_desc flux_entries[] = {{"forward", flux_inputs, flux_outputs}, {NULL, NULL, NULL}};
/* diffusers' FluxTransformer2DModel._skip_layerwise_casting_patterns.  It
 * has no _group_offload_block_modules: its block lists (transformer_blocks,
 * single_transformer_blocks) are top-level ModuleLists, found as a UNet's are. */
static const char *const flux_skip_cast[] = {"pos_embed", "norm", NULL};

const dc_class_desc dc_class_flux_transformer_2d = {
    .name = "FluxTransformer2DModel",
    .library = DC_LIB_DIFFUSERS,
    .keys = flux_keys,
    .entries = flux_entries,
    .default_entry = "forward",
    .build = build_flux,
    .facts = {.block_modules = NULL, .skip_cast = flux_skip_cast, .options = 0},
};
