"""make_fixtures_pipeline's flow-matching DiT pipelines (FluxPipeline, StableDiffusion3Pipeline):
building their tiny folders (tables in make_fixtures_pipeline_table: PIPELINES_DIT) and one diffusers
run of a case, recorded for tests/fixtures/pipelines/<case>.safetensors.

The T5 tokenizer is made offline: a sentencepiece unigram model trained here on the Python standard
library's source text plus prompt-like lines (one thread, no shuffling: the same bytes every run of
the same Python and sentencepiece versions; the corpus is the running interpreter's own stdlib),
loaded with transformers.T5TokenizerFast.from_pretrained (which converts spiece.model into the
tokenizer.json it saves) and saved with the pipeline; spiece.model is kept beside tokenizer.json.
"""

import glob
import io
import os
import shutil
import sysconfig

import torch

from make_fixtures_pipeline_table import PIPELINES, T5_CONFIG, T5_SEED, T5_TOKENIZER_VOCAB

T5_TRAIN_LINES = [
    "a photograph of an astronaut riding a horse on the moon",
    "a highly detailed oil painting of an old lighthouse on a rocky cliff above a stormy sea",
    "portrait of a young woman with long hair, soft light, 85mm lens, bokeh",
    "a cozy cabin in the mountains at sunset, volumetric lighting, 4k, trending on artstation",
    "a watercolor of a red fox in the snow, blue and white, minimalist",
    "blurry, low quality, ugly, deformed hands, watermark, text",
    "Café naïve résumé façade, 3 cups of coffee!",
]


TRANSFORMER_CLASS = {"FluxPipeline": "FluxTransformer2DModel", "StableDiffusion3Pipeline": "SD3Transformer2DModel"}


def is_dit(pipeline_name):
    return PIPELINES[pipeline_name]["cls"] in TRANSFORMER_CLASS


# --------------------------------------------------------------------------------------
# Components
# --------------------------------------------------------------------------------------


def train_t5_spiece(path):
    """A unigram spiece.model (pad 0, eos 1, unk 2, no bos; T5's nmt_nfkc normalisation) at path."""
    import sentencepiece as spm
    lines = []
    for src in sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:60]:
        with open(src, encoding="utf-8", errors="ignore") as f:
            lines += [ln.strip() for ln in f if len(ln.strip()) > 20]
    lines += T5_TRAIN_LINES * 40
    # from an iterator into memory: no input or model path lands in the saved trainer_spec (a
    # temporary folder's name would make every run's file different)
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="unigram", vocab_size=T5_TOKENIZER_VOCAB,
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, character_coverage=0.9995, input_sentence_size=30000,
        shuffle_input_sentence=False, num_threads=1, minloglevel=2)
    with open(path, "wb") as f:
        f.write(model.getvalue())


def build_t5_tokenizer(folder):
    """T5TokenizerFast over a freshly trained spiece.model in folder (model_max_length 512, as T5's)."""
    from transformers import T5TokenizerFast
    os.makedirs(folder, exist_ok=True)
    train_t5_spiece(os.path.join(folder, "spiece.model"))
    return T5TokenizerFast.from_pretrained(folder, model_max_length=512)


def build_t5(vocab_size):
    import transformers
    from make_fixtures_models import reinit_weights
    torch.manual_seed(T5_SEED)
    model = transformers.T5EncoderModel(transformers.T5Config(**dict(T5_CONFIG, vocab_size=vocab_size)))
    reinit_weights(model, T5_SEED)
    return model.eval()


def build_clip_l_with_projection(p):
    """SD3's CLIP-L: sd's CLIPTextModel weights + a seeded text_projection, token table from sdxl's
    text_encoder_2 (see TE_SD3_PROJECTION_SEED in the table)."""
    from make_fixtures_models import build_model
    cls, config, seed = p["text_encoder"]
    clip_l = build_model(cls, config, seed)
    model = build_model("CLIPTextModelWithProjection", config, p["text_encoder_projection_seed"])
    missing = model.text_model.load_state_dict(clip_l.state_dict(), strict=True)
    assert not missing.missing_keys and not missing.unexpected_keys, missing
    table = build_model(*p["text_encoder_2"]).text_model.embeddings.token_embedding.weight
    with torch.no_grad():
        model.text_model.embeddings.token_embedding.weight.copy_(table)
    return model.eval()


