/* k_norm.c — group norm (+ act), layer norm, the DiTs' modulated layer
 * norm and RMS norm, and the timestep embedding.
 *
 * Norms, two passes over each group or row: (1) the sum and sum of squares
 * in <W x double> vectors, shifted by the first element so E[x²] - E[x]²
 * does not cancel when the data has an offset (the reference's centred
 * double sums agree to ~1e-15); (2) normalize + affine (+ act) in float:
 * y = ((x - mean_hi) - mean_lo) · s + beta with the mean split into two
 * floats, so y keeps its digits even when |mean| >> std.  A group of SD's
 * biggest norm (10 channels × 64×64 = 160 KiB) stays in L2 between passes.
 * Threads split the (n, group) pairs or the rows.
 *
 * mod_layer_norm is layer norm (affine or not) whose rows then take their
 * sample's scale and shift chunks of the modulation: n·(1 + scale) + shift,
 * the product rounded, then the sum, as the reference.  rms_norm sums x²
 * in <W x double> vectors (no shift: it is a mean square, not a variance)
 * and writes x·rstd (·w).
 *
 * Group norm channels last (x [N, positions..., C]) keeps the same math
 * with vectors along the channels: a thread item is (n, a block of whole
 * groups, at least W channels where the group count allows), each lane
 * sums its channel over all positions in double, the lanes of a group are
 * then added, and one more pass normalizes with per-lane mean and scale.
 *
 * The timestep embedding repeats the reference's float32 operations one for
 * one and calls the same libm expf, sinf and cosf (marked nobuiltin so LLVM
 * neither folds nor vectorizes them): bit-exact. */
#include "kgen.h"

#include <math.h>
#include <string.h>

typedef struct {
  LLVMValueRef mhi, mlo; /* the mean as float hi + lo */
  LLVMValueRef rstd;     /* 1 / sqrt(var + eps), double */
} moments;

static LLVMTypeRef vf64(dc_kgen *g) { return LLVMVectorType(g->f64, (unsigned)g->vw); }

static LLVMValueRef fvar_get(dc_kgen *g, LLVMValueRef var) {
  return LLVMBuildLoad2(g->b, vf64(g), var, "");
}

/* acc1 += d, acc2 += d·d for d = x - k in double. */
static void accumulate(dc_kgen *g, LLVMValueRef x, LLVMValueRef kd, LLVMValueRef acc1, LLVMValueRef acc2) {
  LLVMValueRef d = LLVMBuildFSub(g->b, LLVMBuildFPExt(g->b, x, vf64(g), ""), kd, "d");
  LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, fvar_get(g, acc1), d, ""), acc1);
  LLVMBuildStore(g->b, kg_fma(g, d, d, fvar_get(g, acc2)), acc2);
}

/* Moments of len floats at p. Two accumulator pairs hide the add latency. */
static void emit_moments(dc_kgen *g, LLVMValueRef p, int64_t len, double eps, moments *out) {
  int W = g->vw;
  LLVMTypeRef vd = vf64(g);
  LLVMValueRef k = kg_load(g, p), kv = kg_splat(g, k);
  LLVMValueRef kd = LLVMBuildFPExt(g->b, kv, vd, "");
  LLVMValueRef acc[4];
  for (int i = 0; i < 4; i++) {
    acc[i] = kg_var(g, vd, "acc");
    LLVMBuildStore(g->b, kg_fconst(vd, 0.0), acc[i]);
  }
  int64_t npair = len / (2 * W);
  kg_loop l;
  kg_for(g, &l, kg_i64(g, 0), kg_i64(g, npair * 2 * W), 2 * W, "mom");
  accumulate(g, kg_vload(g, kg_gep(g, p, l.i)), kd, acc[0], acc[1]);
  accumulate(g, kg_vload(g, kg_gep(g, p, LLVMBuildNSWAdd(g->b, l.i, kg_i64(g, W), ""))), kd, acc[2], acc[3]);
  kg_end(g, &l);
  for (int64_t off = npair * 2 * W; off < len; off += W) { /* at most one full vector and a tail */
    int n = (int)(len - off < W ? len - off : W);
    LLVMValueRef x = kg_vload_n(g, g->vf32, kg_gep(g, p, kg_i64(g, off)), n, kv); /* k in unused lanes: d = 0 */
    accumulate(g, x, kd, acc[0], acc[1]);
  }
  LLVMValueRef s1 = kg_hsum(g, LLVMBuildFAdd(g->b, fvar_get(g, acc[0]), fvar_get(g, acc[2]), ""));
  LLVMValueRef s2 = kg_hsum(g, LLVMBuildFAdd(g->b, fvar_get(g, acc[1]), fvar_get(g, acc[3]), ""));
  LLVMValueRef inv = LLVMConstReal(g->f64, 1.0 / (double)len);
  LLVMValueRef m1 = LLVMBuildFMul(g->b, s1, inv, ""); /* mean - k */
  LLVMValueRef var = LLVMBuildFSub(g->b, LLVMBuildFMul(g->b, s2, inv, ""), LLVMBuildFMul(g->b, m1, m1, ""), "var");
  LLVMValueRef zero = LLVMConstReal(g->f64, 0.0);
  var = LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, LLVMRealOGT, var, zero, ""), var, zero, "");
  var = LLVMBuildFAdd(g->b, var, LLVMConstReal(g->f64, eps), "");
  LLVMValueRef sd = kg_intrinsic(g, "llvm.sqrt", g->f64, &var, 1);
  out->rstd = LLVMBuildFDiv(g->b, LLVMConstReal(g->f64, 1.0), sd, "rstd");
  LLVMValueRef mean = LLVMBuildFAdd(g->b, LLVMBuildFPExt(g->b, k, g->f64, ""), m1, "mean");
  out->mhi = LLVMBuildFPTrunc(g->b, mean, g->f32, "mhi");
  out->mlo = LLVMBuildFPTrunc(g->b, LLVMBuildFSub(g->b, mean, LLVMBuildFPExt(g->b, out->mhi, g->f64, ""), ""), g->f32,
                              "mlo");
}

