// Restarts (`--max-restarts N`): when a launch fails in a way a new launch could fix, hvdrun
// starts the same plan again (a new job id, so a new rendezvous scope and token), up to N times,
// as torchrun restarts its worker group. This file is the policy, pure: which failures are worth
// another attempt, how long to wait before it, and what the user reads between attempts. The
// loop that runs the attempts is the run session's (session.h; it makes each attempt's plan).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/core/launcher.h"
#include "launcher/plan/plan.h"

namespace hvd::launcher {

struct RestartPolicy {
  int max_restarts = 0;          // 0: one attempt, as without restarts
  double backoff_seconds = 1.0;  // attempt k (k >= 2) waits backoff * 2^(k-2), at most kMaxBackoff
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

// The hosts an attempt's failure counts against: a host lost while the job ran, an SSH connection
// to it refused or timed out, a rank on it killed by SIGBUS (hardware trouble). A rank's own
// failure (a non-zero exit, a crash) is the program's, not the host's.
std::vector<std::string> failing_hosts(const Plan& plan, const LaunchResult& result);

// Host health across attempts, as Horovod's elastic driver keeps it: after `failure_limit`
// failures a host is blacklisted for a cooldown; the k-th time it is, for
// min(min * 2^(k-1), max) seconds plus up to 10% (jitter, given by the caller in [0, 1)). When
// the cooldown is over the host is used again, with its failure count back at zero.
class HostHealth {
 public:
  using Clock = std::chrono::steady_clock;
  HostHealth(int failure_limit, double cooldown_min, double cooldown_max)
      : limit_(failure_limit), min_(cooldown_min), max_(cooldown_max) {}

  // Counts one failure against `host`; the cooldown when it is blacklisted by it.
  std::optional<std::chrono::milliseconds> record_failure(const std::string& host,
                                                          Clock::time_point now, double jitter);
  bool blacklisted(const std::string& host, Clock::time_point now) const;
  // When the earliest of the blacklisted `hosts` is back (nullopt: none of them is out).
  std::optional<Clock::time_point> first_back(const std::vector<std::string>& hosts,
                                              Clock::time_point now) const;
  // When `host` is back (nullopt: not blacklisted now), and how often it was blacklisted.
  std::optional<Clock::time_point> back_at(const std::string& host, Clock::time_point now) const;
  int times_blacklisted(const std::string& host) const;
  // Every host (or key) with a failure recorded, in no particular order.
  std::vector<std::string> keys() const;
  // Drops what is recorded of `host` (as if it never failed).
  void forget(const std::string& host) { hosts_.erase(host); }

 private:
  struct State {
    int failures = 0;
    int times_blacklisted = 0;
    std::optional<Clock::time_point> until;
  };
  int limit_;
  double min_, max_;
  std::map<std::string, State> hosts_;
};

}  // namespace hvd::launcher
