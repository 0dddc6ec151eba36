// ElasticDriver's generations (elastic_driver.h): workers that exit or fail, hosts lost, the next
// world chosen and published, its forming, growth and the shortfall below --min-np. The hosts
// (discovery, agents, failures charged) are in elastic_driver_hosts.cpp.
#include "launcher/elastic/elastic_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"
#include "common/plural.h"
#include "launcher/core/launcher.h"

namespace hvd::launcher {
namespace {

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

ElasticDriver::ElasticDriver(ElasticPolicy policy, std::vector<PoolHost> pool,
                             std::vector<ElasticWorker> workers, std::string master_addr,
                             int master_port, Clock::time_point)
    : policy_(std::move(policy)),
      pool_(std::move(pool)),
      workers_(std::move(workers)),
      health_(policy_.failure_limit, policy_.cooldown ? policy_.cooldown->first : 0.0,
              policy_.cooldown ? policy_.cooldown->second : 0.0),
      master_addr_(std::move(master_addr)),
      master_port_(master_port) {
  for (const ElasticWorker& w : workers_) {
    alive_.push_back(w.id);
    members_.push_back(w.id);
    next_worker_ = std::max(next_worker_, w.id + 1);
  }
  joined_ = members_;  // generation 0 is the launch itself
  formed_once_ = members_;
  set_discovered(pool_);
  for (const PoolHost& h : pool_) with_agent_.insert(h.host);
}

const ElasticWorker& ElasticDriver::worker(int id) const {
  const auto it = std::find_if(workers_.begin(), workers_.end(),
                               [&](const ElasticWorker& w) { return w.id == id; });
  if (it == workers_.end()) throw Error(fmt::format("elastic: no worker {}", id));
  return *it;
}

WorldChoice ElasticDriver::choose(Clock::time_point now) const {
  std::vector<SlotKey> survivors;
  for (int id : alive_) {
    if (!contains(dismissed_, id)) survivors.push_back(worker(id).slot);
  }
  const auto unusable = [&](const SlotKey& s) { return cooling(s, now); };
  std::vector<PoolHost> usable;
  for (const PoolHost& h : pool_) {
    if (!host_out(h.host, now)) usable.push_back(h);
  }
  return choose_world(usable, survivors, unusable, policy_.max_np);
}

std::vector<ElasticAction> ElasticDriver::start(const std::vector<PoolHost>& spare,
                                                Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  std::vector<PoolHost> listed = discovered_;
  listed.insert(listed.end(), spare.begin(), spare.end());
  set_discovered(std::move(listed));
  std::vector<ElasticAction> out;
  request_agents(now, out);
  auto grow = maybe_grow(now);
  out.insert(out.end(), grow.begin(), grow.end());
  return out;
}

std::vector<ElasticAction> ElasticDriver::on_exit(int id, int exit_code, const std::string& why,
                                                  Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_ || !contains(alive_, id)) return {};
  std::erase(alive_, id);
  if (contains(dismissed_, id)) return {};
  const bool member = contains(members_, id);
  if (exit_code == 0) {
    if (!member) return {};
    // The training finished: the others finish too; no more generations. Workers started for a
    // generation that never formed would wait for peers that are leaving: they are not counted.
    finishing_ = true;
    form_deadline_.reset();
    shortfall_.reset();
    for (int w : alive_) {
      if (!contains(formed_once_, w)) dismissed_.push_back(w);
    }
    if (std::none_of(members_.begin(), members_.end(),
                     [&](int m) { return contains(alive_, m) && !contains(dismissed_, m); })) {
      done_ = true;
      return {elastic_action::Finish{}};
    }
    return {};
  }
  return worker_failed(id, exit_code, why, now);
}

std::vector<ElasticAction> ElasticDriver::on_start_failed(int id, const std::string& why,
                                                          Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_ || !contains(alive_, id)) return {};
  std::erase(alive_, id);
  if (contains(dismissed_, id)) return {};
  return worker_failed(id, 127, why, now);
}

