/* cgen.h — internal to codegen/cuda: the generator of each op family and
 * what they share.  A generator writes one complete translation unit into
 * out->source (starting with #include "dc_cuda.cuh"), sets the launch
 * geometry, and copies `name` into out->name.
 *
 *   g_elementwise.c  silu gelu quick_gelu gelu_tanh clamp scale add mul geglu gated_add cast
 *   g_data.c         reshape permute upsample_nearest concat slice timestep_embedding
 *   g_norm.c         group_norm layer_norm mod_layer_norm rms_norm
 *   g_gemm.c         conv2d conv3d linear (FMA for f32 compute, WMMA for an NCHW conv or conv3d at bf16/f16;
 *                    g_gemm.h)
 *   g_mma_gemm.c     linear and NHWC conv2d at bf16/f16 on mma.sync + ldmatrix + cp.async
 *   g_attention.c    attention, causal_attention, attention_bias (flash: online softmax, never an Sq x Sk matrix;
 *                    f32 FMA, and wmma for bf16/f16 heads over 160)
 *   g_flash.c        the same ops with bf16/f16 compute and D <= 160 on mma.sync (dc_mma.cuh), FlashAttention-2
 *   g_position.c     rope_freqs rope relative_position_bias (position encodings)
 *   g_text.c         embedding eos_pool (the ops that read token ids)
 *   g_blend.c        blend (the tiled VAE's seams)
 *   g_table.c        op -> generator, dc_cuda_gen_node */
#ifndef DC_CUDA_CGEN_H
#define DC_CUDA_CGEN_H

#include "cuda_codegen.h"

typedef dc_status *(*dc_cuda_gen_fn)(const dc_module *m, const dc_node *n, const dc_cuda_options *o,
                                     const char *name, dc_cuda_kernel *out);

/* The C type of a kernel parameter holding dtype t ("float", "unsigned short",
 * "unsigned char"; token ids "int", "long long") and the dc_common.cuh loader for it ("dc_ld",
 * "dc_ld_bf16", ...). */
const char *dc_cuda_ctype(dc_dtype t);
const char *dc_cuda_loader(dc_dtype t);
/* The dc_common.cuh store of an f32 value into a tensor of dtype t
 * (f32, bf16, f16: "dc_st", "dc_st_bf16", "dc_st_f16"; rounding to nearest
 * even, bit-exact with support/dtype_convert.c); "?" for others. */
const char *dc_cuda_storer(dc_dtype t);

/* Activations (computed values) are f32, bf16 or f16 (ir.h's
 * dc_module_activation_dtype); a kernel loads them through their loader and
 * computes in f32, rounding once as it stores.  dc_cuda_float_io says
 * whether a dtype is one of those three. */
int dc_cuda_float_io(dc_dtype t);
/* Whether the node's output and every input are f32 (the kernels keep their
 * vectorised f32 text for those; a 16-bit operand takes the typed path). */
int dc_cuda_all_f32(const dc_module *m, const dc_node *n);
/* Declares, for an operand called `tag` of dtype t, its element type and
 * accessors as the kernel text uses them:
 *   typedef <ctype> tag_t;  #define tag_ld <loader>  (and tag_st <storer>)
 * so that "tag_ld(p, i)" reads element i of a `const tag_t *p` as f32 and
 * "tag_st(p, i, v)" rounds v into it. */
void dc_cuda_emit_typed(dc_buf *b, const char *tag, dc_dtype t);
/* An error naming the op and operand when t is not f32, bf16 or f16. */
dc_status *dc_cuda_need_float_io(const dc_node *n, const char *what, dc_dtype t);

/* gelu_tanh of the float expression v, as CUDA C: x·σ(2t) = x / (1 +
 * e^(-2t)), t = √(2/π)·(x + 0.044715·x³), in f32 (nothing cancels for
 * x < 0, where torch's 1 + tanhf does).  Measured against the exact value
 * on a grid of [-12, 12] with the host's expf: 1.4e-7 relative from 0 up,
 * 2.4e-7 from -1, 2.7e-6 from -5 (e^(-2t)'s rounding grows with |t|, where
 * the result is under 1e-4).  -inf gives -inf/inf = NaN and a large
 * negative x gives -0, as the reference.  Written inline, not in
 * dc_common.cuh, so the prelude (part of every kernel's cache key) stays as
 * it is. */
#define DC_CUDA_GELU_TANH(v) \
  "(" v " / (1.0f + expf(-1.5957691216057308f * (" v " + 0.044715f * " v " * " v " * " v "))))"

/* Fills name/source from b (taking the buffer) and checks b for overflow. */
dc_status *dc_cuda_finish(dc_buf *b, const char *name, dc_cuda_kernel *out);

/* Index arithmetic: 32-bit when count fits (cheaper on the GPU), else 64-bit;
 * the literal suffix to match. */
const char *dc_cuda_index_type(uint64_t count);
const char *dc_cuda_count_suffix(uint64_t count);
/* "for (i = this thread; i < count; i += all threads) {" (grid-stride, i). */
void dc_cuda_emit_grid_loop(dc_buf *b, uint64_t count);

/* 1-D launch helper: grid.x = ceil(total / per_block), capped so that a grid
 * stride loop covers the rest. */
void dc_cuda_grid_1d(uint64_t total, uint32_t threads, dc_cuda_kernel *out);

dc_status *dc_cuda_gen_silu(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_gelu(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_clamp(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_add(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_mul(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_geglu(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_cast(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_reshape(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_permute(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_upsample(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_concat(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_slice(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_time_embed(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_group_norm(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_layer_norm(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_conv2d(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_conv3d(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_linear(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_blend(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
/* Whether g_flash.c's mma.sync kernel takes node n (bf16/f16 compute,
 * D <= 160, nothing empty); dc_cuda_gen_attention asks, so the choice
 * between the attention kernels is made in one place. */
int dc_cuda_flash_takes(const dc_module *m, const dc_node *n, const dc_cuda_options *o);
dc_status *dc_cuda_gen_flash_attention(const dc_module *, const dc_node *, const dc_cuda_options *, const char *,
                                       dc_cuda_kernel *);
dc_status *dc_cuda_gen_attention(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_quick_gelu(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_embedding(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_gelu_tanh(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_scale(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_gated_add(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_mod_layer_norm(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_rms_norm(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_eos_pool(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_rope_freqs(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_rope(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);
dc_status *dc_cuda_gen_rel_pos_bias(const dc_module *, const dc_node *, const dc_cuda_options *, const char *, dc_cuda_kernel *);

#endif
