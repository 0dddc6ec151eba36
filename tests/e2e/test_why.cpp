// The hang verdict (docs/why.md) over two sshd test hosts: rank 1 keeps rank 0 waiting (asleep,
// spinning, stopped, or in another op: tests/e2e/why_rank.py) and hvdrun, not only rank 0's log,
// names it: its host, the op it has not submitted, what its process is doing and its Python
// stack, on stderr and in --json's "stalls". Each job ends by itself once rank 1 catches up.
// Without torch or the Python binding each test says it is skipped and why.
#include "tests/support/catch.h"

#include <chrono>
#include <optional>
#include <sstream>

#include "tests/e2e/launch_ssh_helpers.h"
#include "tests/support/torch_check.h"

using namespace hvd::test::launch_ssh;  // NOLINT: test helpers

namespace {

using hvd::test::have_torch;

#define SKIP_WITHOUT_PYTHON()                                                          \
  if (!HVD_TEST_HAS_PYTHON || !have_torch()) {                                         \
    WARN(                                                                              \
        "skipped: no Python binding in this build, or /usr/bin/python3 cannot import " \
        "torch (bash scripts/install-deps.sh --torch)");                               \
    return;                                                                            \
  }

struct Stalled {
  RunResult run;
  json stalls;
  std::string a, b;  // the hosts of rank 0 and rank 1
};

// `through_shell`: each rank is a shell that runs Python as its child (not exec'd), as a
// wrapper script does. `flags`: hvdrun's, before the command.
Stalled run_mode(const std::string& mode, bool through_shell = false,
                 const std::vector<std::string>& flags = {}) {
  Hosts hosts;
  Stalled s;
  s.a = hosts.addr(39);
  s.b = hosts.addr(43);
  std::vector<std::string> command{"/usr/bin/python3", WHY_RANK, mode};
  if (through_shell) {
    command = {"sh", "-c", std::string("/usr/bin/python3 ") + WHY_RANK + " " + mode + "; exit $?"};
  }
  std::vector<std::string> rest{"-H", s.a + ":1," + s.b + ":1", "-np", "2", "--json"};
  rest.insert(rest.end(), flags.begin(), flags.end());
  rest.insert(rest.end(), command.begin(), command.end());
  s.run = run_hvdrun(hosts.args(rest),
                     {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "2"},
                      {"PYTHONPATH", HVD_PYTHON_DIR},
                      {"PYTHONDONTWRITEBYTECODE", "1"}},
                     std::chrono::seconds(120));
  if (s.run.exit_code == 0) s.stalls = parse_json(s.run.out).at("stalls");
  return s;
}

