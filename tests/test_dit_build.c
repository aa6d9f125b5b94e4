/* test_dit_build.c — the DiT classes (frontend/flux_transformer.c,
 * frontend/sd3_transformer.c, frontend/cogvideox_transformer.c), beyond
 * what their fixtures prove against diffusers:
 *   - config errors: each names the config file, the key and the value
 *     (axes_dims_rope that do not fill a head or hold an odd size, a key
 *     diffusers does not know, qk_norm other than rms_norm, a
 *     caption_projection_dim that is not the blocks' width, a null
 *     pos_embed_max_size, a config asking for a block the checkpoint lacks);
 *   - input errors: ids that do not match the tokens, a latent whose sides
 *     are not whole patches or outgrow the positional table;
 *   - the graph: the entries' inputs (guidance only with guidance_embeds),
 *     default shapes (Flux at 1024x1024 with 512 tokens, SD3 at
 *     sample_size), the output shapes, the rotary table and the cropped
 *     positional table;
 *   - CogVideoX: the variants diffc does not build refused by key
 *     (patch_size_t without rotary positions, ...), an ofs_embed_dim the
 *     time embedding cannot take, widths
 *     the position tables cannot split, text lengths the added tables do
 *     not cover, sizes the learned table (or 1.5's sliced rotary grid)
 *     does not cover, frames that are no whole patch_size_t groups; the
 *     rotary positions for a grid of another aspect than the base grid
 *     (1.0: the pipeline's crop region) and 1.5's integer positions;
 *   - group offload by block: every double and single block is a group of
 *     its own and nothing outside the block lists is uploaded, as
 *     diffusers' block_level offload groups them. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "passes/passes.h"
#include "testutil.h"

/* ---- models: a fixture's weights under an edited config ------------------ */

static char *fixture_model(const char *fixture) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s/fixtures/%s/model", tu_source_dir, fixture);
  return dc_strdup(buf);
}

/* A copy of the fixture's model folder in the scratch folder at `name`,
 * its config.json with `edit` (a JSON object) merged over the fixture's:
 * each key replaced, null values written as null.  Returns the folder. */
static char *variant(const char *fixture, const char *name, const char *edit) {
  char *src = fixture_model(fixture), *dir = tu_path(name), *text = NULL, *weights = NULL;
  char path[1200];
  size_t n = 0;
  CHECK(mkdir(dir, 0755) == 0);
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", src);
  CHECK_OK(dc_file_read_all(path, &weights, &n));
  snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
  tu_write_file(path, weights, n);
  snprintf(path, sizeof path, "%s/config.json", src);
  CHECK_OK(dc_file_read_all(path, &text, NULL));
  cJSON *cfg = cJSON_Parse(text), *ed = cJSON_Parse(edit), *e;
  CHECK(cfg && ed);
  cJSON_ArrayForEach(e, ed) {
    cJSON *copy = cJSON_Duplicate(e, 1);
    if (cJSON_GetObjectItemCaseSensitive(cfg, e->string)) cJSON_ReplaceItemInObjectCaseSensitive(cfg, e->string, copy);
    else cJSON_AddItemToObject(cfg, e->string, copy);
  }
  char *out = cJSON_Print(cfg);
  snprintf(path, sizeof path, "%s/config.json", dir);
  tu_write_file(path, out, strlen(out));
  cJSON_free(out);
  cJSON_Delete(cfg);
  cJSON_Delete(ed);
  dc_free(text);
  dc_free(weights);
  dc_free(src);
  return dir;
}

static dc_status *build(const char *dir, const dc_input_shape *shapes, int nshapes, dc_module **m) {
  dc_folder f;
  dc_build_options bo = {.shapes = shapes, .nshapes = nshapes, .clip_hidden_index = -1};
  *m = NULL;
  DC_TRY(dc_folder_open(dir, NULL, &f));
  dc_status *st = dc_frontend_build(&f, &bo, m);
  dc_folder_close(&f);
  return st;
}

