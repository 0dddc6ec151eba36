#!/usr/bin/env bash
# The test suite under a sanitizer, one command each:
#   bash scripts/sanitize.sh asan [extra ctest arguments]   AddressSanitizer + UBSan (and LSan),
#       every test, in build-asan/
#   bash scripts/sanitize.sh tsan [extra ctest arguments]   ThreadSanitizer over libhvd's engine,
#       control plane and collectives (unit tests and the libhvd e2e tests), in build-tsan/
# Everything hvdrun builds is instrumented: hvdrun and its agent, libhvd, the test programs and
# the ranks they start. Open MPI, Gloo, libssh and the rest come uninstrumented from Debian; what
# the sanitizers say inside them is suppressed in tests/sanitizers/*.supp, one entry per finding
# with the reason it is not ours. A finding makes the process exit non-zero (halt_on_error), so
# the test that ran it fails; the report is in that test's output (--output-on-failure). The
# options are compiled into every program (tests/sanitizers/defaults.c), so they hold in ranks
# started over SSH or by mpirun as well; ASAN_OPTIONS and the like still override them.
# BUILD_DIR=... picks another build folder. Prints the wall times of the build and the run.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
shift || true
case "$kind" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    build_dir=${BUILD_DIR:-build-asan}
    # The sanitizers' options (halt on the first finding, LSan at exit, exit codes 66/67, the
    # suppressions) are compiled into every program: tests/sanitizers/defaults.c.
    # Open MPI unloads its components at MPI_Finalize, and a leak inside one then has no name to
    # suppress it by: keep them loaded (mpirun passes OMPI_MCA_* on to the ranks).
    export OMPI_MCA_mca_base_component_disable_dlclose=1
    select=()
    ;;
  tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    build_dir=${BUILD_DIR:-build-tsan}
    # Its options (exit code 68, the suppressions): tests/sanitizers/defaults.c.
    # The engine's threads (libhvd), the control plane and the launcher's own threads (unit
    # tests, in-process); libhvd across real processes (e2e: libhvd, elastic).
    select=(-R "^(unit|libhvd|elastic):")
    ;;
  *)
    echo "usage: bash scripts/sanitize.sh asan|tsan [extra ctest arguments]" >&2
    exit 64
    ;;
esac

bash scripts/install-deps.sh
start=$(date +%s)
# RelWithDebInfo keeps the tests' timing close to the normal build's; warnings are not errors
# here (sanitizer builds add their own).
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVD_WERROR=OFF \
  -DHVD_SANITIZERS="$kind" \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$build_dir" -j 2
echo "$kind build wall time: $(($(date +%s) - start)) s"

start=$(date +%s)
rc=0
ctest --test-dir "$build_dir" -j 2 --output-on-failure --timeout 900 "${select[@]}" "$@" || rc=$?
echo "$kind test suite wall time: $(($(date +%s) - start)) s"
exit $rc
