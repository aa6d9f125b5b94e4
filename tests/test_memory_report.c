/* test_memory_report.c — ir/memory_report*.c and drt_memory_report: the
 * report's numbers are liveness's, the IR dump's and what a real run on
 * the reference backend reports (drt_stats, per run and per phase); the
 * kinds and the modules at the peak add up to the live bytes there; the
 * JSON parses and holds the documented fields.  On the tiny UNet plain and
 * with group offload (pinned and on-demand), and the tiny SD pipeline with
 * --offload model (phases, components, per image). */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "plan/plan_format.h"
#include "runtime/diffrun.h"
#include "testutil.h"

/* The module as a CPU plan without kernels (the reference backend runs it). */
static drt_plan *load(dc_module *m, const char *name) {
  char *path = tu_path(name);
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = "", .module = m,
                  .pipeline_json = m->nphases ? "{}" : NULL};
  CHECK_OK(dc_plan_write(path, &plan));
  drt_plan *p = NULL;
  CHECK_OK(drt_load(path, &(drt_options){.backend = "reference"}, &p));
  dc_free(path);
  return p;
}

static uint64_t json_u64(const cJSON *o, const char *key) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  CHECK(cJSON_IsNumber(v));
  return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : UINT64_MAX;
}

/* The peak of device d against liveness, and its parts adding up. */
static void check_device(const dc_module *m, const dc_liveness *l, const dc_mem_report *r, int d) {
  const dc_mem_report_device *dv = &r->dev[d];
  CHECK(dv->weight_bytes == l->dev_weights[d] && dv->arena_bytes == l->dev_peak[d]);
  CHECK(dv->peak_bytes == dv->weight_bytes + dv->arena_bytes);
  uint64_t kinds = 0, modules = 0;
  for (int k = DC_MEM_IN_FLIGHT; k < DC_MEM_KINDS; k++) kinds += dv->kind_bytes[k];
  CHECK(dv->kind_bytes[DC_MEM_WEIGHTS] == dv->weight_bytes);
  CHECK(kinds == dv->live_at_peak_bytes);
  for (int32_t i = 0; i < dv->nmodules; i++) {
    modules += dv->modules[i].bytes;
    if (i) CHECK(dv->modules[i - 1].bytes >= dv->modules[i].bytes);
    CHECK(strstr(dv->modules[i].name, ".attentions.") == NULL); /* rolled up to the top-level block */
  }
  CHECK(modules == dv->live_at_peak_bytes);
  CHECK(dv->ntop > 0 && dv->live_at_peak_bytes <= dv->arena_bytes && dv->live_peak_bytes >= dv->live_at_peak_bytes);
  for (int i = 1; i < dv->ntop; i++) CHECK(dv->top[i - 1].bytes >= dv->top[i].bytes);
  if (l->ndevices == 1) {
    CHECK(dv->peak_step == l->peak_step && dv->live_at_peak_bytes == l->live_bytes[l->peak_step]);
    CHECK(dv->live_peak_bytes == l->live_peak_bytes);
    char *dump = tu_ir_text(m), line[128], bb[32];
    snprintf(line, sizeof line, "# peak device memory: %s = weights", dc_format_bytes(dv->peak_bytes, bb, sizeof bb));
    CHECK(dump && strstr(dump, line));
    free(dump);
  }
}

/* The report's totals against liveness and a real run's stats. */
static void check_run(const dc_module *m, const dc_mem_report *r, drt_plan *p) {
  drt_stats st;
  drt_set_random_inputs(p, 1);
  CHECK_OK(drt_run(p, &st));
  CHECK(st.device_predicted_bytes == r->dev[0].arena_bytes && st.device_peak_bytes == r->dev[0].arena_bytes);
  CHECK(st.weight_bytes == r->resident_weight_bytes && st.host_weight_bytes == r->offloaded_weight_bytes);
  CHECK(st.uploaded_bytes == r->uploaded_bytes && st.transferred_bytes == r->transferred_bytes);
  CHECK(!strcmp(st.host_memory, r->host_memory ? r->host_memory : ""));
  for (int ph = 0; ph < r->nphases; ph++) { /* each phase's measured arena and copies */
    CHECK_OK(drt_run_phase(p, ph, &st));
    CHECK(st.device_peak_bytes == r->phases[ph].arena_bytes);
    CHECK(st.uploaded_bytes == r->phases[ph].uploaded_bytes);
  }
  (void)m;
}

