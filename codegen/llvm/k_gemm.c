/* k_gemm.c — the GEMM generator behind conv2d and linear (see k_gemm.h):
 * a register-blocked micro-kernel in explicit <W x float> IR, cache
 * blocking, the thread split, and the fused epilogue.
 *
 * Micro-kernel: an mr × nv·W tile of C (6 × 32 with AVX-512: 12 zmm
 * accumulators; 6 × 16 with AVX2: 12 ymm) over a k range; per k it loads
 * nv vectors of the packed B panel and broadcasts mr scalars of A straight
 * from A's rows, nv·mr llvm.fmuladd.  The k loop is unrolled by u.  The
 * tile must fit the target's vector registers (choose_tile): AVX2 has 16,
 * and 12 accumulators + 2 B vectors + 1 broadcast is 15 of them, so the k
 * loop never spills (test_llvm_gemm checks the generated assembly).
 *
 * Blocking, per column chunk (ppc panels of one group's columns):
 *   pack B for all k into scratch (k × ppc·nr floats, sized to about L2)
 *   for ic in this thread's rows, step mc   A block mc × kc stays in L2
 *     for pc in k, step kc                  (nkb blocks)
 *       for jr in panels                    B micro-panel kc × nr stays in L1
 *         for ir in ic..ic+mc, step mr: tile
 * With kseg (an arow-addressed A, NHWC conv) the pc loop runs over blocks
 * that each lie inside one segment of kseg (a tap's channels).
 * Partial sums of a tile between k blocks live in a per-thread mc × ppc·nr
 * scratch block (L2), never in the output: the output is written once, by
 * the epilogue, so a residual that aliases the output (in place) is read
 * before it is overwritten, and geglu's 2H columns need no output space.
 *
 * Threads: the work is (column chunk, row tile) pairs numbered chunk-major;
 * each thread takes a contiguous balanced range (kg_split), so the split
 * is even to one tile whatever the thread count, and a thread packs each
 * chunk it touches once (chunks are equal widths so pairs weigh the same).
 * Small M gets narrower chunks so there are still enough pairs. */
#include "k_gemm.h"

#include <assert.h>
#include <string.h>

enum {
  MR = 6,             /* tile rows */
  NV = 2,             /* tile vectors (nr = NV·W columns) */
  UNROLL = 4,         /* k unroll of the micro-kernel */
  KC_MAX = 256,       /* k block: B micro-panel kc × nr × 4 = 32 KiB in L1 */
  MC_ROWS = 96,       /* row block: A block mc × kc in L2 */
  PANELS_MAX = 8,     /* column chunk: at most 8 panels (256 columns) */
  ITEMS_TARGET = 12,  /* (chunk, row tile) pairs wanted before chunks narrow */
  MAX_TILE = MR * NV,
};
/* Packed B (K × chunk, per thread) aims at this many bytes, L2 on the
 * machines we measured (Zen 5: 1 MiB); chunks are 2 panels at least. */
