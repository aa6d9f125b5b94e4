/* test_cuda_host_errors.c — the CUDA backend's host side when something
 * fails, through the fake driver and the plan of cuda_host_fixture.h: the
 * opt-in shared memory attribute (and its failure); errors that name the
 * failing step, kernel or JIT log; the out-of-memory message before any
 * allocation; a bad device index; every host allocation failing in turn; an
 * on-demand chunk read that fails (reported with its step, the backend usable
 * after it) and an on-demand plan without a reader; the driver layer's
 * messages; and the driver constants against the toolkit's cuda.h when it is
 * installed.  Nothing leaks after any of it. */
#include <stdlib.h>
#include <string.h>

#include "cuda_host_fixture.h"

/* ==== shared memory, failures, memory ============================================ */
static void test_big_shared_memory(fixture *fx) {
  dc_plan_cuda_kernel *conv = &fx->plan.cuda.kernels[fx->plan.cuda.kernel_of_node[fx->conv]];
  uint32_t saved = conv->smem_bytes;
  conv->smem_bytes = 100 * 1024;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  int attrs = 0, ok = 1;
  for (int i = 0; i < fk.ncalls; i++)
    if (fk.calls[i].kind == C_ATTR) {
      attrs++;
      ok &= !strcmp(fk.calls[i].fn, conv->name) && fk.calls[i].attr == DC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES &&
            fk.calls[i].value == 100 * 1024;
    }
  CHECK(attrs == 1 && ok);
  if (b) {
    float **inputs = input_arrays(fx->plan.module);
    set_random_inputs(fx, b, inputs);
    CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
    int launched = 0;
    for (int i = 0; i < fk.ncalls; i++)
      if (fk.calls[i].kind == C_LAUNCH && !strcmp(fk.calls[i].fn, conv->name)) launched = fk.calls[i].smem == 100 * 1024;
    CHECK(launched);
    free_arrays(fx->plan.module, inputs);
  }
  dc_cuda_backend_destroy(b);
  check_no_leaks("smem");
  fake_reset(8, 0);
  fk.optin = 48 * 1024;
  CHECK_ERR(create(fx, NULL, &b),
            "test.dplan: kernel k1_conv2d needs 102400 bytes of dynamic shared memory per block, but device 0 (Fake "
            "GPU 8.0, 8.0) allows at most 49152; recompile for this GPU (diffc --cuda-arch sm_80)");
  CHECK(count_calls(C_ALLOC) == 0);
  check_no_leaks("smem refused");
  conv->smem_bytes = saved;
  printf("100 KiB of dynamic shared memory: the attribute set on that kernel only; refused where the opt-in max is "
         "48 KiB\n");
}

static void test_launch_failure(fixture *fx) {
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  fk.fail_launch_at = 3; /* cast, conv2d, then add */
  char want[256];
  snprintf(want, sizeof want,
           "test.dplan: step %d (add in down.shift): cuLaunchKernel: CUDA_ERROR_LAUNCH_FAILED (unspecified launch "
           "failure)",
           (int)fx->add);
  CHECK_ERR(dc_cuda_backend_run(b, NULL, NULL), want);
  int n = fk.ncalls;
  CHECK(fk.launches == 3 && n >= 2 && fk.calls[n - 1].kind == C_STREAMSYNC && fk.calls[n - 2].kind == C_STREAMSYNC);
  dc_cuda_backend_destroy(b);
  check_no_leaks("launch failure");
  printf("a failing launch: \"%s\"; both streams synchronised, nothing launched after it\n", want);
}

