#!/usr/bin/env bash
# Checks the sshd test hosts end to end with the plain OpenSSH client: every round runs
# `ssh -F DIR/ssh_config hN true` on COUNT hosts (default: all) in parallel.
# Round 1 runs `echo $SSH_CONNECTION` instead and checks that the server address seen by the remote
# shell is that host's own 127.0.0.X (a real session on the right address, not a local shortcut).
#
#   fanout_check.sh DIR ROUNDS [COUNT]
set -euo pipefail
LC_ALL=C  # EPOCHREALTIME and printf use the locale's decimal point

die() { printf 'fanout_check.sh: error: %s\n' "$*" >&2; exit 1; }

(($# == 2 || $# == 3)) || die "usage: fanout_check.sh DIR ROUNDS [COUNT]"
dir=$1
rounds=$2
[[ -r $dir/hosts.env ]] || die "$dir/hosts.env not found (run sshd_hosts.sh start first)"
# shellcheck source=/dev/null
. "$dir/hosts.env"
count=${3:-$HVDTEST_SSH_COUNT}
[[ $rounds =~ ^[0-9]+$ ]] || die "ROUNDS must be a number, got '$rounds'"
if ! [[ $count =~ ^[0-9]+$ ]] || ((count < 1 || count > HVDTEST_SSH_COUNT)); then
    die "COUNT must be 1-$HVDTEST_SSH_COUNT, got '$count'"
fi
IFS=, read -r -a addrs <<<"$HVDTEST_SSH_ADDRS"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

total_failed=0
for ((r = 1; r <= rounds; r++)); do
    start=$EPOCHREALTIME
    pids=()
    for ((i = 1; i <= count; i++)); do
        # shellcheck disable=SC2016  # $SSH_CONNECTION is expanded by the remote shell
        if ((r == 1)); then cmd='echo $SSH_CONNECTION'; else cmd=true; fi
        # -n and the timeout: a background ssh must not read our stdin, nor hang the test forever.
        timeout 120 ssh -n -F "$HVDTEST_SSH_CONFIG" "h$i" "$cmd" >"$tmp/out.$i" 2>"$tmp/err.$i" &
        pids[i]=$!
    done
    failed=0
    for ((i = 1; i <= count; i++)); do
        rc=0
        wait "${pids[i]}" || rc=$?
        why=
        if ((rc != 0)); then
            why="ssh exit status $rc"
        elif ((r == 1)); then
            # SSH_CONNECTION = client-address client-port server-address server-port
            read -r _ _ server _ <"$tmp/out.$i" || true
            if [[ ${server:-} != "${addrs[i - 1]}" ]]; then
                why="SSH_CONNECTION is '$(<"$tmp/out.$i")', expected server address ${addrs[i - 1]}"
            fi
        fi
        if [[ -n $why ]]; then
            failed=$((failed + 1))
            printf 'round %d: h%d (%s) failed: %s\n' "$r" "$i" "${addrs[i - 1]}" "$why" >&2
            sed 's/^/    ssh stderr: /' "$tmp/err.$i" >&2
        fi
    done
    elapsed=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
    printf 'round %d: %d/%d ok in %ss\n' "$r" "$((count - failed))" "$count" "$elapsed"
    total_failed=$((total_failed + failed))
done

if ((total_failed > 0)); then
    die "$total_failed ssh sessions failed"
fi
