#!/usr/bin/env bash
# Runs our pytest suite for hvd.torch (tests/python/test_*.py) with Debian's python3 (or
# $HVD_PYTHON): alone (size 1), or under the built hvdrun at NP ranks on localhost, native or
# --mpi. hvdrun's exit code is the first failed rank's, so the run passes only if every rank did.
# Usage: run_pytest.sh BUILD_DIR alone|native|mpi|mpirun [NP] [pytest args...]
# Exits 77 (ctest: skipped) with the reason when that Python lacks torch or pytest, or the
# binding was not built.
set -euo pipefail
build=$1
mode=$2
np=${3:-2}
shift $(( $# < 3 ? $# : 3 ))
here=$(cd "$(dirname "$0")" && pwd)
py=${HVD_PYTHON:-/usr/bin/python3}
hvdrun=${HVDRUN:-$build/cli/hvdrun}  # ctest passes the built one
if ! "$py" -c 'import torch, pytest' 2>/dev/null; then
  echo "skipped: $py cannot import torch and pytest (bash scripts/install-deps.sh --torch)"
  exit 77
fi
if ! compgen -G "$build/python/hvd/_native*.so" >/dev/null; then
  echo "skipped: no Python binding in $build/python (python3-dev and pybind11-dev at configure time)"
  exit 77
fi
export PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
args=(-m pytest -q -p no:cacheprovider --color=no "$here" "$@")
if "$py" -c 'import pytest_timeout' 2>/dev/null; then
  args+=(--timeout 120)
fi
# The test's own settings reach every rank (hvdrun forwards only some variables by itself).
forward=()
for var in HVDTEST_INIT_ROUNDS; do
  [ -n "${!var:-}" ] && forward+=(-x "$var")
done
case $mode in
  alone) exec "$py" "${args[@]}" ;;
  native) exec "$hvdrun" -np "$np" -H "localhost:$np" "${forward[@]}" "$py" "${args[@]}" ;;
  mpi) exec "$hvdrun" --mpi -np "$np" -H "localhost:$np" "${forward[@]}" "$py" "${args[@]}" ;;
  # Plain Open MPI, no hvdrun: libhvd reads mpirun's own variables (OMPI_COMM_WORLD_*).
  mpirun) exec timeout 600 mpirun --allow-run-as-root --oversubscribe -bind-to none -np "$np" \
            -x PYTHONPATH -x PYTHONDONTWRITEBYTECODE "$py" "${args[@]}" ;;
  *) echo "usage: run_pytest.sh BUILD_DIR alone|native|mpi|mpirun [NP] [pytest args...]" >&2; exit 64 ;;
esac
