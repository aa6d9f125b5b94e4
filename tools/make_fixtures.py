#!/usr/bin/env python3
"""Generate diffc's reference fixtures with diffusers itself as the oracle.

Every model is built from a config dict (nothing is downloaded), its weights are
re-initialised from a seeded generator, it is saved with ``save_pretrained`` and
then, in a fresh child process per run, loaded back with ``from_pretrained`` and
run in float32 on the CPU (``torch.no_grad()``, ``eval()``, 2 threads).  The
child writes the io file (inputs + ``out.*`` outputs) and reports wall time and
peak RSS, which go into ``case.json``.

Usage:  python tools/make_fixtures.py --out tests/fixtures [--only NAME ...]
(normally through tools/make_fixtures.sh, which sets up the virtual environment).

Everything written is deterministic except the measured fields of case.json
(``diffusers_seconds*``, ``diffusers_*_rss_bytes``).
"""

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time

import torch
from torch import nn

NUM_THREADS = 2
TIMING_BLOCKS = 7
TIMING_BLOCK_SECONDS = 0.25

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

# --------------------------------------------------------------------------------------
# Inputs (seeded).  Each returns an ordered dict name -> float32 tensor.
# --------------------------------------------------------------------------------------


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float32)


def unet_inputs(seed, batch, channels, h, w, seq, ctx_dim, timesteps, text_dim=None, time_ids=None):
    g = torch.Generator().manual_seed(seed)
    d = {
        "sample": _randn(g, batch, channels, h, w),
        "timestep": torch.tensor(timesteps[:batch], dtype=torch.float32),
        "encoder_hidden_states": _randn(g, batch, seq, ctx_dim),
    }
    assert d["timestep"].shape == (batch,)
    if text_dim is not None:
        d["text_embeds"] = _randn(g, batch, text_dim)
        d["time_ids"] = torch.tensor(time_ids[:batch], dtype=torch.float32)
        assert d["time_ids"].shape == (batch, 6)
    return d


def image_inputs(seed, name, *shape):
    g = torch.Generator().manual_seed(seed)
    return {name: _randn(g, *shape)}


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


def apply_vae_options(model, run):
    """diffusers' enable_tiling / enable_slicing, as the run asks."""
    if run.get("tiling"):
        model.enable_tiling()
    if run.get("slicing"):
        model.enable_slicing()


def diffc_options(run):
    """The diffc flags that ask for the same as the run's diffusers options."""
    return (["--vae-tiling"] if run.get("tiling") else []) + (["--vae-slicing"] if run.get("slicing") else [])


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

# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def model_class(name):
    import diffusers
    diffusers.utils.logging.set_verbosity_error()  # quiet the 'accelerate not found' note
    diffusers.utils.logging.disable_progress_bar()
    return getattr(diffusers, name)


def build_model(cls_name, config, seed):
    torch.manual_seed(seed)
    model = model_class(cls_name)(**config)
    reinit_weights(model, seed)
    model.eval()
    return model


def reinit_weights(model, seed):
    """Seeded re-initialisation: conv/linear weights N(0, 1/fan_in), biases 0.05*N(0,1),
    norm weights 1 + 0.1*N(0,1), norm biases 0.1*N(0,1).  Every parameter is covered."""
    g = torch.Generator().manual_seed(1000003 * seed + 17)
    done = set()
    with torch.no_grad():
        for mname, m in model.named_modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(_randn(g, *m.weight.shape) / math.sqrt(fan_in))
                done.add(id(m.weight))
                if m.bias is not None:
                    m.bias.copy_(0.05 * _randn(g, *m.bias.shape))
                    done.add(id(m.bias))
            elif isinstance(m, (nn.GroupNorm, nn.LayerNorm)):
                if m.weight is not None:
                    m.weight.copy_(1.0 + 0.1 * _randn(g, *m.weight.shape))
                    done.add(id(m.weight))
                if m.bias is not None:
                    m.bias.copy_(0.1 * _randn(g, *m.bias.shape))
                    done.add(id(m.bias))
    missed = [n for n, p in model.named_parameters() if id(p) not in done]
    if missed:
        raise SystemExit(f"reinit_weights: parameters not re-initialised: {missed}")


