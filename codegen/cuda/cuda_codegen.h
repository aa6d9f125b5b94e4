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
 * and the bf16/half/fp8 conversions that header names.
 *
 * A source may also include "dc_mma.cuh" (after "dc_cuda.cuh"): the
 * tensor-core primitives with their layouts exposed, as inline PTX on the
 * GPU (dc_cuda_mma_text) and emulated in tests/cuda_emu/dc_mma.cuh.  With
 * g = lane >> 2, t = lane & 3, each unsigned two 16-bit values, low first:
 *   dc_mma_16816_bf16 / _f16(float d[4], const unsigned a[4], const unsigned b[2]):
 *     d += A.B for one 16x8x16 tile (mma.sync m16n8k16 row.col, f32 accumulate);
 *     a[0] A[g][2t..2t+1], a[1] A[g+8][2t..], a[2] A[g][2t+8..], a[3] A[g+8][2t+8..];
 *     b[0] B[2t..2t+1][g], b[1] B[2t+8..2t+9][g] (B is K x N);
 *     d[0..1] D[g][2t..2t+1], d[2..3] D[g+8][2t..2t+1].  A warp collective.
 *   dc_ldmatrix_x1/_x2/_x4[_trans](unsigned r[], const void *row): lanes
 *     8i..8i+7 give the 16-byte-aligned shared addresses of matrix i's 8
 *     rows (of 8 16-bit values); r[i] of lane L is matrix i's row L >> 2,
 *     columns 2(L & 3)..+1 (of the transpose with _trans).  A warp collective.
 *   dc_cp_async_16(void *smem, const void *gmem, int src_bytes): 16 bytes
 *     global -> shared, both 16-byte aligned; src_bytes 16, or 0 to zero-fill
 *     without reading.  dc_cp_async_commit() closes a group;
 *     DC_CP_ASYNC_WAIT(n) (n a literal) waits until at most n of this
 *     thread's groups are pending.  A thread must not exit with copies pending. */
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
  /* Streaming multiprocessors of the GPU the plan is for: the GEMM
   * generators choose tiles so that their grids fill it.  0: 132 (an H100 /
   * H200), the default when no GPU is present at compile time. */
  int sm_count;
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
/* The text of "dc_mma.cuh" for NVRTC (the primitives above, inline PTX). */
const char *dc_cuda_mma_text(void);

#endif
