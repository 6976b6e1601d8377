#!/usr/bin/env bash
# tools/install to a temporary prefix, on the torch of a venv of the test's own (the python3 on
# PATH, as in an activated venv), then the prefix moved elsewhere. Against the moved prefix, where
# tools/setup's venv and Debian's Abseil cannot be seen (user_env.sh): the C hello example built by
# a pkg-config consumer and by a CMake consumer (naming its LibTorch by Torch_DIR), the C++
# DDPSpawnStrategy example by a CMake consumer of ddpspawn::core that does nothing but
# find_package(ddpspawn), the Rust one by a cargo consumer, and the Java one by javac (the installed
# jar, and a copy of it elsewhere) and by an offline Maven project; each runs with an empty
# environment (no LD_LIBRARY_PATH, no DDPSPAWN_* variable) from another directory.
set -euo pipefail
source tests/install/user_env.sh
require_root
work="${TEST_TMPDIR:-$(mktemp -d)}"
make_user_venv "$work/venv"
torch_dir=$(echo "$work"/venv/lib/python3*/site-packages/torch)
PATH="$work/venv/bin:$PATH" tools/install --from capi/dist --core-from core/cpp_dist "$work/installed"
# Java: the example compiled against the installed jar. java_run runs it from an empty environment
# (no LD_LIBRARY_PATH, no DDPSPAWN_*), from /.
source bindings/java/java_env.sh
jdk=$(find_jdk)
java_version=$(sed -n 's/.*kVersion\[\] = "\(.*\)";/\1/p' core/version/build_info.h)
mkdir -p "$work/java_classes" "$work/jar_copy"
"$jdk/bin/javac" -cp "$work/installed/share/java/ddpspawn-$java_version.jar" -d "$work/java_classes" \
  examples/java/TrainLinear.java
java_run() {  # java_run CLASS_PATH
  as_user env -i PATH=/usr/bin:/bin bash -c 'cd / && exec "$0" "$@"' "$jdk/bin/java" \
    --enable-native-access=ALL-UNNAMED -cp "$1" TrainLinear 2>&1
}
java_expected="rank 0 learned: weights 2.000 -1.000 0.500, bias 3.000"
# A copy of the jar alone, as a Maven repository holds it, finds the library at the path that
# tools/install recorded in it.
cp "$work/installed/share/java/ddpspawn-$java_version.jar" "$work/jar_copy/"
out=$(java_run "$work/jar_copy/ddpspawn-$java_version.jar:$work/java_classes") || true
[[ "$out" == *"$java_expected"* ]] || { echo "FAIL: the copied jar printed: $out" >&2; exit 1; }
echo "ok: Java consumer (a copy of the jar, the recorded library): $out"
# Maven: a project that depends on dev.ddpspawn:ddpspawn (tests/install/maven_consumer) builds the
# example offline, with the jar and .pom put by `mvn install:install-file` into a copy of the local
# repository (where tools/setup put Maven's plugins); the repository's jar finds the library.
cp -r "$HOME/.m2/repository" "$work/m2"
installed_java="$work/installed/share/java/ddpspawn-$java_version"
maven=(env JAVA_HOME="$jdk" mvn -o -q -Dmaven.repo.local="$work/m2")
"${maven[@]}" install:install-file -Dfile="$installed_java.jar" -DpomFile="$installed_java.pom"
mkdir -p "$work/maven/src/main/java"
cp tests/install/maven_consumer/pom.xml "$work/maven/"
cp examples/java/TrainLinear.java "$work/maven/src/main/java/"
(cd "$work/maven" && "${maven[@]}" -Dddpspawn.version="$java_version" package)
maven_jar="$work/m2/dev/ddpspawn/ddpspawn/$java_version/ddpspawn-$java_version.jar"
out=$(java_run "$work/maven/target/train-linear-1.jar:$maven_jar") || true
[[ "$out" == *"$java_expected"* ]] || { echo "FAIL: the Maven consumer printed: $out" >&2; exit 1; }
echo "ok: Java consumer (Maven, offline): $out"
mv "$work/installed" "$work/prefix"
prefix="$work/prefix"
if grep -rqs "$setup_venv\|$work/installed" "$prefix/lib/pkgconfig" "$prefix/lib/cmake" ||
   readelf -d "$prefix/lib/libddpspawn.so.1" | grep -q "$setup_venv"; then
  echo "FAIL: the prefix names tools/setup's venv or where it was installed:" >&2
  grep -rs "$setup_venv\|$work/installed" "$prefix/lib/pkgconfig" "$prefix/lib/cmake" >&2
  readelf -d "$prefix/lib/libddpspawn.so.1" | grep -i path >&2
  exit 1