def make_inputs(spec):
    kind, a = spec
    if kind == "unet":
        return unet_inputs(**a)
    return image_inputs(a["seed"], a["name"], *a["shape"])


def run_model(model, kind, entry, inputs):
    """One reference forward.  Returns an ordered dict out-name -> tensor."""
    with torch.no_grad():
        if kind == "unet":
            added = None
            if "text_embeds" in inputs:
                added = {"text_embeds": inputs["text_embeds"], "time_ids": inputs["time_ids"]}
            y = model(inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"],
                      added_cond_kwargs=added).sample
            return {"out.sample": y}
        if entry == "encode":
            dist = model.encode(inputs["sample"]).latent_dist
            return {"out.mean": dist.mean, "out.logvar": dist.logvar}
        if entry == "decode":
            return {"out.sample": model.decode(inputs["z"]).sample}
    raise ValueError(entry)


def save_io(path, tensors):
    from safetensors.torch import save_file
    save_file({k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()}, path)


def load_io(path):
    from safetensors.torch import load_file
    return load_file(path)


def dir_size(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    return total


def attention_summary(model):
    """(module path, heads, head_dim, processor) for every attention module."""
    rows = []
    for name, m in model.named_modules():
        if hasattr(m, "processor") and hasattr(m, "heads") and hasattr(m, "to_q"):
            inner = m.to_q.out_features
            rows.append((name, m.heads, inner // m.heads, type(m.processor).__name__,
                         bool(getattr(m, "upcast_attention", False))))
    return rows


# --------------------------------------------------------------------------------------
# Worker: load the saved model, run, time, measure RSS, write the io file.
# --------------------------------------------------------------------------------------


def peak_rss_bytes():
    """Peak RSS of this process: VmHWM from /proc/self/status.  (getrusage's ru_maxrss is not used:
    across fork+exec it keeps the parent's high-water mark, here the generator's own ~800 MB.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def worker(job_path):
    with open(job_path) as f:
        job = json.load(f)
    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    cls = model_class(job["cls"])
    baseline_rss = peak_rss_bytes()  # torch + diffusers imported, no model yet
    kwargs = {"torch_dtype": torch.float32}
    if job["variant"]:
        kwargs["variant"] = job["variant"]
    model = cls.from_pretrained(job["model_dir"], **kwargs)
    model.eval()
    apply_vae_options(model, job)
    for p in model.parameters():
        assert p.dtype == torch.float32, p.dtype
    inputs = load_io(job["io_path"])
    # clone: tensors read from a safetensors file are not 64-byte aligned, and on this CPU that
    # changes float summation order (~1e-6) against freshly allocated tensors
    inputs = {k: v.clone() for k, v in inputs.items() if not k.startswith("out.")}

    outs = run_model(model, job["kind"], job["entry"], inputs)  # warm-up; also the reference
    t0 = time.perf_counter()
    run_model(model, job["kind"], job["entry"], inputs)  # second warm-up, timed to size the blocks
    t_warm = time.perf_counter() - t0
    # The machine is shared, so one slow moment would spoil a plain mean: time TIMING_BLOCKS blocks
    # of `per_block` calls each and report the mean per call of the fastest block.
    per_block = max(5, min(20, int(math.ceil(TIMING_BLOCK_SECONDS / max(t_warm, 1e-6)))))
    times, block_means = [], []
    for _ in range(TIMING_BLOCKS):
        block = []
        for _ in range(per_block):
            t0 = time.perf_counter()
            again = run_model(model, job["kind"], job["entry"], inputs)
            block.append(time.perf_counter() - t0)
            for k in outs:
                if not torch.equal(outs[k], again[k]):
                    raise SystemExit(f"worker: {k} is not reproducible between repeats")
        times += block
        block_means.append(sum(block) / len(block))
    rss = peak_rss_bytes()
    save_io(job["io_path"], {**inputs, **outs})
    result = {
        "diffusers_seconds": min(block_means),
        "diffusers_seconds_median": sorted(times)[len(times) // 2],
        "repeats": f"{TIMING_BLOCKS}x{per_block}",
        "diffusers_peak_rss_bytes": rss,
        "diffusers_baseline_rss_bytes": baseline_rss,
        "attention": attention_summary(model),
    }
    with open(job["result_path"], "w") as f:
        json.dump(result, f)


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def save_model(model, model_dir, fx):
    if fx.get("save_dtype") == "bf16":
        model.to(torch.bfloat16).save_pretrained(model_dir, variant="bf16")
        model.to(torch.float32)
    elif fx.get("max_shard_size"):
        model.save_pretrained(model_dir, max_shard_size=fx["max_shard_size"])
    else:
        model.save_pretrained(model_dir)


def write_model_index(model_dir):
    import diffusers
    index = {
        "_class_name": "StableDiffusionPipeline",
        "_diffusers_version": diffusers.__version__,
        "feature_extractor": [None, None],
        "requires_safety_checker": False,
        "safety_checker": [None, None],
        "scheduler": ["diffusers", "PNDMScheduler"],
        "text_encoder": [None, None],
        "tokenizer": [None, None],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    with open(os.path.join(model_dir, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")


def check_upcast_no_effect(fx, model, run):
    """upcast_attention must not change the fp32 output (the default processor ignores it)."""
    cfg = dict(fx["config"])
    cfg["upcast_attention"] = False
    other = model_class(fx["cls"])(**cfg)
    other.load_state_dict(model.state_dict())
    other.eval()
    x = make_inputs(run["inputs"])
    a = run_model(model, run["kind"], run["entry"], x)["out.sample"]
    b = run_model(other, run["kind"], run["entry"], x)["out.sample"]
    d = (a - b).abs().max().item()
    print(f"  upcast_attention true vs false: max |diff| = {d:.3g}")
    if d > 1e-6:
        raise SystemExit("upcast_attention changes the fp32 output; drop it from the config")


def make_fixture(fx, out_root, table):
    name = fx["name"]
    fdir = os.path.join(out_root, name)
    if os.path.isdir(fdir):
        shutil.rmtree(fdir)
    model_dir = os.path.join(fdir, "model")
    os.makedirs(model_dir)
    print(f"== {name}")

    models = {}
    if fx.get("pipeline"):
        from diffusers import PNDMScheduler
        for comp, (cls_name, cfg, seed) in fx["components"].items():
            m = build_model(cls_name, cfg, seed)
            m.save_pretrained(os.path.join(model_dir, comp))
            models[comp] = (cls_name, m)
        PNDMScheduler(**SCHEDULER_SD15).save_pretrained(os.path.join(model_dir, "scheduler"))
        write_model_index(model_dir)
    else:
        m = build_model(fx["cls"], fx["config"], fx["seed"])
        nparams = sum(p.numel() for p in m.parameters())
        print(f"  {fx['cls']}: {nparams} parameters")
        save_model(m, model_dir, fx)
        models[None] = (fx["cls"], m)
        if fx.get("max_shard_size"):
            idx = os.path.join(model_dir, "diffusion_pytorch_model.safetensors.index.json")
            assert os.path.isfile(idx), "sharded save did not write an index.json"
            shards = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
            print(f"  sharded into {len(shards)} files + index.json")
            assert len(shards) >= 2
        if fx.get("check_upcast"):
            check_upcast_no_effect(fx, m, fx["runs"][0])

    case_runs = []
    for run in fx["runs"]:
        cls_name, m = models[run["component"]]
        if run["variant"] == "bf16":
            # reference model in memory: fp32 model holding the bf16-rounded weights
            m = build_model(cls_name, fx["config"], fx["seed"])
            with torch.no_grad():
                for p in m.parameters():
                    p.copy_(p.to(torch.bfloat16).to(torch.float32))
        inputs = make_inputs(run["inputs"])
        io_path = os.path.join(fdir, run["io"])
        save_io(io_path, inputs)  # inputs only; the worker adds the outputs

        job = {
            "cls": cls_name,
            "model_dir": os.path.join(model_dir, run["component"]) if run["component"] else model_dir,
            "variant": run["variant"],
            "kind": run["kind"],
            "entry": run["entry"],
            "io_path": io_path,
            "result_path": io_path + ".result.tmp.json",
            "tiling": run.get("tiling", False),
            "slicing": run.get("slicing", False),
        }
        job_path = io_path + ".job.tmp.json"
        with open(job_path, "w") as f:
            json.dump(job, f)
        env = dict(os.environ, OMP_NUM_THREADS=str(NUM_THREADS), MKL_NUM_THREADS=str(NUM_THREADS))
        subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", job_path], check=True, env=env)
        with open(job["result_path"]) as f:
            res = json.load(f)
        os.remove(job_path)
        os.remove(job["result_path"])

        # the child's output (from the saved folder) must equal the in-memory model's output
        io = load_io(io_path)
        apply_vae_options(m, run)
        ref = run_model(m, run["kind"], run["entry"], inputs)
        for k, v in ref.items():
            rel = ((io[k] - v).norm() / v.norm()).item()
            if rel > 1e-6:
                raise SystemExit(f"{name}/{run['io']}: {k} from the saved model differs from the in-memory "
                                 f"model by relative L2 {rel:.3g}")
        if "same_as" in fx and run["io"] in fx["same_as"]:
            other = os.path.join(out_root, fx["same_as"][run["io"]])
            if os.path.isfile(other):
                o = load_io(other)
                assert set(o) == set(io), (sorted(o), sorted(io))
                for k in io:
                    if not torch.equal(o[k], io[k]):
                        raise SystemExit(f"{name}/{run['io']}: {k} differs from {fx['same_as'][run['io']]}")
                print(f"  {run['io']} is identical to {fx['same_as'][run['io']]}")

        procs = sorted({(a[3], a[4]) for a in res["attention"]})
        heads = sorted({(a[1], a[2]) for a in res["attention"]})
        print(f"  {run['io']}: {res['diffusers_seconds']*1e3:.2f} ms/forward mean "
              f"({res['diffusers_seconds_median']*1e3:.2f} median) over {res['repeats']} calls, "
              f"peak RSS {res['diffusers_peak_rss_bytes']/2**20:.0f} MiB "
              f"(after imports {res['diffusers_baseline_rss_bytes']/2**20:.0f} MiB), attention (heads, head_dim) {heads}, "
              f"processors (class, upcast_attention flag) {procs}")
        for k, v in io.items():
            if k.startswith("out."):
                std = v.std().item()
                table.append([name, run["io"], k, "x".join(map(str, v.shape)), std, res["diffusers_seconds"]])
                if not (0.05 < std < 20.0) or not torch.isfinite(v).all():
                    raise SystemExit(f"{name}/{run['io']}: {k} std {std} is out of the sensible range")
        case_runs.append({
            "entry": run["entry"],
            "io": run["io"],
            "tolerance": run["tolerance"],
            "component": run["component"],
            "variant": run["variant"],
            **({"diffc_options": diffc_options(run)} if diffc_options(run) else {}),
            "diffusers_seconds": round(res["diffusers_seconds"], 6),
            "diffusers_seconds_median": round(res["diffusers_seconds_median"], 6),
            "diffusers_peak_rss_bytes": res["diffusers_peak_rss_bytes"],
            "diffusers_baseline_rss_bytes": res["diffusers_baseline_rss_bytes"],
        })

    with open(os.path.join(fdir, "case.json"), "w") as f:
        json.dump({"runs": case_runs, "description": fx["description"]}, f, indent=2)
        f.write("\n")
    size = dir_size(fdir)
    for row in table:
        if row[0] == name:
            row.append(size)
    print(f"  size on disk: {size/1e6:.3f} MB")


README_TEMPLATE = """\
# Reference fixtures

Made by `tools/make_fixtures.sh` (which creates or reuses a virtual environment, `.venv-fixtures` in the
repository root unless `DIFFC_FIXTURE_VENV` says otherwise, installs torch, diffusers, safetensors and
numpy from PyPI, and runs `python tools/make_fixtures.py --out tests/fixtures`).

Made with diffusers {diffusers}, torch {torch}, safetensors {safetensors}, numpy {numpy}, Python {python}.

Nothing is downloaded: every model is built from a config dict, its weights are re-initialised from a
seeded generator (conv/linear weights N(0, 1/fan_in), biases 0.05 N(0, 1), GroupNorm/LayerNorm weights
1 + 0.1 N(0, 1), their biases 0.1 N(0, 1)), and it is saved with `save_pretrained`. Each reference run
loads the saved folder back with `from_pretrained(..., torch_dtype=float32)` in a fresh Python process and
runs it in float32 on the CPU, `eval()`, `torch.no_grad()`, `torch.set_num_threads(2)`. Inputs are
random normal from seeded `torch.Generator`s; timesteps are distinct per batch element.

Re-running the generator on the same machine reproduces every file byte for byte except the measured
fields of `case.json` (`diffusers_seconds*`, `diffusers_*_rss_bytes`). The timings come from a shared
2-core machine and are only a rough baseline.

## Layout

`<name>/model/` is a diffusers model folder as `save_pretrained` writes it (for `pipeline_sd`, a
pipeline folder with `model_index.json`). `<name>/io_<entry>[_<tag>].safetensors` holds float32 tensors:
inputs under their diffusers argument names and outputs under `out.<name>`. `<name>/case.json`:

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
"""


def write_readme(out_root):
    import diffusers
    import numpy
    import safetensors
    parts = []
    for fx in FIXTURES:
        cfg = ""
        if not fx.get("pipeline"):
            cfg = f"\n  Config: `{json.dumps(fx['config'])}`"
        runs = ", ".join(f"`{r['io']}` ({r['entry']}, tolerance {r['tolerance']:g})" for r in fx["runs"])
        parts.append(f"- `{fx['name']}`: {fx['description']}{cfg}\n  Runs: {runs}.")
    text = README_TEMPLATE.format(diffusers=diffusers.__version__, torch=torch.__version__.split("+")[0],
                                  safetensors=safetensors.__version__, numpy=numpy.__version__,
                                  python=".".join(map(str, sys.version_info[:3])),
                                  fixtures="\n".join(parts))
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*", help="make only these fixtures")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return

    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    import diffusers
    print(f"diffusers {diffusers.__version__}, torch {torch.__version__}, {NUM_THREADS} threads")
    os.makedirs(args.out, exist_ok=True)
    names = [fx["name"] for fx in FIXTURES]
    for n in args.only or []:
        if n not in names:
            raise SystemExit(f"unknown fixture {n}; known: {names}")
    table = []
    for fx in FIXTURES:
        if args.only and fx["name"] not in args.only:
            continue
        make_fixture(fx, args.out, table)
    write_readme(args.out)

    print()
    hdr = ["fixture", "run", "output", "shape", "std", "diffusers s", "fixture MB"]
    rows = [[r[0], r[1], r[2], r[3], f"{r[4]:.4f}", f"{r[5]:.6f}", f"{r[6]/1e6:.3f}"] for r in table]
    widths = [max(len(str(x)) for x in col) for col in zip(hdr, *rows)]
    for r in [hdr] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    print(f"total size of {args.out}: {dir_size(args.out)/1e6:.3f} MB")


if __name__ == "__main__":
    main()
