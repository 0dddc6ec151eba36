#include "agent/probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "common/error.h"
#include "common/tcp_listen.h"

namespace hvd::agent {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMaxGreeting = 256;
constexpr size_t kMaxConnections = 1024;  // kept at once, at most (see ProbeListener)

struct Status {
  ProbeStatus status;
  std::string_view name;
};
constexpr std::array<Status, 7> kStatuses{{{ProbeStatus::kOk, "ok"},
                                           {ProbeStatus::kRefused, "refused"},
                                           {ProbeStatus::kTimeout, "timeout"},
                                           {ProbeStatus::kNoRoute, "no_route"},
                                           {ProbeStatus::kReset, "reset"},
                                           {ProbeStatus::kWrongPeer, "wrong_peer"},
                                           {ProbeStatus::kError, "error"}}};

ProbeStatus classify_errno(int err) {
  switch (err) {
    case ECONNREFUSED:
      return ProbeStatus::kRefused;
    case ETIMEDOUT:
      return ProbeStatus::kTimeout;
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRNOTAVAIL:
      return ProbeStatus::kNoRoute;
    case ECONNRESET:
    case EPIPE:
      return ProbeStatus::kReset;
    default:
      return ProbeStatus::kError;
  }
}

// Printable ASCII only: the bytes come from whatever answered.
std::string printable(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    if (c == '\n' || c == '\r') break;
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return out;
}

struct Probe {
  const ProbeTarget* target = nullptr;
  UniqueFd fd;
  enum class Phase { kConnecting, kReading, kDone } phase = Phase::kConnecting;
  std::string received;
  Clock::time_point start;
  ProbeOutcome outcome;

  void finish(ProbeStatus status, std::string detail) {
    outcome.status = status;
    outcome.detail = std::move(detail);
    outcome.ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    phase = Phase::kDone;
    fd.reset();  // the prober closes first: the listener's side is left without a TIME_WAIT
  }
};

// A target without a token (the launcher's rendezvous server) only has to accept; an agent
// has to greet.
void connected(Probe& p) {
  if (p.target->token.empty()) {
    p.finish(ProbeStatus::kOk, "");
  } else {
    p.phase = Probe::Phase::kReading;
  }
}

void start_connect(Probe& p) {
  p.start = Clock::now();
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(p.target->port);
  const int rc = ::getaddrinfo(p.target->address.c_str(), port.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    p.finish(ProbeStatus::kError, fmt::format("cannot resolve {}: {}", p.target->address,
                                              rc != 0 ? ::gai_strerror(rc) : "no address"));
    return;
  }
  p.fd.reset(::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  const int err = !p.fd.valid()                                                   ? errno
                  : ::connect(p.fd.get(), found->ai_addr, found->ai_addrlen) == 0 ? 0
                                                                                  : errno;
  ::freeaddrinfo(found);
  if (err == 0) {
    connected(p);
  } else if (err != EINPROGRESS) {
    p.finish(classify_errno(err), std::strerror(err));
  }
}

void on_connect_ready(Probe& p) {
  int err = 0;
  socklen_t len = sizeof err;
  ::getsockopt(p.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    p.finish(classify_errno(err), std::strerror(err));
  } else {
    connected(p);
  }
}

void on_readable(Probe& p) {
  std::array<char, kMaxGreeting> buf{};
  const ssize_t n = ::recv(p.fd.get(), buf.data(), buf.size(), MSG_DONTWAIT);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    p.finish(classify_errno(errno), std::strerror(errno));
    return;
  }
  if (n == 0) {
    p.finish(ProbeStatus::kWrongPeer,
             p.received.empty()
                 ? "connected, but the other end closed without greeting (not an hvdrun agent)"
                 : fmt::format("connected, but it answered '{}'", printable(p.received)));
    return;
  }
  p.received.append(buf.data(), static_cast<size_t>(n));
  const auto newline = p.received.find('\n');
  if (newline == std::string::npos && p.received.size() < kMaxGreeting) return;
  const std::string line = p.received.substr(0, newline == std::string::npos ? 0 : newline + 1);
  if (line == probe_greeting(p.target->token)) {
    p.finish(ProbeStatus::kOk, "");
  } else if (line.starts_with("hvdrun-probe ")) {
    p.finish(ProbeStatus::kWrongPeer,
             "connected, but to another host's hvdrun agent (the address leads elsewhere)");
  } else {
    p.finish(ProbeStatus::kWrongPeer,
             fmt::format("connected, but it answered '{}' (not an hvdrun agent)",
                         printable(p.received)));
  }
}

nlohmann::json parse_object(std::string_view payload, std::string_view what) {
  auto json = nlohmann::json::parse(payload, nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    throw Error(fmt::format("protocol error: the {} payload is not a JSON object", what));
  }
  return json;
}

// An integer field must be a JSON integer that fits: nlohmann's get<int>() converts a float
// (1e123) or a bool too, and a float out of int's range is undefined behaviour.
template <typename T>
bool fits(const nlohmann::json& value) {
  if constexpr (std::is_integral_v<T>) {
    if (value.is_number_unsigned()) {
      return value.get<std::uint64_t>() <=
             static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    }
    if (!value.is_number_integer()) return false;
    const auto v = value.get<std::int64_t>();
    return v >= std::numeric_limits<T>::min() && v <= std::numeric_limits<T>::max();
  } else {
    return true;
  }
}

template <typename T>
T field(const nlohmann::json& json, const char* name, std::string_view what) {
  try {
    const nlohmann::json& value = json.at(name);
    if (fits<T>(value)) return value.get<T>();
  } catch (const nlohmann::json::exception&) {
  }
  throw Error(fmt::format("protocol error: the {} payload has no valid '{}'", what, name));
}

}  // namespace

