// Host names libssh 0.10 does not take ('_': docker-compose's project_worker_1, ssh_config
// aliases), over the sshd test hosts: hvdrun reads OpenSSH's own answer for the name (ssh -G),
// connects to its HostName, and checks the host key under OpenSSH's name for it, so a
// known_hosts entry written by OpenSSH's ssh is honoured and one hvdrun records is OpenSSH's.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/test_hosts.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using hvd::test::RunResult;
using hvd::test::TestHosts;

namespace {

std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out +
         "\n--- stderr ---\n" + r.err;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// An ssh config whose `Host worker_1` maps to the first fixture host (and, with an alias, a
// HostKeyAlias), and an empty known_hosts beside it.
struct AliasConfig {
  fs::path dir;
  std::string config;
  std::string known_hosts;

  AliasConfig(const TestHosts& hosts, const std::string& name, const std::string& key_alias = "") {
    dir = fs::temp_directory_path() / ("hvd_alias_test_" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    config = (dir / "ssh_config").string();
    known_hosts = (dir / "known_hosts").string();
    std::ofstream(known_hosts).flush();
    std::ofstream out(config);
    out << "Host worker_1\n"
        << "  HostName " << hosts.addresses.at(0) << "\n"
        << "  Port " << hosts.port << "\n"
        << "  User " << hosts.user << "\n"
        << "  IdentityFile " << hosts.key << "\n"
        << "  BatchMode yes\n";
    if (!key_alias.empty()) out << "  HostKeyAlias " << key_alias << "\n";
  }
  ~AliasConfig() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  std::vector<std::string> ssh_args() const {
    return {"--ssh-config", config, "--ssh-known-hosts", known_hosts, "--ssh-timeout", "10"};
  }

  // OpenSSH's own `ssh worker_1 true` with this config and known_hosts.
  RunResult openssh(const std::string& policy) const {
    return hvd::test::run_program(
        {"/usr/bin/ssh", "-F", config, "-o", "UserKnownHostsFile=" + known_hosts, "-o",
         "StrictHostKeyChecking=" + policy, "worker_1", "true"},
        {}, std::chrono::seconds(30));
  }
};

nlohmann::json check(const AliasConfig& c, const std::vector<std::string>& extra,
                     int expected_exit) {
  std::vector<std::string> args{"--check-ssh", "--json", "-H", "worker_1"};
  const auto ssh = c.ssh_args();
  args.insert(args.end(), ssh.begin(), ssh.end());
  args.insert(args.end(), extra.begin(), extra.end());
  const RunResult r = hvd::test::run_hvdrun(args);
  INFO(show(r));
  REQUIRE(r.exit_code == expected_exit);
  const auto doc = nlohmann::json::parse(r.out);
  REQUIRE(doc["hosts"].size() == 1);
  return doc["hosts"][0];
}

}  // namespace

TEST_CASE("alias with '_': --check-ssh connects to its HostName and records OpenSSH's entry",
          "[check-ssh][alias]") {
  const TestHosts hosts = TestHosts::load();
  const AliasConfig c(hosts, "check");
  const auto host = check(c, {}, 0);
  INFO(host.dump(2));
  CHECK(host["host"] == "worker_1");
  CHECK(host["code"] == "ok");
  CHECK(host["port"] == hosts.port);
  // Recorded under OpenSSH's name: the HostName, [..]:port.
  const std::string recorded = read_file(c.known_hosts);
  CHECK_THAT(recorded, ContainsSubstring("[" + hosts.addresses.at(0) +
                                         "]:" + std::to_string(hosts.port) + " "));
  // ... which OpenSSH's ssh then accepts under its strictest policy.
  const RunResult ssh = c.openssh("yes");
  INFO(show(ssh));
  CHECK(ssh.exit_code == 0);
}

TEST_CASE("alias with '_': an entry written by OpenSSH's ssh is honoured under strict",
          "[check-ssh][alias]") {
  const TestHosts hosts = TestHosts::load();
  for (const std::string alias : {"", "key_alias_1"}) {
    INFO("HostKeyAlias: " << (alias.empty() ? "(none)" : alias));
    const AliasConfig c(hosts, "openssh" + alias, alias);
    const RunResult ssh = c.openssh("accept-new");  // OpenSSH records the key
    INFO(show(ssh));
    REQUIRE(ssh.exit_code == 0);
    const std::string before = read_file(c.known_hosts);
    REQUIRE_FALSE(before.empty());
    if (!alias.empty()) CHECK_THAT(before, ContainsSubstring(alias + " "));
    const auto host = check(c, {"--ssh-host-key-policy", "strict"}, 0);
    INFO(host.dump(2));
    CHECK(host["code"] == "ok");
    CHECK(read_file(c.known_hosts) == before);  // nothing new recorded
  }
}

TEST_CASE("alias with '_': a changed key under a HostKeyAlias is refused", "[check-ssh][alias]") {
  const TestHosts hosts = TestHosts::load();
  const AliasConfig c(hosts, "changed", "key_alias_2");
  // Another key of the host's type recorded under the alias: CHANGED, never accepted.
  const fs::path other = c.dir / "other_key";
  const RunResult keygen = hvd::test::run_program(
      {"/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", other.string()}, {},
      std::chrono::seconds(30));
  REQUIRE(keygen.exit_code == 0);
  std::ofstream(c.known_hosts) << "key_alias_2 " << read_file(other.string() + ".pub");
  const auto host = check(c, {}, 69);
  INFO(host.dump(2));
  CHECK(host["code"] == "host_key_changed");
}

TEST_CASE("alias with '_': a launch on it runs", "[launch][alias]") {
  const TestHosts hosts = TestHosts::load();
  const AliasConfig c(hosts, "launch");
  std::vector<std::string> args{"-np", "2", "-H", "worker_1:2"};
  const auto ssh = c.ssh_args();
  args.insert(args.end(), ssh.begin(), ssh.end());
  args.insert(args.end(), {"sh", "-c", "echo rank $HOROVOD_RANK on $HOROVOD_HOSTNAME"});
  const RunResult r = hvd::test::run_hvdrun(args, {}, std::chrono::seconds(60));
  INFO(show(r));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("rank 0 on worker_1"));
  CHECK_THAT(r.out, ContainsSubstring("rank 1 on worker_1"));
}
