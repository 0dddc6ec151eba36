#!/usr/bin/env bash
# Test "hosts" in Linux network namespaces, each with a real OpenSSH sshd, for multi-NIC tests.
#
#   netns_hosts.sh start DIR N          build N hosts (2..8); keys, configs and logs in DIR
#   netns_hosts.sh stop DIR             kill everything in our namespaces and delete them
#   netns_hosts.sh exec DIR NAME CMD... run CMD in namespace NAME (launcher, switch, h1..hN)
#
# What `start` builds (ID = 6 hex digits of sha256(DIR), so runs in different DIRs never collide):
#
#   namespace            interfaces (address)
#   nnh-ID-switch        bridges `ctl` and `data`; ports ctl-l, ctl-hK, data-hK (no addresses)
#   nnh-ID-launcher      eth0 10.231.0.1/24 (ctl only), lo
#   nnh-ID-hK (K=1..N)   eth0     10.231.0.(K+1)/24   ctl network, sshd listens here (port 22)
#                        DATA_IF  10.232.0.(K+1)/24   data network, sshd listens here too
#                        island0  10.233.K.1/24       dummy: no other namespace has a route to it
#                        lo                           (no dummy driver: a veth pair, peer island0-peer)
#   DATA_IF differs per host: h1 data0, h2 ens5, h3 enp7s0, h4 eth9, h5.. dataK.
#
# Nothing is routed between the networks and nothing touches the root namespace's interfaces,
# routes or firewall: veths are created directly inside our namespaces (`ip -n NS link add ...
# peer ... netns OTHER`). See README.md in this folder.
#
# Exit codes: 0 ok; 77 this machine cannot run it (one line on stderr says why); 1 other failure.
set -euo pipefail
# shellcheck source=../sshd/client_options.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../sshd/client_options.sh"

readonly SSHD=/usr/sbin/sshd     # sshd re-execs itself per connection: needs an absolute path
readonly MIN_HOSTS=2 MAX_HOSTS=8
readonly LOGIN_TIMEOUT_S=10      # per host, for the first successful `ssh hK true`
readonly CTL_NET=10.231.0 DATA_NET=10.232.0 ISLAND_NET=10.233
ADD_ERR='' ISLAND_KIND=''

die() { printf 'netns_hosts.sh: error: %s\n' "$*" >&2; exit 1; }
# "Cannot run here": the tests turn exit code 77 into a skip with this one line as the reason.
skip() { printf 'netns_hosts.sh: cannot run here: %s\n' "$*" >&2; exit 77; }

usage() {
    cat >&2 <<'EOF'
usage: netns_hosts.sh start DIR N          (N = 2..8)
       netns_hosts.sh stop DIR
       netns_hosts.sh exec DIR NAME CMD... (NAME = launcher, switch, h1..hN)
EOF
    exit 1
}

# ---------------------------------------------------------------------------------------------
# Names and addresses

ctl_addr() { printf '%s.%d' "$CTL_NET" "$(($1 + 1))"; }        # host K; K=0 is the launcher
data_addr() { printf '%s.%d' "$DATA_NET" "$(($1 + 1))"; }
island_addr() { printf '%s.%d.1' "$ISLAND_NET" "$1"; }

# Different names on purpose: interface selection must go by address, not by name.
data_iface() {
    case $1 in
    1) echo data0 ;; 2) echo ens5 ;; 3) echo enp7s0 ;; 4) echo eth9 ;; *) echo "data$1" ;;
    esac
}

