/* clip_text.c — transformers' CLIPTextModel and CLIPTextModelWithProjection
 * (models/clip/modeling_clip.py) as IR graphs: the text encoders of Stable
 * Diffusion 1.x/2.x (CLIP-L, OpenCLIP-H) and SDXL (CLIP-L and bigG).
 *
 *   input_ids [B,S] (i64, S <= max_position_embeddings)
 *   -> embeddings (token rows + position rows [0, S)) -> N pre-LN encoder
 *      layers with causal self-attention -> final_layer_norm
 *   CLIPTextModel:               last_hidden_state [B,S,D], pooler_output [B,D]
 *   CLIPTextModelWithProjection: text_embeds [B,P] = pooled · text_projection,
 *                                last_hidden_state
 * pooled is last_hidden_state at the first position whose id is
 * eos_token_id, or for the legacy configs whose eos_token_id is 2 (SD's
 * CLIP-L and bigG) at argmax(input_ids).  No attention mask: SD pipelines
 * pass none, so only the causal mask applies.
 *
 * Pipelines take another state (dc_build_options): hidden_states[k] (SD's
 * clip_skip, with final_layer_norm; SDXL's penultimate layer, without) as
 * the output "hidden_state".  Every output reads the layers it needs and no
 * more, so a caller that drops the others (dce) keeps no layer past k.
 *
 * Weight names: real checkpoints (transformers 4) name the text model's
 * weights "text_model.embeddings...", and CLIPTextModelWithProjection still
 * does; transformers 5 saves a CLIPTextModel without the prefix (its
 * PrefixChange reads either).  Both are read; record mode writes the first.
 * transformers 4 before 4.31 also saved embeddings.position_ids, a buffer
 * transformers now drops on load: it is accepted and not read. */
#include <math.h>
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

typedef struct {
  const char *path; /* config.json, for messages */
  int64_t vocab, hidden, inter, layers, heads, max_pos, eos;
  int64_t proj; /* projection_dim; -1 when null */
  double eps;
  dc_op act;
  const char *act_name;
} clip_config;

/* ---- config ---------------------------------------------------------- */

/* ACT2FN's names for the two activations CLIP text encoders use. */
static dc_status *cfg_act(const dc_json_doc *d, clip_config *c) {
  DC_TRY(dc_json_str(d, "hidden_act", "quick_gelu", &c->act_name));
  if (!strcmp(c->act_name, "quick_gelu")) return c->act = OP_QUICK_GELU, NULL;
  if (!strcmp(c->act_name, "gelu")) return c->act = OP_GELU, NULL; /* exact (erf), as ACT2FN's "gelu" */
  return dc_error(DC_ERR_UNSUPPORTED, "%s: \"hidden_act\" is \"%s\", which diffc does not support (supported: "
                  "quick_gelu, gelu)", d->path, c->act_name);
}

static dc_status *cfg_projection(const dc_json_doc *d, clip_config *c) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(d->root, "projection_dim");
  if (cJSON_IsNull(v)) return c->proj = -1, NULL;
  return dc_json_int_min(d, "projection_dim", 512, 1, &c->proj);
}

/* Defaults are CLIPTextConfig's.  The dropouts do nothing at inference, the
 * initializer keys only at training, and pad/bos_token_id are the
 * tokenizer's business: none is read. */
static dc_status *cfg_load(const dc_json_doc *d, clip_config *c) {
  memset(c, 0, sizeof *c);
  c->path = d->path;
  DC_TRY(dc_json_int_min(d, "vocab_size", 49408, 1, &c->vocab));
  DC_TRY(dc_json_int_min(d, "hidden_size", 512, 1, &c->hidden));
  DC_TRY(dc_json_int_min(d, "intermediate_size", 2048, 1, &c->inter));
  DC_TRY(dc_json_int_min(d, "num_hidden_layers", 12, 0, &c->layers));
  DC_TRY(dc_json_int_min(d, "num_attention_heads", 8, 1, &c->heads));
  DC_TRY(dc_json_int_min(d, "max_position_embeddings", 77, 1, &c->max_pos));
  DC_TRY(dc_json_int(d, "eos_token_id", 49407, &c->eos));
  DC_TRY(dc_json_num(d, "layer_norm_eps", 1e-5, &c->eps));
  DC_TRY(cfg_projection(d, c));
  DC_TRY(cfg_act(d, c));
  if (c->hidden % c->heads) /* CLIPTextConfig.validate_architecture refuses it too */
    return dc_error(DC_ERR_FORMAT, "%s: \"hidden_size\" %lld is not a multiple of \"num_attention_heads\" %lld",
                    d->path, (long long)c->hidden, (long long)c->heads);
  if (c->layers > 4096) return dc_error(DC_ERR_UNSUPPORTED, "%s: \"num_hidden_layers\" %lld is more than diffc "
                                        "builds (4096)", d->path, (long long)c->layers);
  return NULL;
}

