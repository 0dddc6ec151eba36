#!/usr/bin/env bash
# The PyTorch example (examples/pytorch/train_horovod.py) as its README command runs it, at 2
# ranks on localhost under the built hvdrun, native or --mpi, on the first LIMIT training
# examples for one epoch: it must end with exit 0 (every rank held the same parameters: the
# script compares their checksums), print its epoch line, and reach at least 50% test accuracy
# (10 classes: chance is 10%; one epoch on 6,000 examples got 63% here).
# Usage: example_check.sh BUILD_DIR native|mpi [LIMIT]
# Exits 77 (ctest: skipped) with the reason when Debian's python3 lacks torch, the binding was
# not built, or the dataset is not installed.
set -euo pipefail
build=$1
mode=$2
limit=${3:-6000}
src=$(cd "$(dirname "$0")/../.." && pwd)
py=${HVD_PYTHON:-/usr/bin/python3}
hvdrun=${HVDRUN:-$build/cli/hvdrun}
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "skipped: $py cannot import torch (bash scripts/install-deps.sh --torch)"
  exit 77
fi
compgen -G "$build/python/hvd/_native*.so" >/dev/null ||
  { echo "skipped: no Python binding in $build/python"; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "skipped: no dataset-fashion-mnist (bash scripts/install-deps.sh)"; exit 77; }
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
flags=()
[ "$mode" = mpi ] && flags=(--mpi)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
"$hvdrun" "${flags[@]}" -np 2 -H localhost:2 --timeout 240 "$py" \
  "$src/examples/pytorch/train_horovod.py" --epochs 1 --limit "$limit" >"$out" 2>&1 || rc=$?
cat "$out"
[ $rc -eq 0 ] || { echo "FAIL: the example exited $rc"; exit 1; }
line=$(grep -E '^\[1,0\]<stdout>:epoch 1: loss [0-9.]+ test accuracy [0-9.]+ ' "$out") ||
  { echo "FAIL: rank 0 printed no 'epoch 1: loss ... test accuracy ...' line"; exit 1; }
accuracy=$(sed -E 's/.*test accuracy ([0-9.]+).*/\1/' <<<"$line")
awk -v a="$accuracy" 'BEGIN { exit !(a >= 0.5) }' ||
  { echo "FAIL: test accuracy $accuracy after one epoch (expected at least 0.5)"; exit 1; }
grep -q '^\[1,1\]<stdout>:epoch' "$out" && { echo "FAIL: rank 1 printed an epoch line (rank 0 only)"; exit 1; }
echo "ok: $mode, 2 ranks, test accuracy $accuracy"
