"""make_fixtures_pipeline's table (tools/make_fixtures_pipeline.py): the configs of the tiny
text-to-image pipeline folders (tests/fixtures/pipelines/{sd,sd2v,sdxl}) and CASES, the diffusers
runs made with them.  Plain data: nothing here imports torch, diffusers or transformers (the
fixtures' README generator reads it too).

Sizes: the 49408-row token embeddings dominate.  sd's and sdxl's text_encoder are the clip_sd15
fixture's model and sdxl's text_encoder_2 the clip_sdxl2 fixture's (same config, seed and layout:
byte-identical files), sd2v's text encoder is its own at width 8; sd/vae and sdxl/vae share their
weights (only scaling_factor differs, in config.json); every tokenizer folder's vocab.json and
merges.txt are the same bytes.  git stores each of those once.
"""

from make_fixtures_table import CLIP_SD15, CLIP_SDXL2

# --------------------------------------------------------------------------------------
# Text encoders (transformers CLIPTextConfig kwargs, built by make_fixtures_models.build_model).
# eos_token_id 2 as the released SD1.5, SD2 and SDXL configs have it: transformers then pools at
# argmax(input_ids) (the legacy path).
# --------------------------------------------------------------------------------------

# SD1.5 (CLIP ViT-L/14 text tower): the clip_sd15 fixture, width 16, quick_gelu, seed 9
TE_SD = ("CLIPTextModel", CLIP_SD15, 9)

# SD2 (OpenCLIP ViT-H text tower): gelu; width 8, 4 heads of 2
TE_SD2V = ("CLIPTextModel", dict(CLIP_SD15, hidden_size=8, intermediate_size=32, projection_dim=8,
                                 num_attention_heads=4, hidden_act="gelu"), 23)

# SDXL text_encoder_2 (OpenCLIP bigG, CLIPTextModelWithProjection): the clip_sdxl2 fixture, width 16,
# gelu, projection (no bias) to 12, seed 10, saved sharded (max_shard_size 1MB) as that fixture is
TE2_SDXL = ("CLIPTextModelWithProjection", CLIP_SDXL2, 10)
TE2_SDXL_SHARD = "1MB"

# --------------------------------------------------------------------------------------
# UNets
# --------------------------------------------------------------------------------------

_SD_DOWN = ("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D")
_SD_UP = ("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D")

# SD1.5 block structure at width 8..16: attention_head_dim 2 = 2 heads (head_dim 4, 8, 8)
UNET_SD = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (8, 16, 16, 16),
    "down_block_types": _SD_DOWN,
    "up_block_types": _SD_UP,
    "layers_per_block": 2,
    "attention_head_dim": 2,
    "norm_num_groups": 4,
    "cross_attention_dim": TE_SD[1]["hidden_size"],
    "sample_size": 8,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "downsample_padding": 1,
    "act_fn": "silu",
    "norm_eps": 1e-5,
}

# SD2: linear projections, a per-block head count list, upcast_attention (a no-op in fp32)
UNET_SD2V = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (8, 16, 16, 16),
    "down_block_types": _SD_DOWN,
    "up_block_types": _SD_UP,
    "layers_per_block": 1,
    "attention_head_dim": [2, 2, 4, 4],
    "use_linear_projection": True,
    "upcast_attention": True,
    "norm_num_groups": 4,
    "cross_attention_dim": TE_SD2V[1]["hidden_size"],
    "sample_size": 8,
}

# SDXL: text_time additional embedding; cross_attention_dim = 16 + 16 (both encoders' hidden states,
# concatenated); projection_class_embeddings_input_dim = pooled (12) + 6 ids * 8
UNET_SDXL = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": (8, 16, 16),
    "down_block_types": ("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
    "up_block_types": ("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"),
    "transformer_layers_per_block": [1, 1, 2],
    "layers_per_block": 2,
    "attention_head_dim": [1, 2, 4],
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 8,
    "projection_class_embeddings_input_dim": TE2_SDXL[1]["projection_dim"] + 6 * 8,
    "cross_attention_dim": TE_SD[1]["hidden_size"] + TE2_SDXL[1]["hidden_size"],
    "norm_num_groups": 4,
    "sample_size": 8,
}

# --------------------------------------------------------------------------------------
# VAEs
# --------------------------------------------------------------------------------------

# four levels: vae_scale_factor 8 (sample_size 8 latents -> 64 px)
VAE_SD = {
    "block_out_channels": [4, 8, 8, 8],
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 1,
    "latent_channels": 4,
    "norm_num_groups": 4,
    "sample_size": 64,
    "scaling_factor": 0.18215,
}