std::string_view probe_status_name(ProbeStatus status) {
  for (const Status& s : kStatuses) {
    if (s.status == status) return s.name;
  }
  return "error";
}

std::optional<ProbeStatus> parse_probe_status(std::string_view name) {
  for (const Status& s : kStatuses) {
    if (s.name == name) return s.status;
  }
  return std::nullopt;
}

std::string probe_greeting(std::string_view token) {
  return fmt::format("hvdrun-probe 1 {}\n", token);
}

ProbeListener::ProbeListener(PortRange range, const std::string& token)
    : greeting_(probe_greeting(token)) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    max_connections_ = std::clamp<size_t>(limit.rlim_cur / 4, 16, kMaxConnections);
  }
  BindOutcome outcome;
  // Every address: IPv6 dual-stack (IPv4 probes arrive as v4-mapped addresses), or IPv4 alone
  // where the host has no IPv6.
  for (const char* any : {"::", "0.0.0.0"}) {
    const ListenSpec spec{.address = any, .dual_stack = true, .nonblocking = true};
    outcome = bind_first_free(range, [&](int port) { return listen_tcp(spec, port, listen_); });
    if (outcome.bound()) {
      port_ = outcome.port;
      return;
    }
  }
  const BindFailure f =
      bind_failure(range, outcome, "--port-range ", "hvdrun's network probes", "this host");
  // The launcher's own part (a port for hvdrun), not the job's: exit 71 as for the rendezvous
  // server's port (docs/exit-codes.md).
  throw LauncherError(f.message, f.hint);
}

void ProbeListener::add_pollfds(std::vector<pollfd>& fds) const {
  fds.push_back({listen_.get(), POLLIN, 0});
  for (const UniqueFd& c : conns_) fds.push_back({c.get(), POLLIN, 0});
}

void ProbeListener::shed(size_t how_many) {
  while (how_many-- > 0 && !conns_.empty()) conns_.pop_front();
}

