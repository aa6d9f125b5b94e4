/* llvm_off.c — what a -DDIFFC_LLVM=OFF build links in place of the CPU code
 * generator (codegen/llvm/, codegen/emit_kernels.c), the CPU target queries
 * (support/cpu_target.c) and the in-memory linker of CPU kernels
 * (runtime/cpu_kernels.c), which all need LLVM 14.
 *
 * Why such a build exists: a machine that has the CUDA toolkit but not LLVM
 * (the GPU machine tools/gpu_check.sh runs on) still compiles --target cuda
 * plans and runs them, and the reference backend.  CMake picks this file or
 * the LLVM side, never both, so the callers hold no #ifdef: each entry point
 * here has the LLVM side's signature and returns an error saying what this
 * build lacks and what to use instead. */
#include <string.h>

#include "codegen/emit_kernels.h"
#include "runtime/cpu_kernels.h"
#include "support/cpu_target.h"

static dc_status *no_cpu_codegen(void) {
  return dc_error(DC_ERR_UNSUPPORTED, "--target cpu (the default): this diffc was built without LLVM "
                                      "(-DDIFFC_LLVM=OFF): it has no CPU code generator; use --target cuda, or a "
                                      "build with LLVM");
}

dc_status *dc_cpu_codegen_check(void) { return no_cpu_codegen(); }

const char *dc_build_targets(void) {
  return "cuda (NVRTC, loaded when used); no cpu target: built without LLVM (-DDIFFC_LLVM=OFF)";
}

dc_status *dc_emit_cpu_kernels(const dc_module *m, const dc_cpu_target *t, const dc_cpu_emit_options *o,
                               dc_plan_kernels *out) {
  memset(out, 0, sizeof *out);
  return no_cpu_codegen();
}

/* ---- support/cpu_target.h: no CPU can be named without LLVM's tables ---- */

dc_status *dc_cpu_target_host(dc_cpu_target *out) {
  memset(out, 0, sizeof *out);
  return no_cpu_codegen();
}

dc_status *dc_cpu_target_generic(dc_cpu_target *out) {
  memset(out, 0, sizeof *out);
  return no_cpu_codegen();
}

dc_status *dc_cpu_target_named(const char *name, dc_cpu_target *out) {
  memset(out, 0, sizeof *out);
  return no_cpu_codegen();
}

void dc_cpu_target_deinit(dc_cpu_target *t) {
  dc_free(t->triple), dc_free(t->cpu), dc_free(t->features), dc_free(t->tune);
  memset(t, 0, sizeof *t);
}

int dc_cpu_target_runs_here(const dc_cpu_target *t, char **missing) {
  if (missing) *missing = dc_strdup("LLVM (this build was made with -DDIFFC_LLVM=OFF)");
  return 0;
}

/* ---- runtime/cpu_kernels.h: a CPU plan's kernels cannot be linked ------- */

dc_status *dc_cpu_code_load(const char *plan_path, const dc_plan_kernels *k, int32_t nnodes, dc_cpu_code **out,
                            dc_cpu_kernel_fn *fn_of_node) {
  *out = NULL;
  return dc_error(DC_ERR_UNSUPPORTED,
                  "%s: a CPU plan with compiled kernels, and this diffrun was built without LLVM (-DDIFFC_LLVM=OFF): "
                  "it cannot link them; run it with --backend reference, compile the model with diffc --target cuda, "
                  "or use a build with LLVM",
                  plan_path);
}

void dc_cpu_code_destroy(dc_cpu_code *c) { (void)c; /* dc_cpu_code_load never makes one here */ }
