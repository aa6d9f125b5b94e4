/* test_cuda_plan_emu.c — whole CUDA plans run end to end without a GPU:
 * diffc compiles a fixture for CUDA (NVRTC, PTX only: the images are not
 * run here), diffrun loads it through the real runtime and CUDA backend,
 * and the fake driver (cuda_fake_driver.h) executes every launch by
 * running the kernel's generated CUDA C in the CPU emulator
 * (tests/cuda_harness.h), on the arena and weight block the backend laid
 * out.  So argument packing, arena offsets, in-place aliasing, uploads,
 * stream order and the generated kernels are checked together, against
 * diffusers' recorded outputs (rel L2 <= the fixture's tolerance, 1e-4) and
 * the reference backend on the same plan.  Exits 77 without NVRTC or a host
 * C++ compiler. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "cuda_fake_driver.h"
#include "cuda_harness.h"
#include "runtime/diffrun.h"
#include "testutil.h"

static dc_plan plan;           /* the plan as read back: the kernels' sources */
static ch_kernel **built;      /* per kernel */
static int skip;

static dc_status *build_all(void) { return ch_plan_build(&plan, &built); }

static void free_built(void) {
  ch_plan_free(&plan, built);
  built = NULL;
}

/* Non-NULL: the plan was compiled with these memory techniques; fp8 storage
 * changes the arithmetic, so only the reference backend (same plan, same
 * stored weights) is held to 1e-4, and the error against diffusers is shown. */
static const dc_memory_options *memory;

static void compare_outputs(drt_plan *emu, drt_plan *ref, const dc_st_file *io, const char *label) {
  for (int i = 0; i < drt_output_count(emu); i++) {
    const drt_tensor_info *info = drt_output_info(emu, i);
    char name[160];
    snprintf(name, sizeof name, "out.%s", info->name);
    const dc_st_tensor *w = dc_st_find(io, name);
    CHECK(w && w->bytes / 4 == info->numel);
    if (!w) continue;
    float *want = malloc(w->bytes);
    memcpy(want, io->file.data + w->offset, w->bytes);
    const float *got = drt_output(emu, info->name, NULL);
    double vs_diffusers = tu_rel_l2(got, want, info->numel), vs_ref = tu_rel_l2(got, drt_output(ref, info->name, NULL), info->numel);
    CHECK(((memory && memory->storage != DT_F32) || vs_diffusers <= 1e-4) && vs_ref <= 1e-4);
    printf("  %s %s: rel L2 %.3g vs diffusers, %.3g vs the reference backend (tolerance 1e-4)\n", label, name,
           vs_diffusers, vs_ref);
    free(want);
  }
}

static dc_status *compile(const char *fixture, const char *entry, const dc_st_file *io, const char *path) {
  char *model = dc_path_join(tu_source_dir, fixture);
  char *dir = dc_path_join(model, "model");
  dc_input_shape shapes[8];
  int ns = 0;
  for (int i = 0; i < io->ntensors && ns < 8; i++)
    if (strncmp(io->tensors[i].name, "out.", 4) != 0) {
      shapes[ns].name = io->tensors[i].name;
      shapes[ns].rank = io->tensors[i].rank;
      memcpy(shapes[ns++].dims, io->tensors[i].dims, sizeof shapes[0].dims);
    }
  dc_compile_options co = {.model = dir, .entry = entry, .shapes = shapes, .nshapes = ns, .target = "cuda",
                           .cuda_arch = "compute_90"};
  if (memory) co.memory = *memory;
  dc_compile_report rep;
  dc_status *st = dc_compile(&co, path, &rep);
  free(model);
  free(dir);
  return st;
}

/* Runs the plan on the emulator and on the reference backend and compares. */
static void run_plan(const char *path, const dc_st_file *io, const char *label, double compile_s, double build_s) {
  ch_emulate_plan(&plan, built);
  fk.execute = ch_emulate_launch;
  drt_plan *emu = tu_load_with_inputs(path, NULL, io), *ref = tu_load_with_inputs(path, "reference", io);
  drt_stats s = {0};
  if (emu && ref) {
    dc_status *rs = drt_run(emu, &s);
    if (rs && ch_emulate_error()[0]) printf("emulator: %s\n", ch_emulate_error());
    CHECK_OK(rs);
    CHECK_OK(drt_run(ref, NULL));
    CHECK(!strcmp(s.backend, "cuda") && s.device_peak_bytes == s.device_predicted_bytes);
    const char *host = !memory || memory->offload == DC_OFFLOAD_NONE ? ""
                       : memory->host_memory == DC_HOST_ON_DEMAND   ? "on-demand"
                                                                    : "pinned";
    CHECK(!strcmp(s.host_memory, host));
    printf("%s: %d kernels, %d launches; compile %.1f s, emulator builds %.1f s, emulated run %.1f s\n", label,
           plan.cuda.nkernels, fk.launches, compile_s, build_s, s.seconds);
    compare_outputs(emu, ref, io, label);
  }
  drt_destroy(emu);
  drt_destroy(ref);
  fk.execute = NULL;
  CHECK(live_objs() == 0 && live_blocks(0) == 0 && live_blocks(1) == 0 && fk.ctx_refs == 0);
}

