/* test_t5_build.c — the T5 text encoder class (frontend/t5_encoder.c,
 * frontend/blocks/t5.c), beyond what the fixtures prove against
 * transformers:
 *   - config errors, each naming the file, the key and the value
 *     (feed_forward_proj's form, an activation diffc lacks, is_decoder, bucket
 *     counts and distances transformers' formula cannot bucket), and the
 *     dense_act_fn / is_gated_act keys overriding feed_forward_proj as
 *     transformers lets them;
 *   - the tied token table: shared.weight alone (transformers 5),
 *     encoder.embed_tokens.weight alone, both (the encoder reads its own),
 *     a wrong shape on the one not read, neither; decoder tensors ignored,
 *     other extra tensors refused;
 *   - the graph: one position bias for every block, unscaled attention,
 *     node counts, 16-bit tables read as stored, the default input shape;
 *   - the facts: layerwise casting leaves wo and the norms as stored, and
 *     group offload makes one group per encoder.block.N. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "passes/passes.h"
#include "testutil.h"

/* ---- a small T5 folder ---------------------------------------------------- */

/* The tiny model's keys; a test's own keys replace those of the same name. */
static const char *const tiny_keys[][2] = {
    {"vocab_size", "10"}, {"d_model", "4"}, {"d_kv", "2"}, {"num_heads", "3"}, {"d_ff", "6"}, {"num_layers", "2"},
    {"relative_attention_num_buckets", "8"}, {"relative_attention_max_distance", "16"},
};

static char *tiny_config(const char *keys) {
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b, "{\"architectures\": [\"T5EncoderModel\"], \"model_type\": \"t5\"%s", keys);
  for (size_t i = 0; i < sizeof tiny_keys / sizeof tiny_keys[0]; i++) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", tiny_keys[i][0]);
    if (!strstr(keys, quoted)) dc_buf_printf(&b, ", %s: %s", quoted, tiny_keys[i][1]);
  }
  dc_buf_printf(&b, "}");
  dc_buf_u8(&b, 0);
  return (char *)b.data;
}
#define GATED ", \"feed_forward_proj\": \"gated-gelu\""

typedef struct {
  const char *drop;   /* a listed weight left out */
  const char *rename; /* ... or renamed to this */
  const char *extra;  /* an extra tensor */
  int64_t extra_rows; /* its rows ([rows, 4] f32) */
} tiny_weights;

/* dir/config.json with `keys`, and a model.safetensors of zeros holding
 * what record mode lists (weights; else one stray tensor: a config the
 * builder refuses lists none), changed as tw says. */
static char *tiny_folder(const char *name, const char *keys, int weights, tiny_weights tw) {
  char *dir = tu_path(name), *config = dc_path_join(dir, "config.json"), *text = tiny_config(keys);
  mkdir(dir, 0755);
  tu_write_file(config, text, strlen(text));
  dc_weight_list l = {0};
  if (weights) CHECK_OK(dc_frontend_weight_list(config, NULL, &l));
  static float zeros[256];
  dc_st_out *t = calloc((size_t)l.n + 1, sizeof *t);
  int n = 0;
  for (int i = 0; i < l.n; i++) {
    int hit = tw.drop && !strcmp(l.items[i].name, tw.drop);
    if (hit && !tw.rename) continue;
    t[n].name = hit ? tw.rename : l.items[i].name;
    t[n].type = (dc_type){DT_F32, l.items[i].rank, {0}};
    memcpy(t[n].type.dims, l.items[i].dims, sizeof(int64_t) * (size_t)l.items[i].rank);
    t[n++].data = zeros;
  }
  if (tw.extra || !weights)
    t[n++] = (dc_st_out){tw.extra ? tw.extra : "x", {DT_F32, 2, {tw.extra ? tw.extra_rows : 1, 4}}, zeros};
  char *st = dc_path_join(dir, "model.safetensors");
  CHECK_OK(dc_st_write(st, t, n));
  free(t);
  dc_free(st);
  dc_weight_list_deinit(&l);
  dc_free(config);
  dc_free(text); /* dc_buf's data */
  return dir;
}

