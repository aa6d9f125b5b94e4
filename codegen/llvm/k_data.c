/* k_data.c — kernels that move data: reshape, permute, upsample (nearest,
 * NCHW or NHWC), concat, slice, and cast between dtypes.  All bit-exact:
 * elements move as integers of their size (never through float registers),
 * and casts rebuild the reference's conversions with integer vector ops.
 *
 * Copies of contiguous runs (reshape, concat, slice, permutes that keep the
 * last dim) are cut into chunks of at most 64 KiB, and the chunks are the
 * work items the threads split, so one huge run or many small ones both
 * balance.  Permutes that move the last dim are transposes of tiles of
 * W×W elements (a register transpose of <W x i32> for 4-byte elements),
 * each cache line read and written once. */
#include "kgen.h"

#include <string.h>

enum { CHUNK = 64 * 1024 };

static LLVMTypeRef int_of_size(dc_kgen *g, int bytes) {
  return bytes == 4 ? g->i32 : bytes == 2 ? LLVMInt16TypeInContext(g->ctx) : g->i8;
}

static LLVMValueRef add(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildNSWAdd(g->b, a, b, ""); }
static LLVMValueRef mul(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildNSWMul(g->b, a, kg_i64(g, c), ""); }
static LLVMValueRef udiv(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildUDiv(g->b, a, kg_i64(g, c), ""); }
static LLVMValueRef urem(dc_kgen *g, LLVMValueRef a, int64_t c) { return LLVMBuildURem(g->b, a, kg_i64(g, c), ""); }
static LLVMValueRef ilt(dc_kgen *g, LLVMValueRef a, int64_t c) {
  return LLVMBuildICmp(g->b, LLVMIntSLT, a, kg_i64(g, c), "");
}

/* ---- chunked run copies ---------------------------------------------------- */
/* Run o (o < outer) of a set copies `bytes` from input `src` at
 * src_of(o) to the output at o·dst_stride + dst_off. */
typedef struct run_set run_set;
struct run_set {
  int src;
  int64_t bytes, dst_stride, dst_off;
  int64_t src_stride, src_off;              /* src_of(o) = o·src_stride + src_off, unless: */
  LLVMValueRef (*src_of)(dc_kgen *g, const run_set *rs, LLVMValueRef o);
  const void *ctx;
};

static LLVMValueRef src_offset(dc_kgen *g, const run_set *rs, LLVMValueRef o) {
  if (rs->src_of) return rs->src_of(g, rs, o);
  return add(g, mul(g, o, rs->src_stride), kg_i64(g, rs->src_off));
}

static int64_t nchunks(int64_t bytes) { return bytes ? (bytes + CHUNK - 1) / CHUNK : 0; }

/* Chunk c of run o of set rs. */
static void copy_chunk(dc_kgen *g, const run_set *rs, LLVMValueRef o, LLVMValueRef c) {
  int64_t n = nchunks(rs->bytes), last = rs->bytes - (n - 1) * CHUNK;
  LLVMValueRef off = mul(g, c, CHUNK);
  LLVMValueRef src = kg_gep_t(g, g->i8, kg_buf_as(g, rs->src, g->i8), add(g, src_offset(g, rs, o), off));
  LLVMValueRef dst = kg_gep_t(g, g->i8, kg_buf_as(g, 0, g->i8),
                              add(g, add(g, mul(g, o, rs->dst_stride), kg_i64(g, rs->dst_off)), off));
  LLVMValueRef size = n == 1 ? kg_i64(g, rs->bytes)
                             : LLVMBuildSelect(g->b, ilt(g, c, n - 1), kg_i64(g, CHUNK), kg_i64(g, last), "");
  LLVMBuildMemCpy(g->b, dst, 1, src, 1, size);
}

