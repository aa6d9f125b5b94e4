# python-env.sh — sourced by tools/make_fixtures.sh and bench/run.sh: creates
# (or reuses, when it exists and its imports work) the virtual environment
# with torch, diffusers, transformers (+ tokenizers, sentencepiece), safetensors
# and numpy from PyPI, plus the open-clip-torch wheel without its dependencies
# (only for the real CLIP vocabulary file it ships), and warns when the
# installed versions differ from the pinned ones.
#
# In:  repo (the repository root), who (the caller's name, for messages)
#      DIFFC_FIXTURE_VENV      venv path (default <repo>/.venv-fixtures)
#      DIFFC_FIXTURE_PACKAGES  pip requirement specs (default: the versions the committed
#                              fixtures were made with; others may change outputs at 1e-7)
#      PYTHON                  interpreter that creates the venv (default python3)
# Out: venv (its path); "$venv/bin/python" imports all four packages.

venv="${DIFFC_FIXTURE_VENV:-$repo/.venv-fixtures}"
diffc_python="${PYTHON:-python3}"
# shellcheck disable=SC2206
packages=(${DIFFC_FIXTURE_PACKAGES:-torch==2.15.0 diffusers==0.42.1 transformers==5.24.0 tokenizers==0.23.3 sentencepiece==0.2.3 protobuf==7.36.2 safetensors==0.8.0 numpy==2.4.6})
# open-clip-torch's dependencies (torchvision, ...) are not needed: the fixtures read one data file of it
nodeps_packages=(open-clip-torch==3.3.0)

imports_work() {
    [ -x "$venv/bin/python" ] &&
        "$venv/bin/python" -c "import torch, diffusers, transformers, sentencepiece, safetensors, numpy, importlib.util as u; assert u.find_spec('open_clip')" >/dev/null 2>&1
}

if imports_work; then
    echo "$who: reusing $venv"
else
    echo "$who: creating $venv and installing ${packages[*]}"
    "$diffc_python" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check "${packages[@]}"
    "$venv/bin/python" -m pip install --disable-pip-version-check --no-deps "${nodeps_packages[@]}"
    if ! imports_work; then
        echo "$who: torch/diffusers/transformers/sentencepiece/safetensors/numpy/open_clip do not import in $venv" >&2
        exit 1
    fi
fi

"$venv/bin/python" - "$who" "${packages[@]}" "${nodeps_packages[@]}" <<'PYEOF'
import sys, importlib.metadata as md
who = sys.argv[1]
for spec in sys.argv[2:]:
    name, _, want = spec.partition("==")
    have = md.version(name)
    if want and have.split("+")[0] != want:
        print(f"{who}: warning: {name} {have} is installed, the pinned version is {want}")
PYEOF
