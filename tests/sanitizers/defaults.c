// The sanitizers' options, compiled into every program of a sanitizer build (scripts/sanitize.sh
// configures with -DHVD_SANITIZERS=asan or tsan; CMakeLists.txt links this into every target).
// Environment variables (ASAN_OPTIONS, ...) do not reach every process the tests start: ranks
// started over SSH get their login's environment plus hvdrun's allow-list, and mpirun's ranks
// what mpirun passes on. Compiled in, the suppressions (tests/sanitizers/*.supp, each with its
// reason) and the exit codes apply to all of them; a variable that is set still wins, option by
// option.
//
// A finding makes the process exit non-zero (halt_on_error), with a code that cannot be mistaken
// for a rank's own failure: 66 AddressSanitizer, 67 UndefinedBehaviorSanitizer, 68
// ThreadSanitizer (LeakSanitizer exits with ASan's).

#ifndef HVD_SANITIZER_SUPPRESSIONS
#error "HVD_SANITIZER_SUPPRESSIONS (the folder of the .supp files) must be defined"
#endif

#define HVD_SANITIZER_API __attribute__((visibility("default"), used))

#include <stdlib.h>

// Open MPI unloads its components at MPI_Finalize, and a leak inside one then has no name to
// suppress it by ("<unknown module>"). This keeps them loaded in every instrumented process,
// ranks under mpirun on every host included, before MPI reads its parameters (a variable set by
// the user still wins: the last argument, 0, does not overwrite).
__attribute__((constructor)) static void hvd_keep_mpi_components_loaded(void) {
  setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 0);
  setenv("PMIX_MCA_mca_base_component_disable_dlclose", "1", 0);  // PMIx's own components
}

#if defined(HVD_SANITIZE_ADDRESS)
HVD_SANITIZER_API const char* __asan_default_options(void) {
  // fast_unwind_on_malloc=0: leaks are found inside Open MPI (under mpirun), which Debian builds
  // without frame pointers: the fast unwinder stops at its first frame ("<unknown module>") and
  // no suppression can name it. The slow one (DWARF) gives whole stacks, which
  // tests/sanitizers/lsan.supp matches. (Chosen per process, it would have to read the
  // environment before the C library is up: these options are asked for that early.)
  return "halt_on_error=1:detect_leaks=1:exitcode=66:strict_string_checks=1:"
         "detect_stack_use_after_return=1:check_initialization_order=1:fast_unwind_on_malloc=0";
}

HVD_SANITIZER_API const char* __lsan_default_options(void) {
  return "suppressions=" HVD_SANITIZER_SUPPRESSIONS "/lsan.supp:print_suppressions=0";
}
HVD_SANITIZER_API const char* __ubsan_default_options(void) {
  return "halt_on_error=1:print_stacktrace=1:exitcode=67:suppressions=" HVD_SANITIZER_SUPPRESSIONS
         "/ubsan.supp";
}
#elif defined(HVD_SANITIZE_THREAD)
HVD_SANITIZER_API const char* __tsan_default_options(void) {
  return "halt_on_error=1:exitcode=68:second_deadlock_stack=1:"
         "suppressions=" HVD_SANITIZER_SUPPRESSIONS "/tsan.supp";
}
#else
#error "define HVD_SANITIZE_ADDRESS or HVD_SANITIZE_THREAD"
#endif
