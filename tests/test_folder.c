/* test_folder.c — model folders as diffusers writes them (single file,
 * variant, sharded index, pipeline) built in a temp dir, every way they can
 * be wrong, and binding their weights into an IR module with
 * dc_weights_get. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/frontend.h"
#include "testutil.h"

static const char *unet_config = "{\"_class_name\": \"UNet2DConditionModel\", \"in_channels\": 4}";

static char *mkdir_tmp(const char *name) {
  char *p = tu_path(name);
  mkdir(p, 0755);
  return p;
}

static void write_text(const char *dir, const char *name, const char *text) {
  char *p = dc_path_join(dir, name);
  tu_write_file(p, text, strlen(text));
  dc_free(p);
}

static void write_st(const char *dir, const char *name, const dc_st_out *t, int n) {
  char *p = dc_path_join(dir, name);
  dc_status *st = dc_st_write(p, t, n);
  CHECK_OK(st);
  dc_free(p);
}

/* The folder path as dc_folder_open stores it (as given: messages name
 * what the user typed) + suffix. */
static char *abs_path(const char *dir, const char *suffix) { return dc_asprintf("%s%s", dir, suffix); }

/* Opens dir and expects an error containing abs(dir) + msg_after_dir. */
static void check_open_err(const char *dir, const dc_folder_options *opt, const char *msg) {
  char *want = abs_path(dir, msg);
  dc_folder f;
  CHECK_ERR(dc_folder_open(dir, opt, &f), want);
  CHECK(f.dir == NULL && f.shards == NULL && f.entries == NULL);
  dc_free(want);
}

/* Opens dir and expects an error containing msg anywhere. */
static void check_open_frag(const char *dir, const dc_folder_options *opt, const char *msg) {
  dc_folder f;
  CHECK_ERR(dc_folder_open(dir, opt, &f), msg);
}

static float zeros[64];
static uint16_t hzeros[64];

static void test_single(void) {
  printf("single file\n");
  char *dir = mkdir_tmp("single");
  write_text(dir, "config.json", unet_config);
  dc_st_out t[] = {{"conv_in.weight", {DT_F32, 4, {2, 1, 3, 3}}, zeros},
                   {"conv_in.bias", {DT_F32, 1, {2}}, zeros}};
  write_st(dir, "diffusion_pytorch_model.safetensors", t, 2);
  char *dotted = dc_asprintf("%s/.", dir), *want = abs_path(dir, "");
  dc_folder f;
  CHECK_OK(dc_folder_open(dotted, NULL, &f));
  CHECK(f.dir && strcmp(f.dir, want) == 0 && f.dir[0] == '/');
  CHECK(f.class_name && strcmp(f.class_name, "UNet2DConditionModel") == 0);
  CHECK(f.nshards == 1 && f.nentries == 2);
  CHECK(f.nentries == 2 && strcmp(f.entries[0].name, "conv_in.bias") == 0);
  const struct dc_folder_entry *e = dc_folder_find(&f, "conv_in.weight");
  CHECK(e && e->shard == 0 && e->tensor->rank == 4 && e->tensor->dims[0] == 2);
  CHECK(dc_folder_find(&f, "conv_out.weight") == NULL);
  char *shard = abs_path(dir, "/diffusion_pytorch_model.safetensors");
  CHECK(f.nshards == 1 && strcmp(f.shards[0].file.path, shard) == 0);
  int64_t in_ch;
  CHECK_OK(dc_json_int(&f.config, "in_channels", 0, &in_ch));
  CHECK(in_ch == 4);
  dc_folder_close(&f);
  /* a component for a folder that is not a pipeline */
  dc_folder_options opt = {.component = "unet"};
  check_open_err(
      dir, &opt,
      ": --component unet given, but this is not a pipeline folder (no model_index.json)");
  dc_free(shard);
  dc_free(dotted);
  dc_free(want);
  free(dir);
}