/* The JSON form: parses, and its numbers are the report's. */
static cJSON *check_json(const dc_mem_report *r) {
  dc_buf b;
  dc_buf_init(&b);
  CHECK_OK(dc_mem_report_json(r, &b));
  dc_buf_append(&b, "", 1);
  cJSON *j = cJSON_Parse((const char *)b.data);
  dc_buf_deinit(&b);
  CHECK(j != NULL);
  if (!j) return NULL;
  const cJSON *schema = cJSON_GetObjectItemCaseSensitive(j, "schema");
  CHECK(cJSON_IsString(schema) && !strcmp(schema->valuestring, "diffc.memory-report/1"));
  const cJSON *devs = cJSON_GetObjectItemCaseSensitive(j, "devices");
  CHECK(cJSON_GetArraySize(devs) == r->ndevices);
  const cJSON *d0 = cJSON_GetArrayItem(devs, 0);
  CHECK(json_u64(d0, "peak_bytes") == r->dev[0].peak_bytes && json_u64(d0, "arena_bytes") == r->dev[0].arena_bytes);
  CHECK(json_u64(d0, "live_at_peak_bytes") == r->dev[0].live_at_peak_bytes);
  const cJSON *kinds = cJSON_GetObjectItemCaseSensitive(d0, "by_kind");
  for (int k = 0; k < DC_MEM_KINDS; k++) CHECK(json_u64(kinds, dc_mem_kind_name((dc_mem_kind)k)) == r->dev[0].kind_bytes[k]);
  const cJSON *step = cJSON_GetObjectItemCaseSensitive(d0, "peak_step");
  CHECK(json_u64(step, "node") == (uint64_t)r->dev[0].peak_step);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(d0, "by_module")) == r->dev[0].nmodules);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(d0, "top_values")) == r->dev[0].ntop);
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(j, "host"), *copies = cJSON_GetObjectItemCaseSensitive(j, "copies");
  CHECK(json_u64(host, "offloaded_weight_bytes") == r->offloaded_weight_bytes);
  CHECK(cJSON_GetObjectItemCaseSensitive(host, "host_memory") != NULL);
  CHECK(json_u64(copies, "uploaded_bytes") == r->uploaded_bytes);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "phases")) == r->nphases);
  CHECK(cJSON_GetObjectItemCaseSensitive(j, "per_image") && cJSON_GetObjectItemCaseSensitive(j, "components"));
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(j, "workspace");
  CHECK(cJSON_GetObjectItemCaseSensitive(ws, "kernel_scratch_bytes_per_thread") && cJSON_GetObjectItemCaseSensitive(ws, "bounce_chunk_bytes"));
  return j;
}

/* One module: the report from the library, checked; the plan run; the
 * runtime's JSON report equal to the library's numbers.  Returns the
 * runtime's JSON (for the caller's checks). */
static cJSON *check_module(dc_module *m, const char *name, int steps) {
  dc_liveness l;
  dc_mem_series s;
  dc_mem_report r;
  CHECK_OK(dc_liveness_compute(m, &l));
  CHECK_OK(dc_mem_series_compute(m, &l, &s));
  dc_mem_report_context ctx = {.target = "cpu", .steps_per_image = steps};
  CHECK_OK(dc_mem_report_build(m, &l, &s, &ctx, &r));
  for (int d = 0; d < r.ndevices; d++) check_device(m, &l, &r, d);
  CHECK(r.resident_weight_bytes == l.weight_bytes && r.offloaded_weight_bytes == l.host_weight_bytes);
  uint64_t res = 0, off = 0, once = 0, loop = 0;
  for (int32_t c = 0; c < r.ncomponents; c++) res += r.components[c].resident_bytes, off += r.components[c].offloaded_bytes;
  if (m->nphases) CHECK(res == r.resident_weight_bytes && off == r.offloaded_weight_bytes);
  for (int ph = 0; ph < r.nphases; ph++) *(m->phases[ph].loop ? &loop : &once) += r.phases[ph].uploaded_bytes;
  CHECK(r.image_uploaded_bytes == once + (uint64_t)steps * loop);
  dc_buf text;
  dc_buf_init(&text);
  CHECK_OK(dc_mem_report_text(&r, &text));
  CHECK(text.len > 0);
  dc_buf_deinit(&text);
  cJSON_Delete(check_json(&r));
  drt_plan *p = load(m, name);
  cJSON *j = NULL;
  if (p) {
    check_run(m, &r, p);
    char *json = NULL;
    CHECK_OK(drt_memory_report(p, 1, steps, &json));
    j = json ? cJSON_Parse(json) : NULL;
    CHECK(j != NULL);
    const cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "devices"), 0);
    CHECK(json_u64(d0, "peak_bytes") == r.dev[0].peak_bytes);
    free(json);
    drt_destroy(p);
  }
  dc_mem_report_deinit(&r);
  dc_mem_series_deinit(&s);
  dc_liveness_deinit(&l);
  return j;
}

