/* attention_processor.c — diffusers' attention_processor.py: the Attention
 * module (projections in, processor, projection out) and its processors
 * (blocks.h).  A new processor (JointAttnProcessor2_0 for SD3, Flux's, the
 * qk-norm variants) is a value of blk_attn_processor and a case of
 * processor() below; its extra projections go in blk_attention beside
 * to_q/to_k/to_v. */
#include <math.h>

#include "blocks.h"

#define P(...) gb_path(s, sizeof s, __VA_ARGS__)

/* A projection named `leaf`, or `old_leaf` when the checkpoint has that:
 * diffusers renames the old names on load (_convert_deprecated_attention_blocks:
 * the old name wins when both exist). */
static dc_status *projection(dc_gb *g, const char *p, const blk_attention_cfg *a, const char *leaf,
                             const char *old_leaf, int32_t x, int64_t in, int64_t outf, int bias, int32_t *out) {
  char s[256], probe[300];
  int old = 0;
  if (a->legacy_names) {
    gb_path(probe, sizeof probe, "%s.%s.weight", p, old_leaf);
    old = dc_folder_find(g->w->folder, probe) != NULL;
  }
  return gb_linear(g, P("%s.%s", p, old ? old_leaf : leaf), x, in, outf, bias, out);
}

/* AttnProcessor2_0: scaled_dot_product_attention over heads at the default
 * scale 1/sqrt(head_dim) (upcast_softmax changes nothing in fp32). */
static dc_status *processor(dc_gb *g, const char *p, const blk_attention_cfg *a, int32_t q, int32_t k, int32_t v,
                            int32_t *out) {
  switch (a->processor) {
    case BLK_ATTN_SDPA: {
      dc_node n = dc_node_make(OP_ATTENTION, 3, (int32_t[]){q, k, v});
      dc_node_set_int(&n, "heads", a->heads);
      dc_node_set_float(&n, "scale", 1.0 / sqrt((double)a->head_dim));
      return gb_add(g, &n, p, out);
    }
  }
  return dc_error(DC_ERR_INTERNAL, "%s: unknown attention processor %d", p, (int)a->processor);
}

dc_status *blk_attention(dc_gb *g, const char *p, const blk_attention_cfg *a, int32_t x, int32_t ctx, int32_t *out) {
  int64_t inner = a->heads * a->head_dim;
  int32_t q, k, v, o;
  DC_TRY(projection(g, p, a, "to_q", "query", x, a->query_dim, inner, a->qkv_bias, &q));
  DC_TRY(projection(g, p, a, "to_k", "key", ctx, a->kv_dim, inner, a->qkv_bias, &k));
  DC_TRY(projection(g, p, a, "to_v", "value", ctx, a->kv_dim, inner, a->qkv_bias, &v));
  DC_TRY(processor(g, p, a, q, k, v, &o));
  return projection(g, p, a, "to_out.0", "proj_attn", o, inner, a->query_dim, 1, out);
}

/* heads = C // attention_head_dim with attention_head_dim = C: one head of
 * width C.  The group norm of [B,C,H,W] equals the processor's of [B,C,HW];
 * view(B,C,HW).transpose(1,2) is moved as permute(0,2,3,1).reshape(B,HW,C),
 * the same bytes, and the form the layout pass cancels against an NHWC
 * group_norm (--layout nhwc then transposes nothing here).  The residual is
 * the input before the norm. */
dc_status *blk_attention_spatial(dc_gb *g, const char *p, int64_t groups, double eps, int32_t x, int32_t *out) {
  char s[256];
  const dc_type *t = gb_type(g, x);
  int64_t ch = t->dims[1], hh = t->dims[2], ww = t->dims[3];
  blk_attention_cfg a = {.query_dim = ch, .kv_dim = ch, .heads = 1, .head_dim = ch, .qkv_bias = 1,
                         .legacy_names = 1, .processor = BLK_ATTN_SDPA};
  int32_t h;
  DC_TRY(gb_group_norm(g, P("%s.group_norm", p), x, ch, groups, eps, &h));
  DC_TRY(gb_to_tokens(g, p, h, &h));
  DC_TRY(blk_attention(g, p, &a, h, h, &h));
  DC_TRY(gb_from_tokens(g, p, h, hh, ww, &h));
  return gb_binary(g, OP_ADD, p, h, x, out);
}

