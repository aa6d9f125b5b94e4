"""Single-file checkpoints of the DiT transformers in their original layouts, for
tests/test_single_file_dit.c.

    python tools/make_fixtures_single_file_dit.py        # tests/fixtures/single_file_dit/
    python tools/make_fixtures_single_file_dit.py --full-size /tmp/sf   # sparse full-size files

For each case a tiny diffusers model (the configs of the model fixtures flux_dev, flux_schnell, sd3
and sd35 in make_fixtures_table.py) gets seeded, distinct weights (make_fixtures_single_file.reinit),
is stored in bfloat16 as the released files are, and is RE-KEYED by this script into the original
layout, the inverse of diffusers' loaders/single_file_utils.py conversion:
  - Flux (Black Forest Labs): img_in, txt_in, time_in / vector_in / guidance_in (dev only),
    double_blocks.N.{img,txt}_{mod.lin, attn.qkv (q, k, v stacked), attn.norm.{query,key}_norm.scale,
    attn.proj, mlp.0, mlp.2}, single_blocks.N.{modulation.lin, linear1 (q, k, v and the MLP input
    stacked), linear2, norm.*.scale}, final_layer.{linear, adaLN_modulation.1 with the halves in
    (shift, scale) order}.  flux-dev.safetensors has the keys at the top level as BFL ships them;
    flux-schnell.safetensors under model.diffusion_model. (ComfyUI's files).
  - SD3 / SD3.5 (Stability): model.diffusion_model.{pos_embed, x_embedder.proj, t_embedder.mlp,
    y_embedder.mlp, context_embedder, joint_blocks.N.{x_block, context_block}.{attn.qkv, attn.ln_q/ln_k,
    attn.proj, attn2.*, adaLN_modulation.1, mlp.fc1/fc2}, final_layer}; the last block's context
    adaLN and final_layer's in (shift, scale) order.  sd35.safetensors also carries a tiny VAE under
    first_stage_model.* (LDM names, no quant convs as SD3's).
The re-keying is PROVEN with diffusers itself: <Model>.from_single_file(file, config=<case dir>,
subfolder=...) must load every tensor equal to the model the file was written from.  diffusers'
Flux converter hard-codes the released width (inner_dim = 3072) to split linear1; for the tiny
width the proof runs that converter with the constant replaced by the config's width (nothing else
changed), and says so.  Then the model loaded from the file (upcast to float32) runs one forward on
the inputs of the model fixture's first run, recorded as io_forward.safetensors (inputs by their
forward names, out.sample) for diffc to match on the file.

Files per case in tests/fixtures/single_file_dit/: <case>.safetensors, <case>/transformer/config.json
(and <case>/vae/config.json), <case>/io_forward.safetensors.  And sd35-pipeline.safetensors: a whole
StableDiffusion3Pipeline but T5 in one file (make_sd3_pipeline), with its config folder sd35-pipeline/.
"""

import inspect
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from make_fixtures_dit import flux_inputs, sd3_inputs  # noqa: E402
from make_fixtures_single_file import reinit, vae_to_ldm  # noqa: E402
from make_fixtures_table import (FLUX_DEV_IN, FLUX_DEV_TINY, FLUX_SCHNELL_IN, FLUX_SCHNELL_TINY,  # noqa: E402
                                 SD3_IN, SD3_TINY, SD35_IN, SD35_TINY)

OUT = os.path.join(REPO, "tests", "fixtures", "single_file_dit")

# SD3's VAE at a tiny width: no quant convs (stable-diffusion-3-medium's vae config with 2 blocks of 8 and 16
# channels), and the tiny transformer's 4 latent channels where SD3 has 16
SD3_VAE_TINY = {
    "in_channels": 3, "out_channels": 3, "latent_channels": 4, "block_out_channels": [8, 16],
    "down_block_types": ["DownEncoderBlock2D"] * 2, "up_block_types": ["UpDecoderBlock2D"] * 2,
    "layers_per_block": 1, "norm_num_groups": 4, "sample_size": 32, "scaling_factor": 1.5305,
    "shift_factor": 0.0609, "use_quant_conv": False, "use_post_quant_conv": False,
}