#define L2_BYTES ((int64_t)1 << 20)

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t rup(int64_t a, int64_t b) { return cdiv(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- small IR helpers (the shared ones are kgen.c's) ---- */
static LLVMValueRef gk_max(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, a, b, ""), a, b, "max");
}

static LLVMValueRef add(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(g->b, a, b, ""); }
static LLVMValueRef mul(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildNSWMul(g->b, a, kg_i64(g, c), ""); }

/* ---- activations ---- */
/* The shared epilogue math of kgen.h, so a fused conv/linear + act gives the
 * same bits as the unfused SILU/GELU/QUICK_GELU/GELU_TANH kernels would on the same sums. */
static LLVMValueRef act(dc_kgen *g, dc_act a, LLVMValueRef y) {
  if (a == ACT_SILU) return kg_silu(g, y);
  if (a == ACT_GELU) return kg_gelu(g, y);
  if (a == ACT_QUICK_GELU) return kg_quick_gelu(g, y);
  if (a == ACT_GELU_TANH) return kg_gelu_tanh(g, y);
  return y;
}

/* ---- planning ---- */
void gemm_bcast_strides(const dc_type *out, const dc_type *res, int64_t *str) {
  int64_t s = 1;
  for (int d = out->rank - 1; d >= 0; d--) {
    int rd = d - (out->rank - res->rank);
    int64_t len = rd >= 0 ? res->dims[rd] : 1;
    str[d] = len == 1 ? 0 : s;
    s *= len;
  }
}

int gemm_bind_epilogue(dc_kgen *g, gemm *gm, int64_t *res_str) {
  const dc_node *n = g->n;
  gm->act = (dc_act)dc_node_int(n, "act");
  gm->out = kg_buf(g, 0);
  gm->ldc = gm->ncols;
  gm->has_bias = dc_node_int(n, "bias") != 0;
  if (gm->has_bias) gm->bias_dtype = kg_type(g, 3)->dtype, gm->bias = kg_buf_typed(g, 3, gm->bias_dtype);
  gm->has_res = dc_node_int(n, "residual") != 0;
  if (!gm->has_res) return 0;
  gemm_bcast_strides(kg_type(g, 0), kg_type(g, 3 + gm->has_bias), res_str);
  gm->resp = kg_buf(g, 3 + gm->has_bias);
  int gate = dc_node_gate_slot(n); /* bufs are the output, then the inputs */
  gm->has_gate = gate >= 0;
  if (gm->has_gate) {
    gm->gate = kg_buf(g, gate + 1);
    gm->gate_rows = kg_type(g, 0)->dims[1];
    gm->gate_ld = kg_type(g, gate + 1)->dims[1];
    gm->gate_at = dc_node_int(n, "gate_at");
  }
  return 1;
}

dc_status *gemm_need_f32(dc_kgen *g) {
  int params = 1 + (int)dc_node_int(g->n, "bias"); /* weight and bias may be stored in any dtype */
  for (int i = 0; i <= g->n->ninputs; i++)
    if (kg_type(g, i)->dtype != DT_F32 && !(i >= 2 && i <= 1 + params))
      return dc_error(DC_ERR_UNSUPPORTED, "%s: the LLVM kernel takes f32 operands; operand %d is %s",
                      dc_op_get(g->n->op)->name, i, dc_dtype_name(kg_type(g, i)->dtype));
  return NULL;
}

/* The thread's scratch: packed B, then the partial sums of a row block
 * (several k blocks), then kc zeros (arow-addressed A). */
static int64_t bfloats(const gemm *gm) { return gm->k * gm->ppc * gm->nr; }
static int64_t cfloats(const gemm *gm) { return gm->nkb > 1 ? gm->mc * gm->ppc * gm->nr : 0; }
static int64_t zfloats(const dc_kgen *g, const gemm *gm) { return gm->arow ? rup(gm->kc, g->vw) : 0; }

/* The register tile.  Live across the k loop: mr·nv accumulators, the k
 * step's nv B vectors and one broadcast A value (and, without FMA on SSE2,
 * the product before its add).  6 × 2 vectors fills AVX2's 16 and keeps 12
 * FMAs in flight (2 FMA ports × 4 cycles latency need 8).  With AVX-512's 32
 * registers a taller tile would fit, but 6 × 2 already has 8 loads per 12
 * FMAs, under the 2-3 load ports per 2 FMA ports, and nv = 2 keeps the
 * kc × nr B micro-panel at 32 KiB, in L1 (geglu needs nv even). */
static void choose_tile(const dc_kgen *g, gemm *gm) {
  gm->mr = MR;
  gm->nv = NV;
  /* vector registers: 32 with AVX-512 (zmm0-31), 16 with AVX2 and SSE2 */
  assert(gm->mr * gm->nv + gm->nv + 1 + (g->vw == 4) <= (g->vw == 16 ? 32 : 16));
}

void gemm_tile_shape(const dc_kgen *g, gemm *gm) {
  choose_tile(g, gm);
  gm->nr = gm->nv * g->vw;
  gm->nro = gm->geglu ? gm->nr / 2 : gm->nr;
  gm->u = UNROLL;
}

void gemm_plan(dc_kgen *g, gemm *gm) {
  gemm_tile_shape(g, gm);
  if (gm->kseg > 0 && gm->kseg < gm->k) {
    /* bps blocks per segment, the last one shorter; kc rounded up to the
     * unroll only while the segment's last block keeps some k */
    gm->bps = cdiv(gm->kseg, KC_MAX);
    gm->kc = cdiv(gm->kseg, gm->bps);
    if ((gm->bps - 1) * rup(gm->kc, gm->u) < gm->kseg) gm->kc = rup(gm->kc, gm->u);
    gm->nkb = gm->k / gm->kseg * gm->bps;
  } else {
    gm->kseg = 0;
    gm->nkb = gm->k > KC_MAX ? cdiv(gm->k, KC_MAX) : 1;
    gm->kc = rup(gm->k > 0 ? cdiv(gm->k, gm->nkb) : 1, gm->u);
    gm->bps = gm->nkb;
  }
  gm->mc = rup(MC_ROWS, gm->mr);
  gm->nt = cdiv(gm->m, gm->mr);
  int64_t panels = cdiv(gm->ncols, gm->nro), pmax;
  if (panels == 0 || gm->m == 0 || gm->groups == 0) {
    gm->ppc = 1, gm->nbg = 0;
    g->scratch_bytes = 0;
    return;
  }
  /* packed B (k × chunk) of about L2's size: re-read once per row block */
  pmax = gm->k ? min64(PANELS_MAX, L2_BYTES / (gm->k * gm->nr * 4)) : PANELS_MAX;
  if (pmax < 2) pmax = 2;
  /* few row tiles (small M): narrower column chunks so every thread works */
  pmax = min64(pmax, cdiv(panels * gm->groups * gm->nt, ITEMS_TARGET));
  if (pmax < 1) pmax = 1;
  /* chunks of equal width: the thread split counts every chunk the same */
  gm->ppc = pmax;
  for (int64_t p = pmax, best = -1; p >= (pmax + 1) / 2; p--) {
    int64_t waste = cdiv(panels, p) * p - panels;
    if (best < 0 || waste < best) best = waste, gm->ppc = p;
  }
  gm->ppc = min64(gm->ppc, panels);
  gm->nbg = cdiv(panels, gm->ppc);
  g->scratch_bytes = (uint64_t)(bfloats(gm) + cfloats(gm) + zfloats(g, gm)) * 4;
}

/* ---- emission ---- */
/* Runtime values of the block being computed. */
typedef struct {
  LLVMValueRef grp, col0, ncols, ic, pc, kcur, jr, bfull, cp;
} blk;

/* acc += A[rows, k0..k1) · B[k0..k1, panel], unroll k steps per trip; k1 - k0
 * is a multiple of unroll. */
static void kloop(dc_kgen *g, const gemm *gm, int mr, LLVMValueRef *arow, LLVMValueRef bp, LLVMValueRef k0,
                  LLVMValueRef k1, int unroll, LLVMValueRef *acc) {
  int nacc = mr * gm->nv;
  LLVMBasicBlockRef pre = LLVMGetInsertBlock(g->b);
  LLVMBasicBlockRef head = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "k");
  LLVMBasicBlockRef body = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "kbody");
  LLVMBasicBlockRef exit = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "kdone");
  LLVMBuildBr(g->b, head);
  LLVMPositionBuilderAtEnd(g->b, head);
  LLVMValueRef k = LLVMBuildPhi(g->b, g->i64, "k"), phi[MAX_TILE], cur[MAX_TILE];
  LLVMAddIncoming(k, &k0, &pre, 1);
  for (int i = 0; i < nacc; i++) {
    phi[i] = LLVMBuildPhi(g->b, g->vf32, "acc");
    LLVMAddIncoming(phi[i], &acc[i], &pre, 1);
    cur[i] = phi[i];
  }
  LLVMBuildCondBr(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, k, k1, ""), body, exit);
  LLVMPositionBuilderAtEnd(g->b, body);
  for (int s = 0; s < unroll; s++) {
    LLVMValueRef kk = add(g, k, kg_i64(g, s)), bv[NV];
    LLVMValueRef bk = kg_gep(g, bp, mul(g, kk, gm->nr));
    for (int v = 0; v < gm->nv; v++) bv[v] = kg_vload(g, kg_gep(g, bk, kg_i64(g, v * g->vw)));
    for (int i = 0; i < mr; i++) {
      LLVMValueRef as = kg_splat(g, kg_load_f32_from(g, gm->a_dtype, arow[i], kk));
      for (int v = 0; v < gm->nv; v++) cur[i * gm->nv + v] = kg_fma(g, as, bv[v], cur[i * gm->nv + v]);
    }
  }
  LLVMValueRef next = add(g, k, kg_i64(g, unroll));
  LLVMBasicBlockRef latch = LLVMGetInsertBlock(g->b);
  LLVMBuildBr(g->b, head);
  LLVMAddIncoming(k, &next, &latch, 1);
  for (int i = 0; i < nacc; i++) LLVMAddIncoming(phi[i], &cur[i], &latch, 1);
  LLVMPositionBuilderAtEnd(g->b, exit);
  memcpy(acc, phi, sizeof(LLVMValueRef) * (size_t)nacc);
}

