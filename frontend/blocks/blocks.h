/* blocks.h — diffusers' building blocks as graph builders, one file per
 * diffusers file, so a model class is a thin composition of them and no
 * block is written twice.  Every builder takes the module path of the block
 * (its scope, e.g. "down_blocks.1.resnets.0"), binds the block's weights by
 * their diffusers names below that path, and mirrors the forward of the
 * diffusers class it names, op for op.
 *
 * Sections (file: diffusers file: blocks)
 *   blocks/resnet.c:              resnet.py, downsampling.py, upsampling.py:
 *                                 ResnetBlock2D, Downsample2D, Upsample2D
 *   blocks/attention_processor.c: attention_processor.py: Attention and its
 *                                 processors (the one place a new processor,
 *                                 joint attention or qk-norm, is added); the
 *                                 joint attention of FluxAttnProcessor and
 *                                 JointAttnProcessor2_0
 *   blocks/attention.c:           attention.py: BasicTransformerBlock, FeedForward
 *                                 (GEGLU, gelu-approximate), JointTransformerBlock (SD3)
 *   blocks/normalization.c:       normalization.py: AdaLayerNormZero, AdaLayerNormZeroSingle,
 *                                 AdaLayerNormContinuous, SD35AdaLayerNormZeroX
 *   blocks/transformer_flux.c:    transformers/transformer_flux.py: FluxTransformerBlock,
 *                                 FluxSingleTransformerBlock
 *   blocks/transformer_cogvideox.c: transformers/cogvideox_transformer_3d.py: CogVideoXBlock
 *   blocks/transformer_2d.c:      transformers/transformer_2d.py: Transformer2DModel (continuous input)
 *   blocks/embeddings.c:          embeddings.py: Timesteps, TimestepEmbedding,
 *                                 PixArtAlphaTextProjection, CombinedTimestep(Guidance)TextProjEmbeddings,
 *                                 FluxPosEmbed, PatchEmbed (SD3), CogVideoXPatchEmbed with its 3D sincos
 *                                 table, and CogVideoX's 3D rotary table
 *   blocks/unet_2d_blocks.c:      unets/unet_2d_blocks.py: the down, mid and up blocks of
 *                                 UNets (CrossAttnDownBlock2D, DownBlock2D, ...) and VAEs
 *                                 (DownEncoderBlock2D, UpDecoderBlock2D, UNetMidBlock2D)
 *   blocks/vae_blocks.c:          autoencoders/vae.py: Encoder, Decoder
 *   blocks/autoencoder_kl_cogvideox.c: autoencoders/autoencoder_kl_cogvideox.py (and
 *                                 CogVideoXDownsample3D / Upsample3D of downsampling.py,
 *                                 upsampling.py): causal conv3d, SpatialNorm3D,
 *                                 ResnetBlock3D, Encoder3D, Decoder3D
 *   blocks/clip.c:                transformers' models/clip/modeling_clip.py (text):
 *                                 CLIPTextEmbeddings, CLIPEncoderLayer, CLIPEncoder
 *   blocks/t5.c:                  transformers' models/t5/modeling_t5.py (encoder):
 *                                 T5Block, T5Stack
 * Plain torch modules (Conv2d, Linear, GroupNorm, LayerNorm, RMSNorm) are layers.h. */
#ifndef DC_BLOCKS_H
#define DC_BLOCKS_H

#include "../layers.h"

/* ---- resnet.py ---------------------------------------------------------- */

/* What every ResnetBlock2D of a model shares. */
typedef struct {
  int64_t groups; /* resnet_groups */
  double eps;     /* resnet_eps */
  int32_t temb;   /* the time embedding [B, temb_dim] each block projects and adds; -1: none (temb_channels=None) */
  int64_t temb_dim;
} blk_resnet_cfg;

/* ResnetBlock2D (pre-norm, time_embedding_norm "default", output_scale_factor
 * 1, dropout the identity): x's channels to cout, with a 1x1 conv_shortcut
 * when they differ. */
