#!/usr/bin/env bash
# gpu_check_bench_test.sh SOURCE_DIR — the tables tools/gpu_check_bench.sh
# prints in the GPU check's summary, from stage logs written here in the
# tools' format: diffc's row beside the cuBLASLt row and PyTorch's best
# kernel (the fastest SDPA backend that ran), the ratio, failures as the
# row's status; the UNet table from a model stage's diffrun log and the
# diffusers line; missing logs say what is missing; bench/gpu_torch.py
# --dry-run's rows.  No GPU, no build, no torch.
set -u
src=$(cd "$1" && pwd)
tmp=$(mktemp -d /tmp/diffc-benchtab-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "  ok: $1"; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }

cat > "$tmp/microbench.log" <<'LOG'
conv3x3_nhwc 2x640x64x64x640 (bf16):
  1 kernel(s), 1 compile(s), 0 from the kernel cache, 0.3 s
BENCH impl=diffc case=conv3x3_nhwc shape=2x640x64x64x640 compute=bf16 act=f32 median_ms=1.5000 min_ms=1.4000 tflops=40.3 pct_peak=4.1 status=ok
BENCH impl=diffc case=linear shape=8192x640x640 compute=bf16 act=bf16 median_ms=0.1000 min_ms=0.0900 tflops=67.1 pct_peak=6.8 status=ok
BENCH impl=diffc+cublaslt case=linear shape=8192x640x640 compute=bf16 act=bf16 median_ms=0.0200 min_ms=0.0190 tflops=335.5 pct_peak=33.9 status=ok
BENCH impl=diffc case=attention shape=2x10x4096x64 compute=bf16 act=f32 median_ms=- min_ms=- tflops=- pct_peak=- status=FAIL: cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument)
LOG
cat > "$tmp/torch_bench.log" <<'LOG'
BENCH impl=torch case=conv3x3_nhwc shape=2x640x64x64x640 compute=bf16 act=bf16 median_ms=0.2000 min_ms=0.1900 tflops=302.0 pct_peak=30.5 status=ok
BENCH impl=torch case=linear shape=8192x640x640 compute=bf16 act=bf16 median_ms=0.0150 min_ms=0.0140 tflops=447.4 pct_peak=45.2 status=ok
BENCH impl=torch-sdpa-flash case=attention shape=2x10x4096x64 compute=bf16 act=bf16 median_ms=0.5 min_ms=0.4 tflops=275.0 pct_peak=27.8 status=ok
BENCH impl=torch-sdpa-cudnn case=attention shape=2x10x4096x64 compute=bf16 act=bf16 median_ms=0.4 min_ms=0.4 tflops=343.6 pct_peak=34.7 status=ok
BENCH impl=torch-sdpa-efficient case=attention shape=2x10x4096x64 compute=bf16 act=bf16 median_ms=- min_ms=- tflops=- pct_peak=- status=not available: RuntimeError: No available kernel.
UNET impl=diffusers case=sd15 shape=2x4x64x64 compute=bf16 median_ms=31.2 min_ms=30.9 peak_mib=2100 status=ok
UNET impl=diffusers case=sdxl shape=2x4x128x128 compute=bf16 median_ms=- min_ms=- peak_mib=- status=FAIL: OutOfMemoryError: CUDA out of memory
LOG
printf '%s\n' "run 1: 0.2100 s (kernels 0.150 s on the device), 80.1 TFLOP/s" \
  "run 2: 0.2000 s (kernels 0.140 s on the device), 85.0 TFLOP/s" "run 3: 0.2000 s (kernels 0.145 s on the device)" \
  "device memory held: 3.2 GiB (arena 1.0 GiB, weights 2.2 GiB)" > "$tmp/run_sd15_bf16.log"

# shellcheck disable=SC2034,SC1091  # the sourced file reads ROOT, LOGS and DRY
tables() { (ROOT=$src LOGS=$1 DRY=0; . "$src/tools/gpu_check_bench.sh"; gpu_bench_summary); }
out=$(tables "$tmp")
row() { printf '%s\n' "$out" | grep -F "| $1 "; }

row "conv3x3_nhwc (act f32)" | grep -qF "| 2x640x64x64x640 | 1.5000 | 40.3 (4.1 %) | - | 302.0 (30.5 %), torch | 0.13 |" &&
  ok "conv: diffc beside PyTorch, ratio 0.13" || bad "conv row: $(row "conv3x3_nhwc")"
row "linear (act bf16)" | grep -qF "| 67.1 (6.8 %) | 335.5 | 447.4 (45.2 %), torch | 0.15 |" &&
  ok "linear: generated, cuBLASLt via diffc and PyTorch in one row" || bad "linear row: $(row "linear")"
row "attention (act f32)" | grep -qF "| - | FAIL: cuLaunchKernel: CUDA_ERROR_INVALID_VALUE (invalid argument) | - | 343.6 (34.7 %), torch-sdpa-cudnn | - |" &&
  ok "attention: diffc's failure as its cell, PyTorch's fastest backend named" || bad "attention row: $(row "attention")"
row "sd15" | grep -qF "| 145.0 / 140.0 | 31.2 / 30.9 | 0.22x | 3277 | 2100 | ok |" &&
  ok "sd15: device-time median/best from diffrun's log, diffusers', speed-up, memory" || bad "sd15 row: $(row "sd15")"
row "sdxl" | grep -qF "| no diffc run / - | - / - | - | - | - | FAIL: OutOfMemoryError: CUDA out of memory |" &&
  ok "sdxl: no model log and diffusers' failure said as such" || bad "sdxl row: $(row "sdxl")"

mkdir "$tmp/none"
out=$(tables "$tmp/none")
row "(no rows: no log of microbench torch_bench)" >/dev/null && ok "no stage logs: the kernel table says which are missing" ||
  bad "no logs: $(printf '%s\n' "$out" | grep '^| (no')"
row "sd15" | grep -qF "no row (torch_bench did not run)" && ok "no stage logs: the UNet rows say so" || bad "no logs UNet: $(row sd15)"

# bench/gpu_torch.py --dry-run (no torch needed): exit 77, rows the tables read as "no GPU"
if command -v python3 >/dev/null 2>&1; then
  mkdir "$tmp/dry"
  python3 "$src/bench/gpu_torch.py" --dry-run > "$tmp/dry/torch_bench.log"
  rc=$?
  out=$(tables "$tmp/dry")
  n=$(printf '%s\n' "$out" | grep -c '| no GPU | - |$')
  [ "$rc" -eq 77 ] && [ "$n" -eq 6 ] && row "sdxl" | grep -qF "| - / - | - | - | - | no GPU |" &&
    ok "gpu_torch.py --dry-run: exit 77, six kernel rows and the UNets say no GPU" ||
    bad "gpu_torch.py --dry-run: rc $rc, $n kernel rows with no GPU: $out"
else
  echo "  (no python3: gpu_torch.py --dry-run not checked)"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
