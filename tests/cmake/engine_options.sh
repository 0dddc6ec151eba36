#!/usr/bin/env bash
# Checks the HVD_WITH_<ENGINE> options by configuring the real project in scratch folders:
#   ON with the engine hidden  -> configure fails and names the Debian package to install;
#   OFF                        -> configure succeeds and reports the engine off;
#   a bad value                -> configure fails and lists AUTO, ON, OFF.
# Usage: engine_options.sh SOURCE_DIR SCRATCH_DIR
set -uo pipefail
src=$1
scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
failures=0

expect() {  # expect NAME WANT_RC(0|nonzero) PATTERN cmake-args...
  local name=$1 want=$2 pattern=$3
  shift 3
  local out rc
  out=$(cmake -S "$src" -B "$scratch/$name" -DBUILD_TESTING=OFF "$@" 2>&1)
  rc=$?
  if [ "$want" = 0 ] && [ $rc -ne 0 ]; then
    echo "FAIL $name: configure failed (rc $rc):"; echo "$out" | tail -20; failures=$((failures+1)); return
  fi
  if [ "$want" != 0 ] && [ $rc -eq 0 ]; then
    echo "FAIL $name: configure succeeded, expected a failure"; failures=$((failures+1)); return
  fi
  # CMake wraps long messages: compare with all whitespace runs folded to one space.
  if ! tr -s ' \n' '  ' <<<"$out" | grep -qF -- "$pattern"; then
    echo "FAIL $name: output lacks '$pattern':"; echo "$out" | tail -20; failures=$((failures+1)); return
  fi
  echo "ok   $name"
}

expect gloo_on_missing nonzero "HVD_WITH_GLOO=ON but Gloo was not found: install the Debian package libgloo-dev" \
  -DHVD_WITH_GLOO=ON -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON
expect mpi_on_missing nonzero "HVD_WITH_MPI=ON but Open MPI was not found: install the Debian packages libopenmpi-dev and openmpi-bin" \
  -DHVD_WITH_MPI=ON -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
expect nccl_on_missing nonzero "HVD_WITH_NCCL=ON but NCCL was not found: install the CUDA toolkit with NCCL" \
  -DHVD_WITH_NCCL=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
expect all_off 0 "MPI=OFF Gloo=OFF NCCL=OFF" \
  -DHVD_WITH_MPI=OFF -DHVD_WITH_GLOO=OFF -DHVD_WITH_NCCL=OFF
expect bad_value nonzero "use AUTO, ON or OFF" -DHVD_WITH_MPI=maybe

rm -rf "$scratch"
echo "$failures failed"
[ $failures -eq 0 ]