/* x minus the mean (hi, then lo), vector. */
static LLVMValueRef centre(dc_kgen *g, LLVMValueRef x, const moments *mo) {
  LLVMValueRef d = LLVMBuildFSub(g->b, x, kg_splat(g, mo->mhi), "");
  return LLVMBuildFSub(g->b, d, kg_splat(g, mo->mlo), "");
}

static LLVMValueRef apply_act(dc_kgen *g, dc_act act, LLVMValueRef y) {
  if (act == ACT_SILU) return kg_silu(g, y);
  if (act == ACT_GELU) return kg_gelu(g, y);
  return y;
}

/* ---- group norm ---------------------------------------------------------- */
/* One channel's rest elements at x -> y: y = act(centre(x) · s + b). */
static void gn_channel(dc_kgen *g, LLVMValueRef x, LLVMValueRef y, int64_t rest, const moments *mo, LLVMValueRef s,
                       LLVMValueRef b, dc_act act) {
  int W = g->vw;
  LLVMValueRef sv = kg_splat(g, s), bv = kg_splat(g, b);
  int64_t nfull = rest / W;
  kg_loop l;
  kg_for(g, &l, kg_i64(g, 0), kg_i64(g, nfull * W), W, "gnv");
  LLVMValueRef v = kg_fma(g, centre(g, kg_vload(g, kg_gep(g, x, l.i)), mo), sv, bv);
  kg_vstore(g, apply_act(g, act, v), kg_gep(g, y, l.i));
  kg_end(g, &l);
  if (rest % W) {
    LLVMValueRef off = kg_i64(g, nfull * W);
    int n = (int)(rest % W);
    LLVMValueRef v2 = kg_fma(g, centre(g, kg_vload_n(g, g->vf32, kg_gep(g, x, off), n, NULL), mo), sv, bv);
    kg_vstore_n(g, apply_act(g, act, v2), kg_gep(g, y, off), n);
  }
}

/* ---- group norm, channels last ------------------------------------------- */
/* A block is gpb whole groups, cb = gpb·cpg channels, nvec vectors (the
 * last one masked when cb % W != 0).  Its positions are C floats apart, a
 * strided walk that runs far slower than NCHW's contiguous one unless the
 * runs are long (1×128×256×256 on one Zen 4 core of a shared VM, about:
 * blocks of 16 channels 6 GB/s, 32 channels 13, whole 128-channel rows 25,
 * NCHW 25), so blocks are as wide as leaves GN_ITEMS (sample, block) items
 * for the threads, and GN_MIN_RUN channels at least (or every group).  The
 * stats need every position of a group, and the kernel ABI has no barrier,
 * so a thread cannot split positions with others. */
enum {
  GN_ITEMS = 16,        /* items wanted before blocks get wider */
  GN_MIN_RUN = 32,      /* channels: two cache lines per position */
  GN_VB = 4,            /* up to 4 vectors: the 2·4 <W x double> lane sums in registers; more: in memory */
  GN_AHEAD = 16,        /* positions prefetched ahead: the hardware does not follow a C-float stride */
  GN_MAX_BLOCK = 16384, /* channels: the lane arrays live on the thread's stack, 40 bytes a channel */
};

typedef struct {
  int64_t ch, rest, cpg, cb, nvec; /* channels, positions, per group, per block, vectors per block */
  LLVMValueRef x, y;               /* sample n's block: element (p, lane) at p·ch + lane */
  LLVMValueRef tail;               /* the last vector's lanes inside the block (NULL: all) */
  /* per lane, arrays of nvec vectors: d sums, d² sums, shift (double);
   * scale, mean hi, mean lo, beta (float) */
  LLVMValueRef s1, s2, shift, lane[4];
} gn_block;

static LLVMValueRef gn_mask(const gn_block *k, int64_t v) { return v == k->nvec - 1 ? k->tail : NULL; }

/* &arr[v], arr an array of vectors of type vt (v an i64 value). */
static LLVMValueRef vec_at(dc_kgen *g, LLVMTypeRef vt, LLVMValueRef arr, LLVMValueRef v) {
  return kg_gep_t(g, vt, LLVMBuildBitCast(g->b, arr, LLVMPointerType(vt, 0), ""), v);
}

/* Element i of an array of vectors, as a scalar of type et. */
static LLVMValueRef lane_at(dc_kgen *g, LLVMTypeRef et, LLVMValueRef arr, LLVMValueRef i) {
  return kg_gep_t(g, et, LLVMBuildBitCast(g->b, arr, LLVMPointerType(et, 0), ""), i);
}

