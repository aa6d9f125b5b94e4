/* pipeline_check.c — whole pipelines against diffusers
 * (tests/fixtures/pipelines: cases.json and the folders it names).
 *
 * For every case of one pipeline folder: compile the folder (once per
 * compile-time setting: size, batch, clip_skip), run the case's prompt,
 * negative prompt, steps, guidance, scheduler and seed, and compare the
 * image (diffusers' output_type="pt") and the final latents with the ones
 * diffusers made, within the case's tolerance.  The first case is run
 * again from its recorded noise as --latents (the same image), and on
 * plans compiled with --no-hoist and with --offload model, whose images
 * must be bit-identical to the first.
 *
 * Usage: pipeline_check PIPELINES_DIR NAME [--backend llvm|reference] */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "pipeline/generate.h"
#include "testutil.h"

typedef struct {
  const char *dir, *name, *backend;
  cJSON *cases;
} pc_ctx;

static const char *str(const cJSON *c, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double num(const cJSON *c, const char *key, double def) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(c, key);
  return cJSON_IsNumber(v) ? v->valuedouble : def;
}

/* The compile-time settings of a case, as a key: cases sharing it share a plan. */
static void compile_key(const cJSON *c, char *key, size_t cap) {
  snprintf(key, cap, "%g/%g/%g/%g/%g/%g", num(c, "height", 0), num(c, "width", 0), num(c, "batch", 1),
           num(c, "clip_skip", 0), num(c, "max_sequence_length", 0), num(c, "num_frames", 0));
}

static char *compile_plan(const pc_ctx *x, const cJSON *c, const char *tag, const dc_memory_options *mem, int no_hoist) {
  char *folder = dc_path_join(x->dir, x->name), name[128];
  snprintf(name, sizeof name, "%s-%s.dplan", x->name, tag);
  char *plan = tu_path(name);
  dc_compile_options co = {.model = folder, .height = (int64_t)num(c, "height", 0), .width = (int64_t)num(c, "width", 0),
                           .batch = (int64_t)num(c, "batch", 1), .clip_skip = (int)num(c, "clip_skip", 0),
                           .max_sequence_length = (int)num(c, "max_sequence_length", 0),
                           .num_frames = (int64_t)num(c, "num_frames", 0), .no_hoist = no_hoist};
  if (mem) co.memory = *mem;
  dc_compile_report rep;
  dc_status *st = dc_compile(&co, plan, &rep);
  CHECK_OK(st);
  printf("compiled %s (%s): %d steps, peak activations %llu B, %.1f s\n", x->name, tag, rep.steps,
         (unsigned long long)rep.peak_activation_bytes, rep.seconds);
  dc_free(folder);
  if (st) {
    free(plan);
    return NULL;
  }
  return plan;
}

typedef struct {
  dc_st_file io;
  int open;
} reference;

static const float *ref_tensor(const reference *r, const char *name, size_t *n) {
  const dc_st_tensor *t = dc_st_find(&r->io, name);
  if (!t || t->dtype != DT_F32) return NULL;
  *n = (size_t)(t->bytes / 4);
  return (const float *)(r->io.file.data + t->offset);
}

/* "key=value" strings of a case's scheduler_overrides (JSON values). */
static int overrides(const cJSON *c, char **out, int cap) {
  int n = 0;
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(c, "scheduler_overrides");
  for (const cJSON *e = cJSON_IsObject(o) ? o->child : NULL; e && n < cap; e = e->next) {
    char *v = cJSON_PrintUnformatted(e);
    out[n++] = dc_asprintf("%s=%s", e->string, v);
    cJSON_free(v);
  }
  return n;
}

static void sdxl_sizes(const cJSON *c, dc_generate_options *go) {
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(c, "sdxl");
  if (!cJSON_IsObject(s)) return;
  const char *keys[3] = {"original_size", "crops_coords_top_left", "target_size"};
  int64_t *dst[3] = {go->original_size, go->crops_coords_top_left, go->target_size};
  int *has[3] = {&go->has_original_size, &go->has_crops, &go->has_target_size};
  for (int k = 0; k < 3; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, keys[k]);
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2) continue;
    dst[k][0] = (int64_t)cJSON_GetArrayItem(v, 0)->valuedouble;
    dst[k][1] = (int64_t)cJSON_GetArrayItem(v, 1)->valuedouble;
    *has[k] = 1;
  }
}

