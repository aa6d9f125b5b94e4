"""make_fixtures' table of what to make (tools/make_fixtures.py): the model and scheduler configs,
the seeds and shapes of each run's inputs, and FIXTURES, one entry per fixture folder with its
model (or pipeline components), its runs (entry, io file, tolerance, VAE tiling/slicing) and the
description that goes into case.json and the fixtures' README.  Plain data: nothing here imports
torch or diffusers.
"""

# --------------------------------------------------------------------------------------
# Model configs
# --------------------------------------------------------------------------------------

# diffusers' own tiny UNet test config (tests/models/unets/test_models_unet_2d_condition.py)
UNET_TINY = {
    "block_out_channels": (4, 8),
    "norm_num_groups": 4,
    "down_block_types": ("CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D"),
    "cross_attention_dim": 8,
    "attention_head_dim": 2,
    "out_channels": 4,
    "in_channels": 4,
    "layers_per_block": 1,
    "sample_size": 16,
}

# SD1.5 block structure at reduced width
UNET_SD15 = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (16, 32, 64, 64),
    "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "layers_per_block": 2,
    "attention_head_dim": 8,
    "norm_num_groups": 8,
    "cross_attention_dim": 32,
    "sample_size": 16,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "downsample_padding": 1,
    "act_fn": "silu",
    "norm_eps": 1e-5,
}

# SD2 style: per-block attention_head_dim list, linear projections, upcast_attention
UNET_SD2 = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (8, 16, 32, 32),
    "down_block_types": ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    "up_block_types": ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    "layers_per_block": 1,
    "attention_head_dim": [2, 4, 8, 8],
    "use_linear_projection": True,
    "upcast_attention": True,
    "norm_num_groups": 4,
    "cross_attention_dim": 16,
    "sample_size": 16,
}

# SDXL style: text_time additional embedding, transformer depth per block
UNET_SDXL = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (16, 32, 64),
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    "transformer_layers_per_block": [1, 2, 2],
    "attention_head_dim": [1, 2, 4],
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 8,
    "projection_class_embeddings_input_dim": 32 + 6 * 8,
    "cross_attention_dim": 32,
    "norm_num_groups": 8,
    "layers_per_block": 2,
    "sample_size": 16,
}

# diffusers' own tiny AutoencoderKL test config (tests/models/autoencoders/test_models_autoencoder_kl.py)
VAE_TINY = {
    "block_out_channels": [2, 4],
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 2,
    "up_block_types": ["UpDecoderBlock2D"] * 2,
    "latent_channels": 4,
    "norm_num_groups": 2,
}

VAE_NOATTN = {
    "block_out_channels": [8, 16],
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 2,
    "up_block_types": ["UpDecoderBlock2D"] * 2,
    "latent_channels": 4,
    "norm_num_groups": 4,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
    "mid_block_add_attention": False,
}

# SD VAE structure at reduced width
VAE_SD = {
    "block_out_channels": [16, 32, 64, 64],
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 2,
    "latent_channels": 4,
    "norm_num_groups": 8,
    "sample_size": 64,
}

SCHEDULER_SD15 = {
    "num_train_timesteps": 1000,
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "skip_prk_steps": True,
    "set_alpha_to_one": False,
    "steps_offset": 1,
}

# transformers' CLIPTextConfig at hidden size 16 with the real vocabulary (the ids come from the real
# tokenizer): SD1.5's text encoder (CLIP-L: quick_gelu, the legacy eos_token_id 2 of its released
# config, so pooled at argmax(input_ids)) and the newer config (eos_token_id 49407: the first eos)
CLIP_SD15 = {
    "vocab_size": 49408,
    "hidden_size": 16,
    "intermediate_size": 48,
    "projection_dim": 16,
    "num_hidden_layers": 3,
    "num_attention_heads": 2,
    "max_position_embeddings": 77,
    "hidden_act": "quick_gelu",
    "layer_norm_eps": 1e-5,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "pad_token_id": 1,
}
CLIP_SD15_EOS = dict(CLIP_SD15, bos_token_id=49406, eos_token_id=49407)

# SDXL's text_encoder_2 (OpenCLIP bigG, CLIPTextModelWithProjection): gelu, eos_token_id 2, a projection
# of another width; 4 heads of 4
CLIP_SDXL2 = {
    "vocab_size": 49408,
    "hidden_size": 16,
    "intermediate_size": 64,
    "projection_dim": 12,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "max_position_embeddings": 77,
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-5,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "pad_token_id": 1,
}