/* Builds the fixture edited by `edit` and checks the error holds `needle`
 * and names the config file (a config error) or the model folder (a
 * weight the config implies that the checkpoint lacks or shapes otherwise). */
static void expect_error(const char *fixture, const char *edit, const char *where, const char *needle) {
  static int k;
  char name[32];
  snprintf(name, sizeof name, "cfg%d", k++);
  char *dir = variant(fixture, name, edit);
  dc_module *m = NULL;
  dc_status *st = build(dir, NULL, 0, &m);
  CHECK(st && strstr(dc_status_message(st), where));
  if (st && !strstr(dc_status_message(st), needle)) printf("  message: %s\n", dc_status_message(st));
  CHECK_ERR(st, needle);
  dc_module_destroy(m);
  dc_free(dir);
}

static void expect_config_error(const char *fixture, const char *edit, const char *needle) {
  expect_error(fixture, edit, "config.json: ", needle);
}

static void expect_weight_error(const char *fixture, const char *edit, const char *needle) {
  expect_error(fixture, edit, ": weight \"", needle);
}

static void test_config_errors(void) {
  expect_config_error("flux_dev", "{\"axes_dims_rope\": [4, 4, 6]}",
                      "\"axes_dims_rope\" sums to 14 but \"attention_head_dim\" is 16");
  expect_config_error("flux_dev", "{\"axes_dims_rope\": [4, 5, 7]}", "\"axes_dims_rope\"[1] is 5");
  expect_config_error("flux_dev", "{\"guidance_embeds\": \"yes\"}", "\"guidance_embeds\" must be");
  expect_config_error("flux_dev", "{\"num_single_layer\": 2}", "\"num_single_layers\"");
  expect_config_error("flux_dev", "{\"num_layers\": -1}", "\"num_layers\" must be an integer >= 0, got -1");
  /* a config that asks for a block the checkpoint does not hold */
  expect_weight_error("flux_schnell", "{\"num_single_layers\": 3}",
                      "weight \"single_transformer_blocks.2.norm.linear.weight\" is missing");
  /* guidance_embeds on a checkpoint without the guidance embedder */
  expect_weight_error("flux_schnell", "{\"guidance_embeds\": true}",
                      "weight \"time_text_embed.guidance_embedder.linear_1.weight\" is missing");
  expect_config_error("sd35", "{\"qk_norm\": \"layer_norm\"}",
                      "\"qk_norm\" is \"layer_norm\", which diffc does not support (supported: null, \"rms_norm\")");
  expect_config_error("sd3", "{\"caption_projection_dim\": 24}", "\"caption_projection_dim\" is 24 but the blocks are 16");
  expect_config_error("sd3", "{\"pos_embed_max_size\": null}",
                      "\"pos_embed_max_size\" is null, which diffc does not support (supported: an integer)");
  /* dual attention where the checkpoint has none: norm1's 9 chunks meet its 6 */
  expect_weight_error("sd3", "{\"dual_attention_layers\": [1]}",
                      "\"transformer_blocks.1.norm1.linear.weight\" has shape [96,16] but the config implies [144,16]");
}

