#include "tests/support/fake_servers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "tests/support/fake_servers_internal.h"
#include "tests/support/test_hosts.h"

extern char** environ;

namespace hvd::test {
namespace internal {

[[noreturn]] void fail(const std::string& what, int err) {
  throw std::runtime_error("fake server: " + what + ": " + std::strerror(err));
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

sockaddr_in ipv4(const std::string& address, int port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, address.c_str(), &sa.sin_addr) != 1) {
    throw std::runtime_error("fake server: '" + address + "' is not an IPv4 address");
  }
  return sa;
}

// A TCP socket bound to address:port (SO_REUSEADDR, so a fixed port from an earlier run in
// TIME_WAIT can be reused). Returns the fd; `port` is updated with the bound port.
int bound_socket(const std::string& address, int& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fail("socket");
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa = ipv4(address, port);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const int err = errno;
    ::close(fd);
    fail("bind " + address + ":" + std::to_string(port), err);
  }
  socklen_t len = sizeof sa;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) {
    const int err = errno;
    ::close(fd);
    fail("getsockname", err);
  }
  port = ntohs(sa.sin_port);
  return fd;
}

// Starts a non-blocking connect; returns the fd (connected or in progress), or -1 if refused
// or failed at once.
int start_connect(const std::string& address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fail("socket");
  sockaddr_in sa = ipv4(address, port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 || errno == EINPROGRESS) {
    return fd;
  }
  ::close(fd);
  return -1;
}

// Waits up to `timeout` for a connect started by start_connect to finish. Returns 0 when
// connected, an errno when it failed, or -1 when it is still in progress.
int finish_connect(int fd, milliseconds timeout) {
  pollfd p{fd, POLLOUT, 0};
  int ready = 0;
  do {
    ready = ::poll(&p, 1, static_cast<int>(timeout.count()));
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) return -1;
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

// Reads and discards whatever is readable now; returns false on EOF or a hard error.
bool discard_input(int fd) {
  char buffer[4096];
  while (true) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Runs argv (no shell) with all stdio on /dev/null and returns its exit status (-1 if it could
// not be started or ended by a signal).
int run_quiet(std::vector<std::string> argv) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (int fd = 0; fd <= 2; ++fd) {
    posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0);
  }
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Paths go into sshd_config unquoted: only plain path characters (the fixture enforces the same).
bool config_safe(const std::string& path) {
  return !path.empty() && std::all_of(path.begin(), path.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 ||
           std::strchr("._/+@=,:-", c) != nullptr;
  });
}

std::string make_temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp != nullptr && config_safe(tmp) ? tmp : "/tmp";
  std::string pattern = base + "/hvd-sshd-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) fail("mkdtemp " + pattern);
  return pattern;
}

// Direct children of `pid` (sshd's per-connection processes), from /proc.
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    if (name.empty() || !std::all_of(name.begin(), name.end(), digit)) continue;
    const std::string stat = read_file(entry.path().string() + "/stat");
    const auto paren = stat.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream fields(stat.substr(paren + 1));
    std::string state;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == pid) out.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return out;
}

}  // namespace internal

namespace {
using namespace internal;  // NOLINT: this file's own helpers
// How long a closing connection may still drain what the client sends before we close it for
// good (reading it first keeps close() from turning our orderly FIN into an RST).
constexpr milliseconds kDrainFor{2000};
}  // namespace

std::string unresolvable_host() { return "hvd-no-such-host.invalid"; }

std::string read_first_line(const std::string& address, int port, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  int fd = start_connect(address, port);
  if (fd < 0) return "";
  std::string line;
  if (finish_connect(fd, timeout) == 0) {
    while (line.size() < 255) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char c = 0;
      const ssize_t n = ::recv(fd, &c, 1, 0);
      if (n <= 0 || c == '\n') break;
      line += c;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("SSH-", 0) == 0) {
      const std::string ours = "SSH-2.0-hvdtest_probe\r\n";
      (void)!::send(fd, ours.data(), ours.size(), MSG_NOSIGNAL);
    }
  }
  ::close(fd);
  return line;
}

