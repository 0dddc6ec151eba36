#!/usr/bin/env bash
# Real OpenSSH sshd "test hosts" on loopback addresses 127.0.0.2, 127.0.0.3, ...
# (one port, generated keys, a private ssh_config/known_hosts), used as a CTest fixture.
#
#   sshd_hosts.sh start DIR COUNT [PORT]   start COUNT hosts (<= 200), state and keys in DIR
#   sshd_hosts.sh stop DIR                 stop them; fails if the real ~/.ssh changed meanwhile
#
# See README.md in this folder. The machine's own ssh set-up (~/.ssh, /etc/ssh) is never written.
set -euo pipefail

readonly SSHD=/usr/sbin/sshd     # sshd re-execs itself per connection: needs an absolute path
readonly MAX_HOSTS=200
readonly ADDRS_PER_SSHD=16       # sshd's MAX_LISTEN_SOCKS: one sshd listens on at most 16 addresses
readonly BANNER_TIMEOUT_S=20
readonly PORT_MIN=20000 PORT_MAX=40000
readonly PORT_TRIES=5
SELF=$(readlink -f "${BASH_SOURCE[0]}")
readonly SELF
# shellcheck source=client_options.sh
. "$(dirname "$SELF")/client_options.sh"

die() { printf 'sshd_hosts.sh: error: %s\n' "$*" >&2; exit 1; }
note() { printf 'sshd_hosts.sh: %s\n' "$*" >&2; }