static void gn_prefetch(dc_kgen *g, const gn_block *k, LLVMValueRef p) {
  LLVMValueRef off = LLVMBuildNSWMul(g->b, LLVMBuildNSWAdd(g->b, p, kg_i64(g, GN_AHEAD), ""), kg_i64(g, k->ch), "");
  /* a plain GEP: past the end near the last positions, and prefetches do not fault */
  LLVMValueRef row = LLVMBuildBitCast(g->b, LLVMBuildGEP2(g->b, g->f32, k->x, &off, 1, ""), g->pi8, "");
  int64_t bytes = k->cb * 4;
  for (int64_t b = 0;; b += 64) { /* every line of the run: each 64 bytes and its last byte */
    LLVMValueRef at = kg_i64(g, b < bytes ? b : bytes - 1);
    LLVMValueRef args[4] = {LLVMBuildGEP2(g->b, g->i8, row, &at, 1, ""), gk_i32(g, 0), gk_i32(g, 3), gk_i32(g, 1)};
    LLVMTypeRef ty = g->pi8;
    gk_call_intr(g, "llvm.prefetch", &ty, 1, args, 4);
    if (b >= bytes) break;
  }
}

/* Vector v of the block at position row (an f32 pointer). */
static LLVMValueRef gn_load(dc_kgen *g, LLVMValueRef row, LLVMValueRef v, LLVMValueRef mask) {
  LLVMValueRef at = kg_gep(g, row, LLVMBuildNSWMul(g->b, v, kg_i64(g, g->vw), ""));
  return mask ? gk_mload(g, at, mask) : kg_vload(g, at);
}

/* Lane sums kept in registers (nvec <= GN_VB): one pass over the positions. */
static void gn_sums_reg(dc_kgen *g, const gn_block *k) {
  LLVMTypeRef vd = vf64(g);
  LLVMValueRef acc1[GN_VB], acc2[GN_VB], kd[GN_VB];
  for (int v = 0; v < k->nvec; v++) {
    acc1[v] = kg_var(g, vd, "s1");
    acc2[v] = kg_var(g, vd, "s2");
    LLVMBuildStore(g->b, kg_fconst(vd, 0.0), acc1[v]);
    LLVMBuildStore(g->b, kg_fconst(vd, 0.0), acc2[v]);
    kd[v] = LLVMBuildLoad2(g->b, vd, vec_at(g, vd, k->shift, kg_i64(g, v)), "");
  }
  kg_loop p;
  kg_for(g, &p, kg_i64(g, 0), kg_i64(g, k->rest), 1, "pos");
  LLVMValueRef row = kg_gep(g, k->x, LLVMBuildNSWMul(g->b, p.i, kg_i64(g, k->ch), ""));
  gn_prefetch(g, k, p.i);
  for (int v = 0; v < k->nvec; v++)
    accumulate(g, gn_load(g, row, kg_i64(g, v), gn_mask(k, v)), kd[v], acc1[v], acc2[v]);
  kg_end(g, &p);
  for (int v = 0; v < k->nvec; v++) {
    LLVMBuildStore(g->b, fvar_get(g, acc1[v]), vec_at(g, vd, k->s1, kg_i64(g, v)));
    LLVMBuildStore(g->b, fvar_get(g, acc2[v]), vec_at(g, vd, k->s2, kg_i64(g, v)));
  }
}

/* Lane sums in the arrays (wider blocks): per position, every vector's
 * sums are loaded, updated and stored (L1), the row read in one run. */
static void gn_sums_mem(dc_kgen *g, const gn_block *k) {
  LLVMTypeRef vd = vf64(g);
  int64_t nfull = k->tail ? k->nvec - 1 : k->nvec;
  kg_loop v, p;
  kg_for(g, &v, kg_i64(g, 0), kg_i64(g, k->nvec), 1, "zero");
  LLVMBuildStore(g->b, kg_fconst(vd, 0.0), vec_at(g, vd, k->s1, v.i));
  LLVMBuildStore(g->b, kg_fconst(vd, 0.0), vec_at(g, vd, k->s2, v.i));
  kg_end(g, &v);
  kg_for(g, &p, kg_i64(g, 0), kg_i64(g, k->rest), 1, "pos");
  LLVMValueRef row = kg_gep(g, k->x, LLVMBuildNSWMul(g->b, p.i, kg_i64(g, k->ch), ""));
  gn_prefetch(g, k, p.i);
  for (int part = 0; part < 2; part++) { /* the full vectors, then the masked tail */
    if (part == 0) kg_for(g, &v, kg_i64(g, 0), kg_i64(g, nfull), 1, "vec");
    else if (!k->tail) break;
    LLVMValueRef vi = part == 0 ? v.i : kg_i64(g, k->nvec - 1);
    LLVMValueRef kd = LLVMBuildLoad2(g->b, vd, vec_at(g, vd, k->shift, vi), "");
    accumulate(g, gn_load(g, row, vi, part ? k->tail : NULL), kd, vec_at(g, vd, k->s1, vi), vec_at(g, vd, k->s2, vi));
    if (part == 0) kg_end(g, &v);
  }
  kg_end(g, &p);
}

/* y = act(centre(x) · scale + beta) for vector vi, params[4] its lanes'
 * scale, mean hi, mean lo, beta. */
static void gn_norm_vec(dc_kgen *g, LLVMValueRef xrow, LLVMValueRef yrow, LLVMValueRef vi, LLVMValueRef mask,
                        LLVMValueRef *params, dc_act act) {
  LLVMValueRef x = gn_load(g, xrow, vi, mask);
  LLVMValueRef d = LLVMBuildFSub(g->b, LLVMBuildFSub(g->b, x, params[1], ""), params[2], "");
  LLVMValueRef y = apply_act(g, act, kg_fma(g, d, params[0], params[3]));
  LLVMValueRef at = kg_gep(g, yrow, LLVMBuildNSWMul(g->b, vi, kg_i64(g, g->vw), ""));
  if (mask) gk_mstore(g, y, at, mask);
  else kg_vstore(g, y, at);
}

