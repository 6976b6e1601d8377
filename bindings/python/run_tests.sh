#!/usr/bin/env bash
# Bazel's entry to the Python binding's pytest suite, under the Python that tools/setup installs (which has
# pytest, numpy and torch 2.11; the python3 first on PATH may not).
set -euo pipefail
export DDPSPAWN_LIBRARY="$PWD/capi/libddpspawn.so.1"
export PYTHONDONTWRITEBYTECODE=1
exec "${DDPSPAWN_PYTHON:-/opt/ddpspawn/venv/bin/python3}" -m pytest -q -p no:cacheprovider bindings/python/tests "$@"
