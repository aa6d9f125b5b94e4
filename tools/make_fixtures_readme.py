"""make_fixtures' README (tools/make_fixtures.py): the text of tests/fixtures/README.md (how the
fixtures are made, their layout and case.json's fields, what diffusers behaviour they pin down) and
its writer, which lists every FIXTURES entry and the package versions.
"""

import json
import os
import sys

import torch

from make_fixtures_pipeline_table import CASES, PIPELINES
from make_fixtures_table import FIXTURES


README_TEMPLATE = """\
# Reference fixtures

Made by `tools/make_fixtures.sh` (which creates or reuses a virtual environment, `.venv-fixtures` in the
repository root unless `DIFFC_FIXTURE_VENV` says otherwise, installs torch, diffusers, transformers,
safetensors and numpy from PyPI, and runs `python tools/make_fixtures.py --out tests/fixtures`).
The whole-pipeline fixtures in `pipelines/` are part of that run (alone: `tools/make_fixtures.sh --only
pipelines`); see [Pipelines](#pipelines-pipelines) below.

Made with diffusers {diffusers}, transformers {transformers}, torch {torch}, safetensors {safetensors}, numpy
{numpy}, Python {python}.

Nothing is downloaded: every model is built from a config dict, its weights are re-initialised from a
seeded generator (conv/linear weights N(0, 1/fan_in), biases 0.05 N(0, 1), GroupNorm/LayerNorm weights
1 + 0.1 N(0, 1), their biases 0.1 N(0, 1), embedding tables N(0, 1)), and it is saved with `save_pretrained`. Each reference run
loads the saved folder back with `from_pretrained(..., torch_dtype=float32)` in a fresh Python process and
runs it in float32 on the CPU, `eval()`, `torch.no_grad()`, `torch.set_num_threads(2)`. Inputs are
random normal from seeded `torch.Generator`s; timesteps are distinct per batch element.

Re-running the generator on the same machine reproduces every file byte for byte except the measured
fields of `case.json` (`diffusers_seconds*`, `diffusers_*_rss_bytes`). The timings come from a shared
2-core machine and are only a rough baseline.

## Layout

`<name>/model/` is a diffusers model folder as `save_pretrained` writes it (for `pipeline_sd`, a
pipeline folder with `model_index.json`; for the `clip_*` and `t5_*` fixtures, a transformers model folder).
`<name>/io_<entry>[_<tag>].safetensors` holds float32 tensors (token ids: int64): inputs under their
diffusers (transformers) argument names and outputs under `out.<name>`. `<name>/case.json`:

    {{"runs": [{{"entry": "forward" | "encode" | "decode", "io": "...", "tolerance": 1e-4,
                "component": null | "unet" | "vae", "variant": null | "bf16",
                "diffc_options": [<diffc flags for the diffusers options the run used, e.g.
                                  "--vae-tiling" (enable_tiling), "--vae-slicing" (enable_slicing);
                                  absent when none>],
                "diffusers_seconds": <mean wall s per call, 2 threads, after two warm-up calls:
                                      7 blocks of repeats (~0.25 s each), the fastest block's mean>,
                "diffusers_seconds_median": <median of all the timed calls>,
                "diffusers_peak_rss_bytes": <peak RSS (VmHWM) of the process that loaded the model
                                             and ran it>,
                "diffusers_baseline_rss_bytes": <peak RSS of that process after importing torch and
                                                 diffusers, before loading the model>}}],
     "description": "..."}}

The tolerance is on relative L2 error. Entries:

- `forward` (UNet2DConditionModel): inputs `sample` [B,C,H,W], `timestep` [B], `encoder_hidden_states`
  [B,S,D], and for `addition_embed_type: "text_time"` also `text_embeds` and `time_ids` [B,6];
  output `out.sample` = `unet(sample, timestep, encoder_hidden_states, added_cond_kwargs=...).sample`.
- `encode` (AutoencoderKL): input `sample`; outputs `out.mean`, `out.logvar` of
  `vae.encode(sample).latent_dist` (diffusers clamps logvar to [-30, 20]).
- `decode` (AutoencoderKL): input `z`; output `out.sample` = `vae.decode(z).sample`. No scaling_factor
  is applied in either direction.
- `forward` (CLIPTextModel, CLIPTextModelWithProjection): input `input_ids` [B,77] int64; outputs
  `out.last_hidden_state` and `out.pooler_output` (CLIPTextModel) or `out.text_embeds`
  (CLIPTextModelWithProjection); a run with `--clip-hidden-state K` in `diffc_options` also records
  `out.hidden_state` = `hidden_states[K]` of `model(input_ids, output_hidden_states=True)`, through
  `final_layer_norm` when `--clip-final-norm` is there too.
- `forward` (T5EncoderModel): input `input_ids` [B,S] int64 (any S: positions are relative); output
  `out.last_hidden_state` = `model(input_ids).last_hidden_state`, with no attention mask (the Flux and
  SD3 pipelines pass none). A run with `--offload group ...` in `diffc_options` used nothing more on
  the transformers side: the flags are a memory technique that must give the same output.

`diffusers_peak_rss_bytes` includes the Python interpreter, torch and diffusers themselves (several
hundred MB), since each run is measured in its own process; subtract `diffusers_baseline_rss_bytes`
for what the model and its activations added.

## Fixtures

{fixtures}

## diffusers behaviour these fixtures pin down

- Every attention module (UNet self- and cross-attention, VAE mid-block attention) runs
  `AttnProcessor2_0`: `F.scaled_dot_product_attention` with scale 1/sqrt(head_dim) and no mask.
  That processor ignores `upcast_attention` (only the classic `AttnProcessor` honours it, by computing
  the scores with `baddbmm` in float32), so in float32 `upcast_attention: true` changes nothing:
  the generator checks `unet_sd2` with it on and off and gets identical outputs.
- In UNet2DConditionModel `attention_head_dim` is the number of HEADS
  (`num_attention_heads = num_attention_heads or attention_head_dim`); head_dim = block channels // heads.
  A per-block list is indexed by down block, reversed for the up blocks, and its last entry is used
  for the mid block. Observed (heads, head_dim): unet_tiny (2, 2) in down 0 / up 1 and (2, 4) in the
  mid block; unet_sd15 8 heads of 2, 4, 8; unet_sd2 heads 2, 4, 8 all of head_dim 4; unet_sdxl heads
  2 and 4, both of head_dim 16. The VAE mid-block attention is a single head of head_dim = channels,
  with its own GroupNorm (`group_norm`), a residual add and rescale_output_factor 1.
- `transformer_layers_per_block` is reversed for the up blocks (and its last entry used for the mid
  block); up blocks have layers_per_block + 1 resnets.
- Norm epsilons: UNet resnet GroupNorms and conv_norm_out use `norm_eps` (1e-5), the Transformer2DModel
  input GroupNorm (`attentions.N.norm`) uses 1e-6, BasicTransformerBlock LayerNorms 1e-5 (affine).
  Every VAE GroupNorm (resnets, attention, conv_norm_out) uses 1e-6.
- Feed-forward is GEGLU: `ff.net.0.proj` gives 2*inner, `hidden * gelu(gate)` with exact (erf) gelu.
- With `use_linear_projection` proj_in/proj_out are Linear layers applied after the NCHW->NLC
  reshape; without it they are 1x1 convs applied before/after it.
- Timesteps are float; the sinusoidal embedding is `[cos, sin]` (flip_sin_to_cos true, freq_shift 0),
  time_embed_dim = 4 * block_out_channels[0]. For `text_time`, `time_ids` is flattened, embedded
  with Timesteps(addition_time_embed_dim), reshaped to [B, 6 * dim], concatenated AFTER `text_embeds`,
  run through `add_embedding` (linear_1, silu, linear_2) and added to the time embedding.
- UNet Downsample2D is a stride-2 conv with padding 1; the VAE's is `F.pad(0, 1, 0, 1)` then a
  stride-2 conv with padding 0. Upsample2D is nearest x2 then a 3x3 conv. If H or W is not a multiple
  of 2**num_upsamplers the UNet forwards `upsample_size` (the skip's size) to the interpolation; the
  fixtures' sizes (16x24, 16x16) are multiples of 8, so that path is not exercised.
- AutoencoderKL.encode: `mean, logvar = chunk(quant_conv(encoder(x)), 2, dim=1)` (no quant_conv when
  `use_quant_conv` is false), then logvar is clamped to [-30, 20]. decode: `decoder(post_quant_conv(z))`.
- The bf16 variant loads with `from_pretrained(variant="bf16", torch_dtype=torch.float32)` to the
  float32 model holding the bf16-rounded weights; its output is 1.4e-2 relative L2 away from the
  fp32 unet_tiny output, so tolerance 1e-3 tells the two apart.
- The pipeline folder loads with `DiffusionPipeline.from_pretrained(path, text_encoder=None,
  tokenizer=None, safety_checker=None, feature_extractor=None)`; without those keywords diffusers
  refuses the null components.

## transformers behaviour the clip_* fixtures pin down

- CLIPTextModel is pre-LN (`layer_norm1`, causal self-attention with q/k/v/out_proj biases and scale
  head_dim ** -0.5, residual; `layer_norm2`, `fc1`, `hidden_act`, `fc2`, residual), then
  `final_layer_norm`; `quick_gelu` is x * sigmoid(1.702 x), `gelu` the exact (erf) one. With no
  attention_mask only the causal mask applies. `hidden_states` has num_hidden_layers + 1 entries: the
  embeddings, then each layer's output before `final_layer_norm`.
- pooler_output is last_hidden_state at the first position whose id is eos_token_id (position 0 when
  none is: `(ids == eos).int().argmax(-1)`), except for configs with eos_token_id 2 (SD1.x's and SDXL's
  released text encoders), where it is argmax(input_ids) (the first of the largest id, 49407).
- transformers 5.24 saves a CLIPTextModel without the `text_model.` prefix the released checkpoints
  have (and CLIPTextModelWithProjection with it); it loads both, and drops the `position_ids` buffer
  transformers before 4.31 saved. `clip_sd15` is written in the released layout (its loaded outputs
  equal the in-memory model's, so transformers reads it as the same model).
- Tokenizer padding: SD1.x pads with `<|endoftext|>` (49407), SDXL's tokenizer_2 with `!` (0); prompts
  longer than 77 tokens are truncated with the eos at position 76.

## transformers behaviour the t5_* fixtures pin down

- T5EncoderModel runs `shared` (the token table, no scaling), then per block: T5LayerNorm (an RMS norm:
  x * rsqrt(mean(x^2) + eps) * weight, no mean, no bias), self-attention with no biases and unscaled
  scores (scale 1) plus the relative position bias, residual; T5LayerNorm, the feed-forward
  (`gelu_new(wi_0 x) * wi_1 x` then `wo` for `gated-gelu`; `wo(relu(wi x))` for `relu`), residual;
  then `final_layer_norm`. The bias [heads, S, S] comes from block 0's `relative_attention_bias` alone
  and every later block adds the same one. Its buckets are bidirectional: half per sign, exact below a
  quarter of the buckets, log-spaced up to `relative_attention_max_distance` and saturated past it
  (`t5_v11`'s 77 tokens reach past its 20, `t5_original`'s 150 past 128).
- `dense_act_fn` and `is_gated_act` are derived from `feed_forward_proj` (`gated-gelu` gives `gelu_new`,
  gated) unless the config writes them, which transformers 5.24 then honours as written.
- transformers 5.24 saves the tied token table once, as `shared.weight`; a checkpoint with
  `encoder.embed_tokens.weight` instead (`t5_original`) loads the same. With both present and
  different, transformers leaves them untied and the encoder reads `encoder.embed_tokens.weight`.
  `tie_word_embeddings` in the config changes none of this for the encoder.

## Pipelines (`pipelines/`)

Whole text-to-image runs, `prompt -> image`, made by `tools/make_fixtures_pipeline.py` (configs and
cases in `tools/make_fixtures_pipeline_table.py`). Not a `<name>/case.json` fixture: the per-model
tests do not see it.

- `pipelines/sd/`, `pipelines/sd2v/`, `pipelines/sdxl/`: complete diffusers pipeline folders
  (`model_index.json`, `unet/`, `vae/`, `text_encoder/` [+ `text_encoder_2/`], `tokenizer/`
  [+ `tokenizer_2/`], `scheduler/`) written with `save_pretrained`, weights seeded as above (token
  and position embeddings N(0, 1)). The tokenizers are the real CLIP vocabulary
  (`tools/make_fixtures_clip_vocab.py`: `vocab.json`, `merges.txt`, `tokenizer_config.json`, no
  `tokenizer.json`). Each `CLIPTextModel` is saved in the released folders' layout (`text_model.*`
  names and the `position_ids` buffer, `make_fixtures_clip.legacy_layout`). Files meant to be equal
  are byte-identical, so git stores them once: `sd/text_encoder` = `sdxl/text_encoder` = the
  `clip_sd15` fixture's model, `sdxl/text_encoder_2` = the `clip_sdxl2` fixture's (sharded), the
  weights of `sd/vae` = `sdxl/vae` (config.json differs in scaling_factor), and every tokenizer's
  `vocab.json` and `merges.txt` (= `data/clip_tokenizer/`).
- `pipelines/flux/`, `pipelines/flux_schnell/`, `pipelines/sd3/`: FluxPipeline and
  StableDiffusion3Pipeline folders (`transformer/` instead of `unet/`, a 16-channel `vae/` without
  quant convs, `FlowMatchEulerDiscreteScheduler`), built by `tools/make_fixtures_pipeline_dit.py`.
  Their T5 (`text_encoder_2` of Flux, `text_encoder_3` of SD3) is a seeded `T5EncoderModel`, its
  tokenizer a sentencepiece unigram model trained there offline (the standard library's source text
  plus prompt-like lines, one thread, from memory so no path lands in the file), loaded with
  `T5TokenizerFast.from_pretrained` and saved by the pipeline (`tokenizer.json`, with `spiece.model`
  kept beside it). RMS norms (diffusers' `RMSNorm`, T5's `T5LayerNorm`) get weights 1 + 0.1 N(0, 1).
  Byte-identical across folders: the CLIP-L of Flux = `sd/text_encoder`; flux_schnell's files = flux's
  but for the transformer and the scheduler config; SD3's T5 and tokenizer_3 = Flux's;
  SD3's `text_encoder_2` = `sdxl/text_encoder_2`; SD3's `text_encoder` (CLIP-L with projection, sharded
  at 1MB) has its token table shard = `sdxl/text_encoder_2`'s; the VAE weights of flux and sd3.
- `pipelines/cogvideox/`, `pipelines/cogvideox_2b/`: CogVideoXPipeline folders
  (`tools/make_fixtures_pipeline_video.py`): T5 and its tokenizer = flux's (byte-identical), a
  `CogVideoXTransformer3DModel` with 3D RoPE (cogvideox_2b: 3D sincos positions, and the VAE's
  weights = cogvideox's), an
  `AutoencoderKLCogVideoX` of three levels (its decoder's `conv_out` scaled down so the frames are not
  mostly clipped), CogVideoX-5b's `CogVideoXDDIMScheduler` config. Its cases' `image` is the video
  [1,F,3,H,W] (`output_type="pt"` frames), `latents` and `init_noise` [1,F',C,h,w]; cases.json adds
  `num_frames`, `latent_frames`, `frames` (what the VAE made), `use_dynamic_cfg` and the guidance
  scale of every step.
{pipeline_folders}
- `pipelines/<case>.safetensors`, one per run: float32 tensors but the token ids (int64).
  `init_noise` [B,4,h,w] = `torch.randn(shape, generator=torch.Generator().manual_seed(seed))`, the raw
  noise before `init_noise_sigma`; `image` [B,3,H,W] = `pipe(..., generator=torch.Generator().manual_seed(seed),
  output_type="pt").images` (in [0, 1]); `latents` [B,4,h,w], the final latents before the VAE;
  `step_latents` [S,B,4,h,w], the latents after each of the S loop iterations (`latents` = the last);
  `step_noise_pred` [S,B,4,h,w], the model output each `scheduler.step` got (after CFG and
  guidance_rescale); `timesteps` [S], the timestep of each UNet call (as float32 values);
  `prompt_embeds` [B,77,D] and `negative_prompt_embeds` (absent without CFG) as the pipeline's
  `encode_prompt` returns them (already repeated for B = num_images_per_prompt); `input_ids` [1,77]
  and `negative_input_ids` (int64; absent without CFG or when the negative embeddings are zeros).
  SDXL adds `pooled_prompt_embeds` [B,P], `negative_pooled_prompt_embeds`, `add_time_ids` [1,6]
  (`original_size + crops_coords_top_left + target_size`, the same row for the negative half),
  `input_ids_2` and `negative_input_ids_2` (tokenizer_2).
  Flux and SD3 cases (C = 16 latent channels, L = max_sequence_length) record instead: `init_noise`
  [B,16,h,w] as drawn (Flux then packs it 2x2 into [B,hw/4,64]); `latents` and `step_latents` as the
  loop holds them (PACKED [B,hw/4,64] for Flux, [B,16,h,w] for SD3); `vae_latents` [B,16,h,w], what
  `vae.decode` got (unpacked, `/ scaling_factor + shift_factor`); `step_noise_pred` (the velocity each
  `scheduler.step` got, after CFG for SD3); `first_transformer_input`, `first_transformer_timestep` and
  `first_transformer_output` (the raw output of the first call: batch 2B with CFG); `timesteps` [S]
  (the scheduler's, 1000 sigma) and `sigmas` [S+1] (ending at 0). Flux: `prompt_embeds` [B,L,48] (T5
  `last_hidden_state`), `pooled_prompt_embeds` [B,16] (CLIP-L `pooler_output`), `text_ids` [L,3]
  (zeros), `latent_image_ids` [hw/4,3] (0, row, column), `guidance` [B] (dev only), `input_ids` [1,77]
  (CLIP) and `input_ids_2` [1,L] (T5). SD3: `prompt_embeds` [B,77+L,48] (both CLIPs' `hidden_states[-2]`
  concatenated, zero-padded from 32 to 48, then T5's L tokens), `pooled_prompt_embeds` [B,28], their
  `negative_` twins with CFG, and `input_ids`, `input_ids_2`, `input_ids_3` (+ `negative_` ones).
- `pipelines/cases.json`: `{{"made_with": {{package versions}}, "cases": [...]}}`, each case:

      {{"name", "pipeline": "sd" | "sd2v" | "sdxl", "description", "prompt", "negative_prompt": str | null,
       "steps", "guidance", "guidance_rescale", "scheduler": null (the folder's) | class name
       (`Cls.from_config(pipe.scheduler.config, **scheduler_overrides)`), "scheduler_overrides": {{}},
       "seed", "height", "width", "batch" (num_images_per_prompt), "clip_skip": null | int,
       "sdxl": null | {{"original_size", "crops_coords_top_left", "target_size"}} (the values used, defaults
       included), "io": "<name>.safetensors", "tolerance": 1e-4 (relative L2),
       and, as diffusers reported them: "scheduler_class", "timesteps_dtype" (of the timestep tensor
       the UNet got), "unet_calls", "unet_batch" (2B with CFG), "init_noise_sigma", "timesteps",
       "latents_reproduces_image" (whether `latents=init_noise` with a fresh generator gives the same
       image: false only for schedulers that draw noise every step)}}

  Flux and SD3 cases add "pipeline_class", "max_sequence_length", "sigmas" and "mu" (Flux-dev's
  dynamic shift, `calculate_shift` of the image token count; null when the scheduler does not shift
  dynamically), have tolerance 1e-3 (a whole flow-matching pipeline), and keep the UNet's key
  names for the transformer ("unet_calls", "unet_batch"); "init_noise_sigma" is 1 (the noise is used
  as drawn).

  The equivalent diffc run: `diffc pipelines/<pipeline> -o plan`, then `diffrun plan --prompt P
  --negative-prompt N --steps S --guidance G --scheduler NAME --seed N ...`.

Each run loads its folder in a fresh process with `<Pipeline>.from_pretrained(folder,
torch_dtype=torch.float32)` (SDXL: `add_watermarker=False`), CPU, 2 threads, deterministic algorithms,
and checks what it records: the UNet got `cat([negative_prompt_embeds, prompt_embeds])` (and for SDXL
`cat([negative_pooled, pooled])` and `add_time_ids` per row); `image` is bit-equal to
`clamp(vae.decode(latents / scaling_factor) / 2 + 0.5, 0, 1)`; `latents=init_noise` reproduces the
image bit for bit (for an ancestral scheduler: with a generator that has already drawn the initial
noise); the first case of each folder gives the same image from the in-memory pipeline. Every file
written is reproducible byte for byte with the same package versions.

### Cases

{pipeline_cases}

### diffusers behaviour these runs pin down

- Timesteps reach the UNet as a 0-d tensor: int64 from PNDM, DDIM and DPMSolverMultistep, float32
  from Euler, EulerAncestral and LMS. Euler with `use_karras_sigmas` gives fractional timesteps
  (667.0, 160.0347, 1.0000001 for 3 steps); DPMSolverMultistep rounds its Karras timesteps to
  integers (999, 687, 146, 0 for 4 steps). The UNet casts to float for the sinusoidal embedding.
- `timestep_spacing` "leading" with `steps_offset` 1 (all three folders): 3 steps are 667, 334, 1;
  DPMSolverMultistep's leading spacing divides by steps + 1 (4 steps: 801, 601, 401, 201).
  PNDM with `skip_prk_steps` makes N steps N + 1 UNet calls with the second timestep repeated (667,
  334, 334, 1). `init_noise_sigma` is 1 for PNDM/DDIM/DPM; for Euler, EulerAncestral and LMS with
  leading spacing it is sqrt(s^2 + 1), s the largest sigma OF THE SCHEDULE (the first timestep's, so it
  depends on the step count: 3.0955 for 3 steps, 4.2364 for 4), not of the 1000 training steps
  (recorded per case).
- A scheduler built with `Cls.from_config(pipe.scheduler.config)` keeps keys it does not take: the
  folders' configs carry SD's `clip_sample: false`, without which DDIMScheduler would clip x0 to [-1, 1].
- StableDiffusionPipeline: `negative_prompt` null with CFG encodes "" (77 ids: bos, eos, then pad).
  `clip_skip` k takes `hidden_states[-(k+1)]` then `final_layer_norm` for the PROMPT only: the negative
  prompt is always `last_hidden_state` (case sd_clip_skip). Guidance 1.0 skips CFG: UNet batch B,
  no negative embeddings.
- StableDiffusionXLPipeline: each encoder gives `hidden_states[-2]` (no final LayerNorm), concatenated
  [text_encoder, text_encoder_2] on the feature axis; pooled = text_encoder_2's `text_embeds`
  (`text_projection` of the final-LayerNorm output at `argmax(input_ids)`, since `eos_token_id` is 2).
  `clip_skip` k moves the prompt to `hidden_states[-(k+2)]`; the negative stays at [-2].
  `force_zeros_for_empty_prompt` acts only when `negative_prompt` is None (not passed): then both
  negative embeddings are zeros (sdxl_default). An empty string "" is encoded like any prompt
  (sdxl_negative_empty), and so is any text.
- num_images_per_prompt B: one `randn` of [B,4,h,w]; the embeddings are repeated per image; with CFG the
  UNet batch is [negative x B, prompt x B].
- EulerAncestral draws `randn(latent shape)` from the same generator at every step, after the initial
  noise. With `latents=` given the generator has not drawn the initial noise, so the step noise and
  the image differ (`latents_reproduces_image: false`).
- The pipeline passes `generator` to `scheduler.step` only when the step's signature names it
  (`prepare_extra_step_kwargs`); without it an ancestral step would fall back to torch's global RNG.
- Sizes: diffusers accepts any multiple of 8 px and, when the latents are no multiple of
  2^(number of downsamplers), passes `upsample_size` to the UNet's up blocks. diffc refuses such
  sizes for now (driver/pipeline_build.c), so the cases keep to multiples: sd 128x64 px (16x8
  latents, 3 downsamplers), sdxl 64x96 px (8x12 latents, 2 downsamplers).
- diffusers 0.42.1's StableDiffusionPipeline applies `text_encoder.text_model.final_layer_norm` for
  `clip_skip`, which transformers 5's CLIPTextModel lacks (it no longer wraps a `.text_model`):
  AttributeError. The generator points a plain attribute `text_model` at the model itself (no change
  to weights or outputs) so that code runs as written.
- FluxPipeline: sigmas `linspace(1, 1/S, S)` shifted by `mu` (dev: 0.459375 for 16 image tokens), the
  transformer gets `timestep / 1000` and `guidance` (only when `guidance_embeds`; schnell ignores
  `guidance_scale`); the T5 prompt is padded to `max_sequence_length` with no attention mask; CLIP is
  cut to 77 tokens and T5 to L (flux_long_prompt). Sizes that are no multiple of 16 px are rounded
  down for the latents with only a warning (the cases keep to multiples).
- StableDiffusion3Pipeline: static shift 3 (sigmas shift*s / (1 + (shift-1)*s)), the transformer gets
  the timestep unscaled (0..1000); `negative_prompt` null with CFG encodes "" with all three encoders;
  the position table is cropped around its centre to the patch grid.
- LMSDiscreteScheduler integrates its coefficients with `scipy.integrate.quad` and binds `integrate`
  only when scipy was importable as diffusers loaded (else `step` raises NameError). scipy is not in
  the fixture venv: the generator binds `make_fixtures_scheduler.quad`, the stand-in the scheduler
  fixtures use (QUADPACK's 21-point Gauss-Kronrod stage; the integrands are polynomials). sd_lms
  rerun with scipy 1.17.1 installed (diffusers' own binding) gave the same image bit for bit.
"""


