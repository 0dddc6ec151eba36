#!/usr/bin/env bash
# The founding documents' container job, for real, with podman (docs/container.md, issue 54):
#   1. the base image debian:bookworm from debootstrap (no registry is reachable here), kept in
#      podman's storage between runs (and made again only when it is missing);
#   2. the project's image from the Dockerfile, its first stage replaced by this build's Debian
#      packages (`--build-context build=DIR`: nothing is compiled), the build's apt-get on the
#      host's network (`--network host`) to reach Debian's mirror;
#   3. two workers (c1, c2) on a bridge network made here, key-only sshd on port 12345, one key;
#      from a launcher container of the same image: --check-ssh, train_fashion_mnist on 2 ranks
#      (Gloo, then --mpi: see train_mpi), the checksum identical on both
#      ranks; once from this machine too;
#   4. the traps: a published port with no sshd behind it (a userland forwarder, as rootless
#      Docker's: closed_before_banner; podman's own rootful DNAT: connection_refused), sshd on
#      another port, a key that is not authorized, and rootless Docker's --net=host (the engine in
#      a network namespace of its own): each with --check-ssh's code and hint;
#   5. unless HVDTEST_PODMAN_PYTHON=0: the image plus python3-hvd and Debian's python3-torch
#      (tests/container/python.Containerfile) runs examples/pytorch/train_horovod.py on 2 ranks;
#      with HVDTEST_PODMAN_HOROVOD_MNIST=FILE, also Horovod's own examples/pytorch/pytorch_mnist.py,
#      which you fetch by hand into a scratch folder (it is never part of this repository), on
#      Fashion-MNIST under MNIST's file names (what torchvision's MNIST reader opens).
# Every step's wall time and the image sizes are printed. Every container, network, image and
# network namespace made here is removed on exit, also after a failure; the base image stays.
# Network checks target only the containers' addresses on the bridge made here and loopback
# (127.0.0.202); the ranks of the run launched from this machine connect back to its address on
# that bridge (the bridge's gateway), and the builds' apt-get reaches Debian's mirror.
#
# Needs root, podman, runc, debootstrap (scripts/install-deps.sh --podman), and a Release build
# folder with its packages (scripts/package.sh): BUILD_DIR/*.deb, BUILD_DIR/cli/hvdrun and
# BUILD_DIR/examples/{rank_info,train_fashion_mnist}.
#
#   podman_job.sh [BUILD_DIR]     (default: build-release)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
readonly SRC
readonly BASE=debian:bookworm          # the Dockerfile's FROM
readonly SSH_PORT=12345
readonly TRAP_ADDR=127.0.0.202         # loopback; not the sshd test hosts' 127.0.0.2..65 nor .200
# podman: runc (crun fails on these machines: "cgroups in hybrid mode not supported"), and
# explicit limits (without them runc's setrlimit is refused).
readonly -a PODMAN=(podman --runtime runc)
readonly -a LIMITS=(--ulimit nofile=20000:20000 --ulimit nproc=4096:4096)

build_dir=$(cd "${1:-$SRC/build-release}" && pwd)
hvdrun_host=$build_dir/cli/hvdrun
tag=hvdjob-$$
image=localhost/hvdrun-job:$$
py_image=localhost/hvdrun-job-python:$$
net=$tag
netns=$tag
scratch=$(mktemp -d /tmp/hvd-podman-job.XXXXXX)
containers=()
images=()
made_net=0
made_netns=0
job_start=$(date +%s.%N)
summary=()

