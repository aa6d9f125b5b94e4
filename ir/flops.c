/* flops.c — the arithmetic of a module, for GFLOP/s figures.  Counts the
 * multiply-adds of the matrix ops as 2 flops each (the convention PyTorch's
 * FlopCounterMode uses, so our numbers compare with bench/bench.py's):
 * conv2d 2·N·O·Ho·Wo·C·kh·kw, conv3d 2·B·O·To·Ho·Wo·C·kt·kh·kw, linear 2·M·N·K,
 * attention 4·B·H·Sq·Sk·D (QKᵀ and PV), causal attention the same over the
 * S(S+1)/2 pairs it computes.  Element-wise work and norms are memory-bound
 * and not counted. */
#include "ir.h"

static uint64_t numel_of(const dc_module *m, int32_t v) { return dc_type_numel(&m->nodes[v].type); }

static uint64_t node_flops(const dc_module *m, const dc_node *n) {
  switch (n->op) {
    case OP_CONV2D: {
      const dc_type *w = &m->nodes[n->inputs[1]].type; /* [O, C, kh, kw] */
      return 2 * dc_type_numel(&n->type) * (uint64_t)(w->dims[1] * w->dims[2] * w->dims[3]);
    }
    case OP_CONV3D: {
      const dc_type *w = &m->nodes[n->inputs[1]].type; /* [O, C, kt, kh, kw] */
      return 2 * dc_type_numel(&n->type) * (dc_type_numel(w) / (uint64_t)w->dims[0]);
    }
    case OP_LINEAR: {
      const dc_type *w = &m->nodes[n->inputs[1]].type; /* [N, K] */
      uint64_t rows = numel_of(m, n->inputs[0]) / (uint64_t)w->dims[1];
      return 2 * rows * (uint64_t)(w->dims[0] * w->dims[1]);
    }
    case OP_ATTENTION: {
      const dc_type *q = &m->nodes[n->inputs[0]].type, *k = &m->nodes[n->inputs[1]].type; /* [B, S, H*D] */
      return 4 * (uint64_t)(q->dims[0] * q->dims[1]) * (uint64_t)k->dims[1] * (uint64_t)q->dims[2];
    }
    case OP_ATTENTION_BIAS: {
      const dc_type *q = &m->nodes[n->inputs[0]].type, *k = &m->nodes[n->inputs[1]].type;
      return 4 * (uint64_t)(q->dims[0] * q->dims[1]) * (uint64_t)k->dims[1] * (uint64_t)q->dims[2];
    }
    case OP_CAUSAL_ATTENTION: { /* query i meets keys 0..i: S(S+1)/2 pairs of the S² */
      const dc_type *q = &m->nodes[n->inputs[0]].type;
      uint64_t s = (uint64_t)q->dims[1];
      return 4 * (uint64_t)q->dims[0] * (s * (s + 1) / 2) * (uint64_t)q->dims[2];
    }
    default: return 0;
  }
}

uint64_t dc_node_flops(const dc_module *m, int32_t id) { return node_flops(m, &m->nodes[id]); }

uint64_t dc_module_flops(const dc_module *m) {
  uint64_t total = 0;
  for (int32_t i = 0; i < m->nnodes; i++) total += node_flops(m, &m->nodes[i]);
  return total;
}

const char *dc_cost_class_name(dc_cost_class c) {
  static const char *const names[DC_COST_CLASSES] = {"conv3x3", "conv", "linear", "attention", "memory", "copy", "none"};
  return (unsigned)c < DC_COST_CLASSES ? names[c] : "?";
}

dc_cost_class dc_node_cost_class(const dc_module *m, int32_t id) {
  const dc_node *n = &m->nodes[id];
  switch (n->op) {
    case OP_INPUT:
    case OP_WEIGHT: return DC_COST_NONE;
    case OP_UPLOAD:
    case OP_TRANSFER: return DC_COST_COPY;
    case OP_CONV2D: {
      const dc_type *w = &m->nodes[n->inputs[1]].type; /* [O, C, kh, kw] or NHWC [O, kh, kw, C] */
      int nhwc = n->layout == LAYOUT_NHWC;
      int64_t kh = w->dims[nhwc ? 1 : 2], kw = w->dims[nhwc ? 2 : 3];
      return kh == 3 && kw == 3 ? DC_COST_CONV3X3 : DC_COST_CONV;
    }
    case OP_CONV3D: return DC_COST_CONV; /* a direct kernel on every backend: no Winograd, no implicit GEMM rate */
    case OP_LINEAR: return DC_COST_LINEAR;
    case OP_ATTENTION:
    case OP_ATTENTION_BIAS:
    case OP_CAUSAL_ATTENTION: return DC_COST_ATTENTION;
    default: return DC_COST_MEMORY;
  }
}

uint64_t dc_node_traffic_bytes(const dc_module *m, int32_t id) {
  const dc_node *n = &m->nodes[id];
  uint64_t bytes = dc_type_bytes(&n->type);
  for (int k = 0; k < n->ninputs; k++) {
    int seen = 0;
    for (int j = 0; j < k && !seen; j++) seen = n->inputs[j] == n->inputs[k];
    if (!seen) bytes += dc_type_bytes(&m->nodes[n->inputs[k]].type);
  }
  return bytes;
}