static void test_cogvideox_config_errors(void) {
  expect_config_error("cogvideox_sincos", "{\"patch_size_t\": 2}",
                      "\"patch_size_t\" is 2 but the positions are not the rotary ones alone");
  expect_config_error("cogvideox_sincos", "{\"patch_bias\": false}", "\"patch_bias\" is false");
  /* a 1.0 checkpoint asked to be 1.5: its conv patch embedding is no Linear */
  expect_weight_error("cogvideox_tiny", "{\"patch_size_t\": 2}",
                      "\"patch_embed.proj.weight\" has shape [32,4,2,2] but the config implies [32,32]");
  expect_config_error("cogvideox_tiny", "{\"ofs_embed_dim\": 512}",
                      "\"ofs_embed_dim\" is 512 but \"time_embed_dim\" is 16; the ofs embedding is added");
  expect_weight_error("cogvideox_t", "{\"ofs_embed_dim\": 16}", "weight \"ofs_embedding.linear_1.weight\" is missing");
  expect_config_error("cogvideox_tiny", "{\"activation_fn\": \"gelu\"}",
                      "\"activation_fn\" is \"gelu\", which diffc does not support (supported: \"gelu-approximate\")");
  expect_config_error("cogvideox_tiny", "{\"norm_elementwise_affine\": false}", "\"norm_elementwise_affine\" is false");
  expect_config_error("cogvideox_tiny", "{\"use_rotary_positional_embedding\": true}",
                      "\"use_rotary_positional_embeddings\"");
  expect_config_error("cogvideox_sincos", "{\"use_learned_positional_embeddings\": true}",
                      "\"use_rotary_positional_embeddings\" is false; diffusers refuses that combination");
  expect_config_error("cogvideox_tiny", "{\"attention_head_dim\": 24}",
                      "the 3D rotary table needs \"attention_head_dim\" a multiple of 16, found 24");
  expect_config_error("cogvideox_sincos", "{\"num_attention_heads\": 1, \"attention_head_dim\": 24}",
                      "a multiple of 16, found 24");
  /* q/k/v biases the 2b-style fixture (attention_bias false) does not hold */
  expect_weight_error("cogvideox_sincos", "{\"attention_bias\": true}",
                      "weight \"transformer_blocks.0.attn1.to_q.bias\" is missing");
  expect_weight_error("cogvideox_tiny", "{\"use_learned_positional_embeddings\": true}",
                      "weight \"patch_embed.pos_embedding\" is missing");
}

/* ---- inputs ------------------------------------------------------------------ */

static void expect_input_error(const char *fixture, const dc_input_shape *s, int n, const char *needle) {
  char *dir = fixture_model(fixture);
  dc_module *m = NULL;
  CHECK_ERR(build(dir, s, n, &m), needle);
  dc_module_destroy(m);
  dc_free(dir);
}

static void test_input_errors(void) {
  dc_input_shape flux[] = {{"hidden_states", 3, {2, 15, 16}}, {"img_ids", 2, {14, 3}}};
  expect_input_error("flux_dev", flux, 2, "input \"img_ids\" is [14,3] but the model needs [15,3]");
  dc_input_shape flux_ctx[] = {{"encoder_hidden_states", 3, {1, 7, 32}}, {"txt_ids", 2, {7, 2}}};
  expect_input_error("flux_dev", flux_ctx, 2, "input \"txt_ids\" is [7,2] but the model needs [7,3]");
  dc_input_shape flux_in[] = {{"hidden_states", 3, {1, 15, 12}}};
  expect_input_error("flux_dev", flux_in, 1, "input \"hidden_states\" is [1,15,12] but the model needs [*,*,16]");
  dc_input_shape odd[] = {{"hidden_states", 4, {1, 4, 7, 10}}};
  expect_input_error("sd3", odd, 1, "with H and W multiples of 2, at most 16");
  dc_input_shape big[] = {{"hidden_states", 4, {1, 4, 18, 10}}};
  expect_input_error("sd3", big, 1, "pos_embed_max_size 8 patches");
  dc_input_shape batch[] = {{"hidden_states", 4, {2, 4, 6, 10}}, {"timestep", 1, {1}}};
  expect_input_error("sd3", batch, 2, "input \"timestep\" is [1] but the model needs [2]");
  dc_input_shape cog_odd[] = {{"hidden_states", 5, {1, 3, 4, 7, 8}}};
  expect_input_error("cogvideox_tiny", cog_odd, 1, "needs [B,F,4,H,W] with H and W multiples of 2");
  dc_input_shape cog_text[] = {{"hidden_states", 5, {2, 3, 4, 6, 8}}, {"encoder_hidden_states", 3, {2, 5, 32}}};
  expect_input_error("cogvideox_sincos", cog_text, 2, "is [2,5,32] but the model needs [2,8,32] (batch from "
                     "\"hidden_states\", max_text_seq_length");
  dc_input_shape cog_size[] = {{"hidden_states", 5, {2, 2, 8, 6, 8}}};
  expect_input_error("cogvideox_learned", cog_size, 1, "needs [B,3,8,6,8] (use_learned_positional_embeddings");
  dc_input_shape cog_t_frames[] = {{"hidden_states", 5, {1, 3, 4, 6, 8}}};
  expect_input_error("cogvideox_t", cog_t_frames, 1, "with F a multiple of 2, H at most 6 and W at most 8");
  dc_input_shape cog_t_big[] = {{"hidden_states", 5, {1, 2, 4, 8, 8}}};
  expect_input_error("cogvideox_t", cog_t_big, 1, "the rotary grid is sliced from the base grid");
  dc_input_shape cog_ofs[] = {{"hidden_states", 5, {2, 4, 8, 6, 8}}, {"ofs", 1, {3}}};
  expect_input_error("cogvideox_i2v15", cog_ofs, 2, "input \"ofs\" is [3] but the model needs [1] or [2]");
  dc_input_shape cog_batch[] = {{"hidden_states", 5, {2, 3, 4, 6, 8}}, {"timestep", 1, {1}}};
  expect_input_error("cogvideox_tiny", cog_batch, 2, "input \"timestep\" is [1] but the model needs [2]");
}

