// `hvdrun --check-ssh` end to end (docs/check-ssh.md): the real binary against the sshd fixture
// hosts (127.0.0.2..) and fake servers (tests/support/fake_servers.h) on 127.0.1.X, asserting the
// JSON result, the exit code and that every failure's `reproduce` line fails with plain OpenSSH.
//
// Hermetic: every run passes --ssh-config (the fixture's), --ssh-known-hosts (a copy in a private
// temporary directory, never the fixture's own file nor ~/.ssh) and -i. Per-host ports come from
// a hostfile (`ADDR slots=1 port=P`), so one run mixes fake servers and fixture hosts; each
// failure case also has one good fixture host, which must stay `ok` and in input order.
// Fake-server addresses: 127.0.1.10-.39 for single cases, 127.0.1.100-.131 for the 32 silent hosts.
//
// The tests tagged [fakes] check the fake servers themselves with plain sockets and ssh, so a
// failing hvdrun test can be told apart from a broken fake.
#include <sys/stat.h>

#include "tests/e2e/check_ssh_helpers.h"

using namespace hvd::test::check_ssh;  // NOLINT: test helpers
using Catch::Matchers::EndsWith;

// =============================================================================================
// The fake servers themselves, checked with plain sockets and ssh.

TEST_CASE("fakes: closed port refuses and accept-and-close closes before a banner", "[fakes]") {
  hvd::test::ClosedPort closed("127.0.1.20");
  REQUIRE(closed.port() > 0);
  CHECK(hvd::test::read_first_line(closed.address(), closed.port(), milliseconds(500)).empty());
  const ShellResult refused = run_shell("bash -c 'exec 3<>/dev/tcp/127.0.1.20/" +
                                        std::to_string(closed.port()) + "' && echo connected");
  CHECK_THAT(refused.output, ContainsSubstring("refused"));

  hvd::test::AcceptAndClose closing("127.0.1.21");
  const Clock::time_point start = Clock::now();
  CHECK(hvd::test::read_first_line(closing.address(), closing.port()).empty());
  CHECK(Clock::now() - start < seconds(2));  // EOF at once, not a timeout
  CHECK(closing.accepted() == 1);
}

TEST_CASE("fakes: silent server says nothing and greeter greets", "[fakes]") {
  hvd::test::AcceptAndSilent silent("127.0.1.22");
  const Clock::time_point start = Clock::now();
  CHECK(hvd::test::read_first_line(silent.address(), silent.port(), milliseconds(700)).empty());
  CHECK(Clock::now() - start >= milliseconds(600));
  CHECK(silent.accepted() == 1);

  hvd::test::Greeter greeter("HTTP/1.1 400 Bad Request\r\n\r\n", "127.0.1.23");
  CHECK(hvd::test::read_first_line(greeter.address(), greeter.port()) ==
        "HTTP/1.1 400 Bad Request");
  // Plain ssh gives up on it (not an SSH server) instead of waiting forever.
  Fixture fx;
  TempDir dir;
  write_file(dir.file("kh"), "");
  const ShellResult r = run_shell(hermetic_ssh(fx, dir.file("kh")) + " -p " +
                                  std::to_string(greeter.port()) + " 127.0.1.23 true");
  INFO(r.output);
  CHECK(r.exit_code == 255);
  CHECK(!r.timed_out);
}

TEST_CASE("fakes: a full accept queue leaves a connect in progress", "[fakes]") {
  hvd::test::FullBacklog backlog("127.0.1.24");
  CHECK(backlog.connect_stalls(seconds(3)));
}

