#!/usr/bin/env bash
# Bazel's entry to ddpspawn-tch's checks: rustfmt (--check), clippy (-D warnings), the doc and unit
# tests, then the examples as tests: `matches` (2 ranks against one process on the whole
# batch, to 1e-6) and `digits` (2 ranks on the handwritten digits, held-out accuracy >= 0.95);
# Fabric's: `fabric_verbs` (its own checks), `plain_loop` against `fabric_loop` (at most 5 changed
# lines, each 0.9 held-out accuracy or more) and `fabric_conformance` (the loop of
# tests/fabric/fabric_main's "train" mode from Rust: bit-equal to the C++ program's weights, and
# each side's checkpoint loads in Rust; `ddpspawn export` reads the Rust one); and a downstream
# crate outside the workspace, built and run as README.md says.
# Builds against tools/setup's LibTorch (the torch wheel, through its Python) in release only; the
# target directory stays in the home directory (tch's C++ wrapper takes minutes to compile, once).
# Offline: tools/setup fetched the crates of Cargo.lock.
set -euo pipefail
work="${TEST_TMPDIR:-$(mktemp -d)}"
mkdir -p "$work/lib" "$work/src/bindings"
cp -L capi/dist/lib/libddpspawn.so capi/dist/lib/libddpspawn.so.1 capi/dist/lib/libddpspawn_cuda.so "$work/lib/"
cp -rL bindings/rust bindings/rust-tch "$work/src/bindings/"
fetch_digits="$PWD/tools/fetch_digits"
fabric_main="$PWD/tests/fabric/fabric_main"
ddpspawn_cli="$PWD/tools/ddpspawn"
export DDPSPAWN_LIB_DIR="$work/lib"
export CARGO_TARGET_DIR="${DDPSPAWN_TCH_TARGET_DIR:-$HOME/.cache/ddpspawn-cargo-tch}"
# torch-sys finds LibTorch through this Python's torch.
export LIBTORCH_USE_PYTORCH=1
export PATH="$(dirname "${DDPSPAWN_PYTHON:-${DDPSPAWN_VENV:-/opt/ddpspawn/venv}/bin/python3}"):$PATH:$HOME/.cargo/bin"
cd "$work/src/bindings/rust-tch"
cargo=(cargo --offline --locked)
echo "run_tests.sh: cargo fmt --check" >&2
cargo fmt --all --check
echo "run_tests.sh: cargo clippy -D warnings" >&2
"${cargo[@]}" clippy --release --all-targets -- -D warnings
"${cargo[@]}" test --release
"${cargo[@]}" build --release --examples
examples="$CARGO_TARGET_DIR/release/examples"
"$examples/matches"
"$examples/matches" powersgd | tee "$work/powersgd.txt"
# PowerSGD sends fewer elements than the gradients hold: "sent S of D".
read -r sent dense < <(sed -n 's/.*sent \([0-9]*\) of \([0-9]*\) .*/\1 \2/p' "$work/powersgd.txt")
((sent > 0 && sent < dense)) || { echo "run_tests.sh: PowerSGD did not compress" >&2; exit 1; }
"$fetch_digits" --offline "$work/digits" >&2  # tools/setup cached the data
"$examples/digits" "$work/digits" | tee "$work/digits.txt"
accuracy=$(sed -n 's/.*held-out accuracy \([0-9.]*\) .*/\1/p' "$work/digits.txt")
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.95) }' ||
  { echo "run_tests.sh: held-out accuracy '$accuracy' is below 0.95" >&2; exit 1; }

# Fabric: the verbs' checks, the five-line diff, and the conformance loop against C++'s.
"$examples/fabric_verbs"
examples_dir=ddpspawn-tch/examples
changed_lines=$(diff <(sed '1,/^$/d' $examples_dir/plain_loop.rs) \
  <(sed '1,/^$/d' $examples_dir/fabric_loop.rs) | grep -c '^>' || true)
if ((changed_lines > 5)); then
  echo "run_tests.sh: fabric_loop.rs changes $changed_lines lines of plain_loop.rs, docs/fabric.md says 5" >&2
  exit 1
fi
for program in plain_loop fabric_loop; do
  text=$("$examples/$program" "$work/digits")
  echo "$program: $text ($changed_lines lines changed)"
  accuracy=$(sed -n 's/^accuracy \([0-9.]*\) .*/\1/p' <<<"$text")
  awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.9) }' ||
    { echo "run_tests.sh: $program's held-out accuracy '$accuracy' is below 0.9" >&2; exit 1; }
done
mkdir "$work/conformance"
"$fabric_main" train "$work/conformance" >&2
"$examples/fabric_conformance" "$work/conformance"
# The Rust loop's checkpoint is the Trainer's format: the CLI exports its four tensors.
"$ddpspawn_cli" export --checkpoint "$work/conformance/rust.ckpt" --format torch \
  --output "$work/conformance/rust.pt" | tee "$work/export.txt"
grep -qx 'tensors=4' "$work/export.txt" ||
  { echo "run_tests.sh: ddpspawn export did not read rust.ckpt's 4 tensors" >&2; exit 1; }

# A downstream crate as README.md tells a user to write one: outside this workspace, depending on
# ddpspawn-tch, tch and torch-sys, with README.md's build.rs (read from it, so the text is what is
# tested) and fabric_loop.rs as its main. It shares the target directory (tch's C++ wrapper is not
# compiled again) and runs from / with an empty environment: LibTorch through build.rs's rpath,
# libddpspawn through the path that ddpspawn-sys recorded.
downstream="$work/downstream"
mkdir -p "$downstream/src"
cat >"$downstream/Cargo.toml" <<TOML
[package]
name = "downstream-fabric"
version = "0.1.0"
edition = "2021"

[dependencies]
ddpspawn-tch = { path = "$work/src/bindings/rust-tch/ddpspawn-tch" }
tch = { version = "=0.24.0", default-features = false }
torch-sys = { version = "=0.24.0", default-features = false }
TOML
sed -n '/^  ```rust$/,/^  ```$/p' README.md | sed '1d;$d;s/^  //' >"$downstream/build.rs"
grep -q 'rustc-link-arg=-Wl,-rpath' "$downstream/build.rs" ||
  { echo "run_tests.sh: README.md's build.rs block is gone" >&2; exit 1; }
cp -r $examples_dir/common "$downstream/src/common"
cp $examples_dir/fabric_loop.rs "$downstream/src/main.rs"
cp Cargo.lock "$downstream/"  # the same crate versions, offline
(cd "$downstream" && cargo --offline build --release --quiet)
text=$(cd / && env -i PATH=/usr/bin:/bin "$CARGO_TARGET_DIR/release/downstream-fabric" "$work/digits")
echo "downstream crate (README.md's build.rs, empty environment): $text"
[[ "$text" == accuracy* ]] || { echo "run_tests.sh: the downstream binary printed: $text" >&2; exit 1; }
