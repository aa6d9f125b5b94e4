/* generate.c — see generate.h.  The order of operations follows diffusers'
 * pipeline_stable_diffusion.py / pipeline_stable_diffusion_xl.py /
 * pipeline_flux.py / pipeline_stable_diffusion_3.py / pipeline_cogvideox.py
 * __call__. */
#include "generate.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "scheduler.h"
#include "tokenizer.h"
#include "tokenizer_t5.h"
#include "torch_rng.h"

/* ---- the plan's pipeline section ------------------------------------------ */

typedef enum { KIND_SD, KIND_SDXL, KIND_FLUX, KIND_SD3, KIND_COGVIDEOX } pipe_kind;

typedef struct {
  pipe_kind kind;
  int sdxl, force_zeros, guidance_embeds, has_uncond;
  int64_t patch; /* Flux: 2 (the packing); SD3: the transformer's patch_size */
  int64_t batch, height, width, tokens, t5_tokens, channels, lh, lw;
  /* CogVideoX: latents [batch, latent_frames, C, lh, lw], the video
   * [batch, frames, 3, height, width]; 1 and 1 for the image pipelines */
  int64_t latent_frames, frames;
  double scaling_factor, shift_factor;
} pipe_info;

static int is_dit(const pipe_info *pi) { return pi->kind == KIND_FLUX || pi->kind == KIND_SD3; }
static int is_video(const pipe_info *pi) { return pi->kind == KIND_COGVIDEOX; }
static int has_t5(const pipe_info *pi) { return is_dit(pi) || is_video(pi); }

int dc_plan_is_pipeline(const drt_plan *p) { return drt_pipeline_json(p) != NULL; }

static dc_status *json_int(const cJSON *j, const char *key, int64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
  if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < 0)
    return dc_error(DC_ERR_FORMAT, "the plan's pipeline section: \"%s\" is not a non-negative integer", key);
  *out = (int64_t)v->valuedouble;
  return NULL;
}

static dc_status *read_info(const drt_plan *p, pipe_info *pi) {
  const char *text = drt_pipeline_json(p);
  if (!text) return dc_error(DC_ERR_ARGUMENT, "the plan is one model, not a pipeline (compile a pipeline folder)");
  cJSON *j = cJSON_Parse(text);
  if (!j) return dc_error(DC_ERR_FORMAT, "the plan's pipeline section is not valid JSON");
  int64_t vae = 0;
  dc_status *st = json_int(j, "batch", &pi->batch);
  if (!st) st = json_int(j, "height", &pi->height);
  if (!st) st = json_int(j, "width", &pi->width);
  if (!st) st = json_int(j, "tokens", &pi->tokens);
  if (!st) st = json_int(j, "latent_channels", &pi->channels);
  if (!st) st = json_int(j, "vae_scale_factor", &vae);
  if (!st && (vae < 1 || pi->batch < 1 || pi->tokens < 1 || pi->tokens > 4096)) /* CogVideoX: T5's, may be 1 */
    st = dc_error(DC_ERR_FORMAT, "the plan's pipeline section: sizes out of range");
  const cJSON *sf = cJSON_GetObjectItemCaseSensitive(j, "scaling_factor");
  const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shift_factor");
  if (!st && (!cJSON_IsNumber(sf) || !cJSON_IsNumber(sh) || sf->valuedouble == 0))
    st = dc_error(DC_ERR_FORMAT, "the plan's pipeline section: no scaling_factor / shift_factor");
  if (!st) {
    pi->scaling_factor = sf->valuedouble, pi->shift_factor = sh->valuedouble;
    pi->sdxl = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "sdxl"));
    pi->force_zeros = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "force_zeros_for_empty_prompt"));
    pi->lh = pi->height / vae, pi->lw = pi->width / vae;
    /* plans before the DiT pipelines have no "kind": SD or SDXL by "sdxl" */
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
    const char *k = cJSON_IsString(kind) ? kind->valuestring : pi->sdxl ? "sdxl" : "sd";
    pi->kind = !strcmp(k, "flux") ? KIND_FLUX : !strcmp(k, "sd3") ? KIND_SD3 : !strcmp(k, "sdxl") ? KIND_SDXL
               : !strcmp(k, "cogvideox") ? KIND_COGVIDEOX : KIND_SD;
    if (strcmp(k, "flux") && strcmp(k, "sd3") && strcmp(k, "sdxl") && strcmp(k, "sd") && strcmp(k, "cogvideox"))
      st = dc_error(DC_ERR_FORMAT, "the plan's pipeline section: kind \"%s\" is not one this diffrun runs", k);
    pi->latent_frames = pi->frames = 1;
    if (!st && is_video(pi)) st = json_int(j, "latent_frames", &pi->latent_frames);
    if (!st && is_video(pi)) st = json_int(j, "frames", &pi->frames);
    if (!st && (pi->latent_frames < 1 || pi->frames < 1 || pi->frames > 65536 || pi->latent_frames > 65536))
      st = dc_error(DC_ERR_FORMAT, "the plan's pipeline section: frames out of range");
    pi->guidance_embeds = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "guidance_embeds"));
    pi->has_uncond = is_dit(pi) ? cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "has_uncond")) : 1;
    if (!st && has_t5(pi)) st = json_int(j, "t5_tokens", &pi->t5_tokens);
    if (!st && is_dit(pi)) st = json_int(j, "patch", &pi->patch);
    if (!st && is_dit(pi) && (pi->patch < 1 || pi->lh % pi->patch || pi->lw % pi->patch))
      st = dc_error(DC_ERR_FORMAT, "the plan's pipeline section: patch %lld does not divide the latents",
                    (long long)pi->patch);
    if (!st && has_t5(pi) && (pi->t5_tokens < 1 || pi->t5_tokens > 4096))
      st = dc_error(DC_ERR_FORMAT, "the plan's pipeline section: t5_tokens out of range");
    if (!st && pi->kind == KIND_FLUX && (pi->lh % 2 || pi->lw % 2))
      st = dc_error(DC_ERR_FORMAT, "the plan's pipeline section: Flux latents of odd size cannot be packed");
  }
  cJSON_Delete(j);
  return st;
}

