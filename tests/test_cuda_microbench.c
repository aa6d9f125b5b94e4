/* test_cuda_microbench.c — tools/cuda_microbench's cases (tools/microbench.h)
 * end to end without a GPU: each case kind at a small shape (conv NCHW and
 * NHWC, linear, attention; bf16 and f32 compute) compiled as the tool
 * compiles it (PTX for compute_90), loaded by the real runtime on the CUDA
 * backend, whose launches the fake driver (cuda_fake_driver.h) runs in the
 * CPU emulator.  Checked: the timed step is the op with ir/flops.c's count;
 * the timing loop gives one time per run (the fake's events count 1 ms per
 * logged call, so every run times alike) and the BENCH row carries the
 * median, the best, TFLOP/s and the share of the peak from them; the op's
 * output equals the reference backend's on the same plan and inputs (rel L2
 * 1e-5 in f32 compute, 1e-2 in bf16: the op cases' tolerances for the
 * tensor-core rows).
 * Exits 77 without NVRTC or a host C++ compiler. */
#include <stdlib.h>
#include <string.h>

#include "cuda_fake_driver.h"
#include "cuda_harness.h"
#include "plan/plan_format.h"
#include "runtime/diffrun.h"
#include "testutil.h"
#include "tools/microbench.h"

static dc_plan plan;
static ch_kernel **built;

/* The plan's output on the emulated CUDA backend against the reference
 * backend, inputs from the same seed. */
static double output_vs_reference(const char *path) {
  drt_options cuda = {.backend = "cuda"}, ref = {.backend = "reference"};
  drt_plan *a = NULL, *b = NULL;
  CHECK_OK(drt_load(path, &cuda, &a));
  CHECK_OK(drt_load(path, &ref, &b));
  double err = 1e30;
  if (a && b) {
    drt_set_random_inputs(a, 7);
    drt_set_random_inputs(b, 7);
    dc_status *st = drt_run(a, NULL);
    if (st && ch_emulate_error()[0]) printf("emulator: %s\n", ch_emulate_error());
    CHECK_OK(st);
    CHECK_OK(drt_run(b, NULL));
    size_t n = 0, nb = 0;
    const float *got = drt_output(a, "y", &n), *want = drt_output(b, "y", &nb);
    CHECK(got && want && n == nb && n > 0);
    if (got && want && n == nb) err = tu_rel_l2(got, want, n);
  }
  drt_destroy(a);
  drt_destroy(b);
  return err;
}

static uint64_t expected_flops(const mb_case *c) {
  const int64_t *d = c->d;
  if (c->op == MB_CONV) return 2ull * (uint64_t)(d[0] * d[4] * d[2] * d[3] * d[1] * 9);
  if (c->op == MB_LINEAR) return 2ull * (uint64_t)(d[0] * d[1] * d[2]);
  return 4ull * (uint64_t)(d[0] * d[2] * d[2] * d[1] * d[3]);
}

static int skip;

static void run_case(const mb_case *c, dc_cuda_compute compute, const dc_nvrtc *nv, const dc_cuda_arch *arch,
                     int index) {
  mb_compiled k = {0};
  CHECK_OK(mb_compile(c, compute, tu_tmpdir(), index, nv, arch, 1, &k));
  if (!k.plan_path || dc_plan_read(k.plan_path, &plan) != NULL) {
    CHECK(0);
    dc_free(k.plan_path);
    return;
  }
  const dc_node *op = &plan.module->nodes[k.step];
  CHECK(k.flops == expected_flops(c) && dc_node_flops(plan.module, k.step) == k.flops);
  CHECK(op->op == (c->op == MB_CONV ? OP_CONV2D : c->op == MB_LINEAR ? OP_LINEAR : OP_ATTENTION));
  CHECK(!c->nhwc || op->layout == LAYOUT_NHWC);
  fake_reset(9, 0);
  fake_bind(plan.module, &plan.cuda);
  dc_status *st = ch_plan_build(&plan, &built);
  if (st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED && strstr(dc_status_message(st), "C++ compiler")) {
    printf("SKIP: %s\n", dc_status_message(st));
    dc_status_free(st);
    skip = 1;
  } else if (!st) {
    ch_emulate_plan(&plan, built);
    fk.execute = ch_emulate_launch;
    enum { REPEAT = 3 };
    double t[REPEAT] = {0};
    char note[600];
    CHECK_OK(mb_time(c, &k, 0, 1, REPEAT, t, note, sizeof note));
    CHECK(t[0] > 0 && t[0] == t[REPEAT - 1]); /* the fake's clock: every run alike */
    char row[1024], want[256];
    mb_row(c, &k, compute, t, REPEAT, 100.0, "ok", row, sizeof row);
    double tf = (double)k.flops / t[1] * 1e-12;
    snprintf(want, sizeof want, " compute=%s act=%s median_ms=%.4f min_ms=%.4f tflops=%.1f pct_peak=%.1f status=ok",
             dc_cuda_compute_name(compute), dc_dtype_name(k.act), t[1] * 1e3, t[0] * 1e3, tf, tf);
    CHECK(strstr(row, want) != NULL);
    double err = output_vs_reference(k.plan_path), tol = compute == DC_CUDA_COMPUTE_F32 ? 1e-5 : 1e-2;
    CHECK(err <= tol);
    printf("%s\n  %d kernel(s) emulated, %s: rel L2 %.3g vs the reference backend (tolerance %g)\n", row,
           plan.cuda.nkernels, dc_cuda_compute_name(compute), err, tol);
    fk.execute = NULL;
  } else {
    CHECK_OK(st);
  }
  ch_plan_free(&plan, built);
  built = NULL;
  dc_plan_deinit(&plan);
  memset(&plan, 0, sizeof plan);
  dc_free(k.plan_path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  ch_init(argv[1]);
  dc_nvrtc *nv = NULL;
  dc_status *st = dc_nvrtc_load(&nv);
  if (st) {
    printf("SKIP: %s\n", dc_status_message(st));
    dc_status_free(st);
    return tu_finish_or_skip(1);
  }
  dc_cuda_arch arch[DC_CUDA_MAX_ARCHS];
  int narch = 0;
  CHECK_OK(dc_nvrtc_parse_archs(nv, "compute_90", arch, &narch));
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  static const mb_case cases[] = {
      {MB_CONV, {1, 8, 6, 6, 16}, 0, 0},
      {MB_CONV, {1, 8, 6, 6, 16}, 1, 0},
      {MB_LINEAR, {40, 24, 48}, 0, 0},
      {MB_ATTENTION, {1, 2, 24, 64}, 0, 0},
  };
  int index = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !skip; i++)
    run_case(&cases[i], DC_CUDA_COMPUTE_BF16, nv, arch, index++);
  static const mb_case f32_linear = {MB_LINEAR, {40, 24, 48}, 0, 0};
  if (!skip) run_case(&f32_linear, DC_CUDA_COMPUTE_F32, nv, arch, index++);
  CHECK(live_objs() == 0 && live_blocks(0) == 0 && live_blocks(1) == 0 && fk.ctx_refs == 0);
  dc_cu_api_set_override(NULL);
  dc_nvrtc_unload(nv);
  return tu_finish_or_skip(skip);
}
