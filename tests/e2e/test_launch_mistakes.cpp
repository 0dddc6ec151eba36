// A new user's mistakes in a local launch (issue 27) and what hvdrun says about them: the real
// hvdrun, its agent and rank processes; the exit code, the message and the --json result.
#include <nlohmann/json.hpp>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers
using Catch::Matchers::ContainsSubstring;
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
  CHECK_THAT(r.err, ContainsSubstring("current directory cannot be read"));
  CHECK_THAT(r.err, ContainsSubstring("deleted"));
  CHECK_THAT(r.err, ContainsSubstring("cd to a directory that exists"));
  CHECK_THAT(r.err, ContainsSubstring("--wd DIR"));
  CHECK_THAT(r.err, !ContainsSubstring("is not absolute"));

  // A relative --wd needs it too; an absolute one does not.
  const RunResult relative = run_in_deleted_directory("-np 1 --wd sub true");
  INFO(show(relative));
  CHECK(relative.exit_code == 64);
  CHECK_THAT(relative.err, ContainsSubstring("--wd sub is taken from it"));
  const RunResult absolute = run_in_deleted_directory("-np 1 --wd / sh -c pwd");
  INFO(show(absolute));
  CHECK(absolute.exit_code == 0);
  CHECK_THAT(absolute.out, ContainsSubstring("[1,0]<stdout>:/\n"));
}

TEST_CASE("a rank that ended on its own while hvdrun stopped the job is not 'stopped by hvdrun'",
          "[launch]") {
  // Rank 0 (first agent) exits 0 on its own while its agent is frozen (SIGSTOP), so hvdrun
  // learns of it only after rank 1 (second agent) failed and the stop began.
  JobMarker marker;
  TempDir dir;
  Hvdrun hvdrun({.args = {"-H", "localhost:1,127.0.0.1:1", "--json", "--grace", "1", "-x",
                          marker.forward(), "-x", "D=" + dir.path(), "sh", "-c",
                          "echo $PPID > $D/agent.$RANK; echo $$ > $D/pid.$RANK; "
                          "while [ ! -e $D/go.$RANK ]; do sleep 0.02; done; "
                          "[ $RANK = 0 ] && exit 0; echo broken >&2; exit 3"},
                 .env = {marker.env()},
                 .out_path = dir / "out",
                 .err_path = dir / "err"});
  const bool up = wait_until(
      [&] { return !read_file(dir / "pid.0").empty() && !read_file(dir / "pid.1").empty(); }, 10s);
  REQUIRE(up);
  const pid_t agent0 = std::stoi(read_file(dir / "agent.0"));
  REQUIRE(agent0 != std::stoi(read_file(dir / "agent.1")));  // two agents
  const std::string rank0_stat =
      "/proc/" + std::to_string(std::stoi(read_file(dir / "pid.0"))) + "/stat";
  const std::string rank1_proc = "/proc/" + std::to_string(std::stoi(read_file(dir / "pid.1")));
  ::kill(agent0, SIGSTOP);
  write_file(dir / "go.0", "");
  const bool rank0_ended =
      wait_until([&] { return read_file(rank0_stat).find(") Z ") != std::string::npos; }, 10s);
  write_file(dir / "go.1", "");
  const bool rank1_ended = wait_until([&] { return !std::filesystem::exists(rank1_proc); }, 10s);
  std::this_thread::sleep_for(300ms);  // hvdrun sees rank 1's exit and sends the stop
  ::kill(agent0, SIGCONT);
  const auto code = hvdrun.wait(20s);
  const std::string err = read_file(dir / "err");
  INFO(err);
  CHECK(rank0_ended);
  CHECK(rank1_ended);
  CHECK(code == 3);
  CHECK_THAT(err, ContainsSubstring("hvdrun stopped 0 other ranks"));
  const json doc = json::parse(read_file(dir / "out"), nullptr, false);
  REQUIRE(doc.is_object());
  CHECK(doc["first_failure"]["rank"] == 1);
  CHECK(doc["ranks"][0]["exit_code"] == 0);
  CHECK(doc["ranks"][0]["stopped_by_hvdrun"] == false);
  CHECK(marker.alive().empty());
}

TEST_CASE("a library the loader cannot find is the root cause, with the fix", "[launch]") {
  const RunResult r = run_hvdrun({"-np", "1", "--json", NEEDS_LIB});
  INFO(show(r));
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.err,
             ContainsSubstring("rank 0 (host localhost, local rank 0) exited with code 127: the "
                               "dynamic loader could not load libhvd_test_lib.so"));
  CHECK_THAT(r.err, ContainsSubstring("-x LD_LIBRARY_PATH"));
  CHECK_THAT(r.err, ContainsSubstring("rpath"));
  const json doc = json::parse(r.out, nullptr, false);
  REQUIRE(doc.is_object());
  CHECK_THAT(doc["first_failure"]["description"].get<std::string>(),
             ContainsSubstring("could not load libhvd_test_lib.so"));
  // The fix the message gives works.
  const RunResult fixed =
      run_hvdrun({"-np", "1", "-x", std::string("LD_LIBRARY_PATH=") + NEEDS_LIB_DIR, NEEDS_LIB});
  INFO(show(fixed));
  CHECK(fixed.exit_code == 0);
  // A shell's own 127 (command not found) is not blamed on the loader.
  const RunResult shell = run_hvdrun({"-np", "1", "sh", "-c", "no-such-command-hvd"});
  INFO(show(shell));
  CHECK(shell.exit_code == 127);
  CHECK_THAT(shell.err, !ContainsSubstring("dynamic loader"));
}