/* The plan's files under dir/ ("tokenizer", "scheduler"), names without it;
 * the set borrows the plan's bytes. */
static dc_status *files_under(const drt_plan *p, const char *dir, dc_text_files *out, dc_text_file *buf, int cap) {
  size_t n = strlen(dir);
  out->origin = dir;
  out->files = buf;
  out->nfiles = 0;
  const void *data;
  size_t size;
  const char *name;
  for (int i = 0; (name = drt_pipeline_file(p, i, &data, &size)); i++) {
    if (strncmp(name, dir, n) != 0 || name[n] != '/') continue;
    if (out->nfiles == cap) return dc_error(DC_ERR_FORMAT, "the plan's pipeline section: too many %s files", dir);
    buf[out->nfiles++] = (dc_text_file){name + n + 1, data, size};
  }
  return NULL;
}

/* ---- the parts the host keeps --------------------------------------------------- */

typedef struct {
  drt_plan *p;
  const dc_generate_options *o;
  dc_generate_result *r;
  pipe_info pi;
  dc_clip_tokenizer *tok, *tok2;
  dc_t5_tokenizer *t5;   /* Flux's tokenizer_2, SD3's tokenizer_3 (NULL when SD3 has no T5), CogVideoX's tokenizer */
  dc_scheduler *sched;
  dc_torch_gen gen;
  int cfg;
  double guidance;
  size_t nlat;    /* latent floats */
  int step_count; /* num_inference_steps (CogVideoX's dynamic CFG reads it) */
  float *lat, *x, *eps_u, *eps_c;
} gen_ctx;

static void note(const gen_ctx *g, const char *fmt, const char *a, const char *b) {
  if (!g->o->note) return;
  char *s = dc_asprintf(fmt, a, b);
  if (s) g->o->note(g->o->note_ctx, s);
  dc_free(s);
}

static void progress(const gen_ctx *g, const char *phase, int step, int n) {
  if (g->o->progress) g->o->progress(g->o->progress_ctx, phase, step, n);
}

static dc_status *open_tokenizer(const drt_plan *p, const char *dir, dc_clip_tokenizer **out) {
  dc_text_file buf[8];
  dc_text_files fs;
  DC_TRY(files_under(p, dir, &fs, buf, 8));
  return dc_status_annotate(dc_clip_tokenizer_parse(&fs, out), "the plan's %s", dir);
}

/* --scheduler-set KEY=VALUE: the config with those keys set (a JSON value,
 * or else a string), the file in fs replaced by the new text (*text, to
 * free with cJSON_free). */
static dc_status *scheduler_with_changes(gen_ctx *g, dc_text_files *fs, char **text) {
  if (g->o->nscheduler_set == 0) return NULL;
  dc_text_file *f = NULL;
  for (int i = 0; i < fs->nfiles; i++)
    if (!strcmp(fs->files[i].name, "scheduler_config.json")) f = (dc_text_file *)&fs->files[i];
  if (!f) return dc_error(DC_ERR_FORMAT, "the plan has no scheduler/scheduler_config.json");
  cJSON *j = cJSON_ParseWithLength((const char *)f->data, f->size);
  if (!cJSON_IsObject(j)) return cJSON_Delete(j), dc_error(DC_ERR_FORMAT, "the plan's scheduler_config.json is not a JSON object");
  dc_status *st = NULL;
  for (int i = 0; i < g->o->nscheduler_set && !st; i++) {
    const char *kv = g->o->scheduler_set[i], *eq = strchr(kv, '=');
    char *key = eq ? dc_strndup(kv, (size_t)(eq - kv)) : NULL;
    cJSON *v = eq ? cJSON_Parse(eq + 1) : NULL;
    if (eq && !v) v = cJSON_CreateString(eq + 1);
    if (!key || !v || !key[0]) st = dc_error(DC_ERR_ARGUMENT, "--scheduler-set %s: expected KEY=VALUE", kv);
    else {
      cJSON_DeleteItemFromObjectCaseSensitive(j, key);
      cJSON_AddItemToObject(j, key, v);
      v = NULL;
    }
    cJSON_Delete(v);
    dc_free(key);
  }
  if (!st && !(*text = cJSON_PrintUnformatted(j))) st = dc_nomem("the scheduler's config");
  cJSON_Delete(j);
  if (!st) f->data = (const uint8_t *)*text, f->size = strlen(*text);
  return st;
}

