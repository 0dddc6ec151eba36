#!/usr/bin/env bash
# Training scaling: examples/fashion_mnist (train_fashion_mnist) for EPOCHS epochs at 1 rank on
# localhost (the baseline) and at 2 ranks four ways: localhost native (`hvdrun -np 2`), localhost
# MPI (`hvdrun --mpi -np 2`), and over two sshd test hosts (tests/sshd, 127.0.0.2 and 127.0.0.3,
# one rank each) native and MPI. Per run: time per epoch = the mean of the epochs after the first
# (the first is left out as warm-up; with EPOCHS=1 it is that epoch), as rank 0 prints it (training
# steps plus the loss allreduce, not the test pass, start-up or data loading), and the final test
# accuracy; then one table with the speedup of each against the baseline (1-rank time per epoch /
# N-rank time per epoch). A benchmark, not a test: compare ratios within one run only.
# Builds nothing: ninja -C build hvdrun train_fashion_mnist first.
# Usage: bench/train_bench.sh [BUILD_DIR [TRAIN ARGS...]]   e.g. build --batch-size 64
#   EPOCHS=N (default 2). TRAIN ARGS go to every run after `--epochs N`.
#   HVDTEST_SSHD_DIR=DIR (a running tests/sshd fixture with 2 or more hosts) uses it instead of
#   starting (and stopping) one in a temporary directory.
# Exits 0 (skipping everything) if the dataset is missing, 1 if a run failed (a checksum that
# differs between ranks included), 0 otherwise whatever the speedups.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
shift || true
epochs=${EPOCHS:-2}
[[ $epochs =~ ^[1-9][0-9]*$ ]] || { echo "EPOCHS must be a positive integer, not '$epochs'" >&2; exit 2; }
hvdrun=$build/cli/hvdrun
train=$build/examples/train_fashion_mnist
for f in "$hvdrun" "$train"; do
  [ -x "$f" ] || { echo "missing $f: ninja -C $build hvdrun train_fashion_mnist" >&2; exit 2; }
done
train=$(realpath "$train")  # the ranks on the sshd hosts start in their own working directory

