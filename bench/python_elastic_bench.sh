#!/usr/bin/env bash
# How long hvd.elastic takes from a rank's death to training again, against a full restart of
# the same job: tests/python/elastic_check.py at NP ranks on localhost under the built hvdrun,
# worker NP-1 SIGKILLed before step 7, REPEATS alternating pairs:
# - elastic: `hvdrun --min-np NP-1`: the survivors reset (restore, next generation, sync) and go
#   on; measured from the kill to the first step completed in generation 1;
# - restart: `hvdrun --max-restarts 1` (no elastic flags): hvdrun stops the job and starts every
#   rank again (python, import torch and horovod.torch, init, the first steps); measured from the
#   kill to the first step completed by the new attempt (which starts again from step 1).
# Prints every pair's seconds and ratio, and the median ratio (the goal: at most 0.5).
# A benchmark, not a test. Usage: bench/python_elastic_bench.sh [BUILD_DIR]   (REPEATS=5 NP=3)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
repeats=${REPEATS:-5} np=${NP:-3}
py=${HVD_PYTHON:-/usr/bin/python3}
export PYTHONPATH="$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1
victim=$((np - 1))
# Seconds from the kill line to the first line matching PATTERN after it: a step done in
# generation 1 (elastic), or the new attempt's "step 1 done" (restart; the first attempt's
# ranks never got past step 6).
measure() {
  awk -v pattern="$1" '
    /dying at step/ { split($NF, t, "="); kill = t[2] }
    kill && $0 ~ pattern { split($NF, t, "="); print t[2] - kill; exit }'
}
ratios=()
for ((i = 1; i <= repeats; i++)); do
  e=$("$build/cli/hvdrun" -np "$np" -H "localhost:$np" --min-np $((np - 1)) -x PYTHONPATH \
      "$py" tests/python/elastic_check.py 20 --die "$victim:7:kill" --timestamps 2>&1 | measure 'step [0-9]+ done in generation 1 ')
  r=$("$build/cli/hvdrun" -np "$np" -H "localhost:$np" --max-restarts 1 -x PYTHONPATH \
      "$py" tests/python/elastic_check.py 20 --die "$victim:7:kill" --timestamps 2>&1 | measure ': step 1 done in generation 0 ')
  [ -n "$e" ] && [ -n "$r" ] || { echo "pair $i: a run did not report (elastic '$e', restart '$r')" >&2; exit 1; }
  ratio=$(awk -v e="$e" -v r="$r" 'BEGIN { printf "%.3f", e / r }')
  echo "pair $i: elastic ${e} s, restart ${r} s, ratio ${ratio}"
  ratios+=("$ratio")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 }
  END { m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf "median ratio elastic/restart over %d pairs: %.3f (goal: at most 0.5)\n", NR, m }'
