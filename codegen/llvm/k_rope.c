/* k_rope.c — the rotary embedding (rope): adjacent pairs (x[2i], x[2i+1])
 * of every head turned by the angles of the token's row of the cos/sin
 * table f[S - start, 2, D], tokens before `start` copied (ops.def).
 *
 * A vector holds vw/2 whole pairs (D and vw are even, and a head's vectors
 * start at its first column), so the rotation is lane-wise:
 *     y = x·cos + swap(x)·(-1, +1, ...)·sin
 * with swap exchanging the two lanes of each pair: each product rounded,
 * then the sum, the reference's arithmetic (multiplying by ±1 is exact), so
 * the kernel is bit for bit the reference.  Threads split the B·S token
 * rows; a row is walked in order, head by head (the token's cos and sin
 * rows, 2·D floats, stay in L1), so the hardware prefetchers see one
 * stream in and one out: at Flux's sizes the op is a pass over memory.
 * Each vector is loaded before its lanes are stored, so the output may be
 * x's own buffer. */
#include "kgen.h"

typedef struct {
  int64_t batch, seq, heads, d, hd, start;
} rope_shape;

/* <vw x i32> constants: the pair swap (1, 0, 3, 2, ...). */
static LLVMValueRef pair_swap_mask(dc_kgen *g) {
  LLVMValueRef e[16];
  for (int i = 0; i < g->vw; i++) e[i] = LLVMConstInt(g->i32, (unsigned long long)(i ^ 1), 0);
  return LLVMConstVector(e, (unsigned)g->vw);
}

/* (-1, +1, -1, +1, ...): the sign of each lane's sin term. */
static LLVMValueRef pair_sign(dc_kgen *g) {
  LLVMValueRef e[16];
  for (int i = 0; i < g->vw; i++) e[i] = kg_f32(g, i % 2 ? 1.0 : -1.0);
  return LLVMConstVector(e, (unsigned)g->vw);
}

/* Columns [col, col + n) of the head at xh/yh (n lanes, n even: a full
 * vector or the head's tail). */
static void rotate_columns(dc_kgen *g, const rope_shape *r, LLVMValueRef xh, LLVMValueRef yh, LLVMValueRef fr,
                           LLVMValueRef col, int n) {
  LLVMValueRef cs = kg_vload_n(g, g->vf32, kg_gep(g, fr, col), n, NULL);
  LLVMValueRef sn = kg_vload_n(g, g->vf32, kg_gep(g, fr, LLVMBuildNSWAdd(g->b, col, kg_i64(g, r->d), "")), n, NULL);
  LLVMValueRef x = kg_vload_n(g, g->vf32, kg_gep(g, xh, col), n, NULL);
  LLVMValueRef sw = LLVMBuildShuffleVector(g->b, x, x, pair_swap_mask(g), "swap");
  LLVMValueRef a = LLVMBuildFMul(g->b, x, cs, "");
  LLVMValueRef b = LLVMBuildFMul(g->b, LLVMBuildFMul(g->b, sw, pair_sign(g), ""), sn, "");
  kg_vstore_n(g, LLVMBuildFAdd(g->b, a, b, "rope"), kg_gep(g, yh, col), n);
}

/* One token row: rotated, or copied when before `start`. */
static void token_row(dc_kgen *g, const rope_shape *r, LLVMValueRef row, LLVMValueRef x, LLVMValueRef f,
                      LLVMValueRef y) {
  LLVMValueRef s = LLVMBuildSRem(g->b, row, kg_i64(g, r->seq), "s");
  LLVMValueRef off = LLVMBuildNSWMul(g->b, row, kg_i64(g, r->hd), "");
  LLVMValueRef xr = kg_gep(g, x, off), yr = kg_gep(g, y, off);
  LLVMValueRef rotated = LLVMBuildICmp(g->b, LLVMIntSGE, s, kg_i64(g, r->start), "");
  kg_cond copy, turn;
  if (r->start > 0) { /* memmove: y may be x itself */
    kg_if(g, &copy, LLVMBuildNot(g->b, rotated, ""));
    LLVMBuildMemMove(g->b, yr, 4, xr, 4, kg_i64(g, r->hd * 4));
    kg_endif(g, &copy);
  }
  kg_if(g, &turn, rotated);
  LLVMValueRef fr = kg_gep(g, f, LLVMBuildNSWMul(g->b, LLVMBuildNSWSub(g->b, s, kg_i64(g, r->start), ""),
                                                 kg_i64(g, 2 * r->d), ""));
  int64_t full = r->d / g->vw * g->vw;
  kg_loop h;
  kg_for(g, &h, kg_i64(g, 0), kg_i64(g, r->hd), r->d, "head");
  LLVMValueRef xh = kg_gep(g, xr, h.i), yh = kg_gep(g, yr, h.i);
  if (full) {
    kg_loop c;
    kg_for(g, &c, kg_i64(g, 0), kg_i64(g, full), g->vw, "col");
    rotate_columns(g, r, xh, yh, fr, c.i, g->vw);
    kg_end(g, &c);
  }
  if (r->d > full) rotate_columns(g, r, xh, yh, fr, kg_i64(g, full), (int)(r->d - full));
  kg_end(g, &h);
  kg_endif(g, &turn);
}

dc_status *dc_k_rope(dc_kgen *g) {
  for (int i = 0; i <= 2; i++)
    if (kg_type(g, i)->dtype != DT_F32)
      return dc_error(DC_ERR_UNSUPPORTED, "rope: the LLVM kernel computes in f32, got %s for %s",
                      dc_dtype_name(kg_type(g, i)->dtype), i ? "an input" : "the output");
  const dc_type *tx = kg_type(g, 1);
  rope_shape r = {tx->dims[0], tx->dims[1], dc_node_int(g->n, "heads"), 0, tx->dims[2], dc_node_int(g->n, "start")};
  r.d = r.hd / r.heads;
  if (r.batch * r.seq == 0 || r.hd == 0) return NULL;
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, r.batch * r.seq), &lo, &hi);
  LLVMValueRef y = kg_buf(g, 0), x = kg_buf(g, 1), f = kg_buf(g, 2);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "row");
  token_row(g, &r, it.i, x, f, y);
  kg_end(g, &it);
  return NULL;
}
