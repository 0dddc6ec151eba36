#!/usr/bin/env bash
# The README's main-job command: install, build, then train a small MLP on Fashion-MNIST with 2
# ranks on this machine through hvdrun (its local agent: no SSH set-up needed) and libhvd (Gloo).
# Rank 0 prints each epoch's loss, test accuracy, time and the parameter checksum every rank
# must share. NP=4 EPOCHS=5 bash scripts/main-job.sh changes the size.
# MAIN_JOB_ARGS="--no-onednn" passes options on to the PyTorch script.
#
#   bash scripts/main-job.sh --pytorch   the same job as a Python script written for Horovod
#       (examples/pytorch/train_horovod.py: `import horovod.torch as hvd`, a small CNN) on
#       hvdrun's Python binding; it installs Debian's python3-torch (about 830 MB) and builds the
#       binding first.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
pytorch=0
case "${1:-}" in
  "") ;;
  --pytorch) pytorch=1 ;;
  *) echo "usage: bash scripts/main-job.sh [--pytorch]   (NP=N EPOCHS=N BUILD_DIR=DIR)" >&2; exit 64 ;;
esac

np=${NP:-2}
# A folder configured before (CI's Release build) keeps its build type: only a new one is
# configured RelWithDebInfo.
configure=(-S . -B "$build_dir" -G Ninja)
[ -f "$build_dir/CMakeCache.txt" ] || configure+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo)
if [ "$pytorch" -eq 0 ]; then
  bash scripts/install-deps.sh
  cmake "${configure[@]}" >/dev/null
  cmake --build "$build_dir" -j 2 --target hvdrun train_fashion_mnist
  echo "The plan:"
  "$build_dir/cli/hvdrun" --dry-run -np "$np" "$build_dir/examples/train_fashion_mnist"
  echo
  echo "The run:"
  "$build_dir/cli/hvdrun" -np "$np" "$build_dir/examples/train_fashion_mnist" --epochs "${EPOCHS:-3}"
  exit 0
fi

# Debian's python3, which python3-torch is installed into (the first python3 on PATH may be
# another: pyenv, a virtualenv); the binding is built for it.
bash scripts/install-deps.sh --torch
cmake "${configure[@]}" >/dev/null
cmake --build "$build_dir" -j 2 --target hvdrun hvd_python
[ -n "$(compgen -G "$build_dir/python/hvd/_native*.so")" ] ||
  { echo "main-job.sh: the Python binding was not built (see cmake's 'Python binding:' line)" >&2; exit 1; }
export PYTHONPATH="$PWD/$build_dir/python${PYTHONPATH:+:$PYTHONPATH}"
script=(/usr/bin/python3 examples/pytorch/train_horovod.py)
echo "The plan:"
"$build_dir/cli/hvdrun" --dry-run -np "$np" "${script[@]}"
echo
echo "The run:"
# shellcheck disable=SC2086  # MAIN_JOB_ARGS: options, word-split on purpose
"$build_dir/cli/hvdrun" -np "$np" "${script[@]}" --epochs "${EPOCHS:-2}" ${MAIN_JOB_ARGS:-}
