"""The bench's models (bench/bench.py): the full-width SD1.5 UNet and SD VAE configs, the cases
named by model and size (unetS, vaeS, ...), and the child that builds a model with seeded random
weights and saves it as a diffusers folder under bench/models/ (bench.py --make-model NAME DIR).
"""

import json
import math
import os
import re
import shutil
import subprocess
import time

from bench_common import BENCH_SCRIPT, MODELS_DIR, REPO, child_env, log


DEFAULT_CASES = ["unet32", "unet64", "vae256", "vae512"]
QUICK_CASES = ["unet32", "vae256"]


# Stable Diffusion 1.5's UNet at full width
UNET_SD15 = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": [320, 640, 1280, 1280],
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "layers_per_block": 2,
    "attention_head_dim": 8,
    "cross_attention_dim": 768,
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "sample_size": 64,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "downsample_padding": 1,
    "act_fn": "silu",
}

# The SD VAE (AutoencoderKL) at full width
VAE_SD = {
    "in_channels": 3,
    "out_channels": 3,
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 2,
    "latent_channels": 4,
    "norm_num_groups": 32,
    "act_fn": "silu",
    "sample_size": 512,
    "scaling_factor": 0.18215,
}

MODELS = {
    "unet-sd15": dict(cls="UNet2DConditionModel", config=UNET_SD15, seed=15),
    "vae-sd": dict(cls="AutoencoderKL", config=VAE_SD, seed=16),
}

UNET_BATCH, UNET_TOKENS, UNET_TIMESTEPS = 2, 77, [500.0, 500.0]


def parse_case(name):
    """'unet32' / 'unet32x48' / 'vae256' / 'vae256x384' -> case dict."""
    m = re.fullmatch(r"(unet|vae)(\d+)(?:x(\d+))?", name)
    if not m:
        raise SystemExit(f"bench: bad case {name!r}: expected unetS, unetHxW, vaeS or vaeHxW (e.g. unet32, vae256)")
    kind, h = m.group(1), int(m.group(2))
    w = int(m.group(3)) if m.group(3) else h
    if kind == "unet":
        if h % 8 or w % 8:
            raise SystemExit(f"bench: {name}: UNet latent sides must be multiples of 8 (three downsamplers)")
        c = UNET_SD15["cross_attention_dim"]
        inputs = {"sample": [UNET_BATCH, 4, h, w], "timestep": [UNET_BATCH],
                  "encoder_hidden_states": [UNET_BATCH, UNET_TOKENS, c]}
        desc = f"SD1.5 UNet, latent {UNET_BATCH}x4x{h}x{w}, {UNET_TOKENS} tokens"
        return dict(name=name, model="unet-sd15", kind="unet", entry="forward", inputs=inputs, desc=desc)
    if h % 8 or w % 8:
        raise SystemExit(f"bench: {name}: VAE output sides must be multiples of 8")
    inputs = {"z": [1, 4, h // 8, w // 8]}
    desc = f"SD VAE decode, z 1x4x{h // 8}x{w // 8} -> 1x3x{h}x{w}"
    return dict(name=name, model="vae-sd", kind="vae", entry="decode", inputs=inputs, desc=desc)


def reinit_weights(model, seed):
    """Seeded re-initialisation, as tools/make_fixtures.py: conv/linear weights N(0, 1/fan_in),
    biases 0.05*N(0,1), norm weights 1 + 0.1*N(0,1), norm biases 0.1*N(0,1)."""
    import torch
    from torch import nn
    g = torch.Generator().manual_seed(1000003 * seed + 17)
    done = set()
    with torch.no_grad():
        for _, m in model.named_modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(*m.weight.shape, generator=g) / math.sqrt(fan_in))
                done.add(id(m.weight))
                if m.bias is not None:
                    m.bias.copy_(0.05 * torch.randn(*m.bias.shape, generator=g))
                    done.add(id(m.bias))
            elif isinstance(m, (nn.GroupNorm, nn.LayerNorm)):
                if m.weight is not None:
                    m.weight.copy_(1.0 + 0.1 * torch.randn(*m.weight.shape, generator=g))
                    done.add(id(m.weight))
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(*m.bias.shape, generator=g))
                    done.add(id(m.bias))
    missed = [n for n, p in model.named_parameters() if id(p) not in done]
    if missed:
        raise SystemExit(f"reinit_weights: parameters not re-initialised: {missed}")


def model_class(name):
    import diffusers
    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    return getattr(diffusers, name)


def model_stamp(name):
    spec = MODELS[name]
    return {"class": spec["cls"], "config": spec["config"], "seed": spec["seed"], "init": "fan_in-v1"}


def make_model_child(name, out_dir):
    import torch
    spec = MODELS[name]
    torch.manual_seed(spec["seed"])
    model = model_class(spec["cls"])(**spec["config"])
    reinit_weights(model, spec["seed"])
    model.eval()
    nparams = sum(p.numel() for p in model.parameters())
    tmp = out_dir + ".tmp"
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    with open(os.path.join(tmp, "bench_model.json"), "w") as f:
        json.dump(dict(model_stamp(name), parameters=nparams), f, indent=2)
        f.write("\n")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.rename(tmp, out_dir)
    print(f"  {spec['cls']}: {nparams / 1e6:.1f} M parameters, saved to {os.path.relpath(out_dir, REPO)}")


def ensure_model(name, python):
    out_dir = os.path.join(MODELS_DIR, name)
    stamp_path = os.path.join(out_dir, "bench_model.json")
    if os.path.isfile(stamp_path):
        with open(stamp_path) as f:
            have = json.load(f)
        have.pop("parameters", None)
        if json.loads(json.dumps(model_stamp(name))) == have:
            log(f"model {name}: reusing {os.path.relpath(out_dir, REPO)}")
            return out_dir
        log(f"model {name}: {os.path.relpath(out_dir, REPO)} was made from another config; rebuilding")
    else:
        log(f"model {name}: building with seeded random weights")
    os.makedirs(MODELS_DIR, exist_ok=True)
    t0 = time.perf_counter()
    subprocess.run([python, BENCH_SCRIPT, "--make-model", name, out_dir], check=True,
                   env=child_env(2))
    log(f"  ({time.perf_counter() - t0:.0f} s)")
    return out_dir
