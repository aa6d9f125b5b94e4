/* k_winograd.c — conv2d 3×3 stride 1 by Winograd F(2×2, 3×3), NCHW and NHWC:
 * each 2×2 output tile costs 16 multiplies per (input, output) channel pair
 * instead of 36, 2.25× fewer, for a few adds per tile and channel.
 *
 * Per 2×2 output tile t with 4×4 input patch d (rows 2ty - pad_t .., cols
 * 2tx - pad_l ..), channel c and output channel o (Lavin & Gray 2015):
 *     V[ξ][c][t] = (Bᵀ d B)[ξ]        input transform, ξ = (r, s) < 16
 *     U[ξ][o][c] = (G g G ᵀ)[ξ]      weight transform of g = w[o][c]
 *     M[ξ][o][t] = sum_c U[ξ][o][c] · V[ξ][c][t]   16 GEMMs
 *     y[o][tile] = Aᵀ M[·][o][t] A    output transform, then the epilogue
 * The 16 GEMMs run on the shared micro-kernel (k_gemm.h: A = U broadcast
 * from its rows, B = V in packed [c][nr] panels), so vectors run along
 * tiles: a vector holds W tiles of one tile row (ntx tiles, rounded up to
 * whole vectors; the lanes past the row are computed and never stored), and
 * its input loads are two contiguous masked loads per patch row, split into
 * even and odd columns by shuffles.
 *
 * Memory: nothing beyond the thread's scratch (g->scratch_bytes, at most
 * about 5.5 MiB: U_BYTES + V_BYTES + M), which holds, in floats,
 *     U  16 × mb × ldu       the weights of one block of mb output channels (ldu: C rounded up to W)
 *     V  16 × ppc × C × nr   the transformed input of one chunk of tiles
 *     M  16 × mb × ppc·nr    the GEMM results (and partial sums across k blocks)
 * (NHWC: U 16 × ppc × C × nr, V 16 × mb × ldv, M the same.)
 * Work items are (output-channel block, image, tile chunk), numbered block-
 * major, and each thread takes a contiguous balanced range (kg_split): it
 * transforms the weights of each block it touches once per call (so the
 * weights of the whole conv are transformed about once per call, in
 * total), then for each of its items transforms the chunk's input, runs
 * the GEMMs and writes the output tiles straight to the output, bias, act
 * and residual fused.  The output is written once, after its residual is
 * read, so a residual that is the output buffer (in place) is fine.
 *
 * NHWC (layout nhwc) swaps the GEMM operands so that vectors run along
 * channels, as conv2d_nhwc's do: see the NHWC section below.
 *
 * conv3d with 3×3 taps in H and W at stride 1 is the same computation: an
 * output frame (b, ot) is an image, and the (c, kt) pairs are its channels
 * (input plane (b, c, ot·stride_t + kt)), in the order w[O][C][kt][3][3]
 * already stores them, so U is read from the weight as it is and only the
 * input's and output's plane addresses differ (wino.kt > 0).
 *
 * The weights are transformed here, per call, rather than stored: that
 * keeps the plan, its weight files and every memory figure as they are,
 * works the same for offloaded weights (read from their upload slot) and
 * weights stored in bf16/f16/fp8 (decoded by the same kg_*_f32_from as the
 * direct path, then transformed in f32).  It costs about 5 ns per (o, c)
 * pair at 8 lanes (1.5 ms for a 512×512 weight: measured on a 4×4 image with
 * and without it), a few percent of a 32² conv, under 1% of the SD VAE
 * decode; the tile threshold below keeps it from dominating small images.
 *
 * Exactness: the transforms' coefficients are 0, ±1 and ½, so U, V and the
 * output transform add a few roundings per value; errors stay within a few
 * times the direct conv's (test_llvm_gemm measures both against the
 * reference). */
#include "k_gemm.h"

enum {
  MB_MAX = 96,        /* output channels per block: U block 16 × 96 × C */
  MB_MIN = 48,        /* fewer, and the input transform (once per block) stops paying */
  PPC_MAX = 4,        /* panels per tile chunk */
  KC_MAX = 256,       /* k block of the GEMMs, as k_gemm.c's: B micro-panel in L1 */
  ITEMS_TARGET = 12,  /* work items wanted before chunks narrow */
};
#define V_BYTES ((int64_t)1 << 20) /* the chunk's V aims at about L2 */
#define U_BYTES ((int64_t)4 << 20) /* the most U may take: blocks narrow for large C */

typedef struct {
  int64_t n, c, h, w, o, ho, wo, pt, pl;
  int64_t ntx, nty, nvr, nvec; /* tiles per row, tile rows, vectors per tile row, vectors per image */
  int64_t mb, nob, ppc, nch, kc, nkb, tcols; /* blocking; tcols = ppc·nr, M's row length */
  int64_t ldu;                               /* U's row length: C rounded up to whole vectors */
  LLVMValueRef x, wp, out, bias, res, u, v, m;
  int nhwc;      /* channels last: A = V (rows: tiles), B = U (columns: output channels) */
  LLVMValueRef a, b; /* the GEMMs' operands: NCHW A = U, B = V; NHWC A = V, B = U */
  int64_t lda;   /* A's row length (ldu or ldv) */
  int64_t rows;  /* A's rows in all: O (NCHW) or tiles per image (NHWC) */
  int64_t ldv;   /* NHWC: V's row length, C rounded up to W */
  dc_dtype wt, bt;
  int has_bias, has_res;
  dc_act act;
  int64_t rs[4]; /* residual strides against the output (0: broadcast) */
  gemm gm;       /* tile shape for gemm_kernel */
  /* conv3d (kt > 0; 0 for conv2d): n = B·T' images (output frames) and
   * c = C·kt channels; input frames t, the input's channels cin, output
   * frames to, the time stride st */
  int64_t kt, t, cin, to, st;
} wino;

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t rup(int64_t a, int64_t b) { return cdiv(a, b) * b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static LLVMValueRef i64v(dc_kgen *g, int64_t v) { return kg_i64(g, v); }
static LLVMValueRef add(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(g->b, a, b, ""); }
static LLVMValueRef sub(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWSub(g->b, a, b, ""); }
static LLVMValueRef mul(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildNSWMul(g->b, a, kg_i64(g, c), ""); }
static LLVMValueRef divc(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildSDiv(g->b, a, kg_i64(g, c), ""); }
static LLVMValueRef remc(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildSRem(g->b, a, kg_i64(g, c), ""); }
static LLVMValueRef fadd(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFAdd(g->b, a, b, ""); }
static LLVMValueRef fsub(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildFSub(g->b, a, b, ""); }
static LLVMValueRef vmax(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, a, b, ""), a, b, "max");
}
/* A pointer p + idx floats that may lie outside the buffer (a fully masked
 * access never touches it): a plain GEP, not inbounds. */
