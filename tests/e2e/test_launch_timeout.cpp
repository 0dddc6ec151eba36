// --start-timeout over the sshd test hosts: an agent that does not answer in time is named with
// its phase, the launch exits 75, and nothing of the job is left behind.
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/test_hosts.h"

namespace fs = std::filesystem;

TEST_CASE("launch: a slow agent hits the start timeout with its phase and host named",
          "[launch][timeout]") {
  const auto hosts = hvd::test::TestHosts::load();
  const fs::path dir = fs::temp_directory_path() / "hvd_start_timeout_test";
  fs::create_directories(dir);
  const std::string agent = (dir / "slow-agent").string();
  std::ofstream(agent) << "#!/bin/sh\nsleep 4\nexec " << HVDRUN_BINARY << " \"$@\"\n";
  fs::permissions(agent, fs::perms::owner_all);
  const std::string known_hosts = (dir / "known_hosts").string();
  fs::copy_file(hosts.known_hosts, known_hosts, fs::copy_options::overwrite_existing);

  const auto start = std::chrono::steady_clock::now();
  const auto r =
      hvd::test::run_hvdrun({"-np", "2", "-H", hosts.host_list(2), "-p", std::to_string(hosts.port),
                             "--ssh-config", hosts.ssh_config, "--ssh-known-hosts", known_hosts,
                             "--agent-path", agent, "--start-timeout", "1", "true"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.err);
  CHECK(r.exit_code == 75);
  CHECK_THAT(r.err, Catch::Matchers::ContainsSubstring(
                        "start-up timed out after 1 s in the agent handshake phase; late: " +
                        hosts.addresses[0] + ", " + hosts.addresses[1]));
  CHECK_THAT(r.err, Catch::Matchers::ContainsSubstring("--start-timeout"));
  CHECK(seconds < 8);  // the timeout, plus the bounded wait for the cut-off agents
  fs::remove_all(dir);
}

TEST_CASE("launch: an agent that never answers ends the launch at --start-timeout, not later",
          "[launch][timeout]") {
  const auto hosts = hvd::test::TestHosts::load();
  const fs::path dir = fs::temp_directory_path() / "hvd_start_timeout_silent_test";
  fs::create_directories(dir);
  // Says nothing and ignores its input closing: only the end of its SSH session ends it.
  const std::string agent = (dir / "silent-agent").string();
  std::ofstream(agent) << "#!/bin/sh\necho $$ > " << (dir / "pid").string() << "\nexec sleep 20\n";
  fs::permissions(agent, fs::perms::owner_all);
  const std::string known_hosts = (dir / "known_hosts").string();
  fs::copy_file(hosts.known_hosts, known_hosts, fs::copy_options::overwrite_existing);

  const auto start = std::chrono::steady_clock::now();
  const auto r = hvd::test::run_hvdrun({"-H", hosts.addresses[2], "-p", std::to_string(hosts.port),
                                        "--ssh-config", hosts.ssh_config, "--ssh-known-hosts",
                                        known_hosts, "--agent-path", agent, "--start-timeout", "2",
                                        "--ssh-timeout", "10", "true"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream pid_file(dir / "pid");
  int pid = 0;
  if (pid_file >> pid && pid > 0) ::kill(pid, SIGKILL);  // the sleep left on the "host"
  INFO(r.err);
  CHECK(r.exit_code == 75);
  CHECK_THAT(r.err, Catch::Matchers::ContainsSubstring("start-up timed out after 2 s"));
  CHECK(seconds >= 1.9);
  CHECK(seconds < 3.0);  // the timeout, plus the SSH login: not plus a linger or --ssh-timeout
  fs::remove_all(dir);
}
