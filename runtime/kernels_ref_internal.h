/* kernels_ref_internal.h — what the two halves of the reference kernels
 * (kernels_ref.c, kernels_ref_nn.c) share: the kernel signature, the heavy
 * kernels' declarations (so kernels_ref.c's table is the one op-to-kernel
 * map), and two small helpers. */
#ifndef DC_KERNELS_REF_INTERNAL_H
#define DC_KERNELS_REF_INTERNAL_H

#include "kernels.h"

#define REF_KERNEL(name) \
  dc_status *name(const dc_module *m, const dc_node *n, const void *const *in, void *out)

/* In kernels_ref_nn.c. */
REF_KERNEL(dc_ref_conv2d);
REF_KERNEL(dc_ref_linear);
REF_KERNEL(dc_ref_group_norm);
REF_KERNEL(dc_ref_layer_norm);
REF_KERNEL(dc_ref_attention);
REF_KERNEL(dc_ref_time_embed);

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

#endif
