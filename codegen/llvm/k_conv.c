/* k_conv.c — conv2d (NCHW) as a GEMM per image (k_gemm.h):
 *     out[n][o][p] = sum_k w[o][k] · im2col[k][p],  k = (c, ky, kx), p = (oy, ox)
 * Vectors run along output pixels, which are contiguous in the NCHW output;
 * A is the weight in its own [O, C·kh·kw] layout, broadcast from there; B,
 * the im2col panel, is packed on the fly into the thread's scratch, zero
 * padding included, by the cheapest of three packers the geometry allows:
 *   pointwise  1×1, stride 1, no padding: B is x itself, a masked copy;
 *   rows       stride 1 and W' a multiple of W: a vector of pixels lies in
 *              one output row, so its taps are one masked contiguous load;
 *   gather     anything else (stride 2, odd widths): a masked gather of
 *              the taps, bounds checked per lane.
 *
 * NHWC (channels last, a node with layout nhwc) is the transposed GEMM:
 *     out[(n, p)][o] = sum_k patch[(n, p)][k] · w[o][k],  k = (ky, kx, c)
 * rows are output pixels, vectors run along O (contiguous in the NHWC
 * output), B = wᵀ is packed like linear's (the [O, kh, kw, C] weight is
 * [O, K]), and A is read in place: a 1×1 stride-1 conv is linear over
 * x [N·H·W, C]; any other conv addresses each pixel row per tap (k blocks
 * kept inside one tap's C channels), so row (n, oy, ox) at tap (ky, kx) is
 * the channel run of input pixel (oy·s + ky - pt, ox·s + kx - pl), or
 * zeros in the padding: no im2col copy. */
#include "k_gemm.h"

typedef enum { PACK_POINTWISE, PACK_ROWS, PACK_GATHER } conv_pack;

typedef struct {
  int64_t c, h, w, kh, kw, ho, wo, stride, pt, pl;
  LLVMValueRef x;
  conv_pack mode;
} conv_op;

static LLVMValueRef i64v(dc_kgen *g, int64_t v) { return kg_i64(g, v); }
static LLVMValueRef add(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(g->b, a, b, ""); }
static LLVMValueRef mul(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildNSWMul(g->b, a, kg_i64(g, c), ""); }

static LLVMValueRef vsplat(dc_kgen *g, int64_t v) { return gk_isplat(g, gk_i32(g, v)); }

/* dst[c·kh·kw + kidx] (stride nr) = load(src + c·h·w) for every channel. */
static void copy_channels(dc_kgen *g, const conv_op *cv, int nr, LLVMValueRef src, LLVMValueRef idx,
                          LLVMValueRef mask, LLVMValueRef dst, LLVMValueRef kidx) {
  kg_loop c;
  kg_for(g, &c, i64v(g, 0), i64v(g, cv->c), 1, "c");
  LLVMValueRef s = kg_gep(g, src, mul(g, c.i, cv->h * cv->w));
  LLVMValueRef v = idx ? gk_gather(g, s, idx, mask) : gk_mload(g, s, mask);
  kg_vstore(g, v, kg_gep(g, dst, mul(g, add(g, mul(g, c.i, cv->kh * cv->kw), kidx), nr)));
  kg_end(g, &c);
}

