/* test_cuda_multi_errors.c — multi-GPU plans (cuda_multi_fixture.h) when
 * the machine does not fit or something fails, on the fake driver: a 1-GPU
 * machine refuses the two-GPU plan before anything is made; a --device that
 * leaves too few GPUs; too little free memory on GPU 1 (named) before any
 * allocation; an allocation failure on GPU 1 frees everything already made
 * on GPU 0; --device 1 on 3 GPUs runs on GPUs 1 and 2; without peer access
 * the copies still run; each host allocation of a load failing in turn
 * leaves nothing on either GPU.  Exits 77 without NVRTC. */
#include <stdlib.h>
#include <string.h>

#include "cuda_multi_fixture.h"

/* ==== errors ================================================================================ */
static void test_errors(const plan_file *two) {
  run_result r;
  char want[700];
  /* a machine with one GPU */
  fake_gpus(1, two);
  snprintf(want, sizeof want,
           "%s: the plan places modules on 2 GPUs; this machine has 1 CUDA device(s): recompile it for fewer (diffc "
           "--device-map with --max-memory naming the GPUs to use), or run it with --backend reference or llvm, "
           "which model each GPU as its own arena",
           two->path);
  CHECK_ERR(run_plan(two, NULL, NULL, &r), want);
  CHECK(fk.ncalls == 0 && no_leaks());
  /* two GPUs, from --device 1 */
  fake_gpus(2, two);
  drt_options dev1 = {.device = 1};
  snprintf(want, sizeof want,
           "%s: the plan places modules on 2 GPUs, devices 1..2 from --device 1, and this machine has 2 CUDA devices "
           "(numbered from 0): use --device 0 or lower",
           two->path);
  CHECK_ERR(run_plan(two, NULL, &dev1, &r), want);
  CHECK(no_leaks());
  printf("refused before any device call: a 2-GPU plan on 1 GPU, and from --device 1 on 2 GPUs\n");
  /* three GPUs, from --device 1: GPUs 1 and 2 */
  fake_gpus(3, two);
  run_result ok;
  CHECK_OK(run_plan(two, NULL, &dev1, &ok));
  devices dv = devices_of(2, 1);
  int on0 = 0;
  for (int i = 0; i < fk.ncalls; i++) on0 += fk.calls[i].kind == C_ALLOC && fk.calls[i].dev == 0;
  CHECK(on0 == 0 && dv.arena_bytes[0] == two->live.dev_peak[0] && dv.arena_bytes[1] == two->live.dev_peak[1]);
  CHECK(no_leaks());
  printf("--device 1 on three GPUs: the plan's devices 0 and 1 on CUDA devices 1 and 2\n");
  /* too little free memory on GPU 1: named, before any allocation */
  fake_gpus(2, two);
  uint64_t need1 = two->live.dev_peak[1] + dv.block_bytes[1];
  fk.free_on[1] = need1 - 1;
  dc_status *st = run_plan(two, NULL, NULL, &r);
  char n1[32];
  snprintf(want, sizeof want, "%s: the plan needs %s of device memory on its device 1 of 2 (%llu bytes", two->path,
           dc_format_bytes(need1, n1, sizeof n1), (unsigned long long)need1);
  CHECK(st && dc_status_code_of(st) == DC_ERR_NOMEM &&
        strstr(dc_status_message(st), "but device 1 (Fake GPU 9.0) has"));
  if (st) printf("out of memory on GPU 1: %.200s...\n", dc_status_message(st));
  CHECK_ERR(st, want);
  CHECK(count_calls(C_ALLOC, 0, fk.ncalls) == 0 && no_leaks());
  /* an allocation failure on GPU 1 frees what GPU 0 got */
  fake_gpus(2, two);
  fk.fail_alloc_device = 1;
  char n2[32];
  snprintf(want, sizeof want,
           "%s: allocating the %s arena on device 1: cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)", two->path,
           dc_format_bytes(two->live.dev_peak[1], n2, sizeof n2));
  CHECK_ERR(run_plan(two, NULL, NULL, &r), want);
  int allocs0 = 0;
  for (int i = 0; i < fk.ncalls; i++) allocs0 += fk.calls[i].kind == C_ALLOC && fk.calls[i].dev == 0;
  CHECK(allocs0 == 2 && fk.used[0] == 0 && no_leaks());
  printf("an allocation failure on GPU 1 after GPU 0's arena and weights: \"%s\"; everything freed\n", want);
  /* no peer access: the driver stages the copies; same outputs */
  fake_gpus(2, two);
  fk.no_peer = 1;
  run_result staged;
  CHECK_OK(run_plan(two, NULL, NULL, &staged));
  CHECK(count_calls(C_PEER_ENABLE, 0, fk.ncalls) == 0 && count_calls(C_PEER, staged.from, staged.to) > 0);
  CHECK(same_outputs(&staged, &ok) && no_leaks());
  printf("without peer access: no cuCtxEnablePeerAccess, the same peer copies and outputs\n");
  run_result_free(&ok), run_result_free(&staged);
}

/* Host allocation N of a load fails, for N = 0, 1, ... until the load
 * succeeds: each failure is a clean error that leaves nothing on either
 * GPU; the load that succeeds runs.  (Only the load: the fake's reference
 * kernels allocate too, and the backend's run allocates nothing.) */
static void test_alloc_failures(const plan_file *two) {
  int n = 0, clean = 1;
  for (;; n++) {
    fake_gpus(2, two);
    drt_plan *p = NULL;
    dc_alloc_fail_after(n);
    dc_status *st = drt_load(two->path, NULL, &p);
    dc_alloc_fail_after(-1);
    if (!st) {
      drt_set_random_inputs(p, 1);
      CHECK_OK(drt_run(p, NULL));
    }
    drt_destroy(p);
    clean &= no_leaks();
    if (!st) break;
    clean &= dc_status_code_of(st) == DC_ERR_NOMEM;
    dc_status_free(st);
  }
  CHECK(clean && n > 20);
  printf("allocation failure: each of the first %d host allocations of loading a 2-GPU plan failed in turn: a clean "
         "error, nothing left on either GPU\n", n);
}

int main(int argc, char **argv) {
  multi_init(argc, argv);
  plan_file two;
  dc_status *st = plan_open(&two, "two.dplan", 1, PLAIN);
  if (!missing_tool(st, "NVRTC")) {
    CHECK_OK(st);
    test_errors(&two);
    test_alloc_failures(&two);
  }
  plan_close(&two);
  return multi_finish();
}
