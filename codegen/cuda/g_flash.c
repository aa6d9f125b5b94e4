/* g_flash.c — attention, causal_attention and attention_bias with bf16 or
 * f16 compute on mma.sync (dc_mma.cuh), FlashAttention-2's structure.  The
 * semantics are g_attention.c's (and runtime/kernels_ref_nn.c's): q [B,Sq,
 * H*D], k and v [B,Sk,H*D], out = softmax(scale q k^T (+ bias[h]) ) v per
 * batch and head; causal masks keys after their query.
 *
 * Why a second kernel: the wmma one (g_attention.c) cannot see fragment
 * layouts, so S and P go through shared memory twice per key tile, and its
 * loads are scalar.  Here everything between the loads and the store stays
 * in registers:
 *   - a block of NW warps (1..4, by Sq) owns 16*NW query rows, each warp 16;
 *     its Q fragments are read once (ldmatrix.x4) and kept;
 *   - K and V tiles of BK keys (64, or 32 when D > 128; less for short Sk)
 *     go through shared memory in two stages: tile kt+1 is in flight while
 *     tile kt is used.  16-bit inputs of the compute dtype with D and H*D
 *     multiples of 8 are copied by cp.async (16 bytes, rows past Sk and
 *     columns past D zero-filled); other inputs (f32 activations, another
 *     16-bit dtype, odd D) are loaded through registers and rounded as they
 *     are stored.  Rows are padded by 16 bytes, so the 8 rows an ldmatrix
 *     reads fall in 8 different bank groups;
 *   - S = Q K^T by mma m16n8k16 (K fragments by ldmatrix.x4 of K's rows);
 *   - the online softmax on the accumulators: a thread holds two rows (g,
 *     g + 8) of its warp's 16; row max and sum over the quad's 4 lanes by
 *     __shfl_xor_sync; exp2f with scale*log2(e) folded in (the bias times
 *     log2(e)); the sum l is kept per lane and added across the quad at
 *     the end;
 *   - P is rounded to the compute dtype in registers: S's accumulator
 *     layout is the A-fragment layout of P V's, so no shared memory;
 *   - V fragments by ldmatrix.x4.trans; O accumulates in registers and is
 *     divided by l and stored (dc_cuda_storer of the output's dtype).
 * One barrier per key tile: after waiting for tile kt, so every thread's
 * copies are visible and every warp is done with tile kt-1's stage, which
 * the next copies then overwrite.
 *
 * Masks: keys past Sk, and with causal keys past the row's query, are -inf;
 * a row whose scores in a tile are all -inf uses 0 as the max in its
 * exponents (exact zeros, not NaN), as g_attention.c.  A causal block stops
 * at the key tile of its last query, and a warp skips the tiles wholly
 * after its last row.
 *
 * Takes D <= 160 (padded to a multiple of 16; SD's 40, 64, 80, 160, Flux's
 * 128); larger heads (the VAE's 512) stay on g_attention.c's wmma kernel,
 * whose tiles fit them in shared memory.  The choice is
 * dc_cuda_flash_takes, called by dc_cuda_gen_attention. */
#include <math.h>
#include <string.h>

#include "cgen.h"

enum {
  FL_MAX_D = 160,  /* O (D/2 floats), Q (D/4 registers) and S per thread stay below 255 registers */
  FL_WARP_ROWS = 16,
  FL_MAX_WARPS = 4,
  FL_ALIGN = 128   /* each shared-memory region's start */
};

typedef struct {
  int64_t batch, heads, sq, sk, d, hd, dp; /* dp: D padded to 16 */
  float scale;
  int causal, bias;
  dc_op op;
  dc_cuda_compute compute;
  dc_dtype tin[4], tout;
  int async;      /* q, k, v staged by cp.async */
  int nw, bq, bk; /* warps, query rows and keys per tile */
  uint64_t off_k, off_v, bytes; /* Q at 0, K and V (two stages each) */
} fl_geom;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static uint64_t align_up(uint64_t v) { return (v + FL_ALIGN - 1) / FL_ALIGN * FL_ALIGN; }
static int64_t ld_row(const fl_geom *g) { return g->dp + 8; } /* 16-bit elements */