void gemm_kernel(dc_kgen *g, const gemm *gm, int mr, LLVMValueRef *arow, LLVMValueRef bp, LLVMValueRef kcur,
                 LLVMValueRef *acc) {
  LLVMValueRef kmain = LLVMBuildAnd(g->b, kcur, kg_i64(g, ~(int64_t)(gm->u - 1)), "");
  kloop(g, gm, mr, arow, bp, kg_i64(g, 0), kmain, gm->u, acc);
  if (gm->k % gm->u) kloop(g, gm, mr, arow, bp, kmain, kcur, 1, acc);
}

/* Offset of output row R's first element in the residual. */
static LLVMValueRef res_row(dc_kgen *g, const gemm_res *r, LLVMValueRef row) {
  int affine = 1;
  int64_t s = r->nrdims ? r->rstr[r->nrdims - 1] : 0, inner = 1;
  for (int d = r->nrdims - 1; d >= 0; d--) {
    affine &= r->rstr[d] == s * inner;
    inner *= r->rdims[d];
  }
  if (affine) return mul(g, row, s); /* full residual, or one row for all */
  LLVMValueRef off = kg_i64(g, 0), rem = row;
  for (int d = r->nrdims - 1; d >= 0; d--) {
    LLVMValueRef len = kg_i64(g, r->rdims[d]);
    if (r->rstr[d]) off = add(g, off, mul(g, LLVMBuildSRem(g->b, rem, len, ""), r->rstr[d]));
    rem = LLVMBuildSDiv(g->b, rem, len, "");
  }
  return off;
}

