"""make_fixtures' CogVideoX transformer pieces (tools/make_fixtures.py): the seeded inputs of a
CogVideoXTransformer3DModel run as CogVideoXPipeline makes them (latent frames [B, F, C, H, W], T5 states
[B, T, text_embed_dim], integer timesteps as floats), and one reference forward whose image_rotary_emb is
the pipeline's own (CogVideoXPipeline._prepare_rotary_positional_embeddings, called on a stand-in holding
the transformer and the VAE's spatial factor) when the config asks for rotary positions.
"""

import types

import torch

VAE_SCALE_SPATIAL = 8  # AutoencoderKLCogVideoX: 2 ** (len(block_out_channels) - 1) with the released 4 blocks


def _randn(g, *shape):
    return torch.randn(*shape, generator=g, dtype=torch.float32)


def is_cogvideox(cls_name):
    return cls_name == "CogVideoXTransformer3DModel"


def cogvideox_inputs(seed, batch, frames, channels, h, w, seq, text_dim, timesteps, ofs=None):
    """ofs: CogVideoX 1.5 image-to-video's ofs values (its pipeline passes one, 2.0)."""
    g = torch.Generator().manual_seed(seed)
    d = {
        "hidden_states": _randn(g, batch, frames, channels, h, w),
        "encoder_hidden_states": _randn(g, batch, seq, text_dim),
        "timestep": torch.tensor(timesteps[:batch], dtype=torch.float32),
    }
    if ofs is not None:
        d["ofs"] = torch.tensor(ofs, dtype=torch.float32)
    return d


def rotary_emb(model, frames, h, w):
    """The pipeline's rotary table for latents of frames x h x w (pixel sides h and w times the VAE factor)."""
    from diffusers import CogVideoXPipeline
    stand_in = types.SimpleNamespace(transformer=model, vae_scale_factor_spatial=VAE_SCALE_SPATIAL)
    return CogVideoXPipeline._prepare_rotary_positional_embeddings(
        stand_in, h * VAE_SCALE_SPATIAL, w * VAE_SCALE_SPATIAL, frames, torch.device("cpu"))


def run_cogvideox(model, inputs):
    x = inputs["hidden_states"]
    rope = None
    if model.config.use_rotary_positional_embeddings:
        rope = rotary_emb(model, x.shape[1], x.shape[3], x.shape[4])
    y = model(hidden_states=x, encoder_hidden_states=inputs["encoder_hidden_states"], timestep=inputs["timestep"],
              ofs=inputs.get("ofs"), image_rotary_emb=rope).sample
    return {"out.sample": y}


def reinit_cogvideox_buffers(model, g, randn):
    """The learned position table (a persistent buffer, saved with the weights, of the image-to-video
    model) gets seeded values: its text rows too, which the sincos table leaves zero.  diffusers makes the
    buffer in float64 (get_3d_sincos_pos_embed's dtype) and from_pretrained keeps a checkpoint's buffer
    dtype; the released checkpoint stores it as its other weights, so it is stored here in float32."""
    pe = getattr(model, "patch_embed", None)
    if pe is not None and getattr(pe, "use_learned_positional_embeddings", False):
        pe.pos_embedding = randn(g, *pe.pos_embedding.shape)