static LLVMValueRef gep_any(dc_kgen *g, LLVMValueRef p, LLVMValueRef idx) {
  return LLVMBuildGEP2(g->b, g->f32, p, &idx, 1, "");
}

/* shufflevector(a, b) picking lanes sel[0..W) of a ++ b. */
static LLVMValueRef shuffle(dc_kgen *g, LLVMValueRef a, LLVMValueRef b, const int *sel) {
  LLVMValueRef e[16];
  for (int i = 0; i < g->vw; i++) e[i] = gk_i32(g, sel[i]);
  return LLVMBuildShuffleVector(g->b, a, b, LLVMConstVector(e, (unsigned)g->vw), "");
}

/* Lanes `parity`, parity + 2, ... of the 2W floats lo ++ hi. */
static LLVMValueRef deinterleave(dc_kgen *g, LLVMValueRef lo, LLVMValueRef hi, int parity) {
  int sel[16];
  for (int i = 0; i < g->vw; i++) sel[i] = 2 * i + parity;
  return shuffle(g, lo, hi, sel);
}

/* The half `half` (0: lanes 0..W/2) of a0 b0 a1 b1 ...: two output columns per tile. */
static LLVMValueRef interleave(dc_kgen *g, LLVMValueRef a, LLVMValueRef b, int half) {
  int sel[16];
  for (int i = 0; i < g->vw; i++) sel[i] = (i & 1 ? g->vw : 0) + i / 2 + half * g->vw / 2;
  return shuffle(g, a, b, sel);
}

/* lanes first + iota in [0, len): an unsigned compare does both ends. */
static LLVMValueRef lanes_inside(dc_kgen *g, LLVMValueRef first, int64_t len) {
  LLVMValueRef lanes = LLVMBuildAdd(g->b, gk_isplat(g, first), gk_iota(g), "");
  return LLVMBuildICmp(g->b, LLVMIntULT, lanes, gk_isplat(g, gk_i32(g, len)), "inside");
}

static LLVMValueRef all_if(dc_kgen *g, LLVMValueRef mask, LLVMValueRef cond) {
  LLVMTypeRef t = LLVMTypeOf(mask);
  return LLVMBuildAnd(g->b, mask, LLVMBuildSelect(g->b, cond, LLVMConstAllOnes(t), LLVMConstNull(t), ""), "");
}

/* ---- transforms (on values: scalars' vectors, any lane count) ---- */
/* (G g)ᵀ-style 3 → 4: g0, (g0 + g1 + g2)/2, (g0 - g1 + g2)/2, g2. */
static void wt_1d(dc_kgen *g, LLVMValueRef g0, LLVMValueRef g1, LLVMValueRef g2, LLVMValueRef *t) {
  LLVMValueRef half = kg_vf32(g, 0.5), s = fadd(g, g0, g2);
  t[0] = g0;
  t[1] = LLVMBuildFMul(g->b, fadd(g, s, g1), half, "");
  t[2] = LLVMBuildFMul(g->b, fsub(g, s, g1), half, "");
  t[3] = g2;
}

/* Bᵀ d, 4 → 4: d0 - d2, d1 + d2, d2 - d1, d1 - d3. */
static void in_1d(dc_kgen *g, const LLVMValueRef *d, int stride, LLVMValueRef *t, int tstride) {
  t[0] = fsub(g, d[0], d[2 * stride]);
  t[tstride] = fadd(g, d[stride], d[2 * stride]);
  t[2 * tstride] = fsub(g, d[2 * stride], d[stride]);
  t[3 * tstride] = fsub(g, d[stride], d[3 * stride]);
}

/* Aᵀ m, 4 → 2: m0 + m1 + m2, m1 - m2 - m3. */
static void out_1d(dc_kgen *g, const LLVMValueRef *m, int stride, LLVMValueRef *y, int ystride) {
  y[0] = fadd(g, fadd(g, m[0], m[stride]), m[2 * stride]);
  y[ystride] = fsub(g, fsub(g, m[stride], m[2 * stride]), m[3 * stride]);
}

/* ---- planning ---- */
/* The most output channels per block: MB_MAX, fewer where U would pass
 * U_BYTES (C above about 680), whole tiles, at least one tile. */
static int64_t mb_cap(const dc_kgen *g, int64_t c, int mr) {
  int64_t cap = min64(MB_MAX, U_BYTES / (16 * rup(c, g->vw) * 4)) / mr * mr;
  return max64(cap, mr);
}

static void plan(dc_kgen *g, wino *wn) {
  gemm_tile_shape(g, &wn->gm);
  const gemm *gm = &wn->gm;
  wn->ntx = cdiv(wn->wo, 2), wn->nty = cdiv(wn->ho, 2);
  wn->nvr = cdiv(wn->ntx, g->vw);
  wn->nvec = wn->nty * wn->nvr;
  /* output-channel blocks of equal size (whole tiles), at most mb_cap */
  wn->nob = cdiv(wn->o, mb_cap(g, wn->c, gm->mr));
  wn->mb = rup(cdiv(wn->o, wn->nob), gm->mr);
  wn->nob = cdiv(wn->o, wn->mb);
  /* chunks: V about V_BYTES, and enough items for the threads */
  int64_t panels = cdiv(wn->nvec, gm->nv);
  int64_t ppc = max64(1, min64(PPC_MAX, V_BYTES / (16 * wn->c * gm->nr * 4)));
  ppc = min64(ppc, max64(1, panels * wn->n * wn->nob / ITEMS_TARGET));
  wn->ppc = min64(ppc, panels);
  wn->nch = cdiv(panels, wn->ppc);
  wn->tcols = wn->ppc * gm->nr;
  wn->nkb = cdiv(wn->c, KC_MAX);
  wn->kc = rup(cdiv(wn->c, wn->nkb), gm->u);
  wn->gm.k = wn->c;
  wn->gm.a_dtype = DT_F32;
  wn->ldu = rup(wn->c, g->vw);
  g->scratch_bytes = (uint64_t)(16 * (wn->mb * wn->ldu + wn->ppc * wn->c * gm->nr + wn->mb * wn->tcols)) * 4;
}