/* outer × (every set's chunks) work items, split across threads. */
static void emit_runs(dc_kgen *g, int64_t outer, const run_set *rs, int nrs) {
  int64_t per = 0;
  for (int i = 0; i < nrs; i++) per += nchunks(rs[i].bytes);
  if (outer == 0 || per == 0) return;
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, outer * per), &lo, &hi);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "chunk");
  LLVMValueRef o = udiv(g, it.i, per), c = urem(g, it.i, per);
  int64_t first = 0;
  for (int i = 0; i < nrs; i++) {
    int64_t n = nchunks(rs[i].bytes);
    if (n == 0) continue;
    LLVMValueRef cc = LLVMBuildNSWSub(g->b, c, kg_i64(g, first), "");
    kg_cond in;
    kg_if(g, &in, LLVMBuildICmp(g->b, LLVMIntULT, cc, kg_i64(g, n), "")); /* first <= c < first + n */
    copy_chunk(g, &rs[i], o, cc);
    kg_endif(g, &in);
    first += n;
  }
  kg_end(g, &it);
}

static void copy_all(dc_kgen *g, int64_t bytes) {
  run_set rs = {1, bytes, 0, 0, 0, 0, NULL, NULL};
  emit_runs(g, 1, &rs, 1);
}

dc_status *dc_k_reshape(dc_kgen *g) {
  copy_all(g, (int64_t)dc_type_bytes(kg_type(g, 0)));
  return NULL;
}

/* ---- concat, slice ----------------------------------------------------------- */
/* Elements before axis, and bytes from axis on. */
static void split_at(const dc_type *t, int axis, int64_t *outer, int64_t *run) {
  *outer = 1;
  *run = dc_dtype_size(t->dtype);
  for (int d = 0; d < t->rank; d++) {
    if (d < axis) *outer *= t->dims[d];
    else *run *= t->dims[d];
  }
}

static int norm_axis(int64_t axis, int rank) { return (int)(axis < 0 ? axis + rank : axis); }

dc_status *dc_k_concat(dc_kgen *g) {
  const dc_type *ta = kg_type(g, 1), *tb = kg_type(g, 2);
  int axis = norm_axis(dc_node_int(g->n, "axis"), ta->rank);
  int64_t outer, ra, rb;
  split_at(ta, axis, &outer, &ra);
  split_at(tb, axis, &outer, &rb);
  run_set rs[2] = {{1, ra, ra + rb, 0, ra, 0, NULL, NULL}, {2, rb, ra + rb, ra, rb, 0, NULL, NULL}};
  emit_runs(g, outer, rs, 2);
  return NULL;
}

dc_status *dc_k_slice(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1);
  int axis = norm_axis(dc_node_int(g->n, "axis"), t->rank);
  int64_t dim = t->dims[axis], start = dc_node_int(g->n, "start"), len = kg_type(g, 0)->dims[axis], outer, run;
  if (start < 0) start += dim;
  if (start < 0 || start + len > dim)
    return dc_error(DC_ERR_MISMATCH, "slice: [%lld, +%lld) is outside dim %d of size %lld", (long long)start,
                    (long long)len, axis, (long long)dim);
  split_at(t, axis, &outer, &run);
  int64_t inner = dim ? run / dim : 0; /* bytes per index along axis */
  run_set rs = {1, len * inner, len * inner, 0, run, start * inner, NULL, NULL};
  emit_runs(g, outer, &rs, 1);
  return NULL;
}

/* ---- permute ------------------------------------------------------------------- */
/* The permute with size-1 dims dropped and runs of input dims that stay
 * adjacent and in order merged: [B,C,H,W] -> [B,H,W,C] becomes the batched
 * transpose [B,C,HW] -> [B,HW,C].  Output dim i is input dim perm[i]. */
typedef struct {
  int k, es;
  int64_t dims[DC_MAX_DIMS];   /* canonical input dims */
  int perm[DC_MAX_DIMS];
  int64_t istride[DC_MAX_DIMS]; /* input strides, elements */
  int64_t odims[DC_MAX_DIMS], ostride[DC_MAX_DIMS];
} perm_plan;

