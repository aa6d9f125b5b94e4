#!/usr/bin/env python3
"""Side-by-side CPU benchmark: diffc + diffrun against PyTorch/diffusers.

Normally run through bench/run.sh, which sets up the virtual environment and builds diffc in
Release into build-bench/.  For every case, in one run:

  1. PyTorch (a fresh child process per case): diffusers loads the model folder, fp32,
     torch.no_grad(), N threads; one forward under FlopCounterMode (FLOPs and the aten ops it
     ran, e.g. which SDPA kernel), a timed warm-up, then the median of N timed forwards.  Peak
     memory is the child's VmHWM (/proc/self/status) next to its RSS after the imports.  The
     child saves its seeded inputs and its output to an io .safetensors file.
  2. diffc compiles the model to a plan for the case's shapes; diffrun runs it once on the same
     inputs (--inputs io --outputs), and the output is compared with PyTorch's (relative L2).
     That run's time decides whether to time it more: if it took longer than --slow-limit
     seconds the case is reported as "too slow" with that one run, otherwise a second diffrun
     process runs --random-inputs --repeat N+1 and the median of runs 2..N+1 is reported (run 1
     is the warm-up, as for PyTorch).  Every diffrun process has a hard --timeout.
  3. A markdown table (and per-case details) is printed and written to bench/results.md.

--isa avx2 runs both sides at AVX2 on a machine that has more: the PyTorch children get
ATEN_CPU_CAPABILITY=avx2, DNNL_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2 (a probe child with
ONEDNN_VERBOSE and MKL_VERBOSE checks that all three took, else the bench stops), diffc gets
--cpu x86-64-v3; the results (bench/results-avx2.md) record what each side ran.

Models are built from configs with seeded random weights (nothing is downloaded) and saved as
diffusers folders under bench/models/, reused when present.  Work files (plans, io files, logs,
results.json) go to build-bench/bench/.

Cases are named by model and size: unetS (UNet, S x S latent, batch 2, 77 tokens) or unetHxW;
vaeS (VAE decode to an S x S image, z 1x4x(S/8)x(S/8)) or vaeHxW; pipeS or pipeHxW (the whole SD1.5
pipeline, prompt to an S x S image, against diffusers' StableDiffusionPipeline: bench_pipeline.py;
results in bench/results-pipeline.md; pipeline cases run on their own, not mixed with the others).
"""

# This file is the entry point (main and the children's dispatch); the parts are beside it:
# bench_models.py (configs, cases, building a model), bench_torch.py (the PyTorch side),
# bench_diffrun.py (the diffc/diffrun side), bench_report.py (the report), bench_common.py (what
# they share: paths, the log, running a child).

import argparse
import datetime
import json
import os
import shlex
import sys
import time

import bench_common as common
from bench_common import BENCH_DIR, ISA_DIFFC_CPU, ISA_TORCH_ENV, REPO, WORK_DIR, fmt_bytes, log, show_cmd
from bench_diffrun import bench_diffrun, diffrun_features
from bench_models import DEFAULT_CASES, QUICK_CASES, ensure_model, make_model_child, parse_case
from bench_pipeline import PIPE_DEFAULT_CASES, STEPS, VARIANTS, is_pipe_case, make_pipeline_child, pipe_torch_child
from bench_report import git_info, machine_info, markdown_table, table_rows, write_results
from bench_torch import bench_torch, torch_child, torch_isa

# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--quick", action="store_true",
                    help=f"only {' and '.join(QUICK_CASES)}, 2 timed runs each: a sanity check")
    ap.add_argument("--sizes", nargs="+", metavar="CASE",
                    help=f"cases to run, e.g. unet32 unet64 vae256 vae512 (default: {' '.join(DEFAULT_CASES)}; "
                         "or the environment variable DIFFC_BENCH_SIZES; commas also separate)")
    ap.add_argument("--diffc", default=os.path.join(REPO, "build-bench", "diffc"))
    ap.add_argument("--diffrun", default=os.path.join(REPO, "build-bench", "diffrun"))
    ap.add_argument("--threads", type=int, default=2, help="threads for both sides (default 2)")
    ap.add_argument("--repeat", type=int, default=0, help="timed runs per side (default: by --budget)")
    ap.add_argument("--min-repeat", type=int, default=3)
    ap.add_argument("--max-repeat", type=int, default=10)
    ap.add_argument("--budget", type=float, default=30.0,
                    help="seconds of timed runs to aim for per side and case (default 30)")
    ap.add_argument("--slow-limit", type=float, default=120.0,
                    help="if one diffrun run takes longer, skip its repeats and report 'too slow' (default 120)")
    ap.add_argument("--timeout", type=float, default=900.0,
                    help="hard limit in seconds for one diffc or one diffrun process (default 900)")
    ap.add_argument("--torch-timeout", type=float, default=1800.0)
    ap.add_argument("--torch-only", action="store_true", help="skip diffc/diffrun")
    ap.add_argument("--no-pin", dest="pin", action="store_false",
                    help="on a machine with more CPUs than --threads, do not pin the children to the first --threads CPUs")
    ap.add_argument("--backend", default="", help="diffrun --backend NAME")
    ap.add_argument("--diffrun-args", default="", help="extra diffrun arguments (one string)")
    ap.add_argument("--diffc-args", default="", help="extra diffc arguments (one string)")
    ap.add_argument("--isa", choices=sorted(ISA_TORCH_ENV), default="native",
                    help="instruction set for both sides: native (default: all this CPU has) or avx2 (PyTorch "
                         "through ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2, "
                         "diffc --cpu x86-64-v3), so an AVX-512 machine measures AVX2 code on both sides")
    ap.add_argument("--results", default=None,
                    help="markdown results file (default bench/results.md, with --isa avx2 "
                         "bench/results-avx2.md; '' for none)")
    ap.add_argument("--pipeline", action="store_true",
                    help=f"the pipeline cases: {' '.join(PIPE_DEFAULT_CASES)} (unless --sizes names pipeS cases)")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"pipeline cases: denoising steps (default {STEPS})")
    ap.add_argument("--pipe-warmup-steps", type=int, default=2,
                    help="pipeline cases: steps of diffusers' warm-up call before the timed one (default 2; 0: none)")
    ap.add_argument("--pipe-variants", nargs="+", default=[v for v, _ in VARIANTS], choices=[v for v, _ in VARIANTS],
                    help="pipeline cases: the diffc plans to compile and run (default: all: default, no-hoist, "
                         "offload-model)")
    ap.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    args = ap.parse_args()
    common.ISA = args.isa
    args.diffc_args_list = shlex.split(args.diffc_args)
    args.diffrun_args_list = shlex.split(args.diffrun_args)

    if args.sizes:
        names = [s for x in args.sizes for s in x.split(",") if s]
    elif args.pipeline:
        names = PIPE_DEFAULT_CASES
    elif os.environ.get("DIFFC_BENCH_SIZES"):
        names = os.environ["DIFFC_BENCH_SIZES"].replace(",", " ").split()
    else:
        names = QUICK_CASES if args.quick else DEFAULT_CASES
    if any(is_pipe_case(n) for n in names):
        if not all(is_pipe_case(n) for n in names):
            raise SystemExit("bench: pipeline cases (pipeS) run on their own: give them in a separate run")
        if args.isa != "native":
            raise SystemExit("bench: pipeline cases run at --isa native only")
        if args.results is None:
            args.results = os.path.join(BENCH_DIR, "results-pipeline.md")
        if not args.torch_only:
            for exe in (args.diffc, args.diffrun):
                if not os.access(exe, os.X_OK):
                    raise SystemExit(f"bench: {exe} not found: build it (bench/run.sh does) or pass --diffc/--diffrun")
        from bench_pipeline_report import run_pipeline_bench
        return run_pipeline_bench(args, names)
    if args.results is None:
        args.results = os.path.join(BENCH_DIR, "results.md" if args.isa == "native" else f"results-{args.isa}.md")
    if args.quick and not args.repeat:
        args.repeat = 2
    cases = [parse_case(n) for n in names]

    started = datetime.datetime.now(datetime.timezone.utc)
    t_start = time.perf_counter()
    machine = machine_info()
    machine["git"] = git_info()  # now, as run.sh has just built this tree
    command = os.environ.get("DIFFC_BENCH_COMMAND") or show_cmd([sys.executable] + sys.argv)
    os.makedirs(WORK_DIR, exist_ok=True)
    log(f"bench: {machine['cpu']}, nproc {machine['nproc']}, load average {machine['load'][0]:.2f}; "
        f"cases {' '.join(c['name'] for c in cases)}; {args.threads} threads")
    if machine["load"][0] > args.threads + 0.5:
        log(f"bench: note: the load average is {machine['load'][0]:.2f}: other work on this machine will "
            "perturb the timings")
    avail = sorted(os.sched_getaffinity(0))
    if args.pin and len(avail) > args.threads:
        common.PIN_CPUS = set(avail[:args.threads])
        log(f"bench: pinning both sides to CPUs {sorted(common.PIN_CPUS)} (of {len(avail)}; --no-pin to leave them free)")
    feats = {"threads": False, "help": ""}
    if not args.torch_only:
        for exe in (args.diffc, args.diffrun):
            if not os.access(exe, os.X_OK):
                raise SystemExit(f"bench: {exe} not found: build it (bench/run.sh does) or pass --diffc/--diffrun")
        feats = diffrun_features(args.diffrun)
        if not feats["threads"] and (machine["nproc"] or 0) != args.threads:
            log(f"bench: note: diffrun has no --threads option and this machine has {machine['nproc']} CPUs, "
                f"not {args.threads}")

    if args.isa == "avx2" and "avx2" not in machine["flags"].split():
        raise SystemExit("bench: --isa avx2: this CPU has no AVX2")
    isa = torch_isa(args.python, args.threads)
    log(f"bench: --isa {args.isa}: PyTorch runs ATen {isa['aten']}, oneDNN {isa['onednn']} ({isa['conv_impl']}), "
        f"MKL {isa['mkl']}; diffc --cpu {ISA_DIFFC_CPU[args.isa] or 'native'}")
    if args.isa == "avx2" and (isa["aten"] != "AVX2" or "AVX2" not in isa["onednn"] or "AVX2" not in isa["mkl"]
                               or "512" in isa["onednn"] + isa["mkl"]):
        raise SystemExit(f"bench: --isa avx2: PyTorch did not take the restriction to AVX2: {isa}")
    model_dirs = {}
    results = []
    for case in cases:
        if case["model"] not in model_dirs:
            model_dirs[case["model"]] = ensure_model(case["model"], args.python)
        model_dir = model_dirs[case["model"]]
        load = os.getloadavg()[0]
        log(f"== {case['name']}: {case['desc']} (load average {load:.2f})")
        io_path = os.path.join(WORK_DIR, f"{case['name']}.io.safetensors")
        t = bench_torch(case, model_dir, io_path, args, args.python)
        log(f"  PyTorch: {t['median_s']:.3f} s/forward median of {len(t['times'])}, "
            f"{t['flops'] / 1e9:.1f} GFLOP, {t['flops'] / 1e9 / t['median_s']:.1f} GFLOP/s, "
            f"peak RSS {fmt_bytes(t['hwm_process'])} ({fmt_bytes(t['rss_after_imports'])} after imports); "
            f"attention {', '.join(t['attention_ops']) or 'none'}; output std {t['out_std']:.3f}")
        if t["cpus_used"] < 0.85 * args.threads:
            log(f"  WARNING: PyTorch got only {t['cpus_used']:.2f} of {args.threads} CPUs on average: the machine is "
                "busy and every timing of this run is inflated")
        if not t["out_finite"]:
            log("  WARNING: PyTorch's output has non-finite values")
        r = {"case": case, "torch": t, "diffrun": None, "load": load}
        if not args.torch_only:
            r["diffrun"] = bench_diffrun(case, model_dir, io_path, args, feats, t["flops"])
        results.append(r)
        with open(os.path.join(WORK_DIR, "results.json"), "w") as f:
            json.dump(results, f, indent=1)

    wall = time.perf_counter() - t_start
    head, rows = table_rows(results)
    log("")
    log(markdown_table(head, rows))
    if args.results:
        write_results(args.results, args, results, machine, started, wall, command, feats, isa)
        log(f"\nbench: wrote {os.path.relpath(args.results, os.getcwd())} "
            f"(and {os.path.relpath(os.path.join(WORK_DIR, 'results.json'), os.getcwd())}); "
            f"{wall / 60:.1f} min")
    bad = [r["case"]["name"] for r in results
           if r["diffrun"] and r["diffrun"].get("rel_l2") is not None and r["diffrun"]["rel_l2"] > 1e-4]
    failed = [r["case"]["name"] for r in results
              if r["diffrun"] and r["diffrun"]["status"] not in ("ok", "too slow")]
    if bad:
        log(f"bench: WARNING: rel L2 above 1e-4 on {' '.join(bad)}")
    if failed:
        log(f"bench: diffc or diffrun failed on {' '.join(failed)} (logs in {os.path.relpath(WORK_DIR, os.getcwd())})")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "--make-model":
        make_model_child(sys.argv[2], sys.argv[3])
    elif len(sys.argv) >= 2 and sys.argv[1] == "--torch-child":
        torch_child(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "--make-pipeline":
        make_pipeline_child(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "--pipe-torch-child":
        pipe_torch_child(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "--pipe-report":
        # the pipeline cases' markdown again from runs' JSON files: --pipe-report OUT.md JSON...
        from bench_pipeline_report import rerender
        rerender(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(main())