# diffusers' tiny FluxTransformer2DModel test config (tests/models/transformers/test_models_transformer_flux.py:
# attention_head_dim 16, 2 heads, axes_dims_rope [4, 4, 8]) with 16 input channels (4 latent channels packed
# 2x2), two double-stream blocks and one single-stream block (dev, with the guidance embedder), or one and
# two (schnell)
FLUX_DEV_TINY = {
    "patch_size": 1,
    "in_channels": 16,
    "num_layers": 2,
    "num_single_layers": 1,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": 32,
    "pooled_projection_dim": 24,
    "guidance_embeds": True,
    "axes_dims_rope": [4, 4, 8],
}
FLUX_SCHNELL_TINY = dict(FLUX_DEV_TINY, num_layers=1, num_single_layers=2, guidance_embeds=False)

# SD3Transformer2DModel at a tiny width (2 heads of 8): SD3-style (no qk norm, no dual attention) and
# SD3.5-style (qk_norm rms_norm, SD35AdaLayerNormZeroX dual attention in the first two of three blocks); the
# last block is context_pre_only in both.  pos_embed_max_size 8 patches, so a non-square latent crops the
# centre of the table off-centre by one row or column
SD3_TINY = {
    "sample_size": 8,
    "patch_size": 2,
    "in_channels": 4,
    "num_layers": 2,
    "attention_head_dim": 8,
    "num_attention_heads": 2,
    "joint_attention_dim": 24,
    "caption_projection_dim": 16,
    "pooled_projection_dim": 20,
    "out_channels": 4,
    "pos_embed_max_size": 8,
}
SD35_TINY = dict(SD3_TINY, num_layers=3, dual_attention_layers=[0, 1], qk_norm="rms_norm")

# CogVideoXTransformer3DModel at a tiny width (2 heads of 16, time_embed_dim 16, text_embed_dim 32, 4 latent
# channels, 2 blocks): sample_frames 9 (3 latent frames at temporal_compression_ratio 4) of 6x8 latents (3x4
# patches; non-square), 8 text tokens.  5b-style (3D RoPE), 2b-style (3D sincos positions; here without qkv
# bias) and 5b-I2V-style (RoPE plus the learned table, 8 input channels)
COGVIDEOX_TINY = {
    "num_attention_heads": 2,
    "attention_head_dim": 16,
    "in_channels": 4,
    "out_channels": 4,
    "time_embed_dim": 16,
    "text_embed_dim": 32,
    "num_layers": 2,
    "sample_width": 8,
    "sample_height": 6,
    "sample_frames": 9,
    "patch_size": 2,
    "temporal_compression_ratio": 4,
    "max_text_seq_length": 8,
    "use_rotary_positional_embeddings": True,
}
COGVIDEOX_SINCOS = dict(COGVIDEOX_TINY, use_rotary_positional_embeddings=False, attention_bias=False)
COGVIDEOX_LEARNED = dict(COGVIDEOX_TINY, in_channels=8, use_learned_positional_embeddings=True)
# CogVideoX 1.5-style: patch_size_t 2 (a Linear patch embedding over 2 frames x 2 x 2), patch_bias false as
# released (unused by that Linear), sample_frames 13 (4 latent frames: 2 frame groups)
COGVIDEOX_T = dict(COGVIDEOX_TINY, patch_size_t=2, patch_bias=False, sample_frames=13)
# CogVideoX 1.5 image-to-video-style: the ofs embedding (ofs_embed_dim = time_embed_dim), 8 input channels
COGVIDEOX_I2V15 = dict(COGVIDEOX_T, in_channels=8, ofs_embed_dim=16)

CLIP_PROMPTS = ["a photograph of an astronaut riding a horse",
                "A painting of a red fox in the snow, by Hokusai; highly detailed, 4k!"]
CLIP_PROMPTS_2 = ["an oil painting of a lighthouse at dusk, waves crashing on the rocks",
                  # longer than 77 tokens: truncated, its eos at position 76
                  "a cozy cabin in the woods " * 14]
# ids no tokenizer makes, for the first-eos rule: two eos (49407) in row 0, none in row 1 (pooled at
# position 0), eos first in row 2
CLIP_IDS = [[49406, 320, 1125, 49407, 539, 49407] + [1] * 71,
            [49406] + list(range(1000, 1076)),
            [49407] + [49406] * 76]

# transformers' T5EncoderModel shaped like T5-v1.1 (Flux's and SD3's text_encoder_2/3: gated-gelu,
# untied lm head in the full model) at d_model 32; relative_attention_max_distance 20 so that 77 tokens
# reach the saturated buckets (the released 128 is exercised by T5_ORIGINAL).
T5_V11 = {
    "vocab_size": 1000,
    "d_model": 32,
    "d_kv": 8,
    "num_heads": 4,
    "d_ff": 64,
    "num_layers": 2,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 20,
    "feed_forward_proj": "gated-gelu",
    "tie_word_embeddings": False,
    "decoder_start_token_id": 0,
}
# The original T5 (t5-small's structure): relu, not gated, at d_model 32 with heads * d_kv = 48 (not
# d_model), 3 layers, the released buckets (32) and max_distance (128).
T5_ORIGINAL = {
    "vocab_size": 600,
    "d_model": 32,
    "d_kv": 8,
    "num_heads": 6,
    "d_ff": 48,
    "num_layers": 3,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "feed_forward_proj": "relu",
}
T5_GROUP_OFFLOAD = ["--offload", "group", "--group-level", "block", "--blocks-per-group", "1"]