dc_status *blk_resnet(dc_gb *g, const char *p, const blk_resnet_cfg *r, int32_t x, int64_t cout, int32_t *out);
/* Downsample2D with use_conv at p (its conv is p.conv): a 3x3 stride-2 conv
 * to cout; padding 1, or 0 where diffusers pads right and bottom by one. */
dc_status *blk_downsample(dc_gb *g, const char *p, int32_t x, int64_t cout, int64_t padding, int32_t *out);
/* Upsample2D with use_conv at p: nearest 2x (scope p), then p.conv, 3x3 to cout. */
dc_status *blk_upsample(dc_gb *g, const char *p, int32_t x, int64_t cout, int32_t *out);

/* ---- attention_processor.py ----------------------------------------------- */

/* The processor an Attention runs between its projections.  One today;
 * JointAttnProcessor2_0 (SD3), FluxAttnProcessor2_0 and the qk-norm
 * variants are added here, as values of this enum and cases of
 * attention_processor.c's processor(). */
typedef enum {
  BLK_ATTN_SDPA, /* AttnProcessor2_0: softmax(q k^T * scale) v, per head */
} blk_attn_processor;

typedef struct {
  int64_t query_dim;  /* width of the hidden states */
  int64_t kv_dim;     /* width of the context (cross_attention_dim); query_dim for self-attention */
  int64_t heads, head_dim;
  int qkv_bias;       /* to_q/to_k/to_v with bias */
  int legacy_names;   /* the checkpoint may name them query/key/value/proj_attn (old VAE attention blocks) */
  blk_attn_processor processor;
} blk_attention_cfg;

/* Attention on token sequences: to_q(x), to_k(ctx), to_v(ctx), the
 * processor at the default scale 1/sqrt(head_dim), to_out.0 (with bias;
 * to_out.1 is dropout).  ctx = x for self-attention. */
dc_status *blk_attention(dc_gb *g, const char *p, const blk_attention_cfg *a, int32_t x, int32_t ctx, int32_t *out);
/* Attention on a [B,C,H,W] map as UNetMidBlock2D builds it
 * (_from_deprecated_attn_block: one head of width C, bias on q/k/v, old
 * names honoured): group_norm, tokens, self-attention, back to the map,
 * plus the input (residual_connection; rescale_output_factor 1). */
dc_status *blk_attention_spatial(dc_gb *g, const char *p, int64_t groups, double eps, int32_t x, int32_t *out);

/* ---- attention.py, transformer_2d.py ------------------------------------- */

/* BasicTransformerBlock, norm_type "layer_norm" (eps 1e-5): attn1 on the
 * hidden states, attn2 on ctx [B,S,ctx_dim], GEGLU feed-forward (inner
 * 4*dim), each added back to the residual stream. */
dc_status *blk_basic_transformer(dc_gb *g, const char *p, int32_t h, int64_t dim, int64_t heads, int64_t head_dim,
                                 int32_t ctx, int64_t ctx_dim, int32_t *out);

/* What every Transformer2DModel of a model shares. */
typedef struct {
  int64_t groups;        /* norm_num_groups */
  int linear_projection; /* use_linear_projection: proj_in/out Linear after/before the tokens, else 1x1 convs */
  int32_t ctx;           /* encoder_hidden_states */
  int64_t ctx_dim;       /* cross_attention_dim */
  const char *config;    /* the config's path, for messages */
} blk_transformer_cfg;

/* Transformer2DModel on continuous input: GroupNorm (eps 1e-6), proj_in,
 * `layers` BasicTransformerBlocks, proj_out, plus the residual.  Head size
 * channels // heads, as diffusers. */
dc_status *blk_transformer_2d(dc_gb *g, const char *p, const blk_transformer_cfg *t, int32_t x, int64_t ch,
                              int64_t heads, int64_t layers, int32_t *out);

/* ---- embeddings.py --------------------------------------------------------- */

/* Timesteps: the sinusoidal embedding of t [N] to [N, dim] (max_period 10000). */
dc_status *blk_timesteps(dc_gb *g, const char *scope, int32_t t, int64_t dim, int flip_sin_to_cos, double freq_shift,
                         int32_t *out);
