/* t5_encoder.c — transformers' T5EncoderModel (models/t5/modeling_t5.py) as
 * an IR graph: the T5 text encoder of Flux and SD3 (T5-v1.1-XXL, gated-gelu)
 * and, since it costs nothing more, the original T5's non-gated relu one.
 *
 *   input_ids [B,S] (i64; S is free: positions are relative; default 512,
 *   Flux-dev's max_sequence_length)
 *   -> embed_tokens -> num_layers T5Blocks sharing one relative position bias
 *      -> final_layer_norm -> last_hidden_state [B,S,d_model]
 * No attention mask: the Flux and SD3 pipelines pass none.
 *
 * Weights: the token table is tied.  transformers 5 saves only
 * "shared.weight"; other checkpoints also (or only) hold
 * "encoder.embed_tokens.weight".  transformers ties the two when they are
 * equal and, when they differ, leaves them untied, so the encoder reads its
 * own: diffc reads "encoder.embed_tokens.weight" when the checkpoint has it,
 * else "shared.weight", and checks the shape of the other (which nothing
 * reads: T5EncoderModel's forward never touches shared).  Tensors under
 * "decoder." are ignored, as T5EncoderModel's
 * _keys_to_ignore_on_load_unexpected says.  The token table and the
 * relative_attention_bias are read in their stored dtype. */
#include <string.h>

#include "blocks/blocks.h"
#include "registry.h"

#define DEFAULT_SEQ 512

typedef struct {
  const char *path; /* config.json, for messages */
  int64_t vocab, layers;
  const char *act_name; /* dense_act_fn, as transformers derives it */
  blk_t5_cfg blk;
} t5_config;

/* ---- config ---------------------------------------------------------- */

/* T5Config.__post_init__: feed_forward_proj "ACT" or "gated-ACT" gives
 * dense_act_fn ACT (gelu_new for "gated-gelu") and is_gated_act; a config
 * that writes dense_act_fn or is_gated_act itself (transformers 4.2x and 5
 * save both) overrides them, as transformers sets those keys after. */
static dc_status *cfg_feed_forward(const dc_json_doc *d, t5_config *c) {
  const char *proj;
  DC_TRY(dc_json_str(d, "feed_forward_proj", "relu", &proj));
  const char *dash = strchr(proj, '-');
  int gated = dash && (size_t)(dash - proj) == 5 && !strncmp(proj, "gated", 5);
  if ((dash && !gated) || (dash && strchr(dash + 1, '-')) || !proj[0] || (dash && !dash[1]))
    return dc_error(DC_ERR_FORMAT, "%s: \"feed_forward_proj\" is \"%s\"; transformers expects \"ACT\" or "
                    "\"gated-ACT\" (\"relu\", \"gated-gelu\")", d->path, proj);
  const char *act = dash ? dash + 1 : proj;
  if (!strcmp(proj, "gated-gelu")) act = "gelu_new";
  DC_TRY(dc_json_str(d, "dense_act_fn", act, &c->act_name));
  DC_TRY(dc_json_bool(d, "is_gated_act", gated, &c->blk.gated));
  if (!strcmp(c->act_name, "gelu_new")) return c->blk.act = OP_GELU_TANH, NULL;
  if (!strcmp(c->act_name, "relu")) return c->blk.relu = 1, NULL;
  return dc_error(DC_ERR_UNSUPPORTED, "%s: the feed-forward activation (\"dense_act_fn\", from \"feed_forward_proj\" "
                  "\"%s\") is \"%s\", which diffc does not support for T5 (supported: gelu_new, as \"gated-gelu\" "
                  "gives; relu)", d->path, proj, c->act_name);
}

/* transformers' _relative_position_bucket divides by
 * log(max_distance / max_exact), max_exact = buckets / 4 for an encoder: a
 * table too small for that, or a max_distance not above it, gives no
 * defined bucket in torch. */
static dc_status *cfg_buckets(const dc_json_doc *d, t5_config *c) {
  DC_TRY(dc_json_int_min(d, "relative_attention_num_buckets", 32, 1, &c->blk.buckets));
  DC_TRY(dc_json_int_min(d, "relative_attention_max_distance", 128, 1, &c->blk.max_distance));
  int64_t max_exact = c->blk.buckets / 4;
  if (max_exact < 1)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"relative_attention_num_buckets\" is %lld; a bidirectional T5 needs "
                    "at least 4 (a quarter of them exact offsets)", d->path, (long long)c->blk.buckets);
  if (c->blk.max_distance <= max_exact)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"relative_attention_max_distance\" %lld must be more than "
                    "relative_attention_num_buckets / 4 (%lld): T5's log-spaced buckets divide by "
                    "log(max_distance / %lld)", d->path, (long long)c->blk.max_distance, (long long)max_exact,
                    (long long)max_exact);
  return NULL;
}

