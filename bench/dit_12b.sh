#!/usr/bin/env bash
# "A 12-billion-parameter model on a 24 GiB, 2-core machine" (issue 14, not CTest): one forward of
# the full-size FLUX.1-dev transformer at 256x256 (256 packed image tokens + 512 text tokens) with
# fp8 weight storage, leaf-level group offload with prefetch from an --offload-dir, and on-demand
# host memory, so neither the weights nor a pinned copy of them is ever held whole in RAM.  Reports
# compile time, time per forward, the plan's device peak and measured arena, and the process's
# peak RSS (from /usr/bin/time -v and from diffrun); writes bench/results-dit-12b.md.
#
#   bench/dit_12b.sh [--threads N] [--reuse-plan]
#     --reuse-plan   keep the plan of an earlier run (its compile time is then not re-measured)
#
# The forward runs twice: as diffrun runs by default (every weight's bytes hashed at load, through
# the weights' memory map: the file pages read count in RSS until the kernel drops them), and with
# --no-verify-weights (the weights are then only read by pread into the bounce buffer).
#
# It needs the bf16 checkpoint made by bench/dit_memory.sh ($DIFFC_DIT_DATA/flux_pipe/transformer)
# and the 256x256 inputs made by bench/bench_dit.py ($DIFFC_DIT_DATA/dit/inputs_256.safetensors; the
# same inputs its reduced-depth comparison uses).  PyTorch cannot run this model here (fp32 weights
# alone are 44 GiB, bf16 22 GiB, in 24 GiB of RAM), so its output is checked against diffusers on a
# reduced-depth config instead (bench/bench_dit.py, case fp8).  The offload folder holds 14 GB.
#
# Environment: DIFFC_DIT_DATA (default /work/bench-data), DIFFC_BIN (default build-bench, built here).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="${DIFFC_DIT_DATA:-/work/bench-data}"
threads=2
reuse=0
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift ;;
    --reuse-plan) reuse=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "dit_12b.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "${DIFFC_BIN:-}" ]; then
  cmake -S "$repo" -B "$repo/build-bench" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$repo/build-bench" -j"$(nproc)" --target diffc diffrun >/dev/null
fi
bin="${DIFFC_BIN:-$repo/build-bench}"
model="$data/flux_pipe/transformer"
inputs="$data/dit/inputs_256.safetensors"
work="$data/12b"
for f in "$model/config.json" "$inputs"; do
  [ -f "$f" ] || { echo "dit_12b.sh: $f is missing: run bench/dit_memory.sh and bench/bench_dit.py first" >&2; exit 1; }
done
mkdir -p "$work"
export DIFFC_CACHE_DIR="$data/kcache"

opts=(--storage-dtype fp8_e4m3 --offload group --group-level leaf --prefetch
      --offload-dir "$work/od" --host-memory on-demand)
compile_cmd=("$bin/diffc" "$model" -o "$work/flux12b.dplan"
             --input hidden_states=1x256x64 --input encoder_hidden_states=1x512x4096
             --input img_ids=256x3 --input txt_ids=512x3 "${opts[@]}" --dump-ir "$work/flux12b.ir" -v)
run_cmd=("$bin/diffrun" "$work/flux12b.dplan" --inputs "$inputs" --outputs "$work/out.safetensors"
         --threads "$threads")

if [ "$reuse" = 0 ] || [ ! -f "$work/flux12b.dplan" ]; then
  echo "dit_12b.sh: compiling"
  /usr/bin/time -v "${compile_cmd[@]}" >"$work/compile.txt" 2>&1
fi
forward() { # LOG [DIFFRUN OPTIONS]: one forward under /usr/bin/time -v, the load before and after
  local log=$1
  shift
  echo "dit_12b.sh: one forward $* (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >"$log.load"
  /usr/bin/time -v "${run_cmd[@]}" "$@" >"$log" 2>&1
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$log.load"
}
forward "$work/run.txt"
forward "$work/run_noverify.txt" --no-verify-weights

