#!/usr/bin/env bash
# CI's Debian 13 leg, run inside the Debian 13 root (tests/distro/debian13.sh leg): the packages,
# the Release build with warnings as errors, the unit, CLI, Python, --mpi and PyTorch tests, the
# Debian packages built, checked, installed, used and removed, the pip wheel built and used in a
# venv, and the main job's PyTorch form.
# Each step prints its wall time. Not the whole suite: the Debian 12 leg runs that (Slurm, the
# chaos pass, fuzzing, the container job and the 64-host fan-out stay there), and CI's 60 minutes
# on 2 cores do not hold two of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
. /etc/os-release
echo "debian13 leg on $PRETTY_NAME"
step() { echo "debian13 leg: $1 wall time: $(( $(date +%s) - $2 )) s"; }

start=$(date +%s)
bash scripts/install-deps.sh --torch --wheel
step "packages" "$start"

export BUILD_DIR=build-d13
start=$(date +%s)
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DHVD_WERROR=ON >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
grep -E "hvdrun [0-9.]+:|Python binding" "$BUILD_DIR.configure.log" || true
cmake --build "$BUILD_DIR" -j 2
step "build" "$start"

# Unit and CLI tests, libhvd's, the Python binding's suites, and every test of --mpi and PyTorch
# (ctest adds the sshd test hosts' fixture where a test needs it); not python_slurm, which would
# bring the Slurm cluster (its slurmd needs cgroups the root does not mount).
start=$(date +%s)
# Left out: the --mpi test of a 64 MiB line without a newline, which Open MPI 5's mpirun does not
# forward within its 120 s (not yet looked into: tests/distro/README.md). A test that fails
# under load on 2 cores runs once more; a second failure fails the leg (ctest says which needed
# it).
ctest --test-dir "$BUILD_DIR" -j 2 --output-on-failure --timeout 600 --repeat until-pass:2 \
  -R "${HVD_DEBIAN13_TESTS:-^(unit|cli|libhvd|python|pytorch|mpi|rsh_agent_check|example_rank_info)}" \
  -E "slurm|64 MiB line without a newline"
step "tests" "$start"

start=$(date +%s)
bash scripts/package.sh
bash tests/packaging/deb_check.sh "$BUILD_DIR"
step "packages built and checked" "$start"

start=$(date +%s)
bash tests/packaging/wheel_check.sh
step "wheel built and checked" "$start"

start=$(date +%s)
# docs/pytorch.md, "NaN on torch 2.6": Debian 13's oneDNN 3.7 convolution backward can produce
# NaN (torch alone shows it: tests/distro/onednn_nan.py); beside hvd's overlapped allreduces about
# half of the 1-epoch runs here did, so the leg runs the job without oneDNN until Debian mends it.
EPOCHS=1 MAIN_JOB_ARGS=--no-onednn bash scripts/main-job.sh --pytorch
step "main job (PyTorch form, 1 epoch)" "$start"
