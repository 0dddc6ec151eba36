#!/usr/bin/env bash
# Installs the Debian packages hvdrun needs to build and test, on Debian 12 ("bookworm") or
# Debian 13 ("trixie"), read from /etc/os-release. Idempotent: packages already present are not
# fetched again, and `apt-get update` runs only when something is missing.
# Must run as root (or through sudo). CUDA/NCCL are not Debian packages; they come with the
# machine's CUDA toolkit when present and are optional (HVD_WITH_NCCL=AUTO).
# Usage: bash scripts/install-deps.sh [--torch] [--fuzz] [--podman] [--wheel]
#   --torch also installs the test-only packages: Debian's python3-torch for the PyTorch tests
#   (tests/e2e/test_pytorch.cpp; about 190 MB to download, 830 MB installed, about a minute:
#   not for the main job or the container image), and what the Python binding (python/:
#   hvd.torch, horovod.torch) needs to build (python3-dev, pybind11-dev) and to test (pytest and
#   its timeout plugin; cloudpickle, mock, packaging for Horovod's own test_torch.py through
#   tests/python/horovod_suite.sh; torchvision, filelock for Horovod's pytorch_mnist.py).
#   Without it those tests say they are skipped and the binding is not built.
#   --fuzz also installs clang and its libFuzzer and sanitizer runtimes, for tests/fuzz/run.sh
#   (the fuzzers, and CI's replay of every corpus under ASan+UBSan).
#   --podman also installs Debian's podman with runc (crun fails on these cgroup v1 machines),
#   debootstrap (the base image: no registry is reachable) and slirp4netns (a userland port
#   forwarder for one of the traps), for tests/container/podman_job.sh (docs/container.md).
#   --wheel also installs what `bash scripts/package.sh --wheel` builds a wheel with (python3-build,
#   python3-wheel, python3-setuptools, python3-venv, patchelf) and checks it in a venv.
set -euo pipefail

# The distribution, and the one place where its package names differ.
. /etc/os-release 2>/dev/null || true
case "${ID:-}:${VERSION_ID:-}" in
  debian:12) clang=clang-14 ;;
  debian:13) clang=clang-19 ;;
  *)
    echo "install-deps: this is ${PRETTY_NAME:-an unknown system (no /etc/os-release)}; hvdrun's" \
      "scripts install packages on Debian 12 (bookworm) and Debian 13 (trixie) only." >&2
    echo "install-deps: elsewhere install by hand what this script lists (CMake >= 3.25, a C++20" \
      "compiler, libssh, libssl, Open MPI, Gloo, CLI11, spdlog, fmt, nlohmann-json, cpp-httplib," \
      "yaml-cpp, Catch2 2 or 3, zlib) and build with cmake (docs/architecture.md)." >&2
    exit 2
    ;;
esac

packages=(
  build-essential cmake ninja-build g++ pkg-config
  libssh-dev
  libssl-dev   # libcrypto: the sealed link of the srun agents (agent/sealed_link.h)
  libopenmpi-dev openmpi-bin
  libgloo-dev
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libcpp-httplib-dev
  libyaml-cpp-dev   # --config-file (horovodrun's YAML)
  catch2 zlib1g-dev
  dataset-fashion-mnist
  openssh-server openssh-client
  slurmctld slurmd slurm-client   # tests/slurm's local cluster; munge comes along, unused
  procps iproute2 iptables python3
  bsdutils   # script(1): the elastic status line's test runs hvdrun on a terminal
  tmux zsh groff-base man-db   # the shell completion test (bash and zsh in tmux), the man page tests
  dpkg-dev file   # dpkg-shlibdeps, and file(1) that CPack runs first: the packages' Depends (scripts/package.sh)
  git   # the tests' checks of the tracked files (docs, include rules)
)
for arg in "$@"; do
  case "$arg" in
    --torch) packages+=(python3-torch python3-dev pybind11-dev python3-pytest
                        python3-pytest-timeout python3-cloudpickle python3-mock
                        python3-packaging python3-torchvision python3-filelock) ;;
    --fuzz) packages+=("$clang" "libclang-rt-${clang#clang-}-dev") ;;
    --podman) packages+=(podman runc debootstrap slirp4netns) ;;
    --wheel) packages+=(python3-dev pybind11-dev python3-build python3-wheel python3-setuptools
                        python3-venv python3-pip patchelf) ;;
    *) echo "usage: bash scripts/install-deps.sh [--torch] [--fuzz] [--podman] [--wheel]" >&2; exit 64 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present ($PRETTY_NAME)"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi

echo "install-deps: installing on $PRETTY_NAME: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
