#!/usr/bin/env bash
# Launch speed inside a Slurm allocation: `hvdrun true` (hosts, -np and the agents from the
# allocation: one srun step, agents connecting back) against the floor, a plain
# `srun -N3 -n3 true` in the same allocation, alternating, ROUNDS each, medians and the ratio.
# Goal: at most 1.5x the floor. Starts the tests/slurm cluster in a temporary folder unless
# CLUSTER_DIR (a running one) is given. Exits 1 if a launch failed.
# Usage: bench/srun_bench.sh [CLUSTER_DIR [ROUNDS]]   (HVDRUN=path to pick a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
hvdrun=$(realpath "${HVDRUN:-build/cli/hvdrun}")
rounds=${2:-10}
own=""
if [ -n "${1:-}" ]; then
  dir=$1
else
  dir=$(mktemp -d)/slurm
  HVDTEST_SLURM_OWNER_PID=$$ bash tests/slurm/slurm_cluster.sh start "$dir" >/dev/null
  own=$dir
fi
trap '[ -n "$own" ] && bash tests/slurm/slurm_cluster.sh stop "$own" >/dev/null' EXIT
export SLURM_CONF=$dir/slurm.conf

# Inside the allocation: both commands, alternating; prints "floor hvdrun" seconds per round.
inner=$(mktemp)
cat >"$inner" <<'EOF'
set -euo pipefail
now() { date +%s.%N; }
for ((i = 1; i <= ROUNDS; i++)); do
  s=$(now); srun -N3 -n3 true; f=$(echo "$(now) - $s" | bc)
  s=$(now); "$HVDRUN" true 2>/dev/null; h=$(echo "$(now) - $s" | bc)
  echo "$f $h"
done
EOF
results=$(ROUNDS=$rounds HVDRUN=$hvdrun salloc -N3 -n3 bash "$inner" 2>/dev/null)
rm -f "$inner"
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
fm=$(awk '{print $1}' <<<"$results" | median)
hm=$(awk '{print $2}' <<<"$results" | median)
[ -n "$fm" ] && [ -n "$hm" ] || { echo "FAILED: no result" >&2; exit 1; }
echo "$results" | awk '{printf "round %d: srun -N3 -n3 true %.3fs  hvdrun true %.3fs\n", NR, $1, $2}'
echo "median: srun -N3 -n3 true ${fm}s; hvdrun (3 agents through srun, 3 ranks) ${hm}s"
echo "ratio hvdrun/srun: $(echo "scale=2; $hm / $fm" | bc)x (goal: at most 1.5x)"
