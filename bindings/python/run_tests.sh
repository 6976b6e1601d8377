#!/usr/bin/env bash
# Bazel's entry to the Python binding's pytest suite, under Debian's /usr/bin/python3 (which has
# pytest, numpy and torch; the python3 first on PATH may not).
set -euo pipefail
export DDPSPAWN_LIBRARY="$PWD/capi/libddpspawn.so.1"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider bindings/python/tests "$@"