/* One vector of pixels p0.. (all in output row p0 / wo), stride 1. */
static void pack_rows(dc_kgen *g, const conv_op *cv, int nr, LLVMValueRef xg, LLVMValueRef p0, LLVMValueRef pmask,
                      LLVMValueRef dst) {
  LLVMValueRef oy = LLVMBuildSDiv(g->b, p0, i64v(g, cv->wo), "oy");
  LLVMValueRef ox0 = LLVMBuildSRem(g->b, p0, i64v(g, cv->wo), "ox");
  kg_loop ky, kx;
  kg_for(g, &ky, i64v(g, 0), i64v(g, cv->kh), 1, "ky");
  LLVMValueRef iy = add(g, oy, LLVMBuildNSWSub(g->b, ky.i, i64v(g, cv->pt), ""));
  LLVMValueRef rowok = LLVMBuildICmp(g->b, LLVMIntULT, iy, i64v(g, cv->h), "rowok");
  kg_for(g, &kx, i64v(g, 0), i64v(g, cv->kw), 1, "kx");
  LLVMValueRef ix0 = add(g, ox0, LLVMBuildNSWSub(g->b, kx.i, i64v(g, cv->pl), ""));
  LLVMValueRef ix = LLVMBuildAdd(g->b, gk_isplat(g, ix0), gk_iota(g), "");
  LLVMValueRef inx = LLVMBuildICmp(g->b, LLVMIntULT, ix, vsplat(g, cv->w), "");
  LLVMValueRef mask = LLVMBuildAnd(g->b, LLVMBuildAnd(g->b, pmask, inx, ""),
                                   LLVMBuildSelect(g->b, rowok, LLVMConstAllOnes(LLVMTypeOf(inx)),
                                                   LLVMConstNull(LLVMTypeOf(inx)), ""), "");
  /* a plain GEP: off the image where the mask is all false, never read */
  LLVMValueRef off = add(g, mul(g, iy, cv->w), ix0);
  LLVMValueRef src = LLVMBuildGEP2(g->b, g->f32, xg, &off, 1, "");
  copy_channels(g, cv, nr, src, NULL, mask, dst, add(g, mul(g, ky.i, cv->kw), kx.i));
  kg_end(g, &kx);
  kg_end(g, &ky);
}

/* One vector of pixels p0.., any stride and width: per-lane taps. */
static void pack_gather(dc_kgen *g, const conv_op *cv, int nr, LLVMValueRef xg, LLVMValueRef p0, LLVMValueRef pmask,
                        LLVMValueRef dst) {
  LLVMValueRef p = LLVMBuildAdd(g->b, gk_isplat(g, p0), gk_iota(g), "");
  LLVMValueRef oy = LLVMBuildMul(g->b, LLVMBuildSDiv(g->b, p, vsplat(g, cv->wo), ""), vsplat(g, cv->stride), "");
  LLVMValueRef ox = LLVMBuildMul(g->b, LLVMBuildSRem(g->b, p, vsplat(g, cv->wo), ""), vsplat(g, cv->stride), "");
  kg_loop ky, kx;
  kg_for(g, &ky, i64v(g, 0), i64v(g, cv->kh), 1, "ky");
  LLVMValueRef iy = LLVMBuildAdd(g->b, oy, gk_isplat(g, LLVMBuildNSWSub(g->b, ky.i, i64v(g, cv->pt), "")), "");
  LLVMValueRef iny = LLVMBuildICmp(g->b, LLVMIntULT, iy, vsplat(g, cv->h), "");
  kg_for(g, &kx, i64v(g, 0), i64v(g, cv->kw), 1, "kx");
  LLVMValueRef ix = LLVMBuildAdd(g->b, ox, gk_isplat(g, LLVMBuildNSWSub(g->b, kx.i, i64v(g, cv->pl), "")), "");
  LLVMValueRef inx = LLVMBuildICmp(g->b, LLVMIntULT, ix, vsplat(g, cv->w), "");
  LLVMValueRef mask = LLVMBuildAnd(g->b, pmask, LLVMBuildAnd(g->b, iny, inx, ""), "");
  LLVMValueRef idx = LLVMBuildAdd(g->b, LLVMBuildMul(g->b, iy, vsplat(g, cv->w), ""), ix, "");
  copy_channels(g, cv, nr, xg, idx, mask, dst, add(g, mul(g, ky.i, cv->kw), kx.i));
  kg_end(g, &kx);
  kg_end(g, &ky);
}

