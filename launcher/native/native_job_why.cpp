// A stalled job's verdict (docs/why.md): rank 0's engine reports the stall on its report
// channel (kRankReport, through its agent), hvdrun asks the agents of the missing ranks what
// those processes are doing (kInspect), and prints the verdict once the answers are in (or
// kVerdictWait has passed): who waits, who is missing, on which host, in which op, doing what.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "launcher/native/native_job.h"

namespace hvd::launcher::native {
namespace {

// The agents answer after their CPU window (0.3 s) and the stacks (at most 1 s more).
constexpr auto kVerdictWait = std::chrono::milliseconds(2000);
constexpr size_t kMaxStallsKept = 100;  // --json's "stalls"

}  // namespace

void NativeJob::on_rank_report(AgentConn& agent, const std::string& payload) {
  const agent::RankReport report = agent::decode_rank_report(payload);
  const auto kind = nlohmann::json::parse(report.line, nullptr, false);
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
  if (ops.empty() || verdict_ || sup_.stopping()) return;  // the next period brings another
  PendingVerdict pending;
  pending.ops = std::move(ops);
  pending.deadline = Clock::now() + kVerdictWait;
  // The missing ranks' agents (a launch's ranks: an elastic job's ranks change per generation,
  // its verdict names them without their processes).
  std::map<size_t, std::vector<int>> asks;
  for (const int rank : missing_ranks(pending.ops)) {
    RankInspection found{rank, "", nullptr};
    if (!plan_.elastic && rank >= 0 && static_cast<size_t>(rank) < plan_.ranks.size()) {
      const int host = plan_.ranks[static_cast<size_t>(rank)].host_index;
      found.host = hosts_[static_cast<size_t>(host)].spec.host;
      for (size_t i = 0; i < agents_.size(); ++i) {
        if (agents_[i].host_index == host && agents_[i].spec_sent && !agents_[i].eof) {
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
  verdict_ = std::move(pending);
  if (verdict_->waiting.empty()) finish_verdict();
}

void NativeJob::on_inspection(AgentConn& agent, const std::string& payload) {
  const auto index = static_cast<size_t>(&agent - agents_.data());
  if (!verdict_ || verdict_->waiting.erase(index) == 0) return;  // a late answer
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
  const std::vector<std::string> lines = render_verdict(verdict_->ops, verdict_->found);
  const std::string key = verdict_key(verdict_->ops, verdict_->found);
  if (key == last_verdict_ && !lines.empty()) {
    spdlog::warn("{} (the missing ranks are as above: same state, same stack)", lines.front());
  } else {
    for (const std::string& line : lines) spdlog::warn("{}", line);
  }
  last_verdict_ = key;
  for (auto& entry : stalls_json(verdict_->ops, verdict_->found)) {
    if (stalls_.size() < kMaxStallsKept) stalls_.push_back(std::move(entry));
  }
  verdict_.reset();
}

}  // namespace hvd::launcher::native
