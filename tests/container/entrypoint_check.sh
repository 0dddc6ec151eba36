#!/usr/bin/env bash
# The container's entrypoint (docker/entrypoint.sh) without Docker: CI has no Docker engine, so
# this runs the script itself on this machine, the way the image runs it, with every path in a
# temp dir:
#   - `entrypoint.sh worker` on 127.0.0.200 (not one of the sshd test hosts, 127.0.0.2..65 by
#     default, nor their fake servers' 127.0.1.x) and a free port in 41000-49000 (theirs are
#     20000-40000), keys from HVDRUN_KEYS_DIR;
#   - (1) a real `ssh` logs in with the generated key and accept-new records the host key;
#   - (2) passwords are refused: the server offers publickey only; an unknown key is denied;
#   - (3) `hvdrun -np 2 -H 127.0.0.200:2` runs rank_info on it (two ranks), directly and through
#     `entrypoint.sh launcher` with the client config the launcher mode generates;
#   - (4) bad input (port, no keys, missing keys dir, invalid keys) exits non-zero with a message;
#   - SIGTERM to the entrypoint stops its sshd.
# The sshd it starts is always killed (trap EXIT). ~/.ssh and /etc/ssh are never written; both are
# compared before and after. Works as root (CI) and as a normal user (sshd then logs in only that
# user, which is the user this test logs in as).
#
#   entrypoint_check.sh HVDRUN RANK_INFO
set -euo pipefail

readonly ADDR=127.0.0.200
readonly PORT_MIN=41000 PORT_MAX=49000
readonly START_TIMEOUT_S=20

fail() {
    printf 'FAIL: %s\n' "$1"
    if [ $# -gt 1 ] && [ -s "$2" ]; then
        printf -- '---- %s ----\n' "$2"
        tail -n 40 "$2"
        printf -- '----\n'
    fi
    echo "entrypoint check: FAILED"
    exit 1
}
ok() { printf 'ok   %s\n' "$*"; }

if [ $# -ne 2 ]; then
    echo "usage: entrypoint_check.sh HVDRUN RANK_INFO" >&2
    exit 2
fi
hvdrun=$(readlink -f "$1")
rank_info=$(readlink -f "$2")
entrypoint=$(readlink -f "$(dirname "${BASH_SOURCE[0]}")/../../docker/entrypoint.sh")
[ -x "$hvdrun" ] || fail "hvdrun binary '$1' is not executable"
[ -x "$rank_info" ] || fail "rank_info binary '$2' is not executable"
[ -f "$entrypoint" ] || fail "$entrypoint not found"
[ -x /usr/sbin/sshd ] || fail "/usr/sbin/sshd not found (install openssh-server)"
command -v ssh >/dev/null || fail "ssh not found (install openssh-client)"
user=$(id -un)

# The machine's own ssh set-up, before: it must be identical at the end.
home_ssh=$(getent passwd "$(id -u)" | cut -d: -f6)/.ssh
fingerprint_dirs() {
    local d
    for d in "$home_ssh" /etc/ssh; do
        if [ -e "$d" ]; then
            echo "present $d"
            find "$d" -printf '%y %m %s %p -> %l\n' 2>/dev/null | LC_ALL=C sort
            find "$d" -type f -readable -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 -r sha256sum
        else
            echo "absent $d"
        fi
    done
}
ssh_dirs_before=$(fingerprint_dirs)

tmp=$(mktemp -d /tmp/hvd-entrypoint-check.XXXXXX)
keys=$tmp/keys
state=$tmp/state
ep_pid=''

# Stops the worker entrypoint and whatever sshd it started (by its pid file, only if that pid is
# the sshd running our config), then removes the temp dir (kept when the check failed).
stop_worker() {
    local pid i
    if [ -n "$ep_pid" ] && kill -0 "$ep_pid" 2>/dev/null; then
        kill -TERM "$ep_pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            kill -0 "$ep_pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$ep_pid" 2>/dev/null || true
    fi
    if [ -s "$state/sshd.pid" ]; then
        pid=$(<"$state/sshd.pid")
        if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$state/sshd_config"; then
            kill -TERM "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.1
            done
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
}
cleanup() {
    local rc=$?
    stop_worker
    if [ "$rc" -eq 0 ]; then rm -rf "$tmp"; else echo "(files kept in $tmp)"; fi
}
trap cleanup EXIT

# The entrypoint gets only the HVDRUN_* settings given here (none inherited from the caller, nor
# their deprecated HVD_* names). An array, not a function: a backgrounded function is a subshell,
# and $! would be that subshell.
run_entrypoint=(env -u HVDRUN_SSH_PORT -u HVDRUN_SSH_LISTEN -u HVDRUN_AUTHORIZED_KEYS
    -u HVDRUN_KEYS_DIR -u HVDRUN_STATE_DIR -u HVD_SSH_PORT -u HVD_SSH_LISTEN -u HVD_AUTHORIZED_KEYS
    -u HVD_KEYS_DIR -u HVD_STATE_DIR)

port_free() {
    if command -v ss >/dev/null; then
        [ -z "$(ss -Hltn "sport = :$1")" ]
    else
        if (exec 9<>"/dev/tcp/$ADDR/$1") 2>/dev/null; then return 1; fi
    fi
}
pick_port() {
    local p i
    for ((i = 0; i < 100; i++)); do
        p=$((PORT_MIN + RANDOM % (PORT_MAX - PORT_MIN + 1)))
        if port_free "$p"; then echo "$p"; return 0; fi
    done
    fail "no free TCP port in $PORT_MIN-$PORT_MAX"
}

# True when ADDR:$1 sends an SSH banner (answered with our own, so sshd logs no error).
banner_ok() {
    local fd line=''
    { exec {fd}<>"/dev/tcp/$ADDR/$1"; } 2>/dev/null || return 1
    read -r -t 2 line <&"$fd" || true
    case $line in SSH-*) { printf 'SSH-2.0-hvd_entrypoint_check\r\n' >&"$fd"; } 2>/dev/null ;; esac
    exec {fd}>&-
    case $line in SSH-*) return 0 ;; *) return 1 ;; esac
}