static void gn_params(dc_kgen *g, const gn_block *k, LLVMValueRef vi, LLVMValueRef *params) {
  for (int i = 0; i < 4; i++) params[i] = LLVMBuildLoad2(g->b, g->vf32, vec_at(g, g->vf32, k->lane[i], vi), "");
}

/* The normalize pass: parameters in registers for a few vectors, else
 * reloaded (L1) per vector. */
static void gn_apply(dc_kgen *g, const gn_block *k, dc_act act) {
  LLVMValueRef params[GN_VB][4];
  int in_regs = k->nvec <= GN_VB;
  for (int v = 0; in_regs && v < k->nvec; v++) gn_params(g, k, kg_i64(g, v), params[v]);
  kg_loop p, v;
  kg_for(g, &p, kg_i64(g, 0), kg_i64(g, k->rest), 1, "gnpos");
  LLVMValueRef off = LLVMBuildNSWMul(g->b, p.i, kg_i64(g, k->ch), "");
  LLVMValueRef xrow = kg_gep(g, k->x, off), yrow = kg_gep(g, k->y, off);
  gn_prefetch(g, k, p.i);
  if (in_regs) {
    for (int i = 0; i < k->nvec; i++) gn_norm_vec(g, xrow, yrow, kg_i64(g, i), gn_mask(k, i), params[i], act);
  } else {
    LLVMValueRef pv[4];
    kg_for(g, &v, kg_i64(g, 0), kg_i64(g, k->tail ? k->nvec - 1 : k->nvec), 1, "vec");
    gn_params(g, k, v.i, pv);
    gn_norm_vec(g, xrow, yrow, v.i, NULL, pv, act);
    kg_end(g, &v);
    if (k->tail) {
      gn_params(g, k, kg_i64(g, k->nvec - 1), pv);
      gn_norm_vec(g, xrow, yrow, kg_i64(g, k->nvec - 1), k->tail, pv, act);
    }
  }
  kg_end(g, &p);
}

/* Whole groups per block (a divisor of groups): the widest that still
 * makes GN_ITEMS items, but at least GN_MIN_RUN channels (or every group). */
static int64_t gn_groups_per_block(int64_t batch, int64_t groups, int64_t cpg) {
  int64_t best = 0;
  for (int64_t d = 1; d <= groups; d++) {
    if (groups % d || (d * cpg < GN_MIN_RUN && d < groups)) continue;
    if (!best || batch * (groups / d) >= GN_ITEMS) best = d;
  }
  return best;
}

/* A sum of doubles over lanes [first, first + n) of arr, in lane order. */
static LLVMValueRef lane_sum(dc_kgen *g, LLVMValueRef arr, LLVMValueRef first, int64_t n) {
  LLVMValueRef t = kg_var(g, g->f64, "t");
  LLVMBuildStore(g->b, LLVMConstReal(g->f64, 0.0), t);
  kg_loop l;
  kg_for(g, &l, first, LLVMBuildNSWAdd(g->b, first, kg_i64(g, n), ""), 1, "glane");
  LLVMValueRef x = LLVMBuildLoad2(g->b, g->f64, lane_at(g, g->f64, arr, l.i), "");
  LLVMBuildStore(g->b, LLVMBuildFAdd(g->b, LLVMBuildLoad2(g->b, g->f64, t, ""), x, ""), t);
  kg_end(g, &l);
  return LLVMBuildLoad2(g->b, g->f64, t, "");
}

/* Group j of the block (channels c0 + j·cpg..): its moments from the lane
 * sums as emit_moments forms them, then each lane's scale (rstd·gamma),
 * mean (hi, lo) and beta. */
static void gn_group_stats(dc_kgen *g, const gn_block *k, LLVMValueRef c0, LLVMValueRef j, double eps) {
  LLVMValueRef first = LLVMBuildNSWMul(g->b, j, kg_i64(g, k->cpg), "lane0");
  LLVMValueRef inv = LLVMConstReal(g->f64, 1.0 / (double)(k->cpg * k->rest)), zero = LLVMConstReal(g->f64, 0.0);
  LLVMValueRef m1 = LLVMBuildFMul(g->b, lane_sum(g, k->s1, first, k->cpg), inv, ""); /* mean - shift */
  LLVMValueRef var = LLVMBuildFSub(g->b, LLVMBuildFMul(g->b, lane_sum(g, k->s2, first, k->cpg), inv, ""),
                                   LLVMBuildFMul(g->b, m1, m1, ""), "var");
  var = LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, LLVMRealOGT, var, zero, ""), var, zero, "");
  var = LLVMBuildFAdd(g->b, var, LLVMConstReal(g->f64, eps), "");
  LLVMValueRef sd = kg_intrinsic(g, "llvm.sqrt", g->f64, &var, 1);
  LLVMValueRef rstd = LLVMBuildFDiv(g->b, LLVMConstReal(g->f64, 1.0), sd, "rstd");
  LLVMValueRef shift = LLVMBuildLoad2(g->b, g->f64, lane_at(g, g->f64, k->shift, first), "");
  LLVMValueRef mean = LLVMBuildFAdd(g->b, shift, m1, "mean");
  LLVMValueRef mhi = LLVMBuildFPTrunc(g->b, mean, g->f32, "mhi");
  LLVMValueRef rest = LLVMBuildFSub(g->b, mean, LLVMBuildFPExt(g->b, mhi, g->f64, ""), "");
  LLVMValueRef mlo = LLVMBuildFPTrunc(g->b, rest, g->f32, "mlo");
  kg_loop l;
  kg_for(g, &l, first, LLVMBuildNSWAdd(g->b, first, kg_i64(g, k->cpg), ""), 1, "glane");
  LLVMValueRef c = LLVMBuildNSWAdd(g->b, c0, l.i, "c");
  LLVMValueRef gd = LLVMBuildFPExt(g->b, kg_load(g, kg_gep(g, kg_buf(g, 2), c)), g->f64, "");
  LLVMValueRef vals[4] = {LLVMBuildFPTrunc(g->b, LLVMBuildFMul(g->b, rstd, gd, ""), g->f32, "s"), mhi, mlo,
                          kg_load(g, kg_gep(g, kg_buf(g, 3), c))};
  for (int i = 0; i < 4; i++) kg_store(g, vals[i], lane_at(g, g->f32, k->lane[i], l.i));
  kg_end(g, &l);
}

