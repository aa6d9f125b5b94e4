/* g_mma_gemm.c — linear and NHWC conv2d with bf16 / f16 compute on the
 * tensor cores through mma.sync m16n8k16 (dc_mma.cuh), f32 accumulation.
 * g_gemm.c reads the node (g_gemm.h) and hands it here; the epilogue
 * (bias, act, residual, geglu pairs, gated residual) is g_gemm.c's, shared.
 *
 * The GEMM is C[M, N] = A[M, K] · B[K, N] with both operands K-contiguous:
 *   linear     A = x [M][K], B's column j = w[j][:]
 *   NHWC conv  A's row m = output pixel (n, ho, wo), k = (r, q, c), c
 *              fastest (implicit GEMM: 8 consecutive k are 8 channels of
 *              one tap, 16 contiguous bytes when C % 8 == 0); B = w[O][kh][kw][C].
 * An NCHW conv's k = (c, r, q) has no contiguous runs of k, so it stays on
 * the WMMA kernel (dc_mma_gemm_takes says so; --layout nhwc is the fast one).
 *
 * The block: BM x BN x 32 tiles, warps WGM x WGN, each warp WM x WN of
 * m16n8k16 tiles (64x32 or 32x32).  Tiles per shape (pick_tile): the one
 * whose grid finishes first on sm_count SMs by a small model (waves, blocks
 * resident per SM, warps per SM needed to hide latency, a tile's operand
 * traffic per HMMA).
 *
 * Global -> shared, in 16-byte chunks of 8 consecutive k: a thread owns
 * chunks of fixed rows and a fixed k offset (4 threads per 32-k row).  An
 * operand already in the compute type (a bf16 weight under bf16 compute, a
 * bf16 activation) goes by cp.async, zero-filled (src_bytes 0) for padding
 * taps, rows past M / N and k past K; any other dtype (f32 activations,
 * f32 / fp8 / other 16-bit weights) is loaded into registers (float4 loads
 * for f32 when runs of 4 stay inside a row or tap), converted and stored as
 * one 16-byte shared store.  A multi-stage pipeline (G_STAGES: 3, or fewer
 * when K has fewer tiles): tile kt + S - 1 is issued (or fetched into
 * registers) while tile kt is computed; cp.async.wait_group S-2 and one
 * barrier per K tile.
 *
 * Shared tiles are [rows][BK + 8] 16-bit values: rows 80 bytes apart, so the
 * 8 row addresses of an ldmatrix fall in 8 distinct 4-bank groups (no
 * conflicts) and every chunk stays 16-byte aligned.  Fragments come by
 * ldmatrix.x4 (A: m16 x k16; B: two n8 x k16, no .trans since B is stored
 * n-major with k contiguous, which is the "col" operand's layout).
 *
 * After the main loop the f32 accumulators go to shared memory (over the
 * stages) as the C tile g_gemm.c's epilogue reads. */
#include "g_gemm.h"

#include <string.h>

typedef struct {
  int bm, bn, wgm, wgn; /* block tile, warp grid */
  int per_sm;           /* blocks resident per SM we count on (registers, shared memory) */
  double eff;           /* relative tensor-core efficiency of the tile (operand traffic per HMMA) */
} tile_cfg;

/* Largest first.  eff: a 64x32 warp tile loads 6 ldmatrix.x4 per 16 HMMA,
 * a 32x32 one 4 per 8; a 128x128 block moves (BM + BN) / (BM·BN) = 1/64 of
 * an element per multiply-add from global memory, 128x64 1/43, 64x64 1/32. */
static const tile_cfg tiles[] = {
    {128, 128, 2, 4, 1, 1.0},  /* 8 warps of 64x32 */
    {128, 64, 2, 2, 2, 0.85},  /* 4 warps of 64x32 */
    {64, 64, 2, 2, 4, 0.7},    /* 4 warps of 32x32 */
};
enum { NTILES = sizeof tiles / sizeof tiles[0], BK = 32, LDS = BK + 8, MAX_STAGES = 3 };
/* Shared memory a block may take and still leave room for a second block on
 * any sm_80+ GPU (sm_86's 99 KiB per block). */
