/* test_budget.c — diffc --memory-budget (passes/budget.c through the
 * driver, driver/budget_choose.c) on fixtures: unet_tiny, vae_tiled's
 * decoder at a size where tiling and slicing change the graph, and the SD
 * pipeline fixture.  For each:
 *  - the search's smallest and largest device peaks; budgets at both and
 *    halfway between each give a plan that loads and runs under
 *    drt_options.device_memory = the budget on the reference backend, whose
 *    measured arena peak + resident weights stay within it, and whose
 *    outputs equal bit for bit the plan without memory options (built with
 *    the same VAE options: tiling changes the numbers, offload does not);
 *  - a larger budget never gives a slower predicted plan;
 *  - a budget one byte below the smallest peak is an error naming that
 *    peak's options;
 *  - options the search chooses are refused beside --memory-budget;
 *  - --allow-cast lets a budget below every fp32 plan's peak fit (unet_tiny),
 *    and that plan runs within it, near the fp32 plan (the bf16 bound);
 *  - the JSON's per-class predicted seconds of the choice: every class that
 *    takes time is there, and the kernel classes plus the time kernels waited
 *    for copies add up to the predicted time (one device: the compute stream
 *    ends each phase). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "runtime/diffrun.h"
#include "testutil.h"

typedef struct {
  const char *name, *model, *entry;
  dc_input_shape shapes[3];
  int nshapes;
} fixture;

static dc_compile_options options_of(const fixture *fx, char *model) {
  dc_compile_options o = {.model = model, .entry = fx->entry, .shapes = fx->shapes, .nshapes = fx->nshapes};
  return o;
}

/* Runs plan with seeded random inputs under a modelled device of budget
 * bytes (0: none); *p is left loaded for the outputs. */
static dc_status *run_plan(const char *plan, uint64_t budget, drt_plan **p, drt_stats *s) {
  drt_options ro = {.backend = "reference", .device_memory = budget};
  DC_TRY(drt_load(plan, &ro, p));
  drt_set_random_inputs(*p, 7);
  return drt_run(*p, s);
}

static int same_outputs(drt_plan *a, drt_plan *b) {
  int same = drt_output_count(a) == drt_output_count(b);
  for (int i = 0; same && i < drt_output_count(a); i++) {
    const drt_tensor_info *info = drt_output_info(a, i);
    size_t na = 0, nb = 0;
    const float *x = drt_output(a, info->name, &na), *y = drt_output(b, info->name, &nb);
    same = x && y && na == nb && memcmp(x, y, na * sizeof *x) == 0;
  }
  return same;
}

/* The plan without memory options for each VAE option pair (compiled once). */
static char *reference_plan(const fixture *fx, const char *model, int slicing, int tiling) {
  static char made[4][64];
  char name[96];
  snprintf(name, sizeof name, "ref-%d%d.dplan", slicing, tiling);
  char *ref = tu_path(name);
  char *key = made[slicing * 2 + tiling];
  if (strcmp(key, fx->name) != 0) {
    dc_compile_options plain = options_of(fx, (char *)model);
    plain.vae_slicing = slicing, plain.vae_tiling = tiling;
    CHECK_OK(dc_compile(&plain, ref, NULL));
    snprintf(key, 64, "%s", fx->name);
  }
  return ref;
}

/* One budget: compile with it, run under it, compare with the plan of the
 * chosen VAE options alone.  Returns the predicted seconds of the choice. */
static double check_budget(const fixture *fx, dc_compile_options o, uint64_t budget) {
  o.memory_budget = budget;
  dc_compile_options eff;
  dc_buf json;
  dc_buf_init(&json);
  dc_budget_result res;
  double predicted = -1;
  CHECK_OK(dc_compile_budget(&o, &eff, &json, &res));
  dc_buf_deinit(&json);
  if (res.chosen >= 0) predicted = res.c[res.chosen].seconds;
  dc_budget_result_free(&res);
  char *plan = tu_path("budget.dplan"), *ref = reference_plan(fx, o.model, eff.vae_slicing, eff.vae_tiling);
  CHECK_OK(dc_compile(&o, plan, NULL));
  drt_plan *p = NULL, *q = NULL;
  drt_stats s = {0}, t = {0};
  CHECK_OK(run_plan(plan, budget, &p, &s));
  CHECK_OK(run_plan(ref, 0, &q, &t));
  if (p && q) {
    uint64_t used = s.device_peak_bytes + s.weight_bytes;
    CHECK(used <= budget);
    CHECK(same_outputs(p, q));
    printf("%s: budget %llu B: %s%s%s: measured %llu B (peak %llu + weights %llu), predicted %.3g ms, outputs equal\n",
           fx->name, (unsigned long long)budget, dc_offload_name(eff.memory.offload),
           eff.vae_slicing ? " +slicing" : "", eff.vae_tiling ? " +tiling" : "", (unsigned long long)used,
           (unsigned long long)s.device_peak_bytes, (unsigned long long)s.weight_bytes, predicted * 1e3);
  }
  drt_destroy(p);
  drt_destroy(q);
  free(plan);
  free(ref);
  return predicted;
}