/* ---- the graph -------------------------------------------------------------- */

static int has_input(const dc_module *m, const char *name) {
  for (int i = 0; i < m->ninputs; i++)
    if (!strcmp(m->inputs[i].name, name)) return 1;
  return 0;
}

static const dc_type *input_type(const dc_module *m, const char *name) {
  for (int i = 0; i < m->ninputs; i++)
    if (!strcmp(m->inputs[i].name, name)) return &m->nodes[m->inputs[i].node].type;
  return NULL;
}

static int count_op(const dc_module *m, dc_op op) {
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++) n += m->nodes[i].op == op;
  return n;
}

static int dims_are(const dc_type *t, int rank, const int64_t *d) {
  if (!t || t->rank != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != d[i]) return 0;
  return 1;
}

static void test_flux_graph(void) {
  char *dev = fixture_model("flux_dev"), *schnell = fixture_model("flux_schnell");
  dc_module *m = NULL;
  CHECK_OK(build(dev, NULL, 0, &m)); /* defaults: 1024x1024 (4096 packed latents), 512 tokens */
  if (m) {
    CHECK(dims_are(input_type(m, "hidden_states"), 3, (int64_t[]){1, 4096, 16}));
    CHECK(dims_are(input_type(m, "encoder_hidden_states"), 3, (int64_t[]){1, 512, 32}));
    CHECK(dims_are(input_type(m, "img_ids"), 2, (int64_t[]){4096, 3}));
    CHECK(dims_are(input_type(m, "txt_ids"), 2, (int64_t[]){512, 3}));
    CHECK(dims_are(input_type(m, "guidance"), 1, (int64_t[]){1}));
    CHECK(m->noutputs == 1 && !strcmp(m->outputs[0].name, "sample") &&
          dims_are(&m->nodes[m->outputs[0].node].type, 3, (int64_t[]){1, 4096, 16}));
    /* one rotary table for the joint sequence; q and k rotated in each of the 3 attentions */
    CHECK(count_op(m, OP_ROPE_FREQS) == 1 && count_op(m, OP_ROPE) == 6);
    CHECK(count_op(m, OP_ATTENTION) == 3 && count_op(m, OP_SCALE) == 2); /* timestep and guidance x 1000 */
    /* per-head q/k norms: 4 per double block (q, k, added q, added k), 2 per single */
    CHECK(count_op(m, OP_RMS_NORM) == 2 * 4 + 2);
  }
  dc_module_destroy(m);
  CHECK_OK(build(schnell, NULL, 0, &m));
  if (m) {
    CHECK(!has_input(m, "guidance") && has_input(m, "timestep") && count_op(m, OP_SCALE) == 1);
    const dc_node *f = NULL;
    for (int32_t i = 0; i < m->nnodes; i++)
      if (m->nodes[i].op == OP_ROPE_FREQS) f = &m->nodes[i];
    CHECK(f && f->nlist == 3 && f->list[0] == 4 && f->list[1] == 4 && f->list[2] == 8 &&
          dims_are(&f->type, 3, (int64_t[]){512 + 4096, 2, 16}));
  }
  dc_module_destroy(m);
  dc_free(dev);
  dc_free(schnell);
}

