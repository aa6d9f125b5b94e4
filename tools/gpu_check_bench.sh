# shellcheck shell=bash
# shellcheck disable=SC2317  # functions run through `timeout bash -c`
# gpu_check_bench.sh — the GPU microbenchmarks and the PyTorch/diffusers
# comparison, as stages of tools/gpu_check.sh, which sources this file after
# its model stages and then calls:
#   gpu_bench_stages    the stages, each through gpu_check's `run` (its own
#                       timeout and log under $LOGS):
#     microbench        tools/cuda_microbench --all: diffc's kernels at SDXL
#                       shapes (conv 3x3 NCHW/NHWC, two linears, generated and
#                       through cuBLASLt, two attentions), TFLOP/s and % of peak
#     torch_bench       bench/gpu_torch.py: the same cases in PyTorch (F.conv2d,
#                       F.linear, each SDPA backend), then diffusers' SD1.5 and
#                       SDXL UNet forwards with random weights (bf16, eager);
#                       diffusers comes from .whl/ (tools/gpu_wheels.sh),
#                       installed under $WORK/site for this run only
#   gpu_bench_summary   the tables: per kernel class diffc against cuBLASLt
#                       and PyTorch; the UNets diffc against diffusers, whose
#                       diffc side is read from gpu_check's own model stages'
#                       logs ($LOGS/run_sd15_bf16.log, run_sdxl_bf16.log), not
#                       run again
# Uses gpu_check.sh's run, say, $BIN (the build folder), $WORK, $LOGS, $DRY,
# $ROOT and $JOBS.  Under --dry-run (no GPU) both stages still run their code
# paths (cuda_microbench compiles every case; the wheels are installed;
# gpu_torch.py --dry-run imports nothing) and every row says "no GPU".

gpu_bench_micro() {
  if [ -f "$BIN/CMakeCache.txt" ]; then
    cmake --build "$BIN" -j"${JOBS:-4}" --target cuda_microbench > "$LOGS/microbench_build.log" 2>&1 ||
      { echo "error: building cuda_microbench failed:"; tail -5 "$LOGS/microbench_build.log"; return 1; }
  fi
  "$BIN/cuda_microbench" --all --work "$WORK/microbench"
}