/* Defaults are T5Config's.  dropout_rate and classifier_dropout do nothing
 * at inference, initializer_factor only at training; the decoder's keys
 * (num_decoder_layers, use_cache, scale_decoder_outputs, ...) and the token
 * ids are not the encoder's business: none is read.  is_decoder would make
 * T5EncoderModel's stack a causal decoder with cross attention: refused. */
static dc_status *cfg_load(const dc_json_doc *d, t5_config *c) {
  memset(c, 0, sizeof *c);
  c->path = d->path;
  int is_decoder;
  DC_TRY(dc_json_int_min(d, "vocab_size", 32128, 1, &c->vocab));
  DC_TRY(dc_json_int_min(d, "d_model", 512, 1, &c->blk.d_model));
  DC_TRY(dc_json_int_min(d, "d_kv", 64, 1, &c->blk.d_kv));
  DC_TRY(dc_json_int_min(d, "d_ff", 2048, 1, &c->blk.d_ff));
  DC_TRY(dc_json_int_min(d, "num_layers", 6, 0, &c->layers));
  DC_TRY(dc_json_int_min(d, "num_heads", 8, 1, &c->blk.heads));
  DC_TRY(dc_json_num(d, "layer_norm_epsilon", 1e-6, &c->blk.eps));
  DC_TRY(dc_json_bool(d, "is_decoder", 0, &is_decoder));
  DC_TRY(cfg_buckets(d, c));
  DC_TRY(cfg_feed_forward(d, c));
  if (is_decoder)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"is_decoder\" is true: T5EncoderModel would then build a causal "
                    "decoder stack with cross attention, which diffc does not support (false: the encoder)", d->path);
  if (c->blk.eps < 0)
    return dc_error(DC_ERR_FORMAT, "%s: \"layer_norm_epsilon\" must be >= 0, got %g", d->path, c->blk.eps);
  if (c->layers > 4096)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: \"num_layers\" %lld is more than diffc builds (4096)", d->path,
                    (long long)c->layers);
  return NULL;
}

/* ---- the graph ------------------------------------------------------- */

static dc_status *add_input_ids(dc_module *m, const dc_build_options *opt, int32_t *out) {
  int64_t dims[2];
  DC_TRY(dc_build_input_shape(opt, "input_ids", 2, (int64_t[]){1, DEFAULT_SEQ}, dims));
  dc_type t = {DT_I64, 2, {dims[0], dims[1]}};
  *out = dc_module_add_input(m, "input_ids", &t, INIT_NORMAL);
  return *out < 0 ? dc_nomem("adding a graph input") : NULL;
}

/* The token table the encoder reads (see the top), the other one's shape
 * checked; record mode (no checkpoint) lists "shared.weight", the name
 * transformers 5 saves. */
static dc_status *token_table(dc_gb *g, const t5_config *c, int32_t *out) {
  int64_t dims[2] = {c->vocab, c->blk.d_model};
  if (!dc_folder_find(g->w->folder, "encoder.embed_tokens.weight")) return dc_weights_get(g->w, "shared.weight", 2, dims, out);
  DC_TRY(dc_weights_get(g->w, "encoder.embed_tokens.weight", 2, dims, out));
  if (!dc_folder_find(g->w->folder, "shared.weight")) return NULL;
  int32_t unread; /* bound for its shape check; read by nothing, so dce drops it */
  return dc_weights_get(g->w, "shared.weight", 2, dims, &unread);
}

static void skip_decoder(dc_weights *w) {
  for (int i = 0; i < w->folder->nentries; i++)
    if (!strncmp(w->folder->entries[i].name, "decoder.", 8)) w->used[i] = 1;
}

static dc_status *forward(dc_gb *g, const t5_config *c, const dc_build_options *opt) {
  int32_t ids, table, last;
  DC_TRY(add_input_ids(g->m, opt, &ids));
  DC_TRY(token_table(g, c, &table));
  DC_TRY(blk_t5_encoder(g, "encoder", &c->blk, c->layers, ids, table, &last));
  return dc_module_add_output(g->m, "last_hidden_state", last);
}

/* ---- build ------------------------------------------------------------- */

static dc_status *set_meta(dc_module *m, const t5_config *c) {
  char buf[384];
  snprintf(buf, sizeof buf,
           "d_model=%lld d_kv=%lld num_heads=%lld d_ff=%lld num_layers=%lld dense_act_fn=%s%s buckets=%lld "
           "max_distance=%lld",
           (long long)c->blk.d_model, (long long)c->blk.d_kv, (long long)c->blk.heads, (long long)c->blk.d_ff,
           (long long)c->layers, c->act_name, c->blk.gated ? " (gated)" : "", (long long)c->blk.buckets,
           (long long)c->blk.max_distance);
  DC_TRY(dc_module_set_meta(m, "entry", "forward"));
  return dc_module_set_meta(m, "config", buf);
}