/* The positional table's crop of a max x max table: the rows top..top+h
 * (as one slice of the flat table), then the columns left..left+w. */
static void check_crop(const dc_module *m, int64_t max, int64_t top, int64_t h, int64_t left, int64_t w) {
  int rows = 0, cols = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_SLICE || !n->scope || strcmp(n->scope, "pos_embed.pos_embed") != 0) continue;
    int64_t axis = dc_node_int(n, "axis"), start = dc_node_int(n, "start"), end = dc_node_int(n, "end");
    rows += axis == 1 && n->type.rank == 3 && n->type.dims[0] == 1 && start == top * max && end == (top + h) * max;
    cols += axis == 1 && n->type.dims[0] == h && start == left && end == left + w;
  }
  CHECK(rows == 1 && cols == 1);
}

static void test_sd3_graph(void) {
  char *sd3 = fixture_model("sd3"), *sd35 = fixture_model("sd35");
  dc_module *m = NULL;
  CHECK_OK(build(sd3, NULL, 0, &m)); /* defaults: sample_size 8, 333 tokens */
  if (m) {
    CHECK(dims_are(input_type(m, "hidden_states"), 4, (int64_t[]){1, 4, 8, 8}));
    CHECK(dims_are(input_type(m, "encoder_hidden_states"), 3, (int64_t[]){1, 333, 24}));
    CHECK(m->ninputs == 4 && count_op(m, OP_ROPE) == 0 && count_op(m, OP_RMS_NORM) == 0);
    check_crop(m, 8, 2, 4, 2, 4); /* 4x4 patches in the middle of the 8x8 table */
  }
  dc_module_destroy(m);
  dc_input_shape wide[] = {{"hidden_states", 4, {2, 4, 6, 10}}};
  CHECK_OK(build(sd3, wide, 1, &m));
  if (m) {
    check_crop(m, 8, 2, 3, 1, 5); /* (8 - 3) // 2, (8 - 5) // 2 */
    CHECK(dims_are(&m->nodes[m->outputs[0].node].type, 4, (int64_t[]){2, 4, 6, 10}));
  }
  dc_module_destroy(m);
  CHECK_OK(build(sd35, NULL, 0, &m));
  /* 3 blocks, attn2 in the first two; every attention normalises q and k (and the joint ones the context's) */
  if (m) CHECK(count_op(m, OP_ATTENTION) == 5 && count_op(m, OP_RMS_NORM) == 3 * 4 + 2 * 2);
  dc_module_destroy(m);
  dc_free(sd3);
  dc_free(sd35);
}

static const dc_node *only_node(const dc_module *m, dc_op op, int rank) {
  const dc_node *found = NULL;
  int n = 0;
  for (int32_t i = 0; i < m->nnodes; i++)
    if (m->nodes[i].op == op && m->nodes[i].type.rank == rank) found = &m->nodes[i], n++;
  return n == 1 ? found : NULL;
}

