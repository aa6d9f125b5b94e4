/* layers.h — the graph-building vocabulary shared by the block library
 * (blocks/) and the model builders: one call per torch module, named by its
 * module path, that fetches and shape-checks the module's weights and appends typed nodes.
 * Every call infers the new node's type (dc_infer_type) as it adds it, so a
 * wrong graph is an error at the line that built it. */
#ifndef DC_LAYERS_H
#define DC_LAYERS_H

#include "frontend.h"

typedef struct {
  dc_module *m;
  dc_weights *w;
} dc_gb;

/* Adds n (scope set from `scope`, copied into the arena), inferring its type
 * unless the op's type is given; layout NCHW for rank-4 results. */
dc_status *gb_add(dc_gb *g, dc_node *n, const char *scope, int32_t *out);

/* The f32 value of weight "<prefix>.<leaf>" with the given shape. */
dc_status *gb_param(dc_gb *g, const char *prefix, const char *leaf, int rank, const int64_t *dims,
                    int32_t *out);

/* nn.Conv2d(cin, cout, k, stride, padding) at module path prefix, with bias.
 * pad = {top, bottom, left, right}. */
dc_status *gb_conv2d(dc_gb *g, const char *prefix, int32_t x, int64_t cin, int64_t cout, int64_t k,
                     int64_t stride, const int64_t pad[4], int32_t *out);
/* Symmetric padding k/2 (the common case). */
dc_status *gb_conv2d_same(dc_gb *g, const char *prefix, int32_t x, int64_t cin, int64_t cout,
                          int64_t k, int64_t stride, int32_t *out);
/* nn.Conv3d(cin, cout, k, stride, padding=(0, pad_hw[0], pad_hw[1])) at
 * module path prefix over x [B,C,T,H,W]: binds prefix.weight
 * [cout,cin,k[0],k[1],k[2]] and, with bias, prefix.bias [cout].  k and
 * stride are {t, h, w}.  No time padding: a causal conv builds its padding
 * frames in the graph before calling this. */
dc_status *gb_conv3d(dc_gb *g, const char *prefix, int32_t x, int64_t cin, int64_t cout, const int64_t k[3],
                     const int64_t stride[3], const int64_t pad_hw[2], int bias, int32_t *out);
/* nn.Linear(in, out, bias) applied to the last dim. */
dc_status *gb_linear(dc_gb *g, const char *prefix, int32_t x, int64_t in, int64_t out_features,
                     int bias, int32_t *out);
/* Whether the linear at prefix (weight, and bias when `bias`) is stored with
 * the two halves of its output swapped (dc_weights_halves_swapped; weight and
 * bias must agree); the caller then reads chunk k of its output at the other
 * half.  0 in record mode and for a folder of diffusers' own layout. */
dc_status *gb_linear_halves_swapped(dc_gb *g, const char *prefix, int bias, int *swapped);
dc_status *gb_group_norm(dc_gb *g, const char *prefix, int32_t x, int64_t channels, int64_t groups,
                         double eps, int32_t *out);
dc_status *gb_layer_norm(dc_gb *g, const char *prefix, int32_t x, int64_t channels, double eps,
                         int32_t *out);
/* RMSNorm over the last dim (T5LayerNorm, diffusers' RMSNorm), with
 * "<prefix>.weight" when affine. */
dc_status *gb_rms_norm(dc_gb *g, const char *prefix, int32_t x, int64_t channels, int affine, double eps,
                       int32_t *out);
/* LayerNorm of x [B,S,C] (nn.LayerNorm at prefix with weight and bias when
 * affine, else none) modulated by mod [B,M]: * (1 + mod[:, scale_at..+C])
 * + mod[:, shift_at..+C] (AdaLayerNorm*'s chunks, read in place). */
dc_status *gb_mod_layer_norm(dc_gb *g, const char *prefix, int32_t x, int32_t mod, int64_t scale_at, int64_t shift_at,
                             int affine, double eps, int32_t *out);
/* x + mod[:, at..+C] * y: a DiT's gated residual. */
dc_status *gb_gated_add(dc_gb *g, const char *scope, int32_t x, int32_t y, int32_t mod, int64_t at, int32_t *out);
/* x * factor. */
dc_status *gb_scale(dc_gb *g, const char *scope, int32_t x, double factor, int32_t *out);
/* torch.cat((a, b), axis) and x[..., start:end, ...] along axis. */
dc_status *gb_concat(dc_gb *g, const char *scope, int32_t a, int32_t b, int axis, int32_t *out);
dc_status *gb_slice(dc_gb *g, const char *scope, int32_t x, int axis, int64_t start, int64_t end, int32_t *out);
/* silu, gelu: one input. add, mul: a op b with b broadcast. */
dc_status *gb_unary(dc_gb *g, dc_op op, const char *scope, int32_t x, int32_t *out);
dc_status *gb_binary(dc_gb *g, dc_op op, const char *scope, int32_t a, int32_t b, int32_t *out);
dc_status *gb_reshape(dc_gb *g, const char *scope, int32_t x, int rank, const int64_t *dims,
                      int32_t *out);
dc_status *gb_permute(dc_gb *g, const char *scope, int32_t x, int rank, const int64_t *perm,
                      int32_t *out);
/* [B,C,H,W] -> [B,H*W,C] as permute(0,2,3,1).reshape (the bytes of
 * view(B,C,HW).transpose(1,2)), and back from [B,H*W,C] to [B,C,H,W] through
 * an NHWC-labelled [B,H,W,C]: the form the layout pass cancels against NHWC
 * neighbours. */
dc_status *gb_to_tokens(dc_gb *g, const char *scope, int32_t x, int32_t *out);
dc_status *gb_from_tokens(dc_gb *g, const char *scope, int32_t x, int64_t h, int64_t w, int32_t *out);
/* The weight node under the cast to f32 that dc_weights_get put after a
 * 16-bit tensor, for an op that reads any float dtype itself (embedding,
 * relative_position_bias): the table is then not cast whole into the arena,
 * and dce drops the unread cast.  t itself when there is no such cast, when
 * the "cast" only realigns f32 data, or when the elements are not aligned in
 * the file. */
int32_t gb_stored(const dc_gb *g, int32_t t);
/* The type of a value already in the graph. */
const dc_type *gb_type(const dc_gb *g, int32_t x);

/* "<a>.<b>" in a small caller-owned buffer; paths longer than the buffer are
 * an internal error (asserted), never truncated silently. */
const char *gb_path(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
