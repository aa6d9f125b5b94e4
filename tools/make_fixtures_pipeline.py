#!/usr/bin/env python3
"""Reference fixtures for whole text-to-image pipelines, with diffusers itself as the oracle.

Builds three tiny pipeline folders (tests/fixtures/pipelines/{sd,sd2v,sdxl}) from the configs in
make_fixtures_pipeline_table.py, with seeded weights (make_fixtures_models.build_model) and the
real CLIP tokenizer files (make_fixtures_clip_vocab.write_clip_tokenizer), saves them with
save_pretrained (text encoders in the released layout, make_fixtures_clip.legacy_layout), then for every entry of CASES runs, in a fresh child process, the pipeline loaded
back with ``from_pretrained(..., torch_dtype=torch.float32)`` on the CPU (2 threads), and writes
<case>.safetensors (initial noise, embeddings, token ids, per-step latents, final latents, image)
and cases.json.

Usage:  python tools/make_fixtures_pipeline.py --out tests/fixtures/pipelines [--only CASE ...]
(tools/make_fixtures.sh runs it too, as the fixture named "pipelines").

Every file written is reproducible byte for byte on the same machine and package versions.
"""

import argparse
import functools
import inspect
import json
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from make_fixtures_common import NUM_THREADS, dir_size, run_worker_job  # noqa: E402
from make_fixtures_pipeline_dit import build_dit_pipeline, is_dit, run_dit_case, save_dit_pipeline  # noqa: E402
from make_fixtures_pipeline_table import CASES, PIPELINES  # noqa: E402
from make_fixtures_pipeline_video import (build_video_pipeline, is_video, run_video_case,  # noqa: E402
                                          save_video_pipeline, video_shared_files)

SCRIPT = os.path.abspath(__file__)
IMAGE_STD_RANGE = (0.05, 0.45)   # of the [0, 1] image: neither flat nor mostly clipped
MAX_CLIPPED = 0.25               # fraction of pixels at exactly 0 or 1


def quiet():
    import warnings
    warnings.filterwarnings("ignore")
    import diffusers
    import transformers
    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def setup_torch():
    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)


# --------------------------------------------------------------------------------------
# Building the folders
# --------------------------------------------------------------------------------------


def build_scheduler(spec):
    import diffusers
    cls_name, config = spec
    return getattr(diffusers, cls_name).from_config(config)


