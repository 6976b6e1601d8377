# Sourced by the tests of what a user installs (the wheel, the installed prefix, the crates): a
# virtual environment of the test's own that holds tools/setup's torch (linked, not downloaded
# again), and a way to run a command where tools/setup's venv and Debian's Abseil libraries
# cannot be seen, as on a user's machine. Needs root (a mount namespace); without it the test
# skips, and fails under DDPSPAWN_REQUIRE_ALL_TESTS=1 (tools/test, CI).
setup_venv=${DDPSPAWN_VENV:-/opt/ddpspawn/venv}
user_env_dir=$(dirname "${BASH_SOURCE[0]}")

require_root() {
  [[ $(id -u) -eq 0 ]] && unshare --mount true 2>/dev/null && return 0
  local why="hiding tools/setup's venv needs root and a mount namespace"
  if [[ "${DDPSPAWN_REQUIRE_ALL_TESTS:-0}" != 0 ]]; then
    echo "FAIL: this test cannot run here: $why (DDPSPAWN_REQUIRE_ALL_TESTS makes a skip a failure)" >&2
    exit 1
  fi
  echo "SKIP: $why" >&2
  exit 0
}

make_user_venv() {  # make_user_venv DIR: a new venv holding torch and what torch requires
  /usr/bin/python3 -m venv "$1"
  "$setup_venv/bin/python3" "$user_env_dir/copy_torch.py" "$1" >&2
}

# as_user COMMAND...: runs COMMAND in a mount namespace where tools/setup's venv is an empty
# folder, and so are Debian's Abseil headers, and every Debian libabsl_*.so is /dev/null (so
# loading one fails).
as_user() {
  unshare --mount --propagation private -- bash -c '
    set -e
    empty=$(mktemp -d)
    mount --bind -o ro "$empty" "$0"
    mount --bind -o ro "$empty" /usr/include/absl
    for lib in /usr/lib/x86_64-linux-gnu/libabsl_*.so*; do mount --bind /dev/null "$lib"; done
    exec "$@"' "$setup_venv" "$@"
}
