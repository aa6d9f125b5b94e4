/* k_conv.c — conv2d (NCHW) and conv3d as a GEMM per image (k_gemm.h):
 *     out[n][o][p] = sum_k w[o][k] · im2col[k][p],  k = (c, ky, kx), p = (oy, ox)
 * and for conv3d (x [B,C,T,H,W]) the same with k = (c, kt, ky, kx) and
 * p = (ot, oy, ox): the image's whole output volume is the GEMM's columns,
 * which is exactly how [B,O,T',H',W'] lies in memory.
 * Vectors run along output pixels, which are contiguous in the NCHW output;
 * A is the weight in its own [O, C·kh·kw] (or [O, C·kt·kh·kw]) layout,
 * broadcast from there; B, the im2col panel, is packed on the fly into the
 * thread's scratch, zero padding included, by the cheapest of three packers
 * the geometry allows:
 *   pointwise  1×1(×1), stride 1, no padding: B is x itself, a masked copy;
 *   rows       stride 1 in H and W and W' a multiple of W: a vector of
 *              pixels lies in one output row (of one frame), so its taps are
 *              one masked contiguous load;
 *   gather     anything else (stride 2, odd widths): a masked gather of
 *              the taps, bounds checked per lane.
 * Time needs no bounds check: conv3d pads H and W only, so every frame a
 * valid column's taps read exists.
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
  int64_t c, h, w, kh, kw, ho, wo, sy, sx, pt, pl;
  LLVMValueRef x;
  conv_pack mode;
  int64_t t, kt, to, st; /* frames in, taps, out and the time stride: 1, 1, 1, 1 for conv2d */
} conv_op;

/* Whether the columns span several output frames or the taps several input
 * frames (a conv3d that is no conv2d of its first frame): the packers then
 * split a column's row index into (ot, oy) and loop over kt. */
static int has_time(const conv_op *cv) { return cv->to > 1 || cv->kt > 1; }

static LLVMValueRef i64v(dc_kgen *g, int64_t v) { return kg_i64(g, v); }
static LLVMValueRef add(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(g->b, a, b, ""); }
static LLVMValueRef mul(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildNSWMul(g->b, a, kg_i64(g, c), ""); }

static LLVMValueRef vsplat(dc_kgen *g, int64_t v) { return gk_isplat(g, gk_i32(g, v)); }

/* dst[c·kt·kh·kw + kidx] (stride nr) = load(src + c·t·h·w) for every channel. */
static void copy_channels(dc_kgen *g, const conv_op *cv, int nr, LLVMValueRef src, LLVMValueRef idx,
                          LLVMValueRef mask, LLVMValueRef dst, LLVMValueRef kidx) {
  kg_loop c;
  kg_for(g, &c, i64v(g, 0), i64v(g, cv->c), 1, "c");
  LLVMValueRef s = kg_gep(g, src, mul(g, c.i, cv->t * cv->h * cv->w));
  LLVMValueRef v = idx ? gk_gather(g, s, idx, mask) : gk_mload(g, s, mask);
  kg_vstore(g, v, kg_gep(g, dst, mul(g, add(g, mul(g, c.i, cv->kt * cv->kh * cv->kw), kidx), nr)));
  kg_end(g, &c);
}

/* The tap index within a channel: (kt·kh + ky)·kw + kx, or ky·kw + kx
 * without time. */
static LLVMValueRef tap_index(dc_kgen *g, const conv_op *cv, LLVMValueRef kt, LLVMValueRef ky, LLVMValueRef kx) {
  LLVMValueRef row = kt ? add(g, mul(g, kt, cv->kh), ky) : ky;
  return add(g, mul(g, row, cv->kw), kx);
}

/* One vector of pixels p0.. (all in output row p0 / wo, of frame
 * (p0 / wo) / ho), stride 1 in H and W. */
