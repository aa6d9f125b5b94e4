/* test_scheduler.c — diffc's schedulers against diffusers' own runs
 * (tests/fixtures/schedulers/cases.json, written by
 * tools/make_fixtures_scheduler.py), then every way a config or a call can
 * be refused, and allocation failures.
 *
 * Per case, the loop StableDiffusionPipeline runs: latents = randn(shape,
 * generator) * init_noise_sigma; per step x = scale_model_input(latents),
 * a stand-in model output x * coef[i] + table, step.  Checked exactly: the
 * timesteps as the UNet gets them (float32), init_noise_sigma and the
 * initial latents.  Checked within relative L2 1e-6: every step's scaled
 * input and sample, each step started from diffusers' previous sample
 * (see step_error for the scale), and the final sample of diffc's own
 * trajectory.  Reported: the worst step of the own trajectory and how many
 * of its steps equal diffusers' bit for bit.  Where they differ, torch
 * computes a sqrt, exp or log of a float32 tensor with MKL, which rounds
 * about 0.3% (sqrt), 1% (exp), 0.005% (log) of results to the other
 * neighbour; diffc rounds correctly (pipeline/torch_math.h).
 *
 * FlowMatchEulerDiscreteScheduler's cases set their timesteps as the Flux
 * or SD3 pipeline does (custom sigmas, mu from calculate_shift), and check
 * mu, the sigmas and the timesteps bit for bit.  CogVideoXDPMScheduler's
 * cases step as CogVideoXPipeline does (its previous x0 prediction and
 * timestep, which diffc's scheduler keeps itself); CogVideoXPipeline's
 * use_dynamic_cfg scale is checked against the pipeline's expression
 * (tests/fixtures/schedulers/cogvideox_dynamic_cfg.json). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/scheduler.h"
#include "testutil.h"

#define TOL 1e-6

static char *fixture(const char *name) { return dc_asprintf("%s/fixtures/schedulers/%s", tu_source_dir, name); }

/* A dc_text_files holding one scheduler_config.json with text. */
static void files_of(dc_text_files *fs, const char *origin, const char *text, size_t n) {
  memset(fs, 0, sizeof *fs);
  fs->origin = dc_strdup(origin);
  CHECK_OK(dc_text_files_add(fs, "scheduler_config.json", text, n));
}

static dc_status *parse_text(const char *text, const char *override, dc_scheduler **out) {
  dc_text_files fs;
  files_of(&fs, "cfg", text, strlen(text));
  dc_status *st = dc_scheduler_parse(&fs, override, out);
  dc_text_files_free(&fs);
  return st;
}

/* ---- the fixture cases ------------------------------------------------------ */

typedef struct {
  const char *cls;
  double forced, free_step, final; /* worst errors: see run_case */
  int steps, bitwise;              /* steps, and free-running steps equal to diffusers' bit for bit */
  int cases;
} class_stats;

enum { NCLASSES = 9 };
static class_stats stats[NCLASSES];

static class_stats *stats_for(const char *cls) {
  for (int i = 0; i < NCLASSES; i++) {
    if (!stats[i].cls) stats[i].cls = cls;
    if (!strcmp(stats[i].cls, cls)) return &stats[i];
  }
  return &stats[0];
}

static const float *tensor(const dc_st_file *f, const char *name, size_t n) {
  const dc_st_tensor *t = dc_st_find(f, name);
  if (!t || t->bytes != n * sizeof(float)) {
    fprintf(stderr, "  %s: tensor %s missing or of another size\n", f->file.path, name);
    return NULL;
  }
  return (const float *)(f->file.data + t->offset);
}

static const float *step_tensor(const dc_st_file *f, const char *what, int i, size_t n) {
  char key[32];
  snprintf(key, sizeof key, "%s.%d", what, i);
  return tensor(f, key, n);
}

static int bits_equal(const float *a, const float *b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (dc_f32_bits(a[i]) != dc_f32_bits(b[i])) return 0;
  return 1;
}

static double norm(const float *a, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * a[i];
  return sqrt(s);
}

/* ||got - want|| / max(||want||, ||before||): the error of one step
 * relative to the larger of its output and its input.  float32 arithmetic
 * on the input rounds at the input's scale, so a step that cancels (the
 * first step of a zero-terminal-SNR schedule goes from sigma 4096 to ~10)
 * cannot agree with diffusers more closely than that, whoever computes it;
 * for every other step the output is the larger and this is the plain
 * relative error. */
static double step_error(const float *got, const float *want, const float *before, size_t n) {
  double d = tu_rel_l2(got, want, n) * norm(want, n), scale = norm(want, n), in = norm(before, n);
  return d / (in > scale ? in : scale);
}

typedef struct {
  const char *name;
  size_t n;
  int loop;
  const dc_st_file *data;
  double forced, free_step, final, input;
  int worst_step, bitwise;
} run_state;

/* One loop.  forced: each step starts from diffusers' previous sample (so
 * every step is checked on its own); otherwise diffc runs its own
 * trajectory, as a pipeline does. */
