#!/usr/bin/env python3
"""The DiT measurements of issue 14 that need PyTorch (not CTest): FLUX.1-dev's transformer cut to a
few blocks at full width (default 2 double + 4 single: every matrix the real model has, fewer of
them), one forward at 256x256 (256 packed image tokens + 512 text tokens), diffrun against diffusers'
FluxTransformer2DModel on the same weights, the same inputs and the same number of threads, one after
the other in one run:

  fp32   fp32 weights on both sides: time per forward (median of --repeat after a warm-up), the
         speed-up, rel L2 of the outputs;
  fp8    diffc --storage-dtype fp8_e4m3 against diffusers' enable_layerwise_casting(float8_e4m3fn,
         compute float32): the same fp8-rounded weights on both sides, rel L2 of the outputs (the
         check that stands in for the full 12-billion-parameter model, whose fp32 PyTorch forward
         does not fit in this machine's memory).

With --profile, diffrun runs each plan once more with --profile and its per-op table is kept.
The machine may be shared: the load average is recorded before and after each case, and the table
gives the speed-up of the medians and of the best runs.
Weights are seeded random (tools/make_model from a copy of bench/configs/flux1_dev_transformer.json
with fewer layers); nothing is downloaded.  Prints a markdown report and writes it to --out.

  bench/bench_dit.py --bin build-bench --work /work/bench-data/dit [--threads 2] [--repeat 3]
      [--double 2] [--single 4] [--profile] [--out bench/results-dit-speed.md]

bench/bench_dit.py --stats OUT.safetensors prints one line on a diffrun output (bench/dit_12b.sh).

Run with the fixtures' Python (torch, diffusers, safetensors, numpy): tools/python-env.sh.
"""

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tools"))

from bench_common import fmt_bytes  # noqa: E402
from bench_diffrun import parse_diffrun, rel_l2  # noqa: E402

FLUX_CONFIG = os.path.join(HERE, "configs", "flux1_dev_transformer.json")
ROWS = COLS = 16  # 256x256 image: 32x32 latents, packed 2x2 -> 16x16 tokens
TEXT_TOKENS = 512


