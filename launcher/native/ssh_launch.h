// Agents over SSH (--launcher ssh, the default outside Slurm): one libssh session per remote
// host, set up in parallel with the stages and codes of --check-ssh (remote_start.h), the agent
// started on an exec channel through the user's login shell; a host that is this machine gets
// the same agent as a local child, without SSH.
#pragma once

#include <memory>

#include "launcher/native/agent_launch.h"

namespace hvd::launcher {

std::unique_ptr<AgentLaunch> make_ssh_launch(const LaunchOptions& options);

}  // namespace hvd::launcher