def build_dit_pipeline(name, tmp):
    import diffusers
    from make_fixtures_clip_vocab import write_clip_tokenizer
    from make_fixtures_models import build_model
    from make_fixtures_pipeline import build_scheduler
    p = PIPELINES[name]
    t5_tok = build_t5_tokenizer(os.path.join(tmp, name, "t5_tokenizer"))
    parts = dict(
        transformer=build_model(TRANSFORMER_CLASS[p["cls"]], p["transformer"], p["transformer_seed"]),
        vae=build_model("AutoencoderKL", p["vae"], p["vae_seed"]),
        tokenizer=write_clip_tokenizer(os.path.join(tmp, name, "tokenizer"), pad_token=p["tokenizer_pad"]),
        scheduler=build_scheduler(p["scheduler"]),
    )
    if p["cls"] == "FluxPipeline":
        pipe = diffusers.FluxPipeline(**parts, text_encoder=build_model(*p["text_encoder"]),
                                      text_encoder_2=build_t5(len(t5_tok)), tokenizer_2=t5_tok)
    else:
        pipe = diffusers.StableDiffusion3Pipeline(
            **parts, text_encoder=build_clip_l_with_projection(p), text_encoder_2=build_model(*p["text_encoder_2"]),
            tokenizer_2=write_clip_tokenizer(os.path.join(tmp, name, "tokenizer_2"), pad_token=p["tokenizer_2_pad"]),
            text_encoder_3=build_t5(len(t5_tok)), tokenizer_3=t5_tok)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def save_dit_pipeline(pipe, name, folder):
    """save_pretrained; CLIP tokenizer folders rewritten as the SD fixtures' (vocab.json + merges.txt),
    spiece.model kept beside the T5 tokenizer.json, flux's CLIP-L in the released layout (sd's files),
    SD3's two CLIP encoders sharded at 1MB (the token tables' shard shared with sdxl)."""
    from make_fixtures_clip import legacy_layout
    from make_fixtures_clip_vocab import write_clip_tokenizer
    p = PIPELINES[name]
    pipe.save_pretrained(folder, safe_serialization=True)
    clip_tokenizers = {"tokenizer": p["tokenizer_pad"]}
    if p["cls"] == "FluxPipeline":
        t5_tok = "tokenizer_2"
        legacy_layout(os.path.join(folder, "text_encoder"), pipe.text_encoder.config.max_position_embeddings)
    else:
        t5_tok = "tokenizer_3"
        clip_tokenizers["tokenizer_2"] = p["tokenizer_2_pad"]
        for sub in ("text_encoder", "text_encoder_2"):
            shutil.rmtree(os.path.join(folder, sub))
            getattr(pipe, sub).save_pretrained(os.path.join(folder, sub), max_shard_size="1MB")
    for sub, pad in clip_tokenizers.items():
        shutil.rmtree(os.path.join(folder, sub))
        write_clip_tokenizer(os.path.join(folder, sub), pad_token=pad)
    spiece = os.path.join(folder, t5_tok, "spiece.model")
    if not os.path.exists(spiece):
        shutil.copyfile(os.path.join(getattr(pipe, t5_tok).name_or_path, "spiece.model"), spiece)


# --------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------