static dc_status *open_t5(const drt_plan *p, const char *dir, dc_t5_tokenizer **out) {
  dc_text_file buf[8];
  dc_text_files fs;
  DC_TRY(files_under(p, dir, &fs, buf, 8));
  if (fs.nfiles == 0) return NULL; /* SD3 without its T5: zeros stand in */
  return dc_status_annotate(dc_t5_tokenizer_parse(&fs, out), "the plan's %s", dir);
}

static dc_status *open_parts(gen_ctx *g) {
  if (is_video(&g->pi)) DC_TRY(open_t5(g->p, "tokenizer", &g->t5));
  else DC_TRY(open_tokenizer(g->p, "tokenizer", &g->tok));
  if (is_video(&g->pi) && !g->t5) return dc_error(DC_ERR_FORMAT, "the plan's pipeline section has no tokenizer files");
  if (g->pi.sdxl || g->pi.kind == KIND_SD3) DC_TRY(open_tokenizer(g->p, "tokenizer_2", &g->tok2));
  if (g->pi.kind == KIND_FLUX) DC_TRY(open_t5(g->p, "tokenizer_2", &g->t5));
  if (g->pi.kind == KIND_SD3) DC_TRY(open_t5(g->p, "tokenizer_3", &g->t5));
  dc_text_file buf[4];
  dc_text_files fs;
  DC_TRY(files_under(g->p, "scheduler", &fs, buf, 4));
  char *changed = NULL;
  DC_TRY(scheduler_with_changes(g, &fs, &changed));
  dc_status *st = dc_scheduler_parse(&fs, g->o->scheduler, &g->sched);
  cJSON_free(changed);
  DC_TRY(st);
  g->nlat = (size_t)(g->pi.batch * g->pi.latent_frames * g->pi.channels * g->pi.lh * g->pi.lw);
  g->lat = dc_malloc(g->nlat * sizeof(float));
  g->x = dc_malloc(g->nlat * sizeof(float));
  g->eps_u = dc_malloc(g->nlat * sizeof(float));
  g->eps_c = dc_malloc(g->nlat * sizeof(float));
  return g->lat && g->x && g->eps_u && g->eps_c ? NULL : dc_nomem("the latents");
}

static void close_parts(gen_ctx *g) {
  dc_clip_tokenizer_free(g->tok);
  dc_clip_tokenizer_free(g->tok2);
  dc_t5_tokenizer_free(g->t5);
  dc_scheduler_free(g->sched);
  dc_free(g->lat), dc_free(g->x), dc_free(g->eps_u), dc_free(g->eps_c);
}

/* ---- phases ---------------------------------------------------------------------- */

static dc_status *run_phase(gen_ctx *g, const char *name) {
  int ph = drt_phase_find(g->p, name);
  if (ph < 0) return dc_error(DC_ERR_FORMAT, "the plan has no phase \"%s\" (not a pipeline plan of this diffc)", name);
  drt_stats s;
  DC_TRY(drt_run_phase(g->p, ph, &s));
  dc_generate_result *r = g->r;
  if (s.device_peak_bytes > r->device_peak_bytes) r->device_peak_bytes = s.device_peak_bytes;
  r->device_predicted_bytes = s.device_predicted_bytes;
  r->backend = s.backend, r->threads = s.threads;
  r->uploaded_bytes += s.uploaded_bytes;
  return NULL;
}

static dc_status *set_f32(gen_ctx *g, const char *name, const float *v, size_t n) {
  return drt_set_input(g->p, name, v, n);
}

static dc_status *read_output(gen_ctx *g, const char *name, float *out, size_t n) {
  size_t got = 0;
  const float *v = drt_output(g->p, name, &got);
  if (!v || got != n) return dc_error(DC_ERR_FORMAT, "the plan's output \"%s\" is missing or not %zu values", name, n);
  memcpy(out, v, n * sizeof *out);
  return NULL;
}

