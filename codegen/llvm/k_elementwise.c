/* k_elementwise.c — kernels for the elementwise ops (silu, gelu,
 * quick_gelu, gelu_tanh, clamp, scale), add and mul with numpy
 * broadcasting, geglu and gated_add; and the vector math they share with
 * other kernels' epilogues (kg_expf, kg_silu, kg_gelu, kg_quick_gelu,
 * kg_gelu_tanh).
 *
 * Every kernel here is a walk over rows of contiguous elements in vectors
 * of W lanes (a masked vector for a row's tail): the rows·ceil(len/W)
 * vectors are split evenly across threads, so a single long row and many
 * short ones balance alike.  The output may be input 0 (in-place ops): each
 * vector is loaded before the same lanes are stored. */
#include "kgen.h"

#include <math.h>

/* ---- vector math ------------------------------------------------------- */
/* Same shape as t (scalar or vector), element type e. */
static LLVMTypeRef like(LLVMTypeRef t, LLVMTypeRef e) {
  return LLVMGetTypeKind(t) == LLVMVectorTypeKind ? LLVMVectorType(e, LLVMGetVectorSize(t)) : e;
}

static LLVMValueRef sel_cmp(dc_kgen *g, LLVMRealPredicate p, LLVMValueRef a, LLVMValueRef b, LLVMValueRef then,
                            LLVMValueRef els) {
  return LLVMBuildSelect(g->b, LLVMBuildFCmp(g->b, p, a, b, ""), then, els, "");
}

static LLVMValueRef horner(dc_kgen *g, LLVMValueRef x, const double *c, int n) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef p = kg_fconst(t, c[0]);
  for (int i = 1; i < n; i++) p = kg_fma(g, p, x, kg_fconst(t, c[i]));
  return p;
}

/* x = n·ln2 + r with n = rint(x·log2 e): the magic constant 1.5·2^mant
 * rounds to an integer that then sits in the low bits of the sum. */
static LLVMValueRef reduce_ln2(dc_kgen *g, LLVMValueRef x, double magic, double ln2hi, double ln2lo, LLVMTypeRef it,
                               LLVMValueRef *r) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef mg = kg_fconst(t, magic);
  LLVMValueRef vm = LLVMBuildFAdd(g->b, LLVMBuildFMul(g->b, x, kg_fconst(t, 1.4426950408889634), ""), mg, "");
  LLVMValueRef n = LLVMBuildFSub(g->b, vm, mg, "n");
  *r = kg_fma(g, n, kg_fconst(t, -ln2hi), x);
  *r = kg_fma(g, n, kg_fconst(t, -ln2lo), *r);
  return LLVMBuildSub(g->b, LLVMBuildBitCast(g->b, vm, it, ""), LLVMBuildBitCast(g->b, mg, it, ""), "ni");
}

/* 2^n as a float of type t from integers n (exponent in range). */
static LLVMValueRef pow2(dc_kgen *g, LLVMValueRef n, int bias, int mant, LLVMTypeRef t) {
  LLVMTypeRef it = LLVMTypeOf(n);
  LLVMValueRef e = LLVMBuildShl(g->b, LLVMBuildAdd(g->b, n, kg_iconst(it, bias), ""), kg_iconst(it, mant), "");
  return LLVMBuildBitCast(g->b, e, t, "");
}

/* Cephes' expf: degree-6 polynomial on |r| <= ln2/2.  2^n is applied as two
 * halves so n may reach 128 (near overflow) and -150 (subnormal results,
 * rounded once by the last multiply). */
