#include "launcher/elastic_driver.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "common/error.h"
#include "launcher/launcher.h"

namespace hvd::launcher {
namespace {

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string slot_name(const SlotKey& s) { return fmt::format("{}#{}", s.host, s.slot); }

std::string plural(std::size_t n, const char* what) {
  return fmt::format("{} {}{}", n, what, n == 1 ? "" : "s");
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
  discovered_ = pool_;
  for (const PoolHost& h : pool_) with_agent_.insert(h.host);
}

void ElasticDriver::refresh_pool() {
  pool_.clear();
  for (const PoolHost& h : discovered_) {
    if (with_agent_.count(h.host) != 0) pool_.push_back(h);
  }
}

// Whether a slot ("host#slot") or a host is charged out now.
bool ElasticDriver::charged_out(const std::string& key, Clock::time_point now) const {
  if (policy_.cooldown) return health_.blacklisted(key, now);
  const auto it = failures_.find(key);
  return it != failures_.end() && it->second >= policy_.failure_limit;
}

bool ElasticDriver::host_out(const std::string& host, Clock::time_point now) const {
  return charged_out(host, now);
}

// One failure against `key` (a slot, "host#slot", or a host; `kind` says which); the log line
// when it is charged out by it. `why`: what failed, for a host (its slots' failures are named in
// the generation's line).
void ElasticDriver::charge(const char* kind, const std::string& key, const std::string& why,
                           Clock::time_point now, std::vector<ElasticAction>& out) {
  const bool warning = !why.empty();
  if (policy_.cooldown) {
    const double jitter = policy_.jitter ? policy_.jitter() : 0.0;
    if (const auto cooldown = health_.record_failure(key, now, jitter)) {
      out.push_back(
          elastic_action::Log{fmt::format("elastic: {} {} cools down for {:.1f} s{}", kind, key,
                                          std::chrono::duration<double>(*cooldown).count(),
                                          why.empty() ? "" : " (" + why + ")"),
                              warning});
    }
    return;
  }
  if (++failures_[key] == policy_.failure_limit) {
    out.push_back(elastic_action::Log{
        fmt::format("elastic: {} {} is out for good ({}--blacklist-cooldown-range gives it a "
                    "cooldown)",
                    kind, key, why.empty() ? "" : why + "; "),
        warning});
  }
}

void ElasticDriver::charge_host(const std::string& host, const std::string& why,
                                Clock::time_point now, std::vector<ElasticAction>& out) {
  charge("host", host, why, now, out);
}

// An agent is started on a listed host only when the job could grow onto it: while the slots
// of the hosts with an agent (or one on its way) are fewer than --max-np.
void ElasticDriver::request_agents(Clock::time_point now, std::vector<ElasticAction>& out) {
  if (done_ || finishing_) return;
  int slots = 0;
  for (const PoolHost& h : discovered_) {
    if ((with_agent_.count(h.host) != 0 || joining_.count(h.host) != 0) && !host_out(h.host, now)) {
      slots += h.slots;
    }
  }
  for (const PoolHost& h : discovered_) {
    if (slots >= policy_.max_np) return;
    if (with_agent_.count(h.host) != 0 || joining_.count(h.host) != 0 || host_out(h.host, now)) {
      continue;
    }
    joining_.insert(h.host);
    slots += h.slots;
    out.push_back(elastic_action::StartAgent{h.host});
  }
}

std::vector<ElasticAction> ElasticDriver::on_discovered(const std::vector<PoolHost>& hosts,
                                                        Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_) return {};
  const auto listed = [&](const std::vector<PoolHost>& in, const std::string& host) {
    return std::find_if(in.begin(), in.end(), [&](const PoolHost& p) { return p.host == host; });
  };
  // Horovod's order: hosts already known keep their places, new ones follow in output order.
  std::vector<PoolHost> order;
  std::vector<std::string> added, removed;
  for (const PoolHost& h : discovered_) {
    if (const auto it = listed(hosts, h.host); it != hosts.end()) {
      order.push_back(*it);
    } else {
      removed.push_back(h.host);
    }
  }
  for (const PoolHost& h : hosts) {
    if (listed(order, h.host) == order.end()) {
      order.push_back(h);
      added.push_back(h.host);
    }
  }
  const bool slots_changed =
      std::any_of(discovered_.begin(), discovered_.end(), [&](const PoolHost& h) {
        const auto it = listed(hosts, h.host);
        return it != hosts.end() && it->slots != h.slots;
      });
  if (added.empty() && removed.empty() && !slots_changed) return {};
  discovered_ = std::move(order);
  std::vector<ElasticAction> out;
  out.push_back(elastic_action::Log{
      fmt::format("elastic: the host discovery lists {}{}{}", plural(discovered_.size(), "host"),
                  added.empty() ? "" : fmt::format("; new: {}", fmt::join(added, ", ")),
                  removed.empty() ? "" : fmt::format("; gone: {}", fmt::join(removed, ", "))),
      false});
  for (const std::string& h : removed) {
    joining_.erase(h);  // an agent still starting there is closed when it is ready
    if (with_agent_.erase(h) != 0) retiring_.push_back(h);
  }
  for (const std::string& h : added) {  // back before its agent was stopped: keep it
    if (const auto it = std::find(retiring_.begin(), retiring_.end(), h); it != retiring_.end()) {
      retiring_.erase(it);
      with_agent_.insert(h);
    }
  }
  refresh_pool();
  request_agents(now, out);
  auto change = shortfall_ ? on_tick(now) : maybe_grow(now);
  out.insert(out.end(), change.begin(), change.end());
  return out;
}

std::vector<ElasticAction> ElasticDriver::on_agent_ready(const std::string& host,
                                                         Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_ || joining_.erase(host) == 0) return {};
  with_agent_.insert(host);
  refresh_pool();
  return shortfall_ ? on_tick(now) : maybe_grow(now);
}

