/* normalization.c — diffusers' normalization.py: the adaptive layer norms of
 * the DiTs (blocks.h), CogVideoX's included.  Each norm's linear turns the conditioning
 * embedding into k chunks of the block's width; the ops read the chunks
 * where they lie in that [B, k*dim] output (mod_layer_norm's scale_at and
 * shift_at, gated_add's at), so no chunk is sliced out. */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* SiLU -> Linear(cond_dim, chunks * dim) at p.linear (with bias). */
static dc_status *modulation(dc_gb *g, const char *p, int32_t emb_act, int64_t cond_dim, int64_t dim, int64_t chunks,
                             int32_t *mod) {
  char s[256];
  return gb_linear(g, P("%s.linear", p), emb_act, cond_dim, chunks * dim, 1, mod);
}

/* norm(x) * (1 + chunk[scale]) + chunk[shift], the LayerNorm at p.norm
 * without affine, eps 1e-6, as every Zero norm builds it. */
static dc_status *modulated(dc_gb *g, const char *p, int32_t x, int32_t mod, int64_t dim, int scale, int shift,
                            int32_t *out) {
  char s[256];
  return gb_mod_layer_norm(g, P("%s.norm", p), x, mod, scale * dim, shift * dim, 0, 1e-6, out);
}

dc_status *blk_ada_layer_norm_zero(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim, int32_t *out,
                                   int32_t *mod) {
  DC_TRY(modulation(g, p, emb_act, dim, dim, 6, mod));
  return modulated(g, p, x, *mod, dim, BLK_ADA_SCALE_MSA, BLK_ADA_SHIFT_MSA, out);
}

/* diffusers normalises once and modulates the result twice; normalising
 * twice gives the same bits and keeps each output one op. */
dc_status *blk_sd35_ada_layer_norm_zero_x(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim,
                                          int32_t *out, int32_t *out2, int32_t *mod) {
  DC_TRY(modulation(g, p, emb_act, dim, dim, 9, mod));
  DC_TRY(modulated(g, p, x, *mod, dim, BLK_ADA_SCALE_MSA, BLK_ADA_SHIFT_MSA, out));
  return modulated(g, p, x, *mod, dim, BLK_ADA_SCALE_MSA2, BLK_ADA_SHIFT_MSA2, out2);
}

/* Chunks (shift_msa, scale_msa, gate_msa): the first three of the Zero order. */
dc_status *blk_ada_layer_norm_zero_single(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim,
                                          int32_t *out, int32_t *mod) {
  DC_TRY(modulation(g, p, emb_act, dim, dim, 3, mod));
  return modulated(g, p, x, *mod, dim, BLK_ADA_SCALE_MSA, BLK_ADA_SHIFT_MSA, out);
}

/* Chunk 0 is the scale and chunk 1 the shift here -- unless the linear is
 * the original checkpoints' (shift, scale) one, left as stored by a single
 * file (frontend/single_file_dit.c): then the two are read the other way. */
dc_status *blk_ada_layer_norm_continuous(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim,
                                         int64_t cond_dim, int affine, double eps, int32_t *out) {
  char s[256];
  int32_t mod;
  int swapped = 0;
  DC_TRY(gb_linear_halves_swapped(g, P("%s.linear", p), 1, &swapped));
  DC_TRY(modulation(g, p, emb_act, cond_dim, dim, 2, &mod));
  return gb_mod_layer_norm(g, P("%s.norm", p), x, mod, swapped ? dim : 0, swapped ? 0 : dim, affine, eps, out);
}

/* One linear, one LayerNorm, two streams: the norm's weight and bias are
 * bound once and read by both modulations. */
dc_status *blk_cogvideox_layer_norm_zero(dc_gb *g, const char *p, int32_t x, int32_t ctx, int32_t emb_act,
                                         int64_t cond_dim, int64_t dim, int affine, double eps, int32_t *out,
                                         int32_t *ctx_out, int32_t *mod) {
  char s[256];
  DC_TRY(modulation(g, p, emb_act, cond_dim, dim, 6, mod));
  DC_TRY(gb_mod_layer_norm(g, P("%s.norm", p), x, *mod, BLK_COG_SCALE * dim, BLK_COG_SHIFT * dim, affine, eps, out));
  return gb_mod_layer_norm(g, P("%s.norm", p), ctx, *mod, BLK_COG_ENC_SCALE * dim, BLK_COG_ENC_SHIFT * dim, affine,
                           eps, ctx_out);
}

/* Chunk 0 is the shift and chunk 1 the scale (AdaLayerNorm's chunk_dim 1
 * branch), unlike AdaLayerNormContinuous above. */
dc_status *blk_ada_layer_norm_shift_scale(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t cond_dim,
                                          int64_t dim, int affine, double eps, int32_t *out) {
  char s[256];
  int32_t mod;
  DC_TRY(modulation(g, p, emb_act, cond_dim, dim, 2, &mod));
  return gb_mod_layer_norm(g, P("%s.norm", p), x, mod, dim, 0, affine, eps, out);
}