LLVMValueRef kg_expf(dc_kgen *g, LLVMValueRef x) {
  static const double c[] = {1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                             4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1};
  const double hi = 88.72283172607421875, lo = -104.0; /* the last float with a finite expf; below lo it is 0 */
  LLVMTypeRef t = LLVMTypeOf(x), it = like(t, g->i32);
  LLVMValueRef xc = sel_cmp(g, LLVMRealOGT, x, kg_fconst(t, hi), kg_fconst(t, hi), x);
  xc = sel_cmp(g, LLVMRealOLT, xc, kg_fconst(t, lo), kg_fconst(t, lo), xc);
  LLVMValueRef r, n = reduce_ln2(g, xc, 12582912.0, 0.693359375, -2.12194440e-4, it, &r);
  LLVMValueRef p = horner(g, r, c, 6);
  LLVMValueRef e = LLVMBuildFAdd(g->b, kg_fma(g, p, LLVMBuildFMul(g->b, r, r, ""), r), kg_fconst(t, 1.0), "");
  LLVMValueRef n1 = LLVMBuildAShr(g->b, n, kg_iconst(it, 1), "");
  LLVMValueRef n2 = LLVMBuildSub(g->b, n, n1, "");
  LLVMValueRef y = LLVMBuildFMul(g->b, LLVMBuildFMul(g->b, e, pow2(g, n1, 127, 23, t), ""), pow2(g, n2, 127, 23, t), "");
  y = sel_cmp(g, LLVMRealOGT, x, kg_fconst(t, hi), kg_fconst(t, INFINITY), y);
  return sel_cmp(g, LLVMRealOLT, x, kg_fconst(t, lo), kg_fconst(t, 0.0), y);
}

LLVMValueRef kg_silu(dc_kgen *g, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef e = kg_expf(g, LLVMBuildFNeg(g->b, x, ""));
  return LLVMBuildFDiv(g->b, x, LLVMBuildFAdd(g->b, kg_fconst(t, 1.0), e, ""), "silu");
}

LLVMValueRef kg_quick_gelu(dc_kgen *g, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef tx = LLVMBuildFMul(g->b, kg_fconst(t, 1.702f), x, "");
  LLVMValueRef e = kg_expf(g, LLVMBuildFNeg(g->b, tx, ""));
  LLVMValueRef sig = LLVMBuildFDiv(g->b, kg_fconst(t, 1.0), LLVMBuildFAdd(g->b, kg_fconst(t, 1.0), e, ""), "");
  return LLVMBuildFMul(g->b, x, sig, "quick_gelu");
}

/* e^y in double for y in [-700, 0]: Taylor to degree 9 on |r| <= ln2/2
 * (relative error < 1e-11, far below a float ulp), fdlibm's two-part ln2. */
static LLVMValueRef exp_f64(dc_kgen *g, LLVMValueRef y) {
  double c[10], f = 1.0; /* c[9 - k] = 1/k!, highest degree first */
  for (int k = 0; k <= 9; k++) {
    if (k > 1) f *= k;
    c[9 - k] = 1.0 / f;
  }
  LLVMTypeRef t = LLVMTypeOf(y), it = like(t, g->i64);
  LLVMValueRef r, n = reduce_ln2(g, y, 6755399441055744.0, 6.93147180369123816490e-01, 1.90821492927058770002e-10, it, &r);
  return LLVMBuildFMul(g->b, horner(g, r, c, 10), pow2(g, n, 1023, 52, t), "");
}

/* gelu(x) = x·Φ(x).  Φ(-t) = e^(-t²/2)·P(t)/Q(t) is Hart's rational
 * approximation (1968, as given by G. West, "Better approximations to
 * cumulative normal functions"), relative error < 1e-13 for t < 5, ~1e-9 at 7
 * where Φ is 1e-12; everything in double, so the float result is the
 * reference's 0.5·x·(1 + erf(x/√2)) rounded: checked over every float
 * >= -5, it is within one ulp and nearly always bit-exact.  Below
 * x = -5.5 the reference's 1 + erf cancels (its result keeps few digits,
 * though it is under 1e-7 there) and this is the more accurate one.  Φ(-t)
 * is 0 from t = 37 on (0 in float long before), so gelu(-inf) is NaN like
 * the reference's -inf·0. */
