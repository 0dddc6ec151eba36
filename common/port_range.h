// TCP port ranges and the one policy for listening inside one.
//
// `hvdrun --port-range LOW-HIGH` keeps every port hvdrun opens inside a range a firewall lets
// through: the rendezvous server, the agents' probe listeners (rank 0's host's becomes
// MASTER_PORT) and libhvd's control plane (HVD_PORT_RANGE). All three pick their port with
// bind_first_free() and word a failure with bind_failure(), so they agree on what a range is, on
// which port comes first, and on what the user reads when the range is used up.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace hvd {

// An inclusive TCP port range. The default, {0, 0}, means "any free port".
struct PortRange {
  int low = 0;
  int high = 0;

  bool any() const { return low == 0 && high == 0; }
  std::string text() const;  // "LOW-HIGH"
  bool operator==(const PortRange&) const = default;
};

// {LOW, HIGH} for "LOW-HIGH" with 1 <= LOW <= HIGH <= 65535; nullopt for anything else.
std::optional<PortRange> parse_port_range(std::string_view text);

// One attempt to bind a port: the port actually bound (asking for port 0 lets the kernel pick),
// or the errno that stopped it.
struct BindAttempt {
  int port = 0;
  int error = 0;
};
using BindFn = std::function<BindAttempt(int port)>;

struct BindOutcome {
  int port = 0;   // > 0 once bound
  int error = 0;  // the last errno when nothing was bound
  bool bound() const { return port > 0; }
};

// Calls `try_bind` for each port of `range` in order (once with port 0 when range.any()),
// skipping `avoid` (a port promised to someone else, e.g. MASTER_PORT). EADDRINUSE moves on to
// the next port; any other error stops. The callback binds whatever socket it owns (an HTTP
// library binds its own), so this is the policy, not the socket code.
BindOutcome bind_first_free(const PortRange& range, const BindFn& try_bind, int avoid = 0);

// What to tell the user when bind_first_free() bound nothing, the same words for every
// listener: "every port of --port-range 40000-40009 is in use on 10.0.0.1 (the rendezvous
// server)", or "the rendezvous server cannot listen on 10.0.0.1: <errno text>", with a hint
// (widen the range; ports below 1024 need root). `label` says where the range came from
// ("--port-range " or "HVD_PORT_RANGE="), `what` names the listener, `address` where it listens.
struct BindFailure {
  std::string message;
  std::string hint;
};
BindFailure bind_failure(const PortRange& range, const BindOutcome& outcome,
                         std::string_view label, std::string_view what, std::string_view address);

}  // namespace hvd
