/* fuzz_config.c — the config reader: dc_json_load and the typed getters on
 * the bytes as a file, then the bytes as the config.json of a model folder
 * (beside the real weights of unet_tiny, vae_tiny, flux_dev, sd35,
 * t5_original, cogvideox_tiny and cogvideox_vae) through dc_folder_open and dc_frontend_build, which choose a
 * builder by _class_name and read every key the UNet, VAE, Flux, SD3, T5
 * and CogVideoX builders know.  Errors are expected; crashes, leaks
 * and undefined behaviour are the findings. */
#include "frontend/frontend.h"
#include "fuzz_common.h"

static void getters(const dc_json_doc *d) {
  int64_t i = 0, list[16];
  double x = 0;
  int b = 0, n = 0, present = 0;
  const char *s = NULL, *strs[16];
  fuzz_drop(dc_json_str(d, "_class_name", NULL, &s));
  fuzz_drop(dc_json_str(d, "act_fn", "silu", &s));
  fuzz_drop(dc_json_int(d, "in_channels", 4, &i));
  fuzz_drop(dc_json_int(d, "sample_size", 64, &i));
  fuzz_drop(dc_json_num(d, "norm_eps", 1e-5, &x));
  fuzz_drop(dc_json_num(d, "scaling_factor", 0.18215, &x));
  fuzz_drop(dc_json_bool(d, "center_input_sample", 0, &b));
  fuzz_drop(dc_json_int_list(d, "block_out_channels", 0, 0, 1, list, 16, &n, &present));
  fuzz_drop(dc_json_int_list(d, "attention_head_dim", 1, 4, 1, list, 16, &n, &present));
  fuzz_drop(dc_json_int_list(d, "transformer_layers_per_block", 1, 0, 0, list, 16, &n, &present));
  fuzz_drop(dc_json_int_list(d, "layers_per_block", 1, 3, 0, list, 4, &n, &present));
  fuzz_drop(dc_json_str_list(d, "down_block_types", strs, 16, &n));
  fuzz_drop(dc_json_str_list(d, "up_block_types", strs, 16, &n));
}

/* A folder "<tmp>/<name>" holding the fixture's weights; config.json is
 * written per input. */
static void setup_folder(char *dir, size_t n, const char *name, const char *fixture, const char *weights) {
  char sub[64], p[400];
  snprintf(sub, sizeof sub, "/%s", name);
  fuzz_tmp_path(dir, n, "config", sub);
  fuzz_mkdir(dir);
  fuzz_cleanup_add(dir);
  snprintf(p, sizeof p, "%s/config.json", dir);
  fuzz_cleanup_add(p);
  snprintf(p, sizeof p, "%s/%s", dir, weights);
  fuzz_cleanup_add(p);
  char src[400];
  snprintf(src, sizeof src, "%s/tests/fixtures/%s/model/%s", DIFFC_SOURCE_DIR, fixture, weights);
  fuzz_copy_file(src, p);
}

static void build_folder(const char *dir, const uint8_t *data, size_t size) {
  char cfg[400];
  snprintf(cfg, sizeof cfg, "%s/config.json", dir);
  fuzz_write_file(cfg, data, size);
  dc_folder f;
  dc_status *st = dc_folder_open(dir, NULL, &f);
  if (!st) {
    static const char *entries[] = {NULL, "encode", "decode"};
    for (int e = 0; e < 3; e++) {
      dc_build_options opt = {.entry = entries[e]};
      dc_module *m = NULL;
      fuzz_drop(dc_frontend_build(&f, &opt, &m));
      if (m) dc_module_destroy(m);
    }
    dc_folder_close(&f);
  }
  fuzz_drop(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const char *const dp = "diffusion_pytorch_model.safetensors";
  static char top[256], json[256], folders[7][256];
  if (!top[0]) {
    fuzz_tmp_path(top, sizeof top, "config", "");
    fuzz_tmp_path(json, sizeof json, "config", ".json");
    fuzz_mkdir(top);
    fuzz_cleanup_add(top);
    fuzz_cleanup_add(json);
    setup_folder(folders[0], sizeof folders[0], "unet", "unet_tiny", dp);
    setup_folder(folders[1], sizeof folders[1], "vae", "vae_tiny", dp);
    setup_folder(folders[2], sizeof folders[2], "flux", "flux_dev", dp);
    setup_folder(folders[3], sizeof folders[3], "sd3", "sd35", dp);
    setup_folder(folders[4], sizeof folders[4], "t5", "t5_original", "model.safetensors");
    setup_folder(folders[5], sizeof folders[5], "cogvideox", "cogvideox_tiny", dp);
    setup_folder(folders[6], sizeof folders[6], "cogvideox_vae", "cogvideox_vae", dp);
  }
  /* 1. The JSON reader and the getters. */
  fuzz_write_file(json, data, size);
  dc_json_doc d;
  dc_status *st = dc_json_load(json, &d);
  if (!st) {
    getters(&d);
    dc_json_free(&d);
  }
  fuzz_drop(st);

  /* 2. The folder and the builders, beside each model's weights. */
  for (int i = 0; i < 7; i++) build_folder(folders[i], data, size);
  return 0;
}