/* Every lane's shift: its group's value at position 0, the element the
 * NCHW kernel shifts by (the group's first). */
static void gn_shifts(dc_kgen *g, const gn_block *k) {
  int W = g->vw;
  for (int64_t v = 0; v < k->nvec; v++) {
    LLVMValueRef lanes = LLVMBuildAdd(g->b, gk_isplat(g, gk_i32(g, v * W)), gk_iota(g), "");
    LLVMValueRef cpg = gk_isplat(g, gk_i32(g, k->cpg));
    LLVMValueRef gfirst = LLVMBuildMul(g->b, LLVMBuildSDiv(g->b, lanes, cpg, ""), cpg, "");
    LLVMValueRef m = gn_mask(k, v) ? gn_mask(k, v) : LLVMConstAllOnes(LLVMVectorType(g->i1, (unsigned)W));
    LLVMValueRef sv = LLVMBuildFPExt(g->b, gk_gather(g, k->x, gfirst, m), vf64(g), "");
    LLVMBuildStore(g->b, sv, vec_at(g, vf64(g), k->shift, kg_i64(g, v)));
  }
}

static dc_status *group_norm_nhwc(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1);
  int W = g->vw;
  gn_block k = {0};
  int64_t batch = t->dims[0], groups = dc_node_int(g->n, "groups"), numel = (int64_t)dc_type_numel(t);
  if (numel == 0) return NULL;
  k.ch = t->dims[t->rank - 1];
  k.rest = numel / (batch * k.ch);
  k.cpg = k.ch / groups;
  int64_t gpb = gn_groups_per_block(batch, groups, k.cpg), blocks = groups / gpb;
  k.cb = gpb * k.cpg;
  k.nvec = (k.cb + W - 1) / W;
  if (k.cb > GN_MAX_BLOCK)
    return dc_error(DC_ERR_UNSUPPORTED, "group_norm (nhwc): %lld channels in one block of whole groups (%lld of %lld "
                    "channels); the LLVM kernel takes at most %d", (long long)k.cb, (long long)gpb,
                    (long long)k.cpg, GN_MAX_BLOCK);
  if (k.cb % W) k.tail = gk_lanes_below(g, kg_i64(g, (k.nvec - 1) * W), kg_i64(g, k.cb));
  /* arrays of vectors (aligned as vectors), read lane by lane as well */
  LLVMTypeRef ad = LLVMArrayType(vf64(g), (unsigned)k.nvec), af = LLVMArrayType(g->vf32, (unsigned)k.nvec);
  k.s1 = kg_var(g, ad, "lane_s1"), k.s2 = kg_var(g, ad, "lane_s2"), k.shift = kg_var(g, ad, "shift");
  for (int i = 0; i < 4; i++) k.lane[i] = kg_var(g, af, "lane_param");
  double eps = dc_node_float(g->n, "eps");
  LLVMValueRef lo, hi;
  kg_split(g, kg_i64(g, batch * blocks), &lo, &hi);
  kg_loop it, j;
  kg_for(g, &it, lo, hi, 1, "block");
  /* item b·blocks + bi: sample b, channels [c0, c0 + cb) */
  LLVMValueRef b = LLVMBuildSDiv(g->b, it.i, kg_i64(g, blocks), "b");
  LLVMValueRef c0 = LLVMBuildNSWMul(g->b, LLVMBuildSRem(g->b, it.i, kg_i64(g, blocks), ""), kg_i64(g, k.cb), "c0");
  LLVMValueRef at = LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, b, kg_i64(g, k.rest * k.ch), ""), c0, "");
  k.x = kg_gep(g, kg_buf(g, 1), at);
  k.y = kg_gep(g, kg_buf(g, 0), at);
  gn_shifts(g, &k);
  if (k.nvec <= GN_VB) gn_sums_reg(g, &k);
  else gn_sums_mem(g, &k);
  kg_for(g, &j, kg_i64(g, 0), kg_i64(g, gpb), 1, "grp");
  gn_group_stats(g, &k, c0, j.i, eps);
  kg_end(g, &j);
  gn_apply(g, &k, (dc_act)dc_node_int(g->n, "act"));
  kg_end(g, &it);
  return NULL;
}

