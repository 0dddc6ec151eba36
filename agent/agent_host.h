// What the host agent (agent/agent.cpp) reads of its host: its hello to the launcher, and the
// processes it must account for while a job stops.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace hvd::agent {

// The agent's hello (agent/protocol.h, kHello): protocol and build versions, host name, boot
// id, pid, $SSH_CONNECTION and the host's network interfaces, as JSON.
std::string hello_payload();

// Whether the child `pid` has exited, without reaping it (WNOWAIT).
bool has_exited(pid_t pid);

// Children of this process that are not ranks (`rank_pids`, the ranks still running): ranks'
// descendants re-parented to us (the agent is a subreaper) after their parent died. Zombies
// are left out.
std::vector<pid_t> stray_children(const std::vector<pid_t>& rank_pids);

}  // namespace hvd::agent
