#!/usr/bin/env bash
# The memory techniques, measured (issue 5): for the full-size SD1.5 UNet
# (2x4x64x64 latents, 77 tokens) and the SD VAE decoder at 512² and 1024²,
# each technique and the useful combinations: the device bytes the plan
# predicts and diffrun measures (resident weights + the arena, on the CPU
# backend whose "device" is a budgeted arena), weights kept in host memory,
# the host memory held for them (--host-memory pinned: all of them, read at
# load; on-demand: a bounce buffer, each upload reads the file), bytes
# copied host->device per forward, time per forward, and peak RSS.
# Weights are seeded random (tools/make_model from bench/configs); nothing
# is downloaded.  Writes bench/memory.md and prints it.  Not part of CTest.
#
#   bench/memory.sh [--quick]      # --quick: UNet only, fewer cases
#
# Environment: DIFFC_BENCH_DIR (work files; default build-bench/memory).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/bench_lib.sh
. "$repo/bench/bench_lib.sh"
work="${DIFFC_BENCH_DIR:-$repo/build-bench/memory}"
quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "memory.sh: unknown option $a (see --help)" >&2; exit 2 ;;
  esac
done

bench_build memory.sh diffc diffrun make_model
bin="$repo/build-bench"
mkdir -p "$work"

model() { bench_model memory.sh "$@"; } # NAME CONFIG

rows=()
# case MODEL LABEL "INPUT ARGS" "OPTIONS"
case_() {
  local name=$1 label=$2 inputs=$3 opts=$4 plan="$work/p.dplan" log="$work/run.txt"
  rm -rf "$work/od"
  # shellcheck disable=SC2086
  if ! "$bin/diffc" "$work/$name" -o "$plan" $inputs $opts --dump-ir "$work/p.ir" 2>"$work/compile.txt"; then
    rows+=("| $label | \`$opts\` | compile failed: $(tail -1 "$work/compile.txt") | | | | | | |")
    return
  fi
  if ! "$bin/diffrun" "$plan" --random-inputs --repeat 2 >"$log" 2>&1; then
    rows+=("| $label | \`$opts\` | run failed: $(tail -1 "$log") | | | | | | |")
    return
  fi
  local predicted measured resident host held copied secs rss
  predicted=$(grep -o 'peak device memory: [^=]*' "$work/p.ir" | sed 's/peak device memory: //; s/ *$//')
  measured=$(sed -n 's/^device arena peak: \(.*\) measured.*/\1/p' "$log")
  resident=$(sed -n 's/^weights: \(.*\) resident.*/\1/p' "$log")
  rss=$(sed -n 's/.*host peak RSS: \(.*\)$/\1/p' "$log")
  host=$(sed -n 's/^offloaded: \(.*\) of weights.*/\1/p' "$log")
  held=$(sed -n 's/^host memory: \([a-z-]*\), \(.*\) held for the offloaded weights.*/\2 (\1)/p' "$log")
  copied=$(sed -n 's/.*; \(.*\) copied to the device per run/\1/p' "$log")
  secs=$(sed -n 's/^run 2: \([0-9.]*\) s.*/\1/p' "$log")
  # --device-map: each device's planned and measured bytes instead of the one-device figures
  if grep -q '^#   device 1: ' "$work/p.ir"; then
    predicted=$(sed -n 's/^#   device \([0-9]\): \([^=]*\) = .*/dev\1 \2/p' "$work/p.ir" | sed 's/ *$//' | paste -sd ';' | sed 's/;/; /g')
    measured=$(sed -n 's/^  device \([0-9]\): arena \(.*\) measured, .* planned; weights \(.*\)$/dev\1 \3 + \2/p' "$log" |
      paste -sd ';' | sed 's/;/; /g')
    resident=""
    copied="$(sed -n 's/^transferred between devices: \(.*\) per run/\1 between devices/p' "$log")"
  fi
  rows+=("| $label | \`${opts:-none}\` | $predicted | ${resident:+$resident + }$measured | ${host:-0} | ${held:-0} | ${copied:-0} | $secs | $rss |")
  echo "  $label ${opts:-none}: device $predicted, ${secs} s"
}

