// The pure parts of the SSH layer: config resolution, the probe script and its parser, byte
// sanitising, encrypted-key detection and the reproduce line. No network.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include "tests/support/catch.h"

#include "common/error.h"
#include "ssh/auth.h"
#include "ssh/check_host.h"
#include "ssh/config.h"
#include "ssh/config_alias.h"
#include "ssh/reproduce.h"
#include "ssh/ssh_socket.h"

using namespace hvd::ssh;
namespace fs = std::filesystem;

namespace {

fs::path scratch_dir() {
  const fs::path dir = fs::temp_directory_path() / "hvd_unit_ssh";
  fs::create_directories(dir);
  return dir;
}

std::string write_file(const std::string& name, const std::string& text) {
  const fs::path path = scratch_dir() / name;
  std::ofstream(path) << text;
  return path.string();
}

}  // namespace

TEST_CASE("ssh config: alias, HostName, Port, User and IdentityFile are resolved first", "[ssh]") {
  const std::string config = write_file("config",
                                        "Host trainer\n"
                                        "  HostName 127.0.0.9\n"
                                        "  Port 2222\n"
                                        "  User alice\n"
                                        "  IdentityFile /keys/trainer_key\n"
                                        "  UserKnownHostsFile /kh/trainer\n");
  SshOptions options;
  options.config_file = config;
  Session s = new_session();
  const ResolvedTarget t = apply_config(s, {"trainer", std::nullopt, std::nullopt}, options);
  CHECK(t.host == "trainer");
  CHECK(t.hostname == "127.0.0.9");
  CHECK(t.port == 2222);
  CHECK(t.user == "alice");
  REQUIRE_FALSE(t.identities.empty());
  CHECK(t.identities.front() == "/keys/trainer_key");
  CHECK(t.known_hosts == "/kh/trainer");
}

TEST_CASE("ssh config: hostfile port and user beat -p, which beats the config", "[ssh]") {
  const std::string config = write_file("config2", "Host *\n  Port 2222\n  User alice\n");
  SshOptions options;
  options.config_file = config;
  options.port = 3333;
  options.known_hosts_file = "/tmp/kh";
  options.identity_file = "/tmp/only_this_key";
  Session a = new_session();
  const ResolvedTarget by_flag = apply_config(a, {"h", std::nullopt, std::nullopt}, options);
  CHECK(by_flag.port == 3333);
  CHECK(by_flag.user == "alice");
  CHECK(by_flag.known_hosts == "/tmp/kh");
  CHECK(by_flag.identities == std::vector<std::string>{"/tmp/only_this_key"});
  Session b = new_session();
  const ResolvedTarget by_host = apply_config(b, {"h", 4444, "bob"}, options);
  CHECK(by_host.port == 4444);
  CHECK(by_host.user == "bob");
}

TEST_CASE("ssh config: a missing --ssh-config file is a usage error", "[ssh]") {
  SshOptions options;
  options.config_file = "/nonexistent/ssh_config";
  Session s = new_session();
  CHECK_THROWS_AS(apply_config(s, {"h", std::nullopt, std::nullopt}, options), hvd::UsageError);
}

// libssh 0.10 refuses '_' in its host; such names are resolved through OpenSSH's `ssh -G`.
TEST_CASE("ssh config: names libssh refuses are told apart", "[ssh]") {
  CHECK(libssh_accepts_host("worker-1.example"));
  CHECK(libssh_accepts_host("127.0.0.2"));
  CHECK_FALSE(libssh_accepts_host("worker_1"));
  CHECK_FALSE(libssh_accepts_host("project_worker_1"));
}

