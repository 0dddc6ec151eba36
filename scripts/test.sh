#!/usr/bin/env bash
# The README's test command: install what the tests need, build, run every test.
# Usage: bash scripts/test.sh [extra ctest arguments]   (BUILD_DIR=... to pick the build folder,
# HVD_WERROR=ON to make warnings errors, as CI does; HVD_BUILD_TYPE=Release (default
# RelWithDebInfo) and HVD_INSTALL_PREFIX=/usr: CI tests the Release build that
# scripts/package.sh then packages from the same folder, one build instead of two)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build}
case "${HVD_BUILD_TYPE:-RelWithDebInfo}" in
  Debug | Release | RelWithDebInfo | MinSizeRel) ;;
  *)
    echo "test.sh: HVD_BUILD_TYPE='$HVD_BUILD_TYPE' is not a CMake build type: use Debug, Release," \
      "RelWithDebInfo (the default) or MinSizeRel" >&2
    exit 2
    ;;
esac
configure=(-DCMAKE_BUILD_TYPE="${HVD_BUILD_TYPE:-RelWithDebInfo}" -DHVD_WERROR="${HVD_WERROR:-OFF}")
if [ -n "${HVD_INSTALL_PREFIX:-}" ]; then configure+=(-DCMAKE_INSTALL_PREFIX="$HVD_INSTALL_PREFIX"); fi

bash scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja "${configure[@]}"
cmake --build "$build_dir" -j 2

start=$(date +%s)
# ctest prints its summary ("100% tests passed, 0 tests failed out of N") and exits non-zero
# on any failure. The sshd test hosts are a fixture: ctest starts and stops them itself.
ctest --test-dir "$build_dir" -j 2 --output-on-failure --timeout 600 "$@"
echo "test suite wall time: $(( $(date +%s) - start )) s"