static void perm_plan_make(const dc_type *t, const int64_t *list, perm_plan *p) {
  int map[DC_MAX_DIMS], pr[DC_MAX_DIMS], k = 0, np = 0;
  int64_t d[DC_MAX_DIMS];
  for (int i = 0; i < t->rank; i++) map[i] = t->dims[i] != 1 ? (d[k] = t->dims[i], k++) : -1;
  for (int i = 0; i < t->rank; i++)
    if (map[list[i]] >= 0) pr[np++] = map[list[i]];
  /* Groups of output positions whose input dims are consecutive. */
  int gfirst[DC_MAX_DIMS], glast[DC_MAX_DIMS], ng = 0;
  for (int j = 0; j < np; j++) {
    if (j && pr[j] == pr[j - 1] + 1) {
      glast[ng - 1] = pr[j];
      continue;
    }
    gfirst[ng] = glast[ng] = pr[j];
    ng++;
  }
  /* Canonical input dim of group g = its rank by first input dim. */
  p->k = ng;
  for (int gi = 0; gi < ng; gi++) {
    int rank = 0;
    for (int h = 0; h < ng; h++) rank += gfirst[h] < gfirst[gi];
    p->perm[gi] = rank;
    int64_t size = 1;
    for (int x = gfirst[gi]; x <= glast[gi]; x++) size *= d[x];
    p->dims[rank] = size;
  }
  int64_t s = 1;
  for (int i = p->k - 1; i >= 0; i--) {
    p->istride[i] = s;
    s *= p->dims[i];
  }
  s = 1;
  for (int i = p->k - 1; i >= 0; i--) {
    p->odims[i] = p->dims[p->perm[i]];
    p->ostride[i] = s;
    s *= p->odims[i];
  }
}

/* Input element offset of output row o (over output dims [0, k-1)). */
static LLVMValueRef perm_row_src(dc_kgen *g, const run_set *rs, LLVMValueRef o) {
  const perm_plan *p = rs->ctx;
  LLVMValueRef rem = o, off = kg_i64(g, 0);
  for (int j = p->k - 2; j >= 0; j--) {
    LLVMValueRef idx = j ? urem(g, rem, p->odims[j]) : rem;
    off = add(g, off, mul(g, idx, p->istride[p->perm[j]] * p->es));
    if (j) rem = udiv(g, rem, p->odims[j]);
  }
  return off;
}

/* A W×W tile of 4-byte elements: W rows of input (stride sp apart, each
 * W contiguous elements along the output's dim q) become W output rows:
 * log2(W) stages of two-input shuffles that swap off-diagonal blocks. */
static void transpose_tile(dc_kgen *g, LLVMValueRef in, LLVMValueRef out, int64_t sp, int64_t oq) {
  int W = g->vw;
  LLVMTypeRef vt = LLVMVectorType(g->i32, (unsigned)W);
  LLVMValueRef v[64], m1[64], m2[64];
  for (int j = 0; j < W; j++) v[j] = kg_vload_n(g, vt, kg_gep_t(g, g->i32, in, kg_i64(g, j * sp)), W, NULL);
  for (int h = W / 2; h >= 1; h /= 2) {
    for (int l = 0; l < W; l++) {
      m1[l] = LLVMConstInt(g->i32, (unsigned long long)((l & h) ? W + l - h : l), 0);
      m2[l] = LLVMConstInt(g->i32, (unsigned long long)((l & h) ? W + l : l + h), 0);
    }
    LLVMValueRef k1 = LLVMConstVector(m1, (unsigned)W), k2 = LLVMConstVector(m2, (unsigned)W);
    for (int r = 0; r < W; r++) {
      if (r & h) continue;
      LLVMValueRef a = v[r], b = v[r + h];
      v[r] = LLVMBuildShuffleVector(g->b, a, b, k1, "");
      v[r + h] = LLVMBuildShuffleVector(g->b, a, b, k2, "");
    }
  }
  for (int i = 0; i < W; i++) kg_vstore_n(g, v[i], kg_gep_t(g, g->i32, out, kg_i64(g, i * oq)), W);
}

/* A partial (or non-4-byte) tile, one element at a time: ni × nj of them. */
static void scalar_tile(dc_kgen *g, LLVMTypeRef et, LLVMValueRef in, LLVMValueRef out, LLVMValueRef ni,
                        LLVMValueRef nj, int64_t sp, int64_t oq) {
  kg_loop i, j;
  kg_for(g, &i, kg_i64(g, 0), ni, 1, "ti");
  LLVMValueRef orow = kg_gep_t(g, et, out, mul(g, i.i, oq)), icol = kg_gep_t(g, et, in, i.i);
  kg_for(g, &j, kg_i64(g, 0), nj, 1, "tj");
  LLVMValueRef x = LLVMBuildLoad2(g->b, et, kg_gep_t(g, et, icol, mul(g, j.i, sp)), "");
  LLVMBuildStore(g->b, x, kg_gep_t(g, et, orow, j.i));
  kg_end(g, &j);
  kg_end(g, &i);
}

