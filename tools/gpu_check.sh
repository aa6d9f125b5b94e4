#!/usr/bin/env bash
# shellcheck disable=SC2317  # functions run through `timeout bash -c`
# gpu_check.sh — the CUDA backend's check in ONE prepared call on the GPU
# machine, in under 8 minutes on an H200 with 16 cores, build included:
#   1. the dependencies: what the machine has and what .gpu-deps/ brings
#   2. the .deb files of .gpu-deps/ (tools/gpu_deps.sh fetched them) unpacked
#      with `dpkg -x` into a prefix under the work folder (never /), which
#      CMake searches first and LD_LIBRARY_PATH names
#   3. build diffc, diffrun, make_model, cuda_bandwidth, fixture_check
#      (Release, -DDIFFC_LLVM=OFF: the machine has no LLVM; ninja if present)
#   4. nvidia-smi summary; host <-> device bandwidth, pinned and pageable
#   5. correctness first: every fixture with a case.json on the GPU in f32 and
#      bf16 compute, against diffusers' recorded outputs and against the
#      reference backend running the same plan (tests/fixture_check);
#      then the UNet and VAE fixtures again with --layout nhwc
#   6. timing: SD1.5-shaped UNet at 64x64 latents (bf16, f32) and SDXL-shaped
#      UNet at 128x128 latents (bf16), batch 2, random weights from the real
#      configs (tools/make_model, bench/configs), sm_90, diffrun --repeat 5
#   7. the memory techniques on the SD1.5 UNet (bf16): channels_last and
#      offload with prefetch, the bytes copied per forward and the overlap:
#      time / max(time without offload, bytes / pinned host-to-device
#      bandwidth) — 1.0 is perfect overlap
#   8. microbenchmarks, when tools/gpu_check_bench.sh exists (sourced)
# Every stage runs under `timeout` inside one time budget; a failure, a
# timeout or a missing GPU is a row of the tables, never the end of the
# script, which exits 0 once the tables are written.  The tables come LAST,
# as one short set.  What comes back: OUTDIR/summary.md (the tables) and
# OUTDIR/gpu_check.tar.gz (every log, the summary, the progress lines).
#
# usage: bash tools/gpu_check.sh [--out DIR] [--dry-run] [--kernel-cache DIR]
#                                [--build-dir DIR] [--work DIR] [--jobs N]
#                                [--budget SECONDS]
#   --out DIR           where summary.md and gpu_check.tar.gz go (default: $OUT
#                       when set, else the work folder)
#   --dry-run           a quick pass for a machine without a GPU: the same
#                       stages on two tiny fixtures and the reduced-width
#                       SD1.5/SDXL fixture configs standing in for the real
#                       ones; every GPU stage must report "no GPU" cleanly
#   --kernel-cache DIR  compiled kernels brought along (and added to): NVRTC
#                       images are keyed by source, options, arch AND the
#                       NVRTC version, so a cache made with another NVRTC
#                       version is valid but never hit (default: a fresh
#                       cache in the work folder)
#   --build-dir DIR     build directory (default: build-gpu in the repository)
#   --work DIR          prefix, models, plans and logs (default:
#                       ${TMPDIR:-/tmp}/diffc-gpu-check)
#   --jobs N            build and fixture parallelism (default: nproc)
#   --budget S          seconds for all stages together, build included
#                       (default 450)
# Before the run, on a machine with Debian's archive: bash tools/gpu_deps.sh
# (the device tool's carry must then name .gpu-deps).
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$ROOT/build-gpu
WORK=${TMPDIR:-/tmp}/diffc-gpu-check
JOBS=$(nproc 2>/dev/null || echo 4)
BUDGET=450
DRY=0
OUTDIR=${OUT:-}
KCACHE=""
need_value() { [ $# -ge 2 ] || { echo "gpu_check: $1 needs a value (see --help)" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) DRY=1 ;;
    --out) need_value "$@"; OUTDIR=$2; shift ;;
    --kernel-cache) need_value "$@"; KCACHE=$2; shift ;;
    --build-dir) need_value "$@"; BUILD=$2; shift ;;
    --work) need_value "$@"; WORK=$2; shift ;;
    --jobs) need_value "$@"; JOBS=$2; shift ;;
    --budget) need_value "$@"; BUDGET=$2; shift ;;
    -h|--help) sed -n '3,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

