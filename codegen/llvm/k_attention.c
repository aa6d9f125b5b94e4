/* k_attention.c — the fused attention kernel, flash style: for each (batch,
 * head, block of up to 64 queries) an online softmax over blocks of 96 keys
 * (running max m, running sum l, output rescaled by exp(m_old - m_new)), so
 * scratch holds one block of scores and never the Sq×Sk matrix.
 *
 * Queries live in vector lanes.  The query block is packed transposed,
 * Qt[d][i]; a block of scores is S[j][i] = scale · Σ_d Qt[d][i]·k[j][d], with
 * k read straight from its rows as broadcasts; the output accumulates
 * transposed, Ot[d][i] = Σ_j v[j][d]·P[j][i], v broadcast from its rows.  So:
 *   - neither k nor v is packed or transposed (they are re-read for every
 *     query block; only the query block is packed, once);
 *   - m, l and the rescale factor are vectors over queries, so the softmax
 *     is lane-wise with no horizontal reductions;
 *   - both products are register-blocked micro-kernels (rk keys or rd head
 *     dims × ct query vectors of accumulators, llvm.fmuladd), any D ≥ 1.
 * Each score sums over d in order, like the reference's dot(); the exp is a
 * vector polynomial (dc_k_attention_exp below).  Threads split the
 * (batch, head, query block) items; consecutive items share a head, so k and
 * v of that head stay in cache.
 *
 * causal_attention is the same kernel with the causal mask: a query block
 * walks only the key blocks up to its last query, and the score of key j
 * for query i is -inf where j > i, which the exp turns into exactly 0 (key
 * 0, in the first block, is every query's, so each running max is finite
 * from the first block on).
 *
 * attention_bias is the same kernel with a bias [H, Sq, Sk] added to the
 * scores after the scale, as the reference adds it (a product rounded, then
 * the sum).  Before a key block's scores, the block's bias tile (its query
 * rows, contiguous over keys) is moved into S transposed, by the same
 * vw×vw register transposes that pack Q; each score then adds its S entry
 * before overwriting it.  S is scratch the block has anyway, so the bias
 * costs no scratch and is read once per query block.  A bias that masks
 * keys with -inf may leave a query's running max at -inf through whole key
 * blocks: there -inf - -inf is NaN, which the exp's clamp (compare-and-
 * select, false for NaN) sends to -88, an exact 0, as the -inf scores are. */
#include <math.h>
#include <string.h>

#include "kgen.h"

enum { BQ_TARGET = 64, BK_TARGET = 96, MAX_ACC = 24 };

/* Compile-time geometry: all of it is constant in the generated code. */
typedef struct {
  int64_t batch, heads, sq, sk, d, hd; /* hd = H·D, the row stride */
  float scale;
  int causal;  /* causal_attention: query i sees keys 0..i */
  int bias;    /* attention_bias: S holds the block's bias before its scores */
  int vw;      /* lanes */
  int cq;      /* query vectors per block; bq = cq·vw queries */
  int ct;      /* query vectors per micro-tile (divides cq) */
  int rk, rd;  /* keys per QK micro-tile, head dims per PV micro-tile */
  int64_t bq, bk, nqb;
  /* scratch layout, in floats: Qt[d][bq], Ot[d][bq], S[bk][bq], then
   * m, l, block max and alpha as bq floats each */
  int64_t o_qt, o_ot, o_s, o_m, o_l, o_mb, o_al, floats;
} attn_shape;

/* Values of one kernel: the scratch arrays and the accumulator variables
 * (allocas that mem2reg turns into registers and loop phis). */
typedef struct {
  const attn_shape *a;
  LLVMValueRef qt, ot, s, m, l, mb, al;
  LLVMValueRef acc[MAX_ACC];
  LLVMValueRef lsum;
  LLVMValueRef r0, k0; /* causal: the first query of the block, the first key of the key block */
  LLVMValueRef bh;     /* bias: &bias[h][r0][0], this block's first bias row */
  LLVMValueRef rows;   /* bias: the block's real queries */
} attn_ctx;