static LLVMValueRef imin_c(dc_kgen *g, LLVMValueRef a, int64_t c) {
  return LLVMBuildSelect(g->b, ilt(g, a, c), a, kg_i64(g, c), "");
}

/* The output's last dim comes from input dim p (stride sp); the input's
 * last dim sits at output position q (stride oq).  Work items are
 * (other dims, tile along q, tile along the last dim). */
static void emit_transpose(dc_kgen *g, const perm_plan *pl) {
  int k = pl->k, q = 0, T = g->vw;
  for (int j = 0; j < k; j++)
    if (pl->perm[j] == k - 1) q = j;
  int64_t sp = pl->istride[pl->perm[k - 1]], oq = pl->ostride[q];
  int64_t nq = pl->odims[q], nl = pl->odims[k - 1], ntq = (nq + T - 1) / T, ntl = (nl + T - 1) / T;
  int64_t nbatch = 1;
  for (int j = 0; j < k - 1; j++)
    if (j != q) nbatch *= pl->odims[j];
  LLVMTypeRef et = int_of_size(g, pl->es);
  LLVMValueRef in = kg_buf_as(g, 1, et), out = kg_buf_as(g, 0, et), lo, hi;
  kg_split(g, kg_i64(g, nbatch * ntq * ntl), &lo, &hi);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "tile");
  LLVMValueRef tl = urem(g, it.i, ntl), r = udiv(g, it.i, ntl), tq = urem(g, r, ntq), rem = udiv(g, r, ntq);
  LLVMValueRef ib = kg_i64(g, 0), ob = kg_i64(g, 0);
  for (int j = k - 2; j >= 0; j--) { /* the other dims, innermost first */
    if (j == q) continue;
    LLVMValueRef idx = urem(g, rem, pl->odims[j]);
    rem = udiv(g, rem, pl->odims[j]);
    ib = add(g, ib, mul(g, idx, pl->istride[pl->perm[j]]));
    ob = add(g, ob, mul(g, idx, pl->ostride[j]));
  }
  LLVMValueRef i0 = mul(g, tq, T), j0 = mul(g, tl, T);
  LLVMValueRef tin = kg_gep_t(g, et, in, add(g, add(g, ib, i0), mul(g, j0, sp)));
  LLVMValueRef tout = kg_gep_t(g, et, out, add(g, add(g, ob, mul(g, i0, oq)), j0));
  LLVMValueRef full = LLVMBuildAnd(g->b, ilt(g, tq, nq / T), ilt(g, tl, nl / T), "full");
  if (pl->es == 4) {
    LLVMBasicBlockRef fb = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "full");
    LLVMBasicBlockRef pb = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "part");
    LLVMBasicBlockRef done = LLVMAppendBasicBlockInContext(g->ctx, g->fn, "tiled");
    LLVMBuildCondBr(g->b, full, fb, pb);
    LLVMPositionBuilderAtEnd(g->b, fb);
    transpose_tile(g, tin, tout, sp, oq);
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, pb);
    scalar_tile(g, et, tin, tout, imin_c(g, LLVMBuildNSWSub(g->b, kg_i64(g, nq), i0, ""), T),
                imin_c(g, LLVMBuildNSWSub(g->b, kg_i64(g, nl), j0, ""), T), sp, oq);
    LLVMBuildBr(g->b, done);
    LLVMPositionBuilderAtEnd(g->b, done);
  } else {
    scalar_tile(g, et, tin, tout, imin_c(g, LLVMBuildNSWSub(g->b, kg_i64(g, nq), i0, ""), T),
                imin_c(g, LLVMBuildNSWSub(g->b, kg_i64(g, nl), j0, ""), T), sp, oq);
  }
  kg_end(g, &it);
}