/* The ids of one prompt for one tokenizer, as the input `name`. */
static dc_status *tokenize(gen_ctx *g, const dc_clip_tokenizer *t, const char *prompt, const char *name) {
  int64_t ids[4096];
  if (dc_clip_tokenizer_max_length(t) != g->pi.tokens)
    return dc_error(DC_ERR_FORMAT, "the plan's tokenizer pads to %d tokens but its text encoder takes %lld",
                    dc_clip_tokenizer_max_length(t), (long long)g->pi.tokens);
  dc_tokenize_report rep = {0};
  DC_TRY(dc_clip_tokenizer_encode(t, prompt, ids, &rep));
  if (rep.truncated)
    note(g, "the prompt is longer than the text encoder's %s tokens; this part was cut: \"%s\"",
         g->pi.tokens == 77 ? "77" : "maximum", rep.removed_text ? rep.removed_text : "");
  dc_free(rep.removed_text);
  return drt_set_input_data(g->p, name, "i64", ids, (size_t)g->pi.tokens);
}

/* SDXL's add_time_ids: (original_size, crops_coords_top_left, target_size),
 * one row per image. */
static dc_status *set_time_ids(gen_ctx *g) {
  const dc_generate_options *o = g->o;
  int64_t h = g->pi.height, w = g->pi.width;
  float row[6] = {(float)(o->has_original_size ? o->original_size[0] : h),
                  (float)(o->has_original_size ? o->original_size[1] : w),
                  (float)(o->has_crops ? o->crops_coords_top_left[0] : 0),
                  (float)(o->has_crops ? o->crops_coords_top_left[1] : 0),
                  (float)(o->has_target_size ? o->target_size[0] : h),
                  (float)(o->has_target_size ? o->target_size[1] : w)};
  size_t n = (size_t)g->pi.batch * 6;
  float *ids = dc_malloc(n * sizeof *ids);
  if (!ids) return dc_nomem("the time ids");
  for (size_t i = 0; i < n; i++) ids[i] = row[i % 6];
  dc_status *st = set_f32(g, "add_time_ids", ids, n);
  if (!st) st = set_f32(g, "negative_add_time_ids", ids, n);
  dc_free(ids);
  return st;
}

/* T5's ids of one prompt: pieces, eos, pads to max_sequence_length. */
static dc_status *tokenize_t5(gen_ctx *g, const char *prompt, const char *name) {
  size_t n = (size_t)g->pi.t5_tokens;
  int64_t *ids = dc_malloc(n * sizeof *ids);
  if (!ids) return dc_nomem("the T5 token ids");
  dc_tokenize_report rep = {0};
  dc_status *st = dc_t5_tokenizer_encode(g->t5, prompt, (int)n, ids, &rep);
  if (!st && rep.truncated) {
    char max[32];
    snprintf(max, sizeof max, "%zu", n);
    note(g, "the prompt is longer than T5's max_sequence_length %s tokens; this part was cut: \"%s\"", max,
         rep.removed_text ? rep.removed_text : "");
  }
  dc_free(rep.removed_text);
  if (!st) st = drt_set_input_data(g->p, name, "i64", ids, n);
  dc_free(ids);
  return st;
}

/* The pipeline's "*_zeros" inputs (SD3's padding of the CLIP states to T5's
 * width, and T5's stand-in when it has none). */
static dc_status *set_zero_inputs(gen_ctx *g) {
  for (int i = 0; i < drt_input_count(g->p); i++) {
    const drt_tensor_info *t = drt_input_info(g->p, i);
    size_t len = strlen(t->name);
    if (len < 6 || strcmp(t->name + len - 6, "_zeros")) continue;
    float *z = dc_calloc(t->numel ? t->numel : 1, sizeof *z);
    if (!z) return dc_nomem("zero inputs");
    dc_status *st = set_f32(g, t->name, z, t->numel);
    dc_free(z);
    DC_TRY(st);
  }
  return NULL;
}

/* Flux's prologue: img_ids [h/2 * w/2, 3] = (0, row, col) over the packed
 * grid, txt_ids zeros, guidance the scale (dev). */
static dc_status *flux_conditions(gen_ctx *g) {
  int64_t gh = g->pi.lh / 2, gw = g->pi.lw / 2, n = g->pi.t5_tokens;
  size_t ni = (size_t)(gh * gw * 3), nt = (size_t)(n * 3);
  float *img = dc_calloc(ni, sizeof *img), *txt = dc_calloc(nt, sizeof *txt);
  dc_status *st = img && txt ? NULL : dc_nomem("the position ids");
  for (int64_t r = 0; r < gh && !st; r++)
    for (int64_t c = 0; c < gw; c++) img[(r * gw + c) * 3 + 1] = (float)r, img[(r * gw + c) * 3 + 2] = (float)c;
  if (!st) st = set_f32(g, "img_ids", img, ni);
  if (!st) st = set_f32(g, "txt_ids", txt, nt);
  dc_free(img), dc_free(txt);
  if (st || !g->pi.guidance_embeds) return st;
  float gs[64];
  for (int64_t b = 0; b < g->pi.batch; b++) gs[b] = (float)g->guidance;
  return set_f32(g, "guidance", gs, (size_t)g->pi.batch);
}

