/* test_cuda_host.c — the host side of the CUDA backend (runtime/cuda_backend.c,
 * cuda_driver.c) without a GPU, through the fake driver of
 * cuda_fake_driver.h: device memory is host memory, every call is logged,
 * and a launch runs the reference kernel of the node its kernel stands for,
 * so the hand-built plan of cuda_host_fixture.h runs through the real
 * backend and must give the plain evaluation's outputs bit for bit.
 *
 * This file: what runs where and in what order.  Which image runs on which
 * compute capability (cubin same major with minor >=, arch-specific 'a' only
 * on its own, PTX JIT on newer devices, a clear error naming the archs
 * otherwise); launch parameters are the arena offsets of the memory plan and
 * the weights' places in the weight block (out, then the inputs);
 * grid/block/smem from the plan; the stream and event order of a run,
 * uploads included (on demand: chunk by chunk, a chunk refilled only after
 * its last copy's event, no pinned block for the weights); the weight upload
 * through two pinned staging buffers; no leaked device objects after any of
 * it.  Failures are in test_cuda_host_errors.c, profiling, --check-finite and
 * diffrun's API in test_cuda_host_api.c. */
#include <stdlib.h>
#include <string.h>

#include "cuda_host_fixture.h"

/* ==== image choice ========================================================= */
static const char *pick(dc_plan_cuda_image *im, int n, int major, int minor) {
  dc_plan_cuda_kernel k = {0};
  k.images = im;
  k.nimages = n;
  int i = dc_cuda_pick_image(&k, major, minor);
  return i < 0 ? "none" : im[i].arch;
}