dc_status *dc_k_permute(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1);
  perm_plan pl;
  if ((int64_t)dc_type_numel(t) == 0) return NULL;
  perm_plan_make(t, g->n->list, &pl);
  pl.es = dc_dtype_size(t->dtype);
  if (pl.k <= 1) { /* the identity once size-1 dims are gone */
    copy_all(g, (int64_t)dc_type_bytes(t));
  } else if (pl.perm[pl.k - 1] == pl.k - 1) { /* rows of the last dim move whole */
    int64_t run = pl.dims[pl.k - 1] * pl.es;
    run_set rs = {1, run, run, 0, 0, 0, perm_row_src, &pl};
    emit_runs(g, (int64_t)dc_type_numel(t) / pl.dims[pl.k - 1], &rs, 1);
  } else {
    emit_transpose(g, &pl);
  }
  return NULL;
}

/* ---- upsample ------------------------------------------------------------------- */
/* Input row item (of planes·H) -> f output rows of w·f elements. */
typedef struct {
  LLVMTypeRef et, vt;
  LLVMValueRef src, dst; /* the input row; the first of its output rows */
  int64_t f, w;
} up_row;

/* n input elements at ix (full vector or tail): each becomes f vectors by
 * shuffles (lane j of vector k is input lane (k·W + j) / f), each stored to
 * the f output rows. */
static void up_vec(dc_kgen *g, const up_row *u, LLVMValueRef ix, int n) {
  int W = g->vw;
  LLVMValueRef x = kg_vload_n(g, u->vt, kg_gep_t(g, u->et, u->src, ix), n, NULL), y[16];
  int64_t nk = (n * u->f + W - 1) / W;
  for (int64_t k = 0; k < nk; k++) {
    LLVMValueRef mask[64];
    for (int j = 0; j < W; j++) mask[j] = LLVMConstInt(g->i32, (unsigned long long)((k * W + j) / u->f), 0);
    y[k] = LLVMBuildShuffleVector(g->b, x, LLVMGetUndef(u->vt), LLVMConstVector(mask, (unsigned)W), "");
  }
  kg_loop r;
  kg_for(g, &r, kg_i64(g, 0), kg_i64(g, u->f), 1, "urow");
  LLVMValueRef row = kg_gep_t(g, u->et, u->dst, add(g, mul(g, r.i, u->w * u->f), mul(g, ix, u->f)));
  for (int64_t k = 0; k < nk; k++) {
    int64_t cnt = n * u->f - k * W < W ? n * u->f - k * W : W;
    kg_vstore_n(g, y[k], kg_gep_t(g, u->et, row, kg_i64(g, k * W)), (int)cnt);
  }
  kg_end(g, &r);
}

/* Factors above W: output element ox of every output row reads ox / f. */
static void up_scalar(dc_kgen *g, const up_row *u) {
  kg_loop r, o;
  kg_for(g, &r, kg_i64(g, 0), kg_i64(g, u->f), 1, "urow");
  LLVMValueRef row = kg_gep_t(g, u->et, u->dst, mul(g, r.i, u->w * u->f));
  kg_for(g, &o, kg_i64(g, 0), kg_i64(g, u->w * u->f), 1, "ux");
  LLVMValueRef x = LLVMBuildLoad2(g->b, u->et, kg_gep_t(g, u->et, u->src, udiv(g, o.i, u->f)), "");
  LLVMBuildStore(g->b, x, kg_gep_t(g, u->et, row, o.i));
  kg_end(g, &o);
  kg_end(g, &r);
}

/* NHWC [N,H,W,C]: input row item (n, iy) makes output row (n, iy·f): each
 * pixel's C channels copied f times side by side; then that row, W·f·C
 * elements, copied to the f - 1 rows below it. */
