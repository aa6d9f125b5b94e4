/* k_norm.c — group norm (+ act), layer norm and the timestep embedding.
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

dc_status *dc_k_group_norm(dc_kgen *g) {
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
