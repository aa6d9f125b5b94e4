"""The diffc/diffrun side of the bench (bench/bench.py): compile a case's plan, run it on the
PyTorch child's inputs and compare (relative L2), then time it with --repeat unless one run was
slower than --slow-limit; what the diffrun binary supports and which CPU a plan targets.
"""

import os
import re
import shlex
import statistics
import subprocess

import bench_common as common
from bench_common import (ISA_DIFFC_CPU, LAST_CPU, WORK_DIR, child_env, failure_note, fmt_bytes, log, parse_bytes,
                          run_proc, show_cmd)


def plan_target(diffrun, plan):
    """The 'target:' line of diffrun --info: which CPU the plan's kernels were compiled for."""
    try:
        out = subprocess.run([diffrun, "--info", plan], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^target:.*? for (\S+), cpu (\S+)", out, re.M)
    return f"cpu {m.group(2)} ({m.group(1)})" if m else None


def parse_diffrun(text):
    runs = []
    for m in re.finditer(r"^run (\d+): ([\d.eE+-]+)\s*(ms|s)\b", text, re.M):
        v = float(m.group(2))
        runs.append(v / 1000.0 if m.group(3) == "ms" else v)
    res = {"runs": runs, "arena_peak": None, "arena_predicted": None, "host_rss": None, "weights": None}
    m = re.search(r"device arena peak:\s*(.*)", text)
    if m:
        line = m.group(1)
        b = re.search(r"\((\d+) bytes\)", line)
        res["arena_peak"] = int(b.group(1)) if b else parse_bytes(line)
        p = re.search(r"measured,\s*(.*?) predicted", line)
        res["arena_predicted"] = parse_bytes(p.group(1)) if p else None
        res["arena_mismatch"] = "MISMATCH" in line
    m = re.search(r"host peak RSS:\s*(.*)", text)
    if m:
        res["host_rss"] = parse_bytes(m.group(1))
    m = re.search(r"weights:\s*(.*?) resident", text)
    if m:
        res["weights"] = parse_bytes(m.group(1))
    return res


def rel_l2(a, b):
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return None
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def diffrun_features(diffrun):
    try:
        help_text = subprocess.run([diffrun, "--help"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        help_text = ""
    return {"threads": "--threads" in help_text, "help": help_text}


def bench_diffrun(case, model_dir, io_path, args, feats, flops):
    """Compile, check and time one case.  Returns a dict (see the keys below)."""
    from safetensors.numpy import load_file
    name = case["name"]
    res = {"compile_s": None, "status": "ok", "note": "", "times": [], "median_s": None,
           "first_run_s": None, "rel_l2": None, "arena_peak": None, "host_rss": None}
    plan = os.path.join(WORK_DIR, f"{name}.dplan")
    cmd = [args.diffc, model_dir, "-o", plan]
    if case["kind"] == "vae":
        cmd += ["--entry", case["entry"]]
    for k, shape in case["inputs"].items():
        cmd += ["--input", f"{k}={'x'.join(map(str, shape))}"]
    if ISA_DIFFC_CPU[common.ISA] and "--cpu" not in shlex.split(args.diffc_args):
        cmd += ["--cpu", ISA_DIFFC_CPU[common.ISA]]
    cmd += shlex.split(args.diffc_args)
    res["diffc_cmd"] = show_cmd(cmd)
    log(f"  diffc: {res['diffc_cmd']}")
    rc, out, secs = run_proc(cmd, args.timeout, os.path.join(WORK_DIR, f"{name}.diffc.log"))
    res["compile_s"] = secs
    if rc != 0:
        res["status"] = "diffc failed" if rc is not None else f"diffc timeout (> {args.timeout:.0f} s)"
        res["note"] = failure_note(rc, out)
        log(f"  {res['status']}: {res['note']}")
        return res
    res["target"] = plan_target(args.diffrun, plan)
    log(f"  compiled in {secs:.2f} s ({fmt_bytes(os.path.getsize(plan))} plan); {res['target']}")

    run_args = []
    if feats["threads"]:
        run_args += ["--threads", str(args.threads)]
    if args.backend:
        run_args += ["--backend", args.backend]
    run_args += shlex.split(args.diffrun_args)
    env = child_env(args.threads)

    # 1. correctness: PyTorch's inputs in, outputs out; its time decides about the timed runs
    dout = os.path.join(WORK_DIR, f"{name}.diffrun_out.safetensors")
    cmd = [args.diffrun, plan, "--inputs", io_path, "--outputs", dout] + run_args
    res["check_cmd"] = show_cmd(cmd)
    log(f"  diffrun (check): {res['check_cmd']}")
    rc, out, secs = run_proc(cmd, args.timeout, os.path.join(WORK_DIR, f"{name}.check.log"), env)
    if rc is None:
        res["status"] = "too slow"
        res["note"] = f"one run did not finish within the {args.timeout:.0f} s timeout"
        log(f"  too slow: {res['note']}")
        return res
    if rc != 0:
        res["status"] = "diffrun failed"
        res["note"] = failure_note(rc, out)
        log(f"  diffrun failed: {res['note']}")
        return res
    parsed = parse_diffrun(out)
    res["arena_peak"], res["host_rss"] = parsed["arena_peak"], parsed["host_rss"]
    res["weights"] = parsed["weights"]
    res["first_run_s"] = parsed["runs"][0] if parsed["runs"] else secs
    io = load_file(io_path)
    got = load_file(dout)
    if "sample" not in got:
        res["note"] = f"no 'sample' in diffrun's outputs ({sorted(got)})"
    else:
        res["rel_l2"] = rel_l2(got["sample"], io["out.sample"])
        if res["rel_l2"] is None:
            res["status"] = "wrong shape"
            res["note"] = f"diffrun's sample is {list(got['sample'].shape)}, PyTorch's {list(io['out.sample'].shape)}"
    log(f"  one run: {res['first_run_s']:.3f} s; rel L2 vs PyTorch {res['rel_l2']:.3g}"
        if res["rel_l2"] is not None else f"  one run: {res['first_run_s']:.3f} s; {res['note']}")

    # 2. timing
    t1 = res["first_run_s"]
    if t1 > args.slow_limit:
        res["status"] = "too slow"
        res["times"] = [t1]
        res["median_s"] = t1
        res["note"] = f"1 run of {t1:.1f} s (> {args.slow_limit:.0f} s: repeats skipped)"
        log(f"  too slow: {res['note']}")
        return res
    if args.repeat:
        n = args.repeat
    else:
        n = int(max(args.min_repeat, min(args.max_repeat, args.budget // max(t1, 1e-6))))
    cmd = [args.diffrun, plan, "--random-inputs", "--seed", "0", "--repeat", str(n + 1)] + run_args
    res["time_cmd"] = show_cmd(cmd)
    log(f"  diffrun (timing): {res['time_cmd']}")
    rc, out, secs = run_proc(cmd, max(args.timeout, (n + 1) * t1 * 3 + 60),
                             os.path.join(WORK_DIR, f"{name}.time.log"), env)
    if rc != 0:
        res["status"] = "too slow" if rc is None else "diffrun failed"
        res["note"] = "timed runs timed out" if rc is None else "timed runs: " + failure_note(rc, out)
        res["times"] = [t1]
        res["median_s"] = t1
        log(f"  {res['status']}: {res['note']}")
        return res
    parsed = parse_diffrun(out)
    res["time_proc_s"], res["time_proc_cpu_s"] = secs, LAST_CPU[0]
    res["all_runs"] = parsed["runs"]
    res["times"] = parsed["runs"][1:] if len(parsed["runs"]) > 1 else parsed["runs"]
    res["median_s"] = statistics.median(res["times"]) if res["times"] else None
    for k in ("arena_peak", "host_rss", "weights"):
        if parsed[k] is not None:
            res[k] = parsed[k]
    res["arena_predicted"] = parsed["arena_predicted"]
    res["arena_mismatch"] = parsed.get("arena_mismatch", False)
    if res["median_s"]:
        log(f"  diffrun: {res['median_s']:.3f} s/forward median of {len(res['times'])} "
            f"({flops / 1e9 / res['median_s']:.1f} GFLOP/s)")
    return res