static void upsample_nhwc(dc_kgen *g, const dc_type *t, int64_t f) {
  int64_t h = t->dims[1], w = t->dims[2], run = t->dims[3] * dc_dtype_size(t->dtype), orow = w * f * run;
  LLVMValueRef lo, hi, x = kg_buf_as(g, 1, g->i8), y = kg_buf_as(g, 0, g->i8);
  kg_split(g, kg_i64(g, t->dims[0] * h), &lo, &hi);
  kg_loop it, ix, r;
  kg_for(g, &it, lo, hi, 1, "irow");
  LLVMValueRef src = kg_gep_t(g, g->i8, x, mul(g, it.i, w * run));
  LLVMValueRef dst = kg_gep_t(g, g->i8, y, mul(g, it.i, f * orow)); /* rows n·H·f + iy·f = item·f */
  kg_for(g, &ix, kg_i64(g, 0), kg_i64(g, w), 1, "ix");
  LLVMValueRef from = kg_gep_t(g, g->i8, src, mul(g, ix.i, run));
  for (int64_t k = 0; k < f; k++)
    LLVMBuildMemCpy(g->b, kg_gep_t(g, g->i8, dst, add(g, mul(g, ix.i, f * run), kg_i64(g, k * run))), 1, from, 1,
                    kg_i64(g, run));
  kg_end(g, &ix);
  kg_for(g, &r, kg_i64(g, 1), kg_i64(g, f), 1, "urow");
  LLVMBuildMemCpy(g->b, kg_gep_t(g, g->i8, dst, mul(g, r.i, orow)), 1, dst, 1, kg_i64(g, orow));
  kg_end(g, &r);
  kg_end(g, &it);
}

dc_status *dc_k_upsample(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1);
  int64_t f = dc_node_int(g->n, "factor"), w = t->dims[t->rank - 1];
  int64_t numel = (int64_t)dc_type_numel(t);
  int es = dc_dtype_size(t->dtype), W = g->vw;
  if (f == 1) {
    copy_all(g, numel * es);
    return NULL;
  }
  if (numel == 0) return NULL;
  if (g->n->layout == LAYOUT_NHWC) {
    upsample_nhwc(g, t, f);
    return NULL;
  }
  up_row u = {int_of_size(g, es), NULL, NULL, NULL, f, w};
  u.vt = LLVMVectorType(u.et, (unsigned)W);
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, numel / w), &lo, &hi);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "irow");
  u.src = kg_gep_t(g, u.et, kg_buf_as(g, 1, u.et), mul(g, it.i, w));
  u.dst = kg_gep_t(g, u.et, kg_buf_as(g, 0, u.et), mul(g, it.i, w * f * f));
  if (f > W) {
    up_scalar(g, &u);
  } else {
    if (w >= W) {
      kg_loop v;
      kg_for(g, &v, kg_i64(g, 0), kg_i64(g, w / W * W), W, "uv");
      up_vec(g, &u, v.i, W);
      kg_end(g, &v);
    }
    if (w % W) up_vec(g, &u, kg_i64(g, w / W * W), (int)(w % W));
  }
  kg_end(g, &it);
  return NULL;
}

/* ---- cast ------------------------------------------------------------------------ */
/* Conversions on <W x i32> float bits, mirroring runtime/kernels_ref.c. */
typedef struct {
  dc_kgen *g;
  LLVMTypeRef vi;
} cvt;

static LLVMValueRef K(const cvt *c, int64_t v) { return kg_iconst(c->vi, v); }
static LLVMValueRef band(const cvt *c, LLVMValueRef a, int64_t m) { return LLVMBuildAnd(c->g->b, a, K(c, m), ""); }
static LLVMValueRef bor(const cvt *c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildOr(c->g->b, a, b, ""); }
static LLVMValueRef shl(const cvt *c, LLVMValueRef a, int s) { return LLVMBuildShl(c->g->b, a, K(c, s), ""); }
static LLVMValueRef shr(const cvt *c, LLVMValueRef a, int s) { return LLVMBuildLShr(c->g->b, a, K(c, s), ""); }
static LLVMValueRef iadd(const cvt *c, LLVMValueRef a, LLVMValueRef b) { return LLVMBuildAdd(c->g->b, a, b, ""); }
static LLVMValueRef icmp(const cvt *c, LLVMIntPredicate p, LLVMValueRef a, int64_t v) {
  return LLVMBuildICmp(c->g->b, p, a, K(c, v), "");
}
static LLVMValueRef sel(const cvt *c, LLVMValueRef m, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(c->g->b, m, a, b, "");
}

/* The bits of (float)man · 2^scale: exact for the few mantissa bits here. */
static LLVMValueRef small_float(const cvt *c, LLVMValueRef man, double scale) {
  LLVMTypeRef vf = LLVMVectorType(c->g->f32, LLVMGetVectorSize(c->vi));
  LLVMValueRef f = LLVMBuildFMul(c->g->b, LLVMBuildSIToFP(c->g->b, man, vf, ""), kg_fconst(vf, scale), "");
  return LLVMBuildBitCast(c->g->b, f, c->vi, "");
}