static void test_out_of_memory(fixture *fx) {
  const dc_module *m = fx->plan.module;
  uint64_t need = m->arena_bytes + 1056;
  fake_reset(9, 0);
  fk.free_bytes = need - 1;
  dc_cuda_backend *b = NULL;
  dc_status *st = create(fx, NULL, &b);
  char n1[32], n2[32], n3[32], n4[32], want[700];
  snprintf(want, sizeof want,
           "test.dplan: the plan needs %s of device memory (%llu bytes: activation arena %s + resident weights %s) "
           "but device 0 (Fake GPU 9.0) has %s free (%llu bytes) of 80.0 GiB; nothing was run.  To fit, free GPU "
           "memory (other processes?) or compile for less: diffc --offload model|sequential|group keeps weights in "
           "host memory, a smaller batch or resolution (--input) shrinks the arena",
           dc_format_bytes(need, n1, sizeof n1), (unsigned long long)need,
           dc_format_bytes(m->arena_bytes, n2, sizeof n2), dc_format_bytes(1056, n3, sizeof n3),
           dc_format_bytes(need - 1, n4, sizeof n4), (unsigned long long)(need - 1));
  if (st) printf("out of memory: %s\n", dc_status_message(st));
  CHECK(st && dc_status_code_of(st) == DC_ERR_NOMEM);
  CHECK_ERR(st, want);
  CHECK(!b && count_calls(C_ALLOC) == 0 && count_calls(C_LOAD) == 0 && count_calls(C_LAUNCH) == 0);
  check_no_leaks("out of memory");
  fake_reset(9, 0);
  fk.free_bytes = need; /* exactly enough */
  CHECK_OK(create(fx, NULL, &b));
  dc_cuda_backend_destroy(b);
  check_no_leaks("exactly enough");
}

static void test_device_index(fixture *fx) {
  fake_reset(9, 0);
  dc_cuda_backend_options o = {0};
  o.device = 1;
  dc_cuda_backend *b = NULL;
  CHECK_ERR(create(fx, &o, &b), "--device 1: this machine has 1 CUDA device(s) (numbered from 0)");
  fake_reset(9, 0);
  fk.ndevices = 0;
  CHECK_ERR(create(fx, NULL, &b), "--device 0: this machine has 0 CUDA device(s)");
  check_no_leaks("device index");
}

/* Host allocation N fails, for N = 0, 1, ... until creating the backend and
 * a profiled run succeed: each failure is a clean DC_ERR_NOMEM and leaves no
 * device object behind (the sanitizer build checks the host side). */
static void test_alloc_failures(fixture *fx) {
  int n = 0, clean = 1;
  for (;; n++) {
    fake_reset(9, 0);
    dc_cuda_backend *b = NULL;
    double steps[64] = {0};
    dc_alloc_fail_after(n);
    dc_status *st = create(fx, NULL, &b);
    if (!st) st = dc_cuda_backend_run(b, steps, NULL);
    dc_alloc_fail_after(-1);
    dc_cuda_backend_destroy(b);
    clean &= live_objs() == 0 && live_blocks(0) == 0 && live_blocks(1) == 0 && fk.ctx_refs == 0;
    if (!st) break;
    clean &= dc_status_code_of(st) == DC_ERR_NOMEM;
    dc_status_free(st);
  }
  CHECK(clean && n > 5);
  printf("allocation failure: each of the first %d host allocations failed in turn: a clean error, nothing left on "
         "the device\n",
         n);
}

