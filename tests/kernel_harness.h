/* kernel_harness.h — checks one generated CPU kernel against the reference
 * kernel: random inputs for the node's operands, the reference result, the
 * LLVM kernel compiled for the host (or the --cpu target named by
 * $DIFFC_TEST_CPU, e.g. x86-64-v3: CTest runs the LLVM kernel tests both
 * ways) and linked the way diffrun links it, run on 1..N threads, and the
 * difference. */
#ifndef DC_KERNEL_HARNESS_H
#define DC_KERNEL_HARNESS_H

#include "codegen/llvm/llvm_codegen.h"
#include "plan/plan_format.h"
#include "ir/ir.h"

typedef struct {
  double max_abs, rel_l2;
  double max_rel; /* max |got - want| / |want| over elements with |want| >= 1e-30 */
  int bit_exact;
} kh_result;

/* The target kernels are compiled for: $DIFFC_TEST_CPU (a diffc --cpu
 * name) or the host.  A target this machine cannot run ends the test with
 * exit code 77 (CTest's skip). */
dc_status *kh_target(dc_cpu_target *t);
/* For a module holding the one kernel ck just emitted: names it by its
 * key (dc_llvm_kernel_key) and fills obj from the kernel cache (the default
 * directory, as diffc's), else by LLVM, storing the result: the kernel
 * tests and their x86-64-v3 repeats stop recompiling the same kernels. */
dc_status *kh_finish_cached(dc_llvm *g, dc_cpu_kernel *ck, dc_buf *obj);
/* Node id compiled for target t (whose strings k takes over, success or
 * not) with conv2d's Winograd mode (dc_llvm_set_winograd), through the
 * kernel cache: k holds its one object and one entry (on failure, only the
 * target, for dc_plan_kernels_deinit). */
dc_status *kh_compile_kernel(const dc_module *m, int32_t id, dc_cpu_target *t, int winograd, dc_plan_kernels *k);

/* Node id of m (whose inputs are any earlier nodes: their data is random,
 * normal(0,1) scaled by `scale`) with the LLVM kernel on nthreads threads.
 * Returns an error if the op has no LLVM kernel. */
dc_status *kh_compare(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale,
                      kh_result *out);

/* Like kh_compare, with the inputs' data given: inputs[i] holds input i's
 * bytes in its dtype (inputs of any dtype, e.g. for cast).  The output, of
 * any dtype, is compared bytewise (bit_exact); for an f32 output max_abs and
 * rel_l2 are computed too, where a NaN equals any NaN and is an infinite
 * error against a number. */
dc_status *kh_compare_with(const dc_module *m, int32_t id, int nthreads, const void *const *inputs,
                           kh_result *out);
/* kh_compare with the output written over input 0 (same dtype and size),
 * as the memory planner arranges for in-place ops. */
dc_status *kh_compare_inplace(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale,
                              kh_result *out);
/* kh_compare with the output written over input `input` (output-shaped):
 * the buffer the kernel writes is also the one it reads that input from,
 * pre-filled with its data, as the planner arranges for a residual.  *same
 * is 1 when that gives the bits the same kernel writes to a separate buffer. */
dc_status *kh_compare_aliased(const dc_module *m, int32_t id, int nthreads, uint64_t seed, double scale, int input,
                              kh_result *out, int *same);
/* The best time in seconds of iters runs of node id's kernel on nthreads
 * threads, random inputs (compiled and linked once, not timed). */
dc_status *kh_time(const dc_module *m, int32_t id, int nthreads, int iters, double *seconds);

/* got against want, both of type t, by kh_compare_with's rules (kernel_module.c: no LLVM). */
void kh_compare_out(const dc_type *t, const void *got, const void *want, kh_result *out);

/* How the kernels compare/time compile from now on: winograd as
 * dc_llvm_set_winograd (1 the default: where it pays; 0 never; 2 wherever
 * correct), cpu a diffc --cpu name instead of kh_target's ("generic": 4
 * lanes; NULL: kh_target).  NULL resets both. */
typedef struct {
  int winograd;
  const char *cpu;
} kh_options;
void kh_set_options(const kh_options *o);
/* The symbol of the kernel compiled last ("..._winograd" for the Winograd conv). */
const char *kh_last_symbol(void);

/* Module building, in kernel_module.c (no LLVM: the CUDA tests use it too).
 * Adds an f32 input node of the given dims to m; returns its id. */
int32_t kh_input(dc_module *m, int rank, const int64_t *dims);
/* Adds node n (type inferred) to m; returns its id or -1 on a type error (printed). */
int32_t kh_node(dc_module *m, dc_node n);

#endif