/* TimestepEmbedding: linear_1 (in -> dim), act (silu), linear_2 (dim -> dim). */
dc_status *blk_timestep_embedding(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int32_t *out);

/* ---- unet_2d_blocks.py ------------------------------------------------------ */

/* A down block: `layers` (resnet, transformer?) pairs to cout, then a
 * Downsample2D unless it is the last block.  Each layer's output, and the
 * downsampler's, is appended to res[] (diffusers' output_states, the UNet's
 * skip connections) when res is not NULL. */
typedef struct {
  const blk_resnet_cfg *resnet;
  const blk_transformer_cfg *transformer; /* CrossAttnDownBlock2D; NULL: DownBlock2D / DownEncoderBlock2D */
  int64_t heads, transformer_layers;
  int64_t layers, cout;
  int add_downsample;
  int64_t downsample_padding;
} blk_down_cfg;
dc_status *blk_down_block(dc_gb *g, const char *p, const blk_down_cfg *d, int32_t x, int32_t *res, int *nres,
                          int32_t *out);

/* An up block: `layers` resnets to cout, each (with skips) on its input
 * concatenated with the last skip connection popped from skips[0..*nskips),
 * then a transformer when there is one; then an Upsample2D unless it is the
 * last block.  With skips, the channel bookkeeping is diffusers': layer j's
 * resnet is built for (j ? cout : prev_channels) + (last layer ? in_channels
 * : cout), and skips that do not give that are an error naming the config. */
typedef struct {
  const blk_resnet_cfg *resnet;
  const blk_transformer_cfg *transformer; /* CrossAttnUpBlock2D; NULL: UpBlock2D / UpDecoderBlock2D */
  int64_t heads, transformer_layers;
  int64_t layers, cout;
  int64_t in_channels, prev_channels; /* with skips: the constructor's in_channels, prev_output_channel */
  int add_upsample;
  const char *config; /* the config's path, for messages */
} blk_up_cfg;
dc_status *blk_up_block(dc_gb *g, const char *p, const blk_up_cfg *u, int32_t x, const int32_t *skips, int *nskips,
                        int32_t *out);

/* UNetMidBlock2DCrossAttn: resnets.0, then (transformer, resnet) per layer. */
dc_status *blk_mid_block_cross_attn(dc_gb *g, const char *p, const blk_resnet_cfg *r, const blk_transformer_cfg *t,
                                    int64_t heads, int64_t transformer_layers, int32_t x, int32_t *out);
/* UNetMidBlock2D: resnets.0, then (attention?, resnet) per layer (num_layers). */
dc_status *blk_mid_block(dc_gb *g, const char *p, const blk_resnet_cfg *r, int64_t layers, int add_attention,
                         int32_t x, int32_t *out);

/* ---- autoencoders/vae.py ----------------------------------------------------- */

typedef struct {
  const int64_t *block_out_channels;
  int nblocks;
  int64_t layers_per_block;
  int64_t groups;
  int mid_block_add_attention;
} blk_vae_cfg;

/* Encoder: conv_in, DownEncoderBlock2Ds (padding 0), mid block, norm, silu,
 * conv_out to cout (2 * latent_channels with double_z). */
dc_status *blk_vae_encoder(dc_gb *g, const char *p, const blk_vae_cfg *v, int32_t x, int64_t cout, int32_t *out);
/* Decoder: conv_in, mid block, UpDecoderBlock2Ds over the reversed
 * channels (layers_per_block + 1 resnets each), norm, silu, conv_out to cout. */
dc_status *blk_vae_decoder(dc_gb *g, const char *p, const blk_vae_cfg *v, int32_t x, int64_t cout, int32_t *out);

/* ---- autoencoders/autoencoder_kl_cogvideox.py --------------------------------- */

/* The conv caches that chain CogVideoX's frame batches: per causal conv
 * (by module path), the value holding the last kt-1 frames of its padded
 * input in the batch before; -1 until the first batch has run. */
