#!/usr/bin/env bash
# Launch speed: `hvdrun -np 4` running `true` over 4 sshd test hosts, against
# the floor (plain OpenSSH `ssh hN true` to the same 4 hosts in parallel) and Open MPI's mpirun
# over the same hosts, in one run, alternating, median of ROUNDS. Goals: hvdrun at most 1.3x the
# floor and faster than mpirun. Prints ratios; exits 1 only if a launch failed.
# Usage: bench/launch_bench.sh [DIR_OF_RUNNING_FIXTURE [ROUNDS]]   (HVDRUN=path to pick a binary)
#   HVDRUN_B=path: a second hvdrun (another build: before/after a change) in the same rounds,
#   alternating, with its own ratio to the same floor. MPIRUN=0: no mpirun baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
hvdrun=${HVDRUN:-build/cli/hvdrun}
rounds=${2:-5}
own_fixture=""
if [ -n "${1:-}" ]; then
  dir=$1
else
  dir=$(mktemp -d)/sshd
  HVDTEST_SSHD_OWNER_PID=$$ bash tests/sshd/sshd_hosts.sh start "$dir" 4 >/dev/null
  own_fixture=$dir
fi
trap '[ -n "$own_fixture" ] && bash tests/sshd/sshd_hosts.sh stop "$own_fixture" >/dev/null' EXIT
# shellcheck disable=SC1091
. "$dir/hosts.env"
kh=$(mktemp)
cp "$HVDTEST_SSH_KNOWN_HOSTS" "$kh"
hosts=127.0.0.2,127.0.0.3,127.0.0.4,127.0.0.5

now() { date +%s.%N; }
time_it() {  # prints the wall seconds of "$@"; fails if it fails
  local s e
  s=$(now)
  "$@" >/dev/null 2>&1 || { echo "FAILED: $*" >&2; return 1; }
  e=$(now)
  echo "$e - $s" | bc
}
floor() {
  local pids=() h
  for h in h1 h2 h3 h4; do ssh -F "$HVDTEST_SSH_CONFIG" "$h" true & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || return 1; done
}
run_hvdrun() {  # [BINARY]
  "${1:-$hvdrun}" -np 4 -H "$hosts" -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG" \
    --ssh-known-hosts "$kh" true
}
rsh_args="-F $HVDTEST_SSH_CONFIG -o UserKnownHostsFile=$kh -o BatchMode=yes"
run_mpirun() {
  mpirun --allow-run-as-root -np 4 -H 127.0.0.2:1,127.0.0.3:1,127.0.0.4:1,127.0.0.5:1 \
    -bind-to none -map-by slot -mca plm_rsh_no_tree_spawn 1 -mca plm_rsh_args "$rsh_args" \
    -mca oob_tcp_if_include lo -mca btl_tcp_if_include lo -mca btl '^vader,openib' true
}
have_mpirun=0
[ "${MPIRUN:-1}" != 0 ] && command -v mpirun >/dev/null && run_mpirun >/dev/null 2>&1 &&
  have_mpirun=1
hvdrun_b=${HVDRUN_B:-}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
f=() h=() m=() b=()
for ((i = 1; i <= rounds; i++)); do
  f+=("$(time_it floor)")
  # With a second binary, which goes first alternates from round to round.
  if [ -n "$hvdrun_b" ] && ((i % 2 == 0)); then b+=("$(time_it run_hvdrun "$hvdrun_b")"); fi
  h+=("$(time_it run_hvdrun)")
  if [ -n "$hvdrun_b" ] && ((i % 2 == 1)); then b+=("$(time_it run_hvdrun "$hvdrun_b")"); fi
  [ $have_mpirun = 1 ] && m+=("$(time_it run_mpirun)")
  echo "round $i: ssh ${f[-1]}s  hvdrun ${h[-1]}s${b:+  hvdrun B ${b[-1]:-}s}${m:+  mpirun ${m[-1]:-}s}"
done
fm=$(printf '%s\n' "${f[@]}" | median)
hm=$(printf '%s\n' "${h[@]}" | median)
echo "median: plain ssh x4 in parallel ${fm}s; hvdrun -np 4 ${hm}s"
echo "ratio hvdrun/floor: $(echo "scale=2; $hm / $fm" | bc)x (goal: at most 1.3x)"
if [ -n "$hvdrun_b" ]; then
  bm=$(printf '%s\n' "${b[@]}" | median)
  echo "median: hvdrun B ($hvdrun_b) ${bm}s; ratio B/floor: $(echo "scale=2; $bm / $fm" | bc)x"
fi
if [ $have_mpirun = 1 ]; then
  mm=$(printf '%s\n' "${m[@]}" | median)
  echo "median: mpirun -np 4 ${mm}s; ratio hvdrun/mpirun $(echo "scale=2; $hm / $mm" | bc)x (goal: below 1)"
else
  echo "mpirun: not available or failed over the test hosts; no comparison"
fi
rm -f "$kh"
