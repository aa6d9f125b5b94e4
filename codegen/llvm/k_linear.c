/* k_linear.c — linear as a GEMM (k_gemm.h): out[m][j] = x[m][:] · w[j][:],
 * x flattened to M rows of K.  Vectors run along the output features j; A
 * is x, broadcast from its rows; B = wᵀ is packed on the fly into scratch,
 * one masked gather per k and vector.  We deliberately do not pre-pack
 * weights in the plan: packing a column chunk costs K·chunk loads against
 * M·K·chunk multiply-adds, about 1/M of the work (1/4096 for a UNet
 * projection; only the M = 1..2 time-embedding layers feel it).
 *
 * act = geglu: a panel pairs value columns j.. with gate columns H + j..,
 * so one tile produces y[:, j] · gelu(y[:, H + j]) directly and the 2H
 * intermediate never exists. */
#include "k_gemm.h"

static LLVMValueRef add(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(g->b, a, b, ""); }
static LLVMValueRef mul(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildNSWMul(g->b, a, kg_i64(g, c), ""); }

/* Panels of wᵀ for output columns [col0, col0 + ncols) (k_gemm.h). */
void gemm_pack_wt(dc_kgen *g, const gemm *gm, LLVMValueRef dst, LLVMValueRef grp, LLVMValueRef col0,
                  LLVMValueRef ncols) {
  const gemm_wt *lin = gm->op;
  int nvo = gm->geglu ? gm->nv / 2 : gm->nv;
  LLVMValueRef end = add(g, col0, ncols);
  LLVMValueRef npanels = LLVMBuildSDiv(g->b, add(g, ncols, kg_i64(g, gm->nro - 1)), kg_i64(g, gm->nro), "");
  kg_loop jp, k;
  kg_for(g, &jp, kg_i64(g, 0), npanels, 1, "jp");
  for (int v = 0; v < gm->nv; v++) {
    LLVMValueRef q0 = add(g, col0, add(g, mul(g, jp.i, gm->nro), kg_i64(g, (v % nvo) * g->vw)));
    LLVMValueRef mask = gk_lanes_below(g, q0, end);
    LLVMValueRef row0 = v < nvo ? q0 : add(g, q0, kg_i64(g, gm->geglu_h));
    LLVMValueRef rowv = LLVMBuildAdd(g->b, gk_isplat(g, row0), gk_iota(g), "");
    rowv = LLVMBuildSelect(g->b, mask, rowv, LLVMConstNull(LLVMTypeOf(rowv)), "");
    LLVMValueRef idx = LLVMBuildMul(g->b, rowv, gk_isplat(g, gk_i32(g, lin->k)), "");
    LLVMValueRef d = kg_gep(g, dst, add(g, mul(g, jp.i, gm->k * gm->nr), kg_i64(g, v * g->vw)));
    kg_for(g, &k, kg_i64(g, 0), kg_i64(g, lin->k), 1, "kk");
    LLVMValueRef wk = kg_gep_t(g, kg_elem_type(g, lin->wt), lin->w, k.i);
    kg_vstore(g, kg_gather_f32_from(g, lin->wt, wk, idx, mask), kg_gep(g, d, mul(g, k.i, gm->nr)));
    kg_end(g, &k);
  }
  kg_end(g, &jp);
}

dc_status *dc_k_linear(dc_kgen *g) {
  DC_TRY(gemm_need_f32(g));
  const dc_node *n = g->n;
  const dc_type *to = kg_type(g, 0), *tw = kg_type(g, 2);
  gemm_wt lin = {kg_buf_typed(g, 2, tw->dtype), tw->dims[0], tw->dims[1], tw->dtype};
  if (lin.n * lin.k >= INT32_MAX)
    return dc_error(DC_ERR_UNSUPPORTED, "linear: a weight of %lld elements is too large for 32-bit gathers",
                    (long long)(lin.n * lin.k));
  gemm gm = {0};
  int r = to->rank;
  gm.ncols = to->dims[r - 1];
  gm.m = gm.ncols ? (int64_t)(dc_type_numel(to) / (uint64_t)gm.ncols) : 0;
  gm.k = lin.k;
  gm.groups = 1;
  gm.geglu = dc_node_int(n, "act") == ACT_GEGLU;
  gm.geglu_h = lin.n / 2;
  gm.a = kg_buf(g, 1);
  gm.a_dtype = DT_F32;
  gm.lda = lin.k;
  gm.bias_per_col = 1;
  int64_t str[DC_MAX_DIMS];
  if (gemm_bind_epilogue(g, &gm, str)) {
    gm.res.nrdims = r - 1;
    for (int d = 0; d < r - 1; d++) {
      gm.res.rdims[d] = to->dims[d];
      gm.res.rstr[d] = str[d];
    }
    gm.res.cw = gm.ncols;
    gm.res.cs_lo = str[r - 1];
  }
  gm.pack = gemm_pack_wt;
  gm.op = &lin;
  gemm_plan(g, &gm);
  gemm_emit(g, &gm);
  return NULL;
}