# same weights (same seed), SDXL's scaling_factor
VAE_SDXL = dict(VAE_SD, scaling_factor=0.13025, force_upcast=True)

# three levels: vae_scale_factor 4 (a pipeline must read it from the config, not assume 8)
VAE_SD2V = {
    "block_out_channels": [4, 8, 8],
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 3,
    "up_block_types": ["UpDecoderBlock2D"] * 3,
    "layers_per_block": 1,
    "latent_channels": 4,
    "norm_num_groups": 4,
    "sample_size": 32,
    "scaling_factor": 0.18215,
}

# --------------------------------------------------------------------------------------
# Schedulers: the released repositories' scheduler_config.json (keys the class does not take,
# e.g. PNDM's clip_sample, are kept in the saved config and matter when another class is built
# from it: DDIMScheduler's own default is clip_sample true)
# --------------------------------------------------------------------------------------

_SCHED_COMMON = {
    "num_train_timesteps": 1000,
    "beta_start": 0.00085,
    "beta_end": 0.012,
    "beta_schedule": "scaled_linear",
    "trained_betas": None,
    "skip_prk_steps": True,
    "set_alpha_to_one": False,
    "steps_offset": 1,
    "clip_sample": False,
}

# runwayml/stable-diffusion-v1-5
SCHEDULER_SD = ("PNDMScheduler", dict(_SCHED_COMMON))
# stabilityai/stable-diffusion-2-1 (768 px, v-prediction)
SCHEDULER_SD2V = ("DDIMScheduler", dict(_SCHED_COMMON, prediction_type="v_prediction"))
# stabilityai/stable-diffusion-xl-base-1.0
SCHEDULER_SDXL = ("EulerDiscreteScheduler", dict(_SCHED_COMMON, prediction_type="epsilon", interpolation_type="linear",
                                                  sample_max_value=1.0, timestep_spacing="leading",
                                                  use_karras_sigmas=False))

# --------------------------------------------------------------------------------------
# Pipeline folders: component -> (library class, config, weight seed)
# --------------------------------------------------------------------------------------

PIPELINES = {
    "sd": dict(
        cls="StableDiffusionPipeline",
        unet=UNET_SD, unet_seed=11, vae=VAE_SD, vae_seed=12,
        text_encoder=TE_SD, tokenizer_pad="<|endoftext|>",
        scheduler=SCHEDULER_SD,
        description="StableDiffusionPipeline, SD1.5 structure: UNet (8, 16, 16, 16) with 3 CrossAttnDownBlock2D "
                    "+ DownBlock2D, 2 layers per block, 2 heads, conv proj_in/out, cross_attention_dim 16; VAE "
                    "[4, 8, 8, 8] (scale factor 8, scaling_factor 0.18215); text_encoder = the clip_sd15 "
                    "fixture's CLIPTextModel (width 16, 3 layers, quick_gelu, released layout: text_model.* "
                    "names and the position_ids buffer); tokenizer padded with <|endoftext|>; PNDMScheduler (SD1.5's config); "
                    "safety_checker and feature_extractor null, requires_safety_checker false."),
    "sd2v": dict(
        cls="StableDiffusionPipeline",
        unet=UNET_SD2V, unet_seed=21, vae=VAE_SD2V, vae_seed=22,
        text_encoder=TE_SD2V, tokenizer_pad="!",
        scheduler=SCHEDULER_SD2V,
        description="StableDiffusionPipeline, SD2.1-v style: UNet (8, 16, 16, 16), 1 layer per block, "
                    "attention_head_dim [2, 2, 4, 4], linear proj_in/out, upcast_attention; VAE [4, 8, 8] "
                    "(scale factor 4: 8x8 latents are 32x32 px); CLIPTextModel width 8, 4 heads, gelu, released "
                    "layout; "
                    "tokenizer padded with '!' (id 0); DDIMScheduler with prediction_type v_prediction "
                    "(SD2.1's config, timestep_spacing leading)."),
    "sdxl": dict(
        cls="StableDiffusionXLPipeline",
        unet=UNET_SDXL, unet_seed=31, vae=VAE_SDXL, vae_seed=12,
        text_encoder=TE_SD, tokenizer_pad="<|endoftext|>",
        text_encoder_2=TE2_SDXL, text_encoder_2_shard=TE2_SDXL_SHARD, tokenizer_2_pad="!",
        scheduler=SCHEDULER_SDXL, force_zeros_for_empty_prompt=True,
        description="StableDiffusionXLPipeline: UNet (8, 16, 16), DownBlock2D + 2 CrossAttnDownBlock2D, "
                    "transformer_layers_per_block [1, 1, 2], heads [1, 2, 4], addition_embed_type text_time "
                    "(addition_time_embed_dim 8, projection_class_embeddings_input_dim 60), cross_attention_dim "
                    "32 = 16 + 16; VAE = sd's weights with scaling_factor 0.13025; text_encoder = sd's (same "
                    "files); text_encoder_2 = the clip_sdxl2 fixture's CLIPTextModelWithProjection (width 16, "
                    "gelu, projection_dim 12, sharded in two files + model.safetensors.index.json); "
                    "tokenizer padded with <|endoftext|>, tokenizer_2 with '!'; EulerDiscreteScheduler "
                    "(SDXL's config); force_zeros_for_empty_prompt true."),
}

