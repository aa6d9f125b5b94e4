/* test_cost_model.c — the cost model (passes/cost_model.c) on graphs small
 * enough to time by hand:
 *  - the step formula: a FLOP-bound and a bandwidth-bound linear, the memory
 *    class, the overhead;
 *  - the two streams: two offloaded blocks uploaded right before use stall
 *    the compute stream; with --prefetch the second upload hides under the
 *    first block's compute; read on demand (disk rate) it stalls again;
 *  - a loop phase counts loop_steps times;
 *  - profiles: a good one read, and every bad one an error naming the file
 *    and the key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes/passes.h"
#include "testutil.h"

/* x -> down_blocks.0 (linear) -> down_blocks.1 (linear) -> out_proj: each
 * linear 2x4 @ 4x4 is 64 flops; weights 64 B, biases 16 B. */
#include "two_block_graph.h"

/* Rates that make the arithmetic readable: a linear takes 128 ns (64 flops
 * at 0.5 GFLOP/s; its 144 bytes at 1000 GB/s are far less), an upload of B
 * bytes B ns pinned (1 GB/s) and 4B ns on demand (disk 0.25 GB/s). */
static dc_cost_profile hand_profile(void) {
  dc_cost_profile p;
  dc_cost_profile_default(0, &p);
  p.overhead_s = 0;
  for (int c = 0; c < DC_COST_CLASSES; c++) p.gflops[c] = 0.5;
  p.memory_gbps = 1000, p.h2d_gbps = 1, p.disk_gbps = 0.25, p.d2d_gbps = 1;
  return p;
}

static int near(double a, double b) { return fabs(a - b) <= 1e-12 + 1e-9 * fabs(b); }

static void test_formula(void) {
  dc_cost_profile p = hand_profile();
  CHECK(near(dc_cost_kernel_seconds(&p, DC_COST_LINEAR, 64, 144), 128e-9)); /* FLOP-bound */
  CHECK(near(dc_cost_kernel_seconds(&p, DC_COST_LINEAR, 64, 1000000), 1e-6)); /* bandwidth-bound: 1 MB at 1 TB/s */
  CHECK(near(dc_cost_kernel_seconds(&p, DC_COST_MEMORY, 1 << 30, 2000), 2e-9)); /* flops ignored */
  p.overhead_s = 1e-6;
  CHECK(near(dc_cost_kernel_seconds(&p, DC_COST_CONV3X3, 64, 144), 1e-6 + 128e-9));
  CHECK(dc_cost_kernel_seconds(&p, DC_COST_NONE, 64, 144) == 0);
  printf("step formula: FLOP-bound, bandwidth-bound, memory class, overhead\n");
}

/* The small graph with the offload options, timed. */
static dc_cost_estimate timed(dc_memory_options o, int host_memory) {
  dc_cost_estimate e;
  memset(&e, 0, sizeof e);
  dc_module *m = NULL;
  CHECK_OK(dc_parse(small_graph, strlen(small_graph), "test.ir", &m));
  if (!m) return e;
  CHECK_OK(dc_pass_offload(m, &o));
  CHECK_OK(dc_pass_memplan(m));
  dc_cost_profile p = hand_profile();
  CHECK_OK(dc_cost_estimate_module(m, &p, 0, host_memory, &e));
  dc_module_destroy(m);
  return e;
}

static void test_streams(void) {
  dc_memory_options none = {.offload = DC_OFFLOAD_NONE};
  dc_cost_estimate e = timed(none, DC_HOST_DEFAULT);
  CHECK(near(e.seconds, 384e-9) && e.copy_seconds == 0 && e.copy_stall_seconds == 0);
  CHECK(near(e.class_seconds[DC_COST_LINEAR], 384e-9));

  /* block 0's uploads 0..80 ns, its linear 80..208; block 1's uploads wait
   * for it (the compute before them), 208..288; linear 288..416; out_proj 416..544 */
  dc_memory_options block = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1};
  e = timed(block, DC_HOST_DEFAULT);
  CHECK(near(e.seconds, 544e-9));
  CHECK(near(e.copy_stall_seconds, 160e-9) && near(e.copy_seconds, 160e-9) && near(e.compute_seconds, 384e-9));

  /* prefetch: block 1's uploads (80..160) run while block 0 computes (80..208): only the first stalls */
  block.prefetch = 1;
  e = timed(block, DC_HOST_DEFAULT);
  CHECK(near(e.seconds, 464e-9));
  CHECK(near(e.copy_stall_seconds, 80e-9));

  /* on demand: uploads at the disk's 0.25 GB/s: 0..320, 320..640; linears 320..448,
   * then 640..768 (the second upload is longer than the first block's compute), 768..896 */
  e = timed(block, DC_HOST_ON_DEMAND);
  CHECK(near(e.seconds, 896e-9));
  CHECK(near(e.copy_stall_seconds, 320e-9 + 192e-9));
  CHECK(near(e.copy_seconds, 640e-9));
  printf("two streams: uploads before use stall, prefetched ones hide under compute, on-demand reads stall again\n");
}

