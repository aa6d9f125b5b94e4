/* clip.c — transformers' models/clip/modeling_clip.py, the text half
 * (blocks.h): CLIPTextEmbeddings, CLIPAttention with the causal mask the
 * text model gives it, CLIPMLP, CLIPEncoderLayer and CLIPEncoder, each
 * binding its weights below its module path and mirroring its forward. */
#include <math.h>

#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* token_embedding(input_ids) + position_embedding(position_ids), where the
 * token table is read as the file stores it (gb_stored: CLIP-L's is 76 MB in
 * fp16) and the position ids are the buffer arange(max_position_embeddings)[:S]:
 * rows [0, S) of the table, a slice of the weight rather than a gather. */
dc_status *blk_clip_text_embeddings(dc_gb *g, const char *p, int32_t ids, int64_t vocab, int64_t max_pos,
                                    int64_t dim, int32_t *out) {
  char s[256];
  int64_t seq = gb_type(g, ids)->dims[gb_type(g, ids)->rank - 1];
  int32_t table, pos, tok;
  DC_TRY(gb_param(g, P("%s.token_embedding", p), "weight", 2, (int64_t[]){vocab, dim}, &table));
  dc_node n = dc_node_make(OP_EMBEDDING, 2, (int32_t[]){ids, gb_stored(g, table)});
  DC_TRY(gb_add(g, &n, P("%s.token_embedding", p), &tok));
  DC_TRY(gb_param(g, P("%s.position_embedding", p), "weight", 2, (int64_t[]){max_pos, dim}, &pos));
  if (seq < max_pos) {
    n = dc_node_make(OP_SLICE, 1, &pos);
    dc_node_set_int(&n, "axis", 0);
    dc_node_set_int(&n, "start", 0);
    dc_node_set_int(&n, "end", seq);
    DC_TRY(gb_add(g, &n, P("%s.position_embedding", p), &pos));
  }
  return gb_binary(g, OP_ADD, p, tok, pos, out);
}

/* CLIPAttention as CLIPTextModel runs it: q/k/v projections with bias, the
 * causal mask (create_causal_mask; SD pipelines pass no padding mask), scale
 * head_dim ** -0.5, out_proj. */
static dc_status *self_attention(dc_gb *g, const char *p, const blk_clip_cfg *c, int32_t x, int32_t *out) {
  char s[256];
  int64_t d = c->hidden;
  int32_t q, k, v, a;
  DC_TRY(gb_linear(g, P("%s.q_proj", p), x, d, d, 1, &q));
  DC_TRY(gb_linear(g, P("%s.k_proj", p), x, d, d, 1, &k));
  DC_TRY(gb_linear(g, P("%s.v_proj", p), x, d, d, 1, &v));
  dc_node n = dc_node_make(OP_CAUSAL_ATTENTION, 3, (int32_t[]){q, k, v});
  dc_node_set_int(&n, "heads", c->heads);
  dc_node_set_float(&n, "scale", pow((double)(d / c->heads), -0.5));
  DC_TRY(gb_add(g, &n, p, &a));
  return gb_linear(g, P("%s.out_proj", p), a, d, d, 1, out);
}

/* CLIPMLP: fc1, hidden_act (ACT2FN: quick_gelu, or gelu, the exact one), fc2. */
static dc_status *mlp(dc_gb *g, const char *p, const blk_clip_cfg *c, int32_t x, int32_t *out) {
  char s[256];
  int32_t h;
  DC_TRY(gb_linear(g, P("%s.fc1", p), x, c->hidden, c->inter, 1, &h));
  DC_TRY(gb_unary(g, c->act, P("%s.activation_fn", p), h, &h));
  return gb_linear(g, P("%s.fc2", p), h, c->inter, c->hidden, 1, out);
}

/* CLIPEncoderLayer: pre-LN, each half added back to the residual stream. */
dc_status *blk_clip_encoder_layer(dc_gb *g, const char *p, const blk_clip_cfg *c, int32_t x, int32_t *out) {
  char s[256];
  int32_t h;
  DC_TRY(gb_layer_norm(g, P("%s.layer_norm1", p), x, c->hidden, c->eps, &h));
  DC_TRY(self_attention(g, P("%s.self_attn", p), c, h, &h));
  DC_TRY(gb_binary(g, OP_ADD, p, x, h, &x));
  DC_TRY(gb_layer_norm(g, P("%s.layer_norm2", p), x, c->hidden, c->eps, &h));
  DC_TRY(mlp(g, P("%s.mlp", p), c, h, &h));
  return gb_binary(g, OP_ADD, p, x, h, out);
}

dc_status *blk_clip_encoder(dc_gb *g, const char *p, const blk_clip_cfg *c, int64_t layers, int32_t x,
                            int32_t *hidden) {
  char s[256];
  hidden[0] = x;
  for (int64_t l = 0; l < layers; l++)
    DC_TRY(blk_clip_encoder_layer(g, P("%s.layers.%lld", p, (long long)l), c, hidden[l], &hidden[l + 1]));
  return NULL;
}