dc_status *dc_k_group_norm(dc_kgen *g) {
  if (g->n->layout == LAYOUT_NHWC) return group_norm_nhwc(g);
  const dc_type *t = kg_type(g, 1);
  int64_t batch = t->dims[0], ch = t->dims[1], groups = dc_node_int(g->n, "groups");
  int64_t numel = (int64_t)dc_type_numel(t);
  if (numel == 0) return NULL;
  int64_t rest = numel / (batch * ch), cpg = ch / groups, glen = cpg * rest;
  double eps = dc_node_float(g->n, "eps");
  dc_act act = (dc_act)dc_node_int(g->n, "act");
  LLVMValueRef y = kg_buf(g, 0), x = kg_buf(g, 1), gamma = kg_buf(g, 2), beta = kg_buf(g, 3), lo, hi;
  kg_split(g, kg_i64(g, batch * groups), &lo, &hi);
  kg_loop it;
  kg_for(g, &it, lo, hi, 1, "group");
  /* Group (b, gi) is item b·G + gi and starts at element item·glen. */
  LLVMValueRef base = LLVMBuildNSWMul(g->b, it.i, kg_i64(g, glen), "");
  LLVMValueRef c0 = LLVMBuildNSWMul(g->b, LLVMBuildSRem(g->b, it.i, kg_i64(g, groups), ""), kg_i64(g, cpg), "c0");
  moments mo;
  emit_moments(g, kg_gep(g, x, base), glen, eps, &mo);
  kg_loop cl;
  kg_for(g, &cl, kg_i64(g, 0), kg_i64(g, cpg), 1, "chan");
  LLVMValueRef c = LLVMBuildNSWAdd(g->b, c0, cl.i, "c");
  LLVMValueRef gd = LLVMBuildFPExt(g->b, kg_load(g, kg_gep(g, gamma, c)), g->f64, "");
  LLVMValueRef s = LLVMBuildFPTrunc(g->b, LLVMBuildFMul(g->b, mo.rstd, gd, ""), g->f32, "s");
  LLVMValueRef at = LLVMBuildNSWAdd(g->b, base, LLVMBuildNSWMul(g->b, cl.i, kg_i64(g, rest), ""), "");
  gn_channel(g, kg_gep(g, x, at), kg_gep(g, y, at), rest, &mo, s, kg_load(g, kg_gep(g, beta, c)), act);
  kg_end(g, &cl);
  kg_end(g, &it);
  return NULL;
}

/* ---- layer norm ---------------------------------------------------------- */
/* y = fma(centre(x) · rstd, gamma, beta) for n lanes at element off. */
static void ln_vec(dc_kgen *g, LLVMValueRef *p, LLVMValueRef off, int n, const moments *mo, LLVMValueRef rstd) {
  LLVMValueRef x = kg_vload_n(g, g->vf32, kg_gep(g, p[1], off), n, NULL);
  LLVMValueRef gm = kg_vload_n(g, g->vf32, kg_gep(g, p[2], off), n, NULL);
  LLVMValueRef bt = kg_vload_n(g, g->vf32, kg_gep(g, p[3], off), n, NULL);
  LLVMValueRef d = LLVMBuildFMul(g->b, centre(g, x, mo), rstd, "");
  kg_vstore_n(g, kg_fma(g, d, gm, bt), kg_gep(g, p[0], off), n);
}

dc_status *dc_k_layer_norm(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1);
  int64_t c = t->dims[t->rank - 1], numel = (int64_t)dc_type_numel(t);
  if (numel == 0) return NULL;
  int W = g->vw;
  double eps = dc_node_float(g->n, "eps");
  LLVMValueRef buf[4], lo, hi;
  for (int i = 0; i < 4; i++) buf[i] = kg_buf(g, i);
  kg_split(g, kg_i64(g, numel / c), &lo, &hi);
  kg_loop r;
  kg_for(g, &r, lo, hi, 1, "row");
  LLVMValueRef base = LLVMBuildNSWMul(g->b, r.i, kg_i64(g, c), "");
  LLVMValueRef p[4] = {kg_gep(g, buf[0], base), kg_gep(g, buf[1], base), buf[2], buf[3]};
  moments mo;
  emit_moments(g, p[1], c, eps, &mo);
  LLVMValueRef rstd = kg_splat(g, LLVMBuildFPTrunc(g->b, mo.rstd, g->f32, ""));
  kg_loop v;
  kg_for(g, &v, kg_i64(g, 0), kg_i64(g, c / W * W), W, "lnv");
  ln_vec(g, p, v.i, W, &mo, rstd);
  kg_end(g, &v);
  if (c % W) ln_vec(g, p, kg_i64(g, c / W * W), (int)(c % W), &mo, rstd);
  kg_end(g, &r);
  return NULL;
}

/* ---- mod_layer_norm ------------------------------------------------------ */
/* n = centre(x)·rstd (then fma with gamma, beta); y = n·(1 + scale) + shift
 * for n lanes at element off; p: y row, x row, gamma, beta, scale, shift. */
