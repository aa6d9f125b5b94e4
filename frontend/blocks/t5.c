/* t5.c — transformers' models/t5/modeling_t5.py, the encoder stack
 * (blocks.h): T5LayerNorm, T5Attention with the relative position bias,
 * T5LayerFF (T5DenseActDense and T5DenseGatedActDense), T5Block and
 * T5Stack as an encoder (is_decoder false: no causal mask, no cross
 * attention), each binding its weights below its module path and mirroring
 * its forward.  T5 has no biases anywhere, and its attention scores are not
 * scaled by 1/sqrt(d_kv): the scale is 1. */
#include <float.h>

#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* T5Attention.compute_bias for an encoder: bidirectional buckets of
 * key - query over [S,S], looked up in block 0's relative_attention_bias
 * (nn.Embedding(buckets, heads), read as the file stores it) -> [H,S,S].
 * Computed once; every block adds the same bias (T5Stack passes layer 0's
 * position_bias down). */
static dc_status *position_bias(dc_gb *g, const char *p, const blk_t5_cfg *c, int64_t seq, int32_t *out) {
  char s[256];
  int32_t table;
  DC_TRY(gb_param(g, P("%s.relative_attention_bias", p), "weight", 2, (int64_t[]){c->buckets, c->heads}, &table));
  dc_node n = dc_node_make(OP_REL_POS_BIAS, 1, (int32_t[]){gb_stored(g, table)});
  n.type = (dc_type){DT_F32, 3, {c->heads, seq, seq}};
  dc_node_set_int(&n, "bidirectional", 1);
  dc_node_set_int(&n, "max_distance", c->max_distance);
  return gb_add(g, &n, P("%s.relative_attention_bias", p), out);
}

/* T5Attention as self-attention: q, k, v (no bias) to heads * d_kv,
 * softmax(q k^T + position_bias) v with no scaling, o back to d_model. */
static dc_status *self_attention(dc_gb *g, const char *p, const blk_t5_cfg *c, int32_t x, int32_t bias,
                                 int32_t *out) {
  char s[256];
  int64_t inner = c->heads * c->d_kv;
  int32_t q, k, v, a;
  DC_TRY(gb_linear(g, P("%s.q", p), x, c->d_model, inner, 0, &q));
  DC_TRY(gb_linear(g, P("%s.k", p), x, c->d_model, inner, 0, &k));
  DC_TRY(gb_linear(g, P("%s.v", p), x, c->d_model, inner, 0, &v));
  dc_node n = dc_node_make(OP_ATTENTION_BIAS, 4, (int32_t[]){q, k, v, bias});
  dc_node_set_int(&n, "heads", c->heads);
  dc_node_set_float(&n, "scale", 1.0);
  DC_TRY(gb_add(g, &n, p, &a));
  return gb_linear(g, P("%s.o", p), a, inner, c->d_model, 0, out);
}

/* ACT2FN[dense_act_fn]; relu is a clamp to [0, FLT_MAX] (equal to max(x, 0)
 * for every finite x), so no op of its own is needed. */
static dc_status *activation(dc_gb *g, const char *scope, const blk_t5_cfg *c, int32_t x, int32_t *out) {
  if (!c->relu) return gb_unary(g, c->act, scope, x, out);
  dc_node n = dc_node_make(OP_CLAMP, 1, &x);
  dc_node_set_float(&n, "min", 0.0);
  dc_node_set_float(&n, "max", FLT_MAX);
  return gb_add(g, &n, scope, out);
}

/* T5DenseGatedActDense: act(wi_0 x) * wi_1 x, then wo; T5DenseActDense:
 * wo(act(wi x)).  No biases. */
static dc_status *dense(dc_gb *g, const char *p, const blk_t5_cfg *c, int32_t x, int32_t *out) {
  char s[256];
  int32_t h, lin;
  if (c->gated) {
    DC_TRY(gb_linear(g, P("%s.wi_0", p), x, c->d_model, c->d_ff, 0, &h));
    DC_TRY(activation(g, P("%s.act", p), c, h, &h));
    DC_TRY(gb_linear(g, P("%s.wi_1", p), x, c->d_model, c->d_ff, 0, &lin));
    DC_TRY(gb_binary(g, OP_MUL, p, h, lin, &h));
  } else {
    DC_TRY(gb_linear(g, P("%s.wi", p), x, c->d_model, c->d_ff, 0, &h));
    DC_TRY(activation(g, P("%s.act", p), c, h, &h));
  }
  return gb_linear(g, P("%s.wo", p), h, c->d_ff, c->d_model, 0, out);
}

/* T5Block of an encoder: layer.0 (T5LayerSelfAttention: layer_norm,
 * SelfAttention, + x) then layer.1 (T5LayerFF: layer_norm, DenseReluDense,
 * + x).  T5LayerNorm is an RMS norm with a weight and no bias. */
dc_status *blk_t5_block(dc_gb *g, const char *p, const blk_t5_cfg *c, int32_t x, int32_t bias, int32_t *out) {
  char s[256];
  int32_t h;
  DC_TRY(gb_rms_norm(g, P("%s.layer.0.layer_norm", p), x, c->d_model, 1, c->eps, &h));
  DC_TRY(self_attention(g, P("%s.layer.0.SelfAttention", p), c, h, bias, &h));
  DC_TRY(gb_binary(g, OP_ADD, P("%s.layer.0", p), x, h, &x));
  DC_TRY(gb_rms_norm(g, P("%s.layer.1.layer_norm", p), x, c->d_model, 1, c->eps, &h));
  DC_TRY(dense(g, P("%s.layer.1.DenseReluDense", p), c, h, &h));
  return gb_binary(g, OP_ADD, P("%s.layer.1", p), x, h, out);
}

dc_status *blk_t5_encoder(dc_gb *g, const char *p, const blk_t5_cfg *c, int64_t layers, int32_t ids, int32_t table,
                          int32_t *out) {
  char s[256];
  int64_t seq = gb_type(g, ids)->dims[1];
  int32_t x, bias = -1;
  dc_node n = dc_node_make(OP_EMBEDDING, 2, (int32_t[]){ids, gb_stored(g, table)});
  DC_TRY(gb_add(g, &n, P("%s.embed_tokens", p), &x));
  if (layers > 0) DC_TRY(position_bias(g, P("%s.block.0.layer.0.SelfAttention", p), c, seq, &bias));
  for (int64_t l = 0; l < layers; l++) DC_TRY(blk_t5_block(g, P("%s.block.%lld", p, (long long)l), c, x, bias, &x));
  return gb_rms_norm(g, P("%s.final_layer_norm", p), x, c->d_model, 1, c->eps, out);
}