/* ---- emission ---- */
/* W lanes of U from the 9 taps of W weights g = w[o][c] (lanes along c for
 * NCHW, along o for NHWC), decoded from the stored dtype and transformed in
 * f32: lane l reads element (idx + l)·ls + tap·ts of base, and U[ξ] goes to
 * dst + ξ·xs.  Each lane is a plain load at a constant offset (a gather
 * would be scalarized with address arithmetic on targets without fast
 * gathers); tail: lanes past limit repeat index limit-1 and land in U's
 * padding, so the stores need no mask. */
static void weights_at(dc_kgen *g, const wino *wn, LLVMValueRef base, LLVMValueRef idx, int64_t limit, int64_t ls,
                       int64_t ts, LLVMValueRef dst, int64_t xs, int tail) {
  LLVMValueRef k[9], t[12], u[16];
  for (int tap = 0; tap < 9; tap++) {
    k[tap] = LLVMGetUndef(g->vf32);
    for (int l = 0; l < g->vw; l++) {
      LLVMValueRef e = add(g, idx, i64v(g, l));
      if (tail) e = gk_min(g, e, i64v(g, limit - 1));
      LLVMValueRef v = kg_load_f32_from(g, wn->wt, base, add(g, mul(g, e, ls), i64v(g, tap * ts)));
      k[tap] = LLVMBuildInsertElement(g->b, k[tap], v, gk_i32(g, l), "");
    }
  }
  for (int col = 0; col < 3; col++) { /* along ky: t[r·3 + col] */
    LLVMValueRef tr[4];
    wt_1d(g, k[col], k[3 + col], k[6 + col], tr);
    for (int r = 0; r < 4; r++) t[r * 3 + col] = tr[r];
  }
  for (int r = 0; r < 4; r++) wt_1d(g, t[r * 3], t[r * 3 + 1], t[r * 3 + 2], &u[r * 4]); /* along kx */
  for (int xi = 0; xi < 16; xi++) kg_vstore(g, u[xi], kg_gep(g, dst, i64v(g, xi * xs)));
}

/* U for output channels [r0, r1): whole vectors of channels, then the tail. */
static void emit_weights(dc_kgen *g, const wino *wn, LLVMValueRef r0, LLVMValueRef r1) {
  LLVMTypeRef et = kg_elem_type(g, wn->wt);
  int64_t cfull = wn->c / g->vw * g->vw;
  kg_loop o, c;
  kg_for(g, &o, r0, r1, 1, "wo");
  LLVMValueRef urow = kg_gep(g, wn->u, mul(g, sub(g, o.i, r0), wn->ldu));
  LLVMValueRef base = kg_gep_t(g, et, wn->wp, mul(g, o.i, wn->c * 9));
  const int64_t xs = wn->mb * wn->ldu;
  kg_for(g, &c, i64v(g, 0), i64v(g, cfull), g->vw, "wc");
  weights_at(g, wn, base, c.i, wn->c, 9, 1, kg_gep(g, urow, c.i), xs, 0);
  kg_end(g, &c);
  if (cfull < wn->c) weights_at(g, wn, base, i64v(g, cfull), wn->c, 9, 1, kg_gep(g, urow, i64v(g, cfull)), xs, 1);
  kg_end(g, &o);
}

/* Tile row and first tile column of vector q of an image. */
static void vec_pos(dc_kgen *g, const wino *wn, LLVMValueRef q, LLVMValueRef *ty, LLVMValueRef *tx0) {
  *ty = divc(g, q, wn->nvr);
  *tx0 = mul(g, remc(g, q, wn->nvr), g->vw);
}

/* conv3d: the first input plane of image img = (b, ot), channel 0 at frame
 * ot·st; conv2d: image img. */
static LLVMValueRef image_input(dc_kgen *g, const wino *wn, LLVMValueRef img) {
  const int64_t plane = wn->h * wn->w;
  if (!wn->kt) return kg_gep(g, wn->x, mul(g, img, wn->c * plane));
  LLVMValueRef b = divc(g, img, wn->to), ot = remc(g, img, wn->to);
  return kg_gep(g, wn->x, mul(g, add(g, mul(g, b, wn->cin * wn->t), mul(g, ot, wn->st)), plane));
}

/* Channel c's plane of an image: conv3d's channel c = (ci, kt) is frame kt
 * of input channel ci, counted from the image's first frame. */
static LLVMValueRef channel_input(dc_kgen *g, const wino *wn, LLVMValueRef ximg, LLVMValueRef c) {
  const int64_t plane = wn->h * wn->w;
  if (!wn->kt) return kg_gep(g, ximg, mul(g, c, plane));
  return kg_gep(g, ximg, mul(g, add(g, mul(g, divc(g, c, wn->kt), wn->t), remc(g, c, wn->kt)), plane));
}

