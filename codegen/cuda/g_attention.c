/* g_attention.c — the fused attention kernel, flash style: one block per
 * (query tile, head, batch) walks the keys in tiles with an online softmax
 * (running max m, running sum l per query row; the output rescaled by
 * exp(m_old - m_new) when the max moves), so no Sq x Sk matrix ever exists.
 *
 * Semantics are runtime/kernels_ref_nn.c's dc_ref_attention: q [B,Sq,H*D],
 * k and v [B,Sk,H*D], head h in columns [h*D, (h+1)*D) of each row;
 * out = softmax(scale * q k^T) v per batch and head.  causal_attention is
 * the same kernel with ATT_CAUSAL set: scores of keys after their query are
 * -inf (an exact 0 after the exp; key 0, in the first tile, is every
 * query's, so each row's max is finite from the first tile on), and a query
 * tile stops at the key tile of its last query.  attention_bias is the same
 * kernel with ATT_BIAS set: bias[h, query, key] is added to each score after
 * the scale, as the reference adds it, where the softmax reads the score.
 * A bias may mask keys (-1e9, finfo.min, -inf): a row whose keys in a tile
 * are all -inf takes 0 as that tile's max in the exponents, so it adds
 * exact zeros instead of NaNs (exp(-inf - -inf)).
 *
 * bf16/f16 compute with D <= 160 goes to g_flash.c's mma.sync kernel
 * instead (dc_cuda_flash_takes); what stays here:
 *
 * Two variants, by dc_cuda_options.compute:
 *   f32        FMA only (no TF32), so fp32 plans match the CPU to ~1e-5.  The
 *              query and key tiles are staged transposed ([d][row], one
 *              float of padding per row against bank conflicts); scores and
 *              the output are register-blocked, thread (tq, tk) of an 8 x 16
 *              grid owning rows tq + 8r and columns tk + 16c; the output
 *              stays in registers across key tiles.
 *   bf16/f16   tensor cores through nvcuda::wmma m16n16k16: Q, K, V rounded
 *              as they are staged (D zero-padded to a multiple of 16), S =
 *              Q K^T into an f32 accumulator stored to shared memory, the
 *              softmax by warps (one row per warp at a time), P rounded into
 *              shared memory, P V into a fresh accumulator stored to shared
 *              memory, then folded by every thread into its slice of the
 *              running output, kept in registers.  Fragments are only
 *              loaded and stored (their layout is opaque).
 * Both share the softmax step and one key/value buffer: V is staged into it
 * while the softmax runs, after the scores no longer need K.
 *
 * Per key tile the block crosses four barriers: K staged | scores | V staged
 * and softmax | P V (the wmma variant folds P V into the output at the start
 * of the next tile, before the scores overwrite that buffer).
 *
 * Launch: one block per (query tile, head, batch) of 4 warps (8 for wmma
 * with D > 128).  Tiles: 64 queries x 64 keys, smaller when the sequences
 * are shorter, when a thread would hold more than 64 output values, or when
 * shared memory would pass 128 KiB (D = 512: 16 queries).  Shared memory is
 * dynamic, at most 160 KiB so one kernel serves sm_80 (163 KiB) and sm_90
 * (227 KiB). */
#include <math.h>
#include <string.h>

#include "cgen.h"

enum {
  ATT_THREADS = 128,      /* 4 warps */
  ATT_THREADS_WIDE = 256, /* 8 warps for wmma with D > 128: half the outputs per thread */
  ATT_TQ = 8, /* f32: the thread grid over a tile, TQ rows x TK columns */
  ATT_TK = 16,
  ATT_TILE = 64,     /* preferred query and key tile */
  ATT_TILE_MIN = 16, /* the MMA step */
  ATT_MAX_REGS = 64, /* output values one thread keeps */
  ATT_ALIGN = 128,   /* each shared-memory region starts on this boundary */
  ATT_SLACK = 32     /* the kernel aligns the dynamic buffer to 32 bytes itself */
};
#define ATT_SMEM_TARGET (128u << 10)
#define ATT_SMEM_LIMIT (160u << 10)