LLVMValueRef kg_gelu(dc_kgen *g, LLVMValueRef x) {
  static const double P[] = {3.52624965998911e-02, 0.700383064443688, 6.37396220353165, 33.912866078383,
                             112.079291497871,     221.213596169931,  220.206867912376};
  static const double Q[] = {8.83883476483184e-02, 1.75566716318264, 16.064177579207,  86.7807322029461,
                             296.564248779674,     637.333633378831, 793.826512519948, 440.413735824752};
  LLVMTypeRef ft = LLVMTypeOf(x), t = like(ft, g->f64);
  LLVMValueRef xd = LLVMBuildFPExt(g->b, x, t, "");
  LLVMValueRef t0 = kg_intrinsic(g, "llvm.fabs", t, &xd, 1), big = kg_fconst(t, 37.0);
  LLVMValueRef a = sel_cmp(g, LLVMRealOLT, t0, big, t0, big); /* NaN -> 37; x keeps the NaN */
  LLVMValueRef e = exp_f64(g, LLVMBuildFMul(g->b, LLVMBuildFMul(g->b, a, a, ""), kg_fconst(t, -0.5), ""));
  LLVMValueRef c = LLVMBuildFDiv(g->b, LLVMBuildFMul(g->b, e, horner(g, a, P, 7), ""), horner(g, a, Q, 8), "");
  c = sel_cmp(g, LLVMRealOLT, t0, big, c, kg_fconst(t, 0.0));
  LLVMValueRef phi = sel_cmp(g, LLVMRealOGT, xd, kg_fconst(t, 0.0), LLVMBuildFSub(g->b, kg_fconst(t, 1.0), c, ""), c);
  return LLVMBuildFPTrunc(g->b, LLVMBuildFMul(g->b, xd, phi, ""), ft, "gelu");
}

/* gelu_tanh(x) = 0.5·x·(1 + tanh(t)) = x·σ(2t), t = √(2/π)·(x + 0.044715·x³),
 * all in double like the reference, rounded once.  σ(2t) = 1/(1 + e^(-2t))
 * for t >= 0 and e^(2t)/(1 + e^(2t)) below, so exp_f64 always sees
 * -2|t| <= 0 and nothing cancels: every 13th float in [-5, 40] checked, it
 * is within one ulp of the reference and nearly always its bits.  Below
 * -5 the reference's own 1 + tanh(t) cancels in double (digits lost; 0
 * from about -8.2, where tanh(t) rounds to -1, so it gives -0 where this
 * gives the true value, under 1e-15): this one is the more accurate there.
 * Past |t| = 350 (|x| > 21) e^(-2|t|) underflows: σ is then 1 above and
 * exactly 0 below, so x·0 gives -0 for a finite x and NaN for -inf, as the
 * reference's 0.5·x·(1 + -1). */
LLVMValueRef kg_gelu_tanh(dc_kgen *g, LLVMValueRef x) {
  LLVMTypeRef ft = LLVMTypeOf(x), t = like(ft, g->f64);
  LLVMValueRef xd = LLVMBuildFPExt(g->b, x, t, "");
  LLVMValueRef cube = LLVMBuildFMul(g->b, LLVMBuildFMul(g->b, LLVMBuildFMul(g->b, kg_fconst(t, 0.044715), xd, ""), xd, ""),
                                    xd, "");
  LLVMValueRef tt = LLVMBuildFMul(g->b, kg_fconst(t, 0.7978845608028654), LLVMBuildFAdd(g->b, xd, cube, ""), "t");
  LLVMValueRef a = kg_intrinsic(g, "llvm.fabs", t, &tt, 1);
  LLVMValueRef arg = LLVMBuildFMul(g->b, a, kg_fconst(t, -2.0), "");
  LLVMValueRef far = LLVMBuildFCmp(g->b, LLVMRealULT, arg, kg_fconst(t, -700.0), "far"); /* NaN too */
  LLVMValueRef e = exp_f64(g, LLVMBuildSelect(g->b, far, kg_fconst(t, -700.0), arg, ""));
  LLVMValueRef up = LLVMBuildFDiv(g->b, kg_fconst(t, 1.0), LLVMBuildFAdd(g->b, kg_fconst(t, 1.0), e, ""), "");
  LLVMValueRef down = LLVMBuildSelect(g->b, far, kg_fconst(t, 0.0), LLVMBuildFMul(g->b, e, up, ""), "");
  LLVMValueRef sig = sel_cmp(g, LLVMRealOLT, tt, kg_fconst(t, 0.0), down, up);
  return LLVMBuildFPTrunc(g->b, LLVMBuildFMul(g->b, xd, sig, ""), ft, "gelu_tanh");
}

