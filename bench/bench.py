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
vaeS (VAE decode to an S x S image, z 1x4x(S/8)x(S/8)) or vaeHxW.
"""

import argparse
import datetime
import json
import math
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_DIR = os.path.join(REPO, "bench")
MODELS_DIR = os.path.join(BENCH_DIR, "models")
WORK_DIR = os.path.join(REPO, "build-bench", "bench")

DEFAULT_CASES = ["unet32", "unet64", "vae256", "vae512"]
QUICK_CASES = ["unet32", "vae256"]

# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------

# Stable Diffusion 1.5's UNet at full width
UNET_SD15 = {
    "in_channels": 4,
    "out_channels": 4,
    "block_out_channels": [320, 640, 1280, 1280],
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "layers_per_block": 2,
    "attention_head_dim": 8,
    "cross_attention_dim": 768,
    "norm_num_groups": 32,
    "norm_eps": 1e-5,
    "sample_size": 64,
    "flip_sin_to_cos": True,
    "freq_shift": 0,
    "downsample_padding": 1,
    "act_fn": "silu",
}

# The SD VAE (AutoencoderKL) at full width
VAE_SD = {
    "in_channels": 3,
    "out_channels": 3,
    "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
    "layers_per_block": 2,
    "latent_channels": 4,
    "norm_num_groups": 32,
    "act_fn": "silu",
    "sample_size": 512,
    "scaling_factor": 0.18215,
}

MODELS = {
    "unet-sd15": dict(cls="UNet2DConditionModel", config=UNET_SD15, seed=15),
    "vae-sd": dict(cls="AutoencoderKL", config=VAE_SD, seed=16),
}

UNET_BATCH, UNET_TOKENS, UNET_TIMESTEPS = 2, 77, [500.0, 500.0]


def parse_case(name):
    """'unet32' / 'unet32x48' / 'vae256' / 'vae256x384' -> case dict."""
    m = re.fullmatch(r"(unet|vae)(\d+)(?:x(\d+))?", name)
    if not m:
        raise SystemExit(f"bench: bad case {name!r}: expected unetS, unetHxW, vaeS or vaeHxW (e.g. unet32, vae256)")
    kind, h = m.group(1), int(m.group(2))
    w = int(m.group(3)) if m.group(3) else h
    if kind == "unet":
        if h % 8 or w % 8:
            raise SystemExit(f"bench: {name}: UNet latent sides must be multiples of 8 (three downsamplers)")
        c = UNET_SD15["cross_attention_dim"]
        inputs = {"sample": [UNET_BATCH, 4, h, w], "timestep": [UNET_BATCH],
                  "encoder_hidden_states": [UNET_BATCH, UNET_TOKENS, c]}
        desc = f"SD1.5 UNet, latent {UNET_BATCH}x4x{h}x{w}, {UNET_TOKENS} tokens"
        return dict(name=name, model="unet-sd15", kind="unet", entry="forward", inputs=inputs, desc=desc)
    if h % 8 or w % 8:
        raise SystemExit(f"bench: {name}: VAE output sides must be multiples of 8")
    inputs = {"z": [1, 4, h // 8, w // 8]}
    desc = f"SD VAE decode, z 1x4x{h // 8}x{w // 8} -> 1x3x{h}x{w}"
    return dict(name=name, model="vae-sd", kind="vae", entry="decode", inputs=inputs, desc=desc)


# --------------------------------------------------------------------------------------
# Helpers shared by the parent and the children
# --------------------------------------------------------------------------------------


def proc_status_bytes(field):
    """A memory field of /proc/self/status (VmRSS, VmHWM, ...) in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def show_cmd(argv):
    """A command line as text, with paths inside the repository relative to its root."""
    return " ".join(shlex.quote(a) for a in argv).replace(REPO + os.sep, "")


def fmt_bytes(n):
    if n is None:
        return "n/a"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= div:
            return f"{n / div:.2f} {unit}"
    return f"{n} B"


def parse_bytes(text):
    """'1.5 GiB' / '123 B' / '12.0 MiB' -> bytes (approximate for the rounded human forms)."""
    m = re.match(r"\s*([\d.]+)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\b", text)
    if not m:
        return None
    mult = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
            "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(2)]
    return int(float(m.group(1)) * mult)


