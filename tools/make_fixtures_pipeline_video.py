"""make_fixtures_pipeline's text-to-video pipeline (CogVideoXPipeline): building its tiny folder (table in
make_fixtures_pipeline_table: PIPELINES_VIDEO) and one diffusers run of a case, recorded for
tests/fixtures/pipelines/<case>.safetensors.

The T5 encoder and its tokenizer are flux's (make_fixtures_pipeline_dit: the same config, seed and
trained spiece.model, so the files are the same bytes and git stores them once).  The run records the
video as diffusers' output_type="pt" gives it, [batch, frames, 3, H, W] in [0, 1], under "image" (the key
every pipeline fixture uses for its output), and the final latents [batch, latent frames, C, h, w].
"""

import math
import os
import shutil

import torch

from make_fixtures_pipeline_table import PIPELINES


def is_video(pipeline_name):
    return PIPELINES[pipeline_name]["cls"] == "CogVideoXPipeline"


def build_video_pipeline(name, tmp):
    import diffusers
    from make_fixtures_models import build_model
    from make_fixtures_pipeline import build_scheduler
    from make_fixtures_pipeline_dit import build_t5, build_t5_tokenizer
    p = PIPELINES[name]
    t5_tok = build_t5_tokenizer(os.path.join(tmp, name, "t5_tokenizer"))
    vae = build_model("AutoencoderKLCogVideoX", p["vae"], p["vae_seed"])
    with torch.no_grad():
        for prm in vae.decoder.conv_out.parameters():
            prm.mul_(p["vae_conv_out_scale"])
    pipe = diffusers.CogVideoXPipeline(
        tokenizer=t5_tok, text_encoder=build_t5(len(t5_tok)),
        transformer=build_model("CogVideoXTransformer3DModel", p["transformer"], p["transformer_seed"]),
        vae=vae, scheduler=build_scheduler(p["scheduler"]))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_video_pipeline(pipe, name, folder):
    """save_pretrained, spiece.model kept beside the T5 tokenizer.json (as flux's tokenizer_2)."""
    pipe.save_pretrained(folder, safe_serialization=True)
    spiece = os.path.join(folder, "tokenizer", "spiece.model")
    if not os.path.exists(spiece):
        shutil.copyfile(os.path.join(pipe.tokenizer.name_or_path, "spiece.model"), spiece)


def video_shared_files():
    """Files of the CogVideoX folders that are the same bytes as flux's (T5) and as each other's (the
    VAE weights)."""
    pairs = [("cogvideox/vae/diffusion_pytorch_model.safetensors",
              "cogvideox_2b/vae/diffusion_pytorch_model.safetensors")]
    for folder in ("cogvideox", "cogvideox_2b"):
        pairs += [("flux/text_encoder_2/config.json", f"{folder}/text_encoder/config.json"),
                  ("flux/text_encoder_2/model.safetensors", f"{folder}/text_encoder/model.safetensors"),
                  ("flux/tokenizer_2/spiece.model", f"{folder}/tokenizer/spiece.model"),
                  ("flux/tokenizer_2/tokenizer.json", f"{folder}/tokenizer/tokenizer.json")]
    return pairs


# --------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------


class VideoRecorder:
    """Watches one pipeline call: the transformer's inputs (pre-hook), the guided prediction handed to
    scheduler.step and the latents after every step.  Observes only."""

    def __init__(self, pipe):
        import functools
        self.pipe = pipe
        self.calls, self.model_outputs, self.latents = [], [], []
        self.handle = pipe.transformer.register_forward_pre_hook(self._pre, with_kwargs=True)
        step = pipe.scheduler.step

        @functools.wraps(step)  # the pipeline passes generator / eta only to a step whose signature names them
        def recording_step(model_output, *a, **k):
            self.model_outputs.append(model_output.detach().clone())
            return step(model_output, *a, **k)
        pipe.scheduler.step = recording_step

    def _pre(self, module, args, kwargs):
        assert not args, "the pipeline calls the transformer with keywords only"
        self.calls.append({k: v.detach().clone() for k, v in kwargs.items() if torch.is_tensor(v)})

    def callback(self, pipe, i, t, kw):
        self.latents.append(kw["latents"].detach().clone())
        return {}

    def close(self):
        self.handle.remove()
        del self.pipe.scheduler.step


def effective(pipe, case):
    """height, width, num_frames as the pipeline defaults them."""
    tc, s = pipe.transformer.config, pipe.vae_scale_factor_spatial
    return (case["height"] or tc.sample_height * s, case["width"] or tc.sample_width * s,
            case["num_frames"] or tc.sample_frames)


def call_video(pipe, case, generator, latents=None, recorder=None):
    h, w, f = effective(pipe, case)
    kwargs = dict(prompt=case["prompt"], negative_prompt=case["negative_prompt"], height=h, width=w, num_frames=f,
                  num_inference_steps=case["steps"], guidance_scale=case["guidance"],
                  use_dynamic_cfg=case["use_dynamic_cfg"], generator=generator, output_type="pt", latents=latents)
    if case["max_sequence_length"]:
        kwargs["max_sequence_length"] = case["max_sequence_length"]
    if recorder:
        kwargs["callback_on_step_end"] = recorder.callback
    with torch.no_grad():
        return pipe(**kwargs).frames


