#!/usr/bin/env bash
# Bazel's entry to the launcher tests (pytest under tools/setup's Python, whose torch 2.11 brings
# torchrun). The Python binding's conftest comes along as a plugin: the package and library paths,
# and skips that fail under DDPSPAWN_REQUIRE_ALL_TESTS=1.
set -euo pipefail
python="${DDPSPAWN_PYTHON:-${DDPSPAWN_VENV:-/opt/ddpspawn/venv}/bin/python3}"
export DDPSPAWN_LIBRARY="$PWD/capi/libddpspawn.so.1"
export PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD/bindings/python/tests:$PWD/tests/testing${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m pytest -q -p no:cacheprovider -p conftest "$@"