def log(msg=""):
    print(msg, flush=True)


# --------------------------------------------------------------------------------------
# Child: build and save a model (seeded random weights)
# --------------------------------------------------------------------------------------


def reinit_weights(model, seed):
    """Seeded re-initialisation, as tools/make_fixtures.py: conv/linear weights N(0, 1/fan_in),
    biases 0.05*N(0,1), norm weights 1 + 0.1*N(0,1), norm biases 0.1*N(0,1)."""
    import torch
    from torch import nn
    g = torch.Generator().manual_seed(1000003 * seed + 17)
    done = set()
    with torch.no_grad():
        for _, m in model.named_modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                fan_in = m.weight[0].numel()
                m.weight.copy_(torch.randn(*m.weight.shape, generator=g) / math.sqrt(fan_in))
                done.add(id(m.weight))
                if m.bias is not None:
                    m.bias.copy_(0.05 * torch.randn(*m.bias.shape, generator=g))
                    done.add(id(m.bias))
            elif isinstance(m, (nn.GroupNorm, nn.LayerNorm)):
                if m.weight is not None:
                    m.weight.copy_(1.0 + 0.1 * torch.randn(*m.weight.shape, generator=g))
                    done.add(id(m.weight))
                if m.bias is not None:
                    m.bias.copy_(0.1 * torch.randn(*m.bias.shape, generator=g))
                    done.add(id(m.bias))
    missed = [n for n, p in model.named_parameters() if id(p) not in done]
    if missed:
        raise SystemExit(f"reinit_weights: parameters not re-initialised: {missed}")


def model_class(name):
    import diffusers
    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()
    return getattr(diffusers, name)


def model_stamp(name):
    spec = MODELS[name]
    return {"class": spec["cls"], "config": spec["config"], "seed": spec["seed"], "init": "fan_in-v1"}


def make_model_child(name, out_dir):
    import torch
    spec = MODELS[name]
    torch.manual_seed(spec["seed"])
    model = model_class(spec["cls"])(**spec["config"])
    reinit_weights(model, spec["seed"])
    model.eval()
    nparams = sum(p.numel() for p in model.parameters())
    tmp = out_dir + ".tmp"
    if os.path.isdir(tmp):
        shutil.rmtree(tmp)
    model.save_pretrained(tmp)
    with open(os.path.join(tmp, "bench_model.json"), "w") as f:
        json.dump(dict(model_stamp(name), parameters=nparams), f, indent=2)
        f.write("\n")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.rename(tmp, out_dir)
    print(f"  {spec['cls']}: {nparams / 1e6:.1f} M parameters, saved to {os.path.relpath(out_dir, REPO)}")


def ensure_model(name, python):
    out_dir = os.path.join(MODELS_DIR, name)
    stamp_path = os.path.join(out_dir, "bench_model.json")
    if os.path.isfile(stamp_path):
        with open(stamp_path) as f:
            have = json.load(f)
        have.pop("parameters", None)
        if json.loads(json.dumps(model_stamp(name))) == have:
            log(f"model {name}: reusing {os.path.relpath(out_dir, REPO)}")
            return out_dir
        log(f"model {name}: {os.path.relpath(out_dir, REPO)} was made from another config; rebuilding")
    else:
        log(f"model {name}: building with seeded random weights")
    os.makedirs(MODELS_DIR, exist_ok=True)
    t0 = time.perf_counter()
    subprocess.run([python, os.path.abspath(__file__), "--make-model", name, out_dir], check=True,
                   env=child_env(2))
    log(f"  ({time.perf_counter() - t0:.0f} s)")
    return out_dir


# --------------------------------------------------------------------------------------
# Child: the PyTorch side of one case
# --------------------------------------------------------------------------------------


def make_inputs(case):
    import torch
    g = torch.Generator().manual_seed(1234 if case["kind"] == "unet" else 4321)
    out = {}
    for name, shape in case["inputs"].items():
        if name == "timestep":
            out[name] = torch.tensor(UNET_TIMESTEPS[:shape[0]], dtype=torch.float32)
        else:
            out[name] = torch.randn(*shape, generator=g, dtype=torch.float32)
    return out