static double compare(const char *what, const float *got, const float *want, size_t n) {
  double e = tu_rel_l2(got, want, n);
  printf("  %-8s rel L2 %.3g\n", what, e);
  return e;
}

/* Flux's final latents as diffusers returns them: packed 2x2 into tokens
 * [B, h/2 * w/2, 4C] (pipeline_flux.py _pack_latents); r's are unpacked. */
static float *flux_packed(const dc_generate_result *r) {
  int64_t c = r->latent_channels, h = r->latent_h, w = r->latent_w, per = c * h * w;
  float *out = malloc(sizeof *out * (size_t)(r->batch * per));
  for (int64_t b = 0; b < r->batch; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
          out[b * per + ((y / 2) * (w / 2) + x / 2) * c * 4 + ch * 4 + (y % 2) * 2 + x % 2] =
              r->latents[b * per + (ch * h + y) * w + x];
  return out;
}

/* Runs case c on plan p; r receives the result (the caller frees it). */
static void run_case(drt_plan *p, const cJSON *c, const float *latents, dc_generate_result *r) {
  char *ov[16];
  int nov = overrides(c, ov, 16);
  const cJSON *neg = cJSON_GetObjectItemCaseSensitive(c, "negative_prompt");
  dc_generate_options go = {.prompt = str(c, "prompt"),
                            .negative_prompt = cJSON_IsString(neg) ? neg->valuestring : NULL,
                            .steps = (int)num(c, "steps", 50),
                            .guidance = num(c, "guidance", NAN),
                            .guidance_rescale = num(c, "guidance_rescale", 0),
                            .use_dynamic_cfg = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "use_dynamic_cfg")),
                            .scheduler = str(c, "scheduler"),
                            .scheduler_set = (const char *const *)ov,
                            .nscheduler_set = nov,
                            .seed = (uint64_t)num(c, "seed", 0),
                            .latents = latents};
  sdxl_sizes(c, &go);
  CHECK_OK(dc_generate(p, &go, r));
  for (int i = 0; i < nov; i++) dc_free(ov[i]);
}

static drt_plan *load(const pc_ctx *x, const char *plan) {
  drt_plan *p = NULL;
  CHECK_OK(drt_load(plan, &(drt_options){.backend = x->backend}, &p));
  return p;
}

/* One case against diffusers; returns the image size in floats. */
static void check_case(const pc_ctx *x, drt_plan *p, const cJSON *c) {
  char *io_path = dc_path_join(x->dir, str(c, "io"));
  reference ref = {0};
  CHECK_OK(dc_st_open(io_path, &ref.io));
  dc_free(io_path);
  double tol = num(c, "tolerance", 1e-4);
  printf("case %s (%s): %s\n", str(c, "name"), str(c, "scheduler") ? str(c, "scheduler") : "folder's scheduler",
         str(c, "description") ? str(c, "description") : "");
  dc_generate_result r;
  run_case(p, c, NULL, &r);
  size_t ni = 0, nl = 0;
  const float *img = ref_tensor(&ref, "image", &ni), *lat = ref_tensor(&ref, "latents", &nl);
  int64_t frames = r.frames ? r.frames : 1, latent_frames = r.latent_frames ? r.latent_frames : 1;
  CHECK(img && lat && ni == (size_t)(r.batch * frames * 3 * r.height * r.width) &&
        nl == (size_t)(r.batch * latent_frames * r.latent_channels * r.latent_h * r.latent_w));
  if (num(c, "frames", 0) > 0) CHECK(r.frames == (int64_t)num(c, "frames", 0));
  if (img && lat && r.image && ni == (size_t)(r.batch * frames * 3 * r.height * r.width)) {
    const char *cls = str(c, "pipeline_class");
    float *packed = cls && !strcmp(cls, "FluxPipeline") ? flux_packed(&r) : NULL;
    CHECK(compare("image", r.image, img, ni) <= tol);
    CHECK(compare("latents", packed ? packed : r.latents, lat, nl) <= tol);
    free(packed);
  }
  CHECK(r.device_peak_bytes <= r.device_predicted_bytes);
  dc_generate_result_free(&r);
  dc_st_close(&ref.io);
}

