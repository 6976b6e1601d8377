# Sourced by the Java binding's scripts (build.sh, run_tests.sh), tools/setup and tools/install.
# find_jdk prints the home of a JDK of Java 22 or newer (the Foreign Function & Memory API's first
# release): $DDPSPAWN_JAVA_HOME, else $JAVA_HOME, else the newest under /usr/lib/jvm. None: it says
# so and returns 1.
find_jdk() {
  local home major best="" best_major=0
  for home in "${DDPSPAWN_JAVA_HOME:-}" "${JAVA_HOME:-}" /usr/lib/jvm/*; do
    [[ -n "$home" && -x "$home/bin/javac" && -f "$home/release" ]] || continue
    major=$(sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$home/release")
    [[ -n "$major" ]] || continue
    if [[ -n "${DDPSPAWN_JAVA_HOME:-}" && "$home" == "$DDPSPAWN_JAVA_HOME" ]]; then
      best=$home best_major=$major
      break
    fi
    if ((major > best_major)); then
      best=$home best_major=$major
    fi
  done
  if ((best_major < 22)); then
    echo "no JDK of Java 22 or newer (the binding uses the Foreign Function & Memory API):" \
      "install one (e.g. Temurin 25) under /usr/lib/jvm or name it with DDPSPAWN_JAVA_HOME" \
      "${best:+(the newest found, $best, is Java $best_major)}" >&2
    return 1
  fi
  echo "$best"
}

# JUnit's console launcher, which runs the tests: tools/setup --dev fetches it into ~/.m2.
junit_version=6.1.3
junit_artifact="org.junit.platform:junit-platform-console-standalone:$junit_version"
junit_jar="$HOME/.m2/repository/org/junit/platform/junit-platform-console-standalone/$junit_version"
junit_jar+="/junit-platform-console-standalone-$junit_version.jar"

# google-java-format (Google's style, 100 columns), which tools/lint runs on the Java sources:
# tools/setup --dev fetches it into ~/.m2. java_format JDK ARGS... runs it on that JDK.
java_format_artifact="com.google.googlejavaformat:google-java-format:1.28.0:jar:all-deps"
java_format_jar="$HOME/.m2/repository/com/google/googlejavaformat/google-java-format/1.28.0"
java_format_jar+="/google-java-format-1.28.0-all-deps.jar"
java_format() {
  local jdk=$1 package
  shift
  local opens=()
  for package in api code file parser tree util; do
    opens+=("--add-exports=jdk.compiler/com.sun.tools.javac.$package=ALL-UNNAMED")
  done
  "$jdk/bin/java" "${opens[@]}" -jar "$java_format_jar" "$@"
}
