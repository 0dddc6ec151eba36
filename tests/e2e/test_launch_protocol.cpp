// A misbehaving agent (tests/support/fake_agent.py, started over SSH as --agent-path) must be a
// protocol error naming its host, exit 127 and error kind "remote": never an "internal error",
// and never a start-up step repeated because a frame came twice or out of order.
#include <filesystem>
#include <fstream>
#include "tests/support/catch.h"

#include "hvd/build_config.h"
#include "tests/cli/process.h"
#include "tests/e2e/launch_ssh_helpers.h"

namespace fs = std::filesystem;
using Catch::Matchers::ContainsSubstring;
using hvd::test::launch_ssh::Hosts;
using hvd::test::launch_ssh::show;

namespace {

// A launch on two hosts whose agents behave as `mode` says; returns hvdrun's result.
hvd::test::RunResult launch_with_fake_agent(const Hosts& hosts, const std::string& mode) {
  const std::string agent = (fs::path(hosts.dir().path()) / ("fake-agent-" + mode)).string();
  std::ofstream(agent) << "#!/bin/sh\nexec python3 " << FAKE_AGENT << " " << mode << " "
                       << HVD_VERSION_STRING << " \"$@\"\n";
  fs::permissions(agent, fs::perms::owner_all);
  return hvd::test::run_hvdrun(hosts.args({"--json", "--agent-path", agent, "--start-timeout", "20",
                                           "-H", hosts.addr(44) + "," + hosts.addr(45), "true"}));
}

void expect_protocol_error(const hvd::test::RunResult& r, const std::string& what) {
  INFO(show(r));
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.err, ContainsSubstring("protocol error: the agent on "));
  CHECK_THAT(r.err, ContainsSubstring(what));
  CHECK_THAT(r.err, !ContainsSubstring("internal error"));
  const auto doc = nlohmann::json::parse(r.out, nullptr, false);
  REQUIRE(doc.is_object());
  CHECK(doc["error"]["kind"] == "remote");
}

}  // namespace

TEST_CASE("protocol: a second Listening frame is refused, not a second network check",
          "[protocol]") {
  Hosts hosts;
  expect_protocol_error(launch_with_fake_agent(hosts, "listening-twice"),
                        "sent a probe port nobody asked for");
}

TEST_CASE("protocol: a field of the wrong JSON type is a protocol error naming the host",
          "[protocol]") {
  Hosts hosts;
  const auto r = launch_with_fake_agent(hosts, "bad-json");
  expect_protocol_error(r, "cannot read");
  CHECK_THAT(r.err, ContainsSubstring("'port'"));
}

TEST_CASE("protocol: rank events before any job are refused", "[protocol]") {
  Hosts hosts;
  expect_protocol_error(launch_with_fake_agent(hosts, "early-started"),
                        "rank events before it was given a job");
}

TEST_CASE("protocol: a rank's report before any job is refused", "[protocol]") {
  Hosts hosts;
  expect_protocol_error(launch_with_fake_agent(hosts, "early-report"),
                        "a rank's report before it was given a job");
}

TEST_CASE("protocol: an error frame with fields of the wrong type still names the host",
          "[protocol]") {
  Hosts hosts;
  const auto r = launch_with_fake_agent(hosts, "error-bad-types");
  INFO(show(r));
  CHECK(r.exit_code == 127);
  CHECK_THAT(r.err, ContainsSubstring("host " + hosts.addr(44)) ||
                        ContainsSubstring("host " + hosts.addr(45)));
  CHECK_THAT(r.err, !ContainsSubstring("internal error"));
}

TEST_CASE("protocol: text a login script prints before the agent is named as such", "[protocol]") {
  Hosts hosts;
  const std::string agent = (fs::path(hosts.dir().path()) / "chatty-agent").string();
  std::ofstream(agent) << "#!/bin/sh\necho 'Welcome to the cluster!'\nexec " << HVDRUN_BINARY
                       << " \"$@\"\n";
  fs::permissions(agent, fs::perms::owner_all);
  const auto r = hvd::test::run_hvdrun(
      hosts.args({"--json", "--agent-path", agent, "-H", hosts.addr(46), "true"}));
  expect_protocol_error(r, "unexpected bytes from the peer: \"Welcome to the cluster!");
  CHECK_THAT(r.err, ContainsSubstring("a login script (~/.bashrc, /etc/profile) printing text"));
}
