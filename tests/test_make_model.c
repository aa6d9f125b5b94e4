/* test_make_model.c — the frontend's record mode and tools/make_model.
 *
 * Record mode: for every fixture made by diffusers, the weights the config
 * implies are exactly the checkpoint's tensors, name for name and shape for
 * shape (a VAE lists both halves); the bench configs give the real models'
 * parameter counts.  make_model: a tiny UNet and a tiny VAE made from their
 * configs compile and run to finite outputs of sane size for every entry;
 * the same seed gives the same bytes, another seed other bytes; sharded and
 * bf16 checkpoints hold the same values (the sharded one runs to bit-equal
 * outputs); norms are 1/0 and conv weights lie within PyTorch's bound; a
 * rerun of another form removes the earlier checkpoint's files. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/compile.h"
#include "runtime/diffrun.h"
#include "testutil.h"

/* The tool itself, in-process: its main becomes make_model_main. */
#define main make_model_main
#include "../tools/make_model.c"
#undef main

static int run_tool(const char *config, const char *out, const char *a1, const char *a2, const char *a3,
                    const char *a4) {
  char *argv[] = {"make_model", (char *)config, (char *)out, "-q", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
  int argc = 4;
  while (argv[argc]) argc++;
  return make_model_main(argc, argv);
}

static char *src_path(const char *rel) { return dc_path_join(tu_source_dir, rel); }

/* ---- record mode against diffusers' own checkpoints ------------------------- */

static void check_list_matches(const char *model_dir, const char *variant) {
  dc_folder_options fo = {.variant = variant};
  char *config = dc_path_join(model_dir, "config.json");
  dc_weight_list l;
  dc_folder f;
  CHECK_OK(dc_frontend_weight_list(config, NULL, &l));
  CHECK_OK(dc_folder_open(model_dir, &fo, &f));
  CHECK(l.n == f.nentries);
  int same = l.n == f.nentries;
  for (int i = 0; same && i < l.n; i++) {
    const dc_st_tensor *t = f.entries[i].tensor;
    same = !strcmp(l.items[i].name, f.entries[i].name) && l.items[i].rank == t->rank &&
           !memcmp(l.items[i].dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    if (!same) fprintf(stderr, "  first difference: \"%s\" vs \"%s\"\n", l.items[i].name, f.entries[i].name);
  }
  CHECK(same);
  printf("  %-60s %4d weights, as in the checkpoint: %s\n", model_dir, l.n, same ? "yes" : "NO");
  dc_weight_list_deinit(&l);
  dc_folder_close(&f);
  dc_free(config);
}

static void test_lists_match_fixtures(void) {
  static const struct {
    const char *dir, *variant;
  } models[] = {{"fixtures/unet_tiny/model", NULL},         {"fixtures/unet_tiny_bf16/model", "bf16"},
                {"fixtures/unet_sd15/model", NULL},         {"fixtures/unet_sd2/model", NULL},
                {"fixtures/unet_sdxl/model", NULL},         {"fixtures/vae_tiny/model", NULL},
                {"fixtures/vae_sd/model", NULL},            {"fixtures/vae_noattn/model", NULL},
                {"fixtures/pipeline_sd/model/unet", NULL}, {"fixtures/pipeline_sd/model/vae", NULL},
                /* a text encoder: names under text_model., as the released ones have them */
                {"fixtures/clip_sdxl2/model", NULL}};
  printf("record mode lists each fixture's checkpoint:\n");
  for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
    char *dir = src_path(models[i].dir);
    check_list_matches(dir, models[i].variant);
    dc_free(dir);
  }
}

/* The real models' parameter counts (sum of numel over the state dict). */
static void test_bench_configs(void) {
  static const struct {
    const char *config;
    uint64_t params;
  } cases[] = {{"../bench/configs/sd15_unet.json", 859520964ull},
               {"../bench/configs/sdxl_base_unet.json", 2567463684ull},
               {"../bench/configs/sd15_vae.json", 83653863ull},
               /* FLUX.1-dev's VAE: 16 latent channels, no quant convs */
               {"../bench/configs/flux_vae.json", 83819683ull},
               /* CLIP-L (SD1.5's text encoder) and OpenCLIP bigG with its projection (SDXL's second) */
               {"../bench/configs/sd15_text_encoder.json", 123060480ull},
               {"../bench/configs/sdxl_text_encoder_2.json", 694659840ull},
               /* T5-v1.1-XXL's encoder (Flux's text_encoder_2), its tied token table once */
               {"../bench/configs/flux_text_encoder_2.json", 4762310656ull},
               /* the DiTs: FLUX.1-dev (with the guidance embedder) and -schnell; SD3.5-medium's state dict
                  holds its 384x384 positional table (226,492,416 values) besides 2,243,171,520 parameters */
               {"../bench/configs/flux1_dev_transformer.json", 11901408320ull},
               {"../bench/configs/flux1_schnell_transformer.json", 11891178560ull},
               {"../bench/configs/sd35_medium_transformer.json", 2469663936ull},
               /* CogVideoX-5b (3D RoPE) and -2b (its sincos table is computed, not stored), 5b's VAE
                  (encoder and decoder) */
               {"../bench/configs/cogvideox_5b_transformer.json", 5570283072ull},
               {"../bench/configs/cogvideox_2b_transformer.json", 1693783872ull},
               {"../bench/configs/cogvideox_5b_vae.json", 215583907ull}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *config = src_path(cases[i].config);
    dc_weight_list l;
    CHECK_OK(dc_frontend_weight_list(config, NULL, &l));
    uint64_t params = 0;
    for (int k = 0; k < l.n; k++) {
      uint64_t n = 1;
      for (int d = 0; d < l.items[k].rank; d++) n *= (uint64_t)l.items[k].dims[d];
      params += n;
    }
    CHECK(params == cases[i].params);
    printf("  %-40s %5d weights, %llu parameters (the real model: %llu)\n", cases[i].config, l.n,
           (unsigned long long)params, (unsigned long long)cases[i].params);
    dc_weight_list_deinit(&l);
    dc_free(config);
  }
}

static void test_list_errors(void) {
  dc_weight_list l;
  char *bad = tu_path("bad_config.json");
  CHECK_ERR(dc_frontend_weight_list("/nonexistent/config.json", NULL, &l), "/nonexistent/config.json: no such file");
  const char *unknown = "{\"_class_name\": \"PixArtTransformer2DModel\"}", *no_class = "{\"in_channels\": 4}";
  tu_write_file(bad, unknown, strlen(unknown));
  CHECK_ERR(dc_frontend_weight_list(bad, NULL, &l), "\"_class_name\" is \"PixArtTransformer2DModel\"");
  tu_write_file(bad, no_class, strlen(no_class));
  CHECK_ERR(dc_frontend_weight_list(bad, NULL, &l), "no \"_class_name\"");
  CHECK(l.n == 0 && l.items == NULL);
  free(bad);
}

/* ---- make_model ----------------------------------------------------------------- */

static int files_equal(const char *a, const char *b) {
  char *x = NULL, *y = NULL;
  size_t nx = 0, ny = 0;
  dc_status *s1 = dc_file_read_all(a, &x, &nx), *s2 = dc_file_read_all(b, &y, &ny);
  int eq = !s1 && !s2 && nx == ny && !memcmp(x, y, nx);
  dc_status_free(s1);
  dc_status_free(s2);
  dc_free(x);
  dc_free(y);
  return eq;
}

/* Weight files in dir (is_weights_name is make_model's). */
static int count_weight_files(const char *dir) {
  DIR *dp = opendir(dir);
  int n = 0;
  for (struct dirent *de; dp && (de = readdir(dp));) n += is_weights_name("diffusion_pytorch_model", de->d_name);
  if (dp) closedir(dp);
  return n;
}

static char *weights_file(const char *dir) { return dc_path_join(dir, "diffusion_pytorch_model.safetensors"); }

/* Compiles `entry` of the folder, runs it on random inputs with every
 * step's output checked for NaN/Inf, and returns the first output's RMS
 * (and a copy of it in *out when asked). */
static double compile_and_run(const char *dir, const char *entry, float **out, size_t *numel) {
  char *plan = tu_path("made.dplan");
  dc_compile_options co = {.model = dir, .entry = entry};
  dc_compile_report rep;
  drt_plan *p = NULL;
  drt_options ro = {.backend = "llvm", .threads = 2, .check_finite = 1};
  drt_stats s;
  double rms = -1;
  dc_status *st = dc_compile(&co, plan, &rep);
  if (!st) st = drt_load(plan, &ro, &p);
  if (!st) drt_set_random_inputs(p, 3);
  if (!st) st = drt_run(p, &s);
  CHECK_OK(st);
  if (p && !st) {
    size_t n;
    const float *o = drt_output(p, drt_output_info(p, 0)->name, &n);
    double sum2 = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) sum2 += (double)o[i] * o[i], finite &= isfinite(o[i]) != 0;
    CHECK(finite);
    rms = sqrt(sum2 / (double)n);
    if (out) {
      *out = malloc(n * sizeof(float));
      memcpy(*out, o, n * sizeof(float));
      *numel = n;
    }
  }
  drt_destroy(p);
  free(plan);
  return rms;
}

