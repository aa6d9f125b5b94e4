# shellcheck shell=bash disable=SC2154  # sourced: $repo, $work, $bin are the caller's
# bench_lib.sh — what the bench scripts share; sourced, not run.
#   bench_build WHO TARGET...   Release build of the targets into build-bench/ (the line saying so on stderr)
#   bench_model WHO NAME CONFIG a seeded random-weight model $work/NAME from bench/configs/CONFIG, once
# Both read $repo; bench_model also $work and $bin.

bench_build() {
  local who=$1
  shift
  echo "$who: building (Release) in build-bench/" >&2
  cmake -S "$repo" -B "$repo/build-bench" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$repo/build-bench" -j"$(nproc)" --target "$@" >/dev/null
}

bench_model() {
  if [ ! -f "$work/$2/config.json" ]; then
    echo "$1: making $2 from $3 (seeded random weights)"
    "$bin/make_model" "$repo/bench/configs/$3" "$work/$2" --seed 1 >/dev/null
  fi
}
