#!/usr/bin/env bash
# The cost model's error, measured (issue 15): diffc --memory-budget predicts
# each candidate plan's time from a calibration profile; this compares the
# prediction with diffrun's measured time, per whole plan and per kernel
# class, on the CPU backend (llvm), for the full-size SD1.5 UNet (2x4x64x64
# latents, 77 tokens, f32) and the SD VAE decoder (z 1x4x64x64 -> 512²).
#
#  1. Both models are compiled with no memory options and calibrated
#     (diffrun --calibrate=FILE --repeat 2): one profile per model per run of
#     the bench, in the work dir.
#  2. Per model: the largest reachable device peak (a budget far above it:
#     --offload none) and the smallest (a budget of 1 byte: the error names
#     it), and three budgets between (the peaks of the options diffc stores
#     in a plan, OPTS "fit", else midpoints); each is compiled with
#     --memory-budget B --calibration (the model's own profile: in-sample),
#     and again with the other model's profile (out-of-sample; its choice
#     is run too when it differs).  The predicted time and per-class seconds come from the
#     plan's OPTS "budget" JSON.
#  3. Each plan runs --repeat 2 --device-memory B --profile: the faster run's
#     time, the per-class times of --profile, and the measured device peak
#     (resident weights + arena high-water mark), which must be <= B.
#  4. bench/cost_model_report.py writes bench/results-cost-model.md.
#
# Timing waits (up to 5 minutes) for the 1-minute load average to drop
# below 1.5, and before each calibration or run up to a minute more (8
# minutes of waiting in all); the results record the load of each.  About
# 5 minutes on an idle 2-core machine.
# Weights are seeded random (tools/make_model from bench/configs); nothing is
# downloaded.  Not part of CTest.
#
#   bench/cost_model.sh
#
# Environment: DIFFC_BENCH_DIR (work files and the models, reused when
# present; default build-bench/cost).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/bench_lib.sh
. "$repo/bench/bench_lib.sh"
work="${DIFFC_BENCH_DIR:-$repo/build-bench/cost}"
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "cost_model.sh: unknown option $a (see --help)" >&2; exit 2 ;;
  esac
done

bench_build cost_model.sh diffc diffrun make_model
bin="$repo/build-bench"
mkdir -p "$work"
runs="$work/cost-model-runs"
rm -rf "$runs"
mkdir -p "$runs"

model() { bench_model cost_model.sh "$@"; } # NAME CONFIG
model sd15_unet sd15_unet.json
model sd15_vae sd15_vae.json
declare -A dir=([unet]=sd15_unet [vae]=sd15_vae)
declare -A inputs=([unet]="--input sample=2x4x64x64 --input timestep=2 --input encoder_hidden_states=2x77x768"
                   [vae]="--entry decode --input z=1x4x64x64")
declare -A other=([unet]=vae [vae]=unet)

load1() { cut -d' ' -f1 /proc/loadavg; }
waited=0
# wait_quiet SECONDS: until the 1-minute load average is below 1.5, at most
# SECONDS, and at most 8 minutes over the whole bench
wait_quiet() {
  local w=0
  while awk -v l="$(load1)" 'BEGIN { exit !(l >= 1.5) }' && [ "$w" -lt "$1" ] && [ "$waited" -lt 480 ]; do
    [ "$w" = 0 ] && echo "cost_model.sh: load average $(load1), waiting (up to $1 s) for it to drop below 1.5"
    sleep 10
    w=$((w + 10)) waited=$((waited + 10))
  done
}
wait_quiet 300
{
  echo "load_start=$(cut -d' ' -f1-3 /proc/loadavg)"
  echo "waited_s=$waited"
  echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "nproc=$(nproc)"
} >"$runs/machine.txt"
echo "cost_model.sh: timing at load average $(load1) (waited ${waited} s)"

