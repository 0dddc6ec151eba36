#!/usr/bin/env bash
# Scale: `hvdrun -np N` running `true` over N sshd test hosts (default 192: 12 sshd instances of 16
# loopback addresses), with the launcher's wall time, CPU time and peak RSS, against the floor
# (plain OpenSSH `ssh hK true` to the same hosts, all in parallel) in the same run. The launcher
# holds a few descriptors per remote host; it raises its soft RLIMIT_NOFILE to the hard limit at
# start, so this runs under a soft limit of 1024 (the usual default) to show that it needs to. A
# last run with soft and hard limit 512 shows what happens when it cannot: a clear error.
# Exits 1 if the main launch failed.
# Usage: bench/scale_bench.sh [HOSTS [ROUNDS]]   (HVDRUN=path to pick a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
hvdrun=$(realpath "${HVDRUN:-build/cli/hvdrun}")
count=${1:-192}
rounds=${2:-2}
dir=$(mktemp -d)/sshd
HVDTEST_SSHD_OWNER_PID=$$ bash tests/sshd/sshd_hosts.sh start "$dir" "$count" >/dev/null
trap 'bash tests/sshd/sshd_hosts.sh stop "$dir" >/dev/null' EXIT
# shellcheck disable=SC1091
. "$dir/hosts.env"
kh=$(mktemp)
cp "$HVDTEST_SSH_KNOWN_HOSTS" "$kh"
IFS=, read -r -a aliases <<<"$HVDTEST_SSH_ALIASES"

floor() {
  local pids=() h
  for h in "${aliases[@]}"; do ssh -F "$HVDTEST_SSH_CONFIG" "$h" true & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || return 1; done
}
launch() {  # under a soft descriptor limit of 1024, as most shells give
  ulimit -Sn 1024 2>/dev/null || true  # already lower (the 512 run below): keep it
  "$hvdrun" -np "$count" -H "$HVDTEST_SSH_ADDRS" -p "$HVDTEST_SSH_PORT" \
    --ssh-config "$HVDTEST_SSH_CONFIG" --ssh-known-hosts "$kh" --start-timeout 120 true
}

now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
f=() w=() c=() r=()
for ((i = 1; i <= rounds; i++)); do
  s=$(now)
  floor >/dev/null 2>&1 || { echo "FAILED: plain ssh to $count hosts" >&2; exit 1; }
  f+=("$(echo "$(now) - $s" | bc)")
  # GNU time: wall seconds, user+system CPU seconds, peak RSS in KiB of hvdrun itself (its
  # children are the local agent only when a host is local; here every host is remote).
  if ! /usr/bin/time -f '%e %U %S %M' -o "$dir/time.$i" bash -c "$(declare -f launch); \
      hvdrun=$hvdrun count=$count HVDTEST_SSH_ADDRS=$HVDTEST_SSH_ADDRS \
      HVDTEST_SSH_PORT=$HVDTEST_SSH_PORT HVDTEST_SSH_CONFIG=$HVDTEST_SSH_CONFIG kh=$kh launch" \
      >"$dir/out.$i" 2>"$dir/err.$i"; then
    echo "FAILED: hvdrun -np $count (round $i):" >&2
    tail -5 "$dir/err.$i" >&2
    exit 1
  fi
  read -r wall user sys rss <"$dir/time.$i"
  w+=("$wall")
  c+=("$(echo "$user + $sys" | bc)")
  r+=("$rss")
  echo "round $i: plain ssh x$count ${f[-1]}s; hvdrun -np $count ${wall}s wall, ${c[-1]}s CPU, ${rss} KiB peak RSS"
done
fm=$(printf '%s\n' "${f[@]}" | median)
wm=$(printf '%s\n' "${w[@]}" | median)
echo "median: plain ssh x$count in parallel ${fm}s; hvdrun -np $count ${wm}s"
echo "ratio hvdrun/floor: $(echo "scale=2; $wm / $fm" | bc)x"
echo "hvdrun CPU: $(printf '%s\n' "${c[@]}" | median)s; peak RSS: $(printf '%s\n' "${r[@]}" | median) KiB"

# Without room to raise into (soft and hard limit 512): more hosts than the descriptors hold must
# fail with a clear error, not a crash or a hang.
set +e
(ulimit -n 512 && launch) >/dev/null 2>"$dir/err.low"
code=$?
set -e
echo "with soft and hard limit 512: exit $code; $(grep -m1 -i 'error' "$dir/err.low" || tail -1 "$dir/err.low")"
rm -f "$kh"