/* The choice's "class_seconds" in the budget JSON against its prediction. */
static void check_class_seconds(const char *json, const dc_budget_result *res) {
  cJSON *j = cJSON_Parse(json);
  const cJSON *ch = cJSON_GetObjectItemCaseSensitive(j, "chosen");
  const cJSON *cs = cJSON_GetObjectItemCaseSensitive(ch, "class_seconds");
  double kernels = 0;
  int found = 0;
  for (int k = 0; k < DC_COST_NONE; k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cs, dc_cost_class_name((dc_cost_class)k));
    if (!cJSON_IsNumber(v) || v->valuedouble < 0) continue;
    found++;
    if (k != DC_COST_COPY) kernels += v->valuedouble;
  }
  CHECK(found == DC_COST_NONE);
  const dc_budget_candidate *c = &res->c[res->chosen];
  CHECK(kernels > 0 && fabs(kernels + c->copy_stall_seconds - c->seconds) <= 1e-5 * c->seconds);
  cJSON_Delete(j);
}

static void check_fixture(const fixture *fx) {
  char *model = dc_path_join(tu_source_dir, fx->model);
  dc_compile_options o = options_of(fx, model);
  /* every candidate's peak, from a search under a budget everything fits */
  o.memory_budget = UINT64_MAX / 2;
  dc_compile_options eff;
  dc_buf json;
  dc_buf_init(&json);
  dc_budget_result res;
  CHECK_OK(dc_compile_budget(&o, &eff, &json, &res));
  dc_buf_u8(&json, 0); /* the JSON as a C string (dc_compile_budget leaves it unterminated, as compile.c expects) */
  CHECK(strstr((const char *)json.data, "\"runners_up\":[") != NULL);
  check_class_seconds((const char *)json.data, &res);
  dc_buf_deinit(&json);
  uint64_t lo = UINT64_MAX, hi = 0;
  const char *smallest = "";
  char smallest_flags[256] = "";
  for (int i = 0; i < res.n; i++) {
    if (res.c[i].device_bytes < lo) lo = res.c[i].device_bytes, smallest = res.c[i].flags;
    if (res.c[i].device_bytes > hi) hi = res.c[i].device_bytes;
  }
  snprintf(smallest_flags, sizeof smallest_flags, "%s", smallest);
  printf("%s: %d candidates, device peaks %llu .. %llu B\n", fx->name, res.n, (unsigned long long)lo,
         (unsigned long long)hi);
  CHECK(res.n > 3 && lo < hi);
  dc_budget_result_free(&res);
  double last = -1;
  for (int k = 0; k <= 2; k++) { /* the smallest peak, halfway, the largest */
    double t = check_budget(fx, o, lo + (hi - lo) * (uint64_t)k / 2);
    CHECK(t > 0);
    if (last >= 0) CHECK(t <= last); /* more memory never predicts a slower plan */
    last = t;
  }
  o.memory_budget = lo - 1;
  char *plan = tu_path("none.dplan");
  dc_status *st = dc_compile(&o, plan, NULL);
  CHECK(st && strstr(dc_status_message(st), smallest_flags));
  CHECK_ERR(st, "no plan fits; the smallest device peak diffc can reach is");
  CHECK(!dc_file_exists(plan));
  free(plan);
  dc_free(model);
}