# the packed grid of a 48x80 image (latents 6x10 -> 3x5 packed), batch 2, 7 or 13 text tokens
FLUX_DEV_IN = dict(seed=400, batch=2, channels=16, rows=3, cols=5, seq=7, joint_dim=32, pooled_dim=24,
                   sigmas=[1.0, 0.35], guidance=[3.5, 5.0])
FLUX_SCHNELL_IN = dict(seed=410, batch=2, channels=16, rows=5, cols=3, seq=13, joint_dim=32, pooled_dim=24,
                       sigmas=[0.75, 0.1])
# latents 6x10 (3x5 patches of the 8x8 table) and 10x6; batch 2; 9 and 11 tokens; sigmas (x1000 as the
# pipeline passes them)
SD3_IN = dict(seed=420, batch=2, channels=4, h=6, w=10, seq=9, joint_dim=24, pooled_dim=20, sigmas=[1.0, 0.42])
SD35_IN = dict(seed=430, batch=2, channels=4, h=10, w=6, seq=11, joint_dim=24, pooled_dim=20, sigmas=[0.8, 0.05])
# CogVideoX: the sample size (batch 2, 3 latent frames of 6x8, 8 tokens, integer timesteps); other sizes: 2
# frames of 8x6 (a 4x3 grid on the 3x4 base: the pipeline's rotary grid is the crop region (0, 1)-(3, 3)) with
# 5 tokens, and 2 frames of 4x10 (the sincos table recomputed for a 2x5 grid) with the 8 tokens it needs
COGVIDEOX_IN = dict(seed=440, batch=2, frames=3, channels=4, h=6, w=8, seq=8, text_dim=32, timesteps=[999, 421])
COGVIDEOX_RESIZED_IN = dict(seed=441, batch=1, frames=2, channels=4, h=8, w=6, seq=5, text_dim=32, timesteps=[37])
COGVIDEOX_SINCOS_RESIZED_IN = dict(COGVIDEOX_RESIZED_IN, seed=442, h=4, w=10, seq=8, timesteps=[640])
COGVIDEOX_LEARNED_IN = dict(COGVIDEOX_IN, seed=443, channels=8, timesteps=[501, 2])
# 1.5: 4 latent frames (2 groups) of 6x8; 2 frames of 4x6 (a 2x3 grid: the rotary positions sliced from the 3x4
# base grid), 6 tokens
COGVIDEOX_T_IN = dict(COGVIDEOX_IN, seed=444, frames=4, timesteps=[999, 58])
COGVIDEOX_T_RESIZED_IN = dict(COGVIDEOX_RESIZED_IN, seed=445, frames=2, h=4, w=6, seq=6, timesteps=[300])
COGVIDEOX_I2V15_IN = dict(COGVIDEOX_T_IN, seed=446, channels=8, timesteps=[761, 12], ofs=[2.0])
TINY_UNET_IN = dict(seed=100, batch=4, channels=4, h=16, w=16, seq=4, ctx_dim=8, timesteps=[10, 500, 999, 250])
TINY_VAE_DECODE_IN = dict(seed=301, name="z", shape=(4, 4, 16, 16))

# --------------------------------------------------------------------------------------
# Fixture table
# --------------------------------------------------------------------------------------


def _unet_run(io, inputs, tol=1e-4, component=None, variant=None):
    return dict(entry="forward", io=io, kind="unet", inputs=("unet", inputs), tolerance=tol,
                component=component, variant=variant)


def _vae_run(entry, io, seed, name, shape, tol=1e-4, component=None, tiling=False, slicing=False):
    return dict(entry=entry, io=io, kind="vae", inputs=("image", dict(seed=seed, name=name, shape=shape)),
                tolerance=tol, component=component, variant=None, tiling=tiling, slicing=slicing)


def _flux_run(io, inputs, tol=1e-4, **options):
    """options: group_offload ("block", "leaf"), layerwise_casting ("fp8_e4m3"): make_fixtures_dit.py."""
    return dict(entry="forward", io=io, kind="flux", inputs=("flux", inputs), tolerance=tol, component=None,
                variant=None, **options)


def _sd3_run(io, inputs, tol=1e-4, **options):
    return dict(entry="forward", io=io, kind="sd3", inputs=("sd3", inputs), tolerance=tol, component=None,
                variant=None, **options)


def _cogvideox_run(io, inputs, tol=1e-4, **options):
    """options as _flux_run's."""
    return dict(entry="forward", io=io, kind="cogvideox", inputs=("cogvideox", inputs), tolerance=tol,
                component=None, variant=None, **options)


