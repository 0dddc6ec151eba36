// The agent's guard: nothing a rank started outlives its agent, however the agent ends.
//
// The agent stops its ranks and their descendants when it ends in order, and its ranks die
// with it (PR_SET_PDEATHSIG) when it is killed. A rank's own children do not: killed with
// SIGKILL, or by the OOM killer, the agent cannot stop them, and they would re-parent to PID 1
// (a DataLoader's workers, a shell's background jobs, a double-forked daemon). So every way an
// agent starts (`hvdrun --agent`, `hvdrun --agent-connect`, `hvdrun-agent ...`) first forks:
// the child runs the agent; the parent stays behind as the guard, a child subreaper named
// "hvdrun-guard" (/proc/PID/comm), with /dev/null for its stdin, stdout and stderr and no other
// descriptor (the agent's protocol channel, an SSH session's pipes, is the child's alone). Once
// the agent has ended, everything left below the guard re-parents to it; the guard kills
// (SIGKILL, with their process groups) and reaps its children until none is left, then ends as
// the agent did: with its exit code, or killed by the same signal, so that the launcher (an SSH
// session's exit-signal, a local child's wait status) reads the agent's own ending.
//
// The guard forwards SIGTERM, SIGINT and SIGHUP to the agent (which stops its job on them) and
// ignores SIGPIPE. Killing the guard itself leaves the agent running; only the guard's cleanup
// is lost.
#pragma once

namespace hvd::agent {

// Runs `agent` in a child process under the guard (above); returns in the child only, with
// `agent`'s result. Where fork fails, runs `agent` in this process, unguarded.
int run_guarded(int (*agent)());

}  // namespace hvd::agent
