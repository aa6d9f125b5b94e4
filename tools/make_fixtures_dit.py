"""make_fixtures' DiT pieces (tools/make_fixtures.py): the seeded inputs of a FluxTransformer2DModel or
SD3Transformer2DModel run, made as their pipelines make them (Flux: 2x2-packed latents, txt_ids zeros,
img_ids [0, row, col] of the packed grid, sigma timesteps; SD3: latents [B,C,H,W], timesteps sigma*1000),
one reference forward, and the memory options a run may ask for (group offload, diffusers'
enable_layerwise_casting) with the diffc flags that ask for the same.
"""

import torch


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float32)


def flux_image_ids(rows, cols):
    """FluxPipeline._prepare_latent_image_ids: [0, row, col] per packed latent, row-major."""
    ids = torch.zeros(rows, cols, 3)
    ids[..., 1] = ids[..., 1] + torch.arange(rows)[:, None]
    ids[..., 2] = ids[..., 2] + torch.arange(cols)[None, :]
    return ids.reshape(rows * cols, 3)


def flux_inputs(seed, batch, channels, rows, cols, seq, joint_dim, pooled_dim, sigmas, guidance=None):
    g = torch.Generator().manual_seed(seed)
    d = {
        "hidden_states": _randn(g, batch, rows * cols, channels),
        "encoder_hidden_states": _randn(g, batch, seq, joint_dim),
        "pooled_projections": _randn(g, batch, pooled_dim),
        "timestep": torch.tensor(sigmas[:batch], dtype=torch.float32),
        "img_ids": flux_image_ids(rows, cols),
        "txt_ids": torch.zeros(seq, 3),
    }
    if guidance is not None:
        d["guidance"] = torch.tensor(guidance[:batch], dtype=torch.float32)
    return d


def sd3_inputs(seed, batch, channels, h, w, seq, joint_dim, pooled_dim, sigmas):
    g = torch.Generator().manual_seed(seed)
    return {
        "hidden_states": _randn(g, batch, channels, h, w),
        "encoder_hidden_states": _randn(g, batch, seq, joint_dim),
        "pooled_projections": _randn(g, batch, pooled_dim),
        "timestep": torch.tensor([s * 1000.0 for s in sigmas[:batch]], dtype=torch.float32),
    }


def run_dit(model, kind, inputs):
    """One forward; the inputs by their forward argument names."""
    args = {k: v for k, v in inputs.items() if not k.startswith("out.")}
    return {"out.sample": model(**args).sample}


def apply_dit_options(model, run):
    """diffusers' memory options that change values, as the run asks: layerwise casting of the weights
    to fp8 e4m3 with float32 compute (its default skip patterns and the class's).  Group offload
    (run["group_offload"]) only moves weights between devices, and diffusers' hooks for it need
    accelerate, which the fixture environment lacks: its reference is the plain forward."""
    if run.get("layerwise_casting") == "fp8_e4m3":
        model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)


def dit_diffc_options(run):
    """The diffc flags asking for the same as apply_dit_options (block groups prefetched one ahead:
    the same values, the copies overlapped)."""
    flags = []
    if run.get("group_offload") == "block":
        flags += ["--offload", "group", "--group-level", "block", "--blocks-per-group", "1", "--prefetch"]
    elif run.get("group_offload") == "leaf":
        flags += ["--offload", "group", "--group-level", "leaf"]
    if run.get("layerwise_casting"):
        flags += ["--storage-dtype", run["layerwise_casting"]]
    return flags
