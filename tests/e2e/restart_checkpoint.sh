#!/usr/bin/env bash
# hvdrun --max-restarts with the Fashion-MNIST example's --checkpoint: rank 1 of the first attempt
# dies by SIGKILL right after the first epoch's checkpoint; the second attempt resumes at epoch 2
# and reaches the example's usual accuracy, with the same parameters on every rank.
#   restart_checkpoint.sh HVDRUN TRAIN
set -euo pipefail
hvdrun=$1 train=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/rank.sh" <<'RANK'
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$HOROVOD_RANK" = 1 ]; then
  "$TRAIN" --epochs 2 --checkpoint "$CK" & p=$!
  while [ ! -e "$CK" ]; do sleep 0.05; done
  kill -9 $p; exit 137
fi
exec "$TRAIN" --epochs 2 --checkpoint "$CK"
RANK
rc=0
"$hvdrun" --max-restarts 1 --restart-backoff 0 -np 2 -x TRAIN="$train" -x CK="$work/ckpt" \
  sh "$work/rank.sh" >"$work/out" 2>"$work/err" || rc=$?
fail() {
  printf 'restart_checkpoint.sh: FAIL: %s\n--- stdout:\n%s\n--- stderr:\n%s\n' "$1" \
    "$(<"$work/out")" "$(<"$work/err")" >&2
  exit 1
}
[[ $rc == 0 ]] || fail "expected exit 0 after one restart, got $rc"
grep -q "attempt 2 of 2 after rank 1 on localhost exited with code 137" "$work/err" ||
  fail "no banner for the second attempt"
grep -q "resuming from $work/ckpt: 1 epochs done" "$work/out" || fail "the second attempt did not resume"
grep -q "epoch 2/2: .* identical on every rank" "$work/out" || fail "epoch 2 did not run, or ranks differ"
grep -Eq "final test accuracy: (8[0-9]|9[0-9])\.[0-9]+% on 2 ranks" "$work/out" ||
  fail "the restarted run did not reach 80%"
(( $(grep -c "^\[1,0\]<stdout>:epoch 1/2" "$work/out") == 1 )) || fail "epoch 1 should run once"
echo "ok: restarted after SIGKILL, resumed at epoch 2, $(grep -o 'final test accuracy: [0-9.]*%' "$work/out")"
