#!/usr/bin/env bash
# The network check and the interface choice across real network namespaces (issue 11), with
# the hosts of tests/netns/netns_hosts.sh (README.md there has the addresses):
#   1. three hosts; traffic from h2 to h3 is dropped on the probe port: a launch fails before
#      any rank starts, naming exactly that pair; --check-net --json says the same; with the
#      rule removed the launch runs; `hvdrun --mpi` runs the same check before mpirun;
#   2. a host whose chosen address no other host can reach (its data link unplugged) is caught
#      the same way (--network-interface picks it);
#   3. two hosts whose data interfaces have different names (data0, ens5), --network-cidr: each
#      host's own address and interface are exported, a 2-rank libhvd allreduce (Gloo) runs, and
#      an `hvdrun --mpi` job runs;
#   4. the ranks' own connections between two hosts dropped (hvdrun's ports open): the start
#      fails within the Gloo timeout and a margin, not one timeout per pair.
# Usage: netns_net_check.sh BUILD_DIR [WORK_DIR]
# Exit: 0 all passed, 1 a check failed, 77 cannot run here (no root or no network namespaces).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: netns_net_check.sh BUILD_DIR [WORK_DIR]}" && pwd)
work=${2:-$(mktemp -d /tmp/hvd-netns.XXXXXX)}
hosts_sh="$here/netns_hosts.sh"
hvdrun="$build/cli/hvdrun"
check="$build/tests/libhvd_check"
failures=0

cleanup() { bash "$hosts_sh" stop "$work" >/dev/null 2>&1 || true; }
trap cleanup EXIT

bash "$hosts_sh" start "$work" 3 >"$work.start.log" 2>&1
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "SKIP: $(tail -n1 "$work.start.log")"
  exit 77
fi
if [ "$rc" -ne 0 ]; then
  echo "FAIL: netns_hosts.sh start exited $rc:"
  cat "$work.start.log"
  exit 1
fi

in_ns() { bash "$hosts_sh" exec "$work" "$@"; }
ssh_flags=(--ssh-config "$work/ssh_config" --ssh-known-hosts "$work/known_hosts" -p 22)
H1=10.231.0.2 H2=10.231.0.3 H3=10.231.0.4

# run NAME NS ARGS...: hvdrun ARGS inside namespace NS; sets $rc, $out, $err.
run() {
  local name=$1 ns=$2
  shift 2
  in_ns "$ns" "$hvdrun" "${ssh_flags[@]}" "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  out=$(cat "$work/$name.out")
  err=$(cat "$work/$name.err")
}
# pass, fail, expect, has
. "$here/../support/check_helpers.sh"
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

# ---- 1. a dropped pair --------------------------------------------------------------------
# Every namespace is its own network stack, so each agent's probe port is the range's first.
range=31000-31009
in_ns h3 iptables -A INPUT -s "$H2" -p tcp --dport 31000 -j DROP

run drop_launch launcher --port-range "$range" -H "$H1,$H2,$H3" sh -c 'echo rank-started'
expect "a dropped probe stops the launch with exit 68" test "$rc" -eq 68
expect "the message names the pair, the address:port and the result" \
  has "network check failed: host $H2 cannot reach host $H3 at $H3:31000 (timeout" "$err"
expect "no rank started" bash -c "! grep -q rank-started '$work/drop_launch.out' '$work/drop_launch.err'"
expect "exactly one failed probe is listed, with a firewall hint" \
  test "$(grep -c '      hint: ' "$work/drop_launch.err")" -eq 1 -a \
  "$(grep -c 'a firewall drops TCP from' "$work/drop_launch.err")" -eq 1

run drop_check launcher --port-range "$range" --check-net --json -H "$H1,$H2,$H3"
expect "--check-net --json exits 68 with the same probe failed" test "$rc" -eq 68
expect "--check-net --json: one failure, from $H2 to $H3, timeout" test \
  "$(json "$work/drop_check.out" '[(p["from"],p["to"],p["result"]) for p in d["probes"] if p["result"]!="ok"]')" \
  = "[('$H2', '$H3', 'timeout')]"

in_ns h3 iptables -D INPUT -s "$H2" -p tcp --dport 31000 -j DROP

# MPI mode runs the same check before mpirun (its probe ports are not pinned: drop all of h2's
# TCP to h3; SSH comes from the launcher, untouched).
in_ns h3 iptables -A INPUT -s "$H2" -p tcp -j DROP
run drop_mpi launcher --mpi -H "$H1,$H2,$H3" sh -c 'echo rank-started'
expect "--mpi: the same check stops the launch before mpirun, naming the pair" \
  test "$rc" -eq 68 -a -n "$(grep -F "host $H2 cannot reach host $H3 at $H3:" "$work/drop_mpi.err")"
