#!/usr/bin/env bash
# tools/install to a temporary prefix, then the C hello example built by a pkg-config consumer and
# by a CMake consumer, the C++ DDPSpawnStrategy example by a CMake consumer of ddpspawn::core, and
# the Rust one by a cargo consumer, against that prefix; each runs with an empty environment (no
# LD_LIBRARY_PATH, no DDPSPAWN_* variable) from another directory.
set -euo pipefail
work="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$work/prefix"
tools/install --from capi/dist --core-from core/cpp_dist "$prefix"
hello="$PWD/examples/c/hello.c"
expected="sum over 2 ranks of rank + 1 = 3"

check() {  # check NAME BINARY [EXPECTED]
  local out want="${3:-$expected}"
  out=$(cd / && env -i PATH=/usr/bin:/bin "$2")
  if [[ "$out" != *"$want"* ]]; then
    echo "FAIL: the $1 consumer printed '$out', expected '$want'" >&2
    exit 1
  fi
  echo "ok: $1 consumer: $out"
}

# pkg-config.
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs ddpspawn)
gcc -std=c99 -Wall -Werror -o "$work/hello_pkgconfig" "$hello" $flags
check pkg-config "$work/hello_pkgconfig"

# CMake: find_package(ddpspawn 0.1 REQUIRED), target ddpspawn::ddpspawn.
mkdir -p "$work/cmake_project"
cat > "$work/cmake_project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(hello_ddpspawn C)
find_package(ddpspawn 0.1 REQUIRED)
add_executable(hello "$hello")
target_link_libraries(hello PRIVATE ddpspawn::ddpspawn)
CMAKE
cmake -S "$work/cmake_project" -B "$work/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake_build" >/dev/null
check CMake "$work/cmake_build/hello"

# C++ and CMake: the DDPSpawnStrategy example against ddpspawn::core (the static core and the
# LibTorch it was built with), spawning its 2 ranks from an empty environment.
mkdir -p "$work/cpp_project"
cat > "$work/cpp_project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(train_ddp CXX)
find_package(ddpspawn 0.1 REQUIRED)
add_executable(train_ddp "$PWD/examples/cpp/train_ddp.cc")
target_link_libraries(train_ddp PRIVATE ddpspawn::core)
CMAKE
cmake -S "$work/cpp_project" -B "$work/cpp_build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cpp_build" >/dev/null
check "C++ CMake" "$work/cpp_build/train_ddp" "rank 0 learned: weights 2.000 -1.000 0.500, bias 3.000"

# Cargo: a binary crate outside the workspace that depends on the ddpspawn crates, finds the
# library through the installed pkg-config file, and puts it in its RUNPATH with the two-line
# build.rs that bindings/rust/README.md documents (DEP_DDPSPAWN_LIB_DIR from ddpspawn-sys).
cp -rL bindings/rust "$work/crates"
rm -rf "$work/crates/target"
mkdir -p "$work/cargo_project/src"
cat > "$work/cargo_project/Cargo.toml" <<TOML
[package]
name = "hello-ddpspawn"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
ddpspawn = { path = "$work/crates/ddpspawn" }
ddpspawn-sys = { path = "$work/crates/ddpspawn-sys" }

[workspace]
TOML
cat > "$work/cargo_project/build.rs" <<'RUST'
fn main() {
    if let Some(dir) = std::env::var_os("DEP_DDPSPAWN_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.to_string_lossy());
    }
}
RUST
# The hello example with 2 ranks, printing what the C consumers print.
sed -e 's/Launcher::new(4)/Launcher::new(2)/' -e 's/over 4 ranks/over 2 ranks/' \
  bindings/rust/ddpspawn/examples/hello.rs > "$work/cargo_project/src/main.rs"
(cd "$work/cargo_project" &&
  env -u DDPSPAWN_LIB_DIR PKG_CONFIG_PATH="$prefix/lib/pkgconfig" CARGO_TARGET_DIR="$work/cargo_target" \
    PATH="$PATH:$HOME/.cargo/bin" cargo build --offline --quiet)
check cargo "$work/cargo_target/debug/hello-ddpspawn"
