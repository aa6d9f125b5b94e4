/* test_cuda_host_api.c — what a user of the CUDA backend sees besides the
 * outputs, through the fake driver and the plan of cuda_host_fixture.h:
 * profiling (each step's time from the events around it), --check-finite's
 * per-step callback, and drt_load / drt_run / drt_info on a CUDA plan file
 * with the fake in place of libcuda, in memory and on demand (the runtime
 * reading the real weight file for the backend); outputs equal the reference
 * backend's. */
#include <stdlib.h>
#include <string.h>

#include "cuda_host_fixture.h"

/* ==== profiling and --check-finite ================================================ */
/* The fake's clock: 1 ms per driver call between two event records.  Each
 * step's time runs from the event before it to its own; the steps together
 * span the first launch to the last. */
static void test_profiling(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, NULL, &b));
  if (!b) return;
  double *steps = calloc((size_t)m->nnodes, sizeof *steps), kernel_s = 0;
  CHECK_OK(dc_cuda_backend_run(b, steps, &kernel_s));
  CHECK_OK(dc_cuda_backend_run(b, steps, &kernel_s));
  double sum = 0;
  int ok = 1;
  for (int32_t s = 0; s < m->nnodes; s++) {
    int kernel = fx->plan.cuda.kernel_of_node[s] >= 0;
    ok &= kernel ? steps[s] >= 2 * 0.002 - 1e-9 : steps[s] == 0;
    sum += steps[s];
  }
  /* per run: begin .. last step event spans (record of end) - 1 calls */
  CHECK(ok && kernel_s > 0 && fabs(sum / 2 - (kernel_s - 0.001)) < 1e-9);
  printf("profiling over 2 runs: %.3f s in 6 launches (fake clock), leaves 0, kernels %.3f s per run\n", sum,
         kernel_s);
  free(steps);
  dc_cuda_backend_destroy(b);
  check_no_leaks("profiling");
}

typedef struct {
  float **ref;
  const dc_module *m;
  int32_t seen[32], fail_at;
  int nseen, same;
} finite_check;

static dc_status *on_step(void *ctx, int32_t step, const float *values) {
  finite_check *fc = ctx;
  if (fc->nseen < 32) fc->seen[fc->nseen++] = step;
  fc->same &= memcmp(values, fc->ref[step], dc_type_bytes(&fc->m->nodes[step].type)) == 0;
  return step == fc->fail_at ? dc_error(DC_ERR_MISMATCH, "produced NaN at element 3 (test)") : NULL;
}

static void test_check_step(fixture *fx) {
  const dc_module *m = fx->plan.module;
  fake_reset(9, 0);
  finite_check fc = {NULL, m, {0}, -1, 0, 1};
  dc_cuda_backend_options o = {0};
  o.check_step = on_step;
  o.check_ctx = &fc;
  dc_cuda_backend *b = NULL;
  CHECK_OK(create(fx, &o, &b));
  if (!b) return;
  float **inputs = input_arrays(m);
  set_random_inputs(fx, b, inputs);
  fc.ref = reference_values(m, inputs);
  CHECK_OK(dc_cuda_backend_run(b, NULL, NULL));
  int32_t want[] = {5, fx->conv, fx->add, fx->silu1, fx->mul, fx->silu2};
  CHECK(fc.nseen == 6 && !memcmp(fc.seen, want, sizeof want) && fc.same);
  CHECK(count_calls(C_DTOH) == 6 + m->noutputs);
  fc.nseen = 0, fc.fail_at = fx->mul;
  char msg[200];
  snprintf(msg, sizeof msg, "test.dplan: step %d (mul in up.scale): produced NaN at element 3 (test)", (int)fx->mul);
  CHECK_ERR(dc_cuda_backend_run(b, NULL, NULL), msg);
  CHECK(fc.nseen == 5);
  printf("check-finite: each of the 6 steps' outputs copied back and checked in order, values exact; a failing "
         "check stops the run: \"%s\"\n",
         msg);
  free_values(m, fc.ref);
  free_arrays(m, inputs);
  dc_cuda_backend_destroy(b);
  check_no_leaks("check-finite");
}

/* ==== diffrun's API on a CUDA plan file, the fake in place of libcuda ============= */
static void run_outputs(const char *path, const char *backend, int check_finite, float **out, drt_stats *stats) {
  drt_plan *p = NULL;
  drt_options o = {.backend = backend, .threads = 1, .check_finite = check_finite};
  CHECK_OK(drt_load(path, &o, &p));
  if (!p) return;
  drt_set_random_inputs(p, 7);
  CHECK_OK(drt_run(p, stats));
  for (int i = 0; i < drt_output_count(p); i++) {
    size_t n = 0;
    const float *y = drt_output(p, drt_output_info(p, i)->name, &n);
    out[i] = malloc(n * sizeof(float));
    memcpy(out[i], y, n * sizeof(float));
  }
  drt_destroy(p);
}

