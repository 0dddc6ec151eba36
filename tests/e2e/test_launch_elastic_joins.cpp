// Hosts that join an elastic job over SSH (launcher/native/native_job_join.cpp), issue 51
// finding 6: a discovery that lists many new hosts at once must not open a login to each at the
// same time; at most --ssh-concurrency join logins run together, the others wait their turn.
// The new hosts' "sshd"s are silent listeners of the test's own (tests/support/silent_crowd.h)
// that count the connections open at once; each login ends at its banner timeout.
#include <string>
#include <vector>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/e2e/launch_helpers.h"
#include "tests/support/silent_crowd.h"

using namespace hvd::test;  // NOLINT: test helpers
using Catch::Matchers::ContainsSubstring;

TEST_CASE("elastic launch: hosts that join over SSH log in at most --ssh-concurrency at a time",
          "[elastic]") {
  constexpr int kHosts = 6;
  constexpr int kConcurrency = 2;
  JobMarker marker;
  TempDir dir;
  std::vector<std::string> addresses;
  for (int i = 0; i < kHosts; ++i) addresses.push_back("127.0.1." + std::to_string(150 + i));
  SilentCrowd crowd(addresses);
  // The job runs on this machine from the start; every run of the script also lists the silent
  // hosts, all new at the second run.
  std::string body = "echo localhost:1\nif [ $n -ge 2 ]; then\n";
  for (const std::string& a : addresses) body += "  echo " + a + ":1\n";
  body += "fi\n";
  const std::string script = discovery_script(dir, body);
  write_file(dir / "ssh_config", "");
  std::vector<std::string> args{
      "--host-discovery-script", script, "--discovery-interval", "0.3", "--min-np", "1"};
  args.insert(args.end(), {"--ssh-concurrency", std::to_string(kConcurrency), "--ssh-timeout", "1",
                           "-p", std::to_string(crowd.port()), "--ssh-config", dir / "ssh_config",
                           "--ssh-known-hosts", dir / "known_hosts"});
  // 70 steps of 100 ms: the job outlives the three rounds of two logins (1 s each).
  args.insert(args.end(),
              {"-x", marker.forward(), "-x", "ELASTIC_CHECK_STEP_MS=100", ELASTIC_CHECK, "70"});
  const RunResult r = run_hvdrun(args, {marker.env()}, std::chrono::seconds(100));
  INFO("exit code " << r.exit_code << "\n--- stdout ---\n"
                    << r.out.substr(0, 4000) << "\n--- stderr ---\n"
                    << r.err.substr(0, 12000));
  REQUIRE(r.exit_code == 0);
  INFO("logins: " << crowd.accepted() << ", at most " << crowd.peak_open() << " at once");
  for (const std::string& a : addresses) {
    CHECK_THAT(r.err, ContainsSubstring("elastic: host " + a + " could not join: banner_timeout"));
  }
  CHECK(crowd.accepted() >= kHosts);  // every host's login ran
  CHECK(crowd.peak_open() >= 1);
  CHECK(crowd.peak_open() <= kConcurrency);
  CHECK_THAT(r.out, ContainsSubstring("worker 0 done: generation 0 rank 0 size 1"));
  CHECK(wait_until([&] { return marker.alive().empty(); }, 5s));
}
