#!/usr/bin/env bash
# The README's main-job command: install, build, then run a real 2-rank job on this machine
# through hvdrun's agent (no SSH set-up needed). Until libhvd and the training example land, the
# ranks run examples/rank_info, which reads and prints the rank contract hvdrun gave it.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}

bash scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j 2 --target hvdrun rank_info

echo "The plan:"
"$build_dir/cli/hvdrun" --dry-run -np "${NP:-2}" "$build_dir/examples/rank_info"
echo
echo "The run:"
"$build_dir/cli/hvdrun" -np "${NP:-2}" "$build_dir/examples/rank_info"