static void test_variant(void) {
  printf("variants\n");
  char *dir = mkdir_tmp("variant");
  write_text(dir, "config.json", unet_config);
  dc_st_out t[] = {{"conv_in.weight", {DT_F16, 4, {2, 1, 3, 3}}, hzeros}};
  write_st(dir, "diffusion_pytorch_model.fp16.safetensors", t, 1);
  dc_folder f;
  dc_folder_options fp16 = {.variant = "fp16"}, bf16 = {.variant = "bf16"};
  CHECK_OK(dc_folder_open(dir, &fp16, &f));
  CHECK(f.nentries == 1 && f.entries[0].tensor->dtype == DT_F16);
  dc_folder_close(&f);
  check_open_err(dir, NULL,
                 ": no weights: expected diffusion_pytorch_model.safetensors or "
                 "diffusion_pytorch_model.safetensors.index.json (found "
                 "diffusion_pytorch_model.fp16.safetensors: pass --variant fp16)");
  check_open_err(dir, &bf16,
                 ": no weights for variant \"bf16\": expected "
                 "diffusion_pytorch_model.bf16.safetensors or "
                 "diffusion_pytorch_model.safetensors.index.bf16.json (found "
                 "diffusion_pytorch_model.fp16.safetensors: pass --variant fp16)");
  /* the plain file, a variant index and a .bin: all hinted, sorted */
  write_st(dir, "diffusion_pytorch_model.safetensors", t, 1);
  write_text(dir, "diffusion_pytorch_model.safetensors.index.bf16.json", "{}");
  write_text(dir, "diffusion_pytorch_model.ema.bin", "x");
  dc_folder_options ema = {.variant = "ema"};
  check_open_frag(dir, &ema,
                  "(found diffusion_pytorch_model.ema.bin: diffc reads only .safetensors; convert "
                  "it; found diffusion_pytorch_model.fp16.safetensors: pass --variant fp16; found "
                  "diffusion_pytorch_model.safetensors.index.bf16.json: pass --variant bf16; found "
                  "diffusion_pytorch_model.safetensors: drop --variant)");
  dc_folder_options bad = {.variant = "../x"};
  check_open_frag(dir, &bad, "--variant \"../x\" must be a plain name such as fp16");
  free(dir);
}

/* A sharded folder: a, b in shard 1; c in shard 2. */
static char *make_sharded(const char *name, const char *index_name, const char *s1,
                          const char *s2) {
  char *dir = mkdir_tmp(name);
  write_text(dir, "config.json", unet_config);
  dc_st_out t1[] = {{"a.weight", {DT_F32, 1, {4}}, zeros}, {"b.weight", {DT_BF16, 1, {2}}, hzeros}};
  dc_st_out t2[] = {{"c.weight", {DT_F32, 2, {2, 2}}, zeros}};
  write_st(dir, s1, t1, 2);
  write_st(dir, s2, t2, 1);
  char *idx = dc_asprintf(
      "{\"metadata\": {\"total_size\": 36}, \"weight_map\": {\"a.weight\": \"%s\", "
      "\"b.weight\": \"%s\", \"c.weight\": \"%s\"}}",
      s1, s1, s2);
  write_text(dir, index_name, idx);
  dc_free(idx);
  return dir;
}

#define S1 "diffusion_pytorch_model-00001-of-00002.safetensors"
#define S2 "diffusion_pytorch_model-00002-of-00002.safetensors"
#define IDX "diffusion_pytorch_model.safetensors.index.json"

