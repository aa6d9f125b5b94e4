/* op_cases_attention.c — the attention, causal_attention, attention_bias
 * and blend rows of the op case table (op_cases.h), and the position
 * encodings' (rope, rope_freqs, relative_position_bias).  Attention rows come from the old
 * test_llvm_attention.c (head sizes 1..80 and 512, lengths no multiple of the query or key
 * block, batch 3, cross-attention, a peaky softmax) and
 * test_cuda_attention.c (SD head sizes 40..160 and the VAE's 512, partial
 * 64-query and 64-key tiles, f32, bf16 and f16 compute), merged: rows too
 * big for the CUDA emulator are OC_CPU.  Tolerance rel L2 1e-5 (LLVM, CUDA
 * f32), 1e-2 (tensor cores), as the old files had; the row's scale is the
 * inputs' standard deviation (a peaky softmax at 2 and 4).  Blend (the tiled
 * VAE's seams) is bit for bit, in place over x; LLVM runs the reference. */
#include <math.h>

#include "op_cases.h"

/* q [B,Sq,H·D], k and v [B,Sk,H·D]; scale 0: 1/sqrt(D). */
static op_case attn(int64_t b, int64_t h, int64_t d, int64_t sq, int64_t sk, double scale, double data) {
  op_case c = {.op = OP_ATTENTION, .nin = 3, .scale = data, .cuda_computes = OC_CC_GEMM};
  c.in[0] = (oc_shape){DT_F32, 3, {b, sq, h * d}};
  c.in[1] = c.in[2] = (oc_shape){DT_F32, 3, {b, sk, h * d}};
  c.attrs[0] = (oc_attr){"heads", h, 0, 0};
  c.attrs[1] = (oc_attr){"scale", 0, scale ? scale : 1.0 / sqrt((double)d), 1};
  return c;
}

/* causal_attention: self-attention, S queries and keys. */
static op_case causal(int64_t b, int64_t h, int64_t d, int64_t s, double data) {
  op_case c = attn(b, h, d, s, s, 0, data);
  c.op = OP_CAUSAL_ATTENTION;
  return c;
}

static op_case cpu_only(op_case c) {
  c.where = OC_CPU;
  c.why = "the LLVM kernel's blocks; too big for the CUDA emulator";
  return c;
}

static op_case with(op_case c, int computes) {
  c.cuda_computes = computes;
  return c;
}

static op_case blend(int axis, oc_shape x, oc_shape p, int64_t extent) {
  op_case c = {.op = OP_BLEND, .nin = 2, .in = {x, p}, .inplace = 1, .where = OC_REF | OC_CUDA,
               .why = "LLVM runs the reference kernel (k_table.c)"};
  c.attrs[0] = (oc_attr){"axis", axis, 0, 0};
  c.attrs[1] = (oc_attr){"extent", extent, 0, 0};
  return c;
}

/* attention_bias: attn's q, k, v and a bias [H, Sq, Sk]; scale 0: 1/sqrt(D). */
static op_case biased(int64_t b, int64_t h, int64_t d, int64_t sq, int64_t sk, double scale, oc_data data) {
  op_case c = attn(b, h, d, sq, sk, scale, 1);
  c.op = OP_ATTENTION_BIAS;
  c.nin = 4;
  c.data = data;
  c.in[3] = (oc_shape){DT_F32, 3, {h, sq, sk}};
  return c;
}

/* rope: x [B,S,H·D], the cos/sin table [S - start, 2, D] (random values:
 * the kernels take any table). */
static op_case rope(int64_t b, int64_t s, int64_t h, int64_t d, int64_t start, int inplace) {
  op_case c = {.op = OP_ROPE, .nin = 2, .scale = 2.0, .inplace = inplace};
  c.in[0] = (oc_shape){DT_F32, 3, {b, s, h * d}};
  c.in[1] = (oc_shape){DT_F32, 3, {s - start, 2, d}};
  c.attrs[0] = (oc_attr){"heads", h, 0, 0};
  c.attrs[1] = (oc_attr){"start", start, 0, 0};
  return c;
}