/* Flux: CLIP's pooled output and T5 on the prompt; SD3: both CLIPs and T5
 * on the prompt and the negative prompt ("" when none). */
static dc_status *encode_dit_prompts(gen_ctx *g) {
  const char *prompt = g->o->prompt ? g->o->prompt : "";
  const char *neg = g->o->negative_prompt ? g->o->negative_prompt : "";
  DC_TRY(tokenize(g, g->tok, prompt, "input_ids"));
  if (g->pi.kind == KIND_FLUX) {
    DC_TRY(tokenize_t5(g, prompt, "input_ids_2"));
  } else {
    DC_TRY(tokenize(g, g->tok, neg, "negative_input_ids"));
    DC_TRY(tokenize(g, g->tok2, prompt, "input_ids_2"));
    DC_TRY(tokenize(g, g->tok2, neg, "negative_input_ids_2"));
    if (g->t5) DC_TRY(tokenize_t5(g, prompt, "input_ids_3"));
    if (g->t5) DC_TRY(tokenize_t5(g, neg, "negative_input_ids_3"));
  }
  DC_TRY(set_zero_inputs(g));
  progress(g, "text", 0, 0);
  DC_TRY(run_phase(g, "text"));
  if (g->pi.kind == KIND_FLUX) DC_TRY(flux_conditions(g));
  return run_phase(g, "prologue");
}

/* CogVideoX: T5 on the prompt and the negative prompt ("" when none). */
static dc_status *encode_video_prompts(gen_ctx *g) {
  DC_TRY(tokenize_t5(g, g->o->prompt ? g->o->prompt : "", "input_ids"));
  DC_TRY(tokenize_t5(g, g->o->negative_prompt ? g->o->negative_prompt : "", "negative_input_ids"));
  progress(g, "text", 0, 0);
  DC_TRY(run_phase(g, "text"));
  return run_phase(g, "prologue");
}

static dc_status *encode_prompts(gen_ctx *g) {
  if (is_dit(&g->pi)) return encode_dit_prompts(g);
  if (is_video(&g->pi)) return encode_video_prompts(g);
  const char *prompt = g->o->prompt ? g->o->prompt : "";
  const char *neg = g->o->negative_prompt ? g->o->negative_prompt : "";
  DC_TRY(tokenize(g, g->tok, prompt, "input_ids"));
  DC_TRY(tokenize(g, g->tok, neg, "negative_input_ids"));
  if (g->pi.sdxl) {
    DC_TRY(tokenize(g, g->tok2, prompt, "input_ids_2"));
    DC_TRY(tokenize(g, g->tok2, neg, "negative_input_ids_2"));
    if (g->pi.force_zeros) { /* negative_prompt None: zeros, not the encoding of "" */
      float scale = g->o->negative_prompt ? 1.0f : 0.0f;
      DC_TRY(set_f32(g, "negative_scale", &scale, 1));
    }
  }
  progress(g, "text", 0, 0);
  DC_TRY(run_phase(g, "text"));
  if (g->pi.sdxl) DC_TRY(set_time_ids(g));
  return run_phase(g, "prologue");
}

/* Flux's 2x2 packing of [B, C, h, w] latents into tokens [B, h/2 * w/2,
 * 4C] (pipeline_flux.py _pack_latents; unpack = 0 is the inverse,
 * _unpack_latents): token (i, j)'s feature c*4 + dy*2 + dx is x[c, 2i+dy,
 * 2j+dx]. */
static void flux_pack(const gen_ctx *g, const float *in, float *out, int pack) {
  int64_t c = g->pi.channels, h = g->pi.lh, w = g->pi.lw, per = c * h * w;
  for (int64_t b = 0; b < g->pi.batch; b++)
    for (int64_t ch = 0; ch < c; ch++)
      for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
          int64_t packed = b * per + ((y / 2) * (w / 2) + x / 2) * c * 4 + ch * 4 + (y % 2) * 2 + x % 2;
          int64_t plain = b * per + (ch * h + y) * w + x;
          if (pack) out[packed] = in[plain];
          else out[plain] = in[packed];
        }
}

/* prepare_latents: torch.randn(shape, generator) (or the given latents),
 * times init_noise_sigma; Flux packs them (its pipeline neither scales
 * them, nor does SD3's: a flow-matching scheduler's init_noise_sigma is 1). */
static void initial_latents(gen_ctx *g) {
  float *noise = g->pi.kind == KIND_FLUX ? g->x : g->lat;
  if (g->o->latents) memcpy(noise, g->o->latents, g->nlat * sizeof(float));
  else dc_torch_randn(&g->gen, noise, g->nlat);
  if (g->pi.kind == KIND_FLUX) flux_pack(g, noise, g->lat, 1);
  if (is_dit(&g->pi)) return;
  float s = dc_scheduler_init_noise_sigma(g->sched);
  for (size_t i = 0; i < g->nlat; i++) g->lat[i] = g->lat[i] * s;
}