enum { SMEM_BUDGET = 99 * 1024, STATIC_SMEM_MAX = 48 * 1024 };

/* How each operand reaches shared memory. */
typedef enum {
  LOAD_ASYNC,  /* 16-bit in the compute type, chunks contiguous: cp.async */
  LOAD_F32VEC, /* f32, runs of 4 contiguous: float4 loads, converted in registers */
  LOAD_SCALAR, /* anything else: 8 loads per chunk through the dtype's loader */
} load_mode;

typedef struct {
  tile_cfg t;
  int stages, threads;
  load_mode amode, bmode;
  int a_run8, b_run8; /* 8 consecutive k from a multiple of 8 are contiguous (one address per chunk) */
} plan;

int dc_mma_gemm_takes(const gemm *g, const char **why) {
  if (g->compute == DC_CUDA_COMPUTE_F32) {
    *why = "f32 compute uses the FMA kernel";
    return 0;
  }
  if (g->conv && !g->nhwc) {
    *why = "an NCHW conv's k = (c, r, q) has no contiguous 16-byte runs: it stays on the WMMA kernel";
    return 0;
  }
  *why = NULL;
  return 1;
}

static int is_compute_type(dc_dtype t, dc_cuda_compute c) {
  return (t == DT_BF16 && c == DC_CUDA_COMPUTE_BF16) || (t == DT_F16 && c == DC_CUDA_COMPUTE_F16);
}

/* The run of consecutive k that stays contiguous in memory: a linear's row,
 * a conv tap's channels. */
static int64_t run_length(const gemm *g, int is_a) { return is_a && g->conv ? g->ci : g->k; }

static load_mode mode_for(const gemm *g, dc_dtype t, int is_a) {
  int64_t run = run_length(g, is_a);
  if (is_compute_type(t, g->compute) && run % 8 == 0) return LOAD_ASYNC;
  if (t == DT_F32 && run % 4 == 0) return LOAD_F32VEC;
  return LOAD_SCALAR;
}