static dc_status *build_dir(const char *dir, const dc_build_options *opt, dc_module **m) {
  dc_folder f;
  *m = NULL;
  DC_TRY(dc_folder_open(dir, NULL, &f));
  dc_status *st = dc_frontend_build(&f, opt, m);
  dc_folder_close(&f);
  return st;
}

static void check_build_err(const char *dir, const char *msg) {
  dc_build_options opt = {.clip_hidden_index = -1};
  dc_module *m = NULL;
  CHECK_ERR(build_dir(dir, &opt, &m), msg);
  dc_module_destroy(m);
}

static void config_err(const char *name, const char *keys, const char *msg) {
  char *d = tiny_folder(name, keys, 0, (tiny_weights){0});
  check_build_err(d, msg);
  check_build_err(d, "config.json"); /* every message names the file */
  free(d);
}

static int count_op(const dc_module *m, dc_op op) {
  int n = 0;
  for (int32_t i = 0; m && i < m->nnodes; i++) n += m->nodes[i].op == op;
  return n;
}

/* Whether record mode lists a weight of that name for the config. */
static int lists_weight(const char *name, const char *keys, const char *weight) {
  char *d = tiny_folder(name, keys, 0, (tiny_weights){0}), *config = dc_path_join(d, "config.json");
  dc_weight_list l = {0};
  CHECK_OK(dc_frontend_weight_list(config, NULL, &l));
  int found = 0;
  for (int i = 0; i < l.n; i++) found |= !strcmp(l.items[i].name, weight);
  dc_weight_list_deinit(&l);
  dc_free(config);
  free(d);
  return found;
}

/* ---- config ------------------------------------------------------------------ */

static void test_config_errors(void) {
  config_err("proj3", ", \"feed_forward_proj\": \"gated-gelu-x\"",
             "\"feed_forward_proj\" is \"gated-gelu-x\"; transformers expects \"ACT\" or \"gated-ACT\"");
  config_err("projform", ", \"feed_forward_proj\": \"double-gelu\"", "\"feed_forward_proj\" is \"double-gelu\"");
  config_err("silu", ", \"feed_forward_proj\": \"gated-silu\"",
             "the feed-forward activation (\"dense_act_fn\", from \"feed_forward_proj\" \"gated-silu\") is \"silu\", "
             "which diffc does not support for T5 (supported: gelu_new, as \"gated-gelu\" gives; relu)");
  config_err("gelu", GATED ", \"dense_act_fn\": \"gelu\"", "is \"gelu\", which diffc does not support for T5");
  config_err("decoder", ", \"is_decoder\": true", "\"is_decoder\" is true: T5EncoderModel would then build a causal");
  config_err("buckets", ", \"relative_attention_num_buckets\": 3",
             "\"relative_attention_num_buckets\" is 3; a bidirectional T5 needs at least 4");
  config_err("maxdist", ", \"relative_attention_max_distance\": 2",
             "\"relative_attention_max_distance\" 2 must be more than relative_attention_num_buckets / 4 (2)");
  config_err("dmodel", ", \"d_model\": 0", "\"d_model\" must be an integer >= 1, got 0");
  config_err("gatedtype", ", \"is_gated_act\": \"yes\"", "is_gated_act");
  config_err("typo", ", \"d_kvv\": 2", "\"d_kvv\" is not an argument of T5EncoderModel that diffc knows (the nearest "
                                       "it knows is \"d_kv\")");
  config_err("null", ", \"d_ff\": null", "\"d_ff\" is null, which diffc does not support");
}

/* transformers derives dense_act_fn and is_gated_act from feed_forward_proj
 * unless the config writes them, and then honours what it writes. */
