// The SSH check of one host: config -> resolve -> connect -> banner -> key exchange -> host key
// -> authentication -> a probe script on the host. Each stage is timed; the first that fails
// decides the ProbeCode (never a library's message text). docs/check-ssh.md is the contract.
//
// Threading: probe_host() runs on its own thread with its own libssh session; `slots` bounds
// how many hosts are in the CPU-heavy stages (key exchange, authentication) at once.
#pragma once

#include "ssh/connection.h"
#include "ssh/options.h"
#include "ssh/probe_result.h"
#include "ssh/socket_probe.h"

namespace hvd::ssh {

// Never throws for what the host does; throws hvd::UsageError for bad local input (an unreadable
// --ssh-config file).
ProbeResult probe_host(const SshTarget& target, const SshOptions& options, CpuSlots& slots,
                       ProbeControl& control);

// The POSIX sh script the probe runs on a host (exposed for tests), and its parser.
std::string probe_script(const std::string& agent_path);
std::optional<RemoteInfo> parse_probe_output(const std::string& out, const std::string& agent_path);

}  // namespace hvd::ssh