fi
hello="$PWD/examples/c/hello.c"
expected="sum over 2 ranks of rank + 1 = 3"

check() {  # check NAME BINARY [EXPECTED]
  local out want="${3:-$expected}"
  out=$(as_user env -i PATH=/usr/bin:/bin bash -c 'cd / && exec "$0"' "$2")
  if [[ "$out" != *"$want"* ]]; then
    echo "FAIL: the $1 consumer printed '$out', expected '$want'" >&2
    exit 1
  fi
  echo "ok: $1 consumer: $out"
}

# pkg-config.
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs ddpspawn)
as_user gcc -std=c99 -Wall -Werror -o "$work/hello_pkgconfig" "$hello" $flags
check pkg-config "$work/hello_pkgconfig"

# CMake: find_package(ddpspawn 0.1 REQUIRED), target ddpspawn::ddpspawn, LibTorch named by Torch_DIR.
mkdir -p "$work/cmake_project"
cat > "$work/cmake_project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(hello_ddpspawn C)
find_package(ddpspawn 0.1 REQUIRED)
add_executable(hello "$hello")
target_link_libraries(hello PRIVATE ddpspawn::ddpspawn)
CMAKE
as_user cmake -S "$work/cmake_project" -B "$work/cmake_build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DTorch_DIR="$torch_dir/share/cmake/Torch" >/dev/null
as_user cmake --build "$work/cmake_build" >/dev/null
check CMake "$work/cmake_build/hello"

# Another torch release is refused, naming both: by CMake (DDPSPAWN_TORCH_DIR) and tools/install.
mkdir -p "$work/torch_2_5/include/torch/headeronly" "$work/torch_2_5/lib"
printf '#define TORCH_VERSION_MAJOR 2\n#define TORCH_VERSION_MINOR 5\n' \
  > "$work/torch_2_5/include/torch/headeronly/version.h"
touch "$work/torch_2_5/lib/libtorch_cpu.so"
if refusal=$(as_user cmake -S "$work/cmake_project" -B "$work/cmake_refused" \
  -DCMAKE_PREFIX_PATH="$prefix" -DDDPSPAWN_TORCH_DIR="$work/torch_2_5" 2>&1); then
  echo "FAIL: CMake configured against torch 2.5" >&2
  exit 1
fi
[[ "$refusal" == *"built against torch 2.11"*"is torch '2.5'"* ]] || {
  echo "FAIL: CMake's refusal does not name both releases: $refusal" >&2
  exit 1
}
if refusal=$(tools/install --from capi/dist --torch "$work/torch_2_5" "$work/refused" 2>&1); then
  echo "FAIL: tools/install installed on torch 2.5" >&2
  exit 1
fi
[[ "$refusal" == *"is torch 2.5; ddpspawn was built against 2.11"* ]] || {
  echo "FAIL: tools/install's refusal does not name both releases: $refusal" >&2
  exit 1
}
echo "ok: torch 2.5 refused by CMake and tools/install, naming both releases"

