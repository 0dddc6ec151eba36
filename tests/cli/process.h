// Runs the real hvdrun binary for the CLI tests and collects what it did.
//
// The CLI tests assert the user-visible contract (exit code, stdout, stderr), so they run the
// built binary as a separate process rather than calling hvd::cli::run() in-process: a crash, an
// exit() deep inside, or output written around spdlog would all be missed in-process.
//
// Threading: run_hvdrun() may be called from any thread, but Catch2 v2 assertions are not
// thread-safe, so assert on the result in the test's own thread. Blocking: it blocks until the
// child exits or the timeout kills it.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace hvd::test {

// How long one hvdrun run may take before it is killed. A dry run takes milliseconds; anything
// near this limit is a hang, which the tests must report instead of blocking ctest.
inline constexpr std::chrono::seconds kRunTimeout{30};

struct RunResult {
  int exit_code = -1;  // the exit status, or 128 + signal number when a signal ended it
  std::string out;     // everything written to stdout, bytes as written
  std::string err;     // everything written to stderr, bytes as written
};

// Runs HVDRUN_BINARY with `args` (argv[1..]; no shell is involved, so every byte of every argument
// reaches hvdrun unchanged). The child inherits this process's environment with `extra_env`
// added or overriding same-named variables; its stdin is /dev/null. Throws std::runtime_error
// (naming the command) if the process cannot be started, or if it runs past `timeout`, in
// which case it is killed and reaped first, so no test leaves a process behind.
RunResult run_hvdrun(const std::vector<std::string>& args,
                     const std::vector<std::pair<std::string, std::string>>& extra_env = {},
                     std::chrono::seconds timeout = kRunTimeout);

// The same for any program: argv[0] is its path. `timeout` replaces kRunTimeout.
RunResult run_program(const std::vector<std::string>& argv,
                      const std::vector<std::pair<std::string, std::string>>& extra_env,
                      std::chrono::seconds timeout);

}  // namespace hvd::test