# A whole SD3.5 pipeline in one file but T5 (Stability's "incl_clips" files): the transformer at the
# sd35 width with pooled_projection_dim the two CLIPs' projections, CLIP-L and CLIP-G with CLIP's
# vocabulary (the real tokenizer's ids) and hidden sizes 4 and 6, the tiny VAE
SD35_PIPE_TINY = dict(SD35_TINY, pooled_projection_dim=10)  # 4 + 6
# (diffusers tells the two CLIPs of an SD3 file apart by their width, so they differ here too; CLIP-L's
# text_projection is the identity: from_single_file puts the identity there whatever the file holds)
PIPE_TEXT_ENCODERS = {"text_encoder": dict(hidden=4, layers=2, heads=2, projection_dim=4, act="quick_gelu"),
                      "text_encoder_2": dict(hidden=6, layers=3, heads=2, projection_dim=6, act="gelu")}

CASES = [
    dict(name="flux-dev", kind="flux", config=FLUX_DEV_TINY, inputs=FLUX_DEV_IN, seed=501, prefix=""),
    dict(name="flux-schnell", kind="flux", config=FLUX_SCHNELL_TINY, inputs=FLUX_SCHNELL_IN, seed=502,
         prefix="model.diffusion_model."),
    dict(name="sd3", kind="sd3", config=SD3_TINY, inputs=SD3_IN, seed=503, prefix="model.diffusion_model."),
    dict(name="sd35", kind="sd3", config=SD35_TINY, inputs=SD35_IN, seed=504, prefix="model.diffusion_model.",
         vae=SD3_VAE_TINY),
]


def swap_halves(t):
    a, b = t.chunk(2, dim=0)
    return torch.cat([b, a], dim=0).contiguous()


# ---- Flux: diffusers -> Black Forest Labs ------------------------------------------------------------

FLUX_TOP = {"x_embedder": "img_in", "context_embedder": "txt_in",
            "time_text_embed.timestep_embedder.linear_1": "time_in.in_layer",
            "time_text_embed.timestep_embedder.linear_2": "time_in.out_layer",
            "time_text_embed.text_embedder.linear_1": "vector_in.in_layer",
            "time_text_embed.text_embedder.linear_2": "vector_in.out_layer",
            "time_text_embed.guidance_embedder.linear_1": "guidance_in.in_layer",
            "time_text_embed.guidance_embedder.linear_2": "guidance_in.out_layer",
            "proj_out": "final_layer.linear"}
FLUX_DOUBLE = {"norm1.linear": "img_mod.lin", "norm1_context.linear": "txt_mod.lin",
               "attn.to_out.0": "img_attn.proj", "attn.to_add_out": "txt_attn.proj",
               "ff.net.0.proj": "img_mlp.0", "ff.net.2": "img_mlp.2",
               "ff_context.net.0.proj": "txt_mlp.0", "ff_context.net.2": "txt_mlp.2"}
FLUX_DOUBLE_NORMS = {"attn.norm_q.weight": "img_attn.norm.query_norm.scale",
                     "attn.norm_k.weight": "img_attn.norm.key_norm.scale",
                     "attn.norm_added_q.weight": "txt_attn.norm.query_norm.scale",
                     "attn.norm_added_k.weight": "txt_attn.norm.key_norm.scale"}
FLUX_SINGLE = {"norm.linear": "modulation.lin", "proj_out": "linear2"}
FLUX_SINGLE_NORMS = {"attn.norm_q.weight": "norm.query_norm.scale", "attn.norm_k.weight": "norm.key_norm.scale"}


def rename_module(key, table):
    for new, old in table.items():
        if key.startswith(new + "."):
            return old + key[len(new):]
    return None


