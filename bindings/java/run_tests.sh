#!/usr/bin/env bash
# Bazel's entry to the Java binding's tests: builds the jar (build.sh), compiles the JUnit tests
# against it (warnings are errors) and runs them with JUnit's console launcher (tools/setup --dev
# puts it in ~/.m2), against the built library.
set -euo pipefail
source bindings/java/java_env.sh
jdk=$(find_jdk)
if [[ ! -f "$junit_jar" ]]; then
  echo "run_tests.sh: no $junit_jar: tools/setup --dev fetches it" >&2
  exit 1
fi
work="${TEST_TMPDIR:-$(mktemp -d)}"
jar=$(bash bindings/java/build.sh "$work/jar")
"$jdk/bin/javac" --release 22 -Xlint:all,-restricted -Werror -encoding UTF-8 \
  -d "$work/test-classes" -cp "$jar:$junit_jar" \
  $(find bindings/java/src/test/java -name '*.java' | sort)
# The library by its path; the ranks the tests start inherit it through the environment.
export DDPSPAWN_LIBRARY="$PWD/capi/dist/lib/libddpspawn.so.1"
# The ranks re-run this JVM with its class path, so the tests' classes go on it (not -jar).
exec "$jdk/bin/java" --enable-native-access=ALL-UNNAMED -Djava.io.tmpdir="$work" \
  -cp "$jar:$work/test-classes:$junit_jar" \
  org.junit.platform.console.ConsoleLauncher execute --select-package dev.ddpspawn \
  --include-engine junit-jupiter --fail-if-no-tests --disable-banner --details=tree "$@"