/* im2col panels of pixels [col0, col0 + ncols) of image grp. */
static void pack_conv(dc_kgen *g, const gemm *gm, LLVMValueRef dst, LLVMValueRef grp, LLVMValueRef col0,
                      LLVMValueRef ncols) {
  const conv_op *cv = gm->op;
  LLVMValueRef xg = kg_gep(g, cv->x, mul(g, grp, cv->c * cv->h * cv->w));
  LLVMValueRef end = add(g, col0, ncols);
  LLVMValueRef npanels = LLVMBuildSDiv(g->b, add(g, ncols, i64v(g, gm->nr - 1)), i64v(g, gm->nr), "");
  kg_loop jp;
  kg_for(g, &jp, i64v(g, 0), npanels, 1, "jp");
  for (int v = 0; v < gm->nv; v++) {
    LLVMValueRef p0 = add(g, col0, add(g, mul(g, jp.i, gm->nr), i64v(g, v * g->vw)));
    LLVMValueRef pmask = gk_lanes_below(g, p0, end);
    LLVMValueRef d = kg_gep(g, dst, add(g, mul(g, jp.i, gm->k * gm->nr), i64v(g, v * g->vw)));
    if (cv->mode == PACK_POINTWISE)
      copy_channels(g, cv, gm->nr, kg_gep(g, xg, p0), NULL, pmask, d, i64v(g, 0));
    else if (cv->mode == PACK_ROWS)
      pack_rows(g, cv, gm->nr, xg, p0, pmask, d);
    else
      pack_gather(g, cv, gm->nr, xg, p0, pmask, d);
  }
  kg_end(g, &jp);
}

/* ---- NHWC ---- */
typedef struct {
  int64_t c, h, w, kw, ho, wo, stride, pt, pl;
  LLVMValueRef x;
} nhwc_op;

/* Row R = (n, oy, ox) of the implicit patch matrix at k = pc, pc in tap
 * pc / C: the input pixel's channels from pc % C on, or the zeros. */
static LLVMValueRef nhwc_arow(dc_kgen *g, const gemm *gm, LLVMValueRef row, LLVMValueRef pc) {
  const nhwc_op *cv = gm->a_op;
  LLVMValueRef tap = LLVMBuildSDiv(g->b, pc, i64v(g, cv->c), "tap");
  LLVMValueRef c0 = LLVMBuildNSWSub(g->b, pc, mul(g, tap, cv->c), "c0");
  LLVMValueRef ky = LLVMBuildSDiv(g->b, tap, i64v(g, cv->kw), "ky");
  LLVMValueRef kx = LLVMBuildSRem(g->b, tap, i64v(g, cv->kw), "kx");
  LLVMValueRef img = LLVMBuildSDiv(g->b, row, i64v(g, cv->ho * cv->wo), "img");
  LLVMValueRef pix = LLVMBuildSRem(g->b, row, i64v(g, cv->ho * cv->wo), "");
  LLVMValueRef oy = LLVMBuildSDiv(g->b, pix, i64v(g, cv->wo), "oy");
  LLVMValueRef ox = LLVMBuildSRem(g->b, pix, i64v(g, cv->wo), "ox");
  LLVMValueRef iy = add(g, mul(g, oy, cv->stride), LLVMBuildNSWSub(g->b, ky, i64v(g, cv->pt), ""));
  LLVMValueRef ix = add(g, mul(g, ox, cv->stride), LLVMBuildNSWSub(g->b, kx, i64v(g, cv->pl), ""));
  LLVMValueRef ok = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntULT, iy, i64v(g, cv->h), ""),
                                 LLVMBuildICmp(g->b, LLVMIntULT, ix, i64v(g, cv->w), ""), "inside");
  LLVMValueRef off = add(g, mul(g, add(g, mul(g, add(g, mul(g, img, cv->h), iy), cv->w), ix), cv->c), c0);
  /* a plain GEP: off the image it is computed, never used */
  LLVMValueRef p = LLVMBuildGEP2(g->b, g->f32, cv->x, &off, 1, "");
  return LLVMBuildSelect(g->b, ok, p, gm->azero, "arow");
}