/* The residual's W values for output row R, columns col.. (masked). */
static LLVMValueRef res_load(dc_kgen *g, const gemm *gm, LLVMValueRef row, LLVMValueRef col, LLVMValueRef mask) {
  const gemm_res *r = &gm->res;
  LLVMValueRef base = kg_gep(g, gm->resp, res_row(g, r, row));
  int one_line = r->cw >= gm->ncols;
  if (r->cs_lo == 1 && (one_line || r->cs_hi == r->cw)) return gk_mload(g, kg_gep(g, base, col), mask);
  if (r->cs_lo == 0 && (one_line || r->cs_hi == 0)) return kg_splat(g, kg_load(g, base));
  LLVMValueRef c = LLVMBuildAdd(g->b, gk_isplat(g, col), gk_iota(g), ""), cw = gk_isplat(g, gk_i32(g, r->cw));
  LLVMValueRef hi = LLVMBuildMul(g->b, LLVMBuildSDiv(g->b, c, cw, ""), gk_isplat(g, gk_i32(g, r->cs_hi)), "");
  LLVMValueRef lo = LLVMBuildMul(g->b, LLVMBuildSRem(g->b, c, cw, ""), gk_isplat(g, gk_i32(g, r->cs_lo)), "");
  return gk_gather(g, base, LLVMBuildAdd(g->b, hi, lo, ""), mask);
}