void ProbeListener::serve() {
  while (true) {
    UniqueFd conn(::accept4(listen_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (!SpareDescriptor::out_of_descriptors(errno)) break;  // EAGAIN: nobody else waits
      // Out of descriptors: make room (the oldest half of ours), and if that was not enough,
      // accept the pending one on the spare descriptor and drop it, so the listener is not
      // readable for ever with nothing accepted (a busy loop).
      if (!conns_.empty()) {
        shed(std::max<size_t>(1, conns_.size() / 2));
        continue;
      }
      spare_.drop_pending(listen_.get());
      break;
    }
    if (conns_.size() >= max_connections_) shed(1);
    // A few dozen bytes always fit in a fresh socket's buffer.
    if (::send(conn.get(), greeting_.data(), greeting_.size(), MSG_NOSIGNAL) ==
        static_cast<ssize_t>(greeting_.size())) {
      conns_.push_back(std::move(conn));
    }
  }
  // A prober only reads and closes: a connection that sent anything is not one.
  std::erase_if(conns_, [](const UniqueFd& c) {
    std::array<char, 64> buf{};
    const ssize_t n = ::recv(c.get(), buf.data(), buf.size(), MSG_DONTWAIT);
    return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  });
}

std::vector<ProbeOutcome> run_probes(const std::vector<ProbeTarget>& targets,
                                     std::chrono::milliseconds timeout, ProbeListener* listener) {
  std::vector<Probe> probes(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    probes[i].target = &targets[i];
    probes[i].outcome.id = targets[i].id;
    start_connect(probes[i]);
  }
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::vector<pollfd> fds;
    std::vector<Probe*> owners;
    for (Probe& p : probes) {
      if (p.phase == Probe::Phase::kDone) continue;
      fds.push_back({p.fd.get(),
                     static_cast<short>(p.phase == Probe::Phase::kConnecting ? POLLOUT : POLLIN),
                     0});
      owners.push_back(&p);
    }
    if (owners.empty()) break;
    const size_t own = fds.size();
    if (listener != nullptr) listener->add_pollfds(fds);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    if (::poll(fds.data(), fds.size(), static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < own; ++i) {
      if (fds[i].revents == 0) continue;
      if (owners[i]->phase == Probe::Phase::kConnecting) {
        on_connect_ready(*owners[i]);
      } else {
        on_readable(*owners[i]);
      }
    }
    if (listener != nullptr && std::any_of(fds.begin() + static_cast<long>(own), fds.end(),
                                           [](const pollfd& f) { return f.revents != 0; })) {
      listener->serve();
    }
  }
  const double seconds = std::chrono::duration<double>(timeout).count();
  std::vector<ProbeOutcome> out;
  for (Probe& p : probes) {
    if (p.phase == Probe::Phase::kConnecting) {
      p.finish(ProbeStatus::kTimeout, fmt::format("no answer within {:.1f} s", seconds));
    } else if (p.phase == Probe::Phase::kReading) {
      p.finish(ProbeStatus::kWrongPeer,
               fmt::format("connected, but no hvdrun agent greeted within {:.1f} s", seconds));
    }
    out.push_back(p.outcome);
  }
  return out;
}

std::string encode_probe_listen(const ProbeListenRequest& request) {
  return nlohmann::json{
      {"port_low", request.range.low}, {"port_high", request.range.high}, {"token", request.token}}
      .dump();
}

ProbeListenRequest decode_probe_listen(std::string_view payload) {
  const auto json = parse_object(payload, "probe-listen");
  ProbeListenRequest r;
  r.range.low = field<int>(json, "port_low", "probe-listen");
  r.range.high = field<int>(json, "port_high", "probe-listen");
  r.token = field<std::string>(json, "token", "probe-listen");
  if (r.range.low < 0 || r.range.high > 65535 || r.range.low > r.range.high ||
      (r.range.low == 0) != (r.range.high == 0)) {
    throw Error(fmt::format("protocol error: bad port range {}-{}", r.range.low, r.range.high));
  }
  return r;
}

std::string encode_listening(int port) { return nlohmann::json{{"port", port}}.dump(); }

int decode_listening(std::string_view payload) {
  const int port = field<int>(parse_object(payload, "listening"), "port", "listening");
  if (port <= 0 || port > 65535) {
    throw Error(fmt::format("protocol error: the agent listens on port {}", port));
  }
  return port;
}

std::string encode_probe_request(const ProbeRequest& request) {
  nlohmann::json targets = nlohmann::json::array();
  for (const ProbeTarget& t : request.targets) {
    targets.push_back({{"id", t.id}, {"address", t.address}, {"port", t.port}, {"token", t.token}});
  }
  return nlohmann::json{{"targets", targets}, {"timeout_ms", request.timeout_ms}}.dump();
}

ProbeRequest decode_probe_request(std::string_view payload) {
  const auto json = parse_object(payload, "probe");
  ProbeRequest r;
  r.timeout_ms = field<int>(json, "timeout_ms", "probe");
  const auto targets = field<nlohmann::json>(json, "targets", "probe");
  if (!targets.is_array() || r.timeout_ms <= 0) {
    throw Error("protocol error: the probe payload needs a target list and a positive timeout");
  }
  for (const auto& t : targets) {
    ProbeTarget target;
    target.id = field<int>(t, "id", "probe target");
    target.address = field<std::string>(t, "address", "probe target");
    target.port = field<int>(t, "port", "probe target");
    target.token = field<std::string>(t, "token", "probe target");
    r.targets.push_back(std::move(target));
  }
  return r;
}

std::string encode_probe_results(const std::vector<ProbeOutcome>& outcomes) {
  nlohmann::json list = nlohmann::json::array();
  for (const ProbeOutcome& o : outcomes) {
    list.push_back({{"id", o.id},
                    {"status", probe_status_name(o.status)},
                    {"ms", o.ms},
                    {"detail", o.detail}});
  }
  return nlohmann::json{{"results", list}}.dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace);
}

std::vector<ProbeOutcome> decode_probe_results(std::string_view payload) {
  const auto json = parse_object(payload, "probe-result");
  const auto list = field<nlohmann::json>(json, "results", "probe-result");
  if (!list.is_array()) throw Error("protocol error: the probe results are not a list");
  std::vector<ProbeOutcome> out;
  for (const auto& o : list) {
    ProbeOutcome outcome;
    outcome.id = field<int>(o, "id", "probe result");
    const auto status = parse_probe_status(field<std::string>(o, "status", "probe result"));
    if (!status) throw Error("protocol error: a probe result has an unknown status");
    outcome.status = *status;
    outcome.ms = field<double>(o, "ms", "probe result");
    outcome.detail = field<std::string>(o, "detail", "probe result");
    out.push_back(std::move(outcome));
  }
  return out;
}

}  // namespace hvd::agent
