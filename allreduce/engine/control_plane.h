// The engine's control plane: TCP connections between every rank and the coordinator (rank 0),
// carrying length-prefixed messages (messages.h). Our own sockets, not the engine's, so that the
// background thread can wait in poll() on them and on local submissions at once: an idle rank
// sleeps, and a rank waiting for a late peer never hits a collective's timeout.
//
// connect() is collective: rank 0 listens (on HVD_ADVERTISE_ADDR when hvdrun gave one, else on
// every interface), broadcasts its addresses, port and a random token over the backend, and
// accepts one authenticated connection per rank; the others try the addresses in order.
#pragma once

#include <poll.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "allreduce/backends/backend.h"
#include "common/port_range.h"
#include "common/unique_fd.h"

namespace hvd::runtime {

// This host's first IPv4 address inside `networks` ("10.1.0.0/16,eth1": CIDRs or interface
// names, as Open MPI's btl_tcp_if_include takes them); empty when none matches or none is given.
std::string address_in_networks(const std::string& networks);

class ControlPlane {
 public:
  // Throws StatusError (HVD_ERR_TIMEOUT naming the ranks that never connected, ...).
  // Rank 0 listens on a free port (inside `port_range` when given, never on `avoid_port`).
  static ControlPlane connect(Backend& backend, int rank, int size, const std::string& bind_address,
                              std::chrono::milliseconds timeout, const PortRange& port_range = {},
                              int avoid_port = 0);
  // The same, `count` planes at once: connections of their own between the same ranks, through
  // one listener on rank 0 (one port, whatever the count).
  static std::vector<ControlPlane> connect_planes(int count, Backend& backend, int rank, int size,
                                                  const std::string& bind_address,
                                                  std::chrono::milliseconds timeout,
                                                  const PortRange& port_range = {},
                                                  int avoid_port = 0);
  // Connections already made, by rank (an invalid fd for this rank and for ranks it has no
  // connection to): for the engine's unit tests, which connect two engines with socketpairs.
  static ControlPlane adopt(int rank, int size, std::vector<UniqueFd> peers);
  ControlPlane() = default;
  ControlPlane(ControlPlane&&) = default;
  ControlPlane& operator=(ControlPlane&&) = default;

  // Rank 0: peer(r) is the connection to rank r (peer(0) is -1). Others: peer(0) only.
  int peer(int rank) const;
  // Appends a POLLIN entry per open connection to `fds` and its rank to `ranks` (for poll()).
  void watch(std::vector<pollfd>& fds, std::vector<int>& ranks) const;
  int size() const { return size_; }
  int rank() const { return rank_; }

  // Sends one message; false if the peer is gone.
  bool send(int rank, const std::string& payload);

  // Reads what is available from `rank`'s connection (after poll() said readable) and returns
  // the complete messages. nullopt at EOF or on an error: the peer is gone.
  std::optional<std::vector<std::string>> receive(int rank);

  void close(int rank);

 private:
  static void accept_ranks(int listener, const std::string& token, int size,
                           std::chrono::milliseconds timeout,
                           std::chrono::steady_clock::time_point deadline,
                           std::vector<ControlPlane>& planes);
  struct Peer {
    UniqueFd fd;
    std::string inbox;  // bytes of a message not complete yet
  };
  int rank_ = 0;
  int size_ = 1;
  std::vector<Peer> peers_;  // by rank
};

}  // namespace hvd::runtime
