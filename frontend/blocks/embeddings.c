/* embeddings.c — diffusers' embeddings.py (blocks.h): Timesteps and
 * TimestepEmbedding; the DiTs' conditioning embeddings, Flux's rotary
 * table and SD3's patch embedding. */
#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

dc_status *blk_timesteps(dc_gb *g, const char *scope, int32_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                         int32_t *out) {
  dc_node n = dc_node_make(OP_TIME_EMBED, 1, &t);
  dc_node_set_int(&n, "dim", dim);
  dc_node_set_int(&n, "flip_sin_to_cos", flip_sin_to_cos);
  dc_node_set_float(&n, "freq_shift", freq_shift);
  return gb_add(g, &n, scope, out);
}

dc_status *blk_timestep_embedding(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int32_t *out) {
  char s[256];
  DC_TRY(gb_linear(g, P("%s.linear_1", p), x, in, dim, 1, &x));
  DC_TRY(gb_unary(g, OP_SILU, P("%s.act", p), x, &x));
  return gb_linear(g, P("%s.linear_2", p), x, dim, dim, 1, out);
}

dc_status *blk_pixart_text_projection(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t hidden, dc_op act,
                                      int32_t *out) {
  char s[256];
  DC_TRY(gb_linear(g, P("%s.linear_1", p), x, in, hidden, 1, &x));
  DC_TRY(gb_unary(g, act, P("%s.act_1", p), x, &x));
  return gb_linear(g, P("%s.linear_2", p), x, hidden, hidden, 1, out);
}

/* Timesteps(256, flip_sin_to_cos=True, shift 0) then a TimestepEmbedding. */
static dc_status *timestep_branch(dc_gb *g, const char *p, const char *embedder, int32_t t, int64_t dim, int32_t *out) {
  char s[256];
  DC_TRY(blk_timesteps(g, P("%s.time_proj", p), t, 256, 1, 0.0, &t));
  return blk_timestep_embedding(g, P("%s.%s", p, embedder), t, 256, dim, out);
}

dc_status *blk_combined_timestep_text_proj(dc_gb *g, const char *p, int32_t t, int32_t guidance, int32_t pooled,
                                           int64_t pooled_dim, int64_t dim, int32_t *out) {
  char s[256];
  int32_t emb, other;
  DC_TRY(timestep_branch(g, p, "timestep_embedder", t, dim, &emb));
  if (guidance >= 0) {
    DC_TRY(timestep_branch(g, p, "guidance_embedder", guidance, dim, &other));
    DC_TRY(gb_binary(g, OP_ADD, p, emb, other, &emb));
  }
  DC_TRY(blk_pixart_text_projection(g, P("%s.text_embedder", p), pooled, pooled_dim, dim, OP_SILU, &other));
  return gb_binary(g, OP_ADD, p, emb, other, out);
}

dc_status *blk_flux_pos_embed(dc_gb *g, const char *scope, int32_t ids, const int64_t *axes, int naxes, double theta,
                              int32_t *out) {
  dc_node n = dc_node_make(OP_ROPE_FREQS, 1, &ids);
  if (naxes < 1 || naxes > DC_MAX_DIMS)
    return dc_error(DC_ERR_INTERNAL, "%s: %d rotary axes (the builder allows 1 to %d)", scope, naxes, DC_MAX_DIMS);
  for (int i = 0; i < naxes; i++) n.list[i] = axes[i];
  n.nlist = naxes;
  dc_node_set_float(&n, "theta", theta);
  return gb_add(g, &n, scope, out);
}

/* The table's rows of the centred h x w window: top = (max - h) // 2,
 * left = (max - w) // 2, as [1, h*w, dim] in row-major order. */
static dc_status *cropped_table(dc_gb *g, const char *p, int64_t dim, int64_t max_size, int64_t h, int64_t w,
                                int32_t *out) {
  char s[256];
  int32_t t;
  int64_t top = (max_size - h) / 2, left = (max_size - w) / 2;
  DC_TRY(gb_param(g, p, "pos_embed", 3, (int64_t[]){1, max_size * max_size, dim}, &t));
  DC_TRY(gb_reshape(g, P("%s.pos_embed", p), t, 3, (int64_t[]){max_size, max_size, dim}, &t));
  DC_TRY(gb_slice(g, P("%s.pos_embed", p), t, 0, top, top + h, &t));
  DC_TRY(gb_slice(g, P("%s.pos_embed", p), t, 1, left, left + w, &t));
  return gb_reshape(g, P("%s.pos_embed", p), t, 3, (int64_t[]){1, h * w, dim}, out);
}

dc_status *blk_patch_embed_cropped(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int64_t patch,
                                   int64_t max_size, int32_t *out) {
  char s[256];
  const dc_type *t = gb_type(g, x);
  int64_t h = t->dims[2] / patch, w = t->dims[3] / patch;
  int32_t pos;
  DC_TRY(gb_conv2d(g, P("%s.proj", p), x, in, dim, patch, patch, (int64_t[]){0, 0, 0, 0}, &x));
  DC_TRY(gb_to_tokens(g, p, x, &x));
  DC_TRY(cropped_table(g, p, dim, max_size, h, w, &pos));
  return gb_binary(g, OP_ADD, p, x, pos, out);
}