# --- the keys: a client key pair, the public half as the worker's authorized_keys ----------------
mkdir -m 0700 "$keys"
ssh-keygen -q -t ed25519 -N '' -C "hvd-entrypoint-check" -f "$keys/id_ed25519" </dev/null
cp "$keys/id_ed25519.pub" "$keys/authorized_keys"
ssh-keygen -q -t ed25519 -N '' -C "hvd-entrypoint-check-stranger" -f "$tmp/id_stranger" </dev/null
client_fp=$(ssh-keygen -l -f "$keys/id_ed25519.pub" | awk '{print $2}')

# --- start the worker: wait for its banner; retry on another port if this one was taken ----------
# launch_worker PORT ENV...: starts `entrypoint.sh worker` with HVDRUN_STATE_DIR=$state on ADDR:PORT;
# 0 once it answers, 1 when the port was taken; fails the check otherwise.
launch_worker() {
    local p=$1 deadline
    shift
    "${run_entrypoint[@]}" HVDRUN_STATE_DIR="$state" HVDRUN_SSH_LISTEN="$ADDR" HVDRUN_SSH_PORT="$p" "$@" \
        bash "$entrypoint" worker </dev/null >"$tmp/worker.log" 2>&1 &
    ep_pid=$!
    deadline=$((SECONDS + START_TIMEOUT_S))
    while ((SECONDS < deadline)); do
        banner_ok "$p" && return 0
        kill -0 "$ep_pid" 2>/dev/null || break
        sleep 0.1
    done
    if grep -q 'Address already in use\|Cannot bind any address' "$tmp/worker.log"; then
        stop_worker
        return 1
    fi
    fail "the worker did not answer on $ADDR:$p within ${START_TIMEOUT_S}s" "$tmp/worker.log"
}

# stop_worker_checked: SIGTERM to the entrypoint must stop its sshd and exit 0.
stop_worker_checked() {
    local sshd_pid rc=0 i
    sshd_pid=$(<"$state/sshd.pid")
    kill -TERM "$ep_pid"
    for ((i = 0; i < 100; i++)); do
        kill -0 "$ep_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$ep_pid" 2>/dev/null && fail "the entrypoint is still running 10 s after SIGTERM" "$tmp/worker.log"
    wait "$ep_pid" || rc=$?
    [ "$rc" -eq 0 ] || fail "the entrypoint exited $rc after SIGTERM (expected 0)" "$tmp/worker.log"
    for ((i = 0; i < 50; i++)); do
        kill -0 "$sshd_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$sshd_pid" 2>/dev/null && fail "sshd (pid $sshd_pid) still runs after the entrypoint stopped"
    grep -q 'sshd stopped on SIGTERM' "$tmp/worker.log" || fail "no 'sshd stopped' message" "$tmp/worker.log"
    ep_pid=''
}