static int is_16bit(dc_dtype t) { return t == DT_BF16 || t == DT_F16; }
static int activation_dtype(dc_dtype t) { return t == DT_F32 || is_16bit(t); }

int dc_cuda_flash_takes(const dc_module *m, const dc_node *n, const dc_cuda_options *o) {
  if (o->compute == DC_CUDA_COMPUTE_F32 || n->ninputs < 3) return 0;
  const dc_type *tq = &m->nodes[n->inputs[0]].type, *tk = &m->nodes[n->inputs[1]].type;
  if (tq->rank != 3 || tk->rank != 3) return 0;
  int64_t heads = dc_node_int(n, "heads");
  if (heads < 1 || tq->dims[2] % heads) return 0;
  int64_t d = tq->dims[2] / heads;
  return d >= 1 && d <= FL_MAX_D && tq->dims[0] > 0 && tq->dims[1] > 0 && tk->dims[1] > 0;
}

static void layout(fl_geom *g) {
  uint64_t row = (uint64_t)ld_row(g) * 2;
  g->off_k = align_up((uint64_t)g->bq * row);
  g->off_v = g->off_k + align_up(2 * (uint64_t)g->bk * row);
  g->bytes = g->off_v + align_up(2 * (uint64_t)g->bk * row);
}

static dc_status *check_inputs(const dc_module *m, const dc_node *n, fl_geom *g) {
  for (int i = 0; i < n->ninputs; i++) {
    const dc_type *t = &m->nodes[n->inputs[i]].type;
    g->tin[i] = t->dtype;
    if (!activation_dtype(t->dtype) || t->rank != 3)
      return dc_error(DC_ERR_UNSUPPORTED, "attention input %d is %s[rank %d]; the kernel takes rank-3 f32, bf16 or f16 "
                      "activations", i, dc_dtype_name(t->dtype), t->rank);
  }
  g->tout = n->type.dtype;
  if (!activation_dtype(g->tout))
    return dc_error(DC_ERR_UNSUPPORTED, "attention output is %s; the kernel writes f32, bf16 or f16",
                    dc_dtype_name(g->tout));
  return NULL;
}

