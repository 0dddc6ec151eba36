// Checks many hosts at once: one thread and one session per host, a bound on the CPU-heavy
// stages, and a watchdog that ends the check about one --ssh-timeout (plus --wait-for-hosts)
// after it started, however many hosts hang (getaddrinfo and some libssh calls block; see
// docs/check-ssh.md).
#pragma once

#include <vector>

#include "ssh/host_check.h"
#include "ssh/options.h"

namespace hvd::ssh {

// One result per target, in the targets' order. Throws hvd::UsageError for bad local input.
std::vector<HostCheck> check_hosts(const std::vector<SshTarget>& targets,
                                   const SshOptions& options);

}  // namespace hvd::ssh
