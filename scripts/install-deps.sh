#!/usr/bin/env bash
# Installs the Debian 12 packages hvdrun needs to build and test. Idempotent: packages already
# present are not fetched again, and `apt-get update` runs only when something is missing.
# Must run as root (or through sudo). CUDA/NCCL are not Debian packages; they come with the
# machine's CUDA toolkit when present and are optional (HVD_WITH_NCCL=AUTO).
# Usage: bash scripts/install-deps.sh [--torch] [--fuzz] [--podman]
#   --torch also installs the test-only packages: Debian's python3-torch for the PyTorch tests
#   (tests/e2e/test_pytorch.cpp; about 190 MB to download, 830 MB installed, about a minute:
#   not for the main job or the container image), and what the Python binding (python/:
#   hvd.torch, horovod.torch) needs to build (python3-dev, pybind11-dev) and to test (pytest and
#   its timeout plugin; cloudpickle, mock, packaging for Horovod's own test_torch.py through
#   tests/python/horovod_suite.sh; torchvision, filelock for Horovod's pytorch_mnist.py).
#   Without it those tests say they are skipped and the binding is not built.
#   --fuzz also installs clang-14 and its libFuzzer and sanitizer runtimes, for tests/fuzz/run.sh
#   (the fuzzers, and CI's replay of every corpus under ASan+UBSan).
#   --podman also installs Debian's podman with runc (crun fails on these cgroup v1 machines),
#   debootstrap (the base image: no registry is reachable) and slirp4netns (a userland port
#   forwarder for one of the traps), for tests/container/podman_job.sh (docs/container.md).
set -euo pipefail

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
  tmux zsh groff-base   # the shell completion test (bash and zsh in tmux), the man page test
  dpkg-dev   # dpkg-shlibdeps: the packages' Depends (scripts/package.sh)
)
for arg in "$@"; do
  case "$arg" in
    --torch) packages+=(python3-torch python3-dev pybind11-dev python3-pytest
                        python3-pytest-timeout python3-cloudpickle python3-mock
                        python3-packaging python3-torchvision python3-filelock) ;;
    --fuzz) packages+=(clang-14 libclang-rt-14-dev) ;;
    --podman) packages+=(podman runc debootstrap slirp4netns) ;;
    *) echo "usage: bash scripts/install-deps.sh [--torch] [--fuzz] [--podman]" >&2; exit 64 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