static void test_diffrun_api(fixture *fx) {
  char *path = tu_path("cuda.dplan"), *cpu_path = tu_path("cpu.dplan");
  CHECK_OK(dc_plan_write(path, &fx->plan));
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  fake_reset(9, 0);
  fake_bind(fx->plan.module, &fx->plan.cuda);
  /* --info needs no device */
  drt_plan *p = NULL;
  drt_options inspect = {.inspect = 1};
  CHECK_OK(drt_load(path, &inspect, &p));
  if (p) {
    const drt_plan_info *in = drt_info(p);
    CHECK(!strcmp(in->target, "cuda") && !strcmp(in->compute, "f32") && in->kernels == 5 &&
          !strcmp(in->archs, "sm_80, sm_90, compute_90") && in->flops == dc_module_flops(fx->plan.module));
    CHECK(fk.ncalls == 0 && fk.ctx_refs == 0);
    CHECK_ERR(drt_run(p, NULL), "loaded for inspection only");
    printf("inspect: target %s, compute %s, %d kernels for %s, %llu flops; no driver call\n", in->target, in->compute,
           in->kernels, in->archs, (unsigned long long)in->flops);
    drt_destroy(p);
  }
  float *cuda_out[2] = {NULL, NULL}, *ref_out[2] = {NULL, NULL}, *chk_out[2] = {NULL, NULL};
  drt_stats cs = {0}, rs = {0}, ks = {0};
  run_outputs(path, NULL, 0, cuda_out, &cs);
  CHECK(!strcmp(cs.backend, "cuda") && cs.device_peak_bytes == cs.device_predicted_bytes && cs.kernel_seconds > 0);
  CHECK(cs.device_total_bytes == fx->plan.module->arena_bytes + 1056 && cs.weight_bytes == 576 + 32 + 32);
  check_no_leaks("drt cuda");
  run_outputs(path, NULL, 1, chk_out, &ks);
  check_no_leaks("drt cuda check-finite");
  run_outputs(path, "reference", 0, ref_out, &rs);
  CHECK(!strcmp(rs.backend, "reference") && rs.device_peak_bytes == cs.device_peak_bytes);
  const dc_module *m = fx->plan.module;
  for (int i = 0; i < 2; i++) {
    size_t bytes = dc_type_bytes(&m->nodes[m->outputs[i].node].type);
    CHECK(cuda_out[i] && ref_out[i] && chk_out[i] && !memcmp(cuda_out[i], ref_out[i], bytes) &&
          !memcmp(chk_out[i], ref_out[i], bytes));
    free(cuda_out[i]), free(ref_out[i]), free(chk_out[i]);
  }
  printf("drt on a CUDA plan: backend %s (device peak %llu B = predicted, %llu B held) gives the reference "
         "backend's outputs bit for bit, with and without --check-finite\n",
         cs.backend, (unsigned long long)cs.device_peak_bytes, (unsigned long long)cs.device_total_bytes);
  /* llvm on a CUDA plan: the reference kernels; cuda on a CPU plan: refused */
  drt_options llvm = {.backend = "llvm"};
  CHECK_OK(drt_load(path, &llvm, &p));
  if (p) CHECK(!strcmp(drt_info(p)->backend, "reference"));
  drt_destroy(p);
  dc_plan cpu = fx->plan;
  cpu.target = DC_TARGET_CPU;
  memset(&cpu.cuda, 0, sizeof cpu.cuda);
  CHECK_OK(dc_plan_write(cpu_path, &cpu));
  drt_options want_cuda = {.backend = "cuda"};
  char msg[600];
  snprintf(msg, sizeof msg,
           "%s: --backend cuda needs a plan compiled for CUDA, and this one targets the CPU; recompile with diffc "
           "--target cuda (or run this one with --backend llvm or reference)",
           cpu_path);
  CHECK_ERR(drt_load(cpu_path, &want_cuda, &p), msg);
  /* profiling on CUDA: device times per step */
  CHECK_OK(drt_load(path, NULL, &p));
  if (p) {
    CHECK_OK(drt_set_profiling(p, 1));
    drt_set_random_inputs(p, 1);
    CHECK_OK(drt_run(p, NULL));
    drt_step_time t[16];
    int n = drt_profile(p, t, 16);
    CHECK(n == 6 && t[0].seconds > 0 && t[5].seconds > 0);
    drt_destroy(p);
  }
  check_no_leaks("drt");
  dc_cu_api_set_override(NULL);
  free(path);
  free(cpu_path);
}