/* rescale_noise_cfg: per image, the guided prediction rescaled to the
 * conditional one's standard deviation (unbiased, over C, H, W), mixed by
 * guidance_rescale. */
static void rescale_cfg(gen_ctx *g, float *cfg, const float *text) {
  size_t per = g->nlat / (size_t)g->pi.batch;
  float phi = (float)g->o->guidance_rescale;
  for (int64_t b = 0; b < g->pi.batch; b++) {
    float *y = cfg + (size_t)b * per;
    const float *t = text + (size_t)b * per;
    double mt = 0, my = 0, vt = 0, vy = 0;
    for (size_t i = 0; i < per; i++) mt += t[i], my += y[i];
    mt /= (double)per, my /= (double)per;
    for (size_t i = 0; i < per; i++) vt += (t[i] - mt) * (t[i] - mt), vy += (y[i] - my) * (y[i] - my);
    float ratio = (float)sqrt(vt / (double)(per - 1)) / (float)sqrt(vy / (double)(per - 1));
    for (size_t i = 0; i < per; i++) {
      float rescaled = y[i] * ratio;
      y[i] = phi * rescaled + (1.0f - phi) * y[i];
    }
  }
}

/* The timestep input `name`, t repeated to the batch: float32, or int64 (a
 * builder that takes the scheduler's integer timesteps as diffusers passes
 * them). */
static dc_status *set_timestep(gen_ctx *g, const char *name, float t) {
  float ts[64];
  int64_t ti[64];
  for (int64_t b = 0; b < g->pi.batch; b++) ts[b] = t, ti[b] = (int64_t)t;
  for (int i = 0; i < drt_input_count(g->p); i++) {
    const drt_tensor_info *info = drt_input_info(g->p, i);
    if (!strcmp(info->name, name) && !strcmp(info->dtype, "i64"))
      return drt_set_input_data(g->p, name, "i64", ti, (size_t)g->pi.batch);
  }
  return set_f32(g, name, ts, (size_t)g->pi.batch);
}

/* One UNet half: the scaled latents and the timestep in, its prediction out. */
static dc_status *unet_half(gen_ctx *g, const char *half, float t, float *eps) {
  g->r->unet_runs++;
  if (g->pi.kind == KIND_FLUX) t = t / 1000.0f; /* timestep / 1000: the transformer multiplies it back */
  char name[48];
  snprintf(name, sizeof name, "sample.%s", half);
  DC_TRY(set_f32(g, name, g->x, g->nlat));
  snprintf(name, sizeof name, "timestep.%s", half);
  DC_TRY(set_timestep(g, name, t));
  snprintf(name, sizeof name, "denoise.%s", half);
  DC_TRY(run_phase(g, name));
  snprintf(name, sizeof name, "noise_pred.%s", half);
  return read_output(g, name, eps, g->nlat);
}

static dc_status *denoise_step(gen_ctx *g, int i) {
  float t = dc_scheduler_timestep(g->sched, i);
  memcpy(g->x, g->lat, g->nlat * sizeof(float));
  if (!is_dit(&g->pi)) dc_scheduler_scale_model_input(g->sched, i, g->x, g->nlat);
  if (g->cfg) DC_TRY(unet_half(g, "uncond", t, g->eps_u));
  DC_TRY(unet_half(g, "cond", t, g->eps_c));
  if (g->cfg) { /* noise_pred_uncond + guidance_scale * (noise_pred_text - noise_pred_uncond) */
    double scale = g->o->use_dynamic_cfg ? dc_cogvideox_dynamic_guidance(g->guidance, g->step_count, (int64_t)t)
                                         : g->guidance;
    float s = (float)scale;
    for (size_t k = 0; k < g->nlat; k++) g->eps_u[k] = g->eps_u[k] + s * (g->eps_c[k] - g->eps_u[k]);
    if (g->o->guidance_rescale > 0) rescale_cfg(g, g->eps_u, g->eps_c);
  }
  return dc_scheduler_step(g->sched, i, g->cfg ? g->eps_u : g->eps_c, g->lat, g->nlat, &g->gen);
}

/* FlowMatchEulerDiscreteScheduler's timesteps as the DiT pipelines ask:
 * Flux's sigmas np.linspace(1, 1/N, N) (unless use_flow_sigmas) and mu
 * from the packed token count; SD3's mu only with dynamic shifting, from
 * the patch count. */
