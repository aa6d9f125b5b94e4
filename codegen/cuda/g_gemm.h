/* g_gemm.h — internal to codegen/cuda: what the two GEMM generators share.
 * g_gemm.c reads a conv2d / conv3d / linear node into a `gemm` (shapes, operand
 * dtypes, epilogue) and owns the epilogue text (bias, act, residual, geglu
 * pairs, gated residual: one definition); it writes the FMA kernel (f32
 * compute) and the WMMA one, and hands bf16 / f16 compute to g_mma_gemm.c
 * (mma.sync + ldmatrix + cp.async) for the shapes that generator takes.
 *
 * The epilogue contract: the kernel stores its f32 accumulator tile into
 * shared memory as cs[BM][G_LDC] (rows = GEMM rows m0.., columns = the
 * block's local columns, geglu's value columns first then their gates),
 * syncs, and calls g_epilogue through dc_gemm_emit_epilogue_call.  It must
 * define G_M, G_OUTC, G_BM, G_OBN, G_NT, G_LDC (and G_P for a conv), the
 * bias type g_b_t and G_BIAS(i) before the emitted functions. */
#ifndef DC_CUDA_G_GEMM_H
#define DC_CUDA_G_GEMM_H

#include "cgen.h"

typedef struct {
  int conv, nhwc, wmma, geglu, act, has_bias, has_res, has_gate;
  int64_t gate_rows, gate_ld, gate_at; /* linear's gated residual: rows per sample, mod's row, the chunk */
  dc_dtype wtype, btype;               /* stored dtypes of the weight and the bias */
  dc_dtype xtype, otype, rtype, gtype; /* activation dtypes: x, out, residual, gate */
  dc_cuda_compute compute;
  int64_t m, ncols, k, outc;      /* GEMM rows, GEMM columns, reduction, output columns */
  int64_t ci, hi, wi, kh, kw, ho, wo, stride, pt, pl; /* conv geometry */
  int conv3d;                          /* conv3d: time too, H and W strides of their own */
  int64_t ti, kd, to, st, sh, sw;      /* conv3d: frames in, taps in time, frames out, strides */
  int bm, bn, bk, threads;        /* block tile, K step, threads per block */
  int fm, fn, wgm, wgn;           /* wmma: fragments per warp (rows, cols), warp grid */
  dc_type out, res;
} gemm;

/* The SM count tiles are chosen for: o->sm_count, or 132 (an H100 / H200)
 * when the options leave it 0. */
int dc_cuda_sm_count(const dc_cuda_options *o);

/* g_gemm.c's reading of a node (dtypes checked, epilogue and shapes read). */
dc_status *dc_gemm_read(const dc_module *m, const dc_node *n, gemm *g);

/* The shared text (g_gemm.c): g_col(by, jl), the GEMM column of the block's
 * local column; g_res(oi), the residual's index; g_epilogue; the kernel's
 * opening line with its parameters (out, x, w, bias, res, gate as the node
 * has them); and the epilogue call that ends the kernel. */
/* The conv geometry #defines and the operand typedefs / loads (g_x_t,
 * g_w_t, g_b_t, g_o_t, g_r_t, g_g_t) both GEMM kernels' text uses. */
void dc_gemm_emit_operands(dc_buf *b, const gemm *g);
void dc_gemm_emit_col(dc_buf *b, const gemm *g);
void dc_gemm_emit_res_index(dc_buf *b, const gemm *g);
void dc_gemm_emit_epilogue(dc_buf *b, const gemm *g);
void dc_gemm_emit_params(dc_buf *b, const gemm *g, const char *name);
void dc_gemm_emit_epilogue_call(dc_buf *b, const gemm *g);

/* g_mma_gemm.c: 1 when it takes g (bf16 / f16 compute, linear or an NHWC
 * conv), else 0 and *why says which generator keeps it. */
int dc_mma_gemm_takes(const gemm *g, const char **why);
/* Writes g's kernel on mma.sync; g as dc_gemm_read filled it. */
dc_status *dc_mma_gemm_generate(gemm *g, const dc_cuda_options *o, const char *what, const char *name,
                                dc_cuda_kernel *out);

#endif