# --------------------------------------------------------------------------------------
# Flux and SD3 (flow matching DiTs): T5, the transformers, 16-channel VAEs, flow-match schedulers
# --------------------------------------------------------------------------------------

# T5 v1.1 encoder (T5EncoderModel): gated-gelu, 2 layers of 2 heads of 16 (inner 32, d_model 48: the
# inner width differs from d_model as in t5-v1_1-small); d_model 48 > 16 + 16 so SD3's CLIP embeds
# really are zero-padded up to it.  vocab_size = the fixture T5 tokenizer's length (1000 + 100
# <extra_id_*>), filled in by make_fixtures_pipeline_dit.  Seeded as every model here.
T5_CONFIG = {
    "d_model": 48,
    "d_kv": 16,
    "d_ff": 64,
    "num_layers": 2,
    "num_heads": 2,
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "feed_forward_proj": "gated-gelu",
    "dropout_rate": 0.0,
    "layer_norm_epsilon": 1e-6,
    "is_encoder_decoder": False,
    "use_cache": False,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "eos_token_id": 1,
}
T5_SEED = 41
T5_TOKENIZER_VOCAB = 1000   # sentencepiece unigram pieces (pad 0, eos 1, unk 2), before the 100 sentinels

# FluxTransformer2DModel: 2 double + 2 single blocks, 2 heads of 16 (D 32), RoPE axes 4 + 6 + 6 = 16;
# in_channels 64 = 16 latent channels packed 2x2; pooled from CLIP-L (16), context from T5 (48)
FLUX_TRANSFORMER = {
    "patch_size": 1,
    "in_channels": 64,
    "num_layers": 2,
    "num_single_layers": 2,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": T5_CONFIG["d_model"],
    "pooled_projection_dim": TE_SD[1]["hidden_size"],
    "guidance_embeds": True,
    "axes_dims_rope": (4, 6, 6),
}
# schnell: no guidance embedder, one block of each kind (its own weights: a file git stores apart)
FLUX_SCHNELL_TRANSFORMER = dict(FLUX_TRANSFORMER, guidance_embeds=False, num_layers=1, num_single_layers=1)

# SD3.5-style SD3Transformer2DModel: 2 joint blocks (the last context_pre_only), block 0 with the
# second image-only attention (dual_attention_layers), per-head RMS q/k norms; 2 heads of 16 (D 32);
# a 16x16 position table (a persistent buffer in the file), centre-cropped to the patch grid;
# pooled = CLIP-L text_embeds (16) + CLIP-G text_embeds (12), concatenated as the pipeline does
SD3_TRANSFORMER = {
    "sample_size": 8,
    "patch_size": 2,
    "in_channels": 16,
    "out_channels": 16,
    "num_layers": 2,
    "attention_head_dim": 16,
    "num_attention_heads": 2,
    "joint_attention_dim": T5_CONFIG["d_model"],
    "caption_projection_dim": 32,
    "pooled_projection_dim": CLIP_SD15["projection_dim"] + CLIP_SDXL2["projection_dim"],
    "pos_embed_max_size": 16,
    "dual_attention_layers": (0,),
    "qk_norm": "rms_norm",
}

# 16 latent channels, four levels (vae_scale_factor 8), no quant convs (as Flux's and SD3's VAEs);
# Flux and SD3 share the weights (same seed) and differ in scaling_factor / shift_factor only
VAE_FLUX = {
    "block_out_channels": [4, 8, 8, 8],
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 1,
    "latent_channels": 16,
    "norm_num_groups": 4,
    "sample_size": 64,
    "scaling_factor": 0.3611,
    "shift_factor": 0.1159,
    "use_quant_conv": False,
    "use_post_quant_conv": False,
}
VAE_SD3 = dict(VAE_FLUX, scaling_factor=1.5305, shift_factor=0.0609)
VAE_DIT_SEED = 42