static void run_loop(run_state *r, dc_scheduler *s, dc_torch_gen *gen, int forced) {
  size_t n = r->n;
  const float *table = tensor(r->data, "table", n), *coef = tensor(r->data, "coef", (size_t)r->loop);
  float *latents = malloc(n * sizeof(float)), *before = malloc(n * sizeof(float));
  float *x = malloc(n * sizeof(float)), *mo = malloc(n * sizeof(float));
  float ins = dc_scheduler_init_noise_sigma(s);
  dc_torch_randn(gen, latents, n);
  for (size_t j = 0; j < n; j++) latents[j] = latents[j] * ins;
  const float *want0 = tensor(r->data, "latents", n);
  CHECK(want0 && bits_equal(latents, want0, n));
  for (int i = 0; table && coef && i < r->loop; i++) {
    const float *want_in = step_tensor(r->data, "input", i, n), *want = step_tensor(r->data, "sample", i, n);
    if (!want_in || !want) break;
    if (forced && i > 0) memcpy(latents, step_tensor(r->data, "sample", i - 1, n), n * sizeof(float));
    memcpy(before, latents, n * sizeof(float));
    memcpy(x, latents, n * sizeof(float));
    dc_scheduler_scale_model_input(s, i, x, n);
    for (size_t j = 0; j < n; j++) mo[j] = x[j] * coef[i] + table[j];
    dc_status *st = dc_scheduler_step(s, i, mo, latents, n, gen);
    CHECK_OK(st);
    if (st) break;
    double ein = tu_rel_l2(x, want_in, n);
    if (forced) {
      double e = step_error(latents, want, before, n);
      if (ein > r->input) r->input = ein;
      if (e > r->forced) r->forced = e;
      if (!(e <= TOL && ein <= TOL))
        fprintf(stderr, "  %s step %d: input rel L2 %.3g, step error %.3g (tolerance %g)\n", r->name, i, ein, e, TOL);
      CHECK(e <= TOL && ein <= TOL);
    } else {
      double e = tu_rel_l2(latents, want, n);
      if (e > r->free_step) r->free_step = e, r->worst_step = i;
      r->bitwise += bits_equal(latents, want, n);
      if (i == r->loop - 1) r->final = e;
    }
  }
  free(latents);
  free(before);
  free(x);
  free(mo);
}

/* A flow case's sigmas (n + 1 of them), bit for bit. */
static void check_sigmas(const run_state *r, dc_scheduler *s) {
  if (!dc_st_find(r->data, "sigmas")) return;
  const float *sg = tensor(r->data, "sigmas", (size_t)r->loop + 1);
  int exact = sg != NULL;
  for (int i = 0; sg && i <= r->loop; i++) exact &= dc_f32_bits(dc_scheduler_sigma(s, i)) == dc_f32_bits(sg[i]);
  if (!exact)
    for (int i = 0; sg && i <= r->loop; i++)
      fprintf(stderr, "  %s sigma %d: %.9g, diffusers %.9g\n", r->name, i, dc_scheduler_sigma(s, i), sg[i]);
  CHECK(exact);
}

static void check_schedule(const run_state *r, dc_scheduler *s, const cJSON *c) {
  const float *ts = tensor(r->data, "timesteps", (size_t)r->loop), *ins = tensor(r->data, "init_noise_sigma", 1);
  CHECK(!strcmp(dc_scheduler_class(s), cJSON_GetObjectItem(c, "class")->valuestring));
  int exact = ts != NULL;
  for (int i = 0; ts && i < r->loop; i++) exact &= dc_f32_bits(dc_scheduler_timestep(s, i)) == dc_f32_bits(ts[i]);
  if (!exact) {
    fprintf(stderr, "  %s timesteps:", r->name);
    for (int i = 0; ts && i < r->loop; i++)
      fprintf(stderr, " %.9g/%.9g", dc_scheduler_timestep(s, i), ts[i]);
    fprintf(stderr, " (diffc/diffusers)\n");
  }
  CHECK(exact);
  CHECK(ins && dc_f32_bits(dc_scheduler_init_noise_sigma(s)) == dc_f32_bits(ins[0]));
  check_sigmas(r, s);
}

/* set_timesteps as the case's pipeline calls it: diffusers' plain
 * set_timesteps(steps), or as FluxPipeline (sigmas linspace(1, 1/N, N)
 * unless the config's use_flow_sigmas, mu always) or StableDiffusion3Pipeline
 * (mu only with use_dynamic_shifting) do.  mu is checked against the one
 * diffusers' calculate_shift gave, bit for bit. */
static dc_status *set_case_timesteps(dc_scheduler *s, const cJSON *c, int steps) {
  const cJSON *pipe = cJSON_GetObjectItem(c, "pipeline"), *want_mu = cJSON_GetObjectItem(c, "mu");
  if (!cJSON_IsString(pipe)) return dc_scheduler_set_timesteps(s, steps);
  int flux = !strcmp(pipe->valuestring, "flux"), has_mu = flux || dc_scheduler_flow_needs_mu(s);
  double mu = 0;
  if (has_mu) DC_TRY(dc_flow_calculate_shift(s, (int64_t)cJSON_GetObjectItem(c, "image_seq_len")->valuedouble, &mu));
  CHECK(has_mu ? cJSON_IsNumber(want_mu) && want_mu->valuedouble == mu : cJSON_IsNull(want_mu));
  if (!flux && !has_mu) return dc_scheduler_set_timesteps(s, steps);
  double *sigmas = NULL;
  if (flux && !dc_scheduler_flow_own_sigmas(s)) {
    sigmas = malloc(sizeof(double) * (size_t)steps);
    dc_flow_linspace_sigmas(steps, sigmas);
  }
  dc_status *st = dc_scheduler_set_timesteps_flow(s, steps, sigmas, has_mu, mu);
  free(sigmas);
  return st;
}

/* Both loops of one case on s: the timesteps first, then each loop from
 * set_timesteps (which restarts the scheduler) and a fresh generator. */
static void run_loops(run_state *r, dc_scheduler *s, const cJSON *c) {
  int steps = cJSON_GetObjectItem(c, "steps")->valueint;
  uint64_t seed = (uint64_t)cJSON_GetObjectItem(c, "seed")->valuedouble;
  for (int forced = 0; forced < 2; forced++) {
    CHECK_OK(set_case_timesteps(s, c, steps));
    if (dc_scheduler_loop_length(s) != r->loop) {
      CHECK(dc_scheduler_loop_length(s) == r->loop);
      return;
    }
    if (!forced) check_schedule(r, s, c);
    dc_torch_gen gen;
    dc_torch_manual_seed(&gen, seed);
    run_loop(r, s, &gen, forced);
  }
  CHECK(r->final <= TOL);
}