static void pack_rows(dc_kgen *g, const conv_op *cv, int nr, LLVMValueRef xg, LLVMValueRef p0, LLVMValueRef pmask,
                      LLVMValueRef dst) {
  LLVMValueRef oy = LLVMBuildSDiv(g->b, p0, i64v(g, cv->wo), "oy");
  LLVMValueRef ox0 = LLVMBuildSRem(g->b, p0, i64v(g, cv->wo), "ox");
  kg_loop kt, ky, kx;
  LLVMValueRef frame = NULL; /* the input frame's offset, with time */
  if (has_time(cv)) {
    LLVMValueRef ot = LLVMBuildSDiv(g->b, oy, i64v(g, cv->ho), "ot");
    oy = LLVMBuildSRem(g->b, oy, i64v(g, cv->ho), "oy");
    kg_for(g, &kt, i64v(g, 0), i64v(g, cv->kt), 1, "kt");
    frame = mul(g, add(g, mul(g, ot, cv->st), kt.i), cv->h * cv->w);
  }
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
  if (frame) off = add(g, frame, off);
  LLVMValueRef src = LLVMBuildGEP2(g->b, g->f32, xg, &off, 1, "");
  copy_channels(g, cv, nr, src, NULL, mask, dst, tap_index(g, cv, frame ? kt.i : NULL, ky.i, kx.i));
  kg_end(g, &kx);
  kg_end(g, &ky);
  if (frame) kg_end(g, &kt);
}

/* One vector of pixels p0.., any stride and width: per-lane taps. */
static void pack_gather(dc_kgen *g, const conv_op *cv, int nr, LLVMValueRef xg, LLVMValueRef p0, LLVMValueRef pmask,
                        LLVMValueRef dst) {
  LLVMValueRef p = LLVMBuildAdd(g->b, gk_isplat(g, p0), gk_iota(g), "");
  LLVMValueRef row = LLVMBuildSDiv(g->b, p, vsplat(g, cv->wo), "");
  LLVMValueRef ox = LLVMBuildMul(g->b, LLVMBuildSRem(g->b, p, vsplat(g, cv->wo), ""), vsplat(g, cv->sx), "");
  kg_loop kt, ky, kx;
  LLVMValueRef it = NULL; /* the input frame per lane, with time */
  if (has_time(cv)) {
    LLVMValueRef ot = LLVMBuildSDiv(g->b, row, vsplat(g, cv->ho), "");
    row = LLVMBuildSRem(g->b, row, vsplat(g, cv->ho), "");
    kg_for(g, &kt, i64v(g, 0), i64v(g, cv->kt), 1, "kt");
    it = LLVMBuildAdd(g->b, LLVMBuildMul(g->b, ot, vsplat(g, cv->st), ""), gk_isplat(g, kt.i), "");
  }
  LLVMValueRef oy = LLVMBuildMul(g->b, row, vsplat(g, cv->sy), "");
  kg_for(g, &ky, i64v(g, 0), i64v(g, cv->kh), 1, "ky");
  LLVMValueRef iy = LLVMBuildAdd(g->b, oy, gk_isplat(g, LLVMBuildNSWSub(g->b, ky.i, i64v(g, cv->pt), "")), "");
  LLVMValueRef iny = LLVMBuildICmp(g->b, LLVMIntULT, iy, vsplat(g, cv->h), "");
  kg_for(g, &kx, i64v(g, 0), i64v(g, cv->kw), 1, "kx");
  LLVMValueRef ix = LLVMBuildAdd(g->b, ox, gk_isplat(g, LLVMBuildNSWSub(g->b, kx.i, i64v(g, cv->pl), "")), "");
  LLVMValueRef inx = LLVMBuildICmp(g->b, LLVMIntULT, ix, vsplat(g, cv->w), "");
  LLVMValueRef mask = LLVMBuildAnd(g->b, pmask, LLVMBuildAnd(g->b, iny, inx, ""), "");
  LLVMValueRef rowat = it ? LLVMBuildAdd(g->b, LLVMBuildMul(g->b, it, vsplat(g, cv->h), ""), iy, "") : iy;
  LLVMValueRef idx = LLVMBuildAdd(g->b, LLVMBuildMul(g->b, rowat, vsplat(g, cv->w), ""), ix, "");
  copy_channels(g, cv, nr, xg, idx, mask, dst, tap_index(g, cv, it ? kt.i : NULL, ky.i, kx.i));
  kg_end(g, &kx);
  kg_end(g, &ky);
  if (it) kg_end(g, &kt);
}