class DitRecorder:
    """Watches one pipeline call: the transformer's inputs (pre-hook) and raw output (hook), the guided
    velocity handed to scheduler.step, the latents after every step.  Observes only."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.calls, self.outputs, self.model_outputs, self.latents = [], [], [], []
        tr = pipe.transformer
        self.handles = [tr.register_forward_pre_hook(self._pre, with_kwargs=True),
                        tr.register_forward_hook(self._post, with_kwargs=True)]
        step = pipe.scheduler.step

        def recording_step(model_output, timestep, sample, *a, **k):
            self.model_outputs.append(model_output.detach().clone())
            return step(model_output, timestep, sample, *a, **k)
        pipe.scheduler.step = recording_step

    def _pre(self, module, args, kwargs):
        assert not args, "the pipelines call the transformer with keywords only"
        self.calls.append({k: v.detach().clone() for k, v in kwargs.items() if torch.is_tensor(v)})

    def _post(self, module, args, kwargs, output):
        self.outputs.append(output[0].detach().clone())

    def callback(self, pipe, i, t, kw):
        self.latents.append(kw["latents"].detach().clone())
        return {}

    def close(self):
        for h in self.handles:
            h.remove()
        del self.pipe.scheduler.step


def call_dit(pipe, case, generator, latents=None, recorder=None):
    kwargs = dict(prompt=case["prompt"], num_inference_steps=case["steps"], guidance_scale=case["guidance"],
                  num_images_per_prompt=case["batch"], height=case["height"], width=case["width"],
                  generator=generator, output_type="pt", latents=latents,
                  max_sequence_length=case["max_sequence_length"])
    if type(pipe).__name__ != "FluxPipeline":
        kwargs["negative_prompt"] = case["negative_prompt"]
    elif case["negative_prompt"] is not None:
        raise SystemExit(f"{case['name']}: FluxPipeline cases take no negative prompt (true_cfg_scale is not used)")
    if recorder:
        kwargs["callback_on_step_end"] = recorder.callback
    with torch.no_grad():
        return pipe(**kwargs).images


def dit_token_ids(tokenizer, text, length):
    return tokenizer(text, padding="max_length", max_length=length, truncation=True,
                     return_tensors="pt").input_ids.to(torch.int64)


def encode(pipe, case, cfg):
    """The pipeline's own text encoding plus the token ids each tokenizer gave, as io tensors."""
    b, L, dev = case["batch"], case["max_sequence_length"], torch.device("cpu")
    out = {}
    with torch.no_grad():
        if type(pipe).__name__ == "FluxPipeline":
            pe, pp, text_ids = pipe.encode_prompt(case["prompt"], None, device=dev, num_images_per_prompt=b,
                                                  max_sequence_length=L)
            out.update(prompt_embeds=pe, pooled_prompt_embeds=pp, text_ids=text_ids)
            out["input_ids"] = dit_token_ids(pipe.tokenizer, case["prompt"], pipe.tokenizer_max_length)
            out["input_ids_2"] = dit_token_ids(pipe.tokenizer_2, case["prompt"], L)
            return out
        pe, ne, pp, npp = pipe.encode_prompt(case["prompt"], None, None, device=dev, num_images_per_prompt=b,
                                             do_classifier_free_guidance=cfg, negative_prompt=case["negative_prompt"],
                                             max_sequence_length=L)
    out.update(prompt_embeds=pe, pooled_prompt_embeds=pp)
    texts = {"": case["prompt"]}
    if cfg:
        out.update(negative_prompt_embeds=ne, negative_pooled_prompt_embeds=npp)
        texts["negative_"] = case["negative_prompt"] or ""
    for prefix, text in texts.items():
        out[prefix + "input_ids"] = dit_token_ids(pipe.tokenizer, text, pipe.tokenizer_max_length)
        out[prefix + "input_ids_2"] = dit_token_ids(pipe.tokenizer_2, text, pipe.tokenizer_max_length)
        out[prefix + "input_ids_3"] = dit_token_ids(pipe.tokenizer_3, text, L)
    return out


def check_dit_text_encoding(pipe, case, out):
    """The stored ids through the encoders give the pipeline's embeddings: Flux: CLIP pooler_output,
    T5 last_hidden_state; SD3: both CLIPs' hidden_states[-2] concatenated, zero-padded to T5's width,
    then T5's tokens appended; pooled = the two text_embeds concatenated."""
    b = case["batch"]

    def close(name, got, want):
        if not torch.allclose(got.repeat_interleave(b, dim=0), want, rtol=0, atol=1e-6):
            raise SystemExit(f"{case['name']}: {name} from the stored ids differs")
    with torch.no_grad():
        if type(pipe).__name__ == "FluxPipeline":
            close("pooled_prompt_embeds", pipe.text_encoder(out["input_ids"]).pooler_output,
                  out["pooled_prompt_embeds"])
            close("prompt_embeds", pipe.text_encoder_2(out["input_ids_2"])[0], out["prompt_embeds"])
            return
        for prefix in ("", "negative_") if "negative_prompt_embeds" in out else ("",):
            r1 = pipe.text_encoder(out[prefix + "input_ids"], output_hidden_states=True)
            r2 = pipe.text_encoder_2(out[prefix + "input_ids_2"], output_hidden_states=True)
            t5 = pipe.text_encoder_3(out[prefix + "input_ids_3"])[0]
            clip = torch.cat([r1.hidden_states[-2], r2.hidden_states[-2]], dim=-1)
            clip = torch.nn.functional.pad(clip, (0, t5.shape[-1] - clip.shape[-1]))
            close(prefix + "prompt_embeds", torch.cat([clip, t5], dim=-2), out[prefix + "prompt_embeds"])
            close(prefix + "pooled_prompt_embeds", torch.cat([r1.text_embeds, r2.text_embeds], dim=-1),
                  out[prefix + "pooled_prompt_embeds"])


