/* test_offload.c — pass "offload" (passes/offload.c): weights kept in host
 * memory and uploaded into the arena before use.
 *  - text to text: a small graph, each technique, the exact uploads;
 *  - the SD1.5-shaped fixture: every technique's outputs are bit-identical
 *    to the plan without offload, the arena diffrun measures equals the
 *    planned one, and the peaks keep the order diffusers' own tests demand:
 *    leaf <= leaf+prefetch < block(1) <= block(1)+prefetch < block(3) < none;
 *  - --host-memory: the dump's host_memory meta; pinned and on-demand give
 *    the same bits, pinned holds every offloaded weight in one host block,
 *    on-demand only a bounce buffer (its size as asked, at most the largest
 *    offloaded weight); an on-demand read that runs past the end of a
 *    truncated weight file is the run's error, naming file, tensor, offset;
 *  - bad option combinations get one message naming the option. */
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/diffrun.h"
#include "plan/plan_format.h"
#include "testutil.h"

static char *print(const dc_module *m) {
  dc_buf b;
  dc_buf_init(&b);
  dc_status *st = dc_print(m, &b);
  dc_buf_u8(&b, 0);
  CHECK_OK(st);
  return (char *)b.data;
}

static dc_module *parse(const char *text) {
  dc_module *m = NULL;
  CHECK_OK(dc_parse(text, strlen(text), "test.ir", &m));
  return m;
}

/* Lines of `text` that start with "%": the graph without the comments'
 * byte counts and live ranges, so expectations stay readable. */
static char *graph_lines(const char *text) {
  dc_buf b;
  dc_buf_init(&b);
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) : strlen(p);
    if (*p == '%') {
      const char *hash = strstr(p, "  # ");
      size_t keep = hash && hash < p + n ? (size_t)(hash - p) : n;
      dc_buf_append(&b, p, keep);
      dc_buf_u8(&b, '\n');
    }
    p += n + (nl != NULL);
  }
  dc_buf_u8(&b, 0);
  return (char *)b.data;
}

/* A two-block graph: x -> down_blocks.0 (linear) -> down_blocks.1 (linear) -> out_proj. */
#include "two_block_graph.h"

static void text_case(const char *what, dc_memory_options o, const char *want) {
  dc_module *m = parse(small_graph);
  if (!m) return;
  CHECK_OK(dc_pass_offload(m, &o));
  CHECK_OK(dc_verify(m, "offload"));
  /* where the weights wait: pinned unless asked otherwise (the driver makes
   * --offload-dir's default on-demand before the pass runs) */
  const char *host = dc_module_get_meta(m, "host_memory");
  CHECK(host && !strcmp(host, o.host_memory == DC_HOST_ON_DEMAND ? "on-demand" : "pinned"));
  char *text = print(m), *got = graph_lines(text);
  CHECK(strcmp(got, want) == 0);
  if (strcmp(got, want) != 0) printf("  %s: got\n%s  wanted\n%s", what, got, want);
  else printf("text to text: %s\n", what);
  dc_free(text);
  dc_free(got);
  dc_module_destroy(m);
}