/* ---- joint attention (FluxAttnProcessor, JointAttnProcessor2_0) ---------- */

/* RMSNorm over each head of x [B,S,heads*head_dim], as the processors apply
 * it to the unflattened [B,S,H,D] (or [B,H,S,D]) view: the same rows. */
static dc_status *head_rms_norm(dc_gb *g, const char *p, const blk_joint_attention_cfg *a, int32_t x, int32_t *out) {
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], seq = t->dims[1];
  DC_TRY(gb_reshape(g, p, x, 4, (int64_t[]){b, seq, a->heads, a->head_dim}, &x));
  DC_TRY(gb_rms_norm(g, p, x, a->head_dim, 1, a->eps, &x));
  return gb_reshape(g, p, x, 3, (int64_t[]){b, seq, a->dim}, out);
}

/* One stream's q, k, v: three projections, q and k normed per head. */
typedef struct {
  const char *q, *k, *v, *norm_q, *norm_k;
} qkv_names;

static dc_status *stream_qkv(dc_gb *g, const char *p, const blk_joint_attention_cfg *a, const qkv_names *nm, int32_t x,
                             int32_t qkv[3]) {
  char s[256];
  DC_TRY(gb_linear(g, P("%s.%s", p, nm->q), x, a->dim, a->dim, 1, &qkv[0]));
  DC_TRY(gb_linear(g, P("%s.%s", p, nm->k), x, a->dim, a->dim, 1, &qkv[1]));
  DC_TRY(gb_linear(g, P("%s.%s", p, nm->v), x, a->dim, a->dim, 1, &qkv[2]));
  if (!a->qk_norm) return NULL;
  DC_TRY(head_rms_norm(g, P("%s.%s", p, nm->norm_q), a, qkv[0], &qkv[0]));
  return head_rms_norm(g, P("%s.%s", p, nm->norm_k), a, qkv[1], &qkv[1]);
}

static dc_status *rope(dc_gb *g, const char *p, const blk_joint_attention_cfg *a, int32_t x, int32_t freqs,
                       int32_t *out) {
  dc_node n = dc_node_make(OP_ROPE, 2, (int32_t[]){x, freqs});
  dc_node_set_int(&n, "heads", a->heads);
  dc_node_set_int(&n, "start", 0);
  return gb_add(g, &n, p, out);
}

/* q, k, v of the joint sequence (rotated when freqs >= 0), and how many of
 * its tokens come first.  *first: the context's length when it leads, x's
 * otherwise (the split point). */
static dc_status *joint_qkv(dc_gb *g, const char *p, const blk_joint_attention_cfg *a, int32_t x, int32_t ctx,
                            int32_t freqs, int32_t qkv[3], int64_t *first) {
  static const qkv_names main = {"to_q", "to_k", "to_v", "norm_q", "norm_k"};
  static const qkv_names added = {"add_q_proj", "add_k_proj", "add_v_proj", "norm_added_q", "norm_added_k"};
  int32_t c[3];
  DC_TRY(stream_qkv(g, p, a, &main, x, qkv));
  *first = gb_type(g, x)->dims[1];
  if (a->has_context) {
    DC_TRY(stream_qkv(g, p, a, &added, ctx, c));
    if (a->context_first) *first = gb_type(g, ctx)->dims[1];
    for (int i = 0; i < 3; i++)
      DC_TRY(a->context_first ? gb_concat(g, p, c[i], qkv[i], 1, &qkv[i]) : gb_concat(g, p, qkv[i], c[i], 1, &qkv[i]));
  }
  if (freqs < 0) return NULL;
  DC_TRY(rope(g, p, a, qkv[0], freqs, &qkv[0]));
  return rope(g, p, a, qkv[1], freqs, &qkv[1]);
}