std::vector<ElasticAction> ElasticDriver::worker_failed(int id, int exit_code,
                                                        const std::string& why,
                                                        Clock::time_point now) {
  if (finishing_) {  // a failure after the training finished elsewhere is the job's failure
    done_ = true;
    return {elastic_action::Fail{exit_code, "", ErrorKind::kRemote, id}};
  }
  std::vector<ElasticAction> notes;  // after the generation's line
  charge("slot", slot_name(worker(id).slot), "", now, notes);
  if (!contains(members_, id)) {
    notes.insert(notes.begin(), elastic_action::Log{fmt::format(
                                    "elastic: {} (not in generation {})", why, generation_)});
    return notes;
  }
  auto out = next_generation(why, id, exit_code, ErrorKind::kRemote, false, now);
  out.insert(out.end(), notes.begin(), notes.end());
  return out;
}

std::vector<ElasticAction> ElasticDriver::on_host_lost(const std::string& host,
                                                       const std::string& why,
                                                       Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_) return {};
  std::vector<ElasticAction> notes;
  with_agent_.erase(host);
  joining_.erase(host);
  std::erase(retiring_, host);
  if (std::any_of(discovered_.begin(), discovered_.end(),
                  [&](const PoolHost& h) { return h.host == host; })) {
    charge_host(host, "its agent was lost", now, notes);
  }
  refresh_pool();
  std::vector<int> gone;
  for (int id : alive_) {
    if (worker(id).slot.host == host) gone.push_back(id);
  }
  std::erase_if(alive_, [&](int id) { return contains(gone, id); });
  const bool member = std::any_of(gone.begin(), gone.end(), [&](int id) {
    return contains(members_, id) && !contains(dismissed_, id);
  });
  const int code = to_int(exit_code_of(ErrorKind::kHostLost));
  if (!member) {
    notes.insert(notes.begin(),
                 elastic_action::Log{fmt::format("elastic: {} (no rank of generation {} there)",
                                                 why, generation_)});
    return notes;
  }
  if (finishing_) {
    done_ = true;
    return {elastic_action::Fail{code, why, ErrorKind::kHostLost, std::nullopt}};
  }
  auto out = next_generation(why, std::nullopt, code, ErrorKind::kHostLost, false, now);
  out.insert(out.end(), notes.begin(), notes.end());
  return out;
}

// A formed generation grows when more slots are usable than it holds (a cooldown ended, or the
// job runs below --max-np with free slots).
std::vector<ElasticAction> ElasticDriver::maybe_grow(Clock::time_point now) {
  if (done_ || finishing_ || shortfall_ || growth_blocked_ || !formed()) return {};
  const WorldChoice choice = choose(now);
  // Members whose slot is no longer usable: their host left the discovery's list.
  std::vector<std::string> leaving;
  for (int m : members_) {
    const SlotKey& s = worker(m).slot;
    if (std::find(choice.slots.begin(), choice.slots.end(), s) == choice.slots.end()) {
      leaving.push_back(slot_name(s));
    }
  }
  if (leaving.empty() && choice.size() <= static_cast<int>(members_.size())) return {};
  if (choice.size() < policy_.min_np) {
    // Without the leaving hosts the job would be below --min-np: they stay while they work.
    if (removal_deferred_) return {};
    removal_deferred_ = true;
    return {elastic_action::Log{
        fmt::format("elastic: {} left the host discovery's list, but without {} fewer than "
                    "--min-np {} ranks would remain: {} until more slots come",
                    fmt::join(leaving, ", "), leaving.size() == 1 ? "it" : "them", policy_.min_np,
                    leaving.size() == 1 ? "it stays" : "they stay")}};
  }
  removal_deferred_ = false;
  std::vector<std::string> back, free;
  for (const SlotKey& s : choice.slots) {
    const bool held =
        std::any_of(members_.begin(), members_.end(), [&](int m) { return worker(m).slot == s; });
    if (held) continue;
    const bool failed_before =
        health_.times_blacklisted(slot_name(s)) > 0 || failures_.count(slot_name(s)) != 0;
    (failed_before ? back : free).push_back(slot_name(s));
  }
  std::vector<std::string> parts;
  if (!leaving.empty()) {
    parts.push_back(
        fmt::format("{} no longer listed by the host discovery", fmt::join(leaving, ", ")));
  }
  if (!back.empty()) {
    parts.push_back(fmt::format("{} back after {} cooldown", fmt::join(back, ", "),
                                back.size() == 1 ? "its" : "their"));
  }
  if (!free.empty()) {
    parts.push_back(fmt::format(
        "{} free {}{}", fmt::join(free, ", "), free.size() == 1 ? "slot" : "slots",
        policy_.max_np >= kUnboundedNp ? "" : fmt::format(" up to --max-np {}", policy_.max_np)));
  }
  const std::string reason =
      fmt::format("{}: {}", leaving.empty() ? "growing" : "hosts changed", fmt::join(parts, "; "));
  return next_generation(reason, std::nullopt, 0, ErrorKind::kRemote, true, now);
}

