#!/usr/bin/env bash
# A real three-node Slurm cluster on this one machine (one slurmctld, three slurmd named n1-n3 on
# loopback addresses 127.0.1.1-3, each with its own port), used as a CTest fixture. Runs as root,
# without munge (auth/none, cred/none); everything lives in DIR.
#
#   slurm_cluster.sh start DIR    start it (stops whatever an earlier run left in DIR first)
#   slurm_cluster.sh stop DIR     stop every daemon, step and task it started
#   slurm_cluster.sh status DIR   show the daemons and `sinfo`; exit 0 if all run and no node is down
#
# Clients need SLURM_CONF=DIR/slurm.conf (DIR/slurm.env has that line). See README.md here.
set -euo pipefail

readonly NODES=3
readonly CPUS_PER_NODE=2
readonly NODE_NET=127.0.1        # node K is NODE_NET.K; 127.0.0.x belongs to the sshd fixture
readonly CTLD_ADDR=127.0.0.1
# Below the kernel's ephemeral range (32768-60999 by default), so no outgoing connection holds them.
readonly PORT_MIN=20000 PORT_MAX=32000
readonly PORT_TRIES=5
readonly UP_TIMEOUT_S=60         # controller answering and all nodes idle (slow on a busy machine)
readonly STOP_TERM_WAIT_S=5      # then SIGKILL
SELF=$(readlink -f "${BASH_SOURCE[0]}")
readonly SELF

die() { printf 'slurm_cluster.sh: error: %s\n' "$*" >&2; exit 1; }
note() { printf 'slurm_cluster.sh: %s\n' "$*" >&2; }

