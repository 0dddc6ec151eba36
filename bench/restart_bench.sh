#!/usr/bin/env bash
# Restart speed: the time from a rank's death to the next attempt's ranks running, with
# --max-restarts 1 --restart-backoff 0, against the plain launch time of the same job (hvdrun
# running `true`), ROUNDS each (default 5), medians. Goal: at most launch time + grace + 1 s.
# HOSTS (default localhost:2) and EXTRA (e.g. the sshd fixture's -p/--ssh-config flags) pick where.
# Usage: bench/restart_bench.sh [ROUNDS]   (HVDRUN=path to pick a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
hvdrun=${HVDRUN:-build/cli/hvdrun}
rounds=${1:-5}
hosts=${HOSTS:-localhost:2}
read -r -a extra <<<"${EXTRA:-}"
grace=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# Attempt 0: rank 1 notes the time and kills itself. Attempt 1: every rank notes when it runs.
rank_script='if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  if [ "$HOROVOD_RANK" = 1 ]; then date +%s.%N > "$W/died"; kill -9 $$; fi; exec sleep 30
fi
date +%s.%N > "$W/up.$HOROVOD_RANK"'
l=() r=()
for ((i = 1; i <= rounds; i++)); do
  s=$(now)
  "$hvdrun" -np 2 -H "$hosts" "${extra[@]}" true >/dev/null 2>&1
  l+=("$(echo "$(now) - $s" | bc)")
  rm -f "$work"/died "$work"/up.*
  "$hvdrun" -np 2 -H "$hosts" "${extra[@]}" --grace "$grace" --max-restarts 1 \
    --restart-backoff 0 -x W="$work" sh -c "$rank_script" >/dev/null 2>&1 ||
    { echo "FAILED: the restarted job" >&2; exit 1; }
  last=$(cat "$work"/up.* | sort -n | tail -1)
  r+=("$(echo "$last - $(cat "$work/died")" | bc)")
  echo "round $i: launch ${l[-1]}s; death to every rank of attempt 2 running ${r[-1]}s"
done
lm=$(printf '%s\n' "${l[@]}" | median)
rm=$(printf '%s\n' "${r[@]}" | median)
echo "median: launch ${lm}s; death to ranks running again ${rm}s"
echo "goal: at most launch + grace + 1 s = $(echo "$lm + $grace + 1" | bc)s"