def torch_forward(model, case, inputs):
    if case["kind"] == "unet":
        return model(inputs["sample"], inputs["timestep"], inputs["encoder_hidden_states"]).sample
    return model.decode(inputs["z"]).sample


def torch_child(job_path):
    with open(job_path) as f:
        job = json.load(f)
    case = job["case"]
    import torch
    torch.set_num_threads(job["threads"])
    from torch.utils.flop_counter import FlopCounterMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from safetensors.torch import save_file
    cls = model_class(job["cls"])
    import diffusers

    rss_imports = proc_status_bytes("VmRSS")
    hwm_imports = proc_status_bytes("VmHWM")
    t0 = time.perf_counter()
    model = cls.from_pretrained(job["model_dir"], torch_dtype=torch.float32)
    model.eval()
    load_s = time.perf_counter() - t0
    for p in model.parameters():
        assert p.dtype == torch.float32, p.dtype
    rss_loaded = proc_status_bytes("VmRSS")
    hwm_loaded = proc_status_bytes("VmHWM")
    # Reset the high-water mark (Linux >= 4.0) so that the forward-only peak can be reported too.
    hwm_reset = False
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        hwm_reset = True
    except OSError:
        pass

    inputs = make_inputs(case)

    class OpRecorder(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = str(func.overloadpacket)
            self.ops[name] = self.ops.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    # 1. FLOPs of one forward (also the first warm-up)
    with torch.no_grad():
        rec = OpRecorder()
        fc = FlopCounterMode(display=False)
        t0 = time.perf_counter()
        with fc, rec:
            torch_forward(model, case, inputs)
        flop_run_s = time.perf_counter() - t0
    flops = int(fc.get_total_flops())
    flops_by_op = {str(k): int(v) for k, v in fc.get_flop_counts().get("Global", {}).items()}
    attn_ops = sorted(k for k in rec.ops if "attention" in k or "softmax" in k)
    processors = sorted({type(m.processor).__name__ for _, m in model.named_modules()
                         if hasattr(m, "processor") and hasattr(m, "to_q")})

    # 2. a timed warm-up, which is also the reference output, then N timed forwards
    with torch.no_grad():
        t0 = time.perf_counter()
        out = torch_forward(model, case, inputs)
        warm_s = time.perf_counter() - t0
        if job["repeat"]:
            n = job["repeat"]
        else:
            n = int(max(job["min_repeat"], min(job["max_repeat"], job["budget_s"] // max(warm_s, 1e-6))))
        times, cpu = [], 0.0
        for _ in range(n):
            c0 = time.process_time()
            t0 = time.perf_counter()
            torch_forward(model, case, inputs)
            times.append(time.perf_counter() - t0)
            cpu += time.process_time() - c0
    hwm_end = proc_status_bytes("VmHWM")

    tensors = {k: v.contiguous() for k, v in inputs.items()}
    tensors["out.sample"] = out.detach().to(torch.float32).contiguous()
    save_file(tensors, job["io_path"])
    result = {
        "torch_version": torch.__version__,
        "diffusers_version": diffusers.__version__,
        "threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "parallel_info": [l.strip() for l in torch.__config__.parallel_info().splitlines()
                          if "Math Kernel" in l or "MKL-DNN" in l or "oneDNN" in l or "parallel backend" in l],
        "load_s": load_s,
        "flop_run_s": flop_run_s,
        "warmup_s": warm_s,
        "times": times,
        "median_s": statistics.median(times),
        "cpus_used": cpu / max(sum(times), 1e-9),
        "flops": flops,
        "flops_by_op": flops_by_op,
        "attention_ops": {k: rec.ops[k] for k in attn_ops},
        "attention_processors": processors,
        "rss_after_imports": rss_imports,
        "hwm_after_imports": hwm_imports,
        "rss_after_load": rss_loaded,
        "hwm_after_load": hwm_loaded,
        "hwm_forward": hwm_end if hwm_reset else None,
        "hwm_process": max(hwm_loaded or 0, hwm_end or 0),
        "out_std": float(out.std()),
        "out_finite": bool(torch.isfinite(out).all()),
    }
    with open(job["result_path"], "w") as f:
        json.dump(result, f, indent=1)


# --------------------------------------------------------------------------------------
# Parent: diffc / diffrun
# --------------------------------------------------------------------------------------


# --isa: the instruction set both sides may use.  PyTorch's three kernel libraries each take their own
# variable (ATen's dispatch, oneDNN's JIT, MKL's BLAS); diffc takes a --cpu target.  "native" sets
# nothing: each side uses everything this CPU has.
ISA_TORCH_ENV = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "DNNL_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}
ISA_DIFFC_CPU = {"native": None, "avx2": "x86-64-v3"}
ISA = "native"  # set by main()


def child_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **ISA_TORCH_ENV[ISA])


ISA_PROBE = """
import torch
print("ATEN", torch.backends.cpu.get_cpu_capability(), flush=True)
x = torch.randn(1, 64, 32, 32)
torch.nn.functional.conv2d(x, torch.randn(64, 64, 3, 3), padding=1)
a = torch.randn(64, 64)
torch.addmm(a, a, a)
"""


def torch_isa(python, threads):
    """What PyTorch's kernel libraries run under child_env: ATen's CPU capability, the ISA oneDNN's
    JIT chose and the one MKL dispatched to (from their verbose modes, on a small conv and addmm)."""
    env = dict(child_env(threads), ONEDNN_VERBOSE="1", MKL_VERBOSE="1")
    try:
        out = subprocess.run([python, "-c", ISA_PROBE], capture_output=True, text=True, env=env, timeout=300,
                             preexec_fn=_pin).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return {"aten": "?", "onednn": "?", "mkl": "?", "conv_impl": "?", "error": str(e)}
    res = {"aten": "?", "onednn": "?", "mkl": "?", "conv_impl": "?"}
    m = re.search(r"^ATEN (\S+)", out, re.M)
    if m:
        res["aten"] = m.group(1)
    m = re.search(r"onednn_verbose,.*?info,cpu,isa:(.*)", out)
    if m:
        res["onednn"] = m.group(1).strip()
    m = re.search(r"onednn_verbose,.*?exec,cpu,convolution,([^,]+)", out)
    if m:
        res["conv_impl"] = m.group(1).strip()
    m = re.search(r"MKL_VERBOSE oneMKL.*? for Intel\(R\) 64 architecture (.*?)(?:, Lnx|$)", out, re.M)
    if m:
        res["mkl"] = m.group(1).strip()
    return res


def plan_target(diffrun, plan):
    """The 'target:' line of diffrun --info: which CPU the plan's kernels were compiled for."""
    try:
        out = subprocess.run([diffrun, "--info", plan], capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"^target:.*? for (\S+), cpu (\S+)", out, re.M)
    return f"cpu {m.group(2)} ({m.group(1)})" if m else None


PIN_CPUS = None  # set by main(): the CPUs every child is pinned to, when the machine has more than --threads


def _pin():
    if PIN_CPUS:
        os.sched_setaffinity(0, PIN_CPUS)


def run_proc(argv, timeout, log_path, env=None):
    """Run argv with a hard timeout (its whole process group is killed).  Returns
    (rc or None on timeout, stdout+stderr text, seconds).  The child's CPU seconds (user + sys)
    go to LAST_CPU[0]."""
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with open(log_path, "w") as logf:
        logf.write("$ " + show_cmd(argv) + "\n")
        logf.flush()
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True, env=env, preexec_fn=_pin)
        try:
            out, _ = p.communicate(timeout=timeout)
            rc = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            rc = None
        logf.write(out or "")
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU[0] = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    return rc, out or "", time.perf_counter() - t0


LAST_CPU = [0.0]


def failure_note(rc, out):
    """One line on why a child failed: the signal that killed it, or its last line of output."""
    last = out.strip().splitlines()[-1] if out.strip() else ""
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        return f"killed by {sig}" + (f" (last output: {last})" if last else "")
    return last or f"exit {rc}"


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
    if ISA_DIFFC_CPU[ISA] and "--cpu" not in shlex.split(args.diffc_args):
        cmd += ["--cpu", ISA_DIFFC_CPU[ISA]]
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


def bench_torch(case, model_dir, io_path, args, python):
    job = {
        "case": case,
        "cls": MODELS[case["model"]]["cls"],
        "model_dir": model_dir,
        "io_path": io_path,
        "result_path": os.path.join(WORK_DIR, f"{case['name']}.torch.json"),
        "threads": args.threads,
        "repeat": args.repeat,
        "min_repeat": args.min_repeat,
        "max_repeat": args.max_repeat,
        "budget_s": args.budget,
    }
    job_path = os.path.join(WORK_DIR, f"{case['name']}.torch_job.json")
    with open(job_path, "w") as f:
        json.dump(job, f, indent=1)
    if os.path.exists(job["result_path"]):
        os.remove(job["result_path"])
    rc, out, secs = run_proc([python, os.path.abspath(__file__), "--torch-child", job_path],
                             args.torch_timeout, os.path.join(WORK_DIR, f"{case['name']}.torch.log"),
                             child_env(args.threads))
    if rc != 0 or not os.path.isfile(job["result_path"]):
        tail = "\n".join(out.strip().splitlines()[-15:])
        raise SystemExit(f"bench: the PyTorch child for {case['name']} "
                         f"{'timed out' if rc is None else f'failed (exit {rc})'}:\n{tail}")
    with open(job["result_path"]) as f:
        return json.load(f)


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def machine_info():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip()
                if k in ("model name", "cpu family", "model", "stepping") and k not in info:
                    info[k] = v.strip()
                if not line.strip():
                    break
    except OSError:
        pass
    model = info.get("model name", "?")
    if "cpu family" in info:
        model += f" (family {info['cpu family']}, model {info.get('model', '?')}, stepping {info.get('stepping', '?')})"
    mem = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    have = set(line.split(":", 1)[1].split())
                    flags = " ".join(x for x in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16",
                                                 "amx_tile") if x in have)
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "mem": mem, "flags": flags,
            "kernel": platform.release(), "load": os.getloadavg()}