static dc_status *flow_timesteps(gen_ctx *g, int steps) {
  int flux = g->pi.kind == KIND_FLUX;
  int64_t seq = (g->pi.lh / g->pi.patch) * (g->pi.lw / g->pi.patch); /* Flux: packed tokens; SD3: patches */
  double *sigmas = NULL, mu = 0;
  if (flux && !dc_scheduler_flow_own_sigmas(g->sched)) {
    if (!(sigmas = dc_malloc(sizeof *sigmas * (size_t)steps))) return dc_nomem("the sigmas");
    dc_flow_linspace_sigmas(steps, sigmas);
  }
  /* Flux always computes mu (the scheduler uses it only when it shifts
   * dynamically); SD3 only when the config shifts dynamically */
  int has_mu = flux || dc_scheduler_flow_needs_mu(g->sched);
  dc_status *st = has_mu ? dc_flow_calculate_shift(g->sched, seq, &mu) : NULL;
  if (!st) st = dc_scheduler_set_timesteps_flow(g->sched, steps, sigmas, has_mu, mu);
  dc_free(sigmas);
  return st;
}

static int default_steps(const pipe_info *pi) { return is_dit(pi) ? 28 : 50; /* CogVideoX: 50 */ }

int dc_generate_default_steps(const drt_plan *p) {
  pipe_info pi;
  memset(&pi, 0, sizeof pi);
  dc_status *st = read_info(p, &pi);
  if (st) return dc_status_free(st), 0;
  return default_steps(&pi);
}

static dc_status *denoise(gen_ctx *g, dc_generate_result *r) {
  int steps = g->o->steps ? g->o->steps : default_steps(&g->pi);
  g->step_count = steps;
  if (is_dit(&g->pi) != dc_scheduler_is_flow(g->sched))
    return dc_error(DC_ERR_ARGUMENT, "scheduler %s %s a flow-matching scheduler, but this pipeline's %s one",
                    dc_scheduler_class(g->sched), dc_scheduler_is_flow(g->sched) ? "is" : "is not",
                    is_dit(&g->pi) ? "model needs" : "model cannot use");
  DC_TRY(is_dit(&g->pi) ? flow_timesteps(g, steps) : dc_scheduler_set_timesteps(g->sched, steps));
  initial_latents(g);
  int n = dc_scheduler_loop_length(g->sched);
  r->steps = n;
  for (int i = 0; i < n; i++) {
    progress(g, "denoise", i + 1, n);
    DC_TRY(dc_status_annotate(denoise_step(g, i), "denoising step %d of %d", i + 1, n));
  }
  return NULL;
}

/* [B, A, Bn, rest] -> [B, Bn, A, rest]: CogVideoX's permute(0, 2, 1, 3, 4)
 * of the latents (A frames, Bn channels) and of the decoded video (A = 3
 * colours, Bn frames). */
static void swap_axes(const float *in, float *out, int64_t batch, int64_t a, int64_t bn, int64_t rest) {
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < a; i++)
      for (int64_t j = 0; j < bn; j++)
        memcpy(out + ((b * bn + j) * a + i) * rest, in + ((b * a + i) * bn + j) * rest, (size_t)rest * sizeof *out);
}

/* The decoder's input: latents / scaling_factor (+ shift_factor); CogVideoX:
 * latents.permute(0, 2, 1, 3, 4) times 1 / scaling_factor (a product, as
 * its decode_latents writes it). */
static void decoder_input(gen_ctx *g) {
  if (is_video(&g->pi)) {
    float inv = (float)(1.0 / g->pi.scaling_factor);
    swap_axes(g->lat, g->x, g->pi.batch, g->pi.latent_frames, g->pi.channels, g->pi.lh * g->pi.lw);
    for (size_t i = 0; i < g->nlat; i++) g->x[i] = inv * g->x[i];
    return;
  }
  float sf = (float)g->pi.scaling_factor, shift = (float)g->pi.shift_factor;
  for (size_t i = 0; i < g->nlat; i++) g->x[i] = g->lat[i] / sf + shift; /* (Flux: unpacked before) */
}

/* The decoder's output as [B, frames, 3, H, W] (CogVideoX's [B, 3, frames,
 * H, W] permuted, as postprocess_video does; one frame for the images). */
static dc_status *read_video(gen_ctx *g, float *out, size_t n) {
  if (!is_video(&g->pi)) return read_output(g, "image", out, n);
  float *v = dc_malloc(n * sizeof *v);
  if (!v) return dc_nomem("the video");
  dc_status *st = read_output(g, "image", v, n);
  if (!st) swap_axes(v, out, g->pi.batch, 3, g->pi.frames, g->pi.height * g->pi.width);
  dc_free(v);
  return st;
}

