#!/usr/bin/env bash
# Runs Horovod's own test/parallel/test_torch.py against hvdrun's horovod.torch, as Horovod's CI
# runs it (2 ranks, python3 -m pytest -v), and prints a table of passed, failed and skipped tests
# with each failure's reason, for each launch mode.
#
# Usage: tests/python/horovod_suite.sh HOROVOD_CHECKOUT [BUILD_DIR]
#   HOROVOD_CHECKOUT: a Horovod source tree fetched by hand into a scratch folder (never
#     committed here), e.g. `git clone https://github.com/horovod/horovod /tmp/horovod`.
#   BUILD_DIR: hvdrun's build folder (default: build/ beside this repository's sources).
# Environment: HVD_SUITE_MODES (default "native mpi"; add "mpirun" for plain mpirun -np 2,
#   reported, not a goal), HVD_SUITE_NP (2), HVD_SUITE_TEST_TIMEOUT (seconds per test, 120),
#   HVD_SUITE_RUN_TIMEOUT (seconds per run, 1800), HVD_SUITE_OUT (results folder),
#   HVD_SUITE_K (a pytest -k expression to run a subset), HVD_PYTHON (/usr/bin/python3).
#
# Every rank writes its own junit-xml; a test passes only if it passed on every rank
# (horovod_suite/merge.py). Each test that failed or hung in the full run runs again alone in its
# own hvdrun job, so one hang or crash does not hide the rest; the table shows both verdicts.
# Needs python3-pytest, python3-pytest-timeout, python3-cloudpickle, python3-mock and
# python3-packaging (scripts/install-deps.sh --torch).
set -uo pipefail
checkout=$(cd "${1:?usage: horovod_suite.sh HOROVOD_CHECKOUT [BUILD_DIR]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${2:-$here/../../build}" && pwd)
py=${HVD_PYTHON:-/usr/bin/python3}
hvdrun=${HVDRUN:-$build/cli/hvdrun}
np=${HVD_SUITE_NP:-2}
modes=${HVD_SUITE_MODES:-native mpi}
test_timeout=${HVD_SUITE_TEST_TIMEOUT:-120}
run_timeout=${HVD_SUITE_RUN_TIMEOUT:-1800}
out=${HVD_SUITE_OUT:-$(mktemp -d /tmp/horovod-suite.XXXXXX)}
suite=$checkout/test/parallel/test_torch.py
[ -f "$suite" ] || { echo "horovod_suite: no $suite" >&2; exit 64; }
"$py" -c 'import torch, pytest, pytest_timeout, cloudpickle, mock, packaging' ||
  { echo "horovod_suite: $py lacks a test dependency (bash scripts/install-deps.sh --torch)" >&2; exit 77; }
mkdir -p "$out"
export PYTHONPATH="$build/python:$here/horovod_suite${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

# launch MODE JUNIT_PREFIX PYTEST_ARGS...: the suite under MODE, each rank writing
# JUNIT_PREFIX.rank<R>.xml.
launch() {
  local mode=$1 prefix=$2
  shift 2
  local rank_cmd='r=${HOROVOD_RANK:-${OMPI_COMM_WORLD_RANK:-0}}; HVD_SUITE_RESULTS="'"$prefix"'.rank$r.jsonl" exec "$0" -m pytest -v -p no:cacheprovider -p hvd_suite_shim "$@" --junitxml="'"$prefix"'.rank$r.xml"'
  local cmd=(bash -c "$rank_cmd" "$py" --timeout "$test_timeout" "$@")
  case $mode in
    native) "$hvdrun" --timeout "$run_timeout" -np "$np" -H "localhost:$np" "${cmd[@]}" ;;
    mpi) "$hvdrun" --timeout "$run_timeout" --mpi -np "$np" -H "localhost:$np" "${cmd[@]}" ;;
    mpirun) timeout "$run_timeout" mpirun --allow-run-as-root --oversubscribe -bind-to none \
              -np "$np" -x PYTHONPATH -x PYTHONDONTWRITEBYTECODE "${cmd[@]}" ;;
  esac
}

cd "$checkout/test/parallel" || exit 1
for mode in $modes; do
  echo "=== horovod_suite: $mode, $np ranks ($out/$mode) ==="
  rm -f "$out/$mode".*
  start=$(date +%s)
  launch "$mode" "$out/$mode.full" "$suite" ${HVD_SUITE_K:+-k "$HVD_SUITE_K"} >"$out/$mode.full.log" 2>&1
  echo "full run: exit $?, $(( $(date +%s) - start )) s (log: $out/$mode.full.log)"
  "$py" "$here/horovod_suite/merge.py" "$np" "$out/$mode.full.json" "$out/$mode.full"
  # Tests that failed or hung, each again alone.
  mapfile -t again < <("$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); [print(k) for k,v in sorted(d.items()) if v["verdict"]=="failed"]' "$out/$mode.full.json")
  # A run that ended early has tests with no result at all: they count as failed too.
  mapfile -t all < <(cd "$checkout/test/parallel" && "$py" -m pytest -p hvd_suite_shim --collect-only -q "$suite" ${HVD_SUITE_K:+-k "$HVD_SUITE_K"} 2>/dev/null | sed -n 's/.*::\(test_[A-Za-z0-9_]*\)$/\1/p')
  for t in "${all[@]}"; do
    grep -q "\"$t\"" "$out/$mode.full.json" || again+=("$t")
  done
  for t in "${again[@]}"; do
    launch "$mode" "$out/$mode.alone.$t" "$suite::TorchTests::$t" >"$out/$mode.alone.$t.log" 2>&1
    "$py" "$here/horovod_suite/merge.py" "$np" "$out/$mode.alone.$t.json" "$out/$mode.alone.$t"
  done
  "$py" - "$out" "$mode" "${all[@]}" <<'PY'
import json, os, sys
out, mode, names = sys.argv[1], sys.argv[2], sys.argv[3:]
full = json.load(open(os.path.join(out, f'{mode}.full.json')))
rows, counts = [], {'passed': 0, 'failed': 0, 'skipped': 0}
for name in names or sorted(full):
    first = full.get(name, {'verdict': 'failed', 'reason': 'no result in the full run'})
    alone_path = os.path.join(out, f'{mode}.alone.{name}.json')
    verdict, reason, note = first['verdict'], first['reason'], ''
    if os.path.exists(alone_path):
        alone = json.load(open(alone_path)).get(name, {'verdict': 'failed', 'reason': 'no result alone'})
        note = f'alone: {alone["verdict"]}'
        verdict, reason = alone['verdict'], alone['reason'] or reason
    counts[verdict] += 1
    rows.append((name, verdict, note, reason))
print(f'\n{mode}: {counts["passed"]} passed, {counts["failed"]} failed, {counts["skipped"]} skipped '
      f'of {len(rows)} (a test rerun alone counts by its verdict alone)')
print(f'| test | verdict | full run -> alone | reason |\n|---|---|---|---|')
for name, verdict, note, reason in rows:
    if verdict != 'passed':
        print(f'| {name} | {verdict} | {note} | {reason.replace("|", "/")} |')
json.dump({'counts': counts, 'rows': rows}, open(os.path.join(out, f'{mode}.table.json'), 'w'))
PY
done
echo "results: $out"