dc_status *blk_joint_attention(dc_gb *g, const char *p, const blk_joint_attention_cfg *a, int32_t x, int32_t ctx,
                               int32_t freqs, int32_t *out, int32_t *ctx_out) {
  char s[256];
  int32_t qkv[3], o, xs, cs;
  int64_t first;
  *ctx_out = -1;
  if (a->heads * a->head_dim != a->dim)
    return dc_error(DC_ERR_INTERNAL, "%s: %lld heads of %lld do not make width %lld", p, (long long)a->heads,
                    (long long)a->head_dim, (long long)a->dim);
  DC_TRY(joint_qkv(g, p, a, x, ctx, freqs, qkv, &first));
  dc_node n = dc_node_make(OP_ATTENTION, 3, qkv);
  dc_node_set_int(&n, "heads", a->heads);
  dc_node_set_float(&n, "scale", 1.0 / sqrt((double)a->head_dim));
  DC_TRY(gb_add(g, &n, p, &o));
  if (!a->has_context) return a->pre_only ? (*out = o, NULL) : gb_linear(g, P("%s.to_out.0", p), o, a->dim, a->dim, 1, out);
  /* the two shares: [0, first) and [first, total) of the joint sequence */
  int64_t total = gb_type(g, o)->dims[1], xs_at = a->context_first ? first : 0, cs_at = a->context_first ? 0 : first;
  int64_t xs_len = a->context_first ? total - first : first;
  DC_TRY(gb_slice(g, p, o, 1, xs_at, xs_at + xs_len, &xs));
  if (!a->context_pre_only) {
    DC_TRY(gb_slice(g, p, o, 1, cs_at, cs_at + (total - xs_len), &cs));
    DC_TRY(gb_linear(g, P("%s.to_add_out", p), cs, a->dim, a->dim, 1, ctx_out));
  }
  return gb_linear(g, P("%s.to_out.0", p), xs, a->dim, a->dim, 1, out);
}

/* ---- CogVideoXAttnProcessor2_0 -------------------------------------------- */

/* nn.LayerNorm(head_dim) over each head of x [B,S,heads*head_dim]: the
 * rows of the processor's [B,H,S,D] view, as [B, S*heads, head_dim]. */
static dc_status *head_layer_norm(dc_gb *g, const char *p, const blk_cogvideox_attention_cfg *a, int32_t x,
                                  int32_t *out) {
  const dc_type *t = gb_type(g, x);
  int64_t b = t->dims[0], seq = t->dims[1];
  DC_TRY(gb_reshape(g, p, x, 3, (int64_t[]){b, seq * a->heads, a->head_dim}, &x));
  DC_TRY(gb_layer_norm(g, p, x, a->head_dim, 1e-6, &x));
  return gb_reshape(g, p, x, 3, (int64_t[]){b, seq, a->dim}, out);
}

/* rope over the tokens from `start` (the video's), the text ones copied. */
static dc_status *rope_from(dc_gb *g, const char *p, int64_t heads, int64_t start, int32_t x, int32_t freqs,
                            int32_t *out) {
  dc_node n = dc_node_make(OP_ROPE, 2, (int32_t[]){x, freqs});
  dc_node_set_int(&n, "heads", heads);
  dc_node_set_int(&n, "start", start);
  return gb_add(g, &n, p, out);
}

dc_status *blk_cogvideox_attention(dc_gb *g, const char *p, const blk_cogvideox_attention_cfg *a, int32_t h,
                                   int64_t text_len, int32_t freqs, int32_t *out) {
  char s[256];
  int32_t q, k, v;
  if (a->heads * a->head_dim != a->dim)
    return dc_error(DC_ERR_INTERNAL, "%s: %lld heads of %lld do not make width %lld", p, (long long)a->heads,
                    (long long)a->head_dim, (long long)a->dim);
  DC_TRY(gb_linear(g, P("%s.to_q", p), h, a->dim, a->dim, a->qkv_bias, &q));
  DC_TRY(gb_linear(g, P("%s.to_k", p), h, a->dim, a->dim, a->qkv_bias, &k));
  DC_TRY(gb_linear(g, P("%s.to_v", p), h, a->dim, a->dim, a->qkv_bias, &v));
  DC_TRY(head_layer_norm(g, P("%s.norm_q", p), a, q, &q));
  DC_TRY(head_layer_norm(g, P("%s.norm_k", p), a, k, &k));
  if (freqs >= 0) {
    DC_TRY(rope_from(g, p, a->heads, text_len, q, freqs, &q));
    DC_TRY(rope_from(g, p, a->heads, text_len, k, freqs, &k));
  }
  dc_node n = dc_node_make(OP_ATTENTION, 3, (int32_t[]){q, k, v});
  dc_node_set_int(&n, "heads", a->heads);
  dc_node_set_float(&n, "scale", 1.0 / sqrt((double)a->head_dim));
  return gb_add(g, &n, p, out);
}
