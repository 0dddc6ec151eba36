// The run record of real launches (--record FILE, docs/why.md "The run record"): local jobs with
// the real hvdrun, its agent and `sh` ranks. The file's own rules (bound, mode, links):
// tests/unit/test_run_record.cpp; a stall verdict in it: tests/e2e/test_why.cpp.
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
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

std::vector<json> record_lines(const std::string& path) {
  std::vector<json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);) {
    json doc;
    INFO(line);
    REQUIRE_NOTHROW(doc = json::parse(line));
    out.push_back(std::move(doc));
  }
  return out;
}

std::vector<json> events(const std::vector<json>& lines, const std::string& kind) {
  std::vector<json> out;
  for (const json& l : lines) {
    if (l.at("event") == kind) out.push_back(l);
  }
  return out;
}

}  // namespace

TEST_CASE("record: a failed job's launch, ranks, their ends and the result, in order",
          "[launch][record]") {
  TempDir dir;
  const std::string file = dir / "run.jsonl";
  const RunResult r = run_hvdrun({"-np", "2", "-H", "localhost:2", "--record", file, "sh", "-c",
                                  "if [ \"$HOROVOD_RANK\" = 1 ]; then exit 3; fi; sleep 30"});
  INFO(show(r));
  REQUIRE(r.exit_code == 3);
  const std::vector<json> lines = record_lines(file);
  REQUIRE(lines.size() >= 6);
  CHECK(lines.front().at("event") == "launch");
  CHECK(lines.front().at("np") == 2);
  CHECK(lines.front().at("hosts").at(0).at("host") == "localhost");
  CHECK(lines.front().at("hosts").at(0).at("ranks") == 2);
  CHECK(lines.front().at("command").at(0) == "sh");
  CHECK(lines.back().at("event") == "end");
  CHECK(lines.back().at("exit_code") == 3);
  CHECK(lines.back().at("result").at("first_failure").at("rank") == 1);
  const std::vector<json> started = events(lines, "rank_started");
  REQUIRE(started.size() == 2);
  for (const json& s : started) {
    CHECK(s.at("attempt") == 1);
    CHECK(s.at("pid").get<long>() > 0);
  }
  const std::vector<json> exited = events(lines, "rank_exited");
  REQUIRE(exited.size() == 2);
  // Rank 1 failed on its own first; rank 0 was stopped by hvdrun after it.
  CHECK(exited[0].at("rank") == 1);
  CHECK(exited[0].at("exit_code") == 3);
  CHECK(exited[0].at("signal").is_null());
  CHECK(exited[0].at("stopped_by_hvdrun") == false);
  CHECK(exited[1].at("rank") == 0);
  CHECK(exited[1].at("stopped_by_hvdrun") == true);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    CHECK(lines[i].at("t").get<double>() >= lines[i - 1].at("t").get<double>());
  }
  struct stat st {};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
}

TEST_CASE("record: each restart's events carry their attempt, and each attempt is summed up",
          "[launch][record][restarts]") {
  TempDir dir;
  const std::string file = dir / "run.jsonl";
  const RunResult r = run_hvdrun({"--max-restarts", "1", "--restart-backoff", "0", "--record", file,
                                  "-np", "1", "-x", "MARK=" + (dir / "failed"), "sh", "-c",
                                  "if [ ! -e $MARK ]; then touch $MARK; exit 2; fi"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  const std::vector<json> lines = record_lines(file);
  const std::vector<json> started = events(lines, "rank_started");
  REQUIRE(started.size() == 2);
  CHECK(started[0].at("attempt") == 1);
  CHECK(started[1].at("attempt") == 2);
  const std::vector<json> attempts = events(lines, "attempt");
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].at("exit_code") == 2);
  CHECK(attempts[1].at("exit_code") == 0);
  CHECK(events(lines, "launch").size() == 1);
  CHECK(lines.back().at("event") == "end");
  CHECK(lines.back().at("exit_code") == 0);
  CHECK(lines.back().at("result").at("attempts").size() == 2);
}

TEST_CASE("record: a symbolic link at the path is refused before anything starts",
          "[launch][record]") {
  TempDir dir;
  write_file(dir / "theirs", "not hvdrun's\n");
  std::filesystem::create_symlink(dir / "theirs", dir / "run.jsonl");
  const RunResult r = run_hvdrun({"-np", "1", "--record", dir / "run.jsonl", "-x",
                                  "MARK=" + (dir / "ran"), "sh", "-c", "touch $MARK"});
  INFO(show(r));
  CHECK(r.exit_code == 64);  // a usage error
  CHECK_THAT(r.err, ContainsSubstring("--record " + (dir / "run.jsonl")));
  CHECK_THAT(r.err, ContainsSubstring("symbolic link"));
  CHECK(read_file(dir / "theirs") == "not hvdrun's\n");
  CHECK(!std::filesystem::exists(dir / "ran"));
}