static void plan_shape(const dc_kgen *g, attn_shape *a) {
  const dc_type *tq = kg_type(g, 1), *tk = kg_type(g, 2);
  a->batch = tq->dims[0];
  a->sq = tq->dims[1];
  a->sk = tk->dims[1];
  a->hd = tq->dims[2];
  a->heads = dc_node_int(g->n, "heads");
  a->d = a->hd / a->heads;
  a->scale = (float)dc_node_float(g->n, "scale");
  a->causal = g->n->op == OP_CAUSAL_ATTENTION;
  a->bias = g->n->op == OP_ATTENTION_BIAS;
  a->vw = g->vw;
  /* 24 accumulators fill 32 zmm registers with room for operands; with 16
   * registers (AVX2, SSE) 12 do. */
  int budget = g->vw == 16 ? 24 : 12, ctmax = g->vw == 16 ? 4 : 2;
  int64_t want = (a->sq < BQ_TARGET ? a->sq : BQ_TARGET);
  a->cq = (int)((want + a->vw - 1) / a->vw);
  a->ct = a->cq < ctmax ? a->cq : ctmax;
  a->cq = (a->cq + a->ct - 1) / a->ct * a->ct;
  a->rk = a->rd = budget / a->ct > 12 ? 12 : budget / a->ct;
  a->bq = (int64_t)a->cq * a->vw;
  a->bk = (BK_TARGET + a->rk - 1) / a->rk * a->rk;
  a->nqb = (a->sq + a->bq - 1) / a->bq;
  a->o_qt = 0;
  a->o_ot = a->o_qt + a->d * a->bq;
  a->o_s = a->o_ot + a->d * a->bq;
  a->o_m = a->o_s + a->bk * a->bq;
  a->o_l = a->o_m + a->bq;
  a->o_mb = a->o_l + a->bq;
  a->o_al = a->o_mb + a->bq;
  a->floats = a->o_al + a->bq;
}

/* ---- small builders ---------------------------------------------------- */
static LLVMValueRef add(dc_kgen *g, LLVMValueRef x, LLVMValueRef y) { return LLVMBuildNSWAdd(g->b, x, y, ""); }
static LLVMValueRef mul(dc_kgen *g, LLVMValueRef x, int64_t c) { return LLVMBuildNSWMul(g->b, x, kg_i64(g, c), ""); }
static LLVMValueRef at(dc_kgen *g, LLVMValueRef p, LLVMValueRef idx) { return kg_gep(g, p, idx); }
static LLVMValueRef atc(dc_kgen *g, LLVMValueRef p, int64_t idx) { return kg_gep(g, p, kg_i64(g, idx)); }

/* Compare-and-select min and max: one vmaxps/vminps each, where
 * llvm.maxnum/minnum add NaN fix-ups (there are no NaNs to fix here). */
static LLVMValueRef vmax(dc_kgen *g, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, LLVMRealOGT, x, y, ""), x, y, "");
}

static LLVMValueRef vmin(dc_kgen *g, LLVMValueRef x, LLVMValueRef y) {
  return LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, LLVMRealOLT, x, y, ""), x, y, "");
}

static LLVMValueRef getv(dc_kgen *g, LLVMValueRef var) { return LLVMBuildLoad2(g->b, g->vf32, var, ""); }
static void setv(dc_kgen *g, LLVMValueRef var, LLVMValueRef v) { LLVMBuildStore(g->b, v, var); }
/* var += x·y */
static void acc_fma(dc_kgen *g, LLVMValueRef var, LLVMValueRef x, LLVMValueRef y) {
  setv(g, var, kg_fma(g, x, y, getv(g, var)));
}

/* Query vector c (a constant or a value) of row `row` of a [*][bq] array. */
static LLVMValueRef qvec(dc_kgen *g, const attn_shape *a, LLVMValueRef base, LLVMValueRef row, LLVMValueRef c) {
  return at(g, base, add(g, mul(g, row, a->bq), mul(g, c, a->vw)));
}

/* &base[(d0 + k)·bq + i0]: lanes i0.. of row d0+k of a [*][bq] array. */
static LLVMValueRef qvec_at(dc_kgen *g, const attn_shape *a, LLVMValueRef base, LLVMValueRef d0, int k,
                            LLVMValueRef i0) {
  return at(g, base, add(g, mul(g, add(g, d0, kg_i64(g, k)), a->bq), i0));
}

/* ---- exp --------------------------------------------------------------- */
/* e^x on a vector: x = n·ln2 + r with |r| ≤ ln2/2 (Cody-Waite split of ln2,
 * n rounded by the 1.5·2^23 trick, which also leaves n in t's low bits),
 * e^r by its degree-7 Taylor polynomial (truncation ≤ 5e-9), times 2^n built
 * in the exponent field.  Max relative error 7.7e-8 (tested: ≤ 2e-7) for
 * results ≥ FLT_MIN; x is clamped to [-88, 88], so x ≤ -88 (and -inf) gives
 * exactly 0 (n = -127 makes 2^n's bits zero).  Softmax only needs x ≤ 0,
 * where flushing results below e^-88 to 0 changes nothing, so this skips
 * kg_expf's subnormal, overflow and NaN handling: about 16 vector
 * instructions instead of 25, and the exp is most of the softmax's cost.
 * Exported for the test (tests/test_llvm_attention.c). */
