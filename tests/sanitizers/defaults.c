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

#if defined(HVD_SANITIZE_ADDRESS)
HVD_SANITIZER_API const char* __asan_default_options(void) {
  return "halt_on_error=1:detect_leaks=1:exitcode=66:strict_string_checks=1:"
         "detect_stack_use_after_return=1:check_initialization_order=1";
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
  return "halt_on_error=1:exitcode=68:second_deadlock_stack=1:suppressions=" HVD_SANITIZER_SUPPRESSIONS
         "/tsan.supp";
}
#else
#error "define HVD_SANITIZE_ADDRESS or HVD_SANITIZE_THREAD"
#endif
