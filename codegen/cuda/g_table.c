/* g_table.c — which generator writes each op's CUDA kernel, the marks for
 * the ops without one (ir/lowering.h), and the helpers all generators
 * share.  A CUDA plan never falls back to a host kernel: an op without a
 * generator is done by the runtime (leaves, copies) or refused at compile
 * time. */
#include "cgen.h"

#include <string.h>

static dc_cuda_gen_fn generator_for(dc_op op) {
  switch (op) {
    case OP_SILU: return dc_cuda_gen_silu;
    case OP_GELU: return dc_cuda_gen_gelu;
    case OP_CLAMP: return dc_cuda_gen_clamp;
    case OP_ADD: return dc_cuda_gen_add;
    case OP_MUL: return dc_cuda_gen_mul;
    case OP_GEGLU: return dc_cuda_gen_geglu;
    case OP_CAST: return dc_cuda_gen_cast;
    case OP_RESHAPE: return dc_cuda_gen_reshape;
    case OP_PERMUTE: return dc_cuda_gen_permute;
    case OP_UPSAMPLE: return dc_cuda_gen_upsample;
    case OP_CONCAT: return dc_cuda_gen_concat;
    case OP_SLICE: return dc_cuda_gen_slice;
    case OP_TIME_EMBED: return dc_cuda_gen_time_embed;
    case OP_GROUP_NORM: return dc_cuda_gen_group_norm;
    case OP_LAYER_NORM: return dc_cuda_gen_layer_norm;
    case OP_CONV2D: return dc_cuda_gen_conv2d;
    case OP_CONV3D: return dc_cuda_gen_conv3d;
    case OP_LINEAR: return dc_cuda_gen_linear;
    case OP_ATTENTION: return dc_cuda_gen_attention;
    case OP_BLEND: return dc_cuda_gen_blend;
    case OP_CAUSAL_ATTENTION: return dc_cuda_gen_attention; /* the same kernel with the mask */
    case OP_QUICK_GELU: return dc_cuda_gen_quick_gelu;
    case OP_EMBEDDING: return dc_cuda_gen_embedding;
    case OP_EOS_POOL: return dc_cuda_gen_eos_pool;
    case OP_RMS_NORM: return dc_cuda_gen_rms_norm;
    case OP_MOD_LAYER_NORM: return dc_cuda_gen_mod_layer_norm;
    case OP_GATED_ADD: return dc_cuda_gen_gated_add;
    case OP_GELU_TANH: return dc_cuda_gen_gelu_tanh;
    case OP_SCALE: return dc_cuda_gen_scale;
    case OP_ROPE_FREQS: return dc_cuda_gen_rope_freqs;
    case OP_ROPE: return dc_cuda_gen_rope;
    case OP_ATTENTION_BIAS: return dc_cuda_gen_attention; /* the same kernel with the bias */
    case OP_REL_POS_BIAS: return dc_cuda_gen_rel_pos_bias;
    default: return NULL;
  }
}

/* The ops without a generator above, and why. */
static const dc_lowering cuda_marks[OP_COUNT] = {
  [OP_INPUT] = {DC_LOWER_RUNTIME, "the runtime copies inputs to the device"},
  [OP_WEIGHT] = {DC_LOWER_RUNTIME, "the runtime uploads weights at load"},
  [OP_UPLOAD] = {DC_LOWER_RUNTIME, "an upload is a copy on the copy stream"},
  [OP_TRANSFER] = {DC_LOWER_RUNTIME, "a transfer is a peer copy"},
  [OP_CONSTANT] = {DC_LOWER_REFUSED, "the CUDA backend does not place integer constants (f32 ones become weights); compile for --target cpu"},
  [OP_PROBE] = {DC_LOWER_REFUSED, "probe is an op for the IR's own tests (OPF_TEST); no backend lowers it"},
};

dc_lowering dc_cuda_lowering(dc_op op) {
  if ((int)op < 0 || op >= OP_COUNT) return (dc_lowering){DC_LOWER_UNMARKED, NULL};
  if (cuda_marks[op].how) return cuda_marks[op];
  return (dc_lowering){generator_for(op) ? DC_LOWER_KERNEL : DC_LOWER_UNMARKED, NULL};
}

int dc_cuda_has_generator(dc_op op) { return (int)op >= 0 && op < OP_COUNT && generator_for(op) != NULL; }