/* ---- the row walk -------------------------------------------------------- */
typedef struct walk walk;
struct walk {
  int64_t rows, len;
  /* At the start of each row this thread touches (r = row index). */
  void (*row)(dc_kgen *g, walk *w, LLVMValueRef r);
  /* n lanes (W, or the row's tail) at element offset off of the row. */
  void (*vec)(dc_kgen *g, walk *w, LLVMValueRef off, int n);
  LLVMValueRef p[4];         /* the kernel's pointers (set before the walk) */
  LLVMValueRef rp[4];        /* per-row values (set by row) */
  LLVMValueRef (*f)(dc_kgen *g, walk *w, LLVMValueRef x); /* unary: the function */
  float lo, hi;              /* clamp bounds */
  float factor;              /* scale */
  int is_mul, b_row;         /* broadcast: the op; b is a row (1) or a scalar per row (0) */
  const int64_t *seg;        /* broadcast: outer segment sizes and b strides */
  const int64_t *bstride;
  int nseg;
};

static LLVMValueRef imin(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSLT, a, b, ""), a, b, "");
}
static LLVMValueRef imax(dc_kgen *g, LLVMValueRef a, LLVMValueRef b) {
  return LLVMBuildSelect(g->b, LLVMBuildICmp(g->b, LLVMIntSGT, a, b, ""), a, b, "");
}

static void walk_emit(dc_kgen *g, walk *w) {
  int W = g->vw;
  int64_t nfull = w->len / W, tail = w->len % W, nvec = nfull + (tail != 0);
  if (w->rows == 0 || nvec == 0) return;
  LLVMValueRef lo, hi, cv = kg_i64(g, nvec);
  kg_split(g, kg_i64(g, w->rows * nvec), &lo, &hi);
  LLVMValueRef r0 = LLVMBuildSDiv(g->b, lo, cv, "");
  LLVMValueRef r1 = LLVMBuildSDiv(g->b, LLVMBuildNSWAdd(g->b, hi, kg_i64(g, nvec - 1), ""), cv, "");
  kg_loop rl;
  kg_for(g, &rl, r0, r1, 1, "row");
  if (w->row) w->row(g, w, rl.i);
  LLVMValueRef base = LLVMBuildNSWMul(g->b, rl.i, cv, "");
  LLVMValueRef vs = imax(g, LLVMBuildNSWSub(g->b, lo, base, ""), kg_i64(g, 0));
  LLVMValueRef ve = imin(g, LLVMBuildNSWSub(g->b, hi, base, ""), cv);
  kg_loop vl;
  kg_for(g, &vl, vs, imin(g, ve, kg_i64(g, nfull)), 1, "vec");
  w->vec(g, w, LLVMBuildNSWMul(g->b, vl.i, kg_i64(g, W), ""), W);
  kg_end(g, &vl);
  if (tail) {
    LLVMValueRef nf = kg_i64(g, nfull);
    LLVMValueRef has = LLVMBuildAnd(g->b, LLVMBuildICmp(g->b, LLVMIntSLE, vs, nf, ""),
                                    LLVMBuildICmp(g->b, LLVMIntSLT, nf, ve, ""), "");
    kg_cond c;
    kg_if(g, &c, has);
    w->vec(g, w, kg_i64(g, nfull * W), (int)tail);
    kg_endif(g, &c);
  }
  kg_end(g, &rl);
}