static dc_status *build(const dc_folder *f, const dc_build_options *opt, dc_module *m) {
  t5_config c;
  DC_TRY(cfg_load(&f->config, &c));
  DC_TRY(set_meta(m, &c));
  dc_weights w;
  DC_TRY(dc_weights_init(&w, m, f));
  dc_gb g = {m, &w};
  skip_decoder(&w);
  dc_status *st = forward(&g, &c, opt);
  if (!st) st = dc_weights_check_all_used(&w);
  dc_weights_deinit(&w);
  return st;
}

/* ---- the class descriptor ---------------------------------------------- */

/* Every field of T5Config with transformers' default, the two it derives
 * (dense_act_fn, is_gated_act: their defaults are what the default
 * feed_forward_proj "relu" gives; absent, they follow feed_forward_proj),
 * and what T5 configs carry besides: scale_decoder_outputs (transformers 5
 * writes it), output_past and n_positions (t5 and t5-v1.1 configs; neither
 * is read by transformers' T5). */
static const dc_config_key t5_keys[] = {
    {"vocab_size", DC_KEY_INT, "32128", 0, NULL},
    {"d_model", DC_KEY_INT, "512", 0, NULL},
    {"d_kv", DC_KEY_INT, "64", 0, NULL},
    {"d_ff", DC_KEY_INT, "2048", 0, NULL},
    {"num_layers", DC_KEY_INT, "6", 0, NULL},
    {"num_decoder_layers", DC_KEY_INT, "null", 1, NULL},
    {"num_heads", DC_KEY_INT, "8", 0, NULL},
    {"relative_attention_num_buckets", DC_KEY_INT, "32", 0, NULL},
    {"relative_attention_max_distance", DC_KEY_INT, "128", 0, NULL},
    {"dropout_rate", DC_KEY_NUM, "0.1", 0, NULL},
    {"layer_norm_epsilon", DC_KEY_NUM, "1e-06", 0, NULL},
    {"initializer_factor", DC_KEY_NUM, "1.0", 0, NULL},
    {"feed_forward_proj", DC_KEY_STR, "\"relu\"", 0, "gated-gelu, relu, gated-relu, gelu_new, gated-gelu_new"},
    {"dense_act_fn", DC_KEY_STR, "\"relu\"", 0, "gelu_new, relu"},
    {"is_gated_act", DC_KEY_BOOL, "false", 0, NULL},
    {"is_encoder_decoder", DC_KEY_BOOL, "true", 0, NULL},
    {"is_decoder", DC_KEY_BOOL, "false", 0, "false"},
    {"use_cache", DC_KEY_BOOL, "true", 0, NULL},
    {"pad_token_id", DC_KEY_INT, "0", 1, NULL},
    {"eos_token_id", DC_KEY_ANY, "1", 1, NULL},
    {"decoder_start_token_id", DC_KEY_INT, "null", 1, NULL},
    {"classifier_dropout", DC_KEY_NUM, "0.0", 0, NULL},
    {"scale_decoder_outputs", DC_KEY_BOOL, "true", 0, NULL},
    {"output_past", DC_KEY_BOOL, "true", 0, NULL},
    {"n_positions", DC_KEY_INT, "512", 0, NULL},
    {NULL, 0, NULL, 0, NULL},
};

static const dc_entry_io ids_io[] = {{"input_ids", NULL}, {NULL, NULL}};
static const dc_entry_io outputs[] = {{"last_hidden_state", NULL}, {NULL, NULL}};
static const dc_entry_desc entries[] = {{"forward", ids_io, outputs}, {NULL, NULL, NULL}};
/* Group offload's block list: encoder.block.N. */
static const char *const t5_block_modules[] = {"encoder", NULL};
/* Layerwise casting keeps the feed-forward output projections as stored:
 * T5's _keep_in_fp32_modules ["wo"], which diffusers' enable_layerwise_casting
 * adds to its skip patterns (and transformers keeps in fp32 when loading T5 in
 * half precision).  The layer norms are skipped by the default "norm";
 * embeddings are never cast by diffc (they are read in their stored dtype). */
static const char *const t5_skip_cast[] = {"wo", NULL};

const dc_class_desc dc_class_t5_encoder_model = {
    .name = "T5EncoderModel",
    .library = DC_LIB_TRANSFORMERS,
    .model_type = "t5",
    .keys = t5_keys,
    .entries = entries,
    .default_entry = "forward",
    .build = build,
    .facts = {.block_modules = t5_block_modules, .skip_cast = t5_skip_cast, .options = 0},
};