typedef struct {
  int64_t batch, heads, sq, sk, d, hd; /* hd = H*D, the row stride of q, k, v and out */
  float scale;
  int causal;       /* causal_attention: query i sees keys 0..i */
  int bias;         /* attention_bias: input 3, [H, Sq, Sk], added to the scores */
  dc_op op;
  int mma;          /* tensor-core variant */
  dc_cuda_compute compute;
  dc_dtype in_t, bias_t, out_t; /* q/k/v, bias and output dtypes (f32, bf16 or f16) */
  int64_t dp;       /* head size padded to the MMA step (d for f32) */
  int64_t bq, bk;   /* query and key tile */
  int threads;      /* per block */
  /* shared memory, byte offsets of: the query tile, the key/value tile, the
   * rounded probabilities (wmma only), the scores (then P V for wmma), and
   * the row statistics m, l, alpha; total bytes (with the alignment slack) */
  uint64_t off_q, off_kv, off_p, off_s, off_stats, bytes;
} att_geom;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static uint64_t align_up(uint64_t v) { return (v + ATT_ALIGN - 1) / ATT_ALIGN * ATT_ALIGN; }

/* Row strides of the tiles, in elements.  The wmma variant pads 16-bit rows
 * by 8 elements and f32 rows by 4 (wmma's ldm rules, and rows that start on
 * different banks); the f32 variant pads its transposed tiles by one. */
static int64_t ld_half(const att_geom *g) { return g->dp + 8; }
static int64_t ld_p(const att_geom *g) { return g->bk + 8; }
static int64_t ld_s(const att_geom *g) {
  if (!g->mma) return g->bk;
  return (g->bk > g->dp ? g->bk : g->dp) + 4;
}

/* Output values each thread holds in registers. */
static int64_t out_regs(const att_geom *g) {
  if (g->mma) return ceil_div(g->bq * g->d, g->threads);
  return g->bq / ATT_TQ * ceil_div(g->d, ATT_TK);
}

static void layout(att_geom *g) {
  uint64_t q, kv, p, s, stats = 3 * (uint64_t)g->bq * 4;
  if (g->mma) {
    q = (uint64_t)(g->bq * ld_half(g)) * 2;
    kv = (uint64_t)(g->bk * ld_half(g)) * 2;
    p = (uint64_t)(g->bq * ld_p(g)) * 2;
    s = (uint64_t)(g->bq * ld_s(g)) * 4;
  } else {
    q = (uint64_t)(g->d * (g->bq + 1)) * 4;
    int64_t kt = g->d * (g->bk + 1), vt = g->bk * g->d;
    kv = (uint64_t)(kt > vt ? kt : vt) * 4;
    p = 0; /* the probabilities overwrite the scores */
    s = (uint64_t)(g->bq * ld_s(g)) * 4;
  }
  g->off_q = 0;
  g->off_kv = g->off_q + align_up(q);
  g->off_p = g->off_kv + align_up(kv);
  g->off_s = g->off_p + align_up(p);
  g->off_stats = g->off_s + align_up(s);
  g->bytes = g->off_stats + align_up(stats) + ATT_SLACK;
}

/* Picks the tiles: 64 x 64, halved while the sequence fits in half a tile,
 * while a thread would hold too many outputs, and while shared memory is
 * over the target. */
static void choose_tiles(att_geom *g) {
  g->bq = g->bk = ATT_TILE;
  while (g->bq > ATT_TILE_MIN && g->bq / 2 >= g->sq) g->bq /= 2;
  while (g->bk > ATT_TILE_MIN && g->bk / 2 >= g->sk) g->bk /= 2;
  while (g->bq > ATT_TILE_MIN && out_regs(g) > ATT_MAX_REGS) g->bq /= 2;
  for (layout(g); g->bytes > ATT_SMEM_TARGET && g->bq > ATT_TILE_MIN; layout(g)) g->bq /= 2;
  for (; g->bytes > ATT_SMEM_TARGET && g->bk > ATT_TILE_MIN; layout(g)) g->bk /= 2;
}

/* Reads and checks the node: operand types, the scale, the sizes the
 * kernel's int arithmetic and the launch grid can hold. */
