/* test_cpu_target.c — which CPU a plan's kernels are for: the host target
 * runs here; a target with a feature this CPU lacks is refused with the
 * missing feature named; a generic plan compiles and runs and matches the
 * native one. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/compile.h"
#include "codegen/llvm/llvm_codegen.h"
#include "runtime/diffrun.h"
#include "testutil.h"

static void test_runs_here(void) {
  dc_cpu_target host;
  CHECK_OK(dc_cpu_target_host(&host));
  char *missing = NULL;
  CHECK(dc_cpu_target_runs_here(&host, &missing) && missing == NULL);
  printf("host target: %s, cpu %s, vector width %d\n", host.triple, host.cpu, dc_cpu_target_vector_width(&host));
  dc_cpu_target fake = {host.triple, host.cpu, "+sse2,+diffc-imaginary-feature"};
  CHECK(!dc_cpu_target_runs_here(&fake, &missing));
  CHECK(missing && strcmp(missing, "+diffc-imaginary-feature") == 0);
  printf("a target needing +diffc-imaginary-feature is refused, missing: %s\n", missing ? missing : "?");
  dc_free(missing);
  dc_cpu_target other = {"aarch64-unknown-linux-gnu", "generic", ""};
  CHECK(!dc_cpu_target_runs_here(&other, &missing));
  CHECK(missing && strstr(missing, "architecture aarch64"));
  dc_free(missing);
  dc_cpu_target generic;
  CHECK_OK(dc_cpu_target_generic(&generic));
  CHECK(dc_cpu_target_runs_here(&generic, &missing) && dc_cpu_target_vector_width(&generic) == 4);
  dc_cpu_target_deinit(&generic);
  dc_cpu_target_deinit(&host);
}

/* Compiles the tiny UNet for `cpu`, runs it on a ramp input, returns sample. */
static float *run_tiny(const char *cpu, size_t *numel) {
  char *model = dc_path_join(tu_source_dir, "fixtures/unet_tiny/model"), *plan = tu_path("cpu.dplan");
  dc_compile_options co = {.model = model, .cpu = cpu};
  drt_plan *p = NULL;
  float *copy = NULL;
  dc_status *st = dc_compile(&co, plan, NULL);
  if (!st) st = drt_load(plan, NULL, &p);
  for (int i = 0; !st && i < drt_input_count(p); i++) {
    const drt_tensor_info *in = drt_input_info(p, i);
    float *d = malloc(in->numel * sizeof *d);
    for (size_t k = 0; k < in->numel; k++) d[k] = (float)((double)(k % 13) / 6.0 - 1.0);
    st = drt_set_input(p, in->name, d, in->numel);
    free(d);
  }
  drt_stats s;
  if (!st) st = drt_run(p, &s);
  CHECK_OK(st);
  if (p && !st) {
    const float *y = drt_output(p, "sample", numel);
    copy = malloc(*numel * sizeof *copy);
    memcpy(copy, y, *numel * sizeof *copy);
  }
  drt_destroy(p);
  free(model);
  free(plan);
  return copy;
}

static void test_generic_plan(void) {
  size_t n1 = 0, n2 = 0;
  float *native = run_tiny("native", &n1), *generic = run_tiny("generic", &n2);
  CHECK(native && generic && n1 == n2);
  double d2 = 0, r2 = 0;
  for (size_t i = 0; native && generic && i < n1; i++) {
    d2 += ((double)native[i] - generic[i]) * ((double)native[i] - generic[i]);
    r2 += (double)native[i] * native[i];
  }
  double rel = sqrt(d2 / (r2 > 0 ? r2 : 1));
  CHECK(rel < 1e-5);
  printf("--cpu generic plan runs; its output matches the native plan's (rel L2 %.2g)\n", rel);
  dc_compile_options bad = {.model = "unused", .cpu = "pentium"};
  CHECK_ERR(dc_compile(&bad, tu_path("x.dplan"), NULL), "--cpu pentium: expected native or generic");
  free(native);
  free(generic);
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  test_runs_here();
  test_generic_plan();
  return tu_finish();
}