TEST_CASE("fakes: sshd with MaxStartups 1 and one held connection drops the next", "[fakes]") {
  Fixture fx;
  hvd::test::SshdInstance sshd("127.0.1.25", {"MaxStartups 1"});
  INFO(sshd.log());
  // Without held connections it is a working SSH host for the fixture's key.
  TempDir dir;
  write_file(dir.file("kh"), "[127.0.1.25]:" + std::to_string(sshd.port()) + " " +
                                 key_blob(fx.host_key_pub) + "\n");
  const std::string ssh = hermetic_ssh(fx, dir.file("kh")) + " -p " + std::to_string(sshd.port()) +
                          " 127.0.1.25 echo logged-in";
  ShellResult login = run_shell(ssh);
  // The constructor's banner check held the one startup slot; sshd frees it a moment after that
  // connection closed, and until then drops us with "Exceeded MaxStartups" (which ssh 9.2
  // reports as "kex_exchange_identification: Connection closed by remote host").
  for (int i = 0; i < 20 && login.output.find("kex_exchange_identification") != std::string::npos;
       ++i) {
    std::this_thread::sleep_for(milliseconds(100));
    login = run_shell(ssh);
  }
  INFO(login.output);
  CHECK(login.exit_code == 0);
  CHECK_THAT(login.output, ContainsSubstring("logged-in"));

  hvd::test::HeldConnections held = sshd.hold_connections(1);
  CHECK(held.size() == 1);
  CHECK(hvd::test::read_first_line(sshd.address(), sshd.port()) == "Exceeded MaxStartups");
  held.close_all();
  // The slot comes back once the held connection is gone.
  std::string line;
  for (int i = 0; i < 50 && line.rfind("SSH-", 0) != 0; ++i) {
    std::this_thread::sleep_for(milliseconds(50));
    line = hvd::test::read_first_line(sshd.address(), sshd.port());
  }
  CHECK_THAT(line, StartsWith("SSH-2.0-"));
}

// =============================================================================================
// hvdrun --check-ssh

TEST_CASE("check-ssh: four fixture hosts are ok", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  std::vector<HostLine> hosts;
  for (size_t i = 0; i < 4; ++i) hosts.push_back({fx.addr(i), fx.hosts.port});
  const RunResult r = c.run(hosts);
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  json doc = parse(r);
  CHECK(doc["ok"] == true);
  REQUIRE(doc["hosts"].size() == 4);
  const RunResult version = hvd::test::run_hvdrun({"--version"});
  for (size_t i = 0; i < 4; ++i) {
    json& h = doc["hosts"][i];
    check_ok_host(fx, h, fx.addr(i));
    INFO("host entry: " << h.dump());
    CHECK(h["host_key"] == "known");
    // The test hosts are this machine: same boot id and host name as ours.
    CHECK(h["remote"]["boot_id"] == this_boot_id());
    CHECK(h["remote"]["hostname"] == this_hostname());
    json& agent = h["remote"]["agent"];
    REQUIRE(agent.is_object());
    CHECK(agent["path"] == HVDRUN_BINARY);
    CHECK(agent["present"] == true);
    REQUIRE(agent["version"].is_string());
    const std::string v = agent["version"];
    CHECK(!v.empty());
    CHECK_THAT(version.out, ContainsSubstring(v));  // `hvdrun --version` says "hvdrun 0.1.0"
  }
  CHECK(std::string(read_file(c.known_hosts)) == read_file(fx.hosts.known_hosts));
}

TEST_CASE("check-ssh: local hosts need no ssh", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  const RunResult r = c.run(
      {{"localhost", fx.hosts.port}, {fx.addr(0), fx.hosts.port}, {"127.0.0.1", fx.hosts.port}});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  json doc = parse(r);
  CHECK(doc["ok"] == true);
  REQUIRE(doc["hosts"].size() == 3);
  for (const size_t i : {size_t{0}, size_t{2}}) {
    json& h = doc["hosts"][i];
    INFO("host entry: " << h.dump());
    CHECK(h["code"] == "ok");
    CHECK(h["message"] == "local host: started without SSH");
  }
  CHECK(doc["hosts"][0]["host"] == "localhost");
  CHECK(doc["hosts"][2]["host"] == "127.0.0.1");
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));  // 127.0.0.2 is remote
}