/* V[ξ][jr][c][v·W + lane] for the npanels panels of vectors q0.. of image n. */
static void emit_input(dc_kgen *g, const wino *wn, LLVMValueRef img, LLVMValueRef q0, LLVMValueRef npanels) {
  const int nv = wn->gm.nv, vw = g->vw;
  const int64_t nr = wn->gm.nr;
  LLVMValueRef ximg = image_input(g, wn, img);
  kg_loop jr;
  kg_for(g, &jr, i64v(g, 0), npanels, 1, "jr");
  for (int v = 0; v < nv; v++) {
    LLVMValueRef ty, tx0;
    vec_pos(g, wn, add(g, q0, add(g, mul(g, jr.i, nv), i64v(g, v))), &ty, &tx0);
    LLVMValueRef iy0 = sub(g, mul(g, ty, 2), i64v(g, wn->pt)), ix0 = sub(g, mul(g, tx0, 2), i64v(g, wn->pl));
    /* patch row r, column run k: the two loads of even/odd columns 0,1 (k
     * 0, 1) and 2,3 (k 2, 3), W lanes each; masks hoisted out of the c loop */
    static const int koff[4] = {0, 1, 0, 1}, kshift[4] = {0, 0, 2, 2};
    LLVMValueRef mask[4][4], off[4];
    for (int r = 0; r < 4; r++) {
      LLVMValueRef iy = add(g, iy0, i64v(g, r));
      LLVMValueRef rowok = LLVMBuildICmp(g->b, LLVMIntULT, iy, i64v(g, wn->h), "");
      off[r] = add(g, mul(g, iy, wn->w), ix0);
      for (int k = 0; k < 4; k++)
        mask[r][k] = all_if(g, lanes_inside(g, add(g, ix0, i64v(g, koff[k] * vw + kshift[k])), wn->w), rowok);
    }
    LLVMValueRef dst = kg_gep(g, wn->v, add(g, mul(g, jr.i, wn->c * nr), i64v(g, v * vw)));
    kg_loop c;
    kg_for(g, &c, i64v(g, 0), i64v(g, wn->c), 1, "c");
    LLVMValueRef xc = channel_input(g, wn, ximg, c.i), t[16], d[4], x[4], vv[16];
    for (int r = 0; r < 4; r++) {
      for (int k = 0; k < 4; k++)
        x[k] = gk_mload(g, gep_any(g, xc, add(g, off[r], i64v(g, koff[k] * vw + kshift[k]))), mask[r][k]);
      d[0] = deinterleave(g, x[0], x[1], 0), d[1] = deinterleave(g, x[0], x[1], 1);
      d[2] = deinterleave(g, x[2], x[3], 0), d[3] = deinterleave(g, x[2], x[3], 1);
      in_1d(g, d, 1, &t[r * 4], 1); /* along the row: t[r][s] */
    }
    for (int s = 0; s < 4; s++) in_1d(g, &t[s], 4, &vv[s], 4); /* along the column */
    LLVMValueRef dc = kg_gep(g, dst, mul(g, c.i, nr));
    for (int xi = 0; xi < 16; xi++) kg_vstore(g, vv[xi], kg_gep(g, dc, i64v(g, xi * wn->ppc * wn->c * nr)));
    kg_end(g, &c);
  }
  kg_end(g, &jr);
}

/* One mr-row tile of GEMM xi at rows ir.. (of block r0), panel jr, k block
 * pc: M[xi][rows][panel] (+)= A[xi][rows][pc..] · B[xi][jr][pc..], A the
 * block's transformed weights (NCHW) or input (NHWC) with mb rows per xi,
 * B the other one in packed panels, ppc per xi. */
static void gemm_tile(dc_kgen *g, const wino *wn, int mr, LLVMValueRef xi, LLVMValueRef r0, LLVMValueRef ir,
                      LLVMValueRef jr, LLVMValueRef pc, LLVMValueRef kcur) {
  const gemm *gm = &wn->gm;
  LLVMValueRef acc[12], arow[6], mp[12];
  LLVMValueRef first = wn->nkb > 1 ? LLVMBuildICmp(g->b, LLVMIntEQ, pc, i64v(g, 0), "") : NULL;
  LLVMValueRef row0 = add(g, mul(g, xi, wn->mb), sub(g, ir, r0));
  for (int i = 0; i < mr; i++) {
    LLVMValueRef row = add(g, row0, i64v(g, i));
    arow[i] = kg_gep(g, wn->a, add(g, mul(g, row, wn->lda), pc));
    for (int v = 0; v < gm->nv; v++) {
      int a = i * gm->nv + v;
      mp[a] = kg_gep(g, wn->m, add(g, mul(g, row, wn->tcols), add(g, mul(g, jr, gm->nr), i64v(g, v * g->vw))));
      acc[a] = first ? LLVMBuildSelect(g->b, first, LLVMConstNull(g->vf32), kg_vload(g, mp[a]), "")
                     : LLVMConstNull(g->vf32);
    }
  }
  LLVMValueRef bp = kg_gep(g, wn->b, mul(g, add(g, mul(g, add(g, mul(g, xi, wn->ppc), jr), wn->c), pc), gm->nr));
  gemm_kernel(g, gm, mr, arow, bp, kcur, acc);
  for (int a = 0; a < mr * gm->nv; a++) kg_vstore(g, acc[a], mp[a]);
}

/* The 16 GEMMs of A's rows [r0, r1) (output channels, or tiles) over npanels panels. */
static void emit_gemms(dc_kgen *g, const wino *wn, LLVMValueRef r0, LLVMValueRef r1, LLVMValueRef npanels) {
  const int mr = wn->gm.mr;
  kg_loop xi, pc, jr, ir;
  kg_for(g, &xi, i64v(g, 0), i64v(g, 16), 1, "xi");
  LLVMValueRef pcv = i64v(g, 0);
  if (wn->nkb > 1) kg_for(g, &pc, i64v(g, 0), i64v(g, wn->c), wn->kc, "pc"), pcv = pc.i;
  LLVMValueRef kcur = gk_min(g, i64v(g, wn->kc), sub(g, i64v(g, wn->c), pcv));
  LLVMValueRef ifull = add(g, r0, mul(g, divc(g, sub(g, r1, r0), mr), mr));
  kg_for(g, &jr, i64v(g, 0), npanels, 1, "jr");
  kg_for(g, &ir, r0, ifull, mr, "ir");
  gemm_tile(g, wn, mr, xi.i, r0, ir.i, jr.i, pcv, kcur);
  kg_end(g, &ir);
  if (wn->rows % mr) { /* blocks are whole tiles: only the last one has a short tile */
    kg_cond c;
    kg_if(g, &c, LLVMBuildICmp(g->b, LLVMIntSLT, ifull, r1, ""));
    gemm_tile(g, wn, (int)(wn->rows % mr), xi.i, r0, ifull, jr.i, pcv, kcur);
    kg_endif(g, &c);
  }
  kg_end(g, &jr);
  if (wn->nkb > 1) kg_end(g, &pc);
  kg_end(g, &xi);
}

