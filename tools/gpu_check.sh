#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions run through `timeout bash -c`
# gpu_check.sh — the CUDA backend's check (issue 4), in ONE call on a machine
# with an NVIDIA GPU, in under 8 minutes on an H200 with 16 cores:
#   1. check the build dependencies and print what is missing
#   2. build diffc, diffrun, make_model, cuda_bandwidth, fixture_check (Release)
#   3. nvidia-smi summary
#   4. host -> device bandwidth, pinned and pageable (tools/cuda_bandwidth)
#   5. every fixture on the GPU in f32 and bf16 compute, against diffusers'
#      recorded outputs and against the CPU llvm backend (tests/fixture_check)
#   5b. the UNet and VAE fixtures again with --layout nhwc (channels_last)
#   6. SD1.5-shaped UNet at 64x64 latents (bf16, f32) and SDXL-shaped UNet at
#      128x128 latents (bf16), batch 2, random weights made from the real
#      configs (tools/make_model, bench/configs), compiled for sm_90 and timed
#      with diffrun --repeat 5
#   7. the memory techniques on the SD1.5 UNet (bf16): channels_last and
#      offload with prefetch, with the bytes copied per forward and the
#      overlap achieved: time / max(time without offload, bytes / pinned
#      host-to-device bandwidth) — 1.0 is perfect overlap (issue 5)
# Every stage runs under `timeout` inside one time budget; a failure, a
# timeout or a missing GPU is a row of the tables, never the end of the
# script.  The tables come LAST.  With $OUT set, the summary and every log
# are written under it too.
#
# usage: bash tools/gpu_check.sh [--dry-run] [--build-dir DIR] [--work DIR]
#                                [--jobs N] [--budget SECONDS]
#   --dry-run     a quick pass for a machine without a GPU: incremental build,
#                 two tiny fixtures, and the reduced-width SD1.5/SDXL fixture
#                 configs standing in for the real ones; every GPU stage must
#                 then report "no GPU" cleanly
#   --build-dir   build directory (default: build-gpu in the repository)
#   --work        models, plans, kernel cache and logs (default:
#                 ${TMPDIR:-/tmp}/diffc-gpu-check)
#   --jobs N      build and fixture parallelism (default: nproc)
#   --budget S    seconds for all stages together (default 450)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpu
WORK=${TMPDIR:-/tmp}/diffc-gpu-check
JOBS=$(nproc 2>/dev/null || echo 4)
BUDGET=450
DRY=0
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --build-dir) BUILD=$2; shift ;;
    --work) WORK=$2; shift ;;
    --jobs) JOBS=$2; shift ;;
    --budget) BUDGET=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK/models" "$WORK/plans"
