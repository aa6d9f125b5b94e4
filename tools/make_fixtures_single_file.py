"""Single-file checkpoints in the original CompVis / Stability layout, and the bundled defaults
diffc reads them with.

    python tools/make_fixtures_single_file.py            # data/ tokenizer files, then the fixtures
    python tools/make_fixtures_single_file.py --data-only
    python tools/make_fixtures_single_file.py --data-only --full-size /tmp/sf   # + sparse full-size files

1. data/: the real CLIP tokenizer files once (data/clip_tokenizer/vocab.json, merges.txt, from
   make_fixtures_clip_vocab.write_clip_tokenizer), each family's tokenizer_config.json (pad
   "<|endoftext|>" for CLIP-L, "!" for the OpenCLIP tokenizers), and a check that every bundled
   component config (data/single_file/<family>/*/config.json, written by hand from the released
   repositories) builds the model with the released parameter count.

2. tests/fixtures/single_file/: for each family (sd1, sd2, sdxl) a tiny diffusers pipeline folder
   <family>/ (small widths; text encoders with CLIP's 49408-token vocabulary and a tiny hidden size;
   float16 weights, as most community checkpoints ship) and <family>.safetensors, the same weights
   re-keyed into the original layout by this script (the reverse of diffusers' conversion in
   loaders/single_file_utils.py), plus what real checkpoints carry beside the model: EMA copies,
   the DDPM schedule buffers, position_ids, OpenCLIP's logit_scale and, for SD2, the last OpenCLIP
   block and text_projection that diffusers drops.  The re-keying is proven with diffusers itself:
   <Pipeline>.from_single_file(file, config=<folder>, local_files_only=True) must load every tensor
   equal to <Pipeline>.from_pretrained(<folder>).

The folders' tokenizer files vocab.json and merges.txt are relative symlinks to data/clip_tokenizer
(1.5 MB, stored once).  The text encoders are saved with transformers' released key names
("text_model.embeddings...", as the SD repositories ship them and as diffusers' single-file
conversion produces them); transformers 5 itself would save CLIPTextModel without "text_model.".
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile

import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

DATA = os.path.join(REPO, "data")
CLIP_TOKENIZER = os.path.join(DATA, "clip_tokenizer")
FIXTURES = os.path.join(REPO, "tests", "fixtures", "single_file")

# Released parameter counts of the bundled configs' models (diffusers / transformers, fp32).
RELEASED_PARAMS = {
    ("sd1", "unet"): 859_520_964,
    ("sd1", "vae"): 83_653_863,
    ("sd1", "text_encoder"): 123_060_480,
    ("sd2", "unet"): 865_910_724,
    ("sd2", "vae"): 83_653_863,
    ("sd2", "text_encoder"): 340_387_840,
    ("sdxl", "unet"): 2_567_463_684,
    ("sdxl", "vae"): 83_653_863,
    ("sdxl", "text_encoder"): 123_060_480,
    ("sdxl", "text_encoder_2"): 694_659_840,
}
# Each tokenizer folder of each family and its pad token.
TOKENIZERS = {
    ("sd1", "tokenizer"): "<|endoftext|>",
    ("sd2", "tokenizer"): "!",
    ("sdxl", "tokenizer"): "<|endoftext|>",
    ("sdxl", "tokenizer_2"): "!",
}


# --------------------------------------------------------------------------------------
# data/
# --------------------------------------------------------------------------------------


def write_data():
    from make_fixtures_clip_vocab import write_clip_tokenizer

    os.makedirs(CLIP_TOKENIZER, exist_ok=True)
    for (family, name), pad in sorted(TOKENIZERS.items()):
        with tempfile.TemporaryDirectory() as tmp:
            tok = write_clip_tokenizer(tmp, pad_token=pad)
            assert tok.pad_token == pad and len(tok) == 49408
            for f in ("vocab.json", "merges.txt"):
                shutil.copyfile(os.path.join(tmp, f), os.path.join(CLIP_TOKENIZER, f))
            dst = os.path.join(DATA, "single_file", family, name)
            os.makedirs(dst, exist_ok=True)
            shutil.copyfile(os.path.join(tmp, "tokenizer_config.json"), os.path.join(dst, "tokenizer_config.json"))
    check_bundled_tokenizers()
    check_bundled_configs()


def check_bundled_tokenizers():
    """Each family's tokenizer folder plus the shared vocabulary loads in transformers with its pad."""
    from transformers import CLIPTokenizer

    for (family, name), pad in sorted(TOKENIZERS.items()):
        with tempfile.TemporaryDirectory() as tmp:
            for f in ("vocab.json", "merges.txt"):
                shutil.copyfile(os.path.join(CLIP_TOKENIZER, f), os.path.join(tmp, f))
            shutil.copyfile(os.path.join(DATA, "single_file", family, name, "tokenizer_config.json"),
                            os.path.join(tmp, "tokenizer_config.json"))
            tok = CLIPTokenizer.from_pretrained(tmp)
            ids = tok("a photo of a cat", padding="max_length", max_length=77).input_ids
            if tok.pad_token != pad or ids[0] != 49406 or ids[6] != 49407 or ids[-1] != tok.pad_token_id:
                raise SystemExit(f"data/single_file/{family}/{name}: tokenizer does not load as expected")