static void run_case(const cJSON *c, size_t n) {
  run_state r = {.name = cJSON_GetObjectItem(c, "name")->valuestring,
                 .n = n,
                 .loop = cJSON_GetObjectItem(c, "loop_length")->valueint};
  const cJSON *ov = cJSON_GetObjectItem(c, "class_override");
  char *cpath = fixture(cJSON_GetObjectItem(c, "config")->valuestring);
  char *dname = dc_asprintf("%s.safetensors", r.name), *dpath = fixture(dname);
  char *text = NULL;
  size_t len = 0;
  dc_text_files fs = {0};
  dc_st_file data;
  dc_scheduler *s = NULL;
  CHECK_OK(dc_file_read_all(cpath, &text, &len));
  files_of(&fs, cpath, text, len);
  CHECK_OK(dc_st_open(dpath, &data));
  r.data = &data;
  CHECK_OK(dc_scheduler_parse(&fs, cJSON_IsString(ov) ? ov->valuestring : NULL, &s));
  if (s) run_loops(&r, s, c);
  class_stats *cs = stats_for(cJSON_GetObjectItem(c, "class")->valuestring);
  if (r.forced > cs->forced) cs->forced = r.forced;
  if (r.free_step > cs->free_step) cs->free_step = r.free_step;
  if (r.final > cs->final) cs->final = r.final;
  cs->steps += r.loop, cs->bitwise += r.bitwise, cs->cases++;
  printf("  %-26s %2d steps: each step %.2g; own trajectory: worst step %.2g (step %d), final %.2g; %d/%d "
         "bitwise\n",
         r.name, r.loop, r.forced, r.free_step, r.worst_step, r.final, r.bitwise, r.loop);
  dc_scheduler_free(s);
  dc_st_close(&data);
  dc_text_files_free(&fs);
  dc_free(text);
  dc_free(cpath);
  dc_free(dname);
  dc_free(dpath);
}

static void test_cases(void) {
  printf("every case of tests/fixtures/schedulers/cases.json; errors are relative L2 (tolerance %g):\n"
         "each step from diffusers' previous sample (checked, relative to the step's larger of input and output),\n"
         "and diffc's own trajectory (its worst step reported, its final sample checked)\n",
         TOL);
  char *path = fixture("cases.json");
  dc_json_doc doc;
  CHECK_OK(dc_json_load(path, &doc));
  size_t n = 1;
  for (const cJSON *d = cJSON_GetObjectItem(doc.root, "shape")->child; d; d = d->next) n *= (size_t)d->valueint;
  int count = 0;
  for (const cJSON *c = cJSON_GetObjectItem(doc.root, "cases")->child; c; c = c->next, count++) run_case(c, n);
  CHECK(count >= 60);
  printf("per class: each step (checked), own trajectory's worst step and final sample, bitwise steps\n");
  for (int i = 0; i < NCLASSES && stats[i].cls; i++)
    printf("  %-32s %2d cases, %3d steps: %.2g; %.2g, %.2g; %d/%d\n", stats[i].cls, stats[i].cases, stats[i].steps,
           stats[i].forced, stats[i].free_step, stats[i].final, stats[i].bitwise, stats[i].steps);
  CHECK(stats[NCLASSES - 1].cls != NULL); /* all nine classes ran */
  dc_json_free(&doc);
  dc_free(path);
}

/* ---- refusals ------------------------------------------------------------- */

static void check_parse_err(const char *text, const char *override, const char *needle) {
  dc_scheduler *s = (dc_scheduler *)&s;
  CHECK_ERR(parse_text(text, override, &s), needle);
  CHECK(s == NULL);
}