rm -f "$LOGS"/*
export DIFFC_CACHE_DIR=$WORK/kcache
T0=$(date +%s)
STAGES=()   # "name|status|seconds" rows of the stage table
FIXROWS=()  # rows of the fixture table
MODROWS=()  # rows of the model table
BG_PIDS=()  # make_model jobs in the background

say() { printf '[%4ds] %s\n' $(( $(date +%s) - T0 )) "$*" | tee -a "$LOGS/progress.txt"; }
remaining() { echo $(( T0 + BUDGET - $(date +%s) )); }
# Timeout for a stage: its own cap, or what is left of the budget minus a
# reserve for the stages after it; 0 when not even 10 s remain.
stage_limit() {
  local cap=$1 reserve=${2:-0} left
  left=$(( $(remaining) - reserve ))
  [ "$left" -gt "$cap" ] && left=$cap
  [ "$left" -lt 10 ] && left=0
  echo "$left"
}
# "no GPU", "timeout after Ns", or "FAIL (rc N): <last error line>" for a log.
classify() {
  local rc=$1 log=$2 limit=$3 line
  if [ "$rc" -eq 77 ] || grep -qE 'no NVIDIA driver was found|CUDA_ERROR_NO_DEVICE|has 0 CUDA device' "$log" 2>/dev/null; then
    echo "no GPU"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "timeout after ${limit}s"
  else
    line=$(grep -iE 'error|fail' "$log" 2>/dev/null | tail -1 | cut -c1-110)
    echo "FAIL (rc $rc)${line:+: $line}"
  fi
}
# run NAME CAP RESERVE CMD...: the command (or an exported function) under
# timeout, output in $LOGS/NAME.log; sets RC, LIMIT and SECS; records the
# stage row.
run() {
  local name=$1 cap=$2 reserve=$3 t; shift 3
  LIMIT=$(stage_limit "$cap" "$reserve")
  if [ "$LIMIT" -eq 0 ]; then
    RC=125; SECS=0
    echo "skipped: the time budget ran out" > "$LOGS/$name.log"
    STAGES+=("$name|skipped: time budget|0")
    say "$name: skipped (time budget)"
    return
  fi
  t=$(date +%s)
  if declare -F "$1" >/dev/null; then timeout -k 5 "$LIMIT" bash -c "$*" > "$LOGS/$name.log" 2>&1
  else timeout -k 5 "$LIMIT" "$@" > "$LOGS/$name.log" 2>&1; fi
  RC=$?
  SECS=$(( $(date +%s) - t ))
  local status=ok
  [ "$RC" -ne 0 ] && status=$(classify "$RC" "$LOGS/$name.log" "$LIMIT")
  STAGES+=("$name|$status|$SECS")
  say "$name: $status (${SECS}s)"
}

# ---- 1. dependencies ----------------------------------------------------------
check_deps() {
  local missing=() cc=${CC:-cc}
  for c in cmake "$cc" timeout nvidia-smi; do command -v "$c" >/dev/null 2>&1 || missing+=("command $c"); done
  for h in cjson/cJSON.h xxhash.h; do
    echo "#include <$h>" | "$cc" -E -x c - >/dev/null 2>&1 || missing+=("header $h")
  done
  [ -d /usr/lib/llvm-14/lib/cmake/llvm ] || command -v llvm-config-14 >/dev/null 2>&1 || missing+=("LLVM 14 (llvm-14-dev)")
  local nvrtc=""
  for d in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda; do
    ls "$d"/lib64/libnvrtc.so* "$d"/lib/libnvrtc.so* >/dev/null 2>&1 && nvrtc=$d
  done
  [ -n "$nvrtc" ] || ldconfig -p 2>/dev/null | grep -q libnvrtc || missing+=("NVRTC (libnvrtc.so, CUDA toolkit)")
  ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1' || missing+=("NVIDIA driver (libcuda.so.1)")
  if [ ${#missing[@]} -eq 0 ]; then echo "all found"; else printf 'missing: %s\n' "${missing[@]}"; fi
}
export -f check_deps
run deps 30 0 check_deps
DEPS=$(tr '\n' ';' < "$LOGS/deps.log" | sed 's/;$//; s/;/, /g; s/missing: //g')
grep -q '^missing' "$LOGS/deps.log" && { unset 'STAGES[${#STAGES[@]}-1]'; STAGES+=("deps|missing: $DEPS|$SECS"); }
say "dependencies: $DEPS"

# ---- 2. build -----------------------------------------------------------------------
build() {
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release &&
    cmake --build "$BUILD" -j"$JOBS" --target diffc diffrun make_model cuda_bandwidth fixture_check
}
export -f build
export ROOT BUILD JOBS
run build 300 120 build
BUILT=$([ "$RC" -eq 0 ] && echo 1 || echo 0)
BIN=$BUILD
FC=$BUILD/tests/fixture_check

# ---- 3. the GPU -------------------------------------------------------------------------
run nvidia_smi 20 0 nvidia-smi --query-gpu=index,name,memory.total,driver_version,compute_cap --format=csv,noheader
if [ "$RC" -eq 0 ]; then
  GPU_LINE=$(head -1 "$LOGS/nvidia_smi.log")
else
  if command -v nvidia-smi >/dev/null 2>&1; then GPU_LINE="no GPU (nvidia-smi: $(tail -1 "$LOGS/nvidia_smi.log" | cut -c1-80))"
  else GPU_LINE="no GPU (no nvidia-smi)"; fi
  unset 'STAGES[${#STAGES[@]}-1]'
  STAGES+=("nvidia_smi|$GPU_LINE|$SECS")
fi
nvidia-smi > "$LOGS/nvidia_smi_full.log" 2>&1 || true
say "GPU: $GPU_LINE"

# ---- 6a. random-weight models, in the background while the fixtures run -------------------
if [ "$DRY" -eq 1 ]; then
  SD15_CONFIG=$ROOT/tests/fixtures/unet_sd15/model/config.json
  SDXL_CONFIG=$ROOT/tests/fixtures/unet_sdxl/model/config.json
  SD15_INPUTS=""; SDXL_INPUTS=""   # the configs' defaults: batch 1, their sample_size
else
  SD15_CONFIG=$ROOT/bench/configs/sd15_unet.json
  SDXL_CONFIG=$ROOT/bench/configs/sdxl_base_unet.json
  SD15_INPUTS="--input sample=2x4x64x64 --input timestep=2 --input encoder_hidden_states=2x77x768"
  SDXL_INPUTS="--input sample=2x4x128x128 --input timestep=2 --input encoder_hidden_states=2x77x2048 --input text_embeds=2x1280 --input time_ids=2x6"
fi
make_models() {
  local name config
  for pair in "sd15:$SD15_CONFIG" "sdxl:$SDXL_CONFIG"; do
    name=${pair%%:*}; config=${pair#*:}
    ( t=$(date +%s)
      timeout -k 5 240 "$BIN/make_model" "$config" "$WORK/models/$name" --dtype bf16 --seed 0 > "$LOGS/make_model_$name.log" 2>&1
      echo "$? $(( $(date +%s) - t ))" > "$LOGS/make_model_$name.rc" ) &
    BG_PIDS+=($!)
  done
}
[ "$BUILT" -eq 1 ] && make_models

# ---- 4. bandwidth -------------------------------------------------------------------------
H2D_PINNED="-"; H2D_PAGEABLE="-"
if [ "$BUILT" -eq 1 ]; then
  run bandwidth 60 200 "$BIN/cuda_bandwidth" --size 1G --repeat 5
  bw() { grep "host -> device, $1" "$LOGS/bandwidth.log" | sed -E 's/.* ([0-9.]+) GB\/s.*/\1 GB\/s/'; }
  if [ "$RC" -eq 0 ]; then H2D_PINNED=$(bw pinned); H2D_PAGEABLE=$(bw pageable)
  else H2D_PINNED=$(classify "$RC" "$LOGS/bandwidth.log" "$LIMIT"); H2D_PAGEABLE=$H2D_PINNED; fi
  say "host -> device: pinned $H2D_PINNED, pageable $H2D_PAGEABLE"