/* ---- the graph ------------------------------------------------------- */

typedef struct {
  dc_gb g;
  const clip_config *c;
  const char *root; /* "text_model." or "" (see the top) */
} clip_b;

static const char *path(const clip_b *b, char *buf, size_t cap, const char *leaf) {
  return gb_path(buf, cap, "%s%s", b->root, leaf);
}

static dc_status *add_input_ids(clip_b *b, const dc_build_options *opt, int32_t *out) {
  int64_t dims[2];
  char buf[64];
  DC_TRY(dc_build_input_shape(opt, "input_ids", 2, (int64_t[]){1, b->c->max_pos}, dims));
  if (dims[1] > b->c->max_pos)
    return dc_error(DC_ERR_ARGUMENT, "input \"input_ids\" %s: %lld tokens, more than \"max_position_embeddings\" "
                    "(%lld, %s) allows", dc_dims_str(dims, 2, buf, sizeof buf), (long long)dims[1],
                    (long long)b->c->max_pos, b->c->path);
  dc_type t = {DT_I64, 2, {dims[0], dims[1]}};
  *out = dc_module_add_input(b->g.m, "input_ids", &t, INIT_NORMAL);
  return *out < 0 ? dc_nomem("adding a graph input") : NULL;
}

/* pooler_output: the first eos position, or argmax(input_ids) for the
 * legacy eos_token_id 2 (modeling_clip.py keeps that path for old configs). */
static dc_status *pool(clip_b *b, int32_t last, int32_t ids, int32_t *out) {
  char s[256];
  dc_node n = dc_node_make(OP_EOS_POOL, 2, (int32_t[]){last, ids});
  dc_node_set_int(&n, "argmax", b->c->eos == 2);
  dc_node_set_int(&n, "eos", b->c->eos);
  return gb_add(&b->g, &n, path(b, s, sizeof s, "pooler"), out);
}

/* hidden_states[k], through final_layer_norm when asked. */
static dc_status *hidden_output(clip_b *b, const dc_build_options *opt, const int32_t *hidden) {
  char s[256];
  int32_t h = hidden[opt->clip_hidden_index];
  if (opt->clip_hidden_final_norm)
    DC_TRY(gb_layer_norm(&b->g, path(b, s, sizeof s, "final_layer_norm"), h, b->c->hidden, b->c->eps, &h));
  return dc_module_add_output(b->g.m, "hidden_state", h);
}

/* The text model, its outputs in transformers' order. */
static dc_status *forward(clip_b *b, const dc_build_options *opt, int projection, int32_t *hidden) {
  const clip_config *c = b->c;
  char s[256];
  int32_t ids = -1, x = -1, last = -1, pooled = -1;
  blk_clip_cfg lc = {c->hidden, c->inter, c->heads, c->eps, c->act};
  DC_TRY(add_input_ids(b, opt, &ids));
  DC_TRY(blk_clip_text_embeddings(&b->g, path(b, s, sizeof s, "embeddings"), ids, c->vocab, c->max_pos, c->hidden,
                                  &x));
  DC_TRY(blk_clip_encoder(&b->g, path(b, s, sizeof s, "encoder"), &lc, c->layers, x, hidden));
  DC_TRY(gb_layer_norm(&b->g, path(b, s, sizeof s, "final_layer_norm"), hidden[c->layers], c->hidden, c->eps, &last));
  DC_TRY(pool(b, last, ids, &pooled));
  if (projection) {
    int32_t embeds = pooled;
    if (opt->clip_identity_projection && c->proj != c->hidden)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: an identity text_projection needs projection_dim %lld == hidden_size %lld",
                      c->path, (long long)c->proj, (long long)c->hidden);
    if (!opt->clip_identity_projection) DC_TRY(gb_linear(&b->g, "text_projection", pooled, c->hidden, c->proj, 0, &embeds));
    DC_TRY(dc_module_add_output(b->g.m, "text_embeds", embeds));
    DC_TRY(dc_module_add_output(b->g.m, "last_hidden_state", last));
  } else {
    DC_TRY(dc_module_add_output(b->g.m, "last_hidden_state", last));
    DC_TRY(dc_module_add_output(b->g.m, "pooler_output", pooled));
  }
  return opt->clip_hidden_index >= 0 ? hidden_output(b, opt, hidden) : NULL;
}