static LLVMValueRef at(dc_kgen *g, LLVMValueRef p, LLVMValueRef i) { return kg_gep(g, p, i); }
static LLVMValueRef ld(dc_kgen *g, LLVMValueRef p, int n) { return kg_vload_n(g, g->vf32, p, n, NULL); }

/* ---- unary elementwise -------------------------------------------------- */
static void unary_vec(dc_kgen *g, walk *w, LLVMValueRef off, int n) {
  LLVMValueRef x = ld(g, at(g, w->p[1], off), n);
  kg_vstore_n(g, w->f(g, w, x), at(g, w->p[0], off), n);
}

static dc_status *unary(dc_kgen *g, LLVMValueRef (*f)(dc_kgen *, walk *, LLVMValueRef), walk *w) {
  w->rows = 1;
  w->len = (int64_t)dc_type_numel(kg_type(g, 0));
  w->vec = unary_vec;
  w->f = f;
  w->p[0] = kg_buf(g, 0);
  w->p[1] = kg_buf(g, 1);
  walk_emit(g, w);
  return NULL;
}

static LLVMValueRef f_silu(dc_kgen *g, walk *w, LLVMValueRef x) { return kg_silu(g, x); }
static LLVMValueRef f_gelu(dc_kgen *g, walk *w, LLVMValueRef x) { return kg_gelu(g, x); }
static LLVMValueRef f_quick_gelu(dc_kgen *g, walk *w, LLVMValueRef x) { return kg_quick_gelu(g, x); }
static LLVMValueRef f_gelu_tanh(dc_kgen *g, walk *w, LLVMValueRef x) { return kg_gelu_tanh(g, x); }
/* one f32 multiply, as the reference: bit for bit */
static LLVMValueRef f_scale(dc_kgen *g, walk *w, LLVMValueRef x) {
  return LLVMBuildFMul(g->b, x, kg_fconst(LLVMTypeOf(x), w->factor), "");
}

/* x < lo ? lo : x > hi ? hi : x — ordered compares, so NaN passes through
 * and -0 stays -0 (minnum/maxnum would differ), exactly the reference. */
static LLVMValueRef f_clamp(dc_kgen *g, walk *w, LLVMValueRef x) {
  LLVMTypeRef t = LLVMTypeOf(x);
  LLVMValueRef lo = kg_fconst(t, w->lo), hi = kg_fconst(t, w->hi);
  return sel_cmp(g, LLVMRealOLT, x, lo, lo, sel_cmp(g, LLVMRealOGT, x, hi, hi, x));
}

dc_status *dc_k_silu(dc_kgen *g) {
  walk w = {0};
  return unary(g, f_silu, &w);
}

dc_status *dc_k_gelu(dc_kgen *g) {
  walk w = {0};
  return unary(g, f_gelu, &w);
}

dc_status *dc_k_quick_gelu(dc_kgen *g) {
  walk w = {0};
  return unary(g, f_quick_gelu, &w);
}

dc_status *dc_k_gelu_tanh(dc_kgen *g) {
  walk w = {0};
  return unary(g, f_gelu_tanh, &w);
}

dc_status *dc_k_scale(dc_kgen *g) {
  walk w = {0};
  w.factor = (float)dc_node_float(g->n, "factor");
  return unary(g, f_scale, &w);
}

dc_status *dc_k_clamp(dc_kgen *g) {
  walk w = {0};
  w.lo = (float)dc_node_float(g->n, "min");
  w.hi = (float)dc_node_float(g->n, "max");
  return unary(g, f_clamp, &w);
}

