// Starting a helper process of the launcher (the local agent, mpirun): PATH lookup, exactly the
// given environment, its own process group (a Ctrl-C in the terminal reaches hvdrun only, which
// stops the job in order), signals unblocked and SIGPIPE/SIGINT at their defaults (the launcher
// blocks and ignores them for its own event loop), stdout and stderr to pipes.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace hvd::launcher {

struct ChildProcess {
  pid_t pid = -1;
  UniqueFd stdin_w;  // valid only when asked for a stdin pipe (else stdin is /dev/null)
  UniqueFd stdout_r;
  UniqueFd stderr_r;
  int error = 0;  // errno-style: non-zero means nothing was started
};

// `env` holds NAME=value strings. Never throws. `parent_death_signal` (e.g. SIGTERM): the child
// gets it when the launcher dies, however it dies (SIGKILL included), so that nothing it started
// outlives it; that needs fork + execve instead of posix_spawn (PR_SET_PDEATHSIG follows the
// spawning thread: call it from a thread that lives as long as the child should).
ChildProcess spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         bool stdin_pipe, int parent_death_signal = 0);

}  // namespace hvd::launcher
