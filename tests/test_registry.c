/* test_registry.c — the class registry (frontend/registry.h): every
 * descriptor is well formed; its schema's defaults are the ones its builder
 * uses (a config with only "_class_name" and one with every default written
 * out imply the same weights); the one config policy (bookkeeping keys
 * accepted, an unknown key refused naming the nearest, null only where
 * taken) holds for every class; transformers configs are identified by
 * "architectures"; the entries' inputs and outputs are what the builders
 * make; and every built module points to its class's facts. */
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "frontend/registry.h"
#include "testutil.h"

static int json_has_type(const cJSON *v, dc_key_type t) {
  switch (t) {
    case DC_KEY_INT: return cJSON_IsNumber(v) && v->valuedouble == (double)(int64_t)v->valuedouble;
    case DC_KEY_NUM: return cJSON_IsNumber(v);
    case DC_KEY_BOOL: return cJSON_IsBool(v);
    case DC_KEY_STR: return cJSON_IsString(v);
    case DC_KEY_INTS: return cJSON_IsNumber(v) || cJSON_IsArray(v);
    case DC_KEY_STRS: return cJSON_IsArray(v);
    case DC_KEY_BOOLS: return cJSON_IsBool(v) || cJSON_IsArray(v);
    case DC_KEY_ANY: return 1;
  }
  return 0;
}

static void test_descriptors(void) {
  int n;
  const dc_class_desc *const *cs = dc_classes(&n);
  CHECK(n >= 2);
  for (int i = 0; i < n; i++) {
    const dc_class_desc *c = cs[i];
    CHECK(c->name && c->name[0] && c->build && c->keys && c->entries);
    CHECK(c->default_entry && dc_entry_find(c, c->default_entry));
    CHECK(dc_class_find(c->library, c->name) == c);
    CHECK((c->library == DC_LIB_TRANSFORMERS) == (c->model_type != NULL));
    for (const dc_config_key *k = c->keys; k->key; k++) {
      cJSON *v = cJSON_Parse(k->def);
      /* a null default is diffusers' None, which the class must then take */
      int ok = v && (cJSON_IsNull(v) ? k->nullable : json_has_type(v, k->type));
      if (!ok) fprintf(stderr, "%s: key %s: default %s is not a %d\n", c->name, k->key, k->def, (int)k->type);
      CHECK(ok);
      cJSON_Delete(v);
      CHECK(dc_config_key_find(c, k->key) == k); /* no key twice */
    }
    for (const dc_entry_desc *e = c->entries; e->name; e++) CHECK(e->inputs[0].name && e->outputs[0].name);
  }
  dc_buf b;
  dc_buf_init(&b);
  dc_classes_describe(&b);
  dc_buf_u8(&b, 0);
  for (int i = 0; i < n; i++) CHECK(!b.failed && strstr((const char *)b.data, cs[i]->name));
  dc_buf_deinit(&b);
}

/* Writes {"_class_name": class, <extra>} (a transformers class: its
 * "architectures" and "model_type") (and, with defaults, every schema key
 * that has a non-null default) to dir/config.json; returns the path. */
static char *write_config(const dc_class_desc *c, const char *dir, const char *extra, int defaults) {
  dc_buf b;
  dc_buf_init(&b);
  if (c->library == DC_LIB_TRANSFORMERS)
    dc_buf_printf(&b, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\"%s", c->name, c->model_type, extra);
  else dc_buf_printf(&b, "{\"_class_name\": \"%s\"%s", c->name, extra);
  for (const dc_config_key *k = c->keys; defaults && k->key; k++)
    if (strcmp(k->def, "null") != 0 && !strstr(extra, k->key)) dc_buf_printf(&b, ", \"%s\": %s", k->key, k->def);
  dc_buf_printf(&b, "}\n");
  char sub[256];
  snprintf(sub, sizeof sub, "%s/%s", tu_tmpdir(), dir);
  CHECK(mkdir(sub, 0755) == 0);
  char *path = dc_path_join(sub, "config.json");
  tu_write_file(path, b.data, b.len);
  dc_buf_deinit(&b);
  return path;
}

static int same_weights(const dc_weight_list *a, const dc_weight_list *b) {
  if (a->n != b->n) return 0;
  for (int i = 0; i < a->n; i++)
    if (strcmp(a->items[i].name, b->items[i].name) || a->items[i].rank != b->items[i].rank ||
        memcmp(a->items[i].dims, b->items[i].dims, sizeof(int64_t) * (size_t)a->items[i].rank))
      return 0;
  return 1;
}

/* The schema's defaults are the builder's: written out or left to the
 * builder, the same weights (and so the same channels, layers and blocks). */
