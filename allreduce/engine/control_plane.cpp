#include "allreduce/engine/control_plane.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <random>
#include <set>

#include "allreduce/api/log.h"
#include "allreduce/api/status_error.h"
#include "common/bytes.h"  // same_secret
#include "common/fd_io.h"  // read_some
#include "common/pending_eviction.h"
#include "common/port_range.h"
#include "common/spare_fd.h"
#include "common/tcp_listen.h"

namespace hvd::runtime {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxMessage = 64u << 20;

std::string frame(const std::string& payload) {
  const auto n = static_cast<std::uint32_t>(payload.size());
  std::string out(4, '\0');
  std::memcpy(out.data(), &n, 4);
  return out + payload;
}

void set_nodelay(int fd) {
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
}

// This host's IPv4 addresses, routable ones first, loopback last (MPI mode: no address given).
std::vector<std::string> local_addresses() {
  std::vector<std::string> routable, loopback;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
      if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
      char text[INET_ADDRSTRLEN] = {};
      const auto* in = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
      ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
      const std::string addr = text;
      if (addr.rfind("169.254.", 0) == 0) continue;  // link-local: never routable
      (addr.rfind("127.", 0) == 0 ? loopback : routable).push_back(addr);
    }
    ::freeifaddrs(list);
  }
  routable.insert(routable.end(), loopback.begin(), loopback.end());
  if (routable.empty()) routable.push_back("127.0.0.1");
  return routable;
}

sockaddr_storage resolve(const std::string& host, int port, socklen_t& len) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) {
    throw StatusError(HVD_ERR_CONFIG, fmt::format("{} is not a numeric address", host));
  }
  sockaddr_storage out{};
  std::memcpy(&out, res->ai_addr, res->ai_addrlen);
  len = res->ai_addrlen;
  ::freeaddrinfo(res);
  return out;
}

// Listens on `address` (empty: every interface) at a free port, inside `range` when given and
// never on `avoid`; returns the socket and port.
std::pair<UniqueFd, int> listen_on(const std::string& address, const PortRange& range, int avoid) {
  const std::string host = address.empty() ? "0.0.0.0" : address;
  socklen_t len = 0;
  (void)resolve(host, 0, len);  // a name is a configuration error, said before any bind
  // hvdrun's one listen helper (common/tcp_listen.h): close-on-exec, SO_REUSEADDR.
  const ListenSpec spec{.address = host, .backlog = 1024};
  UniqueFd fd;
  const BindOutcome outcome = bind_first_free(
      range, [&](int port) { return listen_tcp(spec, port, fd); }, avoid);
  if (!outcome.bound()) {
    const BindFailure f = bind_failure(
        range, outcome,
        "HVD_PORT_RANGE=", "the engine's control plane (rank 0; MASTER_PORT excluded)", host);
    throw StatusError(range.any() ? HVD_ERR_BACKEND : HVD_ERR_CONFIG, f.message, f.hint);
  }
  return {std::move(fd), outcome.port};
}

bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
  }
}

// Reads exactly n bytes before the deadline.
bool read_exact(int fd, char* buf, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    if (!wait_for(fd, POLLIN, deadline)) return false;
    const long r = read_some(fd, buf + got, n - got);
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

// One non-blocking connect with a deadline; an fd, or an invalid one.
UniqueFd connect_to(const std::string& host, int port, Clock::time_point deadline) {
  socklen_t len = 0;
  sockaddr_storage addr = resolve(host, port, len);
  UniqueFd fd(::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return {};
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    if (errno != EINPROGRESS || !wait_for(fd.get(), POLLOUT, deadline)) return {};
    int err = 0;
    socklen_t elen = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err != 0) return {};
  }
  ::fcntl(fd.get(), F_SETFL, 0);  // blocking from here on; reads are driven by poll()
  set_nodelay(fd.get());
  return fd;
}

// write_all() for sockets: MSG_NOSIGNAL, so a peer that is gone is an error, not a SIGPIPE that
// would kill the training program.
bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

std::string random_hex() {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < 4; ++i) out += fmt::format("{:08x}", rd());
  return out;
}

