"""PyTorch's side of the GPU microbenchmarks (tools/gpu_check_bench.sh): the cases of
tools/cuda_microbench --all run by PyTorch on the same GPU, then the SD1.5 and SDXL UNet
forwards in diffusers, for the summary to set beside diffc's numbers.

Kernel cases, bf16, each timed with CUDA events (one event pair per call), median and best of
--repeat calls after --warmup calls, with torch.backends.cudnn.benchmark on (PyTorch's best conv):
  conv 3x3 640->640 at 64x64, batch 2: F.conv2d on contiguous (NCHW) and channels_last (NHWC) tensors;
  linear 8192x640x640 and 2048x1280x5120 (M x K x N): F.linear (cuBLASLt inside torch);
  attention B2 H10 S4096 D64 and S1024 D64: F.scaled_dot_product_attention, once per backend
  that takes the case (flash, cuDNN, memory-efficient), so the rows say which kernel ran.
FLOPs as ir/flops.c counts them (2 per multiply-add; attention 4*B*H*S*S*D).  One line per case,
the format cuda_microbench prints:
  BENCH impl=torch case=linear shape=8192x640x640 compute=bf16 act=bf16 median_ms=0.0123
        min_ms=0.0120 tflops=567.8 pct_peak=57.4 status=ok
UNet forwards: UNet2DConditionModel.from_config (bench/configs) with random weights, bf16, eager,
torch.no_grad, SDPA attention (diffusers' default processor); ms per forward, median and best of 5
after 2 warm-ups, and the peak of torch.cuda.max_memory_allocated:
  UNET impl=diffusers case=sd15 shape=2x4x64x64 compute=bf16 median_ms=... min_ms=... peak_mib=...
       status=ok

--dry-run imports nothing (no torch needed) and prints every row with status "no GPU";
--device cpu --tiny runs every code path on the CPU at tiny shapes and the reduced-width fixture
UNets (timed with the wall clock).  Without a GPU (and without --device cpu) the rows say
"no GPU" and the exit status is 77, as cuda_microbench's.
"""

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (case, shape, dims): conv N,C,H,W,O; linear M,K,N; attention B,H,S,D
SDXL_CASES = [
    ("conv3x3_nchw", (2, 640, 64, 64, 640)),
    ("conv3x3_nhwc", (2, 640, 64, 64, 640)),
    ("linear", (8192, 640, 640)),
    ("linear", (2048, 1280, 5120)),
    ("attention", (2, 10, 4096, 64)),
    ("attention", (2, 10, 1024, 64)),
]
TINY_CASES = [
    ("conv3x3_nchw", (1, 8, 8, 8, 16)),
    ("conv3x3_nhwc", (1, 8, 8, 8, 16)),
    ("linear", (64, 32, 48)),
    ("attention", (1, 2, 32, 16)),
]
# name, config, batch, latent size, text tokens x width, SDXL's added conditions
UNETS = [
    ("sd15", "bench/configs/sd15_unet.json", 2, 64),
    ("sdxl", "bench/configs/sdxl_base_unet.json", 2, 128),
]
TINY_UNETS = [
    ("sd15", "tests/fixtures/unet_sd15/model/config.json", 1, None),
    ("sdxl", "tests/fixtures/unet_sdxl/model/config.json", 1, None),
]
SDPA_BACKENDS = ["flash", "cudnn", "efficient"]


def shape_text(dims):
    return "x".join(str(d) for d in dims)


def flops_of(case, d):
    if case.startswith("conv"):
        n, c, h, w, o = d
        return 2 * n * o * h * w * c * 9
    if case == "linear":
        m, k, n = d
        return 2 * m * k * n
    b, h, s, dd = d
    return 4 * b * s * s * h * dd


def bench_line(impl, case, dims, compute, times, peak, status):
    head = f"BENCH impl={impl} case={case} shape={shape_text(dims)} compute={compute} act={compute}"
    if times:
        med, best = statistics.median(times), min(times)
        tf = flops_of(case, dims) / med * 1e-12
        head += f" median_ms={med * 1e3:.4f} min_ms={best * 1e3:.4f} tflops={tf:.1f} pct_peak={tf / peak * 100:.1f}"
    else:
        head += " median_ms=- min_ms=- tflops=- pct_peak=-"
    print(f"{head} status={status}", flush=True)