# black-forest-labs/FLUX.1-dev and FLUX.1-schnell, stabilityai/stable-diffusion-3.5-medium
SCHEDULER_FLUX = ("FlowMatchEulerDiscreteScheduler", {
    "num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True, "base_shift": 0.5,
    "max_shift": 1.15, "base_image_seq_len": 256, "max_image_seq_len": 4096})
SCHEDULER_FLUX_SCHNELL = ("FlowMatchEulerDiscreteScheduler", {
    "num_train_timesteps": 1000, "shift": 1.0, "use_dynamic_shifting": False, "base_shift": 0.5,
    "max_shift": 1.15, "base_image_seq_len": 256, "max_image_seq_len": 4096})
SCHEDULER_SD3 = ("FlowMatchEulerDiscreteScheduler", {"num_train_timesteps": 1000, "shift": 3.0})

# SD3's text_encoder is CLIP-L WITH its projection (the pipeline pools from text_embeds): sd's text
# encoder (TE_SD: every weight) plus a text_projection seeded with TE_SD3_PROJECTION_SEED, whose token
# embedding table is then replaced by sdxl text_encoder_2's (same shape): saved sharded at 1MB, its
# first shard (that table alone) is byte-identical to sdxl/text_encoder_2's and git stores it once
TE_SD3_PROJECTION_SEED = 43

PIPELINES_DIT = {
    "flux": dict(
        cls="FluxPipeline",
        transformer=FLUX_TRANSFORMER, transformer_seed=51, vae=VAE_FLUX, vae_seed=VAE_DIT_SEED,
        text_encoder=TE_SD, tokenizer_pad="<|endoftext|>",
        scheduler=SCHEDULER_FLUX,
        description="FluxPipeline, FLUX.1-dev style: FluxTransformer2DModel with guidance_embeds, 2 double + 2 "
                    "single blocks, 2 heads of 16, axes_dims_rope (4, 6, 6), in_channels 64; VAE [4, 8, 8, 8] "
                    "with 16 latent channels (scale factor 8, scaling_factor 0.3611, shift_factor 0.1159, no "
                    "quant convs); text_encoder = sd's CLIPTextModel (same files; pooler_output is the pooled "
                    "input); text_encoder_2 = a T5EncoderModel (d_model 48, 2 layers, 2 heads of 16, d_ff 64, "
                    "gated-gelu, 32 buckets, max_distance 128); tokenizer_2 = a T5TokenizerFast over a "
                    "sentencepiece unigram model trained offline (1000 pieces + 100 sentinels); "
                    "FlowMatchEulerDiscreteScheduler (FLUX.1-dev's config: shift 3, dynamic shifting)."),
    "flux_schnell": dict(
        cls="FluxPipeline",
        transformer=FLUX_SCHNELL_TRANSFORMER, transformer_seed=52, vae=VAE_FLUX, vae_seed=VAE_DIT_SEED,
        text_encoder=TE_SD, tokenizer_pad="<|endoftext|>",
        scheduler=SCHEDULER_FLUX_SCHNELL,
        description="FluxPipeline, FLUX.1-schnell style: as flux but guidance_embeds false (no guidance "
                    "embedder: guidance_scale is ignored), 1 double + 1 single block, its own weights; scheduler "
                    "shift 1, no dynamic shifting (FLUX.1-schnell's config); every other component is "
                    "flux's (same files)."),
    "sd3": dict(
        cls="StableDiffusion3Pipeline",
        transformer=SD3_TRANSFORMER, transformer_seed=53, vae=VAE_SD3, vae_seed=VAE_DIT_SEED,
        text_encoder=TE_SD, text_encoder_projection_seed=TE_SD3_PROJECTION_SEED, tokenizer_pad="<|endoftext|>",
        text_encoder_2=TE2_SDXL, tokenizer_2_pad="!",
        scheduler=SCHEDULER_SD3,
        description="StableDiffusion3Pipeline, SD3.5 style: SD3Transformer2DModel with 2 joint blocks (the last "
                    "context_pre_only), dual_attention_layers (0,), qk_norm rms_norm, 2 heads of 16, patch 2, "
                    "pos_embed_max_size 16 (cropped to the patch grid), joint_attention_dim 48, pooled 16 + 12; "
                    "VAE = flux's weights with scaling_factor 1.5305, shift_factor 0.0609; text_encoder = "
                    "CLIPTextModelWithProjection: sd's CLIP-L weights + a seeded projection (16), token table "
                    "= sdxl text_encoder_2's, sharded 1MB; text_encoder_2 = sdxl's (same files); "
                    "text_encoder_3 / tokenizer_3 = flux's T5 (same files); tokenizer padded with "
                    "<|endoftext|>, tokenizer_2 with '!'; FlowMatchEulerDiscreteScheduler shift 3."),
}

