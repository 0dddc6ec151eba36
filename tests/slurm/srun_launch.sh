#!/usr/bin/env bash
# hvdrun's agents through srun inside a real Slurm allocation (the slurm_cluster fixture), with no
# -H and no SSH: the ranks' topology and addresses, libhvd's collectives, a failing rank's code
# and root cause, and nothing left (no step, no rank) after SIGKILL of hvdrun.
#
#   srun_launch.sh HVDRUN LIBHVD_CHECK CLUSTER_DIR
#
# Exits non-zero, saying what was expected and what came, when a check fails.
set -euo pipefail

readonly SALLOC_WAIT_S=30
readonly RUN_TIMEOUT_S=90

fail() { printf 'srun_launch.sh: FAIL: %s\n' "$*" >&2; exit 1; }

(($# == 3)) || { echo "usage: srun_launch.sh HVDRUN LIBHVD_CHECK CLUSTER_DIR" >&2; exit 2; }
hvdrun=$1 libhvd_check=$2 cluster=$3
[[ -x $hvdrun ]] || fail "hvdrun binary '$hvdrun' is not executable"
[[ -f $cluster/slurm.env ]] || fail "no running cluster in '$cluster' (did slurm_cluster_start run?)"

# Only our cluster's settings (see allocation_hosts.sh).
# shellcheck source=tests/slurm/cluster_env.sh
. "$(dirname "$(realpath "$0")")/cluster_env.sh"
use_test_cluster "$cluster"

work=$(mktemp -d)
marker="hvdsrun-$$-$RANDOM"
salloc_pid=''
cleanup() {
    # Every allocation here is named after the marker: cancel what a failed check left behind
    # (a killed salloc does not give its allocation back).
    SLURM_CONF=$cluster/slurm.conf scancel --name="$marker" 2>/dev/null || true
    [[ -n $salloc_pid ]] && kill -9 "$salloc_pid" 2>/dev/null || true
    pkill -9 -f "^$marker" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# salloc -N3 -n$1 hvdrun ARGS...: stdout, stderr and the exit status land in $work.
run() {
    local tasks=$1 rc=0
    shift
    timeout "$RUN_TIMEOUT_S" salloc --immediate="$SALLOC_WAIT_S" --job-name="$marker" -N3 \
        -n"$tasks" "$hvdrun" "$@" \
        >"$work/out" 2>"$work/err" </dev/null || rc=$?
    echo "$rc" >"$work/rc"
}
show() {
    printf -- '--- exit status: %s\n--- stdout:\n%s\n--- stderr:\n%s\n' \
        "$(<"$work/rc")" "$(<"$work/out")" "$(<"$work/err")" >&2
}
expect_rc() {  # expect_rc CODE WHAT
    [[ $(<"$work/rc") == "$1" ]] || { show; fail "$2: expected exit $1, got $(<"$work/rc")"; }
}
expect_in() {  # expect_in FILE TEXT WHAT
    grep -qF -- "$2" "$work/$1" || { show; fail "$3: expected '$2' in $1"; }
}

# 1. The dry run says the agents go through srun.
run 6 --dry-run true
expect_rc 0 "hvdrun --dry-run"
expect_in out "srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --nodelist=n1,n2,n3 --whole" \
    "the dry run's launcher command"
# The agent alone (hvdrun-agent, built beside hvdrun) rather than hvdrun itself: it starts faster.
expect_in out "--job-name=hvdrun-agents $(dirname "$hvdrun")/hvdrun-agent --agent-connect" \
    "the step's agent program"
echo "ok: the dry run shows the srun step"

# 2. Six ranks, two per node: Horovod's topology, and each rank advertises its node's NodeAddr.
run 6 --json sh -c 'echo "rank $HOROVOD_RANK/$HOROVOD_SIZE local $HOROVOD_LOCAL_RANK/$HOROVOD_LOCAL_SIZE cross $HOROVOD_CROSS_RANK adv $HVD_ADVERTISE_ADDR master $MASTER_ADDR"'
expect_rc 0 "6 ranks through srun"
for rank in 0 1 2 3 4 5; do
    node=$((rank / 2 + 1))
    expect_in err "rank $rank/6 local $((rank % 2))/2 cross $((rank / 2)) adv 127.0.1.$node master 127.0.1.1" \
        "rank $rank's topology and address"
done
python3 - "$work/out" <<'EOF' || { show; fail "the --json result"; }
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["exit_code"] == 0, doc["exit_code"]
assert doc["launcher_command"][0] == "srun", doc["launcher_command"]
assert [r["host"] for r in doc["ranks"]] == ["n1", "n1", "n2", "n2", "n3", "n3"], doc["ranks"]
assert doc["rendezvous"]["rejected"] == 0
EOF
echo "ok: 6 ranks on n1-n3, topology and NodeAddr right, --json names srun"

# 3. libhvd's collectives across the nodes (Gloo through hvdrun's rendezvous).
run 3 "$libhvd_check" collectives
expect_rc 0 "libhvd collectives through srun"
for rank in 0 1 2; do
    expect_in out "[1,$rank]<stdout>:rank $rank: all checks passed" "rank $rank's collectives"
done
echo "ok: libhvd's collectives at 3 ranks on 3 nodes"

# 4. A failing rank on n2: its exit code, and the root cause names n2 and the rank.
run 6 --grace 1 sh -c 'if [ "$HOROVOD_RANK" = 3 ]; then echo "bad batch" >&2; exit 7; fi; exec sleep 30'
expect_rc 7 "a failing rank on n2"
expect_in err "rank 3 (host n2, local rank 1) exited with code 7" "the root cause"
expect_in err "bad batch" "the failing rank's last words"
echo "ok: rank 3 on n2 exits 7 and is named"

# 5. SIGKILL of hvdrun mid-job: within 10 s no step of ours and no rank is left.
salloc --immediate="$SALLOC_WAIT_S" --job-name="$marker" -N3 -n6 \
    "$hvdrun" bash -c "exec -a $marker sleep 300" \
    >"$work/out" 2>"$work/err" </dev/null &
salloc_pid=$!
for _ in $(seq 1 150); do
    (($(pgrep -c -f "^$marker" || true) == 6)) && break
    sleep 0.1
done
(($(pgrep -c -f "^$marker" || true) == 6)) || { echo 1 >"$work/rc"; show; fail "6 ranks never ran"; }
# The agent step holds the nodes' whole allocation (--whole): 6 CPUs for 3 agent tasks.
step=$(scontrol show step 2>/dev/null | tr '\n' ' ' | grep -o 'CPUs=[0-9]* Tasks=3 Name=hvdrun-agents' || true)
[[ $step == "CPUs=6 Tasks=3 Name=hvdrun-agents" ]] ||
    { scontrol show step >&2 || true; fail "the agent step should hold 6 CPUs, found '$step'"; }
hvdrun_pid=$(pgrep -P "$salloc_pid" -f "$hvdrun" | head -1)
[[ -n $hvdrun_pid ]] || fail "cannot find hvdrun under salloc $salloc_pid"
kill -9 "$hvdrun_pid"
left=''
for _ in $(seq 1 100); do
    left=$(pgrep -a -f "^$marker" || true)
    steps=$(squeue -s -h -o '%i %j' | grep hvdrun-agents || true)
    [[ -z $left && -z $steps ]] && break
    sleep 0.1
done
[[ -z $left ]] || fail "ranks left 10 s after SIGKILL of hvdrun: $left"
[[ -z $steps ]] || fail "srun step left 10 s after SIGKILL of hvdrun: $steps"
wait "$salloc_pid" 2>/dev/null || true
salloc_pid=''
echo "ok: the agent step holds the whole allocation; SIGKILL of hvdrun leaves no step and no rank"

# 6. libhvd started by a bare `srun` (no hvdrun): every task fails at once, saying how to start it.
rc=0
timeout "$RUN_TIMEOUT_S" salloc --immediate="$SALLOC_WAIT_S" --job-name="$marker" -N3 -n3 \
    srun "$libhvd_check" collectives >"$work/out" 2>"$work/err" </dev/null || rc=$?
echo "$rc" >"$work/rc"
[[ $rc != 0 ]] || { show; fail "a bare srun of libhvd_check: expected a failure, got exit 0"; }
expect_in err "started by srun as task" "the bare srun's error"
(($(grep -c "started by srun as task" "$work/err") == 3)) ||
    { show; fail "a bare srun: expected the error from each of the 3 tasks"; }
echo "ok: a bare srun of a libhvd program fails in each task, naming hvdrun"
