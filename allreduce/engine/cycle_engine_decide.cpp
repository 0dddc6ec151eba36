// CycleEngine's decisions (cycle_engine.h): what a completed cycle runs, from its AND round alone
// (the steady state) or from every rank's contribution through the Controller. The same inputs
// give the same decision on every rank.
#include <algorithm>
#include <bit>

#include <fmt/format.h>

#include "allreduce/api/log.h"
#include "allreduce/engine/cycle_engine.h"
#include "allreduce/engine/timeline.h"

namespace hvd::runtime {

std::optional<CycleEngine::Decision> CycleEngine::decide_from_and(
    const std::vector<std::uint64_t>& anded) {
  // The steady state of a training loop: every rank brought the same cached tensors and nothing
  // else (no rank's bit is missing on another: AND equals OR), and nothing waits from earlier
  // cycles. The Controller would find each ready, valid (they ran with these very requests), and
  // fuse them: that is decided here without its table, in slot order. Anything else goes to the
  // allgather round, as every rank sees the same words and the same Controller.
  const std::size_t words = anded.size() / 2;
  if (anded.size() != 2 * words + 1 || anded[2 * words] != ~std::uint64_t{0}) return std::nullopt;
  if (!controller_.idle()) return std::nullopt;
  bool any = false;
  for (std::size_t i = 0; i < words; ++i) {
    if (anded[i] != ~anded[words + i]) return std::nullopt;  // some rank lacks a tensor
    any |= anded[i] != 0;
  }
  if (!any) return std::nullopt;  // nobody brought anything: the full path keeps its bookkeeping
  std::vector<ReadyOp> ready;
  for (std::size_t i = 0; i < words; ++i) {
    for (std::uint64_t w = anded[i]; w != 0; w &= w - 1) {
      const auto slot =
          static_cast<std::uint32_t>(i * 64 + static_cast<std::size_t>(std::countr_zero(w)));
      const Request* cached = cache_.at(slot);
      if (cached == nullptr) return std::nullopt;  // the full path reports it
      ready.push_back({cached, nullptr});
    }
  }
  if (options_.timeline != nullptr) {
    options_.timeline->cycle_start();
    for (int r = 0; r < options_.size; ++r) {
      for (const ReadyOp& op : ready) options_.timeline->negotiating(*op.request, r);
    }
  }
  Decision decision;
  fuse_responses(ready, controller_.options().fusion_threshold, decision.list.responses);
  if (options_.timeline != nullptr) {
    for (const Response& r : decision.list.responses) options_.timeline->negotiated(r);
  }
  return decision;
}

std::string CycleEngine::eager_name(const CycleContribution& c) const {
  if (c.hits.size() == 1 && c.misses.requests.empty()) {
    const Request* cached = cache_.at(c.hits.front());
    return cached != nullptr && cached->kind == OpKind::kAllreduce ? cached->name : std::string();
  }
  if (c.hits.empty() && c.misses.requests.size() == 1 &&
      c.misses.requests.front().kind == OpKind::kAllreduce) {
    return c.misses.requests.front().name;
  }
  return {};
}

CycleEngine::Decision CycleEngine::decide(const std::vector<std::string>& contributions,
                                          Clock::time_point now) {
  if (options_.timeline != nullptr) options_.timeline->cycle_start();
  Decision decision;
  const auto unreadable = [&](std::size_t r, const std::exception& e) {
    decision.list.fatal = fmt::format(
        "rank {} sent a negotiation message the others cannot read ({}); do all ranks run the "
        "same libhvd version?",
        r, e.what());
    return decision;
  };
  // Each rank's message: its contribution (the head) and the input of an allreduce it brought
  // alone, if one (eager data).
  std::vector<FramedContribution> framed(contributions.size());
  for (std::size_t r = 0; r < framed.size(); ++r) {
    try {
      framed[r] = unframe_contribution(contributions[r]);
    } catch (const std::exception& e) {
      return unreadable(r, e);
    }
  }
  // Every rank brought the same head (a synchronous call, a step's new tensors in the same
  // order): decoded once and given to the Controller as every rank's at once.
  const bool unanimous =
      std::all_of(framed.begin() + 1, framed.end(),
                  [&](const FramedContribution& c) { return c.head == framed.front().head; });
  std::vector<CycleContribution> parts(unanimous ? 1 : contributions.size());
  for (std::size_t r = 0; r < parts.size(); ++r) {
    try {
      parts[r] = decode_contribution(framed[r].head);
    } catch (const std::exception& e) {
      return unreadable(r, e);
    }
  }
  // Every rank brought one allreduce alone, the same, with its input: it runs from those inputs
  // (run_response), if it is what the Controller decides.
  if (std::all_of(framed.begin(), framed.end(),
                  [](const FramedContribution& c) { return !c.data.empty(); })) {
    decision.eager = eager_name(parts.front());
    for (std::size_t r = 1; r < parts.size() && !decision.eager.empty(); ++r) {
      if (eager_name(parts[r]) != decision.eager) decision.eager.clear();
    }
    if (!decision.eager.empty()) {
      for (const FramedContribution& c : framed) decision.eager_inputs.push_back(c.data);
    }
  }
  decision.hits_only = std::any_of(parts.begin(), parts.end(),
                                   [](const CycleContribution& c) { return !c.hits.empty(); }) &&
                       std::all_of(parts.begin(), parts.end(), [](const CycleContribution& c) {
                         return c.misses.requests.empty() && !c.misses.shutdown;
                       });
  bool brought = false;
  for (std::size_t r = 0; r < parts.size(); ++r) {
    CycleContribution& c = parts[r];
    RequestList list = std::move(c.misses);
    for (std::uint32_t slot : c.hits) {
      // This rank's own cached request stands for rank r's: they agree on everything the
      // Controller validates (they ran together).
      const Request* cached = cache_.at(slot);
      if (cached == nullptr) {
        decision.list.fatal = fmt::format(
            "rank {} named response cache slot {}, which is empty on rank {}: the ranks' caches "
            "differ (do all ranks run the same libhvd version?)",
            r, slot, options_.rank);
        return decision;
      }
      list.requests.push_back(*cached);
    }
    brought |= !list.requests.empty() || list.shutdown;
    if (options_.timeline != nullptr) {  // unanimous: the one list is every rank's
      const int from = unanimous ? 0 : static_cast<int>(r);
      const int to = unanimous ? options_.size : from + 1;
      for (int t = from; t < to; ++t) {
        for (const Request& q : list.requests) options_.timeline->negotiating(q, t);
      }
    }
    if (unanimous) {
      controller_.add_unanimous(std::move(list), now);
    } else {
      controller_.add(static_cast<int>(r), std::move(list), now);
    }
  }
  if (root()) {
    for (const std::string& warning : controller_.check_stalls(now)) logger().warn("{}", warning);
    if (auto next = controller_.next_stall_check();
        next && (!stall_armed_ || *next < *stall_armed_)) {
      stall_armed_ = next;
      wakeup_.notify();  // the background thread sleeps without this deadline
    }
  }
  decision.list = controller_.take();
  if (options_.timeline != nullptr) {
    for (const Response& r : decision.list.responses) options_.timeline->negotiated(r);
  }
  const std::set<int>& gone = controller_.shut_down();
  decision.shut_down.assign(gone.begin(), gone.end());
  decision.idle = !brought && decision.list.responses.empty() && decision.list.fatal.empty();
  return decision;
}

}  // namespace hvd::runtime