static dc_status *read_geom(const dc_module *m, const dc_node *n, const dc_cuda_options *o, att_geom *g) {
  memset(g, 0, sizeof *g);
  const dc_type *tq = &m->nodes[n->inputs[0]].type, *tk = &m->nodes[n->inputs[1]].type;
  g->op = n->op;
  g->bias = n->op == OP_ATTENTION_BIAS;
  for (int i = 0; i < n->ninputs; i++) {
    const dc_type *t = &m->nodes[n->inputs[i]].type;
    if (!dc_cuda_float_io(t->dtype) || t->rank != 3)
      return dc_error(DC_ERR_UNSUPPORTED,
                      "attention input %d is %s[rank %d]; the kernel takes rank-3 f32, bf16 or f16 activations", i,
                      dc_dtype_name(t->dtype), t->rank);
  }
  /* q, k and v share one staging path, so one dtype (the activation dtype) */
  g->in_t = tq->dtype;
  if (tk->dtype != g->in_t || m->nodes[n->inputs[2]].type.dtype != g->in_t)
    return dc_error(DC_ERR_UNSUPPORTED, "attention: q, k and v are %s, %s and %s; the kernel reads one dtype for all three",
                    dc_dtype_name(tq->dtype), dc_dtype_name(tk->dtype), dc_dtype_name(m->nodes[n->inputs[2]].type.dtype));
  g->bias_t = g->bias ? m->nodes[n->inputs[3]].type.dtype : DT_F32;
  g->out_t = n->type.dtype;
  if (!dc_cuda_float_io(g->out_t))
    return dc_error(DC_ERR_UNSUPPORTED, "attention output must be f32, bf16 or f16, got %s", dc_dtype_name(g->out_t));
  g->batch = tq->dims[0];
  g->sq = tq->dims[1];
  g->sk = tk->dims[1];
  g->hd = tq->dims[2];
  g->heads = dc_node_int(n, "heads");
  g->causal = n->op == OP_CAUSAL_ATTENTION;
  if (g->causal && g->sq != g->sk)
    return dc_error(DC_ERR_MISMATCH, "causal_attention: %lld queries but %lld keys", (long long)g->sq, (long long)g->sk);
  if (g->heads < 1 || g->hd % g->heads || tk->dims[2] != g->hd)
    return dc_error(DC_ERR_MISMATCH, "attention: %lld heads do not split q's %lld and k's %lld columns",
                    (long long)g->heads, (long long)g->hd, (long long)tk->dims[2]);
  const dc_type *tb = g->bias ? &m->nodes[n->inputs[3]].type : NULL;
  if (tb && (tb->dims[0] != g->heads || tb->dims[1] != g->sq || tb->dims[2] != g->sk))
    return dc_error(DC_ERR_MISMATCH, "attention_bias: the bias [%lld, %lld, %lld] is not [heads %lld, Sq %lld, Sk %lld]",
                    (long long)tb->dims[0], (long long)tb->dims[1], (long long)tb->dims[2], (long long)g->heads,
                    (long long)g->sq, (long long)g->sk);
  g->d = g->hd / g->heads;
  double scale = dc_node_float(n, "scale");
  g->scale = (float)scale;
  if (!isfinite(g->scale)) return dc_error(DC_ERR_UNSUPPORTED, "attention scale %g is not a finite float", scale);
  if (g->sq > INT32_MAX - ATT_TILE || g->sk > INT32_MAX - ATT_TILE || g->heads > 65535 || g->batch > 65535)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "attention B=%lld H=%lld Sq=%lld Sk=%lld is too large for one launch (at most 65535 batches "
                    "and heads, 2^31 - 64 queries and keys)",
                    (long long)g->batch, (long long)g->heads, (long long)g->sq, (long long)g->sk);
  g->compute = o->compute;
  g->mma = o->compute != DC_CUDA_COMPUTE_F32;
  g->dp = g->mma ? ceil_div(g->d, ATT_TILE_MIN) * ATT_TILE_MIN : g->d;
  g->threads = g->mma && g->dp > 128 ? ATT_THREADS_WIDE : ATT_THREADS;
  choose_tiles(g);
  if (g->bytes > ATT_SMEM_LIMIT)
    return dc_error(DC_ERR_UNSUPPORTED,
                    "attention head size D=%lld needs %llu bytes of shared memory with %lldx%lld tiles, more than "
                    "the %u bytes one kernel may use on sm_80 and sm_90",
                    (long long)g->d, (unsigned long long)g->bytes, (long long)g->bq, (long long)g->bk,
                    ATT_SMEM_LIMIT);
  return NULL;
}