// Rank 0's "token port addr1,addr2,..." to every rank, over the backend.
std::string share(Backend& backend, int rank, const std::string& mine) {
  std::uint64_t n = rank == 0 ? mine.size() : 0;
  backend.broadcast(&n, sizeof n, 0);
  std::string text = rank == 0 ? mine : std::string(n, '\0');
  backend.broadcast(text.data(), text.size(), 0);
  return text;
}

// The ranks among plane * size + rank ids, once each, in order: who did not connect.
std::set<int> ranks_of(const std::set<int>& ids, int size) {
  std::set<int> ranks;
  for (int id : ids) ranks.insert(id % size);
  return ranks;
}

}  // namespace

// Rank 0: accepts until every other rank said hello with the token, once per plane. Handshakes
// run side by side (one poll over the listener and every connection that has not said hello
// yet), each with kHelloTime, so idle or slow connections (a port scanner, an attacker who found
// the port) cannot hold up the ranks behind them; at most kMaxPendingHellos wait at once, the
// oldest dropped first. A hello names plane * size + rank (plane 0: the rank alone).
void ControlPlane::accept_ranks(int listener, const std::string& token, int size,
                                std::chrono::milliseconds timeout, Clock::time_point deadline,
                                std::vector<ControlPlane>& planes) {
  struct Pending {
    UniqueFd fd;
    std::string hello;  // token (32 hex) + rank (u32), as it arrives
    Clock::time_point until;
  };
  constexpr auto kHelloTime = std::chrono::seconds(5);
  constexpr std::size_t kMaxPendingHellos = 64;
  constexpr std::size_t kHelloBytes = 36;
  std::set<int> missing;  // plane * size + rank
  for (std::size_t plane = 0; plane < planes.size(); ++plane) {
    for (int r = 1; r < size; ++r) missing.insert(static_cast<int>(plane) * size + r);
  }
  std::deque<Pending> pending;
  SpareDescriptor spare;
  ::fcntl(listener, F_SETFL, ::fcntl(listener, F_GETFL) | O_NONBLOCK);  // accept until EAGAIN
  while (!missing.empty()) {
    const auto now = Clock::now();
    if (now >= deadline) {
      throw StatusError(
          HVD_ERR_TIMEOUT,
          fmt::format("the engine's control plane: rank(s) {} did not connect to "
                      "rank 0 within {} s",
                      fmt::join(ranks_of(missing, size), ", "), timeout.count() / 1000),
          "a firewall may block rank 0's host, or those ranks failed in init()");
    }
    std::erase_if(pending, [&](const Pending& p) { return p.until <= now; });
    auto wake = deadline;
    std::vector<pollfd> fds{{listener, POLLIN, 0}};
    for (const Pending& p : pending) {
      fds.push_back({p.fd.get(), POLLIN, 0});
      wake = std::min(wake, p.until);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(1, left))) <= 0) continue;
    // Read what the waiting connections sent; a complete hello is checked at once.
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Pending& p = pending[i - 1];
      char buf[kHelloBytes];
      const ssize_t n = ::recv(p.fd.get(), buf, kHelloBytes - p.hello.size(), MSG_DONTWAIT);
      if (n <= 0) {
        p.until = Clock::time_point{};  // gone: dropped below
        continue;
      }
      p.hello.append(buf, static_cast<std::size_t>(n));
      if (p.hello.size() < kHelloBytes) continue;
      std::uint32_t from = 0;
      std::memcpy(&from, p.hello.data() + 32, 4);
      const bool ours = same_secret(std::string_view(p.hello).substr(0, 32), token) &&
                        from < static_cast<std::uint32_t>(size) * planes.size() &&
                        missing.count(static_cast<int>(from)) == 1;
      if (ours) {
        ::fcntl(p.fd.get(), F_SETFL, 0);  // blocking from here on; reads are driven by poll()
        set_nodelay(p.fd.get());
        if (send_all(p.fd.get(), "ok")) {
          missing.erase(static_cast<int>(from));
          planes[from / static_cast<std::uint32_t>(size)]
              .peers_[from % static_cast<std::uint32_t>(size)]
              .fd = std::move(p.fd);
        }
      }
      p.until = Clock::time_point{};  // answered or not one of ours: no longer pending
    }
    std::erase_if(pending, [](const Pending& p) { return p.until == Clock::time_point{}; });
    if (fds[0].revents == 0) continue;
    // Room for one more: the oldest connection without a whole hello (received, or waiting to be
    // read) goes first, as at the srun listener (common/pending_eviction.h): a flood of silent
    // connections cannot push out a rank whose hello came in the same batch of accepts. Only the
    // hello's length counts, never its bytes.
    const auto evict_one = [&] {
      pending.erase(eviction_victim(pending.begin(), pending.end(), [](const Pending& p) {
        char buf[kHelloBytes];
        const ssize_t n = ::recv(p.fd.get(), buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        return p.hello.size() + static_cast<std::size_t>(std::max<ssize_t>(n, 0)) >= kHelloBytes;
      }));
    };
    while (true) {
      UniqueFd conn(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!conn.valid()) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // Out of descriptors: a pending stranger makes room, else the waiting connection is
        // dropped on the spare descriptor (never a readable listener left unaccepted: a spin).
        if (!SpareDescriptor::out_of_descriptors(errno)) break;
        if (!pending.empty()) {
          evict_one();
          continue;
        }
        if (!spare.drop_pending(listener)) break;
        continue;
      }
      if (pending.size() >= kMaxPendingHellos) evict_one();
      pending.push_back({std::move(conn), {}, Clock::now() + kHelloTime});
    }
  }
}

