// hvdrun's TCP listeners, one way: the launcher's (the rendezvous server, the srun agents'
// connections back), the agents' network-probe listeners and libhvd's control plane (rank 0).
// Each socket is close-on-exec and has SO_REUSEADDR (a port whose earlier connections wait in
// TIME_WAIT can be listened on again; Linux still refuses a second listener on it), and takes the
// first free port of --port-range by the one bind policy (common/port_range.h), with the same
// words when the range is used up.
#pragma once

#include <sys/socket.h>

#include <string>
#include <string_view>
#include <utility>

#include "common/port_range.h"
#include "common/unique_fd.h"

namespace hvd {

struct ListenSpec {
  // Numeric, or a name resolved once; "0.0.0.0": every IPv4 address; "::" every address.
  std::string address;
  bool dual_stack = false;  // with "::": IPv4 connections too, as v4-mapped addresses
  int backlog = SOMAXCONN;
  bool nonblocking = false;
};

// One listening socket at `port` (0: any); the port bound, or the errno of what failed.
BindAttempt listen_tcp(const ListenSpec& spec, int port, UniqueFd& out);

// Listens on `address` at the first free port of `range` (any port without one), with a backlog
// of 1024 (many ranks connect at once). `what` names the listener in the error. Returns the
// socket (blocking) and its port. Throws LauncherError.
std::pair<UniqueFd, int> listen_in_range(const std::string& address, const PortRange& range,
                                         std::string_view what);

}  // namespace hvd
