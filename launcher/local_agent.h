// A host agent started as a local child process (`hvdrun --agent`) with pipes for its stdin,
// stdout and stderr: the same protocol an agent speaks over an SSH channel.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/unique_fd.h"

namespace hvd::launcher {

struct AgentProcess {
  pid_t pid = -1;
  UniqueFd to_agent;    // its stdin
  UniqueFd from_agent;  // its stdout: frames
  UniqueFd agent_log;   // its stderr: diagnostics
};

// Starts `hvdrun_path --agent` with a login-like environment (HOME, USER, LOGNAME, SHELL, LANG,
// LC_*, TZ, TMPDIR from ours), as sshd would give a remote agent: the ranks' other variables
// come only from the plan. Throws hvd::Error if it cannot be started.
AgentProcess start_local_agent(const std::string& hvdrun_path);

}  // namespace hvd::launcher