static dc_status *read_geom(const dc_module *m, const dc_node *n, const dc_cuda_options *o, fl_geom *g) {
  memset(g, 0, sizeof *g);
  DC_TRY(check_inputs(m, n, g));
  const dc_type *tq = &m->nodes[n->inputs[0]].type, *tk = &m->nodes[n->inputs[1]].type;
  g->op = n->op;
  g->bias = n->op == OP_ATTENTION_BIAS;
  g->causal = n->op == OP_CAUSAL_ATTENTION;
  g->batch = tq->dims[0], g->sq = tq->dims[1], g->sk = tk->dims[1], g->hd = tq->dims[2];
  g->heads = dc_node_int(n, "heads");
  g->d = g->hd / g->heads;
  if (g->causal && g->sq != g->sk)
    return dc_error(DC_ERR_MISMATCH, "causal_attention: %lld queries but %lld keys", (long long)g->sq, (long long)g->sk);
  const dc_type *tv = &m->nodes[n->inputs[2]].type;
  if (tk->dims[2] != g->hd || tv->dims[2] != g->hd || tv->dims[1] != g->sk || tk->dims[0] != g->batch ||
      tv->dims[0] != g->batch)
    return dc_error(DC_ERR_MISMATCH, "attention: q [%lld, %lld, %lld], k [%lld, %lld, %lld] and v [%lld, %lld, %lld] "
                    "do not match", (long long)g->batch, (long long)g->sq, (long long)g->hd, (long long)tk->dims[0],
                    (long long)tk->dims[1], (long long)tk->dims[2], (long long)tv->dims[0], (long long)tv->dims[1],
                    (long long)tv->dims[2]);
  const dc_type *tb = g->bias ? &m->nodes[n->inputs[3]].type : NULL;
  if (tb && (tb->dims[0] != g->heads || tb->dims[1] != g->sq || tb->dims[2] != g->sk))
    return dc_error(DC_ERR_MISMATCH, "attention_bias: the bias [%lld, %lld, %lld] is not [heads %lld, Sq %lld, Sk %lld]",
                    (long long)tb->dims[0], (long long)tb->dims[1], (long long)tb->dims[2], (long long)g->heads,
                    (long long)g->sq, (long long)g->sk);
  double scale = dc_node_float(n, "scale");
  g->scale = (float)scale;
  if (!isfinite(g->scale)) return dc_error(DC_ERR_UNSUPPORTED, "attention scale %g is not a finite float", scale);
  if (g->sq > INT32_MAX - 128 || g->sk > INT32_MAX - 128 || g->heads > 65535 || g->batch > 65535 ||
      g->hd > INT32_MAX / 128)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "attention B=%lld H=%lld Sq=%lld Sk=%lld H*D=%lld is too large for one launch (at most 65535 "
                    "batches and heads, 2^31 - 128 queries and keys, rows of 2^24 - 1 values)",
                    (long long)g->batch, (long long)g->heads, (long long)g->sq, (long long)g->sk, (long long)g->hd);
  g->compute = o->compute;
  g->dp = ceil_div(g->d, 16) * 16;
  dc_dtype want = o->compute == DC_CUDA_COMPUTE_BF16 ? DT_BF16 : DT_F16;
  g->async = g->tin[0] == want && g->tin[1] == want && g->tin[2] == want && g->d % 8 == 0 && g->hd % 8 == 0;
  g->nw = (int)(ceil_div(g->sq, FL_WARP_ROWS) < FL_MAX_WARPS ? ceil_div(g->sq, FL_WARP_ROWS) : FL_MAX_WARPS);
  g->bq = g->nw * FL_WARP_ROWS;
  g->bk = g->dp > 128 ? 32 : 64;
  while (g->bk > 16 && g->bk / 2 >= g->sk) g->bk /= 2;
  layout(g);
  return NULL;
}

/* ---- source text --------------------------------------------------------- */
static void emit_constants(dc_buf *b, const fl_geom *g) {
  const int bf16 = g->compute == DC_CUDA_COMPUTE_BF16;
  dc_buf_printf(b,
                "#include \"dc_cuda.cuh\"\n"
                "#include \"dc_mma.cuh\"\n"
                "/* %s (%s, mma.sync): B=%lld H=%lld Sq=%lld Sk=%lld D=%lld, %d warps, %dx%d tiles, K/V by %s, "
                "%llu bytes of shared memory */\n"
                "#define FL_SQ %lld\n#define FL_SK %lld\n#define FL_D %lld\n#define FL_DP %lld\n#define FL_HD %lld\n"
                "#define FL_LD %lld /* row stride of the staged tiles, 16-bit elements */\n"
                "#define FL_BQ %d\n#define FL_BK %d\n#define FL_NW %d\n#define FL_NT (32 * FL_NW)\n"
                "#define FL_NKT %lld\n#define FL_CAUSAL %d\n#define FL_BIAS %d\n"
                "#define FL_SCALE_LOG2 ((float)%.9g) /* scale * log2(e) */\n"
                "#define FL_OFF_K %llu\n#define FL_OFF_V %llu\n"

                "#define FL_MMA dc_mma_16816_%s\n"
                /* CUDA's own rounding (cvt.rn, one instruction each; the emulator's is bit-exact) */
                "#define FL_ROUND(x) %s\n"
                "#define FL_PACK(lo, hi) ((unsigned)FL_ROUND(lo) | ((unsigned)FL_ROUND(hi) << 16))\n"
                "#if defined(__CUDA_ARCH__)\n#define FL_UNROLL _Pragma(\"unroll\")\n#else\n#define FL_UNROLL\n#endif\n",
                dc_op_get(g->op)->name, dc_cuda_compute_name(g->compute), (long long)g->batch, (long long)g->heads,
                (long long)g->sq, (long long)g->sk, (long long)g->d, g->nw, g->bq, g->bk,
                g->async ? "cp.async" : "registers", (unsigned long long)g->bytes, (long long)g->sq, (long long)g->sk,
                (long long)g->d, (long long)g->dp, (long long)g->hd, (long long)ld_row(g), g->bq, g->bk, g->nw,
                (long long)ceil_div(g->sk, g->bk), g->causal, g->bias, (double)g->scale * 1.4426950408889634,
                (unsigned long long)g->off_k, (unsigned long long)g->off_v,
bf16 ? "bf16" : "f16",
                bf16 ? "__bfloat16_as_ushort(__float2bfloat16_rn(x))" : "__half_as_ushort(__float2half_rn(x))");
}