/* ---- source text --------------------------------------------------------- */
static void emit_constants(dc_buf *b, const att_geom *g) {
  dc_buf_printf(b,
                "#include \"dc_cuda.cuh\"\n"
                "/* %s (%s): B=%lld H=%lld Sq=%lld Sk=%lld D=%lld, %lldx%lld tiles, %llu bytes of shared "
                "memory */\n"
                "#define ATT_SQ %lld\n#define ATT_SK %lld\n#define ATT_D %lld\n#define ATT_HD %lld\n"
                "#define ATT_SCALE ((float)%.17g)\n"
                "#define ATT_BQ %lld\n#define ATT_BK %lld\n#define ATT_NKT %lld\n"
                "#define ATT_NT %d\n#define ATT_NW %d\n#define ATT_CAUSAL %d\n#define ATT_BIAS %d\n"
                "#define ATT_LDS %lld /* row stride of the scores */\n"
                "#define ATT_SPL %lld /* scores per lane in a row */\n"
                "#define ATT_OFF_Q %llu\n#define ATT_OFF_KV %llu\n#define ATT_OFF_P %llu\n#define ATT_OFF_S %llu\n"
                "#define ATT_OFF_STATS %llu\n",
                dc_op_get(g->op)->name, dc_cuda_compute_name(g->compute), (long long)g->batch, (long long)g->heads, (long long)g->sq,
                (long long)g->sk, (long long)g->d, (long long)g->bq, (long long)g->bk,
                (unsigned long long)g->bytes, (long long)g->sq, (long long)g->sk, (long long)g->d,
                (long long)g->hd, (double)g->scale, (long long)g->bq, (long long)g->bk,
                (long long)ceil_div(g->sk, g->bk), g->threads, g->threads / 32, g->causal, g->bias, (long long)ld_s(g),
                (long long)ceil_div(g->bk, 32), (unsigned long long)g->off_q, (unsigned long long)g->off_kv,
                (unsigned long long)g->off_p, (unsigned long long)g->off_s, (unsigned long long)g->off_stats);
  /* the operands' element types and accessors: q/k/v, bias, out (loaded as f32, the output rounded once) */
  dc_buf_printf(b, "typedef %s att_in_t;\n#define ATT_LD %s\ntypedef %s att_b_t;\n#define ATT_BLD %s\n"
                   "typedef %s att_o_t;\n#define ATT_ST %s\n",
                dc_cuda_ctype(g->in_t), dc_cuda_loader(g->in_t), dc_cuda_ctype(g->bias_t), dc_cuda_loader(g->bias_t),
                dc_cuda_ctype(g->out_t), dc_cuda_storer(g->out_t));
  if (g->mma)
    dc_buf_printf(b,
                  "#define ATT_DP %lld /* D padded to the MMA step */\n#define ATT_LDH %lld\n#define ATT_LDP %lld\n"
                  "#define ATT_OPT %lld /* output values per thread */\n",
                  (long long)g->dp, (long long)ld_half(g), (long long)ld_p(g), (long long)out_regs(g));
  else
    dc_buf_printf(b,
                  "#define ATT_LDP ATT_LDS\n#define ATT_LDQ %lld\n#define ATT_LDK %lld\n#define ATT_TQ %d\n"
                  "#define ATT_TK %d\n#define ATT_RQ %lld /* rows per thread */\n"
                  "#define ATT_CS %lld /* score columns per thread */\n"
                  "#define ATT_CO %lld /* output columns per thread */\n",
                  (long long)g->bq + 1, (long long)g->bk + 1, ATT_TQ, ATT_TK, (long long)g->bq / ATT_TQ,
                  (long long)g->bk / ATT_TK, (long long)ceil_div(g->d, ATT_TK));
}

/* The element type of the probabilities and its conversion, then the
 * softmax step both variants share. */