def build_pipeline(name, tmp):
    """The in-memory pipeline of PIPELINES[name] (tokenizers written under tmp)."""
    import diffusers
    from make_fixtures_clip_vocab import write_clip_tokenizer
    from make_fixtures_models import build_model
    if is_dit(name):
        return build_dit_pipeline(name, tmp)
    if is_video(name):
        return build_video_pipeline(name, tmp)
    p = PIPELINES[name]
    parts = dict(
        unet=build_model("UNet2DConditionModel", p["unet"], p["unet_seed"]),
        vae=build_model("AutoencoderKL", p["vae"], p["vae_seed"]),
        text_encoder=build_model(*p["text_encoder"]),
        tokenizer=write_clip_tokenizer(os.path.join(tmp, name, "tokenizer"), pad_token=p["tokenizer_pad"]),
        scheduler=build_scheduler(p["scheduler"]),
    )
    if p["cls"] == "StableDiffusionXLPipeline":
        parts["text_encoder_2"] = build_model(*p["text_encoder_2"])
        parts["tokenizer_2"] = write_clip_tokenizer(os.path.join(tmp, name, "tokenizer_2"),
                                                    pad_token=p["tokenizer_2_pad"])
        pipe = diffusers.StableDiffusionXLPipeline(
            **parts, force_zeros_for_empty_prompt=p["force_zeros_for_empty_prompt"], add_watermarker=False)
    else:
        pipe = diffusers.StableDiffusionPipeline(**parts, safety_checker=None, feature_extractor=None,
                                                 requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_pipeline(pipe, name, folder):
    """save_pretrained, then the tokenizer folders rewritten by write_clip_tokenizer (vocab.json,
    merges.txt, tokenizer_config.json; no 3.6 MB tokenizer.json), byte-identical across folders."""
    from make_fixtures_clip import legacy_layout
    from make_fixtures_clip_vocab import write_clip_tokenizer
    p = PIPELINES[name]
    if is_dit(name) or is_video(name):
        (save_dit_pipeline if is_dit(name) else save_video_pipeline)(pipe, name, folder)
        print_folder(name, folder)
        return
    pipe.save_pretrained(folder, safe_serialization=True)
    for sub, pad in (("tokenizer", p["tokenizer_pad"]), ("tokenizer_2", p.get("tokenizer_2_pad"))):
        if pad is None:
            continue
        shutil.rmtree(os.path.join(folder, sub))
        write_clip_tokenizer(os.path.join(folder, sub), pad_token=pad)
    # CLIPTextModel in the layout of the released SD folders (transformers 4: text_model.* names and
    # the position_ids buffer), as make_fixtures' clip fixtures save it; transformers 5 writes names
    # without the prefix but reads both
    legacy_layout(os.path.join(folder, "text_encoder"), pipe.text_encoder.config.max_position_embeddings)
    if p.get("text_encoder_2_shard"):
        te2_dir = os.path.join(folder, "text_encoder_2")
        shutil.rmtree(te2_dir)
        pipe.text_encoder_2.save_pretrained(te2_dir, max_shard_size=p["text_encoder_2_shard"])
    print_folder(name, folder)


def print_folder(name, folder):
    index = json.load(open(os.path.join(folder, "model_index.json")))
    print(f"  {name}: {index['_class_name']}, " + ", ".join(
        f"{k}={v[1]}" for k, v in sorted(index.items()) if isinstance(v, list)))


def check_text_encoder_reload(pipe, folder):
    """Every text encoder loads back from its folder with no missing or unexpected keys and the
    in-memory weights."""
    import transformers
    for sub in ("text_encoder", "text_encoder_2", "text_encoder_3"):
        te = getattr(pipe, sub, None)
        if te is None:
            continue
        back, info = getattr(transformers, type(te).__name__).from_pretrained(
            os.path.join(folder, sub), torch_dtype=torch.float32, output_loading_info=True)
        # the released layout's position_ids buffer is a non-persistent buffer in transformers 5
        info["unexpected_keys"] = [k for k in info["unexpected_keys"] if not k.endswith("embeddings.position_ids")]
        bad = {k: v for k, v in info.items() if v}
        if bad:
            raise SystemExit(f"{folder}/{sub}: loading reports {bad}")
        a, b = te.state_dict(), back.state_dict()
        if a.keys() != b.keys() or not all(torch.equal(a[k], b[k]) for k in a):
            raise SystemExit(f"{folder}/{sub}: reloaded weights differ")


def clip_skip_shim(pipe):
    """diffusers 0.42.1's StableDiffusionPipeline.encode_prompt applies, for clip_skip,
    `self.text_encoder.text_model.final_layer_norm`: transformers 4's CLIPTextModel wrapped a
    CLIPTextTransformer as `.text_model`, transformers 5's CLIPTextModel IS that transformer and has
    no `.text_model`, so clip_skip raises AttributeError.  Point `text_model` at the model itself
    (a plain attribute, not a registered submodule: no change to parameters or state_dict) so the
    pipeline's code runs as written; `final_layer_norm` is the same module either way."""
    te = getattr(pipe, "text_encoder", None)
    if te is not None and not hasattr(te, "text_model"):
        object.__setattr__(te, "text_model", te)


# --------------------------------------------------------------------------------------
# One run (in the --worker child)
# --------------------------------------------------------------------------------------


def load_pipeline(folder, name):
    import diffusers
    cls = getattr(diffusers, PIPELINES[name]["cls"])
    kwargs = {"torch_dtype": torch.float32}
    if PIPELINES[name]["cls"] == "StableDiffusionXLPipeline":
        kwargs["add_watermarker"] = False  # also off when invisible-watermark is not installed
    pipe = cls.from_pretrained(folder, **kwargs)
    pipe.set_progress_bar_config(disable=True)
    clip_skip_shim(pipe)
    for comp in pipe.components.values():
        if isinstance(comp, torch.nn.Module):
            comp.eval()
            for prm in comp.parameters():
                assert prm.dtype == torch.float32, prm.dtype
    return pipe


def lms_without_scipy():
    """diffusers' LMSDiscreteScheduler integrates its coefficients with scipy.integrate.quad: without
    scipy, `diffusers.LMSDiscreteScheduler` is a dummy that refuses to be built, and the real class's
    module never binds `integrate`.  scipy is not in the fixture venv: take the class from its module
    and bind make_fixtures_scheduler's stand-in (QUADPACK's 21-point Gauss-Kronrod first stage, what
    quad returns for these polynomial integrands; it refuses any integrand quad would subdivide and
    checks each result against mpmath).  With scipy installed, diffusers' own binding is kept."""
    import types
    import diffusers.schedulers.scheduling_lms_discrete as lms
    if not hasattr(lms, "integrate"):
        from make_fixtures_scheduler import quad
        lms.integrate = types.SimpleNamespace(quad=quad)
    return lms.LMSDiscreteScheduler


def set_case_scheduler(pipe, case):
    import diffusers
    if case["scheduler"] is None and not case["scheduler_overrides"]:
        return
    if case["scheduler"] == "LMSDiscreteScheduler":
        cls = lms_without_scipy()
    else:
        cls = getattr(diffusers, case["scheduler"]) if case["scheduler"] else type(pipe.scheduler)
    pipe.scheduler = cls.from_config(pipe.scheduler.config, **case["scheduler_overrides"])


def is_xl(case):
    return PIPELINES[case["pipeline"]]["cls"] == "StableDiffusionXLPipeline"


def effective_size(pipe, case):
    scale = pipe.vae_scale_factor
    h = case["height"] or pipe.unet.config.sample_size * scale
    w = case["width"] or pipe.unet.config.sample_size * scale
    return h, w


def sdxl_sizes(case, h, w):
    """original_size, crops_coords_top_left, target_size as the pipeline uses them."""
    x = case["sdxl"] or {}
    return (list(x.get("original_size") or [h, w]), list(x.get("crops_coords_top_left") or [0, 0]),
            list(x.get("target_size") or [h, w]))


def token_ids(tokenizer, text):
    return tokenizer(text, padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                     return_tensors="pt").input_ids.to(torch.int64)


class Recorder:
    """Watches one pipeline call: the UNet's inputs (pre-hook), the guided model output handed to
    scheduler.step, and the latents after every step (callback_on_step_end).  Observes only."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.unet_calls = []
        self.model_outputs = []
        self.latents = []
        self.handle = pipe.unet.register_forward_pre_hook(self._unet_pre, with_kwargs=True)
        step = pipe.scheduler.step

        # wraps: the pipeline passes `generator` (and `eta`) only to a step whose signature names
        # it (prepare_extra_step_kwargs); without it an ancestral step would use torch's global RNG
        @functools.wraps(step)
        def recording_step(model_output, timestep, sample, *a, **k):
            self.model_outputs.append(model_output.detach().clone())
            return step(model_output, timestep, sample, *a, **k)
        pipe.scheduler.step = recording_step

    def _unet_pre(self, module, args, kwargs):
        t = args[1] if len(args) > 1 else kwargs["timestep"]
        added = kwargs.get("added_cond_kwargs") or {}
        self.unet_calls.append({
            "sample": args[0].detach().clone(),
            "timestep": t.detach().clone() if torch.is_tensor(t) else torch.tensor(t),
            "encoder_hidden_states": kwargs["encoder_hidden_states"].detach().clone(),
            "text_embeds": added["text_embeds"].detach().clone() if "text_embeds" in added else None,
            "time_ids": added["time_ids"].detach().clone() if "time_ids" in added else None,
        })

    def callback(self, pipe, i, t, kw):
        self.latents.append(kw["latents"].detach().clone())
        return {}

    def close(self):
        self.handle.remove()
        del self.pipe.scheduler.step


def check_text_encoding(pipe, case, out, cfg, force_zeros):
    """The stored token ids, run through the text encoders the way the README says the pipeline
    uses them, give the pipeline's embeddings: SD the last_hidden_state (clip_skip k: hidden_states
    [-(k+1)] + final_layer_norm, the prompt only); SDXL hidden_states[-2] of both encoders
    concatenated (clip_skip k: [-(k+2)], the prompt only), pooled = text_encoder_2's text_embeds."""
    b, k = case["batch"], case["clip_skip"]

    def rep(x):
        return x.repeat_interleave(b, dim=0)

    def close(name, got, want):
        if not torch.allclose(got, want, rtol=0, atol=1e-6):
            raise SystemExit(f"{case['name']}: {name} from the stored ids differs by "
                             f"{(got - want).abs().max().item():.3g}")
    with torch.no_grad():
        if not is_xl(case):
            te = pipe.text_encoder
            r = te(out["input_ids"], output_hidden_states=True)
            close("prompt_embeds", rep(r[0] if k is None else te.final_layer_norm(r.hidden_states[-(k + 1)])),
                  out["prompt_embeds"])
            if cfg:
                close("negative_prompt_embeds", rep(te(out["negative_input_ids"])[0]), out["negative_prompt_embeds"])
            return
        layer = -2 if k is None else -(k + 2)
        r1 = pipe.text_encoder(out["input_ids"], output_hidden_states=True)
        r2 = pipe.text_encoder_2(out["input_ids_2"], output_hidden_states=True)
        close("prompt_embeds", rep(torch.cat([r1.hidden_states[layer], r2.hidden_states[layer]], dim=-1)),
              out["prompt_embeds"])
        close("pooled_prompt_embeds", rep(r2.text_embeds), out["pooled_prompt_embeds"])
        if cfg and not force_zeros:
            n1 = pipe.text_encoder(out["negative_input_ids"], output_hidden_states=True)
            n2 = pipe.text_encoder_2(out["negative_input_ids_2"], output_hidden_states=True)
            close("negative_prompt_embeds", rep(torch.cat([n1.hidden_states[-2], n2.hidden_states[-2]], dim=-1)),
                  out["negative_prompt_embeds"])
            close("negative_pooled_prompt_embeds", rep(n2.text_embeds), out["negative_pooled_prompt_embeds"])


