#!/usr/bin/env bash
# The sealed link between hvdrun and its srun agents (agent/sealed_link.h), through a relay of
# our own (seal_relay.py, put in the agents' path by relay_srun.sh standing in for srun):
#  1. a relay that records sees none of the job's secrets: not the agent token, not the
#     rendezvous token, not a value of `-x NAME=value` or `-x NAME`, not the argv, not the ranks'
#     output; the job runs as without it;
#  2. a relay that changes, replays or reorders a record gets the job refused, with an error that
#     names what happened, within the time limit (no hang), without a crash, no rank left;
#  3. a relay that changes a byte of the exchange (a key, a proof), or an agent of another hvdrun
#     version, gets the launch refused before anything of the job, at once, and named;
#  4. an agent's exchange replayed on a new connection is dropped, and the job runs.
#
#   seal_relay_check.sh HVDRUN CLUSTER_DIR
set -euo pipefail

readonly SALLOC_WAIT_S=30
readonly RUN_TIMEOUT_S=60

fail() { printf 'seal_relay_check.sh: FAIL: %s\n' "$*" >&2; exit 1; }

(($# == 2)) || { echo "usage: seal_relay_check.sh HVDRUN CLUSTER_DIR" >&2; exit 2; }
hvdrun=$1 cluster=$2
[[ -x $hvdrun ]] || fail "hvdrun binary '$hvdrun' is not executable"
[[ -f $cluster/slurm.env ]] || fail "no running cluster in '$cluster' (did slurm_cluster_start run?)"
here=$(dirname "$(realpath "$0")")

# shellcheck source=tests/slurm/cluster_env.sh
. "$(dirname "$(realpath "$0")")/cluster_env.sh"
use_test_cluster "$cluster"

work=$(mktemp -d)
marker="hvdseal-$$-$RANDOM"
cleanup() {
    SLURM_CONF=$cluster/slurm.conf scancel --name="$marker" 2>/dev/null || true
    [[ -s $work/relay/relay.pid ]] && kill "$(<"$work/relay/relay.pid")" 2>/dev/null || true
    [[ -n ${KEEP_WORK:-} ]] || rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/bin"
ln -s "$here/relay_srun.sh" "$work/bin/srun"
real_srun=$(command -v srun) || fail "no srun on PATH"

# The secrets the relay must not see. -x NAME=value and -x NAME (its value from hvdrun's env).
x_value="xval-$RANDOM$RANDOM-secret"
export SEAL_X_ENV="xenv-$RANDOM$RANDOM-secret"
argv_word="argv-$RANDOM$RANDOM-word"

# run MODE ARGS...: hvdrun in `salloc -N3 -n3` with the relay in MODE between agents and hvdrun.
run() {
    local mode=$1 rc=0
    shift
    rm -rf "$work/relay"
    mkdir -p "$work/relay"
    timeout "$RUN_TIMEOUT_S" salloc --immediate="$SALLOC_WAIT_S" --job-name="$marker" -N3 -n3 \
        env PATH="$work/bin:$PATH" HVDTEST_REAL_SRUN="$real_srun" HVDTEST_RELAY_DIR="$work/relay" \
        HVDTEST_RELAY_MODE="$mode" "$hvdrun" "$@" >"$work/out" 2>"$work/err" </dev/null || rc=$?
    echo "$rc" >"$work/rc"
    [[ -s $work/relay/relay.pid ]] && kill "$(<"$work/relay/relay.pid")" 2>/dev/null || true
}
show() {
    printf -- '--- exit status: %s\n--- stdout:\n%s\n--- stderr:\n%s\n--- relay:\n%s\n' \
        "$(<"$work/rc")" "$(head -c 3000 "$work/out")" "$(tail -c 4000 "$work/err")" \
        "$(cat "$work/relay/relay.log" 2>/dev/null)" >&2
}
expect_in() {  # expect_in FILE TEXT WHAT
    grep -qF -- "$2" "$work/$1" || { show; fail "$3: expected '$2' in $1"; }
}

# 1. Recorded: the job runs, and the capture holds none of its secrets.
start=$(date +%s.%N)
run record -x SEAL_X_VALUE="$x_value" -x SEAL_X_ENV sh -c \
    'echo "rank $HOROVOD_RANK token=$HVD_RENDEZVOUS_TOKEN x=$SEAL_X_VALUE y=$SEAL_X_ENV $0"' \
    "$argv_word"
[[ $(<"$work/rc") == 0 ]] || { show; fail "the job through a recording relay: exit $(<"$work/rc")"; }
for rank in 0 1 2; do
    expect_in out "rank $rank token=" "rank $rank's line"
done
expect_in out "x=$x_value y=$SEAL_X_ENV $argv_word" "the -x values reach the ranks"
[[ -s $work/relay/capture ]] || { show; fail "the relay saw nothing: it was not in the agents' path"; }
grep -c "seal_relay: to_launcher" "$work/relay/relay.log" | grep -qx 3 ||
    { show; fail "expected the 3 agents' connections through the relay"; }
token=$(grep -o 'token=[0-9a-f]*' "$work/out" | head -1 | cut -d= -f2)
agent_token=$(<"$work/relay/agent_token")
[[ -n $token && -n $agent_token ]] || { show; fail "no token to look for"; }
found=""
for secret in "$agent_token" "$token" "$x_value" "$SEAL_X_ENV" "$argv_word" \
    HVD_RENDEZVOUS_TOKEN SEAL_X_VALUE "rank 0 token"; do
    if grep -qaF -- "$secret" "$work/relay/capture"; then found+=" '$secret'"; fi
done
printf 'the relay recorded %s bytes over 3 connections (%s)\n' "$(stat -c %s "$work/relay/capture")" \
    "$(tr '\n' ';' <"$work/relay/relay.log")"
[[ -z $found ]] || fail "a recording relay read the job's secrets in its capture:$found"
echo "ok: a recording relay sees none of the agent token, the rendezvous token, -x values, argv, output"

# 2. Tampered: refused and named, in time, no crash, nothing left running.
tampered() {  # tampered MODE TEXT WHAT
    local mode=$1 text=$2 what=$3 rc
    run "$mode" --grace 1 bash -c "exec -a $marker-rank bash -c 'seq 1 400000; sleep 20'"
    rc=$(<"$work/rc")
    [[ $rc != 0 ]] || { show; fail "$what: the job succeeded"; }
    [[ $rc != 124 ]] || { show; fail "$what: hvdrun hung (killed after $RUN_TIMEOUT_S s)"; }
    ((rc < 128)) || { show; fail "$what: hvdrun died of a signal ($rc)"; }
    [[ $rc == 74 ]] || { show; fail "$what: expected exit 74 (a host lost: its link), got $rc"; }
    # hvdrun's own error, not only an agent's warning line, names what happened.
    grep -F "error:" "$work/err" | grep -qF -- "$text" ||
        { show; fail "$what: expected an error line with '$text'"; }
    local left=""
    for _ in $(seq 1 50); do
        left=$(pgrep -a -f "^$marker-rank" || true)
        [[ -z $left ]] && break
        sleep 0.1
    done
    [[ -z $left ]] || fail "$what: ranks left after the job: $left"
    echo "ok: $what: exit $rc; hvdrun said:"
    grep -F "error:" "$work/err" | grep -F -- "$text" | head -1 | cut -c1-400 | sed 's/^/    /'
}
tampered to_agent:flip:2 "refused record 2 from the launcher: it was changed on the way" \
    "a bit flipped in a record to an agent"
tampered to_agent:replay:2 "refused record 3 from the launcher: it is record 2 again: a replay" \
    "a record to an agent replayed"
tampered to_launcher:reorder:12 "refused record 12 from the agent on" \
    "two records from an agent swapped"
grep -F "error:" "$work/err" | grep -qF "it is record 13, which was to come later: reordered" ||
    { show; fail "the swap named"; }
tampered to_launcher:flip:12 "refused record 12 from the agent on" \
    "a bit flipped in a record from an agent"
grep -F "error:" "$work/err" | grep -qF "changed on the way" || { show; fail "the flip named"; }
# 3. The exchange itself tampered with, or spoken by another version's agent: the launch is
#    refused before anything of the job is sent, at once (the step ends when its agents give up),
#    exit 127 (a host could not start the job), and hvdrun's error says why.
refused() {  # refused MODE TEXT WHAT
    local mode=$1 text=$2 what=$3 rc
    run "$mode" --log-level debug --start-timeout 20 true
    rc=$(<"$work/rc")
    [[ $rc == 127 ]] || { show; fail "$what: expected exit 127 (the agents could not start), got $rc"; }
    grep "^hvdrun: error:" "$work/err" | grep -qF -- "$text" ||
        { show; fail "$what: expected hvdrun's error to say '$text'"; }
    ! grep -qF "phase: network check" "$work/err" || { show; fail "$what: the job went on"; }
    echo "ok: $what: exit $rc; hvdrun said:"
    grep "^hvdrun: error:" "$work/err" | head -1 | cut -c1-300 | sed 's/^/    /'
}
refused to_agent:flipx:40 "refused the launcher at 127.0.0.1 port" \
    "a bit flipped in the launcher's proof"
refused to_launcher:flipx:20 "refused the launcher at 127.0.0.1 port" \
    "a bit flipped in an agent's public key (the launcher's proof then fails at the agent)"
refused to_launcher:flipx:50 "did not prove the launch's secret, refused" \
    "a bit flipped in an agent's proof"
refused to_launcher:version:2 "it speaks sealed link version 2, this hvdrun version 1" \
    "an agent of another sealed-link version"
refused to_launcher:older:0 "an agent of an older hvdrun, from before the srun link was sealed" \
    "an agent of an older hvdrun (the clear preamble)"

# 4. An agent's recorded exchange sent again on a connection of the relay's own: the launcher
#    answers with a fresh key, the old proof does not match it, the connection is dropped; the
#    job itself runs.
run to_launcher:replayx:0 --log-level debug true
[[ $(<"$work/rc") == 0 ]] || { show; fail "the job beside a replayed exchange: exit $(<"$work/rc")"; }
grep -qF "seal_relay: replayed exchange: launcher closed" "$work/relay/relay.log" ||
    { show; fail "a replayed exchange was not closed by the launcher"; }
! grep -qF "seal_relay: replayed exchange: launcher sent records" "$work/relay/relay.log" ||
    { show; fail "the launcher sent records on a replayed exchange"; }
grep -qF "did not prove the launch's secret: dropped" "$work/err" ||
    { show; fail "the launcher did not say it dropped a replayed exchange at its proof"; }
echo "ok: a replayed exchange is dropped ($(grep -c 'launcher closed' "$work/relay/relay.log") of 3), the job runs"
echo "elapsed: $(echo "$(date +%s.%N) - $start" | bc) s"
