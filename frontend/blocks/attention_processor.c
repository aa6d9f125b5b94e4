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
