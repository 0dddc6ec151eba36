// Host-to-host reachability probes, run by the agents before any rank starts (docs/network.md).
//
// Each agent listens on one TCP port (every address of its host, inside --port-range when given)
// and greets whoever connects with a line carrying a token the launcher gave it. The launcher
// then tells each agent which addresses to connect to; a probe is `ok` only when the expected
// agent greets back, so an address that reaches another machine (NAT, a docker0 address that
// exists on every host) is caught too, not only firewalls and missing routes.
#pragma once

#include <poll.h>

#include <chrono>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/port_range.h"
#include "common/spare_fd.h"
#include "common/unique_fd.h"

namespace hvd::agent {

enum class ProbeStatus {
  kOk,         // connected, and the expected agent greeted
  kRefused,    // ECONNREFUSED: nothing listens there, or a firewall rejects
  kTimeout,    // no answer in time: a firewall drops the packets, or the host is down
  kNoRoute,    // EHOSTUNREACH / ENETUNREACH: the address is on a network this host is not on
  kReset,      // the connection was reset before the greeting
  kWrongPeer,  // connected, but not to the agent expected there
  kError,      // anything else (the detail says what)
};

std::string_view probe_status_name(ProbeStatus status);
std::optional<ProbeStatus> parse_probe_status(std::string_view name);

struct ProbeTarget {
  int id = 0;  // the launcher's number for this probe
  std::string address;
  int port = 0;
  std::string token;  // what the agent there greets with; empty: connecting is enough
};

struct ProbeOutcome {
  int id = 0;
  ProbeStatus status = ProbeStatus::kError;
  double ms = 0;       // from the start of the connect to the greeting, or to the failure
  std::string detail;  // the errno text, or what answered instead of the agent
};

// The agent's side: a listening socket that greets every connection, and closes it once the
// prober has closed its end (the prober closes first, so no TIME_WAIT is left on this port,
// which hvdrun hands to the job as MASTER_PORT on rank 0's host).
//
// Hostile traffic: the port is open to anyone who can reach the host. A prober never sends a
// byte, so a connection that sends anything is closed; at most max_connections() are kept (a
// quarter of the descriptor limit, at most 1024), the oldest dropped first (a real prober has its
// greeting within milliseconds of the connect); when the process is out of descriptors, old
// connections are dropped and a spare descriptor lets the pending one be accepted and closed, so
// a readable listener never spins.
class ProbeListener {
 public:
  // Binds every address (IPv6 dual-stack where the host has IPv6, else IPv4) on the first free
  // port of `range` (any free port when range.any()). Throws hvd::Error naming the range.
  ProbeListener(PortRange range, const std::string& token);
  int port() const { return port_; }
  // The descriptors to poll for POLLIN; call serve() when any is readable.
  void add_pollfds(std::vector<pollfd>& fds) const;
  // Accepts and greets pending connections; closes those whose peer closed. Never blocks.
  void serve();
  size_t connections() const { return conns_.size(); }
  size_t max_connections() const { return max_connections_; }

 private:
  void shed(size_t how_many);
  UniqueFd listen_;
  SpareDescriptor spare_;       // given up to accept (and drop) when out of descriptors
  std::deque<UniqueFd> conns_;  // oldest first
  size_t max_connections_ = 1024;
  std::string greeting_;
  int port_ = 0;
};

// The greeting line an agent with `token` sends.
std::string probe_greeting(std::string_view token);

// Connects to every target at once; each must connect and greet within `timeout`. While it
// waits, `listener` (may be null) keeps greeting the probes of other hosts.
std::vector<ProbeOutcome> run_probes(const std::vector<ProbeTarget>& targets,
                                     std::chrono::milliseconds timeout, ProbeListener* listener);

// Frame payloads (JSON). The decoders throw hvd::Error on a malformed payload.
struct ProbeListenRequest {
  PortRange range;
  std::string token;
};
struct ProbeRequest {
  std::vector<ProbeTarget> targets;
  int timeout_ms = 0;
};
std::string encode_probe_listen(const ProbeListenRequest& request);
ProbeListenRequest decode_probe_listen(std::string_view payload);
std::string encode_listening(int port);
int decode_listening(std::string_view payload);
std::string encode_probe_request(const ProbeRequest& request);
ProbeRequest decode_probe_request(std::string_view payload);
std::string encode_probe_results(const std::vector<ProbeOutcome>& outcomes);
std::vector<ProbeOutcome> decode_probe_results(std::string_view payload);

}  // namespace hvd::agent
