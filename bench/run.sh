#!/usr/bin/env bash
# Side-by-side CPU benchmark of diffrun against PyTorch/diffusers (issue 3, part 5).
# Not part of CTest.
#
#   bench/run.sh                       # SD1.5 UNet at 32x32 and 64x64 latents, SD VAE decode at 256² and 512²
#   bench/run.sh --quick               # only unet32 and vae256, 2 timed runs each: a sanity check
#   bench/run.sh --sizes unet32 vae512 # chosen cases (unetS / unetHxW latent, vaeS / vaeHxW image)
#   bench/run.sh --pipeline            # the whole SD1.5 pipeline (prompt to image, 20 steps, guidance 7.5)
#                                      # against diffusers' StableDiffusionPipeline at 256² and 512²
#                                      # (cases pipe256 pipe512; --sizes pipe256 for one), plans with and
#                                      # without --no-hoist and --offload model; writes bench/results-pipeline.md
#   bench/run.sh --torch-only          # PyTorch side only
#   bench/run.sh --isa avx2            # both sides restricted to AVX2 (PyTorch through ATEN_CPU_CAPABILITY,
#                                      # DNNL_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS; diffc --cpu x86-64-v3):
#                                      # an AVX-512 machine measures AVX2 code; writes bench/results-avx2.md
#   bench/run.sh --help                # every option (they go to bench/bench.py)
#
# 1. Creates (or reuses, when it exists and its imports work) a virtual environment with torch,
#    diffusers, safetensors and numpy from PyPI: tools/python-env.sh, shared with
#    tools/make_fixtures.sh (default .venv-fixtures in the repository root; DIFFC_FIXTURE_VENV
#    overrides the path, DIFFC_FIXTURE_PACKAGES the requirement specs).
# 2. Builds diffc and diffrun in Release into build-bench/.
# 3. Runs bench/bench.py: builds the models (seeded random weights, nothing downloaded) under
#    bench/models/ once, then times both sides on each case, checks that the outputs agree, prints
#    a markdown table and writes it to bench/results.md (bench/results-avx2.md with --isa avx2), with the
#    instruction set each side ran (PyTorch's ATen, oneDNN and MKL as their verbose modes report them;
#    the plan's CPU target) and the CPU's flags.  Work files go to build-bench/bench/.
#
# Environment:
#   DIFFC_FIXTURE_VENV, DIFFC_FIXTURE_PACKAGES, PYTHON   as for tools/make_fixtures.sh
#   DIFFC_BENCH_SIZES   default case list when --sizes is not given, e.g. "unet16 vae128"
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DIFFC_FIXTURE_VENV:-$repo/.venv-fixtures}"

for a in "$@"; do
    if [ "$a" = "-h" ] || [ "$a" = "--help" ]; then
        sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
        if [ -x "$venv/bin/python" ]; then exec "$venv/bin/python" "$repo/bench/bench.py" --help; fi
        exit 0
    fi
done

who="bench/run.sh"
# shellcheck source=tools/python-env.sh
. "$repo/tools/python-env.sh"

echo "bench/run.sh: building diffc and diffrun (Release) in build-bench/"
cmake -S "$repo" -B "$repo/build-bench" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$repo/build-bench" -j"$(nproc)" --target diffc diffrun >/dev/null

cmdline="bench/run.sh"
for a in "$@"; do cmdline+=" $(printf '%q' "$a")"; done
export DIFFC_BENCH_COMMAND="$cmdline"
cd "$repo"
exec "$venv/bin/python" bench/bench.py --diffc "$repo/build-bench/diffc" --diffrun "$repo/build-bench/diffrun" "$@"