def call_pipeline(pipe, case, h, w, generator, latents=None, record=False):
    kwargs = dict(prompt=case["prompt"], negative_prompt=case["negative_prompt"],
                  num_inference_steps=case["steps"], guidance_scale=case["guidance"],
                  guidance_rescale=case["guidance_rescale"], num_images_per_prompt=case["batch"],
                  height=h, width=w, clip_skip=case["clip_skip"], generator=generator, output_type="pt",
                  latents=latents)
    if is_xl(case) and case["sdxl"]:
        kwargs.update({k: tuple(v) for k, v in case["sdxl"].items()})
    plain_signature = inspect.signature(pipe.scheduler.step)
    rec = Recorder(pipe) if record else None
    if rec:
        assert inspect.signature(pipe.scheduler.step) == plain_signature
        kwargs["callback_on_step_end"] = rec.callback
    with torch.no_grad():
        images = pipe(**kwargs).images
    if rec:
        rec.close()
    return images, rec


def worker(job_path):
    with open(job_path) as f:
        job = json.load(f)
    setup_torch()
    quiet()
    case = job["case"]
    pipe = load_pipeline(job["folder"], case["pipeline"])
    set_case_scheduler(pipe, case)
    result = run_case(pipe, case)
    from safetensors.torch import save_file
    save_file(result.pop("tensors"), job["io_path"])
    with open(job["result_path"], "w") as f:
        json.dump(result, f)