typedef struct {
  char *path;
  int32_t frames;
} blk_conv_cache_entry;
typedef struct {
  blk_conv_cache_entry *e;
  int n, cap;
  int save; /* keep this batch's frames for the next (0 in the last batch: nobody reads them) */
} blk_conv_cache;
void blk_conv_cache_deinit(blk_conv_cache *c);

typedef struct {
  const int64_t *block_out_channels;
  int nblocks;
  int64_t layers_per_block;
  int64_t groups;                  /* norm_num_groups */
  double eps;                      /* norm_eps: the encoder's resnet GroupNorms (the others use 1e-6) */
  int64_t temporal_compress_level; /* log2(temporal_compression_ratio): blocks below it compress time */
} blk_cvx_cfg;

/* Every builder below takes cache NULL for one pass over all frames (the
 * causal padding is the first frame), else the caches of the batch before,
 * which it reads and (with cache->save) replaces. */

/* CogVideoXEncoder3D: conv_in, CogVideoXDownBlock3Ds (a Downsample3D after
 * each but the last, compressing time below the level), mid block (2
 * resnets), norm_out (eps 1e-6), silu, conv_out to cout (2 * latent). */
dc_status *blk_cvx_encoder(dc_gb *g, const char *p, const blk_cvx_cfg *c, blk_conv_cache *cache, int32_t x,
                           int64_t cout, int32_t *out);
/* CogVideoXDecoder3D of the latents z: conv_in, mid block, CogVideoXUpBlock3Ds
 * over the reversed channels (layers_per_block + 1 resnets, an Upsample3D
 * after each but the last), norm_out, silu, conv_out to cout; every norm is
 * a SpatialNorm3D conditioned on z. */
dc_status *blk_cvx_decoder(dc_gb *g, const char *p, const blk_cvx_cfg *c, blk_conv_cache *cache, int32_t z,
                           int64_t cout, int32_t *out);
/* CogVideoXDownsample3D at p: with compress_time, frames averaged in pairs
 * (the first kept apart when their number is odd); then per frame, padded
 * right and bottom by one, p.conv 3x3 stride 2. */
dc_status *blk_cvx_downsample3d(dc_gb *g, const char *p, int32_t x, int compress_time, int32_t *out);
/* CogVideoXUpsample3D at p: nearest x2 in H and W, and with compress_time
 * in time too (the first frame apart when their number is odd > 1); then
 * per frame p.conv 3x3. */
dc_status *blk_cvx_upsample3d(dc_gb *g, const char *p, int32_t x, int compress_time, int32_t *out);

/* ---- transformers: models/clip/modeling_clip.py ------------------------------ */

/* What every CLIPEncoderLayer of a text model shares. */
typedef struct {
  int64_t hidden, inter, heads; /* hidden_size, intermediate_size, num_attention_heads */
  double eps;                   /* layer_norm_eps */
  dc_op act;                    /* hidden_act: OP_QUICK_GELU or OP_GELU */
} blk_clip_cfg;

/* CLIPTextEmbeddings: token_embedding(ids [B,S]) + position_embedding's
 * rows [0, S) (S <= max_pos, checked by the caller) -> [B,S,dim]. */
dc_status *blk_clip_text_embeddings(dc_gb *g, const char *p, int32_t ids, int64_t vocab, int64_t max_pos,
                                    int64_t dim, int32_t *out);
/* CLIPEncoderLayer: layer_norm1, causal self_attn (q/k/v/out_proj with
 * bias, scale head_dim ** -0.5), + x; layer_norm2, mlp (fc1, act, fc2), + x. */
dc_status *blk_clip_encoder_layer(dc_gb *g, const char *p, const blk_clip_cfg *c, int32_t x, int32_t *out);
/* CLIPEncoder: `layers` encoder layers at p.layers.N; hidden[k] is the
 * value after k of them (transformers' hidden_states tuple: hidden[0] = x),
 * so hidden holds layers + 1 entries. */
dc_status *blk_clip_encoder(dc_gb *g, const char *p, const blk_clip_cfg *c, int64_t layers, int32_t x,
                            int32_t *hidden);

/* ---- transformers: models/t5/modeling_t5.py ---------------------------------- */

