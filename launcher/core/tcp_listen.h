// The launcher's own listeners (the rendezvous server, the srun agents' connections back): a TCP
// socket on one address at the first free port of --port-range (any port without one), by the
// one bind policy (common/port_range.h), with the same words when the range is used up.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "common/port_range.h"
#include "common/unique_fd.h"

namespace hvd::launcher {

// Listens on `address` (numeric, or a name resolved once; "0.0.0.0" for every IPv4 address) with
// a backlog of 1024 (many ranks connect at once). `what` names the listener in the error.
// Returns the socket (close-on-exec, blocking) and its port. Throws LauncherError.
std::pair<UniqueFd, int> listen_in_range(const std::string& address, const PortRange& range,
                                         std::string_view what);

}  // namespace hvd::launcher
