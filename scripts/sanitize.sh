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
# the test that ran it fails; the report is in that test's output (--output-on-failure).
# BUILD_DIR=... picks another build folder. Prints the wall times of the build and the run.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-}
shift || true
supp=$PWD/tests/sanitizers
case "$kind" in
  asan)
    flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
    build_dir=${BUILD_DIR:-build-asan}
    # detect_leaks: LSan at every instrumented process's exit. A rank's exit code 1 from a
    # finding would read as "the rank failed": exitcode 66 and 67 make it recognisable.
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:exitcode=66:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=67:suppressions=$supp/ubsan.supp"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    # Open MPI unloads its components at MPI_Finalize, and a leak inside one then has no name to
    # suppress it by: keep them loaded (mpirun passes OMPI_MCA_* on to the ranks).
    export OMPI_MCA_mca_base_component_disable_dlclose=1
    select=()
    ;;
  tsan)
    flags="-fsanitize=thread -fno-omit-frame-pointer"
    build_dir=${BUILD_DIR:-build-tsan}
    export TSAN_OPTIONS="halt_on_error=1:exitcode=68:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
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
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags" >/dev/null
cmake --build "$build_dir" -j 2
echo "$kind build wall time: $(($(date +%s) - start)) s"

start=$(date +%s)
rc=0
ctest --test-dir "$build_dir" -j 2 --output-on-failure --timeout 900 "${select[@]}" "$@" || rc=$?
echo "$kind test suite wall time: $(($(date +%s) - start)) s"
exit $rc