/* ---- build ------------------------------------------------------------- */

static dc_status *check_options(const clip_config *c, const dc_build_options *opt, int projection) {
  if (opt->clip_hidden_index < -1 || opt->clip_hidden_index > c->layers)
    return dc_error(DC_ERR_ARGUMENT,
                    "clip_hidden_index (--clip-hidden-state) %d: %s has %lld encoder layers, so hidden_states has "
                    "indices 0..%lld (0: the embeddings, k: after layer k)",
                    opt->clip_hidden_index, c->path, (long long)c->layers, (long long)c->layers);
  if (opt->clip_hidden_final_norm && opt->clip_hidden_index < 0)
    return dc_error(DC_ERR_ARGUMENT, "clip_hidden_final_norm (--clip-final-norm) applies to the hidden_state "
                    "output: give clip_hidden_index (--clip-hidden-state) too");
  if (projection && c->proj < 0)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"projection_dim\" is null, but CLIPTextModelWithProjection projects to "
                    "it (give its size)", c->path);
  return NULL;
}

/* "text_model." unless the folder holds transformers 5's unprefixed
 * CLIPTextModel (the projection model always has the prefix). */
static const char *weight_root(const dc_folder *f, int projection) {
  return !projection && dc_folder_find(f, "embeddings.token_embedding.weight") ? "" : "text_model.";
}

/* The position_ids buffer old checkpoints hold counts as used: transformers
 * drops it on load and so does diffc (positions are arange(S), always). */
static void skip_position_ids(dc_weights *w, const char *root) {
  char name[128];
  const struct dc_folder_entry *e = dc_folder_find(w->folder, gb_path(name, sizeof name, "%sembeddings.position_ids", root));
  if (e) w->used[e - w->folder->entries] = 1;
}

static dc_status *set_meta(dc_module *m, const clip_config *c, const dc_build_options *opt) {
  char buf[384];
  snprintf(buf, sizeof buf,
           "hidden_size=%lld layers=%lld heads=%lld intermediate_size=%lld hidden_act=%s max_position_embeddings=%lld "
           "pooled at %s",
           (long long)c->hidden, (long long)c->layers, (long long)c->heads, (long long)c->inter, c->act_name,
           (long long)c->max_pos, c->eos == 2 ? "argmax(input_ids) (legacy eos_token_id 2)" : "the first eos_token_id");
  DC_TRY(dc_module_set_meta(m, "entry", "forward"));
  DC_TRY(dc_module_set_meta(m, "config", buf));
  if (opt->clip_hidden_index < 0) return NULL;
  snprintf(buf, sizeof buf, "hidden_states[%d]%s", opt->clip_hidden_index,
           opt->clip_hidden_final_norm ? " through final_layer_norm" : "");
  return dc_module_set_meta(m, "hidden_state", buf);
}

static dc_status *build(const dc_folder *f, const dc_build_options *opt, dc_module *m, int projection) {
  clip_config c;
  DC_TRY(cfg_load(&f->config, &c));
  DC_TRY(check_options(&c, opt, projection));
  DC_TRY(set_meta(m, &c, opt));
  int32_t *hidden = dc_malloc(sizeof *hidden * (size_t)(c.layers + 1));
  if (!hidden) return dc_nomem("building the text encoder");
  dc_weights w;
  dc_status *st = dc_weights_init(&w, m, f);
  if (!st) {
    clip_b b = {{m, &w}, &c, weight_root(f, projection)};
    skip_position_ids(&w, b.root);
    st = forward(&b, opt, projection, hidden);
    if (!st) st = dc_weights_check_all_used(&w);
    dc_weights_deinit(&w);
  }
  dc_free(hidden);
  return st;
}