expect "--mpi: no rank started" \
  bash -c "! grep -q rank-started '$work/drop_mpi.out' '$work/drop_mpi.err'"
in_ns h3 iptables -D INPUT -s "$H2" -p tcp -j DROP
run open_launch launcher --port-range "$range" -H "$H1,$H2,$H3" sh -c 'echo rank-started'
expect "with the rule removed, the launch runs every rank" \
  test "$rc" -eq 0 -a "$(grep -c rank-started "$work/open_launch.out")" -eq 3

# ---- 2. a chosen address nobody can reach -------------------------------------------------
# h2 has `ens5` (data network), the others do not and use eth0: unplugging h2's data port on
# the switch leaves h2's choice on a network no other host reaches.
in_ns switch ip link set data-h2 down
run unreachable launcher --network-interface ens5,eth0 -H "$H1,$H2,$H3" sh -c 'echo rank-started'
expect "an unreachable chosen address stops the launch with exit 68" test "$rc" -eq 68
expect "the message names the host and its chosen address" \
  has "cannot reach host $H2 at 10.232.0.3:" "$err"
expect "no rank started (unreachable address)" \
  bash -c "! grep -q rank-started '$work/unreachable.out' '$work/unreachable.err'"
in_ns switch ip link set data-h2 up

# ---- 3. different interface names, one CIDR -----------------------------------------------
run cidr_env launcher --network-cidr 10.232.0.0/24 -H "$H1,$H2" sh -c \
  'echo "env rank=$HOROVOD_RANK addr=$HVD_ADVERTISE_ADDR gloo=$HOROVOD_GLOO_IFACE nccl=$NCCL_SOCKET_IFNAME master=$MASTER_ADDR"'
expect "--network-cidr: h1 exports its own address and interface (data0)" \
  has "env rank=0 addr=10.232.0.2 gloo=data0 nccl=data0 master=10.232.0.2" "$out"
expect "--network-cidr: h2 exports its own address and interface (ens5)" \
  has "env rank=1 addr=10.232.0.3 gloo=ens5 nccl=ens5 master=10.232.0.2" "$out"

run cidr_gloo launcher --network-cidr 10.232.0.0/24 -H "$H1,$H2" "$check" collectives
expect "--network-cidr: a 2-rank libhvd job (Gloo) passes every collective" \
  test "$rc" -eq 0 -a "$(grep -c 'all checks passed' "$work/cidr_gloo.out")" -eq 2

# mpirun's own daemons talk over the CIDR too, so it runs where a host is: on h1, which is on
# both networks (the launcher namespace is not on the data network).
run cidr_mpi h1 --mpi --network-cidr 10.232.0.0/24 -H "$H1,$H2" "$check" collectives
expect "--network-cidr: an hvdrun --mpi job passes every collective" \
  test "$rc" -eq 0 -a "$(grep -c 'all checks passed' "$work/cidr_mpi.out")" -eq 2

# ---- 4. the ranks' own connections dropped (hvdrun's ports open) ---------------------------
# The network check passes (it probes hvdrun's ports), then Gloo's full-mesh connect meets a
# silent link between h1 and h2: each pair waited the Gloo timeout in turn (40 s at 8 s), now
# libhvd's init watchdog ends it at the timeout + 2 s. Found by the chaos suite.
for h in h1 h2; do in_ns "$h" iptables -F; done
in_ns h2 iptables -A INPUT -s "$H1" -p tcp --syn -m multiport ! --dports 31000:31009,22 -j DROP
in_ns h1 iptables -A INPUT -s "$H2" -p tcp --syn -m multiport ! --dports 31000:31009,22 -j DROP
start=$(date +%s)
run gloo_cut launcher --port-range "$range" --gloo-timeout-seconds 4 -np 4 -H "$H1:2,$H2:2" \
  "$check" info
took=$(( $(date +%s) - start ))
expect "ranks cut off from each other fail the start (exit 75 or 3), not hang" \
  test "$rc" -eq 75 -o "$rc" -eq 3
expect "... within the Gloo timeout + 2 s + the launch, not a timeout per pair (took ${took} s)" \
  test "$took" -le 12
expect "... saying why" bash -c "grep -qE 'hvd::init\(\) did not finish within 4 s|Connect timeout' \
  '$work/gloo_cut.out' '$work/gloo_cut.err'"
for h in h1 h2; do in_ns "$h" iptables -F; done

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed; outputs in $work"
  trap - EXIT
  cleanup
  exit 1
fi
echo "all network namespace checks passed"
