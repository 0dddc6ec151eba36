#include "cli/attempts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "common/signal_fd.h"
#include "contract/env_table.h"
#include "launcher/core/launch_report.h"
#include "launcher/core/ssh_check.h"
#include "launcher/registry.h"

namespace hvd::cli {
namespace {

// Waits `wait` unless SIGINT, SIGTERM or SIGHUP comes first; returns that signal, or 0.
int interruptible_wait(std::chrono::milliseconds wait) {
  SignalFd signals{SIGINT, SIGTERM, SIGHUP};
  const auto until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return 0;
    pollfd p{signals.fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) > 0) {
      if (const auto sig = signals.next()) return *sig;
    }
  }
}

// The hosts of `request` that are not blacklisted now, when they hold `np` ranks; else waits
// (interruptibly) for the first blacklisted one to come back and looks again. Fills `left_out`.
// Returns a signal that interrupted the wait, or 0.
int usable_hosts(const launcher::PlanRequest& request, const launcher::HostHealth& health, int np,
                 std::vector<launcher::HostSpec>& hosts, std::vector<std::string>& left_out) {
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    hosts.clear();
    left_out.clear();
    int slots = 0;
    for (const launcher::HostSpec& h : request.hosts) {
      if (health.blacklisted(h.host, now)) {
        left_out.push_back(h.host);
      } else {
        hosts.push_back(h);
        slots += h.slots;
      }
    }
    if (left_out.empty() || slots >= np) return 0;
    const auto back = *health.first_back(left_out, now);
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(back - now);
    spdlog::warn(
        "waiting {:.0f} s for a blacklisted host ({}) to come back: the others have {} "
        "slots for {} ranks",
        std::chrono::duration<double>(wait).count(), fmt::join(left_out, ", "), slots, np);
    if (const int sig = interruptible_wait(wait); sig != 0) return sig;
  }
}

}  // namespace

namespace {

// Elastic training starts without the hosts SSH could not reach when the others hold --min-np
// ranks (horovodrun's elastic driver starts with the hosts it can use): they are named, and
// the launch runs again on the rest. False when it cannot (then the failure is the result).
bool elastic_without_unreachable(const Options& o, const launcher::Plan& plan,
                                 const launcher::LaunchResult& result,
                                 launcher::PlanRequest& base) {
  if (result.ssh_failures.empty()) return false;
  std::vector<std::string> failed;
  for (const ssh::HostCheck& c : result.ssh_failures) failed.push_back(c.host);
  std::vector<launcher::HostSpec> kept;
  int slots = 0;
  for (const launcher::HostSpec& h : base.hosts) {
    if (std::find(failed.begin(), failed.end(), h.host) != failed.end()) continue;
    kept.push_back(h);
    slots += h.slots;
  }
  const int np = static_cast<int>(plan.ranks.size());
  const int min_np = o.min_np.value_or(np);
  if (kept.empty() || kept.size() == base.hosts.size() || slots < min_np) return false;
  fmt::print(stderr,
             "hvdrun: elastic: {} cannot be reached over SSH; the job starts without {} on {} "
             "slot{} (--min-np {})\n{}",
             fmt::join(failed, ", "), failed.size() == 1 ? "it" : "them", slots,
             slots == 1 ? "" : "s", min_np,
             launcher::format_check_table(launcher::CheckReport{result.ssh_failures}, false));
  base.hosts = std::move(kept);
  base.num_proc = std::min(np, slots);
  return true;
}

}  // namespace

// The waits are capped at kMaxBackoffSeconds: a larger --restart-backoff is the cap (and a
// warning, execute()), so the dry run shows the waits that will happen.
launcher::RestartPolicy restart_policy(const Options& o) {
  return {o.max_restarts, std::min(o.restart_backoff_s, launcher::kMaxBackoffSeconds)};
}

// Each attempt's plan: a new job id (a new rendezvous scope and token), and with restarts on
// torchrun's restart variables on every rank.
launcher::PlanRequest attempt_request(const launcher::PlanRequest& base,
                                      const launcher::RestartPolicy& policy, int attempt,
                                      const std::string& run_id, const AttemptContext& context) {
  launcher::PlanRequest r = base;
  if (!policy.enabled()) return r;
  if (attempt > 1) r.job_id = context.new_job_id();
  r.knobs.emplace_back(contract::kRestartCount.name, std::to_string(attempt - 1));
  r.knobs.emplace_back(contract::kMaxRestarts.name, std::to_string(policy.max_restarts));
  r.knobs.emplace_back(contract::kRunId.name, run_id);
  return r;
}