/* Rows: the output pixels (n, oy, ox); columns: the O output channels. */
static dc_status *conv2d_nhwc(dc_kgen *g) {
  const dc_node *n = g->n;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  nhwc_op cv = {tx->dims[3], tx->dims[1], tx->dims[2], tw->dims[2], to->dims[1], to->dims[2],
                dc_node_int(n, "stride"), dc_node_int(n, "pad_t"), dc_node_int(n, "pad_l"), kg_buf(g, 1)};
  gemm_wt wt = {kg_buf_typed(g, 2, tw->dtype), tw->dims[0], cv.c * tw->dims[1] * tw->dims[2], tw->dtype};
  if (wt.n * wt.k >= INT32_MAX)
    return dc_error(DC_ERR_UNSUPPORTED, "conv2d: a weight of %lld elements is too large for 32-bit gathers",
                    (long long)(wt.n * wt.k));
  gemm gm = {0};
  gm.m = to->dims[0] * cv.ho * cv.wo;
  gm.k = wt.k;
  gm.ncols = wt.n;
  gm.groups = 1;
  gm.a_dtype = DT_F32;
  if (wt.k == cv.c && cv.stride == 1 && cv.pt == 0 && cv.pl == 0 && cv.ho == cv.h && cv.wo == cv.w) {
    gm.a = cv.x; /* 1×1: x [N·H·W, C] is A itself */
    gm.lda = cv.c;
  } else {
    gm.arow = nhwc_arow;
    gm.a_op = &cv;
    gm.kseg = cv.c;
  }
  gm.bias_per_col = 1;
  int64_t str[DC_MAX_DIMS];
  if (gemm_bind_epilogue(g, &gm, str))
    gm.res = (gemm_res){3, {to->dims[0], to->dims[1], to->dims[2]}, {str[0], str[1], str[2]}, gm.ncols, 0, str[3]};
  gm.pack = gemm_pack_wt;
  gm.op = &wt;
  gemm_plan(g, &gm);
  gemm_emit(g, &gm);
  return NULL;
}

dc_status *dc_k_conv2d(dc_kgen *g) {
  DC_TRY(gemm_need_f32(g));
  if (conv2d_winograd_applies(g)) return conv2d_winograd(g);
  if (g->n->layout == LAYOUT_NHWC) return conv2d_nhwc(g);
  const dc_node *n = g->n;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  conv_op cv = {tx->dims[1], tx->dims[2], tx->dims[3], tw->dims[2], tw->dims[3], to->dims[2], to->dims[3],
                dc_node_int(n, "stride"), dc_node_int(n, "pad_t"), dc_node_int(n, "pad_l"), kg_buf(g, 1),
                PACK_GATHER};
  if (cv.h * cv.w >= INT32_MAX / 2)
    return dc_error(DC_ERR_UNSUPPORTED, "conv2d: an input plane of %lld pixels is too large for 32-bit gathers",
                    (long long)(cv.h * cv.w));
  if (cv.kh == 1 && cv.kw == 1 && cv.stride == 1 && cv.pt == 0 && cv.pl == 0 && cv.ho == cv.h && cv.wo == cv.w)
    cv.mode = PACK_POINTWISE;
  else if (cv.stride == 1 && cv.wo % g->vw == 0)
    cv.mode = PACK_ROWS;
  gemm gm = {0};
  gm.m = tw->dims[0];
  gm.k = cv.c * cv.kh * cv.kw;
  gm.ncols = cv.ho * cv.wo;
  gm.groups = tx->dims[0];
  gm.a_dtype = kg_type(g, 2)->dtype;
  gm.a = kg_buf_typed(g, 2, gm.a_dtype);
  gm.lda = gm.k;
  int64_t str[DC_MAX_DIMS];
  if (gemm_bind_epilogue(g, &gm, str))
    gm.res = (gemm_res){2, {to->dims[0], to->dims[1]}, {str[0], str[1]}, cv.wo, str[2], str[3]};
  gm.pack = pack_conv;
  gm.op = &cv;
  gemm_plan(g, &gm);
  gemm_emit(g, &gm);
  return NULL;
}