dc_status *dc_cuda_gen_node(const dc_module *m, int32_t id, const dc_cuda_options *o, const char *name,
                            dc_cuda_kernel *out) {
  const dc_node *n = &m->nodes[id];
  memset(out, 0, sizeof *out);
  dc_cuda_gen_fn gen = generator_for(n->op);
  if (!gen)
    return dc_error(DC_ERR_UNSUPPORTED, "node %%%d (%s%s%s): op %s has no CUDA kernel", (int)id, dc_op_get(n->op)->name,
                    n->scope && *n->scope ? " in " : "", n->scope ? n->scope : "", dc_op_get(n->op)->name);
  dc_status *st = gen(m, n, o, name, out);
  if (st) {
    dc_cuda_kernel_deinit(out);
    return dc_status_annotate(st, "CUDA kernel for node %%%d (%s%s%s)", (int)id, dc_op_get(n->op)->name,
                              n->scope && *n->scope ? " in " : "", n->scope ? n->scope : "");
  }
  return NULL;
}

const char *dc_cuda_ctype(dc_dtype t) {
  switch (t) {
    case DT_F32: return "float";
    case DT_F16:
    case DT_BF16: return "unsigned short";
    case DT_F8_E4M3:
    case DT_F8_E5M2: return "unsigned char";
    case DT_I32: return "int";
    case DT_I64: return "long long";
    default: return "?";
  }
}

const char *dc_cuda_loader(dc_dtype t) {
  switch (t) {
    case DT_F32: return "dc_ld";
    case DT_F16: return "dc_ld_f16";
    case DT_BF16: return "dc_ld_bf16";
    case DT_F8_E4M3: return "dc_ld_f8e4m3";
    case DT_F8_E5M2: return "dc_ld_f8e5m2";
    default: return "?";
  }
}

const char *dc_cuda_storer(dc_dtype t) {
  switch (t) {
    case DT_F32: return "dc_st";
    case DT_F16: return "dc_st_f16";
    case DT_BF16: return "dc_st_bf16";
    default: return "?";
  }
}

int dc_cuda_float_io(dc_dtype t) { return t == DT_F32 || t == DT_BF16 || t == DT_F16; }

int dc_cuda_all_f32(const dc_module *m, const dc_node *n) {
  if (n->type.dtype != DT_F32) return 0;
  for (int i = 0; i < n->ninputs; i++)
    if (m->nodes[n->inputs[i]].type.dtype != DT_F32) return 0;
  return 1;
}

void dc_cuda_emit_typed(dc_buf *b, const char *tag, dc_dtype t) {
  dc_buf_printf(b, "typedef %s %s_t;\n#define %s_ld %s\n", dc_cuda_ctype(t), tag, tag, dc_cuda_loader(t));
  if (dc_cuda_float_io(t)) dc_buf_printf(b, "#define %s_st %s\n", tag, dc_cuda_storer(t));
}

dc_status *dc_cuda_need_float_io(const dc_node *n, const char *what, dc_dtype t) {
  if (dc_cuda_float_io(t)) return NULL;
  return dc_error(DC_ERR_UNSUPPORTED, "%s: the CUDA kernel reads and writes f32, bf16 or f16 %s, got %s",
                  dc_op_get(n->op)->name, what, t < DT_COUNT ? dc_dtype_name(t) : "?");
}

dc_status *dc_cuda_finish(dc_buf *b, const char *name, dc_cuda_kernel *out) {
  dc_buf_u8(b, 0);
  dc_status *st = dc_buf_status(b, "writing a CUDA kernel");
  if (st) {
    dc_buf_deinit(b);
    return st;
  }
  out->source = (char *)b->data;
  out->name = dc_strdup(name);
  if (!out->name) return dc_nomem("CUDA kernel name");
  return NULL;
}

const char *dc_cuda_index_type(uint64_t count) { return count < (1ull << 31) ? "unsigned" : "unsigned long long"; }
const char *dc_cuda_count_suffix(uint64_t count) { return count < (1ull << 31) ? "u" : "ull"; }

void dc_cuda_emit_grid_loop(dc_buf *b, uint64_t count) {
  const char *it = dc_cuda_index_type(count);
  dc_buf_printf(b, "  for (%s i = (%s)blockIdx.x * blockDim.x + threadIdx.x; i < %llu%s; i += (%s)gridDim.x * blockDim.x) {\n",
                it, it, (unsigned long long)count, dc_cuda_count_suffix(count), it);
}

void dc_cuda_grid_1d(uint64_t total, uint32_t threads, dc_cuda_kernel *out) {
  uint64_t blocks = (total + threads - 1) / threads;
  if (blocks == 0) blocks = 1;
  if (blocks > 65535u * 16u) blocks = 65535u * 16u; /* kernels use grid-stride loops */
  out->grid[0] = (uint32_t)blocks;
  out->grid[1] = out->grid[2] = 1;
  out->block[0] = threads;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = 0;
}
