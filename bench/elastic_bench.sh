#!/usr/bin/env bash
# Elastic reset against a full restart: the time from a rank's death to training steps running
# again, on the Fashion-MNIST example, the same job both ways, ROUNDS rounds each (default 5),
# alternating, medians. Goal (issue 22): the elastic reset takes at most half of the restart.
#   elastic: hvdrun -np NP --min-np NP-1 train_fashion_mnist --elastic --commit-every 20: the
#            survivors restore the last commit, form the next generation and go on;
#   restart: hvdrun -np NP --max-restarts 1 --restart-backoff 0 train_fashion_mnist --checkpoint F:
#            hvdrun stops the others, starts every rank again, which load the data and the last
#            checkpoint (the example checkpoints per epoch, so within epoch 1 it starts over).
# In both, rank (worker) 1 kills itself with SIGKILL after step KILL_STEP (default 150) of the
# first attempt or generation and prints the time; rank 0 prints when the first step of each
# attempt or generation is done (the example's --kill-rank, --kill-step, --report-first-step).
# Also shown: the steps each way has to redo (done before the death, lost with it).
# HOSTS (default localhost:NP) and EXTRA (e.g. the sshd fixture's -p/--ssh-config flags) pick
# where; NP (default 3). Builds nothing: ninja -C build hvdrun train_fashion_mnist first.
# Usage: bench/elastic_bench.sh [ROUNDS]   (BUILD_DIR=build by default)
# Exits 0 (skipping) when the dataset is missing, 1 when a run failed, 0 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
rounds=${1:-5}
np=${NP:-3}
hosts=${HOSTS:-localhost:$np}
kill_step=${KILL_STEP:-150}
read -r -a extra <<<"${EXTRA:-}"
hvdrun=$build/cli/hvdrun
train=$(realpath "$build/examples/train_fashion_mnist")
if [ ! -x "$hvdrun" ] || [ ! -x "$train" ]; then
  echo "build first: ninja -C $build hvdrun train_fashion_mnist" >&2
  exit 2
fi
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "SKIP: Fashion-MNIST not installed (Debian package dataset-fashion-mnist)"; exit 0; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
hooks=(--epochs 1 --kill-rank 1 --kill-step "$kill_step" --report-first-step)

# The seconds between the death line and the first-step line of the second attempt/generation.
resume_time() {
  local died resumed
  died=$(grep -o 'killing myself (SIGKILL) after step [0-9]* at [0-9.]*' "$1" | awk '{print $NF}')
  resumed=$(grep -E 'first step of (generation [1-9][0-9]*|this attempt) done at' "$1" |
    awk '{print $NF}' | sort -n | awk -v d="$died" '$1 > d {print; exit}')
  [ -n "$died" ] && [ -n "$resumed" ] || return 1
  echo "$resumed - $died" | bc
}

e=() r=() el=() rl=()
for ((i = 1; i <= rounds; i++)); do
  "$hvdrun" -np "$np" -H "$hosts" "${extra[@]}" --min-np $((np - 1)) "$train" --elastic \
    --commit-every 20 "${hooks[@]}" >"$work/elastic" 2>&1 ||
    { cat "$work/elastic" >&2; echo "FAILED: the elastic run" >&2; exit 1; }
  ! grep -q DIFFER "$work/elastic" ||
    { cat "$work/elastic" >&2; echo "FAILED: parameters differ between ranks" >&2; exit 1; }
  grep -q 'final test accuracy: .*(elastic, 1 resets)' "$work/elastic" ||
    { cat "$work/elastic" >&2; echo "FAILED: the elastic run did not finish after one reset" >&2; exit 1; }
  e+=("$(resume_time "$work/elastic")")
  from=$(grep -o 'generation 1, .* (step [0-9]*)' "$work/elastic" | grep -o 'step [0-9]*' | awk '{print $2}')
  el+=($((kill_step - from)))

  rm -f "$work/ckpt"
  "$hvdrun" -np "$np" -H "$hosts" "${extra[@]}" --max-restarts 1 --restart-backoff 0 "$train" \
    --checkpoint "$work/ckpt" "${hooks[@]}" >"$work/restart" 2>&1 ||
    { cat "$work/restart" >&2; echo "FAILED: the restarted run" >&2; exit 1; }
  grep -q 'final test accuracy' "$work/restart" ||
    { cat "$work/restart" >&2; echo "FAILED: the restarted run did not finish" >&2; exit 1; }
  r+=("$(resume_time "$work/restart")")
  rl+=("$kill_step")  # no checkpoint within epoch 1: the second attempt starts at step 0
  echo "round $i: death to steps again: elastic ${e[-1]}s (redoes ${el[-1]} steps)," \
    "restart ${r[-1]}s (redoes ${rl[-1]} steps)"
done
em=$(printf '%s\n' "${e[@]}" | median)
rm_=$(printf '%s\n' "${r[@]}" | median)
echo "median over $rounds rounds, $np ranks on $hosts: death to steps again: elastic ${em}s," \
  "restart ${rm_}s; ratio $(echo "scale=3; $em / $rm_" | bc) (goal: at most 0.5)"
