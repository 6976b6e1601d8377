#!/usr/bin/env bash
# The library's ABI (the exported functions with their signatures, and the layout of every public
# struct) matches capi/abi_baseline.xml, compared by abidiff (libabigail). An added function is a
# change too. Changing the ABI is a deliberate commit: regenerate the baseline with
#   bazel run //capi:abi_test -- --update
set -euo pipefail
current="${TEST_TMPDIR:-$(mktemp -d)}/abi_current.xml"
abidw --exported-interfaces-only --headers-dir capi/include/ddpspawn \
  --drop-private-types --no-show-locs --no-corpus-path capi/libddpspawn.so.1 > "$current"
if [[ "${1:-}" == "--update" ]]; then
  cp "$current" "${BUILD_WORKSPACE_DIRECTORY:?--update runs under bazel run}/capi/abi_baseline.xml"
  echo "capi/abi_baseline.xml updated"
  exit 0
fi
if ! report=$(abidiff capi/abi_baseline.xml "$current"); then
  echo "$report" >&2
  echo "FAIL: libddpspawn.so.1's ABI differs from capi/abi_baseline.xml (above)" >&2
  exit 1
fi
echo "ok: the ABI matches capi/abi_baseline.xml ($(grep -c '<elf-symbol ' "$current") symbols)"