def run_case(pipe, case):
    """Runs case on pipe; returns {"tensors": io tensors, ...facts for cases.json}."""
    if is_dit(case["pipeline"]):
        return run_dit_case(pipe, case)
    if is_video(case["pipeline"]):
        return run_video_case(pipe, case)
    xl = is_xl(case)
    h, w = effective_size(pipe, case)
    cfg = case["guidance"] > 1.0 and pipe.unet.config.time_cond_proj_dim is None
    b = case["batch"]
    seed = case["seed"]
    shape = (b, pipe.unet.config.in_channels, h // pipe.vae_scale_factor, w // pipe.vae_scale_factor)
    out = {}

    # the pipeline's own text encoding
    with torch.no_grad():
        if xl:
            pe, ne, pp, npp = pipe.encode_prompt(case["prompt"], device=torch.device("cpu"), num_images_per_prompt=b,
                                                 do_classifier_free_guidance=cfg,
                                                 negative_prompt=case["negative_prompt"], clip_skip=case["clip_skip"])
        else:
            pe, ne = pipe.encode_prompt(case["prompt"], torch.device("cpu"), b, cfg, case["negative_prompt"],
                                        clip_skip=case["clip_skip"])
            pp = npp = None
    out["prompt_embeds"] = pe
    if cfg:
        out["negative_prompt_embeds"] = ne
    if xl:
        out["pooled_prompt_embeds"] = pp
        if cfg:
            out["negative_pooled_prompt_embeds"] = npp
    out["input_ids"] = token_ids(pipe.tokenizer, case["prompt"])
    force_zeros = xl and case["negative_prompt"] is None and pipe.config.force_zeros_for_empty_prompt
    if cfg and not force_zeros:
        out["negative_input_ids"] = token_ids(pipe.tokenizer, case["negative_prompt"] or "")
    if xl:
        out["input_ids_2"] = token_ids(pipe.tokenizer_2, case["prompt"])
        if cfg and not force_zeros:
            out["negative_input_ids_2"] = token_ids(pipe.tokenizer_2, case["negative_prompt"] or "")
        if force_zeros and cfg:
            assert not ne.any() and not npp.any(), "force_zeros_for_empty_prompt gave non-zero negative embeddings"
        orig, crop, target = sdxl_sizes(case, h, w)
        add_time_ids = torch.tensor([orig + crop + target], dtype=torch.float32)
        out["add_time_ids"] = add_time_ids

    check_text_encoding(pipe, case, out, cfg, force_zeros)

    # the initial noise as prepare_latents draws it (before init_noise_sigma)
    init_noise = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float32)
    out["init_noise"] = init_noise

    image, rec = call_pipeline(pipe, case, h, w, torch.Generator().manual_seed(seed), record=True)
    assert image.shape == (b, 3, h, w), image.shape
    out["image"] = image
    out["latents"] = rec.latents[-1]
    out["step_latents"] = torch.stack(rec.latents)
    out["step_noise_pred"] = torch.stack(rec.model_outputs)
    calls = rec.unet_calls
    assert len(calls) == len(rec.latents) == len(rec.model_outputs)
    t_dtypes = sorted({str(c["timestep"].dtype).replace("torch.", "") for c in calls})
    assert all(c["timestep"].dim() == 0 for c in calls), "expected a 0-d timestep per UNet call"
    out["timesteps"] = torch.stack([c["timestep"].to(torch.float64) for c in calls]).to(torch.float32)
    assert torch.equal(torch.stack([c["timestep"] for c in calls]), pipe.scheduler.timesteps), "timesteps"

    # what the UNet was fed is what encode_prompt returned (and add_time_ids / pooled for SDXL)
    expect_ctx = torch.cat([ne, pe]) if cfg else pe
    for c in calls:
        assert torch.equal(c["encoder_hidden_states"], expect_ctx), "UNet context != encode_prompt's embeddings"
        assert c["sample"].shape[0] == (2 * b if cfg else b)
        if xl:
            assert torch.equal(c["text_embeds"], torch.cat([npp, pp]) if cfg else pp)
            assert torch.equal(c["time_ids"], add_time_ids.repeat(c["sample"].shape[0], 1)), c["time_ids"]

    # the same run from latents=init_noise: identical unless the scheduler draws noise during the
    # steps (then it does with the generator advanced past the initial draw)
    again, _ = call_pipeline(pipe, case, h, w, torch.Generator().manual_seed(seed), latents=init_noise.clone())
    reproduces = torch.equal(again, image)
    if not reproduces:
        g = torch.Generator().manual_seed(seed)
        torch.randn(shape, generator=g, dtype=torch.float32)
        advanced, _ = call_pipeline(pipe, case, h, w, g, latents=init_noise.clone())
        if not torch.equal(advanced, image):
            raise SystemExit(f"{case['name']}: latents=init_noise reproduces the image with neither a fresh "
                             f"generator nor one advanced past the initial noise")

    # the image is the VAE decode of the final latents, denormalised
    with torch.no_grad():
        dec = pipe.vae.decode(out["latents"] / pipe.vae.config.scaling_factor).sample
    dec = (dec / 2 + 0.5).clamp(0, 1)
    assert torch.equal(dec, image), "image != decode(latents / scaling_factor) / 2 + 0.5"

    tensors = {k: v.detach().contiguous() if v.dtype == torch.int64 else v.detach().to(torch.float32).contiguous()
               for k, v in out.items()}
    return {
        "tensors": tensors,
        "height": h, "width": w,
        "scheduler_class": type(pipe.scheduler).__name__,
        "timesteps_dtype": t_dtypes[0] if len(t_dtypes) == 1 else t_dtypes,
        "unet_calls": len(calls),
        "timesteps": [float(c["timestep"]) if c["timestep"].is_floating_point() else int(c["timestep"])
                      for c in calls],
        "unet_batch": calls[0]["sample"].shape[0],
        "init_noise_sigma": float(pipe.scheduler.init_noise_sigma),
        "latents_reproduces_image": reproduces,
        "sdxl": dict(zip(("original_size", "crops_coords_top_left", "target_size"), sdxl_sizes(case, h, w)))
        if xl else None,
        "image_std": image.std().item(),
        "image_clipped": ((image == 0) | (image == 1)).float().mean().item(),
    }