int run_attempts(const Options& o, const launcher::PlanRequest& request,
                 const AttemptContext& context) {
  const launcher::RestartPolicy policy = restart_policy(o);
  launcher::HostHealth health(o.host_failure_limit, o.blacklist_cooldown.at(0),
                              o.blacklist_cooldown.at(1));
  std::mt19937 jitter_source{std::random_device{}()};
  const std::string run_id = request.job_id;
  nlohmann::ordered_json attempts = nlohmann::ordered_json::array();
  int np = 0;                            // the job's size, fixed by the first attempt
  launcher::PlanRequest base = request;  // elastic: less the hosts that SSH could not reach
  for (int attempt = 1;; ++attempt) {
    launcher::PlanRequest r = attempt_request(base, policy, attempt, run_id, context);
    std::vector<std::string> left_out;
    if (attempt > 1) {
      r.num_proc = np;
      if (const int sig = usable_hosts(request, health, np, r.hosts, left_out); sig != 0) {
        spdlog::warn("{} during the wait: no more attempts", strsignal(sig));
        return 128 + sig;
      }
      if (!left_out.empty()) {
        spdlog::warn("attempt {} runs without the blacklisted {}", attempt,
                     fmt::join(left_out, ", "));
      }
    }
    const launcher::Plan plan =
        launcher::make_plan(r, launcher::local_identity(), launcher::current_environment());
    if (attempt == 1) np = static_cast<int>(plan.ranks.size());
    launcher::LaunchOptions options = context.launch_options(plan);
    // Each attempt's files beside the others': DIR/attempt.K/rank.N/... (attempt.K is made and
    // opened by the output router, never through a symbolic link).
    if (policy.enabled() && options.output_dir) {
      options.output_subdir = fmt::format("attempt.{}", attempt);
    }
    const launcher::LaunchResult result = launcher::make_launcher(o.launcher, options)->run(plan);
    if (o.elastic() && elastic_without_unreachable(o, plan, result, base)) {
      --attempt;  // the same launch, on the hosts that answered
      continue;
    }
    if (!result.ssh_failures.empty()) {
      // The table on stderr; with --json, the result document holds the same rows (check_ssh).
      launcher::CheckReport report{result.ssh_failures};
      fmt::print(stderr, "hvdrun: cannot reach every host over SSH; nothing was started.\n{}",
                 launcher::format_check_table(report, false));
    } else {
      const std::string report = launcher::format_failure_report(plan, result);
      std::fwrite(report.data(), 1, report.size(), stderr);
    }
    attempts.push_back(
        {{"attempt", attempt},
         {"job_id", plan.job_id},
         {"exit_code", result.exit_code},
         {"root_cause", result.exit_code == 0
                            ? nlohmann::ordered_json(nullptr)
                            : nlohmann::ordered_json(launcher::failure_summary(plan, result))},
         {"blacklisted", left_out},
         {"timings_ms", launcher::timings_json(result)}});
    const std::optional<std::string> why_not = launcher::why_no_restart(result);
    const bool again = policy.enabled() && attempt <= policy.max_restarts && !why_not;
    if (again) {
      std::uniform_real_distribution<double> jitter(0.0, 1.0);
      for (const std::string& host : launcher::failing_hosts(plan, result)) {
        const auto cooldown =
            health.record_failure(host, std::chrono::steady_clock::now(), jitter(jitter_source));
        if (cooldown) {
          spdlog::warn(
              "host {} is blacklisted for {:.0f} s (its failures reached "
              "--host-failure-limit {})",
              host, std::chrono::duration<double>(*cooldown).count(), o.host_failure_limit);
        }
      }
    }
    if (policy.enabled() && result.exit_code != 0 && !again) {
      spdlog::warn(
          "no restart: {}",
          why_not ? *why_not : fmt::format("all {} restarts were used", policy.max_restarts));
    }
    if (!again) {
      if (o.json) {
        nlohmann::ordered_json doc = launcher::launch_json(plan, result);
        if (policy.enabled()) doc["attempts"] = std::move(attempts);
        context.print_json(doc);
      }
      return result.exit_code;
    }
    const auto wait = launcher::backoff_before(policy, attempt + 1);
    spdlog::warn("{}", launcher::attempt_banner(attempt + 1, policy,
                                                launcher::failure_summary(plan, result), wait));
    if (const int sig = interruptible_wait(wait); sig != 0) {
      spdlog::warn("{} during the wait: no more attempts", strsignal(sig));
      return 128 + sig;
    }
  }
}

}  // namespace hvd::cli
