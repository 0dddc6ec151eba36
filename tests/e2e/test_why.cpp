// The hang verdict (docs/why.md) over two sshd test hosts: rank 1 keeps rank 0 waiting (asleep,
// spinning, stopped, or in another op: tests/e2e/why_rank.py) and hvdrun, not only rank 0's log,
// names it: its host, the op it has not submitted, what its process is doing and its Python
// stack, on stderr and in --json's "stalls". Each job ends by itself once rank 1 catches up.
// Without torch or the Python binding each test says it is skipped and why.
#include "tests/support/catch.h"

#include <chrono>

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
// wrapper script does.
Stalled run_mode(const std::string& mode, bool through_shell = false) {
  Hosts hosts;
  Stalled s;
  s.a = hosts.addr(39);
  s.b = hosts.addr(43);
  std::vector<std::string> command{"/usr/bin/python3", WHY_RANK, mode};
  if (through_shell) {
    command = {"sh", "-c", std::string("/usr/bin/python3 ") + WHY_RANK + " " + mode + "; exit $?"};
  }
  std::vector<std::string> rest{"-H", s.a + ":1," + s.b + ":1", "-np", "2", "--json"};
  rest.insert(rest.end(), command.begin(), command.end());
  s.run = run_hvdrun(hosts.args(rest),
                     {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "2"},
                      {"PYTHONPATH", HVD_PYTHON_DIR},
                      {"PYTHONDONTWRITEBYTECODE", "1"}},
                     std::chrono::seconds(120));
  if (s.run.exit_code == 0) s.stalls = parse_json(s.run.out).at("stalls");
  return s;
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
  CHECK_THAT(s.run.err, ContainsSubstring("why_rank.py:22 in load_batch"));
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
