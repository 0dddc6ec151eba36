#!/usr/bin/env bash
# Builds hvdrun's Debian packages: a Release build installed under /usr (build-release/, or
# BUILD_DIR=...), then `cpack -G DEB` (cmake/HvdPackaging.cmake): hvdrun, libhvd0, libhvd-dev
# and, when the build has NCCL, libhvd-nccl; when it has the Python binding (python3-dev and
# pybind11-dev installed: install-deps.sh --torch), python3-hvd. The .deb files land in the
# build folder; their paths are printed one per line at the end. A folder already configured so (CI's, where the
# suite ran on it) is only brought up to date.
# Usage: bash scripts/package.sh   (then: sudo apt-get install ./build-release/*.deb)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-release}

bash scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  >/dev/null
cmake --build "$build_dir" -j 2
rm -f "$build_dir"/*.deb
(cd "$build_dir" && cpack -G DEB >cpack.log 2>&1) || {
  echo "package.sh: cpack failed; its log:" >&2
  cat "$build_dir/cpack.log" >&2
  exit 1
}
ls -1 "$PWD/$build_dir"/*.deb
