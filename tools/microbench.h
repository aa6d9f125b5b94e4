/* microbench.h — one microbenchmark case of tools/cuda_microbench: an op at
 * one shape built as a one-op IR module, compiled as diffc compiles it, and
 * timed on the CUDA backend.  The tool is the command line over this; the
 * test (tests/test_cuda_microbench.c) runs the same cases on the CPU
 * emulator through the fake driver.
 *
 *   mb_compile   the module: its weights (random, in the compute dtype) to
 *                a safetensors file in the work folder, the inputs f32 (the
 *                plan's interface), with bf16 compute the op between casts
 *                to and from bf16 activations when this build's IR and
 *                generators take them (else f32 activations, said on
 *                stdout), the pass pipeline (--layout nhwc for an NHWC
 *                conv), the weights' conversions beside the plan, every
 *                kernel through NVRTC and the kernel cache, the plan file;
 *   mb_time      the plan loaded by the runtime on the cuda backend, random
 *                inputs, warm-up runs, then each timed run's time of the
 *                op's own step (the runtime's per-step profile: CUDA events
 *                around the launch); DIFFC_CUBLASLT=0 for the generated
 *                kernel's row, unset for the cuBLASLt row;
 *   mb_row       the BENCH line both tools/cuda_microbench and
 *                bench/gpu_torch.py print. */
#ifndef DC_MICROBENCH_H
#define DC_MICROBENCH_H

#include "codegen/cuda/cuda_codegen.h"
#include "codegen/cuda/nvrtc.h"

typedef enum { MB_CONV, MB_LINEAR, MB_ATTENTION } mb_op;
extern const char *const mb_op_names[3]; /* "conv", "linear", "attention" */
extern const int mb_op_ndims[3];          /* 5, 3, 4 */

typedef struct {
  mb_op op;
  int64_t d[5]; /* conv N,C,H,W,O (3x3, stride 1, padding 1, bias); linear M,K,N; attention B,H,S,D */
  int nhwc;     /* conv: compiled with --layout nhwc */
  int cublaslt; /* linear: the row run with cuBLASLt allowed */
} mb_case;

/* A compiled case. */
typedef struct {
  char name[32];   /* "conv3x3_nhwc", "linear", "attention" */
  char shape[64];  /* "2x640x64x64x640" */
  char *plan_path; /* dc_malloc'd */
  int32_t step;    /* the op's node in the plan */
  uint64_t flops;  /* of that node (ir/flops.c) */
  dc_dtype act;    /* the op's activation dtype */
} mb_compiled;

/* Names c into out (name and shape only). */
void mb_names(const mb_case *c, mb_compiled *out);
/* Compiles c as case number `index` of the work folder (case<index>.*);
 * archs as dc_nvrtc_parse_archs gives them. */
dc_status *mb_compile(const mb_case *c, dc_cuda_compute compute, const char *work, int index, const dc_nvrtc *nv,
                      const dc_cuda_arch *archs, int narchs, mb_compiled *out);
/* The op's step time of each of `repeat` runs after `warmup` runs, in
 * seconds, into t[repeat] (sorted, fastest first). */
/* note: "" or, for a cuBLASLt row whose step ran on the generated kernel,
 * why (the runtime's cuBLASLt note). */
dc_status *mb_time(const mb_case *c, const mb_compiled *k, int device, int warmup, int repeat, double *t, char *note,
                   size_t note_cap);
/* The BENCH line, without its newline, into buf: t (sorted) NULL for a row
 * without times; status is free text and comes last. */
void mb_row(const mb_case *c, const mb_compiled *k, dc_cuda_compute compute, const double *t, int repeat, double peak,
            const char *status, char *buf, size_t cap);

#endif