def flux_to_bfl(sd, cfg):
    out = {}
    for leaf in ("weight", "bias"):
        out[f"final_layer.adaLN_modulation.1.{leaf}"] = swap_halves(sd.pop(f"norm_out.linear.{leaf}"))
    for i in range(cfg["num_layers"]):
        b = f"transformer_blocks.{i}."
        for leaf in ("weight", "bias"):
            out[f"double_blocks.{i}.img_attn.qkv.{leaf}"] = torch.cat(
                [sd.pop(f"{b}attn.to_{x}.{leaf}") for x in "qkv"])
            out[f"double_blocks.{i}.txt_attn.qkv.{leaf}"] = torch.cat(
                [sd.pop(f"{b}attn.add_{x}_proj.{leaf}") for x in "qkv"])
        for new, old in FLUX_DOUBLE_NORMS.items():
            out[f"double_blocks.{i}.{old}"] = sd.pop(b + new)
        for k in [k for k in sd if k.startswith(b)]:
            out[f"double_blocks.{i}." + rename_module(k[len(b):], FLUX_DOUBLE)] = sd.pop(k)
    for i in range(cfg["num_single_layers"]):
        b = f"single_transformer_blocks.{i}."
        for leaf in ("weight", "bias"):
            out[f"single_blocks.{i}.linear1.{leaf}"] = torch.cat(
                [sd.pop(f"{b}attn.to_{x}.{leaf}") for x in "qkv"] + [sd.pop(f"{b}proj_mlp.{leaf}")])
        for new, old in FLUX_SINGLE_NORMS.items():
            out[f"single_blocks.{i}.{old}"] = sd.pop(b + new)
        for k in [k for k in sd if k.startswith(b)]:
            out[f"single_blocks.{i}." + rename_module(k[len(b):], FLUX_SINGLE)] = sd.pop(k)
    for k in list(sd):
        out[rename_module(k, FLUX_TOP)] = sd.pop(k)
    return out


# ---- SD3: diffusers -> Stability's MMDiT ----------------------------------------------------------------

SD3_TOP = {"pos_embed.proj": "x_embedder.proj",
           "time_text_embed.timestep_embedder.linear_1": "t_embedder.mlp.0",
           "time_text_embed.timestep_embedder.linear_2": "t_embedder.mlp.2",
           "time_text_embed.text_embedder.linear_1": "y_embedder.mlp.0",
           "time_text_embed.text_embedder.linear_2": "y_embedder.mlp.2",
           "context_embedder": "context_embedder", "proj_out": "final_layer.linear"}
SD3_BLOCK = {"attn.norm_q": "x_block.attn.ln_q", "attn.norm_k": "x_block.attn.ln_k",
             "attn.to_out.0": "x_block.attn.proj", "attn2.norm_q": "x_block.attn2.ln_q",
             "attn2.norm_k": "x_block.attn2.ln_k", "attn2.to_out.0": "x_block.attn2.proj",
             "norm1.linear": "x_block.adaLN_modulation.1", "ff.net.0.proj": "x_block.mlp.fc1",
             "ff.net.2": "x_block.mlp.fc2",
             "attn.norm_added_q": "context_block.attn.ln_q", "attn.norm_added_k": "context_block.attn.ln_k",
             "attn.to_add_out": "context_block.attn.proj", "norm1_context.linear": "context_block.adaLN_modulation.1",
             "ff_context.net.0.proj": "context_block.mlp.fc1", "ff_context.net.2": "context_block.mlp.fc2"}


def sd3_to_stability(sd, cfg):
    out = {"pos_embed": sd.pop("pos_embed.pos_embed")}
    last = cfg["num_layers"] - 1
    for leaf in ("weight", "bias"):
        out[f"final_layer.adaLN_modulation.1.{leaf}"] = swap_halves(sd.pop(f"norm_out.linear.{leaf}"))
        ctx = f"transformer_blocks.{last}.norm1_context.linear.{leaf}"
        out[f"joint_blocks.{last}.context_block.adaLN_modulation.1.{leaf}"] = swap_halves(sd.pop(ctx))
    for i in range(cfg["num_layers"]):
        b = f"transformer_blocks.{i}."
        for leaf in ("weight", "bias"):
            out[f"joint_blocks.{i}.x_block.attn.qkv.{leaf}"] = torch.cat(
                [sd.pop(f"{b}attn.to_{x}.{leaf}") for x in "qkv"])
            out[f"joint_blocks.{i}.context_block.attn.qkv.{leaf}"] = torch.cat(
                [sd.pop(f"{b}attn.add_{x}_proj.{leaf}") for x in "qkv"])
            if f"{b}attn2.to_q.{leaf}" in sd:
                out[f"joint_blocks.{i}.x_block.attn2.qkv.{leaf}"] = torch.cat(
                    [sd.pop(f"{b}attn2.to_{x}.{leaf}") for x in "qkv"])
        for k in [k for k in sd if k.startswith(b)]:
            out[f"joint_blocks.{i}." + rename_module(k[len(b):], SD3_BLOCK)] = sd.pop(k)
    for k in list(sd):
        out[rename_module(k, SD3_TOP)] = sd.pop(k)
    return out


