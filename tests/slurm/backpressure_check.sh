#!/usr/bin/env bash
# Output that flows while something stops taking it, with the agents through srun (issue 51,
# findings 2 and 3, which hold for every way agents start: the local and SSH agents' cases are
# tests/e2e/test_launch_backpressure.cpp and test_launch_ssh_backpressure.cpp):
#  1. a console that stops reading: nobody reads hvdrun's stdout for PAUSE_S (longer than twice
#     --keepalive) while two ranks print 9 MB each. The back-pressure slows the ranks; no host is
#     lost, no line is lost, and hvdrun waits rather than spins while it is paused;
#  2. a frozen hvdrun (SIGSTOP) while two ranks print without end: each agent's dead-man switch
#     stops its ranks after about twice --keepalive, although they, and the agent's output to
#     hvdrun, are blocked.
#
#   backpressure_check.sh HVDRUN CLUSTER_DIR
set -euo pipefail

readonly SALLOC_WAIT_S=30
readonly LINES=1300000 # per rank: 9 MB, more than hvdrun's 8 MiB console queue and every buffer
readonly PAUSE_S=6
readonly FROZEN_LIMIT_S=10

fail() { printf 'backpressure_check.sh: FAIL: %s\n' "$*" >&2; exit 1; }

(($# == 2)) || { echo "usage: backpressure_check.sh HVDRUN CLUSTER_DIR" >&2; exit 2; }
hvdrun=$1 cluster=$2
[[ -x $hvdrun ]] || fail "hvdrun binary '$hvdrun' is not executable"
[[ -f $cluster/slurm.env ]] || fail "no running cluster in '$cluster' (did slurm_cluster_start run?)"

# shellcheck source=tests/slurm/cluster_env.sh
. "$(dirname "$(realpath "$0")")/cluster_env.sh"
use_test_cluster "$cluster"

work=$(mktemp -d)
marker="hvdbp-$$-$RANDOM"
salloc_pid=""
cleanup() {
    [[ -n $salloc_pid ]] && kill -KILL "$salloc_pid" 2>/dev/null
    SLURM_CONF=$cluster/slurm.conf scancel --name="$marker" 2>/dev/null || true
    [[ -n ${KEEP_WORK:-} ]] || rm -rf "$work"
}
trap cleanup EXIT

# CPU seconds (user + system) of a process so far.
cpu_seconds() {
    local stat fields
    stat=$(<"/proc/$1/stat")
    read -r -a fields <<<"${stat##*) }"
    echo "scale=2; (${fields[11]} + ${fields[12]}) / $(getconf CLK_TCK)" | bc
}
# The hvdrun that salloc runs (its child).
hvdrun_of() {
    local pid=""
    for _ in $(seq 1 100); do
        pid=$(pgrep -P "$1" | head -1 || true)
        [[ -n $pid ]] && break
        sleep 0.05
    done
    echo "$pid"
}
ranks_running() { pgrep -f "^$marker-rank" | wc -l || true; }

# 1. The paused console. hvdrun's stdout is a FIFO that this script opens and leaves unread.
mkfifo "$work/out.fifo"
salloc --immediate="$SALLOC_WAIT_S" --job-name="$marker" -N2 -n2 "$hvdrun" --keepalive 1 \
    --log-level debug sh -c "seq 1 $LINES" >"$work/out.fifo" 2>"$work/err" </dev/null &
salloc_pid=$!
exec 3<"$work/out.fifo"
pid=$(hvdrun_of "$salloc_pid")
[[ -n $pid ]] || fail "no hvdrun under salloc"
for _ in $(seq 1 150); do
    grep -qF "phase: running" "$work/err" && break
    sleep 0.1
done
grep -qF "phase: running" "$work/err" || fail "the ranks did not start: $(tail -c 2000 "$work/err")"
sleep 1 # the console's pipe is full now, and the queue fills behind it
before=$(cpu_seconds "$pid")
sleep "$PAUSE_S"
paused_cpu=$(echo "$(cpu_seconds "$pid") - $before" | bc)
cat <&3 >"$work/out"
exec 3<&-
rc=0
wait "$salloc_pid" || rc=$?
salloc_pid=""
show() { printf -- '--- stderr:\n%s\n' "$(tail -c 3000 "$work/err")" >&2; }
[[ $rc == 0 ]] || { show; fail "paused console: exit $rc (a host lost?)"; }
for rank in 0 1; do
    n=$(grep -c "^\[1,$rank\]<stdout>:" "$work/out" || true)
    [[ $n == "$LINES" ]] || { show; fail "paused console: rank $rank printed $n lines of $LINES"; }
    last=$(grep "^\[1,$rank\]<stdout>:" "$work/out" | tail -1)
    [[ $last == "[1,$rank]<stdout>:$LINES" ]] || { show; fail "rank $rank's last line: $last"; }
done
! grep -qF "lost" "$work/err" || { show; fail "paused console: hvdrun said a host was lost"; }
(($(echo "$paused_cpu < 0.5" | bc))) ||
    fail "paused console: hvdrun used $paused_cpu CPU-s in a pause of $PAUSE_S s (it polls)"
echo "ok: a console paused $PAUSE_S s (--keepalive 1) while 2 ranks through srun printed 9 MB each:" \
    "exit 0, every line, hvdrun $paused_cpu CPU-s while paused"

# 2. The frozen launcher.
salloc --immediate="$SALLOC_WAIT_S" --job-name="$marker" -N2 -n2 "$hvdrun" --keepalive 1 \
    --grace 1 bash -c "exec -a $marker-rank bash -c 'while :; do seq 1 100000; done'" \
    >/dev/null 2>"$work/err" </dev/null &
salloc_pid=$!
pid=$(hvdrun_of "$salloc_pid")
[[ -n $pid ]] || fail "no hvdrun under salloc"
for _ in $(seq 1 150); do
    (($(ranks_running) >= 2)) && break
    sleep 0.1
done
(($(ranks_running) >= 2)) || { show; fail "frozen hvdrun: the ranks did not start"; }
sleep 1
kill -STOP "$pid"
start=$(date +%s%N)
for _ in $(seq 1 $((FROZEN_LIMIT_S * 20))); do
    (($(ranks_running) == 0)) && break
    sleep 0.05
done
gone_ms=$((($(date +%s%N) - start) / 1000000))
left=$(ranks_running)
kill -KILL "$pid" 2>/dev/null || true
kill -CONT "$pid" 2>/dev/null || true
wait "$salloc_pid" 2>/dev/null || true
salloc_pid=""
((left == 0)) || fail "frozen hvdrun: $left printing ranks still there after $FROZEN_LIMIT_S s"
((gone_ms >= 1500)) || fail "frozen hvdrun: ranks stopped after $gone_ms ms, before the switch's 2 s"
echo "ok: hvdrun frozen while 2 ranks through srun printed: every rank stopped $gone_ms ms later"
