#!/usr/bin/env bash
# Rank output through the srun agents' link: `hvdrun` in a Slurm allocation of 3 nodes, one rank
# per node, each writing MIB MiB to its stdout (`yes` lines), hvdrun's stdout to /dev/null; MB/s
# of rank output per run, ROUNDS runs, medians. HVDRUN_B=path adds a second hvdrun (say, the build
# before the link was sealed) to every round, before or after the first in turn, so that both
# are measured in the same allocation on the same loaded machine: the goal (issue 51) is that the
# sealed link (HVDRUN) runs at least 0.9x the clear one (HVDRUN_B). Starts the tests/slurm
# cluster in a temporary folder unless CLUSTER_DIR (a running one) is given.
# Usage: bench/srun_output_bench.sh [CLUSTER_DIR [ROUNDS [MIB]]]   (HVDRUN=path, HVDRUN_B=path)
set -euo pipefail
cd "$(dirname "$0")/.."
hvdrun=$(realpath "${HVDRUN:-build/cli/hvdrun}")
hvdrun_b=${HVDRUN_B:+$(realpath "$HVDRUN_B")}
rounds=${2:-5}
mib=${3:-200}
# shellcheck source=bench/slurm_fixture.sh
. bench/slurm_fixture.sh "${1:-}"

# Inside the allocation: prints "a_seconds [b_seconds]" per round.
inner=$(mktemp)
cat >"$inner" <<'INNER'
set -euo pipefail
now() { date +%s.%N; }
writer="yes 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde | head -c ${MIB}M"
one() {  # one HVDRUN: seconds
  local s
  s=$(now)
  "$1" -np 3 sh -c "$writer" >/dev/null 2>"$ERRS"
  echo "$(now) - $s" | bc
}
for ((i = 1; i <= ROUNDS; i++)); do
  b=""
  if [ -n "$HVDRUN_B" ] && ((i % 2 == 0)); then b=$(one "$HVDRUN_B"); fi
  a=$(one "$HVDRUN")
  if [ -n "$HVDRUN_B" ] && ((i % 2 == 1)); then b=$(one "$HVDRUN_B"); fi
  echo "$a $b"
done
INNER
errs=$(mktemp)
results=$(ROUNDS=$rounds MIB=$mib ERRS=$errs HVDRUN=$hvdrun HVDRUN_B=$hvdrun_b \
  salloc -N3 -n3 bash "$inner" 2>/dev/null) || { cat "$errs" >&2; exit 1; }
rm -f "$inner" "$errs"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
total=$((3 * mib))  # MiB of rank output per run
echo "$results" | awk -v t="$total" '{printf "round %d: hvdrun %.2fs (%.0f MiB/s)%s\n", NR, $1,
  t / $1, (NF > 1 ? sprintf("  B %.2fs (%.0f MiB/s)", $2, t / $2) : "")}'
am=$(awk '{print $1}' <<<"$results" | median)
echo "median: hvdrun ${am}s for ${total} MiB: $(echo "scale=1; $total / $am" | bc) MiB/s"
if [ -n "$hvdrun_b" ]; then
  bm=$(awk '{print $2}' <<<"$results" | median)
  echo "B ($hvdrun_b): median ${bm}s: $(echo "scale=1; $total / $bm" | bc) MiB/s"
  echo "throughput hvdrun/B: $(echo "scale=2; $bm / $am" | bc)x (goal for the sealed link: at least 0.9x the clear one)"
fi