/* Row R's gate: its sample's chunk of mod. */
static LLVMValueRef gate_row(dc_kgen *g, const gemm *gm, LLVMValueRef row) {
  LLVMValueRef sample = LLVMBuildSDiv(g->b, row, kg_i64(g, gm->gate_rows), "sample");
  return kg_gep(g, gm->gate, add(g, mul(g, sample, gm->gate_ld), kg_i64(g, gm->gate_at)));
}

/* The residual added to o, or with a gate res + gate · o: the product
 * rounded, then the add (two IEEE operations, as gated_add's kernel). */
static LLVMValueRef add_residual(dc_kgen *g, const gemm *gm, LLVMValueRef grow, LLVMValueRef row, LLVMValueRef col,
                                 LLVMValueRef mask, LLVMValueRef o) {
  LLVMValueRef r = res_load(g, gm, row, col, mask);
  if (!gm->has_gate) return LLVMBuildFAdd(g->b, o, r, "");
  LLVMValueRef prod = LLVMBuildFMul(g->b, gk_mload(g, kg_gep(g, grow, col), mask), o, "gated");
  return LLVMBuildFAdd(g->b, r, prod, "");
}

/* The tile's last k block: bias, act (or geglu), residual, masked store. */
static void epilogue(dc_kgen *g, const gemm *gm, const blk *b, int mr, LLVMValueRef row0, LLVMValueRef *acc) {
  int nvo = gm->geglu ? gm->nv / 2 : gm->nv;
  LLVMValueRef colbase = add(g, b->col0, mul(g, b->jr, gm->nro)), col[NV], mask[NV], bv[NV];
  for (int v = 0; v < nvo; v++) {
    col[v] = add(g, colbase, kg_i64(g, v * g->vw));
    mask[v] = gk_lanes_below(g, col[v], kg_i64(g, gm->ncols));
  }
  for (int v = 0; gm->has_bias && gm->bias_per_col && v < gm->nv; v++) {
    LLVMValueRef gcol = v < nvo ? col[v] : add(g, col[v - nvo], kg_i64(g, gm->geglu_h));
    bv[v] = gm->bias_dtype == DT_F32
                ? gk_mload(g, kg_gep(g, gm->bias, gcol), mask[v % nvo])
                : kg_gather_f32_from(g, gm->bias_dtype, kg_gep_t(g, kg_elem_type(g, gm->bias_dtype), gm->bias, gcol),
                                     gk_iota(g), mask[v % nvo]);
  }
  for (int i = 0; i < mr; i++) {
    LLVMValueRef r = add(g, row0, kg_i64(g, i)), y[NV];
    LLVMValueRef orow = add(g, mul(g, b->grp, gm->m), r);
    LLVMValueRef grow = gm->has_gate ? gate_row(g, gm, orow) : NULL;
    for (int v = 0; v < gm->nv; v++) {
      y[v] = acc[i * gm->nv + v];
      if (!gm->has_bias) continue;
      LLVMValueRef bias = gm->bias_per_col ? bv[v] : kg_splat(g, kg_load_f32_from(g, gm->bias_dtype, gm->bias, r));
      y[v] = LLVMBuildFAdd(g->b, y[v], bias, "");
    }
    for (int v = 0; v < nvo; v++) {
      LLVMValueRef o = gm->geglu ? LLVMBuildFMul(g->b, y[v], kg_gelu(g, y[v + nvo]), "geglu") : act(g, gm->act, y[v]);
      if (gm->has_res) o = add_residual(g, gm, grow, orow, col[v], mask[v], o);
      gk_mstore(g, o, kg_gep(g, gm->out, add(g, mul(g, orow, gm->ldc), col[v])), mask[v]);
    }
  }
}

