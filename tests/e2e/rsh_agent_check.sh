#!/usr/bin/env bash
# --rsh-agent (docs/launching.md): each host's agent started by a command of the user's instead
# of SSH, checked with real agents, real ranks and a real 2-rank libhvd job:
#   1. a fake kubectl (tests/support/fake_kubectl.py: `exec -i POD -- CMD` runs CMD here and
#      relays its streams, as kubectl's client does) with pod names as hosts: the dry run shows
#      each host's exact argv; a libhvd job (Gloo) runs across the "pods"; a template without
#      {host} gets the host as its next word;
#   2. each way the command can fail (not found, ends before the agent's hello, hangs) is a
#      per-host error that quotes its stderr and its command line;
#      under --mpi, mpirun's daemons start through the command as well;
#   3. bad input is a usage error (64); SSH flags it makes moot get a warning;
#   4. elastic: a host the discovery script adds later starts through the command too;
#   5. kill -9 of a host's command while its ranks run: hvdrun reports the host lost (74) and
#      no rank is left behind;
#   6. as root, where network namespaces work: `ip netns exec {host}` with the namespaces of
#      tests/netns as hosts and hvdrun in the launcher's namespace (the ranks' addresses come
#      from the network both share); skipped with the reason elsewhere.
# Usage: rsh_agent_check.sh BUILD_DIR
# Exit: 0 all passed, 1 a check failed.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: rsh_agent_check.sh BUILD_DIR}" && pwd)
hvdrun="$build/cli/hvdrun"
check="$build/tests/libhvd_check"
kubectl="$here/../support/fake_kubectl.py"
work=$(mktemp -d /tmp/hvd-rsh.XXXXXX)
mark=rsh$RANDOM$RANDOM
# In the environment of every hvdrun this script starts, so of every command, agent and rank
# (the commands pass it on): how leftovers are found. Not exported: not in our own pipelines.
failures=0
netns_dir=""