static uint32_t smem_stages(const tile_cfg *t, int stages) {
  return (uint32_t)stages * (uint32_t)(t->bm + t->bn) * LDS * 2u;
}
static uint32_t smem_ctile(const tile_cfg *t) { return (uint32_t)t->bm * (uint32_t)(t->bn + 4) * 4u; }
static uint32_t smem_total(const plan *p) {
  uint32_t s = smem_stages(&p->t, p->stages), c = smem_ctile(&p->t);
  return s > c ? s : c;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The model's time for tile t (arbitrary units): SMs take blocks round
 * robin, so the busiest runs ceil(blocks / sm) of them; it runs up to
 * per_sm at once, at full speed once it holds enough warps (8 when the
 * pipeline hides global latency, 16 when K is too short for it), each
 * block's work BM·BN·(K tiles + 2 for prologue and epilogue) / eff. */
static double model_time(const gemm *g, const tile_cfg *t, int sm) {
  int64_t obn = g->geglu ? t->bn / 2 : t->bn;
  int64_t blocks = ceil_div(g->m > 0 ? g->m : 1, t->bm) * ceil_div(g->outc > 0 ? g->outc : 1, obn);
  int64_t per_sm_total = ceil_div(blocks, sm);
  int64_t kt = ceil_div(g->k > 0 ? g->k : 1, BK);
  double warps_needed = kt >= MAX_STAGES ? 8.0 : 16.0;
  int64_t resident = per_sm_total < t->per_sm ? per_sm_total : t->per_sm;
  double warps = (double)resident * t->wgm * t->wgn;
  double speed = warps >= warps_needed ? 1.0 : warps / warps_needed;
  return (double)per_sm_total * t->bm * t->bn * (double)(kt + 2) / t->eff / speed;
}

static void pick(const gemm *g, const dc_cuda_options *o, plan *p) {
  int sm = dc_cuda_sm_count(o), best = 0;
  double best_time = 0;
  for (int i = 0; i < NTILES; i++) {
    double tm = model_time(g, &tiles[i], sm);
    if (i == 0 || tm < best_time) best = i, best_time = tm;
  }
  p->t = tiles[best];
  p->threads = 32 * p->t.wgm * p->t.wgn;
  int64_t kt = ceil_div(g->k > 0 ? g->k : 1, BK);
  p->stages = kt < MAX_STAGES ? (int)kt : MAX_STAGES;
  while (p->stages > 2 && smem_total(p) > SMEM_BUDGET) p->stages--;
  p->amode = mode_for(g, g->xtype, 1);
  p->bmode = mode_for(g, g->wtype, 0);
  p->a_run8 = run_length(g, 1) % 8 == 0;
  p->b_run8 = run_length(g, 0) % 8 == 0;
}

/* ---- emitted text ------------------------------------------------------- */
static const char *mode_desc(load_mode m) {
  switch (m) {
    case LOAD_ASYNC: return "cp.async";
    case LOAD_F32VEC: return "float4 loads converted in registers";
    case LOAD_SCALAR: return "scalar loads converted in registers";
  }
  return "?";
}

static void emit_defines(dc_buf *b, const gemm *g, const plan *p, const char *what) {
  int bf = g->compute == DC_CUDA_COMPUTE_BF16;
  dc_buf_printf(b,
                "#include \"dc_cuda.cuh\"\n#include \"dc_mma.cuh\"\n"
                "/* %s as a GEMM M=%lld N=%lld K=%lld; %s tensor cores (mma.sync m16n8k16), f32 accumulation;\n"
                " * tile %dx%dx%d, %dx%d warps, %d stages; x %s (%s); weights %s (%s); act %s%s%s (generated by diffc) */\n"
                "#if defined(__CUDACC__)\n#define G_UNROLL _Pragma(\"unroll\")\n#else\n#define G_UNROLL\n#endif\n",
                what, (long long)g->m, (long long)g->ncols, (long long)g->k, bf ? "bf16" : "f16", p->t.bm, p->t.bn, BK,
                p->t.wgm, p->t.wgn, p->stages, dc_dtype_name(g->xtype), mode_desc(p->amode), dc_dtype_name(g->wtype),
                mode_desc(p->bmode), dc_act_name((dc_act)g->act), g->has_bias ? ", bias" : "",
                g->has_gate ? ", gated residual" : g->has_res ? ", residual" : "");
  dc_buf_printf(b,
                "#define G_M %lld\n#define G_N %lld\n#define G_K %lld\n#define G_OUTC %lld\n"
                "#define G_BM %d\n#define G_BN %d\n#define G_BK %d\n#define G_NT %d\n"
                "#define G_OBN %d /* output columns per block */\n"
                "#define G_KT ((G_K + G_BK - 1) / G_BK > 0 ? (G_K + G_BK - 1) / G_BK : 1)\n"
                "#define G_STAGES %d\n#define G_LDS %d /* shared rows: BK + 8 16-bit values, 80 bytes */\n"
                "#define G_LDC (G_BN + 4)\n#define G_WGN %d\n#define G_WM %d\n#define G_WN %d\n"
                "#define G_FM (G_WM / 16) /* m16 tiles per warp */\n#define G_FN (G_WN / 8) /* n8 tiles per warp */\n"
                "#define G_ACH (G_BM * G_BK / 8 / G_NT) /* 16-byte A chunks per thread */\n"
                "#define G_BCH (G_BN * G_BK / 8 / G_NT)\n"
                "static_assert(G_ACH >= 1 && G_BCH >= 1 && G_NT %% 4 == 0 && G_FN %% 2 == 0, \"tile\");\n",
                (long long)g->m, (long long)g->ncols, (long long)g->k, (long long)g->outc, p->t.bm, p->t.bn, BK,
                p->threads, g->geglu ? p->t.bn / 2 : p->t.bn, p->stages, LDS, p->t.wgn, p->t.bm / p->t.wgm,
                p->t.bn / p->t.wgn);
  dc_gemm_emit_operands(b, g);
  dc_buf_printf(b, "#define G_MMA %s\n", bf ? "dc_mma_16816_bf16" : "dc_mma_16816_f16");
  /* Staging through registers rounds pairs: on the GPU one cvt.rn.bf16x2.f32
   * (f16x2) instead of dc_common's integer rounding (~6 instructions a
   * value); both round to nearest even, the same bits but for NaN payloads. */
  if (p->amode != LOAD_ASYNC || p->bmode != LOAD_ASYNC)
    dc_buf_printf(b,
                  "#if defined(__CUDACC__)\n"
                  "DC_DEVICE unsigned g_pack(float lo, float hi) {\n"
                  "  %s h = %s(lo, hi);\n  return *reinterpret_cast<unsigned *>(&h);\n}\n"
                  "#define G_PACK g_pack\n#else\n#define G_PACK %s\n#endif\n"
                  "struct __align__(16) g_u4 { unsigned v[4]; };\n",
                  bf ? "__nv_bfloat162" : "__half2", bf ? "__floats2bfloat162_rn" : "__floats2half2_rn",
                  bf ? "dc_pack_bf16x2" : "dc_pack_f16x2");
  if (p->amode == LOAD_F32VEC || p->bmode == LOAD_F32VEC) dc_buf_printf(b, "struct __align__(16) g_f4 { float v[4]; };\n");
}

/* Row addressing: g_arow_of(m) / g_brow_of(by, jl) once per owned row,
 * g_a_at / g_b_at(row, k) the element offset of (row, k), or -1 where the
 * value is zero (padding, past M, N or K).  For a conv this is the whole
 * implicit im2col. */
static void emit_rows(dc_buf *b, const gemm *g) {
  if (g->conv)
    dc_buf_printf(b,
                  "/* Implicit im2col of the NHWC input: row m = (n, ho, wo), column k = (r, q, c), c fastest. */\n"
                  "struct g_arow { long long base; int hb, wb; bool ok; };\n"
                  "DC_DEVICE g_arow g_arow_of(int m) {\n"
                  "  const int wo = m %% G_WO, ho = (m / G_WO) %% G_HO, n = m / G_P;\n"
                  "  g_arow r = {(long long)n * G_HI * G_WI * G_CI, ho * G_STRIDE - G_PT, wo * G_STRIDE - G_PL, m < G_M};\n"
                  "  return r;\n"
                  "}\n"
                  "DC_DEVICE long long g_a_at(const g_arow &r, int k) {\n"
                  "  const int c = k %% G_CI, t = k / G_CI, hi = r.hb + t / G_KW, wi = r.wb + t %% G_KW;\n"
                  "  if (!r.ok || k >= G_K || (unsigned)hi >= (unsigned)G_HI || (unsigned)wi >= (unsigned)G_WI) return -1;\n"
                  "  return r.base + ((long long)hi * G_WI + wi) * G_CI + c;\n"
                  "}\n");
  else
    dc_buf_printf(b, "struct g_arow { long long base; bool ok; };\n"
                     "DC_DEVICE g_arow g_arow_of(int m) {\n  g_arow r = {(long long)m * G_K, m < G_M};\n  return r;\n}\n"
                     "DC_DEVICE long long g_a_at(const g_arow &r, int k) { return r.ok && k < G_K ? r.base + k : -1; }\n");
  dc_buf_printf(b, "struct g_brow { long long base; bool ok; };\n"
                   "DC_DEVICE g_brow g_brow_of(int by, int jl) {\n"
                   "  const int col = g_col(by, jl);\n"
                   "  g_brow r = {(long long)(col < 0 ? 0 : col) * G_K, col >= 0};\n  return r;\n}\n"
                   "DC_DEVICE long long g_b_at(const g_brow &r, int k) { return r.ok && k < G_K ? r.base + k : -1; }\n");
}

/* One 16-byte chunk (8 consecutive k from k) of operand X: g_issue_X
 * (cp.async) or g_fetch_X (into 8 floats). */
static void emit_chunk(dc_buf *b, char x, const char *ty, const char *ld, load_mode mode, int whole_chunks) {
  if (mode == LOAD_ASYNC) {
    dc_buf_printf(b,
                  "DC_DEVICE void g_issue_%c(unsigned short *dst, const %s *src, const g_%crow &r, int k) {\n"
                  "  const long long at = g_%c_at(r, k); /* the chunk lies in one row / tap: all 8 or none */\n"
                  "  dc_cp_async_16(dst, at >= 0 ? src + at : src, at >= 0 ? 16 : 0);\n}\n",
                  x, ty, x, x);
  } else if (mode == LOAD_F32VEC && whole_chunks) {
    dc_buf_printf(b,
                  "DC_DEVICE void g_fetch_%c(float *v, const float *src, const g_%crow &r, int k) {\n"
                  "  const long long at = g_%c_at(r, k); /* the chunk lies in one row / tap: all 8 or none */\n"
                  "  G_UNROLL for (int h = 0; h < 8; h += 4) {\n"
                  "    if (at < 0) {\n      v[h] = v[h + 1] = v[h + 2] = v[h + 3] = 0.0f;\n      continue;\n    }\n"
                  "    const g_f4 f = *reinterpret_cast<const g_f4 *>(src + at + h);\n"
                  "    v[h] = f.v[0], v[h + 1] = f.v[1], v[h + 2] = f.v[2], v[h + 3] = f.v[3];\n"
                  "  }\n}\n",
                  x, x, x);
  } else if (mode == LOAD_F32VEC) {
    dc_buf_printf(b,
                  "DC_DEVICE void g_fetch_%c(float *v, const float *src, const g_%crow &r, int k) {\n"
                  "  G_UNROLL for (int h = 0; h < 8; h += 4) { /* runs of 4 lie in one row / tap */\n"
                  "    const long long at = g_%c_at(r, k + h);\n"
                  "    if (at < 0) {\n      v[h] = v[h + 1] = v[h + 2] = v[h + 3] = 0.0f;\n      continue;\n    }\n"
                  "    const g_f4 f = *reinterpret_cast<const g_f4 *>(src + at);\n"
                  "    v[h] = f.v[0], v[h + 1] = f.v[1], v[h + 2] = f.v[2], v[h + 3] = f.v[3];\n"
                  "  }\n}\n",
                  x, x, x);
  } else {
    dc_buf_printf(b,
                  "DC_DEVICE void g_fetch_%c(float *v, const %s *src, const g_%crow &r, int k) {\n"
                  "  G_UNROLL for (int h = 0; h < 8; h++) {\n"
                  "    const long long at = g_%c_at(r, k + h);\n"
                  "    v[h] = at < 0 ? 0.0f : %s(src, at);\n  }\n}\n",
                  x, ty, x, x, ld);
  }
}

/* The tile loaders: g_load(s, k0) issues (cp.async) or fetches (registers)
 * every chunk the thread owns of K tile k0 for stage s; g_store(s) writes
 * the fetched chunks, rounded to the compute type, into stage s. */
static void emit_loaders(dc_buf *b, const plan *p) {
  emit_chunk(b, 'a', "g_x_t", "G_XLD", p->amode, p->a_run8);
  emit_chunk(b, 'b', "g_w_t", "G_WLD", p->bmode, p->b_run8);
  if (p->amode != LOAD_ASYNC || p->bmode != LOAD_ASYNC)
    dc_buf_printf(b, "DC_DEVICE void g_put(unsigned short *dst, const float *v) { /* 8 values as one 16-byte store */\n"
                     "  g_u4 u;\n  G_UNROLL for (int i = 0; i < 4; i++) u.v[i] = G_PACK(v[2 * i], v[2 * i + 1]);\n"
                     "  *reinterpret_cast<g_u4 *>(dst) = u;\n}\n");
  dc_buf_printf(b,
                "/* Stage s's A tile [BM][LDS] and B tile [BN][LDS] (all A stages first). */\n"
                "DC_DEVICE unsigned short *g_as(unsigned char *smem, int s) {\n"
                "  return reinterpret_cast<unsigned short *>(smem) + s * G_BM * G_LDS;\n}\n"
                "DC_DEVICE unsigned short *g_bs(unsigned char *smem, int s) {\n"
                "  return reinterpret_cast<unsigned short *>(smem) + G_STAGES * G_BM * G_LDS + s * G_BN * G_LDS;\n}\n"
                "/* Thread t owns A rows t / 4 + i·NT/4 and B rows likewise, k offset (t %% 4)·8. */\n"
                "#define G_ROW(i) (threadIdx.x / 4 + (i) * (G_NT / 4))\n#define G_KC (threadIdx.x %% 4 * 8)\n"
                "struct g_ops {\n  const g_x_t *x;\n  const g_w_t *w;\n  g_arow a[G_ACH];\n  g_brow b[G_BCH];\n");
  if (p->amode != LOAD_ASYNC) dc_buf_printf(b, "  float ra[G_ACH][8];\n");
  if (p->bmode != LOAD_ASYNC) dc_buf_printf(b, "  float rb[G_BCH][8];\n");
  dc_buf_printf(b, "};\nDC_DEVICE void g_load(g_ops &o, unsigned char *smem, int s, int k0) {\n");
  if (p->amode == LOAD_ASYNC)
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_ACH; i++) g_issue_a(g_as(smem, s) + G_ROW(i) * G_LDS + G_KC, o.x, o.a[i], k0 + G_KC);\n");
  else
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_ACH; i++) g_fetch_a(o.ra[i], o.x, o.a[i], k0 + G_KC);\n");
  if (p->bmode == LOAD_ASYNC)
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_BCH; i++) g_issue_b(g_bs(smem, s) + G_ROW(i) * G_LDS + G_KC, o.w, o.b[i], k0 + G_KC);\n");
  else
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_BCH; i++) g_fetch_b(o.rb[i], o.w, o.b[i], k0 + G_KC);\n");
  dc_buf_printf(b, "}\nDC_DEVICE void g_store(const g_ops &o, unsigned char *smem, int s) {\n");
  if (p->amode != LOAD_ASYNC)
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_ACH; i++) g_put(g_as(smem, s) + G_ROW(i) * G_LDS + G_KC, o.ra[i]);\n");
  if (p->bmode != LOAD_ASYNC)
    dc_buf_printf(b, "  G_UNROLL for (int i = 0; i < G_BCH; i++) g_put(g_bs(smem, s) + G_ROW(i) * G_LDS + G_KC, o.rb[i]);\n");
  if (p->amode == LOAD_ASYNC && p->bmode == LOAD_ASYNC) dc_buf_printf(b, "  (void)o, (void)smem, (void)s;\n");
  dc_buf_printf(b, "}\n");
}