# --------------------------------------------------------------------------------------
# The parent
# --------------------------------------------------------------------------------------


def run_worker(folder, case, io_path):
    return run_worker_job(SCRIPT, {"folder": folder, "case": case, "io_path": io_path}, io_path)


def case_entry(case, res):
    keys = ["name", "pipeline", "description", "prompt", "negative_prompt", "steps", "guidance", "guidance_rescale",
            "scheduler", "scheduler_overrides", "seed"]
    e = {k: case[k] for k in keys}
    e.update(height=res["height"], width=res["width"], batch=case["batch"], clip_skip=case["clip_skip"],
             sdxl=res["sdxl"], io=case["io"], tolerance=case["tolerance"],
             scheduler_class=res["scheduler_class"], timesteps_dtype=res["timesteps_dtype"],
             unet_calls=res["unet_calls"], unet_batch=res["unet_batch"],
             init_noise_sigma=round(res["init_noise_sigma"], 6), timesteps=res["timesteps"],
             latents_reproduces_image=res["latents_reproduces_image"])
    if is_dit(case["pipeline"]):
        # flow matching: the transformer's calls and batch under the UNet's key names, plus what the
        # DiT pipelines add (the T5 length, the scheduler's sigmas and Flux's shift mu)
        e.update(pipeline_class=PIPELINES[case["pipeline"]]["cls"], max_sequence_length=case["max_sequence_length"],
                 sigmas=res["sigmas"], mu=res["mu"])
    if is_video(case["pipeline"]):
        # text to video: the T5 length (null: the pipeline's 226), the frames asked for (the default:
        # the transformer's sample_frames), the latent frames, the frames the VAE made of them (its
        # frame batching decides), dynamic CFG and its scale per step
        e.update(pipeline_class=PIPELINES[case["pipeline"]]["cls"], max_sequence_length=case["max_sequence_length"],
                 num_frames=res["num_frames"], latent_frames=res["latent_frames"], frames=res["frames"],
                 use_dynamic_cfg=case["use_dynamic_cfg"], guidance_per_step=res["guidance_per_step"])
    return e


