"""make_fixtures' worker (tools/make_fixtures.py --worker JOB): the child process that loads a saved
model folder with from_pretrained, runs it in float32, times it (the fastest of TIMING_BLOCKS
blocks), measures its peak RSS, adds the outputs to the io file and writes its result for the parent.
"""

import json
import math
import resource
import time

import torch

from make_fixtures_clip import is_clip
from make_fixtures_common import NUM_THREADS, load_io, save_io
from make_fixtures_models import apply_vae_options, attention_summary, model_class, run_model

TIMING_BLOCKS = 7
TIMING_BLOCK_SECONDS = 0.25


def peak_rss_bytes():
    """Peak RSS of this process: VmHWM from /proc/self/status.  (getrusage's ru_maxrss is not used:
    across fork+exec it keeps the parent's high-water mark, here the generator's own ~800 MB.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def worker(job_path):
    with open(job_path) as f:
        job = json.load(f)
    torch.set_num_threads(NUM_THREADS)
    torch.use_deterministic_algorithms(True)
    cls = model_class(job["cls"])
    baseline_rss = peak_rss_bytes()  # torch + diffusers imported, no model yet
    # transformers 5 names it dtype (torch_dtype is its deprecated alias); diffusers torch_dtype
    kwargs = {"dtype" if is_clip(job["cls"]) else "torch_dtype": torch.float32}
    if job["variant"]:
        kwargs["variant"] = job["variant"]
    model = cls.from_pretrained(job["model_dir"], **kwargs)
    model.eval()
    for p in model.parameters():
        assert p.dtype == torch.float32, p.dtype
    apply_vae_options(model, job)  # after the check: layerwise casting stores the weights in fp8
    inputs = load_io(job["io_path"])
    # clone: tensors read from a safetensors file are not 64-byte aligned, and on this CPU that
    # changes float summation order (~1e-6) against freshly allocated tensors
    inputs = {k: v.clone() for k, v in inputs.items() if not k.startswith("out.")}

    hidden = job.get("clip_hidden")
    outs = run_model(model, job["kind"], job["entry"], inputs, hidden)  # warm-up; also the reference
    t0 = time.perf_counter()
    run_model(model, job["kind"], job["entry"], inputs, hidden)  # second warm-up, timed to size the blocks
    t_warm = time.perf_counter() - t0
    # The machine is shared, so one slow moment would spoil a plain mean: time TIMING_BLOCKS blocks
    # of `per_block` calls each and report the mean per call of the fastest block.
    per_block = max(5, min(20, int(math.ceil(TIMING_BLOCK_SECONDS / max(t_warm, 1e-6)))))
    times, block_means = [], []
    for _ in range(TIMING_BLOCKS):
        block = []
        for _ in range(per_block):
            t0 = time.perf_counter()
            again = run_model(model, job["kind"], job["entry"], inputs, hidden)
            block.append(time.perf_counter() - t0)
            for k in outs:
                if not torch.equal(outs[k], again[k]):
                    raise SystemExit(f"worker: {k} is not reproducible between repeats")
        times += block
        block_means.append(sum(block) / len(block))
    rss = peak_rss_bytes()
    save_io(job["io_path"], {**inputs, **outs})
    result = {
        "diffusers_seconds": min(block_means),
        "diffusers_seconds_median": sorted(times)[len(times) // 2],
        "repeats": f"{TIMING_BLOCKS}x{per_block}",
        "diffusers_peak_rss_bytes": rss,
        "diffusers_baseline_rss_bytes": baseline_rss,
        "attention": attention_summary(model),
    }
    with open(job["result_path"], "w") as f:
        json.dump(result, f)
