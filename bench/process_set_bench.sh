#!/usr/bin/env bash
# Process sets (bench/process_set_bench.cpp), native (Gloo) and --mpi, on localhost:
#  1. What creating a set costs: a set of N = 2, 4, 8 ranks (in a job of N + 1, so that the set is
#     not the global one): milliseconds (the slowest rank's add_process_set) and the socket
#     descriptors its ranks opened.
#  2. An allreduce on a set of 2 of 4 ranks (the other two wait in a barrier) against the same
#     allreduce in a job of 2, at 4 KiB and 64 MiB: the median of each run, 5 runs of each job
#     alternating; goal: pair / job of 2 <= 1.1.
# Builds nothing: build the process_set_bench and hvdrun targets first.
# Usage: bench/process_set_bench.sh [BUILD_DIR]   ENGINES="gloo mpi" (default) picks the runs.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
hvdrun=$build/cli/hvdrun
bench=$build/bench/process_set_bench
for f in "$hvdrun" "$bench"; do
  [ -x "$f" ] || { echo "missing $f: cmake --build $build --target hvdrun process_set_bench" >&2; exit 2; }
done
export HOROVOD_DYNAMIC_PROCESS_SETS=1
status=0
for engine in ${ENGINES:-gloo mpi}; do
  mode=(); [ "$engine" = mpi ] && mode=(--mpi)
  for n in 2 4 8; do
    "$hvdrun" "${mode[@]}" -np $((n + 1)) "$bench" create "$n" 2>/dev/null | grep '^\[1,0\]' |
      sed 's/^\[1,0\]<stdout>://' || status=1
  done
  pair=(); world=()
  for run in 1 2 3 4 5; do
    line=$("$hvdrun" "${mode[@]}" -np 4 "$bench" speed pair 2>/dev/null | grep 'speed') || status=1
    pair+=("$line")
    line=$("$hvdrun" "${mode[@]}" -np 2 "$bench" speed world 2>/dev/null | grep 'speed') || status=1
    world+=("$line")
  done
  printf '%s\n' "${pair[@]}" "${world[@]}" | sed 's/^\[1,0\]<stdout>://'
  # Medians of the runs' medians, and the ratios.
  printf '%s\n' "${pair[@]}" | sed -n 's/.*4 KiB \([0-9.]*\) ms, 64 MiB \([0-9.]*\) ms.*/\1 \2/p' >/tmp/psb.pair.$$
  printf '%s\n' "${world[@]}" | sed -n 's/.*4 KiB \([0-9.]*\) ms, 64 MiB \([0-9.]*\) ms.*/\1 \2/p' >/tmp/psb.world.$$
  python3 - "$engine" /tmp/psb.pair.$$ /tmp/psb.world.$$ <<'PY'
import statistics, sys
engine, pair, world = sys.argv[1], sys.argv[2], sys.argv[3]
def cols(path):
    rows = [tuple(map(float, l.split())) for l in open(path) if l.strip()]
    return [statistics.median(r[i] for r in rows) for i in (0, 1)] if rows else [float('nan')] * 2
p, w = cols(pair), cols(world)
print(f'{engine}: 4 KiB pair of 4 {p[0]:.4f} ms, job of 2 {w[0]:.4f} ms, ratio {p[0] / w[0]:.2f}; '
      f'64 MiB pair of 4 {p[1]:.1f} ms, job of 2 {w[1]:.1f} ms, ratio {p[1] / w[1]:.2f}')
PY
  rm -f /tmp/psb.pair.$$ /tmp/psb.world.$$
done
exit $status