std::string address_in_networks(const std::string& networks) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> cidrs;  // network, mask (host order)
  std::vector<std::string> names;
  for (std::size_t at = 0; at < networks.size();) {
    const auto comma = std::min(networks.find(',', at), networks.size());
    const std::string item = networks.substr(at, comma - at);
    at = comma + 1;
    const auto slash = item.find('/');
    in_addr addr{};
    int bits = -1;
    if (slash != std::string::npos &&
        ::inet_pton(AF_INET, item.substr(0, slash).c_str(), &addr) == 1 &&
        std::sscanf(item.c_str() + slash + 1, "%d", &bits) == 1 && bits >= 0 && bits <= 32) {
      const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
      cidrs.emplace_back(ntohl(addr.s_addr) & mask, mask);
    } else if (!item.empty()) {
      names.push_back(item);
    }
  }
  if (cidrs.empty() && names.empty()) return {};
  std::string found;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  for (ifaddrs* it = list; it != nullptr && found.empty(); it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    const auto* in = reinterpret_cast<const sockaddr_in*>(it->ifa_addr);
    const std::uint32_t a = ntohl(in->sin_addr.s_addr);
    const bool match = std::any_of(cidrs.begin(), cidrs.end(),
                                   [&](const auto& c) { return (a & c.second) == c.first; }) ||
                       std::find(names.begin(), names.end(), it->ifa_name) != names.end();
    if (!match) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
    found = text;
  }
  ::freeifaddrs(list);
  return found;
}

ControlPlane ControlPlane::adopt(int rank, int size, std::vector<UniqueFd> peers) {
  ControlPlane cp;
  cp.rank_ = rank;
  cp.size_ = size;
  cp.peers_.resize(static_cast<std::size_t>(size));
  for (std::size_t r = 0; r < peers.size() && r < cp.peers_.size(); ++r) {
    cp.peers_[r].fd = std::move(peers[r]);
  }
  return cp;
}

ControlPlane ControlPlane::connect(Backend& backend, int rank, int size,
                                   const std::string& bind_address,
                                   std::chrono::milliseconds timeout, const PortRange& port_range,
                                   int avoid_port) {
  return std::move(
      connect_planes(1, backend, rank, size, bind_address, timeout, port_range, avoid_port)
          .front());
}