fi

# ---- 5. fixtures on the GPU -------------------------------------------------------------------
# One fixture_check per fixture, up to $PAR at a time (NVRTC and the CPU
# reference use the cores; timing is not measured here).  The models keep a
# reserve of the budget.
if [ "$DRY" -eq 1 ]; then FIXTURES="unet_tiny vae_tiny"; PAR=1; MODEL_RESERVE=60
else FIXTURES=$(for d in "$ROOT"/tests/fixtures/*/; do basename "$d"; done); PAR=4; MODEL_RESERVE=210; fi
fixture_job() {
  local f=$1 limit=$2 t
  t=$(date +%s)
  timeout -k 5 "$limit" "$FC" "$ROOT/tests/fixtures/$f" --target cuda --compute f32,bf16 --cuda-arch sm_90 \
    > "$LOGS/fixture_$f.log" 2>&1
  echo "$? $(( $(date +%s) - t )) $limit" > "$LOGS/fixture_$f.rc"
}
if [ "$BUILT" -eq 1 ]; then
  say "fixtures: $(echo "$FIXTURES" | wc -w) on the GPU, $PAR at a time"
  FPIDS=()
  for f in $FIXTURES; do
    [ -f "$ROOT/tests/fixtures/$f/case.json" ] || continue
    while :; do
      n=0; for p in "${FPIDS[@]}"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done
      [ "$n" -lt "$PAR" ] && break
      sleep 0.5
    done
    limit=$(stage_limit 180 "$MODEL_RESERVE")
    if [ "$limit" -eq 0 ]; then echo "125 0 0" > "$LOGS/fixture_$f.rc"; continue; fi
    fixture_job "$f" "$limit" &
    FPIDS+=($!)
  done
  for p in "${FPIDS[@]}"; do wait "$p"; done
fi
fixture_row() {
  local f=$1 rc secs limit status
  [ -f "$LOGS/fixture_$f.rc" ] || { FIXROWS+=("| $f | - | - | - | not built |"); return; }
  read -r rc secs limit < "$LOGS/fixture_$f.rc"
  if [ "$rc" -eq 125 ]; then status="skipped: time budget"
  elif [ "$rc" -eq 0 ]; then status="ok (${secs}s)"
  else status="$(classify "$rc" "$LOGS/fixture_$f.log" "$limit") (${secs}s)"; fi
  # The worst output per compute: vs diffusers, and vs the CPU backend.
  FIXROWS+=("$(awk -v f="$f" -v st="$status" '
    /^RESULT / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                 c = v["compute"]; seen[c] = 1
                 if (!(c in ref) || v["vs_diffusers"] + 0 > ref[c] + 0 || v["vs_diffusers"] == "nan") ref[c] = v["vs_diffusers"]
                 if (!(c in cpu) || v["vs_cpu"] + 0 > cpu[c] + 0 || v["vs_cpu"] == "nan") cpu[c] = v["vs_cpu"] }
    END { r32 = ("f32" in seen) ? ref["f32"] : "-"; r16 = ("bf16" in seen) ? ref["bf16"] : "-"
          c = (("f32" in seen) ? "f32 " cpu["f32"] : "") (("bf16" in seen) ? ", bf16 " cpu["bf16"] : "")
          printf "| %s | %s | %s | %s | %s |", f, r32, r16, (c == "" ? "-" : c), st }' "$LOGS/fixture_$f.log")")
}
for f in $FIXTURES; do fixture_row "$f"; done
say "fixtures done"

# ---- 5b. channels_last fixtures ----------------------------------------------------------------
if [ "$DRY" -eq 1 ]; then NHWC_FIXTURES="unet_tiny"; else NHWC_FIXTURES="unet_sd15 unet_sdxl vae_sd vae_tiled"; fi
if [ "$BUILT" -eq 1 ]; then
  for f in $NHWC_FIXTURES; do
    limit=$(stage_limit 120 "$MODEL_RESERVE")
    if [ "$limit" -eq 0 ]; then echo "125 0 0" > "$LOGS/fixture_$f-nhwc.rc"; continue; fi
    t=$(date +%s)
    timeout -k 5 "$limit" "$FC" "$ROOT/tests/fixtures/$f" --target cuda --compute f32,bf16 --cuda-arch sm_90 \
      --layout nhwc > "$LOGS/fixture_$f-nhwc.log" 2>&1
    echo "$? $(( $(date +%s) - t )) $limit" > "$LOGS/fixture_$f-nhwc.rc"
    fixture_row "$f-nhwc"
  done
  say "nhwc fixtures done"
fi

# ---- 6b. compile and time the models --------------------------------------------------------
# Device time per forward (diffrun's "kernels X s on the device"; wall time
# when absent), best and median of the runs; the best device rate; the
# device memory held (arena + weights).
to_mib() {  # "5.1 GiB" -> 5222
  awk -v s="$1" 'BEGIN { split(s, a, " "); u = a[2]
    m = (u == "GiB") ? 1024 : (u == "MiB") ? 1 : (u == "KiB") ? 1 / 1024 : 1 / 1048576; printf "%.0f", a[1] * m }'
}
model_row() {
  local case=$1 prec=$2 status=$3 log=$4 ms tf mem
  if [ -f "$log" ] && grep -q '^run [0-9]' "$log"; then
    ms=$(grep '^run [0-9]' "$log" | sed -E -e 's/.*kernels ([0-9.]+) s on the device.*/\1/; t' -e 's/^run [0-9]+: ([0-9.]+) s.*/\1/' |
      sort -g | awk '{ v[NR] = $1 * 1000 } END { printf "%.1f / %.1f", v[1], (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
    tf=$(grep '^run [0-9]' "$log" | grep -oE '[0-9.]+ [TG]FLOP/s' |
      awk '{ r = ($2 == "TFLOP/s") ? $1 : $1 / 1000; if (r > m) m = r } END { printf "%.1f", m }')
    mem=$(grep -E '^device memory held:' "$log" | sed -E 's/^device memory held: ([0-9.]+) ([KMG]iB|bytes).*/\1 \2/')
    if [ -n "$mem" ]; then mem=$(to_mib "$mem")
    else mem=$(grep -E '^device arena peak:' "$log" | sed -E 's/.*\(([0-9]+) bytes\).*/\1/' | awk '{ printf "%.0f (arena)", $1 / 1048576 }'); fi
  fi
  MODROWS+=("| $case | $prec | ${ms:--} | ${tf:--} | ${mem:--} | $status |")
}
wait_model() {  # waits for make_model NAME; sets MM_STATUS
  local name=$1 rc secs
  while [ ! -f "$LOGS/make_model_$name.rc" ] && [ "$(remaining)" -gt 5 ]; do sleep 1; done
  if [ ! -f "$LOGS/make_model_$name.rc" ]; then MM_STATUS="make_model: time budget"; return; fi
  read -r rc secs < "$LOGS/make_model_$name.rc"
  if [ "$rc" -eq 0 ]; then MM_STATUS=ok; say "make_model $name: ok (${secs}s)"
  else MM_STATUS="make_model $(classify "$rc" "$LOGS/make_model_$name.log" 240)"; fi
}
model_case() {  # NAME PRECISION RESERVE INPUTS...
  local name=$1 prec=$2 reserve=$3 label; shift 3
  label=$name
  [ "$DRY" -eq 1 ] && label="$name (dry-run stand-in)"
  if [ "$BUILT" -ne 1 ]; then MODROWS+=("| $label | $prec | - | - | - | not built |"); return; fi
  wait_model "$name"
  if [ "$MM_STATUS" != ok ]; then MODROWS+=("| $label | $prec | - | - | - | $MM_STATUS |"); return; fi
  local plan=$WORK/plans/${name}_$prec.dplan
  run "compile_${name}_$prec" 240 "$reserve" "$BIN/diffc" "$WORK/models/$name" -o "$plan" --target cuda \
    --cuda-arch sm_90 --compute-dtype "$prec" "$@" -v
  if [ "$RC" -ne 0 ]; then
    MODROWS+=("| $label | $prec | - | - | - | compile: $(classify "$RC" "$LOGS/compile_${name}_$prec.log" "$LIMIT") |"); return
  fi
  run "run_${name}_$prec" 120 "$reserve" "$BIN/diffrun" "$plan" --random-inputs --repeat 5
  local status=ok
  [ "$RC" -ne 0 ] && status="run: $(classify "$RC" "$LOGS/run_${name}_$prec.log" "$LIMIT")"
  model_row "$label" "$prec" "$status" "$LOGS/run_${name}_$prec.log"
}
# bf16 first (the headline numbers), SD1.5 f32 last.
# shellcheck disable=SC2086
model_case sd15 bf16 100 $SD15_INPUTS
# shellcheck disable=SC2086
model_case sdxl bf16 40 $SDXL_INPUTS
# shellcheck disable=SC2086
model_case sd15 f32 60 $SD15_INPUTS