# C++ and CMake: the DDPSpawnStrategy example against ddpspawn::core (the static core, on the
# venv's LibTorch that tools/install recorded), spawning its 2 ranks from an empty environment.
mkdir -p "$work/cpp_project"
cat > "$work/cpp_project/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(train_ddp CXX)
find_package(ddpspawn 0.1 REQUIRED)
add_executable(train_ddp "$PWD/examples/cpp/train_ddp.cc")
target_link_libraries(train_ddp PRIVATE ddpspawn::core)
add_executable(own_loop "$PWD/examples/cpp/own_loop.cc")
target_link_libraries(own_loop PRIVATE ddpspawn::core)
add_executable(fabric_loop "$PWD/examples/cpp/fabric_loop.cc")
target_link_libraries(fabric_loop PRIVATE ddpspawn::core)
target_include_directories(own_loop PRIVATE "$PWD")  # examples/cpp/digits.h
target_include_directories(fabric_loop PRIVATE "$PWD")
add_executable(trainer_own_data "$PWD/examples/cpp/trainer_own_data.cc")
target_link_libraries(trainer_own_data PRIVATE ddpspawn::core)
CMAKE
as_user cmake -S "$work/cpp_project" -B "$work/cpp_build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
as_user cmake --build "$work/cpp_build" >/dev/null
check "C++ CMake" "$work/cpp_build/train_ddp" "rank 0 learned: weights 2.000 -1.000 0.500, bias 3.000"
# A LibTorch program's own loop, through the installed DdpModule, sampler and rank-zero headers.
check "C++ CMake (own loop)" "$work/cpp_build/own_loop" "% on 512 held-out digits"
check "C++ CMake (Fabric)" "$work/cpp_build/fabric_loop" "% on 512 held-out digits"
check "C++ CMake (Trainer, own data)" "$work/cpp_build/trainer_own_data" "after 128 steps"

# Cargo: a binary crate outside the workspace whose only dependency is the ddpspawn crate, with no
# build.rs, built with nothing but PKG_CONFIG_PATH: ddpspawn-sys finds the library through the
# installed pkg-config file and loads it at run time (no rpath needed).
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

[workspace]
TOML
# The hello example with 2 ranks, printing what the C consumers print.
sed -e 's/Launcher::new(4)/Launcher::new(2)/' -e 's/over 4 ranks/over 2 ranks/' \
  bindings/rust/ddpspawn/examples/hello.rs > "$work/cargo_project/src/main.rs"
as_user bash -c 'cd "$0" && exec "$@"' "$work/cargo_project" \
  env -i PATH="/usr/bin:/bin:$HOME/.cargo/bin" HOME="$HOME" PKG_CONFIG_PATH="$prefix/lib/pkgconfig" \
    CARGO_TARGET_DIR="$work/cargo_target" cargo build --offline --quiet
check cargo "$work/cargo_target/debug/hello-ddpspawn"

# Java, against the moved prefix: the jar finds the library at ../../lib from where it lies. The
# copy elsewhere now names the stale recorded path and how to name the library.
out=$(java_run "$work/prefix/share/java/ddpspawn-$java_version.jar:$work/java_classes") || true
[[ "$out" == *"$java_expected"* ]] || { echo "FAIL: the installed jar printed: $out" >&2; exit 1; }
echo "ok: Java consumer (the moved prefix's jar): $out"
if out=$(java_run "$work/jar_copy/ddpspawn-$java_version.jar:$work/java_classes"); then
  echo "FAIL: the copied jar ran with its recorded library moved away: $out" >&2
  exit 1
fi
if [[ "$out" != *"$work/installed/lib/libddpspawn.so.1 (recorded by tools/install)"* ||
      "$out" != *"-Dddpspawn.library=PATH"* ]]; then
  echo "FAIL: the copied jar's error names neither the recorded path nor the way out: $out" >&2
  exit 1
fi
echo "ok: Java consumer (a copy of the jar, the library moved): refused, naming where it looked"