port=''
up=0
for attempt in 1 2 3; do
    port=$(pick_port)
    rm -rf "$state"
    if launch_worker "$port" HVDRUN_KEYS_DIR="$keys"; then up=1; break; fi
    echo "note: port $port was taken meanwhile (attempt $attempt), trying another one"
done
((up)) || fail "the worker could not bind a port in 3 attempts" "$tmp/worker.log"
ok "worker: entrypoint.sh worker answers with an SSH banner on $ADDR:$port (user $user)"

# What it printed for `docker logs`, and what it generated.
grep -q "on $ADDR port $port" "$tmp/worker.log" || fail "the log does not name $ADDR port $port" "$tmp/worker.log"
grep -qF "$client_fp" "$tmp/worker.log" || fail "the log does not show the client key's fingerprint $client_fp" "$tmp/worker.log"
host_fp=$(ssh-keygen -l -f "$state/ssh_host_ed25519_key.pub" | awk '{print $2}')
grep -qF "$host_fp" "$tmp/worker.log" || fail "the log does not show the host key's fingerprint" "$tmp/worker.log"
ok "log: port, listen address, client and host key fingerprints"
for line in "Port $port" "ListenAddress $ADDR" "PasswordAuthentication no" \
    "KbdInteractiveAuthentication no" "PermitRootLogin prohibit-password" "UsePAM no" \
    "AuthorizedKeysFile $state/authorized_keys" "HostKey $state/ssh_host_ed25519_key" \
    "PidFile $state/sshd.pid" "MaxStartups 1000"; do
    grep -qxF "$line" "$state/sshd_config" || fail "sshd_config lacks '$line'" "$state/sshd_config"
done
ok "sshd_config: key-only settings, files in HVDRUN_STATE_DIR"
[ "$(stat -c %a "$state/authorized_keys")" = 600 ] || fail "authorized_keys is not mode 0600"
"${run_entrypoint[@]}" HVDRUN_STATE_DIR="$state" HVDRUN_SSH_LISTEN="$ADDR" HVDRUN_SSH_PORT="$port" \
    bash "$entrypoint" health >"$tmp/health.log" 2>&1 || fail "entrypoint.sh health failed" "$tmp/health.log"
ok "entrypoint.sh health: 0"

# --- (1) a real ssh login with the key ------------------------------------------------------------
cfg=$tmp/ssh_config
known=$tmp/known_hosts
cat >"$cfg" <<EOF
Host $ADDR
    User $user
    Port $port
    IdentityFile $keys/id_ed25519
    IdentitiesOnly yes
    IdentityAgent none
    UserKnownHostsFile $known
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking accept-new
    UpdateHostKeys no
    CheckHostIP no
    BatchMode yes
    ConnectTimeout 10
    LogLevel ERROR
EOF
out=$(ssh -F "$cfg" -p "$port" "$user@$ADDR" 'id -un' 2>"$tmp/ssh1.err") ||
    fail "ssh -F $cfg -p $port $user@$ADDR failed: $(<"$tmp/ssh1.err") (sshd's reason is in its log)" "$tmp/worker.log"
[ "$out" = "$user" ] || fail "ssh logged in as '$out', expected '$user'"
ssh -F "$cfg" -p "$port" "$user@$ADDR" true 2>"$tmp/ssh1.err" ||
    fail "ssh ... true failed: $(<"$tmp/ssh1.err")" "$tmp/worker.log"
grep -qF "[$ADDR]:$port $(cut -d' ' -f1-2 "$state/ssh_host_ed25519_key.pub")" "$known" ||
    fail "accept-new did not record the worker's host key in $known" "$known"
ok "(1) ssh $user@$ADDR -p $port with the key: logged in; host key recorded (accept-new)"

# --- (2) passwords refused; unknown keys denied ---------------------------------------------------
if ssh -F "$cfg" -p "$port" -o PreferredAuthentications=password -o PubkeyAuthentication=no \
    -o BatchMode=yes "$user@$ADDR" true 2>"$tmp/ssh2.err"; then
    fail "a password-only login succeeded"
fi
# The methods the server offers are in the message; password or keyboard-interactive must not be.
grep -q 'Permission denied (publickey)' "$tmp/ssh2.err" ||
    fail "password login: expected 'Permission denied (publickey)' (publickey the only method)" "$tmp/ssh2.err"
ok "(2) password login refused; the server offers publickey only"
sed "s|$keys/id_ed25519|$tmp/id_stranger|" "$cfg" >"$tmp/ssh_config_stranger"
if ssh -F "$tmp/ssh_config_stranger" -p "$port" "$user@$ADDR" true 2>"$tmp/ssh2b.err"; then
    fail "a key that is not in authorized_keys logged in"