/* ---- add, mul: b broadcast onto a ----------------------------------------- */
/* a's dims, size-1 dims dropped, merged into runs of dims along which b
 * either varies with a (has_b) or is broadcast; b's stride per run.  So
 * [N,C,1,1] onto [N,C,H,W] is {N·C: b, H·W: broadcast}, [C] onto [...,C] is
 * {rows: broadcast, C: b}, equal shapes one run with b. */
typedef struct {
  int k;
  int64_t size[DC_MAX_DIMS], bstride[DC_MAX_DIMS];
  int has_b[DC_MAX_DIMS];
} bcast;

static void bcast_plan(const dc_type *a, const dc_type *b, bcast *p) {
  int off = a->rank - b->rank;
  p->k = 0;
  for (int d = 0; d < a->rank; d++) {
    int64_t ad = a->dims[d], bd = d >= off ? b->dims[d - off] : 1;
    int hb = bd == ad;
    if (ad == 1) continue;
    if (p->k && p->has_b[p->k - 1] == hb) {
      p->size[p->k - 1] *= ad;
    } else {
      p->size[p->k] = ad;
      p->has_b[p->k++] = hb;
    }
  }
  if (p->k == 0) { /* one element */
    p->k = 1;
    p->size[0] = 1;
    p->has_b[0] = 1;
  }
  int64_t s = 1;
  for (int i = p->k - 1; i >= 0; i--) {
    p->bstride[i] = p->has_b[i] ? s : 0;
    if (p->has_b[i]) s *= p->size[i];
  }
}

/* Row r of the outer runs: b's offset from r's index in each run. */
static void binary_row(dc_kgen *g, walk *w, LLVMValueRef r) {
  LLVMValueRef rem = r, boff = kg_i64(g, 0), rowoff = LLVMBuildNSWMul(g->b, r, kg_i64(g, w->len), "");
  for (int s = w->nseg - 1; s >= 0; s--) {
    LLVMValueRef sz = kg_i64(g, w->seg[s]);
    if (w->bstride[s]) {
      LLVMValueRef idx = s ? LLVMBuildURem(g->b, rem, sz, "") : rem;
      boff = LLVMBuildNSWAdd(g->b, boff, LLVMBuildNSWMul(g->b, idx, kg_i64(g, w->bstride[s]), ""), "");
    }
    if (s) rem = LLVMBuildUDiv(g->b, rem, sz, "");
  }
  w->rp[0] = at(g, w->p[0], rowoff);
  w->rp[1] = at(g, w->p[1], rowoff);
  w->rp[2] = at(g, w->p[2], boff);
  if (!w->b_row) w->rp[3] = kg_splat(g, kg_load(g, w->rp[2]));
}

static void binary_vec(dc_kgen *g, walk *w, LLVMValueRef off, int n) {
  LLVMValueRef a = ld(g, at(g, w->rp[1], off), n);
  LLVMValueRef b = w->b_row ? ld(g, at(g, w->rp[2], off), n) : w->rp[3];
  LLVMValueRef y = w->is_mul ? LLVMBuildFMul(g->b, a, b, "") : LLVMBuildFAdd(g->b, a, b, "");
  kg_vstore_n(g, y, at(g, w->rp[0], off), n);
}

static dc_status *binary(dc_kgen *g, int is_mul) {
  bcast p;
  bcast_plan(kg_type(g, 1), kg_type(g, 2), &p);
  walk w = {0};
  w.len = p.size[p.k - 1];
  w.rows = (int64_t)dc_type_numel(kg_type(g, 0)) / (w.len ? w.len : 1);
  w.is_mul = is_mul;
  w.b_row = p.has_b[p.k - 1];
  w.seg = p.size;
  w.bstride = p.bstride;
  w.nseg = p.k - 1;
  w.row = binary_row;
  w.vec = binary_vec;
  for (int i = 0; i < 3; i++) w.p[i] = kg_buf(g, i);
  walk_emit(g, &w);
  return NULL;
}