/* Staging one tile of TILE_ROWS rows (D columns, padded with zeros to DP)
 * from src (row stride HD) into t (row stride LD); rows past `rows` are 0. */
static void emit_stage(dc_buf *b, const fl_geom *g, int input) {
  const char *ct = dc_cuda_ctype(g->tin[input]);
  if (g->async) {
    dc_buf_printf(b,
                  "template <int TILE_ROWS> DC_DEVICE void fl_stage%d(unsigned short *t, const %s *src, int rows) {\n"
                  "  FL_UNROLL for (int i = 0; i < (TILE_ROWS * (FL_DP / 8) + FL_NT - 1) / FL_NT; i++) {\n"
                  "    const int c = threadIdx.x + i * FL_NT, r = c / (FL_DP / 8), col = c %% (FL_DP / 8) * 8;\n"
                  "    if (r >= TILE_ROWS) break;\n"
                  "    const bool in = r < rows && col < FL_D;\n"
                  "    dc_cp_async_16(t + r * FL_LD + col, in ? src + r * FL_HD + col : src, in ? 16 : 0);\n"
                  "  }\n"
                  "}\n",
                  input, ct);
    return;
  }
  dc_buf_printf(b,
                "template <int TILE_ROWS> DC_DEVICE void fl_stage%d(unsigned short *t, const %s *src, int rows) {\n"
                "  FL_UNROLL for (int i = 0; i < (TILE_ROWS * (FL_DP / 8) + FL_NT - 1) / FL_NT; i++) {\n"
                "    const int c = threadIdx.x + i * FL_NT, r = c / (FL_DP / 8), col = c %% (FL_DP / 8) * 8;\n"
                "    if (r >= TILE_ROWS) break;\n"
                "    unsigned w[4];\n"
                "    FL_UNROLL for (int e = 0; e < 8; e += 2) {\n"
                "      const int at = r * FL_HD + col + e;\n"
                "      const float lo = r < rows && col + e < FL_D ? %s(src, at) : 0.0f;\n"
                "      const float hi = r < rows && col + e + 1 < FL_D ? %s(src, at + 1) : 0.0f;\n"
                "      w[e / 2] = FL_PACK(lo, hi);\n"
                "    }\n"
                "    unsigned *dst = (unsigned *)(t + r * FL_LD + col);\n"
                "    FL_UNROLL for (int e = 0; e < 4; e++) dst[e] = w[e];\n"
                "  }\n"
                "}\n",
                input, ct, dc_cuda_loader(g->tin[input]), dc_cuda_loader(g->tin[input]));
}

/* S = Q K^T for the warp's 16 rows and the tile's BK keys: s[j] is the
 * accumulator of keys 8j..8j+7; K's fragments by ldmatrix.x4 over two key
 * groups of 8 and two 8-column halves of the k step. */
