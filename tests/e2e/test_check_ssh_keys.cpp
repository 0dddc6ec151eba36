// `hvdrun --check-ssh` end to end, part 2: host keys, authentication, remote commands, names,
// timeouts and bad input (see test_check_ssh.cpp for the set-up).
#include "tests/e2e/check_ssh_helpers.h"

using namespace hvd::test::check_ssh;  // NOLINT: test helpers

namespace {

// With --json, a usage error is a document too: scripts that parse stdout get the error.
void expect_usage_json(const std::string& out, const std::string& what) {
  const json doc = json::parse(out, nullptr, false);
  REQUIRE(doc.is_object());
  CHECK(doc["ok"] == false);
  CHECK(doc["exit_code"] == kUsage);
  CHECK(doc["error"]["kind"] == "usage");
  CHECK_THAT(doc["error"]["message"].get<std::string>(), ContainsSubstring(what));
}

}  // namespace

TEST_CASE("check-ssh: changed host key fails and leaves known hosts alone", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  // Another ed25519 key for h1's entry: same type, different key -> CHANGED.
  const std::string other = c.dir.file("other_key");
  REQUIRE(run_shell("ssh-keygen -q -t ed25519 -N '' -C other -f '" + other + "'").exit_code == 0);
  const std::string entry = fx.known_hosts_line(fx.addr(0));
  std::string text;
  std::istringstream lines(read_file(fx.hosts.known_hosts));
  std::string line;
  int replaced = 0;
  while (std::getline(lines, line)) {
    if (line.rfind(entry + " ", 0) == 0) {
      line = entry + " " + key_blob(other + ".pub");
      ++replaced;
    }
    text += line + "\n";
  }
  REQUIRE(replaced == 1);
  write_file(c.known_hosts, text);

  const RunResult r = c.run({{fx.addr(0), fx.hosts.port}, {fx.addr(1), fx.hosts.port}});
  json doc = expect_failed_run(r, 2);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, fx.addr(0), fx.hosts.port, "host_key_changed", "host_key");
  CHECK(h["address"] == fx.addr(0));
  const std::string said = h.value("message", "") + "\n" + h.value("hint", "");
  CHECK_THAT(said, ContainsSubstring(fingerprint(fx.host_key_pub)));  // the server's key
  CHECK_THAT(said, ContainsSubstring(fingerprint(other + ".pub")));   // the one on record
  // The removal command for this file and entry ("ssh-keygen [-f FILE] -R '[addr]:port'").
  CHECK(removal_command_named(said));
  CHECK_THAT(said, ContainsSubstring(fx.known_hosts_line(fx.addr(0))));
  check_ok_host(fx, doc["hosts"][1], fx.addr(1));
  CHECK(read_file(c.known_hosts) == text);  // never recorded, never removed: byte-identical
  check_reproduce_fails(h);
  CHECK(read_file(c.known_hosts) == text);
}

TEST_CASE("check-ssh: strict policy with empty known hosts is host key unknown", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  write_file(c.known_hosts, "");
  const RunResult r = c.run({{fx.addr(0), fx.hosts.port}}, {"--ssh-host-key-policy", "strict"});
  json doc = expect_failed_run(r, 1);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, fx.addr(0), fx.hosts.port, "host_key_unknown", "host_key");
  CHECK_THAT(h.value("hint", ""), ContainsSubstring("ssh-keyscan"));
  CHECK(read_file(c.known_hosts).empty());
  check_reproduce_fails(h);
  CHECK(read_file(c.known_hosts).empty());
}