// How long `run` took to the second, for a bound.
double seconds_of(const std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The first --json stall entry missing rank 1 (with `state`, if given), and that rank's entry.
std::pair<json, json> missing_rank_1(const json& stalls, const std::string& state = "") {
  for (const json& st : stalls) {
    for (const json& m : st.at("missing")) {
      if (m.at("rank") == 1 && (state.empty() || m.at("state") == state)) return {st, m};
    }
  }
  return {json(), json()};
}

bool stack_has(const json& missing, const std::string& function) {
  for (const json& line : missing.at("stack")) {
    if (line.get<std::string>().find(" in " + function) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("a rank asleep before an allreduce is named with its host, state and stack",
          "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const Stalled s = run_mode("sleep");
  INFO(show(s.run));
  REQUIRE(s.run.exit_code == 0);
  CHECK_THAT(s.run.err,
             ContainsSubstring("hvdrun: warning: stall: rank 1 has not submitted allreduce "
                               "'allreduce.grad.7', which rank 0 has waited on for"));
  CHECK_THAT(s.run.err, ContainsSubstring("rank 1 on " + s.b + ": pid "));
  CHECK_THAT(s.run.err, ContainsSubstring("why_rank.py:35 in load_batch"));
  const auto [stall, missing] = missing_rank_1(s.stalls);
  REQUIRE(stall.is_object());
  CHECK(stall.at("op") == "allreduce");
  CHECK(stall.at("tensor") == "allreduce.grad.7");
  CHECK(stall.at("waiting") == json::array({0}));
  CHECK(stall.at("seconds").get<double>() >= 2.0);
  CHECK(missing.at("host") == s.b);
  CHECK(missing.at("state") == "sleeping");
  CHECK(missing.at("submitted").is_null());
  CHECK(stack_has(missing, "load_batch"));
  CHECK(stack_has(missing, "main"));
}

TEST_CASE("a spinning rank is named running, with the function it spins in", "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const Stalled s = run_mode("busy");
  INFO(show(s.run));
  REQUIRE(s.run.exit_code == 0);
  const auto [stall, missing] = missing_rank_1(s.stalls);
  REQUIRE(stall.is_object());
  CHECK(missing.at("state") == "running");
  CHECK(missing.at("cpu_percent").get<double>() > 0);
  CHECK(stack_has(missing, "spin"));
}

TEST_CASE("a stopped rank is named stopped, without a stack it cannot give", "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const Stalled s = run_mode("stop");
  INFO(show(s.run));
  REQUIRE(s.run.exit_code == 0);
  // Every verdict while it is stopped says so (on a loaded machine the last may come after the
  // child continued it).
  const json stopped = missing_rank_1(s.stalls, "stopped").second;
  REQUIRE(stopped.is_object());
  CHECK(stopped.at("stack").empty());
  CHECK_THAT(s.run.err, ContainsSubstring("no stack: the process is stopped"));
}

TEST_CASE("ranks in different ops are each named with what they submitted instead", "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const Stalled s = run_mode("other_op");
  INFO(show(s.run));
  REQUIRE(s.run.exit_code == 0);
  const auto [stall, missing] = missing_rank_1(s.stalls);
  REQUIRE(stall.is_object());
  CHECK(stall.at("tensor") == "allreduce.first");
  CHECK(missing.at("submitted") == json::array({"allreduce.second"}));
  CHECK_THAT(s.run.err, ContainsSubstring("it submitted 'allreduce.second' instead: are the "
                                          "ranks calling different ops?"));
}

TEST_CASE("a Python rank under a wrapper shell is read, and the shell is left alone",
          "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const Stalled s = run_mode("sleep", true);
  INFO(show(s.run));
  REQUIRE(s.run.exit_code == 0);  // the stack signal went to Python, not to the shell
  const auto [stall, missing] = missing_rank_1(s.stalls);
  REQUIRE(stall.is_object());
  CHECK(missing.at("state") == "sleeping");
  CHECK(stack_has(missing, "load_batch"));
}

TEST_CASE("a stall past the shutdown time ends the job with exit 76, the verdict its cause",
          "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const auto start = std::chrono::steady_clock::now();
  // Rank 1 sleeps for 120 s; the stall shutdown (4 s) ends the job long before.
  TempDir dir;
  const std::string record = dir / "run.jsonl";
  const Stalled s =
      run_mode("hang", false, {"--stall-check-shutdown-time-seconds", "4", "--record", record});
  const double took = seconds_of(start);
  INFO(show(s.run));
  CHECK(s.run.exit_code == 76);
  CHECK_THAT(s.run.err,
             ContainsSubstring("hvdrun: error: the job stalled past "
                               "--stall-check-shutdown-time-seconds: rank 1 has not submitted "
                               "allreduce 'allreduce.grad.7', which rank 0 has waited on for"));
  CHECK_THAT(s.run.err, ContainsSubstring("rank 1 on " + s.b + ": pid "));
  CHECK_THAT(s.run.err, ContainsSubstring(": sleeping, "));
  CHECK_THAT(s.run.err, ContainsSubstring("why_rank.py:35 in load_batch"));
  const json doc = parse_json(s.run.out);
  CHECK(doc.at("exit_code") == 76);
  CHECK(doc.at("error").at("kind") == "stalled");
  const auto [stall, missing] = missing_rank_1(doc.at("stalls"));
  REQUIRE(stall.is_object());
  json ended;
  for (const json& st : doc.at("stalls")) {
    if (st.at("ended_job") == true) ended = st;
  }
  REQUIRE(ended.is_object());
  CHECK(ended.at("tensor") == "allreduce.grad.7");
  CHECK(ended.at("missing").at(0).at("state") == "sleeping");
  CHECK(ended.at("seconds").get<double>() >= 4.0);
  // Rank 0's own failure, which the shutdown caused, is not the root cause.
  CHECK(doc.at("first_failure").is_null());
  CHECK(took < 60);  // not rank 1's 120 s
  // The run record (docs/why.md): the verdict that ended the job, then the failure it caused,
  // then the end with the result.
  std::vector<json> lines;
  std::istringstream in(read_file(record));
  for (std::string line; std::getline(in, line);) lines.push_back(parse_json(line));
  REQUIRE(lines.size() >= 4);
  CHECK(lines.front().at("event") == "launch");
  CHECK(lines.back().at("event") == "end");
  CHECK(lines.back().at("exit_code") == 76);
  CHECK(lines.back().at("result").at("error").at("kind") == "stalled");
  std::optional<std::size_t> stall_at, failure_at;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const json& l = lines[i];
    if (l.at("event") == "stall" && l.at("ended_job") == true && !stall_at) {
      stall_at = i;
      CHECK(l.at("tensor") == "allreduce.grad.7");
      CHECK(l.at("missing").at(0).at("rank") == 1);
      CHECK(l.at("missing").at(0).at("host") == s.b);
    }
    if (l.at("event") == "failure") {
      failure_at = i;
      CHECK(l.at("kind") == "stalled");
    }
  }
  REQUIRE(stall_at);
  REQUIRE(failure_at);
  CHECK(*stall_at < *failure_at);
}

TEST_CASE("a rank frozen for good is named stopped when the stall ends the job", "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const Stalled s =
      run_mode("freeze", false, {"--stall-check-shutdown-time-seconds", "4", "--grace", "1"});
  INFO(show(s.run));
  CHECK(s.run.exit_code == 76);
  CHECK_THAT(s.run.err, ContainsSubstring("hvdrun: error: the job stalled past "
                                          "--stall-check-shutdown-time-seconds: rank 1 "));
  CHECK_THAT(s.run.err, ContainsSubstring(": stopped"));
}

TEST_CASE("a rank that never calls hvd.init() is named, with its stack, at --start-timeout",
          "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const auto start = std::chrono::steady_clock::now();
  const Stalled s = run_mode("no_init", false, {"--start-timeout", "8"});
  const double took = seconds_of(start);
  INFO(show(s.run));
  CHECK(s.run.exit_code == 75);
  CHECK_THAT(s.run.err, ContainsSubstring("hvdrun: warning: stall: rank 1 has not called "
                                          "hvd.init(), which rank 0 has waited in for"));
  CHECK_THAT(s.run.err, ContainsSubstring("hvdrun: error: start-up timed out in hvd.init(): "
                                          "rank 1 has not called hvd.init()"));
  CHECK_THAT(s.run.err, ContainsSubstring("rank 1 on " + s.b + ": pid "));
  CHECK_THAT(s.run.err, ContainsSubstring("why_rank.py:35 in load_batch"));
  // Not rank 0's init watchdog (HOROVOD_GLOO_TIMEOUT_SECONDS, 30 s), which cannot name rank 1.
  CHECK_THAT(s.run.out + s.run.err, !ContainsSubstring("hvd::init() did not finish"));
  const json doc = parse_json(s.run.out);
  CHECK(doc.at("error").at("kind") == "timeout");
  const auto [stall, missing] = missing_rank_1(doc.at("stalls"));
  REQUIRE(stall.is_object());
  CHECK(stall.at("op") == "init");
  CHECK(stall.at("ended_job") == true);
  CHECK(stall.at("waiting") == json::array({0}));
  CHECK(missing.at("state") == "sleeping");
  CHECK(stack_has(missing, "load_batch"));
  CHECK(took < 30);
}

TEST_CASE("a rank whose steps take 30% longer is named a straggler, a balanced job has none",
          "[why][ssh]") {
  SKIP_WITHOUT_PYTHON();
  const Stalled slow = run_mode("straggle");
  INFO(show(slow.run));
  REQUIRE(slow.run.exit_code == 0);
  const json stragglers = parse_json(slow.run.out).at("stragglers");
  REQUIRE(stragglers.size() == 1);
  CHECK(stragglers[0].at("rank") == 1);
  CHECK(stragglers[0].at("host") == slow.b);
  // The others waited about 0.03 s of every 0.13 s step for it: 23% of the run. Under the
  // default engine's cycles, with the steps' gradients cached: its late ones go through rank
  // 0's Controller, which times them.
  CHECK(stragglers[0].at("share").get<double>() > 0.1);
  CHECK(stragglers[0].at("share").get<double>() < 0.5);
  CHECK(stragglers[0].at("others_waited_s").get<double>() > 0.5);
  CHECK_THAT(slow.run.err, ContainsSubstring("hvdrun: warning: straggler: rank 1 on " + slow.b +
                                             " made the others wait "));

  const Stalled even = run_mode("balanced");
  INFO(show(even.run));
  REQUIRE(even.run.exit_code == 0);
  CHECK(parse_json(even.run.out).at("stragglers") == json::array());
  CHECK_THAT(even.run.err, !ContainsSubstring("straggler"));
}