static void test_text(void) {
  dc_memory_options block = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1, .prefetch = 0};
  text_case("group block 1: each down block uploaded before use, out_proj resident", block,
            "%0 = input \"x\" : f32[2,4]\n"
            "%1 = weight @down_blocks.0.proj.weight : f32[4,4]\n"
            "%2 = upload(%1) {group=0, hold=0} : f32[4,4]\n"
            "%3 = weight @down_blocks.0.proj.bias : f32[4]\n"
            "%4 = upload(%3) {group=0, hold=0} : f32[4]\n"
            "%5 = linear(%0, %2, %4) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]\n"
            "%6 = weight @down_blocks.1.proj.weight : f32[4,4]\n"
            "%7 = upload(%6) {group=1, hold=0} : f32[4,4]\n"
            "%8 = weight @down_blocks.1.proj.bias : f32[4]\n"
            "%9 = upload(%8) {group=1, hold=0} : f32[4]\n"
            "%10 = linear(%5, %7, %9) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]\n"
            "%11 = weight @out_proj.weight : f32[4,4]\n"
            "%12 = linear(%10, %11) {act=none, bias=0, gate=0, gate_at=0, residual=0} : f32[2,4]\n");
  block.prefetch = 1;
  block.host_memory = DC_HOST_ON_DEMAND; /* the same graph; only the meta says on-demand */
  text_case("group block 1 + prefetch: block 1's upload issued before block 0 runs", block,
            "%0 = input \"x\" : f32[2,4]\n"
            "%1 = weight @down_blocks.0.proj.weight : f32[4,4]\n"
            "%2 = upload(%1) {group=0, hold=0} : f32[4,4]\n"
            "%3 = weight @down_blocks.0.proj.bias : f32[4]\n"
            "%4 = upload(%3) {group=0, hold=0} : f32[4]\n"
            "%5 = weight @down_blocks.1.proj.weight : f32[4,4]\n"
            "%6 = upload(%5) {group=1, hold=0} : f32[4,4]\n"
            "%7 = weight @down_blocks.1.proj.bias : f32[4]\n"
            "%8 = upload(%7) {group=1, hold=0} : f32[4]\n"
            "%9 = linear(%0, %2, %4) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]\n"
            "%10 = linear(%9, %6, %8) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]\n"
            "%11 = weight @out_proj.weight : f32[4,4]\n"
            "%12 = linear(%10, %11) {act=none, bias=0, gate=0, gate_at=0, residual=0} : f32[2,4]\n");
  dc_memory_options model = {.offload = DC_OFFLOAD_MODEL, .group_level = DC_GROUP_NONE, .blocks_per_group = 0, .prefetch = 0};
  text_case("model: everything uploaded at the start and held", model,
            "%0 = input \"x\" : f32[2,4]\n"
            "%1 = weight @down_blocks.0.proj.weight : f32[4,4]\n"
            "%2 = upload(%1) {group=0, hold=1} : f32[4,4]\n"
            "%3 = weight @down_blocks.0.proj.bias : f32[4]\n"
            "%4 = upload(%3) {group=0, hold=1} : f32[4]\n"
            "%5 = weight @down_blocks.1.proj.weight : f32[4,4]\n"
            "%6 = upload(%5) {group=0, hold=1} : f32[4,4]\n"
            "%7 = weight @down_blocks.1.proj.bias : f32[4]\n"
            "%8 = upload(%7) {group=0, hold=1} : f32[4]\n"
            "%9 = weight @out_proj.weight : f32[4,4]\n"
            "%10 = upload(%9) {group=0, hold=1} : f32[4,4]\n"
            "%11 = linear(%0, %2, %4) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]\n"
            "%12 = linear(%11, %6, %8) {act=none, bias=1, gate=0, gate_at=0, residual=0} : f32[2,4]\n"
            "%13 = linear(%12, %10) {act=none, bias=0, gate=0, gate_at=0, residual=0} : f32[2,4]\n");
}

/* ---- the SD1.5-shaped fixture, run ------------------------------------ */

typedef struct {
  uint64_t device_peak; /* planned: resident weights + arena */
  uint64_t host_weights, arena;
  uint64_t largest_upload, nuploads; /* planned */
  drt_stats stats;                   /* measured; stats.host_memory copied below */
  char host_memory[16];
  int nout;
  float **out;
  size_t *numel;
} run_result;

static void result_free(run_result *r) {
  for (int i = 0; i < r->nout; i++) free(r->out[i]);
  free(r->out);
  free(r->numel);
}

static dc_module *build_fixture(const char *name, const char *entry, const dc_input_shape *shapes, int nshapes) {
  char *dir = dc_path_join(tu_source_dir, "fixtures"), *fx = dc_path_join(dir, name), *model = dc_path_join(fx, "model");
  dc_folder f;
  memset(&f, 0, sizeof f);
  dc_build_options bo = {.entry = entry, .shapes = shapes, .nshapes = nshapes};
  dc_module *m = NULL;
  CHECK_OK(dc_folder_open(model, NULL, &f));
  CHECK_OK(dc_frontend_build(&f, &bo, &m));
  dc_folder_close(&f);
  dc_free(dir), dc_free(fx), dc_free(model);
  return m;
}

/* Compiles with o, runs the plan on the reference kernels with seeded
 * inputs (on-demand weights through a bounce buffer of bounce_bytes, 0 =
 * the default); checks measured arena == planned. */