TEST_CASE("check-ssh: accept-new records 64 hosts in an empty known hosts", "[check-ssh]") {
  Fixture fx;
  REQUIRE(fx.hosts.addresses.size() >= 64);
  Check c(fx);
  write_file(c.known_hosts, "");
  std::vector<HostLine> hosts;
  for (size_t i = 0; i < 64; ++i) hosts.push_back({fx.addr(i), fx.hosts.port});
  // 64 logins take 6-9 s on 2 cores, the last probes up to ~6 s each: a generous timeout keeps
  // this test about recording keys, not about speed under whatever else ctest -j2 runs.
  const RunResult r = c.run(hosts, {"--ssh-host-key-policy", "accept-new", "--ssh-timeout", "25"});
  INFO(show(r));
  CHECK(r.exit_code == kSuccess);
  json doc = parse(r);
  CHECK(doc["ok"] == true);
  REQUIRE(doc["hosts"].size() == 64);
  for (size_t i = 0; i < 64; ++i) {
    check_ok_host(fx, doc["hosts"][i], fx.addr(i));
    CHECK(doc["hosts"][i]["host_key"] == "recorded");
  }
  // Exactly 64 lines, each "HOST ssh-ed25519 BLOB [comment]" with the servers' key; HOST is
  // "[addr]:port" or hashed ("|1|salt|hash"). Writes are serialised: no torn or merged lines.
  const std::string blob = key_blob(fx.host_key_pub);
  std::istringstream lines(read_file(c.known_hosts));
  std::string line;
  std::set<std::string> wanted;  // "[127.0.0.X]:PORT" of the 64 hosts
  for (size_t i = 0; i < 64; ++i) wanted.insert(fx.known_hosts_line(fx.addr(i)));
  std::set<std::string> plain_hosts;
  int count = 0, plain = 0;
  while (std::getline(lines, line)) {
    INFO("known_hosts line: '" << line << "'");
    ++count;
    std::istringstream fields(line);
    std::string host, type, key;
    fields >> host >> type >> key;
    CHECK(type + " " + key == blob);
    if (host.rfind("|1|", 0) == 0) continue;  // hashed (HashKnownHosts): checked below
    ++plain;
    plain_hosts.insert(host);
    CHECK(wanted.count(host) == 1);
  }
  CHECK(count == 64);
  CHECK(static_cast<int>(plain_hosts.size()) == plain);  // no host recorded twice
  // OpenSSH itself finds every host in the file (hashed or not).
  std::string script = "f='" + c.known_hosts + "'; n=0; for a in";
  for (size_t i = 0; i < 64; ++i) script += " " + fx.addr(i);
  script += "; do ssh-keygen -F \"[$a]:" + std::to_string(fx.hosts.port) +
            "\" -f \"$f\" >/dev/null && n=$((n+1)); done; echo found=$n";
  const ShellResult found = run_shell(script);
  CHECK(trim(found.output) == "found=64");
  // The fixture's own known_hosts is untouched (only --ssh-known-hosts is written).
  const ShellResult fixture_file = run_shell("wc -l < '" + fx.hosts.known_hosts + "'");
  CHECK(trim(fixture_file.output) == std::to_string(fx.hosts.addresses.size()));
}

TEST_CASE("check-ssh: unauthorized key is auth denied", "[check-ssh]") {
  Fixture fx;
  REQUIRE(!fx.key_unauthorized.empty());
  Check c(fx);
  // The fixture's ssh_config names the good key (IdentityFile) for every 127.0.0.* host, and
  // OpenSSH adds -i keys to the config's rather than replacing them, so the reproduce line would
  // log in with the good key. A copy without IdentityFile lines makes "only this key" mean the
  // same to hvdrun and to plain ssh.
  std::string config;
  std::istringstream lines(read_file(fx.hosts.ssh_config));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("IdentityFile") == std::string::npos) config += line + "\n";
  }
  c.ssh_config = c.dir.file("ssh_config");
  write_file(c.ssh_config, config);
  c.identity = fx.key_unauthorized;
  const RunResult r = c.run({{fx.addr(0), fx.hosts.port}});
  json doc = expect_failed_run(r, 1);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, fx.addr(0), fx.hosts.port, "auth_denied", "auth");
  const std::string message = h.value("message", "");
  CHECK_THAT(message, ContainsSubstring(fx.hosts.user));        // the user
  CHECK_THAT(message, ContainsSubstring("publickey"));          // the methods the server offers
  CHECK_THAT(message, ContainsSubstring(fx.key_unauthorized));  // the keys tried
  CHECK_THAT(h.value("reproduce", ""), ContainsSubstring(fx.key_unauthorized));
  check_reproduce_fails(h);
}

// The same key with the fixture's ssh_config unchanged, whose host blocks name the good key
// (IdentityFile). docs/check-ssh.md says -i overrides the config's identity files, while OpenSSH
// adds -i to them; whichever hvdrun does, its verdict and its reproduce line must agree.
TEST_CASE("check-ssh: reproduce of auth denied agrees with the config keys", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  c.identity = fx.key_unauthorized;
  const RunResult r = c.run({{fx.addr(0), fx.hosts.port}});
  INFO(show(r));
  json doc = parse(r);
  REQUIRE(doc["hosts"].size() == 1);
  json& h = doc["hosts"][0];
  INFO("host entry: " << h.dump());
  const std::string code = h.value("code", "");
  REQUIRE((code == "ok" || code == "auth_denied"));
  if (code == "auth_denied") {
    CHECK(r.exit_code == kSshFailed);
    check_reproduce_fails(h);
  } else {
    CHECK(r.exit_code == kSuccess);
  }
}

TEST_CASE("check-ssh: forced command exit 7 is remote command failed", "[check-ssh]") {
  Fixture fx;
  REQUIRE(!fx.key_exit7.empty());
  Check c(fx);
  c.identity = fx.key_exit7;
  const RunResult r = c.run({{fx.addr(0), fx.hosts.port}});
  json doc = expect_failed_run(r, 1);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, fx.addr(0), fx.hosts.port, "remote_command_failed", "probe");
  const std::string message = h.value("message", "");
  CHECK(names_exit_status(message, "7"));
  check_reproduce_fails(h);
}

