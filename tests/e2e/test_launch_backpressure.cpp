// Output that flows while something stops taking it, with the local agent and agents that
// --rsh-agent starts (issue 51, findings 2 and 3; the SSH agent's cases:
// test_launch_ssh_backpressure.cpp; srun's: tests/slurm/backpressure_check.sh): a console that
// pauses must slow the ranks but never lose a host, and a frozen hvdrun must not leave printing
// ranks blocked for good.
#include "tests/support/catch.h"

#include "tests/e2e/backpressure_helpers.h"

using namespace hvd::test;                // NOLINT: test helpers
using namespace hvd::test::backpressure;  // NOLINT: test helpers
using Catch::Matchers::ContainsSubstring;

TEST_CASE("a console that stops reading past twice --keepalive loses no host (local agent)",
          "[launch]") {
  JobMarker marker;
  TempDir dir;
  std::vector<std::string> args{"-np", "1", "--keepalive", "1", "-x", marker.forward()};
  for (const std::string& a : printing_rank()) args.push_back(a);
  const PausedReader r = run_paused_reader(args, marker, dir, 5s);
  INFO(r.err.substr(0, 4000));
  CHECK(r.exit_code == 0);
  CHECK(r.lines == kLines);
  CHECK(r.last_line == std::to_string(kLines));
  CHECK(r.paused_cpu < 0.5);  // waiting, not polling
  CHECK(r.paused_rss < 64);   // the 8 MiB console queue, not the rank's 20 MB
  CHECK(r.err.find("lost") == std::string::npos);
}

TEST_CASE("a frozen hvdrun: its agent stops ranks that are blocked printing (local agent)",
          "[launch]") {
  // Before: the agent's write to the frozen hvdrun blocked, so its silence timer never ran and
  // the printing ranks stayed blocked in their writes for good.
  JobMarker marker;
  TempDir dir;
  std::vector<std::string> args{"-np",     "2", "--keepalive", "1",
                                "--grace", "1", "-x",          marker.forward()};
  for (const std::string& a : endless_rank()) args.push_back(a);
  const FrozenLauncher r = run_frozen_launcher(args, marker, dir, 2, 10s);
  INFO(r.err.substr(0, 4000));
  REQUIRE(r.printing);
  REQUIRE(r.ranks_gone_after.has_value());
  CHECK(*r.ranks_gone_after >= 1500ms);  // 2 s of silence, less the time since the last ping
  CHECK(*r.ranks_gone_after < 8s);
}

// --rsh-agent: each host's agent started by a command of the user's (here `env`, on this
// machine, for hosts that are not its names): the same native job, its pipes the command's.
namespace {
std::vector<std::string> rsh_hosts_args(const JobMarker& marker) {
  return {"-np",         "2", "-H", "rsh-a:1,rsh-b:1", "--rsh-agent", "env HVDTEST_RSH_HOST={host}",
          "--keepalive", "1", "-x", marker.forward()};
}
}  // namespace

TEST_CASE("a console that stops reading past twice --keepalive loses no host (--rsh-agent)",
          "[launch]") {
  JobMarker marker;
  TempDir dir;
  std::vector<std::string> args = rsh_hosts_args(marker);
  for (const std::string& a : printing_rank()) args.push_back(a);
  const PausedReader r = run_paused_reader(args, marker, dir, 5s);
  INFO(r.err.substr(0, 4000));
  CHECK(r.exit_code == 0);
  CHECK(r.lines == kLines);
  CHECK(r.lines1 == kLines);
  CHECK(r.last_line == std::to_string(kLines));
  CHECK(r.paused_cpu < 0.5);
  CHECK(r.paused_rss < 64);
  CHECK(r.err.find("lost") == std::string::npos);
}

TEST_CASE("a frozen hvdrun: agents that --rsh-agent started stop ranks blocked printing",
          "[launch]") {
  JobMarker marker;
  TempDir dir;
  std::vector<std::string> args = rsh_hosts_args(marker);
  args.insert(args.end(), {"--grace", "1"});
  for (const std::string& a : endless_rank()) args.push_back(a);
  const FrozenLauncher r = run_frozen_launcher(args, marker, dir, 2, 10s);
  INFO(r.err.substr(0, 4000));
  REQUIRE(r.printing);
  REQUIRE(r.ranks_gone_after.has_value());
  CHECK(*r.ranks_gone_after >= 1500ms);
  CHECK(*r.ranks_gone_after < 8s);
}