cleanup() {
  [ -n "$netns_dir" ] && bash "$here/../netns/netns_hosts.sh" stop "$netns_dir" >/dev/null 2>&1
  leftovers | xargs -r kill -9 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

# The processes of this script's jobs still alive (ranks, agents, fake kubectls), but not us.
leftovers() {
  grep -l "HVDTEST_RSH_MARK=$mark" /proc/[0-9]*/environ 2>/dev/null |
    sed 's#/proc/\([0-9]*\)/environ#\1#' | grep -vx "$$" || true
}

# run NAME ARGS...: hvdrun ARGS; sets $rc, $out, $err.
run() {
  local name=$1
  shift
  HVDTEST_RSH_MARK=$mark timeout 120 "$hvdrun" "$@" >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  out=$(cat "$work/$name.out")
  err=$(cat "$work/$name.err")
}
# pass, fail, expect, has
. "$here/../support/check_helpers.sh"

kube="$kubectl exec -i {host} --"
export HVDTEST_FAKE_KUBECTL_LOG="$work/kubectl.log"

# ---- 1. pods through a fake kubectl --------------------------------------------------------
run dry --dry-run -np 2 -H pod-a:1,pod-b:1 --rsh-agent "$kube" "$check" collectives
expect "--dry-run exits 0" test "$rc" -eq 0
expect "--dry-run shows pod-a's exact argv" \
  has "$kubectl exec -i pod-a -- $hvdrun --agent" "$out"
expect "--dry-run shows pod-b's exact argv" \
  has "$kubectl exec -i pod-b -- $hvdrun --agent" "$out"
expect "--dry-run runs nothing" test ! -e "$work/kubectl.log"

run job -np 2 -H pod-a:1,pod-b:1 --rsh-agent "$kube" "$check" collectives
expect "a 2-rank libhvd job (Gloo) across two pods passes every collective" \
  test "$rc" -eq 0 -a "$(grep -c 'all checks passed' "$work/job.out")" -eq 2
expect "each pod's agent was started through kubectl exec, the agent's command as words" \
  test "$(sort "$work/kubectl.log" | tr '\n' '|')" = \
  "pod-a $hvdrun --agent|pod-b $hvdrun --agent|"
expect "the ranks' output is tagged per rank" has "[1,1]<stdout>:" "$out"

cat >"$work/rsh_like" <<'SH'
#!/bin/sh
# rsh-like: HOST COMMAND...: the host comes first, then the command (no {host} in the template).
echo "$1" >>"$HVDTEST_FAKE_KUBECTL_LOG.rsh"
shift
exec "$@"
SH
chmod +x "$work/rsh_like"
run appended -np 2 -H node-1:1,node-2:1 --rsh-agent "$work/rsh_like" sh -c 'echo "rank $HOROVOD_RANK up"'
expect "a template without {host} gets the host as its next word" \
  test "$rc" -eq 0 -a "$(sort "$work/kubectl.log.rsh" | tr '\n' ' ')" = "node-1 node-2 "
expect "... and the job runs" has "rank 1 up" "$out"

run quoted --dry-run -np 1 -H pod-a:1 --rsh-agent "env 'A B={host}' \"{user}@{port}\"" -p 2222 true
expect "quotes keep a word together; {user} and {port} are replaced" \
  has "env 'A B=pod-a' $(id -un)@2222 $hvdrun --agent" "$out"

# Under --mpi: the network check's agents through the command, then mpirun's daemons through
# it too (plm_rsh_agent: hvdrun --rsh-agent-shim, which runs `TEMPLATE sh -c 'orted ...'`;
# Open MPI 5: --prtemca plm_ssh_agent, and its daemon is prted).
if mpirun --version 2>/dev/null | grep -q '(Open MPI) [5-9]\.'; then
  agent_param="--prtemca plm_ssh_agent"
else
  agent_param="-mca plm_rsh_agent"
fi
: >"$work/kubectl.log"
run mpi_dry --dry-run --mpi -np 2 -H pod-a:1,pod-b:1 --rsh-agent "$kube" "$check" collectives
expect "--mpi --dry-run: mpirun's agent is hvdrun's shim, not ssh" \
  has "$agent_param '$hvdrun --rsh-agent-shim'" "$out"
run mpi_job --mpi -np 2 -H pod-a:1,pod-b:1 --rsh-agent "$kube" "$check" collectives
expect "--mpi: a 2-rank libhvd job (MPI) across two pods passes every collective" \
  test "$rc" -eq 0 -a "$(grep -c 'all checks passed' "$work/mpi_job.out")" -eq 2
expect "--mpi: both pods' Open MPI daemons were started through kubectl exec, in sh -c" \
  test "$(grep -cE "^pod-[ab] sh -c .*(orted|prted)" "$work/kubectl.log")" -eq 2
run mpi_user --dry-run --mpi -H pod-a --rsh-agent "kubectl exec -i {host} --user={user} --" true
expect "--mpi with {user} in the template is a usage error" \
  test "$rc" -eq 64 -a -n "$(grep -F "{user} and {port} cannot be filled in" <<<"$err")"

# ---- 2. the command fails ------------------------------------------------------------------
run notfound -np 1 -H pod-a:1 --rsh-agent "/no/such/kubectl exec -i {host} --" true
expect "a command that is not there: exit 127" test "$rc" -eq 127
expect "... naming the host, why, and the command" \
  has "pod-a: cannot start the --rsh-agent command" "$err"
expect "... with its command line" has "/no/such/kubectl exec -i pod-a -- $hvdrun --agent" "$err"

HVDTEST_FAKE_KUBECTL_FAIL=pod-b run failing -np 2 -H pod-a:1,pod-b:1 --rsh-agent "$kube" true
expect "a command that ends before the agent's hello: exit 127" test "$rc" -eq 127
expect "... quoting its stderr" has 'pods "pod-b" not found' "$err"
expect "... with its exit status and command line" \
  has "pod-b: the --rsh-agent command exited with status 1 before the agent answered" "$err"
expect "... and the command to run by hand" \
  has "the command: $kubectl exec -i pod-b -- $hvdrun --agent" "$err"

HVDTEST_FAKE_KUBECTL_HANG=pod-b run hang -np 2 -H pod-a:1,pod-b:1 --start-timeout 3 \
  --rsh-agent "$kube" true
expect "a command that hangs: the start-up timeout (75)" test "$rc" -eq 75
expect "... names the phase, the late host and its command" \
  has "in the agent handshake phase; late: pod-b; the command for pod-b: $kubectl exec -i pod-b" "$err"

# ---- 3. bad input --------------------------------------------------------------------------
for bad in "" "   " "kubectl exec -i '{host}" "kubectl exec {pod} --" "kubectl exec -i {host} \\"; do
  run bad -H pod-a --rsh-agent "$bad" true
  expect "--rsh-agent '$bad' is a usage error (64)" \
    test "$rc" -eq 64 -a -n "$(grep -F -- "--rsh-agent '$bad'" <<<"$err")"
done
run with_srun -H pod-a --launcher srun --rsh-agent "$kube" true
expect "--rsh-agent with --launcher srun is a usage error" \
  test "$rc" -eq 64 -a -n "$(grep -F -- "--rsh-agent and --launcher srun were both given" <<<"$err")"
run with_check --check-ssh -H pod-a --rsh-agent "$kube"
expect "--rsh-agent with --check-ssh is a usage error" \
  test "$rc" -eq 64 -a -n "$(grep -F -- "--rsh-agent and --check-ssh were both given" <<<"$err")"
: >"$work/id_key"
run ssh_flags --dry-run -H pod-a -p 2222 -i "$work/id_key" --rsh-agent "$kube" true
expect "SSH flags it makes moot are named in a warning" \
  has "--rsh-agent starts the agents without SSH: -p, -i have no effect" "$out$err"

# ---- 4. elastic: a joining host through the command ----------------------------------------
# Runs 1-2 of the discovery: pod-a:2; from run 3 on also pod-c:1, which joins with one rank.
cat >"$work/discover" <<SH
#!/bin/sh
n=\$(cat "$work/count" 2>/dev/null || echo 0)
n=\$((n + 1))
echo \$n >"$work/count"
echo pod-a:2
[ \$n -ge 3 ] && echo pod-c:1
exit 0
SH
chmod +x "$work/discover"
: >"$work/kubectl.log"
run elastic --host-discovery-script "$work/discover" --discovery-interval 0.5 --min-np 1 \
  --rsh-agent "$kube" -x ELASTIC_CHECK_STEP_MS=100 "$build/tests/elastic_check" 60
expect "elastic: the job ends well" test "$rc" -eq 0
expect "elastic: the joining host's agent was started through kubectl exec" \
  test "$(grep -c '^pod-c ' "$work/kubectl.log")" -ge 1
expect "elastic: ... came up and passed the network check" \
  has "elastic: the agent on pod-c is up; checking its network" "$err"
expect "elastic: ... and its rank joined a generation of 3" \
  has "worker 2: generation 1 rank 2 size 3" "$out"

# ---- 5. kill -9 of a host's command mid-job ------------------------------------------------
: >"$work/kubectl.log"
HVDTEST_RSH_MARK=$mark "$hvdrun" -np 2 -H pod-a:1,pod-b:1 --rsh-agent "$kube" \
  sh -c 'echo started; sleep 600' \
  >"$work/kill.out" 2>"$work/kill.err" &
hvd_pid=$!
for _ in $(seq 1 100); do
  [ "$(grep -c started "$work/kill.out")" -ge 2 ] && break
  sleep 0.1
done
victim=$(pgrep -f "fake_kubectl.py exec -i pod-b" | head -1)
kill -9 "$victim"
wait "$hvd_pid"
rc=$?
out=$(cat "$work/kill.out")
err=$(cat "$work/kill.err")
expect "kill -9 of pod-b's kubectl: the host is lost (74)" test "$rc" -eq 74
expect "... the message names the host and the command" \
  has "lost the agent on pod-b while the job ran (its --rsh-agent command ended" "$err"
sleep 2
left=$(leftovers | tr '\n' ' ')
rc=0
expect "... and no rank or agent is left behind (left: ${left:-none})" test -z "$left"

# ---- 6. network namespaces: ip netns exec {host} -------------------------------------------
netns_dir=$work/nnh
bash "$here/../netns/netns_hosts.sh" start "$netns_dir" 2 >"$work/netns.log" 2>&1
nrc=$?
if [ "$nrc" -eq 77 ]; then
  echo "skip: network namespaces: $(tail -n1 "$work/netns.log")"
  netns_dir=""
elif [ "$nrc" -ne 0 ]; then
  rc=$nrc out="" err=$(cat "$work/netns.log")
  fail "netns_hosts.sh start"
  netns_dir=""
else
  set -a; . "$netns_dir/hosts.env"; set +a
  in_launcher() { ip netns exec "$NETNS_LAUNCHER_NS" "$@"; }
  hosts="$NETNS_HOST_NS_1:1,$NETNS_HOST_NS_2:1"
  in_launcher "$hvdrun" --dry-run -np 2 -H "$hosts" --rsh-agent 'ip netns exec {host}' \
    "$check" collectives >"$work/ns_dry.out" 2>"$work/ns_dry.err"
  rc=$? out=$(cat "$work/ns_dry.out") err=$(cat "$work/ns_dry.err")
  expect "netns: the dry run shows ip netns exec NAME AGENT --agent" \
    has "ip netns exec $NETNS_HOST_NS_1 $hvdrun --agent" "$out"
  in_launcher "$hvdrun" -np 2 -H "$hosts" --rsh-agent 'ip netns exec {host}' \
    "$check" collectives >"$work/ns_job.out" 2>"$work/ns_job.err"
  rc=$? out=$(cat "$work/ns_job.out") err=$(cat "$work/ns_job.err")
  expect "netns: a 2-rank libhvd job across two namespaces passes every collective" \
    test "$rc" -eq 0 -a "$(grep -c 'all checks passed' "$work/ns_job.out")" -eq 2
  in_launcher "$hvdrun" -np 2 -H "$hosts" --rsh-agent 'ip netns exec {host}' \
    sh -c 'echo "addr $HOROVOD_RANK $HVD_ADVERTISE_ADDR"' >"$work/ns_addr.out" 2>"$work/ns_addr.err"
  rc=$? out=$(cat "$work/ns_addr.out") err=$(cat "$work/ns_addr.err")
  expect "netns: each host's ranks listen on its address on the launcher's network" \
    test "$rc" -eq 0 -a -n "$(grep -F 'addr 0 10.231.0.2' <<<"$out")" \
    -a -n "$(grep -F 'addr 1 10.231.0.3' <<<"$out")"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all --rsh-agent checks passed"