def pipeline_sections():
    """The README's lists of pipeline folders and cases, from make_fixtures_pipeline_table."""
    folders = "\n".join(f"  - `{name}/`: {p['description']}" for name, p in PIPELINES.items())
    lines = []
    for c in CASES:
        sched = c["scheduler"] or "folder's scheduler"
        if c["scheduler_overrides"]:
            sched += " " + json.dumps(c["scheduler_overrides"])
        size = f", {c['height']}x{c['width']} px" if c["height"] else ""
        extra = "".join([f", batch {c['batch']}" if c["batch"] > 1 else "",
                         f", clip_skip {c['clip_skip']}" if c["clip_skip"] is not None else "",
                         f", guidance_rescale {c['guidance_rescale']:g}" if c["guidance_rescale"] else ""])
        if c.get("max_sequence_length"):
            extra += f", T5 {c['max_sequence_length']} tokens"
        neg = "null" if c["negative_prompt"] is None else json.dumps(c["negative_prompt"], ensure_ascii=False)
        lines.append(f"- `{c['name']}` ({c['pipeline']}; {sched}, {c['steps']} steps, guidance {c['guidance']:g}, "
                     f"negative {neg}{size}{extra}, seed {c['seed']}): {c['description']}.")
    return folders, "\n".join(lines)


def write_readme(out_root):
    import diffusers
    import numpy
    import safetensors
    import transformers
    pipeline_folders, pipeline_cases = pipeline_sections()
    parts = []
    for fx in FIXTURES:
        cfg = ""
        if not fx.get("pipeline"):
            cfg = f"\n  Config: `{json.dumps(fx['config'])}`"
        runs = ", ".join(f"`{r['io']}` ({r['entry']}, tolerance {r['tolerance']:g})" for r in fx["runs"])
        parts.append(f"- `{fx['name']}`: {fx['description']}{cfg}\n  Runs: {runs}.")
    text = README_TEMPLATE.format(diffusers=diffusers.__version__, transformers=transformers.__version__, torch=torch.__version__.split("+")[0],
                                  safetensors=safetensors.__version__, numpy=numpy.__version__,
                                  python=".".join(map(str, sys.version_info[:3])),
                                  fixtures="\n".join(parts), pipeline_folders=pipeline_folders,
                                  pipeline_cases=pipeline_cases)
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write(text)
