#!/usr/bin/env bash
# Builds and runs the README's examples (C, C++, Java, Python, Rust) against the built library and
# checks what each prints.
set -euo pipefail
work="${TEST_TMPDIR:-$(mktemp -d)}"
lib="$work/lib"
mkdir -p "$lib"
cp -L capi/dist/lib/libddpspawn.so capi/dist/lib/libddpspawn.so.1 capi/dist/lib/libddpspawn_cuda.so "$lib/"

expect() {  # expect NAME EXPECTED OUTPUT
  if [[ "$3" != *"$2"* ]]; then
    echo "FAIL: $1 printed '$3', expected it to contain '$2'" >&2
    exit 1
  fi
  echo "ok: $1: $3"
}

gcc -std=c99 -Wall -Werror -o "$work/hello_c" examples/c/hello.c -I capi/dist/include \
  -L "$lib" -lddpspawn -Wl,-rpath,"$lib"
expect C "sum over 2 ranks of rank + 1 = 3" "$("$work/hello_c")"

gcc -std=c99 -Wall -Werror -o "$work/all_reduce_dlpack" examples/c/all_reduce_dlpack.c \
  -I capi/dist/include -L "$lib" -lddpspawn -Wl,-rpath,"$lib"
expect "C (DLPack)" "summed 2x3 matrix: [[0 3 6] [9 12 15]]" "$("$work/all_reduce_dlpack")"

expect C++ "rank 0 learned: weights 2.000 -1.000 0.500, bias 3.000" "$(examples/train_ddp)"

# Its own LibTorch loop: every rank reruns main() and prints, yet the banner and each epoch's line
# appear once (the rank-zero helpers), and the held-out accuracy is far above chance (10%).
out=$(examples/own_loop)
for line in "own_loop: a CNN on synthetic digits, 2 ranks" "epoch 1: rank 0's loss" \
  "epoch 3: rank 0's loss"; do
  count=$(grep -cF "$line" <<<"$out" || true)
  if [[ "$count" != 1 ]]; then
    echo "FAIL: C++ (own loop) printed '$line' $count times, expected once:" >&2
    echo "$out" >&2
    exit 1
  fi
done
accuracy=$(sed -nE 's/^rank 0 tested: accuracy ([0-9.]+)% on 512 held-out digits$/\1/p' <<<"$out")
if [[ -z "$accuracy" ]] || ! awk -v a="$accuracy" 'BEGIN { exit !(a >= 75) }'; then
  echo "FAIL: C++ (own loop): expected an accuracy of 75% or more (observed 85.9%):" >&2
  echo "$out" >&2
  exit 1
fi
echo "ok: C++ (own loop): accuracy $accuracy%"

# The same loop in one process and under ddpspawn::Fabric: docs/fabric.md's claim of five changed
# lines is the diff of the two files below their opening comments; both learn the digits.
changed=$(diff <(sed '1,/^$/d' examples/cpp/plain_loop.cc) <(sed '1,/^$/d' examples/cpp/fabric_loop.cc) |
  grep -c '^>' || true)
if ((changed > 5)); then
  echo "FAIL: examples/cpp/fabric_loop.cc changes $changed lines of plain_loop.cc, docs/fabric.md says 5" >&2
  exit 1
fi
for program in plain_loop fabric_loop; do
  out=$(examples/$program)
  accuracy=$(sed -nE 's/^accuracy ([0-9.]+)% on 512 held-out digits$/\1/p' <<<"$out")
  if [[ -z "$accuracy" ]] || ! awk -v a="$accuracy" 'BEGIN { exit !(a >= 75) }'; then
    echo "FAIL: C++ ($program): expected one line with an accuracy of 75% or more:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "ok: C++ ($program): accuracy $accuracy% ($changed lines changed)"
done

# The Trainer on the program's own module and SampleDataset (it writes ./own_data_logs).
out=$(cd "$work" && "$OLDPWD/examples/trainer_own_data")
accuracy=$(sed -nE 's/^rank 0: val_accuracy ([0-9.]+) after 128 steps$/\1/p' <<<"$out")
if [[ -z "$accuracy" ]] || ! awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.7) }'; then
  echo "FAIL: C++ (Trainer, own data): expected val_accuracy >= 0.7 after 128 steps (observed" \
    "0.822): $out" >&2
  exit 1
fi
[[ -f "$work/own_data_logs/metrics.csv" ]] || { echo "FAIL: no own_data_logs/metrics.csv" >&2; exit 1; }
echo "ok: C++ (Trainer, own data): $out"

out=$(DDPSPAWN_LIBRARY="$lib/libddpspawn.so.1" PYTHONPATH="$PWD/bindings/python" \
  PYTHONDONTWRITEBYTECODE=1 "${DDPSPAWN_PYTHON:-${DDPSPAWN_VENV:-/opt/ddpspawn/venv}/bin/python3}" examples/python/hello.py)
expect Python "{'total': [30], 'names': ['rank 0 of 2', 'rank 1 of 2']}" "$out"

out=$(DDPSPAWN_LIBRARY="$lib/libddpspawn.so.1" PYTHONPATH="$PWD/bindings/python" \
  PYTHONDONTWRITEBYTECODE=1 "${DDPSPAWN_PYTHON:-${DDPSPAWN_VENV:-/opt/ddpspawn/venv}/bin/python3}" \
  examples/python/torch_model.py)
expect "Python (torch)" "(match)" "$out"

cp -rL bindings/rust "$work/rust"
out=$(PATH="$PATH:$HOME/.cargo/bin" DDPSPAWN_LIB_DIR="$lib" CARGO_TARGET_DIR="$work/target" \
  cargo run --quiet --offline --manifest-path "$work/rust/Cargo.toml" -p ddpspawn --example hello)
expect Rust "sum over 4 ranks of rank + 1 = 10" "$out"

# Java (22 or newer): the binding's jar, then the example on its class path.
source bindings/java/java_env.sh
jdk=$(find_jdk)
java_jar=$(bash bindings/java/build.sh "$work/java")
"$jdk/bin/javac" --release 22 -Xlint:all -Werror -cp "$java_jar" -d "$work/java/classes" \
  examples/java/TrainLinear.java
out=$(DDPSPAWN_LIBRARY="$lib/libddpspawn.so.1" "$jdk/bin/java" --enable-native-access=ALL-UNNAMED \
  -cp "$java_jar:$work/java/classes" TrainLinear)
expect Java "rank 0 learned: weights 2.000 -1.000 0.500, bias 3.000" "$out"

# Java's Fabric: the plain one-process loop and the same loop on 2 ranks, five lines apart.
linear=examples/java/linear
changed_lines=$(diff <(sed '1,/^$/d' $linear/plain/LinearRegression.java) \
  <(sed '1,/^$/d' $linear/fabric/LinearRegression.java) | grep -c '^>' || true)
((changed_lines <= 5)) ||
  { echo "run_examples.sh: the Java Fabric loop changes $changed_lines lines, docs/fabric.md says 5" >&2; exit 1; }
for loop in plain fabric; do
  "$jdk/bin/javac" --release 22 -Xlint:all -Werror -cp "$java_jar" -d "$work/java/$loop" \
    "$linear/$loop/LinearRegression.java"
  out=$(DDPSPAWN_LIBRARY="$lib/libddpspawn.so.1" "$jdk/bin/java" \
    --enable-native-access=ALL-UNNAMED -cp "$java_jar:$work/java/$loop" LinearRegression)
  expect "Java ($loop loop)" "learned: weights 2.000 -1.000 0.500, bias 3.000" "$out"
done