# ---- 7. memory techniques on the GPU ------------------------------------------------------------
MEMROWS=()
gbps() { echo "$1" | sed -E 's/^([0-9.]+) GB\/s$/\1/;t;s/.*/0/'; }
mem_case() {  # LABEL RESERVE OPTIONS...
  local label=$1 reserve=$2 tag; shift 2
  tag=$(echo "$label" | tr -c 'a-z0-9\n' '_')
  if [ "$BUILT" -ne 1 ] || [ "$MM_STATUS" != ok ]; then MEMROWS+=("| $label | - | - | - | - | not run |"); return; fi
  local plan=$WORK/plans/sd15_mem_$tag.dplan
  # shellcheck disable=SC2086
  run "compile_mem_$tag" 120 "$reserve" "$BIN/diffc" "$WORK/models/sd15" -o "$plan" --target cuda --cuda-arch sm_90 \
    --compute-dtype bf16 $SD15_INPUTS "$@"
  if [ "$RC" -ne 0 ]; then MEMROWS+=("| $label | - | - | - | - | compile: $(classify "$RC" "$LOGS/compile_mem_$tag.log" "$LIMIT") |"); return; fi
  run "run_mem_$tag" 90 "$reserve" "$BIN/diffrun" "$plan" --random-inputs --repeat 5
  local log=$LOGS/run_mem_$tag.log status=ok ms copied mem
  [ "$RC" -ne 0 ] && status="run: $(classify "$RC" "$log" "$LIMIT")"
  ms=$(grep '^run [0-9]' "$log" 2>/dev/null | sed -E 's/^run [0-9]+: ([0-9.]+) s.*/\1/' | sort -g | head -1 | awk '{ printf "%.1f", $1 * 1000 }')
  copied=$(sed -n 's/.*; \(.*\) copied to the device per run/\1/p' "$log" 2>/dev/null)
  mem=$(grep -E '^device memory held:' "$log" 2>/dev/null | sed -E 's/^device memory held: ([0-9.]+ [KMG]iB).*/\1/')
  [ "$label" = "none" ] && BASE_MS=$ms
  local overlap="-"
  if [ -n "$copied" ] && [ -n "${BASE_MS:-}" ] && [ -n "$ms" ]; then
    overlap=$(awk -v t="$ms" -v base="$BASE_MS" -v mib="$(to_mib "$copied")" -v bw="$(gbps "$H2D_PINNED")" 'BEGIN {
      xfer = (bw > 0) ? mib * 1048576 / (bw * 1e9) * 1000 : 0; lo = (xfer > base) ? xfer : base
      printf "%.2f (copy alone %.1f ms)", t / lo, xfer }')
  fi
  [ "$status" = ok ] && copied=${copied:-0}
  MEMROWS+=("| $label | ${ms:--} | ${copied:--} | ${mem:--} | $overlap | $status |")
}
[ "$BUILT" -eq 1 ] && wait_model sd15
mem_case "none" 30
mem_case "--layout nhwc" 30 --layout nhwc
mem_case "--offload group --group-level leaf --prefetch" 20 --offload group --group-level leaf --prefetch
mem_case "--offload group --group-level block --blocks-per-group 1 --prefetch" 10 --offload group --group-level block \
  --blocks-per-group 1 --prefetch
