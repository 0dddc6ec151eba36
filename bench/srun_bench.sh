#!/usr/bin/env bash
# Launch speed inside a Slurm allocation: `hvdrun true` (hosts, -np and the agents from the
# allocation: one srun step, agents connecting back) against the floor, a plain
# `srun -N3 -n3 true` in the same allocation, alternating, ROUNDS each, medians and the ratio.
# Goal: at most 1.5x the floor. Starts the tests/slurm cluster in a temporary folder unless
# CLUSTER_DIR (a running one) is given. Exits 1 if a launch failed.
# Usage: bench/srun_bench.sh [CLUSTER_DIR [ROUNDS]]   (HVDRUN=path to pick a binary)
# HVDRUN_B=path adds a second hvdrun (say, the build before a change) to every round, before or
# after the first in turn: both against the same floor in one allocation, so that a loaded
# machine's drift from one run of the script to the next does not pass for a difference.
set -euo pipefail
cd "$(dirname "$0")/.."
hvdrun=$(realpath "${HVDRUN:-build/cli/hvdrun}")
hvdrun_b=${HVDRUN_B:+$(realpath "$HVDRUN_B")}
rounds=${2:-10}
# shellcheck source=bench/slurm_fixture.sh
. bench/slurm_fixture.sh "${1:-}"

# Inside the allocation: the commands, alternating; prints "floor hvdrun [hvdrun_b]" seconds per
# round.
inner=$(mktemp)
cat >"$inner" <<'EOF'
set -euo pipefail
now() { date +%s.%N; }
for ((i = 1; i <= ROUNDS; i++)); do
  s=$(now); srun -N3 -n3 true; f=$(echo "$(now) - $s" | bc)
  b=""
  if [ -n "$HVDRUN_B" ] && ((i % 2 == 0)); then  # B first in every other round
    s=$(now); "$HVDRUN_B" true 2>/dev/null; b=$(echo "$(now) - $s" | bc)
  fi
  s=$(now); "$HVDRUN" true 2>/dev/null; h=$(echo "$(now) - $s" | bc)
  if [ -n "$HVDRUN_B" ] && ((i % 2 == 1)); then
    s=$(now); "$HVDRUN_B" true 2>/dev/null; b=$(echo "$(now) - $s" | bc)
  fi
  echo "$f $h $b"
done
EOF
results=$(ROUNDS=$rounds HVDRUN=$hvdrun HVDRUN_B=$hvdrun_b salloc -N3 -n3 bash "$inner" 2>/dev/null)
rm -f "$inner"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
fm=$(awk '{print $1}' <<<"$results" | median)
hm=$(awk '{print $2}' <<<"$results" | median)
[ -n "$fm" ] && [ -n "$hm" ] || { echo "FAILED: no result" >&2; exit 1; }
echo "$results" | awk '{printf "round %d: srun -N3 -n3 true %.3fs  hvdrun true %.3fs%s\n", NR, $1,
  $2, (NF > 2 ? sprintf("  B %.3fs", $3) : "")}'
echo "median: srun -N3 -n3 true ${fm}s; hvdrun (3 agents through srun, 3 ranks) ${hm}s"
echo "ratio hvdrun/srun: $(echo "scale=2; $hm / $fm" | bc)x (goal: at most 1.5x)"
if [ -n "$hvdrun_b" ]; then
  bm=$(awk '{print $3}' <<<"$results" | median)
  echo "B ($hvdrun_b): median ${bm}s, ratio B/srun $(echo "scale=2; $bm / $fm" | bc)x"
fi
