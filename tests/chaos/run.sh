#!/usr/bin/env bash
# The chaos suite (tests/chaos/README.md): real jobs over two sshd test hosts, one fault per
# round, the invariants checked after each. Not part of ctest; .ci/run runs a short fixed-seed one.
#
#   tests/chaos/run.sh [--rounds N] [--seed S]      (BUILD_DIR=... for another build folder)
#
# Replays exactly: the same seed and rounds give the same faults, phases and targets (the moment
# within a phase varies with the machine's timing).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD_DIR:-$root/build}
for f in "$build/cli/hvdrun" "$build/tests/chaos_rank"; do
  [ -x "$f" ] || { echo "run.sh: no $f: build first (cmake --build $build)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/hvd-chaos.XXXXXX)
cleanup() {
  bash "$root/tests/sshd/sshd_hosts.sh" stop "$work/sshd" >/dev/null 2>&1 || true
  bash "$root/tests/netns/netns_hosts.sh" stop "$work/nnh" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
bash "$root/tests/sshd/sshd_hosts.sh" start "$work/sshd" 2 >"$work/sshd.log" 2>&1 ||
  { cat "$work/sshd.log"; exit 1; }
set -a
# shellcheck disable=SC1091
. "$work/sshd/hosts.env"
set +a
cp "$HVDTEST_SSH_KNOWN_HOSTS" "$work/known_hosts"
# Two network-namespace hosts for the link faults (tests/netns/), where this machine can have them.
netns_args=(--netns-dir "$work/nnh")
if ! bash "$root/tests/netns/netns_hosts.sh" start "$work/nnh" 2 >"$work/netns.log" 2>&1; then
  netns_args=(--netns-skip "$(tail -n1 "$work/netns.log")")
fi
mkdir -p "$work/rounds"
start=$(date +%s)
rc=0
python3 "$here/chaos.py" --hvdrun "$build/cli/hvdrun" --rank-program "$build/tests/chaos_rank" \
  --hosts "$HVDTEST_SSH_ADDRS" --port "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG" \
  --known-hosts "$work/known_hosts" --work "$work/rounds" --sshd-dir "$work/sshd" "${netns_args[@]}" "$@" || rc=$?
echo "chaos wall time: $(( $(date +%s) - start )) s"
if [ $rc -ne 0 ] && [ -n "$(ls -A "$work/rounds" 2>/dev/null)" ]; then
  kept=/tmp/hvd-chaos-failed.$$
  mv "$work/rounds" "$kept"
  echo "the failed rounds' files are in $kept"
fi
exit $rc