fi
grep -q 'Permission denied' "$tmp/ssh2b.err" || fail "unknown key: expected 'Permission denied'" "$tmp/ssh2b.err"
ok "(2) a key not in authorized_keys is denied"

# --- (3) hvdrun: two ranks on the worker ----------------------------------------------------------
check_two_ranks() {  # check_two_ranks LOG WHAT
    grep -q '^\[1,0\]<stdout>:rank 0 of 2' "$1" || fail "$2: no rank 0 of 2" "$1"
    grep -q '^\[1,1\]<stdout>:rank 1 of 2' "$1" || fail "$2: no rank 1 of 2" "$1"
}
"$hvdrun" -np 2 -H "$ADDR:2" -p "$port" --ssh-config "$cfg" --ssh-known-hosts "$known" \
    "$rank_info" >"$tmp/hvdrun.log" 2>&1 || fail "hvdrun -np 2 -H $ADDR:2 -p $port failed" "$tmp/hvdrun.log"
check_two_ranks "$tmp/hvdrun.log" "hvdrun"
ok "(3) hvdrun -np 2 -H $ADDR:2 -p $port --ssh-config --ssh-known-hosts rank_info: 2 ranks"

# The launcher mode: copies the key (mode 0600) and writes a client config (port, key, accept-new
# into its own known_hosts); hvdrun gets no -p, -i or known-hosts flag, only that config.
lstate=$tmp/launcher
"${run_entrypoint[@]}" HVDRUN_STATE_DIR="$lstate" HVDRUN_KEYS_DIR="$keys" HVDRUN_SSH_PORT="$port" \
    bash "$entrypoint" launcher "$hvdrun" -np 2 -H "$user@$ADDR:2" --ssh-config "$lstate/ssh_config" \
    "$rank_info" >"$tmp/launcher.log" 2>&1 || fail "entrypoint.sh launcher hvdrun ... failed" "$tmp/launcher.log"
check_two_ranks "$tmp/launcher.log" "entrypoint.sh launcher hvdrun"
[ "$(stat -c %a "$lstate/id_ed25519")" = 600 ] || fail "the launcher's key copy is not mode 0600"
grep -qF "[$ADDR]:$port" "$lstate/known_hosts" || fail "the launcher did not record the host key" "$lstate/known_hosts"
grep -qF "$client_fp" "$tmp/launcher.log" || fail "the launcher log does not show the key fingerprint" "$tmp/launcher.log"
# shellcheck disable=SC2016  # expanded by the inner sh, in the launcher's environment
out=$("${run_entrypoint[@]}" HVDRUN_STATE_DIR="$lstate" HVDRUN_KEYS_DIR="$keys" bash "$entrypoint" \
    sh -c 'echo "$HVDRUN_SSH_CONFIG $HVDRUN_SSH_IDENTITY"' 2>/dev/null) || fail "entrypoint.sh CMD (no 'launcher') failed"
[ "$out" = "$lstate/ssh_config $lstate/id_ed25519" ] || fail "entrypoint.sh CMD: got '$out'"
ok "(3) entrypoint.sh launcher hvdrun ... with the generated client config: 2 ranks"

# --- (4) bad input: non-zero exit and a message saying what to fix --------------------------------
bad_port=$(pick_port)
expect_refusal() {  # expect_refusal WHAT PATTERN ENV...
    local what=$1 pattern=$2 rc=0 log=$tmp/bad.log
    shift 2
    rm -rf "$tmp/bad-state"
    "${run_entrypoint[@]}" HVDRUN_STATE_DIR="$tmp/bad-state" HVDRUN_SSH_LISTEN="$ADDR" "$@" \
        timeout 10 bash "$entrypoint" worker </dev/null >"$log" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || fail "$what: the worker started (exit 0)" "$log"
    [ "$rc" -ne 124 ] || fail "$what: the worker started and ran until killed" "$log"
    grep -q -- "$pattern" "$log" || fail "$what: exit $rc but no message matching '$pattern'" "$log"
    ok "(4) $what: exit $rc, $(grep -m1 -o 'error: .*' "$log" | cut -c1-90)..."
}
for p in abc 0 65536 -1 99999999; do
    expect_refusal "HVDRUN_SSH_PORT=$p" "HVDRUN_SSH_PORT must be a TCP port number 1-65535, got '$p'" \
        HVDRUN_SSH_PORT="$p" HVDRUN_KEYS_DIR="$keys"