/* rope_freqs of s positions over the axes (dims each), positions < range. */
static op_case rope_freqs(int64_t s, int naxes, const int64_t *axes, double theta, double range) {
  op_case c = {.op = OP_ROPE_FREQS, .nin = 1, .data = OC_POSITIONS, .scale = range, .nlist = naxes,
               .where = OC_REF | OC_CUDA, .why = "LLVM runs the reference kernel (k_table.c)"};
  c.in[0] = (oc_shape){DT_F32, 2, {s, naxes}};
  for (int a = 0; a < naxes; a++) c.list[a] = axes[a];
  c.attrs[0] = (oc_attr){"theta", 0, theta, 1};
  return c;
}

/* relative_position_bias of a [buckets, H] table in dtype t to [H, Sq, Sk]. */
static op_case rel_bias(dc_dtype t, int64_t buckets, int64_t h, int64_t sq, int64_t sk, int bidir, int64_t maxd) {
  op_case c = {.op = OP_REL_POS_BIAS, .nin = 1, .data = OC_STORED, .where = OC_REF | OC_CUDA,
               .why = "LLVM runs the reference kernel (k_table.c)"};
  c.in[0] = (oc_shape){t, 2, {buckets, h}};
  c.out = (oc_shape){DT_F32, 3, {h, sq, sk}};
  c.attrs[0] = (oc_attr){"bidirectional", bidir, 0, 0};
  c.attrs[1] = (oc_attr){"max_distance", maxd, 0, 0};
  return c;
}

/* The position encodings: rope rows on every backend (bit for bit),
 * rope_freqs and relative_position_bias on the reference and CUDA. */
static int position_rows(op_case *out) {
  int k = 0;
  /* rope: Flux's 24 heads of 128 (all tokens turned), CogVideoX's video
   * tokens after the text (start > 0), odd token counts, batch 2, head
   * sizes that are no multiple of a vector (2, 18, 40), every token copied
   * (start = S), in place */
  out[k++] = cpu_only(rope(1, 300, 24, 128, 0, 0));
  out[k++] = rope(1, 21, 24, 128, 0, 0);
  out[k++] = rope(2, 45, 4, 64, 13, 1);
  out[k++] = rope(2, 33, 3, 16, 5, 0);
  out[k++] = rope(1, 7, 2, 8, 0, 1);
  out[k++] = rope(3, 5, 1, 2, 0, 0);
  out[k++] = rope(1, 17, 2, 40, 1, 0);
  out[k++] = rope(2, 9, 5, 18, 8, 1);
  out[k++] = rope(1, 6, 2, 4, 6, 0); /* start = S: a table of no rows */
  /* rope_freqs: Flux's axes (16, 56, 56) over [text ids; image ids] and
   * CogVideoX-like 3-D ones; one axis; positions up to 1e5 */
  static const int64_t flux[] = {16, 56, 56}, cog[] = {16, 24, 24}, one[] = {64}, two[] = {2};
  out[k++] = rope_freqs(100, 3, flux, 10000.0, 64);
  out[k++] = rope_freqs(37, 3, cog, 10000.0, 30);
  out[k++] = rope_freqs(50, 1, one, 10000.0, 4096);
  out[k++] = rope_freqs(9, 1, two, 10000.0, 100000);
  out[k++] = rope_freqs(1, 3, flux, 256.0, 1);
  /* relative_position_bias: T5's 32 buckets up to distance 128 (encoder:
   * bidirectional; decoder: keys before the query only), lengths past 128,
   * Sq != Sk, small tables, one query, a bf16 and an f16 table */
  out[k++] = rel_bias(DT_F32, 32, 8, 77, 77, 1, 128);
  out[k++] = rel_bias(DT_F32, 32, 4, 20, 200, 1, 128);
  out[k++] = rel_bias(DT_F32, 32, 4, 150, 40, 0, 128);
  out[k++] = rel_bias(DT_F32, 8, 2, 30, 41, 1, 16);
  out[k++] = rel_bias(DT_F32, 6, 3, 17, 9, 0, 5);
  out[k++] = rel_bias(DT_F32, 32, 6, 1, 100, 0, 128);
  out[k++] = rel_bias(DT_F32, 4, 1, 1, 1, 1, 4);
  out[k++] = rel_bias(DT_BF16, 32, 6, 50, 50, 1, 128);
  out[k++] = rel_bias(DT_F16, 32, 5, 13, 31, 0, 128);
  return k;
}