/* The plan's OPTS record the SM count its GEMM tiles were chosen for
 * (diffc --cuda-sm-count); drt_info's warning says when the device has
 * another, and is empty when it matches or the plan does not say. */
static void test_sm_count_warning(fixture *fx) {
  char *path = tu_path("cuda_sm.dplan");
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  static const struct {
    const char *opts;
    int device_sms;
    const char *want; /* NULL: no warning */
  } cases[] = {
      {"{\"target\":\"cuda\",\"cuda_sm_count\":132}", 108, "tiles were chosen for 132 SMs; device 0 (Fake GPU 8.0) has 108"},
      {"{\"target\":\"cuda\",\"cuda_sm_count\":108}", 108, NULL},
      {"{\"target\":\"cuda\"}", 108, NULL},
  };
  char *saved = fx->plan.options_json;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    fx->plan.options_json = (char *)cases[i].opts;
    CHECK_OK(dc_plan_write(path, &fx->plan));
    fake_reset(8, 0);
    fk.sm_count = cases[i].device_sms;
    fake_bind(fx->plan.module, &fx->plan.cuda);
    drt_plan *p = NULL;
    CHECK_OK(drt_load(path, NULL, &p));
    if (!p) continue;
    const char *w = drt_info(p)->warning;
    CHECK(cases[i].want ? strstr(w, cases[i].want) != NULL : *w == 0);
    printf("plan OPTS %s on a %d-SM device: %s\n", cases[i].opts, cases[i].device_sms, *w ? w : "no warning");
    drt_destroy(p);
  }
  fx->plan.options_json = saved;
  check_no_leaks("sm count");
  dc_cu_api_set_override(NULL);
  free(path);
}

/* drt on an on-demand CUDA plan: the runtime reads the real weight file
 * (pread) for the backend; outputs equal the reference backend's. */
static void test_diffrun_on_demand(fixture *fx) {
  char *path = tu_path("demand.dplan");
  CHECK_OK(dc_plan_write(path, &fx->plan));
  dc_cu_api api = fake_api();
  dc_cu_api_set_override(&api);
  fake_reset(9, 0);
  fake_bind(fx->plan.module, &fx->plan.cuda);
  float *cuda_out[2] = {NULL, NULL}, *ref_out[2] = {NULL, NULL};
  drt_stats cs = {0}, rs = {0};
  run_outputs(path, NULL, 0, cuda_out, &cs);
  check_no_leaks("drt on-demand");
  run_outputs(path, "reference", 0, ref_out, &rs);
  const dc_module *m = fx->plan.module;
  uint64_t io = 0;
  for (int i = 0; i < m->ninputs; i++) io += dc_type_bytes(&m->nodes[m->inputs[i].node].type);
  for (int i = 0; i < m->noutputs; i++) io += dc_type_bytes(&m->nodes[m->outputs[i].node].type);
  /* default chunks: 8 MiB, cut to the largest offloaded weight (32 B); the
   * reference backend's bounce buffer: one of 32 B */
  CHECK(!strcmp(cs.host_memory, "on-demand") && cs.pinned_bytes == io + 2 * 32 && cs.host_weight_bytes == 32);
  CHECK(!strcmp(rs.host_memory, "on-demand") && rs.pinned_bytes == 32);
  for (int i = 0; i < 2; i++) {
    size_t bytes = dc_type_bytes(&m->nodes[m->outputs[i].node].type);
    CHECK(cuda_out[i] && ref_out[i] && !memcmp(cuda_out[i], ref_out[i], bytes));
    free(cuda_out[i]), free(ref_out[i]);
  }
  dc_cu_api_set_override(NULL);
  printf("drt on an on-demand CUDA plan: weights read from %s at each upload, %llu B pinned (inputs, outputs, 2 "
         "chunks); outputs equal the reference backend's\n",
         fx->wpath, (unsigned long long)cs.pinned_bytes);
  free(path);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  fixture fx;
  fixture_init(&fx, 0, 0);
  test_profiling(&fx);
  test_check_step(&fx);
  test_diffrun_api(&fx);
  test_sm_count_warning(&fx);
  fixture_deinit(&fx);
  fixture_init(&fx, 1, 1);
  test_diffrun_on_demand(&fx);
  fixture_deinit(&fx);
  return tu_finish();
}