def unet_line(name, shape, compute, times, peak_mib, status):
    head = f"UNET impl=diffusers case={name} shape={shape_text(shape)} compute={compute}"
    if times:
        head += f" median_ms={statistics.median(times) * 1e3:.1f} min_ms={min(times) * 1e3:.1f}"
    else:
        head += " median_ms=- min_ms=-"
    head += f" peak_mib={peak_mib:.0f}" if peak_mib is not None else " peak_mib=-"
    print(f"{head} status={status}", flush=True)


def first_line(e):
    text = f"{type(e).__name__}: {e}".strip().splitlines()
    return (text[0] if text else type(e).__name__)[:160]


class Timer:
    """Seconds per call of fn: CUDA events around each call on a GPU, the wall clock on the CPU.

    Kernel cases (busy=True) first queue a spin of about a millisecond on the GPU
    (torch.cuda._sleep), so that the start event, the call's kernels and the end event are all
    queued before the GPU reaches them: the events then time the kernels, not Python's dispatch,
    as cuda_microbench's step events time a kernel the host queued while the inputs were copied.
    The UNet forwards are timed as they run eagerly, dispatch included."""

    def __init__(self, torch, device, busy=False):
        self.torch, self.cuda = torch, device.type == "cuda"
        self.busy = busy and self.cuda and hasattr(torch.cuda, "_sleep")

    def run(self, fn, warmup, repeat):
        torch = self.torch
        for _ in range(warmup):
            fn()
        if self.cuda:
            torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            if self.cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if self.busy:
                    torch.cuda._sleep(2_000_000)  # clock cycles: about 1 ms at Hopper's clocks
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
        return times


def kernel_cases(torch, device, dtype, cases, args, compute):
    import torch.nn.functional as F
    timer = Timer(torch, device, busy=True)
    # PyTorch at its best for the kernel rows: cuDNN picks each conv's fastest algorithm by timing
    # them (during the warm-up calls).  The UNet forwards run with PyTorch's defaults, as diffusers does.
    benchmark = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        run_kernel_cases(torch, F, timer, device, dtype, cases, args, compute)
    finally:
        torch.backends.cudnn.benchmark = benchmark


def run_kernel_cases(torch, F, timer, device, dtype, cases, args, compute):
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    for case, d in cases:
        try:
            if case.startswith("conv"):
                n, c, h, w, o = d
                x, wt, b = randn(n, c, h, w), randn(o, c, 3, 3) * (c * 9) ** -0.5, randn(o)
                if case.endswith("nhwc"):
                    x, wt = x.to(memory_format=torch.channels_last), wt.to(memory_format=torch.channels_last)
                with torch.no_grad():
                    times = timer.run(lambda: F.conv2d(x, wt, b, padding=1), args.warmup, args.repeat)
                bench_line("torch", case, d, compute, times, args.peak, "ok")
            elif case == "linear":
                m, k, n = d
                x, wt, b = randn(m, k), randn(n, k) * k ** -0.5, randn(n)
                with torch.no_grad():
                    times = timer.run(lambda: F.linear(x, wt, b), args.warmup, args.repeat)
                bench_line("torch", case, d, compute, times, args.peak, "ok")
            else:
                attention_case(torch, F, timer, randn, case, d, args, compute, device)
        except Exception as e:  # a case that fails is a row, never the end of the table
            bench_line("torch", case, d, compute, None, args.peak, f"FAIL: {first_line(e)}")