std::vector<ElasticAction> ElasticDriver::next_generation(const std::string& reason,
                                                          std::optional<int> failed, int exit_code,
                                                          ErrorKind kind, bool growth,
                                                          Clock::time_point now) {
  const WorldChoice choice = choose(now);
  // With a failed worker the report names it already; a lost host is named here.
  const std::string cause = failed ? "" : reason + "; ";
  if (choice.size() < policy_.min_np) {
    const std::string left = fmt::format("elastic: {} left, fewer than --min-np {}",
                                         plural(choice.size(), "rank"), policy_.min_np);
    // Wait while a cooled slot may come back; fail at once when none can.
    const auto back = health_.first_back(charged_pool_keys(), now);
    const auto deadline = shortfall_ ? shortfall_->deadline : now + policy_.elastic_timeout;
    // With a host discovery, hosts may come (back) at any time.
    if ((back && *back < deadline) || policy_.discovery) {
      const bool first = !shortfall_;
      if (first) shortfall_ = Shortfall{reason, failed, exit_code, kind, deadline};
      form_deadline_.reset();
      members_.clear();
      joined_.clear();
      if (!first) return {};
      return {elastic_action::Log{fmt::format(
          "{}{}: waiting up to {:.0f} s (--elastic-timeout) for a slot to come back", cause, left,
          std::chrono::duration<double>(policy_.elastic_timeout).count())}};
    }
    done_ = true;
    return {elastic_action::Fail{exit_code, cause + left, kind, failed}};
  }
  if (policy_.reset_limit && generation_ + 1 > *policy_.reset_limit) {
    if (growth) {
      // Nothing failed: the job goes on at its size, and stops growing.
      growth_blocked_ = true;
      return {elastic_action::Log{fmt::format("elastic: not growing ({}): --reset-limit {} reached",
                                              reason, *policy_.reset_limit)}};
    }
    done_ = true;
    return {elastic_action::Fail{
        exit_code,
        fmt::format("{}elastic: --reset-limit {} reached (generation {} was the last)", cause,
                    *policy_.reset_limit, generation_),
        kind, failed}};
  }
  shortfall_.reset();
  // Live workers left out (their host is no longer listed) leave the job: their exits do not
  // count, and libhvd tells them (HVD_ERR_REMOVED) at their reset.
  for (int id : alive_) {
    if (contains(dismissed_, id)) continue;
    const SlotKey& s = worker(id).slot;
    if (std::find(choice.slots.begin(), choice.slots.end(), s) == choice.slots.end()) {
      dismissed_.push_back(id);
    }
  }
  ++generation_;
  members_.clear();
  joined_.clear();
  contract::WorldDoc doc;
  doc.generation = generation_;
  doc.reason = reason;
  doc.master_addr = master_addr_;
  doc.master_port = master_port_;
  doc.sync_root = choice.sync_root;
  elastic_action::Start start;
  for (int r = 0; r < choice.size(); ++r) {
    const SlotKey& slot = choice.slots[static_cast<std::size_t>(r)];
    const contract::RankPlacement& placement = choice.placements[static_cast<std::size_t>(r)];
    const auto it = std::find_if(alive_.begin(), alive_.end(), [&](int id) {
      return worker(id).slot == slot && !contains(dismissed_, id);
    });
    int id = 0;
    if (it != alive_.end()) {
      id = *it;
    } else {  // a free slot: a new worker, started for this generation
      id = next_worker_++;
      workers_.push_back({id, slot});
      alive_.push_back(id);
      start.workers.push_back({id, slot, generation_, placement});
    }
    members_.push_back(id);
    doc.workers.push_back({id, placement.topology, slot.host});
  }
  // Running workers join a growth only at their next commit.
  form_window_ = growth ? policy_.elastic_timeout : policy_.form_timeout;
  form_deadline_ = now + form_window_;
  std::vector<std::string> hosts;
  for (const auto& e : doc.workers) {
    if (std::find(hosts.begin(), hosts.end(), e.host) == hosts.end()) hosts.push_back(e.host);
  }
  std::vector<ElasticAction> out;
  out.emplace_back(elastic_action::Log{
      fmt::format("elastic: generation {}: {} on {} ({})", generation_,
                  plural(choice.size(), "rank"), plural(hosts.size(), "host"), reason),
      !growth});
  out.emplace_back(elastic_action::Publish{std::move(doc), members_});
  if (!start.workers.empty()) out.push_back(std::move(start));
  return out;
}