static void test_sharded(void) {
  printf("sharded index\n");
  char *dir = make_sharded("sharded", IDX, S1, S2);
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, NULL, &f));
  CHECK(f.nshards == 2 && f.nentries == 3);
  if (f.nentries == 3) {
    CHECK(strcmp(f.entries[0].name, "a.weight") == 0 && f.entries[0].shard == 0);
    CHECK(strcmp(f.entries[2].name, "c.weight") == 0 && f.entries[2].shard == 1);
    CHECK(strstr(f.shards[f.entries[2].shard].file.path, S2) != NULL);
    CHECK(dc_folder_find(&f, "b.weight")->tensor->dtype == DT_BF16);
  }
  dc_folder_close(&f);

  char *idx = dc_asprintf("/" IDX ": ");
  char *want;
  struct {
    const char *weight_map, *msg;
  } bad[] = {
      {"{\"a.weight\": \"" S1 "\", \"b.weight\": \"" S1 "\", \"c.weight\": \"" S2
       "\", \"conv_out.weight\": \"x-00003-of-00003.safetensors\"}",
       "\"weight_map\" names shard \"x-00003-of-00003.safetensors\" (for \"conv_out.weight\") "
       "but "},
      {"{\"a.weight\": \"" S1 "\", \"b.weight\": \"" S1 "\", \"c.weight\": \"" S1 "\"}",
       "\"weight_map\" puts \"c.weight\" in shard \"" S1
       "\" but that shard has no tensor \"c.weight\""},
      {"{\"a.weight\": \"" S1 "\", \"b.weight\": \"" S2 "\", \"c.weight\": \"" S2 "\"}",
       "\"weight_map\" puts \"b.weight\" in shard \"" S2 "\" but it is in shard \"" S1 "\""},
      {"{\"a.weight\": \"" S1 "\", \"c.weight\": \"" S2 "\"}",
       "tensor \"b.weight\" in shard \"" S1 "\" is not in \"weight_map\""},
      {"{\"a.weight\": \"" S1 "\", \"b.weight\": \"" S1 "\", \"c.weight\": \"../" S2 "\"}",
       "\"weight_map\" names shard \"../" S2
       "\" (for \"c.weight\"), which is not a plain file name in the folder"},
      {"{\"a.weight\": 1}",
       "\"weight_map\": \"a.weight\" must map to a shard file name, got a number"},
      {"[]", "\"weight_map\" must be an object mapping tensor names to shard files, got a list"},
      {"{}", "\"weight_map\" is empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char *text = dc_asprintf("{\"weight_map\": %s}", bad[i].weight_map);
    write_text(dir, IDX, text);
    want = dc_asprintf("%s%s", idx, bad[i].msg);
    check_open_err(dir, NULL, want);
    dc_free(want);
    dc_free(text);
  }
  write_text(dir, IDX, "{\"metadata\": {}}");
  check_open_err(dir, NULL, "/" IDX ": no \"weight_map\" (is this a safetensors index?)");
  /* the missing shard's message names its full path */
  write_text(dir, IDX, "{\"weight_map\": {\"c.weight\": \"gone.safetensors\"}}");
  want = abs_path(dir, "/gone.safetensors does not exist");
  CHECK_ERR(dc_folder_open(dir, NULL, &f), want);
  dc_free(want);
  /* one tensor in two shards */
  const char *good_map = "{\"weight_map\": {\"a.weight\": \"" S1 "\", \"b.weight\": \"" S1
                         "\", \"c.weight\": \"" S2 "\"}}";
  dc_st_out dup[] = {{"a.weight", {DT_F32, 1, {4}}, zeros},
                     {"c.weight", {DT_F32, 2, {2, 2}}, zeros}};
  write_st(dir, S2, dup, 2);
  write_text(dir, IDX, good_map);
  check_open_err(dir, NULL,
                 ": tensor \"a.weight\" is in both shard \"" S1 "\" and shard \"" S2 "\"");
  /* a shard that is not a valid safetensors file: its own message */
  write_text(dir, S2, "junk");
  char *s2 = abs_path(dir, "/" S2 ": file is 4 bytes");
  CHECK_ERR(dc_folder_open(dir, NULL, &f), s2);
  dc_free(s2);
  dc_free(idx);
  free(dir);

  /* a variant's index and shards */
  dir = make_sharded("sharded_fp16", "diffusion_pytorch_model.safetensors.index.fp16.json",
                     "diffusion_pytorch_model.fp16-00001-of-00002.safetensors",
                     "diffusion_pytorch_model.fp16-00002-of-00002.safetensors");
  dc_folder_options fp16 = {.variant = "fp16"};
  CHECK_OK(dc_folder_open(dir, &fp16, &f));
  CHECK(f.nshards == 2 && f.nentries == 3);
  dc_folder_close(&f);
  check_open_frag(
      dir, NULL,
      "(found diffusion_pytorch_model.safetensors.index.fp16.json: pass --variant fp16)");
  free(dir);
}