/* Partial sums of tile rows row0.. in the thread's C block. */
static LLVMValueRef cp_at(dc_kgen *g, const gemm *gm, const blk *b, LLVMValueRef row0, int i, int v) {
  LLVMValueRef r = add(g, LLVMBuildNSWSub(g->b, row0, b->ic, ""), kg_i64(g, i));
  LLVMValueRef off = add(g, mul(g, r, gm->ppc * gm->nr), add(g, mul(g, b->jr, gm->nr), kg_i64(g, v * g->vw)));
  return kg_gep(g, b->cp, off);
}

/* One mr × nr tile at rows row0.., panel b->jr, k block b->pc. */
static void tile(dc_kgen *g, const gemm *gm, const blk *b, int mr, LLVMValueRef row0) {
  LLVMValueRef acc[MAX_TILE], arow[MAX_TILE];
  int nacc = mr * gm->nv;
  LLVMValueRef first = gm->nkb > 1 ? LLVMBuildICmp(g->b, LLVMIntEQ, b->pc, kg_i64(g, 0), "") : NULL;
  for (int i = 0; i < mr; i++) {
    LLVMValueRef r = add(g, row0, kg_i64(g, i));
    arow[i] = gm->arow ? gm->arow(g, gm, r, b->pc)
                       : kg_gep_t(g, kg_elem_type(g, gm->a_dtype), gm->a, add(g, mul(g, r, gm->lda), b->pc));
    for (int v = 0; v < gm->nv; v++) {
      LLVMValueRef zero = LLVMConstNull(g->vf32);
      /* select, not a branch: the scratch load is harmless when unused */
      acc[i * gm->nv + v] = first ? LLVMBuildSelect(g->b, first, zero, kg_vload(g, cp_at(g, gm, b, row0, i, v)), "")
                                  : zero;
    }
  }
  LLVMValueRef bp = kg_gep(g, b->bfull, mul(g, add(g, mul(g, b->jr, gm->k), b->pc), gm->nr));
  gemm_kernel(g, gm, mr, arow, bp, b->kcur, acc);
  if (gm->nkb == 1) {
    epilogue(g, gm, b, mr, row0, acc);
    return;
  }
  LLVMValueRef last = LLVMBuildICmp(g->b, LLVMIntEQ, add(g, b->pc, b->kcur), kg_i64(g, gm->k), "last");
  LLVMBasicBlockRef ep = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "epilogue");
  LLVMBasicBlockRef keep = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "partial");
  LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "tiledone");
  LLVMBuildCondBr(g->b, last, ep, keep);
  LLVMPositionBuilderAtEnd(g->b, ep);
  epilogue(g, gm, b, mr, row0, acc);
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, keep);
  for (int i = 0; i < nacc; i++) kg_vstore(g, acc[i], cp_at(g, gm, b, row0, i / gm->nv, i % gm->nv));
  LLVMBuildBr(g->b, done);
  LLVMPositionBuilderAtEnd(g->b, done);
}

