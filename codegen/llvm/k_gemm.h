/* k_gemm.h — private to the conv2d, conv3d and linear kernels (k_gemm.c,
 * k_conv.c, k_linear.c): one register-blocked GEMM generator they lower to
 * (conv3d is conv2d's GEMM with time in its k and its columns, k_conv.c).
 *
 * Both ops compute, per group g (conv: image; linear: one group),
 *     C[r, j] = sum_kk A[r, kk] · B[kk, j]       r < m, j < ncols, kk < k
 * with A row-major in memory (conv: the weight [O, C·kh·kw]; linear: the
 * rows of x) and broadcast from there, and B built on the fly into the
 * thread's scratch by an op-specific packer (conv: im2col of the image;
 * linear: w transposed).  C row (g·m + r) is the output row: output
 * element (g·m + r)·ldc + j — NCHW conv output and row-major linear output
 * both have that form.  The epilogue (bias, act, residual) is fused into the
 * tile's store.
 *
 * Packed B layout: panels of nr = nv·W GEMM columns, each [k][nr]
 * contiguous, so the micro-kernel reads nr floats per k from one stream.
 * For geglu a panel holds W·nv/2 "value" columns j and the matching "gate"
 * columns H + j, and produces nro = nr/2 output columns.
 *
 * A that is no single matrix (NHWC conv: row r = output pixel, k = (ky, kx,
 * c), so a row is the taps' channel runs of different input pixels) gives
 * an arow callback and kseg = C: k blocks then never straddle a tap, and a
 * row's kc values at block pc are one contiguous run of x (or zeros, for a
 * padding tap): an implicit im2col, nothing packed. */
#ifndef DC_K_GEMM_H
#define DC_K_GEMM_H

#include "kgen.h"

typedef struct gemm gemm;

/* Where row R of A has its element k = pc (an f32 pointer; the block's
 * kcur values follow contiguously), for arow-addressed A (see above). */
typedef LLVMValueRef (*gemm_arow_fn)(dc_kgen *g, const gemm *gm, LLVMValueRef row, LLVMValueRef pc);

/* Fills dst with the packed panels of output columns [col0, col0 + ncols)
 * of group `grp`, for all k: dst[(p·k + kk)·nr + lane]; lanes past ncols
 * are zero.  grp, col0, ncols are i64 values. */
typedef void (*gemm_pack_fn)(dc_kgen *g, const gemm *gm, LLVMValueRef dst, LLVMValueRef grp, LLVMValueRef col0,
                             LLVMValueRef ncols);

/* Residual addressing: output row R = g·m + r is split over rdims
 * (outermost first, product = groups·m) with residual strides rstr (0 where
 * it broadcasts); output column j within a row maps to
 * (j / cw)·cs_hi + (j % cw)·cs_lo. */
typedef struct {
  int nrdims;
  int64_t rdims[DC_MAX_DIMS], rstr[DC_MAX_DIMS];
  int64_t cw, cs_hi, cs_lo;
} gemm_res;

struct gemm {
  /* the problem */
  int64_t m, k, ncols, groups;
  int geglu;                /* linear act=geglu: B columns j and H + j pair up */
  int64_t geglu_h;          /* H */
  /* epilogue */
  dc_act act;               /* none, silu, gelu (geglu handled by the flag) */
  int bias_per_col;         /* linear: bias[j] (and bias[H + j]); conv: bias[r] */
  int has_bias, has_res;
  gemm_res res;
  /* linear's gated residual (ops.def): out = res + gate · y, the gate of
   * output row R at gate + (R / gate_rows)·gate_ld + gate_at (f32) */
  int has_gate;
  LLVMValueRef gate;
  int64_t gate_rows, gate_ld, gate_at;
  /* operands (set by the op's emitter); a and bias may be stored in another
   * dtype (layerwise casting): read through kg_load_f32_from */
  LLVMValueRef a, out, bias, resp;
  dc_dtype a_dtype, bias_dtype;
  int64_t lda, ldc;
  gemm_pack_fn pack;
  const void *op;           /* the packer's own description */
  /* A addressed row by row (a_dtype f32; a and lda unused): k blocks never
   * straddle a multiple of kseg; azero (set by gemm_emit) points at kc zeros
   * in the thread's scratch for rows with nothing to read */
  gemm_arow_fn arow;
  const void *a_op;         /* arow's own description */
  int64_t kseg;
  LLVMValueRef azero;
  /* tiling (gemm_plan): tile mr × nr (nro output columns), k unrolled u;
   * k blocks of kc (nkb of them, bps per kseg segment), row blocks of mc;
   * column chunks of ppc panels, nbg per group; nt row tiles */
  int mr, nv, nr, nro, u;
  int64_t kc, nkb, bps, mc, ppc, nbg, nt;
};