static void test_pipeline(void) {
  printf("pipeline folders\n");
  char *dir = mkdir_tmp("pipe");
  write_text(dir, "model_index.json",
             "{\"_class_name\": \"StableDiffusionPipeline\", \"_diffusers_version\": \"0.30.0\",\n"
             " \"unet\": [\"diffusers\", \"UNet2DConditionModel\"],\n"
             " \"vae\": [\"diffusers\", \"AutoencoderKL\"],\n"
             " \"text_encoder\": [\"transformers\", \"CLIPTextModel\"],\n"
             " \"text_encoder_3\": [\"transformers\", \"T5ForConditionalGeneration\"],\n"
             " \"safety_checker\": [null, null], \"feature_extractor\": [\"transformers\", null],\n"
             " \"requires_safety_checker\": false}\n");
  char *unet = dc_path_join(dir, "unet");
  mkdir(unet, 0755);
  write_text(unet, "config.json", unet_config);
  dc_st_out t[] = {{"conv_in.weight", {DT_F32, 1, {2}}, zeros}};
  write_st(unet, "diffusion_pytorch_model.safetensors", t, 1);

  check_open_err(dir, NULL,
                 " is a pipeline folder (model_index.json); choose a component with --component: "
                 "text_encoder, unet, vae; not supported yet: text_encoder_3 (transformers T5ForConditionalGeneration)");
  dc_folder_options opt = {.component = "foo"};
  check_open_err(dir, &opt,
                 "/model_index.json: no component \"foo\" (components: text_encoder, unet, vae; not supported yet: "
                 "text_encoder_3 (transformers T5ForConditionalGeneration))");
  opt.component = "safety_checker";
  check_open_err(dir, &opt, "/model_index.json: no component \"safety_checker\"");
  opt.component = "_class_name";
  check_open_err(dir, &opt, "/model_index.json: no component \"_class_name\"");
  opt.component = "vae";
  check_open_err(dir, &opt, "/vae: no such directory");
  opt.component = "unet";
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, &opt, &f));
  char *want = abs_path(unet, "");
  CHECK(f.dir && strcmp(f.dir, want) == 0);
  CHECK(f.nentries == 1 && strcmp(f.class_name, "UNet2DConditionModel") == 0);
  dc_folder_close(&f);
  dc_free(want);
  dc_free(unet);
  free(dir);
}

/* transformers names its weights model.safetensors (a variant
 * model.fp16.safetensors, shards through model.safetensors.index.json),
 * and its pickles pytorch_model.bin. */
static void test_transformers_names(void) {
  printf("transformers weight names\n");
  static const char clip_config[] = "{\"architectures\": [\"CLIPTextModel\"], \"model_type\": \"clip_text_model\"}";
  char *dir = mkdir_tmp("clip");
  write_text(dir, "config.json", clip_config);
  write_text(dir, "pytorch_model.bin", "pickle");
  check_open_err(dir, NULL,
                 ": no weights: expected model.safetensors or model.safetensors.index.json (found pytorch_model.bin: "
                 "diffc reads only .safetensors; convert it)");
  dc_st_out t[] = {{"embeddings.token_embedding.weight", {DT_F16, 2, {4, 2}}, hzeros}};
  write_st(dir, "model.fp16.safetensors", t, 1);
  check_open_frag(dir, NULL, "(found model.fp16.safetensors: pass --variant fp16; found pytorch_model.bin:");
  dc_folder_options opt = {.variant = "fp16"};
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, &opt, &f));
  CHECK(f.nentries == 1 && f.entries[0].tensor->dtype == DT_F16 && strcmp(f.class_name, "CLIPTextModel") == 0);
  dc_folder_close(&f);
  write_text(dir, "model.safetensors.index.json",
             "{\"metadata\": {}, \"weight_map\": {\"embeddings.token_embedding.weight\": \"model-00001-of-00001.safetensors\"}}");
  write_st(dir, "model-00001-of-00001.safetensors", t, 1);
  CHECK_OK(dc_folder_open(dir, NULL, &f));
  CHECK(f.nshards == 1 && f.nentries == 1 && strstr(f.shards[0].file.path, "model-00001-of-00001.safetensors"));
  dc_folder_close(&f);
  free(dir);
}