dc_status *dc_k_add(dc_kgen *g) { return binary(g, 0); }
dc_status *dc_k_mul(dc_kgen *g) { return binary(g, 1); }

/* ---- geglu: y[r, j] = x[r, j] · gelu(x[r, H + j]) -------------------------- */
static void geglu_row(dc_kgen *g, walk *w, LLVMValueRef r) {
  w->rp[0] = at(g, w->p[0], LLVMBuildNSWMul(g->b, r, kg_i64(g, w->len), ""));
  w->rp[1] = at(g, w->p[1], LLVMBuildNSWMul(g->b, r, kg_i64(g, 2 * w->len), ""));
  w->rp[2] = at(g, w->rp[1], kg_i64(g, w->len));
}

static void geglu_vec(dc_kgen *g, walk *w, LLVMValueRef off, int n) {
  LLVMValueRef a = ld(g, at(g, w->rp[1], off), n), gate = ld(g, at(g, w->rp[2], off), n);
  kg_vstore_n(g, LLVMBuildFMul(g->b, a, kg_gelu(g, gate), ""), at(g, w->rp[0], off), n);
}

dc_status *dc_k_geglu(dc_kgen *g) {
  const dc_type *t = kg_type(g, 0);
  walk w = {0};
  w.len = t->dims[t->rank - 1];
  w.rows = w.len ? (int64_t)dc_type_numel(t) / w.len : 0;
  w.row = geglu_row;
  w.vec = geglu_vec;
  w.p[0] = kg_buf(g, 0);
  w.p[1] = kg_buf(g, 1);
  walk_emit(g, &w);
  return NULL;
}

/* ---- gated_add: y[b, s, c] = x[b, s, c] + mod[b, at + c] · y[b, s, c] ---------
 * Rows of C (B·S of them); a row's gate is its sample's chunk of mod, read
 * where it lies.  The product is rounded, then added (two IEEE operations,
 * never fused): the reference's bits.  The output may be x (or y): each
 * vector is read before its lanes are written. */
static void gated_row(dc_kgen *g, walk *w, LLVMValueRef r) {
  LLVMValueRef off = LLVMBuildNSWMul(g->b, r, kg_i64(g, w->len), "");
  LLVMValueRef b = LLVMBuildSDiv(g->b, r, kg_i64(g, w->seg[0]), "b"); /* rows per sample */
  w->rp[0] = at(g, w->p[0], off);
  w->rp[1] = at(g, w->p[1], off);
  w->rp[2] = at(g, w->p[2], off);
  w->rp[3] = at(g, w->p[3], LLVMBuildNSWAdd(g->b, LLVMBuildNSWMul(g->b, b, kg_i64(g, w->seg[1]), ""),
                                            kg_i64(g, w->seg[2]), "gate"));
}

static void gated_vec(dc_kgen *g, walk *w, LLVMValueRef off, int n) {
  LLVMValueRef x = ld(g, at(g, w->rp[1], off), n), y = ld(g, at(g, w->rp[2], off), n);
  LLVMValueRef gate = ld(g, at(g, w->rp[3], off), n);
  LLVMValueRef prod = LLVMBuildFMul(g->b, gate, y, "");
  kg_vstore_n(g, LLVMBuildFAdd(g->b, x, prod, ""), at(g, w->rp[0], off), n);
}

dc_status *dc_k_gated_add(dc_kgen *g) {
  const dc_type *t = kg_type(g, 1), *tm = kg_type(g, 3);
  /* seg: rows per sample, mod's row length, the gate's offset */
  int64_t seg[3] = {t->dims[1], tm->dims[1], dc_node_int(g->n, "at")};
  walk w = {0};
  w.len = t->dims[2];
  w.rows = t->dims[0] * t->dims[1];
  w.seg = seg;
  w.row = gated_row;
  w.vec = gated_vec;
  for (int i = 0; i < 4; i++) w.p[i] = kg_buf(g, i);
  walk_emit(g, &w);
  return NULL;
}