/* ==== the driver layer ============================================================= */
static void test_driver_messages(void) {
  dc_cu_api api = fake_api();
  char buf[128];
  CHECK(!strcmp(dc_cu_result_text(&api, DC_CUDA_ERROR_LAUNCH_FAILED, buf, sizeof buf),
                "CUDA_ERROR_LAUNCH_FAILED (unspecified launch failure)"));
  CHECK(!strcmp(dc_cu_result_text(&api, 12345, buf, sizeof buf), "CUresult 12345"));
  CHECK(!strcmp(dc_cu_result_text(NULL, 2, buf, sizeof buf), "CUresult 2"));
  CHECK(dc_cu_check(&api, 0, "cuInit") == NULL);
  dc_status *st = dc_cu_check(&api, DC_CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
  CHECK(st && dc_status_code_of(st) == DC_ERR_NOMEM);
  CHECK_ERR(st, "cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  dc_cu_api loaded;
  st = dc_cu_api_load("libdiffc-no-such-driver.so.1", &loaded);
  CHECK(st && dc_status_code_of(st) == DC_ERR_UNSUPPORTED);
  CHECK_ERR(st, "no NVIDIA driver was found (libdiffc-no-such-driver.so.1: ");
  CHECK_ERR(dc_cu_api_load("libm.so.6", &loaded),
            "libm.so.6 has no cuGetProcAddress_v2: the NVIDIA driver is older than CUDA 12.0; update the driver");
  CHECK(loaded.Init == NULL && loaded.lib == NULL);
  printf("driver layer: result names through cuGetErrorName/String, a missing library and one without "
         "cuGetProcAddress_v2 named\n");
}

/* Our constants against the toolkit's, where it is installed. */
#if defined(__has_include)
#if __has_include("/usr/local/cuda/include/cuda.h")
#include "/usr/local/cuda/include/cuda.h"
#define HAVE_CUDA_H 1
_Static_assert(sizeof(CUdeviceptr) == sizeof(dc_cu_deviceptr), "CUdeviceptr");
_Static_assert(sizeof(CUresult) == sizeof(dc_cu_result) && sizeof(CUdevice) == sizeof(dc_cu_device), "sizes");
#define SAME(a, b) ((int)(a) == (int)(b)) /* enums of different types */
_Static_assert(SAME(CUDA_SUCCESS, DC_CUDA_SUCCESS) && SAME(CUDA_ERROR_INVALID_VALUE, DC_CUDA_ERROR_INVALID_VALUE) &&
                   SAME(CUDA_ERROR_OUT_OF_MEMORY, DC_CUDA_ERROR_OUT_OF_MEMORY) &&
                   SAME(CUDA_ERROR_NOT_INITIALIZED, DC_CUDA_ERROR_NOT_INITIALIZED) &&
                   SAME(CUDA_ERROR_NO_DEVICE, DC_CUDA_ERROR_NO_DEVICE) &&
                   SAME(CUDA_ERROR_INVALID_DEVICE, DC_CUDA_ERROR_INVALID_DEVICE) &&
                   SAME(CUDA_ERROR_INVALID_CONTEXT, DC_CUDA_ERROR_INVALID_CONTEXT) &&
                   SAME(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, DC_CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) &&
                   SAME(CUDA_ERROR_NO_BINARY_FOR_GPU, DC_CUDA_ERROR_NO_BINARY_FOR_GPU) &&
                   SAME(CUDA_ERROR_INVALID_PTX, DC_CUDA_ERROR_INVALID_PTX) &&
                   SAME(CUDA_ERROR_NOT_FOUND, DC_CUDA_ERROR_NOT_FOUND) &&
                   SAME(CUDA_ERROR_LAUNCH_FAILED, DC_CUDA_ERROR_LAUNCH_FAILED) &&
                   SAME(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, DC_CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) &&
                   SAME(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, DC_CUDA_ERROR_STREAM_CAPTURE_INVALIDATED) &&
                   SAME(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, DC_CUDA_ERROR_STREAM_CAPTURE_UNJOINED) &&
                   SAME(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, DC_CUDA_ERROR_STREAM_CAPTURE_UNMATCHED) &&
                   SAME(CUDA_ERROR_ILLEGAL_STATE, DC_CUDA_ERROR_ILLEGAL_STATE) &&
                   SAME(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, DC_CUDA_ERROR_STREAM_CAPTURE_ISOLATION) &&
                   SAME(CUDA_ERROR_CAPTURED_EVENT, DC_CUDA_ERROR_CAPTURED_EVENT),
               "CUresult values");
_Static_assert(SAME(CU_STREAM_CAPTURE_MODE_GLOBAL, DC_CU_STREAM_CAPTURE_MODE_GLOBAL) &&
                   SAME(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, DC_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) &&
                   SAME(CU_STREAM_CAPTURE_MODE_RELAXED, DC_CU_STREAM_CAPTURE_MODE_RELAXED) &&
                   sizeof(CUgraph) == sizeof(dc_cu_graph) && sizeof(CUgraphExec) == sizeof(dc_cu_graph_exec),
               "stream capture");
_Static_assert(SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK) &&
                   SAME(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, DC_CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) &&
                   SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) &&
                   SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, DC_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) &&
                   SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, DC_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
               "CUdevice_attribute values");