static void test_bad_folders(void) {
  printf("missing and malformed folders\n");
  dc_folder f;
  char *nope = tu_path("nope");
  char want[PATH_MAX + 64];
  snprintf(want, sizeof want, "%s: no such directory", nope);
  CHECK_ERR(dc_folder_open(nope, NULL, &f), want);
  free(nope);

  char *dir = mkdir_tmp("noconfig");
  dc_st_out t[] = {{"x", {DT_F32, 1, {2}}, zeros}};
  write_st(dir, "diffusion_pytorch_model.safetensors", t, 1);
  check_open_err(dir, NULL, ": no config.json (is this a diffusers model folder?)");
  char *file = dc_path_join(dir, "diffusion_pytorch_model.safetensors");
  snprintf(want, sizeof want, "%s: not a directory", file);
  CHECK_ERR(dc_folder_open(file, NULL, &f), want);
  dc_free(file);

  write_text(dir, "config.json", "{\n  \"_class_name\": UNet\n}");
  check_open_err(dir, NULL, "/config.json:2:18: not valid JSON (unexpected character 'U')");
  write_text(dir, "config.json", "{\"in_channels\": 4}");
  check_open_err(dir, NULL, "/config.json: no \"_class_name\" (is this a diffusers model config?)");
  write_text(dir, "config.json", "{\"_class_name\": 4}");
  check_open_err(dir, NULL, "/config.json: \"_class_name\" must be a string, got 4");
  free(dir);

  dir = mkdir_tmp("noweights");
  write_text(dir, "config.json", unet_config);
  check_open_err(dir, NULL,
                 ": no weights: expected diffusion_pytorch_model.safetensors or "
                 "diffusion_pytorch_model.safetensors.index.json");
  char *full = abs_path(dir,
                        ": no weights: expected diffusion_pytorch_model.safetensors or "
                        "diffusion_pytorch_model.safetensors.index.json");
  dc_status *st = dc_folder_open(dir, NULL, &f);
  CHECK(st && strcmp(dc_status_message(st), full) == 0); /* no hint when nothing is there */
  dc_status_free(st);
  dc_free(full);
  free(dir);
}

/* ---- dc_weights ---------------------------------------------------------- */