static void test_defaults(void) {
  int n;
  const dc_class_desc *const *cs = dc_classes(&n);
  for (int i = 0; i < n; i++) {
    const char *extra = strcmp(cs[i]->name, "UNet2DConditionModel") ? "" : ", \"sample_size\": 8";
    char name[128];
    snprintf(name, sizeof name, "%s_min", cs[i]->name);
    char *minimal = write_config(cs[i], name, extra, 0);
    snprintf(name, sizeof name, "%s_all", cs[i]->name);
    char *full = write_config(cs[i], name, extra, 1);
    dc_weight_list a, b;
    CHECK_OK(dc_frontend_weight_list(minimal, NULL, &a));
    CHECK_OK(dc_frontend_weight_list(full, NULL, &b));
    CHECK(a.n > 0 && same_weights(&a, &b));
    dc_weight_list_deinit(&a);
    dc_weight_list_deinit(&b);
    dc_free(minimal);
    dc_free(full);
  }
}

static dc_status *check_text(const dc_class_desc *c, const char *text) {
  char *path = tu_path("policy.json");
  tu_write_file(path, text, strlen(text));
  dc_json_doc d;
  dc_status *st = dc_json_load(path, &d);
  if (!st) {
    st = dc_config_check(c, &d);
    dc_json_free(&d);
  }
  free(path);
  return st;
}

static void test_policy(void) {
  const dc_class_desc *unet = dc_class_find(DC_LIB_DIFFUSERS, "UNet2DConditionModel");
  const dc_class_desc *vae = dc_class_find(DC_LIB_DIFFUSERS, "AutoencoderKL");
  CHECK(unet && vae);
  if (!unet || !vae) return;
  /* what diffusers writes and ignores: underscore keys, EMAModel's state */
  CHECK_OK(check_text(vae, "{\"_class_name\": \"AutoencoderKL\", \"_diffusers_version\": \"0.30.0\", "
                           "\"_name_or_path\": \"x/vae\", \"decay\": 0.9999, \"use_ema_warmup\": false, "
                           "\"shift_factor\": null, \"latents_mean\": null}"));
  CHECK_ERR(check_text(vae, "{\"block_out_channel\": [4]}"),
            "\"block_out_channel\" is not an argument of AutoencoderKL that diffc knows (the nearest it knows is "
            "\"block_out_channels\")");
  CHECK_ERR(check_text(unet, "{\"in_channel\": 4}"), "(the nearest it knows is \"in_channels\")");
  CHECK_ERR(check_text(vae, "{\"sample_size\": null}"),
            "\"sample_size\" is null, which diffc does not support (give a value, or leave the key out for "
            "diffusers' default, 32)");
  CHECK_OK(check_text(unet, "{\"mid_block_type\": null, \"sample_size\": null}"));
}

/* The text encoder configs of SD1.5 (transformers 4.22) and SDXL's second
 * (4.32), as their repositories ship them, and what transformers 5 writes
 * (CLIPTextConfig().to_dict() of 5.24): every key is the class's or
 * PretrainedConfig's bookkeeping. */
static void test_clip_configs(void) {
  const dc_class_desc *clip = dc_class_find(DC_LIB_TRANSFORMERS, "CLIPTextModel");
  const dc_class_desc *proj = dc_class_find(DC_LIB_TRANSFORMERS, "CLIPTextModelWithProjection");
  CHECK(clip && proj);
  if (!clip || !proj) return;
  CHECK_OK(check_text(clip, "{\"_name_or_path\": \"openai/clip-vit-large-patch14\", \"architectures\": [\"CLIPTextModel\"], "
                            "\"attention_dropout\": 0.0, \"bos_token_id\": 0, \"dropout\": 0.0, \"eos_token_id\": 2, "
                            "\"hidden_act\": \"quick_gelu\", \"hidden_size\": 768, \"initializer_factor\": 1.0, "
                            "\"initializer_range\": 0.02, \"intermediate_size\": 3072, \"layer_norm_eps\": 1e-05, "
                            "\"max_position_embeddings\": 77, \"model_type\": \"clip_text_model\", \"num_attention_heads\": 12, "
                            "\"num_hidden_layers\": 12, \"pad_token_id\": 1, \"projection_dim\": 768, \"torch_dtype\": \"float32\", "
                            "\"transformers_version\": \"4.22.0.dev0\", \"vocab_size\": 49408}"));
  CHECK_OK(check_text(proj, "{\"architectures\": [\"CLIPTextModelWithProjection\"], \"attention_dropout\": 0.0, "
                            "\"bos_token_id\": 0, \"dropout\": 0.0, \"eos_token_id\": 2, \"hidden_act\": \"gelu\", "
                            "\"hidden_size\": 1280, \"initializer_factor\": 1.0, \"initializer_range\": 0.02, "
                            "\"intermediate_size\": 5120, \"layer_norm_eps\": 1e-05, \"max_position_embeddings\": 77, "
                            "\"model_type\": \"clip_text_model\", \"num_attention_heads\": 20, \"num_hidden_layers\": 32, "
                            "\"pad_token_id\": 1, \"projection_dim\": 1280, \"torch_dtype\": \"float16\", "
                            "\"transformers_version\": \"4.32.0.dev0\", \"vocab_size\": 49408}"));
  CHECK_OK(check_text(clip, "{\"transformers_version\": \"5.24.0\", \"architectures\": [\"CLIPTextModel\"], "
                            "\"output_hidden_states\": false, \"return_dict\": true, \"dtype\": \"float32\", "
                            "\"chunk_size_feed_forward\": 0, \"is_encoder_decoder\": false, "
                            "\"id2label\": {\"0\": \"LABEL_0\", \"1\": \"LABEL_1\"}, \"label2id\": {\"LABEL_0\": 0, \"LABEL_1\": 1}, "
                            "\"problem_type\": null, \"vocab_size\": 49408, \"hidden_size\": 512, \"intermediate_size\": 2048, "
                            "\"projection_dim\": 512, \"num_hidden_layers\": 12, \"num_attention_heads\": 8, "
                            "\"max_position_embeddings\": 77, \"hidden_act\": \"quick_gelu\", \"layer_norm_eps\": 1e-05, "
                            "\"attention_dropout\": 0.0, \"initializer_range\": 0.02, \"initializer_factor\": 1.0, "
                            "\"pad_token_id\": 1, \"bos_token_id\": 49406, \"eos_token_id\": 49407, \"_name_or_path\": \"\", "
                            "\"model_type\": \"clip_text_model\", \"output_attentions\": false}"));
  CHECK_ERR(check_text(clip, "{\"hiden_act\": \"gelu\"}"), "(the nearest it knows is \"hidden_act\")");
  CHECK_ERR(check_text(clip, "{\"eos_token_id\": null}"), "\"eos_token_id\" is null, which diffc does not support");
  CHECK_OK(check_text(clip, "{\"projection_dim\": null, \"pad_token_id\": null}"));
}