_Static_assert(SAME(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, DC_CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) &&
                   SAME(CU_STREAM_NON_BLOCKING, DC_CU_STREAM_NON_BLOCKING) && SAME(CU_EVENT_DEFAULT, DC_CU_EVENT_DEFAULT) &&
                   SAME(CU_EVENT_DISABLE_TIMING, DC_CU_EVENT_DISABLE_TIMING) &&
                   SAME(CU_MEMHOSTALLOC_PORTABLE, DC_CU_MEMHOSTALLOC_PORTABLE),
               "flags");
_Static_assert(SAME(CU_JIT_INFO_LOG_BUFFER, DC_CU_JIT_INFO_LOG_BUFFER) &&
                   SAME(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, DC_CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES) &&
                   SAME(CU_JIT_ERROR_LOG_BUFFER, DC_CU_JIT_ERROR_LOG_BUFFER) &&
                   SAME(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, DC_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) &&
                   SAME(CU_GET_PROC_ADDRESS_DEFAULT, DC_CU_GET_PROC_ADDRESS_DEFAULT) &&
                   SAME(CU_GET_PROC_ADDRESS_SUCCESS, DC_CU_GET_PROC_ADDRESS_SUCCESS) &&
                   SAME(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, DC_CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) &&
                   SAME(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, DC_CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
               "JIT options and cuGetProcAddress");
#endif
#endif

static void test_constants(void) {
#ifdef HAVE_CUDA_H
  printf("driver constants: equal to /usr/local/cuda/include/cuda.h's (CUDA_VERSION %d), checked at compile time\n",
         CUDA_VERSION);
#else
  printf("driver constants: not checked here (no /usr/local/cuda/include/cuda.h)\n");
#endif
}

/* ==== on demand: a failed read, no reader ========================================== */
/* The second chunk's read fails: the run's error names the step and the
 * reader's message, the streams are synchronised, and the next run (reads
 * working again) is in order and bit-exact.  A backend without a reader
 * refuses an on-demand plan before any driver call. */
static void test_on_demand_errors(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  device_blocks d = blocks_of(fx);
  float **inputs = input_arrays(m);
  set_random_inputs(fx, b, inputs);
  reads = 0, fail_read_at = 2;
  char want[300];
  snprintf(want, sizeof want,
           "test.dplan: step %d (upload in up.scale): weight file w.safetensors: tensor \"scale\": reading 12 bytes at "
           "file offset 12 got only 0 (test)",
           (int)fx->upload);
  int from = fk.ncalls;
  CHECK_ERR(dc_cuda_backend_run(b, NULL, NULL), want);
  int synced = 0, before = 0;
  for (int i = from; i < fk.ncalls; i++) synced += fk.calls[i].kind == C_STREAMSYNC;
  for (int32_t s = 0; s < fx->upload; s++) before += fx->plan.cuda.kernel_of_node[s] >= 0;
  CHECK(synced == 2 && fk.launches == before); /* the steps before the upload were launched; none after it */
  fail_read_at = 0;
  from = fk.ncalls;
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  CHECK(check_run_order(fx, from, &d) && outputs_match(fx, b, inputs));
  free_arrays(m, inputs);
  dc_cuda_backend_destroy(b);
  check_no_leaks("on-demand read failure");
  fake_reset(9, 0);
  dc_cuda_backend_options no_reader = {0};
  CHECK_ERR(create(fx, &no_reader, &b),
            "test.dplan: the plan reads offloaded weights on demand (host_memory on-demand), and the backend was "
            "given no weight reader");
  CHECK(!b && fk.ncalls == 0);
  check_no_leaks("on-demand without a reader");
  printf("on-demand: a failed chunk read is the run's error (step and file named), the next run is bit-exact; no "
         "reader, no driver call\n");
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_driver_messages();
  test_constants();
  fixture fx;
  fixture_init(&fx, 0, 0);
  test_big_shared_memory(&fx);
  test_launch_failure(&fx);
  test_out_of_memory(&fx);
  test_device_index(&fx);
  test_alloc_failures(&fx);
  fixture_deinit(&fx);
  fixture_init(&fx, 1, 1);
  test_on_demand_errors(&fx);
  fixture_deinit(&fx);
  return tu_finish();
}