LOGS=$WORK/logs
mkdir -p "$LOGS" "$WORK/models" "$WORK/plans"
rm -f "$LOGS"/*
OUTDIR=${OUTDIR:-$WORK}
mkdir -p "$OUTDIR" || { echo "gpu_check: cannot create $OUTDIR" >&2; exit 2; }
if [ -n "$KCACHE" ]; then
  mkdir -p "$KCACHE" && KCACHE=$(cd "$KCACHE" && pwd)
  export DIFFC_CACHE_DIR=$KCACHE
else
  export DIFFC_CACHE_DIR=$WORK/kcache
fi
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

# ---- 1. dependencies, 2. the .deb prefix ------------------------------------------------
# The libraries the no-LLVM build links (CMakeLists.txt's find_path calls),
# by header; .gpu-deps/ brings them where the machine lacks them.
DEBS=$ROOT/.gpu-deps
PREFIX=$WORK/prefix
HEADERS="cjson/cJSON.h xxhash.h sodium.h utf8proc.h png.h zlib.h"
# Unpacks every .deb of $DEBS into $PREFIX: dpkg -x, or ar + tar where the
# machine has no dpkg.  A -dev package's unversioned .so link whose target
# is the runtime of a library every system has (zlib: not fetched, see
# tools/gpu_deps.sh) is pointed at this machine's copy.
unpack_debs() {
  local f link target soname sys data z
  rm -rf "$PREFIX" && mkdir -p "$PREFIX" || return 1
  for f in "$DEBS"/*.deb; do
    if command -v dpkg >/dev/null 2>&1; then dpkg -x "$f" "$PREFIX" || return 1
    else
      data=$(ar t "$f" | grep '^data\.tar') || return 1
      case $data in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
      # shellcheck disable=SC2086
      ar p "$f" "$data" | tar -x $z -C "$PREFIX" -f - || return 1
    fi
    echo "unpacked $(basename "$f")"
  done
  while IFS= read -r link; do
    [ -e "$link" ] && continue
    target=$(readlink "$link")
    soname="$(basename "$link").$(echo "${target#*.so.}" | cut -d. -f1)"
    sys=$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | awk -v n="$soname" '$1 == n { print $NF; exit }')
    if [ -n "$sys" ]; then ln -sf "$sys" "$link"; echo "$(basename "$link") -> $sys (this machine's)"
    else echo "dangling: $link -> $target (no $soname on this machine)"; fi
  done < <(find "$PREFIX" -type l -name '*.so')
  find "$PREFIX" -name '*.so*' -printf '%h\n' | sort -u > "$WORK/prefix_libdirs"
}
check_deps() {
  local missing=() cc=${CC:-cc} h inc=""
  [ -d "$PREFIX/usr/include" ] && inc="-I$PREFIX/usr/include"
  for c in cmake "$cc" timeout tar nvidia-smi; do command -v "$c" >/dev/null 2>&1 || missing+=("command $c"); done
  for h in $HEADERS; do
    # shellcheck disable=SC2086
    echo "#include <$h>" | "$cc" $inc -E -x c - >/dev/null 2>&1 || missing+=("header $h")
  done
  local nvrtc=""
  for d in ${CUDA_HOME:-} ${CUDA_PATH:-} /usr/local/cuda; do
    ls "$d"/lib64/libnvrtc.so* "$d"/lib/libnvrtc.so* >/dev/null 2>&1 && nvrtc=$d
  done
  [ -n "$nvrtc" ] || ldconfig -p 2>/dev/null | grep -q libnvrtc || missing+=("NVRTC (libnvrtc.so, CUDA toolkit)")
  ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1' || missing+=("NVIDIA driver (libcuda.so.1)")
  if [ ${#missing[@]} -eq 0 ]; then echo "all found"; else printf 'missing: %s\n' "${missing[@]}"; fi
}
export -f unpack_debs check_deps
export ROOT WORK DEBS PREFIX HEADERS
DEB_LINE="none (no .gpu-deps/: the machine's own libraries)"
if ls "$DEBS"/*.deb >/dev/null 2>&1; then
  run prefix 60 0 unpack_debs
  if [ "$RC" -eq 0 ]; then
    DEB_LINE="$(ls "$DEBS"/*.deb | wc -l) .deb files from $(head -1 "$DEBS/SOURCE" 2>/dev/null || echo "?") in $PREFIX"
    # CMake searches these first (CMakeLists.txt's find_path/find_library and FindPNG/FindZLIB)
    export CMAKE_PREFIX_PATH=$PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export CMAKE_INCLUDE_PATH=$PREFIX/usr/include${CMAKE_INCLUDE_PATH:+:$CMAKE_INCLUDE_PATH}
    LIBDIRS=$(paste -sd: "$WORK/prefix_libdirs")
    export CMAKE_LIBRARY_PATH=$LIBDIRS${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}
    export LD_LIBRARY_PATH=$LIBDIRS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  else
    DEB_LINE="unpacking failed: $(tail -1 "$LOGS/prefix.log")"
  fi
  say "prefix: $DEB_LINE"
fi
run deps 30 0 check_deps
DEPS=$(tr '\n' ';' < "$LOGS/deps.log" | sed 's/;$//; s/;/, /g; s/missing: //g')
grep -q '^missing' "$LOGS/deps.log" && { unset 'STAGES[${#STAGES[@]}-1]'; STAGES+=("deps|missing: $DEPS|$SECS"); }
say "dependencies: $DEPS"

# ---- 3. build (no LLVM) ---------------------------------------------------------------------
build() {
  local gen=() launcher=()
  [ ! -f "$BUILD/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=Release -DDIFFC_LLVM=OFF &&
    cmake --build "$BUILD" -j"$JOBS" --target diffc diffrun make_model cuda_bandwidth cuda_microbench fixture_check &&
    "$BUILD/diffc" --version &&
    { echo "libraries:"; ldd "$BUILD/diffc" | grep -E 'cjson|xxhash|sodium|utf8proc|png|libz'; true; }
}
export -f build
export BUILD JOBS
run build 300 120 build
BUILT=$([ "$RC" -eq 0 ] && echo 1 || echo 0)
BIN=$BUILD
FC=$BUILD/tests/fixture_check

# ---- 4. the GPU -------------------------------------------------------------------------
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

# ---- 4b. bandwidth -------------------------------------------------------------------------
H2D_PINNED="-"; H2D_PAGEABLE="-"
if [ "$BUILT" -eq 1 ]; then
  run bandwidth 60 200 "$BIN/cuda_bandwidth" --size 1G --repeat 5
  bw() { grep "host -> device, $1" "$LOGS/bandwidth.log" | sed -E 's/.* ([0-9.]+) GB\/s.*/\1 GB\/s/'; }
  if [ "$RC" -eq 0 ]; then H2D_PINNED=$(bw pinned); H2D_PAGEABLE=$(bw pageable)
  else H2D_PINNED=$(classify "$RC" "$LOGS/bandwidth.log" "$LIMIT"); H2D_PAGEABLE=$H2D_PINNED; fi
  say "host -> device: pinned $H2D_PINNED, pageable $H2D_PAGEABLE"
