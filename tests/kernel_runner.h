/* kernel_runner.h — one conv2d or linear LLVM kernel compiled for a W-lane
 * target with a chosen Winograd mode, loaded and run on a thread pool with
 * per-thread CPU times: what test_llvm_gemm.c (widths, registers, the
 * gelu grid) and bench/bench_kernels.c (GEMM and Winograd timings) share.
 * The case table's rows go through kernel_harness.h instead. */
#ifndef DC_KERNEL_RUNNER_H
#define DC_KERNEL_RUNNER_H

#include "codegen/llvm/llvm_codegen.h"
#include "kernel_harness.h"
#include "runtime/cpu_kernels.h"
#include "support/threadpool.h"

enum { RES_NONE, RES_FULL, RES_CHANNEL }; /* residual: none, output-shaped, [N,O,1,1] / [N] */

typedef struct {
  int64_t n, c, h, w, o, kh, kw, stride, pt, pb, pl, pr;
} conv_shape;

/* add_conv and add_linear are in kernel_module.c (no LLVM: test_cuda_gemm uses them).
 * x [N,C,H,W] * w [O,C,kh,kw] (+ bias) (+ residual): the node's id, or -1. */
int32_t add_conv(dc_module *m, const conv_shape *s, int bias, int act, int res);
/* x [lead..., k] · w[n, k]ᵀ; res: RES_FULL (output-shaped) or RES_CHANNEL ([nout]). */
int32_t add_linear(dc_module *m, int rank, const int64_t *xdims, int64_t n, int bias, int act, int res);

typedef struct {
  dc_plan_kernels k;
  dc_cpu_code *code;
  dc_cpu_kernel_fn *fns;
  dc_pool *pool;
  void *bufs[8];
  int nbufs;
  uint8_t *scratch;
  dc_cpu_kernel_fn fn;
  double cpu[64]; /* per thread: CPU seconds in the last run_all */
} runner;

/* A target with W-lane vectors: 16 the host (AVX-512), 8 AVX2 (diffc --cpu
 * x86-64-v3), 4 SSE2 (diffc --cpu generic). */
dc_status *target_of_width(int width, dc_cpu_target *t);
/* Compiles node id for a W-lane target (Winograd where it pays) and loads
 * it on a pool of `threads`; the caller sets bufs[0..ninputs]. */
dc_status *runner_init(runner *r, const dc_module *m, int32_t id, int threads, int width);
/* winograd as dc_llvm_set_winograd: 0 direct always, 1 where it pays, 2 wherever correct. */
dc_status *runner_init_algo(runner *r, const dc_module *m, int32_t id, int threads, int width, int winograd);
/* The kernel split into one part per pool thread; r->cpu[t] is thread t's CPU time in it. */
void run_all(runner *r);
void runner_deinit(runner *r);

#endif
