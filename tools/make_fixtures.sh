#!/usr/bin/env bash
# Regenerate the reference fixtures in tests/fixtures with diffusers as the oracle.
#
# Creates (or reuses, when it exists and its imports work) a virtual environment, by default
# .venv-fixtures in the repository root, or the path in DIFFC_FIXTURE_VENV; installs torch,
# diffusers, safetensors and numpy from PyPI into it; then runs tools/make_fixtures.py.
# Nothing is downloaded from a model hub: the models are built from config dicts.
#
#   tools/make_fixtures.sh                      # all fixtures
#   tools/make_fixtures.sh --only unet_tiny     # extra arguments go to make_fixtures.py
#
# Environment:
#   DIFFC_FIXTURE_VENV      venv path (default <repo>/.venv-fixtures)
#   DIFFC_FIXTURE_PACKAGES  pip requirement specs (default: the versions the committed fixtures
#                           were made with; other versions may change outputs at the 1e-7 level)
#   PYTHON                  interpreter used to create the venv (default python3)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DIFFC_FIXTURE_VENV:-$repo/.venv-fixtures}"
python="${PYTHON:-python3}"
# shellcheck disable=SC2206
packages=(${DIFFC_FIXTURE_PACKAGES:-torch==2.15.0 diffusers==0.42.1 safetensors==0.8.0 numpy==2.4.6})

imports_work() {
    [ -x "$venv/bin/python" ] &&
        "$venv/bin/python" -c "import torch, diffusers, safetensors, numpy" >/dev/null 2>&1
}

if imports_work; then
    echo "make_fixtures.sh: reusing $venv"
else
    echo "make_fixtures.sh: creating $venv and installing ${packages[*]}"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check "${packages[@]}"
    if ! imports_work; then
        echo "make_fixtures.sh: torch/diffusers/safetensors/numpy do not import in $venv" >&2
        exit 1
    fi
fi

"$venv/bin/python" - "${packages[@]}" <<'EOF'
import sys, importlib.metadata as md
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    have = md.version(name)
    if want and have.split("+")[0] != want:
        print(f"make_fixtures.sh: warning: {name} {have} is installed, the fixtures were made with {want}")
EOF

cd "$repo"
exec "$venv/bin/python" tools/make_fixtures.py --out tests/fixtures "$@"