/* One K tile of the warp's WM x WN: per k16 step, A fragments by
 * ldmatrix.x4 (matrices m0-7/k0-7, m8-15/k0-7, m0-7/k8-15, m8-15/k8-15:
 * lane L gives row L & 15 at k (L >> 4)·8) and B fragments for two n8
 * tiles per ldmatrix.x4 (n0-7/k0-7, n0-7/k8-15, n8-15/k0-7, n8-15/k8-15:
 * lane L gives row (L >> 4)·8 + (L & 7) at k ((L >> 3) & 1)·8). */
static void emit_mma_tile(dc_buf *b) {
  dc_buf_printf(b,
                "DC_DEVICE void g_mma_tile(float (*acc)[G_FN][4], const unsigned short *as, const unsigned short *bs, int wm,\n"
                "                          int wn, int lane) {\n"
                "  G_UNROLL for (int kk = 0; kk < G_BK; kk += 16) {\n"
                "    unsigned af[G_FM][4], bf[G_FN][2];\n"
                "    G_UNROLL for (int i = 0; i < G_FM; i++)\n"
                "      dc_ldmatrix_x4(af[i], as + (wm * G_WM + i * 16 + (lane & 15)) * G_LDS + kk + (lane >> 4) * 8);\n"
                "    G_UNROLL for (int j = 0; j < G_FN; j += 2) {\n"
                "      unsigned t[4];\n"
                "      dc_ldmatrix_x4(t, bs + (wn * G_WN + j * 8 + (lane >> 4) * 8 + (lane & 7)) * G_LDS + kk + ((lane >> 3) & 1) * 8);\n"
                "      bf[j][0] = t[0], bf[j][1] = t[1], bf[j + 1][0] = t[2], bf[j + 1][1] = t[3];\n"
                "    }\n"
                "    G_UNROLL for (int i = 0; i < G_FM; i++) G_UNROLL for (int j = 0; j < G_FN; j++) G_MMA(acc[i][j], af[i], bf[j]);\n"
                "  }\n}\n");
}

