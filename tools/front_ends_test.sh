#!/usr/bin/env bash
# docs/options.md is what tools/front_ends.py generates now, and every DDP wrapper has every DDP
# option or a stated reason why not.
set -euo pipefail
exec python3 tools/front_ends.py tools/options_rows --check .
