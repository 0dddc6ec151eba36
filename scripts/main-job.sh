#!/usr/bin/env bash
# The README's main-job command: install, build, then train a small MLP on Fashion-MNIST with 2
# ranks on this machine through hvdrun (its local agent: no SSH set-up needed) and libhvd (Gloo).
# Rank 0 prints each epoch's loss, test accuracy, time and the parameter checksum every rank
# must share. NP=4 EPOCHS=5 bash scripts/main-job.sh changes the size.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}

bash scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j 2 --target hvdrun train_fashion_mnist

np=${NP:-2}
echo "The plan:"
"$build_dir/cli/hvdrun" --dry-run -np "$np" "$build_dir/examples/train_fashion_mnist"
echo
echo "The run:"
"$build_dir/cli/hvdrun" -np "$np" "$build_dir/examples/train_fashion_mnist" --epochs "${EPOCHS:-3}"