/* What every T5Block of an encoder shares. */
typedef struct {
  int64_t d_model, d_kv, heads, d_ff; /* d_model, d_kv, num_heads, d_ff */
  int64_t buckets, max_distance;      /* relative_attention_num_buckets, relative_attention_max_distance */
  double eps;                         /* layer_norm_epsilon */
  int gated;                          /* is_gated_act: wi_0 / wi_1, else wi */
  int relu;                           /* dense_act_fn "relu" (act unused) */
  dc_op act;                          /* else the op of dense_act_fn: OP_GELU_TANH (gelu_new) */
} blk_t5_cfg;

/* T5Block of an encoder at p: pre-RMS-norm self-attention with `bias`
 * [heads, S, S] added to the unscaled scores, + x; pre-RMS-norm
 * DenseReluDense (gated or not), + x. */
dc_status *blk_t5_block(dc_gb *g, const char *p, const blk_t5_cfg *c, int32_t x, int32_t bias, int32_t *out);
/* T5Stack as an encoder at p ("encoder"): embed_tokens(ids [B,S]) with the
 * given table [vocab, d_model] (T5 ties it to "shared"; the class picks the
 * tensor), the position bias from block 0's relative_attention_bias, `layers`
 * blocks, final_layer_norm -> [B,S,d_model]. */
dc_status *blk_t5_encoder(dc_gb *g, const char *p, const blk_t5_cfg *c, int64_t layers, int32_t ids, int32_t table,
                          int32_t *out);

/* ---- normalization.py ------------------------------------------------------ */

/* The chunks of an AdaLayerNormZero (6) or SD35AdaLayerNormZeroX (9)
 * linear's output, in diffusers' chunk order: chunk k of a block of width
 * dim lies at k * dim of the [B, k*dim] mod, where the ops read it in place. */
enum {
  BLK_ADA_SHIFT_MSA, BLK_ADA_SCALE_MSA, BLK_ADA_GATE_MSA,
  BLK_ADA_SHIFT_MLP, BLK_ADA_SCALE_MLP, BLK_ADA_GATE_MLP,
  BLK_ADA_SHIFT_MSA2, BLK_ADA_SCALE_MSA2, BLK_ADA_GATE_MSA2,
};

/* Every adaptive norm below takes emb_act = silu(emb) [B, cond_dim]: each
 * applies its own SiLU to the same conditioning embedding, so the caller
 * computes it once (the same bits) and every norm's p.linear reads it.
 * Their LayerNorms are without affine, eps 1e-6, as diffusers builds them. */

/* AdaLayerNormZero at p: *mod = p.linear(emb_act) [B, 6*dim] (chunks as
 * BLK_ADA_*), *out = norm(x) * (1 + scale_msa) + shift_msa. */
dc_status *blk_ada_layer_norm_zero(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim, int32_t *out,
                                   int32_t *mod);
/* SD35AdaLayerNormZeroX: as AdaLayerNormZero with 9 chunks; *out2 is the
 * same norm modulated by (scale_msa2, shift_msa2), the input of attn2. */
dc_status *blk_sd35_ada_layer_norm_zero_x(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim,
                                          int32_t *out, int32_t *out2, int32_t *mod);
/* AdaLayerNormZeroSingle: 3 chunks (shift, scale, gate); the gate is chunk 2. */
dc_status *blk_ada_layer_norm_zero_single(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim,
                                          int32_t *out, int32_t *mod);
/* AdaLayerNormContinuous (norm_type "layer_norm"): p.linear(emb_act) to
 * [B, 2*dim] chunked in the order (scale, shift) -- the opposite of the
 * Zero norms --, then norm(x) * (1 + scale) + shift; p.norm with weight and
 * bias when affine (elementwise_affine). */
dc_status *blk_ada_layer_norm_continuous(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t dim,
                                         int64_t cond_dim, int affine, double eps, int32_t *out);

/* ---- attention_processor.py: joint attention ------------------------------- */

/* FluxAttention / Attention with FluxAttnProcessor or JointAttnProcessor2_0.
 * All their projections have biases in the models that use them
 * (bias, added_proj_bias and out_bias true). */
