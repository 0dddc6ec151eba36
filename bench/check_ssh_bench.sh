#!/usr/bin/env bash
# hvdrun --check-ssh over the 64 sshd test hosts against the floor: plain OpenSSH `ssh hN true`
# to the same hosts, all in parallel. Both are measured in this one run, ROUNDS rounds each,
# alternating; prints the medians and the ratio (the goal: at most 1.5x).
#
#   bench/check_ssh_bench.sh [DIR [ROUNDS]]
#
# DIR: a running sshd fixture (tests/sshd/sshd_hosts.sh start DIR 64). Without it, the script
# starts one in a temporary directory and stops it at the end. HVDRUN: the binary (default
# build/cli/hvdrun). Exit status: 0 when both sides ran cleanly (whatever the ratio), 1 when an
# ssh or hvdrun round failed, 2 on bad usage or set-up.
set -euo pipefail
LC_ALL=C  # EPOCHREALTIME and printf use the locale's decimal point

readonly HOSTS=64
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hvdrun=${HVDRUN:-$root/build/cli/hvdrun}
dir=${1:-}
rounds=${2:-3}

die() { printf 'check_ssh_bench.sh: error: %s\n' "$*" >&2; exit 2; }

[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number, got '$rounds'"
[[ -x $hvdrun ]] || die "$hvdrun is not executable (build first, or set HVDRUN)"

tmp=$(mktemp -d)
started=0
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
    if ((started)); then
        bash "$root/tests/sshd/sshd_hosts.sh" stop "$dir" >/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -z $dir ]]; then
    dir=$tmp/sshd
    # This script owns the hosts: they go when it exits, even if it is killed.
    HVDTEST_SSHD_OWNER_PID=$$ bash "$root/tests/sshd/sshd_hosts.sh" start "$dir" "$HOSTS" >&2
    started=1
fi
[[ -r $dir/hosts.env ]] || die "$dir/hosts.env not found (tests/sshd/sshd_hosts.sh start $dir $HOSTS)"
# shellcheck source=/dev/null
. "$dir/hosts.env"
((HVDTEST_SSH_COUNT >= HOSTS)) || die "$dir has $HVDTEST_SSH_COUNT hosts, the benchmark needs $HOSTS"
IFS=, read -r -a addrs <<<"$HVDTEST_SSH_ADDRS"
host_list=$(IFS=,; echo "${addrs[*]:0:HOSTS}")
cp "$HVDTEST_SSH_KNOWN_HOSTS" "$tmp/known_hosts"   # hvdrun may write to its file: not the fixture's

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# One round of the floor: every host at once, like fanout_check.sh; prints the wall time.
ssh_round() {
    local i start failed=0
    local -a pids=()
    start=$(now)
    for ((i = 1; i <= HOSTS; i++)); do
        timeout 120 ssh -n -F "$HVDTEST_SSH_CONFIG" "h$i" true >/dev/null 2>"$tmp/ssh.$i.err" &
        pids[i]=$!
    done
    for ((i = 1; i <= HOSTS; i++)); do
        wait "${pids[i]}" || { failed=$((failed + 1)); sed "s/^/  h$i: /" "$tmp/ssh.$i.err" >&2; }
    done
    since "$start"
    ((failed == 0)) || { echo "ssh round: $failed of $HOSTS sessions failed" >&2; return 1; }
}

# One hvdrun --check-ssh over the same hosts; prints the wall time.
hvdrun_round() {
    local start rc=0
    start=$(now)
    "$hvdrun" --check-ssh --json -H "$host_list" -p "$HVDTEST_SSH_PORT" \
        --ssh-config "$HVDTEST_SSH_CONFIG" --ssh-known-hosts "$tmp/known_hosts" \
        -i "$HVDTEST_SSH_KEY" </dev/null >"$tmp/check.json" 2>"$tmp/check.err" || rc=$?
    since "$start"
    if ((rc != 0)); then
        echo "hvdrun --check-ssh exited $rc; stderr:" >&2
        tail -n 20 "$tmp/check.err" >&2
        return 1
    fi
}

if ! "$hvdrun" --help 2>/dev/null | grep -q -- '--check-ssh'; then
    echo "check_ssh_bench.sh: $hvdrun has no --check-ssh yet; measuring the ssh floor only" >&2
    hvdrun_ok=0
else
    hvdrun_ok=1
fi

echo "check_ssh_bench: $HOSTS hosts, $rounds rounds each, $(nproc) cores, $(ssh -V 2>&1)"
failed=0
ssh_times=()
hvd_times=()
for ((r = 1; r <= rounds; r++)); do
    t=$(ssh_round) || failed=1
    ssh_times+=("$t")
    line="round $r: ssh ${t}s"
    if ((hvdrun_ok)); then
        t=$(hvdrun_round) || failed=1
        hvd_times+=("$t")
        line+="  hvdrun --check-ssh ${t}s"
    fi
    echo "$line"
done

ssh_median=$(median "${ssh_times[@]}")
printf 'median: plain ssh (64 in parallel) %ss\n' "$ssh_median"
if ((hvdrun_ok)); then
    hvd_median=$(median "${hvd_times[@]}")
    ratio=$(awk -v a="$hvd_median" -v b="$ssh_median" 'BEGIN { printf "%.2f", a / b }')
    verdict=$(awk -v r="$ratio" 'BEGIN { print (r <= 1.5 ? "goal met" : "goal missed") }')
    printf 'median: hvdrun --check-ssh %ss\n' "$hvd_median"
    printf 'ratio hvdrun/ssh: %sx (goal: at most 1.5x; %s)\n' "$ratio" "$verdict"
fi
exit "$failed"