static void emit_softmax(dc_buf *b, const att_geom *g) {
  static const char *const p_type[] = {"float", "__nv_bfloat16", "__half"};
  static const char *const p_conv[] = {"", "__float2bfloat16_rn", "__float2half_rn"};
  dc_buf_printf(b, "typedef %s att_p;\n#define ATT_TO_P(x) %s(x)\n", p_type[g->compute], p_conv[g->compute]);
  dc_buf_printf(b, "%s",
                "#if defined(__CUDA_ARCH__)\n#define ATT_UNROLL _Pragma(\"unroll\")\n#else\n#define ATT_UNROLL\n#endif\n"
                "#if ATT_BIAS /* the row's bias (rows past Sq are padding: none), and a max of -inf taken as 0 */\n"
                "#define ATT_SCORE(v, r, j) ((v) * ATT_SCALE + (q0 + (r) < ATT_SQ ? ATT_BLD(bias, (long long)(r) * ATT_SK + (j)) : 0.0f))\n"
                "#define ATT_MAX_USED(m) ((m) == -DC_INF ? 0.0f : (m))\n"
                "#else\n"
                "#define ATT_SCORE(v, r, j) ((v) * ATT_SCALE)\n"
                "#define ATT_MAX_USED(m) (m)\n"
                "#endif\n"
                "/* One key tile of the online softmax.  Each warp takes rows r = warp, warp + NW, ...:\n"
                " * x = scale * s (+ bias[q0 + r][k0 + j] with ATT_BIAS; keys past Sk are -inf, and\n"
                " * with ATT_CAUSAL keys past the row's query q0 + r), m_new = max(m, max x),\n"
                " * p = exp(x - m_new) (written to p, which may be s itself), alpha = exp(m - m_new)\n"
                " * rescales what the row has summed so far: l = l * alpha + sum p.  bias points at\n"
                " * the block's first query row of its head's [Sq, Sk] bias (NULL without ATT_BIAS). */\n"
                "DC_DEVICE void att_softmax(const float *s, att_p *p, float *row_m, float *row_l, float *row_a, int k0, int q0,\n"
                "                           const att_b_t *bias) {\n"
                "  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;\n"
                "  for (int r = warp; r < ATT_BQ; r += ATT_NW) {\n"
                "    float x[ATT_SPL], mx = -DC_INF;\n"
                "    ATT_UNROLL for (int c = 0; c < ATT_SPL; c++) {\n"
                "      const int j = lane + 32 * c;\n"
                "      x[c] = j < ATT_BK && k0 + j < ATT_SK && (!ATT_CAUSAL || k0 + j <= q0 + r) ? ATT_SCORE(s[r * ATT_LDS + j], r, k0 + j)\n"
                "                                                                             : -DC_INF;\n"
                "      mx = fmaxf(mx, x[c]);\n"
                "    }\n"
                "    const float m_old = row_m[r], m_new = fmaxf(m_old, dc_warp_max(mx)), m_used = ATT_MAX_USED(m_new);\n"
                "    float sum = 0.0f;\n"
                "    ATT_UNROLL for (int c = 0; c < ATT_SPL; c++) {\n"
                "      const int j = lane + 32 * c;\n"
                "      const float e = expf(x[c] - m_used);\n"
                "      sum += e;\n"
                "      if (j < ATT_BK) p[r * ATT_LDP + j] = ATT_TO_P(e);\n"
                "    }\n"
                "    sum = dc_warp_sum(sum);\n"
                "    if (lane == 0) {\n"
                "      const float alpha = expf(m_old - m_used);\n"
                "      row_a[r] = alpha;\n"
                "      row_l[r] = row_l[r] * alpha + sum;\n"
                "      row_m[r] = m_new;\n"
                "    }\n"
                "  }\n"
                "}\n");
}

/* The kernel's opening: aligned shared-memory regions, the tile's rows,
 * this block's base pointers into q, k, v, out and (attention_bias) the bias. */
static void emit_prologue(dc_buf *b, const char *name, const char *tile_type, int bias) {
  dc_buf_printf(b,
                "DC_KERNEL void %s(att_o_t *out, const att_in_t *q, const att_in_t *k, const att_in_t *v%s) {\n"
                "  DC_DYNAMIC_SMEM(att_raw);\n"
                "  unsigned char *smem = att_raw + ((32u - (unsigned)((unsigned long long)att_raw & 31u)) & 31u);\n"
                "  %s *qs = (%s *)(smem + ATT_OFF_Q), *kv = (%s *)(smem + ATT_OFF_KV);\n"
                "  float *s = (float *)(smem + ATT_OFF_S);\n"
                "  float *row_m = (float *)(smem + ATT_OFF_STATS), *row_l = row_m + ATT_BQ, *row_a = row_l + ATT_BQ;\n"
                "  const int q0 = blockIdx.x * ATT_BQ, rows = ATT_SQ - q0 < ATT_BQ ? ATT_SQ - q0 : ATT_BQ;\n"
                "  const long long head = blockIdx.y * ATT_D;\n"
                "  const att_in_t *qb = q + ((long long)blockIdx.z * ATT_SQ + q0) * ATT_HD + head;\n"
                "  const att_in_t *kb = k + (long long)blockIdx.z * ATT_SK * ATT_HD + head;\n"
                "  const att_in_t *vb = v + (long long)blockIdx.z * ATT_SK * ATT_HD + head;\n"
                "  att_o_t *ob = out + ((long long)blockIdx.z * ATT_SQ + q0) * ATT_HD + head;\n"
                "  const att_b_t *bb = %s;\n"
                "  /* causal: the key tiles up to this tile's last query */\n"
                "  const int nkt = ATT_CAUSAL && (q0 + rows + ATT_BK - 1) / ATT_BK < ATT_NKT ? (q0 + rows + ATT_BK - 1) / ATT_BK\n"
                "                                                                            : ATT_NKT;\n"
                "  for (int i = threadIdx.x; i < ATT_BQ; i += ATT_NT) {\n"
                "    row_m[i] = -DC_INF;\n"
                "    row_l[i] = 0.0f;\n"
                "  }\n",
                name, bias ? ", const att_b_t *bias" : "", tile_type, tile_type, tile_type,
                bias ? "bias + ((long long)blockIdx.y * ATT_SQ + q0) * ATT_SK" : "(const att_b_t *)0");
}