static const char scores_text[] =
    "DC_DEVICE void fl_scores(float s[FL_BK / 8][4], const unsigned qf[FL_DP / 16][4], const unsigned short *ks) {\n"
    "  const int lane = threadIdx.x & 31, mat = lane >> 3, row = lane & 7;\n"
    "  FL_UNROLL for (int j = 0; j < FL_BK / 8; j++) FL_UNROLL for (int e = 0; e < 4; e++) s[j][e] = 0.0f;\n"
    "  FL_UNROLL for (int j = 0; j < FL_BK / 8; j += 2) {\n"
    "    FL_UNROLL for (int kk = 0; kk < FL_DP / 16; kk++) {\n"
    "      unsigned kf[4];\n" /* matrices: (keys j, d lo), (keys j, d hi), (keys j+1, d lo), (keys j+1, d hi) */
    "      dc_ldmatrix_x4(kf, ks + ((j + (mat >> 1)) * 8 + row) * FL_LD + kk * 16 + (mat & 1) * 8);\n"
    "      FL_MMA(s[j], qf[kk], kf);\n"
    "      FL_MMA(s[j + 1], qf[kk], kf + 2);\n"
    "    }\n"
    "  }\n"
    "}\n";

/* The online softmax over one tile's scores, then P V into o.  Row g of
 * the warp is element 0, 1 of s[j], row g + 8 elements 2, 3. */
static void emit_softmax_mix(dc_buf *b, const fl_geom *g) {
  dc_buf_printf(b,
                "#if FL_BIAS\n"
                "#define FL_BIAS_AT(r, key) (q0 + (r) < FL_SQ ? %s(bias, (long long)(r) * FL_SK + (key)) * 1.4426950408889634f : 0.0f)\n"
                "#else\n#define FL_BIAS_AT(r, key) 0.0f\n#endif\n",
                g->bias ? dc_cuda_loader(g->tin[3]) : "dc_ld");
  dc_buf_printf(b, "%s",
                "/* m (log2 domain), l (this lane's part of the row sum) and o of the lane's rows\n"
                " * r0 = 16 * warp + g and r0 + 8 (relative to the block's first query q0). */\n"
                "DC_DEVICE void fl_tile(float s[FL_BK / 8][4], float m[2], float l[2], float o[FL_DP / 8][4],\n"
                "                       const unsigned short *vs, int k0, int q0, int r0, const " );
  dc_buf_printf(b, "%s *bias) {\n", g->bias ? dc_cuda_ctype(g->tin[3]) : "float");
  dc_buf_printf(b, "%s",
                "  const int lane = threadIdx.x & 31, t = lane & 3, mat = lane >> 3, row = lane & 7;\n"
                "  (void)bias;\n"
                "  float mx[2] = {-DC_INF, -DC_INF};\n"
                "  FL_UNROLL for (int j = 0; j < FL_BK / 8; j++)\n"
                "    FL_UNROLL for (int e = 0; e < 4; e++) {\n"
                "      const int r = r0 + (e >> 1) * 8, key = k0 + 8 * j + 2 * t + (e & 1);\n"
                "      const bool live = key < FL_SK && (!FL_CAUSAL || key <= q0 + r);\n"
                "      s[j][e] = live ? s[j][e] * FL_SCALE_LOG2 + FL_BIAS_AT(r, key) : -DC_INF;\n"
                "      mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);\n"
                "    }\n"
                "  float alpha[2], used[2];\n"
                "  FL_UNROLL for (int h = 0; h < 2; h++) {\n"
                "    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));\n"
                "    mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));\n"
                "    const float m_new = fmaxf(m[h], mx[h]);\n"
                "    used[h] = m_new == -DC_INF ? 0.0f : m_new; /* a row all -inf so far: exact zeros */\n"
                "    alpha[h] = exp2f(m[h] - used[h]);\n"
                "    m[h] = m_new;\n"
                "    l[h] *= alpha[h];\n"
                "  }\n"
                "  FL_UNROLL for (int n = 0; n < FL_DP / 8; n++)\n"
                "    FL_UNROLL for (int e = 0; e < 4; e++) o[n][e] *= alpha[e >> 1];\n"
                "  /* P = exp2(s - max) rounded in registers: the accumulators of key groups 2kk and\n"
                "   * 2kk + 1 are the A fragment of P V's k step kk. */\n"
                "  FL_UNROLL for (int kk = 0; kk < FL_BK / 16; kk++) {\n"
                "    float p[2][4];\n"
                "    FL_UNROLL for (int h = 0; h < 2; h++)\n"
                "      FL_UNROLL for (int e = 0; e < 4; e++) {\n"
                "        p[h][e] = exp2f(s[2 * kk + h][e] - used[e >> 1]);\n"
                "        l[e >> 1] += p[h][e];\n"
                "      }\n"
                "    const unsigned pa[4] = {FL_PACK(p[0][0], p[0][1]), FL_PACK(p[0][2], p[0][3]), FL_PACK(p[1][0], p[1][1]),\n"
                "                            FL_PACK(p[1][2], p[1][3])};\n"
                "    FL_UNROLL for (int n = 0; n < FL_DP / 8; n += 2) {\n"
                "      unsigned vf[4];\n" /* matrices: (keys lo, d n), (keys hi, d n), (keys lo, d n+1), (keys hi, d n+1) */
                "      dc_ldmatrix_x4_trans(vf, vs + (kk * 16 + (mat & 1) * 8 + row) * FL_LD + (n + (mat >> 1)) * 8);\n"
                "      FL_MMA(o[n], pa, vf);\n"
                "      FL_MMA(o[n + 1], pa, vf + 2);\n"
                "    }\n"
                "  }\n"
                "}\n");
}

