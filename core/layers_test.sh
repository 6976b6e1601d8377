#!/usr/bin/env bash
# The core's directories depend one way: each includes only directories of a lower layer, by the
# table of core/layers.bzl (whose visibility makes the Bazel dependencies follow it too; see
# docs/ARCHITECTURE.md). A new directory needs a layer there.
set -euo pipefail
declare -A layer=()
while read -r name number; do
  layer[$name]=$number
done < <(sed -n '/^CORE_LAYERS = {/,/^}/s/^ *"\([a-z_/]*\)": \([0-9]*\),$/\1 \2/p' core/layers.bzl)
if ((${#layer[@]} < 10)); then
  echo "FAIL: read ${#layer[@]} layers from core/layers.bzl's CORE_LAYERS, expected 10 or more" >&2
  exit 1
fi
status=0
# The package (a key of the table) that holds a path under core/: its directory, or that
# directory's parent (core/train/loop/x.h is in train/loop; core/comm/cuda/x.h in comm).
package_of() {
  local dir
  dir=$(dirname "${1#core/}")
  while [[ "$dir" != "." && -z "${layer[$dir]:-}" ]]; do dir=$(dirname "$dir"); done
  echo "$dir"
}
scanned=0
while IFS=: read -r file line; do
  scanned=$((scanned + 1))
  from=$(package_of "$file")
  to=$(package_of "$(sed -E 's|^#include "(core/[^"]+)".*|\1|' <<<"$line")")
  [[ "$from" == "$to" ]] && continue
  if [[ -z "${layer[$from]:-}" || -z "${layer[$to]:-}" ]]; then
    echo "FAIL: $file: core/$from or core/$to has no layer in core/layers.bzl" >&2
    status=1
  elif ((layer[$to] >= layer[$from])); then
    echo "FAIL: $file includes core/$to, which is not below core/$from" >&2
    status=1
  fi
done < <(grep -RH '^#include "core/' core --include=*.h --include=*.cc)
# Bazel's runfiles hold the sources as symbolic links, which grep -r skips without a word: a
# scan that reads (almost) nothing proves nothing (188 such lines in 73 files when written).
if ((scanned < 150)); then
  echo "FAIL: found $scanned '#include \"core/' lines under core/, expected 150 or more" >&2
  status=1
fi
((status == 0)) && echo "ok: core's directories depend one way"
exit $status