def cpu_line():
    """CPU model, its vector ISA and the load average, as every figure must carry."""
    model = "unknown CPU"
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    isa = [f for f in ("avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "avx2", "fma") if f in flags]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} CPUs, flags {' '.join(isa)}; load average {load}"


def make_model(bin_dir, work, double, single):
    """A full-width FLUX.1-dev config with `double` + `single` blocks, fp32 random weights."""
    folder = os.path.join(work, f"flux_d{double}_s{single}")
    if os.path.exists(os.path.join(folder, "config.json")):
        return folder
    with open(FLUX_CONFIG) as f:
        cfg = json.load(f)
    cfg["num_layers"], cfg["num_single_layers"] = double, single
    os.makedirs(work, exist_ok=True)
    cfg_path = os.path.join(work, f"flux_d{double}_s{single}.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2)
    subprocess.run([os.path.join(bin_dir, "make_model"), cfg_path, folder, "--seed", "1", "-q"], check=True)
    return folder


def make_inputs(path):
    """Flux's forward inputs as FluxPipeline makes them at 256x256 (the fixtures' helper)."""
    from make_fixtures_dit import flux_inputs
    from safetensors.torch import save_file
    d = flux_inputs(seed=0, batch=1, channels=64, rows=ROWS, cols=COLS, seq=TEXT_TOKENS, joint_dim=4096,
                    pooled_dim=768, sigmas=[1.0], guidance=[3.5])
    save_file({k: v.contiguous() for k, v in d.items()}, path)


def torch_child(job):
    """Runs in its own process: load the model, warm up, time `repeat` forwards, save the output."""
    import torch
    from diffusers import FluxTransformer2DModel
    from safetensors.torch import load_file, save_file
    torch.set_num_threads(job["threads"])
    model = FluxTransformer2DModel.from_pretrained(job["model"], torch_dtype=torch.float32).eval()
    if job["fp8"]:
        model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.float32)
    inputs = load_file(job["inputs"])
    times = []
    with torch.inference_mode():
        for i in range(job["repeat"] + 1):
            t = time.perf_counter()
            out = model(**inputs).sample
            if i:
                times.append(time.perf_counter() - t)
    save_file({"sample": out.contiguous()}, job["outputs"])
    import resource
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    json.dump({"times": times, "rss": rss, "torch": torch.__version__, "threads": torch.get_num_threads(),
               "isa": torch.backends.cpu.get_cpu_capability()}, open(job["result"], "w"))


def run_torch(args, model, inputs, outputs, fp8):
    job = dict(model=model, inputs=inputs, outputs=outputs, fp8=fp8, threads=args.threads, repeat=args.repeat,
               result=outputs + ".json")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    subprocess.run([sys.executable, __file__, "--torch-child", json.dumps(job)], check=True, env=env)
    with open(job["result"]) as f:
        return json.load(f)


def compile_plan(args, model, plan, extra):
    inputs = [f"hidden_states=1x{ROWS * COLS}x64", f"encoder_hidden_states=1x{TEXT_TOKENS}x4096",
              "pooled_projections=1x768", "timestep=1", f"img_ids={ROWS * COLS}x3", f"txt_ids={TEXT_TOKENS}x3",
              "guidance=1"]
    argv = [os.path.join(args.bin, "diffc"), model, "-o", plan] + sum((["--input", i] for i in inputs), []) + extra
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t, argv


def run_diffrun(args, plan, inputs, outputs, extra=()):
    argv = [os.path.join(args.bin, "diffrun"), plan, "--inputs", inputs, "--outputs", outputs,
            "--threads", str(args.threads), "--repeat", str(args.repeat + 1), *extra]
    p = subprocess.run(argv, check=True, capture_output=True, text=True)
    return p.stdout + p.stderr, argv


def compare(a_path, b_path):
    from safetensors.numpy import load_file
    return rel_l2(load_file(a_path)["sample"], load_file(b_path)["sample"])


def case(args, model, io, name, diffc_flags, fp8):
    """One side-by-side case: the plan, diffrun (first run dropped), PyTorch, and their agreement."""
    plan = os.path.join(args.work, f"{name}.dplan")
    secs, compile_argv = compile_plan(args, model, plan, diffc_flags)
    print(f"bench_dit: {name}: compiled in {secs:.1f} s", flush=True)
    dr_out = os.path.join(args.work, f"{name}.diffrun.safetensors")
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text, run_argv = run_diffrun(args, plan, io, dr_out)
    dr = parse_diffrun(text)
    th_out = os.path.join(args.work, f"{name}.torch.safetensors")
    th = run_torch(args, model, io, th_out, fp8)
    row = dict(name=name, diffrun=statistics.median(dr["runs"][1:]), torch=statistics.median(th["times"]),
               diffrun_runs=dr["runs"], torch_runs=th["times"], rel_l2=compare(dr_out, th_out),
               diffrun_rss=dr["host_rss"], torch_rss=th["rss"], torch_version=th["torch"], torch_isa=th["isa"],
               compile_s=secs, load_before=load_before, cmd=" ".join(compile_argv[:3] + ["..."] + diffc_flags), run=" ".join(run_argv),
               cpu=cpu_line())
    print(f"bench_dit: {name}: diffrun {row['diffrun']:.2f} s, PyTorch {row['torch']:.2f} s, "
          f"x{row['torch'] / row['diffrun']:.2f}, rel L2 {row['rel_l2']:.2e}", flush=True)
    return row, plan


def report(args, rows, profile):
    lines = [f"Produced by `bench/bench_dit.py --threads {args.threads} --repeat {args.repeat} "
             f"--double {args.double} --single {args.single}` on {time.strftime('%Y-%m-%d', time.gmtime())}, "
             f"{platform.machine()}.", "",
             "| case | diffrun s/forward: median (runs) | PyTorch s/forward: median (runs) | speed-up, medians | "
             "speed-up, best runs | rel L2 (diffrun vs diffusers) | diffrun peak RSS | PyTorch peak RSS | "
             "load average before / after the case |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['diffrun']:.2f} ({', '.join(f'{x:.2f}' for x in r['diffrun_runs'][1:])}) "
                     f"| {r['torch']:.2f} ({', '.join(f'{x:.2f}' for x in r['torch_runs'])}) "
                     f"| {r['torch'] / r['diffrun']:.2f}x | {min(r['torch_runs']) / min(r['diffrun_runs'][1:]):.2f}x "
                     f"| {r['rel_l2']:.2e} | {fmt_bytes(r['diffrun_rss'])} | {fmt_bytes(r['torch_rss'])} "
                     f"| {r['load_before']} / {r['cpu'].split('load average ')[1]} |")
    lines.append("")
    if rows:
        lines.append(f"CPU: {rows[0]['cpu'].split('; load')[0]}.")
        lines.append(f"PyTorch {rows[0]['torch_version']}, ATen CPU capability {rows[0]['torch_isa']}, "
                     f"{args.threads} threads; diffrun --threads {args.threads}, plan for --cpu native.")
        for r in rows:
            lines.append(f"- {r['name']}: `{r['cmd']}` (compiled in {r['compile_s']:.1f} s); `{r['run']}`")
    for name, text in profile:
        lines += ["", f"diffrun --profile of the {name} plan (one run):", "", "```", text.rstrip(), "```"]
    return "\n".join(lines) + "\n"


def stats(path):
    """One line on an output file's "sample": shape, finite or not, mean and standard deviation."""
    import numpy as np
    from safetensors.numpy import load_file
    x = load_file(path)["sample"].astype(np.float64)
    finite = "all finite" if np.isfinite(x).all() else f"{int((~np.isfinite(x)).sum())} non-finite values"
    print(f"sample {list(x.shape)}: {finite}, mean {x.mean():.4f}, std {x.std():.4f}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--torch-child":
        return torch_child(json.loads(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "--stats":
        return stats(sys.argv[2])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(REPO, "build-bench"), help="folder with diffc, diffrun, make_model")
    ap.add_argument("--work", default=os.path.join(REPO, "build-bench", "dit"), help="models, plans, outputs")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="timed forwards per side, after one warm-up")
    ap.add_argument("--double", type=int, default=2, help="double-stream blocks")
    ap.add_argument("--single", type=int, default=4, help="single-stream blocks")
    ap.add_argument("--cases", default="fp32,fp8", help="comma-separated: fp32, fp8")
    ap.add_argument("--profile", action="store_true", help="also run the fp32 plan under diffrun --profile")
    ap.add_argument("--out", default=None, help="also write the report here")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model = make_model(args.bin, args.work, args.double, args.single)
    io = os.path.join(args.work, "inputs_256.safetensors")
    make_inputs(io)
    rows, plans, profile = [], [], []
    for name in args.cases.split(","):
        fp8 = name == "fp8"
        row, plan = case(args, model, io, name, ["--storage-dtype", "fp8_e4m3"] if fp8 else [], fp8)
        rows.append(row)
        plans.append((name, plan))
    if args.profile:
        saved, args.repeat = args.repeat, 0
        for name, plan in plans:
            text, _ = run_diffrun(args, plan, io, os.path.join(args.work, "profile.safetensors"), ["--profile"])
            profile.append((name, text))
        args.repeat = saved
    text = report(args, rows, profile)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