def _clip_run(io, inputs, hidden=None, variant=None, tol=1e-5):
    return dict(entry="forward", io=io, kind="clip", inputs=("clip", inputs), tolerance=tol, component=None,
                variant=variant, clip_hidden=hidden)


def _t5_run(io, inputs, variant=None, tol=1e-5, diffc_options=None):
    return dict(entry="forward", io=io, kind="t5", inputs=("t5", inputs), tolerance=tol, component=None,
                variant=variant, **({"diffc_options": diffc_options} if diffc_options else {}))


FIXTURES = [
    dict(name="unet_tiny", cls="UNet2DConditionModel", config=UNET_TINY, seed=1,
         description="diffusers' own tiny UNet2DConditionModel test config (block_out_channels (4, 8), "
                     "CrossAttnDownBlock2D/DownBlock2D, attention_head_dim 2), fp32 weights in one "
                     "safetensors file. Batch 4, sample 4x4x16x16, 4 tokens of width 8.",
         runs=[_unet_run("io_forward.safetensors", TINY_UNET_IN)]),
    dict(name="unet_tiny_bf16", cls="UNet2DConditionModel", config=UNET_TINY, seed=1, save_dtype="bf16",
         description="The unet_tiny model (same seed, same weights) saved in bfloat16 as variant 'bf16' "
                     "(diffusion_pytorch_model.bf16.safetensors). Reference computed in float32 from the "
                     "bf16-rounded weights (from_pretrained(variant='bf16', torch_dtype=float32)). "
                     "Same inputs as unet_tiny.",
         runs=[_unet_run("io_forward.safetensors", TINY_UNET_IN, tol=1e-3, variant="bf16")]),
    dict(name="unet_sd15", cls="UNet2DConditionModel", config=UNET_SD15, seed=2,
         description="SD1.5 block structure at reduced width: block_out_channels (16, 32, 64, 64), "
                     "CrossAttnDownBlock2D x3 + DownBlock2D, layers_per_block 2, attention_head_dim 8 "
                     "(= 8 heads), norm_num_groups 8, cross_attention_dim 32. Run 'forward': batch 2, "
                     "non-square sample 2x4x16x24, 77 tokens; run 'forward_b1': batch 1, 1x4x16x16.",
         runs=[_unet_run("io_forward.safetensors",
                         dict(seed=200, batch=2, channels=4, h=16, w=24, seq=77, ctx_dim=32,
                              timesteps=[10, 999])),
               _unet_run("io_forward_b1.safetensors",
                         dict(seed=201, batch=1, channels=4, h=16, w=16, seq=77, ctx_dim=32,
                              timesteps=[500]))]),
    dict(name="unet_sd2", cls="UNet2DConditionModel", config=UNET_SD2, seed=3, check_upcast=True,
         description="SD2 style: block_out_channels (8, 16, 32, 32), attention_head_dim [2, 4, 8, 8] "
                     "(a per-block list, = heads), use_linear_projection true, upcast_attention true, "
                     "norm_num_groups 4, cross_attention_dim 16, layers_per_block 1. Batch 2, sample "
                     "2x4x16x16, 7 tokens.",
         runs=[_unet_run("io_forward.safetensors",
                         dict(seed=210, batch=2, channels=4, h=16, w=16, seq=7, ctx_dim=16,
                              timesteps=[10, 999]))]),
    dict(name="unet_sdxl", cls="UNet2DConditionModel", config=UNET_SDXL, seed=4, max_shard_size="300KB",
         description="SDXL style: block_out_channels (16, 32, 64), DownBlock2D + CrossAttnDownBlock2D x2, "
                     "transformer_layers_per_block [1, 2, 2], attention_head_dim [1, 2, 4] (= heads), "
                     "use_linear_projection, addition_embed_type text_time (addition_time_embed_dim 8, "
                     "projection_class_embeddings_input_dim 80), cross_attention_dim 32. Saved SHARDED "
                     "(max_shard_size 300KB, diffusion_pytorch_model.safetensors.index.json). Batch 2, "
                     "sample 2x4x16x16, 5 tokens, text_embeds 2x32, time_ids 2x6.",
         runs=[_unet_run("io_forward.safetensors",
                         dict(seed=220, batch=2, channels=4, h=16, w=16, seq=5, ctx_dim=32,
                              timesteps=[10, 999], text_dim=32,
                              time_ids=[[64, 64, 0, 0, 64, 64], [96, 128, 8, 16, 64, 64]]))]),
    dict(name="vae_tiny", cls="AutoencoderKL", config=VAE_TINY, seed=5,
         description="diffusers' own tiny AutoencoderKL test config (block_out_channels [2, 4], "
                     "norm_num_groups 2, mid-block attention on). encode: sample 4x3x32x32 -> mean, "
                     "logvar 4x4x16x16; decode: z 4x4x16x16 -> 4x3x32x32.",
         runs=[_vae_run("encode", "io_encode.safetensors", 300, "sample", (4, 3, 32, 32)),
               _vae_run("decode", "io_decode.safetensors", **TINY_VAE_DECODE_IN)]),
    dict(name="vae_noattn", cls="AutoencoderKL", config=VAE_NOATTN, seed=6,
         description="AutoencoderKL without quant_conv, post_quant_conv and mid-block attention "
                     "(use_quant_conv false, use_post_quant_conv false, mid_block_add_attention false), "
                     "block_out_channels [8, 16], norm_num_groups 4. encode 1x3x16x16, decode 1x4x8x8.",
         runs=[_vae_run("encode", "io_encode.safetensors", 310, "sample", (1, 3, 16, 16)),
               _vae_run("decode", "io_decode.safetensors", 311, "z", (1, 4, 8, 8))]),
    dict(name="vae_sd", cls="AutoencoderKL", config=VAE_SD, seed=7,
         description="SD VAE structure at reduced width: block_out_channels [16, 32, 64, 64], "
                     "DownEncoderBlock2D x4 / UpDecoderBlock2D x4, layers_per_block 2, norm_num_groups 8, "
                     "mid-block attention on, sample_size 64. encode: non-square 1x3x64x48 -> 1x4x8x6; "
                     "decode: z 2x4x8x6 -> 2x3x64x48.",
         runs=[_vae_run("encode", "io_encode.safetensors", 320, "sample", (1, 3, 64, 48)),
               _vae_run("decode", "io_decode.safetensors", 321, "z", (2, 4, 8, 6))]),
    dict(name="vae_tiled", cls="AutoencoderKL", config=VAE_TINY, seed=8,
         description="The tiny AutoencoderKL config (sample_size 32: tiles of 32 px / 16 latents, "
                     "overlap 0.25) run with diffusers' enable_tiling / enable_slicing. decode_tiled: z "
                     "1x4x40x28 -> 4x3 tiles of up to 16x16 latents every 12, blended over 8 px, cropped "
                     "to 24; decode_sliced_tiled: z 2x4x20x20 per sample, each tiled 2x2; encode_tiled: "
                     "sample 1x3x72x50 -> 3x3 tiles every 24 px (the last only 2 px wide), blended over 4 "
                     "latents; encode_sliced: 2x3x32x32 one sample at a time, untiled.",
         runs=[_vae_run("decode", "io_decode_tiled.safetensors", 330, "z", (1, 4, 40, 28), tiling=True),
               _vae_run("decode", "io_decode_sliced_tiled.safetensors", 331, "z", (2, 4, 20, 20), tiling=True,
                        slicing=True),
               _vae_run("encode", "io_encode_tiled.safetensors", 332, "sample", (1, 3, 72, 50), tiling=True),
               _vae_run("encode", "io_encode_sliced.safetensors", 333, "sample", (2, 3, 32, 32), slicing=True)]),
    dict(name="clip_sd15", cls="CLIPTextModel", config=CLIP_SD15, seed=9, legacy_layout=True,
         description="transformers' CLIPTextModel shaped like SD1.5's text encoder (CLIP-L) at hidden_size 16: "
                     "quick_gelu, 3 layers of 2 heads, the real 49408-token vocabulary, eos_token_id 2 as in "
                     "SD1.5's released config (pooled at argmax(input_ids)). Saved in the layout of the released "
                     "checkpoints (transformers 4: names under text_model., the position_ids buffer). Inputs: "
                     "two prompts through the real CLIP tokenizer, padded with <|endoftext|> to 77. Runs: "
                     "forward (last_hidden_state, pooler_output); clip_skip 1 (hidden_states[-2] through "
                     "final_layer_norm, as SD pipelines do); the embeddings (hidden_states[0]).",
         runs=[_clip_run("io_forward.safetensors", dict(prompts=CLIP_PROMPTS)),
               _clip_run("io_clip_skip.safetensors", dict(prompts=CLIP_PROMPTS), hidden=[2, True]),
               _clip_run("io_embeddings.safetensors", dict(prompts=CLIP_PROMPTS_2), hidden=[0, False])]),
    dict(name="clip_sd15_eos", cls="CLIPTextModel", config=CLIP_SD15_EOS, seed=9, legacy_layout=True,
         description="The clip_sd15 model (same seed, byte-identical weights) with the newer config's "
                     "eos_token_id 49407: pooled at the first eos. Runs: forward on two prompts (one truncated "
                     "to 77 tokens); forward on ids no tokenizer makes (two eos in a row, none, eos first).",
         runs=[_clip_run("io_forward.safetensors", dict(prompts=CLIP_PROMPTS_2)),
               _clip_run("io_forward_ids.safetensors", dict(ids=CLIP_IDS))]),
    dict(name="clip_sd15_fp16", cls="CLIPTextModel", config=CLIP_SD15_EOS, seed=9, save_dtype="fp16",
         description="The clip_sd15_eos model saved by transformers 5 in float16 as variant 'fp16' "
                     "(model.fp16.safetensors, names without text_model.). Reference computed in float32 from "
                     "the fp16-rounded weights (from_pretrained(variant='fp16', dtype=float32)).",
         runs=[_clip_run("io_forward.safetensors", dict(prompts=CLIP_PROMPTS), variant="fp16")]),
    dict(name="clip_sdxl2", cls="CLIPTextModelWithProjection", config=CLIP_SDXL2, seed=10, max_shard_size="1MB",
         description="transformers' CLIPTextModelWithProjection shaped like SDXL's text_encoder_2 (OpenCLIP "
                     "bigG) at hidden_size 16: gelu, 4 layers of 4 heads, projection_dim 12, eos_token_id 2. "
                     "Saved SHARDED (max_shard_size 1MB, model.safetensors.index.json). Inputs: two prompts "
                     "through the real CLIP tokenizer padded with '!' as SDXL's tokenizer_2 (one truncated). "
                     "Runs: forward (text_embeds, last_hidden_state); the penultimate layer (hidden_states[-2] "
                     "without final_layer_norm, as SDXL pipelines take it).",
         runs=[_clip_run("io_forward.safetensors", dict(prompts=CLIP_PROMPTS_2, pad="!")),
               _clip_run("io_penultimate.safetensors", dict(prompts=CLIP_PROMPTS, pad="!"), hidden=[3, False])]),
    dict(name="t5_v11", cls="T5EncoderModel", config=T5_V11, seed=12, max_shard_size="100KB",
         description="transformers' T5EncoderModel shaped like T5-v1.1 (the text encoder of Flux and SD3) at "
                     "d_model 32: gated-gelu (gelu_new), 2 blocks of 4 heads of 8, d_ff 64, 32 buckets, "
                     "relative_attention_max_distance 20, vocabulary 1000. Saved SHARDED by transformers 5 "
                     "(max_shard_size 100KB, model.safetensors.index.json; the token table as shared.weight "
                     "only). Inputs: seeded ids, each row ending in eos, the last row padded with 0. Runs: 2x77 "
                     "(offsets beyond max_distance: the saturated log buckets); 2x19; 2x19 again with group "
                     "offload, one block per group (encoder.block.N).",
         runs=[_t5_run("io_forward.safetensors", dict(seed=400, batch=2, seq=77, vocab=1000, padded=20)),
               _t5_run("io_short.safetensors", dict(seed=401, batch=2, seq=19, vocab=1000, padded=5)),
               _t5_run("io_offload.safetensors", dict(seed=401, batch=2, seq=19, vocab=1000, padded=5),
                       diffc_options=T5_GROUP_OFFLOAD)]),
    dict(name="t5_v11_fp16", cls="T5EncoderModel", config=T5_V11, seed=12, save_dtype="fp16",
         description="The t5_v11 model saved by transformers 5 in float16 as variant 'fp16' (model.fp16.safetensors; "
                     "the token table and relative_attention_bias are read as stored). Reference computed in "
                     "float32 from the fp16-rounded weights.",
         runs=[_t5_run("io_forward.safetensors", dict(seed=400, batch=2, seq=77, vocab=1000, padded=20),
                       variant="fp16")]),
    dict(name="t5_original", cls="T5EncoderModel", config=T5_ORIGINAL, seed=13, embed_tokens_layout="only",
         description="transformers' T5EncoderModel shaped like the original T5 (t5-small's structure) at d_model "
                     "32: relu feed-forward (wi, wo; not gated), 3 blocks of 6 heads of 8 (heads * d_kv = 48, "
                     "not d_model), d_ff 48, the released 32 buckets and max_distance 128, vocabulary 600. The "
                     "token table stored as encoder.embed_tokens.weight without shared.weight (transformers "
                     "ties it to shared on load). Runs: 1x150 (offsets beyond 128); 2x33.",
         runs=[_t5_run("io_forward.safetensors", dict(seed=410, batch=1, seq=150, vocab=600)),
               _t5_run("io_batch.safetensors", dict(seed=411, batch=2, seq=33, vocab=600, padded=9))]),
    dict(name="flux_dev", cls="FluxTransformer2DModel", config=FLUX_DEV_TINY, seed=11,
         description="diffusers' FluxTransformer2DModel shaped like FLUX.1-dev (guidance_embeds true) at diffusers' "
                     "tiny test width: 2 heads of 16, axes_dims_rope [4, 4, 8], in_channels 16, joint_attention_dim "
                     "32, pooled_projection_dim 24, 2 double-stream and 1 single-stream blocks. Inputs as FluxPipeline "
                     "makes them: batch 2, hidden_states 2x15x16 (a 3x5 packed grid), img_ids [0, row, col] 15x3, 7 "
                     "text tokens with txt_ids zeros, timestep sigma [1.0, 0.35], guidance [3.5, 5.0]. Runs: forward; "
                     "compiled with group offload by block (diffc --offload group --group-level block "
                     "--blocks-per-group 1 --prefetch) "
                     "and by leaf (--group-level leaf), checked against the plain forward (offload moves weights, "
                     "not values; diffusers' own group offload needs accelerate, absent here); with "
                     "enable_layerwise_casting(float8_e4m3fn, float32) (diffc --storage-dtype fp8_e4m3): diffusers' "
                     "own fp8-stored output is the reference.",
         runs=[_flux_run("io_forward.safetensors", FLUX_DEV_IN),
               _flux_run("io_group_block.safetensors", FLUX_DEV_IN, group_offload="block"),
               _flux_run("io_group_leaf.safetensors", FLUX_DEV_IN, group_offload="leaf"),
               _flux_run("io_fp8.safetensors", FLUX_DEV_IN, layerwise_casting="fp8_e4m3")]),
    dict(name="flux_schnell", cls="FluxTransformer2DModel", config=FLUX_SCHNELL_TINY, seed=12,
         description="FluxTransformer2DModel shaped like FLUX.1-schnell (guidance_embeds false, no guidance input) at "
                     "the flux_dev width: 1 double-stream and 2 single-stream blocks. Batch 2, a 5x3 packed grid "
                     "(hidden_states 2x15x16), 13 text tokens, timestep sigma [0.75, 0.1].",
         runs=[_flux_run("io_forward.safetensors", FLUX_SCHNELL_IN)]),
    dict(name="sd3", cls="SD3Transformer2DModel", config=SD3_TINY, seed=13,
         description="diffusers' SD3Transformer2DModel SD3-style (no qk norm, no dual attention) at a tiny width: 2 "
                     "blocks of 2 heads of 8, patch_size 2, in/out_channels 4, joint_attention_dim 24, "
                     "caption_projection_dim 16, pooled_projection_dim 20, pos_embed_max_size 8; the last block "
                     "context_pre_only. Batch 2, a non-square latent 2x4x6x10 (3x5 patches: the table cropped at "
                     "rows 2..4, columns 1..5), 9 tokens, timestep sigma*1000 [1000, 420].",
         runs=[_sd3_run("io_forward.safetensors", SD3_IN)]),
    dict(name="sd35", cls="SD3Transformer2DModel", config=SD35_TINY, seed=14,
         description="SD3Transformer2DModel SD3.5-style at the sd3 width: qk_norm rms_norm, dual_attention_layers "
                     "[0, 1] (SD35AdaLayerNormZeroX and an image-only attn2 in those blocks), 3 blocks, the last "
                     "context_pre_only. Batch 2, latent 2x4x10x6 (5x3 patches), 11 tokens, timestep [800, 50]. "
                     "Runs: forward; compiled with group offload by block (diffc --offload group --group-level "
                     "block --blocks-per-group 1 --prefetch) against the plain forward; with "
                     "enable_layerwise_casting(float8_e4m3fn, float32) (diffc --storage-dtype fp8_e4m3): "
                     "diffusers' own fp8-stored output is the reference (pos_embed and the norms stay fp32).",
         runs=[_sd3_run("io_forward.safetensors", SD35_IN),
               _sd3_run("io_group_block.safetensors", SD35_IN, group_offload="block"),
               _sd3_run("io_fp8.safetensors", SD35_IN, layerwise_casting="fp8_e4m3")]),
    dict(name="cogvideox_tiny", cls="CogVideoXTransformer3DModel", config=COGVIDEOX_TINY, seed=15,
         description="diffusers' CogVideoXTransformer3DModel CogVideoX-5b-style (use_rotary_positional_embeddings) "
                     "at a tiny width: 2 blocks of 2 heads of 16, time_embed_dim 16, text_embed_dim 32, 4 latent "
                     "channels, patch_size 2, sample 9 frames (3 latent frames) of 6x8 latents, "
                     "max_text_seq_length 8. image_rotary_emb is CogVideoXPipeline's "
                     "(_prepare_rotary_positional_embeddings); diffc computes it from the shapes. Runs: batch 2 at "
                     "the sample size, 8 tokens, timesteps [999, 421]; batch 1, 2 frames of 8x6 (a 4x3 grid on the "
                     "3x4 base grid: the rotary grid is the crop region (0, 1)-(3, 3)), 5 tokens, timestep 37; "
                     "the first again with group offload by block (diffc --offload group --group-level block "
                     "--blocks-per-group 1 --prefetch) against the plain forward, and with "
                     "enable_layerwise_casting(float8_e4m3fn, float32) (diffc --storage-dtype fp8_e4m3): "
                     "diffusers' own fp8-stored output is the reference (patch_embed and the norms stay fp32).",
         runs=[_cogvideox_run("io_forward.safetensors", COGVIDEOX_IN),
               _cogvideox_run("io_resized.safetensors", COGVIDEOX_RESIZED_IN),
               _cogvideox_run("io_group_block.safetensors", COGVIDEOX_IN, group_offload="block"),
               _cogvideox_run("io_fp8.safetensors", COGVIDEOX_IN, layerwise_casting="fp8_e4m3")]),
    dict(name="cogvideox_sincos", cls="CogVideoXTransformer3DModel", config=COGVIDEOX_SINCOS, seed=16,
         description="CogVideoXTransformer3DModel CogVideoX-2b-style (3D sincos positions, spatial interpolation "
                     "scale 1.875) at the cogvideox_tiny width, with attention_bias false (no q/k/v bias). Runs: "
                     "batch 2 at the sample size, 8 tokens, timesteps [999, 421]; batch 1, 2 frames of 4x10 latents "
                     "(diffusers recomputes the table for the 2x5 grid), 8 tokens, timestep 640.",
         runs=[_cogvideox_run("io_forward.safetensors", COGVIDEOX_IN),
               _cogvideox_run("io_resized.safetensors", COGVIDEOX_SINCOS_RESIZED_IN)]),
    dict(name="cogvideox_learned", cls="CogVideoXTransformer3DModel", config=COGVIDEOX_LEARNED, seed=17,
         description="CogVideoXTransformer3DModel CogVideoX-5b-I2V-style (rotary positions plus the learned table "
                     "patch_embed.pos_embedding, seeded, text rows included) at the cogvideox_tiny width with 8 "
                     "input channels. Batch 2 at the sample size, 8 tokens, timesteps [501, 2].",
         runs=[_cogvideox_run("io_forward.safetensors", COGVIDEOX_LEARNED_IN)]),
    dict(name="cogvideox_t", cls="CogVideoXTransformer3DModel", config=COGVIDEOX_T, seed=18,
         description="CogVideoXTransformer3DModel CogVideoX-1.5-style (patch_size_t 2: patch_embed.proj a Linear over "
                     "2 frames x 2 x 2 patches, proj_out to 2 x 2 x 2 x 4; patch_bias false as released; rotary "
                     "positions on the pipeline's 'slice' grid) at the cogvideox_tiny width, sample_frames 13 (4 "
                     "latent frames). Runs: batch 2, 4 frames of 6x8, 8 tokens, timesteps [999, 58]; batch 1, 2 "
                     "frames of 4x6 (a 2x3 grid sliced from the 3x4 base grid), 6 tokens, timestep 300.",
         runs=[_cogvideox_run("io_forward.safetensors", COGVIDEOX_T_IN),
               _cogvideox_run("io_resized.safetensors", COGVIDEOX_T_RESIZED_IN)]),
    dict(name="cogvideox_i2v15", cls="CogVideoXTransformer3DModel", config=COGVIDEOX_I2V15, seed=19,
         description="CogVideoXTransformer3DModel CogVideoX-1.5-I2V-style: the cogvideox_t model with 8 input channels "
                     "and ofs_embed_dim 16 (ofs_proj and ofs_embedding, added to the time embedding). Batch 2, 4 "
                     "frames of 6x8, 8 tokens, timesteps [761, 12], ofs [2.0] (one value, as the pipeline passes "
                     "it, broadcast over the batch).",
         runs=[_cogvideox_run("io_forward.safetensors", COGVIDEOX_I2V15_IN)]),
    dict(name="pipeline_sd", pipeline=True,
         components={"unet": ("UNet2DConditionModel", UNET_TINY, 1),
                     "vae": ("AutoencoderKL", VAE_TINY, 5)},
         description="A StableDiffusionPipeline folder (model_index.json, unet/, vae/, scheduler/; "
                     "text_encoder, tokenizer, safety_checker, feature_extractor null). unet/ is the "
                     "unet_tiny model and vae/ the vae_tiny model; the runs use the same inputs as "
                     "unet_tiny forward and vae_tiny decode and give bit-identical outputs.",
         runs=[_unet_run("io_forward_unet.safetensors", TINY_UNET_IN, component="unet"),
               dict(_vae_run("decode", "io_decode_vae.safetensors", component="vae", **TINY_VAE_DECODE_IN))],
         same_as={"io_forward_unet.safetensors": "unet_tiny/io_forward.safetensors",
                  "io_decode_vae.safetensors": "vae_tiny/io_decode.safetensors"}),
]

from make_fixtures_cogvideox_vae import COGVIDEOX_VAE_FIXTURES  # noqa: E402 (its own module: configs and runs)

FIXTURES += COGVIDEOX_VAE_FIXTURES