static void test_config_errors(void) {
  printf("configs diffc refuses, with what and why\n");
  check_parse_err("{\"_class_name\": \"UniPCMultistepScheduler\"}", NULL,
                  "cfg/scheduler_config.json: \"_class_name\" is \"UniPCMultistepScheduler\", a scheduler diffc does "
                  "not implement (supported: PNDMScheduler, EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, "
                  "DDIMScheduler, DPMSolverMultistepScheduler, LMSDiscreteScheduler, FlowMatchEulerDiscreteScheduler, "
                  "CogVideoXDDIMScheduler, CogVideoXDPMScheduler)");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\"}", "HeunDiscreteScheduler",
                  "scheduler \"HeunDiscreteScheduler\" (for cfg/scheduler_config.json) is not one diffc implements "
                  "(supported: PNDMScheduler, ");
  check_parse_err("{\"beta_start\": 0.1}", NULL, "\"_class_name\" must name the scheduler class, got nothing");
  check_parse_err("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"algorithm_type\": \"sde-dpmsolver++\"}", NULL,
                  "cfg/scheduler_config.json: \"algorithm_type\" is \"sde-dpmsolver++\", which diffc does not support "
                  "for DPMSolverMultistepScheduler (supported: dpmsolver++, deis (diffusers' alias of dpmsolver++))");
  check_parse_err("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"solver_order\": 4}", NULL,
                  "\"solver_order\" is 4, which diffc does not support for DPMSolverMultistepScheduler (supported: 1, "
                  "2, 3)");
  check_parse_err("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"variance_type\": \"learned_range\"}", NULL,
                  "\"variance_type\" is \"learned_range\", which diffc does not support for "
                  "DPMSolverMultistepScheduler (supported: null)");
  check_parse_err("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"use_flow_sigmas\": true}", NULL,
                  "\"use_flow_sigmas\" is true, which diffc does not support");
  check_parse_err("{\"_class_name\": \"DDIMScheduler\", \"thresholding\": true}", NULL,
                  "\"thresholding\" is true, which diffc does not support for DDIMScheduler (supported: false)");
  check_parse_err("{\"_class_name\": \"EulerDiscreteScheduler\", \"use_beta_sigmas\": true}", NULL,
                  "\"use_beta_sigmas\" is true, which diffc does not support for EulerDiscreteScheduler (supported: "
                  "false (beta sigmas need scipy's beta distribution))");
  check_parse_err("{\"_class_name\": \"EulerAncestralDiscreteScheduler\", \"prediction_type\": \"sample\"}", NULL,
                  "\"prediction_type\" is \"sample\", which diffc does not support for "
                  "EulerAncestralDiscreteScheduler (supported: epsilon, v_prediction)");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"beta_schedule\": \"sigmoid\"}", NULL,
                  "\"beta_schedule\" is \"sigmoid\", which diffc does not support for PNDMScheduler (supported: "
                  "linear, scaled_linear, squaredcos_cap_v2)");
  check_parse_err("{\"_class_name\": \"LMSDiscreteScheduler\", \"timestep_spacing\": \"even\"}", NULL,
                  "\"timestep_spacing\" is \"even\", which diffc does not support for LMSDiscreteScheduler "
                  "(supported: linspace, leading, trailing)");
  check_parse_err("{\"_class_name\": \"EulerDiscreteScheduler\", \"use_karras_sigmas\": true, "
                  "\"use_exponential_sigmas\": true}",
                  NULL, "only one of \"use_karras_sigmas\", \"use_exponential_sigmas\" and \"use_beta_sigmas\"");
  /* the policy: unknown keys, nulls, types */
  check_parse_err("{\"_class_name\": \"EulerDiscreteScheduler\", \"use_karas_sigmas\": true}", NULL,
                  "cfg/scheduler_config.json: \"use_karas_sigmas\" is not an argument of EulerDiscreteScheduler that "
                  "diffc knows (the nearest it knows is \"use_karras_sigmas\")");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"beta_start\": null}", NULL,
                  "\"beta_start\" is null, which diffc does not support (give a value, or leave the key out for "
                  "diffusers' default, 0.0001)");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"num_train_timesteps\": \"1000\"}", NULL,
                  "\"num_train_timesteps\" must be an integer, got a string");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"num_train_timesteps\": 1}", NULL,
                  "\"num_train_timesteps\" is 1, which diffc does not support for PNDMScheduler (supported: an "
                  "integer from 2 to 1000000)");
  check_parse_err("{\"_class_name\": \"DDIMScheduler\", \"steps_offset\": -1}", NULL,
                  "\"steps_offset\" is -1, which diffc does not support");
  check_parse_err("{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": 3, \"trained_betas\": [0.1, 0.2]}",
                  NULL, "\"trained_betas\" must be null or a list of num_train_timesteps (3) numbers, got a list of "
                        "another length");
  check_parse_err("{\"_class_name\": \"DDIMScheduler\", \"num_train_timesteps\": 2, \"trained_betas\": [0.1, \"x\"]}",
                  NULL, "\"trained_betas\"[1] must be a number, got string");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"beta_start\": 1.5, \"beta_end\": 2.5}", NULL,
                  "cfg/scheduler_config.json: the betas (beta_start 1.5, beta_end 2.5) give alphas_cumprod[0] = -0.5, "
                  "outside [0, 1], where diffusers computes NaNs; diffc refuses them");
  check_parse_err("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"sigma_min\": \"0.1\"}", NULL,
                  "cfg/scheduler_config.json: \"sigma_min\" must be a number, got a string");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"_use_default_values\": \"beta_start\"}", NULL,
                  "\"_use_default_values\" must be a list of strings, got string");
  /* malformed JSON and files */
  check_parse_err("{\"_class_name\": \"PNDMScheduler\",}", NULL,
                  "cfg/scheduler_config.json:1:33: not valid JSON (unexpected character '}')");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\",\n \"x\": NaN}", NULL,
                  "cfg/scheduler_config.json:2:7: not valid JSON (unexpected character 'N')");
  check_parse_err("[1, 2]", NULL, "cfg/scheduler_config.json: expected a JSON object at the top level, got list");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"steps_offset\": 1, \"steps_offset\": 2}", NULL,
                  "key \"steps_offset\" appears twice");
  dc_text_files empty = {"models/x/scheduler", NULL, 0};
  dc_scheduler *s = NULL;
  CHECK_ERR(dc_scheduler_parse(&empty, NULL, &s), "models/x/scheduler/scheduler_config.json: not found");
}

/* What the policy lets through: other family classes' keys, bookkeeping,
 * -Infinity, _use_default_values. */
static void test_config_accepts(void) {
  printf("configs diffc takes: family keys, bookkeeping, -Infinity, _use_default_values\n");
  dc_scheduler *s = NULL;
  CHECK_OK(parse_text("{\"_class_name\": \"EulerDiscreteScheduler\", \"_diffusers_version\": \"0.19.0\", "
                      "\"skip_prk_steps\": true, \"clip_sample\": false, \"solver_order\": 9, \"rho\": 7.0}",
                      NULL, &s));
  dc_scheduler_free(s);
  CHECK_OK(parse_text("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"lambda_min_clipped\": -Infinity, "
                      "\"_name_or_path\": \"Infinity-\\\"Infinity\\\"\"}",
                      NULL, &s));
  dc_scheduler_free(s);
  /* the listed key takes the default: linspace instead of leading */
  CHECK_OK(parse_text("{\"_class_name\": \"EulerDiscreteScheduler\", \"timestep_spacing\": \"leading\", "
                      "\"_use_default_values\": [\"timestep_spacing\"]}",
                      NULL, &s));
  CHECK_OK(dc_scheduler_set_timesteps(s, 20));
  CHECK(dc_scheduler_timestep(s, 0) == 999.0f);
  dc_scheduler_free(s);
  CHECK_OK(parse_text("{\"_class_name\": \"EulerDiscreteScheduler\", \"timestep_spacing\": \"leading\"}", NULL, &s));
  CHECK_OK(dc_scheduler_set_timesteps(s, 20));
  CHECK(dc_scheduler_timestep(s, 0) == 950.0f);
  dc_scheduler_free(s);
  /* deis is diffusers' alias of dpmsolver++; PRK steps work */
  CHECK_OK(parse_text("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"algorithm_type\": \"deis\"}", NULL, &s));
  dc_scheduler_free(s);
  CHECK(strstr(dc_scheduler_class_names(), "LMSDiscreteScheduler") != NULL);
}

