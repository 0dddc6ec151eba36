// SshdInstance (tests/support/fake_servers.h): a real sshd on a private loopback address for one
// test, with its own config and log.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fake_servers.h"
#include "tests/support/fake_servers_internal.h"
#include "tests/support/test_hosts.h"

extern char** environ;

namespace hvd::test {

using namespace internal;  // NOLINT: the support library's own helpers

// ---------------------------------------------------------------------------------------------
// SshdInstance

SshdInstance::SshdInstance(const std::string& address, std::vector<std::string> extra_config,
                           int port)
    : address_(address), extra_config_(std::move(extra_config)) {
  if (::access(kSshd, X_OK) != 0) fail(std::string(kSshd) + " (install openssh-server)");
  // As root, sshd refuses to start without its privilege separation directory.
  if (::geteuid() == 0) ::mkdir("/run/sshd", 0755);
  temp_dir_ = make_temp_dir();
  log_path_ = temp_dir_ + "/sshd.log";
  try {
    const bool fixed = port != 0;
    for (int attempt = 0; attempt < 5; ++attempt) {
      int try_port = port;
      if (!fixed) {
        // The kernel's choice of a free port; released right away for sshd to bind. Nothing else
        // binds our private address, so the race is only with wildcard listeners: retried.
        const int fd = bound_socket(address_, try_port);
        ::close(fd);
      }
      if (start_once(try_port)) {
        port_ = try_port;
        return;
      }
      if (fixed) break;
    }
    throw std::runtime_error("fake server: sshd could not bind " + address_ + ":" +
                             std::to_string(port) + "; its log:\n" + log());
  } catch (...) {
    stop();
    throw;
  }
}

SshdInstance::~SshdInstance() { stop(); }

std::string SshdInstance::log() const { return read_file(log_path_); }

bool SshdInstance::start_once(int port) {
  const TestHosts hosts = TestHosts::load();
  const std::string config = temp_dir_ + "/sshd_config";
  {
    std::ofstream out(config, std::ios::trunc);
    // sshd uses the first value it reads for a keyword: the caller's lines go first and win.
    for (const std::string& line : extra_config_) out << line << "\n";
    out << "Port " << port << "\n"
        << "ListenAddress " << address_ << "\n"
        << "AddressFamily inet\n"
        << "HostKey " << hosts.dir << "/ssh_host_ed25519_key\n"
        << "AuthorizedKeysFile " << hosts.dir << "/authorized_keys\n"
        << "PidFile " << temp_dir_
        << "/sshd.pid\n"
        // The same reasons as the fixture (tests/sshd/README.md): keys under /tmp, no PAM.
        << "StrictModes no\n"
        << "PasswordAuthentication no\n"
        << "KbdInteractiveAuthentication no\n"
        << "PubkeyAuthentication yes\n"
        << "PermitRootLogin prohibit-password\n"
        << "AllowUsers " << hosts.user << "\n"
        << "UsePAM no\n"
        << "UseDNS no\n"
        << "X11Forwarding no\n"
        << "PrintMotd no\n"
        << "PrintLastLog no\n"
        << "LogLevel INFO\n";
    if (!out) fail("write " + config);
  }
  // OpenSSH >= 9.8 penalises sources that fail authentication (all ours are 127.0.0.1).
  if (run_quiet({kSshd, "-t", "-f", config, "-o", "PerSourcePenalties=no"}) == 0) {
    std::ofstream(config, std::ios::app) << "PerSourcePenalties no\n";
  }
  ::unlink(log_path_.c_str());

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd <= 2; ++fd) {
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group: a ^C meant for the test run does not reach it first; we stop it.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> argv{kSshd, "-D", "-f", config, "-E", log_path_};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, kSshd, &actions, &attr, args.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) fail(std::string("posix_spawn ") + kSshd, rc);
  pid_ = pid;

  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      const std::string text = log();
      if (text.find("Bind to port") != std::string::npos ||
          text.find("Cannot bind any address") != std::string::npos) {
        return false;
      }
      throw std::runtime_error("fake server: sshd exited at start (status " +
                               std::to_string(status) + "); its log:\n" + text);
    }
    if (read_first_line(address_, port, milliseconds(500)).rfind("SSH-", 0) == 0) return true;
    std::this_thread::sleep_for(milliseconds(20));
  }
  throw std::runtime_error("fake server: sshd on " + address_ + ":" + std::to_string(port) +
                           " sent no banner within 10 s; its log:\n" + log());
}

HeldConnections SshdInstance::hold_connections(int n, milliseconds within) {
  const Clock::time_point deadline = Clock::now() + within;
  HeldConnections held;  // owns what we have so far, also when we throw
  std::string last;
  while (static_cast<int>(held.size()) < n) {
    if (Clock::now() >= deadline) {
      throw std::runtime_error("fake server: could hold only " + std::to_string(held.size()) +
                               " of " + std::to_string(n) + " connections to sshd on " + address_ +
                               ":" + std::to_string(port_) + " (last answer: '" + last + "')");
    }
    const int fd = start_connect(address_, port_);
    if (fd >= 0 && finish_connect(fd, milliseconds(1000)) == 0) {
      // Read the identification line byte by byte so nothing past it is consumed.
      std::string line;
      const Clock::time_point line_deadline = Clock::now() + milliseconds(1000);
      while (line.size() < 255 && Clock::now() < line_deadline) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        char c = 0;
        if (::recv(fd, &c, 1, 0) != 1 || c == '\n') break;
        line += c;
      }
      if (line.rfind("SSH-", 0) == 0) {
        held.adopt(fd);  // a startup slot taken; we never answer, so it stays taken
        continue;
      }
      last = line;
    }
    if (fd >= 0) ::close(fd);
    std::this_thread::sleep_for(milliseconds(50));  // an earlier slot is still being released
  }
  return held;
}

void SshdInstance::stop() {
  if (pid_ > 0) {
    // Per-connection children first (they called setsid, so the group kill would miss them).
    std::vector<pid_t> victims = children_of(pid_);
    victims.push_back(pid_);
    for (pid_t p : victims) ::kill(p, SIGTERM);
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(3);
    int status = 0;
    bool reaped = false;
    while (!reaped && Clock::now() < deadline) {
      reaped = ::waitpid(pid_, &status, WNOHANG) == pid_;
      if (!reaped) std::this_thread::sleep_for(milliseconds(10));
    }
    if (!reaped) {  // still our unreaped child, so its pid cannot have been reused
      for (pid_t p : victims) ::kill(p, SIGKILL);
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    pid_ = -1;
  }
  if (!temp_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(temp_dir_, ec);
    temp_dir_.clear();
  }
}

}  // namespace hvd::test
