"""The PyTorch side of the bench (bench/bench.py): the child that runs one case in diffusers
(bench.py --torch-child JOB: inputs, FlopCounterMode, timed forwards, peak memory, the io file),
the probe of what PyTorch's kernel libraries run under --isa, and the parent's call of the child.
"""

import json
import os
import re
import statistics
import subprocess
import time

from bench_common import BENCH_SCRIPT, WORK_DIR, _pin, child_env, proc_status_bytes, run_proc
from bench_models import MODELS, UNET_TIMESTEPS, model_class


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
    rc, out, secs = run_proc([python, BENCH_SCRIPT, "--torch-child", job_path],
                             args.torch_timeout, os.path.join(WORK_DIR, f"{case['name']}.torch.log"),
                             child_env(args.threads))
    if rc != 0 or not os.path.isfile(job["result_path"]):
        tail = "\n".join(out.strip().splitlines()[-15:])
        raise SystemExit(f"bench: the PyTorch child for {case['name']} "
                         f"{'timed out' if rc is None else f'failed (exit {rc})'}:\n{tail}")
    with open(job["result_path"]) as f:
        return json.load(f)
