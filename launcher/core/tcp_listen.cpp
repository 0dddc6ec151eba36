#include "launcher/core/tcp_listen.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/error.h"

namespace hvd::launcher {
namespace {

constexpr int kBacklog = 1024;

// A listening TCP socket on `address` (numeric, or a name resolved once) and `port`; the errno
// of what failed.
BindAttempt listen_on(const std::string& address, int port, UniqueFd& out, int backlog) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (::getaddrinfo(address.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    return {0, EADDRNOTAVAIL};
  }
  UniqueFd fd(::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int err = 0;
  if (!fd.valid()) {
    err = errno;
  } else {
    int yes = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd.get(), res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      err = errno;
    }
  }
  ::freeaddrinfo(res);
  if (err != 0) return {0, err};
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
  const int got =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  out = std::move(fd);
  return {got, 0};
}

}  // namespace

std::pair<UniqueFd, int> listen_in_range(const std::string& address, const PortRange& range,
                                         std::string_view what) {
  UniqueFd listener;
  const BindOutcome outcome = bind_first_free(
      range, [&](int port) { return listen_on(address, port, listener, kBacklog); });
  if (!outcome.bound()) {
    const BindFailure f = bind_failure(range, outcome, "--port-range ", what, address);
    throw LauncherError(f.message, f.hint);
  }
  return {std::move(listener), outcome.port};
}

}  // namespace hvd::launcher