static void test_module_names(void) {
  dc_module *m = dc_module_create();
  char b[64];
  CHECK(!strcmp(dc_mem_report_module_of(m, "up_blocks.1.attentions.0.proj_in", b, sizeof b), "up_blocks.1"));
  CHECK(!strcmp(dc_mem_report_module_of(m, "conv_in", b, sizeof b), "conv_in"));
  CHECK(!strcmp(dc_mem_report_module_of(m, "mid_block.resnets.0", b, sizeof b), "mid_block"));
  CHECK(!strcmp(dc_mem_report_module_of(m, NULL, b, sizeof b), "(no module)"));
  CHECK(dc_module_add_phase(m, "text", 0) == 0);
  CHECK(!strcmp(dc_mem_report_module_of(m, "unet.up_blocks.1.attentions.0", b, sizeof b), "unet.up_blocks.1"));
  CHECK(!strcmp(dc_mem_report_module_of(m, "vae.decoder.up_blocks.0", b, sizeof b), "vae.decoder"));
  CHECK(!strcmp(dc_mem_report_module_of(m, "unet", b, sizeof b), "unet"));
  dc_module_destroy(m);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_module_names();
  dc_module *plain = tu_compile_fixture("unet_tiny/model", &(dc_memory_options){0});
  cJSON *j = check_module(plain, "plain.dplan", 0);
  CHECK(json_u64(cJSON_GetObjectItemCaseSensitive(j, "host"), "offloaded_weight_bytes") == 0);
  cJSON_Delete(j);
  dc_module_destroy(plain);

  dc_memory_options group = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1, .prefetch = 1};
  dc_module *m = tu_compile_fixture("unet_tiny/model", &group);
  j = check_module(m, "group.dplan", 0);
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(j, "host");
  CHECK(json_u64(host, "offloaded_weight_bytes") > 0 &&
        !strcmp(cJSON_GetObjectItemCaseSensitive(host, "host_memory")->valuestring, "pinned"));
  cJSON_Delete(j);
  dc_module_destroy(m);

  /* on-demand: the bounce buffer the report names is what the CPU backend holds */
  group.host_memory = DC_HOST_ON_DEMAND;
  m = tu_compile_fixture("unet_tiny/model", &group);
  j = check_module(m, "on_demand.dplan", 0);
  CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "host"), "host_memory")->valuestring,
                "on-demand"));
  char *path = tu_path("on_demand.dplan");
  drt_plan *p = NULL;
  CHECK_OK(drt_load(path, &(drt_options){.backend = "reference"}, &p));
  if (p) {
    drt_stats st;
    drt_set_random_inputs(p, 2);
    CHECK_OK(drt_run(p, &st));
    CHECK(json_u64(cJSON_GetObjectItemCaseSensitive(j, "workspace"), "bounce_chunk_bytes") == st.pinned_bytes);
    drt_destroy(p);
  }
  dc_free(path);
  cJSON_Delete(j);
  dc_module_destroy(m);

  /* a pipeline with model offload: phases, components, per image at 50 steps */
  m = tu_compile_fixture("pipelines/sd", &(dc_memory_options){.offload = DC_OFFLOAD_MODEL});
  j = check_module(m, "sd.dplan", 50);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "phases")) == m->nphases);
  CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "components")) == 3);
  CHECK(json_u64(cJSON_GetObjectItemCaseSensitive(j, "per_image"), "steps") == 50);
  const cJSON *d0 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "devices"), 0);
  CHECK(json_u64(cJSON_GetObjectItemCaseSensitive(d0, "by_kind"), "in_flight") > 0);
  cJSON_Delete(j);
  dc_module_destroy(m);
  return tu_finish();
}