usage() {
    cat >&2 <<'EOF'
usage: slurm_cluster.sh start DIR
       slurm_cluster.sh stop DIR
       slurm_cluster.sh status DIR
DIR must be an absolute path. Optional environment: HVDTEST_SLURM_OWNER_PID (pid whose exit stops
the cluster; default: this script's parent; "none": no watchdog).
EOF
    exit 2
}

# DIR ends up in slurm.conf, whose parser splits on whitespace and expands '%' tokens (%n): accept
# only plain path characters rather than quoting for it.
check_dir() {
    local dir=$1
    [[ $dir == /* ]] || die "DIR must be an absolute path, got '$dir'"
    [[ $dir =~ ^/[A-Za-z0-9._/+@=,:-]*$ ]] ||
        die "DIR '$dir' has characters slurm.conf cannot carry unquoted (use [A-Za-z0-9._/+@=,:-])"
}

# DIR without symlinks: step daemons are recognised by their working directory, which the kernel
# reports resolved, so every path we write and compare must be the resolved one.
canonical_dir() {
    local resolved
    check_dir "$1"
    resolved=$(readlink -m "$1")
    check_dir "$resolved"
    printf '%s\n' "$resolved"
}

# True if pid runs. A zombie counts as gone: it has exited, and only its new parent (init, after the
# daemons' double fork) has not reaped it yet; some inits (sandboxes) reap only every second or two.
running() {
    local stat
    # Not `stat=$(<file)`: under set -e, bash 5.2 exits the whole script when that redirection
    # fails (the process is gone), `|| return 1` notwithstanding.
    read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

cmdline_of() { tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null; }

# True if pid runs and its command line contains the pattern (guards against reused pids).
pid_matches() {
    local pid=$1 pattern=$2 cmd
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    running "$pid" || return 1
    { cmd=$(cmdline_of "$pid"); } 2>/dev/null || return 1
    [[ $cmd == *"$pattern"* ]]
}

# All descendants of the given pids (slurmctld's slurmscriptd, a step's tasks, the watchdog's tail).
descendants() {
    ps -e -o pid=,ppid= | awk -v roots="$*" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) root[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            for (p in parent) {
                if (p in root) continue
                q = parent[p]
                for (n = 0; n < 64 && (q in parent) && !(q in root) && q > 1; n++) q = parent[q]
                if (q in root) print p
            }
        }'
}

# Pids of this cluster's daemons and step daemons, found in /proc rather than only through the pid
# files (a crashed run may have lost those): slurmctld/slurmd started with `-f DIR/slurm.conf`, and
# slurmstepd and slurmctld's helper slurmscriptd (their command lines are only "slurmstepd:
# [job.step]" and ": slurmscriptd"), whose working directory is DIR: the daemons chdir to their log
# file's directory, DIR, and their children inherit it.
# Builtins only for the scan (no fork per process: the machine may be busy with a parallel ctest).
cluster_pids() {
    local dir=$1 p comm cwd
    local -a args
    for p in /proc/[0-9]*; do
        read -r comm 2>/dev/null <"$p/comm" || continue
        case $comm in
        slurmctld | slurmd)
            mapfile -d '' -t args 2>/dev/null <"$p/cmdline" || continue
            if ((${#args[@]} >= 3)) && [[ ${args[1]} == -f && ${args[2]} == "$dir/slurm.conf" ]]; then
                echo "${p#/proc/}"
            fi
            ;;
        slurmstepd | slurmscriptd)
            cwd=$(readlink "$p/cwd" 2>/dev/null) || continue
            [[ $cwd == "$dir" ]] && echo "${p#/proc/}"
            ;;
        esac
    done
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

# Cancels every job the controller knows and waits (bounded) until they are gone, so that their
# srun/salloc clients hear that their steps ended and exit: an srun whose step daemons are killed
# under it, with the controller gone too, waits forever.
cancel_jobs() {
    local dir=$1 ids deadline
    ids=$(SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null) || return 0
    [[ -n $ids ]] || return 0
    # shellcheck disable=SC2086  # one word per job id
    SLURM_CONF=$dir/slurm.conf timeout 5 scancel $ids >/dev/null 2>&1 || true
    # KillWait (5 s) between SIGTERM and SIGKILL of the tasks, then the nodes' clean-up.
    deadline=$((SECONDS + 15))
    while ((SECONDS < deadline)); do
        ids=$(SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null) || return 0
        [[ -n $ids ]] || return 0
        sleep 0.2
    done
    note "jobs still there 15 s after scancel: ${ids//$'\n'/ }; killing the daemons anyway"
}

# Stops everything of the cluster in DIR: the daemons (pid files and a /proc scan), their step
# daemons, the tasks those run, and (unless the watchdog itself calls this: $2 = 1) the watchdog.
stop_processes() {
    local dir=$1 from_watchdog=${2:-0} f pid
    local -a roots=() victims=() survivors=()
    shopt -s nullglob
    for f in "$dir/slurmctld.pid" "$dir"/slurmd-n*.pid; do
        read -r pid 2>/dev/null <"$f" || continue   # not $(<f): see running()
        pid_matches "$pid" "-f $dir/slurm.conf" && roots+=("$pid")
    done
    shopt -u nullglob
    mapfile -t -O "${#roots[@]}" roots < <(cluster_pids "$dir")
    if ((!from_watchdog)) && [[ -f $dir/watchdog.pid ]]; then
        read -r pid 2>/dev/null <"$dir/watchdog.pid" || pid=
        pid_matches "$pid" "_watchdog $dir " && roots+=("$pid")
    fi
    if ((${#roots[@]} > 0)); then
        # While the controller runs, end the jobs through it (clients exit cleanly), then kill.
        local comm
        for pid in "${roots[@]}"; do
            read -r comm 2>/dev/null <"/proc/$pid/comm" || continue
            if [[ $comm == slurmctld ]]; then cancel_jobs "$dir"; break; fi
        done
        # The whole trees: slurmscriptd, the tasks of running steps (children of their slurmstepd
        # with proctrack/pgid), the watchdog's tail.
        victims=("${roots[@]}")
        mapfile -t -O "${#victims[@]}" victims < <(descendants "${roots[@]}")
        mapfile -t victims < <(printf '%s\n' "${victims[@]}" | sort -un)
        kill -TERM "${victims[@]}" 2>/dev/null || true
        # slurmstepd ignores SIGTERM (it waits for its tasks and for slurmd): SIGKILL at once, the
        # tasks have their SIGTERM.
        for pid in "${victims[@]}"; do
            read -r comm 2>/dev/null <"/proc/$pid/comm" || continue
            if [[ $comm == slurmstepd ]]; then kill -KILL "$pid" 2>/dev/null || true; fi
        done
        mapfile -t survivors < <(wait_gone "$STOP_TERM_WAIT_S" "${victims[@]}")
        if ((${#survivors[@]} > 0)); then
            note "killing processes that ignored SIGTERM: ${survivors[*]}"
            kill -KILL "${survivors[@]}" 2>/dev/null || true
            if ! wait_gone 3 "${survivors[@]}" >/dev/null; then
                die "processes still alive after SIGKILL: ${survivors[*]}"
            fi
        fi
    fi
    rm -f "$dir/slurmctld.pid" "$dir"/slurmd-n*.pid "$dir/slurm.env"   # nothing answers there now
    ((from_watchdog)) || rm -f "$dir/watchdog.pid"
}

port_listening() { [[ -n $(ss -Hltn "sport = :$1") ]]; }

# Prints $1 distinct ports that nothing listens on.
pick_ports() {
    local want=$1 p i
    local -A taken=()
    local -a got=()
    for ((i = 0; i < 1000 && ${#got[@]} < want; i++)); do
        p=$((PORT_MIN + ${SRANDOM:-$RANDOM} % (PORT_MAX - PORT_MIN + 1)))
        [[ -z ${taken[$p]:-} ]] || continue
        taken[$p]=1
        port_listening "$p" || got+=("$p")
    done
    ((${#got[@]} == want)) || die "found no $want free TCP ports in $PORT_MIN-$PORT_MAX"
    printf '%s\n' "${got[@]}"
}

# Writes DIR/slurm.conf; ports: controller first, then one per node. README.md says why each setting.
write_conf() {
    local dir=$1 host=$2 ctld_port=$3 k
    shift 3
    {
        echo "# generated by slurm_cluster.sh; clients: SLURM_CONF=$dir/slurm.conf"
        echo "ClusterName=hvdtest"
        echo "SlurmctldHost=$host($CTLD_ADDR)"
        echo "SlurmctldPort=$ctld_port"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "AuthType=auth/none"
        echo "CredType=cred/none"
        echo "MpiDefault=none"
        echo "ProctrackType=proctrack/pgid"
        echo "TaskPlugin=task/none"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU"
        echo "SchedulerType=sched/builtin"
        echo "ReturnToService=2"
        echo "SlurmdParameters=config_overrides"
        echo "KillWait=5"
        echo "MailProg=/bin/true"
        echo "StateSaveLocation=$dir/state"
        echo "SlurmctldPidFile=$dir/slurmctld.pid"
        echo "SlurmctldLogFile=$dir/slurmctld.log"
        echo "SlurmdSpoolDir=$dir/%n"
        echo "SlurmdPidFile=$dir/slurmd-%n.pid"
        echo "SlurmdLogFile=$dir/slurmd-%n.log"
        echo "TmpFS=$dir/%n/tmp"
        for ((k = 1; k <= NODES; k++)); do
            echo "NodeName=n$k NodeHostname=$host NodeAddr=$NODE_NET.$k Port=${!k} CPUs=$CPUS_PER_NODE"
        done
        echo "PartitionName=debug Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
    } >"$dir/slurm.conf"
}

# The last lines of every log in DIR, for error messages.
log_tails() {
    local dir=$1 f
    for f in "$dir"/slurmctld.log "$dir"/slurmctld.stderr "$dir"/slurmd-n*.log "$dir"/slurmd-n*.stderr; do
        [[ -s $f ]] || continue
        printf '\n--- %s (last 15 lines)\n' "$f"
        tail -n 15 "$f"
    done
}

# "n1 idle" lines from the controller; empty if it does not answer.
node_states() {
    SLURM_CONF=$1/slurm.conf timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | sort -u || true
}

# Pid from a pid file if that daemon runs, else nothing.
daemon_pid() {
    local dir=$1 file=$2 pid
    read -r pid 2>/dev/null <"$dir/$file" || return 0
    if pid_matches "$pid" "-f $dir/slurm.conf"; then echo "$pid"; fi
}

# Starts the daemons with the config in DIR and waits until all nodes are idle. Returns 0 when up,
# 3 when a daemon could not bind its port (the caller retries with other ports); dies otherwise.
launch() {
    local dir=$1 k name deadline states idle
    # The daemons fork into the background; their stdio goes to files (ctest must not wait on
    # them, and fatal errors before the log file opens land there).
    (cd "$dir" && exec slurmctld -f "$dir/slurm.conf" </dev/null >"$dir/slurmctld.stderr" 2>&1) ||
        die "slurmctld failed to start:$(log_tails "$dir")"
    for ((k = 1; k <= NODES; k++)); do
        (cd "$dir" && exec slurmd -f "$dir/slurm.conf" -N "n$k" </dev/null >"$dir/slurmd-n$k.stderr" 2>&1) ||
            die "slurmd -N n$k failed to start:$(log_tails "$dir")"
    done
    deadline=$((SECONDS + UP_TIMEOUT_S))
    while :; do
        states=$(node_states "$dir")
        idle=$(grep -c ' idle$' <<<"$states" || true)
        ((idle == NODES)) && return 0
        # A port taken since we picked it is worth another try (slurmctld then exits, slurmd may
        # write no pid file); a fatal error, or a daemon gone after writing its pid file, is not.
        for name in slurmctld slurmd-n1 slurmd-n2 slurmd-n3; do
            if grep -qs 'Address already in use' "$dir/$name.log" "$dir/$name.stderr"; then
                return 3
            fi
            if grep -qs 'fatal:' "$dir/$name.log" "$dir/$name.stderr" ||
                [[ -s $dir/$name.pid && -z $(daemon_pid "$dir" "$name.pid") ]]; then
                die "$name failed during start-up:$(log_tails "$dir")"
            fi
        done
        if ((SECONDS >= deadline)); then
            die "the cluster did not come up within ${UP_TIMEOUT_S}s; sinfo says:
${states:-(no answer from slurmctld)}$(log_tails "$dir")"
        fi
        sleep 0.2
    done
}

watchdog() {
    local dir=$1 owner=$2
    echo "$$" >"$dir/watchdog.pid"   # written here: setsid may fork, so the starter's $! can be wrong
    echo "$(date '+%F %T') watchdog $$: waiting for owner pid $owner"
    tail --pid="$owner" -f /dev/null
    echo "$(date '+%F %T') watchdog $$: owner $owner is gone, stopping the cluster"
    stop_processes "$dir" 1
    rm -f "$dir/watchdog.pid"
}

start() {
    local dir owner host attempt k rc t0=$SECONDS
    local -a ports=()
    dir=$(canonical_dir "$1")
    # slurmd starts every task as the submitting user and SlurmUser=root: only root can run this.
    ((EUID == 0)) || die "needs root (slurmd runs the steps' tasks as their user; SlurmUser=root)"
    for k in slurmctld slurmd slurmstepd sinfo srun salloc; do
        command -v "$k" >/dev/null ||
            die "$k not found (install the Debian packages slurmctld slurmd slurm-client)"
    done
    host=$(hostname -s)
    [[ -n $host ]] || die "hostname -s printed nothing"

    owner=${HVDTEST_SLURM_OWNER_PID:-$PPID}
    if [[ $owner != none ]]; then
        if ! [[ $owner =~ ^[0-9]+$ ]] || ! kill -0 "$owner" 2>/dev/null; then
            die "owner pid '$owner' (HVDTEST_SLURM_OWNER_PID or the parent) is not a live process"
        fi
    fi

    mkdir -p "$dir"
    # Re-runnable: whatever an earlier (maybe crashed) run left in DIR goes first, with its state:
    # a fresh controller starts at job 1 and knows no old jobs or node states.
    stop_processes "$dir"
    rm -rf "$dir/state" "$dir"/n[0-9]*
    rm -f "$dir/slurm.conf" "$dir/slurm.env" "$dir"/slurm*.log "$dir"/slurm*.stderr "$dir/watchdog.log"

    # From here on, a failed start must not leave daemons behind.
    trap 'rc=$?; if ((rc != 0)); then stop_processes "'"$dir"'" >/dev/null 2>&1 || true; fi' EXIT

    mkdir -p "$dir/state"
    for ((k = 1; k <= NODES; k++)); do
        # The spool (also where slurmd's step sockets live) and TmpFS must exist before slurmd starts.
        mkdir -p "$dir/n$k/tmp"
    done

    for ((attempt = 1; attempt <= PORT_TRIES; attempt++)); do
        mapfile -t ports < <(pick_ports $((NODES + 1)))
        write_conf "$dir" "$host" "${ports[@]}"
        rc=0
        launch "$dir" || rc=$?
        ((rc == 0)) && break
        note "a port was taken meanwhile (attempt $attempt), trying other ones"
        stop_processes "$dir"
        rm -rf "$dir/state"/*
        rm -f "$dir"/slurm*.log "$dir"/slurm*.stderr
    done
    ((rc == 0)) || die "could not find usable ports after $PORT_TRIES tries"

    {
        echo "# generated by slurm_cluster.sh; sourceable (set -a; . slurm.env; set +a)"
        echo "SLURM_CONF=$dir/slurm.conf"
        echo "HVDTEST_SLURM_DIR=$dir"
    } >"$dir/slurm.env"

    if [[ $owner != none ]]; then
        # Stops the cluster when the owner (ctest) dies, even if the cleanup test never runs. setsid
        # and redirected fds: it must neither get the caller's signals nor hold ctest's output open.
        rm -f "$dir/watchdog.pid"
        setsid bash "$SELF" _watchdog "$dir" "$owner" </dev/null >>"$dir/watchdog.log" 2>&1 &
        local deadline=$((SECONDS + 5))
        until [[ -s $dir/watchdog.pid ]]; do
            ((SECONDS < deadline)) || die "the watchdog did not start; see $dir/watchdog.log"
            sleep 0.02
        done
    fi

    echo "slurm_cluster.sh: $NODES nodes n1-n$NODES ($NODE_NET.1-$NODES, ports ${ports[*]:1}," \
        "$CPUS_PER_NODE CPUs each), slurmctld on $CTLD_ADDR:${ports[0]}, up in $((SECONDS - t0))s," \
        "owner pid $owner; export SLURM_CONF=$dir/slurm.conf"
}

stop() {
    local dir
    dir=$(canonical_dir "$1")
    [[ -d $dir ]] || { echo "slurm_cluster.sh: $dir does not exist, nothing to stop"; return 0; }
    stop_processes "$dir"
    echo "slurm_cluster.sh: stopped the cluster in $dir"
}

status() {
    local dir f pid ok=1 states
    dir=$(canonical_dir "$1")
    [[ -f $dir/slurm.conf ]] || { echo "no cluster in $dir"; return 1; }
    for f in slurmctld.pid slurmd-n1.pid slurmd-n2.pid slurmd-n3.pid; do
        pid=$(daemon_pid "$dir" "$f")
        if [[ -n $pid ]]; then echo "${f%.pid}: pid $pid"; else echo "${f%.pid}: not running"; ok=0; fi
    done
    states=$(node_states "$dir")
    echo "sinfo: ${states:-(no answer from slurmctld)}" | paste -sd ','
    # Usable: idle, or running jobs (alloc, mix, completing); not down, drained or unknown.
    (($(grep -cE ' (idle|alloc|mix|comp)$' <<<"$states" || true) == NODES)) || ok=0
    ((ok))
}

main() {
    (($# >= 1)) || usage
    case $1 in
    start) (($# == 2)) || usage; start "$2" ;;
    stop) (($# == 2)) || usage; stop "$2" ;;
    status) (($# == 2)) || usage; status "$2" ;;
    _watchdog) (($# == 3)) || usage; watchdog "$2" "$3" ;;   # internal: started by start
    *) usage ;;
    esac
}

main "$@"
