#!/usr/bin/env bash
# Builds the Java binding: bindings/java/build.sh OUT_DIR [LIBRARY]
#   OUT_DIR/ddpspawn-VERSION.jar (classes for Java 22 and newer) and OUT_DIR/ddpspawn-VERSION.pom,
#   for Maven (mvn install:install-file -Dfile=JAR -DpomFile=POM) or any class path. With LIBRARY,
#   the jar records that library's absolute path, where it looks after its other places
#   (tools/install passes the installed one; bindings/java/README.md has the order).
# Run from the repository root (or Bazel's runfiles, which has the same layout).
set -euo pipefail
[[ $# -ge 1 && $# -le 2 ]] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
out=$1
library=${2:-}
source bindings/java/java_env.sh
jdk=$(find_jdk)
version=$(sed -n 's/.*kVersion\[\] = "\(.*\)";/\1/p' core/version/build_info.h)
[[ -n "$version" ]] || { echo "build.sh: no version in core/version/build_info.h" >&2; exit 1; }
classes=$(mktemp -d "${TMPDIR:-/tmp}/java-classes.XXXXXX")
trap 'rm -rf "$classes"' EXIT
mkdir -p "$out"
"$jdk/bin/javac" --release 22 -Xlint:all,-restricted -Werror -encoding UTF-8 -d "$classes" \
  $(find bindings/java/src/main/java -name '*.java' | sort)
if [[ -n "$library" ]]; then
  printf 'library=%s\n' "$(realpath "$library")" >"$classes/dev/ddpspawn/installed.properties"
fi
jar="$out/ddpspawn-$version.jar"
rm -f "$jar"
"$jdk/bin/jar" --create --file "$jar" -C "$classes" .
cat >"$out/ddpspawn-$version.pom" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>dev.ddpspawn</groupId>
  <artifactId>ddpspawn</artifactId>
  <version>$version</version>
  <packaging>jar</packaging>
  <description>Data-parallel training for LibTorch from Java (over libddpspawn's C ABI)</description>
  <properties>
    <maven.compiler.release>22</maven.compiler.release>
  </properties>
</project>
POM
echo "$jar"