static LLVMValueRef from_f16(const cvt *c, LLVMValueRef h) {
  LLVMValueRef sign = shl(c, band(c, h, 0x8000), 16), e = band(c, shr(c, h, 10), 0x1f), man = band(c, h, 0x3ff);
  LLVMValueRef normal = bor(c, bor(c, sign, shl(c, iadd(c, e, K(c, 112)), 23)), shl(c, man, 13));
  LLVMValueRef infnan = bor(c, bor(c, sign, K(c, 0x7f800000)), shl(c, man, 13));
  LLVMValueRef sub = bor(c, small_float(c, man, 0x1p-24), sign); /* zero and subnormals */
  return sel(c, icmp(c, LLVMIntEQ, e, 0), sub, sel(c, icmp(c, LLVMIntEQ, e, 31), infnan, normal));
}

/* e4m3fn: bias 7, no inf, 0x7f and 0xff are NaN (the C NAN, positive). */
static LLVMValueRef from_e4m3(const cvt *c, LLVMValueRef v) {
  LLVMValueRef sign = shl(c, band(c, v, 0x80), 24), e = band(c, shr(c, v, 3), 0xf), man = band(c, v, 7);
  LLVMValueRef normal = bor(c, bor(c, sign, shl(c, iadd(c, e, K(c, 120)), 23)), shl(c, man, 20));
  LLVMValueRef sub = bor(c, small_float(c, man, 0x1p-9), sign);
  LLVMValueRef r = sel(c, icmp(c, LLVMIntEQ, e, 0), sub, normal);
  return sel(c, icmp(c, LLVMIntEQ, band(c, v, 0x7f), 0x7f), K(c, 0x7fc00000), r);
}

static LLVMValueRef to_bf16(const cvt *c, LLVMValueRef x) {
  LLVMValueRef nan = icmp(c, LLVMIntUGT, band(c, x, 0x7fffffff), 0x7f800000);
  LLVMValueRef rn = shr(c, iadd(c, iadd(c, x, K(c, 0x7fff)), band(c, shr(c, x, 16), 1)), 16); /* ties to even */
  return sel(c, nan, bor(c, shr(c, x, 16), K(c, 0x40)), rn);
}

/* f16_subnormal of the reference: |f| / 2^-24 rounded to an integer, ties to even. */
static LLVMValueRef f16_subnormal(const cvt *c, LLVMValueRef ax) {
  LLVMBuilderRef b = c->g->b;
  LLVMValueRef man = bor(c, band(c, ax, 0x7fffff), K(c, 0x800000));
  LLVMValueRef shift = LLVMBuildSub(b, K(c, 126), shr(c, ax, 23), "");
  /* In [14, 24] where the result is used; clamped so every lane's shift is defined. */
  LLVMValueRef s = sel(c, icmp(c, LLVMIntSGT, shift, 24), K(c, 24), sel(c, icmp(c, LLVMIntSLT, shift, 1), K(c, 1), shift));
  LLVMValueRef r = LLVMBuildLShr(b, man, s, "");
  LLVMValueRef rem = LLVMBuildAnd(b, man, LLVMBuildSub(b, LLVMBuildShl(b, K(c, 1), s, ""), K(c, 1), ""), "");
  LLVMValueRef half = LLVMBuildShl(b, K(c, 1), LLVMBuildSub(b, s, K(c, 1), ""), "");
  LLVMValueRef up = LLVMBuildOr(b, LLVMBuildICmp(b, LLVMIntUGT, rem, half, ""),
                                LLVMBuildAnd(b, LLVMBuildICmp(b, LLVMIntEQ, rem, half, ""),
                                             icmp(c, LLVMIntNE, band(c, r, 1), 0), ""), "");
  r = iadd(c, r, LLVMBuildZExt(b, up, c->vi, ""));
  return sel(c, icmp(c, LLVMIntSGT, shift, 24), K(c, 0), r);
}