/* ---- f32: FMA ------------------------------------------------------------ */
static const char f32_helpers[] =
    "/* rows x D of src (row stride HD) into t[d * ld + i], transposed; rows past `rows` are 0. */\n"
    "DC_DEVICE void att_stage_t(float *t, int ld, int tile_rows, const att_in_t *src, int rows) {\n"
    "  for (int e = threadIdx.x; e < tile_rows * ATT_D; e += ATT_NT) {\n"
    "    const int i = e / ATT_D, d = e % ATT_D;\n"
    "    t[d * ld + i] = i < rows ? ATT_LD(src, (long long)i * ATT_HD + d) : 0.0f;\n"
    "  }\n"
    "}\n"
    "/* rows x D of src into t[i * D + d]; rows past `rows` are 0. */\n"
    "DC_DEVICE void att_stage(float *t, const att_in_t *src, int rows) {\n"
    "  for (int e = threadIdx.x; e < ATT_BK * ATT_D; e += ATT_NT) {\n"
    "    const int i = e / ATT_D;\n"
    "    t[e] = i < rows ? ATT_LD(src, (long long)i * ATT_HD + e % ATT_D) : 0.0f;\n"
    "  }\n"
    "}\n"
    "/* s[i][j] = q_i . k_j for the thread's rows tq + TQ*r and columns tk + TK*c, summed over d in order. */\n"
    "DC_DEVICE void att_scores(const float *qt, const float *kt, float *s, int tq, int tk) {\n"
    "  float acc[ATT_RQ][ATT_CS];\n"
    "  ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) ATT_UNROLL for (int c = 0; c < ATT_CS; c++) acc[r][c] = 0.0f;\n"
    "  for (int d = 0; d < ATT_D; d++) {\n"
    "    float a[ATT_RQ], bk[ATT_CS];\n"
    "    ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) a[r] = qt[d * ATT_LDQ + tq + ATT_TQ * r];\n"
    "    ATT_UNROLL for (int c = 0; c < ATT_CS; c++) bk[c] = kt[d * ATT_LDK + tk + ATT_TK * c];\n"
    "    ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) ATT_UNROLL for (int c = 0; c < ATT_CS; c++) acc[r][c] += a[r] * bk[c];\n"
    "  }\n"
    "  ATT_UNROLL for (int r = 0; r < ATT_RQ; r++)\n"
    "    ATT_UNROLL for (int c = 0; c < ATT_CS; c++) s[(tq + ATT_TQ * r) * ATT_LDS + tk + ATT_TK * c] = acc[r][c];\n"
    "}\n"
    "/* o = o * alpha + p v over the tile's first `keys` keys (p is 0 past them). */\n"
    "DC_DEVICE void att_mix(float (*o)[ATT_CO], const float *p, const float *vt, const float *row_a, int keys, int tq, int tk) {\n"
    "  ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) {\n"
    "    const float alpha = row_a[tq + ATT_TQ * r];\n"
    "    ATT_UNROLL for (int c = 0; c < ATT_CO; c++) o[r][c] *= alpha;\n"
    "  }\n"
    "  for (int j = 0; j < keys; j++) {\n"
    "    float a[ATT_RQ], bv[ATT_CO];\n"
    "    ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) a[r] = p[(tq + ATT_TQ * r) * ATT_LDS + j];\n"
    "    ATT_UNROLL for (int c = 0; c < ATT_CO; c++) {\n"
    "      const int d = tk + ATT_TK * c;\n"
    "      bv[c] = d < ATT_D ? vt[j * ATT_D + d] : 0.0f;\n"
    "    }\n"
    "    ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) ATT_UNROLL for (int c = 0; c < ATT_CO; c++) o[r][c] += a[r] * bv[c];\n"
    "  }\n"
    "}\n";

