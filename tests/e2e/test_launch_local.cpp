// End-to-end tests of the native launch on local hosts: the real hvdrun binary, its real agent
// and real rank processes (`sh -c ...`). What a rank sees (its environment), what the user sees
// (exit code, tagged output, the failure report, the --json result), and that nothing is left
// running. Signals and cleanup: test_launch_signals.cpp.
#include <pwd.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
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

json parse_json(const std::string& text) {
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(text));
  return doc;
}

// NAME=value lines of `env` output.
std::map<std::string, std::string> env_lines(const std::vector<std::string>& lines) {
  std::map<std::string, std::string> env;
  for (const std::string& line : lines) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The rank environment (docs/environment.md)

TEST_CASE("four ranks see the documented rank environment", "[launch]") {
  JobMarker marker;
  // Inherited values that must not reach the ranks: a stale HOROVOD_RANK, hvdrun internals, a
  // variable outside the allow-list, a MASTER_PORT. A Horovod knob does.
  const RunResult r =
      run_hvdrun({"-H", "localhost:4", "-np", "4", "--json", "-x", "FORWARDED=yes it is", "-x",
                  marker.forward(), "sh", "-c", "env; echo done"},
                 {marker.env(),
                  {"HOROVOD_RANK", "7"},
                  {"HVD_JOB_ID", "inherited"},
                  {"MY_SECRET", "leak"},
                  {"MASTER_PORT", "1"},
                  {"HOROVOD_FUSION_THRESHOLD", "1234"}});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  // --json: the result alone on stdout, the ranks' tagged output on stderr.
  const json doc = parse_json(r.out);
  TaggedLines out = split_tagged(r.err, "stdout");
  REQUIRE(out.by_rank.size() == 4);
  const auto env0 = env_lines(out.by_rank.at(0));
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    const auto env = env_lines(out.by_rank.at(rank));
    const std::string R = std::to_string(rank);
    CHECK(out.by_rank.at(rank).back() == "done");
    const std::map<std::string, std::string> want{
        {"HOROVOD_RANK", R},
        {"HOROVOD_SIZE", "4"},
        {"HOROVOD_LOCAL_RANK", R},
        {"HOROVOD_LOCAL_SIZE", "4"},
        {"HOROVOD_CROSS_RANK", "0"},
        {"HOROVOD_CROSS_SIZE", "1"},
        {"HOROVOD_HOSTNAME", "localhost"},
        {"RANK", R},
        {"WORLD_SIZE", "4"},
        {"LOCAL_RANK", R},
        {"LOCAL_WORLD_SIZE", "4"},
        {"GROUP_RANK", "0"},
        {"GROUP_WORLD_SIZE", "1"},
        {"ROLE_RANK", R},
        {"ROLE_WORLD_SIZE", "4"},
        {"ROLE_NAME", "default"},
        {"OMP_NUM_THREADS", "1"},  // 4 ranks share the host, the user did not set it
        {"PYTHONUNBUFFERED", "1"},
        {"FORWARDED", "yes it is"},
        {"HOROVOD_FUSION_THRESHOLD", "1234"}};  // the allow-list forwards user knobs
    for (const auto& [name, value] : want) {
      INFO(name);
      CHECK(env.count(name) == 1);
      if (env.count(name) == 1) CHECK(env.at(name) == value);
    }
    for (const char* same : {"MASTER_ADDR", "MASTER_PORT", "HVD_JOB_ID"}) {
      INFO(same);
      REQUIRE(env.count(same) == 1);
      CHECK(env.at(same) == env0.at(same));
      CHECK_FALSE(env.at(same).empty());
    }
    CHECK(env.at("HVD_JOB_ID") != "inherited");
    CHECK(env.at("MASTER_PORT") != "1");
    CHECK(std::stoi(env.at("MASTER_PORT")) > 0);
    CHECK(std::stoi(env.at("MASTER_PORT")) < 65536);
    CHECK(env.count("MY_SECRET") == 0);
  }

  CHECK(doc["schema_version"] == 1);
  CHECK(doc["ok"] == true);
  CHECK(doc["exit_code"] == 0);
  CHECK(doc["np"] == 4);
  CHECK(doc["first_failure"].is_null());
  CHECK(doc["error"].is_null());
  CHECK(doc["interrupted_by"].is_null());
  CHECK(doc["timings_ms"]["total"].get<long>() >= doc["timings_ms"]["start"].get<long>());
  REQUIRE(doc["ranks"].size() == 4);
  std::set<long> pids;
  for (int rank = 0; rank < 4; ++rank) {
    const json& jr = doc["ranks"][rank];
    CHECK(jr["rank"] == rank);
    CHECK(jr["host"] == "localhost");
    CHECK(jr["local_rank"] == rank);
    CHECK(jr["exit_code"] == 0);
    CHECK(jr["signal"].is_null());
    CHECK(jr["stopped_by_hvdrun"] == false);
    REQUIRE(jr["pid"].is_number_integer());
    pids.insert(jr["pid"].get<long>());
  }
  CHECK(pids.size() == 4);
  CHECK(marker.alive().empty());
}