static void test_call_errors(void) {
  printf("calls diffc refuses\n");
  dc_scheduler *s = NULL;
  float x[4] = {1, 2, 3, 4}, mo[4] = {0};
  CHECK_OK(parse_text("{\"_class_name\": \"EulerAncestralDiscreteScheduler\"}", NULL, &s));
  CHECK_ERR(dc_scheduler_step(s, 0, mo, x, 4, NULL), "cfg/scheduler_config.json: step before set_timesteps");
  CHECK_ERR(dc_scheduler_set_timesteps(s, 0), "cfg/scheduler_config.json: 0 inference steps: need at least 1");
  CHECK_ERR(dc_scheduler_set_timesteps(s, -3), "-3 inference steps: need at least 1");
  CHECK_ERR(dc_scheduler_set_timesteps(s, 1001), "1001 inference steps are more than num_train_timesteps (1000)");
  CHECK_OK(dc_scheduler_set_timesteps(s, 5));
  CHECK_ERR(dc_scheduler_step(s, 1, mo, x, 4, NULL), "step 1 called where step 0 of 5 comes next");
  CHECK_ERR(dc_scheduler_step(s, 0, mo, x, 4, NULL), "draws noise each step and needs a generator");
  dc_torch_gen g;
  dc_torch_manual_seed(&g, 3);
  CHECK_OK(dc_scheduler_step(s, 0, mo, x, 4, &g));
  CHECK_ERR(dc_scheduler_step(s, 1, mo, x, 3, &g), "step 1 on 3 values after steps on 4");
  /* set_timesteps restarts the loop */
  CHECK_OK(dc_scheduler_set_timesteps(s, 5));
  CHECK_OK(dc_scheduler_step(s, 0, mo, x, 3, &g));
  dc_scheduler_free(s);

  CHECK_OK(parse_text("{\"_class_name\": \"PNDMScheduler\"}", NULL, &s));
  CHECK_ERR(dc_scheduler_set_timesteps(s, 3),
            "PNDMScheduler with \"skip_prk_steps\": false needs at least 4 steps (diffusers fails below that), got 3");
  CHECK_OK(dc_scheduler_set_timesteps(s, 4));
  CHECK(dc_scheduler_loop_length(s) == 13);
  dc_scheduler_free(s);

  CHECK_OK(parse_text("{\"_class_name\": \"DDIMScheduler\", \"steps_offset\": 990}", NULL, &s));
  CHECK_ERR(dc_scheduler_set_timesteps(s, 10),
            "timestep 1890 (with \"steps_offset\" 990) is outside the 1000 training timesteps, which diffusers "
            "indexes alphas_cumprod with");
  dc_scheduler_free(s);

  /* diffusers' cosine-schedule Karras timesteps start 998, 998: it starts at
   * index 1 and fails at the end; diffc refuses */
  CHECK_OK(parse_text("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"use_karras_sigmas\": true, "
                      "\"beta_schedule\": \"squaredcos_cap_v2\"}",
                      NULL, &s));
  CHECK_ERR(dc_scheduler_set_timesteps(s, 9),
            "9 steps give a first timestep that repeats, so diffusers starts at step index 1 and runs past the end "
            "of its sigmas");
  CHECK_OK(dc_scheduler_set_timesteps(s, 3));
  CHECK(dc_scheduler_timestep(s, -1) == 0.0f && dc_scheduler_timestep(s, 3) == 0.0f);
  dc_scheduler_free(s);

  /* a beta of 1 makes the last sigma infinite */
  CHECK_OK(parse_text("{\"_class_name\": \"EulerDiscreteScheduler\", \"beta_end\": 1.0}", NULL, &s));
  CHECK_ERR(dc_scheduler_set_timesteps(s, 10),
            "10 steps give sigma 0 = inf (the betas reach 1, or the sigma options are out of range), where diffusers "
            "computes NaNs; diffc refuses it");
  CHECK(dc_scheduler_loop_length(s) == 0);
  dc_scheduler_free(s);
}

/* ---- flow matching ------------------------------------------------------------ */

#define FLUX_DEV                                                                                              \
  "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"base_image_seq_len\": 256, \"base_shift\": 0.5, " \
  "\"max_image_seq_len\": 4096, \"max_shift\": 1.15, \"shift\": 3.0, \"use_dynamic_shifting\": true}"
#define FLOW_CLASS "{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\""

