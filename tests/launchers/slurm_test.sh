#!/usr/bin/env bash
# ddpspawn under a real single-host Slurm (tools/slurm_check). It needs root and Slurm's packages
# (tools/setup installs them); without them the test is skipped, and under
# DDPSPAWN_REQUIRE_ALL_TESTS=1 (tools/test, CI) it fails instead.
set -uo pipefail
# Slurm's and munge's daemons live in /usr/sbin, which Bazel's fixed PATH (--incompatible_strict_action_env) leaves out.
export PATH="$PATH:/usr/sbin:/sbin"
why=""
[[ $(id -u) -eq 0 ]] || why="not root"
command -v slurmctld >/dev/null || why="${why:+$why, }Slurm is not installed"
if [[ -n "$why" ]]; then
  if [[ "${DDPSPAWN_REQUIRE_ALL_TESTS:-0}" != 0 ]]; then
    echo "FAIL: this test cannot run here: $why (DDPSPAWN_REQUIRE_ALL_TESTS makes a skip a failure)"
    exit 1
  fi
  echo "SKIPPED: $why"
  exit 0
fi
exec tools/slurm_check tools/ddpspawn
