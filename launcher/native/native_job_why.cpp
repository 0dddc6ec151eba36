// A stalled job's verdict (docs/why.md): rank 0's engine reports the stall on its report
// channel (kRankReport, through its agent), hvdrun asks the agents of the missing ranks what
// those processes are doing (kInspect), and prints the verdict once the answers are in (or
// kVerdictWait has passed): who waits, who is missing, on which host, in which op, doing what.
// The stall shutdown's report ends the job with the verdict as its root cause; so does the
// start-up watch, when some ranks called hvd.init() (the rendezvous server saw them) and others
// did not within the window the first ones wait.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "contract/env_table.h"
#include "launcher/core/run_record.h"
#include "launcher/native/native_job.h"

namespace hvd::launcher::native {
namespace {

// The agents answer after their CPU window (0.3 s) and the stacks (at most 1 s more).
constexpr auto kVerdictWait = std::chrono::milliseconds(2000);
constexpr size_t kMaxStallsKept = 100;  // --json's "stalls"
// How often the start-up watch looks for the first rank's hvd.init() at the rendezvous server.
constexpr auto kInitPoll = std::chrono::milliseconds(1000);

}  // namespace

void NativeJob::on_rank_report(AgentConn& agent, const std::string& payload) {
  const agent::RankReport report = agent::decode_rank_report(payload);
  const auto kind = nlohmann::json::parse(report.line, nullptr, false);
  if (kind.is_object() && kind.contains("kind") && kind["kind"] == "holds") {
    on_holds(agent, report.line);
    return;
  }
  if (!kind.is_object() || !kind.contains("kind") || kind["kind"] != "stall") {
    spdlog::debug("host {}: rank {}: a report line of another kind, ignored", host_of(agent),
                  report.rank);
    return;
  }
  std::vector<StalledOp> ops;
  try {
    ops = parse_stall_report(report.line);
  } catch (const Error& e) {
    spdlog::warn("host {}: {}", host_of(agent), e.what());
    return;
  }
  if (ops.empty() || sup_.stopping()) return;
  // The stall shutdown (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS): rank 0 fails every op right after
  // this line, and the job ends with the verdict as its cause. Not in an elastic job, whose
  // ranks take the failure as a reset.
  const bool shutdown = kind.contains("shutdown") && kind["shutdown"].is_boolean() &&
                        kind["shutdown"].get<bool>() && !plan_.elastic;
  const VerdictEnds ends = shutdown ? VerdictEnds::kStallShutdown : VerdictEnds::kNo;
  if (verdict_) {
    if (ends == VerdictEnds::kNo || verdict_->ends != VerdictEnds::kNo) return;  // next period
    // A warning's verdict under way becomes the shutdown's, with its ops.
    verdict_->ops = std::move(ops);
    verdict_->ends = ends;
  } else {
    PendingVerdict pending;
    pending.ops = std::move(ops);
    pending.ends = ends;
    pending.deadline = Clock::now() + kVerdictWait;
    verdict_ = std::move(pending);
  }
  ask_inspections(*verdict_);
  if (verdict_->waiting.empty()) finish_verdict();
}

void NativeJob::ask_inspections(PendingVerdict& pending) {
  // The missing ranks' agents (a launch's ranks: an elastic job's ranks change per generation,
  // its verdict names them without their processes).
  std::map<size_t, std::vector<int>> asks;
  for (const int rank : missing_ranks(pending.ops)) {
    if (std::any_of(pending.found.begin(), pending.found.end(),
                    [rank](const RankInspection& i) { return i.rank == rank; })) {
      continue;  // asked already
    }
    RankInspection found{rank, rank_host(rank), nullptr};
    if (const auto host = rank_host_index(rank)) {
      for (size_t i = 0; i < agents_.size(); ++i) {
        if (agents_[i].host_index == *host && agents_[i].spec_sent && !agents_[i].eof) {
          asks[i].push_back(rank);
        }
      }
    }
    pending.found.push_back(std::move(found));
  }
  for (auto& [index, ranks] : asks) {
    send(agents_[index], FrameType::kInspect, nlohmann::json{{"ranks", ranks}}.dump());
    pending.waiting.insert(index);
  }
}

void NativeJob::on_inspection(AgentConn& agent, const std::string& payload) {
  const auto index = static_cast<size_t>(&agent - agents_.data());
  if (!verdict_) return;  // a late answer
  const auto due = verdict_->waiting.find(index);
  if (due == verdict_->waiting.end()) return;
  verdict_->waiting.erase(due);
  const auto doc = nlohmann::json::parse(payload, nullptr, false);
  if (doc.is_object() && doc.contains("ranks") && doc["ranks"].is_array()) {
    for (const auto& one : doc["ranks"]) {
      if (!one.is_object() || !one.contains("rank") || !one["rank"].is_number_integer()) continue;
      for (RankInspection& found : verdict_->found) {
        if (found.rank == one["rank"].get<int>()) found.found = clean_inspection(one);
      }
    }
  }
  if (verdict_->waiting.empty()) finish_verdict();
}

void NativeJob::finish_verdict() {
  if (!verdict_) return;
  const PendingVerdict v = std::move(*verdict_);
  verdict_.reset();
  const std::vector<std::string> lines = render_verdict(v.ops, v.found);
  const std::string key = verdict_key(v.ops, v.found);
  if (key == last_verdict_ && !lines.empty()) {
    spdlog::warn("{} (the missing ranks are as above: same state, same stack)", lines.front());
  } else {
    for (const std::string& line : lines) spdlog::warn("{}", line);
  }
  last_verdict_ = key;
  for (auto& entry : stalls_json(v.ops, v.found)) {
    entry["ended_job"] = v.ends != VerdictEnds::kNo;
    if (options_.record) {
      nlohmann::ordered_json event{{"attempt", options_.record->attempt()}};
      event.update(entry);
      options_.record->event("stall", event);
    }
    if (stalls_.size() < kMaxStallsKept) stalls_.push_back(std::move(entry));
  }
  if (v.ends == VerdictEnds::kStallShutdown && !sup_.stopping()) {
    sup_.fail({ErrorKind::kStalled,
               fmt::format("the job stalled past --stall-check-shutdown-time-seconds: {}",
                           verdict_summary(v.ops, v.found)),
               "the verdict above says what the missing rank was doing (its state and stack): "
               "fix what holds it there, or make every rank submit the same ops in the same "
               "order; --stall-check-shutdown-time-seconds 0 makes stalls only warn"});
  } else if (v.ends == VerdictEnds::kInitTimeout && !sup_.stopping()) {
    sup_.fail({ErrorKind::kTimeout,
               fmt::format("start-up timed out in hvd.init(): {}", verdict_summary(v.ops, v.found)),
               "the verdict above says what the late rank was doing (its state and stack); if "
               "it needs longer before hvd.init(), raise --start-timeout and "
               "--gloo-timeout-seconds"});
  }
  // The exits the verdict held back: consequences now that the job is stopping.
  for (const agent::RankExited& exited : held_exits_) {
    sup_.rank_exited(static_cast<int>(exited.rank),
                     {exited.signaled, static_cast<int>(exited.value)}, exited.stopped);
  }
  held_exits_.clear();
}

void NativeJob::on_holds(AgentConn& agent, const std::string& line) {
  HoldFigures figures;
  try {
    figures = parse_hold_report(line);
  } catch (const Error& e) {
    spdlog::warn("host {}: {}", host_of(agent), e.what());
    return;
  }
  if (figures.process_set != 0) return;  // the global set's figures only
  holds_ = std::move(figures);
  for (const Straggler& s : find_stragglers(*holds_)) {
    if (!stragglers_named_.insert(s.rank).second) continue;  // named once, live
    spdlog::warn("{}", straggler_line(s, rank_host(s.rank), *holds_));
    if (options_.record) {
      options_.record->event("straggler", {{"attempt", options_.record->attempt()},
                                           {"rank", s.rank},
                                           {"host", rank_host(s.rank)},
                                           {"others_waited_s", s.others_waited_s},
                                           {"share", s.share},
                                           {"last_share", s.last_share}});
    }
  }
}

std::optional<int> NativeJob::rank_host_index(int rank) const {
  if (plan_.elastic || rank < 0 || static_cast<size_t>(rank) >= plan_.ranks.size()) return {};
  return plan_.ranks[static_cast<size_t>(rank)].host_index;
}

std::string NativeJob::rank_host(int rank) const {
  const auto host = rank_host_index(rank);
  return host ? hosts_[static_cast<size_t>(*host)].spec.host : "";
}

nlohmann::ordered_json NativeJob::stragglers_json() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  if (!holds_) return out;
  for (const Straggler& s : find_stragglers(*holds_)) {
    out.push_back({{"rank", s.rank},
                   {"host", rank_host(s.rank)},
                   {"others_waited_s", s.others_waited_s},
                   {"share", s.share},
                   {"last_share", s.last_share}});
  }
  return out;
}