/* Chooses tiles, blocks and the thread split; sets g->scratch_bytes. */
void gemm_plan(dc_kgen *g, gemm *gm);
/* Emits the whole kernel body for gm (after gemm_plan). */
void gemm_emit(dc_kgen *g, gemm *gm);
/* The pieces for a kernel with its own blocking (k_winograd.c): the
 * register tile (mr, nv, nr, nro, u) for this target, and the micro-kernel
 * itself: acc[i·nv + v] += sum over k < kcur of A_i[k] · B[k][v·W + lane]
 * for the i < mr rows whose element 0 arow[i] points at (a_dtype) and the
 * packed panel bp ([k][nr] floats); gm->k % gm->u says whether kcur may
 * leave a remainder after the unrolled loop. */
void gemm_tile_shape(const dc_kgen *g, gemm *gm);
void gemm_kernel(dc_kgen *g, const gemm *gm, int mr, LLVMValueRef *arow, LLVMValueRef bp, LLVMValueRef kcur,
                 LLVMValueRef *acc);
/* Residual strides of `res` broadcast onto `out` (numpy rules): per output
 * dim, the residual's element stride or 0. */
void gemm_bcast_strides(const dc_type *out, const dc_type *res, int64_t *str);
/* The epilogue operands conv2d and linear wire alike (ops.def): the output
 * (ldc = gm->ncols, so set ncols first), act, the bias (node input 2) and
 * the residual (the input after it), and a linear's gate (after that).
 * Returns 1 with the residual's broadcast strides against the output in
 * res_str when there is one; the caller maps them onto gm->res, which
 * depends on how its rows and columns cover the output. */
int gemm_bind_epilogue(dc_kgen *g, gemm *gm, int64_t *res_str);
/* Every operand of the node is f32 except the weight and bias, which may be
 * stored in any dtype; else DC_ERR_UNSUPPORTED. */
dc_status *gemm_need_f32(dc_kgen *g);

/* The packer of B = wᵀ for a weight w [n, k] stored in dtype wt (linear;
 * NHWC conv, whose [O, kh, kw, C] weight is [O, K] with k = (ky, kx, c)):
 * one masked gather per k and vector.  gm->op points at a gemm_wt. */
typedef struct {
  LLVMValueRef w; /* elements of wt */
  int64_t n, k;
  dc_dtype wt;
} gemm_wt;
void gemm_pack_wt(dc_kgen *g, const gemm *gm, LLVMValueRef dst, LLVMValueRef grp, LLVMValueRef col0,
                  LLVMValueRef ncols);

/* ---- stored dtypes (k_stored.c): weights read as f32 where they are used ---- */
LLVMTypeRef kg_elem_type(dc_kgen *g, dc_dtype t);          /* float, i16 (bf16, f16) or i8 (fp8) */
LLVMValueRef kg_buf_typed(dc_kgen *g, int i, dc_dtype t); /* bufs[i] as a pointer to that */
/* Element idx of p (kg_elem_type(t)*) as f32; the vector form gathers
 * p[idx[lane]] for lanes in mask (idx: <W x i32>), zero elsewhere. */
LLVMValueRef kg_load_f32_from(dc_kgen *g, dc_dtype t, LLVMValueRef p, LLVMValueRef idx);
LLVMValueRef kg_gather_f32_from(dc_kgen *g, dc_dtype t, LLVMValueRef p, LLVMValueRef idx, LLVMValueRef mask);

/* conv2d by Winograd F(2×2, 3×3) (k_winograd.c): whether node g->n takes
 * that path (3×3, stride 1, NCHW or NHWC, large enough to pay;
 * g->winograd), and its emitter. */
int conv2d_winograd_applies(const dc_kgen *g);
dc_status *conv2d_winograd(dc_kgen *g);
/* conv3d the same way when its taps in H and W are 3×3 at stride 1 (its
 * output frames as images, its (c, kt) pairs as channels). */
int conv3d_winograd_applies(const dc_kgen *g);
dc_status *conv3d_winograd(dc_kgen *g);

dc_status *dc_k_conv2d(dc_kgen *g);
dc_status *dc_k_conv3d(dc_kgen *g);
dc_status *dc_k_linear(dc_kgen *g);

#endif
