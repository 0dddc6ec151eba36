#include "launcher/core/restarts.h"

#include <fmt/format.h>

#include <signal.h>

#include <algorithm>
#include <cmath>

#include "launcher/core/launch_report.h"

namespace hvd::launcher {

std::optional<std::string> why_no_restart(const LaunchResult& result) {
  if (result.exit_code == 0) return "the job succeeded";
  if (result.interrupted_by != 0) return "hvdrun was interrupted";
  if (!result.ssh_failures.empty()) {
    for (const ssh::HostCheck& h : result.ssh_failures) {
      if (h.code != ssh::CheckCode::kConnectionRefused && h.code != ssh::CheckCode::kTimeout &&
          h.code != ssh::CheckCode::kTooManyConnections) {
        return fmt::format(
            "the SSH check of {} failed with {}, which a new attempt would meet "
            "again",
            h.host, ssh::to_string(h.code));
      }
    }
    return std::nullopt;  // refused or timed out: a host that may be back
  }
  if (result.first_failure || result.unnamed_rank_failed) return std::nullopt;  // a rank failed
  if (!result.error) return std::nullopt;
  switch (result.error->kind) {
    case ErrorKind::kHostLost:
    case ErrorKind::kNetCheck:
    case ErrorKind::kStalled:  // as a failed rank: a hung file system may not hang again
      return std::nullopt;
    case ErrorKind::kUsage:
      return "a usage error does not go away";
    case ErrorKind::kTimeout:
      return "a start-up timeout would happen again";
    case ErrorKind::kRemote:
      return "the job cannot start on a host (a missing program, directory or agent)";
    case ErrorKind::kSsh:
      return "an SSH failure that a new attempt would meet again";
    case ErrorKind::kLauncher:
      return "the launcher's own part failed";
    case ErrorKind::kJobTimeout:
      return "the job ran past --timeout, which a new attempt would have no more of";
    case ErrorKind::kInternal:
    case ErrorKind::kCount:
      break;
  }
  return "an internal error";
}

std::chrono::milliseconds backoff_before(const RestartPolicy& policy, int attempt) {
  if (policy.backoff_seconds <= 0 || attempt < 2) return std::chrono::milliseconds(0);
  const double seconds =
      std::min(kMaxBackoffSeconds, policy.backoff_seconds * std::pow(2.0, attempt - 2));
  return seconds_to_ms(seconds);
}

std::string failure_summary(const Plan& plan, const LaunchResult& result) {
  if (result.first_failure) {
    const RankOutcome& r = result.ranks[static_cast<size_t>(*result.first_failure)];
    return fmt::format("rank {} on {} {}", r.rank,
                       plan.hosts[static_cast<size_t>(r.host_index)].spec.host, describe_exit(r));
  }
  if (!result.ssh_failures.empty()) {
    return fmt::format("the SSH check of {} failed ({})", result.ssh_failures.front().host,
                       ssh::to_string(result.ssh_failures.front().code));
  }
  if (result.error) return result.error->message;
  return fmt::format("exit {}", result.exit_code);
}

std::string attempt_banner(int attempt, const RestartPolicy& policy, const std::string& summary,
                           std::chrono::milliseconds wait) {
  std::string out =
      fmt::format("attempt {} of {} after {}", attempt, policy.max_restarts + 1, summary);
  if (wait.count() > 0) {
    out += fmt::format("; waiting {:g} s", std::chrono::duration<double>(wait).count());
  }
  return out;
}

std::vector<std::string> failing_hosts(const Plan& plan, const LaunchResult& result) {
  std::vector<std::string> out = result.lost_hosts;
  for (const ssh::HostCheck& h : result.ssh_failures) {
    if (h.code == ssh::CheckCode::kConnectionRefused || h.code == ssh::CheckCode::kTimeout) {
      out.push_back(h.host);
    }
  }
  if (result.first_failure) {
    const RankOutcome& r = result.ranks[static_cast<size_t>(*result.first_failure)];
    if (r.signaled && r.value == SIGBUS) {
      out.push_back(plan.hosts[static_cast<size_t>(r.host_index)].spec.host);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<std::chrono::milliseconds> HostHealth::record_failure(const std::string& host,
                                                                    Clock::time_point now,
                                                                    double jitter) {
  State& s = hosts_[host];
  if (s.until && *s.until <= now) s = State{0, s.times_blacklisted, std::nullopt};  // it was back
  if (++s.failures < limit_) return std::nullopt;
  ++s.times_blacklisted;
  s.failures = 0;
  const double base = std::min(max_, min_ * std::pow(2.0, s.times_blacklisted - 1));
  const auto cooldown = std::chrono::milliseconds(
      static_cast<long>(base * (1.0 + 0.1 * std::clamp(jitter, 0.0, 1.0)) * 1000));
  s.until = now + cooldown;
  return cooldown;
}

bool HostHealth::blacklisted(const std::string& host, Clock::time_point now) const {
  const auto it = hosts_.find(host);
  return it != hosts_.end() && it->second.until && *it->second.until > now;
}

std::optional<HostHealth::Clock::time_point> HostHealth::first_back(
    const std::vector<std::string>& hosts, Clock::time_point now) const {
  std::optional<Clock::time_point> first;
  for (const std::string& h : hosts) {
    if (!blacklisted(h, now)) continue;
    const Clock::time_point t = *hosts_.at(h).until;
    if (!first || t < *first) first = t;
  }
  return first;
}

std::optional<HostHealth::Clock::time_point> HostHealth::back_at(const std::string& host,
                                                                 Clock::time_point now) const {
  if (!blacklisted(host, now)) return std::nullopt;
  return hosts_.at(host).until;
}

int HostHealth::times_blacklisted(const std::string& host) const {
  const auto it = hosts_.find(host);
  return it == hosts_.end() ? 0 : it->second.times_blacklisted;
}

std::vector<std::string> HostHealth::keys() const {
  std::vector<std::string> out;
  out.reserve(hosts_.size());
  for (const auto& [key, state] : hosts_) out.push_back(key);
  return out;
}

}  // namespace hvd::launcher
