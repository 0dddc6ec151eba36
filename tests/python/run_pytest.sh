#!/usr/bin/env bash
# Runs our pytest suite for hvd.torch (tests/python/test_*.py) with Debian's python3 (or
# $HVD_PYTHON): alone (size 1), or under the built hvdrun at NP ranks on localhost, native or
# --mpi; over two sshd test hosts, native or --mpi (HVDTEST_SSHD_DIR: tests/sshd/README.md); inside
# the test Slurm cluster, hvdrun's agents through srun (HVDTEST_SLURM_DIR: tests/slurm/README.md);
# or under plain mpirun. hvdrun's exit code is the first failed rank's, so the run passes only if
# every rank did.
# Usage: run_pytest.sh BUILD_DIR alone|native|mpi|ssh-native|ssh-mpi|slurm|mpirun [NP] [pytest args...]
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
export HVDTEST_HVDRUN=$hvdrun  # test_dead_peer.py starts jobs of its own
args=(-m pytest -q -p no:cacheprovider --color=no "$here" "$@")
if "$py" -c 'import pytest_timeout' 2>/dev/null; then
  args+=(--timeout 120)
fi
# The test's own settings reach every rank (hvdrun forwards only some variables by itself).
forward=()
for var in HVDTEST_INIT_ROUNDS PYTHONPATH PYTHONDONTWRITEBYTECODE; do
  [ -n "${!var:-}" ] && forward+=(-x "$var")
done
case $mode in
  alone) exec "$py" "${args[@]}" ;;
  native) exec "$hvdrun" -np "$np" -H "localhost:$np" "${forward[@]}" "$py" "${args[@]}" ;;
  mpi) exec "$hvdrun" --mpi -np "$np" -H "localhost:$np" "${forward[@]}" "$py" "${args[@]}" ;;
  # Two sshd test hosts on loopback (indices 50 and 51 of the fixture's, which no other test
  # uses), NP/2 ranks on each, the fixture's own config and keys; ranks find the build's package
  # through -x PYTHONPATH, as a user's shared file system would give it to them.
  ssh-native|ssh-mpi)
    [ -f "${HVDTEST_SSHD_DIR:-}/hosts.env" ] || { echo "run_pytest.sh: no sshd test hosts in '${HVDTEST_SSHD_DIR:-}' (HVDTEST_SSHD_DIR)" >&2; exit 2; }
    set -a; . "$HVDTEST_SSHD_DIR/hosts.env"; set +a
    IFS=, read -r -a addrs <<<"$HVDTEST_SSH_ADDRS"
    mpi=(); [ "$mode" = ssh-mpi ] && mpi=(--mpi)
    exec "$hvdrun" "${mpi[@]}" -np "$np" -H "${addrs[50]}:$((np / 2)),${addrs[51]}:$((np - np / 2))" \
      -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG" --ssh-known-hosts "$HVDTEST_SSH_KNOWN_HOSTS" \
      --ssh-host-key-policy strict "${forward[@]}" "$py" "${args[@]}" ;;
  # Inside an allocation of the test Slurm cluster (-N2: two of its nodes, NP/2 ranks each): no
  # -H, hvdrun reads the allocation and starts its agents through srun.
  slurm)
    [ -f "${HVDTEST_SLURM_DIR:-}/slurm.env" ] || { echo "run_pytest.sh: no Slurm test cluster in '${HVDTEST_SLURM_DIR:-}' (HVDTEST_SLURM_DIR)" >&2; exit 2; }
    while IFS= read -r var; do unset "$var"; done < <(compgen -e | grep -E '^(SLURM_|SALLOC_|SRUN_)' || true)
    set -a; . "$HVDTEST_SLURM_DIR/slurm.env"; set +a
    exec salloc --immediate=30 -N2 -n"$np" "$hvdrun" -np "$np" "${forward[@]}" "$py" "${args[@]}" ;;
  # Plain Open MPI, no hvdrun: libhvd reads mpirun's own variables (OMPI_COMM_WORLD_*).
  mpirun) exec timeout 600 mpirun --allow-run-as-root --oversubscribe -bind-to none -np "$np" \
            -x PYTHONPATH -x PYTHONDONTWRITEBYTECODE "$py" "${args[@]}" ;;
  *) echo "usage: run_pytest.sh BUILD_DIR alone|native|mpi|ssh-native|ssh-mpi|slurm|mpirun [NP] [pytest args...]" >&2; exit 64 ;;
esac