def attention_case(torch, F, timer, randn, case, d, args, compute, device):
    """One row per SDPA backend: which kernel ran is the row's impl."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    b, h, s, dd = d
    q, k, v = (randn(b, h, s, dd) for _ in range(3))
    backends = SDPA_BACKENDS if device.type == "cuda" else ["math"]
    for name in backends:
        be = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
              "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}[name]
        impl = f"torch-sdpa-{name}"
        try:
            with torch.no_grad(), sdpa_kernel([be]):
                times = timer.run(lambda: F.scaled_dot_product_attention(q, k, v), args.warmup, args.repeat)
            bench_line(impl, case, d, compute, times, args.peak, "ok")
        except Exception as e:  # this backend does not take the case (or is not built in)
            bench_line(impl, case, d, compute, None, args.peak, f"not available: {first_line(e)}")


def unet_inputs(torch, cfg, batch, size, device, dtype):
    size = size or cfg["sample_size"]
    g = torch.Generator(device=device).manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)

    inputs = {
        "sample": randn(batch, cfg["in_channels"], size, size),
        "timestep": torch.full((batch,), 500, device=device, dtype=torch.long),
        "encoder_hidden_states": randn(batch, 77, cfg["cross_attention_dim"]),
    }
    if cfg.get("addition_embed_type") == "text_time":
        # SDXL: the pooled text embeds and six time ids, projected to projection_class_embeddings_input_dim
        n_ids = 6
        text_dim = cfg["projection_class_embeddings_input_dim"] - n_ids * cfg["addition_time_embed_dim"]
        inputs["added_cond_kwargs"] = {"text_embeds": randn(batch, text_dim),
                                       "time_ids": torch.tensor([[size * 8, size * 8, 0, 0, size * 8, size * 8]] * batch,
                                                                device=device, dtype=dtype)}
    return inputs


def unet_forwards(torch, device, dtype, unets, args, compute):
    try:
        from diffusers import UNet2DConditionModel
        from diffusers.utils import logging as diffusers_logging
        diffusers_logging.set_verbosity_error()  # its note on .to(dtype) with no fp32 modules to keep
    except Exception as e:
        for name, _, batch, size in unets:
            unet_line(name, (batch, 4, size or 0, size or 0), compute, None, None,
                      f"FAIL: diffusers does not import: {first_line(e)}")
        return
    timer = Timer(torch, device)
    for name, path, batch, size in unets:
        model = None
        try:
            with open(os.path.join(ROOT, path)) as f:
                cfg = json.load(f)
            shape = (batch, cfg["in_channels"], size or cfg["sample_size"], size or cfg["sample_size"])
            with device:  # random initialisation on the device itself: SDXL's 2.6B parameters in seconds
                model = UNet2DConditionModel.from_config(cfg)
            model = model.to(dtype).eval()
            inputs = unet_inputs(torch, cfg, batch, size, device, dtype)
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            with torch.no_grad():
                times = timer.run(lambda: model(**inputs).sample, args.unet_warmup, args.unet_repeat)
            peak = torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None
            unet_line(name, shape, compute, times, peak, "ok")
        except Exception as e:
            unet_line(name, (batch, 4, size or 0, size or 0), compute, None, None, f"FAIL: {first_line(e)}")
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()


def dry_rows(cases, unets, args, compute, status):
    for case, d in cases:
        impls = [f"torch-sdpa-{b}" for b in SDPA_BACKENDS] if case == "attention" else ["torch"]
        for impl in impls:
            bench_line(impl, case, d, compute, None, args.peak, status)
    for name, _, batch, size in unets:
        unet_line(name, (batch, 4, size or 0, size or 0), compute, None, None, status)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dry-run", action="store_true", help="import nothing; every row says \"no GPU\"")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where to run (default cuda)")
    p.add_argument("--tiny", action="store_true", help="tiny kernel shapes and the reduced-width fixture UNets")
    p.add_argument("--only", choices=["kernels", "unet"], help="run one part only")
    p.add_argument("--repeat", type=int, default=20, help="timed calls per kernel case (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    p.add_argument("--unet-repeat", type=int, default=5, help="timed UNet forwards (default 5)")
    p.add_argument("--unet-warmup", type=int, default=2, help="untimed UNet forwards first (default 2)")
    p.add_argument("--peak", type=float, default=989.4,
                   help="TFLOP/s that 100%% means (default 989.4: an H100/H200 SXM's dense bf16 tensor peak)")
    args = p.parse_args()
    if min(args.repeat, args.unet_repeat) < 1 or min(args.warmup, args.unet_warmup) < 0 or args.peak <= 0:
        p.error("--repeat and --unet-repeat must be >= 1, the warm-ups >= 0, --peak > 0")
    cases = TINY_CASES if args.tiny else SDXL_CASES
    unets = TINY_UNETS if args.tiny else UNETS
    if args.only == "unet":
        cases = []
    if args.only == "kernels":
        unets = []
    compute = "bf16"
    if args.dry_run:
        print("gpu_torch: dry run, nothing imported or timed")
        dry_rows(cases, unets, args, compute, "no GPU")
        return 77

    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_torch: no GPU (torch {torch.__version__}: torch.cuda.is_available() is False)")
        dry_rows(cases, unets, args, compute, "no GPU")
        return 77
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (wall clock)"
    print(f"gpu_torch: torch {torch.__version__} on {where}; bf16; median and best of {args.repeat} calls after "
          f"{args.warmup} warm-up calls; {args.peak} TFLOP/s = 100%", flush=True)
    kernel_cases(torch, device, torch.bfloat16, cases, args, compute)
    unet_forwards(torch, device, torch.bfloat16, unets, args, compute)
    return 0


if __name__ == "__main__":
    sys.exit(main())