/* The same graph split into phases: "in" (input) once, "body" a loop. */
static void test_loop_phases(void) {
  dc_module *m = NULL;
  CHECK_OK(dc_parse(small_graph, strlen(small_graph), "test.ir", &m));
  if (!m) return;
  CHECK_OK(dc_module_set_meta(m, "phases", "in@0 body*@3"));
  CHECK_OK(dc_phases_from_meta(m));
  CHECK_OK(dc_pass_memplan(m));
  dc_cost_profile p = hand_profile();
  dc_cost_estimate e;
  CHECK_OK(dc_cost_estimate_module(m, &p, 10, DC_HOST_DEFAULT, &e));
  CHECK(e.nphases == 2 && e.loop_steps == 10);
  CHECK(near(e.phase_seconds[0], 0) && near(e.phase_seconds[1], 384e-9));
  CHECK(near(e.seconds, 10 * 384e-9));
  dc_module_destroy(m);
  printf("a loop phase counts loop_steps times\n");
}

static const char *good_profile =
    "{\"format\": \"diffc-calibration\", \"version\": 1, \"target\": \"cpu\", \"backend\": \"llvm\",\n"
    " \"device\": \"test\", \"threads\": 2, \"plan\": \"unet.plan\", \"created\": \"2026-12-02T12:00:00Z\",\n"
    " \"overhead_us\": 4.0,\n"
    " \"classes\": {\"conv3x3\": {\"gflops\": 80.5, \"steps\": 120, \"seconds\": 0.53},\n"
    "             \"memory\": {\"gbps\": 12.5, \"steps\": 900, \"seconds\": 0.3}},\n"
    " \"copy\": {\"h2d_gbps\": 8.5, \"disk_gbps\": 1.2, \"d2d_gbps\": 10.0}}\n";

static void profile_error(const char *what, const char *from, const char *to, const char *target, const char *needle) {
  char text[2048];
  const char *at = strstr(good_profile, from);
  CHECK(at != NULL);
  if (!at) return;
  snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good_profile), good_profile, to, at + strlen(from));
  char *path = tu_path("bad.json");
  tu_write_file(path, text, strlen(text));
  dc_cost_profile p;
  dc_status *st = dc_cost_profile_load(path, target, &p);
  CHECK(st && strstr(dc_status_message(st), path)); /* every message names the file */
  CHECK_ERR(st, needle);
  dc_cost_profile d;
  dc_cost_profile_default(!strcmp(target, "cuda"), &d);
  CHECK(!p.calibrated && p.memory_gbps == d.memory_gbps); /* the target's defaults stay in force */
  printf("bad profile (%s): error names the key\n", what);
  free(path);
}

static void test_profiles(void) {
  char *path = tu_path("cal.json");
  tu_write_file(path, good_profile, strlen(good_profile));
  dc_cost_profile p, d;
  dc_cost_profile_default(0, &d);
  CHECK_OK(dc_cost_profile_load(path, "cpu", &p));
  CHECK(p.calibrated && !strcmp(p.source, path));
  CHECK(near(p.overhead_s, 4e-6) && p.gflops[DC_COST_CONV3X3] == 80.5 && p.memory_gbps == 12.5);
  CHECK(p.gflops[DC_COST_LINEAR] == d.gflops[DC_COST_LINEAR]); /* a class not measured keeps its default */
  CHECK(p.h2d_gbps == 8.5 && p.disk_gbps == 1.2 && p.d2d_gbps == 10);
  printf("good profile read; unmeasured classes keep the defaults\n");
  free(path);
  profile_error("wrong target", "\"target\": \"cpu\"", "\"target\": \"cpu\"", "cuda", "\"target\" is \"cpu\"; the plan's target is cuda");
  profile_error("wrong format", "diffc-calibration", "something-else", "cpu", "\"format\" must be \"diffc-calibration\"");
  profile_error("wrong version", "\"version\": 1", "\"version\": 2", "cpu", "\"version\": expected 1");
  profile_error("negative rate", "\"gflops\": 80.5", "\"gflops\": -3", "cpu", "\"classes.conv3x3.gflops\" must be a positive number");
  profile_error("zero rate", "\"gbps\": 12.5", "\"gbps\": 0", "cpu", "\"classes.memory.gbps\" must be a positive number");
  profile_error("missing copy rate", ", \"d2d_gbps\": 10.0", "", "cpu", "\"copy.d2d_gbps\" is missing");
  profile_error("missing overhead", "\"overhead_us\": 4.0,", "", "cpu", "\"overhead_us\" is missing");
  profile_error("unknown class", "\"conv3x3\": {", "\"conv5x5\": {", "cpu", "\"classes.conv5x5\": no such kernel class");
  profile_error("not JSON", "{\"format\"", "{{", "cpu", "not valid JSON");
  dc_status *st = dc_cost_profile_load("/nonexistent/cal.json", "cpu", &p);
  CHECK_ERR(st, "/nonexistent/cal.json");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_formula();
  test_streams();
  test_loop_phases();
  test_profiles();
  return tu_finish();
}
