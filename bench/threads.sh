#!/usr/bin/env bash
# Does a second thread help, on an idle machine and on a busy one (issue 11,
# item 2)?  Compiles the quick start's plan (samples/unet-sd15-tiny at
# 2x4x32x32, as tools/quickstart.sh does; with --vae also the vae_sd
# fixture's decoder) and runs it with --threads 1 and --threads 2, first on
# the machine as it is, then with every other core saturated by a busy loop
# this script starts and always kills.  Each cell is the median of every
# run's time over ROUNDS diffrun invocations of --repeat N, the cases taken
# in turn so drift in the machine's load spreads over all of them.  Writes
# bench/threads.md (or -o FILE) and prints it.  Not part of CTest.
#
#   bench/threads.sh [--build DIR] [--baseline DIR] [--repeat N] [--rounds R] [--vae] [-o FILE]
#
#   --build DIR      diffc and diffrun from DIR (default: build Release in build-bench/)
#   --baseline DIR   also measure the diffc and diffrun in DIR (e.g. a build of the
#                    commit before a change), each with a plan compiled by its own diffc
#   --repeat N       runs per diffrun invocation (default 10)
#   --rounds R       diffrun invocations per cell (default 3)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=bench/bench_lib.sh
. "$repo/bench/bench_lib.sh"
build="" baseline="" repeat=10 rounds=3 vae=0 out="$repo/bench/threads.md"
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --baseline) baseline=$(cd "$2" && pwd); shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --vae) vae=1; shift ;;
    -o) out=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "threads.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$build" ]; then
  bench_build threads.sh diffc diffrun
  build="$repo/build-bench"
fi

work=$(mktemp -d /tmp/diffc-threads-XXXXXX)
busy=()
stop_busy() {
  for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${busy[@]}"; do wait "$pid" 2>/dev/null || true; done
  busy=()
}
trap 'stop_busy; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

builds=("this:$build")
[ -n "$baseline" ] && builds+=("baseline:$baseline")
plans=("unet-sd15-tiny 2x4x32x32")
[ "$vae" = 1 ] && plans+=("vae_sd decode")

# compile TAG DIR PLAN-NAME: the plan with that build's own diffc (plan
# formats may differ between builds).
compile() {
  local tag=$1 dir=$2 name=$3 dst="$work/$1-${3%% *}.dplan"
  case "$name" in
    unet-sd15-tiny*) "$dir/diffc" "$repo/samples/unet-sd15-tiny" -o "$dst" \
      --input sample=2x4x32x32 --input encoder_hidden_states=2x77x32 >/dev/null 2>"$work/compile.txt" ;;
    vae_sd*) "$dir/diffc" "$repo/tests/fixtures/vae_sd/model" --entry decode -o "$dst" \
      >/dev/null 2>"$work/compile.txt" ;;
  esac || { echo "threads.sh: $tag diffc failed on $name: $(tail -1 "$work/compile.txt")" >&2; exit 1; }
}
for b in "${builds[@]}"; do
  for pl in "${plans[@]}"; do compile "${b%%:*}" "${b#*:}" "$pl"; done
done

# run TAG DIR PLAN THREADS: appends every run's seconds to its cell's file.
run() {
  local log="$work/run.txt"
  "$2/diffrun" "$work/$1-$3.dplan" --random-inputs --seed 0 --repeat "$repeat" --threads "$4" >"$log" 2>&1 ||
    { echo "threads.sh: $1 diffrun failed on $3: $(tail -1 "$log")" >&2; exit 1; }
  sed -n 's/^run [0-9]*: \([0-9.]*\) s.*/\1/p' "$log" >>"$work/cell-$1-$3-$4-$5"
}
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

rows=()
measure() { # MODE
  for ((r = 0; r < rounds; r++)); do
    for b in "${builds[@]}"; do
      for pl in "${plans[@]}"; do
        for t in 1 2; do run "${b%%:*}" "${b#*:}" "${pl%% *}" "$t" "$1"; done
      done
    done
  done
  for pl in "${plans[@]}"; do
    for b in "${builds[@]}"; do
      local p=${pl%% *} tag=${b%%:*} one two
      one=$(median "$work/cell-$tag-$p-1-$1")
      two=$(median "$work/cell-$tag-$p-2-$1")
      rows+=("| $pl | $2 | $tag (\`${b#*:}\`) | $one | $two | $(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.2f", b / a }') |")
    done
  done
}

ncpu=$(nproc)
load_idle=$(cut -d' ' -f1-3 /proc/loadavg)
measure idle "as it is (load average $load_idle before)"
for ((i = 1; i < ncpu; i++)); do
  bash -c 'while :; do :; done' &
  busy+=($!)
done
sleep 0.5
load_busy=$(cut -d' ' -f1-3 /proc/loadavg)
measure busy "$((ncpu - 1)) core(s) busy (load average $load_busy after 0.5 s)"
stop_busy

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
flags=$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -1 | tr ' ' '\n' |
  grep -E '^(sse4_2|avx|avx2|fma|avx512f|avx512bw|avx512vl|avx512_bf16|avx512_vnni|amx_tile)$' | tr '\n' ' ')
{
  echo "# Threads on an idle and a busy machine"
  echo
  echo "Produced by \`bench/threads.sh\` on $(date -u +%Y-%m-%d), $cpu, $ncpu online CPUs (flags: ${flags% })."
  echo "Each time is the median over $rounds diffrun invocations x --repeat $repeat of every run's seconds"
  echo "(\`diffrun PLAN --random-inputs --seed 0 --repeat $repeat --threads T\`); \"busy\" runs $((ncpu - 1)) \`while :; do :; done\`"
  echo "loop(s) beside diffrun, one per other core. The unet-sd15-tiny plan is the quick start's"
  echo "(\`samples/unet-sd15-tiny\`, sample 2x4x32x32, encoder_hidden_states 2x77x32). 2 vs 1 = time with 2"
  echo "threads / time with 1 (below 1: the second thread helps)."
  echo
  echo "| plan | machine | build | 1 thread s | 2 threads s | 2 vs 1 |"
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
} >"$out"
cat "$out"