static const float *tensor_data(const dc_folder *f, const char *name, const dc_st_tensor **t) {
  const struct dc_folder_entry *e = dc_folder_find(f, name);
  *t = e ? e->tensor : NULL;
  return e ? (const float *)(f->shards[e->shard].file.data + e->tensor->offset) : NULL;
}

/* Norms 1 and 0; conv weight and bias inside +-1/sqrt(fan_in), spread over it. */
static void check_init(const char *dir) {
  dc_folder f;
  CHECK_OK(dc_folder_open(dir, NULL, &f));
  const dc_st_tensor *t;
  const float *nw = tensor_data(&f, "conv_norm_out.weight", &t);
  int ones = nw != NULL;
  for (uint64_t i = 0; nw && i < t->bytes / 4; i++) ones &= nw[i] == 1.0f;
  const float *nb = tensor_data(&f, "conv_norm_out.bias", &t);
  int zeros = nb != NULL;
  for (uint64_t i = 0; nb && i < t->bytes / 4; i++) zeros &= nb[i] == 0.0f;
  CHECK(ones && zeros);
  const float *cw = tensor_data(&f, "conv_in.weight", &t);
  CHECK(cw && t->rank == 4);
  if (cw && t->rank == 4) {
    double bound = 1.0 / sqrt((double)(t->dims[1] * t->dims[2] * t->dims[3])), maxabs = 0;
    for (uint64_t i = 0; i < t->bytes / 4; i++) maxabs = fmax(maxabs, fabs(cw[i]));
    const float *cb = tensor_data(&f, "conv_in.bias", &t);
    double bmax = 0;
    for (uint64_t i = 0; cb && i < t->bytes / 4; i++) bmax = fmax(bmax, fabs(cb[i]));
    CHECK(maxabs <= bound && maxabs > 0.8 * bound && cb && bmax <= bound && bmax > 0);
    printf("  conv_in.weight max |w| %.4f, bound 1/sqrt(fan_in) %.4f; bias max %.4f; norms 1 and 0: %s\n", maxabs,
           bound, bmax, ones && zeros ? "yes" : "NO");
  }
  dc_folder_close(&f);
}