TEST_CASE("check-ssh: unresolvable name is a dns failure", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  const std::string name = hvd::test::unresolvable_host();
  const RunResult r =
      c.run({{name, fx.hosts.port}, {fx.addr(0), fx.hosts.port}}, {"--ssh-timeout", "5"});
  json doc = expect_failed_run(r, 2);
  json& h = doc["hosts"][0];
  check_failed_host(c, h, name, fx.hosts.port, "dns_failure", "resolve");
  check_ok_host(fx, doc["hosts"][1], fx.addr(0));
  check_reproduce_fails(h);
}

// An unreachable host costs at most its timeout, never a multiple of it: 32 silent hosts (more
// than the 16 --ssh-concurrency slots, which waiting for a banner must not hold) take one
// --ssh-timeout together, while good hosts interleaved with them still log in.
// Why 8 good hosts and not 32: the per-host timeout covers the probe too, and on a 2-core machine
// 32 logins take 2.7-3.0 s of wall time (sshd runs the probe through bash, which reads ~/.bashrc:
// ~135 ms each here), so with --ssh-timeout 2 about a third of 32 good hosts time out
// in `probe`. 8 good hosts take about 1.0 s here, on an otherwise idle machine: when ctest -j2 runs
// the 64-host test alongside, even these probes pass 2 s, so this test is tagged [serial] and
// registered with RUN_SERIAL.
TEST_CASE("check-ssh: 32 silent hosts cost one timeout", "[check-ssh][serial]") {
  constexpr int kSilent = 32;
  constexpr size_t kGood = 8;
  Fixture fx;
  REQUIRE(fx.hosts.addresses.size() >= kGood);
  Check c(fx);
  std::vector<std::unique_ptr<hvd::test::AcceptAndSilent>> silent;
  std::vector<HostLine> hosts;
  std::vector<std::string> expected;  // per host, in input order
  for (int i = 0; i < kSilent; ++i) {
    silent.push_back(
        std::make_unique<hvd::test::AcceptAndSilent>("127.0.1." + std::to_string(100 + i)));
    hosts.push_back({silent.back()->address(), silent.back()->port()});
    expected.push_back("banner_timeout");
    if (i % (kSilent / kGood) == 0) {
      hosts.push_back({fx.addr(static_cast<size_t>(i) / (kSilent / kGood)), fx.hosts.port});
      expected.push_back("ok");
    }
  }
  const Clock::time_point start = Clock::now();
  const RunResult r = c.run(hosts, {"--ssh-timeout", "2"});
  const auto wall = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  json doc = expect_failed_run(r, hosts.size());
  std::map<std::string, int> codes;
  for (size_t i = 0; i < hosts.size(); ++i) {
    json& h = doc["hosts"][i];
    INFO("host entry: " << h.dump());
    CHECK(h["host"] == hosts[i].address);
    CHECK(h["code"] == expected[i]);
    codes[h.value("code", "?")]++;
    if (expected[i] == "banner_timeout") CHECK(h["elapsed_ms"] <= 3000);
  }
  INFO("wall time " << wall.count() << " ms");
  CHECK(codes["banner_timeout"] == kSilent);
  CHECK(codes["ok"] == static_cast<int>(kGood));
  CHECK(wall < milliseconds(4000));
  for (const auto& s : silent) CHECK(s->accepted() >= 1);
}

TEST_CASE("check-ssh bad input: missing identity file", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  c.identity = "/nonexistent/id_ed25519";
  const RunResult r = c.run({{fx.addr(0), fx.hosts.port}});
  INFO(show(r));
  CHECK(r.exit_code == kUsage);
  CHECK_THAT(r.err, ContainsSubstring("/nonexistent/id_ed25519"));
}

TEST_CASE("check-ssh bad input: port out of range", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  for (const std::string port : {"0", "70000"}) {
    const RunResult r = hvd::test::run_hvdrun(
        {"--check-ssh", "--json", "-H", fx.addr(0), "-p", port, "--ssh-config", c.ssh_config,
         "--ssh-known-hosts", c.known_hosts, "-i", c.identity});
    INFO("-p " << port << "\n" << show(r));
    CHECK(r.exit_code == kUsage);
    expect_usage_json(r.out, "-p " + port);
  }
}

TEST_CASE("check-ssh bad input: empty host list", "[check-ssh]") {
  Fixture fx;
  Check c(fx);
  const RunResult r =
      hvd::test::run_hvdrun({"--check-ssh", "--json", "-H", "", "--ssh-config", c.ssh_config,
                             "--ssh-known-hosts", c.known_hosts, "-i", c.identity});
  INFO(show(r));
  CHECK(r.exit_code == kUsage);
  expect_usage_json(r.out, "empty");
}