# ---- the proof ---------------------------------------------------------------------------------------


def flux_converter_at_width(width):
    """diffusers' convert_flux_transformer_checkpoint_to_diffusers with its hard-coded released width
    (inner_dim = 3072, used to split linear1) replaced by the tiny config's: the one change."""
    from diffusers.loaders import single_file_utils as sfu

    src = inspect.getsource(sfu.convert_flux_transformer_checkpoint_to_diffusers)
    if src.count("inner_dim = 3072") != 1:
        raise SystemExit("diffusers' Flux converter no longer sets inner_dim = 3072: revisit the proof")
    ns = dict(vars(sfu))
    exec(src.replace("inner_dim = 3072", f"inner_dim = {width}"), ns)
    return ns["convert_flux_transformer_checkpoint_to_diffusers"]


def load_single_file(case, path, cls, subfolder, dtype):
    from diffusers.loaders import single_file_model as sfm

    folder = os.path.join(OUT, case["name"])
    if case["kind"] != "flux" or subfolder != "transformer":
        return cls.from_single_file(path, config=folder, subfolder=subfolder, torch_dtype=dtype,
                                    local_files_only=True)
    cfg = case["config"]
    entry = sfm.SINGLE_FILE_LOADABLE_CLASSES["FluxTransformer2DModel"]
    saved = entry["checkpoint_mapping_fn"]
    entry["checkpoint_mapping_fn"] = flux_converter_at_width(cfg["num_attention_heads"] * cfg["attention_head_dim"])
    try:
        return cls.from_single_file(path, config=folder, subfolder=subfolder, torch_dtype=dtype,
                                    local_files_only=True)
    finally:
        entry["checkpoint_mapping_fn"] = saved


def prove(case, path, cls, subfolder, want):
    got = load_single_file(case, path, cls, subfolder, torch.bfloat16).state_dict()
    if sorted(got) != sorted(want):
        raise SystemExit(f"{case['name']}: {subfolder}: from_single_file has other tensors: "
                         f"{sorted(set(got) ^ set(want))[:5]}")
    for k, v in want.items():
        if got[k].shape != v.shape or got[k].is_meta or not torch.equal(got[k].to(v.dtype), v):
            raise SystemExit(f"{case['name']}: {subfolder}: {k} differs after from_single_file")
    print(f"{case['name']}: {subfolder}: from_single_file({os.path.relpath(path, REPO)}) loads all {len(want)} "
          f"tensors equal to the model written")


# ---- one case ----------------------------------------------------------------------------------------


def write_config(case, subfolder, cls, config):
    d = os.path.join(OUT, case["name"], subfolder)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(dict(config, _class_name=cls.__name__), f, indent=2, sort_keys=True)
        f.write("\n")


def make_case(case):
    import diffusers
    from safetensors.torch import save_file

    cls = diffusers.FluxTransformer2DModel if case["kind"] == "flux" else diffusers.SD3Transformer2DModel
    model = cls(**case["config"])
    reinit(model, case["seed"])
    model = model.to(torch.bfloat16)
    want = {k: v.clone() for k, v in model.state_dict().items()}
    write_config(case, "transformer", cls, case["config"])
    convert = flux_to_bfl if case["kind"] == "flux" else sd3_to_stability
    tensors = {case["prefix"] + k: v.contiguous() for k, v in convert(dict(want), case["config"]).items()}
    vae_want = None
    if case.get("vae"):
        vae = diffusers.AutoencoderKL(**case["vae"])
        reinit(vae, case["seed"] + 1000)
        vae = vae.to(torch.bfloat16)
        vae_want = {k: v.clone() for k, v in vae.state_dict().items()}
        write_config(case, "vae", diffusers.AutoencoderKL, case["vae"])
        tensors.update(vae_to_ldm(dict(vae_want), case["vae"]))
    path = os.path.join(OUT, case["name"] + ".safetensors")
    save_file(tensors, path)
    prove(case, path, cls, "transformer", want)
    if vae_want:
        prove(case, path, diffusers.AutoencoderKL, "vae", vae_want)
    record(case, path, cls)