static void emit_kernel(dc_buf *b, const fl_geom *g, const char *name) {
  dc_buf_printf(b, "DC_KERNEL void %s(%s *out, const %s *q, const %s *k, const %s *v", name, dc_cuda_ctype(g->tout),
                dc_cuda_ctype(g->tin[0]), dc_cuda_ctype(g->tin[1]), dc_cuda_ctype(g->tin[2]));
  if (g->bias) dc_buf_printf(b, ", const %s *bias", dc_cuda_ctype(g->tin[3]));
  dc_buf_printf(b,
                ") {\n"
                "  DC_DYNAMIC_SMEM(fl_raw);\n"
                "  unsigned short *qs = (unsigned short *)fl_raw, *ks = (unsigned short *)(fl_raw + FL_OFF_K);\n"
                "  unsigned short *vs = (unsigned short *)(fl_raw + FL_OFF_V);\n"
                "  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;\n"
                "  const int q0 = blockIdx.x * FL_BQ, rows = FL_SQ - q0 < FL_BQ ? FL_SQ - q0 : FL_BQ;\n"
                "  const long long head = (long long)blockIdx.y * FL_D;\n"
                "  const long long qrow = (long long)blockIdx.z * FL_SQ + q0, krow = (long long)blockIdx.z * FL_SK;\n"
                "  const int r0 = warp * 16 + (lane >> 2);\n"
                "  const %s *bb = %s;\n"
                "  /* causal: the key tiles up to the block's last query */\n"
                "  const int nkt = FL_CAUSAL && (q0 + rows + FL_BK - 1) / FL_BK < FL_NKT ? (q0 + rows + FL_BK - 1) / FL_BK : FL_NKT;\n"
                "  fl_stage0<FL_BQ>(qs, q + qrow * FL_HD + head, rows);\n"
                "  fl_stage1<FL_BK>(ks, k + krow * FL_HD + head, FL_SK < FL_BK ? FL_SK : FL_BK);\n"
                "  fl_stage2<FL_BK>(vs, v + krow * FL_HD + head, FL_SK < FL_BK ? FL_SK : FL_BK);\n"
                "  dc_cp_async_commit();\n"
                "  unsigned qf[FL_DP / 16][4];\n"
                "  float m[2] = {-DC_INF, -DC_INF}, l[2] = {0.0f, 0.0f}, o[FL_DP / 8][4], s[FL_BK / 8][4];\n"
                "  FL_UNROLL for (int n = 0; n < FL_DP / 8; n++) FL_UNROLL for (int e = 0; e < 4; e++) o[n][e] = 0.0f;\n"
                "  for (int kt = 0; kt < nkt; kt++) {\n"
                "    DC_CP_ASYNC_WAIT(0);\n"
                "    __syncthreads(); /* tile kt is in for every thread; every warp is done with tile kt - 1 */\n"
                "    if (kt + 1 < nkt) {\n"
                "      const int k1 = (kt + 1) * FL_BK, keys = FL_SK - k1 < FL_BK ? FL_SK - k1 : FL_BK;\n"
                "      const int next = ((kt + 1) & 1) * FL_BK * FL_LD;\n"
                "      fl_stage1<FL_BK>(ks + next, k + (krow + k1) * FL_HD + head, keys);\n"
                "      fl_stage2<FL_BK>(vs + next, v + (krow + k1) * FL_HD + head, keys);\n"
                "      dc_cp_async_commit();\n"
                "    }\n"
                "    if (kt == 0)\n"
                "      FL_UNROLL for (int kk = 0; kk < FL_DP / 16; kk++)\n"
                "        dc_ldmatrix_x4(qf[kk], qs + (warp * 16 + (lane & 15)) * FL_LD + kk * 16 + (lane >> 4) * 8);\n"
                "    const int k0 = kt * FL_BK, cur = (kt & 1) * FL_BK * FL_LD;\n"
                "    if (FL_CAUSAL && k0 > q0 + warp * 16 + 15) continue; /* every key after the warp's rows */\n"
                "    fl_scores(s, qf, ks + cur);\n"
                "    fl_tile(s, m, l, o, vs + cur, k0, q0, r0, bb);\n"
                "  }\n"
                "  FL_UNROLL for (int h = 0; h < 2; h++) {\n"
                "    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);\n"
                "    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);\n"
                "  }\n"
                "  %s *ob = out + qrow * FL_HD + head;\n"
                "  FL_UNROLL for (int n = 0; n < FL_DP / 8; n++)\n"
                "    FL_UNROLL for (int e = 0; e < 4; e++) {\n"
                "      const int r = r0 + (e >> 1) * 8, col = n * 8 + 2 * (lane & 3) + (e & 1);\n"
                "      if (r < rows && col < FL_D) %s(ob, (long long)r * FL_HD + col, o[n][e] / l[e >> 1]);\n"
                "    }\n"
                "}\n",
                g->bias ? dc_cuda_ctype(g->tin[3]) : "float",
                g->bias ? "bias + ((long long)blockIdx.y * FL_SQ + q0) * FL_SK" : "(const float *)0",
                dc_cuda_ctype(g->tout), dc_cuda_storer(g->tout));
}

dc_status *dc_cuda_gen_flash_attention(const dc_module *m, const dc_node *n, const dc_cuda_options *o,
                                       const char *name, dc_cuda_kernel *out) {
  fl_geom g;
  DC_TRY(read_geom(m, n, o, &g));
  dc_buf b;
  dc_buf_init(&b);
  emit_constants(&b, &g);
  for (int i = 0; i < 3; i++) emit_stage(&b, &g, i);
  dc_buf_printf(&b, "%s", scores_text);
  emit_softmax_mix(&b, &g);
  emit_kernel(&b, &g, name);
  out->grid[0] = (uint32_t)ceil_div(g.sq, g.bq);
  out->grid[1] = (uint32_t)g.heads;
  out->grid[2] = (uint32_t)g.batch;
  out->block[0] = (uint32_t)(32 * g.nw);
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = (uint32_t)g.bytes;
  return dc_cuda_finish(&b, name, out);
}