/* The search's options beside it are refused, naming the option. */
static void check_refusals(void) {
  char *model = dc_path_join(tu_source_dir, "fixtures/unet_tiny/model"), *plan = tu_path("r.dplan");
  dc_compile_options o = {.model = model, .memory_budget = 1 << 30};
  o.memory.offload = DC_OFFLOAD_SEQUENTIAL;
  CHECK_ERR(dc_compile(&o, plan, NULL), "--offload with --memory-budget: the budget search chooses");
  o.memory.offload = DC_OFFLOAD_NONE, o.memory.storage = DT_BF16;
  CHECK_ERR(dc_compile(&o, plan, NULL), "drop --storage-dtype, or drop --memory-budget");
  o.memory.storage = DT_F32, o.memory_budget = 0, o.nallow_cast = 1, o.allow_cast[0] = DT_BF16;
  CHECK_ERR(dc_compile(&o, plan, NULL), "--allow-cast applies to --memory-budget");
  o.nallow_cast = 0, o.memory_budget = 1 << 30, o.calibration = "/nonexistent/cal.json";
  CHECK_ERR(dc_compile(&o, plan, NULL), "/nonexistent/cal.json");
  CHECK(!dc_file_exists(plan));
  free(plan);
  dc_free(model);
}

/* --allow-cast bf16: the smallest fp32 peak minus a byte fits only by casting. */
static void check_allow_cast(const fixture *fx) {
  char *model = dc_path_join(tu_source_dir, fx->model);
  dc_compile_options o = options_of(fx, model), eff;
  o.memory_budget = UINT64_MAX / 2;
  dc_buf json;
  dc_buf_init(&json);
  dc_budget_result res;
  CHECK_OK(dc_compile_budget(&o, &eff, &json, &res));
  uint64_t lo = UINT64_MAX;
  for (int i = 0; i < res.n; i++)
    if (res.c[i].device_bytes < lo) lo = res.c[i].device_bytes;
  dc_budget_result_free(&res);
  o.memory_budget = lo - 1;
  o.nallow_cast = 1, o.allow_cast[0] = DT_BF16;
  CHECK_OK(dc_compile_budget(&o, &eff, &json, NULL));
  CHECK(eff.memory.storage == DT_BF16);
  dc_buf_deinit(&json);
  /* the cast plan runs within the budget, near the fp32 plan: test_cast_weights.c's bf16 bound */
  char *plan = tu_path("cast.dplan"), *ref = reference_plan(fx, model, 0, 0);
  CHECK_OK(dc_compile(&o, plan, NULL));
  drt_plan *p = NULL, *q = NULL;
  drt_stats s = {0}, t = {0};
  CHECK_OK(run_plan(plan, o.memory_budget, &p, &s));
  CHECK_OK(run_plan(ref, 0, &q, &t));
  double err = -1;
  if (p && q) {
    CHECK(s.device_peak_bytes + s.weight_bytes <= o.memory_budget);
    const drt_tensor_info *info = drt_output_info(q, 0);
    size_t na = 0, nb = 0;
    const float *x = drt_output(p, info->name, &na), *y = drt_output(q, info->name, &nb);
    CHECK(x && y && na == nb);
    if (x && y && na == nb) err = tu_rel_l2(x, y, na);
    CHECK(err >= 0 && err <= 2e-2);
  }
  drt_destroy(p);
  drt_destroy(q);
  printf("%s: --allow-cast bf16 fits %llu B, below every fp32 plan; runs within it, rel L2 %.2e to fp32\n", fx->name,
         (unsigned long long)(lo - 1), err);
  free(plan);
  free(ref);
  dc_free(model);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const fixture fixtures[] = {
      {"unet_tiny", "fixtures/unet_tiny/model", NULL,
       {{"sample", 4, {4, 4, 16, 16}}, {"timestep", 1, {4}}, {"encoder_hidden_states", 3, {4, 4, 8}}}, 3},
      /* z 24x24 latents: over vae_tiled's 16-latent tile, so tiling applies; batch 2: slicing too */
      {"vae_tiled decode", "fixtures/vae_tiled/model", "decode", {{"z", 4, {2, 4, 24, 24}}}, 1},
      {"pipeline sd", "fixtures/pipelines/sd", NULL, {{0}}, 0},
  };
  for (size_t i = 0; i < sizeof fixtures / sizeof fixtures[0]; i++) check_fixture(&fixtures[i]);
  check_refusals();
  check_allow_cast(&fixtures[0]);
  return tu_finish();
}