std::vector<ElasticAction> ElasticDriver::on_joined(int id, int generation, Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_ || generation != generation_ || !contains(members_, id) || contains(joined_, id)) {
    return {};
  }
  joined_.push_back(id);
  if (!formed()) return {};
  form_deadline_.reset();
  for (int m : members_) {
    if (!contains(formed_once_, m)) formed_once_.push_back(m);
  }
  std::vector<ElasticAction> out{elastic_action::Formed{generation_}};
  // Hosts that left the list and hold no worker of this generation: their agents can go.
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    const bool holds = std::any_of(members_.begin(), members_.end(),
                                   [&](int m) { return worker(m).slot.host == *it; });
    if (holds) {
      ++it;
    } else {
      out.push_back(elastic_action::StopAgent{*it});
      it = retiring_.erase(it);
    }
  }
  auto grow = maybe_grow(now);
  out.insert(out.end(), grow.begin(), grow.end());
  return out;
}

std::vector<ElasticAction> ElasticDriver::on_tick(Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_) return {};
  if (shortfall_) {
    if (now >= shortfall_->deadline) {
      done_ = true;
      const Shortfall s = *shortfall_;
      const std::string cause = s.failed ? "" : s.reason + "; ";
      return {elastic_action::Fail{
          s.exit_code,
          fmt::format("{}elastic: fewer than --min-np {} ranks for {:.0f} s (--elastic-timeout)",
                      cause, policy_.min_np,
                      std::chrono::duration<double>(policy_.elastic_timeout).count()),
          s.kind, s.failed}};
    }
    const Shortfall s = *shortfall_;
    std::vector<ElasticAction> out;
    request_agents(now, out);
    auto next = next_generation(s.reason, s.failed, s.exit_code, s.kind, false, now);
    out.insert(out.end(), next.begin(), next.end());
    return out;
  }
  if (form_deadline_ && now >= *form_deadline_) {
    std::vector<int> missing;
    for (int m : members_) {
      if (!contains(joined_, m)) missing.push_back(m);
    }
    done_ = true;
    return {elastic_action::Fail{
        to_int(exit_code_of(ErrorKind::kTimeout)),
        fmt::format("elastic: generation {} did not form within {:.0f} s: worker{} {} never joined",
                    generation_, std::chrono::duration<double>(form_window_).count(),
                    missing.size() == 1 ? "" : "s", fmt::join(missing, ", ")),
        ErrorKind::kTimeout, std::nullopt}};
  }
  std::vector<ElasticAction> out;
  request_agents(now, out);  // hosts whose cooldown ended
  auto grow = maybe_grow(now);
  out.insert(out.end(), grow.begin(), grow.end());
  return out;
}

std::optional<ElasticDriver::Clock::time_point> ElasticDriver::next_deadline() const {
  if (done_) return std::nullopt;
  std::optional<Clock::time_point> next = form_deadline_;
  const auto earlier = [&](std::optional<Clock::time_point> t) {
    if (t && (!next || *t < *next)) next = t;
  };
  if (shortfall_) earlier(shortfall_->deadline);
  // A cooldown that ends may let the job grow (or leave a shortfall).
  if (!finishing_ && !growth_blocked_) {
    earlier(health_.first_back(charged_pool_keys(), last_now_));
  }
  return next;
}

}  // namespace hvd::launcher