std::vector<ControlPlane> ControlPlane::connect_planes(int count, Backend& backend, int rank,
                                                       int size, const std::string& bind_address,
                                                       std::chrono::milliseconds timeout,
                                                       const PortRange& port_range,
                                                       int avoid_port) {
  std::vector<ControlPlane> planes(static_cast<std::size_t>(count));
  for (ControlPlane& cp : planes) {
    cp.rank_ = rank;
    cp.size_ = size;
    cp.peers_.resize(static_cast<std::size_t>(size));
  }
  if (size == 1) return planes;
  const auto deadline = Clock::now() + timeout;

  if (rank == 0) {
    auto [listener, port] = listen_on(bind_address, port_range, avoid_port);
    logger().debug("the engine's control plane listens on {}:{}",
                   bind_address.empty() ? "every interface" : bind_address, port);
    const std::string token = random_hex();
    const std::vector<std::string> addrs =
        bind_address.empty() ? local_addresses() : std::vector<std::string>{bind_address};
    share(backend, rank, fmt::format("{} {} {}", token, port, fmt::join(addrs, ",")));
    accept_ranks(listener.get(), token, size, timeout, deadline, planes);
    return planes;
  }

  const std::string shared = share(backend, rank, {});
  char token[33] = {};
  int port = 0;
  char addr_list[4096] = {};
  if (std::sscanf(shared.c_str(), "%32s %d %4095s", token, &port, addr_list) != 3) {
    throw StatusError(HVD_ERR_INTERNAL, "the engine's control plane: bad address from rank 0");
  }
  std::string addrs = addr_list;
  std::vector<std::string> tried;
  for (std::size_t at = 0; at <= addrs.size();) {
    const auto comma = std::min(addrs.find(',', at), addrs.size());
    const std::string host = addrs.substr(at, comma - at);
    at = comma + 1;
    tried.push_back(host);
    // Every plane through the first address that answers.
    std::size_t connected = 0;
    for (; connected < planes.size(); ++connected) {
      const auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(3));
      UniqueFd fd = connect_to(host, port, attempt_deadline);
      if (fd.get() < 0) break;
      std::string hello(token, 32);
      const auto id = static_cast<std::uint32_t>(static_cast<int>(connected) * size + rank);
      hello.append(reinterpret_cast<const char*>(&id), 4);
      char ok[2];
      if (!send_all(fd.get(), hello) || !read_exact(fd.get(), ok, 2, deadline) ||
          std::string_view(ok, 2) != "ok") {
        break;
      }
      planes[connected].peers_[0].fd = std::move(fd);
    }
    if (connected == planes.size()) return planes;
    for (ControlPlane& cp : planes) cp.peers_[0].fd.reset();
  }
  throw StatusError(HVD_ERR_TIMEOUT,
                    fmt::format("the engine's control plane: rank {} cannot reach rank 0 at port "
                                "{} on {}",
                                rank, port, fmt::join(tried, ", ")),
                    "a firewall may block rank 0's host; see docs/libhvd.md");
}

int ControlPlane::peer(int r) const {
  return r >= 0 && r < size_ ? peers_[static_cast<std::size_t>(r)].fd.get() : -1;
}

void ControlPlane::watch(std::vector<pollfd>& fds, std::vector<int>& ranks) const {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && peer(r) >= 0) {
      fds.push_back({peer(r), POLLIN, 0});
      ranks.push_back(r);
    }
  }
}

bool ControlPlane::send(int r, const std::string& payload) {
  const int fd = peer(r);
  return fd >= 0 && send_all(fd, frame(payload));
}

std::optional<std::vector<std::string>> ControlPlane::receive(int r) {
  Peer& p = peers_[static_cast<std::size_t>(r)];
  char buf[65536];
  const long n = read_some(p.fd.get(), buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  p.inbox.append(buf, static_cast<std::size_t>(n));
  std::vector<std::string> messages;
  std::size_t at = 0;
  while (p.inbox.size() - at >= 4) {
    std::uint32_t len = 0;
    std::memcpy(&len, p.inbox.data() + at, 4);
    if (len > kMaxMessage) return std::nullopt;  // garbage: treat the peer as gone
    if (p.inbox.size() - at - 4 < len) break;
    messages.emplace_back(p.inbox.substr(at + 4, len));
    at += 4 + len;
  }
  p.inbox.erase(0, at);
  return messages;
}

void ControlPlane::close(int r) { peers_[static_cast<std::size_t>(r)].fd.reset(); }

}  // namespace hvd::runtime
