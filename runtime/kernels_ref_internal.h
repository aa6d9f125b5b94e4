/* kernels_ref_internal.h — what the two halves of the reference kernels
 * (kernels_ref.c, kernels_ref_nn.c) share: the kernel signature, the heavy
 * kernels' declarations (so kernels_ref.c's table is the one op-to-kernel
 * map), small helpers, and the scalar math of the activations, GEGLU and
 * broadcast add.  The fused epilogues (conv2d/linear act and residual,
 * group_norm act) call exactly the code the separate SILU, GELU, GEGLU and
 * ADD kernels call, so fused and unfused results are bit-identical and
 * cannot drift apart. */
#ifndef DC_KERNELS_REF_INTERNAL_H
#define DC_KERNELS_REF_INTERNAL_H

#include <math.h>

#include "kernels.h"

#define REF_KERNEL(name) \
  dc_status *name(const dc_module *m, const dc_node *n, const void *const *in, void *out)

/* In kernels_ref_nn.c. */
REF_KERNEL(dc_ref_conv2d);
REF_KERNEL(dc_ref_conv3d);
REF_KERNEL(dc_ref_linear);
REF_KERNEL(dc_ref_group_norm);
REF_KERNEL(dc_ref_layer_norm);
REF_KERNEL(dc_ref_attention);
REF_KERNEL(dc_ref_causal_attention);
REF_KERNEL(dc_ref_time_embed);
REF_KERNEL(dc_ref_rms_norm);
REF_KERNEL(dc_ref_mod_layer_norm);
REF_KERNEL(dc_ref_attention_bias);

static inline const dc_type *in_type(const dc_module *m, const dc_node *n, int i) {
  return &m->nodes[n->inputs[i]].type;
}

/* Math kernels take f32 and say so otherwise (infer already checks; this
 * guards kernels called directly). */
static inline dc_status *need_f32(const dc_module *m, const dc_node *n) {
  for (int i = 0; i < n->ninputs; i++) {
    dc_dtype t = in_type(m, n, i)->dtype;
    if (t != DT_F32)
      return dc_error(DC_ERR_UNSUPPORTED, "%s (%s): reference kernel needs f32 input %d, got %s",
                      dc_op_get(n->op)->name, n->scope ? n->scope : "?", i, dc_dtype_name(t));
  }
  return NULL;
}

/* conv2d / linear: activations f32; the weight (input 1) and bias (input 2)
 * in any dtype, decoded to f32 into *owned (freed by the caller) and
 * params[1], params[2] pointed at f32 data. */
dc_status *dc_ref_params_f32(const dc_module *m, const dc_node *n, const void *const *in, const void **params,
                             float **owned);
/* count values of dtype t at src, as f32 (exact). */
void dc_ref_decode(dc_dtype t, const void *src, int64_t count, float *dst);

/* torch's silu: x / (1 + exp(-x)) in float. */
static inline float act_silu(float x) {
  return x / (1.0f + expf(-x));
}

/* Exact gelu, evaluated in double and rounded once. */
static inline float act_gelu(float x) {
  return (float)(0.5 * x * (1.0 + erf(x * 0.70710678118654752440)));
}

/* transformers' QuickGELUActivation, x * torch.sigmoid(1.702 * x), as
 * torch computes it in float: the scalar product rounded, then the sigmoid
 * 1 / (1 + e^-t), then the product. */
static inline float act_quick_gelu(float x) {
  float t = 1.702f * x;
  return x * (1.0f / (1.0f + expf(-t)));
}

/* torch's gelu(approximate="tanh") (and gelu_new): evaluated in double,
 * rounded once. */
static inline float act_gelu_tanh(float x) {
  double t = 0.7978845608028654 * ((double)x + 0.044715 * (double)x * x * x);
  return (float)(0.5 * x * (1.0 + tanh(t)));
}

/* y[i] = act(x[i]) for silu, gelu, quick_gelu and gelu_tanh (y may be x); none copies
 * nothing when y is x.  GEGLU is not elementwise: see dc_ref_geglu_rows. */
static inline void act_apply(dc_act act, const float *x, int64_t count, float *y) {
  if (act == ACT_SILU)
    for (int64_t i = 0; i < count; i++) y[i] = act_silu(x[i]);
  else if (act == ACT_GELU)
    for (int64_t i = 0; i < count; i++) y[i] = act_gelu(x[i]);
  else if (act == ACT_QUICK_GELU)
    for (int64_t i = 0; i < count; i++) y[i] = act_quick_gelu(x[i]);
  else if (act == ACT_GELU_TANH)
    for (int64_t i = 0; i < count; i++) y[i] = act_gelu_tanh(x[i]);
  else if (x != y)
    for (int64_t i = 0; i < count; i++) y[i] = x[i];
}

/* In kernels_ref.c.  GEGLU of rows of 2h floats into rows of h:
 * y[r, j] = x[r, j] * gelu(x[r, h + j]), gelu rounded to float first. */
void dc_ref_geglu_rows(const float *x, int64_t rows, int64_t h, float *y);
/* y = a + b (or a * b), b broadcast numpy-style onto a's shape, for the
 * rows [row0, row1) of a (a row: a's last dim); a and y point at row row0,
 * b at its start.  y may be a, or the matching rows of b when b has a's
 * shape (each element reads b[i] before writing y[i]).  Returns -1
 * (computing nothing) when b does not broadcast onto a. */
int dc_ref_broadcast(int is_mul, const dc_type *ta, const float *a, const dc_type *tb, const float *b,
                     int64_t row0, int64_t row1, float *y);

#endif