typedef struct {
  int64_t dim;          /* query_dim = out_dim = heads * head_dim */
  int64_t heads, head_dim;
  int has_context;      /* added_kv_proj_dim = dim: add_q/k/v_proj on the context stream, joint attention */
  int qk_norm;          /* norm_q, norm_k (and norm_added_q/k): per-head RMSNorm with weight */
  double eps;           /* of those norms */
  int context_first;    /* the joint sequence is [context, x] (Flux) rather than [x, context] (SD3) */
  int pre_only;         /* no to_out (Flux's single blocks): the attention output itself */
  int context_pre_only; /* no to_add_out: the context's share of the output is dropped (SD3's last block) */
} blk_joint_attention_cfg;

/* to_q/k/v(x) [and add_q/k/v_proj(ctx)], per-head norms, the joint
 * sequence, RoPE with freqs [S,2,head_dim] over all of it when freqs >= 0,
 * softmax attention at scale 1/sqrt(head_dim), split back; to_out.0 on x's
 * share, to_add_out on the context's (*ctx_out; -1 when there is none). */
dc_status *blk_joint_attention(dc_gb *g, const char *p, const blk_joint_attention_cfg *a, int32_t x, int32_t ctx,
                               int32_t freqs, int32_t *out, int32_t *ctx_out);

/* ---- attention.py: FeedForward (gelu-approximate), JointTransformerBlock ---- */

/* FeedForward with activation_fn "gelu-approximate" (mult 4, dim_out dim):
 * net.0.proj to 4*dim, gelu(approximate="tanh"), net.2 back to dim. */
dc_status *blk_feed_forward_gelu_tanh(dc_gb *g, const char *p, int32_t x, int64_t dim, int32_t *out);

/* What every double-stream block (JointTransformerBlock,
 * FluxTransformerBlock) does to each stream after the joint attention:
 *   x += gate_msa * attn;  x += gate_mlp * ff(norm2(x) * (1 + scale_mlp) + shift_mlp)
 * with the chunks of that stream's AdaLayerNormZero mod [B, 6*dim]; norm2
 * (no affine, eps 1e-6) at p.norm_name, the gelu-approximate FeedForward at
 * p.ff_name. */
dc_status *blk_gated_feed_forward(dc_gb *g, const char *p, const char *norm_name, const char *ff_name, int32_t x,
                                  int32_t attn, int32_t mod, int64_t dim, int32_t *out);

typedef struct {
  int64_t dim, heads, head_dim;
  int context_pre_only; /* the last block: norm1_context is AdaLayerNormContinuous, no ff_context */
  int dual_attention;   /* use_dual_attention: norm1 is SD35AdaLayerNormZeroX, attn2 on the image stream */
  int qk_norm;          /* qk_norm "rms_norm" (eps 1e-6) */
} blk_joint_block_cfg;

/* JointTransformerBlock (SD3/SD3.5 MMDiT): x [B,N,dim], ctx [B,T,dim],
 * emb_act = silu(temb).  *ctx_out is -1 for a context_pre_only block. */
dc_status *blk_joint_transformer_block(dc_gb *g, const char *p, const blk_joint_block_cfg *b, int32_t x, int32_t ctx,
                                       int32_t emb_act, int32_t *out, int32_t *ctx_out);

/* ---- embeddings.py: the DiT embeddings ------------------------------------- */

/* PixArtAlphaTextProjection: linear_1 (in -> hidden), act (OP_SILU or
 * OP_GELU_TANH), linear_2 (hidden -> hidden). */
dc_status *blk_pixart_text_projection(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t hidden, dc_op act,
                                      int32_t *out);
/* CombinedTimestepTextProjEmbeddings (guidance < 0) or
 * CombinedTimestepGuidanceTextProjEmbeddings: time_proj (256 channels,
 * flip_sin_to_cos, shift 0) of t [B] through timestep_embedder (and of
 * guidance [B] through guidance_embedder, added), plus text_embedder
 * (PixArtAlphaTextProjection, silu) of pooled [B, pooled_dim] -> [B, dim]. */