LLVMValueRef dc_k_attention_exp(dc_kgen *g, LLVMValueRef x);
LLVMValueRef dc_k_attention_exp(dc_kgen *g, LLVMValueRef x) {
  static const double taylor[8] = {1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040};
  LLVMTypeRef vi32 = LLVMVectorType(g->i32, (unsigned)g->vw);
  x = vmin(g, vmax(g, x, kg_vf32(g, -88.0)), kg_vf32(g, 88.0));
  LLVMValueRef magic = kg_vf32(g, 12582912.0);
  LLVMValueRef t = kg_fma(g, x, kg_vf32(g, 1.44269504088896341), magic);
  LLVMValueRef n = LLVMBuildFSub(g->b, t, magic, "n");
  LLVMValueRef r = kg_fma(g, n, kg_vf32(g, -0.693359375), x);
  r = kg_fma(g, n, kg_vf32(g, 2.12194440054690583e-4), r);
  LLVMValueRef p = kg_vf32(g, taylor[7]);
  for (int i = 6; i >= 0; i--) p = kg_fma(g, p, r, kg_vf32(g, taylor[i]));
  /* t's bits are 0x4B400000 + n; shifted left by 23 only n << 23 survives. */
  LLVMValueRef bits = LLVMBuildShl(g->b, LLVMBuildBitCast(g->b, t, vi32, ""), kg_iconst(vi32, 23), "");
  bits = LLVMBuildAdd(g->b, bits, kg_iconst(vi32, 127 << 23), "");
  return LLVMBuildFMul(g->b, p, LLVMBuildBitCast(g->b, bits, g->vf32, ""), "exp");
}

/* ---- S = scale · Q·Kᵀ for one micro-tile ------------------------------- */
/* The causal mask of score vector sv: key k0 + jl + r against the queries
 * of query vector ct (lanes r0 + ct·vw + 0..vw-1): -inf where the key comes
 * after the query. */
static LLVMValueRef causal_mask(dc_kgen *g, attn_ctx *c, LLVMValueRef sv, LLVMValueRef jl, int r, LLVMValueRef ct) {
  LLVMValueRef key = LLVMBuildTrunc(g->b, add(g, add(g, c->k0, jl), kg_i64(g, r)), g->i32, "");
  LLVMValueRef q0 = LLVMBuildTrunc(g->b, add(g, c->r0, mul(g, ct, c->a->vw)), g->i32, "");
  LLVMValueRef qi = LLVMBuildAdd(g->b, gk_isplat(g, q0), gk_iota(g), "");
  LLVMValueRef after = LLVMBuildICmp(g->b, LLVMIntSLT, qi, gk_isplat(g, key), "");
  return LLVMBuildSelect(g->b, after, kg_vf32(g, -INFINITY), sv, "");
}

/* Scores of nk keys (rows from kp, stride hd) × ct query vectors starting at
 * vector c0, into S rows jl.. of the block; folds them into the block max. */
static void qk_tile(dc_kgen *g, attn_ctx *c, LLVMValueRef kp, LLVMValueRef jl, LLVMValueRef c0, int nk) {
  const attn_shape *a = c->a;
  LLVMValueRef zero = kg_vf32(g, 0.0), qv[4];
  for (int i = 0; i < nk * a->ct; i++) setv(g, c->acc[i], zero);
  kg_loop d;
  kg_for(g, &d, kg_i64(g, 0), kg_i64(g, a->d), 1, "qk_d");
  for (int t = 0; t < a->ct; t++) qv[t] = kg_vload(g, qvec(g, a, c->qt, d.i, add(g, c0, kg_i64(g, t))));
  for (int r = 0; r < nk; r++) {
    LLVMValueRef kb = kg_splat(g, kg_load(g, at(g, kp, add(g, d.i, kg_i64(g, r * a->hd)))));
    for (int t = 0; t < a->ct; t++) acc_fma(g, c->acc[r * a->ct + t], qv[t], kb);
  }
  kg_end(g, &d);
  LLVMValueRef scale = kg_vf32(g, a->scale);
  for (int t = 0; t < a->ct; t++) {
    LLVMValueRef ct = add(g, c0, kg_i64(g, t)), mp = qvec(g, a, c->mb, kg_i64(g, 0), ct);
    LLVMValueRef mx = kg_vload(g, mp);
    for (int r = 0; r < nk; r++) {
      LLVMValueRef sp = qvec(g, a, c->s, add(g, jl, kg_i64(g, r)), ct);
      LLVMValueRef sv = LLVMBuildFMul(g->b, getv(g, c->acc[r * a->ct + t]), scale, "s");
      if (a->causal) sv = causal_mask(g, c, sv, jl, r, ct);
      if (a->bias) sv = LLVMBuildFAdd(g->b, sv, kg_vload(g, sp), "sb"); /* the bias pack_bias left there */
      kg_vstore(g, sv, sp);
      mx = vmax(g, mx, sv);
    }
    kg_vstore(g, mx, mp);
  }
}