static uint64_t bounce_bytes;
static int compile_and_run(dc_module *m, const dc_memory_options *o, run_result *r) {
  memset(r, 0, sizeof *r);
  dc_pipeline_options po = {.memory = o};
  dc_status *st = dc_pipeline_run(m, &po);
  CHECK_OK(st);
  if (st) return 0;
  dc_liveness l;
  CHECK_OK(dc_liveness_compute(m, &l));
  r->device_peak = l.weight_bytes + l.peak_bytes;
  r->host_weights = l.host_weight_bytes;
  r->arena = l.peak_bytes;
  dc_liveness_deinit(&l);
  for (int32_t i = 0; i < m->nnodes; i++) {
    if (m->nodes[i].op != OP_UPLOAD) continue;
    uint64_t b = dc_type_bytes(&m->nodes[i].type);
    r->largest_upload = b > r->largest_upload ? b : r->largest_upload;
    r->nuploads++;
  }
  /* the meta says where offloaded weights wait, and only when there are some */
  const char *host = dc_module_get_meta(m, "host_memory");
  CHECK(r->nuploads ? host && !strcmp(host, o->host_memory == DC_HOST_ON_DEMAND ? "on-demand" : "pinned") : !host);
  char *text = print(m), *path = tu_path("offload.dplan");
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = text, .module = m};
  drt_plan *p = NULL;
  drt_stats s = {0};
  drt_options ro = {.backend = "reference", .bounce_bytes = bounce_bytes};
  st = dc_plan_write(path, &plan);
  if (!st) st = drt_load(path, &ro, &p);
  if (!st) {
    drt_set_random_inputs(p, 7);
    st = drt_run(p, &s);
  }
  int ok = st == NULL;
  CHECK_OK(st);
  if (ok) {
    CHECK(s.device_peak_bytes == s.device_predicted_bytes && s.device_peak_bytes == r->arena);
    r->stats = s;
    snprintf(r->host_memory, sizeof r->host_memory, "%s", s.host_memory);
    r->nout = drt_output_count(p);
    r->out = calloc((size_t)r->nout, sizeof *r->out);
    r->numel = calloc((size_t)r->nout, sizeof *r->numel);
    for (int i = 0; i < r->nout; i++) {
      const float *out = drt_output(p, drt_output_info(p, i)->name, &r->numel[i]);
      r->out[i] = malloc(r->numel[i] * sizeof(float) + 1);
      memcpy(r->out[i], out, r->numel[i] * sizeof(float));
    }
  }
  drt_destroy(p);
  dc_free(text);
  free(path);
  return ok;
}

static int same_outputs(const run_result *a, const run_result *b) {
  if (a->nout != b->nout) return 0;
  for (int i = 0; i < a->nout; i++)
    if (a->numel[i] != b->numel[i] || memcmp(a->out[i], b->out[i], a->numel[i] * sizeof(float)) != 0) return 0;
  return 1;
}

/* pinned and on-demand give the baseline's bits; pinned holds every
 * offloaded weight in one host block, on-demand a bounce
 * buffer: 4 MiB by default, never more than the largest offloaded weight. */
static void test_host_memory(const run_result *none) {
  static const dc_input_shape sd15[] = {
      {"sample", 4, {2, 4, 16, 24}}, {"encoder_hidden_states", 3, {2, 77, 32}}, {"timestep", 1, {2}}};
  dc_memory_options leaf = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_LEAF, .prefetch = 1};
  dc_memory_options block = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1, .prefetch = 1};
  dc_memory_options model = {.offload = DC_OFFLOAD_MODEL};
  struct {
    const char *name;
    dc_memory_options o;
    dc_host_memory host;
    uint64_t bounce;
  } cases[] = {
      {"leaf + prefetch, pinned", leaf, DC_HOST_PINNED, 0},
      {"leaf + prefetch, default", leaf, DC_HOST_DEFAULT, 0},
      {"leaf + prefetch, on-demand", leaf, DC_HOST_ON_DEMAND, 0},
      {"leaf + prefetch, on-demand 1000 B", leaf, DC_HOST_ON_DEMAND, 1000},
      {"block 1 + prefetch, on-demand", block, DC_HOST_ON_DEMAND, 0},
      {"block 1 + prefetch, on-demand 4 KiB", block, DC_HOST_ON_DEMAND, 4096},
      {"model, on-demand 1000 B", model, DC_HOST_ON_DEMAND, 1000},
  };
  printf("--host-memory on unet_sd15:\n  %-36s %10s %12s %12s %12s  outputs\n", "case", "host mode", "host weights",
         "largest", "host held");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_result r;
    dc_memory_options o = cases[i].o;
    o.host_memory = cases[i].host;
    bounce_bytes = cases[i].bounce;
    dc_module *m = build_fixture("unet_sd15", "forward", sd15, 3);
    int ok = m && compile_and_run(m, &o, &r);
    dc_module_destroy(m);
    bounce_bytes = 0;
    if (!ok) continue;
    int same = same_outputs(none, &r), on_demand = cases[i].host == DC_HOST_ON_DEMAND;
    uint64_t held = r.stats.pinned_bytes, chunk = cases[i].bounce ? cases[i].bounce : (uint64_t)4 << 20;
    CHECK(same && r.stats.host_weight_bytes == r.host_weights && r.largest_upload > 0);
    CHECK(!strcmp(r.host_memory, on_demand ? "on-demand" : "pinned"));
    if (on_demand) CHECK(held == (chunk < r.largest_upload ? chunk : r.largest_upload));
    else CHECK(held == r.host_weights);
    printf("  %-36s %10s %12llu %12llu %12llu  %s\n", cases[i].name, r.host_memory,
           (unsigned long long)r.host_weights, (unsigned long long)r.largest_upload, (unsigned long long)held,
           same ? "bit-identical to none" : "DIFFER");
    result_free(&r);
  }
}