PIPELINES = {**PIPELINES, **PIPELINES_DIT}

# --------------------------------------------------------------------------------------
# CogVideoX (text to video): T5, a 3D transformer with 3D RoPE, a causal-conv3d VAE, CogVideoX's DDIM
# --------------------------------------------------------------------------------------

# CogVideoX-5b's transformer at toy width: 2 heads of 16 (RoPE splits 16 into t 4, h 6, w 6), 2 layers,
# patch 2, 3D RoPE (no learned positions); text_embed_dim = the fixture T5's d_model; sample_height /
# sample_width (latent units) 4 x 6 make the default size 16 x 24 px (VAE scale factor 4) and the RoPE
# base grid 2 x 3; sample_frames 17 is the default num_frames: 5 latent frames, decoded in two frame
# batches of 3 and 2 (9 + 8 frames: an odd batch keeps its first frame, an even one doubles every frame)
COGVIDEOX_TRANSFORMER = {
    "num_attention_heads": 2,
    "attention_head_dim": 16,
    "in_channels": 4,
    "out_channels": 4,
    "time_embed_dim": 16,
    "text_embed_dim": T5_CONFIG["d_model"],
    "num_layers": 2,
    "sample_width": 6,
    "sample_height": 4,
    "sample_frames": 17,
    "patch_size": 2,
    "temporal_compression_ratio": 4,
    "max_text_seq_length": 226,
    "use_rotary_positional_embeddings": True,
    "use_learned_positional_embeddings": False,
}

# AutoencoderKLCogVideoX with three levels of 8 channels (spatial scale factor 4) and CogVideoX's
# temporal compression 4 (the first two levels halve time), one resnet per level (the decoder: two),
# 4 latent channels (the 3x3x3 convs make wider ones costly in the repository), groups of 4;
# scaling_factor 0.7 as CogVideoX-5b's
VAE_COGVIDEOX = {
    "block_out_channels": [8, 8, 8],
    "down_block_types": ["CogVideoXDownBlock3D"] * 3,
    "up_block_types": ["CogVideoXUpBlock3D"] * 3,
    "latent_channels": 4,
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "temporal_compression_ratio": 4,
    "sample_height": 16,
    "sample_width": 24,
    "scaling_factor": 0.7,
}

# CogVideoX-2b's: 3D sincos positions (a table for the text rows and the sample grid) instead of RoPE
COGVIDEOX_2B_TRANSFORMER = dict(COGVIDEOX_TRANSFORMER, use_rotary_positional_embeddings=False)
VAE_COGVIDEOX_2B = dict(VAE_COGVIDEOX, scaling_factor=1.15258426)

# THUDM/CogVideoX-5b's scheduler_config.json
SCHEDULER_COGVIDEOX = ("CogVideoXDDIMScheduler", {
    "beta_end": 0.012, "beta_schedule": "scaled_linear", "beta_start": 0.00085, "clip_sample": False,
    "clip_sample_range": 1.0, "num_train_timesteps": 1000, "prediction_type": "v_prediction",
    "rescale_betas_zero_snr": True, "sample_max_value": 1.0, "set_alpha_to_one": True, "snr_shift_scale": 1.0,
    "steps_offset": 0, "timestep_spacing": "trailing", "trained_betas": None})
# THUDM/CogVideoX-2b's: the same but snr_shift_scale 3
SCHEDULER_COGVIDEOX_2B = (SCHEDULER_COGVIDEOX[0], dict(SCHEDULER_COGVIDEOX[1], snr_shift_scale=3.0))