def run_dit_case(pipe, case):
    """Runs case on pipe; returns {"tensors": io tensors, ...facts for cases.json}."""
    flux = type(pipe).__name__ == "FluxPipeline"
    h, w, b = case["height"], case["width"], case["batch"]
    cfg = not flux and case["guidance"] > 1.0
    vsf = pipe.vae_scale_factor
    shape = (b, 16, 2 * (h // (vsf * 2)), 2 * (w // (vsf * 2))) if flux else \
        (b, pipe.transformer.config.in_channels, h // vsf, w // vsf)
    out = encode(pipe, case, cfg)
    check_dit_text_encoding(pipe, case, out)

    init_noise = torch.randn(shape, generator=torch.Generator().manual_seed(case["seed"]), dtype=torch.float32)
    out["init_noise"] = init_noise
    rec = DitRecorder(pipe)
    image = call_dit(pipe, case, torch.Generator().manual_seed(case["seed"]), recorder=rec)
    rec.close()
    assert image.shape == (b, 3, h, w), image.shape
    calls = rec.calls
    assert len(calls) == len(rec.latents) == len(rec.model_outputs) == case["steps"]
    out.update(image=image, latents=rec.latents[-1], step_latents=torch.stack(rec.latents),
               step_noise_pred=torch.stack(rec.model_outputs), first_transformer_output=rec.outputs[0],
               sigmas=pipe.scheduler.sigmas, timesteps=pipe.scheduler.timesteps)
    first = calls[0]
    out["first_transformer_input"] = first["hidden_states"]
    out["first_transformer_timestep"] = first["timestep"]
    ctx = torch.cat([out["negative_prompt_embeds"], out["prompt_embeds"]]) if cfg else out["prompt_embeds"]
    pooled = torch.cat([out["negative_pooled_prompt_embeds"], out["pooled_prompt_embeds"]]) if cfg \
        else out["pooled_prompt_embeds"]
    for c, t in zip(calls, pipe.scheduler.timesteps):
        assert torch.equal(c["encoder_hidden_states"], ctx), "transformer context != encode_prompt's embeddings"
        assert torch.equal(c["pooled_projections"], pooled), "pooled_projections != encode_prompt's pooled"
        assert c["hidden_states"].shape[0] == (2 * b if cfg else b)
        expect_t = t.expand(c["hidden_states"].shape[0]).to(torch.float32)
        assert torch.equal(c["timestep"], expect_t / 1000 if flux else expect_t), (c["timestep"], t)
    if flux:
        out["latent_image_ids"] = first["img_ids"]
        assert torch.equal(first["txt_ids"], out["text_ids"])
        packed = pipe._pack_latents(init_noise, b, 16, shape[2], shape[3])
        assert torch.equal(first["hidden_states"], packed), "first transformer input != packed initial noise"
        if pipe.transformer.config.guidance_embeds:
            out["guidance"] = first["guidance"]
            assert torch.equal(first["guidance"], torch.full([b], case["guidance"], dtype=torch.float32))
        else:
            assert first.get("guidance") is None
        vae_in = pipe._unpack_latents(out["latents"], h, w, vsf)
    else:
        assert torch.equal(first["hidden_states"][:b], init_noise), "first transformer input != initial noise"
        vae_in = out["latents"]
    vae_in = vae_in / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
    out["vae_latents"] = vae_in

    # the same run from latents= (packed for Flux) gives the same image
    again = call_dit(pipe, case, torch.Generator().manual_seed(case["seed"]),
                     latents=first["hidden_states"][:b].clone() if flux else init_noise.clone())
    reproduces = torch.equal(again, image)
    with torch.no_grad():
        dec = (pipe.vae.decode(vae_in).sample / 2 + 0.5).clamp(0, 1)
    assert torch.equal(dec, image), "image != decode(latents / scaling_factor + shift_factor) / 2 + 0.5"

    tensors = {k: v.detach().contiguous() if v.dtype == torch.int64 else v.detach().to(torch.float32).contiguous()
               for k, v in out.items()}
    mu = None
    if pipe.scheduler.config.use_dynamic_shifting:
        from diffusers.pipelines.flux.pipeline_flux import calculate_shift
        c = pipe.scheduler.config
        mu = calculate_shift(out["latent_image_ids"].shape[0], c.base_image_seq_len, c.max_image_seq_len,
                             c.base_shift, c.max_shift)
    return {
        "tensors": tensors,
        "height": h, "width": w,
        "scheduler_class": type(pipe.scheduler).__name__,
        "timesteps_dtype": str(pipe.scheduler.timesteps.dtype).replace("torch.", ""),
        "unet_calls": len(calls),
        "timesteps": [float(t) for t in pipe.scheduler.timesteps],
        "sigmas": [float(s) for s in pipe.scheduler.sigmas],
        "mu": mu,
        "unet_batch": calls[0]["hidden_states"].shape[0],
        # the flow-matching pipelines start from the noise as drawn (their scheduler has no init_noise_sigma)
        "init_noise_sigma": 1.0,
        "latents_reproduces_image": reproduces,
        "sdxl": None,
        "image_std": image.std().item(),
        "image_clipped": ((image == 0) | (image == 1)).float().mean().item(),
    }
