/* k_table.c — which ops have an LLVM kernel, and where; an op without one
 * has a mark in llvm_marks saying why (ir/lowering.h): it runs its reference
 * kernel (the runtime says so with --verbose), the runtime does it without
 * a kernel, or a CPU plan that needs it is refused at compile time. */
#include "kgen.h"

dc_status *dc_k_silu(dc_kgen *g);
dc_status *dc_k_conv2d(dc_kgen *g);
dc_status *dc_k_conv3d(dc_kgen *g);
dc_status *dc_k_linear(dc_kgen *g);
dc_status *dc_k_gelu(dc_kgen *g);
dc_status *dc_k_clamp(dc_kgen *g);
dc_status *dc_k_add(dc_kgen *g);
dc_status *dc_k_mul(dc_kgen *g);
dc_status *dc_k_geglu(dc_kgen *g);
dc_status *dc_k_group_norm(dc_kgen *g);
dc_status *dc_k_layer_norm(dc_kgen *g);
dc_status *dc_k_time_embed(dc_kgen *g);
dc_status *dc_k_reshape(dc_kgen *g);
dc_status *dc_k_permute(dc_kgen *g);
dc_status *dc_k_upsample(dc_kgen *g);
dc_status *dc_k_concat(dc_kgen *g);
dc_status *dc_k_slice(dc_kgen *g);
dc_status *dc_k_cast(dc_kgen *g);
dc_status *dc_k_attention(dc_kgen *g);
dc_status *dc_k_quick_gelu(dc_kgen *g);
dc_status *dc_k_embedding(dc_kgen *g);
dc_status *dc_k_eos_pool(dc_kgen *g);
dc_status *dc_k_rms_norm(dc_kgen *g);
dc_status *dc_k_mod_layer_norm(dc_kgen *g);
dc_status *dc_k_gated_add(dc_kgen *g);
dc_status *dc_k_gelu_tanh(dc_kgen *g);
dc_status *dc_k_scale(dc_kgen *g);
dc_status *dc_k_rope(dc_kgen *g);

dc_kgen_emit_fn dc_kgen_emitter_for(dc_op op) {
  switch (op) {
    case OP_SILU: return dc_k_silu;
    case OP_CONV2D: return dc_k_conv2d;
    case OP_CONV3D: return dc_k_conv3d;
    case OP_LINEAR: return dc_k_linear;
    case OP_GELU: return dc_k_gelu;
    case OP_CLAMP: return dc_k_clamp;
    case OP_ADD: return dc_k_add;
    case OP_MUL: return dc_k_mul;
    case OP_GEGLU: return dc_k_geglu;
    case OP_GROUP_NORM: return dc_k_group_norm;
    case OP_LAYER_NORM: return dc_k_layer_norm;
    case OP_TIME_EMBED: return dc_k_time_embed;
    case OP_RESHAPE: return dc_k_reshape;
    case OP_PERMUTE: return dc_k_permute;
    case OP_UPSAMPLE: return dc_k_upsample;
    case OP_CONCAT: return dc_k_concat;
    case OP_SLICE: return dc_k_slice;
    case OP_CAST: return dc_k_cast;
    case OP_ATTENTION: return dc_k_attention;
    case OP_CAUSAL_ATTENTION: return dc_k_attention; /* the same kernel with the mask */
    case OP_QUICK_GELU: return dc_k_quick_gelu;
    case OP_EMBEDDING: return dc_k_embedding;
    case OP_EOS_POOL: return dc_k_eos_pool;
    case OP_RMS_NORM: return dc_k_rms_norm;
    case OP_MOD_LAYER_NORM: return dc_k_mod_layer_norm;
    case OP_GATED_ADD: return dc_k_gated_add;
    case OP_GELU_TANH: return dc_k_gelu_tanh;
    case OP_SCALE: return dc_k_scale;
    case OP_ROPE: return dc_k_rope;
    case OP_ATTENTION_BIAS: return dc_k_attention; /* the same kernel with the bias added to the scores */
    default: return NULL;
  }
}

/* The ops without an LLVM kernel above, and why. */
static const dc_lowering llvm_marks[OP_COUNT] = {
  [OP_INPUT] = {DC_LOWER_RUNTIME, "the runtime copies inputs into the arena"},
  [OP_WEIGHT] = {DC_LOWER_RUNTIME, "kernels read weights where the runtime mapped them"},
  [OP_UPLOAD] = {DC_LOWER_RUNTIME, "an upload is a copy on the runtime's copy stream"},
  [OP_TRANSFER] = {DC_LOWER_RUNTIME, "a transfer is a copy between two arenas"},
  [OP_CONSTANT] = {DC_LOWER_REFERENCE, "its reference kernel places its bytes"},
  [OP_BLEND] = {DC_LOWER_REFERENCE, "a cross-fade of a few rows per tile: the reference is enough"},
  /* Measured (bench_kernels positions, the 2-vCPU Xeon idle): Flux's 4608-token table in 11 ms, T5-XXL's
   * 64 x 512 x 512 bias (64 MiB) in 48 ms; each once per forward, of T5-XXL's ~5 TFLOP encoder at 512 tokens
   * (~50 s at 100 GFLOP/s: the bias is 0.1% of it) or a Flux step of ~100 TFLOP (the table far less). */
  [OP_ROPE_FREQS] = {DC_LOWER_REFERENCE, "a cos/sin table of tokens x head dims, once per forward: the reference is enough"},
  [OP_REL_POS_BIAS] = {DC_LOWER_REFERENCE, "T5's bias table, once per forward: the reference is enough"},
  [OP_PROBE] = {DC_LOWER_REFUSED, "probe is an op for the IR's own tests (OPF_TEST); no backend lowers it"},
};

dc_lowering dc_llvm_lowering(dc_op op) {
  if ((int)op < 0 || op >= OP_COUNT) return (dc_lowering){DC_LOWER_UNMARKED, NULL};
  if (llvm_marks[op].how) return llvm_marks[op];
  return (dc_lowering){dc_kgen_emitter_for(op) ? DC_LOWER_KERNEL : DC_LOWER_UNMARKED, NULL};
}

int dc_llvm_has_kernel(dc_op op) { return (int)op >= 0 && op < OP_COUNT && dc_kgen_emitter_for(op) != NULL; }