static void test_flow_config_errors(void) {
  printf("flow-matching configs diffc refuses, and switches between the kinds of model\n");
  check_parse_err(FLOW_CLASS ", \"shfit\": 3.0}", NULL,
                  "cfg/scheduler_config.json: \"shfit\" is not an argument of FlowMatchEulerDiscreteScheduler that "
                  "diffc knows (the nearest it knows is \"shift\")");
  check_parse_err(FLOW_CLASS ", \"use_beta_sigmas\": true}", NULL,
                  "\"use_beta_sigmas\" is true, which diffc does not support for FlowMatchEulerDiscreteScheduler "
                  "(supported: false (beta sigmas need scipy's beta distribution))");
  check_parse_err(FLOW_CLASS ", \"use_karras_sigmas\": true, \"use_exponential_sigmas\": true}", NULL,
                  "only one of \"use_karras_sigmas\", \"use_exponential_sigmas\" and \"use_beta_sigmas\"");
  check_parse_err(FLOW_CLASS ", \"time_shift_type\": \"cubic\"}", NULL,
                  "\"time_shift_type\" is \"cubic\", which diffc does not support for FlowMatchEulerDiscreteScheduler "
                  "(supported: exponential, linear)");
  check_parse_err(FLOW_CLASS ", \"base_shift\": null}", NULL,
                  "\"base_shift\" is null, which diffc does not support (give a value, or leave the key out for "
                  "diffusers' default, 0.5)");
  check_parse_err(FLOW_CLASS ", \"shift_terminal\": \"0.1\"}", NULL,
                  "\"shift_terminal\" must be a number, got a string");
  check_parse_err(FLOW_CLASS ", \"max_image_seq_len\": -5}", NULL,
                  "\"max_image_seq_len\" is -5, which diffc does not support for FlowMatchEulerDiscreteScheduler "
                  "(supported: an integer from 0 to 1000000000)");
  check_parse_err(FLOW_CLASS ", \"num_train_timesteps\": 0}", NULL, "\"num_train_timesteps\" is 0");
  check_parse_err(FLOW_CLASS ", \"use_flow_sigmas\": 1}", NULL,
                  "cfg/scheduler_config.json: \"use_flow_sigmas\" must be true or false, got 1");
  /* DDPM-type classes from a flow config, and the other way round */
  check_parse_err(FLUX_DEV, "EulerDiscreteScheduler",
                  "scheduler \"EulerDiscreteScheduler\" (for cfg/scheduler_config.json) samples noise-prediction "
                  "models, but the config is a flow-matching scheduler's (\"_class_name\" "
                  "\"FlowMatchEulerDiscreteScheduler\"): a model trained for one cannot be sampled by the other, so "
                  "diffc refuses the switch (use FlowMatchEulerDiscreteScheduler)");
  check_parse_err("{\"_class_name\": \"PNDMScheduler\", \"steps_offset\": 1}", "FlowMatchEulerDiscreteScheduler",
                  "scheduler \"FlowMatchEulerDiscreteScheduler\" (for cfg/scheduler_config.json) samples flow-matching "
                  "models, but the config is a noise-prediction scheduler's (\"_class_name\" \"PNDMScheduler\")");
  check_parse_err("{\"_class_name\": \"FlowMatchHeunDiscreteScheduler\"}", "DDIMScheduler",
                  "the config is a flow-matching scheduler's");
  check_parse_err("{\"shift\": 3.0}", "FlowMatchEulerDiscreteScheduler", "(\"_class_name\" absent)");
}

static void test_flow_accepts(void) {
  printf("flow-matching configs and calls diffc takes\n");
  dc_scheduler *s = NULL;
  /* SANA's flow-prediction DPM-Solver config builds the flow class; family keys dropped, but
   * use_flow_sigmas stays in the config (hidden), where FluxPipeline reads it */
  CHECK_OK(parse_text("{\"_class_name\": \"DPMSolverMultistepScheduler\", \"prediction_type\": \"flow_prediction\", "
                      "\"use_flow_sigmas\": true, \"flow_shift\": 3.0, \"solver_order\": 2}",
                      "FlowMatchEulerDiscreteScheduler", &s));
  CHECK(dc_scheduler_is_flow(s) && !dc_scheduler_flow_needs_mu(s) && dc_scheduler_flow_own_sigmas(s));
  dc_scheduler_free(s);
  CHECK_OK(parse_text(FLOW_CLASS ", \"shift_terminal\": null, \"use_flow_sigmas\": null, \"rho\": 7.0}", NULL, &s));
  CHECK(!dc_scheduler_flow_own_sigmas(s));
  /* no shift: linspace(1000, 1, 4) / 1000 */
  CHECK_OK(dc_scheduler_set_timesteps(s, 4));
  CHECK(dc_scheduler_loop_length(s) == 4 && dc_scheduler_timestep(s, 0) == 1000.0f &&
        dc_scheduler_timestep(s, 3) == 1.0f && dc_scheduler_timestep(s, 4) == 0.0f);
  CHECK(dc_scheduler_sigma(s, 0) == 1.0f && dc_scheduler_sigma(s, 4) == 0.0f && dc_scheduler_sigma(s, 5) == 0.0f &&
        dc_scheduler_sigma(s, -1) == 0.0f);
  CHECK(dc_scheduler_init_noise_sigma(s) == 1.0f);
  float x[3] = {1, 2, 3}, v[3] = {0.5f, -1, 2};
  dc_scheduler_scale_model_input(s, 0, x, 3);
  CHECK(x[0] == 1 && x[1] == 2 && x[2] == 3);
  /* sigma 1 -> 0.667: x + (0.667 - 1) v */
  CHECK_OK(dc_scheduler_step(s, 0, v, x, 3, NULL));
  float dt = dc_scheduler_sigma(s, 1) - 1.0f;
  CHECK(x[0] == 1 + dt * 0.5f && x[1] == 2 - dt && x[2] == 3 + dt * 2);
  dc_scheduler_free(s);
  double lin[4];
  dc_flow_linspace_sigmas(4, lin);
  CHECK(lin[0] == 1.0 && lin[1] == 0.75 && lin[2] == 0.5 && lin[3] == 0.25);
  dc_flow_linspace_sigmas(1, lin);
  CHECK(lin[0] == 1.0);
  /* more steps than training timesteps are fine for flow matching */
  CHECK_OK(parse_text(FLOW_CLASS ", \"num_train_timesteps\": 10, \"shift\": 2.0}", NULL, &s));
  CHECK_OK(dc_scheduler_set_timesteps(s, 25));
  CHECK(dc_scheduler_loop_length(s) == 25);
  dc_scheduler_free(s);
}