static void mln_vec(dc_kgen *g, LLVMValueRef *p, LLVMValueRef off, int n, const moments *mo, LLVMValueRef rstd,
                    int affine) {
  LLVMValueRef x = kg_vload_n(g, g->vf32, kg_gep(g, p[1], off), n, NULL);
  LLVMValueRef v = LLVMBuildFMul(g->b, centre(g, x, mo), rstd, "");
  if (affine) {
    LLVMValueRef gm = kg_vload_n(g, g->vf32, kg_gep(g, p[2], off), n, NULL);
    v = kg_fma(g, v, gm, kg_vload_n(g, g->vf32, kg_gep(g, p[3], off), n, NULL));
  }
  LLVMValueRef sc = kg_vload_n(g, g->vf32, kg_gep(g, p[4], off), n, NULL);
  LLVMValueRef sh = kg_vload_n(g, g->vf32, kg_gep(g, p[5], off), n, NULL);
  LLVMValueRef t = LLVMBuildFMul(g->b, v, LLVMBuildFAdd(g->b, kg_vf32(g, 1.0), sc, ""), "");
  kg_vstore_n(g, LLVMBuildFAdd(g->b, t, sh, "mod"), kg_gep(g, p[0], off), n);
}

/* x [B,S,C], mod [B,M] (inputs 1, 2), gamma and beta (3, 4) when given;
 * threads split the B·S rows. */
dc_status *dc_k_mod_layer_norm(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1), *tm = kg_type(g, 2);
  int64_t seq = t->dims[1], c = t->dims[2], rows = t->dims[0] * seq;
  if (rows == 0 || c == 0) return NULL;
  int W = g->vw, affine = g->n->ninputs == 4;
  double eps = dc_node_float(g->n, "eps");
  LLVMValueRef y = kg_buf(g, 0), x = kg_buf(g, 1), mod = kg_buf(g, 2), lo, hi;
  LLVMValueRef gamma = affine ? kg_buf(g, 3) : NULL, beta = affine ? kg_buf(g, 4) : NULL;
  kg_split(g, kg_i64(g, rows), &lo, &hi);
  kg_loop r;
  kg_for(g, &r, lo, hi, 1, "row");
  LLVMValueRef base = LLVMBuildNSWMul(g->b, r.i, kg_i64(g, c), "");
  LLVMValueRef modrow = LLVMBuildNSWMul(g->b, LLVMBuildSDiv(g->b, r.i, kg_i64(g, seq), "b"), kg_i64(g, tm->dims[1]), "");
  LLVMValueRef p[6] = {kg_gep(g, y, base), kg_gep(g, x, base), gamma, beta,
                       kg_gep(g, mod, LLVMBuildNSWAdd(g->b, modrow, kg_i64(g, dc_node_int(g->n, "scale_at")), "")),
                       kg_gep(g, mod, LLVMBuildNSWAdd(g->b, modrow, kg_i64(g, dc_node_int(g->n, "shift_at")), ""))};
  moments mo;
  emit_moments(g, p[1], c, eps, &mo);
  LLVMValueRef rstd = kg_splat(g, LLVMBuildFPTrunc(g->b, mo.rstd, g->f32, ""));
  kg_loop v;
  kg_for(g, &v, kg_i64(g, 0), kg_i64(g, c / W * W), W, "mlnv");
  mln_vec(g, p, v.i, W, &mo, rstd, affine);
  kg_end(g, &v);
  if (c % W) mln_vec(g, p, kg_i64(g, c / W * W), (int)(c % W), &mo, rstd, affine);
  kg_end(g, &r);
  return NULL;
}

/* ---- rms_norm ------------------------------------------------------------ */
/* acc += x·x in double. */
static void accumulate_sq(dc_kgen *g, LLVMValueRef x, LLVMValueRef acc) {
  LLVMValueRef d = LLVMBuildFPExt(g->b, x, vf64(g), "");
  LLVMBuildStore(g->b, kg_fma(g, d, d, fvar_get(g, acc)), acc);
}

/* 1 / sqrt(mean(x²) + eps) of len floats at p, as a float: two
 * accumulators hide the fma latency; the tail lanes load as zeros. */
static LLVMValueRef emit_rstd(dc_kgen *g, LLVMValueRef p, int64_t len, double eps) {
  int W = g->vw;
  LLVMValueRef acc[2];
  for (int i = 0; i < 2; i++) {
    acc[i] = kg_var(g, vf64(g), "sq");
    LLVMBuildStore(g->b, kg_fconst(vf64(g), 0.0), acc[i]);
  }
  int64_t npair = len / (2 * W);
  kg_loop l;
  kg_for(g, &l, kg_i64(g, 0), kg_i64(g, npair * 2 * W), 2 * W, "sq");
  accumulate_sq(g, kg_vload(g, kg_gep(g, p, l.i)), acc[0]);
  accumulate_sq(g, kg_vload(g, kg_gep(g, p, LLVMBuildNSWAdd(g->b, l.i, kg_i64(g, W), ""))), acc[1]);
  kg_end(g, &l);
  for (int64_t off = npair * 2 * W; off < len; off += W) {
    int n = (int)(len - off < W ? len - off : W);
    accumulate_sq(g, kg_vload_n(g, g->vf32, kg_gep(g, p, kg_i64(g, off)), n, NULL), acc[0]);
  }
  LLVMValueRef q = kg_hsum(g, LLVMBuildFAdd(g->b, fvar_get(g, acc[0]), fvar_get(g, acc[1]), ""));
  LLVMValueRef ms = kg_fconst(g->f64, eps);
  ms = LLVMBuildFAdd(g->b, LLVMBuildFMul(g->b, q, LLVMConstReal(g->f64, 1.0 / (double)len), ""), ms, "");
  LLVMValueRef sd = kg_intrinsic(g, "llvm.sqrt", g->f64, &ms, 1);
  return LLVMBuildFPTrunc(g->b, LLVMBuildFDiv(g->b, LLVMConstReal(g->f64, 1.0), sd, ""), g->f32, "rstd");
}

