// The SSH check of one host: config -> resolve -> connect -> banner -> key exchange -> host key
// -> authentication -> a small script on the host that reports its facts (the stage called
// "probe" in the JSON). Each stage is timed; the first that fails
// decides the CheckCode (never a library's message text). docs/check-ssh.md is the contract.
//
// Threading: check_host() runs on its own thread with its own libssh session; `slots` bounds
// how many hosts are in the CPU-heavy stages (key exchange, authentication) at once.
#pragma once

#include "ssh/connection.h"
#include "ssh/host_check.h"
#include "ssh/options.h"
#include "ssh/ssh_socket.h"

namespace hvd::ssh {

// Never throws for what the host does; throws hvd::UsageError for bad local input (an unreadable
// --ssh-config file).
HostCheck check_host(const SshTarget& target, const SshOptions& options, CpuSlots& slots,
                     CheckControl& control);

// The POSIX sh script the check runs on a host (exposed for tests), and its parser.
std::string host_facts_script(const std::string& agent_path);
std::optional<RemoteInfo> parse_host_facts(const std::string& out, const std::string& agent_path);
// What came on stdout before the script's own first line (a login script's text), without
// trailing newlines; empty when nothing did.
std::string text_before_facts(const std::string& out);

}  // namespace hvd::ssh
