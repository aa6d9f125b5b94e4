"""make_fixtures' models (tools/make_fixtures.py): building a diffusers model class (or a transformers
text encoder: CLIP, make_fixtures_clip.py; T5, make_fixtures_t5.py) from a config with seeded weights, the seeded inputs of a run,
one reference forward (UNet forward, VAE encode/decode, with diffusers' tiling/slicing as the run asks;
a text encoder's outputs; a DiT's: make_fixtures_dit.py, make_fixtures_cogvideox.py), the attention
modules' summary, and saving a model folder (bf16 or fp16 variant, sharded, the older transformers layout)
or a pipeline's model_index.json.
"""

import json
import math
import os

import torch
from torch import nn

from make_fixtures_clip import build_clip, clip_class, clip_inputs, is_clip, legacy_layout, reinit_embeddings, run_clip
from make_fixtures_t5 import build_t5, embed_tokens_layout, is_t5, reinit_t5_norms, run_t5, t5_class, t5_inputs
from make_fixtures_cogvideox_vae import run_cogvideox_whole
from make_fixtures_dit import apply_dit_options, flux_inputs, run_dit, sd3_inputs
from make_fixtures_cogvideox import cogvideox_inputs, reinit_cogvideox_buffers, run_cogvideox


def is_transformers(cls_name):
    """A transformers class: its folder holds model*.safetensors, from_pretrained takes dtype."""
    return is_clip(cls_name) or is_t5(cls_name)

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


def apply_vae_options(model, run):
    """diffusers' enable_tiling / enable_slicing, as the run asks; and a DiT run's memory options."""
    if run.get("tiling"):
        model.enable_tiling()  # each class's own default tiles
    if run.get("slicing"):
        model.enable_slicing()
    apply_dit_options(model, run)


def has_model_options(run):
    """Whether the run changes the model object (so it must not be the one the other runs use)."""
    return any(run.get(k) for k in ("tiling", "slicing", "group_offload", "layerwise_casting"))


def model_class(name):
    if is_clip(name):
        return clip_class(name)
    if is_t5(name):
        return t5_class(name)
    import diffusers
    diffusers.utils.logging.set_verbosity_error()  # quiet the 'accelerate not found' note
    diffusers.utils.logging.disable_progress_bar()
    return getattr(diffusers, name)


def build_model(cls_name, config, seed):
    torch.manual_seed(seed)
    if is_clip(cls_name):
        model = build_clip(cls_name, config)
    elif is_t5(cls_name):
        model = build_t5(cls_name, config)
    else:
        model = model_class(cls_name)(**config)
    reinit_weights(model, seed)
    model.eval()
    return model


def reinit_weights(model, seed):
    """Seeded re-initialisation: conv/linear weights N(0, 1/fan_in), biases 0.05*N(0,1),
    norm weights 1 + 0.1*N(0,1) (RMSNorm's too: torch's and diffusers'), norm biases 0.1*N(0,1),
    embedding tables N(0,1) (after the rest).  Every parameter is covered."""
    from diffusers.models.normalization import RMSNorm as DiffusersRMSNorm
    g = torch.Generator().manual_seed(1000003 * seed + 17)
    done = set()
    with torch.no_grad():
        for mname, m in model.named_modules():
            if isinstance(m, (nn.Conv2d, nn.Conv3d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(_randn(g, *m.weight.shape) / math.sqrt(fan_in))
                done.add(id(m.weight))
                if m.bias is not None:
                    m.bias.copy_(0.05 * _randn(g, *m.bias.shape))
                    done.add(id(m.bias))
            elif isinstance(m, (nn.GroupNorm, nn.LayerNorm, nn.RMSNorm, DiffusersRMSNorm)):
                if m.weight is not None:
                    m.weight.copy_(1.0 + 0.1 * _randn(g, *m.weight.shape))
                    done.add(id(m.weight))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.1 * _randn(g, *m.bias.shape))
                    done.add(id(m.bias))
        reinit_t5_norms(model, g, _randn, done)
        reinit_cogvideox_buffers(model, g, _randn)
        reinit_embeddings(model, g, _randn, done)
    missed = [n for n, p in model.named_parameters() if id(p) not in done]
    if missed:
        raise SystemExit(f"reinit_weights: parameters not re-initialised: {missed}")


def make_inputs(spec):
    kind, a = spec
    if kind == "unet":
        return unet_inputs(**a)
    if kind == "clip":
        return clip_inputs(**a)
    if kind == "t5":
        return t5_inputs(**a)
    if kind == "flux":
        return flux_inputs(**a)
    if kind == "sd3":
        return sd3_inputs(**a)
    if kind == "cogvideox":
        return cogvideox_inputs(**a)
    return image_inputs(a["seed"], a["name"], *a["shape"])


def run_model(model, kind, entry, inputs, clip_hidden=None):
    """One reference forward.  Returns an ordered dict out-name -> tensor."""
    with torch.no_grad():
        if kind == "clip":
            return run_clip(model, inputs, clip_hidden)
        if kind == "t5":
            return run_t5(model, inputs)
        if kind in ("flux", "sd3"):
            return run_dit(model, kind, inputs)
        if kind == "cogvideox":
            return run_cogvideox(model, inputs)
        if kind == "unet":
            added = None
            if "text_embeds" in inputs:
                added = {"text_embeds": inputs["text_embeds"], "time_ids": inputs["time_ids"]}
            y = model(inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"],
                      added_cond_kwargs=added).sample
            return {"out.sample": y}
        if kind == "cogvideox_whole":
            return run_cogvideox_whole(model, entry, inputs)
        if entry == "encode":
            dist = model.encode(inputs["sample"]).latent_dist
            return {"out.mean": dist.mean, "out.logvar": dist.logvar}
        if entry == "decode":
            return {"out.sample": model.decode(inputs["z"]).sample}
    raise ValueError(entry)


def attention_summary(model):
    """(module path, heads, head_dim, processor) for every attention module."""
    rows = []
    for name, m in model.named_modules():
        if hasattr(m, "processor") and hasattr(m, "heads") and hasattr(m, "to_q"):
            inner = m.to_q.out_features
            rows.append((name, m.heads, inner // m.heads, type(m.processor).__name__,
                         bool(getattr(m, "upcast_attention", False))))
    return rows


def save_model(model, model_dir, fx):
    if fx.get("save_dtype") in ("bf16", "fp16"):
        dtype = torch.bfloat16 if fx["save_dtype"] == "bf16" else torch.float16
        model.to(dtype).save_pretrained(model_dir, variant=fx["save_dtype"])
        model.to(torch.float32)
    elif fx.get("max_shard_size"):
        model.save_pretrained(model_dir, max_shard_size=fx["max_shard_size"])
    else:
        model.save_pretrained(model_dir)
    if fx.get("legacy_layout"):
        legacy_layout(model_dir, fx["config"]["max_position_embeddings"])
    if fx.get("embed_tokens_layout"):
        embed_tokens_layout(model_dir, keep_shared=fx["embed_tokens_layout"] == "both")


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
