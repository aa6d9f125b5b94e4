"""The bench's pipeline cases (bench/bench.py): the whole SD1.5 pipeline, prompt to image, diffrun
against diffusers' StableDiffusionPipeline on the CPU.

Cases are named pipeS (an S x S image) or pipeHxW.  The pipeline folder bench/models/pipe-sd15 is
made once, offline, by a child (bench.py --make-pipeline DIR): the released SD1.5 configs of
bench/configs (UNet, VAE, CLIPTextModel, PNDMScheduler as SD1.5 ships it), seeded random fp32
weights (as tools/make_fixtures.py initialises them), the real CLIP tokenizer
(tools/make_fixtures_clip_vocab.py), saved with save_pretrained.

Per case, in one run:

  1. diffusers (a fresh child, bench.py --pipe-torch-child JOB): StableDiffusionPipeline loads the
     folder (fp32, no safety checker), a warm-up call of --pipe-warmup-steps steps, then one timed
     call of the case's steps with output_type="pt".  Phases from hooks: text = call start to the
     UNet's first forward, denoise = the UNet's first forward to the last callback_on_step_end,
     decode = the rest of the call (VAE decode and postprocessing).  Peak memory is the child's
     VmHWM next to its RSS after the imports.  It saves the image and the final latents (from the
     last step's callback).
  2. diffc compiles the folder three times at the case's size: the default plan (hoisting the
     loop-invariant work), --no-hoist, and --offload model; diffrun runs each once with the same
     prompt, negative prompt, steps, guidance, seed and threads (--outputs: the image as
     output_type="pt" and the final latents).  diffrun's own phase times (text, denoise s/step,
     decode), device arena peak and host peak RSS come from its summary lines; the default plan's
     image and latents are compared with diffusers' (relative L2), the other two plans' with the
     default plan's (they should be bit-identical).
  3. A table, written to bench/results-pipeline.md.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import bench_common as common
from bench_common import (BENCH_DIR, BENCH_SCRIPT, LAST_CPU, MODELS_DIR, REPO, WORK_DIR, child_env, failure_note,
                          fmt_bytes, log, parse_bytes, proc_status_bytes, run_proc, show_cmd)

PIPE_DEFAULT_CASES = ["pipe256", "pipe512"]
PIPE_MODEL = "pipe-sd15"
PROMPT = "a photograph of an astronaut riding a horse on the moon, highly detailed, sharp focus"
NEGATIVE_PROMPT = "blurry, low quality, watermark, text"
SEED = 42
STEPS = 20
GUIDANCE = 7.5

CONFIGS = os.path.join(BENCH_DIR, "configs")
# component -> (class, released config under bench/configs, seed of its random weights)
COMPONENTS = {
    "text_encoder": ("CLIPTextModel", "sd15_text_encoder.json", 17),
    "unet": ("UNet2DConditionModel", "sd15_unet.json", 15),
    "vae": ("AutoencoderKL", "sd15_vae.json", 16),
}
SCHEDULER_CONFIG = "sd15_scheduler.json"  # runwayml/stable-diffusion-v1-5 scheduler/scheduler_config.json


def is_pipe_case(name):
    return name.startswith("pipe")


def parse_pipe_case(name):
    """'pipe256' / 'pipe256x384' -> case dict."""
    m = re.fullmatch(r"pipe(\d+)(?:x(\d+))?", name)
    if not m:
        raise SystemExit(f"bench: bad case {name!r}: expected pipeS or pipeHxW (e.g. pipe256, pipe512)")
    h = int(m.group(1))
    w = int(m.group(2)) if m.group(2) else h
    if h % 8 or w % 8:
        raise SystemExit(f"bench: {name}: image sides must be multiples of 8")
    desc = (f"SD1.5 pipeline, {h}x{w} image (latent 4x{h // 8}x{w // 8}, UNet batch 2 with guidance), "
            f"{STEPS} steps, guidance {GUIDANCE}, PNDM")
    return dict(name=name, model=PIPE_MODEL, kind="pipeline", height=h, width=w, desc=desc)


# --------------------------------------------------------------------------------------
# The pipeline folder
# --------------------------------------------------------------------------------------


def _read_config(name):
    with open(os.path.join(CONFIGS, name)) as f:
        return json.load(f)


def pipe_stamp():
    return {"class": "StableDiffusionPipeline", "init": "make_fixtures-v1", "tokenizer": "clip-real-v1",
            "components": {c: {"class": cls, "config": _read_config(cfg), "seed": seed}
                           for c, (cls, cfg, seed) in COMPONENTS.items()},
            "scheduler": _read_config(SCHEDULER_CONFIG)}


def make_pipeline_child(out_dir):
    """Build every component with seeded random weights and save the folder (fp32)."""
    import gc
    import torch
    sys.path.insert(0, os.path.join(REPO, "tools"))
    from make_fixtures_models import reinit_weights
    from make_fixtures_clip_vocab import write_clip_tokenizer
    import diffusers
    import transformers
    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.set_verbosity_error()
    tmp = out_dir + ".tmp"
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    params = {}
    for comp, (cls_name, cfg_name, seed) in COMPONENTS.items():
        t0 = time.perf_counter()
        cfg = _read_config(cfg_name)
        torch.manual_seed(seed)
        if cls_name == "CLIPTextModel":
            cfg = {k: v for k, v in cfg.items() if not k.startswith("_") and k not in ("architectures", "torch_dtype",
                                                                                        "transformers_version")}
            model = transformers.CLIPTextModel(transformers.CLIPTextConfig(**cfg))
        else:
            model = getattr(diffusers, cls_name).from_config(cfg)
        reinit_weights(model, seed)
        model.eval()
        for p in model.parameters():
            assert p.dtype == torch.float32
        params[comp] = sum(p.numel() for p in model.parameters())
        model.save_pretrained(os.path.join(tmp, comp))
        print(f"  {comp}: {cls_name}, {params[comp] / 1e6:.1f} M parameters ({time.perf_counter() - t0:.0f} s)",
              flush=True)
        del model
        gc.collect()
    write_clip_tokenizer(os.path.join(tmp, "tokenizer"))
    diffusers.PNDMScheduler.from_config(_read_config(SCHEDULER_CONFIG)).save_pretrained(os.path.join(tmp, "scheduler"))
    index = {
        "_class_name": "StableDiffusionPipeline",
        "_diffusers_version": diffusers.__version__,
        "feature_extractor": [None, None],
        "requires_safety_checker": False,
        "safety_checker": [None, None],
        "scheduler": ["diffusers", "PNDMScheduler"],
        "text_encoder": ["transformers", "CLIPTextModel"],
        "tokenizer": ["transformers", "CLIPTokenizer"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    with open(os.path.join(tmp, "model_index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    with open(os.path.join(tmp, "bench_model.json"), "w") as f:
        json.dump(dict(pipe_stamp(), parameters=params), f, indent=2)
        f.write("\n")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.rename(tmp, out_dir)
    print(f"  saved to {os.path.relpath(out_dir, REPO)} ({sum(params.values()) / 1e6:.1f} M parameters)")


def ensure_pipeline(python):
    out_dir = os.path.join(MODELS_DIR, PIPE_MODEL)
    stamp_path = os.path.join(out_dir, "bench_model.json")
    if os.path.isfile(stamp_path):
        with open(stamp_path) as f:
            have = json.load(f)
        have.pop("parameters", None)
        if json.loads(json.dumps(pipe_stamp())) == have:
            log(f"model {PIPE_MODEL}: reusing {os.path.relpath(out_dir, REPO)}")
            return out_dir
        log(f"model {PIPE_MODEL}: {os.path.relpath(out_dir, REPO)} was made from other configs; rebuilding")
    else:
        log(f"model {PIPE_MODEL}: building the SD1.5 pipeline folder with seeded random weights")
    os.makedirs(MODELS_DIR, exist_ok=True)
    t0 = time.perf_counter()
    subprocess.run([python, BENCH_SCRIPT, "--make-pipeline", out_dir], check=True, env=child_env(2))
    log(f"  ({time.perf_counter() - t0:.0f} s)")
    return out_dir


# --------------------------------------------------------------------------------------
# diffusers' side (a child process per case)
# --------------------------------------------------------------------------------------


def pipe_torch_child(job_path):
    with open(job_path) as f:
        job = json.load(f)
    import torch
    torch.set_num_threads(job["threads"])
    from safetensors.torch import save_file
    import diffusers
    import transformers
    from diffusers import StableDiffusionPipeline
    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.set_verbosity_error()

    rss_imports = proc_status_bytes("VmRSS")
    t0 = time.perf_counter()
    pipe = StableDiffusionPipeline.from_pretrained(job["model_dir"], torch_dtype=torch.float32, safety_checker=None,
                                                   feature_extractor=None, requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    load_s = time.perf_counter() - t0
    for comp in (pipe.unet, pipe.vae, pipe.text_encoder):
        for p in comp.parameters():
            assert p.dtype == torch.float32, p.dtype
    rss_loaded = proc_status_bytes("VmRSS")
    hwm_loaded = proc_status_bytes("VmHWM")
    weights = {name: sum(p.numel() * p.element_size() for p in comp.parameters())
               for name, comp in (("unet", pipe.unet), ("vae", pipe.vae), ("text_encoder", pipe.text_encoder))}

    marks = {}

    def unet_pre(module, args, kwargs):
        marks.setdefault("unet_first", time.perf_counter())
        marks["unet_calls"] = marks.get("unet_calls", 0) + 1
        s = args[0] if args else kwargs.get("sample")
        marks["unet_batch"] = int(s.shape[0])

    def text_pre(module, args):
        marks["text_t0"] = time.perf_counter()

    def text_post(module, args, out):
        marks["text_s"] = marks.get("text_s", 0.0) + time.perf_counter() - marks["text_t0"]

    pipe.unet.register_forward_pre_hook(unet_pre, with_kwargs=True)
    pipe.text_encoder.register_forward_pre_hook(text_pre)
    pipe.text_encoder.register_forward_hook(text_post)

    def call(steps):
        marks.clear()
        marks["step_end"] = []

        def on_step_end(p, i, t, kw):
            # PNDM (skip_prk_steps) runs steps + 1 iterations: the latents of the last callback are the final ones
            marks["step_end"].append(time.perf_counter())
            marks["latents"] = kw["latents"].detach().clone()
            return {}

        gen = torch.Generator().manual_seed(job["seed"])
        c0 = time.process_time()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = pipe(job["prompt"], negative_prompt=job["negative_prompt"], height=job["height"],
                       width=job["width"], num_inference_steps=steps, guidance_scale=job["guidance"], generator=gen,
                       output_type="pt", callback_on_step_end=on_step_end,
                       callback_on_step_end_tensor_inputs=["latents"])
        t1 = time.perf_counter()
        cpu = time.process_time() - c0
        ends = marks["step_end"]
        starts = [marks["unet_first"]] + ends[:-1]
        return {
            "total_s": t1 - t0,
            "cpus_used": cpu / max(t1 - t0, 1e-9),
            "text_s": marks["unet_first"] - t0,
            "text_encoder_s": marks.get("text_s"),
            "denoise_s": ends[-1] - marks["unet_first"],
            "iterations": len(ends),
            "steps": steps,
            "decode_s": t1 - ends[-1],
            "step_s": [b - a for a, b in zip(starts, ends)],
            "unet_calls": marks["unet_calls"],
            "unet_batch": marks["unet_batch"],
            "load": os.getloadavg()[0],
        }, out.images, marks["latents"]

    warm = None
    if job["warmup_steps"]:
        warm, _, _ = call(job["warmup_steps"])
    load_before = os.getloadavg()[0]
    timed, image, latents = call(job["steps"])
    hwm_end = proc_status_bytes("VmHWM")
    save_file({"image": image.to(torch.float32).contiguous(), "latents": latents.to(torch.float32).contiguous()},
              job["io_path"])
    result = {
        "torch_version": torch.__version__,
        "diffusers_version": diffusers.__version__,
        "transformers_version": transformers.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "parallel_info": [l.strip() for l in torch.__config__.parallel_info().splitlines()
                          if "Math Kernel" in l or "MKL-DNN" in l or "oneDNN" in l or "parallel backend" in l],
        "scheduler": type(pipe.scheduler).__name__,
        "scheduler_config": {k: v for k, v in dict(pipe.scheduler.config).items() if not k.startswith("_")},
        "attention_processors": sorted({type(m.processor).__name__ for _, m in pipe.unet.named_modules()
                                        if hasattr(m, "processor") and hasattr(m, "to_q")}),
        "load_s": load_s,
        "warmup": warm,
        "timed": timed,
        "load_before": load_before,
        "weights": weights,
        "rss_after_imports": rss_imports,
        "rss_after_load": rss_loaded,
        "hwm_after_load": hwm_loaded,
        "hwm_process": max(hwm_loaded or 0, hwm_end or 0),
        "image_std": float(image.std()),
        "image_saturated": float(((image <= 0) | (image >= 1)).float().mean()),
        "latents_std": float(latents.std()),
        "finite": bool(torch.isfinite(image).all() and torch.isfinite(latents).all()),
    }
    with open(job["result_path"], "w") as f:
        json.dump(result, f, indent=1)


def bench_pipe_torch(case, model_dir, io_path, args, python):
    job = {
        "model_dir": model_dir, "io_path": io_path,
        "result_path": os.path.join(WORK_DIR, f"{case['name']}.torch.json"),
        "threads": args.threads, "height": case["height"], "width": case["width"],
        "prompt": PROMPT, "negative_prompt": NEGATIVE_PROMPT, "seed": SEED, "steps": args.steps,
        "guidance": GUIDANCE, "warmup_steps": args.pipe_warmup_steps,
    }
    job_path = os.path.join(WORK_DIR, f"{case['name']}.torch_job.json")
    with open(job_path, "w") as f:
        json.dump(job, f, indent=1)
    if os.path.exists(job["result_path"]):
        os.remove(job["result_path"])
    rc, out, secs = run_proc([python, BENCH_SCRIPT, "--pipe-torch-child", job_path], args.torch_timeout,
                             os.path.join(WORK_DIR, f"{case['name']}.torch.log"), child_env(args.threads))
    if rc != 0 or not os.path.isfile(job["result_path"]):
        tail = "\n".join(out.strip().splitlines()[-15:])
        raise SystemExit(f"bench: the diffusers child for {case['name']} "
                         f"{'timed out' if rc is None else f'failed (exit {rc})'}:\n{tail}")
    with open(job["result_path"]) as f:
        res = json.load(f)
    res["proc_s"] = secs
    return res


# --------------------------------------------------------------------------------------
# diffc / diffrun's side
# --------------------------------------------------------------------------------------

# plan variants: name -> extra diffc arguments
VARIANTS = [("default", []), ("no-hoist", ["--no-hoist"]), ("offload-model", ["--offload", "model"])]


def parse_generation(text):
    res = {}
    m = re.search(r"image\(s\) (\d+)x(\d+): ([\d.]+) s \(text ([\d.]+) s, denoise ([\d.]+) s = ([\d.]+) s/step over "
                  r"(\d+) steps with (\d+) UNet runs, decode ([\d.]+) s\), (\S+), guidance ([\d.]+)", text)
    if m:
        res.update(total_s=float(m.group(3)), text_s=float(m.group(4)), denoise_s=float(m.group(5)),
                   step_s=float(m.group(6)), steps=int(m.group(7)), unet_runs=int(m.group(8)),
                   decode_s=float(m.group(9)), scheduler=m.group(10))
    m = re.search(r"device arena peak: (.*?) measured, (.*?) predicted by the plan; uploaded (.*?); host peak RSS: (.*)",
                  text)
    if m:
        res.update(arena_peak=parse_bytes(m.group(1)), arena_predicted=parse_bytes(m.group(2)),
                   uploaded=parse_bytes(m.group(3)), host_rss=parse_bytes(m.group(4)),
                   arena_peak_text=m.group(1).strip(), host_rss_text=m.group(4).strip())
    return res


def plan_facts(diffrun, plan):
    """From the plan's IR dump: the '# hoist = ...' line and other '# key = value' lines of interest;
    from --info, the whole text (kept in the log)."""
    facts = {"hoist": None, "ir_lines": []}
    try:
        ir = subprocess.run([diffrun, "--print-ir", plan], capture_output=True, text=True, timeout=300).stdout
    except (OSError, subprocess.SubprocessError):
        return facts
    for line in ir.splitlines():
        if line.startswith("#") and re.match(r"#\s*(hoist|peak|weights|offload|phases?|arena|device)\b", line):
            facts["ir_lines"].append(line.strip())
        if re.match(r"#\s*hoist\s*=", line):
            facts["hoist"] = line.strip()
    facts["ir_head"] = "\n".join(l for l in ir.splitlines() if l.startswith("#"))[:20000]
    try:
        facts["info"] = subprocess.run([diffrun, "--info", plan], capture_output=True, text=True,
                                       timeout=300).stdout[:20000]
    except (OSError, subprocess.SubprocessError):
        facts["info"] = ""
    return facts


def same_text(v):
    return "bit-identical" if v["identical"] else f"rel L2 {v['rel_l2']:.3g}"


def bench_pipe_diffrun(case, model_dir, args, variants):
    from safetensors.numpy import load_file
    from bench_diffrun import plan_target, rel_l2
    name = case["name"]
    out = {}
    for vname, extra in variants:
        res = {"status": "ok", "note": ""}
        out[vname] = res
        plan = os.path.join(WORK_DIR, f"{name}.{vname}.dplan")
        cmd = [args.diffc, model_dir, "-o", plan, "--height", str(case["height"]), "--width", str(case["width"])]
        cmd += extra + args.diffc_args_list
        res["diffc_cmd"] = show_cmd(cmd)
        log(f"  diffc ({vname}): {res['diffc_cmd']}")
        rc, text, secs = run_proc(cmd, args.timeout, os.path.join(WORK_DIR, f"{name}.{vname}.diffc.log"))
        res["compile_s"] = secs
        if rc != 0:
            res["status"] = "diffc failed" if rc is not None else f"diffc timeout (> {args.timeout:.0f} s)"
            res["note"] = failure_note(rc, text)
            log(f"  {res['status']}: {res['note']}")
            continue
        res["target"] = plan_target(args.diffrun, plan)
        res.update(plan_facts(args.diffrun, plan))
        with open(os.path.join(WORK_DIR, f"{name}.{vname}.plan.txt"), "w") as f:
            f.write(res.pop("ir_head", "") + "\n\n" + res.pop("info", ""))
        log(f"  compiled in {secs:.1f} s ({fmt_bytes(os.path.getsize(plan))} plan); {res['target']}; "
            f"{res['hoist'] or 'no hoist line'}")
        png = os.path.join(WORK_DIR, f"{name}.{vname}.png")
        outs = os.path.join(WORK_DIR, f"{name}.{vname}.safetensors")
        cmd = [args.diffrun, plan, "--prompt", PROMPT, "--negative-prompt", NEGATIVE_PROMPT, "--steps",
               str(args.steps), "--guidance", str(GUIDANCE), "--seed", str(SEED), "-o", png, "--outputs", outs,
               "--threads", str(args.threads)] + args.diffrun_args_list
        res["run_cmd"] = show_cmd(cmd)
        log(f"  diffrun ({vname}): {res['run_cmd']}")
        res["load_before"] = os.getloadavg()[0]
        rc, text, secs = run_proc(cmd, args.timeout, os.path.join(WORK_DIR, f"{name}.{vname}.run.log"),
                                  child_env(args.threads))
        res["load_after"] = os.getloadavg()[0]
        res["proc_s"], res["proc_cpu_s"] = secs, LAST_CPU[0]
        res["cpus_used"] = LAST_CPU[0] / max(secs, 1e-9)
        if rc != 0:
            res["status"] = "diffrun failed" if rc is not None else f"diffrun timeout (> {args.timeout:.0f} s)"
            res["note"] = failure_note(rc, text)
            log(f"  {res['status']}: {res['note']}")
            continue
        res.update(parse_generation(text))
        res["output_lines"] = [l for l in text.splitlines() if l.strip()][-8:]
        res["outputs"] = outs
        if "total_s" not in res:
            res["status"] = "unparsed"
            res["note"] = "diffrun's summary line was not found: " + " | ".join(res["output_lines"])
            log(f"  {res['note']}")
            continue
        log(f"  {res['total_s']:.2f} s/image (text {res['text_s']:.2f} s, denoise {res['step_s']:.3f} s/step, "
            f"decode {res['decode_s']:.2f} s; process {secs:.1f} s, {res['cpus_used']:.2f} CPUs); device arena "
            f"peak {fmt_bytes(res.get('arena_peak'))}, host peak RSS {fmt_bytes(res.get('host_rss'))}")
    # the images: the default plan against diffusers is done by the caller; the others against the default
    base = out.get("default", {})
    if base.get("outputs") and os.path.isfile(base["outputs"]):
        b = load_file(base["outputs"])
        for vname, res in out.items():
            if vname == "default" or not res.get("outputs") or not os.path.isfile(res["outputs"]):
                continue
            o = load_file(res["outputs"])
            res["vs_default"] = {k: {"rel_l2": rel_l2(o[k], b[k]), "identical": bool((o[k] == b[k]).all())}
                                 for k in ("image", "latents") if k in o and k in b}
            log(f"  {vname} vs default: " + ", ".join(f"{k} {same_text(v)}" for k, v in res["vs_default"].items()))
    return out