def git_info():
    def q(*a):
        try:
            return subprocess.run(["git", "--no-optional-locks", "-C", REPO] + list(a), capture_output=True,
                                  text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    head = q("rev-parse", "--short", "HEAD")
    dirty = q("status", "--porcelain", "--untracked-files=no")
    return f"{head}{' + uncommitted changes' if dirty else ''}" if head else "?"


def fmt_s(x):
    if x is None:
        return "n/a"
    return f"{x:.3f}" if x < 100 else f"{x:.0f}"


def table_rows(results):
    head = ["case", "torch s/forward", "diffrun s/forward", "ratio", "GFLOP", "torch GFLOP/s",
            "diffrun GFLOP/s", "torch peak RSS", "diffrun device arena peak + host RSS", "rel L2"]
    rows = []
    for r in results:
        t, d = r["torch"], r.get("diffrun")
        gflop = t["flops"] / 1e9
        tsec = t["median_s"]
        torch_mem = (f"{fmt_bytes(t['hwm_process'] - t['rss_after_imports'])} "
                     f"(HWM {fmt_bytes(t['hwm_process'])} − {fmt_bytes(t['rss_after_imports'])} after imports)")
        if d is None:
            dcell, ratio, dgf, dmem, rel = "not run", "", "", "", ""
        else:
            dsec = d["median_s"]
            if dsec:
                dcell = fmt_s(dsec)
                if d["status"] == "too slow":
                    dcell += " (too slow: 1 run)"
                elif d["status"] != "ok":
                    dcell += f" ({'1 run; ' if len(d['times']) <= 1 else ''}{d['status']})"
                ratio = f"{tsec / dsec:.2f}"
                dgf = f"{gflop / dsec:.1f}"
            else:
                dcell, ratio, dgf = d["status"], "", ""
            dmem = (f"{fmt_bytes(d['arena_peak'])} + {fmt_bytes(d['host_rss'])}"
                    if d.get("arena_peak") is not None else "n/a")
            rel = f"{d['rel_l2']:.2e}" if d.get("rel_l2") is not None else "n/a"
        rows.append([f"{r['case']['name']} ({r['case']['desc']})", fmt_s(tsec), dcell, ratio, f"{gflop:.1f}",
                     f"{gflop / tsec:.1f}", dgf, torch_mem, dmem, rel])
    return head, rows


def markdown_table(head, rows):
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    return "\n".join(lines)


def details(results):
    out = []
    for r in results:
        t, d, c = r["torch"], r.get("diffrun"), r["case"]
        out.append(f"- **{c['name']}** — {c['desc']}; inputs "
                   + ", ".join(f"{k} {'x'.join(map(str, s))}" for k, s in c["inputs"].items()) + ".")
        top = sorted(t["flops_by_op"].items(), key=lambda kv: -kv[1])
        out.append(f"  - load average when the case started: {r['load']:.2f}")
        out.append(f"  - PyTorch: {len(t['times'])} timed forwards after 2 warm-ups (one under "
                   f"FlopCounterMode): " + ", ".join(f"{x:.3f}" for x in t["times"]) + " s; median "
                   f"{t['median_s']:.3f} s; {t['cpus_used']:.2f} CPUs used on average. FLOPs by op: "
                   + ", ".join(f"{k} {v / 1e9:.1f} G" for k, v in top) + ".")
        out.append(f"  - PyTorch attention: processors {', '.join(t['attention_processors']) or 'none'}; "
                   f"aten ops {', '.join(f'{k} ×{v}' for k, v in t['attention_ops'].items()) or 'none'}.")
        out.append(f"  - PyTorch memory: RSS after imports {fmt_bytes(t['rss_after_imports'])}, after "
                   f"from_pretrained {fmt_bytes(t['rss_after_load'])} (HWM {fmt_bytes(t['hwm_after_load'])}), "
                   f"HWM during the forwards only {fmt_bytes(t['hwm_forward'])}; model load {t['load_s']:.1f} s; "
                   f"output std {t['out_std']:.3f}.")
        if d is None:
            continue
        if d.get("compile_s") is not None:
            out.append(f"  - diffc compile {d['compile_s']:.2f} s: `{d.get('diffc_cmd', '')}`")
        if d.get("first_run_s") is not None:
            out.append(f"  - diffrun check run (PyTorch's inputs): {d['first_run_s']:.3f} s, rel L2 "
                       + (f"{d['rel_l2']:.3g}" if d.get("rel_l2") is not None else "n/a")
                       + f": `{d.get('check_cmd', '')}`")
        if d.get("all_runs"):
            out.append(f"  - diffrun timed: runs " + ", ".join(f"{x:.3f}" for x in d["all_runs"])
                       + " s (run 1 is the warm-up, not counted); the process used "
                       + f"{d['time_proc_cpu_s'] / max(d['time_proc_s'], 1e-9):.2f} CPUs on average over "
                       + f"{d['time_proc_s']:.1f} s: `{d.get('time_cmd', '')}`")
        if d.get("arena_peak") is not None:
            out.append(f"  - diffrun memory: device arena peak {fmt_bytes(d['arena_peak'])}"
                       + (" (MISMATCH with the plan's prediction)" if d.get("arena_mismatch") else "")
                       + f", weights resident {fmt_bytes(d.get('weights'))}, host peak RSS {fmt_bytes(d['host_rss'])}.")
        if d.get("status") != "ok" or d.get("note"):
            out.append(f"  - diffrun status: {d['status']}{': ' + d['note'] if d.get('note') else ''}")
    return "\n".join(out)


def busy_line(results, args):
    low = [f"{r['case']['name']} {r['torch']['cpus_used']:.2f}" for r in results
           if r["torch"]["cpus_used"] < 0.85 * args.threads]
    pin = f"children pinned to CPUs {sorted(PIN_CPUS)}; " if PIN_CPUS else ""
    if low:
        return (f"- {pin}**the machine was busy**: PyTorch got fewer than {args.threads} CPUs on average "
                f"({', '.join(low)}), so these timings are inflated and not a measurement of either side")
    return f"- {pin}PyTorch got {args.threads} CPUs throughout (no sign of other load)"


def write_results(path, args, results, machine, started, wall, command, feats, isa):
    t = results[0]["torch"] if results else {}
    head, rows = table_rows(results)
    lines = [
        "# diffc bench: diffrun vs PyTorch/diffusers on the CPU",
        "",
        f"- date: {started.strftime('%Y-%m-%d %H:%M:%S %Z').strip()}; bench wall time {wall / 60:.1f} min"
        + (" (--quick)" if args.quick else ""),
        f"- command: `{command}`",
        f"- machine: {machine['cpu']}, nproc {machine['nproc']}, {fmt_bytes(machine['mem'])} RAM, "
        f"flags {machine['flags']}, Linux {machine['kernel']}; load average at start "
        f"{machine['load'][0]:.2f} / end {os.getloadavg()[0]:.2f}",
        f"- instruction set: --isa {args.isa}; PyTorch ran ATen {isa['aten']} kernels, oneDNN "
        f"{isa['onednn']} (convolution {isa['conv_impl']}), MKL for {isa['mkl']}"
        + (f" (environment {' '.join(f'{k}={v}' for k, v in ISA_TORCH_ENV[args.isa].items())})"
           if ISA_TORCH_ENV[args.isa] else "")
        + "; diffrun's kernels: " + (", ".join(sorted({r['diffrun'].get('target') or '?' for r in results
                                                       if r.get('diffrun')})) or "not run")
        + (f" (diffc --cpu {ISA_DIFFC_CPU[args.isa]})" if ISA_DIFFC_CPU[args.isa] else " (diffc --cpu native)"),
        f"- PyTorch {t.get('torch_version', '?')} ({t.get('cpu_capability', '?')} kernels; "
        f"{'; '.join(t.get('parallel_info', []))}), diffusers {t.get('diffusers_version', '?')}, "
        f"fp32, torch.no_grad(), torch.set_num_threads({args.threads})",
        f"- diffc {machine['git']}, Release build (build-bench/); diffrun "
        + (f"--threads {args.threads}" if feats["threads"] else
           f"has no --threads option (uses every online CPU: {machine['nproc']})")
        + (f", --backend {args.backend}" if args.backend else "")
        + (f", extra diffrun args `{args.diffrun_args}`" if args.diffrun_args else "")
        + (f", extra diffc args `{args.diffc_args}`" if args.diffc_args else ""),
        busy_line(results, args),
        "- times are medians of N forwards after warm-up; ratio = PyTorch time / diffrun time (> 1: "
        "diffrun is faster); GFLOP counted by torch.utils.flop_counter.FlopCounterMode for one PyTorch "
        "forward (conv, matmul, attention; 1 multiply-add = 2 FLOP) and used for both; rel L2 = "
        "‖diffrun − PyTorch‖ / ‖PyTorch‖ on the same inputs",
        "",
        markdown_table(head, rows),
        "",
        "## Details",
        "",
        details(results),
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))


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
    ap.add_argument("--python", default=sys.executable, help=argparse.SUPPRESS)
    args = ap.parse_args()
    global ISA
    ISA = args.isa
    if args.results is None:
        args.results = os.path.join(BENCH_DIR, "results.md" if args.isa == "native" else f"results-{args.isa}.md")

    if args.sizes:
        names = [s for x in args.sizes for s in x.split(",") if s]
    elif os.environ.get("DIFFC_BENCH_SIZES"):
        names = os.environ["DIFFC_BENCH_SIZES"].replace(",", " ").split()
    else:
        names = QUICK_CASES if args.quick else DEFAULT_CASES
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
    global PIN_CPUS
    avail = sorted(os.sched_getaffinity(0))
    if args.pin and len(avail) > args.threads:
        PIN_CPUS = set(avail[:args.threads])
        log(f"bench: pinning both sides to CPUs {sorted(PIN_CPUS)} (of {len(avail)}; --no-pin to leave them free)")
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
    else:
        sys.exit(main())
