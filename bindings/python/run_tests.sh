#!/usr/bin/env bash
# Bazel's entry to the Python binding's tests, under the Python that tools/setup installs (which has
# pytest, numpy, mypy and torch 2.11; the python3 first on PATH may not):
#   run_tests.sh mypy          mypy --strict over the package (settings in pyproject.toml)
#   run_tests.sh FILE...       pytest on those test files
# mypy's cache stays in the home directory (~/.cache/ddpspawn-mypy; it checks every entry against
# its source, so a stale one is never trusted), never in the source tree.
set -euo pipefail
python="${DDPSPAWN_PYTHON:-${DDPSPAWN_VENV:-/opt/ddpspawn/venv}/bin/python3}"
export DDPSPAWN_LIBRARY="$PWD/capi/libddpspawn.so.1"
export PYTHONDONTWRITEBYTECODE=1
if [[ "${1:-}" == "mypy" ]]; then
  exec "$python" -m mypy --strict --config-file bindings/python/pyproject.toml \
    --cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/ddpspawn-mypy" bindings/python/ddpspawn
fi
exec "$python" -m pytest -q -p no:cacheprovider "$@"