/* im2col panels of pixels [col0, col0 + ncols) of image grp. */
static void pack_conv(dc_kgen *g, const gemm *gm, LLVMValueRef dst, LLVMValueRef grp, LLVMValueRef col0,
                      LLVMValueRef ncols) {
  const conv_op *cv = gm->op;
  LLVMValueRef xg = kg_gep(g, cv->x, mul(g, grp, cv->c * cv->t * cv->h * cv->w));
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

/* The packer for cv's geometry, or an error when a channel's volume is too
 * large for the 32-bit gather indices. */
static dc_status *choose_pack(dc_kgen *g, conv_op *cv) {
  if (cv->t * cv->h * cv->w >= INT32_MAX / 2)
    return dc_error(DC_ERR_UNSUPPORTED, "%s: an input channel of %lld values is too large for 32-bit gathers",
                    dc_op_get(g->n->op)->name, (long long)(cv->t * cv->h * cv->w));
  int unit = cv->kt == 1 && cv->kh == 1 && cv->kw == 1 && cv->st == 1 && cv->sy == 1 && cv->sx == 1;
  if (unit && cv->pt == 0 && cv->pl == 0 && cv->to == cv->t && cv->ho == cv->h && cv->wo == cv->w)
    cv->mode = PACK_POINTWISE;
  else if (cv->sy == 1 && cv->sx == 1 && cv->wo % g->vw == 0)
    cv->mode = PACK_ROWS;
  else
    cv->mode = PACK_GATHER;
  return NULL;
}

/* The GEMM over cv: A the weight [O, K] as stored (node input 1), B the
 * packed im2col of each of the batch's images. */
static void conv_gemm(dc_kgen *g, conv_op *cv, gemm *gm) {
  const dc_type *tw = kg_type(g, 2);
  gm->m = tw->dims[0];
  gm->k = cv->c * cv->kt * cv->kh * cv->kw;
  gm->ncols = cv->to * cv->ho * cv->wo;
  gm->groups = kg_type(g, 1)->dims[0];
  gm->a_dtype = tw->dtype;
  gm->a = kg_buf_typed(g, 2, gm->a_dtype);
  gm->lda = gm->k;
  gm->pack = pack_conv;
  gm->op = cv;
}

dc_status *dc_k_conv2d(dc_kgen *g) {
  DC_TRY(gemm_need_f32(g));
  if (conv2d_winograd_applies(g)) return conv2d_winograd(g);
  if (g->n->layout == LAYOUT_NHWC) return conv2d_nhwc(g);
  const dc_node *n = g->n;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  int64_t s = dc_node_int(n, "stride");
  conv_op cv = {tx->dims[1], tx->dims[2], tx->dims[3], tw->dims[2], tw->dims[3], to->dims[2], to->dims[3],
                s, s, dc_node_int(n, "pad_t"), dc_node_int(n, "pad_l"), kg_buf(g, 1),
                PACK_GATHER, 1, 1, 1, 1};
  DC_TRY(choose_pack(g, &cv));
  gemm gm = {0};
  conv_gemm(g, &cv, &gm);
  int64_t str[DC_MAX_DIMS];
  if (gemm_bind_epilogue(g, &gm, str))
    gm.res = (gemm_res){2, {to->dims[0], to->dims[1]}, {str[0], str[1]}, cv.wo, str[2], str[3]};
  gemm_plan(g, &gm);
  gemm_emit(g, &gm);
  return NULL;
}

/* conv3d (ops.def): no epilogue but the bias, so the output and bias are
 * bound here rather than by gemm_bind_epilogue (conv3d has no act or
 * residual attribute). */
dc_status *dc_k_conv3d(dc_kgen *g) {
  DC_TRY(gemm_need_f32(g));
  if (conv3d_winograd_applies(g)) return conv3d_winograd(g);
  const dc_node *n = g->n;
  const dc_type *to = kg_type(g, 0), *tx = kg_type(g, 1), *tw = kg_type(g, 2);
  conv_op cv = {tx->dims[1], tx->dims[3], tx->dims[4], tw->dims[3], tw->dims[4], to->dims[3], to->dims[4],
                dc_node_int(n, "stride_h"), dc_node_int(n, "stride_w"), dc_node_int(n, "pad_h"),
                dc_node_int(n, "pad_w"), kg_buf(g, 1), PACK_GATHER, tx->dims[2], tw->dims[2], to->dims[2],
                dc_node_int(n, "stride_t")};
  DC_TRY(choose_pack(g, &cv));
  gemm gm = {0};
  conv_gemm(g, &cv, &gm);
  gm.act = ACT_NONE;
  gm.out = kg_buf(g, 0);
  gm.ldc = gm.ncols;
  gm.has_bias = dc_node_int(n, "bias") != 0;
  if (gm.has_bias) gm.bias_dtype = kg_type(g, 3)->dtype, gm.bias = kg_buf_typed(g, 3, gm.bias_dtype);
  gemm_plan(g, &gm);
  gemm_emit(g, &gm);
  return NULL;
}