/* Every f32 value of a, rounded to bf16, equals b's. */
static void check_bf16_of(const char *f32_dir, const char *bf16_dir) {
  dc_folder a, b;
  CHECK_OK(dc_folder_open(f32_dir, NULL, &a));
  CHECK_OK(dc_folder_open(bf16_dir, NULL, &b));
  int same = a.nentries == b.nentries, checked = 0;
  for (int i = 0; same && i < a.nentries; i++) {
    const dc_st_tensor *ta, *tb;
    const float *x = tensor_data(&a, a.entries[i].name, &ta);
    const uint16_t *y = (const uint16_t *)(const void *)tensor_data(&b, a.entries[i].name, &tb);
    same = y && tb->dtype == DT_BF16 && tb->bytes * 2 == ta->bytes;
    for (uint64_t k = 0; same && k < ta->bytes / 4; k++) same = dc_f32_to_bf16(x[k]) == y[k], checked++;
  }
  CHECK(same);
  printf("  bf16 checkpoint holds the f32 values rounded to bf16 (%d values): %s\n", checked, same ? "yes" : "NO");
  dc_folder_close(&a);
  dc_folder_close(&b);
}

static void test_unet(void) {
  char *config = src_path("fixtures/unet_tiny/model/config.json");
  char *a = tu_path("unet_a"), *b = tu_path("unet_b"), *c = tu_path("unet_c"), *h = tu_path("unet_bf16");
  char *wa = weights_file(a), *wb = weights_file(b), *wc = weights_file(c);
  CHECK(run_tool(config, a, "--seed", "7", NULL, NULL) == 0);
  CHECK(run_tool(config, b, "--seed", "7", NULL, NULL) == 0);
  CHECK(files_equal(wa, wb));
  CHECK(run_tool(config, c, "--seed", "8", NULL, NULL) == 0);
  CHECK(!files_equal(wa, wc));
  printf("unet_tiny: seed 7 twice gives the same bytes: %s; seed 8 other bytes: %s\n", files_equal(wa, wb) ? "yes" : "NO",
         !files_equal(wa, wc) ? "yes" : "NO");
  check_init(a);
  float *ref = NULL, *got = NULL;
  size_t n_ref = 0, n_got = 0;
  double rms = compile_and_run(a, NULL, &ref, &n_ref);
  CHECK(rms > 0.01 && rms < 10);
  printf("  compiled and ran: output finite, RMS %.4f\n", rms);

  /* Sharded: 16 KiB shards, the same values, so bit-equal outputs. */
  CHECK(run_tool(config, b, "--seed", "7", "--shard-size", "16K") == 0);
  char *index = dc_path_join(b, "diffusion_pytorch_model.safetensors.index.json");
  dc_folder f;
  CHECK_OK(dc_folder_open(b, NULL, &f));
  CHECK(f.nshards > 2 && dc_file_exists(index) && !dc_file_exists(wb));
  printf("  sharded: %d shards with an index; the single file of the earlier run removed: %s\n", f.nshards,
         !dc_file_exists(wb) ? "yes" : "NO");
  dc_folder_close(&f);
  compile_and_run(b, NULL, &got, &n_got);
  CHECK(ref && got && n_ref == n_got && !memcmp(ref, got, n_ref * sizeof(float)));
  printf("  sharded checkpoint runs to bit-equal outputs: %s\n",
         ref && got && n_ref == n_got && !memcmp(ref, got, n_ref * sizeof(float)) ? "yes" : "NO");
  /* Back to one file: the index and the shards go. */
  CHECK(run_tool(config, b, "--seed", "7", NULL, NULL) == 0);
  CHECK(!dc_file_exists(index) && files_equal(wa, wb) && count_weight_files(b) == 1);
  printf("  one file again: index and shards removed: %s\n", count_weight_files(b) == 1 ? "yes" : "NO");

  CHECK(run_tool(config, h, "--seed", "7", "--dtype", "bf16") == 0);
  check_bf16_of(a, h);
  rms = compile_and_run(h, NULL, NULL, NULL);
  CHECK(rms > 0.01 && rms < 10);
  printf("  bf16 checkpoint compiled and ran: RMS %.4f\n", rms);
  free(ref), free(got);
  dc_free(config), dc_free(index), dc_free(wa), dc_free(wb), dc_free(wc);
  free(a), free(b), free(c), free(h);
}