static void test_derived_keys(void) {
  CHECK(lists_weight("relu", "", "encoder.block.0.layer.1.DenseReluDense.wi.weight"));
  CHECK(lists_weight("gated", GATED, "encoder.block.0.layer.1.DenseReluDense.wi_0.weight"));
  CHECK(lists_weight("gated_off", GATED ", \"is_gated_act\": false", "encoder.block.1.layer.1.DenseReluDense.wi.weight"));
  CHECK(lists_weight("gated_on", ", \"is_gated_act\": true", "encoder.block.1.layer.1.DenseReluDense.wi_1.weight"));
  /* gated-gelu with dense_act_fn relu: relu (a clamp at 0), gated */
  char *d = tiny_folder("gated_relu", GATED ", \"dense_act_fn\": \"relu\"", 1, (tiny_weights){0});
  dc_build_options opt = {.clip_hidden_index = -1};
  dc_module *m = NULL;
  CHECK_OK(build_dir(d, &opt, &m));
  CHECK(count_op(m, OP_CLAMP) == 2 && count_op(m, OP_GELU_TANH) == 0 && count_op(m, OP_MUL) == 2);
  dc_module_destroy(m);
  free(d);
  /* the flux config's keys: written by transformers 4.43, all taken */
  d = tiny_folder("flux_keys",
                  GATED ", \"_name_or_path\": \"google/t5-v1_1-xxl\", \"classifier_dropout\": 0.0, "
                  "\"decoder_start_token_id\": 0, \"dense_act_fn\": \"gelu_new\", \"dropout_rate\": 0.1, "
                  "\"eos_token_id\": 1, \"initializer_factor\": 1.0, \"is_encoder_decoder\": true, "
                  "\"is_gated_act\": true, \"layer_norm_epsilon\": 1e-06, \"num_decoder_layers\": 24, "
                  "\"output_past\": true, \"pad_token_id\": 0, \"tie_word_embeddings\": false, "
                  "\"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.43.3\", \"use_cache\": true, "
                  "\"scale_decoder_outputs\": true, \"n_positions\": 512",
                  1, (tiny_weights){0});
  CHECK_OK(build_dir(d, &opt, &m));
  CHECK(count_op(m, OP_GELU_TANH) + count_op(m, OP_LINEAR) > 0);
  dc_module_destroy(m);
  free(d);
}

/* ---- weights ----------------------------------------------------------------- */

/* The token table the embedding reads: the weight name behind it. */
static const char *embedding_table(const dc_module *m) {
  for (int32_t i = 0; m && i < m->nnodes; i++) {
    if (m->nodes[i].op != OP_EMBEDDING) continue;
    const dc_node *t = &m->nodes[m->nodes[i].inputs[1]];
    if (t->op == OP_CAST) t = &m->nodes[t->inputs[0]];
    return t->op == OP_WEIGHT ? m->weights[t->ref].name : NULL;
  }
  return NULL;
}

static void check_table(const char *name, tiny_weights tw, const char *want) {
  char *d = tiny_folder(name, GATED, 1, tw);
  dc_build_options opt = {.clip_hidden_index = -1};
  dc_module *m = NULL;
  CHECK_OK(build_dir(d, &opt, &m));
  const char *got = embedding_table(m);
  CHECK(got && !strcmp(got, want));
  if (!got || strcmp(got, want)) fprintf(stderr, "%s: the embedding reads %s, not %s\n", name, got ? got : "?", want);
  dc_module_destroy(m);
  free(d);
}