static void test_weights(void) {
  printf("binding weights\n");
  char *dir = mkdir_tmp("weights");
  write_text(dir, "config.json", unet_config);
  uint8_t one = 7;
  dc_st_out t[] = {
      {"a8", {DT_F8_E4M3, 1, {1}}, &one}, /* makes b32 unaligned */
      {"b32", {DT_F32, 1, {2}}, zeros},
      {"c8", {DT_F8_E5M2, 1, {3}}, zeros}, /* realigns what follows */
      {"conv_in.weight", {DT_F32, 4, {2, 1, 3, 3}}, zeros},
      {"down.0.norm.weight", {DT_BF16, 1, {4}}, hzeros},
      {"u1", {DT_F32, 1, {1}}, zeros},
      {"u2", {DT_F32, 1, {1}}, zeros},
      {"u3", {DT_F32, 1, {1}}, zeros},
      {"u4", {DT_F32, 1, {1}}, zeros},
  };
  write_st(dir, "diffusion_pytorch_model.safetensors", t, 9);
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, NULL, &f));
  dc_module *m = dc_module_create();
  dc_weights w;
  CHECK_OK(dc_weights_init(&w, m, &f));

  int32_t id, id2;
  int64_t conv[4] = {2, 1, 3, 3}, four[1] = {4}, two[1] = {2};
  CHECK_OK(dc_weights_get(&w, "conv_in.weight", 4, conv, &id));
  CHECK(id == 0 && m->nnodes == 1 && m->nweights == 1 && m->nfiles == 1);
  const dc_node *n = &m->nodes[0];
  CHECK(n->op == OP_WEIGHT && n->ref == 0 && n->layout == LAYOUT_ROWMAJOR);
  CHECK(n->type.dtype == DT_F32 && n->type.rank == 4 && n->type.dims[0] == 2);
  CHECK(n->scope && strcmp(n->scope, "conv_in") == 0);
  const dc_st_tensor *ct = dc_folder_find(&f, "conv_in.weight")->tensor;
  CHECK(m->weights[0].offset == ct->offset && m->weights[0].bytes == 72);
  CHECK(strcmp(m->weights[0].name, "conv_in.weight") == 0 && m->weights[0].file == 0);
  CHECK(strcmp(m->files[0].path, f.shards[0].file.path) == 0);
  CHECK(m->files[0].header_hash == f.shards[0].header_hash);
  CHECK(m->files[0].file_size == f.shards[0].file.size);
  CHECK_OK(dc_weights_get(&w, "conv_in.weight", 4, conv, &id2));
  CHECK(id2 == id && m->nnodes == 1 && m->nweights == 1);

  /* bf16: a weight node then a cast to f32 of the same shape */
  CHECK_OK(dc_weights_get(&w, "down.0.norm.weight", 1, four, &id));
  CHECK(id == 2 && m->nnodes == 3 && m->nfiles == 1);
  CHECK(m->nodes[1].op == OP_WEIGHT && m->nodes[1].type.dtype == DT_BF16);
  n = &m->nodes[2];
  CHECK(n->op == OP_CAST && n->ninputs == 1 && n->inputs[0] == 1);
  CHECK(n->type.dtype == DT_F32 && n->type.rank == 1 && n->type.dims[0] == 4);
  CHECK(n->scope && strcmp(n->scope, "down.0.norm") == 0);
  CHECK_OK(dc_weights_get(&w, "down.0.norm.weight", 1, four, &id2));
  CHECK(id2 == id && m->nnodes == 3);

  /* f32 at an offset that is not a multiple of 4: cast too */
  CHECK(dc_folder_find(&f, "b32")->tensor->offset % 4 != 0);
  CHECK_OK(dc_weights_get(&w, "b32", 1, two, &id));
  CHECK(id == 4 && m->nodes[4].op == OP_CAST && m->nodes[3].scope == NULL);

  char *want = abs_path(
      dir, ": weight \"conv_in.weight\" has shape [2,1,3,3] but the config implies [16,1,3,3]");
  int64_t conv16[4] = {16, 1, 3, 3}, c4[4] = {16, 4, 3, 3};
  CHECK_ERR(dc_weights_get(&w, "conv_in.weight", 4, conv16, &id), want);
  dc_free(want);
  want = abs_path(dir, ": weight \"b32\" has shape [2] but the config implies [2,1]");
  int64_t two1[2] = {2, 1};
  CHECK_ERR(dc_weights_get(&w, "b32", 2, two1, &id), want);
  dc_free(want);
  want = abs_path(dir, ": weight \"conv_out.weight\" is missing (the config implies [16,4,3,3])");
  CHECK_ERR(dc_weights_get(&w, "conv_out.weight", 4, c4, &id), want);
  dc_free(want);

  want = abs_path(dir,
                  ": 6 weights in the checkpoint are not used by the UNet2DConditionModel "
                  "graph: \"a8\", \"c8\", \"u1\", \"u2\", \"u3\" and 1 more (a config "
                  "that does not match the weights?)");
  CHECK_ERR(dc_weights_check_all_used(&w), want);
  dc_free(want);
  int64_t one_dim[1] = {1};
  CHECK_OK(dc_weights_get(&w, "u1", 1, one_dim, &id));
  CHECK_OK(dc_weights_get(&w, "u2", 1, one_dim, &id));
  CHECK_OK(dc_weights_get(&w, "u3", 1, one_dim, &id));
  CHECK_ERR(dc_weights_check_all_used(&w),
            "3 weights in the checkpoint are not used by the UNet2DConditionModel graph: \"a8\", "
            "\"c8\", \"u4\" (");
  CHECK_OK(dc_weights_get(&w, "u4", 1, one_dim, &id));
  CHECK_OK(dc_weights_get(&w, "a8", 1, one_dim, &id));
  CHECK(m->nodes[id].op == OP_CAST);
  CHECK_ERR(dc_weights_check_all_used(&w),
            "1 weight in the checkpoint is not used by the UNet2DConditionModel graph: \"c8\" (");
  int64_t three[1] = {3};
  CHECK_OK(dc_weights_get(&w, "c8", 1, three, &id));
  CHECK_OK(dc_weights_check_all_used(&w));
  dc_weights_deinit(&w);
  dc_module_destroy(m);
  dc_folder_close(&f);
  free(dir);
}