TEST_CASE("ssh config: ssh -G output parses into the options hvdrun uses", "[ssh]") {
  const OpenSshView v = parse_openssh_view(
      "user alice\nhostname 127.0.0.9\nport 2222\nidentityfile ~/.ssh/id_rsa\n"
      "identityfile /keys/k\nuserknownhostsfile /kh/a /kh/b\nhostkeyalias kalias\n"
      "proxycommand none\nunknownkeyword x\nPseudo-terminal will not be allocated\n");
  CHECK(v.hostname == "127.0.0.9");
  CHECK(v.port == 2222);
  CHECK(v.user == "alice");
  CHECK(v.identity_files == std::vector<std::string>{"~/.ssh/id_rsa", "/keys/k"});
  CHECK(v.known_hosts == "/kh/a");
  CHECK(v.host_key_alias == "kalias");
  CHECK_FALSE(v.proxy_command.has_value());  // "none" is no proxy
  CHECK(parse_openssh_view("proxycommand nc %h %p\n").proxy_command == "nc %h %p");
}

TEST_CASE("ssh config: an alias with '_' resolves through OpenSSH's configuration", "[ssh]") {
  const std::string config = write_file("config_alias",
                                        "Host worker_1\n"
                                        "  HostName 127.0.0.9\n"
                                        "  Port 2222\n"
                                        "  User alice\n"
                                        "  IdentityFile /keys/worker_key\n");
  SshOptions options;
  options.config_file = config;
  options.known_hosts_file = "/tmp/kh";
  Session s = new_session();
  const ResolvedTarget t = apply_config(s, {"worker_1", std::nullopt, std::nullopt}, options);
  CHECK(t.host == "worker_1");
  CHECK(t.hostname == "127.0.0.9");
  CHECK(t.libssh_host == "127.0.0.9");
  CHECK(t.key_host == "127.0.0.9");  // OpenSSH's name for the key: the HostName
  CHECK(t.port == 2222);
  CHECK(t.user == "alice");
  REQUIRE_FALSE(t.identities.empty());
  CHECK(t.identities.front() == "/keys/worker_key");
  CHECK(t.known_hosts == "/tmp/kh");
  // The hostfile's port and user still win over the configuration.
  Session s2 = new_session();
  const ResolvedTarget h = apply_config(s2, {"worker_1", 4444, "bob"}, options);
  CHECK(h.port == 4444);
  CHECK(h.user == "bob");
  // A name only the resolver could know, unresolvable here: libssh holds a stand-in, the key is
  // checked under the name itself, and the connect (to the name) reports "does not resolve".
  Session s3 = new_session();
  const ResolvedTarget u =
      apply_config(s3, {"no_such_host_9", std::nullopt, std::nullopt}, options);
  CHECK(u.hostname == "no_such_host_9");
  CHECK(u.key_host == "no_such_host_9");
  CHECK(u.libssh_host != u.key_host);
}