static void test_fixture(void) {
  static const dc_input_shape sd15[] = {
      {"sample", 4, {2, 4, 16, 24}}, {"encoder_hidden_states", 3, {2, 77, 32}}, {"timestep", 1, {2}}};
  struct {
    const char *name;
    dc_memory_options o;
  } cases[] = {
      {"none", {0}},
      {"group leaf", {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_LEAF, .blocks_per_group = 0, .prefetch = 0}},
      {"group leaf + prefetch", {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_LEAF, .blocks_per_group = 0, .prefetch = 1}},
      {"group block 1", {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1, .prefetch = 0}},
      {"group block 1 + prefetch", {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1, .prefetch = 1}},
      {"group block 3", {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 3, .prefetch = 0}},
      {"sequential", {.offload = DC_OFFLOAD_SEQUENTIAL, .group_level = DC_GROUP_NONE, .blocks_per_group = 0, .prefetch = 0}},
      {"model", {.offload = DC_OFFLOAD_MODEL, .group_level = DC_GROUP_NONE, .blocks_per_group = 0, .prefetch = 0}},
      {"group leaf + prefetch 3", {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_LEAF, .blocks_per_group = 0, .prefetch = 3}},
  };
  enum { N = sizeof cases / sizeof cases[0] };
  run_result r[N];
  int ok[N];
  printf("unet_sd15 (2x4x16x24), reference kernels:\n  %-26s %12s %12s %12s  outputs\n", "offload", "device peak",
         "arena", "host weights");
  for (int i = 0; i < N; i++) {
    dc_module *m = build_fixture("unet_sd15", "forward", sd15, 3);
    ok[i] = m && compile_and_run(m, &cases[i].o, &r[i]);
    dc_module_destroy(m);
    if (!ok[i]) continue;
    int same = i == 0 || (ok[0] && same_outputs(&r[0], &r[i]));
    CHECK(same);
    printf("  %-26s %12llu %12llu %12llu  %s\n", cases[i].name, (unsigned long long)r[i].device_peak,
           (unsigned long long)r[i].arena, (unsigned long long)r[i].host_weights,
           i == 0 ? "(baseline)" : same ? "bit-identical" : "DIFFER");
  }
  for (int i = 0; i < N; i++)
    if (!ok[i]) return;
  /* diffusers tests/hooks/test_group_offloading.py: leaf <= leaf+stream < block(1) <= block(1)+stream < block(3) < none */
  CHECK(r[1].device_peak <= r[2].device_peak);
  CHECK(r[2].device_peak < r[3].device_peak);
  CHECK(r[3].device_peak <= r[4].device_peak);
  CHECK(r[4].device_peak < r[5].device_peak);
  CHECK(r[5].device_peak < r[0].device_peak);
  /* Sequential offload is leaf grouping without overlap; model offload
   * needs the whole model, like none, but keeps it in host memory between runs. */
  CHECK(r[6].device_peak == r[1].device_peak);
  CHECK(r[7].device_peak == r[0].device_peak && r[7].host_weights == r[0].device_peak - r[0].arena);
  CHECK(r[8].device_peak >= r[2].device_peak);
  printf("  order as diffusers demands: leaf <= leaf+prefetch < block(1) <= block(1)+prefetch < block(3) < none\n");
  test_host_memory(&r[0]);
  for (int i = 0; i < N; i++) result_free(&r[i]);
}