static void test_pick_image(void) {
  dc_plan_cuda_image std[3] = {{"sm_80", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"sm_90", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"compute_90", DC_CUDA_IMAGE_PTX, NULL, 0}};
  static const struct {
    int major, minor;
    const char *want;
  } cases[] = {{9, 0, "sm_90"},       {8, 0, "sm_80"},       {8, 6, "sm_80"},  {8, 9, "sm_80"},
               {10, 0, "compute_90"}, {12, 0, "compute_90"}, {7, 5, "none"},   {9, 1, "sm_90"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *got = pick(std, 3, cases[i].major, cases[i].minor);
    CHECK(!strcmp(got, cases[i].want));
    printf("image for %d.%d among sm_80, sm_90, compute_90: %s\n", cases[i].major, cases[i].minor, got);
  }
  /* 'a' builds run only on their own arch, and win there; 'f' builds on their family. */
  dc_plan_cuda_image spec[4] = {{"sm_90", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                                {"sm_90a", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                                {"sm_100f", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                                {"compute_80", DC_CUDA_IMAGE_PTX, NULL, 0}};
  CHECK(!strcmp(pick(spec, 4, 9, 0), "sm_90a"));
  CHECK(!strcmp(pick(spec, 4, 9, 1), "sm_90"));
  CHECK(!strcmp(pick(spec, 4, 10, 3), "sm_100f"));
  CHECK(!strcmp(pick(spec, 4, 12, 0), "compute_80"));
  CHECK(!strcmp(pick(spec, 4, 8, 6), "compute_80"));
  CHECK(!strcmp(pick(spec + 1, 1, 9, 1), "none"));
  /* Names that are no arch, and kinds that do not match their name, never run. */
  dc_plan_cuda_image bad[4] = {{"sm_", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"sm_90x", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"compute_80", DC_CUDA_IMAGE_CUBIN, NULL, 0},
                               {"sm_80", DC_CUDA_IMAGE_PTX, NULL, 0}};
  CHECK(!strcmp(pick(bad, 4, 9, 0), "none"));
  printf("arch-specific sm_90a only on 9.0 (preferred there), sm_100f on 10.x, malformed names never\n");
}

/* The images the backend loads on each device, and the error when none fits. */
static void test_images_on_device(fixture *fx) {
  static const struct {
    int major, minor, image, jit;
  } cases[] = {{9, 0, 1, 0}, {8, 6, 0, 0}, {12, 0, 2, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    fake_reset(cases[c].major, cases[c].minor);
    dc_cuda_backend *b = NULL;
    CHECK_OK(create(fx, NULL, &b));
    int loads = 0, right = 1;
    for (int i = 0; i < fk.ncalls; i++) {
      const fake_call *call = &fk.calls[i];
      if (call->kind != C_LOAD) continue;
      const dc_plan_cuda_kernel *kk = &fx->plan.cuda.kernels[loads++];
      right &= call->image == kk->images[cases[c].image].data && call->jit == cases[c].jit;
    }
    CHECK(loads == fx->plan.cuda.nkernels && right);
    CHECK(count_calls(C_GETFN) == fx->plan.cuda.nkernels);
    const dc_cuda_backend_info *in = dc_cuda_backend_get_info(b);
    CHECK(in->jit_kernels == (cases[c].jit ? fx->plan.cuda.nkernels : 0));
    printf("device %d.%d: %d modules from %s, %s\n", cases[c].major, cases[c].minor, loads,
           fx->plan.cuda.kernels[0].images[cases[c].image].arch, in->image);
    dc_cuda_backend_destroy(b);
    check_no_leaks("images");
  }
  fake_reset(12, 0); /* the second kernel's PTX does not JIT: the first module is unloaded again */
  fk.fail_jit_at = 2;
  dc_cuda_backend *b = NULL;
  CHECK_ERR(create(fx, NULL, &b),
            "test.dplan: kernel k1_conv2d (PTX compute_90): cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (a PTX JIT "
            "compilation failed); the PTX JIT said: ptxas fatal: unknown instruction (fake)");
  check_no_leaks("JIT failure");
  fake_reset(7, 5);
  CHECK_ERR(create(fx, NULL, &b),
            "test.dplan: device 0 (Fake GPU 7.5) has compute capability 7.5, and the plan has no image for it (it "
            "holds sm_80, sm_90, compute_90: a cubin sm_XY runs on X.Y and later GPUs of the same major X, PTX "
            "compute_XY on X.Y or newer); recompile with diffc --target cuda --cuda-arch sm_75");
  CHECK(!b && count_calls(C_ALLOC) == 0 && count_calls(C_LOAD) == 0);
  check_no_leaks("no image");
  printf("device 7.5: refused before any allocation or module load\n");
}

static void test_run(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  const dc_cuda_backend_info *in = dc_cuda_backend_get_info(b);
  device_blocks d = blocks_of(fx);
  /* Layout: 256-aligned weights in index order; scale (32 B) leaves the
   * device block for the host one when offloaded. */
  uint64_t want_block = fx->offload ? 768 + 32 : 1024 + 32;
  CHECK(in->weight_block_bytes == want_block && d.weight_bytes == want_block);
  CHECK(in->host_weight_bytes == (fx->offload ? 32u : 0u));
  CHECK(in->arena_bytes == m->arena_bytes && in->device_bytes == m->arena_bytes + want_block);
  uint64_t top = 0, io = 0;
  for (int32_t s = 0; s < m->nnodes; s++)
    if (m->nodes[s].op != OP_WEIGHT && (uint64_t)m->nodes[s].offset + dc_type_bytes(&m->nodes[s].type) > top)
      top = (uint64_t)m->nodes[s].offset + dc_type_bytes(&m->nodes[s].type);
  for (int i = 0; i < m->ninputs; i++) io += dc_type_bytes(&m->nodes[m->inputs[i].node].type);
  for (int i = 0; i < m->noutputs; i++) io += dc_type_bytes(&m->nodes[m->outputs[i].node].type);
  /* pinned memory: inputs, outputs and the offloaded weights, or on demand
   * two bounce chunks instead of the weights */
  CHECK(in->on_demand == fx->on_demand && in->bounce_bytes == (fx->on_demand ? BOUNCE : 0u));
  CHECK(in->arena_peak_bytes == top && in->pinned_bytes == io + (fx->on_demand ? 2 * BOUNCE : in->host_weight_bytes));
  CHECK(live_blocks(1) == m->ninputs + m->noutputs + (fx->on_demand ? 2 : fx->offload));
  int meminfo_first = 0;
  for (int i = 0; i < fk.ncalls && !meminfo_first; i++)
    if (fk.calls[i].kind == C_MEMINFO || fk.calls[i].kind == C_ALLOC) meminfo_first = fk.calls[i].kind == C_MEMINFO;
  CHECK(meminfo_first);

  float **inputs = input_arrays(m);
  for (int r = 0; r < 2; r++) {
    set_random_inputs(fx, b, inputs);
    int from = fk.ncalls;
    double kernel_s = -1;
    CHECK_OK(dc_cuda_backend_run(b, NULL, &kernel_s));
    int order = check_run_order(fx, from, &d), same = outputs_match(fx, b, inputs);
    CHECK(order && same && kernel_s > 0);
    printf("%srun %d: %d calls in order (inputs, event, %d launches%s, event, outputs, sync), outputs %s\n",
           fx->on_demand ? "on-demand: " : fx->offload ? "offload: " : "", r + 1, fk.ncalls - from,
           fk.launches / (r + 1), fx->on_demand ? ", an upload in 3 chunks" : fx->offload ? ", an upload" : "",
           same ? "bit-exact" : "DIFFER");
  }
  free_arrays(m, inputs);
  printf("%sarena %llu B at the plan's offsets, weight block %llu B, %llu B offloaded, %s\n",
         fx->on_demand ? "on-demand: " : fx->offload ? "offload: " : "", (unsigned long long)in->arena_bytes,
         (unsigned long long)in->weight_block_bytes, (unsigned long long)in->host_weight_bytes,
         fx->on_demand ? "read at each upload through 2 pinned chunks of 12 B" : "in pinned host memory");
  dc_cuda_backend_destroy(b);
  check_no_leaks("run");
}

/* ==== the weight upload ======================================================= */
/* Chunks of 200 bytes through two pinned buffers: every chunk copied once,
 * contiguous, in order; a buffer is refilled only after the event recorded
 * behind its previous copy completed; the staging is freed afterwards. */
static void test_weight_upload(fixture *fx) {
  fake_reset(9, 0);
  dc_cuda_backend_options o = {0};
  o.staging_bytes = 200;
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  device_blocks d = blocks_of(fx);
  uint64_t total = dc_cuda_backend_get_info(b)->weight_block_bytes, pos = 0;
  uint64_t src[2] = {0, 0};
  int nchunks = 0, ok = 1, copy = 0, last_event[2] = {0, 0};
  for (int i = 0; i < fk.ncalls; i++) {
    const fake_call *c = &fk.calls[i];
    if (c->kind != C_HTOD) continue;
    int k = nchunks % 2;
    ok &= c->dst == d.weights + pos && c->bytes == (total - pos < 200 ? total - pos : 200) && c->host_pinned;
    copy = nchunks ? copy : c->stream;
    ok &= c->stream == copy && i + 1 < fk.ncalls && fk.calls[i + 1].kind == C_RECORD && fk.calls[i + 1].stream == copy;
    if (nchunks < 2) src[k] = c->src;
    ok &= c->src == src[k];
    if (nchunks >= 2) { /* the refill of buffer k waited for its previous copy */
      int waited = 0;
      for (int j = i - 1; j >= 0 && !waited && !(fk.calls[j].kind == C_HTOD && fk.calls[j].src == src[k]); j--)
        waited = fk.calls[j].kind == C_EVSYNC && fk.calls[j].event == last_event[k];
      ok &= waited;
    }
    last_event[k] = i + 1 < fk.ncalls ? fk.calls[i + 1].event : 0;
    pos += c->bytes;
    nchunks++;
  }
  CHECK(ok && src[0] != src[1] && pos == total && nchunks == (int)((total + 199) / 200));
  CHECK(dc_cuda_backend_get_info(b)->staging_bytes == 400);
  CHECK(live_blocks(1) == fx->plan.module->ninputs + fx->plan.module->noutputs); /* staging freed */
  /* The block's bytes, checked through where the launches find each weight. */
  float **inputs = input_arrays(fx->plan.module);
  set_random_inputs(fx, b, inputs);
  int from = fk.ncalls;
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(check_run_order(fx, from, &d) && outputs_match(fx, b, inputs));
  free_arrays(fx->plan.module, inputs);
  printf("weight upload: %llu B in %d chunks of <= 200 B through 2 pinned buffers, each refill after its copy's "
         "event; every weight's bytes in place\n",
         (unsigned long long)total, nchunks);
  dc_cuda_backend_destroy(b);
  check_no_leaks("upload");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_pick_image();
  fixture fx;
  fixture_init(&fx, 0, 0);
  test_images_on_device(&fx);
  test_run(&fx);
  test_weight_upload(&fx);
  fixture_deinit(&fx);
  fixture_init(&fx, 1, 0);
  test_run(&fx);
  fixture_deinit(&fx);
  fixture_init(&fx, 1, 1);
  test_run(&fx);
  fixture_deinit(&fx);
  return tu_finish();
}