// ---------------------------------------------------------------------------------------------
// ClosedPort

ClosedPort::ClosedPort(const std::string& address, int port) : address_(address), port_(port) {
  fd_ = bound_socket(address_, port_);  // bound, never listening: SYNs get RST
}

ClosedPort::~ClosedPort() { close_fd(fd_); }

// ---------------------------------------------------------------------------------------------
// The accept loop behind AcceptAndClose, AcceptAndSilent and Greeter: one thread per server,
// waiting in poll() on the listener, its connections and an eventfd that the destructor signals.

namespace detail {

enum class Behaviour { kClose, kSilent, kGreet };

class AcceptLoop {
 public:
  AcceptLoop(const std::string& address, int port, Behaviour behaviour, std::string text,
             milliseconds close_after)
      : address_(address),
        port_(port),
        behaviour_(behaviour),
        text_(std::move(text)),
        close_after_(close_after) {
    listen_fd_ = bound_socket(address_, port_);
    if (::listen(listen_fd_, 128) != 0) {
      const int err = errno;
      close_fd(listen_fd_);
      fail("listen " + address_ + ":" + std::to_string(port_), err);
    }
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) {
      const int err = errno;
      close_fd(listen_fd_);
      fail("eventfd", err);
    }
    thread_ = std::thread([this] { run(); });
  }

  ~AcceptLoop() {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    if (thread_.joinable()) thread_.join();
    for (Conn& c : conns_) close_fd(c.fd);
    close_fd(listen_fd_);
    close_fd(wake_fd_);
  }

  AcceptLoop(const AcceptLoop&) = delete;
  AcceptLoop& operator=(const AcceptLoop&) = delete;

  const std::string& address() const { return address_; }
  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }

 private:
  struct Conn {
    int fd = -1;
    std::optional<Clock::time_point> shut_at;  // when to send our FIN (Greeter)
    std::optional<Clock::time_point> drop_at;  // FIN sent: close for good by then
  };

  // Our side is done: send FIN now, keep reading (and discarding) until the client closes or
  // kDrainFor passes.
  void shut(Conn& c) {
    ::shutdown(c.fd, SHUT_WR);
    c.shut_at.reset();
    c.drop_at = Clock::now() + kDrainFor;
  }

  void on_accept(int fd) {
    accepted_.fetch_add(1);
    Conn c{fd, std::nullopt, std::nullopt};
    switch (behaviour_) {
      case Behaviour::kClose:
        shut(c);
        break;
      case Behaviour::kSilent:
        break;
      case Behaviour::kGreet:
        // A few dozen bytes always fit an empty socket buffer: one non-blocking send suffices.
        (void)!::send(fd, text_.data(), text_.size(), MSG_NOSIGNAL);
        c.shut_at = Clock::now() + close_after_;
        break;
    }
    conns_.push_back(c);
  }

  void run() {
    std::vector<pollfd> fds;
    while (true) {
      // Deadlines first: FINs due, connections done draining.
      const Clock::time_point now = Clock::now();
      std::optional<Clock::time_point> next;
      for (Conn& c : conns_) {
        if (c.shut_at && *c.shut_at <= now) shut(c);
        if (c.drop_at && *c.drop_at <= now) close_fd(c.fd);
        for (const auto& t : {c.shut_at, c.drop_at}) {
          if (t && c.fd >= 0 && (!next || *t < *next)) next = t;
        }
      }
      std::erase_if(conns_, [](const Conn& c) { return c.fd < 0; });

      fds.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const Conn& c : conns_) fds.push_back({c.fd, POLLIN, 0});
      int timeout_ms = -1;
      if (next) {
        timeout_ms = static_cast<int>(
            std::chrono::duration_cast<milliseconds>(*next - Clock::now()).count() + 1);
        timeout_ms = std::max(timeout_ms, 0);
      }
      if (::poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;  // the destructor wants us gone
      if (fds[1].revents != 0) {
        while (true) {
          const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (fd < 0) break;
          on_accept(fd);
        }
      }
      // Client data is read and dropped; a client that closed is closed on our side too.
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        for (Conn& c : conns_) {
          if (c.fd == fds[i].fd && !discard_input(c.fd)) close_fd(c.fd);
        }
      }
    }
  }

  std::string address_;
  int port_;
  Behaviour behaviour_;
  std::string text_;
  milliseconds close_after_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<int> accepted_{0};
  std::vector<Conn> conns_;  // touched by the thread only (and by the destructor after join)
  std::thread thread_;       // last: started once everything above exists
};

}  // namespace detail