static void test_bad_options(void) {
  dc_memory_options o = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_NONE, .blocks_per_group = 0, .prefetch = 0};
  CHECK_ERR(dc_memory_options_check(&o), "--offload group needs --group-level block|leaf");
  o = (dc_memory_options){.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 0, .prefetch = 0};
  CHECK_ERR(dc_memory_options_check(&o), "--group-level block needs --blocks-per-group N");
  o = (dc_memory_options){.offload = DC_OFFLOAD_NONE, .group_level = DC_GROUP_NONE, .blocks_per_group = 0, .prefetch = 1};
  CHECK_ERR(dc_memory_options_check(&o), "--prefetch needs --offload group (nothing is offloaded)");
  o = (dc_memory_options){.offload = DC_OFFLOAD_SEQUENTIAL, .group_level = DC_GROUP_NONE, .blocks_per_group = 0, .prefetch = 2};
  CHECK_ERR(dc_memory_options_check(&o), "--prefetch needs --offload group (sequential offload is synchronous");
  o = (dc_memory_options){.offload = DC_OFFLOAD_MODEL, .group_level = DC_GROUP_LEAF, .blocks_per_group = 0, .prefetch = 0};
  CHECK_ERR(dc_memory_options_check(&o), "--group-level leaf needs --offload group (it is --offload model)");
  o = (dc_memory_options){.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_LEAF, .blocks_per_group = 2, .prefetch = 0};
  CHECK_ERR(dc_memory_options_check(&o), "--blocks-per-group applies to --group-level block only");
  o = (dc_memory_options){.offload = DC_OFFLOAD_NONE, .host_memory = DC_HOST_ON_DEMAND};
  CHECK_ERR(dc_memory_options_check(&o), "--host-memory on-demand needs --offload model|sequential|group (nothing is "
                                         "offloaded, so no weight waits in host memory)");
  o.host_memory = DC_HOST_PINNED;
  CHECK_ERR(dc_memory_options_check(&o), "--host-memory pinned needs --offload");
  o.offload = DC_OFFLOAD_SEQUENTIAL;
  CHECK_OK(dc_memory_options_check(&o));
  /* Block level on a graph without block lists. */
  dc_module *m = parse("%0 = input \"x\" : f32[2,4]  # row, dev0, 32 B, live 0..2\n"
                       "#   file 0: /x.safetensors (100 bytes, header xxh64 0000000000000001)\n"
                       "%1 = weight @proj.weight : f32[4,4]  # row, dev0, 64 B, resident, file 0 @ 8\n"
                       "%2 = linear(%0, %1) {act=none, bias=0, gate=0, gate_at=0, residual=0} : f32[2,4]  # proj, row, dev0, 32 B, live 2..2\n"
                       "output y = %2\n");
  o = (dc_memory_options){.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1, .prefetch = 0};
  if (m) CHECK_ERR(dc_pass_offload(m, &o), "has no block lists");
  dc_module_destroy(m);
  printf("bad offload options: 9 cases, one message each\n");
}

/* ---- on-demand reads from a file that changed under the plan ---------- */

/* small_graph over a real weights file, everything offloaded
 * (sequential), planned and written as a CPU plan at plan_path. */
