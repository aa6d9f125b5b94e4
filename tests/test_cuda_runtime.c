/* test_cuda_runtime.c — the CUDA backend on the real driver.
 *
 * Without a driver (libcuda.so.1 cannot be loaded): a CUDA plan fails to
 * load with the one message that says so and what still works, leaving
 * nothing behind (the sanitizer build checks for leaks), and the same plan
 * still runs on the CPU with --backend reference; then exit 77 (skip),
 * printing why as the "SKIP: " line ctest shows.
 *
 * With a GPU: the unet_tiny fixture compiled for CUDA (NVRTC) runs on the
 * device and matches diffusers' recorded outputs (fp32 compute: rel L2
 * <= 1e-4; bf16: <= 1e-2) and the reference backend on the same plan;
 * profiling gives per-step device times; a plan whose cubin is not a valid
 * image fails naming the kernel and the driver call; a plan needing 2 TiB
 * fails before running anything, saying how much it needs and how much is
 * free. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "driver/compile.h"
#include "frontend/frontend.h"
#include "passes/passes.h"
#include "runtime/cuda_driver.h"
#include "runtime/diffrun.h"
#include "plan/plan_format.h"
#include "testutil.h"

/* x[n] -> silu -> y, one kernel whose images are not real code ("\x7fELF"
 * satisfies the plan reader, not the driver). */
static char *write_silu_plan(const char *name, int64_t n) {
  dc_plan plan = {0};
  dc_module *m = dc_module_create();
  dc_type t = {DT_F32, 1, {n}};
  int32_t x = dc_module_add_input(m, "x", &t, INIT_NORMAL);
  dc_node silu = dc_node_make(OP_SILU, 1, &x);
  silu.type = t;
  silu.scope = "act";
  int32_t y = dc_module_add_node(m, &silu);
  CHECK_OK(dc_module_add_output(m, "y", y));
  CHECK_OK(dc_memplan(m, NULL));
  static char cubin[] = "\x7f" "ELF not a real cubin", ptx[] = "not real PTX";
  dc_plan_cuda_image images[3] = {{(char *)"sm_80", DC_CUDA_IMAGE_CUBIN, (uint8_t *)cubin, sizeof cubin},
                                  {(char *)"sm_90", DC_CUDA_IMAGE_CUBIN, (uint8_t *)cubin, sizeof cubin},
                                  {(char *)"compute_80", DC_CUDA_IMAGE_PTX, (uint8_t *)ptx, sizeof ptx}};
  dc_plan_cuda_kernel k = {(char *)"k0_silu", (char *)"/* none */", {1, 1, 1}, {256, 1, 1}, 0, images, 3};
  int32_t kernel_of_node[2] = {-1, 0};
  plan.target = DC_TARGET_CUDA;
  plan.module = m;
  plan.options_json = (char *)"{}";
  plan.ir_text = (char *)"";
  plan.cuda = (dc_plan_cuda){(char *)"f32", (char *)"13.0", &k, 1, kernel_of_node, 2};
  char *path = tu_path(name);
  CHECK_OK(dc_plan_write(path, &plan));
  dc_module_destroy(m);
  return path;
}

static int without_driver(const dc_status *why) {
  const char *msg = dc_status_message(why);
  CHECK(strncmp(msg, "no NVIDIA driver was found (libcuda.so.1", 40) == 0);
  char *path = write_silu_plan("silu.dplan", 1000);
  char want[1200];
  snprintf(want, sizeof want,
           "%s: this plan targets CUDA, and %s; --backend reference runs it on the CPU (plain C kernels, slow), or "
           "compile with diffc --target cpu for this CPU",
           path, msg);
  drt_plan *p = NULL;
  dc_status *st = drt_load(path, NULL, &p);
  CHECK(st && !p && dc_status_code_of(st) == DC_ERR_UNSUPPORTED);
  if (st) CHECK(!strcmp(dc_status_message(st), want));
  if (st) printf("no driver: \"%s\"\n", dc_status_message(st));
  dc_status_free(st);
  drt_options ref = {.backend = "reference"};
  CHECK_OK(drt_load(path, &ref, &p));
  if (p) {
    drt_set_random_inputs(p, 3);
    CHECK_OK(drt_run(p, NULL));
    size_t n = 0;
    CHECK(drt_output(p, "y", &n) && n == 1000);
    drt_destroy(p);
    printf("the same plan runs with --backend reference on the CPU\n");
  }
  free(path);
  int rc = tu_finish();
  if (!rc) /* the line ctest shows for a skipped test (tests/skip_reasons.cmake) */
    printf("SKIP: %s: the GPU checks did not run (without one: a CUDA plan is refused with that message and runs "
           "with --backend reference)\n", msg);
  return rc ? rc : 77;
}