/* The residual's values at output row (img, o, oy), columns ox.. (mask). */
static LLVMValueRef res_load(dc_kgen *g, const wino *wn, LLVMValueRef img, LLVMValueRef o, LLVMValueRef oy,
                             LLVMValueRef ox, LLVMValueRef mask) {
  LLVMValueRef oyc = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, oy, i64v(g, wn->ho), ""), oy,
                                     i64v(g, wn->ho - 1), ""); /* the odd last row: masked, kept in bounds */
  LLVMValueRef off = add(g, add(g, mul(g, img, wn->rs[0]), mul(g, o, wn->rs[1])), mul(g, oyc, wn->rs[2]));
  if (wn->rs[3] == 0) return kg_splat(g, kg_load(g, kg_gep(g, wn->res, off)));
  return gk_mload(g, gep_any(g, wn->res, add(g, off, ox)), mask);
}

/* Output channels [r0, r1), vectors q0 .. q0 + nq of image img: Aᵀ M A,
 * bias, act, residual, two output rows of 2W columns per vector. */
static void emit_output(dc_kgen *g, const wino *wn, LLVMValueRef img, LLVMValueRef q0, LLVMValueRef nq,
                        LLVMValueRef r0, LLVMValueRef r1) {
  kg_loop o, ql;
  kg_for(g, &o, r0, r1, 1, "oo");
  LLVMValueRef bias = wn->has_bias ? kg_splat(g, kg_load_f32_from(g, wn->bt, wn->bias, o.i)) : NULL;
  LLVMValueRef mrow = kg_gep(g, wn->m, mul(g, sub(g, o.i, r0), wn->tcols));
  /* conv3d: output frame ot of channel o of sample b, img = (b, ot) */
  LLVMValueRef plane_at = wn->kt ? add(g, mul(g, add(g, mul(g, divc(g, img, wn->to), wn->o), o.i), wn->to),
                                       remc(g, img, wn->to))
                                 : add(g, mul(g, img, wn->o), o.i);
  LLVMValueRef orow = kg_gep(g, wn->out, mul(g, plane_at, wn->ho * wn->wo));
  kg_for(g, &ql, i64v(g, 0), nq, 1, "ql");
  LLVMValueRef ty, tx0, m[16], a[8], y[4];
  vec_pos(g, wn, add(g, q0, ql.i), &ty, &tx0);
  for (int xi = 0; xi < 16; xi++)
    m[xi] = kg_vload(g, kg_gep(g, mrow, add(g, mul(g, ql.i, g->vw), i64v(g, xi * wn->mb * wn->tcols))));
  for (int r = 0; r < 4; r++) out_1d(g, &m[r * 4], 1, &a[r * 2], 1); /* along s: a[r][dx] */
  for (int dx = 0; dx < 2; dx++) out_1d(g, &a[dx], 2, &y[dx], 2);  /* along r: y[dy][dx] */
  LLVMValueRef ox0 = mul(g, tx0, 2);
  for (int dy = 0; dy < 2; dy++) {
    LLVMValueRef oy = add(g, mul(g, ty, 2), i64v(g, dy));
    LLVMValueRef rowok = LLVMBuildICmp(g->b, LLVMIntSLT, oy, i64v(g, wn->ho), "");
    LLVMValueRef yy[2];
    for (int dx = 0; dx < 2; dx++) {
      yy[dx] = y[dy * 2 + dx];
      if (bias) yy[dx] = fadd(g, yy[dx], bias);
      if (wn->act == ACT_SILU) yy[dx] = kg_silu(g, yy[dx]);
      if (wn->act == ACT_GELU) yy[dx] = kg_gelu(g, yy[dx]);
    }
    for (int half = 0; half < 2; half++) {
      LLVMValueRef ox = add(g, ox0, i64v(g, half * g->vw));
      LLVMValueRef mask = all_if(g, lanes_inside(g, ox, wn->wo), rowok), val = interleave(g, yy[0], yy[1], half);
      if (wn->has_res) val = fadd(g, val, res_load(g, wn, img, o.i, oy, ox, mask));
      gk_mstore(g, val, gep_any(g, orow, add(g, mul(g, oy, wn->wo), ox)), mask);
    }
  }
  kg_end(g, &ql);
  kg_end(g, &o);
}

static void emit(dc_kgen *g, wino *wn) {
  const int64_t per_block = wn->n * wn->nch, items = wn->nob * per_block, qpc = wn->ppc * wn->gm.nv;
  if (items == 0) return;
  LLVMValueRef s = kg_scratch(g);
  wn->u = s;
  wn->v = kg_gep(g, s, i64v(g, 16 * wn->mb * wn->ldu));
  wn->m = kg_gep(g, wn->v, i64v(g, 16 * wn->ppc * wn->c * wn->gm.nr));
  wn->a = wn->u, wn->b = wn->v, wn->lda = wn->ldu, wn->rows = wn->o;
  LLVMValueRef lo, hi;
  kg_split(g, i64v(g, items), &lo, &hi);
  /* the blocks [lo, hi) touches; none when it is empty (no weights to transform) */
  LLVMValueRef blo = divc(g, lo, per_block), bhi = divc(g, add(g, hi, i64v(g, per_block - 1)), per_block);
  bhi = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, lo, hi, ""), bhi, blo, "");
  kg_loop ob, it;
  kg_for(g, &ob, blo, bhi, 1, "ob");
  LLVMValueRef r0 = mul(g, ob.i, wn->mb), r1 = gk_min(g, add(g, r0, i64v(g, wn->mb)), i64v(g, wn->o));
  emit_weights(g, wn, r0, r1);
  LLVMValueRef first = mul(g, ob.i, per_block);
  LLVMValueRef ilo = vmax(g, lo, first), ihi = gk_min(g, hi, add(g, first, i64v(g, per_block)));
  kg_for(g, &it, ilo, ihi, 1, "item");
  LLVMValueRef img = remc(g, divc(g, it.i, wn->nch), wn->n), q0 = mul(g, remc(g, it.i, wn->nch), qpc);
  LLVMValueRef nq = gk_min(g, i64v(g, qpc), sub(g, i64v(g, wn->nvec), q0));
  LLVMValueRef npanels = divc(g, add(g, nq, i64v(g, wn->gm.nv - 1)), wn->gm.nv);
  emit_input(g, wn, img, q0, npanels);
  emit_gemms(g, wn, r0, r1, npanels);
  emit_output(g, wn, img, q0, nq, r0, r1);
  kg_end(g, &it);
  kg_end(g, &ob);
}