static void write_small_plan(const char *wpath, const char *plan_path, dc_host_memory host) {
  static const char *names[] = {"down_blocks.0.proj.weight", "down_blocks.0.proj.bias", "down_blocks.1.proj.weight",
                                "down_blocks.1.proj.bias", "out_proj.weight"};
  float data[5][16];
  dc_st_out t[5];
  for (int i = 0; i < 5; i++) {
    for (int k = 0; k < 16; k++) data[i][k] = (float)((i * 16 + k) % 7) * 0.25f - 0.5f;
    int bias = i == 1 || i == 3;
    t[i] = (dc_st_out){names[i], {DT_F32, bias ? 1 : 2, {4, bias ? 0 : 4}}, data[i]};
  }
  CHECK_OK(dc_st_write(wpath, t, 5));
  dc_st_file f;
  CHECK_OK(dc_st_open(wpath, &f));
  dc_buf text;
  dc_buf_init(&text);
  dc_buf_printf(&text, "# diffc IR\n# class = Test\n# weights: 5 tensors\n");
  dc_buf_printf(&text, "#   file 0: %s (%zu bytes, header xxh64 %016llx)\n", wpath, f.file.size,
                (unsigned long long)f.header_hash);
  const char *src = strstr(small_graph, "%0 =");
  for (const char *line = src; *line;) { /* the graph, with the real offsets */
    const char *nl = strchr(line, '\n'), *at = strstr(line, "file 0 @ ");
    const char *w = strchr(line, '@');
    if (at && at < nl && w) {
      size_t n = strcspn(w + 1, " ");
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)n, w + 1);
      const dc_st_tensor *st = dc_st_find(&f, name);
      dc_buf_printf(&text, "%.*s%llu\n", (int)(at + 9 - line), line, (unsigned long long)(st ? st->offset : 0));
    } else {
      dc_buf_append(&text, line, (size_t)(nl - line + 1));
    }
    line = nl + 1;
  }
  dc_buf_u8(&text, 0);
  dc_st_close(&f);
  dc_module *m = parse((const char *)text.data);
  dc_buf_deinit(&text);
  if (!m) return;
  dc_memory_options o = {.offload = DC_OFFLOAD_SEQUENTIAL, .host_memory = host};
  CHECK_OK(dc_pass_offload(m, &o));
  CHECK_OK(dc_memplan(m, NULL));
  char *ir = print(m);
  dc_plan plan = {.target = DC_TARGET_CPU, .options_json = "{}", .ir_text = ir, .module = m};
  CHECK_OK(dc_plan_write(plan_path, &plan));
  dc_free(ir);
  dc_module_destroy(m);
}

/* Both plans load; the file is then cut short.  pinned read everything at
 * load and still runs; on-demand reads at each upload and fails, naming
 * what it could not read. */
static void test_truncated_file(void) {
  char *wpath = tu_path("small.safetensors"), *pinned = tu_path("pinned.dplan"), *demand = tu_path("demand.dplan");
  write_small_plan(wpath, pinned, DC_HOST_PINNED);
  write_small_plan(wpath, demand, DC_HOST_ON_DEMAND);
  drt_options ro = {.backend = "reference"};
  drt_plan *p = NULL, *d = NULL;
  CHECK_OK(drt_load(pinned, &ro, &p));
  CHECK_OK(drt_load(demand, &ro, &d));
  if (!p || !d) {
    drt_destroy(p), drt_destroy(d);
    return;
  }
  drt_set_random_inputs(p, 3), drt_set_random_inputs(d, 3);
  drt_stats s = {0};
  CHECK_OK(drt_run(d, &s)); /* intact: on-demand runs, a bounce of the largest weight (64 B) */
  CHECK(!strcmp(s.host_memory, "on-demand") && s.pinned_bytes == 64 && s.host_weight_bytes == 3 * 64 + 2 * 16);
  dc_st_file f;
  CHECK_OK(dc_st_open(wpath, &f));
  const dc_st_tensor *t = dc_st_find(&f, "down_blocks.1.proj.weight");
  uint64_t cut = t ? t->offset + 20 : 0;
  dc_st_close(&f);
  CHECK(cut > 0 && truncate(wpath, (off_t)cut) == 0);
  CHECK_OK(drt_run(p, &s));
  CHECK(!strcmp(s.host_memory, "pinned") && s.pinned_bytes == 3 * 64 + 2 * 16);
  char want[700];
  snprintf(want, sizeof want,
           "%s: upload step %%7 (down_blocks.1.proj): weight file %s: tensor \"down_blocks.1.proj.weight\": reading 64 "
           "bytes at file offset %llu got only 20 (the file ends there; it changed since the plan was loaded?)",
           demand, wpath, (unsigned long long)(cut - 20));
  CHECK_ERR(drt_run(d, &s), want);
  drt_destroy(p);
  drt_destroy(d);
  printf("truncated weight file: pinned (read at load) still runs; on-demand fails naming file, tensor and offset\n");
  free(wpath), free(pinned), free(demand);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_text();
  test_bad_options();
  test_truncated_file();
  test_fixture();
  return tu_finish();
}