static void test_flow_call_errors(void) {
  printf("flow-matching calls diffc refuses\n");
  dc_scheduler *s = NULL;
  double mu = 0, sig[3] = {0.5, 0.5, 0.2};
  float x[2] = {1, 2}, v[2] = {0};
  CHECK_OK(parse_text(FLUX_DEV, NULL, &s));
  CHECK(dc_scheduler_flow_needs_mu(s));
  CHECK_ERR(dc_scheduler_set_timesteps(s, 4),
            "cfg/scheduler_config.json: FlowMatchEulerDiscreteScheduler with \"use_dynamic_shifting\": true needs "
            "mu (the shift for the image's size, which the pipeline computes) to set its timesteps, as diffusers does");
  CHECK_ERR(dc_scheduler_set_timesteps_flow(s, 4, NULL, 0, 0), "needs mu");
  CHECK(dc_scheduler_loop_length(s) == 0);
  CHECK_ERR(dc_scheduler_set_timesteps_flow(s, 0, NULL, 1, 0.5), "0 inference steps: need at least 1");
  CHECK_ERR(dc_scheduler_set_timesteps_flow(s, 2000000, NULL, 1, 0.5),
            "2000000 inference steps: diffc supports at most 1000000");
  CHECK_OK(dc_flow_calculate_shift(s, 4096, &mu));
  CHECK(mu == 1.15);
  /* e^1000 overflows: NaN sigmas */
  CHECK_ERR(dc_scheduler_set_timesteps_flow(s, 3, NULL, 1, 1000.0),
            "cfg/scheduler_config.json: 3 steps give sigma 0 = nan, where diffusers computes NaNs or infinities (check "
            "mu, \"shift\", \"shift_terminal\" and any sigmas given); diffc refuses it");
  CHECK(dc_scheduler_loop_length(s) == 0);
  CHECK_ERR(dc_scheduler_step(s, 0, v, x, 2, NULL), "step before set_timesteps");
  CHECK_ERR(dc_scheduler_set_timesteps_flow(s, 3, sig, 1, 0.5),
            "3 steps give a first timestep (");
  dc_scheduler_free(s);

  CHECK_OK(parse_text(FLOW_CLASS ", \"base_image_seq_len\": 256, \"max_image_seq_len\": 256}", NULL, &s));
  CHECK_ERR(dc_flow_calculate_shift(s, 1024, &mu),
            "cfg/scheduler_config.json: \"base_image_seq_len\" and \"max_image_seq_len\" are both 256, and the shift "
            "for an image size divides by their difference (diffusers fails with ZeroDivisionError)");
  dc_scheduler_free(s);

  CHECK_OK(parse_text(FLOW_CLASS ", \"stochastic_sampling\": true}", NULL, &s));
  CHECK_OK(dc_scheduler_set_timesteps(s, 3));
  CHECK_ERR(dc_scheduler_step(s, 0, v, x, 2, NULL),
            "FlowMatchEulerDiscreteScheduler with \"stochastic_sampling\" draws noise each step and needs a generator");
  dc_scheduler_free(s);

  /* the flow calls on a noise-prediction scheduler */
  CHECK_OK(parse_text("{\"_class_name\": \"EulerDiscreteScheduler\"}", NULL, &s));
  CHECK(!dc_scheduler_is_flow(s) && !dc_scheduler_flow_needs_mu(s) && !dc_scheduler_flow_own_sigmas(s));
  CHECK_ERR(dc_flow_calculate_shift(s, 1024, &mu),
            "cfg/scheduler_config.json: calculate_shift: EulerDiscreteScheduler is not a flow-matching scheduler");
  CHECK_ERR(dc_scheduler_set_timesteps_flow(s, 4, NULL, 1, 0.5),
            "EulerDiscreteScheduler is not a flow-matching scheduler");
  dc_scheduler_free(s);
  CHECK_OK(parse_text("{\"_class_name\": \"DDIMScheduler\"}", NULL, &s));
  CHECK_OK(dc_scheduler_set_timesteps(s, 4));
  CHECK(dc_scheduler_sigma(s, 0) == 0.0f);
  dc_scheduler_free(s);
}

/* ---- allocation failures ---------------------------------------------------- */

/* parse, set_timesteps, every step: with the nth allocation failing, an
 * error (or success once n is past the last allocation), nothing leaked
 * (the sanitizer build checks). */
static dc_status *whole_run(const dc_text_files *fs, int steps) {
  dc_scheduler *s = NULL;
  float x[40], mo[40];
  for (int j = 0; j < 40; j++) x[j] = (float)j / 40, mo[j] = (float)(j % 7) / 7;
  dc_torch_gen g;
  dc_torch_manual_seed(&g, 1);
  dc_status *st = dc_scheduler_parse(fs, NULL, &s);
  if (!st) st = dc_scheduler_set_timesteps(s, steps);
  for (int i = 0; !st && i < dc_scheduler_loop_length(s); i++) {
    dc_scheduler_scale_model_input(s, i, x, 40);
    st = dc_scheduler_step(s, i, mo, x, 40, &g);
  }
  dc_scheduler_free(s);
  return st;
}

static void test_alloc_failures(void) {
  printf("allocation failures: every N\n");
  static const struct {
    const char *config;
    int steps;
  } cases[] = {
      {"{\"_class_name\": \"PNDMScheduler\", \"skip_prk_steps\": true}", 6},
      {"{\"_class_name\": \"PNDMScheduler\"}", 5},
      {"{\"_class_name\": \"DPMSolverMultistepScheduler\", \"use_karras_sigmas\": true, \"solver_order\": 3}", 6},
      {"{\"_class_name\": \"LMSDiscreteScheduler\", \"num_train_timesteps\": 4, \"trained_betas\": [0.1, 0.2, 0.3, "
       "0.4]}",
       3},
      {"{\"_class_name\": \"EulerAncestralDiscreteScheduler\", \"_use_default_values\": [\"beta_end\"]}", 4},
      {"{\"_class_name\": \"EulerDiscreteScheduler\", \"interpolation_type\": \"log_linear\"}", 4},
      {"{\"_class_name\": \"DDIMScheduler\", \"rescale_betas_zero_snr\": true}", 4},
      {FLOW_CLASS ", \"shift\": 3.0, \"use_karras_sigmas\": true, \"stochastic_sampling\": true}", 4},
      {"{\"_class_name\": \"CogVideoXDPMScheduler\", \"rescale_betas_zero_snr\": true}", 4},
      {"{\"_class_name\": \"CogVideoXDDIMScheduler\", \"beta_schedule\": \"linear\"}", 3},
  };
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    dc_text_files fs;
    files_of(&fs, "cfg", cases[k].config, strlen(cases[k].config));
    long n = 0;
    for (;; n++) {
      dc_alloc_fail_after(n);
      dc_status *st = whole_run(&fs, cases[k].steps);
      dc_alloc_fail_after(-1);
      if (!st) break;
      if (dc_status_code_of(st) != DC_ERR_NOMEM) fprintf(stderr, "  at %ld: %s\n", n, dc_status_message(st));
      CHECK(dc_status_code_of(st) == DC_ERR_NOMEM);
      dc_status_free(st);
      if (n > 100000) break;
    }
    printf("  %s, %d steps: succeeds once %ld allocations can\n", cases[k].config, cases[k].steps, n);
    CHECK(n > 3 && n <= 100000);
    dc_text_files_free(&fs);
  }
}