ListeningServer::~ListeningServer() = default;
const std::string& ListeningServer::address() const { return loop_->address(); }
int ListeningServer::port() const { return loop_->port(); }
int ListeningServer::accepted() const { return loop_->accepted(); }

AcceptAndClose::AcceptAndClose(const std::string& address, int port) {
  loop_ = std::make_unique<detail::AcceptLoop>(address, port, detail::Behaviour::kClose, "",
                                               milliseconds(0));
}

AcceptAndSilent::AcceptAndSilent(const std::string& address, int port) {
  loop_ = std::make_unique<detail::AcceptLoop>(address, port, detail::Behaviour::kSilent, "",
                                               milliseconds(0));
}

Greeter::Greeter(std::string text, const std::string& address, int port, milliseconds close_after) {
  loop_ = std::make_unique<detail::AcceptLoop>(address, port, detail::Behaviour::kGreet,
                                               std::move(text), close_after);
}

// ---------------------------------------------------------------------------------------------
// FullBacklog

FullBacklog::FullBacklog(const std::string& address, int port, milliseconds verify_for)
    : address_(address), port_(port) {
  listen_fd_ = bound_socket(address_, port_);
  try {
    if (::listen(listen_fd_, 0) != 0) fail("listen " + address_ + ":" + std::to_string(port_));
    // Connect until one connect no longer completes: the queue is then full. Typically the first
    // connection completes (it sits in the accept queue) and the second stalls.
    bool stalled = false;
    for (int i = 0; i < 8 && !stalled; ++i) {
      const int fd = start_connect(address_, port_);
      if (fd < 0) fail("connect to own listener " + address_ + ":" + std::to_string(port_));
      const int rc = finish_connect(fd, milliseconds(200));
      if (rc == -1) {
        stalled = true;
        ::close(fd);  // in SYN_SENT: its SYNs keep being dropped, it holds nothing
      } else if (rc == 0) {
        fillers_.push_back(fd);
      } else {
        ::close(fd);
        fail("connect to own listener " + address_ + ":" + std::to_string(port_), rc);
      }
    }
    if (!stalled || !connect_stalls(verify_for)) {
      throw std::runtime_error(
          "fake server: FullBacklog on " + address_ + ":" + std::to_string(port_) +
          ": a connect to a listener with a full accept queue completed; this kernel does not "
          "drop SYNs on accept queue overflow, so a connect timeout cannot be simulated this way");
    }
  } catch (...) {
    for (int& fd : fillers_) close_fd(fd);
    close_fd(listen_fd_);
    throw;
  }
}

FullBacklog::~FullBacklog() {
  for (int& fd : fillers_) close_fd(fd);
  close_fd(listen_fd_);
}

bool FullBacklog::connect_stalls(milliseconds wait) const {
  const int fd = start_connect(address_, port_);
  if (fd < 0) return false;
  const int rc = finish_connect(fd, wait);
  ::close(fd);
  return rc == -1;
}

// ---------------------------------------------------------------------------------------------
// HeldConnections

HeldConnections::~HeldConnections() { close_all(); }

HeldConnections::HeldConnections(HeldConnections&& other) noexcept
    : fds_(std::exchange(other.fds_, {})) {}

HeldConnections& HeldConnections::operator=(HeldConnections&& other) noexcept {
  if (this != &other) {
    close_all();
    fds_ = std::exchange(other.fds_, {});
  }
  return *this;
}

void HeldConnections::close_all() {
  for (int& fd : fds_) close_fd(fd);
  fds_.clear();
}

}  // namespace hvd::test