def dynamic_guidance(scale, steps, t):
    """CogVideoXPipeline's use_dynamic_cfg scale at timestep t (its formula, in Python floats)."""
    return 1 + scale * ((1 - math.cos(math.pi * ((steps - t) / steps) ** 5.0)) / 2)


def run_video_case(pipe, case):
    """Runs case on pipe; returns {"tensors": io tensors, ...facts for cases.json}."""
    h, w, f = effective(pipe, case)
    L = case["max_sequence_length"] or 226
    cfg = case["guidance"] > 1.0
    lf = (f - 1) // pipe.vae_scale_factor_temporal + 1
    s = pipe.vae_scale_factor_spatial
    shape = (1, lf, pipe.transformer.config.in_channels, h // s, w // s)
    out = {}
    with torch.no_grad():
        pe, ne = pipe.encode_prompt(case["prompt"], case["negative_prompt"], cfg, max_sequence_length=L,
                                    device=torch.device("cpu"))

    def ids(text):
        return pipe.tokenizer(text, padding="max_length", max_length=L, truncation=True, add_special_tokens=True,
                              return_tensors="pt").input_ids.to(torch.int64)
    out["input_ids"] = ids(case["prompt"])
    if cfg:
        out["negative_input_ids"] = ids(case["negative_prompt"] or "")
    with torch.no_grad():  # the stored ids through T5 give the pipeline's embeddings
        for key, want in (("input_ids", pe), ("negative_input_ids", ne if cfg else None)):
            if want is not None and not torch.equal(pipe.text_encoder(out[key])[0], want):
                raise SystemExit(f"{case['name']}: T5 on the stored {key} differs from encode_prompt's")

    init_noise = torch.randn(shape, generator=torch.Generator().manual_seed(case["seed"]), dtype=torch.float32)
    out["init_noise"] = init_noise
    rec = VideoRecorder(pipe)
    video = call_video(pipe, case, torch.Generator().manual_seed(case["seed"]), recorder=rec)
    rec.close()
    assert video.shape[0] == 1 and video.shape[2:] == (3, h, w), video.shape
    calls = rec.calls
    assert len(calls) == len(rec.latents) == len(rec.model_outputs) == case["steps"]
    ctx = torch.cat([ne, pe]) if cfg else pe
    timesteps = pipe.scheduler.timesteps
    for c, t in zip(calls, timesteps):
        assert torch.equal(c["encoder_hidden_states"], ctx), "transformer context != encode_prompt's embeddings"
        assert c["hidden_states"].shape == ((2,) if cfg else (1,)) + shape[1:]
        assert torch.equal(c["timestep"], t.expand(c["hidden_states"].shape[0])), (c["timestep"], t)
    assert torch.equal(calls[0]["hidden_states"][:1], init_noise), "first transformer input != the initial noise"
    out.update(video=video, latents=rec.latents[-1], step_latents=torch.stack(rec.latents),
               step_noise_pred=torch.stack(rec.model_outputs), timesteps=timesteps.to(torch.float32))

    # the video is the VAE decode of the final latents, permuted to [B, C, F, h, w] and multiplied by
    # 1 / scaling_factor (decode_latents' product, not a division), post-processed per frame
    with torch.no_grad():
        z = 1 / pipe.vae.config.scaling_factor * out["latents"].permute(0, 2, 1, 3, 4)
        dec = pipe.vae.decode(z).sample
    assert torch.equal((dec / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4), video), "video != decode(latents)"
    # the same run from latents=init_noise: identical unless the scheduler draws noise during the steps
    # (then with the generator advanced past the initial draw)
    again = call_video(pipe, case, torch.Generator().manual_seed(case["seed"]), latents=init_noise.clone())
    reproduces = torch.equal(again, video)
    if not reproduces:
        g = torch.Generator().manual_seed(case["seed"])
        torch.randn(shape, generator=g, dtype=torch.float32)
        if not torch.equal(call_video(pipe, case, g, latents=init_noise.clone()), video):
            raise SystemExit(f"{case['name']}: latents=init_noise reproduces the video with neither a fresh "
                             f"generator nor one advanced past the initial noise")
    guidance = [dynamic_guidance(case["guidance"], case["steps"], t.item()) if case["use_dynamic_cfg"]
                else case["guidance"] for t in timesteps]
    tensors = {k: v.detach().contiguous() if v.dtype == torch.int64 else v.detach().to(torch.float32).contiguous()
               for k, v in out.items()}
    tensors["image"] = tensors.pop("video")
    return {
        "tensors": tensors,
        "height": h, "width": w, "num_frames": f, "latent_frames": lf, "frames": video.shape[1],
        "scheduler_class": type(pipe.scheduler).__name__,
        "timesteps_dtype": str(timesteps.dtype).replace("torch.", ""),
        "unet_calls": len(calls),
        "timesteps": [int(t) for t in timesteps],
        "guidance_per_step": guidance,
        "unet_batch": calls[0]["hidden_states"].shape[0],
        "init_noise_sigma": float(pipe.scheduler.init_noise_sigma),
        "latents_reproduces_image": reproduces,
        "sdxl": None,
        "image_std": video.std().item(),
        "image_clipped": ((video == 0) | (video == 1)).float().mean().item(),
    }