/* ---- online softmax over one block of nk keys ----------------------------- */
/* m' = max(m, block max); alpha = e^(m - m'); S ← e^(S - m');
 * l ← l·alpha + Σ_j S[j].  alpha is kept for the PV step. */
static void softmax_block(dc_kgen *g, attn_ctx *c, int64_t nk) {
  const attn_shape *a = c->a;
  LLVMValueRef zero = kg_i64(g, 0);
  kg_loop cv;
  kg_for(g, &cv, zero, kg_i64(g, a->cq), 1, "sm_c");
  LLVMValueRef mp = qvec(g, a, c->m, zero, cv.i), mbp = qvec(g, a, c->mb, zero, cv.i);
  LLVMValueRef lp = qvec(g, a, c->l, zero, cv.i), mo = kg_vload(g, mp);
  LLVMValueRef mn = vmax(g, mo, kg_vload(g, mbp));
  LLVMValueRef alpha = dc_k_attention_exp(g, LLVMBuildFSub(g->b, mo, mn, ""));
  kg_vstore(g, alpha, qvec(g, a, c->al, zero, cv.i));
  kg_vstore(g, mn, mp);
  kg_vstore(g, kg_vf32(g, -INFINITY), mbp);
  setv(g, c->lsum, LLVMBuildFMul(g->b, kg_vload(g, lp), alpha, ""));
  kg_loop j;
  kg_for(g, &j, zero, kg_i64(g, nk), 1, "sm_j");
  LLVMValueRef sp = qvec(g, a, c->s, j.i, cv.i);
  LLVMValueRef p = dc_k_attention_exp(g, LLVMBuildFSub(g->b, kg_vload(g, sp), mn, ""));
  kg_vstore(g, p, sp);
  setv(g, c->lsum, LLVMBuildFAdd(g->b, getv(g, c->lsum), p, ""));
  kg_end(g, &j);
  kg_vstore(g, getv(g, c->lsum), lp);
  kg_end(g, &cv);
}

/* ---- Ot = alpha·Ot + Vᵀ·P for one micro-tile ------------------------------ */
/* Head dims d0..d0+nd × ct query vectors from c0, over the block's nk keys
 * (v rows from vp, stride hd). */
static void pv_tile(dc_kgen *g, attn_ctx *c, LLVMValueRef vp, LLVMValueRef d0, LLVMValueRef c0, int nd,
                    int64_t nk) {
  const attn_shape *a = c->a;
  LLVMValueRef pv[4];
  for (int t = 0; t < a->ct; t++) {
    LLVMValueRef ct = add(g, c0, kg_i64(g, t));
    LLVMValueRef alpha = kg_vload(g, qvec(g, a, c->al, kg_i64(g, 0), ct));
    for (int r = 0; r < nd; r++) {
      LLVMValueRef o = kg_vload(g, qvec(g, a, c->ot, add(g, d0, kg_i64(g, r)), ct));
      setv(g, c->acc[r * a->ct + t], LLVMBuildFMul(g->b, o, alpha, ""));
    }
  }
  kg_loop j;
  kg_for(g, &j, kg_i64(g, 0), kg_i64(g, nk), 1, "pv_j");
  for (int t = 0; t < a->ct; t++) pv[t] = kg_vload(g, qvec(g, a, c->s, j.i, add(g, c0, kg_i64(g, t))));
  LLVMValueRef row = add(g, mul(g, j.i, a->hd), d0);
  for (int r = 0; r < nd; r++) {
    LLVMValueRef vb = kg_splat(g, kg_load(g, at(g, vp, add(g, row, kg_i64(g, r)))));
    for (int t = 0; t < a->ct; t++) acc_fma(g, c->acc[r * a->ct + t], pv[t], vb);
  }
  kg_end(g, &j);
  for (int t = 0; t < a->ct; t++)
    for (int r = 0; r < nd; r++) {
      LLVMValueRef op = qvec(g, a, c->ot, add(g, d0, kg_i64(g, r)), add(g, c0, kg_i64(g, t)));
      kg_vstore(g, getv(g, c->acc[r * a->ct + t]), op);
    }
}