PIPELINES_VIDEO = {
    "cogvideox": dict(
        cls="CogVideoXPipeline",
        transformer=COGVIDEOX_TRANSFORMER, transformer_seed=71, vae=VAE_COGVIDEOX, vae_seed=72,
        # the seeded decoder's frames have std ~1.2 around -0.6 (half of them clip); its conv_out
        # weight and bias times this keep them mostly inside [-1, 1]
        vae_conv_out_scale=0.4,
        scheduler=SCHEDULER_COGVIDEOX,
        description="CogVideoXPipeline, CogVideoX-5b style: CogVideoXTransformer3DModel with 3D RoPE, 2 layers, "
                    "2 heads of 16, patch 2, sample 4 x 6 latents x 17 frames; AutoencoderKLCogVideoX [8, 8, 8] "
                    "(spatial scale factor 4, temporal 4), 4 latent channels, scaling_factor 0.7; text_encoder / "
                    "tokenizer = flux's T5 (same files); CogVideoXDDIMScheduler with CogVideoX-5b's config "
                    "(v_prediction, zero-SNR rescaled betas, trailing spacing)."),
    "cogvideox_2b": dict(
        cls="CogVideoXPipeline",
        transformer=COGVIDEOX_2B_TRANSFORMER, transformer_seed=76, vae=VAE_COGVIDEOX_2B, vae_seed=72,
        vae_conv_out_scale=0.4,
        scheduler=SCHEDULER_COGVIDEOX_2B,
        description="CogVideoXPipeline, CogVideoX-2b style: the transformer with 3D sincos positions (no "
                    "RoPE), its own weights; the VAE = cogvideox's weights (same files) with CogVideoX-2b's "
                    "scaling_factor 1.15258426; T5 = flux's; CogVideoX-2b's scheduler (snr_shift_scale 3)."),
}

PIPELINES = {**PIPELINES, **PIPELINES_VIDEO}

# --------------------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------------------

PROMPT = "a photograph of an astronaut riding a horse on the moon"
NEGATIVE = "blurry, low quality"
LONG_PROMPT = (
    "a highly detailed oil painting of an old lighthouse standing on a rocky cliff above a stormy sea at dusk, "
    "waves crashing against the rocks, seagulls circling in the wind, warm light glowing from the lantern room, "
    "dramatic clouds lit in orange and purple, a small wooden boat struggling through the swell, rain streaks "
    "across the canvas, in the style of the old masters, trending on artstation, volumetric lighting, eight k"
)
MESSY_PROMPT = "  A  Cat's   CAFÉ: naïve café-au-lait, 3 cups!!  "


def _case(name, pipeline, description, *, prompt=PROMPT, negative_prompt=NEGATIVE, steps=3, guidance=7.5,
          guidance_rescale=0.0, scheduler=None, scheduler_overrides=None, seed=0, height=None, width=None,
          batch=1, clip_skip=None, sdxl=None, tolerance=1e-4, max_sequence_length=None):
    return dict(name=name, pipeline=pipeline, description=description, prompt=prompt,
                negative_prompt=negative_prompt, steps=steps, guidance=guidance, guidance_rescale=guidance_rescale,
                scheduler=scheduler, scheduler_overrides=scheduler_overrides or {}, seed=seed, height=height,
                width=width, batch=batch, clip_skip=clip_skip, sdxl=sdxl, io=f"{name}.safetensors",
                tolerance=tolerance, max_sequence_length=max_sequence_length)


# a whole flow-matching pipeline against diffusers: the 1e-3 (relative L2 of the image)
DIT_TOLERANCE = 1e-3


def _dit_case(name, pipeline, description, *, max_sequence_length, height=64, width=64, negative_prompt=None,
              **kw):
    """A Flux or SD3 run: size and T5 length always explicit (the pipelines' defaults are 1024 px and
    512 / 256 tokens)."""
    return _case(name, pipeline, description, height=height, width=width, negative_prompt=negative_prompt,
                 max_sequence_length=max_sequence_length, tolerance=DIT_TOLERANCE, **kw)




def _video_case(name, description, *, pipeline="cogvideox", max_sequence_length=None, num_frames=None,
                use_dynamic_cfg=False, guidance=6.0, negative_prompt=None, **kw):
    """A CogVideoX run: size, frames and T5 length the pipeline's defaults unless given."""
    c = _case(name, pipeline, description, negative_prompt=negative_prompt, guidance=guidance,
              max_sequence_length=max_sequence_length, tolerance=DIT_TOLERANCE, **kw)
    c.update(num_frames=num_frames, use_dynamic_cfg=use_dynamic_cfg)
    return c


