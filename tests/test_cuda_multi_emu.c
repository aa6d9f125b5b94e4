/* test_cuda_multi_emu.c — the two-GPU plan of cuda_multi_fixture.h with
 * the generated CUDA C run by the emulator (cuda_harness.h) in place of the
 * fake's reference kernels: outputs within 1e-4 of diffusers and of the
 * reference backend, and bit for bit the emulated one-GPU plan's.  Exits 77
 * without NVRTC or a host C++ compiler. */
#include <stdlib.h>
#include <string.h>

#include "cuda_multi_fixture.h"

/* ==== the generated kernels, emulated ========================================================= */
static const dc_plan *emu_plan;
static ch_kernel **built;

static void free_built(void) {
  ch_plan_free(emu_plan, built);
  built = NULL;
}


/* plan on `ndev` GPUs with the generated kernels (the kernels of the one-
 * and two-GPU plans are the same sources, built once). */
static dc_status *emulated_run(const plan_file *pf, int ndev, run_result *r) {
  fake_gpus(ndev, pf);
  emu_plan = &pf->plan;
  if (!built) DC_TRY(ch_plan_build(emu_plan, &built));
  for (int i = 0; i < pf->plan.cuda.nkernels; i++)
    if (!built[i]) return dc_error(DC_ERR_INTERNAL, "kernel %d was not built", i);
  ch_emulate_plan(emu_plan, built);
  fk.execute = ch_emulate_launch;
  dc_status *st = run_plan(pf, NULL, NULL, r);
  fk.execute = NULL;
  if (st && ch_emulate_error()[0]) printf("emulator: %s\n", ch_emulate_error());
  return st;
}

static void test_emulated(const plan_file *one, const plan_file *two) {
  run_result e1, e2, ref;
  CHECK(one->plan.cuda.nkernels == two->plan.cuda.nkernels);
  for (int i = 0; i < one->plan.cuda.nkernels; i++) /* the same kernels, so one build serves both */
    CHECK(!strcmp(one->plan.cuda.kernels[i].source, two->plan.cuda.kernels[i].source));
  double t0 = dc_now_seconds();
  dc_status *st = emulated_run(two, 2, &e2);
  if (missing_tool(st, "C++ compiler")) return;
  CHECK_OK(st);
  double t1 = dc_now_seconds();
  CHECK_OK(emulated_run(one, 1, &e1));
  CHECK_OK(run_plan(two, "reference", NULL, &ref));
  const dc_st_tensor *w = dc_st_find(&io, "out.sample");
  CHECK(w && e2.out && w->bytes == e2.numel * 4);
  if (w && e2.out && ref.out) {
    double vs_diffusers = tu_rel_l2(e2.out, (const float *)(io.file.data + w->offset), e2.numel);
    double vs_ref = tu_rel_l2(e2.out, ref.out, e2.numel);
    CHECK(vs_diffusers <= 1e-4 && vs_ref <= 1e-4 && same_outputs(&e1, &e2));
    printf("generated kernels, emulated on two GPUs (%.1f s with the builds): rel L2 %.3g vs diffusers, %.3g vs the "
           "reference backend (tolerance 1e-4); %s the emulated one-GPU plan\n",
           t1 - t0, vs_diffusers, vs_ref, same_outputs(&e1, &e2) ? "bit-identical to" : "DIFFERENT from");
  }
  run_result_free(&e1), run_result_free(&e2), run_result_free(&ref);
  free_built();
}

int main(int argc, char **argv) {
  multi_init(argc, argv);
  plan_file one, two;
  dc_status *st = plan_open(&one, "one.dplan", 0, PLAIN);
  if (!missing_tool(st, "NVRTC")) {
    CHECK_OK(st);
    CHECK_OK(plan_open(&two, "two.dplan", 1, PLAIN));
    test_emulated(&one, &two);
    plan_close(&two);
  }
  plan_close(&one);
  return multi_finish();
}
