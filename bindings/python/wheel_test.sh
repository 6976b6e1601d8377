#!/usr/bin/env bash
# The wheel in a fresh virtual environment: pip install it, then run the README's Python example
# from another directory with an empty environment (no DDPSPAWN_LIBRARY, no PYTHONPATH).
set -euo pipefail
work="${TEST_TMPDIR:-$(mktemp -d)}"
/usr/bin/python3 -m venv "$work/venv"
"$work/venv/bin/python3" -m pip install -q --no-index --no-deps --disable-pip-version-check \
  bindings/python/ddpspawn-*.whl
cp examples/python/hello.py "$work/hello.py"
out=$(cd / && env -i PATH=/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 "$work/venv/bin/python3" "$work/hello.py")
expected="{'total': [30], 'names': ['rank 0 of 2', 'rank 1 of 2']}"
if [[ "$out" != *"$expected"* ]]; then
  echo "FAIL: the installed wheel printed '$out', expected '$expected'" >&2
  exit 1
fi
where=$(cd / && env -i PATH=/usr/bin:/bin "$work/venv/bin/python3" -c \
  'import ddpspawn; print(ddpspawn.library_path())')
[[ "$where" == "$work/venv/"*"/ddpspawn/libddpspawn.so.1" ]] || {
  echo "FAIL: the library came from $where, not from the installed package" >&2
  exit 1
}
echo "ok: wheel installed in a fresh venv: $out (library $where)"