/* transformers configs carry "architectures" and "model_type", no _class_name. */
static void test_transformers_identity(void) {
  char *path = tu_path("clip.json");
  const char *text = "{\"architectures\": [\"CLIPTextModel\"], \"model_type\": \"clip_text_model\"}";
  tu_write_file(path, text, strlen(text));
  dc_json_doc d;
  CHECK_OK(dc_json_load(path, &d));
  const char *name = NULL;
  const dc_class_desc *c = (const dc_class_desc *)1;
  CHECK_OK(dc_class_of_config(&d, &name, &c));
  CHECK(name && !strcmp(name, "CLIPTextModel") && c == dc_class_find(DC_LIB_TRANSFORMERS, "CLIPTextModel"));
  dc_json_free(&d);
  text = "{\"architectures\": [\"T5EncoderModel\"], \"model_type\": \"t5\"}";
  tu_write_file(path, text, strlen(text));
  CHECK_OK(dc_json_load(path, &d));
  CHECK_OK(dc_class_of_config(&d, &name, &c));
  CHECK(name && !strcmp(name, "T5EncoderModel") && c == NULL); /* named; no descriptor */
  dc_json_free(&d);
  text = "{\"in_channels\": 4}";
  tu_write_file(path, text, strlen(text));
  CHECK_OK(dc_json_load(path, &d));
  CHECK_ERR(dc_class_of_config(&d, &name, &c), "no \"_class_name\"");
  dc_json_free(&d);
  free(path);
}

/* Builds each entry of a fixture model and compares with the descriptor. */
static void check_entries(const char *fixture) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/fixtures/%s/model", tu_source_dir, fixture);
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, NULL, &f));
  const dc_class_desc *c = f.desc;
  CHECK(c != NULL);
  for (const dc_entry_desc *e = c ? c->entries : NULL; e && e->name; e++) {
    dc_build_options o = {.entry = e->name, .clip_hidden_index = -1};
    dc_module *m = NULL;
    CHECK_OK(dc_frontend_build(&f, &o, &m));
    if (!m) continue;
    CHECK(m->facts == &c->facts);
    for (int i = 0; i < m->ninputs; i++) CHECK(dc_entry_io_find(e->inputs, m->inputs[i].name) != NULL);
    for (const dc_entry_io *io = e->inputs; io->name; io++) {
      int found = 0;
      for (int i = 0; i < m->ninputs; i++) found |= !strcmp(m->inputs[i].name, io->name);
      CHECK(found || io->when); /* an input without a condition is always there */
    }
    /* every output without a condition is there (a condition: a build option) */
    int nout = 0;
    for (const dc_entry_io *io = e->outputs; io->name; io++) nout += !io->when;
    CHECK(m->noutputs == nout);
    for (int i = 0; i < m->noutputs; i++) CHECK(dc_entry_io_find(e->outputs, m->outputs[i].name) != NULL);
    dc_module_destroy(m);
  }
  dc_folder_close(&f);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_descriptors();
  test_defaults();
  test_policy();
  test_clip_configs();
  test_transformers_identity();
  check_entries("unet_tiny");
  check_entries("unet_sdxl");
  check_entries("vae_tiny");
  check_entries("clip_sd15");
  check_entries("clip_sdxl2");
  check_entries("flux_dev");
  check_entries("flux_schnell");
  check_entries("sd3");
  check_entries("sd35");
  return tu_finish();
}
