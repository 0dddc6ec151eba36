// Shared helpers for the --check-ssh end-to-end tests (test_check_ssh*.cpp): running hvdrun and
// plain ssh hermetically against the fixture hosts and fake servers, and checking the JSON.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include "tests/support/catch.h"

#include "tests/cli/process.h"
#include "tests/support/fake_servers.h"
#include "tests/support/test_hosts.h"

extern char** environ;

namespace hvd::test::check_ssh {

using Catch::Matchers::ContainsSubstring;
using Catch::Matchers::StartsWith;
using hvd::test::RunResult;
using hvd::test::TestHosts;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

inline constexpr int kSuccess = 0;
inline constexpr int kUsage = 64;
inline constexpr int kSshFailed = 69;

// docs/check-ssh.md, "Stages": the order every host goes through.
inline const std::vector<std::string> kStageOrder = {"config", "resolve",  "connect", "banner",
                                                     "kex",    "host_key", "auth",    "probe"};

inline std::string show(const RunResult& r) {
  return "exit code " + std::to_string(r.exit_code) + "\n--- stdout ---\n" + r.out +
         "\n--- stderr ---\n" + r.err;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  REQUIRE(out.good());
}

inline std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// A private temporary directory, removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    const char* tmp = std::getenv("TMPDIR");
    path_ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/hvd-check-ssh-XXXXXX";
    REQUIRE(::mkdtemp(path_.data()) != nullptr);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// What a /bin/sh command did.
struct ShellResult {
  int exit_code = -1;  // 128 + signal when a signal ended it
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

// Runs `script` with /bin/sh -c in a new session (no controlling terminal, so an ssh that wants
// a password or a host-key answer fails instead of prompting), stdin /dev/null, SSH_AUTH_SOCK
// removed. Killed (the whole session's group) after `timeout`; that counts as a failure of the
// command, which for a reproduce line of a hang (banner_timeout) is what it reproduces.
inline ShellResult run_shell(const std::string& script, seconds timeout = seconds(20)) {
  TempDir dir;
  const std::string out_path = dir.file("output");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
  std::vector<std::string> env;
  for (char** p = environ; *p != nullptr; ++p) {
    if (std::string_view(*p).rfind("SSH_AUTH_SOCK=", 0) != 0) env.emplace_back(*p);
  }
  std::vector<char*> c_env;
  for (std::string& e : env) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  std::string sh = "/bin/sh", dash_c = "-c", text = script;
  char* argv[] = {sh.data(), dash_c.data(), text.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, c_env.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  REQUIRE(rc == 0);

  ShellResult result;
  int status = 0;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (Clock::now() >= deadline) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);  // POSIX_SPAWN_SETSID: pid leads its own group
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  result.output = read_file(out_path);
  return result;
}

// The fixture, plus the two extra client keys of hosts.env (sshd_hosts.sh).
struct Fixture {
  TestHosts hosts = TestHosts::load();
  std::string key_exit7;
  std::string key_unauthorized;
  std::string host_key_pub;  // the servers' public host key file

  Fixture() {
    std::ifstream in(hosts.dir + "/hosts.env");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("HVDTEST_SSH_KEY_EXIT7=", 0) == 0) key_exit7 = line.substr(line.find('=') + 1);
      if (line.rfind("HVDTEST_SSH_KEY_UNAUTHORIZED=", 0) == 0) {
        key_unauthorized = line.substr(line.find('=') + 1);
      }
    }
    host_key_pub = hosts.dir + "/ssh_host_ed25519_key.pub";
  }

  const std::string& addr(size_t i) const { return hosts.addresses.at(i); }
  std::string known_hosts_line(const std::string& address) const {
    return "[" + address + "]:" + std::to_string(hosts.port);
  }
};

// One hostfile line per host: "ADDR slots=1 port=P".
struct HostLine {
  std::string address;
  int port;
};

// One `hvdrun --check-ssh --json` run with its private files.
struct Check {
  const Fixture& fx;
  TempDir dir;
  std::string known_hosts = dir.file("known_hosts");
  std::string hostfile = dir.file("hostfile");
  std::string identity;
  std::string ssh_config;
  std::string agent_path = HVDRUN_BINARY;