/* The kernel: rows owned, the prologue (stages 0..S-2), the main loop, the
 * accumulators into the C tile, the epilogue. */
static void emit_kernel(dc_buf *b, const gemm *g, const plan *p, const char *name) {
  dc_gemm_emit_params(b, g, name);
  if (smem_total(p) > STATIC_SMEM_MAX)
    dc_buf_printf(b, "  DC_DYNAMIC_SMEM(g_smem);\n");
  else
    dc_buf_printf(b, "  __shared__ __align__(128) unsigned char g_smem[%u];\n", smem_total(p));
  dc_buf_printf(b,
                "  const int m0 = blockIdx.x * G_BM, by = blockIdx.y;\n"
                "  const int lane = threadIdx.x %% 32, warp = threadIdx.x / 32, wm = warp / G_WGN, wn = warp %% G_WGN;\n"
                "  g_ops o;\n"
                "  o.x = reinterpret_cast<const g_x_t *>(x);\n  o.w = w;\n"
                "  G_UNROLL for (int i = 0; i < G_ACH; i++) o.a[i] = g_arow_of(m0 + G_ROW(i));\n"
                "  G_UNROLL for (int i = 0; i < G_BCH; i++) o.b[i] = g_brow_of(by, G_ROW(i));\n"
                "  float acc[G_FM][G_FN][4];\n"
                "  G_UNROLL for (int i = 0; i < G_FM; i++) G_UNROLL for (int j = 0; j < G_FN; j++)\n"
                "    G_UNROLL for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;\n");
  if (p->stages == 1) {
    /* one K tile: nothing to overlap */
    dc_buf_printf(b, "  g_load(o, g_smem, 0, 0);\n  g_store(o, g_smem, 0);\n  dc_cp_async_commit();\n"
                     "  DC_CP_ASYNC_WAIT(0);\n  __syncthreads();\n"
                     "  g_mma_tile(acc, g_as(g_smem, 0), g_bs(g_smem, 0), wm, wn, lane);\n");
  } else {
    /* Stage (kt + S - 1) %% S was last read at iteration kt - 1, which every
     * thread finished before this iteration's barrier. */
    dc_buf_printf(b,
                  "  G_UNROLL for (int s = 0; s < G_STAGES - 1; s++) {\n"
                  "    if (s < G_KT) {\n      g_load(o, g_smem, s, s * G_BK);\n      g_store(o, g_smem, s);\n    }\n"
                  "    dc_cp_async_commit();\n  }\n"
                  "  for (int kt = 0; kt < G_KT; kt++) {\n"
                  "    DC_CP_ASYNC_WAIT(%d); /* tile kt has landed (this thread's copies) */\n"
                  "    __syncthreads(); /* ... and every thread's; stage (kt - 1) %% S is free */\n"
                  "    const int pre = kt + G_STAGES - 1, ps = pre %% G_STAGES;\n"
                  "    if (pre < G_KT) g_load(o, g_smem, ps, pre * G_BK);\n"
                  "    dc_cp_async_commit();\n"
                  "    g_mma_tile(acc, g_as(g_smem, kt %% G_STAGES), g_bs(g_smem, kt %% G_STAGES), wm, wn, lane);\n"
                  "    if (pre < G_KT) g_store(o, g_smem, ps); /* registers -> shared after the compute */\n"
                  "  }\n"
                  "  DC_CP_ASYNC_WAIT(0);\n",
                  p->stages - 2);
  }
  dc_buf_printf(b,
                "  __syncthreads(); /* every warp is done with the stages: the C tile overlays them */\n"
                "  float *cs = reinterpret_cast<float *>(g_smem);\n"
                "  {\n"
                "    const int gr = lane >> 2, tc = 2 * (lane & 3);\n"
                "    G_UNROLL for (int i = 0; i < G_FM; i++) G_UNROLL for (int j = 0; j < G_FN; j++) {\n"
                "      float *c = cs + (wm * G_WM + i * 16 + gr) * G_LDC + wn * G_WN + j * 8 + tc;\n"
                "      c[0] = acc[i][j][0], c[1] = acc[i][j][1], c[8 * G_LDC] = acc[i][j][2], c[8 * G_LDC + 1] = acc[i][j][3];\n"
                "    }\n"
                "  }\n"
                "  __syncthreads();\n");
  dc_gemm_emit_epilogue_call(b, g);
}