/* ---- CogVideoX --------------------------------------------------------------- */

static void test_cogvideox_dynamic_cfg(void) {
  char *path = fixture("cogvideox_dynamic_cfg.json");
  dc_json_doc doc;
  CHECK_OK(dc_json_load(path, &doc));
  int count = 0;
  double worst = 0;
  for (const cJSON *v = doc.root ? cJSON_GetObjectItem(doc.root, "values")->child : NULL; v; v = v->next, count++) {
    double gs = cJSON_GetObjectItem(v, "guidance_scale")->valuedouble;
    int steps = cJSON_GetObjectItem(v, "num_inference_steps")->valueint;
    int64_t t = (int64_t)cJSON_GetObjectItem(v, "timestep")->valuedouble;
    double want = cJSON_GetObjectItem(v, "scale")->valuedouble, got = dc_cogvideox_dynamic_guidance(gs, steps, t);
    double e = fabs(got - want) / fabs(want);
    if (e > worst) worst = e;
    if (!(e <= 1e-15)) fprintf(stderr, "  guidance %g, %d steps, t %lld: %.17g, diffusers %.17g\n", gs, steps,
                               (long long)t, got, want);
    CHECK(e <= 1e-15);
  }
  printf("CogVideoXPipeline's use_dynamic_cfg scale: %d values, worst relative error %.2g\n", count, worst);
  CHECK(count >= 60);
  dc_json_free(&doc);
  dc_free(path);
}

/* What the CogVideoX classes refuse or take that the fixtures do not show. */
static void test_cogvideox_configs(void) {
  printf("CogVideoX configs and calls\n");
  /* snr_shift_scale dropped by from_config for another class: refused unless it changes nothing */
  check_parse_err("{\"_class_name\": \"CogVideoXDDIMScheduler\", \"snr_shift_scale\": 3.0}", "DDIMScheduler",
                  "cfg/scheduler_config.json: \"snr_shift_scale\" is 3, a shift of the training schedule that "
                  "DDIMScheduler does not take");
  dc_scheduler *s = NULL;
  CHECK_OK(parse_text("{\"_class_name\": \"CogVideoXDDIMScheduler\", \"snr_shift_scale\": 1.0}", "DDIMScheduler", &s));
  dc_scheduler_free(s);
  /* SD's PNDM config (its family's keys dropped) as CogVideoXDDIMScheduler, as from_config takes it */
  CHECK_OK(parse_text("{\"_class_name\": \"PNDMScheduler\", \"skip_prk_steps\": true}", "CogVideoXDDIMScheduler", &s));
  dc_scheduler_free(s);
  check_parse_err("{\"_class_name\": \"CogVideoXDPMScheduler\", \"prediction_type\": \"flow_prediction\"}", NULL,
                  "\"prediction_type\" is \"flow_prediction\", which diffc does not support for CogVideoXDPMScheduler "
                  "(supported: epsilon, sample, v_prediction)");
  check_parse_err("{\"_class_name\": \"CogVideoXDDIMScheduler\", \"snr_shift_scale\": \"3\"}", NULL,
                  "\"snr_shift_scale\"");
  check_parse_err("{\"_class_name\": \"CogVideoXDDIMScheduler\", \"snr_shift\": 3.0}", NULL,
                  "\"snr_shift\" is not an argument of CogVideoXDDIMScheduler that diffc knows (the nearest it knows is "
                  "\"snr_shift_scale\")");
  /* the DPM step draws noise: no generator, no step */
  float x[4] = {1, 2, 3, 4}, mo[4] = {0};
  CHECK_OK(parse_text("{\"_class_name\": \"CogVideoXDPMScheduler\"}", NULL, &s));
  CHECK_OK(dc_scheduler_set_timesteps(s, 4));
  CHECK(dc_scheduler_init_noise_sigma(s) == 1.0f && dc_scheduler_timestep(s, 0) == 750.0f);
  CHECK_ERR(dc_scheduler_step(s, 0, mo, x, 4, NULL),
            "cfg/scheduler_config.json: CogVideoXDPMScheduler draws noise each step and needs a generator");
  dc_scheduler_free(s);
  CHECK_OK(parse_text("{\"_class_name\": \"CogVideoXDDIMScheduler\", \"steps_offset\": 600}", NULL, &s));
  CHECK_OK(dc_scheduler_set_timesteps(s, 1)); /* 600 */
  CHECK_ERR(dc_scheduler_set_timesteps(s, 2), "timestep 1100 (with \"steps_offset\" 600) is outside the 1000");
  dc_scheduler_free(s);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_cases();
  test_cogvideox_dynamic_cfg();
  test_cogvideox_configs();
  test_config_errors();
  test_config_accepts();
  test_call_errors();
  test_flow_config_errors();
  test_flow_accepts();
  test_flow_call_errors();
  test_alloc_failures();
  return tu_finish();
}
