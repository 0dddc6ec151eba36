// --check-ssh through a ProxyCommand from the ssh config: libssh connects through it (here a
// real `ssh -W` jump over the first fixture host), and a broken proxy is reported as such.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/test_hosts.h"

namespace fs = std::filesystem;
using hvd::test::TestHosts;

namespace {

// Writes an ssh config with one proxied host and a private copy of the known_hosts file.
struct ProxyConfig {
  fs::path dir;
  std::string config;
  std::string known_hosts;

  ProxyConfig(const TestHosts& hosts, const std::string& proxy_command, const std::string& name) {
    dir = fs::temp_directory_path() / ("hvd_proxy_test_" + name);
    fs::create_directories(dir);
    config = (dir / "ssh_config").string();
    known_hosts = (dir / "known_hosts").string();
    fs::copy_file(hosts.known_hosts, known_hosts, fs::copy_options::overwrite_existing);
    std::ofstream(config) << "Host viaproxy\n"
                          << "  HostName " << hosts.addresses.at(2) << "\n"
                          << "  Port " << hosts.port << "\n"
                          << "  User " << hosts.user << "\n"
                          << "  IdentityFile " << hosts.key << "\n"
                          << "  ProxyCommand " << proxy_command << "\n";
  }
  ~ProxyConfig() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

nlohmann::json check(const ProxyConfig& c, int expected_exit) {
  const auto r =
      hvd::test::run_hvdrun({"--check-ssh", "--json", "-H", "viaproxy", "--ssh-config", c.config,
                             "--ssh-known-hosts", c.known_hosts, "--ssh-timeout", "10"});
  INFO(r.err);
  REQUIRE(r.exit_code == expected_exit);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["hosts"].size() == 1);
  return doc["hosts"][0];
}

}  // namespace

TEST_CASE("check-ssh: a ProxyCommand jump through a fixture host works", "[check-ssh][proxy]") {
  const TestHosts hosts = TestHosts::load();
  const ProxyConfig c(hosts, "/usr/bin/ssh -F " + hosts.ssh_config + " -W %h:%p h1", "jump");
  const auto host = check(c, 0);
  INFO(host.dump(2));
  CHECK(host["code"] == "ok");
  CHECK(host["remote"]["hostname"].get<std::string>().size() > 0);
  // The proxy owns the transport: our own resolve/connect/banner stages are not run.
  for (const auto& stage : host["stages"]) CHECK(stage["name"] != "connect");
}

TEST_CASE("check-ssh: a broken ProxyCommand is named in the failure", "[check-ssh][proxy]") {
  const TestHosts hosts = TestHosts::load();
  const ProxyConfig c(hosts, "/bin/false", "broken");
  const auto host = check(c, 69);
  INFO(host.dump(2));
  CHECK(host["code"] == "key_exchange_failed");
  CHECK_THAT(host["message"].get<std::string>(),
             Catch::Matchers::ContainsSubstring("ProxyCommand"));
  CHECK_THAT(host["message"].get<std::string>(), Catch::Matchers::ContainsSubstring("/bin/false"));
}
