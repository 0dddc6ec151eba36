#!/usr/bin/env bash
# Builds hvdrun's Debian packages: a Release build installed under /usr (build-release/, or
# BUILD_DIR=...), then `cpack -G DEB` (cmake/HvdPackaging.cmake): hvdrun, libhvd0, libhvd-dev
# and, when the build has NCCL, libhvd-nccl; when it has the Python binding (python3-dev and
# pybind11-dev installed: install-deps.sh --torch), python3-hvd. The .deb files land in the
# build folder; their paths are printed one per line at the end. A folder already configured so (CI's, where the
# suite ran on it) is only brought up to date.
# Usage: bash scripts/package.sh   (then: sudo apt-get install ./build-release/*.deb)
#
# With --wheel it builds a wheel instead, for pip users (packaging/wheel/README.md): only the
# targets the wheel holds (libhvd, the Python binding, hvdrun, hvdrun-agent, the NCCL plugin when
# the build has NCCL) in the same build folder, their tree (cmake --install --component wheel),
# then a PEP 517 build of it with the Python the binding is built for. The -D options after
# --wheel go to CMake (-DHVD_PYTHON=/path/to/python3: another Python; then use another BUILD_DIR).
# The wheel lands in dist/; its path is printed at the end. tests/packaging/wheel_check.sh checks it.
# Usage: bash scripts/package.sh --wheel [-DNAME=VALUE ...]   (then: pip install ./dist/hvdrun-*.whl)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${BUILD_DIR:-build-release}

if [ "${1:-}" = --wheel ]; then
  shift
  root=$PWD
  for arg in "$@"; do
    case "$arg" in
      -D*) ;;
      *) echo "usage: bash scripts/package.sh --wheel [-DNAME=VALUE ...]" >&2; exit 64 ;;
    esac
  done
  bash scripts/install-deps.sh --wheel
  # The Debian packages' configuration (the same cache in a folder both use), plus the caller's.
  mkdir -p "$build_dir"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr "$@" \
    >"$build_dir/wheel-configure.log"
  # cmake/HvdWheel.cmake writes the wheel's pyproject.toml when, and only when, the binding is built.
  if [ ! -f "$build_dir/wheel/pyproject.toml" ]; then
    echo "package.sh --wheel: $build_dir has no Python binding, which the wheel is made around:" >&2
    grep -- '-- Python binding' "$build_dir/wheel-configure.log" >&2 || true
    exit 1
  fi
  # The wheel gets the tags of the Python that builds it: the one the module is built for.
  python=$(sed -n 's/^HVD_PYTHON:FILEPATH=//p' "$build_dir/CMakeCache.txt")
  "$python" -c 'import build, setuptools, wheel' 2>/dev/null || {
    echo "package.sh --wheel: $python cannot import build, setuptools and wheel, which build the" \
      "wheel (Debian's python3: scripts/install-deps.sh --wheel; another: its pip install build" \
      "setuptools wheel)" >&2
    exit 1
  }
  cmake --build "$build_dir" -j 2 --target hvd_wheel
  stage=$(cd "$build_dir" && pwd)/wheel/stage
  rm -rf "$stage"
  cmake --install "$build_dir" --component wheel --prefix "$stage" >/dev/null
  mkdir -p dist
  (cd "$stage" && "$python" -m build --no-isolation --wheel --outdir "$root/dist" .) \
    >"$build_dir/wheel/build.log" 2>&1 || {
    echo "package.sh --wheel: the wheel's build failed; its log:" >&2
    cat "$build_dir/wheel/build.log" >&2
    exit 1
  }
  wheel=$(sed -n 's/^Successfully built \(.*\.whl\)$/\1/p' "$build_dir/wheel/build.log")
  if [ -z "$wheel" ] || [ ! -f "dist/$wheel" ]; then
    echo "package.sh --wheel: the build names no wheel it made; its log:" >&2
    cat "$build_dir/wheel/build.log" >&2
    exit 1
  fi
  echo "$root/dist/$wheel"
  exit 0
fi

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