static LLVMValueRef to_f16(const cvt *c, LLVMValueRef x) {
  LLVMValueRef ax = band(c, x, 0x7fffffff), sign = band(c, shr(c, x, 16), 0x8000);
  LLVMValueRef nan = bor(c, bor(c, sign, K(c, 0x7e00)), band(c, shr(c, ax, 13), 0x3ff));
  LLVMValueRef inf = bor(c, sign, K(c, 0x7c00));
  LLVMValueRef sub = bor(c, sign, f16_subnormal(c, ax));
  LLVMValueRef rn = iadd(c, iadd(c, ax, K(c, 0xfff)), band(c, shr(c, ax, 13), 1));
  LLVMValueRef normal = bor(c, sign, shr(c, LLVMBuildSub(c->g->b, rn, K(c, 0x38000000), ""), 13));
  LLVMValueRef r = sel(c, icmp(c, LLVMIntULT, ax, 0x38800000), sub, normal);
  r = sel(c, icmp(c, LLVMIntUGE, ax, 0x477ff000), inf, r);
  return sel(c, icmp(c, LLVMIntUGT, ax, 0x7f800000), nan, r);
}

/* n elements at element offset off: load in `from`, store in `to`. */
static void cast_vec(const cvt *c, dc_dtype from, dc_dtype to, LLVMValueRef off, int n) {
  dc_kgen *g = c->g;
  int W = g->vw;
  LLVMTypeRef it = int_of_size(g, dc_dtype_size(from)), ot = int_of_size(g, dc_dtype_size(to));
  LLVMValueRef p = kg_gep_t(g, it, kg_buf_as(g, 1, it), off);
  LLVMValueRef raw = kg_vload_n(g, LLVMVectorType(it, (unsigned)W), p, n, NULL);
  LLVMValueRef x = it == g->i32 ? raw : LLVMBuildZExt(g->b, raw, c->vi, "");
  if (from == DT_BF16) x = shl(c, x, 16);
  else if (from == DT_F16) x = from_f16(c, x);
  else if (from == DT_F8_E5M2) x = from_f16(c, shl(c, x, 8)); /* the top byte of a half */
  else if (from == DT_F8_E4M3) x = from_e4m3(c, x);
  if (to == DT_BF16) x = to_bf16(c, x);
  else if (to == DT_F16) x = to_f16(c, x);
  if (ot != g->i32) x = LLVMBuildTrunc(g->b, x, LLVMVectorType(ot, (unsigned)W), "");
  kg_vstore_n(g, x, kg_gep_t(g, ot, kg_buf_as(g, 0, ot), off), n);
}

dc_status *dc_k_cast(dc_kgen *g) {
  dc_dtype from = kg_type(g, 1)->dtype, to = kg_type(g, 0)->dtype;
  int64_t n = (int64_t)dc_type_numel(kg_type(g, 0));
  int W = g->vw;
  if (from == to) { /* also the copy of an unaligned weight */
    copy_all(g, (int64_t)dc_type_bytes(kg_type(g, 0)));
    return NULL;
  }
  if (to != DT_F32 && to != DT_F16 && to != DT_BF16)
    return dc_error(DC_ERR_UNSUPPORTED, "cast: casts to f32, f16 or bf16, not %s", dc_dtype_name(to));
  cvt c = {g, LLVMVectorType(g->i32, (unsigned)W)};
  int64_t nfull = n / W, tail = n % W;
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, nfull + (tail != 0)), &lo, &hi);
  kg_loop v;
  kg_for(g, &v, lo, LLVMBuildSelect(g->b, ilt(g, hi, nfull), hi, kg_i64(g, nfull), ""), 1, "cv");
  cast_vec(&c, from, to, mul(g, v.i, W), W);
  kg_end(g, &v);
  if (tail) { /* the thread whose share holds the last, partial vector */
    kg_cond t;
    LLVMValueRef mine = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSLE, lo, kg_i64(g, nfull), ""),
                                     LLVMBuildICmp(g->b, LLVMIntSGT, hi, kg_i64(g, nfull), ""), "");
    kg_if(g, &t, mine);
    cast_vec(&c, from, to, kg_i64(g, nfull * W), (int)tail);
    kg_endif(g, &t);
  }
  return NULL;
}