/* ---- NHWC ---- */
/* Channels last: x [N,H,W,C], w [O,3,3,C], out [N,H',W',O].  The roles of
 * the GEMM operands swap so that vectors run along channels, contiguous in
 * memory: A = V (rows: tiles, in blocks of mb per image; k = c), B = U in
 * packed panels of nr output channels (chunks of ppc panels), M[ξ][tile][o].
 * Work items are (output-channel chunk, image, tile block), chunk-major;
 * a thread transforms the weights of each chunk it touches once per call.
 * Loads and stores are whole channel vectors (masked at C and O), so any
 * image size and tile order is fine. */
static void plan_nhwc(dc_kgen *g, wino *wn) {
  gemm_tile_shape(g, &wn->gm);
  const gemm *gm = &wn->gm;
  wn->ntx = cdiv(wn->wo, 2), wn->nty = cdiv(wn->ho, 2);
  wn->rows = wn->nty * wn->ntx;
  wn->ldv = rup(wn->c, g->vw);
  int64_t panels = cdiv(wn->o, gm->nr);
  wn->ppc = min64(panels, max64(1, min64(PPC_MAX, U_BYTES / (16 * wn->c * gm->nr * 4))));
  wn->nob = cdiv(panels, wn->ppc); /* output-channel chunks */
  wn->tcols = wn->ppc * gm->nr;
  /* tile blocks: V about V_BYTES, equal sizes, enough items for the threads */
  int64_t mb = max64(gm->mr, min64(MB_MAX, V_BYTES / (16 * wn->ldv * 4)) / gm->mr * gm->mr);
  int64_t want = cdiv(ITEMS_TARGET, wn->n * wn->nob);
  mb = min64(mb, max64(gm->mr, rup(cdiv(wn->rows, want), gm->mr)));
  int64_t nb = cdiv(wn->rows, mb);
  wn->mb = rup(cdiv(wn->rows, nb), gm->mr);
  wn->nch = cdiv(wn->rows, wn->mb); /* tile blocks per image */
  wn->nkb = cdiv(wn->c, KC_MAX);
  wn->kc = rup(cdiv(wn->c, wn->nkb), gm->u);
  wn->gm.k = wn->c;
  wn->gm.a_dtype = DT_F32;
  g->scratch_bytes = (uint64_t)(16 * (wn->ppc * wn->c * gm->nr + wn->mb * wn->ldv + wn->mb * wn->tcols)) * 4;
}

/* U[ξ][p][c][lane] for the npanels panels of output channels o0..: W
 * output channels per vector, their taps C apart, channels 9·C apart. */
static void emit_weights_nhwc(dc_kgen *g, const wino *wn, LLVMValueRef o0, LLVMValueRef npanels) {
  const int64_t nr = wn->gm.nr, xs = wn->ppc * wn->c * nr;
  LLVMTypeRef et = kg_elem_type(g, wn->wt);
  kg_loop p, c;
  kg_for(g, &p, i64v(g, 0), npanels, 1, "wp");
  for (int v = 0; v < wn->gm.nv; v++) {
    LLVMValueRef ob = add(g, o0, add(g, mul(g, p.i, nr), i64v(g, v * g->vw)));
    LLVMValueRef dst = kg_gep(g, wn->u, add(g, mul(g, p.i, wn->c * nr), i64v(g, v * g->vw)));
    kg_for(g, &c, i64v(g, 0), i64v(g, wn->c), 1, "wc");
    weights_at(g, wn, kg_gep_t(g, et, wn->wp, c.i), ob, wn->o, 9 * wn->c, wn->c, kg_gep(g, dst, mul(g, c.i, nr)), xs, 1);
    kg_end(g, &c);
  }
  kg_end(g, &p);
}

/* Pixel (iy, ix) of image img inside the input, and its channel run's offset. */
static LLVMValueRef pixel_in(dc_kgen *g, const wino *wn, LLVMValueRef img, LLVMValueRef iy, LLVMValueRef ix,
                             LLVMValueRef *off) {
  *off = mul(g, add(g, mul(g, add(g, mul(g, img, wn->h), iy), wn->w), ix), wn->c);
  return LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntULT, iy, i64v(g, wn->h), ""),
                      LLVMBuildICmp(g->b, LLVMIntULT, ix, i64v(g, wn->w), ""), "inside");
}

/* V[ξ][t - t0][c] for the tiles [t0, t1) of image img. */
static void emit_input_nhwc(dc_kgen *g, const wino *wn, LLVMValueRef img, LLVMValueRef t0, LLVMValueRef t1) {
  kg_loop t, c;
  kg_for(g, &t, t0, t1, 1, "t");
  LLVMValueRef ty = divc(g, t.i, wn->ntx), tx = remc(g, t.i, wn->ntx), ok[16], off[16];
  for (int r = 0; r < 4; r++)
    for (int s2 = 0; s2 < 4; s2++) {
      LLVMValueRef iy = add(g, mul(g, ty, 2), i64v(g, r - wn->pt)), ix = add(g, mul(g, tx, 2), i64v(g, s2 - wn->pl));
      ok[r * 4 + s2] = pixel_in(g, wn, img, iy, ix, &off[r * 4 + s2]);
    }
  LLVMValueRef vrow = kg_gep(g, wn->v, mul(g, sub(g, t.i, t0), wn->ldv));
  kg_for(g, &c, i64v(g, 0), i64v(g, wn->ldv), g->vw, "c");
  LLVMValueRef cmask = gk_lanes_below(g, c.i, i64v(g, wn->c)), d[16], tt[16], vv[16];
  for (int k = 0; k < 16; k++)
    d[k] = gk_mload(g, gep_any(g, wn->x, add(g, off[k], c.i)), all_if(g, cmask, ok[k]));
  for (int r = 0; r < 4; r++) in_1d(g, &d[r * 4], 1, &tt[r * 4], 1); /* along the row */
  for (int s2 = 0; s2 < 4; s2++) in_1d(g, &tt[s2], 4, &vv[s2], 4);  /* along the column */
  for (int xi = 0; xi < 16; xi++) kg_vstore(g, vv[xi], kg_gep(g, vrow, add(g, c.i, i64v(g, xi * wn->mb * wn->ldv))));
  kg_end(g, &c);
  kg_end(g, &t);
}

