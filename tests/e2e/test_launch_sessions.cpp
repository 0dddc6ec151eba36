// One SSH login per host per launch, read from a dedicated sshd's own log; and an agent of
// another hvdrun version, named with both versions.
#include <filesystem>
#include <fstream>
#include <regex>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/fake_servers.h"
#include "tests/support/test_hosts.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;

namespace {

size_t count_matches(const std::string& text, const std::regex& re) {
  return static_cast<size_t>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

}  // namespace

TEST_CASE("launch: one SSH login per host, whatever its slot count", "[launch][sessions]") {
  const auto hosts = hvd::test::TestHosts::load();
  hvd::test::SshdInstance sshd("127.0.1.60", {});
  const fs::path known_hosts = fs::temp_directory_path() / "hvd_sessions_known_hosts";
  fs::remove(known_hosts);
  const auto r = hvd::test::run_hvdrun(
      {"-np", "3", "-H", sshd.address() + ":3", "-p", std::to_string(sshd.port()), "-i", hosts.key,
       "--ssh-known-hosts", known_hosts.string(), "sh", "-c", "echo rank $RANK"});
  INFO("stderr:\n" << r.err << "\nsshd log:\n" << sshd.log());
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("[1,2]<stdout>:rank 2"));
  // The SSH check and the agent share one session: exactly one accepted login.
  CHECK(count_matches(sshd.log(), std::regex("Accepted publickey")) == 1);
  fs::remove(known_hosts);
}

TEST_CASE("launch: an agent of another hvdrun version is named with both versions",
          "[launch][sessions]") {
  const auto hosts = hvd::test::TestHosts::load();
  const fs::path dir = fs::temp_directory_path() / "hvd_version_mismatch";
  fs::create_directories(dir);
  // A hello frame from "hvdrun 0.0.1": 4-byte big-endian length, type 1, JSON.
  const std::string hello = R"({"protocol":1,"version":"0.0.1"})";
  std::string octal;
  for (unsigned char c : std::string{0, 0, 0, static_cast<char>(hello.size()), 1}) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\%03o", c);
    octal += buf;
  }
  const std::string agent = (dir / "old-hvdrun").string();
  std::ofstream(agent) << "#!/bin/sh\nprintf '" << octal << hello << "'\ncat >/dev/null\n";
  fs::permissions(agent, fs::perms::owner_all);
  const fs::path known_hosts = dir / "known_hosts";
  fs::copy_file(hosts.known_hosts, known_hosts, fs::copy_options::overwrite_existing);
  const auto r = hvd::test::run_hvdrun(
      {"-np", "1", "-H", hosts.addresses.at(31), "-p", std::to_string(hosts.port), "--ssh-config",
       hosts.ssh_config, "--ssh-known-hosts", known_hosts.string(), "--agent-path", agent, "true"});
  INFO(r.err);
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.err,
             ContainsSubstring("the agent on " + hosts.addresses.at(31) +
                               " is hvdrun 0.0.1 speaking protocol 1; this launcher is hvdrun"));
  CHECK_THAT(r.err, ContainsSubstring("same hvdrun version on every host"));
  fs::remove_all(dir);
}