/* Prints and frees st when it only says that `tool` is missing (then skip). */
static int missing_tool(dc_status *st, const char *tool, const char *label) {
  if (!st || dc_status_code_of(st) != DC_ERR_UNSUPPORTED || !strstr(dc_status_message(st), tool)) return 0;
  printf("SKIP %s: %s\n", label, dc_status_message(st));
  dc_status_free(st);
  return skip = 1;
}

static void run_fixture(const char *fixture, const char *entry, const char *io_name) {
  char *dir = dc_path_join(tu_source_dir, fixture), *io_path = dc_path_join(dir, io_name);
  char *path = tu_path("emu.dplan"), label[128];
  const char *what = !memory                                  ? ""
                     : memory->layout == LAYOUT_NHWC            ? " (--layout nhwc)"
                     : memory->host_memory == DC_HOST_ON_DEMAND ? " (fp8 e4m3 storage, block offload + prefetch, weights read on demand)"
                                                                : " (fp8 e4m3 storage, block offload + prefetch)";
  snprintf(label, sizeof label, "%s %s%s", fixture + strlen("fixtures/"), entry, what);
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  double t0 = dc_now_seconds();
  dc_status *st = compile(fixture, entry, &io, path);
  if (!missing_tool(st, "NVRTC", label)) {
    CHECK_OK(st);
    if (!st) CHECK_OK(st = dc_plan_read(path, &plan));
    /* the fake has no device before its first reset, 132 SMs after: 132 either way */
    if (!st) CHECK(strstr(plan.options_json, "\"cuda_sm_count\":132") != NULL);
  }
  double t1 = dc_now_seconds();
  fake_reset(9, 0);
  if (!st) {
    fake_bind(plan.module, &plan.cuda);
    st = build_all();
    if (!missing_tool(st, "C++ compiler", label)) {
      CHECK_OK(st);
      if (!st) run_plan(path, &io, label, t1 - t0, dc_now_seconds() - t1);
    }
  }
  free_built();
  dc_plan_deinit(&plan);
  dc_st_close(&io);
  free(dir), free(io_path), free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  run_fixture("fixtures/unet_tiny", "forward", "io_forward.safetensors");
  if (!skip) run_fixture("fixtures/vae_tiny", "decode", "io_decode.safetensors");
  /* A text encoder: int64 token ids into the pinned input buffer, the
   * embedding, causal attention and eos pooling kernels, sharded weights. */
  if (!skip) run_fixture("fixtures/clip_sdxl2", "forward", "io_forward.safetensors");
  /* A video DiT: rope on the video tokens only, per-head layer norms, the
   * modulated norms and gated epilogues, its rotary positions a constant
   * turned into a weight (constant-weights). */
  if (!skip) run_fixture("fixtures/cogvideox_tiny", "forward", "io_forward.safetensors");
  /* The memory techniques through the real backend: fp8 weights read by the
   * GEMMs, uploads on the copy stream ordered by events. */
  dc_memory_options mo = {.offload = DC_OFFLOAD_GROUP, .group_level = DC_GROUP_BLOCK, .blocks_per_group = 1,
                          .prefetch = 1, .storage = DT_F8_E4M3};
  memory = &mo;
  if (!skip) run_fixture("fixtures/unet_tiny", "forward", "io_forward.safetensors");
  /* The same kernels (built already), the uploads read from the weight
   * file through two pinned bounce chunks at each run (--host-memory on-demand). */
  mo.host_memory = DC_HOST_ON_DEMAND;
  if (!skip) run_fixture("fixtures/unet_tiny", "forward", "io_forward.safetensors");
  /* channels_last: the NHWC conv, group_norm and upsample kernels in a whole
   * plan, weights repacked, held to diffusers' outputs like the NCHW plan. */
  dc_memory_options nhwc = {.layout = LAYOUT_NHWC};
  memory = &nhwc;
  if (!skip) run_fixture("fixtures/unet_tiny", "forward", "io_forward.safetensors");
  if (!skip) run_fixture("fixtures/vae_tiny", "decode", "io_decode.safetensors");
  memory = NULL;
  dc_cu_api_set_override(NULL);
  return tu_finish_or_skip(skip);
}