/* The residual's W channels at pixel (oy, ox) of image img from channel oc. */
static LLVMValueRef res_load_nhwc(dc_kgen *g, const wino *wn, LLVMValueRef img, LLVMValueRef oy, LLVMValueRef ox,
                                  LLVMValueRef oc, LLVMValueRef mask) {
  /* the odd last row or column: masked, kept in bounds */
  oy = gk_min(g, oy, i64v(g, wn->ho - 1)), ox = gk_min(g, ox, i64v(g, wn->wo - 1));
  LLVMValueRef off = add(g, add(g, mul(g, img, wn->rs[0]), mul(g, oy, wn->rs[1])), mul(g, ox, wn->rs[2]));
  if (wn->rs[3] == 0) return kg_splat(g, kg_load(g, kg_gep(g, wn->res, off)));
  return gk_mload(g, gep_any(g, wn->res, add(g, off, oc)), mask);
}

/* Tiles [t0, t1) of image img, output channels o0 .. o0 + ncols: Aᵀ M A,
 * bias, act, residual, one channel vector of four pixels at a time. */
static void emit_output_nhwc(dc_kgen *g, const wino *wn, LLVMValueRef img, LLVMValueRef t0, LLVMValueRef t1,
                             LLVMValueRef o0, LLVMValueRef ncols) {
  kg_loop t, q;
  kg_for(g, &t, t0, t1, 1, "ot");
  LLVMValueRef ty = divc(g, t.i, wn->ntx), tx = remc(g, t.i, wn->ntx);
  LLVMValueRef mrow = kg_gep(g, wn->m, mul(g, sub(g, t.i, t0), wn->tcols));
  kg_for(g, &q, i64v(g, 0), ncols, g->vw, "oq");
  LLVMValueRef oc = add(g, o0, q.i), mask = gk_lanes_below(g, oc, i64v(g, wn->o)), m[16], a[8], y[4], bias = NULL;
  for (int xi = 0; xi < 16; xi++) m[xi] = kg_vload(g, kg_gep(g, mrow, add(g, q.i, i64v(g, xi * wn->mb * wn->tcols))));
  for (int r = 0; r < 4; r++) out_1d(g, &m[r * 4], 1, &a[r * 2], 1);
  for (int dx = 0; dx < 2; dx++) out_1d(g, &a[dx], 2, &y[dx], 2);
  if (wn->has_bias)
    bias = wn->bt == DT_F32 ? gk_mload(g, kg_gep(g, wn->bias, oc), mask)
                            : kg_gather_f32_from(g, wn->bt, kg_gep_t(g, kg_elem_type(g, wn->bt), wn->bias, oc),
                                                 gk_iota(g), mask);
  for (int k = 0; k < 4; k++) {
    LLVMValueRef oy = add(g, mul(g, ty, 2), i64v(g, k / 2)), ox = add(g, mul(g, tx, 2), i64v(g, k % 2));
    LLVMValueRef inside = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, oy, i64v(g, wn->ho), ""),
                                       LLVMBuildICmp(g->b, LLVMIntSLT, ox, i64v(g, wn->wo), ""), "");
    LLVMValueRef pm = all_if(g, mask, inside), val = y[k];
    if (bias) val = fadd(g, val, bias);
    if (wn->act == ACT_SILU) val = kg_silu(g, val);
    if (wn->act == ACT_GELU) val = kg_gelu(g, val);
    if (wn->has_res) val = fadd(g, val, res_load_nhwc(g, wn, img, oy, ox, oc, pm));
    LLVMValueRef off = add(g, mul(g, add(g, mul(g, add(g, mul(g, img, wn->ho), oy), wn->wo), ox), wn->o), oc);
    gk_mstore(g, val, gep_any(g, wn->out, off), pm);
  }
  kg_end(g, &q);
  kg_end(g, &t);
}

static void emit_nhwc(dc_kgen *g, wino *wn) {
  const int64_t per_chunk = wn->n * wn->nch, items = wn->nob * per_chunk, panels = cdiv(wn->o, wn->gm.nr);
  if (items == 0) return;
  LLVMValueRef s = kg_scratch(g);
  wn->u = s;
  wn->v = kg_gep(g, s, i64v(g, 16 * wn->ppc * wn->c * wn->gm.nr));
  wn->m = kg_gep(g, wn->v, i64v(g, 16 * wn->mb * wn->ldv));
  wn->a = wn->v, wn->b = wn->u, wn->lda = wn->ldv;
  LLVMValueRef lo, hi;
  kg_split(g, i64v(g, items), &lo, &hi);
  /* the chunks [lo, hi) touches; none when it is empty (no weights to transform) */
  LLVMValueRef clo = divc(g, lo, per_chunk), chi = divc(g, add(g, hi, i64v(g, per_chunk - 1)), per_chunk);
  chi = LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, lo, hi, ""), chi, clo, "");
  kg_loop ch, it;
  kg_for(g, &ch, clo, chi, 1, "chunk");
  LLVMValueRef o0 = mul(g, ch.i, wn->tcols);
  LLVMValueRef npanels = gk_min(g, i64v(g, wn->ppc), sub(g, i64v(g, panels), mul(g, ch.i, wn->ppc)));
  LLVMValueRef ncols = gk_min(g, i64v(g, wn->tcols), sub(g, i64v(g, wn->o), o0));
  emit_weights_nhwc(g, wn, o0, npanels);
  LLVMValueRef first = mul(g, ch.i, per_chunk);
  LLVMValueRef ilo = vmax(g, lo, first), ihi = gk_min(g, hi, add(g, first, i64v(g, per_chunk)));
  kg_for(g, &it, ilo, ihi, 1, "item");
  LLVMValueRef img = remc(g, divc(g, it.i, wn->nch), wn->n), t0 = mul(g, remc(g, it.i, wn->nch), wn->mb);
  LLVMValueRef t1 = gk_min(g, add(g, t0, i64v(g, wn->mb)), i64v(g, wn->rows));
  emit_input_nhwc(g, wn, img, t0, t1);
  emit_gemms(g, wn, t0, t1, npanels);
  emit_output_nhwc(g, wn, img, t0, t1, o0, ncols);
  kg_end(g, &it);
  kg_end(g, &ch);
}