// A host whose agent a launch could not start is not `ok` (issue 55: it said "ok; no hvdrun
// agent at ...", exit 0, and the launch then exited 127): its own code, exit 69, a hint, the
// probe as the failed stage, the facts it found, and an ssh line that shows the problem.
namespace {

void check_agent_problem(const Fixture& fx, Check& c, const std::string& agent_path,
                         const std::string& code, const std::string& words, bool present) {
  const RunResult r = c.run({{fx.addr(0), fx.hosts.port}});
  INFO(show(r));
  CHECK(r.exit_code == kSshFailed);
  json doc = parse(r);
  CHECK(doc["ok"] == false);
  REQUIRE(doc["hosts"].size() == 1);
  json h = doc["hosts"][0];
  INFO("host entry: " << h.dump());
  CHECK(h["code"] == code);
  check_stages(h, "probe");
  CHECK_THAT(h.value("message", ""), ContainsSubstring(agent_path));
  CHECK_THAT(h.value("message", ""), ContainsSubstring(words));
  CHECK_THAT(h.value("hint", ""),
             ContainsSubstring("install hvdrun") || ContainsSubstring("--version"));
  REQUIRE(h["remote"].is_object());  // what the probe found
  CHECK(h["remote"]["agent"]["path"] == agent_path);
  CHECK(h["remote"]["agent"]["present"] == present);
  CHECK_THAT(h.value("reproduce", ""), EndsWith(agent_path + " --version'"));
  // The table says the same, with the hint.
  std::vector<std::string> table_args{"--check-ssh",
                                      "-H",
                                      fx.addr(0),
                                      "-p",
                                      std::to_string(fx.hosts.port),
                                      "--ssh-config",
                                      c.ssh_config,
                                      "--ssh-known-hosts",
                                      c.known_hosts,
                                      "-i",
                                      c.identity,
                                      "--agent-path",
                                      agent_path};
  const RunResult table = hvd::test::run_hvdrun(table_args);
  INFO(show(table));
  CHECK(table.exit_code == kSshFailed);
  CHECK_THAT(table.err, ContainsSubstring(code));
}

}  // namespace

TEST_CASE("check-ssh: no agent at --agent-path fails the host (agent_missing)", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  c.agent_path = "/nonexistent/hvd-agent/hvdrun";
  check_agent_problem(fx, c, c.agent_path, "agent_missing", "a launch would exit 127", false);
}

TEST_CASE("check-ssh: an agent that does not run fails the host (agent_not_runnable)",
          "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  TempDir dir;
  c.agent_path = dir.file("hvdrun");
  write_file(c.agent_path, "#!/bin/sh\nexit 126\n");  // executable, but says nothing
  ::chmod(c.agent_path.c_str(), 0755);
  check_agent_problem(fx, c, c.agent_path, "agent_not_runnable", "printed nothing", true);
}

TEST_CASE("check-ssh: another hvdrun version fails the host (agent_version_mismatch)",
          "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  TempDir dir;
  c.agent_path = dir.file("hvdrun");
  write_file(c.agent_path, "#!/bin/sh\necho 'hvdrun 0.0.1-other'\n");
  ::chmod(c.agent_path.c_str(), 0755);
  check_agent_problem(fx, c, c.agent_path, "agent_version_mismatch", "version 0.0.1-other", true);
}

TEST_CASE("check-ssh: connection refused", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  hvd::test::ClosedPort closed("127.0.1.10");
  const RunResult r = c.run({{closed.address(), closed.port()}, {fx.addr(0), fx.hosts.port}});
  json doc = expect_failed_run(r, 2);
  check_failed_host(c, doc["hosts"][0], closed.address(), closed.port(), "connection_refused",
                    "connect");
  CHECK(doc["hosts"][0]["address"] == closed.address());
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));
  check_reproduce_fails(doc["hosts"][0]);
}

TEST_CASE("check-ssh: accept and close is closed before banner", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  hvd::test::AcceptAndClose server("127.0.1.11");
  const RunResult r = c.run({{server.address(), server.port()}, {fx.addr(0), fx.hosts.port}});
  json doc = expect_failed_run(r, 2);
  check_failed_host(c, doc["hosts"][0], server.address(), server.port(), "closed_before_banner",
                    "banner");
  CHECK(server.accepted() >= 1);
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));
  const int before = server.accepted();
  check_reproduce_fails(doc["hosts"][0]);
  CHECK(server.accepted() > before);  // the reproduce line reached the same server
}

TEST_CASE("check-ssh: silent server is a banner timeout", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  hvd::test::AcceptAndSilent server("127.0.1.12");
  const Clock::time_point start = Clock::now();
  const RunResult r = c.run({{server.address(), server.port()}, {fx.addr(0), fx.hosts.port}},
                            {"--ssh-timeout", "2"});
  const auto wall = Clock::now() - start;
  json doc = expect_failed_run(r, 2);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, server.address(), server.port(), "banner_timeout", "banner");
  CHECK(server.accepted() >= 1);
  CHECK(h["elapsed_ms"] >= 1500);  // it did wait for the banner ...
  CHECK(h["elapsed_ms"] <= 4000);  // ... about the 2 s timeout, not the 10 s default
  CHECK(wall < seconds(8));
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));
  check_reproduce_fails(h);
}

