/* kernels.h — the plain C reference kernel of every op: the oracle that the
 * LLVM and CUDA backends are tested against, and what `diffrun --backend
 * reference` runs.  Obviously correct first, fast never: straight loops in
 * double-checked index order, accumulation in float (double where a sum is
 * long: norms and softmax denominators).
 *
 * Contract: out points to dc_type_bytes(&n->type) bytes (suitably aligned);
 * in[i] points to the data of input i, whose type is
 * m->nodes[n->inputs[i]].type.  The kernels' activations are f32 (CAST reads
 * any dtype, the byte moves copy any); dc_ref_run, the dispatch, widens
 * bf16/f16 values for them and rounds their bf16/f16 outputs.
 * Kernels may allocate bounded scratch (attention processes queries in blocks
 * so the S×S matrix never exists) and return a status on failure.
 *
 * Aliasing: out overlaps no input except in[k], k = dc_node_inplace_input(n),
 * whose bytes the memory planner may hand over to the output: input 0 of an
 * OPF_INPLACE op, and the residual of conv2d / linear (never x) when it has
 * the output's type.  out may then EQUAL in[k], so a kernel must read
 * in[k][i] before it writes out[i], for every i (out is no scratch space):
 * conv2d and linear compute into scratch and add the residual last.  This
 * binds the generated kernels too (codegen/llvm: the GEMM epilogue writes
 * each output once, after its last k block, reading residual[i] just before
 * out[i]); tests/test_memplan.c checks the reference kernels,
 * tests/test_llvm_alias.c the generated conv2d and linear. */
#ifndef DC_KERNELS_H
#define DC_KERNELS_H

#include "../ir/ir.h"
#include "../ir/lowering.h"

typedef dc_status *(*dc_ref_kernel)(const dc_module *m, const dc_node *n, const void *const *in,
                                    void *out);

/* NULL for the leaves INPUT and WEIGHT (the runtime binds their data) and
 * for test-only ops (OPF_TEST); CONSTANT's kernel places its bytes. */
dc_ref_kernel dc_ref_kernel_for(dc_op op);
/* Runs n's reference kernel, whatever the float dtypes of its values: the
 * one dispatch every caller goes through.  The kernels compute in f32; for
 * an op that computes (not one that moves bytes: reshape, permute, concat,
 * slice, upload, transfer, constant, cast), every
 * input stored in another float dtype (a bf16/f16 activation, a stored
 * weight) is first widened, exactly, into f32 scratch, and an output of
 * dtype bf16/f16 is computed into f32 scratch and rounded once (to nearest
 * even, as dc_f32_to_bf16 / dc_f32_to_f16 and the CUDA stores).  With every
 * value f32 this is the kernel itself.  The contract above holds (out may
 * equal in[k]: everything is read before out is written). */
dc_status *dc_ref_run(const dc_module *m, const dc_node *n, const void *const *in, void *out);
/* How the reference backend lowers op: its kernel above, or the mark that
 * says why it has none (ir/lowering.h). */
dc_lowering dc_ref_lowering(dc_op op);

/* relative_position_bias's bucket of offset rel = key - query (ops.def):
 * transformers' T5Attention._relative_position_bucket, the log term in f32.
 * The CUDA generator (codegen/cuda/g_position.c) calls it for every offset
 * its kernel meets and writes the buckets into the kernel as a table. */
int64_t dc_t5_position_bucket(int64_t rel, int64_t buckets, int bidirectional, int64_t max_distance);

/* The scalar dtype conversions CAST uses (also the compiler's). */
#include "../support/dtype_convert.h"

#endif