static const char f32_body[] =
    "  const int tq = threadIdx.x / ATT_TK, tk = threadIdx.x % ATT_TK;\n"
    "  att_stage_t(qs, ATT_LDQ, ATT_BQ, qb, rows);\n"
    "  float o[ATT_RQ][ATT_CO];\n"
    "  ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) ATT_UNROLL for (int c = 0; c < ATT_CO; c++) o[r][c] = 0.0f;\n"
    "  for (int kt = 0; kt < nkt; kt++) {\n"
    "    const int k0 = kt * ATT_BK, keys = ATT_SK - k0 < ATT_BK ? ATT_SK - k0 : ATT_BK;\n"
    "    __syncthreads(); /* the last tile's P V is done with kv */\n"
    "    att_stage_t(kv, ATT_LDK, ATT_BK, kb + (long long)k0 * ATT_HD, keys);\n"
    "    __syncthreads();\n"
    "    att_scores(qs, kv, s, tq, tk);\n"
    "    __syncthreads();\n"
    "    att_stage(kv, vb + (long long)k0 * ATT_HD, keys);\n"
    "    att_softmax(s, s, row_m, row_l, row_a, k0, q0, bb);\n"
    "    __syncthreads();\n"
    "    att_mix(o, s, kv, row_a, keys, tq, tk);\n"
    "  }\n"
    "  ATT_UNROLL for (int r = 0; r < ATT_RQ; r++) {\n"
    "    const int i = tq + ATT_TQ * r;\n"
    "    if (i >= rows) continue;\n"
    "    const float l = row_l[i];\n"
    "    ATT_UNROLL for (int c = 0; c < ATT_CO; c++) {\n"
    "      const int d = tk + ATT_TK * c;\n"
    "      if (d < ATT_D) ATT_ST(ob, (long long)i * ATT_HD + d, o[r][c] / l);\n"
    "    }\n"
    "  }\n"
    "}\n";

/* ---- bf16 / f16: wmma ---------------------------------------------------- */
static const char mma_helpers[] =
    "/* rows x D of src into t[i * LDH + d], rounded, zero past D (to DP) and past `rows` (to tile_rows). */\n"
    "DC_DEVICE void att_stage(att_p *t, int tile_rows, const att_in_t *src, int rows) {\n"
    "  for (int e = threadIdx.x; e < tile_rows * ATT_DP; e += ATT_NT) {\n"
    "    const int i = e / ATT_DP, d = e % ATT_DP;\n"
    "    t[i * ATT_LDH + d] = ATT_TO_P(i < rows && d < ATT_D ? ATT_LD(src, (long long)i * ATT_HD + d) : 0.0f);\n"
    "  }\n"
    "}\n"
    "/* s = Q K^T for the 16x16 tiles of the first `keys` keys (rounded up to 16), tiles dealt to warps. */\n"
    "DC_DEVICE void att_scores(const att_p *qs, const att_p *ks, float *s, int keys) {\n"
    "  using namespace nvcuda;\n"
    "  const int ntj = (keys + 15) / 16;\n"
    "  for (int t = threadIdx.x >> 5; t < ATT_BQ / 16 * ntj; t += ATT_NW) {\n"
    "    const int ti = t / ntj, tj = t % ntj;\n"
    "    wmma::fragment<wmma::matrix_a, 16, 16, 16, att_p, wmma::row_major> a;\n"
    "    wmma::fragment<wmma::matrix_b, 16, 16, 16, att_p, wmma::col_major> bk;\n"
    "    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;\n"
    "    wmma::fill_fragment(acc, 0.0f);\n"
    "    for (int kk = 0; kk < ATT_DP / 16; kk++) {\n"
    "      wmma::load_matrix_sync(a, qs + ti * 16 * ATT_LDH + kk * 16, ATT_LDH);\n"
    "      wmma::load_matrix_sync(bk, ks + tj * 16 * ATT_LDH + kk * 16, ATT_LDH);\n"
    "      wmma::mma_sync(acc, a, bk, acc);\n"
    "    }\n"
    "    wmma::store_matrix_sync(s + ti * 16 * ATT_LDS + tj * 16, acc, ATT_LDS, wmma::mem_row_major);\n"
    "  }\n"
    "}\n"
    "/* pv = P V over the first `keys` keys (rounded up to 16; P and V are 0 past them), into s. */\n"
    "DC_DEVICE void att_mix(const att_p *p, const att_p *vs, float *pv, int keys) {\n"
    "  using namespace nvcuda;\n"
    "  const int nk = (keys + 15) / 16;\n"
    "  for (int t = threadIdx.x >> 5; t < ATT_BQ / 16 * (ATT_DP / 16); t += ATT_NW) {\n"
    "    const int ti = t / (ATT_DP / 16), tj = t % (ATT_DP / 16);\n"
    "    wmma::fragment<wmma::matrix_a, 16, 16, 16, att_p, wmma::row_major> a;\n"
    "    wmma::fragment<wmma::matrix_b, 16, 16, 16, att_p, wmma::row_major> bv;\n"
    "    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;\n"
    "    wmma::fill_fragment(acc, 0.0f);\n"
    "    for (int kk = 0; kk < nk; kk++) {\n"
    "      wmma::load_matrix_sync(a, p + ti * 16 * ATT_LDP + kk * 16, ATT_LDP);\n"
    "      wmma::load_matrix_sync(bv, vs + kk * 16 * ATT_LDH + tj * 16, ATT_LDH);\n"
    "      wmma::mma_sync(acc, a, bv, acc);\n"
    "    }\n"
    "    wmma::store_matrix_sync(pv + ti * 16 * ATT_LDS + tj * 16, acc, ATT_LDS, wmma::mem_row_major);\n"
    "  }\n"
    "}\n"
    "/* The thread's output values e = tid + NT*u (row e / D, column e % D): o = o * alpha + pv. */\n"
    "DC_DEVICE void att_fold(float *o, const float *pv, const float *row_a) {\n"
    "  ATT_UNROLL for (int u = 0; u < ATT_OPT; u++) {\n"
    "    const int e = (int)threadIdx.x + ATT_NT * u, i = e / ATT_D;\n"
    "    if (e < ATT_BQ * ATT_D) o[u] = o[u] * row_a[i] + pv[i * ATT_LDS + e % ATT_D];\n"
    "  }\n"
    "}\n";