/* ---- one key block ------------------------------------------------------ */
static void pack_bias(dc_kgen *g, attn_ctx *c, LLVMValueRef k0, int64_t nk);

/* Keys [k0, k0 + nk) (nk constant: the full block, or the last one). */
static void key_block(dc_kgen *g, attn_ctx *c, LLVMValueRef kh, LLVMValueRef vh, LLVMValueRef k0, int64_t nk) {
  const attn_shape *a = c->a;
  LLVMValueRef kp = at(g, kh, mul(g, k0, a->hd)), vp = at(g, vh, mul(g, k0, a->hd));
  c->k0 = k0;
  if (a->bias) pack_bias(g, c, k0, nk);
  int64_t nfull = nk / a->rk, ktail = nk % a->rk, dfull = a->d / a->rd, dtail = a->d % a->rd;
  kg_loop grp, t;
  kg_for(g, &grp, kg_i64(g, 0), kg_i64(g, a->cq), a->ct, "qk_g");
  if (nfull) {
    kg_for(g, &t, kg_i64(g, 0), kg_i64(g, nfull * a->rk), a->rk, "qk_k");
    qk_tile(g, c, at(g, kp, mul(g, t.i, a->hd)), t.i, grp.i, a->rk);
    kg_end(g, &t);
  }
  if (ktail) qk_tile(g, c, atc(g, kp, nfull * a->rk * a->hd), kg_i64(g, nfull * a->rk), grp.i, (int)ktail);
  kg_end(g, &grp);
  softmax_block(g, c, nk);
  kg_for(g, &grp, kg_i64(g, 0), kg_i64(g, a->cq), a->ct, "pv_g");
  if (dfull) {
    kg_for(g, &t, kg_i64(g, 0), kg_i64(g, dfull * a->rd), a->rd, "pv_d");
    pv_tile(g, c, vp, t.i, grp.i, a->rd, nk);
    kg_end(g, &t);
  }
  if (dtail) pv_tile(g, c, vp, kg_i64(g, dfull * a->rd), grp.i, (int)dtail, nk);
  kg_end(g, &grp);
}

/* ---- per query block: pack, initialise, write out ---------------------- */
/* Both ends of a query block turn rows (stride hd, head dims contiguous)
 * into Qt/Ot columns or back: vw×vw tiles moved with masked vector loads
 * and stores and transposed in registers (left to itself, LLVM makes these
 * loops gathers and scatters, a third of the time at Sk = 77). */

/* <vw x i1> with lanes [0, n) set. */
static LLVMValueRef lane_mask(dc_kgen *g, int n) {
  LLVMValueRef e[16];
  for (int i = 0; i < g->vw; i++) e[i] = LLVMConstInt(g->i1, i < n, 0);
  return LLVMConstVector(e, (unsigned)g->vw);
}

/* lane_mask(n) where the i1 `ok` holds, else all clear. */
static LLVMValueRef row_mask(dc_kgen *g, int n, LLVMValueRef ok) {
  LLVMTypeRef vi1 = LLVMVectorType(g->i1, (unsigned)g->vw);
  LLVMValueRef one = LLVMBuildInsertElement(g->b, LLVMGetUndef(vi1), ok, kg_i64(g, 0), "");
  LLVMValueRef all = LLVMBuildShuffleVector(g->b, one, LLVMGetUndef(vi1),
                                            LLVMConstNull(LLVMVectorType(g->i32, (unsigned)g->vw)), "");
  return LLVMBuildAnd(g->b, all, lane_mask(g, n), "");
}

static LLVMValueRef masked_intrinsic(dc_kgen *g, const char *name, LLVMValueRef *args, int nargs) {
  LLVMTypeRef over[2] = {g->vf32, g->pvf32};
  unsigned id = LLVMLookupIntrinsicID(name, strlen(name));
  LLVMValueRef fn = LLVMGetIntrinsicDeclaration(g->mod, id, over, 2);
  return LLVMBuildCall2(g->b, LLVMIntrinsicGetType(g->ctx, id, over, 2), fn, args, (unsigned)nargs, "");
}

