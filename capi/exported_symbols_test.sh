#!/usr/bin/env bash
# The library exports exactly the symbols in capi/exported_symbols.txt, each in its version node
# (DDPSPAWN_1, or DDPSPAWN_1.1 to 1.4 for what came later: capi/ddpspawn.lds). Changing the
# ABI is a deliberate commit: regenerate the list with
#   nm -D --defined-only --with-symbol-versions bazel-bin/capi/libddpspawn.so.1 |
#     awk '{print $3}' | sort > capi/exported_symbols.txt
set -euo pipefail
actual=$(nm -D --defined-only --with-symbol-versions capi/libddpspawn.so.1 | awk '{print $3}' | sort)
if ! diff <(echo "$actual") capi/exported_symbols.txt; then
  echo "FAIL: the exported symbols differ from capi/exported_symbols.txt (< built, > pinned)" >&2
  exit 1
fi
echo "ok: $(echo "$actual" | wc -l) exported symbols, as pinned"