std::chrono::milliseconds NativeJob::init_window() const {
  // The ranks that did wait for the others for their Gloo timeout (and a margin: libhvd's init
  // watchdog, docs/libhvd.md), then end with 75; the watch speaks first, naming the late rank.
  auto window = options_.start_timeout;
  if (!specs_.empty() && !specs_.front().ranks.empty()) {
    const std::string gloo = spec_value(specs_.front().ranks.front(), contract::kGlooTimeout.name);
    long seconds = contract::kGlooTimeout.default_value.integer;
    if (!gloo.empty()) {
      long parsed = 0;
      const auto [end, ec] = std::from_chars(gloo.data(), gloo.data() + gloo.size(), parsed);
      if (ec == std::errc() && end == gloo.data() + gloo.size() && parsed > 0) seconds = parsed;
    }
    window = std::min<std::chrono::milliseconds>(window, std::chrono::seconds(seconds));
  }
  return window;
}

std::optional<Clock::time_point> NativeJob::init_watch_due() const {
  if (init_watched_ || !init_window_ || plan_.elastic || check_net_only_ || !rendezvous_ ||
      sup_.stopping() || verdict_ || !all_started()) {
    return std::nullopt;
  }
  const auto first = rendezvous_->first_rank_request();
  if (!first) return Clock::now() + kInitPoll;  // no rank has called hvd.init() yet
  return *first + *init_window_;
}

void NativeJob::check_init(Clock::time_point now) {
  const auto due = init_watch_due();
  if (!due || now < *due) return;
  const RendezvousStats seen = rendezvous_->stats();
  if (!seen.first_rank_request) return;  // still none: polled again
  init_watched_ = true;
  StalledOp op;
  op.op = "init";
  op.seconds = std::chrono::duration<double>(now - *seen.first_rank_request).count();
  for (int r = 0; r < static_cast<int>(plan_.ranks.size()); ++r) {
    if (seen.ranks_seen.count(r) != 0) {
      op.waiting.push_back(r);
    } else {
      op.missing.push_back({r, {}});
    }
  }
  if (op.missing.empty()) return;  // every rank called it
  PendingVerdict pending;
  pending.ops.push_back(std::move(op));
  pending.ends = VerdictEnds::kInitTimeout;
  pending.deadline = now + kVerdictWait;
  verdict_ = std::move(pending);
  ask_inspections(*verdict_);
  if (verdict_->waiting.empty()) finish_verdict();
}

}  // namespace hvd::launcher::native