/* vw floats at p where mask is set, 0 elsewhere (masked lanes not read). */
static LLVMValueRef load_masked(dc_kgen *g, LLVMValueRef p, LLVMValueRef mask) {
  LLVMValueRef args[4] = {LLVMBuildBitCast(g->b, p, g->pvf32, ""), LLVMConstInt(g->i32, 4, 0), mask,
                          kg_vf32(g, 0.0)};
  return masked_intrinsic(g, "llvm.masked.load", args, 4);
}

static void store_masked(dc_kgen *g, LLVMValueRef v, LLVMValueRef p, LLVMValueRef mask) {
  LLVMValueRef args[4] = {v, LLVMBuildBitCast(g->b, p, g->pvf32, ""), LLVMConstInt(g->i32, 4, 0), mask};
  masked_intrinsic(g, "llvm.masked.store", args, 4);
}

/* In-place transpose of vw vectors of vw lanes: for h = vw/2 .. 1, rows r
 * and r+h swap their off-diagonal h-blocks (log2(vw)·vw two-input shuffles). */
static void transpose(dc_kgen *g, LLVMValueRef *v) {
  int n = g->vw;
  for (int h = n / 2; h >= 1; h /= 2)
    for (int r = 0; r < n; r++) {
      if (r & h) continue;
      LLVMValueRef ma[16], mb[16];
      for (int i = 0; i < n; i++) {
        ma[i] = LLVMConstInt(g->i32, (unsigned long long)((i & h) ? n + i - h : i), 0);
        mb[i] = LLVMConstInt(g->i32, (unsigned long long)((i & h) ? n + i : i + h), 0);
      }
      LLVMValueRef a = LLVMBuildShuffleVector(g->b, v[r], v[r + h], LLVMConstVector(ma, (unsigned)n), "");
      LLVMValueRef bb = LLVMBuildShuffleVector(g->b, v[r], v[r + h], LLVMConstVector(mb, (unsigned)n), "");
      v[r] = a;
      v[r + h] = bb;
    }
}

/* dst[d0..d0+dn)[i0..i0+vw) (a [*][bq] array) from columns d0.. of rows
 * i0.. of src (row stride `stride`; rows past `rows` read as 0). */
static void pack_tile_t(dc_kgen *g, const attn_shape *a, LLVMValueRef src, int64_t stride, LLVMValueRef i0,
                        LLVMValueRef rows, LLVMValueRef d0, int dn, LLVMValueRef dst) {
  LLVMValueRef v[16];
  for (int r = 0; r < g->vw; r++) {
    LLVMValueRef i = add(g, i0, kg_i64(g, r));
    LLVMValueRef ok = LLVMBuildICmp(g->b, LLVMIntSLT, i, rows, "");
    v[r] = load_masked(g, at(g, src, add(g, mul(g, i, stride), d0)), row_mask(g, dn, ok));
  }
  transpose(g, v);
  for (int k = 0; k < dn; k++) kg_vstore(g, v[k], qvec_at(g, a, dst, d0, k, i0));
}

/* Qt[d0..d0+dn)[i0..i0+vw) from q rows i0.. (rows past `rows` read as 0). */
static void pack_tile(dc_kgen *g, attn_ctx *c, LLVMValueRef qh, LLVMValueRef i0, LLVMValueRef rows, LLVMValueRef d0,
                      int dn) {
  pack_tile_t(g, c->a, qh, c->a->hd, i0, rows, d0, dn, c->qt);
}

/* Qt[d][i] = q row i for i < rows, 0 for the padding queries (their scores
 * are 0: finite, and never written out). */
static void pack_q(dc_kgen *g, attn_ctx *c, LLVMValueRef qh, LLVMValueRef rows) {
  const attn_shape *a = c->a;
  int64_t dfull = a->d / a->vw * a->vw;
  kg_loop i, d;
  kg_for(g, &i, kg_i64(g, 0), kg_i64(g, a->bq), a->vw, "pack_i");
  if (dfull) {
    kg_for(g, &d, kg_i64(g, 0), kg_i64(g, dfull), a->vw, "pack_d");
    pack_tile(g, c, qh, i.i, rows, d.i, a->vw);
    kg_end(g, &d);
  }
  if (a->d > dfull) pack_tile(g, c, qh, i.i, rows, kg_i64(g, dfull), (int)(a->d - dfull));
  kg_end(g, &i);
}

/* attention_bias: S[j][i] = bias[h][r0 + i][k0 + j] for the block's nk keys
 * (0 for the padding queries, whose scores are never written out). */