def record(case, path, cls):
    from safetensors.torch import save_file

    model = load_single_file(case, path, cls, "transformer", torch.float32).eval()
    make = flux_inputs if case["kind"] == "flux" else sd3_inputs
    inputs = make(**case["inputs"])
    with torch.no_grad():
        out = model(**inputs).sample
    io = {k: v.contiguous() for k, v in inputs.items()}
    io["out.sample"] = out.contiguous()
    save_file(io, os.path.join(OUT, case["name"], "io_forward.safetensors"))
    print(f"{case['name']}: io_forward.safetensors: out.sample {list(out.shape)}")


# ---- a whole SD3 pipeline (no T5) ---------------------------------------------------------------------


def make_sd3_pipeline(name, seed):
    """<name>.safetensors: transformer, VAE, text_encoders.clip_l / clip_g.transformer.* in bfloat16;
    <name>/: the diffusers StableDiffusion3Pipeline folder of its configs (model_index.json with a null
    T5, the two CLIP tokenizers, the FlowMatch scheduler), no weights: --config for the file.  The proof:
    StableDiffusion3Pipeline.from_single_file(file, config=<name>/) has every tensor of every component
    equal to the pipeline written."""
    import diffusers
    from safetensors.torch import save_file
    from transformers import CLIPTextModelWithProjection, CLIPTokenizer

    from make_fixtures_single_file import CLIP_TOKENIZER, DATA, clip_config

    folder = os.path.join(OUT, name)
    parts = {"transformer": diffusers.SD3Transformer2DModel(**SD35_PIPE_TINY),
             "vae": diffusers.AutoencoderKL(**SD3_VAE_TINY)}
    for te, spec in PIPE_TEXT_ENCODERS.items():
        parts[te] = CLIPTextModelWithProjection(clip_config(**spec))
    for i, part in enumerate(sorted(parts)):
        reinit(parts[part], seed * 100 + i)
        parts[part] = parts[part].to(torch.bfloat16).eval()
    with torch.no_grad():
        parts["text_encoder"].text_projection.weight.copy_(torch.eye(4))
    want = {k: {n: v.clone() for n, v in m.state_dict().items()} for k, m in parts.items()}
    for tok, pad in (("tokenizer", "<|endoftext|>"), ("tokenizer_2", "!")):
        parts[tok] = CLIPTokenizer(os.path.join(CLIP_TOKENIZER, "vocab.json"),
                                   os.path.join(CLIP_TOKENIZER, "merges.txt"), pad_token=pad, model_max_length=77)
    sched = json.load(open(os.path.join(DATA, "single_file", "sd3.5-medium", "scheduler", "scheduler_config.json")))
    parts["scheduler"] = diffusers.FlowMatchEulerDiscreteScheduler.from_config(sched)
    pipe = diffusers.StableDiffusion3Pipeline(**parts, text_encoder_3=None, tokenizer_3=None)
    pipe.save_pretrained(folder)
    for root, _, files in os.walk(folder):  # the configs only: the weights are the single file's
        for f in files:
            if f.endswith(".safetensors"):
                os.remove(os.path.join(root, f))
    for tok in ("tokenizer", "tokenizer_2"):  # the bundled tokenizer_config.json; CLIP's BPE files once, in data/
        tok_dir = os.path.join(folder, tok)
        shutil.rmtree(tok_dir)
        os.makedirs(tok_dir)
        shutil.copyfile(os.path.join(DATA, "single_file", "sd3.5-medium", tok, "tokenizer_config.json"),
                        os.path.join(tok_dir, "tokenizer_config.json"))
        for f in ("vocab.json", "merges.txt"):
            os.symlink(os.path.relpath(os.path.join(CLIP_TOKENIZER, f), tok_dir), os.path.join(tok_dir, f))
    tensors = {"model.diffusion_model." + k: v.contiguous()
               for k, v in sd3_to_stability(dict(want["transformer"]), SD35_PIPE_TINY).items()}
    tensors.update(vae_to_ldm(dict(want["vae"]), SD3_VAE_TINY))
    for te, key in (("text_encoder", "clip_l"), ("text_encoder_2", "clip_g")):
        # the released names: transformers 5 saves CLIPTextModel* without "text_model."
        tensors.update({f"text_encoders.{key}.transformer." +
                        (k if k.startswith(("text_model.", "text_projection.")) else "text_model." + k): v.contiguous()
                        for k, v in want[te].items()})
    path = os.path.join(OUT, name + ".safetensors")
    save_file(tensors, path)
    got = diffusers.StableDiffusion3Pipeline.from_single_file(path, config=folder, torch_dtype=torch.bfloat16,
                                                               local_files_only=True, text_encoder_3=None,
                                                               tokenizer_3=None)
    n = 0
    for comp, sd in want.items():
        g = getattr(got, comp).state_dict()
        if sorted(g) != sorted(sd):
            raise SystemExit(f"{name}: {comp}: from_single_file has other tensors: {sorted(set(g) ^ set(sd))[:5]}")
        for k, v in sd.items():
            if g[k].is_meta or g[k].shape != v.shape or not torch.equal(g[k].to(v.dtype), v):
                raise SystemExit(f"{name}: {comp}: {k} differs after from_single_file")
        n += len(sd)
    print(f"{name}: StableDiffusion3Pipeline.from_single_file({os.path.relpath(path, REPO)}) loads all {n} tensors "
          f"of the transformer, VAE and two CLIPs equal to the pipeline written")