static void test_tied_table(void) {
  check_table("shared", (tiny_weights){0}, "shared.weight");
  check_table("embed_only", (tiny_weights){.drop = "shared.weight", .rename = "encoder.embed_tokens.weight"},
              "encoder.embed_tokens.weight");
  check_table("both", (tiny_weights){.extra = "encoder.embed_tokens.weight", .extra_rows = 10},
              "encoder.embed_tokens.weight");
  check_table("decoder", (tiny_weights){.extra = "decoder.block.0.layer.0.SelfAttention.q.weight", .extra_rows = 6},
              "shared.weight");
  char *d = tiny_folder("both_bad", GATED, 1, (tiny_weights){.drop = "shared.weight", .rename = "encoder.embed_tokens.weight",
                                                            .extra = "shared.weight", .extra_rows = 9});
  check_build_err(d, "weight \"shared.weight\" has shape [9,4] but the config implies [10,4]");
  free(d);
  d = tiny_folder("neither", GATED, 1, (tiny_weights){.drop = "shared.weight"});
  check_build_err(d, "weight \"shared.weight\" is missing (the config implies [10,4])");
  free(d);
  d = tiny_folder("lm_head", GATED, 1, (tiny_weights){.extra = "lm_head.weight", .extra_rows = 10});
  check_build_err(d, "1 weight in the checkpoint is not used by the T5EncoderModel graph: \"lm_head.weight\"");
  free(d);
  d = tiny_folder("missing_bias", GATED, 1, (tiny_weights){.drop = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"});
  check_build_err(d, "weight \"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight\" is missing (the "
                     "config implies [8,3])");
  free(d);
}

/* ---- the graph --------------------------------------------------------------- */

static char *fixture_model(const char *name) { return dc_asprintf("%s/fixtures/%s/model", tu_source_dir, name); }

/* t5_v11: 2 blocks.  One position bias, read by both attentions, which are
 * unscaled; 2 norms a block and the final one; gelu_tanh once a block. */
static void test_graph(void) {
  char *dir = fixture_model("t5_v11");
  dc_build_options opt = {.clip_hidden_index = -1};
  dc_module *m = NULL;
  CHECK_OK(build_dir(dir, &opt, &m));
  CHECK(count_op(m, OP_REL_POS_BIAS) == 1 && count_op(m, OP_ATTENTION_BIAS) == 2 && count_op(m, OP_RMS_NORM) == 5 &&
        count_op(m, OP_GELU_TANH) == 2 && count_op(m, OP_EMBEDDING) == 1 && count_op(m, OP_LINEAR) == 2 * 7);
  int32_t bias = -1;
  for (int32_t i = 0; m && i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op == OP_REL_POS_BIAS) {
      bias = i;
      CHECK(dc_node_int(n, "bidirectional") == 1 && dc_node_int(n, "max_distance") == 20);
      CHECK(n->type.dims[0] == 4 && n->type.dims[1] == 512 && n->type.dims[2] == 512);
    }
    if (n->op == OP_ATTENTION_BIAS) CHECK(n->inputs[3] == bias && dc_node_float(n, "scale") == 1.0);
  }
  /* the default input: [1, 512] int64, no mask */
  CHECK(m && m->ninputs == 1 && !strcmp(m->inputs[0].name, "input_ids"));
  const dc_type *t = m && m->ninputs ? &m->nodes[m->inputs[0].node].type : NULL;
  CHECK(t && t->dtype == DT_I64 && t->dims[0] == 1 && t->dims[1] == 512);
  CHECK(m && m->noutputs == 1 && !strcmp(m->outputs[0].name, "last_hidden_state"));
  dc_module_destroy(m);
  dc_input_shape shape = {"input_ids", 2, {3, 7}};
  opt.shapes = &shape, opt.nshapes = 1;
  CHECK_OK(build_dir(dir, &opt, &m));
  CHECK(m && m->nodes[m->outputs[0].node].type.dims[0] == 3 && m->nodes[m->outputs[0].node].type.dims[1] == 7);
  dc_module_destroy(m);
  dc_free(dir);
}

/* An fp16 checkpoint's token table and bias table go to their ops as stored. */
static void test_stored_tables(void) {
  char *dir = fixture_model("t5_v11_fp16");
  dc_folder f;
  dc_folder_options fo = {.variant = "fp16"};
  dc_module *m = NULL;
  CHECK_OK(dc_folder_open(dir, &fo, &f));
  dc_build_options opt = {.clip_hidden_index = -1};
  CHECK_OK(dc_frontend_build(&f, &opt, &m));
  int stored = 0;
  for (int32_t i = 0; m && i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    int slot = n->op == OP_EMBEDDING ? 1 : n->op == OP_REL_POS_BIAS ? 0 : -1;
    if (slot < 0) continue;
    const dc_node *t = &m->nodes[n->inputs[slot]];
    stored += t->op == OP_WEIGHT && t->type.dtype == DT_F16;
  }
  CHECK(stored == 2);
  dc_module_destroy(m);
  dc_folder_close(&f);
  dc_free(dir);
}

/* --storage-dtype bf16: the q/k/v/o and wi_0/wi_1 weights are stored in
 * bf16, wo (T5's _keep_in_fp32_modules) is not. */
static void test_skip_cast(void) {
  char *dir = fixture_model("t5_v11");
  dc_build_options opt = {.clip_hidden_index = -1};
  dc_module *m = NULL;
  CHECK_OK(build_dir(dir, &opt, &m));
  dc_memory_options mo = {.storage = DT_BF16};
  CHECK_OK(dc_pass_cast_weights(m, &mo));
  int wo = 0, wo_cast = 0, other_cast = 0;
  for (int32_t i = 0; m && i < m->nweights; i++) {
    const dc_weight *w = &m->weights[i];
    int is_wo = strstr(w->name, ".wo.") != NULL;
    wo += is_wo;
    wo_cast += is_wo && w->cast_pending;
    other_cast += !is_wo && w->cast_pending;
  }
  CHECK(wo == 2 && wo_cast == 0 && other_cast == 2 * 6);
  dc_module_destroy(m);
  dc_free(dir);
}

/* Group offload at block level: one group per encoder.block.N (all its
 * weights), the token table and the final norm resident. */
static void test_group_offload(void) {
  char *dir = fixture_model("t5_v11");
  dc_input_shape shape = {"input_ids", 2, {1, 5}};
  dc_build_options opt = {.shapes = &shape, .nshapes = 1, .clip_hidden_index = -1};
  dc_module *m = NULL;
  CHECK_OK(build_dir(dir, &opt, &m));
  dc_memory_options mo = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1};
  CHECK_OK(dc_pass_dce(m));
  CHECK_OK(dc_pass_offload(m, &mo));
  CHECK_OK(dc_verify(m, "offload"));
  int64_t group_of_block[2] = {-1, -1};
  int uploads = 0, consistent = 1, resident_uploaded = 0;
  for (int32_t i = 0; m && i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_UPLOAD) continue;
    const char *name = m->weights[m->nodes[n->inputs[0]].ref].name;
    uploads++;
    int b = !strncmp(name, "encoder.block.0.", 16) ? 0 : !strncmp(name, "encoder.block.1.", 16) ? 1 : -1;
    if (b < 0) {
      resident_uploaded++;
      continue;
    }
    if (group_of_block[b] < 0) group_of_block[b] = dc_node_int(n, "group");
    consistent &= group_of_block[b] == dc_node_int(n, "group");
  }
  /* 9 weights a block (q k v o wi_0 wi_1 wo, 2 norms), block 0's bias table */
  CHECK(uploads == 2 * 9 + 1 && resident_uploaded == 0 && consistent);
  CHECK(group_of_block[0] >= 0 && group_of_block[1] >= 0 && group_of_block[0] != group_of_block[1]);
  dc_module_destroy(m);
  dc_free(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_config_errors();
  test_derived_keys();
  test_tied_table();
  test_graph();
  test_stored_tables();
  test_skip_cast();
  test_group_offload();
  return tu_finish();
}
