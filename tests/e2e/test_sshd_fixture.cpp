// The sshd fixture as every SSH test will use it: hosts.env loads, each host answers on its own
// loopback address with an SSH banner, and hvdrun plans them as remote hosts on the fixture port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/test_hosts.h"

using hvd::test::TestHosts;

namespace {

// Connects to addr:port and returns the first line the server sends ("" on failure).
std::string read_banner(const std::string& addr, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  std::string line;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) {
    char c = 0;
    while (line.size() < 255 && ::read(fd, &c, 1) == 1 && c != '\n') line += c;
    // Identify ourselves before closing so sshd does not log a kex_exchange_identification error.
    const std::string ours = "SSH-2.0-hvdtest\r\n";
    (void)!::write(fd, ours.data(), ours.size());
  }
  ::close(fd);
  return line;
}

}  // namespace

TEST_CASE("sshd fixture: every test host answers with an SSH banner", "[sshd]") {
  const TestHosts hosts = TestHosts::load();
  REQUIRE(hosts.addresses.size() >= 4);
  CHECK(hosts.addresses.front() == "127.0.0.2");
  std::vector<std::string> bad;  // collected here, asserted on the main thread
  for (const std::string& addr : hosts.addresses) {
    const std::string banner = read_banner(addr, hosts.port);
    if (banner.rfind("SSH-2.0-", 0) != 0) bad.push_back(addr + ": '" + banner + "'");
  }
  INFO("hosts without a banner: " << bad.size());
  for (const std::string& b : bad) INFO(b);
  CHECK(bad.empty());
}

TEST_CASE("sshd fixture: hvdrun plans the test hosts as remote on their port", "[sshd]") {
  const TestHosts hosts = TestHosts::load();
  const auto r = hvd::test::run_hvdrun(
      {"--dry-run", "--json", "-H", hosts.host_list(4, 2), "-p", std::to_string(hosts.port),
       "--ssh-config", hosts.ssh_config, "--ssh-known-hosts", hosts.known_hosts, "true"});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["hosts"].size() == 4);
  for (const auto& h : doc["hosts"]) {
    CHECK(h["local"] == false);
    CHECK(h["ssh"]["port"] == hosts.port);
    CHECK(h["ssh"]["user"] == hosts.user);
  }
  CHECK(doc["ranks"].size() == 8);
}