def count_params(family, component):
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    path = os.path.join(DATA, "single_file", family, component, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    with torch.device("meta"):
        if component == "unet":
            model = UNet2DConditionModel.from_config(cfg)
        elif component == "vae":
            model = AutoencoderKL.from_config(cfg)
        else:
            cls = CLIPTextModelWithProjection if cfg["architectures"] == ["CLIPTextModelWithProjection"] else CLIPTextModel
            model = cls(CLIPTextConfig.from_dict(cfg))
    return sum(p.numel() for p in model.parameters())


def check_bundled_configs():
    for (family, component), want in sorted(RELEASED_PARAMS.items()):
        got = count_params(family, component)
        if got != want:
            raise SystemExit(f"data/single_file/{family}/{component}/config.json: {got} parameters, "
                             f"the released model has {want}")
    print(f"bundled configs: {len(RELEASED_PARAMS)} components with their released parameter counts")


# --------------------------------------------------------------------------------------
# Tiny pipelines
# --------------------------------------------------------------------------------------


def reinit(model, seed):
    """Every parameter distinct and seeded: conv/linear/embedding weights N(0, 1/fan_in), biases
    0.05 N(0,1), norm weights 1 + 0.1 N(0,1), norm biases 0.1 N(0,1).  Distinct values everywhere
    make a tensor mapped to the wrong name show up as different bytes."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            leaf = name.rsplit(".", 1)[-1]
            is_norm = "norm" in name or "ln_" in name
            if p.ndim >= 2:
                p.copy_(r / math.sqrt(p[0].numel()))
            elif leaf == "weight" and is_norm:
                p.copy_(1.0 + 0.1 * r)
            elif leaf == "bias" and is_norm:
                p.copy_(0.1 * r)
            else:
                p.copy_(0.05 * r)


def clip_config(hidden, layers, heads, projection_dim, act):
    from transformers import CLIPTextConfig

    return CLIPTextConfig(vocab_size=49408, hidden_size=hidden, intermediate_size=2 * hidden + 3,
                          num_hidden_layers=layers, num_attention_heads=heads, max_position_embeddings=77,
                          projection_dim=projection_dim, hidden_act=act)


VAE_TINY = dict(block_out_channels=[4, 8, 8], down_block_types=["DownEncoderBlock2D"] * 3,
                up_block_types=["UpDecoderBlock2D"] * 3, layers_per_block=1, norm_num_groups=4,
                latent_channels=4, sample_size=32)

FAMILIES = {
    "sd1": dict(
        unet=dict(block_out_channels=[8, 8, 16], layers_per_block=2, norm_num_groups=4, attention_head_dim=2,
                  down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
                  up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
                  cross_attention_dim=4, sample_size=8),
        text_encoder=dict(hidden=4, layers=2, heads=2, projection_dim=4, act="quick_gelu"),
        scheduler="PNDMScheduler"),
    "sd2": dict(
        unet=dict(block_out_channels=[8, 16], layers_per_block=1, norm_num_groups=4, attention_head_dim=[2, 4],
                  down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"],
                  up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"], use_linear_projection=True,
                  upcast_attention=True, cross_attention_dim=4, sample_size=12),
        # OpenCLIP under cond_stage_model.model.; the checkpoint holds one block more (penultimate)
        text_encoder=dict(hidden=4, layers=2, heads=2, projection_dim=4, act="gelu"),
        scheduler="DDIMScheduler"),
    "sdxl": dict(
        unet=dict(block_out_channels=[8, 8], layers_per_block=2, norm_num_groups=4, attention_head_dim=[2, 4],
                  down_block_types=["DownBlock2D", "CrossAttnDownBlock2D"],
                  up_block_types=["CrossAttnUpBlock2D", "UpBlock2D"], transformer_layers_per_block=[1, 2],
                  use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=4,
                  projection_class_embeddings_input_dim=5 + 6 * 4, cross_attention_dim=4 + 6, sample_size=16),
        text_encoder=dict(hidden=4, layers=2, heads=2, projection_dim=4, act="quick_gelu"),
        # projection_dim != hidden: the transposed text_projection shows in its shape
        text_encoder_2=dict(hidden=6, layers=3, heads=2, projection_dim=5, act="gelu"),
        scheduler="EulerDiscreteScheduler"),
}


def build_pipeline(family, seed):
    import diffusers
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    spec = FAMILIES[family]
    unet = UNet2DConditionModel(**spec["unet"])
    vae = AutoencoderKL(**VAE_TINY)
    te = CLIPTextModel(clip_config(**spec["text_encoder"]))
    parts = dict(unet=unet, vae=vae, text_encoder=te)
    if "text_encoder_2" in spec:
        parts["text_encoder_2"] = CLIPTextModelWithProjection(clip_config(**spec["text_encoder_2"]))
    for i, name in enumerate(sorted(parts)):
        reinit(parts[name], seed * 100 + i)
        parts[name].to(torch.float16).eval()
    with tempfile.TemporaryDirectory() as tmp:
        for f in ("vocab.json", "merges.txt"):
            shutil.copyfile(os.path.join(CLIP_TOKENIZER, f), os.path.join(tmp, f))
        for (fam, name), pad in TOKENIZERS.items():
            if fam == family:
                parts[name] = CLIPTokenizer(os.path.join(tmp, "vocab.json"), os.path.join(tmp, "merges.txt"),
                                            pad_token=pad, model_max_length=77)
    sched_cfg = json.load(open(os.path.join(DATA, "single_file", family, "scheduler", "scheduler_config.json")))
    parts["scheduler"] = getattr(diffusers, spec["scheduler"]).from_config(sched_cfg)
    if family == "sdxl":
        return diffusers.StableDiffusionXLPipeline(**parts)
    return diffusers.StableDiffusionPipeline(**parts, safety_checker=None, feature_extractor=None,
                                             requires_safety_checker=False)


def save_folder(pipe, family, folder):
    """save_pretrained, then the released layout: text encoders keyed "text_model.*", tokenizers as
    tokenizer_config.json (the bundled family's) plus symlinks to data/clip_tokenizer."""
    from safetensors.torch import load_file, save_file

    if os.path.exists(folder):
        shutil.rmtree(folder)
    pipe.save_pretrained(folder)
    for te in ("text_encoder", "text_encoder_2"):
        path = os.path.join(folder, te, "model.safetensors")
        if not os.path.exists(path):
            continue
        sd = load_file(path)
        sd = {k if k.startswith(("text_model.", "text_projection.")) else "text_model." + k: v for k, v in sd.items()}
        save_file(sd, path, metadata={"format": "pt"})
    for (fam, name) in TOKENIZERS:
        if fam != family:
            continue
        tok_dir = os.path.join(folder, name)
        shutil.rmtree(tok_dir)
        os.makedirs(tok_dir)
        shutil.copyfile(os.path.join(DATA, "single_file", family, name, "tokenizer_config.json"),
                        os.path.join(tok_dir, "tokenizer_config.json"))
        for f in ("vocab.json", "merges.txt"):
            os.symlink(os.path.relpath(os.path.join(CLIP_TOKENIZER, f), tok_dir), os.path.join(tok_dir, f))


# --------------------------------------------------------------------------------------
# diffusers -> original layout (the reverse of loaders/single_file_utils.py)
# --------------------------------------------------------------------------------------

UNET_RESNET = [("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("norm2", "out_layers.0"),
               ("conv2", "out_layers.3"), ("time_emb_proj", "emb_layers.1"), ("conv_shortcut", "skip_connection")]
UNET_TOP = {"time_embedding.linear_1": "time_embed.0", "time_embedding.linear_2": "time_embed.2",
            "conv_in": "input_blocks.0.0", "conv_norm_out": "out.0", "conv_out": "out.2",
            "add_embedding.linear_1": "label_emb.0.0", "add_embedding.linear_2": "label_emb.0.2"}


def resnet_rest(rest, table):
    for new, old in table:
        if rest.startswith(new + "."):
            return old + rest[len(new):]
    raise SystemExit(f"unexpected resnet tensor {rest}")


def unet_key_to_ldm(key, cfg):
    per = cfg["layers_per_block"] + 1
    for new, old in UNET_TOP.items():
        if key.startswith(new + "."):
            return old + key[len(new):]
    p = key.split(".")
    if p[0] == "down_blocks":
        b, kind = int(p[1]), p[2]
        if kind == "downsamplers":  # down_blocks.B.downsamplers.0.conv.X
            return f"input_blocks.{1 + b * per + per - 1}.0.op." + ".".join(p[5:])
        i = 1 + b * per + int(p[3])
        rest = ".".join(p[4:])
        return f"input_blocks.{i}.0." + resnet_rest(rest, UNET_RESNET) if kind == "resnets" else f"input_blocks.{i}.1.{rest}"
    if p[0] == "mid_block":
        rest = ".".join(p[3:])
        if p[1] == "attentions":
            return f"middle_block.1.{rest}"
        return f"middle_block.{2 * int(p[2])}." + resnet_rest(rest, UNET_RESNET)
    if p[0] == "up_blocks":
        b, kind = int(p[1]), p[2]
        if kind == "upsamplers":  # after the last resnet (and its attention, if the block has one)
            slot = 2 if "CrossAttn" in cfg["up_block_types"][b] else 1
            return f"output_blocks.{b * per + per - 1}.{slot}.conv." + ".".join(p[5:])
        i = b * per + int(p[3])
        rest = ".".join(p[4:])
        return f"output_blocks.{i}.0." + resnet_rest(rest, UNET_RESNET) if kind == "resnets" else f"output_blocks.{i}.1.{rest}"
    raise SystemExit(f"unexpected UNet tensor {key}")


VAE_ATTN = [("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out")]


def vae_key_to_ldm(key, cfg):
    n_up = len(cfg["up_block_types"])
    for side in ("encoder", "decoder"):
        if key == f"{side}.conv_norm_out.weight" or key == f"{side}.conv_norm_out.bias":
            return f"{side}.norm_out." + key.rsplit(".", 1)[1]
    p = key.split(".")
    if p[1] == "down_blocks":  # encoder.down_blocks.I.{resnets.J,downsamplers.0}.X
        if p[3] == "downsamplers":
            return f"encoder.down.{p[2]}.downsample." + ".".join(p[5:])
        return f"encoder.down.{p[2]}.block.{p[4]}." + ".".join(p[5:]).replace("conv_shortcut", "nin_shortcut")
    if p[1] == "up_blocks":  # decoder.up_blocks.I -> decoder.up.(n-1-I)
        b = n_up - 1 - int(p[2])
        if p[3] == "upsamplers":
            return f"decoder.up.{b}.upsample." + ".".join(p[5:])
        return f"decoder.up.{b}.block.{p[4]}." + ".".join(p[5:]).replace("conv_shortcut", "nin_shortcut")
    if p[1] == "mid_block":
        rest = ".".join(p[4:])
        if p[2] == "resnets":
            return f"{p[0]}.mid.block_{int(p[3]) + 1}.{rest}".replace("conv_shortcut", "nin_shortcut")
        return f"{p[0]}.mid.attn_1." + resnet_rest(rest, VAE_ATTN)
    return key  # conv_in, conv_out, quant_conv, post_quant_conv keep their names


def unet_to_ldm(sd, cfg):
    return {"model.diffusion_model." + unet_key_to_ldm(k, cfg): v for k, v in sd.items()}


def vae_to_ldm(sd, cfg):
    out = {}
    for k, v in sd.items():
        nk = vae_key_to_ldm(k, cfg)
        if ".mid.attn_1." in nk and nk.endswith(".weight") and v.ndim == 2:
            v = v[:, :, None, None]  # LDM's attention projections are 1x1 convolutions
        out["first_stage_model." + nk] = v.contiguous()
    return out


def clip_to_ldm(sd, prefix):
    out = {prefix + k: v for k, v in sd.items()}
    out[prefix + "text_model.embeddings.position_ids"] = torch.arange(77, dtype=torch.int64)[None]
    return out


OPENCLIP_LAYER = [("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"), ("mlp.fc1", "mlp.c_fc"),
                  ("mlp.fc2", "mlp.c_proj"), ("self_attn.out_proj", "attn.out_proj")]


def openclip_to_ldm(sd, prefix, layers):
    out = {}
    top = {"text_model.embeddings.token_embedding.weight": "token_embedding.weight",
           "text_model.embeddings.position_embedding.weight": "positional_embedding",
           "text_model.final_layer_norm.weight": "ln_final.weight",
           "text_model.final_layer_norm.bias": "ln_final.bias"}
    for k, v in top.items():
        out[prefix + v] = sd[k]
    if "text_projection.weight" in sd:
        out[prefix + "text_projection"] = sd["text_projection.weight"].t().contiguous()  # stored [D, P]
    for n in range(layers):
        src = f"text_model.encoder.layers.{n}."
        dst = f"{prefix}transformer.resblocks.{n}."
        for new, old in OPENCLIP_LAYER:
            for leaf in ("weight", "bias"):
                out[dst + old + "." + leaf] = sd[src + new + "." + leaf]
        for leaf in ("weight", "bias"):
            out[dst + "attn.in_proj_" + leaf] = torch.cat([sd[src + f"self_attn.{q}_proj.{leaf}"] for q in "qkv"])
    out[prefix + "logit_scale"] = torch.tensor(math.log(1 / 0.07), dtype=torch.float16)
    return out


SCHEDULE_BUFFERS = ["betas", "alphas_cumprod", "alphas_cumprod_prev", "sqrt_alphas_cumprod",
                    "sqrt_one_minus_alphas_cumprod", "log_one_minus_alphas_cumprod", "sqrt_recip_alphas_cumprod",
                    "sqrt_recipm1_alphas_cumprod", "posterior_variance", "posterior_log_variance_clipped",
                    "posterior_mean_coef1", "posterior_mean_coef2"]


def ldm_extras(unet_ldm, g):
    """What a CompVis training checkpoint carries beside the model: the DDPM schedule (float32),
    the EMA copy of the UNet under flattened names, and its counters."""
    betas = torch.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=torch.float64) ** 2
    out = {name: (betas * (i + 1)).to(torch.float32) for i, name in enumerate(SCHEDULE_BUFFERS)}
    for k, v in unet_ldm.items():
        out["model_ema." + "".join(k.split(".")[1:])] = (v.float() + 0.01 * torch.randn(v.shape, generator=g)).to(v.dtype)
    out["model_ema.decay"] = torch.tensor(0.9999, dtype=torch.float32)
    out["model_ema.num_updates"] = torch.tensor(1000, dtype=torch.int32)
    return out


def to_ldm(pipe, family, seed):
    g = torch.Generator().manual_seed(seed)
    sd = unet_to_ldm(pipe.unet.state_dict(), pipe.unet.config)
    sd.update(vae_to_ldm(pipe.vae.state_dict(), pipe.vae.config))
    te = {k if k.startswith("text_model.") else "text_model." + k: v for k, v in pipe.text_encoder.state_dict().items()}
    if family == "sd1":
        sd.update(ldm_extras(sd, g))
        sd.update(clip_to_ldm(te, "cond_stage_model.transformer."))
    elif family == "sd2":
        # OpenCLIP as SD2 trained it: one block more than diffusers runs (the penultimate layer's
        # output is used), and a text_projection CLIPTextModel has no place for.
        layers = pipe.text_encoder.config.num_hidden_layers
        extra = extra_clip_layer(pipe.text_encoder.config, layers, seed)
        sd.update(openclip_to_ldm({**te, **extra}, "cond_stage_model.model.", layers + 1))
        d, p = pipe.text_encoder.config.hidden_size, pipe.text_encoder.config.projection_dim
        sd["cond_stage_model.model.text_projection"] = torch.randn(d, p, generator=g).to(torch.float16)
        sd["logvar"] = torch.zeros(1000, dtype=torch.float32)
    else:
        sd.update(clip_to_ldm(te, "conditioner.embedders.0.transformer."))
        sd.update(openclip_to_ldm(pipe.text_encoder_2.state_dict(), "conditioner.embedders.1.model.",
                                  pipe.text_encoder_2.config.num_hidden_layers))
    return {k: v.contiguous() for k, v in sd.items()}


def extra_clip_layer(config, index, seed):
    """The weights of one more encoder layer (diffusers' names), seeded."""
    from transformers import CLIPTextModel

    cfg = config.to_dict()
    cfg["num_hidden_layers"] = index + 1
    m = CLIPTextModel(type(config).from_dict(cfg))
    reinit(m, seed * 100 + 99)
    sd = {k if k.startswith("text_model.") else "text_model." + k: v for k, v in m.state_dict().items()}
    pre = f"text_model.encoder.layers.{index}."
    return {k: v.to(torch.float16) for k, v in sd.items() if k.startswith(pre)}


# --------------------------------------------------------------------------------------
# The proof: diffusers' own single-file loader reads the re-keyed file as the folder
# --------------------------------------------------------------------------------------


def prove(family, path, folder):
    import diffusers

    cls = diffusers.StableDiffusionXLPipeline if family == "sdxl" else diffusers.StableDiffusionPipeline
    ref = cls.from_pretrained(folder, torch_dtype=torch.float32, local_files_only=True)
    got = cls.from_single_file(path, config=folder, local_files_only=True, torch_dtype=torch.float32)
    n = 0
    for comp in ("unet", "vae", "text_encoder", "text_encoder_2"):
        if getattr(ref, comp, None) is None:
            continue
        a, b = ref.components[comp].state_dict(), got.components[comp].state_dict()
        if sorted(a) != sorted(b):
            raise SystemExit(f"{family}: {comp}: from_single_file has other tensors: "
                             f"{sorted(set(a) ^ set(b))[:5]}")
        for k in a:
            if a[k].shape != b[k].shape or b[k].is_meta or not torch.equal(a[k], b[k]):
                raise SystemExit(f"{family}: {comp}: {k} differs between from_single_file and from_pretrained")
        n += len(a)
    if type(got.scheduler) is not type(ref.scheduler) or dict(got.scheduler.config) != dict(ref.scheduler.config):
        raise SystemExit(f"{family}: the scheduler differs between from_single_file and from_pretrained")
    print(f"{family}: from_single_file({os.path.relpath(path, REPO)}) = from_pretrained(folder): {n} tensors equal")


def make_fixture(family, seed):
    from safetensors.torch import save_file

    pipe = build_pipeline(family, seed)
    folder = os.path.join(FIXTURES, family)
    save_folder(pipe, family, folder)
    path = os.path.join(FIXTURES, family + ".safetensors")
    save_file(to_ldm(pipe, family, seed), path)
    prove(family, path, folder)


# --------------------------------------------------------------------------------------
# Full-size key sets (--full-size DIR): the released models' layout, as sparse files
# --------------------------------------------------------------------------------------


def meta_model(family, component):
    """The bundled config's model on the meta device (shapes, no memory); SD2's text encoder with
    the one block more its checkpoints hold."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    with open(os.path.join(DATA, "single_file", family, component, "config.json")) as f:
        cfg = json.load(f)
    with torch.device("meta"):
        if component == "unet":
            return UNet2DConditionModel.from_config(cfg)
        if component == "vae":
            return AutoencoderKL.from_config(cfg)
        c = CLIPTextConfig.from_dict(cfg)
        c.num_hidden_layers += family == "sd2"
        cls = CLIPTextModelWithProjection if cfg["architectures"] == ["CLIPTextModelWithProjection"] else CLIPTextModel
        return cls(c)


def full_size_shapes(family):
    """name -> (shape, safetensors dtype) of a released checkpoint of the family, float16."""
    unet, vae = meta_model(family, "unet"), meta_model(family, "vae")
    sd = unet_to_ldm(unet.state_dict(), unet.config)
    sd.update(vae_to_ldm(vae.state_dict(), vae.config))
    te = meta_model(family, "text_encoder")
    te_sd = {k if k.startswith("text_model.") else "text_model." + k: v for k, v in te.state_dict().items()}
    if family == "sd1":
        sd.update(clip_to_ldm(te_sd, "cond_stage_model.transformer."))
    elif family == "sd2":
        sd.update(openclip_to_ldm(te_sd, "cond_stage_model.model.", te.config.num_hidden_layers))
        d = te.config.hidden_size
        sd["cond_stage_model.model.text_projection"] = torch.empty(d, d, device="meta")
    else:
        sd.update(clip_to_ldm(te_sd, "conditioner.embedders.0.transformer."))
        te2 = meta_model(family, "text_encoder_2")
        sd.update(openclip_to_ldm(te2.state_dict(), "conditioner.embedders.1.model.", te2.config.num_hidden_layers))
    return {k: (tuple(v.shape), "I64" if v.dtype == torch.int64 else "F16") for k, v in sd.items()}


def write_sparse(path, shapes):
    """A valid safetensors file of zeros that takes no disk space: header, then a hole."""
    import struct

    header, off = {}, 0
    for k in sorted(shapes):
        shape, dtype = shapes[k]
        n = math.prod(shape) * {"F16": 2, "I64": 8}[dtype]
        header[k] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.truncate(8 + len(text) + off)


def write_full_size(out):
    """Checkpoints with the released models' key sets and shapes (zeros, sparse: ~7 GB apparent
    for SDXL, nothing on disk), to open with the bundled defaults: `diffc <out>/sdxl.safetensors`."""
    os.makedirs(out, exist_ok=True)
    for family in sorted(FAMILIES):
        shapes = full_size_shapes(family)
        write_sparse(os.path.join(out, family + ".safetensors"), shapes)
        print(f"{out}/{family}.safetensors: {len(shapes)} tensors, {sum(math.prod(s) for s, _ in shapes.values()):,} elements")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-only", action="store_true", help="write data/ only")
    ap.add_argument("--full-size", metavar="DIR",
                    help="also write sparse full-size checkpoints of each family (zeros) into DIR")
    args = ap.parse_args()
    torch.set_num_threads(2)
    write_data()
    if args.full_size:
        write_full_size(args.full_size)
    if args.data_only:
        return
    os.makedirs(FIXTURES, exist_ok=True)
    for seed, family in enumerate(sorted(FAMILIES), start=1):
        make_fixture(family, seed)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(FIXTURES) for f in fs
                if not os.path.islink(os.path.join(r, f)))
    print(f"tests/fixtures/single_file: {total / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
