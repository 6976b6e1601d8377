#!/usr/bin/env bash
# The core's directories depend one way: each includes only directories of a lower layer (see
# docs/ARCHITECTURE.md). A new directory needs a layer here.
set -euo pipefail
declare -A layer=([util]=0 [env]=1 [trace]=2 [launch]=3 [comm]=3 [ddp]=4 [job]=4 [version]=4
                  [model]=5 [strategy]=6 [train]=7)
status=0
scanned=0
while IFS=: read -r file line; do
  scanned=$((scanned + 1))
  from=$(cut -d/ -f2 <<<"$file")
  to=$(sed -E 's|.*"core/([a-z_]+)/.*|\1|' <<<"$line")
  [[ "$from" == "$to" ]] && continue
  if [[ -z "${layer[$from]:-}" || -z "${layer[$to]:-}" ]]; then
    echo "FAIL: $file: core/$from or core/$to has no layer in core/layers_test.sh" >&2
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
