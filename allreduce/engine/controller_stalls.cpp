// The Controller's stall checks (allreduce/engine/controller.h): the warnings, the stall
// shutdown, and the report of each stall for the launcher's verdict (ControllerOptions::on_stall);
// and who held the others up (ControllerOptions::on_holds), for the launcher's stragglers.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "allreduce/engine/controller.h"

namespace hvd::runtime {

std::vector<std::string> Controller::check_stalls(Clock::time_point now) {
  std::vector<std::string> warnings;
  // After a fatal error every rank has stopped: nothing to warn about any more.
  if (options_.stall_warning.count() == 0 || table_.empty() || !fatal_.empty()) return warnings;
  // One pass that allocates nothing unless something is due: this runs on every turn of rank
  // 0's engine loop. The due names are sorted, so that messages are stable.
  std::vector<std::string> due;
  const std::string* shutdown_name = nullptr;  // the first name, in order, past stall_shutdown
  for (const auto& [name, entry] : table_) {
    if (now - entry.last_warned >= options_.stall_warning) due.push_back(name);
    if (options_.stall_shutdown.count() > 0 && now - entry.first_seen >= options_.stall_shutdown &&
        (shutdown_name == nullptr || name < *shutdown_name)) {
      shutdown_name = &name;
    }
  }
  std::sort(due.begin(), due.end());
  if (options_.on_stall && !due.empty()) options_.on_stall(stall_report(due, now));
  // Missing rank -> the stalled tensors it has not submitted.
  std::map<int, std::vector<std::string>> missing;
  for (const std::string& name : due) {
    Entry& entry = table_.at(name);
    entry.last_warned = now;
    for (int r = 0; r < options_.size; ++r) {
      if (!entry.has(r)) missing[r].push_back(name);
    }
  }
  for (const auto& [rank, stalled] : missing) {
    std::vector<std::string> quoted;
    for (const std::string& n : stalled) quoted.push_back("'" + n + "'");
    warnings.push_back(fmt::format(
        "stall{}: rank {} has not submitted {} {}, which other ranks have been waiting on for {} "
        "s or more: is that rank stuck, or are the ranks submitting different tensors?",
        where(), shown(rank), stalled.size() == 1 ? "tensor" : "tensors", fmt::join(quoted, ", "),
        options_.stall_warning.count() / 1000));
  }
  if (shutdown_name != nullptr) {
    if (options_.on_stall) {  // the launcher's root cause, before every op fails
      StallReport report = stall_report({*shutdown_name}, now);
      report.shutdown = true;
      options_.on_stall(report);
    }
    const Entry& entry = table_.at(*shutdown_name);
    std::vector<int> absent;
    for (int r = 0; r < options_.size; ++r) {
      if (!entry.has(r)) absent.push_back(shown(r));
    }
    fatal_ = fmt::format(
        "stalled for more than HOROVOD_STALL_SHUTDOWN_TIME_SECONDS ({} s): tensor '{}'{} was "
        "never submitted by rank(s) {}",
        options_.stall_shutdown.count() / 1000, *shutdown_name, where(),
        fmt::format("{}", fmt::join(absent, ", ")));
  }
  return warnings;
}

StallReport Controller::stall_report(const std::vector<std::string>& due,
                                     Clock::time_point now) const {
  StallReport report{options_.set_id, options_.set_label, {}};
  // What each missing rank did submit: the names of the table it is in, sorted.
  std::map<int, std::vector<std::string>> submitted;
  for (const std::string& name : due) {
    const Entry& entry = table_.at(name);
    StalledTensor tensor;
    tensor.name = name;
    tensor.kind = entry.by_rank.empty() ? OpKind::kAllreduce : entry.by_rank.front().second.kind;
    tensor.waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - entry.first_seen);
    for (int r = 0; r < options_.size; ++r) {
      if (entry.has(r)) {
        tensor.waiting.push_back(shown(r));
        continue;
      }
      auto [it, fresh] = submitted.try_emplace(r);
      if (fresh) {
        for (const std::string& other : sorted_names()) {
          if (it->second.size() == kMaxSubmittedShown) break;
          if (table_.at(other).has(r)) it->second.push_back(other);
        }
      }
      tensor.missing.push_back({shown(r), it->second});
    }
    report.tensors.push_back(std::move(tensor));
  }
  return report;
}

void Controller::note_hold(int rank, Clock::time_point from, Clock::time_point to) {
  if (!options_.on_holds) return;
  if (held_.empty()) {
    const auto n = static_cast<std::size_t>(options_.size);
    held_.assign(n, Clock::duration::zero());
    held_last_.assign(n, 0);
    held_until_.assign(n, Clock::time_point{});
  }
  const auto r = static_cast<std::size_t>(rank);
  ++held_ops_;
  ++held_last_[r];
  from = std::max(from, held_until_[r]);  // what an earlier interval of this rank counted
  if (to > from) {
    held_[r] += to - from;
    held_until_[r] = to;
  }
}

void Controller::report_holds(Clock::time_point now, bool final) {
  if (holds_final_sent_ || held_ops_ == 0 || !first_op_ || (!final && now < next_holds_)) return;
  next_holds_ = now + options_.holds_period;
  holds_final_sent_ = final;
  HoldReport report;
  report.process_set = options_.set_id;
  report.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(now - *first_op_);
  report.ops = held_ops_;
  report.final = final;
  for (int r = 0; r < options_.size; ++r) {
    const auto i = static_cast<std::size_t>(r);
    report.ranks.push_back(
        {shown(r), std::chrono::duration_cast<std::chrono::milliseconds>(held_[i]), held_last_[i]});
  }
  options_.on_holds(report);
}

std::optional<Clock::time_point> Controller::next_stall_check() const {
  if (options_.stall_warning.count() == 0 || table_.empty() || !fatal_.empty()) {
    return std::nullopt;
  }
  std::optional<Clock::time_point> next;
  for (const auto& [name, entry] : table_) {
    Clock::time_point t = entry.last_warned + options_.stall_warning;
    if (options_.stall_shutdown.count() > 0) {
      t = std::min(t, entry.first_seen + options_.stall_shutdown);
    }
    if (!next || t < *next) next = t;
  }
  return next;
}

}  // namespace hvd::runtime