mem_case "--offload sequential" 0 --offload sequential

for p in "${BG_PIDS[@]}"; do kill "$p" 2>/dev/null; done

# ---- the tables, last -------------------------------------------------------------------------
summary() {
  echo
  echo "## diffc GPU check $( [ "$DRY" -eq 1 ] && echo '(dry run)' ) — $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - T0 )) s"
  echo
  echo "GPU: $GPU_LINE"
  echo "host -> device: pinned $H2D_PINNED, pageable $H2D_PAGEABLE"
  echo "dependencies: $DEPS"
  echo
  echo "| stage | status | s |"
  echo "| --- | --- | --- |"
  for s in "${STAGES[@]}"; do IFS='|' read -r a b c <<< "$s"; echo "| $a | $b | $c |"; done
  echo
  echo "| fixture | f32 rel L2 vs diffusers | bf16 rel L2 vs diffusers | vs CPU (f32, bf16) | status |"
  echo "| --- | --- | --- | --- | --- |"
  printf '%s\n' "${FIXROWS[@]}"
  echo
  echo "| case | precision | ms/forward (best / median) | TFLOP/s | peak device MiB | status |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${MODROWS[@]}"
  echo
  echo "SD1.5 UNet, bf16, batch 2, 64x64 latents: memory techniques (overlap = time / max(time without offload,"
  echo "bytes copied / pinned host-to-device bandwidth); 1.00 means the copies hide entirely behind compute)"
  echo
  echo "| diffc options | ms/forward (best of 5) | copied per forward | device memory held | overlap | status |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${MEMROWS[@]}"
}
summary | tee "$LOGS/summary.md"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT/gpu_check"
  cp "$LOGS"/* "$OUT/gpu_check/" 2>/dev/null
fi
exit 0