static void pack_bias(dc_kgen *g, attn_ctx *c, LLVMValueRef k0, int64_t nk) {
  const attn_shape *a = c->a;
  int64_t jfull = nk / a->vw * a->vw;
  LLVMValueRef src = at(g, c->bh, k0);
  kg_loop i, j;
  kg_for(g, &i, kg_i64(g, 0), kg_i64(g, a->bq), a->vw, "bias_i");
  if (jfull) {
    kg_for(g, &j, kg_i64(g, 0), kg_i64(g, jfull), a->vw, "bias_j");
    pack_tile_t(g, a, src, a->sk, i.i, c->rows, j.i, a->vw, c->s);
    kg_end(g, &j);
  }
  if (nk > jfull) pack_tile_t(g, a, src, a->sk, i.i, c->rows, kg_i64(g, jfull), (int)(nk - jfull), c->s);
  kg_end(g, &i);
}

/* Ot = 0, l = 0, m = block max = -inf. */
static void init_block(dc_kgen *g, attn_ctx *c) {
  const attn_shape *a = c->a;
  kg_loop i;
  kg_for(g, &i, kg_i64(g, 0), kg_i64(g, a->d * a->bq), a->vw, "init_o");
  kg_vstore(g, kg_vf32(g, 0.0), at(g, c->ot, i.i));
  kg_end(g, &i);
  for (int v = 0; v < a->cq; v++) {
    kg_vstore(g, kg_vf32(g, -INFINITY), atc(g, c->m, (int64_t)v * a->vw));
    kg_vstore(g, kg_vf32(g, -INFINITY), atc(g, c->mb, (int64_t)v * a->vw));
    kg_vstore(g, kg_vf32(g, 0.0), atc(g, c->l, (int64_t)v * a->vw));
  }
}

/* y rows i0.. (those < rows), head dims d0..d0+dn = Ot[d][i] / l[i]. */
static void out_tile(dc_kgen *g, attn_ctx *c, LLVMValueRef yh, LLVMValueRef i0, LLVMValueRef rows, LLVMValueRef d0,
                     int dn) {
  const attn_shape *a = c->a;
  LLVMValueRef v[16], l = kg_vload(g, at(g, c->l, i0));
  for (int k = 0; k < g->vw; k++)
    v[k] = k < dn ? LLVMBuildFDiv(g->b, kg_vload(g, qvec_at(g, a, c->ot, d0, k, i0)), l, "")
                  : kg_vf32(g, 0.0);
  transpose(g, v);
  for (int r = 0; r < g->vw; r++) {
    LLVMValueRef i = add(g, i0, kg_i64(g, r));
    LLVMValueRef ok = LLVMBuildICmp(g->b, LLVMIntSLT, i, rows, "");
    store_masked(g, v[r], at(g, yh, add(g, mul(g, i, a->hd), d0)), row_mask(g, dn, ok));
  }
}

/* The block's real rows of y: Ot / l, transposed back into rows. */
static void write_out(dc_kgen *g, attn_ctx *c, LLVMValueRef yh, LLVMValueRef rows) {
  const attn_shape *a = c->a;
  int64_t dfull = a->d / a->vw * a->vw;
  kg_loop i, d;
  kg_for(g, &i, kg_i64(g, 0), rows, a->vw, "out_i");
  if (dfull) {
    kg_for(g, &d, kg_i64(g, 0), kg_i64(g, dfull), a->vw, "out_d");
    out_tile(g, c, yh, i.i, rows, d.i, a->vw);
    kg_end(g, &d);
  }
  if (a->d > dfull) out_tile(g, c, yh, i.i, rows, kg_i64(g, dfull), (int)(a->d - dfull));
  kg_end(g, &i);
}

/* The full key blocks, then the tail block, of keys [0, Sk); causal: of the
 * keys [0, kend) the block's queries see (whole blocks: the mask does the rest). */
static void key_blocks(dc_kgen *g, attn_ctx *c, LLVMValueRef kh, LLVMValueRef vh, LLVMValueRef kend) {
  const attn_shape *a = c->a;
  int64_t nkb = a->sk / a->bk, ktail = a->sk % a->bk;
  LLVMValueRef full = kg_i64(g, nkb * a->bk);
  if (a->causal) { /* min(nkb·bk, kend rounded up to a block) */
    LLVMValueRef up = mul(g, LLVMBuildSDiv(g->b, add(g, kend, kg_i64(g, a->bk - 1)), kg_i64(g, a->bk), ""), a->bk);
    full = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, up, full, ""), up, full, "kfull");
  }
  if (nkb) {
    kg_loop kb;
    kg_for(g, &kb, kg_i64(g, 0), full, a->bk, "kblk");
    key_block(g, c, kh, vh, kb.i, a->bk);
    kg_end(g, &kb);
  }
  if (!ktail) return;
  kg_cond tail;
  if (a->causal) kg_if(g, &tail, LLVMBuildICmp(g->b, LLVMIntSGT, kend, kg_i64(g, nkb * a->bk), ""));
  key_block(g, c, kh, vh, kg_i64(g, nkb * a->bk), ktail);
  if (a->causal) kg_endif(g, &tail);
}