/* The 5b-style graph at the default size, and the rotary positions of a
 * 4x3 grid on the 3x4 base grid: resized to 3x2 ((4/3 > 3/4: the height
 * fills the base), centred one column in, so rows run over
 * linspace(0, 3 * 3/4, 4) and columns over linspace(1, 3 * 2/3, 3). */
static void test_cogvideox_graph(void) {
  char *tiny = fixture_model("cogvideox_tiny"), *sincos = fixture_model("cogvideox_sincos");
  dc_module *m = NULL;
  CHECK_OK(build(tiny, NULL, 0, &m)); /* defaults: (9 - 1) / 4 + 1 latent frames of 6x8, 8 tokens */
  if (m) {
    CHECK(dims_are(input_type(m, "hidden_states"), 5, (int64_t[]){1, 3, 4, 6, 8}));
    CHECK(dims_are(input_type(m, "encoder_hidden_states"), 3, (int64_t[]){1, 8, 32}));
    CHECK(m->ninputs == 3 && dims_are(&m->nodes[m->outputs[0].node].type, 5, (int64_t[]){1, 3, 4, 6, 8}));
    const dc_node *f = only_node(m, OP_ROPE_FREQS, 3);
    CHECK(f && f->nlist == 3 && f->list[0] == 4 && f->list[1] == 6 && f->list[2] == 6 &&
          dims_are(&f->type, 3, (int64_t[]){3 * 3 * 4, 2, 16}));
    int from_text = 0;
    for (int32_t i = 0; i < m->nnodes; i++)
      from_text += m->nodes[i].op == OP_ROPE && dc_node_int(&m->nodes[i], "start") == 8;
    CHECK(count_op(m, OP_ROPE) == 4 && from_text == 4); /* q and k of 2 blocks, the video tokens only */
    /* per block: norm_q, norm_k; then norm_final.  Per block 2 x 2 modulated norms; then norm_out */
    CHECK(count_op(m, OP_LAYER_NORM) == 2 * 2 + 1 && count_op(m, OP_MOD_LAYER_NORM) == 2 * 4 + 1);
  }
  dc_module_destroy(m);
  dc_input_shape tall[] = {{"hidden_states", 5, {1, 2, 4, 8, 6}}, {"encoder_hidden_states", 3, {1, 5, 32}}};
  CHECK_OK(build(tiny, tall, 2, &m));
  const dc_node *pos = m ? only_node(m, OP_CONSTANT, 2) : NULL;
  CHECK(pos && dims_are(&pos->type, 2, (int64_t[]){2 * 4 * 3, 3}));
  if (pos) {
    const float *p = pos->data;
    const float want[][3] = {{0, 0, 1}, {0, 0, 1.5f}, {0, 0.75f, 1}, {0, 2.25f, 2}, {1, 0, 1}, {1, 2.25f, 2}};
    const int row[] = {0, 1, 3, 11, 12, 23};
    for (int k = 0; k < 6; k++)
      CHECK(p[row[k] * 3] == want[k][0] && p[row[k] * 3 + 1] == want[k][1] && p[row[k] * 3 + 2] == want[k][2]);
  }
  dc_module_destroy(m);
  char *t15 = fixture_model("cogvideox_t");
  char *i2v = fixture_model("cogvideox_i2v15");
  CHECK_OK(build(i2v, NULL, 0, &m)); /* ofs only with ofs_embed_dim: one value by default */
  CHECK(m && m->ninputs == 4 && dims_are(input_type(m, "ofs"), 1, (int64_t[]){1}));
  dc_module_destroy(m);
  dc_free(i2v);
  CHECK_OK(build(t15, NULL, 0, &m)); /* 1.5: 4 latent frames in 2 groups; the "slice" grid's integer positions */
  pos = m ? only_node(m, OP_CONSTANT, 2) : NULL;
  CHECK(m && dims_are(input_type(m, "hidden_states"), 5, (int64_t[]){1, 4, 4, 6, 8}) && pos &&
        dims_are(&pos->type, 2, (int64_t[]){2 * 3 * 4, 3}));
  if (pos) {
    const float *p = pos->data;
    CHECK(p[23 * 3] == 1 && p[23 * 3 + 1] == 2 && p[23 * 3 + 2] == 3 && p[5 * 3 + 1] == 1 && p[5 * 3 + 2] == 1);
  }
  dc_module_destroy(m);
  dc_free(t15);
  CHECK_OK(build(sincos, NULL, 0, &m));
  /* no rotary table; the sincos table as a temporal [F,1,dim/4] and a spatial [h*w,3*dim/4] part */
  if (m) {
    const dc_node *t = only_node(m, OP_CONSTANT, 3), *sp = only_node(m, OP_CONSTANT, 2);
    CHECK(count_op(m, OP_ROPE) == 0 && count_op(m, OP_ROPE_FREQS) == 0 && count_op(m, OP_CONSTANT) == 2);
    CHECK(t && dims_are(&t->type, 3, (int64_t[]){3, 1, 8}) && sp && dims_are(&sp->type, 2, (int64_t[]){12, 24}));
  }
  dc_module_destroy(m);
  dc_free(tiny);
  dc_free(sincos);
}

