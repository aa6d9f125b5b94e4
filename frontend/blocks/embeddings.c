/* embeddings.c — diffusers' embeddings.py: Timesteps and TimestepEmbedding
 * (blocks.h).  Patch embeddings and rotary tables for DiTs go here. */
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