  explicit Check(const Fixture& f) : fx(f), identity(f.hosts.key), ssh_config(f.hosts.ssh_config) {
    write_file(known_hosts, read_file(fx.hosts.known_hosts));  // a copy: the test may change it
  }

  RunResult run(const std::vector<HostLine>& hosts, const std::vector<std::string>& extra = {}) {
    std::string text;
    for (const HostLine& h : hosts) {
      text += h.address + " slots=1 port=" + std::to_string(h.port) + "\n";
    }
    write_file(hostfile, text);
    std::vector<std::string> args{"--check-ssh",  "--json",   "--hostfile",        hostfile,
                                  "--ssh-config", ssh_config, "--ssh-known-hosts", known_hosts,
                                  "-i",           identity,   "--agent-path",      agent_path};
    args.insert(args.end(), extra.begin(), extra.end());
    return hvd::test::run_hvdrun(args);
  }
};

inline json parse(const RunResult& r) {
  INFO(show(r));
  json doc;
  REQUIRE_NOTHROW(doc = json::parse(r.out));
  REQUIRE(doc.is_object());
  CHECK(doc["schema_version"] == 1);
  REQUIRE(doc["hosts"].is_array());
  return doc;
}

// The checks below take the host entry by value and index it non-const on purpose: nlohmann's
// const operator[] on a missing key is undefined behaviour, the non-const one yields null, so a
// field hvdrun left out fails a CHECK instead of crashing the test.

// The stages of one host: names in the documented order (some may be left out, e.g. `resolve`
// for a numeric address is allowed to be absent), each timed; all ok except, for a failure, the
// last, which must be `failed_stage`.
inline void check_stages(json host, const std::string& failed_stage) {
  INFO("host entry: " << host.dump());
  REQUIRE(host["stages"].is_array());
  REQUIRE(!host["stages"].empty());
  size_t next = 0;
  json& stages = host["stages"];
  for (size_t i = 0; i < stages.size(); ++i) {
    json& s = stages[i];
    REQUIRE(s["name"].is_string());
    const std::string name = s["name"];
    auto it = std::find(kStageOrder.begin() + static_cast<long>(next), kStageOrder.end(), name);
    INFO("stage " << name);
    CHECK(it != kStageOrder.end());  // a known stage, after the previous one
    if (it != kStageOrder.end()) next = static_cast<size_t>(it - kStageOrder.begin()) + 1;
    CHECK(s["ms"].is_number());  // the doc's example shows 0; fractions of a ms are fine
    CHECK(s["ms"] >= 0);
    const bool last = i + 1 == stages.size();
    if (failed_stage.empty()) {
      CHECK(s["ok"] == true);
    } else {
      CHECK(s["ok"] == !last);
    }
  }
  CHECK(stages.back()["name"] == (failed_stage.empty() ? "probe" : failed_stage));
}

// A fixture host that logged in and ran the probe.
inline void check_ok_host(const Fixture& fx, json host, const std::string& address) {
  INFO("host entry: " << host.dump());
  CHECK(host["host"] == address);
  CHECK(host["code"] == "ok");
  CHECK(host["port"] == fx.hosts.port);
  CHECK(host["user"] == fx.hosts.user);
  CHECK(host["address"] == address);
  CHECK(host["elapsed_ms"].is_number_integer());
  CHECK(host["elapsed_ms"] >= 0);
  check_stages(host, "");
  json& remote = host["remote"];
  REQUIRE(remote.is_object());
  CHECK(remote["hostname"].is_string());
  CHECK(!remote["hostname"].get<std::string>().empty());
  CHECK(remote["boot_id"].is_string());
  CHECK(!remote["boot_id"].get<std::string>().empty());
}