dc_status *dc_mma_gemm_generate(gemm *g, const dc_cuda_options *o, const char *what, const char *name,
                                dc_cuda_kernel *out) {
  const char *why;
  if (!dc_mma_gemm_takes(g, &why)) return dc_error(DC_ERR_INTERNAL, "the mma.sync GEMM was handed a %s: %s", what, why);
  plan p;
  pick(g, o, &p);
  g->bm = p.t.bm, g->bn = p.t.bn, g->bk = BK, g->threads = p.threads;
  int64_t obn = g->geglu ? p.t.bn / 2 : p.t.bn;
  int64_t gx = ceil_div(g->m, p.t.bm), gy = ceil_div(g->outc, obn);
  if (gy > 65535)
    return dc_error(DC_ERR_UNSUPPORTED, "%lld output columns need %lld column blocks; the grid allows 65535",
                    (long long)g->outc, (long long)gy);
  dc_buf b;
  dc_buf_init(&b);
  emit_defines(&b, g, &p, what);
  dc_gemm_emit_col(&b, g);
  dc_gemm_emit_res_index(&b, g);
  dc_gemm_emit_epilogue(&b, g);
  emit_rows(&b, g);
  emit_loaders(&b, &p);
  emit_mma_tile(&b);
  emit_kernel(&b, g, &p, name);
  out->grid[0] = (uint32_t)(gx > 0 ? gx : 1);
  out->grid[1] = (uint32_t)(gy > 0 ? gy : 1);
  out->grid[2] = 1;
  out->block[0] = (uint32_t)p.threads;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = smem_total(&p) > STATIC_SMEM_MAX ? smem_total(&p) : 0;
  return dc_cuda_finish(&b, name, out);
}
