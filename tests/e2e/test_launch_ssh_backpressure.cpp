// Output that flows while something stops taking it, with agents over SSH (issue 51, findings 2
// and 3; the local agent's cases: test_launch_backpressure.cpp). Over SSH a thread of hvdrun's
// (the pump, ssh/remote_agent.cpp) carries the agent's output and the launcher's keepalive pings
// both: a console that pauses must not stop the pings, and the agent's dead-man switch must fire
// while its output to a frozen hvdrun is blocked.
#include "tests/e2e/backpressure_helpers.h"
#include "tests/e2e/launch_ssh_helpers.h"

using namespace hvd::test::launch_ssh;    // NOLINT: test helpers
using namespace hvd::test::backpressure;  // NOLINT: test helpers

TEST_CASE("a console that stops reading past twice --keepalive loses no SSH host", "[launch-ssh]") {
  // Before: exit 74, "lost the agent ... (the SSH connection closed)", lines missing (in about
  // 1 run of 3 here): the pump blocked in its write to hvdrun's loop (the pings behind it), and
  // when a ping found the agent's channel closed it gave up, dropping the agent's last output
  // and its kDone that libssh still held.
  Hosts hosts;
  JobMarker marker;
  std::vector<std::string> args{
      "-H", hosts.addr(50) + "," + hosts.addr(51), "--keepalive", "1", "-x", marker.forward()};
  for (const std::string& a : printing_rank()) args.push_back(a);
  const PausedReader r = run_paused_reader(hosts.args(args), marker, hosts.dir(), 6s);
  INFO(r.err.substr(0, 4000));
  CHECK(r.exit_code == 0);
  CHECK(r.lines == kLines);
  CHECK(r.lines1 == kLines);
  CHECK(r.last_line == std::to_string(kLines));
  CHECK(r.paused_cpu < 0.5);  // the pump waits, it does not spin
  CHECK(r.paused_rss < 64);
  CHECK(r.err.find("lost") == std::string::npos);
}

TEST_CASE("a frozen hvdrun: the SSH host's agent stops ranks that are blocked printing",
          "[launch-ssh]") {
  Hosts hosts;
  JobMarker marker;
  std::vector<std::string> args{"-H",          hosts.addr(2) + "," + hosts.addr(3),
                                "--keepalive", "1",
                                "--grace",     "1",
                                "-x",          marker.forward()};
  for (const std::string& a : endless_rank()) args.push_back(a);
  const FrozenLauncher r = run_frozen_launcher(hosts.args(args), marker, hosts.dir(), 2, 10s);
  INFO(r.err.substr(0, 4000));
  REQUIRE(r.printing);
  REQUIRE(r.ranks_gone_after.has_value());
  CHECK(*r.ranks_gone_after >= 1500ms);
  CHECK(*r.ranks_gone_after < 8s);
}