dc_status *blk_combined_timestep_text_proj(dc_gb *g, const char *p, int32_t t, int32_t guidance, int32_t pooled,
                                           int64_t pooled_dim, int64_t dim, int32_t *out);
/* FluxPosEmbed (theta 10000 in Flux): ids [S, naxes] -> [S, 2, sum(axes)],
 * the cos and sin tables of apply_rotary_emb. */
dc_status *blk_flux_pos_embed(dc_gb *g, const char *scope, int32_t ids, const int64_t *axes, int naxes, double theta,
                              int32_t *out);

/* PatchEmbed as SD3 builds it (pos_embed_max_size set, no layer norm,
 * flatten): proj, a patch x patch conv with stride patch, of x
 * [B,in,H,W] to tokens [B,(H/patch)*(W/patch),dim], plus the persistent
 * sincos table p.pos_embed [1, max_size^2, dim] of the checkpoint cropped
 * to the centre (cropped_pos_embed).  H and W are multiples of patch with
 * H/patch and W/patch <= max_size (checked by the caller). */
dc_status *blk_patch_embed_cropped(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int64_t patch,
                                   int64_t max_size, int32_t *out);

/* ---- transformers/transformer_flux.py --------------------------------------- */

typedef struct {
  int64_t dim, heads, head_dim;
} blk_flux_cfg;

/* FluxTransformerBlock (double stream): x [B,N,dim], ctx [B,T,dim],
 * emb_act = silu(temb), freqs the rotary table of [ctx; x]. */
dc_status *blk_flux_transformer_block(dc_gb *g, const char *p, const blk_flux_cfg *c, int32_t x, int32_t ctx,
                                      int32_t emb_act, int32_t freqs, int32_t *out, int32_t *ctx_out);
/* FluxSingleTransformerBlock on the joined sequence h = [ctx; x]
 * [B,T+N,dim] (diffusers joins and splits it in every block; the caller
 * does both once, the same values). */
dc_status *blk_flux_single_transformer_block(dc_gb *g, const char *p, const blk_flux_cfg *c, int32_t h,
                                             int32_t emb_act, int32_t freqs, int32_t *out);

/* ---- CogVideoX: embeddings.py, normalization.py, attention_processor.py,
 * transformers/cogvideox_transformer_3d.py ------------------------------------ */

/* CogVideoXPatchEmbed's video half: x [B,F,in,H,W] -> [B, F'*(H/patch)*(W/patch),
 * dim], frame-major then row-major.  patch_t 0 (patch_size_t None,
 * CogVideoX 1.0): p.proj is a patch x patch conv with stride patch (bias)
 * on every frame, F' = F; else (CogVideoX 1.5) p.proj is a Linear over
 * each patch_t x patch x patch block's features in diffusers' order
 * (channel, frame, row, column), F' = F / patch_t.  H and W are multiples
 * of patch, F of patch_t (checked by the caller). */
dc_status *blk_cogvideox_patch_video(dc_gb *g, const char *p, int32_t x, int64_t in, int64_t dim, int64_t patch,
                                     int64_t patch_t, int32_t *out);

/* The video tokens x [B, F*h*w, dim] plus get_3d_sincos_pos_embed(dim,
 * (w, h), F, spatial_scale, temporal_scale) (the non-persistent table of
 * CogVideoXPatchEmbed, whose text rows are zeros), computed here in double
 * as diffusers does and rounded to f32 as its forward casts it.  The table
 * is one temporal part [F, dim/4] and one spatial part [h*w, 3*dim/4]: two
 * small constants broadcast over the grid, not the whole table.  dim is a
 * multiple of 16 (checked by the caller). */
dc_status *blk_cogvideox_sincos_pos(dc_gb *g, const char *scope, int32_t x, int64_t frames, int64_t h, int64_t w,
                                    double spatial_scale, double temporal_scale, int32_t *out);

