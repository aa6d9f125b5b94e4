/* cuda_harness.h — checks one generated CUDA kernel against the reference
 * kernel without a GPU: the kernel's source is compiled as host C++ against
 * the CPU emulator in tests/cuda_emu/ (every CUDA thread a fiber, barriers
 * and warp collectives honoured, WMMA done in full), run over its grid, and
 * compared with the reference kernel on the same random inputs.  Every
 * buffer has guard bytes around it (and is 64- but not 128-byte aligned, as
 * the arena guarantees no more): a write outside the output, or any write to
 * an input, is an error.
 * Functions return DC_ERR_UNSUPPORTED when no host C++ compiler is found
 * (tests then exit 77). */
#ifndef DC_CUDA_HARNESS_H
#define DC_CUDA_HARNESS_H

#include "codegen/cuda/cuda_codegen.h"
#include "kernel_harness.h"
#include "plan/plan_format.h"

/* Must be called once with the tests directory (argv[1]) before the others. */
void ch_init(const char *tests_dir);

/* Node id of m, inputs random normal(0,1)*scale (inputs of another dtype:
 * random finite values of it), CUDA kernel for options o run in the
 * emulator; out as kh_compare's. */
dc_status *ch_compare(const dc_module *m, int32_t id, const dc_cuda_options *o, uint64_t seed, double scale,
                      kh_result *out);
/* ch_compare with the output buffer being input `input`'s buffer (pre-filled
 * with its data), as the memory planner arranges for in-place ops and
 * residuals. */
dc_status *ch_compare_aliased(const dc_module *m, int32_t id, const dc_cuda_options *o, uint64_t seed, double scale,
                              int input, kh_result *out);
/* ch_compare with the inputs' data given: inputs[i] holds input i's bytes in
 * its dtype (special values, exact patterns). */
dc_status *ch_compare_with(const dc_module *m, int32_t id, const dc_cuda_options *o, const void *const *inputs,
                           kh_result *out);

/* ---- the lower level: one kernel source, built and launched --------------- */
typedef struct ch_kernel ch_kernel;
/* Compiles `source` (a generated translation unit) whose entry `name` takes
 * nparams pointer parameters of the given C types ("float", "const float",
 * "const unsigned short", ...).  A compile error returns a status with the
 * compiler's first lines. */
dc_status *ch_kernel_build(const char *source, const char *name, int nparams, const char *const *param_ctypes,
                           ch_kernel **out);
/* Runs the whole grid; params[i] is the i-th pointer argument.  A deadlock
 * or a misused primitive is an error naming the block and thread. */
dc_status *ch_kernel_launch(ch_kernel *k, const uint32_t grid[3], const uint32_t block[3], uint32_t smem,
                            void **params);
void ch_kernel_free(ch_kernel *k);

/* ---- NVRTC: generated sources compiled for real GPUs, when installed ------ */
/* Loads NVRTC for sm_80 and sm_90; 0 (printing why) when it is not installed. */
int ch_nvrtc_open(void);
/* Compiles k's source for both archs unless an equal source was compiled
 * before: an NVRTC error or any warning fails the calling test (CHECK).
 * Nothing when NVRTC is not open. */
void ch_nvrtc_check(const dc_cuda_kernel *k);
/* Distinct sources and compiles so far; closes NVRTC. */
void ch_nvrtc_close(int *sources, int *compiles);

/* ---- a whole plan's kernels (tests that run plans through the fake driver) ---- */
/* Every kernel of the CUDA plan built for the emulator, two at a time;
 * *out gets plan->cuda.nkernels kernels (free with ch_plan_free).  The first
 * failure is returned, naming the kernel. */
dc_status *ch_plan_build(const dc_plan *plan, ch_kernel ***out);
void ch_plan_free(const dc_plan *plan, ch_kernel **built);
/* Launches kernel ki of the plan as cuLaunchKernel would: params[i] points
 * at the i-th pointer argument (output, then the inputs of the kernel's
 * node). */
dc_status *ch_plan_launch(const dc_plan *plan, ch_kernel *const *built, int ki, const uint32_t grid[3],
                          const uint32_t block[3], uint32_t smem, void **params);
/* The fake driver's execute hook (fk.execute) for a whole plan on the
 * emulator: ch_emulate_plan names the plan and its built kernels (and clears
 * the last error); ch_emulate_launch launches kernel ki through
 * ch_plan_launch, returning CUDA_ERROR_LAUNCH_FAILED with the emulator's
 * message in ch_emulate_error() when it fails. */
void ch_emulate_plan(const dc_plan *plan, ch_kernel *const *built);
int ch_emulate_launch(int ki, const unsigned grid[3], const unsigned block[3], unsigned smem, void **params);
const char *ch_emulate_error(void);

#endif