model sd15_unet sd15_unet.json
unet="--input sample=2x4x64x64 --input timestep=2 --input encoder_hidden_states=2x77x768"
echo "memory.sh: SD1.5 UNet, 2x4x64x64"
case_ sd15_unet "UNet 64²" "$unet" ""
case_ sd15_unet "UNet 64²" "$unet" "--offload model"
case_ sd15_unet "UNet 64²" "$unet" "--offload sequential"
case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level leaf --prefetch"
case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level leaf --prefetch --host-memory on-demand"
case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level block --blocks-per-group 1"
case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level block --blocks-per-group 1 --host-memory on-demand"
case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level block --blocks-per-group 1 --prefetch"
case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level block --blocks-per-group 1 --prefetch --host-memory on-demand"
case_ sd15_unet "UNet 64²" "$unet" "--storage-dtype fp8_e4m3"
case_ sd15_unet "UNet 64²" "$unet" "--layout nhwc"
case_ sd15_unet "UNet 64²" "$unet" "--device-map balanced --max-memory 0=2GiB,1=2GiB"
case_ sd15_unet "UNet 64²" "$unet" "--device-map sequential --max-memory 0=1GiB,1=1GiB,cpu=8GiB"
case_ sd15_unet "UNet 64²" "$unet" "--storage-dtype fp8_e4m3 --offload group --group-level block --blocks-per-group 1 --prefetch"
if [ "$quick" = 0 ]; then
  case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level block --blocks-per-group 3"
  case_ sd15_unet "UNet 64²" "$unet" "--offload group --group-level leaf --prefetch --offload-dir $work/od"
  model sd15_vae sd15_vae.json
  for px in 512 1024; do
    lat=$((px / 8))
    vae="--entry decode --input z=1x4x${lat}x${lat}"
    echo "memory.sh: SD VAE decode, ${px}²"
    case_ sd15_vae "VAE decode ${px}²" "$vae" ""
    case_ sd15_vae "VAE decode ${px}²" "$vae" "--vae-tiling"
    case_ sd15_vae "VAE decode ${px}²" "$vae" "--vae-tiling --offload group --group-level leaf --prefetch"
    case_ sd15_vae "VAE decode ${px}²" "$vae" "--storage-dtype fp8_e4m3"
    case_ sd15_vae "VAE decode ${px}²" "$vae" "--vae-tiling --storage-dtype fp8_e4m3 --offload sequential"
    case_ sd15_vae "VAE decode ${px}²" "$vae" "--layout nhwc"
  done
fi

out="$repo/bench/memory.md"
{
  echo "# Memory techniques, measured"
  echo
  echo "Produced by \`bench/memory.sh$([ "$quick" = 1 ] && echo ' --quick')\` on $(date -u +%Y-%m-%d), CPU backend, $(nproc) threads"
  echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))."
  echo "Models: the full-size SD1.5 UNet and SD VAE from \`bench/configs/\`, seeded random fp32 weights."
  echo "\"device\" is the CPU backend's budgeted arena plus the resident weights: what a GPU would need."
  echo "Predicted = the IR dump's peak; measured = what diffrun saw (resident weights + arena high-water mark)."
  echo "Time is the second of two runs (the first pays page faults on the mapped weights)."
  echo "Peak RSS counts the modelled device arena too (on the CPU it is host memory), so --offload model,"
  echo "whose uploads copy every weight into the arena, holds the weights twice there; on a GPU it would not."
  echo "A tiled decode with offload uploads each tile's weights again (as diffusers' hooks onload a module"
  echo "at every call): more bytes copied, none held between tiles."
  echo "\"host held\" is the host memory kept for offloaded weights: --host-memory pinned (the default) reads"
  echo "them all at load (on the CPU an ordinary block stands for page-locked memory); on-demand (the default"
  echo "with --offload-dir) keeps a bounce buffer and reads each weight from its file at every upload."
  echo "--device-map rows give each device's peak (devN weights + arena; one arena per device on the CPU"
  echo "backend) and the bytes transferred between devices instead of a single device's."
  echo
  echo "| case | diffc options | predicted device peak | measured (weights + arena) | weights in host memory | host held | copied per forward | s per forward | peak RSS |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} >"$out"
cat "$out"
