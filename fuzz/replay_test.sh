#!/usr/bin/env bash
# A fuzz target's replay (replay_main.cc) over its corpus, as a test. Under --config=asan the
# binary is instrumented: leaks count here as they do in tools/fuzz (fuzz/lsan.supp lists the
# ones inside LibTorch), as in the other sanitized suites.
# Usage: replay_test.sh BINARY CORPUS_DIR
set -euo pipefail
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=1"
export LSAN_OPTIONS="suppressions=$PWD/fuzz/lsan.supp:print_suppressions=0"
exec "$1" "$2"
