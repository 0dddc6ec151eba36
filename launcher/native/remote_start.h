// The SSH half of a launch: every remote host's session set up in parallel (the same stages and
// codes as --check-ssh: one session per host serves as both check and transport), then the agent
// started on it. If any host fails a stage, none is started and the failures are returned.
#pragma once

#include <optional>
#include <vector>

#include "launcher/plan/plan.h"
#include "ssh/host_check.h"
#include "ssh/options.h"
#include "ssh/remote_agent.h"

namespace hvd::launcher {

struct RemoteStart {
  std::vector<std::optional<ssh::RemoteAgent>> agents;  // by host index; empty for local hosts
  std::vector<ssh::HostCheck> failures;                 // in host order
  std::vector<std::string> addresses;  // by host: the address each session connected to
};

RemoteStart start_remote_agents(const Plan& plan, const ssh::SshOptions& options);

// What sshd runs on each remote host, through the user's shell: `exec AGENT_PATH --agent`
// (`exec` leaves no shell in between).
std::vector<std::string> remote_agent_argv(const std::string& agent_path);

}  // namespace hvd::launcher