compile() { # M OUT.dplan LOG [diffc options...]
  local m=$1 out=$2 log=$3
  shift 3
  # shellcheck disable=SC2086
  "$bin/diffc" "$work/${dir[$m]}" ${inputs[$m]} -o "$out" --no-progress "$@" 2>"$log"
}
run() { # PLAN LOG BUDGET: fails loudly, also when the measured device peak is over BUDGET
  local plan=$1 log=$2 b=$3
  wait_quiet 60
  load1 >"${log%.run.txt}.load"
  if ! "$bin/diffrun" "$plan" --random-inputs --repeat 2 --profile --device-memory "$b" >"$log" 2>&1; then
    echo "cost_model.sh: diffrun $plan --device-memory $b failed:" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  python3 "$repo/bench/cost_model_report.py" --check-peak "$log" "$b" || exit 1
}

# 1. calibrate on each model's plan without memory options
for m in unet vae; do
  wait_quiet 60
  echo "cost_model.sh: calibrating on the $m (load average $(load1))"
  load1 >"$runs/cal-$m.load"
  compile "$m" "$runs/$m-base.dplan" "$runs/$m-base.compile.txt" ||
    { cat "$runs/$m-base.compile.txt" >&2; exit 1; }
  "$bin/diffrun" "$runs/$m-base.dplan" --calibrate="$runs/cal-$m.json" --repeat 2 >"$runs/cal-$m.txt" 2>&1 ||
    { cat "$runs/cal-$m.txt" >&2; exit 1; }
done

# the peak a budget compile chose, from its plan's OPTS
chosen_bytes() { python3 "$repo/bench/cost_model_report.py" --chosen-bytes "$1"; }

# 2-3. budgets per model
for m in unet vae; do
  cal="$runs/cal-$m.json" ocal="$runs/cal-${other[$m]}.json"
  compile "$m" "$runs/$m-hi.dplan" "$runs/$m-hi.compile.txt" --memory-budget 1TiB --calibration "$cal" ||
    { cat "$runs/$m-hi.compile.txt" >&2; exit 1; }
  hi=$(chosen_bytes "$runs/$m-hi.dplan")
  if compile "$m" "$runs/$m-lo.dplan" "$runs/$m-lo.compile.txt" --memory-budget 1 --calibration "$cal"; then
    echo "cost_model.sh: a 1-byte budget fit the $m?" >&2
    exit 1
  fi
  # "... the smallest device peak diffc can reach is 641.1 MiB (...": the next 0.1 unit up, in bytes
  lo=$(python3 "$repo/bench/cost_model_report.py" --smallest-peak "$runs/$m-lo.compile.txt")
  echo "cost_model.sh: $m: device peaks from $lo to $hi bytes"
  i=0
  for b in $(python3 "$repo/bench/cost_model_report.py" --budgets "$lo" "$runs/$m-hi.dplan"); do
    i=$((i + 1))
    base="$runs/$m-b$i"
    echo "$b" >"$base.budget"
    compile "$m" "$base-in.dplan" "$base-in.compile.txt" --memory-budget "$b" --calibration "$cal" ||
      { cat "$base-in.compile.txt" >&2; exit 1; }
    compile "$m" "$base-out.dplan" "$base-out.compile.txt" --memory-budget "$b" --calibration "$ocal" ||
      { cat "$base-out.compile.txt" >&2; exit 1; }
    run "$base-in.dplan" "$base-in.run.txt" "$b"
    if ! python3 "$repo/bench/cost_model_report.py" --same-choice "$base-in.dplan" "$base-out.dplan"; then
      run "$base-out.dplan" "$base-out.run.txt" "$b"
    fi
    echo "  $m budget $b: $(sed -n 's/^diffc: --memory-budget [^:]*: chose //p' "$base-in.compile.txt"):" \
      "$(grep -h '^run [0-9]' "$base-in.run.txt" | tr '\n' ' ')"
  done
done
echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)" >>"$runs/machine.txt"

python3 "$repo/bench/cost_model_report.py" --report "$runs" "$repo/bench/results-cost-model.md"
cat "$repo/bench/results-cost-model.md"