static dc_status *build_text_model(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  return build(f, opt, m, 0);
}

static dc_status *build_with_projection(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  return build(f, opt, m, 1);
}

/* ---- the class descriptors --------------------------------------------- */

/* Every argument of CLIPTextConfig with transformers' default ("dropout" is
 * the older transformers' argument that SD's configs still carry). */
static const dc_config_key clip_keys[] = {
    {"vocab_size", DC_KEY_INT, "49408", 0, NULL},
    {"hidden_size", DC_KEY_INT, "512", 0, NULL},
    {"intermediate_size", DC_KEY_INT, "2048", 0, NULL},
    {"projection_dim", DC_KEY_INT, "512", 1, NULL},
    {"num_hidden_layers", DC_KEY_INT, "12", 0, NULL},
    {"num_attention_heads", DC_KEY_INT, "8", 0, NULL},
    {"max_position_embeddings", DC_KEY_INT, "77", 0, NULL},
    {"hidden_act", DC_KEY_STR, "\"quick_gelu\"", 0, "quick_gelu, gelu"},
    {"layer_norm_eps", DC_KEY_NUM, "1e-05", 0, NULL},
    {"attention_dropout", DC_KEY_NUM, "0.0", 1, NULL},
    {"dropout", DC_KEY_NUM, "0.0", 1, NULL},
    {"initializer_range", DC_KEY_NUM, "0.02", 0, NULL},
    {"initializer_factor", DC_KEY_NUM, "1.0", 1, NULL},
    {"pad_token_id", DC_KEY_INT, "1", 1, NULL},
    {"bos_token_id", DC_KEY_INT, "49406", 1, NULL},
    {"eos_token_id", DC_KEY_INT, "49407", 0, "an integer"},
    {NULL, 0, NULL, 0, NULL},
};

#define HIDDEN_WHEN "clip_hidden_index >= 0 (--clip-hidden-state)"
static const dc_entry_io ids_io[] = {{"input_ids", NULL}, {NULL, NULL}};
static const dc_entry_io text_model_outputs[] = {
    {"last_hidden_state", NULL}, {"pooler_output", NULL}, {"hidden_state", HIDDEN_WHEN}, {NULL, NULL}};
static const dc_entry_io projection_outputs[] = {
    {"text_embeds", NULL}, {"last_hidden_state", NULL}, {"hidden_state", HIDDEN_WHEN}, {NULL, NULL}};
static const dc_entry_desc text_model_entries[] = {{"forward", ids_io, text_model_outputs}, {NULL, NULL, NULL}};
static const dc_entry_desc projection_entries[] = {{"forward", ids_io, projection_outputs}, {NULL, NULL, NULL}};
/* Group offload's block lists: the encoder's layers, with either naming. */
static const char *const clip_block_modules[] = {"encoder", "text_model.encoder", NULL};

const dc_class_desc dc_class_clip_text_model = {
    .name = "CLIPTextModel",
    .library = DC_LIB_TRANSFORMERS,
    .model_type = "clip_text_model",
    .keys = clip_keys,
    .entries = text_model_entries,
    .default_entry = "forward",
    .build = build_text_model,
    .facts = {.block_modules = clip_block_modules, .skip_cast = NULL, .options = DC_FACT_CLIP_HIDDEN},
};

const dc_class_desc dc_class_clip_text_model_with_projection = {
    .name = "CLIPTextModelWithProjection",
    .library = DC_LIB_TRANSFORMERS,
    .model_type = "clip_text_model",
    .keys = clip_keys,
    .entries = projection_entries,
    .default_entry = "forward",
    .build = build_with_projection,
    .facts = {.block_modules = clip_block_modules, .skip_cast = NULL, .options = DC_FACT_CLIP_HIDDEN},
};
