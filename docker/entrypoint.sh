#!/usr/bin/env bash
# The hvdrun container's entrypoint (docs/container.md). Runs as well outside a container: the
# tests run it directly (tests/container/entrypoint_check.sh) with HVDRUN_STATE_DIR in a temp dir.
#
#   entrypoint.sh worker                     sshd on HVDRUN_SSH_PORT, key-only, in the foreground
#   entrypoint.sh launcher [CMD [ARGS...]]   set up the client key (if given), then run CMD
#   entrypoint.sh CMD [ARGS...]              the same as `launcher CMD ARGS...`
#   entrypoint.sh health                     exit 0 when this container's worker sshd listens
#
# Settings (environment):
#   HVDRUN_SSH_PORT         sshd port (default 12345)
#   HVDRUN_SSH_LISTEN       sshd listen address (default 0.0.0.0)
#   HVDRUN_AUTHORIZED_KEYS  public keys, authorized_keys text (one key per line)
#   HVDRUN_KEYS_DIR         a mounted directory: authorized_keys (worker) and id_ed25519, id_ecdsa
#                        or id_rsa (launcher's client key)
#   HVDRUN_STATE_DIR        generated sshd_config, host key, authorized_keys, client config
#                        (default /etc/hvd-sshd)
#
# The same names with the prefix HVD_ instead of HVDRUN_ are still read, with a deprecation notice
# (HVD_* is reserved for hvdrun's launcher-to-rank internals); an HVDRUN_ name wins over its old
# one. A worker needs at least one public key: no password is ever set or accepted. Nothing
# outside HVDRUN_STATE_DIR is written, except /run/sshd (root's sshd needs it). Messages go to
# stderr.
set -euo pipefail

readonly PROG=hvd-entrypoint
readonly SSHD=/usr/sbin/sshd   # absolute: sshd re-executes itself for every connection
readonly EX_USAGE=64 EX_CONFIG=78
readonly CLIENT_KEY_NAMES="id_ed25519 id_ecdsa id_rsa"

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }

# setting NAME DEFAULT: HVDRUN_NAME if set, else the deprecated HVD_NAME (with a notice), else
# DEFAULT. An empty value counts as unset, as before.
setting() {
    local new=HVDRUN_$1 old=HVD_$1
    if [ -n "${!new:-}" ]; then
        if [ -n "${!old:-}" ]; then say "warning: $old is ignored: $new is set"; fi
        printf '%s' "${!new}"
    elif [ -n "${!old:-}" ]; then
        say "warning: $old is deprecated: use $new (HVD_* is reserved for hvdrun's internals)"
        printf '%s' "${!old}"
    else
        printf '%s' "$2"
    fi
}

port=$(setting SSH_PORT 12345)
listen=$(setting SSH_LISTEN 0.0.0.0)
state=$(setting STATE_DIR /etc/hvd-sshd)
keys_dir=$(setting KEYS_DIR '')
keys_text=$(setting AUTHORIZED_KEYS '')
die() { printf '%s: error: %s\n' "$PROG" "$1" >&2; exit "${2:-$EX_CONFIG}"; }

usage() {
    cat >&2 <<'EOF'
usage: entrypoint.sh worker                     start sshd (key-only) in the foreground
       entrypoint.sh launcher [CMD [ARGS...]]   run CMD (default: bash) with the client key set up
       entrypoint.sh CMD [ARGS...]              the same as: launcher CMD [ARGS...]
       entrypoint.sh health                     exit 0 when this container's sshd listens
Settings: HVDRUN_SSH_PORT (12345), HVDRUN_SSH_LISTEN (0.0.0.0), HVDRUN_AUTHORIZED_KEYS (public keys),
HVDRUN_KEYS_DIR (dir with authorized_keys and/or id_ed25519), HVDRUN_STATE_DIR (/etc/hvd-sshd).
See docs/container.md.
EOF
}

# --- validation ----------------------------------------------------------------------------------

