#!/usr/bin/env bash
# The README's main-job command: install, build, then show the plan of a 2-rank job on this
# machine. Native launch is not in this build yet, so this is `hvdrun --dry-run`; when it lands,
# this script runs the training example for real.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}

bash scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build_dir" -j 2 --target hvdrun rank_info

"$build_dir/cli/hvdrun" --dry-run -np "${NP:-2}" "$build_dir/examples/rank_info"
echo
echo "The same plan for scripts, as JSON:"
"$build_dir/cli/hvdrun" --dry-run --json -np "${NP:-2}" "$build_dir/examples/rank_info" |
  head -n 20
echo "  ..."
echo
echo "What each rank would print (rank 0, run by hand with the plan's environment):"
HOROVOD_RANK=0 HOROVOD_SIZE=2 HOROVOD_LOCAL_RANK=0 HOROVOD_LOCAL_SIZE=2 HOROVOD_CROSS_RANK=0 \
  HOROVOD_CROSS_SIZE=1 "$build_dir/examples/rank_info"
