#!/usr/bin/env bash
# Bazel's entry to the Rust crates' checks against the built library: rustfmt (--check), clippy
# (-D warnings), then cargo test. Works on a copy of the crates in the test's temporary directory
# (cargo writes next to the manifest); std only, offline. Arguments go to cargo test.
set -euo pipefail
# The option table that ddpspawn's tests/front_end_options.rs checks the Trainer against (a data
# dependency; absolute, as cargo runs each test binary in its package's directory).
export DDPSPAWN_OPTIONS_MD="$PWD/docs/options.md"
work="${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p "$work/lib" "$work/include/ddpspawn" "$work/src"
cp -L capi/dist/lib/libddpspawn.so capi/dist/lib/libddpspawn.so.1 capi/dist/lib/libddpspawn_cuda.so "$work/lib/"
cp -L capi/dist/include/ddpspawn/ddpspawn.h capi/dist/include/ddpspawn/ddpspawn_defaults.h \
  capi/dist/include/ddpspawn/ddpspawn_dlpack.h \
  "$work/include/ddpspawn/"
cp -rL bindings/rust/. "$work/src/"
export DDPSPAWN_LIB_DIR="$work/lib"
# ddpspawn-sys's tests/layout.rs compiles a C program against the header (the copy above is
# not next to the repository's capi/include).
export DDPSPAWN_INCLUDE_DIR="$work/include"
export CARGO_TARGET_DIR="$work/target"
export PATH="$PATH:$HOME/.cargo/bin"
manifest="$work/src/Cargo.toml"

for tool in fmt clippy; do
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "run_tests.sh: \`cargo $tool\` is not installed; add it with" \
         "\`rustup component add rustfmt clippy\` (or Debian's rustfmt and rust-clippy)" >&2
    exit 1
  fi
done
echo "run_tests.sh: cargo fmt --check" >&2
cargo fmt --all --check --manifest-path "$manifest"
echo "run_tests.sh: cargo clippy -D warnings" >&2
cargo clippy --offline --all-targets --manifest-path "$manifest" -- -D warnings
exec cargo test --offline --manifest-path "$manifest" "$@"
