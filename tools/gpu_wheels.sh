#!/usr/bin/env bash
# gpu_wheels.sh — fetches the Python wheels that the GPU check's PyTorch
# comparison (bench/gpu_torch.py, run by tools/gpu_check_bench.sh) needs and
# the GPU machine lacks, into .whl/ in the repository (ignored by git; the
# device tool's carry must name it).  That machine has Python 3.12 with
# torch and transformers (so filelock, huggingface_hub, numpy, regex,
# requests and safetensors) but no diffusers, and nothing can be installed
# from the network there.  Fetched, for CPython 3.12 on x86-64 Linux, without
# dependencies:
#   diffusers   at the version tools/python-env.sh pins (the fixtures' version)
#   Pillow      which diffusers imports at once (diffusers.utils.pil_utils);
#               the GPU machine may have it: gpu_check_bench.sh installs a
#               wheel only when its module does not import there already
# (diffusers' importlib_metadata is not needed: on Python >= 3.8 it reads
# importlib.metadata.)  Run it on a machine that reaches PyPI, then prints
# the folder's size.
#
# usage: bash tools/gpu_wheels.sh [--no-pillow]
#   --no-pillow   diffusers only (about 6 MB instead of 13), for a GPU
#                 machine known to have Pillow
set -eu

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST=$ROOT/.whl
PILLOW=1
for a in "$@"; do
  case $a in
    --no-pillow) PILLOW=0 ;;
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_wheels: unknown argument $a (see --help)" >&2; exit 2 ;;
  esac
done

DIFFUSERS=$(grep -o 'diffusers==[0-9][0-9.]*' "$ROOT/tools/python-env.sh" | head -1)
[ -n "$DIFFUSERS" ] || { echo "gpu_wheels: tools/python-env.sh pins no diffusers version" >&2; exit 1; }
WANT=("$DIFFUSERS")
[ "$PILLOW" -eq 1 ] && WANT+=("pillow==13.0.0")

mkdir -p "$DEST"
python3 -m pip download --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$DEST" "${WANT[@]}"
# a wheel of another version left from an earlier fetch would be installed too
for f in "$DEST"/*.whl; do
  keep=0
  for w in "${WANT[@]}"; do
    name=${w%%==*}; version=${w#*==}
    case $(basename "$f" | tr '[:upper:]' '[:lower:]') in "$name-$version-"*) keep=1 ;; esac
  done
  [ "$keep" -eq 1 ] || { echo "gpu_wheels: removing $(basename "$f") (not asked for)"; rm -f "$f"; }
done
echo "gpu_wheels: $DEST holds $(find "$DEST" -type f -name '*.whl' | wc -l) wheel(s), $(du -sh "$DEST" | cut -f1)"