/* The decoder, then (image / 2 + 0.5).clamp(0, 1). */
static dc_status *decode(gen_ctx *g, dc_generate_result *r) {
  decoder_input(g);
  progress(g, "decode", 0, 0);
  DC_TRY(set_f32(g, "latents", g->x, g->nlat));
  DC_TRY(run_phase(g, "decode"));
  size_t n = (size_t)(g->pi.batch * g->pi.frames * 3 * g->pi.height * g->pi.width);
  r->image = dc_malloc(n * sizeof(float));
  if (!r->image) return dc_nomem("the image");
  DC_TRY(read_video(g, r->image, n));
  for (size_t i = 0; i < n; i++) {
    float v = r->image[i] / 2.0f + 0.5f;
    r->image[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
  }
  return NULL;
}

static dc_status *run_all(gen_ctx *g, dc_generate_result *r) {
  double t0 = dc_now_seconds();
  DC_TRY(encode_prompts(g));
  double t1 = dc_now_seconds();
  DC_TRY(denoise(g, r));
  double t2 = dc_now_seconds();
  r->latents = dc_malloc(g->nlat * sizeof(float));
  if (!r->latents) return dc_nomem("the latents");
  if (g->pi.kind == KIND_FLUX) { /* the result and the decoder take [B, C, h, w] */
    flux_pack(g, g->lat, r->latents, 0);
    memcpy(g->lat, r->latents, g->nlat * sizeof(float));
  } else {
    memcpy(r->latents, g->lat, g->nlat * sizeof(float));
  }
  DC_TRY(decode(g, r));
  r->text_seconds = t1 - t0, r->denoise_seconds = t2 - t1, r->decode_seconds = dc_now_seconds() - t2;
  return NULL;
}

dc_status *dc_generate_latent_shape(const drt_plan *p, int64_t dims[5], int *rank) {
  pipe_info pi;
  DC_TRY(read_info(p, &pi));
  if (is_video(&pi)) {
    dims[0] = pi.batch, dims[1] = pi.latent_frames, dims[2] = pi.channels, dims[3] = pi.lh, dims[4] = pi.lw;
    *rank = 5;
    return NULL;
  }
  dims[0] = pi.batch, dims[1] = pi.channels, dims[2] = pi.lh, dims[3] = pi.lw, dims[4] = 1;
  *rank = 4;
  return NULL;
}

dc_status *dc_generate(drt_plan *p, const dc_generate_options *o, dc_generate_result *r) {
  memset(r, 0, sizeof *r);
  gen_ctx g = {.p = p, .o = o, .r = r};
  DC_TRY(read_info(p, &g.pi));
  if (o->steps < 0) return dc_error(DC_ERR_ARGUMENT, "--steps %d: must be at least 1", o->steps);
  /* the pipelines' guidance_scale defaults: SD 7.5, SDXL 5.0, Flux 3.5, SD3 7.0, CogVideoX 6 */
  static const double default_guidance[] = {7.5, 5.0, 3.5, 7.0, 6.0};
  g.guidance = isnan(o->guidance) ? default_guidance[g.pi.kind] : o->guidance;
  g.cfg = g.guidance > 1.0 && g.pi.has_uncond; /* Flux: guidance-distilled, no CFG (the scale goes to its embedder) */
  if (g.pi.kind == KIND_FLUX && o->negative_prompt)
    return dc_error(DC_ERR_ARGUMENT, "--negative-prompt: FluxPipeline uses a negative prompt only with true_cfg_scale > 1 "
                    "(a second transformer pass per step), which diffc does not run yet");
  if (has_t5(&g.pi) && o->guidance_rescale > 0)
    return dc_error(DC_ERR_ARGUMENT, "--guidance-rescale: %s has no guidance_rescale",
                    g.pi.kind == KIND_FLUX ? "FluxPipeline" : g.pi.kind == KIND_SD3 ? "StableDiffusion3Pipeline"
                                                                                    : "CogVideoXPipeline");
  if (!is_video(&g.pi) && o->use_dynamic_cfg)
    return dc_error(DC_ERR_ARGUMENT, "--dynamic-cfg: only CogVideoXPipeline has use_dynamic_cfg");
  if (is_video(&g.pi) && (o->has_original_size || o->has_crops || o->has_target_size))
    return dc_error(DC_ERR_ARGUMENT, "--original-size, --crops-coords-top-left and --target-size are SDXL's");
  r->guidance = g.guidance;
  r->batch = g.pi.batch, r->height = g.pi.height, r->width = g.pi.width;
  r->frames = is_video(&g.pi) ? g.pi.frames : 0; /* 0: an image pipeline (generate.h) */
  r->latent_frames = is_video(&g.pi) ? g.pi.latent_frames : 0;
  r->latent_channels = g.pi.channels, r->latent_h = g.pi.lh, r->latent_w = g.pi.lw;
  dc_torch_manual_seed(&g.gen, o->seed);
  dc_status *st = open_parts(&g);
  if (!st) snprintf(r->scheduler, sizeof r->scheduler, "%s", dc_scheduler_class(g.sched));
  if (!st) st = run_all(&g, r);
  close_parts(&g);
  if (st) dc_generate_result_free(r);
  return st;
}

void dc_generate_result_free(dc_generate_result *r) {
  dc_free(r->image);
  dc_free(r->latents);
  r->image = r->latents = NULL;
}