usage() {
    cat >&2 <<'EOF'
usage: sshd_hosts.sh start DIR COUNT [PORT]
       sshd_hosts.sh stop DIR
DIR must be an absolute path. Optional environment: HVDTEST_SSHD_OWNER_PID (pid whose exit stops
the hosts; default: this script's parent; "none": no watchdog).
EOF
    exit 2
}

# Host i (1-based) is 127.0.0.(i+1): 127.0.0.1 is "local" to hvdrun, every other 127.x is remote.
addr_of() { printf '127.0.0.%d' "$(($1 + 1))"; }

# The paths end up in sshd_config/ssh_config, where whitespace splits arguments and '%' is a token:
# accept only plain path characters rather than trying to quote for three different parsers.
check_dir() {
    local dir=$1
    [[ $dir == /* ]] || die "DIR must be an absolute path, got '$dir'"
    [[ $dir =~ ^/[A-Za-z0-9._/+@=,:-]*$ ]] ||
        die "DIR '$dir' has characters that ssh config files cannot carry unquoted (use [A-Za-z0-9._/+@=,:-])"
}

# OpenSSH finds ~/.ssh through the password database, not $HOME.
home_ssh_dir() {
    local home
    home=$(getent passwd "$(id -u)" | cut -d: -f6) || true
    printf '%s/.ssh' "${home:-$HOME}"
}

# A fingerprint of ~/.ssh: "absent", or every entry's type/mode/size/name plus a sha256 per file.
home_ssh_fingerprint() {
    local d
    d=$(home_ssh_dir)
    if [[ ! -e $d && ! -L $d ]]; then
        echo absent
        return
    fi
    echo "present $d"
    (
        cd "$d"
        find . -printf '%y %m %s %p -> %l\n' | LC_ALL=C sort
        find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum
    )
}

# Compares ~/.ssh with DIR/home_ssh.before; prints a diff and fails if it changed.
check_home_ssh() {
    local dir=$1 now
    [[ -f $dir/home_ssh.before ]] || return 0
    now=$(home_ssh_fingerprint)
    if [[ $now != "$(<"$dir/home_ssh.before")" ]]; then
        note "the real $(home_ssh_dir) changed while the test hosts ran (it must stay untouched):"
        diff <(cat "$dir/home_ssh.before") <(printf '%s\n' "$now") >&2 || true
        return 1
    fi
}

# True if pid is alive and its command line names what we expect (guards against reused pids).
# sshd's listener rewrites its title but keeps its arguments: "sshd: /usr/sbin/sshd -f DIR/... [listener]".
pid_matches() {
    local pid=$1 pattern=$2 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    { cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline"); } 2>/dev/null || return 1
    [[ $cmd == *"$pattern"* ]]
}

# All descendants of a pid (sshd's per-connection children and the commands they run).
descendants() {
    ps -e -o pid=,ppid= | awk -v root="$1" '
        { parent[$1] = $2 }
        END {
            for (p in parent) {
                q = p
                for (n = 0; n < 64 && (q in parent) && q != root && q > 1; n++) q = parent[q]
                if (q == root && p != root) print p
            }
        }'
}

# True if pid runs. A zombie counts as gone: it has exited, only its new parent (init, after the
# reparenting) has not reaped it yet, and some inits (sandboxes) reap only every second or two.
running() {
    local stat
    # Not `stat=$(<file)`: under set -e, bash 5.2 exits the whole script when that redirection
    # fails (the process is gone), `|| return 1` notwithstanding.
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# Waits up to $1 seconds for all given pids to be gone; prints the survivors.
wait_gone() {
    local limit=$1 pid
    local -a alive
    shift
    local deadline=$((SECONDS + limit))
    while :; do
        alive=()
        for pid in "$@"; do
            running "$pid" && alive+=("$pid")
        done
        ((${#alive[@]} == 0)) && return 0
        if ((SECONDS >= deadline)); then
            printf '%s\n' "${alive[@]}"
            return 1
        fi
        sleep 0.1
    done
}

# Stops the sshds (and their live sessions) and the watchdog recorded in DIR. $2 = 1 when the
# watchdog itself calls this (it must not kill itself mid-way).
stop_processes() {
    local dir=$1 from_watchdog=${2:-0} f pid
    local -a victims=() survivors=()
    shopt -s nullglob
    for f in "$dir"/sshd.*.pid; do
        pid=$(<"$f") || continue
        if pid_matches "$pid" "$dir/sshd_config."; then
            # Sessions first in the list (pkill -P style, but the whole tree: the user's commands too).
            mapfile -t -O "${#victims[@]}" victims < <(descendants "$pid")
            victims+=("$pid")
        fi
    done
    if ((!from_watchdog)) && [[ -f $dir/watchdog.pid ]]; then
        pid=$(<"$dir/watchdog.pid") || pid=
        if pid_matches "$pid" "_watchdog $dir "; then
            mapfile -t -O "${#victims[@]}" victims < <(descendants "$pid")   # its tail --pid
            victims+=("$pid")
        fi
    fi
    if ((${#victims[@]} > 0)); then
        kill -TERM "${victims[@]}" 2>/dev/null || true
        mapfile -t survivors < <(wait_gone 5 "${victims[@]}")
        if ((${#survivors[@]} > 0)); then
            note "killing processes that ignored SIGTERM: ${survivors[*]}"
            kill -KILL "${survivors[@]}" 2>/dev/null || true
            if ! wait_gone 3 "${survivors[@]}" >/dev/null; then
                die "processes still alive after SIGKILL: ${survivors[*]}"
            fi
        fi
    fi
    rm -f "$dir"/sshd.*.pid
    ((from_watchdog)) || rm -f "$dir/watchdog.pid"
    shopt -u nullglob
}

port_listening() { [[ -n $(ss -Hltn "sport = :$1") ]]; }

pick_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((PORT_MIN + ${SRANDOM:-$RANDOM} % (PORT_MAX - PORT_MIN + 1)))
        port_listening "$p" || { echo "$p"; return 0; }
    done
    die "found no free TCP port in $PORT_MIN-$PORT_MAX"
}

# True when addr:port sends an SSH identification string (sshd is up and answering).
banner_ok() {
    local fd line=''
    { exec {fd}<>"/dev/tcp/$1/$2"; } 2>/dev/null || return 1
    read -r -t 2 line <&"$fd" || true
    # Answer with our own identification: a client that closes before it sends one makes sshd log
    # "kex_exchange_identification: Connection closed" as an error; after it, closing is INFO only.
    [[ $line == SSH-* ]] && { printf 'SSH-2.0-hvdtest_probe\r\n' >&"$fd"; } 2>/dev/null
    exec {fd}>&-
    [[ $line == SSH-* ]]
}

wait_for_banners() {
    local port=$1 addr
    shift
    local deadline=$((SECONDS + BANNER_TIMEOUT_S))
    for addr in "$@"; do
        until banner_ok "$addr" "$port"; do
            if ((SECONDS >= deadline)); then
                note "no SSH banner from $addr:$port within ${BANNER_TIMEOUT_S}s"
                return 1
            fi
            sleep 0.1
        done
    done
}

# Writes DIR/sshd_config.N for instance n (1-based) serving hosts first..last.
write_sshd_config() {
    local dir=$1 n=$2 first=$3 last=$4 port=$5 user=$6 extra=$7 i
    {
        echo "# generated by sshd_hosts.sh: test hosts $first-$last"
        echo "Port $port"
        echo "AddressFamily inet"
        for ((i = first; i <= last; i++)); do echo "ListenAddress $(addr_of "$i")"; done
        echo "HostKey $dir/ssh_host_ed25519_key"
        echo "AuthorizedKeysFile $dir/authorized_keys"
        echo "PidFile $dir/sshd.$n.pid"
        # Keys live under build dirs and /tmp, whose modes StrictModes would reject.
        echo "StrictModes no"
        echo "PasswordAuthentication no"
        echo "KbdInteractiveAuthentication no"
        echo "PubkeyAuthentication yes"
        echo "PermitRootLogin prohibit-password"
        echo "AllowUsers $user"
        # No PAM: no session modules (pam_loginuid fails in containers), no password prompts.
        echo "UsePAM no"
        # Defaults (MaxStartups 10:30:100, MaxSessions 10) drop connections of parallel tests.
        echo "MaxStartups 1000"
        echo "MaxSessions 200"
        echo "UseDNS no"
        echo "X11Forwarding no"
        echo "PrintMotd no"
        echo "PrintLastLog no"
        echo "LogLevel ERROR"
        # sshd runs each command through the user's bash, which sources ~/.bashrc for SSH
        # sessions only as a top-level shell (SHLVL below 2): on these machines root's ~/.bashrc
        # runs pyenv's init (about 0.9 s of CPU per login, once 135 ms), which made every test
        # with dozens of logins time out on 2 cores. SHLVL=1 from sshd makes bash a second-level
        # shell, so the test hosts skip the login script; ranks see SHLVL=2.
        echo "SetEnv SHLVL=1"
        [[ -z $extra ]] || printf '%s\n' "$extra"
    } >"$dir/sshd_config.$n"
}


# KEY=value for hosts.env: plain when the value has only characters no shell treats specially (so
# simple KEY=value parsers in tests work too), single-quoted otherwise.
env_line() {
    if [[ $2 =~ ^[A-Za-z0-9._/+@=,:-]*$ ]]; then
        printf '%s=%s\n' "$1" "$2"
    else
        printf "%s='%s'\\n" "$1" "${2//\'/\'\\\'\'}"
    fi
}

watchdog() {
    local dir=$1 owner=$2
    echo "$$" >"$dir/watchdog.pid"   # written here: setsid may fork, so the starter's $! can be wrong
    echo "$(date '+%F %T') watchdog $$: waiting for owner pid $owner"
    tail --pid="$owner" -f /dev/null
    echo "$(date '+%F %T') watchdog $$: owner $owner is gone, stopping the test hosts"
    stop_processes "$dir" 1
    check_home_ssh "$dir" || true
    rm -f "$dir/watchdog.pid"
}

start() {
    local dir=${1%/} count=$2 port=${3:-} user owner n ninst first last attempt extra=''
    local -a addrs=() aliases=()
    if ! [[ $count =~ ^[0-9]+$ ]] || ((count < 1)); then
        die "COUNT must be a positive integer, got '$count'"
    fi
    ((count <= MAX_HOSTS)) ||
        die "COUNT $count is more than $MAX_HOSTS hosts (127.0.0.2-127.0.0.$((MAX_HOSTS + 1))); refusing"
    if [[ -n $port ]]; then
        if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
            die "PORT must be 1-65535, got '$port'"
        fi
    fi
    check_dir "$dir"
    if [[ -n $port ]] && port_listening "$port"; then
        die "port $port is already in use: $(ss -Hltn "sport = :$port" | awk '{print $4}' | xargs)"
    fi
    [[ -x $SSHD ]] || die "$SSHD not found (install openssh-server)"
    command -v ssh-keygen >/dev/null || die "ssh-keygen not found (install openssh-client)"
    user=$(id -un)

    owner=${HVDTEST_SSHD_OWNER_PID:-$PPID}
    if [[ $owner != none ]]; then
        if ! [[ $owner =~ ^[0-9]+$ ]] || ! kill -0 "$owner" 2>/dev/null; then
            die "owner pid '$owner' (HVDTEST_SSHD_OWNER_PID or the parent) is not a live process"
        fi
    fi

    mkdir -p "$dir"
    # Idempotent: a previous run's sshds and watchdog in DIR go first.
    stop_processes "$dir"
    if [[ -f $dir/home_ssh.before ]] && ! check_home_ssh "$dir"; then
        note "warning: continuing; recording the current state of ~/.ssh as the new reference"
    fi
    home_ssh_fingerprint >"$dir/home_ssh.before"

    # From here on, a failed start must not leave sshds behind.
    trap 'rc=$?; if ((rc != 0)); then stop_processes "'"$dir"'" >/dev/null 2>&1 || true; fi' EXIT

    rm -f "$dir"/sshd_config.* "$dir"/sshd.*.log "$dir"/ssh_host_ed25519_key* "$dir"/id_ed25519* \
        "$dir/authorized_keys" "$dir/known_hosts" "$dir/ssh_config" "$dir/hosts.env" "$dir/watchdog.log"
    # Explicit -f paths in DIR: ssh-keygen only creates ~/.ssh for files inside it.
    ssh-keygen -q -t ed25519 -N '' -C "hvdtest-sshd-host" -f "$dir/ssh_host_ed25519_key" </dev/null
    ssh-keygen -q -t ed25519 -N '' -C "hvdtest-sshd-client" -f "$dir/id_ed25519" </dev/null
    # Three more client keys for failure-mode tests: one whose login always runs the forced command
    # `exit 7` (remote_command_failed), one whose login prints a greeting on stdout before running
    # the command, as a chatty login script does (login_prints_text), one the servers do not know
    # at all (auth_denied).
    ssh-keygen -q -t ed25519 -N '' -C "hvdtest-sshd-exit7" -f "$dir/id_ed25519_exit7" </dev/null
    ssh-keygen -q -t ed25519 -N '' -C "hvdtest-sshd-chatty" -f "$dir/id_ed25519_chatty" </dev/null
    ssh-keygen -q -t ed25519 -N '' -C "hvdtest-sshd-unauthorized" \
        -f "$dir/id_ed25519_unauthorized" </dev/null
    {
        cat "$dir/id_ed25519.pub"
        printf 'command="exit 7" %s\n' "$(<"$dir/id_ed25519_exit7.pub")"
        printf '%s %s\n' 'command="echo Welcome to the cluster!; eval \"$SSH_ORIGINAL_COMMAND\""' \
            "$(<"$dir/id_ed25519_chatty.pub")"
    } >"$dir/authorized_keys"

    # sshd (as root) refuses to start without its privilege separation directory; fresh machines lack it.
    if [[ ! -d /run/sshd ]]; then
        if ((EUID == 0)); then
            mkdir -m 0755 /run/sshd
        else
            note "warning: /run/sshd is missing and we are not root (sshd as a normal user does not need it)"
        fi
    fi

    for ((n = 1; n <= count; n++)); do
        addrs+=("$(addr_of "$n")")
        aliases+=("h$n")
    done
    ninst=$(((count + ADDRS_PER_SSHD - 1) / ADDRS_PER_SSHD))

    local fixed_port=0 ok=0
    [[ -n $port ]] && fixed_port=1
    for ((attempt = 1; attempt <= PORT_TRIES; attempt++)); do
        if ((!fixed_port)); then port=$(pick_port); fi
        for ((n = 1; n <= ninst; n++)); do
            first=$(((n - 1) * ADDRS_PER_SSHD + 1))
            last=$((n * ADDRS_PER_SSHD < count ? n * ADDRS_PER_SSHD : count))
            write_sshd_config "$dir" "$n" "$first" "$last" "$port" "$user" "$extra"
        done
        # OpenSSH >= 9.8 penalises sources that fail or skip authentication; every test client comes
        # from 127.0.0.1, so failure-mode tests (and our banner probes) would lock out all the rest.
        if ((attempt == 1)) && "$SSHD" -t -f "$dir/sshd_config.1" -o PerSourcePenalties=no >/dev/null 2>&1; then
            extra='PerSourcePenalties no'
            for ((n = 1; n <= ninst; n++)); do echo "$extra" >>"$dir/sshd_config.$n"; done
        fi
        local err
        for ((n = 1; n <= ninst; n++)); do
            err=$("$SSHD" -t -f "$dir/sshd_config.$n" 2>&1) ||
                die "sshd -t rejected $dir/sshd_config.$n: $err"
        done

        for ((n = 1; n <= ninst; n++)); do
            rm -f "$dir/sshd.$n.pid"
            # sshd daemonizes itself; its fds still point away so ctest never waits on them.
            "$SSHD" -f "$dir/sshd_config.$n" -E "$dir/sshd.$n.log" </dev/null >/dev/null 2>&1 ||
                die "$SSHD -f $dir/sshd_config.$n failed: $(cat "$dir/sshd.$n.log" 2>/dev/null)"
        done
        # The pid file appears once the listener has bound its addresses (or given up on them).
        local deadline=$((SECONDS + BANNER_TIMEOUT_S)) bind_failed=0
        for ((n = 1; n <= ninst; n++)); do
            until [[ -s $dir/sshd.$n.pid ]]; do
                if ((SECONDS >= deadline)) || grep -q 'Cannot bind any address' "$dir/sshd.$n.log" 2>/dev/null; then
                    break
                fi
                sleep 0.05
            done
            if grep -q 'Bind to port .* failed\|Cannot bind any address' "$dir/sshd.$n.log" 2>/dev/null; then
                bind_failed=1
            fi
        done
        if ((bind_failed)); then
            stop_processes "$dir"
            if ((fixed_port)); then
                die "sshd could not bind port $port: $(cat "$dir"/sshd.*.log)"
            fi
            note "port $port was taken meanwhile, trying another one"
            rm -f "$dir"/sshd.*.log
            continue
        fi
        for ((n = 1; n <= ninst; n++)); do
            [[ -s $dir/sshd.$n.pid ]] ||
                die "sshd instance $n wrote no pid file within ${BANNER_TIMEOUT_S}s; its log: $(cat "$dir/sshd.$n.log" 2>/dev/null)"
        done
        ok=1
        break
    done
    ((ok)) || die "could not find a usable port after $PORT_TRIES tries"

    if ! wait_for_banners "$port" "${addrs[@]}"; then
        die "test hosts did not come up; sshd logs: $(cat "$dir"/sshd.*.log 2>/dev/null)"
    fi

    # Clients trust exactly this host key on every address (the "[addr]:port" form for non-22 ports).
    local hostkey a
    hostkey=$(cut -d' ' -f1-2 "$dir/ssh_host_ed25519_key.pub")
    for a in "${addrs[@]}"; do
        if ((port == 22)); then echo "$a $hostkey"; else echo "[$a]:$port $hostkey"; fi
    done >"$dir/known_hosts"

    {
        echo "# generated by sshd_hosts.sh; use: ssh -F $dir/ssh_config h1 true"
        for ((n = 1; n <= count; n++)); do
            echo "Host h$n"
            echo "    HostName $(addr_of "$n")"
            client_options "$dir" "$port" "$user"
        done
        echo "Host 127.0.0.*"
        echo "    HostName %h"
        client_options "$dir" "$port" "$user"
    } >"$dir/ssh_config"

    {
        local IFS=,
        printf '# generated by sshd_hosts.sh; sourceable (set -a; . hosts.env; set +a)\n'
        env_line HVDTEST_SSH_PORT "$port"
        env_line HVDTEST_SSH_USER "$user"
        env_line HVDTEST_SSH_ADDRS "${addrs[*]}"
        env_line HVDTEST_SSH_ALIASES "${aliases[*]}"
        env_line HVDTEST_SSH_COUNT "$count"
        env_line HVDTEST_SSH_KEY "$dir/id_ed25519"
        env_line HVDTEST_SSH_KEY_EXIT7 "$dir/id_ed25519_exit7"
        env_line HVDTEST_SSH_KEY_CHATTY "$dir/id_ed25519_chatty"
        env_line HVDTEST_SSH_KEY_UNAUTHORIZED "$dir/id_ed25519_unauthorized"
        env_line HVDTEST_SSH_CONFIG "$dir/ssh_config"
        env_line HVDTEST_SSH_KNOWN_HOSTS "$dir/known_hosts"
        env_line HVDTEST_SSHD_DIR "$dir"
    } >"$dir/hosts.env"

    if [[ $owner != none ]]; then
        # Stops the hosts when the owner (ctest) dies, even if the cleanup test never runs. setsid and
        # redirected fds: it must neither get the caller's signals nor hold ctest's output pipes open.
        rm -f "$dir/watchdog.pid"
        setsid bash "$SELF" _watchdog "$dir" "$owner" </dev/null >>"$dir/watchdog.log" 2>&1 &
        local deadline=$((SECONDS + 5))
        until [[ -s $dir/watchdog.pid ]]; do
            ((SECONDS < deadline)) || die "the watchdog did not start; see $dir/watchdog.log"
            sleep 0.02
        done
    fi

    echo "sshd_hosts.sh: $count test hosts ${addrs[0]}..${addrs[count - 1]} port $port" \
        "($ninst sshd), owner pid $owner; source $dir/hosts.env"
}

stop() {
    local dir=${1%/}
    check_dir "$dir"
    [[ -d $dir ]] || { echo "sshd_hosts.sh: $dir does not exist, nothing to stop"; return 0; }
    stop_processes "$dir"
    check_home_ssh "$dir" || die "the real ~/.ssh was modified by the test run (see the diff above)"
    echo "sshd_hosts.sh: stopped the test hosts in $dir"
}

main() {
    (($# >= 1)) || usage
    case $1 in
    start) (($# == 3 || $# == 4)) || usage; start "${@:2}" ;;
    stop) (($# == 2)) || usage; stop "$2" ;;
    _watchdog) (($# == 3)) || usage; watchdog "$2" "$3" ;;   # internal: started by start
    *) usage ;;
    esac
}

main "$@"
