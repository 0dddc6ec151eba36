// The exact OpenSSH command line that reproduces what the check saw for a host, so users can
// run it themselves (with -F / UserKnownHostsFile where hvdrun was given them).
#pragma once

#include <string>

#include "ssh/config.h"
#include "ssh/options.h"

namespace hvd::ssh {

std::string reproduce_command(const ResolvedTarget& target, const SshOptions& options);

}  // namespace hvd::ssh