TEST_CASE("check-ssh: http server is not ssh", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  hvd::test::Greeter server("HTTP/1.1 400 Bad Request\r\n\r\n", "127.0.1.13");
  const RunResult r = c.run({{server.address(), server.port()}, {fx.addr(0), fx.hosts.port}});
  json doc = expect_failed_run(r, 2);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, server.address(), server.port(), "not_ssh", "banner");
  const std::string message = h.value("message", "");
  CHECK_THAT(message,
             ContainsSubstring("HTTP/1.1 400 Bad Request"));  // the first bytes are shown ...
  bool has_control = false;                                   // ... sanitised
  for (const char ch : message) has_control = has_control || static_cast<unsigned char>(ch) < 0x20;
  CHECK_FALSE(has_control);
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));
  check_reproduce_fails(h);
}

TEST_CASE("check-ssh: full accept queue is a connect timeout", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  hvd::test::FullBacklog server("127.0.1.14");
  const Clock::time_point start = Clock::now();
  const RunResult r = c.run({{server.address(), server.port()}, {fx.addr(0), fx.hosts.port}},
                            {"--ssh-timeout", "2"});
  const auto wall = Clock::now() - start;
  json doc = expect_failed_run(r, 2);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, server.address(), server.port(), "timeout", "connect");
  CHECK(h["elapsed_ms"] >= 1500);
  CHECK(h["elapsed_ms"] <= 4000);
  CHECK(wall < seconds(8));
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));
  REQUIRE(server.connect_stalls(milliseconds(200)));  // still full: the reproduce sees the same
  check_reproduce_fails(h);
}

TEST_CASE("check-ssh: sshd over MaxStartups is too many connections", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  hvd::test::SshdInstance sshd("127.0.1.15", {"MaxStartups 1"});
  hvd::test::HeldConnections held = sshd.hold_connections(1);
  REQUIRE(hvd::test::read_first_line(sshd.address(), sshd.port()) == "Exceeded MaxStartups");
  const RunResult r =
      c.run({{sshd.address(), sshd.port()}, {fx.addr(0), fx.hosts.port}}, {"--ssh-timeout", "5"});
  json doc = expect_failed_run(r, 2);
  json& h = doc["hosts"][0];
  INFO("sshd log:\n" << sshd.log());
  check_failed_host(c, h, sshd.address(), sshd.port(), "too_many_connections", "banner");
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));
  check_reproduce_fails(h);  // the connection is still held
}

TEST_CASE("check-ssh on a terminal: a live line counts the hosts, then the table", "[check-ssh]") {
  if (::access("/usr/bin/script", X_OK) != 0) {
    WARN("skipped: util-linux's script(1) is not installed (Debian's bsdutils): no terminal");
    return;
  }
  hvd::test::AcceptAndSilent silent("127.0.1.24");
  hvd::test::AcceptAndSilent silent2("127.0.1.25", silent.port());
  const std::string hosts = "127.0.1.24,127.0.1.25";
  const std::string args =
      " --check-ssh -H " + hosts + " -p " + std::to_string(silent.port()) + " --ssh-timeout 1.2";
  // script(1) gives hvdrun a terminal for stdout and stderr.
  const hvd::test::RunResult r = hvd::test::run_program(
      {"/usr/bin/script", "-qec", std::string(HVDRUN_BINARY) + args, "/dev/null"}, {},
      std::chrono::seconds(30));
  INFO(r.out);
  const std::string clear = "\r\033[K";
  CHECK_THAT(r.out,
             ContainsSubstring(clear + "check-ssh: 0 of 2 hosts done, 0 failed, 2 pending ("));
  CHECK_THAT(r.out, ContainsSubstring(clear + "check-ssh: 2 of 2 hosts done, 2 failed, 0 pending"));
  // Cleared before the table, which starts on its own line.
  CHECK_THAT(r.out, ContainsSubstring(clear + "hvdrun --check-ssh: 2 hosts, 2 failed"));
  // Not on a pipe, and not with --json on a terminal.
  const hvd::test::RunResult piped = hvd::test::run_hvdrun(
      {"--check-ssh", "-H", hosts, "-p", std::to_string(silent.port()), "--ssh-timeout", "1.2"});
  CHECK(piped.err.find("check-ssh: 0 of") == std::string::npos);
  const hvd::test::RunResult json_run = hvd::test::run_program(
      {"/usr/bin/script", "-qec", std::string(HVDRUN_BINARY) + args + " --json", "/dev/null"}, {},
      std::chrono::seconds(30));
  CHECK(json_run.out.find("check-ssh: 0 of") == std::string::npos);
}
