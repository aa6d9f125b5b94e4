/* cuda_codegen.h — GPU code generation: every kernel the CPU backend has,
 * written as CUDA C and compiled ahead of time with NVRTC (codegen/cuda/
 * nvrtc.c) into the plan's KERN section (plan/plan_format.h).
 *
 * One kernel per distinct (op, attributes, operand types, options): shapes
 * and attributes are compile-time constants in the source.  Every kernel is
 * a single launch with the C signature
 *     extern "C" __global__ void NAME(TO *out, const T0 *in0, const T1 *in1, ...)
 * out is the node's output, in0.. the node's inputs in order, each in its
 * dtype as in the IR (dc_cuda_ctype): activations are f32, or bf16/f16 in a
 * module with that activation dtype (ir.h, pass activation-dtype); a weight
 * operand may be f32, bf16, f16 (any reader), f8e4m3 or f8e5m2 (conv2d,
 * linear, embedding).  Kernels load every value as f32 (dc_cuda_loader),
 * compute in f32 and round once as they store (dc_cuda_storer); the byte
 * moves (reshape, permute, upsample_nearest, concat, slice) copy their
 * dtype's bits.  No other
 * parameters and no workspace: the host packs exactly 1 + ninputs device
 * pointers (runtime/cuda_*.c).
 *
 * Aliasing is the CPU contract (runtime/kernels.h): out may EQUAL in[k] for
 * k = dc_node_inplace_input(n); each output element is written once, after
 * everything that reads the same element of in[k].
 *
 * Sources include exactly one header, "dc_cuda.cuh": on the GPU path it is
 * codegen/cuda/prelude.c's text (CUDA headers + shared helpers); the CPU
 * emulator used by the tests (tests/cuda_emu/) provides its own with the
 * same names.  So kernels use only: threadIdx/blockIdx/blockDim/gridDim,
 * __syncthreads, __shfl_xor_sync (full warps), static __shared__ arrays,
 * DC_DYNAMIC_SMEM(name) for dynamic shared memory, nvcuda::wmma with
 * 16x16x16 bf16/half fragments (element access to fragments is NOT allowed:
 * layouts are opaque; go through shared memory), the math in dc_common.cuh,
 * and the bf16/half/fp8 conversions that header names. */
#ifndef DC_CUDA_CODEGEN_H
#define DC_CUDA_CODEGEN_H

#include "ir/ir.h"
#include "ir/lowering.h"

/* Precision of the tensor-core work (conv2d, linear, attention): inputs
 * rounded to it as they are staged, accumulation always in f32.  F32 uses
 * plain FMA kernels (no TF32) so fp32 plans match the CPU to 1e-5. */
typedef enum { DC_CUDA_COMPUTE_F32, DC_CUDA_COMPUTE_BF16, DC_CUDA_COMPUTE_F16 } dc_cuda_compute;

const char *dc_cuda_compute_name(dc_cuda_compute c); /* "f32", "bf16", "f16" */
int dc_cuda_compute_from_name(const char *s, dc_cuda_compute *out);

typedef struct {
  dc_cuda_compute compute;
} dc_cuda_options;

typedef struct {
  char *name;   /* entry symbol, unique within a plan: "k<rep>_<op>" */
  char *source; /* the whole translation unit */
  uint32_t grid[3], block[3];
  uint32_t smem_bytes; /* dynamic shared memory per block (0 if none) */
} dc_cuda_kernel;

void dc_cuda_kernel_deinit(dc_cuda_kernel *k);

/* Writes node id's kernel.  `name` is the symbol to use.  An op or a shape
 * the generators cannot handle is an error naming the node (never a wrong
 * kernel). */
dc_status *dc_cuda_gen_node(const dc_module *m, int32_t id, const dc_cuda_options *o, const char *name,
                            dc_cuda_kernel *out);

/* How the CUDA backend lowers op: a generator, or the mark that says why
 * it has none (ir/lowering.h; the marks are in g_table.c). */
dc_lowering dc_cuda_lowering(dc_op op);
int dc_cuda_has_generator(dc_op op);

/* The text of "dc_cuda.cuh" for NVRTC (CUDA headers + dc_common.cuh). */
const char *dc_cuda_prelude_text(void);
/* The text of dc_common.cuh alone (shared by the emulator's prelude). */
const char *dc_cuda_common_text(void);

#endif
