#!/usr/bin/env bash
# gpu_tree.sh — fit the working tree into what travels to the GPU machine.
#
# The device tool copies the checkout (tracked files, untracked files git
# does not ignore, and the ignored folders its `carry` names) and refuses a
# tree over 64 MiB.  diffc's tracked files are ~100 MiB, most of it test
# fixtures that only the CPU suite reads (whole-pipeline folders, tokenizer
# and single-file checkpoints).  tools/gpu_check.sh never reads them (it
# builds -DDIFFC_LLVM=OFF, whose CMake stops before the fixture and pipeline
# tests, and checks the fixtures that have a case.json), so for the call they
# move out of the checkout and come back after it.
#
# usage: bash tools/gpu_tree.sh slim      move them to ../.<repo>-gpu-stash, then `size`
#        bash tools/gpu_tree.sh restore   move them back (git status is as before)
#        bash tools/gpu_tree.sh size [CARRY...]
#                                         what would travel, with the carried folders
#                                         (default .gpu-deps .whl); exit 1 over 64 MiB
set -eu

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STASH=$(dirname "$ROOT")/.$(basename "$ROOT")-gpu-stash
LIMIT=$((64 * 1024 * 1024))
# The tracked folders the GPU check does not read.
UNUSED=(tests/fixtures/pipelines tests/fixtures/tokenizer tests/fixtures/tokenizer_t5 tests/fixtures/single_file
        tests/fixtures/single_file_dit tests/fixtures/schedulers)

bytes_of_tree() {  # the present tracked and untracked-not-ignored files
  (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null |
    awk '{ s += $1 } END { print s + 0 }')
}
bytes_of_dir() { if [ -d "$ROOT/$1" ]; then du -sb "$ROOT/$1" | cut -f1; else echo 0; fi; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

size() {
  local carry=("$@") total tree b
  [ ${#carry[@]} -eq 0 ] && carry=(.gpu-deps .whl)
  tree=$(bytes_of_tree)
  total=$tree
  echo "working tree: $(mib "$tree")"
  for c in "${carry[@]}"; do
    b=$(bytes_of_dir "$c")
    echo "carry $c: $(mib "$b")$([ -d "$ROOT/$c" ] || echo ' (absent)')"
    total=$((total + b))
  done
  if [ "$total" -gt "$LIMIT" ]; then
    echo "total: $(mib "$total"), over the device tool's 64 MiB$([ -d "$STASH" ] || echo ': run `bash tools/gpu_tree.sh slim` first')"
    return 1
  fi
  echo "total: $(mib "$total") of 64 MiB"
}

slim() {
  if [ -e "$STASH" ]; then
    echo "gpu_tree: $STASH exists: the tree is slimmed already (bash tools/gpu_tree.sh restore puts it back)" >&2
    exit 1
  fi
  mkdir -p "$STASH"
  for d in "${UNUSED[@]}"; do
    [ -d "$ROOT/$d" ] || continue
    mkdir -p "$STASH/$(dirname "$d")"
    mv "$ROOT/$d" "$STASH/$d"
  done
  echo "moved out of the checkout until \`bash tools/gpu_tree.sh restore\`: ${UNUSED[*]}"
  size
}

restore() {
  if [ ! -d "$STASH" ]; then echo "gpu_tree: nothing to restore ($STASH does not exist)"; return 0; fi
  for d in "${UNUSED[@]}"; do
    [ -d "$STASH/$d" ] || continue
    if [ -e "$ROOT/$d" ]; then
      echo "gpu_tree: $d exists in the checkout again; left $STASH/$d where it is" >&2
      exit 1
    fi
    mv "$STASH/$d" "$ROOT/$d"
  done
  find "$STASH" -depth -type d -empty -delete
  if [ -e "$STASH" ]; then echo "gpu_tree: $STASH still holds files; look at them" >&2; exit 1; fi
  echo "restored: ${UNUSED[*]}"
}

case ${1:-} in
  slim) slim ;;
  restore) restore ;;
  size) shift; size "$@" ;;
  -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//' ;;
  *) echo "usage: bash tools/gpu_tree.sh slim|restore|size [CARRY...] (see --help)" >&2; exit 2 ;;
esac