static const char mma_body[] =
    "  att_p *p = (att_p *)(smem + ATT_OFF_P);\n"
    "  att_stage(qs, ATT_BQ, qb, rows);\n"
    "  float o[ATT_OPT];\n"
    "  ATT_UNROLL for (int u = 0; u < ATT_OPT; u++) o[u] = 0.0f;\n"
    "  for (int kt = 0; kt < nkt; kt++) {\n"
    "    const int k0 = kt * ATT_BK, keys = ATT_SK - k0 < ATT_BK ? ATT_SK - k0 : ATT_BK;\n"
    "    __syncthreads(); /* the last tile's P V is in s and done with kv */\n"
    "    if (kt > 0) att_fold(o, s, row_a);\n"
    "    att_stage(kv, ATT_BK, kb + (long long)k0 * ATT_HD, keys);\n"
    "    __syncthreads();\n"
    "    att_scores(qs, kv, s, keys);\n"
    "    __syncthreads();\n"
    "    att_stage(kv, ATT_BK, vb + (long long)k0 * ATT_HD, keys);\n"
    "    att_softmax(s, p, row_m, row_l, row_a, k0, q0, bb);\n"
    "    __syncthreads();\n"
    "    att_mix(p, kv, s, keys);\n"
    "  }\n"
    "  __syncthreads();\n"
    "  att_fold(o, s, row_a);\n"
    "  ATT_UNROLL for (int u = 0; u < ATT_OPT; u++) {\n"
    "    const int e = (int)threadIdx.x + ATT_NT * u, i = e / ATT_D;\n"
    "    if (e < ATT_BQ * ATT_D && i < rows) ATT_ST(ob, (long long)i * ATT_HD + e % ATT_D, o[u] / row_l[i]);\n"
    "  }\n"
    "}\n";

static void append_text(dc_buf *b, const char *text) { dc_buf_append(b, text, strlen(text)); }

/* Nothing to compute: no queries, or no keys (the reference then leaves the
 * output as it is). */
static dc_status *gen_empty(const char *name, int bias, dc_cuda_kernel *out) {
  dc_buf b;
  dc_buf_init(&b);
  dc_buf_printf(&b,
                "#include \"dc_cuda.cuh\"\n"
                "/* attention over an empty sequence: nothing to write */\n"
                "DC_KERNEL void %s(float *, const float *, const float *, const float *%s) {}\n",
                name, bias ? ", const float *" : "");
  out->grid[0] = out->grid[1] = out->grid[2] = 1;
  out->block[0] = 32;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = 0;
  return dc_cuda_finish(&b, name, out);
}

dc_status *dc_cuda_gen_attention(const dc_module *m, const dc_node *n, const dc_cuda_options *o, const char *name,
                                 dc_cuda_kernel *out) {
  if (dc_cuda_flash_takes(m, n, o)) return dc_cuda_gen_flash_attention(m, n, o, name, out);
  att_geom g;
  DC_TRY(read_geom(m, n, o, &g));
  if (g.batch == 0 || g.sq == 0 || g.sk == 0) return gen_empty(name, g.bias, out);
  dc_buf b;
  dc_buf_init(&b);
  emit_constants(&b, &g);
  emit_softmax(&b, &g);
  append_text(&b, g.mma ? mma_helpers : f32_helpers);
  emit_prologue(&b, name, g.mma ? "att_p" : "float", g.bias);
  append_text(&b, g.mma ? mma_body : f32_body);
  out->grid[0] = (uint32_t)ceil_div(g.sq, g.bq);
  out->grid[1] = (uint32_t)g.heads;
  out->grid[2] = (uint32_t)g.batch;
  out->block[0] = (uint32_t)g.threads;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = (uint32_t)g.bytes;
  return dc_cuda_finish(&b, name, out);
}