/* The first case again: from its recorded noise (--latents), and on plans
 * without hoisting and with model offload, bit for bit. */
static void check_variants(const pc_ctx *x, drt_plan *p, const cJSON *c) {
  char *io_path = dc_path_join(x->dir, str(c, "io"));
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_free(io_path);
  const dc_st_tensor *t = dc_st_find(&io, "init_noise");
  CHECK(t != NULL);
  dc_generate_result base, from_noise;
  run_case(p, c, NULL, &base);
  if (t) {
    run_case(p, c, (const float *)(io.file.data + t->offset), &from_noise);
    size_t n = (size_t)(base.batch * (base.frames ? base.frames : 1) * 3 * base.height * base.width);
    CHECK(base.image && from_noise.image && !memcmp(base.image, from_noise.image, n * sizeof(float)));
    printf("  --latents from the recorded noise: the same image bit for bit\n");
    dc_generate_result_free(&from_noise);
  }
  dc_st_close(&io);
  struct {
    const char *tag;
    dc_memory_options mem;
    int no_hoist;
  } variants[2] = {{"nohoist", {0}, 1}, {"offload-model", {.offload = DC_OFFLOAD_MODEL}, 0}};
  for (int v = 0; v < 2; v++) {
    char *plan = compile_plan(x, c, variants[v].tag, &variants[v].mem, variants[v].no_hoist);
    drt_plan *q = plan ? load(x, plan) : NULL;
    if (q) {
      dc_generate_result r;
      run_case(q, c, NULL, &r);
      size_t n = (size_t)(base.batch * (base.frames ? base.frames : 1) * 3 * base.height * base.width);
      int same = r.image && base.image && !memcmp(r.image, base.image, n * sizeof(float));
      printf("  %s: %s; device arena peak %llu B (hoisted plan: %llu B), uploaded %llu B\n", variants[v].tag,
             same ? "bit-identical image" : "IMAGE DIFFERS", (unsigned long long)r.device_predicted_bytes,
             (unsigned long long)base.device_predicted_bytes, (unsigned long long)r.uploaded_bytes);
      CHECK(same);
      if (v == 1) CHECK(r.uploaded_bytes > 0);
      dc_generate_result_free(&r);
      drt_destroy(q);
    }
    free(plan);
  }
  dc_generate_result_free(&base);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  if (argc < 3) {
    fprintf(stderr, "usage: pipeline_check PIPELINES_DIR NAME [--backend llvm|reference]\n");
    return 2;
  }
  pc_ctx x = {argv[1], argv[2], argc > 4 && !strcmp(argv[3], "--backend") ? argv[4] : NULL, NULL};
  char *cases_path = dc_path_join(x.dir, "cases.json"), *text = NULL;
  size_t size = 0;
  CHECK_OK(dc_file_read_all(cases_path, &text, &size));
  dc_free(cases_path);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  dc_free(text);
  x.cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
  CHECK(cJSON_IsArray(x.cases));
  char done[32][96];
  int ndone = 0, first = 1;
  const cJSON *c;
  cJSON_ArrayForEach(c, x.cases) { /* one plan per compile-time setting, its cases in a row */
    char key[96];
    if (strcmp(str(c, "pipeline") ? str(c, "pipeline") : "", x.name) != 0) continue;
    compile_key(c, key, sizeof key);
    int seen = 0;
    for (int i = 0; i < ndone; i++) seen |= !strcmp(done[i], key);
    if (seen || ndone == 32) continue;
    snprintf(done[ndone++], sizeof done[0], "%s", key);
    char tag[16];
    snprintf(tag, sizeof tag, "g%d", ndone);
    char *plan = compile_plan(&x, c, tag, NULL, 0);
    drt_plan *p = plan ? load(&x, plan) : NULL;
    const cJSON *d;
    cJSON_ArrayForEach(d, x.cases) {
      char k2[96];
      compile_key(d, k2, sizeof k2);
      if (p && !strcmp(str(d, "pipeline") ? str(d, "pipeline") : "", x.name) && !strcmp(k2, key)) check_case(&x, p, d);
    }
    if (p && first) check_variants(&x, p, c);
    first = 0;
    drt_destroy(p);
    free(plan);
  }
  CHECK(ndone > 0);
  cJSON_Delete(root);
  return tu_finish();
}