# ---- full-size key sets (--full-size DIR) -----------------------------------------------------------

def full_size_shapes(name):
    """name -> shape of the released checkpoint of a bundled family (data/single_file/<name>), as the
    original layout holds it: the bundled config's model on the meta device, re-keyed."""
    import diffusers

    def meta(cls, component):
        with open(os.path.join(REPO, "data", "single_file", name, component, "config.json")) as f:
            cfg = json.load(f)
        with torch.device("meta"):
            return cls.from_config(cfg), cfg

    if name.startswith("flux"):
        model, cfg = meta(diffusers.FluxTransformer2DModel, "transformer")
        return {k: tuple(v.shape) for k, v in flux_to_bfl(dict(model.state_dict()), cfg).items()}
    model, cfg = meta(diffusers.SD3Transformer2DModel, "transformer")
    sd = {"model.diffusion_model." + k: v for k, v in sd3_to_stability(dict(model.state_dict()), cfg).items()}
    vae, vae_cfg = meta(diffusers.AutoencoderKL, "vae")
    sd.update(vae_to_ldm(dict(vae.state_dict()), vae_cfg))
    return {k: tuple(v.shape) for k, v in sd.items()}


def write_sparse_bf16(path, shapes):
    """A valid bfloat16 safetensors file of zeros that takes no disk space: header, then a hole."""
    import math
    import struct

    header, off = {}, 0
    for k in sorted(shapes):
        n = math.prod(shapes[k]) * 2
        header[k] = {"dtype": "BF16", "shape": list(shapes[k]), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + off)
    return off


FULL_SIZE = {"flux-dev": "flux1-dev", "flux-schnell": "flux1-schnell", "sd3-medium": "sd3_medium",
             "sd3.5-medium": "sd3.5_medium", "sd3.5-large": "sd3.5_large"}


def write_full_size(out):
    """Files with the released models' key sets and shapes (zeros, sparse), named as released, to open
    with the bundled defaults: `diffc <out>/flux1-dev.safetensors -o flux.dplan`."""
    os.makedirs(out, exist_ok=True)
    for family, file in FULL_SIZE.items():
        shapes = full_size_shapes(family)
        n = write_sparse_bf16(os.path.join(out, file + ".safetensors"), shapes)
        print(f"{out}/{file}.safetensors: {len(shapes)} tensors, {n / 2**30:.2f} GiB apparent")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--full-size":
        write_full_size(sys.argv[2])
        return
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    os.makedirs(OUT)
    torch.manual_seed(0)
    for case in CASES:
        make_case(case)
    make_sd3_pipeline("sd35-pipeline", 505)


if __name__ == "__main__":
    main()
