// --max-restarts (launcher/core/restarts.h): a failed attempt worth another is followed by a new
// launch of the same plan, up to N times, with torchrun's restart variables on every rank; failures
// that would repeat are not retried; Ctrl-C during the wait ends it. Localhost launches, real
// ranks.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_helpers.h"

using namespace hvd::test;  // NOLINT: test helpers
using Catch::Matchers::ContainsSubstring;
using nlohmann::json;

namespace {

std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out.substr(0, 4000) +
         "\n--- stderr ---\n" + r.err.substr(0, 6000);
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("restarts: a rank killed once, the second attempt succeeds and sees its count",
          "[launch][restarts]") {
  TempDir dir;
  const RunResult r =
      run_hvdrun({"--max-restarts", "2", "--restart-backoff", "0", "--json", "-np", "2", "-x",
                  "MARK=" + (dir / "killed"), "sh", "-c",
                  "echo \"rank $HOROVOD_RANK attempt $TORCHELASTIC_RESTART_COUNT of "
                  "$TORCHELASTIC_MAX_RESTARTS run $TORCHELASTIC_RUN_ID job $HVD_JOB_ID\"; "
                  "if [ $HOROVOD_RANK = 1 ] && [ ! -e $MARK ]; then touch $MARK; kill -9 $$; fi"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  // --json: rank output on stderr. Both attempts ran both ranks, with their counts.
  CHECK_THAT(r.err, ContainsSubstring("rank 0 attempt 0 of 2"));
  CHECK_THAT(r.err, ContainsSubstring("rank 1 attempt 1 of 2"));
  CHECK_THAT(r.err,
             ContainsSubstring("attempt 2 of 3 after rank 1 on localhost was killed by signal 9"));
  const json doc = json::parse(r.out);
  REQUIRE(doc["attempts"].size() == 2);
  CHECK(doc["attempts"][0]["exit_code"] == 137);
  CHECK(doc["attempts"][1]["exit_code"] == 0);
  CHECK(doc["attempts"][1]["root_cause"].is_null());
  CHECK(doc["exit_code"] == 0);
  // One run id for the job; a new job id (rendezvous scope and token) per attempt.
  const std::string run0 = doc["attempts"][0]["job_id"], run1 = doc["attempts"][1]["job_id"];
  CHECK(run0 != run1);
  CHECK(count(r.err, "run " + run0 + " job " + run0) == 2);
  CHECK(count(r.err, "run " + run0 + " job " + run1) == 2);
}

TEST_CASE("restarts: a rank that always fails gets exactly N+1 attempts and its code",
          "[launch][restarts]") {
  const RunResult r = run_hvdrun({"--max-restarts", "2", "--restart-backoff", "0", "--json", "-np",
                                  "1", "sh", "-c", "echo boom >&2; exit 3"});
  INFO(show(r));
  CHECK(r.exit_code == 3);
  CHECK(count(r.err, "rank 0 (host localhost, local rank 0) exited with code 3") == 3);
  CHECK_THAT(r.err,
             ContainsSubstring("attempt 3 of 3 after rank 0 on localhost exited with code 3"));
  CHECK_THAT(r.err, ContainsSubstring("no restart: all 2 restarts were used"));
  const json doc = json::parse(r.out);
  CHECK(doc["attempts"].size() == 3);
  CHECK(doc["exit_code"] == 3);
  CHECK(doc["first_failure"]["exit_code"] == 3);
}

TEST_CASE("restarts: a failure that would repeat is not retried, and the report says why",
          "[launch][restarts]") {
  const RunResult r = run_hvdrun(
      {"--max-restarts", "3", "--restart-backoff", "0", "-np", "1", "/nonexistent/train"});
  INFO(show(r));
  CHECK(r.exit_code == 127);
  CHECK(count(r.err, "/nonexistent/train") >= 1);
  CHECK_THAT(r.err, ContainsSubstring("no restart: the job cannot start on a host"));
  CHECK(r.err.find("attempt 2 of") == std::string::npos);
}

TEST_CASE("restarts: without --max-restarts one failure ends the job as before",
          "[launch][restarts]") {
  const RunResult r = run_hvdrun({"--json", "-np", "1", "sh", "-c", "exit 5"});
  CHECK(r.exit_code == 5);
  CHECK(r.err.find("attempt 2") == std::string::npos);
  CHECK(r.err.find("no restart") == std::string::npos);
  CHECK_FALSE(json::parse(r.out).contains("attempts"));
}

TEST_CASE("restarts: Ctrl-C during the backoff ends everything at once", "[launch][restarts]") {
  TempDir dir;
  Hvdrun hvdrun(
      {.args = {"--max-restarts", "3", "--restart-backoff", "30", "-np", "1", "sh", "-c", "exit 1"},
       .env = {},
       .out_path = dir / "out",
       .err_path = dir / "err"});
  const bool waiting = wait_until(
      [&] { return read_file(dir / "err").find("waiting 30 s") != std::string::npos; }, 10s);
  const auto start = std::chrono::steady_clock::now();
  hvdrun.signal(SIGINT);
  const int code = hvdrun.wait(5s);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  INFO(read_file(dir / "err"));
  REQUIRE(waiting);
  CHECK(code == 130);
  CHECK(elapsed < 2s);
  CHECK(count(read_file(dir / "err"), "local rank 0) exited with code 1") == 1);  // no 2nd attempt
}

TEST_CASE("restarts: --output-filename keeps each attempt's files", "[launch][restarts]") {
  TempDir dir;
  const RunResult r =
      run_hvdrun({"--max-restarts", "1", "--restart-backoff", "0", "--output-filename",
                  dir / "logs", "-np", "1", "-x", "MARK=" + (dir / "failed"), "sh", "-c",
                  "echo attempt $TORCHELASTIC_RESTART_COUNT; "
                  "if [ ! -e $MARK ]; then touch $MARK; exit 2; fi"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(dir / "logs/attempt.1/rank.0/stdout") == "attempt 0\n");
  CHECK(read_file(dir / "logs/attempt.2/rank.0/stdout") == "attempt 1\n");
  // Both files of every attempt, though the rank never wrote to stderr (issue 55).
  CHECK(std::filesystem::is_regular_file(dir / "logs/attempt.1/rank.0/stderr"));
  CHECK(std::filesystem::is_regular_file(dir / "logs/attempt.2/rank.0/stderr"));
}

TEST_CASE("restarts: the dry run shows the policy", "[launch][restarts]") {
  const RunResult table = run_hvdrun(
      {"--dry-run", "--max-restarts", "4", "--restart-backoff", "2", "-np", "1", "true"});
  CHECK(table.exit_code == 0);
  CHECK_THAT(table.out, ContainsSubstring("restarts: up to 4"));
  CHECK_THAT(table.out, ContainsSubstring("waits 2 s before the first"));
  const RunResult doc =
      run_hvdrun({"--dry-run", "--json", "--max-restarts", "4", "-np", "1", "true"});
  REQUIRE(doc.exit_code == 0);
  const json plan = json::parse(doc.out);
  CHECK(plan["restarts"]["max_restarts"] == 4);
  CHECK(plan["ranks"][0]["env"]["TORCHELASTIC_MAX_RESTARTS"] == "4");
  CHECK(plan["ranks"][0]["env"]["TORCHELASTIC_RESTART_COUNT"] == "0");
  // Above the 30 s cap: the dry run shows the wait that will happen, and warns.
  const RunResult capped = run_hvdrun({"--dry-run", "--json", "--max-restarts", "2",
                                       "--restart-backoff", "100", "-np", "1", "true"});
  REQUIRE(capped.exit_code == 0);
  const json capped_plan = json::parse(capped.out);
  CHECK(capped_plan["restarts"]["backoff_seconds"] == 30.0);
  CHECK_THAT(capped_plan["warnings"].dump(),
             ContainsSubstring("--restart-backoff 100: a wait is at most 30 s"));
}

TEST_CASE("restarts: a symbolic link planted as DIR/attempt.K is not followed",
          "[launch][restarts]") {
  // Issue 51, finding 8: attempt.K was made with create_directories, which follows a link, so
  // another user of a shared folder could have the job's files written (truncated) elsewhere.
  TempDir dir;
  const std::string logs = dir / "logs";
  std::filesystem::create_directories(logs);
  std::filesystem::create_directories(dir / "elsewhere/rank.0");
  const std::string victim = dir / "elsewhere/rank.0/stdout";
  write_file(victim, "precious\n");
  std::filesystem::create_symlink(dir / "elsewhere", logs + "/attempt.1");
  const RunResult r = run_hvdrun({"--max-restarts", "1", "--restart-backoff", "0", "-np", "1",
                                  "--output-filename", logs, "sh", "-c", "echo out"});
  INFO(show(r));
  CHECK(r.exit_code == 0);
  CHECK(read_file(victim) == "precious\n");
  CHECK_THAT(r.err, ContainsSubstring("--output-filename: refusing to write " + logs +
                                      "/attempt.1/rank.0/stdout: attempt.1 is a symbolic link"));
  CHECK_THAT(r.out, ContainsSubstring("[1,0]<stdout>:out"));
}