# The wheels of .whl/ whose module does not import with this python, under
# $WORK/site (the machine's own packages are kept where they exist).
gpu_bench_wheels() {
  local py=$1 whl name mod
  mkdir -p "$WORK/site"
  if ! ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
    echo "wheels: no .whl/ folder (bash tools/gpu_wheels.sh fetches it): diffusers must be installed already"
    return 0
  fi
  for whl in "$ROOT"/.whl/*.whl; do
    name=$(basename "$whl")
    case $name in
      diffusers-*) mod=diffusers ;;
      pillow-*|Pillow-*) mod=PIL ;;
      *) mod=${name%%-*} ;;
    esac
    if PYTHONPATH="$WORK/site" "$py" -c "import $mod" >/dev/null 2>&1; then
      echo "wheels: $mod imports already; $name not installed"
    elif "$py" -m pip install --disable-pip-version-check --root-user-action=ignore --no-index --no-deps --quiet --target "$WORK/site" "$whl"; then
      echo "wheels: installed $name under $WORK/site"
    else
      echo "wheels: error: pip could not install $name"
    fi
  done
}

gpu_bench_torch() {
  local py=${PYTHON:-python3}
  command -v "$py" >/dev/null 2>&1 || { echo "error: no $py"; return 1; }
  gpu_bench_wheels "$py"
  local dry=()
  [ "$DRY" -eq 1 ] && dry=(--dry-run)
  PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}" "$py" "$ROOT/bench/gpu_torch.py" "${dry[@]}"
}

gpu_bench_stages() {
  export -f gpu_bench_micro gpu_bench_wheels gpu_bench_torch
  export BIN WORK LOGS DRY ROOT JOBS
  say "microbenchmarks: diffc's kernels at SDXL shapes"
  run microbench 150 30 gpu_bench_micro
  say "microbenchmarks: PyTorch and diffusers"
  run torch_bench 180 0 gpu_bench_torch
}

# ---- the tables ---------------------------------------------------------------------------------
# BENCH/UNET lines are "KEY=VALUE ..." with status= last (free text).
gpu_bench_rows() {  # the BENCH lines of both logs, diffc's first
  cat "$LOGS/microbench.log" "$LOGS/torch_bench.log" 2>/dev/null | grep '^BENCH '
}

gpu_bench_kernel_table() {
  local missing="" stage
  for stage in microbench torch_bench; do
    [ -f "$LOGS/$stage.log" ] || missing="$missing $stage"
  done
  echo "Kernels at SDXL shapes, bf16 (TFLOP/s from the median of the timed runs; % of the peak the tools were"
  echo "given; diffc / PyTorch compares diffc's generated kernel with PyTorch's best)"
  echo
  echo "| kernel | shape (conv NxCxHxWxO, linear MxKxN, attention BxHxSxD) | diffc ms | diffc TFLOP/s (% peak) | cuBLASLt via diffc TFLOP/s | PyTorch TFLOP/s (% peak), kernel | diffc / PyTorch |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  gpu_bench_rows | awk -v missing="$missing" '
    function field(k,   i, n, kv) {
      for (i = 2; i <= NF; i++) if (index($i, k "=") == 1) return substr($i, length(k) + 2)
      return ""
    }
    {
      st = $0; sub(/.* status=/, "", st)
      key = field("case") "|" field("shape"); impl = field("impl")
      if (!(key in seen)) { seen[key] = 1; order[++n] = key }
      tf = field("tflops"); pct = field("pct_peak")
      if (impl == "diffc") { d_ms[key] = field("median_ms"); d_tf[key] = tf; d_pct[key] = pct; d_st[key] = st
                             d_act[key] = field("act") }
      else if (impl == "diffc+cublaslt") { l_tf[key] = tf; l_st[key] = st }
      else if (st == "ok" && (!(key in t_tf) || tf + 0 > t_tf[key] + 0)) {
        t_tf[key] = tf; t_pct[key] = pct; t_impl[key] = impl; t_st[key] = st }
      else if (!(key in t_st)) t_st[key] = st
    }
    function cell(v, p, st) { return (st == "ok") ? v " (" p " %)" : (st == "" ? "-" : st) }
    END {
      if (n == 0) { printf "| (no rows:%s) | - | - | - | - | - | - |\n", (missing == "" ? " the stages printed none" : " no log of" missing); exit }
      for (i = 1; i <= n; i++) {
        k = order[i]; split(k, a, "|")
        name = a[1]; if (d_act[k] != "") name = name " (act " d_act[k] ")"
        ratio = (d_st[k] == "ok" && t_st[k] == "ok" && t_tf[k] + 0 > 0) ? sprintf("%.2f", d_tf[k] / t_tf[k]) : "-"
        lt = (k in l_st) ? ((l_st[k] == "ok") ? l_tf[k] : l_st[k]) : "-"
        tk = (t_st[k] == "ok") ? cell(t_tf[k], t_pct[k], "ok") ", " t_impl[k] : cell("", "", t_st[k])
        printf "| %s | %s | %s | %s | %s | %s | %s |\n", name, a[2], (d_st[k] == "ok" ? d_ms[k] : "-"),
               cell(d_tf[k], d_pct[k], d_st[k]), lt, tk, ratio
      }
    }'
}

# diffc's side of a UNet from gpu_check's model stage log: "median best MiB", "-" where absent.
gpu_bench_diffc_unet() {
  local log=$1
  if ! grep -q '^run [0-9]' "$log" 2>/dev/null; then echo "- - -"; return; fi
  local times mem
  times=$(grep '^run [0-9]' "$log" | sed -E -e 's/.*kernels ([0-9.]+) s on the device.*/\1/; t' \
    -e 's/^run [0-9]+: ([0-9.]+) s.*/\1/' | sort -g |
    awk '{ v[NR] = $1 * 1000 } END { printf "%.1f %.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[1] }')
  mem=$(grep -E '^device memory held:' "$log" | sed -E 's/^device memory held: ([0-9.]+) ([KMG]iB).*/\1 \2/' |
    awk '{ m = ($2 == "GiB") ? 1024 : ($2 == "MiB") ? 1 : 1 / 1024; printf "%.0f", $1 * m }')
  echo "$times ${mem:--}"
}

gpu_bench_unet_table() {
  echo "UNet forwards, bf16, batch 2 (SD1.5 at 64x64 latents, SDXL at 128x128 with its added conditions): diffc's"
  echo "plans from the model stages above against diffusers eager with SDPA (random weights, from_config);"
  echo "speed-up = diffusers median / diffc median"
  echo
  echo "| model | diffc ms (median / best) | diffusers ms (median / best) | speed-up | diffc device MiB held | diffusers peak MiB allocated | diffusers status |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  local name d_med d_best d_mem line t_med t_best t_mem st speed stand_in=""
  [ "$DRY" -eq 1 ] && stand_in=" (diffc: dry-run stand-in)"
  for name in sd15 sdxl; do
    read -r d_med d_best d_mem <<< "$(gpu_bench_diffc_unet "$LOGS/run_${name}_bf16.log")"
    line=$(grep "^UNET impl=diffusers case=$name " "$LOGS/torch_bench.log" 2>/dev/null | tail -1)
    if [ -n "$line" ]; then
      t_med=$(echo "$line" | sed -n 's/.* median_ms=\([^ ]*\).*/\1/p')
      t_best=$(echo "$line" | sed -n 's/.* min_ms=\([^ ]*\).*/\1/p')
      t_mem=$(echo "$line" | sed -n 's/.* peak_mib=\([^ ]*\).*/\1/p')
      st=${line##* status=}
    else
      t_med=-; t_best=-; t_mem=-; st="no row (torch_bench did not run)"
    fi
    speed=-
    if [ "$d_med" != "-" ] && [ "$t_med" != "-" ]; then
      speed=$(awk -v a="$t_med" -v b="$d_med" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')
    fi
    [ "$d_med" = "-" ] && d_med="no diffc run"
    echo "| $name$stand_in | $d_med / $d_best | $t_med / $t_best | $speed | $d_mem | $t_mem | $st |"
  done
}

gpu_bench_summary() {
  echo
  gpu_bench_kernel_table
  echo
  gpu_bench_unet_table
}
