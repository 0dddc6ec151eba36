#!/usr/bin/env bash
# The include check must fail on a violation: a planted `#include "agent/probe.h"` in libhvd's
# folder (libhvd links contract/ and common/ only, never the agent) is reported with file:line.
# Usage: include_check_planted.sh RULES_FILE
set -euo pipefail
rules=$1
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/allreduce/engine"
printf '#include "contract/env_table.h"\n#include "agent/probe.h"\n' >"$root/allreduce/engine/planted.cpp"
set +e
out=$(python3 "$(dirname "$0")/include_check.py" "$rules" "$root" 2>&1)
rc=$?
set -e
echo "$out"
[ "$rc" -eq 1 ] || { echo "FAIL: expected exit 1, got $rc"; exit 1; }
grep -q 'allreduce/engine/planted.cpp:2: includes "agent/probe.h", but allreduce/ links only' <<<"$out" ||
  { echo "FAIL: the violation is not named with file:line"; exit 1; }
if grep -q 'planted.cpp:1:' <<<"$out"; then echo "FAIL: contract/ is allowed"; exit 1; fi
# A language binding reaches libhvd through its public headers only.
if grep -q '^python:' "$rules"; then
  mkdir -p "$root/python/native"
  printf '#include "hvd/hvd.hpp"\n#include "allreduce/engine/op_state.h"\n' >"$root/python/native/planted.cpp"
  set +e
  out=$(python3 "$(dirname "$0")/include_check.py" "$rules" "$root" 2>&1)
  set -e
  echo "$out"
  grep -q 'python/native/planted.cpp:2: includes "allreduce/engine/op_state.h", libhvd' <<<"$out" ||
    { echo "FAIL: python/ including libhvd's internals is not reported"; exit 1; }
  if grep -q 'python/native/planted.cpp:1:' <<<"$out"; then echo "FAIL: hvd/hvd.hpp is allowed"; exit 1; fi
fi
# Inside the launcher wing, each part includes only the parts below it (launcher/CMakeLists.txt):
# the plan must not reach the native launcher, the native launcher not mpirun's nor the registry,
# while the native launcher may include the elastic driver and the plan.
if grep -q '^launcher/native:' "$rules"; then
  mkdir -p "$root/launcher/plan" "$root/launcher/native"
  printf '#include "launcher/native/native_job.h"\n' >"$root/launcher/plan/planted.cpp"
  printf '#include "launcher/elastic/elastic_driver.h"\n#include "launcher/plan/plan.h"\n#include "launcher/mpirun/mpi_launcher.h"\n#include "launcher/registry.h"\n' \
    >"$root/launcher/native/planted.cpp"
  set +e
  out=$(python3 "$(dirname "$0")/include_check.py" "$rules" "$root" 2>&1)
  set -e
  echo "$out"
  for want in 'launcher/plan/planted.cpp:1: includes "launcher/native/native_job.h", but launcher/plan/ links only' \
      'launcher/native/planted.cpp:3: includes "launcher/mpirun/mpi_launcher.h", but launcher/native/ links only' \
      'launcher/native/planted.cpp:4: includes "launcher/registry.h", but launcher/native/ links only'; do
    grep -qF "$want" <<<"$out" || { echo "FAIL: not reported: $want"; exit 1; }
  done
  if grep -qE 'launcher/native/planted.cpp:(1|2):' <<<"$out"; then
    echo "FAIL: the native launcher may include the elastic driver and the plan"; exit 1
  fi
fi
echo "PASS: the planted include was caught"
