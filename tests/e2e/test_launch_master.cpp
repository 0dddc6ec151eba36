// MASTER_ADDR:MASTER_PORT over the sshd test hosts, as torch.distributed's env:// uses it: with
// rank 0 on the second host, the ranks on other hosts reach the port rank 0 listens on.
#include <filesystem>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/test_hosts.h"

namespace fs = std::filesystem;

TEST_CASE("launch: ranks on other hosts reach rank 0 at MASTER_ADDR and MASTER_PORT",
          "[launch][master]") {
  const auto hosts = hvd::test::TestHosts::load();
  const fs::path known_hosts = fs::temp_directory_path() / "hvd_master_known_hosts";
  fs::copy_file(hosts.known_hosts, known_hosts, fs::copy_options::overwrite_existing);
  // Rank 0 on the second fixture host, ranks 1 and 2 on the first and third.
  const std::string list =
      hosts.addresses[1] + ":1," + hosts.addresses[0] + ":1," + hosts.addresses[2] + ":1";
  const auto r = hvd::test::run_hvdrun({"-np", "3", "-H", list, "-p", std::to_string(hosts.port),
                                        "--ssh-config", hosts.ssh_config, "--ssh-known-hosts",
                                        known_hosts.string(), MASTER_PORT_CHECK});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out,
             Catch::Matchers::ContainsSubstring("[1,0]<stdout>:rank 0 got: hello from rank 1"));
  CHECK_THAT(r.out,
             Catch::Matchers::ContainsSubstring("[1,0]<stdout>:rank 0 got: hello from rank 2"));
  fs::remove(known_hosts);
}