#define S4(a, b, c_, d) ((oc_shape){DT_F32, 4, {a, b, c_, d}})

int oc_attention_rows(op_case *out) {
  int k = 0;
  /* LLVM: tiny heads, lengths 1, 7, 77, 100, 257 (none a multiple of 64 or 96) */
  static const int64_t dims[] = {1, 2, 3, 4, 8, 16, 40, 64, 80}, lens[] = {1, 7, 77, 100, 257};
  for (int i = 0; i < 9; i++) out[k++] = cpu_only(attn(1, 2, dims[i], 77, 100, 0, 1));
  for (int i = 0; i < 5; i++) {
    out[k++] = cpu_only(attn(1, 1, 8, lens[i], lens[i], 0, 1));
    out[k++] = cpu_only(attn(2, 5, 40, lens[i], 257 - lens[i] + 1, 0, 1));
  }
  /* query blocks of 2 and 3 vectors; exact multiples of the 64-query and 96-key blocks */
  out[k++] = cpu_only(attn(1, 3, 24, 20, 50, 0, 1));
  out[k++] = cpu_only(attn(1, 2, 40, 33, 130, 0, 1));
  out[k++] = cpu_only(attn(1, 2, 40, 128, 192, 0, 1));
  out[k++] = attn(3, 2, 3, 7, 1, 0, 1);
  out[k++] = cpu_only(attn(3, 8, 16, 100, 7, 0, 1));
  out[k++] = cpu_only(attn(2, 8, 40, 256, 77, 0, 1)); /* cross-attention, SD1.5 text length */
  out[k++] = cpu_only(attn(1, 5, 64, 1024, 1024, 0, 1));
  out[k++] = cpu_only(attn(1, 1, 512, 100, 257, 0, 1)); /* the VAE's single wide head */
  /* peaky softmax: the running max must move across key blocks */
  out[k++] = cpu_only(attn(2, 8, 40, 257, 257, 0, 4.0));
  out[k++] = cpu_only(attn(1, 2, 64, 100, 300, 1.0, 3.0));
  out[k++] = cpu_only(attn(1, 1, 1, 77, 100, 4.0, 4.0));
  /* CUDA: SD head sizes, self (Sq = Sk = 70: a full and a partial tile) and
   * cross (Sq = 37, Sk = 77: one partial query tile, two key tiles) */
  static const int64_t sd[] = {40, 64, 80, 160};
  for (int i = 0; i < 4; i++) {
    out[k++] = attn(2, 2, sd[i], 70, 70, 0, 1);
    out[k++] = with(attn(2, 2, sd[i], 37, 77, 0, 1), i == 0 ? OC_CC_GEMM | OC_CC_F16 : OC_CC_GEMM);
  }
  out[k++] = with(attn(2, 4, 64, 70, 70, 0, 1), OC_CC_F16);
  out[k++] = attn(2, 8, 40, 70, 77, 0, 1);                          /* SD1.5 cross-attention, 8 heads */
  out[k++] = with(attn(1, 1, 512, 64, 64, 0, 1), OC_CC_GEMM | OC_CC_F16); /* the VAE's mid attention */
  out[k++] = attn(1, 1, 512, 37, 77, 0, 1);
  /* peaky softmax across three key tiles: logits with std 16 (x4) or 4 (x2).
   * At x4 rounding the inputs to bf16 costs 1.1e-2 rel L2 by itself, past
   * bf16's tolerance; x2 costs 5e-3. */
  out[k++] = with(attn(1, 2, 40, 70, 150, 0, 4.0), OC_CC_F32 | OC_CC_F16);
  out[k] = with(attn(1, 2, 40, 70, 150, 0, 2.0), OC_CC_BF16);
  out[k].where = OC_CUDA, out[k++].why = "bf16's peaky row; the x4 row runs on the CPU backends";
  /* the mma.sync kernel (g_flash.c, bf16/f16 with D <= 160): Flux's D = 128
   * over three key tiles with a partial query block, causal across two
   * query blocks, a -inf-masked bias over four key tiles with Sq != Sk */
  out[k++] = with(attn(1, 2, 128, 70, 130, 0, 1), OC_CC_GEMM | OC_CC_F16);
  out[k++] = with(causal(1, 2, 128, 100, 1), OC_CC_BF16 | OC_CC_F16);
  out[k++] = with(biased(1, 3, 64, 50, 200, 0, OC_MASK), OC_CC_BF16 | OC_CC_F16);
  out[k++] = attn(2, 3, 3, 7, 1, 0, 1);  /* one key */
  out[k++] = attn(1, 2, 40, 1, 77, 0, 1); /* one query */
  out[k++] = attn(1, 1, 1, 5, 5, 0, 1);
  out[k++] = attn(1, 1, 8, 5, 5, 0, 1);
  /* causal: CLIP-L's text encoder (12 heads of 64, 77 tokens, batch 2) and
   * bigG's head count; lengths across the LLVM kernel's 64-query and 96-key
   * blocks (its query blocks skip the key blocks past their last query) and
   * the CUDA kernel's 64-tiles; one token; a peaky softmax */
  out[k++] = cpu_only(causal(2, 12, 64, 77, 1));
  out[k++] = cpu_only(causal(1, 20, 8, 77, 1));
  out[k++] = cpu_only(causal(1, 2, 40, 257, 1));
  out[k++] = cpu_only(causal(2, 1, 1, 100, 1));
  out[k++] = cpu_only(causal(1, 5, 64, 200, 4.0));
  out[k++] = with(causal(2, 2, 40, 70, 1), OC_CC_GEMM | OC_CC_F16);
  out[k++] = causal(2, 4, 16, 77, 1);
  out[k++] = causal(1, 2, 64, 130, 1); /* three query and key tiles of 64 */
  out[k++] = causal(2, 3, 3, 1, 1);   /* one token: its own key only */
  out[k++] = causal(1, 1, 8, 5, 1);
  out[k++] = with(causal(1, 2, 40, 150, 2.0), OC_CC_F32 | OC_CC_F16);
  /* attention_bias (T5's position bias, a mask): scale 1 (T5) and
   * 1/sqrt(D); Sq != Sk; heads 1..8; lengths across the LLVM kernel's
   * 64-query and 96-key blocks and the CUDA kernel's 64-tiles; masks of
   * -1e9 and -inf (whole key blocks of a row) */
  out[k++] = biased(1, 1, 8, 5, 5, 1.0, OC_NORMAL);
  out[k++] = biased(2, 4, 16, 37, 77, 1.0, OC_NORMAL);
  out[k++] = biased(2, 8, 64, 70, 70, 0, OC_NORMAL);
  out[k++] = biased(1, 3, 24, 20, 50, 0, OC_NORMAL);
  out[k++] = biased(2, 6, 64, 77, 77, 1.0, OC_NORMAL); /* T5-small-like: scale 1, 77 tokens */
  out[k++] = biased(3, 2, 3, 7, 1, 1.0, OC_NORMAL);    /* one key */
  out[k++] = biased(1, 5, 40, 1, 77, 0, OC_NORMAL);    /* one query */
  out[k++] = biased(2, 2, 40, 70, 77, 0, OC_MASK);
  out[k++] = biased(1, 2, 16, 33, 150, 1.0, OC_MASK);
  out[k++] = cpu_only(biased(1, 3, 32, 130, 200, 1.0, OC_MASK));
  out[k++] = cpu_only(biased(2, 8, 64, 257, 100, 1.0, OC_NORMAL));
  out[k++] = cpu_only(biased(1, 4, 64, 512, 512, 1.0, OC_NORMAL)); /* T5's 512 tokens, fewer heads */
  k += position_rows(out + k);
  /* blend: along H and W, extents larger than either side (clamped) */
  out[k++] = blend(2, S4(1, 3, 16, 12), S4(1, 3, 16, 12), 4);
  out[k++] = blend(3, S4(2, 3, 10, 16), S4(2, 3, 10, 7), 8); /* prev narrower than the extent */
  out[k++] = blend(2, S4(1, 2, 3, 5), S4(1, 2, 9, 5), 8);    /* x shorter than the extent */
  out[k++] = blend(3, S4(1, 1, 1, 33), S4(1, 1, 1, 40), 32);
  return k;
}