static void test_weights_shards(void) {
  printf("binding weights from two shards\n");
  char *dir = make_sharded("wshards", IDX, S1, S2);
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, NULL, &f));
  dc_module *m = dc_module_create();
  dc_weights w;
  CHECK_OK(dc_weights_init(&w, m, &f));
  int32_t id;
  int64_t four[1] = {4}, two[1] = {2}, c[2] = {2, 2};
  CHECK_OK(dc_weights_get(&w, "c.weight", 2, c, &id));
  CHECK_OK(dc_weights_get(&w, "a.weight", 1, four, &id));
  CHECK(m->nfiles == 2 && m->weights[0].file == 0 && m->weights[1].file == 1);
  CHECK(strstr(m->files[0].path, S2) && strstr(m->files[1].path, S1));
  CHECK_ERR(
      dc_weights_check_all_used(&w),
      "1 weight in the checkpoint is not used by the UNet2DConditionModel graph: \"b.weight\"");
  CHECK_OK(dc_weights_get(&w, "b.weight", 1, two, &id));
  CHECK(m->nfiles == 2 && m->weights[2].file == 1);
  CHECK_OK(dc_weights_check_all_used(&w));
  dc_weights_deinit(&w);
  dc_module_destroy(m);
  dc_folder_close(&f);
  free(dir);
}

/* Every allocation in dc_folder_open may fail: each failure is a clean
 * out-of-memory error (valgrind checks that nothing leaks). */
static void test_alloc_failures(void) {
  printf("allocation failures while opening a sharded folder\n");
  char *dir = make_sharded("oom", IDX, S1, S2);
  int nomem = 0, ok = 0;
  for (long k = 0; k < 400 && !ok; k++) {
    dc_folder f;
    dc_alloc_fail_after(k);
    dc_status *st = dc_folder_open(dir, NULL, &f);
    dc_alloc_fail_after(-1);
    if (!st) {
      ok = 1;
      dc_folder_close(&f);
    } else {
      if (dc_status_code_of(st) != DC_ERR_NOMEM) printf("  k=%ld: %s\n", k, dc_status_message(st));
      nomem += dc_status_code_of(st) == DC_ERR_NOMEM;
      dc_status_free(st);
    }
  }
  CHECK(ok && nomem > 10);

  printf("allocation failures while binding weights\n");
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, NULL, &f));
  int64_t four[1] = {4}, two[1] = {2};
  nomem = ok = 0;
  for (long k = 0; k < 100 && !ok; k++) {
    dc_module *m = dc_module_create();
    dc_weights w;
    int32_t id;
    dc_alloc_fail_after(k);
    dc_status *st = dc_weights_init(&w, m, &f);
    if (!st) st = dc_weights_get(&w, "a.weight", 1, four, &id);
    if (!st) st = dc_weights_get(&w, "b.weight", 1, two, &id);
    dc_alloc_fail_after(-1);
    if (!st) ok = 1;
    else nomem += dc_status_code_of(st) == DC_ERR_NOMEM, dc_status_free(st);
    if (w.used) dc_weights_deinit(&w);
    dc_module_destroy(m);
  }
  CHECK(ok && nomem >= 3);
  dc_folder_close(&f);
  free(dir);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_single();
  test_variant();
  test_sharded();
  test_pipeline();
  test_transformers_names();
  test_bad_folders();
  test_weights();
  test_weights_shards();
  test_alloc_failures();
  return tu_finish();
}