fi

# ---- 5. fixtures on the GPU: correctness first -------------------------------------------------
# One fixture_check per fixture with a case.json, up to $PAR at a time (NVRTC
# and the reference backend use the cores; timing is not measured here).
# The models keep a reserve of the budget.
if [ "$DRY" -eq 1 ]; then FIXTURES="unet_tiny vae_tiny"; PAR=1; MODEL_RESERVE=60
else FIXTURES=$(for c in "$ROOT"/tests/fixtures/*/case.json; do basename "$(dirname "$c")"; done); PAR=4; MODEL_RESERVE=210; fi
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
  # the plans on the reference backend against diffusers (checked with or without a GPU)
  local rok rbad
  rok=$(grep -cE 'reference vs diffusers .* ok$' "$LOGS/fixture_$f.log" 2>/dev/null)
  rbad=$(grep -cE 'reference vs diffusers .* FAIL$' "$LOGS/fixture_$f.log" 2>/dev/null)
  [ "${rok:-0}" -gt 0 ] || [ "${rbad:-0}" -gt 0 ] &&
    status="$status; reference vs diffusers: ${rok:-0} ok$([ "${rbad:-0}" -gt 0 ] && echo ", $rbad FAIL")"
  # The worst output per compute: vs diffusers, and vs the reference backend on the same plan.
  FIXROWS+=("$(awk -v f="$f" -v st="$status" '
    /^RESULT / { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                 c = v["compute"]; seen[c] = 1
                 if (!(c in ref) || v["vs_diffusers"] + 0 > ref[c] + 0 || v["vs_diffusers"] == "nan") ref[c] = v["vs_diffusers"]
                 if (!(c in cpu) || v["vs_reference"] + 0 > cpu[c] + 0 || v["vs_reference"] == "nan") cpu[c] = v["vs_reference"] }
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

# ---- 8. microbenchmarks: the hook for tools/gpu_check_bench.sh ------------------------------
# When that file exists it is sourced here, after the model stages, and must
# define gpu_bench_stages (called now: its stages go through `run`, `say` and
# `stage_limit`, with $BIN the build directory, $BUILT 1 when the build
# succeeded, $WORK, $LOGS and $DRY) and gpu_bench_summary (called in the
# summary below, to print its tables).
BENCH_SCRIPT=$ROOT/tools/gpu_check_bench.sh
if [ -f "$BENCH_SCRIPT" ]; then
  # shellcheck source=/dev/null
  . "$BENCH_SCRIPT"
  if declare -F gpu_bench_stages >/dev/null; then gpu_bench_stages
  else STAGES+=("bench|FAIL: $BENCH_SCRIPT defines no gpu_bench_stages|0"); fi
fi

# ---- the tables, last -------------------------------------------------------------------------
summary() {
  echo
  echo "## diffc GPU check $( [ "$DRY" -eq 1 ] && echo '(dry run)' ) — $(date -u '+%Y-%m-%d %H:%M UTC'), $(( $(date +%s) - T0 )) s"
  echo
  echo "GPU: $GPU_LINE"
  echo "host -> device: pinned $H2D_PINNED, pageable $H2D_PAGEABLE"
  echo "build: -DDIFFC_LLVM=OFF; libraries from .gpu-deps: $DEB_LINE"
  echo "dependencies: $DEPS"
  echo "kernel cache: $DIFFC_CACHE_DIR"
  echo
  echo "| stage | status | s |"
  echo "| --- | --- | --- |"
  for s in "${STAGES[@]}"; do IFS='|' read -r a b c <<< "$s"; echo "| $a | $b | $c |"; done
  echo
  echo "| fixture | f32 rel L2 vs diffusers | bf16 rel L2 vs diffusers | vs reference backend (f32, bf16) | status |"
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
  if declare -F gpu_bench_summary >/dev/null; then gpu_bench_summary; fi
}
# What comes back (at most 8 files leave the GPU machine): the summary, and
# every log in one archive.
summary > "$LOGS/summary.md"
cp "$LOGS/summary.md" "$OUTDIR/summary.md"
tar -czf "$OUTDIR/gpu_check.tar.gz" -C "$WORK" logs
echo "gpu_check: $OUTDIR/summary.md, $OUTDIR/gpu_check.tar.gz ($(du -k "$OUTDIR/gpu_check.tar.gz" | cut -f1) KiB)"
cat "$LOGS/summary.md"
exit 0