/* ---- with a GPU ----------------------------------------------------------- */
static void broken_images(void) {
  char *path = write_silu_plan("bogus.dplan", 1000);
  drt_plan *p = NULL;
  dc_status *st = drt_load(path, NULL, &p);
  CHECK(st && !p);
  if (st) {
    const char *msg = dc_status_message(st);
    printf("invalid image: %s\n", msg);
    CHECK(strstr(msg, "kernel k0_silu (") && strstr(msg, ": cuModuleLoadData"));
  }
  dc_status_free(st);
  free(path);
}

static void too_big(void) {
  char *path = write_silu_plan("huge.dplan", (int64_t)1 << 38); /* 1 TiB in, 1 TiB out */
  drt_plan *p = NULL;
  dc_status *st = drt_load(path, NULL, &p);
  CHECK(st && !p && dc_status_code_of(st) == DC_ERR_NOMEM);
  if (st) {
    printf("too big: %s\n", dc_status_message(st));
    CHECK(strstr(dc_status_message(st), "needs 2.0 TiB of device memory") &&
          strstr(dc_status_message(st), "nothing was run"));
  }
  dc_status_free(st);
  free(path);
}

static void run_fixture(const char *compute, double tol) {
  char *dir = dc_path_join(tu_source_dir, "fixtures/unet_tiny"), *model = dc_path_join(dir, "model");
  char *io_path = dc_path_join(dir, "io_forward.safetensors"), *plan = tu_path("unet_tiny.dplan");
  dc_st_file io;
  CHECK_OK(dc_st_open(io_path, &io));
  dc_input_shape shapes[8];
  int ns = 0;
  for (int i = 0; i < io.ntensors && ns < 8; i++)
    if (strncmp(io.tensors[i].name, "out.", 4) != 0) {
      shapes[ns].name = io.tensors[i].name;
      shapes[ns].rank = io.tensors[i].rank;
      memcpy(shapes[ns++].dims, io.tensors[i].dims, sizeof shapes[0].dims);
    }
  dc_compile_options co = {.model = model, .entry = "forward", .shapes = shapes, .nshapes = ns, .target = "cuda",
                           .compute = compute};
  dc_compile_report rep;
  dc_status *st = dc_compile(&co, plan, &rep);
  CHECK_OK(st);
  drt_plan *gpu = st ? NULL : tu_load_with_inputs(plan, NULL, &io), *ref = st ? NULL : tu_load_with_inputs(plan, "reference", &io);
  drt_stats gs = {0}, rs = {0};
  if (gpu && ref) {
    CHECK_OK(drt_set_profiling(gpu, 1));
    CHECK_OK(drt_run(gpu, &gs));
    CHECK_OK(drt_run(ref, &rs));
    CHECK(!strcmp(gs.backend, "cuda") && gs.device_peak_bytes == gs.device_predicted_bytes && gs.kernel_seconds > 0);
    drt_step_time t[4];
    CHECK(drt_profile(gpu, t, 4) == 4 && t[0].seconds > 0);
    printf("unet_tiny, compute %s on %s: %d kernels, %.3f s (kernels %.3f ms), device memory %llu B\n", compute,
           drt_info(gpu)->device, rep.cuda_kernels, gs.seconds, gs.kernel_seconds * 1e3,
           (unsigned long long)gs.device_total_bytes);
    for (int i = 0; i < drt_output_count(gpu); i++) {
      const drt_tensor_info *info = drt_output_info(gpu, i);
      char name[160];
      snprintf(name, sizeof name, "out.%s", info->name);
      const dc_st_tensor *w = dc_st_find(&io, name);
      CHECK(w && w->bytes / 4 == info->numel);
      if (!w) continue;
      float *want = malloc(w->bytes);
      memcpy(want, io.file.data + w->offset, w->bytes);
      double vs_diffusers = tu_rel_l2(drt_output(gpu, info->name, NULL), want, info->numel);
      double vs_ref = tu_rel_l2(drt_output(gpu, info->name, NULL), drt_output(ref, info->name, NULL), info->numel);
      CHECK(vs_diffusers <= tol && vs_ref <= tol);
      printf("  %s: rel L2 %.3g vs diffusers, %.3g vs the reference backend (tolerance %.0e)\n", name, vs_diffusers,
             vs_ref, tol);
      free(want);
    }
  }
  drt_destroy(gpu);
  drt_destroy(ref);
  dc_st_close(&io);
  free(dir), free(model), free(io_path), free(plan);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  dc_cu_api api;
  dc_status *st = dc_cu_api_load(NULL, &api);
  if (st) {
    int rc = without_driver(st);
    dc_status_free(st);
    return rc;
  }
  int count = 0;
  if (api.Init(0) != DC_CUDA_SUCCESS || api.DeviceGetCount(&count) != DC_CUDA_SUCCESS || count == 0) {
    printf("SKIP: an NVIDIA driver but no usable GPU\n");
    return 77;
  }
  dc_cu_api_unload(&api);
  broken_images();
  too_big();
  run_fixture("f32", 1e-4);
  run_fixture("bf16", 1e-2);
  return tu_finish();
}