CASES = [
    _case("sd_pndm", "sd", "the folder's PNDM (PLMS: 3 steps are 4 UNet calls, the 2nd timestep repeated), CFG 7.5",
          seed=1),
    _case("sd_euler", "sd", "EulerDiscreteScheduler (init_noise_sigma, scale_model_input)", scheduler="EulerDiscreteScheduler",
          seed=2),
    _case("sd_euler_karras", "sd", "Euler with use_karras_sigmas: fractional float32 timesteps reach the UNet",
          scheduler="EulerDiscreteScheduler", scheduler_overrides={"use_karras_sigmas": True}, seed=3),
    _case("sd_euler_ancestral", "sd", "EulerAncestralDiscreteScheduler: draws noise from the generator every step",
          scheduler="EulerAncestralDiscreteScheduler", seed=4),
    _case("sd_ddim", "sd", "DDIMScheduler (eta 0) built from the PNDM config (clip_sample false carried over)",
          scheduler="DDIMScheduler", seed=5),
    _case("sd_dpmpp", "sd", "DPMSolverMultistepScheduler (dpmsolver++ 2M, lower_order_final), 4 steps",
          scheduler="DPMSolverMultistepScheduler", steps=4, seed=6),
    _case("sd_dpmpp_karras", "sd", "DPMSolverMultistep with use_karras_sigmas (timesteps rounded to int64)",
          scheduler="DPMSolverMultistepScheduler", scheduler_overrides={"use_karras_sigmas": True}, steps=4, seed=7),
    _case("sd_lms", "sd", "LMSDiscreteScheduler (order-4 linear multistep, coefficients by quadrature), 4 steps",
          scheduler="LMSDiscreteScheduler", steps=4, seed=8),
    _case("sd_no_cfg", "sd", "guidance 1.0: no classifier-free guidance, no negative embeddings, batch-1 UNet calls",
          guidance=1.0, negative_prompt=None, seed=9),
    _case("sd_no_negative", "sd", "CFG with negative_prompt null: the unconditional half is the encoding of ''",
          negative_prompt=None, scheduler="EulerDiscreteScheduler", seed=10),
    _case("sd_batch2", "sd", "num_images_per_prompt 2: one 2x4x8x8 noise draw, embeddings repeated",
          batch=2, scheduler="EulerDiscreteScheduler", seed=11),
    _case("sd_nonsquare", "sd", "128 px high, 64 px wide: 16x8 latents (portrait; sdxl_negative is landscape)",
          height=128, width=64, scheduler="DDIMScheduler", seed=12),
    _case("sd_clip_skip", "sd", "clip_skip 1: the prompt uses hidden_states[-2] + final_layer_norm, the negative "
          "prompt still last_hidden_state", clip_skip=1, scheduler="EulerDiscreteScheduler", seed=13),
    _case("sd_long_prompt", "sd", "a prompt of more than 77 tokens, truncated to bos + 75 + eos",
          prompt=LONG_PROMPT, scheduler="EulerDiscreteScheduler", seed=14),
    _case("sd_messy_prompt", "sd", "capitals, runs of spaces, accents, an apostrophe, digits and punctuation",
          prompt=MESSY_PROMPT, negative_prompt="ugly", scheduler="EulerDiscreteScheduler", seed=15),
    _case("sd2v_ddim", "sd2v", "the folder's DDIM with v_prediction, 32x32 px (VAE scale factor 4)", seed=21),
    _case("sd2v_euler_rescale", "sd2v", "Euler with v_prediction and guidance_rescale 0.7",
          scheduler="EulerDiscreteScheduler", guidance_rescale=0.7, seed=22),
    _case("sdxl_default", "sdxl", "the folder's Euler, CFG 5, negative_prompt null: force_zeros_for_empty_prompt "
          "makes both negative embeddings zeros", negative_prompt=None, guidance=5.0, seed=31),
    _case("sdxl_negative_empty", "sdxl", "negative_prompt '' (not null): encoded like any prompt, NOT zeros "
          "(force_zeros_for_empty_prompt only acts on a missing negative prompt)", negative_prompt="",
          guidance=5.0, seed=32),
    _case("sdxl_negative", "sdxl", "a negative prompt, 64 px high, 96 px wide: 8x12 latents", height=64, width=96,
          seed=33),
    _case("sdxl_time_ids", "sdxl", "non-default add_time_ids: original_size (96, 128), crops (8, 16), "
          "target_size (64, 64)", sdxl={"original_size": [96, 128], "crops_coords_top_left": [8, 16],
                                        "target_size": [64, 64]}, seed=34),
    _case("sdxl_clip_skip_batch2", "sdxl", "clip_skip 1 (hidden_states[-3] of both encoders for the prompt, "
          "[-2] for the negative) with num_images_per_prompt 2 and DPM-Solver++",
          clip_skip=1, batch=2, scheduler="DPMSolverMultistepScheduler", seed=35),
    _dit_case("flux_dev", "flux", "FLUX.1-dev defaults at 64x64 px: embedded guidance 3.5, T5 at the pipeline's "
              "default 512 tokens, 4x4 packed latents (16 image tokens); sigmas shifted by mu from the image "
              "length", guidance=3.5, steps=3, max_sequence_length=512, seed=51),
    _dit_case("flux_nonsquare", "flux", "48 px high, 80 px wide: 6x10 latents packed to a 3x5 grid (img_ids rows "
              "0..2, columns 0..4)", height=48, width=80, guidance=4.0, steps=2, max_sequence_length=32, seed=52),
    _dit_case("flux_batch2", "flux", "num_images_per_prompt 2 at 32x32 px: one 2x16x4x4 noise draw (a 2x2 packed "
              "grid), embeddings and guidance repeated", batch=2, height=32, width=32, guidance=3.5, steps=2,
              max_sequence_length=32, seed=53),
    _dit_case("flux_long_prompt", "flux", "a prompt longer than both tokenizers keep: CLIP cut to 77, T5 to 40",
              prompt=LONG_PROMPT, guidance=3.5, steps=2, max_sequence_length=40, seed=54),
    _dit_case("flux_seq24", "flux", "max_sequence_length 24 (not a power of two) and the messy prompt: 35 T5 "
              "pieces cut to 24, 'É' outside the tokenizer's characters (<unk>)",
              prompt=MESSY_PROMPT, guidance=2.5, steps=2, max_sequence_length=24, seed=55),
    _dit_case("flux_schnell", "flux_schnell", "FLUX.1-schnell: no guidance embedder (guidance_scale 3.5 passed and "
              "ignored), sigmas unshifted (shift 1), 2 steps, T5 at schnell's 256 tokens", guidance=3.5, steps=2,
              max_sequence_length=256, seed=56),
    _dit_case("sd3_cfg", "sd3", "SD3.5 style, CFG 7 with a negative prompt: batch [negative; prompt] through the "
              "transformer, 77 CLIP + 32 T5 tokens", negative_prompt=NEGATIVE, guidance=7.0, steps=3,
              max_sequence_length=32, seed=61),
    _dit_case("sd3_no_cfg", "sd3", "guidance 1.0: no classifier-free guidance, batch-1 transformer calls",
              guidance=1.0, steps=2, max_sequence_length=32, seed=62),
    _dit_case("sd3_nonsquare", "sd3", "48 px high, 96 px wide: 6x12 latents, a 3x6 patch grid (the centre crop "
              "of the 16x16 position table); negative prompt null with CFG: '' is encoded", height=48, width=96,
              guidance=5.0, steps=2, max_sequence_length=32, seed=63),
    _dit_case("sd3_batch2", "sd3", "num_images_per_prompt 2 with CFG 4.5 at 32x32 px (2x2 patches): transformer "
              "batch 4", negative_prompt=NEGATIVE, batch=2, height=32, width=32, guidance=4.5, steps=2,
              max_sequence_length=32, seed=64),
    _dit_case("sd3_seq20", "sd3", "max_sequence_length 20 and the long prompt (CLIP cut to 77, T5 to 20)",
              prompt=LONG_PROMPT, negative_prompt="ugly", guidance=7.0, steps=2, max_sequence_length=20, seed=65),
    _video_case("cogvideox_cfg", "the pipeline's defaults (16 x 24 px, 17 frames: 5 latent frames, T5 at 226 "
                "tokens) with CFG 6 and a negative prompt: batch [negative; prompt] through the transformer",
                negative_prompt=NEGATIVE, steps=3, seed=71),
    _video_case("cogvideox_dynamic_cfg", "use_dynamic_cfg: the guidance scale follows the cosine ramp over the "
                "timesteps; negative prompt null (encoded as '')", use_dynamic_cfg=True, steps=3, seed=72),
    _video_case("cogvideox_dpm", "CogVideoXDPMScheduler from the DDIM config: draws noise from the generator "
                "every step and keeps the previous x0 prediction", scheduler="CogVideoXDPMScheduler", steps=3,
                seed=73),
    _video_case("cogvideox_no_cfg", "guidance 1.0: no classifier-free guidance, batch-1 transformer calls",
                guidance=1.0, steps=2, seed=74),
    _video_case("cogvideox_size", "24 x 24 px (a 3 x 3 patch grid, RoPE cropped against the 2 x 3 base grid), "
                "9 frames (3 latent frames, one VAE batch), T5 at 32 tokens", height=24, width=24, num_frames=9,
                max_sequence_length=32, negative_prompt="ugly", steps=2, seed=75),
    _video_case("cogvideox_2b_cfg", "CogVideoX-2b style (3D sincos positions at the configured 4 x 6 x 5 "
                "grid after the 226 text rows) at the pipeline's defaults, CFG 6 with a negative prompt",
                pipeline="cogvideox_2b", negative_prompt=NEGATIVE, steps=2, seed=76),
]

