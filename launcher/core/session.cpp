#include "launcher/core/session.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/error.h"
#include "common/signal_fd.h"
#include "contract/env_table.h"
#include "launcher/core/launch_report.h"
#include "launcher/core/run_record.h"
#include "launcher/core/ssh_check.h"

namespace hvd::launcher {
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
int usable_hosts(const PlanRequest& request, const HostHealth& health, int np,
                 std::vector<HostSpec>& hosts, std::vector<std::string>& left_out) {
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    hosts.clear();
    left_out.clear();
    int slots = 0;
    for (const HostSpec& h : request.hosts) {
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

// Elastic training's checks that need the plan: the sizes.
void check_elastic_sizes(const ElasticOptions& e, const Plan& plan) {
  const int np = static_cast<int>(plan.ranks.size());
  if (e.min_np && *e.min_np > np) {
    throw UsageError(fmt::format("--min-np {} is more than the {} rank{} the job starts with",
                                 *e.min_np, np, np == 1 ? "" : "s"),
                     "give -np at least --min-np: the job starts with -np ranks and goes on "
                     "while --min-np remain");
  }
  if (e.max_np && *e.max_np < np) {
    throw UsageError(
        fmt::format("--max-np {} is less than the {} ranks the job starts with", *e.max_np, np),
        "lower -np, or raise --max-np");
  }
}

nlohmann::ordered_json optional_json(const auto& value) {
  return value ? nlohmann::ordered_json(*value) : nlohmann::ordered_json(nullptr);
}

// The run record's first event: what was launched, where.
nlohmann::ordered_json record_launch(const Plan& plan) {
  nlohmann::ordered_json hosts = nlohmann::ordered_json::array();
  for (const HostPlan& h : plan.hosts) {
    hosts.push_back({{"host", h.spec.host}, {"slots", h.spec.slots}, {"ranks", h.num_ranks}});
  }
  return {{"job_id", plan.job_id},
          {"np", plan.ranks.size()},
          {"hosts", std::move(hosts)},
          {"command", plan.command}};
}

}  // namespace

Session::Session(SessionOptions options) : options_(std::move(options)) {
  // The waits are capped: a larger --restart-backoff is the cap (and a warning), so the dry run
  // shows the waits that will happen.
  const double backoff_given = options_.restarts.backoff_seconds;
  options_.restarts.backoff_seconds = std::min(backoff_given, kMaxBackoffSeconds);
  base_ = options_.request;
  plan_ = make_plan(attempt_request(1), local_identity(), current_environment());
  plan_.warnings.insert(plan_.warnings.begin(), options_.warnings.begin(), options_.warnings.end());
  if (backoff_given > kMaxBackoffSeconds) {
    plan_.warnings.push_back(fmt::format(
        "--restart-backoff {:g}: a wait is at most {:g} s, so every restart waits {:g} s",
        backoff_given, kMaxBackoffSeconds, kMaxBackoffSeconds));
  }
  const LaunchOptions& launch = options_.launch;
  if (launch.elastic) check_elastic_sizes(*launch.elastic, plan_);
  // An elastic job may grow into more ranks.
  if (launch.line_format.ranks && !launch.elastic) {
    const int np = static_cast<int>(plan_.ranks.size());
    if (launch.line_format.ranks->back() >= np) {
      throw UsageError(fmt::format("--output-ranks: the job has no rank {} (its ranks are 0 to {})",
                                   launch.line_format.ranks->back(), np - 1),
                       "list ranks below -np");
    }
  }
  launcher_ = options_.make_launcher(options_.launch);
  launcher_->check(plan_);
}

// Each attempt's plan: a new job id (a new rendezvous scope and token), and with restarts on
// torchrun's restart variables on every rank.
PlanRequest Session::attempt_request(int attempt) const {
  PlanRequest r = base_;
  const RestartPolicy& policy = options_.restarts;
  if (!policy.enabled()) return r;
  if (attempt > 1) r.job_id = options_.new_job_id();
  r.knobs.emplace_back(contract::kRestartCount.name, std::to_string(attempt - 1));
  r.knobs.emplace_back(contract::kMaxRestarts.name, std::to_string(policy.max_restarts));
  r.knobs.emplace_back(contract::kRunId.name, options_.request.job_id);
  return r;
}

// Elastic training starts without the hosts SSH could not reach when the others hold --min-np
// ranks (horovodrun's elastic driver starts with the hosts it can use): they are named, and
// the launch runs again on the rest. False when it cannot (then the failure is the result).
bool Session::elastic_without_unreachable(const Plan& plan, const LaunchResult& result) {
  if (!options_.launch.elastic || result.ssh_failures.empty()) return false;
  std::vector<std::string> failed;
  for (const ssh::HostCheck& c : result.ssh_failures) failed.push_back(c.host);
  std::vector<HostSpec> kept;
  int slots = 0;
  for (const HostSpec& h : base_.hosts) {
    if (std::find(failed.begin(), failed.end(), h.host) != failed.end()) continue;
    kept.push_back(h);
    slots += h.slots;
  }
  const int np = static_cast<int>(plan.ranks.size());
  const int min_np = options_.launch.elastic->min_np_for(np);
  if (kept.empty() || kept.size() == base_.hosts.size() || slots < min_np) return false;
  fmt::print(stderr,
             "hvdrun: elastic: {} cannot be reached over SSH; the job starts without {} on {} "
             "slot{} (--min-np {})\n{}",
             fmt::join(failed, ", "), failed.size() == 1 ? "it" : "them", slots,
             slots == 1 ? "" : "s", min_np,
             format_check_table(CheckReport{result.ssh_failures}, false));
  base_.hosts = std::move(kept);
  base_.num_proc = std::min(np, slots);
  return true;
}

int Session::run(bool json, const std::function<void(const nlohmann::ordered_json&)>& print_json,
                 const std::shared_ptr<RunRecord>& record) {
  const RestartPolicy& policy = options_.restarts;
  const HostFailureOptions& failures = options_.launch.host_failures;
  HostHealth health(failures.limit, failures.cooldown.at(0), failures.cooldown.at(1));
  std::mt19937 jitter_source{std::random_device{}()};
  nlohmann::ordered_json attempts = nlohmann::ordered_json::array();
  const int np = static_cast<int>(plan_.ranks.size());  // the job's size, fixed by the first
  std::optional<Plan> next = plan_;  // the first attempt's plan is the one made and checked
  if (record) record->event("launch", record_launch(plan_));
  // An end that is not the last attempt's result (a signal while waiting to restart).
  auto ended_by = [&](int code) {
    if (record) record->end({{"exit_code", code}, {"result", nullptr}});
    return code;
  };
  for (int attempt = 1;; ++attempt) {
    std::vector<std::string> left_out;
    if (!next) {
      PlanRequest r = attempt_request(attempt);
      if (attempt > 1) {
        r.num_proc = np;
        if (const int sig = usable_hosts(options_.request, health, np, r.hosts, left_out);
            sig != 0) {
          spdlog::warn("{} during the wait: no more attempts", strsignal(sig));
          return ended_by(128 + sig);
        }
        if (!left_out.empty()) {
          spdlog::warn("attempt {} runs without the blacklisted {}", attempt,
                       fmt::join(left_out, ", "));
        }
      }
      next = make_plan(r, local_identity(), current_environment());
    }
    const Plan plan = std::move(*next);
    next.reset();
    LaunchOptions launch = options_.launch;
    // Each attempt's files beside the others': DIR/attempt.K/rank.N/... (attempt.K is made and
    // opened by the output router, never through a symbolic link).
    if (policy.enabled() && launch.output_dir) {
      launch.output_subdir = fmt::format("attempt.{}", attempt);
    }
    if (record) record->set_attempt(attempt);
    launch.record = record;
    const LaunchResult result = options_.make_launcher(std::move(launch))->run(plan);
    if (elastic_without_unreachable(plan, result)) {
      --attempt;  // the same launch, on the hosts that answered
      continue;
    }
    if (!result.ssh_failures.empty()) {
      // The table on stderr; with --json, the result document holds the same rows (check_ssh).
      CheckReport report{result.ssh_failures};
      fmt::print(stderr, "hvdrun: cannot reach every host over SSH; nothing was started.\n{}",
                 format_check_table(report, false));
    } else {
      const std::string report = format_failure_report(plan, result);
      std::fwrite(report.data(), 1, report.size(), stderr);
    }
    attempts.push_back({{"attempt", attempt},
                        {"job_id", plan.job_id},
                        {"exit_code", result.exit_code},
                        {"root_cause", result.exit_code == 0
                                           ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(failure_summary(plan, result))},
                        {"blacklisted", left_out},
                        {"timings_ms", timings_json(result)}});
    if (record && policy.enabled()) record->event("attempt", attempts.back());
    const std::optional<std::string> why_not = why_no_restart(result);
    const bool again = policy.enabled() && attempt <= policy.max_restarts && !why_not;
    if (again) {
      std::uniform_real_distribution<double> jitter(0.0, 1.0);
      for (const std::string& host : failing_hosts(plan, result)) {
        const auto cooldown =
            health.record_failure(host, std::chrono::steady_clock::now(), jitter(jitter_source));
        if (cooldown) {
          spdlog::warn(
              "host {} is blacklisted for {:.0f} s (its failures reached "
              "--host-failure-limit {})",
              host, std::chrono::duration<double>(*cooldown).count(), failures.limit);
        }
      }
    }
    if (policy.enabled() && result.exit_code != 0 && !again) {
      spdlog::warn(
          "no restart: {}",
          why_not ? *why_not : fmt::format("all {} restarts were used", policy.max_restarts));
    }
    if (!again) {
      if (json || record) {
        nlohmann::ordered_json doc = launch_json(plan, result);
        if (policy.enabled()) doc["attempts"] = std::move(attempts);
        if (record) record->end({{"exit_code", result.exit_code}, {"result", doc}});
        if (json) print_json(doc);
      }
      return result.exit_code;
    }
    const auto wait = backoff_before(policy, attempt + 1);
    spdlog::warn("{}", attempt_banner(attempt + 1, policy, failure_summary(plan, result), wait));
    if (const int sig = interruptible_wait(wait); sig != 0) {
      spdlog::warn("{} during the wait: no more attempts", strsignal(sig));
      return ended_by(128 + sig);
    }
  }
}

// The elastic rules of the dry run, in words.
std::string Session::elastic_words(const Plan& plan) const {
  const ElasticOptions& e = *options_.launch.elastic;
  const HostFailureOptions& failures = options_.launch.host_failures;
  const int np = static_cast<int>(plan.ranks.size());
  const int free_slots = plan.total_slots - np;
  const std::string cooldown =
      failures.cooldown_given
          ? fmt::format("a failed slot cools down for {:g}-{:g} s, then a new rank takes it",
                        failures.cooldown.at(0), failures.cooldown.at(1))
          : std::string("a failed slot is out for good (--blacklist-cooldown-range: a cooldown)");
  std::string growth;
  if (e.discovery_script) {
    growth = fmt::format("hosts join and leave as {} lists them (every {:g} s){}",
                         *e.discovery_script, e.discovery_interval_s,
                         e.max_np ? fmt::format(", up to {} ranks (--max-np)", *e.max_np) : "");
  } else if (!e.max_np && free_slots > 0) {
    growth = fmt::format(
        "grows onto the hosts' {} free slot{} at once (--max-np: no limit, as horovodrun)",
        free_slots, free_slots == 1 ? "" : "s");
  } else if (!e.max_np) {
    growth = "no free slot to grow onto (--max-np: no limit)";
  } else if (*e.max_np > np) {
    growth = fmt::format("grows onto free slots up to {} ranks (--max-np)", *e.max_np);
  } else {
    growth = "never above -np (--max-np)";
  }
  return fmt::format(
      "\nelastic: a failed rank leaves the job and the others go on in a new generation "
      "while at least {} of the {} ranks remain (--min-np); {}; {}; {}\n",
      e.min_np_for(np), np, cooldown, growth,
      e.reset_limit ? fmt::format("at most {} such changes (--reset-limit)", *e.reset_limit)
                    : std::string("no limit on such changes"));
}

std::string Session::describe_text(const PlanOutputOptions& output) const {
  const Plan shown = launcher_->shown(plan_);
  std::string text = format_plan_table(shown, output) +
                     format_launcher_commands(launcher_->name(), launcher_->describe(shown));
  if (options_.launch.elastic) text += elastic_words(shown);
  const RestartPolicy& policy = options_.restarts;
  if (policy.enabled()) {
    const HostFailureOptions& failures = options_.launch.host_failures;
    text += fmt::format(
        "\nrestarts: up to {} (after a failed rank, a lost host, a failed network check, an "
        "SSH connection refused or timed out); waits {:g} s before the first, doubling, at "
        "most {:g} s; a host with {} failure(s) is blacklisted for {:g}-{:g} s\n",
        policy.max_restarts, policy.backoff_seconds, kMaxBackoffSeconds, failures.limit,
        failures.cooldown.at(0), failures.cooldown.at(1));
  }
  return text;
}

nlohmann::ordered_json Session::describe_json(const PlanOutputOptions& output) const {
  const Plan shown = launcher_->shown(plan_);
  const HostFailureOptions& failures = options_.launch.host_failures;
  nlohmann::ordered_json doc =
      plan_json(shown, output, launcher_->name(), launcher_->describe(shown));
  doc["restarts"] = {{"max_restarts", options_.restarts.max_restarts},
                     {"backoff_seconds", options_.restarts.backoff_seconds},
                     {"host_failure_limit", failures.limit},
                     {"blacklist_cooldown_seconds", failures.cooldown}};
  if (const auto& e = options_.launch.elastic) {
    doc["elastic"] = {
        {"min_np", e->min_np_for(static_cast<int>(shown.ranks.size()))},
        {"max_np", optional_json(e->max_np)},  // null: no limit, as horovodrun
        {"discovery_script", optional_json(e->discovery_script)},
        {"reset_limit", optional_json(e->reset_limit)},
        {"elastic_timeout_seconds", e->timeout_s.value_or(kDefaultElasticTimeoutSeconds)},
        {"slot_cooldown_seconds", failures.cooldown_given
                                      ? nlohmann::ordered_json(failures.cooldown)
                                      : nlohmann::ordered_json(nullptr)}};
  }
  return doc;
}

}  // namespace hvd::launcher
