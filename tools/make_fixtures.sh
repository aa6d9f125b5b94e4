#!/usr/bin/env bash
# Regenerate the reference fixtures in tests/fixtures with diffusers as the oracle.
#
# Creates (or reuses, when it exists and its imports work) a virtual environment, by default
# .venv-fixtures in the repository root, or the path in DIFFC_FIXTURE_VENV; installs torch,
# diffusers, transformers, safetensors and numpy from PyPI into it (tools/python-env.sh);
# then runs tools/make_fixtures.py.
# Nothing is downloaded from a model hub: the models are built from config dicts.
#
#   tools/make_fixtures.sh                      # all fixtures, tests/fixtures/pipelines included
#   tools/make_fixtures.sh --only unet_tiny     # extra arguments go to make_fixtures.py
#   tools/make_fixtures.sh --only pipelines     # only the whole-pipeline fixtures
#
# Environment:
#   DIFFC_FIXTURE_VENV      venv path (default <repo>/.venv-fixtures)
#   DIFFC_FIXTURE_PACKAGES  pip requirement specs (default: the versions the committed fixtures
#                           were made with; other versions may change outputs at the 1e-7 level)
#   PYTHON                  interpreter used to create the venv (default python3)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
who="make_fixtures.sh"
# shellcheck source=tools/python-env.sh
. "$repo/tools/python-env.sh"

cd "$repo"
exec "$venv/bin/python" tools/make_fixtures.py --out tests/fixtures "$@"