done
expect_refusal "no keys at all" "no public keys: set HVDRUN_AUTHORIZED_KEYS.*HVDRUN_KEYS_DIR" \
    HVDRUN_SSH_PORT="$bad_port"
mkdir "$tmp/empty-keys"
expect_refusal "HVDRUN_KEYS_DIR without authorized_keys" "no public keys: $tmp/empty-keys has no authorized_keys" \
    HVDRUN_SSH_PORT="$bad_port" HVDRUN_KEYS_DIR="$tmp/empty-keys"
expect_refusal "HVDRUN_KEYS_DIR missing" "HVDRUN_KEYS_DIR=$tmp/nonexistent does not exist" \
    HVDRUN_SSH_PORT="$bad_port" HVDRUN_KEYS_DIR="$tmp/nonexistent"
expect_refusal "HVDRUN_KEYS_DIR a file" "HVDRUN_KEYS_DIR=$keys/id_ed25519.pub is not a directory" \
    HVDRUN_SSH_PORT="$bad_port" HVDRUN_KEYS_DIR="$keys/id_ed25519.pub"
expect_refusal "HVDRUN_AUTHORIZED_KEYS not a key" "no valid public key in HVDRUN_AUTHORIZED_KEYS" \
    HVDRUN_SSH_PORT="$bad_port" HVDRUN_AUTHORIZED_KEYS="hunter2"
# The old names (HVD_*, now hvdrun's internal prefix) are still read, with a notice; a new name
# wins over its old one.
expect_refusal "the deprecated HVD_SSH_PORT" "HVD_SSH_PORT is deprecated: use HVDRUN_SSH_PORT" \
    HVD_SSH_PORT=abc HVDRUN_KEYS_DIR="$keys"
grep -q "HVDRUN_SSH_PORT must be a TCP port number 1-65535, got 'abc'" "$tmp/bad.log" ||
    fail "the deprecated HVD_SSH_PORT's value was not used" "$tmp/bad.log"
expect_refusal "HVDRUN_SSH_PORT over HVD_SSH_PORT" "HVD_SSH_PORT is ignored: HVDRUN_SSH_PORT is set" \
    HVD_SSH_PORT=2222 HVDRUN_SSH_PORT=abc HVDRUN_KEYS_DIR="$keys"
grep -q "got 'abc'" "$tmp/bad.log" || fail "HVDRUN_SSH_PORT did not win" "$tmp/bad.log"
[ ! -e "$tmp/bad-state/sshd_config" ] || fail "a refused worker still wrote an sshd_config"

# --- stop: SIGTERM to the entrypoint stops its sshd -----------------------------------------------
stop_worker_checked
if "${run_entrypoint[@]}" HVDRUN_STATE_DIR="$state" HVDRUN_SSH_PORT="$port" bash "$entrypoint" health \
    >"$tmp/health.log" 2>&1; then
    fail "entrypoint.sh health says healthy after sshd stopped" "$tmp/health.log"
fi
ok "SIGTERM to the entrypoint: sshd stopped, exit 0; health now fails"

# --- restart with the key from HVDRUN_AUTHORIZED_KEYS only: same host key, so known_hosts still fits --
launch_worker "$port" HVDRUN_AUTHORIZED_KEYS="$(<"$keys/id_ed25519.pub")" ||
    fail "the restarted worker could not bind port $port again" "$tmp/worker.log"
grep -q 'authorized keys from HVDRUN_AUTHORIZED_KEYS (1)' "$tmp/worker.log" ||
    fail "the restarted worker did not take the key from HVDRUN_AUTHORIZED_KEYS" "$tmp/worker.log"
ssh -F "$cfg" -o StrictHostKeyChecking=yes "$user@$ADDR" true 2>"$tmp/ssh3.err" ||
    fail "ssh after a restart (host key must be kept; key from HVDRUN_AUTHORIZED_KEYS): $(<"$tmp/ssh3.err")" "$tmp/worker.log"
stop_worker_checked
ok "restart: host key kept, HVDRUN_AUTHORIZED_KEYS alone lets the key in; stopped again"

if command -v shellcheck >/dev/null; then
    shellcheck "$entrypoint" >"$tmp/shellcheck.log" 2>&1 || fail "shellcheck docker/entrypoint.sh" "$tmp/shellcheck.log"
    ok "shellcheck docker/entrypoint.sh: clean"
fi

[ "$(fingerprint_dirs)" = "$ssh_dirs_before" ] || fail "$home_ssh or /etc/ssh changed during the check"
ok "$home_ssh and /etc/ssh unchanged"
echo "entrypoint check: OK"