TEST_CASE("rank output is tagged on stdout and stderr without --json", "[launch]") {
  // OMP_NUM_THREADS set: no notice from hvdrun, so stderr holds the ranks' lines only.
  const RunResult r = run_hvdrun({"-np", "2", "sh", "-c", "echo out $HOROVOD_RANK; echo err >&2"},
                                 {{"OMP_NUM_THREADS", "2"}});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  TaggedLines out = split_tagged(r.out, "stdout");
  CHECK(out.other.empty());
  CHECK(out.by_rank[0] == std::vector<std::string>{"out 0"});
  CHECK(out.by_rank[1] == std::vector<std::string>{"out 1"});
  TaggedLines err = split_tagged(r.err, "stderr");
  CHECK(err.other.empty());
  CHECK(err.by_rank[0] == std::vector<std::string>{"err"});
  CHECK(err.by_rank[1] == std::vector<std::string>{"err"});
}

TEST_CASE("a variable outside the allow-list reaches the ranks only with -x", "[launch]") {
  const std::string script = "echo \"[${MY_SECRET-unset}]\"";
  const RunResult without = run_hvdrun({"-np", "1", "sh", "-c", script}, {{"MY_SECRET", "s3"}});
  INFO(show(without));
  CHECK(without.exit_code == 0);
  CHECK(split_tagged(without.out, "stdout").by_rank[0] == std::vector<std::string>{"[unset]"});
  const RunResult with =
      run_hvdrun({"-np", "1", "-x", "MY_SECRET", "sh", "-c", script}, {{"MY_SECRET", "s3"}});
  INFO(show(with));
  CHECK(with.exit_code == 0);
  CHECK(split_tagged(with.out, "stdout").by_rank[0] == std::vector<std::string>{"[s3]"});
}

