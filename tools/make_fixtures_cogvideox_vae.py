"""make_fixtures' AutoencoderKLCogVideoX fixture (tools/make_fixtures_table.py appends it to FIXTURES): a tiny
causal-3D VAE config and its runs.  diffusers' decode / encode batch frames (2 latent frames, 8 sample frames a
chunk, the remainder in the first, the conv caches chained); the "cogvideox_whole" runs call the decoder on
the whole latent instead (post_quant_conv first when there is one), which is what diffc's
--no-vae-frame-batching compiles.  Plain data but for run_cogvideox_whole, as the table.
"""

# 4 blocks: blocks 0 and 1 compress time (temporal_compression_ratio 4), block 2 only space, block 3 neither;
# spatial factor 8.  sample_height/width give diffusers' default tiles (half of them): 48x40 px, 6x5 latents,
# strides 5 and 4 latents, blends over 8 px, crops of 40x32 px (consistent with the strides).
COGVIDEOX_VAE_TINY = {
    "in_channels": 3,
    "out_channels": 3,
    "down_block_types": ["CogVideoXDownBlock3D"] * 4,
    "up_block_types": ["CogVideoXUpBlock3D"] * 4,
    "block_out_channels": [4, 8, 8, 8],
    "latent_channels": 4,
    "layers_per_block": 1,
    "norm_num_groups": 2,
    "temporal_compression_ratio": 4,
    "sample_height": 96,
    "sample_width": 80,
}


def _run(entry, io, seed, name, shape, kind="vae", tiling=False, slicing=False, diffc_options=None):
    return dict(entry=entry, io=io, kind=kind, inputs=("image", dict(seed=seed, name=name, shape=shape)),
                tolerance=1e-4, component=None, variant=None, tiling=tiling, slicing=slicing,
                **({"diffc_options": diffc_options} if diffc_options else {}))


COGVIDEOX_VAE_FIXTURES = [
    dict(name="cogvideox_vae", cls="AutoencoderKLCogVideoX", config=COGVIDEOX_VAE_TINY, seed=40,
         description="A tiny AutoencoderKLCogVideoX: block_out_channels [4, 8, 8, 8], layers_per_block 1, "
                     "norm_num_groups 2, latent_channels 4, temporal_compression_ratio 4, sample 96x80 (tiles of "
                     "48x40 px). decode: z 1x4x5x2x3 in chunks of 3 and 2 latent frames -> 17 frames of 16x24; "
                     "decode_whole: the same z through vae.decoder in one pass (--no-vae-frame-batching); "
                     "decode_tiled: z 1x4x1x7x6 -> 2x2 tiles of up to 6x5 latents, blended over 8 px, cropped to 40x32 -> "
                     "56x48; encode: sample 1x3x17x16x24 in chunks of 9 and 8 frames -> 5 latent frames; "
                     "encode_tiled: sample 1x3x3x56x48 -> 2x2 tiles of up to 48x40 px, blended over 1 latent; "
                     "decode_sliced: z 2x4x2x2x3 one sample at a "
                     "time -> 8 frames (the shapes of decode's second batch: few kernels of its own).",
         runs=[_run("decode", "io_decode.safetensors", 400, "z", (1, 4, 5, 2, 3)),
               _run("decode", "io_decode_whole.safetensors", 400, "z", (1, 4, 5, 2, 3), kind="cogvideox_whole",
                    diffc_options=["--no-vae-frame-batching"]),
               _run("decode", "io_decode_tiled.safetensors", 401, "z", (1, 4, 1, 7, 6), tiling=True),
               _run("encode", "io_encode.safetensors", 402, "sample", (1, 3, 17, 16, 24)),
               _run("encode", "io_encode_tiled.safetensors", 404, "sample", (1, 3, 3, 56, 48), tiling=True),
               _run("decode", "io_decode_sliced.safetensors", 403, "z", (2, 4, 2, 2, 3), slicing=True)]),
]


def run_cogvideox_whole(model, entry, inputs):
    """The coder on all frames at once, without diffusers' frame batching."""
    import torch

    if entry == "decode":
        z = inputs["z"]
        if model.post_quant_conv is not None:
            z = model.post_quant_conv(z)
        return {"out.sample": model.decoder(z)[0]}
    h = model.encoder(inputs["sample"])[0]
    if model.quant_conv is not None:
        h = model.quant_conv(h)
    mean, logvar = torch.chunk(h, 2, dim=1)
    return {"out.mean": mean, "out.logvar": torch.clamp(logvar, -30.0, 20.0)}