def make_pipelines(out, only=None):
    setup_torch()
    quiet()
    import diffusers
    import transformers
    from safetensors.torch import load_file
    print(f"== pipelines: diffusers {diffusers.__version__}, transformers {transformers.__version__}, "
          f"torch {torch.__version__}, {NUM_THREADS} threads")
    names = [c["name"] for c in CASES]
    for n in only or []:
        if n not in names:
            raise SystemExit(f"unknown pipeline case {n}; known: {names}")
    if os.path.isdir(out) and not only:
        shutil.rmtree(out)
    os.makedirs(out, exist_ok=True)

    tmp = tempfile.mkdtemp(prefix="diffc-pipeline-fixtures-")
    try:
        pipes = {}
        for name in PIPELINES:
            folder = os.path.join(out, name)
            if os.path.isdir(folder):
                shutil.rmtree(folder)
            pipes[name] = build_pipeline(name, tmp)
            save_pipeline(pipes[name], name, folder)
            check_text_encoder_reload(pipes[name], folder)
            clip_skip_shim(pipes[name])
    finally:
        shutil.rmtree(tmp)

    # files that are meant to be byte-identical (git stores them once)
    def same(a, b):
        with open(os.path.join(out, a), "rb") as fa, open(os.path.join(out, b), "rb") as fb:
            return fa.read() == fb.read()
    shared = [("sd/text_encoder/model.safetensors", "sdxl/text_encoder/model.safetensors"),
              ("sd/text_encoder/config.json", "sdxl/text_encoder/config.json"),
              ("sd/vae/diffusion_pytorch_model.safetensors", "sdxl/vae/diffusion_pytorch_model.safetensors")]
    shared += dit_shared_files() + video_shared_files()
    for tok in ("sd2v/tokenizer", "sdxl/tokenizer", "sdxl/tokenizer_2", "flux/tokenizer", "flux_schnell/tokenizer",
                "sd3/tokenizer", "sd3/tokenizer_2"):
        shared += [("sd/tokenizer/vocab.json", f"{tok}/vocab.json"), ("sd/tokenizer/merges.txt", f"{tok}/merges.txt")]
    for a, b in shared:
        if not same(a, b):
            raise SystemExit(f"pipelines: {a} and {b} should be byte-identical")
    # ... and the text encoders are make_fixtures' clip_sd15 and clip_sdxl2 fixtures' files (checked
    # when those sit beside this folder, as in tests/fixtures)
    fixtures = os.path.dirname(os.path.abspath(out))
    for sub, fx in (("sd/text_encoder", "clip_sd15/model"), ("sdxl/text_encoder_2", "clip_sdxl2/model")):
        theirs = os.path.join(fixtures, fx)
        if not os.path.isdir(theirs):
            print(f"  ({fx} not found beside {out}: byte identity with it not checked)")
            continue
        ours = os.path.join(out, sub)
        if sorted(os.listdir(ours)) != sorted(os.listdir(theirs)) or not all(
                same(os.path.join(sub, f), os.path.relpath(os.path.join(theirs, f), out)) for f in os.listdir(ours)):
            raise SystemExit(f"pipelines: {sub} should be byte-identical to {theirs}")
        print(f"  {sub} is byte-identical to {fx}")

    entries = {}
    cases_path = os.path.join(out, "cases.json")
    if only and os.path.isfile(cases_path):
        entries = {e["name"]: e for e in json.load(open(cases_path))["cases"]}
    checked_in_memory = set()
    for case in CASES:
        if only and case["name"] not in only:
            continue
        folder = os.path.join(out, case["pipeline"])
        io_path = os.path.join(out, case["io"])
        res = run_worker(folder, case, io_path)
        io = load_file(io_path)
        for k, v in io.items():
            if v.is_floating_point() and not torch.isfinite(v).all():
                raise SystemExit(f"{case['name']}: {k} is not finite")
        if not IMAGE_STD_RANGE[0] < res["image_std"] < IMAGE_STD_RANGE[1] or res["image_clipped"] > MAX_CLIPPED:
            raise SystemExit(f"{case['name']}: image std {res['image_std']:.3f}, {res['image_clipped']:.1%} clipped")
        # the first case of each folder again with the in-memory pipeline: save/load round trip
        if case["pipeline"] not in checked_in_memory:
            checked_in_memory.add(case["pipeline"])
            pipe = pipes[case["pipeline"]]
            sched = pipe.scheduler
            set_case_scheduler(pipe, case)
            mem = run_case(pipe, case)["tensors"]["image"]
            pipe.scheduler = sched
            rel = ((mem - io["image"]).norm() / io["image"].norm()).item()
            if rel > 1e-6:
                raise SystemExit(f"{case['name']}: the reloaded folder's image differs from the in-memory "
                                 f"pipeline's by relative L2 {rel:.3g}")
        entries[case["name"]] = case_entry(case, res)
        print(f"  {case['name']}: {res['scheduler_class']} ({res['timesteps_dtype']} timesteps, "
              f"{res['unet_calls']} UNet calls of batch {res['unet_batch']}), image {res['height']}x{res['width']}, "
              f"std {res['image_std']:.3f}, {res['image_clipped']:.1%} clipped, "
              f"latents=init_noise {'reproduces' if res['latents_reproduces_image'] else 'does NOT reproduce'} it")

    with open(cases_path, "w") as f:
        json.dump({"made_with": made_with(),
                   "cases": [entries[c["name"]] for c in CASES if c["name"] in entries]}, f, indent=2,
                  ensure_ascii=False)
        f.write("\n")
    print(f"  total size of {out}: {dir_size(out)/1e6:.3f} MB on disk, {unique_size(out)/1e6:.3f} MB of distinct files")