/* ---- group offload by block ------------------------------------------------- */

/* Compiles the fixture's front half with group offload by block; every
 * uploaded weight must lie in a block list, and the weights of one block
 * (and only they) share a group.  Returns the number of groups. */
static int block_groups(const char *fixture) {
  char *dir = fixture_model(fixture);
  dc_module *m = NULL;
  CHECK_OK(build(dir, NULL, 0, &m));
  dc_free(dir);
  if (!m) return -1;
  dc_memory_options o = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1,
                         .prefetch = 1};
  dc_pipeline_options po = {.memory = &o};
  CHECK_OK(dc_pipeline_run(m, &po));
  char owner[64][64];
  int64_t group_of[64];
  int ngroups = 0, outside = 0, mixed = 0;
  for (int32_t i = 0; i < m->nnodes; i++) {
    const dc_node *n = &m->nodes[i];
    if (n->op != OP_UPLOAD) continue;
    const char *name = m->weights[m->nodes[n->inputs[0]].ref].name, *dot = strchr(name, '.');
    dot = dot ? strchr(dot + 1, '.') : NULL; /* "transformer_blocks.3" */
    if (!dot || (strncmp(name, "transformer_blocks.", 19) && strncmp(name, "single_transformer_blocks.", 26))) {
      outside++;
      continue;
    }
    char block[64];
    snprintf(block, sizeof block, "%.*s", (int)(dot - name), name);
    int64_t g = dc_node_int(n, "group");
    int k = 0;
    while (k < ngroups && strcmp(owner[k], block)) k++;
    if (k == ngroups && ngroups < 64) snprintf(owner[ngroups], 64, "%s", block), group_of[ngroups++] = g;
    else if (k < ngroups) mixed += group_of[k] != g;
  }
  for (int a = 0; a < ngroups; a++)
    for (int b = a + 1; b < ngroups; b++) mixed += group_of[a] == group_of[b];
  CHECK(outside == 0 && mixed == 0);
  dc_module_destroy(m);
  return ngroups;
}

static void test_group_offload(void) {
  CHECK(block_groups("flux_dev") == 2 + 1);     /* transformer_blocks.0-1, single_transformer_blocks.0 */
  CHECK(block_groups("flux_schnell") == 1 + 2);
  CHECK(block_groups("sd35") == 3);
  CHECK(block_groups("cogvideox_tiny") == 2);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_config_errors();
  test_cogvideox_config_errors();
  test_input_errors();
  test_flux_graph();
  test_sd3_graph();
  test_cogvideox_graph();
  test_group_offload();
  return tu_finish();
}
