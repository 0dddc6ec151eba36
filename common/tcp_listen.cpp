#include "common/tcp_listen.h"

#include <netdb.h>
#include <netinet/in.h>

#include <cerrno>

#include "common/error.h"

namespace hvd {

BindAttempt listen_tcp(const ListenSpec& spec, int port, UniqueFd& out) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (::getaddrinfo(spec.address.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    return {0, EADDRNOTAVAIL};
  }
  const int type = SOCK_STREAM | SOCK_CLOEXEC | (spec.nonblocking ? SOCK_NONBLOCK : 0);
  UniqueFd fd(::socket(res->ai_family, type, 0));
  int err = 0;
  if (!fd.valid()) {
    err = errno;
  } else {
    const int yes = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (res->ai_family == AF_INET6 && spec.dual_stack) {
      const int off = 0;
      ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    }
    if (::bind(fd.get(), res->ai_addr, res->ai_addrlen) != 0 ||
        ::listen(fd.get(), spec.backlog) != 0) {
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

std::pair<UniqueFd, int> listen_in_range(const std::string& address, const PortRange& range,
                                         std::string_view what) {
  UniqueFd listener;
  const ListenSpec spec{.address = address, .backlog = 1024};
  const BindOutcome outcome =
      bind_first_free(range, [&](int port) { return listen_tcp(spec, port, listener); });
  if (!outcome.bound()) {
    const BindFailure f = bind_failure(range, outcome, "--port-range ", what, address);
    throw LauncherError(f.message, f.hint);
  }
  return {std::move(listener), outcome.port};
}

}  // namespace hvd
