#!/usr/bin/env bash
# Bazel's entry to the Rust crates' cargo tests against the built library. Works on a copy of the
# crates in the test's temporary directory (cargo writes next to the manifest); std only, offline.
set -euo pipefail
work="${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p "$work/lib" "$work/src"
cp -L capi/dist/lib/libddpspawn.so capi/dist/lib/libddpspawn.so.1 "$work/lib/"
cp -rL bindings/rust/. "$work/src/"
export DDPSPAWN_LIB_DIR="$work/lib"
export CARGO_TARGET_DIR="$work/target"
export PATH="$PATH:$HOME/.cargo/bin"
exec cargo test --offline --manifest-path "$work/src/Cargo.toml" "$@"
