// The host agent: `hvdrun --agent`, started once per host (a local child process, or over one
// SSH exec channel), speaking agent/protocol.h on stdin/stdout.
//
// It says hello, reads one job spec, starts each local rank (common/process.h), streams
// output and exit events back, and stops every rank when told to or when its stdin closes (the
// launcher is gone: a dead-man switch): SIGTERM, then SIGKILL after the grace period. It is a
// child subreaper, so ranks' descendants that escaped with setsid are found and stopped too.
// Nothing of the job outlives the agent's exit; nothing outlives its death either: every way an
// agent starts runs it under its guard (agent/agent_guard.h), its parent process.
#pragma once

namespace hvd::agent {

// Runs the agent on the given descriptors; returns the process exit code (0 when the job ran,
// whatever the ranks' codes; 2 when the spec was bad or the ranks could not be started).
int run_agent(int in_fd, int out_fd);

struct SealKeys;
// The same on one connection sealed both ways (agent/sealed_link.h: an agent that connected
// back, after the exchange). A record from the launcher that fails its tag is refused: the agent
// says so in a kError frame (its own direction is still sound), stops its ranks as when its
// input closes, and reads nothing more.
int run_agent_sealed(int fd, const SealKeys& keys);

}  // namespace hvd::agent