static void rms_vec(dc_kgen *g, LLVMValueRef y, LLVMValueRef x, LLVMValueRef w, LLVMValueRef off, int n,
                    LLVMValueRef rstd) {
  LLVMValueRef v = LLVMBuildFMul(g->b, kg_vload_n(g, g->vf32, kg_gep(g, x, off), n, NULL), rstd, "");
  if (w) v = LLVMBuildFMul(g->b, v, kg_vload_n(g, g->vf32, kg_gep(g, w, off), n, NULL), "");
  kg_vstore_n(g, v, kg_gep(g, y, off), n);
}

/* Rows of the last dim, split across threads; y = x·rstd (·w). */
dc_status *dc_k_rms_norm(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1);
  int64_t c = t->dims[t->rank - 1], numel = (int64_t)dc_type_numel(t);
  if (numel == 0) return NULL;
  int W = g->vw;
  double eps = dc_node_float(g->n, "eps");
  LLVMValueRef y = kg_buf(g, 0), x = kg_buf(g, 1), w = g->n->ninputs > 1 ? kg_buf(g, 2) : NULL, lo, hi;
  kg_split(g, kg_i64(g, numel / c), &lo, &hi);
  kg_loop r;
  kg_for(g, &r, lo, hi, 1, "row");
  LLVMValueRef base = LLVMBuildNSWMul(g->b, r.i, kg_i64(g, c), "");
  LLVMValueRef xr = kg_gep(g, x, base), yr = kg_gep(g, y, base);
  LLVMValueRef rstd = kg_splat(g, emit_rstd(g, xr, c, eps));
  kg_loop v;
  kg_for(g, &v, kg_i64(g, 0), kg_i64(g, c / W * W), W, "rmsv");
  rms_vec(g, yr, xr, w, v.i, W, rstd);
  kg_end(g, &v);
  if (c % W) rms_vec(g, yr, xr, w, kg_i64(g, c / W * W), (int)(c % W), rstd);
  kg_end(g, &r);
  return NULL;
}

/* ---- timestep embedding ---------------------------------------------------- */
/* float name(float), from libm; the call is nobuiltin so it stays a call. */
static LLVMValueRef libm_call(dc_kgen *g, const char *name, LLVMValueRef x) {
  LLVMTypeRef fty = LLVMFunctionType(g->f32, &g->f32, 1, 0);
  LLVMValueRef fn = LLVMGetNamedFunction(g->mod, name);
  if (!fn) fn = LLVMAddFunction(g->mod, name, fty);
  LLVMValueRef call = LLVMBuildCall2(g->b, fty, fn, &x, 1, name);
  unsigned kind = LLVMGetEnumAttributeKindForName("nobuiltin", strlen("nobuiltin"));
  LLVMAddCallSiteAttribute(call, LLVMAttributeFunctionIndex, LLVMCreateEnumAttribute(g->ctx, kind, 0));
  return call;
}

/* Item k = b·half + i: y[b, i or half+i] from t[b] and frequency i; the
 * thread with i = 0 also writes an odd dim's zero column. */
dc_status *dc_k_time_embed(dc_kgen *g) {
  int64_t dim = dc_node_int(g->n, "dim"), half = dim / 2, batch = (int64_t)dc_type_numel(kg_type(g, 1));
  int flip = dc_node_int(g->n, "flip_sin_to_cos") != 0;
  float neg_log = (float)-log(10000.0);
  float denom = (float)((double)half - dc_node_float(g->n, "freq_shift"));
  LLVMValueRef y = kg_buf(g, 0), t = kg_buf(g, 1), lo, hi;
  if (batch == 0) return NULL;
  if (half > 0) {
    kg_split(g, kg_i64(g, batch * half), &lo, &hi);
    kg_loop k;
    kg_for(g, &k, lo, hi, 1, "freq");
    LLVMValueRef b = LLVMBuildSDiv(g->b, k.i, kg_i64(g, half), "b"), i = LLVMBuildSRem(g->b, k.i, kg_i64(g, half), "i");
    LLVMValueRef expo = LLVMBuildFMul(g->b, kg_f32(g, neg_log), LLVMBuildSIToFP(g->b, i, g->f32, ""), "");
    LLVMValueRef freq = libm_call(g, "expf", LLVMBuildFDiv(g->b, expo, kg_f32(g, denom), ""));
    LLVMValueRef arg = LLVMBuildFMul(g->b, kg_load(g, kg_gep(g, t, b)), freq, "arg");
    LLVMValueRef row = LLVMBuildNSWMul(g->b, b, kg_i64(g, dim), "");
    LLVMValueRef first = LLVMBuildNSWAdd(g->b, row, i, ""), second = LLVMBuildNSWAdd(g->b, first, kg_i64(g, half), "");
    kg_store(g, libm_call(g, "sinf", arg), kg_gep(g, y, flip ? second : first));
    kg_store(g, libm_call(g, "cosf", arg), kg_gep(g, y, flip ? first : second));
    if (dim % 2) {
      kg_cond c;
      kg_if(g, &c, LLVMBuildICmp(g->b, LLVMIntEQ, i, kg_i64(g, 0), ""));
      kg_store(g, kg_f32(g, 0.0), kg_gep(g, y, LLVMBuildNSWAdd(g->b, row, kg_i64(g, dim - 1), "")));
      kg_endif(g, &c);
    }
    kg_end(g, &k);
  }
  return NULL;
}