/* The rotary table [F*h*w, 2, head_dim] of a video grid of F (patch)
 * frames of h x w patches, as CogVideoXPipeline._prepare_rotary_positional_embeddings
 * makes it: get_3d_rotary_pos_embed (head_dim/4 channels for time,
 * 3*head_dim/8 for each of h and w, theta 10000) on, for CogVideoX 1.0
 * (slice 0), the "linspace" grid of get_resize_crop_region_for_grid over
 * the base grid base_h x base_w (sample_height and sample_width //
 * patch_size); for CogVideoX 1.5 (slice 1), the "slice" grid: the integer
 * positions, h <= base_h and w <= base_w (checked by the caller).  The
 * positions are a constant [F*h*w, 3] and the table a rope_freqs of them.
 * head_dim is a multiple of 16 (checked by the caller). */
dc_status *blk_cogvideox_rotary_table(dc_gb *g, const char *scope, int64_t head_dim, int64_t frames, int64_t h,
                                      int64_t w, int64_t base_h, int64_t base_w, int slice, int32_t *out);

/* The chunks of CogVideoXLayerNormZero's [B, 6*dim] linear output. */
enum {
  BLK_COG_SHIFT, BLK_COG_SCALE, BLK_COG_GATE, BLK_COG_ENC_SHIFT, BLK_COG_ENC_SCALE, BLK_COG_ENC_GATE,
};

/* CogVideoXLayerNormZero at p: *mod = p.linear(emb_act) [B, 6*dim]
 * (chunks BLK_COG_*); the one p.norm (nn.LayerNorm(dim, eps), with weight
 * and bias when affine) modulated by the video chunks for x (*out) and by
 * the text chunks for ctx (*ctx_out). */
dc_status *blk_cogvideox_layer_norm_zero(dc_gb *g, const char *p, int32_t x, int32_t ctx, int32_t emb_act,
                                         int64_t cond_dim, int64_t dim, int affine, double eps, int32_t *out,
                                         int32_t *ctx_out, int32_t *mod);
/* AdaLayerNorm with chunk_dim 1 (CogVideoX's norm_out): p.linear(emb_act)
 * [B, 2*dim] chunked (shift, scale) -- the order of this branch only --,
 * then p.norm(x) * (1 + scale) + shift; p.norm with weight and bias when
 * affine. */
dc_status *blk_ada_layer_norm_shift_scale(dc_gb *g, const char *p, int32_t x, int32_t emb_act, int64_t cond_dim,
                                          int64_t dim, int affine, double eps, int32_t *out);

typedef struct {
  int64_t dim, heads, head_dim;
  int qkv_bias; /* attention_bias: to_q/k/v with bias (to_out.0 always has one) */
} blk_cogvideox_attention_cfg;

/* Attention with CogVideoXAttnProcessor2_0 at p on the joint sequence
 * h = [text; video] [B, T+N, dim]: to_q/k/v, per-head LayerNorm norm_q /
 * norm_k (affine, eps 1e-6), RoPE with freqs [N, 2, head_dim] on the video
 * tokens only (from token T; none when freqs < 0), softmax attention at
 * scale 1/sqrt(head_dim) -> [B, T+N, dim], before p.to_out.0, which the
 * caller applies (a per-token Linear with bias: CogVideoXBlock projects
 * each stream's share into its gated residual). */
dc_status *blk_cogvideox_attention(dc_gb *g, const char *p, const blk_cogvideox_attention_cfg *a, int32_t h,
                                   int64_t text_len, int32_t freqs, int32_t *out);

typedef struct {
  blk_cogvideox_attention_cfg attn;
  int64_t time_dim; /* time_embed_dim: the width of emb_act */
  int affine;       /* norm_elementwise_affine */
  double eps;       /* norm_eps */
} blk_cogvideox_block_cfg;

/* CogVideoXBlock: x [B,N,dim] video, ctx [B,T,dim] text, emb_act =
 * silu(temb) [B, time_dim], freqs the video's rotary table or -1. */
dc_status *blk_cogvideox_block(dc_gb *g, const char *p, const blk_cogvideox_block_cfg *c, int32_t x, int32_t ctx,
                               int32_t emb_act, int32_t freqs, int32_t *out, int32_t *ctx_out);

#endif