std::vector<ElasticAction> ElasticDriver::on_join_failed(const std::string& host,
                                                         const std::string& why,
                                                         Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  if (done_) return {};
  joining_.erase(host);
  std::vector<ElasticAction> out{
      elastic_action::Log{fmt::format("elastic: host {} could not join: {}", host, why)}};
  charge_host(host, why, now, out);
  return out;
}

const ElasticWorker& ElasticDriver::worker(int id) const {
  const auto it = std::find_if(workers_.begin(), workers_.end(),
                               [&](const ElasticWorker& w) { return w.id == id; });
  if (it == workers_.end()) throw Error(fmt::format("elastic: no worker {}", id));
  return *it;
}

bool ElasticDriver::cooling(const SlotKey& slot, Clock::time_point now) const {
  return charged_out(slot_name(slot), now);
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

std::vector<std::string> ElasticDriver::pool_keys() const {
  std::vector<std::string> keys;
  for (const PoolHost& h : discovered_) {
    keys.push_back(h.host);
    for (int s = 0; s < h.slots; ++s) keys.push_back(slot_name({h.host, s}));
  }
  return keys;
}

std::vector<ElasticAction> ElasticDriver::start(const std::vector<PoolHost>& spare,
                                                Clock::time_point now) {
  last_now_ = std::max(last_now_, now);
  discovered_.insert(discovered_.end(), spare.begin(), spare.end());
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
    const auto back = health_.first_back(pool_keys(), now);
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
    earlier(health_.first_back(pool_keys(), last_now_));
  }
  return next;
}

std::vector<ElasticBlacklistEntry> ElasticDriver::blacklist(Clock::time_point now) const {
  std::vector<ElasticBlacklistEntry> out;
  for (const std::string& key : pool_keys()) {
    if (const int times = health_.times_blacklisted(key); times > 0) {
      out.push_back({key, health_.back_at(key, now), times});
    }
  }
  for (const auto& [key, failures] : failures_) {
    if (failures >= policy_.failure_limit) out.push_back({key, std::nullopt, 1});
  }
  return out;
}

}  // namespace hvd::launcher
