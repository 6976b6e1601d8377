#!/usr/bin/env bash
# tools/install to a temporary prefix, then the C hello example built by a pkg-config consumer and
# by a CMake consumer against that prefix, each run with an empty environment (no
# LD_LIBRARY_PATH, no DDPSPAWN_* variable) from another directory.
set -euo pipefail
work="${TEST_TMPDIR:-$(mktemp -d)}"
prefix="$work/prefix"
tools/install --from capi/dist "$prefix"
hello="$PWD/examples/c/hello.c"
expected="sum over 2 ranks of rank + 1 = 3"

check() {  # check NAME BINARY
  local out
  out=$(cd / && env -i PATH=/usr/bin:/bin "$2")
  if [[ "$out" != *"$expected"* ]]; then
    echo "FAIL: the $1 consumer printed '$out', expected '$expected'" >&2
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
