#!/usr/bin/env bash
# Bazel's entry to the Python binding's tests, under the Python that tools/setup installs (which has
# pytest, numpy, mypy and torch 2.11; the python3 first on PATH may not): mypy --strict over the
# package (settings in pyproject.toml), then the pytest suite.
set -euo pipefail
python="${DDPSPAWN_PYTHON:-/opt/ddpspawn/venv/bin/python3}"
export DDPSPAWN_LIBRARY="$PWD/capi/libddpspawn.so.1"
export PYTHONDONTWRITEBYTECODE=1
# mypy's cache goes to the test's temporary directory, never into the source tree.
"$python" -m mypy --strict --config-file bindings/python/pyproject.toml \
  --cache-dir "${TEST_TMPDIR:-$(mktemp -d)}/mypy_cache" bindings/python/ddpspawn
exec "$python" -m pytest -q -p no:cacheprovider bindings/python/tests "$@"