// A failed host: the code, the failing stage, a message, a hint, and a reproduce line that names
// the files this run used.
inline void check_failed_host(const Check& c, json host, const std::string& address, int port,
                              const std::string& code, const std::string& stage) {
  INFO("host entry: " << host.dump());
  CHECK(host["host"] == address);
  CHECK(host["code"] == code);
  CHECK(host["port"] == port);
  CHECK(host["user"] == c.fx.hosts.user);
  CHECK(host["elapsed_ms"].is_number_integer());
  CHECK(host["elapsed_ms"] >= 0);
  check_stages(host, stage);
  REQUIRE(host["message"].is_string());
  CHECK(!host["message"].get<std::string>().empty());
  REQUIRE(host["hint"].is_string());
  CHECK(!host["hint"].get<std::string>().empty());
  CHECK(host["remote"].is_null());
  REQUIRE(host["reproduce"].is_string());
  const std::string reproduce = host["reproduce"];
  CHECK_THAT(reproduce, StartsWith("ssh "));
  CHECK_THAT(reproduce, ContainsSubstring("-F"));
  CHECK_THAT(reproduce, ContainsSubstring(c.ssh_config));
  CHECK_THAT(reproduce, ContainsSubstring("UserKnownHostsFile"));
  CHECK_THAT(reproduce, ContainsSubstring(c.known_hosts));
  CHECK_THAT(reproduce, ContainsSubstring(address));
  CHECK_THAT(reproduce, ContainsSubstring(std::to_string(port)));
}

// The reproduce line, run as the user would paste it, must fail too.
inline void check_reproduce_fails(const json& host) {
  const std::string reproduce = host.value("reproduce", "");
  REQUIRE(!reproduce.empty());
  const ShellResult r = run_shell(reproduce, seconds(15));
  INFO("reproduce: " << reproduce << "\nexit code " << r.exit_code
                     << (r.timed_out ? " (killed after the timeout)" : "") << "\noutput:\n"
                     << r.output);
  CHECK(r.exit_code != 0);
}

// A run with failures: exit 69, "ok": false, one entry per input host.
inline json expect_failed_run(const RunResult& r, size_t hosts) {
  INFO(show(r));
  CHECK(r.exit_code == kSshFailed);
  json doc = parse(r);
  CHECK(doc["ok"] == false);
  REQUIRE(doc["hosts"].size() == hosts);
  return doc;
}

// The SHA256 fingerprint of a public key file, as ssh-keygen prints it ("SHA256:...").
inline std::string fingerprint(const std::string& pub) {
  const ShellResult r = run_shell("ssh-keygen -l -E sha256 -f '" + pub + "'");
  REQUIRE(r.exit_code == 0);
  std::istringstream fields(r.output);
  std::string bits, fp;
  fields >> bits >> fp;
  REQUIRE_THAT(fp, StartsWith("SHA256:"));
  return fp;
}

// "type base64" of a public key file.
inline std::string key_blob(const std::string& pub) {
  std::istringstream fields(read_file(pub));
  std::string type, blob;
  fields >> type >> blob;
  return type + " " + blob;
}

inline std::string this_boot_id() { return trim(read_file("/proc/sys/kernel/random/boot_id")); }

inline std::string this_hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// Plain OpenSSH options that keep `ssh` off ~/.ssh, the agent and /etc/ssh, for the fakes' own
// checks against addresses the fixture's ssh_config has no block for.
inline std::string hermetic_ssh(const Fixture& fx, const std::string& known_hosts) {
  return "ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes -o IdentityAgent=none -i '" +
         fx.hosts.key + "' -o UserKnownHostsFile='" + known_hosts +
         "' -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o UpdateHostKeys=no "
         "-o ConnectTimeout=5 -l " +
         fx.hosts.user;
}

// True if `text` has an `ssh-keygen ... -R` command on one line (hvdrun may put -f FILE first).
inline bool removal_command_named(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto at = line.find("ssh-keygen ");
    if (at != std::string::npos && line.find(" -R", at) != std::string::npos) return true;
  }
  return false;
}

// True if `text` names `status` as an exit status: the number as a word of its own, with
// "exit", "status" or "code" among the three words before it ("exited with status 7").
// (No std::regex: GCC 12 warns inside <regex> at -O2 with sanitizers, and -Werror is on.)
inline bool names_exit_status(const std::string& text, const std::string& status) {
  std::vector<std::string> words;
  std::string word;
  for (const char ch : text + " ") {
    if (std::isalnum(static_cast<unsigned char>(ch)) != 0) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    } else if (!word.empty()) {
      words.push_back(word);
      word.clear();
    }
  }
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] != status) continue;
    for (size_t back = 1; back <= 3 && back <= i; ++back) {
      const std::string& w = words[i - back];
      if (w.find("exit") != std::string::npos || w == "status" || w == "code") return true;
    }
  }
  return false;
}

}  // namespace hvd::test::check_ssh
