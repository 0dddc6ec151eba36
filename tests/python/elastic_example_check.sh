#!/usr/bin/env bash
# The elastic PyTorch example (examples/pytorch/train_horovod_elastic.py) over two sshd test
# hosts (tests/sshd/README.md; indices 39 and 43 of the fixture's, which no other test uses):
# it starts with 2 ranks on host A, worker 1 is SIGKILLed at batch 10 (--kill), and the host
# discovery script adds host B (1 slot) from its 6th run on (about 6 s in: before or after the
# kill, depending on the machine's speed; either order must work). The job must end with
# exit 0 after 2 epochs on the first LIMIT examples: the survivor went back to its last commit
# and on in a smaller world (a reset), host B's rank joined and took the state (the example
# compares every rank's parameter checksum at each epoch's end and exits non-zero if they
# differ), and the test accuracy is at least 50%.
# Usage: elastic_example_check.sh BUILD_DIR [LIMIT]   (HVDTEST_SSHD_DIR: the running fixture)
# Exits 77 (ctest: skipped) with the reason when torch, the binding or the dataset is missing.
set -euo pipefail
build=$1
limit=${2:-6000}
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${HVD_PYTHON:-/usr/bin/python3}
hvdrun=${HVDRUN:-$build/cli/hvdrun}
"$py" -c 'import torch' 2>/dev/null ||
  { echo "skipped: $py cannot import torch (bash scripts/install-deps.sh --torch)"; exit 77; }
compgen -G "$build/python/hvd/_native*.so" >/dev/null ||
  { echo "skipped: no Python binding in $build/python"; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "skipped: no dataset-fashion-mnist (bash scripts/install-deps.sh)"; exit 77; }
[ -f "${HVDTEST_SSHD_DIR:-}/hosts.env" ] ||
  { echo "elastic_example_check.sh: no sshd test hosts in '${HVDTEST_SSHD_DIR:-}'" >&2; exit 2; }
set -a; . "$HVDTEST_SSHD_DIR/hosts.env"; set +a
IFS=, read -r -a addrs <<<"$HVDTEST_SSH_ADDRS"
a=${addrs[39]} b=${addrs[43]}
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/discover.sh" <<EOS
#!/bin/sh
n=\$(cat "$work/runs" 2>/dev/null || echo 0); n=\$((n + 1)); echo \$n >"$work/runs"
echo $a:2
[ \$n -ge 6 ] && echo $b:1
exit 0
EOS
chmod +x "$work/discover.sh"

rc=0
"$hvdrun" -np 2 --min-np 1 --host-discovery-script "$work/discover.sh" --discovery-interval 1 \
  -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG" \
  --ssh-known-hosts "$HVDTEST_SSH_KNOWN_HOSTS" --ssh-host-key-policy strict --timeout 280 \
  -x PYTHONPATH -x PYTHONDONTWRITEBYTECODE "$py" "$src/examples/pytorch/train_horovod_elastic.py" \
  --epochs 2 --limit "$limit" --kill 1:10 >"$work/out" 2>&1 || rc=$?
cat "$work/out"
fail() { echo "FAIL: $*"; exit 1; }
[ $rc -eq 0 ] || fail "the example exited $rc"
grep -q '<stdout>:worker 1: killed at batch 10' "$work/out" || fail "worker 1 was not killed at batch 10"
# The survivors went on after the kill (whether host B joined before or after it).
awk '/<stdout>:worker 1: killed at batch 10/ { k = 1 } k && /<stdout>:reset: [0-9]+ ranks now/ { r = 1 }
     END { exit !r }' "$work/out" || fail "no reset after the kill"
grep -qE "elastic: generation [0-9]+: .*growing: $b#0" "$work/out" || fail "host $b did not join"
line=$(grep -E '<stdout>:epoch 2: test accuracy [0-9.]+ on [0-9]+ ranks' "$work/out") ||
  fail "no 'epoch 2: test accuracy' line"
accuracy=$(sed -E 's/.*test accuracy ([0-9.]+).*/\1/' <<<"$line")
awk -v x="$accuracy" 'BEGIN { exit !(x >= 0.5) }' || fail "test accuracy $accuracy (expected at least 0.5)"
echo "ok: killed, reset, $b joined; test accuracy $accuracy after 2 epochs"