def dit_shared_files():
    """Files of the Flux and SD3 folders that are the same bytes as another folder's."""
    pairs = [("sd/text_encoder/model.safetensors", "flux/text_encoder/model.safetensors"),
             ("sdxl/text_encoder_2/model-00001-of-00002.safetensors",
              "sd3/text_encoder/model-00001-of-00002.safetensors"),
             ("flux/vae/diffusion_pytorch_model.safetensors", "sd3/vae/diffusion_pytorch_model.safetensors")]
    pairs += [(f"sdxl/text_encoder_2/{f}", f"sd3/text_encoder_2/{f}") for f in
              ("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
               "model.safetensors.index.json")]
    same_in_schnell = ["text_encoder/config.json", "text_encoder/model.safetensors", "text_encoder_2/config.json",
                       "text_encoder_2/model.safetensors", "tokenizer_2/spiece.model", "tokenizer_2/tokenizer.json",
                       "tokenizer_2/tokenizer_config.json", "vae/config.json",
                       "vae/diffusion_pytorch_model.safetensors"]
    pairs += [(f"flux/{f}", f"flux_schnell/{f}") for f in same_in_schnell]
    t5 = [("text_encoder_2/config.json", "text_encoder_3/config.json"),
          ("text_encoder_2/model.safetensors", "text_encoder_3/model.safetensors"),
          ("tokenizer_2/spiece.model", "tokenizer_3/spiece.model"),
          ("tokenizer_2/tokenizer.json", "tokenizer_3/tokenizer.json")]
    return pairs + [(f"flux/{a}", f"sd3/{b}") for a, b in t5]


def made_with():
    import importlib.metadata as md
    return {name: md.version(name).split("+")[0]
            for name in ("diffusers", "transformers", "tokenizers", "torch", "safetensors", "numpy")}


def unique_size(path):
    """Bytes of distinct file contents under path (what git stores, before compression)."""
    import hashlib
    seen = {}
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                seen[hashlib.sha256(fh.read()).hexdigest()] = os.path.getsize(p)
    return sum(seen.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/fixtures/pipelines")
    ap.add_argument("--only", nargs="*", help="remake only these cases (the folders are always rebuilt)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    make_pipelines(args.out, args.only)


if __name__ == "__main__":
    main()
