// Real PyTorch under hvdrun (Debian's python3-torch, run with /usr/bin/python3), over two sshd test
// hosts, native and --mpi: DDP with init_process_group("gloo") over env:// averages the ranks'
// gradients; a rank's output reaches the console at once (PYTHONUNBUFFERED), even the line before
// a SIGKILL; a rank's Python exception is the root cause, with its traceback's last line.
// tests/pytorch/ddp_check.py is the rank program. Without torch (scripts/install-deps.sh --torch
// installs it; .ci/run does) each test says it is skipped and why.
#include "tests/support/catch.h"

#include <chrono>
#include <regex>

#include "tests/e2e/launch_ssh_helpers.h"
#include "tests/support/torch_check.h"

using namespace hvd::test::launch_ssh;  // NOLINT: test helpers

namespace {

using hvd::test::have_torch;

#define SKIP_WITHOUT_TORCH()                                                              \
  if (!have_torch()) {                                                                    \
    WARN(                                                                                 \
        "skipped: /usr/bin/python3 cannot import torch (install Debian's python3-torch: " \
        "bash scripts/install-deps.sh --torch)");                                         \
    return;                                                                               \
  }

// hvdrun [--mpi] over hosts a and b, one rank each, running ddp_check.py MODE.
std::vector<std::string> args(const Hosts& hosts, bool mpi, const std::string& a,
                              const std::string& b, const std::string& mode) {
  std::vector<std::string> rest;
  if (mpi) rest.push_back("--mpi");
  rest.insert(rest.end(),
              {"-H", a + ":1," + b + ":1", "-np", "2", "/usr/bin/python3", DDP_CHECK, mode});
  return hosts.args(rest);
}

}  // namespace

TEST_CASE("DDP over init_process_group gloo averages the ranks' gradients", "[pytorch][ssh]") {
  SKIP_WITHOUT_TORCH();
  const bool mpi = GENERATE(false, true);
  INFO((mpi ? "--mpi" : "native"));
  Hosts hosts;
  const std::string a = hosts.addr(60), b = hosts.addr(61);
  const RunResult r = run_hvdrun(args(hosts, mpi, a, b, "grads"), {}, std::chrono::seconds(120));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  for (int rank : {0, 1}) {
    const std::string tag = "[1," + std::to_string(rank) + "]<stdout>:rank " + std::to_string(rank);
    CHECK_THAT(r.out, ContainsSubstring(tag + " of 2: local rank 0, master " + a + ":"));
    CHECK_THAT(r.out, ContainsSubstring(
                          tag + ": DDP gradients equal the mean of 2 ranks' local gradients"));
  }
}

TEST_CASE("a line printed before a sleep reaches the console before the sleep ends",
          "[pytorch][ssh]") {
  SKIP_WITHOUT_TORCH();
  const bool mpi = GENERATE(false, true);
  INFO((mpi ? "--mpi" : "native"));
  Hosts hosts;
  const std::string out = hosts.dir() / "out";
  hvd::test::Hvdrun run({.args = args(hosts, mpi, hosts.addr(62), hosts.addr(63), "sleep"),
                         .env = {},
                         .out_path = out,
                         .err_path = hosts.dir() / "err"});
  // The rank prints "before the sleep at T" (Unix time), then sleeps 5 s.
  const std::regex printed(R"(\[1,0\]<stdout>:rank 0: before the sleep at ([0-9.]+))");
  std::smatch m;
  std::string text;
  const bool seen = hvd::test::wait_until(
      [&] {
        text = hvd::test::read_file(out);
        return std::regex_search(text, m, printed);
      },
      std::chrono::seconds(60));
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const int code = run.wait(std::chrono::seconds(60));
  INFO(text << hvd::test::read_file(hosts.dir() / "err"));
  REQUIRE(seen);
  CHECK(now < std::stod(m[1]) + 5);  // on the console while the rank still slept
  CHECK(code == 0);
}

TEST_CASE("the line a rank printed before its SIGKILL is not lost", "[pytorch][ssh]") {
  SKIP_WITHOUT_TORCH();
  const bool mpi = GENERATE(false, true);
  INFO((mpi ? "--mpi" : "native"));
  Hosts hosts;
  const RunResult r = run_hvdrun(args(hosts, mpi, hosts.addr(60), hosts.addr(61), "kill"), {},
                                 std::chrono::seconds(120));
  INFO(show(r));
  CHECK(r.exit_code == 137);
  CHECK_THAT(r.out, ContainsSubstring("[1,1]<stdout>:rank 1: last words before SIGKILL"));
}

TEST_CASE("a rank's Python exception is the root cause, with its last line", "[pytorch][ssh]") {
  SKIP_WITHOUT_TORCH();
  const bool mpi = GENERATE(false, true);
  INFO((mpi ? "--mpi" : "native"));
  Hosts hosts;
  const std::string b = hosts.addr(63);
  const RunResult r =
      run_hvdrun(args(hosts, mpi, hosts.addr(62), b, "raise"), {}, std::chrono::seconds(120));
  INFO(show(r));
  CHECK(r.exit_code == 1);
  if (mpi &&
      r.err.find("a rank exited with code 1; mpirun did not say which") != std::string::npos) {
    // Under load mpirun sometimes aborts the job before printing which rank failed (Open MPI's
    // race, seen in a suite run of 2026-12-03; 83aa16e): hvdrun says so, and the rank's own
    // tagged lines still carry the root cause.
    CHECK_THAT(r.err, ContainsSubstring(
                          "[1,1]<stderr>:ValueError: ddp_check: rank 1 cannot read its shard"));
    return;
  }
  CHECK_THAT(r.err, ContainsSubstring("hvdrun: rank 1 (host " + b +
                                      ", local rank 0) exited with code 1."));
  CHECK_THAT(r.err, ContainsSubstring("lines of rank 1's stderr:"));
  CHECK_THAT(r.err, ContainsSubstring("    ValueError: ddp_check: rank 1 cannot read its shard"));
}