TEST_CASE("probe script runs in sh and its output parses", "[ssh]") {
  // The script quotes the agent path (here with a space); run it in this machine's sh.
  const std::string script = host_facts_script("/nonexistent/hvd agent");
  FILE* p = popen(script.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string text;
  char buf[256];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  REQUIRE(pclose(p) == 0);
  const auto info = parse_host_facts(text, "/nonexistent/hvd agent");
  REQUIRE(info.has_value());
  CHECK_FALSE(info->hostname.empty());
  CHECK(info->boot_id.size() == 36);
  CHECK_FALSE(info->agent_present);
  CHECK(info->agent_path == "/nonexistent/hvd agent");
}

TEST_CASE("probe output: login noise before the marker, agent version", "[ssh]") {
  const auto info = parse_host_facts(
      "Welcome!\nhvd-probe 1\nnode7\nabcd-boot\npresent\nhvdrun 1.2.3\n", "/opt/hvdrun");
  REQUIRE(info.has_value());
  CHECK(info->hostname == "node7");
  CHECK(info->boot_id == "abcd-boot");
  CHECK(info->agent_present);
  CHECK(info->agent_version == "1.2.3");
  CHECK_FALSE(parse_host_facts("exit 7 said nothing\n", "/x").has_value());
  CHECK_FALSE(parse_host_facts("hvd-probe 1\nnode\n", "/x").has_value());
}

TEST_CASE("probe output: the text a login printed ahead of the facts", "[ssh]") {
  CHECK(text_before_facts("Welcome!\r\n\nhvd-probe 1\nnode7\n") == "Welcome!");
  CHECK(text_before_facts("one\ntwo\nhvd-probe 1\nnode7\n") == "one\ntwo");
  CHECK(text_before_facts("hvd-probe 1\nnode7\nabcd\npresent\n").empty());
  CHECK(text_before_facts("no marker at all\n").empty());  // that is remote_command_failed's
}

TEST_CASE("sanitize_bytes shows control and high bytes escaped, at most 64", "[ssh]") {
  CHECK(sanitize_bytes("HTTP/1.1 400\r\n") == "HTTP/1.1 400\\r\\n");
  CHECK(sanitize_bytes(std::string("\x00\xff"
                                   "a",
                                   3)) == "\\x00\\xffa");
  CHECK(sanitize_bytes(std::string(100, 'x')).size() == 64);
}

TEST_CASE("encrypted keys are recognised without a prompt", "[ssh]") {
  const fs::path dir = scratch_dir();
  fs::remove(dir / "plain");
  fs::remove(dir / "plain.pub");
  fs::remove(dir / "locked");
  fs::remove(dir / "locked.pub");
  REQUIRE(std::system(("ssh-keygen -q -t ed25519 -N '' -f " + (dir / "plain").string()).c_str()) ==
          0);
  REQUIRE(std::system(
              ("ssh-keygen -q -t ed25519 -N secret -f " + (dir / "locked").string()).c_str()) == 0);
  CHECK_FALSE(key_is_encrypted((dir / "plain").string()));
  CHECK(key_is_encrypted((dir / "locked").string()));
  CHECK_FALSE(key_is_encrypted((dir / "nonexistent").string()));
}

TEST_CASE("reproduce line carries -F, known hosts, policy, key, port and user", "[ssh]") {
  ResolvedTarget t;
  t.host = "node 1";
  t.hostname = "10.0.0.1";
  t.port = 12345;
  t.user = "root";
  SshOptions o;
  o.config_file = "/c/ssh config";
  o.known_hosts_file = "/kh";
  o.identity_file = "/k";
  o.host_key_policy = HostKeyPolicy::kStrict;
  o.timeout = std::chrono::milliseconds(2500);
  CHECK(reproduce_command(t, o) ==
        "ssh -F '/c/ssh config' -o UserKnownHostsFile=/kh -o StrictHostKeyChecking=yes -o "
        "BatchMode=yes -o ConnectTimeout=2 -i /k -o IdentitiesOnly=yes -p 12345 -l root "
        "'node 1' true");
}

TEST_CASE("result codes have stable names", "[ssh]") {
  CHECK(to_string(CheckCode::kOk) == "ok");
  CHECK(to_string(CheckCode::kClosedBeforeBanner) == "closed_before_banner");
  CHECK(to_string(CheckCode::kTooManyConnections) == "too_many_connections");
  CHECK(to_string(CheckCode::kRemoteCommandFailed) == "remote_command_failed");
  CHECK(to_string(CheckCode::kLoginPrintsText) == "login_prints_text");
  CHECK(to_string(CheckCode::kAgentMissing) == "agent_missing");
  CHECK(to_string(CheckCode::kAgentNotRunnable) == "agent_not_runnable");
  CHECK(to_string(CheckCode::kAgentVersionMismatch) == "agent_version_mismatch");
  // Every code has a name (a new one added without its name would say "unknown").
  for (int c = 0; c < static_cast<int>(CheckCode::kCount); ++c) {
    CHECK(to_string(static_cast<CheckCode>(c)) != "unknown");
  }
  CHECK(to_string(Stage::kHostKey) == "host_key");
}
