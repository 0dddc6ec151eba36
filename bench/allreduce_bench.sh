#!/usr/bin/env bash
# Allreduce bandwidth: libhvd's hvd::allreduce of float32 (sum, in place) against
# the raw engine under it, from the same 2 ranks in the same run, 4 KiB to 64 MiB. Two runs:
# native hvdrun (libhvd on Gloo; raw = gloo::allreduce on the bench's own Gloo context) and
# `hvdrun --mpi` (libhvd on Open MPI; raw = MPI_Allreduce). Goal: ratio hvd/raw at 64 MiB >= 0.95.
# Builds nothing: build the allreduce_bench and hvdrun targets first.
# Usage: bench/allreduce_bench.sh [BUILD_DIR [BENCH ARGS...]]   e.g. build --seconds 1
#   HVDTEST_SSHD_DIR=DIR (a running tests/sshd fixture): run over its first two hosts, one rank
#   each, instead of 2 ranks on localhost. ENGINES="gloo mpi" (default) picks the runs.
# Exits 1 if a run failed (including wrong results); never because of the ratio.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
build=${1:-build}
shift || true
hvdrun=$build/cli/hvdrun
bench=$build/bench/allreduce_bench
for f in "$hvdrun" "$bench"; do
  [ -x "$f" ] || { echo "missing $f: ninja -C $build hvdrun allreduce_bench" >&2; exit 2; }
done

where=(-np 2)  # localhost, 2 slots
kh=""
if [ -n "${HVDTEST_SSHD_DIR:-}" ]; then
  # shellcheck disable=SC1091
  . "$HVDTEST_SSHD_DIR/hosts.env"
  kh=$(mktemp)
  cp "$HVDTEST_SSH_KNOWN_HOSTS" "$kh"
  IFS=, read -r a1 a2 _ <<<"$HVDTEST_SSH_ADDRS"
  where=(-np 2 -H "$a1:1,$a2:1" -p "$HVDTEST_SSH_PORT" --ssh-config "$HVDTEST_SSH_CONFIG"
         --ssh-known-hosts "$kh")
fi
trap '[ -n "$kh" ] && rm -f "$kh"' EXIT

status=0
for engine in ${ENGINES:-gloo mpi}; do
  case $engine in
    gloo) mode=() ;;
    mpi) mode=(--mpi) ;;
    *) echo "ENGINES: gloo and/or mpi, not $engine" >&2; exit 2 ;;
  esac
  echo "== hvdrun ${mode[*]:-(native)} ${where[*]} $bench $*"
  # Only rank 0 prints; drop hvdrun's (or mpirun's) output tags.
  "$hvdrun" "${mode[@]}" "${where[@]}" "$(realpath "$bench")" "$@" 2>&1 |
    sed -E 's/^\[[0-9,]+\]<std(out|err)>://'
  rc=${PIPESTATUS[0]}
  [ "$rc" = 0 ] || { echo "FAILED: exit status $rc"; status=1; }
  echo
done
exit $status