check_port() {
    case $port in
    '' | *[!0-9]* | 0*) die "HVDRUN_SSH_PORT must be a TCP port number 1-65535, got '$port'" ;;
    esac
    if [ "${#port}" -gt 5 ] || [ "$port" -gt 65535 ]; then
        die "HVDRUN_SSH_PORT must be a TCP port number 1-65535, got '$port'"
    fi
}

check_listen() {
    case $listen in
    '' | *[!A-Za-z0-9.:_-]*)
        die "HVDRUN_SSH_LISTEN must be one address or host name (e.g. 0.0.0.0, ::, 10.0.0.5), got '$listen'" ;;
    esac
}

# The path goes into sshd_config and ssh_config, where whitespace splits words and '%' is a token.
check_state_dir() {
    case $state in
    /*) ;;
    *) die "HVDRUN_STATE_DIR must be an absolute path, got '$state'" ;;
    esac
    case $state in
    *[!A-Za-z0-9._/+@=,:-]*)
        die "HVDRUN_STATE_DIR '$state' has characters ssh config files cannot carry unquoted (use [A-Za-z0-9._/+@=,:-])" ;;
    esac
}

check_keys_dir() {
    [ -n "$keys_dir" ] || return 0
    [ -e "$keys_dir" ] || die "HVDRUN_KEYS_DIR=$keys_dir does not exist (is the volume mounted? e.g. -v \"\$PWD/keys:/keys:ro\")"
    [ -d "$keys_dir" ] || die "HVDRUN_KEYS_DIR=$keys_dir is not a directory"
    if [ ! -r "$keys_dir" ] || [ ! -x "$keys_dir" ]; then
        die "HVDRUN_KEYS_DIR=$keys_dir is not readable by $(id -un) (uid $(id -u)); check its mode and owner"
    fi
}

prepare_state_dir() {
    check_state_dir
    if ! (umask 077 && mkdir -p "$state") 2>/dev/null || [ ! -d "$state" ]; then
        die "cannot create HVDRUN_STATE_DIR=$state"
    fi
    [ -w "$state" ] || die "HVDRUN_STATE_DIR=$state is not writable by $(id -un)"
}

# --- keys ----------------------------------------------------------------------------------------

# Prints the fingerprint of each key in FILE on stderr, indented; returns 1 when it has none.
print_fingerprints() {
    local out line
    out=$(ssh-keygen -l -f "$1" 2>/dev/null) || return 1
    [ -n "$out" ] || return 1
    while IFS= read -r line; do
        printf '%s:   %s\n' "$PROG" "$line" >&2
    done <<EOF
$out
EOF
}

# A hint for those who mounted keys at ~/.ssh (as many Horovod-in-Docker guides do): sshd here
# reads only HVDRUN_STATE_DIR/authorized_keys.
home_keys_hint() {
    local home
    home=$(getent passwd "$(id -u)" | cut -d: -f6) || return 0
    if [ -n "$home" ] && [ -s "$home/.ssh/authorized_keys" ]; then
        printf '. Note: %s/.ssh/authorized_keys is not used by this sshd; to use it, set HVDRUN_KEYS_DIR=%s/.ssh' "$home" "$home"
    fi
}

# Writes STATE/authorized_keys from HVDRUN_AUTHORIZED_KEYS and HVDRUN_KEYS_DIR/authorized_keys.
# A worker without any valid key is refused: nobody could log in, and no password ever works.
install_authorized_keys() {
    local new=$state/authorized_keys.new sources='' src_file n_lines n_keys
    (umask 077 && : >"$new")
    if [ -n "$keys_text" ]; then
        printf '%s\n' "$keys_text" >>"$new"
        sources="HVDRUN_AUTHORIZED_KEYS"
    fi
    if [ -n "$keys_dir" ]; then
        src_file=$keys_dir/authorized_keys
        if [ -e "$src_file" ]; then
            if [ ! -f "$src_file" ] || [ ! -r "$src_file" ]; then
                rm -f "$new"
                die "$src_file is not a readable file"
            fi
            cat "$src_file" >>"$new"
            printf '\n' >>"$new"
            sources="${sources:+$sources and }$src_file"
        fi
    fi
    if [ -z "$sources" ]; then
        rm -f "$new"
        if [ -n "$keys_dir" ]; then
            die "no public keys: $keys_dir has no authorized_keys and HVDRUN_AUTHORIZED_KEYS is empty; a worker nobody can log into is refused. Put the launcher's public key in $keys_dir/authorized_keys (e.g. cp keys/id_ed25519.pub keys/authorized_keys) or set HVDRUN_AUTHORIZED_KEYS to it"
        fi
        die "no public keys: set HVDRUN_AUTHORIZED_KEYS to the launcher's public key (authorized_keys lines), or mount a directory with an authorized_keys file and set HVDRUN_KEYS_DIR to it; a worker nobody can log into is refused (passwords are never accepted)$(home_keys_hint)"
    fi
    # Lines that are neither blank nor comments, and how many of them ssh-keygen reads as keys.
    n_lines=$(grep -cEv '^[[:space:]]*(#|$)' "$new" || true)
    n_keys=$(ssh-keygen -l -f "$new" 2>/dev/null | grep -c . || true)
    if [ "$n_keys" -eq 0 ]; then
        rm -f "$new"
        die "no valid public key in $sources (expected lines like 'ssh-ed25519 AAAA... comment'); a worker nobody can log into is refused"
    fi
    mv -f "$new" "$state/authorized_keys"
    say "authorized keys from $sources ($n_keys):"
    print_fingerprints "$state/authorized_keys" || true
    if [ "$n_lines" -gt "$n_keys" ]; then
        say "warning: $((n_lines - n_keys)) line(s) in $sources are not valid public keys and are ignored by sshd"
    fi
}

ensure_host_key() {
    local key=$state/ssh_host_ed25519_key
    if [ ! -s "$key" ]; then
        rm -f "$key" "$key.pub"
        ssh-keygen -q -t ed25519 -N '' -C "hvd-worker@$(hostname 2>/dev/null || echo host)" \
            -f "$key" </dev/null || die "ssh-keygen could not create $key"
        say "generated host key $key"
    fi
    if [ ! -s "$key.pub" ]; then
        ssh-keygen -y -f "$key" >"$key.pub" || die "cannot read host key $key"
    fi
    say "host key (check it in the launcher's known_hosts):"
    print_fingerprints "$key.pub" || die "host key $key.pub is not a public key"
}

# --- sshd ----------------------------------------------------------------------------------------

# The first directory from $1 up to / that sshd's StrictModes would reject (owned by another user,
# or group/world-writable, like /tmp), or nothing.
strict_modes_blocker() {
    local d=$1 uid owner mode
    uid=$(id -u)
    while :; do
        owner=$(stat -c %u "$d") || return 0
        mode=$(stat -c %a "$d") || return 0
        if { [ "$owner" != 0 ] && [ "$owner" != "$uid" ]; } || [ $((0$mode & 022)) -ne 0 ]; then
            printf '%s' "$d"
            return 0
        fi
        [ "$d" = / ] && return 0
        d=$(dirname "$d")
    done
}

write_sshd_config() {
    local config=$1 user blocker
    user=$(id -un)
    blocker=$(strict_modes_blocker "$state")
    {
        echo "# generated by $PROG at $(date -u '+%F %T') UTC; rewritten at every start"
        echo "Port $port"
        echo "ListenAddress $listen"
        echo "HostKey $state/ssh_host_ed25519_key"
        echo "AuthorizedKeysFile $state/authorized_keys"
        echo "PidFile $state/sshd.pid"
        echo "# Keys only: no password is set for any account, and none would be accepted."
        echo "PubkeyAuthentication yes"
        echo "PasswordAuthentication no"
        echo "KbdInteractiveAuthentication no"
        echo "PermitEmptyPasswords no"
        echo "PermitRootLogin prohibit-password"
        echo "AllowUsers $user"
        echo "# No PAM: no session modules (pam_loginuid fails in containers), no password prompts."
        echo "UsePAM no"
        echo "# The defaults (MaxStartups 10:30:100, MaxSessions 10) drop connections when a launcher"
        echo "# (or mpirun) opens many at once: it looks like random \"Exceeded MaxStartups\" failures."
        echo "MaxStartups 1000"
        echo "MaxSessions 200"
        if [ -n "$blocker" ]; then
            echo "# StrictModes no: HVDRUN_STATE_DIR=$state lies under $blocker, which is owned by"
            echo "# another user or group/world-writable (a temp dir); StrictModes would reject the"
            echo "# authorized_keys there. The files themselves are written mode 0600 by $PROG."
            echo "StrictModes no"
        fi
        echo "UseDNS no"
        echo "X11Forwarding no"
        echo "PrintMotd no"
        echo "PrintLastLog no"
        if [ -x /usr/lib/openssh/sftp-server ]; then
            echo "Subsystem sftp /usr/lib/openssh/sftp-server"
        fi
    } >"$config"
}

# Without PAM, sshd refuses an account whose password field starts with '!' (locked): say so
# before anyone wonders why the key is "denied". ('*' is fine: no password, not locked.)
check_account_not_locked() {
    local user=$1 pw
    pw=$(getent shadow "$user" 2>/dev/null | cut -d: -f2) || return 0
    case $pw in
    '!'*) die "the account '$user' is locked (its password field starts with '!'); sshd without PAM refuses locked accounts even with a valid key. Unlock it without setting a password: usermod -p '*' $user" ;;
    esac
}

sshd_pid=''
stop_signal=''
forward_signal() {
    stop_signal=$1
    [ -z "$sshd_pid" ] || kill "-$1" "$sshd_pid" 2>/dev/null || true
}

run_worker() {
    local config err rc
    [ -x "$SSHD" ] || die "$SSHD not found (install openssh-server)"
    command -v ssh-keygen >/dev/null || die "ssh-keygen not found (install openssh-client)"
    check_port
    check_listen
    check_keys_dir
    prepare_state_dir
    install_authorized_keys
    check_account_not_locked "$(id -un)"
    ensure_host_key
    config=$state/sshd_config
    write_sshd_config "$config"
    # Root's sshd refuses to start without its privilege separation directory.
    if [ "$(id -u)" -eq 0 ] && [ ! -d /run/sshd ]; then
        mkdir -m 0755 /run/sshd || die "cannot create /run/sshd"
    fi
    err=$("$SSHD" -t -f "$config" 2>&1) || die "sshd rejected $config: $err"
    [ -z "$err" ] || say "sshd -t: $err"

    say "worker: sshd for user $(id -un) on $listen port $port, keys only (state in $state)"
    say "starting: $SSHD -D -e -f $config"
    trap 'forward_signal TERM' TERM
    trap 'forward_signal INT' INT
    trap 'forward_signal HUP' HUP
    rm -f "$state/sshd.pid"   # a previous run's: `health` must not trust it
    "$SSHD" -D -e -f "$config" </dev/null &
    sshd_pid=$!
    # `wait` returns early when a trapped signal arrives: wait again until sshd is really gone.
    while :; do
        rc=0
        wait "$sshd_pid" || rc=$?
        if [ "$rc" -gt 128 ] && kill -0 "$sshd_pid" 2>/dev/null; then
            continue
        fi
        break
    done
    if [ -n "$stop_signal" ] && [ "$stop_signal" != HUP ]; then
        say "sshd stopped on SIG$stop_signal"
        exit 0
    fi
    say "sshd exited with code $rc (see its messages above)"
    exit "$rc"
}

# --- launcher ------------------------------------------------------------------------------------

write_client_config() {
    local config=$1 identity=$2
    {
        echo "# generated by $PROG (launcher); ssh -F $config, hvdrun --ssh-config $config"
        echo "Host *"
        echo "    Port $port"
        if [ -n "$identity" ]; then
            echo "    IdentityFile $identity"
            echo "    IdentitiesOnly yes"
        fi
        echo "    UserKnownHostsFile $state/known_hosts"
        echo "    StrictHostKeyChecking accept-new"
        echo "    BatchMode yes"
    } >"$config"
}

run_launcher() {
    local name src identity='' config
    check_port
    check_keys_dir
    prepare_state_dir
    if [ -n "$keys_dir" ]; then
        for name in $CLIENT_KEY_NAMES; do
            src=$keys_dir/$name
            [ -e "$src" ] || continue
            if [ ! -f "$src" ] || [ ! -r "$src" ]; then die "$src is not a readable file"; fi
            # A private copy with mode 0600: OpenSSH refuses keys others can read, and mounted
            # files often have the host's modes and owner.
            identity=$state/$name
            rm -f "$identity"
            (umask 077 && cp "$src" "$identity") || die "cannot copy $src to $identity"
            if ! ssh-keygen -y -P '' -f "$identity" >/dev/null 2>&1; then
                rm -f "$identity"
                die "$src is not a private key without a passphrase (hvdrun and batch-mode ssh never prompt; use a key made with ssh-keygen -N '')"
            fi
            say "launcher: client key $src (copied to $identity):"
            print_fingerprints "$identity" || true
            break
        done
        [ -n "$identity" ] || say "launcher: no client key (id_ed25519, id_ecdsa, id_rsa) in $keys_dir"
    fi
    config=$state/ssh_config
    write_client_config "$config" "$identity"
    export HVDRUN_SSH_CONFIG=$config HVDRUN_SSH_KNOWN_HOSTS=$state/known_hosts
    if [ -n "$identity" ]; then export HVDRUN_SSH_IDENTITY=$identity; fi
    # The old names too, for scripts written against them (deprecated; docs/container.md).
    export HVD_SSH_CONFIG=$config HVD_SSH_KNOWN_HOSTS=$state/known_hosts
    if [ -n "$identity" ]; then export HVD_SSH_IDENTITY=$identity; fi
    say "launcher: ssh client config $config (port $port, known hosts $state/known_hosts, accept-new)"
    if [ $# -eq 0 ]; then set -- bash; fi
    say "launcher: running: $*"
    exec "$@"
}

# --- health --------------------------------------------------------------------------------------

# True when this container's worker sshd runs and listens on HVDRUN_SSH_PORT. Quiet: with `ss` it
# only looks at the listening sockets (a probe connection every few seconds would fill the log);
# without `ss` it reads the SSH banner, answering with an identification string so that sshd logs
# the probe's goodbye at INFO level, not as an error.
run_health() {
    local addr=$listen pid fd line=''
    check_port
    pid=$(cat "$state/sshd.pid" 2>/dev/null) || pid=''
    case $pid in
    '' | *[!0-9]*) say "health: no worker sshd here ($state/sshd.pid missing)"; exit 1 ;;
    esac
    [ -d "/proc/$pid" ] || { say "health: sshd (pid $pid) is not running"; exit 1; }
    if command -v ss >/dev/null 2>&1; then
        if [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]; then exit 0; fi
        say "health: nothing listens on port $port"
        exit 1
    fi
    case $addr in
    0.0.0.0) addr=127.0.0.1 ;;
    ::) addr=::1 ;;
    esac
    if ! { exec {fd}<>"/dev/tcp/$addr/$port"; } 2>/dev/null; then
        say "health: nothing listens on $addr port $port"
        exit 1
    fi
    read -r -t 3 line <&"$fd" || true
    case $line in
    SSH-*) { printf 'SSH-2.0-hvd_health\r\n' >&"$fd"; } 2>/dev/null || true ;;
    esac
    exec {fd}>&-
    case $line in
    SSH-*) exit 0 ;;
    *) say "health: $addr port $port answered without an SSH banner"; exit 1 ;;
    esac
}

main() {
    if [ $# -eq 0 ]; then usage; exit "$EX_USAGE"; fi
    case $1 in
    worker)
        [ $# -eq 1 ] || { usage; die "worker takes no arguments, got: ${*:2}" "$EX_USAGE"; }
        run_worker ;;
    launcher) shift; run_launcher "$@" ;;
    health) run_health ;;
    -h | --help | help) usage ;;
    -*) usage; die "unknown option '$1'" "$EX_USAGE" ;;
    *) run_launcher "$@" ;;
    esac
}

main "$@"