/* The VAE's list holds both halves, so both entries compile from one made folder. */
static void test_vae(void) {
  char *config = src_path("fixtures/vae_tiny/model/config.json"), *dir = tu_path("vae");
  CHECK(run_tool(config, dir, "--dtype", "f16", NULL, NULL) == 0);
  double enc = compile_and_run(dir, "encode", NULL, NULL), dec = compile_and_run(dir, "decode", NULL, NULL);
  CHECK(enc > 0.001 && enc < 10 && dec > 0.001 && dec < 10);
  printf("vae_tiny (f16 weights): encode RMS %.4f, decode RMS %.4f, finite\n", enc, dec);
  dc_free(config);
  free(dir);
}

static void test_tool_errors(void) {
  char *out = tu_path("never");
  char *argv1[] = {"make_model", "x.json", NULL};
  char *argv2[] = {"make_model", "x.json", out, "--dtype", "f8", NULL};
  char *argv3[] = {"make_model", "x.json", out, "--shard-size", "12Q", NULL};
  char *argv4[] = {"make_model", "/nonexistent/config.json", out, NULL};
  CHECK(make_model_main(2, argv1) == 1);
  CHECK(make_model_main(5, argv2) == 1);
  CHECK(make_model_main(5, argv3) == 1);
  CHECK(make_model_main(3, argv4) == 1);
  CHECK(!dc_dir_exists(out));
  dc_status *st = parse_u64("--shard-size", "2G", 1, &(uint64_t){0});
  CHECK_OK(st);
  uint64_t v = 0;
  CHECK_ERR(parse_u64("--shard-size", "-1", 1, &v), "--shard-size -1: expected a non-negative integer");
  free(out);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_lists_match_fixtures();
  test_bench_configs();
  test_list_errors();
  test_unet();
  test_vae();
  test_tool_errors();
  return tu_finish();
}
