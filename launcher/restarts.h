// Restarts (`--max-restarts N`): when a launch fails in a way a new launch could fix, hvdrun
// starts the same plan again (a new job id, so a new rendezvous scope and token), up to N times,
// as torchrun restarts its worker group. This file is the policy, pure: which failures are worth
// another attempt, how long to wait before it, and what the user reads between attempts. The
// loop that runs the attempts is the CLI's (it builds each attempt's plan).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "launcher/launcher.h"
#include "launcher/plan.h"

namespace hvd::launcher {

struct RestartPolicy {
  int max_restarts = 0;           // 0: one attempt, as without restarts
  double backoff_seconds = 1.0;   // attempt k (k >= 2) waits backoff * 2^(k-2), at most kMaxBackoff
  bool enabled() const { return max_restarts > 0; }
};

inline constexpr double kMaxBackoffSeconds = 30.0;

// Why this result is not worth another attempt (it would fail the same way), or nullopt when it
// is: a rank that failed, a lost host, a failed network check, an SSH connection refused or timed
// out. Not: success, an interrupt (Ctrl-C), a usage error, an SSH authentication or host-key
// failure, a start-up timeout, a missing program or agent, the launcher's own failure.
std::optional<std::string> why_no_restart(const LaunchResult& result);

// The wait before attempt `attempt` (2 for the first restart).
std::chrono::milliseconds backoff_before(const RestartPolicy& policy, int attempt);

// What failed in `result`, in a few words, for the banner: "rank 3 on h2 was killed by signal 9
// (SIGKILL)", "the host h2 was lost", "the network check failed".
std::string failure_summary(const Plan& plan, const LaunchResult& result);

// "attempt 2 of 4 after rank 3 on h2 exited with code 1; waiting 1 s".
std::string attempt_banner(int attempt, const RestartPolicy& policy, const std::string& summary,
                           std::chrono::milliseconds wait);

}  // namespace hvd::launcher
