#include "ssh/ssh_socket.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace hvd::ssh {
namespace {

constexpr std::string_view kMaxStartups = "Exceeded MaxStartups";

int remaining_ms(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

std::string numeric_address(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw =
      sa->sa_family == AF_INET6
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(sa)->sin_addr);
  return inet_ntop(sa->sa_family, raw, text, sizeof text) != nullptr ? text : "?";
}

class StageClock {
 public:
  StageClock(SocketOutcome& out, Stage stage, CheckControl& control)
      : out_(out), stage_(stage), start_(Clock::now()) {
    control.stage = stage;
  }
  void done(bool ok) {
    out_.stages.push_back(
        {stage_, std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_), ok});
  }

 private:
  SocketOutcome& out_;
  Stage stage_;
  Clock::time_point start_;
};

SocketOutcome fail(SocketOutcome out, CheckCode code, Stage stage, std::string message,
                   CheckControl& control) {
  out.code = code;
  out.failed_stage = stage;
  out.message = std::move(message);
  control.unwatch();
  out.fd.reset();
  return out;
}

struct AddrInfoFree {
  void operator()(addrinfo* ai) const { freeaddrinfo(ai); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoFree>;

// One non-blocking connect; returns 0 or the errno that ended it (ETIMEDOUT at the deadline).
int connect_one(const addrinfo* ai, Clock::time_point deadline, UniqueFd& fd,
                CheckControl& control) {
  control.unwatch();
  fd.reset(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
  if (!fd.valid()) return errno;
  control.watch(fd.get());
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  pollfd p{fd.get(), POLLOUT, 0};
  const int ready = ::poll(&p, 1, remaining_ms(deadline));
  if (ready == 0 || control.cancelled()) return ETIMEDOUT;
  if (ready < 0) return errno;
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  return err;
}

}  // namespace

void CheckControl::watch(int fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  fd_ = fd;
}

void CheckControl::cancel() {
  std::lock_guard<std::mutex> lock(mutex_);
  cancelled_ = true;
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  cancelled_cv_.notify_all();
}

bool CheckControl::pause(std::chrono::milliseconds pause) {
  std::unique_lock<std::mutex> lock(mutex_);
  return !cancelled_cv_.wait_for(lock, pause, [this] { return cancelled_.load(); });
}

std::string sanitize_bytes(std::string_view data) {
  std::string out;
  for (unsigned char c : data.substr(0, 64)) {
    if (c == '\r') {
      out += "\\r";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

SocketOutcome open_ssh_socket(const std::string& host, int port, Clock::time_point deadline,
                              CheckControl& control) {
  SocketOutcome out;

  // resolve
  StageClock resolve(out, Stage::kResolve, control);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* raw = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &raw);
  AddrInfoPtr list(raw);
  resolve.done(gai == 0);
  if (gai != 0) {
    return fail(std::move(out), CheckCode::kDnsFailure, Stage::kResolve,
                fmt::format("cannot resolve '{}': {}", host, gai_strerror(gai)), control);
  }

  // connect: each address in turn, as ssh does
  StageClock connect(out, Stage::kConnect, control);
  int err = ECONNREFUSED;
  for (const addrinfo* ai = list.get(); ai != nullptr; ai = ai->ai_next) {
    out.address = numeric_address(ai->ai_addr);
    err = connect_one(ai, deadline, out.fd, control);
    if (err == 0 || err == ETIMEDOUT || remaining_ms(deadline) == 0) break;
  }
  connect.done(err == 0);
  if (err == ECONNREFUSED) {
    return fail(
        std::move(out), CheckCode::kConnectionRefused, Stage::kConnect,
        fmt::format("connection refused by {} port {}: nothing listens there", out.address, port),
        control);
  }
  if (err != 0) {
    const std::string why = err == ETIMEDOUT ? "no answer to the TCP connect within the timeout"
                                             : std::string(std::strerror(err));
    return fail(std::move(out), CheckCode::kTimeout, Stage::kConnect,
                fmt::format("cannot connect to {} port {}: {}", out.address, port, why), control);
  }

  // banner: peek, do not consume
  StageClock banner(out, Stage::kBanner, control);
  const std::string where = fmt::format("{} port {}", out.address, port);
  std::string seen;
  CheckCode verdict = CheckCode::kOk;
  while (true) {
    pollfd p{out.fd.get(), POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) == 0 || control.cancelled()) {
      verdict = CheckCode::kBannerTimeout;
      break;
    }
    char buf[256];
    const ssize_t n = ::recv(out.fd.get(), buf, sizeof buf, MSG_PEEK);
    if (n <= 0) {
      verdict = seen.empty() ? CheckCode::kClosedBeforeBanner : CheckCode::kNotSsh;
      break;
    }
    seen.assign(buf, static_cast<size_t>(n));
    // RFC 4253 allows other lines before the version line.
    if (seen.starts_with("SSH-") || seen.find("\nSSH-") != std::string::npos) break;
    const bool whole_line = seen.find('\n') != std::string::npos || n == sizeof buf;
    const bool may_grow =
        std::string_view("SSH-").starts_with(seen) || kMaxStartups.starts_with(seen);
    if (whole_line || !may_grow) {
      verdict =
          seen.starts_with(kMaxStartups) ? CheckCode::kTooManyConnections : CheckCode::kNotSsh;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a partial line: wait for more
  }
  banner.done(verdict == CheckCode::kOk);
  switch (verdict) {
    case CheckCode::kOk:
      return out;
    case CheckCode::kBannerTimeout:
      return fail(std::move(out), verdict, Stage::kBanner,
                  fmt::format("{} accepted the connection but sent nothing (no SSH banner) "
                              "within the timeout",
                              where),
                  control);
    case CheckCode::kClosedBeforeBanner:
      return fail(std::move(out), verdict, Stage::kBanner,
                  fmt::format("{} accepted the connection and closed it before any SSH banner "
                              "(ssh says: kex_exchange_identification: Connection closed by "
                              "remote host)",
                              where),
                  control);
    case CheckCode::kTooManyConnections:
      return fail(std::move(out), verdict, Stage::kBanner,
                  fmt::format("sshd on {} refused the connection: \"{}\" (too many "
                              "unauthenticated connections at once)",
                              where, kMaxStartups),
                  control);
    default:
      return fail(
          std::move(out), CheckCode::kNotSsh, Stage::kBanner,
          fmt::format("{} is not an SSH server; it said: \"{}\"", where, sanitize_bytes(seen)),
          control);
  }
}

}  // namespace hvd::ssh