field() { sed -n "s/^[[:space:]]*$1: //p" "$2" | head -1; }
compile_wall=$(field 'Elapsed (wall clock) time (h:mm:ss or m:ss)' "$work/compile.txt")
run_wall=$(field 'Elapsed (wall clock) time (h:mm:ss or m:ss)' "$work/run.txt")
rss_kb=$(field 'Maximum resident set size (kbytes)' "$work/run.txt")
run2_wall=$(field 'Elapsed (wall clock) time (h:mm:ss or m:ss)' "$work/run_noverify.txt")
rss2_kb=$(field 'Maximum resident set size (kbytes)' "$work/run_noverify.txt")
peak=$(sed -n 's/^# peak device memory: //p' "$work/flux12b.ir")
weights=$(sed -n 's/^# weights: //p' "$work/flux12b.ir")
offloaded=$(sed -n 's/^# offloaded: //p' "$work/flux12b.ir")
finite=$("${PYTHON:-python3}" "$repo/bench/bench_dit.py" --stats "$work/out.safetensors" 2>/dev/null || echo "n/a")

out="$repo/bench/results-dit-12b.md"
{
  echo "Produced by \`bench/dit_12b.sh --threads $threads\` on $(date -u +%Y-%m-%d)"
  echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs,"
  echo "$(grep -o -w -E 'avx512f|avx2' /proc/cpuinfo | sort -u | paste -sd ' '); $(free -g | awk '/^Mem:/ {print $2}') GiB RAM;"
  echo "load average: $(paste -sd ' ' "$work/run.txt.load" | sed 's/load //g') (first forward);"
  echo "$(paste -sd ' ' "$work/run_noverify.txt.load" | sed 's/load //g') (second))."
  echo
  echo "| | |"
  echo "| --- | --- |"
  echo "| model | FLUX.1-dev transformer, 11.9 B parameters, seeded random bf16 checkpoint (22.2 GiB) |"
  echo "| input | 256x256: 256 image + 512 text tokens, batch 1 |"
  echo "| diffc options | \`${opts[*]}\` |"
  echo "| compile (wall) | $compile_wall (writes the fp8 groups into the offload folder) |"
  echo "| one forward, diffrun (wall, load and hashing included) | $run_wall; with --no-verify-weights $run2_wall |"
  echo "| diffrun's own report (the forward alone) | $(grep -E '^run 1:' "$work/run.txt" | head -1); with --no-verify-weights $(grep -E '^run 1:' "$work/run_noverify.txt" | head -1) |"
  echo "| CPU time of the process (user + sys) | $(field 'User time (seconds)' "$work/run.txt") + $(field 'System time (seconds)' "$work/run.txt") s; with --no-verify-weights $(field 'User time (seconds)' "$work/run_noverify.txt") + $(field 'System time (seconds)' "$work/run_noverify.txt") s |"
  echo "| peak RSS (/usr/bin/time -v) | $((rss_kb / 1024)) MiB (weights hashed at load); $((rss2_kb / 1024)) MiB with --no-verify-weights |"
  echo "| predicted device peak | $peak |"
  echo "| measured device arena | $(sed -n 's/^device arena peak: //p' "$work/run.txt") |"
  echo "| weights | $weights |"
  echo "| offloaded | $offloaded |"
  echo "| output | $finite |"
  echo
  echo "Commands:"
  echo
  echo '```'
  echo "${compile_cmd[*]}" | sed "s|$data|\$DIFFC_DIT_DATA|g; s|$repo/||g"
  echo "${run_cmd[*]}" | sed "s|$data|\$DIFFC_DIT_DATA|g; s|$repo/||g"
  echo "${run_cmd[*]} --no-verify-weights" | sed "s|$data|\$DIFFC_DIT_DATA|g; s|$repo/||g"
  echo '```'
} >"$out"
cat "$out"
grep -v -E '^\s' "$work/run.txt" | tail -8
grep -v -E '^\s' "$work/run_noverify.txt" | tail -8