cleanup() {
    local rc=$? c
    set +e
    for c in "${containers[@]}"; do "${PODMAN[@]}" rm -f -t 0 "$c" >/dev/null 2>&1; done
    [ "$made_net" -eq 0 ] || podman network rm -f "$net" >/dev/null 2>&1
    [ "$made_netns" -eq 0 ] || ip netns del "$netns" 2>/dev/null
    for c in "${images[@]}"; do podman rmi -f "$c" >/dev/null 2>&1; done
    rm -rf "$scratch"
    local left
    left=$(podman ps -a --format '{{.Names}}' | grep -c "^$tag-" || true)
    [ "$left" -eq 0 ] || echo "podman job: WARNING: $left container(s) $tag-* left behind"
    exit "$rc"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $1"
    if [ $# -gt 1 ] && [ -s "$2" ]; then echo "---- $2 (last 40 lines) ----"; tail -n 40 "$2"; echo "----"; fi
    echo "podman job: FAILED"
    exit 1
}
ok() { echo "ok   $*"; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# step NAME FUNCTION: runs FUNCTION, prints its wall time, keeps it for the summary.
step() {
    local name=$1 t
    t=$(date +%s.%N)
    echo "== $name"
    "$2"
    summary+=("$(printf '%7s s  %s' "$(elapsed "$t")" "$name")")
    echo "   ($name: $(elapsed "$t") s)"
}

[ "$(id -u)" -eq 0 ] || fail "must run as root (rootful podman; rootless is examined below)"
for tool in podman runc debootstrap ip nsenter ss; do
    command -v "$tool" >/dev/null || fail "$tool not found (bash scripts/install-deps.sh --podman)"
done
[ -x "$hvdrun_host" ] || fail "$hvdrun_host not found: build first (scripts/test.sh, BUILD_DIR)"
for name in hvdrun libhvd0 libhvd-dev; do
    compgen -G "$build_dir/${name}_*.deb" >/dev/null || fail "no ${name}_*.deb in $build_dir (run scripts/package.sh)"
done

# A free TCP port on TRAP_ADDR (nothing listens on it on this machine), from 41000-48999.
free_port() {
    local p
    for _ in $(seq 200); do
        p=$((41000 + RANDOM % 8000))
        [ -z "$(ss -Hltn "sport = :$p")" ] && { echo "$p"; return 0; }
    done
    fail "no free port in 41000-48999"
}

# stamp: each line of stdin with the seconds since it started, to see where a build spends them.
stamp() {
    local t0=$EPOCHREALTIME line
    while IFS= read -r line; do
        printf '%6.1f %s\n' "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')" "$line"
    done
}

image_size() { podman image inspect --format '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1e6 }'; }
ip_of() { podman inspect --format '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }

# run_worker NAME HOSTNAME [podman run options...]: a worker of IMAGE (sshd on its port), keys
# from the scratch keys folder unless the options say otherwise. Waits until sshd listens.
run_worker() {
    local name=$tag-$1 host=$2 img=${WORKER_IMAGE:-$image}
    shift 2
    containers+=("$name")
    "${PODMAN[@]}" run -d "${LIMITS[@]}" --name "$name" --hostname "$host" \
        -v "$scratch/keys:/keys:ro" "$@" "$img" worker >/dev/null ||
        fail "podman run worker $name"
    for _ in $(seq 100); do
        "${PODMAN[@]}" exec "$name" hvd-entrypoint health 2>/dev/null && return 0
        sleep 0.2
    done
    podman logs "$name" >"$scratch/$name.log" 2>&1
    fail "worker $name: sshd did not come up in 20 s" "$scratch/$name.log"
}

# launch LOG [hvdrun args...]: hvdrun in a launcher container on the job's network; the workers'
# names resolve through --add-host (podman 4.3's CNI network here has no DNS plugin). Returns
# hvdrun's exit code; everything it printed is in LOG (and shown).
launch() {
    local log=$1 rc=0
    shift
    "${PODMAN[@]}" run --rm "${LIMITS[@]}" --network "$net" "${add_hosts[@]}" \
        -e HVDRUN_KEYS_DIR=/keys -v "$scratch/keys:/keys:ro" "${LAUNCH_IMAGE:-$image}" \
        hvdrun "$@" >"$log" 2>&1 || rc=$?
    grep -v '^hvd-entrypoint:' "$log" | sed 's/^/   | /'
    return "$rc"
}

# expect_code LOG RC CODE HINT: --check-ssh exited 69 with row code CODE and a hint with HINT.
expect_code() {
    [ "$2" -eq 69 ] || fail "--check-ssh exited $2, expected 69" "$1"
    grep -Eq "^[^ ].* $3 " "$1" || fail "no $3 row" "$1"
    grep -q "hint: .*$4" "$1" || fail "the $3 hint lacks '$4'" "$1"
    ok "$3, exit 69, the hint names '$4'"
}

# What an earlier run killed before its cleanup left behind (its shell is gone): containers,
# networks and images named hvdjob-PID / hvdrun-job*:PID.
reap_stale() {
    local name pid
    for name in $(podman ps -a --format '{{.Names}}' | grep -E '^hvdjob-[0-9]+-' || true); do
        pid=${name#hvdjob-}; pid=${pid%%-*}
        kill -0 "$pid" 2>/dev/null || { echo "   removing $name (left by run $pid)"; podman rm -f -t 0 "$name" >/dev/null; }
    done
    for name in $(podman network ls --format '{{.Name}}' | grep -E '^hvdjob-[0-9]+$' || true); do
        kill -0 "${name#hvdjob-}" 2>/dev/null || { echo "   removing network $name"; podman network rm -f "$name" >/dev/null; }
    done
    for name in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep -E '^localhost/hvdrun-job(-python)?:[0-9]+$' || true); do
        kill -0 "${name##*:}" 2>/dev/null || { echo "   removing image $name"; podman rmi -f "$name" >/dev/null; }
    done
    for name in $(ip netns list | awk '{print $1}' | grep -E '^hvdjob-[0-9]+$' || true); do
        kill -0 "${name#hvdjob-}" 2>/dev/null || { echo "   removing network namespace $name"; ip netns del "$name"; }
    done
}

# ---- the steps ---------------------------------------------------------------------------------

base_image() {
    if podman image exists "$BASE"; then
        ok "base image $BASE cached ($(image_size "$BASE")); made $(podman image inspect --format '{{.Created}}' "$BASE" | cut -d. -f1)"
        return
    fi
    local rootfs=$scratch/rootfs
    debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian \
        >"$scratch/debootstrap.log" 2>&1 || fail "debootstrap" "$scratch/debootstrap.log"
    # As Debian's own image: the point release, its updates and security, no cached lists.
    rm -f "$rootfs/etc/apt/sources.list"
    cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    # And its dpkg and apt settings: no fsync per unpacked file (the image is rebuilt anyway, and
    # python3-torch's 800 MB unpack is much faster), no translations, no cached .debs.
    echo force-unsafe-io >"$rootfs/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
    echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
    echo 'Acquire::GzipIndexes "true";' >"$rootfs/etc/apt/apt.conf.d/docker-gzip-indexes"
    cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb
    tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$BASE" >"$scratch/import.log" 2>&1 ||
        fail "podman import" "$scratch/import.log"
    rm -rf "$rootfs"
    ok "base image $BASE made by debootstrap --variant=minbase bookworm ($(image_size "$BASE"))"
}

build_image() {
    # The Dockerfile's `build` stage is replaced by a folder holding what it would produce
    # (/debs: the packages and the two stripped example programs): podman skips the stage.
    mkdir -p "$scratch/debs-context/debs"
    cp "$build_dir"/hvdrun_*.deb "$build_dir"/libhvd0_*.deb "$build_dir"/libhvd-dev_*.deb \
        "$scratch/debs-context/debs/"
    install -s -m 0755 "$build_dir/examples/rank_info" "$build_dir/examples/train_fashion_mnist" \
        "$scratch/debs-context/debs/"
    images+=("$image")
    "${PODMAN[@]}" build --pull=never --layers=false --network host \
        --build-context build="$scratch/debs-context" -t "$image" -f "$SRC/Dockerfile" "$SRC" \
        2>&1 | stamp >"$scratch/build.log" || fail "podman build" "$scratch/build.log"
    grep -E '^ *[0-9.]+ (\[[0-9/]+\] STEP|\[[0-9/]+\] COMMIT|Fetched)' "$scratch/build.log" | sed 's/^/   | /'
    grep -q 'STEP.*AS build' "$scratch/build.log" && fail "the build stage ran (it compiles)" "$scratch/build.log"
    ok "image $image: $(image_size "$image") ($(podman image inspect --format '{{len .RootFS.Layers}}' "$image") layers, the base's $(image_size "$BASE") included)"
    echo "   | $("${PODMAN[@]}" run --rm "${LIMITS[@]}" --network none "$image" hvdrun --version 2>/dev/null)"
}

start_workers() {
    podman network create "$net" >/dev/null
    made_net=1
    subnet=$(podman network inspect --format '{{range .Subnets}}{{.Subnet}}{{end}}' "$net")
    mkdir -p "$scratch/keys"
    ssh-keygen -q -t ed25519 -N '' -C hvd-podman-job -f "$scratch/keys/id_ed25519"
    cp "$scratch/keys/id_ed25519.pub" "$scratch/keys/authorized_keys"
    run_worker c1 c1 --network "$net" -e HVDRUN_KEYS_DIR=/keys
    run_worker c2 c2 --network "$net" -e HVDRUN_KEYS_DIR=/keys
    ip_c1=$(ip_of "$tag-c1")
    ip_c2=$(ip_of "$tag-c2")
    add_hosts=(--add-host "c1:$ip_c1" --add-host "c2:$ip_c2")
    ok "network $net ($subnet): c1 $ip_c1, c2 $ip_c2, sshd on port $SSH_PORT, one key"
}

check_ssh() {
    launch "$scratch/check.log" --check-ssh -H c1,c2 -p "$SSH_PORT" || fail "--check-ssh failed" "$scratch/check.log"
    grep -q 'hvdrun --check-ssh: 2 hosts, 0 failed' "$scratch/check.log" || fail "--check-ssh summary" "$scratch/check.log"
    ok "--check-ssh -H c1,c2 -p $SSH_PORT from a launcher container"
}

# expect_trained LOG: both ranks trained and the checksum was the same on both.
expect_trained() {
    grep -q 'parameter checksum [0-9a-f]* identical on every rank' "$1" || fail "no identical checksum" "$1"
    grep -q '^\[1,1\]<stdout>:rank 1: training on shard' "$1" || fail "rank 1 did not train" "$1"
}

train_gloo() {
    launch "$scratch/gloo.log" -np 2 -H c1:1,c2:1 -p "$SSH_PORT" train_fashion_mnist --epochs 1 ||
        fail "training (Gloo) failed" "$scratch/gloo.log"
    expect_trained "$scratch/gloo.log"
    ok "train_fashion_mnist on c1 and c2 (Gloo): $(grep -o 'checksum [0-9a-f]* identical on every rank' "$scratch/gloo.log")"
}

train_mpi() {
    # Without --network-cidr: hvdrun's own btl_tcp_if_include, each host's address as a /31.
    # As a /32 Open MPI 4.1 read it as /0 (opal_net_prefix2netmask shifts 1 by 32): every
    # interface matched, loopback too, a rank connected to 127.0.0.1 (itself) for its peer and
    # MPI_Init hung until the Gloo timeout (docs/container.md).
    launch "$scratch/mpi.log" --mpi -np 2 -H c1:1,c2:1 -p "$SSH_PORT" \
        train_fashion_mnist --epochs 1 || fail "training (--mpi) failed" "$scratch/mpi.log"
    expect_trained "$scratch/mpi.log"
    ok "train_fashion_mnist on c1 and c2 (--mpi): $(grep -o 'checksum [0-9a-f]* identical on every rank' "$scratch/mpi.log")"
}

from_host() {
    local -a ssh_opts=(-p "$SSH_PORT" -i "$scratch/keys/id_ed25519"
                       --ssh-known-hosts "$scratch/known_hosts" --agent-path /usr/bin/hvdrun)
    "$hvdrun_host" --check-ssh -H "$ip_c1,$ip_c2" "${ssh_opts[@]}" >"$scratch/host-check.log" 2>&1 ||
        fail "--check-ssh from this machine" "$scratch/host-check.log"
    sed 's/^/   | /' "$scratch/host-check.log"
    ok "--check-ssh -H $ip_c1,$ip_c2 from this machine"
    # The ranks' working directory: this machine's current one does not exist in the image.
    "$hvdrun_host" -np 2 -H "$ip_c1:1,$ip_c2:1" "${ssh_opts[@]}" --wd /work \
        train_fashion_mnist --epochs 1 >"$scratch/host-train.log" 2>&1 ||
        fail "training from this machine" "$scratch/host-train.log"
    expect_trained "$scratch/host-train.log"
    ok "train_fashion_mnist on c1 and c2 launched from this machine: $(grep -o 'checksum [0-9a-f]* identical' "$scratch/host-train.log")"
}

# Trap 1: the second seed's `docker run -p 12345:22`: published, and nothing listens on port 22
# in the container (sshd is on 12345). Through a userland forwarder (rootlessport, RootlessKit's
# port driver, as rootless Docker and rootless podman publish ports): the forwarder accepts and
# closes, ssh says kex_exchange_identification. Through rootful podman's own publishing
# (iptables DNAT on the bridge): the container refuses.
trap_published() {
    local rc port
    if [ ! -c /dev/net/tun ]; then
        echo "   skipped the userland forwarder (slirp4netns needs /dev/net/tun; this machine has none)"
    else
    port=$(free_port)
    run_worker t-forward t-forward -e HVDRUN_KEYS_DIR=/keys \
        --network slirp4netns:port_handler=rootlesskit -p "$TRAP_ADDR:$port:22"
    rc=0
    "$hvdrun_host" --check-ssh -H "$TRAP_ADDR" -p "$port" -i "$scratch/keys/id_ed25519" \
        --ssh-known-hosts "$scratch/known_hosts" >"$scratch/trap1.log" 2>&1 || rc=$?
    sed 's/^/   | /' "$scratch/trap1.log"
    expect_code "$scratch/trap1.log" "$rc" closed_before_banner "port forwarder"
    echo "   OpenSSH's own words: $(ssh -o BatchMode=yes -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o ConnectTimeout=10 -p "$port" "$TRAP_ADDR" true 2>&1 | head -1)"
    fi
    port=$(free_port)
    run_worker t-dnat t-dnat -e HVDRUN_KEYS_DIR=/keys --network "$net" -p "$TRAP_ADDR:$port:22"
    rc=0
    "$hvdrun_host" --check-ssh -H "$TRAP_ADDR" -p "$port" -i "$scratch/keys/id_ed25519" \
        --ssh-known-hosts "$scratch/known_hosts" >"$scratch/trap1b.log" 2>&1 || rc=$?
    sed 's/^/   | /' "$scratch/trap1b.log"
    expect_code "$scratch/trap1b.log" "$rc" connection_refused "start sshd on port $port"
}

# Trap 2: sshd listens on another port than the launcher's -p.
trap_other_port() {
    local rc=0 ip
    run_worker t-port c3 --network "$net" -e HVDRUN_KEYS_DIR=/keys -e HVDRUN_SSH_PORT=2222
    ip=$(ip_of "$tag-t-port")
    add_hosts+=(--add-host "c3:$ip")
    launch "$scratch/trap2.log" --check-ssh -H c3 -p "$SSH_PORT" || rc=$?
    expect_code "$scratch/trap2.log" "$rc" connection_refused "start sshd on port $SSH_PORT"
}

# Trap 3: the worker does not have the launcher's key (another key is authorized).
trap_key() {
    local rc=0 ip
    ssh-keygen -q -t ed25519 -N '' -C other -f "$scratch/other_key"
    run_worker t-key c4 --network "$net" -e "HVDRUN_AUTHORIZED_KEYS=$(cat "$scratch/other_key.pub")"
    ip=$(ip_of "$tag-t-key")
    add_hosts+=(--add-host "c4:$ip")
    launch "$scratch/trap3.log" --check-ssh -H c4 -p "$SSH_PORT" || rc=$?
    expect_code "$scratch/trap3.log" "$rc" auth_denied "authorized_keys"
}

# Trap 4: the first seed's rootless Docker `--net=host`. Rootless Docker runs its daemon inside
# RootlessKit's network namespace, so the container's "host" network is that namespace, not the
# machine's: sshd listens there and nothing on the machine. Rootless podman itself cannot show it
# (its --net=host is the machine's namespace), so the engine is put in a namespace of its own:
# podman run --net=host under nsenter --net.
trap_net_host() {
    local rc=0 port listening=''
    port=$(free_port)
    ip netns add "$netns"
    made_netns=1
    ip netns exec "$netns" ip link set lo up
    containers+=("$tag-t-nethost")
    nsenter --net="/run/netns/$netns" "${PODMAN[@]}" run -d "${LIMITS[@]}" --name "$tag-t-nethost" \
        --net=host -e HVDRUN_KEYS_DIR=/keys -e HVDRUN_SSH_PORT="$port" -v "$scratch/keys:/keys:ro" \
        "$image" worker >/dev/null || fail "podman run --net=host in $netns"
    for _ in $(seq 100); do
        listening=$(ip netns exec "$netns" ss -Hltn "sport = :$port")
        [ -n "$listening" ] && break
        sleep 0.2
    done
    [ -n "$listening" ] || fail "sshd did not listen in $netns"
    [ -z "$(ss -Hltn "sport = :$port")" ] || fail "port $port listens on the machine too"
    echo "   sshd listens on port $port in the engine's namespace; on the machine: nothing"
    "$hvdrun_host" --check-ssh -H "$TRAP_ADDR" -p "$port" -i "$scratch/keys/id_ed25519" \
        --ssh-known-hosts "$scratch/known_hosts" >"$scratch/trap4.log" 2>&1 || rc=$?
    sed 's/^/   | /' "$scratch/trap4.log"
    expect_code "$scratch/trap4.log" "$rc" connection_refused "rootless Docker"
}

# Rootless podman on this machine, for the record: what works and what does not.
rootless_note() {
    local tun
    tun=$(stat -c '%A %U' /dev/net/tun 2>/dev/null || echo missing)
    echo "   rootless podman: --net=host shares the machine's network namespace (no RootlessKit"
    echo "   namespace in between: the trap is rootless Docker's); its own networking (slirp4netns,"
    echo "   rootlessport) needs /dev/net/tun, here: $tun"
    case $tun in
    crw-rw-rw-*) ;;
    *) echo "   -> a user cannot open it: rootless podman's port publishing cannot start here" ;;
    esac
}

python_job() {
    local ctx=$scratch/python-context
    mkdir -p "$ctx"
    compgen -G "$build_dir/python3-hvd_*.deb" >/dev/null ||
        fail "no python3-hvd_*.deb in $build_dir (the build lacks the Python binding: install-deps.sh --torch)"
    cp "$build_dir"/python3-hvd_*.deb "$ctx/python3-hvd.deb"
    cp -r "$SRC/examples/pytorch" "$ctx/pytorch"
    images+=("$py_image")
    local t
    t=$(date +%s.%N)
    "${PODMAN[@]}" build --pull=never --layers=false --network host --build-arg "HVD_IMAGE=$image" \
        -t "$py_image" -f "$SRC/tests/container/python.Containerfile" "$ctx" \
        2>&1 | stamp >"$scratch/py-build.log" || fail "podman build (python)" "$scratch/py-build.log"
    grep -E '^ *[0-9.]+ (\[[0-9/]+\] STEP|\[[0-9/]+\] COMMIT|STEP|COMMIT|Fetched|Unpacking python3-torch|Setting up python3-torch)' \
        "$scratch/py-build.log" | sed 's/^/   | /'
    ok "image $py_image: $(image_size "$py_image") (python3-hvd, python3-torch) in $(elapsed "$t") s"
    WORKER_IMAGE=$py_image run_worker p1 p1 --network "$net" -e HVDRUN_KEYS_DIR=/keys
    WORKER_IMAGE=$py_image run_worker p2 p2 --network "$net" -e HVDRUN_KEYS_DIR=/keys
    add_hosts+=(--add-host "p1:$(ip_of "$tag-p1")" --add-host "p2:$(ip_of "$tag-p2")")
    LAUNCH_IMAGE=$py_image launch "$scratch/py.log" -np 2 -H p1:1,p2:1 -p "$SSH_PORT" \
        /usr/bin/python3 /opt/hvd-examples/pytorch/train_horovod.py --epochs 1 --limit 6000 ||
        fail "train_horovod.py failed" "$scratch/py.log"
    grep -q 'checksum' "$scratch/py.log" || fail "train_horovod.py printed no checksum" "$scratch/py.log"
    ok "examples/pytorch/train_horovod.py (import horovod.torch) on p1 and p2"
    [ -n "${HVDTEST_PODMAN_HOROVOD_MNIST:-}" ] || return 0
    horovod_mnist
}

# Horovod's pytorch_mnist.py as the founding documents ran it (horovodrun -np 2 -H ip1:1,ip2:1
# -p 12345 python pytorch_mnist.py), on two more workers that see the file and the data.
horovod_mnist() {
    local file data=$scratch/mnist
    file=$(readlink -f "$HVDTEST_PODMAN_HOROVOD_MNIST")
    [ -f "$file" ] || fail "HVDTEST_PODMAN_HOROVOD_MNIST=$HVDTEST_PODMAN_HOROVOD_MNIST is not a file"
    mkdir -p "$data/MNIST/raw"
    for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
        gunzip -c "/usr/share/datasets/fashion-mnist/$f.gz" >"$data/MNIST/raw/$f" ||
            fail "no /usr/share/datasets/fashion-mnist/$f.gz (dataset-fashion-mnist)"
    done
    local -a mounts=(-v "$file:/horovod/pytorch_mnist.py:ro" -v "$data:/data:ro")
    WORKER_IMAGE=$py_image run_worker h1 h1 --network "$net" -e HVDRUN_KEYS_DIR=/keys "${mounts[@]}"
    WORKER_IMAGE=$py_image run_worker h2 h2 --network "$net" -e HVDRUN_KEYS_DIR=/keys "${mounts[@]}"
    add_hosts+=(--add-host "h1:$(ip_of "$tag-h1")" --add-host "h2:$(ip_of "$tag-h2")")
    LAUNCH_IMAGE=$py_image launch "$scratch/hmnist.log" -np 2 -H h1:1,h2:1 -p "$SSH_PORT" \
        python3 /horovod/pytorch_mnist.py --epochs 1 --data-dir /data >/dev/null ||
        { grep -v 'Train Epoch' "$scratch/hmnist.log" | tail -n 30; fail "pytorch_mnist.py failed"; }
    grep -v 'Train Epoch\|Warning\|warn\|return F\.\|tensor = ' "$scratch/hmnist.log" |
        grep -v '^hvd-entrypoint:' | sed 's/^/   | /'
    grep -q 'Test set: Average loss' "$scratch/hmnist.log" || fail "pytorch_mnist.py: no test result" "$scratch/hmnist.log"
    ok "Horovod's pytorch_mnist.py ($HVDTEST_PODMAN_HOROVOD_MNIST) on h1 and h2"
}

reap_stale
step "base image ($BASE)" base_image
step "image build (podman, from $build_dir's packages)" build_image
step "two workers on a bridge network" start_workers
step "launcher: hvdrun --check-ssh -H c1,c2 -p $SSH_PORT" check_ssh
step "launcher: hvdrun -np 2 -H c1:1,c2:1 train_fashion_mnist --epochs 1" train_gloo
step "launcher: hvdrun --mpi -np 2 -H c1:1,c2:1 train_fashion_mnist --epochs 1" train_mpi
step "this machine: hvdrun --check-ssh, then the training, over the bridge" from_host
step "trap: port published, nothing behind it" trap_published
step "trap: sshd on another port" trap_other_port
step "trap: key not authorized" trap_key
step "trap: rootless Docker's --net=host" trap_net_host
rootless_note
if [ "${HVDTEST_PODMAN_PYTHON:-1}" != 0 ]; then
    extra=''
    [ -z "${HVDTEST_PODMAN_HOROVOD_MNIST:-}" ] || extra=", Horovod's pytorch_mnist.py"
    step "Python: python3-torch image, train_horovod.py on 2 ranks$extra" python_job
else
    echo "== Python job skipped (HVDTEST_PODMAN_PYTHON=0)"
fi

echo "podman job: step times"
printf '   %s\n' "${summary[@]}"
echo "podman job: image $image $(image_size "$image")$( [ "${HVDTEST_PODMAN_PYTHON:-1}" = 0 ] || echo ", $py_image $(image_size "$py_image")")"
echo "podman job: passed in $(elapsed "$job_start") s"
