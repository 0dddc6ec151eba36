#!/usr/bin/env bash
# Training speed of Horovod's PyTorch API on hvdrun against PyTorch's own DDP: the CNN of
# examples/pytorch/train_horovod.py (horovod.torch, hvd.DistributedOptimizer) and the same model,
# data and loop under DistributedDataParallel over Gloo (bench/python_train_ddp.py, env://
# rendezvous), both launched by the built hvdrun at NP ranks on localhost with the same torch
# thread count (OMP_NUM_THREADS, hvdrun's default of 1 on a shared host). Runs alternate (which
# goes first alternates too) for PAIRS pairs; each run trains EPOCHS epochs on the first LIMIT
# examples and its measure is the last epoch's training steps per second (the mean over ranks;
# the first epoch is warm-up when EPOCHS > 1). Prints every run, every pair's ratio
# (horovod.torch / DDP) and the median ratio, which is judged (goal: at least 1.0).
# A benchmark, not a test: compare ratios within one run only.
# Usage: bench/python_train_bench.sh [BUILD_DIR]   (PAIRS=5 EPOCHS=2 LIMIT=12000 NP=2
#        OMP_NUM_THREADS=1 HVD_PYTHON=/usr/bin/python3)
# Builds nothing: ninja -C build hvdrun hvd_python first. Exits 2 if something is missing, 1 if
# a run failed, 0 otherwise whatever the ratios.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
pairs=${PAIRS:-5} epochs=${EPOCHS:-2} limit=${LIMIT:-12000} np=${NP:-2}
py=${HVD_PYTHON:-/usr/bin/python3}
threads=${OMP_NUM_THREADS:-1}
hvdrun=$build/cli/hvdrun
[ -x "$hvdrun" ] || { echo "missing $hvdrun: ninja -C $build hvdrun hvd_python" >&2; exit 2; }
compgen -G "$build/python/hvd/_native*.so" >/dev/null ||
  { echo "no Python binding in $build/python: ninja -C $build hvd_python" >&2; exit 2; }
"$py" -c 'import torch' 2>/dev/null || { echo "$py cannot import torch (install-deps.sh --torch)" >&2; exit 2; }
export PYTHONPATH="$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1

# run KIND: one job; prints its last epoch's steps/s, or nothing when it failed.
run() {
  local script=examples/pytorch/train_horovod.py
  [ "$1" = ddp ] && script=bench/python_train_ddp.py
  local out
  out=$("$hvdrun" -np "$np" -H "localhost:$np" -x "OMP_NUM_THREADS=$threads" "$py" "$script" \
    --epochs "$epochs" --limit "$limit" 2>&1) || { echo "$1 run failed:" >&2; tail -20 <<<"$out" >&2; return 1; }
  grep -E "^\[1,0\]<stdout>:epoch $epochs: " <<<"$out" | sed -E 's/.* ([0-9.]+) steps\/s .*/\1/'
}

echo "python_train_bench: $np ranks on localhost, $threads torch thread(s) each, $epochs epochs on $limit examples, $pairs pairs"
printf '%-5s %14s %10s %8s\n' pair horovod.torch DDP ratio
ratios=()
for ((i = 1; i <= pairs; i++)); do
  if ((i % 2)); then
    h=$(run hvd) || exit 1
    d=$(run ddp) || exit 1
  else
    d=$(run ddp) || exit 1
    h=$(run hvd) || exit 1
  fi
  [ -n "$h" ] && [ -n "$d" ] || { echo "a run printed no epoch $epochs line" >&2; exit 1; }
  r=$(awk -v h="$h" -v d="$d" 'BEGIN { printf "%.3f", h / d }')
  ratios+=("$r")
  printf '%-5s %10s st/s %6s st/s %7sx\n' "$i" "$h" "$d" "$r"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }')
echo "median ratio horovod.torch / DDP (steps/s): ${median}x (goal: at least 1.0x)"