/* One work item: batch b, head h, query block qb (bias: NULL, or bias's buffer). */
static void query_block(dc_kgen *g, attn_ctx *c, LLVMValueRef item, LLVMValueRef q, LLVMValueRef k, LLVMValueRef v,
                        LLVMValueRef bias, LLVMValueRef y) {
  const attn_shape *a = c->a;
  LLVMBuilderRef b = g->b;
  LLVMValueRef qb = LLVMBuildSRem(b, item, kg_i64(g, a->nqb), "qb");
  LLVMValueRef bh = LLVMBuildSDiv(b, item, kg_i64(g, a->nqb), "bh");
  LLVMValueRef bi = LLVMBuildSDiv(b, bh, kg_i64(g, a->heads), "b");
  LLVMValueRef h = LLVMBuildSRem(b, bh, kg_i64(g, a->heads), "h"), hcol = mul(g, h, a->d);
  LLVMValueRef r0 = mul(g, qb, a->bq), left = LLVMBuildNSWSub(b, kg_i64(g, a->sq), r0, "");
  LLVMValueRef rows = LLVMBuildSelect(b, LLVMBuildICmp(b, LLVMIntSLT, left, kg_i64(g, a->bq), ""), left,
                                      kg_i64(g, a->bq), "rows");
  LLVMValueRef qoff = add(g, mul(g, add(g, mul(g, bi, a->sq), r0), a->hd), hcol);
  LLVMValueRef koff = add(g, mul(g, bi, a->sk * a->hd), hcol);
  LLVMValueRef kh = at(g, k, koff), vh = at(g, v, koff);
  c->r0 = r0;
  c->rows = rows;
  if (bias) c->bh = at(g, bias, add(g, mul(g, h, a->sq * a->sk), mul(g, r0, a->sk)));
  pack_q(g, c, at(g, q, qoff), rows);
  init_block(g, c);
  key_blocks(g, c, kh, vh, add(g, r0, rows));
  write_out(g, c, at(g, y, qoff), rows);
}

/* attention, causal_attention and attention_bias (a->causal, a->bias, from
 * the node's op). */
dc_status *dc_k_attention(dc_kgen *g) {
  for (int i = 0; i <= g->n->ninputs; i++)
    if (kg_type(g, i)->dtype != DT_F32)
      return dc_error(DC_ERR_UNSUPPORTED, "%s: the LLVM kernel computes in f32, got %s for %s",
                      dc_op_get(g->n->op)->name, dc_dtype_name(kg_type(g, i)->dtype), i ? "an input" : "the output");
  attn_shape a;
  plan_shape(g, &a);
  if (a.sq < 1 || a.sk < 1 || a.d < 1) return NULL; /* nothing to attend to, or nothing asked */
  g->scratch_bytes = (uint64_t)a.floats * sizeof(float);
  attn_ctx c = {.a = &a};
  for (int i = 0; i < MAX_ACC; i++) c.acc[i] = kg_var(g, g->vf32, "acc");
  c.lsum = kg_var(g, g->vf32, "lsum");
  LLVMValueRef y = kg_buf(g, 0), q = kg_buf(g, 1), k = kg_buf(g, 2), v = kg_buf(g, 3), scr = kg_scratch(g);
  LLVMValueRef bias = a.bias ? kg_buf(g, 4) : NULL;
  c.qt = atc(g, scr, a.o_qt);
  c.ot = atc(g, scr, a.o_ot);
  c.s = atc(g, scr, a.o_s);
  c.m = atc(g, scr, a.o_m);
  c.l = atc(g, scr, a.o_l);
  c.mb = atc(g, scr, a.o_mb);
  c.al = atc(g, scr, a.o_al);
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, a.batch * a.heads * a.nqb), &lo, &hi);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "item");
  query_block(g, &c, it.i, q, k, v, bias, y);
  kg_end(g, &it);
  return NULL;
}