TEST_CASE("two local host entries give cross ranks and group ranks", "[launch]") {
  const RunResult r =
      run_hvdrun({"-H", "localhost:2,127.0.0.1:2", "sh", "-c",
                  "echo $HOROVOD_LOCAL_RANK $HOROVOD_CROSS_RANK $HOROVOD_CROSS_SIZE $GROUP_RANK "
                  "$HOROVOD_HOSTNAME $HOROVOD_SIZE"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  TaggedLines out = split_tagged(r.out, "stdout");
  CHECK(out.by_rank[0] == std::vector<std::string>{"0 0 2 0 localhost 4"});
  CHECK(out.by_rank[1] == std::vector<std::string>{"1 0 2 0 localhost 4"});
  CHECK(out.by_rank[2] == std::vector<std::string>{"0 1 2 1 127.0.0.1 4"});
  CHECK(out.by_rank[3] == std::vector<std::string>{"1 1 2 1 127.0.0.1 4"});
}

// ---------------------------------------------------------------------------------------------
// Failures: the first failed rank's code, the others stopped, the cause named

TEST_CASE("a failing rank stops the others and is named with its last stderr", "[launch]") {
  JobMarker marker;
  const auto start = Clock::now();
  const RunResult r =
      run_hvdrun({"-np", "3", "--grace", "1", "--json", "-x", marker.forward(), "sh", "-c",
                  "if [ $HOROVOD_RANK = 1 ]; then sleep 0.2; echo first >&2; echo second >&2; "
                  "printf 'third, unfinished' >&2; exit 3; fi; sleep 30"},
                 {marker.env()});
  const auto elapsed = Clock::now() - start;
  INFO(show(r));
  CHECK(r.exit_code == 3);
  CHECK(elapsed < 10s);
  CHECK_THAT(r.err, ContainsSubstring("rank 1 (host localhost, local rank 1) exited with code 3"));
  CHECK_THAT(r.err, ContainsSubstring("hvdrun stopped 2 other ranks"));
  CHECK_THAT(r.err, ContainsSubstring("    first\n    second\n    third, unfinished\n"));
  const json doc = parse_json(r.out);
  CHECK(doc["ok"] == false);
  CHECK(doc["exit_code"] == 3);
  const json& failure = doc["first_failure"];
  CHECK(failure["rank"] == 1);
  CHECK(failure["exit_code"] == 3);
  CHECK(failure["signal"].is_null());
  CHECK(failure["stopped_by_hvdrun"] == false);
  CHECK(failure["description"] == "exited with code 3");
  CHECK(failure["last_stderr"] == json::array({"first", "second", "third, unfinished"}));
  for (int other : {0, 2}) {
    INFO("rank " << other);
    CHECK(doc["ranks"][other]["stopped_by_hvdrun"] == true);
    CHECK(doc["ranks"][other]["signal"] == "SIGTERM");
    CHECK(doc["ranks"][other]["exit_code"].is_null());
  }
  CHECK(marker.alive().empty());
}

TEST_CASE("a rank killed by SIGKILL makes hvdrun exit 137 and says SIGKILL", "[launch]") {
  const RunResult r = run_hvdrun({"-np", "2", "--grace", "1", "--json", "sh", "-c",
                                  "if [ $HOROVOD_RANK = 0 ]; then kill -9 $$; fi; sleep 30"});
  INFO(show(r));
  CHECK(r.exit_code == 137);
  CHECK_THAT(r.err, ContainsSubstring(
                        "rank 0 (host localhost, local rank 0) was killed by signal 9 (SIGKILL"));
  const json doc = parse_json(r.out);
  CHECK(doc["exit_code"] == 137);
  CHECK(doc["first_failure"]["rank"] == 0);
  CHECK(doc["first_failure"]["signal"] == "SIGKILL");
  CHECK(doc["first_failure"]["exit_code"].is_null());
  CHECK_THAT(doc["first_failure"]["description"].get<std::string>(), ContainsSubstring("SIGKILL"));
  CHECK(doc["ranks"][1]["stopped_by_hvdrun"] == true);
}

TEST_CASE("a rank that ignores SIGTERM is killed after the grace period", "[launch]") {
  JobMarker marker;
  TempDir dir;
  const auto start = Clock::now();
  const RunResult r = run_hvdrun(
      {"-np", "2", "--grace", "1", "--json", "-x", marker.forward(), "-x", "TESTDIR=" + dir.path(),
       "sh", "-c",
       "if [ $HOROVOD_RANK = 0 ]; then while [ ! -e $TESTDIR/ready ]; do sleep 0.02; done; exit 4; "
       "fi; trap '' TERM; touch $TESTDIR/ready; sleep 30"},
      {marker.env()});
  const auto elapsed = Clock::now() - start;
  INFO(show(r));
  CHECK(r.exit_code == 4);
  CHECK(elapsed >= 900ms);  // the grace period was given
  CHECK(elapsed < 8s);
  const json doc = parse_json(r.out);
  CHECK(doc["first_failure"]["rank"] == 0);
  CHECK(doc["ranks"][1]["signal"] == "SIGKILL");
  CHECK(doc["ranks"][1]["stopped_by_hvdrun"] == true);
  CHECK(marker.alive().empty());
}

TEST_CASE("a missing working directory exits 127 with one message naming the host", "[launch]") {
  JobMarker marker;
  const std::string missing = "/nonexistent-" + random_token();
  const RunResult r =
      run_hvdrun({"-np", "2", "--wd", missing, "-x", marker.forward(), "true"}, {marker.env()});
  INFO(show(r));
  CHECK(r.exit_code == 127);
  CHECK(r.out.empty());
  CHECK(count(r.err, "hvdrun: error:") == 1);
  CHECK_THAT(r.err, ContainsSubstring("host localhost"));
  CHECK_THAT(r.err, ContainsSubstring(missing));
  CHECK(marker.alive().empty());

  const RunResult j = run_hvdrun({"-np", "2", "--json", "--wd", missing, "true"});
  INFO(show(j));
  CHECK(j.exit_code == 127);
  const json doc = parse_json(j.out);
  CHECK(doc["exit_code"] == 127);
  CHECK_THAT(doc["error"]["message"].get<std::string>(), ContainsSubstring(missing));
  CHECK(doc["first_failure"].is_null());
  CHECK(doc["ranks"][0]["pid"].is_null());
}

TEST_CASE("a missing program exits 127 with one message naming the host", "[launch]") {
  JobMarker marker;
  const std::string program = "./no-such-program-" + random_token();
  for (const std::vector<std::string>& hosts :
       {std::vector<std::string>{"-np", "1"},
        std::vector<std::string>{"-H", "localhost:2,127.0.0.1:2"}}) {
    std::vector<std::string> args = hosts;
    args.insert(args.end(), {"-x", marker.forward(), program, "--flag"});
    const RunResult r = run_hvdrun(args, {marker.env()});
    INFO(show(r));
    CHECK(r.exit_code == 127);
    CHECK(r.out.empty());
    CHECK(count(r.err, "hvdrun: error:") == 1);
    const bool names_host = r.err.find("host localhost: rank") != std::string::npos ||
                            r.err.find("host 127.0.0.1: rank") != std::string::npos;
    CHECK(names_host);
    CHECK_THAT(r.err, ContainsSubstring("cannot run the command '" + program + "'"));
    CHECK(marker.alive().empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Output

TEST_CASE("ten thousand lines from each of four ranks arrive whole and in order", "[launch]") {
  TempDir dir;
  // A fifth rank writes 100 kB of random bytes: it must not break the other ranks' lines.
  std::string blob;
  std::mt19937 rng(7);
  for (int i = 0; i < 100000; ++i) blob += static_cast<char>(rng() & 0xff);
  write_file(dir / "blob", blob);
  const RunResult r = run_hvdrun(
      {"-np", "5", "--output-filename", dir / "out", "-x", "TESTDIR=" + dir.path(), "sh", "-c",
       "if [ $HOROVOD_RANK = 4 ]; then exec cat $TESTDIR/blob; fi; "
       "exec awk -v r=$HOROVOD_RANK 'BEGIN { for (i = 1; i <= 10000; i++) "
       "printf \"%d r%d abcdefghijklmnopqrstuvwxyz0123456789\\n\", i, r }'"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  TaggedLines out = split_tagged(r.out, "stdout");
  CHECK(out.other.empty());
  for (int rank = 0; rank < 4; ++rank) {
    INFO("rank " << rank);
    const std::vector<std::string>& lines = out.by_rank[rank];
    CHECK(lines.size() == 10000);
    size_t bad = 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string want = std::to_string(i + 1) + " r" + std::to_string(rank) +
                               " abcdefghijklmnopqrstuvwxyz0123456789";
      if (lines[i] != want && bad++ < 3) CHECK(lines[i] == want);
    }
    CHECK(bad == 0);
  }
  CHECK(out.by_rank[4] == expected_lines(blob));
  CHECK(read_file(dir / "out/rank.4/stdout") == blob);  // the file keeps the bytes as written
  std::string rank0;
  for (int i = 1; i <= 10000; ++i) {
    rank0 += std::to_string(i) + " r0 abcdefghijklmnopqrstuvwxyz0123456789\n";
  }
  CHECK(read_file(dir / "out/rank.0/stdout") == rank0);
}

TEST_CASE("a slow reader of hvdrun's stdout loses no line", "[launch]") {
  TempDir dir;
  Hvdrun hvdrun({.args = {"-np", "2", "seq", "1", "30000"},
                 .env = {},
                 .out_path = "",
                 .err_path = dir / "err"});
  std::string out;
  char buf[4096];
  const auto deadline = Clock::now() + 25s;
  bool timed_out = false;
  while (true) {
    const ssize_t n = ::read(hvdrun.stdout_fd(), buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    std::this_thread::sleep_for(1ms);  // about 4 MB/s: hvdrun must wait for us
    if (Clock::now() > deadline) {
      timed_out = true;
      break;
    }
  }
  const auto code = hvdrun.wait(5s);
  INFO(read_file(dir / "err"));
  CHECK_FALSE(timed_out);
  CHECK(code == 0);
  TaggedLines tagged = split_tagged(out, "stdout");
  CHECK(tagged.other.empty());
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const std::vector<std::string>& lines = tagged.by_rank[rank];
    REQUIRE(lines.size() == 30000);
    size_t bad = 0;
    for (size_t i = 0; i < lines.size(); ++i) bad += lines[i] != std::to_string(i + 1) ? 1 : 0;
    CHECK(bad == 0);
  }
}

TEST_CASE("output-filename keeps each rank's untagged bytes", "[launch]") {
  for (const char* np : {"1", "2"}) {
    INFO("-np " << np);
    TempDir dir;
    const RunResult r =
        run_hvdrun({"-np", np, "--output-filename", dir / "logs", "sh", "-c",
                    "printf 'out %s\\nsecond\\rthird\\r\\nlast partial' $HOROVOD_RANK; "
                    "printf 'err %s\\nerr partial' $HOROVOD_RANK >&2"});
    INFO(show(r));
    REQUIRE(r.exit_code == 0);
    const int ranks = std::stoi(np);
    TaggedLines out = split_tagged(r.out, "stdout");
    TaggedLines err = split_tagged(r.err, "stderr");
    for (int rank = 0; rank < ranks; ++rank) {
      INFO("rank " << rank);
      const std::string R = std::to_string(rank);
      const std::string folder = dir / ("logs/rank." + R);
      CHECK(read_file(folder + "/stdout") == "out " + R + "\nsecond\rthird\r\nlast partial");
      CHECK(read_file(folder + "/stderr") == "err " + R + "\nerr partial");
      CHECK(out.by_rank[rank] ==
            std::vector<std::string>{"out " + R, "second", "third", "last partial"});
      CHECK(err.by_rank[rank] == std::vector<std::string>{"err " + R, "err partial"});
    }
    CHECK_FALSE(std::filesystem::exists(dir / ("logs/rank." + std::to_string(ranks))));
  }
}

TEST_CASE("carriage return ends a line and a last partial line is flushed", "[launch]") {
  const RunResult r = run_hvdrun({"-np", "1", "sh", "-c",
                                  "printf 'one\\rtwo\\r\\nthree\\n\\nfour'; printf 'tail' >&2; "
                                  "head -c 2500000 /dev/zero | tr '\\0' x"});
  INFO(show(r).substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  TaggedLines out = split_tagged(r.out, "stdout");
  CHECK(out.other.empty());
  const std::vector<std::string>& lines = out.by_rank[0];
  REQUIRE(lines.size() == 7);
  CHECK(std::vector<std::string>(lines.begin(), lines.begin() + 4) ==
        std::vector<std::string>{"one", "two", "three", ""});
  // "four" and the 2.5 MB without a newline form one 2.5 MB line, cut at 1 MiB.
  CHECK(lines[4] == "four" + std::string((1u << 20) - 4, 'x'));
  CHECK(lines[5] == std::string(1u << 20, 'x'));
  CHECK(lines[6] == std::string(2500000 + 4 - 2 * (1u << 20), 'x'));
  CHECK(split_tagged(r.err, "stderr").by_rank[0] == std::vector<std::string>{"tail"});
}

// ---------------------------------------------------------------------------------------------
// Bytes, not text

TEST_CASE("argv and -x values keep non-UTF-8 bytes and newlines end to end", "[launch]") {
  TempDir dir;
  const std::string value = "caf\xe9\n\xfe\xff line two=";
  const std::string arg = "arg \xff\nwith a newline";
  const RunResult r =
      run_hvdrun({"-np", "1", "-x", "BYTES=" + value, "-x", "TESTDIR=" + dir.path(), "sh", "-c",
                  "printf %s \"$BYTES\" > $TESTDIR/v; printf %s \"$1\" > $TESTDIR/a", "sh", arg});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(dir / "v") == value);
  CHECK(read_file(dir / "a") == arg);
}

TEST_CASE("a program or directory name that is not UTF-8 still gets a clear message", "[launch]") {
  JobMarker marker;
  const std::string token = random_token();
  // The agent reports these in a JSON error frame: the bytes must not crash it.
  const RunResult program =
      run_hvdrun({"-np", "1", "-x", marker.forward(), "./no-such-\xff-" + token}, {marker.env()});
  const RunResult wd =
      run_hvdrun({"-np", "1", "-x", marker.forward(), "--wd", "/nonexistent-\xff-" + token, "true"},
                 {marker.env()});
  for (const RunResult* r : {&program, &wd}) {
    INFO(show(*r));
    CHECK(r->exit_code == 127);
    CHECK(count(r->err, "hvdrun: error:") == 1);
    CHECK(r->err.find("exited unexpectedly") == std::string::npos);
    CHECK(r->err.find("terminate called") == std::string::npos);
  }
  CHECK_THAT(program.err,
             ContainsSubstring("host localhost: rank 0: cannot run the command './no-such-"));
  CHECK_THAT(wd.err, ContainsSubstring("host localhost: the working directory /nonexistent-"));
  CHECK(marker.alive().empty());
}

TEST_CASE("output-filename creates both files at a rank's start, also when it writes nothing",
          "[launch]") {
  // Issue 55: rank.N/stderr appeared only once the rank wrote to stderr; the docs promise both.
  TempDir dir;
  const RunResult r = run_hvdrun({"-np", "2", "--output-filename", dir / "logs", "sh", "-c",
                                  "if [ $HOROVOD_RANK = 0 ]; then echo only stdout; fi"});
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  for (const char* file : {"rank.0/stdout", "rank.0/stderr", "rank.1/stdout", "rank.1/stderr"}) {
    INFO(file);
    CHECK(std::filesystem::is_regular_file(dir / (std::string("logs/") + file)));
  }
  CHECK(read_file(dir / "logs/rank.0/stdout") == "only stdout\n");
  CHECK(read_file(dir / "logs/rank.0/stderr").empty());
  CHECK(read_file(dir / "logs/rank.1/stdout").empty());
  CHECK(read_file(dir / "logs/rank.1/stderr").empty());
}

TEST_CASE("output-filename never follows a symbolic link below its folder", "[launch]") {
  // Another user of a shared folder plants links where hvdrun will write: rank.0/stdout to a file
  // of ours, and rank.1 to a folder of ours. Neither is followed; the job still runs.
  TempDir dir;
  const std::string logs = dir / "logs";
  std::filesystem::create_directories(logs + "/rank.0");
  const std::string victim = dir / "victim";
  write_file(victim, "precious\n");
  std::filesystem::create_symlink(victim, logs + "/rank.0/stdout");
  std::filesystem::create_directories(dir / "elsewhere");
  std::filesystem::create_symlink(dir / "elsewhere", logs + "/rank.1");
  const RunResult r =
      run_hvdrun({"-np", "2", "--output-filename", logs, "sh", "-c", "echo out $HOROVOD_RANK"});
  INFO(show(r));
  CHECK(r.exit_code == 0);
  CHECK(read_file(victim) == "precious\n");
  CHECK_FALSE(std::filesystem::exists(dir / "elsewhere/stdout"));
  CHECK_THAT(r.err,
             ContainsSubstring("--output-filename: refusing to write " + logs + "/rank.0/stdout"));
  CHECK_THAT(r.err,
             ContainsSubstring("--output-filename: refusing to write " + logs + "/rank.1/stdout"));
  CHECK_THAT(r.out, ContainsSubstring("[1,0]<stdout>:out 0"));
}

// ---------------------------------------------------------------------------------------------
// The README's samples are what hvdrun prints (issue 55: they left out its notice and info lines)

namespace {

// The README's sample after the line `command` (four spaces in front, as the page indents them):
// the indented lines up to the next `    hvdrun -...` command or the first line not indented,
// blank lines left out, the indentation removed.
std::vector<std::string> readme_sample(const std::string& command) {
  std::ifstream in(std::string(HVD_SOURCE_DIR) + "/README.md");
  std::vector<std::string> out;
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line == "    " + command) {
      inside = true;
      continue;
    }
    if (!inside || line.empty()) continue;
    if (!line.starts_with("    ") || line.starts_with("    hvdrun -")) break;  // the next command
    out.push_back(line.substr(4));
  }
  return out;
}

// hvdrun in an environment of PATH, HOME and LANG alone (a login has more: the dry run's notice
// counts those it does not forward), its output lines without blank ones:
// this binary's path shown as the README's, this user as root, and the count of variables
// that are not forwarded as N.
std::vector<std::string> printed(const std::vector<std::string>& args) {
  std::vector<std::string> argv{"/usr/bin/env", "-i",           "PATH=/usr/bin:/bin",
                                "HOME=/",       "LANG=C.UTF-8", HVDRUN_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const RunResult r = run_program(argv, {}, kRunTimeout);
  INFO(show(r));
  CHECK(r.exit_code == 0);
  const passwd* pw = ::getpwuid(::getuid());
  const std::string user = pw != nullptr ? pw->pw_name : "root";
  std::vector<std::string> out;
  std::istringstream lines(r.err + r.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    for (size_t at; (at = line.find(HVDRUN_BINARY)) != std::string::npos;) {
      line.replace(at, std::string(HVDRUN_BINARY).size(), "/usr/local/bin/hvdrun");
    }
    line = std::regex_replace(line, std::regex(user + "@"), "root@");
    line = std::regex_replace(line, std::regex(R"(notice: \d+ variables? of)"),
                              "notice: N variables of");
    out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("README: the dry-run sample is what hvdrun prints", "[launch][docs]") {
  std::vector<std::string> sample = readme_sample("hvdrun --dry-run -np 3 -H w0:1,w1:2 ./train");
  REQUIRE(!sample.empty());
  for (std::string& line : sample) {
    line = std::regex_replace(line, std::regex(R"(notice: \d+ variables? of)"),
                              "notice: N variables of");
  }
  CHECK(printed({"--dry-run", "-np", "3", "-H", "w0:1,w1:2", "./train"}) == sample);
}

TEST_CASE("README: the local example's sample is what hvdrun prints", "[launch][docs]") {
  const std::vector<std::string> sample =
      readme_sample("hvdrun -np 2 sh -c 'echo \"rank $RANK of $WORLD_SIZE\"'");
  REQUIRE(!sample.empty());
  // stdout and stderr interleave as they come: the same lines, in any order.
  std::multiset<std::string> want(sample.begin(), sample.end());
  const std::vector<std::string> got_lines =
      printed({"-np", "2", "sh", "-c", "echo \"rank $RANK of $WORLD_SIZE\""});
  const std::multiset<std::string> got(got_lines.begin(), got_lines.end());
  CHECK(got == want);
}