/* Rows [rlo, rhi) of the current column chunk, over all k. */
static void rows(dc_kgen *g, const gemm *gm, blk *b, LLVMValueRef rlo, LLVMValueRef rhi, LLVMValueRef npanels) {
  kg_loop ic, pc, jr, ir;
  kg_for(g, &ic, rlo, rhi, gm->mc, "ic");
  b->ic = ic.i;
  LLVMValueRef ie = gk_min(g, add(g, ic.i, kg_i64(g, gm->mc)), rhi);
  LLVMValueRef nfull = LLVMBuildSDiv(g->b, LLVMBuildNSWSub(g->b, ie, ic.i, ""), kg_i64(g, gm->mr), "");
  LLVMValueRef ifull = add(g, ic.i, mul(g, nfull, gm->mr));
  if (gm->kseg) { /* block kb: segment kb / bps, its (kb % bps)-th block */
    kg_for(g, &pc, kg_i64(g, 0), kg_i64(g, gm->nkb), 1, "kb");
    LLVMValueRef in_seg = mul(g, LLVMBuildSRem(g->b, pc.i, kg_i64(g, gm->bps), ""), gm->kc);
    b->pc = add(g, mul(g, LLVMBuildSDiv(g->b, pc.i, kg_i64(g, gm->bps), ""), gm->kseg), in_seg);
    b->kcur = gk_min(g, kg_i64(g, gm->kc), LLVMBuildNSWSub(g->b, kg_i64(g, gm->kseg), in_seg, ""));
  } else {
    if (gm->nkb > 1) {
      kg_for(g, &pc, kg_i64(g, 0), kg_i64(g, gm->k), gm->kc, "pc");
      b->pc = pc.i;
    } else {
      b->pc = kg_i64(g, 0);
    }
    b->kcur = gk_min(g, kg_i64(g, gm->kc), LLVMBuildNSWSub(g->b, kg_i64(g, gm->k), b->pc, ""));
  }
  kg_for(g, &jr, kg_i64(g, 0), npanels, 1, "jr");
  b->jr = jr.i;
  kg_for(g, &ir, ic.i, ifull, gm->mr, "ir");
  tile(g, gm, b, gm->mr, ir.i);
  kg_end(g, &ir);
  if (gm->m % gm->mr) { /* only the chunk holding row m-1 has a short tile */
    kg_cond c;
    kg_if(g, &c, LLVMBuildICmp(g->b, LLVMIntSLT, ifull, ie, ""));
    tile(g, gm, b, (int)(gm->m % gm->mr), ifull);
    kg_endif(g, &c);
  }
  kg_end(g, &jr);
  if (gm->nkb > 1) kg_end(g, &pc);
  kg_end(g, &ic);
}

void gemm_emit(dc_kgen *g, gemm *gm) {
  int64_t nt = gm->nt, items = gm->groups * gm->nbg * nt;
  if (items == 0) return;
  blk b;
  b.bfull = kg_scratch(g);
  b.cp = kg_gep(g, b.bfull, kg_i64(g, bfloats(gm)));
  if (gm->arow) { /* scratch is not zeroed for us */
    gm->azero = kg_gep(g, b.cp, kg_i64(g, cfloats(gm)));
    for (int64_t i = 0; i < zfloats(g, gm); i += g->vw)
      kg_vstore(g, LLVMConstNull(g->vf32), kg_gep(g, gm->azero, kg_i64(g, i)));
  }
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, items), &lo, &hi);
  /* the column chunks [lo, hi) touches, and its row tiles in each */
  kg_loop c;
  LLVMValueRef clo = LLVMBuildSDiv(g->b, lo, kg_i64(g, nt), "");
  LLVMValueRef chi = LLVMBuildSDiv(g->b, add(g, hi, kg_i64(g, nt - 1)), kg_i64(g, nt), "");
  kg_for(g, &c, clo, chi, 1, "chunk");
  LLVMValueRef first = mul(g, c.i, nt);
  LLVMValueRef tlo = LLVMBuildNSWSub(g->b, gk_max(g, lo, first), first, "");
  LLVMValueRef thi = LLVMBuildNSWSub(g->b, gk_min(g, hi, add(g, first, kg_i64(g, nt))), first, "");
  kg_cond some;
  kg_if(g, &some, LLVMBuildICmp(g->b, LLVMIntSLT, tlo, thi, ""));
  b.grp = LLVMBuildSDiv(g->b, c.i, kg_i64(g, gm->nbg), "grp");
  b.col0 = mul(g, LLVMBuildSRem(g->b, c.i, kg_i64(g, gm->nbg), ""), gm->ppc * gm->nro);
  b.ncols = gk_min(g, kg_i64(g, gm->ppc * gm->nro), LLVMBuildNSWSub(g->b, kg_i64(g, gm->ncols), b.col0, ""));
  gm->pack(g, gm, b.bfull, b.grp, b.col0, b.ncols);
  LLVMValueRef rlo = mul(g, tlo, gm->mr), rhi = gk_min(g, mul(g, thi, gm->mr), kg_i64(g, gm->m));
  LLVMValueRef npanels = LLVMBuildSDiv(g->b, add(g, b.ncols, kg_i64(g, gm->nro - 1)), kg_i64(g, gm->nro), "");
  rows(g, gm, &b, rlo, rhi, npanels);
  kg_endif(g, &some);
  kg_end(g, &c);
}