# The paths go into sshd_config/ssh_config unquoted: allow only plain path characters.
abs_dir() {
    local dir=$1
    [[ $dir == /* ]] || dir=$PWD/$dir
    dir=$(realpath -m -- "$dir")
    [[ $dir =~ ^/[A-Za-z0-9._/+@=,:-]*$ ]] ||
        die "DIR '$dir' has characters ssh config files cannot carry (use [A-Za-z0-9._/+@=,:-])"
    printf '%s' "$dir"
}

ns_prefix() { printf 'nnh-%s' "$(printf '%s' "$1" | sha256sum | cut -c1-6)"; }
ns_name() { printf '%s-%s' "$(ns_prefix "$1")" "$2"; }   # DIR, launcher|switch|hK

# ---------------------------------------------------------------------------------------------
# Stopping

# True if pid runs; a zombie counts as gone. (`read`, not `$(<file)`: under set -e, bash 5.2
# exits the whole script when `$(<file)` cannot open the file, even with `|| return 1` after it.)
running() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

kill_and_wait() {
    local pid deadline=$((SECONDS + 5))
    kill -KILL "$@" 2>/dev/null || true
    for pid in "$@"; do
        while running "$pid"; do
            ((SECONDS < deadline)) || die "process $pid in our namespaces survived SIGKILL"
            sleep 0.05
        done
    done
}

# Our namespaces: those recorded in DIR/namespaces, plus any with our prefix (a leftover whose
# record was lost, e.g. DIR was deleted by hand).
our_namespaces() {
    local dir=$1 prefix
    prefix=$(ns_prefix "$dir")
    {
        [[ ! -f $dir/namespaces ]] || cat "$dir/namespaces"
        ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(launcher|switch|h[0-9]+)$" || true
    } | awk 'NF && !seen[$0]++'
}

stop() {
    local dir f pid ns
    local -a victims=() spaces=()
    dir=$(abs_dir "$1")
    mapfile -t spaces < <(our_namespaces "$dir")
    # The sshd listeners (guarded against reused pids), then everything else inside our namespaces.
    shopt -s nullglob
    for f in "$dir"/sshd.h*.pid; do
        read -r pid <"$f" || continue
        if [[ $pid =~ ^[0-9]+$ ]] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF "$dir/sshd_config."; then
            victims+=("$pid")
        fi
    done
    shopt -u nullglob
    # Rounds, because a process may fork (sshd accepting a connection) between listing and killing.
    local round
    for ((round = 1; round <= 5; round++)); do
        for ns in "${spaces[@]}"; do
            [[ -e /run/netns/$ns ]] || continue
            mapfile -t -O "${#victims[@]}" victims < <(ip netns pids "$ns" 2>/dev/null)
        done
        ((${#victims[@]})) || break
        kill_and_wait "${victims[@]}"
        victims=()
    done
    # Deleting a namespace deletes the veths, bridges and dummies in it (and each veth's peer).
    local deleted=0
    for ns in "${spaces[@]}"; do
        [[ -e /run/netns/$ns ]] || continue
        ip netns del "$ns" || die "could not delete namespace $ns"
        deleted=$((deleted + 1))
    done
    rm -f "$dir/namespaces" "$dir"/sshd.h*.pid "$dir/hosts.env"   # hosts.env describes live hosts only
    echo "netns_hosts.sh: stopped $dir: deleted $deleted namespaces"
}

# ---------------------------------------------------------------------------------------------
# Starting

preflight() {
    ((EUID == 0)) || skip "network namespaces need root (running as $(id -un))"
    command -v ip >/dev/null || skip "iproute2 (ip) is not installed"
    [[ -x $SSHD ]] || skip "$SSHD not found (install openssh-server)"
    command -v ssh >/dev/null || skip "ssh not found (install openssh-client)"
    command -v ssh-keygen >/dev/null || skip "ssh-keygen not found (install openssh-client)"
    command -v iptables >/dev/null || skip "iptables is not installed"
}

# Records a namespace in DIR/namespaces before creating it, so `stop` finds even half-built ones.
# On failure ADD_ERR holds ip's message.
add_ns() {
    local dir=$1 ns=$2
    echo "$ns" >>"$dir/namespaces"
    [[ ! -e /run/netns/$ns ]] || die "namespace $ns exists already (another run with a colliding DIR hash?)"
    ADD_ERR=$(ip netns add "$ns" 2>&1)
}

# The switch namespace doubles as the capability probe: failures here mean "cannot run here".
make_switch() {
    local dir=$1 sw=$2 err
    add_ns "$dir" "$sw" || skip "'ip netns add' failed: ${ADD_ERR//$'\n'/ }"
    ip -n "$sw" link set lo up
    err=$(ip -n "$sw" link add ctl type bridge 2>&1) || skip "cannot create a bridge in a namespace: $err"
    ip -n "$sw" link add data type bridge
    ip -n "$sw" link set ctl up
    ip -n "$sw" link set data up
    err=$(ip netns exec "$sw" iptables -S 2>&1) || skip "iptables does not work in a namespace: $err"
}

# veth from bridge BR in the switch to interface IFACE in namespace NS.
plug() {
    local sw=$1 br=$2 port=$3 ns=$4 iface=$5 err
    err=$(ip -n "$sw" link add "$port" type veth peer name "$iface" netns "$ns" 2>&1) ||
        die "cannot create veth $port <-> $ns/$iface: $err"
    ip -n "$sw" link set "$port" master "$br"
    ip -n "$sw" link set "$port" up
    ip -n "$ns" link set "$iface" up
}

# island0: a dummy; kernels without the dummy driver get a veth pair whose peer
# (island0-peer, no address) stays in the same namespace, which is just as unroutable.
make_island() {
    local ns=$1 k=$2
    if ip -n "$ns" link add island0 type dummy 2>/dev/null; then
        ISLAND_KIND=dummy
    else
        ip -n "$ns" link add island0 type veth peer name island0-peer
        ip -n "$ns" link set island0-peer up
        ISLAND_KIND=veth
    fi
    ip -n "$ns" addr add "$(island_addr "$k")/24" dev island0
    ip -n "$ns" link set island0 up
}

make_host() {
    local dir=$1 sw=$2 k=$3 ns iface
    ns=$(ns_name "$dir" "h$k")
    iface=$(data_iface "$k")
    add_ns "$dir" "$ns" || die "ip netns add $ns failed: $ADD_ERR"
    ip -n "$ns" link set lo up
    plug "$sw" ctl "ctl-h$k" "$ns" eth0
    ip -n "$ns" addr add "$(ctl_addr "$k")/24" dev eth0
    plug "$sw" data "data-h$k" "$ns" "$iface"
    ip -n "$ns" addr add "$(data_addr "$k")/24" dev "$iface"
    make_island "$ns" "$k"
}

write_sshd_config() {
    local dir=$1 k=$2 user=$3 extra=$4
    cat >"$dir/sshd_config.h$k" <<EOF
# generated by netns_hosts.sh: host h$k (namespace $(ns_name "$dir" "h$k"))
Port 22
AddressFamily inet
ListenAddress $(ctl_addr "$k")
ListenAddress $(data_addr "$k")
HostKey $dir/ssh_host_ed25519_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd.h$k.pid
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
AllowUsers $user
UsePAM no
MaxStartups 1000
MaxSessions 200
UseDNS no
X11Forwarding no
PrintMotd no
PrintLastLog no
LogLevel ERROR
$extra
EOF
}


write_client_files() {
    local dir=$1 n=$2 user=$3 k hostkey
    hostkey=$(cut -d' ' -f1-2 "$dir/ssh_host_ed25519_key.pub")
    for ((k = 1; k <= n; k++)); do
        echo "$(ctl_addr "$k") $hostkey"
        echo "$(data_addr "$k") $hostkey"
    done >"$dir/known_hosts"
    {
        echo "# generated by netns_hosts.sh; use: netns_hosts.sh exec $dir launcher ssh -F $dir/ssh_config h1 true"
        for ((k = 1; k <= n; k++)); do
            echo "Host h$k"
            echo "    HostName $(ctl_addr "$k")"
            client_options "$dir" 22 "$user"
        done
        echo "Host $CTL_NET.* $DATA_NET.*"
        echo "    HostName %h"
        client_options "$dir" 22 "$user"
    } >"$dir/ssh_config"
}

start_sshd() {
    local dir=$1 k=$2 ns deadline
    ns=$(ns_name "$dir" "h$k")
    rm -f "$dir/sshd.h$k.pid" "$dir/sshd.h$k.log"
    # sshd daemonises (its listener keeps this namespace); fds redirected so callers never wait on it.
    ip netns exec "$ns" "$SSHD" -f "$dir/sshd_config.h$k" -E "$dir/sshd.h$k.log" </dev/null >/dev/null 2>&1 ||
        die "sshd of h$k failed to start: $(tail -n 20 "$dir/sshd.h$k.log" 2>/dev/null)"
    deadline=$((SECONDS + LOGIN_TIMEOUT_S))
    until [[ -s $dir/sshd.h$k.pid ]]; do
        ((SECONDS < deadline)) || die "sshd of h$k wrote no pid file; log: $(tail -n 20 "$dir/sshd.h$k.log" 2>/dev/null)"
        sleep 0.02
    done
}

# A real login from the launcher namespace, retried until it works or LOGIN_TIMEOUT_S passes.
wait_login() {
    local dir=$1 k=$2 launcher err deadline
    launcher=$(ns_name "$dir" launcher)
    deadline=$((SECONDS + LOGIN_TIMEOUT_S))
    until err=$(timeout "$LOGIN_TIMEOUT_S" ip netns exec "$launcher" ssh -F "$dir/ssh_config" "h$k" true 2>&1 </dev/null); do
        # Refused or unreachable is "not up yet"; a rejected key or host key will not get better.
        if ((SECONDS >= deadline)) || [[ $err == *'Permission denied'* || $err == *'Host key verification failed'* ]]; then
            die "no ssh login to h$k ($(ctl_addr "$k")) from the launcher (tried ${LOGIN_TIMEOUT_S}s at most): $err
--- tail of $dir/sshd.h$k.log:
$(tail -n 20 "$dir/sshd.h$k.log" 2>/dev/null)"
        fi
        sleep 0.1
    done
}

write_env() {
    local dir=$1 n=$2 user=$3 k
    local -a ctl=() data=() island=() ifaces=() names=() aliases=()
    names+=("$(ns_name "$dir" launcher)")
    for ((k = 1; k <= n; k++)); do
        ctl+=("$(ctl_addr "$k")")
        data+=("$(data_addr "$k")")
        island+=("$(island_addr "$k")")
        ifaces+=("$(data_iface "$k")")
        names+=("$(ns_name "$dir" "h$k")")
        aliases+=("h$k")
    done
    local IFS=,
    {
        echo "# generated by netns_hosts.sh; sourceable (set -a; . hosts.env; set +a)"
        echo "NETNS_HOSTS_DIR=$dir"
        echo "NETNS_HOSTS_COUNT=$n"
        echo "NETNS_HOSTS_ALIASES=${aliases[*]}"
        echo "NETNS_HOSTS_ADDRS=${ctl[*]}"
        echo "NETNS_HOSTS_DATA_ADDRS=${data[*]}"
        echo "NETNS_HOSTS_ISLAND_ADDRS=${island[*]}"
        echo "NETNS_DATA_IFACES=${ifaces[*]}"
        echo "NETNS_ISLAND_KIND=$ISLAND_KIND"
        echo "NETNS_HOSTS_NAMES=${names[*]}"
        echo "NETNS_LAUNCHER_NS=${names[0]}"
        echo "NETNS_LAUNCHER_ADDR=$(ctl_addr 0)"
        echo "NETNS_SWITCH_NS=$(ns_name "$dir" switch)"
        for ((k = 1; k <= n; k++)); do echo "NETNS_HOST_NS_$k=${names[k]}"; done
        echo "NETNS_SSH_USER=$user"
        echo "NETNS_SSH_KEY=$dir/id_ed25519"
        echo "NETNS_SSH_CONFIG=$dir/ssh_config"
        echo "NETNS_SSH_KNOWN_HOSTS=$dir/known_hosts"
    } >"$dir/hosts.env"
}

start() {
    local dir n user sw launcher k extra='' t0=$SECONDS
    dir=$(abs_dir "$1")
    n=$2
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < MIN_HOSTS || n > MAX_HOSTS)); then
        die "N must be $MIN_HOSTS..$MAX_HOSTS, got '$n'"
    fi
    preflight
    user=$(id -un)
    mkdir -p "$dir"
    stop "$dir" >/dev/null   # idempotent: leftovers of an earlier run in DIR go first

    # From here on a failed start (exit 1 or 77) leaves nothing behind.
    trap 'rc=$?; if ((rc != 0)); then stop "'"$dir"'" >/dev/null 2>&1 || true; fi' EXIT

    sw=$(ns_name "$dir" switch)
    launcher=$(ns_name "$dir" launcher)
    make_switch "$dir" "$sw"
    add_ns "$dir" "$launcher" || die "ip netns add $launcher failed: $ADD_ERR"
    ip -n "$launcher" link set lo up
    plug "$sw" ctl ctl-l "$launcher" eth0
    ip -n "$launcher" addr add "$(ctl_addr 0)/24" dev eth0
    for ((k = 1; k <= n; k++)); do make_host "$dir" "$sw" "$k"; done

    rm -f "$dir"/ssh_host_ed25519_key* "$dir"/id_ed25519* "$dir"/sshd_config.h* "$dir"/sshd.h*.log \
        "$dir/authorized_keys" "$dir/known_hosts" "$dir/ssh_config" "$dir/hosts.env"
    ssh-keygen -q -t ed25519 -N '' -C netns-hosts-host -f "$dir/ssh_host_ed25519_key" </dev/null
    ssh-keygen -q -t ed25519 -N '' -C netns-hosts-client -f "$dir/id_ed25519" </dev/null
    cp "$dir/id_ed25519.pub" "$dir/authorized_keys"
    # sshd (as root) refuses to start without its privilege separation directory.
    [[ -d /run/sshd ]] || mkdir -m 0755 /run/sshd

    # OpenSSH >= 9.8 penalises sources whose logins fail; tests of failures would lock others out.
    write_sshd_config "$dir" 1 "$user" ''
    if "$SSHD" -t -f "$dir/sshd_config.h1" -o PerSourcePenalties=no >/dev/null 2>&1; then
        extra='PerSourcePenalties no'
    fi
    for ((k = 1; k <= n; k++)); do
        write_sshd_config "$dir" "$k" "$user" "$extra"
        local err
        err=$("$SSHD" -t -f "$dir/sshd_config.h$k" 2>&1) || die "sshd -t rejected $dir/sshd_config.h$k: $err"
    done
    write_client_files "$dir" "$n" "$user"
    for ((k = 1; k <= n; k++)); do start_sshd "$dir" "$k"; done
    # Logins in parallel (each takes ~0.5 s of mostly waiting); any failure fails start.
    local -a waiters=()
    local failed=0 pid
    for ((k = 1; k <= n; k++)); do
        wait_login "$dir" "$k" &
        waiters+=("$!")
    done
    for pid in "${waiters[@]}"; do wait "$pid" || failed=1; done
    ((!failed)) || die "not every host accepted a login (see above)"
    write_env "$dir" "$n" "$user"
    echo "netns_hosts.sh: $n hosts up in $((SECONDS - t0))s: launcher $launcher ($(ctl_addr 0))," \
        "h1..h$n = $(ctl_addr 1)..$(ctl_addr "$n"); source $dir/hosts.env"
}

# ---------------------------------------------------------------------------------------------

run_in() {
    local dir ns name=$2
    dir=$(abs_dir "$1")
    shift 2
    (($# >= 1)) || usage
    [[ $name =~ ^(launcher|switch|h[0-9]+)$ ]] || die "NAME must be launcher, switch or hK, got '$name'"
    ns=$(ns_name "$dir" "$name")
    [[ -e /run/netns/$ns ]] || die "namespace $ns ($name) does not exist; was 'start $dir N' run?"
    exec ip netns exec "$ns" "$@"
}

main() {
    (($# >= 1)) || usage
    case $1 in
    start) (($# == 3)) || usage; start "$2" "$3" ;;
    stop) (($# == 2)) || usage; stop "$2" ;;
    exec) (($# >= 4)) || usage; run_in "${@:2}" ;;
    *) usage ;;
    esac
}

main "$@"
