// A new user's mistakes in a local launch (issue 27) and what hvdrun says about them: the real
// hvdrun, its agent and rank processes; the exit code, the message and the --json result.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/cli/process.h"
#include "tests/e2e/launch_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 4000) +
         "\n--- stderr ---\n" + r.err.substr(0, 4000);
}

// hvdrun started from a directory that was deleted after the shell entered it.
RunResult run_in_deleted_directory(const std::string& hvdrun_args) {
  const std::string script =
      "d=$(mktemp -d) && cd \"$d\" && rmdir \"$d\" && exec \"$0\" " + hvdrun_args;
  return run_program({"/bin/sh", "-c", script, HVDRUN_BINARY}, {}, kRunTimeout);
}

}  // namespace

TEST_CASE("a deleted current directory is named as such, with what to do", "[launch]") {
  const RunResult r = run_in_deleted_directory("-np 1 true");
  INFO(show(r));
  CHECK(r.exit_code == 64);
  CHECK_THAT(r.err, Contains("current directory cannot be read"));
  CHECK_THAT(r.err, Contains("deleted"));
  CHECK_THAT(r.err, Contains("cd to a directory that exists"));
  CHECK_THAT(r.err, Contains("--wd DIR"));
  CHECK_THAT(r.err, !Contains("is not absolute"));

  // A relative --wd needs it too; an absolute one does not.
  const RunResult relative = run_in_deleted_directory("-np 1 --wd sub true");
  INFO(show(relative));
  CHECK(relative.exit_code == 64);
  CHECK_THAT(relative.err, Contains("--wd sub is taken from it"));
  const RunResult absolute = run_in_deleted_directory("-np 1 --wd / sh -c pwd");
  INFO(show(absolute));
  CHECK(absolute.exit_code == 0);
  CHECK_THAT(absolute.out, Contains("[1,0]<stdout>:/\n"));
}