/* ---- when ---- */
/* Where the path pays, measured on one thread of a Xeon at 8 and 16 lanes
 * (bench/bench_kernels winograd; thread CPU time, the machine was
 * shared): 1.6-2× the direct conv's speed from C = 8 up to 1280 once a tile
 * row fills a vector (512→512 at 32², 640→640 at 32², 320→320 at 64², and
 * 128→3 at 128²); no gain with C = 4 (even) or below 64 tiles per image
 * (512→512 at 12² even at 8 lanes, 2× slower at 8², where the weight
 * transform is not amortized); slower when under 3/4 of the lanes hold
 * tiles (a 16² output at 16 lanes: 8 tiles per row in 16 lanes). */
enum { MIN_C = 8, MIN_TILES = 64 };

/* Whether an NCHW 3×3 stride-1 conv of c channels (conv3d: C·kt) into o
 * channels of ho × wo pays on Winograd (the thresholds above). */
static int nchw_pays(const dc_kgen *g, int64_t c, int64_t o, int64_t ho, int64_t wo) {
  int64_t ntx = cdiv(wo, 2), nty = cdiv(ho, 2);
  if (c < MIN_C || ntx * nty < MIN_TILES) return 0;
  gemm gm = {0};
  gemm_tile_shape(g, &gm);
  if (mb_cap(g, c, gm.mr) < MB_MIN && o > MB_MIN) return 0; /* C past about 1360 */
  return 4 * ntx >= 3 * rup(ntx, g->vw); /* lanes holding tiles, of those computed */
}

int conv2d_winograd_applies(const dc_kgen *g) {
  const dc_node *n = g->n;
  if (!g->winograd) return 0;
  int nhwc = n->layout == LAYOUT_NHWC;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  int64_t c = tx->dims[nhwc ? 3 : 1], ho = to->dims[nhwc ? 1 : 2], wo = to->dims[nhwc ? 2 : 3];
  if (tw->dims[nhwc ? 1 : 2] != 3 || tw->dims[nhwc ? 2 : 3] != 3 || dc_node_int(n, "stride") != 1) return 0;
  if (!nhwc && tx->dims[3] + 4 * (int64_t)g->vw >= INT32_MAX) return 0; /* 32-bit lane indices in the column masks */
  if (g->winograd == 2) return 1; /* tests: wherever it is correct */
  if (!nhwc) return nchw_pays(g, c, tw->dims[0], ho, wo);
  int64_t ntx = cdiv(wo, 2), nty = cdiv(ho, 2);
  if (c < MIN_C || ntx * nty < MIN_TILES) return 0;
  gemm gm = {0};
  gemm_tile_shape(g, &gm);
  return 16 * c * gm.nr * 4 <= U_BYTES; /* one panel of U fits; lanes run along O as in the direct conv */
}

int conv3d_winograd_applies(const dc_kgen *g) {
  const dc_node *n = g->n;
  if (!g->winograd) return 0;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  if (tw->dims[3] != 3 || tw->dims[4] != 3 || dc_node_int(n, "stride_h") != 1 || dc_node_int(n, "stride_w") != 1)
    return 0;
  if (tx->dims[4] + 4 * (int64_t)g->vw >= INT32_MAX) return 0; /* 32-bit lane indices in the column masks */
  if (g->winograd == 2) return 1;
  return nchw_pays(g, tx->dims[1] * tw->dims[2], tw->dims[0], to->dims[3], to->dims[4]);
}

/* conv3d's image and channel counts, its planes' geometry and its bias (no
 * act, no residual). */
dc_status *conv3d_winograd(dc_kgen *g) {
  const dc_node *n = g->n;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  wino wn = {0};
  wn.kt = tw->dims[2], wn.t = tx->dims[2], wn.cin = tx->dims[1], wn.to = to->dims[2];
  wn.st = dc_node_int(n, "stride_t");
  wn.n = tx->dims[0] * wn.to, wn.c = wn.cin * wn.kt, wn.h = tx->dims[3], wn.w = tx->dims[4];
  wn.o = to->dims[1], wn.ho = to->dims[3], wn.wo = to->dims[4];
  wn.pt = dc_node_int(n, "pad_h"), wn.pl = dc_node_int(n, "pad_w");
  wn.x = kg_buf(g, 1);
  wn.wt = tw->dtype;
  wn.wp = kg_buf_typed(g, 2, wn.wt);
  wn.out = kg_buf(g, 0);
  wn.act = ACT_NONE;
  wn.has_bias = dc_node_int(n, "bias") != 0;
  if (wn.has_bias) wn.bt = kg_type(g, 3)->dtype, wn.bias = kg_buf_typed(g, 3, wn.bt);
  plan(g, &wn);
  emit(g, &wn);
  g->variant = "winograd";
  return NULL;
}

dc_status *conv2d_winograd(dc_kgen *g) {
  const dc_node *n = g->n;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  wino wn = {0};
  wn.nhwc = n->layout == LAYOUT_NHWC;
  if (wn.nhwc) {
    wn.n = tx->dims[0], wn.h = tx->dims[1], wn.w = tx->dims[2], wn.c = tx->dims[3];
    wn.ho = to->dims[1], wn.wo = to->dims[2], wn.o = to->dims[3];
  } else {
    wn.n = tx->dims[0], wn.c = tx->dims[1], wn.h = tx->dims[2], wn.w = tx->dims[3];
    wn.o = to->dims[1], wn.ho = to->dims[2], wn.wo = to->dims[3];
  }
  wn.pt = dc_node_int(n, "pad_t"), wn.pl = dc_node_int(n, "pad_l");
  wn.x = kg_buf(g, 1);
  wn.wt = tw->dtype;
  wn.wp = kg_buf_typed(g, 2, wn.wt);
  wn.out = kg_buf(g, 0);
  wn.act = (dc_act)dc_node_int(n, "act");
  wn.has_bias = dc_node_int(n, "bias") != 0;
  if (wn.has_bias) wn.bt = kg_type(g, 3)->dtype, wn.bias = kg_buf_typed(g, 3, wn.bt);
  wn.has_res = dc_node_int(n, "residual") != 0;
  if (wn.has_res) {
    gemm_bcast_strides(to, kg_type(g, 3 + wn.has_bias), wn.rs);
    wn.res = kg_buf(g, 3 + wn.has_bias);
  }
  if (wn.nhwc) plan_nhwc(g, &wn), emit_nhwc(g, &wn);
  else plan(g, &wn), emit(g, &wn);
  g->variant = "winograd";
  return NULL;
}