# The dataset: the example's default, or the last --data among the train args.
data=/usr/share/datasets/fashion-mnist
args=("$@")
for ((i = 0; i + 1 < ${#args[@]}; i++)); do
  [ "${args[i]}" = --data ] && data=${args[i + 1]}
done
if ! compgen -G "$data/train-images-idx3-ubyte*" >/dev/null ||
   ! compgen -G "$data/t10k-images-idx3-ubyte*" >/dev/null; then
  echo "SKIP: Fashion-MNIST not found in $data (install the Debian package dataset-fashion-mnist," \
       "or pass --data DIR); nothing measured"
  exit 0
fi

# The sshd test hosts, started and stopped as bench/launch_bench.sh does.
tmp=$(mktemp -d)
own_fixture=""
kh=""
# shellcheck disable=SC2317  # called by the trap
cleanup() {
  if [ -n "$own_fixture" ]; then bash tests/sshd/sshd_hosts.sh stop "$own_fixture" >/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
sshd_ok=1
if [ -n "${HVDTEST_SSHD_DIR:-}" ]; then
  dir=$HVDTEST_SSHD_DIR
else
  dir=$tmp/sshd
  if HVDTEST_SSHD_OWNER_PID=$$ bash tests/sshd/sshd_hosts.sh start "$dir" 2 >"$tmp/sshd.out" 2>&1; then
    own_fixture=$dir
  else
    echo "could not start the sshd test hosts (runs over them are skipped):"
    sed 's/^/  /' "$tmp/sshd.out"
    sshd_ok=0
  fi
fi
if [ $sshd_ok = 1 ]; then
  # shellcheck disable=SC1091
  . "$dir/hosts.env"
  kh=$tmp/known_hosts  # hvdrun may add to it: a copy, as the tests use
  cp "$HVDTEST_SSH_KNOWN_HOSTS" "$kh"
  IFS=, read -r a1 a2 _ <<<"$HVDTEST_SSH_ADDRS,"
  if [ -z "$a1" ] || [ -z "$a2" ]; then echo "$dir has fewer than 2 hosts" >&2; exit 2; fi
  remote=(-H "$a1:1,$a2:1" -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG"
          --ssh-known-hosts "$kh")
fi

cores=$(nproc)
max=$((cores < 2 ? cores : 2))
echo "train_bench: $train, $epochs epochs per run, train args: ${*:-(none)}"
echo "This machine has $cores cores: 2 ranks can reach at most ~${max}x the 1-rank speed" \
     "(each rank trains on half the data, so the ideal is 2x with a core per rank)."
echo "Time per epoch: the mean of the epochs after the first (the first is warm-up;" \
     "with EPOCHS=1 it is that epoch)."
echo

# One run: label, then hvdrun's options. Fills the result arrays.
labels=() ranks=() per_epoch=() epoch_list=() accuracy=() wall=() state=()
status=0
run() {
  local label=$1 np=$2
  shift 2
  local log=$tmp/run${#labels[@]}.log s e rc
  echo "== $label: hvdrun $* $train --epochs $epochs ${args[*]}"
  s=$(date +%s.%N)
  # Drop hvdrun's (or mpirun's) output tags; show the run as it goes.
  "$hvdrun" "$@" "$train" --epochs "$epochs" "${args[@]}" 2>&1 |
    sed -uE 's/^\[[0-9,]+\]<std(out|err)>://' | tee "$log" | sed -u 's/^/  /'
  rc=${PIPESTATUS[0]}
  e=$(date +%s.%N)
  local times acc
  times=$(sed -nE 's|^epoch [0-9]+/[0-9]+: .*, ([0-9.]+) s, parameter checksum .*|\1|p' "$log" |
          tr '\n' ' ')
  acc=$(sed -nE 's/^final test accuracy: ([0-9.]+)% .*/\1/p' "$log")
  labels+=("$label") ranks+=("$np") epoch_list+=("${times% }") wall+=("$(awk -v s="$s" -v e="$e" 'BEGIN {printf "%.1f", e - s}')")
  if [ "$rc" = 0 ] && [ -n "$acc" ] && [ -n "$times" ]; then
    per_epoch+=("$(echo "$times" | awk '{ if (NF == 1) { printf "%.2f", $1; exit }
                                          t = 0; for (i = 2; i <= NF; i++) t += $i
                                          printf "%.2f", t / (NF - 1) }')")
    accuracy+=("$acc%") state+=(ok)
  else
    echo "  FAILED: exit status $rc"
    per_epoch+=(-) accuracy+=("${acc:+$acc%}") state+=("failed ($rc)")
    status=1
  fi
  echo
}
skip() {
  labels+=("$1") ranks+=("$2") per_epoch+=(-) epoch_list+=(-) accuracy+=(-) wall+=(-)
  state+=("skipped: $3")
}

run "1 rank, localhost (baseline)" 1 -np 1
run "2 ranks, localhost, native" 2 -np 2
run "2 ranks, localhost, MPI" 2 --mpi -np 2
if [ $sshd_ok = 1 ]; then
  run "2 ranks, 2 sshd hosts, native" 2 -np 2 "${remote[@]}"
  run "2 ranks, 2 sshd hosts, MPI" 2 --mpi -np 2 "${remote[@]}"
else
  skip "2 ranks, 2 sshd hosts, native" 2 "no sshd hosts"
  skip "2 ranks, 2 sshd hosts, MPI" 2 "no sshd hosts"
fi

base=${per_epoch[0]}
echo "== Summary ($(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), $cores cores, $epochs epochs," \
     "train args: ${*:-(none)})"
printf '%-31s %5s  %-22s %8s  %7s  %9s  %6s  %s\n' configuration ranks "epochs (s)" "s/epoch" \
  speedup "final acc" "wall s" result
for i in "${!labels[@]}"; do
  sp=-
  if [ "$base" != - ] && [ "${per_epoch[i]}" != - ]; then
    sp=$(awk -v b="$base" -v t="${per_epoch[i]}" 'BEGIN {printf "%.2fx", b / t}')
  fi
  printf '%-31s %5s  %-22s %8s  %7s  %9s  %6s  %s\n' "${labels[i]}" "${ranks[i]}" \
    "${epoch_list[i]:--}" "${per_epoch[i]}" "$sp" "${accuracy[i]:--}" "${wall[i]}" "${state[i]}"
done
echo "speedup = 1-rank s/epoch / this row's s/epoch; s/epoch is the mean of the epochs after the" \
     "first (epoch 1 with EPOCHS=1)."
echo "With $cores cores, 2 ranks can reach at most ~${max}x; on a shared or loaded machine expect" \
     "noise of 10% or more between runs (Open MPI busy-polls, so MPI mode suffers most when" \
     "cores are short). The sshd hosts are loopback addresses on this same machine: those rows" \
     "add ssh launch and TCP over loopback, not a real network. wall s includes start-up," \
     "data loading and the test passes."
exit $status
